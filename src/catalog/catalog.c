/* catalog.c: immutable catalog snapshots, their builder and the store that publishes them.
 *
 * DESIGN: entries live in one array; an index table (cma/hash.h) finds them
 * by (resource pointer, namespaced, metric) — resource pointers are stable because the snapshot
 * holds a reference to the mapper they point into. The builder uses the same table to
 * deduplicate while discovery streams series. Discovery documents are encoded once in
 * cma_catalog_build(), sorted by name so output is stable across relists (upstream's is random).
 * The store calls an optional hook after each publish, outside its lock (persist.c: the catalog
 * cache file). */
#include "cma/catalog.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "cma/buf.h"
#include "cma/encode.h"
#include "cma/hash.h"
#include "cma/kube.h"
#include "cma/restmapper.h"
#include "cma/groups.h"
#include "cma/rule.h"

struct entry_table {
    struct cma_catalog_entry *items;
    size_t n, cap;
    struct cma_htab index; /* by (resource, namespaced, metric) */
    bool external;         /* keys: metric only, case-insensitive */
};

struct cma_catalog_builder {
    struct cma_restmapper *mapper;
    struct entry_table custom, external;
};

#define N_DOCS 3

struct cma_catalog {
    atomic_int refs;
    struct cma_restmapper *mapper;
    struct entry_table custom, external;
    int64_t built_ms;
    char *docs[N_DOCS]; /* custom v1beta1, custom v1beta2, external v1beta1 (metrics.k8s.io's
                         * document is static, in api_index.c) */
    size_t doc_len[N_DOCS];
};

static uint64_t hash_key(const struct cma_api_resource *res, bool namespaced, const char *metric,
                         size_t len, bool fold)
{
    uintptr_t p = (uintptr_t)res;
    uint64_t h = cma_hash_bytes(CMA_HASH_FNV_OFFSET, &p, sizeof(p));
    h = cma_hash_byte(h, namespaced);
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)metric[i];
        h = cma_hash_byte(h, fold && c >= 'A' && c <= 'Z' ? (unsigned char)(c - 'A' + 'a') : c);
    }
    return h;
}

struct key {
    const struct cma_api_resource *res;
    bool namespaced;
    const char *metric;
    size_t len;
};

static bool key_eq(const void *ctx, size_t index, const void *key)
{
    const struct entry_table *t = ctx;
    const struct cma_catalog_entry *e = &t->items[index];
    const struct key *k = key;
    if (e->resource != k->res || e->namespaced != k->namespaced || strlen(e->metric) != k->len)
        return false;
    return t->external ? strncasecmp(e->metric, k->metric, k->len) == 0
                       : memcmp(e->metric, k->metric, k->len) == 0;
}

static uint64_t entry_hash(const void *ctx, size_t index)
{
    const struct entry_table *t = ctx;
    const struct cma_catalog_entry *e = &t->items[index];
    return hash_key(e->resource, e->namespaced, e->metric, strlen(e->metric), t->external);
}

/* The index slot of the key: the entry's position + 1, or 0; NULL for an empty table. */
static size_t *find_slot(const struct entry_table *t, const struct cma_api_resource *res,
                         bool namespaced, const char *metric, size_t len)
{
    struct key k = {res, namespaced, metric, len};
    return cma_htab_find(&t->index, hash_key(res, namespaced, metric, len, t->external), &k, key_eq,
                         t);
}

static void table_done(struct entry_table *t)
{
    for (size_t i = 0; i < t->n; i++) {
        free(t->items[i].metric);
        free(t->items[i].series);
    }
    free(t->items);
    cma_htab_done(&t->index);
    memset(t, 0, sizeof(*t));
}

static enum cma_errc table_put(struct entry_table *t, const struct cma_api_resource *res,
                               bool namespaced, const char *metric, size_t len, const char *series,
                               size_t series_len, const struct cma_rule *rule)
{
    if (cma_htab_reserve(&t->index, t->n, entry_hash, t) != CMA_OK)
        return CMA_ERR_NOMEM;
    size_t *slot = find_slot(t, res, namespaced, metric, len);
    if (*slot) {
        const struct cma_catalog_entry *e = &t->items[*slot - 1];
        if (e->rule == rule && strlen(e->series) == series_len &&
            memcmp(e->series, series, series_len) == 0)
            return CMA_OK; /* the common case while streaming: nothing changes */
    }
    char *s = strndup(series, series_len);
    if (!s)
        return CMA_ERR_NOMEM;
    if (*slot) { /* later rules and series win, as upstream */
        struct cma_catalog_entry *e = &t->items[*slot - 1];
        free(e->series);
        e->series = s;
        e->rule = rule;
        return CMA_OK;
    }
    if (t->n == t->cap) {
        size_t cap = t->cap ? t->cap * 2 : 64;
        struct cma_catalog_entry *items = realloc(t->items, cap * sizeof(*items));
        if (!items) {
            free(s);
            return CMA_ERR_NOMEM;
        }
        t->items = items;
        t->cap = cap;
    }
    char *m = strndup(metric, len);
    if (!m) {
        free(s);
        return CMA_ERR_NOMEM;
    }
    t->items[t->n] = (struct cma_catalog_entry){res, namespaced, m, s, rule};
    *slot = ++t->n;
    return CMA_OK;
}

enum cma_errc cma_catalog_builder_new(struct cma_restmapper *mapper,
                                      struct cma_catalog_builder **ret, struct cma_err *reterr)
{
    struct cma_catalog_builder *b = calloc(1, sizeof(*b));
    if (!b)
        return cma_err_set(reterr, CMA_ERR_NOMEM, "out of memory");
    b->mapper = cma_restmapper_ref(mapper);
    b->external.external = true;
    *ret = b;
    return CMA_OK;
}

void cma_catalog_builder_free(struct cma_catalog_builder *b)
{
    if (!b)
        return;
    table_done(&b->custom);
    table_done(&b->external);
    cma_restmapper_unref(b->mapper);
    free(b);
}

enum cma_errc cma_catalog_builder_add(struct cma_catalog_builder *b,
                                      const struct cma_api_resource *resource, const char *metric,
                                      size_t metric_len, const char *series, size_t series_len,
                                      const struct cma_rule *rule)
{
    return table_put(&b->custom, resource, resource->namespaced, metric, metric_len, series,
                     series_len, rule);
}

enum cma_errc cma_catalog_builder_add_external(struct cma_catalog_builder *b, const char *metric,
                                               size_t metric_len, const char *series,
                                               size_t series_len, const struct cma_rule *rule)
{
    return table_put(&b->external, NULL, true, metric, metric_len, series, series_len, rule);
}

size_t cma_catalog_builder_count(const struct cma_catalog_builder *b)
{
    return b->custom.n + b->external.n;
}

static int cmp_entry_names(const void *a, const void *b)
{
    const struct cma_resource_entry *x = a, *y = b;
    return strcmp(x->name, y->name);
}

/* Encodes one APIResourceList, sorted by name so the output is stable across relists. */
static enum cma_errc encode_doc(struct cma_catalog *c, int slot, const char *group_version,
                                const struct entry_table *t, const char *kind,
                                struct cma_err *reterr)
{
    static const char *const verbs[] = {"get"};
    struct cma_resource_entry *entries = calloc(t->n + 1, sizeof(*entries));
    enum cma_errc rc = entries ? CMA_OK : CMA_ERR_NOMEM;
    size_t n = 0;
    for (size_t i = 0; rc == CMA_OK && i < t->n; i++) {
        const struct cma_catalog_entry *e = &t->items[i];
        char gr[512] = "";
        if (e->resource)
            cma_restmapper_group_resource(e->resource, gr, sizeof(gr));
        char *name = NULL;
        if ((e->resource ? asprintf(&name, "%s/%s", gr, e->metric)
                         : asprintf(&name, "%s", e->metric)) < 0) {
            rc = CMA_ERR_NOMEM;
            break;
        }
        entries[n++] = (struct cma_resource_entry){name, e->namespaced, kind, verbs, 1};
    }
    if (rc == CMA_OK) {
        qsort(entries, n, sizeof(*entries), cmp_entry_names);
        struct cma_buf out;
        cma_buf_init(&out, 0);
        rc = cma_encode_api_resource_list(group_version, entries, n, &out, reterr);
        c->doc_len[slot] = out.len;
        c->docs[slot] = cma_buf_take(&out);
        if (rc == CMA_OK && !c->docs[slot])
            rc = CMA_ERR_NOMEM;
    }
    for (size_t i = 0; i < n; i++)
        free((char *)entries[i].name);
    free(entries);
    if (rc != CMA_OK)
        return cma_err_set(reterr, rc, "cannot encode the discovery document");
    return CMA_OK;
}

void cma_catalog_unref(struct cma_catalog *c)
{
    if (!c || atomic_fetch_sub(&c->refs, 1) != 1)
        return;
    table_done(&c->custom);
    table_done(&c->external);
    for (int i = 0; i < N_DOCS; i++)
        free(c->docs[i]);
    cma_restmapper_unref(c->mapper);
    free(c);
}

enum cma_errc cma_catalog_build(struct cma_catalog_builder *b, int64_t built_wall_ms,
                                struct cma_catalog **ret, struct cma_err *reterr)
{
    struct cma_catalog *c = calloc(1, sizeof(*c));
    if (!c) {
        cma_catalog_builder_free(b);
        return cma_err_set(reterr, CMA_ERR_NOMEM, "out of memory");
    }
    atomic_init(&c->refs, 1);
    c->mapper = b->mapper;
    b->mapper = NULL;
    c->custom = b->custom;
    c->external = b->external;
    memset(&b->custom, 0, sizeof(b->custom));
    memset(&b->external, 0, sizeof(b->external));
    cma_catalog_builder_free(b);
    c->built_ms = built_wall_ms;
    enum cma_errc rc =
        encode_doc(c, 0, CMA_GROUP_CUSTOM "/v1beta1", &c->custom, "MetricValueList", reterr);
    if (rc == CMA_OK)
        rc = encode_doc(c, 1, CMA_GROUP_CUSTOM "/v1beta2", &c->custom, "MetricValueList", reterr);
    if (rc == CMA_OK)
        rc = encode_doc(c, 2, CMA_GROUP_EXTERNAL "/v1beta1", &c->external,
                        "ExternalMetricValueList", reterr);
    if (rc != CMA_OK) {
        cma_catalog_unref(c);
        return rc;
    }
    *ret = c;
    return CMA_OK;
}

struct cma_catalog *cma_catalog_ref(struct cma_catalog *c)
{
    if (c)
        atomic_fetch_add(&c->refs, 1);
    return c;
}

const struct cma_catalog_entry *cma_catalog_lookup(const struct cma_catalog *c,
                                                   const struct cma_api_resource *resource,
                                                   bool namespaced, const char *metric)
{
    size_t *slot = find_slot(&c->custom, resource, namespaced, metric, strlen(metric));
    return slot && *slot ? &c->custom.items[*slot - 1] : NULL;
}

const struct cma_catalog_entry *cma_catalog_lookup_external(const struct cma_catalog *c,
                                                            const char *metric)
{
    size_t *slot = find_slot(&c->external, NULL, true, metric, strlen(metric));
    return slot && *slot ? &c->external.items[*slot - 1] : NULL;
}

size_t cma_catalog_count(const struct cma_catalog *c)
{
    return c->custom.n;
}

size_t cma_catalog_count_external(const struct cma_catalog *c)
{
    return c->external.n;
}

const struct cma_catalog_entry *cma_catalog_entry_at(const struct cma_catalog *c, size_t i)
{
    return i < c->custom.n ? &c->custom.items[i] : NULL;
}

const struct cma_catalog_entry *cma_catalog_external_at(const struct cma_catalog *c, size_t i)
{
    return i < c->external.n ? &c->external.items[i] : NULL;
}

struct cma_restmapper *cma_catalog_mapper(const struct cma_catalog *c)
{
    return c->mapper;
}

int64_t cma_catalog_built_ms(const struct cma_catalog *c)
{
    return c->built_ms;
}

const char *cma_catalog_discovery_doc(const struct cma_catalog *c, const char *group,
                                      const char *version, size_t *ret_len)
{
    int slot = -1;
    if (strcmp(group, CMA_GROUP_CUSTOM) == 0 && strcmp(version, "v1beta1") == 0)
        slot = 0;
    else if (strcmp(group, CMA_GROUP_CUSTOM) == 0 && strcmp(version, "v1beta2") == 0)
        slot = 1;
    else if (strcmp(group, CMA_GROUP_EXTERNAL) == 0 && strcmp(version, "v1beta1") == 0)
        slot = 2;
    if (slot < 0)
        return NULL;
    *ret_len = c->doc_len[slot];
    return c->docs[slot];
}

struct cma_catalog_store {
    pthread_mutex_t mu;
    struct cma_catalog *current;
    cma_catalog_publish_fn on_publish; /* set before the store is shared; NULL = none */
    void *on_publish_ctx;
};

enum cma_errc cma_catalog_store_new(struct cma_catalog_store **ret)
{
    struct cma_catalog_store *s = calloc(1, sizeof(*s));
    if (!s)
        return CMA_ERR_NOMEM;
    pthread_mutex_init(&s->mu, NULL);
    *ret = s;
    return CMA_OK;
}

void cma_catalog_store_free(struct cma_catalog_store *s)
{
    if (!s)
        return;
    cma_catalog_unref(s->current);
    pthread_mutex_destroy(&s->mu);
    free(s);
}

struct cma_catalog *cma_catalog_store_get(struct cma_catalog_store *s)
{
    pthread_mutex_lock(&s->mu);
    struct cma_catalog *c = cma_catalog_ref(s->current);
    pthread_mutex_unlock(&s->mu);
    return c;
}

void cma_catalog_store_publish(struct cma_catalog_store *s, struct cma_catalog *c)
{
    pthread_mutex_lock(&s->mu);
    struct cma_catalog *old = s->current;
    s->current = c;
    struct cma_catalog *held = s->on_publish ? cma_catalog_ref(c) : NULL;
    pthread_mutex_unlock(&s->mu);
    cma_catalog_unref(old);
    if (held) {
        s->on_publish(s->on_publish_ctx, held);
        cma_catalog_unref(held);
    }
}

void cma_catalog_store_on_publish(struct cma_catalog_store *s, cma_catalog_publish_fn fn, void *ctx)
{
    s->on_publish = fn;
    s->on_publish_ctx = ctx;
}
