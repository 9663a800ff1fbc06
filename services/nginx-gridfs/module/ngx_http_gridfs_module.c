
/*
 * Serves files stored in MongoDB GridFS.
 *
 * Driver calls never run on the event loop: every MongoDB round trip is a
 * job posted to an nginx thread pool, using a client from a per-worker
 * mongoc_client_pool_t.  A response is streamed one window of chunks at a
 * time: a job fills the window, the loop sends it, and the next job is
 * posted only once the output has drained, so a request holds at most one
 * window (about 1 MiB) whatever the file size.
 *
 * Conditional requests and ranges are left to nginx's own not_modified and
 * range filters; the handler only predicts which range the range filter
 * will choose, so that it reads just the chunks that cover it.
 */


#include <ngx_config.h>
#include <ngx_core.h>
#include <ngx_http.h>
#include <ngx_md5.h>
#include <ngx_thread_pool.h>

#include <mongoc/mongoc.h>


#define NGX_HTTP_GRIDFS_OBJECTID       0
#define NGX_HTTP_GRIDFS_STRING         1
#define NGX_HTTP_GRIDFS_INT            2

#define NGX_HTTP_GRIDFS_FIND           0
#define NGX_HTTP_GRIDFS_READ           1

/* bytes of chunk data a request holds at once (at least one chunk) */
#define NGX_HTTP_GRIDFS_WINDOW         (1024 * 1024)

/* applied when the URI does not set them: fail fast instead of hanging */
#define NGX_HTTP_GRIDFS_CONNECT_MS     2000
#define NGX_HTTP_GRIDFS_SELECTION_MS   3000
#define NGX_HTTP_GRIDFS_SOCKET_MS      5000

#define NGX_HTTP_GRIDFS_DEFAULT_MONGO  "127.0.0.1:27017"


/* one MongoDB deployment; its client pool lives in each worker */
typedef struct {
    ngx_str_t                    key;
    mongoc_uri_t                *uri;
    mongoc_client_pool_t        *pool;
} ngx_http_gridfs_conn_t;


typedef struct {
    ngx_array_t                  conns;   /* of ngx_http_gridfs_conn_t * */
} ngx_http_gridfs_main_conf_t;


typedef struct {
    ngx_str_t                    db;
    ngx_str_t                    files;
    ngx_str_t                    chunks;
    ngx_str_t                    field;
    ngx_uint_t                   type;
    ngx_str_t                    user;
    ngx_str_t                    pass;

    ngx_str_t                    mongo;
    ngx_str_t                    thread_pool_name;

    ngx_thread_pool_t           *thread_pool;
    ngx_http_gridfs_conn_t      *conn;
} ngx_http_gridfs_loc_conf_t;


/* everything a thread job reads or writes: never touched by the loop while
 * the job runs */
typedef struct {
    ngx_uint_t                   op;
    ngx_http_gridfs_loc_conf_t  *conf;

    /* NGX_HTTP_GRIDFS_FIND */
    ngx_str_t                    key;
    bson_oid_t                   oid;
    int64_t                      key_int;
    bson_t                      *file;

    /* NGX_HTTP_GRIDFS_READ */
    bson_value_t                *files_id;
    int64_t                      length;
    int64_t                      chunk_size;
    int64_t                      first_n;
    int64_t                      last_n;
    int64_t                      from;
    int64_t                      to;
    u_char                      *dest;

    /* outcome: 0, or the HTTP status to answer and the cause */
    ngx_uint_t                   status;
    bson_error_t                 error;
} ngx_http_gridfs_job_t;


typedef struct {
    ngx_thread_task_t           *task;
    ngx_http_gridfs_job_t       *job;

    bson_t                      *file;
    bson_value_t                 files_id;
    unsigned                     has_files_id:1;
    unsigned                     job_done:1;

    int64_t                      length;
    int64_t                      chunk_size;
    int64_t                      per_window;      /* chunks */
    off_t                        send_pos;
    off_t                        send_end;

    u_char                      *window;
    size_t                       window_size;
    ngx_buf_t                   *buf;
    ngx_chain_t                  out;
} ngx_http_gridfs_ctx_t;


static ngx_int_t ngx_http_gridfs_handler(ngx_http_request_t *r);
static ngx_int_t ngx_http_gridfs_not_allowed(ngx_http_request_t *r);
static ngx_int_t ngx_http_gridfs_parse_key(ngx_http_request_t *r,
    ngx_http_gridfs_loc_conf_t *glcf, ngx_http_gridfs_job_t *job);
static ngx_int_t ngx_http_gridfs_post(ngx_http_request_t *r,
    ngx_http_gridfs_ctx_t *ctx);
static void ngx_http_gridfs_job_event_handler(ngx_event_t *ev);
static void ngx_http_gridfs_wake_handler(ngx_http_request_t *r);
static void ngx_http_gridfs_send_header(ngx_http_request_t *r,
    ngx_http_gridfs_ctx_t *ctx);
static ngx_int_t ngx_http_gridfs_set_headers(ngx_http_request_t *r,
    ngx_http_gridfs_ctx_t *ctx);
static ngx_int_t ngx_http_gridfs_set_etag(ngx_http_request_t *r,
    ngx_http_gridfs_ctx_t *ctx, int64_t upload_ms, const char *md5);
static ngx_int_t ngx_http_gridfs_set_content_type(ngx_http_request_t *r,
    ngx_http_gridfs_ctx_t *ctx);
static off_t ngx_http_gridfs_range_start(ngx_http_request_t *r);
static ngx_int_t ngx_http_gridfs_content_range(ngx_http_request_t *r,
    off_t *start, off_t *end);
static void ngx_http_gridfs_fetch_window(ngx_http_request_t *r,
    ngx_http_gridfs_ctx_t *ctx);
static void ngx_http_gridfs_send_window(ngx_http_request_t *r,
    ngx_http_gridfs_ctx_t *ctx);
static void ngx_http_gridfs_drain(ngx_http_request_t *r,
    ngx_http_gridfs_ctx_t *ctx);
static ngx_int_t ngx_http_gridfs_wait_write(ngx_http_request_t *r);
static void ngx_http_gridfs_cleanup(void *data);

static void ngx_http_gridfs_job_handler(void *data, ngx_log_t *log);
static void ngx_http_gridfs_find_file(ngx_http_gridfs_job_t *job,
    mongoc_client_t *client);
static void ngx_http_gridfs_read_chunks(ngx_http_gridfs_job_t *job,
    mongoc_client_t *client);
static void ngx_http_gridfs_job_failed(ngx_http_gridfs_job_t *job,
    ngx_uint_t status, const char *fmt, ...);
static ngx_uint_t ngx_http_gridfs_error_status(const bson_error_t *error);

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
                      &glcf->mongo);
        return NGX_HTTP_SERVICE_UNAVAILABLE;
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
        return NGX_HTTP_SERVICE_UNAVAILABLE;
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
    ngx_str_set(&allow->key, "Allow");
    ngx_str_set(&allow->value, "GET, HEAD");

    return NGX_HTTP_NOT_ALLOWED;
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
    ngx_http_gridfs_loc_conf_t  *glcf;

    glcf = ngx_http_get_module_loc_conf(r, ngx_http_gridfs_module);

    ctx->job->status = 0;
    ctx->job_done = 0;

    if (ngx_thread_task_post(glcf->thread_pool, ctx->task) != NGX_OK) {
        return NGX_ERROR;
    }

    r->main->blocked++;
    r->aio = 1;
    r->write_event_handler = ngx_http_gridfs_wake_handler;

    return NGX_OK;
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

    ctx = ngx_http_get_module_ctx(r, ngx_http_gridfs_module);
    if (ctx) {
        ctx->job_done = 1;
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


static void
ngx_http_gridfs_wake_handler(ngx_http_request_t *r)
{
    ngx_http_gridfs_ctx_t  *ctx;

    ctx = ngx_http_get_module_ctx(r, ngx_http_gridfs_module);

    if (ctx == NULL || r->aio) {
        return;
    }

    if (!ctx->job_done) {
        ngx_http_gridfs_drain(r, ctx);
        return;
    }

    ctx->job_done = 0;

    if (ctx->job->op == NGX_HTTP_GRIDFS_FIND) {
        ngx_http_gridfs_send_header(r, ctx);

    } else {
        ngx_http_gridfs_send_window(r, ctx);
    }
}


static void
ngx_http_gridfs_send_header(ngx_http_request_t *r, ngx_http_gridfs_ctx_t *ctx)
{
    off_t                   predicted, start, end;
    ngx_int_t               rc;
    ngx_http_gridfs_job_t  *job;

    job = ctx->job;

    ctx->file = job->file;
    job->file = NULL;

    if (job->status) {
        switch (job->status) {

        case NGX_HTTP_NOT_FOUND:
            ngx_log_error(NGX_LOG_INFO, r->connection->log, 0,
                          "gridfs: \"%V\" not found in %V.%V",
                          &job->key, &job->conf->db, &job->conf->files);
            break;

        case NGX_HTTP_SERVICE_UNAVAILABLE:
            ngx_log_error(NGX_LOG_ERR, r->connection->log, 0,
                          "gridfs: MongoDB unavailable, looking up \"%V\" "
                          "in %V.%V: %s", &job->key, &job->conf->db,
                          &job->conf->files, job->error.message);
            break;

        default:
            ngx_log_error(NGX_LOG_ERR, r->connection->log, 0,
                          "gridfs: looking up \"%V\" in %V.%V failed: %s",
                          &job->key, &job->conf->db, &job->conf->files,
                          job->error.message);
        }

        ngx_http_finalize_request(r, job->status);
        return;
    }

    rc = ngx_http_gridfs_set_headers(r, ctx);

    if (rc != NGX_OK) {
        ngx_http_finalize_request(r, rc);
        return;
    }

    /* the range filter serves its range from content_offset on */
    predicted = ngx_http_gridfs_range_start(r);
    r->headers_out.content_offset = predicted;

    rc = ngx_http_send_header(r);

    if (rc == NGX_ERROR || rc > NGX_OK || r->header_only) {
        ngx_http_finalize_request(r, rc);
        return;
    }

    if (r->headers_out.status == NGX_HTTP_PARTIAL_CONTENT) {

        if (ngx_http_gridfs_content_range(r, &start, &end) != NGX_OK
            || predicted > start)
        {
            ngx_log_error(NGX_LOG_ALERT, r->connection->log, 0,
                          "gridfs: range from %O predicted, but the range "
                          "filter chose another one", predicted);
            ngx_http_finalize_request(r, NGX_ERROR);
            return;
        }

        ctx->send_pos = predicted;
        ctx->send_end = end + 1;

    } else if (r->headers_out.status == NGX_HTTP_OK) {
        ctx->send_pos = 0;
        ctx->send_end = ctx->length;

    } else {
        ngx_log_error(NGX_LOG_ALERT, r->connection->log, 0,
                      "gridfs: unexpected status %ui after headers",
                      r->headers_out.status);
        ngx_http_finalize_request(r, NGX_ERROR);
        return;
    }

    if (ctx->send_pos >= ctx->send_end) {
        ngx_http_finalize_request(r, ngx_http_send_special(r, NGX_HTTP_LAST));
        return;
    }

    ctx->per_window = ngx_max(NGX_HTTP_GRIDFS_WINDOW / ctx->chunk_size, 1);
    ctx->window_size = (size_t) ngx_min(ctx->send_end - ctx->send_pos,
                                        ctx->per_window * ctx->chunk_size);

    ctx->window = ngx_palloc(r->pool, ctx->window_size);
    ctx->buf = ngx_calloc_buf(r->pool);

    if (ctx->window == NULL || ctx->buf == NULL) {
        ngx_http_finalize_request(r, NGX_ERROR);
        return;
    }

    ngx_http_gridfs_fetch_window(r, ctx);
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

    if (bson_iter_init_find(&iter, ctx->file, "length")
        && BSON_ITER_HOLDS_NUMBER(&iter))
    {
        ctx->length = bson_iter_as_int64(&iter);
    }

    if (bson_iter_init_find(&iter, ctx->file, "chunkSize")
        && BSON_ITER_HOLDS_NUMBER(&iter))
    {
        ctx->chunk_size = bson_iter_as_int64(&iter);
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

    if (ctx->length < 0 || (ctx->length > 0 && ctx->chunk_size <= 0)
        || ctx->chunk_size > 16 * 1024 * 1024)
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
    ngx_str_set(&etag->key, "ETag");

    if (md5 && md5[0] != '\0') {
        len = ngx_strlen(md5);

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

    if (type && len) {
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
            r->exten.data = p;
            r->exten.len = name + len - p;
            break;
        }
    }

    return ngx_http_set_content_type(r);
}


/* mirrors ngx_http_range_header_filter() and ngx_http_range_parse() with
 * r->single_range set: the start of the range that filter will serve, or 0
 * when it will serve the whole file (or none of it) */

static off_t
ngx_http_gridfs_range_start(ngx_http_request_t *r)
{
    u_char                    *p;
    off_t                      start, end, first, length, cutoff, cutlim;
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
        return 0;
    }

    if (r->headers_in.if_range) {

        if_range = &r->headers_in.if_range->value;

        if (if_range->len >= 2 && if_range->data[if_range->len - 1] == '"') {
            etag = &r->headers_out.etag->value;

            if (if_range->len != etag->len
                || ngx_strncmp(if_range->data, etag->data, etag->len) != 0)
            {
                return 0;
            }

        } else {
            if (r->headers_out.last_modified_time == (time_t) -1) {
                return 0;
            }

            if_range_time = ngx_parse_http_time(if_range->data, if_range->len);

            if (if_range_time != r->headers_out.last_modified_time) {
                return 0;
            }
        }
    }

    p = r->headers_in.range->value.data + 6;
    length = r->headers_out.content_length_n;
    first = 0;
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
                return 0;
            }

            while (*p >= '0' && *p <= '9') {
                if (start >= cutoff && (start > cutoff || *p - '0' > cutlim)) {
                    return 0;
                }

                start = start * 10 + (*p++ - '0');
            }

            while (*p == ' ') { p++; }

            if (*p++ != '-') {
                return 0;
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
            return 0;
        }

        while (*p >= '0' && *p <= '9') {
            if (end >= cutoff && (end > cutoff || *p - '0' > cutlim)) {
                return 0;
            }

            end = end * 10 + (*p++ - '0');
        }

        while (*p == ' ') { p++; }

        if (*p != ',' && *p != '\0') {
            return 0;
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
                return 0;
            }

            first = start;

        } else if (start == 0) {
            return 0;
        }

        if (*p++ != ',') {
            break;
        }
    }

    return first;
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


static void
ngx_http_gridfs_fetch_window(ngx_http_request_t *r, ngx_http_gridfs_ctx_t *ctx)
{
    ngx_http_gridfs_job_t  *job;

    job = ctx->job;

    job->op = NGX_HTTP_GRIDFS_READ;
    job->files_id = &ctx->files_id;
    job->length = ctx->length;
    job->chunk_size = ctx->chunk_size;
    job->first_n = ctx->send_pos / ctx->chunk_size;
    job->last_n = ngx_min((ctx->send_end - 1) / ctx->chunk_size,
                          job->first_n + ctx->per_window - 1);
    job->from = ctx->send_pos;
    job->to = ngx_min(ctx->send_end, (job->last_n + 1) * ctx->chunk_size);
    job->dest = ctx->window;

    /* job->to - job->from <= min(remaining, per_window * chunk_size) */

    ngx_log_debug4(NGX_LOG_DEBUG_HTTP, r->connection->log, 0,
                   "gridfs read chunks %L-%L for bytes %L-%L",
                   job->first_n, job->last_n, job->from, job->to - 1);

    if (ngx_http_gridfs_post(r, ctx) != NGX_OK) {
        ngx_log_error(NGX_LOG_ERR, r->connection->log, 0,
                      "gridfs: could not post a job for \"%V\"", &job->key);
        ngx_http_finalize_request(r, NGX_ERROR);
    }
}


static void
ngx_http_gridfs_send_window(ngx_http_request_t *r, ngx_http_gridfs_ctx_t *ctx)
{
    ngx_int_t               rc;
    ngx_buf_t              *b;
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

    b = ctx->buf;
    ngx_memzero(b, sizeof(ngx_buf_t));

    b->pos = ctx->window;
    b->last = ctx->window + (job->to - job->from);
    b->memory = 1;
    b->flush = 1;

    ctx->send_pos = job->to;

    if (ctx->send_pos == ctx->send_end) {
        b->last_buf = (r == r->main) ? 1 : 0;
        b->last_in_chain = 1;
    }

    ctx->out.buf = b;
    ctx->out.next = NULL;

    rc = ngx_http_output_filter(r, &ctx->out);

    if (rc == NGX_ERROR || ctx->send_pos == ctx->send_end) {
        ngx_http_finalize_request(r, rc);
        return;
    }

    if (r->buffered || r->postponed || r->connection->buffered) {
        if (ngx_http_gridfs_wait_write(r) != NGX_OK) {
            ngx_http_finalize_request(r, NGX_ERROR);
        }

        return;
    }

    ngx_http_gridfs_fetch_window(r, ctx);
}


/* a write event while a window is still in flight: like ngx_http_writer() */

static void
ngx_http_gridfs_drain(ngx_http_request_t *r, ngx_http_gridfs_ctx_t *ctx)
{
    ngx_int_t          rc;
    ngx_event_t       *wev;
    ngx_connection_t  *c;

    c = r->connection;
    wev = c->write;

    if (ctx->buf == NULL) {
        return;
    }

    if (wev->timedout) {
        ngx_log_error(NGX_LOG_INFO, c->log, NGX_ETIMEDOUT,
                      "client timed out");
        c->timedout = 1;
        ngx_http_finalize_request(r, NGX_HTTP_REQUEST_TIME_OUT);
        return;
    }

    if (wev->delayed) {
        if (ngx_handle_write_event(wev, 0) != NGX_OK) {
            ngx_http_finalize_request(r, NGX_ERROR);
        }

        return;
    }

    rc = ngx_http_output_filter(r, NULL);

    if (rc == NGX_ERROR) {
        ngx_http_finalize_request(r, rc);
        return;
    }

    if (r->buffered || r->postponed || c->buffered) {
        if (ngx_http_gridfs_wait_write(r) != NGX_OK) {
            ngx_http_finalize_request(r, NGX_ERROR);
        }

        return;
    }

    if (wev->timer_set) {
        ngx_del_timer(wev);
    }

    ngx_http_gridfs_fetch_window(r, ctx);
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
}


/* jobs, in a thread pool thread: no nginx pools, no events */

static void
ngx_http_gridfs_job_handler(void *data, ngx_log_t *log)
{
    ngx_http_gridfs_job_t  *job = data;

    mongoc_client_t  *client;

    /* blocks only when every client of the pool is in use */
    client = mongoc_client_pool_pop(job->conf->conn->pool);

    if (job->op == NGX_HTTP_GRIDFS_FIND) {
        ngx_http_gridfs_find_file(job, client);

    } else {
        ngx_http_gridfs_read_chunks(job, client);
    }

    mongoc_client_pool_push(job->conf->conn->pool, client);
}


static void
ngx_http_gridfs_find_file(ngx_http_gridfs_job_t *job, mongoc_client_t *client)
{
    bson_t                       filter, opts, sort;
    const bson_t                *doc;
    mongoc_cursor_t             *cursor;
    mongoc_collection_t         *coll;
    ngx_http_gridfs_loc_conf_t  *conf;

    conf = job->conf;

    bson_init(&filter);
    bson_init(&opts);

    switch (conf->type) {

    case NGX_HTTP_GRIDFS_OBJECTID:
        BSON_APPEND_OID(&filter, (char *) conf->field.data, &job->oid);
        break;

    case NGX_HTTP_GRIDFS_INT:
        if (job->key_int >= INT32_MIN && job->key_int <= INT32_MAX) {
            BSON_APPEND_INT32(&filter, (char *) conf->field.data,
                              (int32_t) job->key_int);

        } else {
            BSON_APPEND_INT64(&filter, (char *) conf->field.data,
                              job->key_int);
        }

        break;

    default: /* NGX_HTTP_GRIDFS_STRING */
        bson_append_utf8(&filter, (char *) conf->field.data, -1,
                         (char *) job->key.data, (int) job->key.len);
    }

    BSON_APPEND_INT64(&opts, "limit", 1);

    if (ngx_strcmp(conf->field.data, "_id") != 0) {
        /* several revisions may share a filename: the newest wins */
        BSON_APPEND_DOCUMENT_BEGIN(&opts, "sort", &sort);
        BSON_APPEND_INT32(&sort, "uploadDate", -1);
        bson_append_document_end(&opts, &sort);
    }

    coll = mongoc_client_get_collection(client, (char *) conf->db.data,
                                        (char *) conf->files.data);

    cursor = mongoc_collection_find_with_opts(coll, &filter, &opts, NULL);

    if (mongoc_cursor_next(cursor, &doc)) {
        job->file = bson_copy(doc);

        if (job->file == NULL) {
            ngx_http_gridfs_job_failed(job, NGX_HTTP_INTERNAL_SERVER_ERROR,
                                       "out of memory");
        }

    } else if (mongoc_cursor_error(cursor, &job->error)) {
        job->status = ngx_http_gridfs_error_status(&job->error);

    } else {
        ngx_http_gridfs_job_failed(job, NGX_HTTP_NOT_FOUND, "no such file");
    }

    mongoc_cursor_destroy(cursor);
    mongoc_collection_destroy(coll);
    bson_destroy(&opts);
    bson_destroy(&filter);
}


static void
ngx_http_gridfs_read_chunks(ngx_http_gridfs_job_t *job,
    mongoc_client_t *client)
{
    int64_t               n, expect, chunk_start, chunk_len, from, to;
    uint32_t              len;
    bson_t                filter, opts, sub;
    bson_iter_t           iter;
    bson_subtype_t        subtype;
    const bson_t         *doc;
    const uint8_t        *data;
    mongoc_cursor_t      *cursor;
    mongoc_collection_t  *coll;

    bson_init(&filter);
    bson_init(&opts);

    BSON_APPEND_VALUE(&filter, "files_id", job->files_id);
    BSON_APPEND_DOCUMENT_BEGIN(&filter, "n", &sub);
    BSON_APPEND_INT64(&sub, "$gte", job->first_n);
    BSON_APPEND_INT64(&sub, "$lte", job->last_n);
    bson_append_document_end(&filter, &sub);

    BSON_APPEND_DOCUMENT_BEGIN(&opts, "sort", &sub);
    BSON_APPEND_INT32(&sub, "n", 1);
    bson_append_document_end(&opts, &sub);

    BSON_APPEND_DOCUMENT_BEGIN(&opts, "projection", &sub);
    BSON_APPEND_INT32(&sub, "_id", 0);
    BSON_APPEND_INT32(&sub, "n", 1);
    BSON_APPEND_INT32(&sub, "data", 1);
    bson_append_document_end(&opts, &sub);

    coll = mongoc_client_get_collection(client, (char *) job->conf->db.data,
                                        (char *) job->conf->chunks.data);

    cursor = mongoc_collection_find_with_opts(coll, &filter, &opts, NULL);

    expect = job->first_n;

    while (mongoc_cursor_next(cursor, &doc)) {

        if (!bson_iter_init_find(&iter, doc, "n")
            || !BSON_ITER_HOLDS_NUMBER(&iter))
        {
            ngx_http_gridfs_job_failed(job, NGX_HTTP_INTERNAL_SERVER_ERROR,
                                       "chunk without n after chunk %"
                                       PRId64, expect - 1);
            goto done;
        }

        n = bson_iter_as_int64(&iter);

        if (n != expect) {
            ngx_http_gridfs_job_failed(job, NGX_HTTP_INTERNAL_SERVER_ERROR,
                                       "chunk %" PRId64 " is missing", expect);
            goto done;
        }

        if (!bson_iter_init_find(&iter, doc, "data")
            || !BSON_ITER_HOLDS_BINARY(&iter))
        {
            ngx_http_gridfs_job_failed(job, NGX_HTTP_INTERNAL_SERVER_ERROR,
                                       "chunk %" PRId64 " has no binary data",
                                       n);
            goto done;
        }

        bson_iter_binary(&iter, &subtype, &len, &data);

        chunk_start = n * job->chunk_size;
        chunk_len = ngx_min(job->chunk_size, job->length - chunk_start);

        if ((int64_t) len != chunk_len) {
            ngx_http_gridfs_job_failed(job, NGX_HTTP_INTERNAL_SERVER_ERROR,
                                       "chunk %" PRId64 " has %u bytes, "
                                       "%" PRId64 " expected",
                                       n, len, chunk_len);
            goto done;
        }

        from = ngx_max(job->from, chunk_start);
        to = ngx_min(job->to, chunk_start + chunk_len);

        if (from < to) {
            ngx_memcpy(job->dest + (from - job->from),
                       data + (from - chunk_start), (size_t) (to - from));
        }

        expect++;
    }

    if (mongoc_cursor_error(cursor, &job->error)) {
        job->status = ngx_http_gridfs_error_status(&job->error);

    } else if (expect != job->last_n + 1) {
        ngx_http_gridfs_job_failed(job, NGX_HTTP_INTERNAL_SERVER_ERROR,
                                   "chunk %" PRId64 " is missing", expect);
    }

done:

    mongoc_cursor_destroy(cursor);
    mongoc_collection_destroy(coll);
    bson_destroy(&opts);
    bson_destroy(&filter);
}


static void
ngx_http_gridfs_job_failed(ngx_http_gridfs_job_t *job, ngx_uint_t status,
    const char *fmt, ...)
{
    va_list  args;

    job->status = status;

    va_start(args, fmt);
    vsnprintf(job->error.message, sizeof(job->error.message), fmt, args);
    va_end(args);
}


/* the server answered with an error: ours; anything else (no server
 * selectable, connection refused or timed out): MongoDB is unavailable */

static ngx_uint_t
ngx_http_gridfs_error_status(const bson_error_t *error)
{
    switch (error->domain) {

    case MONGOC_ERROR_SERVER:
    case MONGOC_ERROR_QUERY:
    case MONGOC_ERROR_BSON:
    case MONGOC_ERROR_CURSOR:
        return NGX_HTTP_INTERNAL_SERVER_ERROR;

    default:
        return NGX_HTTP_SERVICE_UNAVAILABLE;
    }
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
    ngx_str_t                      key;
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

    uri = mongoc_uri_new_with_error((char *) p, &error);

    if (uri == NULL) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "invalid mongo URI \"%V\": %s",
                           &glcf->mongo, error.message);
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
    conn->uri = uri;
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
    ngx_http_gridfs_conn_t       **connp;
    ngx_http_gridfs_main_conf_t   *gmcf;

    gmcf = ngx_http_cycle_get_module_main_conf(cycle, ngx_http_gridfs_module);

    if (gmcf == NULL || gmcf->conns.nelts == 0) {
        return NGX_OK;
    }

    mongoc_init();
    mongoc_log_set_handler(ngx_http_gridfs_mongoc_log, NULL);

    connp = gmcf->conns.elts;

    for (i = 0; i < gmcf->conns.nelts; i++) {

        connp[i]->pool = mongoc_client_pool_new_with_error(connp[i]->uri,
                                                           &error);

        if (connp[i]->pool == NULL) {
            /* requests answer 503 and say why; the worker keeps running */
            ngx_log_error(NGX_LOG_ERR, cycle->log, 0,
                          "gridfs: cannot create a client pool for \"%s\": %s",
                          mongoc_uri_get_string(connp[i]->uri), error.message);
            continue;
        }

        mongoc_client_pool_set_error_api(connp[i]->pool,
                                         MONGOC_ERROR_API_VERSION_2);
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
    ngx_uint_t  nlevel;

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

    ngx_log_error(nlevel, ngx_cycle->log, 0, "gridfs: mongoc %s: %s",
                  domain, message);
}
