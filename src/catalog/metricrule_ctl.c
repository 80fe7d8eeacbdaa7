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
#include <time.h>

#include "cma/apiresource.h"
#include "cma/buf.h"
#include "cma/catalog.h"
#include "cma/clock.h"
#include "cma/config.h"
#include "cma/kube.h"
#include "cma/log.h"
#include "cma/metricrule.h"
#include "cma/metricrule_limits.h"
#include "cma/metricrule_status.h"
#include "cma/metricrule_status_write.h"
#include "cma/metricrule_watch.h"
#include "cma/objcache.h"
#include "cma/rule.h"
#include "cma/selector.h"

struct part {
    atomic_int refs;
    char *namespace_, *name, *uid, *spec_json, *label;
    int64_t generation, creation_ms;
    struct cma_rule_owner owner;
    struct cma_metricrule_compiled *compiled; /* NULL: refused */
    const char *reason;                       /* static text */
    char *message;                            /* "" when accepted */
    bool ns_allowed;                          /* the namespace selector's answer when made */
    /* The rest is the controller's, changed under its lock. */
    const char *admission; /* NULL: admitted (or refused above); "TooManyRules", ... */
    size_t n_metrics;      /* distinct metrics in the last catalog that had it (kept) */
    bool observed;         /* metrics/conflict come from a catalog of the current merge */
    char **metrics;        /* served (conflicts lost left out), sorted, once each */
    size_t n_served;
    char *conflict; /* the Conflict message of the first metric lost; NULL */
    char *written;  /* the status last written, until the watch shows it stored */
    char *refused;  /* a status the API refused (403, 422 ...): not written again */
    char *stale_rv; /* the resourceVersion a write found stale */
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
    /* the namespace selector: the allowed namespaces (sorted) when one is set */
    bool selecting, ns_synced;
    char **allowed;
    size_t n_allowed;
    /* the status thread */
    struct cma_kube *kube;
    pthread_cond_t cv;
    pthread_t thread;
    bool thread_started, stop, kick;
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
    for (size_t i = 0; i < p->n_served; i++)
        free(p->metrics[i]);
    free(p->metrics);
    free(p->conflict);
    free(p->written);
    free(p->refused);
    free(p->stale_rv);
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

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Whether MetricRules of ns may be served (the selector; every namespace without one). */
static bool ns_allowed(const struct cma_metricrule_ctl *c, const char *ns)
{
    if (!c->selecting)
        return true;
    return c->n_allowed && bsearch(&ns, c->allowed, c->n_allowed, sizeof(char *), cmp_str);
}

static void compile_part(const struct cma_metricrule_ctl *c, struct part *p)
{
    struct cma_err err;
    cma_err_clear(&err);
    struct cma_metricrule_compiled *m = NULL;
    if (!p->ns_allowed) {
        p->reason = "NamespaceNotAllowed";
        p->message = strdup("the labels of this namespace do not match the adapter's "
                            "--metric-rules-namespace-selector: its MetricRules are not served");
        return;
    }
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
    p->ns_allowed = ns_allowed(c, p->namespace_);
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
            strcmp(p->spec_json, o->spec_json) == 0 && p->creation_ms == o->creation_ms &&
            p->ns_allowed == ns_allowed(c, o->namespace_))
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

/* The limits over parts [from, to) of one namespace; *changed when a decision moved. */
static enum cma_errc admit_namespace(struct cma_metricrule_ctl *c, size_t from, size_t to,
                                     bool *changed)
{
    size_t n = to - from;
    struct cma_metricrule_candidate *cand = calloc(n, sizeof(*cand));
    enum cma_metricrule_admission *dec = calloc(n, sizeof(*dec));
    enum cma_errc rc = cand && dec ? CMA_OK : CMA_ERR_NOMEM;
    for (size_t i = 0; rc == CMA_OK && i < n; i++) {
        const struct part *p = c->parts[from + i];
        cand[i] = (struct cma_metricrule_candidate){p->name, p->creation_ms, p->compiled != NULL,
                                                    p->n_metrics};
    }
    if (rc == CMA_OK)
        rc = cma_metricrule_admit(&c->cfg.limits, cand, n, dec, NULL, NULL);
    for (size_t i = 0; rc == CMA_OK && i < n; i++) {
        struct part *p = c->parts[from + i];
        const char *a = dec[i] == CMA_METRICRULE_ADMIT_TOO_MANY_RULES     ? "TooManyRules"
                        : dec[i] == CMA_METRICRULE_ADMIT_TOO_MANY_METRICS ? "TooManyMetrics"
                                                                          : NULL;
        *changed |= a != p->admission;
        p->admission = a;
    }
    free(cand);
    free(dec);
    return rc;
}

/* The limits over every namespace (c->parts is sorted by namespace). */
static enum cma_errc admit_parts(struct cma_metricrule_ctl *c, bool *changed)
{
    enum cma_errc rc = CMA_OK;
    size_t from = 0;
    for (size_t i = 1; rc == CMA_OK && i <= c->n_parts; i++)
        if (i == c->n_parts || strcmp(c->parts[i]->namespace_, c->parts[from]->namespace_) != 0) {
            rc = admit_namespace(c, from, i, changed);
            from = i;
        }
    return rc;
}

/* The keep of a merge: the config and the accepted parts, in merge order (references). */
static struct keep *new_keep(struct cma_metricrule_ctl *c)
{
    bool changed = false;
    if (admit_parts(c, &changed) != CMA_OK)
        return NULL;
    struct keep *k = calloc(1, sizeof(*k));
    struct part **v = calloc(c->n_parts + 1, sizeof(*v));
    if (!k || !v) {
        free(k);
        free(v);
        return NULL;
    }
    for (size_t i = 0; i < c->n_parts; i++)
        if (c->parts[i]->compiled && !c->parts[i]->admission) {
            atomic_fetch_add(&c->parts[i]->refs, 1);
            v[k->n++] = c->parts[i];
        }
    qsort(v, k->n, sizeof(*v), cmp_merge);
    k->parts = v;
    k->config = cma_ruleset_ref(c->config);
    return k;
}

/* A MetricRule's rules on a backend with tenantFromNamespace are sent as their namespace (every
 * series listing and query: cma_rule_backend.tenant); the config files' rules never are. */
static void set_tenants(const struct cma_metricrule_ctl *c, struct cma_rule *rules, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        struct cma_rule *r = &rules[i];
        bool derive = r->owner && r->backend.index < c->cfg.n_backends &&
                      c->pol[r->backend.index].tenant_from_namespace;
        r->backend.tenant = derive ? r->owner->namespace_ : NULL;
    }
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
    set_tenants(c, rs->rules, rs->n_rules);
    set_tenants(c, rs->external_rules, rs->n_external_rules);
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

/* The reason and message a part's status gives now. */
static const char *part_reason(const struct part *p, const char **ret_message)
{
    *ret_message = p->message;
    if (!p->compiled)
        return p->reason;
    if (p->admission) {
        *ret_message = strcmp(p->admission, "TooManyRules") == 0
                           ? "the namespace has more MetricRules than the adapter's "
                             "--metric-rules-max-per-namespace: the older ones are served"
                           : "with this MetricRule the namespace's MetricRules would serve more "
                             "metrics than the adapter's --metric-rules-max-metrics-per-namespace";
        return p->admission;
    }
    if (p->observed && p->conflict) {
        *ret_message = p->conflict;
        return "Conflict";
    }
    return p->reason;
}

static enum cma_errc copy_outcome(const struct part *p, struct cma_metricrule_ctl_outcome *o)
{
    const char *message = NULL;
    const char *reason = part_reason(p, &message);
    *o = (struct cma_metricrule_ctl_outcome){
        .namespace_ = strdup(p->namespace_),
        .name = strdup(p->name),
        .uid = strdup(p->uid),
        .generation = p->generation,
        .accepted = p->compiled != NULL && !p->admission,
        .reason = strdup(reason),
        .message = strdup(message),
        .observed = p->observed,
        .metrics = calloc(p->n_served + 1, sizeof(char *)),
    };
    bool ok = o->namespace_ && o->name && o->uid && o->reason && o->message && o->metrics;
    for (size_t i = 0; ok && i < p->n_served; i++, o->n_metrics++)
        ok = (o->metrics[i] = strdup(p->metrics[i])) != NULL;
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
        for (size_t j = 0; o[i].metrics && j < o[i].n_metrics; j++)
            free(o[i].metrics[j]);
        free(o[i].metrics);
    }
    free(o);
}

/* ---- what discovery served (the status thread) --------------------------------------------- */

/* The index of the part whose owner record is o; c->n_parts when none (c->parts is sorted). */
static size_t part_index(const struct cma_metricrule_ctl *c, const char *ns, const char *name)
{
    size_t lo = 0, hi = c->n_parts;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        const struct part *p = c->parts[mid];
        int d = strcmp(p->namespace_, ns);
        if (!d)
            d = strcmp(p->name, name);
        if (!d)
            return mid;
        if (d < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return c->n_parts;
}

/* What one catalog says of one part while it is read. */
struct seen {
    char **v;
    size_t n, cap;
    char *conflict;
};

static void seen_done(struct seen *s)
{
    for (size_t i = 0; i < s->n; i++)
        free(s->v[i]);
    free(s->v);
    free(s->conflict);
    memset(s, 0, sizeof(*s));
}

static enum cma_errc seen_add(struct seen *s, const char *metric)
{
    if (s->n == s->cap) {
        size_t cap = s->cap ? s->cap * 2 : 8;
        char **v = realloc(s->v, cap * sizeof(*v));
        if (!v)
            return CMA_ERR_NOMEM;
        s->v = v;
        s->cap = cap;
    }
    s->v[s->n] = strdup(metric);
    return s->v[s->n++] ? CMA_OK : CMA_ERR_NOMEM;
}

/* The Conflict message naming the rule w that serves `what`. */
static enum cma_errc winner_message(const char *what, const struct cma_rule *w, char **ret)
{
    struct cma_metricrule_winner win = {0};
    if (w->owner) {
        win.namespace_ = w->owner->namespace_;
        win.name = w->owner->name;
    } else {
        win.file = w->cfg && w->cfg->pos.file ? w->cfg->pos.file : "(config)";
        win.line = w->cfg ? w->cfg->pos.line : 0;
        win.column = w->cfg ? w->cfg->pos.column : 0;
    }
    return cma_metricrule_status_conflict_message(what, &win, ret, NULL);
}

/* One catalog entry: a metric of the MetricRule owning it, or one it lost to the config's. */
static enum cma_errc see_entry(const struct cma_metricrule_ctl *c, const struct cma_catalog *cat,
                               struct seen *seen, const struct cma_catalog_entry *e)
{
    if (!e->rule || !e->rule->owner)
        return CMA_OK;
    size_t i = part_index(c, e->rule->owner->namespace_, e->rule->owner->name);
    if (i == c->n_parts || &c->parts[i]->owner != e->rule->owner)
        return CMA_OK;
    const struct cma_catalog_entry *w =
        e->resource ? cma_catalog_lookup(cat, e->resource, e->namespaced, e->metric)
                    : cma_catalog_lookup_external(cat, e->metric);
    if (!w || !w->rule)
        return seen_add(&seen[i], e->metric);
    if (seen[i].conflict)
        return CMA_OK;
    char what[512];
    snprintf(what, sizeof(what), "%s/%s", e->resource ? e->resource->resource : "external",
             e->metric);
    return winner_message(what, w->rule, &seen[i].conflict);
}

/* A key the MetricRule of l->rule lost to another MetricRule of its namespace: a Conflict naming
 * the one serving it (the entry's owner). */
static enum cma_errc see_loss(const struct cma_metricrule_ctl *c, const struct cma_catalog *cat,
                              struct seen *seen, const struct cma_catalog_loss *l)
{
    const struct cma_rule_owner *o = l->rule ? l->rule->owner : NULL;
    if (!o)
        return CMA_OK;
    size_t i = part_index(c, o->namespace_, o->name);
    if (i == c->n_parts || &c->parts[i]->owner != o || seen[i].conflict)
        return CMA_OK;
    const struct cma_catalog_entry *w =
        cma_catalog_lookup_owner(cat, l->resource, l->namespaced, l->metric, o->namespace_);
    if (!w || !w->rule || !w->rule->owner || w->rule->owner == o)
        return CMA_OK;
    char what[512];
    snprintf(what, sizeof(what), "%s/%s", l->resource ? l->resource->resource : "external",
             l->metric);
    return winner_message(what, w->rule, &seen[i].conflict);
}

/* Moves what was seen into the merged parts: sorted, once each. */
static void seen_apply(struct cma_metricrule_ctl *c, struct seen *seen)
{
    for (size_t i = 0; i < c->n_parts; i++) {
        struct part *p = c->parts[i];
        struct seen *s = &seen[i];
        if (!p->compiled || p->admission) {
            seen_done(s);
            continue;
        }
        if (s->n)
            qsort(s->v, s->n, sizeof(char *), cmp_str);
        size_t k = 0;
        for (size_t j = 0; j < s->n; j++) {
            if (k && strcmp(s->v[k - 1], s->v[j]) == 0)
                free(s->v[j]);
            else
                s->v[k++] = s->v[j];
        }
        for (size_t j = 0; j < p->n_served; j++)
            free(p->metrics[j]);
        free(p->metrics);
        free(p->conflict);
        p->metrics = s->v;
        p->n_served = p->n_metrics = k;
        p->conflict = s->conflict;
        p->observed = true;
        memset(s, 0, sizeof(*s));
    }
}

static enum cma_errc read_catalog(struct cma_metricrule_ctl *c, const struct cma_catalog *cat)
{
    struct seen *seen = calloc(c->n_parts + 1, sizeof(*seen));
    if (!seen)
        return CMA_ERR_NOMEM;
    enum cma_errc rc = CMA_OK;
    for (size_t i = 0; rc == CMA_OK && i < cma_catalog_count(cat); i++)
        rc = see_entry(c, cat, seen, cma_catalog_entry_at(cat, i));
    for (size_t i = 0; rc == CMA_OK && i < cma_catalog_count_external(cat); i++)
        rc = see_entry(c, cat, seen, cma_catalog_external_at(cat, i));
    for (size_t i = 0; rc == CMA_OK && i < cma_catalog_lost_count(cat); i++)
        rc = see_loss(c, cat, seen, cma_catalog_lost_at(cat, i));
    if (rc == CMA_OK)
        seen_apply(c, seen);
    for (size_t i = 0; i < c->n_parts; i++)
        seen_done(&seen[i]);
    free(seen);
    return rc;
}

enum cma_errc cma_metricrule_ctl_observe(struct cma_metricrule_ctl *c,
                                         const struct cma_catalog *cat, bool *ret_current,
                                         struct cma_err *reterr)
{
    pthread_mutex_lock(&c->mu);
    bool current = cat && c->current && cma_catalog_rules(cat) == c->current;
    enum cma_errc rc = current ? read_catalog(c, cat) : CMA_OK;
    bool changed = false;
    if (rc == CMA_OK && current)
        rc = admit_parts(c, &changed);
    if (rc != CMA_OK)
        cma_err_set(reterr, rc, "out of memory");
    else if (changed) /* a MetricRule admitted or left out by its metrics' count */
        rc = merge_and_publish(c, reterr);
    pthread_mutex_unlock(&c->mu);
    *ret_current = current;
    return rc;
}

/* ---- statuses ------------------------------------------------------------------------------ */

/* *need: whether json differs from the stored text (NULL: none) ignoring the transition time. */
static enum cma_errc differs(const char *stored, const char *json, bool *need)
{
    *need = true;
    return stored ? cma_metricrule_status_needs_write(stored, json, need, NULL) : CMA_OK;
}

/* Whether p's status can be told now: its metrics are known when it serves, the selector's
 * cache is synced when it refused the namespace, and no write found this resourceVersion stale. */
static bool outcome_known(const struct cma_metricrule_ctl *c, const struct part *p,
                          const struct cma_metricrule *o)
{
    if (p->compiled && !p->admission && !p->observed)
        return false;
    if (!p->ns_allowed && !c->ns_synced)
        return false;
    return !p->stale_rv || strcmp(p->stale_rv, o->resource_version) != 0;
}

/* Whether json must be written: the stored status differs, and it is neither what was written
 * last (not shown by the watch yet) nor what the API refused. */
static enum cma_errc worth_writing(struct part *p, const struct cma_metricrule *o, const char *json,
                                   bool *ret, struct cma_err *reterr)
{
    bool need = false, again = true, retry = true;
    enum cma_errc rc = cma_metricrule_status_needs_write(o->status_json, json, &need, reterr);
    if (rc == CMA_OK && !need && p->written) { /* what was written is stored now */
        free(p->written);
        p->written = NULL;
    }
    if (rc == CMA_OK && need)
        rc = differs(p->written, json, &again);
    if (rc == CMA_OK && need)
        rc = differs(p->refused, json, &retry);
    *ret = rc == CMA_OK && need && again && retry;
    return rc;
}

/* The status o needs now (*ret NULL: none to write: unchanged, not known yet, or held back). */
static enum cma_errc status_of(const struct cma_metricrule_ctl *c, struct part *p,
                               const struct cma_metricrule *o, int64_t now_ms, char **ret,
                               struct cma_err *reterr)
{
    *ret = NULL;
    bool serving = p->compiled && !p->admission;
    if (!outcome_known(c, p, o))
        return CMA_OK;
    const char *message = NULL;
    enum cma_metricrule_reason r;
    if (!cma_metricrule_reason_from_name(part_reason(p, &message), &r))
        return cma_err_set(reterr, CMA_ERR_INTERNAL, "unknown reason %s", p->reason);
    struct cma_metricrule_outcome out = {r, message, (const char *const *)p->metrics,
                                         serving ? p->n_served : 0};
    char *json = NULL;
    enum cma_errc rc =
        cma_metricrule_status_build(p->generation, &out, o->status_json, now_ms, &json, reterr);
    bool need = false;
    if (rc == CMA_OK)
        rc = worth_writing(p, o, json, &need, reterr);
    if (rc == CMA_OK && need)
        *ret = json;
    else
        free(json);
    return rc;
}

enum cma_errc cma_metricrule_ctl_statuses(struct cma_metricrule_ctl *c,
                                          const struct cma_metricrule *objs, size_t n,
                                          int64_t now_ms, struct cma_metricrule_ctl_status **ret,
                                          size_t *ret_n, struct cma_err *reterr)
{
    struct cma_metricrule_ctl_status *v = calloc(n + 1, sizeof(*v));
    if (!v)
        return cma_err_set(reterr, CMA_ERR_NOMEM, "out of memory");
    size_t k = 0;
    enum cma_errc rc = CMA_OK;
    pthread_mutex_lock(&c->mu);
    for (size_t i = 0; rc == CMA_OK && i < n; i++) {
        const struct cma_metricrule *o = &objs[i];
        size_t j = part_index(c, o->namespace_, o->name);
        struct part *p = j < c->n_parts ? c->parts[j] : NULL;
        if (!p || strcmp(p->uid, o->uid) != 0 || p->generation != o->generation)
            continue; /* not applied yet */
        char *json = NULL;
        rc = status_of(c, p, o, now_ms, &json, reterr);
        if (rc != CMA_OK || !json)
            continue;
        v[k] = (struct cma_metricrule_ctl_status){strdup(o->namespace_), strdup(o->name), json};
        if (!v[k++].namespace_ || !v[k - 1].name)
            rc = cma_err_set(reterr, CMA_ERR_NOMEM, "out of memory");
    }
    pthread_mutex_unlock(&c->mu);
    if (rc != CMA_OK) {
        cma_metricrule_ctl_statuses_free(v, k);
        return rc;
    }
    *ret = v;
    *ret_n = k;
    return CMA_OK;
}

void cma_metricrule_ctl_statuses_free(struct cma_metricrule_ctl_status *s, size_t n)
{
    for (size_t i = 0; s && i < n; i++) {
        free(s[i].namespace_);
        free(s[i].name);
        free(s[i].json);
    }
    free(s);
}

/* What a write's answer means for the part it was for (under the lock). */
static void record_write(struct cma_metricrule_ctl *c, const struct cma_metricrule_ctl_status *s,
                         const char *rv, enum cma_errc rc, enum cma_metricrule_write w)
{
    size_t j = part_index(c, s->namespace_, s->name);
    if (j == c->n_parts)
        return;
    struct part *p = c->parts[j];
    char **slot = rc == CMA_ERR_KUBE_ERROR                          ? &p->refused
                  : rc == CMA_OK && w == CMA_METRICRULE_WRITE_DONE  ? &p->written
                  : rc == CMA_OK && w == CMA_METRICRULE_WRITE_STALE ? &p->stale_rv
                                                                    : NULL;
    if (!slot)
        return;
    char *v = strdup(slot == &p->stale_rv ? rv : s->json);
    if (v) {
        free(*slot);
        *slot = v;
    }
}

/* ---- the namespace selector ------------------------------------------------------------------ */

static void names_free(char **v, size_t n)
{
    for (size_t i = 0; v && i < n; i++)
        free(v[i]);
    free(v);
}

/* The namespaces the selector allows now: from the watch cache of Namespaces while it is synced,
 * else (its watch refused, or not listed yet) through a live LIST with the selector when the
 * controller has a kube client. *synced: the answer is complete. */
static enum cma_errc allowed_now(const struct cma_metricrule_ctl *c, char ***names, size_t *k,
                                 bool *synced, struct cma_err *reterr)
{
    *synced = c->cfg.namespaces && cma_objcache_is_synced(c->cfg.namespaces);
    if (*synced)
        return cma_objcache_list_names(c->cfg.namespaces, NULL, c->cfg.ns_selector, names, k,
                                       reterr);
    if (!c->kube)
        return CMA_OK;
    struct cma_buf text;
    cma_buf_init(&text, 64 * 1024);
    enum cma_errc rc = cma_selector_format(c->cfg.ns_selector, &text);
    if (rc == CMA_OK)
        rc = cma_kube_list_names(c->kube, "", "v1", "namespaces", NULL, cma_buf_str(&text), names,
                                 k, reterr);
    else
        cma_err_set(reterr, rc, "the namespace selector does not fit");
    cma_buf_done(&text);
    *synced = rc == CMA_OK;
    return rc;
}

enum cma_errc cma_metricrule_ctl_recheck_namespaces(struct cma_metricrule_ctl *c,
                                                    const struct cma_metricrule *objs, size_t n,
                                                    struct cma_err *reterr)
{
    if (!c->selecting)
        return CMA_OK;
    char **names = NULL;
    size_t k = 0;
    bool synced = false;
    enum cma_errc rc = allowed_now(c, &names, &k, &synced, reterr);
    if (rc != CMA_OK)
        return rc;
    if (k)
        qsort(names, k, sizeof(char *), cmp_str);
    pthread_mutex_lock(&c->mu);
    bool same = synced == c->ns_synced && k == c->n_allowed;
    for (size_t i = 0; same && i < k; i++)
        same = strcmp(names[i], c->allowed[i]) == 0;
    if (!same) {
        names_free(c->allowed, c->n_allowed);
        c->allowed = names;
        c->n_allowed = k;
        c->ns_synced = synced;
        names = NULL;
        cma_log_info("metric rules: %zu namespaces match --metric-rules-namespace-selector", k);
    }
    pthread_mutex_unlock(&c->mu);
    names_free(names, k);
    return same ? CMA_OK : cma_metricrule_ctl_update(c, objs, n, reterr);
}

/* ---- the status thread --------------------------------------------------------------------- */

static const char *rv_of(const struct cma_metricrule *objs, size_t n,
                         const struct cma_metricrule_ctl_status *s)
{
    for (size_t i = 0; i < n; i++)
        if (strcmp(objs[i].namespace_, s->namespace_) == 0 && strcmp(objs[i].name, s->name) == 0)
            return objs[i].resource_version;
    return "";
}

/* Writes the statuses; *backoff_ms doubles while the API is unreachable, else 0. */
static void write_statuses(struct cma_metricrule_ctl *c, const struct cma_metricrule *objs,
                           size_t n, int64_t *backoff_ms)
{
    struct cma_err err;
    cma_err_clear(&err);
    struct cma_metricrule_ctl_status *v = NULL;
    size_t k = 0;
    if (cma_metricrule_ctl_statuses(c, objs, n, cma_clock_wall_ms(), &v, &k, &err) != CMA_OK) {
        cma_log_error("metric rules: cannot build the statuses: %s", err.msg);
        return;
    }
    int64_t prev = *backoff_ms;
    *backoff_ms = 0;
    for (size_t i = 0; i < k; i++) {
        enum cma_metricrule_write w = CMA_METRICRULE_WRITE_DONE;
        enum cma_errc rc =
            cma_metricrule_status_write(c->kube, v[i].namespace_, v[i].name, v[i].json, &w, &err);
        if (rc == CMA_ERR_KUBE_ERROR)
            cma_log_error("metric rules: the status of MetricRule %s/%s was refused (not "
                          "written again until it changes): %s",
                          v[i].namespace_, v[i].name, err.msg);
        else if (rc != CMA_OK)
            cma_log_warn("metric rules: cannot write the status of MetricRule %s/%s: %s",
                         v[i].namespace_, v[i].name, err.msg);
        else
            cma_log_v(2, "metric rules: status of MetricRule %s/%s written (%s)", v[i].namespace_,
                      v[i].name, w == CMA_METRICRULE_WRITE_DONE ? "stored" : "not stored");
        pthread_mutex_lock(&c->mu);
        record_write(c, &v[i], rv_of(objs, n, &v[i]), rc, w);
        pthread_mutex_unlock(&c->mu);
        if (rc != CMA_OK && rc != CMA_ERR_KUBE_ERROR) {
            *backoff_ms = prev ? prev * 2 : 1000;
            break;
        }
    }
    cma_metricrule_ctl_statuses_free(v, k);
}

static void status_pass(struct cma_metricrule_ctl *c, int64_t *backoff_ms)
{
    struct cma_err err;
    cma_err_clear(&err);
    struct cma_metricrule *objs = NULL;
    size_t n = 0;
    if (cma_metricrule_watch_snapshot(c->watch, &objs, &n, &err) != CMA_OK) {
        cma_log_error("metric rules: %s", err.msg);
        return;
    }
    if (cma_metricrule_ctl_recheck_namespaces(c, objs, n, &err) != CMA_OK)
        cma_log_error("metric rules: the namespace selector: %s", err.msg);
    struct cma_catalog *cat = cma_catalog_store_get(c->cfg.store);
    bool current = false;
    if (cat && cma_metricrule_ctl_observe(c, cat, &current, &err) != CMA_OK)
        cma_log_error("metric rules: reading the catalog: %s", err.msg);
    cma_catalog_unref(cat);
    int64_t prev = *backoff_ms;
    if (cma_metricrule_watch_is_synced(c->watch))
        write_statuses(c, objs, n, backoff_ms);
    if (*backoff_ms > 30000)
        *backoff_ms = 30000;
    if (*backoff_ms && prev != *backoff_ms)
        cma_log_v(2, "metric rules: status writes retried in %lldms", (long long)*backoff_ms);
    cma_metricrules_free(objs, n);
}

static void *status_main(void *arg)
{
    struct cma_metricrule_ctl *c = arg;
    int64_t backoff_ms = 0;
    pthread_mutex_lock(&c->mu);
    while (!c->stop) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        int64_t wait_ms = backoff_ms ? backoff_ms : 1000;
        ts.tv_sec += (time_t)(wait_ms / 1000);
        ts.tv_nsec += (long)(wait_ms % 1000) * 1000000L;
        if (ts.tv_nsec >= 1000000000L) {
            ts.tv_sec++;
            ts.tv_nsec -= 1000000000L;
        }
        while (!c->kick && !c->stop && pthread_cond_timedwait(&c->cv, &c->mu, &ts) == 0)
            ;
        if (c->stop)
            break;
        c->kick = false;
        pthread_mutex_unlock(&c->mu);
        status_pass(c, &backoff_ms);
        pthread_mutex_lock(&c->mu);
    }
    pthread_mutex_unlock(&c->mu);
    return NULL;
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
    pthread_cond_init(&c->cv, NULL);
    c->selecting = cfg->ns_selector && !cma_selector_is_empty(cfg->ns_selector);
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
    pthread_mutex_lock(&c->mu); /* the status thread looks at once */
    c->kick = true;
    pthread_cond_signal(&c->cv);
    pthread_mutex_unlock(&c->mu);
}

enum cma_errc cma_metricrule_ctl_start(struct cma_metricrule_ctl *c, struct cma_kube *kube,
                                       struct cma_err *reterr)
{
    struct cma_metricrule_observer obs = {.on_event = on_watch_event, .ctx = c};
    c->kube = kube; /* for the status thread: writes, and live LISTs of Namespaces */
    enum cma_errc rc = cma_metricrule_watch_new(kube, &obs, &c->watch, reterr);
    if (rc == CMA_OK)
        rc = cma_metricrule_watch_start(c->watch, reterr);
    if (rc != CMA_OK || !c->cfg.store)
        return rc;
    if (pthread_create(&c->thread, NULL, status_main, c) != 0)
        return cma_err_set(reterr, CMA_ERR_INTERNAL, "cannot start the status thread");
    c->thread_started = true;
    return CMA_OK;
}

void cma_metricrule_ctl_free(struct cma_metricrule_ctl *c)
{
    if (!c)
        return;
    if (c->thread_started) {
        pthread_mutex_lock(&c->mu);
        c->stop = true;
        pthread_cond_signal(&c->cv);
        pthread_mutex_unlock(&c->mu);
        pthread_join(c->thread, NULL);
    }
    cma_metricrule_watch_free(c->watch); /* stops the thread: no update runs after this */
    parts_free(c->parts, c->n_parts);
    cma_ruleset_unref(c->current);
    cma_ruleset_unref(c->config);
    names_free(c->allowed, c->n_allowed);
    pthread_cond_destroy(&c->cv);
    pthread_mutex_destroy(&c->mu);
    free(c->pol);
    free(c->ns_label);
    free(c);
}
