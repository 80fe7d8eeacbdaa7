/* regex_test.c: unit tests for regex.c (Go RE2 syntax on PCRE2, Go's regexp.Expand). Cases come
 * from prometheus-adapter (reference 9.3, 3.2, 11.1-2) and from Go's regexp/syntax rules. */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "cma/regex.h"
#include "cma/unicode.h"

static struct cma_regex *compile_ok(const char *pattern)
{
    struct cma_err err;
    cma_err_clear(&err);
    struct cma_regex *re = NULL;
    enum cma_errc rc = cma_regex_compile(pattern, &re, &err);
    if (rc != CMA_OK)
        fail_msg("compile %s: %s", pattern, err.msg);
    assert_non_null(re);
    return re;
}

static bool matches(const char *pattern, const char *s)
{
    struct cma_regex *re = compile_ok(pattern);
    bool m = cma_regex_match(re, s, strlen(s));
    cma_regex_free(re);
    return m;
}

/* Compiles a pattern that must be rejected; checks the column and a piece of the message. */
static void assert_rejected(const char *pattern, unsigned column, const char *msg_part)
{
    struct cma_err err;
    cma_err_clear(&err);
    struct cma_regex *re = NULL;
    enum cma_errc rc = cma_regex_compile(pattern, &re, &err);
    if (rc == CMA_OK)
        fail_msg("pattern %s compiled but must be rejected", pattern);
    assert_int_equal(rc, CMA_ERR_REGEX);
    assert_int_equal(err.code, CMA_ERR_REGEX);
    assert_null(re);
    if (err.column != column)
        fail_msg("pattern %s: column %u, want %u (%s)", pattern, err.column, column, err.msg);
    if (!strstr(err.msg, msg_part))
        fail_msg("pattern %s: message \"%s\" lacks \"%s\"", pattern, err.msg, msg_part);
    assert_non_null(strstr(err.msg, "invalid regex \""));
}

/* Finds `pattern` in `s` and expands `tmpl`; returns a static copy of the result. */
static const char *expand(const char *pattern, const char *s, const char *tmpl)
{
    static char result[256];
    struct cma_regex *re = compile_ok(pattern);
    size_t ov[2 * 16];
    assert_true(cma_regex_n_groups(re) < 16);
    assert_true(cma_regex_find(re, s, strlen(s), ov, 2 * (cma_regex_n_groups(re) + 1)));
    struct cma_buf out;
    cma_buf_init(&out, 1024);
    assert_int_equal(cma_regex_expand(re, tmpl, s, ov, &out), CMA_OK);
    snprintf(result, sizeof(result), "%s", cma_buf_str(&out));
    cma_buf_done(&out);
    cma_regex_free(re);
    return result;
}

static void test_cma_regex_compile__prometheus_adapter_filters(void **state)
{
    (void)state;
    /* reference 9.3: is "my_.*" */
    assert_true(matches("my_.*", "my_label"));
    assert_false(matches("my_.*", "your_label"));
    /* reference 11.1: unanchored search */
    assert_true(matches("_total", "http_requests_total"));
    assert_true(matches("^container_.*_seconds_total$", "container_cpu_usage_seconds_total"));
    assert_false(matches("^container_.*_seconds_total$", "node_cpu_seconds_total"));
    assert_true(matches("", "anything"));
}

static void test_cma_regex_compile__rejects_perl_only_constructs(void **state)
{
    (void)state;
    assert_rejected("a(?=b)", 2, "lookahead is not supported");
    assert_rejected("a(?!b)", 2, "lookahead is not supported");
    assert_rejected("(?<=a)b", 1, "lookbehind is not supported");
    assert_rejected("x(?<!a)b", 2, "lookbehind is not supported");
    assert_rejected("(a)\\1", 4, "backreferences are not supported");
    assert_rejected("(?P<n>a)\\k<n>", 9, "backreferences are not supported");
    assert_rejected("(?P<n>a)(?P=n)", 9, "backreferences are not supported");
    assert_rejected("ab(?>c)", 3, "atomic groups are not supported");
    assert_rejected("a*+", 3, "possessive quantifiers are not supported");
    assert_rejected("ab++", 4, "possessive quantifiers are not supported");
    assert_rejected("a?+", 3, "possessive quantifiers are not supported");
    assert_rejected("a{2}+", 5, "possessive quantifiers are not supported");
    assert_rejected("a\\C", 2, "\\C is not supported");
    assert_rejected("(?R)", 1, "recursion is not supported");
    assert_rejected("(a)(?1)", 4, "recursion is not supported");
    assert_rejected("(a)(?-1)", 4, "recursion is not supported");
    assert_rejected("(?P<n>a)(?P>n)", 9, "recursion is not supported");
    assert_rejected("(?&n)", 1, "recursion is not supported");
    assert_rejected("(a)(?(1)b|c)", 4, "conditionals are not supported");
    assert_rejected("a\\G", 2, "\\G is not supported");
    assert_rejected("a\\Kb", 2, "\\K is not supported");
    assert_rejected("(?#note)a", 1, "comments are not supported");
}

static void test_cma_regex_compile__rejects_what_go_rejects(void **state)
{
    (void)state;
    assert_rejected("a**", 3, "invalid nested repetition operator");
    assert_rejected("*a", 1, "missing argument to repetition operator");
    assert_rejected("a|*", 3, "missing argument to repetition operator");
    assert_rejected("a{1001}", 2, "invalid repeat count");
    assert_rejected("a{3,2}", 2, "invalid repeat count");
    assert_rejected("(a{10}){200}", 8, "invalid repeat count"); /* nested product > 1000 */
    assert_rejected("(ab", 1, "missing closing )");
    assert_rejected("ab)", 3, "unexpected )");
    assert_rejected("x[ab", 2, "missing closing ]");
    assert_rejected("[z-a]", 2, "invalid character class range");
    assert_rejected("[[:foo:]]", 2, "invalid character class range");
    assert_rejected("\\8", 1, "invalid escape sequence");
    assert_rejected("a\\Z", 2, "invalid escape sequence");
    assert_rejected("[\\b]", 2, "invalid escape sequence"); /* Go has no [\b] */
    assert_rejected("\\xZ1", 1, "invalid escape sequence");
    assert_rejected("ab\\", 3, "trailing backslash");
    assert_rejected("(?x)a", 1, "invalid or unsupported Perl syntax");
    assert_rejected("(?i-)a", 1, "invalid or unsupported Perl syntax");
    assert_rejected("(?'n'a)", 1, "invalid or unsupported Perl syntax");
    assert_rejected("(?P<a-b>x)", 1, "invalid named capture");
    assert_rejected("a\xff", 2, "invalid UTF-8");
}

static void test_cma_regex_compile__maps_pcre2_errors_to_column(void **state)
{
    (void)state;
    /* passes the Go-syntax scan, PCRE2 rejects the property name */
    assert_rejected("ab\\p{NoSuchScript}", 3, "invalid regex \"ab\\\\p{NoSuchScript}\"");
}

static void test_cma_regex_compile__accepts_go_syntax(void **state)
{
    (void)state;
    assert_true(matches("(?P<name>a)", "a"));
    assert_true(matches("(?<name>a)", "a"));  /* Go >= 1.22 */
    assert_true(matches("(?P<1x>a)b", "ab")); /* digit-leading names are fine in Go */
    assert_true(matches("(?)a", "a"));
    assert_true(matches("^*a", "a")); /* quantified assertion */
    assert_true(matches("\\b+a", "a"));
    assert_true(matches("x{01}", "x{01}")); /* leading zero: a literal in Go */
    assert_false(matches("x{01}", "x"));
    assert_true(matches("x{,3}", "x{,3}"));
    assert_true(matches("^a{2,3}$", "aaa"));
    assert_false(matches("^a{2,3}$", "aaaa"));
    assert_true(matches("\\Qa.b\\E+", "a.bbb"));
    assert_false(matches("\\Qa.b\\E", "axb"));
    assert_true(matches("[[:alpha:]]+[[:^alpha:]]", "abc1"));
    assert_true(matches("\\pL\\p{Greek}\\PL", "a\xce\xb1"
                                              "1"));
    assert_true(matches("[]a]", "]"));
    assert_true(matches("[a-]", "-"));
    assert_true(matches("[:alpha:]", "p"));        /* outside brackets: a plain class of ':alph' */
    assert_true(matches("(?i)k", "\xe2\x84\xaa")); /* Kelvin sign folds to k */
    assert_true(matches("(?s:.)", "\n"));
    assert_false(matches(".", "\n"));
    assert_true(matches("(?U)a+", "aaa"));
    assert_true(matches("\\x41\\x{42}\\101", "ABA"));
    struct cma_regex *re = compile_ok("^\\0$");
    assert_true(cma_regex_match(re, "\0", 1));
    assert_false(cma_regex_match(re, "0", 1));
    cma_regex_free(re);
}

static void test_cma_regex_match__go_semantics(void **state)
{
    (void)state;
    /* Go's \s is [\t\n\f\r ]: no \v. Go's \v is the VT character. */
    assert_false(matches("\\s", "\v"));
    assert_true(matches("\\s", "\f"));
    assert_true(matches("\\S", "\v"));
    assert_true(matches("[\\s]", "\t"));
    assert_false(matches("[\\s]", "\v"));
    assert_true(matches("\\v", "\v"));
    assert_false(matches("\\v", "\n"));
    /* \12 is octal (newline), never a backreference */
    assert_true(matches("(a)\\12", "a\n"));
    /* $ is the end of text only; (?m) sees lines; (?m)^ matches after a final \n */
    assert_false(matches("a$", "a\n"));
    assert_true(matches("(?m)a$", "a\nb"));
    assert_true(matches("(?m)\\n^$", "a\n"));
    /* \w \d \b are ASCII-only */
    assert_false(matches("\\w", "\xc3\xa9"));
    assert_false(matches("\\d", "\xd9\xa3"));
    /* invalid UTF-8 in a subject is not an error */
    assert_true(matches("b", "\xff"
                             "b"));
}

static void test_cma_regex_match__catastrophic_pattern_hits_limit(void **state)
{
    (void)state;
    char subject[64];
    memset(subject, 'a', 40);
    subject[40] = 'b';
    subject[41] = '\0';
    struct cma_regex *re = compile_ok("(a+)+$");
    assert_false(cma_regex_match(re, subject, strlen(subject)));
    size_t ov[4];
    assert_false(cma_regex_find(re, subject, strlen(subject), ov, 4));
    cma_regex_free(re);
}

static void test_cma_regex_find__leftmost_first(void **state)
{
    (void)state;
    struct cma_regex *re = compile_ok("a|ab");
    size_t ov[2];
    assert_true(cma_regex_find(re, "xab", 3, ov, 2));
    assert_int_equal(ov[0], 1);
    assert_int_equal(ov[1], 2); /* "a", not "ab" */
    cma_regex_free(re);

    re = compile_ok("(a)|(b)");
    size_t ov3[6];
    assert_true(cma_regex_find(re, "b", 1, ov3, 6));
    assert_int_equal(ov3[2], (size_t)-1); /* unset group */
    assert_int_equal(ov3[3], (size_t)-1);
    assert_int_equal(ov3[4], 0);
    assert_int_equal(ov3[5], 1);
    assert_false(cma_regex_find(re, "c", 1, ov3, 6));
    cma_regex_free(re);
}

static void test_cma_regex_n_groups__excludes_non_capturing(void **state)
{
    (void)state;
    struct cma_regex *re = compile_ok("(a)(?:b)(?P<n>c)(?i:d)(?<m>e)");
    assert_int_equal(cma_regex_n_groups(re), 3);
    assert_string_equal(cma_regex_pattern(re), "(a)(?:b)(?P<n>c)(?i:d)(?<m>e)");
    cma_regex_free(re);
    re = compile_ok("abc");
    assert_int_equal(cma_regex_n_groups(re), 0);
    cma_regex_free(re);
}

static void test_cma_regex_group_index__by_name(void **state)
{
    (void)state;
    struct cma_regex *re = compile_ok("(a)(?P<first>b)(?<second>c)");
    assert_int_equal(cma_regex_group_index(re, "first", 5), 2);
    assert_int_equal(cma_regex_group_index(re, "second", 6), 3);
    assert_int_equal(cma_regex_group_index(re, "sec", 3), -1);
    assert_int_equal(cma_regex_group_index(re, "none", 4), -1);
    cma_regex_free(re);
}

static void test_cma_regex_expand__go_expand_cases(void **state)
{
    (void)state;
    const char *name = "http_requests_total";
    assert_string_equal(expand("^(.*)_total$", name, "$0"), "http_requests_total");
    assert_string_equal(expand("^(.*)_total$", name, "$1"), "http_requests");
    assert_string_equal(expand("^(.*)_total$", name, "${1}_per_second"),
                        "http_requests_per_second");
    /* the trap: "$1_per_second" names group "1_per_second" */
    assert_string_equal(expand("^(.*)_total$", name, "$1_per_second"), "");
    assert_string_equal(expand("^(.*)_total$", name, "x$1_per_second.y"), "x.y");
    assert_string_equal(expand("^(?P<base>.*)_total$", name, "${base}_rate"), "http_requests_rate");
    assert_string_equal(expand("^(?P<base>.*)_total$", name, "$base"), "http_requests");
    assert_string_equal(expand("^(.*)_total$", name, "$$1"), "$1");
    assert_string_equal(expand("^(.*)_total$", name, "a$9b"), "a"); /* "9b" is a name */
    assert_string_equal(expand("^(.*)_total$", name, "a${9}b"), "ab");
    assert_string_equal(expand("^(.*)_total$", name, "a$"), "a$");
    assert_string_equal(expand("^(.*)_total$", name, "a${1"), "a${1");
    assert_string_equal(expand("^(.*)_total$", name, "$-$"), "$-$");
    assert_string_equal(expand("^(.*)_total$", name, "${01}"), ""); /* leading zero: a name */
    assert_string_equal(expand("^(.*)_total$", name, "constant"), "constant");
    assert_string_equal(expand("_total", name, "$0"), "_total"); /* reference 11.1 */
    assert_string_equal(
        expand("^(.*)_MEM_USED", "DCGM_CUSTOM_PROCESS_MEM_USED", "${1}_GPU_MEM_USED_RATIO"),
        "DCGM_CUSTOM_PROCESS_GPU_MEM_USED_RATIO");
    /* unset groups expand to "" */
    assert_string_equal(expand("(a)|(b)", "b", "[$1][$2]"), "[][b]");
    /* Go names may hold Unicode letters: "$1é" names group "1é" */
    assert_string_equal(expand("(a)", "a", "$1\xc3\xa9-${1}"), "-a");
}

static void test_cma_regex_expand_has_trap__digits_then_word_char(void **state)
{
    (void)state;
    assert_true(cma_regex_expand_has_trap("$1_per_second"));
    assert_true(cma_regex_expand_has_trap("x$12abc"));
    assert_false(cma_regex_expand_has_trap("${1}_per_second"));
    assert_false(cma_regex_expand_has_trap("$1"));
    assert_false(cma_regex_expand_has_trap("$1.x"));
    assert_false(cma_regex_expand_has_trap("$$1_x"));
    assert_false(cma_regex_expand_has_trap("$name_x"));
    assert_false(cma_regex_expand_has_trap(""));
}

struct thread_job {
    const struct cma_regex *re;
    int hits;
    int prints;
};

static void *match_many(void *arg)
{
    struct thread_job *job = arg;
    for (int i = 0; i < 2000; i++) {
        size_t ov[4];
        if (cma_regex_find(job->re, "http_requests_total", 19, ov, 4) && ov[2] == 0 && ov[3] == 13)
            job->hits++;
        if (cma_unicode_is_print(0x4E16) && !cma_unicode_is_print(0x2028))
            job->prints++;
    }
    return NULL;
}

static void test_cma_regex_find__shared_between_threads(void **state)
{
    (void)state;
    struct cma_regex *re = compile_ok("^(.*)_total$");
    enum { N_THREADS = 4 };
    pthread_t threads[N_THREADS];
    struct thread_job jobs[N_THREADS];
    for (int i = 0; i < N_THREADS; i++) {
        jobs[i] = (struct thread_job){.re = re};
        assert_int_equal(pthread_create(&threads[i], NULL, match_many, &jobs[i]), 0);
    }
    for (int i = 0; i < N_THREADS; i++) {
        assert_int_equal(pthread_join(threads[i], NULL), 0);
        assert_int_equal(jobs[i].hits, 2000);
        assert_int_equal(jobs[i].prints, 2000);
    }
    cma_regex_free(re);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cma_regex_compile__prometheus_adapter_filters),
        cmocka_unit_test(test_cma_regex_compile__rejects_perl_only_constructs),
        cmocka_unit_test(test_cma_regex_compile__rejects_what_go_rejects),
        cmocka_unit_test(test_cma_regex_compile__maps_pcre2_errors_to_column),
        cmocka_unit_test(test_cma_regex_compile__accepts_go_syntax),
        cmocka_unit_test(test_cma_regex_match__go_semantics),
        cmocka_unit_test(test_cma_regex_match__catastrophic_pattern_hits_limit),
        cmocka_unit_test(test_cma_regex_find__leftmost_first),
        cmocka_unit_test(test_cma_regex_find__shared_between_threads),
        cmocka_unit_test(test_cma_regex_n_groups__excludes_non_capturing),
        cmocka_unit_test(test_cma_regex_group_index__by_name),
        cmocka_unit_test(test_cma_regex_expand__go_expand_cases),
        cmocka_unit_test(test_cma_regex_expand_has_trap__digits_then_word_char),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
