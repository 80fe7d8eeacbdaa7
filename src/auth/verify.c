/* verify.c: verification of a client's certificate chain against one trusted CA bundle (the
 * requestheader CA or the client CA), for the requestheader and x509 authenticators, with a
 * cache of chains that verified and one of chains that did not.
 *
 * DESIGN
 * - A client sends the same chain on every request of a connection, and on every connection (the
 *   aggregator's front-proxy certificate, an HPA controller's client certificate). Verifying it
 *   costs DER parsing and a signature check per certificate: at fleet scale (667 requests/s) that
 *   was 38% of the adapter's CPU (docs/benchmarks.md). So a chain that verified is remembered by
 *   the SHA-256 of its DER certificates (each prefixed by its length, so the split between
 *   certificates is part of the key), with the parsed leaf the authenticators read names from.
 * - An entry lives until the earliest notAfter in the verified chain (the trust anchor included)
 *   or VERIFY_TTL_MS, whichever comes first, so an expiring certificate is refused exactly when a
 *   fresh verification would refuse it, and the clock is consulted again at least every minute. The
 *   cache belongs to one CA bundle: a new bundle (a ConfigMap or file change) is a new verifier,
 *   which starts empty, so a removed CA stops authenticating at once.
 * - Failures are cached apart, in their own slots, so a bad chain can never evict a good entry.
 *   A client whose certificate is not from the requestheader CA (a direct client with an x509
 *   client certificate) fails that authenticator before the x509 one accepts it, on every
 *   request: uncached, that was a full verification each time (37% of the adapter's CPU in the
 *   fleet benchmark, where every request did one). A failure is cached only when it is OpenSSL's
 *   verdict on the chain, which holds for the verifier's bundle: never a not-yet-valid
 *   certificate (that changes with time), an internal error or running out of memory. It lives
 *   VERIFY_TTL_MS.
 * - Direct-mapped by the first digest byte, VERIFY_SLOTS entries, one mutex held only to copy a
 *   reference: bounded memory whatever clients send, no allocation on a hit. */
#include "auth_internal.h"

#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/asn1.h>
#include <openssl/evp.h>
#include <openssl/x509.h>
#include <openssl/x509_vfy.h>
#include <openssl/x509v3.h>

#define VERIFY_SLOTS 64
#define VERIFY_TTL_MS (60 * 1000)
#define DIGEST_LEN 32

struct verify_slot {
    unsigned char digest[DIGEST_LEN];
    int64_t until_ms; /* wall clock */
    X509 *leaf;       /* NULL = empty */
};

struct fail_slot {
    unsigned char digest[DIGEST_LEN];
    int64_t until_ms; /* wall clock; 0 = empty */
};

struct cma_verifier {
    X509_STORE *store;
    EVP_MD *sha256;
    pthread_mutex_t lock;
    struct verify_slot slots[VERIFY_SLOTS];
    struct fail_slot failed[VERIFY_SLOTS];
    size_t full_checks; /* under lock */
};

struct cma_verifier *cma_verifier_new(X509_STORE *store)
{
    struct cma_verifier *v = calloc(1, sizeof *v);
    EVP_MD *md = EVP_MD_fetch(NULL, "SHA256", NULL);
    if (!v || !md || pthread_mutex_init(&v->lock, NULL) != 0) {
        free(v);
        EVP_MD_free(md);
        X509_STORE_free(store);
        return NULL;
    }
    v->store = store;
    v->sha256 = md;
    return v;
}

void cma_verifier_free(struct cma_verifier *v)
{
    if (!v)
        return;
    for (size_t i = 0; i < VERIFY_SLOTS; i++)
        X509_free(v->slots[i].leaf);
    X509_STORE_free(v->store);
    EVP_MD_free(v->sha256);
    pthread_mutex_destroy(&v->lock);
    free(v);
}

/* SHA-256 over (length, DER) of each certificate the client sent; false on any failure. */
static bool chain_digest(const struct cma_verifier *v, const struct cma_chain *c,
                         unsigned char out[DIGEST_LEN])
{
    EVP_MD_CTX *ctx = EVP_MD_CTX_new();
    bool ok = ctx && EVP_DigestInit_ex(ctx, v->sha256, NULL) == 1;
    for (size_t i = 0; ok && i < c->n; i++) {
        unsigned char lenbuf[8];
        for (size_t b = 0; b < sizeof lenbuf; b++)
            lenbuf[b] = (unsigned char)(c->len[i] >> (8 * b));
        ok = EVP_DigestUpdate(ctx, lenbuf, sizeof lenbuf) == 1 &&
             EVP_DigestUpdate(ctx, c->der[i], c->len[i]) == 1;
    }
    unsigned int got = 0;
    ok = ok && EVP_DigestFinal_ex(ctx, out, &got) == 1 && got == DIGEST_LEN;
    EVP_MD_CTX_free(ctx);
    return ok;
}

/* A new reference to the cached leaf for digest, or NULL; *refused: whether the digest is in
 * the cache of refusals instead. Both looked up under one lock. */
static X509 *cache_get(struct cma_verifier *v, const unsigned char digest[DIGEST_LEN],
                       int64_t now_ms, bool *refused)
{
    const struct verify_slot *s = &v->slots[digest[0] % VERIFY_SLOTS];
    const struct fail_slot *f = &v->failed[digest[0] % VERIFY_SLOTS];
    X509 *leaf = NULL;
    pthread_mutex_lock(&v->lock);
    if (s->leaf && s->until_ms > now_ms && memcmp(s->digest, digest, DIGEST_LEN) == 0 &&
        X509_up_ref(s->leaf) == 1)
        leaf = s->leaf;
    *refused = !leaf && f->until_ms > now_ms && memcmp(f->digest, digest, DIGEST_LEN) == 0;
    pthread_mutex_unlock(&v->lock);
    return leaf;
}

static void cache_put(struct cma_verifier *v, const unsigned char digest[DIGEST_LEN],
                      int64_t until_ms, X509 *leaf)
{
    if (X509_up_ref(leaf) != 1)
        return;
    struct verify_slot *s = &v->slots[digest[0] % VERIFY_SLOTS];
    pthread_mutex_lock(&v->lock);
    X509 *old = s->leaf;
    memcpy(s->digest, digest, DIGEST_LEN);
    s->until_ms = until_ms;
    s->leaf = leaf;
    pthread_mutex_unlock(&v->lock);
    X509_free(old);
}

static void failed_put(struct cma_verifier *v, const unsigned char digest[DIGEST_LEN],
                       int64_t until_ms)
{
    struct fail_slot *s = &v->failed[digest[0] % VERIFY_SLOTS];
    pthread_mutex_lock(&v->lock);
    memcpy(s->digest, digest, DIGEST_LEN);
    s->until_ms = until_ms;
    pthread_mutex_unlock(&v->lock);
}

/* Whether X509_verify_cert's error is a verdict on the chain that stays true for this bundle
 * (false for errors that time, memory or a retry can change). */
static bool lasting_failure(int error)
{
    switch (error) {
    case X509_V_OK: /* failed without saying why */
    case X509_V_ERR_UNSPECIFIED:
    case X509_V_ERR_OUT_OF_MEM:
    case X509_V_ERR_CERT_NOT_YET_VALID:
    case X509_V_ERR_CRL_NOT_YET_VALID:
    case X509_V_ERR_STORE_LOOKUP:
        return false;
    default:
        return true;
    }
}

/* now + the time left until the earliest notAfter of the verified chain, at most VERIFY_TTL_MS;
 * now (nothing to cache) when a date cannot be read. */
static int64_t valid_until(X509_STORE_CTX *ctx, int64_t now_ms)
{
    int64_t left_ms = VERIFY_TTL_MS;
    STACK_OF(X509) *chain = X509_STORE_CTX_get0_chain(ctx);
    int n = chain ? sk_X509_num(chain) : 0;
    if (n == 0)
        return now_ms;
    for (int i = 0; i < n; i++) {
        int days = 0, secs = 0;
        if (ASN1_TIME_diff(&days, &secs, NULL, X509_get0_notAfter(sk_X509_value(chain, i))) != 1)
            return now_ms;
        int64_t ms = ((int64_t)days * 86400 + secs) * 1000;
        if (ms < left_ms)
            left_ms = ms;
    }
    return left_ms > 0 ? now_ms + left_ms : now_ms;
}

/* The chain's DER parsed: *leaf (owned) and the rest pushed on untrusted; false when one does
 * not parse or memory ran out (*leaf may then be set: the caller frees it). */
static bool parse_chain(const struct cma_chain *ch, X509 **leaf, STACK_OF(X509) * untrusted)
{
    for (size_t i = 0; i < ch->n; i++) {
        const unsigned char *der = ch->der[i];
        X509 *c = ch->len[i] <= LONG_MAX ? d2i_X509(NULL, &der, (long)ch->len[i]) : NULL;
        if (!c)
            return false;
        if (i == 0) {
            *leaf = c;
        } else if (!sk_X509_push(untrusted, c)) {
            X509_free(c);
            return false;
        }
    }
    return true;
}

/* The full verification; the leaf (owned) or NULL. *until_ms: how long the result holds;
 * *lasting: on NULL, whether the failure is OpenSSL's verdict (lasting_failure). */
static X509 *verify_chain(struct cma_verifier *v, const struct cma_chain *ch, int64_t now_ms,
                          int64_t *until_ms, bool *lasting)
{
    *lasting = false;
    pthread_mutex_lock(&v->lock);
    v->full_checks++;
    pthread_mutex_unlock(&v->lock);
    X509 *leaf = NULL;
    STACK_OF(X509) *untrusted = sk_X509_new_null();
    bool ok = untrusted != NULL && parse_chain(ch, &leaf, untrusted);
    X509_STORE_CTX *ctx = ok ? X509_STORE_CTX_new() : NULL;
    ok = ok && ctx && X509_STORE_CTX_init(ctx, v->store, leaf, untrusted) == 1 &&
         X509_STORE_CTX_set_purpose(ctx, X509_PURPOSE_SSL_CLIENT) == 1;
    int verdict = ok ? X509_verify_cert(ctx) : -1;
    ok = verdict == 1;
    if (ok)
        *until_ms = valid_until(ctx, now_ms);
    else if (verdict == 0)
        *lasting = lasting_failure(X509_STORE_CTX_get_error(ctx));
    X509_STORE_CTX_free(ctx);
    sk_X509_pop_free(untrusted, X509_free);
    if (!ok) {
        X509_free(leaf);
        return NULL;
    }
    return leaf;
}

X509 *cma_verifier_check(struct cma_verifier *v, const struct cma_chain *chain, int64_t now_ms)
{
    if (!v || chain->n == 0)
        return NULL;
    unsigned char digest[DIGEST_LEN];
    bool keyed = chain_digest(v, chain, digest);
    bool refused = false;
    X509 *leaf = keyed ? cache_get(v, digest, now_ms, &refused) : NULL;
    if (leaf || refused)
        return leaf;
    int64_t until_ms = now_ms;
    bool lasting = false;
    leaf = verify_chain(v, chain, now_ms, &until_ms, &lasting);
    if (leaf && keyed && until_ms > now_ms)
        cache_put(v, digest, until_ms, leaf);
    else if (!leaf && keyed && lasting)
        failed_put(v, digest, now_ms + VERIFY_TTL_MS);
    return leaf;
}

size_t cma_verifier_full_checks(struct cma_verifier *v)
{
    pthread_mutex_lock(&v->lock);
    size_t n = v->full_checks;
    pthread_mutex_unlock(&v->lock);
    return n;
}
