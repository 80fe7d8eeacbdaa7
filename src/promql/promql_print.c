/* promql_print.c: the PromQL printer: a tree back to Prometheus' one-line canonical text
 * (promql/parser printer.go, Expr.String()), and the pieces of Go formatting it needs: numbers
 * as fmt's %v (shortest round-trip digits, exponent form below 1e-4 and from 1e6: "1e+08"),
 * strings as strconv.Quote (%q), durations as model.Duration.String() ("1h30m", "90d", "1y"),
 * @ timestamps as "%.3f" seconds.
 *
 * Canonical means: matchers sorted by their text, the __name__ matcher folded into the name,
 * one space around binary operators, "by (a, b)" before the parenthesised argument, "@" before
 * "offset", parentheses exactly where the tree has them (the parser keeps them as nodes).
 * Differences from Prometheus 2.42's output, on purpose: a group_left/group_right after an
 * empty ignoring() is printed (2.42 drops it, which changes the query's meaning), and
 * Prometheus 3 names (quoted when not a legacy name: {"a.b"}, by ("a.b")).
 * Recursion is bounded by the tree height the parser allows (CMA_PROMQL_MAX_HEIGHT). */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "cma/promql.h"
#include "cma/unicode.h"
#include "cma/utf8.h"
#include "promql_internal.h"

bool cma_pq_is_label_name(const char *s, size_t len)
{
    if (len == 0)
        return false;
    for (size_t i = 0; i < len; i++) {
        char c = s[i];
        bool ok = c == '_' || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
                  (i > 0 && c >= '0' && c <= '9');
        if (!ok)
            return false;
    }
    return true;
}

bool cma_pq_is_metric_name(const char *s, size_t len)
{
    if (len == 0)
        return false;
    for (size_t i = 0; i < len; i++) {
        char c = s[i];
        bool ok = c == '_' || c == ':' || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
                  (i > 0 && c >= '0' && c <= '9');
        if (!ok)
            return false;
    }
    return true;
}

static enum cma_errc append_hex(struct cma_buf *out, const char *prefix, uint32_t v, int digits)
{
    static const char hex[] = "0123456789abcdef";
    char tmp[10];
    for (int i = digits - 1; i >= 0; i--) {
        tmp[i] = hex[v & 0xf];
        v >>= 4;
    }
    enum cma_errc rc = cma_buf_appends(out, prefix);
    return rc == CMA_OK ? cma_buf_append(out, tmp, (size_t)digits) : rc;
}

static enum cma_errc quote_rune(struct cma_buf *out, uint32_t r, const char *raw, size_t width)
{
    static const char controls[] = "\a\b\f\n\r\t\v";
    static const char letters[] = "abfnrtv";
    if (r == '"' || r == '\\') {
        char two[2] = {'\\', (char)r};
        return cma_buf_append(out, two, 2);
    }
    if (cma_unicode_is_print(r))
        return cma_buf_append(out, raw, width);
    /* only below 0x80: strchr compares as char, and U+4F600 would match the NUL */
    const char *c = r != 0 && r < 0x80 ? strchr(controls, (int)r) : NULL;
    if (c) {
        char two[2] = {'\\', letters[c - controls]};
        return cma_buf_append(out, two, 2);
    }
    if (r < ' ' || r == 0x7f)
        return append_hex(out, "\\x", r, 2);
    if (r < 0x10000)
        return append_hex(out, "\\u", r, 4);
    return append_hex(out, "\\U", r, 8);
}

enum cma_errc cma_pq_quote(struct cma_buf *out, const char *s, size_t len)
{
    enum cma_errc rc = cma_buf_appendc(out, '"');
    size_t i = 0;
    while (rc == CMA_OK && i < len) {
        size_t width = 0;
        uint32_t r = cma_utf8_decode(s + i, len - i, &width);
        if (r == CMA_UTF8_RUNE_ERROR && width == 1)
            rc = append_hex(out, "\\x", (unsigned char)s[i], 2);
        else
            rc = quote_rune(out, r, s + i, width);
        i += width;
    }
    return rc == CMA_OK ? cma_buf_appendc(out, '"') : rc;
}

/* the shortest decimal digits that read back as v (v finite, >= 0), without trailing zeros,
 * and the decimal exponent of the first one */
static size_t shortest_digits(double v, char digits[24], int *ret_exp)
{
    char e[40];
    for (int prec = 0; prec < 17; prec++) {
        snprintf(e, sizeof(e), "%.*e", prec, v);
        if (strtod(e, NULL) == v)
            break;
    }
    /* e is "d[.ddd]e[+-]XX" */
    size_t nd = 0;
    const char *p = e;
    for (; *p && *p != 'e'; p++)
        if (*p != '.')
            digits[nd++] = *p;
    *ret_exp = atoi(p + 1);
    while (nd > 1 && digits[nd - 1] == '0')
        nd--;
    return nd;
}

/* d[.ddd]e+XX */
static enum cma_errc append_exponent_form(struct cma_buf *out, const char *digits, size_t nd,
                                          int exp)
{
    enum cma_errc rc = cma_buf_append(out, digits, 1);
    if (rc == CMA_OK && nd > 1) {
        rc = cma_buf_appendc(out, '.');
        if (rc == CMA_OK)
            rc = cma_buf_append(out, digits + 1, nd - 1);
    }
    return rc == CMA_OK ? cma_buf_printf(out, "e%c%02d", exp < 0 ? '-' : '+', abs(exp)) : rc;
}

static enum cma_errc append_fixed_form(struct cma_buf *out, const char *digits, size_t nd, int exp)
{
    enum cma_errc rc = CMA_OK;
    if (exp < 0) {
        rc = cma_buf_appends(out, "0.");
        for (int i = -1; rc == CMA_OK && i > exp; i--)
            rc = cma_buf_appendc(out, '0');
        return rc == CMA_OK ? cma_buf_append(out, digits, nd) : rc;
    }
    for (int i = 0; rc == CMA_OK && i <= exp; i++)
        rc = cma_buf_appendc(out, (size_t)i < nd ? digits[i] : '0');
    if (rc == CMA_OK && nd > (size_t)exp + 1) {
        rc = cma_buf_appendc(out, '.');
        if (rc == CMA_OK)
            rc = cma_buf_append(out, digits + exp + 1, nd - (size_t)exp - 1);
    }
    return rc;
}

/* fmt.Sprint(float64): strconv.FormatFloat(v, 'g', -1, 64), whose shortest form switches to
 * the exponent form below 1e-4 and from 1e6 ("1e+08") */
static enum cma_errc append_number(struct cma_buf *out, double v)
{
    if (isnan(v))
        return cma_buf_appends(out, "NaN");
    if (isinf(v))
        return cma_buf_appends(out, v > 0 ? "+Inf" : "-Inf");
    char digits[24];
    int exp = 0;
    size_t nd = shortest_digits(fabs(v), digits, &exp);
    enum cma_errc rc = signbit(v) ? cma_buf_appendc(out, '-') : CMA_OK;
    if (rc != CMA_OK)
        return rc;
    if (exp < -4 || exp >= 6)
        return append_exponent_form(out, digits, nd, exp);
    return append_fixed_form(out, digits, nd, exp);
}

/* model.Duration.String() */
static enum cma_errc append_duration(struct cma_buf *out, int64_t ms)
{
    static const struct {
        const char *unit;
        int64_t ms;
        bool exact; /* years and weeks only when nothing is left over */
    } units[] = {
        {"y", 365LL * 24 * 3600 * 1000, true},
        {"w", 7LL * 24 * 3600 * 1000, true},
        {"d", 24LL * 3600 * 1000, false},
        {"h", 3600LL * 1000, false},
        {"m", 60LL * 1000, false},
        {"s", 1000, false},
        {"ms", 1, false},
    };
    if (ms == 0)
        return cma_buf_appends(out, "0s");
    enum cma_errc rc = CMA_OK;
    for (size_t i = 0; rc == CMA_OK && i < sizeof(units) / sizeof(units[0]); i++) {
        if (units[i].exact && ms % units[i].ms != 0)
            continue;
        int64_t v = ms / units[i].ms;
        if (v > 0) {
            rc = cma_buf_append_u64(out, (unsigned long long)v);
            if (rc == CMA_OK)
                rc = cma_buf_appends(out, units[i].unit);
            ms -= v * units[i].ms;
        }
    }
    return rc;
}

static enum cma_errc append_mods(struct cma_buf *out, const struct pq_mods *m)
{
    enum cma_errc rc = CMA_OK;
    if (m->at == PQ_AT_TIME)
        rc = cma_buf_printf(out, " @ %.3f", (double)m->at_ms / 1000.0);
    else if (m->at == PQ_AT_START)
        rc = cma_buf_appends(out, " @ start()");
    else if (m->at == PQ_AT_END)
        rc = cma_buf_appends(out, " @ end()");
    if (rc != CMA_OK || m->offset_ms == 0)
        return rc;
    rc = cma_buf_appends(out, m->offset_ms < 0 ? " offset -" : " offset ");
    if (rc == CMA_OK)
        rc = append_duration(out, m->offset_ms < 0 ? -m->offset_ms : m->offset_ms);
    return rc;
}

/* Words the lexer reads as something else wherever a name can stand (case-insensitive):
 * numbers everywhere, and the binary-operator keywords that can never be a metric name. */
static bool is_reserved(const struct pq_str *name, bool metric)
{
    static const char *const words[] = {"inf",        "nan",         "on",   "ignoring",
                                        "group_left", "group_right", "bool", "atan2"};
    size_t n = metric ? sizeof(words) / sizeof(words[0]) : 2;
    for (size_t i = 0; i < n; i++)
        if (strlen(words[i]) == name->len && strncasecmp(words[i], name->s, name->len) == 0)
            return true;
    return false;
}

/* a grouping label: bare when it is a legacy name the lexer reads back as one, quoted otherwise
 * (Prometheus 3); matcher names are always read as names inside braces */
static enum cma_errc append_grouping_label(struct cma_buf *out, const struct pq_str *name)
{
    if (cma_pq_is_label_name(name->s, name->len) && !is_reserved(name, false))
        return cma_buf_append(out, name->s, name->len);
    return cma_pq_quote(out, name->s, name->len);
}

/* a matcher's label name: bare when it is a legacy name, quoted otherwise (Prometheus 3) */
static enum cma_errc append_label(struct cma_buf *out, const struct pq_str *name)
{
    if (cma_pq_is_label_name(name->s, name->len))
        return cma_buf_append(out, name->s, name->len);
    return cma_pq_quote(out, name->s, name->len);
}

static enum cma_errc append_matcher(struct cma_buf *out, const struct pq_matcher *m)
{
    static const char *const ops[] = {"=", "!=", "=~", "!~"};
    enum cma_errc rc = append_label(out, &m->name);
    if (rc == CMA_OK)
        rc = cma_buf_appends(out, ops[m->op]);
    return rc == CMA_OK ? cma_pq_quote(out, m->value.s, m->value.len) : rc;
}

static int compare_text(const void *a, const void *b)
{
    const struct pq_str *x = a, *y = b;
    size_t n = x->len < y->len ? x->len : y->len;
    int c = memcmp(x->s, y->s, n);
    if (c != 0)
        return c;
    return x->len < y->len ? -1 : x->len > y->len ? 1 : 0;
}

static bool is_name_matcher(const struct pq_node *n, const struct pq_matcher *m)
{
    const struct pq_str *name = &n->u.sel.name;
    return m->op == PQ_M_EQ && m->name.len == 8 && memcmp(m->name.s, "__name__", 8) == 0 &&
           name->len > 0 && m->value.len == name->len &&
           memcmp(m->value.s, name->s, name->len) == 0;
}

/* texts[i]: the text of each matcher but the name's, in all; sorted */
static enum cma_errc matcher_texts(const struct pq_node *n, struct cma_buf *all,
                                   struct pq_str *texts, size_t *ret_n)
{
    size_t nt = 0, start = 0;
    enum cma_errc rc = CMA_OK;
    for (size_t i = 0; rc == CMA_OK && i < n->u.sel.n_matchers; i++) {
        if (is_name_matcher(n, &n->u.sel.matchers[i]))
            continue;
        rc = append_matcher(all, &n->u.sel.matchers[i]);
        texts[nt++] = (struct pq_str){NULL, all->len - start};
        start = all->len;
    }
    if (rc != CMA_OK)
        return rc;
    /* the buffer may have moved while it grew: point into it only now */
    for (size_t i = 0, off = 0; i < nt; off += texts[i].len, i++)
        texts[i].s = cma_buf_str(all) + off;
    qsort(texts, nt, sizeof(*texts), compare_text);
    *ret_n = nt;
    return CMA_OK;
}

/* the matchers' texts, sorted, joined by "," (the __name__ one folded into the name) */
static enum cma_errc append_matchers(struct cma_buf *out, const struct pq_node *n, bool *ret_any)
{
    struct cma_buf all;
    cma_buf_init(&all, out->max);
    struct pq_str *texts = calloc(n->u.sel.n_matchers + 1, sizeof(*texts));
    size_t nt = 0;
    enum cma_errc rc = texts ? matcher_texts(n, &all, texts, &nt) : CMA_ERR_NOMEM;
    for (size_t i = 0; rc == CMA_OK && i < nt; i++) {
        if (i > 0)
            rc = cma_buf_appendc(out, ',');
        if (rc == CMA_OK)
            rc = cma_buf_append(out, texts[i].s, texts[i].len);
    }
    *ret_any = nt > 0;
    free(texts);
    cma_buf_done(&all);
    return rc;
}

/* "{" ["name",] matchers "}" after the name; nothing when there is nothing to put in them */
static enum cma_errc append_braces(struct cma_buf *out, const struct pq_node *n, bool quoted_name)
{
    size_t before = out->len;
    bool any = quoted_name, more = false;
    enum cma_errc rc = cma_buf_appendc(out, '{');
    if (rc == CMA_OK && quoted_name) {
        rc = cma_pq_quote(out, n->u.sel.name.s, n->u.sel.name.len);
        if (rc == CMA_OK && n->u.sel.n_matchers > 1)
            rc = cma_buf_appendc(out, ',');
    }
    if (rc == CMA_OK)
        rc = append_matchers(out, n, &more);
    if (rc != CMA_OK)
        return rc;
    if (any || more)
        return cma_buf_appendc(out, '}');
    out->len = before; /* nothing but the name: no braces */
    out->ptr[before] = '\0';
    return CMA_OK;
}

static enum cma_errc append_selector(struct cma_buf *out, const struct pq_node *n, bool mods)
{
    const struct pq_str *name = &n->u.sel.name;
    bool legacy =
        name->len == 0 || (cma_pq_is_metric_name(name->s, name->len) && !is_reserved(name, true));
    enum cma_errc rc = CMA_OK;
    if (legacy)
        rc = cma_buf_append(out, name->s, name->len);
    if (rc == CMA_OK)
        rc = append_braces(out, n, !legacy);
    if (rc == CMA_OK && mods)
        rc = append_mods(out, &n->u.sel.mods);
    return rc;
}

static enum cma_errc append_labels(struct cma_buf *out, const struct pq_labels *l)
{
    enum cma_errc rc = cma_buf_appendc(out, '(');
    for (size_t i = 0; rc == CMA_OK && i < l->n; i++) {
        if (i > 0)
            rc = cma_buf_appends(out, ", ");
        if (rc == CMA_OK)
            rc = append_grouping_label(out, &l->items[i]);
    }
    return rc == CMA_OK ? cma_buf_appendc(out, ')') : rc;
}

static enum cma_errc print_node(struct cma_buf *out, const struct pq_node *n);

static enum cma_errc print_call(struct cma_buf *out, const struct pq_node *n)
{
    enum cma_errc rc = cma_buf_appends(out, n->u.call.fn->name);
    if (rc == CMA_OK)
        rc = cma_buf_appendc(out, '(');
    for (size_t i = 0; rc == CMA_OK && i < n->u.call.n_args; i++) {
        if (i > 0)
            rc = cma_buf_appends(out, ", ");
        if (rc == CMA_OK)
            rc = print_node(out, n->u.call.args[i]);
    }
    return rc == CMA_OK ? cma_buf_appendc(out, ')') : rc;
}

static enum cma_errc print_aggregate(struct cma_buf *out, const struct pq_node *n)
{
    enum cma_errc rc = cma_buf_appends(out, cma_pq_agg_name(n->u.agg.op));
    if (rc == CMA_OK && (n->u.agg.without || n->u.agg.grouping.n > 0)) {
        rc = cma_buf_appends(out, n->u.agg.without ? " without " : " by ");
        if (rc == CMA_OK)
            rc = append_labels(out, &n->u.agg.grouping);
        if (rc == CMA_OK)
            rc = cma_buf_appendc(out, ' ');
    }
    if (rc == CMA_OK)
        rc = cma_buf_appendc(out, '(');
    if (rc == CMA_OK && n->u.agg.param) {
        rc = print_node(out, n->u.agg.param);
        if (rc == CMA_OK)
            rc = cma_buf_appends(out, ", ");
    }
    if (rc == CMA_OK)
        rc = print_node(out, n->u.agg.expr);
    return rc == CMA_OK ? cma_buf_appendc(out, ')') : rc;
}

static enum cma_errc print_matching(struct cma_buf *out, const struct pq_node *n)
{
    bool grouped = n->u.bin.card == PQ_CARD_MANY_TO_ONE || n->u.bin.card == PQ_CARD_ONE_TO_MANY;
    if (!n->u.bin.has_matching || (n->u.bin.matching.n == 0 && !n->u.bin.on && !grouped))
        return CMA_OK;
    enum cma_errc rc = cma_buf_appends(out, n->u.bin.on ? " on " : " ignoring ");
    if (rc == CMA_OK)
        rc = append_labels(out, &n->u.bin.matching);
    if (rc != CMA_OK || !grouped)
        return rc;
    rc = cma_buf_appends(out,
                         n->u.bin.card == PQ_CARD_MANY_TO_ONE ? " group_left " : " group_right ");
    return rc == CMA_OK ? append_labels(out, &n->u.bin.include) : rc;
}

static enum cma_errc print_binary(struct cma_buf *out, const struct pq_node *n)
{
    const struct pq_node *lhs = n->u.bin.lhs;
    enum cma_errc rc;
    /* "+Inf ^ x" would read back as +(Inf ^ x): the one place +Inf is printed "Inf" (Prometheus
     * prints "+Inf ^ x", which it then reads as "++Inf ^ x") */
    if (n->u.bin.op == PQ_POW && lhs->kind == PQ_N_NUMBER && isinf(lhs->u.number) &&
        lhs->u.number > 0)
        rc = cma_buf_appends(out, "Inf");
    else
        rc = print_node(out, lhs);
    if (rc == CMA_OK)
        rc = cma_buf_appendc(out, ' ');
    if (rc == CMA_OK)
        rc = cma_buf_appends(out, cma_pq_binop_name(n->u.bin.op));
    if (rc == CMA_OK && n->u.bin.ret_bool)
        rc = cma_buf_appends(out, " bool");
    if (rc == CMA_OK)
        rc = print_matching(out, n);
    if (rc == CMA_OK)
        rc = cma_buf_appendc(out, ' ');
    return rc == CMA_OK ? print_node(out, n->u.bin.rhs) : rc;
}

static enum cma_errc print_range(struct cma_buf *out, const struct pq_node *n)
{
    bool sub = n->kind == PQ_N_SUBQUERY;
    enum cma_errc rc =
        sub ? print_node(out, n->u.sub.expr) : append_selector(out, n->u.matrix.sel, false);
    if (rc == CMA_OK)
        rc = cma_buf_appendc(out, '[');
    if (rc == CMA_OK)
        rc = append_duration(out, sub ? n->u.sub.range_ms : n->u.matrix.range_ms);
    if (rc == CMA_OK && sub) {
        rc = cma_buf_appendc(out, ':');
        if (rc == CMA_OK && n->u.sub.step_ms != 0)
            rc = append_duration(out, n->u.sub.step_ms);
    }
    if (rc == CMA_OK)
        rc = cma_buf_appendc(out, ']');
    if (rc == CMA_OK)
        rc = append_mods(out, sub ? &n->u.sub.mods : &n->u.matrix.sel->u.sel.mods);
    return rc;
}

static enum cma_errc print_node(struct cma_buf *out, const struct pq_node *n)
{
    enum cma_errc rc;
    switch (n->kind) {
    case PQ_N_NUMBER:
        return append_number(out, n->u.number);
    case PQ_N_STRING:
        return cma_pq_quote(out, n->u.string.s, n->u.string.len);
    case PQ_N_SELECTOR:
        return append_selector(out, n, true);
    case PQ_N_MATRIX:
    case PQ_N_SUBQUERY:
        return print_range(out, n);
    case PQ_N_CALL:
        return print_call(out, n);
    case PQ_N_AGGREGATE:
        return print_aggregate(out, n);
    case PQ_N_BINARY:
        return print_binary(out, n);
    case PQ_N_UNARY:
        rc = cma_buf_appendc(out, n->u.unary.op == PQ_SUB ? '-' : '+');
        return rc == CMA_OK ? print_node(out, n->u.unary.expr) : rc;
    case PQ_N_PAREN:
        rc = cma_buf_appendc(out, '(');
        if (rc == CMA_OK)
            rc = print_node(out, n->u.paren);
        return rc == CMA_OK ? cma_buf_appendc(out, ')') : rc;
    }
    return CMA_ERR_INTERNAL;
}

enum cma_errc cma_promql_print(const struct cma_promql *q, struct cma_buf *out)
{
    return print_node(out, q->root);
}
