/* backend_metrics_test.c: the measuring backend wrapper (src/clients/backend_metrics.c) around a
 * stub backend: every argument and result passes through unchanged, calls are counted by
 * backend, endpoint and outcome, latencies observed, the time spent added up; a NULL registry
 * still adds up the time; the wrapper's name is the inner backend's, and the Prometheus client's
 * name (the backend label) never carries the URL's userinfo. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "cma/backend_metrics.h"
#include "cma/metrics.h"
#include "cma/prom.h"
#include "testlib.h"

static int count_series(void *ctx, const char *metric, size_t metric_len,
                        const struct cma_label_view *labels, size_t n_labels)
{
    (void)metric;
    (void)labels;
    *(size_t *)ctx += metric_len + n_labels;
    return 0;
}

static void test_cma_backend_measured__forwards_and_counts(void **state)
{
    (void)state;
    struct cma_metrics *m = NULL;
    assert_int_equal(cma_metrics_new(&m, NULL), CMA_OK);
    struct test_stub s = {.query_msg = "stub says no", .pause_ms = 2, .name = "http://stub:9090"};
    struct cma_backend inner = test_stub_backend(&s);
    struct cma_backend_measured storage;
    struct cma_backend b = cma_backend_measured(&inner, m, &storage);
    assert_string_equal(cma_backend_name(&b), "http://stub:9090");

    struct cma_err err;
    cma_err_clear(&err);
    struct cma_prom_result *res = (void *)&s;
    int keep_ctx;
    struct cma_keep keep = {NULL, &keep_ctx, NULL, NULL, NULL};
    assert_int_equal(cma_backend_query(&b, "up", 1234, &keep, &res, &err), CMA_OK);
    assert_null(res);
    assert_string_equal(s.promql, "up");
    assert_int_equal(s.time_ms, 1234);
    assert_ptr_equal(s.keep_ctx, &keep_ctx);
    s.query_rc = CMA_ERR_BACKEND_TIMEOUT;
    assert_int_equal(cma_backend_query(&b, "up", 1, NULL, &res, &err), CMA_ERR_BACKEND_TIMEOUT);
    assert_string_equal(err.msg, "stub says no");
    size_t seen = 0;
    assert_int_equal(cma_backend_series(&b, "{a=\"b\"}", 10, 20, count_series, &seen, NULL),
                     CMA_OK);
    assert_int_equal(seen, 3);
    assert_string_equal(s.match, "{a=\"b\"}");
    assert_int_equal(s.start_ms, 10);
    assert_int_equal(s.end_ms, 20);
    assert_int_equal(s.calls, 3);

    assert_int_equal(cma_backend_measured_calls(&storage), 3);
    assert_true(cma_backend_measured_busy_ns(&storage) >= 4000000); /* two 2 ms queries */
    const char *const labels[] = {"backend", "endpoint", "outcome"};
    struct cma_metric *req =
        cma_metrics_counter(m, "custom_metrics_adapter_backend_requests_total", "", labels, 3);
    assert_non_null(req);
    assert_true(
        cma_metric_value(req, (const char *const[]){"http://stub:9090", "query", "success"}) == 1);
    assert_true(cma_metric_value(req, (const char *const[]){"http://stub:9090", "query",
                                                            "backend_timeout"}) == 1);
    assert_true(
        cma_metric_value(req, (const char *const[]){"http://stub:9090", "series", "success"}) == 1);
    struct cma_buf out;
    cma_buf_init(&out, 0);
    assert_int_equal(cma_metrics_write(m, &out), CMA_OK);
    assert_non_null(strstr(cma_buf_str(&out),
                           "custom_metrics_adapter_backend_request_duration_seconds_count{"
                           "backend=\"http://stub:9090\",endpoint=\"query\"} 2\n"));
    assert_non_null(strstr(cma_buf_str(&out),
                           "custom_metrics_adapter_backend_request_duration_seconds_bucket{"
                           "backend=\"http://stub:9090\",endpoint=\"query\",le=\"0.005\"} "));
    cma_buf_done(&out);
    cma_metrics_free(m);
}

static void test_cma_backend_measured__null_registry_still_times(void **state)
{
    (void)state;
    struct test_stub s = {.query_msg = "stub says no", .pause_ms = 2, .name = "http://stub:9090"};
    struct cma_backend inner = test_stub_backend(&s);
    struct cma_backend_measured storage;
    struct cma_backend b = cma_backend_measured(&inner, NULL, &storage);
    struct cma_prom_result *res = NULL;
    assert_int_equal(cma_backend_query(&b, "up", 1, NULL, &res, NULL), CMA_OK);
    assert_int_equal(cma_backend_measured_calls(&storage), 1);
    assert_true(cma_backend_measured_busy_ns(&storage) >= 2000000);
}

static void test_cma_backend_measured__no_inner_backend(void **state)
{
    (void)state;
    struct cma_backend_measured storage;
    struct cma_backend b = cma_backend_measured(NULL, NULL, &storage);
    struct cma_err err;
    cma_err_clear(&err);
    struct cma_prom_result *res = NULL;
    assert_int_equal(cma_backend_query(&b, "up", 1, NULL, &res, &err), CMA_ERR_INTERNAL);
    assert_string_equal(cma_backend_name(&b), "(no backend)");
}

/* The name of a measured Prometheus client (the `backend` label of /metrics) for a URL. */
static void check_prom_name(const char *url, const char *want)
{
    struct cma_prom_config pc = {.url = url};
    struct cma_prom *p = NULL;
    struct cma_err err;
    cma_err_clear(&err);
    assert_int_equal(cma_prom_new(&pc, &p, &err), CMA_OK);
    struct cma_backend inner = cma_backend_prom(p);
    struct cma_backend_measured storage;
    struct cma_backend b = cma_backend_measured(&inner, NULL, &storage);
    assert_string_equal(cma_backend_name(&b), want);
    assert_null(strstr(cma_backend_name(&b), "s3cret"));
    cma_prom_free(p);
}

static void test_cma_backend_prom__name_without_userinfo(void **state)
{
    (void)state;
    check_prom_name("http://prometheus.monitoring.svc:9090/prefix",
                    "http://prometheus.monitoring.svc:9090/prefix");
    check_prom_name("https://reader:s3cret@mimir.example/prometheus", "prometheus");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cma_backend_measured__forwards_and_counts),
        cmocka_unit_test(test_cma_backend_measured__null_registry_still_times),
        cmocka_unit_test(test_cma_backend_measured__no_inner_backend),
        cmocka_unit_test(test_cma_backend_prom__name_without_userinfo),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
