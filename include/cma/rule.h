/* rule.h: compiled, immutable rules: prometheus-adapter's DiscoveryRule split into its parts —
 * naming (seriesFilters + name.matches/as: series name ↔ API metric name), resource mapping
 * (resources.overrides/template: Prometheus label ↔ group-resource) and the metricsQuery
 * template — plus the resourceRules templates. Built by main from struct cma_config, which
 * must outlive the ruleset (or be handed to it: cma_ruleset_own_config), at start-up and at each
 * config reload; immutable, reference-counted, read concurrently by discovery and request
 * threads.
 * Compile errors carry the config position of the offending value ("file:line:column"). */
#ifndef CMA_RULE_H
#define CMA_RULE_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>

#include "cma/buf.h"
#include "cma/err.h"

struct cma_config;
struct cma_config_rule;
struct cma_config_resources;
struct cma_api_resource;
struct cma_restmapper;
struct cma_template;
struct cma_naming;
struct cma_resmap;

/* ---- naming.c ---- */

/* Compiles seriesFilters and name.matches/as of one rule. Errors: bad regex, both/neither of
 * is/isNot, matches with 2+ groups and no `as`. */
enum cma_errc cma_naming_compile(const struct cma_config_rule *cfg, struct cma_naming **ret,
                                 struct cma_err *reterr);
void cma_naming_free(struct cma_naming *n);
/* True when every seriesFilter and the implicit `is: name.matches` accept the series name
 * (unanchored search, as Go's MatchString). */
bool cma_naming_accepts(const struct cma_naming *n, const char *series, size_t len);
/* Appends the API metric name for a series name: the expansion of `as` over the leftmost match
 * of `matches` (only the expansion, as prometheus-adapter). CMA_ERR_RULE when `matches` does not
 * match or the expansion is empty or not a valid path segment. */
enum cma_errc cma_naming_metric_name(const struct cma_naming *n, const char *series, size_t len,
                                     struct cma_buf *out, struct cma_err *reterr);
/* True when `as` is a constant (no `$`): every series collapses onto one metric name. */
bool cma_naming_is_constant(const struct cma_naming *n);

/* ---- resmap.c ---- */

/* Compiles resources.overrides and resources.template. The template must use .Resource. */
enum cma_errc cma_resmap_compile(const struct cma_config_resources *cfg, struct cma_resmap **ret,
                                 struct cma_err *reterr);
void cma_resmap_free(struct cma_resmap *rm);
/* Label → resource (discovery direction): an override, else the template's reverse regex
 * (^…$, Group/Resource captured lazily) normalised through the mapper. NULL when the label
 * names no known resource. */
const struct cma_api_resource *cma_resmap_resource_for_label(const struct cma_resmap *rm,
                                                             const struct cma_restmapper *m,
                                                             const char *label, size_t len);
/* Resource → label (query direction): an override whose resource normalises to `res`, else the
 * template rendered with Group (dots and dashes → '_') and Resource (singular). CMA_ERR_RULE
 * "no label maps to <gr>" when neither exists. Appends to out. */
enum cma_errc cma_resmap_label_for_resource(const struct cma_resmap *rm,
                                            const struct cma_restmapper *m,
                                            const struct cma_api_resource *res, struct cma_buf *out,
                                            struct cma_err *reterr);
/* True when the mapping has neither overrides nor a template. */
bool cma_resmap_is_empty(const struct cma_resmap *rm);

/* ---- rule.c ---- */

enum cma_rule_kind { CMA_RULE_CUSTOM, CMA_RULE_EXTERNAL };

struct cma_backend;
struct cma_pos;

/* The backend a rule is served from (`backend: NAME`, this project's extension): its series
 * listings (discovery) and its queries (requests). */
struct cma_rule_backend {
    const char *name; /* the config's backend name; NULL = the flags' backend (--prometheus-url) */
    const struct cma_pos *pos; /* where `backend:` is (or would be) written; config-owned */
    /* Set by cma_ruleset_bind_backends() (0 and NULL until then): the backend's index in main's
     * table (0 = the flags' backend; discovery lists series from table[index]) and what the
     * request handlers query (NULL = the app's backend). */
    size_t index;
    const struct cma_backend *queries;
    /* The longest PromQL the backend takes (its maxQueryLength, else
     * --prometheus-max-query-length); 0 = no limit. The handlers render the query without the
     * object-name matcher when it would be longer (cma_query_build_bounded). */
    size_t max_query_bytes;
    /* The tenant every call for this rule is sent as (its series listing and its queries:
     * X-Scope-OrgID, cma_keep.tenant in backend.h), in place of the backend's own header: a
     * MetricRule's namespace on a backend with metricRules.tenantFromNamespace (set by the
     * MetricRule controller in a merged ruleset; borrowed from the rule's owner). NULL: the
     * backend's headers as configured (every config-file rule). */
    const char *tenant;
};

/* Who owns a rule served from a MetricRule (metricrule_ctl.h): its namespace and name, and the
 * label every query of the rule is enforced with (--metric-rules-namespace-label). The config
 * files' rules have none (cma_rule.owner NULL). */
struct cma_rule_owner {
    const char *namespace_;
    const char *name;
    const char *label;
};

/* The template a rule with maxSampleAge measures its data's age with (see cma_rule.age_query). */
#define CMA_RULE_AGE_QUERY "timestamp(<<.Series>>{<<.LabelMatchers>>})"

struct cma_rule {
    enum cma_rule_kind kind;
    size_t index; /* position in rules / externalRules */
    const struct cma_config_rule *cfg;
    const char *series_query;
    struct cma_naming *naming;
    struct cma_resmap *resmap;
    struct cma_template *metrics_query;
    bool namespaced; /* resources.namespaced (external rules only) */
    struct cma_rule_backend backend;
    /* maxSampleAge (this project's extension): 0 = none. Otherwise the data's age is measured
     * with age_query, `timestamp(<<.Series>>{<<.LabelMatchers>>})` (rendered like metricsQuery,
     * the handlers wrap it in `max by (...)`): the raw samples' own times, which instant queries
     * do not return for metricsQuery's result (it is stamped with the evaluation time). */
    long long max_sample_age_ms;
    struct cma_template *age_query;
    /* "file:line:column: ..." when prometheus-adapter would load the rule and fail its requests
     * (see cma_rule_servable); NULL when it can be served */
    char *problem;
    /* NULL for the config files' rules; a MetricRule's rule: its owner (set in a merged
     * ruleset, cma_ruleset_new_merged), whose namespace alone it serves and reads */
    const struct cma_rule_owner *owner;
};

struct cma_resource_query {
    struct cma_template *container_query; /* NULL when not set */
    struct cma_template *node_query;
    struct cma_resmap *resmap;
    const char *container_label;
};

struct cma_ruleset {
    struct cma_rule *rules; /* custom */
    size_t n_rules;
    struct cma_rule *external_rules;
    size_t n_external_rules;
    bool has_resource_rules;
    struct cma_resource_query cpu, memory;
    struct cma_rule_backend resource_backend; /* resourceRules.backend: cpu and memory alike */
    long long window_ms;
    char **warnings; /* load-time warnings for main to log ("file:line:col: ...") */
    size_t n_warnings;
    /* private: the reference count (cma_ruleset_ref) and the config freed with the ruleset */
    atomic_int refs;
    struct cma_config *owned_config;
    /* private: a merged ruleset (cma_ruleset_new_merged) frees only its arrays and calls
     * release(keep) with its last reference; the rules are shallow copies kept alive by keep */
    void (*release)(void *keep);
    void *keep;
    /* a merged ruleset: the config files' ruleset its first rules are copies of (same indexes,
     * what --catalog-cache-file persists); NULL otherwise. Set by the merge's maker. */
    const struct cma_ruleset *base;
};

/* Compiles every rule of cfg; the first error stops and carries its position. What
 * prometheus-adapter accepts but cannot serve (or that is probably a mistake) compiles, with a
 * line in `warnings` each; the config's own warnings come first. A rule whose seriesQuery is
 * empty keeps series_query "" and must be left out of discovery. */
enum cma_errc cma_ruleset_compile(const struct cma_config *cfg, struct cma_ruleset **ret,
                                  struct cma_err *reterr);
/* Lifetime: compile returns one reference. A ruleset replaced by a config reload stays alive
 * while anything built from it is (catalog snapshots hold one, requests use their catalog's),
 * so the reference count is the one part of a ruleset that changes after compile; ref and
 * unref are thread-safe (atomics). cma_ruleset_free() drops one reference (NULL is fine); the
 * last one frees the ruleset and the config it owns. */
struct cma_ruleset *cma_ruleset_ref(const struct cma_ruleset *rs);
void cma_ruleset_unref(const struct cma_ruleset *rs);
void cma_ruleset_free(struct cma_ruleset *rs);
/* A ruleset whose rules are shallow copies of other rulesets' rules (the config files' and each
 * MetricRule's: metricrule_ctl.h): arrays of n_rules and n_external_rules zeroed rules for the
 * caller to fill before it is shared, refs 1, everything else zero. With its last reference only
 * the arrays are freed and release(keep) is called (keep holds what the copies point into; not
 * called on failure). */
enum cma_errc cma_ruleset_new_merged(size_t n_rules, size_t n_external_rules,
                                     void (*release)(void *keep), void *keep,
                                     struct cma_ruleset **ret, struct cma_err *reterr);

/* Hands cfg (the config rs was compiled from) to rs: freed with the last reference. */
void cma_ruleset_own_config(struct cma_ruleset *rs, struct cma_config *cfg);

/* Binds every rule (and resourceRules) to its backend by name, before the ruleset is shared:
 * names[i], queries[i] and max_query_bytes[i] (i < n; max_query_bytes may be NULL: no limits)
 * are backend i of main's table, names[0] NULL for the flags' backend. A rule naming no backend
 * gets index 0 and queries[0]. CMA_ERR_CONFIG_VALUE
 * "file:line:column: backend \"x\" ..." when a rule names a backend not in the table (a reload
 * that adds a backend: backends are created at start-up). */
enum cma_errc cma_ruleset_bind_backends(struct cma_ruleset *rs, const char *const *names,
                                        const struct cma_backend *queries,
                                        const size_t *max_query_bytes, size_t n,
                                        struct cma_err *reterr);

/* CMA_OK when requests for the rule's metrics can be answered; otherwise CMA_ERR_RULE (500)
 * with the load-time warning that says what is wrong with the rule (file:line:column). */
enum cma_errc cma_rule_servable(const struct cma_rule *rule, struct cma_err *reterr);

/* Template data for resources.template rendering: Group and Resource. (internal to rules) */

#endif
