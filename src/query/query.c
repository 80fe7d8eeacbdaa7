/* query.c: one request's PromQL from a rule's template, as prometheus-adapter's Build and
 * BuildExternal: matchers = metric-selector requirements (sorted by key), then namespace, then
 * the resource; LabelValuesByName maps each label to its values joined by '|'; GroupBy is the
 * resource label plus extra labels. Values are quoted with Go %q; regex values are not escaped
 * (upstream behaviour: pod names are safe, and users rely on regex pass-through).
 *
 * Bounded size: the names regex grows with the objects (about 40 bytes a pod), and backends cap
 * the query (VictoriaMetrics' -search.maxQueryLen, 16 KiB by default; a proxy's URL limit). Past
 * the limit the query is rendered in the wide form, `label=~".+"` for the resource, and the
 * caller's keep filter (which the decoder applies while it reads the answer, so memory stays
 * bounded by the requested objects) keeps the requested ones. That gives the same values as the
 * named query for every metricsQuery that computes an object's value from that object's series
 * (aggregating by <<.GroupBy>>, as prometheus-adapter's rules do); one that relates objects to
 * each other (topk, a share of a total over <<.LabelMatchers>>) would not, and neither would
 * splitting the names over several queries. One query instead of several also keeps a single
 * answer per request for the query cache.
 *
 * A MetricRule's query (in->enforce) is rendered, then parsed, given the owner's namespace
 * matcher on every selector and printed (promql.h) before it is handed back: what reaches a
 * backend for a MetricRule is always the enforced text. */
#include "cma/query.h"

#include <stdlib.h>
#include <string.h>

#include "cma/promql.h"
#include "cma/restmapper.h"
#include "cma/rule.h"
#include "cma/selector.h"
#include "cma/template.h"

#define MAX_VALUE_ENTRIES 64

struct values_by_name {
    struct cma_tfield fields[MAX_VALUE_ENTRIES];
    char *owned[MAX_VALUE_ENTRIES];
    size_t n;
};

static void values_done(struct values_by_name *v)
{
    for (size_t i = 0; i < v->n; i++)
        free(v->owned[i]);
}

/* Sets name → value (taking ownership of value), replacing an earlier entry of the same name. */
static enum cma_errc values_set(struct values_by_name *v, const char *name, char *value)
{
    if (!value)
        return CMA_ERR_NOMEM;
    for (size_t i = 0; i < v->n; i++) {
        if (strcmp(v->fields[i].name, name) == 0) {
            free(v->owned[i]);
            v->owned[i] = value;
            v->fields[i].value = cma_tv_string(value, strlen(value));
            return CMA_OK;
        }
    }
    if (v->n == MAX_VALUE_ENTRIES) {
        free(value);
        return CMA_ERR_TOO_LARGE;
    }
    v->owned[v->n] = value;
    v->fields[v->n].name = name;
    v->fields[v->n].value = cma_tv_string(value, strlen(value));
    v->n++;
    return CMA_OK;
}

static char *join(const char *const *items, size_t n)
{
    struct cma_buf b;
    cma_buf_init(&b, 0);
    for (size_t i = 0; i < n; i++)
        if ((i && cma_buf_appendc(&b, '|') != CMA_OK) || cma_buf_appends(&b, items[i]) != CMA_OK)
            return NULL;
    return cma_buf_take(&b);
}

static enum cma_errc append_matcher(struct cma_buf *out, const char *label, const char *op,
                                    const char *value)
{
    enum cma_errc rc = CMA_OK;
    if (out->len)
        rc = cma_buf_appendc(out, ',');
    if (rc == CMA_OK)
        rc = cma_buf_appends(out, label);
    if (rc == CMA_OK)
        rc = cma_buf_appends(out, op);
    if (rc == CMA_OK)
        rc = cma_promql_quote(out, value, strlen(value));
    return rc;
}

/* Drops what was appended to b after its first len bytes. */
static void buf_cut(struct cma_buf *b, size_t len)
{
    if (b->ptr && len <= b->len) {
        b->len = len;
        b->ptr[len] = '\0';
    }
}

/* Replaces promql[start..] by its enforced form (in->enforce); on failure cuts it off. */
static enum cma_errc enforce_owner(const struct cma_rule_owner *o, struct cma_buf *promql,
                                   size_t start, struct cma_err *reterr)
{
    struct cma_err inner;
    cma_err_clear(&inner);
    struct cma_promql *q = NULL;
    char *text = strndup(promql->ptr + start, promql->len - start); /* the tree may point in */
    enum cma_errc rc =
        text ? cma_promql_parse(text, promql->len - start, &q, &inner) : CMA_ERR_NOMEM;
    if (rc == CMA_OK)
        rc = cma_promql_enforce(q, o->label, o->namespace_, NULL, &inner);
    buf_cut(promql, start);
    if (rc == CMA_OK && (rc = cma_promql_print(q, promql)) != CMA_OK)
        buf_cut(promql, start);
    cma_promql_free(q);
    free(text);
    if (rc == CMA_OK)
        return CMA_OK;
    if (inner.code == CMA_OK)
        cma_err_set(&inner, rc, "%s", cma_errc_meaning(rc));
    return cma_err_set(reterr, CMA_ERR_RULE,
                       "MetricRule %s/%s: its query cannot be restricted to namespace %s, so it "
                       "is not sent: %u:%u: %s",
                       o->namespace_, o->name, o->namespace_, inner.line, inner.column, inner.msg);
}

enum cma_errc cma_query_build(const struct cma_query_input *in, struct cma_buf *promql,
                              struct cma_buf *resource_label, struct cma_err *reterr)
{
    struct cma_buf matchers, ns_label, res_label, group_by, scratch;
    struct values_by_name values = {.n = 0};
    struct cma_tfield group_items[1 + 8];
    cma_buf_init(&matchers, 0);
    cma_buf_init(&ns_label, 4096);
    cma_buf_init(&res_label, 4096);
    cma_buf_init(&group_by, 64 * 1024);
    cma_buf_init(&scratch, 0);
    enum cma_errc rc = CMA_OK;

    /* 1. metric-selector requirements, already sorted by key */
    if (in->metric_selector && !cma_selector_is_empty(in->metric_selector)) {
        rc = cma_selector_to_promql(in->metric_selector, &matchers, reterr);
        for (size_t i = 0; rc == CMA_OK && i < in->metric_selector->n_reqs; i++) {
            const struct cma_selector_req *req = &in->metric_selector->reqs[i];
            rc = values_set(&values, req->key,
                            join((const char *const *)req->values, req->n_values));
            if (rc != CMA_OK)
                cma_err_set(reterr, rc, "metric selector too large");
        }
    }
    /* 2. namespace */
    if (rc == CMA_OK && in->namespace_ && in->namespace_[0]) {
        const struct cma_api_resource *ns =
            cma_restmapper_resource_for(in->mapper, "", "namespaces");
        if (!ns)
            rc = cma_err_set(reterr, CMA_ERR_RULE,
                             "the cluster's API discovery has no namespaces resource");
        if (rc == CMA_OK)
            rc = cma_resmap_label_for_resource(in->resmap, in->mapper, ns, &ns_label, reterr);
        if (rc == CMA_OK)
            rc = append_matcher(&matchers, cma_buf_str(&ns_label), "=", in->namespace_);
        if (rc == CMA_OK)
            rc = values_set(&values, cma_buf_str(&ns_label), strdup(in->namespace_));
    }
    /* 3. the described objects */
    size_t n_group = 0;
    if (rc == CMA_OK && in->resource) {
        rc =
            cma_resmap_label_for_resource(in->resmap, in->mapper, in->resource, &res_label, reterr);
        char *names = NULL;
        if (rc == CMA_OK && !(names = in->any_object ? strdup(".+") : join(in->names, in->n_names)))
            rc = CMA_ERR_NOMEM;
        if (rc == CMA_OK)
            rc = append_matcher(&matchers, cma_buf_str(&res_label),
                                in->n_names > 1 || in->any_object ? "=~" : "=", names);
        if (rc == CMA_OK)
            rc = values_set(&values, cma_buf_str(&res_label), names);
        else
            free(names);
        if (rc == CMA_OK)
            rc = cma_buf_appends(&group_by, cma_buf_str(&res_label));
        group_items[n_group++].value = cma_tv_string(cma_buf_str(&res_label), res_label.len);
        for (size_t i = 0; rc == CMA_OK && i < in->n_extra_group_by && n_group < 9; i++) {
            rc = cma_buf_appendc(&group_by, ',');
            if (rc == CMA_OK)
                rc = cma_buf_appends(&group_by, in->extra_group_by[i]);
            group_items[n_group++].value =
                cma_tv_string(in->extra_group_by[i], strlen(in->extra_group_by[i]));
        }
    }
    for (size_t i = 0; i < n_group; i++)
        group_items[i].name = NULL;
    if (rc != CMA_OK && reterr && reterr->code == CMA_OK)
        cma_err_set(reterr, rc, "cannot build the query: %s", cma_errc_meaning(rc));

    if (rc == CMA_OK) {
        struct cma_tfield fields[] = {
            {"Series", cma_tv_string(in->series, strlen(in->series))},
            {"LabelMatchers", cma_tv_string(cma_buf_str(&matchers), matchers.len)},
            {"LabelValuesByName", cma_tv_list(CMA_TV_MAP, values.fields, values.n)},
            {"GroupBy", cma_tv_string(cma_buf_str(&group_by), group_by.len)},
            {"GroupBySlice", cma_tv_list(CMA_TV_SLICE, group_items, n_group)},
        };
        struct cma_tvalue dot = cma_tv_list(CMA_TV_STRUCT, fields, 5);
        size_t start = promql->len;
        rc = cma_template_render(in->tmpl, &dot, promql, reterr);
        if (rc == CMA_OK && promql->len == start)
            rc =
                cma_err_set(reterr, CMA_ERR_RULE, "empty query produced by metrics query template");
        if (rc == CMA_OK && in->enforce)
            rc = enforce_owner(in->enforce, promql, start, reterr);
    }
    if (rc == CMA_OK && resource_label)
        rc = cma_buf_append(resource_label, cma_buf_str(&res_label), res_label.len);
    values_done(&values);
    cma_buf_done(&matchers);
    cma_buf_done(&ns_label);
    cma_buf_done(&res_label);
    cma_buf_done(&group_by);
    cma_buf_done(&scratch);
    return rc;
}

enum cma_errc cma_query_build_bounded(const struct cma_query_input *in, size_t max_bytes,
                                      struct cma_buf *promql, struct cma_buf *resource_label,
                                      bool *wide, struct cma_err *reterr)
{
    size_t start = promql->len, label_start = resource_label ? resource_label->len : 0;
    *wide = in->any_object;
    enum cma_errc rc = cma_query_build(in, promql, resource_label, reterr);
    if (rc != CMA_OK || !max_bytes || promql->len - start <= max_bytes || !in->resource ||
        in->n_names < 2 || in->any_object)
        return rc;
    buf_cut(promql, start);
    if (resource_label)
        buf_cut(resource_label, label_start);
    struct cma_query_input w = *in;
    w.any_object = true;
    *wide = true;
    return cma_query_build(&w, promql, resource_label, reterr);
}
