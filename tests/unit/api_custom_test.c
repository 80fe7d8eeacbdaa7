/* api_custom_test.c: custom.metrics.k8s.io (api/api_custom.c) through cma_app_handle, over a
 * relist of fake series, a fake backend with canned vectors and a fake kube-apiserver for the
 * LISTs of a selector request: a named pod's value as a canonical quantity with its sample's
 * timestamp (v1beta1 and v1beta2 shapes), a selector request answering one item per listed
 * object with a sample (a NaN sample and an object without data left out), the LIST carrying the
 * labelSelector; 404 for an unknown metric and for a named object whose sample is NaN, 400 for a
 * bad labelSelector, 503 before the first catalog; maxSampleAge: a fresh object served, a stale
 * one 404 naming its age and the rule's position, and left out of a list; the metric of a
 * Namespace object (…/namespaces/{ns}/metrics/{metric}), 404 for a namespace without data. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "api_fixture.h"

static const char CONFIG[] =
    "rules:\n"
    "- seriesQuery: 'http_requests_total{namespace!=\"\",pod!=\"\"}'\n"
    "  resources: {overrides: {namespace: {resource: namespace}, pod: {resource: pod}}}\n"
    "  name: {matches: ^(.*)_total$, as: \"${1}_per_second\"}\n"
    "  metricsQuery: sum(rate(<<.Series>>{<<.LabelMatchers>>}[2m])) by (<<.GroupBy>>)\n"
    "- seriesQuery: 'queue_depth{namespace!=\"\",pod!=\"\"}'\n"
    "  resources: {overrides: {namespace: {resource: namespace}, pod: {resource: pod}}}\n"
    "  maxSampleAge: 2m\n"
    "  metricsQuery: max(<<.Series>>{<<.LabelMatchers>>}) by (<<.GroupBy>>)\n";

static const char *const HTTP_SERIES[] = {
    "http_requests_total{namespace=ml,pod=a}",
    "http_requests_total{namespace=ml,pod=b}",
    "http_requests_total{namespace=ml,pod=c}",
};
static const char *const QUEUE_SERIES[] = {
    "queue_depth{namespace=ml,pod=a}",
    "queue_depth{namespace=ml,pod=b}",
};
static const struct fake_series SERIES[] = {
    {"http_requests_total{namespace!=\"\",pod!=\"\"}", HTTP_SERIES, 3},
    {"queue_depth{namespace!=\"\",pod!=\"\"}", QUEUE_SERIES, 2},
};

#define SAMPLE(pod, t, v) "{\"metric\":{\"pod\":\"" pod "\"},\"value\":[" t ",\"" v "\"]}"
#define VECTOR(...)                                                                                \
    "{\"status\":\"success\",\"data\":{\"resultType\":\"vector\",\"result\":[" __VA_ARGS__ "]}}"

/* by namespace: ml 8; http: a 1.5 (1500m), b NaN, c 3, d (not listed) 4; queue: a 7, b 9; the
 * newest raw sample of queue_depth: a now, b at 2023-11-14 (far older than 2m). */
static const struct api_reply REPLIES[] = {
    {"by (namespace)", VECTOR("{\"metric\":{\"namespace\":\"ml\"},\"value\":[1700000000,\"8\"]}")},
    {"timestamp(queue_depth",
     VECTOR(SAMPLE("a", "@NOW@", "@NOW@") "," SAMPLE("b", "@NOW@", "1700000000"))},
    {"queue_depth", VECTOR(SAMPLE("a", "1700000000", "7") "," SAMPLE("b", "1700000000", "9"))},
    {"http_requests_total",
     VECTOR(SAMPLE("a", "1700000000", "1.5") "," SAMPLE("b", "1700000000", "NaN") "," SAMPLE(
         "c", "1700000000", "3") "," SAMPLE("d", "1700000000", "4"))},
};

static const char PODS[] = "{\"kind\":\"PodList\",\"apiVersion\":\"v1\",\"metadata\":{},"
                           "\"items\":[{\"metadata\":{\"name\":\"a\",\"namespace\":\"ml\"}},"
                           "{\"metadata\":{\"name\":\"b\",\"namespace\":\"ml\"}},"
                           "{\"metadata\":{\"name\":\"c\",\"namespace\":\"ml\"}}]}";
static const struct cma_fake_answer KUBE[] = {
    {.path = "/api/v1/namespaces/ml/pods", .status = 200, .body = PODS},
};

static const struct api_fixture_spec SPEC = {
    .config = CONFIG,
    .series = SERIES,
    .n_series = 2,
    .replies = REPLIES,
    .n_replies = 4,
    .kube = KUBE,
    .n_kube = 1,
};

#define V1 "/apis/custom.metrics.k8s.io/v1beta1/namespaces/ml/pods/"
#define V2 "/apis/custom.metrics.k8s.io/v1beta2/namespaces/ml/pods/"

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

/* "name=value" of each item, space-separated, sorted by name. */
static void items_of(json_t *list, char *out, size_t out_len)
{
    json_t *items = json_object_get(list, "items");
    size_t n = json_array_size(items);
    out[0] = '\0';
    for (char c = 'a'; c <= 'z'; c++) { /* the fixtures' pods are single letters */
        for (size_t i = 0; i < n; i++) {
            json_t *it = json_array_get(items, i);
            const char *name = cma_test_api_str(json_object_get(it, "describedObject"), "name");
            if (name[0] != c || name[1])
                continue;
            size_t used = strlen(out);
            snprintf(out + used, out_len - used, "%s%s=%s", used ? " " : "", name,
                     cma_test_api_str(it, "value"));
        }
    }
}

static void test_custom__by_name_v1beta1(void **state)
{
    struct api_fixture *fx = *state;
    struct api_answer a = cma_test_api_request(&fx->app, "GET", V1 "a/http_requests_per_second");
    assert_int_equal(a.status, 200);
    assert_non_null(a.json);
    assert_string_equal(cma_test_api_str(a.json, "kind"), "MetricValueList");
    assert_string_equal(cma_test_api_str(a.json, "apiVersion"), "custom.metrics.k8s.io/v1beta1");
    json_t *items = json_object_get(a.json, "items");
    assert_int_equal(json_array_size(items), 1);
    json_t *it = json_array_get(items, 0);
    json_t *obj = json_object_get(it, "describedObject");
    assert_string_equal(cma_test_api_str(obj, "kind"), "Pod");
    assert_string_equal(cma_test_api_str(obj, "namespace"), "ml");
    assert_string_equal(cma_test_api_str(obj, "name"), "a");
    assert_string_equal(cma_test_api_str(it, "metricName"), "http_requests_per_second");
    assert_string_equal(cma_test_api_str(it, "value"), "1500m");
    assert_string_equal(cma_test_api_str(it, "timestamp"), "2023-11-14T22:13:20Z"); /* 1700000000 */
    assert_non_null(strstr(fx->last_promql, "pod=\"a\""));
    assert_non_null(strstr(fx->last_promql, "namespace=\"ml\""));
    cma_test_api_answer_done(&a);
}

static void test_custom__by_name_v1beta2(void **state)
{
    struct api_fixture *fx = *state;
    struct api_answer a = cma_test_api_request(&fx->app, "GET", V2 "c/http_requests_per_second");
    assert_int_equal(a.status, 200);
    assert_string_equal(cma_test_api_str(a.json, "apiVersion"), "custom.metrics.k8s.io/v1beta2");
    json_t *it = json_array_get(json_object_get(a.json, "items"), 0);
    assert_string_equal(cma_test_api_str(json_object_get(it, "metric"), "name"),
                        "http_requests_per_second");
    assert_string_equal(cma_test_api_str(json_object_get(it, "describedObject"), "name"), "c");
    assert_string_equal(cma_test_api_str(it, "value"), "3");
    cma_test_api_answer_done(&a);
}

static void test_custom__by_selector_leaves_out_nan_and_unlisted(void **state)
{
    struct api_fixture *fx = *state;
    struct api_answer a = cma_test_api_request(
        &fx->app, "GET", V1 "%2A/http_requests_per_second?labelSelector=app=web");
    assert_int_equal(a.status, 200);
    char got[128];
    items_of(a.json, got, sizeof got);
    assert_string_equal(got, "a=1500m c=3"); /* b is NaN, d is not listed */
    cma_test_api_answer_done(&a);
    assert_int_equal(cma_fake_http_count(fx->kube_http), 1);
    const struct cma_fake_request *r = cma_fake_http_request(fx->kube_http, 0);
    assert_string_equal(r->path, "/api/v1/namespaces/ml/pods");
    assert_non_null(strstr(r->target, "labelSelector=app%3Dweb"));
}

static void test_custom__errors(void **state)
{
    struct api_fixture *fx = *state;
    cma_test_api_expect_status(&fx->app, "GET", V1 "a/no_such_metric", 404, "no_such_metric");
    cma_test_api_expect_status(&fx->app, "GET", V1 "b/http_requests_per_second", 404,
                               "http_requests_per_second for pods b");
    cma_test_api_expect_status(&fx->app, "GET",
                               V1 "%2A/http_requests_per_second?labelSelector=app in (", 400,
                               "invalid labelSelector \"app in (\"");
    cma_test_api_expect_status(&fx->app, "GET",
                               V1 "%2A/http_requests_per_second?labelSelector=a==b==c", 400,
                               "found '==', expected: ',' or 'end of string'");
    assert_int_equal(cma_fake_http_count(fx->kube_http), 0); /* refused before any LIST */
}

static void test_custom__503_before_the_first_catalog(void **state)
{
    (void)state;
    struct api_fixture_spec spec = SPEC;
    spec.no_relist = true;
    struct api_fixture *fx = cma_test_api_fixture_new(&spec);
    cma_test_api_expect_status(&fx->app, "GET", V1 "a/http_requests_per_second", 503,
                               "metric discovery has not completed yet");
    assert_int_equal(fx->queries, 0);
    cma_test_api_fixture_relist(fx);
    struct api_answer a = cma_test_api_request(&fx->app, "GET", V1 "a/http_requests_per_second");
    assert_int_equal(a.status, 200);
    cma_test_api_answer_done(&a);
    cma_test_api_fixture_free(fx);
}

static void test_custom__max_sample_age(void **state)
{
    struct api_fixture *fx = *state;
    struct api_answer a = cma_test_api_request(&fx->app, "GET", V1 "a/queue_depth");
    assert_int_equal(a.status, 200);
    assert_string_equal(
        cma_test_api_str(json_array_get(json_object_get(a.json, "items"), 0), "value"), "7");
    cma_test_api_answer_done(&a);
    cma_test_api_expect_status(&fx->app, "GET", V1 "b/queue_depth", 404,
                               "older than maxSampleAge 2m0s (rules.yaml:8:17)");
    a = cma_test_api_request(&fx->app, "GET", V1 "%2A/queue_depth?labelSelector=app=web");
    assert_int_equal(a.status, 200);
    char got[128];
    items_of(a.json, got, sizeof got);
    assert_string_equal(got, "a=7"); /* b is stale, c has no sample */
    cma_test_api_answer_done(&a);
}

static void test_custom__namespace_metric(void **state)
{
    struct api_fixture *fx = *state;
    struct api_answer a = cma_test_api_request(
        &fx->app, "GET",
        "/apis/custom.metrics.k8s.io/v1beta1/namespaces/ml/metrics/http_requests_per_second");
    assert_int_equal(a.status, 200);
    json_t *it = json_array_get(json_object_get(a.json, "items"), 0);
    json_t *obj = json_object_get(it, "describedObject");
    assert_string_equal(cma_test_api_str(obj, "kind"), "Namespace");
    assert_string_equal(cma_test_api_str(obj, "name"), "ml");
    assert_string_equal(cma_test_api_str(it, "value"), "8");
    assert_non_null(strstr(fx->last_promql, "namespace=\"ml\""));
    cma_test_api_answer_done(&a);
    /* a namespace the backend has no sample for */
    cma_test_api_expect_status(&fx->app, "GET",
                               "/apis/custom.metrics.k8s.io/v1beta1/namespaces/other/metrics/"
                               "http_requests_per_second",
                               404, "http_requests_per_second");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_custom__by_name_v1beta1, setup, teardown),
        cmocka_unit_test_setup_teardown(test_custom__by_name_v1beta2, setup, teardown),
        cmocka_unit_test_setup_teardown(test_custom__by_selector_leaves_out_nan_and_unlisted, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_custom__errors, setup, teardown),
        cmocka_unit_test(test_custom__503_before_the_first_catalog),
        cmocka_unit_test_setup_teardown(test_custom__max_sample_age, setup, teardown),
        cmocka_unit_test_setup_teardown(test_custom__namespace_metric, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
