/* ns_limit.h: query slots per (backend, namespace) for MetricRules
 * (--metric-rules-max-concurrent-queries): a query of a namespace's MetricRule takes a slot of
 * that namespace on its backend before it is sent and gives it back after, and a namespace whose
 * slots are all taken gets CMA_ERR_TOO_MANY_REQUESTS at once (429 with Retry-After, which the HPA
 * retries at its next sync) instead of waiting, so one team's slow or numerous queries never
 * hold the backend's shared slots (backend_limit.h) that other namespaces' HPAs need.
 *
 * Not backend_limit.h: that one queues a query until its deadline for a slot of the whole
 * backend, which is right for the backend's shared bound and wrong here, where a waiting query
 * would hold a request worker on behalf of one namespace. Both apply: a query takes its
 * namespace's slot here first, then waits for a backend slot there.
 *
 * Keys are the backend's name and the namespace, copied. Idle keys are dropped when the table is
 * full (max_keys), so memory stays bounded by the keys in use. Thread-safe: one mutex, held only
 * to count. */
#ifndef CMA_NS_LIMIT_H
#define CMA_NS_LIMIT_H

#include <stddef.h>

#include "cma/err.h"

struct cma_ns_limit;

/* --metric-rules-max-concurrent-queries' default. */
#define CMA_NS_LIMIT_DEFAULT 4
/* Keys kept at most when max_keys is 0: every (backend, namespace) pair busy at once. */
#define CMA_NS_LIMIT_DEFAULT_KEYS 65536

struct cma_ns_limit_stats {
    size_t in_flight; /* slots held now, all keys */
    size_t keys;      /* keys in the table (busy or idle) */
    size_t acquired;  /* try_acquire calls that got a slot */
    size_t rejected;  /* that found the namespace's slots taken (or the table full) */
};

/* max_per_key slots per (backend, namespace) (0 = CMA_NS_LIMIT_DEFAULT); at most max_keys
 * keys at once (0 = CMA_NS_LIMIT_DEFAULT_KEYS). Caller owns: cma_ns_limit_free(). */
enum cma_errc cma_ns_limit_new(size_t max_per_key, size_t max_keys, struct cma_ns_limit **ret,
                               struct cma_err *reterr);
/* Frees it; no slot may be held any more. NULL is fine. */
void cma_ns_limit_free(struct cma_ns_limit *l);

/* Takes a slot of `namespace_` on `backend` (both non-NULL; "" is a name like any other).
 * CMA_OK: the caller holds it and must cma_ns_limit_release() it with the same names.
 * CMA_ERR_TOO_MANY_REQUESTS when the namespace already holds max_per_key there, or when
 * max_keys other keys are busy ("namespace N already runs 4 queries on backend B ..."); never
 * waits. CMA_ERR_NOMEM. */
enum cma_errc cma_ns_limit_try_acquire(struct cma_ns_limit *l, const char *backend,
                                       const char *namespace_, struct cma_err *reterr);
/* Gives back a slot taken by cma_ns_limit_try_acquire(). Releasing a slot not held is a
 * programming error; it is ignored. */
void cma_ns_limit_release(struct cma_ns_limit *l, const char *backend, const char *namespace_);

void cma_ns_limit_stats(struct cma_ns_limit *l, struct cma_ns_limit_stats *ret);

#endif
