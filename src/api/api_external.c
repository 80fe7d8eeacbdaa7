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
 * - Memory: the selector, PromQL, the answer and the items live in the request arena. */
#include <stdlib.h>
#include <string.h>

#include "api_internal.h"
#include "explain_trace.h"
#include "cma/arena.h"
#include "cma/buf.h"
#include "cma/catalog.h"
#include "cma/clock.h"
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

/* 503 before the first successful relist, with discovery's last error when it has one (the same
 * wording as the custom metrics API). */
static void reply_no_catalog(struct cma_app *app, struct cma_response *resp)
{
    struct cma_discovery_status st = {0};
    if (app->discovery)
        cma_discovery_get_status(app->discovery, &st);
    if (st.last_error[0])
        cma_api_reply_errorf(resp, CMA_ERR_BACKEND_UNAVAILABLE,
                             "metric discovery has not succeeded yet: %s", st.last_error);
    else
        cma_api_reply_errorf(resp, CMA_ERR_BACKEND_UNAVAILABLE,
                             "metric discovery has not completed yet; try again shortly");
}

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

/* Turns a vector or scalar result into items and encodes them. Label arrays point into result. */
static enum cma_errc encode_result(struct cma_arena *arena, const struct cma_catalog_entry *entry,
                                   const char *namespace_, const struct cma_prom_result *result,
                                   struct cma_explain *ex, struct cma_buf *out, struct cma_err *err)
{
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
    };
    struct cma_prom_result *result = NULL;
    enum cma_errc rc = cma_rule_servable(entry->rule, err); /* a rule loaded with a problem */
    if (rc == CMA_OK)
        rc = cma_query_build(&in, promql, NULL, err);
    if (rc == CMA_OK) {
        cma_log_v(5, "external metric %s in namespace %s: %s", entry->metric, namespace_,
                  cma_buf_str(promql));
        /* every series is an item of the answer: all are kept (the budget bounds them) */
        rc = cma_api_query(app, &entry->rule->backend, app->explain, "", cma_buf_str(promql),
                           cma_clock_wall_ms(), NULL, &result, err);
        if (rc == CMA_OK)
            rc = cma_api_adopt(arena, cma_api_free_result, result, err);
    }
    if (rc == CMA_OK)
        rc = encode_result(arena, entry, namespace_, result, app->explain, &resp->body, err);
    return rc;
}

void cma_api_external(struct cma_app *app, struct cma_catalog *cat, const struct cma_route *route,
                      const struct cma_request *req, struct cma_arena *arena,
                      struct cma_response *resp)
{
    if (!cat) {
        reply_no_catalog(app, resp);
        return;
    }
    const char *ns = route->namespace_ ? route->namespace_ : "";
    /* Case-insensitive: client-go lower-cases the metric name (the URL's resource segment). */
    const struct cma_catalog_entry *entry = cma_catalog_lookup_external(cat, route->metric);
    if (entry)
        cma_explain_entry(app->explain, cat, entry);
    else
        cma_explain_why_missing(app->explain, app, cat, NULL, false, route->metric);
    if (!entry) {
        cma_api_reply_errorf(resp, CMA_ERR_NOT_FOUND,
                             "the server could not find the metric %s for namespace %s",
                             route->metric, ns);
        return;
    }
    struct cma_err err;
    cma_err_clear(&err);
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
