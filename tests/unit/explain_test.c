/* explain_test.c: the explain report (api/explain.c) through the real handlers, over the API
 * tests' shared fixture (api_fixture.h: a relist of a fake series source, and a fake backend
 * that here answers one canned vector to every query and records the PromQL it was sent): the
 * rule's file:line:column, the catalog entry, the PromQL the backend received (exactly), the
 * backend's raw answer, each sample left out and why (no matching object, NaN), the final answer
 * equal to the same request's answer without explain; and why nothing matches (a seriesFilter drops
 * the series, the resource label does not map, no series at all, the resource is unknown); a target
 * that is not a path or has a bad escape; GET /debug/explain off (404) and on (the same report as
 * text/plain), without a path (400), and not on itself. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "api_fixture.h"
#include "cma/app.h"
#include "cma/buf.h"
#include "cma/explain.h"
#include "cma/options.h"
#include "cma/server.h"

static const char CONFIG[] =
    "rules:\n"
    "- seriesQuery: '{__name__=~\"^gpu_.*\"}'\n"
    "  seriesFilters: [{isNot: ^gpu_secret}]\n"
    "  resources: {overrides: {namespace: {resource: namespace}, pod: {resource: pod}}}\n"
    "  name: {matches: ^gpu_(.*)$, as: \"gpu_${1}\"}\n"
    "  metricsQuery: avg(<<.Series>>{<<.LabelMatchers>>}) by (<<.GroupBy>>)\n";

static const char *const SERIES[] = {
    "gpu_util{namespace=ml,pod=a}",
    "gpu_util{namespace=ml,pod=b}",
    "gpu_secret_util{namespace=ml,pod=a}",
    "gpu_host_temp{host=h1}",
};

/* The backend's answer to any query: a for 1.5, b NaN, c (never requested) 3. */
static const char ANSWER[] =
    "{\"status\":\"success\",\"data\":{\"resultType\":\"vector\",\"result\":["
    "{\"metric\":{\"pod\":\"a\"},\"value\":[1700000000,\"1.5\"]},"
    "{\"metric\":{\"pod\":\"b\"},\"value\":[1700000000,\"NaN\"]},"
    "{\"metric\":{\"pod\":\"c\"},\"value\":[1700000000,\"3\"]}]}}";

static const struct fake_series ANSWERS[] = {{"{__name__=~\"^gpu_.*\"}", SERIES, 4}};
static const struct api_reply REPLIES[] = {{"", ANSWER}}; /* "" is in every query */
static const struct api_fixture_spec SPEC = {
    .config = CONFIG, .series = ANSWERS, .n_series = 1, .replies = REPLIES, .n_replies = 1};

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

/* The report for target (its status in *status); the caller frees it. */
static char *explain(struct api_fixture *fx, const char *target, int *status)
{
    struct cma_buf out;
    cma_buf_init(&out, CMA_BUF_DEFAULT_MAX);
    struct cma_err err;
    cma_err_clear(&err);
    if (cma_explain_run(&fx->app, target, &out, status, &err) != CMA_OK)
        fail_msg("explain %s: %s", target, err.msg);
    return cma_buf_take(&out);
}

static void has(const char *report, const char *want)
{
    if (!strstr(report, want))
        fail_msg("missing \"%s\" in the report:\n%s", want, report);
}

/* The body of the same request without explain. */
static char *plain_answer(struct api_fixture *fx, const char *path, int *status)
{
    struct cma_request req = {.method = "GET", .path = path};
    struct cma_response resp = {.status = 200, .content_type = "application/json"};
    cma_buf_init(&resp.body, 1 << 20);
    cma_app_handle(&fx->app, &req, &resp);
    *status = resp.status;
    return cma_buf_take(&resp.body);
}

static void test_explain__by_name_rule_promql_samples_answer(void **state)
{
    struct api_fixture *fx = *state;
    const char *path = "/apis/custom.metrics.k8s.io/v1beta1/namespaces/ml/pods/a/gpu_util";
    int status = 0, plain_status = 0;
    char *r = explain(fx, path, &status);
    assert_int_equal(status, 200);
    has(r, "explain: GET /apis/custom.metrics.k8s.io/v1beta1/namespaces/ml/pods/a/gpu_util\n");
    has(r, "rule:\n  rules.yaml:2:3 (rules[0])\n");
    has(r, "  seriesQuery: {__name__=~\"^gpu_.*\"}\n");
    has(r, "catalog entry:\n  pods (namespaced) metric gpu_util <- series gpu_util\n");
    has(r, "objects:\n  1 object: a\n");
    char want[4200]; /* fits the fixture's last_promql */
    snprintf(want, sizeof want, "  promql: %s\n", fx->last_promql); /* what was sent */
    has(r, want);
    has(r, "  promql: avg(gpu_util{namespace=\"ml\",pod=\"a\"}) by (pod)\n");
    has(r, "  resource label: pod\n");
    has(r, "  backend: http://fake-prometheus:9090, instant query at ");
    has(r, "  3 series in the answer\n");
    has(r, "  {pod=\"a\"} 1.5 @ 2023-11-14T22:13:20Z\n");
    has(r, "  {pod=\"c\"} 3 @ 2023-11-14T22:13:20Z: no matching object");
    has(r, "  {pod=\"b\"} NaN @ 2023-11-14T22:13:20Z: no matching object");
    char *body = plain_answer(fx, path, &plain_status);
    assert_int_equal(plain_status, 200);
    snprintf(want, sizeof want, "answer: HTTP 200\n  %.*s\n", (int)strcspn(body, "\n"), body);
    has(r, want); /* the final answer is the API's */
    assert_non_null(strstr(body, "\"value\":\"1500m\""));
    free(body);
    free(r);
}

static void test_explain__nan_sample_is_left_out(void **state)
{
    struct api_fixture *fx = *state;
    int status = 0;
    char *r =
        explain(fx, "/apis/custom.metrics.k8s.io/v1beta1/namespaces/ml/pods/b/gpu_util", &status);
    assert_int_equal(status, 404);
    has(r, "left out of the answer:\n");
    has(r, "  {pod=\"b\"} NaN @ 2023-11-14T22:13:20Z: NaN is not a value: left out\n");
    has(r, "answer: HTTP 404\n");
    has(r, "the server could not find the metric gpu_util for pods b");
    free(r);
}

static void test_explain__filter_drops_the_series(void **state)
{
    struct api_fixture *fx = *state;
    int status = 0;
    size_t queries = fx->queries;
    char *r = explain(
        fx, "/apis/custom.metrics.k8s.io/v1beta1/namespaces/ml/pods/a/gpu_secret_util", &status);
    assert_int_equal(status, 404);
    has(r, "rule:\n  none: no catalog entry serves gpu_secret_util (see why)\n");
    has(r, "  series gpu_secret_util is dropped by seriesFilters or name.matches (not "
           "accepted)\n");
    has(r, "  rules[0] (rules.yaml:2): seriesQuery {__name__=~\"^gpu_.*\"} finds 4 series, 0 named "
           "gpu_secret_util");
    has(r, "  no rule's seriesQuery finds a series that becomes metric gpu_secret_util (within");
    assert_int_equal(fx->queries, queries); /* nothing to query */
    free(r);
}

static void test_explain__resource_label_does_not_map(void **state)
{
    struct api_fixture *fx = *state;
    int status = 0;
    char *r = explain(fx, "/apis/custom.metrics.k8s.io/v1beta1/namespaces/ml/pods/a/gpu_host_temp",
                      &status);
    assert_int_equal(status, 404);
    has(r, "  series gpu_host_temp becomes gpu_host_temp, but the resource label does not map: "
           "none of its labels maps to pods through resources.overrides/template (its labels: "
           "host)\n");
    has(r, "finds 4 series, 1 named gpu_host_temp, 0 of them with a label that maps to the "
           "resource\n");
    has(r, "  series become metric gpu_host_temp, but none has a label that maps to pods\n");
    free(r);
}

static void test_explain__no_series_and_unknown_resource(void **state)
{
    struct api_fixture *fx = *state;
    int status = 0;
    char *r = explain(fx, "/apis/custom.metrics.k8s.io/v1beta1/namespaces/ml/pods/a/nothing_here",
                      &status);
    assert_int_equal(status, 404);
    has(r, "  no rule's seriesQuery finds a series that becomes metric nothing_here (within");
    free(r);
    r = explain(fx, "/apis/custom.metrics.k8s.io/v1beta1/namespaces/ml/widgets/a/gpu_util",
                &status);
    assert_int_equal(status, 404);
    has(r, "why:\n  the resource widgets is unknown to the cluster");
    free(r);
    /* a cluster-scoped resource asked for in a namespace */
    r = explain(fx, "/apis/custom.metrics.k8s.io/v1beta1/namespaces/ml/nodes/n1/gpu_util", &status);
    assert_int_equal(status, 404);
    has(r, "  nodes is cluster-scoped in this cluster, and the request asks for it in a namespace");
    free(r);
}

static void test_explain__bad_targets(void **state)
{
    struct api_fixture *fx = *state;
    struct cma_buf out;
    cma_buf_init(&out, 1 << 20);
    struct cma_err err;
    cma_err_clear(&err);
    int status = 0;
    assert_int_equal(cma_explain_run(&fx->app, "apis/x", &out, &status, &err), CMA_ERR_BAD_REQUEST);
    assert_non_null(strstr(err.msg, "must start with '/'"));
    cma_err_clear(&err);
    assert_int_equal(cma_explain_run(&fx->app, "/apis/x?labelSelector=a%zz", &out, &status, &err),
                     CMA_ERR_BAD_REQUEST);
    assert_non_null(strstr(err.msg, "the query string of the path to explain"));
    assert_int_equal(out.len, 0);
    cma_buf_done(&out);
}

static struct cma_response debug_get(struct api_fixture *fx, const char *path, char *value)
{
    struct cma_kv kv[] = {{"path", value}};
    struct cma_request req = {.method = "GET", .path = path, .query = kv, .n_query = value ? 1 : 0};
    struct cma_response resp = {.status = 200, .content_type = "application/json"};
    cma_buf_init(&resp.body, 1 << 20);
    cma_app_handle(&fx->app, &req, &resp);
    return resp;
}

static void test_debug_explain__off_on_and_errors(void **state)
{
    struct api_fixture *fx = *state;
    char target[] = "/apis/custom.metrics.k8s.io/v1beta1/namespaces/ml/pods/a/gpu_util";
    struct cma_response resp = debug_get(fx, "/debug/explain", target);
    assert_int_equal(resp.status, 404); /* off by default */
    assert_null(strstr(cma_buf_str(&resp.body), "promql"));
    cma_buf_done(&resp.body);
    fx->opts->enable_explain = true;
    resp = debug_get(fx, "/debug/explain", target);
    assert_int_equal(resp.status, 200);
    assert_string_equal(resp.content_type, "text/plain; charset=utf-8");
    int status = 0;
    char *cli = explain(fx, target, &status);
    /* the same report, but for the query times and the backend's duration */
    const char *sections[] = {"rule:\n",    "catalog entry:\n",          "objects:\n",
                              "  promql: ", "left out of the answer:\n", "answer: HTTP 200\n"};
    for (size_t i = 0; i < sizeof sections / sizeof sections[0]; i++) {
        const char *a = strstr(cli, sections[i]), *b = strstr(cma_buf_str(&resp.body), sections[i]);
        assert_non_null(a);
        assert_non_null(b);
        size_t n = strcspn(a + strlen(sections[i]), "\n");
        assert_memory_equal(a, b, strlen(sections[i]) + n);
    }
    free(cli);
    cma_buf_done(&resp.body);
    resp = debug_get(fx, "/debug/explain", NULL);
    assert_int_equal(resp.status, 400);
    assert_non_null(strstr(cma_buf_str(&resp.body), "the path parameter is required"));
    cma_buf_done(&resp.body);
    char self[] = "/debug/explain?path=%2Fmetrics";
    resp = debug_get(fx, "/debug/explain", self);
    assert_int_equal(resp.status, 200);
    assert_non_null(strstr(cma_buf_str(&resp.body), "answer: HTTP 400\n"));
    assert_non_null(strstr(cma_buf_str(&resp.body), "cannot explain itself"));
    cma_buf_done(&resp.body);
    fx->opts->enable_explain = false;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_explain__by_name_rule_promql_samples_answer),
        cmocka_unit_test(test_explain__nan_sample_is_left_out),
        cmocka_unit_test(test_explain__filter_drops_the_series),
        cmocka_unit_test(test_explain__resource_label_does_not_map),
        cmocka_unit_test(test_explain__no_series_and_unknown_resource),
        cmocka_unit_test(test_explain__bad_targets),
        cmocka_unit_test(test_debug_explain__off_on_and_errors),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
