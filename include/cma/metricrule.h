/* metricrule.h: a MetricRule's spec (JSON text, as metricrule_watch.h keeps it) compiled into a
 * ruleset with the config file's compiler (rule.h), plus the checks a team's rules need before
 * they may be served: every query template rendered with representative data and the result
 * parsed as PromQL, the seriesQuery parsed, and both passed through the namespace enforcer
 * (promql.h). Errors name the spec field and, where the text has one, the line:column inside
 * that field's text: "spec.rules[0].metricsQuery: 1:23: unexpected ...". Nothing in the serving
 * path uses it yet. */
#ifndef CMA_METRICRULE_H
#define CMA_METRICRULE_H

#include <stddef.h>

#include "cma/err.h"

struct cma_ruleset;

/* One compiled MetricRule. Every pointer is owned. */
struct cma_metricrule_compiled {
    struct cma_ruleset *rules; /* rules and externalRules of the spec; owns its config */
    /* spec.rules[i].backend / spec.externalRules[i].backend; NULL = the flags' backend. These
     * are left out of the ruleset's config (the config file's backends are not known here):
     * whoever serves the rule checks and binds them. */
    char **rule_backends;
    char **external_backends;
    size_t n_rule_backends, n_external_backends; /* == n_rules, n_external_rules */
    /* The enforced text of each rule's seriesQuery and of its metricsQuery rendered with the
     * representative data (for explain and the tests), in rule order. */
    char **rule_series, **rule_queries;
    char **external_series, **external_queries;
};

/* Compiles spec_json[0..len) of a MetricRule in `namespace_`; ns_label is the label the
 * enforcer adds (`namespace`). Errors: CMA_ERR_RULE (or the config/template/regex code of the
 * underlying failure) with the message "spec.<field>: [line:column: ]<what>", no file position
 * set. Caller owns: cma_metricrule_compiled_free(). */
enum cma_errc cma_metricrule_compile(const char *namespace_, const char *ns_label,
                                     const char *spec_json, size_t len,
                                     struct cma_metricrule_compiled **ret, struct cma_err *reterr);
void cma_metricrule_compiled_free(struct cma_metricrule_compiled *c);

#endif
