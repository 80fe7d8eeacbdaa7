/* backend_cache_test.c: coalescing and the result cache (src/clients/backend_cache.c) around a
 * stub backend that counts its calls, can hold them until the test releases them (so several
 * threads really are in flight at once) and answers with a real /api/v1/query body decoded by
 * the real decoder, charged to a byte budget. Time is the test's own clock (injected), never
 * sleeps: threads are synchronised on the cache's counters and the stub's condition variable. */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cmocka.h>

#include "cma/backend_cache.h"
#include "cma/clock.h"

/* Three pods, one value each; VALUE is substituted so a test can tell answers apart. */
#define BODY(value)                                                                                \
    "{\"status\":\"success\",\"data\":{\"resultType\":\"vector\",\"result\":["                     \
    "{\"metric\":{\"namespace\":\"ns\",\"pod\":\"a\"},\"value\":[1000.5,\"" value "\"]},"          \
    "{\"metric\":{\"namespace\":\"ns\",\"pod\":\"b\"},\"value\":[1000.5,\"" value "\"]},"          \
    "{\"metric\":{\"namespace\":\"ns\",\"pod\":\"c\"},\"value\":[1000.5,\"" value "\"]}]}}"

#define T0 1700000000000 /* a wall time in ms, as the handlers pass */

struct stub {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int calls;  /* queries received */
    int inside; /* queries inside now (held or running) */
    bool hold;  /* hold every query until released */
    bool released;
    int calls_with_keep;
    enum cma_errc fail;        /* answer with this error instead (CMA_OK: answer BODY) */
    int fail_first;            /* the first fail_first queries answer `fail`, later ones BODY */
    bool too_large_unfiltered; /* CMA_ERR_TOO_LARGE when no filter is given */
    const char *body;          /* the answer */
    int64_t *clock;            /* advanced by advance_ms during each query (a slow backend) */
    int64_t advance_ms;
    bool hold_before_send; /* hold before the query is sent (a wait for a query slot) */
    pthread_t last_thread; /* the thread that sent the last query */
    int abandoned;         /* held queries that ended because their call's client had gone */
    struct cma_prom_budget budget;
    /* queries sent as tenant "shop" answer BODY("2"), as "web" BODY("3") (as a gateway routing
     * X-Scope-OrgID to different data); other tenants and none: `body` */
    int tenant_calls; /* queries received with a tenant */
};

/* The answer for a query sent as `tenant` (see struct stub). */
static const char *body_for(const struct stub *s, const char *tenant)
{
    if (tenant && strcmp(tenant, "shop") == 0)
        return BODY("2");
    if (tenant && strcmp(tenant, "web") == 0)
        return BODY("3");
    return s->body;
}

/* Holds the query until released, or until its call's client has gone (as the transport, which
 * aborts a transfer nobody waits for); true in that case. Mutex held. */
static bool stub_hold(struct stub *s, const struct cma_call *call)
{
    while (s->hold && !s->released) {
        if (cma_call_gone(call)) {
            s->abandoned++;
            return true;
        }
        struct timespec until;
        clock_gettime(CLOCK_REALTIME, &until);
        until.tv_nsec += 5000000;
        if (until.tv_nsec >= 1000000000) {
            until.tv_sec++;
            until.tv_nsec -= 1000000000;
        }
        pthread_cond_timedwait(&s->cv, &s->mu, &until);
    }
    return false;
}

static enum cma_errc decode(struct stub *s, const char *body, cma_sample_keep_fn keep,
                            void *keep_ctx, struct cma_prom_result **ret, struct cma_err *err)
{
    struct cma_query_parser *qp = NULL;
    assert_int_equal(cma_query_parser_new(keep, keep_ctx, &s->budget, &qp), CMA_OK);
    enum cma_errc rc = cma_query_parser_feed(qp, body, strlen(body), err);
    if (rc == CMA_OK)
        rc = cma_query_parser_finish(qp, ret, err);
    cma_query_parser_free(qp);
    return rc;
}

static enum cma_errc stub_query(void *ctx, const char *promql, int64_t time_ms,
                                const struct cma_keep *filter, struct cma_prom_result **ret,
                                struct cma_err *reterr)
{
    cma_sample_keep_fn keep = filter ? filter->fn : NULL;
    void *keep_ctx = filter ? filter->ctx : NULL;
    struct stub *s = ctx;
    (void)promql;
    (void)time_ms;
    pthread_mutex_lock(&s->mu);
    s->calls++;
    s->inside++;
    s->calls_with_keep += keep != NULL;
    s->tenant_calls += filter && filter->tenant;
    s->last_thread = pthread_self();
    pthread_cond_broadcast(&s->cv);
    const struct cma_call *call = filter ? filter->call : NULL;
    if (!s->hold_before_send && call && call->on_send) /* as the transport does */
        call->on_send(call->on_send_ctx);
    if (stub_hold(s, call)) {
        s->inside--;
        pthread_cond_broadcast(&s->cv);
        pthread_mutex_unlock(&s->mu);
        return cma_err_set(reterr, CMA_ERR_BACKEND_TIMEOUT, "stub: abandoned");
    }
    if (s->clock)
        *s->clock += s->advance_ms;
    const char *body = body_for(s, filter ? filter->tenant : NULL);
    enum cma_errc fail = s->fail_first == 0 || s->calls <= s->fail_first ? s->fail : CMA_OK;
    bool too_large = s->too_large_unfiltered && !keep;
    s->inside--;
    pthread_mutex_unlock(&s->mu);
    if (fail != CMA_OK)
        return cma_err_set(reterr, fail, "stub failure");
    if (too_large)
        return cma_err_set(reterr, CMA_ERR_TOO_LARGE, "stub: too large unfiltered");
    return decode(s, body, keep, keep_ctx, ret, reterr);
}

static enum cma_errc stub_series(void *ctx, const char *match, int64_t start_ms, int64_t end_ms,
                                 const char *tenant, cma_series_fn fn, void *fn_ctx,
                                 struct cma_err *reterr)
{
    struct stub *s = ctx;
    (void)match;
    (void)tenant;
    (void)start_ms;
    (void)end_ms;
    (void)reterr;
    pthread_mutex_lock(&s->mu);
    s->calls++;
    pthread_mutex_unlock(&s->mu);
    struct cma_label_view l = {.name = "pod", .name_len = 3, .value = "a", .value_len = 1};
    return fn(fn_ctx, "up", 2, &l, 1) == 0 ? CMA_OK : CMA_ERR_INTERNAL;
}

static const char *stub_name(const void *ctx)
{
    (void)ctx;
    return "stub";
}

static const struct cma_backend_ops STUB_OPS = {stub_query, stub_series, stub_name};

static void stub_init(struct stub *s)
{
    memset(s, 0, sizeof(*s));
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->cv, NULL);
    s->body = BODY("1");
    atomic_init(&s->budget.used, 0);
    s->budget.max = 1 << 20;
}

static void stub_done(struct stub *s)
{
    pthread_cond_destroy(&s->cv);
    pthread_mutex_destroy(&s->mu);
}

static void stub_release(struct stub *s)
{
    pthread_mutex_lock(&s->mu);
    s->released = true;
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
}

static int stub_calls(struct stub *s)
{
    pthread_mutex_lock(&s->mu);
    int n = s->calls;
    pthread_mutex_unlock(&s->mu);
    return n;
}

/* Waits until `inside` queries are held in the stub (a liveness bound, not a timing check). */
static void stub_wait_inside(struct stub *s, int inside)
{
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += 60;
    pthread_mutex_lock(&s->mu);
    while (s->inside < inside)
        assert_int_equal(pthread_cond_timedwait(&s->cv, &s->mu, &until), 0);
    pthread_mutex_unlock(&s->mu);
}

/* Waits until `n` held queries ended because nobody waited for them (liveness bound only). */
static void stub_wait_abandoned(struct stub *s, int n)
{
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += 60;
    pthread_mutex_lock(&s->mu);
    while (s->abandoned < n)
        assert_int_equal(pthread_cond_timedwait(&s->cv, &s->mu, &until), 0);
    pthread_mutex_unlock(&s->mu);
}

static int64_t fake_clock(void *ctx)
{
    return *(int64_t *)ctx;
}

struct fixture {
    struct stub stub;
    int64_t now;
    struct cma_backend_cache *cache;
    struct cma_backend backend;
};

static void fixture_init(struct fixture *f, int64_t ttl_ms, size_t max_bytes)
{
    stub_init(&f->stub);
    f->now = 0;
    struct cma_backend_cache_config cfg = {
        .ttl_ms = ttl_ms,
        .max_bytes = max_bytes,
        .clock_ms = fake_clock,
        .clock_ctx = &f->now,
    };
    struct cma_err err = {0};
    assert_int_equal(cma_backend_cache_new(&cfg, &f->cache, &err), CMA_OK);
    struct cma_backend inner = {.ops = &STUB_OPS, .ctx = &f->stub};
    assert_int_equal(cma_backend_cache_wrap(f->cache, &inner, &f->backend, &err), CMA_OK);
}

static void fixture_done(struct fixture *f)
{
    cma_backend_cache_free(f->cache);
    assert_int_equal(atomic_load(&f->stub.budget.used), 0);
    stub_done(&f->stub);
}

static struct cma_backend_cache_stats stats_of(struct fixture *f)
{
    struct cma_backend_cache_stats st;
    cma_backend_cache_stats(f->cache, &st);
    return st;
}

/* Waits until `n` requests joined a query in flight (liveness bound only). */
static void wait_coalesced(struct fixture *f, uint64_t n)
{
    for (int i = 0; i < 60000 && stats_of(f).coalesced < n; i++)
        nanosleep(&(struct timespec){.tv_nsec = 1000000}, NULL);
    assert_int_equal(stats_of(f).coalesced, n);
}

/* keep: the pods named in the NULL-terminated list ctx. */
static bool keep_pods(void *ctx, const struct cma_label_view *labels, size_t n_labels)
{
    const char *const *pods = ctx;
    for (size_t i = 0; i < n_labels; i++) {
        if (strcmp(labels[i].name, "pod") != 0)
            continue;
        for (size_t j = 0; pods[j]; j++)
            if (strcmp(pods[j], labels[i].value) == 0)
                return true;
    }
    return false;
}

static const char *const ONLY_A[] = {"a", NULL};
static const char *const ONLY_B[] = {"b", NULL};
static const char *const A_AND_C[] = {"a", "c", NULL};
static const char *const NONE[] = {NULL};

/* The filter id of a pod list, as the API layer names its filters: the names, one per line. */
static const char *pods_id(const char *const *pods, char *out, size_t len)
{
    out[0] = '\0';
    for (size_t j = 0; pods[j]; j++) {
        size_t used = strlen(out);
        snprintf(out + used, len - used, "\n%s", pods[j]);
    }
    return out;
}

/* A query keeping `pods` (NULL: every series); `named` false: a filter without an id. */
static enum cma_errc query_as(struct fixture *f, const char *promql, int64_t time_ms,
                              const char *const *pods, bool named, struct cma_prom_result **ret,
                              struct cma_err *err)
{
    char id[128];
    struct cma_keep filter = {keep_pods, (void *)pods,
                              named && pods ? pods_id(pods, id, sizeof(id)) : NULL, NULL, NULL};
    return cma_backend_query(&f->backend, promql, time_ms, pods ? &filter : NULL, ret, err);
}

static enum cma_errc query(struct fixture *f, const char *promql, int64_t time_ms,
                           const char *const *pods, struct cma_prom_result **ret,
                           struct cma_err *err)
{
    return query_as(f, promql, time_ms, pods, true, ret, err);
}

/* Queries and frees, returning the first sample's value (-1 when none). */
static double query_value(struct fixture *f, const char *promql, int64_t time_ms)
{
    struct cma_prom_result *r = NULL;
    struct cma_err err = {0};
    assert_int_equal(query(f, promql, time_ms, ONLY_A, &r, &err), CMA_OK);
    double v = r->n_samples ? r->samples[0].value : -1;
    cma_prom_result_free(r);
    return v;
}

/* ---- concurrent callers ------------------------------------------------------------------- */

struct caller {
    pthread_t thread;
    struct fixture *f;
    const char *promql;
    const char *const *pods;
    const struct cma_call *call; /* the request it serves; NULL = none */
    const char *tenant;          /* sent as; NULL = none */
    enum cma_errc rc;
    struct cma_err err;
    struct cma_prom_result *result;
};

static void *caller_run(void *arg)
{
    struct caller *c = arg;
    cma_err_clear(&c->err);
    char id[128];
    struct cma_keep filter = {c->pods ? keep_pods : NULL, (void *)c->pods,
                              c->pods ? pods_id(c->pods, id, sizeof(id)) : NULL, c->call,
                              c->tenant};
    c->rc =
        cma_backend_query(&c->f->backend, c->promql, T0,
                          c->pods || c->call || c->tenant ? &filter : NULL, &c->result, &c->err);
    return NULL;
}

/* n callers of promql; with `mixed` they keep five different pod sets in turn (ONLY_A, ONLY_B,
 * A_AND_C, NONE, everything), else they all keep A_AND_C. */
static void start_callers(struct caller *c, size_t n, struct fixture *f, const char *promql,
                          bool mixed)
{
    static const char *const *const pods[] = {ONLY_A, ONLY_B, A_AND_C, NONE, NULL};
    for (size_t i = 0; i < n; i++) {
        c[i] = (struct caller){.f = f, .promql = promql, .pods = mixed ? pods[i % 5] : A_AND_C};
        assert_int_equal(pthread_create(&c[i].thread, NULL, caller_run, &c[i]), 0);
    }
}

static void join_callers(struct caller *c, size_t n)
{
    for (size_t i = 0; i < n; i++)
        assert_int_equal(pthread_join(c[i].thread, NULL), 0);
}

/* The pods of a result as "a,c" (sample order). */
static const char *pods_of(const struct cma_prom_result *r, char *out, size_t len)
{
    out[0] = '\0';
    for (size_t i = 0; i < r->n_samples; i++) {
        const char *pod = cma_sample_label(&r->samples[i], "pod");
        size_t used = strlen(out);
        snprintf(out + used, len - used, "%s%s", i ? "," : "", pod ? pod : "?");
    }
    return out;
}

#define N_CALLERS 10

static void test_cma_backend_cache__concurrent_identical_queries_go_out_once(void **state)
{
    (void)state;
    struct fixture f;
    fixture_init(&f, 0, 0); /* TTL 0: coalescing only */
    f.stub.hold = true;
    struct caller c[N_CALLERS];
    start_callers(c, N_CALLERS, &f, "sum(up) by (pod)", false);
    stub_wait_inside(&f.stub, 1);
    wait_coalesced(&f, N_CALLERS - 1);
    stub_release(&f.stub);
    join_callers(c, N_CALLERS);
    assert_int_equal(stub_calls(&f.stub), 1);
    assert_int_equal(f.stub.calls_with_keep, 1); /* the shared query runs with the filter */
    for (size_t i = 0; i < N_CALLERS; i++) {     /* every caller got its own copy */
        char got[64];
        assert_int_equal(c[i].rc, CMA_OK);
        assert_string_equal(pods_of(c[i].result, got, sizeof(got)), "a,c");
        assert_int_equal(c[i].result->n_seen, 3);
        for (size_t j = 0; j < c[i].result->n_samples; j++)
            assert_true(c[i].result->samples[j].value == 1.0);
        if (i)
            assert_ptr_not_equal(c[i].result, c[i - 1].result);
    }
    for (size_t i = 0; i < N_CALLERS; i++)
        cma_prom_result_free(c[i].result);
    /* TTL 0: nothing kept, the next query goes out again */
    assert_int_equal(stats_of(&f).n_cached, 0);
    assert_true(query_value(&f, "sum(up) by (pod)", T0) == 1.0);
    assert_int_equal(stub_calls(&f.stub), 2);
    fixture_done(&f);
}

static void test_cma_backend_cache__different_filters_go_out_separately(void **state)
{
    (void)state;
    struct fixture f;
    fixture_init(&f, 0, 0);
    struct caller c[N_CALLERS];
    start_callers(c, N_CALLERS, &f, "sum(up) by (pod)", true);
    join_callers(c, N_CALLERS);
    /* five filters (ids): at most five queries, each caller's answer exactly its own series */
    assert_true(stub_calls(&f.stub) >= 5 && stub_calls(&f.stub) <= N_CALLERS);
    static const char *const want[] = {"a", "b", "a,c", "", "a,b,c"};
    for (size_t i = 0; i < N_CALLERS; i++) {
        char got[64];
        assert_int_equal(c[i].rc, CMA_OK);
        assert_string_equal(pods_of(c[i].result, got, sizeof(got)), want[i % 5]);
        cma_prom_result_free(c[i].result);
    }
    fixture_done(&f);
}

static void test_cma_backend_cache__different_promql_go_out_separately(void **state)
{
    (void)state;
    struct fixture f;
    fixture_init(&f, 5000, 0);
    f.stub.hold = true;
    struct caller c[2];
    start_callers(&c[0], 1, &f, "sum(up) by (pod)", false);
    start_callers(&c[1], 1, &f, "max(up) by (pod)", false);
    stub_wait_inside(&f.stub, 2); /* both are in the backend at once: neither joined the other */
    stub_release(&f.stub);
    join_callers(c, 2);
    assert_int_equal(stub_calls(&f.stub), 2);
    assert_int_equal(stats_of(&f).coalesced, 0);
    assert_int_equal(c[0].rc, CMA_OK);
    assert_int_equal(c[1].rc, CMA_OK);
    cma_prom_result_free(c[0].result);
    cma_prom_result_free(c[1].result);
    assert_int_equal(stats_of(&f).n_cached, 2);
    fixture_done(&f);
}

/* One query as `tenant`, keeping ONLY_A: its first value (-1 when none). */
static double tenant_value(struct fixture *f, const char *tenant)
{
    char id[128];
    struct cma_keep filter = {keep_pods, (void *)ONLY_A, pods_id(ONLY_A, id, sizeof(id)), NULL,
                              tenant};
    struct cma_prom_result *r = NULL;
    struct cma_err err = {0};
    assert_int_equal(cma_backend_query(&f->backend, "sum(up) by (pod)", T0, &filter, &r, &err),
                     CMA_OK);
    double v = r->n_samples ? r->samples[0].value : -1;
    cma_prom_result_free(r);
    return v;
}

/* The same PromQL and filter as different tenants are different answers: never one tenant's
 * cached answer for another (nor for the backend's own tenant); the same tenant is a hit. */
static void test_cma_backend_cache__tenants_never_share_an_answer(void **state)
{
    (void)state;
    struct fixture f;
    fixture_init(&f, 5000, 0);
    assert_true(tenant_value(&f, NULL) == 1);
    assert_true(tenant_value(&f, "shop") == 2);
    assert_true(tenant_value(&f, "web") == 3);
    assert_int_equal(stub_calls(&f.stub), 3);
    assert_int_equal(f.stub.tenant_calls, 2); /* the tenant reached the backend */
    assert_int_equal(stats_of(&f).n_cached, 3);
    assert_true(tenant_value(&f, "shop") == 2); /* cached, per tenant */
    assert_true(tenant_value(&f, "web") == 3);
    assert_true(tenant_value(&f, NULL) == 1);
    assert_int_equal(stub_calls(&f.stub), 3);
    assert_int_equal(stats_of(&f).hits, 3);
    fixture_done(&f);
}

/* Queries in flight are not joined across tenants either (the runner sends the tenant). */
static void test_cma_backend_cache__tenants_in_flight_go_out_separately(void **state)
{
    (void)state;
    struct fixture f;
    fixture_init(&f, 0, 0); /* coalescing only */
    f.stub.hold = true;
    struct caller c[4];
    static const char *const tenants[] = {"shop", "web", "shop", NULL};
    for (size_t i = 0; i < 4; i++) {
        c[i] = (struct caller){
            .f = &f, .promql = "sum(up) by (pod)", .pods = ONLY_A, .tenant = tenants[i]};
        assert_int_equal(pthread_create(&c[i].thread, NULL, caller_run, &c[i]), 0);
        if (i < 2)
            stub_wait_inside(&f.stub, (int)i + 1); /* shop and web both in the backend */
    }
    stub_release(&f.stub);
    join_callers(c, 4);
    double want[] = {2, 3, 2, 1};
    for (size_t i = 0; i < 4; i++) {
        assert_int_equal(c[i].rc, CMA_OK);
        assert_int_equal(c[i].result->n_samples, 1);
        assert_true(c[i].result->samples[0].value == want[i]);
        cma_prom_result_free(c[i].result);
    }
    assert_true(stub_calls(&f.stub) >= 3); /* shop, web and none: at least one each */
    assert_true(f.stub.tenant_calls >= 2);
    fixture_done(&f);
}

static void test_cma_backend_cache__errors_reach_every_waiter_and_are_not_cached(void **state)
{
    (void)state;
    struct fixture f;
    fixture_init(&f, 5000, 0);
    f.stub.hold = true;
    f.stub.fail = CMA_ERR_BACKEND_TIMEOUT;
    struct caller c[N_CALLERS];
    start_callers(c, N_CALLERS, &f, "sum(up) by (pod)", false);
    stub_wait_inside(&f.stub, 1);
    wait_coalesced(&f, N_CALLERS - 1);
    stub_release(&f.stub);
    join_callers(c, N_CALLERS);
    assert_int_equal(stub_calls(&f.stub), 1);
    for (size_t i = 0; i < N_CALLERS; i++) {
        assert_int_equal(c[i].rc, CMA_ERR_BACKEND_TIMEOUT);
        assert_int_equal(c[i].err.code, CMA_ERR_BACKEND_TIMEOUT);
        assert_string_equal(c[i].err.msg, "stub failure");
        assert_null(c[i].result);
    }
    /* the next request asks the backend again, and gets its answer once it recovers */
    f.stub.fail = CMA_OK;
    assert_true(query_value(&f, "sum(up) by (pod)", T0) == 1.0);
    assert_int_equal(stub_calls(&f.stub), 2);
    fixture_done(&f);
}

static bool flag_set(const void *ctx)
{
    return __atomic_load_n((const bool *)ctx, __ATOMIC_SEQ_CST);
}

/* A caller whose client goes leaves at once, alone: the query it started goes on for the others,
 * with another waiter's filter (the one that left is never called again: its pod list is spoilt
 * before the answer is decoded), and goes out once. */
static void test_cma_backend_cache__a_caller_whose_client_goes_leaves_alone(void **state)
{
    (void)state;
    struct fixture f;
    fixture_init(&f, 5000, 0);
    f.stub.hold = true;
    bool first_gone = false;
    /* a deadline (far) of its own: with query_timeout_ms 0 a runner sends the query, not c[0] */
    struct cma_call first_call = {
        .deadline_ms = cma_clock_mono_ms() + 600000, .gone = flag_set, .gone_ctx = &first_gone};
    const char *first_pods[] = {"a", "c", NULL};
    struct caller c[N_CALLERS];
    c[0] = (struct caller){
        .f = &f, .promql = "sum(up) by (pod)", .pods = first_pods, .call = &first_call};
    assert_int_equal(pthread_create(&c[0].thread, NULL, caller_run, &c[0]), 0);
    stub_wait_inside(&f.stub, 1); /* c[0]'s query is in the backend, with its filter */
    start_callers(&c[1], N_CALLERS - 1, &f, "sum(up) by (pod)", false);
    wait_coalesced(&f, N_CALLERS - 1);
    __atomic_store_n(&first_gone, true, __ATOMIC_SEQ_CST); /* its client closes the connection */
    assert_int_equal(pthread_join(c[0].thread, NULL), 0);  /* it returns, the query still held */
    assert_int_equal(c[0].rc, CMA_ERR_BACKEND_TIMEOUT);
    assert_non_null(strstr(c[0].err.msg, "abandoned after"));
    assert_non_null(strstr(c[0].err.msg, "the client of the request closed its connection"));
    assert_null(c[0].result);
    first_pods[0] = first_pods[1] = "spoilt"; /* its filter would now keep nothing */
    assert_int_equal(stats_of(&f).left, 1);
    stub_release(&f.stub);
    join_callers(&c[1], N_CALLERS - 1);
    for (size_t i = 1; i < N_CALLERS; i++) {
        char got[64];
        assert_int_equal(c[i].rc, CMA_OK);
        assert_string_equal(pods_of(c[i].result, got, sizeof(got)), "a,c");
        cma_prom_result_free(c[i].result);
    }
    assert_int_equal(stub_calls(&f.stub), 1);
    assert_int_equal(f.stub.abandoned, 0);
    fixture_done(&f);
}

/* ?timeout=2s does not fail the callers that allow longer: a caller ends at its own deadline
 * (its answer says the backend did not answer within it) while the shared query goes on and
 * answers the others; no second query. (The short caller joins the query the others wait for,
 * so the test never depends on how fast threads start; that the query belongs to no caller,
 * the first included, is a_caller_whose_client_goes_leaves_alone.) */
static void test_cma_backend_cache__a_short_deadline_fails_only_its_caller(void **state)
{
    (void)state;
    struct fixture f;
    fixture_init(&f, 5000, 0);
    f.stub.hold = true;
    struct caller c[3];
    start_callers(c, 2, &f, "sum(up) by (pod)", false); /* no deadline of their own */
    stub_wait_inside(&f.stub, 1);
    wait_coalesced(&f, 1);
    struct cma_call short_call = {.deadline_ms = cma_clock_mono_ms() + 50, .window_ms = 50};
    c[2] = (struct caller){
        .f = &f, .promql = "sum(up) by (pod)", .pods = A_AND_C, .call = &short_call};
    assert_int_equal(pthread_create(&c[2].thread, NULL, caller_run, &c[2]), 0);
    assert_int_equal(pthread_join(c[2].thread, NULL), 0); /* ends with the query still held */
    assert_int_equal(c[2].rc, CMA_ERR_BACKEND_TIMEOUT);
    assert_non_null(strstr(c[2].err.msg, "backend stub did not answer within 50ms"));
    assert_null(c[2].result);
    stub_release(&f.stub);
    join_callers(c, 2);
    for (size_t i = 0; i < 2; i++) {
        assert_int_equal(c[i].rc, CMA_OK);
        cma_prom_result_free(c[i].result);
    }
    assert_int_equal(stub_calls(&f.stub), 1);
    assert_int_equal(stats_of(&f).left, 1);
    fixture_done(&f);
}

/* A first caller whose deadline outlasts the query's bound (query_timeout_ms) sends the shared
 * query itself, on its own thread (no hop to a runner); one with a shorter deadline hands it to a
 * runner. */
static void test_cma_backend_cache__a_long_deadline_sends_the_query_itself(void **state)
{
    (void)state;
    struct fixture f;
    stub_init(&f.stub);
    f.now = 0;
    struct cma_backend_cache_config cfg = {
        .ttl_ms = 0, .clock_ms = fake_clock, .clock_ctx = &f.now, .query_timeout_ms = 10000};
    struct cma_err err = {0};
    assert_int_equal(cma_backend_cache_new(&cfg, &f.cache, &err), CMA_OK);
    struct cma_backend inner = {.ops = &STUB_OPS, .ctx = &f.stub};
    assert_int_equal(cma_backend_cache_wrap(f.cache, &inner, &f.backend, &err), CMA_OK);
    struct cma_call long_call = {.deadline_ms = cma_clock_mono_ms() + 600000};
    struct caller c = {.f = &f, .promql = "sum(up) by (pod)", .pods = A_AND_C, .call = &long_call};
    assert_int_equal(pthread_create(&c.thread, NULL, caller_run, &c), 0);
    pthread_t caller_thread = c.thread;
    assert_int_equal(pthread_join(c.thread, NULL), 0);
    assert_int_equal(c.rc, CMA_OK);
    cma_prom_result_free(c.result);
    assert_true(pthread_equal(f.stub.last_thread, caller_thread));
    struct cma_call short_call = {.deadline_ms = cma_clock_mono_ms() + 5000};
    c = (struct caller){
        .f = &f, .promql = "sum(up) by (pod)", .pods = A_AND_C, .call = &short_call};
    assert_int_equal(pthread_create(&c.thread, NULL, caller_run, &c), 0);
    caller_thread = c.thread;
    assert_int_equal(pthread_join(c.thread, NULL), 0);
    assert_int_equal(c.rc, CMA_OK);
    cma_prom_result_free(c.result);
    assert_false(pthread_equal(f.stub.last_thread, caller_thread)); /* a runner sent it */
    assert_int_equal(stub_calls(&f.stub), 2);
    fixture_done(&f);
}

/* A caller whose deadline passes while the query still waits to be sent (a query slot) gets 429,
 * as the concurrency bound answers: it may retry; nothing reached the backend for it. */
static void test_cma_backend_cache__a_deadline_before_the_query_is_sent_is_429(void **state)
{
    (void)state;
    struct fixture f;
    fixture_init(&f, 5000, 0);
    f.stub.hold = true;
    f.stub.hold_before_send = true;
    struct cma_call short_call = {.deadline_ms = cma_clock_mono_ms() + 50, .window_ms = 50};
    struct caller c = {.f = &f, .promql = "sum(up) by (pod)", .pods = A_AND_C, .call = &short_call};
    assert_int_equal(pthread_create(&c.thread, NULL, caller_run, &c), 0);
    assert_int_equal(pthread_join(c.thread, NULL), 0);
    assert_int_equal(c.rc, CMA_ERR_TOO_MANY_REQUESTS);
    assert_non_null(strstr(c.err.msg, "--prometheus-max-concurrent-queries"));
    stub_release(&f.stub);
    fixture_done(&f); /* waits for the runner, whose query nobody waits for */
}

/* When every caller has gone the shared query is cancelled (its call's gone() says so), and the
 * next request starts a query of its own rather than joining the abandoned one. */
static void test_cma_backend_cache__a_query_nobody_waits_for_stops(void **state)
{
    (void)state;
    struct fixture f;
    fixture_init(&f, 5000, 0);
    f.stub.hold = true;
    bool gone = false;
    struct cma_call call = {.gone = flag_set, .gone_ctx = &gone};
    struct caller c[2];
    for (size_t i = 0; i < 2; i++)
        c[i] =
            (struct caller){.f = &f, .promql = "sum(up) by (pod)", .pods = A_AND_C, .call = &call};
    assert_int_equal(pthread_create(&c[0].thread, NULL, caller_run, &c[0]), 0);
    stub_wait_inside(&f.stub, 1);
    assert_int_equal(pthread_create(&c[1].thread, NULL, caller_run, &c[1]), 0);
    wait_coalesced(&f, 1);
    __atomic_store_n(&gone, true, __ATOMIC_SEQ_CST); /* both clients close their connections */
    join_callers(c, 2);
    assert_int_equal(c[0].rc, CMA_ERR_BACKEND_TIMEOUT);
    assert_int_equal(c[1].rc, CMA_ERR_BACKEND_TIMEOUT);
    stub_wait_abandoned(&f.stub, 1); /* the backend saw the query end */
    pthread_mutex_lock(&f.stub.mu);
    f.stub.hold = false;
    pthread_mutex_unlock(&f.stub.mu);
    assert_true(query_value(&f, "sum(up) by (pod)", T0) == 1.0); /* a query of its own */
    assert_int_equal(stub_calls(&f.stub), 2);
    fixture_done(&f);
}

static void test_cma_backend_cache__a_backend_error_is_not_asked_again(void **state)
{
    (void)state;
    struct fixture f;
    fixture_init(&f, 5000, 0);
    f.stub.hold = true;
    f.stub.fail = CMA_ERR_BACKEND_TIMEOUT;
    f.stub.fail_first = 1;
    bool never = false;
    struct cma_call leader_call = {.gone = flag_set, .gone_ctx = &never};
    struct caller c[3];
    c[0] = (struct caller){
        .f = &f, .promql = "sum(up) by (pod)", .pods = A_AND_C, .call = &leader_call};
    assert_int_equal(pthread_create(&c[0].thread, NULL, caller_run, &c[0]), 0);
    stub_wait_inside(&f.stub, 1);
    start_callers(&c[1], 2, &f, "sum(up) by (pod)", false);
    wait_coalesced(&f, 2);
    stub_release(&f.stub); /* the backend timed out with the leader's client still there */
    join_callers(c, 3);
    for (size_t i = 0; i < 3; i++)
        assert_int_equal(c[i].rc, CMA_ERR_BACKEND_TIMEOUT);
    assert_int_equal(stub_calls(&f.stub), 1);
    fixture_done(&f);
}

/* ---- the cache ---------------------------------------------------------------------------- */

static void test_cma_backend_cache__serves_an_answer_until_its_ttl(void **state)
{
    (void)state;
    struct fixture f;
    fixture_init(&f, 5000, 0);
    f.stub.clock = &f.now;
    f.stub.advance_ms = 3000; /* the backend takes 3 s: the answer's age starts when it comes */
    assert_true(query_value(&f, "q", T0) == 1.0);
    assert_int_equal(f.now, 3000);
    f.stub.body = BODY("2"); /* the backend's data changes */
    f.now = 7999;            /* 4,999 ms after the answer */
    assert_true(query_value(&f, "q", T0 + 4999) == 1.0);
    assert_int_equal(stub_calls(&f.stub), 1);
    assert_int_equal(stats_of(&f).hits, 1);
    f.now = 8000; /* 5,000 ms after the answer: expired, never served */
    assert_true(query_value(&f, "q", T0 + 5000) == 2.0);
    assert_int_equal(stub_calls(&f.stub), 2);
    assert_int_equal(stats_of(&f).n_cached, 1); /* the new answer replaced the old one */
    fixture_done(&f);
}

static void test_cma_backend_cache__ttl_zero_keeps_nothing(void **state)
{
    (void)state;
    struct fixture f;
    fixture_init(&f, 0, 0);
    assert_true(query_value(&f, "q", T0) == 1.0);
    assert_true(query_value(&f, "q", T0) == 1.0);
    assert_int_equal(stub_calls(&f.stub), 2);
    assert_int_equal(stats_of(&f).hits, 0);
    assert_int_equal(stats_of(&f).bytes, 0);
    fixture_done(&f);
}

static void test_cma_backend_cache__other_evaluation_time_goes_to_the_backend(void **state)
{
    (void)state;
    struct fixture f;
    fixture_init(&f, 5000, 0);
    assert_true(query_value(&f, "q", T0) == 1.0);
    /* "now" on another thread that read its clock a little earlier: shares the evaluation */
    assert_true(query_value(&f, "q", T0 - 500) == 1.0);
    assert_int_equal(stub_calls(&f.stub), 1);
    /* an explicit time a minute earlier is another question */
    assert_true(query_value(&f, "q", T0 - 60000) == 1.0);
    assert_int_equal(stub_calls(&f.stub), 2);
    fixture_done(&f);
}

static void test_cma_backend_cache__hits_are_per_filter(void **state)
{
    (void)state;
    struct fixture f;
    fixture_init(&f, 5000, 0);
    struct cma_prom_result *a = NULL, *ac = NULL, *all = NULL, *a2 = NULL;
    struct cma_err err = {0};
    assert_int_equal(query(&f, "q", T0, ONLY_A, &a, &err), CMA_OK);
    assert_int_equal(query(&f, "q", T0, A_AND_C, &ac, &err), CMA_OK);
    assert_int_equal(query(&f, "q", T0, NULL, &all, &err), CMA_OK);
    assert_int_equal(stub_calls(&f.stub), 3); /* three filters, three keys */
    assert_int_equal(query(&f, "q", T0 + 100, ONLY_A, &a2, &err), CMA_OK);
    assert_int_equal(stub_calls(&f.stub), 3); /* the same filter again: a hit */
    assert_int_equal(stats_of(&f).hits, 1);
    char got[64];
    assert_string_equal(pods_of(a, got, sizeof(got)), "a");
    cma_prom_result_free(a); /* each copy is its own */
    assert_string_equal(pods_of(a2, got, sizeof(got)), "a");
    assert_string_equal(pods_of(ac, got, sizeof(got)), "a,c");
    assert_string_equal(pods_of(all, got, sizeof(got)), "a,b,c");
    assert_string_equal(cma_sample_label(&all->samples[1], "namespace"), "ns");
    assert_int_equal(all->samples[1].timestamp_ms, 1000500);
    cma_prom_result_free(a2);
    cma_prom_result_free(ac);
    cma_prom_result_free(all);
    fixture_done(&f);
}

/* The bytes one cached answer of promql "qN" takes (measured on a cache of its own). */
static size_t one_entry_bytes(void)
{
    struct fixture f;
    fixture_init(&f, 5000, 0);
    assert_true(query_value(&f, "q1", T0) == 1.0);
    size_t bytes = stats_of(&f).bytes;
    assert_true(bytes > 0);
    fixture_done(&f);
    return bytes;
}

static void test_cma_backend_cache__byte_bound_evicts_the_oldest(void **state)
{
    (void)state;
    size_t one = one_entry_bytes();
    struct fixture f;
    fixture_init(&f, 5000, 2 * one + one / 2); /* room for two */
    query_value(&f, "q1", T0);
    query_value(&f, "q2", T0);
    query_value(&f, "q3", T0);
    struct cma_backend_cache_stats st = stats_of(&f);
    assert_int_equal(st.evictions, 1);
    assert_int_equal(st.n_cached, 2);
    assert_true(st.bytes <= 2 * one + one / 2);
    assert_int_equal(stub_calls(&f.stub), 3);
    query_value(&f, "q3", T0); /* kept */
    query_value(&f, "q2", T0); /* kept */
    assert_int_equal(stub_calls(&f.stub), 3);
    query_value(&f, "q1", T0); /* evicted: asked again (and q2, now the oldest, makes room) */
    assert_int_equal(stub_calls(&f.stub), 4);
    fixture_done(&f);
}

static void test_cma_backend_cache__answer_over_the_bound_is_not_kept(void **state)
{
    (void)state;
    struct fixture f;
    fixture_init(&f, 5000, 64);
    assert_true(query_value(&f, "q", T0) == 1.0);
    assert_true(query_value(&f, "q", T0) == 1.0);
    assert_int_equal(stub_calls(&f.stub), 2);
    assert_int_equal(stats_of(&f).n_cached, 0);
    fixture_done(&f);
}

static void test_cma_backend_cache__copies_are_charged_to_the_budget(void **state)
{
    (void)state;
    struct fixture f;
    fixture_init(&f, 5000, 0);
    struct cma_prom_result *a = NULL, *ac = NULL;
    struct cma_err err = {0};
    assert_int_equal(query(&f, "q", T0, ONLY_A, &a, &err), CMA_OK);
    /* only the caller's copy holds the budget; the cached answer counts against max_bytes */
    assert_int_equal(atomic_load(&f.stub.budget.used), a->charged);
    assert_true(a->charged > 0);
    assert_int_equal(query(&f, "q", T0, A_AND_C, &ac, &err), CMA_OK);
    assert_int_equal(atomic_load(&f.stub.budget.used), a->charged + ac->charged);
    cma_prom_result_free(a);
    cma_prom_result_free(ac);
    assert_int_equal(atomic_load(&f.stub.budget.used), 0);
    /* a copy that does not fit in what others hold is refused like a decoded answer */
    atomic_store(&f.stub.budget.used, f.stub.budget.max - 10);
    struct cma_prom_result *r = NULL;
    assert_int_equal(query(&f, "q", T0, ONLY_A, &r, &err), CMA_ERR_TOO_MANY_REQUESTS);
    assert_null(r);
    assert_non_null(strstr(err.msg, "--prometheus-max-bytes-in-flight"));
    assert_int_equal(atomic_load(&f.stub.budget.used), f.stub.budget.max - 10);
    atomic_store(&f.stub.budget.used, 0);
    fixture_done(&f);
}

static void test_cma_backend_cache__filters_without_an_id_are_not_shared(void **state)
{
    (void)state;
    struct fixture f;
    fixture_init(&f, 5000, 0);
    f.stub.too_large_unfiltered = true; /* only a filtered query fits */
    struct cma_prom_result *r = NULL;
    struct cma_err err = {0};
    for (int i = 0; i < 2; i++) {
        assert_int_equal(query_as(&f, "q", T0, ONLY_B, false, &r, &err), CMA_OK);
        char got[64];
        assert_string_equal(pods_of(r, got, sizeof(got)), "b");
        cma_prom_result_free(r);
    }
    assert_int_equal(stub_calls(&f.stub), 2); /* each on its own, filtered */
    assert_int_equal(f.stub.calls_with_keep, 2);
    assert_int_equal(stats_of(&f).n_cached, 0);
    /* a named filter is shared and fetched filtered: the answer fits */
    assert_int_equal(query(&f, "q", T0, ONLY_B, &r, &err), CMA_OK);
    cma_prom_result_free(r);
    assert_int_equal(f.stub.calls_with_keep, 3);
    /* a caller that keeps everything gets the backend's error */
    cma_err_clear(&err);
    assert_int_equal(query(&f, "q", T0, NULL, &r, &err), CMA_ERR_TOO_LARGE);
    assert_string_equal(err.msg, "stub: too large unfiltered");
    fixture_done(&f);
}

static int count_series(void *ctx, const char *metric, size_t metric_len,
                        const struct cma_label_view *labels, size_t n_labels)
{
    (void)metric;
    (void)labels;
    (void)n_labels;
    assert_int_equal(metric_len, 2);
    (*(int *)ctx)++;
    return 0;
}

static void test_cma_backend_cache__series_and_name_pass_through(void **state)
{
    (void)state;
    struct fixture f;
    fixture_init(&f, 5000, 0);
    int n = 0;
    struct cma_err err = {0};
    assert_int_equal(cma_backend_series(&f.backend, "up", 1, 2, count_series, &n, &err), CMA_OK);
    assert_int_equal(cma_backend_series(&f.backend, "up", 1, 2, count_series, &n, &err), CMA_OK);
    assert_int_equal(n, 2);
    assert_int_equal(stub_calls(&f.stub), 2); /* never cached */
    assert_string_equal(cma_backend_name(&f.backend), "stub");
    fixture_done(&f);
}

static void test_cma_backend_cache_wrap__refuses_no_backend(void **state)
{
    (void)state;
    struct cma_backend_cache *c = NULL;
    struct cma_err err = {0};
    assert_int_equal(cma_backend_cache_new(NULL, &c, &err), CMA_OK);
    struct cma_backend out, none = {0};
    assert_int_equal(cma_backend_cache_wrap(c, &none, &out, &err), CMA_ERR_INTERNAL);
    cma_backend_cache_free(c);
    cma_backend_cache_free(NULL);
}

static void test_cma_prom_result_filter__keeps_a_scalar(void **state)
{
    (void)state;
    struct cma_prom_result *src = NULL, *copy = NULL;
    struct cma_err err = {0};
    const char *body = "{\"status\":\"success\",\"data\":{\"resultType\":\"scalar\","
                       "\"result\":[1000,\"7\"]}}";
    assert_int_equal(cma_prom_decode_query(body, strlen(body), &src, &err), CMA_OK);
    assert_int_equal(cma_prom_result_filter(src, keep_pods, (void *)NONE, &copy, &err), CMA_OK);
    assert_int_equal(copy->type, CMA_PROM_SCALAR);
    assert_int_equal(copy->n_samples, 1);
    assert_true(copy->samples[0].value == 7.0);
    assert_null(copy->budget);
    cma_prom_result_free(copy);
    cma_prom_result_free(src);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cma_backend_cache__concurrent_identical_queries_go_out_once),
        cmocka_unit_test(test_cma_backend_cache__different_filters_go_out_separately),
        cmocka_unit_test(test_cma_backend_cache__different_promql_go_out_separately),
        cmocka_unit_test(test_cma_backend_cache__tenants_never_share_an_answer),
        cmocka_unit_test(test_cma_backend_cache__tenants_in_flight_go_out_separately),
        cmocka_unit_test(test_cma_backend_cache__errors_reach_every_waiter_and_are_not_cached),
        cmocka_unit_test(test_cma_backend_cache__a_caller_whose_client_goes_leaves_alone),
        cmocka_unit_test(test_cma_backend_cache__a_short_deadline_fails_only_its_caller),
        cmocka_unit_test(test_cma_backend_cache__a_deadline_before_the_query_is_sent_is_429),
        cmocka_unit_test(test_cma_backend_cache__a_query_nobody_waits_for_stops),
        cmocka_unit_test(test_cma_backend_cache__a_long_deadline_sends_the_query_itself),
        cmocka_unit_test(test_cma_backend_cache__a_backend_error_is_not_asked_again),
        cmocka_unit_test(test_cma_backend_cache__serves_an_answer_until_its_ttl),
        cmocka_unit_test(test_cma_backend_cache__ttl_zero_keeps_nothing),
        cmocka_unit_test(test_cma_backend_cache__other_evaluation_time_goes_to_the_backend),
        cmocka_unit_test(test_cma_backend_cache__hits_are_per_filter),
        cmocka_unit_test(test_cma_backend_cache__byte_bound_evicts_the_oldest),
        cmocka_unit_test(test_cma_backend_cache__answer_over_the_bound_is_not_kept),
        cmocka_unit_test(test_cma_backend_cache__copies_are_charged_to_the_budget),
        cmocka_unit_test(test_cma_backend_cache__filters_without_an_id_are_not_shared),
        cmocka_unit_test(test_cma_backend_cache__series_and_name_pass_through),
        cmocka_unit_test(test_cma_backend_cache_wrap__refuses_no_backend),
        cmocka_unit_test(test_cma_prom_result_filter__keeps_a_scalar),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
