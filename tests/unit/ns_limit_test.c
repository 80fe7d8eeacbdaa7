/* ns_limit_test.c: query slots per (backend, namespace) (src/clients/ns_limit.c): a namespace
 * gets its slots and then an immediate 429 naming it, other namespaces and other backends are
 * untouched, a released slot is free again, idle keys are dropped when the table is full and a
 * table full of busy keys refuses; then real threads hammer a few namespaces and the test checks
 * that no namespace ever held more than its slots and that every slot came back. No assertion
 * depends on timing. */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "cma/ns_limit.h"

static struct cma_ns_limit *limit(size_t per_key, size_t keys)
{
    struct cma_ns_limit *l = NULL;
    assert_int_equal(cma_ns_limit_new(per_key, keys, &l, NULL), CMA_OK);
    return l;
}

static void test_cma_ns_limit_try_acquire__per_namespace_and_backend(void **state)
{
    (void)state;
    struct cma_ns_limit *l = limit(2, 0);
    struct cma_err err = {0};
    assert_int_equal(cma_ns_limit_try_acquire(l, "", "shop", NULL), CMA_OK);
    assert_int_equal(cma_ns_limit_try_acquire(l, "", "shop", NULL), CMA_OK);
    assert_int_equal(cma_ns_limit_try_acquire(l, "", "shop", &err), CMA_ERR_TOO_MANY_REQUESTS);
    assert_non_null(strstr(err.msg, "namespace shop already runs 2 queries"));
    assert_non_null(strstr(err.msg, "--metric-rules-max-concurrent-queries"));
    /* another namespace, another backend, and names that only concatenate alike */
    assert_int_equal(cma_ns_limit_try_acquire(l, "", "billing", NULL), CMA_OK);
    assert_int_equal(cma_ns_limit_try_acquire(l, "thanos", "shop", NULL), CMA_OK);
    assert_int_equal(cma_ns_limit_try_acquire(l, "s", "hop", NULL), CMA_OK);
    assert_int_equal(cma_ns_limit_try_acquire(l, "sh", "op", NULL), CMA_OK);
    struct cma_ns_limit_stats st;
    cma_ns_limit_stats(l, &st);
    assert_int_equal(st.in_flight, 6);
    assert_int_equal(st.acquired, 6);
    assert_int_equal(st.rejected, 1);
    assert_int_equal(st.keys, 5);
    /* a released slot is free again; a release of a slot not held changes nothing */
    cma_ns_limit_release(l, "", "shop");
    assert_int_equal(cma_ns_limit_try_acquire(l, "", "shop", NULL), CMA_OK);
    cma_ns_limit_release(l, "", "nobody");
    cma_ns_limit_release(l, "", "shop");
    cma_ns_limit_release(l, "", "shop");
    cma_ns_limit_release(l, "", "shop");
    cma_ns_limit_stats(l, &st);
    assert_int_equal(st.in_flight, 4);
    cma_ns_limit_release(l, "", "billing");
    cma_ns_limit_release(l, "thanos", "shop");
    cma_ns_limit_release(l, "s", "hop");
    cma_ns_limit_release(l, "sh", "op");
    cma_ns_limit_stats(l, &st);
    assert_int_equal(st.in_flight, 0);
    cma_ns_limit_free(l);
    cma_ns_limit_free(NULL);
}

static void test_cma_ns_limit_try_acquire__bounded_keys(void **state)
{
    (void)state;
    struct cma_ns_limit *l = limit(1, 3);
    char ns[16];
    /* 40 namespaces one after the other: idle keys make room */
    for (int i = 0; i < 40; i++) {
        snprintf(ns, sizeof(ns), "ns-%d", i);
        assert_int_equal(cma_ns_limit_try_acquire(l, "", ns, NULL), CMA_OK);
        cma_ns_limit_release(l, "", ns);
    }
    struct cma_ns_limit_stats st;
    cma_ns_limit_stats(l, &st);
    assert_true(st.keys <= 3);
    /* three busy keys: a fourth namespace is refused, a busy one still counts right */
    assert_int_equal(cma_ns_limit_try_acquire(l, "", "a", NULL), CMA_OK);
    assert_int_equal(cma_ns_limit_try_acquire(l, "", "b", NULL), CMA_OK);
    assert_int_equal(cma_ns_limit_try_acquire(l, "", "c", NULL), CMA_OK);
    struct cma_err err = {0};
    assert_int_equal(cma_ns_limit_try_acquire(l, "", "d", &err), CMA_ERR_TOO_MANY_REQUESTS);
    assert_non_null(strstr(err.msg, "too many namespaces"));
    assert_int_equal(cma_ns_limit_try_acquire(l, "", "a", NULL), CMA_ERR_TOO_MANY_REQUESTS);
    cma_ns_limit_release(l, "", "b");
    assert_int_equal(cma_ns_limit_try_acquire(l, "", "d", NULL), CMA_OK);
    assert_int_equal(cma_ns_limit_try_acquire(l, "", "a", NULL), CMA_ERR_TOO_MANY_REQUESTS);
    cma_ns_limit_release(l, "", "a");
    cma_ns_limit_release(l, "", "c");
    cma_ns_limit_release(l, "", "d");
    cma_ns_limit_stats(l, &st);
    assert_int_equal(st.in_flight, 0);
    cma_ns_limit_free(l);
}

#define THREADS 8
#define ROUNDS 2000
#define SLOTS 3

struct shared {
    struct cma_ns_limit *l;
    atomic_int inside[2];  /* per namespace, while holding a slot */
    atomic_int max_inside; /* the most seen at once in one namespace */
    atomic_int granted, refused;
};

static void *worker(void *arg)
{
    struct shared *s = arg;
    static const char *const names[2] = {"shop", "billing"};
    for (int i = 0; i < ROUNDS; i++) {
        int n = i % 2;
        if (cma_ns_limit_try_acquire(s->l, "prom", names[n], NULL) != CMA_OK) {
            atomic_fetch_add(&s->refused, 1);
            continue;
        }
        int now = atomic_fetch_add(&s->inside[n], 1) + 1;
        int max = atomic_load(&s->max_inside);
        while (now > max && !atomic_compare_exchange_weak(&s->max_inside, &max, now))
            ;
        atomic_fetch_add(&s->granted, 1);
        atomic_fetch_sub(&s->inside[n], 1);
        cma_ns_limit_release(s->l, "prom", names[n]);
    }
    return NULL;
}

static void test_cma_ns_limit__threads(void **state)
{
    (void)state;
    struct shared s = {.l = limit(SLOTS, 0)};
    pthread_t t[THREADS];
    for (int i = 0; i < THREADS; i++)
        assert_int_equal(pthread_create(&t[i], NULL, worker, &s), 0);
    for (int i = 0; i < THREADS; i++)
        assert_int_equal(pthread_join(t[i], NULL), 0);
    assert_true(atomic_load(&s.max_inside) <= SLOTS);
    assert_true(atomic_load(&s.max_inside) >= 1);
    assert_int_equal(atomic_load(&s.granted) + atomic_load(&s.refused), THREADS * ROUNDS);
    struct cma_ns_limit_stats st;
    cma_ns_limit_stats(s.l, &st);
    assert_int_equal(st.in_flight, 0);
    assert_int_equal(st.acquired, (size_t)atomic_load(&s.granted));
    assert_int_equal(st.rejected, (size_t)atomic_load(&s.refused));
    assert_int_equal(st.keys, 2);
    cma_ns_limit_free(s.l);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cma_ns_limit_try_acquire__per_namespace_and_backend),
        cmocka_unit_test(test_cma_ns_limit_try_acquire__bounded_keys),
        cmocka_unit_test(test_cma_ns_limit__threads),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
