/* backend_metrics.c: the measuring backend wrapper (backend_metrics.h): each call is timed on
 * the monotonic clock, counted by endpoint and outcome, observed in the latency histogram and
 * added to the wrapper's running total, then its result is returned unchanged. */
#include "cma/backend_metrics.h"

#include <ctype.h>
#include <stdio.h>
#include <time.h>

#include "cma/metrics.h"

static int64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* "success" or the error's name in lower case ("backend_timeout"). */
static const char *outcome(enum cma_errc rc, char *out, size_t len)
{
    if (rc == CMA_OK)
        return "success";
    const char *name = cma_errc_name(rc);
    size_t i = 0;
    for (; name && name[i] && i + 1 < len; i++)
        out[i] = (char)tolower((unsigned char)name[i]);
    out[i] = '\0';
    return out;
}

static void record(struct cma_backend_measured *s, const char *endpoint, enum cma_errc rc,
                   int64_t started_ns)
{
    int64_t ns = now_ns() - started_ns;
    atomic_fetch_add_explicit(&s->busy_ns, (uint64_t)(ns > 0 ? ns : 0), memory_order_relaxed);
    atomic_fetch_add_explicit(&s->calls, 1, memory_order_relaxed);
    if (!s->requests && !s->duration)
        return;
    char buf[48];
    const char *name = cma_backend_name(&s->inner);
    cma_metric_inc(s->requests,
                   (const char *const[]){name, endpoint, outcome(rc, buf, sizeof buf)});
    cma_metric_observe(s->duration, (const char *const[]){name, endpoint}, (double)ns / 1e9);
}

static enum cma_errc measured_query(void *ctx, const char *promql, int64_t time_ms,
                                    const struct cma_keep *keep, struct cma_prom_result **ret,
                                    struct cma_err *reterr)
{
    struct cma_backend_measured *s = ctx;
    int64_t t0 = now_ns();
    enum cma_errc rc = cma_backend_query(&s->inner, promql, time_ms, keep, ret, reterr);
    record(s, "query", rc, t0);
    return rc;
}

static enum cma_errc measured_series(void *ctx, const char *match, int64_t start_ms, int64_t end_ms,
                                     const char *tenant, cma_series_fn fn, void *fn_ctx,
                                     struct cma_err *reterr)
{
    struct cma_backend_measured *s = ctx;
    int64_t t0 = now_ns();
    enum cma_errc rc =
        cma_backend_series_as(&s->inner, tenant, match, start_ms, end_ms, fn, fn_ctx, reterr);
    record(s, "series", rc, t0);
    return rc;
}

static const char *measured_name(const void *ctx)
{
    const struct cma_backend_measured *s = ctx;
    return cma_backend_name(&s->inner);
}

static const struct cma_backend_ops MEASURED_OPS = {
    .query = measured_query,
    .series = measured_series,
    .name = measured_name,
};

struct cma_backend cma_backend_measured(const struct cma_backend *inner, struct cma_metrics *m,
                                        struct cma_backend_measured *storage)
{
    static const char *const labels[] = {"backend", "endpoint", "outcome"};
    static const double bounds[] = {CMA_METRICS_KUBE_BUCKETS};
    storage->inner = inner ? *inner : (struct cma_backend){0};
    storage->requests = cma_metrics_counter(
        m, "custom_metrics_adapter_backend_requests_total",
        "Calls to the metrics backend by backend, endpoint (query, series) and outcome.", labels,
        3);
    storage->duration = cma_metrics_histogram(
        m, "custom_metrics_adapter_backend_request_duration_seconds",
        "Latency of calls to the metrics backend in seconds, by backend and endpoint.", labels, 2,
        bounds, CMA_METRICS_N_KUBE_BUCKETS);
    atomic_init(&storage->busy_ns, 0);
    atomic_init(&storage->calls, 0);
    return (struct cma_backend){.ops = &MEASURED_OPS, .ctx = storage};
}

uint64_t cma_backend_measured_busy_ns(const struct cma_backend_measured *s)
{
    return atomic_load_explicit(&((struct cma_backend_measured *)s)->busy_ns, memory_order_relaxed);
}

uint64_t cma_backend_measured_calls(const struct cma_backend_measured *s)
{
    return atomic_load_explicit(&((struct cma_backend_measured *)s)->calls, memory_order_relaxed);
}
