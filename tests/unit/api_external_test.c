/* api_external_test.c: external.metrics.k8s.io (api/api_external.c) through cma_app_handle, over a
 * relist of fake series and a fake backend with canned vectors: a metric asked for in lower case
 * (as client-go sends it) found case-insensitively, answered with its discovered name, its
 * samples' labels and canonical quantities, a NaN sample left out; the metric label selector
 * (labelSelector) rendered into the PromQL as matchers; a namespaced rule adds the namespace
 * matcher, a `namespaced: false` rule does not; 404 naming the namespace for an unknown metric,
 * 400 for a malformed labelSelector (before any query), 503 before the first catalog. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "api_fixture.h"

static const char CONFIG[] = "externalRules:\n"
                             "- seriesQuery: 'DCGM_FI_DEV_GPU_UTIL{namespace!=\"\",pod!=\"\"}'\n"
                             "  resources: {overrides: {namespace: {resource: namespace}}}\n"
                             "  metricsQuery: avg(<<.Series>>{<<.LabelMatchers>>}) by (pod)\n"
                             "- seriesQuery: 'queue_len{queue!=\"\"}'\n"
                             "  resources: {namespaced: false}\n"
                             "  metricsQuery: sum(<<.Series>>{<<.LabelMatchers>>}) by (queue)\n";

static const char *const GPU[] = {"DCGM_FI_DEV_GPU_UTIL{namespace=ml,pod=a}"};
static const char *const QUEUE[] = {"queue_len{queue=q1}"};
static const struct fake_series SERIES[] = {
    {"DCGM_FI_DEV_GPU_UTIL{namespace!=\"\",pod!=\"\"}", GPU, 1},
    {"queue_len{queue!=\"\"}", QUEUE, 1},
};

#define VECTOR(...)                                                                                \
    "{\"status\":\"success\",\"data\":{\"resultType\":\"vector\",\"result\":[" __VA_ARGS__ "]}}"

/* gpu: pod a 55, pod b NaN, pod c 0.25; queue: q1 12.5 */
static const struct api_reply REPLIES[] = {
    {"DCGM_FI_DEV_GPU_UTIL",
     VECTOR("{\"metric\":{\"pod\":\"a\"},\"value\":[1700000000,\"55\"]},"
            "{\"metric\":{\"pod\":\"b\"},\"value\":[1700000000,\"NaN\"]},"
            "{\"metric\":{\"pod\":\"c\"},\"value\":[1700000001,\"0.25\"]}")},
    {"queue_len", VECTOR("{\"metric\":{\"queue\":\"q1\"},\"value\":[1700000000,\"12.5\"]}")},
};

static const struct api_fixture_spec SPEC = {
    .config = CONFIG, .series = SERIES, .n_series = 2, .replies = REPLIES, .n_replies = 2};

#define EXT "/apis/external.metrics.k8s.io/v1beta1/namespaces/"

static int setup(void **state)
{
    *state = cma_test_api_fixture_new(&SPEC);
    return 0;
}

static int teardown(void **state)
{
    cma_test_api_fixture_free(*state);
    return 0;
}

static void test_external__case_insensitive_name_and_items(void **state)
{
    struct api_fixture *fx = *state;
    struct api_answer a = cma_test_api_request(&fx->app, "GET", EXT "ml/dcgm_fi_dev_gpu_util");
    assert_int_equal(a.status, 200);
    assert_string_equal(cma_test_api_str(a.json, "kind"), "ExternalMetricValueList");
    assert_string_equal(cma_test_api_str(a.json, "apiVersion"), "external.metrics.k8s.io/v1beta1");
    json_t *items = json_object_get(a.json, "items");
    assert_int_equal(json_array_size(items), 2); /* b is NaN */
    json_t *first = json_array_get(items, 0), *second = json_array_get(items, 1);
    assert_string_equal(cma_test_api_str(first, "metricName"), "DCGM_FI_DEV_GPU_UTIL");
    assert_string_equal(cma_test_api_str(json_object_get(first, "metricLabels"), "pod"), "a");
    assert_string_equal(cma_test_api_str(first, "value"), "55");
    assert_string_equal(cma_test_api_str(first, "timestamp"), "2023-11-14T22:13:20Z");
    assert_string_equal(cma_test_api_str(json_object_get(second, "metricLabels"), "pod"), "c");
    assert_string_equal(cma_test_api_str(second, "value"), "250m");
    assert_string_equal(cma_test_api_str(second, "timestamp"), "2023-11-14T22:13:21Z");
    assert_non_null(strstr(fx->last_promql, "DCGM_FI_DEV_GPU_UTIL{"));
    assert_non_null(strstr(fx->last_promql, "namespace=\"ml\""));
    cma_test_api_answer_done(&a);
}

static void test_external__metric_label_selector(void **state)
{
    struct api_fixture *fx = *state;
    struct api_answer a = cma_test_api_request(
        &fx->app, "GET", EXT "ml/DCGM_FI_DEV_GPU_UTIL?labelSelector=pod=a,gpu!=1");
    assert_int_equal(a.status, 200);
    if (!strstr(fx->last_promql, "pod=\"a\"") || !strstr(fx->last_promql, "gpu!=\"1\"") ||
        !strstr(fx->last_promql, "namespace=\"ml\""))
        fail_msg("matchers missing from %s", fx->last_promql);
    cma_test_api_answer_done(&a);
    a = cma_test_api_request(&fx->app, "GET", EXT "ml/queue_len?labelSelector=queue in (q1,q2)");
    assert_int_equal(a.status, 200);
    /* metricsQuery with the set as a regex matcher, as prometheus-adapter renders `in` */
    assert_string_equal(fx->last_promql, "sum(queue_len{queue=~\"q1|q2\"}) by (queue)");
    cma_test_api_answer_done(&a);
}

static void test_external__cluster_wide_rule_has_no_namespace_matcher(void **state)
{
    struct api_fixture *fx = *state;
    struct api_answer a = cma_test_api_request(&fx->app, "GET", EXT "ml/queue_len");
    assert_int_equal(a.status, 200);
    json_t *it = json_array_get(json_object_get(a.json, "items"), 0);
    assert_string_equal(cma_test_api_str(it, "metricName"), "queue_len");
    assert_string_equal(cma_test_api_str(json_object_get(it, "metricLabels"), "queue"), "q1");
    assert_string_equal(cma_test_api_str(it, "value"), "12500m");
    assert_null(strstr(fx->last_promql, "namespace"));
    cma_test_api_answer_done(&a);
    /* the same answer from another namespace */
    a = cma_test_api_request(&fx->app, "GET", EXT "other/QUEUE_LEN");
    assert_int_equal(a.status, 200);
    assert_int_equal(json_array_size(json_object_get(a.json, "items")), 1);
    assert_null(strstr(fx->last_promql, "namespace"));
    cma_test_api_answer_done(&a);
}

static void test_external__errors(void **state)
{
    struct api_fixture *fx = *state;
    cma_test_api_expect_status(
        &fx->app, "GET", EXT "ml/no_such_metric", 404,
        "the server could not find the metric no_such_metric for namespace ml");
    size_t before = fx->queries;
    cma_test_api_expect_status(&fx->app, "GET", EXT "ml/queue_len?labelSelector=queue in (q1", 400,
                               "invalid labelSelector");
    cma_test_api_expect_status(&fx->app, "GET", EXT "ml/queue_len?labelSelector=a==b==c", 400,
                               "invalid labelSelector");
    assert_int_equal(fx->queries, before); /* refused before any query */
}

static void test_external__503_before_the_first_catalog(void **state)
{
    (void)state;
    struct api_fixture_spec spec = SPEC;
    spec.no_relist = true;
    struct api_fixture *fx = cma_test_api_fixture_new(&spec);
    cma_test_api_expect_status(&fx->app, "GET", EXT "ml/queue_len", 503,
                               "metric discovery has not completed yet");
    assert_int_equal(fx->queries, 0);
    cma_test_api_fixture_free(fx);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_external__case_insensitive_name_and_items, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_external__metric_label_selector, setup, teardown),
        cmocka_unit_test_setup_teardown(test_external__cluster_wide_rule_has_no_namespace_matcher,
                                        setup, teardown),
        cmocka_unit_test_setup_teardown(test_external__errors, setup, teardown),
        cmocka_unit_test(test_external__503_before_the_first_catalog),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
