
/*
 * The thread side of ngx_http_gridfs_module: every libmongoc call and the
 * parsing of what the server sent, run in nginx's thread pool.  It sees
 * jobs and streams only, never a request: the event loop hands it a job
 * and reads the outcome once the job is done.  No nginx pools, no events.
 */


#include "ngx_http_gridfs.h"


static void ngx_http_gridfs_job_run(ngx_http_gridfs_job_t *job,
    ngx_log_t *log);
static void ngx_http_gridfs_probe_run(ngx_http_gridfs_conn_t *conn,
    ngx_log_t *log);
static void ngx_http_gridfs_query(ngx_http_gridfs_job_t *job,
    mongoc_client_t *client);
static void ngx_http_gridfs_find_file(ngx_http_gridfs_job_t *job,
    mongoc_client_t *client);
static void ngx_http_gridfs_read_chunks(ngx_http_gridfs_job_t *job,
    mongoc_client_t *client);
static void ngx_http_gridfs_stream_chunks(ngx_http_gridfs_job_t *job);
static ngx_int_t ngx_http_gridfs_stream_open(ngx_http_gridfs_job_t *job);
static ngx_int_t ngx_http_gridfs_stream_batch(ngx_http_gridfs_job_t *job,
    bson_t *reply);
static ngx_int_t ngx_http_gridfs_stream_parts(ngx_http_gridfs_job_t *job,
    const bson_t *reply);
static ngx_int_t ngx_http_gridfs_stream_command(
    ngx_http_gridfs_stream_t *stream, const bson_t *cmd, bson_t *reply,
    bson_error_t *error);
static void ngx_http_gridfs_stream_kill(ngx_http_gridfs_stream_t *stream);
static void ngx_http_gridfs_chunks_filter(ngx_http_gridfs_job_t *job,
    bson_t *filter);
static mongoc_cursor_t *ngx_http_gridfs_chunks_query(
    ngx_http_gridfs_job_t *job, mongoc_collection_t *coll);
static ngx_int_t ngx_http_gridfs_chunk_data(ngx_http_gridfs_job_t *job,
    const bson_t *doc, int64_t n, ngx_str_t *part, int64_t *offset);
static void ngx_http_gridfs_job_failed(ngx_http_gridfs_job_t *job,
    ngx_uint_t status, const char *fmt, ...);
static void ngx_http_gridfs_cursor_failed(ngx_http_gridfs_job_t *job,
    mongoc_client_t *client);
static ngx_uint_t ngx_http_gridfs_all_unknown(mongoc_client_t *client);
static ngx_int_t ngx_http_gridfs_wake(ngx_http_gridfs_job_t *job,
    mongoc_client_t *client, ngx_uint_t lost);
static ngx_uint_t ngx_http_gridfs_known(ngx_http_gridfs_conn_t *conn,
    mongoc_client_t *client);
static ngx_int_t ngx_http_gridfs_ping(ngx_http_gridfs_conn_t *conn,
    mongoc_client_t *client, bson_error_t *error);
static ngx_uint_t ngx_http_gridfs_backend_down(const char *message);
static ngx_uint_t ngx_http_gridfs_login_refused(const char *message);


/* set while this thread pings servers the driver lost: the driver warns of
 * every connection refused, and the outage is logged once, by the job that
 * marks it */
static __thread ngx_uint_t  ngx_http_gridfs_pinging;


ngx_atomic_t  ngx_http_gridfs_tasks;
ngx_atomic_t  ngx_http_gridfs_exiting;


/* the last thing a task handler does: after it, the thread touches nothing
 * of the module's (ngx_http_gridfs_exit_process() counts on it) */

void
ngx_http_gridfs_task_over(void)
{
    (void) ngx_atomic_fetch_add(&ngx_http_gridfs_tasks, -1);
}


void
ngx_http_gridfs_job_handler(void *data, ngx_log_t *log)
{
    ngx_http_gridfs_job_run(data, log);
    ngx_http_gridfs_task_over();
}


static void
ngx_http_gridfs_job_run(ngx_http_gridfs_job_t *job, ngx_log_t *log)
{
    int64_t                  waited, started;
    mongoc_client_t         *client;
    ngx_http_gridfs_conn_t  *conn;

    conn = job->conf->conn;
    started = ngx_http_gridfs_now_ms();

    if (job->abandoned) {
        ngx_http_gridfs_job_failed(job, NGX_HTTP_GRIDFS_CLIENT_CLOSED,
                                   "the client has gone");
        return;
    }

    if (ngx_http_gridfs_exiting) {
        ngx_http_gridfs_job_failed(job, NGX_HTTP_GRIDFS_UNAVAILABLE,
                                   "the worker is exiting");
        return;
    }

    waited = started - job->posted_ms;

    if (job->max_wait && waited > (int64_t) job->max_wait) {
        ngx_http_gridfs_job_failed(job, NGX_HTTP_GRIDFS_UNAVAILABLE,
                                   "waited %" PRId64 " ms for a thread, more "
                                   "than gridfs_queue_timeout", waited);
        return;
    }

    /* a response already started tries anyway: it would be cut short */
    if (conn->down && !job->continued) {
        job->away = 1;
        ngx_http_gridfs_job_failed(job, NGX_HTTP_GRIDFS_UNAVAILABLE,
                                   "%s did not answer recently, retrying in "
                                   "the background", conn->display.data);
        return;
    }

    if (job->op == NGX_HTTP_GRIDFS_READ && job->stream) {
        ngx_http_gridfs_stream_chunks(job);

    } else {
        /* blocks only when every client of the pool is in use, and for
         * at most waitQueueTimeoutMS if the URI sets it */
        client = mongoc_client_pool_pop(conn->pool);

        if (client == NULL) {
            ngx_http_gridfs_job_failed(job, NGX_HTTP_GRIDFS_UNAVAILABLE,
                                       "no client of the pool was free "
                                       "within waitQueueTimeoutMS");
            return;
        }

        if (ngx_http_gridfs_wake(job, client, 0) == NGX_OK) {
            ngx_http_gridfs_query(job, client);

            if (job->unreachable && job->error.domain == MONGOC_ERROR_STREAM)
            {
                /* its connection failed: the query waits for the server,
                 * as it would in server selection, then runs once more,
                 * rather than mark the deployment unavailable at once */
                job->status = 0;
                job->unreachable = 0;
                ngx_memzero(&job->error, sizeof(bson_error_t));

                if (ngx_http_gridfs_wake(job, client, 1) == NGX_OK) {
                    ngx_http_gridfs_query(job, client);
                }
            }
        }

        mongoc_client_pool_push(conn->pool, client);
    }

    /* it failed for want of a server, a job found the deployment
     * unreachable while this one ran, or found it again after this one was
     * posted: whatever it waited for (a server, the driver's own selection,
     * a thread) was the outage */
    if (job->unreachable
        || (int64_t) conn->lost_ms >= started
        || (int64_t) conn->found_ms >= job->posted_ms)
    {
        job->away = 1;
    }

    /* logged once per outage, not once per request */
    if (job->unreachable && ngx_atomic_cmp_set(&conn->down, 0, 1)) {
        ngx_log_error(NGX_LOG_ERR, log, 0,
                      "gridfs: %V unavailable: %s; answering 503 until a "
                      "ping succeeds", &conn->display, job->error.message);
    }
}


static void
ngx_http_gridfs_query(ngx_http_gridfs_job_t *job, mongoc_client_t *client)
{
    if (job->op == NGX_HTTP_GRIDFS_FIND) {
        ngx_http_gridfs_find_file(job, client);

    } else {
        ngx_http_gridfs_read_chunks(job, client);
    }
}


/* a ping, while the deployment is marked unavailable */

void
ngx_http_gridfs_probe_handler(void *data, ngx_log_t *log)
{
    ngx_http_gridfs_conn_t  **connp = data;

    if (!ngx_http_gridfs_exiting) {
        ngx_http_gridfs_probe_run(*connp, log);
    }

    ngx_http_gridfs_task_over();
}


static void
ngx_http_gridfs_probe_run(ngx_http_gridfs_conn_t *conn, ngx_log_t *log)
{
    bson_t            ping;
    bson_error_t      error;
    mongoc_client_t  *client;

    bson_init(&ping);
    BSON_APPEND_INT32(&ping, "ping", 1);

    client = mongoc_client_pool_pop(conn->pool);

    if (client == NULL) {
        /* waitQueueTimeoutMS: every client busy, the next probe retries */
        bson_destroy(&ping);
        return;
    }

    /* a server the driver lost is pinged on a new connection first: the
     * ping below would wait for the driver's monitor to find it again */
    if ((ngx_http_gridfs_known(conn, client)
         || ngx_http_gridfs_ping(conn, client, &error) == NGX_OK)
        && mongoc_client_command_simple(client, "admin", &ping, NULL, NULL,
                                        &error))
    {
        conn->down = 0;
        ngx_log_error(NGX_LOG_NOTICE, log, 0,
                      "gridfs: %V answers again", &conn->display);
    }

    mongoc_client_pool_push(conn->pool, client);
    bson_destroy(&ping);
}


ngx_uint_t
ngx_http_gridfs_quiet(void)
{
    return ngx_http_gridfs_pinging;
}


int64_t
ngx_http_gridfs_now_ms(void)
{
    struct timespec  ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);

    return (int64_t) ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
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
    BSON_APPEND_BOOL(&opts, "singleBatch", true);

    /* only what the headers need: metadata may be large */
    BSON_APPEND_DOCUMENT_BEGIN(&opts, "projection", &sort);
    BSON_APPEND_INT32(&sort, "_id", 1);
    BSON_APPEND_INT32(&sort, "length", 1);
    BSON_APPEND_INT32(&sort, "chunkSize", 1);
    BSON_APPEND_INT32(&sort, "uploadDate", 1);
    BSON_APPEND_INT32(&sort, "md5", 1);
    BSON_APPEND_INT32(&sort, "contentType", 1);
    BSON_APPEND_INT32(&sort, "metadata.contentType", 1);
    BSON_APPEND_INT32(&sort, "filename", 1);
    bson_append_document_end(&opts, &sort);

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
            ngx_http_gridfs_job_failed(job, NGX_HTTP_GRIDFS_INTERNAL_ERROR,
                                       "out of memory");
        }

    } else if (mongoc_cursor_error(cursor, &job->error)) {
        ngx_http_gridfs_cursor_failed(job, client);

    } else {
        ngx_http_gridfs_job_failed(job, NGX_HTTP_GRIDFS_NOT_FOUND,
                                   "no such file");
    }

    mongoc_cursor_destroy(cursor);
    mongoc_collection_destroy(coll);
    bson_destroy(&opts);
    bson_destroy(&filter);
}


/* one query for the window, copied into the request's buffer */

static void
ngx_http_gridfs_read_chunks(ngx_http_gridfs_job_t *job,
    mongoc_client_t *client)
{
    int64_t               n, offset;
    ngx_str_t             part;
    const bson_t         *doc;
    mongoc_cursor_t      *cursor;
    mongoc_collection_t  *coll;

    /* chunk_data keeps each part within [from, to): the buffer must hold
     * that much */
    if (job->from < 0 || job->to <= job->from
        || (uint64_t) (job->to - job->from) > job->dest_size)
    {
        ngx_http_gridfs_job_failed(job, NGX_HTTP_GRIDFS_INTERNAL_ERROR,
                                   "window %" PRId64 "-%" PRId64 " does not "
                                   "fit a buffer of %zu bytes",
                                   job->from, job->to, job->dest_size);
        return;
    }

    coll = mongoc_client_get_collection(client, (char *) job->conf->db.data,
                                        (char *) job->conf->chunks.data);

    cursor = ngx_http_gridfs_chunks_query(job, coll);

    for (n = job->first_n; n <= job->last_n; n++) {

        if (!mongoc_cursor_next(cursor, &doc)) {
            if (mongoc_cursor_error(cursor, &job->error)) {
                ngx_http_gridfs_cursor_failed(job, client);

            } else {
                ngx_http_gridfs_job_failed(job,
                                           NGX_HTTP_GRIDFS_INTERNAL_ERROR,
                                           "chunk %" PRId64 " is missing", n);
            }

            break;
        }

        if (ngx_http_gridfs_chunk_data(job, doc, n, &part, &offset)
            != NGX_OK)
        {
            break;
        }

        ngx_memcpy(job->dest + offset, part.data, part.len);
    }

    mongoc_cursor_destroy(cursor);
    mongoc_collection_destroy(coll);
}


/* the window from the response's cursor: opened by the first job (with
 * the client, if one is spare), continued by a getMore per window; each
 * reply is kept in its half of the buffer, so that the window can be sent
 * from it while the next one is read into the other half.  After an error
 * the client goes back to the pool */

static void
ngx_http_gridfs_stream_chunks(ngx_http_gridfs_job_t *job)
{
    bson_t                    *reply;
    ngx_uint_t                 retried;
    ngx_http_gridfs_stream_t  *stream;

    stream = job->stream;

    if (stream->client == NULL) {
        /* never waits: without one, the loop falls back to a query per
         * window */
        stream->client = mongoc_client_pool_try_pop(job->conf->conn->pool);

        if (stream->client == NULL) {
            job->no_client = 1;
            return;
        }

        if (ngx_http_gridfs_stream_open(job) != NGX_OK) {
            goto failed;
        }
    }

    if (stream->opened
        && (stream->next_n != job->first_n || stream->end_n != job->end_n))
    {
        /* the filters chose other bytes than predicted: the cursor, which
         * ends with the last chunk it was opened for, is opened again */
        ngx_http_gridfs_stream_kill(stream);
        stream->opened = 0;
    }

    /* the window this half held was sent: its reply goes */
    reply = &stream->reply[job->half];

    if (stream->has_reply & (1 << job->half)) {
        bson_destroy(reply);
        stream->has_reply &= ~(1 << job->half);
    }

    retried = 0;

    for ( ;; ) {

        if (ngx_http_gridfs_stream_batch(job, reply) == NGX_OK) {
            stream->has_reply |= 1 << job->half;
            break;
        }

        bson_destroy(reply);

        if (job->status) {
            goto failed;
        }

        if ((job->error.domain == MONGOC_ERROR_SERVER
             || job->error.domain == MONGOC_ERROR_QUERY)
            && job->error.code == NGX_HTTP_GRIDFS_CURSOR_GONE
            && !retried)
        {
            /* the server dropped it, idle while a slow client drained */
            retried = 1;
            stream->cursor_id = 0;
            stream->opened = 0;
            continue;
        }

        /* a cursor the server failed is gone: nothing to kill */
        stream->cursor_id = 0;

        ngx_http_gridfs_cursor_failed(job, stream->client);
        goto failed;
    }

    if (ngx_http_gridfs_stream_parts(job, reply) != NGX_OK) {
        goto failed;
    }

    stream->next_n = job->last_n + 1;

    return;

failed:

    job->nparts = 0;
    ngx_http_gridfs_stream_put(stream);
}


/* the client's server for the whole response, and a session: a getMore
 * must run on the cursor's server, in the cursor's session */

static ngx_int_t
ngx_http_gridfs_stream_open(ngx_http_gridfs_job_t *job)
{
    ngx_http_gridfs_stream_t     *stream;
    mongoc_server_description_t  *sd;

    stream = job->stream;

    sd = mongoc_client_select_server(stream->client, false, NULL,
                                     &job->error);
    if (sd == NULL) {
        ngx_http_gridfs_cursor_failed(job, stream->client);
        return NGX_ERROR;
    }

    stream->server_id = mongoc_server_description_id(sd);
    mongoc_server_description_destroy(sd);

    /* NULL if the deployment has no sessions: then no command has one */
    stream->session = mongoc_client_start_session(stream->client, NULL,
                                                  &job->error);

    if (stream->session == NULL
        && job->error.domain == MONGOC_ERROR_SERVER_SELECTION)
    {
        ngx_http_gridfs_cursor_failed(job, stream->client);
        return NGX_ERROR;
    }

    stream->coll = mongoc_client_get_collection(stream->client,
                                               (char *) job->conf->db.data,
                                               (char *) job->conf->chunks.data);
    return NGX_OK;
}


/* the window's batch: a find from first_n, whose limit is the response's
 * last chunk, or a getMore on it; NGX_ERROR and job->error, or
 * job->status set */

static ngx_int_t
ngx_http_gridfs_stream_batch(ngx_http_gridfs_job_t *job, bson_t *reply)
{
    int64_t                    batch;
    bson_t                     cmd, filter, sort;
    ngx_int_t                  rc;
    ngx_http_gridfs_stream_t  *stream;

    stream = job->stream;
    batch = job->last_n - job->first_n + 1;

    bson_init(&cmd);

    if (!stream->opened) {
        bson_append_utf8(&cmd, "find", 4, (char *) job->conf->chunks.data,
                         (int) job->conf->chunks.len);

        BSON_APPEND_DOCUMENT_BEGIN(&cmd, "filter", &filter);
        ngx_http_gridfs_chunks_filter(job, &filter);
        bson_append_document_end(&cmd, &filter);

        BSON_APPEND_DOCUMENT_BEGIN(&cmd, "sort", &sort);
        BSON_APPEND_INT32(&sort, "n", 1);
        bson_append_document_end(&cmd, &sort);

        /* the server closes the cursor with the last chunk */
        BSON_APPEND_INT64(&cmd, "limit", job->end_n - job->first_n + 1);
        BSON_APPEND_INT64(&cmd, "batchSize", batch);

        job->opened = 1;
        stream->opened = 1;
        stream->cursor_id = 0;
        stream->end_n = job->end_n;

    } else if (stream->cursor_id != 0) {
        BSON_APPEND_INT64(&cmd, "getMore", stream->cursor_id);
        bson_append_utf8(&cmd, "collection", 10,
                         (char *) job->conf->chunks.data,
                         (int) job->conf->chunks.len);
        BSON_APPEND_INT64(&cmd, "batchSize", batch);

    } else {
        bson_destroy(&cmd);
        bson_init(reply);
        ngx_http_gridfs_job_failed(job, NGX_HTTP_GRIDFS_INTERNAL_ERROR,
                                   "chunk %" PRId64 " is missing",
                                   job->first_n);
        return NGX_ERROR;
    }

    rc = ngx_http_gridfs_stream_command(stream, &cmd, reply, &job->error);

    bson_destroy(&cmd);

    return rc;
}


/* the chunks of the window in the reply, as parts; a batch the server cut
 * short (a reply is at most 16 MiB) makes a shorter window */

static ngx_int_t
ngx_http_gridfs_stream_parts(ngx_http_gridfs_job_t *job, const bson_t *reply)
{
    int64_t                    n, offset;
    uint32_t                   len;
    bson_t                     doc;
    bson_iter_t                iter, cursor, batch;
    const uint8_t             *data;
    ngx_uint_t                 found;
    ngx_http_gridfs_stream_t  *stream;

    stream = job->stream;
    found = 0;

    if (bson_iter_init_find(&iter, reply, "cursor")
        && BSON_ITER_HOLDS_DOCUMENT(&iter)
        && bson_iter_recurse(&iter, &cursor))
    {
        while (bson_iter_next(&cursor)) {

            if (BSON_ITER_IS_KEY(&cursor, "id")) {
                stream->cursor_id = bson_iter_as_int64(&cursor);

            } else if ((BSON_ITER_IS_KEY(&cursor, "firstBatch")
                        || BSON_ITER_IS_KEY(&cursor, "nextBatch"))
                       && BSON_ITER_HOLDS_ARRAY(&cursor)
                       && bson_iter_recurse(&cursor, &batch))
            {
                found = 1;
            }
        }
    }

    if (!found) {
        ngx_http_gridfs_job_failed(job, NGX_HTTP_GRIDFS_INTERNAL_ERROR,
                                   "invalid reply to a chunks query");
        return NGX_ERROR;
    }

    for (n = job->first_n; n <= job->last_n; n++) {

        if (!bson_iter_next(&batch)) {
            break;
        }

        if (!BSON_ITER_HOLDS_DOCUMENT(&batch)) {
            ngx_http_gridfs_job_failed(job, NGX_HTTP_GRIDFS_INTERNAL_ERROR,
                                       "chunk %" PRId64 " is not a document",
                                       n);
            return NGX_ERROR;
        }

        bson_iter_document(&batch, &len, &data);

        if (!bson_init_static(&doc, data, len)
            || ngx_http_gridfs_chunk_data(job, &doc, n,
                                          &job->parts[job->nparts], &offset)
               != NGX_OK)
        {
            if (!job->status) {
                ngx_http_gridfs_job_failed(job,
                                           NGX_HTTP_GRIDFS_INTERNAL_ERROR,
                                           "chunk %" PRId64 " is invalid", n);
            }

            return NGX_ERROR;
        }

        job->nparts++;
    }

    if (n == job->first_n) {
        /* an empty batch: the cursor ended (or was cut) before the chunk */
        ngx_http_gridfs_job_failed(job, NGX_HTTP_GRIDFS_INTERNAL_ERROR,
                                   "chunk %" PRId64 " is missing", n);
        return NGX_ERROR;
    }

    if (n <= job->last_n) {
        job->last_n = n - 1;
        job->to = ngx_min(job->to, n * job->chunk_size);
    }

    return NGX_OK;
}


static ngx_int_t
ngx_http_gridfs_stream_command(ngx_http_gridfs_stream_t *stream,
    const bson_t *cmd, bson_t *reply, bson_error_t *error)
{
    bool    ok;
    bson_t  opts;

    bson_init(&opts);

    BSON_APPEND_INT32(&opts, "serverId", (int32_t) stream->server_id);

    if (stream->session
        && !mongoc_client_session_append(stream->session, &opts, error))
    {
        bson_destroy(&opts);
        bson_init(reply);
        return NGX_ERROR;
    }

    ok = mongoc_collection_read_command_with_opts(stream->coll, cmd, NULL,
                                                  &opts, reply, error);
    bson_destroy(&opts);

    return ok ? NGX_OK : NGX_ERROR;
}


/* best effort: the server drops an idle cursor after 10 minutes anyway */

static void
ngx_http_gridfs_stream_kill(ngx_http_gridfs_stream_t *stream)
{
    bson_t        cmd, ids, reply;
    bson_error_t  error;

    if (stream->cursor_id == 0 || stream->coll == NULL) {
        stream->cursor_id = 0;
        return;
    }

    bson_init(&cmd);
    BSON_APPEND_UTF8(&cmd, "killCursors",
                     mongoc_collection_get_name(stream->coll));
    BSON_APPEND_ARRAY_BEGIN(&cmd, "cursors", &ids);
    BSON_APPEND_INT64(&ids, "0", stream->cursor_id);
    bson_append_array_end(&cmd, &ids);

    (void) ngx_http_gridfs_stream_command(stream, &cmd, &reply, &error);

    bson_destroy(&reply);
    bson_destroy(&cmd);

    stream->cursor_id = 0;
}


/* chunks first_n to last_n of the file, in order, in a single reply */

static mongoc_cursor_t *
ngx_http_gridfs_chunks_query(ngx_http_gridfs_job_t *job,
    mongoc_collection_t *coll)
{
    int64_t           count, overhead;
    bson_t            filter, opts, sub;
    mongoc_cursor_t  *cursor;

    bson_init(&filter);
    bson_init(&opts);

    ngx_http_gridfs_chunks_filter(job, &filter);

    BSON_APPEND_DOCUMENT_BEGIN(&opts, "sort", &sub);
    BSON_APPEND_INT32(&sub, "n", 1);
    bson_append_document_end(&opts, &sub);

    count = job->last_n - job->first_n + 1;

    BSON_APPEND_INT64(&opts, "limit", count);
    BSON_APPEND_INT64(&opts, "batchSize", count);

    /*
     * The whole window in a single reply, and no cursor left on the server
     * (FerretDB keeps one open past the limit: a killCursors more), if it
     * fits in one: a reply is at most 16 MiB.  Else (tiny chunks, or two
     * chunks of nearly 8 MiB) the server cuts the batch short and the
     * driver's getMores read the rest.
     */
    overhead = NGX_HTTP_GRIDFS_CHUNK_OVERHEAD;

    if (job->files_id.value_type == BSON_TYPE_UTF8) {
        overhead += job->files_id.value.v_utf8.len;

    } else if (job->files_id.value_type == BSON_TYPE_BINARY) {
        overhead += job->files_id.value.v_binary.data_len;
    }

    if (count <= NGX_HTTP_GRIDFS_MAX_REPLY / (job->chunk_size + overhead)) {
        BSON_APPEND_BOOL(&opts, "singleBatch", true);
    }

    /*
     * No projection: a chunk's other fields are a few dozen bytes, and a
     * server that projects after fetching (FerretDB) would rebuild every
     * chunk document, data included, to drop them.
     */

    /* the cursor keeps copies of both */
    cursor = mongoc_collection_find_with_opts(coll, &filter, &opts, NULL);

    bson_destroy(&opts);
    bson_destroy(&filter);

    return cursor;
}


/*
 * The drivers' query: a file read from its start filters on files_id
 * alone, and the limit, not an upper bound on n, ends the window. A
 * condition the server cannot use costs it CPU on every chunk (FerretDB
 * checks it after fetching).
 */

static void
ngx_http_gridfs_chunks_filter(ngx_http_gridfs_job_t *job, bson_t *filter)
{
    bson_t  sub;

    BSON_APPEND_VALUE(filter, "files_id", &job->files_id);

    if (job->first_n > 0) {
        BSON_APPEND_DOCUMENT_BEGIN(filter, "n", &sub);
        BSON_APPEND_INT64(&sub, "$gte", job->first_n);
        bson_append_document_end(filter, &sub);
    }
}


/* chunk n, checked against the files document and the window: its bytes
 * within the window as part, at offset in the window; or the job fails */

static ngx_int_t
ngx_http_gridfs_chunk_data(ngx_http_gridfs_job_t *job, const bson_t *doc,
    int64_t n, ngx_str_t *part, int64_t *offset)
{
    if (ngx_http_gridfs_chunk_part(doc, n, job->length, job->chunk_size,
                                   job->from, job->to, part, offset,
                                   &job->error)
        != NGX_OK)
    {
        job->status = NGX_HTTP_GRIDFS_INTERNAL_ERROR;
        return NGX_ERROR;
    }

    return NGX_OK;
}


/* the response is over: its cursor killed if still open on the server */

void
ngx_http_gridfs_stream_handler(void *data, ngx_log_t *log)
{
    ngx_http_gridfs_stream_t  *stream = data;

    ngx_http_gridfs_stream_put(stream);
    ngx_http_gridfs_stream_free(stream);

    ngx_http_gridfs_task_over();
}


/* the client back to the pool; the replies stay: a window may still be
 * sent from one */

void
ngx_http_gridfs_stream_put(ngx_http_gridfs_stream_t *stream)
{
    ngx_http_gridfs_stream_kill(stream);

    if (stream->session) {
        mongoc_client_session_destroy(stream->session);
        stream->session = NULL;
    }

    if (stream->coll) {
        mongoc_collection_destroy(stream->coll);
        stream->coll = NULL;
    }

    if (stream->client) {
        mongoc_client_pool_push(stream->conn->pool, stream->client);
        stream->client = NULL;
    }

    stream->opened = 0;
}


void
ngx_http_gridfs_stream_free(ngx_http_gridfs_stream_t *stream)
{
    ngx_uint_t  i;

    for (i = 0; i < 2; i++) {
        if (stream->has_reply & (1 << i)) {
            bson_destroy(&stream->reply[i]);
        }
    }

    stream->has_reply = 0;
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


/*
 * 503 for what says the deployment cannot answer now, 500 for the rest.
 * Only a deployment that cannot be reached at all marks it unavailable in
 * this worker (every request then answers 503 at once): no server to
 * select, a failed connect or name resolution, or a connection that
 * failed in a way that made libmongoc mark its server Unknown.  A socket
 * timeout (a slow query) leaves the server known, as the SDAM rules say:
 * it fails its own request only.
 */

static void
ngx_http_gridfs_cursor_failed(ngx_http_gridfs_job_t *job,
    mongoc_client_t *client)
{
    switch (job->error.domain) {

    case MONGOC_ERROR_SERVER_SELECTION:
        job->status = NGX_HTTP_GRIDFS_UNAVAILABLE;
        job->unreachable = 1;
        return;

    case MONGOC_ERROR_STREAM:
        job->status = NGX_HTTP_GRIDFS_UNAVAILABLE;

        switch (job->error.code) {

        case MONGOC_ERROR_STREAM_CONNECT:
        case MONGOC_ERROR_STREAM_NAME_RESOLUTION:
            job->unreachable = 1;
            break;

        default:
            job->unreachable = ngx_http_gridfs_all_unknown(client);
        }

        return;

    case MONGOC_ERROR_CLIENT:
        /* a login the server refused is the configuration's error, no
         * retry mends it; an authentication cut short by a restarting
         * server is transient */
        job->status = (job->error.code == MONGOC_ERROR_CLIENT_AUTHENTICATE
                       && !ngx_http_gridfs_login_refused(job->error.message))
                      ? NGX_HTTP_GRIDFS_UNAVAILABLE
                      : NGX_HTTP_GRIDFS_INTERNAL_ERROR;
        return;

    case MONGOC_ERROR_SERVER:
    case MONGOC_ERROR_QUERY:
        break;

    default:
        job->status = NGX_HTTP_GRIDFS_INTERNAL_ERROR;
        return;
    }

    switch (job->error.code) {

    case 1:        /* InternalError: FerretDB's for its backend, too */
        job->status = (ngx_http_gridfs_backend_down(job->error.message)
                       && !ngx_http_gridfs_login_refused(job->error.message))
                      ? NGX_HTTP_GRIDFS_UNAVAILABLE
                      : NGX_HTTP_GRIDFS_INTERNAL_ERROR;
        return;

    case 6:        /* HostUnreachable */
    case 7:        /* HostNotFound */
    case 89:       /* NetworkTimeout */
    case 91:       /* ShutdownInProgress */
    case 189:      /* PrimarySteppedDown */
    case 262:      /* ExceededTimeLimit */
    case 9001:     /* SocketException */
    case 10107:    /* NotWritablePrimary */
    case 11600:    /* InterruptedAtShutdown */
    case 11602:    /* InterruptedDueToReplStateChange */
    case 13435:    /* NotPrimaryNoSecondaryOk */
    case 13436:    /* NotPrimaryOrSecondary */
        job->status = NGX_HTTP_GRIDFS_UNAVAILABLE;
        return;

    default:
        job->status = NGX_HTTP_GRIDFS_INTERNAL_ERROR;
    }
}


/* after a socket error: whether libmongoc now knows no server at all (it
 * marks a server Unknown on a connection failure, not on a timeout);
 * reads the topology, never waits */

static ngx_uint_t
ngx_http_gridfs_all_unknown(mongoc_client_t *client)
{
    size_t                         i, n;
    ngx_uint_t                     unknown;
    mongoc_server_description_t  **sds;

    if (client == NULL) {
        return 0;
    }

    sds = mongoc_client_get_server_descriptions(client, &n);

    unknown = 1;

    for (i = 0; i < n; i++) {
        if (ngx_strcmp(mongoc_server_description_type(sds[i]), "Unknown")
            != 0)
        {
            unknown = 0;
        }
    }

    mongoc_server_descriptions_destroy_all(sds, n);

    return unknown;
}


/*
 * While the driver knows no server, its queries wait in server selection
 * until its monitor finds one again, and the monitor rechecks a server it
 * has lost no more often than every minHeartbeatFrequencyMS (500 ms): a
 * server back would be used up to half a second late, while requests pile
 * up, each nearer its deadline.  So a job
 * waits here instead, for as long as its query would have waited there,
 * serverSelectionTimeoutMS, and one of the waiting jobs pings the servers
 * on new connections every NGX_HTTP_GRIDFS_WAKE_MS: a handshake updates
 * the driver's view at once.  After that time the job fails as its query
 * would have, and the deployment is marked unavailable.  A job whose own
 * connection failed (lost) waits until a new one answers: the driver may
 * still list the server, as while MongoDB stops (its listener closes
 * before its connections).
 */

static ngx_int_t
ngx_http_gridfs_wake(ngx_http_gridfs_job_t *job, mongoc_client_t *client,
    ngx_uint_t lost)
{
    int64_t                  now, until;
    ngx_int_t                rc;
    ngx_http_gridfs_conn_t  *conn;

    conn = job->conf->conn;
    now = ngx_http_gridfs_now_ms();

    if (!lost) {
        /* the driver's view is a copy, about 2 us, a few percent of a
         * small file's CPU: read once a millisecond while it knows a
         * server */
        if ((ngx_atomic_uint_t) now == conn->known_ms) {
            return NGX_OK;
        }

        if (ngx_http_gridfs_known(conn, client)) {
            conn->known_ms = (ngx_atomic_uint_t) now;
            return NGX_OK;
        }
    }

    /* a connection failed, or the driver knows no server: the jobs under
     * way wait for the outage */
    conn->lost_ms = (ngx_atomic_uint_t) now;

    until = now + conn->selection_ms;

    for ( ;; ) {

        if (lost) {
            if (ngx_http_gridfs_ping(conn, client, &job->error) == NGX_OK) {
                break;
            }

        } else if (ngx_http_gridfs_known(conn, client)) {
            break;

        } else if (now >= (int64_t) conn->next_ping
                   && ngx_atomic_cmp_set(&conn->waking, 0, 1))
        {
            conn->next_ping = (ngx_atomic_uint_t)
                                  (now + NGX_HTTP_GRIDFS_WAKE_MS);

            rc = ngx_http_gridfs_ping(conn, client, &job->error);

            (void) ngx_atomic_cmp_set(&conn->waking, 1, 0);

            if (rc == NGX_OK) {
                break;
            }
        }

        if (now >= until || ngx_http_gridfs_exiting) {
            if (job->error.code == 0) {
                bson_set_error(&job->error, MONGOC_ERROR_SERVER_SELECTION,
                               MONGOC_ERROR_SERVER_SELECTION_FAILURE,
                               "no server answered");
            }

            job->status = NGX_HTTP_GRIDFS_UNAVAILABLE;
            job->unreachable = 1;
            return NGX_ERROR;
        }

        ngx_msleep(lost ? NGX_HTTP_GRIDFS_WAKE_MS : NGX_HTTP_GRIDFS_POLL_MS);

        now = ngx_http_gridfs_now_ms();
    }

    /* found again: the jobs posted before waited for the outage, in a
     * thread or for one */
    conn->found_ms = (ngx_atomic_uint_t) ngx_http_gridfs_now_ms();

    return NGX_OK;
}


/* whether the driver knows a server; it lists the known ones only, so the
 * largest id seen is kept, to find the lost ones by their ids (a lost
 * update is redone by the next job) */

static ngx_uint_t
ngx_http_gridfs_known(ngx_http_gridfs_conn_t *conn, mongoc_client_t *client)
{
    size_t                         i, n;
    uint32_t                       id;
    ngx_uint_t                     known;
    mongoc_server_description_t  **sds;

    sds = mongoc_client_get_server_descriptions(client, &n);

    known = 0;

    for (i = 0; i < n; i++) {
        if (ngx_strcmp(mongoc_server_description_type(sds[i]), "Unknown")
            == 0)
        {
            continue;
        }

        known = 1;
        id = mongoc_server_description_id(sds[i]);

        if (id > conn->last_id) {
            conn->last_id = id;
        }
    }

    mongoc_server_descriptions_destroy_all(sds, n);

    return known;
}


/* NGX_OK if one of the servers answers a ping on a new connection of the
 * client (it has none to a server it lost): sent by the server's id, it
 * skips server selection, which would wait for the monitor; else
 * NGX_DECLINED and the error */

static ngx_int_t
ngx_http_gridfs_ping(ngx_http_gridfs_conn_t *conn, mongoc_client_t *client,
    bson_error_t *error)
{
    bson_t                        ping;
    uint32_t                      id, last;
    ngx_int_t                     rc;
    mongoc_server_description_t  *sd;

    bson_set_error(error, MONGOC_ERROR_SERVER_SELECTION,
                   MONGOC_ERROR_SERVER_SELECTION_FAILURE,
                   "no server to ping");

    bson_init(&ping);
    BSON_APPEND_INT32(&ping, "ping", 1);

    rc = NGX_DECLINED;

    /* the URI's hosts are servers 1 to seeds, those found later follow */
    last = (uint32_t) ngx_max(conn->seeds, conn->last_id);

    ngx_http_gridfs_pinging = 1;

    for (id = 1; id <= last && rc == NGX_DECLINED; id++) {

        sd = mongoc_client_get_server_description(client, id);

        if (sd == NULL) {
            /* no longer in the topology */
            continue;
        }

        mongoc_server_description_destroy(sd);

        if (mongoc_client_command_simple_with_server_id(client, "admin",
                                                        &ping, NULL, id,
                                                        NULL, error))
        {
            rc = NGX_OK;
        }
    }

    ngx_http_gridfs_pinging = 0;

    bson_destroy(&ping);

    return rc;
}


/* The deployment refused the login: MongoDB's AuthenticationFailed
 * message, which libmongoc passes on under MONGOC_ERROR_CLIENT_AUTHENTICATE,
 * or, from FerretDB 1.x, which hands a PLAIN login to PostgreSQL and so
 * finds a wrong password at the first query, PostgreSQL's class 28
 * (invalid authorization: 28P01 is a wrong password) in an InternalError */

static ngx_uint_t
ngx_http_gridfs_login_refused(const char *message)
{
    return strstr(message, "Authentication failed") != NULL
           || strstr(message, "SQLSTATE 28") != NULL;
}


/* FerretDB answers InternalError (1) when its PostgreSQL backend cannot
 * be reached or is restarting: pgx's and PostgreSQL's own words; and when
 * it is stopping: it lets its connections run 3 s, then cancels what they
 * still do ("context canceled after delay", Go's context.Canceled) */

static ngx_uint_t
ngx_http_gridfs_backend_down(const char *message)
{
    static const char  *words[] = {
        "failed to connect to",
        "connection refused",
        "conn closed",
        "unexpected EOF",
        "connection reset",
        "context canceled",
        "SQLSTATE 57P01",         /* admin_shutdown */
        "SQLSTATE 57P02",         /* crash_shutdown */
        "SQLSTATE 57P03",         /* cannot_connect_now */
        "SQLSTATE 08",            /* connection exceptions */
        NULL
    };

    ngx_uint_t  i;

    for (i = 0; words[i]; i++) {
        if (strstr(message, words[i]) != NULL) {
            return 1;
        }
    }

    return 0;
}
