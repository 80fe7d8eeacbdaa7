/* api_custom.c: custom.metrics.k8s.io v1beta1/v1beta2: one object by name, objects by label
 * selector (`*`), root-scoped objects, and namespace metrics. A short recipe: resolve the
 * resource (RESTMapper) → look the metric up (catalog) → object names (path or kube LIST) →
 * PromQL (query.c) → Prometheus (prom.c) → samples keyed by the resource label → encode.
 * Values are the backend's: NaN/±Inf samples are left out and logged, never encoded; the
 * timestamp is the sample's. The answer is decoded as a stream that keeps only the samples whose
 * resource label names one of the requested objects, so a query that returns far more series
 * than asked for costs memory only for those. Errors are Status JSON with the code of the cause
 * (cma_api_fail). Per-request memory (selectors, names, PromQL, the answer, the items) lives in
 * the request arena: nothing here is freed by hand. */
#include <math.h>
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
#include "cma/kube.h"
#include "cma/log.h"
#include "cma/objcache.h"
#include "cma/backend.h"
#include "cma/prom.h"
#include "cma/quantity.h"
#include "cma/query.h"
#include "cma/restmapper.h"
#include "cma/router.h"
#include "cma/rule.h"
#include "cma/selector.h"
#include "cma/server.h"

struct custom_request {
    struct cma_arena *arena; /* the request's: everything below lives as long as it */
    const struct cma_api_resource *resource;
    const char *namespace_; /* NULL for root-scoped */
    const char *name;       /* object name or "*" */
    const char *metric;
    char gr[300];                         /* "pods", "deployments.apps" for messages */
    struct cma_selector *label_selector;  /* objects (only with "*") */
    struct cma_selector *metric_selector; /* series */
    char **names;
    size_t n_names;
    struct cma_explain *explain; /* the app's: NULL unless the request is explained */
};

static enum cma_errc parse_selector(struct custom_request *cr, const struct cma_request *req,
                                    const char *param, struct cma_selector **ret,
                                    struct cma_err *err)
{
    const char *text = cma_request_query(req, param);
    if (!text)
        text = "";
    if (cma_selector_parse(text, strlen(text), ret, err) != CMA_OK) {
        cma_err_prefix(err, "invalid %s \"%s\": ", param, text);
        return err->code;
    }
    return cma_api_adopt(cr->arena, cma_api_free_selector, *ret, err);
}

/* Fills cr->names: the one named object, or the objects matching labelSelector. */
static enum cma_errc resolve_names(struct cma_app *app, struct custom_request *cr,
                                   struct cma_err *err)
{
    if (strcmp(cr->name, "*") != 0) {
        cr->names = cma_api_array(cr->arena, 1, sizeof(*cr->names), err);
        if (!cr->names)
            return cma_api_arena_rc(cr->arena);
        cr->names[0] = (char *)cr->name; /* the route's, which lives as long as the request */
        cr->n_names = 1;
        return CMA_OK;
    }
    /* The watch cache answers once synced; until then (and without one) a live LIST. */
    struct cma_objcache *cache = cma_objcache_registry_get(
        app->caches, cr->resource->group, cr->resource->version, cr->resource->resource);
    if (cache && cma_objcache_is_synced(cache)) {
        cma_explain_addf(app->explain, CMA_EX_OBJECTS, "from the watch cache of %s", cr->gr);
        enum cma_errc crc = cma_objcache_list_names(cache, cr->namespace_, cr->label_selector,
                                                    &cr->names, &cr->n_names, err);
        if (crc != CMA_OK)
            cma_err_prefix(err, "unable to list matching %s: ", cr->gr);
        return crc == CMA_OK ? cma_api_adopt_names(cr->arena, cr->names, cr->n_names, err) : crc;
    }
    struct cma_buf *sel = cma_api_buf(cr->arena, 64 * 1024, err);
    if (!sel)
        return cma_api_arena_rc(cr->arena);
    enum cma_errc rc = cma_selector_format(cr->label_selector, sel);
    if (rc != CMA_OK)
        cma_err_set(err, rc, "labelSelector: %s", cma_errc_meaning(rc));
    if (rc == CMA_OK) {
        cma_explain_addf(app->explain, CMA_EX_OBJECTS, "from a LIST of %s (labelSelector \"%s\")",
                         cr->gr, cma_buf_str(sel));
        rc = cma_kube_list_names(app->kube, cr->resource->group, cr->resource->version,
                                 cr->resource->resource, cr->namespace_, cma_buf_str(sel),
                                 &cr->names, &cr->n_names, err);
    }
    if (rc != CMA_OK)
        cma_err_prefix(err, "unable to list matching %s: ", cr->gr);
    return rc == CMA_OK ? cma_api_adopt_names(cr->arena, cr->names, cr->n_names, err) : rc;
}

/* resolve_names(), and the objects in the report when the request is explained. */
static enum cma_errc resolve_names_explained(struct cma_app *app, struct custom_request *cr,
                                             struct cma_err *err)
{
    enum cma_errc rc = resolve_names(app, cr, err);
    if (rc == CMA_OK)
        cma_explain_names(cr->explain, (const char *const *)cr->names, cr->n_names);
    return rc;
}

/* Index of `value` in names, or -1. */
static long find_name(char *const *names, size_t n, const char *value)
{
    for (size_t i = 0; i < n; i++)
        if (strcmp(names[i], value) == 0)
            return (long)i;
    return -1;
}

static int cmp_str_ptrs(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Which series of the answer the request needs: those whose resource label is one of the
 * requested names (sorted copy of the pointers, for bsearch). */
struct keep_names {
    const char *label;
    const char **sorted;
    size_t n;
};

/* A sorted copy of the request's name pointers (names stay owned by cr). */
static enum cma_errc sorted_names(const struct custom_request *cr, const char ***ret,
                                  struct cma_err *err)
{
    const char **sorted = cma_api_array(cr->arena, cr->n_names + 1, sizeof(*sorted), err);
    if (!sorted)
        return cma_api_arena_rc(cr->arena);
    for (size_t i = 0; i < cr->n_names; i++)
        sorted[i] = cr->names[i];
    qsort(sorted, cr->n_names, sizeof(*sorted), cmp_str_ptrs);
    *ret = sorted;
    return CMA_OK;
}

static bool keep_named(void *ctx, const struct cma_label_view *labels, size_t n_labels)
{
    const struct keep_names *k = ctx;
    const char *v = cma_api_view_value(labels, n_labels, k->label);
    return v && bsearch(&v, k->sorted, k->n, sizeof(*k->sorted), cmp_str_ptrs);
}

/* The kept samples → one item per requested object that has a servable value (the last sample
 * with a given object name wins, as upstream) → MetricValueList, or 404 for a named object. */
static enum cma_errc encode_samples(const struct custom_request *cr,
                                    const struct cma_prom_result *result, const char *res_label,
                                    enum cma_custom_version ver, struct cma_response *resp,
                                    struct cma_err *err)
{
    const struct cma_sample **by_name =
        cma_api_array(cr->arena, cr->n_names + 1, sizeof(*by_name), err);
    struct cma_metric_value *items =
        by_name ? cma_api_array(cr->arena, cr->n_names + 1, sizeof(*items), err) : NULL;
    if (!items)
        return cma_api_arena_rc(cr->arena);
    for (size_t i = 0; i < result->n_samples; i++) {
        const struct cma_sample *s = &result->samples[i];
        const char *v = cma_sample_label(s, res_label);
        long k = v ? find_name(cr->names, cr->n_names, v) : -1;
        if (k >= 0 && by_name[k])
            cma_explain_sample(cr->explain, CMA_EX_DROPPED, by_name[k],
                               "superseded by a later sample for the same object");
        if (k >= 0)
            by_name[k] = s;
    }
    char api_version[300];
    cma_restmapper_api_version(cr->resource, api_version, sizeof(api_version));
    size_t n_items = 0;
    for (size_t k = 0; k < cr->n_names; k++) {
        const struct cma_sample *s = by_name[k];
        int64_t milli;
        if (!s) {
            cma_explain_addf(cr->explain, CMA_EX_WHY,
                             "%s %s: no sample in the answer has %s=\"%s\" (no such series, or "
                             "none with a sample within the backend's lookback: stale)",
                             cr->gr, cr->names[k], res_label, cr->names[k]);
            continue;
        }
        if (!cma_quantity_milli_from_double(s->value, &milli)) {
            cma_explain_sample(cr->explain, CMA_EX_DROPPED, s,
                               isnan(s->value)   ? "NaN is not a value: left out"
                               : isinf(s->value) ? "Inf is not a value: left out"
                                                 : "out of range for a quantity: left out");
            cma_log_warn("custom metric %s for %s %s: sample value %g cannot be served "
                         "(NaN, Inf or out of range); leaving it out",
                         cr->metric, cr->gr, cr->names[k], s->value);
            continue;
        }
        items[n_items++] = (struct cma_metric_value){
            .object = {cr->resource->kind, cr->namespace_, cr->names[k], api_version},
            .metric_name = cr->metric,
            .timestamp_ms = s->timestamp_ms,
            .value_milli = milli,
        };
    }
    enum cma_errc rc;
    if (strcmp(cr->name, "*") != 0 && n_items == 0)
        rc =
            cma_err_set(err, CMA_ERR_NOT_FOUND, "the server could not find the metric %s for %s %s",
                        cr->metric, cr->gr, cr->name);
    else
        rc = cma_encode_metric_value_list(ver, items, n_items, cr->metric_selector, &resp->body,
                                          err);
    return rc;
}

static enum cma_errc query_and_encode(struct cma_app *app, struct custom_request *cr,
                                      const struct cma_catalog_entry *entry,
                                      struct cma_restmapper *mapper, enum cma_custom_version ver,
                                      struct cma_response *resp, struct cma_err *err)
{
    struct cma_buf *promql = cma_api_buf(cr->arena, 1 << 20, err);
    struct cma_buf *res_label = promql ? cma_api_buf(cr->arena, 4096, err) : NULL;
    if (!res_label)
        return cma_api_arena_rc(cr->arena);
    struct cma_query_input in = {
        .tmpl = entry->rule->metrics_query,
        .resmap = entry->rule->resmap,
        .mapper = mapper,
        .series = entry->series,
        .resource = cr->resource,
        .namespace_ = cr->namespace_,
        .names = (const char *const *)cr->names,
        .n_names = cr->n_names,
        .metric_selector = cr->metric_selector,
    };
    struct cma_prom_result *result = NULL;
    struct keep_names keep = {.n = cr->n_names};
    enum cma_errc rc = cma_rule_servable(entry->rule, err); /* a rule loaded with a problem */
    if (rc == CMA_OK)
        rc = cma_query_build(&in, promql, res_label, err);
    if (rc == CMA_OK)
        rc = sorted_names(cr, &keep.sorted, err);
    if (rc == CMA_OK) {
        keep.label = cma_buf_str(res_label);
        cma_explain_addf(cr->explain, CMA_EX_QUERY, "resource label: %s", keep.label);
        cma_log_v(5, "custom metric %s/%s: %s", cr->gr, cr->metric, cma_buf_str(promql));
        struct cma_keep filter = {
            keep_named, &keep, cma_api_keep_id(cr->arena, keep.label, keep.sorted, NULL, keep.n)};
        rc = cma_api_query(app, &entry->rule->backend, cr->explain, "", cma_buf_str(promql),
                           cma_clock_wall_ms(), &filter, &result, err);
        if (rc == CMA_OK)
            rc = cma_api_adopt(cr->arena, cma_api_free_result, result, err);
    }
    if (rc == CMA_OK && result->type != CMA_PROM_VECTOR)
        rc = cma_err_set(err, CMA_ERR_BACKEND_RESPONSE,
                         "unexpected result type from prometheus for %s (want a vector); check "
                         "metricsQuery",
                         cr->metric);
    if (rc == CMA_OK)
        rc = encode_samples(cr, result, cma_buf_str(res_label), ver, resp, err);
    return rc;
}

/* What the catalog lookup found, when the request is explained: the entry, or why none. */
static void explain_lookup(struct cma_app *app, const struct cma_catalog *cat,
                           const struct custom_request *cr, const struct cma_route *route,
                           const struct cma_catalog_entry *entry, bool namespaced)
{
    if (!app->explain)
        return;
    if (!cr->resource)
        cma_explain_addf(app->explain, CMA_EX_WHY,
                         "the resource %s is unknown to the cluster: its API discovery lists no "
                         "such resource (a typo, or a CRD not installed)",
                         route->resource);
    else if (entry)
        cma_explain_entry(app->explain, cat, entry);
    else
        cma_explain_why_missing(app->explain, app, cat, cr->resource, namespaced, cr->metric);
}

void cma_api_custom(struct cma_app *app, struct cma_catalog *cat, const struct cma_route *route,
                    const struct cma_request *req, struct cma_arena *arena,
                    struct cma_response *resp)
{
    struct cma_err err;
    cma_err_clear(&err);
    struct custom_request cr = {.arena = arena, .explain = app->explain};
    enum cma_custom_version ver =
        strcmp(route->version, "v1beta2") == 0 ? CMA_CUSTOM_V1BETA2 : CMA_CUSTOM_V1BETA1;
    if (!cat) {
        struct cma_discovery_status st = {0};
        if (app->discovery)
            cma_discovery_get_status(app->discovery, &st);
        if (st.last_error[0])
            cma_api_reply_errorf(resp, CMA_ERR_BACKEND_UNAVAILABLE,
                                 "metric discovery has not succeeded yet: %s", st.last_error);
        else
            cma_api_reply_errorf(resp, CMA_ERR_BACKEND_UNAVAILABLE,
                                 "metric discovery has not completed yet; try again shortly");
        return;
    }
    struct cma_restmapper *mapper = cma_catalog_mapper(cat);
    bool namespaced;
    if (route->kind == CMA_ROUTE_CUSTOM_NAMESPACE_METRIC) {
        cr.resource = cma_restmapper_resource_for(mapper, "", "namespaces");
        cr.name = route->name;
        namespaced = false;
    } else {
        cr.resource = cma_restmapper_parse_for(mapper, route->resource);
        if (!cr.resource) /* perhaps a CRD installed since the last discovery */
            cma_discovery_request_refresh(app->discovery);
        cr.name = route->name;
        cr.namespace_ = route->namespace_;
        namespaced = route->namespace_ != NULL;
    }
    cr.metric = route->metric;
    const struct cma_catalog_entry *entry = NULL;
    enum cma_errc rc = CMA_OK;
    if (cr.resource) {
        cma_restmapper_group_resource(cr.resource, cr.gr, sizeof(cr.gr));
        entry = cma_catalog_lookup(cat, cr.resource, namespaced, cr.metric);
    }
    explain_lookup(app, cat, &cr, route, entry, namespaced);
    if (!entry)
        rc = cma_err_set(&err, CMA_ERR_NOT_FOUND, "the server could not find the metric %s for %s",
                         route->metric, cr.resource ? cr.gr : route->resource);
    if (rc == CMA_OK && strcmp(cr.name, "*") == 0)
        rc = parse_selector(&cr, req, "labelSelector", &cr.label_selector, &err);
    if (rc == CMA_OK)
        rc = parse_selector(&cr, req, "metricLabelSelector", &cr.metric_selector, &err);
    if (rc == CMA_OK)
        rc = resolve_names_explained(app, &cr, &err);
    if (rc == CMA_OK && cr.n_names == 0) /* no object matches: an honest empty list */
        rc = cma_encode_metric_value_list(ver, NULL, 0, cr.metric_selector, &resp->body, &err);
    else if (rc == CMA_OK && entry)
        rc = query_and_encode(app, &cr, entry, mapper, ver, resp, &err);
    if (rc != CMA_OK)
        cma_api_fail(resp, req, rc, &err);
}
