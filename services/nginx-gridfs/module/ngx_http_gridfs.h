
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
/* at a worker's exit, the longest wait for tasks still running (the
 * thread pool's queue was full): then the client pools are left */
#define NGX_HTTP_GRIDFS_EXIT_MS        10000
/* while unavailable: the pause between two background pings */
#define NGX_HTTP_GRIDFS_PROBE_MS       250
/* while the driver knows no server: the pause between two pings of the
 * jobs waiting for one (libmongoc's monitor rechecks a lost server every
 * 500 ms at best), and between two looks of each at the driver's view */
#define NGX_HTTP_GRIDFS_WAKE_MS        50
#define NGX_HTTP_GRIDFS_POLL_MS        10

/*
 * glibc's thresholds, fixed: left to itself, malloc raises its mmap
 * threshold to the largest block freed and its trim threshold to twice
 * that, in each process by the chance of what was freed first.  Windows
 * and libmongoc's reply buffers (up to a window's chunks) were then mapped
 * afresh or trimmed and faulted in again, page by page, in one worker and
 * not in the next: 1 MB answers cost 1.4 to 1.9 ms of CPU by process
 * (docs/ab.md).  Fixed, every worker keeps and reuses them: 32 MiB, the
 * dynamic threshold's own ceiling, and 128 MiB free at the heap's top
 * before it is given back.
 */
#define NGX_HTTP_GRIDFS_MMAP_THRESHOLD (32 * 1024 * 1024)
#define NGX_HTTP_GRIDFS_TRIM_THRESHOLD (128 * 1024 * 1024)

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

/* what a window's chunks may take in a single reply (16 MiB, less a
 * margin for the reply's own fields), and a chunk document's fields besides
 * its data, at most (_id, files_id, n: 100 bytes or so) */
#define NGX_HTTP_GRIDFS_MAX_REPLY      (16 * 1024 * 1024 - 64 * 1024)
#define NGX_HTTP_GRIDFS_CHUNK_OVERHEAD 256

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
    /* when a job last found the deployment unreachable (a connection
     * failed, or the driver knew no server), and found it again: the jobs
     * under way then, or posted before, waited for an outage, not for a
     * busy database */
    ngx_atomic_t                 lost_ms;
    ngx_atomic_t                 found_ms;

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
    int64_t                      end_n;       /* and its last */
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


/*
 * gridfs_admission, in one worker: how many responses may do their
 * database work before the headers at once (the lookup and the first
 * window), and the ones that wait for their turn; the rest are refused at
 * once with a 503, before any query.  The policy of the lab's other paths
 * (services/python-common/lab_http/admission.py gives the reasons): a
 * limit, AIMD on the latency of that work against a quarter of
 * gridfs_deadline, and a bounded wait in order: a quarter of the deadline
 * for a burst whose turn is expected within it (those in line before it
 * and itself, a mean latency each over the mean places in use when the
 * measured work was admitted, not the limit: at an overload's onset the
 * latency was measured at fewer places than the limit allows), else
 * NGX_HTTP_GRIDFS_SHORT_WAIT_MS, as once the queue stands.
 * Differences, all for a database back from an outage: while the line
 * stands, the newest in line goes first (adaptive LIFO, "Fail at Scale"),
 * since the oldest of those given the short wait are refused at its end
 * anyway, but not before one whose turn was expected within the budget
 * (left behind, it waited all of it in vain); a line stands
 * only while the database answers (some admitted work done within the
 * queue's budget), since one that answers nothing is away, not busy; and
 * work that waited for an outage (it failed for want of a server, ran
 * while a job found the deployment unreachable, or was posted before one
 * found it again) is no sample, and once it is answered after a budget of
 * silence, the line that built meanwhile is admitted at once, as a
 * backlog, not refused as a line that stands.  Before, a restart under
 * load refused 1-19 of 300 requests sent after FerretDB answered again
 * (tests/test_nginx_gridfs_recovery.py): the stuck work's latency (the
 * outage's, 1-1.5 s) cut the limit and raised the mean latency, the
 * refusals of those that waited out the outage made the line stand, and
 * newcomers got the short wait.
 * Times in ms of ngx_http_gridfs_now_ms()
 */
typedef struct {
    double                       limit;
    double                       minimum;
    double                       maximum;
    double                       mean_latency;
    /* the places in use when the work in the mean latency was admitted */
    double                       mean_in_flight;
    ngx_uint_t                   in_flight;
    ngx_uint_t                   waiting;
    int64_t                      decreased_at;
    int64_t                      queue_empty_at;
    int64_t                      overloaded_until;
    int64_t                      answered_at;   /* the last work done */
    int64_t                      back_at;       /* after an outage */
    ngx_queue_t                  waiters; /* of ngx_http_gridfs_ctx_t */
} ngx_http_gridfs_admission_t;

#define NGX_HTTP_GRIDFS_TARGET_SHARE   0.25
#define NGX_HTTP_GRIDFS_QUEUE_SHARE    0.25
#define NGX_HTTP_GRIDFS_SHORT_WAIT_MS  50
#define NGX_HTTP_GRIDFS_INITIAL_LIMIT  4
#define NGX_HTTP_GRIDFS_BACKOFF        0.9
/* of a sample in the mean latency and the mean places in use */
#define NGX_HTTP_GRIDFS_LATENCY_WEIGHT 0.1
/* the most admitted at once without gridfs_max_responses */
#define NGX_HTTP_GRIDFS_MAX_ADMITTED   256


typedef struct {
    ngx_array_t                  conns;   /* of ngx_http_gridfs_conn_t * */
    ngx_int_t                    max_responses;   /* over all workers */
    ngx_http_gridfs_places_t     places;          /* this worker's */
    ngx_http_gridfs_admission_t  admission;       /* this worker's */
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
    ngx_flag_t                   admission;       /* with a deadline */
    size_t                       buffer_size;
    ngx_uint_t                   overload_log_level;

    ngx_thread_pool_t           *thread_pool;
    ngx_http_gridfs_conn_t      *conn;
} ngx_http_gridfs_loc_conf_t;


typedef struct ngx_http_gridfs_ctx_s  ngx_http_gridfs_ctx_t;


/*
 * A response's work for the thread pool: on the heap, not in the request's
 * pool, since a request may end (a deadline's 503, a client gone, an
 * error_page) while a task of it is in flight; the job then outlives it,
 * its task skips the query if it has not started, and its completion frees
 * it.  The job owns what its task writes into: the copy of the key and of
 * the file's _id, the windows, the parts, the held client of the pool.
 * The thread side reads and writes the fields above "the loop's" only
 * while the task is in flight, when the loop does not touch them.
 */
typedef struct {
    ngx_thread_task_t            task;        /* task.ctx: the job */

    ngx_uint_t                   op;
    ngx_http_gridfs_loc_conf_t  *conf;

    /* NGX_HTTP_GRIDFS_FIND */
    ngx_str_t                    key;         /* a copy, after the job */
    bson_oid_t                   oid;
    int64_t                      key_int;
    bson_t                      *file;

    /* NGX_HTTP_GRIDFS_READ */
    bson_value_t                 files_id;    /* a copy */
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

    /* set by the loop when the response no longer needs the answer: the
     * query is skipped if it has not started */
    ngx_atomic_t                 abandoned;

    /* outcome: 0, or the HTTP status to answer and the cause */
    ngx_uint_t                   status;
    unsigned                     unreachable:1;
    /* the deployment was unreachable during the work admitted (a job
     * failed for want of a server, or ran while one found it
     * unreachable): kept over the lookup and the first read, cleared at
     * admission */
    unsigned                     away:1;
    bson_error_t                 error;

    /* the loop's, never touched by a thread: the response (NULL once its
     * request is gone), whether the task is in flight, and the buffers */
    ngx_http_gridfs_ctx_t       *ctx;
    ngx_uint_t                   busy;
    ngx_uint_t                   has_files_id;

    /* the loop's: admitted by gridfs_admission, when, and whether the
     * deadline passed meanwhile; the place is the job's, since its query
     * may outlive the request */
    ngx_http_gridfs_admission_t *admission;
    int64_t                      admitted_at;
    ngx_uint_t                   admitted_in_flight; /* its own included */
    unsigned                     admitted:1;
    unsigned                     late:1;
    u_char                      *window[2];
    size_t                       window_size[2];
} ngx_http_gridfs_job_t;


/* the thread side (ngx_http_gridfs_mongo.c): task handlers, and what the
 * loop calls once no job is in flight */
void ngx_http_gridfs_job_handler(void *data, ngx_log_t *log);
void ngx_http_gridfs_probe_handler(void *data, ngx_log_t *log);
void ngx_http_gridfs_stream_handler(void *data, ngx_log_t *log);
void ngx_http_gridfs_stream_put(ngx_http_gridfs_stream_t *stream);
void ngx_http_gridfs_stream_free(ngx_http_gridfs_stream_t *stream);
int64_t ngx_http_gridfs_now_ms(void);

/* tasks of this worker posted and not yet over in a thread (every task
 * handler ends by ngx_http_gridfs_task_over()), and, set at the worker's
 * exit, whether the tasks still queued skip their queries */
extern ngx_atomic_t  ngx_http_gridfs_tasks;
extern ngx_atomic_t  ngx_http_gridfs_exiting;
void ngx_http_gridfs_task_over(void);
ngx_uint_t ngx_http_gridfs_quiet(void);

/* the admission policy, pure arithmetic on times given
 * (ngx_http_gridfs_admission.c) */
void ngx_http_gridfs_admission_init(ngx_http_gridfs_admission_t *a,
    ngx_uint_t maximum);
ngx_uint_t ngx_http_gridfs_admission_has_room(ngx_http_gridfs_admission_t *a);
ngx_uint_t ngx_http_gridfs_admission_admit(ngx_http_gridfs_admission_t *a);
ngx_uint_t ngx_http_gridfs_admission_overloaded(ngx_http_gridfs_admission_t *a,
    int64_t now, ngx_msec_t deadline);
int64_t ngx_http_gridfs_admission_wait(ngx_http_gridfs_admission_t *a,
    int64_t now, ngx_msec_t deadline);
double ngx_http_gridfs_admission_expected_wait(
    ngx_http_gridfs_admission_t *a);
void ngx_http_gridfs_admission_refused(ngx_http_gridfs_admission_t *a,
    int64_t now, ngx_msec_t deadline);
void ngx_http_gridfs_admission_back(ngx_http_gridfs_admission_t *a,
    int64_t now, ngx_msec_t deadline);
void ngx_http_gridfs_admission_queued(ngx_http_gridfs_admission_t *a,
    int64_t now);
void ngx_http_gridfs_admission_dequeued(ngx_http_gridfs_admission_t *a,
    int64_t now);
void ngx_http_gridfs_admission_finished(ngx_http_gridfs_admission_t *a,
    int64_t admitted_at, ngx_uint_t admitted_in_flight, int64_t now,
    ngx_msec_t deadline, ngx_int_t outcome);

/* an admitted request's outcome: its latency counts, or its failure (the
 * database failed, or the deadline passed), or neither (its client left,
 * or the database was unreachable during the work: away, not busy) */
#define NGX_HTTP_GRIDFS_ADMISSION_SAMPLE   0
#define NGX_HTTP_GRIDFS_ADMISSION_FAILED   1
#define NGX_HTTP_GRIDFS_ADMISSION_NONE     2
#define NGX_HTTP_GRIDFS_ADMISSION_AWAY     3

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
