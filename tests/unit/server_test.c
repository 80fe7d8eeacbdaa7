/* server_test.c: the HTTPS server (server.c) and its TLS material (tls.c), end to end over real
 * TLS with libcurl (and OpenSSL for raw requests) as the client: status/body/header round trip,
 * raw paths, query decoding, keep-alive, concurrency, body limits, client-certificate requests,
 * TLS versions and cipher suites, the self-signed certificate generator; and the connection
 * model: the worker pool (workpool.c), absolute deadlines (conntrack.c), 429 when every worker
 * is busy while probes still answer, per-client limits, invalid request targets and draining.
 * Loopback connections and file reads go through the shared helpers of fakehttp.h. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <arpa/inet.h>
#include <errno.h>
#include <ftw.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <curl/curl.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

#include "cma/buf.h"
#include "cma/err.h"
#include "cma/server.h"
#include "cma/tls.h"

#include "../../src/http/http_internal.h"
#include "fakehttp.h"

#define EXTRA_DNS "custom-metrics-adapter.monitoring.svc"

/* ----- fixture: one server for most tests, and what the handler saw ----- */

struct seen {
    char method[16];
    char path[256];
    size_t n_query;
    char keys[8][64];
    char values[8][64];
    char first_dup[16];
    char header[64];
    bool header_present;
};

static struct {
    char dir[64];
    char cert_path[256];
    char key_path[256];
    char client_dir[128]; /* an unrelated pair used as client certificate */
    char client_cert[256];
    char client_key[256];
    struct cma_server *server;
    int port;

    pthread_mutex_t lock;
    pthread_cond_t cond;
    struct seen seen;
    bool slow_started;
    bool slow_released;
    atomic_int handler_calls;
} fx = {.lock = PTHREAD_MUTEX_INITIALIZER, .cond = PTHREAD_COND_INITIALIZER};

static void copy_str(char *dst, size_t dst_len, const char *src)
{
    snprintf(dst, dst_len, "%s", src ? src : "");
}

static void handle_slow(struct cma_response *resp)
{
    pthread_mutex_lock(&fx.lock);
    fx.slow_started = true;
    pthread_cond_broadcast(&fx.cond);
    struct timespec deadline;
    clock_gettime(CLOCK_REALTIME, &deadline);
    deadline.tv_sec += 20; /* safety net: the test releases it long before */
    while (!fx.slow_released) {
        if (pthread_cond_timedwait(&fx.cond, &fx.lock, &deadline) == ETIMEDOUT)
            break;
    }
    pthread_mutex_unlock(&fx.lock);
    cma_buf_appends(&resp->body, "slow");
}

static void handle_peer(const struct cma_request *req, struct cma_response *resp)
{
    const unsigned char *der = NULL;
    size_t len = 0;
    enum cma_errc rc = cma_request_peer_cert_der(req, &der, &len);
    if (cma_request_has_peer_cert(req) && rc == CMA_OK) {
        cma_buf_printf(&resp->body, "peer=yes chain=%zu der=", cma_request_peer_chain_len(req));
        for (size_t i = 0; i < len; i++)
            cma_buf_printf(&resp->body, "%02x", der[i]);
    } else {
        cma_buf_printf(&resp->body, "peer=no rc=%d", (int)rc);
    }
}

static void test_handler(void *app, const struct cma_request *req, struct cma_response *resp)
{
    (void)app;
    atomic_fetch_add(&fx.handler_calls, 1);
    if (strcmp(req->path, "/slow") == 0) {
        handle_slow(resp);
        return;
    }
    if (strcmp(req->path, "/fast") == 0) {
        cma_buf_appends(&resp->body, "fast");
        return;
    }
    if (strcmp(req->path, "/peer") == 0) {
        handle_peer(req, resp);
        return;
    }
    if (strcmp(req->path, "/created") == 0) {
        resp->status = 201;
        resp->content_type = "text/plain; charset=utf-8";
        cma_buf_appends(&resp->body, "created");
        return;
    }
    if (strcmp(req->path, "/badstatus") == 0) {
        resp->status = 42;
        return;
    }
    pthread_mutex_lock(&fx.lock);
    struct seen *s = &fx.seen;
    memset(s, 0, sizeof *s);
    copy_str(s->method, sizeof s->method, req->method);
    copy_str(s->path, sizeof s->path, req->path);
    s->n_query = req->n_query;
    for (size_t i = 0; i < req->n_query && i < 8; i++) {
        copy_str(s->keys[i], sizeof s->keys[i], req->query[i].key);
        copy_str(s->values[i], sizeof s->values[i], req->query[i].value);
    }
    copy_str(s->first_dup, sizeof s->first_dup, cma_request_query(req, "dup"));
    const char *h = cma_request_header(req, "x-test-header");
    s->header_present = h != NULL;
    copy_str(s->header, sizeof s->header, h);
    pthread_mutex_unlock(&fx.lock);
    cma_buf_appends(&resp->body, "{\"ok\":true}");
}

/* ----- curl helpers ----- */

struct reply {
    CURLcode cc;
    long status;
    long http_version;
    long num_connects;
    struct cma_buf body;
    struct cma_buf headers;
};

static size_t on_body(char *ptr, size_t size, size_t n, void *userdata)
{
    struct cma_buf *b = userdata;
    return cma_buf_append(b, ptr, size * n) == CMA_OK ? size * n : 0;
}

static void reply_init(struct reply *r)
{
    memset(r, 0, sizeof *r);
    cma_buf_init(&r->body, 0);
    cma_buf_init(&r->headers, 0);
}

static void reply_done(struct reply *r)
{
    cma_buf_done(&r->body);
    cma_buf_done(&r->headers);
}

/* A handle for https://127.0.0.1:<port><path> that trusts the generated certificate file. */
static CURL *easy_for(int port, const char *path, struct reply *r)
{
    CURL *e = curl_easy_init();
    assert_non_null(e);
    char url[512];
    snprintf(url, sizeof url, "https://127.0.0.1:%d%s", port, path);
    curl_easy_setopt(e, CURLOPT_URL, url);
    curl_easy_setopt(e, CURLOPT_CAINFO, fx.cert_path);
    curl_easy_setopt(e, CURLOPT_SSL_VERIFYPEER, 1L);
    curl_easy_setopt(e, CURLOPT_SSL_VERIFYHOST, 2L);
    curl_easy_setopt(e, CURLOPT_TIMEOUT, 60L);
    curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(e, CURLOPT_HTTP_VERSION, (long)CURL_HTTP_VERSION_1_1);
    curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(e, CURLOPT_WRITEDATA, &r->body);
    curl_easy_setopt(e, CURLOPT_HEADERFUNCTION, on_body);
    curl_easy_setopt(e, CURLOPT_HEADERDATA, &r->headers);
    return e;
}

static void perform(CURL *e, struct reply *r)
{
    cma_buf_clear(&r->body);
    cma_buf_clear(&r->headers);
    r->cc = curl_easy_perform(e);
    curl_easy_getinfo(e, CURLINFO_RESPONSE_CODE, &r->status);
    curl_easy_getinfo(e, CURLINFO_HTTP_VERSION, &r->http_version);
    curl_easy_getinfo(e, CURLINFO_NUM_CONNECTS, &r->num_connects);
}

/* GET (or what `e` was set up for) on the fixture server; handle cleaned up. */
static void fetch(const char *path, struct reply *r)
{
    CURL *e = easy_for(fx.port, path, r);
    perform(e, r);
    curl_easy_cleanup(e);
}

/* GET path on another server than the fixture's. */
static void fetch_port(int port, const char *path, struct reply *r)
{
    CURL *e = easy_for(port, path, r);
    perform(e, r);
    curl_easy_cleanup(e);
}

/* Value of response header `name` (case-insensitive) copied into out; false when absent. */
static bool header_value(const struct reply *r, const char *name, char *out, size_t out_len)
{
    const char *p = cma_buf_str(&r->headers);
    size_t nlen = strlen(name);
    while (*p) {
        const char *eol = strstr(p, "\r\n");
        if (!eol)
            eol = p + strlen(p);
        if ((size_t)(eol - p) > nlen && strncasecmp(p, name, nlen) == 0 && p[nlen] == ':') {
            const char *v = p + nlen + 1;
            while (*v == ' ')
                v++;
            snprintf(out, out_len, "%.*s", (int)(eol - v), v);
            return true;
        }
        p = *eol ? eol + 2 : eol;
    }
    return false;
}

/* The handshake and request deadlines are far above the defaults (10 s) unless a test is about
 * them: under qemu user emulation (the arm64 build's tests) on a busy machine, twenty TLS
 * handshakes started at once can take longer than 10 s, and a cut connection is no answer. */
static struct cma_server_config base_config(void)
{
    struct cma_server_config cfg = {
        .bind_address = "127.0.0.1",
        .port = 0,
        .cert_file = fx.cert_path,
        .key_file = fx.key_path,
        .tls_handshake_timeout_ms = 120000,
        .request_header_timeout_ms = 120000,
    };
    return cfg;
}

static struct cma_server *start_or_fail(const struct cma_server_config *cfg)
{
    struct cma_server *s = NULL;
    struct cma_err err;
    cma_err_clear(&err);
    enum cma_errc rc = cma_server_start(cfg, test_handler, NULL, &s, &err);
    if (rc != CMA_OK)
        fail_msg("cma_server_start: %s", err.msg);
    assert_non_null(s);
    assert_true(cma_server_port(s) > 0);
    return s;
}

/* ----- group setup ----- */

static int rm_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)sb;
    (void)flag;
    (void)ftw;
    return remove(path);
}

static int group_setup(void **state)
{
    (void)state;
    signal(SIGPIPE, SIG_IGN);
    curl_global_init(CURL_GLOBAL_DEFAULT);
    snprintf(fx.dir, sizeof fx.dir, "/tmp/cma-server-test-XXXXXX");
    if (!mkdtemp(fx.dir))
        return -1;
    char cert_dir[128];
    snprintf(cert_dir, sizeof cert_dir, "%s/serving", fx.dir);
    const char *extra[] = {EXTRA_DNS};
    struct cma_err err;
    cma_err_clear(&err);
    if (cma_tls_ensure_self_signed(cert_dir, extra, 1, fx.cert_path, sizeof fx.cert_path,
                                   fx.key_path, sizeof fx.key_path, &err) != CMA_OK) {
        fprintf(stderr, "ensure_self_signed: %s\n", err.msg);
        return -1;
    }
    snprintf(fx.client_dir, sizeof fx.client_dir, "%s/client", fx.dir);
    if (cma_tls_ensure_self_signed(fx.client_dir, NULL, 0, fx.client_cert, sizeof fx.client_cert,
                                   fx.client_key, sizeof fx.client_key, &err) != CMA_OK) {
        fprintf(stderr, "ensure_self_signed (client): %s\n", err.msg);
        return -1;
    }
    struct cma_server_config cfg = base_config();
    cfg.bind_address = "127.0.0.1";
    if (cma_server_start(&cfg, test_handler, NULL, &fx.server, &err) != CMA_OK) {
        fprintf(stderr, "cma_server_start: %s\n", err.msg);
        return -1;
    }
    fx.port = cma_server_port(fx.server);
    return 0;
}

static int group_teardown(void **state)
{
    (void)state;
    cma_server_stop(fx.server);
    fx.server = NULL;
    nftw(fx.dir, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
    curl_global_cleanup();
    return 0;
}

/* ----- tls.c ----- */

static X509 *read_leaf(const char *path)
{
    FILE *f = fopen(path, "r");
    assert_non_null(f);
    X509 *x = PEM_read_X509(f, NULL, NULL, NULL);
    fclose(f);
    assert_non_null(x);
    return x;
}

static char *slurp(const char *path)
{
    char *text = cma_file_read(path, NULL);
    if (!text)
        fail_msg("cannot read %s", path);
    return text;
}

static void write_file(const char *path, const char *content)
{
    if (!cma_file_write(path, content))
        fail_msg("cannot write %s", path);
}

static void test_cma_tls_ensure_self_signed__creates_dirs_and_valid_pair(void **state)
{
    (void)state;
    char dir[256];
    char cert[256];
    char key[256];
    snprintf(dir, sizeof dir, "%s/nested/deeper/certs/", fx.dir);
    const char *extra[] = {"svc.ns.svc", "10.0.0.7"};
    struct cma_err err;
    cma_err_clear(&err);
    assert_int_equal(
        cma_tls_ensure_self_signed(dir, extra, 2, cert, sizeof cert, key, sizeof key, &err),
        CMA_OK);
    char expect[300];
    snprintf(expect, sizeof expect, "%sapiserver.crt", dir);
    assert_string_equal(cert, expect);
    struct stat st;
    assert_int_equal(stat(dir, &st), 0);
    assert_int_equal(st.st_mode & 0777, 0700);
    snprintf(expect, sizeof expect, "%s/nested", fx.dir);
    assert_int_equal(stat(expect, &st), 0);
    assert_int_equal(st.st_mode & 0777, 0700);
    assert_int_equal(stat(key, &st), 0);
    assert_int_equal(st.st_mode & 0777, 0600);
    assert_int_equal(cma_tls_check_pair(cert, key, &err), CMA_OK);

    X509 *leaf = read_leaf(cert);
    assert_int_equal(X509_check_host(leaf, "localhost", 0, 0, NULL), 1);
    assert_int_equal(X509_check_host(leaf, "svc.ns.svc", 0, 0, NULL), 1);
    assert_int_equal(X509_check_host(leaf, "other.example", 0, 0, NULL), 0);
    assert_int_equal(X509_check_ip_asc(leaf, "127.0.0.1", 0), 1);
    assert_int_equal(X509_check_ip_asc(leaf, "::1", 0), 1);
    assert_int_equal(X509_check_ip_asc(leaf, "10.0.0.7", 0), 1);
    assert_int_equal(X509_check_ca(leaf), 0);
    assert_true((X509_get_extended_key_usage(leaf) & XKU_SSL_SERVER) != 0);
    char cn[128];
    X509_NAME_get_text_by_NID(X509_get_subject_name(leaf), NID_commonName, cn, sizeof cn);
    assert_true(strncmp(cn, "localhost@", 10) == 0);
    EVP_PKEY *pub = X509_get0_pubkey(leaf);
    assert_int_equal(EVP_PKEY_get_base_id(pub), EVP_PKEY_EC);
    assert_int_equal(EVP_PKEY_get_bits(pub), 256);
    assert_int_equal(X509_get_signature_nid(leaf), NID_ecdsa_with_SHA256);
    /* valid from about an hour ago for about a year */
    time_t now = time(NULL);
    time_t t = now - 3000;
    assert_true(X509_cmp_time(X509_get0_notBefore(leaf), &t) < 0);
    t = now + 364L * 86400;
    assert_true(X509_cmp_time(X509_get0_notAfter(leaf), &t) > 0);
    t = now + 366L * 86400;
    assert_true(X509_cmp_time(X509_get0_notAfter(leaf), &t) < 0);

    /* the second PEM block is the CA that signed the leaf */
    FILE *f = fopen(cert, "r");
    assert_non_null(f);
    X509 *first = PEM_read_X509(f, NULL, NULL, NULL);
    X509 *ca = PEM_read_X509(f, NULL, NULL, NULL);
    fclose(f);
    assert_non_null(first);
    assert_non_null(ca);
    assert_int_equal(X509_check_ca(ca), 1);
    assert_int_equal(X509_verify(leaf, X509_get0_pubkey(ca)), 1);
    X509_free(first);
    X509_free(ca);
    X509_free(leaf);
}

static void test_cma_tls_ensure_self_signed__reuses_valid_pair(void **state)
{
    (void)state;
    char dir[256];
    char cert[256];
    char key[256];
    snprintf(dir, sizeof dir, "%s/reuse", fx.dir);
    assert_int_equal(
        cma_tls_ensure_self_signed(dir, NULL, 0, cert, sizeof cert, key, sizeof key, NULL), CMA_OK);
    char *cert1 = slurp(cert);
    char *key1 = slurp(key);
    assert_int_equal(
        cma_tls_ensure_self_signed(dir, NULL, 0, cert, sizeof cert, key, sizeof key, NULL), CMA_OK);
    char *cert2 = slurp(cert);
    char *key2 = slurp(key);
    assert_string_equal(cert1, cert2);
    assert_string_equal(key1, key2);
    free(cert1);
    free(cert2);
    free(key1);
    free(key2);
}

static void test_cma_tls_ensure_self_signed__regenerates_mismatched_pair(void **state)
{
    (void)state;
    char dir[256];
    char cert[256];
    char key[256];
    snprintf(dir, sizeof dir, "%s/mismatch", fx.dir);
    assert_int_equal(
        cma_tls_ensure_self_signed(dir, NULL, 0, cert, sizeof cert, key, sizeof key, NULL), CMA_OK);
    char *old_cert = slurp(cert);
    char *other_key = slurp(fx.client_key);
    write_file(key, other_key);
    assert_int_equal(cma_tls_check_pair(cert, key, NULL), CMA_ERR_TLS);
    assert_int_equal(
        cma_tls_ensure_self_signed(dir, NULL, 0, cert, sizeof cert, key, sizeof key, NULL), CMA_OK);
    assert_int_equal(cma_tls_check_pair(cert, key, NULL), CMA_OK);
    char *new_cert = slurp(cert);
    assert_string_not_equal(old_cert, new_cert);
    free(old_cert);
    free(new_cert);
    free(other_key);
}

static void test_cma_tls_ensure_self_signed__regenerates_garbage_cert(void **state)
{
    (void)state;
    char dir[256];
    char cert[256];
    char key[256];
    snprintf(dir, sizeof dir, "%s/garbage", fx.dir);
    assert_int_equal(
        cma_tls_ensure_self_signed(dir, NULL, 0, cert, sizeof cert, key, sizeof key, NULL), CMA_OK);
    write_file(cert, "-----BEGIN CERTIFICATE-----\nnot base64 at all\n-----END CERTIFICATE-----\n");
    assert_int_equal(cma_tls_check_pair(cert, key, NULL), CMA_ERR_TLS);
    assert_int_equal(
        cma_tls_ensure_self_signed(dir, NULL, 0, cert, sizeof cert, key, sizeof key, NULL), CMA_OK);
    assert_int_equal(cma_tls_check_pair(cert, key, NULL), CMA_OK);
}

static void test_cma_tls_ensure_self_signed__rejects_bad_dns_name(void **state)
{
    (void)state;
    char dir[256];
    char cert[256];
    char key[256];
    snprintf(dir, sizeof dir, "%s/baddns", fx.dir);
    const char *extra[] = {"ok.example", "evil,DNS:attacker.example"};
    struct cma_err err;
    cma_err_clear(&err);
    assert_int_equal(
        cma_tls_ensure_self_signed(dir, extra, 2, cert, sizeof cert, key, sizeof key, &err),
        CMA_ERR_TLS);
    assert_non_null(strstr(err.msg, "evil,DNS:attacker.example"));
    assert_int_equal(access(cert, F_OK), -1);
}

static void test_cma_tls_ensure_self_signed__path_too_long(void **state)
{
    (void)state;
    char cert[16];
    char key[256];
    struct cma_err err;
    cma_err_clear(&err);
    assert_int_equal(
        cma_tls_ensure_self_signed(fx.dir, NULL, 0, cert, sizeof cert, key, sizeof key, &err),
        CMA_ERR_TLS);
    assert_non_null(strstr(err.msg, "longer than"));
}

static void test_cma_tls_ensure_self_signed__dir_is_a_file(void **state)
{
    (void)state;
    char dir[256];
    char cert[256];
    char key[256];
    snprintf(dir, sizeof dir, "%s/plainfile", fx.dir);
    write_file(dir, "x");
    struct cma_err err;
    cma_err_clear(&err);
    assert_int_equal(
        cma_tls_ensure_self_signed(dir, NULL, 0, cert, sizeof cert, key, sizeof key, &err),
        CMA_ERR_IO);
    assert_non_null(strstr(err.msg, "not a directory"));
}

static void test_cma_tls_check_pair__mismatch(void **state)
{
    (void)state;
    struct cma_err err;
    cma_err_clear(&err);
    assert_int_equal(cma_tls_check_pair(fx.cert_path, fx.client_key, &err), CMA_ERR_TLS);
    assert_non_null(strstr(err.msg, "does not match"));
}

static void test_cma_tls_check_pair__missing_file(void **state)
{
    (void)state;
    struct cma_err err;
    cma_err_clear(&err);
    assert_int_equal(cma_tls_check_pair("/nonexistent/x.crt", fx.key_path, &err), CMA_ERR_TLS);
    assert_non_null(strstr(err.msg, "/nonexistent/x.crt"));
}

static void test_cma_tls_check_pair__encrypted_key_refused_without_prompt(void **state)
{
    (void)state;
    char path[256];
    snprintf(path, sizeof path, "%s/encrypted.key", fx.dir);
    FILE *in = fopen(fx.key_path, "r");
    assert_non_null(in);
    EVP_PKEY *k = PEM_read_PrivateKey(in, NULL, NULL, NULL);
    fclose(in);
    assert_non_null(k);
    FILE *out = fopen(path, "w");
    assert_non_null(out);
    assert_int_equal(
        PEM_write_PrivateKey(out, k, EVP_aes_128_cbc(), (unsigned char *)"secret", 6, NULL, NULL),
        1);
    fclose(out);
    EVP_PKEY_free(k);
    struct cma_err err;
    cma_err_clear(&err);
    assert_int_equal(cma_tls_check_pair(fx.cert_path, path, &err), CMA_ERR_TLS);
    assert_non_null(strstr(err.msg, "unencrypted"));
}

/* ----- server.c ----- */

static void test_cma_server_start__round_trip_status_body_headers(void **state)
{
    (void)state;
    struct reply r;
    reply_init(&r);
    CURL *e = easy_for(fx.port, "/created", &r);
    struct curl_slist *hdrs = curl_slist_append(NULL, "Audit-ID: 6c1f-audit");
    curl_easy_setopt(e, CURLOPT_HTTPHEADER, hdrs);
    perform(e, &r);
    curl_easy_cleanup(e);
    curl_slist_free_all(hdrs);
    assert_int_equal(r.cc, CURLE_OK);
    assert_int_equal(r.status, 201);
    assert_string_equal(cma_buf_str(&r.body), "created");
    char v[128];
    assert_true(header_value(&r, "Content-Type", v, sizeof v));
    assert_string_equal(v, "text/plain; charset=utf-8");
    assert_true(header_value(&r, "Content-Length", v, sizeof v));
    assert_string_equal(v, "7");
    assert_true(header_value(&r, "Cache-Control", v, sizeof v));
    assert_string_equal(v, "no-cache, private");
    assert_true(header_value(&r, "X-Content-Type-Options", v, sizeof v));
    assert_string_equal(v, "nosniff");
    assert_true(header_value(&r, "Audit-Id", v, sizeof v));
    assert_string_equal(v, "6c1f-audit");

    fetch("/plain", &r);
    assert_int_equal(r.cc, CURLE_OK);
    assert_int_equal(r.status, 200);
    assert_string_equal(cma_buf_str(&r.body), "{\"ok\":true}");
    assert_true(header_value(&r, "Content-Type", v, sizeof v));
    assert_string_equal(v, "application/json");
    assert_false(header_value(&r, "Audit-Id", v, sizeof v));
    reply_done(&r);
}

static void test_cma_server_start__certificate_names_verify(void **state)
{
    (void)state;
    const char *names[] = {"localhost", EXTRA_DNS};
    for (size_t i = 0; i < 2; i++) {
        struct reply r;
        reply_init(&r);
        CURL *e = easy_for(fx.port, "/fast", &r);
        char url[256];
        char resolve[256];
        snprintf(url, sizeof url, "https://%s:%d/fast", names[i], fx.port);
        snprintf(resolve, sizeof resolve, "%s:%d:127.0.0.1", names[i], fx.port);
        struct curl_slist *res = curl_slist_append(NULL, resolve);
        curl_easy_setopt(e, CURLOPT_URL, url);
        curl_easy_setopt(e, CURLOPT_RESOLVE, res);
        perform(e, &r);
        curl_easy_cleanup(e);
        curl_slist_free_all(res);
        assert_int_equal(r.cc, CURLE_OK);
        assert_string_equal(cma_buf_str(&r.body), "fast");
        reply_done(&r);
    }
    /* a name not in the certificate fails verification */
    struct reply r;
    reply_init(&r);
    CURL *e = easy_for(fx.port, "/fast", &r);
    char url[256];
    char resolve[256];
    snprintf(url, sizeof url, "https://wrong.example:%d/fast", fx.port);
    snprintf(resolve, sizeof resolve, "wrong.example:%d:127.0.0.1", fx.port);
    struct curl_slist *res = curl_slist_append(NULL, resolve);
    curl_easy_setopt(e, CURLOPT_URL, url);
    curl_easy_setopt(e, CURLOPT_RESOLVE, res);
    perform(e, &r);
    curl_easy_cleanup(e);
    curl_slist_free_all(res);
    assert_int_not_equal(r.cc, CURLE_OK);
    reply_done(&r);
}

static void test_cma_request_query__plus_is_space_and_percent_decoded(void **state)
{
    (void)state;
    struct reply r;
    reply_init(&r);
    fetch("/apis/q?labelSelector=app+in+%28a%2Cb%29&plus=%2B&flag&empty=&dup=1&dup=2&k%3Dx=v%3D1",
          &r);
    assert_int_equal(r.cc, CURLE_OK);
    assert_int_equal(r.status, 200);
    pthread_mutex_lock(&fx.lock);
    struct seen s = fx.seen;
    pthread_mutex_unlock(&fx.lock);
    assert_string_equal(s.path, "/apis/q");
    assert_int_equal(s.n_query, 7);
    assert_string_equal(s.keys[0], "labelSelector");
    assert_string_equal(s.values[0], "app in (a,b)");
    assert_string_equal(s.keys[1], "plus");
    assert_string_equal(s.values[1], "+");
    assert_string_equal(s.keys[2], "flag");
    assert_string_equal(s.values[2], "");
    assert_string_equal(s.keys[3], "empty");
    assert_string_equal(s.values[3], "");
    assert_string_equal(s.keys[4], "dup");
    assert_string_equal(s.values[5], "2");
    assert_string_equal(s.first_dup, "1");
    assert_string_equal(s.keys[6], "k=x");
    assert_string_equal(s.values[6], "v=1");
    reply_done(&r);
}

static void test_cma_request_query__malformed_escape_is_400(void **state)
{
    (void)state;
    const char *paths[] = {"/q?a=%zz", "/q?a=%00", "/q?a=%4"};
    for (size_t i = 0; i < 3; i++) {
        int before = atomic_load(&fx.handler_calls);
        struct reply r;
        reply_init(&r);
        fetch(paths[i], &r);
        assert_int_equal(r.cc, CURLE_OK);
        assert_int_equal(r.status, 400);
        assert_non_null(strstr(cma_buf_str(&r.body), "\"reason\":\"BadRequest\""));
        assert_int_equal(atomic_load(&fx.handler_calls), before);
        char v[64];
        assert_true(header_value(&r, "Content-Type", v, sizeof v));
        assert_string_equal(v, "application/json");
        reply_done(&r);
    }
}

static void test_cma_request_query__absent_is_null(void **state)
{
    (void)state;
    struct cma_kv kv = {"a", "1"};
    struct cma_request req = {.method = "GET", .path = "/", .query = &kv, .n_query = 1};
    assert_string_equal(cma_request_query(&req, "a"), "1");
    assert_null(cma_request_query(&req, "b"));
    assert_null(cma_request_query(NULL, "a"));
}

static void test_on_request__path_arrives_raw(void **state)
{
    (void)state;
    const char *paths[] = {"/apis/x/pods/%2A/m", "/apis/a%2Fb/c%20d", "/apis/x+y"};
    for (size_t i = 0; i < 3; i++) {
        struct reply r;
        reply_init(&r);
        fetch(paths[i], &r);
        assert_int_equal(r.cc, CURLE_OK);
        assert_int_equal(r.status, 200);
        pthread_mutex_lock(&fx.lock);
        struct seen s = fx.seen;
        pthread_mutex_unlock(&fx.lock);
        assert_string_equal(s.path, paths[i]);
        assert_string_equal(s.method, "GET");
        assert_int_equal(s.n_query, 0);
        reply_done(&r);
    }
}

static void test_cma_request_header__case_insensitive(void **state)
{
    (void)state;
    struct reply r;
    reply_init(&r);
    CURL *e = easy_for(fx.port, "/h", &r);
    struct curl_slist *hdrs = curl_slist_append(NULL, "X-TEST-Header: Some Value");
    curl_easy_setopt(e, CURLOPT_HTTPHEADER, hdrs);
    perform(e, &r);
    curl_easy_cleanup(e);
    curl_slist_free_all(hdrs);
    assert_int_equal(r.status, 200);
    pthread_mutex_lock(&fx.lock);
    struct seen s = fx.seen;
    pthread_mutex_unlock(&fx.lock);
    assert_true(s.header_present);
    assert_string_equal(s.header, "Some Value");

    fetch("/h", &r);
    pthread_mutex_lock(&fx.lock);
    s = fx.seen;
    pthread_mutex_unlock(&fx.lock);
    assert_false(s.header_present);
    reply_done(&r);

    struct cma_request fake = {.method = "GET", .path = "/"};
    assert_null(cma_request_header(&fake, "x"));
    assert_false(cma_request_has_peer_cert(&fake));
}

static void test_cma_server_start__keep_alive_reuses_connection(void **state)
{
    (void)state;
    struct reply r;
    reply_init(&r);
    CURL *e = easy_for(fx.port, "/fast", &r);
    perform(e, &r);
    assert_int_equal(r.cc, CURLE_OK);
    assert_int_equal(r.num_connects, 1);
    for (int i = 0; i < 3; i++) {
        perform(e, &r);
        assert_int_equal(r.cc, CURLE_OK);
        assert_string_equal(cma_buf_str(&r.body), "fast");
        assert_int_equal(r.num_connects, 0);
    }
    curl_easy_cleanup(e);
    reply_done(&r);
}

struct slow_call {
    atomic_bool done;
    struct reply r;
};

static void *slow_thread(void *arg)
{
    struct slow_call *c = arg;
    CURL *e = easy_for(fx.port, "/slow", &c->r);
    perform(e, &c->r);
    curl_easy_cleanup(e);
    atomic_store(&c->done, true);
    return NULL;
}

static void test_cma_server_start__fast_requests_not_blocked_by_slow(void **state)
{
    (void)state;
    pthread_mutex_lock(&fx.lock);
    fx.slow_started = false;
    fx.slow_released = false;
    pthread_mutex_unlock(&fx.lock);
    struct slow_call slow;
    atomic_init(&slow.done, false);
    reply_init(&slow.r);
    pthread_t tid;
    assert_int_equal(pthread_create(&tid, NULL, slow_thread, &slow), 0);
    /* wait until the slow handler is running (it then blocks until released) */
    pthread_mutex_lock(&fx.lock);
    while (!fx.slow_started)
        pthread_cond_wait(&fx.cond, &fx.lock);
    pthread_mutex_unlock(&fx.lock);

    enum { N = 20 };
    struct reply replies[N];
    CURL *easies[N];
    CURLM *multi = curl_multi_init();
    assert_non_null(multi);
    for (int i = 0; i < N; i++) {
        reply_init(&replies[i]);
        easies[i] = easy_for(fx.port, "/fast", &replies[i]);
        curl_easy_setopt(easies[i], CURLOPT_FRESH_CONNECT, 1L);
        assert_int_equal(curl_multi_add_handle(multi, easies[i]), CURLM_OK);
    }
    int running = 1;
    while (running) {
        assert_int_equal(curl_multi_perform(multi, &running), CURLM_OK);
        if (running)
            curl_multi_poll(multi, NULL, 0, 100, NULL);
    }
    int ok = 0;
    CURLMsg *msg;
    int left;
    while ((msg = curl_multi_info_read(multi, &left))) {
        if (msg->msg == CURLMSG_DONE && msg->data.result == CURLE_OK)
            ok++;
    }
    for (int i = 0; i < N; i++) {
        long status = 0;
        curl_easy_getinfo(easies[i], CURLINFO_RESPONSE_CODE, &status);
        assert_int_equal(status, 200);
        assert_string_equal(cma_buf_str(&replies[i].body), "fast");
        curl_multi_remove_handle(multi, easies[i]);
        curl_easy_cleanup(easies[i]);
        reply_done(&replies[i]);
    }
    curl_multi_cleanup(multi);
    assert_int_equal(ok, N);
    /* all 20 fast requests completed while /slow was still in its handler */
    assert_false(atomic_load(&slow.done));

    pthread_mutex_lock(&fx.lock);
    fx.slow_released = true;
    pthread_cond_broadcast(&fx.cond);
    pthread_mutex_unlock(&fx.lock);
    pthread_join(tid, NULL);
    assert_true(atomic_load(&slow.done));
    assert_int_equal(slow.r.cc, CURLE_OK);
    assert_string_equal(cma_buf_str(&slow.r.body), "slow");
    reply_done(&slow.r);
}

struct upload {
    size_t left;
};

static size_t read_zeros(char *buf, size_t size, size_t n, void *userdata)
{
    struct upload *u = userdata;
    size_t want = size * n < u->left ? size * n : u->left;
    memset(buf, 'x', want);
    u->left -= want;
    return want;
}

/* POSTs `len` bytes, with Content-Length or chunked; returns the status, body in r. */
static void post_bytes(size_t len, bool chunked, struct reply *r)
{
    CURL *e = easy_for(fx.port, "/upload", r);
    struct upload u = {len};
    curl_easy_setopt(e, CURLOPT_POST, 1L);
    curl_easy_setopt(e, CURLOPT_READFUNCTION, read_zeros);
    curl_easy_setopt(e, CURLOPT_READDATA, &u);
    struct curl_slist *hdrs = NULL;
    if (chunked)
        hdrs = curl_slist_append(hdrs, "Transfer-Encoding: chunked");
    else
        curl_easy_setopt(e, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)len);
    curl_easy_setopt(e, CURLOPT_HTTPHEADER, hdrs);
    perform(e, r);
    curl_easy_cleanup(e);
    curl_slist_free_all(hdrs);
}

static void test_on_request__body_over_1mib_is_413(void **state)
{
    (void)state;
    struct reply r;
    reply_init(&r);
    /* exactly 1 MiB is accepted and the handler runs */
    int before = atomic_load(&fx.handler_calls);
    post_bytes((size_t)1 << 20, false, &r);
    assert_int_equal(r.cc, CURLE_OK);
    assert_int_equal(r.status, 200);
    assert_int_equal(atomic_load(&fx.handler_calls), before + 1);
    pthread_mutex_lock(&fx.lock);
    assert_string_equal(fx.seen.method, "POST");
    pthread_mutex_unlock(&fx.lock);

    const char *expect =
        "{\"kind\":\"Status\",\"apiVersion\":\"v1\",\"metadata\":{},\"status\":\"Failure\","
        "\"message\":\"request body too large\",\"reason\":\"RequestEntityTooLarge\",\"code\":413}";
    before = atomic_load(&fx.handler_calls);
    post_bytes(((size_t)1 << 20) + 1, false, &r);
    assert_int_equal(r.status, 413);
    assert_string_equal(cma_buf_str(&r.body), expect);
    post_bytes((size_t)3 << 20, true, &r);
    assert_int_equal(r.status, 413);
    assert_string_equal(cma_buf_str(&r.body), expect);
    assert_int_equal(atomic_load(&fx.handler_calls), before);

    /* a body that goes on and on gets the connection closed, without running the handler */
    post_bytes((size_t)17 << 20, true, &r);
    assert_true(r.cc != CURLE_OK || r.status == 413);
    assert_int_not_equal(r.status, 200);
    assert_int_equal(atomic_load(&fx.handler_calls), before);

    /* the server still answers afterwards */
    fetch("/fast", &r);
    assert_int_equal(r.status, 200);
    reply_done(&r);
}

static void test_on_request__head_has_no_body(void **state)
{
    (void)state;
    struct reply r;
    reply_init(&r);
    CURL *e = easy_for(fx.port, "/created", &r);
    curl_easy_setopt(e, CURLOPT_NOBODY, 1L);
    perform(e, &r);
    curl_easy_cleanup(e);
    assert_int_equal(r.cc, CURLE_OK);
    assert_int_equal(r.status, 201);
    assert_int_equal(r.body.len, 0);
    char v[64];
    assert_true(header_value(&r, "Content-Length", v, sizeof v));
    assert_string_equal(v, "7");
    reply_done(&r);
}

static void test_run_handler__invalid_status_is_500(void **state)
{
    (void)state;
    struct reply r;
    reply_init(&r);
    fetch("/badstatus", &r);
    assert_int_equal(r.cc, CURLE_OK);
    assert_int_equal(r.status, 500);
    assert_non_null(strstr(cma_buf_str(&r.body), "\"reason\":\"InternalError\""));
    reply_done(&r);
}

static void test_cma_server_start__never_negotiates_h2(void **state)
{
    (void)state;
    struct reply r;
    reply_init(&r);
    CURL *e = easy_for(fx.port, "/fast", &r);
    curl_easy_setopt(e, CURLOPT_HTTP_VERSION, (long)CURL_HTTP_VERSION_2TLS);
    perform(e, &r);
    curl_easy_cleanup(e);
    assert_int_equal(r.cc, CURLE_OK);
    assert_int_equal(r.http_version, CURL_HTTP_VERSION_1_1);
    assert_string_equal(cma_buf_str(&r.body), "fast");
    reply_done(&r);
}

/* DER of the first certificate of a PEM file, as lower-case hex. */
static char *der_hex(const char *pem_path)
{
    X509 *x = read_leaf(pem_path);
    unsigned char *der = NULL;
    int len = i2d_X509(x, &der);
    assert_true(len > 0);
    char *hex = malloc((size_t)len * 2 + 1);
    assert_non_null(hex);
    for (int i = 0; i < len; i++)
        sprintf(hex + 2 * i, "%02x", der[i]);
    OPENSSL_free(der);
    X509_free(x);
    return hex;
}

static void fetch_peer(int port, bool with_cert, struct reply *r)
{
    CURL *e = easy_for(port, "/peer", r);
    if (with_cert) {
        curl_easy_setopt(e, CURLOPT_SSLCERT, fx.client_cert);
        curl_easy_setopt(e, CURLOPT_SSLKEY, fx.client_key);
    }
    perform(e, r);
    curl_easy_cleanup(e);
}

static void test_cma_request_peer_cert_der__client_cert_requested(void **state)
{
    (void)state;
    char *hex = der_hex(fx.client_cert);
    char expect[16384];
    char expect_none[32];
    /* the client sends its whole file: leaf and its CA */
    snprintf(expect, sizeof expect, "peer=yes chain=2 der=%s", hex);
    snprintf(expect_none, sizeof expect_none, "peer=no rc=%d", (int)CMA_ERR_NOT_FOUND);
    struct reply r;
    reply_init(&r);
    fetch_peer(fx.port, true, &r);
    assert_int_equal(r.cc, CURLE_OK);
    assert_string_equal(cma_buf_str(&r.body), expect);
    fetch_peer(fx.port, false, &r);
    assert_int_equal(r.cc, CURLE_OK);
    assert_string_equal(cma_buf_str(&r.body), expect_none);

    /* with a client CA bundle the request still succeeds for a cert from another CA */
    struct cma_server_config cfg = base_config();
    cfg.client_ca_file = fx.cert_path;
    struct cma_server *s = start_or_fail(&cfg);
    fetch_peer(cma_server_port(s), true, &r);
    assert_int_equal(r.cc, CURLE_OK);
    assert_string_equal(cma_buf_str(&r.body), expect);
    fetch_peer(cma_server_port(s), false, &r);
    assert_int_equal(r.cc, CURLE_OK);
    assert_string_equal(cma_buf_str(&r.body), expect_none);
    cma_server_stop(s);
    reply_done(&r);
    free(hex);
}

/* Fetches /fast from `port` with the client limited to TLS versions min..max. */
static CURLcode fetch_with_tls(int port, long min_max, const char *ciphers)
{
    struct reply r;
    reply_init(&r);
    CURL *e = easy_for(port, "/fast", &r);
    curl_easy_setopt(e, CURLOPT_SSLVERSION, min_max);
    /* let OpenSSL itself offer old versions, so the server is what refuses them */
    curl_easy_setopt(e, CURLOPT_SSL_CIPHER_LIST, ciphers ? ciphers : "DEFAULT:@SECLEVEL=0");
    perform(e, &r);
    curl_easy_cleanup(e);
    CURLcode cc = r.cc;
    if (cc == CURLE_OK)
        assert_string_equal(cma_buf_str(&r.body), "fast");
    reply_done(&r);
    return cc;
}

static void test_cma_server_start__tls_min_version(void **state)
{
    (void)state;
    long tls11 = CURL_SSLVERSION_TLSv1_1 | CURL_SSLVERSION_MAX_TLSv1_1;
    long tls12 = CURL_SSLVERSION_TLSv1_2 | CURL_SSLVERSION_MAX_TLSv1_2;
    long tls13 = CURL_SSLVERSION_TLSv1_3 | CURL_SSLVERSION_MAX_TLSv1_3;
    /* default (VersionTLS12) */
    assert_int_not_equal(fetch_with_tls(fx.port, tls11, NULL), CURLE_OK);
    /* control: the same client is served when the server allows TLS 1.0+, so the refusal
     * above is the server's doing, not the client's */
    struct cma_server_config old = base_config();
    old.tls_min_version = "VersionTLS10";
    struct cma_server *s10 = start_or_fail(&old);
    assert_int_equal(fetch_with_tls(cma_server_port(s10), tls11, NULL), CURLE_OK);
    cma_server_stop(s10);
    assert_int_equal(fetch_with_tls(fx.port, tls12, NULL), CURLE_OK);
    assert_int_equal(fetch_with_tls(fx.port, tls13, NULL), CURLE_OK);

    struct cma_server_config cfg = base_config();
    cfg.tls_min_version = "VersionTLS13";
    struct cma_server *s = start_or_fail(&cfg);
    assert_int_not_equal(fetch_with_tls(cma_server_port(s), tls12, NULL), CURLE_OK);
    assert_int_equal(fetch_with_tls(cma_server_port(s), tls13, NULL), CURLE_OK);
    cma_server_stop(s);
}

static void test_cma_server_start__cipher_suites(void **state)
{
    (void)state;
    long tls12 = CURL_SSLVERSION_TLSv1_2 | CURL_SSLVERSION_MAX_TLSv1_2;
    long tls13 = CURL_SSLVERSION_TLSv1_3 | CURL_SSLVERSION_MAX_TLSv1_3;
    struct cma_server_config cfg = base_config();
    cfg.tls_cipher_suites =
        "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256, TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305";
    struct cma_server *s = start_or_fail(&cfg);
    int port = cma_server_port(s);
    assert_int_equal(fetch_with_tls(port, tls12, "ECDHE-ECDSA-AES128-GCM-SHA256"), CURLE_OK);
    assert_int_equal(fetch_with_tls(port, tls12, "ECDHE-ECDSA-CHACHA20-POLY1305"), CURLE_OK);
    assert_int_not_equal(fetch_with_tls(port, tls12, "ECDHE-ECDSA-AES128-SHA"), CURLE_OK);
    assert_int_equal(fetch_with_tls(port, tls13, NULL), CURLE_OK);
    cma_server_stop(s);
    /* the fixture server (no list) accepts that CBC suite: the list is what refused it */
    assert_int_equal(fetch_with_tls(fx.port, tls12, "ECDHE-ECDSA-AES128-SHA:@SECLEVEL=0"),
                     CURLE_OK);

    cfg.tls_cipher_suites = "TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA";
    s = start_or_fail(&cfg);
    assert_int_equal(fetch_with_tls(cma_server_port(s), tls12, "ECDHE-ECDSA-AES128-SHA"), CURLE_OK);
    assert_int_equal(fetch_with_tls(cma_server_port(s), tls13, NULL), CURLE_OK);
    cma_server_stop(s);

    /* the list kube-prometheus ships */
    cfg.tls_cipher_suites =
        "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305,TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305,"
        "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256,TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384,"
        "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256,TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384,"
        "TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA,TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA256,"
        "TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA,TLS_ECDHE_RSA_WITH_AES_256_CBC_SHA,"
        "TLS_ECDHE_ECDSA_WITH_AES_256_CBC_SHA,TLS_RSA_WITH_AES_128_GCM_SHA256,"
        "TLS_RSA_WITH_AES_256_GCM_SHA384,TLS_RSA_WITH_AES_128_CBC_SHA,TLS_RSA_WITH_AES_256_CBC_SHA";
    s = start_or_fail(&cfg);
    assert_int_equal(fetch_with_tls(cma_server_port(s), tls12, "ECDHE-ECDSA-AES256-GCM-SHA384"),
                     CURLE_OK);
    cma_server_stop(s);
}

static void expect_start_error(const struct cma_server_config *cfg, enum cma_errc code,
                               const char *fragment)
{
    struct cma_server *s = NULL;
    struct cma_err err;
    cma_err_clear(&err);
    assert_int_equal(cma_server_start(cfg, test_handler, NULL, &s, &err), code);
    assert_null(s);
    if (!strstr(err.msg, fragment))
        fail_msg("error \"%s\" does not mention \"%s\"", err.msg, fragment);
}

static void test_cma_server_start__rejects_bad_tls_options(void **state)
{
    (void)state;
    struct cma_server_config cfg = base_config();
    cfg.tls_cipher_suites = "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256,TLS_RSA_WITH_RC4_128_SHA";
    expect_start_error(&cfg, CMA_ERR_TLS, "TLS_RSA_WITH_RC4_128_SHA");
    cfg = base_config();
    cfg.tls_min_version = "VersionTLS14";
    expect_start_error(&cfg, CMA_ERR_TLS, "VersionTLS14");
    cfg = base_config();
    cfg.key_file = fx.client_key;
    expect_start_error(&cfg, CMA_ERR_TLS, fx.client_key);
    cfg = base_config();
    cfg.cert_file = "/nonexistent/tls.crt";
    expect_start_error(&cfg, CMA_ERR_TLS, "/nonexistent/tls.crt");
    cfg = base_config();
    cfg.client_ca_file = fx.key_path; /* no certificate in it */
    expect_start_error(&cfg, CMA_ERR_TLS, fx.key_path);
}

static void test_cma_server_start__bind_errors(void **state)
{
    (void)state;
    struct cma_server_config cfg = base_config();
    cfg.bind_address = "localhost";
    expect_start_error(&cfg, CMA_ERR_FLAG, "localhost");
    cfg = base_config();
    cfg.port = 70000;
    expect_start_error(&cfg, CMA_ERR_FLAG, "70000");
    cfg = base_config();
    cfg.port = fx.port; /* already in use by the fixture */
    expect_start_error(&cfg, CMA_ERR_IO, "127.0.0.1");
}

/* ----- serving certificate reload ----- */

/* True when a fresh TLS handshake on `port` presents the certificate in `ca_file` (each
 * generated certificate is self-signed, so it verifies only against itself). */
static bool served_cert_is(int port, const char *ca_file)
{
    struct reply r;
    reply_init(&r);
    CURL *e = easy_for(port, "/fast", &r);
    curl_easy_setopt(e, CURLOPT_CAINFO, ca_file);
    curl_easy_setopt(e, CURLOPT_FRESH_CONNECT, 1L);
    curl_easy_setopt(e, CURLOPT_FORBID_REUSE, 1L);
    curl_easy_setopt(e, CURLOPT_SSL_SESSIONID_CACHE, 0L);
    perform(e, &r);
    curl_easy_cleanup(e);
    bool ok = r.cc == CURLE_OK && strcmp(cma_buf_str(&r.body), "fast") == 0;
    reply_done(&r);
    return ok;
}

static void copy_file(const char *from, const char *to)
{
    FILE *in = fopen(from, "rb");
    assert_non_null(in);
    char tmp[512];
    snprintf(tmp, sizeof tmp, "%s.tmp", to);
    FILE *out = fopen(tmp, "wb");
    assert_non_null(out);
    char chunk[4096];
    size_t n;
    while ((n = fread(chunk, 1, sizeof chunk, in)) > 0)
        assert_int_equal(fwrite(chunk, 1, n, out), n);
    fclose(in);
    assert_int_equal(fclose(out), 0);
    assert_int_equal(rename(tmp, to), 0); /* a new inode, as a Secret volume update gives */
}

struct rotation {
    char a_cert[256], a_key[256], b_cert[256], b_key[256];
    char cert[256], key[256];
};

/* Two independent pairs A and B; the served files start as a copy of A. */
static void rotation_setup(struct rotation *rot, const char *name)
{
    char dir[256];
    snprintf(dir, sizeof dir, "%s/%s-a", fx.dir, name);
    assert_int_equal(cma_tls_ensure_self_signed(dir, NULL, 0, rot->a_cert, sizeof rot->a_cert,
                                                rot->a_key, sizeof rot->a_key, NULL),
                     CMA_OK);
    snprintf(dir, sizeof dir, "%s/%s-b", fx.dir, name);
    assert_int_equal(cma_tls_ensure_self_signed(dir, NULL, 0, rot->b_cert, sizeof rot->b_cert,
                                                rot->b_key, sizeof rot->b_key, NULL),
                     CMA_OK);
    snprintf(rot->cert, sizeof rot->cert, "%s/%s-tls.crt", fx.dir, name);
    snprintf(rot->key, sizeof rot->key, "%s/%s-tls.key", fx.dir, name);
    copy_file(rot->a_cert, rot->cert);
    copy_file(rot->a_key, rot->key);
}

static void test_cma_server_reload_tls__new_handshake_sees_new_certificate(void **state)
{
    (void)state;
    struct rotation rot;
    rotation_setup(&rot, "rotate");
    struct cma_server_config cfg = base_config();
    cfg.cert_file = rot.cert;
    cfg.key_file = rot.key;
    cfg.tls_reload_interval_ms = 3600u * 1000u; /* only the explicit calls below */
    struct cma_server *s = start_or_fail(&cfg);
    int port = cma_server_port(s);
    assert_true(served_cert_is(port, rot.a_cert));
    assert_false(served_cert_is(port, rot.b_cert));
    /* unchanged files: nothing to do */
    assert_int_equal(cma_server_reload_tls(s, NULL), CMA_OK);
    assert_int_equal(cma_server_tls_reloads(s), 0);

    copy_file(rot.b_cert, rot.cert);
    copy_file(rot.b_key, rot.key);
    struct cma_err err;
    cma_err_clear(&err);
    assert_int_equal(cma_server_reload_tls(s, &err), CMA_OK);
    assert_int_equal(cma_server_tls_reloads(s), 1);
    assert_true(served_cert_is(port, rot.b_cert));
    assert_false(served_cert_is(port, rot.a_cert));
    cma_server_stop(s);
}

static void test_cma_server_reload_tls__broken_replacement_keeps_old(void **state)
{
    (void)state;
    struct rotation rot;
    rotation_setup(&rot, "broken");
    struct cma_server_config cfg = base_config();
    cfg.cert_file = rot.cert;
    cfg.key_file = rot.key;
    cfg.tls_reload_interval_ms = 3600u * 1000u;
    struct cma_server *s = start_or_fail(&cfg);
    int port = cma_server_port(s);
    assert_true(served_cert_is(port, rot.a_cert));

    /* half-rotated: B's certificate with A's key */
    copy_file(rot.b_cert, rot.cert);
    struct cma_err err;
    cma_err_clear(&err);
    assert_int_equal(cma_server_reload_tls(s, &err), CMA_ERR_TLS);
    assert_non_null(strstr(err.msg, "does not match"));
    assert_true(served_cert_is(port, rot.a_cert));

    /* garbage certificate */
    FILE *f = fopen(rot.cert, "w");
    assert_non_null(f);
    fputs("-----BEGIN CERTIFICATE-----\nnot base64\n-----END CERTIFICATE-----\n", f);
    assert_int_equal(fclose(f), 0);
    cma_err_clear(&err);
    assert_int_equal(cma_server_reload_tls(s, &err), CMA_ERR_TLS);
    assert_non_null(strstr(err.msg, rot.cert));
    assert_true(served_cert_is(port, rot.a_cert));

    /* missing key file */
    assert_int_equal(remove(rot.key), 0);
    copy_file(rot.b_cert, rot.cert);
    assert_int_equal(cma_server_reload_tls(s, NULL), CMA_ERR_TLS);
    assert_true(served_cert_is(port, rot.a_cert));
    assert_int_equal(cma_server_tls_reloads(s), 0);

    /* the rotation completes: the next check takes it */
    copy_file(rot.b_key, rot.key);
    assert_int_equal(cma_server_reload_tls(s, NULL), CMA_OK);
    assert_int_equal(cma_server_tls_reloads(s), 1);
    assert_true(served_cert_is(port, rot.b_cert));
    cma_server_stop(s);
}

static void test_cma_server_start__watcher_reloads_rotated_files(void **state)
{
    (void)state;
    struct rotation rot;
    rotation_setup(&rot, "watch");
    struct cma_server_config cfg = base_config();
    cfg.cert_file = rot.cert;
    cfg.key_file = rot.key;
    cfg.tls_reload_interval_ms = 50;
    struct cma_server *s = start_or_fail(&cfg);
    int port = cma_server_port(s);
    assert_true(served_cert_is(port, rot.a_cert));
    copy_file(rot.b_key, rot.key);
    copy_file(rot.b_cert, rot.cert);
    /* wait for the watcher (generous bound; usually within 100 ms) */
    for (int i = 0; i < 600 && cma_server_tls_reloads(s) == 0; i++) {
        struct timespec ts = {0, 50 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    assert_true(cma_server_tls_reloads(s) >= 1);
    assert_true(served_cert_is(port, rot.b_cert));
    assert_false(served_cert_is(port, rot.a_cert));
    cma_server_stop(s);
}

static bool ipv6_loopback_available(void)
{
    int fd = socket(AF_INET6, SOCK_STREAM, 0);
    if (fd < 0)
        return false;
    struct sockaddr_in6 a = {.sin6_family = AF_INET6, .sin6_addr = in6addr_loopback};
    bool ok = bind(fd, (struct sockaddr *)&a, sizeof a) == 0;
    close(fd);
    return ok;
}

static void test_cma_server_start__dual_stack_any(void **state)
{
    (void)state;
    struct cma_server_config cfg = base_config();
    cfg.bind_address = "::";
    struct cma_server *s = start_or_fail(&cfg);
    int port = cma_server_port(s);
    /* IPv4 clients reach a "::" listener */
    struct reply r;
    reply_init(&r);
    CURL *e = easy_for(port, "/fast", &r);
    perform(e, &r);
    curl_easy_cleanup(e);
    assert_int_equal(r.cc, CURLE_OK);
    assert_string_equal(cma_buf_str(&r.body), "fast");
    if (ipv6_loopback_available()) {
        char url[128];
        snprintf(url, sizeof url, "https://[::1]:%d/fast", port);
        e = easy_for(port, "/fast", &r);
        curl_easy_setopt(e, CURLOPT_URL, url);
        perform(e, &r);
        curl_easy_cleanup(e);
        assert_int_equal(r.cc, CURLE_OK);
        assert_string_equal(cma_buf_str(&r.body), "fast");
    }
    reply_done(&r);
    cma_server_stop(s);
    cma_server_stop(NULL);
}

/* ----- connection model: worker pool, deadlines, limits, targets, drain ----- */

/* A job for the pool tests: counts its start, then waits until the gate opens. */
static struct {
    pthread_mutex_t lock;
    pthread_cond_t cond;
    int started;
    bool open;
} gate = {.lock = PTHREAD_MUTEX_INITIALIZER, .cond = PTHREAD_COND_INITIALIZER};

static void gated_job(void *arg)
{
    (void)arg;
    pthread_mutex_lock(&gate.lock);
    gate.started++;
    pthread_cond_broadcast(&gate.cond);
    while (!gate.open)
        pthread_cond_wait(&gate.cond, &gate.lock);
    pthread_mutex_unlock(&gate.lock);
}

static void gate_reset(void)
{
    pthread_mutex_lock(&gate.lock);
    gate.started = 0;
    gate.open = false;
    pthread_mutex_unlock(&gate.lock);
}

static void gate_wait_started(int n)
{
    pthread_mutex_lock(&gate.lock);
    while (gate.started < n)
        pthread_cond_wait(&gate.cond, &gate.lock);
    pthread_mutex_unlock(&gate.lock);
}

static void gate_release(void)
{
    pthread_mutex_lock(&gate.lock);
    gate.open = true;
    pthread_cond_broadcast(&gate.cond);
    pthread_mutex_unlock(&gate.lock);
}

static int64_t mono_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void test_cma_workpool_submit__runs_jobs_concurrently_up_to_the_limit(void **state)
{
    (void)state;
    gate_reset();
    struct cma_workpool *p = NULL;
    assert_int_equal(cma_workpool_new(1, 3, 100, &p, NULL), CMA_OK);
    assert_int_equal(cma_workpool_threads(p), 0); /* threads start on demand */
    for (int i = 0; i < 3; i++)
        assert_true(cma_workpool_submit(p, gated_job, NULL));
    gate_wait_started(3); /* all three run at once: none waits behind another */
    assert_int_equal(cma_workpool_busy(p), 3);
    assert_false(cma_workpool_submit(p, gated_job, NULL)); /* no queue: refused */
    assert_false(cma_workpool_wait_idle(p, mono_ms() + 50));
    gate_release();
    assert_true(cma_workpool_wait_idle(p, mono_ms() + 30000));
    assert_int_equal(cma_workpool_busy(p), 0);
    /* idle threads beyond min_threads exit */
    int64_t deadline = mono_ms() + 30000;
    while (cma_workpool_threads(p) > 1 && mono_ms() < deadline)
        usleep(10000);
    assert_int_equal(cma_workpool_threads(p), 1);
    /* and the pool keeps working */
    gate_reset();
    gate_release();
    assert_true(cma_workpool_submit(p, gated_job, NULL));
    assert_true(cma_workpool_wait_idle(p, mono_ms() + 30000));
    cma_workpool_free(p);
    cma_workpool_free(NULL);
    assert_int_not_equal(cma_workpool_new(2, 1, 100, &p, NULL), CMA_OK);
}

/* True when the peer of a tracked descriptor sees end-of-file within timeout_ms. */
static bool peer_sees_eof(int fd, int timeout_ms)
{
    struct pollfd pfd = {.fd = fd, .events = POLLIN};
    if (poll(&pfd, 1, timeout_ms) != 1)
        return false;
    char b;
    return read(fd, &b, 1) == 0;
}

static void test_cma_conntrack_drain__cuts_idle_and_handshaking_only(void **state)
{
    (void)state;
    struct cma_conntrack_config cfg = {.handshake_ms = 60000, .header_ms = 60000, .idle_ms = 60000};
    struct cma_conntrack *t = NULL;
    assert_int_equal(cma_conntrack_new(&cfg, &t, NULL), CMA_OK);
    enum { HS, HDR, BUSY, IDLE, N };
    int sv[N][2];
    struct cma_conn *c[N];
    int owner = 7;
    for (int i = 0; i < N; i++) {
        assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, sv[i]), 0);
        c[i] = cma_conntrack_add(t, sv[i][0], &owner);
        assert_non_null(c[i]);
        assert_ptr_equal(cma_conn_owner(c[i]), &owner);
    }
    cma_conntrack_set_phase(c[HDR], CMA_CONN_HEADERS);
    cma_conntrack_set_phase(c[BUSY], CMA_CONN_HEADERS);
    cma_conntrack_set_phase(c[BUSY], CMA_CONN_BUSY);
    cma_conntrack_set_phase(c[IDLE], CMA_CONN_BUSY);
    cma_conntrack_set_phase(c[IDLE], CMA_CONN_IDLE);
    struct cma_conntrack_stats st;
    cma_conntrack_stats(t, &st);
    assert_int_equal(st.open, N);
    assert_int_equal(st.busy, 1);
    cma_conntrack_drain(t);
    assert_true(peer_sees_eof(sv[HS][1], 5000));
    assert_true(peer_sees_eof(sv[IDLE][1], 5000));
    assert_false(peer_sees_eof(sv[HDR][1], 0));
    assert_false(peer_sees_eof(sv[BUSY][1], 0));
    assert_int_equal(cma_conntrack_phase(c[HS]), CMA_CONN_CUT);
    assert_int_equal(cma_conntrack_phase(c[HDR]), CMA_CONN_HEADERS);
    /* a busy connection that finishes while draining is cut instead of kept alive */
    cma_conntrack_set_phase(c[BUSY], CMA_CONN_IDLE);
    assert_true(peer_sees_eof(sv[BUSY][1], 5000));
    /* a cut connection stays cut */
    cma_conntrack_set_phase(c[HS], CMA_CONN_HEADERS);
    assert_int_equal(cma_conntrack_phase(c[HS]), CMA_CONN_CUT);
    cma_conntrack_stats(t, &st);
    assert_int_equal(st.cut_drain, 3);
    assert_int_equal(st.cut_deadline, 0);
    assert_int_equal(st.busy, 0);
    assert_false(cma_conntrack_wait_empty(t, mono_ms() + 20));
    for (int i = 0; i < N; i++) {
        cma_conntrack_remove(c[i]);
        close(sv[i][0]);
        close(sv[i][1]);
    }
    assert_true(cma_conntrack_wait_empty(t, mono_ms() + 20));
    cma_conntrack_remove(NULL);
    cma_conntrack_free(t);
}

/* The tracker's reports (on_event), summed; the sweeper thread writes, the test reads. */
struct conntrack_events {
    pthread_mutex_t mu;
    uint64_t cut, handshake, request, keep_alive, evicted, calls;
};

static void record_conntrack_event(void *ctx, const struct cma_conntrack_event *ev)
{
    struct conntrack_events *e = ctx;
    pthread_mutex_lock(&e->mu);
    e->calls++;
    if (ev->kind == CMA_CONNTRACK_CUT_DEADLINE) {
        e->cut += ev->n;
        e->handshake += ev->handshake;
        e->request += ev->request;
        e->keep_alive += ev->keep_alive;
    } else if (ev->kind == CMA_CONNTRACK_EVICTED) {
        e->evicted += ev->n;
    }
    pthread_mutex_unlock(&e->mu);
}

/* Waits (up to 5 s: reports come at most once a second) until *field reaches want. */
static uint64_t wait_events(struct conntrack_events *e, const uint64_t *field, uint64_t want)
{
    int64_t deadline = mono_ms() + 5000;
    for (;;) {
        pthread_mutex_lock(&e->mu);
        uint64_t v = *field;
        pthread_mutex_unlock(&e->mu);
        if (v >= want || mono_ms() >= deadline)
            return v;
        usleep(10000);
    }
}

static void test_cma_conntrack_add__deadlines_are_absolute(void **state)
{
    (void)state;
    struct conntrack_events ev = {.mu = PTHREAD_MUTEX_INITIALIZER};
    struct cma_conntrack_config cfg = {.handshake_ms = 200,
                                       .header_ms = 200,
                                       .idle_ms = 0,
                                       .on_event = record_conntrack_event,
                                       .on_event_ctx = &ev};
    struct cma_conntrack *t = NULL;
    assert_int_equal(cma_conntrack_new(&cfg, &t, NULL), CMA_OK);
    int hs[2], hdr[2], busy[2];
    assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, hs), 0);
    assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, hdr), 0);
    assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, busy), 0);
    struct cma_conn *c_hs = cma_conntrack_add(t, hs[0], NULL);
    struct cma_conn *c_hdr = cma_conntrack_add(t, hdr[0], NULL);
    struct cma_conn *c_busy = cma_conntrack_add(t, busy[0], NULL);
    cma_conntrack_set_phase(c_hdr, CMA_CONN_HEADERS);
    cma_conntrack_set_phase(c_busy, CMA_CONN_BUSY);
    /* traffic does not matter: the deadline is the tracker's, not the socket's */
    assert_int_equal(write(hdr[1], "x", 1), 1);
    assert_true(peer_sees_eof(hs[1], 20000));
    assert_true(peer_sees_eof(hdr[1], 20000));
    assert_int_equal(cma_conntrack_phase(c_hs), CMA_CONN_CUT);
    /* no deadline while busy: still open well after the others were cut */
    assert_false(peer_sees_eof(busy[1], 300));
    assert_int_equal(cma_conntrack_phase(c_busy), CMA_CONN_BUSY);
    struct cma_conntrack_stats st;
    cma_conntrack_stats(t, &st);
    assert_int_equal(st.cut_deadline, 2);
    /* reported to the owner by phase (one event or two, as the sweeps fell) */
    assert_int_equal(wait_events(&ev, &ev.cut, 2), 2);
    assert_int_equal(ev.handshake, 1);
    assert_int_equal(ev.request, 1);
    assert_int_equal(ev.keep_alive, 0);
    assert_int_equal(ev.evicted, 0);
    cma_conntrack_remove(c_hs);
    cma_conntrack_remove(c_hdr);
    cma_conntrack_remove(c_busy);
    for (int i = 0; i < 2; i++) {
        close(hs[i]);
        close(hdr[i]);
        close(busy[i]);
    }
    cma_conntrack_free(t);
}

static void test_cma_conntrack_add__evicts_the_oldest_unused_at_max_open(void **state)
{
    (void)state;
    struct conntrack_events ev = {.mu = PTHREAD_MUTEX_INITIALIZER};
    struct cma_conntrack_config cfg = {.handshake_ms = 60000,
                                       .header_ms = 60000,
                                       .idle_ms = 60000,
                                       .max_open = 3,
                                       .on_event = record_conntrack_event,
                                       .on_event_ctx = &ev};
    struct cma_conntrack *t = NULL;
    assert_int_equal(cma_conntrack_new(&cfg, &t, NULL), CMA_OK);
    enum { IDLE, HDR, HS, BUSY, NEW1, NEW2, NEW3, N };
    int sv[N][2];
    struct cma_conn *c[N];
    for (int i = 0; i < N; i++)
        assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, sv[i]), 0);
    c[IDLE] = cma_conntrack_add(t, sv[IDLE][0], NULL);
    cma_conntrack_set_phase(c[IDLE], CMA_CONN_IDLE);
    c[HDR] = cma_conntrack_add(t, sv[HDR][0], NULL);
    cma_conntrack_set_phase(c[HDR], CMA_CONN_HEADERS);
    c[HS] = cma_conntrack_add(t, sv[HS][0], NULL);
    /* a fourth: the unfinished handshake gives its slot, before the request and the idle one */
    c[BUSY] = cma_conntrack_add(t, sv[BUSY][0], NULL);
    assert_true(peer_sees_eof(sv[HS][1], 5000));
    assert_false(peer_sees_eof(sv[IDLE][1], 0));
    assert_false(peer_sees_eof(sv[HDR][1], 0));
    cma_conntrack_set_phase(c[BUSY], CMA_CONN_BUSY);
    /* then the oldest unfinished request, then the idle keep-alive connection */
    c[NEW1] = cma_conntrack_add(t, sv[NEW1][0], NULL);
    assert_true(peer_sees_eof(sv[HDR][1], 5000));
    assert_false(peer_sees_eof(sv[IDLE][1], 0));
    cma_conntrack_set_phase(c[NEW1], CMA_CONN_BUSY);
    c[NEW2] = cma_conntrack_add(t, sv[NEW2][0], NULL);
    assert_true(peer_sees_eof(sv[IDLE][1], 5000));
    cma_conntrack_set_phase(c[NEW2], CMA_CONN_BUSY);
    /* three busy connections: nothing to take, the newcomer is simply one too many */
    c[NEW3] = cma_conntrack_add(t, sv[NEW3][0], NULL);
    assert_false(peer_sees_eof(sv[BUSY][1], 0));
    assert_false(peer_sees_eof(sv[NEW1][1], 0));
    assert_false(peer_sees_eof(sv[NEW2][1], 0));
    assert_false(peer_sees_eof(sv[NEW3][1], 0));
    struct cma_conntrack_stats st;
    cma_conntrack_stats(t, &st);
    assert_int_equal(st.cut_evict, 3);
    assert_int_equal(st.open, N);
    assert_int_equal(st.busy, 3);
    assert_int_equal(wait_events(&ev, &ev.evicted, 3), 3);
    assert_int_equal(ev.cut, 0);
    for (int i = 0; i < N; i++) {
        cma_conntrack_remove(c[i]);
        close(sv[i][0]);
        close(sv[i][1]);
    }
    cma_conntrack_free(t);
}

/* ----- raw TLS client (OpenSSL) for what curl will not send ----- */

struct raw_tls {
    int fd;
    SSL_CTX *ctx;
    SSL *ssl;
};

/* TLS handshake on a new connection; max_version 0 = any. */
static void raw_connect(int port, int max_version, struct raw_tls *t)
{
    t->fd = cma_loopback_connect(port);
    assert_true(t->fd >= 0);
    t->ctx = SSL_CTX_new(TLS_client_method());
    assert_non_null(t->ctx);
    SSL_CTX_set_verify(t->ctx, SSL_VERIFY_NONE, NULL);
    if (max_version)
        SSL_CTX_set_max_proto_version(t->ctx, max_version);
    t->ssl = SSL_new(t->ctx);
    assert_non_null(t->ssl);
    SSL_set_fd(t->ssl, t->fd);
    assert_int_equal(SSL_connect(t->ssl), 1);
}

static void raw_send(struct raw_tls *t, const char *data, size_t len)
{
    assert_int_equal(SSL_write(t->ssl, data, (int)len), (int)len);
}

/* Reads until the server closes (or 30 s pass); the bytes go to out. */
static void raw_read_all(struct raw_tls *t, struct cma_buf *out)
{
    struct timeval tv = {.tv_sec = 30};
    setsockopt(t->fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    char chunk[4096];
    int n;
    while ((n = SSL_read(t->ssl, chunk, sizeof chunk)) > 0)
        assert_int_equal(cma_buf_append(out, chunk, (size_t)n), CMA_OK);
}

static void raw_close(struct raw_tls *t)
{
    SSL_free(t->ssl);
    SSL_CTX_free(t->ctx);
    close(t->fd);
}

/* One request on a new TLS connection; the raw answer goes to out. */
static void raw_request(int port, const char *data, size_t len, struct cma_buf *out)
{
    struct raw_tls t;
    raw_connect(port, 0, &t);
    raw_send(&t, data, len);
    raw_read_all(&t, out);
    raw_close(&t);
}

static void test_on_request__invalid_target_bytes_are_400(void **state)
{
    (void)state;
    static const char *const targets[] = {"/fast\0/../x", "/fast?a=1\0b", "/fa\001st", "/fa st",
                                          "/fast\177"};
    static const size_t lens[] = {11, 11, 7, 6, 6};
    struct cma_server_stats before;
    cma_server_stats(fx.server, &before);
    int calls = atomic_load(&fx.handler_calls);
    for (size_t i = 0; i < sizeof targets / sizeof targets[0]; i++) {
        char req[256];
        int n = snprintf(req, sizeof req, "GET ");
        memcpy(req + n, targets[i], lens[i]);
        n += (int)lens[i];
        n += snprintf(req + n, sizeof req - (size_t)n,
                      " HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n");
        struct cma_buf out;
        cma_buf_init(&out, 0);
        raw_request(fx.port, req, (size_t)n, &out);
        const char *a = cma_buf_str(&out);
        if (strncmp(a, "HTTP/1.1 400 ", 13) != 0)
            fail_msg("target %zu: %.80s", i, a);
        assert_non_null(strstr(a, "Content-Type: application/json"));
        assert_non_null(strstr(a, "\"reason\":\"BadRequest\",\"code\":400}"));
        cma_buf_done(&out);
    }
    assert_int_equal(atomic_load(&fx.handler_calls), calls); /* the handler never saw them */
    struct cma_server_stats after;
    cma_server_stats(fx.server, &after);
    assert_int_equal(after.rejected_target - before.rejected_target, 5);
    /* control: the same raw client with a clean target reaches the handler */
    const char ok[] = "GET /fast?a=%00x HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n";
    struct cma_buf out;
    cma_buf_init(&out, 0);
    raw_request(fx.port, ok, sizeof ok - 1, &out);
    assert_non_null(strstr(cma_buf_str(&out), "HTTP/1.1 400 ")); /* %00 decodes to NUL */
    assert_non_null(strstr(cma_buf_str(&out), "malformed query string"));
    cma_buf_clear(&out);
    const char ok2[] = "GET /fast?a=%41 HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n";
    raw_request(fx.port, ok2, sizeof ok2 - 1, &out);
    assert_non_null(strstr(cma_buf_str(&out), "HTTP/1.1 200 "));
    assert_non_null(strstr(cma_buf_str(&out), "\r\n\r\nfast"));
    cma_buf_done(&out);
}

struct bg_fetch {
    int port;
    const char *path;
    struct reply r;
    pthread_t tid;
};

static void *bg_fetch_main(void *arg)
{
    struct bg_fetch *b = arg;
    CURL *e = easy_for(b->port, b->path, &b->r);
    perform(e, &b->r);
    curl_easy_cleanup(e);
    return NULL;
}

static void bg_start(struct bg_fetch *b, int port, const char *path)
{
    b->port = port;
    b->path = path;
    reply_init(&b->r);
    assert_int_equal(pthread_create(&b->tid, NULL, bg_fetch_main, b), 0);
}

static void slow_reset(void)
{
    pthread_mutex_lock(&fx.lock);
    fx.slow_started = false;
    fx.slow_released = false;
    pthread_mutex_unlock(&fx.lock);
}

static void slow_wait_started(void)
{
    pthread_mutex_lock(&fx.lock);
    while (!fx.slow_started)
        pthread_cond_wait(&fx.cond, &fx.lock);
    pthread_mutex_unlock(&fx.lock);
}

static void slow_release(void)
{
    pthread_mutex_lock(&fx.lock);
    fx.slow_released = true;
    pthread_cond_broadcast(&fx.cond);
    pthread_mutex_unlock(&fx.lock);
}

static void test_cma_server_start__busy_workers_429_but_probes_answer(void **state)
{
    (void)state;
    struct cma_server_config cfg = base_config();
    cfg.max_requests_inflight = 1;
    struct cma_server *s = start_or_fail(&cfg);
    int port = cma_server_port(s);
    slow_reset();
    struct bg_fetch slow;
    bg_start(&slow, port, "/slow");
    slow_wait_started(); /* the only worker is blocked */

    struct reply r;
    reply_init(&r);
    CURL *e = easy_for(port, "/fast", &r);
    perform(e, &r);
    curl_easy_cleanup(e);
    assert_int_equal(r.status, 429);
    char v[64];
    assert_true(header_value(&r, "Retry-After", v, sizeof v));
    assert_string_equal(v, "1");
    assert_non_null(strstr(cma_buf_str(&r.body), "\"reason\":\"TooManyRequests\""));
    assert_non_null(strstr(cma_buf_str(&r.body), "\"code\":429}"));
    /* a probe without credentials runs on the event thread: no worker needed */
    const char *probes[] = {"/healthz", "/livez", "/readyz/ping"};
    for (size_t i = 0; i < 3; i++) {
        fetch_port(port, probes[i], &r);
        assert_int_equal(r.status, 200);
        assert_string_equal(cma_buf_str(&r.body), "{\"ok\":true}");
    }
    /* with credentials a probe may need the network (TokenReview): a worker, so 429 here */
    e = easy_for(port, "/healthz", &r);
    struct curl_slist *hdrs = curl_slist_append(NULL, "Authorization: Bearer abc");
    curl_easy_setopt(e, CURLOPT_HTTPHEADER, hdrs);
    perform(e, &r);
    curl_easy_cleanup(e);
    curl_slist_free_all(hdrs);
    assert_int_equal(r.status, 429);
    struct cma_server_stats st;
    cma_server_stats(s, &st);
    assert_int_equal(st.rejected_busy, 2);
    assert_true(st.busy >= 1);

    slow_release();
    pthread_join(slow.tid, NULL);
    assert_int_equal(slow.r.status, 200);
    assert_string_equal(cma_buf_str(&slow.r.body), "slow");
    fetch_port(port, "/fast", &r);
    assert_int_equal(r.status, 200);
    reply_done(&slow.r);
    reply_done(&r);
    cma_server_stop(s);
}

/* try_inline for the test server: answers /fast (with its query) from memory, declines the rest
 * (and checks that the query is decoded before it is asked). */
static bool test_inline(void *app, const struct cma_request *req, struct cma_response *resp)
{
    (void)app;
    if (strcmp(req->path, "/fast") != 0)
        return false;
    const char *q = cma_request_query(req, "q");
    cma_buf_printf(&resp->body, "inline %s", q ? q : "-");
    resp->content_type = "text/plain; charset=utf-8";
    return true;
}

static void test_cma_server_start__try_inline_answers_while_workers_busy(void **state)
{
    (void)state;
    struct cma_server_config cfg = base_config();
    cfg.max_requests_inflight = 1;
    cfg.try_inline = test_inline;
    struct cma_server *s = start_or_fail(&cfg);
    int port = cma_server_port(s);
    slow_reset();
    struct bg_fetch slow;
    bg_start(&slow, port, "/slow"); /* declined: runs on the only worker */
    slow_wait_started();
    struct reply r;
    reply_init(&r);
    for (int i = 0; i < 3; i++) { /* answered on the event thread: no worker needed */
        fetch_port(port, "/fast?q=a%2Bb", &r);
        assert_int_equal(r.status, 200);
        assert_string_equal(cma_buf_str(&r.body), "inline a+b");
        char v[64];
        assert_true(header_value(&r, "Content-Type", v, sizeof v));
        assert_string_equal(v, "text/plain; charset=utf-8");
        assert_true(header_value(&r, "X-Content-Type-Options", v, sizeof v));
    }
    fetch_port(port, "/created", &r); /* declined, and the worker is busy */
    assert_int_equal(r.status, 429);
    fetch_port(port, "/fast?q=%zz", &r); /* a malformed query is answered at once too */
    assert_int_equal(r.status, 400);
    struct cma_server_stats st;
    cma_server_stats(s, &st);
    assert_int_equal(st.inline_answers, 4);
    assert_int_equal(st.rejected_busy, 1);
    slow_release();
    pthread_join(slow.tid, NULL);
    assert_int_equal(slow.r.status, 200);
    assert_string_equal(cma_buf_str(&slow.r.body), "slow");
    fetch_port(port, "/created", &r); /* declined: the worker's answer, query decoded once */
    assert_int_equal(r.status, 201);
    assert_string_equal(cma_buf_str(&r.body), "created");
    reply_done(&slow.r);
    reply_done(&r);
    cma_server_stop(s);
}

static void test_cma_server_start__tls_handshake_deadline(void **state)
{
    (void)state;
    struct cma_server_config cfg = base_config();
    cfg.tls_handshake_timeout_ms = 1000;
    cfg.request_header_timeout_ms = 60000;
    struct cma_server *s = start_or_fail(&cfg);
    int port = cma_server_port(s);
    /* a client that connects and sends nothing is cut (libmicrohttpd alone waits 120 s) */
    int idle = cma_loopback_connect(port);
    assert_true(idle >= 0);
    assert_true(peer_sees_eof(idle, 30000));
    close(idle);
    struct cma_server_stats st;
    cma_server_stats(s, &st);
    assert_int_equal(st.cut_deadline, 1);
    /* the handshake deadline ends with the handshake, TLS 1.2 and 1.3 alike: a request sent
     * after it has passed is served */
    const int versions[] = {TLS1_2_VERSION, TLS1_3_VERSION};
    for (size_t i = 0; i < 2; i++) {
        struct raw_tls t;
        raw_connect(port, versions[i], &t);
        usleep(1500 * 1000);
        const char req[] = "GET /fast HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n";
        raw_send(&t, req, sizeof req - 1);
        struct cma_buf out;
        cma_buf_init(&out, 0);
        raw_read_all(&t, &out);
        if (!strstr(cma_buf_str(&out), "\r\n\r\nfast"))
            fail_msg("TLS version %#x: %.80s", versions[i], cma_buf_str(&out));
        cma_buf_done(&out);
        raw_close(&t);
    }
    cma_server_stop(s);
}

static void test_cma_server_start__request_deadline_not_extended_by_traffic(void **state)
{
    (void)state;
    struct cma_server_config cfg = base_config();
    cfg.request_header_timeout_ms = 1000;
    struct cma_server *s = start_or_fail(&cfg);
    struct raw_tls t;
    raw_connect(cma_server_port(s), 0, &t);
    const char line[] = "GET /fast HTTP/1.1\r\n";
    raw_send(&t, line, sizeof line - 1);
    /* one header line every 100 ms, never the end of the headers: still cut (libmicrohttpd's
     * own timeout, reset by every byte, would keep it for ever) */
    bool cut = false;
    for (int i = 0; i < 300 && !cut; i++) {
        char h[64];
        int n = snprintf(h, sizeof h, "X-Drip-%d: %d\r\n", i, i);
        if (SSL_write(t.ssl, h, n) != n) {
            cut = true;
            break;
        }
        struct pollfd pfd = {.fd = t.fd, .events = POLLIN};
        char b[256];
        if (poll(&pfd, 1, 100) == 1 && SSL_read(t.ssl, b, sizeof b) <= 0)
            cut = true;
    }
    raw_close(&t);
    assert_true(cut);
    struct cma_server_stats st;
    cma_server_stats(s, &st);
    assert_int_equal(st.cut_deadline, 1);
    cma_server_stop(s);
}

/* Opens a TCP connection and waits until the server tracks `expect` connections, so that
 * connections are accepted in the order they were opened (two event loops race otherwise). */
static int tcp_connect_tracked(struct cma_server *s, size_t expect)
{
    int fd = cma_loopback_connect(cma_server_port(s));
    assert_true(fd >= 0);
    int64_t deadline = mono_ms() + 10000;
    struct cma_server_stats st;
    cma_server_stats(s, &st);
    while (st.connections < expect && mono_ms() < deadline) {
        usleep(5000);
        cma_server_stats(s, &st);
    }
    assert_int_equal(st.connections, expect);
    return fd;
}

static void test_cma_server_start__per_client_connection_limit(void **state)
{
    (void)state;
    struct cma_server_config cfg = base_config();
    cfg.max_connections_per_client = 2;
    struct cma_server *s = start_or_fail(&cfg);
    int port = cma_server_port(s);
    int a = tcp_connect_tracked(s, 1);
    int b = tcp_connect_tracked(s, 2);
    int c = cma_loopback_connect(port); /* accepted by the kernel, closed by the server */
    assert_true(c >= 0);
    assert_true(peer_sees_eof(c, 10000));
    assert_false(peer_sees_eof(a, 200));
    assert_false(peer_sees_eof(b, 0));
    close(a);
    close(c);
    /* a slot is free again once a connection closed */
    int64_t deadline = mono_ms() + 10000;
    struct cma_server_stats st;
    do {
        usleep(10000);
        cma_server_stats(s, &st);
    } while (st.connections > 1 && mono_ms() < deadline);
    struct reply r;
    reply_init(&r);
    fetch_port(port, "/fast", &r);
    assert_int_equal(r.status, 200);
    reply_done(&r);
    close(b);
    cma_server_stop(s);
}

static void test_cma_server_start__new_client_evicts_an_idle_one_at_max_connections(void **state)
{
    (void)state;
    struct cma_server_config cfg = base_config();
    cfg.max_connections = 3;
    struct cma_server *s = start_or_fail(&cfg);
    int port = cma_server_port(s);
    int idle[3];
    for (int i = 0; i < 3; i++)
        idle[i] = tcp_connect_tracked(s, (size_t)i + 1);
    struct cma_server_stats st;
    struct reply r;
    reply_init(&r);
    fetch_port(port, "/fast", &r);
    assert_int_equal(r.cc, CURLE_OK);
    assert_int_equal(r.status, 200);
    reply_done(&r);
    assert_true(peer_sees_eof(idle[0], 10000)); /* the oldest gave its slot */
    assert_false(peer_sees_eof(idle[1], 0));
    assert_false(peer_sees_eof(idle[2], 0));
    cma_server_stats(s, &st);
    assert_true(st.cut_evict >= 1);
    for (int i = 0; i < 3; i++)
        close(idle[i]);
    cma_server_stop(s);
}

static void test_cma_server_start__handler_may_outlast_the_keep_alive_timeout(void **state)
{
    (void)state;
    struct cma_server_config cfg = base_config();
    cfg.keep_alive_timeout_ms = 1000;
    struct cma_server *s = start_or_fail(&cfg);
    slow_reset();
    struct bg_fetch slow;
    bg_start(&slow, cma_server_port(s), "/slow");
    slow_wait_started();
    usleep(2500 * 1000); /* the connection waits, suspended, past the inactivity timeout */
    slow_release();
    pthread_join(slow.tid, NULL);
    assert_int_equal(slow.r.cc, CURLE_OK);
    assert_int_equal(slow.r.status, 200);
    assert_string_equal(cma_buf_str(&slow.r.body), "slow");
    reply_done(&slow.r);
    cma_server_stop(s);
}

struct bg_drain {
    struct cma_server *s;
    int64_t grace_ms;
    bool result;
    atomic_bool done;
    pthread_t tid;
};

static void *bg_drain_main(void *arg)
{
    struct bg_drain *d = arg;
    d->result = cma_server_drain(d->s, d->grace_ms);
    atomic_store(&d->done, true);
    return NULL;
}

static void test_cma_server_drain__refuses_new_and_finishes_in_flight(void **state)
{
    (void)state;
    struct cma_server *s = start_or_fail(&(struct cma_server_config){
        .bind_address = "127.0.0.1", .cert_file = fx.cert_path, .key_file = fx.key_path});
    int port = cma_server_port(s);
    int idle = tcp_connect_tracked(s, 1); /* handshaking: cut by the drain */
    slow_reset();
    struct bg_fetch slow;
    bg_start(&slow, port, "/slow");
    slow_wait_started();
    struct bg_drain d = {.s = s, .grace_ms = 30000};
    atomic_init(&d.done, false);
    assert_int_equal(pthread_create(&d.tid, NULL, bg_drain_main, &d), 0);
    assert_true(peer_sees_eof(idle, 10000));
    close(idle);
    int fd = cma_loopback_connect(port);
    assert_int_equal(fd, -1);
    assert_int_equal(errno, ECONNREFUSED);
    assert_false(atomic_load(&d.done)); /* waits for /slow */
    slow_release();
    pthread_join(slow.tid, NULL);
    pthread_join(d.tid, NULL);
    assert_true(d.result);
    assert_int_equal(slow.r.status, 200);
    assert_string_equal(cma_buf_str(&slow.r.body), "slow");
    char v[32];
    assert_true(header_value(&slow.r, "Connection", v, sizeof v));
    assert_string_equal(v, "close");
    struct cma_server_stats st;
    cma_server_stats(s, &st);
    assert_int_equal(st.connections, 0);
    assert_true(st.cut_drain >= 1);
    reply_done(&slow.r);
    cma_server_stop(s);
}

static void test_cma_server_drain__gives_up_after_the_grace_period(void **state)
{
    (void)state;
    struct cma_server *s = start_or_fail(&(struct cma_server_config){
        .bind_address = "127.0.0.1", .cert_file = fx.cert_path, .key_file = fx.key_path});
    slow_reset();
    struct bg_fetch slow;
    bg_start(&slow, cma_server_port(s), "/slow");
    slow_wait_started();
    assert_false(cma_server_drain(s, 100));
    slow_release();
    pthread_join(slow.tid, NULL);
    assert_int_equal(slow.r.status, 200);
    reply_done(&slow.r);
    /* the straggler finished: stop can now stop libmicrohttpd and free everything */
    cma_server_stop(s);
    assert_true(cma_server_drain(NULL, 0));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cma_request_query__absent_is_null),
        cmocka_unit_test(test_cma_request_query__plus_is_space_and_percent_decoded),
        cmocka_unit_test(test_cma_request_query__malformed_escape_is_400),
        cmocka_unit_test(test_cma_request_header__case_insensitive),
        cmocka_unit_test(test_cma_request_peer_cert_der__client_cert_requested),
        cmocka_unit_test(test_cma_server_start__round_trip_status_body_headers),
        cmocka_unit_test(test_cma_server_start__certificate_names_verify),
        cmocka_unit_test(test_cma_server_start__keep_alive_reuses_connection),
        cmocka_unit_test(test_cma_server_start__fast_requests_not_blocked_by_slow),
        cmocka_unit_test(test_cma_server_start__never_negotiates_h2),
        cmocka_unit_test(test_cma_server_start__tls_min_version),
        cmocka_unit_test(test_cma_server_start__cipher_suites),
        cmocka_unit_test(test_cma_server_start__rejects_bad_tls_options),
        cmocka_unit_test(test_cma_server_start__bind_errors),
        cmocka_unit_test(test_cma_server_start__dual_stack_any),
        cmocka_unit_test(test_cma_server_reload_tls__new_handshake_sees_new_certificate),
        cmocka_unit_test(test_cma_server_reload_tls__broken_replacement_keeps_old),
        cmocka_unit_test(test_cma_server_start__watcher_reloads_rotated_files),
        cmocka_unit_test(test_on_request__path_arrives_raw),
        cmocka_unit_test(test_on_request__body_over_1mib_is_413),
        cmocka_unit_test(test_on_request__head_has_no_body),
        cmocka_unit_test(test_run_handler__invalid_status_is_500),
        cmocka_unit_test(test_cma_workpool_submit__runs_jobs_concurrently_up_to_the_limit),
        cmocka_unit_test(test_cma_conntrack_drain__cuts_idle_and_handshaking_only),
        cmocka_unit_test(test_cma_conntrack_add__deadlines_are_absolute),
        cmocka_unit_test(test_cma_conntrack_add__evicts_the_oldest_unused_at_max_open),
        cmocka_unit_test(test_on_request__invalid_target_bytes_are_400),
        cmocka_unit_test(test_cma_server_start__busy_workers_429_but_probes_answer),
        cmocka_unit_test(test_cma_server_start__try_inline_answers_while_workers_busy),
        cmocka_unit_test(test_cma_server_start__tls_handshake_deadline),
        cmocka_unit_test(test_cma_server_start__request_deadline_not_extended_by_traffic),
        cmocka_unit_test(test_cma_server_start__per_client_connection_limit),
        cmocka_unit_test(test_cma_server_start__new_client_evicts_an_idle_one_at_max_connections),
        cmocka_unit_test(test_cma_server_start__handler_may_outlast_the_keep_alive_timeout),
        cmocka_unit_test(test_cma_server_drain__refuses_new_and_finishes_in_flight),
        cmocka_unit_test(test_cma_server_drain__gives_up_after_the_grace_period),
        cmocka_unit_test(test_cma_tls_ensure_self_signed__creates_dirs_and_valid_pair),
        cmocka_unit_test(test_cma_tls_ensure_self_signed__reuses_valid_pair),
        cmocka_unit_test(test_cma_tls_ensure_self_signed__regenerates_mismatched_pair),
        cmocka_unit_test(test_cma_tls_ensure_self_signed__regenerates_garbage_cert),
        cmocka_unit_test(test_cma_tls_ensure_self_signed__rejects_bad_dns_name),
        cmocka_unit_test(test_cma_tls_ensure_self_signed__path_too_long),
        cmocka_unit_test(test_cma_tls_ensure_self_signed__dir_is_a_file),
        cmocka_unit_test(test_cma_tls_check_pair__mismatch),
        cmocka_unit_test(test_cma_tls_check_pair__missing_file),
        cmocka_unit_test(test_cma_tls_check_pair__encrypted_key_refused_without_prompt),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
