/* backend_cache.c: coalescing of identical instant queries in flight and the short result cache
 * (--metrics-cache-ttl, --metrics-cache-max-bytes), as a wrapper around any backend
 * (backend_cache.h), and the filtered, budget-charged copy of a result that each caller gets.
 *
 * DESIGN
 * - One mutex guards everything mutable: the hash table of entries (chained buckets, doubled
 *   when it holds more entries than buckets), the list of cached answers in the order they were
 *   answered, the byte count and the counters. Waiters sleep on one condition variable that is
 *   broadcast whenever a query finishes (a few dozen requests at most run at once, so a wake-up
 *   of the waiters of other queries costs nothing worth a condition variable per entry).
 * - An entry is keyed by (wrapper, PromQL, keep filter id, tenant): callers share an answer only
 *   when they ask the same query through the same backend, as the same tenant (a MetricRule's
 *   namespace on a tenantFromNamespace backend: another tenant's answer holds other data), and
 *   keep the same series (struct cma_keep; a filter without an id is never shared). It is a query
 * in flight (the leader runs it with its own filter, without the mutex, so the shared answer holds
 * only the series every sharer needs and the decoder's memory bound holds) or a finished one. Once
 * finished it never changes, so callers copy from it without the mutex while they hold a reference.
 * References: one for the table, one per caller using it; the last one frees it (after the mutex is
 * released: freeing a large answer is not done under it).
 * - A successful answer is cached when ttl_ms > 0 and it fits in max_bytes: its charge to the
 *   backend's byte budget is released then (the budget bounds answers being decoded and handed
 *   out; cached answers are bounded by max_bytes instead) and it joins the newest end of the
 *   list. All entries live ttl_ms from their answer, so the oldest is the one to expire first and
 *   the one evicted first when the bound is reached. Expired entries are swept from the list head
 *   at every query. A newer answer for the same key replaces the cached one.
 * - An error is never cached: the entry leaves the table when it finishes, so the next request
 *   asks the backend again, and only the callers that waited on it get its error.
 * - A shared query belongs to no caller: a runner thread of the cache sends it (runners start on
 *   demand, are reused, and exit after RUNNER_IDLE_MS idle; when none can start, the first caller
 *   sends it itself, as a single caller would). The common case skips the hop (two thread
 *   wake-ups, 70-230 us a query on a loaded 2-core host against about 1 us without): a first
 *   caller whose own deadline outlasts the query's bound (query_timeout_ms, the backends'
 *   timeouts) can never need to leave before the query ends, so it sends the query itself,
 *   still as a shared one: it stops only when that caller's client has gone and no other caller
 *   waits. Every caller, the first included, waits for it
 *   only until its own request ends: its deadline passes (504, or 429 while the query still
 *   waits for a query slot: it was never sent) or its client goes (asked every
 *   WAIT_GONE_CHECK_MS). The query itself has no deadline but the backend's timeout (the layers
 *   below bound it) and stops when no caller waits any more (its call's gone()), so it lives as
 *   long as the caller that allows longest needs it, and a caller with ?timeout=2s fails only
 *   itself. An entry nobody waits for leaves the table at once: the next request starts afresh.
 * - The query's filter is a waiter's: the runner calls it through the entry (under the entry's
 *   filter mutex), and a waiter that leaves hands the entry another waiter's (every sharer keeps
 *   the same series), so no caller's filter is used once its request has ended. */
#include "cma/backend_cache.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cma/clock.h"
#include "cma/hash.h"
#include "cma/str.h"

#define BUDGET_FLAG "--prometheus-max-bytes-in-flight"
#define MIN_BUCKETS 64
#define MAX_TTL_MS ((int64_t)24 * 3600 * 1000) /* keeps time arithmetic far from overflow */
#define RUNNER_IDLE_MS 30000                   /* an idle runner thread exits after this */
#define WAIT_GONE_CHECK_MS 500 /* a waiter asks whether its client has gone this often */

/* A caller waiting for an entry's answer (on its own stack, listed in the entry). */
struct waiter {
    const struct cma_keep *keep; /* its filter; NULL: keeps every series */
    const struct cma_call *call; /* its request; NULL: none */
    struct waiter *next;
    bool listed; /* in the entry's list */
};

struct wrapped {
    struct cma_backend_cache *cache;
    struct cma_backend inner;
    struct wrapped *next;
};

struct entry {
    struct entry *chain;         /* next in the bucket; next garbage once out of the table */
    struct entry *older, *newer; /* the cached list */
    const struct wrapped *w;
    uint64_t hash;
    char *promql;
    char *keep_id;       /* NULL: every series kept */
    char *tenant;        /* the tenant the query is sent as (cma_keep.tenant); NULL: none */
    int64_t time_ms;     /* evaluation time: the leader's time_ms */
    int64_t started_ms;  /* clock_ms when the leader started */
    int64_t answered_ms; /* clock_ms when the backend answered */
    size_t refs;
    size_t bytes; /* what it counts against max_bytes */
    bool done, cached;
    bool in_table;
    enum cma_errc rc;
    struct cma_err *err;            /* on error (NULL: no memory to keep it) */
    struct cma_prom_result *result; /* filtered by the key's filter; NULL on error */
    struct waiter *waiters;         /* callers waiting (under the cache's mutex) */
    atomic_size_t n_waiting;        /* their number; 0 while none: the query stops */
    atomic_bool sent;               /* the transport sent the query (cma_call.on_send) */
    const struct cma_call *sender;  /* the request of a caller sending it itself; NULL: a runner */
    bool has_filter;                /* the key keeps some series (keep_id) */
    pthread_mutex_t filter_mu;      /* the runner's filter calls against a waiter leaving */
    const struct cma_keep *filter;  /* a waiter's filter the query uses; under filter_mu */
    struct entry *next_job;         /* the runners' queue */
};

struct cma_backend_cache {
    pthread_mutex_t mu;
    pthread_cond_t done_cv;
    int64_t ttl_ms;
    size_t max_bytes;
    int64_t query_timeout_ms;
    cma_backend_cache_clock_fn clock_ms;
    void *clock_ctx;
    struct entry **buckets;
    size_t n_buckets, n_entries;
    struct entry *oldest, *newest;
    struct wrapped *wrappers;
    struct cma_backend_cache_stats stats;
    /* the runners: queued queries, runner threads, idle ones; free() waits for all to exit */
    pthread_cond_t job_cv, exit_cv;
    struct entry *jobs, *last_job;
    size_t n_jobs, n_runners, n_idle;
    bool stopping;
};

/* A CLOCK_MONOTONIC time in milliseconds as pthread_cond_timedwait takes it (the condition
 * variables use that clock: cma_backend_cache_new). */
static struct timespec mono_timespec(int64_t ms)
{
    return (struct timespec){.tv_sec = (time_t)(ms / 1000), .tv_nsec = (long)(ms % 1000) * 1000000};
}

static int64_t mono_clock(void *ctx)
{
    (void)ctx;
    return cma_clock_mono_ms();
}

/* ---- the filtered copy ------------------------------------------------------------------- */

static size_t labels_bytes(const struct cma_sample *s)
{
    size_t n = s->n_labels * sizeof(struct cma_label);
    for (size_t i = 0; i < s->n_labels; i++)
        n += strlen(s->labels[i].name) + strlen(s->labels[i].value) + 2;
    return n;
}

static size_t result_bytes(const struct cma_prom_result *r)
{
    size_t n = sizeof(*r) + r->n_samples * sizeof(*r->samples);
    for (size_t i = 0; i < r->n_samples; i++)
        n += labels_bytes(&r->samples[i]);
    return n;
}

/* Charges n bytes to b as the streaming decoder does (query_stream.c). */
static enum cma_errc charge(struct cma_prom_budget *b, size_t n, struct cma_err *reterr)
{
    if (!b || n == 0)
        return CMA_OK;
    if (b->max && n > b->max)
        return cma_err_set(reterr, CMA_ERR_TOO_LARGE,
                           "the series this request needs from the prometheus answer take over "
                           "%zu bytes (" BUDGET_FLAG
                           "); narrow the query or the selector, or raise the flag",
                           b->max);
    size_t used = atomic_load(&b->used);
    do {
        if (b->max && (used > b->max || n > b->max - used))
            return cma_err_set(reterr, CMA_ERR_TOO_MANY_REQUESTS,
                               "prometheus answers being decoded hold %zu of %zu bytes "
                               "(" BUDGET_FLAG "); this one needs %zu more: retry shortly",
                               used, b->max, n);
    } while (!atomic_compare_exchange_weak(&b->used, &used, used + n));
    return CMA_OK;
}

/* Does the caller keep sample s? views has room for s's labels. */
static bool keeps(const struct cma_prom_result *src, const struct cma_sample *s,
                  cma_sample_keep_fn keep, void *keep_ctx, struct cma_label_view *views)
{
    if (!keep || src->type == CMA_PROM_SCALAR)
        return true;
    for (size_t i = 0; i < s->n_labels; i++)
        views[i] = (struct cma_label_view){
            .name = s->labels[i].name,
            .name_len = strlen(s->labels[i].name),
            .value = s->labels[i].value,
            .value_len = strlen(s->labels[i].value),
        };
    return keep(keep_ctx, views, s->n_labels);
}

/* Marks the kept samples in kept[] and returns the bytes their copy needs (*n_kept of them). */
static enum cma_errc mark_kept(const struct cma_prom_result *src, cma_sample_keep_fn keep,
                               void *keep_ctx, bool *kept, size_t *ret_n, size_t *ret_bytes)
{
    size_t max_labels = 0;
    for (size_t i = 0; i < src->n_samples; i++)
        if (src->samples[i].n_labels > max_labels)
            max_labels = src->samples[i].n_labels;
    struct cma_label_view *views = calloc(max_labels + 1, sizeof(*views));
    if (!views)
        return CMA_ERR_NOMEM;
    size_t n = 0, bytes = 0;
    for (size_t i = 0; i < src->n_samples; i++) {
        kept[i] = keeps(src, &src->samples[i], keep, keep_ctx, views);
        if (kept[i]) {
            n++;
            bytes += sizeof(struct cma_sample) + labels_bytes(&src->samples[i]);
        }
    }
    free(views);
    *ret_n = n;
    *ret_bytes = bytes;
    return CMA_OK;
}

/* One block: the label array, then the strings (the decoder's layout, one free per sample). */
static bool copy_sample(struct cma_sample *dst, const struct cma_sample *src)
{
    *dst = *src;
    dst->labels = NULL;
    if (src->n_labels == 0)
        return true;
    struct cma_label *labels = malloc(labels_bytes(src));
    if (!labels)
        return false;
    char *strings = (char *)(labels + src->n_labels);
    for (size_t i = 0; i < src->n_labels; i++) {
        size_t nl = strlen(src->labels[i].name) + 1, vl = strlen(src->labels[i].value) + 1;
        labels[i].name = memcpy(strings, src->labels[i].name, nl);
        labels[i].value = memcpy(strings + nl, src->labels[i].value, vl);
        strings += nl + vl;
    }
    dst->labels = labels;
    return true;
}

static enum cma_errc copy_kept(const struct cma_prom_result *src, const bool *kept, size_t n_kept,
                               struct cma_prom_result *r)
{
    r->samples = n_kept ? calloc(n_kept, sizeof(*r->samples)) : NULL;
    if (n_kept && !r->samples)
        return CMA_ERR_NOMEM;
    for (size_t i = 0; i < src->n_samples; i++) {
        if (!kept[i])
            continue;
        if (!copy_sample(&r->samples[r->n_samples], &src->samples[i]))
            return CMA_ERR_NOMEM;
        r->n_samples++;
    }
    return CMA_OK;
}

enum cma_errc cma_prom_result_filter(const struct cma_prom_result *src, cma_sample_keep_fn keep,
                                     void *keep_ctx, struct cma_prom_result **ret,
                                     struct cma_err *reterr)
{
    if (!src)
        return cma_err_set(reterr, CMA_ERR_INTERNAL, "no result to copy");
    bool *kept = calloc(src->n_samples + 1, sizeof(*kept));
    struct cma_prom_result *r = calloc(1, sizeof(*r));
    size_t n_kept = 0, bytes = 0;
    enum cma_errc rc =
        kept && r ? mark_kept(src, keep, keep_ctx, kept, &n_kept, &bytes) : CMA_ERR_NOMEM;
    if (rc == CMA_OK)
        rc = charge(src->budget, bytes, reterr);
    if (rc == CMA_OK) {
        r->type = src->type;
        r->n_seen = src->n_seen;
        r->budget = src->budget;
        r->charged = src->budget ? bytes : 0;
        rc = copy_kept(src, kept, n_kept, r);
    }
    free(kept);
    if (rc != CMA_OK) {
        cma_prom_result_free(r);
        return rc == CMA_ERR_NOMEM ? cma_err_set(reterr, rc, "out of memory") : rc;
    }
    *ret = r;
    return CMA_OK;
}

/* ---- the table and the cached list (mutex held) ------------------------------------------ */

/* The key's hash: the PromQL, the filter id and the tenant, seeded with the wrapper's address. */
static uint64_t key_hash(const struct wrapped *w, const char *promql, const char *keep_id,
                         const char *tenant)
{
    uint64_t h = cma_hash_str(promql, strlen(promql)) ^ (uint64_t)(uintptr_t)w;
    if (keep_id)
        h = cma_hash_str(keep_id, strlen(keep_id)) ^ (h * 1099511628211ULL);
    if (tenant)
        h = cma_hash_str(tenant, strlen(tenant)) ^ (h * 1099511628211ULL);
    return h;
}

static bool same_id(const char *a, const char *b)
{
    return a == b || (a && b && strcmp(a, b) == 0);
}

/* The same backend, PromQL, filter id and tenant: never one tenant's answer for another. */
static bool same_key(const struct entry *e, const struct wrapped *w, uint64_t hash,
                     const char *promql, const char *keep_id, const char *tenant)
{
    return e->hash == hash && e->w == w && strcmp(e->promql, promql) == 0 &&
           same_id(e->keep_id, keep_id) && same_id(e->tenant, tenant);
}

static void grow(struct cma_backend_cache *c)
{
    size_t n = c->n_buckets * 2;
    struct entry **b = calloc(n, sizeof(*b));
    if (!b)
        return; /* longer chains, still correct */
    for (size_t i = 0; i < c->n_buckets; i++) {
        for (struct entry *e = c->buckets[i], *next; e; e = next) {
            next = e->chain;
            e->chain = b[e->hash & (n - 1)];
            b[e->hash & (n - 1)] = e;
        }
    }
    free(c->buckets);
    c->buckets = b;
    c->n_buckets = n;
}

static void table_insert(struct cma_backend_cache *c, struct entry *e)
{
    if (c->n_entries >= c->n_buckets)
        grow(c);
    struct entry **head = &c->buckets[e->hash & (c->n_buckets - 1)];
    e->chain = *head;
    *head = e;
    e->refs++;
    e->in_table = true;
    c->n_entries++;
}

/* Takes e out of the table (and the cached list); its table reference goes to *garbage when it
 * was the last. */
static void table_remove(struct cma_backend_cache *c, struct entry *e, struct entry **garbage)
{
    struct entry **p = &c->buckets[e->hash & (c->n_buckets - 1)];
    while (*p != e)
        p = &(*p)->chain;
    *p = e->chain;
    e->chain = NULL;
    e->in_table = false;
    c->n_entries--;
    if (e->cached) {
        *(e->older ? &e->older->newer : &c->oldest) = e->newer;
        *(e->newer ? &e->newer->older : &c->newest) = e->older;
        e->older = e->newer = NULL;
        e->cached = false;
        c->stats.bytes -= e->bytes;
        c->stats.n_cached--;
    }
    if (--e->refs == 0) {
        e->chain = *garbage;
        *garbage = e;
    }
}

static void unref(struct entry *e, struct entry **garbage)
{
    if (--e->refs == 0) {
        e->chain = *garbage;
        *garbage = e;
    }
}

static void free_garbage(struct entry *g)
{
    while (g) {
        struct entry *next = g->chain;
        cma_prom_result_free(g->result);
        pthread_mutex_destroy(&g->filter_mu);
        free(g->err);
        free(g->promql);
        free(g->keep_id);
        free(g->tenant);
        free(g);
        g = next;
    }
}

/* Drops cached answers that reached their TTL (the oldest first; the list is in answer order). */
static void sweep(struct cma_backend_cache *c, int64_t now, struct entry **garbage)
{
    while (c->oldest && now - c->oldest->answered_ms >= c->ttl_ms)
        table_remove(c, c->oldest, garbage);
}

/* May a request at time_ms, now, use e? (the match window, backend_cache.h) */
static bool usable(const struct cma_backend_cache *c, const struct entry *e, int64_t time_ms,
                   int64_t now)
{
    int64_t slack;
    if (!e->done)
        slack = now - e->started_ms;
    else if (e->cached && now - e->answered_ms < c->ttl_ms)
        slack = c->ttl_ms + (e->answered_ms - e->started_ms);
    else
        return false;
    if (slack < 0)
        slack = 0;
    int64_t d = time_ms - e->time_ms; /* both are realistic wall times: no overflow */
    return d >= -CMA_BACKEND_CACHE_SKEW_MS && d <= slack + CMA_BACKEND_CACHE_SKEW_MS;
}

static struct entry *find(struct cma_backend_cache *c, const struct wrapped *w, uint64_t hash,
                          const char *promql, const char *keep_id, const char *tenant,
                          int64_t time_ms, int64_t now)
{
    for (struct entry *e = c->buckets[hash & (c->n_buckets - 1)]; e; e = e->chain)
        if (same_key(e, w, hash, promql, keep_id, tenant) && usable(c, e, time_ms, now))
            return e;
    return NULL;
}

/* Drops cached answers for e's key other than e (e is newer). */
static void drop_superseded(struct cma_backend_cache *c, const struct entry *e,
                            struct entry **garbage)
{
    struct entry *o = c->buckets[e->hash & (c->n_buckets - 1)];
    while (o) {
        struct entry *next = o->chain;
        if (o != e && o->cached && same_key(o, e->w, e->hash, e->promql, e->keep_id, e->tenant))
            table_remove(c, o, garbage);
        o = next;
    }
}

/* Keeps e's answer (a success) when the cache is on and it fits; else e leaves the table. */
static void keep_or_drop(struct cma_backend_cache *c, struct entry *e, struct entry **garbage)
{
    e->bytes = sizeof(*e) + strlen(e->promql) + 1 + (e->keep_id ? strlen(e->keep_id) + 1 : 0) +
               (e->tenant ? strlen(e->tenant) + 1 : 0) + result_bytes(e->result);
    if (c->ttl_ms <= 0 || e->bytes > c->max_bytes) {
        table_remove(c, e, garbage);
        return;
    }
    struct cma_prom_result *r = e->result;
    if (r->budget && r->charged) /* from now on bounded by max_bytes instead */
        atomic_fetch_sub(&r->budget->used, r->charged);
    r->charged = 0;
    drop_superseded(c, e, garbage);
    e->cached = true;
    e->older = c->newest;
    *(c->newest ? &c->newest->newer : &c->oldest) = e;
    c->newest = e;
    c->stats.bytes += e->bytes;
    c->stats.n_cached++;
    while (c->stats.bytes > c->max_bytes && c->oldest != e) {
        table_remove(c, c->oldest, garbage);
        c->stats.evictions++;
    }
}

/* ---- the query path ---------------------------------------------------------------------- */

static struct entry *entry_new(const struct wrapped *w, uint64_t hash, const char *promql,
                               const char *keep_id, const char *tenant, int64_t time_ms,
                               int64_t now)
{
    size_t len = strlen(promql) + 1;
    struct entry *e = calloc(1, sizeof(*e));
    char *copy = e ? malloc(len) : NULL;
    char *id = copy && keep_id ? strdup(keep_id) : NULL;
    char *who = copy && tenant ? strdup(tenant) : NULL;
    if (!copy || (keep_id && !id) || (tenant && !who) ||
        pthread_mutex_init(&e->filter_mu, NULL) != 0) {
        free(copy);
        free(id);
        free(who);
        free(e);
        return NULL;
    }
    atomic_init(&e->n_waiting, 0);
    atomic_init(&e->sent, false);
    e->has_filter = keep_id != NULL;
    memcpy(copy, promql, len);
    e->keep_id = id;
    e->tenant = who;
    e->w = w;
    e->hash = hash;
    e->promql = copy;
    e->time_ms = time_ms;
    e->started_ms = now;
    e->refs = 1; /* the leader */
    return e;
}

/* ---- the shared query: its filter, its call, the runners ----------------------------------- */

/* The query's filter: the filter of a caller still waiting (see DESIGN), nothing once none is. */
static bool shared_filter(void *ctx, const struct cma_label_view *labels, size_t n_labels)
{
    struct entry *e = ctx;
    pthread_mutex_lock(&e->filter_mu);
    const struct cma_keep *k = e->filter;
    bool kept = k && k->fn(k->ctx, labels, n_labels);
    pthread_mutex_unlock(&e->filter_mu);
    return kept;
}

/* The query's gone(): no caller waits for it any more (a caller sending it itself waits until
 * it ends: then it is the only one left, and its client has gone). */
static bool abandoned(const void *ctx)
{
    const struct entry *e = ctx;
    size_t n = atomic_load(&e->n_waiting);
    return n == 0 || (n == 1 && e->sender && cma_call_gone(e->sender));
}

static void mark_sent(const void *ctx)
{
    struct entry *e = (struct entry *)ctx;
    atomic_store(&e->sent, true);
}

/* A heap copy of an error for the waiters (an entry keeps no error struct while it succeeds). */
static struct cma_err *err_dup(const struct cma_err *err)
{
    struct cma_err *copy = malloc(sizeof(*copy));
    if (copy)
        *copy = *err;
    return copy;
}

/* Sends e's query (the runner's, or the first caller's when no runner could start), publishes
 * its outcome to the waiters and drops the sender's reference. */
static void run_query(struct cma_backend_cache *c, struct entry *e)
{
    struct cma_call call = {
        .gone = abandoned, .gone_ctx = e, .on_send = mark_sent, .on_send_ctx = e};
    struct cma_keep keep = {e->has_filter ? shared_filter : NULL, e, e->keep_id, &call, e->tenant};
    struct cma_prom_result *result = NULL;
    struct cma_err err;
    cma_err_clear(&err);
    enum cma_errc rc = cma_backend_query(&e->w->inner, e->promql, e->time_ms, &keep, &result, &err);
    if (rc == CMA_OK && !result) {
        cma_err_set(&err, CMA_ERR_INTERNAL, "backend %s gave no result",
                    cma_backend_name(&e->w->inner));
        rc = CMA_ERR_INTERNAL;
    }
    struct entry *garbage = NULL;
    pthread_mutex_lock(&c->mu);
    e->rc = rc;
    if (rc == CMA_OK)
        e->result = result;
    else
        e->err = err_dup(&err);
    e->answered_ms = c->clock_ms(c->clock_ctx);
    e->done = true;
    if (rc == CMA_OK && e->in_table)
        keep_or_drop(c, e, &garbage);
    else if (e->in_table)
        table_remove(c, e, &garbage);
    pthread_cond_broadcast(&c->done_cv);
    unref(e, &garbage);
    pthread_mutex_unlock(&c->mu);
    free_garbage(garbage);
    if (rc != CMA_OK)
        cma_prom_result_free(result);
}

/* A runner thread: sends queued queries; exits after RUNNER_IDLE_MS idle or when the cache
 * stops. */
static void *runner_main(void *arg)
{
    struct cma_backend_cache *c = arg;
    pthread_mutex_lock(&c->mu);
    for (;;) {
        bool idle_too_long = false;
        while (!c->jobs && !c->stopping && !idle_too_long) {
            c->n_idle++;
            struct timespec until = mono_timespec(cma_clock_mono_ms() + RUNNER_IDLE_MS);
            idle_too_long = pthread_cond_timedwait(&c->job_cv, &c->mu, &until) != 0;
            c->n_idle--;
        }
        struct entry *e = c->jobs;
        if (!e)
            break;
        c->jobs = e->next_job;
        if (!c->jobs)
            c->last_job = NULL;
        c->n_jobs--;
        pthread_mutex_unlock(&c->mu);
        run_query(c, e);
        pthread_mutex_lock(&c->mu);
    }
    c->n_runners--;
    pthread_cond_broadcast(&c->exit_cv);
    pthread_mutex_unlock(&c->mu);
    return NULL;
}

/* Queues e for a runner (mutex held), starting one when none is idle for it; the runner holds a
 * reference. False when no runner can run it (no thread could start): the caller sends it. */
static bool submit(struct cma_backend_cache *c, struct entry *e)
{
    if (c->n_jobs + 1 > c->n_idle) {
        pthread_attr_t attr;
        pthread_t t;
        bool started = pthread_attr_init(&attr) == 0;
        if (started) {
            started = pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED) == 0 &&
                      pthread_create(&t, &attr, runner_main, c) == 0;
            pthread_attr_destroy(&attr);
        }
        if (!started && c->n_idle == 0)
            return false;
        c->n_runners += started;
    }
    e->refs++;
    e->next_job = NULL;
    *(c->last_job ? &c->last_job->next_job : &c->jobs) = e;
    c->last_job = e;
    c->n_jobs++;
    pthread_cond_signal(&c->job_cv);
    return true;
}

/* ---- the callers ------------------------------------------------------------------------- */

/* Lists me among e's waiters (mutex held); its filter serves the query when none does yet. */
static void add_waiter(struct entry *e, struct waiter *me)
{
    me->next = e->waiters;
    e->waiters = me;
    me->listed = true;
    atomic_fetch_add(&e->n_waiting, 1);
    if (me->keep && !e->filter) {
        pthread_mutex_lock(&e->filter_mu);
        e->filter = me->keep;
        pthread_mutex_unlock(&e->filter_mu);
    }
}

/* Takes me off e's waiters (mutex held). Its filter is handed to another waiter (or none), so
 * it is never called once its request has ended; the last to leave an unanswered query takes it
 * out of the table (the query stops: abandoned()). */
static void remove_waiter(struct cma_backend_cache *c, struct entry *e, struct waiter *me,
                          struct entry **garbage)
{
    struct waiter **p = &e->waiters;
    while (*p && *p != me)
        p = &(*p)->next;
    if (*p)
        *p = me->next;
    me->listed = false;
    if (me->keep && e->filter == me->keep) {
        const struct cma_keep *next = NULL;
        for (const struct waiter *w = e->waiters; w && !next; w = w->next)
            next = w->keep;
        pthread_mutex_lock(&e->filter_mu);
        e->filter = next;
        pthread_mutex_unlock(&e->filter_mu);
    }
    if (atomic_fetch_sub(&e->n_waiting, 1) == 1 && !e->done && e->in_table)
        table_remove(c, e, garbage);
}

/* May the first caller of a query send it itself? Only when its request cannot end before the
 * query does by its deadline (see DESIGN). */
static bool sends_itself(const struct cma_backend_cache *c, const struct waiter *me)
{
    if (!me->call || me->call->deadline_ms <= 0)
        return true;
    return c->query_timeout_ms > 0 &&
           me->call->deadline_ms - cma_clock_mono_ms() >= c->query_timeout_ms;
}

/* The entry this request uses, with a reference for it: a cached answer, or a query in flight it
 * now waits for (a new one when none matches: *send true when no runner took it and the caller
 * must send it). NULL when out of memory. */
static struct entry *join(struct cma_backend_cache *c, const struct wrapped *w, const char *promql,
                          const char *keep_id, const char *tenant, int64_t time_ms,
                          struct waiter *me, bool *send)
{
    uint64_t hash = key_hash(w, promql, keep_id, tenant);
    struct entry *garbage = NULL;
    pthread_mutex_lock(&c->mu);
    int64_t now = c->clock_ms(c->clock_ctx);
    sweep(c, now, &garbage);
    struct entry *e = find(c, w, hash, promql, keep_id, tenant, time_ms, now);
    *send = false;
    if (e) {
        e->refs++;
        if (e->done)
            c->stats.hits++;
        else
            c->stats.coalesced++;
    } else if ((e = entry_new(w, hash, promql, keep_id, tenant, time_ms, now))) {
        table_insert(c, e);
        c->stats.inner_queries++;
        if (sends_itself(c, me) || !submit(c, e)) {
            e->refs++; /* the caller's, as a sender */
            e->sender = me->call;
            *send = true;
        }
    }
    if (e && !e->done)
        add_waiter(e, me);
    pthread_mutex_unlock(&c->mu);
    free_garbage(garbage);
    return e;
}

enum wait_end { WAIT_DONE, WAIT_LATE, WAIT_GONE };

/* Waits (mutex held) until e is answered or the caller's request ends: its deadline passes, or
 * its client goes (asked without the mutex, every WAIT_GONE_CHECK_MS). */
static enum wait_end wait_answer(struct cma_backend_cache *c, struct entry *e,
                                 const struct cma_call *call)
{
    int64_t deadline = call && call->deadline_ms > 0 ? call->deadline_ms : 0;
    bool asks = call && call->gone;
    int64_t next_ask = cma_clock_mono_ms() + WAIT_GONE_CHECK_MS;
    while (!e->done) {
        int64_t now = cma_clock_mono_ms();
        if (deadline && now >= deadline)
            return WAIT_LATE;
        if (asks && now >= next_ask) {
            pthread_mutex_unlock(&c->mu);
            bool gone = cma_call_gone(call);
            pthread_mutex_lock(&c->mu);
            if (gone && !e->done)
                return WAIT_GONE;
            next_ask = now + WAIT_GONE_CHECK_MS;
            continue;
        }
        int64_t until = asks ? next_ask : deadline;
        if (deadline && deadline < until)
            until = deadline;
        if (until == 0) {
            pthread_cond_wait(&c->done_cv, &c->mu);
        } else {
            struct timespec ts = mono_timespec(until);
            pthread_cond_timedwait(&c->done_cv, &c->mu, &ts);
        }
    }
    return WAIT_DONE;
}

/* The error of a caller that left before the answer (its own request ended). */
static enum cma_errc left_error(const struct wrapped *w, const struct entry *e, enum wait_end why,
                                const struct cma_call *call, int64_t started,
                                struct cma_err *reterr)
{
    const char *name = cma_backend_name(&w->inner);
    long long waited = (long long)(cma_clock_mono_ms() - started);
    if (why == WAIT_GONE)
        return cma_err_set(reterr, CMA_ERR_BACKEND_TIMEOUT,
                           "backend %s: the query abandoned after %lld ms: the client of the "
                           "request closed its connection",
                           name, waited);
    char limit[32];
    cma_duration_format(call && call->window_ms > 0 ? call->window_ms : waited, limit,
                        sizeof(limit));
    if (!atomic_load(&e->sent))
        return cma_err_set(reterr, CMA_ERR_TOO_MANY_REQUESTS,
                           "backend %s: the query still waits for a query slot "
                           "(--prometheus-max-concurrent-queries) at the request's deadline "
                           "(%s); retry shortly",
                           name, limit);
    return cma_err_set(reterr, CMA_ERR_BACKEND_TIMEOUT,
                       "backend %s did not answer within %s (the request's deadline; the query "
                       "goes on for the requests that allow longer)",
                       name, limit);
}

static void release(struct cma_backend_cache *c, struct entry *e)
{
    struct entry *garbage = NULL;
    pthread_mutex_lock(&c->mu);
    unref(e, &garbage);
    pthread_mutex_unlock(&c->mu);
    free_garbage(garbage);
}

/* The inner backend on its own (out of memory here, or a filter without an id). */
static enum cma_errc direct(const struct wrapped *w, const char *promql, int64_t time_ms,
                            const struct cma_keep *keep, struct cma_prom_result **ret,
                            struct cma_err *reterr)
{
    struct cma_backend_cache *c = w->cache;
    pthread_mutex_lock(&c->mu);
    c->stats.inner_queries++;
    pthread_mutex_unlock(&c->mu);
    return cma_backend_query(&w->inner, promql, time_ms, keep, ret, reterr);
}

/* What a caller takes from a finished entry: its own filtered copy, or the entry's error. */
static enum cma_errc take(const struct wrapped *w, const struct entry *e,
                          const struct cma_keep *shared_keep, struct cma_prom_result **ret,
                          struct cma_err *reterr)
{
    if (e->rc == CMA_OK)
        return cma_prom_result_filter(e->result, shared_keep ? shared_keep->fn : NULL,
                                      shared_keep ? shared_keep->ctx : NULL, ret, reterr);
    if (e->err)
        cma_err_copy(reterr, e->err);
    else
        cma_err_set(reterr, e->rc, "backend %s: query failed (%s)", cma_backend_name(&w->inner),
                    cma_errc_meaning(e->rc));
    return e->rc;
}

static enum cma_errc cached_query(void *ctx, const char *promql, int64_t time_ms,
                                  const struct cma_keep *keep, struct cma_prom_result **ret,
                                  struct cma_err *reterr)
{
    const struct wrapped *w = ctx;
    struct cma_backend_cache *c = w->cache;
    if (keep && keep->fn && !keep->id) /* a filter nobody can match: not shared */
        return direct(w, promql, time_ms, keep, ret, reterr);
    const struct cma_keep *shared_keep = keep && keep->fn ? keep : NULL;
    const struct cma_call *call = keep ? keep->call : NULL;
    int64_t started = cma_clock_mono_ms();
    struct waiter me = {shared_keep, call, NULL, false};
    bool send = false;
    struct entry *e = join(c, w, promql, shared_keep ? shared_keep->id : NULL,
                           keep ? keep->tenant : NULL, time_ms, &me, &send);
    if (!e)
        return direct(w, promql, time_ms, keep, ret, reterr);
    if (send)
        run_query(c, e);
    struct entry *garbage = NULL;
    pthread_mutex_lock(&c->mu);
    enum wait_end end = wait_answer(c, e, call);
    if (me.listed)
        remove_waiter(c, e, &me, &garbage);
    if (end != WAIT_DONE)
        c->stats.left++;
    pthread_mutex_unlock(&c->mu);
    free_garbage(garbage);
    /* e is finished and immutable now (or this caller has left it); our reference keeps it. */
    enum cma_errc rc = end == WAIT_DONE ? take(w, e, shared_keep, ret, reterr)
                                        : left_error(w, e, end, call, started, reterr);
    release(c, e);
    return rc;
}

static enum cma_errc cached_series(void *ctx, const char *match, int64_t start_ms, int64_t end_ms,
                                   const char *tenant, cma_series_fn fn, void *fn_ctx,
                                   struct cma_err *reterr)
{
    const struct wrapped *w = ctx;
    return cma_backend_series_as(&w->inner, tenant, match, start_ms, end_ms, fn, fn_ctx, reterr);
}

static const char *cached_name(const void *ctx)
{
    const struct wrapped *w = ctx;
    return cma_backend_name(&w->inner);
}

static const struct cma_backend_ops CACHED_OPS = {
    .query = cached_query,
    .series = cached_series,
    .name = cached_name,
};

/* ---- lifetime ---------------------------------------------------------------------------- */

/* The three condition variables, on CLOCK_MONOTONIC (the waits' deadlines are on it). */
static bool init_conds(struct cma_backend_cache *c)
{
    pthread_condattr_t attr;
    if (pthread_condattr_init(&attr) != 0)
        return false;
    bool ok = pthread_condattr_setclock(&attr, CLOCK_MONOTONIC) == 0;
    int made = 0;
    pthread_cond_t *conds[] = {&c->done_cv, &c->job_cv, &c->exit_cv};
    while (ok && made < 3 && pthread_cond_init(conds[made], &attr) == 0)
        made++;
    pthread_condattr_destroy(&attr);
    if (made == 3)
        return true;
    while (made > 0)
        pthread_cond_destroy(conds[--made]);
    return false;
}

enum cma_errc cma_backend_cache_new(const struct cma_backend_cache_config *cfg,
                                    struct cma_backend_cache **ret, struct cma_err *reterr)
{
    struct cma_backend_cache *c = calloc(1, sizeof(*c));
    struct entry **buckets = calloc(MIN_BUCKETS, sizeof(*buckets));
    if (!c || !buckets) {
        free(c);
        free(buckets);
        return cma_err_set(reterr, CMA_ERR_NOMEM, "out of memory");
    }
    if (pthread_mutex_init(&c->mu, NULL) != 0) {
        free(c);
        free(buckets);
        return cma_err_set(reterr, CMA_ERR_NOMEM, "cannot create the query cache's mutex");
    }
    if (!init_conds(c)) {
        pthread_mutex_destroy(&c->mu);
        free(c);
        free(buckets);
        return cma_err_set(reterr, CMA_ERR_NOMEM, "cannot create the query cache's conditions");
    }
    int64_t ttl = cfg ? cfg->ttl_ms : CMA_BACKEND_CACHE_DEFAULT_TTL_MS;
    c->ttl_ms = ttl < 0 ? 0 : ttl > MAX_TTL_MS ? MAX_TTL_MS : ttl;
    c->max_bytes = cfg && cfg->max_bytes ? cfg->max_bytes : CMA_BACKEND_CACHE_DEFAULT_MAX_BYTES;
    c->query_timeout_ms = cfg && cfg->query_timeout_ms > 0 ? cfg->query_timeout_ms : 0;
    c->clock_ms = cfg && cfg->clock_ms ? cfg->clock_ms : mono_clock;
    c->clock_ctx = cfg ? cfg->clock_ctx : NULL;
    c->buckets = buckets;
    c->n_buckets = MIN_BUCKETS;
    *ret = c;
    return CMA_OK;
}

/* Stops the runners: each finishes the query it sends (one nobody waits for stops at its next
 * gone() question) and exits; waits until all have. */
static void stop_runners(struct cma_backend_cache *c)
{
    pthread_mutex_lock(&c->mu);
    c->stopping = true;
    pthread_cond_broadcast(&c->job_cv);
    while (c->n_runners > 0)
        pthread_cond_wait(&c->exit_cv, &c->mu);
    pthread_mutex_unlock(&c->mu);
}

void cma_backend_cache_free(struct cma_backend_cache *c)
{
    if (!c)
        return;
    stop_runners(c);
    struct entry *garbage = NULL;
    for (size_t i = 0; i < c->n_buckets; i++)
        while (c->buckets[i])
            table_remove(c, c->buckets[i], &garbage);
    free_garbage(garbage);
    while (c->wrappers) {
        struct wrapped *next = c->wrappers->next;
        free(c->wrappers);
        c->wrappers = next;
    }
    free(c->buckets);
    pthread_cond_destroy(&c->done_cv);
    pthread_cond_destroy(&c->job_cv);
    pthread_cond_destroy(&c->exit_cv);
    pthread_mutex_destroy(&c->mu);
    free(c);
}

enum cma_errc cma_backend_cache_wrap(struct cma_backend_cache *c, const struct cma_backend *inner,
                                     struct cma_backend *ret, struct cma_err *reterr)
{
    if (!c || !inner || !inner->ops || !inner->ops->query)
        return cma_err_set(reterr, CMA_ERR_INTERNAL, "no backend to wrap with the query cache");
    struct wrapped *w = calloc(1, sizeof(*w));
    if (!w)
        return cma_err_set(reterr, CMA_ERR_NOMEM, "out of memory");
    w->cache = c;
    w->inner = *inner;
    pthread_mutex_lock(&c->mu);
    w->next = c->wrappers;
    c->wrappers = w;
    pthread_mutex_unlock(&c->mu);
    *ret = (struct cma_backend){.ops = &CACHED_OPS, .ctx = w};
    return CMA_OK;
}

void cma_backend_cache_stats(struct cma_backend_cache *c, struct cma_backend_cache_stats *ret)
{
    pthread_mutex_lock(&c->mu);
    *ret = c->stats;
    pthread_mutex_unlock(&c->mu);
}
