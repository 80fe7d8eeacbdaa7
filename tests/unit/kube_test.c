/* kube_test.c: the kube-apiserver client's settings (kubeconfig / in-cluster, base64, server
 * checks, tls-server-name's route and Host), cma_kube_list_objects and the watch caches' streamed
 * cma_kube_list_pages against the shared fake HTTP server (fakehttp.h: canned answers in order,
 * request targets recorded), which stands in for kube-apiserver with real recorded bodies
 * (../shared/fixtures/kube-apiserver). The decoders of its answers are tested in
 * kube_decode_test.c; the other requests (discovery, names, watch) in prom_client_test.c. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "../../src/clients/internal.h"
#include "cma/kube.h"
#include "fakehttp.h"

/* ---- base64 ------------------------------------------------------------------------------ */

static void test_cma_clients_base64_decode__cases(void **state)
{
    (void)state;
    static const struct {
        const char *in;
        const char *out; /* NULL = malformed */
    } cases[] = {
        {"", ""},
        {"Zg==", "f"},
        {"Zm8=", "fo"},
        {"Zm9v", "foo"},
        {"Zm9vYmFy", "foobar"},
        {"Zm9v\nYmFy\n", "foobar"},
        {"Zm9vYg", "foob"}, /* unpadded */
        {"Zg=", NULL},
        {"Z", NULL},
        {"Zm9v!", NULL},
        {"Zg==Zg==", NULL},
        {"Zh==", NULL}, /* non-zero leftover bits */
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        unsigned char *out = NULL;
        size_t out_len = 0;
        bool nomem = true;
        bool ok =
            cma_clients_base64_decode(cases[i].in, strlen(cases[i].in), &out, &out_len, &nomem);
        assert_false(nomem);
        if (!cases[i].out) {
            if (ok)
                fail_msg("case %zu \"%s\" should be malformed", i, cases[i].in);
            continue;
        }
        if (!ok)
            fail_msg("case %zu \"%s\" should decode", i, cases[i].in);
        assert_int_equal(out_len, strlen(cases[i].out));
        assert_memory_equal(out, cases[i].out, out_len);
        free(out);
    }
}

/* ---- kubeconfig -------------------------------------------------------------------------- */

static const char kubeconfig_text[] = "apiVersion: v1\n"
                                      "kind: Config\n"
                                      "current-context: prod\n"
                                      "clusters:\n"
                                      "- name: dev\n"
                                      "  cluster:\n"
                                      "    server: https://dev.example:6443\n"
                                      "- name: prod-cluster\n"
                                      "  cluster:\n"
                                      "    server: https://10.0.0.1:6443/\n"
                                      "    certificate-authority: certs/ca.crt\n"
                                      "    tls-server-name: kubernetes.default\n"
                                      "    insecure-skip-tls-verify: false\n"
                                      "contexts:\n"
                                      "- name: dev\n"
                                      "  context: {cluster: dev, user: dev}\n"
                                      "- name: prod\n"
                                      "  context:\n"
                                      "    cluster: prod-cluster\n"
                                      "    user: admin\n"
                                      "    namespace: ml\n"
                                      "users:\n"
                                      "- name: admin\n"
                                      "  user:\n"
                                      "    client-certificate-data: LS0tLS1CRUdJTg==\n"
                                      "    client-key: /abs/admin.key\n"
                                      "    token: static-token\n"
                                      "    tokenFile: tok\n";

static void test_cma_kubeconfig_parse__current_context(void **state)
{
    (void)state;
    struct cma_kube_conn c;
    struct cma_err err;
    cma_err_clear(&err);
    assert_int_equal(cma_kubeconfig_parse("/etc/kube/config", kubeconfig_text,
                                          strlen(kubeconfig_text), &c, &err),
                     CMA_OK);
    assert_string_equal(c.server, "https://10.0.0.1:6443/");
    assert_string_equal(c.ca_file, "/etc/kube/certs/ca.crt");
    assert_null(c.ca_data);
    assert_string_equal(c.tls_server_name, "kubernetes.default");
    assert_false(c.insecure_skip_verify);
    assert_int_equal(c.cert_data_len, 10);
    assert_memory_equal(c.cert_data, "-----BEGIN", 10);
    assert_null(c.cert_file);
    assert_string_equal(c.key_file, "/abs/admin.key");
    assert_string_equal(c.token_file, "/etc/kube/tok"); /* tokenFile wins over token */
    assert_null(c.token);
    assert_null(c.username);
    cma_kube_conn_done(&c);
    assert_null(c.server);
}

static void test_cma_kubeconfig_parse__basic_auth_and_insecure(void **state)
{
    (void)state;
    const char *text = "current-context: c\n"
                       "contexts: [{name: c, context: {cluster: k, user: u}}]\n"
                       "clusters: [{name: k, cluster: {server: 'http://127.0.0.1:8080',"
                       " insecure-skip-tls-verify: true,"
                       " certificate-authority-data: 'Zm9v'}}]\n"
                       "users: [{name: u, user: {username: bob, password: s3cret}}]\n";
    struct cma_kube_conn c;
    assert_int_equal(cma_kubeconfig_parse("config", text, strlen(text), &c, NULL), CMA_OK);
    assert_true(c.insecure_skip_verify);
    assert_string_equal(c.username, "bob");
    assert_string_equal(c.password, "s3cret");
    assert_int_equal(c.ca_data_len, 3);
    assert_memory_equal(c.ca_data, "foo", 3);
    cma_kube_conn_done(&c);
}

struct kubeconfig_bad {
    const char *text;
    const char *msg;
    unsigned line;
};

static void test_cma_kubeconfig_parse__errors_with_positions(void **state)
{
    (void)state;
    static const struct kubeconfig_bad cases[] = {
        {"clusters: []\n", "no current-context", 1},
        {"current-context: x\ncontexts: []\n", "no entry \"x\" in contexts", 1},
        {"current-context: x\n"
         "contexts:\n"
         "- name: x\n"
         "  context: {cluster: k}\n",
         "no entry \"k\" in clusters", 4},
        {"current-context: x\n"
         "contexts: [{name: x, context: {cluster: k, user: u}}]\n"
         "clusters: [{name: k, cluster: {server: 'https://a'}}]\n"
         "users:\n"
         "- name: u\n"
         "  user:\n"
         "    exec: {command: aws}\n",
         "exec credentials, which are not supported", 7},
        {"current-context: x\n"
         "contexts: [{name: x, context: {cluster: k}}]\n"
         "clusters:\n"
         "- name: k\n"
         "  cluster:\n"
         "    server: https://a\n"
         "    certificate-authority-data: '!!notbase64'\n",
         "certificate-authority-data is not valid base64", 7},
        {"current-context: x\n"
         "contexts: [{name: x, context: {cluster: k}}]\n"
         "clusters: [{name: k, cluster: {certificate-authority: ca}}]\n",
         "cluster has no server", 3},
        {"current-context: x\n"
         "contexts: [{name: x, context: {cluster: k}}]\n"
         "clusters: [{name: k, cluster: {server: [a]}}]\n",
         "\"server\" must be a string", 3},
        {"current-context: x\n"
         "contexts: [{name: x, context: {cluster: k}}]\n"
         "clusters: [{name: k, cluster: {server: a, insecure-skip-tls-verify: maybe}}]\n",
         "insecure-skip-tls-verify must be true or false", 3},
        {"current-context: x\n"
         "contexts: [{name: x, context: {cluster: k, user: u}}]\n"
         "clusters: [{name: k, cluster: {server: a}}]\n"
         "users: [{name: u, user: {client-certificate: c.crt}}]\n",
         "client certificate without a key", 4},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        struct cma_kube_conn c;
        struct cma_err err;
        cma_err_clear(&err);
        enum cma_errc rc =
            cma_kubeconfig_parse("kc.yaml", cases[i].text, strlen(cases[i].text), &c, &err);
        if (rc != CMA_ERR_CONFIG_VALUE || !strstr(err.msg, cases[i].msg) ||
            err.line != cases[i].line || strcmp(err.file, "kc.yaml") != 0)
            fail_msg("case %zu: got %s %s:%u \"%s\", want line %u \"%s\"", i, cma_errc_name(rc),
                     err.file, err.line, err.msg, cases[i].line, cases[i].msg);
        assert_null(c.server);
    }
}

static void test_cma_kubeconfig_load__missing_file(void **state)
{
    (void)state;
    struct cma_kube_conn c;
    struct cma_err err;
    cma_err_clear(&err);
    assert_int_equal(cma_kubeconfig_load("/nonexistent/kubeconfig", &c, &err), CMA_ERR_CONFIG_IO);
    struct cma_kube *k = NULL;
    cma_err_clear(&err);
    assert_int_equal(cma_kube_new("/nonexistent/kubeconfig", 0, &k, &err), CMA_ERR_CONFIG_IO);
    assert_null(k);
}

static void test_cma_kubeconfig_in_cluster__env_and_files(void **state)
{
    (void)state;
    char dir[] = "/tmp/cma-kube-test-XXXXXX";
    assert_non_null(mkdtemp(dir));
    char path[256];
    struct cma_kube_conn c;
    struct cma_err err;

    unsetenv("KUBERNETES_SERVICE_HOST");
    cma_err_clear(&err);
    assert_int_equal(cma_kubeconfig_in_cluster(dir, &c, &err), CMA_ERR_FLAG);
    assert_non_null(strstr(err.msg, "KUBERNETES_SERVICE_HOST"));

    setenv("KUBERNETES_SERVICE_HOST", "fd00::1", 1);
    setenv("KUBERNETES_SERVICE_PORT", "443", 1);
    cma_err_clear(&err);
    assert_int_equal(cma_kubeconfig_in_cluster(dir, &c, &err), CMA_ERR_FLAG); /* no token */
    assert_non_null(strstr(err.msg, "service-account token"));

    snprintf(path, sizeof(path), "%s/token", dir);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs("abc\n", f);
    fclose(f);
    cma_err_clear(&err);
    assert_int_equal(cma_kubeconfig_in_cluster(dir, &c, &err), CMA_OK);
    assert_string_equal(c.server, "https://[fd00::1]:443");
    assert_string_equal(c.token_file, path);
    assert_null(c.ca_file); /* no ca.crt in the directory */
    cma_kube_conn_done(&c);

    char ca[256];
    snprintf(ca, sizeof(ca), "%s/ca.crt", dir);
    f = fopen(ca, "w");
    assert_non_null(f);
    fclose(f);
    setenv("KUBERNETES_SERVICE_HOST", "10.96.0.1", 1);
    assert_int_equal(cma_kubeconfig_in_cluster(dir, &c, NULL), CMA_OK);
    assert_string_equal(c.server, "https://10.96.0.1:443");
    assert_string_equal(c.ca_file, ca);
    cma_kube_conn_done(&c);

    unlink(path);
    unlink(ca);
    rmdir(dir);
    unsetenv("KUBERNETES_SERVICE_HOST");
    unsetenv("KUBERNETES_SERVICE_PORT");
}

static void test_cma_kube_new_from_conn__server_checks(void **state)
{
    (void)state;
    struct cma_kube_conn c = {0};
    struct cma_kube *k = NULL;
    struct cma_err err;
    cma_err_clear(&err);
    assert_int_equal(cma_kube_new_from_conn(&c, 0, &k, &err), CMA_ERR_CONFIG_VALUE);
    c.server = "ftp://x";
    cma_err_clear(&err);
    assert_int_equal(cma_kube_new_from_conn(&c, 0, &k, &err), CMA_ERR_CONFIG_VALUE);
    assert_non_null(strstr(err.msg, "want https://"));
    c.server = "https://10.0.0.1:6443//";
    c.tls_server_name = "kubernetes.default";
    assert_int_equal(cma_kube_new_from_conn(&c, 0, &k, NULL), CMA_OK);
    assert_string_equal(cma_kube_server(k), "https://10.0.0.1:6443");
    assert_int_equal(cma_kube_skipped_groups(k), 0);
    cma_kube_free(k);
    cma_kube_free(NULL);
    cma_api_resources_free(NULL);
}

/* ---- LIST objects ------------------------------------------------------------------------ */

/* A kube client for the fake HTTP server (tests/unit/fakehttp.h: canned answers in order,
 * request targets recorded). */
static struct cma_kube *fake_client(const struct cma_fake_http *s)
{
    char *url = cma_fake_http_url(s, "");
    assert_non_null(url);
    struct cma_kube_conn conn = {.server = url, .token = "t"};
    struct cma_kube *k = NULL;
    assert_int_equal(cma_kube_new_from_conn(&conn, 5000, &k, NULL), CMA_OK);
    free(url);
    return k;
}

static const char *target_of(struct cma_fake_http *s, size_t i)
{
    const struct cma_fake_request *r = cma_fake_http_request(s, i);
    assert_non_null(r);
    return r->target;
}

static void test_cma_kube_list_objects__selectors_and_pages(void **state)
{
    (void)state;
    size_t l1, l2;
    char *page1 = cma_kube_fixture_read("pods-all-bert-limit2-page1.json", &l1);
    assert_non_null(page1);
    char *page2 = cma_kube_fixture_read("pods-all-bert-limit2-page2.json", &l2);
    assert_non_null(page2);
    const struct cma_fake_answer answers[] = {{.status = 200, .body = page1},
                                              {.status = 200, .body = page2}};
    struct cma_fake_http *s = cma_fake_http_start(answers, 2);
    assert_non_null(s);
    struct cma_kube *k = fake_client(s);
    struct cma_kube_object *objs = NULL;
    size_t n = 0;
    struct cma_err err;
    cma_err_clear(&err);
    assert_int_equal(cma_kube_list_objects(k, "", "v1", "pods", NULL, "app in (bert)",
                                           "status.phase=Running,metadata.namespace=ml", &objs, &n,
                                           &err),
                     CMA_OK);
    assert_int_equal(n, 3);
    assert_string_equal(objs[1].name, "bert-1");
    assert_string_equal(objs[2].phase, "Running");
    assert_int_equal(cma_fake_http_count(s), 2);
    assert_string_equal(target_of(s, 0),
                        "/api/v1/pods?labelSelector=app+in+%28bert%29&fieldSelector="
                        "status.phase%3DRunning%2Cmetadata.namespace%3Dml&limit=500");
    assert_non_null(strstr(target_of(s, 1), "&limit=500&continue=eyJ2Ijoi"));
    assert_true(cma_fake_http_has_header(s, 0, "Authorization: Bearer t"));
    cma_kube_objects_free(objs, n);
    cma_kube_free(k);
    cma_fake_http_stop(s);
    free(page1);
    free(page2);
}

static void test_cma_kube_list_objects__empty_list_and_errors(void **state)
{
    (void)state;
    const char *bodies[] = {
        "{\"kind\":\"PartialObjectMetadataList\",\"metadata\":{},\"items\":[]}",
        "{\"kind\":\"Status\",\"apiVersion\":\"v1\",\"status\":\"Failure\",\"message\":"
        "\"field label not supported: spec.x\",\"reason\":\"BadRequest\",\"code\":400}\n",
    };
    const struct cma_fake_answer answers[] = {{.status = 200, .body = bodies[0]},
                                              {.status = 400, .body = bodies[1]}};
    struct cma_fake_http *s = cma_fake_http_start(answers, 2);
    assert_non_null(s);
    struct cma_kube *k = fake_client(s);
    struct cma_kube_object *objs = NULL;
    size_t n = 7;
    assert_int_equal(cma_kube_list_objects(k, NULL, "v1", "nodes", "", NULL, "", &objs, &n, NULL),
                     CMA_OK);
    assert_int_equal(n, 0);
    assert_non_null(objs); /* an empty array, never NULL on success */
    cma_kube_objects_free(objs, n);
    struct cma_err err;
    cma_err_clear(&err);
    objs = NULL;
    assert_int_equal(
        cma_kube_list_objects(k, "", "v1", "pods", "ml", NULL, "spec.x=1", &objs, &n, &err),
        CMA_ERR_KUBE_ERROR);
    assert_null(objs);
    assert_non_null(strstr(err.msg, "HTTP 400"));
    assert_non_null(strstr(err.msg, "field label not supported: spec.x"));
    assert_string_equal(target_of(s, 0), "/api/v1/nodes?limit=500");
    assert_string_equal(target_of(s, 1),
                        "/api/v1/namespaces/ml/pods?fieldSelector=spec.x%3D1&limit=500");
    cma_err_clear(&err);
    assert_int_equal(cma_kube_list_objects(k, "", "", "pods", NULL, NULL, NULL, &objs, &n, &err),
                     CMA_ERR_INTERNAL);
    assert_int_equal(cma_fake_http_count(s), 2); /* refused before any request */
    cma_kube_free(k);
    cma_fake_http_stop(s);
}

/* ---- LIST pages for the watch caches ------------------------------------------------------ */

/* What cma_kube_list_pages handed over: each call's count and the names, copied. */
struct pages_seen {
    size_t calls, max_n;
    char names[8][64];
    size_t n;
    bool refuse; /* answer the first object with an error */
};

static enum cma_errc on_page_objects(void *ctx, const struct cma_kube_object *objs, size_t n,
                                     struct cma_err *reterr)
{
    struct pages_seen *ps = ctx;
    ps->calls++;
    ps->max_n = n > ps->max_n ? n : ps->max_n;
    if (ps->refuse)
        return cma_err_set(reterr, CMA_ERR_NOMEM, "refused by the test");
    for (size_t i = 0; i < n && ps->n < 8; i++)
        snprintf(ps->names[ps->n++], sizeof(ps->names[0]), "%s", objs[i].name);
    return CMA_OK;
}

/* The watch cache's LIST streams each page into the decoder (chunked here, 97 bytes a chunk):
 * objects reach the callback one at a time as they are decoded, never a page's worth gathered
 * first; full objects are asked for (status.phase); the list's resourceVersion is the first
 * page's. */
static void test_cma_kube_list_pages__streamed_one_object_at_a_time(void **state)
{
    (void)state;
    size_t l1, l2;
    char *page1 = cma_kube_fixture_read("pods-all-bert-limit2-page1.json", &l1);
    char *page2 = cma_kube_fixture_read("pods-all-bert-limit2-page2.json", &l2);
    assert_non_null(page1);
    assert_non_null(page2);
    const struct cma_fake_answer answers[] = {{.status = 200, .body = page1, .chunk = 97},
                                              {.status = 200, .body = page2, .chunk = 97}};
    struct cma_fake_http *s = cma_fake_http_start(answers, 2);
    assert_non_null(s);
    struct cma_kube *k = fake_client(s);
    struct pages_seen seen = {0};
    char *rv = NULL;
    long status = -1;
    struct cma_err err;
    cma_err_clear(&err);
    if (cma_kube_list_pages(k, "", "v1", "pods", on_page_objects, &seen, &rv, &status, &err) !=
        CMA_OK)
        fail_msg("%s", err.msg);
    assert_int_equal(seen.calls, 3);
    assert_int_equal(seen.max_n, 1);
    assert_string_equal(seen.names[0], "bert-0");
    assert_string_equal(seen.names[2], "bert-2");
    assert_string_equal(rv, "264");
    assert_int_equal(status, 0);
    assert_int_equal(cma_fake_http_count(s), 2);
    assert_string_equal(target_of(s, 0), "/api/v1/pods?limit=500");
    assert_ptr_equal(strstr(target_of(s, 1), "/api/v1/pods?limit=500&continue=eyJ2Ijoi"),
                     target_of(s, 1));
    assert_true(cma_fake_http_has_header(s, 0, "Accept: application/json"));
    free(rv);
    cma_kube_free(k);
    cma_fake_http_stop(s);
    free(page1);
    free(page2);
}

/* A refused page gives its status and Status message; an expired continue token (410) is handed
 * to the caller (it re-lists); a bad page and a callback's error stop the LIST with theirs. */
static void test_cma_kube_list_pages__errors(void **state)
{
    (void)state;
    size_t l1, l410;
    char *page1 = cma_kube_fixture_read("pods-all-bert-limit2-page1.json", &l1);
    assert_non_null(page1);
    char *gone =
        cma_shared_fixture_http_body("kube-apiserver/error-410-list-continue-expired.http", &l410);
    assert_non_null(gone);
    const struct cma_fake_answer answers[] = {
        {.status = 200, .body = page1},
        {.status = 410, .body = gone},
        {.status = 200, .body = "{\"items\":[{\"metadata\":{}}]}"},
        {.status = 200, .body = page1}};
    struct cma_fake_http *s = cma_fake_http_start(answers, 4);
    assert_non_null(s);
    struct cma_kube *k = fake_client(s);
    struct pages_seen seen = {0};
    char *rv = NULL;
    long status = 0;
    struct cma_err err;
    cma_err_clear(&err);
    assert_int_equal(
        cma_kube_list_pages(k, "", "v1", "pods", on_page_objects, &seen, &rv, &status, &err),
        CMA_ERR_KUBE_ERROR);
    assert_int_equal(status, 410);
    assert_null(rv);
    assert_non_null(strstr(err.msg, "continue parameter is too old"));
    cma_err_clear(&err);
    assert_int_equal(
        cma_kube_list_pages(k, "", "v1", "pods", on_page_objects, &seen, &rv, &status, &err),
        CMA_ERR_KUBE_ERROR);
    assert_int_equal(status, 0);
    assert_non_null(strstr(err.msg, "items[0].metadata.name is missing"));
    cma_err_clear(&err);
    seen.refuse = true;
    assert_int_equal(
        cma_kube_list_pages(k, "", "v1", "pods", on_page_objects, &seen, &rv, &status, &err),
        CMA_ERR_NOMEM);
    assert_string_equal(err.msg, "refused by the test");
    assert_null(rv);
    assert_int_equal(cma_fake_http_count(s), 4);
    cma_kube_free(k);
    cma_fake_http_stop(s);
    free(page1);
    free(gone);
}

/* tls-server-name: the URL names it (SNI and the certificate check under https), the connection
 * goes to the configured host (CURLOPT_CONNECT_TO: kube.invalid resolves nowhere) and Host is the
 * configured host and port, as client-go sends it. */
static void test_cma_kube_new_from_conn__tls_server_name_keeps_host(void **state)
{
    (void)state;
    const struct cma_fake_answer answers[] = {
        {.status = 200, .body = "{\"kind\":\"PodList\",\"metadata\":{},\"items\":[]}"}};
    struct cma_fake_http *s = cma_fake_http_start(answers, 1);
    assert_non_null(s);
    char *url = cma_fake_http_url(s, "/");
    assert_non_null(url);
    struct cma_kube_conn conn = {.server = url, .tls_server_name = "kube.invalid", .token = "t"};
    struct cma_kube *k = NULL;
    assert_int_equal(cma_kube_new_from_conn(&conn, 5000, &k, NULL), CMA_OK);
    char want_server[64], want_host[64];
    snprintf(want_server, sizeof(want_server), "http://127.0.0.1:%d", cma_fake_http_port(s));
    snprintf(want_host, sizeof(want_host), "Host: 127.0.0.1:%d", cma_fake_http_port(s));
    assert_string_equal(cma_kube_server(k), want_server); /* reports keep the configured name */
    struct cma_kube_object *objs = NULL;
    size_t n = 0;
    struct cma_err err;
    cma_err_clear(&err);
    assert_int_equal(cma_kube_list_objects(k, "", "v1", "pods", "ml", NULL, NULL, &objs, &n, &err),
                     CMA_OK);
    assert_int_equal(n, 0);
    assert_int_equal(cma_fake_http_count(s), 1);
    assert_string_equal(target_of(s, 0), "/api/v1/namespaces/ml/pods?limit=500");
    assert_true(cma_fake_http_has_header(s, 0, want_host));
    assert_true(cma_fake_http_has_header(s, 0, "Authorization: Bearer t"));
    cma_kube_objects_free(objs, n);
    cma_kube_free(k);
    conn.tls_server_name = "bad name";
    cma_err_clear(&err);
    assert_int_equal(cma_kube_new_from_conn(&conn, 5000, &k, &err), CMA_ERR_CONFIG_VALUE);
    assert_string_equal(err.msg, "invalid tls-server-name \"bad name\"");
    free(url);
    cma_fake_http_stop(s);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cma_kube_list_objects__selectors_and_pages),
        cmocka_unit_test(test_cma_kube_list_objects__empty_list_and_errors),
        cmocka_unit_test(test_cma_kube_list_pages__streamed_one_object_at_a_time),
        cmocka_unit_test(test_cma_kube_list_pages__errors),
        cmocka_unit_test(test_cma_clients_base64_decode__cases),
        cmocka_unit_test(test_cma_kubeconfig_parse__current_context),
        cmocka_unit_test(test_cma_kubeconfig_parse__basic_auth_and_insecure),
        cmocka_unit_test(test_cma_kubeconfig_parse__errors_with_positions),
        cmocka_unit_test(test_cma_kubeconfig_load__missing_file),
        cmocka_unit_test(test_cma_kubeconfig_in_cluster__env_and_files),
        cmocka_unit_test(test_cma_kube_new_from_conn__server_checks),
        cmocka_unit_test(test_cma_kube_new_from_conn__tls_server_name_keeps_host),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
