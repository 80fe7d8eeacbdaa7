/* backend.h: the one seam between the adapter and a metrics backend, used the same way by the
 * request handlers (instant queries) and the discovery thread (series listings). A backend is a
 * value — an operations table and its context — held by the app, never a global. The Prometheus
 * client (cma_backend_prom) is the first implementation; what comes next plugs in here as
 * further implementations or as wrappers around one: a backend per rule (a table of named
 * backends), coalescing identical queries in flight and a short result cache (a wrapper that
 * calls the inner backend once), and `explain` (a wrapper that records the PromQL sent).
 * Every operation may be called from any thread at once. */
#ifndef CMA_BACKEND_H
#define CMA_BACKEND_H

#include <stdbool.h>
#include <stdint.h>

#include "cma/err.h"
#include "cma/prom.h"

/* Which series of a query's answer a caller needs; a NULL filter keeps every series. `id` names
 * the filter: two filters with equal ids keep exactly the same series (the API layer uses the
 * sorted object names the request resolved to). A filter without an id is never shared with
 * another caller: the query cache sends such a query on its own. */
struct cma_keep {
    cma_sample_keep_fn fn;
    void *ctx;
    const char *id;
    const struct cma_call *call; /* the request this query serves; NULL = none (below) */
    /* The tenant this query is sent as: X-Scope-OrgID set to it, in place of any the backend's
     * own headers carry (a MetricRule's namespace on a backend with tenantFromNamespace, see
     * cma_rule_backend.tenant); NULL = the backend's headers as configured. Part of what two
     * callers must share for the query cache to give one's answer to the other. */
    const char *tenant;
};

/* What a backend call knows of the request it serves, passed down explicitly in struct cma_keep
 * (no thread-local state): the request's deadline and whether its client is still there. Each
 * layer may pass down a narrower copy (backend_limit.c bounds the deadline by the backend's
 * timeout); the transport sends the query with at most the time left and aborts it when gone()
 * says the client has closed its connection (checked from curl's progress callback, about once
 * a second while the backend is silent and at most every CMA_GONE_CHECK_MS while data flows:
 * gone() may cost a system call). Owned by the caller for the duration of the call. */
struct cma_call {
    int64_t deadline_ms;           /* on cma_clock_mono_ms(); 0 = none */
    int64_t window_ms;             /* the deadline's whole length, for messages; 0 = unknown */
    bool (*gone)(const void *ctx); /* true once the client has gone; NULL = never */
    const void *gone_ctx;
    /* Called by the transport as the query goes out (after any wait for a query slot), so a
     * caller can tell "still waiting for a slot" from "sent"; NULL = nobody asks. */
    void (*on_send)(const void *ctx);
    const void *on_send_ctx;
};

/* The least time between two gone() questions of one transfer, in milliseconds. */
#define CMA_GONE_CHECK_MS 100

/* Has the client of c's request gone? (false for a NULL call) */
static inline bool cma_call_gone(const struct cma_call *c)
{
    return c && c->gone && c->gone(c->gone_ctx);
}

/* timeout_ms bounded by the time left until c's deadline at now_ms (<= 0: already late). */
static inline int64_t cma_call_budget_ms(const struct cma_call *c, int64_t timeout_ms,
                                         int64_t now_ms)
{
    if (!c || c->deadline_ms <= 0 || c->deadline_ms - now_ms >= timeout_ms)
        return timeout_ms;
    return c->deadline_ms - now_ms;
}

struct cma_backend_ops {
    /* An instant query at time_ms; only the series keep() accepts are stored (see
     * cma_prom_query). Caller owns *ret: cma_prom_result_free(). */
    enum cma_errc (*query)(void *ctx, const char *promql, int64_t time_ms,
                           const struct cma_keep *keep, struct cma_prom_result **ret,
                           struct cma_err *reterr);
    /* The series matching `match` between start_ms and end_ms, streamed to fn (see
     * cma_prom_series), bounded by the backend's series deadline, sent as `tenant` (as
     * cma_keep.tenant; NULL = the backend's headers). */
    enum cma_errc (*series)(void *ctx, const char *match, int64_t start_ms, int64_t end_ms,
                            const char *tenant, cma_series_fn fn, void *fn_ctx,
                            struct cma_err *reterr);
    /* A name for logs and error messages (never a credential): the URL for Prometheus. */
    const char *(*name)(const void *ctx);
};

struct cma_backend {
    const struct cma_backend_ops *ops;
    void *ctx;
};

/* The Prometheus client as a backend (borrowed: `prom` must outlive every use). */
struct cma_backend cma_backend_prom(struct cma_prom *prom);

enum cma_errc cma_backend_query(const struct cma_backend *b, const char *promql, int64_t time_ms,
                                const struct cma_keep *keep, struct cma_prom_result **ret,
                                struct cma_err *reterr);
/* A series listing with the backend's own headers (tenant NULL). */
enum cma_errc cma_backend_series(const struct cma_backend *b, const char *match, int64_t start_ms,
                                 int64_t end_ms, cma_series_fn fn, void *fn_ctx,
                                 struct cma_err *reterr);
/* A series listing sent as `tenant` (NULL: as cma_backend_series). */
enum cma_errc cma_backend_series_as(const struct cma_backend *b, const char *tenant,
                                    const char *match, int64_t start_ms, int64_t end_ms,
                                    cma_series_fn fn, void *fn_ctx, struct cma_err *reterr);
const char *cma_backend_name(const struct cma_backend *b);

#endif
