/* err_test.c: struct cma_err semantics (first error wins, prefix, positions) and that
 * docs/errors.md documents every code of the table. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "cma/err.h"

static void test_cma_err_set__first_error_wins(void **state)
{
    (void)state;
    struct cma_err err;
    cma_err_clear(&err);
    assert_int_equal(cma_err_set(&err, CMA_ERR_REGEX, "inner %d", 1), CMA_ERR_REGEX);
    cma_err_set(&err, CMA_ERR_RULE, "outer");
    assert_int_equal(err.code, CMA_ERR_REGEX);
    assert_string_equal(err.msg, "inner 1");
}

static void test_cma_err_prefix__adds_context(void **state)
{
    (void)state;
    struct cma_err err;
    cma_err_clear(&err);
    cma_err_prefix(&err, "ignored: ");
    assert_string_equal(err.msg, "");
    cma_err_set(&err, CMA_ERR_BACKEND_TIMEOUT, "no answer\nin time");
    cma_err_prefix(&err, "rule %d: ", 3);
    assert_string_equal(err.msg, "rule 3: no answer in time");
}

/* A message longer than CMA_ERR_MSG_MAX ends with how much was cut, never mid-character. */
static void test_cma_err_set__long_message_says_it_was_cut(void **state)
{
    (void)state;
    char long_text[2 * CMA_ERR_MSG_MAX];
    size_t i = 0;
    for (; i + 2 < sizeof(long_text) - 1; i += 2) {
        long_text[i] = (char)0xC3; /* "é" in UTF-8, two bytes */
        long_text[i + 1] = (char)0xA9;
    }
    long_text[i] = '\0';
    struct cma_err err;
    cma_err_clear(&err);
    cma_err_set(&err, CMA_ERR_INTERNAL, "x%s", long_text);
    size_t len = strlen(err.msg);
    assert_true(len <= CMA_ERR_MSG_MAX - 1);
    const char *mark = strstr(err.msg, "... [");
    assert_non_null(mark);
    /* What was kept plus what was cut is the whole message. */
    size_t kept = (size_t)(mark - err.msg), cut = 0;
    assert_int_equal(sscanf(mark, "... [%zu more bytes]", &cut), 1);
    assert_int_equal(kept + cut, 1 + i);
    /* The kept part ends on a whole character: an odd count of bytes after the "x". */
    assert_int_equal((kept - 1) % 2, 0);

    cma_err_clear(&err);
    cma_err_set(&err, CMA_ERR_INTERNAL, "short");
    cma_err_prefix(&err, "%s: ", long_text);
    assert_non_null(strstr(err.msg, " more bytes]"));
    assert_true(strlen(err.msg) <= CMA_ERR_MSG_MAX - 1);
}

static void test_cma_err_format_pos__file_line_column(void **state)
{
    (void)state;
    struct cma_err err;
    char out[256];
    cma_err_clear(&err);
    cma_err_set_at(&err, CMA_ERR_CONFIG_KEY, "a.yaml", 3, 7, "unknown key \"x\"");
    cma_err_format_pos(&err, out, sizeof(out));
    assert_string_equal(out, "a.yaml:3:7: unknown key \"x\"");
    cma_err_clear(&err);
    cma_err_set(&err, CMA_ERR_IO, "plain");
    cma_err_format_pos(&err, out, sizeof(out));
    assert_string_equal(out, "plain");
}

static void test_cma_errc_http_status__table(void **state)
{
    (void)state;
    assert_int_equal(cma_errc_http_status(CMA_ERR_NOT_FOUND), 404);
    assert_string_equal(cma_errc_reason(CMA_ERR_NOT_FOUND), "NotFound");
    assert_int_equal(cma_errc_http_status(CMA_ERR_BACKEND_UNAVAILABLE), 503);
    assert_string_equal(cma_errc_reason(CMA_ERR_BACKEND_TIMEOUT), "Timeout");
    assert_int_equal(cma_errc_http_status(CMA_ERR_BACKEND_TIMEOUT), 504);
    assert_int_equal(cma_errc_http_status(CMA_ERR_BAD_SELECTOR), 400);
    assert_string_equal(cma_errc_name(CMA_ERR_BAD_SELECTOR), "BAD_SELECTOR");
}

static void test_docs_errors__lists_every_code(void **state)
{
    (void)state;
    const char *src = getenv("CMA_SOURCE_DIR");
    assert_non_null(src);
    char path[1024];
    snprintf(path, sizeof(path), "%s/docs/errors.md", src);
    FILE *f = fopen(path, "r");
    assert_non_null(f);
    static char doc[1 << 16];
    size_t n = fread(doc, 1, sizeof(doc) - 1, f);
    fclose(f);
    doc[n] = '\0';
    for (int c = 1; c < CMA_ERRC__COUNT; c++) {
        char needle[128];
        snprintf(needle, sizeof(needle), "`%s`", cma_errc_name((enum cma_errc)c));
        if (!strstr(doc, needle))
            fail_msg("docs/errors.md does not document %s", needle);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cma_err_set__first_error_wins),
        cmocka_unit_test(test_cma_err_prefix__adds_context),
        cmocka_unit_test(test_cma_err_set__long_message_says_it_was_cut),
        cmocka_unit_test(test_cma_err_format_pos__file_line_column),
        cmocka_unit_test(test_cma_errc_http_status__table),
        cmocka_unit_test(test_docs_errors__lists_every_code),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
