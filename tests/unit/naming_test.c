/* naming_test.c: one rule's series name ↔ metric name (src/rules/naming.c), compiled straight
 * from a loaded config's rule with cma_naming_compile: seriesFilters is/isNot and the implicit
 * `is: name.matches`, the defaults of name.matches (".*") and name.as ("$0", "$1", or an error
 * with 2+ groups), Go's unanchored leftmost-first search and $-expansion (numbered, braced,
 * named), metric names that are not one path segment, constant names, and compile errors. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cma/buf.h"
#include "cma/config.h"
#include "cma/rule.h"

struct compiled {
    struct cma_config *cfg;
    struct cma_naming *n;
};

/* Loads "rules: [ {seriesQuery: x, <body>} ]" and compiles its naming; fails the test if not. */
static struct compiled compile(const char *body)
{
    char yaml[1024];
    snprintf(yaml, sizeof(yaml), "rules:\n- seriesQuery: x\n%s", body);
    struct compiled c = {0};
    struct cma_err err;
    cma_err_clear(&err);
    if (cma_config_load_string("t.yaml", yaml, strlen(yaml), &c.cfg, &err) != CMA_OK)
        fail_msg("load: %s", err.msg);
    if (cma_naming_compile(&c.cfg->rules[0], &c.n, &err) != CMA_OK)
        fail_msg("compile: %s", err.msg);
    return c;
}

/* Compiles a rule that must fail; returns the formatted error (static). */
static const char *compile_error(const char *body, enum cma_errc want)
{
    static char got[600];
    char yaml[1024];
    snprintf(yaml, sizeof(yaml), "rules:\n- seriesQuery: x\n%s", body);
    struct cma_config *cfg = NULL;
    struct cma_err err;
    cma_err_clear(&err);
    if (cma_config_load_string("t.yaml", yaml, strlen(yaml), &cfg, &err) != CMA_OK)
        fail_msg("load: %s", err.msg);
    struct cma_naming *n = NULL;
    assert_int_equal(cma_naming_compile(&cfg->rules[0], &n, &err), want);
    assert_null(n);
    cma_err_format_pos(&err, got, sizeof(got));
    cma_config_free(cfg);
    return got;
}

static void done(struct compiled *c)
{
    cma_naming_free(c->n);
    cma_config_free(c->cfg);
}

static bool accepts(const struct compiled *c, const char *series)
{
    return cma_naming_accepts(c->n, series, strlen(series));
}

/* The metric name, or "<error: msg>". Static buffer. */
static const char *name_of(const struct compiled *c, const char *series)
{
    static char out[600];
    struct cma_buf b;
    cma_buf_init(&b, 0);
    struct cma_err err;
    cma_err_clear(&err);
    if (cma_naming_metric_name(c->n, series, strlen(series), &b, &err) == CMA_OK)
        snprintf(out, sizeof(out), "%s", cma_buf_str(&b));
    else
        snprintf(out, sizeof(out), "<error: %s>", err.msg);
    cma_buf_done(&b);
    return out;
}

static void test_cma_naming__defaults(void **state)
{
    (void)state;
    /* no name: matches ".*", as "$0": every series, named as itself, no implicit filter */
    struct compiled c = compile("");
    assert_true(accepts(&c, "up"));
    assert_true(accepts(&c, ""));
    assert_string_equal(name_of(&c, "http_requests_total"), "http_requests_total");
    assert_false(cma_naming_is_constant(c.n));
    done(&c);
    /* one group: as defaults to $1 */
    c = compile("  name: {matches: ^(.*)_total$}\n");
    assert_string_equal(name_of(&c, "http_requests_total"), "http_requests");
    assert_true(accepts(&c, "http_requests_total"));
    assert_false(accepts(&c, "http_requests_total_bytes")); /* implicit is: matches */
    done(&c);
}

static void test_cma_naming__matches_is_an_unanchored_leftmost_search(void **state)
{
    (void)state;
    struct compiled c = compile("  name: {matches: 'a+'}\n");
    assert_string_equal(name_of(&c, "baaacaa"), "aaa"); /* $0: the leftmost match only */
    assert_true(accepts(&c, "xa"));
    assert_false(accepts(&c, "xyz"));
    assert_string_equal(name_of(&c, "xyz"), "<error: series \"xyz\" does not match name.matches>");
    /* the series is bounded by len: "http_a" here, not the whole string */
    assert_true(cma_naming_accepts(c.n, "http_a_bbb", 6));
    assert_false(cma_naming_accepts(c.n, "http_bbb_a", 6));
    done(&c);
}

static void test_cma_naming__as_expansion(void **state)
{
    (void)state;
    struct compiled c = compile("  name: {matches: '^(.*)_seconds_(total|count)$', as: "
                                "'${1}_per_${2}'}\n");
    assert_string_equal(name_of(&c, "cpu_seconds_total"), "cpu_per_total");
    assert_string_equal(name_of(&c, "gc_seconds_count"), "gc_per_count");
    done(&c);
    c = compile("  name: {matches: '^(?P<base>[a-z]+)_bytes$', as: '${base}_size'}\n");
    assert_string_equal(name_of(&c, "heap_bytes"), "heap_size");
    done(&c);
    /* $1x is the group named "1x" (Go's Expand): empty, so not a metric name */
    c = compile("  name: {matches: '^(.*)_total$', as: '$1x'}\n");
    assert_string_equal(name_of(&c, "a_total"),
                        "<error: series \"a_total\" gives metric name \"\", which is not a valid "
                        "path segment>");
    done(&c);
    /* the expansion is appended to what out already holds */
    c = compile("  name: {matches: '^(.*)_total$'}\n");
    struct cma_buf b;
    cma_buf_init(&b, 0);
    cma_buf_appends(&b, "pre:");
    assert_int_equal(cma_naming_metric_name(c.n, "x_total", 7, &b, NULL), CMA_OK);
    assert_string_equal(cma_buf_str(&b), "pre:x");
    cma_buf_done(&b);
    done(&c);
}

static void test_cma_naming__names_must_be_one_path_segment(void **state)
{
    (void)state;
    struct compiled c = compile("  name: {matches: '^(.*)$', as: '${1}'}\n");
    assert_string_equal(name_of(&c, "ok.name-1"), "ok.name-1");
    assert_string_equal(name_of(&c, "a/b"), "<error: series \"a/b\" gives metric name \"a/b\", "
                                            "which is not a valid path segment>");
    assert_string_equal(name_of(&c, "50%"), "<error: series \"50%\" gives metric name \"50%\", "
                                            "which is not a valid path segment>");
    assert_string_equal(name_of(&c, "a?b"), "<error: series \"a?b\" gives metric name \"a?b\", "
                                            "which is not a valid path segment>");
    assert_string_equal(name_of(&c, "."), "<error: series \".\" gives metric name \".\", which is "
                                          "not a valid path segment>");
    assert_string_equal(name_of(&c, ".."), "<error: series \"..\" gives metric name \"..\", which "
                                           "is not a valid path segment>");
    assert_string_equal(name_of(&c, "..."), "...");
    done(&c);
}

static void test_cma_naming__series_filters(void **state)
{
    (void)state;
    struct compiled c = compile("  seriesFilters: [{is: ^container_}, {isNot: _seconds_total$}]\n"
                                "  name: {matches: _total$, as: total}\n");
    assert_true(accepts(&c, "container_network_total"));
    assert_false(accepts(&c, "container_cpu_seconds_total")); /* isNot */
    assert_false(accepts(&c, "node_network_total"));          /* is */
    assert_false(accepts(&c, "container_network_bytes"));     /* implicit is: matches */
    assert_true(cma_naming_is_constant(c.n));
    assert_string_equal(name_of(&c, "container_network_total"), "total");
    done(&c);
}

static void test_cma_naming_compile__errors(void **state)
{
    (void)state;
    assert_string_equal(compile_error("  name: {matches: '(a)(b)'}\n", CMA_ERR_CONFIG_VALUE),
                        "t.yaml:3:19: must specify an 'as' value for name matcher \"(a)(b)\" (it "
                        "has 2 capture groups)");
    /* a filter with neither or both of is/isNot (config loading refuses both shapes already;
     * the compiler checks again on its own) */
    struct compiled c = compile("  seriesFilters: [{is: a}]\n");
    cma_naming_free(c.n);
    struct cma_config_filter *f = &c.cfg->rules[0].series_filters[0];
    struct cma_err err;
    char got_pos[600];
    f->is.set = false;
    cma_err_clear(&err);
    assert_int_equal(cma_naming_compile(&c.cfg->rules[0], &c.n, &err), CMA_ERR_CONFIG_VALUE);
    cma_err_format_pos(&err, got_pos, sizeof(got_pos));
    assert_string_equal(got_pos,
                        "t.yaml:3:19: must have either an `is` or `isNot` expression in a filter");
    f->is.set = true;
    f->is_not.set = true;
    cma_err_clear(&err);
    assert_int_equal(cma_naming_compile(&c.cfg->rules[0], &c.n, &err), CMA_ERR_CONFIG_VALUE);
    assert_string_equal(err.msg,
                        "cannot have both an `is` and `isNot` expression in a single filter");
    c.n = NULL;
    done(&c);
    const char *got = compile_error("  name: {matches: 'a(b'}\n", CMA_ERR_REGEX);
    assert_non_null(strstr(got, "name.matches: "));
    assert_int_equal(strncmp(got, "t.yaml:3:", 9), 0);
    got = compile_error("  seriesFilters: [{isNot: '[z-a]'}]\n", CMA_ERR_REGEX);
    assert_non_null(strstr(got, "seriesFilters.isNot: "));
    /* two groups with an `as` compile */
    c = compile("  name: {matches: '(a)(b)', as: '$2$1'}\n");
    assert_string_equal(name_of(&c, "xaby"), "ba");
    done(&c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cma_naming__defaults),
        cmocka_unit_test(test_cma_naming__matches_is_an_unanchored_leftmost_search),
        cmocka_unit_test(test_cma_naming__as_expansion),
        cmocka_unit_test(test_cma_naming__names_must_be_one_path_segment),
        cmocka_unit_test(test_cma_naming__series_filters),
        cmocka_unit_test(test_cma_naming_compile__errors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
