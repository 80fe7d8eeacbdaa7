/* verify_test.c: the client-certificate verifier (src/auth/verify.c) with certificates made here:
 * a chain that verifies is answered from the cache afterwards (the very same parsed leaf), a
 * chain from another CA or with a wrong intermediate split is refused, and that refusal is
 * answered from a cache of its own for a minute (counted: cma_verifier_full_checks) without ever
 * pushing out a good entry; a not-yet-valid chain is refused but not cached; a cached result ends
 * at the earliest notAfter of the chain or after a minute, whichever is first, after which the
 * chain is verified afresh. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cmocka.h>
#include <openssl/evp.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

#include "../../src/auth/auth_internal.h"
#include "cma/clock.h"

struct cert {
    EVP_PKEY *key;
    X509 *x509;
    unsigned char *der;
    size_t len;
};

/* A P-256 certificate named cn, valid from not_before_s seconds from now (negative: ago) until
 * valid_s seconds from now, signed by issuer (self-signed when NULL); a CA when ca. */
static struct cert make_cert_from(const char *cn, const struct cert *issuer, long not_before_s,
                                  long valid_s, int ca)
{
    struct cert c = {.key = EVP_EC_gen("P-256"), .x509 = X509_new()};
    assert_non_null(c.key);
    assert_non_null(c.x509);
    static long serial = 1;
    X509_set_version(c.x509, 2);
    ASN1_INTEGER_set(X509_get_serialNumber(c.x509), serial++);
    X509_gmtime_adj(X509_getm_notBefore(c.x509), not_before_s);
    X509_gmtime_adj(X509_getm_notAfter(c.x509), valid_s);
    X509_NAME *name = X509_get_subject_name(c.x509);
    X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_ASC, (const unsigned char *)cn, -1, -1, 0);
    X509_set_issuer_name(c.x509, issuer ? X509_get_subject_name(issuer->x509) : name);
    X509_set_pubkey(c.x509, c.key);
    X509V3_CTX v3;
    X509V3_set_ctx(&v3, issuer ? issuer->x509 : c.x509, c.x509, NULL, NULL, 0);
    X509_EXTENSION *bc = X509V3_EXT_conf_nid(NULL, &v3, NID_basic_constraints,
                                             ca ? "critical,CA:TRUE" : "critical,CA:FALSE");
    assert_non_null(bc);
    X509_add_ext(c.x509, bc, -1);
    X509_EXTENSION_free(bc);
    if (!ca) {
        X509_EXTENSION *eku = X509V3_EXT_conf_nid(NULL, &v3, NID_ext_key_usage, "clientAuth");
        X509_add_ext(c.x509, eku, -1);
        X509_EXTENSION_free(eku);
    }
    assert_true(X509_sign(c.x509, issuer ? issuer->key : c.key, EVP_sha256()) > 0);
    int len = i2d_X509(c.x509, &c.der);
    assert_true(len > 0);
    c.len = (size_t)len;
    return c;
}

/* Valid from an hour ago for valid_s seconds. */
static struct cert make_cert(const char *cn, const struct cert *issuer, long valid_s, int ca)
{
    return make_cert_from(cn, issuer, -3600, valid_s, ca);
}

static void free_cert(struct cert *c)
{
    EVP_PKEY_free(c->key);
    X509_free(c->x509);
    OPENSSL_free(c->der);
}

static struct cma_verifier *verifier_for(const struct cert *ca)
{
    X509_STORE *store = X509_STORE_new();
    assert_non_null(store);
    assert_int_equal(X509_STORE_add_cert(store, ca->x509), 1);
    struct cma_verifier *v = cma_verifier_new(store);
    assert_non_null(v);
    return v;
}

static struct cma_chain chain_of(const struct cert *leaf, const struct cert *inter)
{
    struct cma_chain c = {.n = 1, .der = {leaf->der}, .len = {leaf->len}};
    if (inter) {
        c.der[1] = inter->der;
        c.len[1] = inter->len;
        c.n = 2;
    }
    return c;
}

/* The chain is answered from the cache: the very same leaf, and no full verification. */
static void assert_from_cache(struct cma_verifier *v, const struct cma_chain *c, X509 *leaf,
                              int64_t now)
{
    size_t checks = cma_verifier_full_checks(v);
    X509 *again = cma_verifier_check(v, c, now);
    assert_ptr_equal(again, leaf);
    assert_int_equal(cma_verifier_full_checks(v), checks);
    X509_free(again);
}

static void test_cma_verifier_check__cached_after_first_success(void **state)
{
    (void)state;
    struct cert ca = make_cert("ca", NULL, 86400, 1);
    struct cert leaf = make_cert("system:kube-aggregator", &ca, 86400, 0);
    struct cma_verifier *v = verifier_for(&ca);
    struct cma_chain chain = chain_of(&leaf, NULL);
    int64_t now = cma_clock_wall_ms();
    X509 *first = cma_verifier_check(v, &chain, now);
    assert_non_null(first);
    assert_int_equal(X509_cmp(first, leaf.x509), 0);
    X509 *second = cma_verifier_check(v, &chain, now + 1000);
    assert_ptr_equal(second, first); /* the cached leaf, not a new parse */
    X509_free(first);
    X509_free(second);
    cma_verifier_free(v);
    free_cert(&leaf);
    free_cert(&ca);
}

static void test_cma_verifier_check__other_ca_refused_and_refusal_cached(void **state)
{
    (void)state;
    struct cert ca = make_cert("ca", NULL, 86400, 1);
    struct cert other = make_cert("other-ca", NULL, 86400, 1);
    struct cert good = make_cert("good", &ca, 86400, 0);
    struct cert bad = make_cert("bad", &other, 86400, 0);
    struct cma_verifier *v = verifier_for(&ca);
    struct cma_chain bad_chain = chain_of(&bad, NULL);
    int64_t now = cma_clock_wall_ms();
    assert_null(cma_verifier_check(v, &bad_chain, now));
    assert_int_equal(cma_verifier_full_checks(v), 1);
    assert_null(cma_verifier_check(v, &bad_chain, now + 1000));
    assert_int_equal(cma_verifier_full_checks(v), 1); /* the refusal, from the cache */
    assert_null(cma_verifier_check(v, &bad_chain, now + 61 * 1000));
    assert_int_equal(cma_verifier_full_checks(v), 2); /* a minute later: verified afresh */
    /* the untrusted CA sent along as an intermediate does not make it trusted */
    struct cma_chain with_other = chain_of(&bad, &other);
    assert_null(cma_verifier_check(v, &with_other, now));
    struct cma_chain empty = {.n = 0};
    assert_null(cma_verifier_check(v, &empty, now));
    /* garbage DER */
    unsigned char junk[64] = {0x30, 0x82};
    struct cma_chain garbage = {.n = 1, .der = {junk}, .len = {sizeof junk}};
    assert_null(cma_verifier_check(v, &garbage, now));
    /* a good chain still verifies afterwards, and is cached */
    struct cma_chain good_chain = chain_of(&good, NULL);
    X509 *leaf = cma_verifier_check(v, &good_chain, now);
    assert_non_null(leaf);
    assert_from_cache(v, &good_chain, leaf, now);
    X509_free(leaf);
    cma_verifier_free(v);
    free_cert(&good);
    free_cert(&bad);
    free_cert(&other);
    free_cert(&ca);
}

static void test_cma_verifier_check__intermediate_chain(void **state)
{
    (void)state;
    struct cert root = make_cert("root", NULL, 86400, 1);
    struct cert inter = make_cert("intermediate", &root, 86400, 1);
    struct cert leaf = make_cert("client", &inter, 86400, 0);
    struct cma_verifier *v = verifier_for(&root);
    struct cma_chain alone = chain_of(&leaf, NULL);
    int64_t now = cma_clock_wall_ms();
    assert_null(cma_verifier_check(v, &alone, now)); /* the intermediate is needed */
    struct cma_chain both = chain_of(&leaf, &inter);
    X509 *a = cma_verifier_check(v, &both, now);
    assert_non_null(a);
    X509 *b = cma_verifier_check(v, &both, now);
    assert_ptr_equal(a, b);
    assert_null(cma_verifier_check(v, &alone, now)); /* a cache hit needs the same chain */
    X509_free(a);
    X509_free(b);
    cma_verifier_free(v);
    free_cert(&leaf);
    free_cert(&inter);
    free_cert(&root);
}

static void test_cma_verifier_check__entry_ends_at_not_after_or_ttl(void **state)
{
    (void)state;
    struct cert ca = make_cert("ca", NULL, 86400, 1);
    struct cert soon = make_cert("expires-soon", &ca, 20, 0); /* notAfter in 20 s */
    struct cert later = make_cert("expires-later", &ca, 86400, 0);
    struct cma_verifier *v = verifier_for(&ca);
    int64_t now = cma_clock_wall_ms();

    struct cma_chain sc = chain_of(&soon, NULL);
    X509 *a = cma_verifier_check(v, &sc, now);
    assert_non_null(a);
    X509 *hit = cma_verifier_check(v, &sc, now + 10 * 1000);
    assert_ptr_equal(hit, a);
    X509 *miss = cma_verifier_check(v, &sc, now + 25 * 1000); /* past notAfter: verified again */
    assert_non_null(miss); /* (OpenSSL's own clock says the certificate is still valid) */
    assert_ptr_not_equal(miss, a);
    X509_free(a);
    X509_free(hit);
    X509_free(miss);

    struct cma_chain lc = chain_of(&later, NULL);
    X509 *b = cma_verifier_check(v, &lc, now);
    assert_non_null(b);
    hit = cma_verifier_check(v, &lc, now + 59 * 1000);
    assert_ptr_equal(hit, b);
    miss = cma_verifier_check(v, &lc, now + 61 * 1000); /* past the one-minute bound */
    assert_ptr_not_equal(miss, b);
    X509_free(b);
    X509_free(hit);
    X509_free(miss);
    cma_verifier_free(v);
    free_cert(&later);
    free_cert(&soon);
    free_cert(&ca);
}

static void test_cma_verifier_check__expired_chain_refused(void **state)
{
    (void)state;
    struct cert ca = make_cert("ca", NULL, 86400, 1);
    struct cert expired = make_cert("expired", &ca, -60, 0); /* notAfter a minute ago */
    struct cma_verifier *v = verifier_for(&ca);
    struct cma_chain c = chain_of(&expired, NULL);
    assert_null(cma_verifier_check(v, &c, cma_clock_wall_ms()));
    cma_verifier_free(v);
    free_cert(&expired);
    free_cert(&ca);
}

/* Refusals land in slots of their own: 400 different refused chains (over six per slot, so with
 * shared slots one would all but surely land on the good chain's: 1 - (63/64)^400) leave a
 * cached good chain cached. */
static void test_cma_verifier_check__refusals_never_evict_a_good_entry(void **state)
{
    (void)state;
    struct cert ca = make_cert("ca", NULL, 86400, 1);
    struct cert other = make_cert("other-ca", NULL, 86400, 1);
    struct cert good = make_cert("good", &ca, 86400, 0);
    struct cma_verifier *v = verifier_for(&ca);
    int64_t now = cma_clock_wall_ms();
    struct cma_chain good_chain = chain_of(&good, NULL);
    X509 *leaf = cma_verifier_check(v, &good_chain, now);
    assert_non_null(leaf);
    for (int i = 0; i < 400; i++) {
        struct cert bad = make_cert("bad", &other, 86400, 0);
        struct cma_chain bad_chain = chain_of(&bad, NULL);
        assert_null(cma_verifier_check(v, &bad_chain, now));
        free_cert(&bad);
    }
    assert_int_equal(cma_verifier_full_checks(v), 401);
    assert_from_cache(v, &good_chain, leaf, now);
    X509_free(leaf);
    cma_verifier_free(v);
    free_cert(&good);
    free_cert(&other);
    free_cert(&ca);
}

/* A chain refused only because it is not valid yet is verified again every time: it will become
 * valid, and a cached refusal would then turn away a good client. */
static void test_cma_verifier_check__not_yet_valid_not_cached(void **state)
{
    (void)state;
    struct cert ca = make_cert("ca", NULL, 86400, 1);
    struct cert early = make_cert_from("early", &ca, 3600, 86400, 0); /* valid in an hour */
    struct cma_verifier *v = verifier_for(&ca);
    struct cma_chain c = chain_of(&early, NULL);
    int64_t now = cma_clock_wall_ms();
    assert_null(cma_verifier_check(v, &c, now));
    assert_null(cma_verifier_check(v, &c, now));
    assert_int_equal(cma_verifier_full_checks(v), 2);
    cma_verifier_free(v);
    free_cert(&early);
    free_cert(&ca);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cma_verifier_check__cached_after_first_success),
        cmocka_unit_test(test_cma_verifier_check__other_ca_refused_and_refusal_cached),
        cmocka_unit_test(test_cma_verifier_check__intermediate_chain),
        cmocka_unit_test(test_cma_verifier_check__entry_ends_at_not_after_or_ttl),
        cmocka_unit_test(test_cma_verifier_check__expired_chain_refused),
        cmocka_unit_test(test_cma_verifier_check__refusals_never_evict_a_good_entry),
        cmocka_unit_test(test_cma_verifier_check__not_yet_valid_not_cached),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
