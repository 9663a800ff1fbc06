
/*
 * ngx_http_gridfs_module, the event loop's side: what the module file,
 * the response machine and the header functions share.
 */


#ifndef _NGX_HTTP_GRIDFS_HTTP_H_INCLUDED_
#define _NGX_HTTP_GRIDFS_HTTP_H_INCLUDED_


#include <ngx_config.h>
#include <ngx_core.h>
#include <ngx_http.h>

#include "ngx_http_gridfs.h"


extern ngx_module_t  ngx_http_gridfs_module;


/*
 * Where a response is, on the event loop.  Before the headers, a job is
 * always in flight or the response waits for its turn or a place: the
 * lookup, then the read of the first window.  After them, a window may be
 * read (a job in flight) while the previous one drains (handed to the
 * output filters, not all sent yet).  Transitions:
 *
 *   WAIT_ADMISSION   admitted: LOOKUP (gridfs_admission: its turn)
 *   LOOKUP           done:    READ_AHEAD, or SENT_HEADER (416, HEAD, 304),
 *                             or WAIT_PLACE (gridfs_max_responses reached)
 *   WAIT_PLACE       placed:  READ_AHEAD (or READING once the headers are
 *                             out: a body predicted not to be)
 *   READ_AHEAD       done:    SENT_HEADER (READ_AHEAD: no spare client)
 *   SENT_HEADER      read:    READING; sent, not drained: DRAINING
 *   READING          done:    SENT_HEADER (the window is then sent)
 *   DRAINING         drained: SENT_HEADER (the next window is then read);
 *                    read (two halves): READING_DRAINING
 *   READING_DRAINING drained: READING; done: READ_DRAINING
 *   READ_DRAINING    drained: SENT_HEADER (the window is then sent)
 *
 * A response finalized in any state is done: nothing of the module acts on
 * its request again (ngx_http_gridfs_finalize()).
 */
typedef enum {
    NGX_HTTP_GRIDFS_LOOKUP = 0,      /* the file is looked up (pcalloc) */
    NGX_HTTP_GRIDFS_WAIT_ADMISSION,  /* waits for its turn: no job */
    NGX_HTTP_GRIDFS_WAIT_PLACE,      /* found, waits for a place: no job */
    NGX_HTTP_GRIDFS_READ_AHEAD,      /* the first window, before headers */
    NGX_HTTP_GRIDFS_SENT_HEADER,     /* headers out, no job, no drain */
    NGX_HTTP_GRIDFS_READING,         /* a window is read */
    NGX_HTTP_GRIDFS_DRAINING,        /* a window drains, none is read */
    NGX_HTTP_GRIDFS_READING_DRAINING,
    NGX_HTTP_GRIDFS_READ_DRAINING    /* read, waits for the drain */
} ngx_http_gridfs_state_e;


/*
 * A response, in its request's pool.  Every event of the module carries it
 * (the job's completion through the job, the deadline's and the place's
 * events directly): it is never found again through r->ctx, which an
 * internal redirect (error_page) clears, except by the request's write
 * event handler, which a redirect replaces.
 */
struct ngx_http_gridfs_ctx_s {
    ngx_http_request_t          *request;
    ngx_http_gridfs_job_t       *job;
    ngx_http_gridfs_state_e      state;
    ngx_str_t                    log_key;     /* escaped for logs */

    /* gridfs_deadline: the 503 goes out when it passes before the
     * headers; or, without one, the bound of a wait for a place */
    ngx_event_t                  deadline;

    /* gridfs_max_responses: the place this response holds, or waits for
     * in the worker's queue; given, the event goes on with it */
    ngx_http_gridfs_places_t    *places;
    ngx_queue_t                  queue;
    ngx_event_t                  placed;
    unsigned                     has_place:1;
    unsigned                     waiting:1;
    unsigned                     wait_bound:1;    /* the deadline event is
                                                     gridfs_queue_timeout's */

    /* gridfs_admission: the line this response waits in for its turn
     * (its job holds the turn once given); the event is posted when the
     * turn comes, and times the wait */
    ngx_queue_t                  in_line;
    ngx_event_t                  admitted;
    unsigned                     in_line_waiting:1;
    /* it waits the queue's budget, its turn expected within it (else
     * the short wait) */
    unsigned                     turn_expected:1;

    /* finalized by the module, or its request terminated or freed */
    unsigned                     done:1;
    /* a window was handed to the output filters: the buffers may be
     * referenced by them until the request is freed */
    unsigned                     sending:1;
    unsigned                     header_sent:1;

    unsigned                     unsafe_logged:1;

    /* two windows in flight at once, the half the next job fills */
    unsigned                     overlap:1;
    unsigned                     half:1;
    unsigned                     stream_tried:1;

    bson_t                      *file;

    int64_t                      length;
    int64_t                      chunk_size;
    int64_t                      per_window[2];   /* chunks, per half */
    off_t                        range_start;     /* predicted */
    off_t                        plan_pos;        /* the plan's range */
    off_t                        plan_end;
    off_t                        send_pos;
    off_t                        send_end;

    /* one buffer and link per part sent: one, or one per chunk */
    ngx_buf_t                   *bufs;
    ngx_chain_t                 *out;
    ngx_uint_t                   nbufs;
};


/*
 * A request's pool carves small blocks out of larger ones, within which
 * AddressSanitizer sees no bound.  In a sanitizer build, every block the
 * module writes into gets a poisoned tail of its own, so that writing (or
 * reading) past it is reported; otherwise these are nginx's allocators.
 */

#if (defined __SANITIZE_ADDRESS__)

#include <sanitizer/asan_interface.h>

#define NGX_HTTP_GRIDFS_REDZONE  32

static ngx_inline void *
ngx_http_gridfs_palloc(ngx_pool_t *pool, size_t size)
{
    u_char  *p;

    p = ngx_palloc(pool, size + NGX_HTTP_GRIDFS_REDZONE);

    if (p != NULL) {
        ASAN_POISON_MEMORY_REGION(p + size, NGX_HTTP_GRIDFS_REDZONE);
    }

    return p;
}

#define ngx_http_gridfs_pnalloc  ngx_http_gridfs_palloc

#else

#define ngx_http_gridfs_palloc   ngx_palloc
#define ngx_http_gridfs_pnalloc  ngx_pnalloc

#endif


/* the response machine (ngx_http_gridfs_response.c) */
ngx_int_t ngx_http_gridfs_error(ngx_http_request_t *r, ngx_int_t status);
ngx_int_t ngx_http_gridfs_available(ngx_http_request_t *r,
    ngx_http_gridfs_loc_conf_t *glcf, ngx_str_t *log_key);
ngx_http_gridfs_ctx_t *ngx_http_gridfs_create(ngx_http_request_t *r,
    ngx_http_gridfs_loc_conf_t *glcf, ngx_str_t *key);
ngx_int_t ngx_http_gridfs_start(ngx_http_gridfs_ctx_t *ctx);
void ngx_http_gridfs_start_deadline(ngx_http_gridfs_ctx_t *ctx,
    ngx_msec_t deadline);
void ngx_http_gridfs_cleanup(void *data);
ngx_int_t ngx_http_gridfs_task_post(ngx_thread_pool_t *tp,
    ngx_thread_task_t *task);
void ngx_http_gridfs_hold_add(void);
void ngx_http_gridfs_hold_del(void);

/* headers, conditions and ranges (ngx_http_gridfs_headers.c) */
ngx_int_t ngx_http_gridfs_set_headers(ngx_http_request_t *r,
    ngx_http_gridfs_ctx_t *ctx);
ngx_int_t ngx_http_gridfs_predict_conditional(ngx_http_request_t *r);
ngx_int_t ngx_http_gridfs_predict_range(ngx_http_request_t *r,
    off_t *start, off_t *end);
ngx_int_t ngx_http_gridfs_content_range(ngx_http_request_t *r,
    off_t *start, off_t *end);


#endif /* _NGX_HTTP_GRIDFS_HTTP_H_INCLUDED_ */
