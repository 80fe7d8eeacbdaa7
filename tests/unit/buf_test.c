/* buf_test.c: cma_buf growth, ceiling and the "failed append leaves it empty" rule. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "cma/buf.h"

static void test_cma_buf_append__grows_and_terminates(void **state)
{
    (void)state;
    struct cma_buf b;
    cma_buf_init(&b, 0);
    assert_string_equal(cma_buf_str(&b), "");
    for (int i = 0; i < 1000; i++)
        assert_int_equal(cma_buf_appends(&b, "ab"), CMA_OK);
    assert_int_equal(b.len, 2000);
    assert_int_equal(strlen(cma_buf_str(&b)), 2000);
    assert_int_equal(cma_buf_printf(&b, "%d-%s", 42, "x"), CMA_OK);
    assert_string_equal(cma_buf_str(&b) + 2000, "42-x");
    cma_buf_done(&b);
}

static void test_cma_buf_append__over_ceiling_empties(void **state)
{
    (void)state;
    struct cma_buf b;
    cma_buf_init(&b, 10);
    assert_int_equal(cma_buf_appends(&b, "0123456789"), CMA_OK);
    assert_int_equal(cma_buf_appendc(&b, 'x'), CMA_ERR_TOO_LARGE);
    assert_int_equal(b.len, 0);
    assert_null(b.ptr);
    assert_int_equal(cma_buf_printf(&b, "%s", "01234567890"), CMA_ERR_TOO_LARGE);
    cma_buf_done(&b);
}

static void test_cma_buf_take__hands_over(void **state)
{
    (void)state;
    struct cma_buf b;
    cma_buf_init(&b, 0);
    char *empty = cma_buf_take(&b);
    assert_string_equal(empty, "");
    free(empty);
    cma_buf_appends(&b, "hello");
    char *s = cma_buf_take(&b);
    assert_string_equal(s, "hello");
    assert_null(b.ptr);
    free(s);
}

/* cma_buf_append_u64 writes what "%llu" writes, at both ends of the range and at every power of
 * ten (where the digit count changes), appended after what is there. */
static void test_cma_buf_append_u64__same_as_printf(void **state)
{
    (void)state;
    unsigned long long values[64];
    size_t n = 0;
    values[n++] = 0;
    values[n++] = 18446744073709551615ULL;
    values[n++] = 18446744073709551614ULL;
    for (unsigned long long p = 1; p <= 10000000000000000000ULL && n + 2 < 64; p *= 10) {
        values[n++] = p;
        values[n++] = p - 1 + (p == 1); /* 9, 99, ... (1 for p == 1) */
        if (p > 1844674407370955161ULL)
            break;
    }
    for (size_t i = 0; i < n; i++) {
        struct cma_buf b;
        cma_buf_init(&b, 0);
        assert_int_equal(cma_buf_appends(&b, "k"), CMA_OK);
        assert_int_equal(cma_buf_append_u64(&b, values[i]), CMA_OK);
        char want[32];
        snprintf(want, sizeof want, "k%llu", values[i]);
        assert_string_equal(cma_buf_str(&b), want);
        assert_int_equal(b.len, strlen(want));
        cma_buf_done(&b);
    }
    struct cma_buf tight; /* over the ceiling: fails and empties, as every append does */
    cma_buf_init(&tight, 4);
    assert_int_equal(cma_buf_appends(&tight, "ab"), CMA_OK);
    assert_int_equal(cma_buf_append_u64(&tight, 12345), CMA_ERR_TOO_LARGE);
    assert_int_equal(tight.len, 0);
    cma_buf_done(&tight);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cma_buf_append__grows_and_terminates),
        cmocka_unit_test(test_cma_buf_append__over_ceiling_empties),
        cmocka_unit_test(test_cma_buf_take__hands_over),
        cmocka_unit_test(test_cma_buf_append_u64__same_as_printf),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
