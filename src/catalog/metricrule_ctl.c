/* metricrule_ctl.c: the MetricRule controller (metricrule_ctl.h): MetricRules compiled when they
 * change, merged with the config files' ruleset and published like a config reload.
 *
 * DESIGN: each MetricRule seen is a `part`: its identity (namespace, name, uid, generation,
 * spec text), its owner record (what cma_rule.owner points at) and its compile (or the reason
 * it was refused). Parts are reference-counted: the controller holds the current ones, and each
 * merged ruleset holds the parts (and the config ruleset) its shallow rule copies point into,
 * through a `keep` released with the merged ruleset's last reference (cma_ruleset_new_merged).
 * An update reuses a part whose uid, generation and spec are unchanged, compiles the others,
 * and publishes a new merge only when the set of parts (or the config) changed. One mutex
 * serialises updates and config reloads, so merges are published in order. */
#include "cma/metricrule_ctl.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cma/log.h"
#include "cma/metricrule.h"
#include "cma/metricrule_watch.h"
#include "cma/rule.h"

struct part {
    atomic_int refs;
    char *namespace_, *name, *uid, *spec_json, *label;
    int64_t generation, creation_ms;
    struct cma_rule_owner owner;
    struct cma_metricrule_compiled *compiled; /* NULL: refused */
    const char *reason;                       /* static text */
    char *message;                            /* "" when accepted */
};

/* What a merged ruleset keeps alive. */
struct keep {
    const struct cma_ruleset *config;
    struct part **parts;
    size_t n;
};

struct cma_metricrule_ctl {
    pthread_mutex_t mu;
    char *ns_label;
    struct cma_metricrule_ctl_config cfg;          /* ns_label replaced by the copy */
    struct cma_metricrule_ctl_backend_policy *pol; /* n_backends, copied */
    const struct cma_ruleset *config;              /* a reference */
    struct part **parts;                           /* sorted by namespace, name */
    size_t n_parts;
    const struct cma_ruleset *current; /* the last merge published; a reference */
    struct cma_metricrule_watch *watch;
};

static void part_unref(struct part *p)
{
    if (!p || atomic_fetch_sub(&p->refs, 1) != 1)
        return;
    free(p->namespace_);
    free(p->name);
    free(p->uid);
    free(p->spec_json);
    free(p->label);
    free(p->message);
    cma_metricrule_compiled_free(p->compiled);
    free(p);
}

static void parts_free(struct part **parts, size_t n)
{
    for (size_t i = 0; parts && i < n; i++)
        part_unref(parts[i]);
    free(parts);
}

static void keep_release(void *k)
{
    struct keep *keep = k;
    cma_ruleset_unref(keep->config);
    parts_free(keep->parts, keep->n);
    free(keep);
}

/* ---- backends ------------------------------------------------------------------------------ */

static bool namespace_listed(const struct cma_metricrule_ctl_backend_policy *p, const char *ns)
{
    if (p->n_namespaces == 0)
        return true;
    for (size_t i = 0; i < p->n_namespaces; i++)
        if (strcmp(p->namespaces[i], ns) == 0)
            return true;
    return false;
}

/* CMA_OK when MetricRules of namespace ns may name backend `name` (NULL: the flags' one). */
static enum cma_errc backend_allowed(const struct cma_metricrule_ctl *c, const char *name,
                                     const char *ns, const char *field, struct cma_err *reterr)
{
    for (size_t i = 0; i < c->cfg.n_backends; i++) {
        bool same =
            name ? c->cfg.backend_names[i] && strcmp(name, c->cfg.backend_names[i]) == 0 : i == 0;
        if (!same)
            continue;
        const struct cma_metricrule_ctl_backend_policy *p = &c->pol[i];
        if (p->allowed && namespace_listed(p, ns))
            return CMA_OK;
        return cma_err_set(reterr, CMA_ERR_RULE,
                           "%s: backend \"%s\" is not allowed for MetricRules%s%s (the "
                           "administrator allows it in the config file: backends[].metricRules)",
                           field, name ? name : "(--prometheus-url)",
                           p->allowed ? " in namespace " : "", p->allowed ? ns : "");
    }
    return cma_err_set(reterr, CMA_ERR_RULE, "%s: backend \"%s\" is not defined", field,
                       name ? name : "(--prometheus-url)");
}

static enum cma_errc check_backends(const struct cma_metricrule_ctl *c,
                                    const struct cma_metricrule_compiled *m, const char *ns,
                                    struct cma_err *reterr)
{
    enum cma_errc rc = CMA_OK;
    char field[96];
    for (size_t i = 0; rc == CMA_OK && i < m->n_rule_backends; i++) {
        snprintf(field, sizeof(field), "spec.rules[%zu].backend", i);
        rc = backend_allowed(c, m->rule_backends[i], ns, field, reterr);
    }
    for (size_t i = 0; rc == CMA_OK && i < m->n_external_backends; i++) {
        snprintf(field, sizeof(field), "spec.externalRules[%zu].backend", i);
        rc = backend_allowed(c, m->external_backends[i], ns, field, reterr);
    }
    return rc;
}

/* ---- parts --------------------------------------------------------------------------------- */

static void compile_part(const struct cma_metricrule_ctl *c, struct part *p)
{
    struct cma_err err;
    cma_err_clear(&err);
    struct cma_metricrule_compiled *m = NULL;
    enum cma_errc rc = cma_metricrule_compile(p->namespace_, c->ns_label, p->spec_json,
                                              strlen(p->spec_json), &m, &err);
    p->reason = "InvalidSpec";
    if (rc == CMA_OK && (rc = check_backends(c, m, p->namespace_, &err)) != CMA_OK)
        p->reason = "BackendNotAllowed";
    if (rc == CMA_OK) {
        p->compiled = m;
        p->reason = "Accepted";
        p->message = strdup("");
        return;
    }
    cma_metricrule_compiled_free(m);
    p->message = strdup(err.msg[0] ? err.msg : cma_errc_meaning(rc));
}

static struct part *new_part(const struct cma_metricrule_ctl *c, const struct cma_metricrule *o)
{
    struct part *p = calloc(1, sizeof(*p));
    if (!p)
        return NULL;
    atomic_init(&p->refs, 1);
    p->namespace_ = strdup(o->namespace_);
    p->name = strdup(o->name);
    p->uid = strdup(o->uid);
    p->spec_json = strdup(o->spec_json);
    p->label = strdup(c->ns_label);
    p->generation = o->generation;
    p->creation_ms = o->creation_ms;
    if (!p->namespace_ || !p->name || !p->uid || !p->spec_json || !p->label) {
        part_unref(p);
        return NULL;
    }
    p->owner = (struct cma_rule_owner){p->namespace_, p->name, p->label};
    compile_part(c, p);
    if (!p->message) {
        part_unref(p);
        return NULL;
    }
    return p;
}

/* The current part for o when nothing that decides its compile changed; NULL otherwise. */
static struct part *same_part(const struct cma_metricrule_ctl *c, const struct cma_metricrule *o)
{
    for (size_t i = 0; i < c->n_parts; i++) {
        struct part *p = c->parts[i];
        if (strcmp(p->namespace_, o->namespace_) == 0 && strcmp(p->name, o->name) == 0 &&
            strcmp(p->uid, o->uid) == 0 && p->generation == o->generation &&
            strcmp(p->spec_json, o->spec_json) == 0 && p->creation_ms == o->creation_ms)
            return p;
    }
    return NULL;
}

/* ---- the merge ----------------------------------------------------------------------------- */

/* Merge order: by namespace; within one, the newer object first, so the older one's rules come
 * later and win (later rules win in discovery). */
static int cmp_merge(const void *a, const void *b)
{
    const struct part *x = *(struct part *const *)a, *y = *(struct part *const *)b;
    int d = strcmp(x->namespace_, y->namespace_);
    if (d)
        return d;
    if (x->creation_ms != y->creation_ms)
        return x->creation_ms > y->creation_ms ? -1 : 1;
    return -strcmp(x->name, y->name);
}

/* The shallow copy of a MetricRule's rule k (external: its external rule). */
static struct cma_rule copy_owned(const struct part *p, bool external, size_t k, size_t index)
{
    const struct cma_metricrule_compiled *m = p->compiled;
    struct cma_rule r = external ? m->rules->external_rules[k] : m->rules->rules[k];
    r.index = index;
    r.owner = &p->owner;
    r.series_query = external ? m->external_series[k] : m->rule_series[k];
    r.backend.name = external ? m->external_backends[k] : m->rule_backends[k];
    r.backend.pos = NULL;
    return r;
}

static void fill_merged(struct cma_ruleset *rs, const struct cma_ruleset *cf, struct keep *k)
{
    size_t nr = 0, ne = 0;
    for (size_t i = 0; i < cf->n_rules; i++)
        rs->rules[nr++] = cf->rules[i];
    for (size_t i = 0; i < cf->n_external_rules; i++)
        rs->external_rules[ne++] = cf->external_rules[i];
    for (size_t i = 0; i < k->n; i++) {
        const struct cma_ruleset *m = k->parts[i]->compiled->rules;
        for (size_t j = 0; j < m->n_rules; j++, nr++)
            rs->rules[nr] = copy_owned(k->parts[i], false, j, nr);
        for (size_t j = 0; j < m->n_external_rules; j++, ne++)
            rs->external_rules[ne] = copy_owned(k->parts[i], true, j, ne);
    }
    rs->has_resource_rules = cf->has_resource_rules;
    rs->cpu = cf->cpu;
    rs->memory = cf->memory;
    rs->resource_backend = cf->resource_backend;
    rs->window_ms = cf->window_ms;
    rs->base = cf;
}

/* The keep of a merge: the config and the accepted parts, in merge order (references). */
static struct keep *new_keep(const struct cma_metricrule_ctl *c)
{
    struct keep *k = calloc(1, sizeof(*k));
    struct part **v = calloc(c->n_parts + 1, sizeof(*v));
    if (!k || !v) {
        free(k);
        free(v);
        return NULL;
    }
    for (size_t i = 0; i < c->n_parts; i++)
        if (c->parts[i]->compiled) {
            atomic_fetch_add(&c->parts[i]->refs, 1);
            v[k->n++] = c->parts[i];
        }
    qsort(v, k->n, sizeof(*v), cmp_merge);
    k->parts = v;
    k->config = cma_ruleset_ref(c->config);
    return k;
}

static enum cma_errc merge_and_publish(struct cma_metricrule_ctl *c, struct cma_err *reterr)
{
    struct keep *k = new_keep(c);
    if (!k)
        return cma_err_set(reterr, CMA_ERR_NOMEM, "out of memory");
    size_t nr = c->config->n_rules, ne = c->config->n_external_rules;
    for (size_t i = 0; i < k->n; i++) {
        nr += k->parts[i]->compiled->rules->n_rules;
        ne += k->parts[i]->compiled->rules->n_external_rules;
    }
    struct cma_ruleset *rs = NULL;
    if (cma_ruleset_new_merged(nr, ne, keep_release, k, &rs, reterr) != CMA_OK) {
        keep_release(k);
        return reterr ? reterr->code : CMA_ERR_NOMEM;
    }
    fill_merged(rs, c->config, k);
    enum cma_errc rc = cma_ruleset_bind_backends(rs, c->cfg.backend_names, c->cfg.queries,
                                                 c->cfg.max_query_bytes, c->cfg.n_backends, reterr);
    if (rc != CMA_OK) {
        cma_ruleset_free(rs);
        return rc;
    }
    cma_log_info("metric rules: serving %zu rules and %zu externalRules (%zu of them from %zu "
                 "accepted MetricRules)",
                 nr, ne, nr + ne - c->config->n_rules - c->config->n_external_rules, k->n);
    if (c->cfg.publish)
        c->cfg.publish(c->cfg.ctx, rs);
    cma_ruleset_unref(c->current);
    c->current = rs;
    return CMA_OK;
}

/* ---- the API ------------------------------------------------------------------------------- */

static void log_outcome(const struct part *p)
{
    if (p->compiled)
        cma_log_info("metric rules: MetricRule %s/%s generation %lld accepted", p->namespace_,
                     p->name, (long long)p->generation);
    else
        cma_log_warn("metric rules: MetricRule %s/%s generation %lld not accepted (%s): %s",
                     p->namespace_, p->name, (long long)p->generation, p->reason, p->message);
}

/* The parts for objs: reused or new. *ret_changed: anything differs from c->parts. */
static enum cma_errc next_parts(const struct cma_metricrule_ctl *c,
                                const struct cma_metricrule *objs, size_t n, struct part ***ret,
                                bool *ret_changed)
{
    struct part **v = calloc(n + 1, sizeof(*v));
    if (!v)
        return CMA_ERR_NOMEM;
    bool changed = n != c->n_parts;
    for (size_t i = 0; i < n; i++) {
        struct part *p = same_part(c, &objs[i]);
        if (p) {
            atomic_fetch_add(&p->refs, 1);
        } else if ((p = new_part(c, &objs[i])) != NULL) {
            log_outcome(p);
            changed = true;
        } else {
            parts_free(v, i);
            return CMA_ERR_NOMEM;
        }
        v[i] = p;
    }
    *ret = v;
    *ret_changed = changed;
    return CMA_OK;
}

enum cma_errc cma_metricrule_ctl_update(struct cma_metricrule_ctl *c,
                                        const struct cma_metricrule *objs, size_t n,
                                        struct cma_err *reterr)
{
    pthread_mutex_lock(&c->mu);
    struct part **v = NULL;
    bool changed = false;
    enum cma_errc rc = next_parts(c, objs, n, &v, &changed);
    if (rc != CMA_OK) {
        pthread_mutex_unlock(&c->mu);
        return cma_err_set(reterr, rc, "out of memory");
    }
    parts_free(c->parts, c->n_parts);
    c->parts = v;
    c->n_parts = n;
    if (changed || !c->current)
        rc = merge_and_publish(c, reterr);
    pthread_mutex_unlock(&c->mu);
    return rc;
}

enum cma_errc cma_metricrule_ctl_set_config(struct cma_metricrule_ctl *c,
                                            const struct cma_ruleset *rs, struct cma_err *reterr)
{
    pthread_mutex_lock(&c->mu);
    const struct cma_ruleset *old = c->config;
    c->config = cma_ruleset_ref(rs);
    cma_ruleset_unref(old);
    enum cma_errc rc = merge_and_publish(c, reterr);
    pthread_mutex_unlock(&c->mu);
    return rc;
}

const struct cma_ruleset *cma_metricrule_ctl_current(struct cma_metricrule_ctl *c)
{
    pthread_mutex_lock(&c->mu);
    const struct cma_ruleset *rs = cma_ruleset_ref(c->current);
    pthread_mutex_unlock(&c->mu);
    return rs;
}

static enum cma_errc copy_outcome(const struct part *p, struct cma_metricrule_ctl_outcome *o)
{
    *o = (struct cma_metricrule_ctl_outcome){
        .namespace_ = strdup(p->namespace_),
        .name = strdup(p->name),
        .uid = strdup(p->uid),
        .generation = p->generation,
        .accepted = p->compiled != NULL,
        .reason = strdup(p->reason),
        .message = strdup(p->message),
    };
    bool ok = o->namespace_ && o->name && o->uid && o->reason && o->message;
    return ok ? CMA_OK : CMA_ERR_NOMEM;
}

enum cma_errc cma_metricrule_ctl_outcomes(struct cma_metricrule_ctl *c,
                                          struct cma_metricrule_ctl_outcome **ret, size_t *ret_n,
                                          struct cma_err *reterr)
{
    pthread_mutex_lock(&c->mu);
    size_t n = c->n_parts;
    struct cma_metricrule_ctl_outcome *v = calloc(n + 1, sizeof(*v));
    enum cma_errc rc = v ? CMA_OK : CMA_ERR_NOMEM;
    for (size_t i = 0; rc == CMA_OK && i < n; i++)
        rc = copy_outcome(c->parts[i], &v[i]);
    pthread_mutex_unlock(&c->mu);
    if (rc != CMA_OK) {
        cma_metricrule_ctl_outcomes_free(v, n);
        return cma_err_set(reterr, rc, "out of memory");
    }
    *ret = v;
    *ret_n = n;
    return CMA_OK;
}

void cma_metricrule_ctl_outcomes_free(struct cma_metricrule_ctl_outcome *o, size_t n)
{
    for (size_t i = 0; o && i < n; i++) {
        free(o[i].namespace_);
        free(o[i].name);
        free(o[i].uid);
        free(o[i].reason);
        free(o[i].message);
    }
    free(o);
}

enum cma_errc cma_metricrule_ctl_new(const struct cma_metricrule_ctl_config *cfg,
                                     const struct cma_ruleset *config_rules,
                                     struct cma_metricrule_ctl **ret, struct cma_err *reterr)
{
    struct cma_metricrule_ctl *c = calloc(1, sizeof(*c));
    if (c) {
        c->ns_label = strdup(cfg->ns_label ? cfg->ns_label : "namespace");
        c->pol = calloc(cfg->n_backends + 1, sizeof(*c->pol));
    }
    if (!c || !c->ns_label || !c->pol) {
        if (c) {
            free(c->ns_label);
            free(c->pol);
        }
        free(c);
        return cma_err_set(reterr, CMA_ERR_NOMEM, "out of memory");
    }
    pthread_mutex_init(&c->mu, NULL);
    c->cfg = *cfg;
    c->cfg.ns_label = c->ns_label;
    for (size_t i = 0; i < cfg->n_backends; i++)
        c->pol[i] = cfg->policies ? cfg->policies[i]
                                  : (struct cma_metricrule_ctl_backend_policy){.allowed = i == 0};
    c->config = cma_ruleset_ref(config_rules);
    *ret = c;
    return CMA_OK;
}

/* The watch's observer: every change is a new update from the watch's snapshot. */
static void on_watch_event(void *ctx, const struct cma_metricrule_event *ev)
{
    struct cma_metricrule_ctl *c = ctx;
    if (ev->kind == CMA_METRICRULE_LIST_FAILED || ev->kind == CMA_METRICRULE_WATCH_FAILED) {
        cma_log_v(2, "metric rules: %s (%s); retrying in %lldms",
                  ev->kind == CMA_METRICRULE_LIST_FAILED ? "list failed" : "watch ended",
                  ev->err ? ev->err->msg : "", (long long)ev->retry_ms);
        return;
    }
    if (ev->kind != CMA_METRICRULE_CHANGED)
        return;
    struct cma_err err;
    cma_err_clear(&err);
    struct cma_metricrule *objs = NULL;
    size_t n = 0;
    if (cma_metricrule_watch_snapshot(c->watch, &objs, &n, &err) != CMA_OK ||
        cma_metricrule_ctl_update(c, objs, n, &err) != CMA_OK)
        cma_log_error("metric rules: cannot apply the MetricRules: %s", err.msg);
    cma_metricrules_free(objs, n);
}

enum cma_errc cma_metricrule_ctl_start(struct cma_metricrule_ctl *c, struct cma_kube *kube,
                                       struct cma_err *reterr)
{
    struct cma_metricrule_observer obs = {.on_event = on_watch_event, .ctx = c};
    enum cma_errc rc = cma_metricrule_watch_new(kube, &obs, &c->watch, reterr);
    if (rc == CMA_OK)
        rc = cma_metricrule_watch_start(c->watch, reterr);
    return rc;
}

void cma_metricrule_ctl_free(struct cma_metricrule_ctl *c)
{
    if (!c)
        return;
    cma_metricrule_watch_free(c->watch); /* stops the thread: no update runs after this */
    parts_free(c->parts, c->n_parts);
    cma_ruleset_unref(c->current);
    cma_ruleset_unref(c->config);
    pthread_mutex_destroy(&c->mu);
    free(c->pol);
    free(c->ns_label);
    free(c);
}
