/* query_stream.c: the streaming decoder of Prometheus /api/v1/query answers (yajl 2), fed chunk
 * by chunk from the curl write callback; it keeps only the series its caller needs and charges
 * what it keeps to a byte budget shared by concurrent queries.
 *
 * DESIGN: memory follows the kept samples, not the answer. The decoder is a state machine over
 * yajl events: TOP → ROOT (the answer object) → DATA (the data object) → RESULT (the result
 * array) → ITEM (one series object) → METRIC (its labels) / POINT ([time, "value"]) / VALUES
 * (a matrix series' points). A series object's label names and values are copied into one
 * reusable scratch buffer (ceiling 1 MiB, at most 1,000 labels), its point is decoded at once
 * (a matrix keeps its last point, each one checked); at the object's end the keep callback sees
 * the labels as views, and only a kept series is copied out: one allocation holding its sorted
 * label array and strings. Every allocation that stays (scratch, sample array, kept series) is
 * charged to the budget before it is made: a series that would take the request alone over the
 * budget's ceiling is CMA_ERR_TOO_LARGE, one that only finds the budget held by other requests
 * CMA_ERR_TOO_MANY_REQUESTS; either stops the transfer at once. Keys may come in any order:
 * status/errorType/error are remembered (bounded copies) and judged in finish(); resultType
 * normally precedes result (Prometheus, Thanos, Mimir and VictoriaMetrics all write it first),
 * and when it does not, the result's shape decides and finish() checks it against resultType.
 * Duplicate keys at the answer, data and series levels and duplicate label names are errors,
 * unknown keys are skipped (nesting capped at 64). yajl buffers a token that spans chunks; to
 * bound that buffer the input is fed in 64 KiB slices and 2 MiB without a JSON event is an
 * error. A decoder is used by one thread. */
#include "cma/prom.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <yajl/yajl_parse.h>

#include "cma/buf.h"
#include "internal.h"
#include "prom_envelope.h"

#define ITEM_MAX_BYTES ((size_t)1 << 20)
#define ITEM_MAX_LABELS 1000
#define BAD_JSON "unexpected JSON from prometheus: "
#define BUDGET_FLAG "--prometheus-max-bytes-in-flight"

enum where { W_TOP, W_ROOT, W_DATA, W_RESULT, W_ITEM, W_METRIC, W_POINT, W_VALUES, W_END };
enum root_key { RK_OTHER, RK_STATUS, RK_DATA, RK_ERROR_TYPE, RK_ERROR };
enum data_key { DK_OTHER, DK_RESULT_TYPE, DK_RESULT };
enum item_key { IK_OTHER, IK_METRIC, IK_VALUE, IK_VALUES, IK_HISTOGRAM };
/* What data.result holds: not yet known, series objects, or one [time, value] pair. */
enum shape { SHAPE_NONE, SHAPE_SERIES, SHAPE_POINT };
/* Which point is being read: an item's value, a values[] element, data.result itself. */
enum point_of { PT_VALUE, PT_VALUES, PT_RESULT };

struct entry {
    size_t name_off, name_len, value_off, value_len;
};

struct point {
    unsigned n;    /* elements seen */
    bool string;   /* data.result of a string answer: any string is fine */
    bool unparsed; /* data.result before resultType: a value that is not a number, judged later */
    char text[68]; /* that value (bounded) for the message */
    int64_t ts_ms;
    double value;
};

struct cma_query_parser {
    struct cma_prom_envelope env; /* yajl, status/errorType/error, the first failure */
    cma_sample_keep_fn keep;
    void *keep_ctx;
    struct cma_prom_budget *budget;
    size_t charged_kept;    /* sample array and kept series: moves to the result */
    size_t charged_scratch; /* scratch, entries, views: released at finish/free */
    enum where where;
    enum root_key root_key;
    enum data_key data_key;
    enum item_key item_key;
    unsigned seen_root, seen_data; /* bit sets of the keys met, for duplicates */
    /* data */
    bool have_data, have_result;
    bool have_type;
    enum cma_prom_result_type type;
    enum shape shape;
    size_t missing_value_at, missing_values_at; /* first index + 1 (0 = none), shape decided late */
    /* the series object being read */
    size_t index; /* position of the current object in data.result */
    unsigned seen_item;
    bool item_has_histogram;
    struct cma_buf scratch;
    struct entry *entries;
    struct cma_label_view *views;
    size_t n_entries, cap_entries;
    struct point pt;
    enum point_of pt_of;
    size_t n_points; /* points of the current values array */
    struct cma_sample cur;
    bool cur_has_point;
    /* the result */
    struct cma_sample *samples;
    size_t n_samples, cap_samples;
    size_t seen;
};

/* ---- the budget -------------------------------------------------------------------------- */

/* Charges n bytes to the budget for this decoder; fails the decoder when they do not fit. */
static bool charge(struct cma_query_parser *qp, size_t n, bool kept)
{
    struct cma_prom_budget *b = qp->budget;
    size_t mine = qp->charged_kept + qp->charged_scratch;
    if (b && b->max && (n > b->max || mine > b->max - n)) {
        cma_prom_envelope_fail(
            &qp->env, CMA_ERR_TOO_LARGE,
            "the series this request needs from the prometheus answer take over %zu bytes "
            "(" BUDGET_FLAG "); narrow the query or the selector, or raise the flag",
            b->max);
        return false;
    }
    if (b) {
        size_t used = atomic_load(&b->used);
        do {
            if (b->max && (used > b->max || n > b->max - used)) {
                cma_prom_envelope_fail(
                    &qp->env, CMA_ERR_TOO_MANY_REQUESTS,
                    "prometheus answers being decoded hold %zu of %zu bytes (" BUDGET_FLAG
                    "); this one needs %zu more: retry shortly",
                    used, b->max, n);
                return false;
            }
        } while (!atomic_compare_exchange_weak(&b->used, &used, used + n));
    }
    if (kept)
        qp->charged_kept += n;
    else
        qp->charged_scratch += n;
    return true;
}

static void release(struct cma_prom_budget *b, size_t n)
{
    if (b && n)
        atomic_fetch_sub(&b->used, n);
}

/* Charges the growth of the scratch buffer since the last call. */
static bool charge_scratch(struct cma_query_parser *qp)
{
    size_t total = qp->scratch.cap + qp->cap_entries * (sizeof(*qp->entries) + sizeof(*qp->views));
    return total <= qp->charged_scratch || charge(qp, total - qp->charged_scratch, false);
}

/* ---- values ------------------------------------------------------------------------------ */

/* The common short form `-?digits(.digits)?` with at most 15 digits in all, as an integer
 * mantissa and a count of decimals; false for anything else (exponents, "NaN", "+Inf", hex,
 * "1.", ".5", longer numbers), which the callers leave to strtod. */
static bool short_decimal(const char *s, size_t len, uint64_t *ret_mant, unsigned *ret_decimals,
                          bool *ret_neg)
{
    size_t i = 0;
    bool neg = len > 0 && s[0] == '-';
    i += neg;
    uint64_t mant = 0;
    unsigned digits = 0, decimals = 0;
    bool dot = false;
    for (; i < len; i++) {
        char c = s[i];
        if (c == '.' && !dot && digits > 0 && i + 1 < len) {
            dot = true;
            continue;
        }
        if (c < '0' || c > '9' || ++digits > 15)
            return false;
        mant = mant * 10 + (uint64_t)(c - '0');
        decimals += dot;
    }
    if (digits == 0)
        return false;
    *ret_mant = mant;
    *ret_decimals = decimals;
    *ret_neg = neg;
    return true;
}

/* Parses a sample value string as Prometheus writes it ("NaN", "+Inf", "1e+06"). A short
 * decimal is mantissa / 10^decimals: both exact in a double (< 2^53, <= 10^15), so the one
 * IEEE division is correctly rounded, the same double strtod gives, at a tenth of the cost
 * (query_stream_test compares the two). */
static bool parse_value(const char *s, size_t len, double *ret)
{
    static const double pow10[] = {1e0, 1e1, 1e2,  1e3,  1e4,  1e5,  1e6,  1e7,
                                   1e8, 1e9, 1e10, 1e11, 1e12, 1e13, 1e14, 1e15};
    uint64_t mant;
    unsigned decimals;
    bool neg;
    if (short_decimal(s, len, &mant, &decimals, &neg)) {
        double v = (double)mant / pow10[decimals];
        *ret = neg ? -v : v;
        return true;
    }
    char buf[128];
    if (len == 0 || len >= sizeof(buf) || memchr(s, '\0', len))
        return false;
    memcpy(buf, s, len);
    buf[len] = '\0';
    if (strchr(" \t\n\r\v\f", buf[0]))
        return false;
    char *end = NULL;
    double v = strtod(buf, &end);
    if (end == buf || *end != '\0')
        return false;
    *ret = v;
    return true;
}

/* Float seconds (JSON number text) → int64 milliseconds, rounded to nearest. */
static bool parse_time(const char *s, size_t len, int64_t *ret)
{
    /* Prometheus writes milliseconds at most ("1785412800.123"): exact in integers, and equal
     * to the rounding below while |ms| <= 2^50 (its error stays under 0.25 ms there). */
    uint64_t mant;
    unsigned decimals;
    bool neg;
    if (short_decimal(s, len, &mant, &decimals, &neg) && decimals <= 3) {
        for (unsigned d = decimals; d < 3; d++)
            mant *= 10;
        if (mant <= (UINT64_C(1) << 50)) {
            *ret = neg ? -(int64_t)mant : (int64_t)mant;
            return true;
        }
    }
    char buf[64];
    if (len == 0 || len >= sizeof(buf))
        return false;
    memcpy(buf, s, len);
    buf[len] = '\0';
    double secs = strtod(buf, NULL);
    if (!isfinite(secs))
        return false;
    double ms = round(secs * 1000.0);
    if (ms < -9.2e18 || ms > 9.2e18)
        return false;
    *ret = (int64_t)ms;
    return true;
}

/* The JSON path of the point being read, for messages. */
static void point_where(const struct cma_query_parser *qp, char *out, size_t len)
{
    if (qp->pt_of == PT_VALUE)
        snprintf(out, len, "data.result[%zu].value", qp->index);
    else if (qp->pt_of == PT_VALUES)
        snprintf(out, len, "data.result[%zu].values[%zu]", qp->index, qp->n_points);
    else
        snprintf(out, len, "data.result");
}

static int fail_point(struct cma_query_parser *qp)
{
    char where[80];
    point_where(qp, where, sizeof(where));
    return cma_prom_envelope_fail(&qp->env, CMA_ERR_BACKEND_RESPONSE,
                                  BAD_JSON "%s is not a [time, \"%s\"] pair", where,
                                  qp->pt.string ? "string" : "value");
}

static int point_number(struct cma_query_parser *qp, const char *s, size_t len)
{
    if (qp->pt.n++ != 0)
        return fail_point(qp);
    if (parse_time(s, len, &qp->pt.ts_ms))
        return 1;
    char where[80];
    point_where(qp, where, sizeof(where));
    return cma_prom_envelope_fail(&qp->env, CMA_ERR_BACKEND_RESPONSE,
                                  BAD_JSON "%s has a timestamp out of range", where);
}

static int point_string(struct cma_query_parser *qp, const unsigned char *s, size_t len)
{
    if (qp->pt.n++ != 1)
        return fail_point(qp);
    if (qp->pt.string || parse_value((const char *)s, len, &qp->pt.value))
        return 1;
    if (qp->pt_of == PT_RESULT && !qp->have_type) { /* perhaps a string answer */
        qp->pt.unparsed = true;
        snprintf(qp->pt.text, sizeof(qp->pt.text), "%.*s", (int)(len > 64 ? 64 : len),
                 (const char *)s);
        return 1;
    }
    char where[80];
    point_where(qp, where, sizeof(where));
    return cma_prom_envelope_fail(&qp->env, CMA_ERR_BACKEND_RESPONSE,
                                  BAD_JSON "%s has value \"%.*s\", which is not a number", where,
                                  (int)(len > 64 ? 64 : len), (const char *)s);
}

static void point_start(struct cma_query_parser *qp, enum point_of of)
{
    qp->pt =
        (struct point){.string = of == PT_RESULT && qp->have_type && qp->type == CMA_PROM_STRING};
    qp->pt_of = of;
    qp->where = W_POINT;
}

/* ---- the result -------------------------------------------------------------------------- */

static bool grow_samples(struct cma_query_parser *qp)
{
    if (qp->n_samples < qp->cap_samples)
        return true;
    size_t cap = qp->cap_samples ? qp->cap_samples * 2 : 16;
    if (!charge(qp, (cap - qp->cap_samples) * sizeof(*qp->samples), true))
        return false;
    struct cma_sample *grown = realloc(qp->samples, cap * sizeof(*grown));
    if (!grown) {
        cma_prom_envelope_fail(&qp->env, CMA_ERR_NOMEM, "out of memory");
        return false;
    }
    qp->samples = grown;
    qp->cap_samples = cap;
    return true;
}

static int view_cmp(const void *a, const void *b)
{
    const struct cma_label_view *x = a, *y = b;
    return strcmp(x->name, y->name);
}

/* The current series' labels as views, sorted by name; fails on a repeated name. */
static bool sorted_views(struct cma_query_parser *qp)
{
    const char *base = qp->scratch.ptr;
    for (size_t i = 0; i < qp->n_entries; i++) {
        const struct entry *e = &qp->entries[i];
        qp->views[i] = (struct cma_label_view){base + e->name_off, e->name_len, base + e->value_off,
                                               e->value_len};
    }
    if (qp->n_entries > 1)
        qsort(qp->views, qp->n_entries, sizeof(*qp->views), view_cmp);
    for (size_t i = 1; i < qp->n_entries; i++)
        if (strcmp(qp->views[i - 1].name, qp->views[i].name) == 0) {
            cma_prom_envelope_fail(&qp->env, CMA_ERR_BACKEND_RESPONSE,
                                   BAD_JSON "data.result[%zu].metric.%.64s is repeated", qp->index,
                                   qp->views[i].name);
            return false;
        }
    return true;
}

/* Fills one block: the sorted label array, then its strings. */
static void copy_labels(const struct cma_query_parser *qp, struct cma_label *labels)
{
    char *strings = (char *)(labels + qp->n_entries);
    for (size_t i = 0; i < qp->n_entries; i++) {
        const struct cma_label_view *v = &qp->views[i];
        labels[i].name = memcpy(strings, v->name, v->name_len + 1);
        strings += v->name_len + 1;
        labels[i].value = memcpy(strings, v->value, v->value_len + 1);
        strings += v->value_len + 1;
    }
}

/* Copies a kept series out of the scratch: one block, label array then strings. */
static int store_series(struct cma_query_parser *qp)
{
    size_t bytes = qp->n_entries * sizeof(struct cma_label);
    for (size_t i = 0; i < qp->n_entries; i++)
        bytes += qp->views[i].name_len + qp->views[i].value_len + 2;
    if (!grow_samples(qp) || (bytes && !charge(qp, bytes, true)))
        return 0;
    struct cma_label *labels = NULL;
    if (qp->n_entries > 0) {
        labels = bytes ? malloc(bytes) : NULL; /* bytes > 0: each label takes at least 18 */
        if (!labels)
            return cma_prom_envelope_fail(&qp->env, CMA_ERR_NOMEM, "out of memory");
        copy_labels(qp, labels);
    }
    struct cma_sample *s = &qp->samples[qp->n_samples++];
    *s = qp->cur;
    s->labels = labels;
    s->n_labels = qp->n_entries;
    return 1;
}

/* The point of a scalar answer (data.result itself). */
static int store_scalar(struct cma_query_parser *qp)
{
    if (!grow_samples(qp))
        return 0;
    qp->samples[qp->n_samples++] = (struct cma_sample){
        .value = qp->pt.value,
        .timestamp_ms = qp->pt.ts_ms,
    };
    qp->seen++;
    return 1;
}

/* ---- series objects ---------------------------------------------------------------------- */

static const char *histogram_note(const struct cma_query_parser *qp)
{
    return qp->item_has_histogram ? " (native histograms are not supported)" : "";
}

/* What the series object must carry: a value (vector), values (matrix), or one of them while
 * resultType is unknown. */
static int check_item_point(struct cma_query_parser *qp)
{
    bool has_value = qp->seen_item & (1u << IK_VALUE);
    bool has_values = qp->seen_item & (1u << IK_VALUES);
    bool matrix = qp->have_type && qp->type == CMA_PROM_MATRIX;
    if (matrix && !has_values)
        return cma_prom_envelope_fail(&qp->env, CMA_ERR_BACKEND_RESPONSE,
                                      BAD_JSON "data.result[%zu].values is not an array%s",
                                      qp->index, histogram_note(qp));
    if (!matrix && !has_value && (qp->have_type || !has_values))
        return cma_prom_envelope_fail(&qp->env, CMA_ERR_BACKEND_RESPONSE,
                                      BAD_JSON "data.result[%zu].value is missing%s", qp->index,
                                      histogram_note(qp));
    if (!qp->have_type && has_value && has_values)
        return cma_prom_envelope_fail(&qp->env, CMA_ERR_BACKEND_RESPONSE,
                                      BAD_JSON "data.result[%zu] has both value and values",
                                      qp->index);
    if (!qp->have_type && !has_value && !qp->missing_value_at)
        qp->missing_value_at = qp->index + 1;
    if (!qp->have_type && !has_values && !qp->missing_values_at)
        qp->missing_values_at = qp->index + 1;
    if (has_values && qp->n_points == 0 && (matrix || !qp->have_type))
        return cma_prom_envelope_fail(&qp->env, CMA_ERR_BACKEND_RESPONSE,
                                      BAD_JSON "data.result[%zu].values is empty", qp->index);
    return 1;
}

/* End of one series object: check it, ask the caller, keep it or drop it. */
static int end_item(struct cma_query_parser *qp)
{
    qp->seen++;
    if (!(qp->seen_item & (1u << IK_METRIC)))
        return cma_prom_envelope_fail(&qp->env, CMA_ERR_BACKEND_RESPONSE,
                                      BAD_JSON "data.result[%zu] has no metric", qp->index);
    if (!check_item_point(qp) || !sorted_views(qp))
        return 0;
    int ok = 1;
    if (!qp->keep || qp->keep(qp->keep_ctx, qp->views, qp->n_entries))
        ok = store_series(qp);
    qp->index++;
    return ok;
}

static void start_item(struct cma_query_parser *qp)
{
    qp->where = W_ITEM;
    qp->seen_item = 0;
    qp->item_has_histogram = false;
    qp->n_entries = 0;
    qp->n_points = 0;
    qp->cur = (struct cma_sample){0};
    cma_buf_clear(&qp->scratch);
}

static bool grow_entries(struct cma_query_parser *qp)
{
    if (qp->n_entries < qp->cap_entries)
        return true;
    size_t cap = qp->cap_entries ? qp->cap_entries * 2 : 16;
    if (cap > ITEM_MAX_LABELS)
        cap = ITEM_MAX_LABELS;
    struct entry *e = realloc(qp->entries, cap * sizeof(*e));
    if (e)
        qp->entries = e;
    struct cma_label_view *v = e ? realloc(qp->views, cap * sizeof(*v)) : NULL;
    if (v)
        qp->views = v;
    if (!e || !v) {
        cma_prom_envelope_fail(&qp->env, CMA_ERR_NOMEM, "out of memory");
        return false;
    }
    qp->cap_entries = cap;
    return charge_scratch(qp);
}

static int scratch_fail(struct cma_query_parser *qp, enum cma_errc rc)
{
    if (rc == CMA_ERR_NOMEM)
        return cma_prom_envelope_fail(&qp->env, CMA_ERR_NOMEM, "out of memory");
    return cma_prom_envelope_fail(&qp->env, CMA_ERR_BACKEND_RESPONSE,
                                  BAD_JSON "data.result[%zu] is over %zu bytes", qp->index,
                                  ITEM_MAX_BYTES);
}

/* Appends s and a NUL to the scratch; returns the offset or SIZE_MAX (decoder failed). */
static size_t scratch_add(struct cma_query_parser *qp, const unsigned char *s, size_t len)
{
    size_t off = qp->scratch.len;
    enum cma_errc rc = cma_buf_append(&qp->scratch, s, len);
    if (rc == CMA_OK)
        rc = cma_buf_appendc(&qp->scratch, '\0');
    if (rc != CMA_OK) {
        scratch_fail(qp, rc);
        return SIZE_MAX;
    }
    return charge_scratch(qp) ? off : SIZE_MAX;
}

static int metric_key(struct cma_query_parser *qp, const unsigned char *s, size_t len)
{
    if (qp->n_entries >= ITEM_MAX_LABELS)
        return cma_prom_envelope_fail(&qp->env, CMA_ERR_BACKEND_RESPONSE,
                                      BAD_JSON "data.result[%zu] has over %d labels", qp->index,
                                      ITEM_MAX_LABELS);
    if (memchr(s, '\0', len))
        return cma_prom_envelope_fail(&qp->env, CMA_ERR_BACKEND_RESPONSE,
                                      BAD_JSON "data.result[%zu] has a label name with a NUL byte",
                                      qp->index);
    if (!grow_entries(qp))
        return 0;
    size_t off = scratch_add(qp, s, len);
    if (off == SIZE_MAX)
        return 0;
    qp->entries[qp->n_entries++] = (struct entry){.name_off = off, .name_len = len};
    return 1;
}

static int metric_value(struct cma_query_parser *qp, const unsigned char *s, size_t len)
{
    if (memchr(s, '\0', len))
        return cma_prom_envelope_fail(&qp->env, CMA_ERR_BACKEND_RESPONSE,
                                      BAD_JSON "data.result[%zu] has a label value with a NUL byte",
                                      qp->index);
    size_t off = scratch_add(qp, s, len);
    if (off == SIZE_MAX)
        return 0;
    struct entry *e = &qp->entries[qp->n_entries - 1];
    e->value_off = off;
    e->value_len = len;
    return 1;
}

static int fail_metric_not_string(struct cma_query_parser *qp)
{
    const struct entry *e = &qp->entries[qp->n_entries - 1];
    return cma_prom_envelope_fail(
        &qp->env, CMA_ERR_BACKEND_RESPONSE, BAD_JSON "data.result[%zu].metric.%.*s is not a string",
        qp->index, (int)(e->name_len > 64 ? 64 : e->name_len), qp->scratch.ptr + e->name_off);
}

/* ---- keys and top-level values ---------------------------------------------------------- */

static int fail_result_shape(struct cma_query_parser *qp)
{
    if (qp->have_type && (qp->type == CMA_PROM_SCALAR || qp->type == CMA_PROM_STRING))
        return cma_prom_envelope_fail(&qp->env, CMA_ERR_BACKEND_RESPONSE,
                                      BAD_JSON "data.result is not a [time, \"%s\"] pair",
                                      qp->type == CMA_PROM_STRING ? "string" : "value");
    return cma_prom_envelope_fail(&qp->env, CMA_ERR_BACKEND_RESPONSE,
                                  BAD_JSON "data.result is not an array");
}

static void set_result_type(struct cma_query_parser *qp, const unsigned char *s, size_t len)
{
    static const struct {
        const char *name;
        enum cma_prom_result_type type;
    } types[] = {{"vector", CMA_PROM_VECTOR},
                 {"matrix", CMA_PROM_MATRIX},
                 {"scalar", CMA_PROM_SCALAR},
                 {"string", CMA_PROM_STRING}};
    for (size_t i = 0; i < sizeof(types) / sizeof(types[0]); i++)
        if (len == strlen(types[i].name) && memcmp(s, types[i].name, len) == 0) {
            qp->type = types[i].type;
            qp->have_type = true;
            return;
        }
    cma_prom_envelope_fail(&qp->env, CMA_ERR_BACKEND_RESPONSE,
                           BAD_JSON
                           "data.resultType \"%.*s\" is not vector, scalar, matrix or string",
                           (int)(len > 64 ? 64 : len), (const char *)s);
}

/* status, errorType or error: a bounded copy. */
static int root_string(struct cma_query_parser *qp, const unsigned char *s, size_t len)
{
    const char *key = qp->root_key == RK_STATUS       ? "status"
                      : qp->root_key == RK_ERROR_TYPE ? "errorType"
                                                      : "error";
    cma_prom_envelope_string(&qp->env, key, s, len);
    return 1;
}

/* ---- yajl events ------------------------------------------------------------------------- */

/* What kind of value begins. */
static int skip(struct cma_query_parser *qp, enum cma_json_kind k)
{
    return cma_prom_envelope_skip(&qp->env, k);
}

static int begin_in_root(struct cma_query_parser *qp, enum cma_json_kind k, const unsigned char *s,
                         size_t len)
{
    switch (qp->root_key) {
    case RK_DATA:
        if (k != CMA_JSON_MAP)
            return cma_prom_envelope_fail(&qp->env, CMA_ERR_BACKEND_RESPONSE,
                                          BAD_JSON "data is not an object");
        qp->have_data = true;
        qp->where = W_DATA;
        return 1;
    case RK_STATUS:
        if (k != CMA_JSON_STRING) {
            qp->env.status_bad = true;
            return skip(qp, k);
        }
        return root_string(qp, s, len);
    case RK_ERROR_TYPE:
    case RK_ERROR:
        return k == CMA_JSON_STRING ? root_string(qp, s, len) : skip(qp, k);
    case RK_OTHER:
        break;
    }
    return skip(qp, k);
}

static int fail_not_object(struct cma_query_parser *qp)
{
    return cma_prom_envelope_fail(&qp->env, CMA_ERR_BACKEND_RESPONSE,
                                  BAD_JSON "data.result[%zu] is not an object", qp->index);
}

static bool type_is_point(const struct cma_query_parser *qp)
{
    return qp->have_type && (qp->type == CMA_PROM_SCALAR || qp->type == CMA_PROM_STRING);
}

static int begin_in_data(struct cma_query_parser *qp, enum cma_json_kind k, const unsigned char *s,
                         size_t len)
{
    if (qp->data_key == DK_RESULT_TYPE) {
        if (k != CMA_JSON_STRING)
            return cma_prom_envelope_fail(&qp->env, CMA_ERR_BACKEND_RESPONSE,
                                          BAD_JSON "data.resultType is missing or not a string");
        set_result_type(qp, s, len);
        return qp->env.failed ? 0 : 1;
    }
    if (qp->data_key == DK_OTHER)
        return skip(qp, k);
    if (k != CMA_JSON_ARRAY)
        return fail_result_shape(qp);
    qp->have_result = true;
    if (type_is_point(qp)) {
        qp->shape = SHAPE_POINT;
        point_start(qp, PT_RESULT);
    } else {
        qp->where = W_RESULT;
    }
    return 1;
}

/* An element of data.result (series objects, or the first element of a point while resultType
 * is still unknown). */
static int begin_in_result(struct cma_query_parser *qp, enum cma_json_kind k,
                           const unsigned char *s, size_t len)
{
    if (qp->shape == SHAPE_NONE && !qp->have_type &&
        (k == CMA_JSON_NUMBER || k == CMA_JSON_STRING)) {
        qp->shape = SHAPE_POINT;
        point_start(qp, PT_RESULT);
        return k == CMA_JSON_NUMBER ? point_number(qp, (const char *)s, len)
                                    : point_string(qp, s, len);
    }
    if (k != CMA_JSON_MAP)
        return fail_not_object(qp);
    qp->shape = SHAPE_SERIES;
    start_item(qp);
    return 1;
}

static int begin_in_item(struct cma_query_parser *qp, enum cma_json_kind k)
{
    bool matrix = qp->have_type && qp->type == CMA_PROM_MATRIX;
    bool vector = qp->have_type && qp->type == CMA_PROM_VECTOR;
    switch (qp->item_key) {
    case IK_METRIC:
        if (k != CMA_JSON_MAP)
            return cma_prom_envelope_fail(&qp->env, CMA_ERR_BACKEND_RESPONSE,
                                          BAD_JSON "data.result[%zu].metric is not an object",
                                          qp->index);
        qp->where = W_METRIC;
        return 1;
    case IK_VALUE:
        if (matrix)
            return skip(qp, k);
        if (k != CMA_JSON_ARRAY)
            return cma_prom_envelope_fail(
                &qp->env, CMA_ERR_BACKEND_RESPONSE,
                BAD_JSON "data.result[%zu].value is not a [time, \"value\"] pair", qp->index);
        point_start(qp, PT_VALUE);
        return 1;
    case IK_VALUES:
        if (vector)
            return skip(qp, k);
        if (k != CMA_JSON_ARRAY)
            return cma_prom_envelope_fail(&qp->env, CMA_ERR_BACKEND_RESPONSE,
                                          BAD_JSON "data.result[%zu].values is not an array",
                                          qp->index);
        qp->where = W_VALUES;
        return 1;
    case IK_HISTOGRAM:
    case IK_OTHER:
        break;
    }
    return skip(qp, k);
}

/* A value begins (scalar or container); s/len hold a scalar's text. */
static int begin_value(void *ctx, enum cma_json_kind k, const unsigned char *s, size_t len)
{
    struct cma_query_parser *qp = ctx;
    switch (qp->where) {
    case W_TOP:
        if (k != CMA_JSON_MAP)
            return cma_prom_envelope_fail(&qp->env, CMA_ERR_BACKEND_RESPONSE,
                                          BAD_JSON "the answer is not an object");
        qp->where = W_ROOT;
        return 1;
    case W_ROOT:
        return begin_in_root(qp, k, s, len);
    case W_DATA:
        return begin_in_data(qp, k, s, len);
    case W_RESULT:
        return begin_in_result(qp, k, s, len);
    case W_ITEM:
        return begin_in_item(qp, k);
    case W_METRIC:
        return k == CMA_JSON_STRING ? metric_value(qp, s, len) : fail_metric_not_string(qp);
    case W_VALUES:
        if (k != CMA_JSON_ARRAY)
            return cma_prom_envelope_fail(
                &qp->env, CMA_ERR_BACKEND_RESPONSE,
                BAD_JSON "data.result[%zu].values[%zu] is not a [time, \"value\"] pair", qp->index,
                qp->n_points);
        point_start(qp, PT_VALUES);
        return 1;
    case W_POINT:
        if (k == CMA_JSON_NUMBER)
            return point_number(qp, (const char *)s, len);
        return k == CMA_JSON_STRING ? point_string(qp, s, len) : fail_point(qp);
    case W_END:
        break;
    }
    return cma_prom_envelope_fail(&qp->env, CMA_ERR_BACKEND_RESPONSE,
                                  BAD_JSON "a value after the end of the answer");
}

/* Marks key bit `bit` in *seen; fails on a repeat. */
static int mark_key(struct cma_query_parser *qp, unsigned *seen, unsigned bit, const char *where,
                    const unsigned char *s, size_t len)
{
    if (bit == 0)
        return 1;
    if (*seen & bit)
        return cma_prom_envelope_fail(&qp->env, CMA_ERR_BACKEND_RESPONSE,
                                      BAD_JSON "duplicate key \"%.*s\" in %s", (int)len,
                                      (const char *)s, where);
    *seen |= bit;
    return 1;
}

static bool key_is(const unsigned char *s, size_t len, const char *name)
{
    return len == strlen(name) && memcmp(s, name, len) == 0;
}

static int on_map_key(void *ctx, const unsigned char *s, size_t len)
{
    struct cma_query_parser *qp = ctx;
    switch (qp->where) {
    case W_ROOT:
        qp->root_key = key_is(s, len, "status")      ? RK_STATUS
                       : key_is(s, len, "data")      ? RK_DATA
                       : key_is(s, len, "errorType") ? RK_ERROR_TYPE
                       : key_is(s, len, "error")     ? RK_ERROR
                                                     : RK_OTHER;
        return mark_key(qp, &qp->seen_root, qp->root_key == RK_OTHER ? 0 : 1u << qp->root_key,
                        "the answer", s, len);
    case W_DATA:
        qp->data_key = key_is(s, len, "resultType") ? DK_RESULT_TYPE
                       : key_is(s, len, "result")   ? DK_RESULT
                                                    : DK_OTHER;
        return mark_key(qp, &qp->seen_data, qp->data_key == DK_OTHER ? 0 : 1u << qp->data_key,
                        "data", s, len);
    case W_ITEM:
        qp->item_key = key_is(s, len, "metric")   ? IK_METRIC
                       : key_is(s, len, "value")  ? IK_VALUE
                       : key_is(s, len, "values") ? IK_VALUES
                       : (key_is(s, len, "histogram") || key_is(s, len, "histograms"))
                           ? IK_HISTOGRAM
                           : IK_OTHER;
        qp->item_has_histogram |= qp->item_key == IK_HISTOGRAM;
        return mark_key(
            qp, &qp->seen_item,
            qp->item_key >= IK_HISTOGRAM || qp->item_key == IK_OTHER ? 0 : 1u << qp->item_key,
            "a data.result object", s, len);
    default: /* W_METRIC: the only other place yajl gives keys outside a skipped value */
        return metric_key(qp, s, len);
    }
}

/* The end of a [time, value] pair. */
static int end_point(struct cma_query_parser *qp)
{
    if (qp->pt.n != 2)
        return fail_point(qp);
    switch (qp->pt_of) {
    case PT_VALUE:
        qp->where = W_ITEM;
        break;
    case PT_VALUES:
        qp->n_points++;
        qp->where = W_VALUES;
        break;
    case PT_RESULT:
        qp->where = W_DATA;
        return qp->pt.string ? 1 : store_scalar(qp);
    }
    qp->cur.value = qp->pt.value;
    qp->cur.timestamp_ms = qp->pt.ts_ms;
    return 1;
}

static int end_map(struct cma_query_parser *qp)
{
    switch (qp->where) {
    case W_METRIC:
        qp->where = W_ITEM;
        return 1;
    case W_ITEM:
        qp->where = W_RESULT;
        return end_item(qp);
    case W_DATA:
        qp->where = W_ROOT;
        return 1;
    default: /* W_ROOT: yajl only calls end_map where a map is open */
        qp->where = W_END;
        return 1;
    }
}

static int end_array(struct cma_query_parser *qp)
{
    switch (qp->where) {
    case W_POINT:
        return end_point(qp);
    case W_VALUES:
        qp->where = W_ITEM;
        return 1;
    default: /* W_RESULT */
        qp->where = W_DATA;
        return 1;
    }
}

static int on_end(void *ctx, bool map)
{
    return map ? end_map(ctx) : end_array(ctx);
}

static const struct cma_prom_events events = {begin_value, on_map_key, on_end};

/* ---- the public face --------------------------------------------------------------------- */

enum cma_errc cma_query_parser_new(cma_sample_keep_fn keep, void *keep_ctx,
                                   struct cma_prom_budget *budget, struct cma_query_parser **ret)
{
    struct cma_query_parser *qp = calloc(1, sizeof(*qp));
    if (!qp)
        return CMA_ERR_NOMEM;
    qp->keep = keep;
    qp->keep_ctx = keep_ctx;
    qp->budget = budget;
    cma_buf_init(&qp->scratch, ITEM_MAX_BYTES);
    if (cma_prom_envelope_init(&qp->env, &events, qp, "query decoder", BAD_JSON) != CMA_OK) {
        free(qp);
        return CMA_ERR_NOMEM;
    }
    *ret = qp;
    return CMA_OK;
}

static void free_kept(struct cma_query_parser *qp)
{
    for (size_t i = 0; i < qp->n_samples; i++)
        free(qp->samples[i].labels);
    free(qp->samples);
    qp->samples = NULL;
    qp->n_samples = qp->cap_samples = 0;
    release(qp->budget, qp->charged_kept);
    qp->charged_kept = 0;
}

static void free_scratch(struct cma_query_parser *qp)
{
    cma_buf_done(&qp->scratch);
    free(qp->entries);
    free(qp->views);
    qp->entries = NULL;
    qp->views = NULL;
    qp->n_entries = qp->cap_entries = 0;
    release(qp->budget, qp->charged_scratch);
    qp->charged_scratch = 0;
}

void cma_query_parser_free(struct cma_query_parser *qp)
{
    if (!qp)
        return;
    cma_prom_envelope_done(&qp->env);
    free_kept(qp);
    free_scratch(qp);
    free(qp);
}

size_t cma_query_parser_seen(const struct cma_query_parser *qp)
{
    return qp ? qp->seen : 0;
}

enum cma_errc cma_query_parser_feed(struct cma_query_parser *qp, const char *data, size_t len,
                                    struct cma_err *reterr)
{
    return cma_prom_envelope_feed(&qp->env, data, len, reterr);
}

/* data.result against data.resultType once both are known (they may come in either order). */
static enum cma_errc check_shape(const struct cma_query_parser *qp, struct cma_err *reterr)
{
    bool point_type = type_is_point(qp);
    if (point_type && qp->shape != SHAPE_POINT)
        return cma_err_set(reterr, CMA_ERR_BACKEND_RESPONSE,
                           BAD_JSON "data.result is not a [time, \"%s\"] pair",
                           qp->type == CMA_PROM_STRING ? "string" : "value");
    if (!point_type && qp->shape == SHAPE_POINT)
        return cma_err_set(reterr, CMA_ERR_BACKEND_RESPONSE,
                           BAD_JSON "data.result[0] is not an object");
    if (qp->type == CMA_PROM_SCALAR && qp->pt.unparsed)
        return cma_err_set(reterr, CMA_ERR_BACKEND_RESPONSE,
                           BAD_JSON "data.result has value \"%s\", which is not a number",
                           qp->pt.text);
    if (qp->type == CMA_PROM_VECTOR && qp->missing_value_at)
        return cma_err_set(reterr, CMA_ERR_BACKEND_RESPONSE,
                           BAD_JSON "data.result[%zu].value is missing", qp->missing_value_at - 1);
    if (qp->type == CMA_PROM_MATRIX && qp->missing_values_at)
        return cma_err_set(reterr, CMA_ERR_BACKEND_RESPONSE,
                           BAD_JSON "data.result[%zu].values is not an array",
                           qp->missing_values_at - 1);
    return CMA_OK;
}

/* The verdict once the whole answer was read. */
static enum cma_errc judge(const struct cma_query_parser *qp, struct cma_err *reterr)
{
    enum cma_errc rc = cma_prom_envelope_judge(&qp->env, reterr);
    if (rc != CMA_OK)
        return rc;
    if (!qp->have_data)
        return cma_err_set(reterr, CMA_ERR_BACKEND_RESPONSE, BAD_JSON "data is missing");
    if (!qp->have_type)
        return cma_err_set(reterr, CMA_ERR_BACKEND_RESPONSE,
                           BAD_JSON "data.resultType is missing or not a string");
    if (!qp->have_result)
        return cma_err_set(reterr, CMA_ERR_BACKEND_RESPONSE, BAD_JSON "data.result is missing");
    return check_shape(qp, reterr);
}

/* Hands the kept samples (and their budget charge) to a new result. */
static enum cma_errc take_result(struct cma_query_parser *qp, struct cma_prom_result **ret,
                                 struct cma_err *reterr)
{
    struct cma_prom_result *r = calloc(1, sizeof(*r));
    if (!r)
        return cma_err_set(reterr, CMA_ERR_NOMEM, "out of memory");
    if (qp->type == CMA_PROM_STRING)
        free_kept(qp);
    r->type = qp->type;
    r->samples = qp->samples;
    r->n_samples = qp->n_samples;
    r->n_seen = qp->type == CMA_PROM_STRING ? 0 : qp->seen;
    r->budget = qp->budget;
    r->charged = qp->charged_kept;
    qp->samples = NULL;
    qp->n_samples = qp->cap_samples = 0;
    qp->charged_kept = 0;
    *ret = r;
    return CMA_OK;
}

enum cma_errc cma_query_parser_finish(struct cma_query_parser *qp, struct cma_prom_result **ret,
                                      struct cma_err *reterr)
{
    enum cma_errc rc = cma_prom_envelope_complete(&qp->env, reterr);
    if (rc != CMA_OK)
        return rc;
    free_scratch(qp);
    rc = judge(qp, reterr);
    if (rc != CMA_OK)
        return rc;
    return take_result(qp, ret, reterr);
}
