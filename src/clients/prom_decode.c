/* prom_decode.c: strict decoding of Prometheus /api/v1/query answers (jansson) into
 * struct cma_prom_result, and the sample/result helpers of prom.h.
 *
 * DESIGN: the whole body is already in memory (prom.c caps it at max_response_bytes), so a DOM
 * parse is simplest. Every shape error names the JSON path that is wrong ("data.result[3].value
 * is not a [time, \"value\"] pair") and is CMA_ERR_BACKEND_RESPONSE; a `status: error` body is
 * CMA_ERR_BACKEND_ERROR "<errorType>: <error>" (timeout → BACKEND_TIMEOUT, unavailable →
 * BACKEND_UNAVAILABLE). Values keep NaN/±Inf as doubles; timestamps (float seconds) become
 * milliseconds rounded to the nearest. Nothing is invented: a missing value is an error. */
#include "cma/prom.h"

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cma/str.h"

#define BAD_JSON "unexpected JSON from prometheus: "

static void free_labels(struct cma_label *labels, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        free(labels[i].name);
        free(labels[i].value);
    }
    free(labels);
}

void cma_prom_result_free(struct cma_prom_result *r)
{
    if (!r)
        return;
    for (size_t i = 0; i < r->n_samples; i++)
        free_labels(r->samples[i].labels, r->samples[i].n_labels);
    free(r->samples);
    free(r);
}

const char *cma_sample_label(const struct cma_sample *s, const char *name)
{
    if (!s || !name)
        return NULL;
    size_t lo = 0, hi = s->n_labels;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        int c = strcmp(s->labels[mid].name, name);
        if (c == 0)
            return s->labels[mid].value;
        if (c < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return NULL;
}

/* Maps a Prometheus errorType to our code. */
static enum cma_errc error_type_code(const char *error_type)
{
    if (cma_str_eq(error_type, "timeout"))
        return CMA_ERR_BACKEND_TIMEOUT;
    if (cma_str_eq(error_type, "unavailable"))
        return CMA_ERR_BACKEND_UNAVAILABLE;
    return CMA_ERR_BACKEND_ERROR;
}

static enum cma_errc status_error(const json_t *root, struct cma_err *reterr)
{
    const char *type = json_string_value(json_object_get(root, "errorType"));
    const char *msg = json_string_value(json_object_get(root, "error"));
    enum cma_errc code = error_type_code(type);
    if (type && *type && msg && *msg)
        return cma_err_set(reterr, code, "%s: %s", type, msg);
    if (msg && *msg)
        return cma_err_set(reterr, code, "%s", msg);
    if (type && *type)
        return cma_err_set(reterr, code, "%s", type);
    return cma_err_set(reterr, code, "prometheus answered status \"error\" without a message");
}

/* Parses a sample value string as Prometheus writes it ("NaN", "+Inf", "1e+06"). */
static bool parse_value(const char *s, double *ret)
{
    if (!s || !*s || s[0] == ' ' || s[0] == '\t' || s[0] == '\n' || s[0] == '\r' || s[0] == '\v' ||
        s[0] == '\f')
        return false;
    char *end = NULL;
    double v = strtod(s, &end);
    if (end == s || *end != '\0')
        return false;
    *ret = v;
    return true;
}

/* Float seconds → int64 milliseconds, rounded to nearest; false when out of range. */
static bool seconds_to_ms(double secs, int64_t *ret)
{
    if (!isfinite(secs))
        return false;
    double ms = round(secs * 1000.0);
    if (ms < -9.2e18 || ms > 9.2e18)
        return false;
    *ret = (int64_t)ms;
    return true;
}

/* Decodes a [time, "value"] pair; `where` names it in errors. */
static enum cma_errc decode_point(const json_t *pair, struct cma_sample *s, const char *where,
                                  struct cma_err *reterr)
{
    if (!json_is_array(pair) || json_array_size(pair) != 2 ||
        !json_is_number(json_array_get(pair, 0)) || !json_is_string(json_array_get(pair, 1)))
        return cma_err_set(reterr, CMA_ERR_BACKEND_RESPONSE,
                           BAD_JSON "%s is not a [time, \"value\"] pair", where);
    if (!seconds_to_ms(json_number_value(json_array_get(pair, 0)), &s->timestamp_ms))
        return cma_err_set(reterr, CMA_ERR_BACKEND_RESPONSE,
                           BAD_JSON "%s has a timestamp out of range", where);
    const char *v = json_string_value(json_array_get(pair, 1));
    if (!parse_value(v, &s->value))
        return cma_err_set(reterr, CMA_ERR_BACKEND_RESPONSE,
                           BAD_JSON "%s has value \"%.64s\", which is not a number", where, v);
    return CMA_OK;
}

static int label_cmp(const void *a, const void *b)
{
    const struct cma_label *la = a, *lb = b;
    return strcmp(la->name, lb->name);
}

static enum cma_errc decode_metric(const json_t *metric, struct cma_sample *s, size_t index,
                                   struct cma_err *reterr)
{
    if (!json_is_object(metric))
        return cma_err_set(reterr, CMA_ERR_BACKEND_RESPONSE,
                           BAD_JSON "data.result[%zu].metric is not an object", index);
    size_t n = json_object_size(metric);
    if (n == 0)
        return CMA_OK;
    struct cma_label *labels = calloc(n, sizeof(*labels));
    if (!labels)
        return cma_err_set(reterr, CMA_ERR_NOMEM, "out of memory");
    size_t i = 0;
    const char *key;
    json_t *value;
    json_object_foreach((json_t *)metric, key, value)
    {
        if (i >= n)
            break;
        if (!json_is_string(value)) {
            free_labels(labels, i);
            return cma_err_set(reterr, CMA_ERR_BACKEND_RESPONSE,
                               BAD_JSON "data.result[%zu].metric.%.64s is not a string", index,
                               key);
        }
        labels[i].name = cma_strdup(key);
        labels[i].value = cma_strdup(json_string_value(value));
        i++;
        if (!labels[i - 1].name || !labels[i - 1].value) {
            free_labels(labels, i);
            return cma_err_set(reterr, CMA_ERR_NOMEM, "out of memory");
        }
    }
    qsort(labels, i, sizeof(*labels), label_cmp);
    s->labels = labels;
    s->n_labels = i;
    return CMA_OK;
}

static enum cma_errc decode_series_list(const json_t *result, bool matrix,
                                        struct cma_prom_result *r, struct cma_err *reterr)
{
    if (!json_is_array(result))
        return cma_err_set(reterr, CMA_ERR_BACKEND_RESPONSE,
                           BAD_JSON "data.result is not an array");
    size_t n = json_array_size(result);
    if (n == 0)
        return CMA_OK;
    r->samples = calloc(n, sizeof(*r->samples));
    if (!r->samples)
        return cma_err_set(reterr, CMA_ERR_NOMEM, "out of memory");
    for (size_t i = 0; i < n; i++) {
        const json_t *item = json_array_get(result, i);
        if (!json_is_object(item))
            return cma_err_set(reterr, CMA_ERR_BACKEND_RESPONSE,
                               BAD_JSON "data.result[%zu] is not an object", i);
        struct cma_sample *s = &r->samples[i];
        r->n_samples = i + 1;
        const json_t *metric = json_object_get(item, "metric");
        if (!metric)
            return cma_err_set(reterr, CMA_ERR_BACKEND_RESPONSE,
                               BAD_JSON "data.result[%zu] has no metric", i);
        enum cma_errc rc = decode_metric(metric, s, i, reterr);
        if (rc != CMA_OK)
            return rc;
        char where[64];
        if (!matrix) {
            const json_t *value = json_object_get(item, "value");
            snprintf(where, sizeof(where), "data.result[%zu].value", i);
            if (!value)
                return cma_err_set(
                    reterr, CMA_ERR_BACKEND_RESPONSE, BAD_JSON "%s is missing%s", where,
                    json_object_get(item, "histogram") ? " (native histograms are not supported)"
                                                       : "");
            rc = decode_point(value, s, where, reterr);
        } else {
            const json_t *values = json_object_get(item, "values");
            if (!json_is_array(values))
                return cma_err_set(reterr, CMA_ERR_BACKEND_RESPONSE,
                                   BAD_JSON "data.result[%zu].values is not an array%s", i,
                                   json_object_get(item, "histograms")
                                       ? " (native histograms are not supported)"
                                       : "");
            size_t np = json_array_size(values);
            if (np == 0)
                return cma_err_set(reterr, CMA_ERR_BACKEND_RESPONSE,
                                   BAD_JSON "data.result[%zu].values is empty", i);
            /* Every point is checked, the last one is kept. */
            for (size_t j = 0; j < np && rc == CMA_OK; j++) {
                snprintf(where, sizeof(where), "data.result[%zu].values[%zu]", i, j);
                rc = decode_point(json_array_get(values, j), s, where, reterr);
            }
        }
        if (rc != CMA_OK)
            return rc;
    }
    return CMA_OK;
}

static enum cma_errc decode_data(const json_t *data, struct cma_prom_result *r,
                                 struct cma_err *reterr)
{
    if (!json_is_object(data))
        return cma_err_set(reterr, CMA_ERR_BACKEND_RESPONSE, BAD_JSON "data is not an object");
    const char *type = json_string_value(json_object_get(data, "resultType"));
    if (!type)
        return cma_err_set(reterr, CMA_ERR_BACKEND_RESPONSE,
                           BAD_JSON "data.resultType is missing or not a string");
    const json_t *result = json_object_get(data, "result");
    if (!result)
        return cma_err_set(reterr, CMA_ERR_BACKEND_RESPONSE, BAD_JSON "data.result is missing");
    if (strcmp(type, "vector") == 0) {
        r->type = CMA_PROM_VECTOR;
        return decode_series_list(result, false, r, reterr);
    }
    if (strcmp(type, "matrix") == 0) {
        r->type = CMA_PROM_MATRIX;
        return decode_series_list(result, true, r, reterr);
    }
    if (strcmp(type, "scalar") == 0) {
        r->type = CMA_PROM_SCALAR;
        r->samples = calloc(1, sizeof(*r->samples));
        if (!r->samples)
            return cma_err_set(reterr, CMA_ERR_NOMEM, "out of memory");
        r->n_samples = 1;
        return decode_point(result, &r->samples[0], "data.result", reterr);
    }
    if (strcmp(type, "string") == 0) {
        r->type = CMA_PROM_STRING;
        if (!json_is_array(result) || json_array_size(result) != 2 ||
            !json_is_number(json_array_get(result, 0)) ||
            !json_is_string(json_array_get(result, 1)))
            return cma_err_set(reterr, CMA_ERR_BACKEND_RESPONSE,
                               BAD_JSON "data.result is not a [time, \"string\"] pair");
        return CMA_OK;
    }
    return cma_err_set(reterr, CMA_ERR_BACKEND_RESPONSE,
                       BAD_JSON "data.resultType \"%.64s\" is not vector, scalar, matrix or string",
                       type);
}

enum cma_errc cma_prom_decode_query(const char *body, size_t len, struct cma_prom_result **ret,
                                    struct cma_err *reterr)
{
    json_error_t jerr;
    json_t *root = json_loadb(body ? body : "", body ? len : 0, JSON_REJECT_DUPLICATES, &jerr);
    if (!root)
        return cma_err_set(reterr, CMA_ERR_BACKEND_RESPONSE, BAD_JSON "%s at line %d column %d",
                           jerr.text, jerr.line, jerr.column);
    enum cma_errc rc;
    const char *status = json_string_value(json_object_get(root, "status"));
    if (!json_is_object(root)) {
        rc = cma_err_set(reterr, CMA_ERR_BACKEND_RESPONSE, BAD_JSON "the answer is not an object");
    } else if (!status) {
        rc = cma_err_set(reterr, CMA_ERR_BACKEND_RESPONSE,
                         BAD_JSON "status is missing or not a string");
    } else if (strcmp(status, "error") == 0) {
        rc = status_error(root, reterr);
    } else if (strcmp(status, "success") != 0) {
        rc = cma_err_set(reterr, CMA_ERR_BACKEND_RESPONSE,
                         BAD_JSON "status \"%.64s\" is neither success nor error", status);
    } else {
        struct cma_prom_result *r = calloc(1, sizeof(*r));
        if (!r) {
            rc = cma_err_set(reterr, CMA_ERR_NOMEM, "out of memory");
        } else {
            const json_t *data = json_object_get(root, "data");
            rc = data ? decode_data(data, r, reterr)
                      : cma_err_set(reterr, CMA_ERR_BACKEND_RESPONSE, BAD_JSON "data is missing");
            if (rc == CMA_OK)
                *ret = r;
            else
                cma_prom_result_free(r);
        }
    }
    json_decref(root);
    return rc;
}
