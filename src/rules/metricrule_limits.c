/* metricrule_limits.c: the per-namespace decisions over MetricRules: the namespace selector,
 * the admission of a namespace's MetricRules under the rule and metric limits, and the query
 * time limit (metricrule_limits.h).
 *
 * DESIGN: admission visits the candidates oldest first through a sorted array of pointers into
 * the caller's array (the caller's order and memory stay untouched) and is greedy: each
 * candidate takes a slot and its metrics if both still fit, so an older MetricRule never loses
 * its place to a newer one, and the outcome depends only on the candidates, not on the order in
 * which the watch delivered them. */
#include "cma/metricrule_limits.h"

#include <stdlib.h>
#include <string.h>

#include "cma/selector.h"

struct labels {
    const char *const *names;
    const char *const *values;
    size_t n;
};

static const char *label_lookup(void *ctx, const char *name)
{
    const struct labels *l = ctx;
    for (size_t i = 0; i < l->n; i++)
        if (l->names[i] && strcmp(l->names[i], name) == 0)
            return l->values[i] ? l->values[i] : "";
    return NULL;
}

bool cma_metricrule_namespace_is_allowed(const struct cma_selector *sel, const char *const *names,
                                         const char *const *values, size_t n)
{
    if (!sel || cma_selector_is_empty(sel))
        return true;
    struct labels l = {names, values, n};
    return cma_selector_matches(sel, label_lookup, &l);
}

int cma_metricrule_candidate_cmp(const struct cma_metricrule_candidate *a,
                                 const struct cma_metricrule_candidate *b)
{
    if (a->creation_ms != b->creation_ms)
        return a->creation_ms < b->creation_ms ? -1 : 1;
    return strcmp(a->name ? a->name : "", b->name ? b->name : "");
}

static int cmp_ptr(const void *a, const void *b)
{
    return cma_metricrule_candidate_cmp(*(const struct cma_metricrule_candidate *const *)a,
                                        *(const struct cma_metricrule_candidate *const *)b);
}

/* The decision for one eligible candidate, given what the older ones took. */
static enum cma_metricrule_admission decide(const struct cma_metricrule_limits *limits,
                                            const struct cma_metricrule_candidate *c,
                                            size_t n_accepted, size_t n_metrics)
{
    if (limits->max_per_namespace && n_accepted >= limits->max_per_namespace)
        return CMA_METRICRULE_ADMIT_TOO_MANY_RULES;
    if (limits->max_metrics_per_namespace &&
        (c->n_metrics > limits->max_metrics_per_namespace ||
         n_metrics > limits->max_metrics_per_namespace - c->n_metrics))
        return CMA_METRICRULE_ADMIT_TOO_MANY_METRICS;
    return CMA_METRICRULE_ADMIT_ACCEPTED;
}

enum cma_errc cma_metricrule_admit(const struct cma_metricrule_limits *limits,
                                   const struct cma_metricrule_candidate *c, size_t n,
                                   enum cma_metricrule_admission *ret, size_t *ret_n_metrics,
                                   struct cma_err *reterr)
{
    const struct cma_metricrule_candidate **order = calloc(n ? n : 1, sizeof(*order));
    if (!order)
        return cma_err_set(reterr, CMA_ERR_NOMEM, "out of memory");
    for (size_t i = 0; i < n; i++)
        order[i] = &c[i];
    qsort(order, n, sizeof(*order), cmp_ptr);
    size_t n_accepted = 0, n_metrics = 0;
    for (size_t k = 0; k < n; k++) {
        size_t i = (size_t)(order[k] - c);
        ret[i] = order[k]->eligible ? decide(limits, order[k], n_accepted, n_metrics)
                                    : CMA_METRICRULE_ADMIT_NOT_ELIGIBLE;
        if (ret[i] == CMA_METRICRULE_ADMIT_ACCEPTED) {
            n_accepted++;
            n_metrics += order[k]->n_metrics;
        }
    }
    free(order);
    if (ret_n_metrics)
        *ret_n_metrics = n_metrics;
    return CMA_OK;
}

int64_t cma_metricrule_query_timeout_ms(int64_t backend_timeout_ms, int64_t max_ms)
{
    if (max_ms <= 0)
        return backend_timeout_ms > 0 ? backend_timeout_ms : 0;
    if (backend_timeout_ms <= 0 || backend_timeout_ms > max_ms)
        return max_ms;
    return backend_timeout_ms;
}
