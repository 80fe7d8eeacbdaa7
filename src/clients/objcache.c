/* objcache.c: watch caches of Kubernetes objects (namespace, name, labels, phase) for label
 * selector lookups, and the process's registry of them (one cache per resource).
 *
 * DESIGN: each object is packed into ONE allocation: a 2-byte label count followed by the
 * NUL-terminated strings namespace, name, phase, then key/value pairs. The cache is a sorted
 * array of pointers to these packs (by namespace, then name), guarded by a rwlock: lookups take
 * the read lock, events the write lock (binary search, then memmove). A LIST builds a new array
 * outside the lock and swaps it in, so requests keep reading the old state while re-listing.
 * One thread per cache (the LIST+WATCH driver, listwatch.c) runs LIST, then WATCH from the list's
 * resourceVersion (bookmarks move it on). The LIST's pages are decoded as they stream in
 * (kube_stream.c): each object is packed as soon as it is read and nothing else of it is kept, so a
 * LIST's peak is the array it builds (plus the old one while re-listing), not pages of 3.5 KB pods;
 * a 410 Gone (HTTP or ERROR event) re-lists; a broken stream reconnects from the last
 * resourceVersion after a backoff of 200 ms doubling to 30 s, with jitter, reset once a watch
 * delivered an event. This module does not log: what its threads go through (LIST failures,
 * re-lists, refused or broken watches, a cache that cannot start) is reported as events to the
 * registry's observer, which the layer that decides supplies (main logs them).
 *
 * Label index: a lookup whose selector has an EQ or IN requirement takes its candidates from an
 * index of that label key instead of scanning the namespace, then runs the full selector on each
 * candidate, so the index only narrows and never decides a match. Only keys that selectors use
 * are indexed: the first lookup with an EQ/IN requirement on no indexed key indexes its first
 * EQ/IN key (write lock: the read lock is released, the write lock taken, the index built if
 * still missing and the lookup done under the write lock), up to IX_KEYS_MAX keys per cache;
 * other selectors, or ones without EQ/IN, scan as before. A key's index maps each value (hash
 * table of hash.h over an array of groups) to the pack pointers holding it, sorted by namespace
 * then name like c->objs: a namespaced lookup binary-searches its namespace's run in the group,
 * an all-namespaces lookup takes the whole group, one value's hits come out in order, and
 * several values' (IN) are sorted with cmp_packs (an object has one value per key, so no
 * duplicates). Among several indexed EQ/IN requirements, the one whose values hold the fewest
 * objects is used. install() rebuilds every indexed key from the new array, upsert/remove
 * update the postings (a pack replaced under the same value: the pointer is swapped in place).
 * The hash table has no removal, so a value whose objects are all gone stays as an empty group
 * (its pointer array freed) until more than half the groups (and over IX_COMPACT_MIN) are empty,
 * when the key is rebuilt. Any allocation failure, or a posting not where it must be, drops
 * that key's index (its lookups scan): a wrong or missing name is never served. Cost: about
 * 8-12 bytes per object holding an indexed key (one pointer, growth slack of at most half),
 * plus per distinct value a group, its string and two table slots; counted in
 * cma_objcache_bytes(). */
#include "cma/objcache.h"

#include <jansson.h>
#include <malloc.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "cma/hash.h"
#include "cma/kube.h"
#include "cma/selector.h"
#include "cma/str.h"
#include "internal.h"

#define RV_MAX 64
#define MAX_LABELS 65535
#define IX_KEYS_MAX 8     /* label keys indexed per cache; selectors on others scan */
#define IX_COMPACT_MIN 32 /* empty groups a key keeps before it is rebuilt */

/* The objects whose indexed label has one value (all namespaces). */
struct ix_group {
    char *value;
    uint64_t hash; /* of value */
    char **packs;  /* borrowed from c->objs, sorted by namespace/name; NULL when n is 0 */
    size_t n, cap;
};

/* The index of one label key: its groups, found by value through tab. */
struct ix_key {
    char *key;
    struct ix_group *groups;
    size_t n_groups, cap_groups;
    size_t n_empty; /* groups with n == 0 (the table has no removal) */
    struct cma_htab tab;
    size_t bytes; /* heap bytes of all the above */
};

struct cma_objcache {
    struct cma_kube *kube;
    char *group, *version, *resource;
    pthread_rwlock_t lock;
    char **objs; /* packed objects, sorted by namespace/name */
    size_t n, cap;
    size_t bytes;                  /* packed bytes */
    struct ix_key ix[IX_KEYS_MAX]; /* the label index, ix[0..n_ix) */
    size_t n_ix;
    char rv[RV_MAX];
    bool synced;
    size_t lists;
    struct cma_objcache_observer observer; /* set before the thread starts; read-only */
    struct cma_listwatch lw;               /* the LIST+WATCH thread */
};

/* ---- packed objects ---------------------------------------------------------------------- */

static size_t pack_labels(const char *p)
{
    return (size_t)(unsigned char)p[0] | ((size_t)(unsigned char)p[1] << 8);
}
static const char *pack_ns(const char *p)
{
    return p + 2;
}
static const char *pack_name(const char *p)
{
    return pack_ns(p) + strlen(pack_ns(p)) + 1;
}
static const char *pack_phase(const char *p)
{
    return pack_name(p) + strlen(pack_name(p)) + 1;
}

static size_t pack_size(const char *p)
{
    const char *s = pack_phase(p);
    s += strlen(s) + 1;
    for (size_t i = 0, n = pack_labels(p) * 2; i < n; i++)
        s += strlen(s) + 1;
    return (size_t)(s - p);
}

static char *pack(const char *ns, const char *name, const char *phase, char *const *keys,
                  char *const *values, size_t n_labels)
{
    if (n_labels > MAX_LABELS)
        return NULL;
    ns = ns ? ns : "";
    phase = phase ? phase : "";
    size_t size = 2 + strlen(ns) + 1 + strlen(name) + 1 + strlen(phase) + 1;
    for (size_t i = 0; i < n_labels; i++)
        size += strlen(keys[i]) + 1 + strlen(values[i]) + 1;
    char *p = malloc(size);
    if (!p)
        return NULL;
    p[0] = (char)(n_labels & 0xff);
    p[1] = (char)(n_labels >> 8);
    char *w = p + 2;
    const char *parts[3] = {ns, name, phase};
    for (size_t i = 0; i < 3; i++) {
        size_t l = strlen(parts[i]) + 1;
        memcpy(w, parts[i], l);
        w += l;
    }
    for (size_t i = 0; i < n_labels; i++) {
        size_t kl = strlen(keys[i]) + 1, vl = strlen(values[i]) + 1;
        memcpy(w, keys[i], kl);
        w += kl;
        memcpy(w, values[i], vl);
        w += vl;
    }
    return p;
}

static int cmp_key(const char *p, const char *ns, const char *name)
{
    int c = strcmp(pack_ns(p), ns);
    return c ? c : strcmp(pack_name(p), name);
}

static int cmp_packs(const void *a, const void *b)
{
    const char *pa = *(char *const *)a, *pb = *(char *const *)b;
    return cmp_key(pa, pack_ns(pb), pack_name(pb));
}

/* Index of the first object >= (ns, name). */
static size_t lower_bound(char **objs, size_t n, const char *ns, const char *name)
{
    size_t lo = 0, hi = n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (cmp_key(objs[mid], ns, name) < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

/* The run [*ret_lo, *ret_hi) of objs[0..n) (sorted) in namespace ns; NULL ns: all of them. */
static void ns_run(char **objs, size_t n, const char *ns, size_t *ret_lo, size_t *ret_hi)
{
    if (!ns) {
        *ret_lo = 0;
        *ret_hi = n;
        return;
    }
    size_t lo = lower_bound(objs, n, ns, ""), hi = n;
    *ret_lo = lo;
    while (lo < hi) { /* the first of a later namespace */
        size_t mid = lo + (hi - lo) / 2;
        if (strcmp(pack_ns(objs[mid]), ns) <= 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    *ret_hi = lo;
}

static const char *pack_label(void *ctx, const char *key)
{
    const char *p = ctx;
    size_t n = pack_labels(p);
    const char *s = pack_phase(p);
    s += strlen(s) + 1;
    for (size_t i = 0; i < n; i++) {
        const char *k = s;
        const char *v = k + strlen(k) + 1;
        if (strcmp(k, key) == 0)
            return v;
        s = v + strlen(v) + 1;
    }
    return NULL;
}

static void free_packs(char **objs, size_t n)
{
    if (!objs)
        return;
    for (size_t i = 0; i < n; i++)
        free(objs[i]);
    free(objs);
}

/* ---- the label index --------------------------------------------------------------------- */

struct ix_probe {
    const char *value;
    uint64_t hash;
};

static uint64_t ix_hash_of(const void *ctx, size_t index)
{
    const struct ix_key *k = ctx;
    return k->groups[index].hash;
}

static bool ix_eq(const void *ctx, size_t index, const void *key)
{
    const struct ix_group *g = &((const struct ix_key *)ctx)->groups[index];
    const struct ix_probe *pr = key;
    return g->hash == pr->hash && strcmp(g->value, pr->value) == 0;
}

static uint64_t ix_hash(const char *value)
{
    return cma_hash_str(value, strlen(value));
}

static struct ix_group *ix_group_find(const struct ix_key *k, const char *value, uint64_t hash)
{
    struct ix_probe pr = {value, hash};
    size_t *slot = cma_htab_find(&k->tab, hash, &pr, ix_eq, k);
    return slot && *slot ? &k->groups[*slot - 1] : NULL;
}

/* The group of value, added (empty) when missing; NULL when out of memory. */
static struct ix_group *ix_group_get(struct ix_key *k, const char *value)
{
    uint64_t hash = ix_hash(value);
    struct ix_group *g = ix_group_find(k, value, hash);
    if (g)
        return g;
    size_t old_slots = k->tab.cap;
    if (cma_htab_reserve(&k->tab, k->n_groups, ix_hash_of, k) != CMA_OK)
        return NULL;
    k->bytes += (k->tab.cap - old_slots) * sizeof(*k->tab.slots);
    if (k->n_groups == k->cap_groups) {
        size_t want = k->cap_groups ? k->cap_groups * 2 : 8;
        struct ix_group *grown = realloc(k->groups, want * sizeof(*grown));
        if (!grown)
            return NULL;
        k->bytes += (want - k->cap_groups) * sizeof(*grown);
        k->groups = grown;
        k->cap_groups = want;
    }
    char *v = cma_strdup(value);
    if (!v)
        return NULL;
    k->bytes += strlen(v) + 1;
    struct ix_probe pr = {value, hash};
    size_t *slot = cma_htab_find(&k->tab, hash, &pr, ix_eq, k);
    k->groups[k->n_groups] = (struct ix_group){.value = v, .hash = hash};
    *slot = ++k->n_groups;
    k->n_empty++;
    return &k->groups[k->n_groups - 1];
}

/* Adds pack p under value; false when out of memory or p is there already. */
static bool ix_add(struct ix_key *k, char *p, const char *value)
{
    struct ix_group *g = ix_group_get(k, value);
    if (!g)
        return false;
    size_t i = g->n;
    if (i && cmp_packs(&g->packs[i - 1], &p) >= 0) {
        i = lower_bound(g->packs, g->n, pack_ns(p), pack_name(p));
        if (cmp_packs(&g->packs[i], &p) == 0)
            return false;
    }
    if (g->n == g->cap) {
        size_t want = g->cap + g->cap / 2 + 1;
        char **grown = realloc(g->packs, want * sizeof(*grown));
        if (!grown)
            return false;
        k->bytes += (want - g->cap) * sizeof(*grown);
        g->packs = grown;
        g->cap = want;
    }
    memmove(&g->packs[i + 1], &g->packs[i], (g->n - i) * sizeof(*g->packs));
    g->packs[i] = p;
    if (g->n++ == 0)
        k->n_empty--;
    return true;
}

/* The position of pack p in value's group, or false when it is not there. */
static bool ix_locate(const struct ix_key *k, const char *p, const char *value,
                      struct ix_group **ret_g, size_t *ret_i)
{
    struct ix_group *g = ix_group_find(k, value, ix_hash(value));
    if (!g)
        return false;
    size_t i = lower_bound(g->packs, g->n, pack_ns(p), pack_name(p));
    if (i >= g->n || g->packs[i] != p)
        return false;
    *ret_g = g;
    *ret_i = i;
    return true;
}

/* Removes pack p from value's group; false when it is not there. */
static bool ix_del(struct ix_key *k, const char *p, const char *value)
{
    struct ix_group *g;
    size_t i;
    if (!ix_locate(k, p, value, &g, &i))
        return false;
    memmove(&g->packs[i], &g->packs[i + 1], (g->n - i - 1) * sizeof(*g->packs));
    g->n--;
    if (g->n == 0) {
        k->bytes -= g->cap * sizeof(*g->packs);
        free(g->packs);
        g->packs = NULL;
        g->cap = 0;
        k->n_empty++;
    } else if (g->n * 4 < g->cap) {
        char **shrunk = realloc(g->packs, g->cap / 2 * sizeof(*shrunk));
        if (shrunk) {
            k->bytes -= (g->cap - g->cap / 2) * sizeof(*shrunk);
            g->packs = shrunk;
            g->cap /= 2;
        }
    }
    return true;
}

static void ix_key_free(struct ix_key *k)
{
    for (size_t i = 0; i < k->n_groups; i++) {
        free(k->groups[i].value);
        free(k->groups[i].packs);
    }
    free(k->groups);
    cma_htab_done(&k->tab);
    free(k->key);
    memset(k, 0, sizeof(*k));
}

/* Indexes `key` over objs[0..n) into k; false (k left empty) when out of memory. */
static bool ix_build(struct ix_key *k, const char *key, char **objs, size_t n)
{
    memset(k, 0, sizeof(*k));
    if (!(k->key = cma_strdup(key)))
        return false;
    k->bytes = strlen(key) + 1;
    for (size_t i = 0; i < n; i++) {
        const char *v = pack_label(objs[i], key);
        if (v && !ix_add(k, objs[i], v)) {
            ix_key_free(k);
            return false;
        }
    }
    return true;
}

/* The position of key's index in c->ix, or c->n_ix. */
static size_t ix_find(const struct cma_objcache *c, const char *key)
{
    size_t i = 0;
    while (i < c->n_ix && strcmp(c->ix[i].key, key) != 0)
        i++;
    return i;
}

/* Forgets index i (its key's lookups scan); the last index takes its place. */
static void ix_drop(struct cma_objcache *c, size_t i)
{
    ix_key_free(&c->ix[i]);
    c->ix[i] = c->ix[--c->n_ix];
    memset(&c->ix[c->n_ix], 0, sizeof(c->ix[c->n_ix]));
}

/* Rebuilds index i from c->objs; false when it was dropped instead (out of memory). */
static bool ix_rebuild(struct cma_objcache *c, size_t i)
{
    struct ix_key fresh;
    if (!ix_build(&fresh, c->ix[i].key, c->objs, c->n)) {
        ix_drop(c, i);
        return false;
    }
    ix_key_free(&c->ix[i]);
    c->ix[i] = fresh;
    return true;
}

/* Rebuilds every index (all == true) or those with too many empty groups. Write lock held. */
static void ix_rebuild_all(struct cma_objcache *c, bool all)
{
    size_t i = 0;
    while (i < c->n_ix) {
        const struct ix_key *k = &c->ix[i];
        bool sparse = k->n_empty > IX_COMPACT_MIN && k->n_empty * 2 > k->n_groups;
        if ((all || sparse) && !ix_rebuild(c, i))
            continue; /* dropped: slot i holds another index now */
        i++;
    }
}

/* Moves the index from old to p (either NULL: p added, old removed). Write lock held; the caller
 * frees old afterwards. An index that cannot follow is dropped. */
static void ix_update(struct cma_objcache *c, char *old, char *p)
{
    size_t i = 0;
    while (i < c->n_ix) {
        struct ix_key *k = &c->ix[i];
        const char *ov = old ? pack_label(old, k->key) : NULL;
        const char *nv = p ? pack_label(p, k->key) : NULL;
        bool ok;
        struct ix_group *g;
        size_t at;
        if (ov && nv && strcmp(ov, nv) == 0) {
            ok = ix_locate(k, old, ov, &g, &at);
            if (ok)
                g->packs[at] = p; /* same namespace/name: the order holds */
        } else {
            ok = (!ov || ix_del(k, old, ov)) && (!nv || ix_add(k, p, nv));
        }
        if (ok)
            i++;
        else
            ix_drop(c, i);
    }
}

/* Indexes key if it is not and there is room (nothing on failure). Write lock held. */
static void ix_add_key(struct cma_objcache *c, const char *key)
{
    if (c->n_ix < IX_KEYS_MAX && ix_find(c, key) == c->n_ix &&
        ix_build(&c->ix[c->n_ix], key, c->objs, c->n))
        c->n_ix++;
}

static bool narrows(const struct cma_selector_req *r)
{
    return r->op == CMA_SEL_EQ || r->op == CMA_SEL_IN;
}

/* The key a lookup with sel should have indexed: its first EQ/IN key when none of its EQ/IN keys
 * is indexed and there is room; else NULL. Lock held. */
static const char *ix_wanted(const struct cma_objcache *c, const struct cma_selector *sel)
{
    const char *want = NULL;
    if (!sel || c->n_ix >= IX_KEYS_MAX)
        return NULL;
    for (size_t i = 0; i < sel->n_reqs; i++) {
        const struct cma_selector_req *r = &sel->reqs[i];
        if (!narrows(r))
            continue;
        if (ix_find(c, r->key) < c->n_ix)
            return NULL;
        if (!want)
            want = r->key;
    }
    return want;
}

/* The indexed EQ/IN requirement of sel whose values hold the fewest objects (its index in
 * *ret_k), or NULL: scan. Lock held. */
static const struct cma_selector_req *
ix_pick(const struct cma_objcache *c, const struct cma_selector *sel, const struct ix_key **ret_k)
{
    const struct cma_selector_req *best = NULL;
    size_t best_n = SIZE_MAX;
    for (size_t i = 0; sel && i < sel->n_reqs; i++) {
        const struct cma_selector_req *r = &sel->reqs[i];
        size_t at = narrows(r) ? ix_find(c, r->key) : c->n_ix;
        if (at == c->n_ix)
            continue;
        size_t n = 0;
        for (size_t j = 0; j < r->n_values; j++) {
            const struct ix_group *g =
                ix_group_find(&c->ix[at], r->values[j], ix_hash(r->values[j]));
            n += g ? g->n : 0;
        }
        if (n < best_n) {
            best = r;
            best_n = n;
            *ret_k = &c->ix[at];
        }
    }
    return best;
}

/* ---- construction ------------------------------------------------------------------------ */

static enum cma_errc watch_init(struct cma_objcache *c);

enum cma_errc cma_objcache_new(struct cma_kube *kube, const char *group, const char *version,
                               const char *resource, struct cma_objcache **ret,
                               struct cma_err *reterr)
{
    struct cma_objcache *c = calloc(1, sizeof(*c));
    if (!c)
        return cma_err_set(reterr, CMA_ERR_NOMEM, "out of memory");
    c->kube = kube;
    c->group = cma_strdup(group ? group : "");
    c->version = cma_strdup(version ? version : "");
    c->resource = cma_strdup(resource ? resource : "");
    bool strs = c->group && c->version && c->resource;
    bool locks = strs && pthread_rwlock_init(&c->lock, NULL) == 0;
    if (locks && watch_init(c) != CMA_OK) {
        pthread_rwlock_destroy(&c->lock);
        locks = false;
    }
    if (!locks) {
        free(c->group);
        free(c->version);
        free(c->resource);
        free(c);
        return cma_err_set(reterr, strs ? CMA_ERR_INTERNAL : CMA_ERR_NOMEM,
                           "cannot create the cache of %s", resource ? resource : "");
    }
    *ret = c;
    return CMA_OK;
}

void cma_objcache_free(struct cma_objcache *c)
{
    if (!c)
        return;
    cma_listwatch_done(&c->lw); /* the thread is stopped first */
    for (size_t i = 0; i < c->n_ix; i++)
        ix_key_free(&c->ix[i]);
    free_packs(c->objs, c->n);
    pthread_rwlock_destroy(&c->lock);
    free(c->group);
    free(c->version);
    free(c->resource);
    free(c);
}

/* ---- reads ------------------------------------------------------------------------------- */

bool cma_objcache_is_synced(struct cma_objcache *c)
{
    pthread_rwlock_rdlock(&c->lock);
    bool synced = c->synced;
    pthread_rwlock_unlock(&c->lock);
    return synced;
}

size_t cma_objcache_count(struct cma_objcache *c)
{
    pthread_rwlock_rdlock(&c->lock);
    size_t n = c->n;
    pthread_rwlock_unlock(&c->lock);
    return n;
}

size_t cma_objcache_bytes(struct cma_objcache *c)
{
    pthread_rwlock_rdlock(&c->lock);
    size_t b = c->bytes + c->cap * sizeof(*c->objs);
    for (size_t i = 0; i < c->n_ix; i++)
        b += c->ix[i].bytes;
    pthread_rwlock_unlock(&c->lock);
    return b;
}

size_t cma_objcache_lists(struct cma_objcache *c)
{
    pthread_rwlock_rdlock(&c->lock);
    size_t n = c->lists;
    pthread_rwlock_unlock(&c->lock);
    return n;
}

size_t cma_objcache_watches(struct cma_objcache *c)
{
    return cma_listwatch_watches(&c->lw);
}

void cma_objcache_resource_version(struct cma_objcache *c, char *out, size_t out_len)
{
    if (!out_len)
        return;
    pthread_rwlock_rdlock(&c->lock);
    snprintf(out, out_len, "%s", c->rv);
    pthread_rwlock_unlock(&c->lock);
}

/* The packs a lookup found, borrowed from the cache (valid while its lock is held). */
struct hits {
    char **v;
    size_t n, cap;
};

/* Room for `more` hits. */
static bool hits_reserve(struct hits *h, size_t more)
{
    if (h->n + more <= h->cap)
        return true;
    size_t want = h->cap ? h->cap * 2 : 16;
    if (want < h->n + more)
        want = h->n + more;
    char **grown = realloc(h->v, want * sizeof(*grown));
    if (!grown)
        return false;
    h->v = grown;
    h->cap = want;
    return true;
}

/* The objects of ns (NULL: all) matching sel, by scanning. Lock held. */
static bool collect_scan(const struct cma_objcache *c, const char *ns,
                         const struct cma_selector *sel, struct hits *h)
{
    size_t lo, hi;
    ns_run(c->objs, c->n, ns, &lo, &hi);
    for (size_t i = lo; i < hi; i++) {
        char *p = c->objs[i];
        if (!sel || cma_selector_matches(sel, pack_label, p)) {
            if (!hits_reserve(h, 1))
                return false;
            h->v[h->n++] = p;
        }
    }
    return true;
}

/* The same, candidates taken from k's groups for the values of r (a requirement of sel). */
static bool collect_indexed(const struct ix_key *k, const struct cma_selector_req *r,
                            const char *ns, const struct cma_selector *sel, struct hits *h)
{
    size_t runs = 0;
    for (size_t j = 0; j < r->n_values; j++) {
        const struct ix_group *g = ix_group_find(k, r->values[j], ix_hash(r->values[j]));
        size_t lo = 0, hi = 0, before = h->n;
        if (g)
            ns_run(g->packs, g->n, ns, &lo, &hi);
        if (!hits_reserve(h, hi - lo)) /* the candidates mostly match: room for all */
            return false;
        for (size_t i = lo; i < hi; i++)
            if (cma_selector_matches(sel, pack_label, g->packs[i]))
                h->v[h->n++] = g->packs[i];
        runs += h->n > before;
    }
    if (runs > 1) /* several values (IN): each run is sorted, the whole is not */
        qsort(h->v, h->n, sizeof(*h->v), cmp_packs);
    return true;
}

/* Copies the names of the hits (non-NULL even when empty). */
static enum cma_errc hits_names(const struct hits *h, char ***ret)
{
    char **names = calloc(h->n ? h->n : 1, sizeof(*names));
    if (!names)
        return CMA_ERR_NOMEM;
    for (size_t i = 0; i < h->n; i++) {
        if (!(names[i] = cma_strdup(pack_name(h->v[i])))) {
            free_packs(names, i);
            return CMA_ERR_NOMEM;
        }
    }
    *ret = names;
    return CMA_OK;
}

enum cma_errc cma_objcache_list_names(struct cma_objcache *c, const char *namespace_,
                                      const struct cma_selector *selector, char ***ret_names,
                                      size_t *ret_n, struct cma_err *reterr)
{
    const char *ns = namespace_ && namespace_[0] ? namespace_ : NULL;
    struct hits h = {0};
    char **names = NULL;
    pthread_rwlock_rdlock(&c->lock);
    const char *key = ix_wanted(c, selector);
    if (key) { /* index it first: under the write lock, kept for this lookup */
        pthread_rwlock_unlock(&c->lock);
        pthread_rwlock_wrlock(&c->lock);
        ix_add_key(c, key);
    }
    const struct ix_key *k = NULL;
    const struct cma_selector_req *r = ix_pick(c, selector, &k);
    bool ok = r ? collect_indexed(k, r, ns, selector, &h) : collect_scan(c, ns, selector, &h);
    enum cma_errc rc = ok ? hits_names(&h, &names) : CMA_ERR_NOMEM;
    pthread_rwlock_unlock(&c->lock);
    free(h.v);
    if (rc != CMA_OK)
        return cma_err_set(reterr, CMA_ERR_NOMEM, "out of memory");
    *ret_names = names;
    *ret_n = h.n;
    return CMA_OK;
}

/* ---- writes ------------------------------------------------------------------------------ */

struct list_build {
    char **objs;
    size_t n, cap, bytes;
};

static enum cma_errc build_add(void *ctx, const struct cma_kube_object *objs, size_t n,
                               struct cma_err *reterr)
{
    struct list_build *lb = ctx;
    if (lb->n + n > lb->cap) {
        size_t want = lb->cap ? lb->cap : 64;
        while (want < lb->n + n)
            want *= 2;
        char **grown = realloc(lb->objs, want * sizeof(*grown));
        if (!grown)
            return cma_err_set(reterr, CMA_ERR_NOMEM, "out of memory");
        lb->objs = grown;
        lb->cap = want;
    }
    for (size_t i = 0; i < n; i++) {
        const struct cma_kube_object *o = &objs[i];
        char *p =
            pack(o->namespace_, o->name, o->phase, o->label_names, o->label_values, o->n_labels);
        if (!p)
            return cma_err_set(reterr, CMA_ERR_NOMEM, "out of memory");
        lb->objs[lb->n++] = p;
        lb->bytes += pack_size(p);
    }
    return CMA_OK;
}

/* Sorts the built array (dropping duplicates) and swaps it in. */
static void install(struct cma_objcache *c, struct list_build *lb, const char *rv)
{
    if (lb->n > 1)
        qsort(lb->objs, lb->n, sizeof(*lb->objs), cmp_packs);
    size_t w = 0;
    for (size_t i = 0; i < lb->n; i++) {
        if (w && cmp_packs(&lb->objs[w - 1], &lb->objs[i]) == 0) {
            lb->bytes -= pack_size(lb->objs[w - 1]);
            free(lb->objs[w - 1]);
            lb->objs[w - 1] = lb->objs[i];
            continue;
        }
        lb->objs[w++] = lb->objs[i];
    }
    lb->n = w;
    pthread_rwlock_wrlock(&c->lock);
    char **old = c->objs;
    size_t old_n = c->n;
    c->objs = lb->objs;
    c->n = lb->n;
    c->cap = lb->cap;
    c->bytes = lb->bytes;
    ix_rebuild_all(c, true);
    snprintf(c->rv, sizeof(c->rv), "%s", rv ? rv : "");
    c->synced = true;
    c->lists++;
    pthread_rwlock_unlock(&c->lock);
    free_packs(old, old_n);
    memset(lb, 0, sizeof(*lb));
}

enum cma_errc cma_objcache_replace(struct cma_objcache *c, const struct cma_kube_object *objs,
                                   size_t n, const char *resource_version, struct cma_err *reterr)
{
    struct list_build lb = {0};
    enum cma_errc rc = build_add(&lb, objs, n, reterr);
    if (rc != CMA_OK) {
        free_packs(lb.objs, lb.n);
        return rc;
    }
    install(c, &lb, resource_version);
    return CMA_OK;
}

/* Inserts or replaces p (owned from here on). Write lock held. */
static enum cma_errc upsert_locked(struct cma_objcache *c, char *p)
{
    size_t i = lower_bound(c->objs, c->n, pack_ns(p), pack_name(p));
    if (i < c->n && cmp_packs(&c->objs[i], &p) == 0) {
        char *old = c->objs[i];
        ix_update(c, old, p);
        c->bytes -= pack_size(old);
        free(old);
        c->objs[i] = p;
        c->bytes += pack_size(p);
        ix_rebuild_all(c, false);
        return CMA_OK;
    }
    if (c->n == c->cap) {
        size_t want = c->cap ? c->cap * 2 : 64;
        char **grown = realloc(c->objs, want * sizeof(*grown));
        if (!grown) {
            free(p);
            return CMA_ERR_NOMEM;
        }
        c->objs = grown;
        c->cap = want;
    }
    memmove(&c->objs[i + 1], &c->objs[i], (c->n - i) * sizeof(*c->objs));
    c->objs[i] = p;
    c->n++;
    c->bytes += pack_size(p);
    ix_update(c, NULL, p);
    return CMA_OK;
}

static void remove_locked(struct cma_objcache *c, const char *ns, const char *name)
{
    size_t i = lower_bound(c->objs, c->n, ns, name);
    if (i >= c->n || cmp_key(c->objs[i], ns, name) != 0)
        return;
    ix_update(c, c->objs[i], NULL);
    c->bytes -= pack_size(c->objs[i]);
    free(c->objs[i]);
    memmove(&c->objs[i], &c->objs[i + 1], (c->n - i - 1) * sizeof(*c->objs));
    c->n--;
    ix_rebuild_all(c, false);
}

/* The packed form of a watch event's object. */
static enum cma_errc pack_json(const json_t *obj, char **ret, struct cma_err *reterr)
{
    const json_t *meta = json_object_get(obj, "metadata");
    const char *name = json_string_value(json_object_get(meta, "name"));
    const char *ns = json_string_value(json_object_get(meta, "namespace"));
    const char *phase = json_string_value(json_object_get(json_object_get(obj, "status"), "phase"));
    const json_t *labels = json_object_get(meta, "labels");
    if (!name)
        return cma_err_set(reterr, CMA_ERR_KUBE_ERROR, "watch event object has no metadata.name");
    if (labels && !json_is_object(labels) && !json_is_null(labels))
        return cma_err_set(reterr, CMA_ERR_KUBE_ERROR,
                           "watch event object's metadata.labels is not an object");
    size_t n = json_object_size(labels);
    if (n > MAX_LABELS)
        return cma_err_set(reterr, CMA_ERR_KUBE_ERROR, "watch event object has too many labels");
    char **keys = calloc(n ? n : 1, sizeof(*keys));
    char **values = calloc(n ? n : 1, sizeof(*values));
    if (!keys || !values) {
        free(keys);
        free(values);
        return cma_err_set(reterr, CMA_ERR_NOMEM, "out of memory");
    }
    size_t i = 0;
    const char *key;
    const json_t *value;
    enum cma_errc rc = CMA_OK;
    json_object_foreach((json_t *)labels, key, value)
    {
        const char *v = json_string_value(value);
        if (i >= n)
            break;
        if (!v) {
            rc = cma_err_set(reterr, CMA_ERR_KUBE_ERROR,
                             "watch event object's label %s is not a string", key);
            break;
        }
        keys[i] = (char *)key;
        values[i] = (char *)v;
        i++;
    }
    if (rc == CMA_OK && !(*ret = pack(ns, name, phase, keys, values, i)))
        rc = cma_err_set(reterr, CMA_ERR_NOMEM, "out of memory");
    free(keys);
    free(values);
    return rc;
}

enum cma_errc cma_objcache_apply_event(struct cma_objcache *c, const char *line, size_t len,
                                       bool *ret_gone, struct cma_err *reterr)
{
    *ret_gone = false;
    json_error_t jerr;
    json_t *root = json_loadb(line, len, 0, &jerr);
    if (!root)
        return cma_err_set(reterr, CMA_ERR_KUBE_ERROR, "watch event is not JSON: %s", jerr.text);
    const char *type = json_string_value(json_object_get(root, "type"));
    const json_t *obj = json_object_get(root, "object");
    enum cma_errc rc = CMA_OK;
    if (!type || !json_is_object(obj)) {
        rc = cma_err_set(reterr, CMA_ERR_KUBE_ERROR, "watch event without type or object");
    } else if (strcmp(type, "ERROR") == 0) {
        json_int_t code = json_integer_value(json_object_get(obj, "code"));
        const char *msg = json_string_value(json_object_get(obj, "message"));
        if (code == 410)
            *ret_gone = true;
        else
            rc = cma_err_set(reterr, CMA_ERR_KUBE_ERROR, "watch ERROR event (code %lld): %s",
                             (long long)code, msg ? msg : "");
    } else {
        const char *rv =
            json_string_value(json_object_get(json_object_get(obj, "metadata"), "resourceVersion"));
        bool bookmark = strcmp(type, "BOOKMARK") == 0;
        bool deleted = strcmp(type, "DELETED") == 0;
        bool upsert = strcmp(type, "ADDED") == 0 || strcmp(type, "MODIFIED") == 0;
        char *p = NULL;
        if (!bookmark && !deleted && !upsert)
            rc = cma_err_set(reterr, CMA_ERR_KUBE_ERROR, "unknown watch event type %.32s", type);
        else if (!bookmark)
            rc = pack_json(obj, &p, reterr);
        if (rc == CMA_OK) {
            pthread_rwlock_wrlock(&c->lock);
            if (upsert) {
                rc = upsert_locked(c, p);
            } else if (deleted) {
                remove_locked(c, pack_ns(p), pack_name(p));
                free(p);
            }
            if (rc == CMA_OK && rv && rv[0])
                snprintf(c->rv, sizeof(c->rv), "%s", rv);
            pthread_rwlock_unlock(&c->lock);
            if (rc != CMA_OK)
                rc = cma_err_set(reterr, rc, "out of memory");
        }
    }
    json_decref(root);
    return rc;
}

/* ---- the LIST+WATCH thread (listwatch.c), through these ------------------------------------ */

/* Hands ev (for c's resource) to the observer, if any. */
static void notify(const struct cma_objcache *c, struct cma_objcache_event ev)
{
    ev.resource = c->resource;
    if (c->observer.on_event)
        c->observer.on_event(c->observer.ctx, &ev);
}

/* The LIST, each page decoded and packed as it streams in (build_add), then installed. */
static enum cma_errc watch_list(void *ctx, struct cma_err *reterr)
{
    struct cma_objcache *c = ctx;
    struct list_build lb = {0};
    char *rv = NULL;
    long status = 0;
    enum cma_errc rc = cma_kube_list_pages(c->kube, c->group, c->version, c->resource, build_add,
                                           &lb, &rv, &status, reterr);
    if (rc != CMA_OK) {
        free_packs(lb.objs, lb.n);
        free(rv);
        return rc;
    }
    install(c, &lb, rv);
    /* What the LIST freed (the old array on a re-list, the new one's growth steps, curl's
     * buffers) stays resident in glibc's arenas until trimmed: give it back. */
    malloc_trim(0);
    notify(c, (struct cma_objcache_event){.kind = CMA_OBJCACHE_LISTED,
                                          .count = cma_objcache_count(c),
                                          .resource_version = rv});
    free(rv);
    return CMA_OK;
}

static enum cma_errc watch_apply(void *ctx, const char *line, size_t len, bool *ret_gone,
                                 struct cma_err *reterr)
{
    return cma_objcache_apply_event(ctx, line, len, ret_gone, reterr);
}

static void watch_rv(void *ctx, char *out, size_t out_len)
{
    cma_objcache_resource_version(ctx, out, out_len);
}

static enum cma_listwatch_next watch_failed(void *ctx, long status, const struct cma_err *err,
                                            int64_t retry_ms)
{
    struct cma_objcache *c = ctx;
    enum cma_listwatch_next next = CMA_LISTWATCH_RECONNECT;
    if (status >= 400 && status < 500 && status != 429) {
        /* Refused (no watch permission, no watch support): the state can go stale, so
         * requests go back to live LISTs; 400/405 will not change, the others may. */
        pthread_rwlock_wrlock(&c->lock);
        c->synced = false;
        pthread_rwlock_unlock(&c->lock);
        notify(c, (struct cma_objcache_event){
                      .kind = CMA_OBJCACHE_WATCH_REFUSED, .status = status, .err = err});
        if (status == 400 || status == 405)
            return CMA_LISTWATCH_STOP;
        next = CMA_LISTWATCH_RELIST;
    }
    if (err) /* not a clean end without events */
        notify(c, (struct cma_objcache_event){
                      .kind = CMA_OBJCACHE_WATCH_FAILED, .retry_ms = retry_ms, .err = err});
    return next;
}

static enum cma_listwatch_next watch_report(void *ctx, const struct cma_listwatch_report *r)
{
    struct cma_objcache *c = ctx;
    if (r->kind == CMA_LISTWATCH_WATCH_FAILED)
        return watch_failed(c, r->status, r->err, r->retry_ms);
    if (r->kind == CMA_LISTWATCH_GONE)
        notify(c, (struct cma_objcache_event){.kind = CMA_OBJCACHE_GONE,
                                              .resource_version = r->resource_version});
    else
        notify(c, (struct cma_objcache_event){
                      .kind = CMA_OBJCACHE_LIST_FAILED, .retry_ms = r->retry_ms, .err = r->err});
    return CMA_LISTWATCH_RECONNECT;
}

static enum cma_errc watch_init(struct cma_objcache *c)
{
    static const struct cma_listwatch_ops ops = {
        .list = watch_list,
        .apply = watch_apply,
        .resource_version = watch_rv,
        .report = watch_report,
    };
    return cma_listwatch_init(&c->lw, c->kube, c->group, c->version, c->resource, &ops, c, NULL);
}

enum cma_errc cma_objcache_start(struct cma_objcache *c, struct cma_err *reterr)
{
    if (!c->kube)
        return cma_err_set(reterr, CMA_ERR_INTERNAL, "a cache without a kube client cannot watch");
    return cma_listwatch_start(&c->lw, reterr);
}

/* ---- registry ---------------------------------------------------------------------------- */

struct cma_objcache_registry {
    pthread_mutex_t lock; /* guards caches and n */
    struct cma_kube *kube;
    struct cma_objcache_observer observer; /* read-only */
    struct cma_objcache **caches;
    size_t n;
};

/* Lock held. */
static struct cma_objcache *registry_find_or_add(struct cma_objcache_registry *r, const char *group,
                                                 const char *version, const char *resource,
                                                 struct cma_err *reterr)
{
    for (size_t i = 0; i < r->n; i++) {
        struct cma_objcache *c = r->caches[i];
        if (strcmp(c->group, group) == 0 && strcmp(c->version, version) == 0 &&
            strcmp(c->resource, resource) == 0)
            return c;
    }
    struct cma_objcache **grown = realloc(r->caches, (r->n + 1) * sizeof(*r->caches));
    if (!grown) {
        cma_err_set(reterr, CMA_ERR_NOMEM, "out of memory");
        return NULL;
    }
    r->caches = grown;
    struct cma_objcache *c = NULL;
    if (cma_objcache_new(r->kube, group, version, resource, &c, reterr) != CMA_OK || !c)
        return NULL;
    c->observer = r->observer;
    if (cma_objcache_start(c, reterr) != CMA_OK) {
        cma_objcache_free(c);
        return NULL;
    }
    r->caches[r->n++] = c;
    return c;
}

enum cma_errc cma_objcache_registry_new(struct cma_kube *kube, struct cma_objcache_registry **ret,
                                        struct cma_err *reterr)
{
    return cma_objcache_registry_new_observed(kube, NULL, ret, reterr);
}

enum cma_errc cma_objcache_registry_new_observed(struct cma_kube *kube,
                                                 const struct cma_objcache_observer *observer,
                                                 struct cma_objcache_registry **ret,
                                                 struct cma_err *reterr)
{
    if (!kube)
        return cma_err_set(reterr, CMA_ERR_INTERNAL, "watch caches need a kube client");
    struct cma_objcache_registry *r = calloc(1, sizeof(*r));
    if (!r)
        return cma_err_set(reterr, CMA_ERR_NOMEM, "out of memory");
    if (pthread_mutex_init(&r->lock, NULL) != 0) {
        free(r);
        return cma_err_set(reterr, CMA_ERR_INTERNAL, "cannot create the watch-cache lock");
    }
    r->kube = kube;
    if (observer)
        r->observer = *observer;
    pthread_mutex_lock(&r->lock);
    struct cma_objcache *pods = registry_find_or_add(r, "", "v1", "pods", reterr);
    pthread_mutex_unlock(&r->lock);
    if (!pods) {
        cma_err_prefix(reterr, "cannot start the pod cache: ");
        cma_objcache_registry_free(r);
        return reterr ? reterr->code : CMA_ERR_INTERNAL;
    }
    *ret = r;
    return CMA_OK;
}

void cma_objcache_registry_free(struct cma_objcache_registry *r)
{
    if (!r)
        return;
    for (size_t i = 0; i < r->n; i++)
        cma_objcache_free(r->caches[i]);
    free(r->caches);
    pthread_mutex_destroy(&r->lock);
    free(r);
}

struct cma_objcache *cma_objcache_registry_get(struct cma_objcache_registry *r, const char *group,
                                               const char *version, const char *resource)
{
    if (!r || !version || !version[0] || !resource || !resource[0])
        return NULL;
    struct cma_err err;
    cma_err_clear(&err);
    pthread_mutex_lock(&r->lock);
    struct cma_objcache *c = registry_find_or_add(r, group ? group : "", version, resource, &err);
    pthread_mutex_unlock(&r->lock);
    if (!c && r->observer.on_event) {
        struct cma_objcache_event ev = {
            .kind = CMA_OBJCACHE_START_FAILED, .resource = resource, .err = &err};
        r->observer.on_event(r->observer.ctx, &ev);
    }
    return c;
}

void cma_objcache_registry_each(struct cma_objcache_registry *r,
                                void (*fn)(void *ctx, struct cma_objcache *c, const char *group,
                                           const char *version, const char *resource),
                                void *ctx)
{
    if (!r)
        return;
    pthread_mutex_lock(&r->lock);
    for (size_t i = 0; i < r->n; i++)
        fn(ctx, r->caches[i], r->caches[i]->group, r->caches[i]->version, r->caches[i]->resource);
    pthread_mutex_unlock(&r->lock);
}
