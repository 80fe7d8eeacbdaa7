/* auth_internal.h: what authn.c, authz.c and verify.c share: the struct cma_auth (owned by
 * authn.c), the TTL cache both webhooks use, and the certificate verifier. Not a public
 * contract. */
#ifndef CMA_AUTH_INTERNAL_H
#define CMA_AUTH_INTERNAL_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "cma/auth.h"

/* A small TTL map from a string key to a string value (the webhook body or decision), bounded:
 * expired entries are dropped on insert and the oldest goes when full. Thread-safe. A lookup
 * scans the entries' key hashes (FNV-1a) and compares a key only on a hash match: the keys are
 * SubjectAccessReview bodies that share a long prefix, and the scan also runs on the event loop
 * (cma_app_try_inline). */
struct auth_cache_entry {
    char *key;
    char *value;
    int64_t expires_ms;
    uint64_t hash; /* cma_hash_str of key */
};
struct auth_cache {
    pthread_mutex_t lock;
    struct auth_cache_entry *items;
    size_t n, cap;
};
void cma_auth_cache_init(struct auth_cache *c, size_t cap);
void cma_auth_cache_done(struct auth_cache *c);
/* Copy of the value (caller frees) or NULL when absent/expired/out of memory. */
char *cma_auth_cache_get(struct auth_cache *c, const char *key, int64_t now_ms);
void cma_auth_cache_put(struct auth_cache *c, const char *key, const char *value,
                        int64_t expires_ms);
/* The SubjectAccessReview cache key of (u, at), appended to k: every field the review's body
 * carries, length-prefixed, so two reviews that differ have different keys (authz.c). */
enum cma_errc cma_authz_sar_key(const struct cma_user *u, const struct cma_authz_attrs *at,
                                struct cma_buf *k);

/* A trusted CA bundle and the chains that verified against it (verify.c). Thread-safe. */
typedef struct x509_store_st X509_STORE;
typedef struct x509_st X509;
struct cma_verifier;
/* A client's chain as it sent it: DER certificates, leaf first (borrowed). */
#define CMA_VERIFY_MAX_CHAIN 10
struct cma_chain {
    const unsigned char *der[CMA_VERIFY_MAX_CHAIN];
    size_t len[CMA_VERIFY_MAX_CHAIN];
    size_t n;
};
/* Takes ownership of store (freed here even on failure); NULL when out of memory. */
struct cma_verifier *cma_verifier_new(X509_STORE *store);
void cma_verifier_free(struct cma_verifier *v);
/* The chain's leaf (a new reference: X509_free) when the chain verifies for TLS client use
 * against the bundle, from the cache (entries valid before wall time now_ms) or freshly (OpenSSL
 * checks validity at the current time); NULL when the chain is empty or does not verify (a lasting
 * failure is cached too, apart from the successes, for a minute). */
X509 *cma_verifier_check(struct cma_verifier *v, const struct cma_chain *chain, int64_t now_ms);
/* How many chains were verified in full (not answered from the cache of successes or of
 * failures) since cma_verifier_new. */
size_t cma_verifier_full_checks(struct cma_verifier *v);

/* The header names of the requestheader authenticator (borrowed). */
struct cma_rh_headers {
    const char *const *user;
    size_t n_user;
    const char *const *group;
    size_t n_group;
    const char *const *extra; /* prefixes */
    size_t n_extra;
};
/* Calls fn(ctx, name, value) for every request header line in arrival order until it returns
 * false (cma_request_headers_each, or a test's list). */
typedef void (*cma_auth_headers_each_fn)(void *src,
                                         bool (*fn)(void *ctx, const char *name, const char *value),
                                         void *ctx);
/* The identity the headers carry, read exactly as kube-apiserver's requestheader authenticator
 * reads them (authn.c says how). *ret is NULL when no username header has a non-empty value;
 * CMA_ERR_NOMEM is the only failure. Caller owns *ret: cma_user_free(). */
enum cma_errc cma_auth_rh_identity(const struct cma_rh_headers *h, cma_auth_headers_each_fn each,
                                   void *src, struct cma_user **ret);

struct cma_auth {
    struct cma_auth_options opts; /* string arrays borrowed from the caller's options */
    pthread_mutex_t lock;         /* guards snap */
    struct auth_snapshot *snap;
    struct auth_cache token_cache;
    struct auth_cache sar_cache;
    pthread_t refresher;
    bool refresher_started;
    pthread_mutex_t stop_lock;
    pthread_cond_t stop_cond;
    bool stopping;
    /* self-metrics (NULL when opts.metrics is NULL): authentication attempts by method and
     * result, authorization decisions by decision and source, webhook cache lookups */
    struct cma_metric *m_authn, *m_authz, *m_cache;
};

/* Counts an authorization decision and a webhook cache lookup (authz.c). */
void cma_auth_count_authz(struct cma_auth *a, const char *decision, const char *source);
void cma_auth_count_cache(struct cma_auth *a, const char *cache, bool hit);

#endif
