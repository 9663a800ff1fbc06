
/*
 * The response machine of ngx_http_gridfs_module, on the event loop: posts
 * jobs to the thread pool, wakes when they are done, sends the headers
 * once the first window is read, then the windows, double buffered.
 *
 * Lifetimes.  A response (ngx_http_gridfs_ctx_t) lives in its request's
 * pool; its job, with everything a thread writes into, on the heap.  Each
 * event of the module carries what it acts on: the job's completion its
 * job, the deadline's and the place's timers their response; none finds
 * its state again through r->ctx, which error_page's internal redirect
 * clears (only the request's write event handler does, and a redirect
 * replaces it).  Once the module finalizes the request, or nginx
 * terminates it, the response is done: it acts on the request no more,
 * leaves the place queue, and its job, if in flight, skips its query.  A
 * job in flight when its request is freed is detached from it, and freed
 * by its own completion.  The request is never held for a job: no
 * r->main->blocked, no r->aio (which would stop the copy filter from
 * sending a window while the next one is read).
 *
 * While a job is in flight, or a response waits for a place, the worker
 * holds a timer that is not cancelable: a graceful shutdown (a reload,
 * nginx -s quit) waits for them, as it waits for a response being sent.
 */


#include <ngx_config.h>
#include <ngx_core.h>
#include <ngx_http.h>

#include "ngx_http_gridfs_http.h"


/* the period of the worker's hold: it is deleted once nothing is pending,
 * renewed while something is */
#define NGX_HTTP_GRIDFS_HOLD_MS  60000


static void ngx_http_gridfs_hold_handler(ngx_event_t *ev);
static void ngx_http_gridfs_terminated(void *data);
static ngx_int_t ngx_http_gridfs_post(ngx_http_gridfs_ctx_t *ctx);
static void ngx_http_gridfs_deadline_handler(ngx_event_t *ev);
static void ngx_http_gridfs_job_event_handler(ngx_event_t *ev);
static void ngx_http_gridfs_wake_handler(ngx_http_request_t *r);
static void ngx_http_gridfs_job_done(ngx_http_gridfs_ctx_t *ctx);
static void ngx_http_gridfs_found(ngx_http_gridfs_ctx_t *ctx);
static ngx_int_t ngx_http_gridfs_admit(ngx_http_gridfs_ctx_t *ctx);
static void ngx_http_gridfs_admitted_handler(ngx_event_t *ev);
static void ngx_http_gridfs_admission_end(ngx_http_gridfs_job_t *job,
    ngx_int_t outcome);
static ngx_int_t ngx_http_gridfs_outcome(ngx_uint_t status);
static ngx_int_t ngx_http_gridfs_take_place(ngx_http_gridfs_ctx_t *ctx);
static void ngx_http_gridfs_placed_handler(ngx_event_t *ev);
static void ngx_http_gridfs_give_place(ngx_http_gridfs_places_t *places);
static void ngx_http_gridfs_read_ahead(ngx_http_gridfs_ctx_t *ctx);
static void ngx_http_gridfs_first_window(ngx_http_gridfs_ctx_t *ctx);
static ngx_int_t ngx_http_gridfs_send_header(ngx_http_gridfs_ctx_t *ctx);
static ngx_int_t ngx_http_gridfs_plan_windows(ngx_http_gridfs_ctx_t *ctx);
static ngx_int_t ngx_http_gridfs_stream_start(ngx_http_gridfs_ctx_t *ctx,
    int64_t chunks, int64_t total);
static void ngx_http_gridfs_stream_release(ngx_http_gridfs_stream_t *stream);
static void ngx_http_gridfs_stream_done(ngx_event_t *ev);
static void ngx_http_gridfs_stream_end(ngx_http_gridfs_stream_t *stream);
static void ngx_http_gridfs_log_job_error(ngx_http_gridfs_ctx_t *ctx,
    const char *what);
static void ngx_http_gridfs_fetch_window(ngx_http_gridfs_ctx_t *ctx);
static void ngx_http_gridfs_send_window(ngx_http_gridfs_ctx_t *ctx);
static void ngx_http_gridfs_drain(ngx_http_gridfs_ctx_t *ctx);
static ngx_int_t ngx_http_gridfs_wait_write(ngx_http_request_t *r);
static void ngx_http_gridfs_finalize(ngx_http_gridfs_ctx_t *ctx,
    ngx_int_t rc);
static void ngx_http_gridfs_release(ngx_http_gridfs_ctx_t *ctx);
static void ngx_http_gridfs_job_release(ngx_http_gridfs_job_t *job);
static void ngx_http_gridfs_job_free(ngx_http_gridfs_job_t *job);


/* what holds this worker through a graceful shutdown: tasks in flight and
 * responses waiting for a place */
static ngx_uint_t   ngx_http_gridfs_pending;
static ngx_event_t  ngx_http_gridfs_hold;


void
ngx_http_gridfs_hold_add(void)
{
    if (ngx_http_gridfs_pending++ > 0) {
        return;
    }

    if (ngx_http_gridfs_hold.handler == NULL) {
        ngx_http_gridfs_hold.handler = ngx_http_gridfs_hold_handler;
        ngx_http_gridfs_hold.log = ngx_cycle->log;
        /* not cancelable: ngx_event_no_timers_left() waits for it */
        ngx_http_gridfs_hold.cancelable = 0;
    }

    ngx_add_timer(&ngx_http_gridfs_hold, NGX_HTTP_GRIDFS_HOLD_MS);
}


void
ngx_http_gridfs_hold_del(void)
{
    if (ngx_http_gridfs_pending == 0) {
        ngx_log_error(NGX_LOG_ALERT, ngx_cycle->log, 0,
                      "gridfs: nothing pending to release");
        return;
    }

    if (--ngx_http_gridfs_pending == 0 && ngx_http_gridfs_hold.timer_set) {
        ngx_del_timer(&ngx_http_gridfs_hold);
    }
}


static void
ngx_http_gridfs_hold_handler(ngx_event_t *ev)
{
    if (ngx_http_gridfs_pending) {
        ngx_add_timer(ev, NGX_HTTP_GRIDFS_HOLD_MS);
    }
}


/* every task of the module is posted here: counted for the worker's hold,
 * and for its exit (ngx_http_gridfs_tasks, which the thread decrements
 * when the task is over); its completion calls ngx_http_gridfs_hold_del() */

ngx_int_t
ngx_http_gridfs_task_post(ngx_thread_pool_t *tp, ngx_thread_task_t *task)
{
    (void) ngx_atomic_fetch_add(&ngx_http_gridfs_tasks, 1);

    if (ngx_thread_task_post(tp, task) != NGX_OK) {
        (void) ngx_atomic_fetch_add(&ngx_http_gridfs_tasks, -1);
        return NGX_ERROR;
    }

    ngx_http_gridfs_hold_add();

    return NGX_OK;
}


/* an error before any header: none of the file's headers (ETag,
 * Last-Modified...) go with it, and a 503 says when to retry */

ngx_int_t
ngx_http_gridfs_error(ngx_http_request_t *r, ngx_int_t status)
{
    ngx_table_elt_t  *h;

    ngx_http_clean_header(r);

    if (status != NGX_HTTP_SERVICE_UNAVAILABLE) {
        return status;
    }

    h = ngx_list_push(&r->headers_out.headers);
    if (h == NULL) {
        /* a 503 all the same */
        return status;
    }

    h->hash = 1;
#if (nginx_version >= 1023000)
    h->next = NULL;
#endif
    ngx_str_set(&h->key, "Retry-After");
    ngx_str_set(&h->value, "1");

    return status;
}


/* the response and its job; the key is copied into the job.  The pool
 * cleanup detaches the job from the request when the request is freed,
 * the request cleanup (run when nginx terminates it) ends the response */

ngx_http_gridfs_ctx_t *
ngx_http_gridfs_create(ngx_http_request_t *r, ngx_http_gridfs_loc_conf_t *glcf,
    ngx_str_t *key)
{
    ngx_pool_cleanup_t     *cln;
    ngx_http_cleanup_t     *hcln;
    ngx_http_gridfs_job_t  *job;
    ngx_http_gridfs_ctx_t  *ctx;

    ctx = ngx_pcalloc(r->pool, sizeof(ngx_http_gridfs_ctx_t));
    if (ctx == NULL) {
        return NULL;
    }

    cln = ngx_pool_cleanup_add(r->pool, 0);
    hcln = ngx_http_cleanup_add(r, 0);

    if (cln == NULL || hcln == NULL) {
        return NULL;
    }

    job = ngx_calloc(sizeof(ngx_http_gridfs_job_t) + key->len,
                     r->connection->log);
    if (job == NULL) {
        return NULL;
    }

    job->key.data = (u_char *) (job + 1);
    job->key.len = key->len;
    ngx_memcpy(job->key.data, key->data, key->len);

    job->conf = glcf;
    job->ctx = ctx;

    job->task.ctx = job;
    job->task.handler = ngx_http_gridfs_job_handler;
    job->task.event.data = job;
    job->task.event.handler = ngx_http_gridfs_job_event_handler;
    job->task.event.log = ngx_cycle->log;

    ctx->request = r;
    ctx->job = job;

    ctx->deadline.handler = ngx_http_gridfs_deadline_handler;
    ctx->deadline.data = ctx;
    ctx->deadline.log = r->connection->log;
    /* a worker shutting down gracefully waits for the pending work
     * itself (the hold), not for this */
    ctx->deadline.cancelable = 1;

    ctx->placed.handler = ngx_http_gridfs_placed_handler;
    ctx->placed.data = ctx;
    ctx->placed.log = r->connection->log;

    ctx->admitted.handler = ngx_http_gridfs_admitted_handler;
    ctx->admitted.data = ctx;
    ctx->admitted.log = r->connection->log;

    cln->handler = ngx_http_gridfs_cleanup;
    cln->data = ctx;

    hcln->handler = ngx_http_gridfs_terminated;
    hcln->data = ctx;

    return ctx;
}


/* the lookup posted, or its turn awaited: the request then waits for it
 * (its count), reading as nginx's writer does (a client that leaves, or a
 * body to discard) */

ngx_int_t
ngx_http_gridfs_start(ngx_http_gridfs_ctx_t *ctx)
{
    ngx_int_t                    rc;
    ngx_http_request_t          *r;
    ngx_http_gridfs_loc_conf_t  *glcf;

    r = ctx->request;
    glcf = ctx->job->conf;

    ngx_http_set_ctx(r, ctx, ngx_http_gridfs_module);

    ctx->job->op = NGX_HTTP_GRIDFS_FIND;

    rc = (glcf->admission && glcf->deadline) ? ngx_http_gridfs_admit(ctx)
                                             : NGX_OK;

    if (rc == NGX_DECLINED) {
        ngx_log_error(glcf->overload_log_level, r->connection->log, 0,
                      "gridfs: \"%V\" refused by gridfs_admission (%ui "
                      "admitted at once): 503",
                      &ctx->log_key, ctx->job->admission->in_flight);
        ngx_http_gridfs_release(ctx);
        return ngx_http_gridfs_error(r, NGX_HTTP_SERVICE_UNAVAILABLE);
    }

    if (rc == NGX_OK && ngx_http_gridfs_post(ctx) != NGX_OK) {
        ngx_log_error(NGX_LOG_ERR, r->connection->log, 0,
                      "gridfs: could not post a job for \"%V\" (the thread "
                      "pool's queue is full?)", &ctx->log_key);
        ngx_http_gridfs_release(ctx);
        return ngx_http_gridfs_error(r, NGX_HTTP_SERVICE_UNAVAILABLE);
    }

    r->read_event_handler = r->discard_body
                            ? ngx_http_discarded_request_body_handler
                            : ngx_http_test_reading;
    r->write_event_handler = ngx_http_gridfs_wake_handler;

    if (glcf->deadline) {
        ngx_http_gridfs_start_deadline(ctx, glcf->deadline);
    }

    r->main->count++;

    return NGX_DONE;
}


static ngx_int_t
ngx_http_gridfs_post(ngx_http_gridfs_ctx_t *ctx)
{
    ngx_http_gridfs_job_t       *job;
    ngx_http_gridfs_loc_conf_t  *glcf;

    job = ctx->job;
    glcf = job->conf;

    job->status = 0;
    job->unreachable = 0;
    job->abandoned = 0;
    job->nparts = 0;
    job->opened = 0;
    job->no_client = 0;
    job->error.domain = 0;
    job->error.code = 0;
    job->error.message[0] = '\0';
    job->posted_ms = ngx_http_gridfs_now_ms();

    /* once the headers are out, a late window beats a cut response */
    job->max_wait = ctx->header_sent ? 0 : glcf->queue_timeout;
    job->continued = ctx->header_sent;

    job->busy = 1;

    if (ngx_http_gridfs_task_post(glcf->thread_pool, &job->task) != NGX_OK) {
        job->busy = 0;
        return NGX_ERROR;
    }

    /* a lookup is the first job: LOOKUP, the state a response starts in */

    if (job->op == NGX_HTTP_GRIDFS_READ) {

        if (!ctx->header_sent) {
            ctx->state = NGX_HTTP_GRIDFS_READ_AHEAD;

        } else if (ctx->state == NGX_HTTP_GRIDFS_DRAINING) {
            ctx->state = NGX_HTTP_GRIDFS_READING_DRAINING;

        } else {
            ctx->state = NGX_HTTP_GRIDFS_READING;
        }
    }

    return NGX_OK;
}


/* gridfs_deadline, counted from the request's arrival as the other
 * paths count theirs: if the headers are not out by then, the answer is a
 * 503 at once, whatever the job in flight is waiting for (a thread, a
 * pooled client, a frozen server: libmongoc has no deadline per
 * operation, only the socket timeout), or the place it waits for */

void
ngx_http_gridfs_start_deadline(ngx_http_gridfs_ctx_t *ctx,
    ngx_msec_t deadline)
{
    ngx_time_t          *tp;
    ngx_msec_int_t       elapsed;
    ngx_http_request_t  *r;

    r = ctx->request;
    tp = ngx_timeofday();

    elapsed = (ngx_msec_int_t) ((tp->sec - r->start_sec) * 1000
                                + (tp->msec - r->start_msec));
    elapsed = ngx_max(elapsed, 0);

    ngx_add_timer(&ctx->deadline, (ngx_msec_t) elapsed < deadline
                                  ? deadline - (ngx_msec_t) elapsed : 1);
}


static void
ngx_http_gridfs_deadline_handler(ngx_event_t *ev)
{
    ngx_connection_t            *c;
    ngx_http_request_t          *r;
    ngx_http_gridfs_ctx_t       *ctx;
    ngx_http_gridfs_loc_conf_t  *glcf;

    ctx = ev->data;
    r = ctx->request;
    c = r->connection;

    if (ctx->done) {
        return;
    }

    ngx_http_set_log_request(c->log, r);

    glcf = ctx->job->conf;

    if (ctx->state == NGX_HTTP_GRIDFS_WAIT_ADMISSION) {
        ngx_log_error(glcf->overload_log_level, c->log, 0,
                      "gridfs: \"%V\" waited for its turn of "
                      "gridfs_admission past gridfs_deadline (%M ms): 503",
                      &ctx->log_key, glcf->deadline);

        ngx_http_gridfs_admission_refused(ctx->job->admission,
                                          ngx_http_gridfs_now_ms(),
                                          glcf->deadline);

        /* no job in flight: it leaves the line now */
        ngx_http_gridfs_finalize(ctx, ngx_http_gridfs_error(r,
                                             NGX_HTTP_SERVICE_UNAVAILABLE));
        ngx_http_run_posted_requests(c);
        return;
    }

    /* the work admitted did not finish in time: the limit comes down */
    ctx->job->late = 1;

    if (ctx->state == NGX_HTTP_GRIDFS_WAIT_PLACE) {

        if (ctx->wait_bound) {
            ngx_log_error(glcf->overload_log_level, c->log, 0,
                          "gridfs: \"%V\" waited for one of the %ui places "
                          "of gridfs_max_responses longer than "
                          "gridfs_queue_timeout (%M ms): %s",
                          &ctx->log_key, ctx->places->max,
                          glcf->queue_timeout,
                          ctx->header_sent ? "cut short" : "503");
        } else {
            ngx_log_error(glcf->overload_log_level, c->log, 0,
                          "gridfs: \"%V\" waited for one of the %ui places "
                          "of gridfs_max_responses longer than "
                          "gridfs_deadline (%M ms): 503",
                          &ctx->log_key, ctx->places->max, glcf->deadline);
        }

        /* no job in flight, no window: it leaves the queue now */
        ngx_http_gridfs_finalize(ctx, ctx->header_sent
                                 ? NGX_ERROR
                                 : ngx_http_gridfs_error(r,
                                             NGX_HTTP_SERVICE_UNAVAILABLE));
        ngx_http_run_posted_requests(c);
        return;
    }

    /* only a job in flight before the headers: otherwise the response
     * has answered, or is answering, by itself */
    if (ctx->header_sent
        || (ctx->state != NGX_HTTP_GRIDFS_LOOKUP
            && ctx->state != NGX_HTTP_GRIDFS_READ_AHEAD))
    {
        return;
    }

    ngx_log_error(glcf->overload_log_level, c->log, 0,
                  "gridfs: %s \"%V\" took longer than gridfs_deadline "
                  "(%M ms): 503",
                  ctx->state == NGX_HTTP_GRIDFS_LOOKUP ? "looking up"
                                                       : "reading",
                  &ctx->log_key, glcf->deadline);

    /* a job not started yet skips its query; one under way ends by the
     * socket timeout, detached from the request if it has gone by then.
     * No window is in the output chain yet: the 503 goes out now */
    ngx_http_gridfs_finalize(ctx, ngx_http_gridfs_error(r,
                                             NGX_HTTP_SERVICE_UNAVAILABLE));
    ngx_http_run_posted_requests(c);
}


/* the deployment is marked unavailable: answer 503 at once, and let a
 * single background ping find out when it is back */

ngx_int_t
ngx_http_gridfs_available(ngx_http_request_t *r,
    ngx_http_gridfs_loc_conf_t *glcf, ngx_str_t *log_key)
{
    ngx_http_gridfs_conn_t  *conn;

    conn = glcf->conn;

    if (!conn->down) {
        return NGX_OK;
    }

    if (!conn->probing
        && (ngx_msec_int_t) (ngx_current_msec - conn->next_probe) >= 0
        && conn->probe != NULL)
    {
        if (ngx_http_gridfs_task_post(conn->thread_pool, conn->probe)
            == NGX_OK)
        {
            conn->probing = 1;
        }
    }

    /* at info: the outage itself was logged once, when it began */
    ngx_log_error(NGX_LOG_INFO, r->connection->log, 0,
                  "gridfs: MongoDB unavailable, looking up \"%V\" in "
                  "%V.%V: %V did not answer recently, retrying in the "
                  "background", log_key, &glcf->db, &glcf->files,
                  &conn->display);

    return NGX_DECLINED;
}


/* the end of a task: the job is the event's, whatever became of its
 * request meanwhile */

static void
ngx_http_gridfs_job_event_handler(ngx_event_t *ev)
{
    ngx_connection_t       *c;
    ngx_http_request_t     *r;
    ngx_http_gridfs_job_t  *job;
    ngx_http_gridfs_ctx_t  *ctx;

    job = ev->data;
    job->busy = 0;

    ctx = job->ctx;

    if (ctx == NULL) {
        /* its request was freed while the task ran */
        ngx_http_gridfs_admission_end(job, NGX_HTTP_GRIDFS_ADMISSION_NONE);
        ngx_http_gridfs_job_free(job);
        ngx_http_gridfs_hold_del();
        return;
    }

    if (ctx->done) {
        /* the response ended (a deadline, a client gone, an error page);
         * its turn goes now that the query is over, its buffers unless
         * the output may still hold them */
        ngx_http_gridfs_admission_end(job, NGX_HTTP_GRIDFS_ADMISSION_NONE);

        if (!ctx->sending) {
            ngx_http_gridfs_job_release(job);
        }

        ngx_http_gridfs_hold_del();
        return;
    }

    r = ctx->request;
    c = r->connection;

    ngx_http_set_log_request(c->log, r);

    if (c->error) {
        ngx_http_gridfs_finalize(ctx, NGX_ERROR);

    } else {
        ngx_http_gridfs_job_done(ctx);
    }

    /* after the next job, if any, was posted: the hold's timer stays */
    ngx_http_gridfs_hold_del();

    ngx_http_run_posted_requests(c);
}


/* a write event: a window handed to the output filters may be draining,
 * while a job reads the next one or not.  The only handler that finds its
 * response through r->ctx: a redirect that clears r->ctx replaces it */

static void
ngx_http_gridfs_wake_handler(ngx_http_request_t *r)
{
    ngx_http_gridfs_ctx_t  *ctx;

    ctx = ngx_http_get_module_ctx(r, ngx_http_gridfs_module);

    if (ctx == NULL || ctx->done || ctx->request != r) {
        return;
    }

    switch (ctx->state) {

    case NGX_HTTP_GRIDFS_DRAINING:
    case NGX_HTTP_GRIDFS_READING_DRAINING:
    case NGX_HTTP_GRIDFS_READ_DRAINING:
        ngx_http_gridfs_drain(ctx);
        return;

    default:
        /* nothing drains: the job's end moves the response on; a
         * level-triggered event (poll, select) is removed, not spun on */
        if (ngx_handle_write_event(r->connection->write, 0) != NGX_OK) {
            ngx_http_gridfs_finalize(ctx, NGX_ERROR);
        }

        return;
    }
}


/* the end of a job */

static void
ngx_http_gridfs_job_done(ngx_http_gridfs_ctx_t *ctx)
{
    ngx_http_gridfs_job_t  *job;

    job = ctx->job;

    if (job->op == NGX_HTTP_GRIDFS_FIND) {
        ngx_http_gridfs_found(ctx);
        return;
    }

    if (ctx->state == NGX_HTTP_GRIDFS_READING) {
        ctx->state = NGX_HTTP_GRIDFS_SENT_HEADER;

    } else if (ctx->state == NGX_HTTP_GRIDFS_READING_DRAINING) {
        ctx->state = NGX_HTTP_GRIDFS_READ_DRAINING;
    }

    if (job->stream && job->no_client) {
        /* the first read from the cursor found no spare client: nothing
         * was read, the same window is read again by a query, into the
         * same half (its position, send_pos, has not moved) */
        ngx_http_gridfs_stream_release(job->stream);
        job->stream = NULL;

        ngx_log_debug0(NGX_LOG_DEBUG_HTTP, ctx->request->connection->log, 0,
                       "gridfs no spare client: a query per window");

        ctx->half = job->half;

        if (ctx->state == NGX_HTTP_GRIDFS_READ_DRAINING) {
            ctx->state = NGX_HTTP_GRIDFS_DRAINING;
        }

        ngx_http_gridfs_fetch_window(ctx);
        return;
    }

    if (job->opened) {
        ngx_log_debug1(NGX_LOG_DEBUG_HTTP, ctx->request->connection->log, 0,
                       "gridfs cursor opened at chunk %L", job->first_n);
    }

    switch (ctx->state) {

    case NGX_HTTP_GRIDFS_READ_AHEAD:
        ngx_http_gridfs_first_window(ctx);
        return;

    case NGX_HTTP_GRIDFS_READ_DRAINING:
        /* sent once the previous window has drained */
        ngx_http_gridfs_drain(ctx);
        return;

    default: /* NGX_HTTP_GRIDFS_SENT_HEADER */
        ngx_http_gridfs_send_window(ctx);
    }
}


/* the files document is here: headers built, then the first window read
 * before they are sent, unless the answer may have no body */

static void
ngx_http_gridfs_found(ngx_http_gridfs_ctx_t *ctx)
{
    off_t                   start, end;
    ngx_int_t               rc;
    ngx_http_request_t     *r;
    ngx_http_gridfs_job_t  *job;

    r = ctx->request;
    job = ctx->job;

    start = 0;
    end = 0;

    ctx->file = job->file;
    job->file = NULL;

    if (job->status) {
        ngx_http_gridfs_admission_end(job,
                                      ngx_http_gridfs_outcome(job->status));
        ngx_http_gridfs_log_job_error(ctx, "looking up");
        ngx_http_gridfs_finalize(ctx, ngx_http_gridfs_error(r, job->status));
        return;
    }

    rc = ngx_http_gridfs_set_headers(r, ctx);

    /* everything the response needs has been copied out of it */
    bson_destroy(ctx->file);
    ctx->file = NULL;

    if (rc != NGX_OK) {
        ngx_http_gridfs_finalize(ctx, ngx_http_gridfs_error(r, rc));
        return;
    }

    rc = ngx_http_gridfs_predict_range(r, &start, &end);

    /* the range filter serves its range from content_offset on */
    ctx->range_start = (rc == NGX_OK) ? start : 0;

    if (rc == NGX_HTTP_RANGE_NOT_SATISFIABLE
        || r->header_only
        || ctx->length == 0
        || ngx_http_gridfs_predict_conditional(r) != NGX_HTTP_OK)
    {
        /* 416, HEAD, or a 304/412: no body to read ahead, the database
         * work before the headers is over */
        ngx_http_gridfs_admission_end(job, NGX_HTTP_GRIDFS_ADMISSION_SAMPLE);

        if (ngx_http_gridfs_send_header(ctx) != NGX_OK) {
            return;
        }

        /* a body after all: it takes a place, as any other */
        if (ngx_http_gridfs_take_place(ctx) == NGX_OK) {
            ngx_http_gridfs_read_ahead(ctx);
        }

        return;
    }

    ctx->send_pos = ctx->range_start;
    ctx->send_end = (rc == NGX_OK) ? end : ctx->length;

    if (ngx_http_gridfs_take_place(ctx) == NGX_OK) {
        ngx_http_gridfs_read_ahead(ctx);
    }
}


/* gridfs_admission: a request about to look its file up is admitted
 * (NGX_OK), or waits in line for its turn (NGX_AGAIN, in order, within
 * what the policy allows, the deadline bounding it too), or is refused
 * (NGX_DECLINED) */

static ngx_int_t
ngx_http_gridfs_admit(ngx_http_gridfs_ctx_t *ctx)
{
    int64_t                       now, wait;
    ngx_http_gridfs_job_t        *job;
    ngx_http_gridfs_admission_t  *a;
    ngx_http_gridfs_main_conf_t  *gmcf;

    job = ctx->job;
    gmcf = ngx_http_get_module_main_conf(ctx->request, ngx_http_gridfs_module);
    a = &gmcf->admission;

    job->admission = a;
    now = ngx_http_gridfs_now_ms();

    if (ngx_http_gridfs_admission_has_room(a) && ngx_queue_empty(&a->waiters)) {
        job->admitted_in_flight = ngx_http_gridfs_admission_admit(a);
        job->admitted = 1;
        job->admitted_at = now;
        job->away = 0;
        return NGX_OK;
    }

    wait = ngx_http_gridfs_admission_wait(a, now, job->conf->deadline);

    if (wait <= 0) {
        ngx_http_gridfs_admission_refused(a, now, job->conf->deadline);
        return NGX_DECLINED;
    }

    ngx_log_debug2(NGX_LOG_DEBUG_HTTP, ctx->request->connection->log, 0,
                   "gridfs waits %L ms for its turn, %ui admitted",
                   wait, a->in_flight);

    ngx_queue_insert_tail(&a->waiters, &ctx->in_line);
    ngx_http_gridfs_admission_queued(a, now);
    ctx->in_line_waiting = 1;
    ctx->turn_expected = (wait > NGX_HTTP_GRIDFS_SHORT_WAIT_MS);
    ctx->state = NGX_HTTP_GRIDFS_WAIT_ADMISSION;

    /* a graceful shutdown waits for it */
    ngx_http_gridfs_hold_add();

    ngx_add_timer(&ctx->admitted, (ngx_msec_t) wait);

    return NGX_AGAIN;
}


/* its turn came (ngx_http_gridfs_admission_end() posted the event), or
 * its wait ran out (the timer): the lookup, or a 503 */

static void
ngx_http_gridfs_admitted_handler(ngx_event_t *ev)
{
    ngx_connection_t            *c;
    ngx_http_request_t          *r;
    ngx_http_gridfs_ctx_t       *ctx;
    ngx_http_gridfs_loc_conf_t  *glcf;

    ctx = ev->data;

    if (ctx->done) {
        /* not reached: a response that ends leaves the line */
        return;
    }

    r = ctx->request;
    c = r->connection;
    glcf = ctx->job->conf;

    ngx_http_set_log_request(c->log, r);

    if (ev->timedout) {
        ev->timedout = 0;

        ngx_log_error(glcf->overload_log_level, c->log, 0,
                      "gridfs: \"%V\" waited for its turn of "
                      "gridfs_admission in vain (%ui admitted at once): 503",
                      &ctx->log_key, ctx->job->admission->in_flight);

        ngx_http_gridfs_admission_refused(ctx->job->admission,
                                          ngx_http_gridfs_now_ms(),
                                          glcf->deadline);

        /* no job in flight: it leaves the line now */
        ngx_http_gridfs_finalize(ctx, ngx_http_gridfs_error(r,
                                             NGX_HTTP_SERVICE_UNAVAILABLE));
        ngx_http_run_posted_requests(c);
        return;
    }

    ctx->state = NGX_HTTP_GRIDFS_LOOKUP;

    if (ngx_http_gridfs_post(ctx) != NGX_OK) {
        ngx_log_error(NGX_LOG_ERR, c->log, 0,
                      "gridfs: could not post a job for \"%V\" (the thread "
                      "pool's queue is full?)", &ctx->log_key);

        ngx_http_gridfs_finalize(ctx, ngx_http_gridfs_error(r,
                                             NGX_HTTP_SERVICE_UNAVAILABLE));
    }

    ngx_http_run_posted_requests(c);
}


/* an admitted job's database work before the headers is over, or its
 * response ended: the policy learns its latency (a failure if the
 * deadline passed meanwhile; nothing if the deployment was unreachable
 * meanwhile, and if it answered at last, that it is back), and the turns
 * free go to those in line, the newest first while the line stands,
 * unless the oldest was told to expect its turn within the budget: left
 * behind the newest, an overload's first waiters waited all of it in vain
 * (the refusals' p99 751 ms at 3x capacity, 50-56 ms at 10x, in
 * overload-20261130T010935Z).  Once per turn: a no-op for a job not
 * admitted */

static void
ngx_http_gridfs_admission_end(ngx_http_gridfs_job_t *job, ngx_int_t outcome)
{
    int64_t                       now;
    ngx_queue_t                  *q;
    ngx_http_gridfs_ctx_t        *next;
    ngx_http_gridfs_admission_t  *a;

    if (!job->admitted) {
        return;
    }

    job->admitted = 0;

    a = job->admission;
    now = ngx_http_gridfs_now_ms();

    if (job->away) {
        outcome = NGX_HTTP_GRIDFS_ADMISSION_AWAY;

    } else if (job->late) {
        outcome = NGX_HTTP_GRIDFS_ADMISSION_FAILED;
    }

    ngx_http_gridfs_admission_finished(a, job->admitted_at,
                                       job->admitted_in_flight, now,
                                       job->conf->deadline, outcome);

    if (job->away && job->status != NGX_HTTP_GRIDFS_UNAVAILABLE
        && job->status != NGX_HTTP_GRIDFS_CLIENT_CLOSED)
    {
        ngx_http_gridfs_admission_back(a, now, job->conf->deadline);
    }

    while (!ngx_queue_empty(&a->waiters)
           && ngx_http_gridfs_admission_has_room(a))
    {
        q = ngx_queue_head(&a->waiters);
        next = ngx_queue_data(q, ngx_http_gridfs_ctx_t, in_line);

        if (!next->turn_expected
            && ngx_http_gridfs_admission_overloaded(a, now,
                                                    job->conf->deadline))
        {
            q = ngx_queue_last(&a->waiters);
            next = ngx_queue_data(q, ngx_http_gridfs_ctx_t, in_line);
        }

        ngx_queue_remove(q);
        next->in_line_waiting = 0;
        ngx_http_gridfs_admission_dequeued(a, now);

        next->job->admitted_in_flight = ngx_http_gridfs_admission_admit(a);
        next->job->admitted = 1;
        next->job->admitted_at = now;
        next->job->away = 0;

        if (next->admitted.timer_set) {
            ngx_del_timer(&next->admitted);
        }

        ngx_http_gridfs_hold_del();

        /* not from here: this may run in another request's cleanup */
        ngx_post_event(&next->admitted, &ngx_posted_events);
    }
}


/* a job's status as the policy counts it: the database failing (a 503)
 * lowers the limit, a client gone says nothing, anything else is an
 * answer whose latency counts */

static ngx_int_t
ngx_http_gridfs_outcome(ngx_uint_t status)
{
    switch (status) {

    case NGX_HTTP_SERVICE_UNAVAILABLE:
        return NGX_HTTP_GRIDFS_ADMISSION_FAILED;

    case NGX_HTTP_CLIENT_CLOSED_REQUEST:
        return NGX_HTTP_GRIDFS_ADMISSION_NONE;

    default:
        return NGX_HTTP_GRIDFS_ADMISSION_SAMPLE;
    }
}


/* gridfs_max_responses: a response about to hold a window takes a place of
 * its worker, or waits in line for one; the places go in the order asked
 * for.  The wait is bounded by gridfs_deadline, or without one (or once
 * the headers are out) by gridfs_queue_timeout.  NGX_OK: taken */

static ngx_int_t
ngx_http_gridfs_take_place(ngx_http_gridfs_ctx_t *ctx)
{
    ngx_http_request_t           *r;
    ngx_http_gridfs_places_t     *places;
    ngx_http_gridfs_loc_conf_t   *glcf;
    ngx_http_gridfs_main_conf_t  *gmcf;

    r = ctx->request;
    gmcf = ngx_http_get_module_main_conf(r, ngx_http_gridfs_module);
    places = &gmcf->places;

    if (places->max == 0 || ctx->has_place) {
        return NGX_OK;
    }

    ctx->places = places;

    if (places->used < places->max && ngx_queue_empty(&places->waiting)) {
        places->used++;
        ctx->has_place = 1;
        return NGX_OK;
    }

    ngx_log_debug1(NGX_LOG_DEBUG_HTTP, r->connection->log, 0,
                   "gridfs waits for one of %ui places", places->max);

    ngx_queue_insert_tail(&places->waiting, &ctx->queue);
    ctx->waiting = 1;
    ctx->state = NGX_HTTP_GRIDFS_WAIT_PLACE;

    /* a graceful shutdown waits for it */
    ngx_http_gridfs_hold_add();

    glcf = ctx->job->conf;

    if (!ctx->deadline.timer_set && glcf->queue_timeout) {
        ctx->wait_bound = 1;
        ngx_add_timer(&ctx->deadline, glcf->queue_timeout);
    }

    return NGX_AGAIN;
}


/* a place given by a response that ended (ngx_http_gridfs_give_place) */

static void
ngx_http_gridfs_placed_handler(ngx_event_t *ev)
{
    ngx_connection_t       *c;
    ngx_http_request_t     *r;
    ngx_http_gridfs_ctx_t  *ctx;

    ctx = ev->data;

    if (ctx->done) {
        /* not reached: a response that ends gives its place on */
        return;
    }

    r = ctx->request;
    c = r->connection;

    ngx_http_set_log_request(c->log, r);

    if (ctx->wait_bound) {
        ctx->wait_bound = 0;

        if (ctx->deadline.timer_set) {
            ngx_del_timer(&ctx->deadline);
        }
    }

    ngx_http_gridfs_read_ahead(ctx);

    ngx_http_run_posted_requests(c);
}


/* the place of a response that ends passes to the first in line, if any */

static void
ngx_http_gridfs_give_place(ngx_http_gridfs_places_t *places)
{
    ngx_queue_t            *q;
    ngx_http_gridfs_ctx_t  *next;

    if (ngx_queue_empty(&places->waiting)) {
        places->used--;
        return;
    }

    q = ngx_queue_head(&places->waiting);
    ngx_queue_remove(q);

    next = ngx_queue_data(q, ngx_http_gridfs_ctx_t, queue);
    next->waiting = 0;
    next->has_place = 1;

    ngx_http_gridfs_hold_del();

    /* not from here: this may run in another request's cleanup */
    ngx_post_event(&next->placed, &ngx_posted_events);
}


/* the first window of the body (before the headers, or after them when
 * the body was predicted not to be), the windows planned once the place
 * is taken */

static void
ngx_http_gridfs_read_ahead(ngx_http_gridfs_ctx_t *ctx)
{
    if (ctx->header_sent) {
        ctx->state = NGX_HTTP_GRIDFS_SENT_HEADER;
    }

    if (ngx_http_gridfs_plan_windows(ctx) != NGX_OK) {
        ngx_http_gridfs_finalize(ctx, ctx->header_sent
                                      ? NGX_ERROR
                                      : NGX_HTTP_INTERNAL_SERVER_ERROR);
        return;
    }

    ngx_http_gridfs_fetch_window(ctx);
}


/* the first window has been read: now the status is known */

static void
ngx_http_gridfs_first_window(ngx_http_gridfs_ctx_t *ctx)
{
    ngx_uint_t              send_first;
    ngx_http_request_t     *r;
    ngx_http_gridfs_job_t  *job;

    r = ctx->request;
    job = ctx->job;

    ngx_http_gridfs_admission_end(job, ngx_http_gridfs_outcome(job->status));

    if (job->status) {
        ngx_http_gridfs_log_job_error(ctx, "reading");
        ngx_http_gridfs_finalize(ctx, ngx_http_gridfs_error(r,
                                     job->status >= NGX_HTTP_SPECIAL_RESPONSE
                                     ? job->status
                                     : NGX_HTTP_INTERNAL_SERVER_ERROR));
        return;
    }

    if (ngx_http_gridfs_send_header(ctx) != NGX_OK) {
        return;
    }

    send_first = (job->from == ctx->send_pos);

    if (ctx->send_pos != ctx->plan_pos || ctx->send_end != ctx->plan_end) {

        /*
         * The filters chose other bytes than predicted: a filter that
         * takes the whole body (gzip, sub_filter, ssi, addition) made the
         * range filter answer 200, or the range filter chose another
         * range.  The windows are planned again for them; the one read
         * ahead is sent first if they start with it.
         */

        ngx_log_debug4(NGX_LOG_DEBUG_HTTP, r->connection->log, 0,
                       "gridfs planned bytes %O-%O, sending %O-%O",
                       ctx->plan_pos, ctx->plan_end, ctx->send_pos,
                       ctx->send_end);

        if (ngx_http_gridfs_plan_windows(ctx) != NGX_OK) {
            ngx_http_gridfs_finalize(ctx, NGX_ERROR);
            return;
        }

        /* the window read ahead is in half 0, or nowhere that matters */
        ctx->half = (send_first && ctx->overlap) ? 1 : 0;

        if (!send_first) {
            ngx_http_gridfs_fetch_window(ctx);
            return;
        }
    }

    ngx_http_gridfs_send_window(ctx);
}


/* sets send_pos and send_end to the bytes the body carries; NGX_OK if there
 * are some, else the request has been finalized */

static ngx_int_t
ngx_http_gridfs_send_header(ngx_http_gridfs_ctx_t *ctx)
{
    off_t                start, end;
    ngx_int_t            rc;
    ngx_http_request_t  *r;

    r = ctx->request;

    r->headers_out.content_offset = ctx->range_start;

    ctx->state = NGX_HTTP_GRIDFS_SENT_HEADER;
    ctx->header_sent = 1;

    /* the deadline covers the answer's start, never its body */
    if (ctx->deadline.timer_set) {
        ngx_del_timer(&ctx->deadline);
    }

    rc = ngx_http_send_header(r);

    if (rc == NGX_ERROR || rc > NGX_OK || r->header_only) {
        ngx_http_gridfs_finalize(ctx, rc);
        return NGX_DONE;
    }

    if (r->headers_out.status == NGX_HTTP_PARTIAL_CONTENT) {

        if (ngx_http_gridfs_content_range(r, &start, &end) != NGX_OK
            || ctx->range_start > start)
        {
            ngx_log_error(NGX_LOG_ALERT, r->connection->log, 0,
                          "gridfs: range from %O predicted, but the range "
                          "filter chose another one", ctx->range_start);
            ngx_http_gridfs_finalize(ctx, NGX_ERROR);
            return NGX_DONE;
        }

        ctx->send_pos = ctx->range_start;
        ctx->send_end = end + 1;

    } else {
        /* a 200, or the status of an error page the file is the body of
         * (error_page 503 /files/busy.html): the whole file */
        ctx->send_pos = 0;
        ctx->send_end = ctx->length;
    }

    if (ctx->send_pos >= ctx->send_end) {
        ngx_http_gridfs_finalize(ctx, ngx_http_send_special(r,
                                                            NGX_HTTP_LAST));
        return NGX_DONE;
    }

    return NGX_OK;
}


/* the windows of the bytes to send, [send_pos, send_end): one, or two
 * halves (ngx_http_gridfs_plan()); a half's buffer is allocated when a
 * window is read into it, and kept for the next ones */

static ngx_int_t
ngx_http_gridfs_plan_windows(ngx_http_gridfs_ctx_t *ctx)
{
    ngx_uint_t                   nbufs;
    ngx_http_request_t          *r;
    ngx_http_gridfs_job_t       *job;
    ngx_http_gridfs_plan_t       plan;
    ngx_http_gridfs_loc_conf_t  *glcf;

    r = ctx->request;
    job = ctx->job;
    glcf = job->conf;

    if (ngx_http_gridfs_plan(glcf->buffer_size, ctx->chunk_size,
                             ctx->send_pos, ctx->send_end, &plan)
        != NGX_OK)
    {
        ngx_log_error(NGX_LOG_ALERT, r->connection->log, 0,
                      "gridfs: no window for bytes %O-%O in chunks of %L",
                      ctx->send_pos, ctx->send_end, ctx->chunk_size);
        return NGX_ERROR;
    }

    ctx->overlap = plan.overlap;
    ctx->half = 0;
    ctx->per_window[0] = plan.per_window[0];
    ctx->per_window[1] = plan.per_window[1];
    ctx->plan_pos = ctx->send_pos;
    ctx->plan_end = ctx->send_end;

    if (ngx_http_gridfs_stream_start(ctx, plan.chunks, plan.total)
        != NGX_OK)
    {
        return NGX_ERROR;
    }

    nbufs = job->stream ? (ngx_uint_t) ngx_max(ctx->per_window[0],
                                               ctx->per_window[1])
                        : 1;

    if (ctx->nbufs < nbufs) {
        /* planned again before any window is handed to the filters */
        ctx->bufs = ngx_http_gridfs_palloc(r->pool, nbufs * sizeof(ngx_buf_t));
        ctx->out = ngx_http_gridfs_palloc(r->pool, nbufs * sizeof(ngx_chain_t));

        if (ctx->bufs == NULL || ctx->out == NULL) {
            return NGX_ERROR;
        }

        ctx->nbufs = nbufs;
    }

    return NGX_OK;
}


/* a response of more than one window holds a client, if the pool has one
 * to spare (its first job takes it: no pop on the event loop), while fewer
 * than half the pool's clients are held so; the other responses, and every
 * lookup, keep finding clients for their jobs */

static ngx_int_t
ngx_http_gridfs_stream_start(ngx_http_gridfs_ctx_t *ctx, int64_t chunks,
    int64_t total)
{
    ngx_http_gridfs_job_t     *job;
    ngx_http_gridfs_conn_t    *conn;
    ngx_http_gridfs_stream_t  *stream;

    job = ctx->job;

    if (ctx->stream_tried || job->stream || chunks <= total) {
        return NGX_OK;
    }

    ctx->stream_tried = 1;

    conn = job->conf->conn;

    if (ctx->per_window[0] > NGX_HTTP_GRIDFS_MAX_PARTS
        || conn->streams >= conn->max_streams)
    {
        return NGX_OK;
    }

    /* a window is at most the whole buffer */
    if (job->parts == NULL) {
        job->parts = ngx_alloc((size_t) total * sizeof(ngx_str_t),
                               ctx->request->connection->log);
        if (job->parts == NULL) {
            return NGX_ERROR;
        }
    }

    stream = ngx_memalign(BSON_ALIGNOF(bson_t),
                          sizeof(ngx_http_gridfs_stream_t),
                          ctx->request->connection->log);
    if (stream == NULL) {
        return NGX_ERROR;
    }

    ngx_memzero(stream, sizeof(ngx_http_gridfs_stream_t));

    stream->conn = conn;
    stream->task.ctx = stream;
    stream->task.handler = ngx_http_gridfs_stream_handler;
    stream->task.event.data = stream;
    stream->task.event.handler = ngx_http_gridfs_stream_done;
    stream->task.event.log = ngx_cycle->log;

    conn->streams++;
    job->stream = stream;

    return NGX_OK;
}


/* the client goes back to the pool: on the loop when no server cursor is
 * left (nothing to wait for), else in a task that kills the cursor */

static void
ngx_http_gridfs_stream_release(ngx_http_gridfs_stream_t *stream)
{
    ngx_http_gridfs_conn_t  *conn;

    conn = stream->conn;

    if (stream->cursor_id != 0) {

        if (ngx_http_gridfs_task_post(conn->thread_pool, &stream->task)
            == NGX_OK)
        {
            return;
        }

        /*
         * The queue is full: the killCursors is dropped, not run on the
         * event loop, where a slow server would stall every request of the
         * worker.  Safe: the cursor is this response's alone and nothing
         * reads it again; the server closes it once idle for its cursor
         * timeout (10 minutes by default).  Without it, giving the client
         * back makes no round trip.
         */
        ngx_log_error(NGX_LOG_WARN, ngx_cycle->log, 0,
                      "gridfs: thread pool queue full: cursor %L left to "
                      "the server's idle timeout", stream->cursor_id);

        stream->cursor_id = 0;
    }

    ngx_http_gridfs_stream_put(stream);
    ngx_http_gridfs_stream_free(stream);
    ngx_http_gridfs_stream_end(stream);
}


static void
ngx_http_gridfs_stream_done(ngx_event_t *ev)
{
    ngx_http_gridfs_hold_del();
    ngx_http_gridfs_stream_end(ev->data);
}


static void
ngx_http_gridfs_stream_end(ngx_http_gridfs_stream_t *stream)
{
    stream->conn->streams--;
    ngx_free(stream);
}


static void
ngx_http_gridfs_log_job_error(ngx_http_gridfs_ctx_t *ctx, const char *what)
{
    ngx_str_t              *coll;
    ngx_log_t              *log;
    ngx_http_gridfs_job_t  *job;

    job = ctx->job;
    log = ctx->request->connection->log;

    coll = (job->op == NGX_HTTP_GRIDFS_FIND) ? &job->conf->files
                                             : &job->conf->chunks;

    switch (job->status) {

    case NGX_HTTP_NOT_FOUND:
        ngx_log_error(NGX_LOG_INFO, log, 0,
                      "gridfs: \"%V\" not found in %V.%V",
                      &ctx->log_key, &job->conf->db, coll);
        break;

    case NGX_HTTP_CLIENT_CLOSED_REQUEST:
        ngx_log_error(NGX_LOG_INFO, log, 0,
                      "gridfs: client left before %s \"%V\"",
                      what, &ctx->log_key);
        break;

    case NGX_HTTP_SERVICE_UNAVAILABLE:
        ngx_log_error(NGX_LOG_ERR, log, 0,
                      "gridfs: MongoDB unavailable, %s \"%V\" in %V.%V: %s",
                      what, &ctx->log_key, &job->conf->db, coll,
                      job->error.message);
        break;

    default:
        ngx_log_error(NGX_LOG_ERR, log, 0,
                      "gridfs: %s \"%V\" in %V.%V failed: %s",
                      what, &ctx->log_key, &job->conf->db, coll,
                      job->error.message);
    }
}


/* the next window, into the half of the buffer not being sent */

static void
ngx_http_gridfs_fetch_window(ngx_http_gridfs_ctx_t *ctx)
{
    size_t                     size;
    ngx_uint_t                 half;
    ngx_http_request_t        *r;
    ngx_http_gridfs_job_t     *job;
    ngx_http_gridfs_window_t   w;

    r = ctx->request;
    job = ctx->job;
    half = ctx->half;

    if (ngx_http_gridfs_window(ctx->length, ctx->chunk_size, ctx->send_pos,
                               ctx->send_end, ctx->per_window[half], &w)
        != NGX_OK)
    {
        ngx_log_error(NGX_LOG_ALERT, r->connection->log, 0,
                      "gridfs: no window for bytes %O-%O of %L",
                      ctx->send_pos, ctx->send_end, ctx->length);
        ngx_http_gridfs_finalize(ctx, ctx->header_sent
                                      ? NGX_ERROR
                                      : NGX_HTTP_INTERNAL_SERVER_ERROR);
        return;
    }

    if (job->stream == NULL) {
        /* this half is not being sent: its buffer may change */
        size = (size_t) ngx_min(ctx->send_end - ctx->send_pos,
                                ctx->per_window[half] * ctx->chunk_size);
        size = ngx_max(size, (size_t) (w.to - w.from));

        if (job->window_size[half] < size) {
            ngx_free(job->window[half]);

            job->window[half] = ngx_alloc(size, r->connection->log);
            job->window_size[half] = job->window[half] ? size : 0;

            if (job->window[half] == NULL) {
                ngx_http_gridfs_finalize(ctx, ctx->header_sent
                                            ? NGX_ERROR
                                            : NGX_HTTP_INTERNAL_SERVER_ERROR);
                return;
            }
        }
    }

    job->op = NGX_HTTP_GRIDFS_READ;
    job->length = ctx->length;
    job->chunk_size = ctx->chunk_size;
    job->first_n = w.first_n;
    job->last_n = w.last_n;
    job->from = w.from;
    job->to = w.to;
    job->dest = job->window[half];
    job->dest_size = job->window_size[half];
    job->half = half;
    job->end_n = w.end_n;

    ngx_log_debug5(NGX_LOG_DEBUG_HTTP, r->connection->log, 0,
                   "gridfs read chunks %L-%L for bytes %L-%L into half %ui",
                   job->first_n, job->last_n, job->from, job->to - 1, half);

    if (ngx_http_gridfs_post(ctx) != NGX_OK) {
        ngx_log_error(NGX_LOG_ERR, r->connection->log, 0,
                      "gridfs: could not post a job for \"%V\" (the thread "
                      "pool's queue is full?)", &ctx->log_key);

        /* before the headers, an answer that says to retry */
        ngx_http_gridfs_finalize(ctx, ctx->header_sent
                                      ? NGX_ERROR
                                      : ngx_http_gridfs_error(r,
                                             NGX_HTTP_SERVICE_UNAVAILABLE));
        return;
    }

    if (ctx->overlap) {
        ctx->half = !half;
    }
}


/* the window just read goes to the output filters; with two halves, the
 * next one is read meanwhile: the previous window has drained, so its
 * half is free */

static void
ngx_http_gridfs_send_window(ngx_http_gridfs_ctx_t *ctx)
{
    off_t                   len;
    size_t                  size;
    ngx_int_t               rc;
    ngx_buf_t              *b;
    ngx_str_t               whole, *parts;
    ngx_uint_t              i, n, nparts;
    ngx_http_request_t     *r;
    ngx_http_gridfs_job_t  *job;

    r = ctx->request;
    job = ctx->job;

    if (job->status) {
        /* the headers are out: all we can do is cut the response short */
        ngx_log_error(NGX_LOG_ERR, r->connection->log, 0,
                      "gridfs: \"%V\" in %V.%V, chunks %L-%L: %s",
                      &ctx->log_key, &job->conf->db, &job->conf->chunks,
                      job->first_n, job->last_n, job->error.message);
        ngx_http_gridfs_finalize(ctx, NGX_ERROR);
        return;
    }

    /* a window read ahead may reach past the range finally chosen */
    ctx->send_pos = ngx_min(job->to, ctx->send_end);
    len = ctx->send_pos - job->from;

    if (job->nparts) {
        /* chunks in the driver's reply, valid until its half is read again */
        parts = job->parts;
        nparts = job->nparts;

    } else {
        whole.data = job->dest;
        whole.len = (size_t) len;
        parts = &whole;
        nparts = 1;
    }

    b = NULL;

    for (i = 0, n = 0; i < nparts && len > 0 && n < ctx->nbufs; i++, n++) {
        size = (size_t) ngx_min((off_t) parts[i].len, len);
        len -= size;

        b = &ctx->bufs[n];
        ngx_memzero(b, sizeof(ngx_buf_t));

        b->pos = parts[i].data;
        b->last = parts[i].data + size;
        b->memory = 1;

        ctx->out[n].buf = b;
        ctx->out[n].next = NULL;

        if (n) {
            ctx->out[n - 1].next = &ctx->out[n];
        }
    }

    if (b == NULL || len > 0) {
        ngx_log_error(NGX_LOG_ALERT, r->connection->log, 0,
                      "gridfs: window of \"%V\" short of %O bytes",
                      &ctx->log_key, len);
        ngx_http_gridfs_finalize(ctx, NGX_ERROR);
        return;
    }

    b->flush = 1;

    if (ctx->send_pos == ctx->send_end) {
        b->last_buf = (r == r->main) ? 1 : 0;
        b->last_in_chain = 1;
    }

    /* from now on, the filters may hold the buffers till the request is
     * freed */
    ctx->sending = 1;

    rc = ngx_http_output_filter(r, ctx->out);

    if (rc == NGX_ERROR || ctx->send_pos == ctx->send_end) {
        ngx_http_gridfs_finalize(ctx, rc);
        return;
    }

    if (r->buffered || r->postponed || r->connection->buffered) {
        ctx->state = NGX_HTTP_GRIDFS_DRAINING;

        if (ngx_http_gridfs_wait_write(r) != NGX_OK) {
            ngx_http_gridfs_finalize(ctx, NGX_ERROR);
            return;
        }

        if (!ctx->overlap) {
            /* one window at a time: read the next once this one drained */
            return;
        }
    }

    ngx_http_gridfs_fetch_window(ctx);
}


/* a write event while a window is still in flight: like ngx_http_writer(),
 * whether a job reads the next window meanwhile or not; once it has
 * drained, the window read meanwhile follows, or is read now */

static void
ngx_http_gridfs_drain(ngx_http_gridfs_ctx_t *ctx)
{
    ngx_int_t            rc;
    ngx_event_t         *wev;
    ngx_connection_t    *c;
    ngx_http_request_t  *r;

    r = ctx->request;
    c = r->connection;
    wev = c->write;

    if (wev->timedout) {
        ngx_log_error(NGX_LOG_INFO, c->log, NGX_ETIMEDOUT,
                      "client timed out");
        c->timedout = 1;
        ngx_http_gridfs_finalize(ctx, NGX_HTTP_REQUEST_TIME_OUT);
        return;
    }

    if (wev->delayed) {
        if (ngx_handle_write_event(wev, 0) != NGX_OK) {
            ngx_http_gridfs_finalize(ctx, NGX_ERROR);
        }

        return;
    }

    rc = ngx_http_output_filter(r, NULL);

    if (rc == NGX_ERROR) {
        ngx_http_gridfs_finalize(ctx, rc);
        return;
    }

    if (r->buffered || r->postponed || c->buffered) {
        if (ngx_http_gridfs_wait_write(r) != NGX_OK) {
            ngx_http_gridfs_finalize(ctx, NGX_ERROR);
        }

        return;
    }

    /* send_timeout's timer; a delayed event's is limit_rate's: it stays */
    if (wev->timer_set && !wev->delayed) {
        ngx_del_timer(wev);
    }

    ngx_log_debug1(NGX_LOG_DEBUG_HTTP, c->log, 0,
                   "gridfs window sent up to byte %O", ctx->send_pos);

    switch (ctx->state) {

    case NGX_HTTP_GRIDFS_READ_DRAINING:
        ctx->state = NGX_HTTP_GRIDFS_SENT_HEADER;
        ngx_http_gridfs_send_window(ctx);
        return;

    case NGX_HTTP_GRIDFS_READING_DRAINING:
        /* the job's end sends its window */
        ctx->state = NGX_HTTP_GRIDFS_READING;
        return;

    default: /* NGX_HTTP_GRIDFS_DRAINING */
        ctx->state = NGX_HTTP_GRIDFS_SENT_HEADER;
        ngx_http_gridfs_fetch_window(ctx);
    }
}


static ngx_int_t
ngx_http_gridfs_wait_write(ngx_http_request_t *r)
{
    ngx_event_t               *wev;
    ngx_http_core_loc_conf_t  *clcf;

    clcf = ngx_http_get_module_loc_conf(r, ngx_http_core_module);
    wev = r->connection->write;

    if (!wev->delayed) {
        ngx_add_timer(wev, clcf->send_timeout);
    }

    return ngx_handle_write_event(wev, clcf->send_lowat);
}


/* the module's last word on the request: the response is done first, then
 * the request finalized (which may free it, and the response with it) */

static void
ngx_http_gridfs_finalize(ngx_http_gridfs_ctx_t *ctx, ngx_int_t rc)
{
    ngx_http_gridfs_release(ctx);
    ngx_http_finalize_request(ctx->request, rc);
}


/* nginx terminates the request (a client gone, an error of the output):
 * run by ngx_http_terminate_request() and ngx_http_free_request() */

static void
ngx_http_gridfs_terminated(void *data)
{
    ngx_http_gridfs_release(data);
}


/* the response is over: nothing of it acts on the request again, a job in
 * flight skips its query if it has not started, the place queue is left;
 * its place and buffers go too, unless a window was handed to the output
 * filters (they may hold it until the request is freed).  Idempotent */

static void
ngx_http_gridfs_release(ngx_http_gridfs_ctx_t *ctx)
{
    ngx_http_gridfs_job_t  *job;

    ctx->done = 1;

    if (ctx->deadline.timer_set) {
        ngx_del_timer(&ctx->deadline);
    }

    if (ctx->waiting) {
        ngx_queue_remove(&ctx->queue);
        ctx->waiting = 0;
        ngx_http_gridfs_hold_del();
    }

    if (ctx->placed.posted) {
        /* given a place, not yet on its way: it passes on, below */
        ngx_delete_posted_event(&ctx->placed);
    }

    if (ctx->in_line_waiting) {
        ngx_queue_remove(&ctx->in_line);
        ctx->in_line_waiting = 0;
        ngx_http_gridfs_admission_dequeued(ctx->job->admission,
                                           ngx_http_gridfs_now_ms());
        ngx_http_gridfs_hold_del();
    }

    if (ctx->admitted.timer_set) {
        ngx_del_timer(&ctx->admitted);
    }

    if (ctx->admitted.posted) {
        /* given its turn, not yet on its way: the turn passes on, below */
        ngx_delete_posted_event(&ctx->admitted);
    }

    if (ctx->file) {
        bson_destroy(ctx->file);
        ctx->file = NULL;
    }

    job = ctx->job;

    if (job && job->busy) {
        job->abandoned = 1;
    }

    if (job && !job->busy) {
        /* no query under way: its turn goes now (else at the query's end) */
        ngx_http_gridfs_admission_end(job, NGX_HTTP_GRIDFS_ADMISSION_NONE);
    }

    if (ctx->sending) {
        return;
    }

    if (ctx->has_place) {
        ctx->has_place = 0;
        ngx_http_gridfs_give_place(ctx->places);
    }

    if (job && !job->busy) {
        ngx_http_gridfs_job_release(job);
    }
}


/* the request is freed: its job is freed with it, or detached from it if
 * a task is in flight (its completion frees it) */

void
ngx_http_gridfs_cleanup(void *data)
{
    ngx_http_gridfs_ctx_t  *ctx = data;

    ngx_http_gridfs_job_t  *job;

    /* nothing holds its buffers any more */
    ctx->sending = 0;

    ngx_http_gridfs_release(ctx);

    job = ctx->job;
    ctx->job = NULL;

    if (job == NULL) {
        return;
    }

    job->ctx = NULL;

    if (!job->busy) {
        ngx_http_gridfs_job_free(job);
    }
}


/* what a job holds besides itself: its windows, its held client, a files
 * document it found; not in flight */

static void
ngx_http_gridfs_job_release(ngx_http_gridfs_job_t *job)
{
    ngx_uint_t  i;

    if (job->stream) {
        ngx_http_gridfs_stream_release(job->stream);
        job->stream = NULL;
    }

    for (i = 0; i < 2; i++) {
        if (job->window[i]) {
            ngx_free(job->window[i]);
            job->window[i] = NULL;
            job->window_size[i] = 0;
        }
    }

    if (job->parts) {
        ngx_free(job->parts);
        job->parts = NULL;
    }

    if (job->file) {
        bson_destroy(job->file);
        job->file = NULL;
    }
}


static void
ngx_http_gridfs_job_free(ngx_http_gridfs_job_t *job)
{
    ngx_http_gridfs_job_release(job);

    if (job->has_files_id) {
        bson_value_destroy(&job->files_id);
    }

    ngx_free(job);
}
