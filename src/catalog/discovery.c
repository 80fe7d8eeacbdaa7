/* discovery.c: the discovery thread: RESTMapper refresh, relist, publication of catalog
 * snapshots.
 *
 * DESIGN: rules that share a byte-identical seriesQuery share one streamed /api/v1/series call,
 * custom and external rules alike (upstream lists them in two loops). Each series is folded at
 * once: per rule, the series name goes through a name cache (seriesFilters + name.matches/as
 * evaluated once per distinct name per relist) and each label through a label cache (label →
 * resource), so a relist costs a few hash lookups per series and memory is bounded by the number
 * of distinct names and labels, not series. The caches live on the thread's stack frame for one
 * relist: no shared mutable state. The thread sleeps on a condition variable so stop is prompt.
 * Several backends (rules' `backend: NAME`): one listing per (backend, seriesQuery), each
 * backend's series folded into a part of its own; a backend whose listing fails contributes the
 * entries of its rules from the snapshot serving now (its last good part; resources looked up
 * again in the current RESTMapper; after a config reload, each entry goes to the new rule that
 * lists alike: same backend, seriesQuery, seriesFilters, name and resources, else it is
 * dropped), and the parts merge in backend order, so of two rules on different backends serving
 * one (resource, metric) the lower backend index that has the entry wins (warned about at each
 * relist), whatever order answers came in. A backend that has never listed successfully has no
 * part to keep: until it does, the next backend's entry serves. With one backend the single part
 * is the snapshot, as before.
 * A request for a resource the RESTMapper does not know (a CRD installed after start-up) calls
 * cma_discovery_request_refresh(): under the same mutex it sets refresh_requested and signals the
 * condition variable, at most once per REFRESH_MIN_GAP_MS; the thread then re-reads API discovery
 * at once and relists against the new mapper. A config reload hands over a new ruleset
 * (cma_discovery_set_rules) the same way: the current ruleset is a reference under the mutex,
 * each relist takes its own for its duration, and each snapshot holds the one it was built from,
 * so the previous rules are freed only when no snapshot (and so no request) uses them. */
#include "cma/discovery.h"

#include <malloc.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cma/buf.h"
#include "cma/catalog.h"
#include "cma/clock.h"
#include "cma/config.h"
#include "cma/hash.h"
#include "cma/kube.h"
#include "cma/log.h"
#include "cma/metrics.h"
#include "cma/backend.h"
#include "cma/prom.h"
#include "cma/restmapper.h"
#include "cma/rule.h"
#include "cma/str.h"

/* ---- a small string-keyed hash map (one relist's caches) ---- */

struct smap_item {
    char *key;
    size_t key_len;
    const void *ptr; /* label cache: resource (may be NULL) */
    char *name;      /* name cache: API metric name, NULL when rejected */
    bool accepted;
};

struct smap {
    struct smap_item *items; /* in insertion order */
    size_t n, cap;
    struct cma_htab index; /* by key */
};

struct smap_key {
    const char *ptr;
    size_t len;
};

static bool smap_eq(const void *ctx, size_t index, const void *key)
{
    const struct smap *m = ctx;
    const struct smap_key *k = key;
    return m->items[index].key_len == k->len && memcmp(m->items[index].key, k->ptr, k->len) == 0;
}

static uint64_t smap_hash(const void *ctx, size_t index)
{
    const struct smap *m = ctx;
    return cma_hash_str(m->items[index].key, m->items[index].key_len);
}

static void smap_done(struct smap *m)
{
    for (size_t i = 0; i < m->n; i++) {
        free(m->items[i].key);
        free(m->items[i].name);
    }
    free(m->items);
    cma_htab_done(&m->index);
    memset(m, 0, sizeof(*m));
}

/* Returns the item for key, appending an empty one (key copied) when absent; NULL on OOM.
 * *ret_new tells whether it was inserted. The pointer is valid until the next upsert. */
static struct smap_item *smap_upsert(struct smap *m, const char *key, size_t len, bool *ret_new)
{
    *ret_new = false;
    if (cma_htab_reserve(&m->index, m->n, smap_hash, m) != CMA_OK)
        return NULL;
    struct smap_key k = {key, len};
    size_t *slot = cma_htab_find(&m->index, cma_hash_str(key, len), &k, smap_eq, m);
    if (*slot)
        return &m->items[*slot - 1];
    if (m->n == m->cap) {
        size_t cap = m->cap ? m->cap * 2 : 32;
        struct smap_item *items = realloc(m->items, cap * sizeof(*items));
        if (!items)
            return NULL;
        m->items = items;
        m->cap = cap;
    }
    struct smap_item *it = &m->items[m->n];
    memset(it, 0, sizeof(*it));
    it->key = strndup(key, len);
    if (!it->key)
        return NULL;
    it->key_len = len;
    *slot = ++m->n;
    *ret_new = true;
    return it;
}

/* ---- one relist ---- */

struct rule_state {
    const struct cma_rule *rule;
    struct smap names;  /* series name → API name */
    struct smap labels; /* label → resource */
};

struct relist_ctx {
    struct cma_catalog_builder *builder;
    struct cma_restmapper *mapper;
    struct rule_state *rules; /* rules sharing the current seriesQuery */
    size_t n_rules;
    struct cma_buf scratch;
    size_t n_series, n_unnamed;
    enum cma_errc rc;
};

static const char *api_name_for(struct relist_ctx *ctx, struct rule_state *rs, const char *metric,
                                size_t len)
{
    bool fresh;
    struct smap_item *it = smap_upsert(&rs->names, metric, len, &fresh);
    if (!it) {
        ctx->rc = CMA_ERR_NOMEM;
        return NULL;
    }
    if (fresh) {
        it->accepted = cma_naming_accepts(rs->rule->naming, metric, len);
        if (it->accepted) {
            struct cma_err err;
            cma_err_clear(&err);
            cma_buf_clear(&ctx->scratch);
            if (cma_naming_metric_name(rs->rule->naming, metric, len, &ctx->scratch, &err) ==
                CMA_OK) {
                it->name = strdup(cma_buf_str(&ctx->scratch));
                if (!it->name)
                    ctx->rc = CMA_ERR_NOMEM;
            } else {
                ctx->n_unnamed++;
                cma_log_warn("rule %s[%zu] (%s:%u): skipping series %.*s: %s",
                             rs->rule->kind == CMA_RULE_CUSTOM ? "rules" : "externalRules",
                             rs->rule->index, rs->rule->cfg->pos.file, rs->rule->cfg->pos.line,
                             (int)len, metric, err.msg);
            }
        }
    }
    return it->accepted ? it->name : NULL;
}

static const struct cma_api_resource *resource_for(struct relist_ctx *ctx, struct rule_state *rs,
                                                   const char *label, size_t len)
{
    bool fresh;
    struct smap_item *it = smap_upsert(&rs->labels, label, len, &fresh);
    if (!it) {
        ctx->rc = CMA_ERR_NOMEM;
        return NULL;
    }
    if (fresh)
        it->ptr = cma_resmap_resource_for_label(rs->rule->resmap, ctx->mapper, label, len);
    return it->ptr;
}

static int on_series(void *opaque, const char *metric, size_t metric_len,
                     const struct cma_label_view *labels, size_t n_labels)
{
    struct relist_ctx *ctx = opaque;
    ctx->n_series++;
    for (size_t r = 0; r < ctx->n_rules && ctx->rc == CMA_OK; r++) {
        struct rule_state *rs = &ctx->rules[r];
        const char *name = api_name_for(ctx, rs, metric, metric_len);
        if (!name)
            continue;
        if (rs->rule->kind == CMA_RULE_EXTERNAL) {
            ctx->rc = cma_catalog_builder_add_external(ctx->builder, name, strlen(name), metric,
                                                       metric_len, rs->rule);
            continue;
        }
        for (size_t i = 0; i < n_labels && ctx->rc == CMA_OK; i++) {
            const struct cma_api_resource *res =
                resource_for(ctx, rs, labels[i].name, labels[i].name_len);
            if (res)
                ctx->rc = cma_catalog_builder_add(ctx->builder, res, name, strlen(name), metric,
                                                  metric_len, rs->rule);
        }
    }
    return ctx->rc == CMA_OK ? 0 : 1;
}

/* Every backend: cma_discovery_relist's one backend serves every rule. */
#define ANY_BACKEND SIZE_MAX

static bool rule_on(const struct cma_rule *r, size_t b)
{
    return b == ANY_BACKEND || r->backend.index == b;
}

/* The i-th rule of custom then external rules, in config order. */
static const struct cma_rule *flat_rule(const struct cma_ruleset *rules, size_t i)
{
    return i < rules->n_rules ? &rules->rules[i] : &rules->external_rules[i - rules->n_rules];
}

/* Two optional strings (NULL: none) are equal. */
static bool same_opt(const char *a, const char *b)
{
    return a == b || (a && b && strcmp(a, b) == 0);
}

/* Are two rules' calls sent as the same tenant (a MetricRule's namespace on a
 * tenantFromNamespace backend; NULL: the backend's own)? Two tenants may see different series. */
static bool same_tenant(const struct cma_rule *r, const struct cma_rule *like)
{
    return same_opt(r->backend.tenant, like->backend.tenant);
}

/* Do two rules list the same series: the same seriesQuery, sent as the same tenant? */
static bool same_listing(const struct cma_rule *r, const struct cma_rule *like)
{
    return strcmp(r->series_query, like->series_query) == 0 && same_tenant(r, like);
}

/* Collects the rules of backend b (custom, then external, in config order) that list the same
 * series as `like`. */
static size_t rules_for_query(const struct cma_ruleset *rules, size_t b,
                              const struct cma_rule *like, struct rule_state *out)
{
    size_t n = 0;
    for (size_t i = 0; i < rules->n_rules + rules->n_external_rules; i++) {
        const struct cma_rule *r = flat_rule(rules, i);
        if (rule_on(r, b) && same_listing(r, like))
            out[n++] = (struct rule_state){.rule = r};
    }
    return n;
}

/* True when an earlier rule of backend b (in the same order) already lists what `like` does. */
static bool query_seen_before(const struct cma_ruleset *rules, size_t b, size_t flat_index,
                              const struct cma_rule *like)
{
    for (size_t i = 0; i < flat_index; i++) {
        const struct cma_rule *r = flat_rule(rules, i);
        if (rule_on(r, b) && same_listing(r, like))
            return true;
    }
    return false;
}

/* What one backend's part of a relist read. */
struct relist_tally {
    size_t n_series, n_queries;
};

/* One series listing per distinct seriesQuery of backend b's rules, folded into *ret. */
static enum cma_errc relist_one(const struct cma_backend *backend, size_t b,
                                const struct cma_ruleset *rules, struct cma_restmapper *mapper,
                                int64_t now_wall_ms, int64_t max_age_ms, struct cma_catalog **ret,
                                struct relist_tally *tally, struct cma_err *reterr)
{
    struct relist_ctx ctx = {.mapper = mapper};
    size_t total = rules->n_rules + rules->n_external_rules;
    ctx.rules = calloc(total + 1, sizeof(*ctx.rules));
    cma_buf_init(&ctx.scratch, 64 * 1024);
    if (!ctx.rules)
        return cma_err_set(reterr, CMA_ERR_NOMEM, "out of memory");
    enum cma_errc rc = cma_catalog_builder_new(mapper, &ctx.builder, reterr);
    for (size_t i = 0; rc == CMA_OK && i < total; i++) {
        const struct cma_rule *r = flat_rule(rules, i);
        if (!rule_on(r, b) || !r->series_query[0] || query_seen_before(rules, b, i, r))
            continue; /* an empty seriesQuery was warned about at load; it lists nothing */
        ctx.n_rules = rules_for_query(rules, b, r, ctx.rules);
        int64_t t0 = cma_clock_mono_ms();
        size_t before = ctx.n_series;
        rc = cma_backend_series_as(backend, r->backend.tenant, r->series_query,
                                   now_wall_ms - max_age_ms, now_wall_ms, on_series, &ctx, reterr);
        if (rc == CMA_OK && ctx.rc != CMA_OK)
            rc = cma_err_set(reterr, ctx.rc, "out of memory while folding series");
        if (rc != CMA_OK)
            cma_err_prefix(reterr, "unable to fetch metrics for query %s: ", r->series_query);
        else
            cma_log_v(2, "discovery: %zu series for %s in %lld ms", ctx.n_series - before,
                      r->series_query, (long long)(cma_clock_mono_ms() - t0));
        for (size_t k = 0; k < ctx.n_rules; k++) {
            smap_done(&ctx.rules[k].names);
            smap_done(&ctx.rules[k].labels);
        }
        tally->n_queries++;
    }
    free(ctx.rules);
    cma_buf_done(&ctx.scratch);
    tally->n_series += ctx.n_series;
    if (rc != CMA_OK) {
        cma_catalog_builder_free(ctx.builder);
        return rc;
    }
    return cma_catalog_build(ctx.builder, now_wall_ms, ret, reterr);
}

static void log_built(const struct cma_catalog *c, const struct relist_tally *t)
{
    cma_log_v(1, "discovery: %zu series from %zu queries gave %zu custom and %zu external metrics",
              t->n_series, t->n_queries, cma_catalog_count(c), cma_catalog_count_external(c));
}

enum cma_errc cma_discovery_relist(const struct cma_backend *backend,
                                   const struct cma_ruleset *rules, struct cma_restmapper *mapper,
                                   int64_t now_wall_ms, int64_t max_age_ms,
                                   struct cma_catalog **ret, struct cma_err *reterr)
{
    struct relist_tally tally = {0};
    struct cma_catalog *c = NULL;
    enum cma_errc rc = relist_one(backend, ANY_BACKEND, rules, mapper, now_wall_ms, max_age_ms, &c,
                                  &tally, reterr);
    if (rc != CMA_OK || !c)
        return rc != CMA_OK ? rc : cma_err_set(reterr, CMA_ERR_INTERNAL, "no catalog built");
    cma_catalog_hold_rules(c, rules);
    log_built(c, &tally);
    *ret = c;
    return CMA_OK;
}

/* ---- several backends: each one's part, last good parts, the merge ---- */

static bool backend_has_rules(const struct cma_ruleset *rules, size_t b)
{
    for (size_t i = 0; i < rules->n_rules + rules->n_external_rules; i++)
        if (flat_rule(rules, i)->backend.index == b && flat_rule(rules, i)->series_query[0])
            return true;
    return false;
}

/* True when rule points into rules (an entry of a snapshot built from another ruleset, before a
 * config reload, is carried over only to a rule that lists alike: carried_rule). */
static bool rule_of(const struct cma_ruleset *rules, const struct cma_rule *rule)
{
    uintptr_t p = (uintptr_t)rule, c = (uintptr_t)rules->rules,
              e = (uintptr_t)rules->external_rules;
    return (p >= c && p < c + rules->n_rules * sizeof(*rule)) ||
           (p >= e && p < e + rules->n_external_rules * sizeof(*rule));
}

static bool same_str(const struct cma_config_str *a, const struct cma_config_str *b)
{
    return a->set == b->set && (!a->set || cma_str_eq(a->s, b->s));
}

static bool same_filters(const struct cma_config_rule *a, const struct cma_config_rule *b)
{
    if (a->n_series_filters != b->n_series_filters)
        return false;
    for (size_t i = 0; i < a->n_series_filters; i++)
        if (!same_str(&a->series_filters[i].is, &b->series_filters[i].is) ||
            !same_str(&a->series_filters[i].is_not, &b->series_filters[i].is_not))
            return false;
    return true;
}

static bool same_resources(const struct cma_config_resources *a,
                           const struct cma_config_resources *b)
{
    if (a->n_overrides != b->n_overrides || !same_str(&a->template_, &b->template_) ||
        a->namespaced != b->namespaced || a->namespaced_set != b->namespaced_set)
        return false;
    for (size_t i = 0; i < a->n_overrides; i++) {
        const struct cma_config_override *x = &a->overrides[i], *y = &b->overrides[i];
        if (!cma_str_eq(x->label, y->label) || !same_str(&x->group, &y->group) ||
            !same_str(&x->resource, &y->resource))
            return false;
    }
    return true;
}

/* True when rule b turns a backend's series into the same entries as rule a: same kind, same
 * backend, same seriesQuery sent as the same tenant, seriesFilters, name and resources
 * (metricsQuery and the rest may differ: they act when a request is served, by the rule the entry
 * carries). */
static bool lists_alike(const struct cma_rule *a, const struct cma_rule *b)
{
    const struct cma_config_rule *x = a->cfg, *y = b->cfg;
    const char *oa = a->owner ? a->owner->namespace_ : NULL,
               *ob = b->owner ? b->owner->namespace_ : NULL;
    if (!same_opt(oa, ob))
        return false;
    return a->kind == b->kind && a->backend.index == b->backend.index && same_listing(a, b) &&
           same_filters(x, y) && same_str(&x->name_matches, &y->name_matches) &&
           same_str(&x->name_as, &y->name_as) && same_resources(&x->resources, &y->resources);
}

/* The rule of `rules` an entry of `rule` (from the snapshot serving now) is carried over to:
 * `rule` itself when rules holds it; after a reload, the last rule of rules that lists alike
 * (later rules win, as in a relist); NULL when none does (the entry is dropped). */
static const struct cma_rule *carried_rule(const struct cma_ruleset *rules,
                                           const struct cma_rule *rule)
{
    if (rule_of(rules, rule))
        return rule;
    const struct cma_rule *found = NULL;
    for (size_t i = 0; i < rules->n_rules + rules->n_external_rules; i++)
        if (lists_alike(rule, flat_rule(rules, i)))
            found = flat_rule(rules, i);
    return found;
}

/* The entry's resource in `mapper` (the previous snapshot may have been built against an older
 * one); NULL when the cluster no longer has it. */
static const struct cma_api_resource *same_resource_in(const struct cma_restmapper *mapper,
                                                       const struct cma_api_resource *res)
{
    char gr[512];
    cma_restmapper_group_resource(res, gr, sizeof(gr));
    return cma_restmapper_parse_for(mapper, gr);
}

/* Backend b's last good part: the entries of previous whose rules are b's, each with its rule in
 * `rules` (carried_rule: after a config reload, a rule that lists alike). */
static enum cma_errc carry_over(const struct cma_catalog *previous, const struct cma_ruleset *rules,
                                size_t b, struct cma_restmapper *mapper, int64_t now_wall_ms,
                                struct cma_catalog **ret, struct cma_err *reterr)
{
    struct cma_catalog_builder *builder;
    enum cma_errc rc = cma_catalog_builder_new(mapper, &builder, reterr);
    size_t n = previous ? cma_catalog_count(previous) : 0;
    for (size_t i = 0; rc == CMA_OK && i < n; i++) {
        const struct cma_catalog_entry *e = cma_catalog_entry_at(previous, i);
        const struct cma_rule *r =
            e->rule->backend.index == b ? carried_rule(rules, e->rule) : NULL;
        const struct cma_api_resource *res = r ? same_resource_in(mapper, e->resource) : NULL;
        if (res)
            rc = cma_catalog_builder_add(builder, res, e->metric, strlen(e->metric), e->series,
                                         strlen(e->series), r);
    }
    n = previous ? cma_catalog_count_external(previous) : 0;
    for (size_t i = 0; rc == CMA_OK && i < n; i++) {
        const struct cma_catalog_entry *e = cma_catalog_external_at(previous, i);
        const struct cma_rule *r =
            e->rule->backend.index == b ? carried_rule(rules, e->rule) : NULL;
        if (r)
            rc = cma_catalog_builder_add_external(builder, e->metric, strlen(e->metric), e->series,
                                                  strlen(e->series), r);
    }
    if (rc != CMA_OK) {
        cma_catalog_builder_free(builder);
        return rc == CMA_ERR_NOMEM ? cma_err_set(reterr, rc, "out of memory") : rc;
    }
    return cma_catalog_build(builder, now_wall_ms, ret, reterr);
}

static void warn_shadowed(const struct cma_catalog_entry *lost, const struct cma_catalog_entry *won,
                          const struct cma_relist_backends *bk)
{
    char gr[512] = "external metrics";
    if (lost->resource)
        cma_restmapper_group_resource(lost->resource, gr, sizeof(gr));
    const struct cma_config_rule *l = lost->rule->cfg, *w = won->rule->cfg;
    cma_log_warn("metric %s of %s is served by rules on two backends: backend %s (%s:%u:%u) "
                 "wins over backend %s (%s:%u:%u), the backend defined first wins",
                 lost->metric, gr, cma_backend_name(&bk->table[won->rule->backend.index]),
                 w->pos.file, w->pos.line, w->pos.column,
                 cma_backend_name(&bk->table[lost->rule->backend.index]), l->pos.file, l->pos.line,
                 l->pos.column);
}

/* The entry of an earlier part with the same key, or NULL. */
static const struct cma_catalog_entry *earlier_entry(struct cma_catalog *const *parts, size_t b,
                                                     const struct cma_catalog_entry *e)
{
    for (size_t j = 0; j < b; j++) {
        const struct cma_catalog_entry *f =
            !parts[j]
                ? NULL
                : cma_catalog_lookup_owner(parts[j], e->resource, e->namespaced, e->metric,
                                           e->rule->owner ? e->rule->owner->namespace_ : NULL);
        if (f)
            return f;
    }
    return NULL;
}

/* One snapshot from the parts, in backend order; a key an earlier part holds stays its. */
static enum cma_errc merge_parts(struct cma_catalog *const *parts,
                                 const struct cma_relist_backends *bk,
                                 struct cma_restmapper *mapper, int64_t now_wall_ms,
                                 struct cma_catalog **ret, struct cma_err *reterr)
{
    struct cma_catalog_builder *builder;
    enum cma_errc rc = cma_catalog_builder_new(mapper, &builder, reterr);
    for (size_t b = 0; rc == CMA_OK && b < bk->n; b++) {
        size_t n = parts[b] ? cma_catalog_count(parts[b]) : 0,
               n_ext = parts[b] ? cma_catalog_count_external(parts[b]) : 0;
        for (size_t i = 0; rc == CMA_OK && i < n + n_ext; i++) {
            const struct cma_catalog_entry *e = i < n ? cma_catalog_entry_at(parts[b], i)
                                                      : cma_catalog_external_at(parts[b], i - n);
            const struct cma_catalog_entry *won = earlier_entry(parts, b, e);
            if (won)
                warn_shadowed(e, won, bk);
            else if (e->resource)
                rc = cma_catalog_builder_add(builder, e->resource, e->metric, strlen(e->metric),
                                             e->series, strlen(e->series), e->rule);
            else
                rc = cma_catalog_builder_add_external(builder, e->metric, strlen(e->metric),
                                                      e->series, strlen(e->series), e->rule);
        }
    }
    if (rc != CMA_OK) {
        cma_catalog_builder_free(builder);
        return rc == CMA_ERR_NOMEM ? cma_err_set(reterr, rc, "out of memory") : rc;
    }
    return cma_catalog_build(builder, now_wall_ms, ret, reterr);
}

/* Backend b failed with err: its part is its last good entries; says so. */
static enum cma_errc keep_last_good(const struct cma_relist_backends *bk,
                                    const struct cma_ruleset *rules, size_t b,
                                    struct cma_restmapper *mapper, int64_t now_wall_ms,
                                    const struct cma_err *err, struct cma_catalog **part,
                                    struct cma_err *partial, struct cma_err *reterr)
{
    const char *name = cma_backend_name(&bk->table[b]);
    if (partial && partial->code == CMA_OK)
        cma_err_set(partial, err->code, "backend %s: %s", name, err->msg);
    enum cma_errc rc = carry_over(bk->previous, rules, b, mapper, now_wall_ms, part, reterr);
    if (rc == CMA_OK)
        cma_log_warn("unable to update list of metrics of backend %s: %s; keeping its %zu "
                     "custom and %zu external metrics of the previous catalog",
                     name, err->msg, cma_catalog_count(*part), cma_catalog_count_external(*part));
    return rc;
}

static void parts_free(struct cma_catalog **parts, size_t n)
{
    for (size_t i = 0; parts && i < n; i++)
        cma_catalog_unref(parts[i]);
    free(parts);
}

/* The only part, taken out of parts, or NULL when there are several (or none). */
static struct cma_catalog *only_part(struct cma_catalog **parts, size_t n)
{
    size_t k = n;
    for (size_t i = 0; i < n; i++)
        if (parts[i]) {
            if (k != n)
                return NULL;
            k = i;
        }
    struct cma_catalog *c = k < n ? parts[k] : NULL;
    if (c)
        parts[k] = NULL;
    return c;
}

/* Each backend's own part; errs[b] is set for those that failed. */
static void list_parts(const struct cma_relist_backends *bk, const struct cma_ruleset *rules,
                       struct cma_restmapper *mapper, int64_t now_wall_ms, int64_t max_age_ms,
                       struct cma_catalog **parts, struct cma_err *errs, struct relist_tally *tally)
{
    for (size_t b = 0; b < bk->n; b++) {
        cma_err_clear(&errs[b]);
        if (backend_has_rules(rules, b))
            relist_one(&bk->table[b], b, rules, mapper, now_wall_ms, max_age_ms, &parts[b], tally,
                       &errs[b]);
    }
}

enum cma_errc cma_discovery_relist_backends(const struct cma_relist_backends *bk,
                                            const struct cma_ruleset *rules,
                                            struct cma_restmapper *mapper, int64_t now_wall_ms,
                                            int64_t max_age_ms, struct cma_catalog **ret,
                                            struct cma_err *partial, struct cma_err *reterr)
{
    struct cma_catalog **parts = calloc(bk->n + 1, sizeof(*parts));
    struct cma_err *errs = calloc(bk->n + 1, sizeof(*errs));
    if (!parts || !errs) {
        free(parts);
        free(errs);
        return cma_err_set(reterr, CMA_ERR_NOMEM, "out of memory");
    }
    struct relist_tally tally = {0};
    list_parts(bk, rules, mapper, now_wall_ms, max_age_ms, parts, errs, &tally);
    for (size_t b = 0; bk->outcomes && b < bk->n; b++)
        bk->outcomes[b] = errs[b];
    size_t n_listed = 0;
    for (size_t b = 0; b < bk->n; b++)
        n_listed += parts[b] != NULL;
    enum cma_errc rc = CMA_OK;
    for (size_t b = 0; rc == CMA_OK && b < bk->n; b++) {
        if (errs[b].code == CMA_OK)
            continue;
        if (n_listed == 0) { /* every backend failed: the previous catalog stays whole */
            cma_err_copy(reterr, &errs[b]);
            rc = errs[b].code;
        } else {
            rc = keep_last_good(bk, rules, b, mapper, now_wall_ms, &errs[b], &parts[b], partial,
                                reterr);
        }
    }
    free(errs);
    struct cma_catalog *c = rc == CMA_OK ? only_part(parts, bk->n) : NULL;
    if (rc == CMA_OK && !c)
        rc = merge_parts(parts, bk, mapper, now_wall_ms, &c, reterr);
    parts_free(parts, bk->n);
    if (rc != CMA_OK)
        return rc;
    cma_catalog_hold_rules(c, rules);
    log_built(c, &tally);
    *ret = c;
    return CMA_OK;
}

/* ---- the thread ---- */

/* What the thread knows of one backend's listings (cma_discovery_backend_pending). */
struct backend_state {
    bool known;           /* listed once, or had entries in the catalog serving at start */
    char last_error[512]; /* its last listing's error; "" when none */
};

/* On-demand RESTMapper refreshes (unknown resource in a request) are at most this frequent. */
#define REFRESH_MIN_GAP_MS 60000

struct cma_discovery {
    struct cma_discovery_config cfg;
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool stop;
    bool refresh_requested;             /* guarded by mu */
    const struct cma_ruleset *rules;    /* current, a reference; guarded by mu */
    bool new_rules;                     /* set by a reload, guarded by mu */
    int64_t last_refresh_req_ms;        /* monotonic; 0 = never; guarded by mu */
    struct cma_discovery_status status; /* guarded by mu */
    struct backend_state *backends;     /* [n_backends]: each one's listing; guarded by mu */
    size_t n_backends;
    int64_t started_wall_ms;
    struct cma_metric *m_relists, *m_duration, *m_last_success, *m_series; /* NULL: unmeasured */
};

/* ---- self-metrics: relists by result, their duration, the last success, series read ---- */

static void register_metrics(struct cma_discovery *d, struct cma_metrics *m)
{
    static const char *const result[] = {"result"};
    static const double bounds[] = {0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300};
    d->m_relists = cma_metrics_counter(m, "custom_metrics_adapter_relist_total",
                                       "Relists of the backend's series by result (success, "
                                       "failure).",
                                       result, 1);
    d->m_duration = cma_metrics_histogram(
        m, "custom_metrics_adapter_relist_duration_seconds",
        "Duration of relists in seconds (every seriesQuery listed and folded into a catalog).",
        NULL, 0, bounds, sizeof(bounds) / sizeof(bounds[0]));
    d->m_last_success = cma_metrics_gauge(
        m, "custom_metrics_adapter_relist_last_success_timestamp_seconds",
        "Unix time of the start of the last successful relist; 0 before the first.", NULL, 0);
    d->m_series = cma_metrics_counter(m, "custom_metrics_adapter_relist_series_total",
                                      "Series read from the backend by relists.", NULL, 0);
}

static void record_relist(struct cma_discovery *d, enum cma_errc rc, int64_t wall_ms,
                          int64_t took_ms, uint64_t n_series)
{
    cma_metric_inc(d->m_relists, (const char *const[]){rc == CMA_OK ? "success" : "failure"});
    cma_metric_observe(d->m_duration, NULL, (double)took_ms / 1e3);
    cma_metric_add(d->m_series, NULL, (double)n_series);
    if (rc == CMA_OK)
        cma_metric_set(d->m_last_success, NULL, (double)wall_ms / 1e3);
}

/* A backend that counts the series a relist reads and forwards everything (discovery thread). */
struct counting {
    const struct cma_backend *inner;
    cma_series_fn fn;
    void *fn_ctx;
    uint64_t n;
};

static int count_one(void *ctx, const char *metric, size_t metric_len,
                     const struct cma_label_view *labels, size_t n_labels)
{
    struct counting *c = ctx;
    c->n++;
    return c->fn(c->fn_ctx, metric, metric_len, labels, n_labels);
}

static enum cma_errc counting_series(void *ctx, const char *match, int64_t start_ms, int64_t end_ms,
                                     const char *tenant, cma_series_fn fn, void *fn_ctx,
                                     struct cma_err *reterr)
{
    struct counting *c = ctx;
    c->fn = fn;
    c->fn_ctx = fn_ctx;
    return cma_backend_series_as(c->inner, tenant, match, start_ms, end_ms, count_one, c, reterr);
}

static enum cma_errc counting_query(void *ctx, const char *promql, int64_t time_ms,
                                    const struct cma_keep *keep, struct cma_prom_result **ret,
                                    struct cma_err *reterr)
{
    struct counting *c = ctx;
    return cma_backend_query(c->inner, promql, time_ms, keep, ret, reterr);
}

static const char *counting_name(const void *ctx)
{
    const struct counting *c = ctx;
    return cma_backend_name(c->inner);
}

static const struct cma_backend_ops COUNTING_OPS = {counting_query, counting_series, counting_name};

/* One relist of the thread, each backend counted: over the table when there is one (a failing
 * backend keeps its entries of the snapshot serving now), else over the one backend. */
static enum cma_errc relist_counted(struct cma_discovery *d, const struct cma_ruleset *rules,
                                    struct cma_restmapper *mapper, int64_t wall, int64_t max_age,
                                    struct cma_catalog **ret, uint64_t *n_series,
                                    struct cma_err *outcomes, struct cma_err *partial,
                                    struct cma_err *err)
{
    size_t n = d->cfg.backends ? d->cfg.n_backends : 1;
    const struct cma_backend *inner = d->cfg.backends ? d->cfg.backends : &d->cfg.backend;
    struct counting *counted = calloc(n, sizeof(*counted));
    struct cma_backend *table = calloc(n, sizeof(*table));
    if (!counted || !table) {
        free(counted);
        free(table);
        cma_err_set(err, CMA_ERR_NOMEM, "out of memory");
        return CMA_ERR_NOMEM;
    }
    enum cma_errc rc = CMA_OK;
    for (size_t i = 0; i < n; i++) {
        counted[i].inner = &inner[i];
        table[i] = (struct cma_backend){&COUNTING_OPS, &counted[i]};
    }
    if (rc == CMA_OK && !d->cfg.backends) {
        rc = cma_discovery_relist(&table[0], rules, mapper, wall, max_age, ret, err);
        outcomes[0] = *err;
    } else if (rc == CMA_OK) {
        struct cma_relist_backends bk = {table, n, cma_catalog_store_get(d->cfg.store), outcomes};
        rc = cma_discovery_relist_backends(&bk, rules, mapper, wall, max_age, ret, partial, err);
        cma_catalog_unref(bk.previous);
    }
    for (size_t i = 0; i < n; i++)
        *n_series += counted[i].n;
    free(counted);
    free(table);
    return rc;
}

/* Each backend's outcome of a relist (NULL: none known, out of memory); mutex held. A backend
 * without rules lists nothing and reports CMA_OK: it is never asked about. */
static void record_backends(struct cma_discovery *d, const struct cma_err *outcomes)
{
    for (size_t b = 0; outcomes && b < d->n_backends; b++) {
        struct backend_state *s = &d->backends[b];
        if (outcomes[b].code == CMA_OK) {
            s->known = true;
            s->last_error[0] = '\0';
        } else {
            snprintf(s->last_error, sizeof(s->last_error), "%s", outcomes[b].msg);
        }
    }
}

/* Does c hold an entry (custom or external) of a rule on backend b? */
static bool has_entries_of(const struct cma_catalog *c, size_t b)
{
    for (size_t i = 0; c && i < cma_catalog_count(c); i++)
        if (cma_catalog_entry_at(c, i)->rule->backend.index == b)
            return true;
    for (size_t i = 0; c && i < cma_catalog_count_external(c); i++)
        if (cma_catalog_external_at(c, i)->rule->backend.index == b)
            return true;
    return false;
}

/* The backends' states at start: a backend with entries in the catalog serving now (loaded from
 * --catalog-cache-file) is known; the others are pending until they list. */
static enum cma_errc init_backends(struct cma_discovery *d)
{
    d->n_backends = d->cfg.backends ? d->cfg.n_backends : 1;
    d->backends = calloc(d->n_backends ? d->n_backends : 1, sizeof(*d->backends));
    if (!d->backends)
        return CMA_ERR_NOMEM;
    struct cma_catalog *serving = d->cfg.store ? cma_catalog_store_get(d->cfg.store) : NULL;
    for (size_t b = 0; b < d->n_backends; b++)
        d->backends[b].known = has_entries_of(serving, b);
    cma_catalog_unref(serving);
    d->started_wall_ms = cma_clock_wall_ms();
    return CMA_OK;
}

bool cma_discovery_backend_pending(struct cma_discovery *d, size_t index,
                                   struct cma_discovery_pending *ret)
{
    if (!d)
        return false;
    pthread_mutex_lock(&d->mu);
    bool pending = index < d->n_backends && !d->backends[index].known;
    if (pending) {
        const struct cma_backend *b = d->cfg.backends ? &d->cfg.backends[index] : &d->cfg.backend;
        snprintf(ret->name, sizeof(ret->name), "%s", cma_backend_name(b));
        ret->since_wall_ms = d->started_wall_ms;
        snprintf(ret->last_error, sizeof(ret->last_error), "%s", d->backends[index].last_error);
    }
    pthread_mutex_unlock(&d->mu);
    return pending;
}

/* Sleeps up to ms or until stop, a refresh request or new rules; returns true when stopping. */
static bool wait_or_stop(struct cma_discovery *d, int64_t ms)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    int64_t ns = ts.tv_nsec + (ms % 1000) * 1000000;
    ts.tv_sec += ms / 1000 + ns / 1000000000;
    ts.tv_nsec = ns % 1000000000;
    pthread_mutex_lock(&d->mu);
    while (!d->stop && !d->refresh_requested && !d->new_rules)
        if (pthread_cond_timedwait(&d->cv, &d->mu, &ts) != 0)
            break;
    bool stop = d->stop;
    pthread_mutex_unlock(&d->mu);
    return stop;
}

static struct cma_restmapper *refresh_mapper(struct cma_discovery *d)
{
    struct cma_err err;
    cma_err_clear(&err);
    struct cma_api_resources *res = NULL;
    struct cma_restmapper *m = NULL;
    if (cma_kube_discover(d->cfg.kube, &res, &err) == CMA_OK &&
        cma_restmapper_new(res, &m, &err) == CMA_OK) {
        cma_log_v(1, "kube API discovery: %zu resources", cma_restmapper_count(m));
        return m;
    }
    cma_log_warn("kube API discovery failed: %s", err.msg);
    return NULL;
}

static void *discovery_main(void *arg)
{
    struct cma_discovery *d = arg;
    struct cma_restmapper *mapper = NULL;
    int64_t mapper_due = 0;
    int64_t max_age = d->cfg.max_age_ms ? d->cfg.max_age_ms : d->cfg.relist_interval_ms;
    for (;;) {
        int64_t now = cma_clock_mono_ms();
        pthread_mutex_lock(&d->mu);
        bool requested = d->refresh_requested, reloaded = d->new_rules;
        d->refresh_requested = false;
        d->new_rules = false;
        pthread_mutex_unlock(&d->mu);
        if (requested)
            cma_log_v(1, "kube API discovery: refresh requested for an unknown resource");
        if (reloaded)
            cma_log_v(1, "discovery: the config was reloaded: relisting now");
        if (!mapper || now >= mapper_due || requested) {
            struct cma_restmapper *fresh = refresh_mapper(d);
            if (fresh) {
                cma_restmapper_unref(mapper);
                mapper = fresh;
                mapper_due = now + d->cfg.discovery_interval_ms;
            } else if (!mapper) {
                if (wait_or_stop(d, d->cfg.retry_ms ? d->cfg.retry_ms : 5000))
                    break;
                continue;
            }
        }
        struct cma_err err;
        cma_err_clear(&err);
        struct cma_catalog *c = NULL;
        int64_t wall = cma_clock_wall_ms(), t0 = cma_clock_mono_ms();
        const struct cma_ruleset *rules = cma_discovery_rules(d);
        uint64_t n_series = 0;
        struct cma_err partial;
        cma_err_clear(&partial);
        struct cma_err *outcomes = calloc(d->n_backends, sizeof(*outcomes));
        for (size_t b = 0; outcomes && b < d->n_backends; b++) /* until the relist says */
            cma_err_set(&outcomes[b], CMA_ERR_NOMEM, "out of memory before the listing");
        enum cma_errc rc = outcomes ? relist_counted(d, rules, mapper, wall, max_age, &c, &n_series,
                                                     outcomes, &partial, &err)
                                    : cma_err_set(&err, CMA_ERR_NOMEM, "out of memory");
        cma_ruleset_unref(rules); /* a new snapshot holds its own reference */
        record_relist(d, rc, wall, cma_clock_mono_ms() - t0, n_series);
        pthread_mutex_lock(&d->mu);
        record_backends(d, outcomes);
        d->status.n_relists++;
        d->status.last_attempt_wall_ms = wall;
        if (rc == CMA_OK) {
            d->status.have_catalog = true;
            d->status.last_success_wall_ms = wall;
            /* "" unless a backend failed and kept its previous entries */
            snprintf(d->status.last_error, sizeof(d->status.last_error), "%s", partial.msg);
        } else {
            d->status.n_failures++;
            snprintf(d->status.last_error, sizeof(d->status.last_error), "%s", err.msg);
        }
        bool had = d->status.have_catalog;
        pthread_mutex_unlock(&d->mu);
        free(outcomes);
        if (rc == CMA_OK) {
            cma_catalog_store_publish(d->cfg.store, c);
        } else {
            /* A catalog loaded from --catalog-cache-file serves before any relist succeeds. */
            struct cma_catalog *serving = had ? NULL : cma_catalog_store_get(d->cfg.store);
            cma_log_warn("unable to update list of all metrics: %s; %s", err.msg,
                         had       ? "keeping the previous catalog"
                         : serving ? "serving the catalog loaded from the cache file, retrying"
                                   : "no catalog yet, retrying");
            cma_catalog_unref(serving);
        }
        /* A relist frees its caches and the previous snapshot; return those pages to the
         * system instead of keeping them in this thread's malloc arena until the next relist. */
        malloc_trim(0);
        if (wait_or_stop(d, rc == CMA_OK || had ? d->cfg.relist_interval_ms
                                                : (d->cfg.retry_ms ? d->cfg.retry_ms : 5000)))
            break;
    }
    cma_restmapper_unref(mapper);
    return NULL;
}

enum cma_errc cma_discovery_start(const struct cma_discovery_config *cfg,
                                  struct cma_discovery **ret, struct cma_err *reterr)
{
    struct cma_discovery *d = calloc(1, sizeof(*d));
    if (!d)
        return cma_err_set(reterr, CMA_ERR_NOMEM, "out of memory");
    d->cfg = *cfg;
    if (init_backends(d) != CMA_OK) {
        free(d);
        return cma_err_set(reterr, CMA_ERR_NOMEM, "out of memory");
    }
    d->rules = cma_ruleset_ref(cfg->rules);
    d->cfg.rules = NULL; /* d->rules, under the mutex, from now on */
    register_metrics(d, cfg->metrics);
    if (d->cfg.relist_interval_ms <= 0)
        d->cfg.relist_interval_ms = 600000;
    if (d->cfg.discovery_interval_ms <= 0)
        d->cfg.discovery_interval_ms = 600000;
    pthread_mutex_init(&d->mu, NULL);
    pthread_cond_init(&d->cv, NULL);
    if (pthread_create(&d->thread, NULL, discovery_main, d) != 0) {
        pthread_mutex_destroy(&d->mu);
        pthread_cond_destroy(&d->cv);
        cma_ruleset_unref(d->rules);
        free(d->backends);
        free(d);
        return cma_err_set(reterr, CMA_ERR_INTERNAL, "cannot start the discovery thread");
    }
    *ret = d;
    return CMA_OK;
}

void cma_discovery_stop(struct cma_discovery *d)
{
    if (!d)
        return;
    pthread_mutex_lock(&d->mu);
    d->stop = true;
    pthread_cond_broadcast(&d->cv);
    pthread_mutex_unlock(&d->mu);
    pthread_join(d->thread, NULL);
    pthread_mutex_destroy(&d->mu);
    pthread_cond_destroy(&d->cv);
    cma_ruleset_unref(d->rules);
    free(d->backends);
    free(d);
}

void cma_discovery_set_rules(struct cma_discovery *d, const struct cma_ruleset *rules)
{
    if (!d)
        return;
    const struct cma_ruleset *fresh = cma_ruleset_ref(rules);
    pthread_mutex_lock(&d->mu);
    const struct cma_ruleset *old = d->rules;
    d->rules = fresh;
    d->new_rules = true;
    pthread_cond_broadcast(&d->cv);
    pthread_mutex_unlock(&d->mu);
    cma_ruleset_unref(old); /* snapshots and requests built from it hold their own */
}

const struct cma_ruleset *cma_discovery_rules(struct cma_discovery *d)
{
    if (!d)
        return NULL;
    pthread_mutex_lock(&d->mu);
    const struct cma_ruleset *rs = cma_ruleset_ref(d->rules);
    pthread_mutex_unlock(&d->mu);
    return rs;
}

bool cma_discovery_request_refresh(struct cma_discovery *d)
{
    if (!d)
        return false;
    int64_t now = cma_clock_mono_ms();
    pthread_mutex_lock(&d->mu);
    bool accepted =
        d->last_refresh_req_ms == 0 || now - d->last_refresh_req_ms >= REFRESH_MIN_GAP_MS;
    if (accepted) {
        d->last_refresh_req_ms = now ? now : 1;
        d->refresh_requested = true;
        pthread_cond_broadcast(&d->cv);
    }
    pthread_mutex_unlock(&d->mu);
    return accepted;
}

void cma_discovery_get_status(struct cma_discovery *d, struct cma_discovery_status *ret)
{
    pthread_mutex_lock(&d->mu);
    *ret = d->status;
    pthread_mutex_unlock(&d->mu);
}
