/* log_test.c: log lines as written to stderr (captured in a temporary file): the text format,
 * the JSON format (each line parsed back with jansson), structured fields and their escapes,
 * verbosity, and long lines written whole (the old 4 KiB cut is gone). */
#include <jansson.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "cma/log.h"

struct capture {
    int saved;
    FILE *f;
};

static void capture_start(struct capture *c)
{
    fflush(stderr);
    c->f = tmpfile();
    assert_non_null(c->f);
    c->saved = dup(STDERR_FILENO);
    assert_true(c->saved >= 0);
    assert_true(dup2(fileno(c->f), STDERR_FILENO) >= 0);
}

/* Restores stderr and returns what was written (caller frees). */
static char *capture_end(struct capture *c)
{
    assert_true(dup2(c->saved, STDERR_FILENO) >= 0);
    close(c->saved);
    long n = ftell(c->f);
    assert_true(n >= 0);
    char *text = calloc(1, (size_t)n + 1);
    assert_non_null(text);
    rewind(c->f);
    assert_int_equal(fread(text, 1, (size_t)n, c->f), (size_t)n);
    fclose(c->f);
    return text;
}

static int setup(void **state)
{
    (void)state;
    cma_log_set_verbosity(0);
    cma_log_set_format(CMA_LOG_FORMAT_TEXT);
    return 0;
}

static void test_cma_log__text_line(void **state)
{
    (void)state;
    struct capture c;
    capture_start(&c);
    cma_log_warn("disk %s at %d%%", "sda", 93);
    char *out = capture_end(&c);
    /* 2026-01-02T03:04:05.678Z W disk sda at 93% */
    assert_int_equal(strlen(out), 24 + 3 + strlen("disk sda at 93%") + 1);
    assert_int_equal(out[10], 'T');
    assert_int_equal(out[23], 'Z');
    assert_string_equal(out + 24, " W disk sda at 93%\n");
    /* the stamp is UTC now, every part zero-padded to its width */
    time_t after = time(NULL);
    int y, mo, d, h, mi, sec, ms, used = 0;
    assert_int_equal(
        sscanf(out, "%4d-%2d-%2dT%2d:%2d:%2d.%3dZ%n", &y, &mo, &d, &h, &mi, &sec, &ms, &used), 7);
    assert_int_equal(used, 24);
    for (int i = 0; i < 23; i++)
        if (i != 4 && i != 7 && i != 10 && i != 13 && i != 16 && i != 19)
            assert_true(out[i] >= '0' && out[i] <= '9');
    struct tm tm = {.tm_year = y - 1900,
                    .tm_mon = mo - 1,
                    .tm_mday = d,
                    .tm_hour = h,
                    .tm_min = mi,
                    .tm_sec = sec};
    time_t stamped = timegm(&tm);
    assert_true(stamped <= after && stamped >= after - 2);
    assert_true(ms >= 0 && ms <= 999);
    free(out);
}

static void test_cma_log_v__verbosity_filters(void **state)
{
    (void)state;
    struct capture c;
    capture_start(&c);
    cma_log_v(2, "hidden");
    cma_log_fields(2, "hidden too", NULL, 0);
    cma_log_set_verbosity(2);
    cma_log_v(2, "shown");
    cma_log_v(3, "hidden again");
    char *out = capture_end(&c);
    assert_null(strstr(out, "hidden"));
    assert_non_null(strstr(out, " I shown\n"));
    free(out);
}

static void test_cma_log__long_line_written_whole(void **state)
{
    (void)state;
    size_t n = 100000;
    char *big = malloc(n + 1);
    assert_non_null(big);
    memset(big, 'x', n);
    big[n] = '\0';
    big[n - 1] = 'E'; /* the last byte must arrive */
    struct capture c;
    capture_start(&c);
    cma_log_info("start %s end", big);
    char *out = capture_end(&c);
    assert_int_equal(strlen(out), 24 + 3 + 6 + n + 4 + 1);
    assert_non_null(strstr(out, "xxE end\n"));
    assert_null(strstr(out, "truncated"));
    free(out);
    free(big);
}

static void test_cma_log__newlines_become_spaces_in_text(void **state)
{
    (void)state;
    struct capture c;
    capture_start(&c);
    cma_log_error("two\nlines\r");
    char *out = capture_end(&c);
    assert_string_equal(out + 24, " E two lines \n");
    free(out);
}

static void test_cma_log_fields__text_quotes_strings(void **state)
{
    (void)state;
    cma_log_set_verbosity(2);
    struct cma_log_field f[] = {CMA_LOG_STR("user", "jane \"j\"\\"), CMA_LOG_INT("code", 200),
                                CMA_LOG_INT("delta", -42),           CMA_LOG_INT("zero", 0),
                                CMA_LOG_MS("duration_ms", 1500000),  CMA_LOG_STR("path", NULL),
                                CMA_LOG_STR("ctl", "a\tb\x01")};
    struct capture c;
    capture_start(&c);
    cma_log_fields(2, "HTTP", f, 7);
    char *out = capture_end(&c);
    assert_string_equal(out + 24, " I HTTP user=\"jane \\\"j\\\"\\\\\" code=200 delta=-42 zero=0 "
                                  "duration_ms=1.500 "
                                  "path=\"\" ctl=\"a\\tb\\x01\"\n");
    free(out);
}

/* Durations in nanoseconds are written in milliseconds with three decimals, rounded to the
 * nearest microsecond (halves away from zero); strings keep every byte that needs no escape
 * (UTF-8 included) and escape the rest as Go's %q does. */
static void test_cma_log_fields__durations_and_escapes(void **state)
{
    (void)state;
    cma_log_set_verbosity(2);
    static const struct {
        int64_t ns;
        const char *want;
    } cases[] = {{0, "0.000"},
                 {499, "0.000"},
                 {500, "0.001"},
                 {17000, "0.017"},
                 {999499, "0.999"},
                 {999500, "1.000"},
                 {1500000, "1.500"},
                 {1234567890, "1234.568"},
                 {-1500000, "-1.500"},
                 {-400, "0.000"},
                 {INT64_MAX, "9223372036854.776"}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        struct cma_log_field f[] = {CMA_LOG_MS("d", cases[i].ns)};
        struct capture c;
        capture_start(&c);
        cma_log_fields(2, "T", f, 1);
        char *out = capture_end(&c);
        char want[64];
        snprintf(want, sizeof want, " I T d=%s\n", cases[i].want);
        assert_string_equal(out + 24, want);
        free(out);
    }
    struct cma_log_field f[] = {CMA_LOG_STR("s", "caf\xc3\xa9 \x7f\n\r\"end\"\\")};
    struct capture c;
    capture_start(&c);
    cma_log_fields(2, "T", f, 1);
    char *out = capture_end(&c);
    assert_string_equal(out + 24, " I T s=\"caf\xc3\xa9 \\x7f\\n\\r\\\"end\\\"\\\\\"\n");
    free(out);
}

static json_t *parse_line(const char *line)
{
    json_error_t e;
    json_t *j = json_loads(line, JSON_DISABLE_EOF_CHECK, &e);
    if (!j)
        fail_msg("not JSON: %s (%s)", line, e.text);
    return j;
}

static void test_cma_log__json_lines_parse(void **state)
{
    (void)state;
    cma_log_set_format(CMA_LOG_FORMAT_JSON);
    cma_log_set_verbosity(2);
    struct cma_log_field f[] = {CMA_LOG_STR("verb", "GET"), CMA_LOG_INT("code", 404),
                                CMA_LOG_MS("backend_ms", 250000)};
    struct capture c;
    capture_start(&c);
    cma_log_warn("quote \" backslash \\ newline\n bad utf8 \xff ok \xc3\xa9");
    cma_log_fields(2, "HTTP", f, 3);
    char *out = capture_end(&c);
    char *second = strchr(out, '\n');
    assert_non_null(second);
    *second++ = '\0';
    json_t *a = parse_line(out), *b = parse_line(second);
    assert_string_equal(json_string_value(json_object_get(a, "level")), "warning");
    assert_int_equal(json_integer_value(json_object_get(a, "v")), 0);
    assert_string_equal(json_string_value(json_object_get(a, "msg")),
                        "quote \" backslash \\ newline\n bad utf8 \xef\xbf\xbd ok \xc3\xa9");
    assert_true(json_is_real(json_object_get(a, "ts")));
    assert_true(json_real_value(json_object_get(a, "ts")) > 1.6e9);
    assert_string_equal(json_string_value(json_object_get(b, "msg")), "HTTP");
    assert_string_equal(json_string_value(json_object_get(b, "level")), "info");
    assert_int_equal(json_integer_value(json_object_get(b, "v")), 2);
    assert_string_equal(json_string_value(json_object_get(b, "verb")), "GET");
    assert_int_equal(json_integer_value(json_object_get(b, "code")), 404);
    assert_true(json_real_value(json_object_get(b, "backend_ms")) == 0.25);
    json_decref(a);
    json_decref(b);
    free(out);
}

static void test_cma_log__json_long_line_whole(void **state)
{
    (void)state;
    cma_log_set_format(CMA_LOG_FORMAT_JSON);
    size_t n = 20000;
    char *big = malloc(n + 1);
    assert_non_null(big);
    memset(big, 'y', n);
    big[n] = '\0';
    struct capture c;
    capture_start(&c);
    cma_log_info("%s", big);
    char *out = capture_end(&c);
    json_t *j = parse_line(out);
    assert_int_equal(strlen(json_string_value(json_object_get(j, "msg"))), n);
    json_decref(j);
    free(out);
    free(big);
}

static void test_cma_log_parse_format__names(void **state)
{
    (void)state;
    enum cma_log_format f = CMA_LOG_FORMAT_TEXT;
    assert_true(cma_log_parse_format("json", &f));
    assert_int_equal(f, CMA_LOG_FORMAT_JSON);
    assert_true(cma_log_parse_format("text", &f));
    assert_int_equal(f, CMA_LOG_FORMAT_TEXT);
    assert_false(cma_log_parse_format("JSON", &f));
    assert_false(cma_log_parse_format("", &f));
    assert_false(cma_log_parse_format(NULL, &f));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup(test_cma_log__text_line, setup),
        cmocka_unit_test_setup(test_cma_log_v__verbosity_filters, setup),
        cmocka_unit_test_setup(test_cma_log__long_line_written_whole, setup),
        cmocka_unit_test_setup(test_cma_log__newlines_become_spaces_in_text, setup),
        cmocka_unit_test_setup(test_cma_log_fields__text_quotes_strings, setup),
        cmocka_unit_test_setup(test_cma_log_fields__durations_and_escapes, setup),
        cmocka_unit_test_setup(test_cma_log__json_lines_parse, setup),
        cmocka_unit_test_setup(test_cma_log__json_long_line_whole, setup),
        cmocka_unit_test_setup(test_cma_log_parse_format__names, setup),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
