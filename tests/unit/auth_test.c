/* auth_test.c: unit tests of the auth stage's pure parts: TokenReview parsing, the group adder,
 * RequestInfo attributes per route, the SubjectAccessReview body, the 403 Status body, and the
 * identity read from requestheader headers (as k8s.io/apiserver's headerrequest package reads
 * them from Go's net/http). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "../../src/auth/auth_internal.h"
#include "cma/auth.h"
#include "cma/server.h"
#include "cma/router.h"

static const char *const REVIEW_OK =
    "{\"apiVersion\":\"authentication.k8s.io/v1\",\"kind\":\"TokenReview\",\"status\":{"
    "\"authenticated\":true,\"user\":{\"username\":\"system:serviceaccount:ml:metrics-client\","
    "\"uid\":\"u1\",\"groups\":[\"system:serviceaccounts\",\"system:authenticated\"],"
    "\"extra\":{\"authentication.kubernetes.io/pod-name\":[\"p1\"]}}}}";

static void test_cma_auth_parse_token_review__authenticated(void **state)
{
    (void)state;
    struct cma_user *u = NULL;
    assert_int_equal(cma_auth_parse_token_review(REVIEW_OK, strlen(REVIEW_OK), &u, NULL), CMA_OK);
    assert_string_equal(u->name, "system:serviceaccount:ml:metrics-client");
    assert_string_equal(u->uid, "u1");
    assert_int_equal(u->n_groups, 2);
    assert_int_equal(u->n_extra, 1);
    assert_string_equal(u->extra[0].values[0], "p1");
    assert_int_equal(cma_user_add_authenticated(u), CMA_OK);
    assert_int_equal(u->n_groups, 2); /* already there */
    cma_user_free(u);
}

static void test_cma_auth_parse_token_review__rejected(void **state)
{
    (void)state;
    const char *body = "{\"status\":{\"authenticated\":false,\"error\":\"invalid bearer token\"}}";
    struct cma_user *u = NULL;
    struct cma_err err;
    cma_err_clear(&err);
    assert_int_equal(cma_auth_parse_token_review(body, strlen(body), &u, &err),
                     CMA_ERR_UNAUTHORIZED);
    assert_null(u);
    assert_non_null(strstr(err.msg, "invalid bearer token"));
    assert_int_equal(cma_auth_parse_token_review("garbage", 7, &u, NULL), CMA_ERR_UNAUTHORIZED);
}

/* sar_key(u, at) as a string (the caller frees). */
static char *sar_key(const struct cma_user *u, const struct cma_authz_attrs *at)
{
    struct cma_buf b;
    cma_buf_init(&b, 0);
    assert_int_equal(cma_authz_sar_key(u, at, &b), CMA_OK);
    char *s = strdup(cma_buf_str(&b));
    cma_buf_done(&b);
    assert_non_null(s);
    return s;
}

/* Reviews that differ in any one field, or only in how strings split between fields, get
 * different cache keys; the same review gets the same key. */
static void test_cma_authz_sar_key__differs_with_every_field(void **state)
{
    (void)state;
    char *g_ab[] = {"a", "b"}, *g_a_b[] = {"ab"}, *vals1[] = {"x", "y"}, *vals2[] = {"xy"};
    struct cma_user_extra e1 = {.key = "scopes", .values = vals1, .n_values = 2};
    struct cma_user_extra e2 = {.key = "scopes", .values = vals2, .n_values = 1};
    struct cma_authz_attrs base = {.resource_request = true,
                                   .verb = "get",
                                   .namespace_ = "ns",
                                   .group = "custom.metrics.k8s.io",
                                   .version = "v1beta1",
                                   .resource = "pods",
                                   .subresource = "m",
                                   .name = "*"};
    struct cma_user u = {
        .name = "alice", .groups = g_ab, .n_groups = 2, .extra = &e1, .n_extra = 1};
    struct cma_authz_attrs at[7];
    struct cma_user us[4];
    for (int i = 0; i < 7; i++)
        at[i] = base;
    at[1].namespace_ = "ns2";
    at[2].resource_request = false;
    at[3].verb = "list";
    at[4].namespace_ = "nsm"; /* "ns" + "m" moved between fields */
    at[4].subresource = "";
    at[5].name = NULL;
    at[6].resource = "podsm";
    at[6].subresource = NULL;
    for (int i = 0; i < 4; i++)
        us[i] = u;
    us[1].groups = g_a_b;
    us[1].n_groups = 1;
    us[2].extra = &e2;
    us[3].uid = "1";
    char *keys[10];
    size_t n = 0;
    for (int i = 0; i < 7; i++)
        keys[n++] = sar_key(&u, &at[i]);
    for (int i = 1; i < 4; i++)
        keys[n++] = sar_key(&us[i], &base);
    for (size_t i = 0; i < n; i++)
        for (size_t j = i + 1; j < n; j++)
            if (strcmp(keys[i], keys[j]) == 0)
                fail_msg("keys %zu and %zu are the same: %s", i, j, keys[i]);
    char *again = sar_key(&u, &base);
    assert_string_equal(again, keys[0]);
    /* the layout: each field length-prefixed ("-" for none), counts tagged g/e/v */
    assert_string_equal(again, "1:R3:get-2:ns21:custom.metrics.k8s.io7:v1beta14:pods1:m1:*5:alice-"
                               "g21:a1:be16:scopesv21:x1:y");
    free(again);
    for (size_t i = 0; i < n; i++)
        free(keys[i]);
}

static void test_cma_authz_sar_body__custom_object(void **state)
{
    (void)state;
    struct cma_route *r = NULL;
    assert_int_equal(
        cma_router_parse(
            "/apis/custom.metrics.k8s.io/v1beta1/namespaces/default/pods/*/http_requests", &r,
            NULL),
        CMA_OK);
    struct cma_authz_attrs at;
    cma_authz_attrs_from_route("/x", r, &at);
    char *groups[] = {"g1", "system:authenticated"};
    struct cma_user u = {.name = "alice", .groups = groups, .n_groups = 2};
    struct cma_buf b;
    cma_buf_init(&b, 0);
    assert_int_equal(cma_authz_sar_body(&u, &at, &b), CMA_OK);
    const char *s = cma_buf_str(&b);
    assert_non_null(
        strstr(s, "\"resourceAttributes\":{\"namespace\":\"default\",\"verb\":\"get\","
                  "\"group\":\"custom.metrics.k8s.io\",\"version\":\"v1beta1\","
                  "\"resource\":\"pods\",\"subresource\":\"http_requests\",\"name\":\"*\"}"));
    assert_non_null(strstr(s, "\"user\":\"alice\",\"groups\":[\"g1\",\"system:authenticated\"]"));
    cma_buf_clear(&b);
    assert_int_equal(cma_authz_forbidden_body(&u, &at, NULL, &b), CMA_OK);
    assert_non_null(strstr(cma_buf_str(&b),
                           "pods.custom.metrics.k8s.io \\\"*\\\" is forbidden: User \\\"alice\\\" "
                           "cannot get resource \\\"pods/http_requests\\\" in API group "
                           "\\\"custom.metrics.k8s.io\\\" in the namespace \\\"default\\\""));
    cma_buf_done(&b);
    cma_route_free(r);
}

static void test_cma_authz_attrs_from_route__external_is_list(void **state)
{
    (void)state;
    struct cma_route *r = NULL;
    assert_int_equal(
        cma_router_parse("/apis/external.metrics.k8s.io/v1beta1/namespaces/ns/queue_len", &r, NULL),
        CMA_OK);
    struct cma_authz_attrs at;
    cma_authz_attrs_from_route("/p", r, &at);
    assert_true(at.resource_request);
    assert_string_equal(at.verb, "list");
    assert_string_equal(at.resource, "queue_len");
    assert_string_equal(at.namespace_, "ns");
    cma_route_free(r);
}

static void test_cma_authz_forbidden_body__non_resource(void **state)
{
    (void)state;
    struct cma_route *r = NULL;
    assert_int_equal(cma_router_parse("/openapi/v2", &r, NULL), CMA_OK);
    struct cma_authz_attrs at;
    cma_authz_attrs_from_route("/openapi/v2", r, &at);
    assert_false(at.resource_request);
    struct cma_user u = {.name = "bob"};
    struct cma_buf b;
    cma_buf_init(&b, 0);
    assert_int_equal(cma_authz_forbidden_body(&u, &at, NULL, &b), CMA_OK);
    assert_non_null(
        strstr(cma_buf_str(&b), "forbidden: User \\\"bob\\\" cannot get path \\\"/openapi/v2\\\""));
    cma_buf_clear(&b);
    assert_int_equal(cma_authz_sar_body(&u, &at, &b), CMA_OK);
    assert_non_null(strstr(
        cma_buf_str(&b), "\"nonResourceAttributes\":{\"path\":\"/openapi/v2\",\"verb\":\"get\"}"));
    cma_buf_done(&b);
    cma_route_free(r);
}

/* Keys that share a long prefix (SubjectAccessReview bodies do): each finds its own value, a
 * replaced key its new one, and a key never put nothing. */
static void test_cma_auth_cache_get__shared_prefix_keys(void **state)
{
    (void)state;
    struct auth_cache c;
    cma_auth_cache_init(&c, 4096);
    char key[160], want[32];
    for (int i = 0; i < 1000; i++) {
        snprintf(key, sizeof key,
                 "{\"apiVersion\":\"authorization.k8s.io/v1\",\"spec\":{\"n\":%d}}", i);
        snprintf(want, sizeof want, "v%d", i);
        cma_auth_cache_put(&c, key, want, INT64_MAX);
    }
    cma_auth_cache_put(&c, "{\"apiVersion\":\"authorization.k8s.io/v1\",\"spec\":{\"n\":7}}",
                       "again", INT64_MAX);
    for (int i = 0; i < 1000; i++) {
        snprintf(key, sizeof key,
                 "{\"apiVersion\":\"authorization.k8s.io/v1\",\"spec\":{\"n\":%d}}", i);
        snprintf(want, sizeof want, "v%d", i);
        char *v = cma_auth_cache_get(&c, key, 0);
        assert_non_null(v);
        assert_string_equal(v, i == 7 ? "again" : want);
        free(v);
    }
    assert_null(cma_auth_cache_get(
        &c, "{\"apiVersion\":\"authorization.k8s.io/v1\",\"spec\":{\"n\":1000}}", 0));
    cma_auth_cache_done(&c);
}

static void test_cma_auth_cache_get__expired_and_replaced(void **state)
{
    (void)state;
    struct auth_cache c;
    cma_auth_cache_init(&c, 2);
    cma_auth_cache_put(&c, "k1", "v1", INT64_MAX);
    cma_auth_cache_put(&c, "k1", "v1b", INT64_MAX);
    char *v = cma_auth_cache_get(&c, "k1", 0);
    assert_string_equal(v, "v1b");
    free(v);
    cma_auth_cache_put(&c, "k2", "v2", 5);
    assert_null(cma_auth_cache_get(&c, "k2", 5)); /* expired at its deadline */
    cma_auth_cache_put(&c, "k3", "v3", INT64_MAX - 1);
    cma_auth_cache_put(&c, "k4", "v4", INT64_MAX - 2); /* full: the oldest deadline goes */
    assert_true(c.n <= 2);
    v = cma_auth_cache_get(&c, "k4", 0);
    assert_string_equal(v, "v4");
    free(v);
    cma_auth_cache_done(&c);
}

static void test_cma_auth_authenticate__no_credentials_is_anonymous(void **state)
{
    (void)state;
    char *paths[] = {"/healthz", "/debug/*"};
    struct cma_auth_options o = {
        .skip_lookup = true, .always_allow_paths = paths, .n_always_allow_paths = 2};
    struct cma_auth *a = NULL;
    assert_int_equal(cma_auth_new(&o, &a, NULL), CMA_OK);
    struct cma_request req = {.method = "GET", .path = "/healthz"};
    struct cma_user *u = NULL;
    assert_int_equal(cma_auth_authenticate(a, &req, &u, NULL), CMA_OK);
    assert_string_equal(u->name, "system:anonymous");
    assert_int_equal(u->n_groups, 1);
    assert_string_equal(u->groups[0], "system:unauthenticated");
    enum cma_authz_decision d = CMA_AUTHZ_DENY;
    struct cma_authz_attrs at = {.verb = "get", .path = "/healthz"};
    assert_int_equal(cma_auth_authorize(a, u, &at, &d, NULL, NULL), CMA_OK);
    assert_int_equal(d, CMA_AUTHZ_ALLOW);
    at.path = "/debug/x";
    d = CMA_AUTHZ_DENY;
    assert_int_equal(cma_auth_authorize(a, u, &at, &d, NULL, NULL), CMA_OK);
    assert_int_equal(d, CMA_AUTHZ_ALLOW);
    /* /healthz/ping is not /healthz; without a SAR client that is an error, never an allow */
    at.path = "/healthz/ping";
    assert_int_not_equal(cma_auth_authorize(a, u, &at, &d, NULL, NULL), CMA_OK);
    cma_user_free(u);
    char *pem = cma_auth_client_ca_pem(a);
    assert_string_equal(pem, "");
    free(pem);
    cma_auth_free(a);
}

static void test_cma_auth_authorize__masters_skip_sar(void **state)
{
    (void)state;
    struct cma_auth_options o = {.skip_lookup = true};
    struct cma_auth *a = NULL;
    assert_int_equal(cma_auth_new(&o, &a, NULL), CMA_OK);
    char *groups[] = {"system:masters"};
    struct cma_user u = {.name = "system:kube-aggregator", .groups = groups, .n_groups = 1};
    struct cma_authz_attrs at = {.resource_request = true, .verb = "get", .resource = "pods"};
    enum cma_authz_decision d = CMA_AUTHZ_DENY;
    assert_int_equal(cma_auth_authorize(a, &u, &at, &d, NULL, NULL), CMA_OK);
    assert_int_equal(d, CMA_AUTHZ_ALLOW);
    cma_auth_free(a);
}

static void test_cma_auth_new__bad_ca_file(void **state)
{
    (void)state;
    struct cma_auth_options o = {.skip_lookup = true, .client_ca_file = "/nonexistent/ca.crt"};
    struct cma_auth *a = NULL;
    struct cma_err err;
    cma_err_clear(&err);
    assert_int_not_equal(cma_auth_new(&o, &a, &err), CMA_OK);
    assert_null(a);
    assert_non_null(strstr(err.msg, "/nonexistent/ca.crt"));
}

/* A request's header lines, for cma_auth_rh_identity. */
struct header_list {
    const char *const (*lines)[2];
    size_t n;
};

static void list_each(void *src, bool (*fn)(void *ctx, const char *name, const char *value),
                      void *ctx)
{
    const struct header_list *l = src;
    for (size_t i = 0; i < l->n; i++)
        if (!fn(ctx, l->lines[i][0], l->lines[i][1]))
            return;
}

static const char *const rh_user[] = {"X-Remote-User", "X-User"};
static const char *const rh_group[] = {"X-Remote-Group", "X-Group"};
static const char *const rh_extra[] = {"X-Remote-Extra-", "X-Remote-Extra-Scope"};
static const struct cma_rh_headers rh_names = {rh_user, 2, rh_group, 2, rh_extra, 2};

static struct cma_user *identity(const char *const (*lines)[2], size_t n)
{
    struct header_list l = {lines, n};
    struct cma_user *u = NULL;
    assert_int_equal(cma_auth_rh_identity(&rh_names, list_each, &l, &u), CMA_OK);
    return u;
}

static void test_cma_auth_rh_identity__as_kube_reads_headers(void **state)
{
    (void)state;
    /* Go trims spaces and tabs around values; http.Header.Get takes a header's first line */
    static const char *const lines[][2] = {
        {"X-User", "second-choice"},
        {"x-remote-user", " \talice \t "},
        {"X-Remote-User", "bob"},
        {"X-Group", "g3"},
        {"X-Remote-Group", " g1 "},
        {"X-Remote-Group", "  "},
        {"x-remote-group", "g2\t"},
        {"X-Remote-Extra-Scopes", " s1 "},
        {"X-Remote-Extra-Scopes", ""},
        {"X-Remote-Extra-Acme.com%2Fproject", "p"},
        {"X-Remote-Extra-Bad%zzEscape", "b"},
    };
    struct cma_user *u = identity(lines, sizeof(lines) / sizeof(lines[0]));
    assert_non_null(u);
    assert_string_equal(u->name, "alice");
    assert_int_equal(u->n_groups, 3); /* header order, then arrival; empty lines dropped */
    assert_string_equal(u->groups[0], "g1");
    assert_string_equal(u->groups[1], "g2");
    assert_string_equal(u->groups[2], "g3");
    /* keys lower-cased then percent-decoded (kept raw when malformed); values kept, empty too;
     * "X-Remote-Extra-Scopes" also matches the second prefix, with key "s" */
    assert_int_equal(u->n_extra, 4);
    assert_string_equal(u->extra[0].key, "scopes");
    assert_int_equal(u->extra[0].n_values, 2);
    assert_string_equal(u->extra[0].values[0], "s1");
    assert_string_equal(u->extra[0].values[1], "");
    assert_string_equal(u->extra[1].key, "acme.com/project");
    assert_string_equal(u->extra[2].key, "bad%zzescape");
    assert_string_equal(u->extra[3].key, "s");
    cma_user_free(u);
}

static void test_cma_auth_rh_identity__first_line_empty_falls_through(void **state)
{
    (void)state;
    /* the first X-Remote-User line is blank once trimmed: Get() gives "", so X-User decides,
     * even though a later X-Remote-User line has a value */
    static const char *const lines[][2] = {
        {"X-Remote-User", "   "}, {"X-Remote-User", "mallory"}, {"X-User", "carol"}};
    struct cma_user *u = identity(lines, 3);
    assert_non_null(u);
    assert_string_equal(u->name, "carol");
    assert_int_equal(u->n_groups, 0);
    cma_user_free(u);
    static const char *const none[][2] = {{"X-Remote-User", "\t"}, {"X-Remote-Group", "g"}};
    assert_null(identity(none, 2));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cma_auth_parse_token_review__authenticated),
        cmocka_unit_test(test_cma_auth_parse_token_review__rejected),
        cmocka_unit_test(test_cma_authz_sar_body__custom_object),
        cmocka_unit_test(test_cma_authz_sar_key__differs_with_every_field),
        cmocka_unit_test(test_cma_authz_attrs_from_route__external_is_list),
        cmocka_unit_test(test_cma_authz_forbidden_body__non_resource),
        cmocka_unit_test(test_cma_auth_cache_get__expired_and_replaced),
        cmocka_unit_test(test_cma_auth_cache_get__shared_prefix_keys),
        cmocka_unit_test(test_cma_auth_authenticate__no_credentials_is_anonymous),
        cmocka_unit_test(test_cma_auth_authorize__masters_skip_sar),
        cmocka_unit_test(test_cma_auth_new__bad_ca_file),
        cmocka_unit_test(test_cma_auth_rh_identity__as_kube_reads_headers),
        cmocka_unit_test(test_cma_auth_rh_identity__first_line_empty_falls_through),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
