/* catalog.c: immutable catalog snapshots, their builder and the store that publishes them.
 *
 * DESIGN: entries live in one array; an index table (cma/hash.h) finds them by (resource
 * pointer, namespaced, metric, owner). The owner is the namespace of the MetricRule whose rule
 * the entry carries (NULL for the config files' rules), so one metric name may be served by the
 * config and by MetricRules of several namespaces at once. Resource pointers are stable because
 * the snapshot holds a reference to the mapper they point into. The builder uses the same table to
 * deduplicate while discovery streams series. A later stage may attach one value derived from a
 * snapshot (the API layer's encoded discovery documents), kept and freed with it.
 * The store calls an optional hook after each publish, outside its lock (persist.c: the catalog
 * cache file). A snapshot holds a reference to the ruleset its entries' rules point into, so a
 * config reload frees the old rules only once the last snapshot built from them is gone. */
#include "cma/catalog.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "cma/buf.h"
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
    /* entries a rule of another MetricRule of the same namespace took over (the loser: the
     * earlier rule in the ruleset, as later rules win); consecutive repeats are kept once */
    struct cma_catalog_loss *lost;
    size_t n_lost, cap_lost;
};

struct cma_catalog_builder {
    struct cma_restmapper *mapper;
    struct entry_table custom, external;
};

struct cma_catalog {
    atomic_int refs;
    struct cma_restmapper *mapper;
    const struct cma_ruleset *rules; /* a reference; NULL when none was attached */
    struct entry_table custom, external;
    int64_t built_ms;
    _Atomic(struct cma_catalog_attachment *) attachment; /* set once; NULL until then */
};

/* The namespace of the MetricRule that owns rule; NULL for a config rule. */
static const char *owner_of(const struct cma_rule *rule)
{
    return rule && rule->owner ? rule->owner->namespace_ : NULL;
}

static bool same_owner(const char *a, const char *b)
{
    return a == b || (a && b && strcmp(a, b) == 0);
}

static uint64_t hash_key(const struct cma_api_resource *res, bool namespaced, const char *metric,
                         size_t len, bool fold, const char *owner)
{
    uintptr_t p = (uintptr_t)res;
    uint64_t h = cma_hash_bytes(CMA_HASH_FNV_OFFSET, &p, sizeof(p));
    h = cma_hash_byte(h, namespaced);
    if (owner)
        h = cma_hash_bytes(h, owner, strlen(owner) + 1);
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
    const char *owner;
};

static bool key_eq(const void *ctx, size_t index, const void *key)
{
    const struct entry_table *t = ctx;
    const struct cma_catalog_entry *e = &t->items[index];
    const struct key *k = key;
    if (e->resource != k->res || e->namespaced != k->namespaced || strlen(e->metric) != k->len ||
        !same_owner(owner_of(e->rule), k->owner))
        return false;
    return t->external ? strncasecmp(e->metric, k->metric, k->len) == 0
                       : memcmp(e->metric, k->metric, k->len) == 0;
}

static uint64_t entry_hash(const void *ctx, size_t index)
{
    const struct entry_table *t = ctx;
    const struct cma_catalog_entry *e = &t->items[index];
    return hash_key(e->resource, e->namespaced, e->metric, strlen(e->metric), t->external,
                    owner_of(e->rule));
}

/* The index slot of the key: the entry's position + 1, or 0; NULL for an empty table. */
static size_t *find_slot(const struct entry_table *t, const struct cma_api_resource *res,
                         bool namespaced, const char *metric, size_t len, const char *owner)
{
    struct key k = {res, namespaced, metric, len, owner};
    return cma_htab_find(&t->index, hash_key(res, namespaced, metric, len, t->external, owner), &k,
                         key_eq, t);
}

static void table_done(struct entry_table *t)
{
    for (size_t i = 0; i < t->n; i++) {
        free(t->items[i].metric);
        free(t->items[i].series);
    }
    free(t->items);
    for (size_t i = 0; i < t->n_lost; i++)
        free(t->lost[i].metric);
    free(t->lost);
    cma_htab_done(&t->index);
    memset(t, 0, sizeof(*t));
}

/* When e->rule and rule belong to two MetricRules, records that e's key is lost by the earlier of
 * the two rules. */
static enum cma_errc table_lose(struct entry_table *t, const struct cma_catalog_entry *e,
                                const struct cma_rule *rule)
{
    if (!e->rule || !rule || !e->rule->owner || !rule->owner || e->rule->owner == rule->owner)
        return CMA_OK;
    const struct cma_rule *loser = e->rule->index < rule->index ? e->rule : rule;
    if (t->n_lost) {
        const struct cma_catalog_loss *l = &t->lost[t->n_lost - 1];
        if (l->rule == loser && l->resource == e->resource && strcmp(l->metric, e->metric) == 0)
            return CMA_OK;
    }
    if (t->n_lost == t->cap_lost) {
        size_t cap = t->cap_lost ? t->cap_lost * 2 : 8;
        struct cma_catalog_loss *v = realloc(t->lost, cap * sizeof(*v));
        if (!v)
            return CMA_ERR_NOMEM;
        t->lost = v;
        t->cap_lost = cap;
    }
    char *m = strdup(e->metric);
    if (!m)
        return CMA_ERR_NOMEM;
    t->lost[t->n_lost++] = (struct cma_catalog_loss){e->resource, e->namespaced, m, loser};
    return CMA_OK;
}

static enum cma_errc table_put(struct entry_table *t, const struct cma_api_resource *res,
                               bool namespaced, const char *metric, size_t len, const char *series,
                               size_t series_len, const struct cma_rule *rule)
{
    if (cma_htab_reserve(&t->index, t->n, entry_hash, t) != CMA_OK)
        return CMA_ERR_NOMEM;
    size_t *slot = find_slot(t, res, namespaced, metric, len, owner_of(rule));
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
        if (table_lose(t, e, rule) != CMA_OK) {
            free(s);
            return CMA_ERR_NOMEM;
        }
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

void cma_catalog_unref(struct cma_catalog *c)
{
    if (!c || atomic_fetch_sub(&c->refs, 1) != 1)
        return;
    table_done(&c->custom);
    table_done(&c->external);
    struct cma_catalog_attachment *a = atomic_load(&c->attachment);
    if (a)
        a->free(a);
    cma_restmapper_unref(c->mapper);
    cma_ruleset_unref(c->rules);
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
    atomic_init(&c->attachment, NULL);
    (void)reterr;
    *ret = c;
    return CMA_OK;
}

struct cma_catalog *cma_catalog_ref(struct cma_catalog *c)
{
    if (c)
        atomic_fetch_add(&c->refs, 1);
    return c;
}

const struct cma_catalog_entry *cma_catalog_lookup_owner(const struct cma_catalog *c,
                                                         const struct cma_api_resource *resource,
                                                         bool namespaced, const char *metric,
                                                         const char *owner)
{
    const struct entry_table *t = resource ? &c->custom : &c->external;
    size_t *slot =
        find_slot(t, resource, resource ? namespaced : true, metric, strlen(metric), owner);
    return slot && *slot ? &t->items[*slot - 1] : NULL;
}

const struct cma_catalog_entry *cma_catalog_lookup(const struct cma_catalog *c,
                                                   const struct cma_api_resource *resource,
                                                   bool namespaced, const char *metric)
{
    size_t *slot = find_slot(&c->custom, resource, namespaced, metric, strlen(metric), NULL);
    return slot && *slot ? &c->custom.items[*slot - 1] : NULL;
}

const struct cma_catalog_entry *cma_catalog_lookup_external(const struct cma_catalog *c,
                                                            const char *metric)
{
    size_t *slot = find_slot(&c->external, NULL, true, metric, strlen(metric), NULL);
    return slot && *slot ? &c->external.items[*slot - 1] : NULL;
}

const struct cma_catalog_entry *cma_catalog_lookup_in(const struct cma_catalog *c,
                                                      const struct cma_api_resource *resource,
                                                      bool namespaced, const char *metric,
                                                      const char *namespace_)
{
    const struct cma_catalog_entry *e =
        cma_catalog_lookup_owner(c, resource, namespaced, metric, NULL);
    if (e || !namespace_ || !namespace_[0] || (resource && !namespaced))
        return e;
    return cma_catalog_lookup_owner(c, resource, namespaced, metric, namespace_);
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

size_t cma_catalog_lost_count(const struct cma_catalog *c)
{
    return c->custom.n_lost + c->external.n_lost;
}

const struct cma_catalog_loss *cma_catalog_lost_at(const struct cma_catalog *c, size_t i)
{
    if (i < c->custom.n_lost)
        return &c->custom.lost[i];
    i -= c->custom.n_lost;
    return i < c->external.n_lost ? &c->external.lost[i] : NULL;
}

struct cma_restmapper *cma_catalog_mapper(const struct cma_catalog *c)
{
    return c->mapper;
}

void cma_catalog_hold_rules(struct cma_catalog *c, const struct cma_ruleset *rules)
{
    const struct cma_ruleset *old = c->rules;
    c->rules = cma_ruleset_ref(rules);
    cma_ruleset_unref(old);
}

const struct cma_ruleset *cma_catalog_rules(const struct cma_catalog *c)
{
    return c->rules;
}

int64_t cma_catalog_built_ms(const struct cma_catalog *c)
{
    return c->built_ms;
}

struct cma_catalog_attachment *cma_catalog_attachment(const struct cma_catalog *c)
{
    return atomic_load(&((struct cma_catalog *)c)->attachment);
}

struct cma_catalog_attachment *cma_catalog_attach(struct cma_catalog *c,
                                                  struct cma_catalog_attachment *a)
{
    struct cma_catalog_attachment *none = NULL;
    if (atomic_compare_exchange_strong(&c->attachment, &none, a))
        return a;
    a->free(a); /* another thread attached first: use theirs */
    return none;
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
