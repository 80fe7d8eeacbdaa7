/* tlsmat_test.c: clients/tlsmat.c, the one TLS-material module: CA bundles, certificate + key pairs
 * (good, garbage, mismatched, expired) in memory and in files; trust stores from a bundle; the
 * serving side's PEM file reader and the clients' file reader with their messages; and the
 * change signature a reload decides by, including a rewrite in place within one timestamp tick
 * (the signature may stay, but then it is not settled, so readers compare the bytes). Keys and
 * certificates are made with OpenSSL by the shared tls_fixture.c. */
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
#include <openssl/x509.h>

#include "cma/tlsmat.h"
#include "fakehttp.h"
#include "tls_fixture.h"

static const struct cma_test_tls *const m = &cma_test_tls;

/* ---- good material ----------------------------------------------------------------------- */

static void test_cma_tlsmat__good_material(void **state)
{
    (void)state;
    char two[8192];
    snprintf(two, sizeof(two), "%s%s", m->cert_a, m->cert_b);
    struct cma_err err;
    cma_err_clear(&err);
    size_t n = 0;
    assert_int_equal(cma_tlsmat_check_ca(two, strlen(two), &n, &err), CMA_OK);
    assert_int_equal(n, 2);
    assert_int_equal(
        cma_tlsmat_check_pair(m->cert_a, strlen(m->cert_a), m->key_a, strlen(m->key_a), &err),
        CMA_OK);
    cma_test_tls_put("a.crt", m->cert_a);
    cma_test_tls_put("a.key", m->key_a);
    assert_int_equal(
        cma_tlsmat_check_pair_files(cma_test_tls_path("a.crt"), cma_test_tls_path("a.key"), &err),
        CMA_OK);
    assert_true(cma_tlsmat_leaf_current(cma_test_tls_path("a.crt")));
    X509_STORE *store = cma_tlsmat_ca_store(two, strlen(two), &n, &err);
    assert_non_null(store);
    assert_int_equal(n, 2);
    X509_STORE_free(store);
    assert_int_equal(err.code, CMA_OK);
}

/* ---- garbage, mismatched and expired material -------------------------------------------- */

static void test_cma_tlsmat__garbage_ca(void **state)
{
    (void)state;
    struct cma_err err;
    cma_err_clear(&err);
    assert_int_equal(cma_tlsmat_check_ca("garbage\n", 8, NULL, &err), CMA_ERR_TLS);
    assert_non_null(strstr(err.msg, "no PEM certificate in it"));
    cma_err_clear(&err);
    assert_null(cma_tlsmat_ca_store("garbage\n", 8, NULL, &err));
    assert_int_equal(err.code, CMA_ERR_TLS);
    assert_string_equal(err.msg, "no PEM certificate in it");
    /* a good certificate, then half of another: the check refuses it, a trust store keeps the
     * certificate that parses */
    char mixed[8192];
    snprintf(mixed, sizeof(mixed), "%s%.*s", m->cert_a, (int)(strlen(m->cert_b) / 2), m->cert_b);
    cma_err_clear(&err);
    assert_int_equal(cma_tlsmat_check_ca(mixed, strlen(mixed), NULL, &err), CMA_ERR_TLS);
    assert_non_null(strstr(err.msg, "a certificate in it does not parse"));
    size_t n = 0;
    X509_STORE *store = cma_tlsmat_ca_store(mixed, strlen(mixed), &n, NULL);
    assert_non_null(store);
    assert_int_equal(n, 1);
    X509_STORE_free(store);
}

static void test_cma_tlsmat__garbage_cert_and_key(void **state)
{
    (void)state;
    struct cma_err err;
    cma_err_clear(&err);
    assert_int_equal(cma_tlsmat_check_pair("junk", 4, m->key_a, strlen(m->key_a), &err),
                     CMA_ERR_TLS);
    assert_non_null(strstr(err.msg, "certificate: no PEM certificate in it"));
    cma_err_clear(&err);
    assert_int_equal(cma_tlsmat_check_pair(m->cert_a, strlen(m->cert_a), "junk", 4, &err),
                     CMA_ERR_TLS);
    assert_non_null(strstr(err.msg, "key: no unencrypted PEM private key in it"));
    cma_test_tls_put("junk.crt", "junk\n");
    cma_test_tls_put("a.key", m->key_a);
    cma_err_clear(&err);
    assert_int_equal(cma_tlsmat_check_pair_files(cma_test_tls_path("junk.crt"),
                                                 cma_test_tls_path("a.key"), &err),
                     CMA_ERR_TLS);
    assert_non_null(strstr(err.msg, cma_test_tls_path("junk.crt")));
    assert_false(cma_tlsmat_leaf_current(cma_test_tls_path("junk.crt")));
    cma_err_clear(&err);
    assert_int_equal(
        cma_tlsmat_check_pair_files("/nonexistent/x.crt", cma_test_tls_path("a.key"), &err),
        CMA_ERR_TLS);
    assert_non_null(strstr(err.msg, "/nonexistent/x.crt"));
    cma_err_clear(&err);
    assert_int_equal(cma_tlsmat_check_pair_files("", cma_test_tls_path("a.key"), &err),
                     CMA_ERR_TLS);
    assert_string_equal(err.msg, "a certificate file and a key file are required");
}

static void test_cma_tlsmat__mismatched_key_and_expired_leaf(void **state)
{
    (void)state;
    struct cma_err err;
    cma_err_clear(&err);
    assert_int_equal(
        cma_tlsmat_check_pair(m->cert_a, strlen(m->cert_a), m->key_b, strlen(m->key_b), &err),
        CMA_ERR_TLS);
    assert_non_null(strstr(err.msg, "the private key does not match the certificate"));
    cma_test_tls_put("a.crt", m->cert_a);
    cma_test_tls_put("b.key", m->key_b);
    cma_err_clear(&err);
    assert_int_equal(
        cma_tlsmat_check_pair_files(cma_test_tls_path("a.crt"), cma_test_tls_path("b.key"), &err),
        CMA_ERR_TLS);
    char want[1200];
    snprintf(want, sizeof(want), "certificate %s, key %s: ", cma_test_tls_path("a.crt"),
             cma_test_tls_path("b.key"));
    assert_memory_equal(err.msg, want, strlen(want));
    /* an expired pair still matches, but its leaf is not current */
    cma_test_tls_put("old.crt", m->cert_old);
    assert_int_equal(cma_tlsmat_check_pair(m->cert_old, strlen(m->cert_old), m->key_old,
                                           strlen(m->key_old), NULL),
                     CMA_OK);
    assert_false(cma_tlsmat_leaf_current(cma_test_tls_path("old.crt")));
    assert_false(cma_tlsmat_leaf_current("/nonexistent/x.crt"));
}

/* ---- reading ----------------------------------------------------------------------------- */

static void test_cma_tlsmat_read_pem__messages(void **state)
{
    (void)state;
    struct cma_err err;
    cma_err_clear(&err);
    char *pem = NULL;
    size_t len = 0;
    cma_test_tls_put("a.crt", m->cert_a);
    assert_int_equal(
        cma_tlsmat_read_pem("certificate", cma_test_tls_path("a.crt"), &pem, &len, &err), CMA_OK);
    assert_int_equal(len, strlen(m->cert_a));
    assert_string_equal(pem, m->cert_a);
    free(pem);
    cma_test_tls_put("empty.crt", "");
    assert_int_equal(
        cma_tlsmat_read_pem("certificate", cma_test_tls_path("empty.crt"), &pem, &len, &err),
        CMA_ERR_TLS);
    char want[1200];
    snprintf(want, sizeof(want), "certificate %s is empty", cma_test_tls_path("empty.crt"));
    assert_string_equal(err.msg, want);
    FILE *f = fopen(cma_test_tls_path("nul.key"), "wb");
    assert_non_null(f);
    assert_int_equal(fwrite("a\0b", 1, 3, f), 3);
    assert_int_equal(fclose(f), 0);
    cma_err_clear(&err);
    assert_int_equal(
        cma_tlsmat_read_pem("private key", cma_test_tls_path("nul.key"), &pem, &len, &err),
        CMA_ERR_TLS);
    snprintf(want, sizeof(want), "private key %s is not PEM text", cma_test_tls_path("nul.key"));
    assert_string_equal(err.msg, want);
    cma_err_clear(&err);
    assert_int_equal(cma_tlsmat_read_pem("client CA file", "/nonexistent/ca", &pem, &len, &err),
                     CMA_ERR_TLS);
    assert_string_equal(err.msg, "cannot open client CA file /nonexistent/ca: No such file or "
                                 "directory");
}

static void test_cma_tlsmat_read__signature_and_errors(void **state)
{
    (void)state;
    cma_test_tls_put("t", "hello");
    struct cma_tlsmat_sig sig, now;
    unsigned char *bytes = NULL;
    size_t len = 0;
    int e = -1;
    struct cma_err err;
    cma_err_clear(&err);
    assert_int_equal(cma_tlsmat_read(cma_test_tls_path("t"), 64, &sig, &bytes, &len, &e, &err),
                     CMA_OK);
    assert_int_equal(e, 0);
    assert_int_equal(len, 5);
    assert_string_equal((char *)bytes, "hello");
    free(bytes);
    cma_tlsmat_sig_stat(cma_test_tls_path("t"), &now);
    assert_true(now.exists);
    assert_true(cma_tlsmat_sig_eq(&sig, &now));
    assert_int_equal(cma_tlsmat_read(cma_test_tls_path("t"), 4, &sig, &bytes, &len, &e, &err),
                     CMA_ERR_IO);
    assert_int_equal(e, EFBIG);
    assert_string_equal(err.msg, "cannot read it: over 4 bytes");
    cma_err_clear(&err);
    assert_int_equal(cma_tlsmat_read("/nonexistent/t", 64, &sig, &bytes, &len, &e, &err),
                     CMA_ERR_IO);
    assert_int_equal(e, ENOENT);
    assert_string_equal(err.msg, "cannot read it: No such file or directory");
}

/* ---- change detection -------------------------------------------------------------------- */

static struct timespec ago(time_t s)
{
    struct timespec t;
    clock_gettime(CLOCK_REALTIME, &t);
    t.tv_sec -= s;
    return t;
}

static void test_cma_tlsmat_sig__each_member_counts(void **state)
{
    (void)state;
    struct cma_tlsmat_sig a, b;
    memset(&a, 0, sizeof(a));
    a.exists = true;
    a.ino = 7;
    a.size = 100;
    a.mtime = a.ctime = ago(3);
    b = a;
    assert_true(cma_tlsmat_sig_eq(&a, &b));
    assert_true(cma_tlsmat_sig_settled(&a)); /* older than two seconds */
    b.ctime.tv_nsec ^= 1;                    /* same mtime, the inode changed later */
    assert_false(cma_tlsmat_sig_eq(&a, &b));
    b = a;
    b.mtime.tv_nsec ^= 1;
    assert_false(cma_tlsmat_sig_eq(&a, &b));
    b = a;
    b.ino = 8;
    assert_false(cma_tlsmat_sig_eq(&a, &b));
    b = a;
    b.size = 101;
    assert_false(cma_tlsmat_sig_eq(&a, &b));
    b = a;
    b.ctime = ago(0); /* just written: a same-tick rewrite could keep it, re-read until settled */
    assert_false(cma_tlsmat_sig_settled(&b));
    b = a;
    b.mtime = ago(0);
    assert_false(cma_tlsmat_sig_settled(&b));
}

static void test_cma_tlsmat_sig__rewrites(void **state)
{
    (void)state;
    struct cma_tlsmat_sig s0, s1, s2, s3;
    cma_tlsmat_sig_stat(cma_test_tls_path("gone"), &s0);
    assert_false(s0.exists);
    cma_test_tls_put("c.crt", m->cert_a);
    cma_tlsmat_sig_stat(cma_test_tls_path("c.crt"), &s1);
    assert_true(s1.exists);
    assert_false(cma_tlsmat_sig_eq(&s0, &s1));
    /* rewritten in place, same size, mtime put back: within one tick nothing stat() reports
     * may move, so the first signature must not be settled (the reader compares the bytes) */
    struct timespec old[2] = {{.tv_sec = time(NULL) - 3600}, {.tv_sec = time(NULL) - 3600}};
    assert_int_equal(utimensat(AT_FDCWD, cma_test_tls_path("c.crt"), old, 0), 0);
    cma_tlsmat_sig_stat(cma_test_tls_path("c.crt"), &s1);
    cma_test_tls_put("c.crt", m->cert_b);
    assert_int_equal(utimensat(AT_FDCWD, cma_test_tls_path("c.crt"), old, 0), 0);
    cma_tlsmat_sig_stat(cma_test_tls_path("c.crt"), &s2);
    assert_int_equal(s1.mtime.tv_sec, s2.mtime.tv_sec);
    assert_true(!cma_tlsmat_sig_eq(&s1, &s2) || !cma_tlsmat_sig_settled(&s1));
    assert_false(cma_tlsmat_sig_settled(&s1)); /* ctime moved with utimensat */
    /* replaced by rename (a new inode), same size and bytes: changed */
    cma_test_tls_put("c.new", m->cert_b);
    assert_int_equal(rename(cma_test_tls_path("c.new"), cma_test_tls_path("c.crt")), 0);
    cma_tlsmat_sig_stat(cma_test_tls_path("c.crt"), &s3);
    assert_false(cma_tlsmat_sig_eq(&s2, &s3));
    /* rewritten with other bytes of another size: changed */
    cma_test_tls_put("c.crt", m->cert_old);
    cma_tlsmat_sig_stat(cma_test_tls_path("c.crt"), &s2);
    assert_false(cma_tlsmat_sig_eq(&s2, &s3));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cma_tlsmat__good_material),
        cmocka_unit_test(test_cma_tlsmat__garbage_ca),
        cmocka_unit_test(test_cma_tlsmat__garbage_cert_and_key),
        cmocka_unit_test(test_cma_tlsmat__mismatched_key_and_expired_leaf),
        cmocka_unit_test(test_cma_tlsmat_read_pem__messages),
        cmocka_unit_test(test_cma_tlsmat_read__signature_and_errors),
        cmocka_unit_test(test_cma_tlsmat_sig__each_member_counts),
        cmocka_unit_test(test_cma_tlsmat_sig__rewrites),
    };
    return cmocka_run_group_tests(tests, cma_test_tls_setup, cma_test_tls_teardown);
}
