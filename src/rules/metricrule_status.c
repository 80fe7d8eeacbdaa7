/* metricrule_status.c: a MetricRule's status JSON from its outcome, the comparison that decides
 * whether to write it, and the Conflict message (metricrule_status.h).
 *
 * DESIGN: jansson builds the object and prints it with sorted keys and no spaces, so the bytes
 * depend on the values only. The one value a replica cannot know from the inputs is the time of
 * a transition; it is taken from the current status when the condition's status did not change,
 * and the comparison ignores it, so two replicas that saw the same transition at different
 * instants agree that nothing needs writing once either has written. */
#include "cma/metricrule_status.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cma/buf.h"
#include "cma/clock.h"
#include "cma/utf8.h"

#define CONDITION_TYPE "Accepted"

static const char *const reason_names[CMA_METRICRULE_REASON__COUNT] = {
    [CMA_METRICRULE_REASON_ACCEPTED] = "Accepted",
    [CMA_METRICRULE_REASON_INVALID_SPEC] = "InvalidSpec",
    [CMA_METRICRULE_REASON_BACKEND_NOT_ALLOWED] = "BackendNotAllowed",
    [CMA_METRICRULE_REASON_NAMESPACE_NOT_ALLOWED] = "NamespaceNotAllowed",
    [CMA_METRICRULE_REASON_TOO_MANY_RULES] = "TooManyRules",
    [CMA_METRICRULE_REASON_TOO_MANY_METRICS] = "TooManyMetrics",
    [CMA_METRICRULE_REASON_CONFLICT] = "Conflict",
};

/* The message when the caller gives none. */
static const char *const reason_texts[CMA_METRICRULE_REASON__COUNT] = {
    [CMA_METRICRULE_REASON_ACCEPTED] = "every rule loaded",
    [CMA_METRICRULE_REASON_INVALID_SPEC] = "the spec cannot be compiled",
    [CMA_METRICRULE_REASON_BACKEND_NOT_ALLOWED] =
        "a rule names a backend MetricRules of this namespace may not use",
    [CMA_METRICRULE_REASON_NAMESPACE_NOT_ALLOWED] =
        "this namespace does not match --metric-rules-namespace-selector",
    [CMA_METRICRULE_REASON_TOO_MANY_RULES] =
        "older MetricRules take every --metric-rules-max-per-namespace slot",
    [CMA_METRICRULE_REASON_TOO_MANY_METRICS] =
        "its metrics would take the namespace over --metric-rules-max-metrics-per-namespace",
    [CMA_METRICRULE_REASON_CONFLICT] = "another source serves the same metric",
};

const char *cma_metricrule_reason_name(enum cma_metricrule_reason r)
{
    return (unsigned)r < CMA_METRICRULE_REASON__COUNT ? reason_names[r] : NULL;
}

bool cma_metricrule_reason_from_name(const char *name, enum cma_metricrule_reason *ret)
{
    for (int r = 0; name && r < CMA_METRICRULE_REASON__COUNT; r++)
        if (strcmp(reason_names[r], name) == 0) {
            *ret = (enum cma_metricrule_reason)r;
            return true;
        }
    return false;
}

/* ---- reading the current status ------------------------------------------------------------ */

static json_t *decode_status(const char *text)
{
    if (!text || !text[0])
        return NULL;
    json_t *v = json_loads(text, JSON_DECODE_ANY, NULL);
    if (v && !json_is_object(v)) {
        json_decref(v);
        return NULL;
    }
    return v;
}

/* The Accepted condition of a decoded status (borrowed), NULL when there is none. */
static json_t *accepted_condition(json_t *status)
{
    json_t *conds = json_object_get(status, "conditions");
    size_t i;
    json_t *c;
    json_array_foreach(conds, i, c)
    {
        const char *type = json_string_value(json_object_get(c, "type"));
        if (type && strcmp(type, CONDITION_TYPE) == 0)
            return c;
    }
    return NULL;
}

/* The previous transition time to keep: the current Accepted condition's when its status is
 * `status_text` and it has a time; else NULL. Borrowed from `current`. */
static const char *kept_transition(json_t *current, const char *status_text)
{
    json_t *c = accepted_condition(current);
    const char *was = json_string_value(json_object_get(c, "status"));
    const char *t = json_string_value(json_object_get(c, "lastTransitionTime"));
    if (!was || strcmp(was, status_text) != 0 || !t || !t[0])
        return NULL;
    return t;
}

/* ---- building ------------------------------------------------------------------------------ */

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* The sorted, deduplicated names that fit the schema, as a JSON array; NULL when out of memory. */
static json_t *metrics_array(const struct cma_metricrule_outcome *o)
{
    const char **v = calloc(o->n_metrics ? o->n_metrics : 1, sizeof(*v));
    json_t *arr = json_array();
    if (!v || !arr) {
        free(v);
        json_decref(arr);
        return NULL;
    }
    size_t n = 0;
    for (size_t i = 0; i < o->n_metrics; i++)
        if (o->metrics[i] && strlen(o->metrics[i]) <= CMA_METRICRULE_STATUS_MAX_METRIC_NAME)
            v[n++] = o->metrics[i];
    qsort(v, n, sizeof(*v), cmp_str);
    for (size_t i = 0; i < n && json_array_size(arr) < CMA_METRICRULE_STATUS_MAX_METRICS; i++) {
        if (i > 0 && strcmp(v[i], v[i - 1]) == 0)
            continue;
        if (json_array_append_new(arr, json_string(v[i])) != 0) {
            json_decref(arr);
            arr = NULL;
            break;
        }
    }
    free(v);
    return arr;
}

/* The message as a JSON string: cut to the schema's length at a character boundary, and with
 * '?' for each byte that is not UTF-8 (jansson refuses such text; a message quotes a team's
 * spec, which the API server has already checked is UTF-8, so this is only a safeguard). */
static json_t *message_string(const struct cma_metricrule_outcome *o)
{
    const char *m = o->message && o->message[0] ? o->message : reason_texts[o->reason];
    size_t len = strlen(m);
    struct cma_buf b;
    cma_buf_init(&b, 0);
    size_t i = 0;
    while (i < len) {
        size_t w = 0;
        uint32_t r = cma_utf8_decode(m + i, len - i, &w);
        bool bad = r == CMA_UTF8_RUNE_ERROR && w <= 1;
        if (b.len + (bad ? 1 : w) > CMA_METRICRULE_STATUS_MAX_MESSAGE)
            break;
        if ((bad ? cma_buf_appendc(&b, '?') : cma_buf_append(&b, m + i, w)) != CMA_OK) {
            cma_buf_done(&b);
            return NULL;
        }
        i += w ? w : 1;
    }
    json_t *s = json_stringn(b.len ? cma_buf_str(&b) : "", b.len);
    cma_buf_done(&b);
    return s;
}

static json_t *condition(int64_t generation, const struct cma_metricrule_outcome *o,
                         json_t *current, int64_t now_ms)
{
    const char *status_text = o->reason == CMA_METRICRULE_REASON_ACCEPTED ? "True" : "False";
    char now[21];
    const char *t = kept_transition(current, status_text);
    if (!t)
        t = cma_clock_format_rfc3339(now_ms, now);
    return json_pack("{s:s, s:s, s:s, s:o?, s:I, s:s}", "type", CONDITION_TYPE, "status",
                     status_text, "reason", reason_names[o->reason], "message", message_string(o),
                     "observedGeneration", (json_int_t)generation, "lastTransitionTime", t);
}

enum cma_errc cma_metricrule_status_build(int64_t generation,
                                          const struct cma_metricrule_outcome *o,
                                          const char *current_status_json, int64_t now_ms,
                                          char **ret_json, struct cma_err *reterr)
{
    if (!o || (unsigned)o->reason >= CMA_METRICRULE_REASON__COUNT || generation < 0)
        return cma_err_set(reterr, CMA_ERR_INTERNAL,
                           "MetricRule status: no outcome, a reason out of range or a negative "
                           "generation");
    json_t *current = decode_status(current_status_json);
    json_t *cond = condition(generation, o, current, now_ms);
    json_decref(current);
    json_t *conds = cond ? json_pack("[o]", cond) : NULL;
    json_t *metrics = metrics_array(o);
    json_t *status = NULL;
    if (conds && metrics)
        status = json_pack("{s:I, s:O, s:O}", "observedGeneration", (json_int_t)generation,
                           "conditions", conds, "metrics", metrics);
    json_decref(conds);
    json_decref(metrics);
    char *text = status ? json_dumps(status, JSON_COMPACT | JSON_SORT_KEYS) : NULL;
    json_decref(status);
    if (!text)
        return cma_err_set(reterr, CMA_ERR_NOMEM, "out of memory");
    *ret_json = text;
    return CMA_OK;
}

/* ---- comparing ----------------------------------------------------------------------------- */

static void drop_transition_times(json_t *status)
{
    size_t i;
    json_t *c;
    json_array_foreach(json_object_get(status, "conditions"), i, c)
        json_object_del(c, "lastTransitionTime"); /* absent: nothing to do */
}

enum cma_errc cma_metricrule_status_needs_write(const char *current_status_json,
                                                const char *new_json, bool *ret,
                                                struct cma_err *reterr)
{
    json_t *want = decode_status(new_json);
    if (!want)
        return cma_err_set(reterr, CMA_ERR_INTERNAL,
                           "MetricRule status: the new status is not a JSON object");
    json_t *have = decode_status(current_status_json);
    drop_transition_times(want);
    drop_transition_times(have);
    *ret = !have || !json_equal(want, have);
    json_decref(want);
    json_decref(have);
    return CMA_OK;
}

/* ---- the Conflict message ------------------------------------------------------------------ */

enum cma_errc cma_metricrule_status_conflict_message(const char *metric,
                                                     const struct cma_metricrule_winner *w,
                                                     char **ret, struct cma_err *reterr)
{
    const char *what = metric && metric[0] ? metric : "the metric";
    struct cma_buf b;
    cma_buf_init(&b, 0);
    enum cma_errc rc;
    if (w && w->file)
        rc = cma_buf_printf(&b, "%s is served by the config file's rule %s:%u:%u", what, w->file,
                            w->line, w->column);
    else if (w && w->namespace_ && w->name)
        rc = cma_buf_printf(&b, "%s is served by MetricRule %s/%s", what, w->namespace_, w->name);
    else
        return cma_err_set(reterr, CMA_ERR_INTERNAL,
                           "MetricRule status: a conflict without a winner");
    char *text = rc == CMA_OK ? cma_buf_take(&b) : NULL;
    cma_buf_done(&b);
    if (!text)
        return cma_err_set(reterr, CMA_ERR_NOMEM, "out of memory");
    *ret = text;
    return CMA_OK;
}
