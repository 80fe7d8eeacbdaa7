/* str_test.c: Go durations (parse and String()), percent-decoding. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include <cmocka.h>

#include "cma/str.h"

static void test_cma_duration_parse__go_forms(void **state)
{
    (void)state;
    struct {
        const char *in;
        int64_t ms;
    } cases[] = {{"10m", 600000}, {"1m30s", 90000}, {"500ms", 500},     {"1h", 3600000},
                 {"0", 0},        {"1.5s", 1500},   {"2h45m", 9900000}, {"-1s", -1000}};
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        int64_t ms = -7;
        assert_int_equal(cma_duration_parse(cases[i].in, &ms, NULL), CMA_OK);
        assert_int_equal(ms, cases[i].ms);
    }
    int64_t ms;
    struct cma_err err;
    cma_err_clear(&err);
    assert_int_equal(cma_duration_parse("10", &ms, &err), CMA_ERR_FLAG);
    assert_string_equal(err.msg, "missing unit in duration \"10\"");
    assert_int_equal(cma_duration_parse("abc", &ms, NULL), CMA_ERR_FLAG);
    assert_int_equal(cma_duration_parse("", &ms, NULL), CMA_ERR_FLAG);
    assert_int_equal(cma_duration_parse("5x", &ms, NULL), CMA_ERR_FLAG);
}

static void test_cma_duration_format__go_string(void **state)
{
    (void)state;
    char out[32];
    assert_string_equal(cma_duration_format(300000, out, sizeof(out)), "5m0s");
    assert_string_equal(cma_duration_format(3600000, out, sizeof(out)), "1h0m0s");
    assert_string_equal(cma_duration_format(1500, out, sizeof(out)), "1.5s");
    assert_string_equal(cma_duration_format(500, out, sizeof(out)), "500ms");
    assert_string_equal(cma_duration_format(0, out, sizeof(out)), "0s");
    assert_string_equal(cma_duration_format(90000, out, sizeof(out)), "1m30s");
}

static void test_cma_percent_decode__query_and_path(void **state)
{
    (void)state;
    char *out;
    assert_int_equal(cma_percent_decode("app+in+%28a%2Cb%29", 18, true, &out, NULL), CMA_OK);
    assert_string_equal(out, "app in (a,b)");
    free(out);
    assert_int_equal(cma_percent_decode("a+b%2B", 6, false, &out, NULL), CMA_OK);
    assert_string_equal(out, "a+b+");
    free(out);
    assert_int_equal(cma_percent_decode("%2A", 3, false, &out, NULL), CMA_OK);
    assert_string_equal(out, "*");
    free(out);
    assert_int_equal(cma_percent_decode("%2", 2, false, &out, NULL), CMA_ERR_BAD_REQUEST);
    assert_int_equal(cma_percent_decode("%zz", 3, false, &out, NULL), CMA_ERR_BAD_REQUEST);
    assert_int_equal(cma_percent_decode("a%00b", 5, false, &out, NULL), CMA_ERR_BAD_REQUEST);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cma_duration_parse__go_forms),
        cmocka_unit_test(test_cma_duration_format__go_string),
        cmocka_unit_test(test_cma_percent_decode__query_and_path),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
