/* series_stream.c: the streaming parser of Prometheus /api/v1/series answers (yajl 2), fed
 * chunk by chunk from the curl write callback, calling back once per series object.
 *
 * DESIGN: memory stays flat whatever the number of series. The parser is a small state machine
 * over yajl events: TOP → ROOT (the answer object) → DATA (the array) → SERIES (one object).
 * Inside a series object every key and string value is copied into one reusable scratch buffer
 * (ceiling 1 MiB, at most 1,000 labels); at the object's end the labels are handed to the
 * callback as views into it and the buffer is cleared, so no series list is ever accumulated.
 * Keys may come in any order: status/errorType/error are remembered (bounded copies) and judged
 * in finish(), so `"status":"error"` after the data is still reported, and `data: null` gives
 * "no metrics retrieved". Any value that is not a string inside a series object is rejected.
 * Values of other top-level keys ("warnings", unknown ones) are skipped, nesting capped at 64.
 * yajl buffers a token that spans chunks; to bound that buffer the input is fed in 64 KiB
 * slices and 2 MiB without a single JSON event is an error. A parser is used by one thread. */
#include "cma/prom.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <yajl/yajl_parse.h>

#include "cma/buf.h"
#include "cma/str.h"
#include "internal.h"
#include "prom_envelope.h"

#define SERIES_MAX_BYTES ((size_t)1 << 20)
#define SERIES_MAX_LABELS 1000
#define BAD_JSON "unexpected JSON from prometheus /api/v1/series: "

enum where { W_TOP, W_ROOT, W_DATA, W_SERIES, W_END };
enum root_key { K_OTHER, K_STATUS, K_DATA, K_ERROR_TYPE, K_ERROR };
enum data_state { D_ABSENT, D_NULL, D_ARRAY };

struct entry {
    size_t name_off, name_len, value_off, value_len;
};

struct cma_series_parser {
    struct cma_prom_envelope env; /* yajl, status/errorType/error, the first failure */
    cma_series_fn fn;
    void *ctx;
    enum where where;
    enum root_key key;
    enum data_state data;
    /* the series object being read */
    struct cma_buf scratch;
    struct entry *entries;
    size_t n_entries;
    struct cma_label_view *views;
    size_t index; /* position of the current object in data[] */
    size_t count;
    size_t skipped;
};

static int fail_not_string(struct cma_series_parser *sp)
{
    const char *name = "?";
    size_t len = 1;
    if (sp->n_entries > 0 && sp->scratch.ptr) {
        const struct entry *e = &sp->entries[sp->n_entries - 1];
        name = sp->scratch.ptr + e->name_off;
        len = e->name_len > 64 ? 64 : e->name_len;
    }
    return cma_prom_envelope_fail(&sp->env, CMA_ERR_BACKEND_RESPONSE,
                                  BAD_JSON "data[%zu].%.*s is not a string", sp->index, (int)len,
                                  name);
}

static int fail_scratch(struct cma_series_parser *sp, enum cma_errc rc)
{
    if (rc == CMA_ERR_NOMEM)
        return cma_prom_envelope_fail(&sp->env, CMA_ERR_NOMEM, "out of memory");
    return cma_prom_envelope_fail(&sp->env, CMA_ERR_BACKEND_RESPONSE,
                                  BAD_JSON "data[%zu] is over %zu bytes", sp->index,
                                  SERIES_MAX_BYTES);
}

/* A scalar (null, bool, number) anywhere. */
static int on_scalar(struct cma_series_parser *sp, bool is_null)
{
    switch (sp->where) {
    case W_TOP:
        return cma_prom_envelope_fail(&sp->env, CMA_ERR_BACKEND_RESPONSE,
                                      BAD_JSON "the answer is not an object");
    case W_ROOT:
        if (sp->key == K_DATA) {
            if (is_null) {
                sp->data = D_NULL;
                return 1;
            }
            return cma_prom_envelope_fail(&sp->env, CMA_ERR_BACKEND_RESPONSE,
                                          BAD_JSON "data is not an array");
        }
        if (sp->key == K_STATUS)
            return cma_prom_envelope_fail(&sp->env, CMA_ERR_BACKEND_RESPONSE,
                                          BAD_JSON "status is not a string");
        return 1;
    case W_DATA:
        return cma_prom_envelope_fail(&sp->env, CMA_ERR_BACKEND_RESPONSE,
                                      BAD_JSON "data[%zu] is not an object", sp->index);
    case W_SERIES:
        return fail_not_string(sp);
    case W_END:
        break;
    }
    return cma_prom_envelope_fail(&sp->env, CMA_ERR_BACKEND_RESPONSE,
                                  BAD_JSON "a value after the end of the answer");
}

static int on_string(struct cma_series_parser *sp, const unsigned char *s, size_t len)
{
    switch (sp->where) {
    case W_ROOT:
        switch (sp->key) {
        case K_STATUS:
            cma_prom_envelope_string(&sp->env, "status", s, len);
            return 1;
        case K_ERROR_TYPE:
            cma_prom_envelope_string(&sp->env, "errorType", s, len);
            return 1;
        case K_ERROR:
            cma_prom_envelope_string(&sp->env, "error", s, len);
            return 1;
        case K_DATA:
            return cma_prom_envelope_fail(&sp->env, CMA_ERR_BACKEND_RESPONSE,
                                          BAD_JSON "data is not an array");
        case K_OTHER:
            return 1;
        }
        return 1;
    case W_SERIES: {
        if (memchr(s, '\0', len))
            return cma_prom_envelope_fail(&sp->env, CMA_ERR_BACKEND_RESPONSE,
                                          BAD_JSON "data[%zu] has a label value with a NUL byte",
                                          sp->index);
        struct entry *e = &sp->entries[sp->n_entries - 1];
        e->value_off = sp->scratch.len;
        e->value_len = len;
        enum cma_errc rc = cma_buf_append(&sp->scratch, s, len);
        if (rc == CMA_OK)
            rc = cma_buf_appendc(&sp->scratch, '\0');
        return rc == CMA_OK ? 1 : fail_scratch(sp, rc);
    }
    case W_DATA:
        return cma_prom_envelope_fail(&sp->env, CMA_ERR_BACKEND_RESPONSE,
                                      BAD_JSON "data[%zu] is not an object", sp->index);
    case W_TOP:
        return cma_prom_envelope_fail(&sp->env, CMA_ERR_BACKEND_RESPONSE,
                                      BAD_JSON "the answer is not an object");
    case W_END:
        break;
    }
    return cma_prom_envelope_fail(&sp->env, CMA_ERR_BACKEND_RESPONSE,
                                  BAD_JSON "a value after the end of the answer");
}

static int on_start_map(struct cma_series_parser *sp)
{
    switch (sp->where) {
    case W_TOP:
        sp->where = W_ROOT;
        return 1;
    case W_ROOT:
        if (sp->key == K_DATA)
            return cma_prom_envelope_fail(&sp->env, CMA_ERR_BACKEND_RESPONSE,
                                          BAD_JSON "data is not an array");
        if (sp->key == K_STATUS)
            return cma_prom_envelope_fail(&sp->env, CMA_ERR_BACKEND_RESPONSE,
                                          BAD_JSON "status is not a string");
        return cma_prom_envelope_skip(&sp->env, CMA_JSON_MAP);
    case W_DATA:
        sp->where = W_SERIES;
        sp->n_entries = 0;
        cma_buf_clear(&sp->scratch);
        return 1;
    case W_SERIES:
        return fail_not_string(sp);
    case W_END:
        break;
    }
    return cma_prom_envelope_fail(&sp->env, CMA_ERR_BACKEND_RESPONSE,
                                  BAD_JSON "a value after the end of the answer");
}

static int on_start_array(struct cma_series_parser *sp)
{
    switch (sp->where) {
    case W_TOP:
        return cma_prom_envelope_fail(&sp->env, CMA_ERR_BACKEND_RESPONSE,
                                      BAD_JSON "the answer is not an object");
    case W_ROOT:
        if (sp->key == K_DATA) {
            sp->where = W_DATA;
            sp->data = D_ARRAY;
            return 1;
        }
        if (sp->key == K_STATUS)
            return cma_prom_envelope_fail(&sp->env, CMA_ERR_BACKEND_RESPONSE,
                                          BAD_JSON "status is not a string");
        return cma_prom_envelope_skip(&sp->env, CMA_JSON_ARRAY);
    case W_DATA:
        return cma_prom_envelope_fail(&sp->env, CMA_ERR_BACKEND_RESPONSE,
                                      BAD_JSON "data[%zu] is not an object", sp->index);
    case W_SERIES:
        return fail_not_string(sp);
    case W_END:
        break;
    }
    return cma_prom_envelope_fail(&sp->env, CMA_ERR_BACKEND_RESPONSE,
                                  BAD_JSON "a value after the end of the answer");
}

static int on_map_key(void *ctx, const unsigned char *s, size_t len)
{
    struct cma_series_parser *sp = ctx;
    if (sp->where == W_ROOT) {
        if (len == 6 && memcmp(s, "status", 6) == 0)
            sp->key = K_STATUS;
        else if (len == 4 && memcmp(s, "data", 4) == 0)
            sp->key = K_DATA;
        else if (len == 9 && memcmp(s, "errorType", 9) == 0)
            sp->key = K_ERROR_TYPE;
        else if (len == 5 && memcmp(s, "error", 5) == 0)
            sp->key = K_ERROR;
        else
            sp->key = K_OTHER;
        return 1;
    }
    /* W_SERIES: the only other place yajl gives keys outside a skipped value. */
    if (sp->n_entries >= SERIES_MAX_LABELS)
        return cma_prom_envelope_fail(&sp->env, CMA_ERR_BACKEND_RESPONSE,
                                      BAD_JSON "data[%zu] has over %d labels", sp->index,
                                      SERIES_MAX_LABELS);
    if (memchr(s, '\0', len))
        return cma_prom_envelope_fail(&sp->env, CMA_ERR_BACKEND_RESPONSE,
                                      BAD_JSON "data[%zu] has a label name with a NUL byte",
                                      sp->index);
    if (!sp->entries) {
        sp->entries = calloc(SERIES_MAX_LABELS, sizeof(*sp->entries));
        sp->views = calloc(SERIES_MAX_LABELS, sizeof(*sp->views));
        if (!sp->entries || !sp->views)
            return cma_prom_envelope_fail(&sp->env, CMA_ERR_NOMEM, "out of memory");
    }
    struct entry *e = &sp->entries[sp->n_entries++];
    e->name_off = sp->scratch.len;
    e->name_len = len;
    e->value_off = 0;
    e->value_len = 0;
    enum cma_errc rc = cma_buf_append(&sp->scratch, s, len);
    if (rc == CMA_OK)
        rc = cma_buf_appendc(&sp->scratch, '\0');
    return rc == CMA_OK ? 1 : fail_scratch(sp, rc);
}

/* End of one series object: hand it to the callback. */
static int emit_series(struct cma_series_parser *sp)
{
    sp->count++;
    const char *base = sp->scratch.ptr;
    const struct entry *name = NULL;
    for (size_t i = 0; i < sp->n_entries; i++) {
        const struct entry *e = &sp->entries[i];
        if (e->name_len == 8 && memcmp(base + e->name_off, "__name__", 8) == 0)
            name = e; /* the last one wins, as in Go's decoder */
    }
    if (!name) {
        sp->skipped++;
        return 1;
    }
    /* An answer that already said status "error" gets no callbacks. */
    if (sp->env.have_status && strcmp(sp->env.status, "error") == 0)
        return 1;
    size_t n = 0;
    for (size_t i = 0; i < sp->n_entries; i++) {
        const struct entry *e = &sp->entries[i];
        if (e->name_len == 8 && memcmp(base + e->name_off, "__name__", 8) == 0)
            continue;
        sp->views[n].name = base + e->name_off;
        sp->views[n].name_len = e->name_len;
        sp->views[n].value = base + e->value_off;
        sp->views[n].value_len = e->value_len;
        n++;
    }
    if (sp->fn(sp->ctx, base + name->value_off, name->value_len, sp->views, n) != 0)
        return cma_prom_envelope_fail(&sp->env, CMA_ERR_INTERNAL,
                                      "series listing stopped by caller");
    return 1;
}

static int on_end(void *ctx, bool map)
{
    struct cma_series_parser *sp = ctx;
    if (map && sp->where == W_SERIES) {
        sp->where = W_DATA;
        int ok = emit_series(sp);
        sp->index++;
        return ok;
    }
    /* the other map is the answer (W_ROOT: yajl only calls end_map where a map is open), the
     * only array not skipped is data (W_DATA) */
    sp->where = map ? W_END : W_ROOT;
    return 1;
}

/* A value begins outside a skipped one. */
static int on_begin(void *ctx, enum cma_json_kind k, const unsigned char *s, size_t len)
{
    struct cma_series_parser *sp = ctx;
    switch (k) {
    case CMA_JSON_STRING:
        return on_string(sp, s, len);
    case CMA_JSON_MAP:
        return on_start_map(sp);
    case CMA_JSON_ARRAY:
        return on_start_array(sp);
    case CMA_JSON_NULL:
    case CMA_JSON_BOOL:
    case CMA_JSON_NUMBER:
        break;
    }
    return on_scalar(sp, k == CMA_JSON_NULL);
}

static const struct cma_prom_events events = {on_begin, on_map_key, on_end};

enum cma_errc cma_series_parser_new(cma_series_fn fn, void *ctx, struct cma_series_parser **ret)
{
    struct cma_series_parser *sp = calloc(1, sizeof(*sp));
    if (!sp)
        return CMA_ERR_NOMEM;
    sp->fn = fn;
    sp->ctx = ctx;
    cma_buf_init(&sp->scratch, SERIES_MAX_BYTES);
    if (cma_prom_envelope_init(&sp->env, &events, sp, "series parser", BAD_JSON) != CMA_OK) {
        free(sp);
        return CMA_ERR_NOMEM;
    }
    *ret = sp;
    return CMA_OK;
}

void cma_series_parser_free(struct cma_series_parser *sp)
{
    if (!sp)
        return;
    cma_prom_envelope_done(&sp->env);
    cma_buf_done(&sp->scratch);
    free(sp->entries);
    free(sp->views);
    free(sp);
}

size_t cma_series_parser_count(const struct cma_series_parser *sp)
{
    return sp ? sp->count : 0;
}

size_t cma_series_parser_skipped(const struct cma_series_parser *sp)
{
    return sp ? sp->skipped : 0;
}

enum cma_errc cma_series_parser_feed(struct cma_series_parser *sp, const char *data, size_t len,
                                     struct cma_err *reterr)
{
    return cma_prom_envelope_feed(&sp->env, data, len, reterr);
}

enum cma_errc cma_series_parser_finish(struct cma_series_parser *sp, struct cma_err *reterr)
{
    enum cma_errc rc = cma_prom_envelope_complete(&sp->env, reterr);
    if (rc == CMA_OK)
        rc = cma_prom_envelope_judge(&sp->env, reterr);
    if (rc == CMA_OK && sp->data != D_ARRAY)
        rc = cma_err_set(reterr, CMA_ERR_BACKEND_RESPONSE, "no metrics retrieved");
    return rc;
}
