/* config.c: the yamldoc node tree → struct cma_config (rules, externalRules, resourceRules),
 * as strict as yaml.v2 UnmarshalStrict into prometheus-adapter's MetricsDiscoveryConfig.
 *
 * DESIGN
 * - The tree is walked once; every mapping is first checked against its list of allowed keys
 *   (unknown key → CMA_ERR_CONFIG_KEY naming the allowed ones), then each field is read by name.
 * - yaml.v2 compatibility: any scalar is accepted where a string is expected (numbers and bools
 *   keep their text), null means "unset", a null resourceRules is absent. A null list item is
 *   the zero value, as yaml.v2 decodes it: an empty rule in rules/externalRules (rules/rule.c
 *   warns about it), a filter without is/isNot in seriesFilters (an error, as upstream).
 *   Duplicate keys are reported by yamldoc; a second YAML document is ignored with a warning.
 * - The result is built in place into a heap struct; on any error the half-built struct is freed
 *   with cma_config_free(), which accepts partial objects. Errors carry the node's position. */
#include "cma/config.h"

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cma/str.h"
#include "cma/yamldoc.h"

struct loader {
    struct cma_config *cfg;
    struct cma_err *reterr;
};

static const char *kind_name(const struct cma_ynode *n)
{
    if (n->kind == CMA_YNODE_MAPPING)
        return "a mapping";
    if (n->kind == CMA_YNODE_SEQUENCE)
        return "a list";
    return n->is_null ? "null" : "a string";
}

static bool is_null(const struct cma_ynode *n)
{
    return !n || (n->kind == CMA_YNODE_SCALAR && n->is_null);
}

static struct cma_pos pos_of(const struct loader *ld, const struct cma_ynode *n)
{
    return (struct cma_pos){.file = ld->cfg->file, .line = n->line, .column = n->column};
}

static enum cma_errc fail_at(struct loader *ld, enum cma_errc code, const struct cma_ynode *n,
                             const char *fmt, ...) __attribute__((format(printf, 4, 5)));

static enum cma_errc fail_at(struct loader *ld, enum cma_errc code, const struct cma_ynode *n,
                             const char *fmt, ...)
{
    char msg[CMA_ERR_MSG_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    return cma_err_set_at(ld->reterr, code, ld->cfg->file, n->line, n->column, "%s", msg);
}

static enum cma_errc fail_nomem(struct loader *ld)
{
    return cma_err_set(ld->reterr, CMA_ERR_NOMEM, "out of memory");
}

static enum cma_errc wrong_kind(struct loader *ld, const struct cma_ynode *n, const char *expected,
                                const char *what)
{
    return fail_at(ld, CMA_ERR_CONFIG_TYPE, n, "expected %s for %s, got %s", expected, what,
                   kind_name(n));
}

/* YAML merge keys (`<<: *base`) are not supported (see yamldoc.h); say so plainly rather than
 * calling "<<" an unknown key. */
static bool is_merge_key(const struct cma_ynode *key)
{
    return key->style == CMA_YSTYLE_PLAIN && strcmp(key->scalar, "<<") == 0;
}

static enum cma_errc merge_key_error(struct loader *ld, const struct cma_ynode *key)
{
    return fail_at(ld, CMA_ERR_CONFIG_KEY, key,
                   "merge keys (<<) are not supported: write the keys out in full");
}

/* Checks that every key of `map` is one of `allowed` (a NULL-terminated list). */
static enum cma_errc check_keys(struct loader *ld, const struct cma_ynode *map,
                                const char *const *allowed)
{
    for (size_t i = 0; i < map->n_pairs; i++) {
        const struct cma_ynode *key = map->pairs[i].key;
        if (is_merge_key(key))
            return merge_key_error(ld, key);
        bool known = false;
        for (const char *const *a = allowed; *a && !known; a++)
            known = strlen(*a) == key->scalar_len && memcmp(*a, key->scalar, key->scalar_len) == 0;
        if (known)
            continue;
        char list[256] = "";
        size_t used = 0;
        for (const char *const *a = allowed; *a; a++) {
            int n =
                snprintf(list + used, sizeof(list) - used, "%s%s", a == allowed ? "" : ", ", *a);
            if (n < 0 || (size_t)n >= sizeof(list) - used)
                break;
            used += (size_t)n;
        }
        char quoted[CMA_YDOC_QUOTE_MAX];
        cma_ydoc_quote(key->scalar, key->scalar_len, quoted, sizeof(quoted));
        return fail_at(ld, CMA_ERR_CONFIG_KEY, key, "unknown key %s (allowed: %s)", quoted, list);
    }
    return CMA_OK;
}

static const struct cma_ypair *find_pair(const struct cma_ynode *map, const char *key)
{
    size_t klen = strlen(key);
    for (size_t i = 0; i < map->n_pairs; i++) {
        const struct cma_ynode *k = map->pairs[i].key;
        if (k->scalar_len == klen && memcmp(k->scalar, key, klen) == 0)
            return &map->pairs[i];
    }
    return NULL;
}

/* Reads map[key] as a string. Absent: unset at the mapping's position; null: unset at the key's
 * position; any other scalar: set, with its text. Lists and mappings are CMA_ERR_CONFIG_TYPE. */
static enum cma_errc read_str(struct loader *ld, const struct cma_ynode *map, const char *key,
                              struct cma_config_str *out)
{
    const struct cma_ypair *pair = find_pair(map, key);
    out->pos = pos_of(ld, pair ? pair->key : map);
    if (!pair || is_null(pair->value))
        return CMA_OK;
    const struct cma_ynode *v = pair->value;
    if (v->kind != CMA_YNODE_SCALAR)
        return wrong_kind(ld, v, "a string", key);
    if (strlen(v->scalar) != v->scalar_len)
        return fail_at(ld, CMA_ERR_CONFIG_VALUE, v, "%s must not contain a NUL character", key);
    out->s = cma_strndup(v->scalar, v->scalar_len);
    if (!out->s)
        return fail_nomem(ld);
    out->set = true;
    out->plain = v->style == CMA_YSTYLE_PLAIN && v->line == v->end_line;
    out->pos = pos_of(ld, v);
    return CMA_OK;
}

/* Returns the value of map[key] unless absent or null. */
static const struct cma_ynode *get_value(const struct cma_ynode *map, const char *key)
{
    const struct cma_ynode *v = cma_ynode_get(map, key);
    return is_null(v) ? NULL : v;
}

/* ---- resources ------------------------------------------------------------------------------ */

static enum cma_errc read_override(struct loader *ld, const struct cma_ypair *pair,
                                   struct cma_config_override *ov)
{
    static const char *const keys[] = {"group", "resource", NULL};
    const struct cma_ynode *label = pair->key, *v = pair->value;
    ov->pos = pos_of(ld, label);
    if (strlen(label->scalar) != label->scalar_len)
        return fail_at(ld, CMA_ERR_CONFIG_VALUE, label,
                       "override labels must not contain a NUL character");
    ov->label = cma_strndup(label->scalar, label->scalar_len);
    if (!ov->label)
        return fail_nomem(ld);
    if (v->kind != CMA_YNODE_MAPPING) {
        char quoted[CMA_YDOC_QUOTE_MAX];
        cma_ydoc_quote(label->scalar, label->scalar_len, quoted, sizeof(quoted));
        /* a null value has no useful position of its own: point at the label */
        return fail_at(ld, CMA_ERR_CONFIG_TYPE, is_null(v) ? label : v,
                       "expected a mapping with group and resource for override %s, got %s", quoted,
                       kind_name(v));
    }
    enum cma_errc rc = check_keys(ld, v, keys);
    if (!rc)
        rc = read_str(ld, v, "group", &ov->group);
    if (!rc)
        rc = read_str(ld, v, "resource", &ov->resource);
    return rc;
}

static enum cma_errc read_overrides(struct loader *ld, const struct cma_ynode *map,
                                    struct cma_config_resources *res)
{
    const struct cma_ynode *v = get_value(map, "overrides");
    if (!v)
        return CMA_OK;
    if (v->kind != CMA_YNODE_MAPPING)
        return wrong_kind(ld, v, "a mapping", "overrides");
    if (v->n_pairs == 0)
        return CMA_OK;
    res->overrides = calloc(v->n_pairs, sizeof(*res->overrides));
    if (!res->overrides)
        return fail_nomem(ld);
    for (size_t i = 0; i < v->n_pairs; i++) {
        if (is_merge_key(v->pairs[i].key))
            return merge_key_error(ld, v->pairs[i].key);
        enum cma_errc rc = read_override(ld, &v->pairs[i], &res->overrides[res->n_overrides++]);
        if (rc)
            return rc;
    }
    return CMA_OK;
}

static enum cma_errc read_namespaced(struct loader *ld, const struct cma_ynode *map,
                                     struct cma_config_resources *res)
{
    const struct cma_ynode *v = get_value(map, "namespaced");
    if (!v)
        return CMA_OK;
    bool b;
    if (!cma_ynode_as_bool(v, &b)) {
        if (v->kind != CMA_YNODE_SCALAR)
            return wrong_kind(ld, v, "true or false", "namespaced");
        char quoted[CMA_YDOC_QUOTE_MAX];
        cma_ydoc_quote(v->scalar, v->scalar_len, quoted, sizeof(quoted));
        return fail_at(ld, CMA_ERR_CONFIG_TYPE, v, "expected true or false for namespaced, got %s",
                       quoted);
    }
    res->namespaced = b;
    res->namespaced_set = true;
    return CMA_OK;
}

/* Reads the `resources` key of `parent` (a rule or a resource rule). */
static enum cma_errc read_resources(struct loader *ld, const struct cma_ynode *parent,
                                    struct cma_config_resources *res)
{
    /* One ResourceMapping type upstream: namespaced is accepted in resource rules as well. */
    static const char *const keys[] = {"overrides", "template", "namespaced", NULL};
    res->namespaced = true;
    const struct cma_ypair *pair = find_pair(parent, "resources");
    res->pos = pos_of(ld, pair ? pair->key : parent);
    res->template_.pos = res->pos;
    if (!pair || is_null(pair->value))
        return CMA_OK;
    const struct cma_ynode *v = pair->value;
    if (v->kind != CMA_YNODE_MAPPING)
        return wrong_kind(ld, v, "a mapping", "resources");
    res->pos = pos_of(ld, v);
    enum cma_errc rc = check_keys(ld, v, keys);
    if (!rc)
        rc = read_overrides(ld, v, res);
    if (!rc)
        rc = read_str(ld, v, "template", &res->template_);
    if (!rc)
        rc = read_namespaced(ld, v, res);
    return rc;
}

/* ---- discovery rules ------------------------------------------------------------------------ */

/* yaml.v2 leaves an empty string as "", and prometheus-adapter tests `!= ""`: an empty is/isNot
 * counts as not given. */
static void unset_if_empty(struct cma_config_str *s)
{
    if (s->set && s->s[0] == '\0') {
        free(s->s);
        s->s = NULL;
        s->set = false;
    }
}

static enum cma_errc read_filter(struct loader *ld, const struct cma_ynode *item,
                                 struct cma_config_filter *f)
{
    static const char *const keys[] = {"is", "isNot", NULL};
    f->pos = pos_of(ld, item);
    if (is_null(item)) /* yaml.v2: the zero RegexFilter, which prometheus-adapter refuses */
        return fail_at(ld, CMA_ERR_CONFIG_VALUE, item,
                       "must have either an `is` or `isNot` expression in a filter");
    if (item->kind != CMA_YNODE_MAPPING)
        return wrong_kind(ld, item, "a mapping (is or isNot)", "each filter in seriesFilters");
    enum cma_errc rc = check_keys(ld, item, keys);
    if (!rc)
        rc = read_str(ld, item, "is", &f->is);
    if (!rc)
        rc = read_str(ld, item, "isNot", &f->is_not);
    if (rc)
        return rc;
    unset_if_empty(&f->is);
    unset_if_empty(&f->is_not);
    if (f->is.set && f->is_not.set) {
        char a[CMA_YDOC_QUOTE_MAX], b[CMA_YDOC_QUOTE_MAX];
        cma_ydoc_quote(f->is.s, strlen(f->is.s), a, sizeof(a));
        cma_ydoc_quote(f->is_not.s, strlen(f->is_not.s), b, sizeof(b));
        return fail_at(ld, CMA_ERR_CONFIG_VALUE, item,
                       "cannot have both an `is` (%s) and `isNot` (%s) expression in a single "
                       "filter",
                       a, b);
    }
    if (!f->is.set && !f->is_not.set)
        return fail_at(ld, CMA_ERR_CONFIG_VALUE, item,
                       "must have either an `is` or `isNot` expression in a filter");
    return CMA_OK;
}

static enum cma_errc read_filters(struct loader *ld, const struct cma_ynode *rule_map,
                                  struct cma_config_rule *rule)
{
    const struct cma_ynode *v = get_value(rule_map, "seriesFilters");
    if (!v)
        return CMA_OK;
    if (v->kind != CMA_YNODE_SEQUENCE)
        return wrong_kind(ld, v, "a list", "seriesFilters");
    if (v->n_items == 0)
        return CMA_OK;
    rule->series_filters = calloc(v->n_items, sizeof(*rule->series_filters));
    if (!rule->series_filters)
        return fail_nomem(ld);
    for (size_t i = 0; i < v->n_items; i++) {
        enum cma_errc rc =
            read_filter(ld, v->items[i], &rule->series_filters[rule->n_series_filters++]);
        if (rc)
            return rc;
    }
    return CMA_OK;
}

static enum cma_errc read_name(struct loader *ld, const struct cma_ynode *rule_map,
                               struct cma_config_rule *rule)
{
    static const char *const keys[] = {"matches", "as", NULL};
    const struct cma_ypair *pair = find_pair(rule_map, "name");
    struct cma_pos pos = pos_of(ld, pair ? pair->key : rule_map);
    rule->name_matches.pos = pos;
    rule->name_as.pos = pos;
    if (!pair || is_null(pair->value))
        return CMA_OK;
    const struct cma_ynode *v = pair->value;
    if (v->kind != CMA_YNODE_MAPPING)
        return wrong_kind(ld, v, "a mapping (matches, as)", "name");
    enum cma_errc rc = check_keys(ld, v, keys);
    if (!rc)
        rc = read_str(ld, v, "matches", &rule->name_matches);
    if (!rc)
        rc = read_str(ld, v, "as", &rule->name_as);
    return rc;
}

static enum cma_errc read_rule(struct loader *ld, const struct cma_ynode *item, const char *list,
                               struct cma_config_rule *rule)
{
    static const char *const keys[] = {"seriesQuery", "seriesFilters", "resources",
                                       "name",        "metricsQuery",  NULL};
    rule->pos = pos_of(ld, item);
    rule->resources.namespaced = true;
    if (is_null(item)) { /* yaml.v2: the zero DiscoveryRule; every value unset, here */
        struct cma_config_str *strs[] = {&rule->series_query, &rule->name_matches, &rule->name_as,
                                         &rule->metrics_query, &rule->resources.template_};
        for (size_t i = 0; i < sizeof(strs) / sizeof(strs[0]); i++)
            strs[i]->pos = rule->pos;
        rule->resources.pos = rule->pos;
        return CMA_OK;
    }
    if (item->kind != CMA_YNODE_MAPPING)
        return fail_at(ld, CMA_ERR_CONFIG_TYPE, item,
                       "expected a mapping for each rule in %s, got %s", list, kind_name(item));
    enum cma_errc rc = check_keys(ld, item, keys);
    if (!rc)
        rc = read_str(ld, item, "seriesQuery", &rule->series_query);
    if (!rc)
        rc = read_filters(ld, item, rule);
    if (!rc)
        rc = read_resources(ld, item, &rule->resources);
    if (!rc)
        rc = read_name(ld, item, rule);
    if (!rc)
        rc = read_str(ld, item, "metricsQuery", &rule->metrics_query);
    return rc;
}

static enum cma_errc read_rules(struct loader *ld, const struct cma_ynode *root, const char *key,
                                struct cma_config_rule **ret, size_t *ret_n)
{
    const struct cma_ynode *v = get_value(root, key);
    if (!v)
        return CMA_OK;
    if (v->kind != CMA_YNODE_SEQUENCE)
        return wrong_kind(ld, v, "a list", key);
    if (v->n_items == 0)
        return CMA_OK;
    *ret = calloc(v->n_items, sizeof(**ret));
    if (!*ret)
        return fail_nomem(ld);
    for (size_t i = 0; i < v->n_items; i++) {
        enum cma_errc rc = read_rule(ld, v->items[i], key, &(*ret)[(*ret_n)++]);
        if (rc)
            return rc;
    }
    return CMA_OK;
}

/* ---- resource rules ------------------------------------------------------------------------- */

/* Prometheus model.ParseDuration: "0", or [Ny][Nw][Nd][Nh][Nm][Ns][Nms] with at least one part,
 * in that order, integers only; the total must fit an int64 count of nanoseconds. */
static bool parse_prom_duration(const char *s, long long *ret_ms)
{
    static const struct {
        const char *unit;
        uint64_t ms;
    } units[] = {{"y", 365ULL * 24 * 3600 * 1000},
                 {"w", 7ULL * 24 * 3600 * 1000},
                 {"d", 24ULL * 3600 * 1000},
                 {"h", 3600ULL * 1000},
                 {"m", 60ULL * 1000},
                 {"s", 1000},
                 {"ms", 1}};
    const size_t n_units = sizeof(units) / sizeof(units[0]);
    const uint64_t max_ms = (uint64_t)INT64_MAX / 1000000;
    if (strcmp(s, "0") == 0) {
        *ret_ms = 0;
        return true;
    }
    if (!*s)
        return false;
    uint64_t total = 0;
    size_t next_unit = 0;
    while (*s) {
        if (*s < '0' || *s > '9')
            return false;
        uint64_t n = 0;
        for (; *s >= '0' && *s <= '9'; s++) {
            n = n * 10 + (uint64_t)(*s - '0');
            if (n > max_ms)
                return false;
        }
        size_t u = n_units;
        for (size_t i = next_unit; i < n_units; i++) {
            size_t len = strlen(units[i].unit);
            if (strncmp(s, units[i].unit, len) == 0 &&
                (u == n_units || len > strlen(units[u].unit)))
                u = i;
        }
        if (u == n_units)
            return false;
        s += strlen(units[u].unit);
        next_unit = u + 1;
        if (n > (max_ms - total) / units[u].ms)
            return false;
        total += n * units[u].ms;
    }
    *ret_ms = (long long)total;
    return true;
}

static enum cma_errc read_resource_rule(struct loader *ld, const struct cma_ynode *rr_map,
                                        const char *key, struct cma_config_resource_rule *rule)
{
    static const char *const keys[] = {"containerQuery", "nodeQuery", "resources", "containerLabel",
                                       NULL};
    const struct cma_ypair *pair = find_pair(rr_map, key);
    const struct cma_ynode *at = pair ? pair->key : rr_map;
    rule->pos = pos_of(ld, at);
    rule->container_query.pos = rule->node_query.pos = rule->container_label.pos = rule->pos;
    rule->resources.pos = rule->resources.template_.pos = rule->pos;
    rule->resources.namespaced = true;
    if (!pair || is_null(pair->value))
        return CMA_OK;
    const struct cma_ynode *v = pair->value;
    if (v->kind != CMA_YNODE_MAPPING)
        return wrong_kind(ld, v, "a mapping", key);
    rule->pos = pos_of(ld, v);
    enum cma_errc rc = check_keys(ld, v, keys);
    if (!rc)
        rc = read_str(ld, v, "containerQuery", &rule->container_query);
    if (!rc)
        rc = read_str(ld, v, "nodeQuery", &rule->node_query);
    if (!rc)
        rc = read_resources(ld, v, &rule->resources);
    if (!rc)
        rc = read_str(ld, v, "containerLabel", &rule->container_label);
    return rc;
}

static enum cma_errc read_resource_rules(struct loader *ld, const struct cma_ynode *root)
{
    static const char *const keys[] = {"cpu", "memory", "window", NULL};
    const struct cma_ynode *v = get_value(root, "resourceRules");
    if (!v)
        return CMA_OK;
    if (v->kind != CMA_YNODE_MAPPING)
        return wrong_kind(ld, v, "a mapping", "resourceRules");
    struct cma_config_resource_rules *rr = calloc(1, sizeof(*rr));
    if (!rr)
        return fail_nomem(ld);
    ld->cfg->resource_rules = rr;
    rr->pos = pos_of(ld, v);
    enum cma_errc rc = check_keys(ld, v, keys);
    if (!rc)
        rc = read_resource_rule(ld, v, "cpu", &rr->cpu);
    if (!rc)
        rc = read_resource_rule(ld, v, "memory", &rr->memory);
    if (!rc)
        rc = read_str(ld, v, "window", &rr->window);
    if (rc || !rr->window.set)
        return rc;
    if (!parse_prom_duration(rr->window.s, &rr->window_ms)) {
        char quoted[CMA_YDOC_QUOTE_MAX];
        cma_ydoc_quote(rr->window.s, strlen(rr->window.s), quoted, sizeof(quoted));
        return cma_err_set_at(ld->reterr, CMA_ERR_CONFIG_VALUE, ld->cfg->file, rr->window.pos.line,
                              rr->window.pos.column,
                              "invalid window %s: not a Prometheus duration (e.g. 1m, 5m30s)",
                              quoted);
    }
    return CMA_OK;
}

/* ---- entry points --------------------------------------------------------------------------- */

static enum cma_errc build(struct loader *ld, const struct cma_ynode *root)
{
    static const char *const keys[] = {"rules", "externalRules", "resourceRules", NULL};
    if (is_null(root))
        return CMA_OK;
    if (root->kind != CMA_YNODE_MAPPING)
        return fail_at(ld, CMA_ERR_CONFIG_TYPE, root,
                       "expected a mapping (rules, externalRules, resourceRules) at the top "
                       "level, got %s",
                       kind_name(root));
    enum cma_errc rc = check_keys(ld, root, keys);
    if (!rc)
        rc = read_rules(ld, root, "rules", &ld->cfg->rules, &ld->cfg->n_rules);
    if (!rc)
        rc = read_rules(ld, root, "externalRules", &ld->cfg->external_rules,
                        &ld->cfg->n_external_rules);
    if (!rc)
        rc = read_resource_rules(ld, root);
    return rc;
}

/* Appends "file:line:column: message" to cfg->warnings. */
static enum cma_errc add_warning(struct cma_config *cfg, unsigned line, unsigned column,
                                 const char *msg)
{
    char **w = realloc(cfg->warnings, (cfg->n_warnings + 1) * sizeof(*w));
    if (!w)
        return CMA_ERR_NOMEM;
    cfg->warnings = w;
    size_t len = strlen(cfg->file) + strlen(msg) + 32;
    char *line_text = malloc(len);
    if (!line_text)
        return CMA_ERR_NOMEM;
    snprintf(line_text, len, "%s:%u:%u: %s", cfg->file, line, column, msg);
    w[cfg->n_warnings++] = line_text;
    return CMA_OK;
}

static enum cma_errc from_doc(const struct cma_ydoc *doc, struct cma_config **ret,
                              struct cma_err *reterr)
{
    struct cma_config *cfg = calloc(1, sizeof(*cfg));
    if (!cfg || !(cfg->file = cma_strdup(cma_ydoc_file(doc)))) {
        free(cfg);
        return cma_err_set(reterr, CMA_ERR_NOMEM, "out of memory");
    }
    struct loader ld = {.cfg = cfg, .reterr = reterr};
    enum cma_errc rc = build(&ld, cma_ydoc_root(doc));
    unsigned line, column;
    if (rc == CMA_OK && cma_ydoc_ignored_document(doc, &line, &column) &&
        add_warning(cfg, line, column,
                    "a second YAML document starts here and is ignored: prometheus-adapter "
                    "(yaml.v2) reads only the first one; put every rule in one document") != CMA_OK)
        rc = fail_nomem(&ld);
    if (rc) {
        cma_config_free(cfg);
        return rc;
    }
    *ret = cfg;
    return CMA_OK;
}

enum cma_errc cma_config_load_file(const char *path, struct cma_config **ret,
                                   struct cma_err *reterr)
{
    struct cma_ydoc *doc = NULL;
    enum cma_errc rc = cma_ydoc_load_file(path, &doc, reterr);
    if (rc)
        return rc;
    rc = from_doc(doc, ret, reterr);
    cma_ydoc_free(doc);
    return rc;
}

enum cma_errc cma_config_load_string(const char *name, const char *text, size_t len,
                                     struct cma_config **ret, struct cma_err *reterr)
{
    struct cma_ydoc *doc = NULL;
    enum cma_errc rc = cma_ydoc_parse(name, text, len, &doc, reterr);
    if (rc)
        return rc;
    rc = from_doc(doc, ret, reterr);
    cma_ydoc_free(doc);
    return rc;
}

static void str_done(struct cma_config_str *s)
{
    free(s->s);
}

static void resources_done(struct cma_config_resources *res)
{
    for (size_t i = 0; i < res->n_overrides; i++) {
        free(res->overrides[i].label);
        str_done(&res->overrides[i].group);
        str_done(&res->overrides[i].resource);
    }
    free(res->overrides);
    str_done(&res->template_);
}

static void rules_free(struct cma_config_rule *rules, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        struct cma_config_rule *r = &rules[i];
        str_done(&r->series_query);
        for (size_t j = 0; j < r->n_series_filters; j++) {
            str_done(&r->series_filters[j].is);
            str_done(&r->series_filters[j].is_not);
        }
        free(r->series_filters);
        resources_done(&r->resources);
        str_done(&r->name_matches);
        str_done(&r->name_as);
        str_done(&r->metrics_query);
    }
    free(rules);
}

static void resource_rule_done(struct cma_config_resource_rule *r)
{
    str_done(&r->container_query);
    str_done(&r->node_query);
    resources_done(&r->resources);
    str_done(&r->container_label);
}

void cma_config_free(struct cma_config *cfg)
{
    if (!cfg)
        return;
    rules_free(cfg->rules, cfg->n_rules);
    rules_free(cfg->external_rules, cfg->n_external_rules);
    if (cfg->resource_rules) {
        resource_rule_done(&cfg->resource_rules->cpu);
        resource_rule_done(&cfg->resource_rules->memory);
        str_done(&cfg->resource_rules->window);
        free(cfg->resource_rules);
    }
    for (size_t i = 0; i < cfg->n_warnings; i++)
        free(cfg->warnings[i]);
    free(cfg->warnings);
    free(cfg->file);
    free(cfg);
}
