
/*
 * Serves files stored in MongoDB GridFS.
 *
 * Driver calls never run on the event loop: every MongoDB round trip is a
 * job posted to an nginx thread pool, using a client from a per-worker
 * mongoc_client_pool_t.  A request holds at most its buffer,
 * ceil(gridfs_buffer_size / chunkSize) whole chunks, that is less than
 * gridfs_buffer_size plus one chunk, whatever the file size.  A response
 * that fits in it is one query.  A larger one is streamed in windows of
 * half the buffer each (the halves rounded to whole chunks, together the
 * buffer), double buffered: as soon as a window has been handed to the
 * output filters, a job reads the next one into the other half, so the
 * database read of window k + 1 overlaps the sending of window k; window
 * k + 2 waits until window k has drained.  A chunk larger than the buffer
 * is a window of its own, one at a time.  The first window is read before
 * the headers are sent, so that a failure there is a 5xx, not a truncated
 * 200.
 *
 * A response of several windows holds a client of the pool while the pool
 * has spare ones (at most half of maxPoolSize per worker): one cursor, a
 * find and then a getMore per window through that client, under one
 * session (as MongoDB requires) and on one server, and each window is sent
 * straight from its own reply, one buffer per chunk; a reply lives until
 * its half of the buffer is read again.  The drivers read a file that way;
 * a query per window costs much more on servers that do not push the n
 * range down (FerretDB reads every chunk of the file per query).  Without
 * a spare client, each window is a query of its own, copied into its half
 * of a buffer of the request.
 *
 * Failing fast: a connection failure marks the deployment unavailable in
 * this worker; requests then answer 503 at once, without queueing, while a
 * background ping finds out when it is back.  A job that waited in the
 * thread pool's queue longer than gridfs_queue_timeout, or whose client has
 * gone, answers without querying.
 *
 * Conditional requests and ranges are left to nginx's own not_modified and
 * range filters; the handler only predicts what they will do: whether the
 * response has a body at all (a 200, or a 304/412), and which range it
 * carries, so that it reads just the chunks that cover it, before the
 * headers.
 */


#include <ngx_config.h>
#include <ngx_core.h>
#include <ngx_http.h>
#include <ngx_md5.h>
#include <ngx_thread_pool.h>

#include <mongoc/mongoc.h>

#include "ngx_http_gridfs.h"

#if (NGX_LINUX)
#include <malloc.h>
#endif


#if (NGX_HTTP_GRIDFS_NOT_FOUND != NGX_HTTP_NOT_FOUND                        \
     || NGX_HTTP_GRIDFS_CLIENT_CLOSED != NGX_HTTP_CLIENT_CLOSED_REQUEST      \
     || NGX_HTTP_GRIDFS_INTERNAL_ERROR != NGX_HTTP_INTERNAL_SERVER_ERROR     \
     || NGX_HTTP_GRIDFS_UNAVAILABLE != NGX_HTTP_SERVICE_UNAVAILABLE)
#error "ngx_http_gridfs.h: a status differs from nginx's"
#endif


static ngx_int_t ngx_http_gridfs_handler(ngx_http_request_t *r);
static ngx_int_t ngx_http_gridfs_not_allowed(ngx_http_request_t *r);
static ngx_int_t ngx_http_gridfs_error(ngx_http_request_t *r,
    ngx_int_t status);
static ngx_int_t ngx_http_gridfs_parse_key(ngx_http_request_t *r,
    ngx_http_gridfs_loc_conf_t *glcf, ngx_http_gridfs_job_t *job);
static ngx_int_t ngx_http_gridfs_available(ngx_http_request_t *r,
    ngx_http_gridfs_loc_conf_t *glcf);
static ngx_int_t ngx_http_gridfs_post(ngx_http_request_t *r,
    ngx_http_gridfs_ctx_t *ctx);
static void ngx_http_gridfs_test_reading(ngx_http_request_t *r);
static void ngx_http_gridfs_job_event_handler(ngx_event_t *ev);
static void ngx_http_gridfs_wake_handler(ngx_http_request_t *r);
static void ngx_http_gridfs_found(ngx_http_request_t *r,
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
static ngx_int_t ngx_http_gridfs_set_headers(ngx_http_request_t *r,
    ngx_http_gridfs_ctx_t *ctx);
static ngx_int_t ngx_http_gridfs_set_etag(ngx_http_request_t *r,
    ngx_http_gridfs_ctx_t *ctx, int64_t upload_ms, const char *md5);
static ngx_int_t ngx_http_gridfs_set_content_type(ngx_http_request_t *r,
    ngx_http_gridfs_ctx_t *ctx);
static ngx_int_t ngx_http_gridfs_safe_value(ngx_http_request_t *r,
    ngx_http_gridfs_ctx_t *ctx, const char *field, const u_char *value,
    size_t len, size_t max, ngx_uint_t etag);
static ngx_int_t ngx_http_gridfs_predict_conditional(ngx_http_request_t *r);
static ngx_uint_t ngx_http_gridfs_etag_match(ngx_http_request_t *r,
    ngx_table_elt_t *header, ngx_uint_t weak);
static ngx_int_t ngx_http_gridfs_predict_range(ngx_http_request_t *r,
    off_t *start, off_t *end);
static ngx_int_t ngx_http_gridfs_content_range(ngx_http_request_t *r,
    off_t *start, off_t *end);
static void ngx_http_gridfs_fetch_window(ngx_http_request_t *r,
    ngx_http_gridfs_ctx_t *ctx);
static void ngx_http_gridfs_send_window(ngx_http_request_t *r,
    ngx_http_gridfs_ctx_t *ctx);
static void ngx_http_gridfs_drain(ngx_http_request_t *r,
    ngx_http_gridfs_ctx_t *ctx);
static ngx_int_t ngx_http_gridfs_wait_write(ngx_http_request_t *r);
static void ngx_http_gridfs_abort(ngx_http_request_t *r,
    ngx_http_gridfs_ctx_t *ctx, ngx_int_t rc);
static void ngx_http_gridfs_cleanup(void *data);

static void ngx_http_gridfs_probe_done(ngx_event_t *ev);

static char *ngx_http_gridfs(ngx_conf_t *cf, ngx_command_t *cmd, void *conf);
static char *ngx_http_gridfs_mongo(ngx_conf_t *cf, ngx_command_t *cmd,
    void *conf);
static void *ngx_http_gridfs_create_main_conf(ngx_conf_t *cf);
static void *ngx_http_gridfs_create_loc_conf(ngx_conf_t *cf);
static char *ngx_http_gridfs_merge_loc_conf(ngx_conf_t *cf, void *parent,
    void *child);
static ngx_int_t ngx_http_gridfs_add_conn(ngx_conf_t *cf,
    ngx_http_gridfs_loc_conf_t *glcf);
static void ngx_http_gridfs_uri_cleanup(void *data);
static void ngx_http_gridfs_redact(ngx_str_t *uri, ngx_str_t *out,
    ngx_pool_t *pool);
static u_char *ngx_http_gridfs_cstr(ngx_pool_t *pool, ngx_str_t *s);
static ngx_int_t ngx_http_gridfs_init_process(ngx_cycle_t *cycle);
static void ngx_http_gridfs_exit_process(ngx_cycle_t *cycle);
static void ngx_http_gridfs_mongoc_log(mongoc_log_level_t level,
    const char *domain, const char *message, void *data);


static ngx_command_t  ngx_http_gridfs_commands[] = {

    { ngx_string("gridfs"),
      NGX_HTTP_LOC_CONF|NGX_CONF_1MORE,
      ngx_http_gridfs,
      NGX_HTTP_LOC_CONF_OFFSET,
      0,
      NULL },

    { ngx_string("mongo"),
      NGX_HTTP_MAIN_CONF|NGX_HTTP_SRV_CONF|NGX_HTTP_LOC_CONF|NGX_CONF_1MORE,
      ngx_http_gridfs_mongo,
      NGX_HTTP_LOC_CONF_OFFSET,
      0,
      NULL },

    { ngx_string("gridfs_thread_pool"),
      NGX_HTTP_MAIN_CONF|NGX_HTTP_SRV_CONF|NGX_HTTP_LOC_CONF|NGX_CONF_TAKE1,
      ngx_conf_set_str_slot,
      NGX_HTTP_LOC_CONF_OFFSET,
      offsetof(ngx_http_gridfs_loc_conf_t, thread_pool_name),
      NULL },

    { ngx_string("gridfs_queue_timeout"),
      NGX_HTTP_MAIN_CONF|NGX_HTTP_SRV_CONF|NGX_HTTP_LOC_CONF|NGX_CONF_TAKE1,
      ngx_conf_set_msec_slot,
      NGX_HTTP_LOC_CONF_OFFSET,
      offsetof(ngx_http_gridfs_loc_conf_t, queue_timeout),
      NULL },

    { ngx_string("gridfs_buffer_size"),
      NGX_HTTP_MAIN_CONF|NGX_HTTP_SRV_CONF|NGX_HTTP_LOC_CONF|NGX_CONF_TAKE1,
      ngx_conf_set_size_slot,
      NGX_HTTP_LOC_CONF_OFFSET,
      offsetof(ngx_http_gridfs_loc_conf_t, buffer_size),
      NULL },

      ngx_null_command
};


static ngx_http_module_t  ngx_http_gridfs_module_ctx = {
    NULL,                                  /* preconfiguration */
    NULL,                                  /* postconfiguration */

    ngx_http_gridfs_create_main_conf,      /* create main configuration */
    NULL,                                  /* init main configuration */

    NULL,                                  /* create server configuration */
    NULL,                                  /* merge server configuration */

    ngx_http_gridfs_create_loc_conf,       /* create location configuration */
    ngx_http_gridfs_merge_loc_conf         /* merge location configuration */
};


ngx_module_t  ngx_http_gridfs_module = {
    NGX_MODULE_V1,
    &ngx_http_gridfs_module_ctx,           /* module context */
    ngx_http_gridfs_commands,              /* module directives */
    NGX_HTTP_MODULE,                       /* module type */
    NULL,                                  /* init master */
    NULL,                                  /* init module */
    ngx_http_gridfs_init_process,          /* init process */
    NULL,                                  /* init thread */
    NULL,                                  /* exit thread */
    ngx_http_gridfs_exit_process,          /* exit process */
    NULL,                                  /* exit master */
    NGX_MODULE_V1_PADDING
};


/* request handling, on the event loop */

static ngx_int_t
ngx_http_gridfs_handler(ngx_http_request_t *r)
{
    ngx_int_t                    rc;
    ngx_thread_task_t           *task;
    ngx_pool_cleanup_t          *cln;
    ngx_http_gridfs_job_t       *job;
    ngx_http_gridfs_ctx_t       *ctx;
    ngx_http_gridfs_loc_conf_t  *glcf;

    if (!(r->method & (NGX_HTTP_GET|NGX_HTTP_HEAD))) {
        return ngx_http_gridfs_not_allowed(r);
    }

    rc = ngx_http_discard_request_body(r);

    if (rc != NGX_OK) {
        return rc;
    }

    glcf = ngx_http_get_module_loc_conf(r, ngx_http_gridfs_module);

    if (glcf->conn->pool == NULL) {
        ngx_log_error(NGX_LOG_ERR, r->connection->log, 0,
                      "gridfs: no MongoDB client pool for \"%V\"",
                      &glcf->conn->display);
        return ngx_http_gridfs_error(r, NGX_HTTP_SERVICE_UNAVAILABLE);
    }

    if (ngx_http_gridfs_available(r, glcf) != NGX_OK) {
        return ngx_http_gridfs_error(r, NGX_HTTP_SERVICE_UNAVAILABLE);
    }

    ctx = ngx_pcalloc(r->pool, sizeof(ngx_http_gridfs_ctx_t));
    if (ctx == NULL) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    task = ngx_thread_task_alloc(r->pool, sizeof(ngx_http_gridfs_job_t));
    if (task == NULL) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    job = task->ctx;
    job->op = NGX_HTTP_GRIDFS_FIND;
    job->conf = glcf;

    rc = ngx_http_gridfs_parse_key(r, glcf, job);

    if (rc != NGX_OK) {
        return rc;
    }

    cln = ngx_pool_cleanup_add(r->pool, 0);
    if (cln == NULL) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    cln->handler = ngx_http_gridfs_cleanup;
    cln->data = ctx;

    task->handler = ngx_http_gridfs_job_handler;
    task->event.data = r;
    task->event.handler = ngx_http_gridfs_job_event_handler;

    ctx->task = task;
    ctx->job = job;

    ngx_http_set_ctx(r, ctx, ngx_http_gridfs_module);

    if (ngx_http_gridfs_post(r, ctx) != NGX_OK) {
        return ngx_http_gridfs_error(r, NGX_HTTP_SERVICE_UNAVAILABLE);
    }

    r->main->count++;

    return NGX_DONE;
}


static ngx_int_t
ngx_http_gridfs_not_allowed(ngx_http_request_t *r)
{
    ngx_table_elt_t  *allow;

    allow = ngx_list_push(&r->headers_out.headers);
    if (allow == NULL) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    allow->hash = 1;
#if (nginx_version >= 1023000)
    allow->next = NULL;
#endif
    ngx_str_set(&allow->key, "Allow");
    ngx_str_set(&allow->value, "GET, HEAD");

    return NGX_HTTP_NOT_ALLOWED;
}


/* an error before any header: none of the file's headers (ETag,
 * Last-Modified...) go with it, and a 503 says when to retry */

static ngx_int_t
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


/* the key is what follows the location prefix in r->uri, which nginx has
 * already percent-decoded (and rejected with 400 if malformed) */

static ngx_int_t
ngx_http_gridfs_parse_key(ngx_http_request_t *r,
    ngx_http_gridfs_loc_conf_t *glcf, ngx_http_gridfs_job_t *job)
{
    u_char                    *p, *last;
    int64_t                    n, digit;
    ngx_uint_t                 negative;
    ngx_str_t                 *key;
    ngx_http_core_loc_conf_t  *clcf;

    clcf = ngx_http_get_module_loc_conf(r, ngx_http_core_module);

    key = &job->key;

    if (r->uri.len > clcf->name.len) {
        key->data = r->uri.data + clcf->name.len;
        key->len = r->uri.len - clcf->name.len;
    }

    if (key->len == 0) {
        ngx_log_error(NGX_LOG_INFO, r->connection->log, 0,
                      "gridfs: empty key in \"%V\"", &r->uri);
        return NGX_HTTP_NOT_FOUND;
    }

    switch (glcf->type) {

    case NGX_HTTP_GRIDFS_OBJECTID:
        if (key->len != 24 || !bson_oid_is_valid((char *) key->data, 24)) {
            ngx_log_error(NGX_LOG_INFO, r->connection->log, 0,
                          "gridfs: key \"%V\" is not an ObjectId", key);
            return NGX_HTTP_BAD_REQUEST;
        }

        bson_oid_init_from_string(&job->oid, (char *) key->data);
        return NGX_OK;

    case NGX_HTTP_GRIDFS_INT:
        p = key->data;
        last = p + key->len;
        negative = (*p == '-');

        if (negative) {
            p++;
        }

        if (p == last) {
            goto bad_int;
        }

        for (n = 0; p < last; p++) {
            if (*p < '0' || *p > '9') {
                goto bad_int;
            }

            digit = *p - '0';

            if (n > (INT64_MAX - digit) / 10) {
                goto bad_int;
            }

            n = n * 10 + digit;
        }

        job->key_int = negative ? -n : n;
        return NGX_OK;

    default: /* NGX_HTTP_GRIDFS_STRING */
        if (!bson_utf8_validate((char *) key->data, key->len, false)) {
            ngx_log_error(NGX_LOG_INFO, r->connection->log, 0,
                          "gridfs: key \"%V\" is not valid UTF-8", key);
            return NGX_HTTP_BAD_REQUEST;
        }

        return NGX_OK;
    }

bad_int:

    ngx_log_error(NGX_LOG_INFO, r->connection->log, 0,
                  "gridfs: key \"%V\" is not an integer", key);
    return NGX_HTTP_BAD_REQUEST;
}


/* the aio pattern of ngx_http_copy_filter: r->main->blocked keeps the
 * request alive until the job's completion event has run */

static ngx_int_t
ngx_http_gridfs_post(ngx_http_request_t *r, ngx_http_gridfs_ctx_t *ctx)
{
    ngx_http_gridfs_job_t       *job;
    ngx_http_gridfs_loc_conf_t  *glcf;

    glcf = ngx_http_get_module_loc_conf(r, ngx_http_gridfs_module);

    job = ctx->job;
    job->status = 0;
    job->unreachable = 0;
    job->abandoned = 0;
    job->nparts = 0;
    job->opened = 0;
    job->no_client = 0;
    job->posted_ms = ngx_http_gridfs_now_ms();

    /* once the headers are out, a late window beats a cut response */
    job->max_wait = ctx->header_sent ? 0 : glcf->queue_timeout;
    job->continued = ctx->header_sent;

    ctx->job_done = 0;

    if (ngx_thread_task_post(glcf->thread_pool, ctx->task) != NGX_OK) {
        return NGX_ERROR;
    }

    ctx->fetching = 1;

    r->main->blocked++;
    r->aio = 1;
    r->write_event_handler = ngx_http_gridfs_wake_handler;

    /* notice a client that leaves while the job waits */
    r->read_event_handler = ngx_http_gridfs_test_reading;

    return NGX_OK;
}


/* the deployment is marked unavailable: answer 503 at once, and let a
 * single background ping find out when it is back */

static ngx_int_t
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


static void
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
    if (ctx) {
        ctx->job_done = 1;
        ctx->fetching = 0;
    }

#if (NGX_HTTP_V2)

    if (r->stream) {
        ngx_post_event(c->write, &ngx_posted_events);
    }

#endif

    /* not our handler if the request was terminated meanwhile */
    r->write_event_handler(r);

    ngx_http_run_posted_requests(c);
}


/* the end of a job, or a write event: a window handed to the output
 * filters may be draining while the job reads the next one */

static void
ngx_http_gridfs_wake_handler(ngx_http_request_t *r)
{
    ngx_http_gridfs_ctx_t  *ctx;

    ctx = ngx_http_get_module_ctx(r, ngx_http_gridfs_module);

    if (ctx == NULL) {
        return;
    }

    if (!ctx->job_done) {
        if (ctx->sending) {
            ngx_http_gridfs_drain(r, ctx);
        }

        return;
    }

    ctx->job_done = 0;

    if (ctx->job->op == NGX_HTTP_GRIDFS_FIND) {
        ngx_http_gridfs_found(r, ctx);
        return;
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

    if (!ctx->header_sent) {
        ngx_http_gridfs_first_window(r, ctx);
        return;
    }

    ctx->fetched = 1;

    if (ctx->sending) {
        /* sent once the previous window has drained */
        ngx_http_gridfs_drain(r, ctx);
        return;
    }

    ngx_http_gridfs_send_window(r, ctx);
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

    ctx->header_sent = 1;

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


/* gridfs_buffer_size rounded up to whole chunks, less than the buffer
 * plus one chunk: a response no larger than that is one window, one query;
 * a larger one two windows of half of it each, one sending while the next
 * is read (a single chunk larger than the buffer: one window at a time) */

static ngx_int_t
ngx_http_gridfs_alloc_window(ngx_http_request_t *r, ngx_http_gridfs_ctx_t *ctx)
{
    size_t                       size;
    int64_t                      total, chunks;
    ngx_uint_t                   i, nbufs;
    ngx_http_gridfs_loc_conf_t  *glcf;

    glcf = ngx_http_get_module_loc_conf(r, ngx_http_gridfs_module);

    total = ((int64_t) glcf->buffer_size + ctx->chunk_size - 1)
            / ctx->chunk_size;

    chunks = (ctx->send_pos < ctx->send_end)
             ? (ctx->send_end - 1) / ctx->chunk_size
               - ctx->send_pos / ctx->chunk_size + 1
             : 0;

    ctx->overlap = (chunks > total && total > 1);
    ctx->half = 0;

    if (ctx->overlap) {
        ctx->per_window[0] = total - total / 2;
        ctx->per_window[1] = total / 2;

    } else {
        ctx->per_window[0] = total;
        ctx->per_window[1] = total;
    }

    if (ngx_http_gridfs_stream_start(r, ctx, chunks, total) != NGX_OK) {
        return NGX_ERROR;
    }

    nbufs = ctx->stream ? (ngx_uint_t) ctx->per_window[0] : 1;

    if (ctx->nbufs < nbufs) {
        ctx->bufs = ngx_palloc(r->pool, nbufs * sizeof(ngx_buf_t));
        ctx->out = ngx_palloc(r->pool, nbufs * sizeof(ngx_chain_t));

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

        size = (size_t) ngx_min(ctx->send_end - ctx->send_pos,
                                ctx->per_window[i] * ctx->chunk_size);

        if (ctx->window[i] && ctx->window_size[i] >= size) {
            continue;
        }

        if (ctx->window[i]) {
            ngx_pfree(r->pool, ctx->window[i]);
        }

        ctx->window_size[i] = size;
        ctx->window[i] = ngx_palloc(r->pool, size);

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
    ctx->parts = ngx_palloc(r->pool, total * sizeof(ngx_str_t));
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


static ngx_int_t
ngx_http_gridfs_set_headers(ngx_http_request_t *r, ngx_http_gridfs_ctx_t *ctx)
{
    int64_t       upload_ms;
    const char   *md5;
    bson_iter_t   iter;

    ctx->length = -1;
    ctx->chunk_size = 0;
    upload_ms = -1;
    md5 = NULL;

    /* untrusted: anything but an integer leaves them invalid */

    if (bson_iter_init_find(&iter, ctx->file, "length")
        && ngx_http_gridfs_integer(&iter, &ctx->length) != NGX_OK)
    {
        ctx->length = -1;
    }

    if (bson_iter_init_find(&iter, ctx->file, "chunkSize")
        && ngx_http_gridfs_integer(&iter, &ctx->chunk_size) != NGX_OK)
    {
        ctx->chunk_size = -1;
    }

    if (bson_iter_init_find(&iter, ctx->file, "uploadDate")
        && BSON_ITER_HOLDS_DATE_TIME(&iter))
    {
        upload_ms = bson_iter_date_time(&iter);
    }

    if (bson_iter_init_find(&iter, ctx->file, "md5")
        && BSON_ITER_HOLDS_UTF8(&iter))
    {
        md5 = bson_iter_utf8(&iter, NULL);
    }

    if (!bson_iter_init_find(&iter, ctx->file, "_id")) {
        ngx_log_error(NGX_LOG_ERR, r->connection->log, 0,
                      "gridfs: file document for \"%V\" has no _id",
                      &ctx->job->key);
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    bson_value_copy(bson_iter_value(&iter), &ctx->files_id);
    ctx->has_files_id = 1;

    if (ctx->length < 0
        || ctx->chunk_size < 0
        || ctx->chunk_size > NGX_HTTP_GRIDFS_MAX_CHUNK
        || (ctx->length > 0
            && (ctx->chunk_size == 0
                || ctx->length
                   > ctx->chunk_size * NGX_HTTP_GRIDFS_MAX_CHUNKS)))
    {
        ngx_log_error(NGX_LOG_ERR, r->connection->log, 0,
                      "gridfs: file document for \"%V\" has a bad length "
                      "(%L) or chunkSize (%L)",
                      &ctx->job->key, ctx->length, ctx->chunk_size);
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    r->headers_out.status = NGX_HTTP_OK;
    r->headers_out.content_length_n = ctx->length;
    r->headers_out.last_modified_time = upload_ms >= 0 ? upload_ms / 1000 : -1;

    if (ngx_http_gridfs_set_etag(r, ctx, upload_ms, md5) != NGX_OK) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    if (ngx_http_gridfs_set_content_type(r, ctx) != NGX_OK) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    /* several ranges would need the whole body in one buffer: answer 200 */
    r->allow_ranges = 1;
    r->single_range = 1;

    return NGX_OK;
}


/* strong: md5 of the content when the writer stored it, else the file's
 * identity (_id, length, uploadDate), which no revision shares */

static ngx_int_t
ngx_http_gridfs_set_etag(ngx_http_request_t *r, ngx_http_gridfs_ctx_t *ctx,
    int64_t upload_ms, const char *md5)
{
    size_t            len;
    u_char           *p;
    bson_t            id;
    ngx_md5_t         md5ctx;
    ngx_table_elt_t  *etag;
    u_char            digest[16];
    char              hex[33];

    etag = ngx_list_push(&r->headers_out.headers);
    if (etag == NULL) {
        return NGX_ERROR;
    }

    etag->hash = 1;
#if (nginx_version >= 1023000)
    etag->next = NULL;
#endif
    ngx_str_set(&etag->key, "ETag");

    len = md5 ? ngx_strlen(md5) : 0;

    if (len
        && ngx_http_gridfs_safe_value(r, ctx, "md5", (u_char *) md5, len,
                                      NGX_HTTP_GRIDFS_MAX_MD5, 1)
           == NGX_OK)
    {
        etag->value.data = ngx_pnalloc(r->pool, len + 2);
        if (etag->value.data == NULL) {
            return NGX_ERROR;
        }

        etag->value.len = ngx_sprintf(etag->value.data, "\"%*s\"", len, md5)
                          - etag->value.data;

        r->headers_out.etag = etag;
        return NGX_OK;
    }

    if (ctx->files_id.value_type == BSON_TYPE_OID) {
        bson_oid_to_string(&ctx->files_id.value.v_oid, hex);

    } else {
        bson_init(&id);

        if (!bson_append_value(&id, "", 0, &ctx->files_id)) {
            bson_destroy(&id);
            return NGX_ERROR;
        }

        ngx_md5_init(&md5ctx);
        ngx_md5_update(&md5ctx, bson_get_data(&id), id.len);
        ngx_md5_final(digest, &md5ctx);
        bson_destroy(&id);

        *ngx_hex_dump((u_char *) hex, digest, 16) = '\0';
    }

    p = ngx_pnalloc(r->pool, sizeof("\"--\"") + 32 + 2 * NGX_INT64_LEN);
    if (p == NULL) {
        return NGX_ERROR;
    }

    etag->value.data = p;
    etag->value.len = ngx_sprintf(p, "\"%s-%xL-%xL\"", hex,
                                  ctx->length, upload_ms < 0 ? 0 : upload_ms)
                      - p;

    r->headers_out.etag = etag;

    return NGX_OK;
}


/* contentType, then metadata.contentType, then nginx types by the
 * extension of the stored filename (or of the key) */

static ngx_int_t
ngx_http_gridfs_set_content_type(ngx_http_request_t *r,
    ngx_http_gridfs_ctx_t *ctx)
{
    u_char       *p, *name;
    uint32_t      len;
    const char   *type;
    bson_iter_t   iter;

    type = NULL;

    if (bson_iter_init_find(&iter, ctx->file, "contentType")
        && BSON_ITER_HOLDS_UTF8(&iter))
    {
        type = bson_iter_utf8(&iter, &len);

    } else if (bson_iter_init(&iter, ctx->file)
               && bson_iter_find_descendant(&iter, "metadata.contentType",
                                            &iter)
               && BSON_ITER_HOLDS_UTF8(&iter))
    {
        type = bson_iter_utf8(&iter, &len);
    }

    if (type && len
        && ngx_http_gridfs_safe_value(r, ctx, "contentType", (u_char *) type,
                                      len, NGX_HTTP_GRIDFS_MAX_TYPE, 0)
           == NGX_OK)
    {
        p = ngx_pnalloc(r->pool, len);
        if (p == NULL) {
            return NGX_ERROR;
        }

        ngx_memcpy(p, type, len);

        r->headers_out.content_type.data = p;
        r->headers_out.content_type.len = len;
        r->headers_out.content_type_len = len;
        r->headers_out.content_type_lowcase = NULL;

        return NGX_OK;
    }

    if (bson_iter_init_find(&iter, ctx->file, "filename")
        && BSON_ITER_HOLDS_UTF8(&iter))
    {
        name = (u_char *) bson_iter_utf8(&iter, &len);

    } else {
        name = ctx->job->key.data;
        len = ctx->job->key.len;
    }

    ngx_str_null(&r->exten);

    for (p = name + len; p > name; p--) {
        if (p[-1] == '/') {
            break;
        }

        if (p[-1] == '.') {
            /* a copy: the files document is freed before the response */
            r->exten.len = name + len - p;
            r->exten.data = ngx_pnalloc(r->pool, r->exten.len);
            if (r->exten.data == NULL) {
                return NGX_ERROR;
            }

            ngx_memcpy(r->exten.data, p, r->exten.len);
            break;
        }
    }

    return ngx_http_set_content_type(r);
}


/* a stored value about to become a header: printable ASCII only (no CR,
 * LF, NUL or other controls: they would split or forge the response), and
 * no '"' in an entity tag; otherwise the caller falls back to its own
 * value, and the first refusal of the request is logged, escaped */

static ngx_int_t
ngx_http_gridfs_safe_value(ngx_http_request_t *r, ngx_http_gridfs_ctx_t *ctx,
    const char *field, const u_char *value, size_t len, size_t max,
    ngx_uint_t etag)
{
    u_char  *p, *last, *escaped;
    size_t   i, shown;

    if (len <= max) {
        for (i = 0; i < len; i++) {
            if (value[i] < 0x20 || value[i] > 0x7e
                || (etag && (value[i] == '"' || value[i] == ' ')))
            {
                break;
            }
        }

        if (i == len) {
            return NGX_OK;
        }
    }

    if (ctx->unsafe_logged) {
        return NGX_DECLINED;
    }

    ctx->unsafe_logged = 1;

    shown = ngx_min(len, 64);

    escaped = ngx_pnalloc(r->pool, shown * 4);
    if (escaped == NULL) {
        return NGX_DECLINED;
    }

    p = escaped;
    last = escaped + shown * 4;

    for (i = 0; i < shown; i++) {
        if (value[i] >= 0x20 && value[i] < 0x7f && value[i] != '\\'
            && value[i] != '"')
        {
            *p++ = value[i];

        } else {
            p = ngx_slprintf(p, last, "\\x%02xd", value[i]);
        }
    }

    ngx_log_error(NGX_LOG_WARN, r->connection->log, 0,
                  "gridfs: \"%V\": ignoring the stored %s \"%*s%s\" (%uz "
                  "bytes): not a safe header value",
                  &ctx->job->key, field, (size_t) (p - escaped), escaped,
                  len > shown ? "..." : "", len);

    return NGX_DECLINED;
}


/* mirrors ngx_http_not_modified_header_filter(), which runs before the
 * range filter: NGX_HTTP_OK when the response will carry its body (so
 * that its first window is read before the headers, as any 200), else the
 * 412 or 304 it becomes.  A wrong guess costs a read or a late read,
 * never a wrong answer: the status is the filter's */

static ngx_int_t
ngx_http_gridfs_predict_conditional(ngx_http_request_t *r)
{
    time_t                     t, lm;
    ngx_table_elt_t           *h;
    ngx_http_core_loc_conf_t  *clcf;

    if (r != r->main || r->disable_not_modified) {
        return NGX_HTTP_OK;
    }

    lm = r->headers_out.last_modified_time;

    h = r->headers_in.if_unmodified_since;

    if (h) {
        t = ngx_parse_http_time(h->value.data, h->value.len);

        if (lm == (time_t) -1 || t < lm) {
            return NGX_HTTP_PRECONDITION_FAILED;
        }
    }

    if (r->headers_in.if_match
        && !ngx_http_gridfs_etag_match(r, r->headers_in.if_match, 0))
    {
        return NGX_HTTP_PRECONDITION_FAILED;
    }

    if (r->headers_in.if_modified_since == NULL
        && r->headers_in.if_none_match == NULL)
    {
        return NGX_HTTP_OK;
    }

    h = r->headers_in.if_modified_since;

    if (h) {
        clcf = ngx_http_get_module_loc_conf(r, ngx_http_core_module);

        if (lm == (time_t) -1 || clcf->if_modified_since == NGX_HTTP_IMS_OFF) {
            return NGX_HTTP_OK;
        }

        t = ngx_parse_http_time(h->value.data, h->value.len);

        if (t != lm
            && (clcf->if_modified_since == NGX_HTTP_IMS_EXACT || t < lm))
        {
            return NGX_HTTP_OK;
        }
    }

    if (r->headers_in.if_none_match
        && !ngx_http_gridfs_etag_match(r, r->headers_in.if_none_match, 1))
    {
        return NGX_HTTP_OK;
    }

    return NGX_HTTP_NOT_MODIFIED;
}


/* whether the header's list of entity tags names the response's ETag (or
 * is "*"), compared weakly for If-None-Match, as ngx_http_test_if_match() */

static ngx_uint_t
ngx_http_gridfs_etag_match(ngx_http_request_t *r, ngx_table_elt_t *header,
    ngx_uint_t weak)
{
    u_char     *p, *last;
    ngx_str_t   etag;

    if (r->headers_out.etag == NULL) {
        return 0;
    }

    p = header->value.data;
    last = p + header->value.len;

    if (header->value.len == 1 && *p == '*') {
        return 1;
    }

    etag = r->headers_out.etag->value;

    if (weak && etag.len > 2 && etag.data[0] == 'W' && etag.data[1] == '/') {
        etag.len -= 2;
        etag.data += 2;
    }

    while (p < last) {

        if (weak && last - p > 2 && p[0] == 'W' && p[1] == '/') {
            p += 2;
        }

        if ((size_t) (last - p) >= etag.len
            && ngx_strncmp(p, etag.data, etag.len) == 0)
        {
            p += etag.len;

            while (p < last && (*p == ' ' || *p == '\t')) {
                p++;
            }

            if (p == last || *p == ',') {
                return 1;
            }
        }

        while (p < last && *p != ',') {
            p++;
        }

        while (p < last && (*p == ' ' || *p == '\t' || *p == ',')) {
            p++;
        }
    }

    return 0;
}


/* mirrors ngx_http_range_header_filter() and ngx_http_range_parse() with
 * r->single_range set: NGX_OK and the range [start, end) that filter will
 * serve, NGX_DECLINED when it will serve the whole file, or 416.  A wrong
 * guess costs a read, never a wrong answer: the range chosen is checked */

static ngx_int_t
ngx_http_gridfs_predict_range(ngx_http_request_t *r, off_t *pstart,
    off_t *pend)
{
    u_char                    *p;
    off_t                      start, end, first, last, length, cutoff,
                               cutlim;
    time_t                     if_range_time;
    ngx_str_t                 *if_range, *etag;
    ngx_uint_t                 suffix, ranges;
    ngx_http_core_loc_conf_t  *clcf;

    clcf = ngx_http_get_module_loc_conf(r, ngx_http_core_module);

    if (r->http_version < NGX_HTTP_VERSION_10
        || clcf->max_ranges == 0
        || r->headers_in.range == NULL
        || r->headers_in.range->value.len < 7
        || ngx_strncasecmp(r->headers_in.range->value.data,
                           (u_char *) "bytes=", 6)
           != 0)
    {
        return NGX_DECLINED;
    }

    if (r->headers_in.if_range) {

        if_range = &r->headers_in.if_range->value;

        if (if_range->len >= 2 && if_range->data[if_range->len - 1] == '"') {
            etag = &r->headers_out.etag->value;

            if (if_range->len != etag->len
                || ngx_strncmp(if_range->data, etag->data, etag->len) != 0)
            {
                return NGX_DECLINED;
            }

        } else {
            if (r->headers_out.last_modified_time == (time_t) -1) {
                return NGX_DECLINED;
            }

            if_range_time = ngx_parse_http_time(if_range->data, if_range->len);

            if (if_range_time != r->headers_out.last_modified_time) {
                return NGX_DECLINED;
            }
        }
    }

    p = r->headers_in.range->value.data + 6;
    length = r->headers_out.content_length_n;
    first = 0;
    last = 0;
    ranges = 0;

    cutoff = NGX_MAX_OFF_T_VALUE / 10;
    cutlim = NGX_MAX_OFF_T_VALUE % 10;

    for ( ;; ) {
        start = 0;
        end = 0;
        suffix = 0;

        while (*p == ' ') { p++; }

        if (*p != '-') {
            if (*p < '0' || *p > '9') {
                return NGX_HTTP_RANGE_NOT_SATISFIABLE;
            }

            while (*p >= '0' && *p <= '9') {
                if (start >= cutoff && (start > cutoff || *p - '0' > cutlim)) {
                    return NGX_HTTP_RANGE_NOT_SATISFIABLE;
                }

                start = start * 10 + (*p++ - '0');
            }

            while (*p == ' ') { p++; }

            if (*p++ != '-') {
                return NGX_HTTP_RANGE_NOT_SATISFIABLE;
            }

            while (*p == ' ') { p++; }

            if (*p == ',' || *p == '\0') {
                end = length;
                goto found;
            }

        } else {
            suffix = 1;
            p++;
        }

        if (*p < '0' || *p > '9') {
            return NGX_HTTP_RANGE_NOT_SATISFIABLE;
        }

        while (*p >= '0' && *p <= '9') {
            if (end >= cutoff && (end > cutoff || *p - '0' > cutlim)) {
                return NGX_HTTP_RANGE_NOT_SATISFIABLE;
            }

            end = end * 10 + (*p++ - '0');
        }

        while (*p == ' ') { p++; }

        if (*p != ',' && *p != '\0') {
            return NGX_HTTP_RANGE_NOT_SATISFIABLE;
        }

        if (suffix) {
            start = (end < length) ? length - end : 0;
            end = length - 1;
        }

        if (end >= length) {
            end = length;

        } else {
            end++;
        }

    found:

        if (start < end) {
            if (ranges++ == 1) {
                return NGX_DECLINED;
            }

            first = start;
            last = end;

        } else if (start == 0) {
            return NGX_DECLINED;
        }

        if (*p++ != ',') {
            break;
        }
    }

    if (ranges == 0) {
        return NGX_HTTP_RANGE_NOT_SATISFIABLE;
    }

    *pstart = first;
    *pend = last;

    return NGX_OK;
}


/* "bytes S-E/T" as set by the range filter */

static ngx_int_t
ngx_http_gridfs_content_range(ngx_http_request_t *r, off_t *start, off_t *end)
{
    u_char     *p, *dash, *slash, *last;
    ngx_str_t  *value;

    if (r->headers_out.content_range == NULL) {
        return NGX_ERROR;
    }

    value = &r->headers_out.content_range->value;

    if (value->len < sizeof("bytes 0-0/1") - 1
        || ngx_strncmp(value->data, "bytes ", 6) != 0)
    {
        return NGX_ERROR;
    }

    p = value->data + 6;
    last = value->data + value->len;

    dash = ngx_strlchr(p, last, '-');
    slash = dash ? ngx_strlchr(dash, last, '/') : NULL;

    if (slash == NULL) {
        return NGX_ERROR;
    }

    *start = ngx_atoof(p, dash - p);
    *end = ngx_atoof(dash + 1, slash - dash - 1);

    if (*start == NGX_ERROR || *end == NGX_ERROR || *end < *start) {
        return NGX_ERROR;
    }

    return NGX_OK;
}


/* the next window, into the half of the buffer not being sent */

static void
ngx_http_gridfs_fetch_window(ngx_http_request_t *r, ngx_http_gridfs_ctx_t *ctx)
{
    ngx_uint_t              half;
    ngx_http_gridfs_job_t  *job;

    job = ctx->job;
    half = ctx->half;

    job->op = NGX_HTTP_GRIDFS_READ;
    job->files_id = &ctx->files_id;
    job->length = ctx->length;
    job->chunk_size = ctx->chunk_size;
    job->first_n = ctx->send_pos / ctx->chunk_size;
    job->last_n = ngx_min((ctx->send_end - 1) / ctx->chunk_size,
                          job->first_n + ctx->per_window[half] - 1);
    job->from = ctx->send_pos;
    job->to = ngx_min(ctx->send_end, (job->last_n + 1) * ctx->chunk_size);
    job->dest = ctx->window[half];
    job->dest_size = ctx->window_size[half];
    job->stream = ctx->stream;
    job->parts = ctx->parts;
    job->half = half;
    job->end_n = (ctx->send_end - 1) / ctx->chunk_size;

    /* job->to - job->from <= min(remaining, per_window[half] * chunk_size) */

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

    ctx->fetched = 0;

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

    ctx->sending = (r->buffered || r->postponed || r->connection->buffered);

    if (ctx->sending) {
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

    ctx->sending = 0;

    ngx_log_debug1(NGX_LOG_DEBUG_HTTP, c->log, 0,
                   "gridfs window sent up to byte %O", ctx->send_pos);

    if (ctx->fetched) {
        ngx_http_gridfs_send_window(r, ctx);
        return;
    }

    if (!ctx->fetching) {
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
    if (ctx->fetching) {
        ctx->job->abandoned = 1;
    }

    ngx_http_finalize_request(r, rc);
}


static void
ngx_http_gridfs_cleanup(void *data)
{
    ngx_http_gridfs_ctx_t  *ctx = data;

    if (ctx->file) {
        bson_destroy(ctx->file);
    }

    if (ctx->job && ctx->job->file) {
        bson_destroy(ctx->job->file);
    }

    if (ctx->has_files_id) {
        bson_value_destroy(&ctx->files_id);
    }

    /* no job is in flight: r->main->blocked kept the request till now */
    if (ctx->stream) {
        ngx_http_gridfs_stream_release(ctx->stream);
        ctx->stream = NULL;
    }
}


static void
ngx_http_gridfs_probe_done(ngx_event_t *ev)
{
    ngx_http_gridfs_conn_t  *conn = ev->data;

    conn->probing = 0;
    conn->next_probe = ngx_current_msec + NGX_HTTP_GRIDFS_PROBE_MS;
}


/* configuration */

static char *
ngx_http_gridfs(ngx_conf_t *cf, ngx_command_t *cmd, void *conf)
{
    ngx_http_gridfs_loc_conf_t *glcf = conf;

    u_char                    *p;
    size_t                     len;
    ngx_str_t                 *value, root, name, arg;
    ngx_uint_t                 i;
    ngx_http_core_loc_conf_t  *clcf;

    if (glcf->db.data) {
        return "is duplicate";
    }

    clcf = ngx_http_conf_get_module_loc_conf(cf, ngx_http_core_module);

#if (NGX_PCRE)
    if (clcf->regex) {
        return "is not allowed in a regex location: the key is the URI "
               "after the location prefix";
    }
#endif

    if (clcf->named) {
        return "is not allowed in a named location";
    }

    value = cf->args->elts;

    glcf->db.data = ngx_http_gridfs_cstr(cf->pool, &value[1]);
    if (glcf->db.data == NULL) {
        return NGX_CONF_ERROR;
    }
    glcf->db.len = value[1].len;

    ngx_str_set(&root, "fs");
    ngx_str_set(&glcf->field, "_id");
    glcf->type = NGX_HTTP_GRIDFS_OBJECTID;

    for (i = 2; i < cf->args->nelts; i++) {

        p = ngx_strlchr(value[i].data, value[i].data + value[i].len, '=');

        if (p == NULL || p == value[i].data) {
            goto invalid;
        }

        name.data = value[i].data;
        name.len = p - value[i].data;
        arg.data = p + 1;
        arg.len = value[i].data + value[i].len - arg.data;

        if (arg.len == 0) {
            goto invalid;
        }

        if (name.len == 15
            && ngx_strncmp(name.data, "root_collection", 15) == 0)
        {
            root = arg;

        } else if (name.len == 5 && ngx_strncmp(name.data, "field", 5) == 0) {
            glcf->field = arg;

        } else if (name.len == 4 && ngx_strncmp(name.data, "type", 4) == 0) {

            if (arg.len == 8 && ngx_strncmp(arg.data, "objectid", 8) == 0) {
                glcf->type = NGX_HTTP_GRIDFS_OBJECTID;

            } else if (arg.len == 6 && ngx_strncmp(arg.data, "string", 6) == 0)
            {
                glcf->type = NGX_HTTP_GRIDFS_STRING;

            } else if (arg.len == 3 && ngx_strncmp(arg.data, "int", 3) == 0) {
                glcf->type = NGX_HTTP_GRIDFS_INT;

            } else {
                goto invalid;
            }

        } else if (name.len == 4 && ngx_strncmp(name.data, "user", 4) == 0) {
            glcf->user = arg;

        } else if (name.len == 4 && ngx_strncmp(name.data, "pass", 4) == 0) {
            glcf->pass = arg;

        } else {
            goto invalid;
        }
    }

    /* NUL-terminated copies: the driver takes C strings */

    glcf->field.data = ngx_http_gridfs_cstr(cf->pool, &glcf->field);

    len = root.len + sizeof(".chunks");

    glcf->files.data = ngx_pnalloc(cf->pool, len);
    glcf->chunks.data = ngx_pnalloc(cf->pool, len);

    if (glcf->field.data == NULL || glcf->files.data == NULL
        || glcf->chunks.data == NULL)
    {
        return NGX_CONF_ERROR;
    }

    glcf->files.len = ngx_sprintf(glcf->files.data, "%V.files%Z", &root)
                      - glcf->files.data - 1;
    glcf->chunks.len = ngx_sprintf(glcf->chunks.data, "%V.chunks%Z", &root)
                       - glcf->chunks.data - 1;

    clcf->handler = ngx_http_gridfs_handler;

    return NGX_CONF_OK;

invalid:

    ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                       "invalid parameter \"%V\"", &value[i]);

    return NGX_CONF_ERROR;
}


/* mongo mongodb://...;  or the old form  mongo [replica_set] host[:port]...;
 * (with several arguments, a first one without ':' names the replica set) */

static char *
ngx_http_gridfs_mongo(ngx_conf_t *cf, ngx_command_t *cmd, void *conf)
{
    ngx_http_gridfs_loc_conf_t *glcf = conf;

    u_char      *p;
    size_t       len;
    ngx_str_t   *value, *set;
    ngx_uint_t   i, first;

    if (glcf->mongo.data) {
        return "is duplicate";
    }

    value = cf->args->elts;

    if (cf->args->nelts == 2
        && (ngx_strncmp(value[1].data, "mongodb://", 10) == 0
            || ngx_strncmp(value[1].data, "mongodb+srv://", 14) == 0))
    {
        glcf->mongo.data = ngx_pstrdup(cf->pool, &value[1]);
        if (glcf->mongo.data == NULL) {
            return NGX_CONF_ERROR;
        }

        glcf->mongo.len = value[1].len;
        return NGX_CONF_OK;
    }

    set = NULL;
    first = 1;

    if (cf->args->nelts > 2
        && ngx_strlchr(value[1].data, value[1].data + value[1].len, ':')
           == NULL)
    {
        set = &value[1];
        first = 2;
    }

    len = sizeof("mongodb:///?replicaSet=");

    for (i = 1; i < cf->args->nelts; i++) {
        len += value[i].len + 1;
    }

    p = ngx_pnalloc(cf->pool, len);
    if (p == NULL) {
        return NGX_CONF_ERROR;
    }

    glcf->mongo.data = p;
    p = ngx_cpymem(p, "mongodb://", 10);

    for (i = first; i < cf->args->nelts; i++) {
        if (i > first) {
            *p++ = ',';
        }

        p = ngx_cpymem(p, value[i].data, value[i].len);
    }

    *p++ = '/';

    if (set) {
        p = ngx_sprintf(p, "?replicaSet=%V", set);
    }

    glcf->mongo.len = p - glcf->mongo.data;

    return NGX_CONF_OK;
}


static void *
ngx_http_gridfs_create_main_conf(ngx_conf_t *cf)
{
    ngx_http_gridfs_main_conf_t  *gmcf;

    gmcf = ngx_pcalloc(cf->pool, sizeof(ngx_http_gridfs_main_conf_t));
    if (gmcf == NULL) {
        return NULL;
    }

    if (ngx_array_init(&gmcf->conns, cf->pool, 1,
                       sizeof(ngx_http_gridfs_conn_t *))
        != NGX_OK)
    {
        return NULL;
    }

    return gmcf;
}


static void *
ngx_http_gridfs_create_loc_conf(ngx_conf_t *cf)
{
    ngx_http_gridfs_loc_conf_t  *conf;

    /*
     * set by ngx_pcalloc():
     *
     *     conf->db = { 0, NULL };
     *     conf->mongo = { 0, NULL };
     *     conf->thread_pool_name = { 0, NULL };
     *     conf->thread_pool = NULL;
     *     conf->conn = NULL;
     */

    conf = ngx_pcalloc(cf->pool, sizeof(ngx_http_gridfs_loc_conf_t));
    if (conf == NULL) {
        return NULL;
    }

    conf->queue_timeout = NGX_CONF_UNSET_MSEC;
    conf->buffer_size = NGX_CONF_UNSET_SIZE;

    return conf;
}


static char *
ngx_http_gridfs_merge_loc_conf(ngx_conf_t *cf, void *parent, void *child)
{
    ngx_http_gridfs_loc_conf_t *prev = parent;
    ngx_http_gridfs_loc_conf_t *conf = child;

    ngx_conf_merge_str_value(conf->mongo, prev->mongo,
                             "mongodb://" NGX_HTTP_GRIDFS_DEFAULT_MONGO "/");
    ngx_conf_merge_str_value(conf->thread_pool_name, prev->thread_pool_name,
                             "default");
    ngx_conf_merge_msec_value(conf->queue_timeout, prev->queue_timeout,
                              NGX_HTTP_GRIDFS_QUEUE_MS);
    ngx_conf_merge_size_value(conf->buffer_size, prev->buffer_size,
                              NGX_HTTP_GRIDFS_WINDOW);

    if (conf->buffer_size == 0
        || conf->buffer_size > NGX_HTTP_GRIDFS_MAX_WINDOW)
    {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "gridfs_buffer_size must be between 1 and %uz "
                           "bytes, not %uz",
                           (size_t) NGX_HTTP_GRIDFS_MAX_WINDOW,
                           conf->buffer_size);
        return NGX_CONF_ERROR;
    }

    /* the gridfs directive itself is not inherited */
    if (conf->db.data == NULL || conf->conn) {
        return NGX_CONF_OK;
    }

    conf->thread_pool = ngx_thread_pool_add(cf, &conf->thread_pool_name);
    if (conf->thread_pool == NULL) {
        return NGX_CONF_ERROR;
    }

    if (ngx_http_gridfs_add_conn(cf, conf) != NGX_OK) {
        return NGX_CONF_ERROR;
    }

    return NGX_CONF_OK;
}


/* locations with the same deployment and credentials share one client pool */

static ngx_int_t
ngx_http_gridfs_add_conn(ngx_conf_t *cf, ngx_http_gridfs_loc_conf_t *glcf)
{
    u_char                        *p, *user, *pass;
    ngx_str_t                      key, display;
    ngx_uint_t                     i;
    bson_error_t                   error;
    mongoc_uri_t                  *uri;
    ngx_pool_cleanup_t            *cln;
    ngx_http_gridfs_conn_t        *conn, **connp;
    ngx_http_gridfs_main_conf_t   *gmcf;

    gmcf = ngx_http_conf_get_module_main_conf(cf, ngx_http_gridfs_module);

    key.len = glcf->mongo.len + glcf->user.len + glcf->pass.len
              + glcf->db.len + 3;
    key.data = ngx_pnalloc(cf->pool, key.len + 1);
    if (key.data == NULL) {
        return NGX_ERROR;
    }

    if (glcf->user.len) {
        p = ngx_sprintf(key.data, "%V %V:%V@%V%Z", &glcf->mongo, &glcf->user,
                        &glcf->pass, &glcf->db);

    } else {
        p = ngx_sprintf(key.data, "%V%Z", &glcf->mongo);
    }

    key.len = p - key.data - 1;

    connp = gmcf->conns.elts;

    for (i = 0; i < gmcf->conns.nelts; i++) {
        if (connp[i]->key.len == key.len
            && ngx_strncmp(connp[i]->key.data, key.data, key.len) == 0)
        {
            glcf->conn = connp[i];
            return NGX_OK;
        }
    }

    p = ngx_pnalloc(cf->pool, glcf->mongo.len + 1);
    if (p == NULL) {
        return NGX_ERROR;
    }

    ngx_sprintf(p, "%V%Z", &glcf->mongo);

    ngx_http_gridfs_redact(&glcf->mongo, &display, cf->pool);
    if (display.data == NULL) {
        return NGX_ERROR;
    }

    uri = mongoc_uri_new_with_error((char *) p, &error);

    if (uri == NULL) {
        /* the driver's message may quote the URI: not logged */
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "invalid mongo URI \"%V\" (credentials and "
                           "options not shown): the driver refused it",
                           &display);
        return NGX_ERROR;
    }

    cln = ngx_pool_cleanup_add(cf->pool, 0);
    if (cln == NULL) {
        mongoc_uri_destroy(uri);
        return NGX_ERROR;
    }

    cln->handler = ngx_http_gridfs_uri_cleanup;
    cln->data = uri;

    if (!mongoc_uri_has_option(uri, MONGOC_URI_CONNECTTIMEOUTMS)) {
        mongoc_uri_set_option_as_int32(uri, MONGOC_URI_CONNECTTIMEOUTMS,
                                       NGX_HTTP_GRIDFS_CONNECT_MS);
    }

    if (!mongoc_uri_has_option(uri, MONGOC_URI_SERVERSELECTIONTIMEOUTMS)) {
        mongoc_uri_set_option_as_int32(uri,
                                       MONGOC_URI_SERVERSELECTIONTIMEOUTMS,
                                       NGX_HTTP_GRIDFS_SELECTION_MS);
    }

    if (!mongoc_uri_has_option(uri, MONGOC_URI_SOCKETTIMEOUTMS)) {
        mongoc_uri_set_option_as_int32(uri, MONGOC_URI_SOCKETTIMEOUTMS,
                                       NGX_HTTP_GRIDFS_SOCKET_MS);
    }

    if (!mongoc_uri_has_option(uri, MONGOC_URI_APPNAME)) {
        mongoc_uri_set_appname(uri, "nginx-gridfs");
    }

    if (glcf->user.len) {
        /* the old module's user= and pass=: authenticate against <db> */
        user = ngx_http_gridfs_cstr(cf->pool, &glcf->user);
        pass = ngx_http_gridfs_cstr(cf->pool, &glcf->pass);

        if (user == NULL || pass == NULL) {
            return NGX_ERROR;
        }

        if (!mongoc_uri_set_username(uri, (char *) user)
            || !mongoc_uri_set_password(uri, (char *) pass))
        {
            ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                               "invalid gridfs user= or pass=");
            return NGX_ERROR;
        }

        if (!mongoc_uri_has_option(uri, MONGOC_URI_AUTHSOURCE)) {
            mongoc_uri_set_auth_source(uri, (char *) glcf->db.data);
        }
    }

    conn = ngx_pcalloc(cf->pool, sizeof(ngx_http_gridfs_conn_t));
    connp = ngx_array_push(&gmcf->conns);

    if (conn == NULL || connp == NULL) {
        return NGX_ERROR;
    }

    conn->key = key;
    conn->display = display;
    conn->uri = uri;
    conn->thread_pool = glcf->thread_pool;
    *connp = conn;

    glcf->conn = conn;

    return NGX_OK;
}


static void
ngx_http_gridfs_uri_cleanup(void *data)
{
    mongoc_uri_t  *uri = data;

    mongoc_uri_destroy(uri);
}


/* the URI as logs show it: scheme, hosts and database, NUL-terminated;
 * never the userinfo (user:password@) nor the options.  A '@' in a
 * password should be escaped; cutting at the last one is safe either way */

static void
ngx_http_gridfs_redact(ngx_str_t *uri, ngx_str_t *out, ngx_pool_t *pool)
{
    u_char      *scheme_end, *hosts, *p, *last;
    ngx_uint_t   userinfo;

    last = uri->data + uri->len;
    scheme_end = NULL;

    for (p = uri->data; p + 3 <= last; p++) {
        if (p[0] == ':' && p[1] == '/' && p[2] == '/') {
            scheme_end = p + 3;
            break;
        }
    }

    out->data = ngx_pnalloc(pool,
                            uri->len + sizeof("(not a URI)<credentials>@"));
    if (out->data == NULL) {
        return;
    }

    if (scheme_end == NULL) {
        out->len = ngx_sprintf(out->data, "(not a URI)%Z") - out->data - 1;
        return;
    }

    hosts = scheme_end;
    userinfo = 0;

    for (p = last; p > scheme_end; p--) {
        if (p[-1] == '@') {
            hosts = p;
            userinfo = 1;
            break;
        }
    }

    for (p = hosts; p < last && *p != '?'; p++) { /* void */ }

    out->len = ngx_sprintf(out->data, "%*s%s%*s%Z",
                           (size_t) (scheme_end - uri->data), uri->data,
                           userinfo ? "<credentials>@" : "",
                           (size_t) (p - hosts), hosts)
               - out->data - 1;
}


static u_char *
ngx_http_gridfs_cstr(ngx_pool_t *pool, ngx_str_t *s)
{
    u_char  *p;

    p = ngx_pnalloc(pool, s->len + 1);
    if (p == NULL) {
        return NULL;
    }

    ngx_memcpy(p, s->data, s->len);
    p[s->len] = '\0';

    return p;
}


/* worker lifetime: the driver's threads and sockets must not cross fork() */

static ngx_int_t
ngx_http_gridfs_init_process(ngx_cycle_t *cycle)
{
    ngx_uint_t                     i;
    bson_error_t                   error;
    ngx_thread_task_t             *probe;
    ngx_http_gridfs_conn_t       **connp;
    ngx_http_gridfs_main_conf_t   *gmcf;

    gmcf = ngx_http_cycle_get_module_main_conf(cycle, ngx_http_gridfs_module);

    if (gmcf == NULL || gmcf->conns.nelts == 0) {
        return NGX_OK;
    }

    mongoc_init();
    mongoc_log_set_handler(ngx_http_gridfs_mongoc_log, NULL);

#if (NGX_LINUX) && defined(M_MMAP_THRESHOLD)
    /* windows and replies come and go: the worker's memory follows them */
    if (mallopt(M_MMAP_THRESHOLD, NGX_HTTP_GRIDFS_MMAP_THRESHOLD) != 1) {
        ngx_log_error(NGX_LOG_NOTICE, cycle->log, 0,
                      "gridfs: mallopt(M_MMAP_THRESHOLD) failed");
    }
#endif

    connp = gmcf->conns.elts;

    for (i = 0; i < gmcf->conns.nelts; i++) {

        connp[i]->pool = mongoc_client_pool_new_with_error(connp[i]->uri,
                                                           &error);

        if (connp[i]->pool == NULL) {
            /* requests answer 503 and say why; the worker keeps running */
            ngx_log_error(NGX_LOG_ERR, cycle->log, 0,
                          "gridfs: cannot create a client pool for \"%V\": "
                          "%s", &connp[i]->display, error.message);
            continue;
        }

        mongoc_client_pool_set_error_api(connp[i]->pool,
                                         MONGOC_ERROR_API_VERSION_2);

        connp[i]->max_streams = ngx_max(mongoc_uri_get_option_as_int32(
                                            connp[i]->uri,
                                            MONGOC_URI_MAXPOOLSIZE,
                                            NGX_HTTP_GRIDFS_POOL_SIZE), 0)
                                / 2;

        probe = ngx_thread_task_alloc(cycle->pool,
                                      sizeof(ngx_http_gridfs_conn_t *));
        if (probe == NULL) {
            return NGX_ERROR;
        }

        *(ngx_http_gridfs_conn_t **) probe->ctx = connp[i];
        probe->handler = ngx_http_gridfs_probe_handler;
        probe->event.data = connp[i];
        probe->event.handler = ngx_http_gridfs_probe_done;
        probe->event.log = cycle->log;

        connp[i]->probe = probe;
    }

    return NGX_OK;
}


/* runs after ngx_thread_pool_module has joined its threads: no job is
 * holding a client any more */

static void
ngx_http_gridfs_exit_process(ngx_cycle_t *cycle)
{
    ngx_uint_t                     i;
    ngx_http_gridfs_conn_t       **connp;
    ngx_http_gridfs_main_conf_t   *gmcf;

    gmcf = ngx_http_cycle_get_module_main_conf(cycle, ngx_http_gridfs_module);

    if (gmcf == NULL || gmcf->conns.nelts == 0) {
        return;
    }

    connp = gmcf->conns.elts;

    for (i = 0; i < gmcf->conns.nelts; i++) {
        if (connp[i]->pool) {
            mongoc_client_pool_destroy(connp[i]->pool);
            connp[i]->pool = NULL;
        }
    }

    mongoc_cleanup();
}


/* may run in driver threads: ngx_log_error() only writes to a descriptor */

static void
ngx_http_gridfs_mongoc_log(mongoc_log_level_t level, const char *domain,
    const char *message, void *data)
{
    ngx_uint_t                     i, nlevel;
    const char                    *password;
    ngx_http_gridfs_conn_t       **connp;
    ngx_http_gridfs_main_conf_t   *gmcf;

    switch (level) {

    case MONGOC_LOG_LEVEL_ERROR:
    case MONGOC_LOG_LEVEL_CRITICAL:
        nlevel = NGX_LOG_ERR;
        break;

    case MONGOC_LOG_LEVEL_WARNING:
        nlevel = NGX_LOG_WARN;
        break;

    default:
        return;
    }

    /* the configuration is read-only in workers: safe from any thread */
    gmcf = ngx_http_cycle_get_module_main_conf(ngx_cycle,
                                               ngx_http_gridfs_module);
    if (gmcf == NULL) {
        return;
    }

    connp = gmcf->conns.elts;

    for (i = 0; i < gmcf->conns.nelts; i++) {
        password = mongoc_uri_get_password(connp[i]->uri);

        if (password && password[0] && strstr(message, password)) {
            ngx_log_error(nlevel, ngx_cycle->log, 0,
                          "gridfs: mongoc %s: (a message quoting a password, "
                          "not logged)", domain);
            return;
        }
    }

    ngx_log_error(nlevel, ngx_cycle->log, 0, "gridfs: mongoc %s: %s",
                  domain, message);
}
