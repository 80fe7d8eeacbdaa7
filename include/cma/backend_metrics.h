/* backend_metrics.h: a backend wrapper that measures every call and forwards it to the backend
 * it wraps (cma/backend.h): calls by backend, endpoint (query, series) and outcome, a latency
 * histogram per backend and endpoint, and a running total of the time spent in the wrapped
 * backend (what one request's log line reports as backend time).
 *
 *   custom_metrics_adapter_backend_requests_total{backend,endpoint,outcome}
 *   custom_metrics_adapter_backend_request_duration_seconds{backend,endpoint}
 *
 * `backend` is the wrapped backend's name (its URL; never a credential), `outcome` "success" or
 * the error's name in lower case (backend_timeout, backend_unavailable, backend_error, ...).
 * Thread-safe: the wrapper holds no lock; its storage is updated with atomics. */
#ifndef CMA_BACKEND_METRICS_H
#define CMA_BACKEND_METRICS_H

#include <stdatomic.h>
#include <stdint.h>

#include "cma/backend.h"

struct cma_metrics;
struct cma_metric;

/* The wrapper's state, owned by the caller (on its stack for one request, or next to the
 * backend it wraps for the process). private: set by cma_backend_measured(). */
struct cma_backend_measured {
    struct cma_backend inner;
    struct cma_metric *requests, *duration; /* NULL: only the time is added up */
    _Atomic uint64_t busy_ns;               /* time spent in the inner backend */
    _Atomic uint64_t calls;
};

/* A backend that calls `inner` (copied; what it points to must outlive every use) and records
 * into `m` (NULL: only the totals in `storage`). Registers the two families on first use.
 * `storage` must outlive the returned backend. */
struct cma_backend cma_backend_measured(const struct cma_backend *inner, struct cma_metrics *m,
                                        struct cma_backend_measured *storage);
/* Time spent in the wrapped backend since cma_backend_measured(), in nanoseconds, and the number
 * of calls. */
uint64_t cma_backend_measured_busy_ns(const struct cma_backend_measured *s);
uint64_t cma_backend_measured_calls(const struct cma_backend_measured *s);

#endif
