/* conntrack.c: absolute deadlines for the TLS handshake, for receiving a request, and for
 * keep-alive, per connection, enforced by one sweeper thread (contract in http_internal.h).
 *
 * DESIGN
 * - libmicrohttpd's own timeout is an inactivity timeout: a client that sends one byte before
 *   it runs out keeps its connection for ever. Here every deadline is fixed when its phase
 *   starts and is never extended.
 * - Each phase with a deadline has its own list, and every entry in a list got the same
 *   duration, so appending keeps each list sorted by deadline: the sweeper only looks at the
 *   three heads (O(1) per cut, no scan of idle connections).
 * - Cutting is shutdown(fd, SHUT_RDWR), never close(): the owner's event loop sees end-of-file,
 *   closes the connection through its normal path and then calls cma_conntrack_remove(). The
 *   owner removes an entry (under `lock`) before it closes the descriptor, and the sweeper
 *   shuts a descriptor down only under `lock` while the entry is listed, so a descriptor number
 *   reused by a newer connection is never touched.
 * - At max_open live connections a newcomer takes the slot of the oldest connection that has no
 *   request in progress (unfinished handshakes first, then unfinished requests, then idle
 *   keep-alive): whoever holds slots without using them cannot keep new clients out. The
 *   owner's own hard limit sits above max_open, so the newcomer is accepted to begin with.
 * - The sweeper sleeps until the earliest head deadline (at most a second); an append whose
 *   deadline comes before that wake-up (sleep_until) wakes it so a shorter deadline is not
 *   missed, and no other append does: most requests never wake it. Cuts are counted and reported as
 * one event a second at most (a flood of slow clients must not flood the log); the tracker does not
 * log: the owner's on_event callback does (server.c). */
#include "http_internal.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <time.h>

#include "cma/clock.h"

#define SWEEP_MAX_SLEEP_MS 1000
#define LOG_INTERVAL_MS 1000

enum list_id { L_HANDSHAKE, L_HEADERS, L_IDLE, L_COUNT, L_NONE = L_COUNT };

struct cma_conn {
    struct cma_conntrack *t;
    int fd;
    void *owner;
    enum cma_conn_phase phase;
    int64_t deadline_ms;
    struct cma_conn *prev;
    struct cma_conn *next;
};

struct conn_list {
    struct cma_conn *head;
    struct cma_conn *tail;
};

struct cma_conntrack {
    struct cma_conntrack_config cfg;
    pthread_mutex_t lock;
    pthread_cond_t wake;  /* the sweeper: stop, or a deadline earlier than sleep_until */
    pthread_cond_t empty; /* `open` dropped to 0 */
    struct conn_list lists[L_COUNT];
    size_t open;
    size_t busy;
    size_t cut_pending; /* cut, not yet removed by the owner */
    uint64_t cut_deadline;
    uint64_t cut_drain;
    uint64_t cut_evict;
    uint64_t cut_logged[L_COUNT]; /* deadline cuts per phase not yet logged */
    uint64_t evict_logged;        /* evictions not yet logged */
    int64_t sleep_until; /* when the waiting sweeper looks again; INT64_MIN while it is awake */
    bool draining;
    bool stopping;
    bool sweeper_started;
    pthread_t sweeper;
};

/* Hands ev to the owner's callback; call without the lock. */
static void report(const struct cma_conntrack *t, const struct cma_conntrack_event *ev)
{
    if (t->cfg.on_event)
        t->cfg.on_event(t->cfg.on_event_ctx, ev);
}

static enum list_id list_of(enum cma_conn_phase phase)
{
    switch (phase) {
    case CMA_CONN_HANDSHAKE:
        return L_HANDSHAKE;
    case CMA_CONN_HEADERS:
        return L_HEADERS;
    case CMA_CONN_IDLE:
        return L_IDLE;
    default:
        return L_NONE;
    }
}

static struct timespec mono_timespec(int64_t mono_ms)
{
    struct timespec ts;
    ts.tv_sec = (time_t)(mono_ms / 1000);
    ts.tv_nsec = (long)(mono_ms % 1000) * 1000000L;
    return ts;
}

static void unlink_conn(struct cma_conn *c)
{
    enum list_id id = list_of(c->phase);
    if (id == L_NONE)
        return;
    struct conn_list *l = &c->t->lists[id];
    if (c->prev)
        c->prev->next = c->next;
    else
        l->head = c->next;
    if (c->next)
        c->next->prev = c->prev;
    else
        l->tail = c->prev;
    c->prev = c->next = NULL;
}

/* Appends c to its phase's list with deadline now + duration (lock held). */
static void append_conn(struct cma_conn *c, int64_t duration_ms)
{
    struct cma_conntrack *t = c->t;
    struct conn_list *l = &t->lists[list_of(c->phase)];
    c->deadline_ms = cma_clock_mono_ms() + duration_ms;
    c->prev = l->tail;
    c->next = NULL;
    if (l->tail)
        l->tail->next = c;
    else
        l->head = c;
    l->tail = c;
    /* Only a deadline before the sweeper's wake-up needs it now: signalling every request's
     * append cost two context switches per request (the sweeper woke to find nothing to do). */
    if (c->deadline_ms < t->sleep_until)
        pthread_cond_signal(&t->wake);
}

enum cut_reason { CUT_DEADLINE, CUT_DRAIN, CUT_EVICT };

/* Shuts the descriptor down and marks c cut (lock held, c listed or busy). */
static void cut_conn(struct cma_conn *c, enum cut_reason why)
{
    struct cma_conntrack *t = c->t;
    enum list_id id = list_of(c->phase);
    unlink_conn(c);
    if (c->phase == CMA_CONN_BUSY)
        t->busy--;
    c->phase = CMA_CONN_CUT;
    t->cut_pending++;
    shutdown(c->fd, SHUT_RDWR);
    if (why == CUT_DRAIN) {
        t->cut_drain++;
    } else if (why == CUT_EVICT) {
        t->cut_evict++;
        t->evict_logged++;
    } else {
        t->cut_deadline++;
        if (id != L_NONE)
            t->cut_logged[id]++;
    }
}

/* Over max_open live connections: the oldest one without a request in progress gives its slot,
 * looking first at unfinished handshakes, then unfinished requests, then idle keep-alive (lock
 * held; `keep` is the newcomer). */
static void evict_if_full(struct cma_conntrack *t, const struct cma_conn *keep)
{
    if (t->cfg.max_open == 0 || t->open - t->cut_pending <= t->cfg.max_open)
        return;
    for (int id = 0; id < L_COUNT; id++) {
        struct cma_conn *c = t->lists[id].head;
        if (c == keep)
            c = c->next;
        if (c) {
            cut_conn(c, CUT_EVICT);
            return;
        }
    }
}

enum cma_errc cma_conntrack_new(const struct cma_conntrack_config *cfg, struct cma_conntrack **ret,
                                struct cma_err *reterr)
{
    if (!cfg || !ret || cfg->handshake_ms <= 0 || cfg->header_ms <= 0 || cfg->idle_ms < 0)
        return cma_err_set(reterr, CMA_ERR_INTERNAL, "cma_conntrack_new: bad arguments");
    struct cma_conntrack *t = calloc(1, sizeof *t);
    if (!t)
        return cma_err_set(reterr, CMA_ERR_NOMEM, "out of memory");
    t->cfg = *cfg;
    t->sleep_until = INT64_MIN; /* the sweeper sweeps before it first sleeps */
    pthread_condattr_t attr;
    bool ok = pthread_condattr_init(&attr) == 0;
    if (ok) {
        ok = pthread_condattr_setclock(&attr, CLOCK_MONOTONIC) == 0 &&
             pthread_cond_init(&t->wake, &attr) == 0 && pthread_cond_init(&t->empty, &attr) == 0;
        pthread_condattr_destroy(&attr);
    }
    if (!ok || pthread_mutex_init(&t->lock, NULL) != 0) {
        free(t);
        return cma_err_set(reterr, CMA_ERR_INTERNAL, "cannot create the connection tracker");
    }
    *ret = t;
    return CMA_OK;
}

/* Cuts every head past its deadline; returns when the sweeper should look again (lock held). */
static int64_t sweep(struct cma_conntrack *t)
{
    int64_t now = cma_clock_mono_ms();
    int64_t next = now + SWEEP_MAX_SLEEP_MS;
    for (int id = 0; id < L_COUNT; id++) {
        struct conn_list *l = &t->lists[id];
        while (l->head && l->head->deadline_ms <= now)
            cut_conn(l->head, CUT_DEADLINE);
        if (l->head && l->head->deadline_ms < next)
            next = l->head->deadline_ms;
    }
    return next;
}

/* Reports the cuts of the last sweep as one event of each kind; called with the lock held,
 * reports without it. */
static void report_cuts(struct cma_conntrack *t)
{
    uint64_t n[L_COUNT];
    uint64_t total = 0;
    for (int id = 0; id < L_COUNT; id++) {
        n[id] = t->cut_logged[id];
        t->cut_logged[id] = 0;
        total += n[id];
    }
    uint64_t evicted = t->evict_logged;
    t->evict_logged = 0;
    pthread_mutex_unlock(&t->lock);
    if (total > 0)
        report(t, &(struct cma_conntrack_event){.kind = CMA_CONNTRACK_CUT_DEADLINE,
                                                .n = total,
                                                .handshake = n[L_HANDSHAKE],
                                                .request = n[L_HEADERS],
                                                .keep_alive = n[L_IDLE]});
    if (evicted > 0)
        report(t, &(struct cma_conntrack_event){.kind = CMA_CONNTRACK_EVICTED, .n = evicted});
    pthread_mutex_lock(&t->lock);
}

static bool cuts_pending(const struct cma_conntrack *t)
{
    for (int id = 0; id < L_COUNT; id++) {
        if (t->cut_logged[id] > 0)
            return true;
    }
    return t->evict_logged > 0;
}

static void *sweeper_main(void *arg)
{
    struct cma_conntrack *t = arg;
    int64_t next_log = 0;
    pthread_mutex_lock(&t->lock);
    while (!t->stopping) {
        int64_t next = sweep(t);
        if (cuts_pending(t)) {
            /* at most one report per LOG_INTERVAL_MS, however many deadlines pass */
            int64_t now = cma_clock_mono_ms();
            if (now >= next_log) {
                report_cuts(t); /* unlocks while it reports: sweep again before sleeping */
                next_log = now + LOG_INTERVAL_MS;
                continue;
            }
            if (next_log < next) {
                next = next_log;
            }
        }
        if (t->stopping)
            break;
        struct timespec until = mono_timespec(next);
        t->sleep_until = next;
        pthread_cond_timedwait(&t->wake, &t->lock, &until);
        t->sleep_until = INT64_MIN;
    }
    pthread_mutex_unlock(&t->lock);
    return NULL;
}

struct cma_conn *cma_conntrack_add(struct cma_conntrack *t, int fd, void *owner)
{
    if (!t)
        return NULL;
    struct cma_conn *c = calloc(1, sizeof *c);
    if (!c)
        return NULL;
    c->t = t;
    c->fd = fd;
    c->owner = owner;
    c->phase = CMA_CONN_HANDSHAKE;
    bool sweeper_failed = false;
    pthread_mutex_lock(&t->lock);
    if (!t->sweeper_started && !t->stopping) {
        /* the sweeper starts with the first connection: a server nobody reaches costs no
         * thread; a failure is retried with the next connection */
        t->sweeper_started = pthread_create(&t->sweeper, NULL, sweeper_main, t) == 0;
        sweeper_failed = !t->sweeper_started;
    }
    t->open++;
    append_conn(c, t->cfg.handshake_ms);
    if (t->draining)
        cut_conn(c, CUT_DRAIN);
    else
        evict_if_full(t, c);
    pthread_mutex_unlock(&t->lock);
    if (sweeper_failed)
        report(t, &(struct cma_conntrack_event){.kind = CMA_CONNTRACK_SWEEPER_FAILED, .n = 1});
    return c;
}

void cma_conntrack_set_phase(struct cma_conn *c, enum cma_conn_phase phase)
{
    if (!c || phase == CMA_CONN_HANDSHAKE || phase == CMA_CONN_CUT)
        return;
    struct cma_conntrack *t = c->t;
    pthread_mutex_lock(&t->lock);
    if (c->phase != CMA_CONN_CUT && c->phase != phase) {
        unlink_conn(c);
        if (c->phase == CMA_CONN_BUSY)
            t->busy--;
        c->phase = phase;
        if (phase == CMA_CONN_BUSY) {
            t->busy++;
        } else if (phase == CMA_CONN_HEADERS) {
            append_conn(c, t->cfg.header_ms);
        } else {
            append_conn(c, t->cfg.idle_ms + t->cfg.header_ms);
            if (t->draining)
                cut_conn(c, CUT_DRAIN);
        }
    }
    pthread_mutex_unlock(&t->lock);
}

enum cma_conn_phase cma_conntrack_phase(struct cma_conn *c)
{
    pthread_mutex_lock(&c->t->lock);
    enum cma_conn_phase phase = c->phase;
    pthread_mutex_unlock(&c->t->lock);
    return phase;
}

void *cma_conn_owner(const struct cma_conn *c)
{
    return c ? c->owner : NULL;
}

void cma_conntrack_remove(struct cma_conn *c)
{
    if (!c)
        return;
    struct cma_conntrack *t = c->t;
    pthread_mutex_lock(&t->lock);
    unlink_conn(c);
    if (c->phase == CMA_CONN_BUSY)
        t->busy--;
    if (c->phase == CMA_CONN_CUT)
        t->cut_pending--;
    if (--t->open == 0)
        pthread_cond_broadcast(&t->empty);
    pthread_mutex_unlock(&t->lock);
    free(c);
}

void cma_conntrack_drain(struct cma_conntrack *t)
{
    if (!t)
        return;
    pthread_mutex_lock(&t->lock);
    t->draining = true;
    while (t->lists[L_HANDSHAKE].head)
        cut_conn(t->lists[L_HANDSHAKE].head, CUT_DRAIN);
    while (t->lists[L_IDLE].head)
        cut_conn(t->lists[L_IDLE].head, CUT_DRAIN);
    pthread_mutex_unlock(&t->lock);
}

bool cma_conntrack_wait_empty(struct cma_conntrack *t, int64_t deadline_mono_ms)
{
    if (!t)
        return true;
    struct timespec until = mono_timespec(deadline_mono_ms);
    pthread_mutex_lock(&t->lock);
    while (t->open > 0 && pthread_cond_timedwait(&t->empty, &t->lock, &until) != ETIMEDOUT) {
    }
    bool empty = t->open == 0;
    pthread_mutex_unlock(&t->lock);
    return empty;
}

void cma_conntrack_stats(struct cma_conntrack *t, struct cma_conntrack_stats *ret)
{
    pthread_mutex_lock(&t->lock);
    ret->open = t->open;
    ret->busy = t->busy;
    ret->cut_deadline = t->cut_deadline;
    ret->cut_drain = t->cut_drain;
    ret->cut_evict = t->cut_evict;
    pthread_mutex_unlock(&t->lock);
}

void cma_conntrack_free(struct cma_conntrack *t)
{
    if (!t)
        return;
    pthread_mutex_lock(&t->lock);
    t->stopping = true;
    pthread_cond_broadcast(&t->wake);
    bool started = t->sweeper_started;
    pthread_mutex_unlock(&t->lock);
    if (started)
        pthread_join(t->sweeper, NULL);
    for (int id = 0; id < L_COUNT; id++) {
        struct cma_conn *c = t->lists[id].head;
        while (c) {
            struct cma_conn *next = c->next;
            free(c);
            c = next;
        }
        t->lists[id].head = t->lists[id].tail = NULL;
    }
    pthread_cond_destroy(&t->wake);
    pthread_cond_destroy(&t->empty);
    pthread_mutex_destroy(&t->lock);
    free(t);
}
