/* metricrule_status.h: what a MetricRule's `status` says (docs/metric-rules.md, "Status"), as
 * JSON text ready for the status subresource: observedGeneration, one `Accepted` condition
 * (metav1.Condition: type, status, reason, message, observedGeneration, lastTransitionTime) and
 * the sorted metric names it serves. The text is a function of the generation, the outcome and
 * the current status only (keys sorted, compact), so replicas that agree on the outcome write
 * the same bytes; cma_metricrule_status_needs_write() compares ignoring lastTransitionTime, so
 * a replica whose clock differs never rewrites a status only for its own transition time.
 * Pure functions; thread-safe. */
#ifndef CMA_METRICRULE_STATUS_H
#define CMA_METRICRULE_STATUS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cma/err.h"

/* The Accepted condition's reason. Every one but ACCEPTED means status "False". The names are
 * the CamelCase strings of cma_metricrule_reason_name(). */
enum cma_metricrule_reason {
    CMA_METRICRULE_REASON_ACCEPTED,              /* "Accepted": every rule loaded and served */
    CMA_METRICRULE_REASON_INVALID_SPEC,          /* "InvalidSpec": the compiler's message */
    CMA_METRICRULE_REASON_BACKEND_NOT_ALLOWED,   /* "BackendNotAllowed" */
    CMA_METRICRULE_REASON_NAMESPACE_NOT_ALLOWED, /* "NamespaceNotAllowed" (the selector) */
    CMA_METRICRULE_REASON_TOO_MANY_RULES,        /* "TooManyRules" (--metric-rules-max-per-...) */
    CMA_METRICRULE_REASON_TOO_MANY_METRICS,      /* "TooManyMetrics" */
    CMA_METRICRULE_REASON_CONFLICT,              /* "Conflict": another source serves a metric */
    CMA_METRICRULE_REASON__COUNT
};

/* "Accepted", "InvalidSpec", ...; NULL for a value out of range. */
const char *cma_metricrule_reason_name(enum cma_metricrule_reason r);
/* The reason named `name` (exactly as cma_metricrule_reason_name() spells it) into *ret; false
 * (and *ret untouched) for any other text, NULL included. */
bool cma_metricrule_reason_from_name(const char *name, enum cma_metricrule_reason *ret);

/* Caps the CRD's schema puts on status (deploy/components/metric-rules/crd.yaml). */
#define CMA_METRICRULE_STATUS_MAX_MESSAGE 32768 /* bytes of a condition's message */
#define CMA_METRICRULE_STATUS_MAX_METRICS 1000  /* entries of status.metrics */
#define CMA_METRICRULE_STATUS_MAX_METRIC_NAME 253

/* What became of one generation of a MetricRule. Borrowed for the call. */
struct cma_metricrule_outcome {
    enum cma_metricrule_reason reason;
    /* The condition's message; NULL or "" = the reason's fixed text (for ACCEPTED: "every rule
     * loaded"). For INVALID_SPEC, the compiler's "spec.rules[0].metricsQuery: 1:23: ..."; for
     * CONFLICT, cma_metricrule_status_conflict_message()'s text. Cut to
     * CMA_METRICRULE_STATUS_MAX_MESSAGE bytes at a UTF-8 boundary. */
    const char *message;
    /* The metric names served from this MetricRule, in any order, duplicates allowed (a Conflict
     * may still serve the metrics it did not lose). Written sorted (bytewise) and deduplicated;
     * names over 253 bytes are left out and the list is cut at 1000, as the schema requires. */
    const char *const *metrics;
    size_t n_metrics;
};

/* The status JSON for `generation` (metadata.generation) and `o`:
 *   {"conditions":[{"lastTransitionTime":T,"message":M,"observedGeneration":G,"reason":R,
 *     "status":"True"|"False","type":"Accepted"}],"metrics":[...],"observedGeneration":G}
 * T is the current status' Accepted lastTransitionTime when its `status` is the same (the
 * Kubernetes rule: the time moves only when status changes, not on a new reason or message),
 * else now_ms as RFC 3339 seconds in UTC. current_status_json: the object's `status` as JSON
 * text (NULL, "" or "null" when it has none; an undecodable one counts as none).
 * Caller owns *ret_json (free()). Errors: CMA_ERR_NOMEM; CMA_ERR_INTERNAL for a reason out of
 * range or a negative generation. */
enum cma_errc cma_metricrule_status_build(int64_t generation,
                                          const struct cma_metricrule_outcome *o,
                                          const char *current_status_json, int64_t now_ms,
                                          char **ret_json, struct cma_err *reterr);

/* Whether the object's status (current_status_json, as above) must be replaced by new_json
 * (cma_metricrule_status_build()'s text): false when both are equal as JSON values once every
 * condition's lastTransitionTime is removed (key order and spacing never matter). Errors:
 * CMA_ERR_INTERNAL when new_json does not decode; CMA_ERR_NOMEM. */
enum cma_errc cma_metricrule_status_needs_write(const char *current_status_json,
                                                const char *new_json, bool *ret,
                                                struct cma_err *reterr);

/* Who serves a metric a MetricRule also defines (the Conflict's winner). Borrowed. */
struct cma_metricrule_winner {
    /* The config file's rule: file (non-NULL) and its 1-based line and column. */
    const char *file;
    unsigned line, column;
    /* Else the older MetricRule of the same namespace. */
    const char *namespace_, *name;
};

/* The Conflict message for `metric` (e.g. "pods/queue_depth", as the caller names it):
 *   "pods/queue_depth is served by the config file's rule config.yaml:12:5"
 *   "pods/queue_depth is served by MetricRule shop/older"
 * Caller owns *ret (free()). CMA_ERR_NOMEM; CMA_ERR_INTERNAL when w names neither. */
enum cma_errc cma_metricrule_status_conflict_message(const char *metric,
                                                     const struct cma_metricrule_winner *w,
                                                     char **ret, struct cma_err *reterr);

#endif
