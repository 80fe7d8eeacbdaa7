/* backend_cache.h: a wrapper around backends (backend.h) that sends identical instant queries in
 * flight at the same time to the backend once (coalescing) and keeps their answers for a short
 * time (the result cache, --metrics-cache-ttl, bounded by --metrics-cache-max-bytes).
 *
 * One struct cma_backend_cache is created by main and may wrap several backends (one per
 * cma_backend_cache_wrap call); entries are keyed by (wrapped backend, PromQL, keep filter id,
 * tenant: struct cma_keep in backend.h; two tenants never share an answer), and the byte bound
 * is shared by all of them. Every operation may be called from any thread at once (one mutex
 * guards the table; the backend is called without it). Series listings are passed through,
 * never coalesced or cached.
 *
 * What a caller of the wrapped backend sees:
 * - the same answer (or the same error) as the inner backend gives for (promql, time_ms, keep),
 *   except that the answer may be one the backend gave for the same PromQL at a nearby time:
 *   the evaluation time of the request that went out (the leader), when the caller's time_ms is
 *   within the match window of it (below);
 * - its own result, holding only the series its filter keeps: the shared answer is fetched with
 *   the leader's filter (equal to every sharer's, by id), so it is no larger than what one caller
 *   needs and the decoder's memory bound holds; each caller gets a copy charged to the same byte
 *   budget as the inner backend's results (struct cma_prom_budget of the shared answer); freed
 *   with cma_prom_result_free() as usual. A filter without an id goes to the backend on its own;
 * - errors are never cached: every caller waiting on a failed query gets a copy of its error,
 *   and the next request asks the backend again.
 *
 * The match window: a request at time_ms joins a query in flight evaluated at t (the leader's
 * time_ms) when t - CMA_BACKEND_CACHE_SKEW_MS <= time_ms <= t + (time since the leader started)
 * + CMA_BACKEND_CACHE_SKEW_MS; it is served a cached answer evaluated at t when the answer is
 * younger than ttl_ms (measured from when the backend answered, on clock_ms) and
 * t - SKEW <= time_ms <= t + ttl_ms + (the query's duration) + SKEW. The handlers ask for "now",
 * so this is "every request within the TTL shares one evaluation"; a request for another time
 * (an explicit time in the past) goes to the backend. */
#ifndef CMA_BACKEND_CACHE_H
#define CMA_BACKEND_CACHE_H

#include <stddef.h>
#include <stdint.h>

#include "cma/backend.h"
#include "cma/err.h"

/* --metrics-cache-ttl's default: a third of the shortest common scrape interval (15 s), so a
 * cached answer is at most one scrape behind a fresh one (docs/operations.md, "Query cache"). */
#define CMA_BACKEND_CACHE_DEFAULT_TTL_MS 5000
/* --metrics-cache-max-bytes's default. */
#define CMA_BACKEND_CACHE_DEFAULT_MAX_BYTES ((size_t)8 << 20)
/* How far apart the "now" of two requests may be for them to share one evaluation although
 * the later one reached the cache first (threads read the clock before they get here). */
#define CMA_BACKEND_CACHE_SKEW_MS 1000

/* Monotonic milliseconds (cma_clock_mono_ms by default; tests inject their own). */
typedef int64_t (*cma_backend_cache_clock_fn)(void *ctx);

struct cma_backend_cache_config {
    int64_t ttl_ms;   /* keep answers this long; 0 = no cache, coalescing only; < 0 = 0 */
    size_t max_bytes; /* bound on the bytes of cached answers; 0 = the DEFAULT above */
    cma_backend_cache_clock_fn clock_ms; /* NULL = cma_clock_mono_ms */
    void *clock_ctx;
    /* The longest a query to any wrapped backend may take (their timeouts, which the layers
     * below enforce). A caller whose own deadline leaves at least this long sends a new shared
     * query itself (it cannot need to leave before the query ends; no thread hop); the others
     * hand it to a runner thread (backend_cache.c). 0 = always a runner. */
    int64_t query_timeout_ms;
};

/* Counters since creation (for logs, tests and the bench). */
struct cma_backend_cache_stats {
    uint64_t inner_queries; /* queries sent to a wrapped backend (leaders, and TOO_LARGE retries) */
    uint64_t coalesced;     /* requests answered by joining a query in flight */
    uint64_t hits;          /* requests answered from a cached answer */
    uint64_t evictions;     /* cached answers dropped before their TTL to stay within max_bytes */
    uint64_t left;          /* callers whose request ended (deadline, client gone) before the
                               answer of the query they waited for */
    size_t n_cached;        /* cached answers now (some may have expired and not been swept) */
    size_t bytes;           /* their bytes now */
};

struct cma_backend_cache;

/* Copies cfg. CMA_ERR_NOMEM when out of memory. Caller owns *ret: cma_backend_cache_free(). */
enum cma_errc cma_backend_cache_new(const struct cma_backend_cache_config *cfg,
                                    struct cma_backend_cache **ret, struct cma_err *reterr);
/* Frees every cached answer and wrapper. No call on a wrapped backend may be running. */
void cma_backend_cache_free(struct cma_backend_cache *c);

/* A backend that queries `inner` through the cache: *ret borrows c (the wrapper it uses is
 * owned by c and freed with it) and a copy of *inner (whose context must outlive c). Its name
 * is inner's. CMA_ERR_NOMEM when out of memory, CMA_ERR_INTERNAL for a NULL or empty inner. */
enum cma_errc cma_backend_cache_wrap(struct cma_backend_cache *c, const struct cma_backend *inner,
                                     struct cma_backend *ret, struct cma_err *reterr);

/* Fills *ret with the current counters. */
void cma_backend_cache_stats(struct cma_backend_cache *c, struct cma_backend_cache_stats *ret);

/* A copy of src holding only the samples keep() accepts (keep NULL: all; a scalar is always
 * kept), charged to src's budget (none when src has none): CMA_ERR_TOO_LARGE when the copy alone
 * needs more than the budget's ceiling, CMA_ERR_TOO_MANY_REQUESTS when what others hold leaves
 * too little (the decoder's own rules, prom.h). Caller owns *ret: cma_prom_result_free(). */
enum cma_errc cma_prom_result_filter(const struct cma_prom_result *src, cma_sample_keep_fn keep,
                                     void *keep_ctx, struct cma_prom_result **ret,
                                     struct cma_err *reterr);

#endif
