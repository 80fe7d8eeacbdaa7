/* api_test.c: the API stage's reply helpers and request gate: the HTTP status always equals the
 * Status body's code (for every error code, and for an error reported without a code), a failure
 * without a message gets its code's meaning, and a selector over the limit is refused with 413
 * before anything else is looked at (the app here has no backend, no kube client and no catalog:
 * any call would crash). Through cma_app_handle with an empty catalog store and no backend:
 * every non-GET method is 405; /apis, /apis/<group>, /apis/<group>/<version> and / list exactly
 * the served groups (404 Status for the others, and "is not served" for their metric paths);
 * discovery answers an empty APIResourceList before the first relist (metrics.k8s.io's static
 * document always); metric requests of every group answer 503 "metric discovery has not
 * completed yet" until then; /version, /openapi/v2 and unrouted paths; the health endpoints
 * (readyz fails its discovery check until a relist ran; ?verbose and per-check subpaths).
 * Bodies are decoded with jansson, independently of the encoder. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <jansson.h>

#include "../../src/api/api_internal.h"
#include "cma/app.h"
#include "cma/catalog.h"
#include "cma/prom.h"
#include "cma/server.h"
#include "api_fixture.h"

static void response_init(struct cma_response *resp)
{
    resp->status = 200;
    resp->content_type = "application/json";
    cma_buf_init(&resp->body, 1 << 20);
}

/* The Status body's code and reason; fails the test when the body is not a Status. */
static int status_code_of(const struct cma_response *resp, char *reason, size_t reason_len)
{
    json_error_t jerr;
    json_t *root = json_loadb(resp->body.ptr, resp->body.len, 0, &jerr);
    if (!root)
        fail_msg("not JSON: %s", cma_buf_str(&resp->body));
    assert_string_equal(json_string_value(json_object_get(root, "kind")), "Status");
    int code = (int)json_integer_value(json_object_get(root, "code"));
    snprintf(reason, reason_len, "%s", json_string_value(json_object_get(root, "reason")));
    json_decref(root);
    return code;
}

static void test_cma_api_reply_error__status_equals_code_for_every_code(void **state)
{
    (void)state;
    for (int c = 1; c < CMA_ERRC__COUNT; c++) {
        struct cma_response resp;
        response_init(&resp);
        struct cma_err err;
        cma_err_clear(&err);
        cma_err_set(&err, (enum cma_errc)c, "failure %d", c);
        cma_api_reply_error(&resp, &err);
        char reason[64];
        assert_int_equal(status_code_of(&resp, reason, sizeof(reason)), resp.status);
        assert_int_equal(resp.status, cma_errc_http_status((enum cma_errc)c));
        assert_string_equal(reason, cma_errc_reason((enum cma_errc)c));
        cma_buf_done(&resp.body);
    }
}

static void test_cma_api_reply_error__no_code_is_500_in_both(void **state)
{
    (void)state;
    struct cma_response resp;
    response_init(&resp);
    struct cma_err err;
    cma_err_clear(&err); /* a callee that failed without saying why */
    cma_api_reply_error(&resp, &err);
    char reason[64];
    assert_int_equal(resp.status, 500);
    assert_int_equal(status_code_of(&resp, reason, sizeof(reason)), 500);
    assert_string_equal(reason, "InternalError");
    assert_non_null(strstr(cma_buf_str(&resp.body), "without a cause"));
    cma_buf_clear(&resp.body);
    cma_api_reply_error(&resp, NULL);
    assert_int_equal(resp.status, 500);
    assert_int_equal(status_code_of(&resp, reason, sizeof(reason)), 500);
    cma_buf_done(&resp.body);
}

static void test_cma_api_fail__code_without_message(void **state)
{
    (void)state;
    struct cma_request req = {.method = "GET", .path = "/apis/x"};
    struct cma_response resp;
    response_init(&resp);
    struct cma_err err;
    cma_err_clear(&err);
    cma_api_fail(&resp, &req, CMA_ERR_TOO_LARGE, &err);
    char reason[64];
    assert_int_equal(resp.status, 413);
    assert_int_equal(status_code_of(&resp, reason, sizeof(reason)), 413);
    assert_int_equal(err.code, CMA_ERR_TOO_LARGE);
    assert_non_null(strstr(err.msg, cma_errc_meaning(CMA_ERR_TOO_LARGE)));
    /* neither a code nor a message: 500 */
    cma_err_clear(&err);
    cma_buf_clear(&resp.body);
    cma_api_fail(&resp, &req, CMA_OK, &err);
    assert_int_equal(resp.status, 500);
    assert_int_equal(status_code_of(&resp, reason, sizeof(reason)), 500);
    /* an error that says why keeps its message */
    cma_err_clear(&err);
    cma_err_set(&err, CMA_ERR_BACKEND_TIMEOUT, "prometheus did not answer within 10s");
    cma_buf_clear(&resp.body);
    cma_api_fail(&resp, &req, CMA_ERR_BACKEND_TIMEOUT, &err);
    assert_int_equal(resp.status, 504);
    assert_non_null(strstr(cma_buf_str(&resp.body), "prometheus did not answer within 10s"));
    cma_buf_done(&resp.body);
}

static void test_cma_app_handle__selector_over_limit_is_413_first(void **state)
{
    (void)state;
    static const char *const paths[] = {
        "/apis/custom.metrics.k8s.io/v1beta1/namespaces/ml/pods/%2A/m",
        "/apis/custom.metrics.k8s.io/v1beta2/namespaces/ml/metrics/m",
        "/apis/external.metrics.k8s.io/v1beta1/namespaces/ml/m",
        "/apis/metrics.k8s.io/v1beta1/namespaces/ml/pods",
        "/apis/metrics.k8s.io/v1beta1/nodes/n1",
    };
    static const char *const params[] = {"labelSelector", "metricLabelSelector", "fieldSelector"};
    char *big = malloc(CMA_API_MAX_SELECTOR_BYTES + 2);
    assert_non_null(big);
    memset(big, 'a', CMA_API_MAX_SELECTOR_BYTES + 1);
    big[CMA_API_MAX_SELECTOR_BYTES + 1] = '\0';
    struct cma_app app = {0}; /* no backend, no kube client, no catalog store */
    for (size_t p = 0; p < sizeof(paths) / sizeof(paths[0]); p++) {
        for (size_t q = 0; q < sizeof(params) / sizeof(params[0]); q++) {
            struct cma_kv kv[] = {{"other", "x"}, {(char *)params[q], big}};
            struct cma_request req = {.method = "GET", .path = paths[p], .query = kv, .n_query = 2};
            struct cma_response resp;
            response_init(&resp);
            cma_app_handle(&app, &req, &resp);
            char reason[64];
            assert_int_equal(resp.status, 413);
            assert_int_equal(status_code_of(&resp, reason, sizeof(reason)), 413);
            char want[128];
            snprintf(want, sizeof(want), "%s is %zu bytes, over the limit of %zu bytes", params[q],
                     CMA_API_MAX_SELECTOR_BYTES + 1, CMA_API_MAX_SELECTOR_BYTES);
            if (!strstr(cma_buf_str(&resp.body), want))
                fail_msg("%s: %s", paths[p], cma_buf_str(&resp.body));
            cma_buf_done(&resp.body);
        }
    }
    free(big);
}

static void test_cma_api_view_value__binary_search(void **state)
{
    (void)state;
    const struct cma_label_view v[] = {
        {"a", 1, "1", 1}, {"namespace", 9, "ml", 2}, {"pod", 3, "p", 1}, {"z", 1, "", 0}};
    assert_string_equal(cma_api_view_value(v, 4, "pod"), "p");
    assert_string_equal(cma_api_view_value(v, 4, "a"), "1");
    assert_string_equal(cma_api_view_value(v, 4, "z"), "");
    assert_null(cma_api_view_value(v, 4, "node"));
    assert_null(cma_api_view_value(v, 0, "a"));
}

/* ---- cma_app_handle with an empty catalog store (before the first relist), no backend ---- */

struct app_fixture {
    struct cma_catalog_store *store;
    struct cma_app app;
};

static int app_setup(void **state)
{
    struct app_fixture *fx = calloc(1, sizeof(*fx));
    assert_non_null(fx);
    assert_int_equal(cma_catalog_store_new(&fx->store), CMA_OK);
    fx->app.store = fx->store; /* empty: no relist has published a catalog */
    fx->app.serve_custom = fx->app.serve_external = fx->app.serve_resource = true;
    *state = fx;
    return 0;
}

static int app_teardown(void **state)
{
    struct app_fixture *fx = *state;
    cma_catalog_store_free(fx->store);
    free(fx);
    return 0;
}

/* The group names of /apis, space-separated, in order. */
static void apis_groups(struct cma_app *app, char *out, size_t out_len)
{
    struct api_answer a = cma_test_api_request(app, "GET", "/apis");
    assert_int_equal(a.status, 200);
    assert_non_null(a.json);
    assert_string_equal(cma_test_api_str(a.json, "kind"), "APIGroupList");
    out[0] = '\0';
    json_t *g;
    size_t i;
    json_array_foreach(json_object_get(a.json, "groups"), i, g)
    {
        size_t used = strlen(out);
        snprintf(out + used, out_len - used, "%s%s", i ? " " : "", cma_test_api_str(g, "name"));
    }
    cma_test_api_answer_done(&a);
}

static void test_cma_app_handle__methods_other_than_get_and_head_are_405(void **state)
{
    struct app_fixture *fx = *state;
    static const char *const methods[] = {"POST", "PUT", "DELETE", "PATCH", "OPTIONS"};
    for (size_t i = 0; i < sizeof(methods) / sizeof(methods[0]); i++)
        cma_test_api_expect_status(
            &fx->app, methods[i], "/apis/custom.metrics.k8s.io/v1beta1", 405,
            "the server does not allow this method on the requested resource");
    struct api_answer a = cma_test_api_request(&fx->app, "HEAD", "/apis");
    assert_int_equal(a.status, 200);
    cma_test_api_answer_done(&a);
}

static void test_cma_app_handle__served_groups_only(void **state)
{
    struct app_fixture *fx = *state;
    char groups[256];
    apis_groups(&fx->app, groups, sizeof(groups));
    assert_string_equal(groups, "custom.metrics.k8s.io external.metrics.k8s.io metrics.k8s.io");
    fx->app.serve_external = false;
    apis_groups(&fx->app, groups, sizeof(groups));
    assert_string_equal(groups, "custom.metrics.k8s.io metrics.k8s.io");
    cma_test_api_expect_status(&fx->app, "GET", "/apis/external.metrics.k8s.io", 404,
                               "could not find the requested resource");
    cma_test_api_expect_status(&fx->app, "GET", "/apis/external.metrics.k8s.io/v1beta1", 404,
                               "could not find the requested resource");
    cma_test_api_expect_status(&fx->app, "GET",
                               "/apis/external.metrics.k8s.io/v1beta1/namespaces/ml/m", 404,
                               "external.metrics.k8s.io is not served");
    fx->app.serve_custom = false;
    fx->app.serve_resource = false;
    apis_groups(&fx->app, groups, sizeof(groups));
    assert_string_equal(groups, "");
    cma_test_api_expect_status(&fx->app, "GET",
                               "/apis/custom.metrics.k8s.io/v1beta2/namespaces/ml/metrics/m", 404,
                               "custom.metrics.k8s.io is not served");
    cma_test_api_expect_status(&fx->app, "GET", "/apis/metrics.k8s.io/v1beta1/nodes", 404,
                               "metrics.k8s.io is not served");
    /* / lists /apis and the health and version paths, no group */
    struct api_answer a = cma_test_api_request(&fx->app, "GET", "/");
    assert_int_equal(a.status, 200);
    char *paths = json_dumps(json_object_get(a.json, "paths"), JSON_COMPACT);
    assert_string_equal(paths, "[\"/apis\",\"/healthz\",\"/livez\",\"/readyz\",\"/version\"]");
    free(paths);
    cma_test_api_answer_done(&a);
    fx->app.serve_custom = fx->app.serve_external = fx->app.serve_resource = true;
    a = cma_test_api_request(&fx->app, "GET", "/");
    assert_non_null(strstr(a.text, "\"/apis/custom.metrics.k8s.io/v1beta2\""));
    assert_non_null(strstr(a.text, "\"/apis/metrics.k8s.io/v1beta1\""));
    cma_test_api_answer_done(&a);
}

static void test_cma_app_handle__discovery_before_the_first_relist(void **state)
{
    struct app_fixture *fx = *state;
    /* custom and external: an empty list, never an error (the aggregator needs 2xx fast) */
    static const char *const gvs[] = {"custom.metrics.k8s.io/v1beta1",
                                      "custom.metrics.k8s.io/v1beta2",
                                      "external.metrics.k8s.io/v1beta1"};
    for (size_t i = 0; i < 3; i++) {
        char path[128];
        snprintf(path, sizeof(path), "/apis/%s", gvs[i]);
        struct api_answer a = cma_test_api_request(&fx->app, "GET", path);
        assert_int_equal(a.status, 200);
        assert_string_equal(cma_test_api_str(a.json, "kind"), "APIResourceList");
        assert_string_equal(cma_test_api_str(a.json, "groupVersion"), gvs[i]);
        assert_int_equal(json_array_size(json_object_get(a.json, "resources")), 0);
        cma_test_api_answer_done(&a);
    }
    cma_test_api_expect_status(&fx->app, "GET", "/apis/custom.metrics.k8s.io/v1beta3", 404,
                               "could not find the requested resource");
    /* metrics.k8s.io's document is static: nodes and pods */
    struct api_answer a = cma_test_api_request(&fx->app, "GET", "/apis/metrics.k8s.io/v1beta1");
    assert_int_equal(a.status, 200);
    json_t *res = json_object_get(a.json, "resources");
    assert_int_equal(json_array_size(res), 2);
    assert_string_equal(cma_test_api_str(json_array_get(res, 0), "name"), "nodes");
    assert_string_equal(cma_test_api_str(json_array_get(res, 1), "kind"), "PodMetrics");
    cma_test_api_answer_done(&a);
    a = cma_test_api_request(&fx->app, "GET", "/apis/custom.metrics.k8s.io");
    assert_string_equal(cma_test_api_str(a.json, "kind"), "APIGroup");
    assert_int_equal(json_array_size(json_object_get(a.json, "versions")), 2);
    cma_test_api_answer_done(&a);
}

static void test_cma_app_handle__metrics_wait_for_the_first_catalog(void **state)
{
    struct app_fixture *fx = *state;
    static const char *const paths[] = {
        "/apis/custom.metrics.k8s.io/v1beta1/namespaces/ml/pods/%2A/m",
        "/apis/custom.metrics.k8s.io/v1beta2/namespaces/ml/metrics/m",
        "/apis/custom.metrics.k8s.io/v1beta1/nodes/n1/m",
        "/apis/external.metrics.k8s.io/v1beta1/namespaces/ml/m",
        "/apis/metrics.k8s.io/v1beta1/namespaces/ml/pods",
        "/apis/metrics.k8s.io/v1beta1/nodes/n1",
    };
    for (size_t i = 0; i < sizeof(paths) / sizeof(paths[0]); i++)
        cma_test_api_expect_status(&fx->app, "GET", paths[i], 503,
                                   "metric discovery has not completed yet; try again shortly");
}

static void test_cma_app_handle__version_openapi_and_unrouted(void **state)
{
    struct app_fixture *fx = *state;
    struct api_answer a = cma_test_api_request(&fx->app, "GET", "/version");
    assert_int_equal(a.status, 200);
    assert_string_equal(cma_test_api_str(a.json, "gitVersion"), "v" CMA_VERSION);
    assert_non_null(json_object_get(a.json, "platform"));
    cma_test_api_answer_done(&a);
    cma_test_api_expect_status(&fx->app, "GET", "/openapi/v2", 404,
                               "does not serve an OpenAPI document");
    cma_test_api_expect_status(&fx->app, "GET", "/openapi/v3", 404,
                               "does not serve an OpenAPI document");
    cma_test_api_expect_status(&fx->app, "GET", "/no/such/path", 404,
                               "could not find the requested resource");
    cma_test_api_expect_status(&fx->app, "GET",
                               "/apis/custom.metrics.k8s.io/v1beta1/no/such/path/at/all", 404,
                               "could not find the requested resource");
}

static void test_cma_app_handle__health(void **state)
{
    struct app_fixture *fx = *state;
    struct api_answer a = cma_test_api_request(&fx->app, "GET", "/healthz");
    assert_int_equal(a.status, 200);
    assert_string_equal(a.text, "ok");
    assert_string_equal(a.content_type, "text/plain; charset=utf-8");
    cma_test_api_answer_done(&a);
    /* no discovery has run: readyz fails its discovery check, livez does not have it */
    a = cma_test_api_request(&fx->app, "GET", "/readyz");
    assert_int_equal(a.status, 500);
    assert_non_null(strstr(a.text, "[-]metrics-discovery failed: reason withheld\n"));
    assert_non_null(strstr(a.text, "readyz check failed"));
    cma_test_api_answer_done(&a);
    a = cma_test_api_request(&fx->app, "GET", "/livez");
    assert_int_equal(a.status, 200);
    cma_test_api_answer_done(&a);
    a = cma_test_api_request(&fx->app, "GET", "/readyz/ping");
    assert_int_equal(a.status, 200);
    assert_string_equal(a.text, "ok");
    cma_test_api_answer_done(&a);
    a = cma_test_api_request(&fx->app, "GET", "/readyz/metrics-discovery");
    assert_int_equal(a.status, 500);
    cma_test_api_answer_done(&a);
    a = cma_test_api_request(&fx->app, "GET", "/livez/metrics-discovery");
    assert_int_equal(a.status, 404);
    cma_test_api_answer_done(&a);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cma_api_reply_error__status_equals_code_for_every_code),
        cmocka_unit_test(test_cma_api_reply_error__no_code_is_500_in_both),
        cmocka_unit_test(test_cma_api_fail__code_without_message),
        cmocka_unit_test(test_cma_app_handle__selector_over_limit_is_413_first),
        cmocka_unit_test(test_cma_api_view_value__binary_search),
        cmocka_unit_test_setup_teardown(
            test_cma_app_handle__methods_other_than_get_and_head_are_405, app_setup, app_teardown),
        cmocka_unit_test_setup_teardown(test_cma_app_handle__served_groups_only, app_setup,
                                        app_teardown),
        cmocka_unit_test_setup_teardown(test_cma_app_handle__discovery_before_the_first_relist,
                                        app_setup, app_teardown),
        cmocka_unit_test_setup_teardown(test_cma_app_handle__metrics_wait_for_the_first_catalog,
                                        app_setup, app_teardown),
        cmocka_unit_test_setup_teardown(test_cma_app_handle__version_openapi_and_unrouted,
                                        app_setup, app_teardown),
        cmocka_unit_test_setup_teardown(test_cma_app_handle__health, app_setup, app_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
