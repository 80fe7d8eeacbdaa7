/* promql_parse_test.c: unit tests for promql_parse.c: every grammar construct, operator
 * precedence and associativity (read from the tree, fully parenthesised), keywords as metric
 * names, the checks Prometheus makes while parsing (types, arity, modifiers, matchers), error
 * positions and messages, and the limits (input length, nesting depth, tree height, nodes). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "../../src/promql/promql_internal.h"
#include "cma/promql.h"

static struct cma_promql *parse_ok(const char *text)
{
    struct cma_err err;
    cma_err_clear(&err);
    struct cma_promql *q = NULL;
    if (cma_promql_parse(text, strlen(text), &q, &err) != CMA_OK)
        fail_msg("parse \"%s\": %u:%u: %s", text, err.line, err.column, err.msg);
    assert_non_null(q);
    return q;
}

static void assert_parse_error(const char *text, enum cma_errc code, unsigned line, unsigned column,
                               const char *part)
{
    struct cma_err err;
    cma_err_clear(&err);
    struct cma_promql *q = NULL;
    enum cma_errc rc = cma_promql_parse(text, strlen(text), &q, &err);
    if (rc == CMA_OK)
        fail_msg("\"%s\" parsed but must fail (%s)", text, part);
    assert_null(q);
    assert_int_equal(rc, code);
    assert_int_equal(err.code, code);
    if (err.line != line || err.column != column || !strstr(err.msg, part))
        fail_msg("\"%s\": %u:%u: %s; want %u:%u: ...%s...", text, err.line, err.column, err.msg,
                 line, column, part);
}

/* the tree as a fully parenthesised s-expression */
static void dump(const struct pq_node *n, struct cma_buf *out)
{
    switch (n->kind) {
    case PQ_N_NUMBER:
        cma_buf_printf(out, "%g", n->u.number);
        return;
    case PQ_N_STRING:
        cma_buf_printf(out, "\"%s\"", n->u.string.s);
        return;
    case PQ_N_SELECTOR:
        cma_buf_printf(out, "%s", n->u.sel.name.len ? n->u.sel.name.s : "{}");
        return;
    case PQ_N_MATRIX:
        dump(n->u.matrix.sel, out);
        cma_buf_appends(out, "[r]");
        return;
    case PQ_N_SUBQUERY:
        cma_buf_appends(out, "(sub ");
        dump(n->u.sub.expr, out);
        cma_buf_appends(out, ")");
        return;
    case PQ_N_CALL:
        cma_buf_printf(out, "(%s", n->u.call.fn->name);
        for (size_t i = 0; i < n->u.call.n_args; i++) {
            cma_buf_appendc(out, ' ');
            dump(n->u.call.args[i], out);
        }
        cma_buf_appendc(out, ')');
        return;
    case PQ_N_AGGREGATE:
        cma_buf_printf(out, "(%s ", cma_pq_agg_name(n->u.agg.op));
        if (n->u.agg.param) {
            dump(n->u.agg.param, out);
            cma_buf_appendc(out, ' ');
        }
        dump(n->u.agg.expr, out);
        cma_buf_appendc(out, ')');
        return;
    case PQ_N_BINARY:
        cma_buf_printf(out, "(%s ", cma_pq_binop_name(n->u.bin.op));
        dump(n->u.bin.lhs, out);
        cma_buf_appendc(out, ' ');
        dump(n->u.bin.rhs, out);
        cma_buf_appendc(out, ')');
        return;
    case PQ_N_UNARY:
        cma_buf_appends(out, n->u.unary.op == PQ_SUB ? "(neg " : "(pos ");
        dump(n->u.unary.expr, out);
        cma_buf_appendc(out, ')');
        return;
    case PQ_N_PAREN:
        cma_buf_appends(out, "(paren ");
        dump(n->u.paren, out);
        cma_buf_appendc(out, ')');
        return;
    }
}

static const char *tree(const char *text)
{
    static char result[1024];
    struct cma_promql *q = parse_ok(text);
    struct cma_buf out;
    cma_buf_init(&out, 1 << 20);
    dump(q->root, &out);
    snprintf(result, sizeof(result), "%s", cma_buf_str(&out));
    cma_buf_done(&out);
    cma_promql_free(q);
    return result;
}

static void test_parse__precedence(void **state)
{
    (void)state;
    assert_string_equal(tree("a + b * c"), "(+ a (* b c))");
    assert_string_equal(tree("a * b + c"), "(+ (* a b) c)");
    assert_string_equal(tree("a - b - c"), "(- (- a b) c)");
    assert_string_equal(tree("a / b % c atan2 d"), "(atan2 (% (/ a b) c) d)");
    assert_string_equal(tree("a ^ b ^ c"), "(^ a (^ b c))");
    assert_string_equal(tree("a * b ^ c"), "(* a (^ b c))");
    assert_string_equal(tree("a or b and c"), "(or a (and b c))");
    assert_string_equal(tree("a and b unless c"), "(unless (and a b) c)");
    assert_string_equal(tree("a == b + c"), "(== a (+ b c))");
    assert_string_equal(tree("a > b or c < d"), "(or (> a b) (< c d))");
    assert_string_equal(tree("a + b > c and d"), "(and (> (+ a b) c) d)");
    assert_string_equal(tree("(a + b) * c"), "(* (paren (+ a b)) c)");
}

static void test_parse__unary(void **state)
{
    (void)state;
    assert_string_equal(tree("-a ^ b"), "(neg (^ a b))");
    assert_string_equal(tree("-a * b"), "(* (neg a) b)");
    assert_string_equal(tree("-a + b"), "(+ (neg a) b)");
    assert_string_equal(tree("a * -b"), "(* a (neg b))");
    assert_string_equal(tree("- - a"), "(neg (neg a))");
    assert_string_equal(tree("+a"), "(pos a)");
    assert_string_equal(tree("-1"), "-1"); /* folded into the literal */
    assert_string_equal(tree("--1"), "1");
    assert_string_equal(tree("-(1)"), "(neg (paren 1))");
    assert_string_equal(tree("-1 ^ 2"), "(neg (^ 1 2))");
    assert_string_equal(tree("-a offset 5m"), "(neg a)");
    assert_parse_error("-a[5m:]", CMA_ERR_RULE, 1, 1, "got \"range vector\"");
}

static void test_parse__keywords_as_names(void **state)
{
    (void)state;
    assert_string_equal(tree("sum"), "sum");
    assert_string_equal(tree("by{a=\"b\"}"), "by");
    assert_string_equal(tree("offset offset 5m"), "offset");
    assert_string_equal(tree("x and and"), "(and x and)");
    assert_string_equal(tree("start @ start()"), "start");
    assert_string_equal(tree("sum(sum)"), "(sum sum)");
    assert_string_equal(tree("rate"), "rate"); /* a function name without "(" is a metric */
    assert_string_equal(tree("sum by (by, on, bool) (without)"), "(sum without)");
    assert_string_equal(tree("limitk"), "limitk");
    assert_parse_error("on", CMA_ERR_RULE, 1, 1, "unexpected \"on\"");
    assert_parse_error("x + bool y", CMA_ERR_RULE, 1, 3, "bool modifier can only be used");
    assert_parse_error("x + bool", CMA_ERR_RULE, 1, 9, "unexpected end of input");
    assert_parse_error("x == bool", CMA_ERR_RULE, 1, 10, "unexpected end of input");
    assert_parse_error("atan2", CMA_ERR_RULE, 1, 1, "unexpected \"atan2\"");
    assert_parse_error("sum by", CMA_ERR_RULE, 1, 7, "unexpected end of input in grouping opts");
}

static void test_parse__selectors(void **state)
{
    (void)state;
    struct cma_promql *q = parse_ok("x{a=\"1\", b!=\"2\", c=~\"3|4\", d!~\"5\",}");
    assert_int_equal(q->root->kind, PQ_N_SELECTOR);
    assert_int_equal(q->root->u.sel.n_matchers, 5); /* and __name__="x", last */
    assert_string_equal(q->root->u.sel.matchers[4].name.s, "__name__");
    assert_int_equal(q->root->u.sel.matchers[2].op, PQ_M_RE);
    cma_promql_free(q);
    q = parse_ok("{\"my.metric\", \"a.b\"=\"x\"}"); /* Prometheus 3 quoted names */
    assert_string_equal(q->root->u.sel.name.s, "my.metric");
    assert_string_equal(q->root->u.sel.matchers[0].name.s, "a.b");
    cma_promql_free(q);
    assert_string_equal(tree("x\n# comment\n{a=\"b\"}"), "x");
    assert_string_equal(tree("{__name__=~\".+\"}"), "{}");
    assert_parse_error("{}", CMA_ERR_RULE, 1, 1, "at least one non-empty matcher");
    assert_string_equal(tree("x{a=~\".*\"}"), "x"); /* the name matches something */
    assert_parse_error("{a=~\".*\", b=\"\"}", CMA_ERR_RULE, 1, 1, "non-empty matcher");
    assert_parse_error("{a!~\".+\"}", CMA_ERR_RULE, 1, 1, "non-empty matcher");
    assert_parse_error("x{__name__=\"y\"}", CMA_ERR_RULE, 1, 1,
                       "metric name must not be set twice");
    assert_parse_error("{\"a\", \"b\"}", CMA_ERR_RULE, 1, 1, "metric name must not be set twice");
    assert_parse_error("x{a=~\"(\"}", CMA_ERR_RULE, 1, 3, "error parsing regexp");
    assert_parse_error("x{b=\"c\", a=~\"(?=a)\"}", CMA_ERR_RULE, 1, 10, "error parsing regexp");
    assert_parse_error("x{a=~\"a++\"}", CMA_ERR_RULE, 1, 3, "error parsing regexp");
    assert_parse_error("x{a}", CMA_ERR_RULE, 1, 4, "expected label matching operator");
    assert_parse_error("x{a=b}", CMA_ERR_RULE, 1, 5, "expected string");
    assert_parse_error("x{a=\"b\" c=\"d\"}", CMA_ERR_RULE, 1, 9, "expected \",\" or \"}\"");
    assert_parse_error("x{,}", CMA_ERR_RULE, 1, 3, "expected identifier or \"}\"");
    assert_parse_error("x{a=\"b\"", CMA_ERR_RULE, 1, 8, "unexpected end of input");
}

static void test_parse__ranges_and_subqueries(void **state)
{
    (void)state;
    struct cma_promql *q = parse_ok("x[1h30m] @ 100 offset -5m");
    assert_int_equal(q->root->kind, PQ_N_MATRIX);
    assert_int_equal(q->root->u.matrix.range_ms, 5400000);
    const struct pq_mods *m = &q->root->u.matrix.sel->u.sel.mods;
    assert_int_equal(m->offset_ms, -300000);
    assert_int_equal(m->at, PQ_AT_TIME);
    assert_int_equal(m->at_ms, 100000);
    cma_promql_free(q);
    q = parse_ok("rate(x[5m])[1h:] @ end()");
    assert_int_equal(q->root->kind, PQ_N_SUBQUERY);
    assert_int_equal(q->root->u.sub.step_ms, 0);
    assert_int_equal(q->root->u.sub.mods.at, PQ_AT_END);
    cma_promql_free(q);
    assert_string_equal(tree("x offset 5m[1h:5m]"), "(sub x)");
    assert_parse_error("(x)[5m]", CMA_ERR_RULE, 1, 4, "ranges only allowed for vector selectors");
    assert_parse_error("x offset 5m [5m]", CMA_ERR_RULE, 1, 13, "no offset modifiers allowed");
    assert_parse_error("x @ 1 [5m]", CMA_ERR_RULE, 1, 7, "no @ modifiers allowed");
    assert_parse_error("x[5m][1h:]", CMA_ERR_RULE, 1, 1, "got matrix instead");
    assert_parse_error("1[1h:]", CMA_ERR_RULE, 1, 1, "got scalar instead");
    assert_parse_error("x[0s]", CMA_ERR_RULE, 1, 3, "duration must be greater than 0");
    assert_parse_error("x[1h:0s]", CMA_ERR_RULE, 1, 6, "duration must be greater than 0");
    assert_parse_error("x[5m30s1h]", CMA_ERR_RULE, 1, 3, "not a valid duration string");
    assert_parse_error("x[5m", CMA_ERR_RULE, 1, 5, "unexpected end of input");
    assert_parse_error("x[5m:1m:1m]", CMA_ERR_RULE, 1, 8, "expected \"]\"");
    assert_parse_error("x[106751991167d]", CMA_ERR_RULE, 1, 3, "duration out of range");
}

static void test_parse__modifiers(void **state)
{
    (void)state;
    struct cma_promql *q = parse_ok("x @ 1.2345 offset 1d");
    assert_int_equal(q->root->u.sel.mods.at_ms, 1235); /* rounded to the millisecond */
    cma_promql_free(q);
    q = parse_ok("x @ -5");
    assert_int_equal(q->root->u.sel.mods.at_ms, -5000);
    cma_promql_free(q);
    assert_parse_error("sum(x) offset 5m", CMA_ERR_RULE, 1, 1, "offset modifier must be preceded");
    assert_parse_error("(x) @ 5", CMA_ERR_RULE, 1, 1, "@ modifier must be preceded");
    assert_parse_error("x offset 5m offset 1m", CMA_ERR_RULE, 1, 1, "may not be set multiple");
    assert_parse_error("x @ start() @ 5", CMA_ERR_RULE, 1, 1, "may not be set multiple");
    assert_parse_error("x @ 1e20", CMA_ERR_RULE, 1, 5, "timestamp out of bounds");
    assert_parse_error("x @ Inf", CMA_ERR_RULE, 1, 5, "timestamp out of bounds");
    assert_parse_error("x offset 0s", CMA_ERR_RULE, 1, 10, "duration must be greater than 0");
    assert_parse_error("x offset 5", CMA_ERR_RULE, 1, 10, "expected duration");
    assert_parse_error("x @ foo()", CMA_ERR_RULE, 1, 5, "expected timestamp");
    assert_parse_error("x @ start", CMA_ERR_RULE, 1, 10, "unexpected end of input in @");
}

static void test_parse__aggregations(void **state)
{
    (void)state;
    struct cma_promql *q = parse_ok("topk without (a, b,) (3, x)");
    assert_int_equal(q->root->u.agg.op, PQ_AGG_TOPK);
    assert_true(q->root->u.agg.without);
    assert_int_equal(q->root->u.agg.grouping.n, 2);
    cma_promql_free(q);
    assert_string_equal(tree("sum(x) by (a)"), "(sum x)");
    assert_string_equal(tree("count_values(\"v\", x)"), "(count_values \"v\" x)");
    assert_string_equal(tree("quantile(0.9, x)"), "(quantile 0.9 x)");
    assert_string_equal(tree("limit_ratio(0.5, x)"), "(limit_ratio 0.5 x)");
    assert_string_equal(tree("sum by (\"a.b\") (x)"), "(sum x)");
    assert_parse_error("sum()", CMA_ERR_RULE, 1, 1, "no arguments for aggregate expression");
    assert_parse_error("sum(x, y)", CMA_ERR_RULE, 1, 1, "expected 1, got 2");
    assert_parse_error("topk(x)", CMA_ERR_RULE, 1, 1, "expected 2, got 1");
    assert_parse_error("topk(x, y)", CMA_ERR_RULE, 1, 6, "expected type scalar in aggregation");
    assert_parse_error("count_values(1, x)", CMA_ERR_RULE, 1, 14, "expected type string");
    assert_parse_error("sum(x[5m])", CMA_ERR_RULE, 1, 5, "got range vector");
    assert_parse_error("sum(x) by (a) by (b)", CMA_ERR_RULE, 1, 15, "unexpected \"by\"");
    assert_parse_error("sum by (a b) (x)", CMA_ERR_RULE, 1, 11, "expected \",\" or \")\"");
    assert_parse_error("sum by (a:b) (x)", CMA_ERR_RULE, 1, 9, "expected label");
}

static void test_parse__binary_checks(void **state)
{
    (void)state;
    struct cma_promql *q = parse_ok("x / on (a) group_left (b) y");
    assert_true(q->root->u.bin.on);
    assert_int_equal(q->root->u.bin.card, PQ_CARD_MANY_TO_ONE);
    assert_int_equal(q->root->u.bin.include.n, 1);
    cma_promql_free(q);
    q = parse_ok("x and y");
    assert_int_equal(q->root->u.bin.card, PQ_CARD_MANY_TO_MANY);
    cma_promql_free(q);
    q = parse_ok("1 + on() 2");
    assert_false(q->root->u.bin.has_matching); /* dropped between scalars */
    assert_int_equal(q->root->type, PQ_T_SCALAR);
    cma_promql_free(q);
    assert_parse_error("1 > 2", CMA_ERR_RULE, 1, 3, "comparisons between scalars must use BOOL");
    assert_parse_error("x and 1", CMA_ERR_RULE, 1, 1, "set operator \"and\" not allowed");
    assert_parse_error("x and bool y", CMA_ERR_RULE, 1, 3, "bool modifier can only be used");
    assert_parse_error("x and on(a) group_left y", CMA_ERR_RULE, 1, 1, "no grouping allowed");
    assert_parse_error("x + on(a) group_left(a) y", CMA_ERR_RULE, 1, 3, "must not occur in ON");
    assert_parse_error("1 + on(a) x", CMA_ERR_RULE, 1, 1, "vector matching only allowed");
    assert_parse_error("\"a\" + 1", CMA_ERR_RULE, 1, 1, "only scalar and instant vector");
    assert_parse_error("x[5m] + 1", CMA_ERR_RULE, 1, 1, "only scalar and instant vector");
    assert_parse_error("-\"a\"", CMA_ERR_RULE, 1, 1, "unary expression only allowed");
}

static void test_parse__calls(void **state)
{
    (void)state;
    assert_string_equal(tree("label_join(x, \"a\", \",\", \"b\", \"c\")"),
                        "(label_join x \"a\" \",\" \"b\" \"c\")");
    assert_string_equal(tree("round(x)"), "(round x)");
    assert_string_equal(tree("time()"), "(time)");
    assert_parse_error("foo(x)", CMA_ERR_RULE, 1, 1, "unknown function with name \"foo\"");
    assert_parse_error("rate(x)", CMA_ERR_RULE, 1, 6, "expected type range vector");
    assert_parse_error("rate()", CMA_ERR_RULE, 1, 1, "expected 1 argument(s)");
    assert_parse_error("round(x, 1, 2)", CMA_ERR_RULE, 1, 1, "expected at most 2 argument(s)");
    assert_parse_error("label_join(x, \"a\")", CMA_ERR_RULE, 1, 1, "expected at least 3");
    assert_parse_error("rate(x[5m],)", CMA_ERR_RULE, 1, 11, "trailing commas not allowed");
    assert_parse_error("abs(x y)", CMA_ERR_RULE, 1, 7, "expected \",\" or \")\"");
}

static void test_parse__syntax_errors(void **state)
{
    (void)state;
    assert_parse_error("", CMA_ERR_RULE, 1, 1, "no expression found in input");
    assert_parse_error("  # just a comment", CMA_ERR_RULE, 1, 1, "no expression found");
    assert_parse_error("x y", CMA_ERR_RULE, 1, 3, "unexpected \"y\"");
    assert_parse_error("(x", CMA_ERR_RULE, 1, 3, "unexpected end of input");
    assert_parse_error("x)", CMA_ERR_RULE, 1, 2, "unexpected \")\"");
    assert_parse_error("x +\n\n  )", CMA_ERR_RULE, 3, 3, "unexpected \")\"");
    assert_parse_error("1h", CMA_ERR_RULE, 1, 1, "unexpected \"1h\"");
    assert_parse_error("x{a=\"\\q\"}", CMA_ERR_RULE, 1, 5, "unknown escape sequence U+0071 'q'");
}

static void test_parse__limits(void **state)
{
    (void)state;
    size_t n = 100000;
    char *text = malloc(n + 2);
    assert_non_null(text);
    /* longer than the limit */
    memset(text, ' ', n);
    text[0] = 'x';
    struct cma_err err;
    cma_err_clear(&err);
    struct cma_promql *q = NULL;
    assert_int_equal(cma_promql_parse(text, n, &q, &err), CMA_ERR_TOO_LARGE);
    /* nesting: no stack overflow, a located error */
    memset(text, '(', 50000);
    text[50000] = '\0';
    assert_parse_error(text, CMA_ERR_TOO_LARGE, 1, 202, "nested deeper than 200");
    memset(text, '-', 50000);
    text[50000] = 'x';
    text[50001] = '\0';
    assert_parse_error(text, CMA_ERR_TOO_LARGE, 1, 202, "nested deeper than 200");
    /* 200 levels of the text are allowed, whatever the construct */
    size_t k = 0;
    for (int i = 0; i < 200; i++)
        k += (size_t)snprintf(text + k, n - k, "abs(");
    k += (size_t)snprintf(text + k, n - k, "x");
    for (int i = 0; i < 200; i++)
        k += (size_t)snprintf(text + k, n - k, ")");
    cma_promql_free(parse_ok(text));
    memset(text, '-', 200);
    snprintf(text + 200, 2, "x");
    cma_promql_free(parse_ok(text));
    /* a chain as tall as the height limit */
    size_t len = 0;
    for (int i = 0; i < 1100; i++)
        len += (size_t)snprintf(text + len, n - len, "%sx", i ? "+" : "");
    assert_parse_error(text, CMA_ERR_TOO_LARGE, 1, 1, "nested deeper than 1000");
    /* deep but within the limits */
    len = 0;
    for (int i = 0; i < 40; i++)
        len += (size_t)snprintf(text + len, n - len, "sum(");
    len += (size_t)snprintf(text + len, n - len, "x");
    for (int i = 0; i < 40; i++)
        len += (size_t)snprintf(text + len, n - len, ")");
    cma_promql_free(parse_ok(text));
    free(text);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_parse__precedence),
        cmocka_unit_test(test_parse__unary),
        cmocka_unit_test(test_parse__keywords_as_names),
        cmocka_unit_test(test_parse__selectors),
        cmocka_unit_test(test_parse__ranges_and_subqueries),
        cmocka_unit_test(test_parse__modifiers),
        cmocka_unit_test(test_parse__aggregations),
        cmocka_unit_test(test_parse__binary_checks),
        cmocka_unit_test(test_parse__calls),
        cmocka_unit_test(test_parse__syntax_errors),
        cmocka_unit_test(test_parse__limits),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
