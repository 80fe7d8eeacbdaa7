/* backend_limit.h: a backend wrapper (cma/backend.h) that bounds the instant queries sent to
 * one backend at once (--prometheus-max-concurrent-queries), so a burst of requests, a slow
 * backend or a storm of distinct queries cannot take every query slot of Prometheus, whose own
 * engine runs at most --query.max-concurrency (20) queries and queues the rest, rule
 * evaluation included.
 *
 * One limiter per backend: main wraps each backend (the flags' one and each named one of
 * `backends:`) in its own, inside the query cache, so coalesced and cached requests never take
 * a slot; only queries that go to the backend do. Series listings (the discovery thread, one at
 * a time per backend, not run by Prometheus' query engine) pass through.
 *
 * A query waits for a slot until its call's deadline (struct cma_call in the keep filter),
 * bounded by the limiter's timeout_ms (the backend's --prometheus-timeout) from the moment it
 * arrived; whatever the wait leaves is what the query itself gets: the call passed down carries
 * that narrower deadline, so waiting and querying together take at most timeout_ms and never
 * outlive the request. No slot in time → CMA_ERR_TOO_MANY_REQUESTS (429 with Retry-After, what
 * kube-apiserver answers when it is overloaded and what client-go retries); a waiter whose
 * client has gone leaves at once (CMA_ERR_BACKEND_TIMEOUT; nobody reads the answer).
 * Thread-safe: one mutex and condition variable per limiter, never held while the backend is
 * called. */
#ifndef CMA_BACKEND_LIMIT_H
#define CMA_BACKEND_LIMIT_H

#include <stdint.h>

#include "cma/backend.h"
#include "cma/err.h"

/* --prometheus-max-concurrent-queries' default: the adapter runs 2 replicas by default, so 2 x 8
 * = 16 of Prometheus' 20 query slots at most, leaving 4 to rule evaluation and dashboards
 * (docs/operations.md, "Backend protection"). */
#define CMA_BACKEND_LIMIT_DEFAULT 8
/* While a query waits for a slot, how often it looks whether its client has gone. */
#define CMA_BACKEND_LIMIT_POLL_MS 200

/* Monotonic milliseconds (cma_clock_mono_ms by default; tests inject their own). */
typedef int64_t (*cma_backend_limit_clock_fn)(void *ctx);

struct cma_backend_limit_config {
    unsigned max_in_flight; /* queries at once; 0 = CMA_BACKEND_LIMIT_DEFAULT */
    int64_t timeout_ms;     /* wait + query at most this long; <= 0 = no bound but the call's */
    cma_backend_limit_clock_fn clock_ms; /* NULL = cma_clock_mono_ms */
    void *clock_ctx;
};

/* Counters since creation (for tests, logs and the bench). */
struct cma_backend_limit_stats {
    unsigned in_flight;     /* queries holding a slot now */
    unsigned max_in_flight; /* the most that held a slot at once */
    unsigned waiting;       /* queries waiting for a slot now */
    uint64_t queries;       /* queries that got a slot */
    uint64_t waited;        /* of which had to wait for it */
    uint64_t rejected;      /* found no slot before their deadline (429) */
    uint64_t abandoned;     /* left the wait because their client had gone */
};

struct cma_backend_limit;

/* A limiter around `inner` (copied; what it points to must outlive the limiter). CMA_ERR_NOMEM
 * when out of memory, CMA_ERR_INTERNAL for an empty inner. Caller owns *ret:
 * cma_backend_limit_free() (no call may be running then). */
enum cma_errc cma_backend_limit_new(const struct cma_backend_limit_config *cfg,
                                    const struct cma_backend *inner, struct cma_backend_limit **ret,
                                    struct cma_err *reterr);
void cma_backend_limit_free(struct cma_backend_limit *l);

/* The limited backend (borrows l). Its name is inner's. */
struct cma_backend cma_backend_limit_backend(struct cma_backend_limit *l);

void cma_backend_limit_stats(struct cma_backend_limit *l, struct cma_backend_limit_stats *ret);

#endif
