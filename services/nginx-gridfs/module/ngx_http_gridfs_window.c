
/*
 * The arithmetic of ngx_http_gridfs_module, pure: a files document's
 * limits, the Range header, the windows a response is read in, and the
 * check of a chunk against them.  No request, no I/O, no allocation: both
 * sides call it, and tests/fuzz runs it alone on arbitrary values.
 */


#include "ngx_http_gridfs.h"


/* a stored number as an integer: int32, int64, or a double that is an
 * integer a double holds exactly; a plain cast of any other double (NaN,
 * 1e300, 0.5) would be undefined or silently wrong */

ngx_int_t
ngx_http_gridfs_integer(const bson_iter_t *iter, int64_t *value)
{
    double  d;

    switch (bson_iter_type(iter)) {

    case BSON_TYPE_INT32:
        *value = bson_iter_int32(iter);
        return NGX_OK;

    case BSON_TYPE_INT64:
        *value = bson_iter_int64(iter);
        return NGX_OK;

    case BSON_TYPE_DOUBLE:
        d = bson_iter_double(iter);

        /* false for NaN too */
        if (!(d >= -NGX_HTTP_GRIDFS_MAX_DOUBLE_INT
              && d <= NGX_HTTP_GRIDFS_MAX_DOUBLE_INT)
            || d != (double) (int64_t) d)
        {
            return NGX_ERROR;
        }

        *value = (int64_t) d;
        return NGX_OK;

    default:
        return NGX_ERROR;
    }
}


/* GridFS's own limits: what every offset computed later relies on */

ngx_int_t
ngx_http_gridfs_check_file(int64_t length, int64_t chunk_size)
{
    if (length < 0
        || chunk_size < 0
        || chunk_size > NGX_HTTP_GRIDFS_MAX_CHUNK
        || (length > 0
            && (chunk_size == 0
                || length > chunk_size * NGX_HTTP_GRIDFS_MAX_CHUNKS)))
    {
        return NGX_ERROR;
    }

    return NGX_OK;
}


/* mirrors ngx_http_range_parse() with r->single_range set, on the value
 * after "bytes=" (NUL-terminated, as nginx keeps header values): NGX_OK
 * and the range [start, end) the range filter will serve, NGX_DECLINED
 * when it will serve the whole file, or 416 */

ngx_int_t
ngx_http_gridfs_parse_range(u_char *p, off_t length, off_t *pstart,
    off_t *pend)
{
    off_t       start, end, first, last, cutoff, cutlim;
    ngx_uint_t  suffix, ranges;

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
                return NGX_HTTP_GRIDFS_RANGE_NOT_SATISFIABLE;
            }

            while (*p >= '0' && *p <= '9') {
                if (start >= cutoff && (start > cutoff || *p - '0' > cutlim)) {
                    return NGX_HTTP_GRIDFS_RANGE_NOT_SATISFIABLE;
                }

                start = start * 10 + (*p++ - '0');
            }

            while (*p == ' ') { p++; }

            if (*p++ != '-') {
                return NGX_HTTP_GRIDFS_RANGE_NOT_SATISFIABLE;
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
            return NGX_HTTP_GRIDFS_RANGE_NOT_SATISFIABLE;
        }

        while (*p >= '0' && *p <= '9') {
            if (end >= cutoff && (end > cutoff || *p - '0' > cutlim)) {
                return NGX_HTTP_GRIDFS_RANGE_NOT_SATISFIABLE;
            }

            end = end * 10 + (*p++ - '0');
        }

        while (*p == ' ') { p++; }

        if (*p != ',' && *p != '\0') {
            return NGX_HTTP_GRIDFS_RANGE_NOT_SATISFIABLE;
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
        return NGX_HTTP_GRIDFS_RANGE_NOT_SATISFIABLE;
    }

    *pstart = first;
    *pend = last;

    return NGX_OK;
}


/* gridfs_buffer_size rounded up to whole chunks, less than the buffer
 * plus one chunk: a response no larger than that is one window, one query;
 * a larger one two windows of half of it each, one sending while the next
 * is read (a single chunk larger than the buffer: one window at a time) */

ngx_int_t
ngx_http_gridfs_plan(size_t buffer_size, int64_t chunk_size, int64_t pos,
    int64_t end, ngx_http_gridfs_plan_t *plan)
{
    int64_t  total, chunks;

    if (buffer_size == 0
        || buffer_size > NGX_HTTP_GRIDFS_MAX_WINDOW
        || chunk_size <= 0
        || chunk_size > NGX_HTTP_GRIDFS_MAX_CHUNK
        || pos < 0
        || end < pos)
    {
        return NGX_ERROR;
    }

    total = ((int64_t) buffer_size + chunk_size - 1) / chunk_size;

    chunks = (pos < end) ? (end - 1) / chunk_size - pos / chunk_size + 1 : 0;

    plan->total = total;
    plan->chunks = chunks;
    plan->overlap = (chunks > total && total > 1);

    if (plan->overlap) {
        plan->per_window[0] = total - total / 2;
        plan->per_window[1] = total / 2;

    } else {
        plan->per_window[0] = total;
        plan->per_window[1] = total;
    }

    /* what each half of the buffer must hold */
    plan->size[0] = ngx_min(end - pos, plan->per_window[0] * chunk_size);
    plan->size[1] = ngx_min(end - pos, plan->per_window[1] * chunk_size);

    return NGX_OK;
}


/* the next window: from pos, at most per_window chunks, no further than
 * end; the file's limits and the range are checked, not assumed, since
 * what is read is copied or sent as is */

ngx_int_t
ngx_http_gridfs_window(int64_t length, int64_t chunk_size, int64_t pos,
    int64_t end, int64_t per_window, ngx_http_gridfs_window_t *w)
{
    if (ngx_http_gridfs_check_file(length, chunk_size) != NGX_OK
        || pos < 0
        || end <= pos
        || end > length
        || per_window <= 0
        || per_window > NGX_HTTP_GRIDFS_MAX_CHUNKS)
    {
        return NGX_ERROR;
    }

    /* no overflow: end <= length <= chunk_size * 2^31 <= 2^55 */
    w->first_n = pos / chunk_size;
    w->end_n = (end - 1) / chunk_size;
    w->last_n = ngx_min(w->end_n, w->first_n + per_window - 1);
    w->from = pos;
    w->to = ngx_min(end, (w->last_n + 1) * chunk_size);

    return NGX_OK;
}


/* chunk n, checked against the files document: its bytes within the
 * window [from, to) as part, at offset in the window; or NGX_ERROR and
 * why in error */

ngx_int_t
ngx_http_gridfs_chunk_part(const bson_t *doc, int64_t n, int64_t length,
    int64_t chunk_size, int64_t win_from, int64_t win_to, ngx_str_t *part,
    int64_t *offset, bson_error_t *error)
{
    int64_t          chunk_start, chunk_len, from, to, doc_n;
    uint32_t         len;
    bson_iter_t      iter;
    bson_subtype_t   subtype;
    const uint8_t   *data;

    /* first, so that n is in range for the messages below */
    if (ngx_http_gridfs_check_file(length, chunk_size) != NGX_OK
        || n < 0 || n >= NGX_HTTP_GRIDFS_MAX_CHUNKS)
    {
        bson_set_error(error, 0, 0, "chunk %" PRId64 " is past the end of "
                       "the file", n);
        return NGX_ERROR;
    }

    if (!bson_iter_init_find(&iter, doc, "n")
        || ngx_http_gridfs_integer(&iter, &doc_n) != NGX_OK)
    {
        bson_set_error(error, 0, 0, "chunk without an integer n where "
                       "chunk %" PRId64 " was expected", n);
        return NGX_ERROR;
    }

    if (doc_n != n) {
        bson_set_error(error, 0, 0, "chunk %" PRId64 " is missing", n);
        return NGX_ERROR;
    }

    if (!bson_iter_init_find(&iter, doc, "data")
        || !BSON_ITER_HOLDS_BINARY(&iter))
    {
        bson_set_error(error, 0, 0, "chunk %" PRId64 " has no binary data",
                       n);
        return NGX_ERROR;
    }

    bson_iter_binary(&iter, &subtype, &len, &data);

    /* no overflow: checked above */
    chunk_start = n * chunk_size;
    chunk_len = ngx_min(chunk_size, length - chunk_start);

    if (chunk_len <= 0) {
        bson_set_error(error, 0, 0, "chunk %" PRId64 " is past the end of "
                       "the file", n);
        return NGX_ERROR;
    }

    if ((int64_t) len != chunk_len) {
        bson_set_error(error, 0, 0, "chunk %" PRId64 " has %u bytes, "
                       "%" PRId64 " expected", n, len, chunk_len);
        return NGX_ERROR;
    }

    /* every chunk of the window overlaps it: checked, not assumed, since
     * the part is copied or sent as is */
    from = ngx_max(win_from, chunk_start);
    to = ngx_min(win_to, chunk_start + chunk_len);

    if (win_from < 0 || from >= to) {
        bson_set_error(error, 0, 0, "chunk %" PRId64 " is outside the window "
                       "%" PRId64 "-%" PRId64, n, win_from, win_to);
        return NGX_ERROR;
    }

    part->data = (u_char *) data + (from - chunk_start);
    part->len = (size_t) (to - from);
    *offset = from - win_from;

    return NGX_OK;
}
