/* kube_test.c: the pure parts of the kube-apiserver client fed with real recorded bodies
 * (../shared/fixtures/kube-apiserver): discovery documents, LIST pages, Status messages; and
 * kubeconfig / in-cluster settings, base64. The HTTP side runs in prom_client_test.c;
 * cma_kube_list_objects runs here against the shared fake HTTP server (fakehttp.h: canned
 * answers in order, request targets recorded), which stands in for kube-apiserver. */
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

/* ---- fixtures (fakehttp.h finds them under ../shared/fixtures) ---------------------------- */

static char *read_fixture(const char *name, size_t *ret_len)
{
    char rel[512];
    snprintf(rel, sizeof(rel), "kube-apiserver/%s", name);
    char *body = cma_shared_fixture_read(rel, ret_len);
    if (!body)
        fail_msg("cannot read fixture ../shared/fixtures/%s under %s", rel, cma_source_dir());
    return body;
}

/* The response body of a recorded .http exchange (after the response head). */
static char *http_fixture_body(const char *name, size_t *ret_len)
{
    char rel[512];
    snprintf(rel, sizeof(rel), "kube-apiserver/%s", name);
    char *body = cma_shared_fixture_http_body(rel, ret_len);
    if (!body)
        fail_msg("no response body in ../shared/fixtures/%s", rel);
    return body;
}

static const struct cma_api_resource *find_resource(const struct cma_api_resources *r,
                                                    const char *group, const char *resource)
{
    for (size_t i = 0; i < r->n; i++)
        if (strcmp(r->items[i].group, group) == 0 && strcmp(r->items[i].resource, resource) == 0)
            return &r->items[i];
    return NULL;
}

static void test_cma_kube_parse_api_versions__fixture(void **state)
{
    (void)state;
    size_t len;
    char *body = read_fixture("discovery-api.json", &len);
    char *version = NULL;
    struct cma_err err;
    cma_err_clear(&err);
    assert_int_equal(cma_kube_parse_api_versions(body, len, &version, &err), CMA_OK);
    assert_string_equal(version, "v1");
    free(version);
    free(body);
    const char *bad = "{\"versions\":[]}";
    assert_int_equal(cma_kube_parse_api_versions(bad, strlen(bad), &version, &err),
                     CMA_ERR_KUBE_ERROR);
}

static void test_cma_kube_parse_resource_list__core_fixture(void **state)
{
    (void)state;
    size_t len;
    char *body = read_fixture("discovery-api-v1.json", &len);
    struct cma_api_resources *r = calloc(1, sizeof(*r));
    assert_non_null(r);
    struct cma_err err;
    cma_err_clear(&err);
    assert_int_equal(cma_kube_parse_resource_list(body, len, "", "v1", r, &err), CMA_OK);
    assert_int_equal(r->n, 17); /* 38 entries, 21 of them subresources */
    for (size_t i = 0; i < r->n; i++)
        assert_null(strchr(r->items[i].resource, '/'));
    const struct cma_api_resource *pods = find_resource(r, "", "pods");
    assert_non_null(pods);
    assert_string_equal(pods->version, "v1");
    assert_string_equal(pods->kind, "Pod");
    assert_string_equal(pods->singular, "pod"); /* singularName "" → lower-case kind */
    assert_true(pods->namespaced);
    assert_int_equal(pods->n_short_names, 1);
    assert_string_equal(pods->short_names[0], "po");
    const struct cma_api_resource *nodes = find_resource(r, "", "nodes");
    assert_non_null(nodes);
    assert_false(nodes->namespaced);
    const struct cma_api_resource *cs = find_resource(r, "", "componentstatuses");
    assert_string_equal(cs->singular, "componentstatus");
    cma_api_resources_free(r);
    free(body);
}

static void test_cma_kube_parse_resource_list__apps_fixture_appends(void **state)
{
    (void)state;
    size_t len;
    char *body = read_fixture("discovery-apis-apps-v1.json", &len);
    struct cma_api_resources *r = calloc(1, sizeof(*r));
    struct cma_err err;
    cma_err_clear(&err);
    assert_int_equal(cma_kube_parse_resource_list(body, len, "apps", "v1", r, &err), CMA_OK);
    assert_int_equal(r->n, 5);
    assert_int_equal(cma_kube_parse_resource_list(body, len, "apps", "v1", r, &err), CMA_OK);
    assert_int_equal(r->n, 10);
    const struct cma_api_resource *d = find_resource(r, "apps", "deployments");
    assert_non_null(d);
    assert_string_equal(d->singular, "deployment");
    assert_string_equal(d->kind, "Deployment");
    assert_string_equal(d->short_names[0], "deploy");
    /* a bad document leaves what was there */
    const char *bad = "{\"resources\":[{\"name\":\"x\",\"kind\":\"X\",\"namespaced\":true},"
                      "{\"name\":\"y\"}]}";
    assert_int_equal(cma_kube_parse_resource_list(bad, strlen(bad), "g", "v1", r, &err),
                     CMA_ERR_KUBE_ERROR);
    assert_int_equal(r->n, 10);
    cma_api_resources_free(r);
    free(body);
}

static void test_cma_kube_parse_resource_list__singular_name_kept(void **state)
{
    (void)state;
    const char *doc = "{\"resources\":[{\"name\":\"widgets\",\"singularName\":\"widgetty\","
                      "\"kind\":\"Widget\",\"namespaced\":false}]}";
    struct cma_api_resources *r = calloc(1, sizeof(*r));
    assert_int_equal(cma_kube_parse_resource_list(doc, strlen(doc), "x.io", "v2", r, NULL), CMA_OK);
    assert_string_equal(r->items[0].singular, "widgetty");
    assert_string_equal(r->items[0].group, "x.io");
    assert_int_equal(r->items[0].n_short_names, 0);
    cma_api_resources_free(r);
}

static void test_cma_kube_parse_group_list__preferred_versions(void **state)
{
    (void)state;
    size_t len;
    char *body = read_fixture("discovery-apis.json", &len);
    struct cma_kube_group *groups = NULL;
    size_t n = 0;
    struct cma_err err;
    cma_err_clear(&err);
    assert_int_equal(cma_kube_parse_group_list(body, len, &groups, &n, &err), CMA_OK);
    assert_int_equal(n, 20);
    bool saw_autoscaling = false, saw_custom = false;
    for (size_t i = 0; i < n; i++) {
        if (strcmp(groups[i].name, "autoscaling") == 0) {
            assert_string_equal(groups[i].version, "v2");
            saw_autoscaling = true;
        }
        if (strcmp(groups[i].name, "custom.metrics.k8s.io") == 0) {
            assert_string_equal(groups[i].version, "v1beta1");
            saw_custom = true;
        }
    }
    assert_true(saw_autoscaling && saw_custom);
    cma_kube_groups_free(groups, n);
    free(body);

    body = read_fixture("discovery-apis-with-v1beta2.json", &len);
    assert_int_equal(cma_kube_parse_group_list(body, len, &groups, &n, &err), CMA_OK);
    for (size_t i = 0; i < n; i++)
        if (strcmp(groups[i].name, "custom.metrics.k8s.io") == 0)
            assert_string_equal(groups[i].version, "v1beta2");
    cma_kube_groups_free(groups, n);
    free(body);
}

static void test_cma_kube_parse_group_list__fallback_and_errors(void **state)
{
    (void)state;
    const char *doc = "{\"groups\":[{\"name\":\"a\",\"versions\":[{\"version\":\"v3\"}]},"
                      "{\"name\":\"b\",\"versions\":[]}]}";
    struct cma_kube_group *groups = NULL;
    size_t n = 0;
    assert_int_equal(cma_kube_parse_group_list(doc, strlen(doc), &groups, &n, NULL), CMA_OK);
    assert_int_equal(n, 1); /* b has no version at all */
    assert_string_equal(groups[0].version, "v3");
    cma_kube_groups_free(groups, n);
    struct cma_err err;
    cma_err_clear(&err);
    assert_int_equal(cma_kube_parse_group_list("[]", 2, &groups, &n, &err), CMA_ERR_KUBE_ERROR);
    assert_non_null(strstr(err.msg, "not an object"));
    cma_err_clear(&err);
    assert_int_equal(cma_kube_parse_group_list("{}", 2, &groups, &n, &err), CMA_ERR_KUBE_ERROR);
    assert_non_null(strstr(err.msg, "groups is not a list"));
}

static void test_cma_kube_parse_name_page__pages_and_continue(void **state)
{
    (void)state;
    size_t len;
    char *page1 = read_fixture("pods-all-bert-limit2-page1.json", &len);
    char **names = NULL;
    size_t n = 0, cap = 0;
    char *cont = NULL;
    struct cma_err err;
    cma_err_clear(&err);
    assert_int_equal(cma_kube_parse_name_page(page1, len, &names, &n, &cap, &cont, &err), CMA_OK);
    assert_int_equal(n, 2);
    assert_string_equal(names[0], "bert-0");
    assert_string_equal(names[1], "bert-1");
    assert_string_equal(cont, "eyJ2IjoibWV0YS5rOHMuaW8vdjEiLCJydiI6MjY0LCJzdGFydCI6Im1sL2JlcnQtMVx1"
                              "MDAwMCJ9");
    free(cont);
    free(page1);
    char *page2 = read_fixture("pods-all-bert-limit2-page2.json", &len);
    assert_int_equal(cma_kube_parse_name_page(page2, len, &names, &n, &cap, &cont, &err), CMA_OK);
    assert_int_equal(n, 3);
    assert_string_equal(names[2], "bert-2");
    assert_null(cont);
    free(page2);
    for (size_t i = 0; i < n; i++)
        free(names[i]);
    free(names);
}

static void test_cma_kube_parse_name_page__partial_object_metadata(void **state)
{
    (void)state;
    size_t len;
    char *body = read_fixture("pods-all-bert-metadata.json", &len);
    char **names = NULL;
    size_t n = 0, cap = 0;
    char *cont = NULL;
    assert_int_equal(cma_kube_parse_name_page(body, len, &names, &n, &cap, &cont, NULL), CMA_OK);
    assert_int_equal(n, 3);
    assert_string_equal(names[2], "bert-2");
    for (size_t i = 0; i < n; i++)
        free(names[i]);
    free(names);
    free(body);
}

static void test_cma_kube_parse_name_page__bad_items_leave_list_unchanged(void **state)
{
    (void)state;
    char **names = NULL;
    size_t n = 0, cap = 0;
    char *cont = NULL;
    const char *ok = "{\"items\":[{\"metadata\":{\"name\":\"a\"}}]}";
    assert_int_equal(cma_kube_parse_name_page(ok, strlen(ok), &names, &n, &cap, &cont, NULL),
                     CMA_OK);
    const char *bad = "{\"items\":[{\"metadata\":{\"name\":\"b\"}},{\"metadata\":{}}]}";
    struct cma_err err;
    cma_err_clear(&err);
    assert_int_equal(cma_kube_parse_name_page(bad, strlen(bad), &names, &n, &cap, &cont, &err),
                     CMA_ERR_KUBE_ERROR);
    assert_non_null(strstr(err.msg, "items[1].metadata.name is missing"));
    assert_int_equal(n, 1);
    const char *empty = "{\"items\":null,\"metadata\":{\"continue\":\"\"}}";
    assert_int_equal(cma_kube_parse_name_page(empty, strlen(empty), &names, &n, &cap, &cont, NULL),
                     CMA_OK);
    assert_null(cont);
    assert_int_equal(n, 1);
    free(names[0]);
    free(names);
}

static void test_cma_kube_status_message__fixtures(void **state)
{
    (void)state;
    char msg[256];
    size_t len;
    char *body = http_fixture_body("error-404-pod-not-found.http", &len);
    cma_kube_status_message(body, len, msg, sizeof(msg));
    assert_string_equal(msg, "pods \"bert-9\" not found");
    free(body);
    body = http_fixture_body("error-503-aggregated-discovery-unavailable.http", &len);
    cma_kube_status_message(body, len, msg, sizeof(msg));
    assert_string_equal(msg, "service unavailable"); /* text/plain body, trailing LF trimmed */
    free(body);
    body = http_fixture_body("error-410-list-continue-expired.http", &len);
    cma_kube_status_message(body, len, msg, 40);
    assert_string_equal(msg, "The provided continue parameter is too");
    free(body);
}

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

#define T_2026_11_21_213906 INT64_C(1795297146000)

static const char *label_of(const struct cma_kube_object *o, const char *name)
{
    for (size_t i = 0; i < o->n_labels; i++)
        if (strcmp(o->label_names[i], name) == 0)
            return o->label_values[i];
    return NULL;
}

static void test_cma_kube_parse_object_page__full_pods_fixture(void **state)
{
    (void)state;
    size_t len;
    char *body = read_fixture("pods-ml-all-running.json", &len);
    struct cma_kube_object *objs = NULL;
    size_t n = 0, cap = 0;
    char *cont = NULL;
    struct cma_err err;
    cma_err_clear(&err);
    assert_int_equal(cma_kube_parse_object_page(body, len, &objs, &n, &cap, &cont, &err), CMA_OK);
    assert_null(cont);
    assert_int_equal(n, 4);
    const char *want[] = {"bert-0", "bert-1", "bert-2", "other-0"};
    for (size_t i = 0; i < n; i++) {
        assert_string_equal(objs[i].name, want[i]);
        assert_string_equal(objs[i].namespace_, "ml");
        assert_string_equal(objs[i].phase, "Running");
        assert_int_equal(objs[i].creation_ms, T_2026_11_21_213906);
        assert_int_equal(objs[i].n_labels, 2);
        assert_string_equal(label_of(&objs[i], "tier"), "inference");
    }
    assert_string_equal(label_of(&objs[0], "app"), "bert");
    assert_string_equal(label_of(&objs[3], "app"), "other");
    cma_kube_objects_free(objs, n);
    free(body);
}

/* What the adapter asks for: PartialObjectMetadataList has no status, so no phase. */
static void test_cma_kube_parse_object_page__partial_object_metadata(void **state)
{
    (void)state;
    size_t len;
    char *body = read_fixture("pods-all-bert-metadata.json", &len);
    struct cma_kube_object *objs = NULL;
    size_t n = 0, cap = 0;
    char *cont = NULL;
    assert_int_equal(cma_kube_parse_object_page(body, len, &objs, &n, &cap, &cont, NULL), CMA_OK);
    assert_int_equal(n, 3);
    for (size_t i = 0; i < n; i++) {
        assert_null(objs[i].phase);
        assert_string_equal(objs[i].namespace_, "ml");
        assert_string_equal(label_of(&objs[i], "app"), "bert");
        assert_int_equal(objs[i].creation_ms, T_2026_11_21_213906);
    }
    assert_string_equal(objs[2].name, "bert-2");
    cma_kube_objects_free(objs, n);
    free(body);
}

static void test_cma_kube_parse_object_page__pages_and_continue(void **state)
{
    (void)state;
    size_t len;
    char *page1 = read_fixture("pods-all-bert-limit2-page1.json", &len);
    struct cma_kube_object *objs = NULL;
    size_t n = 0, cap = 0;
    char *cont = NULL;
    assert_int_equal(cma_kube_parse_object_page(page1, len, &objs, &n, &cap, &cont, NULL), CMA_OK);
    assert_int_equal(n, 2);
    assert_non_null(cont);
    assert_memory_equal(cont, "eyJ2IjoibWV0YS5rOHMuaW8vdjEi", 28);
    free(cont);
    free(page1);
    char *page2 = read_fixture("pods-all-bert-limit2-page2.json", &len);
    assert_int_equal(cma_kube_parse_object_page(page2, len, &objs, &n, &cap, &cont, NULL), CMA_OK);
    assert_null(cont);
    assert_int_equal(n, 3);
    assert_string_equal(objs[0].name, "bert-0");
    assert_string_equal(objs[2].name, "bert-2");
    cma_kube_objects_free(objs, n);
    free(page2);
}

/* Cluster-scoped objects, no labels, no creationTimestamp; then malformed pages leave the list
 * as it was. */
static void test_cma_kube_parse_object_page__nodes_and_bad_items(void **state)
{
    (void)state;
    struct cma_kube_object *objs = NULL;
    size_t n = 0, cap = 0;
    char *cont = NULL;
    const char *ok = "{\"kind\":\"PartialObjectMetadataList\",\"items\":[{\"metadata\":{\"name\":"
                     "\"n1\",\"labels\":null}},{\"metadata\":{\"name\":\"n2\",\"namespace\":\"\","
                     "\"creationTimestamp\":\"2026-11-21T21:39:06.5+02:30\"}}]}";
    assert_int_equal(cma_kube_parse_object_page(ok, strlen(ok), &objs, &n, &cap, &cont, NULL),
                     CMA_OK);
    assert_int_equal(n, 2);
    assert_null(objs[0].namespace_);
    assert_null(objs[1].namespace_);
    assert_int_equal(objs[0].n_labels, 0);
    assert_int_equal(objs[0].creation_ms, 0);
    assert_int_equal(objs[1].creation_ms, T_2026_11_21_213906 - 9000000 + 500);
    const char *bad[] = {
        "{\"items\":[{\"metadata\":{\"name\":\"a\"}},{\"metadata\":{}}]}",
        "{\"items\":[{\"metadata\":{\"name\":\"a\",\"labels\":[]}}]}",
        "{\"items\":[{\"metadata\":{\"name\":\"a\",\"labels\":{\"x\":1}}}]}",
        "{\"items\":[{\"metadata\":{\"name\":\"a\",\"creationTimestamp\":\"yesterday\"}}]}",
        "{\"items\":{}}",
        "[]",
        "{",
    };
    const char *why[] = {"items[1].metadata.name is missing",
                         "labels is not an object",
                         "labels[x] is not a string",
                         "not RFC 3339",
                         "items is not a list",
                         "not an object",
                         "unexpected JSON"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        struct cma_err err;
        cma_err_clear(&err);
        assert_int_equal(
            cma_kube_parse_object_page(bad[i], strlen(bad[i]), &objs, &n, &cap, &cont, &err),
            CMA_ERR_KUBE_ERROR);
        if (!strstr(err.msg, why[i]))
            fail_msg("case %zu: %s", i, err.msg);
        assert_int_equal(n, 2);
        assert_null(cont);
    }
    assert_string_equal(objs[1].name, "n2");
    cma_kube_objects_free(objs, n);
    cma_kube_objects_free(NULL, 0);
}

static void test_cma_kube_parse_time__forms(void **state)
{
    (void)state;
    int64_t ms = -1;
    assert_true(cma_kube_parse_time("2026-11-21T21:39:06Z", &ms));
    assert_int_equal(ms, T_2026_11_21_213906);
    assert_true(cma_kube_parse_time("2026-11-21T21:39:06.123456789Z", &ms));
    assert_int_equal(ms, T_2026_11_21_213906 + 123);
    assert_true(cma_kube_parse_time("2026-11-21T22:39:06+01:00", &ms));
    assert_int_equal(ms, T_2026_11_21_213906);
    assert_true(cma_kube_parse_time("2026-11-21t19:39:06-01:00", &ms));
    assert_int_equal(ms, T_2026_11_21_213906 - 3600000);
    assert_true(cma_kube_parse_time("1970-01-01T00:00:00Z", &ms));
    assert_int_equal(ms, 0);
    const char *bad[] = {"",
                         "2026-11-21",
                         "2026-11-21T21:39:06",
                         "2026-13-21T21:39:06Z",
                         "2026-11-21T21:39:06.Z",
                         "2026-11-21T21:39:06Zjunk",
                         "2026-11-21T21:39:06+0100",
                         "2026/11/21T21:39:06Z",
                         "2026-11-21T25:39:06Z"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        ms = 42;
        if (cma_kube_parse_time(bad[i], &ms))
            fail_msg("accepted \"%s\"", bad[i]);
        assert_int_equal(ms, 42);
    }
    assert_false(cma_kube_parse_time(NULL, &ms));
}

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
    char *page1 = read_fixture("pods-all-bert-limit2-page1.json", &l1);
    char *page2 = read_fixture("pods-all-bert-limit2-page2.json", &l2);
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

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cma_kube_parse_api_versions__fixture),
        cmocka_unit_test(test_cma_kube_parse_resource_list__core_fixture),
        cmocka_unit_test(test_cma_kube_parse_resource_list__apps_fixture_appends),
        cmocka_unit_test(test_cma_kube_parse_resource_list__singular_name_kept),
        cmocka_unit_test(test_cma_kube_parse_group_list__preferred_versions),
        cmocka_unit_test(test_cma_kube_parse_group_list__fallback_and_errors),
        cmocka_unit_test(test_cma_kube_parse_name_page__pages_and_continue),
        cmocka_unit_test(test_cma_kube_parse_name_page__partial_object_metadata),
        cmocka_unit_test(test_cma_kube_parse_name_page__bad_items_leave_list_unchanged),
        cmocka_unit_test(test_cma_kube_parse_object_page__full_pods_fixture),
        cmocka_unit_test(test_cma_kube_parse_object_page__partial_object_metadata),
        cmocka_unit_test(test_cma_kube_parse_object_page__pages_and_continue),
        cmocka_unit_test(test_cma_kube_parse_object_page__nodes_and_bad_items),
        cmocka_unit_test(test_cma_kube_parse_time__forms),
        cmocka_unit_test(test_cma_kube_list_objects__selectors_and_pages),
        cmocka_unit_test(test_cma_kube_list_objects__empty_list_and_errors),
        cmocka_unit_test(test_cma_kube_status_message__fixtures),
        cmocka_unit_test(test_cma_clients_base64_decode__cases),
        cmocka_unit_test(test_cma_kubeconfig_parse__current_context),
        cmocka_unit_test(test_cma_kubeconfig_parse__basic_auth_and_insecure),
        cmocka_unit_test(test_cma_kubeconfig_parse__errors_with_positions),
        cmocka_unit_test(test_cma_kubeconfig_load__missing_file),
        cmocka_unit_test(test_cma_kubeconfig_in_cluster__env_and_files),
        cmocka_unit_test(test_cma_kube_new_from_conn__server_checks),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
