
/*
 * ngx_http_gridfs_module's headers from a files document (every value
 * untrusted), and the predictions of what nginx's not_modified and range
 * filters will make of the request: no I/O, no state but the request's.
 */


#include <ngx_config.h>
#include <ngx_core.h>
#include <ngx_http.h>
#include <ngx_md5.h>

#include "ngx_http_gridfs_http.h"


static ngx_int_t ngx_http_gridfs_set_etag(ngx_http_request_t *r,
    ngx_http_gridfs_ctx_t *ctx, int64_t upload_ms, const char *md5);
static ngx_int_t ngx_http_gridfs_set_content_type(ngx_http_request_t *r,
    ngx_http_gridfs_ctx_t *ctx);
static ngx_int_t ngx_http_gridfs_safe_value(ngx_http_request_t *r,
    ngx_http_gridfs_ctx_t *ctx, const char *field, const u_char *value,
    size_t len, size_t max, ngx_uint_t etag);
static ngx_int_t ngx_http_gridfs_if_range(ngx_http_request_t *r);
static ngx_uint_t ngx_http_gridfs_etag_match(ngx_http_request_t *r,
    ngx_table_elt_t *header, ngx_uint_t weak);


ngx_int_t
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
                      &ctx->log_key);
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    if (ctx->job->has_files_id) {
        bson_value_destroy(&ctx->job->files_id);
    }

    /* the job's own copy: its reads name it */
    bson_value_copy(bson_iter_value(&iter), &ctx->job->files_id);
    ctx->job->has_files_id = 1;

    if (ngx_http_gridfs_check_file(ctx->length, ctx->chunk_size) != NGX_OK) {
        ngx_log_error(NGX_LOG_ERR, r->connection->log, 0,
                      "gridfs: file document for \"%V\" has a bad length "
                      "(%L) or chunkSize (%L)",
                      &ctx->log_key, ctx->length, ctx->chunk_size);
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
        etag->value.data = ngx_http_gridfs_pnalloc(r->pool, len + 2);
        if (etag->value.data == NULL) {
            return NGX_ERROR;
        }

        etag->value.len = ngx_sprintf(etag->value.data, "\"%*s\"", len, md5)
                          - etag->value.data;

        r->headers_out.etag = etag;
        return NGX_OK;
    }

    if (ctx->job->files_id.value_type == BSON_TYPE_OID) {
        bson_oid_to_string(&ctx->job->files_id.value.v_oid, hex);

    } else {
        bson_init(&id);

        if (!bson_append_value(&id, "", 0, &ctx->job->files_id)) {
            bson_destroy(&id);
            return NGX_ERROR;
        }

        ngx_md5_init(&md5ctx);
        ngx_md5_update(&md5ctx, bson_get_data(&id), id.len);
        ngx_md5_final(digest, &md5ctx);
        bson_destroy(&id);

        *ngx_hex_dump((u_char *) hex, digest, 16) = '\0';
    }

    p = ngx_http_gridfs_pnalloc(r->pool,
                                sizeof("\"--\"") + 32 + 2 * NGX_INT64_LEN);
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
        p = ngx_http_gridfs_pnalloc(r->pool, len);
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
            r->exten.data = ngx_http_gridfs_pnalloc(r->pool, r->exten.len);
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

    escaped = ngx_http_gridfs_pnalloc(r->pool, shown * 4);
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
                  &ctx->log_key, field, (size_t) (p - escaped), escaped,
                  len > shown ? "..." : "", len);

    return NGX_DECLINED;
}


/* mirrors ngx_http_not_modified_header_filter(), which runs before the
 * range filter: NGX_HTTP_OK when the response will carry its body (so
 * that its first window is read before the headers, as any 200), else the
 * 412 or 304 it becomes.  A wrong guess costs a read or a late read,
 * never a wrong answer: the status is the filter's */

ngx_int_t
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


/* If-Range as the range filter reads it: NGX_OK if the range applies */

static ngx_int_t
ngx_http_gridfs_if_range(ngx_http_request_t *r)
{
    time_t      if_range_time;
    ngx_str_t  *if_range, *etag;

    if_range = &r->headers_in.if_range->value;

    if (if_range->len >= 2 && if_range->data[if_range->len - 1] == '"') {
        etag = &r->headers_out.etag->value;

        if (if_range->len != etag->len
            || ngx_strncmp(if_range->data, etag->data, etag->len) != 0)
        {
            return NGX_DECLINED;
        }

        return NGX_OK;
    }

    if (r->headers_out.last_modified_time == (time_t) -1) {
        return NGX_DECLINED;
    }

    if_range_time = ngx_parse_http_time(if_range->data, if_range->len);

    if (if_range_time != r->headers_out.last_modified_time) {
        return NGX_DECLINED;
    }

    return NGX_OK;
}


/* mirrors ngx_http_range_header_filter() with r->single_range set: NGX_OK
 * and the range [start, end) that filter will serve, NGX_DECLINED when it
 * will serve the whole file, or 416.  A wrong guess costs a read, never a
 * wrong answer: the range chosen is checked */

ngx_int_t
ngx_http_gridfs_predict_range(ngx_http_request_t *r, off_t *start,
    off_t *end)
{
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

    if (r->headers_in.if_range && ngx_http_gridfs_if_range(r) != NGX_OK) {
        return NGX_DECLINED;
    }

    return ngx_http_gridfs_parse_range(r->headers_in.range->value.data + 6,
                                       r->headers_out.content_length_n,
                                       start, end);
}


/* "bytes S-E/T" as set by the range filter */

ngx_int_t
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