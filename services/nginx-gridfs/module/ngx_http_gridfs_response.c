
/*
 * The response machine of ngx_http_gridfs_module, on the event loop: posts
 * jobs to the thread pool, wakes when they are done, sends the headers
 * once the first window is read, then the windows, double buffered.
 */


#include <ngx_config.h>
#include <ngx_core.h>
#include <ngx_http.h>

#include "ngx_http_gridfs_http.h"


static void ngx_http_gridfs_test_reading(ngx_http_request_t *r);
static void ngx_http_gridfs_deadline_handler(ngx_event_t *ev);
static void ngx_http_gridfs_wake_handler(ngx_http_request_t *r);
static void ngx_http_gridfs_job_done(ngx_http_request_t *r,
    ngx_http_gridfs_ctx_t *ctx);
static void ngx_http_gridfs_found(ngx_http_request_t *r,
    ngx_http_gridfs_ctx_t *ctx);
static ngx_int_t ngx_http_gridfs_take_place(ngx_http_request_t *r,
    ngx_http_gridfs_ctx_t *ctx);
static void ngx_http_gridfs_placed_handler(ngx_event_t *ev);
static void ngx_http_gridfs_give_place(ngx_http_gridfs_places_t *places);
static void ngx_http_gridfs_read_ahead(ngx_http_request_t *r,
    ngx_http_gridfs_ctx_t *ctx);
static void ngx_http_gridfs_first_window(ngx_http_request_t *r,
    ngx_http_gridfs_ctx_t *ctx);
static ngx_int_t ngx_http_gridfs_send_header(ngx_http_request_t *r,
    ngx_http_gridfs_ctx_t *ctx);
static ngx_int_t ngx_http_gridfs_alloc_window(ngx_http_request_t *r,
    ngx_http_gridfs_ctx_t *ctx);
static ngx_int_t ngx_http_gridfs_stream_start(ngx_http_request_t *r,
    ngx_http_gridfs_ctx_t *ctx, int64_t chunks, int64_t total);
static void ngx_http_gridfs_stream_release(ngx_http_gridfs_stream_t *stream);
static void ngx_http_gridfs_stream_done(ngx_event_t *ev);
static void ngx_http_gridfs_log_job_error(ngx_http_request_t *r,
    ngx_http_gridfs_job_t *job, const char *what);
static void ngx_http_gridfs_fetch_window(ngx_http_request_t *r,
    ngx_http_gridfs_ctx_t *ctx);
static void ngx_http_gridfs_send_window(ngx_http_request_t *r,
    ngx_http_gridfs_ctx_t *ctx);
static void ngx_http_gridfs_drain(ngx_http_request_t *r,
    ngx_http_gridfs_ctx_t *ctx);
static ngx_int_t ngx_http_gridfs_wait_write(ngx_http_request_t *r);
static void ngx_http_gridfs_abort(ngx_http_request_t *r,
    ngx_http_gridfs_ctx_t *ctx, ngx_int_t rc);


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


/* the aio pattern of ngx_http_copy_filter: r->main->blocked keeps the
 * request alive until the job's completion event has run */

ngx_int_t
ngx_http_gridfs_post(ngx_http_request_t *r, ngx_http_gridfs_ctx_t *ctx)
{
    ngx_uint_t                   header_sent;
    ngx_http_gridfs_job_t       *job;
    ngx_http_gridfs_loc_conf_t  *glcf;

    glcf = ngx_http_get_module_loc_conf(r, ngx_http_gridfs_module);

    header_sent = (ctx->state != NGX_HTTP_GRIDFS_LOOKUP
                   && ctx->state != NGX_HTTP_GRIDFS_WAIT_PLACE
                   && ctx->state != NGX_HTTP_GRIDFS_READ_AHEAD);

    job = ctx->job;
    job->status = 0;
    job->unreachable = 0;
    job->abandoned = 0;
    job->nparts = 0;
    job->opened = 0;
    job->no_client = 0;
    job->posted_ms = ngx_http_gridfs_now_ms();

    /* once the headers are out, a late window beats a cut response */
    job->max_wait = header_sent ? 0 : glcf->queue_timeout;
    job->continued = header_sent;

    if (ngx_thread_task_post(glcf->thread_pool, ctx->task) != NGX_OK) {
        return NGX_ERROR;
    }

    /* a lookup is the first job: LOOKUP, the state a response starts in */

    if (job->op == NGX_HTTP_GRIDFS_READ) {

        if (!header_sent) {
            ctx->state = NGX_HTTP_GRIDFS_READ_AHEAD;

        } else if (ctx->state == NGX_HTTP_GRIDFS_DRAINING) {
            ctx->state = NGX_HTTP_GRIDFS_READING_DRAINING;

        } else {
            ctx->state = NGX_HTTP_GRIDFS_READING;
        }
    }

    r->main->blocked++;
    r->aio = 1;
    r->write_event_handler = ngx_http_gridfs_wake_handler;

    /* notice a client that leaves while the job waits */
    r->read_event_handler = ngx_http_gridfs_test_reading;

    return NGX_OK;
}


/* gridfs_deadline, counted from the request's arrival as the other
 * paths count theirs: if the headers are not out by then, the answer is a
 * 503 at once, whatever the job in flight is waiting for (a thread, a
 * pooled client, a frozen server: libmongoc has no deadline per
 * operation, only the socket timeout) */

void
ngx_http_gridfs_start_deadline(ngx_http_request_t *r,
    ngx_http_gridfs_ctx_t *ctx, ngx_msec_t deadline)
{
    ngx_time_t      *tp;
    ngx_msec_int_t   elapsed;

    tp = ngx_timeofday();

    elapsed = (ngx_msec_int_t) ((tp->sec - r->start_sec) * 1000
                                + (tp->msec - r->start_msec));
    elapsed = ngx_max(elapsed, 0);

    ctx->deadline.handler = ngx_http_gridfs_deadline_handler;
    ctx->deadline.data = r;
    ctx->deadline.log = r->connection->log;

    /* a worker shutting down gracefully does not wait for it */
    ctx->deadline.cancelable = 1;

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

    r = ev->data;
    c = r->connection;

    ngx_http_set_log_request(c->log, r);

    ctx = ngx_http_get_module_ctx(r, ngx_http_gridfs_module);

    glcf = ngx_http_get_module_loc_conf(r, ngx_http_gridfs_module);

    if (ctx && ctx->state == NGX_HTTP_GRIDFS_WAIT_PLACE && !c->error) {
        ngx_log_error(NGX_LOG_INFO, c->log, 0,
                      "gridfs: \"%V\" waited for one of the %ui places of "
                      "gridfs_max_responses longer than gridfs_deadline "
                      "(%M ms): 503",
                      &r->uri, ctx->places->max, glcf->deadline);

        /* no job in flight, no window: its cleanup leaves the queue */
        ngx_http_finalize_request(r, ngx_http_gridfs_error(r,
                                             NGX_HTTP_SERVICE_UNAVAILABLE));
        ngx_http_run_posted_requests(c);
        return;
    }

    /* only a job in flight before the headers: otherwise the response
     * has answered, or is answering, by itself */
    if (ctx == NULL
        || !r->aio
        || c->error
        || ctx->job->abandoned
        || (ctx->state != NGX_HTTP_GRIDFS_LOOKUP
            && ctx->state != NGX_HTTP_GRIDFS_READ_AHEAD))
    {
        return;
    }

    ngx_log_error(NGX_LOG_INFO, c->log, 0,
                  "gridfs: %s \"%V\" took longer than gridfs_deadline "
                  "(%M ms): 503",
                  ctx->state == NGX_HTTP_GRIDFS_LOOKUP ? "looking up"
                                                       : "reading",
                  &r->uri, glcf->deadline);

    /* a job not started yet skips its query; one under way ends by the
     * socket timeout, and the request is held for it till then (its
     * completion event releases this count) */
    ctx->job->abandoned = 1;
    ctx->past_deadline = 1;
    r->main->count++;

    /* no window is in the output chain yet: the 503 may go out while the
     * job runs, and the connection closes after it */
    r->aio = 0;
    r->keepalive = 0;

    ngx_http_finalize_request(r, ngx_http_gridfs_error(r,
                                             NGX_HTTP_SERVICE_UNAVAILABLE));
    ngx_http_run_posted_requests(c);
}


/* the deployment is marked unavailable: answer 503 at once, and let a
 * single background ping find out when it is back */

ngx_int_t
ngx_http_gridfs_available(ngx_http_request_t *r,
    ngx_http_gridfs_loc_conf_t *glcf)
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
        if (ngx_thread_task_post(conn->thread_pool, conn->probe) == NGX_OK) {
            conn->probing = 1;
        }
    }

    /* at info: the outage itself was logged once, when it began */
    ngx_log_error(NGX_LOG_INFO, r->connection->log, 0,
                  "gridfs: MongoDB unavailable, looking up \"%V\" in "
                  "%V.%V: %V did not answer recently, retrying in the "
                  "background", &r->uri, &glcf->db, &glcf->files,
                  &conn->display);

    return NGX_DECLINED;
}


/* ngx_http_test_reading() finalizes the request if the client has closed
 * the connection; the request stays allocated while a job is in flight
 * (r->main->blocked), and the job is told to skip its query */

static void
ngx_http_gridfs_test_reading(ngx_http_request_t *r)
{
    ngx_http_gridfs_ctx_t  *ctx;

    ctx = ngx_http_get_module_ctx(r, ngx_http_gridfs_module);

    ngx_http_test_reading(r);

    if (ctx && r->connection->error) {
        ctx->job->abandoned = 1;
    }
}


void
ngx_http_gridfs_job_event_handler(ngx_event_t *ev)
{
    ngx_connection_t       *c;
    ngx_http_request_t     *r;
    ngx_http_gridfs_ctx_t  *ctx;

    r = ev->data;
    c = r->connection;

    ngx_http_set_log_request(c->log, r);

    r->main->blocked--;
    r->aio = 0;

    if (r->read_event_handler == ngx_http_gridfs_test_reading) {
        r->read_event_handler = ngx_http_block_reading;
    }

    ctx = ngx_http_get_module_ctx(r, ngx_http_gridfs_module);

#if (NGX_HTTP_V2)

    if (r->stream) {
        ngx_post_event(c->write, &ngx_posted_events);
    }

#endif

    if (ctx && ctx->past_deadline) {
        /* its 503 went out at the deadline, the request held for this job */

        if (r->main->count == 1) {
            /* the 503 is sent: the hold is the last reference */
            ngx_http_finalize_request(r, NGX_DONE);

        } else {
            /* the 503 still going out (ngx_http_writer), or the request
             * terminated meanwhile (ngx_http_request_finalizer): they end
             * it */
            r->main->count--;
            r->write_event_handler(r);
        }

    /* not our handler if the request was terminated meanwhile */
    } else if (ctx && r->write_event_handler == ngx_http_gridfs_wake_handler)
    {
        ngx_http_gridfs_job_done(r, ctx);

    } else {
        r->write_event_handler(r);
    }

    ngx_http_run_posted_requests(c);
}


/* a write event: a window handed to the output filters may be draining,
 * while a job reads the next one or not */

static void
ngx_http_gridfs_wake_handler(ngx_http_request_t *r)
{
    ngx_http_gridfs_ctx_t  *ctx;

    ctx = ngx_http_get_module_ctx(r, ngx_http_gridfs_module);

    if (ctx == NULL) {
        return;
    }

    switch (ctx->state) {

    case NGX_HTTP_GRIDFS_DRAINING:
    case NGX_HTTP_GRIDFS_READING_DRAINING:
    case NGX_HTTP_GRIDFS_READ_DRAINING:
        ngx_http_gridfs_drain(r, ctx);
        return;

    default:
        /* nothing drains: the job's end moves the response on */
        return;
    }
}


/* the end of a job */

static void
ngx_http_gridfs_job_done(ngx_http_request_t *r, ngx_http_gridfs_ctx_t *ctx)
{
    if (ctx->job->op == NGX_HTTP_GRIDFS_FIND) {
        ngx_http_gridfs_found(r, ctx);
        return;
    }

    if (ctx->state == NGX_HTTP_GRIDFS_READING) {
        ctx->state = NGX_HTTP_GRIDFS_SENT_HEADER;

    } else if (ctx->state == NGX_HTTP_GRIDFS_READING_DRAINING) {
        ctx->state = NGX_HTTP_GRIDFS_READ_DRAINING;
    }

    if (ctx->stream && ctx->job->no_client) {
        /* the first read found no spare client: nothing was sent yet */
        ngx_http_gridfs_stream_release(ctx->stream);
        ctx->stream = NULL;

        ngx_log_debug0(NGX_LOG_DEBUG_HTTP, r->connection->log, 0,
                       "gridfs no spare client: a query per window");

        if (ngx_http_gridfs_alloc_window(r, ctx) != NGX_OK) {
            ngx_http_finalize_request(r, NGX_ERROR);
            return;
        }

        ngx_http_gridfs_fetch_window(r, ctx);
        return;
    }

    if (ctx->job->opened) {
        ngx_log_debug1(NGX_LOG_DEBUG_HTTP, r->connection->log, 0,
                       "gridfs cursor opened at chunk %L",
                       ctx->job->first_n);
    }

    switch (ctx->state) {

    case NGX_HTTP_GRIDFS_READ_AHEAD:
        ngx_http_gridfs_first_window(r, ctx);
        return;

    case NGX_HTTP_GRIDFS_READ_DRAINING:
        /* sent once the previous window has drained */
        ngx_http_gridfs_drain(r, ctx);
        return;

    default: /* NGX_HTTP_GRIDFS_SENT_HEADER */
        ngx_http_gridfs_send_window(r, ctx);
    }
}


/* the files document is here: headers built, then the first window read
 * before they are sent, unless the answer may have no body */

static void
ngx_http_gridfs_found(ngx_http_request_t *r, ngx_http_gridfs_ctx_t *ctx)
{
    off_t                   start, end;
    ngx_int_t               rc;
    ngx_http_gridfs_job_t  *job;

    job = ctx->job;

    start = 0;
    end = 0;

    ctx->file = job->file;
    job->file = NULL;

    if (job->status) {
        ngx_http_gridfs_log_job_error(r, job, "looking up");
        ngx_http_finalize_request(r, ngx_http_gridfs_error(r, job->status));
        return;
    }

    rc = ngx_http_gridfs_set_headers(r, ctx);

    /* everything the response needs has been copied out of it */
    bson_destroy(ctx->file);
    ctx->file = NULL;

    if (rc != NGX_OK) {
        ngx_http_finalize_request(r, ngx_http_gridfs_error(r, rc));
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
        /* 416, HEAD, or a 304/412: no body to read ahead */
        if (ngx_http_gridfs_send_header(r, ctx) != NGX_OK) {
            return;
        }

        if (ngx_http_gridfs_alloc_window(r, ctx) != NGX_OK) {
            ngx_http_finalize_request(r, NGX_ERROR);
            return;
        }

        ngx_http_gridfs_fetch_window(r, ctx);
        return;
    }

    ctx->send_pos = ctx->range_start;
    ctx->send_end = (rc == NGX_OK) ? end : ctx->length;

    if (ngx_http_gridfs_take_place(r, ctx) == NGX_OK) {
        ngx_http_gridfs_read_ahead(r, ctx);
    }
}


/* gridfs_max_responses: a response about to hold a window takes a place of
 * its worker, or waits in line for one (till gridfs_deadline); the places
 * go in the order asked for.  NGX_OK: taken */

static ngx_int_t
ngx_http_gridfs_take_place(ngx_http_request_t *r, ngx_http_gridfs_ctx_t *ctx)
{
    ngx_http_gridfs_places_t     *places;
    ngx_http_gridfs_main_conf_t  *gmcf;

    gmcf = ngx_http_get_module_main_conf(r, ngx_http_gridfs_module);
    places = &gmcf->places;

    if (places->max == 0) {
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

    ctx->placed.handler = ngx_http_gridfs_placed_handler;
    ctx->placed.data = r;
    ctx->placed.log = r->connection->log;

    /* the request stays (the handler's count) until a place is given, the
     * deadline answers 503, or the client goes */
    r->read_event_handler = ngx_http_test_reading;
    r->write_event_handler = ngx_http_request_empty_handler;

    return NGX_AGAIN;
}


/* a place given by a response that ended (ngx_http_gridfs_give_place) */

static void
ngx_http_gridfs_placed_handler(ngx_event_t *ev)
{
    ngx_connection_t       *c;
    ngx_http_request_t     *r;
    ngx_http_gridfs_ctx_t  *ctx;

    r = ev->data;
    c = r->connection;

    ngx_http_set_log_request(c->log, r);

    ctx = ngx_http_get_module_ctx(r, ngx_http_gridfs_module);

    r->read_event_handler = ngx_http_block_reading;

    ngx_http_gridfs_read_ahead(r, ctx);

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

    /* not from here: this may run in another request's cleanup */
    ngx_post_event(&next->placed, &ngx_posted_events);
}


/* the first window of the body, read before the headers go out */

static void
ngx_http_gridfs_read_ahead(ngx_http_request_t *r, ngx_http_gridfs_ctx_t *ctx)
{
    if (ngx_http_gridfs_alloc_window(r, ctx) != NGX_OK) {
        ngx_http_finalize_request(r, NGX_ERROR);
        return;
    }

    ngx_http_gridfs_fetch_window(r, ctx);
}


/* the first window has been read: now the status is known */

static void
ngx_http_gridfs_first_window(ngx_http_request_t *r, ngx_http_gridfs_ctx_t *ctx)
{
    ngx_http_gridfs_job_t  *job;

    job = ctx->job;

    if (job->status) {
        ngx_http_gridfs_log_job_error(r, job, "reading");
        ngx_http_finalize_request(r, ngx_http_gridfs_error(r,
                                     job->status >= NGX_HTTP_SPECIAL_RESPONSE
                                     ? job->status
                                     : NGX_HTTP_INTERNAL_SERVER_ERROR));
        return;
    }

    if (ngx_http_gridfs_send_header(r, ctx) != NGX_OK) {
        return;
    }

    if (job->from == ctx->send_pos) {
        ngx_http_gridfs_send_window(r, ctx);
        return;
    }

    /* the range filter chose another range than predicted */

    ngx_log_debug2(NGX_LOG_DEBUG_HTTP, r->connection->log, 0,
                   "gridfs read ahead from %L, sending from %O",
                   job->from, ctx->send_pos);

    if (ngx_http_gridfs_alloc_window(r, ctx) != NGX_OK) {
        ngx_http_finalize_request(r, NGX_ERROR);
        return;
    }

    ngx_http_gridfs_fetch_window(r, ctx);
}


/* sets send_pos and send_end to the bytes the body carries; NGX_OK if there
 * are some, else the request has been finalized */

static ngx_int_t
ngx_http_gridfs_send_header(ngx_http_request_t *r, ngx_http_gridfs_ctx_t *ctx)
{
    off_t      start, end;
    ngx_int_t  rc;

    r->headers_out.content_offset = ctx->range_start;

    ctx->state = NGX_HTTP_GRIDFS_SENT_HEADER;

    /* the deadline covers the answer's start, never its body */
    if (ctx->deadline.timer_set) {
        ngx_del_timer(&ctx->deadline);
    }

    rc = ngx_http_send_header(r);

    if (rc == NGX_ERROR || rc > NGX_OK || r->header_only) {
        ngx_http_finalize_request(r, rc);
        return NGX_DONE;
    }

    if (r->headers_out.status == NGX_HTTP_PARTIAL_CONTENT) {

        if (ngx_http_gridfs_content_range(r, &start, &end) != NGX_OK
            || ctx->range_start > start)
        {
            ngx_log_error(NGX_LOG_ALERT, r->connection->log, 0,
                          "gridfs: range from %O predicted, but the range "
                          "filter chose another one", ctx->range_start);
            ngx_http_finalize_request(r, NGX_ERROR);
            return NGX_DONE;
        }

        ctx->send_pos = ctx->range_start;
        ctx->send_end = end + 1;

    } else if (r->headers_out.status == NGX_HTTP_OK) {
        ctx->send_pos = 0;
        ctx->send_end = ctx->length;

    } else {
        ngx_log_error(NGX_LOG_ALERT, r->connection->log, 0,
                      "gridfs: unexpected status %ui after headers",
                      r->headers_out.status);
        ngx_http_finalize_request(r, NGX_ERROR);
        return NGX_DONE;
    }

    if (ctx->send_pos >= ctx->send_end) {
        ngx_http_finalize_request(r, ngx_http_send_special(r, NGX_HTTP_LAST));
        return NGX_DONE;
    }

    return NGX_OK;
}


/* the windows of the bytes to send: one, or two halves
 * (ngx_http_gridfs_plan()), each allocated once */

static ngx_int_t
ngx_http_gridfs_alloc_window(ngx_http_request_t *r, ngx_http_gridfs_ctx_t *ctx)
{
    size_t                       size;
    ngx_uint_t                   i, nbufs;
    ngx_http_gridfs_plan_t       plan;
    ngx_http_gridfs_loc_conf_t  *glcf;

    glcf = ngx_http_get_module_loc_conf(r, ngx_http_gridfs_module);

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

    if (ngx_http_gridfs_stream_start(r, ctx, plan.chunks, plan.total)
        != NGX_OK)
    {
        return NGX_ERROR;
    }

    nbufs = ctx->stream ? (ngx_uint_t) ctx->per_window[0] : 1;

    if (ctx->nbufs < nbufs) {
        ctx->bufs = ngx_http_gridfs_palloc(r->pool, nbufs * sizeof(ngx_buf_t));
        ctx->out = ngx_http_gridfs_palloc(r->pool, nbufs * sizeof(ngx_chain_t));

        if (ctx->bufs == NULL || ctx->out == NULL) {
            return NGX_ERROR;
        }

        ctx->nbufs = nbufs;
    }

    if (ctx->stream) {
        /* sent from the driver's replies */
        return NGX_OK;
    }

    for (i = 0; i < (ngx_uint_t) (ctx->overlap ? 2 : 1); i++) {

        size = (size_t) plan.size[i];

        if (ctx->window[i] && ctx->window_size[i] >= size) {
            continue;
        }

        if (ctx->window[i]) {
            ngx_pfree(r->pool, ctx->window[i]);
        }

        ctx->window_size[i] = size;
        ctx->window[i] = ngx_http_gridfs_palloc(r->pool, size);

        if (ctx->window[i] == NULL) {
            return NGX_ERROR;
        }
    }

    return NGX_OK;
}


/* a response of more than one window holds a client, if the pool has one
 * to spare (its first job takes it: no pop on the event loop), while fewer
 * than half the pool's clients are held so; the other responses, and every
 * lookup, keep finding clients for their jobs */

static ngx_int_t
ngx_http_gridfs_stream_start(ngx_http_request_t *r, ngx_http_gridfs_ctx_t *ctx,
    int64_t chunks, int64_t total)
{
    ngx_http_gridfs_conn_t      *conn;
    ngx_http_gridfs_stream_t    *stream;
    ngx_http_gridfs_loc_conf_t  *glcf;

    if (ctx->stream_tried || chunks == 0) {
        return NGX_OK;
    }

    ctx->stream_tried = 1;

    glcf = ngx_http_get_module_loc_conf(r, ngx_http_gridfs_module);
    conn = glcf->conn;

    if (chunks <= total
        || ctx->per_window[0] > NGX_HTTP_GRIDFS_MAX_PARTS
        || conn->streams >= conn->max_streams)
    {
        return NGX_OK;
    }

    /* a window may grow to the whole buffer if the range filter chooses
     * another range than predicted */
    ctx->parts = ngx_http_gridfs_palloc(r->pool, total * sizeof(ngx_str_t));
    if (ctx->parts == NULL) {
        return NGX_ERROR;
    }

    stream = ngx_memalign(BSON_ALIGNOF(bson_t),
                          sizeof(ngx_http_gridfs_stream_t),
                          r->connection->log);
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
    ctx->stream = stream;

    return NGX_OK;
}


/* the client goes back to the pool: on the loop when no server cursor is
 * left (nothing to wait for), else in a job that kills the cursor */

static void
ngx_http_gridfs_stream_release(ngx_http_gridfs_stream_t *stream)
{
    ngx_http_gridfs_conn_t  *conn;

    conn = stream->conn;

    if (stream->cursor_id != 0) {

        if (ngx_thread_task_post(conn->thread_pool, &stream->task) == NGX_OK) {
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
    ngx_http_gridfs_stream_done(&stream->task.event);
}


static void
ngx_http_gridfs_stream_done(ngx_event_t *ev)
{
    ngx_http_gridfs_stream_t  *stream = ev->data;

    stream->conn->streams--;
    ngx_free(stream);
}


static void
ngx_http_gridfs_log_job_error(ngx_http_request_t *r,
    ngx_http_gridfs_job_t *job, const char *what)
{
    ngx_str_t  *coll;

    coll = (job->op == NGX_HTTP_GRIDFS_FIND) ? &job->conf->files
                                             : &job->conf->chunks;

    switch (job->status) {

    case NGX_HTTP_NOT_FOUND:
        ngx_log_error(NGX_LOG_INFO, r->connection->log, 0,
                      "gridfs: \"%V\" not found in %V.%V",
                      &job->key, &job->conf->db, coll);
        break;

    case NGX_HTTP_CLIENT_CLOSED_REQUEST:
        ngx_log_error(NGX_LOG_INFO, r->connection->log, 0,
                      "gridfs: client left before %s \"%V\"",
                      what, &job->key);
        break;

    case NGX_HTTP_SERVICE_UNAVAILABLE:
        ngx_log_error(NGX_LOG_ERR, r->connection->log, 0,
                      "gridfs: MongoDB unavailable, %s \"%V\" in %V.%V: %s",
                      what, &job->key, &job->conf->db, coll,
                      job->error.message);
        break;

    default:
        ngx_log_error(NGX_LOG_ERR, r->connection->log, 0,
                      "gridfs: %s \"%V\" in %V.%V failed: %s",
                      what, &job->key, &job->conf->db, coll,
                      job->error.message);
    }
}


/* the next window, into the half of the buffer not being sent */

static void
ngx_http_gridfs_fetch_window(ngx_http_request_t *r, ngx_http_gridfs_ctx_t *ctx)
{
    ngx_uint_t                 half;
    ngx_http_gridfs_job_t     *job;
    ngx_http_gridfs_window_t   w;

    job = ctx->job;
    half = ctx->half;

    if (ngx_http_gridfs_window(ctx->length, ctx->chunk_size, ctx->send_pos,
                               ctx->send_end, ctx->per_window[half], &w)
        != NGX_OK)
    {
        ngx_log_error(NGX_LOG_ALERT, r->connection->log, 0,
                      "gridfs: no window for bytes %O-%O of %L",
                      ctx->send_pos, ctx->send_end, ctx->length);
        ngx_http_finalize_request(r, NGX_ERROR);
        return;
    }

    job->op = NGX_HTTP_GRIDFS_READ;
    job->files_id = &ctx->files_id;
    job->length = ctx->length;
    job->chunk_size = ctx->chunk_size;
    job->first_n = w.first_n;
    job->last_n = w.last_n;
    job->from = w.from;
    job->to = w.to;
    job->dest = ctx->window[half];
    job->dest_size = ctx->window_size[half];
    job->stream = ctx->stream;
    job->parts = ctx->parts;
    job->half = half;
    job->end_n = w.end_n;

    ngx_log_debug5(NGX_LOG_DEBUG_HTTP, r->connection->log, 0,
                   "gridfs read chunks %L-%L for bytes %L-%L into half %ui",
                   job->first_n, job->last_n, job->from, job->to - 1, half);

    if (ngx_http_gridfs_post(r, ctx) != NGX_OK) {
        ngx_log_error(NGX_LOG_ERR, r->connection->log, 0,
                      "gridfs: could not post a job for \"%V\"", &job->key);
        ngx_http_finalize_request(r, NGX_ERROR);
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
ngx_http_gridfs_send_window(ngx_http_request_t *r, ngx_http_gridfs_ctx_t *ctx)
{
    off_t                   len;
    size_t                  size;
    ngx_int_t               rc;
    ngx_buf_t              *b;
    ngx_str_t               whole, *parts;
    ngx_uint_t              i, n, nparts;
    ngx_http_gridfs_job_t  *job;

    job = ctx->job;

    if (job->status) {
        /* the headers are out: all we can do is cut the response short */
        ngx_log_error(NGX_LOG_ERR, r->connection->log, 0,
                      "gridfs: \"%V\" in %V.%V, chunks %L-%L: %s",
                      &job->key, &job->conf->db, &job->conf->chunks,
                      job->first_n, job->last_n, job->error.message);
        ngx_http_finalize_request(r, NGX_ERROR);
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
                      &job->key, len);
        ngx_http_finalize_request(r, NGX_ERROR);
        return;
    }

    b->flush = 1;

    if (ctx->send_pos == ctx->send_end) {
        b->last_buf = (r == r->main) ? 1 : 0;
        b->last_in_chain = 1;
    }

    rc = ngx_http_output_filter(r, ctx->out);

    if (rc == NGX_ERROR || ctx->send_pos == ctx->send_end) {
        ngx_http_finalize_request(r, rc);
        return;
    }

    if (r->buffered || r->postponed || r->connection->buffered) {
        ctx->state = NGX_HTTP_GRIDFS_DRAINING;

        if (ngx_http_gridfs_wait_write(r) != NGX_OK) {
            ngx_http_finalize_request(r, NGX_ERROR);
            return;
        }

        if (!ctx->overlap) {
            /* one window at a time: read the next once this one drained */
            return;
        }
    }

    ngx_http_gridfs_fetch_window(r, ctx);
}


/* a write event while a window is still in flight: like ngx_http_writer();
 * once it has drained, the window read meanwhile follows, or is read now */

static void
ngx_http_gridfs_drain(ngx_http_request_t *r, ngx_http_gridfs_ctx_t *ctx)
{
    ngx_int_t          rc;
    ngx_event_t       *wev;
    ngx_connection_t  *c;

    c = r->connection;
    wev = c->write;

    if (wev->timedout) {
        ngx_log_error(NGX_LOG_INFO, c->log, NGX_ETIMEDOUT,
                      "client timed out");
        c->timedout = 1;
        ngx_http_gridfs_abort(r, ctx, NGX_HTTP_REQUEST_TIME_OUT);
        return;
    }

    if (wev->delayed) {
        if (ngx_handle_write_event(wev, 0) != NGX_OK) {
            ngx_http_gridfs_abort(r, ctx, NGX_ERROR);
        }

        return;
    }

    rc = ngx_http_output_filter(r, NULL);

    if (rc == NGX_ERROR) {
        ngx_http_gridfs_abort(r, ctx, rc);
        return;
    }

    if (r->buffered || r->postponed || c->buffered) {
        if (ngx_http_gridfs_wait_write(r) != NGX_OK) {
            ngx_http_gridfs_abort(r, ctx, NGX_ERROR);
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
        ngx_http_gridfs_send_window(r, ctx);
        return;

    case NGX_HTTP_GRIDFS_READING_DRAINING:
        /* the job's end sends its window */
        ctx->state = NGX_HTTP_GRIDFS_READING;
        return;

    default: /* NGX_HTTP_GRIDFS_DRAINING */
        ctx->state = NGX_HTTP_GRIDFS_SENT_HEADER;
        ngx_http_gridfs_fetch_window(r, ctx);
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


/* the request ends early: a job still in flight skips its query, if it
 * has not started yet (r->main->blocked keeps the request till it ends) */

static void
ngx_http_gridfs_abort(ngx_http_request_t *r, ngx_http_gridfs_ctx_t *ctx,
    ngx_int_t rc)
{
    switch (ctx->state) {

    case NGX_HTTP_GRIDFS_LOOKUP:
    case NGX_HTTP_GRIDFS_READ_AHEAD:
    case NGX_HTTP_GRIDFS_READING:
    case NGX_HTTP_GRIDFS_READING_DRAINING:
        /* a job in flight, or just done: then this changes nothing */
        ctx->job->abandoned = 1;
        break;

    default:
        break;
    }

    ngx_http_finalize_request(r, rc);
}


void
ngx_http_gridfs_cleanup(void *data)
{
    ngx_http_gridfs_ctx_t  *ctx = data;

    if (ctx->deadline.timer_set) {
        ngx_del_timer(&ctx->deadline);
    }

    if (ctx->file) {
        bson_destroy(ctx->file);
    }

    if (ctx->job && ctx->job->file) {
        bson_destroy(ctx->job->file);
    }

    if (ctx->has_files_id) {
        bson_value_destroy(&ctx->files_id);
    }

    if (ctx->waiting) {
        ngx_queue_remove(&ctx->queue);
    }

    if (ctx->placed.posted) {
        ngx_delete_posted_event(&ctx->placed);
    }

    if (ctx->has_place) {
        ngx_http_gridfs_give_place(ctx->places);
    }

    /* no job is in flight: r->main->blocked kept the request till now */
    if (ctx->stream) {
        ngx_http_gridfs_stream_release(ctx->stream);
        ctx->stream = NULL;
    }
}