/* rule.c: compiles a loaded config into an immutable ruleset: naming, resource mapping and the
 * metricsQuery template of each custom and external rule, and the resourceRules templates.
 * Every compile error carries the position of the offending config value. Each rule also
 * records the backend it names (`backend: NAME`); cma_ruleset_bind_backends() binds the names to
 * main's backend table by name (with each backend's query-length limit), before the ruleset is
 * shared. A rule with maxSampleAge also gets the template its data's age is measured with.
 *
 * DESIGN: what prometheus-adapter refuses at start-up is an error here too; what it loads but
 * cannot serve loads here with a warning ("file:line:column: ..." for main to log, fatal with
 * --strict-config), so one questionable rule never takes the others down:
 * - a rule it would list but whose requests fail (an external rule that must add the namespace
 *   but names no namespace label, an empty metricsQuery, a metricsQuery using Go template
 *   features this engine lacks) keeps its warning as `problem`, and cma_rule_servable() answers
 *   its requests with it;
 * - an empty seriesQuery (upstream: every relist fails) leaves the rule out of discovery;
 * - rules that can never name an object, the `$1_per_second` trap, missing resourceRules parts
 *   and the config's own warnings (an ignored second YAML document) are warnings only. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "cma/backend.h"
#include "cma/config.h"
#include "cma/regex.h"
#include "cma/rule.h"
#include "cma/template.h"
#include "rules_internal.h"

enum cma_errc cma_rules_err_at(struct cma_err *reterr, const struct cma_config_str *s,
                               const struct cma_err *inner, const char *what)
{
    unsigned column = s->pos.column;
    if (s->plain && inner->column > 0 && inner->line <= 1)
        column = s->pos.column + inner->column - 1;
    return cma_err_set_at(reterr, inner->code, s->pos.file, s->pos.line, column, "%s%s", what,
                          inner->msg);
}

static enum cma_errc push_warning(struct cma_ruleset *rs, const char *line)
{
    char **w = realloc(rs->warnings, (rs->n_warnings + 1) * sizeof(*w));
    if (!w)
        return CMA_ERR_NOMEM;
    rs->warnings = w;
    w[rs->n_warnings] = strdup(line);
    if (!w[rs->n_warnings])
        return CMA_ERR_NOMEM;
    rs->n_warnings++;
    return CMA_OK;
}

/* Adds "file:line:column: <message>" to the warnings; with `rule`, it is also the rule's
 * problem (its requests fail with it). */
static enum cma_errc add_warning(struct cma_ruleset *rs, struct cma_rule *rule,
                                 const struct cma_pos *pos, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

static enum cma_errc add_warning(struct cma_ruleset *rs, struct cma_rule *rule,
                                 const struct cma_pos *pos, const char *fmt, ...)
{
    char msg[1024], line[1400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    snprintf(line, sizeof(line), "%s:%u:%u: %s", pos->file, pos->line, pos->column, msg);
    enum cma_errc rc = push_warning(rs, line);
    if (rc == CMA_OK && rule && !rule->problem && !(rule->problem = strdup(line)))
        rc = CMA_ERR_NOMEM;
    return rc;
}

/* One binding: by name (NULL: the flags' backend, index 0). */
static enum cma_errc bind_one(struct cma_rule_backend *rb, const char *const *names,
                              const struct cma_backend *queries, const size_t *max_query_bytes,
                              size_t n, struct cma_err *reterr)
{
    static const struct cma_pos nowhere = {"", 0, 0};
    const struct cma_pos *pos = rb->pos ? rb->pos : &nowhere;
    for (size_t i = 0; i < n; i++)
        if ((!rb->name && i == 0) || (rb->name && names[i] && strcmp(rb->name, names[i]) == 0)) {
            rb->index = i;
            rb->queries = &queries[i];
            rb->max_query_bytes = max_query_bytes ? max_query_bytes[i] : 0;
            return CMA_OK;
        }
    return cma_err_set_at(reterr, CMA_ERR_CONFIG_VALUE, pos->file, pos->line, pos->column,
                          "backend \"%s\" is not one of the backends this process started "
                          "with: backends are created at start-up, restart to add one",
                          rb->name ? rb->name : "(--prometheus-url)");
}

enum cma_errc cma_ruleset_bind_backends(struct cma_ruleset *rs, const char *const *names,
                                        const struct cma_backend *queries,
                                        const size_t *max_query_bytes, size_t n,
                                        struct cma_err *reterr)
{
    enum cma_errc rc = CMA_OK;
    const size_t *lim = max_query_bytes;
    for (size_t i = 0; rc == CMA_OK && i < rs->n_rules; i++)
        rc = bind_one(&rs->rules[i].backend, names, queries, lim, n, reterr);
    for (size_t i = 0; rc == CMA_OK && i < rs->n_external_rules; i++)
        rc = bind_one(&rs->external_rules[i].backend, names, queries, lim, n, reterr);
    if (rc == CMA_OK)
        rc = bind_one(&rs->resource_backend, names, queries, lim, n, reterr);
    return rc;
}

enum cma_errc cma_rule_servable(const struct cma_rule *rule, struct cma_err *reterr)
{
    if (!rule->problem)
        return CMA_OK;
    return cma_err_set(reterr, CMA_ERR_RULE, "the rule of this metric cannot be served: %s",
                       rule->problem);
}

static enum cma_errc parse_template(const struct cma_config_str *s, const char *what,
                                    struct cma_template **ret, struct cma_err *reterr)
{
    struct cma_err inner;
    cma_err_clear(&inner);
    const char *text = s->set && s->s ? s->s : "";
    if (cma_template_parse(text, strlen(text), ret, &inner) != CMA_OK)
        return cma_rules_err_at(reterr, s, &inner, what);
    return CMA_OK;
}

/* metricsQuery: a syntax error stops the load, as upstream. Text Go's text/template accepts but
 * this engine cannot render (define, template, block, call) loads, as upstream, with a warning
 * that is also the rule's problem; an empty template stands in for it. */
static enum cma_errc parse_metrics_query(struct cma_ruleset *rs, struct cma_rule *rule,
                                         const char *section, struct cma_err *reterr)
{
    const struct cma_config_str *s = &rule->cfg->metrics_query;
    const char *text = s->set && s->s ? s->s : "";
    struct cma_err inner, at;
    cma_err_clear(&inner);
    cma_err_clear(&at);
    bool go_only = false;
    if (cma_template_parse_go(text, strlen(text), &rule->metrics_query, &go_only, &inner) == CMA_OK)
        return CMA_OK;
    cma_rules_err_at(&at, s, &inner, "metricsQuery: ");
    if (!go_only) {
        cma_err_copy(reterr, &at);
        return at.code;
    }
    struct cma_pos pos = {at.file, at.line, at.column};
    enum cma_errc rc = add_warning(rs, rule, &pos,
                                   "%s[%zu]: %s; prometheus-adapter (Go's text/template) loads "
                                   "it, this adapter cannot render it: requests for its metrics "
                                   "fail",
                                   section, rule->index, at.msg);
    if (rc != CMA_OK)
        return cma_err_set(reterr, rc, "out of memory");
    return cma_template_parse("", 0, &rule->metrics_query, reterr);
}

/* True when an override names the namespaces resource (the label used for the namespace). */
static bool can_name_namespace(const struct cma_config_resources *res)
{
    if (res->template_.set && res->template_.s[0])
        return true;
    for (size_t i = 0; i < res->n_overrides; i++) {
        const struct cma_config_override *o = &res->overrides[i];
        const char *r = o->resource.set ? o->resource.s : "";
        bool core = !o->group.set || !o->group.s[0];
        if (core && (strcasecmp(r, "namespace") == 0 || strcasecmp(r, "namespaces") == 0 ||
                     strcasecmp(r, "ns") == 0))
            return true;
    }
    return false;
}

/* Warnings about what a compiled rule can serve (prometheus-adapter loads all of these). */
static enum cma_errc check_servable(struct cma_ruleset *rs, struct cma_rule *rule,
                                    const char *section)
{
    const struct cma_config_rule *cfg = rule->cfg;
    const struct cma_config_resources *res = &cfg->resources;
    enum cma_errc rc = CMA_OK;
    if (!rule->series_query[0]) /* never listed, so never requested: nothing else matters */
        return CMA_OK;
    if (rule->kind == CMA_RULE_EXTERNAL && rule->namespaced && !can_name_namespace(res))
        rc = add_warning(rs, rule, &cfg->pos,
                         "externalRules[%zu]: resources.namespaced is true (the default) but no "
                         "override or template names the namespace label, so requests for its "
                         "metrics fail; add `resources: {overrides: {namespace: {resource: "
                         "namespace}}}` or set `resources.namespaced: false`",
                         rule->index);
    if (rc == CMA_OK && (!cfg->metrics_query.set || !cfg->metrics_query.s[0]))
        rc = add_warning(rs, rule, &cfg->pos,
                         "%s[%zu]: metricsQuery is empty: every request for its metrics fails",
                         section, rule->index);
    if (rc == CMA_OK && rule->kind == CMA_RULE_CUSTOM && cma_resmap_is_empty(rule->resmap))
        rc = add_warning(rs, NULL, &res->pos,
                         "rules[%zu]: resources has neither overrides nor a template: no label "
                         "names a Kubernetes object, so the rule serves no metric",
                         rule->index);
    if (rc == CMA_OK && cfg->name_as.set && cma_regex_expand_has_trap(cfg->name_as.s))
        rc = add_warning(rs, NULL, &cfg->name_as.pos,
                         "name.as \"%s\": `$1_...` names the capture group \"1_...\", which does "
                         "not exist, so it expands to \"\" (Go's Expand); write ${1}_... instead",
                         cfg->name_as.s);
    return rc;
}

static enum cma_errc compile_rule(struct cma_ruleset *rs, struct cma_rule *rule,
                                  const struct cma_config_rule *cfg, enum cma_rule_kind kind,
                                  size_t index, struct cma_err *reterr)
{
    const char *section = kind == CMA_RULE_CUSTOM ? "rules" : "externalRules";
    rule->kind = kind;
    rule->index = index;
    rule->cfg = cfg;
    rule->namespaced = cfg->resources.namespaced_set ? cfg->resources.namespaced : true;
    rule->series_query = cfg->series_query.set && cfg->series_query.s ? cfg->series_query.s : "";
    rule->backend.name = cfg->backend.name.set ? cfg->backend.name.s : NULL;
    rule->backend.pos = &cfg->backend.name.pos;
    rule->max_sample_age_ms = cfg->max_sample_age_ms;
    enum cma_errc rc = cma_naming_compile(cfg, &rule->naming, reterr);
    if (rc == CMA_OK && rule->max_sample_age_ms > 0) /* see cma_rule.age_query */
        rc = cma_template_parse(CMA_RULE_AGE_QUERY, strlen(CMA_RULE_AGE_QUERY), &rule->age_query,
                                reterr);
    if (rc == CMA_OK)
        rc = cma_resmap_compile(&cfg->resources, &rule->resmap, reterr);
    if (rc == CMA_OK)
        rc = parse_metrics_query(rs, rule, section, reterr);
    if (rc != CMA_OK)
        return rc;
    if (!rule->series_query[0])
        rc = add_warning(rs, NULL, &cfg->series_query.pos,
                         "%s[%zu]: seriesQuery is empty: the rule is left out of discovery "
                         "(prometheus-adapter sends the empty query and every relist fails)",
                         section, index);
    if (rc == CMA_OK)
        rc = check_servable(rs, rule, section);
    if (rc != CMA_OK)
        return cma_err_set(reterr, rc, "out of memory");
    return CMA_OK;
}

/* Warns about the parts of a resourceRules entry whose absence fails requests (upstream loads
 * them too and fails per request). */
static enum cma_errc check_resource_query(struct cma_ruleset *rs,
                                          const struct cma_config_resource_rule *cfg,
                                          const char *name)
{
    const struct {
        const struct cma_config_str *s;
        const char *key, *effect;
    } parts[] = {
        {&cfg->container_query, "containerQuery", "pod metrics requests fail"},
        {&cfg->node_query, "nodeQuery", "node metrics requests fail"},
        {&cfg->container_label, "containerLabel", "pod metrics requests fail"},
    };
    enum cma_errc rc = CMA_OK;
    for (size_t i = 0; rc == CMA_OK && i < sizeof(parts) / sizeof(parts[0]); i++)
        if (!parts[i].s->set || !parts[i].s->s[0])
            rc = add_warning(rs, NULL, &parts[i].s->pos, "resourceRules.%s.%s is empty: %s", name,
                             parts[i].key, parts[i].effect);
    return rc;
}

static enum cma_errc compile_resource_query(struct cma_ruleset *rs, struct cma_resource_query *q,
                                            const struct cma_config_resource_rule *cfg,
                                            const char *name, struct cma_err *reterr)
{
    char what[64];
    enum cma_errc rc = CMA_OK;
    if (cfg->container_query.set) {
        snprintf(what, sizeof(what), "resourceRules.%s.containerQuery: ", name);
        rc = parse_template(&cfg->container_query, what, &q->container_query, reterr);
    }
    if (rc == CMA_OK && cfg->node_query.set) {
        snprintf(what, sizeof(what), "resourceRules.%s.nodeQuery: ", name);
        rc = parse_template(&cfg->node_query, what, &q->node_query, reterr);
    }
    if (rc == CMA_OK)
        rc = cma_resmap_compile(&cfg->resources, &q->resmap, reterr);
    q->container_label = cfg->container_label.set ? cfg->container_label.s : "";
    if (rc == CMA_OK && check_resource_query(rs, cfg, name) != CMA_OK)
        rc = cma_err_set(reterr, CMA_ERR_NOMEM, "out of memory");
    return rc;
}

static void resource_query_done(struct cma_resource_query *q)
{
    cma_template_free(q->container_query);
    cma_template_free(q->node_query);
    cma_resmap_free(q->resmap);
}

struct cma_ruleset *cma_ruleset_ref(const struct cma_ruleset *rs)
{
    /* The count is the one mutable part of a shared ruleset; every ruleset comes from calloc
     * in cma_ruleset_compile, so writing through the cast is defined. */
    struct cma_ruleset *m = (struct cma_ruleset *)rs;
    if (m)
        atomic_fetch_add(&m->refs, 1);
    return m;
}

void cma_ruleset_unref(const struct cma_ruleset *rs)
{
    cma_ruleset_free((struct cma_ruleset *)rs);
}

void cma_ruleset_own_config(struct cma_ruleset *rs, struct cma_config *cfg)
{
    rs->owned_config = cfg;
}

void cma_ruleset_free(struct cma_ruleset *rs)
{
    if (!rs || atomic_fetch_sub(&rs->refs, 1) != 1)
        return;
    if (rs->release) {
        free(rs->rules);
        free(rs->external_rules);
        rs->release(rs->keep);
        free(rs);
        return;
    }
    struct cma_rule *lists[2] = {rs->rules, rs->external_rules};
    size_t counts[2] = {rs->n_rules, rs->n_external_rules};
    for (int l = 0; l < 2; l++) {
        for (size_t i = 0; i < counts[l]; i++) {
            cma_naming_free(lists[l][i].naming);
            cma_resmap_free(lists[l][i].resmap);
            cma_template_free(lists[l][i].metrics_query);
            cma_template_free(lists[l][i].age_query);
            free(lists[l][i].problem);
        }
        free(lists[l]);
    }
    resource_query_done(&rs->cpu);
    resource_query_done(&rs->memory);
    for (size_t i = 0; i < rs->n_warnings; i++)
        free(rs->warnings[i]);
    free(rs->warnings);
    cma_config_free(rs->owned_config);
    free(rs);
}

enum cma_errc cma_ruleset_new_merged(size_t n_rules, size_t n_external_rules,
                                     void (*release)(void *keep), void *keep,
                                     struct cma_ruleset **ret, struct cma_err *reterr)
{
    struct cma_ruleset *rs = calloc(1, sizeof(*rs));
    struct cma_rule *rules = calloc(n_rules + 1, sizeof(*rules));
    struct cma_rule *ext = calloc(n_external_rules + 1, sizeof(*ext));
    if (!rs || !rules || !ext) {
        free(rs);
        free(rules);
        free(ext);
        return cma_err_set(reterr, CMA_ERR_NOMEM, "out of memory");
    }
    rs->rules = rules;
    rs->n_rules = n_rules;
    rs->external_rules = ext;
    rs->n_external_rules = n_external_rules;
    rs->release = release;
    rs->keep = keep;
    atomic_init(&rs->refs, 1);
    *ret = rs;
    return CMA_OK;
}

enum cma_errc cma_ruleset_compile(const struct cma_config *cfg, struct cma_ruleset **ret,
                                  struct cma_err *reterr)
{
    struct cma_ruleset *rs = calloc(1, sizeof(*rs));
    if (!rs)
        return cma_err_set(reterr, CMA_ERR_NOMEM, "out of memory");
    atomic_init(&rs->refs, 1);
    rs->rules = calloc(cfg->n_rules + 1, sizeof(*rs->rules));
    rs->external_rules = calloc(cfg->n_external_rules + 1, sizeof(*rs->external_rules));
    if (!rs->rules || !rs->external_rules) {
        cma_ruleset_free(rs);
        return cma_err_set(reterr, CMA_ERR_NOMEM, "out of memory");
    }
    enum cma_errc rc = CMA_OK;
    for (size_t i = 0; rc == CMA_OK && i < cfg->n_warnings; i++)
        if (push_warning(rs, cfg->warnings[i]) != CMA_OK)
            rc = cma_err_set(reterr, CMA_ERR_NOMEM, "out of memory");
    for (size_t i = 0; rc == CMA_OK && i < cfg->n_rules; i++) {
        rc = compile_rule(rs, &rs->rules[i], &cfg->rules[i], CMA_RULE_CUSTOM, i, reterr);
        rs->n_rules = i + 1;
    }
    for (size_t i = 0; rc == CMA_OK && i < cfg->n_external_rules; i++) {
        rc = compile_rule(rs, &rs->external_rules[i], &cfg->external_rules[i], CMA_RULE_EXTERNAL, i,
                          reterr);
        rs->n_external_rules = i + 1;
    }
    if (rc == CMA_OK && cfg->resource_rules) {
        rs->has_resource_rules = true;
        rs->window_ms = cfg->resource_rules->window_ms;
        const struct cma_config_str *b = &cfg->resource_rules->backend.name;
        rs->resource_backend.name = b->set ? b->s : NULL;
        rs->resource_backend.pos = &b->pos;
        rc = compile_resource_query(rs, &rs->cpu, &cfg->resource_rules->cpu, "cpu", reterr);
        if (rc == CMA_OK)
            rc = compile_resource_query(rs, &rs->memory, &cfg->resource_rules->memory, "memory",
                                        reterr);
    }
    if (rc != CMA_OK) {
        cma_ruleset_free(rs);
        return rc;
    }
    *ret = rs;
    return CMA_OK;
}
