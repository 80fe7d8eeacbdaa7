/* query.h: renders the PromQL for one request from a rule's metricsQuery template, exactly as
 * prometheus-adapter's Build/BuildExternal do (reference section 4): .Series, .LabelMatchers
 * (metric-selector matchers sorted by key, then the namespace matcher, then the resource
 * matcher), .LabelValuesByName, .GroupBy, .GroupBySlice; and, past a backend's query-length
 * limit, the same query without the object names (cma_query_build_bounded). Pure; thread-safe. */
#ifndef CMA_QUERY_H
#define CMA_QUERY_H

#include <stdbool.h>
#include <stddef.h>

#include "cma/buf.h"
#include "cma/err.h"

struct cma_rule;
struct cma_resmap;
struct cma_template;
struct cma_restmapper;
struct cma_api_resource;
struct cma_selector;
struct cma_rule_owner;

struct cma_query_input {
    const struct cma_template *tmpl; /* metricsQuery / containerQuery / nodeQuery */
    const struct cma_resmap *resmap; /* the rule's resource mapping */
    const struct cma_restmapper *mapper;
    const char *series;                      /* Prometheus series name ("" for resource rules) */
    const struct cma_api_resource *resource; /* described objects' resource; NULL = external */
    const char *namespace_;                  /* NULL or "" = no namespace matcher */
    const char *const *names;                /* object names (resource matcher) */
    size_t n_names;
    const struct cma_selector *metric_selector; /* may be NULL */
    const char *const *extra_group_by;          /* e.g. the container label */
    size_t n_extra_group_by;
    /* true: any object of the resource instead of `names`: the resource matcher is
     * label=~".+" and LabelValuesByName gives ".+" for the label (the wide form below) */
    bool any_object;
    /* A MetricRule's rule (cma_rule.owner; NULL for the config's): the rendered query is parsed,
     * every selector gets enforce->label="enforce->namespace_" (cma_promql_enforce) and the
     * printed result is what is appended; a query that cannot be so enforced is an error
     * (CMA_ERR_RULE naming the MetricRule) and nothing is appended. */
    const struct cma_rule_owner *enforce;
};

/* Appends the rendered PromQL to `promql`; the resource label used for the objects goes to
 * `resource_label` (may be NULL; left empty for external queries). Errors:
 * CMA_ERR_BAD_SELECTOR (gt/lt), CMA_ERR_RULE (no label for namespaces or the resource; empty
 * render "empty query produced by metrics query template"), CMA_ERR_TEMPLATE_EXEC. */
enum cma_errc cma_query_build(const struct cma_query_input *in, struct cma_buf *promql,
                              struct cma_buf *resource_label, struct cma_err *reterr);

/* cma_query_build() held to a backend's query-length limit: when the PromQL with the names of
 * more than one object is longer than max_bytes (0 = no limit), it is rendered again in the wide
 * form (any_object: namespace and metric-selector matchers, and the resource label required to
 * be non-empty), and *wide says so; the caller keeps only the requested objects from the answer
 * (its keep filter). The wide form may still be longer than max_bytes (a long metric selector):
 * the backend then refuses it with its own message. Same errors as cma_query_build(). */
enum cma_errc cma_query_build_bounded(const struct cma_query_input *in, size_t max_bytes,
                                      struct cma_buf *promql, struct cma_buf *resource_label,
                                      bool *wide, struct cma_err *reterr);

#endif
