/* tls_fixture.c: TLS material made with OpenSSL for the clients' unit tests, and their scratch
 * directory (contract in tls_fixture.h). */
#include "tls_fixture.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>

#include "fakehttp.h"

/* The bytes written to b as a new string; frees b. */
static char *pem_of_bio(BIO *b)
{
    char *data = NULL;
    long n = BIO_get_mem_data(b, &data);
    char *s = strndup(data, (size_t)n);
    assert_non_null(s);
    BIO_free(b);
    return s;
}

/* A self-signed EC P-256 certificate (CN=cn, valid from two hours ago until now + not_after_s)
 * and its key, as new PEM strings. */
static void make_pair(const char *cn, long not_after_s, char **cert_pem, char **key_pem)
{
    EVP_PKEY *key = EVP_PKEY_Q_keygen(NULL, NULL, "EC", "P-256");
    X509 *x = X509_new();
    assert_non_null(key);
    assert_non_null(x);
    assert_true(X509_set_version(x, 2) == 1);
    assert_true(ASN1_INTEGER_set(X509_get_serialNumber(x), 1) == 1);
    assert_non_null(X509_gmtime_adj(X509_getm_notBefore(x), -7200));
    assert_non_null(X509_gmtime_adj(X509_getm_notAfter(x), not_after_s));
    X509_NAME *name = X509_get_subject_name(x);
    assert_true(X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_ASC, (const unsigned char *)cn, -1,
                                           -1, 0) == 1);
    assert_true(X509_set_issuer_name(x, name) == 1);
    assert_true(X509_set_pubkey(x, key) == 1);
    assert_true(X509_sign(x, key, EVP_sha256()) > 0);
    BIO *b = BIO_new(BIO_s_mem());
    assert_non_null(b);
    assert_true(PEM_write_bio_X509(b, x) == 1);
    *cert_pem = pem_of_bio(b);
    b = BIO_new(BIO_s_mem());
    assert_non_null(b);
    assert_true(PEM_write_bio_PrivateKey(b, key, NULL, NULL, 0, NULL, NULL) == 1);
    *key_pem = pem_of_bio(b);
    X509_free(x);
    EVP_PKEY_free(key);
}

struct cma_test_tls cma_test_tls;
static char dir[] = "/tmp/cma-tls-fixture-XXXXXX";

int cma_test_tls_setup(void **state)
{
    (void)state;
    struct cma_test_tls *t = &cma_test_tls;
    if (!mkdtemp(dir))
        return -1;
    make_pair("a", 3600, &t->cert_a, &t->key_a);
    make_pair("b", 3600, &t->cert_b, &t->key_b);
    make_pair("old", -3600, &t->cert_old, &t->key_old);
    return 0;
}

int cma_test_tls_teardown(void **state)
{
    (void)state;
    struct cma_test_tls *t = &cma_test_tls;
    free(t->cert_a);
    free(t->key_a);
    free(t->cert_b);
    free(t->key_b);
    free(t->cert_old);
    free(t->key_old);
    *t = (struct cma_test_tls){0};
    char cmd[100];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    return system(cmd) == 0 ? 0 : -1;
}

const char *cma_test_tls_dir(void)
{
    return dir;
}

char *cma_test_tls_path(const char *name)
{
    static char buf[8][512];
    static int next;
    char *p = buf[next++ % 8];
    snprintf(p, sizeof(buf[0]), "%s/%s", dir, name);
    return p;
}

void cma_test_tls_put(const char *name, const char *text)
{
    assert_true(cma_file_write(cma_test_tls_path(name), text));
}
