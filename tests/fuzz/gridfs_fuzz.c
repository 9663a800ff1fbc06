
/*
 * libFuzzer harness over ngx_http_gridfs_window.c, the module's pure
 * arithmetic, built with ASan and UBSan (tests/test_nginx_gridfs_fuzz.py).
 * The first input byte picks a target; the rest are its values.  Each
 * target checks properties, not just the absence of a crash:
 *
 *   range   Range parsing: a range is within the file, never empty;
 *   windows the plan and the windows a response is read in: every window
 *           within the range asked for and the file, starting where the
 *           previous one ended, fitting its half of the buffer, its chunks
 *           those that cover it; invalid files or ranges refused;
 *   chunk   a chunk document built from the input (n of any type, data
 *           of any type and size) against a files document: accepted only
 *           with n equal to the chunk expected, binary data of exactly the
 *           size GridFS implies, and a part within both the data and the
 *           window, copied as the module copies it (ASan checks the copy);
 *   raw     the same on raw bytes taken as a BSON document;
 *   integer a stored double is accepted only when it is an exact integer.
 */


#include "ngx_http_gridfs.h"

#include <stdio.h>
#include <stdlib.h>


#define ngx_fuzz_check(cond)                                                  \
    if (!(cond)) {                                                            \
        fprintf(stderr, "property failed at %s:%d: %s\n",                     \
                __FILE__, __LINE__, #cond);                                   \
        abort();                                                              \
    }

/* windows followed from the start of a range, then from arbitrary points:
 * a range of 2^55 bytes in 1-byte chunks has too many to follow them all */
#define NGX_FUZZ_WINDOWS  64

/* the largest data a generated chunk has */
#define NGX_FUZZ_DATA     (2 * 1024 * 1024)

/* windows copied for ASan to check, when no larger than this */
#define NGX_FUZZ_COPY     (1 << 20)


typedef struct {
    const uint8_t  *p;
    const uint8_t  *end;
} ngx_fuzz_in_t;


/* a files document, a window and the chunk expected */
typedef struct {
    int64_t         n;
    int64_t         length;
    int64_t         chunk_size;
    int64_t         from;
    int64_t         to;
} ngx_fuzz_chunk_t;


static uint64_t
ngx_fuzz_raw(ngx_fuzz_in_t *in, size_t n)
{
    uint64_t  v;

    v = 0;

    while (n-- && in->p < in->end) {
        v = (v << 8) | *in->p++;
    }

    return v;
}


/* a value near the limits that matter more often than a uniform one:
 * small, around a limit, or any */

static int64_t
ngx_fuzz_int(ngx_fuzz_in_t *in, int64_t limit)
{
    uint64_t  raw;

    /* the harness's own arithmetic must not overflow */
    limit = ngx_max(ngx_min(limit, (int64_t) 1 << 62), 0);

    switch (ngx_fuzz_raw(in, 1) % 5) {

    case 0:
        return (int64_t) (ngx_fuzz_raw(in, 2) % 1024);

    case 1:
        return limit - (int64_t) (ngx_fuzz_raw(in, 1) % 4) + 1;

    case 2:
        raw = ngx_fuzz_raw(in, 8);
        return (limit > 0) ? (int64_t) (raw % ((uint64_t) limit + 2)) : 0;

    case 3:
        return -(int64_t) (ngx_fuzz_raw(in, 1) % 3);

    default:
        return (int64_t) ngx_fuzz_raw(in, 8);
    }
}


/* n + 1 where n may be any value the input gives */
static int64_t
ngx_fuzz_next(int64_t n)
{
    return (n < INT64_MAX) ? n + 1 : n;
}


/* a * b, or the largest value a valid document has when that overflows
 * or a factor is not positive */

static int64_t
ngx_fuzz_limit(int64_t a, int64_t b)
{
    if (a <= 0 || b <= 0 || a > INT64_MAX / b) {
        return (int64_t) NGX_HTTP_GRIDFS_MAX_CHUNK
               * NGX_HTTP_GRIDFS_MAX_CHUNKS;
    }

    return a * b;
}


static void
ngx_fuzz_range(ngx_fuzz_in_t *in)
{
    off_t    length, start, end;
    size_t   len;
    u_char  *value;

    length = ngx_fuzz_int(in, (int64_t) NGX_HTTP_GRIDFS_MAX_CHUNK
                              * NGX_HTTP_GRIDFS_MAX_CHUNKS);
    if (length < 0) {
        /* content_length_n of a checked files document */
        return;
    }

    /* nginx keeps header values NUL-terminated */
    len = in->end - in->p;
    value = malloc(len + 1);
    ngx_fuzz_check(value != NULL);
    memcpy(value, in->p, len);
    value[len] = '\0';

    start = -1;
    end = -1;

    if (ngx_http_gridfs_parse_range(value, length, &start, &end) == NGX_OK) {
        ngx_fuzz_check(0 <= start && start < end && end <= length);
    }

    free(value);
}


static void
ngx_fuzz_check_window(ngx_http_gridfs_window_t *w, int64_t length,
    int64_t chunk_size, int64_t pos, int64_t end, int64_t per_window,
    int64_t size)
{
    ngx_fuzz_check(w->from == pos);
    ngx_fuzz_check(w->from < w->to && w->to <= end && w->to <= length);
    ngx_fuzz_check(0 <= w->first_n && w->first_n <= w->last_n
                   && w->last_n <= w->end_n
                   && w->end_n < NGX_HTTP_GRIDFS_MAX_CHUNKS);
    ngx_fuzz_check(w->last_n - w->first_n < per_window);
    ngx_fuzz_check(w->first_n * chunk_size <= w->from
                   && w->from < (w->first_n + 1) * chunk_size);
    ngx_fuzz_check(w->last_n * chunk_size < w->to
                   && w->to <= (w->last_n + 1) * chunk_size);
    ngx_fuzz_check(w->end_n == (end - 1) / chunk_size);

    /* the read copies [from, to) into its half of the buffer */
    ngx_fuzz_check(w->to - w->from <= size);
}


static void
ngx_fuzz_windows(ngx_fuzz_in_t *in)
{
    size_t                    buffer_size;
    int64_t                   length, chunk_size, pos, end, at;
    ngx_uint_t                i, half;
    ngx_http_gridfs_plan_t    plan;
    ngx_http_gridfs_window_t  w;

    chunk_size = ngx_fuzz_int(in, NGX_HTTP_GRIDFS_MAX_CHUNK);
    length = ngx_fuzz_int(in, ngx_fuzz_limit(chunk_size,
                                             NGX_HTTP_GRIDFS_MAX_CHUNKS));
    buffer_size = (size_t) ngx_fuzz_int(in, NGX_HTTP_GRIDFS_MAX_WINDOW);
    pos = ngx_fuzz_int(in, length);
    end = ngx_fuzz_int(in, length);

    if (ngx_http_gridfs_check_file(length, chunk_size) != NGX_OK) {
        ngx_fuzz_check(ngx_http_gridfs_window(length, chunk_size, pos, end,
                                              1, &w)
                       == NGX_ERROR);
        return;
    }

    ngx_fuzz_check(length == 0
                   || (chunk_size > 0
                       && (length - 1) / chunk_size
                          < NGX_HTTP_GRIDFS_MAX_CHUNKS));

    if (pos < 0 || end <= pos || end > length) {
        ngx_fuzz_check(ngx_http_gridfs_window(length, chunk_size, pos, end,
                                              1, &w)
                       == NGX_ERROR);
        return;
    }

    if (ngx_http_gridfs_plan(buffer_size, chunk_size, pos, end, &plan)
        != NGX_OK)
    {
        ngx_fuzz_check(buffer_size == 0
                       || buffer_size > NGX_HTTP_GRIDFS_MAX_WINDOW);
        return;
    }

    ngx_fuzz_check(plan.total >= 1 && plan.chunks >= 1);
    ngx_fuzz_check(plan.per_window[0] >= 1 && plan.per_window[1] >= 1);
    ngx_fuzz_check(plan.per_window[0] + (plan.overlap ? plan.per_window[1]
                                                      : 0)
                   <= plan.total);
    ngx_fuzz_check(plan.size[0] > 0 && plan.size[1] > 0);
    ngx_fuzz_check((uint64_t) plan.size[0] + (uint64_t) plan.size[1]
                   <= 2 * (buffer_size + (size_t) chunk_size));

    /* from the start: contiguous windows, each fitting its half */
    half = 0;
    at = pos;

    for (i = 0; i < NGX_FUZZ_WINDOWS && at < end; i++) {
        ngx_fuzz_check(ngx_http_gridfs_window(length, chunk_size, at, end,
                                              plan.per_window[half], &w)
                       == NGX_OK);
        ngx_fuzz_check_window(&w, length, chunk_size, at, end,
                              plan.per_window[half], plan.size[half]);
        at = w.to;
        half = plan.overlap ? !half : 0;
    }

    /* windows share no chunk: no more of them than chunks */
    ngx_fuzz_check(at == end || i == NGX_FUZZ_WINDOWS);
    ngx_fuzz_check((int64_t) i <= plan.chunks);

    /* from an arbitrary point in the range, the last byte included */
    for (i = 0; i < 2; i++) {
        at = (i == 0) ? pos + (int64_t) (ngx_fuzz_raw(in, 8)
                                         % (uint64_t) (end - pos))
                      : end - 1;

        ngx_fuzz_check(ngx_http_gridfs_window(length, chunk_size, at, end,
                                              plan.per_window[0], &w)
                       == NGX_OK);
        ngx_fuzz_check_window(&w, length, chunk_size, at, end,
                              plan.per_window[0], plan.size[0]);
    }
}


/* the module's use of a part: copied at offset into the window's buffer
 * (read_chunks), or sent as is (read here, for ASan to check) */

static void
ngx_fuzz_use_part(ngx_str_t *part, int64_t offset, int64_t from, int64_t to)
{
    size_t    i;
    u_char   *dest;
    unsigned  sum;

    ngx_fuzz_check(from >= 0 && from < to);
    ngx_fuzz_check(part->len > 0 && offset >= 0
                   && offset + (int64_t) part->len <= to - from);

    if (to - from <= NGX_FUZZ_COPY) {
        dest = malloc((size_t) (to - from));
        ngx_fuzz_check(dest != NULL);
        memcpy(dest + offset, part->data, part->len);
        free(dest);
    }

    sum = 0;

    for (i = 0; i < part->len; i++) {
        sum += part->data[i];
    }

    (void) sum;
}


static void
ngx_fuzz_chunk_values(ngx_fuzz_in_t *in, ngx_fuzz_chunk_t *c)
{
    c->n = ngx_fuzz_int(in, NGX_HTTP_GRIDFS_MAX_CHUNKS);
    c->chunk_size = ngx_fuzz_int(in, NGX_HTTP_GRIDFS_MAX_CHUNK);
    c->length = ngx_fuzz_int(in, ngx_fuzz_limit(c->chunk_size,
                                                ngx_fuzz_next(c->n)));
    c->from = ngx_fuzz_int(in, c->length);
    c->to = ngx_fuzz_int(in, c->length);
}


static void
ngx_fuzz_chunk_checked(ngx_fuzz_chunk_t *c, const bson_t *doc)
{
    int64_t         offset, doc_n;
    uint32_t        len;
    ngx_str_t       part;
    bson_iter_t     iter;
    bson_error_t    error;
    bson_subtype_t  subtype;
    const uint8_t  *data;

    error.message[0] = '\0';

    if (ngx_http_gridfs_chunk_part(doc, c->n, c->length, c->chunk_size,
                                   c->from, c->to, &part, &offset, &error)
        != NGX_OK)
    {
        ngx_fuzz_check(error.message[0] != '\0');
        return;
    }

    /* accepted: the files document is valid, n is the integer expected */
    ngx_fuzz_check(ngx_http_gridfs_check_file(c->length, c->chunk_size)
                   == NGX_OK);
    ngx_fuzz_check(c->n >= 0 && c->n < NGX_HTTP_GRIDFS_MAX_CHUNKS);
    ngx_fuzz_check(bson_iter_init_find(&iter, doc, "n")
                   && ngx_http_gridfs_integer(&iter, &doc_n) == NGX_OK
                   && doc_n == c->n);

    /* binary data of the size GridFS implies, the part within it */
    ngx_fuzz_check(bson_iter_init_find(&iter, doc, "data")
                   && BSON_ITER_HOLDS_BINARY(&iter));
    bson_iter_binary(&iter, &subtype, &len, &data);
    ngx_fuzz_check((int64_t) len == ngx_min(c->chunk_size,
                                            c->length
                                            - c->n * c->chunk_size));
    ngx_fuzz_check(part.data >= data && part.data + part.len <= data + len);

    /* and within the window, where the file has those bytes */
    ngx_fuzz_check(c->n * c->chunk_size + (part.data - data)
                   == c->from + offset);
    ngx_fuzz_use_part(&part, offset, c->from, c->to);
}


/* a chunk document shaped by the input: n of each type, data of each
 * type, of the size expected or another */

static void
ngx_fuzz_chunk(ngx_fuzz_in_t *in)
{
    bson_t             doc;
    size_t             len;
    int64_t            v, expected;
    uint8_t           *data;
    ngx_fuzz_chunk_t   c;

    ngx_fuzz_chunk_values(in, &c);

    bson_init(&doc);

    v = (ngx_fuzz_raw(in, 1) % 2) ? c.n
                                   : ngx_fuzz_int(in, ngx_fuzz_next(c.n));

    switch (ngx_fuzz_raw(in, 1) % 6) {
    case 0:
        break;
    case 1:
        BSON_APPEND_INT32(&doc, "n", (int32_t) v);
        break;
    case 2:
        BSON_APPEND_INT64(&doc, "n", v);
        break;
    case 3:
        BSON_APPEND_DOUBLE(&doc, "n", (double) v);
        break;
    case 4:
        BSON_APPEND_DOUBLE(&doc, "n", (double) v + 0.5);
        break;
    default:
        BSON_APPEND_UTF8(&doc, "n", "0");
    }

    expected = (c.chunk_size > 0 && c.chunk_size <= NGX_HTTP_GRIDFS_MAX_CHUNK
                && c.n >= 0 && c.n < NGX_HTTP_GRIDFS_MAX_CHUNKS
                && c.length >= 0)
               ? ngx_min(c.chunk_size, c.length - c.n * c.chunk_size)
               : 0;

    len = (ngx_fuzz_raw(in, 1) % 2 && expected > 0
           && expected <= NGX_FUZZ_DATA)
          ? (size_t) expected
          : (size_t) (ngx_fuzz_raw(in, 3) % NGX_FUZZ_DATA);

    /* exactly len bytes: ASan sees any read past them */
    data = malloc(len ? len : 1);
    ngx_fuzz_check(data != NULL);
    memset(data, 'x', len);

    switch (ngx_fuzz_raw(in, 1) % 4) {
    case 0:
        break;
    case 1:
        bson_append_utf8(&doc, "data", 4, "0123456789", 10);
        break;
    case 2:
        BSON_APPEND_BINARY(&doc, "data", BSON_SUBTYPE_USER, data,
                           (uint32_t) len);
        break;
    default:
        BSON_APPEND_BINARY(&doc, "data", BSON_SUBTYPE_BINARY, data,
                           (uint32_t) len);
    }

    ngx_fuzz_chunk_checked(&c, &doc);

    free(data);
    bson_destroy(&doc);
}


/* the input's tail as a document, as a reply's batch holds one */

static void
ngx_fuzz_raw_chunk(ngx_fuzz_in_t *in)
{
    bson_t             doc;
    size_t             len;
    uint8_t           *copy;
    ngx_fuzz_in_t      values;
    ngx_fuzz_chunk_t   c;

    values.p = in->p;
    values.end = in->p + ngx_min((size_t) (in->end - in->p), 48);

    ngx_fuzz_chunk_values(&values, &c);

    len = in->end - values.end;

    /* exactly its bytes: ASan sees any read past them */
    copy = malloc(len ? len : 1);
    ngx_fuzz_check(copy != NULL);
    memcpy(copy, values.end, len);

    if (bson_init_static(&doc, copy, len)) {
        ngx_fuzz_chunk_checked(&c, &doc);
    }

    free(copy);
}


static void
ngx_fuzz_integer(ngx_fuzz_in_t *in)
{
    bson_t       doc;
    double       d;
    int64_t      v;
    uint64_t     bits;
    bson_iter_t  iter;

    bits = ngx_fuzz_raw(in, 8);
    memcpy(&d, &bits, sizeof(double));

    bson_init(&doc);
    BSON_APPEND_DOUBLE(&doc, "v", d);

    ngx_fuzz_check(bson_iter_init_find(&iter, &doc, "v"));

    if (ngx_http_gridfs_integer(&iter, &v) == NGX_OK) {
        ngx_fuzz_check(d >= -NGX_HTTP_GRIDFS_MAX_DOUBLE_INT
                       && d <= NGX_HTTP_GRIDFS_MAX_DOUBLE_INT);
        ngx_fuzz_check((double) v == d);

    } else {
        ngx_fuzz_check(!(d >= -NGX_HTTP_GRIDFS_MAX_DOUBLE_INT
                         && d <= NGX_HTTP_GRIDFS_MAX_DOUBLE_INT)
                       || d != (double) (int64_t) d);
    }

    bson_destroy(&doc);
}


int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    ngx_fuzz_in_t  in;

    if (size == 0) {
        return 0;
    }

    in.p = data + 1;
    in.end = data + size;

    switch (data[0] % 5) {
    case 0:
        ngx_fuzz_range(&in);
        break;
    case 1:
        ngx_fuzz_windows(&in);
        break;
    case 2:
        ngx_fuzz_chunk(&in);
        break;
    case 3:
        ngx_fuzz_raw_chunk(&in);
        break;
    default:
        ngx_fuzz_integer(&in);
    }

    return 0;
}
