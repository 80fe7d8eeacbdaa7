/* series_stream_test.c: the streaming /api/v1/series parser: chunk boundaries at every byte,
 * escapes, key order, data null, status:error bodies, truncation, junk inside series objects,
 * limits, large documents and the caller stopping the listing. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "cma/buf.h"
#include "cma/prom.h"

/* Collects every series as "name{a=b,c=d};" so runs can be compared as strings. */
struct collect {
    struct cma_buf out;
    size_t calls;
    size_t stop_after; /* 0 = never */
};

static int collect_fn(void *ctx, const char *metric, size_t metric_len,
                      const struct cma_label_view *labels, size_t n_labels)
{
    struct collect *c = ctx;
    c->calls++;
    assert_int_equal(metric[metric_len], '\0');
    assert_int_equal(cma_buf_append(&c->out, metric, metric_len), CMA_OK);
    assert_int_equal(cma_buf_appendc(&c->out, '{'), CMA_OK);
    for (size_t i = 0; i < n_labels; i++) {
        if (i)
            assert_int_equal(cma_buf_appendc(&c->out, ','), CMA_OK);
        assert_int_equal(cma_buf_append(&c->out, labels[i].name, labels[i].name_len), CMA_OK);
        assert_int_equal(cma_buf_appendc(&c->out, '='), CMA_OK);
        assert_int_equal(cma_buf_append(&c->out, labels[i].value, labels[i].value_len), CMA_OK);
    }
    assert_int_equal(cma_buf_appends(&c->out, "};"), CMA_OK);
    return c->stop_after && c->calls >= c->stop_after ? 1 : 0;
}

static void collect_init(struct collect *c)
{
    memset(c, 0, sizeof(*c));
    cma_buf_init(&c->out, 0);
}

/* Feeds doc in the given chunk sizes (0-terminated list; the rest in one go), then finishes. */
static enum cma_errc run_chunks(const char *doc, size_t len, const size_t *chunks,
                                struct collect *c, struct cma_err *err, size_t *count)
{
    struct cma_series_parser *sp = NULL;
    assert_int_equal(cma_series_parser_new(collect_fn, c, &sp), CMA_OK);
    cma_err_clear(err);
    size_t off = 0;
    enum cma_errc rc = CMA_OK;
    for (size_t i = 0; chunks && chunks[i] && rc == CMA_OK; i++) {
        size_t n = chunks[i] < len - off ? chunks[i] : len - off;
        rc = cma_series_parser_feed(sp, doc + off, n, err);
        off += n;
    }
    if (rc == CMA_OK && off < len)
        rc = cma_series_parser_feed(sp, doc + off, len - off, err);
    if (rc == CMA_OK)
        rc = cma_series_parser_finish(sp, err);
    if (count)
        *count = cma_series_parser_count(sp);
    cma_series_parser_free(sp);
    return rc;
}

static enum cma_errc run(const char *doc, struct collect *c, struct cma_err *err)
{
    return run_chunks(doc, strlen(doc), NULL, c, err, NULL);
}

static const char doc_escapes[] =
    "{\"status\":\"success\",\"data\":[{\"__name__\":\"up\",\"job\":\"prom\\\"etheus\"},"
    "{\"instance\":\"caf\\u00e9:9090\",\"__name__\":\"gpu_util\",\"slash\":\"a\\/b\\\\c\"},"
    "{\"__name__\":\"x\"}],\"warnings\":[\"w1\",{\"nested\":[1,2,{\"k\":null}]}]}";
static const char want_escapes[] = "up{job=prom\"etheus};"
                                   "gpu_util{instance=caf\xc3\xa9:9090,slash=a/b\\c};"
                                   "x{};";

static void test_cma_series_parser_feed__whole_document(void **state)
{
    (void)state;
    struct collect c;
    collect_init(&c);
    struct cma_err err;
    size_t count = 0;
    assert_int_equal(run_chunks(doc_escapes, strlen(doc_escapes), NULL, &c, &err, &count), CMA_OK);
    assert_string_equal(cma_buf_str(&c.out), want_escapes);
    assert_int_equal(count, 3);
    cma_buf_done(&c.out);
}

static void test_cma_series_parser_feed__split_at_every_byte(void **state)
{
    (void)state;
    size_t len = strlen(doc_escapes);
    for (size_t split = 1; split < len; split++) {
        struct collect c;
        collect_init(&c);
        struct cma_err err;
        size_t chunks[] = {split, 0};
        enum cma_errc rc = run_chunks(doc_escapes, len, chunks, &c, &err, NULL);
        if (rc != CMA_OK || strcmp(cma_buf_str(&c.out), want_escapes) != 0)
            fail_msg("split at %zu: rc %d (%s), got %s", split, rc, err.msg, cma_buf_str(&c.out));
        cma_buf_done(&c.out);
    }
}

static void test_cma_series_parser_feed__one_byte_at_a_time(void **state)
{
    (void)state;
    size_t len = strlen(doc_escapes);
    size_t *chunks = calloc(len + 1, sizeof(*chunks));
    assert_non_null(chunks);
    for (size_t i = 0; i < len; i++)
        chunks[i] = 1;
    struct collect c;
    collect_init(&c);
    struct cma_err err;
    assert_int_equal(run_chunks(doc_escapes, len, chunks, &c, &err, NULL), CMA_OK);
    assert_string_equal(cma_buf_str(&c.out), want_escapes);
    cma_buf_done(&c.out);
    free(chunks);
}

static void test_cma_series_parser_finish__status_after_data(void **state)
{
    (void)state;
    struct collect c;
    collect_init(&c);
    struct cma_err err;
    assert_int_equal(
        run("{\"data\":[{\"__name__\":\"a\",\"x\":\"1\"}],\"status\":\"success\"}", &c, &err),
        CMA_OK);
    assert_string_equal(cma_buf_str(&c.out), "a{x=1};");
    cma_buf_done(&c.out);
}

static void test_cma_series_parser_finish__error_status_after_data(void **state)
{
    (void)state;
    struct collect c;
    collect_init(&c);
    struct cma_err err;
    assert_int_equal(run("{\"data\":[{\"__name__\":\"a\"}],\"error\":\"boom\","
                         "\"status\":\"error\",\"errorType\":\"internal\"}",
                         &c, &err),
                     CMA_ERR_BACKEND_ERROR);
    assert_string_equal(err.msg, "internal: boom");
    cma_buf_done(&c.out);
}

static void test_cma_series_parser_finish__data_null(void **state)
{
    (void)state;
    struct collect c;
    collect_init(&c);
    struct cma_err err;
    assert_int_equal(run("{\"status\":\"success\",\"data\":null}", &c, &err),
                     CMA_ERR_BACKEND_RESPONSE);
    assert_string_equal(err.msg, "no metrics retrieved");
    assert_int_equal(run("{\"status\":\"success\"}", &c, &err), CMA_ERR_BACKEND_RESPONSE);
    assert_string_equal(err.msg, "no metrics retrieved");
    /* an empty list is fine */
    assert_int_equal(run("{\"status\":\"success\",\"data\":[]}", &c, &err), CMA_OK);
    assert_int_equal(c.calls, 0);
    cma_buf_done(&c.out);
}

static void test_cma_series_parser_finish__error_bodies(void **state)
{
    (void)state;
    struct collect c;
    collect_init(&c);
    struct cma_err err;
    assert_int_equal(run("{\"status\":\"error\",\"errorType\":\"bad_data\",\"error\":"
                         "\"1:1: parse error: unexpected end of input\"}",
                         &c, &err),
                     CMA_ERR_BACKEND_ERROR);
    assert_string_equal(err.msg, "bad_data: 1:1: parse error: unexpected end of input");
    assert_int_equal(
        run("{\"error\":\"too slow\",\"errorType\":\"timeout\",\"status\":\"error\"}", &c, &err),
        CMA_ERR_BACKEND_TIMEOUT);
    assert_string_equal(err.msg, "timeout: too slow");
    assert_int_equal(
        run("{\"status\":\"error\",\"errorType\":\"unavailable\",\"error\":\"x\"}", &c, &err),
        CMA_ERR_BACKEND_UNAVAILABLE);
    /* status error first: series in it are not reported */
    assert_int_equal(run("{\"status\":\"error\",\"data\":[{\"__name__\":\"a\"}]}", &c, &err),
                     CMA_ERR_BACKEND_ERROR);
    assert_int_equal(c.calls, 0);
    cma_buf_done(&c.out);
}

static void test_cma_series_parser_finish__truncated_documents(void **state)
{
    (void)state;
    const char *full = "{\"status\":\"success\",\"data\":[{\"__name__\":\"a\",\"b\":\"c\"}]}";
    size_t len = strlen(full);
    for (size_t cut = 0; cut < len; cut++) {
        struct collect c;
        collect_init(&c);
        struct cma_err err;
        size_t chunks[] = {cut, 0};
        char *doc = strndup(full, cut);
        assert_non_null(doc);
        enum cma_errc rc = run_chunks(doc, cut, chunks, &c, &err, NULL);
        if (rc != CMA_ERR_BACKEND_RESPONSE)
            fail_msg("cut at %zu: rc %d (%s)", cut, rc, err.msg);
        assert_true(strlen(err.msg) < 200);
        free(doc);
        cma_buf_done(&c.out);
    }
}

static void test_cma_series_parser_feed__junk_inside_series_rejected(void **state)
{
    (void)state;
    static const char *const junk[] = {"1", "null", "true", "{}", "[\"a\"]", "{\"x\":\"y\"}"};
    for (size_t i = 0; i < sizeof(junk) / sizeof(junk[0]); i++) {
        char doc[256];
        snprintf(doc, sizeof(doc),
                 "{\"status\":\"success\",\"data\":[{\"__name__\":\"a\"},"
                 "{\"__name__\":\"b\",\"bad\":%s}]}",
                 junk[i]);
        struct collect c;
        collect_init(&c);
        struct cma_err err;
        assert_int_equal(run(doc, &c, &err), CMA_ERR_BACKEND_RESPONSE);
        assert_non_null(strstr(err.msg, "data[1].bad is not a string"));
        cma_buf_done(&c.out);
    }
}

static void test_cma_series_parser_feed__bad_shapes(void **state)
{
    (void)state;
    static const struct {
        const char *doc;
        const char *msg;
    } cases[] = {
        {"[]", "the answer is not an object"},
        {"\"x\"", "the answer is not an object"},
        {"{\"status\":\"success\",\"data\":{}}", "data is not an array"},
        {"{\"status\":\"success\",\"data\":\"x\"}", "data is not an array"},
        {"{\"status\":\"success\",\"data\":[1]}", "data[0] is not an object"},
        {"{\"status\":\"success\",\"data\":[[]]}", "data[0] is not an object"},
        {"{\"status\":1,\"data\":[]}", "status is not a string"},
        {"{\"data\":[]}", "status is missing"},
        {"{\"status\":\"maybe\",\"data\":[]}", "neither success nor error"},
        {"{\"status\":\"success\",\"data\":[]} x", "unexpected JSON"},
        {"{\"status\":\"success\",\"data\":[{\"__name__\":\"a\\u0000b\"}]}", "NUL byte"},
        {"{\"status\":\"success\",\"data\":[{\"__name__\":\"a\",\"__name__\":1}]}",
         "data[0].__name__ is not a string"},
        {"{\"status\":\"success\",\"data\":[{\"__name__\":\"\xff\"}]}", "unexpected JSON"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        struct collect c;
        collect_init(&c);
        struct cma_err err;
        enum cma_errc rc = run(cases[i].doc, &c, &err);
        if (rc != CMA_ERR_BACKEND_RESPONSE || !strstr(err.msg, cases[i].msg))
            fail_msg("case %zu %s: rc %d \"%s\", want \"%s\"", i, cases[i].doc, rc, err.msg,
                     cases[i].msg);
        cma_buf_done(&c.out);
    }
}

static void test_cma_series_parser_feed__series_without_name_skipped(void **state)
{
    (void)state;
    struct collect c;
    collect_init(&c);
    struct cma_err err;
    struct cma_series_parser *sp = NULL;
    assert_int_equal(cma_series_parser_new(collect_fn, &c, &sp), CMA_OK);
    const char *doc = "{\"status\":\"success\",\"data\":[{\"job\":\"x\"},{\"__name__\":\"m\"}]}";
    cma_err_clear(&err);
    assert_int_equal(cma_series_parser_feed(sp, doc, strlen(doc), &err), CMA_OK);
    assert_int_equal(cma_series_parser_finish(sp, &err), CMA_OK);
    assert_int_equal(cma_series_parser_count(sp), 2);
    assert_int_equal(cma_series_parser_skipped(sp), 1);
    assert_string_equal(cma_buf_str(&c.out), "m{};");
    cma_series_parser_free(sp);
    cma_buf_done(&c.out);
}

static char *make_series_doc(size_t n, size_t *ret_len)
{
    struct cma_buf b;
    cma_buf_init(&b, 0);
    assert_int_equal(cma_buf_appends(&b, "{\"status\":\"success\",\"data\":["), CMA_OK);
    for (size_t i = 0; i < n; i++)
        assert_int_equal(cma_buf_printf(&b,
                                        "%s{\"__name__\":\"DCGM_FI_DEV_GPU_UTIL\",\"gpu\":\"%zu\","
                                        "\"pod\":\"bert-%zu\",\"namespace\":\"ml\"}",
                                        i ? "," : "", i % 8, i),
                         CMA_OK);
    assert_int_equal(cma_buf_appends(&b, "]}"), CMA_OK);
    *ret_len = b.len;
    return cma_buf_take(&b);
}

static int count_fn(void *ctx, const char *metric, size_t metric_len,
                    const struct cma_label_view *labels, size_t n_labels)
{
    size_t *n = ctx;
    char want[32];
    snprintf(want, sizeof(want), "bert-%zu", *n);
    assert_int_equal(n_labels, 3);
    assert_int_equal(metric_len, strlen("DCGM_FI_DEV_GPU_UTIL"));
    assert_memory_equal(metric, "DCGM_FI_DEV_GPU_UTIL", metric_len);
    assert_int_equal(labels[1].value_len, strlen(want));
    assert_memory_equal(labels[1].value, want, labels[1].value_len);
    (*n)++;
    return 0;
}

static void test_cma_series_parser_feed__ten_thousand_series(void **state)
{
    (void)state;
    size_t len = 0;
    char *doc = make_series_doc(10000, &len);
    size_t seen = 0;
    struct cma_series_parser *sp = NULL;
    assert_int_equal(cma_series_parser_new(count_fn, &seen, &sp), CMA_OK);
    struct cma_err err;
    cma_err_clear(&err);
    /* odd chunk size so that tokens straddle chunks */
    for (size_t off = 0; off < len; off += 1499) {
        size_t n = len - off < 1499 ? len - off : 1499;
        assert_int_equal(cma_series_parser_feed(sp, doc + off, n, &err), CMA_OK);
    }
    assert_int_equal(cma_series_parser_finish(sp, &err), CMA_OK);
    assert_int_equal(seen, 10000);
    assert_int_equal(cma_series_parser_count(sp), 10000);
    cma_series_parser_free(sp);
    free(doc);
}

static void test_cma_series_parser_feed__callback_stops(void **state)
{
    (void)state;
    size_t len = 0;
    char *doc = make_series_doc(50, &len);
    struct collect c;
    collect_init(&c);
    c.stop_after = 3;
    struct cma_err err;
    assert_int_equal(run_chunks(doc, len, NULL, &c, &err, NULL), CMA_ERR_INTERNAL);
    assert_string_equal(err.msg, "series listing stopped by caller");
    assert_int_equal(c.calls, 3);
    free(doc);
    cma_buf_done(&c.out);
}

static void test_cma_series_parser_feed__object_over_one_mib(void **state)
{
    (void)state;
    struct cma_buf b;
    cma_buf_init(&b, 0);
    assert_int_equal(cma_buf_appends(&b, "{\"status\":\"success\",\"data\":[{\"__name__\":\"a\""),
                     CMA_OK);
    char value[2001];
    memset(value, 'v', 2000);
    value[2000] = '\0';
    for (size_t i = 0; i < 600; i++)
        assert_int_equal(cma_buf_printf(&b, ",\"l%zu\":\"%s\"", i, value), CMA_OK);
    assert_int_equal(cma_buf_appends(&b, "}]}"), CMA_OK);
    struct collect c;
    collect_init(&c);
    struct cma_err err;
    assert_int_equal(run_chunks(b.ptr, b.len, NULL, &c, &err, NULL), CMA_ERR_BACKEND_RESPONSE);
    assert_non_null(strstr(err.msg, "data[0] is over 1048576 bytes"));
    assert_int_equal(c.calls, 0);
    cma_buf_done(&b);
    cma_buf_done(&c.out);
}

static void test_cma_series_parser_feed__too_many_labels(void **state)
{
    (void)state;
    struct cma_buf b;
    cma_buf_init(&b, 0);
    assert_int_equal(cma_buf_appends(&b, "{\"status\":\"success\",\"data\":[{\"__name__\":\"a\""),
                     CMA_OK);
    for (size_t i = 0; i < 1000; i++)
        assert_int_equal(cma_buf_printf(&b, ",\"l%zu\":\"v\"", i), CMA_OK);
    assert_int_equal(cma_buf_appends(&b, "}]}"), CMA_OK);
    struct collect c;
    collect_init(&c);
    struct cma_err err;
    assert_int_equal(run_chunks(b.ptr, b.len, NULL, &c, &err, NULL), CMA_ERR_BACKEND_RESPONSE);
    assert_non_null(strstr(err.msg, "over 1000 labels"));
    cma_buf_done(&b);
    cma_buf_done(&c.out);
}

static void test_cma_series_parser_feed__huge_token_outside_series(void **state)
{
    (void)state;
    size_t big = (size_t)3 << 20;
    char *doc = malloc(big + 64);
    assert_non_null(doc);
    size_t o = (size_t)sprintf(doc, "{\"warnings\":[\"");
    memset(doc + o, 'w', big);
    o += big;
    o += (size_t)sprintf(doc + o, "\"],\"status\":\"success\",\"data\":[]}");
    struct collect c;
    collect_init(&c);
    struct cma_err err;
    size_t chunks[] = {4096, 4096, 0};
    struct cma_series_parser *sp = NULL;
    assert_int_equal(cma_series_parser_new(collect_fn, &c, &sp), CMA_OK);
    cma_err_clear(&err);
    enum cma_errc rc = CMA_OK;
    for (size_t off = 0; off < o && rc == CMA_OK; off += chunks[0])
        rc = cma_series_parser_feed(sp, doc + off, o - off < 4096 ? o - off : 4096, &err);
    assert_int_equal(rc, CMA_ERR_BACKEND_RESPONSE);
    assert_non_null(strstr(err.msg, "no JSON value ends within"));
    /* once failed, it stays failed */
    assert_int_equal(cma_series_parser_finish(sp, &err), CMA_ERR_BACKEND_RESPONSE);
    cma_series_parser_free(sp);
    free(doc);
    cma_buf_done(&c.out);
}

static void test_cma_series_parser_feed__deep_nesting_in_skipped_value(void **state)
{
    (void)state;
    struct cma_buf b;
    cma_buf_init(&b, 0);
    assert_int_equal(cma_buf_appends(&b, "{\"warnings\":"), CMA_OK);
    for (int i = 0; i < 100; i++)
        assert_int_equal(cma_buf_appendc(&b, '['), CMA_OK);
    struct collect c;
    collect_init(&c);
    struct cma_err err;
    size_t chunks[] = {b.len, 0};
    assert_int_equal(run_chunks(b.ptr, b.len, chunks, &c, &err, NULL), CMA_ERR_BACKEND_RESPONSE);
    assert_non_null(strstr(err.msg, "nested over 64 deep"));
    cma_buf_done(&b);
    cma_buf_done(&c.out);
}

static void test_cma_series_parser_finish__twice_is_an_error(void **state)
{
    (void)state;
    struct collect c;
    collect_init(&c);
    struct cma_series_parser *sp = NULL;
    assert_int_equal(cma_series_parser_new(collect_fn, &c, &sp), CMA_OK);
    const char *doc = "{\"status\":\"success\",\"data\":[]}";
    struct cma_err err;
    cma_err_clear(&err);
    assert_int_equal(cma_series_parser_feed(sp, doc, strlen(doc), &err), CMA_OK);
    assert_int_equal(cma_series_parser_finish(sp, &err), CMA_OK);
    assert_int_equal(cma_series_parser_finish(sp, &err), CMA_ERR_INTERNAL);
    cma_err_clear(&err);
    assert_int_equal(cma_series_parser_feed(sp, "x", 1, &err), CMA_ERR_INTERNAL);
    cma_series_parser_free(sp);
    cma_series_parser_free(NULL);
    assert_int_equal(cma_series_parser_count(NULL), 0);
    cma_buf_done(&c.out);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cma_series_parser_feed__whole_document),
        cmocka_unit_test(test_cma_series_parser_feed__split_at_every_byte),
        cmocka_unit_test(test_cma_series_parser_feed__one_byte_at_a_time),
        cmocka_unit_test(test_cma_series_parser_finish__status_after_data),
        cmocka_unit_test(test_cma_series_parser_finish__error_status_after_data),
        cmocka_unit_test(test_cma_series_parser_finish__data_null),
        cmocka_unit_test(test_cma_series_parser_finish__error_bodies),
        cmocka_unit_test(test_cma_series_parser_finish__truncated_documents),
        cmocka_unit_test(test_cma_series_parser_feed__junk_inside_series_rejected),
        cmocka_unit_test(test_cma_series_parser_feed__bad_shapes),
        cmocka_unit_test(test_cma_series_parser_feed__series_without_name_skipped),
        cmocka_unit_test(test_cma_series_parser_feed__ten_thousand_series),
        cmocka_unit_test(test_cma_series_parser_feed__callback_stops),
        cmocka_unit_test(test_cma_series_parser_feed__object_over_one_mib),
        cmocka_unit_test(test_cma_series_parser_feed__too_many_labels),
        cmocka_unit_test(test_cma_series_parser_feed__huge_token_outside_series),
        cmocka_unit_test(test_cma_series_parser_feed__deep_nesting_in_skipped_value),
        cmocka_unit_test(test_cma_series_parser_finish__twice_is_an_error),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
