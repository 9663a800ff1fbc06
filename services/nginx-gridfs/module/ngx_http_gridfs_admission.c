
/*
 * gridfs_admission's policy: the limit, the mean latency and the places
 * in use it was measured at, and the queue's state, as plain arithmetic on
 * the times given (ms).  The same policy as services/python-common/
 * lab_http/admission.py and services/node/admission.js, which say why
 * each rule is there; the event loop's side (who waits, who is refused) is
 * in ngx_http_gridfs_response.c.
 */


#include <ngx_config.h>
#include <ngx_core.h>

#include "ngx_http_gridfs.h"


#define NGX_HTTP_GRIDFS_NEVER  (INT64_MIN / 2)


static double ngx_http_gridfs_moved_towards(double mean, double sample);


void
ngx_http_gridfs_admission_init(ngx_http_gridfs_admission_t *a,
    ngx_uint_t maximum)
{
    a->maximum = (double) maximum;
    a->minimum = (double) ngx_min(maximum, NGX_HTTP_GRIDFS_INITIAL_LIMIT);
    a->limit = a->minimum;
    a->mean_latency = 0;
    a->mean_in_flight = 0;
    a->in_flight = 0;
    a->waiting = 0;
    a->decreased_at = NGX_HTTP_GRIDFS_NEVER;
    a->queue_empty_at = 0;
    a->overloaded_until = NGX_HTTP_GRIDFS_NEVER;
    a->answered_at = NGX_HTTP_GRIDFS_NEVER;
    a->back_at = NGX_HTTP_GRIDFS_NEVER;
    ngx_queue_init(&a->waiters);
}


ngx_uint_t
ngx_http_gridfs_admission_has_room(ngx_http_gridfs_admission_t *a)
{
    return a->in_flight < (ngx_uint_t) a->limit;
}


/* a job let in: the places then in use, its own included, the
 * concurrency its latency is measured at */

ngx_uint_t
ngx_http_gridfs_admission_admit(ngx_http_gridfs_admission_t *a)
{
    return ++a->in_flight;
}


/* the queue has not emptied within its budget (standing, not a burst), or
 * was so, or refused a request, less than a target ago; and the database
 * answers (else it is away, not busy) */

ngx_uint_t
ngx_http_gridfs_admission_overloaded(ngx_http_gridfs_admission_t *a,
    int64_t now, ngx_msec_t deadline)
{
    int64_t  budget, target;

    budget = (int64_t) (deadline * NGX_HTTP_GRIDFS_QUEUE_SHARE);
    target = (int64_t) (deadline * NGX_HTTP_GRIDFS_TARGET_SHARE);

    if (now - a->answered_at > budget) {
        return 0;
    }

    if (a->waiting > 0 && now - a->queue_empty_at > budget) {
        a->overloaded_until = now + target;
    }

    return now < a->overloaded_until;
}


/* how long a request that finds no room may wait: the queue's budget for
 * a burst whose turn is expected within it, else the short wait, as once
 * the queue stands; never none, since a refusal answered at once comes
 * straight back from a closed-loop client */

int64_t
ngx_http_gridfs_admission_wait(ngx_http_gridfs_admission_t *a, int64_t now,
    ngx_msec_t deadline)
{
    int64_t  budget, short_wait;

    budget = (int64_t) (deadline * NGX_HTTP_GRIDFS_QUEUE_SHARE);
    short_wait = ngx_min(budget, NGX_HTTP_GRIDFS_SHORT_WAIT_MS);

    if (ngx_http_gridfs_admission_overloaded(a, now, deadline)
        || ngx_http_gridfs_admission_expected_wait(a) > (double) budget)
    {
        return short_wait;
    }

    return budget;
}


/* a newcomer's expected wait for its turn (Little's law): those in line
 * before it and itself over the rate admitted work is done at, the places
 * in use over its latency, both as measured (0 before any sample).  Not
 * the limit's places: at an overload's onset the mean latency is that of
 * fewer at once than the limit lets in, the estimate was short by their
 * ratio, and the burst's tail waited the whole budget in vain */

double
ngx_http_gridfs_admission_expected_wait(ngx_http_gridfs_admission_t *a)
{
    if (a->mean_in_flight == 0) {
        return 0;
    }

    return (a->waiting + 1) * a->mean_latency / a->mean_in_flight;
}


/* a request refused, at the door or after its wait: newcomers wait the
 * short wait for a target; not within a budget of the database's return,
 * when those refused are the ones that waited out the outage */

void
ngx_http_gridfs_admission_refused(ngx_http_gridfs_admission_t *a,
    int64_t now, ngx_msec_t deadline)
{
    if (now - a->back_at < (int64_t) (deadline * NGX_HTTP_GRIDFS_QUEUE_SHARE))
    {
        return;
    }

    a->overloaded_until = now
                          + (int64_t) (deadline * NGX_HTTP_GRIDFS_TARGET_SHARE);
}


/* admitted work that found the deployment unreachable got an answer
 * after the database answered nothing for a budget (or less than a budget
 * after such an answer: the same return): the line that built meanwhile
 * is the outage's backlog, not one that stands, and goes in at once, as
 * without admission (behind a limit fit for the load before, newcomers
 * waited for it past the queue's budget while the restarted database's
 * first queries were slow); the latency of what is admitted brings the
 * limit down again if need be.  While the database answers, such work
 * met a check of the driver's that failed under load: no outage */

void
ngx_http_gridfs_admission_back(ngx_http_gridfs_admission_t *a, int64_t now,
    ngx_msec_t deadline)
{
    int64_t  budget;

    budget = (int64_t) (deadline * NGX_HTTP_GRIDFS_QUEUE_SHARE);

    if (now - a->answered_at <= budget && now - a->back_at >= budget) {
        return;
    }

    a->answered_at = now;
    a->back_at = now;
    a->overloaded_until = NGX_HTTP_GRIDFS_NEVER;
    a->limit = ngx_min(a->maximum,
                       ngx_max(a->limit, (double) (a->in_flight + a->waiting)));

    if (a->waiting > 0) {
        a->queue_empty_at = now;
    }
}


void
ngx_http_gridfs_admission_queued(ngx_http_gridfs_admission_t *a, int64_t now)
{
    if (a->waiting++ == 0) {
        a->queue_empty_at = now;
    }
}


void
ngx_http_gridfs_admission_dequeued(ngx_http_gridfs_admission_t *a,
    int64_t now)
{
    if (a->waiting > 0 && --a->waiting == 0) {
        a->queue_empty_at = now;
    }
}


/* an admitted request's database work before its headers is over: AIMD on
 * its latency, against a quarter of its deadline */

void
ngx_http_gridfs_admission_finished(ngx_http_gridfs_admission_t *a,
    int64_t admitted_at, ngx_uint_t admitted_in_flight, int64_t now,
    ngx_msec_t deadline, ngx_int_t outcome)
{
    double  latency, target, factor, step;

    if (a->in_flight > 0) {
        a->in_flight--;
    }

    /* a client gone says nothing, nor work that waited for an outage: a
     * database away is not a busy one */
    if (outcome == NGX_HTTP_GRIDFS_ADMISSION_NONE
        || outcome == NGX_HTTP_GRIDFS_ADMISSION_AWAY)
    {
        return;
    }

    latency = (double) (now - admitted_at);
    target = deadline * NGX_HTTP_GRIDFS_TARGET_SHARE;

    if (outcome == NGX_HTTP_GRIDFS_ADMISSION_SAMPLE) {
        a->answered_at = now;
    }

    /* nor work admitted before it came back: its latency was the
     * outage's */
    if (admitted_at < a->back_at) {
        return;
    }

    if (outcome == NGX_HTTP_GRIDFS_ADMISSION_SAMPLE) {
        /* a failure's latency is the deadline's or the driver's, not the
         * work's */
        a->mean_latency = ngx_http_gridfs_moved_towards(a->mean_latency,
                                                        latency);
        a->mean_in_flight = ngx_http_gridfs_moved_towards(a->mean_in_flight,
                                                          admitted_in_flight);
    }

    if (outcome == NGX_HTTP_GRIDFS_ADMISSION_FAILED || latency > target) {

        /* once per round: those admitted before the last cut were measured
         * under the old limit */
        if (admitted_at >= a->decreased_at) {
            /* in proportion to the overshoot, halved at most */
            factor = target / ngx_max(latency, 1.0);
            factor = ngx_max(0.5, ngx_min(NGX_HTTP_GRIDFS_BACKOFF, factor));

            a->limit = ngx_max(a->minimum, a->limit * factor);
            a->decreased_at = now;
        }

        return;
    }

    /* grow only a limit in use */
    if (2 * (a->in_flight + 1) >= a->limit) {
        step = (latency < target / 2) ? 1.0 : 1.0 / a->limit;
        a->limit = ngx_min(a->maximum, a->limit + step);
    }
}


/* a mean moved by NGX_HTTP_GRIDFS_LATENCY_WEIGHT towards a new sample; the
 * first sample itself */

static double
ngx_http_gridfs_moved_towards(double mean, double sample)
{
    if (mean == 0) {
        return sample;
    }

    return mean + NGX_HTTP_GRIDFS_LATENCY_WEIGHT * (sample - mean);
}
