/* tls_fixture.h: the TLS material the clients' unit tests (tlsmat_test.c, credentials_test.c)
 * share, made with OpenSSL, and the scratch directory they write it to: self-signed EC P-256
 * certificate + key pairs as PEM strings (two current ones and an expired one), a directory made
 * by the test group's setup and removed with everything in it by its teardown, paths in it and
 * files written there. Linked into those tests as cma_tls_fixture (src/clients/CMakeLists.txt).
 * Helpers fail the running cmocka test on errors. */
#ifndef CMA_TLS_FIXTURE_H
#define CMA_TLS_FIXTURE_H

/* The material of a test group, PEM strings owned by the fixture: pairs a and b (CN=a, CN=b,
 * valid from two hours ago for an hour more) and old (CN=old, expired an hour ago). */
struct cma_test_tls {
    char *cert_a, *key_a, *cert_b, *key_b, *cert_old, *key_old;
};

/* The material, made by cma_test_tls_setup. */
extern struct cma_test_tls cma_test_tls;

/* The test group's setup and teardown (cmocka's signature, state unused; one group per
 * process): the first makes the scratch directory /tmp/cma-tls-fixture-XXXXXX and the material,
 * 0 or -1 when the directory cannot be made; the second frees the material and removes the
 * directory with everything in it, 0 or -1. */
int cma_test_tls_setup(void **state);
int cma_test_tls_teardown(void **state);

/* The scratch directory. */
const char *cma_test_tls_dir(void);
/* "<scratch dir>/<name>" in one of 8 static buffers used in turn (at most 8 alive at once). */
char *cma_test_tls_path(const char *name);
/* Writes text to <scratch dir>/<name> (truncating). */
void cma_test_tls_put(const char *name, const char *text);

#endif
