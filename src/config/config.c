/* config.c: the yamldoc node tree → struct cma_config (rules, externalRules, resourceRules),
 * as strict as yaml.v2 UnmarshalStrict into prometheus-adapter's MetricsDiscoveryConfig, and
 * the merge of several files (directories expanded) into one config.
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
 *   with cma_config_free(), which accepts partial objects. Errors carry the node's position.
 * - Several files: each is loaded alone, then its lists are moved onto the first one's (file
 *   names move too, so every position keeps naming its own file). What cannot be merged is an
 *   error naming both places: resourceRules twice, the same file twice, and a metric name two
 *   files serve for the same resource when the config alone tells the name (no regex is
 *   evaluated here: config/ comes before rules/ in the link order). */
#include "cma/config.h"

#include <dirent.h>
#include <errno.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>

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

/* Checks that every key of `map` is one of `allowed` (a NULL-terminated list). */
static enum cma_errc check_keys(struct loader *ld, const struct cma_ynode *map,
                                const char *const *allowed)
{
    for (size_t i = 0; i < map->n_pairs; i++) {
        const struct cma_ynode *key = map->pairs[i].key;
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

static enum cma_errc fail_str(struct loader *ld, const struct cma_config_str *s, const char *fmt,
                              ...) __attribute__((format(printf, 3, 4)));

static enum cma_errc fail_str(struct loader *ld, const struct cma_config_str *s, const char *fmt,
                              ...)
{
    char msg[CMA_ERR_MSG_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    return cma_err_set_at(ld->reterr, CMA_ERR_CONFIG_VALUE, s->pos.file, s->pos.line, s->pos.column,
                          "%s", msg);
}

/* A rule's (or resourceRules') `backend: NAME`; resolved against backends: after loading. */
static enum cma_errc read_backend_ref(struct loader *ld, const struct cma_ynode *map,
                                      struct cma_config_backend_ref *ref)
{
    enum cma_errc rc = read_str(ld, map, "backend", &ref->name);
    if (rc == CMA_OK && ref->name.set && !ref->name.s[0])
        return fail_str(ld, &ref->name,
                        "backend: empty name (leave the key out for the "
                        "--prometheus-url backend)");
    return rc;
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

/* maxSampleAge (this project's extension): a positive Go duration ("90s", "2m", "1h30m"). */
static enum cma_errc read_max_sample_age(struct loader *ld, const struct cma_ynode *item,
                                         struct cma_config_rule *rule)
{
    struct cma_config_str *s = &rule->max_sample_age;
    enum cma_errc rc = read_str(ld, item, "maxSampleAge", s);
    if (rc != CMA_OK || !s->set)
        return rc;
    int64_t ms = 0;
    if (cma_duration_parse(s->s, &ms, NULL) != CMA_OK || ms <= 0)
        return fail_str(ld, s,
                        "maxSampleAge \"%s\": want a positive Go duration of at least 1ms "
                        "(90s, 2m, 1h30m)",
                        s->s);
    rule->max_sample_age_ms = ms;
    return CMA_OK;
}

static enum cma_errc read_rule(struct loader *ld, const struct cma_ynode *item, const char *list,
                               struct cma_config_rule *rule)
{
    static const char *const keys[] = {"seriesQuery",  "seriesFilters", "resources",    "name",
                                       "metricsQuery", "backend",       "maxSampleAge", NULL};
    rule->pos = pos_of(ld, item);
    rule->resources.namespaced = true;
    if (is_null(item)) { /* yaml.v2: the zero DiscoveryRule; every value unset, here */
        struct cma_config_str *strs[] = {&rule->series_query, &rule->name_matches, &rule->name_as,
                                         &rule->metrics_query, &rule->resources.template_};
        for (size_t i = 0; i < sizeof(strs) / sizeof(strs[0]); i++)
            strs[i]->pos = rule->pos;
        rule->resources.pos = rule->pos;
        rule->backend.name.pos = rule->pos;
        rule->max_sample_age.pos = rule->pos;
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
    if (!rc)
        rc = read_backend_ref(ld, item, &rule->backend);
    if (!rc)
        rc = read_max_sample_age(ld, item, rule);
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
    static const char *const keys[] = {"cpu", "memory", "window", "backend", NULL};
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
    const struct cma_ypair *age = find_pair(v, "maxSampleAge");
    if (age) /* a key of rules and externalRules only: say why rather than "unknown key" */
        return fail_at(ld, CMA_ERR_CONFIG_KEY, age->key,
                       "maxSampleAge is not supported in resourceRules: containerQuery and "
                       "nodeQuery name their metrics themselves (no .Series), so the adapter "
                       "cannot measure the data's age; leave it out");
    enum cma_errc rc = check_keys(ld, v, keys);
    if (!rc)
        rc = read_resource_rule(ld, v, "cpu", &rr->cpu);
    if (!rc)
        rc = read_resource_rule(ld, v, "memory", &rr->memory);
    if (!rc)
        rc = read_str(ld, v, "window", &rr->window);
    if (!rc)
        rc = read_backend_ref(ld, v, &rr->backend);
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

/* ---- backends (this project's extension) ---------------------------------------------------- */

/* A scalar as a bool (true/false and yaml.v2's other spellings); absent or null: false. */
static enum cma_errc read_bool(struct loader *ld, const struct cma_ynode *map, const char *key,
                               bool *out)
{
    const struct cma_ynode *v = get_value(map, key);
    if (!v)
        return CMA_OK;
    if (cma_ynode_as_bool(v, out))
        return CMA_OK;
    if (v->kind != CMA_YNODE_SCALAR)
        return wrong_kind(ld, v, "true or false", key);
    char quoted[CMA_YDOC_QUOTE_MAX];
    cma_ydoc_quote(v->scalar, v->scalar_len, quoted, sizeof(quoted));
    return fail_at(ld, CMA_ERR_CONFIG_TYPE, v, "expected true or false for %s, got %s", key,
                   quoted);
}

/* "dir/" of the config file, for relative paths ("" when it has no directory part). */
static size_t config_dir_len(const char *file)
{
    const char *slash = strrchr(file, '/');
    return slash ? (size_t)(slash - file) + 1 : 0;
}

/* A file setting: resolved against the config file's directory when relative, and readable
 * now (a missing secret is a load error, not a failure at the first request). */
static enum cma_errc read_file_setting(struct loader *ld, const struct cma_ynode *map,
                                       const char *key, const char *what,
                                       struct cma_config_str *out)
{
    enum cma_errc rc = read_str(ld, map, key, out);
    if (rc != CMA_OK || !out->set)
        return rc;
    if (!out->s[0])
        return fail_str(ld, out, "%s: empty path", what);
    size_t dl = out->s[0] == '/' ? 0 : config_dir_len(ld->cfg->file);
    if (dl > 0) {
        size_t len = dl + strlen(out->s) + 1;
        char *p = malloc(len);
        if (!p)
            return fail_nomem(ld);
        snprintf(p, len, "%.*s%s", (int)dl, ld->cfg->file, out->s);
        free(out->s);
        out->s = p;
    }
    FILE *f = fopen(out->s, "r");
    struct stat st;
    int err = !f ? errno : fstat(fileno(f), &st) != 0 ? errno : S_ISDIR(st.st_mode) ? EISDIR : 0;
    if (f)
        fclose(f);
    if (err)
        return fail_str(ld, out, "%s: cannot read %s: %s", what, out->s, strerror(err));
    return CMA_OK;
}

static bool is_header_name_char(unsigned char c)
{
    return c > 0x20 && c < 0x7f && !strchr("()<>@,;:\\\"/[]?={}", c);
}

/* headers (HTTP header names, values on one line, never Authorization: secrets come from files)
 * or queryParameters (any non-empty key). */
static enum cma_errc check_kv(struct loader *ld, const struct cma_ynode *k,
                              const struct cma_ynode *v, bool header)
{
    if (v->kind != CMA_YNODE_SCALAR || v->is_null)
        return wrong_kind(ld, v, "a string", header ? "a header value" : "a query parameter");
    if (k->scalar_len == 0 || strlen(k->scalar) != k->scalar_len ||
        strlen(v->scalar) != v->scalar_len)
        return fail_at(ld, CMA_ERR_CONFIG_VALUE, k, "empty name or a NUL character");
    for (size_t i = 0; header && i < k->scalar_len; i++)
        if (!is_header_name_char((unsigned char)k->scalar[i]))
            return fail_at(ld, CMA_ERR_CONFIG_VALUE, k, "headers: \"%s\" is not a header name",
                           k->scalar);
    if (header && strcasecmp(k->scalar, "Authorization") == 0)
        return fail_at(ld, CMA_ERR_CONFIG_VALUE, k,
                       "headers: Authorization may not be written in the config: use "
                       "bearerTokenFile or basicAuth.passwordFile (secrets come from files)");
    if (header && strpbrk(v->scalar, "\r\n"))
        return fail_at(ld, CMA_ERR_CONFIG_VALUE, v, "headers: the value of %s has a line break",
                       k->scalar);
    return CMA_OK;
}

static enum cma_errc read_kvs(struct loader *ld, const struct cma_ynode *map, const char *key,
                              bool header, struct cma_config_kv **ret, size_t *ret_n)
{
    const struct cma_ynode *v = get_value(map, key);
    if (!v)
        return CMA_OK;
    if (v->kind != CMA_YNODE_MAPPING)
        return wrong_kind(ld, v, "a mapping", key);
    if (v->n_pairs == 0)
        return CMA_OK;
    *ret = calloc(v->n_pairs, sizeof(**ret));
    if (!*ret)
        return fail_nomem(ld);
    for (size_t i = 0; i < v->n_pairs; i++) {
        const struct cma_ynode *k = v->pairs[i].key, *val = v->pairs[i].value;
        enum cma_errc rc = check_kv(ld, k, val, header);
        if (rc != CMA_OK)
            return rc;
        struct cma_config_kv *kv = &(*ret)[(*ret_n)++];
        kv->pos = pos_of(ld, k);
        kv->key = cma_strndup(k->scalar, k->scalar_len);
        kv->value = cma_strndup(val->scalar, val->scalar_len);
        if (!kv->key || !kv->value)
            return fail_nomem(ld);
    }
    return CMA_OK;
}

static bool is_backend_name(const char *s)
{
    size_t n = strlen(s);
    if (n == 0 || n > 63)
        return false;
    for (size_t i = 0; i < n; i++)
        if (!((s[i] >= 'a' && s[i] <= 'z') || (s[i] >= 'A' && s[i] <= 'Z') ||
              (s[i] >= '0' && s[i] <= '9') || strchr("-_.", s[i])))
            return false;
    return true;
}

/* name: required; letters, digits, '-', '_' and '.'. */
static enum cma_errc read_backend_name(struct loader *ld, const struct cma_ynode *item,
                                       struct cma_config_backend *b)
{
    enum cma_errc rc = read_str(ld, item, "name", &b->name);
    if (rc == CMA_OK && !b->name.set)
        rc = fail_at(ld, CMA_ERR_CONFIG_VALUE, item, "backends: each entry needs a name");
    if (rc == CMA_OK && !is_backend_name(b->name.s))
        rc = fail_str(ld, &b->name,
                      "backend name \"%s\": use 1 to 63 letters, digits, '-', '_' "
                      "or '.'",
                      b->name.s);
    return rc;
}

static enum cma_errc read_backend_url(struct loader *ld, const struct cma_ynode *item,
                                      struct cma_config_backend *b)
{
    enum cma_errc rc = read_str(ld, item, "url", &b->url);
    if (rc == CMA_OK && (!b->url.set || (strncmp(b->url.s, "http://", 7) != 0 &&
                                         strncmp(b->url.s, "https://", 8) != 0)))
        rc =
            b->url.set
                ? fail_str(ld, &b->url, "backend %s: url: want http:// or https://", b->name.s)
                : fail_at(ld, CMA_ERR_CONFIG_VALUE, item, "backend %s: url is required", b->name.s);
    return rc;
}

static enum cma_errc read_backend_verb(struct loader *ld, const struct cma_ynode *item,
                                       struct cma_config_backend *b)
{
    struct cma_config_str verb = {0};
    enum cma_errc rc = read_str(ld, item, "verb", &verb);
    if (rc == CMA_OK && verb.set && strcmp(verb.s, "GET") != 0 && strcmp(verb.s, "POST") != 0)
        rc = fail_str(ld, &verb, "backend %s: verb: want GET or POST", b->name.s);
    b->use_post = rc == CMA_OK && verb.set && strcmp(verb.s, "POST") == 0;
    free(verb.s);
    return rc;
}

static enum cma_errc read_backend_timeout(struct loader *ld, const struct cma_ynode *item,
                                          struct cma_config_backend *b)
{
    struct cma_config_str timeout = {0};
    enum cma_errc rc = read_str(ld, item, "timeout", &timeout);
    if (rc == CMA_OK && timeout.set &&
        (!parse_prom_duration(timeout.s, &b->timeout_ms) || b->timeout_ms <= 0))
        rc = fail_str(ld, &timeout,
                      "backend %s: timeout \"%s\": want a positive duration (10s, "
                      "1m30s)",
                      b->name.s, timeout.s);
    free(timeout.s);
    return rc;
}

static enum cma_errc read_backend_max_query_length(struct loader *ld, const struct cma_ynode *item,
                                                   struct cma_config_backend *b)
{
    struct cma_config_str maxlen = {0};
    enum cma_errc rc = read_str(ld, item, "maxQueryLength", &maxlen);
    if (rc == CMA_OK && maxlen.set) {
        char *end = NULL;
        errno = 0;
        long long n = strtoll(maxlen.s, &end, 10);
        if (errno || end == maxlen.s || *end || n <= 0 || maxlen.s[0] == '+')
            rc = fail_str(ld, &maxlen,
                          "backend %s: maxQueryLength \"%s\": want a positive "
                          "number of bytes",
                          b->name.s, maxlen.s);
        b->max_query_length = n;
    }
    free(maxlen.s);
    return rc;
}

/* name, url, verb, timeout, maxQueryLength. */
static enum cma_errc read_backend_basics(struct loader *ld, const struct cma_ynode *item,
                                         struct cma_config_backend *b)
{
    enum cma_errc rc = read_backend_name(ld, item, b);
    if (rc == CMA_OK)
        rc = read_backend_url(ld, item, b);
    if (rc == CMA_OK)
        rc = read_backend_verb(ld, item, b);
    if (rc == CMA_OK)
        rc = read_backend_timeout(ld, item, b);
    if (rc == CMA_OK)
        rc = read_backend_max_query_length(ld, item, b);
    return rc;
}

static enum cma_errc read_backend_basic_auth(struct loader *ld, const struct cma_ynode *item,
                                             struct cma_config_backend *b)
{
    static const char *const keys[] = {"username", "passwordFile", NULL};
    const struct cma_ynode *v = get_value(item, "basicAuth");
    if (!v)
        return CMA_OK;
    if (v->kind != CMA_YNODE_MAPPING)
        return wrong_kind(ld, v, "a mapping (username, passwordFile)", "basicAuth");
    enum cma_errc rc = check_keys(ld, v, keys);
    if (rc == CMA_OK)
        rc = read_str(ld, v, "username", &b->basic_username);
    if (rc == CMA_OK)
        rc = read_file_setting(ld, v, "passwordFile", "basicAuth.passwordFile",
                               &b->basic_password_file);
    if (rc == CMA_OK && (!b->basic_username.set || !b->basic_password_file.set))
        rc = fail_at(ld, CMA_ERR_CONFIG_VALUE, v,
                     "backend %s: basicAuth needs username and passwordFile", b->name.s);
    return rc;
}

static enum cma_errc read_backend_tls(struct loader *ld, const struct cma_ynode *item,
                                      struct cma_config_backend *b)
{
    static const char *const keys[] = {"caFile", "certFile", "keyFile", "insecureSkipVerify", NULL};
    const struct cma_ynode *v = get_value(item, "tls");
    if (!v)
        return CMA_OK;
    if (v->kind != CMA_YNODE_MAPPING)
        return wrong_kind(ld, v, "a mapping (caFile, certFile, keyFile, insecureSkipVerify)",
                          "tls");
    enum cma_errc rc = check_keys(ld, v, keys);
    if (rc == CMA_OK)
        rc = read_file_setting(ld, v, "caFile", "tls.caFile", &b->ca_file);
    if (rc == CMA_OK)
        rc = read_file_setting(ld, v, "certFile", "tls.certFile", &b->cert_file);
    if (rc == CMA_OK)
        rc = read_file_setting(ld, v, "keyFile", "tls.keyFile", &b->key_file);
    if (rc == CMA_OK)
        rc = read_bool(ld, v, "insecureSkipVerify", &b->insecure_skip_verify);
    if (rc == CMA_OK && b->cert_file.set != b->key_file.set)
        rc = fail_at(ld, CMA_ERR_CONFIG_VALUE, v,
                     "backend %s: tls.certFile and tls.keyFile go "
                     "together",
                     b->name.s);
    return rc;
}

/* How the backend is reached: bearerTokenFile, basicAuth, tls, kubeconfig, inCluster, and the
 * pairs that exclude each other. */
static enum cma_errc read_backend_credentials(struct loader *ld, const struct cma_ynode *item,
                                              struct cma_config_backend *b)
{
    enum cma_errc rc =
        read_file_setting(ld, item, "bearerTokenFile", "bearerTokenFile", &b->bearer_token_file);
    if (rc == CMA_OK)
        rc = read_backend_basic_auth(ld, item, b);
    if (rc == CMA_OK)
        rc = read_backend_tls(ld, item, b);
    if (rc == CMA_OK)
        rc = read_file_setting(ld, item, "kubeconfig", "kubeconfig", &b->kubeconfig);
    if (rc == CMA_OK)
        rc = read_bool(ld, item, "inCluster", &b->in_cluster);
    if (rc == CMA_OK && b->bearer_token_file.set && b->basic_username.set)
        rc = fail_at(ld, CMA_ERR_CONFIG_VALUE, item,
                     "backend %s: bearerTokenFile and basicAuth: give one of them, the backend "
                     "gets one Authorization header",
                     b->name.s);
    if (rc == CMA_OK && b->kubeconfig.set && b->in_cluster)
        rc = fail_at(ld, CMA_ERR_CONFIG_VALUE, item,
                     "backend %s: kubeconfig and inCluster: give one of them", b->name.s);
    return rc;
}

/* metricRules.namespaces: a list of namespace names. */
static enum cma_errc read_mr_namespaces(struct loader *ld, const struct cma_ynode *v,
                                        struct cma_config_backend *b)
{
    const struct cma_ynode *list = get_value(v, "namespaces");
    if (!list)
        return CMA_OK;
    if (list->kind != CMA_YNODE_SEQUENCE)
        return wrong_kind(ld, list, "a list of namespace names", "metricRules.namespaces");
    b->mr_namespaces = calloc(list->n_items + 1, sizeof(*b->mr_namespaces));
    if (!b->mr_namespaces)
        return fail_nomem(ld);
    for (size_t i = 0; i < list->n_items; i++) {
        const struct cma_ynode *n = list->items[i];
        if (n->kind != CMA_YNODE_SCALAR || n->scalar_len == 0 || strlen(n->scalar) != n->scalar_len)
            return fail_at(ld, CMA_ERR_CONFIG_VALUE, n,
                           "backend %s: metricRules.namespaces: want namespace names", b->name.s);
        if (!(b->mr_namespaces[b->n_mr_namespaces++] = cma_strndup(n->scalar, n->scalar_len)))
            return fail_nomem(ld);
    }
    return CMA_OK;
}

/* metricRules: {allowed, namespaces, tenantFromNamespace}: whether MetricRules may use it. */
static enum cma_errc read_backend_metric_rules(struct loader *ld, const struct cma_ynode *item,
                                               struct cma_config_backend *b)
{
    static const char *const keys[] = {"allowed", "namespaces", "tenantFromNamespace", NULL};
    const struct cma_ynode *v = get_value(item, "metricRules");
    if (!v)
        return CMA_OK;
    if (v->kind != CMA_YNODE_MAPPING)
        return wrong_kind(ld, v, "a mapping (allowed, namespaces, tenantFromNamespace)",
                          "metricRules");
    enum cma_errc rc = check_keys(ld, v, keys);
    if (rc == CMA_OK)
        rc = read_bool(ld, v, "allowed", &b->mr_allowed);
    if (rc == CMA_OK)
        rc = read_mr_namespaces(ld, v, b);
    if (rc == CMA_OK)
        rc = read_bool(ld, v, "tenantFromNamespace", &b->mr_tenant_from_namespace);
    if (rc == CMA_OK && b->mr_tenant_from_namespace && !b->mr_allowed)
        rc = fail_at(ld, CMA_ERR_CONFIG_VALUE, get_value(v, "tenantFromNamespace"),
                     "backend %s: metricRules.tenantFromNamespace: true needs "
                     "metricRules.allowed: true (only MetricRules' calls are sent as their "
                     "namespace)",
                     b->name.s);
    return rc;
}

static enum cma_errc read_backend(struct loader *ld, const struct cma_ynode *item,
                                  struct cma_config_backend *b)
{
    static const char *const keys[] = {"name",           "url",
                                       "verb",           "timeout",
                                       "headers",        "queryParameters",
                                       "maxQueryLength", "bearerTokenFile",
                                       "basicAuth",      "tls",
                                       "kubeconfig",     "inCluster",
                                       "metricRules",    NULL};
    b->pos = pos_of(ld, item);
    if (item->kind != CMA_YNODE_MAPPING)
        return fail_at(ld, CMA_ERR_CONFIG_TYPE, item,
                       "expected a mapping for each entry of backends, got %s", kind_name(item));
    enum cma_errc rc = check_keys(ld, item, keys);
    if (rc == CMA_OK)
        rc = read_backend_basics(ld, item, b);
    if (rc == CMA_OK)
        rc = read_kvs(ld, item, "headers", true, &b->headers, &b->n_headers);
    if (rc == CMA_OK)
        rc = read_kvs(ld, item, "queryParameters", false, &b->query_params, &b->n_query_params);
    if (rc == CMA_OK)
        rc = read_backend_credentials(ld, item, b);
    if (rc == CMA_OK)
        rc = read_backend_metric_rules(ld, item, b);
    return rc;
}

static enum cma_errc duplicate_backend(struct cma_err *reterr,
                                       const struct cma_config_backend *later,
                                       const struct cma_config_backend *earlier)
{
    const struct cma_pos *p = &later->name.pos, *q = &earlier->name.pos;
    return cma_err_set_at(reterr, CMA_ERR_CONFIG_VALUE, p->file, p->line, p->column,
                          "backend \"%s\" is already defined at %s:%u:%u: backend names must be "
                          "unique",
                          later->name.s, q->file, q->line, q->column);
}

/* Backend names are unique across every file loaded. */
static enum cma_errc check_backend_names(const struct cma_config *cfg, struct cma_err *reterr)
{
    for (size_t i = 0; i < cfg->n_backends; i++)
        for (size_t j = 0; j < i; j++)
            if (strcmp(cfg->backends[i].name.s, cfg->backends[j].name.s) == 0)
                return duplicate_backend(reterr, &cfg->backends[i], &cfg->backends[j]);
    return CMA_OK;
}

static enum cma_errc read_backends(struct loader *ld, const struct cma_ynode *root)
{
    const struct cma_ynode *v = get_value(root, "backends");
    if (!v)
        return CMA_OK;
    if (v->kind != CMA_YNODE_SEQUENCE)
        return wrong_kind(ld, v, "a list", "backends");
    if (v->n_items == 0)
        return CMA_OK;
    ld->cfg->backends = calloc(v->n_items, sizeof(*ld->cfg->backends));
    if (!ld->cfg->backends)
        return fail_nomem(ld);
    for (size_t i = 0; i < v->n_items; i++) {
        enum cma_errc rc = read_backend(ld, v->items[i], &ld->cfg->backends[ld->cfg->n_backends++]);
        if (rc)
            return rc;
    }
    return check_backend_names(ld->cfg, ld->reterr);
}

/* Resolves one `backend: NAME` to its index (0: the flags' backend). */
static enum cma_errc resolve_ref(const struct cma_config *cfg, struct cma_config_backend_ref *ref,
                                 struct cma_err *reterr)
{
    ref->index = 0;
    if (!ref->name.set)
        return CMA_OK;
    for (size_t i = 0; i < cfg->n_backends; i++)
        if (strcmp(cfg->backends[i].name.s, ref->name.s) == 0) {
            ref->index = i + 1;
            return CMA_OK;
        }
    char names[256] = "";
    size_t used = 0;
    for (size_t i = 0; i < cfg->n_backends && used < sizeof(names); i++) {
        int n = snprintf(names + used, sizeof(names) - used, "%s%s", i ? ", " : "",
                         cfg->backends[i].name.s);
        used += n > 0 ? (size_t)n : 0;
    }
    const struct cma_pos *p = &ref->name.pos;
    return cma_err_set_at(reterr, CMA_ERR_CONFIG_VALUE, p->file, p->line, p->column,
                          "unknown backend \"%s\" (%s%s)", ref->name.s,
                          cfg->n_backends ? "defined: " : "no backends: list defines any", names);
}

/* Every `backend: NAME` of rules, externalRules and resourceRules names a backends: entry. */
static enum cma_errc resolve_backend_refs(struct cma_config *cfg, struct cma_err *reterr)
{
    enum cma_errc rc = CMA_OK;
    for (size_t i = 0; rc == CMA_OK && i < cfg->n_rules; i++)
        rc = resolve_ref(cfg, &cfg->rules[i].backend, reterr);
    for (size_t i = 0; rc == CMA_OK && i < cfg->n_external_rules; i++)
        rc = resolve_ref(cfg, &cfg->external_rules[i].backend, reterr);
    if (rc == CMA_OK && cfg->resource_rules)
        rc = resolve_ref(cfg, &cfg->resource_rules->backend, reterr);
    return rc;
}

static void backends_free(struct cma_config_backend *bs, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        struct cma_config_backend *b = &bs[i];
        struct cma_config_str *strs[] = {&b->name,
                                         &b->url,
                                         &b->bearer_token_file,
                                         &b->basic_username,
                                         &b->basic_password_file,
                                         &b->ca_file,
                                         &b->cert_file,
                                         &b->key_file,
                                         &b->kubeconfig};
        for (size_t j = 0; j < sizeof(strs) / sizeof(strs[0]); j++)
            free(strs[j]->s);
        for (size_t j = 0; j < b->n_headers; j++) {
            free(b->headers[j].key);
            free(b->headers[j].value);
        }
        free(b->headers);
        for (size_t j = 0; j < b->n_query_params; j++) {
            free(b->query_params[j].key);
            free(b->query_params[j].value);
        }
        free(b->query_params);
        for (size_t j = 0; j < b->n_mr_namespaces; j++)
            free(b->mr_namespaces[j]);
        free(b->mr_namespaces);
    }
    free(bs);
}

/* ---- entry points --------------------------------------------------------------------------- */

static enum cma_errc build(struct loader *ld, const struct cma_ynode *root)
{
    static const char *const keys[] = {"rules", "externalRules", "resourceRules", "backends", NULL};
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
    if (!rc)
        rc = read_backends(ld, root);
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
    if (cfg)
        cfg->files = calloc(1, sizeof(*cfg->files));
    if (!cfg || !cfg->files || !(cfg->file = cma_strdup(cma_ydoc_file(doc)))) {
        if (cfg)
            free(cfg->files);
        free(cfg);
        return cma_err_set(reterr, CMA_ERR_NOMEM, "out of memory");
    }
    cfg->files[cfg->n_files++] = cfg->file;
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

/* One file alone, its backend references not resolved yet (they may name a backend of
 * another file). */
static enum cma_errc load_file_unresolved(const char *path, struct cma_config **ret,
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

/* Resolves *cfg's backend references; frees it on failure. */
static enum cma_errc resolved(struct cma_config **cfg, enum cma_errc rc, struct cma_err *reterr)
{
    if (rc == CMA_OK && (rc = resolve_backend_refs(*cfg, reterr)) != CMA_OK) {
        cma_config_free(*cfg);
        *cfg = NULL;
    }
    return rc;
}

enum cma_errc cma_config_load_file(const char *path, struct cma_config **ret,
                                   struct cma_err *reterr)
{
    struct cma_config *cfg = NULL;
    enum cma_errc rc = resolved(&cfg, load_file_unresolved(path, &cfg, reterr), reterr);
    if (rc == CMA_OK)
        *ret = cfg;
    return rc;
}

enum cma_errc cma_config_load_string(const char *name, const char *text, size_t len,
                                     struct cma_config **ret, struct cma_err *reterr)
{
    struct cma_ydoc *doc = NULL;
    struct cma_config *cfg = NULL;
    enum cma_errc rc = cma_ydoc_parse(name, text, len, &doc, reterr);
    if (rc)
        return rc;
    rc = resolved(&cfg, from_doc(doc, &cfg, reterr), reterr);
    cma_ydoc_free(doc);
    if (rc == CMA_OK)
        *ret = cfg;
    return rc;
}

static void str_done(struct cma_config_str *s)
{
    free(s->s);
}

static void rule_backend_done(struct cma_config_backend_ref *ref)
{
    free(ref->name.s);
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
        str_done(&r->max_sample_age);
        rule_backend_done(&r->backend);
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
        rule_backend_done(&cfg->resource_rules->backend);
        free(cfg->resource_rules);
    }
    backends_free(cfg->backends, cfg->n_backends);
    for (size_t i = 0; i < cfg->n_warnings; i++)
        free(cfg->warnings[i]);
    free(cfg->warnings);
    for (size_t i = 0; i < cfg->n_files; i++)
        free(cfg->files[i]);
    free(cfg->files);
    free(cfg);
}

/* ---- several files: paths → file list ------------------------------------------------------- */

struct path_list {
    char **v;
    size_t n;
};

static void path_list_done(struct path_list *l)
{
    for (size_t i = 0; i < l->n; i++)
        free(l->v[i]);
    free(l->v);
}

/* Takes ownership of p (freed on failure). */
static enum cma_errc path_list_push(struct path_list *l, char *p, struct cma_err *reterr)
{
    char **grown = p ? realloc(l->v, (l->n + 1) * sizeof(*grown)) : NULL;
    if (!grown) {
        free(p);
        return cma_err_set(reterr, CMA_ERR_NOMEM, "out of memory");
    }
    grown[l->n++] = p;
    l->v = grown;
    return CMA_OK;
}

static bool has_suffix(const char *s, const char *suffix)
{
    size_t n = strlen(s), k = strlen(suffix);
    return n > k && strcmp(s + n - k, suffix) == 0;
}

/* A directory entry that is a rule file: *.yaml or *.yml, not hidden (ConfigMap mounts hold
 * ..data and ..<timestamp> entries next to the links to each key). */
static bool is_rule_file_name(const char *name)
{
    return name[0] != '.' && (has_suffix(name, ".yaml") || has_suffix(name, ".yml"));
}

static int cmp_strings(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static char *join_path(const char *dir, const char *name)
{
    size_t dl = strlen(dir), nl = strlen(name);
    bool slash = dl > 0 && dir[dl - 1] == '/';
    char *p = malloc(dl + nl + 2);
    if (p)
        snprintf(p, dl + nl + 2, "%s%s%s", dir, slash ? "" : "/", name);
    return p;
}

/* Appends dir's rule files (regular files, links followed) in byte order of their names. */
static enum cma_errc expand_dir(const char *dir, struct path_list *out, struct cma_err *reterr)
{
    DIR *d = opendir(dir);
    if (!d)
        return cma_err_set_at(reterr, CMA_ERR_CONFIG_IO, dir, 0, 0,
                              "cannot read config directory: %s", strerror(errno));
    struct path_list found = {0};
    enum cma_errc rc = CMA_OK;
    for (struct dirent *e; rc == CMA_OK && (e = readdir(d)) != NULL;) {
        if (!is_rule_file_name(e->d_name))
            continue;
        char *p = join_path(dir, e->d_name);
        struct stat st;
        if (p && (stat(p, &st) != 0 || !S_ISREG(st.st_mode))) {
            free(p);
            continue;
        }
        rc = path_list_push(&found, p, reterr);
    }
    closedir(d);
    if (rc == CMA_OK && found.n == 0)
        rc = cma_err_set_at(reterr, CMA_ERR_CONFIG_IO, dir, 0, 0,
                            "no *.yaml or *.yml file in this config directory");
    if (found.n > 1)
        qsort(found.v, found.n, sizeof(*found.v), cmp_strings);
    for (size_t i = 0; rc == CMA_OK && i < found.n; i++) {
        rc = path_list_push(out, found.v[i], reterr);
        found.v[i] = NULL;
    }
    path_list_done(&found);
    return rc;
}

/* Expands directories in place; refuses a file reached twice (by any name). A path that
 * cannot be examined stays as is: loading it reports why. */
static enum cma_errc expand_paths(const char *const *paths, size_t n, struct path_list *out,
                                  struct cma_err *reterr)
{
    enum cma_errc rc = CMA_OK;
    for (size_t i = 0; rc == CMA_OK && i < n; i++) {
        struct stat st;
        if (stat(paths[i], &st) == 0 && S_ISDIR(st.st_mode))
            rc = expand_dir(paths[i], out, reterr);
        else
            rc = path_list_push(out, cma_strdup(paths[i]), reterr);
    }
    for (size_t i = 0; rc == CMA_OK && i < out->n; i++) {
        struct stat a;
        if (stat(out->v[i], &a) != 0)
            continue;
        for (size_t j = 0; j < i; j++) {
            struct stat b;
            if (stat(out->v[j], &b) == 0 && a.st_dev == b.st_dev && a.st_ino == b.st_ino)
                return cma_err_set_at(reterr, CMA_ERR_CONFIG_VALUE, out->v[i], 0, 0,
                                      "the same file as %s: each config file may be loaded "
                                      "only once",
                                      out->v[j]);
        }
    }
    return rc;
}

/* ---- several files: merging ----------------------------------------------------------------- */

static enum cma_errc move_rules(struct cma_config_rule **dst, size_t *n_dst,
                                struct cma_config_rule **src, size_t *n_src)
{
    if (*n_src == 0)
        return CMA_OK;
    struct cma_config_rule *grown = realloc(*dst, (*n_dst + *n_src) * sizeof(*grown));
    if (!grown)
        return CMA_ERR_NOMEM;
    memcpy(grown + *n_dst, *src, *n_src * sizeof(*grown));
    *dst = grown;
    *n_dst += *n_src;
    free(*src);
    *src = NULL;
    *n_src = 0;
    return CMA_OK;
}

static enum cma_errc move_strings(char ***dst, size_t *n_dst, char ***src, size_t *n_src)
{
    if (*n_src == 0)
        return CMA_OK;
    char **grown = realloc(*dst, (*n_dst + *n_src) * sizeof(*grown));
    if (!grown)
        return CMA_ERR_NOMEM;
    memcpy(grown + *n_dst, *src, *n_src * sizeof(*grown));
    *dst = grown;
    *n_dst += *n_src;
    free(*src);
    *src = NULL;
    *n_src = 0;
    return CMA_OK;
}

static enum cma_errc move_backends(struct cma_config *base, struct cma_config *part)
{
    if (part->n_backends == 0)
        return CMA_OK;
    size_t n = base->n_backends + part->n_backends;
    struct cma_config_backend *grown = realloc(base->backends, n * sizeof(*grown));
    if (!grown)
        return CMA_ERR_NOMEM;
    memcpy(grown + base->n_backends, part->backends, part->n_backends * sizeof(*grown));
    base->backends = grown;
    base->n_backends = n;
    free(part->backends);
    part->backends = NULL;
    part->n_backends = 0;
    return CMA_OK;
}

/* Moves part's rules, warnings, resourceRules, backends and file names onto base; part keeps only
 * what cma_config_free() may free. Only resourceRules can conflict (exactly one file may hold it).
 */
static enum cma_errc merge_into(struct cma_config *base, struct cma_config *part,
                                struct cma_err *reterr)
{
    const struct cma_config_resource_rules *a = base->resource_rules, *b = part->resource_rules;
    if (a && b)
        return cma_err_set_at(reterr, CMA_ERR_CONFIG_VALUE, b->pos.file, b->pos.line, b->pos.column,
                              "resourceRules is already defined at %s:%u:%u: only one config "
                              "file may define resourceRules",
                              a->pos.file, a->pos.line, a->pos.column);
    if (move_rules(&base->rules, &base->n_rules, &part->rules, &part->n_rules) ||
        move_rules(&base->external_rules, &base->n_external_rules, &part->external_rules,
                   &part->n_external_rules) ||
        move_strings(&base->warnings, &base->n_warnings, &part->warnings, &part->n_warnings) ||
        move_strings(&base->files, &base->n_files, &part->files, &part->n_files) ||
        move_backends(base, part))
        return cma_err_set(reterr, CMA_ERR_NOMEM, "out of memory");
    if (b) {
        base->resource_rules = part->resource_rules;
        part->resource_rules = NULL;
    }
    part->file = NULL;
    return CMA_OK;
}

/* ---- several files: the same metric from two files ------------------------------------------ */

static bool is_name_char(char c, bool first)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || c == ':' ||
           (!first && c >= '0' && c <= '9');
}

/* Copies s[0..len) to out when it is a metric name ([A-Za-z_:][A-Za-z0-9_:]*). */
static bool copy_name(const char *s, size_t len, char *out, size_t out_len)
{
    if (len == 0 || len >= out_len)
        return false;
    for (size_t i = 0; i < len; i++)
        if (!is_name_char(s[i], i == 0))
            return false;
    memcpy(out, s, len);
    out[len] = '\0';
    return true;
}

/* The value of the __name__ matcher inside a selector, when it names one metric:
 * __name__="x", or __name__=~"x" / "^x$" (PromQL anchors regexes, so a plain name is exact). */
static bool name_matcher(const char *q, char *out, size_t out_len)
{
    const char *p = strstr(q, "__name__");
    if (!p)
        return false;
    p += strlen("__name__");
    while (*p == ' ')
        p++;
    if (*p != '=') /* != and !~ select more than one name */
        return false;
    bool regex = p[1] == '~';
    p += regex ? 2 : 1;
    while (*p == ' ')
        p++;
    char quote = *p;
    const char *end = (quote == '"' || quote == '\'') ? strchr(p + 1, quote) : NULL;
    if (!end)
        return false;
    const char *b = p + 1;
    if (regex && b < end && *b == '^')
        b++;
    if (regex && end > b && end[-1] == '$')
        end--;
    return copy_name(b, (size_t)(end - b), out, out_len);
}

/* The one metric name a seriesQuery selects: name, name{...} or {...__name__="name"...}. */
static bool series_literal(const char *q, char *out, size_t out_len)
{
    while (*q == ' ')
        q++;
    if (*q == '{')
        return name_matcher(q, out, out_len);
    size_t len = 0;
    while (q[len] && is_name_char(q[len], len == 0))
        len++;
    const char *rest = q + len;
    while (*rest == ' ')
        rest++;
    if (*rest != '\0' && *rest != '{')
        return false;
    if (*rest == '{' && strstr(rest, "__name__"))
        return false;
    return copy_name(q, len, out, out_len);
}

/* name.matches as a plain metric name, optionally anchored (^name, name$, ^name$), when the
 * served name is the match itself; false when the series (if known) cannot match it. */
static bool literal_match_name(const char *m, const char *series, char *out, size_t out_len)
{
    bool head = m[0] == '^', tail = strlen(m) > 1 && m[strlen(m) - 1] == '$';
    size_t len = strlen(m + head) - tail;
    if (!copy_name(m + head, len, out, out_len))
        return false;
    if (!series)
        return true;
    size_t sl = strlen(series);
    if (head && tail)
        return strcmp(series, out) == 0;
    if (head)
        return strncmp(series, out, len) == 0;
    if (tail)
        return sl >= len && strcmp(series + sl - len, out) == 0;
    return strstr(series, out) != NULL;
}

/* The API name a rule serves when the config alone tells it (false otherwise, or when the
 * rule can serve nothing): a constant name.as; else `as` empty or $0 with name.matches empty
 * (the series name) or a plain name, optionally anchored (the match itself). */
static bool static_metric_name(const struct cma_config_rule *r, char *out, size_t out_len)
{
    const char *q = r->series_query.set ? r->series_query.s : "";
    const char *as = r->name_as.set ? r->name_as.s : "";
    const char *m = r->name_matches.set ? r->name_matches.s : "";
    if (!q[0] || r->n_series_filters > 0)
        return false;
    if (as[0] && !strchr(as, '$'))
        return (size_t)snprintf(out, out_len, "%s", as) < out_len;
    if (as[0] && strcmp(as, "$0") != 0 && strcmp(as, "${0}") != 0)
        return false;
    char series[256];
    bool known = series_literal(q, series, sizeof(series));
    if (!m[0])
        return known && snprintf(out, out_len, "%s", series) > 0;
    return literal_match_name(m, known ? series : NULL, out, out_len);
}

/* Resource names as written compare case-insensitively, singular or plural ("pod", "Pods"). */
static bool same_resource(const char *a, const char *b)
{
    if (strlen(a) > strlen(b)) { /* a: the shorter one */
        const char *t = a;
        a = b;
        b = t;
    }
    size_t la = strlen(a);
    if (strncasecmp(a, b, la) != 0)
        return false;
    const char *rest = b + la;
    return !*rest || strcasecmp(rest, "s") == 0 || strcasecmp(rest, "es") == 0;
}

static bool same_override_resource(const struct cma_config_override *x,
                                   const struct cma_config_override *y)
{
    const char *gx = x->group.set ? x->group.s : "", *gy = y->group.set ? y->group.s : "";
    return x->resource.set && y->resource.set && strcasecmp(gx, gy) == 0 &&
           same_resource(x->resource.s, y->resource.s);
}

/* The override of `later` serving a resource `earlier` serves too, or NULL. */
static const struct cma_config_override *shared_resource(const struct cma_config_rule *earlier,
                                                         const struct cma_config_rule *later)
{
    for (size_t i = 0; i < later->resources.n_overrides; i++)
        for (size_t j = 0; j < earlier->resources.n_overrides; j++)
            if (same_override_resource(&later->resources.overrides[i],
                                       &earlier->resources.overrides[j]))
                return &later->resources.overrides[i];
    return NULL;
}

static enum cma_errc duplicate_error(const struct cma_config_rule *later,
                                     const struct cma_config_rule *earlier, const char *what,
                                     const char *name, const char *resource, struct cma_err *reterr)
{
    return cma_err_set_at(reterr, CMA_ERR_CONFIG_VALUE, later->pos.file, later->pos.line,
                          later->pos.column,
                          "%s \"%s\"%s%s is also served by the rule at %s:%u:%u: a metric may "
                          "come from one config file only (drop one rule, or rename one with "
                          "name.as)",
                          what, name, resource ? " for resource " : "", resource ? resource : "",
                          earlier->pos.file, earlier->pos.line, earlier->pos.column);
}

/* Checks each rule against the rules of earlier files in the same list. */
static enum cma_errc check_duplicates(const struct cma_config_rule *rules, size_t n, bool external,
                                      struct cma_err *reterr)
{
    for (size_t i = 0; i < n; i++) {
        char ni[256];
        if (!static_metric_name(&rules[i], ni, sizeof(ni)))
            continue;
        for (size_t j = 0; j < i; j++) {
            char nj[256];
            if (rules[j].pos.file == rules[i].pos.file ||
                !static_metric_name(&rules[j], nj, sizeof(nj)) || strcasecmp(ni, nj) != 0)
                continue;
            if (external)
                return duplicate_error(&rules[i], &rules[j], "external metric", ni, NULL, reterr);
            const struct cma_config_override *o = shared_resource(&rules[j], &rules[i]);
            if (o)
                return duplicate_error(&rules[i], &rules[j], "metric", ni, o->resource.s, reterr);
        }
    }
    return CMA_OK;
}

/* Loads files in their order and merges each into the first; *base holds what was merged so far,
 * also on failure (the caller frees it). */
static enum cma_errc merge_files(const struct path_list *files, struct cma_config **base,
                                 struct cma_err *reterr)
{
    enum cma_errc rc = CMA_OK;
    for (size_t i = 0; rc == CMA_OK && i < files->n; i++) {
        struct cma_config *part = NULL;
        rc = load_file_unresolved(files->v[i], &part, reterr);
        if (rc == CMA_OK && !*base)
            *base = part;
        else if (rc == CMA_OK) {
            rc = merge_into(*base, part, reterr);
            cma_config_free(part);
        }
    }
    return rc;
}

/* The checks that span files: backend names, backend references, the same metric twice. */
static enum cma_errc check_merged(struct cma_config *base, struct cma_err *reterr)
{
    enum cma_errc rc = check_backend_names(base, reterr);
    if (rc == CMA_OK)
        rc = resolve_backend_refs(base, reterr);
    if (rc == CMA_OK)
        rc = check_duplicates(base->rules, base->n_rules, false, reterr);
    if (rc == CMA_OK)
        rc = check_duplicates(base->external_rules, base->n_external_rules, true, reterr);
    return rc;
}

static enum cma_errc load_merged(const struct path_list *files, struct cma_config **ret,
                                 struct cma_err *reterr)
{
    struct cma_config *base = NULL;
    enum cma_errc rc = merge_files(files, &base, reterr);
    if (rc == CMA_OK && base)
        rc = check_merged(base, reterr);
    if (rc != CMA_OK || !base) {
        cma_config_free(base);
        return rc != CMA_OK ? rc : cma_err_set(reterr, CMA_ERR_CONFIG_IO, "no config file to load");
    }
    *ret = base;
    return CMA_OK;
}

enum cma_errc cma_config_load_paths(const char *const *paths, size_t n_paths,
                                    struct cma_config **ret, struct cma_err *reterr)
{
    if (n_paths == 0)
        return cma_err_set(reterr, CMA_ERR_CONFIG_IO,
                           "no metrics discovery configuration file specified (make sure to use "
                           "--config)");
    struct path_list files = {0};
    enum cma_errc rc = expand_paths(paths, n_paths, &files, reterr);
    if (rc == CMA_OK)
        rc = load_merged(&files, ret, reterr);
    path_list_done(&files);
    return rc;
}
