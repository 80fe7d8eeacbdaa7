/* promql_parse.c: the PromQL parser: tokens (promql_lex.c) to a tree in the query's arena, with
 * the checks Prometheus makes while parsing (promql/parser: generated_parser.y, parse.go
 * checkAST): operand and argument types, function arity, aggregation parameters, vector
 * matching rules, modifiers that may appear once and only on selectors and subqueries, ranges
 * only on selectors, durations above zero, selectors that cannot match everything, regular
 * expressions that compile.
 *
 * DESIGN: precedence climbing over the binary operators (or < and/unless < comparisons < + - <
 * * / % atan2 < ^, all left-associative but ^), with unary +/- binding looser than ^ and tighter
 * than * (the grammar's %prec MUL) and the postfix forms ([range], [range:step], offset, @)
 * binding tightest, as in the yacc grammar. A unary minus on a number literal folds into the
 * literal, as Prometheus does. Words that are keywords are metric names where the grammar
 * allows it (sum, by, offset, start, end, and, or, unless, ...): an aggregation operator is an
 * aggregation only when "(", "by" or "without" follows it; a plain word is a function call only
 * when "(" follows it. Recursion is bounded by CMA_PROMQL_MAX_DEPTH, the tree by
 * CMA_PROMQL_MAX_NODES. Prometheus 3 additions accepted: quoted metric and label names
 * ({"a.b", "c.d"="x"}, by ("a.b")), limitk and limit_ratio, the newer functions. */
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "cma/promql.h"
#include "promql_internal.h"

struct parser {
    struct pq_lexer lx;
    struct pq_token tok; /* the current token (look-ahead) */
    struct cma_promql *q;
    struct cma_err *err;
    unsigned depth;
};

static enum cma_errc advance(struct parser *p)
{
    return cma_pq_lex_next(&p->lx, &p->tok, p->err);
}

/* A parser invariant (a sub-parser that returned CMA_OK has set its node), checked in every build
 * type: assert() vanishes under NDEBUG, and then neither a Release build nor the static analyser
 * (which reads the RelWithDebInfo flags) would see the guarantee. */
static void invariant(bool holds)
{
    if (!holds)
        abort();
}

static enum cma_errc fail(struct parser *p, size_t pos, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static enum cma_errc fail(struct parser *p, size_t pos, const char *fmt, ...)
{
    char msg[CMA_ERR_MSG_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    cma_pq_error_at(p->err, CMA_ERR_RULE, p->lx.src, pos, "%s", msg);
    return CMA_ERR_RULE;
}

/* "unexpected <token> in <context>[, expected <what>]" */
static enum cma_errc unexpected(struct parser *p, const char *context, const char *expected)
{
    const struct pq_token *t = &p->tok;
    char what[96];
    if (t->type == PQ_EOF)
        snprintf(what, sizeof(what), "end of input");
    else
        snprintf(what, sizeof(what), "\"%.*s\"", (int)(t->len > 60 ? 60 : t->len),
                 p->lx.src + t->pos);
    return fail(p, t->pos, "unexpected %s%s%s%s%s", what, context ? " in " : "",
                context ? context : "", expected ? ", expected " : "", expected ? expected : "");
}

static struct pq_node *new_node(struct parser *p, enum pq_kind kind, size_t pos)
{
    if (p->q->n_nodes >= CMA_PROMQL_MAX_NODES) {
        cma_pq_error_at(p->err, CMA_ERR_TOO_LARGE, p->lx.src, pos, "query has more than %d nodes",
                        CMA_PROMQL_MAX_NODES);
        return NULL;
    }
    struct pq_node *n = cma_arena_alloc(&p->q->arena, sizeof(*n));
    if (!n) {
        cma_err_set(p->err, p->q->arena.rc, "out of memory parsing a query");
        return NULL;
    }
    p->q->n_nodes++;
    n->kind = kind;
    n->pos = pos;
    return n;
}

static unsigned max_u(unsigned a, unsigned b)
{
    return a > b ? a : b;
}

/* Sets the type and height of a node whose children are complete; refuses a tree taller than
 * CMA_PROMQL_MAX_HEIGHT. */
static enum cma_errc finish(struct parser *p, struct pq_node *n)
{
    unsigned h = 0;
    switch (n->kind) {
    case PQ_N_MATRIX:
        h = n->u.matrix.sel->height;
        break;
    case PQ_N_SUBQUERY:
        h = n->u.sub.expr->height;
        break;
    case PQ_N_CALL:
        for (size_t i = 0; i < n->u.call.n_args; i++)
            h = max_u(h, n->u.call.args[i]->height);
        break;
    case PQ_N_AGGREGATE:
        h = max_u(n->u.agg.expr ? n->u.agg.expr->height : 0,
                  n->u.agg.param ? n->u.agg.param->height : 0);
        break;
    case PQ_N_BINARY:
        h = max_u(n->u.bin.lhs->height, n->u.bin.rhs->height);
        break;
    case PQ_N_UNARY:
        h = n->u.unary.expr->height;
        break;
    case PQ_N_PAREN:
        h = n->u.paren->height;
        break;
    default:
        break;
    }
    n->height = h + 1;
    n->type = cma_pq_node_type(n);
    if (n->height <= CMA_PROMQL_MAX_HEIGHT)
        return CMA_OK;
    cma_pq_error_at(p->err, CMA_ERR_TOO_LARGE, p->lx.src, n->pos,
                    "expression nested deeper than %d levels", CMA_PROMQL_MAX_HEIGHT);
    return CMA_ERR_TOO_LARGE;
}

static enum cma_errc nomem(struct parser *p)
{
    return cma_err_set(p->err, p->q->arena.rc ? p->q->arena.rc : CMA_ERR_NOMEM,
                       "out of memory parsing a query");
}

static bool is_word(const struct pq_token *t)
{
    return t->type == PQ_IDENT || t->type == PQ_LAND || t->type == PQ_LOR ||
           t->type == PQ_LUNLESS || t->type == PQ_ATAN2;
}

static bool is_kw(const struct pq_token *t, enum pq_kw kw)
{
    return t->type == PQ_IDENT && t->kw == kw;
}

static enum cma_errc expect(struct parser *p, enum pq_tok type, const char *context,
                            const char *expected)
{
    if (p->tok.type != type)
        return unexpected(p, context, expected);
    return advance(p);
}

static enum cma_errc expect_type(struct parser *p, const struct pq_node *n, enum pq_type want,
                                 const char *context)
{
    enum pq_type got = n->type;
    if (got == want)
        return CMA_OK;
    return fail(p, n->pos, "expected type %s in %s, got %s", cma_pq_type_name(want), context,
                cma_pq_type_name(got));
}

/* ---- literals ---- */

static enum cma_errc take_string(struct parser *p, struct pq_str *ret)
{
    char *s = NULL;
    size_t n = 0;
    enum cma_errc rc =
        cma_pq_unquote(&p->q->arena, p->lx.src + p->tok.pos, p->tok.len, p->lx.src, &s, &n, p->err);
    if (rc != CMA_OK)
        return rc;
    ret->s = s;
    ret->len = n;
    return advance(p);
}

static enum cma_errc take_word(struct parser *p, struct pq_str *ret)
{
    char *s = cma_arena_strndup(&p->q->arena, p->lx.src + p->tok.pos, p->tok.len);
    if (!s)
        return nomem(p);
    ret->s = s;
    ret->len = p->tok.len;
    return advance(p);
}

/* a DURATION token, above zero */
static enum cma_errc take_duration(struct parser *p, const char *context, int64_t *ret_ms)
{
    if (p->tok.type != PQ_DURATION)
        return unexpected(p, context, "duration");
    enum cma_errc rc = cma_pq_parse_duration(p->lx.src + p->tok.pos, p->tok.len, ret_ms);
    if (rc == CMA_ERR_TOO_LARGE)
        return fail(p, p->tok.pos, "duration out of range: \"%.*s\"", (int)p->tok.len,
                    p->lx.src + p->tok.pos);
    if (rc != CMA_OK)
        return fail(p, p->tok.pos, "not a valid duration string: \"%.*s\"", (int)p->tok.len,
                    p->lx.src + p->tok.pos);
    if (*ret_ms == 0)
        return fail(p, p->tok.pos, "duration must be greater than 0");
    return advance(p);
}

static enum cma_errc take_number(struct parser *p, double *ret)
{
    if (cma_pq_parse_number(p->lx.src + p->tok.pos, p->tok.len, ret) != CMA_OK)
        return fail(p, p->tok.pos, "error parsing number: \"%.*s\"", (int)p->tok.len,
                    p->lx.src + p->tok.pos);
    return advance(p);
}

/* ---- label lists: "(a, b,)" ---- */

static enum cma_errc grouping_labels(struct parser *p, const char *context, struct pq_labels *ret)
{
    enum cma_errc rc = expect(p, PQ_LPAREN, context, "\"(\"");
    struct pq_str items[64];
    size_t n = 0;
    while (rc == CMA_OK && p->tok.type != PQ_RPAREN) {
        if (n == sizeof(items) / sizeof(items[0]))
            return fail(p, p->tok.pos, "more than %zu labels in a grouping list", n);
        if (is_word(&p->tok))
            rc = take_word(p, &items[n++]);
        else if (p->tok.type == PQ_STRING)
            rc = take_string(p, &items[n++]);
        else
            return unexpected(p, context, "label");
        if (rc == CMA_OK && p->tok.type != PQ_RPAREN)
            rc = expect(p, PQ_COMMA, context, "\",\" or \")\"");
    }
    if (rc != CMA_OK)
        return rc;
    ret->n = n;
    ret->items = cma_arena_array(&p->q->arena, n ? n : 1, sizeof(*items));
    if (!ret->items)
        return nomem(p);
    memcpy(ret->items, items, n * sizeof(*items));
    return advance(p);
}

/* ---- selectors ---- */

/* Does the anchored regex match ""? Fails when it does not compile, or uses what RE2 lacks
 * (promql_regex.c). */
static enum cma_errc regex_matches_empty(struct parser *p, const struct pq_matcher *m, size_t pos,
                                         bool *ret)
{
    const char *bad = cma_pq_regex_check(m->value.s, m->value.len);
    if (bad)
        return fail(p, pos, "error parsing regexp: %s: `%s`", bad, m->value.s);
    char *anchored = cma_arena_alloc(&p->q->arena, m->value.len + 8);
    if (!anchored)
        return nomem(p);
    /* "^(?:" value ")$": the value may hold NUL bytes, so no string functions */
    static const char open[] = {'^', '(', '?', ':'}, close[] = {')', '$', '\0'};
    for (size_t i = 0; i < sizeof(open); i++)
        anchored[i] = open[i];
    for (size_t i = 0; i < m->value.len; i++)
        anchored[4 + i] = m->value.s[i];
    for (size_t i = 0; i < sizeof(close); i++)
        anchored[4 + m->value.len + i] = close[i];
    int code = 0;
    PCRE2_SIZE off = 0;
    pcre2_code *re = pcre2_compile((PCRE2_SPTR)anchored, m->value.len + 6,
                                   PCRE2_UTF | PCRE2_MATCH_INVALID_UTF | PCRE2_NO_AUTO_CAPTURE,
                                   &code, &off, NULL);
    if (!re) {
        PCRE2_UCHAR text[120];
        pcre2_get_error_message(code, text, sizeof(text));
        return fail(p, pos, "error parsing regexp: %s", (const char *)text);
    }
    pcre2_match_data *md = pcre2_match_data_create_from_pattern(re, NULL);
    int n = md ? pcre2_match(re, (PCRE2_SPTR) "", 0, 0, 0, md, NULL) : PCRE2_ERROR_NOMEMORY;
    pcre2_match_data_free(md);
    pcre2_code_free(re);
    if (n == PCRE2_ERROR_NOMEMORY)
        return nomem(p);
    *ret = n >= 0;
    return CMA_OK;
}

static enum cma_errc matcher_matches_empty(struct parser *p, const struct pq_matcher *m, size_t pos,
                                           bool *ret)
{
    switch (m->op) {
    case PQ_M_EQ:
        *ret = m->value.len == 0;
        return CMA_OK;
    case PQ_M_NEQ:
        *ret = m->value.len != 0;
        return CMA_OK;
    case PQ_M_RE:
        return regex_matches_empty(p, m, pos, ret);
    case PQ_M_NRE: {
        enum cma_errc rc = regex_matches_empty(p, m, pos, ret);
        *ret = !*ret;
        return rc;
    }
    }
    return CMA_OK;
}

static enum cma_errc match_op(struct parser *p, enum pq_match *ret)
{
    switch (p->tok.type) {
    case PQ_EQL:
        *ret = PQ_M_EQ;
        break;
    case PQ_NEQ:
        *ret = PQ_M_NEQ;
        break;
    case PQ_EQL_REGEX:
        *ret = PQ_M_RE;
        break;
    case PQ_NEQ_REGEX:
        *ret = PQ_M_NRE;
        break;
    default:
        return unexpected(p, "label matching", "label matching operator");
    }
    return advance(p);
}

/* one matcher, or (Prometheus 3) a quoted metric name alone */
static enum cma_errc one_matcher(struct parser *p, struct pq_node *sel, struct pq_matcher *m,
                                 bool *ret_is_name)
{
    enum cma_errc rc;
    bool quoted = p->tok.type == PQ_STRING;
    m->pos = p->tok.pos;
    if (quoted)
        rc = take_string(p, &m->name);
    else if (p->tok.type == PQ_IDENT)
        rc = take_word(p, &m->name);
    else
        return unexpected(p, "label matching", "identifier or \"}\"");
    if (rc != CMA_OK)
        return rc;
    *ret_is_name = false;
    if (quoted && (p->tok.type == PQ_COMMA || p->tok.type == PQ_RBRACE)) {
        if (sel->u.sel.name.len > 0)
            return fail(p, sel->pos, "metric name must not be set twice");
        sel->u.sel.name = m->name;
        *ret_is_name = true;
        return CMA_OK;
    }
    if ((rc = match_op(p, &m->op)) != CMA_OK)
        return rc;
    if (p->tok.type != PQ_STRING)
        return unexpected(p, "label matching", "string");
    return take_string(p, &m->value);
}

static enum cma_errc matcher_list(struct parser *p, struct pq_node *sel)
{
    struct pq_matcher items[128];
    size_t n = 0;
    enum cma_errc rc = advance(p); /* '{' */
    while (rc == CMA_OK && p->tok.type != PQ_RBRACE) {
        if (n == sizeof(items) / sizeof(items[0]))
            return fail(p, p->tok.pos, "more than %zu matchers in a selector", n);
        bool is_name = false;
        rc = one_matcher(p, sel, &items[n], &is_name);
        if (rc == CMA_OK && !is_name)
            n++;
        if (rc == CMA_OK && p->tok.type != PQ_RBRACE)
            rc = expect(p, PQ_COMMA, "label matching", "\",\" or \"}\"");
    }
    if (rc != CMA_OK)
        return rc;
    sel->u.sel.matchers = cma_arena_array(&p->q->arena, n + 1, sizeof(*items));
    if (!sel->u.sel.matchers)
        return nomem(p);
    memcpy(sel->u.sel.matchers, items, n * sizeof(*items));
    sel->u.sel.n_matchers = n;
    return advance(p); /* '}' */
}

/* parse.go assembleVectorSelector and checkAST's selector rules */
static enum cma_errc finish_selector(struct parser *p, struct pq_node *sel)
{
    bool all_empty = true;
    for (size_t i = 0; i < sel->u.sel.n_matchers; i++) {
        const struct pq_matcher *m = &sel->u.sel.matchers[i];
        if (sel->u.sel.name.len > 0 && m->name.len == 8 && memcmp(m->name.s, "__name__", 8) == 0)
            return fail(p, sel->pos, "metric name must not be set twice: \"%s\" or \"%s\"",
                        sel->u.sel.name.s, m->value.s);
        bool empty = false;
        enum cma_errc rc = matcher_matches_empty(p, m, m->pos, &empty);
        if (rc != CMA_OK)
            return rc;
        all_empty = all_empty && empty;
    }
    if (sel->u.sel.name.len > 0) {
        struct pq_matcher *m = &sel->u.sel.matchers[sel->u.sel.n_matchers++];
        m->name = (struct pq_str){"__name__", 8};
        m->op = PQ_M_EQ;
        m->value = sel->u.sel.name;
        all_empty = false;
    }
    if (all_empty)
        return fail(p, sel->pos, "vector selector must contain at least one non-empty matcher");
    return CMA_OK;
}

static enum cma_errc selector(struct parser *p, bool named, struct pq_node **ret)
{
    struct pq_node *sel = new_node(p, PQ_N_SELECTOR, p->tok.pos);
    if (!sel)
        return p->err && p->err->code ? p->err->code : CMA_ERR_NOMEM;
    enum cma_errc rc = CMA_OK;
    if (named && (rc = take_word(p, &sel->u.sel.name)) != CMA_OK)
        return rc;
    if (p->tok.type == PQ_LBRACE) {
        rc = matcher_list(p, sel);
    } else {
        sel->u.sel.matchers = cma_arena_array(&p->q->arena, 1, sizeof(struct pq_matcher));
        if (!sel->u.sel.matchers)
            return nomem(p);
    }
    if (rc == CMA_OK)
        rc = finish_selector(p, sel);
    if (rc == CMA_OK)
        rc = finish(p, sel);
    if (rc == CMA_OK)
        *ret = sel;
    return rc;
}

/* ---- expressions ---- */

static enum cma_errc expr(struct parser *p, int min_prec, struct pq_node **ret);

/* "(" [expr {"," expr}] ")" */
static enum cma_errc call_args(struct parser *p, struct pq_node ***ret, size_t *ret_n)
{
    struct pq_node *items[32];
    size_t n = 0;
    enum cma_errc rc = advance(p); /* '(' */
    while (rc == CMA_OK && p->tok.type != PQ_RPAREN) {
        if (n == sizeof(items) / sizeof(items[0]))
            return fail(p, p->tok.pos, "more than %zu arguments", n);
        if ((rc = expr(p, 0, &items[n++])) != CMA_OK)
            return rc;
        if (p->tok.type == PQ_COMMA) {
            size_t comma = p->tok.pos;
            if ((rc = advance(p)) == CMA_OK && p->tok.type == PQ_RPAREN)
                return fail(p, comma, "trailing commas not allowed in function call args");
        } else if (p->tok.type != PQ_RPAREN) {
            return unexpected(p, "function call", "\",\" or \")\"");
        }
    }
    if (rc != CMA_OK)
        return rc;
    *ret = cma_arena_array(&p->q->arena, n ? n : 1, sizeof(*items));
    if (!*ret)
        return nomem(p);
    memcpy(*ret, items, n * sizeof(*items));
    *ret_n = n;
    return advance(p);
}

static enum cma_errc check_call(struct parser *p, struct pq_node *n)
{
    const struct pq_func *fn = n->u.call.fn;
    size_t got = n->u.call.n_args;
    if (fn->variadic == 0 && got != fn->n_args)
        return fail(p, n->pos, "expected %u argument(s) in call to \"%s\", got %zu", fn->n_args,
                    fn->name, got);
    if (fn->variadic != 0 && got + 1 < fn->n_args)
        return fail(p, n->pos, "expected at least %u argument(s) in call to \"%s\", got %zu",
                    fn->n_args - 1, fn->name, got);
    if (fn->variadic > 0 && got > fn->n_args - 1 + (size_t)fn->variadic)
        return fail(p, n->pos, "expected at most %u argument(s) in call to \"%s\", got %zu",
                    fn->n_args - 1 + (unsigned)fn->variadic, fn->name, got);
    char context[96];
    snprintf(context, sizeof(context), "call to function \"%s\"", fn->name);
    for (size_t i = 0; i < got; i++) {
        enum pq_type want = fn->args[i < fn->n_args ? i : fn->n_args - 1];
        enum cma_errc rc = expect_type(p, n->u.call.args[i], want, context);
        if (rc != CMA_OK)
            return rc;
    }
    return CMA_OK;
}

static enum cma_errc call(struct parser *p, struct pq_node **ret)
{
    const struct pq_func *fn = cma_pq_func_lookup(p->lx.src + p->tok.pos, p->tok.len);
    if (!fn)
        return fail(p, p->tok.pos, "unknown function with name \"%.*s\"", (int)p->tok.len,
                    p->lx.src + p->tok.pos);
    struct pq_node *n = new_node(p, PQ_N_CALL, p->tok.pos);
    if (!n)
        return p->err && p->err->code ? p->err->code : CMA_ERR_NOMEM;
    n->u.call.fn = fn;
    enum cma_errc rc = advance(p);
    if (rc == CMA_OK)
        rc = call_args(p, &n->u.call.args, &n->u.call.n_args);
    if (rc == CMA_OK)
        rc = check_call(p, n);
    if (rc == CMA_OK)
        rc = finish(p, n);
    if (rc == CMA_OK)
        *ret = n;
    return rc;
}

static enum cma_errc aggregate_modifier(struct parser *p, struct pq_node *n)
{
    n->u.agg.without = is_kw(&p->tok, PQ_KW_WITHOUT);
    enum cma_errc rc = advance(p);
    if (rc != CMA_OK)
        return rc;
    return grouping_labels(p, "grouping opts", &n->u.agg.grouping);
}

static enum param_kind { PARAM_NONE, PARAM_SCALAR, PARAM_STRING } agg_param(enum pq_agg op)
{
    switch (op) {
    case PQ_AGG_TOPK:
    case PQ_AGG_BOTTOMK:
    case PQ_AGG_QUANTILE:
    case PQ_AGG_LIMITK:
    case PQ_AGG_LIMIT_RATIO:
        return PARAM_SCALAR;
    case PQ_AGG_COUNT_VALUES:
        return PARAM_STRING;
    default:
        return PARAM_NONE;
    }
}

static enum cma_errc check_aggregate(struct parser *p, struct pq_node *n, struct pq_node **args,
                                     size_t n_args)
{
    enum param_kind param = agg_param(n->u.agg.op);
    size_t want = param == PARAM_NONE ? 1 : 2;
    if (n_args == 0)
        return fail(p, n->pos, "no arguments for aggregate expression provided");
    if (n_args != want)
        return fail(p, n->pos,
                    "wrong number of arguments for aggregate expression provided, expected %zu, "
                    "got %zu",
                    want, n_args);
    n->u.agg.expr = args[want - 1];
    n->u.agg.param = want == 2 ? args[0] : NULL;
    enum cma_errc rc = CMA_OK;
    if (param != PARAM_NONE)
        rc = expect_type(p, n->u.agg.param, param == PARAM_SCALAR ? PQ_T_SCALAR : PQ_T_STRING,
                         "aggregation parameter");
    if (rc == CMA_OK)
        rc = expect_type(p, n->u.agg.expr, PQ_T_VECTOR, "aggregation expression");
    return rc;
}

static bool at_grouping(const struct parser *p)
{
    return is_kw(&p->tok, PQ_KW_BY) || is_kw(&p->tok, PQ_KW_WITHOUT);
}

/* op [by|without (...)] "(" [param ","] expr ")" [by|without (...)] */
static enum cma_errc aggregate(struct parser *p, struct pq_node **ret)
{
    struct pq_node *n = new_node(p, PQ_N_AGGREGATE, p->tok.pos);
    if (!n)
        return p->err && p->err->code ? p->err->code : CMA_ERR_NOMEM;
    n->u.agg.op = p->tok.agg;
    enum cma_errc rc = advance(p);
    bool modifier_first = rc == CMA_OK && at_grouping(p);
    if (modifier_first)
        rc = aggregate_modifier(p, n);
    if (rc != CMA_OK)
        return rc;
    if (p->tok.type != PQ_LPAREN)
        return unexpected(p, "aggregation", "\"(\"");
    struct pq_node **args = NULL;
    size_t n_args = 0;
    rc = call_args(p, &args, &n_args);
    if (rc == CMA_OK && !modifier_first && at_grouping(p))
        rc = aggregate_modifier(p, n);
    if (rc == CMA_OK)
        rc = check_aggregate(p, n, args, n_args);
    if (rc == CMA_OK)
        rc = finish(p, n);
    if (rc == CMA_OK)
        *ret = n;
    return rc;
}

/* Looks one token past the current one without consuming it. */
static enum cma_errc peek_next(struct parser *p, struct pq_token *ret)
{
    struct pq_lexer saved = p->lx;
    struct cma_err scratch;
    cma_err_clear(&scratch);
    enum cma_errc rc = cma_pq_lex_next(&p->lx, ret, &scratch);
    p->lx = saved;
    if (rc != CMA_OK)
        ret->type = PQ_EOF; /* the error is reported when the token is really read */
    return CMA_OK;
}

static enum cma_errc word_primary(struct parser *p, struct pq_node **ret)
{
    struct pq_token next;
    peek_next(p, &next);
    bool lparen = next.type == PQ_LPAREN;
    if (is_kw(&p->tok, PQ_KW_AGG) &&
        (lparen || (next.type == PQ_IDENT && (next.kw == PQ_KW_BY || next.kw == PQ_KW_WITHOUT))))
        return aggregate(p, ret);
    if (p->tok.type == PQ_IDENT && p->tok.kw == PQ_KW_NONE && lparen)
        return call(p, ret);
    switch (p->tok.kw) {
    case PQ_KW_BOOL:
    case PQ_KW_ON:
    case PQ_KW_IGNORING:
    case PQ_KW_GROUP_LEFT:
    case PQ_KW_GROUP_RIGHT:
        return unexpected(p, NULL, NULL);
    default:
        break;
    }
    if (p->tok.type == PQ_ATAN2)
        return unexpected(p, NULL, NULL);
    return selector(p, true, ret);
}

static enum cma_errc paren(struct parser *p, struct pq_node **ret)
{
    struct pq_node *n = new_node(p, PQ_N_PAREN, p->tok.pos);
    if (!n)
        return p->err && p->err->code ? p->err->code : CMA_ERR_NOMEM;
    enum cma_errc rc = advance(p);
    if (rc == CMA_OK)
        rc = expr(p, 0, &n->u.paren);
    if (rc == CMA_OK)
        rc = expect(p, PQ_RPAREN, "paren expression", "\")\"");
    if (rc == CMA_OK)
        rc = finish(p, n);
    if (rc == CMA_OK)
        *ret = n;
    return rc;
}

static enum cma_errc literal(struct parser *p, struct pq_node **ret)
{
    bool number = p->tok.type == PQ_NUMBER;
    struct pq_node *n = new_node(p, number ? PQ_N_NUMBER : PQ_N_STRING, p->tok.pos);
    if (!n)
        return p->err && p->err->code ? p->err->code : CMA_ERR_NOMEM;
    *ret = n;
    finish(p, n);
    return number ? take_number(p, &n->u.number) : take_string(p, &n->u.string);
}

static enum cma_errc primary(struct parser *p, struct pq_node **ret)
{
    switch (p->tok.type) {
    case PQ_NUMBER:
    case PQ_STRING:
        return literal(p, ret);
    case PQ_LPAREN:
        return paren(p, ret);
    case PQ_LBRACE:
        return selector(p, false, ret);
    case PQ_IDENT:
    case PQ_METRIC_IDENT:
    case PQ_LAND:
    case PQ_LOR:
    case PQ_LUNLESS:
    case PQ_ATAN2:
        return word_primary(p, ret);
    default:
        return unexpected(p, NULL, NULL);
    }
}

/* ---- postfix: [range], [range:step], offset, @ ---- */

static struct pq_mods *mods_of(struct pq_node *n)
{
    if (n->kind == PQ_N_SELECTOR)
        return &n->u.sel.mods;
    if (n->kind == PQ_N_MATRIX)
        return &n->u.matrix.sel->u.sel.mods;
    if (n->kind == PQ_N_SUBQUERY)
        return &n->u.sub.mods;
    return NULL;
}

/* lhs[range] once "]" is the current token */
static enum cma_errc range_selector(struct parser *p, size_t open, int64_t range,
                                    struct pq_node **inout)
{
    struct pq_node *lhs = *inout;
    if (lhs->kind != PQ_N_SELECTOR)
        return fail(p, open, "ranges only allowed for vector selectors");
    if (lhs->u.sel.mods.has_offset)
        return fail(p, open, "no offset modifiers allowed before range");
    if (lhs->u.sel.mods.at != PQ_AT_NONE)
        return fail(p, open, "no @ modifiers allowed before range");
    struct pq_node *m = new_node(p, PQ_N_MATRIX, lhs->pos);
    if (!m)
        return p->err && p->err->code ? p->err->code : CMA_ERR_NOMEM;
    m->u.matrix.sel = lhs;
    m->u.matrix.range_ms = range;
    *inout = m;
    enum cma_errc rc = finish(p, m);
    return rc == CMA_OK ? advance(p) : rc;
}

/* lhs[range:step] once ":" is the current token */
static enum cma_errc subquery(struct parser *p, int64_t range, struct pq_node **inout)
{
    struct pq_node *lhs = *inout;
    int64_t step = 0;
    enum cma_errc rc = advance(p);
    if (rc == CMA_OK && p->tok.type != PQ_RBRACKET)
        rc = take_duration(p, "subquery selector", &step);
    if (rc == CMA_OK)
        rc = expect(p, PQ_RBRACKET, "subquery selector", "\"]\"");
    if (rc != CMA_OK)
        return rc;
    if (lhs->type != PQ_T_VECTOR)
        return fail(p, lhs->pos, "subquery is only allowed on instant vector, got %s instead",
                    lhs->type == PQ_T_MATRIX ? "matrix" : cma_pq_type_name(lhs->type));
    struct pq_node *s = new_node(p, PQ_N_SUBQUERY, lhs->pos);
    if (!s)
        return p->err && p->err->code ? p->err->code : CMA_ERR_NOMEM;
    s->u.sub.expr = lhs;
    s->u.sub.range_ms = range;
    s->u.sub.step_ms = step;
    *inout = s;
    return finish(p, s);
}

static enum cma_errc bracket(struct parser *p, struct pq_node **inout)
{
    size_t open = p->tok.pos;
    int64_t range = 0;
    enum cma_errc rc = advance(p);
    if (rc == CMA_OK)
        rc = take_duration(p, "subquery or range", &range);
    if (rc != CMA_OK)
        return rc;
    if (p->tok.type == PQ_RBRACKET)
        return range_selector(p, open, range, inout);
    if (p->tok.type == PQ_COLON)
        return subquery(p, range, inout);
    return unexpected(p, "subquery or range", "\":\" or \"]\"");
}

static enum cma_errc offset(struct parser *p, struct pq_node *n)
{
    enum cma_errc rc = advance(p);
    bool negative = rc == CMA_OK && p->tok.type == PQ_SUB;
    if (negative)
        rc = advance(p);
    int64_t ms = 0;
    if (rc == CMA_OK)
        rc = take_duration(p, "offset", &ms);
    if (rc != CMA_OK)
        return rc;
    struct pq_mods *m = mods_of(n);
    if (!m)
        return fail(p, n->pos,
                    "offset modifier must be preceded by an instant vector selector or range "
                    "vector selector or a subquery");
    if (m->has_offset)
        return fail(p, n->pos, "offset may not be set multiple times");
    m->has_offset = true;
    m->offset_ms = negative ? -ms : ms;
    return CMA_OK;
}

static enum cma_errc at_time(struct parser *p, struct pq_mods *m)
{
    bool negative = p->tok.type == PQ_SUB;
    enum cma_errc rc = CMA_OK;
    if (p->tok.type == PQ_SUB || p->tok.type == PQ_ADD)
        rc = advance(p);
    if (rc != CMA_OK)
        return rc;
    if (p->tok.type != PQ_NUMBER)
        return unexpected(p, "@", "timestamp");
    size_t pos = p->tok.pos;
    double v = 0;
    if ((rc = take_number(p, &v)) != CMA_OK)
        return rc;
    if (negative)
        v = -v;
    if (isnan(v) || isinf(v) || v >= 9223372036854775807.0 / 1000 ||
        v <= -9223372036854775808.0 / 1000)
        return fail(p, pos, "timestamp out of bounds for @ modifier: %f", v);
    m->at = PQ_AT_TIME;
    m->at_ms = (int64_t)round(v * 1000);
    return CMA_OK;
}

static enum cma_errc at(struct parser *p, struct pq_node *n)
{
    enum cma_errc rc = advance(p);
    if (rc != CMA_OK)
        return rc;
    struct pq_mods *m = mods_of(n);
    struct pq_mods scratch = {0};
    if (is_kw(&p->tok, PQ_KW_START) || is_kw(&p->tok, PQ_KW_END)) {
        scratch.at = is_kw(&p->tok, PQ_KW_START) ? PQ_AT_START : PQ_AT_END;
        rc = advance(p);
        if (rc == CMA_OK)
            rc = expect(p, PQ_LPAREN, "@", "\"(\"");
        if (rc == CMA_OK)
            rc = expect(p, PQ_RPAREN, "@", "\")\"");
    } else {
        rc = at_time(p, &scratch);
    }
    if (rc != CMA_OK)
        return rc;
    if (!m)
        return fail(p, n->pos,
                    "@ modifier must be preceded by an instant vector selector or range vector "
                    "selector or a subquery");
    if (m->at != PQ_AT_NONE)
        return fail(p, n->pos, "@ <timestamp> may not be set multiple times");
    m->at = scratch.at;
    m->at_ms = scratch.at_ms;
    return CMA_OK;
}

static enum cma_errc postfix(struct parser *p, struct pq_node **inout)
{
    invariant(*inout != NULL); /* a primary expression that parsed */
    for (;;) {
        enum cma_errc rc;
        if (p->tok.type == PQ_LBRACKET)
            rc = bracket(p, inout);
        else if (is_kw(&p->tok, PQ_KW_OFFSET))
            rc = offset(p, *inout);
        else if (p->tok.type == PQ_AT)
            rc = at(p, *inout);
        else
            return CMA_OK;
        if (rc != CMA_OK)
            return rc;
    }
}

/* ---- unary and binary ---- */

static int binop_prec(enum pq_tok t)
{
    static const int prec[] = {
        [PQ_LOR] = 1, [PQ_LAND] = 2, [PQ_LUNLESS] = 2, [PQ_EQLC] = 3, [PQ_NEQ] = 3, [PQ_GTR] = 3,
        [PQ_GTE] = 3, [PQ_LSS] = 3,  [PQ_LTE] = 3,     [PQ_ADD] = 4,  [PQ_SUB] = 4, [PQ_MUL] = 5,
        [PQ_DIV] = 5, [PQ_MOD] = 5,  [PQ_ATAN2] = 5,   [PQ_POW] = 6,
    };
    return (size_t)t < sizeof(prec) / sizeof(prec[0]) ? prec[t] : 0;
}

static enum cma_errc enter(struct parser *p)
{
    /* one per level of nesting, plus the innermost operand itself */
    if (++p->depth <= CMA_PROMQL_MAX_DEPTH + 1)
        return CMA_OK;
    cma_pq_error_at(p->err, CMA_ERR_TOO_LARGE, p->lx.src, p->tok.pos,
                    "expression nested deeper than %d levels", CMA_PROMQL_MAX_DEPTH);
    return CMA_ERR_TOO_LARGE;
}

static enum cma_errc unary(struct parser *p, struct pq_node **ret)
{
    enum cma_errc rc = enter(p);
    if (rc != CMA_OK)
        return rc;
    if (p->tok.type != PQ_ADD && p->tok.type != PQ_SUB) {
        if ((rc = primary(p, ret)) == CMA_OK)
            rc = postfix(p, ret);
        p->depth--;
        return rc;
    }
    struct pq_token op = p->tok;
    struct pq_node *operand = NULL;
    if ((rc = advance(p)) == CMA_OK)
        rc = expr(p, binop_prec(PQ_POW), &operand);
    p->depth--;
    if (rc != CMA_OK)
        return rc;
    if (!operand)
        return fail(p, op.pos, "internal error: no operand after a sign");
    if (operand->kind == PQ_N_NUMBER) {
        if (op.type == PQ_SUB)
            operand->u.number = -operand->u.number;
        operand->pos = op.pos;
        *ret = operand;
        return CMA_OK;
    }
    enum pq_type t = operand->type;
    if (t != PQ_T_SCALAR && t != PQ_T_VECTOR)
        return fail(p, op.pos,
                    "unary expression only allowed on expressions of type scalar or instant "
                    "vector, got \"%s\"",
                    cma_pq_type_name(t));
    struct pq_node *n = new_node(p, PQ_N_UNARY, op.pos);
    if (!n)
        return p->err && p->err->code ? p->err->code : CMA_ERR_NOMEM;
    n->u.unary.op = op.type;
    n->u.unary.expr = operand;
    *ret = n;
    return finish(p, n);
}

static bool is_comparison(enum pq_tok t)
{
    return binop_prec(t) == 3;
}

static bool is_set_op(enum pq_tok t)
{
    return t == PQ_LAND || t == PQ_LOR || t == PQ_LUNLESS;
}

/* bool, on/ignoring (...), group_left/group_right [(...)] */
static enum cma_errc bin_modifiers(struct parser *p, struct pq_node *n)
{
    enum cma_errc rc = CMA_OK;
    if (is_kw(&p->tok, PQ_KW_BOOL)) {
        n->u.bin.ret_bool = true; /* checked once the right operand parsed, as Prometheus does */
        rc = advance(p);
    }
    if (rc != CMA_OK || !(is_kw(&p->tok, PQ_KW_ON) || is_kw(&p->tok, PQ_KW_IGNORING)))
        return rc;
    n->u.bin.has_matching = true;
    n->u.bin.on = is_kw(&p->tok, PQ_KW_ON);
    if ((rc = advance(p)) == CMA_OK)
        rc = grouping_labels(p, "grouping opts", &n->u.bin.matching);
    if (rc != CMA_OK || !(is_kw(&p->tok, PQ_KW_GROUP_LEFT) || is_kw(&p->tok, PQ_KW_GROUP_RIGHT)))
        return rc;
    n->u.bin.card = is_kw(&p->tok, PQ_KW_GROUP_LEFT) ? PQ_CARD_MANY_TO_ONE : PQ_CARD_ONE_TO_MANY;
    if ((rc = advance(p)) == CMA_OK && p->tok.type == PQ_LPAREN)
        rc = grouping_labels(p, "grouping opts", &n->u.bin.include);
    return rc;
}

static bool labels_contain(const struct pq_labels *l, const struct pq_str *s)
{
    for (size_t i = 0; i < l->n; i++)
        if (l->items[i].len == s->len && memcmp(l->items[i].s, s->s, s->len) == 0)
            return true;
    return false;
}

/* checkAST's vector matching rules, both sides instant vectors */
static enum cma_errc check_matching(struct parser *p, struct pq_node *n, size_t op_pos)
{
    if (is_set_op(n->u.bin.op)) {
        if (n->u.bin.card != PQ_CARD_ONE_TO_ONE)
            return fail(p, n->pos, "no grouping allowed for \"%s\" operation",
                        cma_pq_binop_name(n->u.bin.op));
        n->u.bin.card = PQ_CARD_MANY_TO_MANY;
    }
    if (!n->u.bin.on)
        return CMA_OK;
    for (size_t i = 0; i < n->u.bin.include.n; i++)
        if (labels_contain(&n->u.bin.matching, &n->u.bin.include.items[i]))
            return fail(p, op_pos, "label \"%s\" must not occur in ON and GROUP clause at once",
                        n->u.bin.include.items[i].s);
    return CMA_OK;
}

static bool is_operand_type(enum pq_type t)
{
    return t == PQ_T_SCALAR || t == PQ_T_VECTOR;
}

/* checkAST for a binary expression */
static enum cma_errc check_binary(struct parser *p, struct pq_node *n, size_t op_pos)
{
    enum pq_type lt = n->u.bin.lhs->type, rt = n->u.bin.rhs->type;
    if (n->u.bin.ret_bool && !is_comparison(n->u.bin.op))
        return fail(p, op_pos, "bool modifier can only be used on comparison operators");
    if (!is_operand_type(lt) || !is_operand_type(rt))
        return fail(p, n->pos,
                    "binary expression must contain only scalar and instant vector "
                    "types");
    bool scalars = lt == PQ_T_SCALAR && rt == PQ_T_SCALAR;
    if (is_comparison(n->u.bin.op) && !n->u.bin.ret_bool && scalars)
        return fail(p, op_pos, "comparisons between scalars must use BOOL modifier");
    if (is_set_op(n->u.bin.op) && (lt == PQ_T_SCALAR || rt == PQ_T_SCALAR))
        return fail(p, n->pos, "set operator \"%s\" not allowed in binary scalar expression",
                    cma_pq_binop_name(n->u.bin.op));
    if (lt == PQ_T_VECTOR && rt == PQ_T_VECTOR)
        return check_matching(p, n, op_pos);
    if (n->u.bin.matching.n > 0)
        return fail(p, n->pos, "vector matching only allowed between instant vectors");
    /* Prometheus drops the matching of a scalar operation: "1 + on() 2" is "1 + 2" */
    n->u.bin.has_matching = false;
    n->u.bin.on = false;
    n->u.bin.card = PQ_CARD_ONE_TO_ONE;
    n->u.bin.include.n = 0;
    return CMA_OK;
}

static enum cma_errc expr(struct parser *p, int min_prec, struct pq_node **ret)
{
    struct pq_node *lhs = NULL;
    enum cma_errc rc = unary(p, &lhs); /* unary() counts the depth: one per level of the text */
    while (rc == CMA_OK) {
        int prec = binop_prec(p->tok.type);
        if (prec == 0 || prec < min_prec)
            break;
        if (!lhs)
            return fail(p, p->tok.pos, "internal error: no left operand");
        struct pq_node *n = new_node(p, PQ_N_BINARY, lhs->pos);
        if (!n)
            return p->err && p->err->code ? p->err->code : CMA_ERR_NOMEM;
        size_t op_pos = p->tok.pos;
        n->u.bin.op = p->tok.type;
        n->u.bin.lhs = lhs;
        if ((rc = advance(p)) == CMA_OK)
            rc = bin_modifiers(p, n);
        if (rc == CMA_OK)
            rc = expr(p, n->u.bin.op == PQ_POW ? prec : prec + 1, &n->u.bin.rhs);
        invariant(rc != CMA_OK || n->u.bin.rhs);
        if (rc == CMA_OK)
            rc = check_binary(p, n, op_pos);
        if (rc == CMA_OK)
            rc = finish(p, n);
        lhs = n;
    }
    if (rc == CMA_OK)
        *ret = lhs;
    return rc;
}

enum cma_errc cma_promql_parse(const char *text, size_t len, struct cma_promql **ret_q,
                               struct cma_err *reterr)
{
    if (len > CMA_PROMQL_MAX_BYTES)
        return cma_err_set_at(reterr, CMA_ERR_TOO_LARGE, NULL, 1, 1,
                              "query is %zu bytes, over the limit of %zu", len,
                              CMA_PROMQL_MAX_BYTES);
    struct cma_promql *q = calloc(1, sizeof(*q));
    if (!q)
        return cma_err_set(reterr, CMA_ERR_NOMEM, "out of memory parsing a query");
    cma_arena_init(&q->arena, 64 * CMA_PROMQL_MAX_BYTES + ((size_t)1 << 20));
    struct cma_err scratch;
    cma_err_clear(&scratch);
    struct parser p = {.lx = {.src = text, .len = len}, .q = q, .err = &scratch};
    enum cma_errc rc = advance(&p);
    if (rc == CMA_OK && p.tok.type == PQ_EOF)
        rc = fail(&p, 0, "no expression found in input");
    if (rc == CMA_OK)
        rc = expr(&p, 0, &q->root);
    if (rc == CMA_OK && p.tok.type != PQ_EOF)
        rc = unexpected(&p, NULL, NULL);
    if (rc != CMA_OK) {
        if (scratch.code == CMA_OK)
            cma_err_set(&scratch, rc, "cannot parse the query");
        cma_err_copy(reterr, &scratch);
        cma_promql_free(q);
        return scratch.code;
    }
    *ret_q = q;
    return CMA_OK;
}

void cma_promql_free(struct cma_promql *q)
{
    if (!q)
        return;
    cma_arena_done(&q->arena);
    free(q);
}
