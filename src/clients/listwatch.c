/* listwatch.c: the LIST+WATCH driver the watch caches share (internal.h): one thread per cache
 * that LISTs through its owner, WATCHes from the owner's resourceVersion (cma_kube_watch) and
 * hands each event line back, re-lists on 410 Gone, backs off after failures, and stops on
 * request, even in the middle of a sleep or a watch.
 *
 * DESIGN: the owner (objcache.c, metricrule_watch.c) keeps its objects, its resourceVersion and
 * its events to report; the driver keeps only the loop's state: whether a LIST is due and the
 * backoff. The backoff starts at backoff_first_ms, doubles after each failed LIST or watch up
 * to backoff_max_ms, is jittered ±20 % so that many caches do not retry in step, and goes back to
 * the start after a successful LIST or a watch that applied an event. A watch that ends cleanly
 * after applying events (timeoutSeconds) is opened again at once; one that met 410 Gone re-lists
 * at once; any other end is the owner's to judge (its answer to the WATCH_FAILED report:
 * reconnect, re-list or stop, after the backoff), since a refused watch means different things to
 * different owners. Stop sets a
 * flag the watch polls (should_stop) and wakes the backoff sleep through a condition variable on
 * the monotonic clock. */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cma/clock.h"
#include "cma/kube.h"
#include "internal.h"

#define RV_MAX 128
#define WATCH_TIMEOUT_S 300
#define BACKOFF_FIRST_MS 200
#define BACKOFF_MAX_MS 30000

/* What the loop does after a step. */
enum outcome {
    OUT_STOP,         /* end the thread */
    OUT_WATCH_NOW,    /* watch again at once */
    OUT_RELIST_NOW,   /* LIST at once */
    OUT_WATCH_LATER,  /* back off, then watch again */
    OUT_RELIST_LATER, /* back off, then LIST */
};

enum cma_errc cma_listwatch_init(struct cma_listwatch *lw, struct cma_kube *kube, const char *group,
                                 const char *version, const char *resource,
                                 const struct cma_listwatch_ops *ops, void *ctx,
                                 struct cma_err *reterr)
{
    memset(lw, 0, sizeof(*lw));
    pthread_condattr_t attr;
    if (pthread_condattr_init(&attr) != 0)
        return cma_err_set(reterr, CMA_ERR_INTERNAL, "cannot create the watch of %s", resource);
    bool cond = pthread_condattr_setclock(&attr, CLOCK_MONOTONIC) == 0 &&
                pthread_cond_init(&lw->wait_cond, &attr) == 0;
    pthread_condattr_destroy(&attr);
    if (!cond)
        return cma_err_set(reterr, CMA_ERR_INTERNAL, "cannot create the watch of %s", resource);
    if (pthread_mutex_init(&lw->wait_lock, NULL) != 0) {
        pthread_cond_destroy(&lw->wait_cond);
        return cma_err_set(reterr, CMA_ERR_INTERNAL, "cannot create the watch of %s", resource);
    }
    lw->kube = kube;
    lw->group = group;
    lw->version = version;
    lw->resource = resource;
    lw->ops = *ops;
    lw->ctx = ctx;
    lw->backoff_first_ms = BACKOFF_FIRST_MS;
    lw->backoff_max_ms = BACKOFF_MAX_MS;
    atomic_init(&lw->stop, false);
    atomic_init(&lw->watches, 0);
    return CMA_OK;
}

void cma_listwatch_stop(struct cma_listwatch *lw)
{
    pthread_mutex_lock(&lw->wait_lock);
    atomic_store(&lw->stop, true);
    pthread_cond_broadcast(&lw->wait_cond);
    pthread_mutex_unlock(&lw->wait_lock);
    if (lw->started) {
        pthread_join(lw->thread, NULL);
        lw->started = false;
    }
}

void cma_listwatch_done(struct cma_listwatch *lw)
{
    cma_listwatch_stop(lw);
    pthread_cond_destroy(&lw->wait_cond);
    pthread_mutex_destroy(&lw->wait_lock);
}

size_t cma_listwatch_watches(struct cma_listwatch *lw)
{
    return atomic_load(&lw->watches);
}

/* Waits ms or until stopped; true when stopped. */
static bool sleep_or_stop(struct cma_listwatch *lw, int64_t ms)
{
    struct timespec until;
    clock_gettime(CLOCK_MONOTONIC, &until);
    until.tv_sec += (time_t)(ms / 1000);
    until.tv_nsec += (long)(ms % 1000) * 1000000L;
    if (until.tv_nsec >= 1000000000L) {
        until.tv_sec++;
        until.tv_nsec -= 1000000000L;
    }
    pthread_mutex_lock(&lw->wait_lock);
    while (!atomic_load(&lw->stop)) {
        if (pthread_cond_timedwait(&lw->wait_cond, &lw->wait_lock, &until) == ETIMEDOUT)
            break;
    }
    bool stopped = atomic_load(&lw->stop);
    pthread_mutex_unlock(&lw->wait_lock);
    return stopped;
}

/* ms ± 20 %. */
static int64_t jitter(int64_t ms, unsigned *seed)
{
    int64_t span = ms / 5;
    if (span <= 0)
        return ms;
    return ms - span + (int64_t)(rand_r(seed) % (unsigned)(2 * span + 1));
}

/* One watch stream's state, for the handler. */
struct watch_run {
    struct cma_listwatch *lw;
    bool gone;      /* an ERROR event with code 410 */
    bool got_event; /* an event was applied */
};

static enum cma_errc on_line(void *ctx, const char *line, size_t len, struct cma_err *reterr)
{
    struct watch_run *wr = ctx;
    bool gone = false;
    enum cma_errc rc = wr->lw->ops.apply(wr->lw->ctx, line, len, &gone, reterr);
    if (rc == CMA_OK && gone) {
        wr->gone = true;
        return cma_err_set(reterr, CMA_ERR_KUBE_ERROR, "resourceVersion expired (410)");
    }
    if (rc == CMA_OK)
        wr->got_event = true;
    return rc;
}

static bool should_stop(void *ctx)
{
    const struct watch_run *wr = ctx;
    return atomic_load(&wr->lw->stop) || wr->gone;
}

/* One LIST through the owner; false when it failed (reported with the coming backoff). */
static bool list_step(struct cma_listwatch *lw, int64_t backoff)
{
    struct cma_err err;
    cma_err_clear(&err);
    if (lw->ops.list(lw->ctx, &err) == CMA_OK)
        return true;
    struct cma_listwatch_report r = {
        .kind = CMA_LISTWATCH_LIST_FAILED, .retry_ms = backoff, .err = &err};
    lw->ops.report(lw->ctx, &r);
    return false;
}

/* One WATCH from the owner's resourceVersion; *backoff is reset when it applied an event. */
static enum outcome watch_step(struct cma_listwatch *lw, int64_t *backoff)
{
    char rv[RV_MAX];
    lw->ops.resource_version(lw->ctx, rv, sizeof(rv));
    atomic_fetch_add(&lw->watches, 1);
    struct watch_run wr = {.lw = lw};
    struct cma_kube_watch_handler h = {.on_line = on_line, .should_stop = should_stop, .ctx = &wr};
    struct cma_err err;
    cma_err_clear(&err);
    long status = 0;
    enum cma_errc rc = cma_kube_watch(lw->kube, lw->group, lw->version, lw->resource, rv,
                                      WATCH_TIMEOUT_S, &h, &status, &err);
    if (atomic_load(&lw->stop))
        return OUT_STOP;
    if (wr.gone || status == 410) {
        struct cma_listwatch_report r = {.kind = CMA_LISTWATCH_GONE, .resource_version = rv};
        lw->ops.report(lw->ctx, &r);
        return OUT_RELIST_NOW;
    }
    if (wr.got_event)
        *backoff = lw->backoff_first_ms;
    if (rc == CMA_OK && wr.got_event)
        return OUT_WATCH_NOW; /* a clean end (timeoutSeconds) */
    struct cma_listwatch_report r = {.kind = CMA_LISTWATCH_WATCH_FAILED,
                                     .status = status,
                                     .retry_ms = *backoff,
                                     .err = rc == CMA_OK ? NULL : &err};
    switch (lw->ops.report(lw->ctx, &r)) {
    case CMA_LISTWATCH_STOP:
        return OUT_STOP;
    case CMA_LISTWATCH_RELIST:
        return OUT_RELIST_LATER;
    case CMA_LISTWATCH_RECONNECT:
    default:
        return OUT_WATCH_LATER;
    }
}

static void *thread_main(void *arg)
{
    struct cma_listwatch *lw = arg;
    unsigned seed = (unsigned)cma_clock_mono_ms() ^ (unsigned)(uintptr_t)lw;
    int64_t backoff = lw->backoff_first_ms;
    bool need_list = true;
    while (!atomic_load(&lw->stop)) {
        enum outcome next = OUT_RELIST_LATER;
        if (!need_list || list_step(lw, backoff)) {
            if (need_list) /* a LIST went through */
                backoff = lw->backoff_first_ms;
            next = watch_step(lw, &backoff);
        }
        if (next == OUT_STOP)
            break;
        need_list = next == OUT_RELIST_NOW || next == OUT_RELIST_LATER;
        if (next == OUT_WATCH_NOW || next == OUT_RELIST_NOW)
            continue;
        if (sleep_or_stop(lw, jitter(backoff, &seed)))
            break;
        backoff = backoff * 2 > lw->backoff_max_ms ? lw->backoff_max_ms : backoff * 2;
    }
    return NULL;
}

enum cma_errc cma_listwatch_start(struct cma_listwatch *lw, struct cma_err *reterr)
{
    if (lw->started)
        return CMA_OK;
    if (pthread_create(&lw->thread, NULL, thread_main, lw) != 0)
        return cma_err_set(reterr, CMA_ERR_INTERNAL, "cannot start the watch thread of %s",
                           lw->resource);
    lw->started = true;
    return CMA_OK;
}
