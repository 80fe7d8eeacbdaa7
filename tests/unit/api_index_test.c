/* api_index_test.c: the discovery documents (api/api_index.c) through cma_app_handle over a
 * relisted catalog: /apis/custom.metrics.k8s.io/v1beta1 lists one APIResource per (resource,
 * metric) the rules discovered, namespaced as the resource is, with the verb get; the same
 * snapshot answers the same document twice, and a relist that discovers another metric publishes
 * a snapshot whose document lists it (no stale cached document); custom v1beta2 lists the same
 * resources, external.metrics.k8s.io lists each external metric (namespaced whatever the rule's
 * `namespaced`, as custom-metrics-apiserver does; kind ExternalMetricValueList), metrics.k8s.io is
 * not served without resourceRules, and the custom group's APIGroup lists both versions,
 * preferring v1beta1 (as documented). */
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
    "- seriesQuery: '{__name__=~\"^app_.*\",namespace!=\"\",pod!=\"\"}'\n"
    "  resources: {overrides: {namespace: {resource: namespace}, pod: {resource: pod}}}\n"
    "  metricsQuery: max(<<.Series>>{<<.LabelMatchers>>}) by (<<.GroupBy>>)\n"
    "externalRules:\n"
    "- seriesQuery: 'queue_len{queue!=\"\"}'\n"
    "  resources: {namespaced: false}\n"
    "  metricsQuery: sum(<<.Series>>{<<.LabelMatchers>>}) by (queue)\n"
    "- seriesQuery: 'Backlog{namespace!=\"\"}'\n"
    "  resources: {overrides: {namespace: {resource: namespace}}}\n"
    "  metricsQuery: sum(<<.Series>>{<<.LabelMatchers>>})\n";

static const char *const ONE[] = {"app_load{namespace=ml,pod=a}"};
static const char *const TWO[] = {"app_load{namespace=ml,pod=a}", "app_errors{namespace=ml,pod=a}"};
static const char *const QUEUE[] = {"queue_len{queue=q1}"};
static const char *const BACKLOG[] = {"Backlog{namespace=ml}"};
#define SELECTOR "{__name__=~\"^app_.*\",namespace!=\"\",pod!=\"\"}"
#define EXTERNAL                                                                                   \
    {"queue_len{queue!=\"\"}", QUEUE, 1},                                                          \
    {                                                                                              \
        "Backlog{namespace!=\"\"}", BACKLOG, 1                                                     \
    }
static const struct fake_series SERIES_ONE[] = {{SELECTOR, ONE, 1}, EXTERNAL};
static const struct fake_series SERIES_TWO[] = {{SELECTOR, TWO, 2}, EXTERNAL};
static const struct api_fixture_spec SPEC = {.config = CONFIG, .series = SERIES_ONE, .n_series = 3};

#define DOC "/apis/custom.metrics.k8s.io/v1beta1"

/* The resources' "name:namespaced" as listed, space-separated; each has kind `kind`. */
static void names_kind_of(json_t *doc, const char *kind, char *out, size_t len)
{
    json_t *r;
    size_t i;
    out[0] = '\0';
    json_array_foreach(json_object_get(doc, "resources"), i, r)
    {
        size_t used = strlen(out);
        snprintf(out + used, len - used, "%s%s:%d", i ? " " : "", cma_test_api_str(r, "name"),
                 json_is_true(json_object_get(r, "namespaced")));
        json_t *verbs = json_object_get(r, "verbs");
        assert_int_equal(json_array_size(verbs), 1); /* as prometheus-adapter: ["get"] */
        assert_string_equal(json_string_value(json_array_get(verbs, 0)), "get");
        assert_string_equal(cma_test_api_str(r, "kind"), kind);
    }
}

static void names_of(json_t *doc, char *out, size_t len)
{
    names_kind_of(doc, "MetricValueList", out, len);
}

static void test_index__custom_document_per_snapshot(void **state)
{
    (void)state;
    struct api_fixture *fx = cma_test_api_fixture_new(&SPEC);
    struct api_answer a = cma_test_api_request(&fx->app, "GET", DOC);
    assert_int_equal(a.status, 200);
    assert_string_equal(cma_test_api_str(a.json, "kind"), "APIResourceList");
    assert_string_equal(cma_test_api_str(a.json, "groupVersion"), "custom.metrics.k8s.io/v1beta1");
    char got[256];
    names_of(a.json, got, sizeof got);
    assert_string_equal(got, "namespaces/app_load:0 pods/app_load:1");
    struct api_answer again = cma_test_api_request(&fx->app, "GET", DOC);
    assert_string_equal(again.text, a.text);
    cma_test_api_answer_done(&again);
    cma_test_api_answer_done(&a);
    fx->series.answers = SERIES_TWO; /* the next relist discovers app_errors too */
    cma_test_api_fixture_relist(fx);
    a = cma_test_api_request(&fx->app, "GET", DOC);
    names_of(a.json, got, sizeof got);
    assert_string_equal(
        got, "namespaces/app_errors:0 namespaces/app_load:0 pods/app_errors:1 pods/app_load:1");
    cma_test_api_answer_done(&a);
    cma_test_api_fixture_free(fx);
}

static void test_index__every_group_version(void **state)
{
    (void)state;
    struct api_fixture *fx = cma_test_api_fixture_new(&SPEC);
    char got[256];
    struct api_answer a =
        cma_test_api_request(&fx->app, "GET", "/apis/custom.metrics.k8s.io/v1beta2");
    assert_int_equal(a.status, 200);
    assert_string_equal(cma_test_api_str(a.json, "groupVersion"), "custom.metrics.k8s.io/v1beta2");
    names_of(a.json, got, sizeof got);
    assert_string_equal(got, "namespaces/app_load:0 pods/app_load:1");
    cma_test_api_answer_done(&a);
    a = cma_test_api_request(&fx->app, "GET", "/apis/external.metrics.k8s.io/v1beta1");
    assert_int_equal(a.status, 200);
    assert_string_equal(cma_test_api_str(a.json, "groupVersion"),
                        "external.metrics.k8s.io/v1beta1");
    names_kind_of(a.json, "ExternalMetricValueList", got, sizeof got);
    /* sorted bytewise; always namespaced, as custom-metrics-apiserver lists external metrics: the
     * API path has a namespace whatever the rule's `namespaced` */
    assert_string_equal(got, "Backlog:1 queue_len:1");
    cma_test_api_answer_done(&a);
    /* no resourceRules: metrics.k8s.io is not served */
    cma_test_api_expect_status(&fx->app, "GET", "/apis/metrics.k8s.io/v1beta1", 404,
                               "could not find the requested resource");
    a = cma_test_api_request(&fx->app, "GET", "/apis/custom.metrics.k8s.io");
    assert_int_equal(a.status, 200);
    assert_string_equal(cma_test_api_str(a.json, "kind"), "APIGroup");
    /* both versions, v1beta1 preferred (docs/configuration.md, differences from upstream) */
    json_t *versions = json_object_get(a.json, "versions");
    assert_int_equal(json_array_size(versions), 2);
    assert_non_null(strstr(a.text, "\"groupVersion\":\"custom.metrics.k8s.io/v1beta2\""));
    assert_string_equal(
        cma_test_api_str(json_object_get(a.json, "preferredVersion"), "groupVersion"),
        "custom.metrics.k8s.io/v1beta1");
    cma_test_api_answer_done(&a);
    cma_test_api_fixture_free(fx);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_index__custom_document_per_snapshot),
        cmocka_unit_test(test_index__every_group_version),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
