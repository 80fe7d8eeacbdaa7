/* api_custom.c: custom.metrics.k8s.io v1beta1/v1beta2: one object by name, objects by label
 * selector (`*`), root-scoped objects, and namespace metrics. A short recipe: resolve the
 * resource (RESTMapper) → look the metric up (catalog) → object names (path or kube LIST) →
 * PromQL (query.c) → Prometheus (prom.c) → samples keyed by the resource label → encode.
 * Values are the backend's: NaN/±Inf samples are left out and logged, never encoded; the
 * timestamp is the sample's. The answer is decoded as a stream that keeps only the samples whose
 * resource label names one of the requested objects, so a query that returns far more series
 * than asked for costs memory only for those; that is also what lets a query whose object names
 * would pass the backend's length limit go without them (cma_query_build_bounded). A rule with
 * maxSampleAge sends a second query, `max by (<resource label>) (timestamp(<<.Series>>{...}))`,
 * for the newest raw sample of each object's series (an instant query stamps every result with
 * the evaluation time, so metricsQuery's own timestamps cannot tell the data's age); an object
 * whose data is older is treated as missing: left out of a list, 404 with the reason for a named
 * object. Errors are Status JSON with the code of the cause
 * (cma_api_fail). Per-request memory (selectors, names, PromQL, the answer, the items) lives in
 * the request arena: nothing here is freed by hand. */
#include <math.h>
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
#include "cma/hash.h"
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
#include "cma/str.h"

/* The request's names by text (cma_htab over cr->names): matching a sample to its object costs
 * one hash and, as a rule, one strcmp, whatever the number of names (a linear scan made a
 * 1,000-pod request spend most of its CPU in strcmp: docs/benchmarks.md, "Sample matching"). */
struct name_index {
    struct cma_htab tab; /* slots adopted by the request's arena */
    char *const *names;
    size_t n;
};

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
    struct name_index index;     /* names by text, once resolved (index_names) */
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

static uint64_t name_hash(const void *ctx, size_t i)
{
    const struct name_index *x = ctx;
    return cma_hash_str(x->names[i], strlen(x->names[i]));
}

static bool name_eq(const void *ctx, size_t i, const void *key)
{
    const struct name_index *x = ctx;
    return strcmp(x->names[i], key) == 0;
}

/* Indexes cr->names in one pass. A name listed twice keeps its first position: items go in in
 * order and a lookup probes from the same slot, so it meets the earlier one first. */
static enum cma_errc index_names(struct custom_request *cr, struct cma_err *err)
{
    struct name_index *x = &cr->index;
    x->names = cr->names;
    x->n = cr->n_names;
    if (cma_htab_reserve(&x->tab, x->n, name_hash, x) != CMA_OK)
        return cma_err_set(err, CMA_ERR_NOMEM, "out of memory indexing %zu object names", x->n);
    return cma_api_adopt(cr->arena, free, x->tab.slots, err);
}

/* Index of `value` in the indexed names (the first, when listed twice), or -1. */
static long find_name(const struct name_index *x, const char *value)
{
    const size_t *slot =
        cma_htab_find(&x->tab, cma_hash_str(value, strlen(value)), value, name_eq, x);
    return slot && *slot ? (long)(*slot - 1) : -1;
}

static int cmp_str_ptrs(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Which series of the answer the request needs: those whose resource label is one of the
 * requested names (looked up in the index; the sorted copy of the pointers makes the filter's
 * id). */
struct keep_names {
    const char *label;
    const struct name_index *index;
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
    return v && find_name(k->index, v) >= 0;
}

/* maxSampleAge (this project's extension): the data time of each requested object, from the
 * rule's age query (the newest raw sample of its series, cma_rule.age_query). */
struct freshness {
    const struct cma_rule *rule; /* rule->max_sample_age_ms == 0: every sample is fresh */
    int64_t now_ms;
    int64_t *data_ms; /* per cr->names index; 0 = no raw sample within the backend's lookback */
};

/* Why object k's sample is too old to serve, in why (empty when it is fresh). */
static void staleness(const struct freshness *f, size_t k, char *why, size_t why_len)
{
    why[0] = '\0';
    long long max = f->rule->max_sample_age_ms;
    if (!max || !f->data_ms) /* no maxSampleAge, or its ages were not fetched */
        return;
    char age[32], limit[32];
    const struct cma_pos *pos = &f->rule->cfg->max_sample_age.pos;
    cma_duration_format(max, limit, sizeof(limit));
    if (!f->data_ms[k])
        snprintf(why, why_len,
                 "no raw sample of its series within the backend's lookback (maxSampleAge %s, "
                 "%s:%u:%u)",
                 limit, pos->file, pos->line, pos->column);
    else if (f->now_ms - f->data_ms[k] > max)
        snprintf(why, why_len, "its newest sample is %s old, older than maxSampleAge %s (%s:%u:%u)",
                 cma_duration_format(f->now_ms - f->data_ms[k], age, sizeof(age)), limit, pos->file,
                 pos->line, pos->column);
}

/* by_name[k]: the last sample of the answer for the k-th requested object (upstream's order). */
static void index_by_name(const struct custom_request *cr, const struct cma_prom_result *result,
                          const char *res_label, const struct cma_sample **by_name)
{
    for (size_t i = 0; i < result->n_samples; i++) {
        const struct cma_sample *s = &result->samples[i];
        const char *v = cma_sample_label(s, res_label);
        long k = v ? find_name(&cr->index, v) : -1;
        if (k >= 0 && by_name[k])
            cma_explain_sample(cr->explain, CMA_EX_DROPPED, by_name[k],
                               "superseded by a later sample for the same object");
        if (k >= 0)
            by_name[k] = s;
    }
}

/* The kept samples → one item per requested object that has a servable value (the last sample
 * with a given object name wins, as upstream) and fresh data → MetricValueList, or 404 for a
 * named object, saying why when its sample was too old. */
static enum cma_errc encode_samples(const struct custom_request *cr,
                                    const struct cma_prom_result *result, const char *res_label,
                                    const struct freshness *fresh, enum cma_custom_version ver,
                                    struct cma_response *resp, struct cma_err *err)
{
    char why[512] = "";
    const struct cma_sample **by_name =
        cma_api_array(cr->arena, cr->n_names + 1, sizeof(*by_name), err);
    struct cma_metric_value *items =
        by_name ? cma_api_array(cr->arena, cr->n_names + 1, sizeof(*items), err) : NULL;
    if (!items)
        return cma_api_arena_rc(cr->arena);
    index_by_name(cr, result, res_label, by_name);
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
        staleness(fresh, k, why, sizeof(why));
        if (why[0]) { /* treated as missing: the HPA holds rather than act on old data */
            cma_explain_sample(cr->explain, CMA_EX_DROPPED, s, why);
            cma_log_v(4, "custom metric %s for %s %s: %s; leaving it out", cr->metric, cr->gr,
                      cr->names[k], why);
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
        rc = cma_err_set(err, CMA_ERR_NOT_FOUND,
                         "the server could not find the metric %s for %s %s%s%s", cr->metric,
                         cr->gr, cr->name, why[0] ? ": " : "", why);
    else
        rc = cma_encode_metric_value_list(ver, items, n_items, cr->metric_selector, &resp->body,
                                          err);
    return rc;
}

/* One instant query of the request through the rule's backend, kept in the arena; a vector. */
static enum cma_errc run_query(struct cma_app *app, struct custom_request *cr,
                               const struct cma_rule *rule, const char *promql, int64_t now_ms,
                               const struct cma_keep *filter, struct cma_prom_result **ret,
                               struct cma_err *err)
{
    enum cma_errc rc = cma_api_query_rule(app, rule, cr->explain, promql, now_ms, filter, ret, err);
    if (rc == CMA_OK)
        rc = cma_api_adopt(cr->arena, cma_api_free_result, *ret, err);
    if (rc == CMA_OK && (*ret)->type != CMA_PROM_VECTOR)
        rc = cma_err_set(err, CMA_ERR_BACKEND_RESPONSE,
                         "unexpected result type from prometheus for %s (want a vector); check "
                         "metricsQuery",
                         cr->metric);
    return rc;
}

/* The query's PromQL within the backend's limit (less `reserve` bytes the caller wraps it in). */
static enum cma_errc build_bounded(const struct custom_request *cr, const struct cma_rule *rule,
                                   const struct cma_query_input *in, size_t reserve,
                                   struct cma_buf *promql, struct cma_buf *res_label,
                                   struct cma_err *err)
{
    size_t max = rule->backend.max_query_bytes;
    bool wide = false;
    enum cma_errc rc = cma_query_build_bounded(in, max > reserve ? max - reserve : max, promql,
                                               res_label, &wide, err);
    if (rc == CMA_OK && wide) {
        cma_explain_addf(cr->explain, CMA_EX_QUERY,
                         "the names of %zu objects would make the query longer than the "
                         "backend's limit of %zu bytes: sent without them, keeping the requested "
                         "objects from the answer",
                         cr->n_names, max);
        cma_log_v(4,
                  "custom metric %s/%s: %zu object names would pass the query limit of %zu "
                  "bytes: querying without the name matcher (%zu bytes)",
                  cr->gr, cr->metric, cr->n_names, max, promql->len);
    }
    return rc;
}

/* maxSampleAge: fills fresh->data_ms from `max by (<resource label>) (<age query>)`. */
static enum cma_errc fetch_ages(struct cma_app *app, struct custom_request *cr,
                                const struct cma_query_input *value_in, const char *label,
                                const struct cma_keep *filter, struct freshness *fresh,
                                struct cma_err *err)
{
    fresh->data_ms = cma_api_array(cr->arena, cr->n_names + 1, sizeof(*fresh->data_ms), err);
    struct cma_buf *promql = fresh->data_ms ? cma_api_buf(cr->arena, 1 << 20, err) : NULL;
    if (!promql)
        return cma_api_arena_rc(cr->arena);
    struct cma_query_input in = *value_in;
    in.tmpl = fresh->rule->age_query;
    enum cma_errc rc = cma_buf_printf(promql, "max by (%s) (", label);
    size_t reserve = promql->len + 1;
    if (rc == CMA_OK)
        rc = build_bounded(cr, fresh->rule, &in, reserve, promql, NULL, err);
    if (rc == CMA_OK)
        rc = cma_buf_appendc(promql, ')');
    if (err->code == CMA_OK && rc != CMA_OK)
        cma_err_set(err, rc, "the age query: %s", cma_errc_meaning(rc));
    struct cma_prom_result *ages = NULL;
    cma_log_v(5, "custom metric %s/%s ages: %s", cr->gr, cr->metric, cma_buf_str(promql));
    if (rc == CMA_OK)
        rc =
            run_query(app, cr, fresh->rule, cma_buf_str(promql), fresh->now_ms, filter, &ages, err);
    for (size_t i = 0; rc == CMA_OK && i < ages->n_samples; i++) {
        const struct cma_sample *s = &ages->samples[i];
        const char *v = cma_sample_label(s, label);
        long k = v ? find_name(&cr->index, v) : -1;
        if (k >= 0 && s->value > 0 && s->value < 9.2e15)
            fresh->data_ms[k] = (int64_t)(s->value * 1000.0);
    }
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
        .enforce = entry->rule->owner, /* a MetricRule's: its namespace only */
    };
    struct freshness fresh = {.rule = entry->rule, .now_ms = cma_clock_wall_ms()};
    struct cma_prom_result *result = NULL;
    struct keep_names keep = {.index = &cr->index, .n = cr->n_names};
    enum cma_errc rc = cma_rule_servable(entry->rule, err); /* a rule loaded with a problem */
    if (rc == CMA_OK)
        rc = build_bounded(cr, entry->rule, &in, 0, promql, res_label, err);
    if (rc == CMA_OK)
        rc = sorted_names(cr, &keep.sorted, err);
    if (rc == CMA_OK)
        rc = index_names(cr, err);
    /* the id names exactly the objects kept, whichever form the query took */
    struct cma_keep filter = {keep_named, &keep, NULL, app->call, NULL};
    if (rc == CMA_OK) {
        keep.label = cma_buf_str(res_label);
        filter.id = cma_api_keep_id(cr->arena, keep.label, keep.sorted, NULL, keep.n);
        cma_explain_addf(cr->explain, CMA_EX_QUERY, "resource label: %s", keep.label);
        cma_log_v(5, "custom metric %s/%s: %s", cr->gr, cr->metric, cma_buf_str(promql));
        rc = run_query(app, cr, entry->rule, cma_buf_str(promql), fresh.now_ms, &filter, &result,
                       err);
    }
    if (rc == CMA_OK && entry->rule->max_sample_age_ms && entry->rule->age_query)
        rc = fetch_ages(app, cr, &in, keep.label, &filter, &fresh, err);
    if (rc == CMA_OK)
        rc = encode_samples(cr, result, cma_buf_str(res_label), &fresh, ver, resp, err);
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
        cma_api_reply_no_catalog(app, resp);
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
        /* the config's entry, else (in a namespace) a MetricRule of that namespace's */
        entry = cma_catalog_lookup_in(cat, cr.resource, namespaced, cr.metric,
                                      namespaced ? cr.namespace_ : NULL);
    }
    explain_lookup(app, cat, &cr, route, entry, namespaced);
    struct cma_discovery_pending pending;
    if (!entry && cma_api_pending_backend(app, cat, false, &pending))
        rc = cma_api_pending_error(&pending, route->metric, cr.resource ? cr.gr : route->resource,
                                   &err);
    else if (!entry)
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
