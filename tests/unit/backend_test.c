/* backend_test.c: the backend seam (src/clients/backend.c): dispatch to an implementation's
 * operations with every argument passed through and its results returned, a clear error when
 * no backend is set, and the Prometheus implementation calling the client (a closed port gives
 * the client's own "unavailable" error, and the backend is named by its URL). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "cma/backend.h"
#include "testlib.h"

static int count_series(void *ctx, const char *metric, size_t metric_len,
                        const struct cma_label_view *labels, size_t n_labels)
{
    int *n = ctx;
    assert_int_equal(metric_len, 2);
    assert_memory_equal(metric, "up", 2);
    assert_int_equal(n_labels, 1);
    assert_memory_equal(labels[0].value, "p1", 2);
    (*n)++;
    return 0;
}

static void test_cma_backend__dispatches_to_the_implementation(void **state)
{
    (void)state;
    struct test_stub s = {
        .query_rc = CMA_ERR_BACKEND_TIMEOUT, .query_msg = "stub timeout", .name = "stub"};
    struct cma_backend b = test_stub_backend(&s);
    struct cma_err err = {0};
    struct cma_prom_result *r = (struct cma_prom_result *)&s; /* must be overwritten */
    int marker = 0;
    struct cma_keep keep = {NULL, &marker, "id", NULL, NULL};
    assert_int_equal(cma_backend_query(&b, "sum(up)", 1234, &keep, &r, &err),
                     CMA_ERR_BACKEND_TIMEOUT);
    assert_null(r);
    assert_string_equal(err.msg, "stub timeout");
    assert_string_equal(s.promql, "sum(up)");
    assert_int_equal(s.time_ms, 1234);
    assert_ptr_equal(s.keep_ctx, &marker);

    int n = 0;
    cma_err_clear(&err);
    assert_int_equal(cma_backend_series(&b, "{__name__=~\"u.*\"}", 10, 20, count_series, &n, &err),
                     CMA_OK);
    assert_int_equal(n, 1);
    assert_string_equal(s.match, "{__name__=~\"u.*\"}");
    assert_int_equal(s.start_ms, 10);
    assert_int_equal(s.end_ms, 20);
    assert_int_equal(s.calls, 2);
    assert_string_equal(cma_backend_name(&b), "stub");
}

static void test_cma_backend__unset_is_a_clear_error(void **state)
{
    (void)state;
    struct cma_backend none = {0};
    struct cma_err err = {0};
    struct cma_prom_result *r = NULL;
    assert_int_equal(cma_backend_query(&none, "up", 0, NULL, &r, &err), CMA_ERR_INTERNAL);
    assert_string_equal(err.msg, "no backend to query");
    cma_err_clear(&err);
    assert_int_equal(cma_backend_series(NULL, "up", 0, 0, count_series, NULL, &err),
                     CMA_ERR_INTERNAL);
    assert_string_equal(err.msg, "no backend to list series from");
    assert_string_equal(cma_backend_name(NULL), "(no backend)");
}

static void test_cma_backend_prom__calls_the_client(void **state)
{
    (void)state;
    struct cma_prom_config cfg = {.url = "http://127.0.0.1:1", .timeout_ms = 2000};
    struct cma_prom *p = NULL;
    struct cma_err err = {0};
    assert_int_equal(cma_prom_new(&cfg, &p, &err), CMA_OK);
    struct cma_backend b = cma_backend_prom(p);
    assert_string_equal(cma_backend_name(&b), "http://127.0.0.1:1");
    struct cma_prom_result *r = NULL;
    assert_int_equal(cma_backend_query(&b, "up", 0, NULL, &r, &err), CMA_ERR_BACKEND_UNAVAILABLE);
    assert_null(r);
    int n = 0;
    cma_err_clear(&err);
    assert_int_equal(cma_backend_series(&b, "up", 0, 1000, count_series, &n, &err),
                     CMA_ERR_BACKEND_UNAVAILABLE);
    assert_int_equal(n, 0);
    cma_prom_free(p);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cma_backend__dispatches_to_the_implementation),
        cmocka_unit_test(test_cma_backend__unset_is_a_clear_error),
        cmocka_unit_test(test_cma_backend_prom__calls_the_client),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
