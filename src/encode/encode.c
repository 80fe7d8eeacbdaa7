/* encode.c: every JSON response body the adapter sends (MetricValueList v1beta1/v1beta2,
 * ExternalMetricValueList, PodMetrics/NodeMetrics and their lists, APIResourceList, APIGroup,
 * APIGroupList, Status, version.Info), appended as compact JSON plus "\n" to a caller-owned
 * cma_buf.
 *
 * DESIGN
 * - JSON is written by hand with a small sticky-error writer instead of building jansson trees:
 *   the shapes are fixed, key order must follow the Go structs exactly, and a tree costs one
 *   allocation per value (measured with -O2: 2,000 APIResourceList entries take about 0.5 ms by
 *   hand and about 7 ms through json_t + json_dump_callback). jansson is the tests' oracle.
 * - Strings are escaped as Go's encoding/json does: \" \\ \n \r \t \b \f, other control bytes as
 *   \u00XX, '<' '>' '&' as \u003c \u003e \u0026 (HTML-safe), U+2028/U+2029 escaped, and every
 *   byte that is not part of valid UTF-8 (overlong forms, surrogates, > U+10FFFF, truncated
 *   sequences) becomes \ufffd, one per bad byte. Output is therefore always valid UTF-8 JSON,
 *   whatever label values the backend returns.
 * - Go map fields (matchLabels, metricLabels) are written with keys in byte order, like Go.
 * - On failure nothing half-written is left: the buffer is cut back to its length on entry (or
 *   is empty when the buffer itself failed, see buf.h).
 * Pure; thread-safe (no shared state). */
#include "cma/encode.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cma/clock.h"
#include "cma/quantity.h"
#include "cma/selector.h"
#include "cma/str.h"
#include "cma/utf8.h"

/* Earliest and latest sample times printed: metav1.Time needs a 4-digit year. */
#define MIN_TIMESTAMP_MS INT64_C(-30610224000000) /* 1000-01-01T00:00:00Z */
#define MAX_TIMESTAMP_MS INT64_C(253402300799999) /* 9999-12-31T23:59:59.999Z */

/* Writer with a sticky error: after the first failure every call is a no-op. */
struct jw {
    struct cma_buf *out;
    size_t start_len; /* out->len on entry, restored on failure */
    enum cma_errc rc;
    /* The last timestamp written, by whole second: the samples of one answer usually share the
     * query's evaluation time, and formatting one costs ~1,700 instructions (gmtime + strftime). */
    int64_t ts_secs;
    bool ts_valid;
    char ts[21];
    size_t ts_len;
};

static void jw_init(struct jw *w, struct cma_buf *out)
{
    w->out = out;
    w->start_len = out->len;
    w->rc = CMA_OK;
    w->ts_valid = false;
}

/* Appends s[0..len). When the buffer has room the bytes are copied here (cma_buf's invariant
 * kept: a NUL after them); cma_buf_append grows it otherwise. Room implies len <= max, since
 * cma_buf never allocates more than max + 1 bytes. */
static void put(struct jw *w, const char *s, size_t len)
{
    if (w->rc != CMA_OK)
        return;
    struct cma_buf *b = w->out;
    if (b->ptr && b->cap - b->len > len) {
        memcpy(b->ptr + b->len, s, len);
        b->len += len;
        b->ptr[b->len] = '\0';
        return;
    }
    w->rc = cma_buf_append(b, s, len);
}

static void puts_(struct jw *w, const char *s)
{
    put(w, s, strlen(s));
}

static void put_i64(struct jw *w, int64_t v)
{
    char tmp[24];
    int n = snprintf(tmp, sizeof(tmp), "%" PRId64, v);
    put(w, tmp, (size_t)n);
}

/* Length of the valid UTF-8 sequence at s[0..len) (2-4), or 0 if the bytes there are not one
 * (c >= 0x80): base's decoder has Go's utf8.DecodeRune acceptance (no overlongs, no surrogates,
 * nothing > U+10FFFF) and gives width 1 for any invalid or truncated sequence. */
static size_t utf8_seq_len(const unsigned char *s, size_t len)
{
    size_t width = 0;
    cma_utf8_decode((const char *)s, len, &width);
    return width > 1 ? width : 0;
}

/* Bytes that never need escaping and are plain ASCII: 0x20-0x7f but '"', '\\', '<', '>', '&'
 * (a bit per byte below 0x80, two words: one test per byte in the loops below). */
#define BIT(c) ((uint64_t)1 << ((c)&63))
static const uint64_t plain_bits[2] = {
    UINT64_C(0xffffffff00000000) & ~(BIT('"') | BIT('&') | BIT('<') | BIT('>')),
    ~BIT('\\'),
};
#undef BIT

static bool is_plain(unsigned char c)
{
    return c < 0x80 && ((plain_bits[c >> 6] >> (c & 63)) & 1);
}

static void put_escaped(struct jw *w, const char *str, size_t len)
{
    static const char hex[] = "0123456789abcdef";
    const unsigned char *s = (const unsigned char *)str;
    size_t i = 0, run = 0;
    while (i < len) {
        unsigned char c = s[i];
        if (is_plain(c)) {
            i++;
            continue;
        }
        if (c >= 0x80) {
            size_t n = utf8_seq_len(s + i, len - i);
            /* U+2028 and U+2029 (E2 80 A8/A9) are escaped like Go does. */
            bool line_sep = n == 3 && c == 0xE2 && s[i + 1] == 0x80 && (s[i + 2] & 0xFE) == 0xA8;
            if (n && !line_sep) {
                i += n;
                continue;
            }
            put(w, str + run, i - run);
            if (line_sep) {
                puts_(w, s[i + 2] == 0xA8 ? "\\u2028" : "\\u2029");
                i += 3;
            } else {
                puts_(w, "\\ufffd");
                i++;
            }
            run = i;
            continue;
        }
        put(w, str + run, i - run);
        switch (c) {
        case '"':
            puts_(w, "\\\"");
            break;
        case '\\':
            puts_(w, "\\\\");
            break;
        case '\n':
            puts_(w, "\\n");
            break;
        case '\r':
            puts_(w, "\\r");
            break;
        case '\t':
            puts_(w, "\\t");
            break;
        case '\b':
            puts_(w, "\\b");
            break;
        case '\f':
            puts_(w, "\\f");
            break;
        default: { /* other control bytes and < > & */
            const char esc[6] = {'\\', 'u', '0', '0', hex[c >> 4], hex[c & 15]};
            put(w, esc, sizeof(esc));
            break;
        }
        }
        i++;
        run = i;
    }
    put(w, str + run, len - run);
}

/* A JSON string; NULL is written as "". A string of plain bytes only (names, label values as
 * a rule) is copied in one go when the buffer has room. */
static void put_str(struct jw *w, const char *str)
{
    const char *s = str ? str : "";
    size_t len = strlen(s), plain = 0;
    while (plain < len && is_plain((unsigned char)s[plain]))
        plain++;
    struct cma_buf *b = w->out;
    if (plain == len && w->rc == CMA_OK && b->ptr && b->cap - b->len > len + 2) {
        char *at = b->ptr + b->len;
        at[0] = '"';
        memcpy(at + 1, s, len);
        at[len + 1] = '"';
        at[len + 2] = '\0';
        b->len += len + 2;
        return;
    }
    put(w, "\"", 1);
    put_escaped(w, s, len);
    put(w, "\"", 1);
}

/* `"key":` for a key that needs no escaping; `comma` prefixes ",". */
static void put_key_text(struct jw *w, bool comma, const char *key)
{
    if (comma)
        put(w, ",", 1);
    put(w, "\"", 1);
    puts_(w, key);
    put(w, "\":", 2);
}

/* The same for a string literal, composed at compile time: one copy instead of four (the
 * field names are most of a MetricValueList's bytes). */
#define put_key(w, comma, lit)                                                                     \
    put_lit_key((w), (comma), ",\"" lit "\":", sizeof(",\"" lit "\":") - 1)
static void put_lit_key(struct jw *w, bool comma, const char *text, size_t len)
{
    put(w, comma ? text : text + 1, comma ? len : len - 1);
}

static bool is_empty(const char *s)
{
    return !s || !*s;
}

/* Finishes a document: "\n", and on failure cuts the buffer back to where it started. */
static enum cma_errc jw_finish(struct jw *w, struct cma_err *reterr)
{
    put(w, "\n", 1);
    if (w->rc == CMA_OK)
        return CMA_OK;
    if (w->out->ptr && w->out->len >= w->start_len) {
        w->out->len = w->start_len;
        w->out->ptr[w->start_len] = '\0';
    }
    if (w->rc == CMA_ERR_TOO_LARGE)
        return cma_err_set(reterr, w->rc, "response body is over its size limit of %zu bytes",
                           w->out->max);
    return cma_err_set(reterr, w->rc, "cannot encode the response body: %s",
                       cma_errc_meaning(w->rc));
}

static void put_quantity(struct jw *w, int64_t milli)
{
    char q[CMA_QUANTITY_MAX_LEN];
    size_t n = cma_quantity_format_milli(milli, CMA_QUANTITY_DECIMAL_SI, q);
    put(w, "\"", 1);
    put(w, q, n);
    put(w, "\"", 1);
}

static enum cma_errc check_timestamp(int64_t ms, struct cma_err *reterr)
{
    if (ms < MIN_TIMESTAMP_MS || ms > MAX_TIMESTAMP_MS)
        return cma_err_set(reterr, CMA_ERR_BACKEND_RESPONSE,
                           "sample timestamp %" PRId64 " ms is outside the years 1000-9999", ms);
    return CMA_OK;
}

static void put_timestamp(struct jw *w, int64_t ms)
{
    /* Floor division, as cma_clock_format_rfc3339 does: the printed second is the same. */
    int64_t secs = ms / 1000 - (ms % 1000 < 0 ? 1 : 0);
    if (!w->ts_valid || w->ts_secs != secs) {
        cma_clock_format_rfc3339(ms, w->ts);
        w->ts_len = strlen(w->ts);
        w->ts_secs = secs;
        w->ts_valid = true;
    }
    put(w, "\"", 1);
    put(w, w->ts, w->ts_len);
    put(w, "\"", 1);
}

/* ---- metav1.LabelSelector ---------------------------------------------------------------- */

struct eq_ref {
    const char *key;
    const char *value;
    size_t index; /* position in the selector: later wins for a repeated key, as in a Go map */
};

static int eq_ref_cmp(const void *a, const void *b)
{
    const struct eq_ref *x = a, *y = b;
    int c = strcmp(x->key, y->key);
    if (c)
        return c;
    return x->index < y->index ? -1 : x->index > y->index;
}

static const char *expression_operator(enum cma_selector_op op)
{
    switch (op) {
    case CMA_SEL_NEQ:
    case CMA_SEL_NOTIN:
        return "NotIn";
    case CMA_SEL_IN:
        return "In";
    case CMA_SEL_EXISTS:
        return "Exists";
    case CMA_SEL_NOT_EXISTS:
        return "DoesNotExist";
    default:
        return NULL;
    }
}

static void put_match_labels(struct jw *w, const struct eq_ref *eqs, size_t n_eq)
{
    put_key(w, false, "matchLabels");
    put(w, "{", 1);
    bool first = true;
    for (size_t i = 0; i < n_eq; i++) {
        if (i + 1 < n_eq && strcmp(eqs[i].key, eqs[i + 1].key) == 0)
            continue; /* a later requirement on the same key wins */
        if (!first)
            put(w, ",", 1);
        first = false;
        put_str(w, eqs[i].key);
        put(w, ":", 1);
        put_str(w, eqs[i].value);
    }
    put(w, "}", 1);
}

static void put_match_expressions(struct jw *w, bool comma, const struct cma_selector *sel)
{
    put_key(w, comma, "matchExpressions");
    put(w, "[", 1);
    bool first = true;
    for (size_t i = 0; i < sel->n_reqs; i++) {
        const struct cma_selector_req *r = &sel->reqs[i];
        if (r->op == CMA_SEL_EQ)
            continue;
        if (!first)
            put(w, ",", 1);
        first = false;
        put(w, "{", 1);
        put_key(w, false, "key");
        put_str(w, r->key);
        put_key(w, true, "operator");
        put_str(w, expression_operator(r->op));
        if (r->n_values > 0) {
            put_key(w, true, "values");
            put(w, "[", 1);
            for (size_t v = 0; v < r->n_values; v++) {
                if (v)
                    put(w, ",", 1);
                put_str(w, r->values[v]);
            }
            put(w, "]", 1);
        }
        put(w, "}", 1);
    }
    put(w, "]", 1);
}

/* Writes `null` or the LabelSelector JSON of sel into out (which starts empty). */
static enum cma_errc encode_label_selector(const struct cma_selector *sel, struct cma_buf *out,
                                           struct cma_err *reterr)
{
    struct jw w;
    jw_init(&w, out);
    if (!sel || sel->n_reqs == 0) {
        puts_(&w, "null");
        if (w.rc != CMA_OK)
            return cma_err_set(reterr, w.rc, "cannot encode the label selector: %s",
                               cma_errc_meaning(w.rc));
        return CMA_OK;
    }
    size_t n_eq = 0;
    for (size_t i = 0; i < sel->n_reqs; i++) {
        const struct cma_selector_req *r = &sel->reqs[i];
        const char *key = r->key ? r->key : "";
        if (r->op == CMA_SEL_GT || r->op == CMA_SEL_LT)
            return cma_err_set(reterr, CMA_ERR_BAD_SELECTOR,
                               "\"%s\" isn't supported in label selectors (requirement on \"%s\")",
                               r->op == CMA_SEL_GT ? "gt" : "lt", key);
        if (!expression_operator(r->op) && r->op != CMA_SEL_EQ)
            return cma_err_set(reterr, CMA_ERR_BAD_SELECTOR,
                               "requirement on \"%s\" has an unknown operator", key);
        if ((r->op == CMA_SEL_EQ || r->op == CMA_SEL_NEQ) && (r->n_values != 1 || !r->values))
            return cma_err_set(reterr, CMA_ERR_BAD_SELECTOR,
                               "requirement on \"%s\" must have exactly one value", key);
        if (r->n_values > 0 && !r->values)
            return cma_err_set(reterr, CMA_ERR_BAD_SELECTOR,
                               "requirement on \"%s\" has no value list", key);
        if (r->op == CMA_SEL_EQ)
            n_eq++;
    }
    size_t n_expr = sel->n_reqs - n_eq;
    struct eq_ref *eqs = NULL;
    if (n_eq) {
        eqs = calloc(n_eq, sizeof(*eqs));
        if (!eqs)
            return cma_err_set(reterr, CMA_ERR_NOMEM, "out of memory");
        size_t k = 0;
        for (size_t i = 0; i < sel->n_reqs; i++) {
            const struct cma_selector_req *r = &sel->reqs[i];
            if (r->op != CMA_SEL_EQ)
                continue;
            eqs[k].key = r->key ? r->key : "";
            eqs[k].value = r->values[0] ? r->values[0] : "";
            eqs[k].index = i;
            k++;
        }
        qsort(eqs, n_eq, sizeof(*eqs), eq_ref_cmp);
    }
    put(&w, "{", 1);
    if (n_eq)
        put_match_labels(&w, eqs, n_eq);
    if (n_expr)
        put_match_expressions(&w, n_eq > 0, sel);
    put(&w, "}", 1);
    free(eqs);
    if (w.rc != CMA_OK)
        return cma_err_set(reterr, w.rc, "cannot encode the label selector: %s",
                           cma_errc_meaning(w.rc));
    return CMA_OK;
}

/* ---- custom.metrics.k8s.io ---------------------------------------------------------------- */

static void put_described_object(struct jw *w, const struct cma_described_object *o)
{
    put_key(w, false, "describedObject");
    put(w, "{", 1);
    bool comma = false;
#define KEY(lit)                                                                                   \
    {                                                                                              \
        ",\"" lit "\":", sizeof(",\"" lit "\":") - 1                                               \
    }
    static const struct {
        const char *text; /* `,"key":` */
        size_t len;
    } keys[] = {KEY("kind"), KEY("namespace"), KEY("name"), KEY("apiVersion")};
#undef KEY
    const char *vals[] = {o->kind, o->namespace_, o->name, o->api_version};
    for (size_t i = 0; i < 4; i++) {
        if (is_empty(vals[i]))
            continue; /* every ObjectReference field is omitempty */
        put_lit_key(w, comma, keys[i].text, keys[i].len);
        put_str(w, vals[i]);
        comma = true;
    }
    put(w, "}", 1);
}

static void put_metric_value(struct jw *w, enum cma_custom_version version,
                             const struct cma_metric_value *m, const struct cma_buf *selector)
{
    put(w, "{", 1);
    put_described_object(w, &m->object);
    if (version == CMA_CUSTOM_V1BETA1) {
        put_key(w, true, "metricName");
        put_str(w, m->metric_name);
    } else {
        put_key(w, true, "metric");
        put(w, "{", 1);
        put_key(w, false, "name");
        put_str(w, m->metric_name);
        put_key(w, true, "selector");
        put(w, selector->ptr, selector->len);
        put(w, "}", 1);
    }
    put_key(w, true, "timestamp");
    put_timestamp(w, m->timestamp_ms);
    if (m->has_window) {
        put_key_text(w, true, version == CMA_CUSTOM_V1BETA1 ? "window" : "windowSeconds");
        put_i64(w, m->window_seconds);
    }
    put_key(w, true, "value");
    put_quantity(w, m->value_milli);
    if (version == CMA_CUSTOM_V1BETA1) {
        put_key(w, true, "selector");
        put(w, selector->ptr, selector->len);
    }
    put(w, "}", 1);
}

enum cma_errc cma_encode_metric_value_list(enum cma_custom_version version,
                                           const struct cma_metric_value *items, size_t n,
                                           const struct cma_selector *metric_selector,
                                           struct cma_buf *out, struct cma_err *reterr)
{
    if (version != CMA_CUSTOM_V1BETA1 && version != CMA_CUSTOM_V1BETA2)
        return cma_err_set(reterr, CMA_ERR_INTERNAL, "unknown custom metrics API version %d",
                           (int)version);
    if (n > 0 && !items)
        return cma_err_set(reterr, CMA_ERR_INTERNAL, "metric value list without items");
    for (size_t i = 0; i < n; i++)
        if (check_timestamp(items[i].timestamp_ms, reterr) != CMA_OK)
            return CMA_ERR_BACKEND_RESPONSE;
    struct cma_buf selector;
    cma_buf_init(&selector, out->max);
    enum cma_errc rc = encode_label_selector(metric_selector, &selector, reterr);
    if (rc != CMA_OK) {
        cma_buf_done(&selector);
        return rc;
    }
    struct jw w;
    jw_init(&w, out);
    puts_(&w, "{\"kind\":\"MetricValueList\",\"apiVersion\":\"custom.metrics.k8s.io/");
    puts_(&w, version == CMA_CUSTOM_V1BETA1 ? "v1beta1" : "v1beta2");
    puts_(&w, "\",\"metadata\":{},\"items\":[");
    for (size_t i = 0; i < n && w.rc == CMA_OK; i++) {
        if (i)
            put(&w, ",", 1);
        put_metric_value(&w, version, &items[i], &selector);
    }
    puts_(&w, "]}");
    cma_buf_done(&selector);
    return jw_finish(&w, reterr);
}

/* ---- external.metrics.k8s.io -------------------------------------------------------------- */

static int label_index_cmp(const void *a, const void *b, void *ctx)
{
    const char *const *names = ctx;
    size_t x = *(const size_t *)a, y = *(const size_t *)b;
    int c = strcmp(names[x] ? names[x] : "", names[y] ? names[y] : "");
    if (c)
        return c;
    return x < y ? -1 : x > y;
}

/* Sorts order[0..n) (label indexes) by name, then position; qsort_r keeps this reentrant. */
static void sort_labels(size_t *order, size_t n, const char *const *names)
{
    if (n == 0)
        return; /* order may be NULL */
    for (size_t i = 0; i < n; i++)
        order[i] = i;
    qsort_r(order, n, sizeof(*order), label_index_cmp, (void *)names);
}

static void put_external_value(struct jw *w, const struct cma_external_metric_value *m,
                               size_t *order)
{
    put(w, "{", 1);
    put_key(w, false, "metricName");
    put_str(w, m->metric_name);
    put_key(w, true, "metricLabels");
    put(w, "{", 1);
    sort_labels(order, m->n_labels, m->label_names);
    bool first = true;
    for (size_t k = 0; k < m->n_labels; k++) {
        size_t i = order[k];
        const char *name = m->label_names[i] ? m->label_names[i] : "";
        if (k + 1 < m->n_labels) {
            const char *next = m->label_names[order[k + 1]];
            if (strcmp(name, next ? next : "") == 0)
                continue; /* a repeated name keeps its last value, as a Go map would */
        }
        if (!first)
            put(w, ",", 1);
        first = false;
        put_str(w, name);
        put(w, ":", 1);
        put_str(w, m->label_values[i]);
    }
    put(w, "}", 1);
    put_key(w, true, "timestamp");
    put_timestamp(w, m->timestamp_ms);
    put_key(w, true, "value");
    put_quantity(w, m->value_milli);
    put(w, "}", 1);
}

enum cma_errc cma_encode_external_metric_value_list(const struct cma_external_metric_value *items,
                                                    size_t n, struct cma_buf *out,
                                                    struct cma_err *reterr)
{
    if (n > 0 && !items)
        return cma_err_set(reterr, CMA_ERR_INTERNAL, "external metric value list without items");
    size_t max_labels = 0;
    for (size_t i = 0; i < n; i++) {
        if (check_timestamp(items[i].timestamp_ms, reterr) != CMA_OK)
            return CMA_ERR_BACKEND_RESPONSE;
        if (items[i].n_labels > 0 && (!items[i].label_names || !items[i].label_values))
            return cma_err_set(reterr, CMA_ERR_INTERNAL, "external metric item %zu has no labels",
                               i);
        if (items[i].n_labels > max_labels)
            max_labels = items[i].n_labels;
    }
    size_t *order = NULL;
    if (max_labels) {
        order = calloc(max_labels, sizeof(*order));
        if (!order)
            return cma_err_set(reterr, CMA_ERR_NOMEM, "out of memory");
    }
    struct jw w;
    jw_init(&w, out);
    puts_(&w, "{\"kind\":\"ExternalMetricValueList\",\"apiVersion\":\"external.metrics.k8s.io/"
              "v1beta1\",\"metadata\":{},\"items\":[");
    for (size_t i = 0; i < n && w.rc == CMA_OK; i++) {
        if (i)
            put(&w, ",", 1);
        put_external_value(&w, &items[i], order);
    }
    puts_(&w, "]}");
    free(order);
    return jw_finish(&w, reterr);
}

/* ---- metrics.k8s.io ----------------------------------------------------------------------- */

static void put_quantity_fmt(struct jw *w, int64_t milli, enum cma_quantity_format format)
{
    char q[CMA_QUANTITY_MAX_LEN];
    size_t n = cma_quantity_format_milli(milli, format, q);
    put(w, "\"", 1);
    put(w, q, n);
    put(w, "\"", 1);
}

/* v1.ResourceList is a Go map: keys in byte order, so cpu before memory. */
static void put_usage(struct jw *w, const struct cma_resource_usage *u)
{
    put_key(w, false, "usage");
    puts_(w, "{\"cpu\":");
    put_quantity_fmt(w, u->cpu_milli, CMA_QUANTITY_DECIMAL_SI);
    puts_(w, ",\"memory\":");
    put_quantity_fmt(w, u->memory_milli, CMA_QUANTITY_BINARY_SI);
    put(w, "}", 1);
}

/* ObjectMeta in Go field order: name, namespace, creationTimestamp, labels. */
static void put_object_meta(struct jw *w, const struct cma_metrics_object_meta *m, size_t *order)
{
    put_key(w, false, "metadata");
    put(w, "{", 1);
    put_key(w, false, "name");
    put_str(w, m->name);
    if (!is_empty(m->namespace_)) {
        put_key(w, true, "namespace");
        put_str(w, m->namespace_);
    }
    put_key(w, true, "creationTimestamp");
    put_timestamp(w, m->creation_ms);
    if (m->n_labels > 0 && order) { /* order holds max n_labels (checked before writing) */
        put_key(w, true, "labels");
        put(w, "{", 1);
        sort_labels(order, m->n_labels, m->label_names);
        bool first = true;
        for (size_t k = 0; k < m->n_labels; k++) {
            size_t i = order[k];
            const char *name = m->label_names[i] ? m->label_names[i] : "";
            if (k + 1 < m->n_labels) {
                const char *next = m->label_names[order[k + 1]];
                if (strcmp(name, next ? next : "") == 0)
                    continue; /* a repeated name keeps its last value, as a Go map would */
            }
            if (!first)
                put(w, ",", 1);
            first = false;
            put_str(w, name);
            put(w, ":", 1);
            put_str(w, m->label_values[i]);
        }
        put(w, "}", 1);
    }
    put(w, "}", 1);
}

/* "timestamp" and "window" (metav1.Duration: Go's Duration.String()). */
static void put_time_window(struct jw *w, int64_t timestamp_ms, int64_t window_ms)
{
    char window[64];
    put_key(w, true, "timestamp");
    put_timestamp(w, timestamp_ms);
    put_key(w, true, "window");
    put_str(w, cma_duration_format(window_ms, window, sizeof(window)));
}

/* Checks what every metrics object needs before anything is written; sets *max_labels. */
static enum cma_errc check_meta(const struct cma_metrics_object_meta *m, int64_t timestamp_ms,
                                size_t *max_labels, struct cma_err *reterr)
{
    if (check_timestamp(timestamp_ms, reterr) != CMA_OK ||
        check_timestamp(m->creation_ms, reterr) != CMA_OK)
        return CMA_ERR_BACKEND_RESPONSE;
    if (m->n_labels > 0 && (!m->label_names || !m->label_values)) {
        cma_err_set(reterr, CMA_ERR_INTERNAL, "metrics object %s has no label arrays",
                    m->name ? m->name : "");
        return CMA_ERR_INTERNAL;
    }
    if (m->n_labels > *max_labels)
        *max_labels = m->n_labels;
    return CMA_OK;
}

static enum cma_errc alloc_order(size_t max_labels, size_t **ret, struct cma_err *reterr)
{
    *ret = NULL;
    if (max_labels && !(*ret = calloc(max_labels, sizeof(**ret)))) {
        cma_err_set(reterr, CMA_ERR_NOMEM, "out of memory");
        return CMA_ERR_NOMEM;
    }
    return CMA_OK;
}

static void put_pod_metrics_body(struct jw *w, const void *item, size_t *order)
{
    const struct cma_pod_metrics *p = item;
    put_object_meta(w, &p->meta, order);
    put_time_window(w, p->timestamp_ms, p->window_ms);
    put_key(w, true, "containers");
    put(w, "[", 1);
    for (size_t c = 0; c < p->n_containers; c++) {
        if (c)
            put(w, ",", 1);
        put(w, "{", 1);
        put_key(w, false, "name");
        put_str(w, p->containers[c].name);
        put(w, ",", 1);
        put_usage(w, &p->containers[c].usage);
        put(w, "}", 1);
    }
    put(w, "]", 1);
}

static enum cma_errc check_pods(const struct cma_pod_metrics *items, size_t n, size_t *max_labels,
                                struct cma_err *reterr)
{
    if (n > 0 && !items) {
        cma_err_set(reterr, CMA_ERR_INTERNAL, "pod metrics list without items");
        return CMA_ERR_INTERNAL;
    }
    for (size_t i = 0; i < n; i++) {
        enum cma_errc rc = check_meta(&items[i].meta, items[i].timestamp_ms, max_labels, reterr);
        if (rc != CMA_OK)
            return rc;
        if (items[i].n_containers > 0 && !items[i].containers) {
            cma_err_set(reterr, CMA_ERR_INTERNAL, "pod metrics item %zu has no containers", i);
            return CMA_ERR_INTERNAL;
        }
    }
    return CMA_OK;
}

/* One PodMetrics/NodeMetrics document (`single`) or its List: `body` writes one item's fields
 * (items are `size` bytes apart); the label order scratch fits the item with most labels. */
typedef void (*item_body_fn)(struct jw *w, const void *item, size_t *order);

static enum cma_errc encode_metrics_doc(const char *kind, const void *items, size_t n, size_t size,
                                        bool single, item_body_fn body, size_t max_labels,
                                        struct cma_buf *out, struct cma_err *reterr)
{
    size_t *order = NULL;
    enum cma_errc rc = alloc_order(max_labels, &order, reterr);
    if (rc != CMA_OK)
        return rc;
    const char *base = items;
    struct jw w;
    jw_init(&w, out);
    puts_(&w, "{\"kind\":\"");
    puts_(&w, kind);
    if (single) {
        puts_(&w, "\",\"apiVersion\":\"metrics.k8s.io/v1beta1\",");
        body(&w, base, order);
        put(&w, "}", 1);
    } else {
        puts_(&w, "List\",\"apiVersion\":\"metrics.k8s.io/v1beta1\",\"metadata\":{},\"items\":[");
        for (size_t i = 0; i < n && w.rc == CMA_OK; i++) {
            put(&w, i ? ",{" : "{", 1 + (i > 0));
            body(&w, base + i * size, order);
            put(&w, "}", 1);
        }
        puts_(&w, "]}");
    }
    free(order);
    return jw_finish(&w, reterr);
}

static enum cma_errc encode_pods(const struct cma_pod_metrics *items, size_t n, bool single,
                                 struct cma_buf *out, struct cma_err *reterr)
{
    size_t max_labels = 0;
    struct cma_err local;
    cma_err_clear(&local);
    enum cma_errc rc = check_pods(items, n, &max_labels, &local);
    if (rc != CMA_OK) {
        cma_err_copy(reterr, &local);
        return rc;
    }
    return encode_metrics_doc("PodMetrics", items, n, sizeof(*items), single, put_pod_metrics_body,
                              max_labels, out, reterr);
}

enum cma_errc cma_encode_pod_metrics_list(const struct cma_pod_metrics *items, size_t n,
                                          struct cma_buf *out, struct cma_err *reterr)
{
    return encode_pods(items, n, false, out, reterr);
}

enum cma_errc cma_encode_pod_metrics(const struct cma_pod_metrics *item, struct cma_buf *out,
                                     struct cma_err *reterr)
{
    if (!item)
        return cma_err_set(reterr, CMA_ERR_INTERNAL, "no pod metrics to encode");
    return encode_pods(item, 1, true, out, reterr);
}

static void put_node_metrics_body(struct jw *w, const void *item, size_t *order)
{
    const struct cma_node_metrics *m = item;
    put_object_meta(w, &m->meta, order);
    put_time_window(w, m->timestamp_ms, m->window_ms);
    put(w, ",", 1);
    put_usage(w, &m->usage);
}

static enum cma_errc encode_nodes(const struct cma_node_metrics *items, size_t n, bool single,
                                  struct cma_buf *out, struct cma_err *reterr)
{
    struct cma_err local;
    cma_err_clear(&local);
    enum cma_errc rc = CMA_OK;
    size_t max_labels = 0;
    if (n > 0 && !items) { /* rc set apart: the analyzer cannot see cma_err_set's result */
        cma_err_set(&local, CMA_ERR_INTERNAL, "node metrics list without items");
        rc = CMA_ERR_INTERNAL;
    }
    for (size_t i = 0; rc == CMA_OK && i < n; i++)
        rc = check_meta(&items[i].meta, items[i].timestamp_ms, &max_labels, &local);
    if (rc != CMA_OK) {
        cma_err_copy(reterr, &local);
        return rc;
    }
    return encode_metrics_doc("NodeMetrics", items, n, sizeof(*items), single,
                              put_node_metrics_body, max_labels, out, reterr);
}

enum cma_errc cma_encode_node_metrics_list(const struct cma_node_metrics *items, size_t n,
                                           struct cma_buf *out, struct cma_err *reterr)
{
    return encode_nodes(items, n, false, out, reterr);
}

enum cma_errc cma_encode_node_metrics(const struct cma_node_metrics *item, struct cma_buf *out,
                                      struct cma_err *reterr)
{
    if (!item)
        return cma_err_set(reterr, CMA_ERR_INTERNAL, "no node metrics to encode");
    return encode_nodes(item, 1, true, out, reterr);
}

/* ---- discovery ---------------------------------------------------------------------------- */

enum cma_errc cma_encode_api_resource_list(const char *group_version,
                                           const struct cma_resource_entry *entries, size_t n,
                                           struct cma_buf *out, struct cma_err *reterr)
{
    if (n > 0 && !entries)
        return cma_err_set(reterr, CMA_ERR_INTERNAL, "resource list without entries");
    struct jw w;
    jw_init(&w, out);
    puts_(&w, "{\"kind\":\"APIResourceList\",\"apiVersion\":\"v1\",\"groupVersion\":");
    put_str(&w, group_version);
    puts_(&w, ",\"resources\":[");
    for (size_t i = 0; i < n && w.rc == CMA_OK; i++) {
        const struct cma_resource_entry *e = &entries[i];
        if (i)
            put(&w, ",", 1);
        puts_(&w, "{\"name\":");
        put_str(&w, e->name);
        puts_(&w, e->namespaced ? ",\"singularName\":\"\",\"namespaced\":true,\"kind\":"
                                : ",\"singularName\":\"\",\"namespaced\":false,\"kind\":");
        put_str(&w, e->kind);
        puts_(&w, ",\"verbs\":[");
        for (size_t v = 0; v < e->n_verbs && e->verbs; v++) {
            if (v)
                put(&w, ",", 1);
            put_str(&w, e->verbs[v]);
        }
        puts_(&w, "]}");
    }
    puts_(&w, "]}");
    return jw_finish(&w, reterr);
}

static void put_group_version(struct jw *w, const char *group, const char *version)
{
    puts_(w, "{\"groupVersion\":\"");
    if (group)
        put_escaped(w, group, strlen(group));
    if (!is_empty(group) && !is_empty(version))
        put(w, "/", 1);
    if (version)
        put_escaped(w, version, strlen(version));
    puts_(w, "\",\"version\":");
    put_str(w, version);
    put(w, "}", 1);
}

/* APIGroup fields after the TypeMeta: name, versions, preferredVersion. */
static void put_group_body(struct jw *w, const struct cma_api_group_desc *g)
{
    put_key(w, false, "name");
    put_str(w, g->name);
    put_key(w, true, "versions");
    put(w, "[", 1);
    for (size_t v = 0; v < g->n_versions && g->versions; v++) {
        if (v)
            put(w, ",", 1);
        put_group_version(w, g->name, g->versions[v]);
    }
    put(w, "]", 1);
    put_key(w, true, "preferredVersion");
    if (g->n_versions > 0 && g->versions)
        put_group_version(w, g->name, g->versions[0]);
    else
        puts_(w, "{\"groupVersion\":\"\",\"version\":\"\"}");
}

enum cma_errc cma_encode_api_group(const struct cma_api_group_desc *group, struct cma_buf *out,
                                   struct cma_err *reterr)
{
    if (!group)
        return cma_err_set(reterr, CMA_ERR_INTERNAL, "no API group to encode");
    struct jw w;
    jw_init(&w, out);
    puts_(&w, "{\"kind\":\"APIGroup\",\"apiVersion\":\"v1\",");
    put_group_body(&w, group);
    put(&w, "}", 1);
    return jw_finish(&w, reterr);
}

enum cma_errc cma_encode_api_group_list(const struct cma_api_group_desc *groups, size_t n,
                                        struct cma_buf *out, struct cma_err *reterr)
{
    if (n > 0 && !groups)
        return cma_err_set(reterr, CMA_ERR_INTERNAL, "API group list without groups");
    struct jw w;
    jw_init(&w, out);
    puts_(&w, "{\"kind\":\"APIGroupList\",\"apiVersion\":\"v1\",\"groups\":[");
    for (size_t i = 0; i < n; i++) {
        if (i)
            put(&w, ",", 1);
        put(&w, "{", 1);
        put_group_body(&w, &groups[i]);
        put(&w, "}", 1);
    }
    puts_(&w, "]}");
    return jw_finish(&w, reterr);
}

/* ---- Status and version ------------------------------------------------------------------- */

enum cma_errc cma_encode_status(int code, const char *reason, const char *message,
                                struct cma_buf *out)
{
    struct jw w;
    jw_init(&w, out);
    puts_(&w, "{\"kind\":\"Status\",\"apiVersion\":\"v1\",\"metadata\":{},\"status\":\"Failure\"");
    if (!is_empty(message)) {
        put_key(&w, true, "message");
        put_str(&w, message);
    }
    if (!is_empty(reason)) {
        put_key(&w, true, "reason");
        put_str(&w, reason);
    }
    if (code != 0) {
        put_key(&w, true, "code");
        put_i64(&w, code);
    }
    put(&w, "}", 1);
    return jw_finish(&w, NULL);
}

enum cma_errc cma_encode_status_from_err(const struct cma_err *err, struct cma_buf *out)
{
    /* No error or CMA_OK here is a caller bug; it is still answered as an internal error. */
    enum cma_errc code = err && err->code != CMA_OK ? err->code : CMA_ERR_INTERNAL;
    if (code < 0 || code >= CMA_ERRC__COUNT)
        code = CMA_ERR_INTERNAL;
    const char *message = err && err->code != CMA_OK && err->msg[0] ? err->msg : NULL;
    if (!message)
        message = cma_errc_meaning(code);
    return cma_encode_status(cma_errc_http_status(code), cma_errc_reason(code), message, out);
}

/* Leading decimal number of s (after an optional 'v'), "" when there is none. */
static void version_part(const char **s, char *out, size_t out_len)
{
    size_t n = 0;
    while (**s >= '0' && **s <= '9' && n + 1 < out_len)
        out[n++] = *(*s)++;
    out[n] = '\0';
}

static const char *compiler_name(void)
{
#if defined(__clang__)
    return "clang";
#elif defined(__GNUC__)
    return "gcc";
#else
    return "cc";
#endif
}

static const char *platform_name(void)
{
#if defined(__x86_64__)
    return "linux/amd64";
#elif defined(__aarch64__)
    return "linux/arm64";
#elif defined(__i386__)
    return "linux/386";
#elif defined(__arm__)
    return "linux/arm";
#elif defined(__powerpc64__) && defined(__LITTLE_ENDIAN__)
    return "linux/ppc64le";
#elif defined(__s390x__)
    return "linux/s390x";
#else
    return "linux/unknown";
#endif
}

enum cma_errc cma_encode_version(const char *git_version, const char *git_commit,
                                 const char *build_date, struct cma_buf *out)
{
    /* major/minor come from git_version ("v0.1.0" → "0", "1"), as Go builds fill them from
     * the tag; goVersion stays empty (this is not a Go binary) and gitTreeState is unknown. */
    char major[16] = "", minor[16] = "";
    const char *p = git_version ? git_version : "";
    if (*p == 'v')
        p++;
    version_part(&p, major, sizeof(major));
    if (*major && *p == '.') {
        p++;
        version_part(&p, minor, sizeof(minor));
    }
    struct jw w;
    jw_init(&w, out);
    puts_(&w, "{\"major\":");
    put_str(&w, major);
    puts_(&w, ",\"minor\":");
    put_str(&w, minor);
    puts_(&w, ",\"gitVersion\":");
    put_str(&w, git_version);
    puts_(&w, ",\"gitCommit\":");
    put_str(&w, git_commit);
    puts_(&w, ",\"gitTreeState\":\"\",\"buildDate\":");
    put_str(&w, build_date);
    puts_(&w, ",\"goVersion\":\"\",\"compiler\":");
    put_str(&w, compiler_name());
    puts_(&w, ",\"platform\":");
    put_str(&w, platform_name());
    put(&w, "}", 1);
    return jw_finish(&w, NULL);
}
