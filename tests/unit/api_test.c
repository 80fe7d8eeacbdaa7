/* api_test.c: the API stage's reply helpers and request gate: the HTTP status always equals the
 * Status body's code (for every error code, and for an error reported without a code), a failure
 * without a message gets its code's meaning, and a selector over the limit is refused with 413
 * before anything else is looked at (the app here has no backend, no kube client and no catalog:
 * any call would crash). Bodies are decoded with jansson, independently of the encoder. */
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
#include "cma/prom.h"
#include "cma/server.h"

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

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cma_api_reply_error__status_equals_code_for_every_code),
        cmocka_unit_test(test_cma_api_reply_error__no_code_is_500_in_both),
        cmocka_unit_test(test_cma_api_fail__code_without_message),
        cmocka_unit_test(test_cma_app_handle__selector_over_limit_is_413_first),
        cmocka_unit_test(test_cma_api_view_value__binary_search),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
