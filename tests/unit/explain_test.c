/* explain_test.c: the explain report (api/explain.c) through the real handlers, over the API
 * tests' shared fixture (api_fixture.h: a relist of a fake series source, and a fake backend
 * that here answers one canned vector to every query and records the PromQL it was sent): the
 * rule's file:line:column, the catalog entry, the PromQL the backend received (exactly), the
 * backend's raw answer, each sample left out and why (no matching object, NaN), the final answer
 * equal to the same request's answer without explain; and why nothing matches (a seriesFilter drops
 * the series, the resource label does not map, no series at all, the resource is unknown); a target
 * that is not a path or has a bad escape; GET /debug/explain off (404) and on (the same report as
 * text/plain), without a path (400), and not on itself. `explain=true` on the metrics path itself:
 * ignored unless --enable-metric-rules or --enable-explain; then the report of the request without
 * the parameter (its other parameters encoded again), scoped: samples of objects the request did
 * not name are counted, not shown, and a rule's series are listed with namespace="<the request's>"
 * added (a series of no namespace is not counted); a value that is not a boolean is a 400 Status,
 * explain=false the usual answer. The MetricRules of the request's namespace, read through the
 * fake kube-apiserver: each one's Accepted condition (invalid, conflict, not processed, no status,
 * accepted) and nothing of another namespace's. A MetricRule's rule (cma_rule.owner): named as
 * `MetricRule ns/name (spec.rules[i])` with its enforcement when it answers; listed in why only for
 * a request in its own namespace, so another namespace's MetricRule never appears. */
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
#include "cma/rule.h"
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

/* What the same seriesQuery lists with namespace="ml" added (explain=true): the series of ml. */
static const char *const SERIES_ML[] = {
    "gpu_util{namespace=ml,pod=a}",
    "gpu_util{namespace=ml,pod=b}",
    "gpu_secret_util{namespace=ml,pod=a}",
};

static const struct fake_series ANSWERS[] = {
    {"{__name__=~\"^gpu_.*\"}", SERIES, 4},
    {"{__name__=~\"^gpu_.*\",namespace=\"ml\"}", SERIES_ML, 3},
};
static const struct api_reply REPLIES[] = {{"", ANSWER}}; /* "" is in every query */
static const struct api_fixture_spec SPEC = {
    .config = CONFIG, .series = ANSWERS, .n_series = 2, .replies = REPLIES, .n_replies = 1};

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

/* GET path with the query parameters kv (decoded values, as the server hands them over). */
static struct cma_response get_with(struct api_fixture *fx, const char *path, struct cma_kv *kv,
                                    size_t n)
{
    struct cma_request req = {.method = "GET", .path = path, .query = kv, .n_query = n};
    struct cma_response resp = {.status = 200, .content_type = "application/json"};
    cma_buf_init(&resp.body, 1 << 20);
    cma_app_handle(&fx->app, &req, &resp);
    return resp;
}

static void test_explain_param__off_on_scoped_and_bad_values(void **state)
{
    struct api_fixture *fx = *state;
    const char *path = "/apis/custom.metrics.k8s.io/v1beta1/namespaces/ml/pods/a/gpu_util";
    struct cma_kv kv[] = {{"explain", "true"}, {"note", "a b/c&d"}};
    struct cma_response resp = get_with(fx, path, kv, 2);
    assert_int_equal(resp.status, 200); /* off: ignored, as prometheus-adapter ignores it */
    assert_string_equal(resp.content_type, "application/json");
    assert_non_null(strstr(cma_buf_str(&resp.body), "\"value\":\"1500m\""));
    cma_buf_done(&resp.body);
    fx->opts->enable_metric_rules = true;
    resp = get_with(fx, path, kv, 2);
    assert_int_equal(resp.status, 200);
    assert_string_equal(resp.content_type, "text/plain; charset=utf-8");
    const char *r = cma_buf_str(&resp.body);
    has(r, "explain: GET /apis/custom.metrics.k8s.io/v1beta1/namespaces/ml/pods/a/"
           "gpu_util?note=a%20b%2Fc%26d\n");
    has(r, "scope: namespace ml (explain=true shows");
    has(r, "  promql: avg(gpu_util{namespace=\"ml\",pod=\"a\"}) by (pod)\n");
    has(r, "  {pod=\"a\"} 1.5 @ 2023-11-14T22:13:20Z\n");
    has(r, "  2 series name none of the requested objects (not shown with explain=true)\n");
    assert_null(strstr(r, "pod=\"c\"")); /* not named by the request: not shown */
    assert_null(strstr(r, "pod=\"b\""));
    has(r, "answer: HTTP 200\n");
    cma_buf_done(&resp.body);
    struct cma_kv off[] = {{"explain", "False"}};
    resp = get_with(fx, path, off, 1);
    assert_int_equal(resp.status, 200);
    assert_string_equal(resp.content_type, "application/json");
    cma_buf_done(&resp.body);
    struct cma_kv bad[] = {{"explain", "yes"}};
    resp = get_with(fx, path, bad, 1);
    assert_int_equal(resp.status, 400);
    has(cma_buf_str(&resp.body), "\"code\":400");
    has(cma_buf_str(&resp.body), "explain: invalid value \\\"yes\\\": true or false");
    cma_buf_done(&resp.body);
    fx->opts->enable_metric_rules = false;
    fx->opts->enable_explain = true; /* the operator's flag turns it on too */
    resp = get_with(fx, path, kv, 1);
    assert_string_equal(resp.content_type, "text/plain; charset=utf-8");
    cma_buf_done(&resp.body);
    fx->opts->enable_explain = false;
}

static void test_explain_param__why_counts_only_the_namespace(void **state)
{
    struct api_fixture *fx = *state;
    fx->opts->enable_metric_rules = true;
    struct cma_kv kv[] = {{"explain", "1"}};
    struct cma_response resp = get_with(
        fx, "/apis/custom.metrics.k8s.io/v1beta1/namespaces/ml/pods/a/gpu_host_temp", kv, 1);
    assert_int_equal(resp.status, 200);
    const char *r = cma_buf_str(&resp.body);
    /* gpu_host_temp{host=h1} has no namespace: the scoped listing does not see it */
    has(r,
        "  rules[0] (rules.yaml:2): seriesQuery {__name__=~\"^gpu_.*\",namespace=\"ml\"} finds 3 "
        "series, 0 named gpu_host_temp");
    has(r, "  no rule's seriesQuery finds a series that becomes metric gpu_host_temp");
    assert_null(strstr(r, "host)"));
    has(r, "answer: HTTP 404\n");
    cma_buf_done(&resp.body);
    /* unscoped (the CLI), the same request sees every series */
    int status = 0;
    char *cli = explain(
        fx, "/apis/custom.metrics.k8s.io/v1beta1/namespaces/ml/pods/a/gpu_host_temp", &status);
    has(cli, "seriesQuery {__name__=~\"^gpu_.*\"} finds 4 series, 1 named gpu_host_temp");
    free(cli);
    fx->opts->enable_metric_rules = false;
}

/* A MetricRule's spec that compiles, and one whose metricsQuery misses its closing paren. */
#define GOOD_SPEC                                                                                  \
    "\"spec\":{\"rules\":[{\"seriesQuery\":\"q{namespace!=\\\"\\\"}\",\"resources\":{"             \
    "\"overrides\":{\"namespace\":{\"resource\":\"namespace\"},\"pod\":{\"resource\":\"pod\"}}},"  \
    "\"metricsQuery\":\"sum(<<.Series>>{<<.LabelMatchers>>}) by (<<.GroupBy>>)\"}]}"
#define BAD_SPEC                                                                                   \
    "\"spec\":{\"rules\":[{\"seriesQuery\":\"q{namespace!=\\\"\\\"}\",\"resources\":{"             \
    "\"overrides\":{\"namespace\":{\"resource\":\"namespace\"},\"pod\":{\"resource\":\"pod\"}}},"  \
    "\"metricsQuery\":\"sum(<<.Series>>{<<.LabelMatchers>>}) by (<<.GroupBy>>\"}]}"

/* A MetricRuleList of namespace ml as kube-apiserver answers it (status as the adapter writes
 * it: metricrule_status.h; some without one yet). */
static const char MR_LIST_ML[] =
    "{\"kind\":\"MetricRuleList\",\"apiVersion\":\"metrics.custom-metrics-adapter.dev/v1alpha1\","
    "\"metadata\":{\"resourceVersion\":\"7\"},\"items\":["
    "{\"metadata\":{\"name\":\"broken\",\"namespace\":\"ml\",\"generation\":1}," BAD_SPEC ","
    "\"status\":{\"observedGeneration\":1,\"conditions\":[{\"type\":\"Accepted\",\"status\":"
    "\"False\",\"reason\":\"InvalidSpec\",\"message\":\"spec.rules[0].metricsQuery: 1:5: "
    "unexpected right paren\",\"observedGeneration\":1}],\"metrics\":[]}},"
    "{\"metadata\":{\"name\":\"broken-new\",\"namespace\":\"ml\",\"generation\":1}," BAD_SPEC "},"
    "{\"metadata\":{\"name\":\"fresh\",\"namespace\":\"ml\",\"generation\":3}," GOOD_SPEC ","
    "\"status\":{\"observedGeneration\":2,\"conditions\":[{\"type\":\"Accepted\",\"status\":"
    "\"True\",\"reason\":\"Accepted\",\"message\":\"every rule loaded\"}],\"metrics\":[]}},"
    "{\"metadata\":{\"name\":\"loser\",\"namespace\":\"ml\",\"generation\":2}," GOOD_SPEC ","
    "\"status\":{\"observedGeneration\":2,\"conditions\":[{\"type\":\"Accepted\",\"status\":"
    "\"False\",\"reason\":\"Conflict\",\"message\":\"pods/nothing_here is served by the config "
    "file's rule rules.yaml:2:3\"}]}},"
    "{\"metadata\":{\"name\":\"new\",\"namespace\":\"ml\",\"generation\":1}," GOOD_SPEC "},"
    "{\"metadata\":{\"name\":\"queue\",\"namespace\":\"ml\",\"generation\":1}," GOOD_SPEC ","
    "\"status\":{\"observedGeneration\":1,\"conditions\":[{\"type\":\"Accepted\",\"status\":"
    "\"True\",\"reason\":\"Accepted\",\"message\":\"every rule loaded\"}],"
    "\"metrics\":[\"nothing_here\",\"queue_depth\"]}}]}";

static void test_explain__metricrules_of_the_namespace(void **state)
{
    (void)state;
    static const struct cma_fake_answer kube[] = {
        {.path = "/apis/metrics.custom-metrics-adapter.dev/v1alpha1/namespaces/ml/metricrules",
         .status = 200,
         .body = MR_LIST_ML},
    };
    struct api_fixture_spec spec = SPEC;
    spec.kube = kube;
    spec.n_kube = 1;
    struct api_fixture *fx = cma_test_api_fixture_new(&spec);
    int status = 0;
    const char *target = "/apis/custom.metrics.k8s.io/v1beta1/namespaces/ml/pods/a/nothing_here";
    char *r = explain(fx, target, &status);
    assert_null(strstr(r, "MetricRule")); /* --enable-metric-rules off: not listed */
    free(r);
    static const struct cma_rule_owner queue = {"ml", "queue", "namespace"};
    fx->rules->rules[0].owner = &queue; /* served: its rule is in the rules the request uses */
    cma_test_api_fixture_relist(fx);
    fx->opts->enable_metric_rules = true;
    r = explain(fx, target, &status);
    assert_int_equal(status, 404);
    has(r, "  MetricRule ml/broken: not accepted (InvalidSpec): spec.rules[0].metricsQuery: 1:5: "
           "unexpected right paren\n");
    has(r, "  MetricRule ml/fresh: generation 3 is not processed yet (its status is of generation "
           "2: Accepted=True, Accepted)\n");
    has(r, "  MetricRule ml/loser: not accepted (Conflict): pods/nothing_here is served by the "
           "config file's rule rules.yaml:2:3\n");
    has(r, "  MetricRule ml/broken-new: not accepted (InvalidSpec): spec.rules[0].metricsQuery: ");
    has(r, "  MetricRule ml/new: not served: the adapter has not accepted it (not processed yet, ");
    has(r, "  MetricRule ml/queue: accepted and served (its rules of this kind are listed above; "
           "the metrics its status names: nothing_here, queue_depth)\n");
    free(r);
    /* another namespace: its own list only (the fake has none: 404), never ml's */
    r = explain(fx, "/apis/custom.metrics.k8s.io/v1beta1/namespaces/shop/pods/a/nothing_here",
                &status);
    has(r, "  MetricRules of namespace shop: not listed: HTTP 404 from "
           "/apis/metrics.custom-metrics-adapter.dev/v1alpha1/namespaces/shop/metricrules\n");
    assert_null(strstr(r, "ml/"));
    assert_null(strstr(r, "broken"));
    free(r);
    cma_test_api_fixture_free(fx);
}

/* Four rules: the config's, then, as a merged ruleset holds them (each MetricRule's together, in
 * spec order, their seriesQuery enforced already), two of a MetricRule in ml (the second defines
 * the config rule's metric too) and one of a MetricRule in shop. */
static const char OWNED_CONFIG[] =
    "rules:\n"
    "- seriesQuery: 'cfg_load{namespace!=\"\",pod!=\"\"}'\n"
    "  resources: {overrides: {namespace: {resource: namespace}, pod: {resource: pod}}}\n"
    "  metricsQuery: sum(<<.Series>>{<<.LabelMatchers>>}) by (<<.GroupBy>>)\n"
    "- seriesQuery: 'queue_depth{namespace=\"ml\"}'\n"
    "  resources: {overrides: {namespace: {resource: namespace}, pod: {resource: pod}}}\n"
    "  metricsQuery: sum(<<.Series>>{<<.LabelMatchers>>}) by (<<.GroupBy>>)\n"
    "- seriesQuery: 'cfg_load{namespace=\"ml\"}'\n"
    "  resources: {overrides: {namespace: {resource: namespace}, pod: {resource: pod}}}\n"
    "  metricsQuery: max(<<.Series>>{<<.LabelMatchers>>}) by (<<.GroupBy>>)\n"
    "- seriesQuery: 'billing_secret_total{namespace=\"shop\"}'\n"
    "  resources: {overrides: {namespace: {resource: namespace}, pod: {resource: pod}}}\n"
    "  metricsQuery: sum(<<.Series>>{<<.LabelMatchers>>}) by (<<.GroupBy>>)\n";
static const char *const CFG_SERIES[] = {"cfg_load{namespace=ml,pod=a}"};
static const char *const ML_SERIES[] = {"queue_depth{namespace=ml,pod=a}"};
static const char *const SHOP_SERIES[] = {"billing_secret_total{namespace=shop,pod=s}"};
static const struct fake_series OWNED_ANSWERS[] = {
    {"cfg_load{namespace!=\"\",pod!=\"\"}", CFG_SERIES, 1},
    {"queue_depth{namespace=\"ml\"}", ML_SERIES, 1},
    {"billing_secret_total{namespace=\"shop\"}", SHOP_SERIES, 1},
    {"cfg_load{namespace=\"ml\"}", CFG_SERIES, 1},
};

static void test_explain__metricrule_rules_named_and_kept_to_their_namespace(void **state)
{
    (void)state;
    static const struct cma_rule_owner ml = {"ml", "queue", "namespace"};
    static const struct cma_rule_owner shop = {"shop", "secret-billing", "namespace"};
    struct api_fixture_spec spec = {.config = OWNED_CONFIG,
                                    .series = OWNED_ANSWERS,
                                    .n_series = 4,
                                    .replies = REPLIES,
                                    .n_replies = 1};
    struct api_fixture *fx = cma_test_api_fixture_new(&spec);
    fx->rules->rules[1].owner = &ml;
    fx->rules->rules[2].owner = &ml; /* the same metric as the config's rules[0] */
    fx->rules->rules[3].owner = &shop;
    cma_test_api_fixture_relist(fx); /* the catalog keyed by owner, as discovery builds it */
    int status = 0;
    char *r = explain(fx, "/apis/custom.metrics.k8s.io/v1beta1/namespaces/ml/pods/a/queue_depth",
                      &status);
    has(r, "rule:\n  MetricRule ml/queue (spec.rules[0]), every query enforced with "
           "namespace=\"ml\"\n  seriesQuery: queue_depth{namespace=\"ml\"}\n");
    free(r);
    r = explain(fx, "/apis/custom.metrics.k8s.io/v1beta1/namespaces/ml/pods/a/cfg_load", &status);
    has(r, "rule:\n  rules.yaml:2:3 (rules[0])\n");
    has(r, "  MetricRule ml/queue (spec.rules[1]) of this namespace defines cfg_load too: the "
           "config files' rule wins the conflict\n");
    free(r);
    r = explain(fx, "/apis/custom.metrics.k8s.io/v1beta1/namespaces/shop/pods/a/cfg_load", &status);
    has(r, "rule:\n  rules.yaml:2:3 (rules[0])\n");
    assert_null(strstr(r, "MetricRule")); /* ml's MetricRule is not shop's business */
    free(r);
    r = explain(fx, "/apis/custom.metrics.k8s.io/v1beta1/namespaces/ml/pods/a/nothing_here",
                &status);
    assert_int_equal(status, 404);
    has(r, "  rules[0] (rules.yaml:2): seriesQuery cfg_load{namespace!=\"\",pod!=\"\"} finds 1 "
           "series");
    has(r, "  MetricRule ml/queue spec.rules[0]: seriesQuery queue_depth{namespace=\"ml\"} finds 1 "
           "series, 0 named nothing_here");
    assert_null(strstr(r, "shop")); /* another namespace's MetricRule: not a word of it */
    assert_null(strstr(r, "billing"));
    free(r);
    /* scoped: the config rule's listing gets the namespace, the MetricRule's is enforced already */
    fx->opts->enable_metric_rules = true;
    struct cma_kv kv[] = {{"explain", "true"}};
    struct cma_response resp = get_with(
        fx, "/apis/custom.metrics.k8s.io/v1beta1/namespaces/shop/pods/s/nothing_here", kv, 1);
    assert_int_equal(resp.status, 200);
    has(cma_buf_str(&resp.body), "  MetricRule shop/secret-billing spec.rules[0]: seriesQuery "
                                 "billing_secret_total{namespace=\"shop\"} finds 1 series");
    assert_null(strstr(cma_buf_str(&resp.body), "queue"));
    cma_buf_done(&resp.body);
    cma_test_api_fixture_free(fx);
}

/* A MetricRule's rule on a tenantFromNamespace backend (cma_rule_backend.tenant, as the
 * controller sets it): its query goes with the tenant and explain names it; the config's rule on
 * the same backend goes without; the why section lists its series as the tenant too. */
static void test_explain__metricrule_tenant_goes_with_its_queries(void **state)
{
    (void)state;
    static const struct cma_rule_owner ml = {"ml", "queue", "namespace"};
    struct api_fixture_spec spec = {.config = OWNED_CONFIG,
                                    .series = OWNED_ANSWERS,
                                    .n_series = 4,
                                    .replies = REPLIES,
                                    .n_replies = 1};
    struct api_fixture *fx = cma_test_api_fixture_new(&spec);
    fx->rules->rules[1].owner = &ml;
    fx->rules->rules[1].backend.tenant = "ml";
    cma_test_api_fixture_relist(fx);
    int status = 0;
    char *r = explain(fx, "/apis/custom.metrics.k8s.io/v1beta1/namespaces/ml/pods/a/queue_depth",
                      &status);
    has(r, "(tenant ml), instant query at ");
    assert_string_equal(fx->last_tenant, "ml");
    free(r);
    r = explain(fx, "/apis/custom.metrics.k8s.io/v1beta1/namespaces/ml/pods/a/cfg_load", &status);
    assert_null(strstr(r, "(tenant "));
    assert_string_equal(fx->last_tenant, "");
    free(r);
    /* the plain request (no explain) sends the tenant too */
    char *body = plain_answer(fx,
                              "/apis/custom.metrics.k8s.io/v1beta1/namespaces/ml/pods/a/"
                              "queue_depth",
                              &status);
    assert_int_equal(status, 200);
    assert_string_equal(fx->last_tenant, "ml");
    free(body);
    size_t before = fx->series.calls;
    r = explain(fx, "/apis/custom.metrics.k8s.io/v1beta1/namespaces/ml/pods/a/nothing_here",
                &status);
    assert_int_equal(status, 404);
    bool listed_as_ml = false;
    for (size_t i = before; i < fx->series.calls && i < 32; i++)
        listed_as_ml |= strcmp(fx->series.matches[i], "queue_depth{namespace=\"ml\"}") == 0 &&
                        strcmp(fx->series.tenants[i], "ml") == 0;
    assert_true(listed_as_ml);
    free(r);
    cma_test_api_fixture_free(fx);
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
        cmocka_unit_test(test_explain_param__off_on_scoped_and_bad_values),
        cmocka_unit_test(test_explain_param__why_counts_only_the_namespace),
        cmocka_unit_test(test_explain__metricrules_of_the_namespace),
        cmocka_unit_test(test_explain__metricrule_rules_named_and_kept_to_their_namespace),
        cmocka_unit_test(test_explain__metricrule_tenant_goes_with_its_queries),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
