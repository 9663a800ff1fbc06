
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
    ngx_http_gridfs_loc_conf_t *glcf);
ngx_int_t ngx_http_gridfs_post(ngx_http_request_t *r,
    ngx_http_gridfs_ctx_t *ctx);
void ngx_http_gridfs_start_deadline(ngx_http_request_t *r,
    ngx_http_gridfs_ctx_t *ctx, ngx_msec_t deadline);
void ngx_http_gridfs_job_event_handler(ngx_event_t *ev);
void ngx_http_gridfs_cleanup(void *data);

/* headers, conditions and ranges (ngx_http_gridfs_headers.c) */
ngx_int_t ngx_http_gridfs_set_headers(ngx_http_request_t *r,
    ngx_http_gridfs_ctx_t *ctx);
ngx_int_t ngx_http_gridfs_predict_conditional(ngx_http_request_t *r);
ngx_int_t ngx_http_gridfs_predict_range(ngx_http_request_t *r,
    off_t *start, off_t *end);
ngx_int_t ngx_http_gridfs_content_range(ngx_http_request_t *r,
    off_t *start, off_t *end);


#endif /* _NGX_HTTP_GRIDFS_HTTP_H_INCLUDED_ */
