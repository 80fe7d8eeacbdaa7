/* metricrule_status_write.h: writes a MetricRule's status (metricrule_status.h builds it)
 * through the status subresource: PATCH
 * /apis/metrics.custom-metrics-adapter.dev/v1alpha1/namespaces/N/metricrules/NAME/status with
 * Content-Type application/merge-patch+json and the body {"status":STATUS}.
 *
 * Why a merge patch without a resourceVersion: the status is a function of what every replica
 * sees (the spec's generation, the config, the namespace's MetricRules), so a concurrent write
 * by another replica writes the same thing, and the caller writes only when the stored status
 * differs (cma_metricrule_status_needs_write()). A PUT needs the whole object at its current
 * resourceVersion and turns every concurrent write, even an identical one, into a 409 to re-read
 * and retry; the patch replaces exactly status' three fields (a merge patch replaces lists
 * whole) and leaves everything else alone. The request is bounded by the kube client's timeout
 * (cma_kube_new's timeout_ms, 10 s by default). Thread-safe (the kube client is). */
#ifndef CMA_METRICRULE_STATUS_WRITE_H
#define CMA_METRICRULE_STATUS_WRITE_H

#include "cma/err.h"

struct cma_kube;

enum cma_metricrule_write {
    CMA_METRICRULE_WRITE_DONE,  /* 2xx: stored (or already equal: the API server skips no-ops) */
    CMA_METRICRULE_WRITE_GONE,  /* 404: the object was deleted; nothing to retry */
    CMA_METRICRULE_WRITE_STALE, /* 409: changed meanwhile; recompute from the next watch event */
};

/* Writes status_json (a JSON object's text, borrowed) as the status of MetricRule
 * namespace_/name. *ret says which of the answers above came back (CMA_OK). Errors:
 * CMA_ERR_KUBE_UNAVAILABLE (unreachable, timed out, 429 or 5xx: retry later with a backoff),
 * CMA_ERR_KUBE_ERROR (401, 403, 415, 422 ...: the message has the API server's; retrying will
 * not help until the RBAC, the CRD or this adapter changes), CMA_ERR_INTERNAL (a namespace or
 * name that is not a DNS name, an empty status), CMA_ERR_NOMEM. */
enum cma_errc cma_metricrule_status_write(struct cma_kube *k, const char *namespace_,
                                          const char *name, const char *status_json,
                                          enum cma_metricrule_write *ret, struct cma_err *reterr);

#endif
