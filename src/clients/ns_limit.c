/* ns_limit.c: query slots per (backend, namespace) with try-acquire semantics (ns_limit.h).
 *
 * DESIGN: the keys live in one array indexed by the project's hash table (hash.h), under one
 * mutex. The table has no removal, so idle keys (no slot held) are dropped by compacting the
 * array and rebuilding the index, and only when the array is full: a busy adapter keeps the
 * keys it uses, and a stream of new namespaces cannot grow the table past max_keys. */
#include "cma/ns_limit.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "cma/hash.h"

struct key {
    char *text; /* backend NUL namespace_ NUL */
    size_t len; /* both names and the NUL between them */
    uint64_t hash;
    size_t in_flight;
};

struct cma_ns_limit {
    pthread_mutex_t lock;
    size_t max_per_key, max_keys;
    struct key *keys;
    size_t n_keys, cap_keys;
    struct cma_htab index;
    struct cma_ns_limit_stats stats;
};

/* A lookup key: the two names without copying them. */
struct probe {
    const char *backend, *namespace_;
    size_t backend_len, len;
};

static struct probe probe_of(const char *backend, const char *namespace_)
{
    size_t b = strlen(backend);
    return (struct probe){backend, namespace_, b, b + 1 + strlen(namespace_)};
}

static uint64_t probe_hash(const struct probe *p)
{
    uint64_t h = cma_hash_bytes(CMA_HASH_FNV_OFFSET, p->backend, p->backend_len);
    h = cma_hash_byte(h, 0);
    return cma_hash_bytes(h, p->namespace_, p->len - p->backend_len - 1);
}

static bool key_eq(const void *ctx, size_t index, const void *key)
{
    const struct cma_ns_limit *l = ctx;
    const struct key *k = &l->keys[index];
    const struct probe *p = key;
    return k->len == p->len && memcmp(k->text, p->backend, p->backend_len + 1) == 0 &&
           memcmp(k->text + p->backend_len + 1, p->namespace_, p->len - p->backend_len - 1) == 0;
}

/* For re-inserting keys known to be distinct: every occupied slot is another key. */
static bool never_eq(const void *ctx, size_t index, const void *key)
{
    (void)ctx;
    (void)index;
    (void)key;
    return false;
}

static uint64_t key_hash(const void *ctx, size_t index)
{
    const struct cma_ns_limit *l = ctx;
    return l->keys[index].hash;
}

enum cma_errc cma_ns_limit_new(size_t max_per_key, size_t max_keys, struct cma_ns_limit **ret,
                               struct cma_err *reterr)
{
    struct cma_ns_limit *l = calloc(1, sizeof(*l));
    if (!l)
        return cma_err_set(reterr, CMA_ERR_NOMEM, "out of memory");
    l->max_per_key = max_per_key ? max_per_key : CMA_NS_LIMIT_DEFAULT;
    l->max_keys = max_keys ? max_keys : CMA_NS_LIMIT_DEFAULT_KEYS;
    if (pthread_mutex_init(&l->lock, NULL) != 0) {
        free(l);
        return cma_err_set(reterr, CMA_ERR_NOMEM, "out of memory");
    }
    *ret = l;
    return CMA_OK;
}

void cma_ns_limit_free(struct cma_ns_limit *l)
{
    if (!l)
        return;
    for (size_t i = 0; i < l->n_keys; i++)
        free(l->keys[i].text);
    free(l->keys);
    cma_htab_done(&l->index);
    pthread_mutex_destroy(&l->lock);
    free(l);
}

/* Drops the idle keys and rebuilds the index over the ones left. */
static enum cma_errc compact(struct cma_ns_limit *l)
{
    size_t n = 0;
    for (size_t i = 0; i < l->n_keys; i++) {
        if (l->keys[i].in_flight)
            l->keys[n++] = l->keys[i];
        else
            free(l->keys[i].text);
    }
    l->n_keys = n;
    cma_htab_done(&l->index);
    memset(&l->index, 0, sizeof(l->index));
    for (size_t i = 0; i < n; i++) {
        if (cma_htab_reserve(&l->index, i, key_hash, l) != CMA_OK)
            return CMA_ERR_NOMEM;
        size_t *slot = cma_htab_find(&l->index, l->keys[i].hash, NULL, never_eq, l);
        if (!slot) /* not after a reserve */
            return CMA_ERR_INTERNAL;
        *slot = i + 1;
    }
    return CMA_OK;
}

/* The key for p, added (idle) when absent; NULL when out of memory or the table is full of
 * busy keys (*ret_full). Under the lock. */
static struct key *key_get(struct cma_ns_limit *l, const struct probe *p, uint64_t hash,
                           bool *ret_full)
{
    *ret_full = false;
    if (cma_htab_reserve(&l->index, l->n_keys, key_hash, l) != CMA_OK)
        return NULL;
    size_t *slot = cma_htab_find(&l->index, hash, p, key_eq, l);
    if (!slot) /* not after a reserve */
        return NULL;
    if (*slot)
        return &l->keys[*slot - 1];
    if (l->n_keys == l->max_keys) {
        if (compact(l) != CMA_OK)
            return NULL;
        if (l->n_keys == l->max_keys) {
            *ret_full = true;
            return NULL;
        }
        if (cma_htab_reserve(&l->index, l->n_keys, key_hash, l) != CMA_OK)
            return NULL;
        slot = cma_htab_find(&l->index, hash, p, key_eq, l);
        if (!slot)
            return NULL;
    }
    if (l->n_keys == l->cap_keys) {
        size_t cap = l->cap_keys ? l->cap_keys * 2 : 16;
        cap = cap < l->max_keys ? cap : l->max_keys;
        struct key *keys = realloc(l->keys, cap * sizeof(*keys));
        if (!keys)
            return NULL;
        l->keys = keys;
        l->cap_keys = cap;
    }
    char *text = malloc(p->len + 1);
    if (!text)
        return NULL;
    memcpy(text, p->backend, p->backend_len + 1);
    memcpy(text + p->backend_len + 1, p->namespace_, p->len - p->backend_len); /* with its NUL */
    l->keys[l->n_keys] = (struct key){.text = text, .len = p->len, .hash = hash};
    *slot = ++l->n_keys;
    return &l->keys[l->n_keys - 1];
}

enum cma_errc cma_ns_limit_try_acquire(struct cma_ns_limit *l, const char *backend,
                                       const char *namespace_, struct cma_err *reterr)
{
    struct probe p = probe_of(backend, namespace_);
    uint64_t hash = probe_hash(&p);
    bool full = false;
    pthread_mutex_lock(&l->lock);
    struct key *k = key_get(l, &p, hash, &full);
    bool busy = k && k->in_flight >= l->max_per_key;
    if (k && !busy) {
        k->in_flight++;
        l->stats.in_flight++;
        l->stats.acquired++;
    } else if (k || full) {
        l->stats.rejected++;
    }
    size_t max = l->max_per_key;
    pthread_mutex_unlock(&l->lock);
    if (busy)
        return cma_err_set(reterr, CMA_ERR_TOO_MANY_REQUESTS,
                           "namespace %s already runs %zu queries of its MetricRules on backend "
                           "%s (--metric-rules-max-concurrent-queries); try again later",
                           namespace_, max, backend[0] ? backend : "(the flags' backend)");
    if (full)
        return cma_err_set(reterr, CMA_ERR_TOO_MANY_REQUESTS,
                           "too many namespaces query at once; try again later");
    if (!k)
        return cma_err_set(reterr, CMA_ERR_NOMEM, "out of memory");
    return CMA_OK;
}

void cma_ns_limit_release(struct cma_ns_limit *l, const char *backend, const char *namespace_)
{
    struct probe p = probe_of(backend, namespace_);
    uint64_t hash = probe_hash(&p);
    pthread_mutex_lock(&l->lock);
    size_t *slot = l->index.cap ? cma_htab_find(&l->index, hash, &p, key_eq, l) : NULL;
    if (slot && *slot && l->keys[*slot - 1].in_flight > 0) {
        l->keys[*slot - 1].in_flight--;
        l->stats.in_flight--;
    }
    pthread_mutex_unlock(&l->lock);
}

void cma_ns_limit_stats(struct cma_ns_limit *l, struct cma_ns_limit_stats *ret)
{
    pthread_mutex_lock(&l->lock);
    *ret = l->stats;
    ret->keys = l->n_keys;
    pthread_mutex_unlock(&l->lock);
}
