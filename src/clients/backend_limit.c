/* backend_limit.c: the concurrency bound on one backend's instant queries (backend_limit.h): a
 * counting semaphore with a deadline, and the narrower call (deadline) each query passes down.
 *
 * DESIGN
 * - One mutex guards the counters; waiters sleep on one condition variable (CLOCK_MONOTONIC),
 *   signalled once per freed slot. A waiter sleeps at most CMA_BACKEND_LIMIT_POLL_MS at a time,
 *   so it notices its client leaving within that, and reads the (injectable) clock after each
 *   sleep to decide whether its deadline has passed: time is only ever read through clock_ms,
 *   which is what lets the unit tests decide deadlines without sleeping.
 * - Slots are not handed out in arrival order: a woken waiter competes with a newcomer. Under a
 *   steady overload some requests may wait longer than others, but each waits at most its
 *   deadline, and no bookkeeping per waiter is needed.
 * - The backend is called without the mutex; the slot is given back whatever the outcome. */
#include "cma/backend_limit.h"

#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <time.h>

#include "cma/clock.h"

struct cma_backend_limit {
    struct cma_backend inner;
    unsigned max;
    int64_t timeout_ms;
    cma_backend_limit_clock_fn clock_ms;
    void *clock_ctx;
    pthread_mutex_t mu;
    pthread_cond_t freed;
    struct cma_backend_limit_stats stats; /* under mu */
};

static int64_t mono_clock(void *ctx)
{
    (void)ctx;
    return cma_clock_mono_ms();
}

/* The deadline a query arriving at now works to: its call's, bounded by timeout_ms. */
static int64_t deadline_of(const struct cma_backend_limit *l, const struct cma_call *call,
                           int64_t now)
{
    int64_t own = l->timeout_ms > 0 ? now + l->timeout_ms : 0;
    int64_t theirs = call ? call->deadline_ms : 0;
    if (own == 0 || (theirs > 0 && theirs < own))
        return theirs;
    return own;
}

/* Sleeps on `freed` for at most ms (real time, monotonic). mu is held. */
static void wait_slice(struct cma_backend_limit *l, int64_t ms)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    ts.tv_sec += (time_t)(ms / 1000);
    ts.tv_nsec += (long)(ms % 1000) * 1000000L;
    if (ts.tv_nsec >= 1000000000L) {
        ts.tv_sec++;
        ts.tv_nsec -= 1000000000L;
    }
    int rc = pthread_cond_timedwait(&l->freed, &l->mu, &ts);
    (void)rc; /* ETIMEDOUT or a wake-up: the caller looks again either way */
}

enum outcome { GOT_SLOT, NO_SLOT, CLIENT_GONE };

/* Takes a slot, waiting until `deadline` (0: none) or until the call's client has gone. */
static enum outcome acquire(struct cma_backend_limit *l, const struct cma_call *call,
                            int64_t deadline)
{
    enum outcome out = GOT_SLOT;
    bool waited = false;
    pthread_mutex_lock(&l->mu);
    l->stats.waiting++;
    while (l->stats.in_flight >= l->max) {
        int64_t left = deadline > 0 ? deadline - l->clock_ms(l->clock_ctx) : INT64_MAX;
        if (left <= 0 || cma_call_gone(call)) {
            out = left <= 0 ? NO_SLOT : CLIENT_GONE;
            break;
        }
        waited = true;
        wait_slice(l, left < CMA_BACKEND_LIMIT_POLL_MS ? left : CMA_BACKEND_LIMIT_POLL_MS);
    }
    l->stats.waiting--;
    if (out == GOT_SLOT) {
        l->stats.in_flight++;
        if (l->stats.in_flight > l->stats.max_in_flight)
            l->stats.max_in_flight = l->stats.in_flight;
        l->stats.queries++;
        l->stats.waited += waited ? 1 : 0;
    } else if (out == NO_SLOT) {
        l->stats.rejected++;
    } else {
        l->stats.abandoned++;
    }
    pthread_mutex_unlock(&l->mu);
    return out;
}

static void release(struct cma_backend_limit *l)
{
    pthread_mutex_lock(&l->mu);
    l->stats.in_flight--;
    pthread_cond_signal(&l->freed);
    pthread_mutex_unlock(&l->mu);
}

static enum cma_errc refuse(const struct cma_backend_limit *l, enum outcome why,
                            struct cma_err *reterr)
{
    if (why == CLIENT_GONE)
        return cma_err_set(reterr, CMA_ERR_BACKEND_TIMEOUT,
                           "backend %s: query not sent: the client of the request closed its "
                           "connection while it waited for a query slot",
                           cma_backend_name(&l->inner));
    return cma_err_set(reterr, CMA_ERR_TOO_MANY_REQUESTS,
                       "backend %s: %u queries already running (--prometheus-max-concurrent-"
                       "queries) and no slot freed before the request's deadline; retry shortly",
                       cma_backend_name(&l->inner), l->max);
}

static enum cma_errc limit_query(void *ctx, const char *promql, int64_t time_ms,
                                 const struct cma_keep *keep, struct cma_prom_result **ret,
                                 struct cma_err *reterr)
{
    struct cma_backend_limit *l = ctx;
    const struct cma_call *theirs = keep ? keep->call : NULL;
    struct cma_call call = theirs ? *theirs : (struct cma_call){0};
    int64_t now = l->clock_ms(l->clock_ctx);
    call.deadline_ms = deadline_of(l, theirs, now);
    if (l->timeout_ms > 0 && call.deadline_ms == now + l->timeout_ms)
        call.window_ms = l->timeout_ms; /* ours: the backend's timeout covers wait and query */
    enum outcome got = acquire(l, theirs, call.deadline_ms);
    if (got != GOT_SLOT)
        return refuse(l, got, reterr);
    struct cma_keep narrowed = keep ? *keep : (struct cma_keep){0};
    narrowed.call = &call;
    enum cma_errc rc = cma_backend_query(&l->inner, promql, time_ms, &narrowed, ret, reterr);
    release(l);
    return rc;
}

static enum cma_errc limit_series(void *ctx, const char *match, int64_t start_ms, int64_t end_ms,
                                  const char *tenant, cma_series_fn fn, void *fn_ctx,
                                  struct cma_err *reterr)
{
    struct cma_backend_limit *l = ctx;
    return cma_backend_series_as(&l->inner, tenant, match, start_ms, end_ms, fn, fn_ctx, reterr);
}

static const char *limit_name(const void *ctx)
{
    const struct cma_backend_limit *l = ctx;
    return cma_backend_name(&l->inner);
}

static const struct cma_backend_ops LIMIT_OPS = {
    .query = limit_query,
    .series = limit_series,
    .name = limit_name,
};

static bool init_sync(struct cma_backend_limit *l)
{
    pthread_condattr_t attr;
    if (pthread_condattr_init(&attr) != 0)
        return false;
    bool ok = pthread_condattr_setclock(&attr, CLOCK_MONOTONIC) == 0 &&
              pthread_cond_init(&l->freed, &attr) == 0;
    pthread_condattr_destroy(&attr);
    if (ok && pthread_mutex_init(&l->mu, NULL) != 0) {
        pthread_cond_destroy(&l->freed);
        ok = false;
    }
    return ok;
}

enum cma_errc cma_backend_limit_new(const struct cma_backend_limit_config *cfg,
                                    const struct cma_backend *inner, struct cma_backend_limit **ret,
                                    struct cma_err *reterr)
{
    *ret = NULL;
    if (!inner || !inner->ops)
        return cma_err_set(reterr, CMA_ERR_INTERNAL, "no backend to limit");
    struct cma_backend_limit *l = calloc(1, sizeof(*l));
    if (!l)
        return cma_err_set(reterr, CMA_ERR_NOMEM, "out of memory");
    if (!init_sync(l)) {
        free(l);
        return cma_err_set(reterr, CMA_ERR_NOMEM, "out of memory (backend limiter)");
    }
    l->inner = *inner;
    l->max = cfg && cfg->max_in_flight ? cfg->max_in_flight : CMA_BACKEND_LIMIT_DEFAULT;
    l->timeout_ms = cfg ? cfg->timeout_ms : 0;
    l->clock_ms = cfg && cfg->clock_ms ? cfg->clock_ms : mono_clock;
    l->clock_ctx = cfg ? cfg->clock_ctx : NULL;
    *ret = l;
    return CMA_OK;
}

void cma_backend_limit_free(struct cma_backend_limit *l)
{
    if (!l)
        return;
    pthread_cond_destroy(&l->freed);
    pthread_mutex_destroy(&l->mu);
    free(l);
}

struct cma_backend cma_backend_limit_backend(struct cma_backend_limit *l)
{
    return (struct cma_backend){.ops = &LIMIT_OPS, .ctx = l};
}

void cma_backend_limit_stats(struct cma_backend_limit *l, struct cma_backend_limit_stats *ret)
{
    pthread_mutex_lock(&l->mu);
    *ret = l->stats;
    pthread_mutex_unlock(&l->mu);
}
