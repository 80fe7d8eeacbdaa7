/* metricrule.c: a MetricRule's spec → a compiled ruleset plus the checks a team's rules need
 * (metricrule.h).
 *
 * DESIGN: the spec is JSON. Its `backend` keys are taken out first (the config loader checks
 * backend names against the config file's backends:, which a MetricRule cannot see; they are
 * kept per rule for whoever serves it), and the rest is re-encoded as one line of JSON and fed to
 * the config loader and rule compiler exactly as a config file would be, so a MetricRule
 * accepts and refuses what the config file does. Their errors carry a position in that line:
 * the position-keeping YAML tree of the same text (yamldoc.c) turns it back into the spec field
 * it falls in. Templates and seriesQuery are parsed on their own first, so their errors carry
 * the line:column inside the field's text. Then each metricsQuery is rendered with
 * representative data (a series name, a namespace and pod matcher, grouping by pod) and parsed
 * as PromQL, and every query goes through the namespace enforcer: a rule whose text does not
 * parse or cannot be enforced is refused. */
#include "cma/metricrule.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cma/buf.h"
#include "cma/config.h"
#include "cma/promql.h"
#include "cma/rule.h"
#include "cma/template.h"
#include "cma/yamldoc.h"

#define SPEC_FILE "spec"
#define REP_SERIES "series_name"
#define REP_PODS "p-1|p-2"

static const char *const sections[2] = {"rules", "externalRules"};

static void free_strs(char **v, size_t n)
{
    for (size_t i = 0; v && i < n; i++)
        free(v[i]);
    free(v);
}

void cma_metricrule_compiled_free(struct cma_metricrule_compiled *c)
{
    if (!c)
        return;
    size_t nr = c->rules ? c->rules->n_rules : 0;
    size_t ne = c->rules ? c->rules->n_external_rules : 0;
    free_strs(c->rule_backends, c->n_rule_backends);
    free_strs(c->external_backends, c->n_external_backends);
    free_strs(c->rule_series, nr);
    free_strs(c->rule_queries, nr);
    free_strs(c->external_series, ne);
    free_strs(c->external_queries, ne);
    cma_ruleset_free(c->rules);
    free(c);
}

/* ---- the spec's own checks, before the config loader --------------------------------------- */

/* Takes each rule's string `backend` out of section `sec` into *ret (one slot per item). */
static enum cma_errc take_backends(json_t *spec, const char *sec, char ***ret, size_t *ret_n,
                                   struct cma_err *reterr)
{
    json_t *items = json_object_get(spec, sec);
    size_t n = json_is_array(items) ? json_array_size(items) : 0;
    char **names = calloc(n + 1, sizeof(*names));
    if (!names)
        return cma_err_set(reterr, CMA_ERR_NOMEM, "out of memory");
    for (size_t i = 0; i < n; i++) {
        json_t *item = json_array_get(items, i);
        const char *b = json_string_value(json_object_get(item, "backend"));
        if (!b)
            continue;
        names[i] = strdup(b);
        if (!names[i]) {
            free_strs(names, n);
            return cma_err_set(reterr, CMA_ERR_NOMEM, "out of memory");
        }
        json_object_del(item, "backend");
    }
    *ret = names;
    *ret_n = n;
    return CMA_OK;
}

/* "spec.<sec>[i].<field>: line:column: message" from an error inside the field's text. */
static enum cma_errc field_err(struct cma_err *reterr, const struct cma_err *inner, const char *sec,
                               size_t i, const char *field)
{
    if (inner->line > 0)
        return cma_err_set(reterr, inner->code, "spec.%s[%zu].%s: %u:%u: %s", sec, i, field,
                           inner->line, inner->column, inner->msg);
    return cma_err_set(reterr, inner->code, "spec.%s[%zu].%s: %s", sec, i, field, inner->msg);
}

/* Parses metricsQuery (template) and seriesQuery (PromQL) of one rule item as they are. */
static enum cma_errc precheck_item(const json_t *item, const char *sec, size_t i,
                                   struct cma_err *reterr)
{
    struct cma_err inner = {0};
    const char *mq = json_string_value(json_object_get(item, "metricsQuery"));
    if (mq) {
        struct cma_template *t = NULL;
        bool go_only = false;
        if (cma_template_parse_go(mq, strlen(mq), &t, &go_only, &inner) != CMA_OK) {
            if (go_only)
                cma_err_prefix(&inner, "not supported in a MetricRule: ");
            return field_err(reterr, &inner, sec, i, "metricsQuery");
        }
        cma_template_free(t);
    }
    const char *sq = json_string_value(json_object_get(item, "seriesQuery"));
    if (sq && *sq) {
        struct cma_promql *q = NULL;
        if (cma_promql_parse(sq, strlen(sq), &q, &inner) != CMA_OK)
            return field_err(reterr, &inner, sec, i, "seriesQuery");
        cma_promql_free(q);
    }
    return CMA_OK;
}

static enum cma_errc precheck(const json_t *spec, struct cma_err *reterr)
{
    for (size_t s = 0; s < 2; s++) {
        const json_t *items = json_object_get(spec, sections[s]);
        for (size_t i = 0; json_is_array(items) && i < json_array_size(items); i++) {
            enum cma_errc rc = precheck_item(json_array_get(items, i), sections[s], i, reterr);
            if (rc != CMA_OK)
                return rc;
        }
    }
    return CMA_OK;
}

/* ---- positions in the re-encoded spec → field paths ---------------------------------------- */

static bool before(unsigned l1, unsigned c1, unsigned l2, unsigned c2)
{
    return l1 < l2 || (l1 == l2 && c1 < c2);
}

static bool node_holds(const struct cma_ynode *n, unsigned line, unsigned col)
{
    return !before(line, col, n->line, n->column) && before(line, col, n->end_line, n->end_column);
}

/* Appends to path the keys and indexes down to the deepest node of n holding line:col. */
static void path_at(const struct cma_ynode *n, unsigned line, unsigned col, struct cma_buf *path)
{
    if (n->kind == CMA_YNODE_MAPPING) {
        for (size_t i = 0; i < n->n_pairs; i++) {
            const struct cma_ypair *p = &n->pairs[i];
            bool in_key = node_holds(p->key, line, col);
            if (!in_key && !node_holds(p->value, line, col))
                continue;
            if (cma_buf_appendc(path, '.') != CMA_OK || cma_buf_appends(path, p->key->scalar))
                return;
            if (!in_key)
                path_at(p->value, line, col, path);
            return;
        }
    } else if (n->kind == CMA_YNODE_SEQUENCE) {
        for (size_t i = 0; i < n->n_items; i++) {
            if (!node_holds(n->items[i], line, col))
                continue;
            char idx[32];
            snprintf(idx, sizeof(idx), "[%zu]", i);
            if (cma_buf_appends(path, idx) == CMA_OK)
                path_at(n->items[i], line, col, path);
            return;
        }
    }
}

/* Re-sets an error positioned in the re-encoded text as "spec.<field>: <message>". */
static enum cma_errc at_field(const char *text, size_t len, const struct cma_err *inner,
                              struct cma_err *reterr)
{
    struct cma_buf path;
    cma_buf_init(&path, 4096);
    enum cma_errc rc = cma_buf_appends(&path, "spec");
    struct cma_ydoc *doc = NULL;
    if (rc == CMA_OK && inner->line > 0 &&
        cma_ydoc_parse(SPEC_FILE, text, len, &doc, NULL) == CMA_OK && cma_ydoc_root(doc))
        path_at(cma_ydoc_root(doc), inner->line, inner->column, &path);
    cma_ydoc_free(doc);
    rc = cma_err_set(reterr, inner->code == CMA_OK ? CMA_ERR_RULE : inner->code, "%s: %s",
                     path.ptr ? path.ptr : "spec", inner->msg);
    cma_buf_done(&path);
    return rc;
}

/* A rule the compiler loaded but could not serve ("spec:L:C: message") is refused here. */
static enum cma_errc refuse_problem(const char *text, size_t len, const struct cma_rule *r,
                                    struct cma_err *reterr)
{
    struct cma_err inner = {.code = CMA_ERR_RULE};
    unsigned line = 0, col = 0;
    int off = 0;
    if (sscanf(r->problem, SPEC_FILE ":%u:%u: %n", &line, &col, &off) == 2 && off > 0) {
        inner.line = line;
        inner.column = col;
    }
    snprintf(inner.msg, sizeof(inner.msg), "%s", r->problem + off);
    return at_field(text, len, &inner, reterr);
}

/* ---- the rendered queries through the enforcer -------------------------------------------- */

/* Parses text, adds label="ns", prints the result into *ret. */
static enum cma_errc enforce_text(const char *text, size_t len, const char *label, const char *ns,
                                  char **ret, struct cma_err *reterr)
{
    struct cma_promql *q = NULL;
    enum cma_errc rc = cma_promql_parse(text, len, &q, reterr);
    if (rc == CMA_OK)
        rc = cma_promql_enforce(q, label, ns, NULL, reterr);
    struct cma_buf out;
    cma_buf_init(&out, CMA_PROMQL_MAX_BYTES * 2);
    if (rc == CMA_OK)
        rc = cma_promql_print(q, &out);
    if (rc == CMA_OK && !(*ret = strdup(out.ptr ? out.ptr : "")))
        rc = CMA_ERR_NOMEM;
    if (rc != CMA_OK && reterr && reterr->code == CMA_OK)
        cma_err_set(reterr, rc, "%s", cma_errc_meaning(rc));
    cma_buf_done(&out);
    cma_promql_free(q);
    return rc;
}

/* Renders the metricsQuery of r with representative data for namespace ns. */
static enum cma_errc render_rep(const struct cma_rule *r, const char *label, const char *ns,
                                struct cma_buf *out, struct cma_err *reterr)
{
    char matchers[512];
    snprintf(matchers, sizeof(matchers), "%s=\"%s\",pod=~\"" REP_PODS "\"", label, ns);
    struct cma_tfield values[] = {
        {label, cma_tv_string(ns, strlen(ns))},
        {"pod", cma_tv_string(REP_PODS, strlen(REP_PODS))},
    };
    struct cma_tfield group[] = {{NULL, cma_tv_string("pod", 3)}};
    struct cma_tfield fields[] = {
        {"Series", cma_tv_string(REP_SERIES, strlen(REP_SERIES))},
        {"LabelMatchers", cma_tv_string(matchers, strlen(matchers))},
        {"LabelValuesByName", cma_tv_list(CMA_TV_MAP, values, 2)},
        {"GroupBy", cma_tv_string("pod", 3)},
        {"GroupBySlice", cma_tv_list(CMA_TV_SLICE, group, 1)},
    };
    struct cma_tvalue dot = cma_tv_list(CMA_TV_STRUCT, fields, 5);
    return cma_template_render(r->metrics_query, &dot, out, reterr);
}

static enum cma_errc check_rule(const struct cma_rule *r, const char *sec, const char *label,
                                const char *ns, char **ret_series, char **ret_query,
                                struct cma_err *reterr)
{
    struct cma_err inner = {0};
    const char *sq = r->series_query ? r->series_query : "";
    if (enforce_text(sq, strlen(sq), label, ns, ret_series, &inner) != CMA_OK)
        return field_err(reterr, &inner, sec, r->index, "seriesQuery");
    struct cma_buf text;
    cma_buf_init(&text, CMA_PROMQL_MAX_BYTES);
    enum cma_errc rc = render_rep(r, label, ns, &text, &inner);
    if (rc != CMA_OK) {
        cma_err_prefix(&inner, "rendering with representative data: ");
        field_err(reterr, &inner, sec, r->index, "metricsQuery");
    } else if (enforce_text(text.ptr ? text.ptr : "", text.len, label, ns, ret_query, &inner) !=
               CMA_OK) {
        char q[CMA_YDOC_QUOTE_MAX];
        cma_ydoc_quote(text.ptr ? text.ptr : "", text.len, q, sizeof(q));
        rc = cma_err_set(reterr, inner.code, "spec.%s[%zu].metricsQuery: rendered as %s: %u:%u: %s",
                         sec, r->index, q, inner.line, inner.column, inner.msg);
    }
    cma_buf_done(&text);
    return rc;
}

static enum cma_errc check_all(struct cma_metricrule_compiled *c, const char *text, size_t len,
                               const char *label, const char *ns, struct cma_err *reterr)
{
    const struct cma_ruleset *rs = c->rules;
    if (!rs)
        return cma_err_set(reterr, CMA_ERR_INTERNAL, "spec: no ruleset");
    size_t nr = rs->n_rules, ne = rs->n_external_rules;
    c->rule_series = calloc(nr + 1, sizeof(char *));
    c->rule_queries = calloc(nr + 1, sizeof(char *));
    c->external_series = calloc(ne + 1, sizeof(char *));
    c->external_queries = calloc(ne + 1, sizeof(char *));
    if (!c->rule_series || !c->rule_queries || !c->external_series || !c->external_queries)
        return cma_err_set(reterr, CMA_ERR_NOMEM, "out of memory");
    enum cma_errc rc = CMA_OK;
    for (size_t i = 0; rc == CMA_OK && i < nr + ne; i++) {
        const struct cma_rule *r = i < nr ? &rs->rules[i] : &rs->external_rules[i - nr];
        if (r->problem)
            return refuse_problem(text, len, r, reterr);
        rc = i < nr ? check_rule(r, sections[0], label, ns, &c->rule_series[i], &c->rule_queries[i],
                                 reterr)
                    : check_rule(r, sections[1], label, ns, &c->external_series[i - nr],
                                 &c->external_queries[i - nr], reterr);
    }
    return rc;
}

/* ---- the whole ----------------------------------------------------------------------------- */

/* Loads and compiles the re-encoded spec into c->rules. */
static enum cma_errc compile_text(struct cma_metricrule_compiled *c, const char *text, size_t len,
                                  struct cma_err *reterr)
{
    struct cma_err inner = {0};
    struct cma_config *cfg = NULL;
    if (cma_config_load_string(SPEC_FILE, text, len, &cfg, &inner) != CMA_OK)
        return at_field(text, len, &inner, reterr);
    if (cfg->resource_rules || cfg->n_backends > 0) {
        cma_config_free(cfg);
        return cma_err_set(reterr, CMA_ERR_RULE,
                           "spec: only rules and externalRules may be set in a MetricRule");
    }
    if (cma_ruleset_compile(cfg, &c->rules, &inner) != CMA_OK) {
        cma_config_free(cfg);
        return at_field(text, len, &inner, reterr);
    }
    cma_ruleset_own_config(c->rules, cfg);
    return CMA_OK;
}

static enum cma_errc compile_spec(json_t *spec, const char *ns, const char *label,
                                  struct cma_metricrule_compiled *c, struct cma_err *reterr)
{
    enum cma_errc rc =
        take_backends(spec, sections[0], &c->rule_backends, &c->n_rule_backends, reterr);
    if (rc == CMA_OK)
        rc = take_backends(spec, sections[1], &c->external_backends, &c->n_external_backends,
                           reterr);
    if (rc == CMA_OK)
        rc = precheck(spec, reterr);
    if (rc != CMA_OK)
        return rc;
    char *text = json_dumps(spec, JSON_COMPACT | JSON_PRESERVE_ORDER);
    if (!text)
        return cma_err_set(reterr, CMA_ERR_NOMEM, "out of memory");
    size_t len = strlen(text);
    rc = compile_text(c, text, len, reterr);
    if (rc == CMA_OK)
        rc = check_all(c, text, len, label, ns, reterr);
    free(text);
    return rc;
}

enum cma_errc cma_metricrule_compile(const char *namespace_, const char *ns_label,
                                     const char *spec_json, size_t len,
                                     struct cma_metricrule_compiled **ret, struct cma_err *reterr)
{
    json_error_t jerr = {0};
    json_t *spec = json_loadb(spec_json, len, JSON_REJECT_DUPLICATES, &jerr);
    if (!json_is_object(spec)) {
        json_decref(spec);
        return cma_err_set(reterr, CMA_ERR_RULE, "spec: not a JSON object%s%s",
                           jerr.text[0] ? ": " : "", jerr.text);
    }
    struct cma_metricrule_compiled *c = calloc(1, sizeof(*c));
    if (!c) {
        json_decref(spec);
        return cma_err_set(reterr, CMA_ERR_NOMEM, "out of memory");
    }
    enum cma_errc rc = compile_spec(spec, namespace_, ns_label, c, reterr);
    json_decref(spec);
    if (rc != CMA_OK) {
        cma_metricrule_compiled_free(c);
        return rc;
    }
    *ret = c;
    return CMA_OK;
}
