/* backend_limit_test.c: the concurrency bound on a backend (src/clients/backend_limit.c) around
 * a stub backend that counts the queries inside it at once and can hold them until the test
 * releases them, with real threads. Time is the test's own clock (injected): deadlines pass
 * because the test moves that clock, never because a test sleeps; threads are synchronised on
 * the limiter's counters and the stub's condition variable. No assertion depends on timing. */
#include <pthread.h>
#include <sched.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "cma/backend_limit.h"

struct stub {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int calls;      /* queries received */
    int inside;     /* queries inside now */
    int max_inside; /* the most inside at once */
    bool hold;      /* hold every query until released */
    enum cma_errc fail;
    struct cma_call seen; /* the call of the last query (copied) */
    bool seen_call;       /* the last query had a call */
    bool seen_gone;       /* what the last query's call said about its client */
    const struct cma_keep *seen_keep_ptr;
    struct cma_keep seen_keep; /* the last query's keep filter (copied) */
    int series_calls;
};

static enum cma_errc stub_query(void *ctx, const char *promql, int64_t time_ms,
                                const struct cma_keep *keep, struct cma_prom_result **ret,
                                struct cma_err *reterr)
{
    struct stub *s = ctx;
    (void)promql;
    (void)time_ms;
    pthread_mutex_lock(&s->mu);
    s->calls++;
    s->inside++;
    if (s->inside > s->max_inside)
        s->max_inside = s->inside;
    s->seen_keep_ptr = keep;
    s->seen_keep = keep ? *keep : (struct cma_keep){0};
    s->seen_call = keep && keep->call;
    s->seen = s->seen_call ? *keep->call : (struct cma_call){0};
    s->seen_gone = cma_call_gone(keep ? keep->call : NULL);
    pthread_cond_broadcast(&s->cv);
    while (s->hold)
        pthread_cond_wait(&s->cv, &s->mu);
    s->inside--;
    enum cma_errc fail = s->fail;
    pthread_mutex_unlock(&s->mu);
    *ret = NULL;
    if (fail != CMA_OK)
        return cma_err_set(reterr, fail, "stub failure");
    return CMA_OK;
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
    (void)fn;
    (void)fn_ctx;
    (void)reterr;
    pthread_mutex_lock(&s->mu);
    s->series_calls++;
    pthread_mutex_unlock(&s->mu);
    return CMA_OK;
}

static const char *stub_name(const void *ctx)
{
    (void)ctx;
    return "stub-backend";
}

static const struct cma_backend_ops STUB_OPS = {stub_query, stub_series, stub_name};

struct fixture {
    struct stub stub;
    _Atomic int64_t clock;
    struct cma_backend_limit *limit;
    struct cma_backend backend;
};

static int64_t test_clock(void *ctx)
{
    struct fixture *f = ctx;
    return atomic_load(&f->clock);
}

static struct fixture *fixture_new(unsigned max, int64_t timeout_ms)
{
    struct fixture *f = calloc(1, sizeof(*f));
    assert_non_null(f);
    pthread_mutex_init(&f->stub.mu, NULL);
    pthread_cond_init(&f->stub.cv, NULL);
    atomic_init(&f->clock, 1000);
    struct cma_backend inner = {&STUB_OPS, &f->stub};
    struct cma_backend_limit_config cfg = {
        .max_in_flight = max, .timeout_ms = timeout_ms, .clock_ms = test_clock, .clock_ctx = f};
    struct cma_err err;
    cma_err_clear(&err);
    assert_int_equal(cma_backend_limit_new(&cfg, &inner, &f->limit, &err), CMA_OK);
    f->backend = cma_backend_limit_backend(f->limit);
    return f;
}

static void fixture_free(struct fixture *f)
{
    cma_backend_limit_free(f->limit);
    pthread_cond_destroy(&f->stub.cv);
    pthread_mutex_destroy(&f->stub.mu);
    free(f);
}

static void set_hold(struct stub *s, bool hold)
{
    pthread_mutex_lock(&s->mu);
    s->hold = hold;
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
}

static void wait_inside(struct stub *s, int n)
{
    pthread_mutex_lock(&s->mu);
    while (s->inside != n)
        pthread_cond_wait(&s->cv, &s->mu);
    pthread_mutex_unlock(&s->mu);
}

/* Waits until the limiter has `n` queries waiting for a slot. */
static void wait_waiting(struct fixture *f, unsigned n)
{
    for (;;) {
        struct cma_backend_limit_stats st;
        cma_backend_limit_stats(f->limit, &st);
        if (st.waiting == n)
            return;
        sched_yield();
    }
}

/* One query on its own thread. */
struct job {
    pthread_t th;
    struct fixture *f;
    const struct cma_call *call;
    enum cma_errc rc;
    struct cma_err err;
};

static void *run_job(void *arg)
{
    struct job *j = arg;
    struct cma_keep keep = {NULL, NULL, NULL, j->call, NULL};
    struct cma_prom_result *r = NULL;
    cma_err_clear(&j->err);
    j->rc = cma_backend_query(&j->f->backend, "up", 1, &keep, &r, &j->err);
    return NULL;
}

static void start_job(struct job *j, struct fixture *f, const struct cma_call *call)
{
    *j = (struct job){.f = f, .call = call};
    assert_int_equal(pthread_create(&j->th, NULL, run_job, j), 0);
}

static void test_bound_holds_with_many_threads(void **state)
{
    (void)state;
    struct fixture *f = fixture_new(2, 0);
    set_hold(&f->stub, true);
    struct job jobs[6];
    for (size_t i = 0; i < 6; i++)
        start_job(&jobs[i], f, NULL);
    wait_inside(&f->stub, 2);
    wait_waiting(f, 4);
    struct cma_backend_limit_stats st;
    cma_backend_limit_stats(f->limit, &st);
    assert_int_equal(st.in_flight, 2);
    set_hold(&f->stub, false);
    for (size_t i = 0; i < 6; i++) {
        pthread_join(jobs[i].th, NULL);
        assert_int_equal(jobs[i].rc, CMA_OK);
    }
    cma_backend_limit_stats(f->limit, &st);
    assert_int_equal(f->stub.calls, 6);
    assert_int_equal(f->stub.max_inside, 2);
    assert_int_equal(st.max_in_flight, 2);
    assert_int_equal(st.in_flight, 0);
    assert_int_equal(st.waiting, 0);
    assert_int_equal(st.queries, 6);
    assert_int_equal(st.waited, 4);
    assert_int_equal(st.rejected, 0);
    fixture_free(f);
}

static void test_deadline_passed_gives_429(void **state)
{
    (void)state;
    struct fixture *f = fixture_new(1, 0);
    set_hold(&f->stub, true);
    struct job holder;
    start_job(&holder, f, NULL);
    wait_inside(&f->stub, 1);
    /* a request whose deadline is now: no slot, no wait */
    struct cma_call late = {.deadline_ms = 1000};
    struct job j;
    start_job(&j, f, &late);
    pthread_join(j.th, NULL);
    assert_int_equal(j.rc, CMA_ERR_TOO_MANY_REQUESTS);
    assert_non_null(strstr(j.err.msg, "stub-backend"));
    assert_non_null(strstr(j.err.msg, "--prometheus-max-concurrent-queries"));
    /* a request with time left waits; moving the clock past its deadline ends the wait */
    struct cma_call later = {.deadline_ms = 5000};
    start_job(&j, f, &later);
    wait_waiting(f, 1);
    atomic_store(&f->clock, 5000);
    pthread_join(j.th, NULL);
    assert_int_equal(j.rc, CMA_ERR_TOO_MANY_REQUESTS);
    set_hold(&f->stub, false);
    pthread_join(holder.th, NULL);
    assert_int_equal(holder.rc, CMA_OK);
    struct cma_backend_limit_stats st;
    cma_backend_limit_stats(f->limit, &st);
    assert_int_equal(st.rejected, 2);
    assert_int_equal(st.queries, 1);
    assert_int_equal(f->stub.calls, 1);
    fixture_free(f);
}

static void test_timeout_bounds_the_wait_without_a_call(void **state)
{
    (void)state;
    struct fixture *f = fixture_new(1, 3000);
    set_hold(&f->stub, true);
    struct job holder, j;
    start_job(&holder, f, NULL);
    wait_inside(&f->stub, 1);
    start_job(&j, f, NULL);
    wait_waiting(f, 1);
    atomic_store(&f->clock, 1000 + 3000);
    pthread_join(j.th, NULL);
    assert_int_equal(j.rc, CMA_ERR_TOO_MANY_REQUESTS);
    set_hold(&f->stub, false);
    pthread_join(holder.th, NULL);
    fixture_free(f);
}

static bool flag_gone(const void *ctx)
{
    return atomic_load((const atomic_bool *)ctx);
}

static void test_client_gone_leaves_the_wait(void **state)
{
    (void)state;
    struct fixture *f = fixture_new(1, 0);
    set_hold(&f->stub, true);
    struct job holder, j;
    start_job(&holder, f, NULL);
    wait_inside(&f->stub, 1);
    atomic_bool gone;
    atomic_init(&gone, false);
    struct cma_call call = {.deadline_ms = 0, .gone = flag_gone, .gone_ctx = &gone};
    start_job(&j, f, &call);
    wait_waiting(f, 1);
    atomic_store(&gone, true);
    pthread_join(j.th, NULL);
    assert_int_equal(j.rc, CMA_ERR_BACKEND_TIMEOUT);
    assert_non_null(strstr(j.err.msg, "closed its connection"));
    set_hold(&f->stub, false);
    pthread_join(holder.th, NULL);
    struct cma_backend_limit_stats st;
    cma_backend_limit_stats(f->limit, &st);
    assert_int_equal(st.abandoned, 1);
    assert_int_equal(f->stub.calls, 1);
    fixture_free(f);
}

static bool keep_all(void *ctx, const struct cma_label_view *labels, size_t n)
{
    (void)ctx;
    (void)labels;
    (void)n;
    return true;
}

static void test_narrower_call_passed_down(void **state)
{
    (void)state;
    struct fixture *f = fixture_new(4, 5000); /* clock at 1000: its own deadline is 6000 */
    struct cma_prom_result *r = NULL;
    int marker = 0;
    atomic_bool gone;
    atomic_init(&gone, true);
    struct cma_call soon = {.deadline_ms = 3000, .gone = flag_gone, .gone_ctx = &gone};
    struct cma_keep keep = {keep_all, &marker, "id-1", &soon, NULL};
    assert_int_equal(cma_backend_query(&f->backend, "up", 1, &keep, &r, NULL), CMA_OK);
    assert_true(f->stub.seen_call);
    assert_int_equal(f->stub.seen.deadline_ms, 3000); /* the request's, earlier than 6000 */
    assert_true(f->stub.seen_gone);                   /* gone() travels with it */
    assert_ptr_equal(f->stub.seen_keep.fn, keep_all); /* the filter unchanged */
    assert_ptr_equal(f->stub.seen_keep.ctx, &marker);
    assert_string_equal(f->stub.seen_keep.id, "id-1");
    assert_ptr_not_equal(f->stub.seen_keep_ptr, &keep); /* a copy: the caller's is untouched */
    assert_ptr_equal(keep.call, &soon);
    struct cma_call late = {.deadline_ms = 60000};
    keep.call = &late;
    assert_int_equal(cma_backend_query(&f->backend, "up", 1, &keep, &r, NULL), CMA_OK);
    assert_int_equal(f->stub.seen.deadline_ms, 6000); /* bounded by the backend's timeout */
    assert_false(f->stub.seen_gone);
    assert_int_equal(cma_backend_query(&f->backend, "up", 1, NULL, &r, NULL), CMA_OK);
    assert_true(f->stub.seen_call); /* no filter: one is made to carry the deadline */
    assert_int_equal(f->stub.seen.deadline_ms, 6000);
    assert_null(f->stub.seen_keep.fn);
    fixture_free(f);
}

static void test_errors_pass_and_free_the_slot(void **state)
{
    (void)state;
    struct fixture *f = fixture_new(1, 0);
    f->stub.fail = CMA_ERR_BACKEND_UNAVAILABLE;
    struct cma_prom_result *r = NULL;
    struct cma_err err;
    for (int i = 0; i < 3; i++) {
        cma_err_clear(&err);
        assert_int_equal(cma_backend_query(&f->backend, "up", 1, NULL, &r, &err),
                         CMA_ERR_BACKEND_UNAVAILABLE);
        assert_string_equal(err.msg, "stub failure");
    }
    struct cma_backend_limit_stats st;
    cma_backend_limit_stats(f->limit, &st);
    assert_int_equal(st.in_flight, 0);
    assert_int_equal(st.queries, 3);
    assert_int_equal(st.waited, 0);
    fixture_free(f);
}

static void test_series_and_name_pass_through(void **state)
{
    (void)state;
    struct fixture *f = fixture_new(1, 0);
    set_hold(&f->stub, true);
    struct job holder;
    start_job(&holder, f, NULL);
    wait_inside(&f->stub, 1);
    /* every slot taken: a series listing is not limited */
    assert_int_equal(cma_backend_series(&f->backend, "up", 0, 1, NULL, NULL, NULL), CMA_OK);
    assert_int_equal(f->stub.series_calls, 1);
    assert_string_equal(cma_backend_name(&f->backend), "stub-backend");
    set_hold(&f->stub, false);
    pthread_join(holder.th, NULL);
    fixture_free(f);
}

static void test_new_refuses_no_backend(void **state)
{
    (void)state;
    struct cma_backend_limit *l = (struct cma_backend_limit *)&l;
    struct cma_err err;
    cma_err_clear(&err);
    struct cma_backend none = {0};
    assert_int_equal(cma_backend_limit_new(NULL, &none, &l, &err), CMA_ERR_INTERNAL);
    assert_null(l);
    cma_backend_limit_free(NULL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_bound_holds_with_many_threads),
        cmocka_unit_test(test_deadline_passed_gives_429),
        cmocka_unit_test(test_timeout_bounds_the_wait_without_a_call),
        cmocka_unit_test(test_client_gone_leaves_the_wait),
        cmocka_unit_test(test_narrower_call_passed_down),
        cmocka_unit_test(test_errors_pass_and_free_the_slot),
        cmocka_unit_test(test_series_and_name_pass_through),
        cmocka_unit_test(test_new_refuses_no_backend),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
