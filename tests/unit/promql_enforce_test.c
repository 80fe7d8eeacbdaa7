/* promql_enforce_test.c: unit tests for promql_enforce.c: the matcher reaches every selector
 * whatever node holds it (functions, aggregations, binary operations with any matching,
 * subqueries, offset and @, parentheses, unary operators), selectors named only by __name__,
 * keyword-named metrics, comments and odd whitespace, existing matchers on the same label (kept,
 * so the query reads nothing), whether the query had a selector, and bad label names. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "cma/promql.h"

static const char *enforced_as(const char *text, const char *label, const char *value,
                               bool *ret_had)
{
    static char result[4096];
    struct cma_err err;
    cma_err_clear(&err);
    struct cma_promql *q = NULL;
    if (cma_promql_parse(text, strlen(text), &q, &err) != CMA_OK)
        fail_msg("parse \"%s\": %u:%u: %s", text, err.line, err.column, err.msg);
    bool had = false;
    if (cma_promql_enforce(q, label, value, &had, &err) != CMA_OK)
        fail_msg("enforce \"%s\": %s", text, err.msg);
    struct cma_buf out;
    cma_buf_init(&out, 1 << 20);
    assert_int_equal(cma_promql_print(q, &out), CMA_OK);
    snprintf(result, sizeof(result), "%s", cma_buf_str(&out));
    cma_buf_done(&out);
    cma_promql_free(q);
    if (ret_had)
        *ret_had = had;
    return result;
}

static const char *enforced(const char *text)
{
    return enforced_as(text, "namespace", "team-a", NULL);
}

/* the enforced text, and that it parses and enforces to itself again (idempotent output) */
static void assert_enforced(const char *text, const char *want)
{
    char first[4096];
    snprintf(first, sizeof(first), "%s", enforced(text));
    if (strcmp(first, want) != 0)
        fail_msg("\"%s\" enforced as \"%s\", want \"%s\"", text, first, want);
}

#define NS "namespace=\"team-a\""

static void test_enforce__every_node_kind(void **state)
{
    (void)state;
    assert_enforced("x", "x{" NS "}");
    assert_enforced("x{a=\"b\"}", "x{a=\"b\"," NS "}");
    assert_enforced("rate(x[5m])", "rate(x{" NS "}[5m])");
    assert_enforced("sum by (pod) (rate(x[5m]))", "sum by (pod) (rate(x{" NS "}[5m]))");
    assert_enforced("topk(scalar(y), x)", "topk(scalar(y{" NS "}), x{" NS "})");
    assert_enforced("count_values(\"v\", x)", "count_values(\"v\", x{" NS "})");
    assert_enforced("x / on (pod) group_left (node) y",
                    "x{" NS "} / on (pod) group_left (node) y{" NS "}");
    assert_enforced("-x", "-x{" NS "}");
    assert_enforced("(x)", "(x{" NS "})");
    assert_enforced("max_over_time(rate(x[5m])[1h:1m])",
                    "max_over_time(rate(x{" NS "}[5m])[1h:1m])");
    assert_enforced("x offset 5m @ 100", "x{" NS "} @ 100.000 offset 5m");
    assert_enforced("x[5m] @ start() offset -1h", "x{" NS "}[5m] @ start() offset -1h");
    assert_enforced("1 + 2", "1 + 2");
    assert_enforced("\"s\"", "\"s\"");
    assert_enforced("histogram_quantile(0.9, sum by (le) (rate(x_bucket[5m])))",
                    "histogram_quantile(0.9, sum by (le) (rate(x_bucket{" NS "}[5m])))");
}

static void test_enforce__adversarial(void **state)
{
    (void)state;
    /* every series of every metric: still only the namespace's */
    assert_enforced("{__name__=~\".+\"}", "{__name__=~\".+\"," NS "}");
    assert_enforced("{__name__=\"x\"}", "{__name__=\"x\"," NS "}");
    /* vector(1) reads no series; x is restricted */
    assert_enforced("x or on() vector(1)", "x{" NS "} or on () vector(1)");
    /* the selector inside is restricted before the label is rewritten */
    assert_enforced("label_replace(x, \"namespace\", \"other\", \"\", \"\")",
                    "label_replace(x{" NS "}, \"namespace\", \"other\", \"\", \"\")");
    assert_enforced("absent(x)", "absent(x{" NS "})");
    assert_enforced("x * on () group_left y", "x{" NS "} * on () group_left () y{" NS "}");
    /* another namespace's metric in a subquery */
    assert_enforced("max_over_time(x{namespace=\"other\"}[1h:])",
                    "max_over_time(x{namespace=\"other\"," NS "}[1h:])");
    /* an existing matcher on the label stays: the query matches nothing */
    assert_enforced("x{namespace=\"other\"}", "x{namespace=\"other\"," NS "}");
    assert_enforced("x{namespace=~\".*\"}", "x{" NS ",namespace=~\".*\"}");
    assert_enforced("x{namespace!=\"team-a\"}", "x{namespace!=\"team-a\"," NS "}");
    /* comments and odd whitespace cannot hide a selector */
    assert_enforced("x # y\n + # {\n\t y", "x{" NS "} + y{" NS "}");
    assert_enforced("x\n#c\n{a=\"b\"}", "x{a=\"b\"," NS "}");
    /* grouping by the label changes nothing */
    assert_enforced("sum by (namespace) (x)", "sum by (namespace) (x{" NS "})");
    assert_enforced("sum without (namespace) (x)", "sum without (namespace) (x{" NS "})");
    /* keyword-named metrics */
    assert_enforced("sum", "sum{" NS "}");
    assert_enforced("by{a=\"b\"}", "by{a=\"b\"," NS "}");
    assert_enforced("offset offset 5m", "offset{" NS "} offset 5m");
    assert_enforced("sum(sum) by (by)", "sum by (by) (sum{" NS "})");
    assert_enforced("x and and", "x{" NS "} and and{" NS "}");
    assert_enforced("{\"my.metric\"}", "{\"my.metric\"," NS "}");
}

static void test_enforce__label_and_value(void **state)
{
    (void)state;
    assert_string_equal(enforced_as("x", "exported_namespace", "a\"b\n", NULL),
                        "x{exported_namespace=\"a\\\"b\\n\"}");
    assert_string_equal(enforced_as("x", "namespace", "", NULL), "x{namespace=\"\"}");
    struct cma_err err;
    cma_err_clear(&err);
    struct cma_promql *q = NULL;
    assert_int_equal(cma_promql_parse("x", 1, &q, &err), CMA_OK);
    assert_int_equal(cma_promql_enforce(q, "1abc", "v", NULL, &err), CMA_ERR_RULE);
    assert_non_null(strstr(err.msg, "\"1abc\" is not a label name"));
    cma_err_clear(&err);
    assert_int_equal(cma_promql_enforce(q, "a.b", "v", NULL, &err), CMA_ERR_RULE);
    cma_err_clear(&err);
    assert_int_equal(cma_promql_enforce(q, "", "v", NULL, &err), CMA_ERR_RULE);
    cma_promql_free(q);
}

static void test_enforce__had_selector(void **state)
{
    (void)state;
    bool had = true;
    enforced_as("vector(1) + time()", "namespace", "a", &had);
    assert_false(had);
    enforced_as("1", "namespace", "a", &had);
    assert_false(had);
    enforced_as("vector(1) or x", "namespace", "a", &had);
    assert_true(had);
    enforced_as("{__name__=~\".+\"}", "namespace", "a", &had);
    assert_true(had);
}

static void test_enforce__twice(void **state)
{
    (void)state;
    struct cma_err err;
    cma_err_clear(&err);
    struct cma_promql *q = NULL;
    assert_int_equal(cma_promql_parse("x + last_over_time(y[5m:])", 26, &q, &err), CMA_OK);
    assert_int_equal(cma_promql_enforce(q, "namespace", "a", NULL, &err), CMA_OK);
    assert_int_equal(cma_promql_enforce(q, "tenant", "t", NULL, &err), CMA_OK);
    struct cma_buf out;
    cma_buf_init(&out, 4096);
    assert_int_equal(cma_promql_print(q, &out), CMA_OK);
    assert_string_equal(cma_buf_str(&out), "x{namespace=\"a\",tenant=\"t\"} + "
                                           "last_over_time(y{namespace=\"a\",tenant=\"t\"}[5m:])");
    cma_buf_done(&out);
    cma_promql_free(q);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_enforce__every_node_kind),
        cmocka_unit_test(test_enforce__adversarial),
        cmocka_unit_test(test_enforce__label_and_value),
        cmocka_unit_test(test_enforce__had_selector),
        cmocka_unit_test(test_enforce__twice),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
