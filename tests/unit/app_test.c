/* app_test.c: the event thread's attempt (api/app.c, cma_app_try_inline) against the worker path
 * (cma_app_handle), with delegated authorization through a fake kube-apiserver that answers
 * SubjectAccessReviews and counts them. A discovery document whose SubjectAccessReview answer is
 * not cached is declined (false: the response untouched, no SubjectAccessReview sent, /metrics
 * unchanged); once the worker path has cached it, the same request is answered inline with the
 * same status and body, and the request and authentication counters move exactly as for a
 * worker's answer; a cached denial is the same 403 Status inline; a data route (a metric) is
 * never answered inline, even with its authorization cached; /version, the group list, a 405
 * and an unknown path are; without auth (--insecure-disable-auth) discovery is inline at once. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "../../src/clients/internal.h"
#include "cma/app.h"
#include "cma/auth.h"
#include "cma/kube.h"
#include "cma/metrics.h"
#include "cma/server.h"
#include "api_fixture.h"

static const char CONFIG[] =
    "rules:\n"
    "- seriesQuery: '{__name__=~\"^app_.*\",namespace!=\"\",pod!=\"\"}'\n"
    "  resources: {overrides: {namespace: {resource: namespace}, pod: {resource: pod}}}\n"
    "  metricsQuery: max(<<.Series>>{<<.LabelMatchers>>}) by (<<.GroupBy>>)\n";

static const char *const LOAD[] = {"app_load{namespace=ml,pod=a}"};
static const struct fake_series SERIES[] = {
    {"{__name__=~\"^app_.*\",namespace!=\"\",pod!=\"\"}", LOAD, 1}};
static const struct api_reply REPLIES[] = {
    {"app_load",
     "{\"status\":\"success\",\"data\":{\"resultType\":\"vector\",\"result\":[{\"metric\":{"
     "\"namespace\":\"ml\",\"pod\":\"a\"},\"value\":[@NOW@,\"1\"]}]}}"}};
static const struct api_fixture_spec SPEC = {
    .config = CONFIG, .series = SERIES, .n_series = 1, .replies = REPLIES, .n_replies = 1};

#define DOC "/apis/custom.metrics.k8s.io/v1beta1"
#define METRIC DOC "/namespaces/ml/pods/a/app_load"

static const char SAR_ALLOWED[] = "{\"kind\":\"SubjectAccessReview\",\"apiVersion\":"
                                  "\"authorization.k8s.io/v1\",\"status\":{\"allowed\":true}}";
static const char SAR_DENIED[] =
    "{\"kind\":\"SubjectAccessReview\",\"apiVersion\":\"authorization.k8s.io/v1\","
    "\"status\":{\"allowed\":false,\"reason\":\"no RBAC policy matched\"}}";

struct world {
    struct api_fixture *fx;
    struct cma_fake_http *kube_http; /* the SubjectAccessReview webhook */
    struct cma_kube *kube;
    struct cma_metrics *metrics;
    struct cma_auth *auth;
    bool deny; /* what the webhook answers */
};

static void sar_answer(void *ctx, const struct cma_fake_request *req, struct cma_fake_answer *ans)
{
    const struct world *w = ctx;
    if (strcmp(req->path, "/apis/authorization.k8s.io/v1/subjectaccessreviews") != 0)
        return; /* 404 */
    ans->status = 201;
    ans->content_type = "application/json";
    ans->body = w->deny ? SAR_DENIED : SAR_ALLOWED;
}

static int world_setup(void **state)
{
    struct world *w = calloc(1, sizeof(*w));
    assert_non_null(w);
    w->fx = cma_test_api_fixture_new(&SPEC);
    w->kube_http = cma_fake_http_start_fn(sar_answer, w);
    assert_non_null(w->kube_http);
    char *url = cma_fake_http_url(w->kube_http, "");
    assert_non_null(url);
    struct cma_kube_conn conn = {.server = url, .token = "t"};
    struct cma_err err;
    cma_err_clear(&err);
    assert_int_equal(cma_kube_new_from_conn(&conn, 5000, &w->kube, &err), CMA_OK);
    free(url);
    assert_int_equal(cma_metrics_new(&w->metrics, NULL), CMA_OK);
    static char *allow[] = {"/healthz", "/readyz", "/livez"};
    struct cma_auth_options o = {.skip_lookup = true,
                                 .authz_kube = w->kube,
                                 .authorized_ttl_ms = 60000,
                                 .unauthorized_ttl_ms = 60000,
                                 .token_cache_ttl_ms = 60000,
                                 .always_allow_paths = allow,
                                 .n_always_allow_paths = 3,
                                 .metrics = w->metrics};
    assert_int_equal(cma_auth_new(&o, &w->auth, &err), CMA_OK);
    w->fx->app.auth = w->auth;
    cma_app_register_metrics(&w->fx->app, w->metrics);
    *state = w;
    return 0;
}

static int world_teardown(void **state)
{
    struct world *w = *state;
    cma_test_api_fixture_free(w->fx);
    cma_auth_free(w->auth);
    cma_kube_free(w->kube);
    cma_fake_http_stop(w->kube_http);
    cma_metrics_free(w->metrics);
    free(w);
    return 0;
}

/* One answer: through the worker path (cma_app_handle) or the event thread's attempt. */
struct answer {
    bool inline_answered;
    int status;
    char *body;
};

static struct answer run(struct world *w, bool inline_attempt, const char *method, const char *path)
{
    struct cma_request req = {.method = method, .path = path, .start_mono_ms = 0};
    struct cma_response resp = {.status = 200, .content_type = "application/json"};
    cma_buf_init(&resp.body, 1 << 20);
    struct answer a = {.inline_answered = true};
    if (inline_attempt)
        a.inline_answered = cma_app_try_inline(&w->fx->app, &req, &resp);
    else
        cma_app_handle(&w->fx->app, &req, &resp);
    a.status = resp.status;
    a.body = strdup(cma_buf_str(&resp.body));
    assert_non_null(a.body);
    cma_buf_done(&resp.body);
    return a;
}

static char *metrics_text(struct world *w)
{
    struct cma_buf out;
    cma_buf_init(&out, 0);
    assert_int_equal(cma_metrics_write(w->metrics, &out), CMA_OK);
    char *text = cma_buf_take(&out);
    assert_non_null(text);
    return text;
}

/* The value of the exposition line that starts with `series` (name and labels), -1 if none. */
static double metric_line(const char *text, const char *series)
{
    size_t n = strlen(series);
    for (const char *p = text; p && *p; p = strchr(p, '\n') ? strchr(p, '\n') + 1 : NULL) {
        if (strncmp(p, series, n) == 0 && p[n] == ' ')
            return strtod(p + n + 1, NULL);
    }
    return -1;
}

#define AUTHN_ANON                                                                                 \
    "custom_metrics_adapter_authentication_attempts_total{method=\"anonymous\",result="            \
    "\"success\"}"
#define SAR_HIT                                                                                    \
    "custom_metrics_adapter_auth_cache_requests_total{cache=\"subjectaccessreview\",result="       \
    "\"hit\"}"
#define SAR_MISS                                                                                   \
    "custom_metrics_adapter_auth_cache_requests_total{cache=\"subjectaccessreview\",result="       \
    "\"miss\"}"

static void test_inline__discovery_after_sar_cached(void **state)
{
    struct world *w = *state;
    char *before = metrics_text(w);
    struct answer declined = run(w, true, "GET", DOC);
    assert_false(declined.inline_answered);
    assert_int_equal(declined.status, 200); /* untouched */
    assert_string_equal(declined.body, "");
    assert_int_equal(cma_fake_http_count(w->kube_http), 0); /* no webhook call */
    char *after = metrics_text(w);
    assert_string_equal(before, after); /* nothing counted */

    struct answer worker = run(w, false, "GET", DOC);
    assert_int_equal(worker.status, 200);
    assert_non_null(strstr(worker.body, "\"APIResourceList\""));
    assert_non_null(strstr(worker.body, "pods/app_load"));
    assert_int_equal(cma_fake_http_count(w->kube_http), 1);
    char *m1 = metrics_text(w);
    assert_true(metric_line(m1, AUTHN_ANON) == 1);
    assert_true(metric_line(m1, SAR_MISS) == 1);

    struct answer inl = run(w, true, "GET", DOC);
    assert_true(inl.inline_answered);
    assert_int_equal(inl.status, worker.status);
    assert_string_equal(inl.body, worker.body);
    assert_int_equal(cma_fake_http_count(w->kube_http), 1); /* the cached answer */
    char *m2 = metrics_text(w);
    assert_true(metric_line(m2, AUTHN_ANON) == 2);
    assert_true(metric_line(m2, SAR_HIT) == 1);
    assert_true(metric_line(m2, SAR_MISS) == 1);
    assert_non_null(strstr(m2, "apiserver_request_total"));
    free(before);
    free(after);
    free(m1);
    free(m2);
    free(declined.body);
    free(worker.body);
    free(inl.body);
}

static void test_inline__data_route_never_inline(void **state)
{
    struct world *w = *state;
    struct answer worker = run(w, false, "GET", METRIC); /* caches its SubjectAccessReview */
    assert_int_equal(worker.status, 200);
    size_t sars = cma_fake_http_count(w->kube_http);
    char *before = metrics_text(w);
    struct answer declined = run(w, true, "GET", METRIC);
    assert_false(declined.inline_answered);
    assert_string_equal(declined.body, "");
    assert_int_equal(cma_fake_http_count(w->kube_http), sars);
    char *after = metrics_text(w);
    assert_string_equal(before, after);
    free(before);
    free(after);
    free(worker.body);
    free(declined.body);
}

static void test_inline__cached_denial_same_403(void **state)
{
    struct world *w = *state;
    w->deny = true;
    struct answer worker = run(w, false, "GET", "/version");
    assert_int_equal(worker.status, 403);
    struct answer inl = run(w, true, "GET", "/version");
    assert_true(inl.inline_answered);
    assert_int_equal(inl.status, 403);
    assert_string_equal(inl.body, worker.body);
    assert_non_null(strstr(inl.body, "no RBAC policy matched"));
    assert_int_equal(cma_fake_http_count(w->kube_http), 1);
    free(worker.body);
    free(inl.body);
}

static void test_inline__memory_routes_and_misses(void **state)
{
    struct world *w = *state;
    /* a 405 needs no authorization */
    struct answer post = run(w, true, "POST", DOC);
    assert_true(post.inline_answered);
    assert_int_equal(post.status, 405);
    /* always-allowed health check: anonymous, no webhook */
    struct answer health = run(w, true, "GET", "/healthz");
    assert_true(health.inline_answered);
    assert_int_equal(health.status, 200);
    /* each path is its own SubjectAccessReview: a miss until the worker path asked */
    const char *const paths[] = {"/apis", "/version", "/no/such/path",
                                 "/apis/external.metrics.k8s.io/v1beta1"};
    for (size_t i = 0; i < sizeof(paths) / sizeof(paths[0]); i++) {
        struct answer miss = run(w, true, "GET", paths[i]);
        assert_false(miss.inline_answered);
        struct answer worker = run(w, false, "GET", paths[i]);
        struct answer hit = run(w, true, "GET", paths[i]);
        assert_true(hit.inline_answered);
        assert_int_equal(hit.status, worker.status);
        assert_string_equal(hit.body, worker.body);
        free(miss.body);
        free(worker.body);
        free(hit.body);
    }
    assert_int_equal(cma_fake_http_count(w->kube_http), 4);
    free(post.body);
    free(health.body);
}

static void test_inline__no_auth_discovery_at_once(void **state)
{
    struct world *w = *state;
    w->fx->app.auth = NULL; /* --insecure-disable-auth */
    struct answer inl = run(w, true, "GET", DOC);
    assert_true(inl.inline_answered);
    assert_int_equal(inl.status, 200);
    struct answer worker = run(w, false, "GET", DOC);
    assert_string_equal(inl.body, worker.body);
    struct answer data = run(w, true, "GET", METRIC);
    assert_false(data.inline_answered);
    assert_int_equal(cma_fake_http_count(w->kube_http), 0);
    free(inl.body);
    free(worker.body);
    free(data.body);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_inline__discovery_after_sar_cached, world_setup,
                                        world_teardown),
        cmocka_unit_test_setup_teardown(test_inline__data_route_never_inline, world_setup,
                                        world_teardown),
        cmocka_unit_test_setup_teardown(test_inline__cached_denial_same_403, world_setup,
                                        world_teardown),
        cmocka_unit_test_setup_teardown(test_inline__memory_routes_and_misses, world_setup,
                                        world_teardown),
        cmocka_unit_test_setup_teardown(test_inline__no_auth_discovery_at_once, world_setup,
                                        world_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
