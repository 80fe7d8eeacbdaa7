/* prom_envelope.c: the part of Prometheus' HTTP API answers that /api/v1/series and
 * /api/v1/query share — the {"status", "errorType", "error", "data"} envelope — and the yajl
 * driving that both streamed decoders need: one callback table that marks every event, skips the
 * values a decoder is not interested in (nesting capped) and hands it the rest as three kinds of
 * event (a value begins, a key, a container ends); slicing the input, stopping at the first failure
 * (a callback's or yajl's own, without yajl's multi-line context dump), and refusing a value that
 * runs for more than MAX_BYTES_WITHOUT_EVENT without ending, so a hostile backend cannot make a
 * decoder buffer without bound. The decoders (series_stream.c, query_stream.c) keep only what
 * they decode. */
#include "prom_envelope.h"

#include <stdarg.h>
#include <string.h>

#include "internal.h"

#define FEED_SLICE ((size_t)64 << 10)
#define MAX_BYTES_WITHOUT_EVENT ((size_t)2 << 20)
#define SKIP_MAX_DEPTH 64

/* ---- yajl's events ----------------------------------------------------------------------- */

static int value_begins(void *ctx, enum cma_json_kind k, const unsigned char *s, size_t len)
{
    struct cma_prom_envelope *e = ctx;
    e->event_seen = true;
    if (e->skip_depth == 0)
        return e->events->begin(e->ctx, k, s, len);
    if ((k == CMA_JSON_MAP || k == CMA_JSON_ARRAY) && ++e->skip_depth > SKIP_MAX_DEPTH)
        return cma_prom_envelope_fail(e, CMA_ERR_BACKEND_RESPONSE, "%svalues nested over %d deep",
                                      e->bad_json, SKIP_MAX_DEPTH);
    return 1;
}

static int container_ends(void *ctx, bool map)
{
    struct cma_prom_envelope *e = ctx;
    e->event_seen = true;
    if (e->skip_depth == 0)
        return e->events->end(e->ctx, map);
    e->skip_depth--;
    return 1;
}

static int on_null(void *ctx)
{
    return value_begins(ctx, CMA_JSON_NULL, NULL, 0);
}

static int on_boolean(void *ctx, int value)
{
    (void)value;
    return value_begins(ctx, CMA_JSON_BOOL, NULL, 0);
}

static int on_number(void *ctx, const char *s, size_t len)
{
    return value_begins(ctx, CMA_JSON_NUMBER, (const unsigned char *)s, len);
}

static int on_string(void *ctx, const unsigned char *s, size_t len)
{
    return value_begins(ctx, CMA_JSON_STRING, s, len);
}

static int on_start_map(void *ctx)
{
    return value_begins(ctx, CMA_JSON_MAP, NULL, 0);
}

static int on_start_array(void *ctx)
{
    return value_begins(ctx, CMA_JSON_ARRAY, NULL, 0);
}

static int on_map_key(void *ctx, const unsigned char *s, size_t len)
{
    struct cma_prom_envelope *e = ctx;
    e->event_seen = true;
    return e->skip_depth > 0 ? 1 : e->events->key(e->ctx, s, len);
}

static int on_end_map(void *ctx)
{
    return container_ends(ctx, true);
}

static int on_end_array(void *ctx)
{
    return container_ends(ctx, false);
}

static const yajl_callbacks callbacks = {
    .yajl_null = on_null,
    .yajl_boolean = on_boolean,
    .yajl_number = on_number,
    .yajl_string = on_string,
    .yajl_start_map = on_start_map,
    .yajl_map_key = on_map_key,
    .yajl_end_map = on_end_map,
    .yajl_start_array = on_start_array,
    .yajl_end_array = on_end_array,
};

int cma_prom_envelope_skip(struct cma_prom_envelope *e, enum cma_json_kind k)
{
    if (k == CMA_JSON_MAP || k == CMA_JSON_ARRAY)
        e->skip_depth = 1;
    return 1;
}

/* ---- the envelope ------------------------------------------------------------------------ */

enum cma_errc cma_prom_envelope_init(struct cma_prom_envelope *e,
                                     const struct cma_prom_events *events, void *ctx,
                                     const char *what, const char *bad_json)
{
    memset(e, 0, sizeof(*e));
    e->events = events;
    e->ctx = ctx;
    e->what = what;
    e->bad_json = bad_json;
    e->yajl = yajl_alloc(&callbacks, NULL, e);
    return e->yajl ? CMA_OK : CMA_ERR_NOMEM;
}

void cma_prom_envelope_done(struct cma_prom_envelope *e)
{
    if (e && e->yajl) {
        yajl_free(e->yajl);
        e->yajl = NULL;
    }
}

int cma_prom_envelope_fail(struct cma_prom_envelope *e, enum cma_errc code, const char *fmt, ...)
{
    if (!e->failed) {
        va_list ap;
        va_start(ap, fmt);
        cma_err_vset(&e->err, code, fmt, ap);
        va_end(ap);
        e->failed = true;
    }
    return 0;
}

enum cma_errc cma_prom_envelope_error(const struct cma_prom_envelope *e, struct cma_err *reterr)
{
    cma_err_copy(reterr, &e->err);
    return e->err.code;
}

static void copy_bounded(char *dst, size_t cap, const unsigned char *s, size_t len)
{
    size_t n = len < cap - 1 ? len : cap - 1;
    memcpy(dst, s, n);
    dst[n] = '\0';
}

void cma_prom_envelope_string(struct cma_prom_envelope *e, const char *key, const unsigned char *s,
                              size_t len)
{
    if (strcmp(key, "status") == 0) {
        copy_bounded(e->status, sizeof(e->status), s, len);
        e->have_status = true;
    } else if (strcmp(key, "errorType") == 0) {
        copy_bounded(e->error_type, sizeof(e->error_type), s, len);
    } else if (strcmp(key, "error") == 0) {
        copy_bounded(e->error, sizeof(e->error), s, len);
    }
}

/* Records yajl's own message (without its multi-line context dump). */
static enum cma_errc yajl_failure(struct cma_prom_envelope *e, const unsigned char *chunk,
                                  size_t len, struct cma_err *reterr)
{
    unsigned char *msg = yajl_get_error(e->yajl, 0, chunk, len);
    size_t at = e->bytes_fed + (chunk ? yajl_get_bytes_consumed(e->yajl) : 0);
    char text[160];
    cma_clients_snippet(msg ? (const char *)msg : "parse error", msg ? strlen((char *)msg) : 11,
                        sizeof(text) - 1, text, sizeof(text));
    if (msg)
        yajl_free_error(e->yajl, msg);
    cma_prom_envelope_fail(e, CMA_ERR_BACKEND_RESPONSE, "%s%s (near byte %zu)", e->bad_json, text,
                           at);
    return cma_prom_envelope_error(e, reterr);
}

enum cma_errc cma_prom_envelope_feed(struct cma_prom_envelope *e, const char *data, size_t len,
                                     struct cma_err *reterr)
{
    if (e->failed)
        return cma_prom_envelope_error(e, reterr);
    if (e->finished)
        return cma_err_set(reterr, CMA_ERR_INTERNAL, "%s fed after finish", e->what);
    const unsigned char *p = (const unsigned char *)data;
    while (len > 0) {
        size_t n = len < FEED_SLICE ? len : FEED_SLICE;
        e->event_seen = false;
        yajl_status st = yajl_parse(e->yajl, p, n);
        if (st == yajl_status_client_canceled || e->failed)
            return cma_prom_envelope_error(e, reterr);
        if (st != yajl_status_ok)
            return yajl_failure(e, p, n, reterr);
        e->bytes_fed += n;
        e->bytes_without_event = e->event_seen ? 0 : e->bytes_without_event + n;
        if (e->bytes_without_event > MAX_BYTES_WITHOUT_EVENT) {
            cma_prom_envelope_fail(e, CMA_ERR_BACKEND_RESPONSE,
                                   "%sno JSON value ends within %zu bytes (near byte %zu)",
                                   e->bad_json, MAX_BYTES_WITHOUT_EVENT, e->bytes_fed);
            return cma_prom_envelope_error(e, reterr);
        }
        p += n;
        len -= n;
    }
    return CMA_OK;
}

enum cma_errc cma_prom_envelope_complete(struct cma_prom_envelope *e, struct cma_err *reterr)
{
    if (e->failed)
        return cma_prom_envelope_error(e, reterr);
    if (e->finished)
        return cma_err_set(reterr, CMA_ERR_INTERNAL, "%s finished twice", e->what);
    e->finished = true;
    yajl_status st = yajl_complete_parse(e->yajl);
    if (st == yajl_status_client_canceled || e->failed)
        return cma_prom_envelope_error(e, reterr);
    if (st != yajl_status_ok)
        return yajl_failure(e, NULL, 0, reterr);
    return CMA_OK;
}

static enum cma_errc status_error(const struct cma_prom_envelope *e, struct cma_err *reterr)
{
    enum cma_errc code = CMA_ERR_BACKEND_ERROR;
    if (strcmp(e->error_type, "timeout") == 0)
        code = CMA_ERR_BACKEND_TIMEOUT;
    else if (strcmp(e->error_type, "unavailable") == 0)
        code = CMA_ERR_BACKEND_UNAVAILABLE;
    if (e->error_type[0] && e->error[0])
        return cma_err_set(reterr, code, "%s: %s", e->error_type, e->error);
    if (e->error[0] || e->error_type[0])
        return cma_err_set(reterr, code, "%s", e->error[0] ? e->error : e->error_type);
    return cma_err_set(reterr, code, "prometheus answered status \"error\" without a message");
}

enum cma_errc cma_prom_envelope_judge(const struct cma_prom_envelope *e, struct cma_err *reterr)
{
    if (!e->have_status || e->status_bad)
        return cma_err_set(reterr, CMA_ERR_BACKEND_RESPONSE, "%sstatus is missing or not a string",
                           e->bad_json);
    if (strcmp(e->status, "error") == 0)
        return status_error(e, reterr);
    if (strcmp(e->status, "success") != 0)
        return cma_err_set(reterr, CMA_ERR_BACKEND_RESPONSE,
                           "%sstatus \"%s\" is neither success nor error", e->bad_json, e->status);
    return CMA_OK;
}
