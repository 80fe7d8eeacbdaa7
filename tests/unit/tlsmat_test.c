/* tlsmat_test.c: clients/tlsmat.c, the one TLS-material module: CA bundles, certificate + key pairs
 * (good, garbage, mismatched, expired) in memory and in files; trust stores from a bundle; the
 * serving side's PEM file reader and the clients' file reader with their messages; and the
 * change signature a reload decides by, including a rewrite in place within one timestamp tick
 * (the signature may stay, but then it is not settled, so readers compare the bytes). Keys and
 * certificates are made here with OpenSSL. */
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
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>

#include "cma/tlsmat.h"
#include "fakehttp.h"

static char dir[] = "/tmp/cma-tls-test-XXXXXX";

static char *path_of(const char *name)
{
    static char buf[8][512];
    static int next;
    char *p = buf[next++ % 8];
    snprintf(p, 512, "%s/%s", dir, name);
    return p;
}

static char *pem_of_bio(BIO *b)
{
    char *data = NULL;
    long n = BIO_get_mem_data(b, &data);
    char *s = strndup(data, (size_t)n);
    assert_non_null(s);
    BIO_free(b);
    return s;
}

/* A self-signed EC P-256 certificate (CN=cn, valid until now + not_after_s) and its key. */
static void make_pair(const char *cn, long not_after_s, char **cert_pem, char **key_pem)
{
    EVP_PKEY *key = EVP_PKEY_Q_keygen(NULL, NULL, "EC", "P-256");
    X509 *x = X509_new();
    assert_non_null(key);
    assert_non_null(x);
    X509_set_version(x, 2);
    ASN1_INTEGER_set(X509_get_serialNumber(x), 1);
    X509_gmtime_adj(X509_getm_notBefore(x), -7200);
    X509_gmtime_adj(X509_getm_notAfter(x), not_after_s);
    X509_NAME *name = X509_get_subject_name(x);
    X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_ASC, (const unsigned char *)cn, -1, -1, 0);
    X509_set_issuer_name(x, name);
    X509_set_pubkey(x, key);
    assert_true(X509_sign(x, key, EVP_sha256()) > 0);
    BIO *b = BIO_new(BIO_s_mem());
    assert_true(PEM_write_bio_X509(b, x) == 1);
    *cert_pem = pem_of_bio(b);
    b = BIO_new(BIO_s_mem());
    assert_true(PEM_write_bio_PrivateKey(b, key, NULL, NULL, 0, NULL, NULL) == 1);
    *key_pem = pem_of_bio(b);
    X509_free(x);
    EVP_PKEY_free(key);
}

static char *cert_a, *key_a, *cert_b, *key_b, *cert_old, *key_old;

static int setup(void **state)
{
    (void)state;
    if (!mkdtemp(dir))
        return -1;
    make_pair("a", 3600, &cert_a, &key_a);
    make_pair("b", 3600, &cert_b, &key_b);
    make_pair("old", -3600, &cert_old, &key_old);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    char cmd[600];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
    free(cert_a);
    free(key_a);
    free(cert_b);
    free(key_b);
    free(cert_old);
    free(key_old);
    return system(cmd) == 0 ? 0 : -1;
}

static void put(const char *name, const char *text)
{
    assert_true(cma_file_write(path_of(name), text));
}

/* ---- good material ----------------------------------------------------------------------- */

static void test_cma_tlsmat__good_material(void **state)
{
    (void)state;
    char two[8192];
    snprintf(two, sizeof(two), "%s%s", cert_a, cert_b);
    struct cma_err err;
    cma_err_clear(&err);
    size_t n = 0;
    assert_int_equal(cma_tlsmat_check_ca(two, strlen(two), &n, &err), CMA_OK);
    assert_int_equal(n, 2);
    assert_int_equal(cma_tlsmat_check_pair(cert_a, strlen(cert_a), key_a, strlen(key_a), &err),
                     CMA_OK);
    put("a.crt", cert_a);
    put("a.key", key_a);
    assert_int_equal(cma_tlsmat_check_pair_files(path_of("a.crt"), path_of("a.key"), &err), CMA_OK);
    assert_true(cma_tlsmat_leaf_current(path_of("a.crt")));
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
    snprintf(mixed, sizeof(mixed), "%s%.*s", cert_a, (int)(strlen(cert_b) / 2), cert_b);
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
    assert_int_equal(cma_tlsmat_check_pair("junk", 4, key_a, strlen(key_a), &err), CMA_ERR_TLS);
    assert_non_null(strstr(err.msg, "certificate: no PEM certificate in it"));
    cma_err_clear(&err);
    assert_int_equal(cma_tlsmat_check_pair(cert_a, strlen(cert_a), "junk", 4, &err), CMA_ERR_TLS);
    assert_non_null(strstr(err.msg, "key: no unencrypted PEM private key in it"));
    put("junk.crt", "junk\n");
    put("a.key", key_a);
    cma_err_clear(&err);
    assert_int_equal(cma_tlsmat_check_pair_files(path_of("junk.crt"), path_of("a.key"), &err),
                     CMA_ERR_TLS);
    assert_non_null(strstr(err.msg, path_of("junk.crt")));
    assert_false(cma_tlsmat_leaf_current(path_of("junk.crt")));
    cma_err_clear(&err);
    assert_int_equal(cma_tlsmat_check_pair_files("/nonexistent/x.crt", path_of("a.key"), &err),
                     CMA_ERR_TLS);
    assert_non_null(strstr(err.msg, "/nonexistent/x.crt"));
    cma_err_clear(&err);
    assert_int_equal(cma_tlsmat_check_pair_files("", path_of("a.key"), &err), CMA_ERR_TLS);
    assert_string_equal(err.msg, "a certificate file and a key file are required");
}

static void test_cma_tlsmat__mismatched_key_and_expired_leaf(void **state)
{
    (void)state;
    struct cma_err err;
    cma_err_clear(&err);
    assert_int_equal(cma_tlsmat_check_pair(cert_a, strlen(cert_a), key_b, strlen(key_b), &err),
                     CMA_ERR_TLS);
    assert_non_null(strstr(err.msg, "the private key does not match the certificate"));
    put("a.crt", cert_a);
    put("b.key", key_b);
    cma_err_clear(&err);
    assert_int_equal(cma_tlsmat_check_pair_files(path_of("a.crt"), path_of("b.key"), &err),
                     CMA_ERR_TLS);
    char want[1200];
    snprintf(want, sizeof(want), "certificate %s, key %s: ", path_of("a.crt"), path_of("b.key"));
    assert_memory_equal(err.msg, want, strlen(want));
    /* an expired pair still matches, but its leaf is not current */
    put("old.crt", cert_old);
    assert_int_equal(
        cma_tlsmat_check_pair(cert_old, strlen(cert_old), key_old, strlen(key_old), NULL), CMA_OK);
    assert_false(cma_tlsmat_leaf_current(path_of("old.crt")));
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
    put("a.crt", cert_a);
    assert_int_equal(cma_tlsmat_read_pem("certificate", path_of("a.crt"), &pem, &len, &err),
                     CMA_OK);
    assert_int_equal(len, strlen(cert_a));
    assert_string_equal(pem, cert_a);
    free(pem);
    put("empty.crt", "");
    assert_int_equal(cma_tlsmat_read_pem("certificate", path_of("empty.crt"), &pem, &len, &err),
                     CMA_ERR_TLS);
    char want[1200];
    snprintf(want, sizeof(want), "certificate %s is empty", path_of("empty.crt"));
    assert_string_equal(err.msg, want);
    FILE *f = fopen(path_of("nul.key"), "wb");
    assert_non_null(f);
    assert_int_equal(fwrite("a\0b", 1, 3, f), 3);
    assert_int_equal(fclose(f), 0);
    cma_err_clear(&err);
    assert_int_equal(cma_tlsmat_read_pem("private key", path_of("nul.key"), &pem, &len, &err),
                     CMA_ERR_TLS);
    snprintf(want, sizeof(want), "private key %s is not PEM text", path_of("nul.key"));
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
    put("t", "hello");
    struct cma_tlsmat_sig sig, now;
    unsigned char *bytes = NULL;
    size_t len = 0;
    int e = -1;
    struct cma_err err;
    cma_err_clear(&err);
    assert_int_equal(cma_tlsmat_read(path_of("t"), 64, &sig, &bytes, &len, &e, &err), CMA_OK);
    assert_int_equal(e, 0);
    assert_int_equal(len, 5);
    assert_string_equal((char *)bytes, "hello");
    free(bytes);
    cma_tlsmat_sig_stat(path_of("t"), &now);
    assert_true(now.exists);
    assert_true(cma_tlsmat_sig_eq(&sig, &now));
    assert_int_equal(cma_tlsmat_read(path_of("t"), 4, &sig, &bytes, &len, &e, &err), CMA_ERR_IO);
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
    cma_tlsmat_sig_stat(path_of("gone"), &s0);
    assert_false(s0.exists);
    put("c.crt", cert_a);
    cma_tlsmat_sig_stat(path_of("c.crt"), &s1);
    assert_true(s1.exists);
    assert_false(cma_tlsmat_sig_eq(&s0, &s1));
    /* rewritten in place, same size, mtime put back: within one tick nothing stat() reports
     * may move, so the first signature must not be settled (the reader compares the bytes) */
    struct timespec old[2] = {{.tv_sec = time(NULL) - 3600}, {.tv_sec = time(NULL) - 3600}};
    assert_int_equal(utimensat(AT_FDCWD, path_of("c.crt"), old, 0), 0);
    cma_tlsmat_sig_stat(path_of("c.crt"), &s1);
    put("c.crt", cert_b);
    assert_int_equal(utimensat(AT_FDCWD, path_of("c.crt"), old, 0), 0);
    cma_tlsmat_sig_stat(path_of("c.crt"), &s2);
    assert_int_equal(s1.mtime.tv_sec, s2.mtime.tv_sec);
    assert_true(!cma_tlsmat_sig_eq(&s1, &s2) || !cma_tlsmat_sig_settled(&s1));
    assert_false(cma_tlsmat_sig_settled(&s1)); /* ctime moved with utimensat */
    /* replaced by rename (a new inode), same size and bytes: changed */
    put("c.new", cert_b);
    assert_int_equal(rename(path_of("c.new"), path_of("c.crt")), 0);
    cma_tlsmat_sig_stat(path_of("c.crt"), &s3);
    assert_false(cma_tlsmat_sig_eq(&s2, &s3));
    /* rewritten with other bytes of another size: changed */
    put("c.crt", cert_old);
    cma_tlsmat_sig_stat(path_of("c.crt"), &s2);
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
    return cmocka_run_group_tests(tests, setup, teardown);
}
