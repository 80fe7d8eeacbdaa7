/* query_stream_test.c: the streaming /api/v1/query decoder: vector, scalar, matrix, string and
 * status:error answers split at every byte boundary, keys in any order (resultType after result,
 * data before status), the keep callback (only needed series stored, labels sorted), the byte
 * budget (exact accounting, TOO_LARGE for one answer, TOO_MANY_REQUESTS when others hold it,
 * refused during feed, not at the end), limits and strictness (duplicates, nesting, big items). */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "cma/buf.h"
#include "cma/prom.h"

/* "type seen n; name=value,...=v@ts; ..." so runs can be compared as strings. */
static void describe(const struct cma_prom_result *r, struct cma_buf *out)
{
    cma_buf_clear(out);
    assert_int_equal(
        cma_buf_printf(out, "%d seen %zu n %zu;", (int)r->type, r->n_seen, r->n_samples), CMA_OK);
    for (size_t i = 0; i < r->n_samples; i++) {
        const struct cma_sample *s = &r->samples[i];
        for (size_t k = 0; k < s->n_labels; k++)
            assert_int_equal(cma_buf_printf(out, "%s%s=%s", k ? "," : " ", s->labels[k].name,
                                            s->labels[k].value),
                             CMA_OK);
        assert_int_equal(cma_buf_printf(out, " %.17g@%lld;", s->value, (long long)s->timestamp_ms),
                         CMA_OK);
    }
}

/* Decodes doc fed in two pieces split at `split` (SIZE_MAX: one byte at a time). */
static enum cma_errc decode_split(const char *doc, size_t split, cma_sample_keep_fn keep,
                                  void *keep_ctx, struct cma_prom_budget *budget,
                                  struct cma_prom_result **ret, struct cma_err *err)
{
    size_t len = strlen(doc);
    struct cma_query_parser *qp = NULL;
    assert_int_equal(cma_query_parser_new(keep, keep_ctx, budget, &qp), CMA_OK);
    cma_err_clear(err);
    enum cma_errc rc = CMA_OK;
    if (split == SIZE_MAX) {
        for (size_t i = 0; i < len && rc == CMA_OK; i++)
            rc = cma_query_parser_feed(qp, doc + i, 1, err);
    } else {
        rc = cma_query_parser_feed(qp, doc, split, err);
        if (rc == CMA_OK)
            rc = cma_query_parser_feed(qp, doc + split, len - split, err);
    }
    if (rc == CMA_OK)
        rc = cma_query_parser_finish(qp, ret, err);
    cma_query_parser_free(qp);
    return rc;
}

/* Every split point and byte-by-byte give the same result as one piece. */
static void check_all_splits(const char *doc, const char *want)
{
    struct cma_buf got;
    cma_buf_init(&got, 0);
    size_t len = strlen(doc);
    for (size_t split = 0; split <= len + 1; split++) {
        size_t at = split == len + 1 ? SIZE_MAX : split;
        struct cma_prom_result *r = NULL;
        struct cma_err err;
        enum cma_errc rc = decode_split(doc, at, NULL, NULL, NULL, &r, &err);
        if (rc != CMA_OK)
            fail_msg("split %zu: %s", split, err.msg);
        describe(r, &got);
        if (strcmp(cma_buf_str(&got), want) != 0)
            fail_msg("split %zu:\n got  %s\n want %s", split, cma_buf_str(&got), want);
        cma_prom_result_free(r);
    }
    cma_buf_done(&got);
}

/* Random sample values and times, in the short decimal forms the decoder reads without strtod
 * and in forms it leaves to strtod, give exactly what strtod (and, for times, rounding seconds
 * × 1000) gives: the same double bit for bit, the same millisecond. */
static void test_cma_query_parser__numbers_as_strtod(void **state)
{
    (void)state;
    uint64_t x = 0x243F6A8885A308D3u;
    struct cma_buf doc;
    cma_buf_init(&doc, 0);
    for (int pass = 0; pass < 200; pass++) {
        char values[64][48], times[64][48];
        for (int i = 0; i < 64; i++) {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            int digits = 1 + (int)(x % 18), decimals = (int)((x >> 8) % 19);
            unsigned long long m = (x >> 12) % 1000000000000000000ULL;
            char num[24];
            snprintf(num, sizeof(num), "%0*llu", digits, m % 1000000000000000000ULL);
            num[digits] = '\0';
            if (decimals && decimals < digits) { /* put a point in */
                memmove(num + digits - decimals + 1, num + digits - decimals, (size_t)decimals + 1);
                num[digits - decimals] = '.';
            }
            switch ((x >> 20) % 5) { /* short forms, and forms left to strtod */
            case 1:
                snprintf(values[i], sizeof(values[i]), "-%s", num);
                break;
            case 2:
                snprintf(values[i], sizeof(values[i]), "%se-3", num);
                break;
            case 3:
                snprintf(values[i], sizeof(values[i]), "%sE+2", num);
                break;
            default:
                snprintf(values[i], sizeof(values[i]), "%s", num);
                break;
            }
            /* times: seconds with 0-4 decimals, sometimes very large */
            unsigned long long secs = (x >> 24) % ((x & 1) ? 2000000000ULL : 4000000000000ULL);
            int td = (int)((x >> 40) % 5);
            unsigned long long frac = (x >> 44) % 10000;
            if (td == 0)
                snprintf(times[i], sizeof(times[i]), "%llu", secs);
            else
                snprintf(times[i], sizeof(times[i]), "%llu.%0*llu", secs, td,
                         frac % (unsigned long long)pow(10, td));
        }
        cma_buf_clear(&doc);
        assert_int_equal(cma_buf_appends(&doc, "{\"status\":\"success\",\"data\":{\"resultType\":"
                                               "\"vector\",\"result\":["),
                         CMA_OK);
        for (int i = 0; i < 64; i++)
            assert_int_equal(cma_buf_printf(&doc,
                                            "%s{\"metric\":{\"i\":\"%02d\"},\"value\":[%s,\"%s\"]}",
                                            i ? "," : "", i, times[i], values[i]),
                             CMA_OK);
        assert_int_equal(cma_buf_appends(&doc, "]}}"), CMA_OK);
        struct cma_prom_result *r = NULL;
        struct cma_err err;
        if (decode_split(cma_buf_str(&doc), 0, NULL, NULL, NULL, &r, &err) != CMA_OK)
            fail_msg("%s", err.msg);
        assert_int_equal(r->n_samples, 64);
        for (size_t k = 0; k < r->n_samples; k++) {
            const struct cma_sample *smp = &r->samples[k];
            int i = atoi(smp->labels[0].value);
            double want = strtod(values[i], NULL);
            if (memcmp(&want, &smp->value, sizeof(want)) != 0)
                fail_msg("value \"%s\": got %.17g, strtod %.17g", values[i], smp->value, want);
            long long want_ms = (long long)round(strtod(times[i], NULL) * 1000.0);
            if (want_ms != smp->timestamp_ms)
                fail_msg("time %s: got %lld ms, want %lld", times[i], (long long)smp->timestamp_ms,
                         want_ms);
        }
        cma_prom_result_free(r);
    }
    cma_buf_done(&doc);
}

static void test_cma_query_parser__vector_every_split(void **state)
{
    (void)state;
    check_all_splits(
        "{\"status\":\"success\",\"data\":{\"resultType\":\"vector\",\"result\":["
        "{\"metric\":{\"pod\":\"bert-0\",\"namespace\":\"ml\",\"__name__\":\"gpu\"},"
        "\"value\":[1732227811.123,\"42.5\"]},"
        "{\"metric\":{\"pod\":\"b\\u00e9rt-\\\"1\\\"\"},\"value\":[1732227811,\"NaN\"]}"
        "]},\"warnings\":[\"w\",{\"x\":[1,null,true]}]}",
        "0 seen 2 n 2; __name__=gpu,namespace=ml,pod=bert-0 42.5@1732227811123;"
        " pod=b\xc3\xa9rt-\"1\" nan@1732227811000;");
}

static void test_cma_query_parser__scalar_every_split(void **state)
{
    (void)state;
    check_all_splits(
        "{\"status\":\"success\",\"data\":{\"resultType\":\"scalar\",\"result\":[1.5,\"+Inf\"]}}",
        "1 seen 1 n 1; inf@1500;");
}

static void test_cma_query_parser__matrix_every_split(void **state)
{
    (void)state;
    check_all_splits("{\"status\":\"success\",\"data\":{\"resultType\":\"matrix\",\"result\":["
                     "{\"metric\":{\"pod\":\"a\"},\"values\":[[1,\"1\"],[2,\"2\"],[3,\"3e3\"]]},"
                     "{\"metric\":{},\"values\":[[4,\"-4\"]]}]}}",
                     "2 seen 2 n 2; pod=a 3000@3000; -4@4000;");
}

static void test_cma_query_parser__string_every_split(void **state)
{
    (void)state;
    check_all_splits(
        "{\"status\":\"success\",\"data\":{\"resultType\":\"string\",\"result\":[7,\"hello\"]}}",
        "3 seen 0 n 0;");
}

static void test_cma_query_parser__error_every_split(void **state)
{
    (void)state;
    static const char doc[] = "{\"status\":\"error\",\"errorType\":\"timeout\","
                              "\"error\":\"query timed out in expression evaluation\"}";
    for (size_t split = 0; split <= sizeof(doc) - 1; split++) {
        struct cma_prom_result *r = NULL;
        struct cma_err err;
        assert_int_equal(decode_split(doc, split, NULL, NULL, NULL, &r, &err),
                         CMA_ERR_BACKEND_TIMEOUT);
        assert_null(r);
        assert_string_equal(err.msg, "timeout: query timed out in expression evaluation");
    }
}

/* Keys sorted alphabetically, as a proxy that re-encodes a Go map writes them: data before
 * status, result before resultType. */
static void test_cma_query_parser__keys_in_any_order(void **state)
{
    (void)state;
    check_all_splits("{\"data\":{\"result\":[{\"metric\":{\"pod\":\"a\"},\"value\":[1,\"2\"]}],"
                     "\"resultType\":\"vector\"},\"status\":\"success\"}",
                     "0 seen 1 n 1; pod=a 2@1000;");
    check_all_splits("{\"data\":{\"result\":[{\"metric\":{},\"values\":[[1,\"2\"],[5,\"6\"]]}],"
                     "\"resultType\":\"matrix\"},\"status\":\"success\"}",
                     "2 seen 1 n 1; 6@5000;");
    check_all_splits("{\"data\":{\"result\":[2,\"3\"],\"resultType\":\"scalar\"},"
                     "\"status\":\"success\"}",
                     "1 seen 1 n 1; 3@2000;");
    check_all_splits("{\"data\":{\"result\":[2,\"text\"],\"resultType\":\"string\"},"
                     "\"status\":\"success\"}",
                     "3 seen 0 n 0;");
    static const struct {
        const char *doc, *msg;
    } bad[] = {
        {"{\"data\":{\"result\":[{\"metric\":{},\"values\":[[1,\"2\"]]}],\"resultType\":"
         "\"vector\"},\"status\":\"success\"}",
         "data.result[0].value is missing"},
        {"{\"data\":{\"result\":[{\"metric\":{},\"value\":[1,\"2\"]}],\"resultType\":"
         "\"matrix\"},\"status\":\"success\"}",
         "data.result[0].values is not an array"},
        {"{\"data\":{\"result\":[2,\"x\"],\"resultType\":\"scalar\"},\"status\":\"success\"}",
         "data.result has value \"x\", which is not a number"},
        {"{\"data\":{\"result\":[2,\"1\"],\"resultType\":\"vector\"},\"status\":\"success\"}",
         "data.result[0] is not an object"},
        {"{\"data\":{\"result\":[{\"metric\":{},\"value\":[1,\"2\"]}],\"resultType\":"
         "\"scalar\"},\"status\":\"success\"}",
         "data.result is not a [time, \"value\"] pair"},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        struct cma_prom_result *r = NULL;
        struct cma_err err;
        assert_int_equal(decode_split(bad[i].doc, 7, NULL, NULL, NULL, &r, &err),
                         CMA_ERR_BACKEND_RESPONSE);
        if (!strstr(err.msg, bad[i].msg))
            fail_msg("case %zu: got \"%s\", want \"%s\"", i, err.msg, bad[i].msg);
    }
}

/* ---- keep ---------------------------------------------------------------------------------- */

struct keep_pods {
    const char *want;
    size_t calls;
    bool sorted;
};

static bool keep_pod(void *ctx, const struct cma_label_view *labels, size_t n)
{
    struct keep_pods *k = ctx;
    k->calls++;
    for (size_t i = 1; i < n; i++)
        if (strcmp(labels[i - 1].name, labels[i].name) >= 0)
            k->sorted = false;
    for (size_t i = 0; i < n; i++)
        if (strcmp(labels[i].name, "pod") == 0 && strlen(labels[i].value) == labels[i].value_len)
            return strcmp(labels[i].value, k->want) == 0;
    return false;
}

static const char three_pods[] =
    "{\"status\":\"success\",\"data\":{\"resultType\":\"vector\",\"result\":["
    "{\"metric\":{\"zone\":\"z\",\"pod\":\"a\",\"app\":\"x\"},\"value\":[1,\"1\"]},"
    "{\"metric\":{\"zone\":\"z\",\"pod\":\"b\",\"app\":\"x\"},\"value\":[1,\"2\"]},"
    "{\"metric\":{\"zone\":\"z\",\"pod\":\"c\",\"app\":\"x\"},\"value\":[1,\"3\"]}]}}";

static void test_cma_query_parser__keep_stores_only_needed(void **state)
{
    (void)state;
    struct keep_pods k = {.want = "b", .sorted = true};
    struct cma_prom_result *r = NULL;
    struct cma_err err;
    assert_int_equal(decode_split(three_pods, 40, keep_pod, &k, NULL, &r, &err), CMA_OK);
    assert_int_equal(k.calls, 3);
    assert_true(k.sorted);
    assert_int_equal(r->n_seen, 3);
    assert_int_equal(r->n_samples, 1);
    assert_string_equal(cma_sample_label(&r->samples[0], "pod"), "b");
    assert_true(r->samples[0].value == 2);
    cma_prom_result_free(r);
    k = (struct keep_pods){.want = "none", .sorted = true};
    assert_int_equal(decode_split(three_pods, 0, keep_pod, &k, NULL, &r, &err), CMA_OK);
    assert_int_equal(r->n_samples, 0);
    assert_int_equal(r->n_seen, 3);
    cma_prom_result_free(r);
}

/* ---- the budget ---------------------------------------------------------------------------- */

static void test_cma_query_parser__budget_exact_accounting(void **state)
{
    (void)state;
    struct cma_prom_budget b = {.max = 1 << 20};
    atomic_init(&b.used, 0);
    struct cma_prom_result *r = NULL, *r2 = NULL;
    struct cma_err err;
    assert_int_equal(decode_split(three_pods, 30, NULL, NULL, &b, &r, &err), CMA_OK);
    size_t held = atomic_load(&b.used);
    assert_true(held > 0);
    assert_int_equal(held, r->charged); /* the scratch went back at finish */
    struct keep_pods k = {.want = "c", .sorted = true};
    assert_int_equal(decode_split(three_pods, 30, keep_pod, &k, &b, &r2, &err), CMA_OK);
    assert_true(r2->charged < r->charged); /* one series kept instead of three */
    assert_int_equal(atomic_load(&b.used), held + r2->charged);
    cma_prom_result_free(r);
    cma_prom_result_free(r2);
    assert_int_equal(atomic_load(&b.used), 0);
    /* a failed decode gives everything back too */
    assert_int_equal(decode_split("{\"status\":\"success\",\"data\":{\"resultType\":\"vector\","
                                  "\"result\":[{\"metric\":{\"a\":\"b\"},\"value\":[1,\"1\"]},",
                                  10, NULL, NULL, &b, &r, &err),
                     CMA_ERR_BACKEND_RESPONSE);
    assert_int_equal(atomic_load(&b.used), 0);
}

/* A document of n series with big labels, for the budget cases. */
static char *many_series(size_t n)
{
    struct cma_buf b;
    cma_buf_init(&b, 0);
    assert_int_equal(cma_buf_appends(&b, "{\"status\":\"success\",\"data\":{\"resultType\":"
                                         "\"vector\",\"result\":["),
                     CMA_OK);
    for (size_t i = 0; i < n; i++)
        assert_int_equal(
            cma_buf_printf(&b,
                           "%s{\"metric\":{\"pod\":\"pod-%06zu\",\"filler\":\"%0200zu\"},"
                           "\"value\":[1,\"%zu\"]}",
                           i ? "," : "", i, i, i),
            CMA_OK);
    assert_int_equal(cma_buf_appends(&b, "]}}"), CMA_OK);
    return cma_buf_take(&b);
}

static void test_cma_query_parser__budget_too_large_during_feed(void **state)
{
    (void)state;
    char *doc = many_series(2000); /* ~500 KB, ~600 KB kept */
    struct cma_prom_budget b = {.max = 64 << 10};
    atomic_init(&b.used, 0);
    struct cma_query_parser *qp = NULL;
    assert_int_equal(cma_query_parser_new(NULL, NULL, &b, &qp), CMA_OK);
    struct cma_err err;
    cma_err_clear(&err);
    /* refused while the answer streams: the first half already goes over */
    size_t half = strlen(doc) / 2;
    assert_int_equal(cma_query_parser_feed(qp, doc, half, &err), CMA_ERR_TOO_LARGE);
    assert_non_null(strstr(err.msg, "--prometheus-max-bytes-in-flight"));
    assert_true(cma_query_parser_seen(qp) < 1000);
    assert_true(atomic_load(&b.used) <= b.max);
    cma_query_parser_free(qp);
    assert_int_equal(atomic_load(&b.used), 0);
    /* the same answer fits when the caller keeps only what it needs */
    struct keep_pods k = {.want = "pod-001999", .sorted = true};
    struct cma_prom_result *r = NULL;
    assert_int_equal(decode_split(doc, half, keep_pod, &k, &b, &r, &err), CMA_OK);
    assert_non_null(r);
    assert_int_equal(r->n_seen, 2000);
    assert_int_equal(r->n_samples, 1);
    assert_true(r->samples[0].value == 1999);
    cma_prom_result_free(r);
    free(doc);
}

static void test_cma_query_parser__budget_held_by_others(void **state)
{
    (void)state;
    char *doc = many_series(100); /* ~30 KB kept */
    struct cma_prom_budget b = {.max = 256 << 10};
    atomic_init(&b.used, 0);
    struct cma_prom_result *first = NULL, *second = NULL;
    struct cma_err err;
    assert_int_equal(decode_split(doc, 0, NULL, NULL, &b, &first, &err), CMA_OK);
    assert_non_null(first);
    assert_true(first->charged > 20000);
    size_t others = (size_t)(256 << 10) - first->charged - 16000;
    atomic_fetch_add(&b.used, others); /* what other requests hold */
    assert_int_equal(decode_split(doc, 0, NULL, NULL, &b, &second, &err),
                     CMA_ERR_TOO_MANY_REQUESTS);
    assert_non_null(strstr(err.msg, "retry"));
    assert_null(second);
    cma_prom_result_free(first); /* gives room back */
    assert_int_equal(decode_split(doc, 0, NULL, NULL, &b, &second, &err), CMA_OK);
    cma_prom_result_free(second);
    assert_int_equal(atomic_load(&b.used), others);
    free(doc);
}

/* ---- limits and strictness ----------------------------------------------------------------- */

static enum cma_errc decode_err(const char *doc, size_t len, struct cma_err *err)
{
    struct cma_query_parser *qp = NULL;
    assert_int_equal(cma_query_parser_new(NULL, NULL, NULL, &qp), CMA_OK);
    cma_err_clear(err);
    struct cma_prom_result *r = NULL;
    enum cma_errc rc = cma_query_parser_feed(qp, doc, len, err);
    if (rc == CMA_OK)
        rc = cma_query_parser_finish(qp, &r, err);
    assert_null(r);
    assert_int_equal(err->code, rc);
    cma_query_parser_free(qp);
    return rc;
}

static void test_cma_query_parser__strict_shapes(void **state)
{
    (void)state;
    static const struct {
        const char *doc, *msg;
    } cases[] = {
        {"{\"status\":\"success\",\"data\":{\"resultType\":\"vector\",\"result\":["
         "{\"metric\":{\"a\":\"1\",\"a\":\"2\"},\"value\":[1,\"1\"]}]}}",
         "data.result[0].metric.a is repeated"},
        {"{\"status\":\"success\",\"data\":{\"resultType\":\"vector\",\"result\":["
         "{\"metric\":{},\"value\":[1,\"1\"],\"value\":[2,\"2\"]}]}}",
         "duplicate key \"value\""},
        {"{\"status\":\"success\",\"data\":{\"resultType\":\"vector\",\"resultType\":\"vector\"}}",
         "duplicate key \"resultType\""},
        {"{\"status\":\"success\",\"data\":{\"resultType\":\"vector\",\"result\":["
         "{\"metric\":{\"a\":\"x\\u0000y\"},\"value\":[1,\"1\"]}]}}",
         "NUL byte"},
        {"{\"status\":\"success\",\"data\":{\"resultType\":\"vector\",\"result\":[]}} {}",
         "unexpected JSON from prometheus"},
        {"{\"status\":\"success\",\"data\":{\"resultType\":\"vector\",\"result\":["
         "{\"metric\":[],\"value\":[1,\"1\"]}]}}",
         "data.result[0].metric is not an object"},
        {"{\"status\":\"success\",\"data\":{\"resultType\":\"matrix\",\"result\":["
         "{\"metric\":{},\"values\":[1]}]}}",
         "data.result[0].values[0] is not a [time, \"value\"] pair"},
        {"{\"status\":\"success\",\"data\":{\"resultType\":\"vector\",\"result\":["
         "{\"metric\":{},\"value\":[[1],\"1\"]}]}}",
         "data.result[0].value is not a [time, \"value\"] pair"},
        {"{\"status\":\"success\",\"data\":{\"resultType\":\"string\",\"result\":[1,2]}}",
         "data.result is not a [time, \"string\"] pair"},
        {"{\"status\":1,\"data\":{}}", "status is missing or not a string"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        struct cma_err err;
        enum cma_errc rc = decode_err(cases[i].doc, strlen(cases[i].doc), &err);
        if (rc != CMA_ERR_BACKEND_RESPONSE || !strstr(err.msg, cases[i].msg))
            fail_msg("case %zu: got %s \"%s\", want \"%s\"", i, cma_errc_name(rc), err.msg,
                     cases[i].msg);
    }
}

static void test_cma_query_parser__limits(void **state)
{
    (void)state;
    struct cma_buf b;
    cma_buf_init(&b, 0);
    struct cma_err err;
    /* one series object over 1 MiB */
    assert_int_equal(cma_buf_appends(&b, "{\"status\":\"success\",\"data\":{\"resultType\":"
                                         "\"vector\",\"result\":[{\"metric\":{"),
                     CMA_OK);
    for (int i = 0; i < 5; i++)
        assert_int_equal(cma_buf_printf(&b, "%s\"l%d\":\"%0250000d\"", i ? "," : "", i, i), CMA_OK);
    assert_int_equal(cma_buf_appends(&b, "},\"value\":[1,\"1\"]}]}}"), CMA_OK);
    assert_int_equal(decode_err(b.ptr, b.len, &err), CMA_ERR_BACKEND_RESPONSE);
    assert_non_null(strstr(err.msg, "data.result[0] is over 1048576 bytes"));
    /* over 1,000 labels */
    cma_buf_clear(&b);
    assert_int_equal(cma_buf_appends(&b, "{\"status\":\"success\",\"data\":{\"resultType\":"
                                         "\"vector\",\"result\":[{\"metric\":{"),
                     CMA_OK);
    for (int i = 0; i < 1001; i++)
        assert_int_equal(cma_buf_printf(&b, "%s\"l%d\":\"v\"", i ? "," : "", i), CMA_OK);
    assert_int_equal(cma_buf_appends(&b, "},\"value\":[1,\"1\"]}]}}"), CMA_OK);
    assert_int_equal(decode_err(b.ptr, b.len, &err), CMA_ERR_BACKEND_RESPONSE);
    assert_non_null(strstr(err.msg, "over 1000 labels"));
    /* unknown values nested over 64 deep */
    cma_buf_clear(&b);
    assert_int_equal(cma_buf_appends(&b, "{\"warnings\":"), CMA_OK);
    for (int i = 0; i < 70; i++)
        assert_int_equal(cma_buf_appendc(&b, '['), CMA_OK);
    assert_int_equal(decode_err(b.ptr, b.len, &err), CMA_ERR_BACKEND_RESPONSE);
    assert_non_null(strstr(err.msg, "nested over 64 deep"));
    /* a token that never ends */
    cma_buf_clear(&b);
    assert_int_equal(cma_buf_appends(&b, "{\"warnings\":\""), CMA_OK);
    for (int i = 0; i < 3 * 1024; i++)
        assert_int_equal(cma_buf_printf(&b, "%01024d", 0), CMA_OK);
    assert_int_equal(decode_err(b.ptr, b.len, &err), CMA_ERR_BACKEND_RESPONSE);
    assert_non_null(strstr(err.msg, "no JSON value ends within"));
    cma_buf_done(&b);
}

static void test_cma_query_parser__misuse(void **state)
{
    (void)state;
    struct cma_query_parser *qp = NULL;
    assert_int_equal(cma_query_parser_new(NULL, NULL, NULL, &qp), CMA_OK);
    const char *doc = "{\"status\":\"success\",\"data\":{\"resultType\":\"vector\",\"result\":[]}}";
    struct cma_err err;
    cma_err_clear(&err);
    struct cma_prom_result *r = NULL;
    assert_int_equal(cma_query_parser_feed(qp, doc, strlen(doc), &err), CMA_OK);
    assert_int_equal(cma_query_parser_finish(qp, &r, &err), CMA_OK);
    assert_int_equal(r->n_samples, 0);
    cma_prom_result_free(r);
    assert_int_equal(cma_query_parser_feed(qp, "{}", 2, &err), CMA_ERR_INTERNAL);
    cma_query_parser_free(qp);
    cma_query_parser_free(NULL);
    assert_int_equal(cma_query_parser_seen(NULL), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cma_query_parser__vector_every_split),
        cmocka_unit_test(test_cma_query_parser__numbers_as_strtod),
        cmocka_unit_test(test_cma_query_parser__scalar_every_split),
        cmocka_unit_test(test_cma_query_parser__matrix_every_split),
        cmocka_unit_test(test_cma_query_parser__string_every_split),
        cmocka_unit_test(test_cma_query_parser__error_every_split),
        cmocka_unit_test(test_cma_query_parser__keys_in_any_order),
        cmocka_unit_test(test_cma_query_parser__keep_stores_only_needed),
        cmocka_unit_test(test_cma_query_parser__budget_exact_accounting),
        cmocka_unit_test(test_cma_query_parser__budget_too_large_during_feed),
        cmocka_unit_test(test_cma_query_parser__budget_held_by_others),
        cmocka_unit_test(test_cma_query_parser__strict_shapes),
        cmocka_unit_test(test_cma_query_parser__limits),
        cmocka_unit_test(test_cma_query_parser__misuse),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
