/* str_test.c: Go durations (parse and String()), percent-decoding, URLs for display. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

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

static void test_cma_url_display__strips_userinfo_only(void **state)
{
    (void)state;
    struct {
        const char *in, *want;
        bool userinfo;
    } cases[] = {
        {"https://user:pa%40ss@mimir.example:8080/prometheus?tenant=a",
         "https://mimir.example:8080/prometheus?tenant=a", true},
        {"http://user:p@ss@host/", "http://host/", true}, /* the last '@' ends userinfo */
        {"http://token@host:9090", "http://host:9090", true},
        {"http://host:9090/p?next=a@b#x@y", "http://host:9090/p?next=a@b#x@y", false},
        {"http://host:9090/a@b", "http://host:9090/a@b", false},
        {"http://prometheus.monitoring.svc:9090", "http://prometheus.monitoring.svc:9090", false},
        {"not a url", "not a url", false},
        {"", "", false},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        char *out = cma_url_display(cases[i].in);
        assert_non_null(out);
        assert_string_equal(out, cases[i].want);
        assert_int_equal(cma_url_has_userinfo(cases[i].in), cases[i].userinfo);
        assert_null(strstr(out, "pa%40ss"));
        free(out);
    }
    assert_null(cma_url_display(NULL));
    assert_false(cma_url_has_userinfo(NULL));
}

/* cma_str_concat writes what snprintf(out, size, "%s%s%s") writes and returns what it returns,
 * for every buffer size from 0 past the whole length (cuts at each byte, empty parts). */
static void test_cma_str_concat__same_as_snprintf(void **state)
{
    (void)state;
    const char *const parts[] = {"/apis/", "", "custom.metrics.k8s.io", "/", "v1beta2"};
    size_t n = sizeof parts / sizeof parts[0];
    char want[64], got[64];
    for (size_t size = 0; size < sizeof want; size++) {
        memset(want, '#', sizeof want);
        memset(got, '#', sizeof got);
        int w =
            snprintf(want, size, "%s%s%s%s%s", parts[0], parts[1], parts[2], parts[3], parts[4]);
        size_t g = cma_str_concat(got, size, parts, n);
        assert_int_equal(g, (size_t)w);
        assert_memory_equal(got, want, sizeof want); /* nothing written past the cut */
    }
    assert_int_equal(cma_str_concat(got, sizeof got, parts, 0), 0);
    assert_string_equal(got, "");
}

/* cma_u64_format writes what "%0*llu" writes, for widths below, at and above the digit count,
 * both ends of the range, and stops padding at CMA_U64_DIGITS. */
static void test_cma_u64_format__same_as_printf(void **state)
{
    (void)state;
    const uint64_t values[] = {0, 7, 10, 99, 999, 1000, 123456789, UINT64_MAX - 1, UINT64_MAX};
    for (size_t i = 0; i < sizeof values / sizeof values[0]; i++) {
        for (unsigned width = 0; width <= 4; width++) {
            char got[CMA_U64_DIGITS + 1];
            size_t n = cma_u64_format(got, values[i], width);
            got[n] = '\0';
            char want[32];
            snprintf(want, sizeof want, "%0*llu", (int)width, (unsigned long long)values[i]);
            assert_string_equal(got, want);
        }
    }
    char out[CMA_U64_DIGITS];
    assert_int_equal(cma_u64_format(out, 5, 40), CMA_U64_DIGITS);
    assert_memory_equal(out, "00000000000000000005", CMA_U64_DIGITS);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cma_duration_parse__go_forms),
        cmocka_unit_test(test_cma_duration_format__go_string),
        cmocka_unit_test(test_cma_percent_decode__query_and_path),
        cmocka_unit_test(test_cma_url_display__strips_userinfo_only),
        cmocka_unit_test(test_cma_u64_format__same_as_printf),
        cmocka_unit_test(test_cma_str_concat__same_as_snprintf),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
