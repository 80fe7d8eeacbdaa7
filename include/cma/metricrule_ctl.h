/* metricrule_ctl.h: the MetricRule controller (--enable-metric-rules). It observes the MetricRule
 * watch (metricrule_watch.h), compiles each MetricRule when its uid, generation or spec changed
 * (metricrule.h; the previous compile is kept otherwise), checks the backends its rules name
 * against what the administrator allows, and hands out one merged ruleset: the config files'
 * rules (first, at their own indexes) followed by every accepted MetricRule's rules, each with
 * its owner (cma_rule.owner: namespace, name, the enforced label) and its enforced seriesQuery.
 * The merged ruleset goes to `publish` (main: cma_discovery_set_rules, exactly as a config
 * reload), so a request sees the whole change or none of it; a config reload hands the new
 * config ruleset here and the merge is rebuilt with the current MetricRules.
 * Within one namespace, rules of the older MetricRule (creationTimestamp, then name) come later
 * in the merged ruleset, so they win a conflict (discovery: later rules win). After each merge
 * the controller keeps each MetricRule's outcome (cma_metricrule_ctl_outcomes) for the status
 * writer. Thread-safe. */
#ifndef CMA_METRICRULE_CTL_H
#define CMA_METRICRULE_CTL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cma/err.h"
#include "cma/metricrule_limits.h"

struct cma_backend;
struct cma_catalog;
struct cma_catalog_store;
struct cma_objcache;
struct cma_selector;
struct cma_kube;
struct cma_metricrule;
struct cma_ruleset;
struct cma_metricrule_ctl;

/* Whether MetricRules may name backend i of main's table (the `metricRules:` block of a config
 * backend; [0], the flags' backend, allowed for every namespace by default). */
struct cma_metricrule_ctl_backend_policy {
    bool allowed;
    const char *const *namespaces; /* n_namespaces == 0: every namespace */
    size_t n_namespaces;
    /* metricRules.tenantFromNamespace: every call of a MetricRule's rule on this backend goes
     * with X-Scope-OrgID set to the MetricRule's namespace (cma_rule_backend.tenant) */
    bool tenant_from_namespace;
};

/* Called with each new merged ruleset (a reference the callee takes its own of, if it keeps
 * it), on the watch thread or on the thread calling cma_metricrule_ctl_set_config, one call at a
 * time (the controller's lock is held). */
typedef void (*cma_metricrule_ctl_publish_fn)(void *ctx, const struct cma_ruleset *merged);

struct cma_metricrule_ctl_config {
    const char *ns_label; /* --metric-rules-namespace-label (copied) */
    /* main's backend table, as cma_ruleset_bind_backends takes it (borrowed, for the
     * controller's lifetime), and the policy of each entry (n_backends of them; NULL: only [0]
     * allowed) */
    const char *const *backend_names;
    const struct cma_backend *queries;
    const size_t *max_query_bytes;
    const struct cma_metricrule_ctl_backend_policy *policies;
    size_t n_backends;
    cma_metricrule_ctl_publish_fn publish;
    void *ctx;
    /* --metric-rules-namespace-selector (borrowed; NULL or empty: every namespace) and the watch
     * cache of Namespaces whose labels it is matched against (borrowed; needed when the selector
     * is not empty). A MetricRule of a namespace that does not match is neither compiled nor
     * served (NamespaceNotAllowed); the status thread re-reads the cache every second, so a
     * label change on a Namespace is picked up. */
    const struct cma_selector *ns_selector;
    struct cma_objcache *namespaces;
    /* --metric-rules-max-per-namespace and --metric-rules-max-metrics-per-namespace (0: none).
     * A namespace's MetricRules are admitted oldest first (cma_metricrule_admit); the metrics
     * each serves are counted from discovery's catalog (the last count is kept while a
     * MetricRule is left out, so a refused one does not come back only because it served none). */
    struct cma_metricrule_limits limits;
    /* Discovery's catalog store (borrowed): with it, cma_metricrule_ctl_start also starts the
     * status thread, which writes each MetricRule's status once discovery has listed the
     * current merge (metricrule_status.h). NULL: no status is written. */
    struct cma_catalog_store *store;
};

/* config_rules: the config files' ruleset, bound to the backends (the controller takes a
 * reference). Nothing is published until the first update. Caller owns:
 * cma_metricrule_ctl_free(). */
enum cma_errc cma_metricrule_ctl_new(const struct cma_metricrule_ctl_config *cfg,
                                     const struct cma_ruleset *config_rules,
                                     struct cma_metricrule_ctl **ret, struct cma_err *reterr);
/* Starts the LIST+WATCH of MetricRules through kube (borrowed); every change is compiled and
 * published. With a store, also the status thread: after each change, and every second, it
 * compares the catalog serving now with the last merge (cma_metricrule_ctl_observe), and writes
 * the status of each MetricRule whose stored one differs (cma_metricrule_ctl_statuses, then
 * cma_metricrule_status_write, never on a request thread): GONE is forgotten, STALE waits for
 * the object's next resourceVersion, a refusal (403, 422: CMA_ERR_KUBE_ERROR) is logged once
 * and not retried for the same status, an unreachable API is retried with a backoff (1 s
 * doubling to 30 s). */
enum cma_errc cma_metricrule_ctl_start(struct cma_metricrule_ctl *c, struct cma_kube *kube,
                                       struct cma_err *reterr);
/* Stops the watch (if started) and frees the controller; merged rulesets handed out stay valid
 * while referenced. NULL is fine. */
void cma_metricrule_ctl_free(struct cma_metricrule_ctl *c);

/* The MetricRules as they are now (what the watch's snapshot gives; tests call it directly):
 * compiles what changed and publishes a new merged ruleset when anything did (or always, the
 * first time). */
enum cma_errc cma_metricrule_ctl_update(struct cma_metricrule_ctl *c,
                                        const struct cma_metricrule *objs, size_t n,
                                        struct cma_err *reterr);
/* A config reload: rs (bound) replaces the config part; the merge is rebuilt and published. */
enum cma_errc cma_metricrule_ctl_set_config(struct cma_metricrule_ctl *c,
                                            const struct cma_ruleset *rs, struct cma_err *reterr);
/* A new reference to the last merged ruleset (NULL before the first publish). */
const struct cma_ruleset *cma_metricrule_ctl_current(struct cma_metricrule_ctl *c);

/* What became of one MetricRule in the last merge: the status writer's input. Every pointer is
 * owned by the array (cma_metricrule_ctl_outcomes_free). */
struct cma_metricrule_ctl_outcome {
    char *namespace_, *name, *uid;
    int64_t generation;
    bool accepted;
    /* "Accepted", "InvalidSpec", "BackendNotAllowed", "NamespaceNotAllowed", "TooManyRules",
     * "TooManyMetrics", "Conflict" (the last three once discovery listed the merge) */
    char *reason;
    char *message;  /* "" when accepted; the compiler's "spec.rules[0].metricsQuery: 1:23: ..." */
    bool observed;  /* the metrics below come from a catalog of the current merge */
    char **metrics; /* the metric names it serves (sorted, once each) */
    size_t n_metrics;
};

/* A copy of the outcomes of the last update, sorted by namespace then name. */
enum cma_errc cma_metricrule_ctl_outcomes(struct cma_metricrule_ctl *c,
                                          struct cma_metricrule_ctl_outcome **ret, size_t *ret_n,
                                          struct cma_err *reterr);
void cma_metricrule_ctl_outcomes_free(struct cma_metricrule_ctl_outcome *o, size_t n);

/* Reads `cat` (discovery's snapshot): when it was built from the last merge, each merged
 * MetricRule's metrics are the catalog entries its rules serve, minus those a winner takes (the
 * config files' entry of the same resource and metric, or an older MetricRule of the namespace,
 * cma_catalog_lost_at: reason Conflict naming it); the counts then re-run the limits,
 * and a new merge is published when a MetricRule is admitted or left out. *ret_current: cat was
 * built from the last merge. The status thread calls it; tests too. */
enum cma_errc cma_metricrule_ctl_observe(struct cma_metricrule_ctl *c,
                                         const struct cma_catalog *cat, bool *ret_current,
                                         struct cma_err *reterr);

/* One status to write. */
struct cma_metricrule_ctl_status {
    char *namespace_, *name, *json;
};
/* The statuses to write for objs (the watch's snapshot, with each object's current status):
 * one for each object whose outcome is known (observed, or refused before the merge) and whose
 * stored status differs (cma_metricrule_status_needs_write) from what the outcome says, built at
 * now_ms. Caller: cma_metricrule_ctl_statuses_free. */
enum cma_errc cma_metricrule_ctl_statuses(struct cma_metricrule_ctl *c,
                                          const struct cma_metricrule *objs, size_t n,
                                          int64_t now_ms, struct cma_metricrule_ctl_status **ret,
                                          size_t *ret_n, struct cma_err *reterr);
void cma_metricrule_ctl_statuses_free(struct cma_metricrule_ctl_status *s, size_t n);
/* Re-reads the Namespaces' labels (cfg.namespaces) and re-evaluates the MetricRules when the set
 * of allowed namespaces changed (objs: the current MetricRules). The status thread calls it. */
enum cma_errc cma_metricrule_ctl_recheck_namespaces(struct cma_metricrule_ctl *c,
                                                    const struct cma_metricrule *objs, size_t n,
                                                    struct cma_err *reterr);

#endif
