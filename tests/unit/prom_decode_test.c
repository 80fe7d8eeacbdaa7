/* prom_decode_test.c: cma_prom_decode_query() on Prometheus /api/v1/query bodies: each result
 * type, special values, timestamps, status:error bodies and malformed shapes. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "cma/prom.h"

static struct cma_prom_result *decode_ok(const char *body)
{
    struct cma_err err;
    cma_err_clear(&err);
    struct cma_prom_result *r = NULL;
    enum cma_errc rc = cma_prom_decode_query(body, strlen(body), &r, &err);
    if (rc != CMA_OK)
        fail_msg("decode failed: %s", err.msg);
    assert_non_null(r);
    return r;
}

static enum cma_errc decode_err(const char *body, struct cma_err *err)
{
    cma_err_clear(err);
    struct cma_prom_result *r = NULL;
    enum cma_errc rc = cma_prom_decode_query(body, strlen(body), &r, err);
    assert_null(r);
    assert_int_equal(err->code, rc);
    return rc;
}

static void test_cma_prom_decode_query__vector(void **state)
{
    (void)state;
    struct cma_prom_result *r = decode_ok(
        "{\"status\":\"success\",\"data\":{\"resultType\":\"vector\",\"result\":["
        "{\"metric\":{\"pod\":\"bert-0\",\"namespace\":\"ml\",\"__name__\":\"gpu_util\"},"
        "\"value\":[1732227811.123,\"42.5\"]},"
        "{\"metric\":{\"pod\":\"bert-1\",\"namespace\":\"ml\"},\"value\":[1732227811,\"1e+06\"]}"
        "]}}");
    assert_int_equal(r->type, CMA_PROM_VECTOR);
    assert_int_equal(r->n_samples, 2);
    const struct cma_sample *s = &r->samples[0];
    assert_int_equal(s->n_labels, 3);
    /* sorted by name */
    assert_string_equal(s->labels[0].name, "__name__");
    assert_string_equal(s->labels[1].name, "namespace");
    assert_string_equal(s->labels[2].name, "pod");
    assert_string_equal(cma_sample_label(s, "pod"), "bert-0");
    assert_string_equal(cma_sample_label(s, "__name__"), "gpu_util");
    assert_null(cma_sample_label(s, "node"));
    assert_true(s->value == 42.5);
    assert_int_equal(s->timestamp_ms, 1732227811123LL);
    assert_true(r->samples[1].value == 1e6);
    assert_int_equal(r->samples[1].timestamp_ms, 1732227811000LL);
    assert_null(cma_sample_label(&r->samples[1], "__name__"));
    cma_prom_result_free(r);
}

static void test_cma_prom_decode_query__empty_vector(void **state)
{
    (void)state;
    struct cma_prom_result *r =
        decode_ok("{\"status\":\"success\",\"data\":{\"resultType\":\"vector\",\"result\":[]}}");
    assert_int_equal(r->type, CMA_PROM_VECTOR);
    assert_int_equal(r->n_samples, 0);
    cma_prom_result_free(r);
}

static void test_cma_prom_decode_query__scalar(void **state)
{
    (void)state;
    struct cma_prom_result *r = decode_ok(
        "{\"status\":\"success\",\"data\":{\"resultType\":\"scalar\",\"result\":[1.5,\"0.5\"]}}");
    assert_int_equal(r->type, CMA_PROM_SCALAR);
    assert_int_equal(r->n_samples, 1);
    assert_int_equal(r->samples[0].n_labels, 0);
    assert_true(r->samples[0].value == 0.5);
    assert_int_equal(r->samples[0].timestamp_ms, 1500);
    cma_prom_result_free(r);
}

static void test_cma_prom_decode_query__matrix_keeps_last_point(void **state)
{
    (void)state;
    struct cma_prom_result *r = decode_ok(
        "{\"status\":\"success\",\"data\":{\"resultType\":\"matrix\",\"result\":["
        "{\"metric\":{\"a\":\"b\"},\"values\":[[100,\"1\"],[115,\"2\"],[130.0004,\"3\"]]}]}}");
    assert_int_equal(r->type, CMA_PROM_MATRIX);
    assert_int_equal(r->n_samples, 1);
    assert_true(r->samples[0].value == 3);
    assert_int_equal(r->samples[0].timestamp_ms, 130000);
    assert_string_equal(cma_sample_label(&r->samples[0], "a"), "b");
    cma_prom_result_free(r);
}

static void test_cma_prom_decode_query__string_has_no_samples(void **state)
{
    (void)state;
    struct cma_prom_result *r = decode_ok(
        "{\"status\":\"success\",\"data\":{\"resultType\":\"string\",\"result\":[1,\"hello\"]}}");
    assert_int_equal(r->type, CMA_PROM_STRING);
    assert_int_equal(r->n_samples, 0);
    cma_prom_result_free(r);
}

static void test_cma_prom_decode_query__special_values(void **state)
{
    (void)state;
    struct cma_prom_result *r =
        decode_ok("{\"status\":\"success\",\"data\":{\"resultType\":\"vector\",\"result\":["
                  "{\"metric\":{\"i\":\"0\"},\"value\":[1,\"NaN\"]},"
                  "{\"metric\":{\"i\":\"1\"},\"value\":[1,\"+Inf\"]},"
                  "{\"metric\":{\"i\":\"2\"},\"value\":[1,\"-Inf\"]},"
                  "{\"metric\":{\"i\":\"3\"},\"value\":[1,\"-0.25\"]}]}}");
    assert_int_equal(r->n_samples, 4);
    assert_true(isnan(r->samples[0].value));
    assert_true(isinf(r->samples[1].value) && r->samples[1].value > 0);
    assert_true(isinf(r->samples[2].value) && r->samples[2].value < 0);
    assert_true(r->samples[3].value == -0.25);
    cma_prom_result_free(r);
}

static void test_cma_prom_decode_query__timestamp_rounds_to_nearest_ms(void **state)
{
    (void)state;
    struct cma_prom_result *r =
        decode_ok("{\"status\":\"success\",\"data\":{\"resultType\":\"vector\",\"result\":["
                  "{\"metric\":{},\"value\":[1732227811.1236,\"1\"]},"
                  "{\"metric\":{},\"value\":[1732227811.1234,\"1\"]}]}}");
    assert_int_equal(r->samples[0].timestamp_ms, 1732227811124LL);
    assert_int_equal(r->samples[1].timestamp_ms, 1732227811123LL);
    cma_prom_result_free(r);
}

static void test_cma_prom_decode_query__error_bad_data(void **state)
{
    (void)state;
    struct cma_err err;
    assert_int_equal(decode_err("{\"status\":\"error\",\"errorType\":\"bad_data\",\"error\":"
                                "\"1:5: parse error: unexpected \\\"}\\\"\"}",
                                &err),
                     CMA_ERR_BACKEND_ERROR);
    assert_string_equal(err.msg, "bad_data: 1:5: parse error: unexpected \"}\"");
}

static void test_cma_prom_decode_query__error_timeout(void **state)
{
    (void)state;
    struct cma_err err;
    assert_int_equal(decode_err("{\"status\":\"error\",\"errorType\":\"timeout\",\"error\":"
                                "\"query timed out in expression evaluation\"}",
                                &err),
                     CMA_ERR_BACKEND_TIMEOUT);
    assert_string_equal(err.msg, "timeout: query timed out in expression evaluation");
}

static void test_cma_prom_decode_query__error_unavailable(void **state)
{
    (void)state;
    struct cma_err err;
    assert_int_equal(decode_err("{\"error\":\"no store\",\"errorType\":\"unavailable\","
                                "\"status\":\"error\"}",
                                &err),
                     CMA_ERR_BACKEND_UNAVAILABLE);
    assert_string_equal(err.msg, "unavailable: no store");
}

struct bad_case {
    const char *body;
    const char *msg_part;
};

static void test_cma_prom_decode_query__malformed_shapes(void **state)
{
    (void)state;
    static const struct bad_case cases[] = {
        {"", "unexpected JSON from prometheus"},
        {"[1]", "not an object"},
        {"{\"status\":\"success\"", "unexpected JSON from prometheus"},
        {"{\"data\":{}}", "status is missing"},
        {"{\"status\":\"weird\"}", "status \"weird\""},
        {"{\"status\":\"success\"}", "data is missing"},
        {"{\"status\":\"success\",\"data\":[]}", "data is not an object"},
        {"{\"status\":\"success\",\"data\":{\"result\":[]}}", "data.resultType"},
        {"{\"status\":\"success\",\"data\":{\"resultType\":\"vector\"}}", "data.result is missing"},
        {"{\"status\":\"success\",\"data\":{\"resultType\":\"table\",\"result\":[]}}", "\"table\""},
        {"{\"status\":\"success\",\"data\":{\"resultType\":\"vector\",\"result\":{}}}",
         "data.result is not an array"},
        {"{\"status\":\"success\",\"data\":{\"resultType\":\"vector\",\"result\":[1]}}",
         "data.result[0] is not an object"},
        {"{\"status\":\"success\",\"data\":{\"resultType\":\"vector\",\"result\":["
         "{\"value\":[1,\"1\"]}]}}",
         "data.result[0] has no metric"},
        {"{\"status\":\"success\",\"data\":{\"resultType\":\"vector\",\"result\":["
         "{\"metric\":{\"a\":1},\"value\":[1,\"1\"]}]}}",
         "data.result[0].metric.a is not a string"},
        {"{\"status\":\"success\",\"data\":{\"resultType\":\"vector\",\"result\":["
         "{\"metric\":{},\"value\":[1,\"1\"]},{\"metric\":{},\"value\":[1,1]}]}}",
         "data.result[1].value is not a [time, \"value\"] pair"},
        {"{\"status\":\"success\",\"data\":{\"resultType\":\"vector\",\"result\":["
         "{\"metric\":{},\"value\":[1,\"1\",2]}]}}",
         "data.result[0].value is not a [time, \"value\"] pair"},
        {"{\"status\":\"success\",\"data\":{\"resultType\":\"vector\",\"result\":["
         "{\"metric\":{},\"value\":[1,\"12abc\"]}]}}",
         "value \"12abc\", which is not a number"},
        {"{\"status\":\"success\",\"data\":{\"resultType\":\"vector\",\"result\":["
         "{\"metric\":{},\"value\":[1,\"\"]}]}}",
         "which is not a number"},
        {"{\"status\":\"success\",\"data\":{\"resultType\":\"vector\",\"result\":["
         "{\"metric\":{},\"value\":[1,\" 1\"]}]}}",
         "which is not a number"},
        {"{\"status\":\"success\",\"data\":{\"resultType\":\"vector\",\"result\":["
         "{\"metric\":{},\"histogram\":[1,{}]}]}}",
         "native histograms"},
        {"{\"status\":\"success\",\"data\":{\"resultType\":\"vector\",\"result\":["
         "{\"metric\":{},\"value\":[1e300,\"1\"]}]}}",
         "timestamp out of range"},
        {"{\"status\":\"success\",\"data\":{\"resultType\":\"matrix\",\"result\":["
         "{\"metric\":{},\"values\":[]}]}}",
         "data.result[0].values is empty"},
        {"{\"status\":\"success\",\"data\":{\"resultType\":\"matrix\",\"result\":["
         "{\"metric\":{},\"values\":[[1,\"1\"],[2]]}]}}",
         "data.result[0].values[1] is not a [time, \"value\"] pair"},
        {"{\"status\":\"success\",\"data\":{\"resultType\":\"scalar\",\"result\":{}}}",
         "data.result is not a [time, \"value\"] pair"},
        {"{\"status\":\"success\",\"status\":\"success\",\"data\":{}}", "duplicate"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        struct cma_err err;
        enum cma_errc rc = decode_err(cases[i].body, &err);
        if (rc != CMA_ERR_BACKEND_RESPONSE || !strstr(err.msg, cases[i].msg_part))
            fail_msg("case %zu (%s): got %s \"%s\", want BACKEND_RESPONSE with \"%s\"", i,
                     cases[i].body, cma_errc_name(rc), err.msg, cases[i].msg_part);
    }
}

static void test_cma_prom_decode_query__huge_labels(void **state)
{
    (void)state;
    size_t big = 300000;
    size_t n_labels = 200;
    size_t cap = big + n_labels * 64 + 256;
    char *body = malloc(cap);
    assert_non_null(body);
    size_t o = (size_t)snprintf(body, cap,
                                "{\"status\":\"success\",\"data\":{\"resultType\":"
                                "\"vector\",\"result\":[{\"metric\":{\"big\":\"");
    memset(body + o, 'x', big);
    o += big;
    o += (size_t)snprintf(body + o, cap - o, "\"");
    for (size_t i = n_labels; i > 0; i--)
        o += (size_t)snprintf(body + o, cap - o, ",\"l%03zu\":\"v%zu\"", i, i);
    o += (size_t)snprintf(body + o, cap - o, "},\"value\":[1,\"7\"]}]}}");
    struct cma_err err;
    cma_err_clear(&err);
    struct cma_prom_result *r = NULL;
    assert_int_equal(cma_prom_decode_query(body, o, &r, &err), CMA_OK);
    assert_int_equal(r->samples[0].n_labels, n_labels + 1);
    assert_int_equal(strlen(cma_sample_label(&r->samples[0], "big")), big);
    assert_string_equal(cma_sample_label(&r->samples[0], "l001"), "v1");
    assert_string_equal(cma_sample_label(&r->samples[0], "l200"), "v200");
    for (size_t i = 1; i < r->samples[0].n_labels; i++)
        assert_true(strcmp(r->samples[0].labels[i - 1].name, r->samples[0].labels[i].name) < 0);
    cma_prom_result_free(r);
    free(body);
}

static void test_cma_prom_decode_query__null_body(void **state)
{
    (void)state;
    struct cma_err err;
    cma_err_clear(&err);
    struct cma_prom_result *r = NULL;
    assert_int_equal(cma_prom_decode_query(NULL, 0, &r, &err), CMA_ERR_BACKEND_RESPONSE);
    assert_null(r);
}

static void test_cma_sample_label__null_safe(void **state)
{
    (void)state;
    assert_null(cma_sample_label(NULL, "a"));
    struct cma_sample s = {0};
    assert_null(cma_sample_label(&s, "a"));
    assert_null(cma_sample_label(&s, NULL));
    cma_prom_result_free(NULL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cma_prom_decode_query__vector),
        cmocka_unit_test(test_cma_prom_decode_query__empty_vector),
        cmocka_unit_test(test_cma_prom_decode_query__scalar),
        cmocka_unit_test(test_cma_prom_decode_query__matrix_keeps_last_point),
        cmocka_unit_test(test_cma_prom_decode_query__string_has_no_samples),
        cmocka_unit_test(test_cma_prom_decode_query__special_values),
        cmocka_unit_test(test_cma_prom_decode_query__timestamp_rounds_to_nearest_ms),
        cmocka_unit_test(test_cma_prom_decode_query__error_bad_data),
        cmocka_unit_test(test_cma_prom_decode_query__error_timeout),
        cmocka_unit_test(test_cma_prom_decode_query__error_unavailable),
        cmocka_unit_test(test_cma_prom_decode_query__malformed_shapes),
        cmocka_unit_test(test_cma_prom_decode_query__huge_labels),
        cmocka_unit_test(test_cma_prom_decode_query__null_body),
        cmocka_unit_test(test_cma_sample_label__null_safe),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
