/* router_test.c: one table row per path shape the router knows (and the near misses), the
 * percent-decoding errors, and every path kube-aggregator really sent in the recorded fixture
 * ../shared/fixtures/kube-apiserver/aggregator-requests.jsonl. */
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "cma/err.h"
#include "cma/router.h"

#define C CMA_GROUP_CUSTOM
#define E CMA_GROUP_EXTERNAL
#define R CMA_GROUP_RESOURCE

struct route_case {
    const char *path;
    enum cma_route_kind kind;
    const char *group;
    const char *version;
    const char *namespace_;
    const char *resource;
    const char *name;
    const char *metric;
    const char *subpath;
};

static const struct route_case cases[] = {
    /* outside the API groups */
    {.path = "/", .kind = CMA_ROUTE_ROOT},
    {.path = "/healthz", .kind = CMA_ROUTE_HEALTHZ},
    {.path = "/healthz/", .kind = CMA_ROUTE_HEALTHZ},
    {.path = "/healthz/ping", .kind = CMA_ROUTE_HEALTHZ, .subpath = "ping"},
    {.path = "/livez/log", .kind = CMA_ROUTE_LIVEZ, .subpath = "log"},
    {.path = "/livez", .kind = CMA_ROUTE_LIVEZ},
    {.path = "/readyz", .kind = CMA_ROUTE_READYZ},
    {.path = "/readyz/informer-sync", .kind = CMA_ROUTE_READYZ, .subpath = "informer-sync"},
    {.path = "/healthz/a/b", .kind = CMA_ROUTE_NOT_FOUND},
    {.path = "/version", .kind = CMA_ROUTE_VERSION},
    {.path = "/version/", .kind = CMA_ROUTE_VERSION},
    {.path = "/metrics", .kind = CMA_ROUTE_METRICS},
    {.path = "/debug/explain", .kind = CMA_ROUTE_DEBUG_EXPLAIN},
    {.path = "/debug", .kind = CMA_ROUTE_NOT_FOUND},
    {.path = "/openapi/v2", .kind = CMA_ROUTE_OPENAPI, .subpath = "v2"},
    {.path = "/openapi/v3", .kind = CMA_ROUTE_OPENAPI, .subpath = "v3"},
    {.path = "/openapi/v3/apis/custom.metrics.k8s.io/v1beta1",
     .kind = CMA_ROUTE_OPENAPI,
     .subpath = "v3/apis/custom.metrics.k8s.io/v1beta1"},
    {.path = "/openapi/v2/x", .kind = CMA_ROUTE_NOT_FOUND},
    {.path = "/openapi", .kind = CMA_ROUTE_NOT_FOUND},
    {.path = "/openapi/v4", .kind = CMA_ROUTE_NOT_FOUND},
    {.path = "/Healthz", .kind = CMA_ROUTE_NOT_FOUND},
    {.path = "/favicon.ico", .kind = CMA_ROUTE_NOT_FOUND},
    {.path = "", .kind = CMA_ROUTE_NOT_FOUND},
    {.path = "healthz", .kind = CMA_ROUTE_NOT_FOUND},
    {.path = "*", .kind = CMA_ROUTE_NOT_FOUND},
    {.path = "//", .kind = CMA_ROUTE_NOT_FOUND},
    {.path = "//healthz", .kind = CMA_ROUTE_NOT_FOUND},
    {.path = "/healthz//", .kind = CMA_ROUTE_NOT_FOUND},

    /* discovery */
    {.path = "/apis", .kind = CMA_ROUTE_APIS},
    {.path = "/apis/", .kind = CMA_ROUTE_APIS},
    {.path = "/apis/custom.metrics.k8s.io", .kind = CMA_ROUTE_API_GROUP, .group = C},
    {.path = "/apis/external.metrics.k8s.io", .kind = CMA_ROUTE_API_GROUP, .group = E},
    {.path = "/apis/metrics.k8s.io/", .kind = CMA_ROUTE_API_GROUP, .group = R},
    {.path = "/apis/apps", .kind = CMA_ROUTE_NOT_FOUND},
    {.path = "/apis/custom.metrics.k8s.io/v1beta1",
     .kind = CMA_ROUTE_API_GROUP_VERSION,
     .group = C,
     .version = "v1beta1"},
    {.path = "/apis/custom.metrics.k8s.io/v1beta1/",
     .kind = CMA_ROUTE_API_GROUP_VERSION,
     .group = C,
     .version = "v1beta1"},
    {.path = "/apis/custom.metrics.k8s.io/v1beta2",
     .kind = CMA_ROUTE_API_GROUP_VERSION,
     .group = C,
     .version = "v1beta2"},
    {.path = "/apis/external.metrics.k8s.io/v1beta1",
     .kind = CMA_ROUTE_API_GROUP_VERSION,
     .group = E,
     .version = "v1beta1"},
    {.path = "/apis/metrics.k8s.io/v1beta1",
     .kind = CMA_ROUTE_API_GROUP_VERSION,
     .group = R,
     .version = "v1beta1"},
    {.path = "/apis/custom.metrics.k8s.io/v1", .kind = CMA_ROUTE_NOT_FOUND},
    {.path = "/apis/external.metrics.k8s.io/v1beta2", .kind = CMA_ROUTE_NOT_FOUND},
    {.path = "/apis/metrics.k8s.io/v1beta2", .kind = CMA_ROUTE_NOT_FOUND},
    {.path = "/apis/apps/v1", .kind = CMA_ROUTE_NOT_FOUND},
    {.path = "/apis//v1beta1", .kind = CMA_ROUTE_NOT_FOUND},
    {.path = "/apis/custom.metrics.k8s.io//", .kind = CMA_ROUTE_NOT_FOUND},
    {.path = "/api/v1", .kind = CMA_ROUTE_NOT_FOUND},

    /* custom metrics, namespaced objects */
    {.path = "/apis/custom.metrics.k8s.io/v1beta2/namespaces/ml/pods/bert-0/m",
     .kind = CMA_ROUTE_CUSTOM_OBJECT,
     .group = C,
     .version = "v1beta2",
     .namespace_ = "ml",
     .resource = "pods",
     .name = "bert-0",
     .metric = "m"},
    {.path = "/apis/custom.metrics.k8s.io/v1beta1/namespaces/default/pods/%2A/DCGM_FI_DEV_GPU_UTIL",
     .kind = CMA_ROUTE_CUSTOM_OBJECT,
     .group = C,
     .version = "v1beta1",
     .namespace_ = "default",
     .resource = "pods",
     .name = "*",
     .metric = "DCGM_FI_DEV_GPU_UTIL"},
    {.path = "/apis/custom.metrics.k8s.io/v1beta1/namespaces/default/pods/*/DCGM_FI_DEV_GPU_UTIL/",
     .kind = CMA_ROUTE_CUSTOM_OBJECT,
     .group = C,
     .version = "v1beta1",
     .namespace_ = "default",
     .resource = "pods",
     .name = "*",
     .metric = "DCGM_FI_DEV_GPU_UTIL"},
    {.path =
         "/apis/custom.metrics.k8s.io/v1beta1/namespaces/default/deployments.apps/web/queue_depth",
     .kind = CMA_ROUTE_CUSTOM_OBJECT,
     .group = C,
     .version = "v1beta1",
     .namespace_ = "default",
     .resource = "deployments.apps",
     .name = "web",
     .metric = "queue_depth"},
    {.path =
         "/apis/custom.metrics.k8s.io/v1beta1/namespaces/default/ingresses.networking.k8s.io/main/"
         "Requests_Per_Second",
     .kind = CMA_ROUTE_CUSTOM_OBJECT,
     .group = C,
     .version = "v1beta1",
     .namespace_ = "default",
     .resource = "ingresses.networking.k8s.io",
     .name = "main",
     .metric = "Requests_Per_Second"},
    {.path = "/apis/custom.metrics.k8s.io/v1beta1/namespaces/%2A/pods/%2a/m",
     .kind = CMA_ROUTE_CUSTOM_OBJECT,
     .group = C,
     .version = "v1beta1",
     .namespace_ = "*",
     .resource = "pods",
     .name = "*",
     .metric = "m"},
    {.path = "/apis/custom.metrics.k8s.io/v1beta1/namespaces/ns/pods/a+b/m%20x",
     .kind = CMA_ROUTE_CUSTOM_OBJECT,
     .group = C,
     .version = "v1beta1",
     .namespace_ = "ns",
     .resource = "pods",
     .name = "a+b",
     .metric = "m x"},
    /* trap 24: the namespace object is not reachable through the namespaced shape; the router
     * still routes it, the catalog finds no namespaced "namespaces" resource. */
    {.path = "/apis/custom.metrics.k8s.io/v1beta1/namespaces/ns/namespaces/ns/m",
     .kind = CMA_ROUTE_CUSTOM_OBJECT,
     .group = C,
     .version = "v1beta1",
     .namespace_ = "ns",
     .resource = "namespaces",
     .name = "ns",
     .metric = "m"},
    {.path = "/apis/custom.metrics.k8s.io/v1beta1/namespaces/ns/metrics/x/m",
     .kind = CMA_ROUTE_CUSTOM_OBJECT,
     .group = C,
     .version = "v1beta1",
     .namespace_ = "ns",
     .resource = "metrics",
     .name = "x",
     .metric = "m"},

    /* custom metrics, namespace metrics (root-scoped: the Namespace object itself) */
    {.path = "/apis/custom.metrics.k8s.io/v1beta1/namespaces/ml/metrics/queue_len",
     .kind = CMA_ROUTE_CUSTOM_NAMESPACE_METRIC,
     .group = C,
     .version = "v1beta1",
     .namespace_ = NULL,
     .resource = "namespaces",
     .name = "ml",
     .metric = "queue_len"},
    {.path = "/apis/custom.metrics.k8s.io/v1beta2/namespaces/*/metrics/queue_len",
     .kind = CMA_ROUTE_CUSTOM_NAMESPACE_METRIC,
     .group = C,
     .version = "v1beta2",
     .namespace_ = NULL,
     .resource = "namespaces",
     .name = "*",
     .metric = "queue_len"},

    /* custom metrics, root-scoped objects */
    {.path = "/apis/custom.metrics.k8s.io/v1beta1/nodes/node-1/temperature",
     .kind = CMA_ROUTE_CUSTOM_OBJECT,
     .group = C,
     .version = "v1beta1",
     .namespace_ = NULL,
     .resource = "nodes",
     .name = "node-1",
     .metric = "temperature"},
    {.path = "/apis/custom.metrics.k8s.io/v1beta2/nodes/%2A/DCGM_FI_DEV_POWER_USAGE",
     .kind = CMA_ROUTE_CUSTOM_OBJECT,
     .group = C,
     .version = "v1beta2",
     .namespace_ = NULL,
     .resource = "nodes",
     .name = "*",
     .metric = "DCGM_FI_DEV_POWER_USAGE"},
    {.path = "/apis/custom.metrics.k8s.io/v1beta1/persistentvolumes/pv-1/used",
     .kind = CMA_ROUTE_CUSTOM_OBJECT,
     .group = C,
     .version = "v1beta1",
     .namespace_ = NULL,
     .resource = "persistentvolumes",
     .name = "pv-1",
     .metric = "used"},

    /* custom metrics, malformed or unknown shapes */
    {.path = "/apis/custom.metrics.k8s.io/v1beta1/namespaces/ns/m",
     .kind = CMA_ROUTE_BAD_PATH,
     .group = C,
     .version = "v1beta1",
     .namespace_ = "ns",
     .metric = "m"},
    {.path = "/apis/custom.metrics.k8s.io/v1beta1/namespaces/ns", .kind = CMA_ROUTE_NOT_FOUND},
    {.path = "/apis/custom.metrics.k8s.io/v1beta1/namespaces", .kind = CMA_ROUTE_NOT_FOUND},
    {.path = "/apis/custom.metrics.k8s.io/v1beta1/namespaces/ns/pods/x",
     .kind = CMA_ROUTE_NOT_FOUND},
    {.path = "/apis/custom.metrics.k8s.io/v1beta1/namespaces/ns/pods/x/m/extra",
     .kind = CMA_ROUTE_NOT_FOUND},
    {.path = "/apis/custom.metrics.k8s.io/v1beta1/nodes/n1", .kind = CMA_ROUTE_NOT_FOUND},
    {.path = "/apis/custom.metrics.k8s.io/v1beta1/nodes", .kind = CMA_ROUTE_NOT_FOUND},
    {.path = "/apis/custom.metrics.k8s.io/v1beta1/nodes/n1/m/extra", .kind = CMA_ROUTE_NOT_FOUND},
    {.path = "/apis/custom.metrics.k8s.io/v1beta1/pods//m", .kind = CMA_ROUTE_NOT_FOUND},
    {.path = "/apis/custom.metrics.k8s.io/v1beta1//pods/x/m", .kind = CMA_ROUTE_NOT_FOUND},
    {.path = "/apis/custom.metrics.k8s.io/v1beta1/namespaces/ns/pods/x/..",
     .kind = CMA_ROUTE_BAD_PATH,
     .group = C,
     .version = "v1beta1",
     .namespace_ = "ns",
     .resource = "pods",
     .name = "x",
     .metric = ".."},
    {.path = "/apis/custom.metrics.k8s.io/v1beta1/namespaces/ns/pods/./m",
     .kind = CMA_ROUTE_BAD_PATH,
     .group = C,
     .version = "v1beta1",
     .namespace_ = "ns",
     .resource = "pods",
     .name = ".",
     .metric = "m"},
    {.path = "/apis/custom.metrics.k8s.io/v1beta1/namespaces/%2E%2E/pods/x/m",
     .kind = CMA_ROUTE_BAD_PATH,
     .group = C,
     .version = "v1beta1",
     .namespace_ = "..",
     .resource = "pods",
     .name = "x",
     .metric = "m"},
    {.path = "/apis/custom.metrics.k8s.io/v1beta1/nodes/../m",
     .kind = CMA_ROUTE_BAD_PATH,
     .group = C,
     .version = "v1beta1",
     .namespace_ = NULL,
     .resource = "nodes",
     .name = "..",
     .metric = "m"},
    {.path = "/apis/custom.metrics.k8s.io/v1beta1/namespaces/ns/metrics/.",
     .kind = CMA_ROUTE_BAD_PATH,
     .group = C,
     .version = "v1beta1",
     .namespace_ = NULL,
     .resource = "namespaces",
     .name = "ns",
     .metric = "."},

    /* external metrics */
    {.path = "/apis/external.metrics.k8s.io/v1beta1/namespaces/default/queue_messages_ready",
     .kind = CMA_ROUTE_EXTERNAL_METRIC,
     .group = E,
     .version = "v1beta1",
     .namespace_ = "default",
     .metric = "queue_messages_ready"},
    {.path = "/apis/external.metrics.k8s.io/v1beta1/namespaces/default/queue_messages_ready/",
     .kind = CMA_ROUTE_EXTERNAL_METRIC,
     .group = E,
     .version = "v1beta1",
     .namespace_ = "default",
     .metric = "queue_messages_ready"},
    {.path = "/apis/external.metrics.k8s.io/v1beta1/namespaces/default",
     .kind = CMA_ROUTE_NOT_FOUND},
    {.path = "/apis/external.metrics.k8s.io/v1beta1/namespaces/default/q/x",
     .kind = CMA_ROUTE_NOT_FOUND},
    {.path = "/apis/external.metrics.k8s.io/v1beta1/q", .kind = CMA_ROUTE_NOT_FOUND},
    {.path = "/apis/external.metrics.k8s.io/v1beta1/nodes/n/q", .kind = CMA_ROUTE_NOT_FOUND},
    {.path = "/apis/external.metrics.k8s.io/v1beta1/namespaces/default/..",
     .kind = CMA_ROUTE_BAD_PATH,
     .group = E,
     .version = "v1beta1",
     .namespace_ = "default",
     .metric = ".."},

    /* resource metrics */
    {.path = "/apis/metrics.k8s.io/v1beta1/nodes",
     .kind = CMA_ROUTE_RESOURCE_NODES,
     .group = R,
     .version = "v1beta1"},
    {.path = "/apis/metrics.k8s.io/v1beta1/nodes/node-1",
     .kind = CMA_ROUTE_RESOURCE_NODE,
     .group = R,
     .version = "v1beta1",
     .name = "node-1"},
    {.path = "/apis/metrics.k8s.io/v1beta1/pods",
     .kind = CMA_ROUTE_RESOURCE_PODS,
     .group = R,
     .version = "v1beta1"},
    {.path = "/apis/metrics.k8s.io/v1beta1/namespaces/ml/pods",
     .kind = CMA_ROUTE_RESOURCE_PODS,
     .group = R,
     .version = "v1beta1",
     .namespace_ = "ml"},
    {.path = "/apis/metrics.k8s.io/v1beta1/namespaces/ml/pods/bert-0",
     .kind = CMA_ROUTE_RESOURCE_POD,
     .group = R,
     .version = "v1beta1",
     .namespace_ = "ml",
     .name = "bert-0"},
    {.path = "/apis/metrics.k8s.io/v1beta1/namespaces/ml/pods/bert-0/x",
     .kind = CMA_ROUTE_NOT_FOUND},
    {.path = "/apis/metrics.k8s.io/v1beta1/namespaces/ml", .kind = CMA_ROUTE_NOT_FOUND},
    {.path = "/apis/metrics.k8s.io/v1beta1/nodes/n/x", .kind = CMA_ROUTE_NOT_FOUND},
    {.path = "/apis/metrics.k8s.io/v1beta1/services", .kind = CMA_ROUTE_NOT_FOUND},
};

static const char *kind_name(enum cma_route_kind k)
{
    static const char *const names[] = {
        "NOT_FOUND",
        "BAD_PATH",
        "ROOT",
        "HEALTHZ",
        "LIVEZ",
        "READYZ",
        "VERSION",
        "OPENAPI",
        "METRICS",
        "APIS",
        "API_GROUP",
        "API_GROUP_VERSION",
        "CUSTOM_OBJECT",
        "CUSTOM_NAMESPACE_METRIC",
        "EXTERNAL_METRIC",
        "RESOURCE_NODES",
        "RESOURCE_NODE",
        "RESOURCE_PODS",
        "RESOURCE_POD",
    };
    return (size_t)k < sizeof(names) / sizeof(names[0]) ? names[k] : "?";
}

static void assert_field(const char *path, const char *field, const char *got, const char *want)
{
    if (!want && !got)
        return;
    if (!want || !got || strcmp(want, got) != 0)
        fail_msg("%s: %s is \"%s\", want \"%s\"", path, field, got ? got : "(null)",
                 want ? want : "(null)");
}

static void test_cma_router_parse__route_table(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        const struct route_case *c = &cases[i];
        struct cma_route *r = NULL;
        struct cma_err err;
        cma_err_clear(&err);
        enum cma_errc rc = cma_router_parse(c->path, &r, &err);
        if (rc != CMA_OK)
            fail_msg("%s: error %s: %s", c->path, cma_errc_name(rc), err.msg);
        assert_non_null(r);
        if (r->kind != c->kind)
            fail_msg("%s: kind %s, want %s", c->path, kind_name(r->kind), kind_name(c->kind));
        if (c->kind != CMA_ROUTE_NOT_FOUND) {
            assert_field(c->path, "group", r->group, c->group);
            assert_field(c->path, "version", r->version, c->version);
            assert_field(c->path, "namespace", r->namespace_, c->namespace_);
            assert_field(c->path, "resource", r->resource, c->resource);
            assert_field(c->path, "name", r->name, c->name);
            assert_field(c->path, "metric", r->metric, c->metric);
            assert_field(c->path, "subpath", r->subpath, c->subpath);
        }
        cma_route_free(r);
    }
}

static void test_cma_router_parse__bad_escapes(void **state)
{
    (void)state;
    static const char *const bad[] = {
        "/apis/custom.metrics.k8s.io/v1beta1/namespaces/ns/pods/%zz/m",
        "/apis/custom.metrics.k8s.io/v1beta1/namespaces/ns/pods/%2/m",
        "/apis/custom.metrics.k8s.io/v1beta1/namespaces/ns/pods/x/m%",
        "/apis/custom.metrics.k8s.io/v1beta1/namespaces/ns/pods/x/m%4",
        "/apis/custom.metrics.k8s.io/v1beta1/namespaces/ns/pods/a%2Fb/m",
        "/apis/custom.metrics.k8s.io/v1beta1/namespaces/ns/pods/a%2fb/m",
        "/apis/custom.metrics.k8s.io/v1beta1/namespaces/ns/pods/a%00b/m",
        "/healthz/%",
        "/unknown/%g0",
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        struct cma_route *r = (struct cma_route *)(uintptr_t)1; /* must stay untouched */
        struct cma_err err;
        cma_err_clear(&err);
        enum cma_errc rc = cma_router_parse(bad[i], &r, &err);
        if (rc != CMA_ERR_BAD_REQUEST)
            fail_msg("%s: got %s, want BAD_REQUEST", bad[i], cma_errc_name(rc));
        assert_int_equal(err.code, CMA_ERR_BAD_REQUEST);
        assert_true(err.msg[0] != '\0');
        assert_ptr_equal(r, (struct cma_route *)(uintptr_t)1);
    }
}

static void test_cma_router_parse__null_path(void **state)
{
    (void)state;
    struct cma_route *r = NULL;
    assert_int_equal(cma_router_parse(NULL, &r, NULL), CMA_ERR_BAD_REQUEST);
    assert_null(r);
}

static void test_cma_router_parse__too_many_segments(void **state)
{
    (void)state;
    char path[512] = "/openapi/v3";
    for (int i = 0; i < 40; i++)
        strcat(path, "/x");
    struct cma_route *r = NULL;
    assert_int_equal(cma_router_parse(path, &r, NULL), CMA_OK);
    assert_int_equal(r->kind, CMA_ROUTE_NOT_FOUND);
    cma_route_free(r);
}

static void test_cma_route_free__accepts_null(void **state)
{
    (void)state;
    cma_route_free(NULL);
    struct cma_route *r = NULL;
    assert_int_equal(cma_router_parse("/apis", &r, NULL), CMA_OK);
    assert_null(r->group);
    cma_route_free(r);
}

/* Reads the value of "key": "..." from a JSON line (the fixture's paths hold no escapes). */
static bool json_line_string(const char *line, const char *key, char *out, size_t out_len)
{
    char pat[64];
    snprintf(pat, sizeof(pat), "\"%s\": \"", key);
    const char *p = strstr(line, pat);
    if (!p)
        return false;
    p += strlen(pat);
    const char *end = strchr(p, '"');
    if (!end || (size_t)(end - p) >= out_len)
        return false;
    memcpy(out, p, (size_t)(end - p));
    out[end - p] = '\0';
    return true;
}

static void test_cma_router_parse__aggregator_fixture_paths(void **state)
{
    (void)state;
    const char *src = getenv("CMA_SOURCE_DIR");
    char file[1024];
    snprintf(file, sizeof(file), "%s/../shared/fixtures/kube-apiserver/aggregator-requests.jsonl",
             src ? src : ".");
    FILE *f = fopen(file, "r");
    if (!f)
        fail_msg("cannot open %s", file);
    char line[8192];
    size_t n_paths = 0, n_metric = 0;
    while (fgets(line, sizeof(line), f)) {
        char path[1024];
        if (!json_line_string(line, "path", path, sizeof(path)))
            continue;
        n_paths++;
        struct cma_route *r = NULL;
        assert_int_equal(cma_router_parse(path, &r, NULL), CMA_OK);
        bool is_metrics_api = strncmp(path, "/apis/custom.metrics.k8s.io", 27) == 0 ||
                              strncmp(path, "/apis/external.metrics.k8s.io", 29) == 0;
        if (is_metrics_api) {
            bool ok = r->kind == CMA_ROUTE_CUSTOM_OBJECT ||
                      r->kind == CMA_ROUTE_CUSTOM_NAMESPACE_METRIC ||
                      r->kind == CMA_ROUTE_EXTERNAL_METRIC || r->kind == CMA_ROUTE_API_GROUP ||
                      r->kind == CMA_ROUTE_API_GROUP_VERSION;
            if (!ok)
                fail_msg("%s routes to %s", path, kind_name(r->kind));
            if (r->kind == CMA_ROUTE_CUSTOM_OBJECT) {
                n_metric++;
                assert_string_equal(r->name, "*"); /* every recorded one is %2A */
                assert_string_equal(r->metric, "test_metric");
            }
        } else {
            assert_int_not_equal(r->kind, CMA_ROUTE_NOT_FOUND);
        }
        cma_route_free(r);
    }
    fclose(f);
    assert_int_equal(n_paths, 11);
    assert_int_equal(n_metric, 5);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cma_router_parse__route_table),
        cmocka_unit_test(test_cma_router_parse__bad_escapes),
        cmocka_unit_test(test_cma_router_parse__null_path),
        cmocka_unit_test(test_cma_router_parse__too_many_segments),
        cmocka_unit_test(test_cma_router_parse__aggregator_fixture_paths),
        cmocka_unit_test(test_cma_route_free__accepts_null),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
