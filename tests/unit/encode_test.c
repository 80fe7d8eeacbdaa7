/* encode_test.c: byte-exact expectations for every encoder in encode.h, plus jansson as an
 * independent check that whatever is produced (control characters, invalid UTF-8, random
 * bytes) is valid JSON that decodes back to the intended strings. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <jansson.h>

#include "cma/buf.h"
#include "cma/encode.h"
#include "cma/err.h"
#include "cma/selector.h"

#define T_2026_07_30_120000 INT64_C(1785412800000)

/* Parses body (which must end in exactly one "\n") with jansson; caller json_decref()s. */
static json_t *decode(const struct cma_buf *b)
{
    assert_non_null(b->ptr);
    assert_true(b->len > 0);
    assert_int_equal(b->ptr[b->len - 1], '\n');
    assert_int_equal(strlen(b->ptr), b->len); /* no NUL inside */
    json_error_t jerr;
    json_t *j = json_loadb(b->ptr, b->len, JSON_REJECT_DUPLICATES, &jerr);
    if (!j)
        fail_msg("invalid JSON (%s at %d): %s", jerr.text, jerr.position, b->ptr);
    return j;
}

/* Asserts the body equals expect + "\n" and is valid JSON. */
static void assert_body(const struct cma_buf *b, const char *expect)
{
    size_t n = strlen(expect);
    if (b->len != n + 1 || memcmp(b->ptr, expect, n) != 0)
        fail_msg("body mismatch\n got: %s\nwant: %s", cma_buf_str(b), expect);
    json_decref(decode(b));
}

static struct cma_metric_value pod_value(const char *ns, const char *name, int64_t milli)
{
    struct cma_metric_value v = {
        .object = {.kind = "Pod", .namespace_ = ns, .name = name, .api_version = "v1"},
        .metric_name = "http_requests_per_second",
        .timestamp_ms = T_2026_07_30_120000,
        .value_milli = milli,
    };
    return v;
}

/* A selector built by hand (selector.h says it is plain data). */
struct test_sel {
    struct cma_selector sel;
    struct cma_selector_req reqs[8];
};

static void add_req(struct test_sel *t, const char *key, enum cma_selector_op op,
                    const char **values, size_t n_values)
{
    struct cma_selector_req *r = &t->reqs[t->sel.n_reqs++];
    r->key = (char *)key;
    r->op = op;
    r->values = (char **)values;
    r->n_values = n_values;
    t->sel.reqs = t->reqs;
}

/* ---- MetricValueList ---------------------------------------------------------------------- */

static void test_cma_encode_metric_value_list__v1beta1_window_no_selector(void **state)
{
    (void)state;
    struct cma_buf b;
    cma_buf_init(&b, 0);
    struct cma_metric_value v = pod_value("default", "web-1", 23456);
    v.has_window = true;
    v.window_seconds = 60;
    assert_int_equal(cma_encode_metric_value_list(CMA_CUSTOM_V1BETA1, &v, 1, NULL, &b, NULL),
                     CMA_OK);
    assert_body(&b,
                "{\"kind\":\"MetricValueList\",\"apiVersion\":\"custom.metrics.k8s.io/v1beta1\","
                "\"metadata\":{},\"items\":[{\"describedObject\":{\"kind\":\"Pod\",\"namespace\":"
                "\"default\",\"name\":\"web-1\",\"apiVersion\":\"v1\"},\"metricName\":"
                "\"http_requests_per_second\",\"timestamp\":\"2026-07-30T12:00:00Z\","
                "\"window\":60,\"value\":\"23456m\",\"selector\":null}]}");
    cma_buf_done(&b);
}

static void test_cma_encode_metric_value_list__v1beta1_selector_no_window(void **state)
{
    (void)state;
    struct cma_buf b;
    cma_buf_init(&b, 0);
    struct test_sel t = {0};
    const char *get[] = {"GET"};
    add_req(&t, "verb", CMA_SEL_EQ, get, 1);
    struct cma_metric_value v[2] = {pod_value("ml", "bert-0", 16), pod_value("ml", "bert-1", 1000)};
    assert_int_equal(cma_encode_metric_value_list(CMA_CUSTOM_V1BETA1, v, 2, &t.sel, &b, NULL),
                     CMA_OK);
    assert_body(&b,
                "{\"kind\":\"MetricValueList\",\"apiVersion\":\"custom.metrics.k8s.io/v1beta1\","
                "\"metadata\":{},\"items\":["
                "{\"describedObject\":{\"kind\":\"Pod\",\"namespace\":\"ml\",\"name\":\"bert-0\","
                "\"apiVersion\":\"v1\"},\"metricName\":\"http_requests_per_second\","
                "\"timestamp\":\"2026-07-30T12:00:00Z\",\"value\":\"16m\","
                "\"selector\":{\"matchLabels\":{\"verb\":\"GET\"}}},"
                "{\"describedObject\":{\"kind\":\"Pod\",\"namespace\":\"ml\",\"name\":\"bert-1\","
                "\"apiVersion\":\"v1\"},\"metricName\":\"http_requests_per_second\","
                "\"timestamp\":\"2026-07-30T12:00:00Z\",\"value\":\"1\","
                "\"selector\":{\"matchLabels\":{\"verb\":\"GET\"}}}]}");
    cma_buf_done(&b);
}

static void test_cma_encode_metric_value_list__v1beta2_window_no_selector(void **state)
{
    (void)state;
    struct cma_buf b;
    cma_buf_init(&b, 0);
    struct cma_metric_value v = pod_value("default", "web-1", 5000000);
    v.has_window = true;
    v.window_seconds = 60;
    assert_int_equal(cma_encode_metric_value_list(CMA_CUSTOM_V1BETA2, &v, 1, NULL, &b, NULL),
                     CMA_OK);
    assert_body(&b,
                "{\"kind\":\"MetricValueList\",\"apiVersion\":\"custom.metrics.k8s.io/v1beta2\","
                "\"metadata\":{},\"items\":[{\"describedObject\":{\"kind\":\"Pod\",\"namespace\":"
                "\"default\",\"name\":\"web-1\",\"apiVersion\":\"v1\"},\"metric\":{\"name\":"
                "\"http_requests_per_second\",\"selector\":null},\"timestamp\":"
                "\"2026-07-30T12:00:00Z\",\"windowSeconds\":60,\"value\":\"5k\"}]}");
    cma_buf_done(&b);
}

static void test_cma_encode_metric_value_list__v1beta2_selector_no_window(void **state)
{
    (void)state;
    struct cma_buf b;
    cma_buf_init(&b, 0);
    struct test_sel t = {0};
    const char *get[] = {"GET"};
    add_req(&t, "verb", CMA_SEL_EQ, get, 1);
    struct cma_metric_value v = pod_value("default", "web-1", 23456);
    assert_int_equal(cma_encode_metric_value_list(CMA_CUSTOM_V1BETA2, &v, 1, &t.sel, &b, NULL),
                     CMA_OK);
    assert_body(&b,
                "{\"kind\":\"MetricValueList\",\"apiVersion\":\"custom.metrics.k8s.io/v1beta2\","
                "\"metadata\":{},\"items\":[{\"describedObject\":{\"kind\":\"Pod\",\"namespace\":"
                "\"default\",\"name\":\"web-1\",\"apiVersion\":\"v1\"},\"metric\":{\"name\":"
                "\"http_requests_per_second\",\"selector\":{\"matchLabels\":{\"verb\":\"GET\"}}},"
                "\"timestamp\":\"2026-07-30T12:00:00Z\",\"value\":\"23456m\"}]}");
    cma_buf_done(&b);
}

static void test_cma_encode_metric_value_list__empty_items(void **state)
{
    (void)state;
    struct cma_buf b;
    cma_buf_init(&b, 0);
    assert_int_equal(cma_encode_metric_value_list(CMA_CUSTOM_V1BETA1, NULL, 0, NULL, &b, NULL),
                     CMA_OK);
    assert_body(&b,
                "{\"kind\":\"MetricValueList\",\"apiVersion\":\"custom.metrics.k8s.io/v1beta1\","
                "\"metadata\":{},\"items\":[]}");
    cma_buf_clear(&b);
    assert_int_equal(cma_encode_metric_value_list(CMA_CUSTOM_V1BETA2, NULL, 0, NULL, &b, NULL),
                     CMA_OK);
    assert_body(&b,
                "{\"kind\":\"MetricValueList\",\"apiVersion\":\"custom.metrics.k8s.io/v1beta2\","
                "\"metadata\":{},\"items\":[]}");
    cma_buf_done(&b);
}

static void test_cma_encode_metric_value_list__root_scoped_omits_namespace(void **state)
{
    (void)state;
    struct cma_buf b;
    cma_buf_init(&b, 0);
    struct cma_metric_value v[2] = {pod_value(NULL, "node-1", 0), pod_value("", "node-2", -3200)};
    v[0].object.kind = "Node";
    v[1].object.kind = "Node";
    assert_int_equal(cma_encode_metric_value_list(CMA_CUSTOM_V1BETA2, v, 2, NULL, &b, NULL),
                     CMA_OK);
    assert_body(&b,
                "{\"kind\":\"MetricValueList\",\"apiVersion\":\"custom.metrics.k8s.io/v1beta2\","
                "\"metadata\":{},\"items\":["
                "{\"describedObject\":{\"kind\":\"Node\",\"name\":\"node-1\",\"apiVersion\":"
                "\"v1\"},\"metric\":{\"name\":\"http_requests_per_second\",\"selector\":null},"
                "\"timestamp\":\"2026-07-30T12:00:00Z\",\"value\":\"0\"},"
                "{\"describedObject\":{\"kind\":\"Node\",\"name\":\"node-2\",\"apiVersion\":"
                "\"v1\"},\"metric\":{\"name\":\"http_requests_per_second\",\"selector\":null},"
                "\"timestamp\":\"2026-07-30T12:00:00Z\",\"value\":\"-3200m\"}]}");
    cma_buf_done(&b);
}

static void test_cma_encode_metric_value_list__selector_every_operator(void **state)
{
    (void)state;
    struct cma_buf b;
    cma_buf_init(&b, 0);
    /* Requirements in selector order: matchLabels sorted by key with the last "a" winning,
     * matchExpressions in selector order, != as NotIn [v], no values for (Does)Exist(s). */
    struct test_sel t = {0};
    const char *x[] = {"x"}, *y[] = {"y"}, *ab[] = {"a", "b"}, *c[] = {"c"}, *one[] = {"1"},
               *two[] = {"2"};
    add_req(&t, "z", CMA_SEL_EQ, x, 1);
    add_req(&t, "a", CMA_SEL_EQ, one, 1);
    add_req(&t, "a", CMA_SEL_EQ, two, 1);
    add_req(&t, "k1", CMA_SEL_IN, ab, 2);
    add_req(&t, "k2", CMA_SEL_NOTIN, c, 1);
    add_req(&t, "k3", CMA_SEL_NEQ, y, 1);
    add_req(&t, "k4", CMA_SEL_EXISTS, NULL, 0);
    add_req(&t, "k5", CMA_SEL_NOT_EXISTS, NULL, 0);
    struct cma_metric_value v = pod_value("ns", "p", 1);
    assert_int_equal(cma_encode_metric_value_list(CMA_CUSTOM_V1BETA1, &v, 1, &t.sel, &b, NULL),
                     CMA_OK);
    assert_body(&b,
                "{\"kind\":\"MetricValueList\",\"apiVersion\":\"custom.metrics.k8s.io/v1beta1\","
                "\"metadata\":{},\"items\":[{\"describedObject\":{\"kind\":\"Pod\",\"namespace\":"
                "\"ns\",\"name\":\"p\",\"apiVersion\":\"v1\"},\"metricName\":"
                "\"http_requests_per_second\",\"timestamp\":\"2026-07-30T12:00:00Z\","
                "\"value\":\"1m\",\"selector\":{\"matchLabels\":{\"a\":\"2\",\"z\":\"x\"},"
                "\"matchExpressions\":["
                "{\"key\":\"k1\",\"operator\":\"In\",\"values\":[\"a\",\"b\"]},"
                "{\"key\":\"k2\",\"operator\":\"NotIn\",\"values\":[\"c\"]},"
                "{\"key\":\"k3\",\"operator\":\"NotIn\",\"values\":[\"y\"]},"
                "{\"key\":\"k4\",\"operator\":\"Exists\"},"
                "{\"key\":\"k5\",\"operator\":\"DoesNotExist\"}]}}]}");
    cma_buf_done(&b);
}

static void test_cma_encode_metric_value_list__selector_only_expressions(void **state)
{
    (void)state;
    struct cma_buf b;
    cma_buf_init(&b, 0);
    struct test_sel t = {0};
    add_req(&t, "gpu", CMA_SEL_EXISTS, NULL, 0);
    struct cma_metric_value v = pod_value("ns", "p", 1);
    assert_int_equal(cma_encode_metric_value_list(CMA_CUSTOM_V1BETA2, &v, 1, &t.sel, &b, NULL),
                     CMA_OK);
    assert_non_null(strstr(b.ptr, "\"selector\":{\"matchExpressions\":[{\"key\":\"gpu\","
                                  "\"operator\":\"Exists\"}]}}"));
    json_decref(decode(&b));
    /* A selector with no requirements is null, like a NULL one. */
    cma_buf_clear(&b);
    struct cma_selector empty = {0};
    assert_int_equal(cma_encode_metric_value_list(CMA_CUSTOM_V1BETA1, &v, 1, &empty, &b, NULL),
                     CMA_OK);
    assert_non_null(strstr(b.ptr, "\"selector\":null}"));
    cma_buf_done(&b);
}

static void test_cma_encode_metric_value_list__gt_lt_rejected(void **state)
{
    (void)state;
    struct cma_buf b;
    cma_buf_init(&b, 0);
    assert_int_equal(cma_buf_appends(&b, "keep"), CMA_OK);
    enum cma_selector_op ops[] = {CMA_SEL_GT, CMA_SEL_LT};
    for (size_t i = 0; i < 2; i++) {
        struct test_sel t = {0};
        const char *one[] = {"1"};
        add_req(&t, "a", CMA_SEL_EQ, one, 1);
        add_req(&t, "n", ops[i], one, 1);
        struct cma_metric_value v = pod_value("ns", "p", 1);
        struct cma_err err;
        cma_err_clear(&err);
        assert_int_equal(cma_encode_metric_value_list(CMA_CUSTOM_V1BETA1, &v, 1, &t.sel, &b, &err),
                         CMA_ERR_BAD_SELECTOR);
        assert_int_equal(err.code, CMA_ERR_BAD_SELECTOR);
        assert_non_null(strstr(err.msg, i == 0 ? "\"gt\"" : "\"lt\""));
        assert_non_null(strstr(err.msg, "\"n\""));
        assert_string_equal(cma_buf_str(&b), "keep"); /* nothing appended */
    }
    cma_buf_done(&b);
}

static void test_cma_encode_metric_value_list__appends_after_existing(void **state)
{
    (void)state;
    struct cma_buf b;
    cma_buf_init(&b, 0);
    assert_int_equal(cma_buf_appends(&b, "X"), CMA_OK);
    assert_int_equal(cma_encode_metric_value_list(CMA_CUSTOM_V1BETA1, NULL, 0, NULL, &b, NULL),
                     CMA_OK);
    assert_string_equal(cma_buf_str(&b),
                        "X{\"kind\":\"MetricValueList\",\"apiVersion\":\"custom.metrics.k8s.io/"
                        "v1beta1\",\"metadata\":{},\"items\":[]}\n");
    cma_buf_done(&b);
}

static void test_cma_encode_metric_value_list__escapes_and_invalid_utf8(void **state)
{
    (void)state;
    struct cma_buf b;
    cma_buf_init(&b, 0);
    /* quote, backslash, newline, tab, \x01, \x1f, DEL, <>&, é (valid), U+2028, a lone
     * continuation byte, a truncated 3-byte sequence, an overlong '/', a surrogate, 0xFF. */
    const char *name = "a\"b\\c\nd\te\x01"
                       "f\x1f\x7f<>&\xc3\xa9\xe2\x80\xa8"
                       "\x80"
                       "\xe2\x82"
                       "Z\xc0\xaf\xed\xa0\x80\xff";
    struct cma_metric_value v = pod_value("ns", name, 1);
    assert_int_equal(cma_encode_metric_value_list(CMA_CUSTOM_V1BETA2, &v, 1, NULL, &b, NULL),
                     CMA_OK);
    const char *want = "\"name\":\"a\\\"b\\\\c\\nd\\te\\u0001f\\u001f\x7f\\u003c\\u003e\\u0026"
                       "\xc3\xa9\\u2028\\ufffd\\ufffd\\ufffdZ\\ufffd\\ufffd\\ufffd\\ufffd\\ufffd"
                       "\\ufffd\"";
    if (!strstr(b.ptr, want))
        fail_msg("escaping mismatch: %s", b.ptr);
    json_t *j = decode(&b);
    json_t *got = json_object_get(
        json_object_get(json_array_get(json_object_get(j, "items"), 0), "describedObject"), "name");
    assert_string_equal(json_string_value(got),
                        "a\"b\\c\nd\te\x01"
                        "f\x1f\x7f<>&\xc3\xa9\xe2\x80\xa8\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbdZ"
                        "\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd");
    json_decref(j);
    cma_buf_done(&b);
}

static void test_cma_encode_metric_value_list__random_bytes_stay_valid_json(void **state)
{
    (void)state;
    /* Deterministic xorshift so a failure reproduces. Valid UTF-8 without '\0' must
     * round-trip unchanged; anything else must still give valid JSON. */
    uint64_t x = 0x9E3779B97F4A7C15u;
    char raw[64];
    for (int iter = 0; iter < 3000; iter++) {
        size_t len = 0;
        size_t want_len = (size_t)(iter % 40);
        while (len < want_len) {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            unsigned char c = (unsigned char)(x >> 24);
            if (c == 0)
                continue;
            raw[len++] = (char)c;
        }
        raw[len] = '\0';
        const char *names[] = {raw};
        const char *values[] = {raw};
        struct cma_external_metric_value ev = {.metric_name = raw,
                                               .label_names = names,
                                               .label_values = values,
                                               .n_labels = 1,
                                               .timestamp_ms = 0,
                                               .value_milli = 1};
        struct cma_buf b;
        cma_buf_init(&b, 0);
        assert_int_equal(cma_encode_external_metric_value_list(&ev, 1, &b, NULL), CMA_OK);
        json_t *j = decode(&b);
        json_t *item = json_array_get(json_object_get(j, "items"), 0);
        const char *back = json_string_value(json_object_get(item, "metricName"));
        assert_non_null(back);
        size_t back_len = json_string_length(json_object_get(item, "metricName"));
        json_t *oracle = json_stringn(raw, len); /* NULL when raw is not valid UTF-8 */
        if (oracle) {
            assert_int_equal(back_len, len); /* valid UTF-8 round-trips unchanged */
            assert_memory_equal(back, raw, len);
        } else {
            assert_non_null(strstr(back, "\xef\xbf\xbd")); /* replaced, never dropped */
        }
        json_decref(oracle);
        json_decref(j);
        cma_buf_done(&b);
    }
}

static void test_cma_encode_metric_value_list__timestamp_out_of_range(void **state)
{
    (void)state;
    struct cma_buf b;
    cma_buf_init(&b, 0);
    struct cma_metric_value v = pod_value("ns", "p", 1);
    v.timestamp_ms = INT64_MAX;
    struct cma_err err;
    cma_err_clear(&err);
    assert_int_equal(cma_encode_metric_value_list(CMA_CUSTOM_V1BETA1, &v, 1, NULL, &b, &err),
                     CMA_ERR_BACKEND_RESPONSE);
    assert_non_null(strstr(err.msg, "timestamp"));
    assert_int_equal(b.len, 0);
    cma_buf_done(&b);
}

static void test_cma_encode_metric_value_list__bad_version(void **state)
{
    (void)state;
    struct cma_buf b;
    cma_buf_init(&b, 0);
    assert_int_equal(
        cma_encode_metric_value_list((enum cma_custom_version)3, NULL, 0, NULL, &b, NULL),
        CMA_ERR_INTERNAL);
    assert_int_equal(b.len, 0);
    cma_buf_done(&b);
}

static void test_cma_encode_metric_value_list__over_ceiling(void **state)
{
    (void)state;
    struct cma_buf b;
    cma_buf_init(&b, 100);
    struct cma_metric_value v = pod_value("ns", "p", 1);
    struct cma_err err;
    cma_err_clear(&err);
    assert_int_equal(cma_encode_metric_value_list(CMA_CUSTOM_V1BETA1, &v, 1, NULL, &b, &err),
                     CMA_ERR_TOO_LARGE);
    assert_int_equal(err.code, CMA_ERR_TOO_LARGE);
    assert_int_equal(b.len, 0);
    cma_buf_done(&b);
}

/* ---- ExternalMetricValueList -------------------------------------------------------------- */

static void test_cma_encode_external_metric_value_list__labels_sorted(void **state)
{
    (void)state;
    struct cma_buf b;
    cma_buf_init(&b, 0);
    const char *names[] = {"queue", "env", "Zone"};
    const char *values[] = {"worker_tasks", "prod", "eu-1"};
    struct cma_external_metric_value v = {.metric_name = "queue_messages_ready",
                                          .label_names = names,
                                          .label_values = values,
                                          .n_labels = 3,
                                          .timestamp_ms = T_2026_07_30_120000,
                                          .value_milli = 30000};
    assert_int_equal(cma_encode_external_metric_value_list(&v, 1, &b, NULL), CMA_OK);
    assert_body(&b,
                "{\"kind\":\"ExternalMetricValueList\",\"apiVersion\":"
                "\"external.metrics.k8s.io/v1beta1\",\"metadata\":{},\"items\":[{\"metricName\":"
                "\"queue_messages_ready\",\"metricLabels\":{\"Zone\":\"eu-1\",\"env\":\"prod\","
                "\"queue\":\"worker_tasks\"},\"timestamp\":\"2026-07-30T12:00:00Z\","
                "\"value\":\"30\"}]}");
    cma_buf_done(&b);
}

static void test_cma_encode_external_metric_value_list__no_labels(void **state)
{
    (void)state;
    struct cma_buf b;
    cma_buf_init(&b, 0);
    struct cma_external_metric_value v[2] = {
        {.metric_name = "q", .timestamp_ms = T_2026_07_30_120000, .value_milli = 16},
        {.metric_name = "q", .timestamp_ms = T_2026_07_30_120000, .value_milli = 5000000},
    };
    assert_int_equal(cma_encode_external_metric_value_list(v, 2, &b, NULL), CMA_OK);
    assert_body(&b, "{\"kind\":\"ExternalMetricValueList\",\"apiVersion\":"
                    "\"external.metrics.k8s.io/v1beta1\",\"metadata\":{},\"items\":["
                    "{\"metricName\":\"q\",\"metricLabels\":{},\"timestamp\":"
                    "\"2026-07-30T12:00:00Z\",\"value\":\"16m\"},"
                    "{\"metricName\":\"q\",\"metricLabels\":{},\"timestamp\":"
                    "\"2026-07-30T12:00:00Z\",\"value\":\"5k\"}]}");
    cma_buf_done(&b);
}

/* Each item's own timestamp, whatever the item before it had (the writer remembers the last
 * second it formatted): the same second with other milliseconds, the next second, back, and a
 * time before 1970 whose milliseconds would round the wrong way with truncating division. */
static void test_cma_encode_external_metric_value_list__timestamps_per_item(void **state)
{
    (void)state;
    struct cma_buf b;
    cma_buf_init(&b, 0);
    struct cma_external_metric_value v[5] = {
        {.metric_name = "q", .timestamp_ms = T_2026_07_30_120000, .value_milli = 1},
        {.metric_name = "q", .timestamp_ms = T_2026_07_30_120000 + 999, .value_milli = 2},
        {.metric_name = "q", .timestamp_ms = T_2026_07_30_120000 + 1000, .value_milli = 3},
        {.metric_name = "q", .timestamp_ms = T_2026_07_30_120000 - 1, .value_milli = 4},
        {.metric_name = "q", .timestamp_ms = -1, .value_milli = 5},
    };
    assert_int_equal(cma_encode_external_metric_value_list(v, 5, &b, NULL), CMA_OK);
    const char *want[5] = {"2026-07-30T12:00:00Z", "2026-07-30T12:00:00Z", "2026-07-30T12:00:01Z",
                           "2026-07-30T11:59:59Z", "1969-12-31T23:59:59Z"};
    const char *at = cma_buf_str(&b);
    for (size_t i = 0; i < 5; i++) {
        at = strstr(at, "\"timestamp\":\"");
        assert_non_null(at);
        at += strlen("\"timestamp\":\"");
        if (strncmp(at, want[i], strlen(want[i])) != 0)
            fail_msg("item %zu: timestamp %.20s, want %s", i, at, want[i]);
    }
    cma_buf_done(&b);
}

static void test_cma_encode_external_metric_value_list__empty_list(void **state)
{
    (void)state;
    struct cma_buf b;
    cma_buf_init(&b, 0);
    assert_int_equal(cma_encode_external_metric_value_list(NULL, 0, &b, NULL), CMA_OK);
    assert_body(&b, "{\"kind\":\"ExternalMetricValueList\",\"apiVersion\":"
                    "\"external.metrics.k8s.io/v1beta1\",\"metadata\":{},\"items\":[]}");
    cma_buf_done(&b);
}

static void test_cma_encode_external_metric_value_list__repeated_label_keeps_last(void **state)
{
    (void)state;
    struct cma_buf b;
    cma_buf_init(&b, 0);
    const char *names[] = {"a", "b", "a"};
    const char *values[] = {"1", "2", "3"};
    struct cma_external_metric_value v = {.metric_name = "m",
                                          .label_names = names,
                                          .label_values = values,
                                          .n_labels = 3,
                                          .timestamp_ms = 0,
                                          .value_milli = 0};
    assert_int_equal(cma_encode_external_metric_value_list(&v, 1, &b, NULL), CMA_OK);
    assert_non_null(strstr(b.ptr, "\"metricLabels\":{\"a\":\"3\",\"b\":\"2\"},"
                                  "\"timestamp\":\"1970-01-01T00:00:00Z\""));
    json_decref(decode(&b)); /* JSON_REJECT_DUPLICATES */
    cma_buf_done(&b);
}

/* ---- discovery ---------------------------------------------------------------------------- */

static void test_cma_encode_api_resource_list__entries(void **state)
{
    (void)state;
    struct cma_buf b;
    cma_buf_init(&b, 0);
    const char *verbs[] = {"get"};
    struct cma_resource_entry e[2] = {
        {.name = "pods/DCGM_FI_DEV_GPU_UTIL",
         .namespaced = true,
         .kind = "MetricValueList",
         .verbs = verbs,
         .n_verbs = 1},
        {.name = "nodes/temperature",
         .namespaced = false,
         .kind = "MetricValueList",
         .verbs = verbs,
         .n_verbs = 1},
    };
    assert_int_equal(cma_encode_api_resource_list("custom.metrics.k8s.io/v1beta1", e, 2, &b, NULL),
                     CMA_OK);
    assert_body(&b, "{\"kind\":\"APIResourceList\",\"apiVersion\":\"v1\",\"groupVersion\":"
                    "\"custom.metrics.k8s.io/v1beta1\",\"resources\":["
                    "{\"name\":\"pods/DCGM_FI_DEV_GPU_UTIL\",\"singularName\":\"\",\"namespaced\":"
                    "true,\"kind\":\"MetricValueList\",\"verbs\":[\"get\"]},"
                    "{\"name\":\"nodes/temperature\",\"singularName\":\"\",\"namespaced\":false,"
                    "\"kind\":\"MetricValueList\",\"verbs\":[\"get\"]}]}");
    cma_buf_done(&b);
}

static void test_cma_encode_api_resource_list__empty(void **state)
{
    (void)state;
    struct cma_buf b;
    cma_buf_init(&b, 0);
    assert_int_equal(
        cma_encode_api_resource_list("external.metrics.k8s.io/v1beta1", NULL, 0, &b, NULL), CMA_OK);
    assert_body(&b, "{\"kind\":\"APIResourceList\",\"apiVersion\":\"v1\",\"groupVersion\":"
                    "\"external.metrics.k8s.io/v1beta1\",\"resources\":[]}");
    cma_buf_done(&b);
}

static void test_cma_encode_api_resource_list__2000_entries_decode(void **state)
{
    (void)state;
    enum { N = 2000 };
    static char names[N][48];
    struct cma_resource_entry *e = calloc(N, sizeof(*e));
    assert_non_null(e);
    const char *verbs[] = {"get"};
    for (size_t i = 0; i < N; i++) {
        snprintf(names[i], sizeof(names[i]), "pods/metric_%zu", i);
        e[i] = (struct cma_resource_entry){.name = names[i],
                                           .namespaced = i % 2 == 0,
                                           .kind = "MetricValueList",
                                           .verbs = verbs,
                                           .n_verbs = 1};
    }
    struct cma_buf b;
    cma_buf_init(&b, 0);
    assert_int_equal(cma_encode_api_resource_list("custom.metrics.k8s.io/v1beta1", e, N, &b, NULL),
                     CMA_OK);
    json_t *j = decode(&b);
    json_t *res = json_object_get(j, "resources");
    assert_int_equal(json_array_size(res), N);
    json_t *last = json_array_get(res, N - 1);
    assert_string_equal(json_string_value(json_object_get(last, "name")), "pods/metric_1999");
    assert_true(json_is_false(json_object_get(last, "namespaced")));
    json_decref(j);
    cma_buf_done(&b);
    free(e);
}

static void test_cma_encode_api_group__v1beta1_preferred(void **state)
{
    (void)state;
    struct cma_buf b;
    cma_buf_init(&b, 0);
    const char *versions[] = {"v1beta1", "v1beta2"};
    struct cma_api_group_desc g = {
        .name = "custom.metrics.k8s.io", .versions = versions, .n_versions = 2};
    assert_int_equal(cma_encode_api_group(&g, &b, NULL), CMA_OK);
    assert_body(&b,
                "{\"kind\":\"APIGroup\",\"apiVersion\":\"v1\",\"name\":\"custom.metrics.k8s.io\","
                "\"versions\":[{\"groupVersion\":\"custom.metrics.k8s.io/v1beta1\",\"version\":"
                "\"v1beta1\"},{\"groupVersion\":\"custom.metrics.k8s.io/v1beta2\",\"version\":"
                "\"v1beta2\"}],\"preferredVersion\":{\"groupVersion\":"
                "\"custom.metrics.k8s.io/v1beta1\",\"version\":\"v1beta1\"}}");
    cma_buf_done(&b);
}

static void test_cma_encode_api_group_list__two_groups(void **state)
{
    (void)state;
    struct cma_buf b;
    cma_buf_init(&b, 0);
    const char *custom[] = {"v1beta1"}, *external[] = {"v1beta1"};
    struct cma_api_group_desc g[2] = {
        {.name = "custom.metrics.k8s.io", .versions = custom, .n_versions = 1},
        {.name = "external.metrics.k8s.io", .versions = external, .n_versions = 1},
    };
    assert_int_equal(cma_encode_api_group_list(g, 2, &b, NULL), CMA_OK);
    assert_body(&b, "{\"kind\":\"APIGroupList\",\"apiVersion\":\"v1\",\"groups\":["
                    "{\"name\":\"custom.metrics.k8s.io\",\"versions\":[{\"groupVersion\":"
                    "\"custom.metrics.k8s.io/v1beta1\",\"version\":\"v1beta1\"}],"
                    "\"preferredVersion\":{\"groupVersion\":\"custom.metrics.k8s.io/v1beta1\","
                    "\"version\":\"v1beta1\"}},"
                    "{\"name\":\"external.metrics.k8s.io\",\"versions\":[{\"groupVersion\":"
                    "\"external.metrics.k8s.io/v1beta1\",\"version\":\"v1beta1\"}],"
                    "\"preferredVersion\":{\"groupVersion\":\"external.metrics.k8s.io/v1beta1\","
                    "\"version\":\"v1beta1\"}}]}");
    cma_buf_clear(&b);
    assert_int_equal(cma_encode_api_group_list(NULL, 0, &b, NULL), CMA_OK);
    assert_body(&b, "{\"kind\":\"APIGroupList\",\"apiVersion\":\"v1\",\"groups\":[]}");
    cma_buf_done(&b);
}

/* ---- Status and version ------------------------------------------------------------------- */

static void test_cma_encode_status__key_order_as_kube_apiserver(void **state)
{
    (void)state;
    struct cma_buf b;
    cma_buf_init(&b, 0);
    assert_int_equal(
        cma_encode_status(404, "NotFound", "the server could not find the metric foo for pods", &b),
        CMA_OK);
    assert_body(&b, "{\"kind\":\"Status\",\"apiVersion\":\"v1\",\"metadata\":{},\"status\":"
                    "\"Failure\",\"message\":\"the server could not find the metric foo for pods\","
                    "\"reason\":\"NotFound\",\"code\":404}");
    cma_buf_done(&b);
}

static void test_cma_encode_status__empty_reason_omitted(void **state)
{
    (void)state;
    struct cma_buf b;
    cma_buf_init(&b, 0);
    assert_int_equal(cma_encode_status(500, "", "boom \"x\"", &b), CMA_OK);
    assert_body(&b, "{\"kind\":\"Status\",\"apiVersion\":\"v1\",\"metadata\":{},\"status\":"
                    "\"Failure\",\"message\":\"boom \\\"x\\\"\",\"code\":500}");
    cma_buf_done(&b);
}

static void test_cma_encode_status_from_err__uses_error_table(void **state)
{
    (void)state;
    struct cma_buf b;
    cma_buf_init(&b, 0);
    struct cma_err err;
    cma_err_clear(&err);
    cma_err_set(&err, CMA_ERR_BACKEND_TIMEOUT, "prometheus at %s did not answer in 5s",
                "http://prom:9090");
    assert_int_equal(cma_encode_status_from_err(&err, &b), CMA_OK);
    assert_body(&b, "{\"kind\":\"Status\",\"apiVersion\":\"v1\",\"metadata\":{},\"status\":"
                    "\"Failure\",\"message\":\"prometheus at http://prom:9090 did not answer in "
                    "5s\",\"reason\":\"Timeout\",\"code\":504}");
    cma_buf_clear(&b);
    cma_err_clear(&err);
    cma_err_set(&err, CMA_ERR_NOT_FOUND, "the server could not find the metric foo for pods");
    assert_int_equal(cma_encode_status_from_err(&err, &b), CMA_OK);
    assert_body(&b, "{\"kind\":\"Status\",\"apiVersion\":\"v1\",\"metadata\":{},\"status\":"
                    "\"Failure\",\"message\":\"the server could not find the metric foo for pods\","
                    "\"reason\":\"NotFound\",\"code\":404}");
    cma_buf_done(&b);
}

static void test_cma_encode_status_from_err__unset_error_is_internal(void **state)
{
    (void)state;
    struct cma_buf b;
    cma_buf_init(&b, 0);
    assert_int_equal(cma_encode_status_from_err(NULL, &b), CMA_OK);
    json_t *j = decode(&b);
    assert_int_equal(json_integer_value(json_object_get(j, "code")), 500);
    assert_string_equal(json_string_value(json_object_get(j, "reason")), "InternalError");
    assert_string_equal(json_string_value(json_object_get(j, "message")),
                        cma_errc_meaning(CMA_ERR_INTERNAL));
    json_decref(j);
    cma_buf_done(&b);
}

static void test_cma_encode_version__fields_in_go_order(void **state)
{
    (void)state;
    struct cma_buf b;
    cma_buf_init(&b, 0);
    assert_int_equal(cma_encode_version("v0.12.3", "abc123", "2026-07-30T00:00:00Z", &b), CMA_OK);
    const char *prefix = "{\"major\":\"0\",\"minor\":\"12\",\"gitVersion\":\"v0.12.3\","
                         "\"gitCommit\":\"abc123\",\"gitTreeState\":\"\",\"buildDate\":"
                         "\"2026-07-30T00:00:00Z\",\"goVersion\":\"\",\"compiler\":\"";
    assert_memory_equal(b.ptr, prefix, strlen(prefix));
    json_t *j = decode(&b);
    assert_int_equal(json_object_size(j), 9);
    const char *platform = json_string_value(json_object_get(j, "platform"));
    assert_non_null(platform);
    assert_memory_equal(platform, "linux/", 6);
    json_decref(j);
    /* Not a vX.Y tag: major and minor stay empty. */
    cma_buf_clear(&b);
    assert_int_equal(cma_encode_version("devel", "", "", &b), CMA_OK);
    assert_memory_equal(b.ptr, "{\"major\":\"\",\"minor\":\"\",\"gitVersion\":\"devel\",", 44);
    cma_buf_done(&b);
}

/* ---- PodMetrics / NodeMetrics ------------------------------------------------------------- */

/* The example of kubernetes-metrics-api.md section 3, with a milli cpu value. */
static void test_cma_encode_pod_metrics_list__reference_shape(void **state)
{
    (void)state;
    struct cma_buf b;
    cma_buf_init(&b, 0);
    const char *names[] = {"app"};
    const char *values[] = {"web"};
    struct cma_container_metrics c = {"web", {.cpu_milli = 123, .memory_milli = 12056LL * 1024000}};
    struct cma_pod_metrics p = {
        .meta = {.name = "web-1",
                 .namespace_ = "default",
                 .creation_ms = T_2026_07_30_120000 + 5000,
                 .label_names = names,
                 .label_values = values,
                 .n_labels = 1},
        .timestamp_ms = T_2026_07_30_120000,
        .window_ms = 15012,
        .containers = &c,
        .n_containers = 1,
    };
    assert_int_equal(cma_encode_pod_metrics_list(&p, 1, &b, NULL), CMA_OK);
    assert_body(&b, "{\"kind\":\"PodMetricsList\",\"apiVersion\":\"metrics.k8s.io/v1beta1\","
                    "\"metadata\":{},\"items\":[{\"metadata\":{\"name\":\"web-1\",\"namespace\":"
                    "\"default\",\"creationTimestamp\":\"2026-07-30T12:00:05Z\",\"labels\":{"
                    "\"app\":\"web\"}},\"timestamp\":\"2026-07-30T12:00:00Z\",\"window\":"
                    "\"15.012s\",\"containers\":[{\"name\":\"web\",\"usage\":{\"cpu\":\"123m\","
                    "\"memory\":\"12056Ki\"}}]}]}");
    cma_buf_done(&b);
}

/* Two pods, labels sorted as a Go map (a repeated key keeps the last value), no labels →
 * no "labels" key, containers in the given order, quantities canonical: cpu DecimalSI, memory
 * BinarySI only when exactly divisible. */
static void test_cma_encode_pod_metrics_list__labels_containers_quantities(void **state)
{
    (void)state;
    struct cma_buf b;
    cma_buf_init(&b, 0);
    const char *names[] = {"tier", "app", "tier"};
    const char *values[] = {"x", "bert", "inference"};
    struct cma_container_metrics c1[] = {
        {"a", {.cpu_milli = 1500, .memory_milli = 34LL * 1048576 * 1000}},
        {"b", {.cpu_milli = 0, .memory_milli = 0}},
    };
    struct cma_container_metrics c2[] = {
        {"server", {.cpu_milli = 2000000, .memory_milli = 1000000000}}, /* 1000000 bytes */
    };
    struct cma_pod_metrics p[] = {
        {.meta = {.name = "bert-0",
                  .namespace_ = "ml",
                  .creation_ms = T_2026_07_30_120000,
                  .label_names = names,
                  .label_values = values,
                  .n_labels = 3},
         .timestamp_ms = T_2026_07_30_120000,
         .window_ms = 300000,
         .containers = c1,
         .n_containers = 2},
        {.meta = {.name = "x", .namespace_ = "vision", .creation_ms = T_2026_07_30_120000},
         .timestamp_ms = T_2026_07_30_120000 - 61000,
         .window_ms = 90000,
         .containers = c2,
         .n_containers = 1},
    };
    assert_int_equal(cma_encode_pod_metrics_list(p, 2, &b, NULL), CMA_OK);
    assert_body(&b, "{\"kind\":\"PodMetricsList\",\"apiVersion\":\"metrics.k8s.io/v1beta1\","
                    "\"metadata\":{},\"items\":[{\"metadata\":{\"name\":\"bert-0\",\"namespace\":"
                    "\"ml\",\"creationTimestamp\":\"2026-07-30T12:00:00Z\",\"labels\":{\"app\":"
                    "\"bert\",\"tier\":\"inference\"}},\"timestamp\":\"2026-07-30T12:00:00Z\","
                    "\"window\":\"5m0s\",\"containers\":[{\"name\":\"a\",\"usage\":{\"cpu\":"
                    "\"1500m\",\"memory\":\"34Mi\"}},{\"name\":\"b\",\"usage\":{\"cpu\":\"0\","
                    "\"memory\":\"0\"}}]},{\"metadata\":{\"name\":\"x\",\"namespace\":\"vision\","
                    "\"creationTimestamp\":\"2026-07-30T12:00:00Z\"},\"timestamp\":"
                    "\"2026-07-30T11:58:59Z\",\"window\":\"1m30s\",\"containers\":[{\"name\":"
                    "\"server\",\"usage\":{\"cpu\":\"2k\",\"memory\":\"1000000\"}}]}]}");
    cma_buf_done(&b);
}

static void test_cma_encode_pod_metrics__single_object_with_kind(void **state)
{
    (void)state;
    struct cma_buf b;
    cma_buf_init(&b, 0);
    struct cma_container_metrics c = {"server", {.cpu_milli = 12, .memory_milli = 1536000}};
    struct cma_pod_metrics p = {
        .meta = {.name = "bert-1", .namespace_ = "ml", .creation_ms = T_2026_07_30_120000},
        .timestamp_ms = T_2026_07_30_120000,
        .window_ms = 300000,
        .containers = &c,
        .n_containers = 1,
    };
    assert_int_equal(cma_encode_pod_metrics(&p, &b, NULL), CMA_OK);
    assert_body(&b, "{\"kind\":\"PodMetrics\",\"apiVersion\":\"metrics.k8s.io/v1beta1\","
                    "\"metadata\":{\"name\":\"bert-1\",\"namespace\":\"ml\",\"creationTimestamp\":"
                    "\"2026-07-30T12:00:00Z\"},\"timestamp\":\"2026-07-30T12:00:00Z\",\"window\":"
                    "\"5m0s\",\"containers\":[{\"name\":\"server\",\"usage\":{\"cpu\":\"12m\","
                    "\"memory\":\"1536\"}}]}");
    assert_int_equal(cma_encode_pod_metrics(NULL, &b, NULL), CMA_ERR_INTERNAL);
    cma_buf_done(&b);
}

static void test_cma_encode_pod_metrics_list__empty_items(void **state)
{
    (void)state;
    struct cma_buf b;
    cma_buf_init(&b, 0);
    assert_int_equal(cma_encode_pod_metrics_list(NULL, 0, &b, NULL), CMA_OK);
    assert_body(&b, "{\"kind\":\"PodMetricsList\",\"apiVersion\":\"metrics.k8s.io/v1beta1\","
                    "\"metadata\":{},\"items\":[]}");
    cma_buf_clear(&b);
    assert_int_equal(cma_encode_node_metrics_list(NULL, 0, &b, NULL), CMA_OK);
    assert_body(&b, "{\"kind\":\"NodeMetricsList\",\"apiVersion\":\"metrics.k8s.io/v1beta1\","
                    "\"metadata\":{},\"items\":[]}");
    cma_buf_done(&b);
}

/* Bad input leaves the buffer as it was and says why. */
static void test_cma_encode_pod_metrics_list__bad_timestamp_and_items(void **state)
{
    (void)state;
    struct cma_buf b;
    cma_buf_init(&b, 0);
    assert_int_equal(cma_buf_appends(&b, "keep"), CMA_OK);
    struct cma_pod_metrics p = {
        .meta = {.name = "p", .namespace_ = "ns", .creation_ms = T_2026_07_30_120000},
        .timestamp_ms = INT64_MAX,
    };
    struct cma_err err;
    cma_err_clear(&err);
    assert_int_equal(cma_encode_pod_metrics_list(&p, 1, &b, &err), CMA_ERR_BACKEND_RESPONSE);
    assert_non_null(strstr(err.msg, "timestamp"));
    assert_string_equal(cma_buf_str(&b), "keep");
    p.timestamp_ms = T_2026_07_30_120000;
    p.n_containers = 1; /* but no array */
    cma_err_clear(&err);
    assert_int_equal(cma_encode_pod_metrics_list(&p, 1, &b, &err), CMA_ERR_INTERNAL);
    assert_non_null(strstr(err.msg, "no containers"));
    p.n_containers = 0;
    p.meta.n_labels = 2; /* but no arrays */
    assert_int_equal(cma_encode_pod_metrics_list(&p, 1, &b, NULL), CMA_ERR_INTERNAL);
    assert_int_equal(cma_encode_pod_metrics_list(NULL, 1, &b, NULL), CMA_ERR_INTERNAL);
    assert_string_equal(cma_buf_str(&b), "keep");
    cma_buf_done(&b);
}

static void test_cma_encode_pod_metrics_list__over_ceiling(void **state)
{
    (void)state;
    struct cma_buf b;
    cma_buf_init(&b, 120);
    struct cma_container_metrics c = {"server", {.cpu_milli = 1, .memory_milli = 1}};
    struct cma_pod_metrics p = {
        .meta = {.name = "p", .namespace_ = "ns", .creation_ms = T_2026_07_30_120000},
        .timestamp_ms = T_2026_07_30_120000,
        .containers = &c,
        .n_containers = 1,
    };
    struct cma_err err;
    cma_err_clear(&err);
    assert_int_equal(cma_encode_pod_metrics_list(&p, 1, &b, &err), CMA_ERR_TOO_LARGE);
    assert_int_equal(b.len, 0);
    cma_buf_done(&b);
}

/* Hostile label values stay valid JSON and decode back (jansson as the oracle). */
static void test_cma_encode_pod_metrics_list__escaped_labels_decode(void **state)
{
    (void)state;
    struct cma_buf b;
    cma_buf_init(&b, 0);
    const char *names[] = {"a\"b", "<x>"};
    const char *values[] = {"line\nbreak", "\xff"};
    struct cma_container_metrics c = {"c\\1", {.cpu_milli = -5, .memory_milli = 2048000}};
    struct cma_pod_metrics p = {
        .meta = {.name = "p&q",
                 .namespace_ = "ns",
                 .creation_ms = T_2026_07_30_120000,
                 .label_names = names,
                 .label_values = values,
                 .n_labels = 2},
        .timestamp_ms = T_2026_07_30_120000,
        .window_ms = 60000,
        .containers = &c,
        .n_containers = 1,
    };
    assert_int_equal(cma_encode_pod_metrics_list(&p, 1, &b, NULL), CMA_OK);
    json_t *j = decode(&b);
    json_t *item = json_array_get(json_object_get(j, "items"), 0);
    json_t *meta = json_object_get(item, "metadata");
    assert_string_equal(json_string_value(json_object_get(meta, "name")), "p&q");
    json_t *labels = json_object_get(meta, "labels");
    assert_string_equal(json_string_value(json_object_get(labels, "a\"b")), "line\nbreak");
    assert_string_equal(json_string_value(json_object_get(labels, "<x>")), "\xef\xbf\xbd");
    json_t *c0 = json_array_get(json_object_get(item, "containers"), 0);
    assert_string_equal(json_string_value(json_object_get(c0, "name")), "c\\1");
    json_t *usage = json_object_get(c0, "usage");
    assert_string_equal(json_string_value(json_object_get(usage, "cpu")), "-5m");
    assert_string_equal(json_string_value(json_object_get(usage, "memory")), "2Ki");
    assert_string_equal(json_string_value(json_object_get(item, "window")), "1m0s");
    json_decref(j);
    cma_buf_done(&b);
}

static void test_cma_encode_node_metrics_list__usage_and_order(void **state)
{
    (void)state;
    struct cma_buf b;
    cma_buf_init(&b, 0);
    const char *names[] = {"kubernetes.io/hostname", "kubernetes.io/arch"};
    const char *values[] = {"gpu-node-1", "amd64"};
    struct cma_node_metrics n[] = {
        {.meta = {.name = "gpu-node-1",
                  .creation_ms = T_2026_07_30_120000,
                  .label_names = names,
                  .label_values = values,
                  .n_labels = 2},
         .timestamp_ms = T_2026_07_30_120000,
         .window_ms = 300000,
         .usage = {.cpu_milli = 1250, .memory_milli = 8LL * 1073741824 * 1000}},
        {.meta = {.name = "gpu-node-2", .namespace_ = "", .creation_ms = T_2026_07_30_120000},
         .timestamp_ms = T_2026_07_30_120000,
         .window_ms = 300000,
         .usage = {.cpu_milli = 3000, .memory_milli = 1500}},
    };
    assert_int_equal(cma_encode_node_metrics_list(n, 2, &b, NULL), CMA_OK);
    assert_body(&b, "{\"kind\":\"NodeMetricsList\",\"apiVersion\":\"metrics.k8s.io/v1beta1\","
                    "\"metadata\":{},\"items\":[{\"metadata\":{\"name\":\"gpu-node-1\","
                    "\"creationTimestamp\":\"2026-07-30T12:00:00Z\",\"labels\":{"
                    "\"kubernetes.io/arch\":\"amd64\",\"kubernetes.io/hostname\":\"gpu-node-1\"}},"
                    "\"timestamp\":\"2026-07-30T12:00:00Z\",\"window\":\"5m0s\",\"usage\":{"
                    "\"cpu\":\"1250m\",\"memory\":\"8Gi\"}},{\"metadata\":{\"name\":\"gpu-node-2\","
                    "\"creationTimestamp\":\"2026-07-30T12:00:00Z\"},\"timestamp\":"
                    "\"2026-07-30T12:00:00Z\",\"window\":\"5m0s\",\"usage\":{\"cpu\":\"3\","
                    "\"memory\":\"1500m\"}}]}");
    cma_buf_done(&b);
}

static void test_cma_encode_node_metrics__single_object_and_errors(void **state)
{
    (void)state;
    struct cma_buf b;
    cma_buf_init(&b, 0);
    struct cma_node_metrics n = {
        .meta = {.name = "n1", .creation_ms = T_2026_07_30_120000},
        .timestamp_ms = T_2026_07_30_120000,
        .window_ms = 0,
        .usage = {.cpu_milli = 100, .memory_milli = 1024000},
    };
    assert_int_equal(cma_encode_node_metrics(&n, &b, NULL), CMA_OK);
    assert_body(&b, "{\"kind\":\"NodeMetrics\",\"apiVersion\":\"metrics.k8s.io/v1beta1\","
                    "\"metadata\":{\"name\":\"n1\",\"creationTimestamp\":"
                    "\"2026-07-30T12:00:00Z\"},\"timestamp\":\"2026-07-30T12:00:00Z\",\"window\":"
                    "\"0s\",\"usage\":{\"cpu\":\"100m\",\"memory\":\"1Ki\"}}");
    cma_buf_clear(&b);
    n.meta.creation_ms = INT64_MIN;
    struct cma_err err;
    cma_err_clear(&err);
    assert_int_equal(cma_encode_node_metrics(&n, &b, &err), CMA_ERR_BACKEND_RESPONSE);
    assert_int_equal(b.len, 0);
    assert_int_equal(cma_encode_node_metrics(NULL, &b, NULL), CMA_ERR_INTERNAL);
    assert_int_equal(cma_encode_node_metrics_list(NULL, 2, &b, NULL), CMA_ERR_INTERNAL);
    cma_buf_done(&b);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cma_encode_metric_value_list__v1beta1_window_no_selector),
        cmocka_unit_test(test_cma_encode_metric_value_list__v1beta1_selector_no_window),
        cmocka_unit_test(test_cma_encode_metric_value_list__v1beta2_window_no_selector),
        cmocka_unit_test(test_cma_encode_metric_value_list__v1beta2_selector_no_window),
        cmocka_unit_test(test_cma_encode_metric_value_list__empty_items),
        cmocka_unit_test(test_cma_encode_metric_value_list__root_scoped_omits_namespace),
        cmocka_unit_test(test_cma_encode_metric_value_list__selector_every_operator),
        cmocka_unit_test(test_cma_encode_metric_value_list__selector_only_expressions),
        cmocka_unit_test(test_cma_encode_metric_value_list__gt_lt_rejected),
        cmocka_unit_test(test_cma_encode_metric_value_list__appends_after_existing),
        cmocka_unit_test(test_cma_encode_metric_value_list__escapes_and_invalid_utf8),
        cmocka_unit_test(test_cma_encode_metric_value_list__random_bytes_stay_valid_json),
        cmocka_unit_test(test_cma_encode_metric_value_list__timestamp_out_of_range),
        cmocka_unit_test(test_cma_encode_metric_value_list__bad_version),
        cmocka_unit_test(test_cma_encode_metric_value_list__over_ceiling),
        cmocka_unit_test(test_cma_encode_external_metric_value_list__labels_sorted),
        cmocka_unit_test(test_cma_encode_external_metric_value_list__no_labels),
        cmocka_unit_test(test_cma_encode_external_metric_value_list__timestamps_per_item),
        cmocka_unit_test(test_cma_encode_external_metric_value_list__empty_list),
        cmocka_unit_test(test_cma_encode_external_metric_value_list__repeated_label_keeps_last),
        cmocka_unit_test(test_cma_encode_api_resource_list__entries),
        cmocka_unit_test(test_cma_encode_api_resource_list__empty),
        cmocka_unit_test(test_cma_encode_api_resource_list__2000_entries_decode),
        cmocka_unit_test(test_cma_encode_api_group__v1beta1_preferred),
        cmocka_unit_test(test_cma_encode_api_group_list__two_groups),
        cmocka_unit_test(test_cma_encode_status__key_order_as_kube_apiserver),
        cmocka_unit_test(test_cma_encode_status__empty_reason_omitted),
        cmocka_unit_test(test_cma_encode_status_from_err__uses_error_table),
        cmocka_unit_test(test_cma_encode_status_from_err__unset_error_is_internal),
        cmocka_unit_test(test_cma_encode_version__fields_in_go_order),
        cmocka_unit_test(test_cma_encode_pod_metrics_list__reference_shape),
        cmocka_unit_test(test_cma_encode_pod_metrics_list__labels_containers_quantities),
        cmocka_unit_test(test_cma_encode_pod_metrics__single_object_with_kind),
        cmocka_unit_test(test_cma_encode_pod_metrics_list__empty_items),
        cmocka_unit_test(test_cma_encode_pod_metrics_list__bad_timestamp_and_items),
        cmocka_unit_test(test_cma_encode_pod_metrics_list__over_ceiling),
        cmocka_unit_test(test_cma_encode_pod_metrics_list__escaped_labels_decode),
        cmocka_unit_test(test_cma_encode_node_metrics_list__usage_and_order),
        cmocka_unit_test(test_cma_encode_node_metrics__single_object_and_errors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
