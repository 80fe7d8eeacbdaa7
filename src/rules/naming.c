/* naming.c: series name ↔ API metric name for one rule: seriesFilters (is/isNot) and
 * name.matches/as, with Go regexp semantics (unanchored search, leftmost-first, Go Expand). */
#include <stdlib.h>
#include <string.h>

#include "cma/config.h"
#include "cma/regex.h"
#include "cma/rule.h"
#include "rules_internal.h"

struct naming_filter {
    struct cma_regex *re;
    bool negate; /* isNot */
};

struct cma_naming {
    struct naming_filter *filters; /* seriesFilters, then the implicit `is: matches` */
    size_t n_filters;
    struct cma_regex *matches; /* name.matches ("" → ".*") */
    char *as;                  /* name.as, defaulted */
};

void cma_naming_free(struct cma_naming *n)
{
    if (!n)
        return;
    for (size_t i = 0; i < n->n_filters; i++)
        cma_regex_free(n->filters[i].re);
    free(n->filters);
    cma_regex_free(n->matches);
    free(n->as);
    free(n);
}

static enum cma_errc compile_at(const struct cma_config_str *s, const char *pattern,
                                const char *what, struct cma_regex **ret, struct cma_err *reterr)
{
    struct cma_err inner;
    cma_err_clear(&inner);
    if (cma_regex_compile(pattern, ret, &inner) != CMA_OK)
        return cma_rules_err_at(reterr, s, &inner, what);
    return CMA_OK;
}

enum cma_errc cma_naming_compile(const struct cma_config_rule *cfg, struct cma_naming **ret,
                                 struct cma_err *reterr)
{
    struct cma_naming *n = calloc(1, sizeof(*n));
    if (!n)
        return cma_err_set(reterr, CMA_ERR_NOMEM, "out of memory");
    n->filters = calloc(cfg->n_series_filters + 1, sizeof(*n->filters));
    if (!n->filters) {
        cma_naming_free(n);
        return cma_err_set(reterr, CMA_ERR_NOMEM, "out of memory");
    }
    enum cma_errc rc = CMA_OK;
    for (size_t i = 0; i < cfg->n_series_filters && rc == CMA_OK; i++) {
        const struct cma_config_filter *f = &cfg->series_filters[i];
        if (f->is.set == f->is_not.set) {
            rc = cma_err_set_at(reterr, CMA_ERR_CONFIG_VALUE, f->pos.file, f->pos.line,
                                f->pos.column,
                                f->is.set ? "cannot have both an `is` and `isNot` expression in a "
                                            "single filter"
                                          : "must have either an `is` or `isNot` expression in a "
                                            "filter");
            break;
        }
        const struct cma_config_str *s = f->is.set ? &f->is : &f->is_not;
        rc = compile_at(s, s->s, f->is.set ? "seriesFilters.is: " : "seriesFilters.isNot: ",
                        &n->filters[n->n_filters].re, reterr);
        if (rc == CMA_OK)
            n->filters[n->n_filters++].negate = f->is_not.set;
    }
    const struct cma_config_str *m = &cfg->name_matches;
    const char *pattern = m->set && m->s[0] ? m->s : ".*";
    if (rc == CMA_OK)
        rc = compile_at(m, pattern, "name.matches: ", &n->matches, reterr);
    if (rc == CMA_OK && m->set && m->s[0])
        rc = compile_at(m, pattern, "name.matches: ", &n->filters[n->n_filters++].re, reterr);
    if (rc == CMA_OK) {
        const struct cma_config_str *as = &cfg->name_as;
        size_t groups = cma_regex_n_groups(n->matches);
        if (as->set && as->s[0])
            n->as = strdup(as->s);
        else if (groups == 0)
            n->as = strdup("$0");
        else if (groups == 1)
            n->as = strdup("$1");
        else
            rc = cma_err_set_at(reterr, CMA_ERR_CONFIG_VALUE, m->pos.file, m->pos.line,
                                m->pos.column,
                                "must specify an 'as' value for name matcher \"%s\" (it has %zu "
                                "capture groups)",
                                m->s, groups);
        if (rc == CMA_OK && !n->as)
            rc = cma_err_set(reterr, CMA_ERR_NOMEM, "out of memory");
    }
    if (rc != CMA_OK) {
        cma_naming_free(n);
        return rc;
    }
    *ret = n;
    return CMA_OK;
}

bool cma_naming_accepts(const struct cma_naming *n, const char *series, size_t len)
{
    for (size_t i = 0; i < n->n_filters; i++)
        if (cma_regex_match(n->filters[i].re, series, len) == n->filters[i].negate)
            return false;
    return true;
}

bool cma_naming_is_constant(const struct cma_naming *n)
{
    return strchr(n->as, '$') == NULL;
}

/* A metric name must be one path segment: no '/', '%', '?', not "." or "..", not empty. */
static bool is_path_segment(const char *s, size_t len)
{
    if (len == 0 || (len == 1 && s[0] == '.') || (len == 2 && s[0] == '.' && s[1] == '.'))
        return false;
    for (size_t i = 0; i < len; i++)
        if (s[i] == '/' || s[i] == '%' || s[i] == '?' || (unsigned char)s[i] < 0x20)
            return false;
    return true;
}

enum cma_errc cma_naming_metric_name(const struct cma_naming *n, const char *series, size_t len,
                                     struct cma_buf *out, struct cma_err *reterr)
{
    size_t ov[2 * 33];
    size_t n_ov = 2 * (cma_regex_n_groups(n->matches) + 1);
    if (n_ov > sizeof(ov) / sizeof(ov[0]))
        return cma_err_set(reterr, CMA_ERR_RULE, "name.matches has too many groups");
    char *copy = strndup(series, len);
    if (!copy)
        return cma_err_set(reterr, CMA_ERR_NOMEM, "out of memory");
    enum cma_errc rc = CMA_OK;
    size_t start = out->len;
    if (!cma_regex_find(n->matches, copy, len, ov, n_ov))
        rc = cma_err_set(reterr, CMA_ERR_RULE, "series \"%s\" does not match name.matches", copy);
    else if ((rc = cma_regex_expand(n->matches, n->as, copy, ov, out)) != CMA_OK)
        cma_err_set(reterr, rc, "cannot expand name.as");
    else if (!is_path_segment(cma_buf_str(out) + start, out->len - start))
        rc =
            cma_err_set(reterr, CMA_ERR_RULE,
                        "series \"%s\" gives metric name \"%s\", which is not a valid path segment",
                        copy, cma_buf_str(out) + start);
    free(copy);
    return rc;
}
