/* promql_regex_test.c: unit tests for promql_regex.c: what Go's regexp (RE2 syntax) accepts
 * passes, what it refuses and PCRE2 would take is refused, with Go's words (each case checked
 * against Prometheus 2.42's answer for x{a=~"..."}); and the parser reports it at the selector. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "../../src/promql/promql_internal.h"
#include "cma/promql.h"

static void assert_accepted(const char *re)
{
    const char *msg = cma_pq_regex_check(re, strlen(re));
    if (msg)
        fail_msg("`%s` refused: %s", re, msg);
}

static void assert_refused(const char *re, const char *want)
{
    const char *msg = cma_pq_regex_check(re, strlen(re));
    if (!msg) {
        fail_msg("`%s` accepted, want \"%s\"", re, want);
        return;
    }
    if (strcmp(msg, want) != 0)
        fail_msg("`%s`: \"%s\", want \"%s\"", re, msg, want);
}

static void test_regex_check__accepted(void **state)
{
    (void)state;
    static const char *const ok[] = {
        "a",
        "a.b|c",
        "\\d+\\.\\w*\\s?\\D\\S\\W",
        "[a-z]+",
        "[^\\]a]",
        "[]a]",
        "[[:alpha:]]+",
        "[\\d\\s]",
        "\\bfoo\\b",
        "\\Afoo\\z",
        "\\pL\\p{Greek}\\PN",
        "\\x41\\x{1F600}",
        "\\0\\012\\177",
        "\\12",
        "\\_\\-\\.\\*",
        "\\Qa.b*\\E+",
        "\\Qabc",
        "(?i)abc",
        "(?i:abc)",
        "(?-i:abc)",
        "(?ims-U)x",
        "(?P<name>x)",
        "(?:)",
        "a+?",
        "a??",
        "a*?",
        "a{2}?",
        "a{1000}",
        "a{,5}",
        "a{x}",
        "x{",
        "",
    };
    for (size_t i = 0; i < sizeof(ok) / sizeof(ok[0]); i++)
        assert_accepted(ok[i]);
}

static void test_regex_check__refused(void **state)
{
    (void)state;
    assert_refused("\\xo", "invalid escape sequence");
    assert_refused("\\x4", "invalid escape sequence");
    assert_refused("\\x{}", "invalid escape sequence");
    assert_refused("\\1", "invalid escape sequence");
    assert_refused("\\8", "invalid escape sequence");
    assert_refused("\\e", "invalid escape sequence");
    assert_refused("\\h", "invalid escape sequence");
    assert_refused("\\K", "invalid escape sequence");
    assert_refused("\\R", "invalid escape sequence");
    assert_refused("\\G", "invalid escape sequence");
    assert_refused("\\Z", "invalid escape sequence");
    assert_refused("\\cA", "invalid escape sequence");
    assert_refused("\\o{1}", "invalid escape sequence");
    assert_refused("\\\xc3\xa9", "invalid escape sequence");
    assert_refused("[\\b]", "invalid escape sequence");
    assert_refused("a\\", "trailing backslash at end of expression");
    assert_refused("(?=a)", "invalid or unsupported Perl syntax");
    assert_refused("(?!a)", "invalid or unsupported Perl syntax");
    assert_refused("(?<=a)", "invalid or unsupported Perl syntax");
    assert_refused("(?<!a)", "invalid or unsupported Perl syntax");
    assert_refused("(?>a)", "invalid or unsupported Perl syntax");
    assert_refused("(?<name>x)", "invalid or unsupported Perl syntax");
    assert_refused("(?P=name)", "invalid or unsupported Perl syntax");
    assert_refused("(?#c)", "invalid or unsupported Perl syntax");
    assert_refused("(?|a)", "invalid or unsupported Perl syntax");
    assert_refused("a++", "invalid nested repetition operator");
    assert_refused("a*+", "invalid nested repetition operator");
    assert_refused("a?+", "invalid nested repetition operator");
    assert_refused("a{2}+", "invalid nested repetition operator");
    assert_refused("a**", "invalid nested repetition operator");
    assert_refused("a{2}{3}", "invalid nested repetition operator");
    assert_refused("a{1001}", "invalid repeat count");
    assert_refused("a{2,1001}", "invalid repeat count");
    assert_refused("[a", "missing closing ]");
}

static void test_regex_check__in_a_query(void **state)
{
    (void)state;
    struct cma_err err;
    cma_err_clear(&err);
    struct cma_promql *q = NULL;
    const char *text = "x{a=\"b\", c=~`kube_pod_inf\\xo`}";
    assert_int_equal(cma_promql_parse(text, strlen(text), &q, &err), CMA_ERR_RULE);
    assert_null(q);
    assert_int_equal(err.line, 1);
    assert_int_equal(err.column, 10); /* at the matcher, as Prometheus */
    assert_string_equal(err.msg,
                        "error parsing regexp: invalid escape sequence: `kube_pod_inf\\xo`");
    /* escaped punctuation does not start a quantifier, a class does not end at an escaped ] */
    text = "x{a=~\"\\\\++\", b=~\"[+\\\\]+]+\"}";
    assert_int_equal(cma_promql_parse(text, strlen(text), &q, &err), CMA_OK);
    cma_promql_free(q);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_regex_check__accepted),
        cmocka_unit_test(test_regex_check__refused),
        cmocka_unit_test(test_regex_check__in_a_query),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
