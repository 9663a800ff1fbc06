/*
 * mod_lab_framing: refuses with 400, then closes the connection, as nginx
 * does, two request framings Apache 2.4 accepts and no directive can see:
 *
 * - Content-Length with Transfer-Encoding: Apache reads the body by its
 *   chunks and drops Content-Length (RFC 9112 6.1 allows either), before
 *   any module runs, so neither mod_rewrite nor mod_security sees both;
 *   behind a proxy that reads Content-Length, it is request smuggling.
 * - obs-fold, a header line continued on the next line after a space or a
 *   tab (RFC 9112 5.2): Apache joins the lines with a space, even with
 *   HttpProtocolOptions Strict, and the join looks like any value.
 *
 * So the check reads the header lines as they arrive: a connection input
 * filter sees each line Apache's parser asks for (AP_MODE_GETLINE), from
 * the request line, which pre_read_request announces, to the end of the
 * headers, which post_read_request marks (a body's lines, chunk sizes, are
 * not looked at). A refusal is an error from the read, which Apache
 * answers 400 and closes the connection after, as for any header it
 * cannot read.
 */

#include "httpd.h"
#include "http_config.h"
#include "http_connection.h"
#include "http_log.h"
#include "http_protocol.h"
#include "http_request.h"
#include "util_filter.h"

#include "apr_strings.h"


module AP_MODULE_DECLARE_DATA lab_framing_module;

static ap_filter_rec_t  *lab_framing_filter;


typedef enum {
    LAB_REQUEST_LINE,
    LAB_HEADERS,
    LAB_PASSED          /* the headers are read: a body, or nothing yet */
} lab_framing_state;

typedef struct {
    lab_framing_state  state;
    int                content_length;
    int                transfer_encoding;
} lab_framing_ctx;


/* the longest header name looked for, and its colon */
#define LAB_NAME_MAX  sizeof("transfer-encoding:")


static apr_status_t
lab_framing_refuse(ap_filter_t *f, const char *why)
{
    ap_log_cerror(APLOG_MARK, APLOG_INFO, 0, f->c,
                  "mod_lab_framing: %s: 400, as nginx answers it", why);

    return APR_EINVAL;
}


static apr_status_t
lab_framing_in(ap_filter_t *f, apr_bucket_brigade *bb, ap_input_mode_t mode,
    apr_read_type_e block, apr_off_t readbytes)
{
    char              start[LAB_NAME_MAX + 1];
    apr_size_t        len;
    apr_status_t      rv;
    lab_framing_ctx  *ctx;

    ctx = f->ctx;

    rv = ap_get_brigade(f->next, bb, mode, block, readbytes);

    if (rv != APR_SUCCESS || mode != AP_MODE_GETLINE
        || ctx->state == LAB_PASSED)
    {
        return rv;
    }

    /* a whole line: the core filter reads up to its LF, or 8 KiB, past
     * LimitRequestFieldSize, where Apache refuses the header anyway */
    len = sizeof(start) - 1;
    rv = apr_brigade_flatten(bb, start, &len);
    if (rv != APR_SUCCESS) {
        return rv;
    }
    start[len] = '\0';

    if (len == 0 || start[0] == '\r' || start[0] == '\n') {
        if (ctx->state == LAB_HEADERS) {
            ctx->state = LAB_PASSED;     /* the end of the headers */
        }
        return APR_SUCCESS;              /* blank lines before a request */
    }

    if (ctx->state == LAB_REQUEST_LINE) {
        ctx->state = LAB_HEADERS;
        return APR_SUCCESS;
    }

    if (start[0] == ' ' || start[0] == '\t') {
        return lab_framing_refuse(f, "an obs-fold header line");
    }

    if (ap_cstr_casecmpn(start, "content-length:", 15) == 0) {
        ctx->content_length = 1;

    } else if (ap_cstr_casecmpn(start, "transfer-encoding:", 18) == 0) {
        ctx->transfer_encoding = 1;
    }

    if (ctx->content_length && ctx->transfer_encoding) {
        return lab_framing_refuse(f,
                                  "Content-Length with Transfer-Encoding");
    }

    return APR_SUCCESS;
}


static int
lab_framing_pre_connection(conn_rec *c, void *csd)
{
    lab_framing_ctx  *ctx;

    ctx = apr_pcalloc(c->pool, sizeof(lab_framing_ctx));
    ctx->state = LAB_PASSED;

    ap_set_module_config(c->conn_config, &lab_framing_module, ctx);
    ap_add_input_filter_handle(lab_framing_filter, ctx, NULL, c);

    return OK;
}


static void
lab_framing_pre_read_request(request_rec *r, conn_rec *c)
{
    lab_framing_ctx  *ctx;

    ctx = ap_get_module_config(c->conn_config, &lab_framing_module);
    if (ctx == NULL) {
        return;
    }

    ctx->state = LAB_REQUEST_LINE;
    ctx->content_length = 0;
    ctx->transfer_encoding = 0;
}


static int
lab_framing_post_read_request(request_rec *r)
{
    lab_framing_ctx  *ctx;

    ctx = ap_get_module_config(r->connection->conn_config,
                               &lab_framing_module);
    if (ctx != NULL && r->main == NULL && r->prev == NULL) {
        ctx->state = LAB_PASSED;
    }

    return DECLINED;
}


static void
lab_framing_register_hooks(apr_pool_t *p)
{
    lab_framing_filter = ap_register_input_filter("LAB_FRAMING",
                                                  lab_framing_in, NULL,
                                                  AP_FTYPE_CONNECTION);

    ap_hook_pre_connection(lab_framing_pre_connection, NULL, NULL,
                           APR_HOOK_MIDDLE);
    ap_hook_pre_read_request(lab_framing_pre_read_request, NULL, NULL,
                             APR_HOOK_MIDDLE);
    ap_hook_post_read_request(lab_framing_post_read_request, NULL, NULL,
                              APR_HOOK_REALLY_FIRST);
}


AP_DECLARE_MODULE(lab_framing) = {
    STANDARD20_MODULE_STUFF,
    NULL,
    NULL,
    NULL,
    NULL,
    NULL,
    lab_framing_register_hooks
};
