/* api_resource_test.c: metrics.k8s.io v1beta1 (api/api_resource.c) through cma_app_handle, over a
 * fake kube-apiserver (the pod and node LISTs) and a fake backend with canned cpu and memory
 * vectors: PodMetrics list of a namespace, sorted by name, with the objects' labels, each
 * container's cpu and memory as Kubernetes quantities (a container without memory gets 0), the
 * samples' earliest timestamp and the rules' window; a pod without a memory sample, a listed pod
 * without samples and a pod that is not Running are left out; the LIST asks for Running pods
 * with the labelSelector; a get of one pod, and 404 for a pod left out; NodeMetrics list and get
 * (a node needs both resources); 400 for a bad labelSelector and an unsupported field selector,
 * 503 before the first catalog. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "api_fixture.h"

#define OVERRIDES                                                                                  \
    "    resources: {overrides: {node: {resource: node}, namespace: {resource: namespace}, "       \
    "pod: {resource: pod}}}\n"                                                                     \
    "    containerLabel: container\n"

static const char CONFIG[] =
    "resourceRules:\n"
    "  cpu:\n"
    "    containerQuery: sum by (<<.GroupBy>>) (rate(container_cpu_usage_seconds_total{"
    "<<.LabelMatchers>>}[5m]))\n"
    "    nodeQuery: sum by (<<.GroupBy>>) "
    "(rate(node_cpu_seconds_total{<<.LabelMatchers>>}[5m]))\n" OVERRIDES "  memory:\n"
    "    containerQuery: sum by (<<.GroupBy>>) (container_memory_working_set_bytes{"
    "<<.LabelMatchers>>})\n"
    "    nodeQuery: sum by (<<.GroupBy>>) "
    "(node_memory_working_set_bytes{<<.LabelMatchers>>})\n" OVERRIDES "  window: 5m\n";

#define VECTOR(...)                                                                                \
    "{\"status\":\"success\",\"data\":{\"resultType\":\"vector\",\"result\":[" __VA_ARGS__ "]}}"
#define CONTAINER(pod, c, t, v)                                                                    \
    "{\"metric\":{\"namespace\":\"ml\",\"pod\":\"" pod "\",\"container\":\"" c "\"},"              \
    "\"value\":[" t ",\"" v "\"]}"
#define NODE(n, v) "{\"metric\":{\"node\":\"" n "\"},\"value\":[1700000000,\"" v "\"]}"

/* cpu (cores): a/app 0.25, a/sidecar 0.5, b/app 1, d/app 1; memory (bytes): a/app 1 MiB,
 * d/app 1 MiB (b has none, c has nothing). Nodes: n1 cpu 2, 2 GiB; n2 cpu only. */
static const struct api_reply REPLIES[] = {
    {"container_cpu_usage_seconds_total",
     VECTOR(CONTAINER("a", "app", "1700000002", "0.25") "," CONTAINER(
         "a", "sidecar", "1700000001",
         "0.5") "," CONTAINER("b", "app", "1700000000", "1") "," CONTAINER("d", "app", "1700000000",
                                                                           "1"))},
    {"container_memory_working_set_bytes",
     VECTOR(CONTAINER("a", "app", "1700000003", "1048576") "," CONTAINER("d", "app", "1700000000",
                                                                         "1048576"))},
    {"node_cpu_seconds_total", VECTOR(NODE("n1", "2") "," NODE("n2", "3"))},
    {"node_memory_working_set_bytes", VECTOR(NODE("n1", "2147483648"))},
};

#define POD(name, extra)                                                                           \
    "{\"metadata\":{\"name\":\"" name "\",\"namespace\":\"ml\",\"labels\":{\"app\":\"" name        \
    "\"},\"creationTimestamp\":\"2023-01-01T00:00:00Z\"}" extra "}"
static const char PODS[] =
    "{\"kind\":\"PodList\",\"apiVersion\":\"v1\",\"metadata\":{},\"items\":[" POD("c", "") "," POD(
        "b", "") "," POD("a", "") "," POD("d", ",\"status\":{\"phase\":\"Pending\"}") "]}";
static const char NODES[] =
    "{\"kind\":\"NodeList\",\"apiVersion\":\"v1\",\"metadata\":{},\"items\":["
    "{\"metadata\":{\"name\":\"n2\"}},{\"metadata\":{\"name\":\"n1\",\"labels\":{\"zone\":\"z\"}}}]"
    "}";
static const struct cma_fake_answer KUBE[] = {
    {.path = "/api/v1/namespaces/ml/pods", .status = 200, .body = PODS},
    {.path = "/api/v1/nodes", .status = 200, .body = NODES},
};

static const struct api_fixture_spec SPEC = {
    .config = CONFIG, .replies = REPLIES, .n_replies = 4, .kube = KUBE, .n_kube = 2};

#define RES "/apis/metrics.k8s.io/v1beta1/"

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

static const char *usage(json_t *container, const char *what)
{
    return cma_test_api_str(json_object_get(container, "usage"), what);
}

/* Pod a as the fake data says. */
static void expect_pod_a(json_t *pod)
{
    json_t *meta = json_object_get(pod, "metadata");
    assert_string_equal(cma_test_api_str(meta, "name"), "a");
    assert_string_equal(cma_test_api_str(meta, "namespace"), "ml");
    assert_string_equal(cma_test_api_str(json_object_get(meta, "labels"), "app"), "a");
    assert_string_equal(cma_test_api_str(pod, "timestamp"), "2023-11-14T22:13:21Z"); /* earliest */
    assert_string_equal(cma_test_api_str(pod, "window"), "5m0s");
    json_t *cs = json_object_get(pod, "containers");
    assert_int_equal(json_array_size(cs), 2);
    json_t *app = json_array_get(cs, 0), *sidecar = json_array_get(cs, 1);
    assert_string_equal(cma_test_api_str(app, "name"), "app");
    assert_string_equal(usage(app, "cpu"), "250m");
    assert_string_equal(usage(app, "memory"), "1Mi");
    assert_string_equal(cma_test_api_str(sidecar, "name"), "sidecar");
    assert_string_equal(usage(sidecar, "cpu"), "500m");
    assert_string_equal(usage(sidecar, "memory"), "0");
}

static void test_resource__pod_list(void **state)
{
    struct api_fixture *fx = *state;
    struct api_answer a =
        cma_test_api_request(&fx->app, "GET", RES "namespaces/ml/pods?labelSelector=tier=x");
    assert_int_equal(a.status, 200);
    assert_string_equal(cma_test_api_str(a.json, "kind"), "PodMetricsList");
    assert_string_equal(cma_test_api_str(a.json, "apiVersion"), "metrics.k8s.io/v1beta1");
    json_t *items = json_object_get(a.json, "items");
    if (json_array_size(items) != 1) /* b: no memory, c: no samples, d: Pending */
        fail_msg("want only pod a: %s", a.text);
    expect_pod_a(json_array_get(items, 0));
    cma_test_api_answer_done(&a);
    const struct cma_fake_request *r = cma_fake_http_request(fx->kube_http, 0);
    assert_non_null(r);
    assert_string_equal(r->path, "/api/v1/namespaces/ml/pods");
    assert_non_null(strstr(r->target, "labelSelector=tier%3Dx"));
    assert_non_null(strstr(r->target, "fieldSelector=status.phase%3DRunning"));
}

static void test_resource__pod_get(void **state)
{
    struct api_fixture *fx = *state;
    struct api_answer a = cma_test_api_request(&fx->app, "GET", RES "namespaces/ml/pods/a");
    assert_int_equal(a.status, 200);
    assert_string_equal(cma_test_api_str(a.json, "kind"), "PodMetrics");
    expect_pod_a(a.json);
    cma_test_api_answer_done(&a);
    cma_test_api_expect_status(&fx->app, "GET", RES "namespaces/ml/pods/b", 404,
                               "podmetrics.metrics.k8s.io \"ml/b\" not found");
    cma_test_api_expect_status(&fx->app, "GET", RES "namespaces/ml/pods/zz", 404,
                               "podmetrics.metrics.k8s.io \"ml/zz\" not found");
}

static void test_resource__nodes(void **state)
{
    struct api_fixture *fx = *state;
    struct api_answer a = cma_test_api_request(&fx->app, "GET", RES "nodes");
    assert_int_equal(a.status, 200);
    assert_string_equal(cma_test_api_str(a.json, "kind"), "NodeMetricsList");
    json_t *items = json_object_get(a.json, "items");
    assert_int_equal(json_array_size(items), 1); /* n2 has no memory */
    json_t *n1 = json_array_get(items, 0);
    assert_string_equal(cma_test_api_str(json_object_get(n1, "metadata"), "name"), "n1");
    assert_string_equal(
        cma_test_api_str(json_object_get(json_object_get(n1, "metadata"), "labels"), "zone"), "z");
    assert_string_equal(usage(n1, "cpu"), "2");
    assert_string_equal(usage(n1, "memory"), "2Gi");
    assert_string_equal(cma_test_api_str(n1, "window"), "5m0s");
    cma_test_api_answer_done(&a);
    a = cma_test_api_request(&fx->app, "GET", RES "nodes/n1");
    assert_int_equal(a.status, 200);
    assert_string_equal(cma_test_api_str(a.json, "kind"), "NodeMetrics");
    assert_string_equal(usage(a.json, "memory"), "2Gi");
    cma_test_api_answer_done(&a);
    cma_test_api_expect_status(&fx->app, "GET", RES "nodes/n2", 404,
                               "nodemetrics.metrics.k8s.io \"n2\" not found");
}

static void test_resource__bad_selectors_are_400(void **state)
{
    struct api_fixture *fx = *state;
    cma_test_api_expect_status(&fx->app, "GET", RES "namespaces/ml/pods?labelSelector=a==b==c", 400,
                               "invalid label selector \"a==b==c\": found '=='");
    cma_test_api_expect_status(&fx->app, "GET",
                               RES "namespaces/ml/pods?fieldSelector=spec.nodeName=n1", 400,
                               "\"spec.nodeName\" is not a known field selector");
    assert_int_equal(cma_fake_http_count(fx->kube_http), 0);
    assert_int_equal(fx->queries, 0);
}

static void test_resource__503_before_the_first_catalog(void **state)
{
    (void)state;
    struct api_fixture_spec spec = SPEC;
    spec.no_relist = true;
    struct api_fixture *fx = cma_test_api_fixture_new(&spec);
    cma_test_api_expect_status(&fx->app, "GET", RES "nodes", 503,
                               "metric discovery has not completed yet");
    cma_test_api_expect_status(&fx->app, "GET", RES "namespaces/ml/pods/a", 503,
                               "metric discovery has not completed yet");
    assert_int_equal(cma_fake_http_count(fx->kube_http), 0);
    cma_test_api_fixture_free(fx);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_resource__pod_list, setup, teardown),
        cmocka_unit_test_setup_teardown(test_resource__pod_get, setup, teardown),
        cmocka_unit_test_setup_teardown(test_resource__nodes, setup, teardown),
        cmocka_unit_test_setup_teardown(test_resource__bad_selectors_are_400, setup, teardown),
        cmocka_unit_test(test_resource__503_before_the_first_catalog),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
