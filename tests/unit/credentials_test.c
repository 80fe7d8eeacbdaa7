/* credentials_test.c: clients/credentials.c: the TLS material checks (clients/tlsmat.c: CA
 * bundles, certificate + key pairs) on keys and certificates made with OpenSSL by the shared
 * tls_fixture.c; loading with
 * the setting's label, path and reason on every failure; rotation of token, password, CA and
 * certificate + key files (in-place rewrite, atomic symlink swap of a `..data` directory as a
 * projected volume does, half-done rotations refused once and the previous material kept);
 * snapshots that outlive a rotation; and the Prometheus client sending a rotated token and refusing
 * broken material at creation, against the shared fake HTTP server (fakehttp.h) standing in for
 * Prometheus. */
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "../../src/clients/internal.h"
#include "cma/credentials.h"
#include "cma/tlsmat.h"
#include "cma/prom.h"
#include "fakehttp.h"
#include "tls_fixture.h"

/* ---- material (tls_fixture.h) ------------------------------------------------------------ */

static const struct cma_test_tls *const m = &cma_test_tls;

/* ---- checks ------------------------------------------------------------------------------ */

static void test_cma_tlsmat_check_ca__bundles(void **state)
{
    (void)state;
    char two[8192];
    snprintf(two, sizeof(two), "# a comment line\n%s%s", m->cert_a, m->cert_b);
    size_t n = 0;
    struct cma_err err;
    cma_err_clear(&err);
    assert_int_equal(cma_tlsmat_check_ca(two, strlen(two), &n, &err), CMA_OK);
    assert_int_equal(n, 2);
    cma_err_clear(&err);
    assert_int_equal(cma_tlsmat_check_ca("garbage\n", 8, NULL, &err), CMA_ERR_TLS);
    assert_non_null(strstr(err.msg, "no PEM certificate"));
    cma_err_clear(&err);
    assert_int_equal(cma_tlsmat_check_ca("", 0, NULL, &err), CMA_ERR_TLS);
    /* the second certificate cut in the middle: a half-written bundle */
    size_t cut = strlen(m->cert_a) + strlen(m->cert_b) / 2;
    cma_err_clear(&err);
    assert_int_equal(cma_tlsmat_check_ca(two + strlen("# a comment line\n"), cut, &n, &err),
                     CMA_ERR_TLS);
    assert_non_null(strstr(err.msg, "does not parse"));
}

static void test_cma_tlsmat_check_pair__match_mismatch_garbage(void **state)
{
    (void)state;
    struct cma_err err;
    cma_err_clear(&err);
    assert_int_equal(
        cma_tlsmat_check_pair(m->cert_a, strlen(m->cert_a), m->key_a, strlen(m->key_a), &err),
        CMA_OK);
    assert_int_equal(
        cma_tlsmat_check_pair(m->cert_a, strlen(m->cert_a), m->key_b, strlen(m->key_b), &err),
        CMA_ERR_TLS);
    assert_non_null(strstr(err.msg, "does not match"));
    cma_err_clear(&err);
    assert_int_equal(cma_tlsmat_check_pair(m->cert_a, strlen(m->cert_a), "x", 1, &err),
                     CMA_ERR_TLS);
    assert_non_null(strstr(err.msg, "key: no unencrypted PEM private key"));
    cma_err_clear(&err);
    assert_int_equal(
        cma_tlsmat_check_pair(m->key_a, strlen(m->key_a), m->key_a, strlen(m->key_a), &err),
        CMA_ERR_TLS);
    assert_non_null(strstr(err.msg, "certificate: no PEM certificate"));
    cma_test_tls_put("a.crt", m->cert_a);
    cma_test_tls_put("b.key", m->key_b);
    cma_err_clear(&err);
    assert_int_equal(
        cma_tlsmat_check_pair_files(cma_test_tls_path("a.crt"), cma_test_tls_path("b.key"), &err),
        CMA_ERR_TLS);
    assert_non_null(strstr(err.msg, cma_test_tls_path("a.crt")));
    assert_non_null(strstr(err.msg, "does not match"));
}

/* ---- loading: every failure names the setting, the path and the reason -------------------- */

static enum cma_errc load(const struct cma_cred_spec *spec, struct cma_err *err)
{
    struct cma_creds *c = NULL;
    cma_err_clear(err);
    enum cma_errc rc = cma_creds_new(spec, &c, err);
    if (rc == CMA_OK)
        assert_non_null(c);
    else
        assert_null(c);
    cma_creds_free(c);
    return rc;
}

static void test_cma_creds_new__fails_fast_with_label_path_reason(void **state)
{
    (void)state;
    struct cma_err err;
    cma_test_tls_put("garbage.pem", "not a certificate\n");
    cma_test_tls_put("a.crt", m->cert_a);
    cma_test_tls_put("a.key", m->key_a);
    cma_test_tls_put("b.key", m->key_b);
    mkdir(cma_test_tls_path("a-dir"), 0700);
    struct cma_cred_spec spec = {
        .ca = {.label = "--prometheus-ca-file", .file = cma_test_tls_path("missing.pem")}};
    assert_int_equal(load(&spec, &err), CMA_ERR_IO);
    assert_non_null(strstr(err.msg, "--prometheus-ca-file"));
    assert_non_null(strstr(err.msg, cma_test_tls_path("missing.pem")));
    assert_non_null(strstr(err.msg, "No such file"));
    spec.ca.file = cma_test_tls_path("a-dir");
    assert_int_equal(load(&spec, &err), CMA_ERR_IO);
    assert_non_null(strstr(err.msg, "Is a directory"));
    spec.ca.file = cma_test_tls_path("garbage.pem");
    assert_int_equal(load(&spec, &err), CMA_ERR_TLS);
    assert_non_null(strstr(err.msg, "--prometheus-ca-file"));
    assert_non_null(strstr(err.msg, "no PEM certificate"));
    spec.ca.file = cma_test_tls_path("a.crt");
    assert_int_equal(load(&spec, &err), CMA_OK);
    spec.cert = (struct cma_cred_item){.label = "--cert", .file = cma_test_tls_path("a.crt")};
    assert_int_equal(load(&spec, &err), CMA_ERR_FLAG);
    assert_non_null(strstr(err.msg, "needs its key"));
    spec.key = (struct cma_cred_item){.label = "--key", .file = cma_test_tls_path("b.key")};
    assert_int_equal(load(&spec, &err), CMA_ERR_TLS);
    assert_non_null(strstr(err.msg, "--cert"));
    assert_non_null(strstr(err.msg, cma_test_tls_path("b.key")));
    assert_non_null(strstr(err.msg, "does not match"));
    spec.key.file = cma_test_tls_path("a.key");
    assert_int_equal(load(&spec, &err), CMA_OK);
    /* data fields (kubeconfig *-data): the label names the field, there is no path */
    spec.key = (struct cma_cred_item){.label = "kubeconfig k.yaml client-key-data",
                                      .data = (const unsigned char *)"junk",
                                      .len = 4};
    assert_int_equal(load(&spec, &err), CMA_ERR_TLS);
    assert_non_null(strstr(err.msg, "client-key-data"));
    assert_non_null(strstr(err.msg, "no unencrypted PEM private key"));
    struct cma_cred_spec tok = {
        .token = {.label = "--prometheus-token-file", .file = cma_test_tls_path("empty-token")}};
    cma_test_tls_put("empty-token", " \n");
    assert_int_equal(load(&tok, &err), CMA_ERR_FLAG);
    assert_non_null(strstr(err.msg, "--prometheus-token-file"));
    assert_non_null(strstr(err.msg, "one non-empty line"));
}

/* ---- rotation ---------------------------------------------------------------------------- */

static struct cma_creds *creds_for(const struct cma_cred_spec *spec)
{
    struct cma_creds *c = NULL;
    struct cma_err err;
    cma_err_clear(&err);
    if (cma_creds_new(spec, &c, &err) != CMA_OK)
        fail_msg("cma_creds_new: %s", err.msg);
    return c;
}

/* The Authorization line now, and whether that take warned. */
static char *auth_now(struct cma_creds *c, bool *warned)
{
    struct cma_err w;
    cma_err_clear(&w);
    struct cma_cred_snap *s = cma_creds_take(c, &w);
    char *line = s->authorization ? strdup(s->authorization) : NULL;
    cma_cred_snap_release(s);
    if (warned)
        *warned = w.code != CMA_OK;
    return line;
}

static void assert_auth(struct cma_creds *c, const char *want, bool want_warning)
{
    bool warned = false;
    char *line = auth_now(c, &warned);
    assert_non_null(line);
    assert_string_equal(line, want);
    assert_int_equal(warned, want_warning);
    free(line);
}

static void test_cma_creds_take__token_rewritten_in_place(void **state)
{
    (void)state;
    cma_test_tls_put("token", "first\n");
    struct cma_cred_spec spec = {.token = {.label = "t", .file = cma_test_tls_path("token")}};
    struct cma_creds *c = creds_for(&spec);
    assert_auth(c, "Authorization: Bearer first", false);
    cma_test_tls_put("token", "secnd\n"); /* same size, same inode: the content decides */
    assert_auth(c, "Authorization: Bearer secnd", false);
    cma_test_tls_put("token", ""); /* a rewrite caught half-way: keep the token, warn once */
    assert_auth(c, "Authorization: Bearer secnd", true);
    assert_auth(c, "Authorization: Bearer secnd", false);
    cma_test_tls_put("token", "  third \n");
    assert_auth(c, "Authorization: Bearer third", false);
    assert_int_equal(cma_creds_generation(c), 2);
    unlink(cma_test_tls_path("token"));
    assert_auth(c, "Authorization: Bearer third", true); /* gone: kept, warned once */
    assert_auth(c, "Authorization: Bearer third", false);
    cma_test_tls_put("token", "fourth");
    assert_auth(c, "Authorization: Bearer fourth", false);
    cma_creds_free(c);
}

static void test_cma_creds_take__settled_file_changed_by_signature(void **state)
{
    (void)state;
    cma_test_tls_put("old-token", "aaaa");
    struct timespec old[2] = {{.tv_sec = time(NULL) - 3600}, {.tv_sec = time(NULL) - 3600}};
    assert_int_equal(utimensat(AT_FDCWD, cma_test_tls_path("old-token"), old, 0), 0);
    struct cma_cred_spec spec = {.token = {.label = "t", .file = cma_test_tls_path("old-token")}};
    struct cma_creds *c = creds_for(&spec);
    assert_auth(c, "Authorization: Bearer aaaa", false);
    /* rewritten with the same size and the old mtime: ctime still moves */
    cma_test_tls_put("old-token", "bbbb");
    assert_int_equal(utimensat(AT_FDCWD, cma_test_tls_path("old-token"), old, 0), 0);
    assert_auth(c, "Authorization: Bearer bbbb", false);
    cma_creds_free(c);
}

/* Kubernetes' atomic writer: files are symlinks into ..data, itself a symlink to a timestamped
 * directory that is swapped with a rename. */
static void projected_write(const char *version, const char *file, const char *text)
{
    char vdir[512], tmp[1024], target[1024];
    snprintf(vdir, sizeof(vdir), "%s/sa/..%s", cma_test_tls_dir(), version);
    mkdir(cma_test_tls_path("sa"), 0755);
    mkdir(vdir, 0755);
    snprintf(target, sizeof(target), "%s/%s", vdir, file);
    assert_true(cma_file_write(target, text));
    snprintf(tmp, sizeof(tmp), "%s/sa/..data_tmp", cma_test_tls_dir());
    unlink(tmp);
    char rel[64];
    snprintf(rel, sizeof(rel), "..%s", version);
    assert_int_equal(symlink(rel, tmp), 0);
    char data[600];
    snprintf(data, sizeof(data), "%s/sa/..data", cma_test_tls_dir());
    assert_int_equal(rename(tmp, data), 0);
    char link[1024], link_target[64];
    snprintf(link, sizeof(link), "%s/sa/%s", cma_test_tls_dir(), file);
    snprintf(link_target, sizeof(link_target), "..data/%s", file);
    if (symlink(link_target, link) != 0)
        assert_int_equal(errno, EEXIST);
}

static void test_cma_creds_take__projected_volume_swap(void **state)
{
    (void)state;
    projected_write("2026_01_01_00_00_00.1", "token", "sa-token-1");
    char path[600];
    snprintf(path, sizeof(path), "%s/sa/token", cma_test_tls_dir());
    struct cma_cred_spec spec = {.token = {.label = "in-cluster token", .file = path}};
    struct cma_creds *c = creds_for(&spec);
    assert_auth(c, "Authorization: Bearer sa-token-1", false);
    projected_write("2026_01_01_01_00_00.2", "token", "sa-token-2");
    assert_auth(c, "Authorization: Bearer sa-token-2", false);
    cma_creds_free(c);
}

static struct cma_cred_snap *take(struct cma_creds *c, bool *warned)
{
    struct cma_err w;
    cma_err_clear(&w);
    struct cma_cred_snap *s = cma_creds_take(c, &w);
    *warned = w.code != CMA_OK;
    return s;
}

static void test_cma_creds_take__pair_swapped_only_when_it_matches(void **state)
{
    (void)state;
    cma_test_tls_put("c.crt", m->cert_a);
    cma_test_tls_put("c.key", m->key_a);
    struct cma_cred_spec spec = {.cert = {.label = "--cert", .file = cma_test_tls_path("c.crt")},
                                 .key = {.label = "--key", .file = cma_test_tls_path("c.key")}};
    struct cma_creds *c = creds_for(&spec);
    bool warned = false;
    struct cma_cred_snap *before = take(c, &warned);
    assert_false(warned);
    assert_string_equal((char *)before->cert, m->cert_a);
    cma_test_tls_put(
        "c.crt", m->cert_b); /* the certificate is written first: it does not match the old key */
    struct cma_cred_snap *s = take(c, &warned);
    assert_true(warned);
    assert_string_equal((char *)s->cert, m->cert_a);
    assert_string_equal((char *)s->key, m->key_a);
    cma_cred_snap_release(s);
    s = take(c, &warned);
    assert_false(warned); /* once */
    cma_cred_snap_release(s);
    cma_test_tls_put("c.key", m->key_b); /* now the pair is complete */
    s = take(c, &warned);
    assert_false(warned);
    assert_string_equal((char *)s->cert, m->cert_b);
    assert_string_equal((char *)s->key, m->key_b);
    cma_cred_snap_release(s);
    /* a snapshot taken before the rotation is still whole (a request in flight) */
    assert_string_equal((char *)before->cert, m->cert_a);
    assert_string_equal((char *)before->key, m->key_a);
    cma_cred_snap_release(before);
    assert_int_equal(cma_creds_generation(c), 1);
    cma_creds_free(c);
}

static void test_cma_creds_take__ca_and_password(void **state)
{
    (void)state;
    cma_test_tls_put("ca.crt", m->cert_a);
    cma_test_tls_put("password", "pa:ss w0rd!\n");
    struct cma_cred_spec spec = {
        .ca = {.label = "ca", .file = cma_test_tls_path("ca.crt")},
        .username = "user",
        .password = {.label = "pw", .file = cma_test_tls_path("password")}};
    struct cma_creds *c = creds_for(&spec);
    bool warned = false;
    struct cma_cred_snap *s = take(c, &warned);
    assert_string_equal(s->username, "user");
    assert_string_equal(s->password, "pa:ss w0rd!");
    assert_string_equal((char *)s->ca, m->cert_a);
    assert_null(s->authorization);
    cma_cred_snap_release(s);
    char half[4096];
    snprintf(half, sizeof(half), "%.*s", (int)(strlen(m->cert_b) / 2), m->cert_b);
    cma_test_tls_put("ca.crt", half);
    cma_test_tls_put("password", "new\n");
    s = take(c, &warned);
    assert_true(warned);
    assert_string_equal((char *)s->ca, m->cert_a); /* the half-written bundle is refused */
    assert_string_equal(s->password, "new");       /* the password is taken */
    cma_cred_snap_release(s);
    cma_test_tls_put("ca.crt", m->cert_b);
    s = take(c, &warned);
    assert_false(warned);
    assert_string_equal((char *)s->ca, m->cert_b);
    CURL *h = curl_easy_init();
    assert_non_null(h);
    assert_int_equal(cma_cred_snap_setopt(s, h, NULL), CMA_OK);
    curl_easy_cleanup(h);
    cma_cred_snap_release(s);
    cma_creds_free(c);
}

/* ---- the Prometheus client --------------------------------------------------------------- */

static const char *const QUERY_OK =
    "{\"status\":\"success\",\"data\":{\"resultType\":\"vector\",\"result\":[]}}";

static void query(struct cma_prom *p)
{
    struct cma_prom_result *r = NULL;
    struct cma_err err;
    cma_err_clear(&err);
    if (cma_prom_query(p, "up", 0, NULL, NULL, &r, &err) != CMA_OK)
        fail_msg("cma_prom_query: %s", err.msg);
    cma_prom_result_free(r);
}

static void test_cma_prom__token_file_rotates(void **state)
{
    (void)state;
    struct cma_fake_answer a = {.status = 200, .body = QUERY_OK};
    struct cma_fake_http *s = cma_fake_http_start(&a, 1);
    assert_non_null(s);
    char *url = cma_fake_http_url(s, "");
    cma_test_tls_put("prom-token", "one\n");
    const char *headers[] = {"X-Scope-OrgID=t1"};
    struct cma_prom_config cfg = {.url = url,
                                  .token_file = cma_test_tls_path("prom-token"),
                                  .headers = headers,
                                  .n_headers = 1};
    struct cma_prom *p = NULL;
    assert_int_equal(cma_prom_new(&cfg, &p, NULL), CMA_OK);
    query(p);
    cma_test_tls_put("prom-token", "two\n");
    query(p);
    assert_int_equal(cma_fake_http_count(s), 2);
    assert_true(cma_fake_http_has_header(s, 0, "Authorization: Bearer one"));
    assert_true(cma_fake_http_has_header(s, 1, "Authorization: Bearer two"));
    assert_true(cma_fake_http_has_header(s, 1, "X-Scope-OrgID: t1"));
    cma_prom_free(p);
    cma_fake_http_stop(s);
    free(url);
}

static void test_cma_prom_new__auth_sources_and_precedence(void **state)
{
    (void)state;
    struct cma_fake_answer a = {.status = 200, .body = QUERY_OK};
    struct cma_fake_http *s = cma_fake_http_start(&a, 1);
    assert_non_null(s);
    char *url = cma_fake_http_url(s, "");
    cma_test_tls_put("kc-token", "from-kubeconfig\n");
    cma_test_tls_put("flag-token", "from-flag\n");
    char kc[2048];
    snprintf(kc, sizeof(kc),
             "apiVersion: v1\nkind: Config\ncurrent-context: p\n"
             "clusters: [{name: c, cluster: {server: 'https://ignored.invalid'}}]\n"
             "users: [{name: u, user: {tokenFile: kc-token, username: x, password: y}}]\n"
             "contexts: [{name: p, context: {cluster: c, user: u}}]\n");
    cma_test_tls_put("prom.kubeconfig", kc);
    struct cma_prom_config cfg = {.url = url, .auth_config = cma_test_tls_path("prom.kubeconfig")};
    struct cma_prom *p = NULL;
    assert_int_equal(cma_prom_new(&cfg, &p, NULL), CMA_OK);
    query(p); /* the kubeconfig's tokenFile (relative to it), not its basic auth, not its server */
    cma_prom_free(p);
    cfg.token_file = cma_test_tls_path("flag-token");
    assert_int_equal(cma_prom_new(&cfg, &p, NULL), CMA_OK);
    query(p); /* the flag wins */
    cma_prom_free(p);
    assert_true(cma_fake_http_has_header(s, 0, "Authorization: Bearer from-kubeconfig"));
    assert_true(cma_fake_http_has_header(s, 1, "Authorization: Bearer from-flag"));
    /* in-cluster: the service-account directory's token */
    mkdir(cma_test_tls_path("sadir"), 0755);
    cma_test_tls_put("sadir/token", "sa-token\n");
    struct cma_prom_config ic = {
        .url = url, .auth_incluster = true, .service_account_dir = cma_test_tls_path("sadir")};
    assert_int_equal(cma_prom_new(&ic, &p, NULL), CMA_OK);
    query(p);
    cma_prom_free(p);
    assert_true(cma_fake_http_has_header(s, 2, "Authorization: Bearer sa-token"));
    /* refused combinations and broken material */
    p = NULL;
    struct cma_err err;
    cma_err_clear(&err);
    ic.auth_config = cma_test_tls_path("prom.kubeconfig");
    assert_int_equal(cma_prom_new(&ic, &p, &err), CMA_ERR_FLAG);
    assert_non_null(strstr(err.msg, "may not use both"));
    cma_test_tls_put("sadir/ca.crt", "garbage");
    ic.auth_config = NULL;
    cma_err_clear(&err);
    assert_int_equal(cma_prom_new(&ic, &p, &err), CMA_ERR_TLS);
    assert_non_null(strstr(err.msg, "--prometheus-auth-incluster"));
    assert_non_null(strstr(err.msg, "ca.crt"));
    cfg.basic_username = "user";
    cma_err_clear(&err);
    assert_int_equal(cma_prom_new(&cfg, &p, &err), CMA_ERR_FLAG);
    assert_non_null(strstr(err.msg, "give one of them"));
    struct cma_prom_config bad = {.url = url, .ca_file = cma_test_tls_path("garbage.pem")};
    cma_test_tls_put("garbage.pem", "nope");
    cma_err_clear(&err);
    assert_int_equal(cma_prom_new(&bad, &p, &err), CMA_ERR_TLS);
    assert_non_null(strstr(err.msg, "--prometheus-ca-file"));
    assert_non_null(strstr(err.msg, cma_test_tls_path("garbage.pem")));
    assert_null(p);
    cma_fake_http_stop(s);
    free(url);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cma_tlsmat_check_ca__bundles),
        cmocka_unit_test(test_cma_tlsmat_check_pair__match_mismatch_garbage),
        cmocka_unit_test(test_cma_creds_new__fails_fast_with_label_path_reason),
        cmocka_unit_test(test_cma_creds_take__token_rewritten_in_place),
        cmocka_unit_test(test_cma_creds_take__settled_file_changed_by_signature),
        cmocka_unit_test(test_cma_creds_take__projected_volume_swap),
        cmocka_unit_test(test_cma_creds_take__pair_swapped_only_when_it_matches),
        cmocka_unit_test(test_cma_creds_take__ca_and_password),
        cmocka_unit_test(test_cma_prom__token_file_rotates),
        cmocka_unit_test(test_cma_prom_new__auth_sources_and_precedence),
    };
    return cmocka_run_group_tests(tests, cma_test_tls_setup, cma_test_tls_teardown);
}
