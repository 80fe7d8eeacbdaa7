/* arena_test.c: the bump allocator: zeroed and aligned memory, copies, printf, the ceiling
 * (CMA_ERR_TOO_LARGE, counted in chunk bytes), large allocations, overflow, reuse after done,
 * deferred cleanups (run once, newest first, at once when the record cannot be allocated). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "cma/arena.h"

static void test_cma_arena_alloc__zeroed_aligned_distinct(void **state)
{
    (void)state;
    struct cma_arena a;
    cma_arena_init(&a, 0);
    unsigned char *prev = NULL;
    for (size_t n = 0; n < 200; n++) {
        unsigned char *p = cma_arena_alloc(&a, n);
        assert_non_null(p);
        assert_int_equal((uintptr_t)p % 16, 0);
        for (size_t i = 0; i < n; i++)
            assert_int_equal(p[i], 0);
        memset(p, 0xAB, n); /* ASan: each block is really n bytes, and blocks do not overlap */
        assert_true(p != prev);
        prev = p;
    }
    assert_int_equal(a.rc, CMA_OK);
    assert_true(a.total >= 200 * 199 / 2);
    cma_arena_done(&a);
    assert_null(a.head);
    assert_int_equal(a.total, 0);
}

static void test_cma_arena_strings__copies_and_printf(void **state)
{
    (void)state;
    struct cma_arena a;
    cma_arena_init(&a, 0);
    char src[] = "pods,nodes";
    char *d = cma_arena_strndup(&a, src, 4);
    assert_string_equal(d, "pods");
    src[0] = 'X';
    assert_string_equal(d, "pods");
    assert_string_equal(cma_arena_strdup(&a, "abc"), "abc");
    assert_null(cma_arena_strdup(&a, NULL));
    assert_int_equal(a.rc, CMA_OK);
    assert_string_equal(cma_arena_strndup(&a, NULL, 0), "");
    char *f = cma_arena_printf(&a, "%s{%s=\"%d\"}", "up", "job", 42);
    assert_string_equal(f, "up{job=\"42\"}");
    char big[10000];
    memset(big, 'x', sizeof(big) - 1);
    big[sizeof(big) - 1] = '\0';
    char *g = cma_arena_printf(&a, "<%s>", big);
    assert_int_equal(strlen(g), sizeof(big) + 1);
    assert_int_equal(g[0], '<');
    assert_int_equal(g[sizeof(big)], '>');
    cma_arena_done(&a);
}

static void test_cma_arena_alloc__ceiling(void **state)
{
    (void)state;
    struct cma_arena a;
    cma_arena_init(&a, 3 * 4096);
    for (int i = 0; i < 3; i++)
        assert_non_null(cma_arena_alloc(&a, 4000)); /* one chunk each */
    assert_int_equal(a.total, 3 * 4096);
    assert_null(cma_arena_alloc(&a, 4000));
    assert_int_equal(a.rc, CMA_ERR_TOO_LARGE);
    assert_int_equal(a.total, 3 * 4096);      /* the failure took nothing */
    assert_non_null(cma_arena_alloc(&a, 64)); /* still fits the last chunk */
    cma_arena_done(&a);
    assert_non_null(cma_arena_alloc(&a, 4000)); /* done: reusable, same ceiling */
    assert_null(cma_arena_alloc(&a, 4 * 4096));
    assert_int_equal(a.rc, CMA_ERR_TOO_LARGE);
    assert_null(cma_arena_printf(&a, "%0*d", 20000, 1));
    cma_arena_done(&a);
}

static void test_cma_arena_alloc__large_and_overflow(void **state)
{
    (void)state;
    struct cma_arena a;
    cma_arena_init(&a, 0);
    char *small = cma_arena_alloc(&a, 10);
    char *large = cma_arena_alloc(&a, 100000);
    assert_non_null(small);
    assert_non_null(large);
    memset(large, 1, 100000);
    assert_true(a.total >= 100000 + 4096);
    assert_null(cma_arena_alloc(&a, SIZE_MAX / 2));
    assert_int_equal(a.rc, CMA_ERR_TOO_LARGE);
    assert_null(cma_arena_array(&a, SIZE_MAX / 8, 16));
    assert_int_equal(a.rc, CMA_ERR_TOO_LARGE);
    int *ints = cma_arena_array(&a, 100, sizeof(int));
    assert_non_null(ints);
    assert_int_equal(ints[99], 0);
    cma_arena_done(&a);
}

struct trace {
    char order[8];
    size_t n;
};

struct mark {
    struct trace *trace;
    char c;
};

static void record(void *p)
{
    struct mark *m = p;
    m->trace->order[m->trace->n++] = m->c;
}

static void test_cma_arena_defer__order_and_failure(void **state)
{
    (void)state;
    struct trace t = {{0}, 0};
    struct mark a_ = {&t, 'a'}, b_ = {&t, 'b'}, c_ = {&t, 'c'};
    struct cma_arena a;
    cma_arena_init(&a, 4096);
    assert_int_equal(cma_arena_defer(&a, record, &a_), CMA_OK);
    assert_int_equal(cma_arena_defer(&a, record, &b_), CMA_OK);
    assert_int_equal(cma_arena_defer(&a, record, NULL), CMA_OK); /* nothing to clean */
    assert_int_equal(t.n, 0);
    assert_non_null(cma_arena_alloc(&a, 3000)); /* the chunk is now nearly full */
    assert_null(cma_arena_alloc(&a, 2000));     /* and no second chunk fits the ceiling */
    assert_int_equal(cma_arena_defer(&a, record, &c_), CMA_OK); /* 32 bytes still fit */
    size_t filled = 0;
    while (filled < 4096 && cma_arena_alloc(&a, 16)) /* fill the chunk to the last byte */
        filled += 16;
    assert_int_equal(filled, 4096 - 3 * 32 - 3008);
    struct mark d_ = {&t, 'd'};
    assert_int_equal(cma_arena_defer(&a, record, &d_), CMA_ERR_TOO_LARGE);
    assert_int_equal(t.n, 1); /* run at once */
    assert_int_equal(t.order[0], 'd');
    cma_arena_done(&a);
    assert_int_equal(t.n, 4);
    assert_memory_equal(t.order, "dcba", 4);
    cma_arena_done(&a); /* nothing runs twice */
    assert_int_equal(t.n, 4);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cma_arena_alloc__zeroed_aligned_distinct),
        cmocka_unit_test(test_cma_arena_strings__copies_and_printf),
        cmocka_unit_test(test_cma_arena_alloc__ceiling),
        cmocka_unit_test(test_cma_arena_alloc__large_and_overflow),
        cmocka_unit_test(test_cma_arena_defer__order_and_failure),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
