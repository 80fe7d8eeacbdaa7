/* promql_lex_test.c: unit tests for promql_lex.c: token boundaries and types, keywords (any
 * case), comments, the brace and bracket contexts, string escapes and their errors, numbers
 * (decimal, hex, octal, exponent, Inf, NaN), durations (compound, order, overflow) and error
 * positions (line:column, the column in bytes). */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "../../src/promql/promql_internal.h"

/* the token types of text, as letters: i ident, m metric ident, n number, d duration, s string,
 * o operator or punctuation, a aggregation keyword, k other keyword; "E" on a lexical error */
static const char *kinds(const char *text)
{
    static char out[128];
    struct pq_lexer lx = {.src = text, .len = strlen(text)};
    size_t n = 0;
    for (;;) {
        struct pq_token t;
        struct cma_err err;
        cma_err_clear(&err);
        if (cma_pq_lex_next(&lx, &t, &err) != CMA_OK) {
            out[n++] = 'E';
            break;
        }
        if (t.type == PQ_EOF)
            break;
        char c = 'o';
        if (t.type == PQ_IDENT)
            c = t.kw == PQ_KW_NONE ? 'i' : t.kw == PQ_KW_AGG ? 'a' : 'k';
        else if (t.type == PQ_METRIC_IDENT)
            c = 'm';
        else if (t.type == PQ_NUMBER)
            c = 'n';
        else if (t.type == PQ_DURATION)
            c = 'd';
        else if (t.type == PQ_STRING)
            c = 's';
        else if (t.type >= PQ_LAND || t.type == PQ_ATAN2)
            c = 'k';
        out[n++] = c;
    }
    out[n] = '\0';
    return out;
}

static void assert_lex_error(const char *text, unsigned line, unsigned column, const char *part)
{
    struct pq_lexer lx = {.src = text, .len = strlen(text)};
    struct cma_err err;
    cma_err_clear(&err);
    struct pq_token t;
    enum cma_errc rc;
    while ((rc = cma_pq_lex_next(&lx, &t, &err)) == CMA_OK && t.type != PQ_EOF)
        ;
    if (rc == CMA_OK)
        fail_msg("\"%s\" lexed without an error", text);
    assert_int_equal(rc, CMA_ERR_RULE);
    if (err.line != line || err.column != column || !strstr(err.msg, part))
        fail_msg("\"%s\": %u:%u: %s; want %u:%u: ...%s...", text, err.line, err.column, err.msg,
                 line, column, part);
}

static void test_lex__token_kinds(void **state)
{
    (void)state;
    assert_string_equal(kinds("rate(x[5m])"), "ioiodoo");
    assert_string_equal(kinds("a:b:c{x=\"y\"}"), "moioso");
    assert_string_equal(kinds("sum by (a) (x)"), "akoiooio");
    assert_string_equal(kinds("SUM BY Offset"), "akk");
    assert_string_equal(kinds("x and y OR z unless w atan2 v"), "ikikikiki");
    assert_string_equal(kinds("== != >= <= > < =~ !~ = + - * / % ^ @ ,"), "ooooooooooooooooo");
    assert_string_equal(kinds(": :x"), "mm"); /* outside brackets ':' starts a name */
    assert_string_equal(kinds("inf NaN Inf nan infinity"), "nnnni");
    assert_string_equal(kinds("1 0x1f .5 5. 1e3 1E-3 017"), "nnnnnnn");
    assert_string_equal(kinds("5m 1h30m 1y2w3d4h5m6s7ms"), "ddd");
}

static void test_lex__comments_and_space(void **state)
{
    (void)state;
    assert_string_equal(kinds("x # a comment { [ \"\n+ y"), "ioi");
    assert_string_equal(kinds("# only a comment"), "");
    /* '\r' ends a comment, as in Prometheus: the text after it is read */
    assert_string_equal(kinds("no#d\re_load1"), "ii");
    assert_string_equal(kinds("x #c\r+ y"), "ioi");
    assert_string_equal(kinds("\tx\r\n\n  +\ty  "), "ioi");
    assert_string_equal(kinds("x#c\n#d\n{a=\"b\"}"), "ioioso"); /* comment hides nothing */
}

static void test_lex__brace_context(void **state)
{
    (void)state;
    /* inside braces keywords are plain label names */
    assert_string_equal(kinds("{by=\"a\", sum=\"b\", offset!=\"c\"}"), "oiosoiosoioso");
    assert_lex_error("x{a:b=\"c\"}", 1, 4, "inside braces: ':'");
}

static void test_lex__bracket_context(void **state)
{
    (void)state;
    assert_string_equal(kinds("x[1h:5m]"), "iododo");
    assert_string_equal(kinds("x[1h:]"), "iodoo");
    assert_lex_error("x[5]", 1, 3, "missing unit character in duration");
    assert_lex_error("x[ 5]", 1, 4, "missing unit character in duration");
    /* right after '[' a duration must follow: no comment (as Prometheus 2.42) */
    assert_lex_error("x[ # c\n5m]", 1, 4, "missing unit character in duration");
    assert_lex_error("x[]", 1, 3, "missing unit character in duration");
    assert_string_equal(kinds("x[5m # c\n]"), "iodo");
    assert_string_equal(kinds("x[5m:1m # c\n]"), "iododo");
    assert_lex_error("x[5q]", 1, 3, "bad number or duration syntax: \"5q\"");
    assert_lex_error("1_000", 1, 1, "bad number or duration syntax");
}

static void test_lex__string_errors(void **state)
{
    (void)state;
    assert_lex_error("x{a=\"b}", 1, 5, "unterminated quoted string");
    assert_lex_error("\"a\nb\"", 1, 1, "unterminated quoted string");
    assert_lex_error("`abc", 1, 1, "unterminated raw string");
    /* escape errors point at the string, as Prometheus' do */
    assert_lex_error("\"\\q\"", 1, 1, "unknown escape sequence U+0071 'q'");
    assert_lex_error("\"\\0\"", 1, 1, "illegal character in escape sequence");
    assert_lex_error("\"\\400\"", 1, 1, "invalid Unicode code point");
    assert_lex_error("\"\\uD800\"", 1, 1, "invalid Unicode code point");
    assert_lex_error("\"\\U00110000\"", 1, 1, "invalid Unicode code point");
    assert_lex_error("\"\\'\"", 1, 1, "unknown escape sequence U+0027");
    assert_lex_error("'\\\"'", 1, 1, "unknown escape sequence U+0022");
    assert_lex_error("x\n  + \"\\z\"", 2, 5, "unknown escape sequence U+007A 'z'");
    assert_lex_error("x $ y", 1, 3, "unexpected character: U+0024");
    assert_lex_error("x\n\n   \xc3\xa9", 3, 4, "unexpected character: U+00E9");
}

static void assert_unquoted(const char *quoted, const char *want, size_t want_len)
{
    struct cma_arena a;
    cma_arena_init(&a, 1 << 20);
    struct cma_err err;
    cma_err_clear(&err);
    char *out = NULL;
    size_t n = 0;
    if (cma_pq_unquote(&a, quoted, strlen(quoted), quoted, &out, &n, &err) != CMA_OK)
        fail_msg("unquote %s: %s", quoted, err.msg);
    assert_int_equal(n, want_len);
    assert_memory_equal(out, want, want_len);
    cma_arena_done(&a);
}

static void test_unquote__escapes(void **state)
{
    (void)state;
    assert_unquoted("\"a\\tb\\n\"", "a\tb\n", 4);
    assert_unquoted("\"\\a\\b\\f\\r\\v\\\\\\\"\"", "\a\b\f\r\v\\\"", 7);
    assert_unquoted("'\\''", "'", 1);
    assert_unquoted("'it\"s'", "it\"s", 4);
    assert_unquoted("\"\\x41\\101\\u00e9\\U0001F600\"", "AA\xc3\xa9\xf0\x9f\x98\x80", 8);
    assert_unquoted("\"\\000x\"", "\0x", 2);
    assert_unquoted("\"\\xff\"", "\xff", 1);
    assert_unquoted("`a\\nb\n\"c'`", "a\\nb\n\"c'", 8);
    assert_unquoted("\"\"", "", 0);
}

static void assert_number(const char *text, double want)
{
    double v = 0;
    if (cma_pq_parse_number(text, strlen(text), &v) != CMA_OK)
        fail_msg("number \"%s\" does not parse", text);
    if (isnan(want))
        assert_true(isnan(v));
    else if (v != want)
        fail_msg("number \"%s\": %.17g, want %.17g", text, v, want);
}

static void test_parse_number__forms(void **state)
{
    (void)state;
    assert_number("1", 1);
    assert_number("0x1f", 31);
    assert_number("0X1F", 31);
    assert_number("0x1e5", 485);
    assert_number("017", 15);
    assert_number("08", 8);
    assert_number("1e3", 1000);
    assert_number(".5", 0.5);
    assert_number("5.", 5);
    assert_number("1.5e-7", 1.5e-7);
    assert_number("Inf", INFINITY);
    assert_number("nan", NAN);
    assert_number("123456789012345678901234567890", 1.2345678901234568e29);
    assert_number("0x7fffffffffffffff", 9223372036854775807.0);
}

static void test_parse_number__errors(void **state)
{
    (void)state;
    double v = 0;
    assert_int_equal(cma_pq_parse_number("0x", 2, &v), CMA_ERR_RULE);
    assert_int_equal(cma_pq_parse_number("1e309", 5, &v), CMA_ERR_RULE);
    assert_int_equal(cma_pq_parse_number("0x1.8", 5, &v), CMA_ERR_RULE);
    assert_int_equal(cma_pq_parse_number("", 0, &v), CMA_ERR_RULE);
    /* over int64: strconv.ParseInt fails, and ParseFloat does not take hex without an exponent */
    assert_int_equal(cma_pq_parse_number("0xffffffffffffffff", 18, &v), CMA_ERR_RULE);
}

static int64_t duration(const char *text)
{
    int64_t ms = -1;
    enum cma_errc rc = cma_pq_parse_duration(text, strlen(text), &ms);
    return rc == CMA_OK ? ms : rc == CMA_ERR_TOO_LARGE ? -2 : -1;
}

static void test_parse_duration__units(void **state)
{
    (void)state;
    assert_int_equal(duration("5m"), 300000);
    assert_int_equal(duration("1h30m"), 5400000);
    assert_int_equal(duration("1ms"), 1);
    assert_int_equal(duration("5m5ms"), 300005);
    assert_int_equal(duration("1y"), 365LL * 86400000);
    assert_int_equal(duration("2w"), 14LL * 86400000);
    assert_int_equal(duration("1y1w1d1h1m1s1ms"), 373LL * 86400000 + 3600000 + 60000 + 1000 + 1);
    assert_int_equal(duration("0s"), 0);
    assert_int_equal(duration("5m30s1h"), -1); /* out of order */
    assert_int_equal(duration("5m5m"), -1);    /* repeated */
    assert_int_equal(duration("1.5h"), -1);
    assert_int_equal(duration("5"), -1);
    assert_int_equal(duration("5hs"), -1);
    assert_int_equal(duration("h"), -1);
    assert_int_equal(duration("106751991167d"), -2);         /* over Go's time.Duration */
    assert_int_equal(duration("99999999999999999999y"), -2); /* over int64 */
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_lex__token_kinds),
        cmocka_unit_test(test_lex__comments_and_space),
        cmocka_unit_test(test_lex__brace_context),
        cmocka_unit_test(test_lex__bracket_context),
        cmocka_unit_test(test_lex__string_errors),
        cmocka_unit_test(test_unquote__escapes),
        cmocka_unit_test(test_parse_number__forms),
        cmocka_unit_test(test_parse_number__errors),
        cmocka_unit_test(test_parse_duration__units),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
