/* promql_func_test.c: unit tests for promql_func.c: every function of the table is found by
 * name and accepts exactly the argument counts and types its row says (checked by parsing
 * generated calls), unknown names are not found, and each node kind has the type Prometheus
 * gives it. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "../../src/promql/promql_internal.h"
#include "cma/promql.h"

/* Prometheus 2.42's and 3.x's functions (3.x's experimental ones included) */
static const char *const names[] = {
    "abs",
    "absent",
    "absent_over_time",
    "acos",
    "acosh",
    "asin",
    "asinh",
    "atan",
    "atanh",
    "avg_over_time",
    "ceil",
    "changes",
    "clamp",
    "clamp_max",
    "clamp_min",
    "cos",
    "cosh",
    "count_over_time",
    "day_of_month",
    "day_of_week",
    "day_of_year",
    "days_in_month",
    "deg",
    "delta",
    "deriv",
    "double_exponential_smoothing",
    "exp",
    "first_over_time",
    "floor",
    "histogram_avg",
    "histogram_count",
    "histogram_fraction",
    "histogram_quantile",
    "histogram_stddev",
    "histogram_stdvar",
    "histogram_sum",
    "holt_winters",
    "hour",
    "idelta",
    "increase",
    "info",
    "irate",
    "label_join",
    "label_replace",
    "last_over_time",
    "ln",
    "log10",
    "log2",
    "mad_over_time",
    "max_over_time",
    "min_over_time",
    "minute",
    "month",
    "pi",
    "predict_linear",
    "present_over_time",
    "quantile_over_time",
    "rad",
    "rate",
    "resets",
    "round",
    "scalar",
    "sgn",
    "sin",
    "sinh",
    "sort",
    "sort_by_label",
    "sort_by_label_desc",
    "sort_desc",
    "sqrt",
    "stddev_over_time",
    "stdvar_over_time",
    "sum_over_time",
    "tan",
    "tanh",
    "time",
    "timestamp",
    "ts_of_first_over_time",
    "ts_of_last_over_time",
    "ts_of_max_over_time",
    "ts_of_min_over_time",
    "vector",
    "year",
};

static enum cma_errc parse_rc(const char *text, struct cma_err *err)
{
    struct cma_promql *q = NULL;
    cma_err_clear(err);
    enum cma_errc rc = cma_promql_parse(text, strlen(text), &q, err);
    cma_promql_free(q);
    return rc;
}

static const char *arg_for(enum pq_type t)
{
    switch (t) {
    case PQ_T_VECTOR:
        return "x";
    case PQ_T_MATRIX:
        return "x[5m]";
    case PQ_T_SCALAR:
        return "1";
    default:
        return "\"s\"";
    }
}

/* name(arg, ...) with n arguments of the row's types (the last type repeated) */
static void call_text(const struct pq_func *fn, size_t n, char *out, size_t cap)
{
    size_t len = (size_t)snprintf(out, cap, "%s(", fn->name);
    for (size_t i = 0; i < n; i++) {
        enum pq_type t = fn->n_args ? fn->args[i < fn->n_args ? i : fn->n_args - 1] : PQ_T_SCALAR;
        len += (size_t)snprintf(out + len, cap - len, "%s%s", i ? ", " : "", arg_for(t));
    }
    snprintf(out + len, cap - len, ")");
}

static void test_func_lookup__every_function(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
        const struct pq_func *fn = cma_pq_func_lookup(names[i], strlen(names[i]));
        assert_non_null(fn);
        if (fn)
            assert_string_equal(fn->name, names[i]);
    }
    assert_null(cma_pq_func_lookup("foo", 3));
    assert_null(cma_pq_func_lookup("rat", 3));
    assert_null(cma_pq_func_lookup("rates", 5));
    assert_null(cma_pq_func_lookup("", 0));
    assert_null(cma_pq_func_lookup("RATE", 4)); /* function names are case-sensitive */
    assert_non_null(cma_pq_func_lookup("rate(x)", 4));
}

static void test_func__arity_and_types(void **state)
{
    (void)state;
    char text[512];
    struct cma_err err;
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
        const struct pq_func *fn = cma_pq_func_lookup(names[i], strlen(names[i]));
        if (!fn) {
            fail_msg("function %s not found", names[i]);
            continue;
        }
        size_t min = fn->variadic ? fn->n_args - 1 : fn->n_args;
        size_t max = fn->variadic < 0 ? fn->n_args + 3
                                      : fn->n_args - (fn->variadic ? 1 : 0) +
                                            (size_t)(fn->variadic > 0 ? fn->variadic : 0);
        for (size_t n = min; n <= max; n++) {
            call_text(fn, n, text, sizeof(text));
            if (parse_rc(text, &err) != CMA_OK)
                fail_msg("%s: %s", text, err.msg);
        }
        if (min > 0) {
            call_text(fn, min - 1, text, sizeof(text));
            assert_int_equal(parse_rc(text, &err), CMA_ERR_RULE);
            assert_non_null(strstr(err.msg, "argument(s) in call to"));
        }
        if (fn->variadic >= 0) {
            call_text(fn, max + 1, text, sizeof(text));
            assert_int_equal(parse_rc(text, &err), CMA_ERR_RULE);
        }
        if (fn->n_args > 0) { /* a wrong type for the first argument */
            snprintf(text, sizeof(text), "%s(%s)", fn->name,
                     fn->args[0] == PQ_T_STRING ? "1" : "\"s\"");
            assert_int_equal(parse_rc(text, &err), CMA_ERR_RULE);
        }
    }
}

static enum pq_type type_of(const char *text)
{
    struct cma_err err;
    cma_err_clear(&err);
    struct cma_promql *q = NULL;
    if (cma_promql_parse(text, strlen(text), &q, &err) != CMA_OK)
        fail_msg("parse \"%s\": %s", text, err.msg);
    enum pq_type t = q->root->type;
    assert_int_equal(t, cma_pq_node_type(q->root));
    cma_promql_free(q);
    return t;
}

static void test_node_type__kinds(void **state)
{
    (void)state;
    assert_int_equal(type_of("1"), PQ_T_SCALAR);
    assert_int_equal(type_of("\"a\""), PQ_T_STRING);
    assert_int_equal(type_of("x"), PQ_T_VECTOR);
    assert_int_equal(type_of("x[5m]"), PQ_T_MATRIX);
    assert_int_equal(type_of("x[5m:]"), PQ_T_MATRIX);
    assert_int_equal(type_of("time()"), PQ_T_SCALAR);
    assert_int_equal(type_of("sum(x)"), PQ_T_VECTOR);
    assert_int_equal(type_of("1 + 1"), PQ_T_SCALAR);
    assert_int_equal(type_of("1 + x"), PQ_T_VECTOR);
    assert_int_equal(type_of("-(time())"), PQ_T_SCALAR);
    assert_int_equal(type_of("(x[5m])"), PQ_T_MATRIX);
    assert_string_equal(cma_pq_type_name(PQ_T_MATRIX), "range vector");
    assert_string_equal(cma_pq_binop_name(PQ_LUNLESS), "unless");
    assert_string_equal(cma_pq_agg_name(PQ_AGG_COUNT_VALUES), "count_values");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_func_lookup__every_function),
        cmocka_unit_test(test_func__arity_and_types),
        cmocka_unit_test(test_node_type__kinds),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
