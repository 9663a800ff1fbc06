
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
 * With gridfs_max_responses, at most that many responses past their lookup
 * hold a buffer at once (each worker its share); the others wait in line
 * for a place, within gridfs_deadline (without one, gridfs_queue_timeout).
 * A lookup holds no buffer and takes no place.  The 503s of the deadline
 * and of the cap are logged at gridfs_overload_log_level (error).
 *
 * With gridfs_admission, a request does its database work before the
 * headers (the lookup, the first window) only when admitted: at most a
 * limit of them at once in a worker, AIMD on that work's latency against a
 * quarter of gridfs_deadline; the others wait in line a bounded time, then
 * a 503 with Retry-After before any query.  Past what the database
 * finishes within the deadline, the work would be done and then thrown
 * away at the deadline.  Without a deadline it admits everything: what it
 * admits must finish within one.
 *
 * The settings of a gridfs location hold in its "if" and "limit_except"
 * blocks, whose requests are the location's; the key is what follows the
 * location's prefix in the URI, as a "rewrite ... break" leaves it.
 *
 * A response of several windows holds a client of the pool while the pool
 * has spare ones (at most half of maxPoolSize per worker; 32 unless the
 * URI sets it): one cursor, a find and then a getMore per window through
 * that client, under one session (as MongoDB requires) and on one server,
 * and each window is sent straight from its own reply, one buffer per
 * chunk; a reply lives until its half of the buffer is read again.  The
 * drivers read a file that way; a query per window costs much more on
 * servers that do not push the n range down (FerretDB reads every chunk of
 * the file per query).  Without a spare client, each window is a query of
 * its own, copied into its half of a buffer of the request.
 *
 * Failing fast: while the deployment is away, jobs wait for it within
 * serverSelectionTimeoutMS, one of them pinging it on new connections, so
 * that a restart is served as soon as it answers again; past that time it
 * is marked unavailable in this worker, and requests then answer 503 at
 * once, without queueing, while a background ping finds out when it is
 * back.  A job that waited in the thread pool's queue longer than
 * gridfs_queue_timeout, or whose client has gone, answers without
 * querying.  A response whose headers are not out by
 * gridfs_deadline after the request arrived is a 503 at once, on the loop,
 * whatever its job waits for (libmongoc has no deadline per operation).
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

#include "ngx_http_gridfs_http.h"

#if (NGX_LINUX)
#include <malloc.h>
#endif


#if (NGX_HTTP_GRIDFS_NOT_FOUND != NGX_HTTP_NOT_FOUND                        \
     || NGX_HTTP_GRIDFS_RANGE_NOT_SATISFIABLE                                \
        != NGX_HTTP_RANGE_NOT_SATISFIABLE                                    \
     || NGX_HTTP_GRIDFS_CLIENT_CLOSED != NGX_HTTP_CLIENT_CLOSED_REQUEST      \
     || NGX_HTTP_GRIDFS_INTERNAL_ERROR != NGX_HTTP_INTERNAL_SERVER_ERROR     \
     || NGX_HTTP_GRIDFS_UNAVAILABLE != NGX_HTTP_SERVICE_UNAVAILABLE)
#error "ngx_http_gridfs.h: a status differs from nginx's"
#endif


static ngx_int_t ngx_http_gridfs_handler(ngx_http_request_t *r);
static ngx_int_t ngx_http_gridfs_not_allowed(ngx_http_request_t *r);
static ngx_int_t ngx_http_gridfs_parse_key(ngx_http_request_t *r,
    ngx_http_gridfs_loc_conf_t *glcf, ngx_http_gridfs_ctx_t *ctx);
static ngx_int_t ngx_http_gridfs_escape(ngx_pool_t *pool, ngx_str_t *key,
    ngx_str_t *out);
static void ngx_http_gridfs_probe_done(ngx_event_t *ev);
static char *ngx_http_gridfs(ngx_conf_t *cf, ngx_command_t *cmd, void *conf);
static char *ngx_http_gridfs_mongo(ngx_conf_t *cf, ngx_command_t *cmd,
    void *conf);
static void *ngx_http_gridfs_create_main_conf(ngx_conf_t *cf);
static char *ngx_http_gridfs_init_main_conf(ngx_conf_t *cf, void *conf);
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


/* the level of the 503s of gridfs_deadline and gridfs_max_responses, as
 * limit_conn_log_level's */
static ngx_conf_enum_t  ngx_http_gridfs_log_levels[] = {
    { ngx_string("info"), NGX_LOG_INFO },
    { ngx_string("notice"), NGX_LOG_NOTICE },
    { ngx_string("warn"), NGX_LOG_WARN },
    { ngx_string("error"), NGX_LOG_ERR },
    { ngx_null_string, 0 }
};


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

    { ngx_string("gridfs_deadline"),
      NGX_HTTP_MAIN_CONF|NGX_HTTP_SRV_CONF|NGX_HTTP_LOC_CONF|NGX_CONF_TAKE1,
      ngx_conf_set_msec_slot,
      NGX_HTTP_LOC_CONF_OFFSET,
      offsetof(ngx_http_gridfs_loc_conf_t, deadline),
      NULL },

    { ngx_string("gridfs_admission"),
      NGX_HTTP_MAIN_CONF|NGX_HTTP_SRV_CONF|NGX_HTTP_LOC_CONF|NGX_CONF_FLAG,
      ngx_conf_set_flag_slot,
      NGX_HTTP_LOC_CONF_OFFSET,
      offsetof(ngx_http_gridfs_loc_conf_t, admission),
      NULL },

    { ngx_string("gridfs_max_responses"),
      NGX_HTTP_MAIN_CONF|NGX_CONF_TAKE1,
      ngx_conf_set_num_slot,
      NGX_HTTP_MAIN_CONF_OFFSET,
      offsetof(ngx_http_gridfs_main_conf_t, max_responses),
      NULL },

    { ngx_string("gridfs_overload_log_level"),
      NGX_HTTP_MAIN_CONF|NGX_HTTP_SRV_CONF|NGX_HTTP_LOC_CONF|NGX_CONF_TAKE1,
      ngx_conf_set_enum_slot,
      NGX_HTTP_LOC_CONF_OFFSET,
      offsetof(ngx_http_gridfs_loc_conf_t, overload_log_level),
      &ngx_http_gridfs_log_levels },

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
    ngx_http_gridfs_init_main_conf,        /* init main configuration */

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
    ngx_str_t                    key;
    ngx_http_gridfs_ctx_t       *ctx;
    ngx_http_core_loc_conf_t    *clcf;
    ngx_http_gridfs_loc_conf_t  *glcf;

    if (!(r->method & (NGX_HTTP_GET|NGX_HTTP_HEAD))) {
        return ngx_http_gridfs_not_allowed(r);
    }

    rc = ngx_http_discard_request_body(r);

    if (rc != NGX_OK) {
        return rc;
    }

    glcf = ngx_http_get_module_loc_conf(r, ngx_http_gridfs_module);

    if (glcf->conn == NULL) {
        /* not reached: the locations that run this handler have one */
        ngx_log_error(NGX_LOG_ALERT, r->connection->log, 0,
                      "gridfs: no gridfs configuration in this location");
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    if (glcf->conn->pool == NULL) {
        ngx_log_error(NGX_LOG_ERR, r->connection->log, 0,
                      "gridfs: no MongoDB client pool for \"%V\"",
                      &glcf->conn->display);
        return ngx_http_gridfs_error(r, NGX_HTTP_SERVICE_UNAVAILABLE);
    }

    /* the key is what follows the location prefix in r->uri, which nginx
     * has already percent-decoded (and rejected with 400 if malformed) */

    clcf = ngx_http_get_module_loc_conf(r, ngx_http_core_module);

    if (r->uri.len <= clcf->name.len
        || ngx_strncmp(r->uri.data, clcf->name.data, clcf->name.len) != 0)
    {
        /* empty, or rewritten out of the location's prefix */
        ngx_log_error(NGX_LOG_INFO, r->connection->log, 0,
                      "gridfs: no key after \"%V\" in the URI",
                      &clcf->name);
        return NGX_HTTP_NOT_FOUND;
    }

    key.data = r->uri.data + clcf->name.len;
    key.len = r->uri.len - clcf->name.len;

    ctx = ngx_http_gridfs_create(r, glcf, &key);
    if (ctx == NULL) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    if (ngx_http_gridfs_escape(r->pool, &ctx->job->key, &ctx->log_key)
        != NGX_OK)
    {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    rc = ngx_http_gridfs_parse_key(r, glcf, ctx);

    if (rc != NGX_OK) {
        return rc;
    }

    if (ngx_http_gridfs_available(r, glcf, &ctx->log_key) != NGX_OK) {
        return ngx_http_gridfs_error(r, NGX_HTTP_SERVICE_UNAVAILABLE);
    }

    return ngx_http_gridfs_start(ctx);
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


/* the key, checked against the location's type */

static ngx_int_t
ngx_http_gridfs_parse_key(ngx_http_request_t *r,
    ngx_http_gridfs_loc_conf_t *glcf, ngx_http_gridfs_ctx_t *ctx)
{
    u_char                 *p, *last;
    int64_t                 n, digit;
    ngx_str_t              *key;
    ngx_uint_t              negative;
    ngx_http_gridfs_job_t  *job;

    job = ctx->job;
    key = &job->key;

    switch (glcf->type) {

    case NGX_HTTP_GRIDFS_OBJECTID:
        if (key->len != 24 || !bson_oid_is_valid((char *) key->data, 24)) {
            ngx_log_error(NGX_LOG_INFO, r->connection->log, 0,
                          "gridfs: key \"%V\" is not an ObjectId",
                          &ctx->log_key);
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
                          "gridfs: key \"%V\" is not valid UTF-8",
                          &ctx->log_key);
            return NGX_HTTP_BAD_REQUEST;
        }

        return NGX_OK;
    }

bad_int:

    ngx_log_error(NGX_LOG_INFO, r->connection->log, 0,
                  "gridfs: key \"%V\" is not an integer", &ctx->log_key);
    return NGX_HTTP_BAD_REQUEST;
}


/* a key as logs show it: printable ASCII as is, other bytes (a decoded
 * %0A, say) as \xHH, and '"' and '\' escaped, so that a key cannot forge
 * or split a log line */

static ngx_int_t
ngx_http_gridfs_escape(ngx_pool_t *pool, ngx_str_t *key, ngx_str_t *out)
{
    u_char      *p, c;
    size_t       i, n;

    for (i = 0, n = 0; i < key->len; i++) {
        c = key->data[i];

        if (c < 0x20 || c > 0x7e || c == '"' || c == '\\') {
            n++;
        }
    }

    if (n == 0) {
        *out = *key;
        return NGX_OK;
    }

    p = ngx_pnalloc(pool, key->len + 3 * n);
    if (p == NULL) {
        return NGX_ERROR;
    }

    out->data = p;

    for (i = 0; i < key->len; i++) {
        c = key->data[i];

        if (c < 0x20 || c > 0x7e || c == '"' || c == '\\') {
            p = ngx_sprintf(p, "\\x%02xd", c);

        } else {
            *p++ = c;
        }
    }

    out->len = p - out->data;

    return NGX_OK;
}


static void
ngx_http_gridfs_probe_done(ngx_event_t *ev)
{
    ngx_http_gridfs_conn_t  *conn = ev->data;

    ngx_http_gridfs_hold_del();

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

    gmcf->max_responses = NGX_CONF_UNSET;

    return gmcf;
}


static char *
ngx_http_gridfs_init_main_conf(ngx_conf_t *cf, void *conf)
{
    ngx_http_gridfs_main_conf_t *gmcf = conf;

    if (gmcf->max_responses == 0) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "gridfs_max_responses must be at least 1; "
                           "leave it out for no cap");
        return NGX_CONF_ERROR;
    }

    ngx_conf_init_value(gmcf->max_responses, 0);

    return NGX_CONF_OK;
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
    conf->deadline = NGX_CONF_UNSET_MSEC;
    conf->admission = NGX_CONF_UNSET;
    conf->buffer_size = NGX_CONF_UNSET_SIZE;
    conf->overload_log_level = NGX_CONF_UNSET_UINT;

    return conf;
}


static char *
ngx_http_gridfs_merge_loc_conf(ngx_conf_t *cf, void *parent, void *child)
{
    ngx_http_gridfs_loc_conf_t *prev = parent;
    ngx_http_gridfs_loc_conf_t *conf = child;

    ngx_http_core_loc_conf_t  *clcf;

    ngx_conf_merge_str_value(conf->mongo, prev->mongo,
                             "mongodb://" NGX_HTTP_GRIDFS_DEFAULT_MONGO "/");
    ngx_conf_merge_str_value(conf->thread_pool_name, prev->thread_pool_name,
                             "default");
    ngx_conf_merge_msec_value(conf->queue_timeout, prev->queue_timeout,
                              NGX_HTTP_GRIDFS_QUEUE_MS);
    ngx_conf_merge_msec_value(conf->deadline, prev->deadline, 0);
    ngx_conf_merge_value(conf->admission, prev->admission, 0);
    ngx_conf_merge_size_value(conf->buffer_size, prev->buffer_size,
                              NGX_HTTP_GRIDFS_WINDOW);
    ngx_conf_merge_uint_value(conf->overload_log_level,
                              prev->overload_log_level, NGX_LOG_ERR);

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

    clcf = ngx_http_conf_get_module_loc_conf(cf, ngx_http_core_module);

    if (conf->db.data == NULL && prev->conn && clcf->noname) {

        /*
         * An "if" or "limit_except" block of a gridfs location: its
         * requests are the location's (the location's content handler
         * runs with the block's configuration), so is everything the
         * gridfs directive set.  A location nested in a gridfs location
         * is not: it has a content handler of its own.
         */

        conf->db = prev->db;
        conf->files = prev->files;
        conf->chunks = prev->chunks;
        conf->field = prev->field;
        conf->type = prev->type;
        conf->user = prev->user;
        conf->pass = prev->pass;
        conf->thread_pool = prev->thread_pool;
        conf->conn = prev->conn;

        if (clcf->lmt_excpt && clcf->handler == NULL) {
            /* the methods limit_except lets through get the location's
             * answer, as with proxy_pass */
            clcf->handler = ngx_http_gridfs_handler;
        }

        return NGX_CONF_OK;
    }

    /* the gridfs directive itself is not inherited by other locations */
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

    if (!mongoc_uri_has_option(uri, MONGOC_URI_MAXPOOLSIZE)) {
        mongoc_uri_set_option_as_int32(uri, MONGOC_URI_MAXPOOLSIZE,
                                       NGX_HTTP_GRIDFS_POOL_SIZE);
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
    ngx_core_conf_t               *ccf;
    const mongoc_host_list_t      *host;
    ngx_http_gridfs_conn_t       **connp;
    ngx_http_gridfs_main_conf_t   *gmcf;

    /* workers only: not the cache manager and loader */
    if (ngx_process != NGX_PROCESS_WORKER
        && ngx_process != NGX_PROCESS_SINGLE)
    {
        return NGX_OK;
    }

    gmcf = ngx_http_cycle_get_module_main_conf(cycle, ngx_http_gridfs_module);

    if (gmcf == NULL || gmcf->conns.nelts == 0) {
        return NGX_OK;
    }

    /* the cap is the whole server's: each worker takes its share */
    ccf = (ngx_core_conf_t *) ngx_get_conf(cycle->conf_ctx, ngx_core_module);

    ngx_queue_init(&gmcf->places.waiting);
    gmcf->places.max = gmcf->max_responses
                       ? ngx_max((ngx_uint_t) gmcf->max_responses
                                 / (ngx_uint_t) ccf->worker_processes, 1)
                       : 0;

    ngx_http_gridfs_admission_init(&gmcf->admission,
                                   gmcf->places.max
                                   ? gmcf->places.max
                                   : NGX_HTTP_GRIDFS_MAX_ADMITTED);

    mongoc_init();
    mongoc_log_set_handler(ngx_http_gridfs_mongoc_log, NULL);

#if (NGX_LINUX) && defined(M_ARENA_MAX)
    /*
     * Two arenas, not one per pool thread: each keeps freed reply buffers,
     * and sixteen held 27 MiB more with 100 stalled readers
     */
    if (mallopt(M_MMAP_THRESHOLD, NGX_HTTP_GRIDFS_MMAP_THRESHOLD) != 1
        || mallopt(M_TRIM_THRESHOLD, NGX_HTTP_GRIDFS_TRIM_THRESHOLD) != 1
        || mallopt(M_ARENA_MAX, 2) != 1)
    {
        ngx_log_error(NGX_LOG_NOTICE, cycle->log, 0,
                      "gridfs: mallopt() failed");
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

        connp[i]->selection_ms = mongoc_uri_get_option_as_int32(
                                     connp[i]->uri,
                                     MONGOC_URI_SERVERSELECTIONTIMEOUTMS,
                                     NGX_HTTP_GRIDFS_SELECTION_MS);

        /* the topology numbers them 1, 2... */
        for (host = mongoc_uri_get_hosts(connp[i]->uri);
             host;
             host = host->next)
        {
            connp[i]->seeds++;
        }

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


/*
 * Runs after ngx_thread_pool_module's exit, which waits for the tasks
 * queued before its own exit tasks: usually no task of the module is left.
 * But if it could not post those (its queue full), threads still run
 * tasks, with clients of the pools: the tasks still queued are told to
 * skip their queries, and the pools are destroyed only once every task is
 * over (each ends by its socket timeout at worst), or left to the
 * process's exit.
 */

static void
ngx_http_gridfs_exit_process(ngx_cycle_t *cycle)
{
    ngx_uint_t                     i;
    ngx_msec_t                     waited;
    ngx_http_gridfs_conn_t       **connp;
    ngx_http_gridfs_main_conf_t   *gmcf;

    if (ngx_process != NGX_PROCESS_WORKER
        && ngx_process != NGX_PROCESS_SINGLE)
    {
        return;
    }

    gmcf = ngx_http_cycle_get_module_main_conf(cycle, ngx_http_gridfs_module);

    if (gmcf == NULL || gmcf->conns.nelts == 0) {
        return;
    }

    ngx_http_gridfs_exiting = 1;

    for (waited = 0;
         ngx_http_gridfs_tasks != 0 && waited < NGX_HTTP_GRIDFS_EXIT_MS;
         waited += 10)
    {
        ngx_msleep(10);
    }

    if (ngx_http_gridfs_tasks != 0) {
        ngx_log_error(NGX_LOG_WARN, cycle->log, 0,
                      "gridfs: %uA tasks still running at exit: the "
                      "MongoDB client pools are left to the process's end",
                      ngx_http_gridfs_tasks);
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
        if (ngx_http_gridfs_quiet()) {
            /* a connection refused to a server pinged while away */
            return;
        }

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
