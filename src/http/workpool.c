/* workpool.c: the bounded pool of threads that run request handlers (which block on the backend,
 * the kube API and auth webhooks), so that the event-loop threads never block.
 *
 * DESIGN
 * - No queue: a job is accepted only when a thread will run it at once (an idle one, or a new
 *   one below max_threads). A full pool refuses, and the caller answers 429 at once, rather than
 *   letting requests wait behind a hung backend while their clients time out.
 * - Threads start on demand and exit after idle_exit_ms without work, down to min_threads, so
 *   a burst costs threads (and their stacks and malloc arenas) only while it lasts.
 * - Handed-over jobs sit in a ring of max_threads slots; `waiting` counts threads parked on
 *   `work`. A job is pushed only when a parked thread or a freshly started one will pop it, so a
 *   job never waits. An idle thread that times out still takes a job that arrived meanwhile.
 * - Joins: an exiting thread marks its slot `exited`; the next start in that slot, or
 *   cma_workpool_free(), joins it. */
#include "http_internal.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <time.h>

#include "cma/clock.h"

struct job {
    cma_work_fn fn;
    void *arg;
};

struct worker_slot {
    pthread_t tid;
    bool used;   /* a thread was started here and not joined yet */
    bool exited; /* that thread returned */
};

struct cma_workpool {
    pthread_mutex_t lock;
    pthread_cond_t work; /* a job was pushed, or stopping */
    pthread_cond_t idle; /* busy dropped to 0 */
    unsigned min_threads;
    unsigned max_threads;
    int64_t idle_exit_ms;
    unsigned threads; /* alive */
    unsigned waiting; /* alive and parked on `work` */
    unsigned busy;    /* accepted jobs not finished (pushed or running) */
    struct job *ring; /* max_threads slots */
    unsigned head;
    unsigned queued;
    struct worker_slot *slots; /* max_threads */
    bool stopping;
};

struct worker_arg {
    struct cma_workpool *pool;
    unsigned slot;
};

static struct timespec mono_timespec(int64_t mono_ms)
{
    struct timespec ts;
    ts.tv_sec = (time_t)(mono_ms / 1000);
    ts.tv_nsec = (long)(mono_ms % 1000) * 1000000L;
    return ts;
}

static bool init_cond(pthread_cond_t *c)
{
    pthread_condattr_t attr;
    if (pthread_condattr_init(&attr) != 0)
        return false;
    bool ok =
        pthread_condattr_setclock(&attr, CLOCK_MONOTONIC) == 0 && pthread_cond_init(c, &attr) == 0;
    pthread_condattr_destroy(&attr);
    return ok;
}

static bool pop_job(struct cma_workpool *p, struct job *ret)
{
    if (p->queued == 0)
        return false;
    *ret = p->ring[p->head];
    p->head = (p->head + 1) % p->max_threads;
    p->queued--;
    return true;
}

/* Parks until a job arrives; false when the thread should exit instead (lock held throughout). */
static bool wait_for_job(struct cma_workpool *p, struct job *ret)
{
    for (;;) {
        if (pop_job(p, ret))
            return true;
        if (p->stopping)
            return false;
        struct timespec until = mono_timespec(cma_clock_mono_ms() + p->idle_exit_ms);
        p->waiting++;
        int rc = pthread_cond_timedwait(&p->work, &p->lock, &until);
        p->waiting--;
        if (rc == ETIMEDOUT && p->queued == 0 && p->threads > p->min_threads)
            return false;
    }
}

static void *worker_main(void *arg)
{
    struct worker_arg wa = *(struct worker_arg *)arg;
    free(arg);
    struct cma_workpool *p = wa.pool;
    pthread_mutex_lock(&p->lock);
    struct job job;
    while (wait_for_job(p, &job)) {
        pthread_mutex_unlock(&p->lock);
        job.fn(job.arg);
        pthread_mutex_lock(&p->lock);
        if (--p->busy == 0)
            pthread_cond_broadcast(&p->idle);
    }
    p->threads--;
    p->slots[wa.slot].exited = true;
    pthread_mutex_unlock(&p->lock);
    return NULL;
}

/* Starts a thread in a free slot (joining an exited one first); lock held. */
static bool start_thread(struct cma_workpool *p)
{
    for (unsigned i = 0; i < p->max_threads; i++) {
        struct worker_slot *slot = &p->slots[i];
        if (slot->used && !slot->exited)
            continue;
        if (slot->used) {
            pthread_join(slot->tid, NULL); /* it has returned: no wait */
            slot->used = false;
        }
        struct worker_arg *wa = malloc(sizeof *wa);
        if (!wa)
            return false;
        wa->pool = p;
        wa->slot = i;
        if (pthread_create(&slot->tid, NULL, worker_main, wa) != 0) {
            free(wa);
            return false;
        }
        slot->used = true;
        slot->exited = false;
        p->threads++;
        return true;
    }
    return false;
}

enum cma_errc cma_workpool_new(unsigned min_threads, unsigned max_threads, int64_t idle_exit_ms,
                               struct cma_workpool **ret, struct cma_err *reterr)
{
    if (max_threads == 0 || min_threads > max_threads || idle_exit_ms <= 0 || !ret)
        return cma_err_set(reterr, CMA_ERR_INTERNAL, "cma_workpool_new: bad arguments");
    struct cma_workpool *p = calloc(1, sizeof *p);
    if (!p)
        return cma_err_set(reterr, CMA_ERR_NOMEM, "out of memory");
    p->ring = calloc(max_threads, sizeof *p->ring);
    p->slots = calloc(max_threads, sizeof *p->slots);
    if (!p->ring || !p->slots) {
        free(p->ring);
        free(p->slots);
        free(p);
        return cma_err_set(reterr, CMA_ERR_NOMEM, "out of memory");
    }
    p->min_threads = min_threads;
    p->max_threads = max_threads;
    p->idle_exit_ms = idle_exit_ms;
    if (pthread_mutex_init(&p->lock, NULL) != 0 || !init_cond(&p->work) || !init_cond(&p->idle)) {
        free(p->ring);
        free(p->slots);
        free(p);
        return cma_err_set(reterr, CMA_ERR_INTERNAL, "cannot create the worker pool's locks");
    }
    *ret = p;
    return CMA_OK;
}

bool cma_workpool_submit(struct cma_workpool *p, cma_work_fn fn, void *arg)
{
    if (!p || !fn)
        return false;
    pthread_mutex_lock(&p->lock);
    bool ok = !p->stopping && p->busy < p->max_threads;
    /* a parked thread not yet claimed by a queued job takes it; otherwise start one */
    if (ok && p->waiting <= p->queued)
        ok = start_thread(p);
    if (ok) {
        p->ring[(p->head + p->queued) % p->max_threads] = (struct job){fn, arg};
        p->queued++;
        p->busy++;
        pthread_cond_signal(&p->work);
    }
    pthread_mutex_unlock(&p->lock);
    return ok;
}

unsigned cma_workpool_busy(struct cma_workpool *p)
{
    if (!p)
        return 0;
    pthread_mutex_lock(&p->lock);
    unsigned n = p->busy;
    pthread_mutex_unlock(&p->lock);
    return n;
}

unsigned cma_workpool_threads(struct cma_workpool *p)
{
    if (!p)
        return 0;
    pthread_mutex_lock(&p->lock);
    unsigned n = p->threads;
    pthread_mutex_unlock(&p->lock);
    return n;
}

bool cma_workpool_wait_idle(struct cma_workpool *p, int64_t deadline_mono_ms)
{
    if (!p)
        return true;
    struct timespec until = mono_timespec(deadline_mono_ms);
    pthread_mutex_lock(&p->lock);
    while (p->busy > 0 && pthread_cond_timedwait(&p->idle, &p->lock, &until) != ETIMEDOUT) {
    }
    bool idle = p->busy == 0;
    pthread_mutex_unlock(&p->lock);
    return idle;
}

void cma_workpool_free(struct cma_workpool *p)
{
    if (!p)
        return;
    pthread_mutex_lock(&p->lock);
    p->stopping = true;
    pthread_cond_broadcast(&p->work);
    pthread_mutex_unlock(&p->lock);
    for (unsigned i = 0; i < p->max_threads; i++) {
        if (p->slots[i].used)
            pthread_join(p->slots[i].tid, NULL);
    }
    pthread_cond_destroy(&p->work);
    pthread_cond_destroy(&p->idle);
    pthread_mutex_destroy(&p->lock);
    free(p->ring);
    free(p->slots);
    free(p);
}
