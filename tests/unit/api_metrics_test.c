/* api_metrics_test.c: GET /metrics (api/api_metrics.c) through cma_app_handle: 404 without a
 * registry; with one, the text exposition counts each finished request in
 * apiserver_request_total by verb, group, version, resource, subresource, scope and code (GETs
 * by name and by "*" adding to one line, a 404 on its own), reports
 * the build info, and the catalog's entries per group equal to the resources the discovery
 * document of that group lists. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "api_fixture.h"
#include "cma/metrics.h"

static const char CONFIG[] =
    "rules:\n"
    "- seriesQuery: 'jobs_queued{namespace!=\"\",pod!=\"\"}'\n"
    "  resources: {overrides: {namespace: {resource: namespace}, pod: {resource: pod}}}\n"
    "  metricsQuery: max(<<.Series>>{<<.LabelMatchers>>}) by (<<.GroupBy>>)\n";

static const char *const JOBS[] = {"jobs_queued{namespace=ml,pod=a}"};
static const struct fake_series SERIES[] = {{"jobs_queued{namespace!=\"\",pod!=\"\"}", JOBS, 1}};
static const struct api_reply REPLIES[] = {
    {"jobs_queued", "{\"status\":\"success\",\"data\":{\"resultType\":\"vector\",\"result\":["
                    "{\"metric\":{\"pod\":\"a\"},\"value\":[1700000000,\"2\"]}]}}"}};
static const char PODS[] = "{\"kind\":\"PodList\",\"apiVersion\":\"v1\",\"metadata\":{},"
                           "\"items\":[{\"metadata\":{\"name\":\"a\",\"namespace\":\"ml\"}}]}";
static const struct cma_fake_answer KUBE[] = {
    {.path = "/api/v1/namespaces/ml/pods", .status = 200, .body = PODS}};
static const struct api_fixture_spec SPEC = {.config = CONFIG,
                                             .series = SERIES,
                                             .n_series = 1,
                                             .replies = REPLIES,
                                             .n_replies = 1,
                                             .kube = KUBE,
                                             .n_kube = 1};

struct state {
    struct api_fixture *fx;
    struct cma_metrics *m;
};

static int setup(void **state)
{
    struct state *s = calloc(1, sizeof(*s));
    assert_non_null(s);
    s->fx = cma_test_api_fixture_new(&SPEC);
    struct cma_err err;
    cma_err_clear(&err);
    assert_int_equal(cma_metrics_new(&s->m, &err), CMA_OK);
    cma_app_register_metrics(&s->fx->app, s->m);
    *state = s;
    return 0;
}

static int teardown(void **state)
{
    struct state *s = *state;
    cma_test_api_fixture_free(s->fx);
    cma_metrics_free(s->m);
    free(s);
    return 0;
}

/* The value of the line of `text` that starts with `head` (the name and its labels, exactly);
 * -1 when there is none. */
static double value_of(const char *text, const char *head)
{
    size_t len = strlen(head);
    for (const char *p = text; p && *p; p = strchr(p, '\n'), p = p ? p + 1 : NULL)
        if (strncmp(p, head, len) == 0 && p[len] == ' ')
            return strtod(p + len + 1, NULL);
    return -1;
}

static void get(struct cma_app *app, const char *target, int status)
{
    struct api_answer a = cma_test_api_request(app, "GET", target);
    if (a.status != status)
        fail_msg("%s: want %d, got %d %s", target, status, a.status, a.text);
    cma_test_api_answer_done(&a);
}

#define REQ(verb, resource, sub, scope, code)                                                      \
    "apiserver_request_total{verb=\"" verb "\",dry_run=\"\",group=\"custom.metrics.k8s.io\","      \
    "version=\"v1beta1\",resource=\"" resource "\",subresource=\"" sub "\",scope=\"" scope "\","   \
    "component=\"apiserver\",code=\"" code "\"}"

static void test_metrics__404_without_a_registry(void **state)
{
    (void)state;
    struct api_fixture *fx = cma_test_api_fixture_new(&SPEC);
    struct api_answer a = cma_test_api_request(&fx->app, "GET", "/metrics");
    assert_int_equal(a.status, 404);
    cma_test_api_answer_done(&a);
    cma_test_api_fixture_free(fx);
}

static void test_metrics__request_counters(void **state)
{
    struct state *s = *state;
    struct cma_app *app = &s->fx->app;
    const char *named = "/apis/custom.metrics.k8s.io/v1beta1/namespaces/ml/pods/a/jobs_queued";
    get(app, named, 200);
    get(app, named, 200);
    get(app, "/apis/custom.metrics.k8s.io/v1beta1/namespaces/ml/pods/%2A/jobs_queued", 200);
    get(app, "/apis/custom.metrics.k8s.io/v1beta1/namespaces/ml/pods/a/no_such_metric", 404);
    struct api_answer a = cma_test_api_request(app, "GET", "/metrics");
    assert_int_equal(a.status, 200);
    assert_non_null(strstr(a.content_type, "text/plain"));
    double got = value_of(a.text, REQ("GET", "pods", "jobs_queued", "resource", "200"));
    if (got != 3) /* two by name, one "*": kube-apiserver counts a "*" name as a name */
        fail_msg("by-name 200: %g in\n%s", got, a.text);
    assert_true(value_of(a.text, REQ("GET", "pods", "no_such_metric", "resource", "404")) == 1);
    assert_non_null(strstr(a.text, "\ncustom_metrics_adapter_build_info{version=\"v" CMA_VERSION));
    /* catalog entries equal what the discovery document lists */
    struct api_answer d = cma_test_api_request(app, "GET", "/apis/custom.metrics.k8s.io/v1beta1");
    size_t n = json_array_size(json_object_get(d.json, "resources"));
    assert_true(n > 0);
    assert_true(value_of(a.text,
                         "custom_metrics_adapter_catalog_entries{group=\"custom.metrics.k8s."
                         "io\"}") == (double)n);
    cma_test_api_answer_done(&d);
    cma_test_api_answer_done(&a);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_metrics__404_without_a_registry),
        cmocka_unit_test_setup_teardown(test_metrics__request_counters, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
