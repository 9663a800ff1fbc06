/*
 * A driver of ngx_http_gridfs_admission.c, the module's admission policy
 * (plain arithmetic on the times given), for
 * tests/test_nginx_gridfs_admission_policy.py: one command a line on
 * stdin, one answer a line on stdout, flushed, so that a test steps the
 * policy and reads it between steps.  Times in ms.
 *
 *   init MAXIMUM DEADLINE       a policy, as a worker starts it
 *   set FIELD VALUE             limit, mean_latency, mean_in_flight,
 *                               in_flight, waiting
 *   has_room | expected_wait | state
 *   admit                       one more in flight: the places now in use
 *   overloaded NOW | wait NOW | refused NOW | queued NOW | dequeued NOW
 *   back NOW                    work that found the database away answered
 *   finished ADMITTED_AT NOW sample|failed|none|away [PLACES]
 *                               PLACES: in use when it was admitted, its
 *                               own included; without it, those in use
 *                               now (1 at least)
 *
 * Answers "ok" to a step, the value asked for otherwise, "error ..." to a
 * line it does not know.
 */


#include "ngx_http_gridfs.h"

#include <stdio.h>
#include <string.h>


int
main(void)
{
    char                         line[256], cmd[32], field[32], what[16];
    double                       value;
    long long                    t1, t2, places;
    ngx_msec_t                   deadline;
    ngx_http_gridfs_admission_t  a;

    ngx_http_gridfs_admission_init(&a, 100);
    deadline = 3000;

    while (fgets(line, sizeof(line), stdin) != NULL) {

        if (sscanf(line, "%31s", cmd) != 1) {
            continue;
        }

        if (strcmp(cmd, "init") == 0
            && sscanf(line, "%*s %lld %lld", &t1, &t2) == 2)
        {
            ngx_http_gridfs_admission_init(&a, (ngx_uint_t) t1);
            deadline = (ngx_msec_t) t2;
            puts("ok");

        } else if (strcmp(cmd, "set") == 0
                   && sscanf(line, "%*s %31s %lf", field, &value) == 2)
        {
            if (strcmp(field, "limit") == 0) {
                a.limit = value;

            } else if (strcmp(field, "mean_latency") == 0) {
                a.mean_latency = value;

            } else if (strcmp(field, "mean_in_flight") == 0) {
                a.mean_in_flight = value;

            } else if (strcmp(field, "in_flight") == 0) {
                a.in_flight = (ngx_uint_t) value;

            } else if (strcmp(field, "waiting") == 0) {
                a.waiting = (ngx_uint_t) value;

            } else {
                printf("error: no field %s\n", field);
                fflush(stdout);
                continue;
            }

            puts("ok");

        } else if (strcmp(cmd, "has_room") == 0) {
            printf("%d\n", (int) ngx_http_gridfs_admission_has_room(&a));

        } else if (strcmp(cmd, "expected_wait") == 0) {
            printf("%.6f\n", ngx_http_gridfs_admission_expected_wait(&a));

        } else if (strcmp(cmd, "admit") == 0) {
            printf("%lu\n",
                   (unsigned long) ngx_http_gridfs_admission_admit(&a));

        } else if (strcmp(cmd, "state") == 0) {
            printf("limit %.6f mean_latency %.6f mean_in_flight %.6f "
                   "in_flight %lu waiting %lu\n",
                   a.limit, a.mean_latency, a.mean_in_flight,
                   (unsigned long) a.in_flight, (unsigned long) a.waiting);

        } else if (sscanf(line, "%*s %lld", &t1) != 1) {
            printf("error: %s needs a time\n", cmd);

        } else if (strcmp(cmd, "overloaded") == 0) {
            printf("%d\n", (int) ngx_http_gridfs_admission_overloaded(&a, t1,
                                                                  deadline));

        } else if (strcmp(cmd, "wait") == 0) {
            printf("%lld\n",
                   (long long) ngx_http_gridfs_admission_wait(&a, t1,
                                                              deadline));

        } else if (strcmp(cmd, "refused") == 0) {
            ngx_http_gridfs_admission_refused(&a, t1, deadline);
            puts("ok");

        } else if (strcmp(cmd, "back") == 0) {
            ngx_http_gridfs_admission_back(&a, t1, deadline);
            puts("ok");

        } else if (strcmp(cmd, "queued") == 0) {
            ngx_http_gridfs_admission_queued(&a, t1);
            puts("ok");

        } else if (strcmp(cmd, "dequeued") == 0) {
            ngx_http_gridfs_admission_dequeued(&a, t1);
            puts("ok");

        } else if (strcmp(cmd, "finished") == 0
                   && sscanf(line, "%*s %lld %lld %15s", &t1, &t2, what) == 3)
        {
            if (sscanf(line, "%*s %*s %*s %*s %lld", &places) != 1) {
                places = (long long) ngx_max(a.in_flight, 1);
            }

            ngx_http_gridfs_admission_finished(&a, t1, (ngx_uint_t) places,
                                               t2, deadline,
                strcmp(what, "sample") == 0 ? NGX_HTTP_GRIDFS_ADMISSION_SAMPLE
                : strcmp(what, "failed") == 0 ? NGX_HTTP_GRIDFS_ADMISSION_FAILED
                : strcmp(what, "away") == 0 ? NGX_HTTP_GRIDFS_ADMISSION_AWAY
                : NGX_HTTP_GRIDFS_ADMISSION_NONE);
            puts("ok");

        } else {
            printf("error: %s", line);
        }

        fflush(stdout);
    }

    return 0;
}
