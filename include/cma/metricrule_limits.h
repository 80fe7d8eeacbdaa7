/* metricrule_limits.h: the administrator's per-namespace controls over MetricRules as pure
 * decisions (docs/metric-rules.md, "Limits"): whether a namespace may define MetricRules at all
 * (--metric-rules-namespace-selector over the Namespace's labels), which of a namespace's
 * MetricRules are admitted under --metric-rules-max-per-namespace and
 * --metric-rules-max-metrics-per-namespace (the oldest first), and the time limit a MetricRule's
 * query gets under --metric-rules-max-query-timeout. No state, no I/O; thread-safe. */
#ifndef CMA_METRICRULE_LIMITS_H
#define CMA_METRICRULE_LIMITS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cma/err.h"

struct cma_selector;

/* Whether a namespace with these labels may define MetricRules: `sel` is the parsed
 * --metric-rules-namespace-selector (NULL or empty = every namespace). names[i] = values[i];
 * borrowed. A namespace whose labels are not known (not in the cache yet) is the caller's
 * decision: pass n = 0 to test it as unlabelled. Without labels in hand, a watch cache of
 * Namespaces gives the same answer for every namespace at once:
 * cma_objcache_registry_get(reg, "", "v1", "namespaces") then cma_objcache_list_names(c, NULL,
 * sel, ...) lists the allowed ones (metricrule_limits_test checks that the two agree). */
bool cma_metricrule_namespace_is_allowed(const struct cma_selector *sel, const char *const *names,
                                         const char *const *values, size_t n);

/* One MetricRule of a namespace, as the admission needs it. Borrowed. */
struct cma_metricrule_candidate {
    const char *name;
    int64_t creation_ms; /* metadata.creationTimestamp */
    /* false: it was refused before the limits (InvalidSpec, BackendNotAllowed, ...). It takes
     * no slot and its decision is CMA_METRICRULE_ADMIT_NOT_ELIGIBLE. */
    bool eligible;
    size_t n_metrics; /* the distinct metrics it serves, counted after discovery */
};

enum cma_metricrule_admission {
    CMA_METRICRULE_ADMIT_ACCEPTED,
    CMA_METRICRULE_ADMIT_TOO_MANY_RULES,   /* over --metric-rules-max-per-namespace */
    CMA_METRICRULE_ADMIT_TOO_MANY_METRICS, /* over --metric-rules-max-metrics-per-namespace */
    CMA_METRICRULE_ADMIT_NOT_ELIGIBLE,
};

struct cma_metricrule_limits {
    size_t max_per_namespace;         /* 0 = no limit */
    size_t max_metrics_per_namespace; /* 0 = no limit */
};

/* Orders candidates oldest first: creation time, then name (bytewise), the order in which
 * MetricRules of one namespace win slots and conflicts. Equal ones keep no particular order. */
int cma_metricrule_candidate_cmp(const struct cma_metricrule_candidate *a,
                                 const struct cma_metricrule_candidate *b);

/* Decides c[0..n) of ONE namespace (any order; they are visited oldest first by
 * cma_metricrule_candidate_cmp) into ret[0..n) (ret[i] is c[i]'s decision):
 * - a candidate that is not eligible: NOT_ELIGIBLE, takes nothing;
 * - else, once max_per_namespace candidates are accepted: TOO_MANY_RULES;
 * - else, when its metrics would take the accepted ones' total over max_metrics_per_namespace:
 *   TOO_MANY_METRICS (a whole rule or nothing; a newer, smaller one may still fit);
 * - else ACCEPTED.
 * *ret_n_metrics (may be NULL): the accepted candidates' metrics in all. CMA_ERR_NOMEM only. */
enum cma_errc cma_metricrule_admit(const struct cma_metricrule_limits *limits,
                                   const struct cma_metricrule_candidate *c, size_t n,
                                   enum cma_metricrule_admission *ret, size_t *ret_n_metrics,
                                   struct cma_err *reterr);

/* The time limit of a MetricRule's query: its backend's (backend_timeout_ms: the backend's
 * `timeout`, else --prometheus-timeout; <= 0 = none) clamped to max_ms
 * (--metric-rules-max-query-timeout; <= 0 = no clamp). A MetricRule cannot ask for a time limit
 * itself (the spec has no such field), so nothing is refused: a backend with a longer timeout
 * is usable, and a MetricRule's queries to it stop at max_ms. */
int64_t cma_metricrule_query_timeout_ms(int64_t backend_timeout_ms, int64_t max_ms);

#endif
