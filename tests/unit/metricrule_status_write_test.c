/* metricrule_status_write_test.c: a MetricRule status write (src/clients/metricrule_status_write.c)
 * against the fake HTTP server standing in for kube-apiserver: the request (PATCH, the status
 * subresource's path, application/merge-patch+json, {"status":...}, the bearer token) and what
 * each answer becomes: 200 written, 404 gone, 409 stale, 422/403 an error carrying the API
 * server's message, 429/503 and an unreachable or silent server "unavailable"; names that are not
 * DNS names are refused before anything is sent. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "../../src/clients/internal.h"
#include "cma/kube.h"
#include "cma/metricrule_status_write.h"
#include "fakehttp.h"

#define PATH                                                                                       \
    "/apis/metrics.custom-metrics-adapter.dev/v1alpha1/namespaces/shop/metricrules/q/status"
#define STATUS "{\"conditions\":[],\"metrics\":[\"queue_depth\"],\"observedGeneration\":2}"

static struct cma_kube *kube_for(struct cma_fake_http *srv, int64_t timeout_ms, char **url)
{
    *url = cma_fake_http_url(srv, "");
    assert_non_null(*url);
    struct cma_kube_conn conn = {.server = *url, .token = "t0k"};
    struct cma_kube *k = NULL;
    assert_int_equal(cma_kube_new_from_conn(&conn, timeout_ms, &k, NULL), CMA_OK);
    return k;
}

/* One write against a server answering `status` with `body`; returns the call's code. */
static enum cma_errc write_once(int status, const char *body, enum cma_metricrule_write *ret,
                                struct cma_err *err, struct cma_fake_http **ret_srv)
{
    struct cma_fake_answer a = {.status = status, .body = body};
    struct cma_fake_http *srv = cma_fake_http_start(&a, 1);
    assert_non_null(srv);
    char *url = NULL;
    struct cma_kube *k = kube_for(srv, 5000, &url);
    enum cma_errc rc = cma_metricrule_status_write(k, "shop", "q", STATUS, ret, err);
    cma_kube_free(k);
    free(url);
    *ret_srv = srv;
    return rc;
}

static void test_cma_metricrule_status_write__request(void **state)
{
    (void)state;
    struct cma_fake_http *srv = NULL;
    enum cma_metricrule_write w = CMA_METRICRULE_WRITE_GONE;
    struct cma_err err = {0};
    assert_int_equal(write_once(200, "{\"kind\":\"MetricRule\"}", &w, &err, &srv), CMA_OK);
    assert_int_equal(w, CMA_METRICRULE_WRITE_DONE);
    assert_int_equal(cma_fake_http_count(srv), 1);
    const struct cma_fake_request *r = cma_fake_http_request(srv, 0);
    assert_string_equal(r->method, "PATCH");
    assert_string_equal(r->target, PATH);
    assert_string_equal(r->body, "{\"status\":" STATUS "}");
    assert_true(cma_fake_http_has_header(srv, 0, "Content-Type: application/merge-patch+json"));
    assert_true(cma_fake_http_has_header(srv, 0, "Authorization: Bearer t0k"));
    cma_fake_http_stop(srv);
}

static void test_cma_metricrule_status_write__answers(void **state)
{
    (void)state;
    static const char gone[] =
        "{\"kind\":\"Status\",\"status\":\"Failure\",\"message\":\"metricrules.metrics."
        "custom-metrics-adapter.dev \\\"q\\\" not found\",\"reason\":\"NotFound\",\"code\":404}";
    static const char invalid[] =
        "{\"kind\":\"Status\",\"status\":\"Failure\",\"message\":\"MetricRule.metrics.custom-"
        "metrics-adapter.dev \\\"q\\\" is invalid: status.conditions[0].reason: Invalid value\","
        "\"reason\":\"Invalid\",\"code\":422}";
    static const char forbidden[] =
        "{\"kind\":\"Status\",\"message\":\"metricrules.metrics.custom-metrics-adapter.dev "
        "\\\"q\\\" is forbidden: User cannot patch resource \\\"metricrules/status\\\"\","
        "\"code\":403}";
    struct cma_fake_http *srv = NULL;
    enum cma_metricrule_write w = CMA_METRICRULE_WRITE_DONE;
    struct cma_err err = {0};
    assert_int_equal(write_once(404, gone, &w, &err, &srv), CMA_OK);
    assert_int_equal(w, CMA_METRICRULE_WRITE_GONE);
    cma_fake_http_stop(srv);
    assert_int_equal(write_once(409, "{\"kind\":\"Status\",\"code\":409}", &w, &err, &srv), CMA_OK);
    assert_int_equal(w, CMA_METRICRULE_WRITE_STALE);
    cma_fake_http_stop(srv);
    assert_int_equal(write_once(422, invalid, &w, &err, &srv), CMA_ERR_KUBE_ERROR);
    assert_non_null(strstr(err.msg, "answered 422"));
    assert_non_null(strstr(err.msg, "status.conditions[0].reason: Invalid value"));
    cma_fake_http_stop(srv);
    cma_err_clear(&err);
    assert_int_equal(write_once(403, forbidden, &w, &err, &srv), CMA_ERR_KUBE_ERROR);
    assert_non_null(strstr(err.msg, "cannot patch resource \"metricrules/status\""));
    cma_fake_http_stop(srv);
    cma_err_clear(&err);
    assert_int_equal(write_once(503, "{\"kind\":\"Status\",\"code\":503}", &w, &err, &srv),
                     CMA_ERR_KUBE_UNAVAILABLE);
    cma_fake_http_stop(srv);
    cma_err_clear(&err);
    assert_int_equal(write_once(429, "{\"kind\":\"Status\",\"code\":429}", &w, &err, &srv),
                     CMA_ERR_KUBE_UNAVAILABLE);
    cma_fake_http_stop(srv);
}

static void test_cma_metricrule_status_write__unreachable_and_timeout(void **state)
{
    (void)state;
    int port = cma_loopback_unused_port();
    assert_true(port > 0);
    char url[64];
    snprintf(url, sizeof(url), "http://127.0.0.1:%d", port);
    struct cma_kube_conn conn = {.server = url, .token = "t"};
    struct cma_kube *k = NULL;
    assert_int_equal(cma_kube_new_from_conn(&conn, 5000, &k, NULL), CMA_OK);
    enum cma_metricrule_write w;
    struct cma_err err = {0};
    assert_int_equal(cma_metricrule_status_write(k, "shop", "q", STATUS, &w, &err),
                     CMA_ERR_KUBE_UNAVAILABLE);
    cma_kube_free(k);
    /* a server that does not answer within the client's timeout (the answer is held 10 s; the
     * stop cuts the wait short) */
    struct cma_fake_answer slow = {.status = 200, .body = "{}", .delay_ms = 10000};
    struct cma_fake_http *srv = cma_fake_http_start(&slow, 1);
    assert_non_null(srv);
    char *u = NULL;
    k = kube_for(srv, 300, &u);
    cma_err_clear(&err);
    assert_int_equal(cma_metricrule_status_write(k, "shop", "q", STATUS, &w, &err),
                     CMA_ERR_KUBE_UNAVAILABLE);
    cma_kube_free(k);
    cma_fake_http_stop(srv);
    free(u);
}

static void test_cma_metricrule_status_write__bad_names(void **state)
{
    (void)state;
    struct cma_fake_answer a = {.status = 200, .body = "{}"};
    struct cma_fake_http *srv = cma_fake_http_start(&a, 1);
    assert_non_null(srv);
    char *url = NULL;
    struct cma_kube *k = kube_for(srv, 5000, &url);
    enum cma_metricrule_write w;
    const char *bad[] = {"", "a/b", "Shop", "a?b", "a%2F", "a b"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        assert_int_equal(cma_metricrule_status_write(k, bad[i], "q", STATUS, &w, NULL),
                         CMA_ERR_INTERNAL);
        assert_int_equal(cma_metricrule_status_write(k, "shop", bad[i], STATUS, &w, NULL),
                         CMA_ERR_INTERNAL);
    }
    assert_int_equal(cma_metricrule_status_write(k, "shop", "q", "", &w, NULL), CMA_ERR_INTERNAL);
    assert_int_equal(cma_fake_http_count(srv), 0);
    cma_kube_free(k);
    cma_fake_http_stop(srv);
    free(url);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cma_metricrule_status_write__request),
        cmocka_unit_test(test_cma_metricrule_status_write__answers),
        cmocka_unit_test(test_cma_metricrule_status_write__unreachable_and_timeout),
        cmocka_unit_test(test_cma_metricrule_status_write__bad_names),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
