/* workpool_test.c: the bounded handler pool (src/http/workpool.c) on its own: bad arguments are
 * refused; jobs run on pool threads, each exactly once, up to max_threads at a time; a submit
 * beyond the bound is refused at once (no queue) and its job never runs; finished jobs free
 * their places again; cma_workpool_wait_idle reports busy before its deadline; and
 * cma_workpool_free joins running jobs before it returns. Every wait is on a condition variable
 * or a join; nothing sleeps to decide an outcome. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <pthread.h>
#include <stdbool.h>
#include <string.h>

#include "cma/clock.h"
#include "cma/err.h"

#include "../../src/http/http_internal.h"

#define MAX_JOBS 8

/* Jobs park on `open` after saying they started; `ran[i]` counts the runs of job i. */
static struct {
    pthread_mutex_t lock;
    pthread_cond_t cond;
    int started;
    bool open;
    bool freeing; /* set by the test just before cma_workpool_free */
    int ran[MAX_JOBS];
    int finished;
    pthread_t threads[MAX_JOBS];
} gate = {.lock = PTHREAD_MUTEX_INITIALIZER, .cond = PTHREAD_COND_INITIALIZER};

static int ids[MAX_JOBS] = {0, 1, 2, 3, 4, 5, 6, 7};

static void gate_reset(void)
{
    pthread_mutex_lock(&gate.lock);
    gate.started = 0;
    gate.open = false;
    gate.freeing = false;
    gate.finished = 0;
    memset(gate.ran, 0, sizeof(gate.ran));
    pthread_mutex_unlock(&gate.lock);
}

static void gated_job(void *arg)
{
    int id = *(int *)arg;
    pthread_mutex_lock(&gate.lock);
    gate.threads[id] = pthread_self();
    gate.started++;
    pthread_cond_broadcast(&gate.cond);
    while (!gate.open)
        pthread_cond_wait(&gate.cond, &gate.lock);
    gate.ran[id]++;
    gate.finished++;
    pthread_mutex_unlock(&gate.lock);
}

/* Waits until `freeing` is set, then finishes: it can only finish after free has been called. */
static void slow_job(void *arg)
{
    int id = *(int *)arg;
    pthread_mutex_lock(&gate.lock);
    gate.started++;
    pthread_cond_broadcast(&gate.cond);
    while (!gate.freeing)
        pthread_cond_wait(&gate.cond, &gate.lock);
    pthread_mutex_unlock(&gate.lock);
    /* still running after free began: free must wait for this store */
    pthread_mutex_lock(&gate.lock);
    gate.ran[id]++;
    gate.finished++;
    pthread_mutex_unlock(&gate.lock);
}

static void never_job(void *arg)
{
    (void)arg;
    fail_msg("a refused job ran");
}

static void wait_started(int n)
{
    pthread_mutex_lock(&gate.lock);
    while (gate.started < n)
        pthread_cond_wait(&gate.cond, &gate.lock);
    pthread_mutex_unlock(&gate.lock);
}

static void release(void)
{
    pthread_mutex_lock(&gate.lock);
    gate.open = true;
    pthread_cond_broadcast(&gate.cond);
    pthread_mutex_unlock(&gate.lock);
}

static int64_t far_deadline(void)
{
    return cma_clock_mono_ms() + 60000;
}

static void test_cma_workpool_new__refuses_bad_arguments(void **state)
{
    (void)state;
    struct cma_workpool *p = NULL;
    struct cma_err err;
    cma_err_clear(&err);
    assert_int_equal(cma_workpool_new(0, 0, 100, &p, &err), CMA_ERR_INTERNAL); /* max 0 */
    assert_string_equal(err.msg, "cma_workpool_new: bad arguments");
    assert_int_equal(cma_workpool_new(3, 2, 100, &p, NULL), CMA_ERR_INTERNAL); /* min > max */
    assert_int_equal(cma_workpool_new(0, 2, 0, &p, NULL), CMA_ERR_INTERNAL);   /* idle 0 */
    assert_int_equal(cma_workpool_new(0, 2, -5, &p, NULL), CMA_ERR_INTERNAL);
    assert_int_equal(cma_workpool_new(0, 2, 100, NULL, NULL), CMA_ERR_INTERNAL);
    assert_null(p);
    /* min == max is fine; a fresh pool has no thread and nothing busy */
    assert_int_equal(cma_workpool_new(2, 2, 100, &p, NULL), CMA_OK);
    assert_non_null(p);
    assert_int_equal(cma_workpool_threads(p), 0);
    assert_int_equal(cma_workpool_busy(p), 0);
    assert_true(cma_workpool_wait_idle(p, cma_clock_mono_ms() - 1));
    cma_workpool_free(p);
}

static void test_cma_workpool__null_pool_and_job(void **state)
{
    (void)state;
    assert_false(cma_workpool_submit(NULL, never_job, NULL));
    assert_int_equal(cma_workpool_busy(NULL), 0);
    assert_int_equal(cma_workpool_threads(NULL), 0);
    assert_true(cma_workpool_wait_idle(NULL, 0));
    cma_workpool_free(NULL);
    struct cma_workpool *p = NULL;
    assert_int_equal(cma_workpool_new(0, 1, 100, &p, NULL), CMA_OK);
    assert_false(cma_workpool_submit(p, NULL, NULL));
    assert_int_equal(cma_workpool_busy(p), 0);
    assert_int_equal(cma_workpool_threads(p), 0);
    cma_workpool_free(p);
}

static void test_cma_workpool_submit__bounded_no_queue(void **state)
{
    (void)state;
    gate_reset();
    struct cma_workpool *p = NULL;
    assert_int_equal(cma_workpool_new(0, 4, 60000, &p, NULL), CMA_OK);
    for (int i = 0; i < 4; i++)
        assert_true(cma_workpool_submit(p, gated_job, &ids[i]));
    wait_started(4); /* all four run at once, each on its own thread */
    pthread_mutex_lock(&gate.lock);
    for (int i = 0; i < 4; i++)
        for (int j = i + 1; j < 4; j++)
            assert_false(pthread_equal(gate.threads[i], gate.threads[j]));
    for (int i = 0; i < 4; i++)
        assert_false(pthread_equal(gate.threads[i], pthread_self()));
    pthread_mutex_unlock(&gate.lock);
    assert_int_equal(cma_workpool_busy(p), 4);
    assert_int_equal(cma_workpool_threads(p), 4);
    /* the fifth is refused at once and never runs */
    assert_false(cma_workpool_submit(p, never_job, NULL));
    assert_false(cma_workpool_submit(p, never_job, NULL));
    assert_int_equal(cma_workpool_busy(p), 4);
    /* a deadline already past: still busy */
    assert_false(cma_workpool_wait_idle(p, cma_clock_mono_ms() - 1));
    release();
    assert_true(cma_workpool_wait_idle(p, far_deadline()));
    assert_int_equal(cma_workpool_busy(p), 0);
    pthread_mutex_lock(&gate.lock);
    assert_int_equal(gate.finished, 4);
    for (int i = 0; i < 4; i++)
        assert_int_equal(gate.ran[i], 1);
    pthread_mutex_unlock(&gate.lock);
    cma_workpool_free(p);
}

static void test_cma_workpool_submit__places_free_up_after_jobs_finish(void **state)
{
    (void)state;
    gate_reset();
    release(); /* jobs finish as soon as they run */
    struct cma_workpool *p = NULL;
    assert_int_equal(cma_workpool_new(1, 2, 60000, &p, NULL), CMA_OK);
    /* eight jobs through a pool of two, each submitted once the pool is idle again */
    for (int i = 0; i < MAX_JOBS; i++) {
        assert_true(cma_workpool_submit(p, gated_job, &ids[i]));
        assert_true(cma_workpool_wait_idle(p, far_deadline()));
    }
    pthread_mutex_lock(&gate.lock);
    assert_int_equal(gate.finished, MAX_JOBS);
    for (int i = 0; i < MAX_JOBS; i++)
        assert_int_equal(gate.ran[i], 1);
    pthread_mutex_unlock(&gate.lock);
    /* idle threads are reused: never more than max_threads alive */
    assert_true(cma_workpool_threads(p) >= 1);
    assert_true(cma_workpool_threads(p) <= 2);
    cma_workpool_free(p);
}

static void test_cma_workpool_free__joins_running_jobs(void **state)
{
    (void)state;
    gate_reset();
    struct cma_workpool *p = NULL;
    assert_int_equal(cma_workpool_new(0, 3, 60000, &p, NULL), CMA_OK);
    for (int i = 0; i < 3; i++)
        assert_true(cma_workpool_submit(p, slow_job, &ids[i]));
    wait_started(3);
    pthread_mutex_lock(&gate.lock);
    assert_int_equal(gate.finished, 0);
    gate.freeing = true; /* the jobs can finish only from now on, while free runs */
    pthread_cond_broadcast(&gate.cond);
    pthread_mutex_unlock(&gate.lock);
    cma_workpool_free(p);
    pthread_mutex_lock(&gate.lock);
    assert_int_equal(gate.finished, 3);
    for (int i = 0; i < 3; i++)
        assert_int_equal(gate.ran[i], 1);
    pthread_mutex_unlock(&gate.lock);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cma_workpool_new__refuses_bad_arguments),
        cmocka_unit_test(test_cma_workpool__null_pool_and_job),
        cmocka_unit_test(test_cma_workpool_submit__bounded_no_queue),
        cmocka_unit_test(test_cma_workpool_submit__places_free_up_after_jobs_finish),
        cmocka_unit_test(test_cma_workpool_free__joins_running_jobs),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
