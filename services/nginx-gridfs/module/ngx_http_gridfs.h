
/*
 * ngx_http_gridfs_module: what the event loop (ngx_http_gridfs_module.c)
 * and the thread side (ngx_http_gridfs_mongo.c) share.  The thread side
 * does not include ngx_http.h: the statuses a job answers with are here.
 */


#ifndef _NGX_HTTP_GRIDFS_H_INCLUDED_
#define _NGX_HTTP_GRIDFS_H_INCLUDED_


#include <ngx_config.h>
#include <ngx_core.h>
#include <ngx_thread_pool.h>

#include <mongoc/mongoc.h>


#define NGX_HTTP_GRIDFS_OBJECTID       0
#define NGX_HTTP_GRIDFS_STRING         1
#define NGX_HTTP_GRIDFS_INT            2

#define NGX_HTTP_GRIDFS_FIND           0
#define NGX_HTTP_GRIDFS_READ           1

/* default bytes of chunk data a request holds at once (rounded up to
 * whole chunks), and the most it may be set to: a window of several chunks
 * is then under 16 MiB, one reply */
#define NGX_HTTP_GRIDFS_WINDOW         (1024 * 1024)
#define NGX_HTTP_GRIDFS_MAX_WINDOW     (8 * 1024 * 1024)

/* a window sent from the driver's reply takes one buffer per chunk: with
 * more chunks than this (tiny chunkSize), it is copied instead */
#define NGX_HTTP_GRIDFS_MAX_PARTS      64

/* maxPoolSize per worker unless the URI sets it: half for the queries (one
 * client per thread of a thread pool of up to 16), half for responses
 * holding a cursor.  Each pooled connection keeps the driver's read buffer
 * at the largest reply it carried, rounded up to a power of two (libmongoc's
 * buffered stream never shrinks), so the pool, not the load, bounds that
 * memory: 32 x 2 MiB at the default buffer, 32 x 32 MiB with 16 MiB chunks.
 * libmongoc's own default, 100, made it 66 connections in use at most. */
#define NGX_HTTP_GRIDFS_POOL_SIZE      32
#define NGX_HTTP_GRIDFS_CURSOR_GONE    43      /* CursorNotFound */

#define NGX_HTTP_GRIDFS_QUEUE_MS       1000
/* while unavailable: the pause between two background pings */
#define NGX_HTTP_GRIDFS_PROBE_MS       250
/* while the driver knows no server: the pause between two pings of the
 * jobs waiting for one (libmongoc's monitor rechecks a lost server every
 * 500 ms at best), and between two looks of each at the driver's view */
#define NGX_HTTP_GRIDFS_WAKE_MS        50
#define NGX_HTTP_GRIDFS_POLL_MS        10

/* blocks from this size on are mapped and unmapped on their own (glibc's
 * default, pinned): the driver's reply buffers, freed by other threads than
 * the ones that made them, would otherwise stay in thread arenas */
#define NGX_HTTP_GRIDFS_MMAP_THRESHOLD (128 * 1024)

/* stored values longer than these are not sent as headers */
#define NGX_HTTP_GRIDFS_MAX_TYPE       255
#define NGX_HTTP_GRIDFS_MAX_MD5        64

/* applied when the URI does not set them: fail fast instead of hanging */
#define NGX_HTTP_GRIDFS_CONNECT_MS     2000
#define NGX_HTTP_GRIDFS_SELECTION_MS   3000
#define NGX_HTTP_GRIDFS_SOCKET_MS      5000

#define NGX_HTTP_GRIDFS_DEFAULT_MONGO  "127.0.0.1:27017"

/* GridFS's own limits: a chunk's n is an int32, so a file has at most
 * 2^31 chunks; the module reads chunks of at most 16 MiB.  Together they
 * bound a valid length by 2^55, which keeps every offset computed from
 * them far from overflowing */
#define NGX_HTTP_GRIDFS_MAX_CHUNK      (16 * 1024 * 1024)
#define NGX_HTTP_GRIDFS_MAX_CHUNKS     ((int64_t) 1 << 31)

/* the largest integer a double holds exactly */
#define NGX_HTTP_GRIDFS_MAX_DOUBLE_INT 9007199254740992.0

/* a job's outcome, as HTTP statuses (checked against nginx's) */
#define NGX_HTTP_GRIDFS_NOT_FOUND      404
#define NGX_HTTP_GRIDFS_RANGE_NOT_SATISFIABLE  416
#define NGX_HTTP_GRIDFS_CLIENT_CLOSED  499
#define NGX_HTTP_GRIDFS_INTERNAL_ERROR 500
#define NGX_HTTP_GRIDFS_UNAVAILABLE    503


/* how a response's bytes [pos, end) are read: up to total chunks at once
 * in one window (size[0]), or, overlap set, in two halves of per_window
 * chunks each, one read while the other is sent */
typedef struct {
    int64_t                      total;
    int64_t                      chunks;      /* that [pos, end) spans */
    int64_t                      per_window[2];
    int64_t                      size[2];     /* bytes, per half */
    unsigned                     overlap:1;
} ngx_http_gridfs_plan_t;


/* one window: chunks first_n to last_n, for bytes [from, to) */
typedef struct {
    int64_t                      first_n;
    int64_t                      last_n;
    int64_t                      end_n;       /* the response's last chunk */
    int64_t                      from;
    int64_t                      to;
} ngx_http_gridfs_window_t;


/* one MongoDB deployment; its client pool lives in each worker */
typedef struct {
    ngx_str_t                    key;
    ngx_str_t                    display;     /* for logs: no credentials */
    mongoc_uri_t                *uri;
    mongoc_client_pool_t        *pool;
    ngx_thread_pool_t           *thread_pool;

    /* set by a job that could not reach the deployment, cleared by a ping
     * that could: read by the loop and by jobs */
    ngx_atomic_t                 down;

    /* thread side: set while a job pings the servers the driver lost, and
     * when the next ping is due; jobs wait for a server at most
     * serverSelectionTimeoutMS, as a query would; the URI's hosts, the
     * largest server id the driver has known, and when it last knew one */
    ngx_atomic_t                 waking;
    ngx_atomic_t                 next_ping;
    int64_t                      selection_ms;
    ngx_uint_t                   seeds;
    ngx_atomic_t                 last_id;
    ngx_atomic_t                 known_ms;

    /* loop only */
    ngx_thread_task_t           *probe;
    ngx_msec_t                   next_probe;
    unsigned                     probing:1;

    /* loop only: responses holding a client of the pool, and how many may
     * (half the pool: jobs of the other responses, at most one client per
     * thread, find the rest) */
    ngx_uint_t                   streams;
    ngx_uint_t                   max_streams;
} ngx_http_gridfs_conn_t;


/* a client of the pool held by one response, its session and its cursor,
 * and the reply that holds each half of the buffer: on the heap (aligned
 * for bson_t), since giving it back may need a job (killCursors) that
 * outlives the request.  Touched by the jobs of that response, and by the
 * loop only while none is in flight */
typedef struct {
    bson_t                       reply[2];    /* a window per half */
    ngx_thread_task_t            task;        /* gives the client back */
    ngx_http_gridfs_conn_t      *conn;
    mongoc_client_t             *client;      /* NULL: none was spare */
    mongoc_client_session_t     *session;     /* NULL: no server support */
    mongoc_collection_t         *coll;
    uint32_t                     server_id;
    int64_t                      cursor_id;   /* 0: none on the server */
    int64_t                      next_n;      /* the cursor's next chunk */
    unsigned                     has_reply:2; /* a bit per half */
    unsigned                     opened:1;    /* cursor_id 0: exhausted */
} ngx_http_gridfs_stream_t;


/* gridfs_max_responses, in one worker: the responses past their lookup
 * (each holds a window and what sending it needs, about 2 MiB while its
 * client reads slowly), how many may be (0: no cap), and the ones that
 * wait for a place; a response waiting for its lookup holds no window and
 * takes none */
typedef struct {
    ngx_uint_t                   used;
    ngx_uint_t                   max;
    ngx_queue_t                  waiting; /* of ngx_http_gridfs_ctx_t */
} ngx_http_gridfs_places_t;


typedef struct {
    ngx_array_t                  conns;   /* of ngx_http_gridfs_conn_t * */
    ngx_int_t                    max_responses;   /* over all workers */
    ngx_http_gridfs_places_t     places;          /* this worker's */
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
    ngx_msec_t                   queue_timeout;
    ngx_msec_t                   deadline;        /* 0: none */
    size_t                       buffer_size;

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
    u_char                      *dest;        /* copied there, or */
    size_t                       dest_size;
    ngx_http_gridfs_stream_t    *stream;      /* read from its cursor, */
    ngx_str_t                   *parts;       /* one part per chunk */
    ngx_uint_t                   nparts;
    ngx_uint_t                   half;        /* of the buffer: 0 or 1 */
    int64_t                      end_n;       /* the response's last chunk */
    unsigned                     opened:1;    /* a cursor was opened */
    unsigned                     no_client:1; /* none was spare */
    unsigned                     continued:1; /* the headers are out */

    /* when it was posted, and how long it may wait (0: no limit) */
    int64_t                      posted_ms;
    ngx_msec_t                   max_wait;

    /* set by the loop when the client has gone: skip the query */
    ngx_atomic_t                 abandoned;

    /* outcome: 0, or the HTTP status to answer and the cause */
    ngx_uint_t                   status;
    unsigned                     unreachable:1;
    bson_error_t                 error;
} ngx_http_gridfs_job_t;


/*
 * Where a response is, on the event loop.  Before the headers, a job is
 * always in flight: the lookup, then the read of the first window.  After
 * them, a window may be read (a job in flight) while the previous one
 * drains (handed to the output filters, not all sent yet).  Transitions:
 *
 *   LOOKUP           done:    READ_AHEAD, or SENT_HEADER (416, HEAD, 304),
 *                             or WAIT_PLACE (gridfs_max_responses reached)
 *   WAIT_PLACE       placed:  READ_AHEAD
 *   READ_AHEAD       done:    SENT_HEADER (READ_AHEAD: no spare client)
 *   SENT_HEADER      read:    READING; sent, not drained: DRAINING
 *   READING          done:    SENT_HEADER (the window is then sent)
 *   DRAINING         drained: SENT_HEADER (the next window is then read);
 *                    read (two halves): READING_DRAINING
 *   READING_DRAINING drained: READING; done: READ_DRAINING
 *   READ_DRAINING    drained: SENT_HEADER (the window is then sent)
 *
 * A request finalized in any state ends there.
 */
typedef enum {
    NGX_HTTP_GRIDFS_LOOKUP = 0,      /* the file is looked up (pcalloc) */
    NGX_HTTP_GRIDFS_WAIT_PLACE,      /* found, waits for a place: no job */
    NGX_HTTP_GRIDFS_READ_AHEAD,      /* the first window, before headers */
    NGX_HTTP_GRIDFS_SENT_HEADER,     /* headers out, no job, no drain */
    NGX_HTTP_GRIDFS_READING,         /* a window is read */
    NGX_HTTP_GRIDFS_DRAINING,        /* a window drains, none is read */
    NGX_HTTP_GRIDFS_READING_DRAINING,
    NGX_HTTP_GRIDFS_READ_DRAINING    /* read, waits for the drain */
} ngx_http_gridfs_state_e;


typedef struct {
    ngx_thread_task_t           *task;
    ngx_http_gridfs_job_t       *job;
    ngx_http_gridfs_state_e      state;

    /* gridfs_deadline: the 503 goes out when it passes before the
     * headers; the request is then held (its count) till the job ends */
    ngx_event_t                  deadline;
    unsigned                     past_deadline:1;

    /* gridfs_max_responses: the place this response holds, or waits for
     * in the worker's queue; given, the event goes on with it */
    ngx_http_gridfs_places_t    *places;
    ngx_queue_t                  queue;
    ngx_event_t                  placed;
    unsigned                     has_place:1;
    unsigned                     waiting:1;

    bson_t                      *file;
    bson_value_t                 files_id;
    unsigned                     has_files_id:1;
    unsigned                     unsafe_logged:1;

    /* two windows in flight at once, the half the next job fills */
    unsigned                     overlap:1;
    unsigned                     half:1;

    int64_t                      length;
    int64_t                      chunk_size;
    int64_t                      per_window[2];   /* chunks, per half */
    off_t                        range_start;     /* predicted */
    off_t                        send_pos;
    off_t                        send_end;

    /* without a held client: each half of the buffer */
    u_char                      *window[2];
    size_t                       window_size[2];

    ngx_http_gridfs_stream_t    *stream;
    unsigned                     stream_tried:1;
    ngx_str_t                   *parts;

    /* one buffer and link per part sent: one, or one per chunk */
    ngx_buf_t                   *bufs;
    ngx_chain_t                 *out;
    ngx_uint_t                   nbufs;
} ngx_http_gridfs_ctx_t;


/* the thread side (ngx_http_gridfs_mongo.c): task handlers, and what the
 * loop calls once no job is in flight */
void ngx_http_gridfs_job_handler(void *data, ngx_log_t *log);
void ngx_http_gridfs_probe_handler(void *data, ngx_log_t *log);
void ngx_http_gridfs_stream_handler(void *data, ngx_log_t *log);
void ngx_http_gridfs_stream_put(ngx_http_gridfs_stream_t *stream);
void ngx_http_gridfs_stream_free(ngx_http_gridfs_stream_t *stream);
int64_t ngx_http_gridfs_now_ms(void);
ngx_uint_t ngx_http_gridfs_quiet(void);

/* the arithmetic, pure (ngx_http_gridfs_window.c) */
ngx_int_t ngx_http_gridfs_integer(const bson_iter_t *iter, int64_t *value);
ngx_int_t ngx_http_gridfs_check_file(int64_t length, int64_t chunk_size);
ngx_int_t ngx_http_gridfs_parse_range(u_char *p, off_t length, off_t *start,
    off_t *end);
ngx_int_t ngx_http_gridfs_plan(size_t buffer_size, int64_t chunk_size,
    int64_t pos, int64_t end, ngx_http_gridfs_plan_t *plan);
ngx_int_t ngx_http_gridfs_window(int64_t length, int64_t chunk_size,
    int64_t pos, int64_t end, int64_t per_window, ngx_http_gridfs_window_t *w);
ngx_int_t ngx_http_gridfs_chunk_part(const bson_t *doc, int64_t n,
    int64_t length, int64_t chunk_size, int64_t win_from, int64_t win_to,
    ngx_str_t *part, int64_t *offset, bson_error_t *error);


#endif /* _NGX_HTTP_GRIDFS_H_INCLUDED_ */
