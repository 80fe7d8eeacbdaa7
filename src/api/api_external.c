/* api_external.c: external.metrics.k8s.io v1beta1:
 * GET /apis/external.metrics.k8s.io/v1beta1/namespaces/{ns}/{metric}?labelSelector=<metric sel>.
 * The recipe: look the metric up in the catalog (case-insensitively) → PromQL from the rule's
 * metricsQuery as prometheus-adapter's BuildExternal (selector matchers, then the namespace
 * matcher unless the rule says `resources.namespaced: false`) → Prometheus → one item per
 * sample. Errors are Status JSON with the code of the cause.
 *
 * DESIGN: where this differs from prometheus-adapter, and why.
 * - Names: client-go lower-cases the resource segment of every URL it builds
 *   (kubernetes/kubernetes#72996), and an external metric name sits in that position, so the
 *   HPA asks for "dcgm_fi_dev_gpu_util" when the metric is DCGM_FI_DEV_GPU_UTIL. The catalog's
 *   external lookup ignores ASCII case; metricName in the answer is the name as discovered.
 * - Values: NaN and ±Inf samples (and values whose milli form overflows int64) are left out and
 *   logged; upstream encodes them as garbage (MinInt64). An empty result is 200 `items: []`, as
 *   upstream: the HPA then holds instead of acting on a made-up 0.
 * - Status codes: gt/lt in labelSelector and a malformed labelSelector are 400 (upstream: 500);
 *   backend failures keep their cause (503 unreachable, 504 timeout, 500 error) instead of a
 *   blanket 500; a scalar result has metricLabels {} (upstream: null); a matrix or string result
 *   names the metric and the fix; an unknown metric names the namespace.
 * - maxSampleAge (this project's extension): a second query, `max by (<the items' label names>)
 *   (timestamp(<<.Series>>{<<.LabelMatchers>>}))`, gives the newest raw sample behind each item
 *   (the groups carrying every label of the item); an item whose data is older, or has none, is
 *   left out (an instant query stamps results with the evaluation time: metricsQuery's own
 *   timestamps cannot tell the data's age).
 * - Memory: the selector, PromQL, the answer and the items live in the request arena. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api_internal.h"
#include "explain_trace.h"
#include "cma/arena.h"
#include "cma/buf.h"
#include "cma/catalog.h"
#include "cma/clock.h"
#include "cma/config.h"
#include "cma/discovery.h"
#include "cma/encode.h"
#include "cma/log.h"
#include "cma/backend.h"
#include "cma/prom.h"
#include "cma/quantity.h"
#include "cma/query.h"
#include "cma/router.h"
#include "cma/rule.h"
#include "cma/selector.h"
#include "cma/server.h"
#include "cma/str.h"

static const char *result_type_name(enum cma_prom_result_type t)
{
    switch (t) {
    case CMA_PROM_VECTOR:
        return "vector";
    case CMA_PROM_SCALAR:
        return "scalar";
    case CMA_PROM_MATRIX:
        return "matrix";
    case CMA_PROM_STRING:
        return "string";
    }
    return "unknown";
}

/* maxSampleAge (this project's extension): the answer of `max by (<the items' label names>)
 * (<age query>)`, the newest raw sample of the series behind each item. NULL ages: every item is
 * fresh. */
struct freshness {
    const struct cma_rule *rule;
    int64_t now_ms;
    const struct cma_prom_result *ages;
};

/* The data time (ms) of an item: the newest of the age groups that carry every label of the
 * item (__name__ aside: timestamp() drops it); 0 when no group does. */
static int64_t item_data_ms(const struct freshness *f, const struct cma_sample *item)
{
    double newest = 0;
    for (size_t g = 0; g < f->ages->n_samples; g++) {
        const struct cma_sample *group = &f->ages->samples[g];
        bool all = true;
        for (size_t k = 0; all && k < item->n_labels; k++) {
            const char *v = cma_sample_label(group, item->labels[k].name);
            all = strcmp(item->labels[k].name, "__name__") == 0 ||
                  (v && strcmp(v, item->labels[k].value) == 0);
        }
        if (all && group->value > newest && group->value < 9.2e15)
            newest = group->value;
    }
    return (int64_t)(newest * 1000.0);
}

/* Why the item's data is too old to serve, in why (empty when fresh). */
static void staleness(const struct freshness *f, const struct cma_sample *item, char *why,
                      size_t why_len)
{
    why[0] = '\0';
    if (!f->ages)
        return;
    long long max = f->rule->max_sample_age_ms;
    int64_t data_ms = item_data_ms(f, item);
    char age[32], limit[32];
    const struct cma_pos *pos = &f->rule->cfg->max_sample_age.pos;
    cma_duration_format(max, limit, sizeof(limit));
    if (!data_ms)
        snprintf(why, why_len,
                 "no raw sample of its series within the backend's lookback (maxSampleAge %s, "
                 "%s:%u:%u): left out",
                 limit, pos->file, pos->line, pos->column);
    else if (f->now_ms - data_ms > max)
        snprintf(why, why_len,
                 "its newest sample is %s old, older than maxSampleAge %s (%s:%u:%u): left out",
                 cma_duration_format(f->now_ms - data_ms, age, sizeof(age)), limit, pos->file,
                 pos->line, pos->column);
}

/* Turns a vector or scalar result into items and encodes them, leaving out the items whose data
 * is older than the rule's maxSampleAge. Label arrays point into result. */
static enum cma_errc encode_result(struct cma_arena *arena, const struct cma_catalog_entry *entry,
                                   const char *namespace_, const struct cma_prom_result *result,
                                   const struct freshness *fresh, struct cma_explain *ex,
                                   struct cma_buf *out, struct cma_err *err)
{
    char why[512];
    if (result->type != CMA_PROM_VECTOR && result->type != CMA_PROM_SCALAR)
        return cma_err_set(err, CMA_ERR_RULE,
                           "unexpected query result type %s for external metric %s; metricsQuery "
                           "must return an instant vector or a scalar",
                           result_type_name(result->type), entry->metric);
    size_t n_labels = 0;
    for (size_t i = 0; i < result->n_samples; i++)
        n_labels += result->samples[i].n_labels;
    struct cma_external_metric_value *items =
        cma_api_array(arena, result->n_samples + 1, sizeof(*items), err);
    const char **names = items ? cma_api_array(arena, n_labels + 1, sizeof(*names), err) : NULL;
    const char **values = names ? cma_api_array(arena, n_labels + 1, sizeof(*values), err) : NULL;
    if (!values)
        return cma_api_arena_rc(arena);
    size_t n_items = 0, used = 0;
    for (size_t i = 0; i < result->n_samples; i++) {
        const struct cma_sample *s = &result->samples[i];
        int64_t milli;
        staleness(fresh, s, why, sizeof(why));
        if (why[0]) { /* treated as missing: the HPA holds rather than act on old data */
            cma_explain_sample(ex, CMA_EX_DROPPED, s, why);
            cma_log_v(4, "external metric %s in namespace %s: %s", entry->metric, namespace_, why);
            continue;
        }
        if (!cma_quantity_milli_from_double(s->value, &milli)) {
            cma_explain_sample(ex, CMA_EX_DROPPED, s,
                               "NaN, Inf or out of range for a quantity: left out");
            cma_log_warn("external metric %s in namespace %s: sample value %g cannot be served "
                         "(NaN, Inf or out of range); leaving it out",
                         entry->metric, namespace_, s->value);
            continue;
        }
        struct cma_external_metric_value *item = &items[n_items++];
        item->metric_name = entry->metric;
        item->label_names = names + used;
        item->label_values = values + used;
        item->n_labels = s->n_labels;
        for (size_t k = 0; k < s->n_labels; k++, used++) {
            names[used] = s->labels[k].name;
            values[used] = s->labels[k].value;
        }
        item->timestamp_ms = s->timestamp_ms;
        item->value_milli = milli;
    }
    return cma_encode_external_metric_value_list(items, n_items, out, err);
}

/* One instant query through the rule's backend, every series kept (each is an item; the budget
 * bounds them), the answer in the arena. */
static enum cma_errc run_query(struct cma_app *app, struct cma_arena *arena,
                               const struct cma_rule *rule, const char *promql, int64_t now_ms,
                               struct cma_prom_result **ret, struct cma_err *err)
{
    struct cma_keep every = {NULL, NULL, NULL, app->call, NULL}; /* the request's deadline */
    enum cma_errc rc =
        cma_api_query_rule(app, rule, app->explain, promql, now_ms, &every, ret, err);
    if (rc == CMA_OK)
        rc = cma_api_adopt(arena, cma_api_free_result, *ret, err);
    return rc;
}

static bool listed(const char *const *names, size_t n, const char *name)
{
    for (size_t i = 0; i < n; i++)
        if (strcmp(names[i], name) == 0)
            return true;
    return false;
}

/* "max by (<every label name of the answer's items but __name__>) (" into promql. */
static enum cma_errc age_query_head(struct cma_arena *arena, const struct cma_prom_result *result,
                                    struct cma_buf *promql, struct cma_err *err)
{
    size_t n_labels = 0, n = 0;
    for (size_t i = 0; i < result->n_samples; i++)
        n_labels += result->samples[i].n_labels;
    const char **names = cma_api_array(arena, n_labels + 1, sizeof(*names), err);
    if (!names)
        return cma_api_arena_rc(arena);
    enum cma_errc rc = cma_buf_appends(promql, "max by (");
    for (size_t i = 0; i < result->n_samples; i++)
        for (size_t k = 0; rc == CMA_OK && k < result->samples[i].n_labels; k++) {
            const char *name = result->samples[i].labels[k].name;
            if (strcmp(name, "__name__") == 0 || listed(names, n, name))
                continue;
            if (n && (rc = cma_buf_appendc(promql, ',')) != CMA_OK)
                break;
            names[n++] = name;
            rc = cma_buf_appends(promql, name);
        }
    if (rc == CMA_OK)
        rc = cma_buf_appends(promql, ") (");
    return rc == CMA_OK ? CMA_OK : cma_err_set(err, rc, "the age query: %s", cma_errc_meaning(rc));
}

/* maxSampleAge: the age query for the items of `result` (see struct freshness). */
static enum cma_errc fetch_ages(struct cma_app *app, struct cma_arena *arena,
                                const struct cma_query_input *value_in,
                                const struct cma_prom_result *result, struct freshness *fresh,
                                struct cma_err *err)
{
    struct cma_buf *promql = cma_api_buf(arena, 1 << 20, err);
    if (!promql)
        return cma_api_arena_rc(arena);
    struct cma_query_input in = *value_in;
    in.tmpl = fresh->rule->age_query;
    enum cma_errc rc = age_query_head(arena, result, promql, err);
    if (rc == CMA_OK)
        rc = cma_query_build(&in, promql, NULL, err);
    if (rc == CMA_OK && (rc = cma_buf_appendc(promql, ')')) != CMA_OK)
        cma_err_set(err, rc, "the age query: %s", cma_errc_meaning(rc));
    struct cma_prom_result *ages = NULL;
    if (rc == CMA_OK) {
        cma_log_v(5, "external metric ages: %s", cma_buf_str(promql));
        rc = run_query(app, arena, fresh->rule, cma_buf_str(promql), fresh->now_ms, &ages, err);
    }
    if (rc == CMA_OK && ages->type != CMA_PROM_VECTOR)
        rc = cma_err_set(err, CMA_ERR_BACKEND_RESPONSE, "the age query answered a %s",
                         result_type_name(ages->type));
    fresh->ages = ages;
    return rc;
}

static enum cma_errc query_and_encode(struct cma_app *app, struct cma_catalog *cat,
                                      struct cma_arena *arena,
                                      const struct cma_catalog_entry *entry, const char *namespace_,
                                      const struct cma_selector *selector,
                                      struct cma_response *resp, struct cma_err *err)
{
    struct cma_buf *promql = cma_api_buf(arena, 1 << 20, err);
    if (!promql)
        return cma_api_arena_rc(arena);
    struct cma_query_input in = {
        .tmpl = entry->rule->metrics_query,
        .resmap = entry->rule->resmap,
        .mapper = cma_catalog_mapper(cat),
        .series = entry->series,
        .resource = NULL, /* BuildExternal */
        .namespace_ = entry->rule->namespaced ? namespace_ : NULL,
        .metric_selector = selector,
        .enforce = entry->rule->owner, /* a MetricRule's: its namespace only */
    };
    struct freshness fresh = {.rule = entry->rule, .now_ms = cma_clock_wall_ms()};
    struct cma_prom_result *result = NULL;
    enum cma_errc rc = cma_rule_servable(entry->rule, err); /* a rule loaded with a problem */
    if (rc == CMA_OK)
        rc = cma_query_build(&in, promql, NULL, err);
    if (rc == CMA_OK) {
        cma_log_v(5, "external metric %s in namespace %s: %s", entry->metric, namespace_,
                  cma_buf_str(promql));
        rc = run_query(app, arena, entry->rule, cma_buf_str(promql), fresh.now_ms, &result, err);
    }
    if (rc == CMA_OK && entry->rule->max_sample_age_ms && entry->rule->age_query &&
        (result->type == CMA_PROM_VECTOR || result->type == CMA_PROM_SCALAR) &&
        result->n_samples > 0)
        rc = fetch_ages(app, arena, &in, result, &fresh, err);
    if (rc == CMA_OK)
        rc =
            encode_result(arena, entry, namespace_, result, &fresh, app->explain, &resp->body, err);
    return rc;
}

void cma_api_external(struct cma_app *app, struct cma_catalog *cat, const struct cma_route *route,
                      const struct cma_request *req, struct cma_arena *arena,
                      struct cma_response *resp)
{
    if (!cat) {
        cma_api_reply_no_catalog(app, resp); /* the custom metrics API's words */
        return;
    }
    const char *ns = route->namespace_ ? route->namespace_ : "";
    /* Case-insensitive: client-go lower-cases the metric name (the URL's resource segment). */
    /* a MetricRule's external metric only under its own namespaces/N/ */
    const struct cma_catalog_entry *entry =
        cma_catalog_lookup_in(cat, NULL, true, route->metric, route->namespace_);
    if (entry)
        cma_explain_entry(app->explain, cat, entry);
    else
        cma_explain_why_missing(app->explain, app, cat, NULL, false, route->metric);
    struct cma_err err;
    cma_err_clear(&err);
    struct cma_discovery_pending pending;
    if (!entry && cma_api_pending_backend(app, cat, true, &pending)) {
        char where[300];
        snprintf(where, sizeof(where), "namespace %s", ns);
        cma_api_fail(resp, req, cma_api_pending_error(&pending, route->metric, where, &err), &err);
        return;
    }
    if (!entry) {
        cma_api_reply_errorf(resp, CMA_ERR_NOT_FOUND,
                             "the server could not find the metric %s for namespace %s",
                             route->metric, ns);
        return;
    }
    struct cma_selector *selector = NULL;
    const char *text = cma_request_query(req, "labelSelector");
    if (!text)
        text = "";
    enum cma_errc rc = cma_selector_parse(text, strlen(text), &selector, &err);
    if (rc != CMA_OK)
        cma_err_prefix(&err, "invalid labelSelector \"%s\": ", text);
    else
        rc = cma_api_adopt(arena, cma_api_free_selector, selector, &err);
    if (rc == CMA_OK)
        rc = query_and_encode(app, cat, arena, entry, ns, selector, resp, &err);
    if (rc != CMA_OK)
        cma_api_fail(resp, req, rc, &err);
}
