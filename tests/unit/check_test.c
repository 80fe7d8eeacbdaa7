/* check_test.c: the `check` subcommand (src/api/check.c) against the fake HTTP server standing in
 * for kube-apiserver, answering with the recorded APIService objects (Available and not,
 * ../shared/fixtures/kube-apiserver/apiservice-*.json) and the recorded discovery document of
 * custom.metrics.k8s.io/v1beta1; the client comes from a kubeconfig written here, as a person
 * would run it (--kubeconfig). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "cma/check.h"
#include "fakehttp.h"

#define APISVC "/apis/apiregistration.k8s.io/v1/apiservices/"

struct run {
    int rc;
    char *out;
    char *err;
};

/* Writes a kubeconfig for the server into a temp file; returns its path (caller frees, unlinks). */
static char *kubeconfig_for(struct cma_fake_http *s)
{
    char *url = cma_fake_http_url(s, "");
    assert_non_null(url);
    char *path = strdup("/tmp/check_test.XXXXXX");
    assert_non_null(path);
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    FILE *f = fdopen(fd, "w");
    assert_non_null(f);
    fprintf(f,
            "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: %s\n"
            "users:\n- name: u\n  user:\n    token: laptop-token\ncontexts:\n- name: x\n"
            "  context:\n    cluster: c\n    user: u\ncurrent-context: x\n",
            url);
    fclose(f);
    free(url);
    return path;
}

/* Runs `check --kubeconfig=<fake> EXTRA...` and captures its output. */
static struct run run_check(struct cma_fake_http *s, const char *extra1, const char *extra2)
{
    char *kc = kubeconfig_for(s);
    char flag[512];
    snprintf(flag, sizeof(flag), "--kubeconfig=%s", kc);
    char *argv[5] = {"check", flag, (char *)extra1, (char *)extra2, NULL};
    int argc = 2 + (extra1 != NULL) + (extra2 != NULL);
    struct run r = {0};
    size_t ol = 0, el = 0;
    FILE *out = open_memstream(&r.out, &ol);
    FILE *err = open_memstream(&r.err, &el);
    assert_non_null(out);
    assert_non_null(err);
    r.rc = cma_check_main(argc, argv, out, err);
    fclose(out);
    fclose(err);
    unlink(kc);
    free(kc);
    return r;
}

static void run_free(struct run *r)
{
    free(r->out);
    free(r->err);
}

static char *fixture(const char *name)
{
    char *body = cma_kube_fixture_read(name, NULL);
    assert_non_null(body);
    return body;
}

static void test_cma_check_main__available_and_listing(void **state)
{
    (void)state;
    char *svc = fixture("apiservice-v1beta1-available.json");
    char *disc = fixture("discovery-apis-custom.metrics.k8s.io-v1beta1.json");
    const struct cma_fake_answer answers[] = {
        {.path = APISVC "v1beta1.custom.metrics.k8s.io", .status = 200, .body = svc},
        {.path = "/apis/custom.metrics.k8s.io/v1beta1", .status = 200, .body = disc},
    };
    struct cma_fake_http *s = cma_fake_http_start(answers, 2);
    assert_non_null(s);
    struct run r = run_check(s, "--apiservice=v1beta1.custom.metrics.k8s.io", NULL);
    assert_int_equal(r.rc, 0);
    assert_non_null(strstr(r.out, "ok   v1beta1.custom.metrics.k8s.io: Available; discovery of "
                                  "custom.metrics.k8s.io/v1beta1 lists 1 resource\n"));
    assert_non_null(strstr(r.out, "check: 1 APIService working\n"));
    /* the kubeconfig's credential went with both requests */
    assert_int_equal(cma_fake_http_count(s), 2);
    assert_true(cma_fake_http_has_header(s, 0, "Authorization: Bearer laptop-token"));
    assert_true(cma_fake_http_has_header(s, 1, "Authorization: Bearer laptop-token"));
    run_free(&r);
    cma_fake_http_stop(s);
    free(svc);
    free(disc);
}

static void test_cma_check_main__not_available_says_why(void **state)
{
    (void)state;
    char *svc = fixture("apiservice-v1beta1-unavailable.json");
    const struct cma_fake_answer answers[] = {
        {.path = APISVC "v1beta1.custom.metrics.k8s.io", .status = 200, .body = svc},
    };
    struct cma_fake_http *s = cma_fake_http_start(answers, 1);
    assert_non_null(s);
    struct run r = run_check(s, "--apiservice", "v1beta1.custom.metrics.k8s.io");
    assert_int_equal(r.rc, 1);
    assert_non_null(strstr(r.out, "FAIL v1beta1.custom.metrics.k8s.io: not Available (status "
                                  "False, FailedDiscoveryCheck): failing or missing response from "
                                  "https://10.213.37.2:6443/apis/custom.metrics.k8s.io/v1beta1"));
    assert_non_null(strstr(r.out, "connection refused\n"));
    assert_non_null(strstr(r.out, "check: 1 of 1 APIServices not working\n"));
    /* no discovery request for an APIService that is not Available */
    assert_int_equal(cma_fake_http_count(s), 1);
    run_free(&r);
    cma_fake_http_stop(s);
    free(svc);
}

static void test_cma_check_main__default_names_skip_unregistered(void **state)
{
    (void)state;
    char *v1 = fixture("apiservice-v1beta1-available.json");
    char *v2 = fixture("apiservice-v1beta2-unavailable.json");
    char *disc = fixture("discovery-apis-custom.metrics.k8s.io-v1beta1.json");
    const struct cma_fake_answer answers[] = {
        {.path = APISVC "v1beta1.custom.metrics.k8s.io", .status = 200, .body = v1},
        {.path = APISVC "v1beta2.custom.metrics.k8s.io", .status = 200, .body = v2},
        {.path = "/apis/custom.metrics.k8s.io/v1beta1", .status = 200, .body = disc},
    };
    struct cma_fake_http *s = cma_fake_http_start(answers, 3);
    assert_non_null(s);
    struct run r = run_check(s, NULL, NULL);
    assert_int_equal(r.rc, 1);
    assert_non_null(strstr(r.out, "ok   v1beta1.custom.metrics.k8s.io: Available"));
    assert_non_null(strstr(r.out, "FAIL v1beta2.custom.metrics.k8s.io: not Available"));
    assert_non_null(strstr(r.out, "skip v1beta1.external.metrics.k8s.io: not registered\n"));
    assert_non_null(strstr(r.out, "skip v1beta1.metrics.k8s.io: not registered\n"));
    assert_non_null(strstr(r.out, "check: 1 of 2 APIServices not working\n"));
    run_free(&r);
    cma_fake_http_stop(s);
    free(v1);
    free(v2);
    free(disc);
}

static void test_cma_check_main__nothing_registered_or_asked_for_missing(void **state)
{
    (void)state;
    const struct cma_fake_answer answers[] = {
        {.path = "/nothing", .status = 200, .body = "{}"},
    };
    struct cma_fake_http *s = cma_fake_http_start(answers, 1);
    assert_non_null(s);
    struct run r = run_check(s, NULL, NULL);
    assert_int_equal(r.rc, 1);
    assert_non_null(
        strstr(r.out, "check: no APIService of custom-metrics-adapter is registered\n"));
    run_free(&r);
    r = run_check(s, "--apiservice=v1beta1.metrics.k8s.io", NULL);
    assert_int_equal(r.rc, 1);
    assert_non_null(strstr(r.out, "FAIL v1beta1.metrics.k8s.io: not registered\n"));
    run_free(&r);
    cma_fake_http_stop(s);
}

static void test_cma_check_main__empty_discovery_and_errors(void **state)
{
    (void)state;
    char *svc = fixture("apiservice-v1beta1-available.json");
    static const char empty[] = "{\"kind\":\"APIResourceList\",\"groupVersion\":"
                                "\"custom.metrics.k8s.io/v1beta1\",\"resources\":[]}";
    static const char forbidden[] =
        "{\"kind\":\"Status\",\"apiVersion\":\"v1\",\"status\":\"Failure\",\"message\":"
        "\"apiservices.apiregistration.k8s.io is "
        "forbidden\",\"reason\":\"Forbidden\",\"code\":403}";
    const struct cma_fake_answer answers[] = {
        {.path = APISVC "v1beta1.custom.metrics.k8s.io", .status = 200, .body = svc},
        {.path = "/apis/custom.metrics.k8s.io/v1beta1", .status = 200, .body = empty},
        {.path = APISVC "v1beta1.external.metrics.k8s.io", .status = 403, .body = forbidden},
    };
    struct cma_fake_http *s = cma_fake_http_start(answers, 3);
    assert_non_null(s);
    struct run r = run_check(s, "--apiservice=v1beta1.custom.metrics.k8s.io",
                             "--apiservice=v1beta1.external.metrics.k8s.io");
    assert_int_equal(r.rc, 1);
    assert_non_null(strstr(r.out, "FAIL v1beta1.custom.metrics.k8s.io: Available, but discovery "
                                  "of custom.metrics.k8s.io/v1beta1 lists no metric"));
    assert_non_null(strstr(r.out, "FAIL v1beta1.external.metrics.k8s.io: GET " APISVC
                                  "v1beta1.external.metrics.k8s.io: HTTP 403: "
                                  "apiservices.apiregistration.k8s.io is forbidden\n"));
    run_free(&r);
    cma_fake_http_stop(s);
    free(svc);
}

static void test_cma_check_main__usage_errors(void **state)
{
    (void)state;
    const struct cma_fake_answer answers[] = {{.path = "/x", .status = 200, .body = "{}"}};
    struct cma_fake_http *s = cma_fake_http_start(answers, 1);
    assert_non_null(s);
    struct run r = run_check(s, "--timeout=soon", NULL);
    assert_int_equal(r.rc, 2);
    assert_non_null(strstr(r.err, "Error: check: --timeout=soon: unknown flag or bad value\n"));
    run_free(&r);
    r = run_check(s, "--apiservice", NULL);
    assert_int_equal(r.rc, 2);
    assert_non_null(strstr(r.err, "Error: check: --apiservice: needs a value\n"));
    run_free(&r);
    r = run_check(s, "--help", NULL);
    assert_int_equal(r.rc, 0);
    assert_non_null(strstr(r.out, "Usage: custom-metrics-adapter check"));
    run_free(&r);
    assert_int_equal(cma_fake_http_count(s), 0);
    cma_fake_http_stop(s);
    /* a kubeconfig that does not exist: exit 2 naming it */
    char *argv[] = {"check", "--kubeconfig=/nonexistent/kubeconfig", NULL};
    char *out = NULL, *err = NULL;
    size_t ol = 0, el = 0;
    FILE *fo = open_memstream(&out, &ol), *fe = open_memstream(&err, &el);
    assert_int_equal(cma_check_main(2, argv, fo, fe), 2);
    fclose(fo);
    fclose(fe);
    assert_non_null(strstr(err, "/nonexistent/kubeconfig"));
    free(out);
    free(err);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cma_check_main__available_and_listing),
        cmocka_unit_test(test_cma_check_main__not_available_says_why),
        cmocka_unit_test(test_cma_check_main__default_names_skip_unregistered),
        cmocka_unit_test(test_cma_check_main__nothing_registered_or_asked_for_missing),
        cmocka_unit_test(test_cma_check_main__empty_discovery_and_errors),
        cmocka_unit_test(test_cma_check_main__usage_errors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
