/* selector_test.c: unit tests for selector.c: Kubernetes label selector parsing (labels.Parse),
 * matching, canonical String(), PromQL matchers (reference section 4 and 9.2) and Go %q. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "cma/selector.h"

static struct cma_selector *parse_ok(const char *text)
{
    struct cma_err err;
    cma_err_clear(&err);
    struct cma_selector *sel = NULL;
    if (cma_selector_parse(text, strlen(text), &sel, &err) != CMA_OK)
        fail_msg("parse \"%s\": %s", text, err.msg);
    assert_non_null(sel);
    return sel;
}

static void assert_parse_error(const char *text, size_t len, unsigned column, const char *detail)
{
    struct cma_err err;
    cma_err_clear(&err);
    struct cma_selector *sel = NULL;
    enum cma_errc rc = cma_selector_parse(text, len, &sel, &err);
    if (rc == CMA_OK)
        fail_msg("\"%s\" parsed but must fail", text);
    assert_int_equal(rc, CMA_ERR_BAD_SELECTOR);
    assert_int_equal(err.code, CMA_ERR_BAD_SELECTOR);
    assert_null(sel);
    if (err.column != column)
        fail_msg("\"%s\": column %u, want %u (%s)", text, err.column, column, err.msg);
    if (!strstr(err.msg, detail))
        fail_msg("\"%s\": message \"%s\" lacks \"%s\"", text, err.msg, detail);
    assert_non_null(strstr(err.msg, "invalid label selector \""));
}

/* parse → format, into a static buffer */
static const char *formatted(const char *text)
{
    static char result[512];
    struct cma_selector *sel = parse_ok(text);
    struct cma_buf out;
    cma_buf_init(&out, 4096);
    assert_int_equal(cma_selector_format(sel, &out), CMA_OK);
    snprintf(result, sizeof(result), "%s", cma_buf_str(&out));
    cma_buf_done(&out);
    cma_selector_free(sel);
    return result;
}

/* parse → PromQL matchers, into a static buffer */
static const char *promql(const char *text)
{
    static char result[512];
    struct cma_selector *sel = parse_ok(text);
    struct cma_buf out;
    cma_buf_init(&out, 4096);
    struct cma_err err;
    cma_err_clear(&err);
    if (cma_selector_to_promql(sel, &out, &err) != CMA_OK)
        fail_msg("to_promql \"%s\": %s", text, err.msg);
    snprintf(result, sizeof(result), "%s", cma_buf_str(&out));
    cma_buf_done(&out);
    cma_selector_free(sel);
    return result;
}

static const char *quoted(const char *s, size_t len)
{
    static char result[256];
    struct cma_buf out;
    cma_buf_init(&out, 1024);
    assert_int_equal(cma_promql_quote(&out, s, len), CMA_OK);
    snprintf(result, sizeof(result), "%s", cma_buf_str(&out));
    cma_buf_done(&out);
    return result;
}

struct label {
    const char *name;
    const char *value;
};

static const char *lookup_label(void *ctx, const char *name)
{
    for (const struct label *l = ctx; l->name; l++)
        if (strcmp(l->name, name) == 0)
            return l->value;
    return NULL;
}

static bool sel_matches(const char *text, const struct label *labels)
{
    struct cma_selector *sel = parse_ok(text);
    bool m = cma_selector_matches(sel, lookup_label, (void *)labels);
    cma_selector_free(sel);
    return m;
}

static void test_cma_selector_parse__operators_and_values(void **state)
{
    (void)state;
    struct cma_selector *sel = parse_ok("x in (foo,,baz),y,z notin (),!w,v>5,u<10,t==1,s!=2,r=");
    assert_int_equal(sel->n_reqs, 9);
    /* sorted by key */
    const char *keys[] = {"r", "s", "t", "u", "v", "w", "x", "y", "z"};
    const enum cma_selector_op ops[] = {CMA_SEL_EQ, CMA_SEL_NEQ,    CMA_SEL_EQ,
                                        CMA_SEL_LT, CMA_SEL_GT,     CMA_SEL_NOT_EXISTS,
                                        CMA_SEL_IN, CMA_SEL_EXISTS, CMA_SEL_NOTIN};
    for (size_t i = 0; i < 9; i++) {
        assert_string_equal(sel->reqs[i].key, keys[i]);
        assert_int_equal(sel->reqs[i].op, ops[i]);
    }
    /* x in (foo,,baz): a sorted set holding "" */
    assert_int_equal(sel->reqs[6].n_values, 3);
    assert_string_equal(sel->reqs[6].values[0], "");
    assert_string_equal(sel->reqs[6].values[1], "baz");
    assert_string_equal(sel->reqs[6].values[2], "foo");
    /* z notin (): the set {""} */
    assert_int_equal(sel->reqs[8].n_values, 1);
    assert_string_equal(sel->reqs[8].values[0], "");
    assert_int_equal(sel->reqs[7].n_values, 0);
    assert_string_equal(sel->reqs[0].values[0], "");
    cma_selector_free(sel);
}

static void test_cma_selector_parse__sets_dedup_and_keys_sort_stably(void **state)
{
    (void)state;
    struct cma_selector *sel = parse_ok("b in (y,x,y,x),a!=2,b,a!=1");
    assert_int_equal(sel->n_reqs, 4);
    assert_string_equal(sel->reqs[0].key, "a");
    assert_string_equal(sel->reqs[0].values[0], "2"); /* equal keys keep input order */
    assert_string_equal(sel->reqs[1].values[0], "1");
    assert_int_equal(sel->reqs[2].op, CMA_SEL_IN);
    assert_int_equal(sel->reqs[2].n_values, 2);
    assert_string_equal(sel->reqs[2].values[0], "x");
    assert_string_equal(sel->reqs[2].values[1], "y");
    assert_int_equal(sel->reqs[3].op, CMA_SEL_EXISTS);
    cma_selector_free(sel);
}

static void test_cma_selector_parse__keywords_as_identifiers(void **state)
{
    (void)state;
    assert_string_equal(formatted("in in (in,notin)"), "in in (in,notin)");
    assert_string_equal(formatted("notin"), "notin");
    assert_string_equal(formatted("!in"), "!in");
    assert_string_equal(formatted("a=in"), "a=in");
}

static void test_cma_selector_parse__whitespace_and_empty(void **state)
{
    (void)state;
    assert_string_equal(formatted(" \t a \r\n = b , c  "), "a=b,c");
    assert_string_equal(formatted("app  in  ( a , b )"), "app in (a,b)");
    struct cma_selector *sel = parse_ok("   ");
    assert_true(cma_selector_is_empty(sel));
    cma_selector_free(sel);
    sel = NULL;
    assert_int_equal(cma_selector_parse(NULL, 0, &sel, NULL), CMA_OK);
    assert_true(cma_selector_is_empty(sel));
    cma_selector_free(sel);
    assert_true(cma_selector_is_empty(NULL));
    assert_string_equal(formatted(""), "");
}

static void test_cma_selector_parse__qualified_keys(void **state)
{
    (void)state;
    assert_string_equal(formatted("app.kubernetes.io/name=web"), "app.kubernetes.io/name=web");
    assert_string_equal(formatted("a-b_c.d=E.f-G_h"), "a-b_c.d=E.f-G_h");
}

static void test_cma_selector_parse__kubernetes_error_messages(void **state)
{
    (void)state;
    /* the two real kube-apiserver answers in fixtures/kube-apiserver/error-400-label-selector-* */
    assert_parse_error("app===x", 7, 6,
                       "unable to parse requirement: found '=', expected: identifier");
    assert_parse_error("app in (", 8, 9,
                       "unable to parse requirement: found '', expected: ',', ')' or identifier");
    assert_parse_error("a===b", 5, 4,
                       "unable to parse requirement: found '=', expected: identifier");
    assert_parse_error("app in (a", 9, 10, "found '', expected: ',' or ')'");
    assert_parse_error("app in (a b)", 12, 11, "found 'b', expected: ',' or ')'");
    assert_parse_error("app in a", 8, 8, "found 'a' expected: '('");
    assert_parse_error("=b", 2, 1, "found '=', expected: !, identifier, or 'end of string'");
    assert_parse_error("a!b", 3, 2, "found '!', expected: in, notin, =, ==, !=, gt, lt");
    assert_parse_error("a b", 3, 3, "found 'b', expected: in, notin, =, ==, !=, gt, lt");
    assert_parse_error("a=b c", 5, 5, "found 'c', expected: ',' or 'end of string'");
    assert_parse_error("!a=b", 4, 3, "found '=', expected: ',' or 'end of string'");
    assert_parse_error("a,", 2, 3, "found '', expected: identifier after ','");
    assert_parse_error("a,,b", 4, 3, "found ',', expected: identifier after ','");
    assert_parse_error("!", 1, 2, "found '', expected: identifier");
    assert_parse_error("a in (,", 7, 8, "found '', expected: ',', or identifier");
}

static void test_cma_selector_parse__validation_errors(void **state)
{
    (void)state;
    char long_value[80];
    memset(long_value, 0, sizeof(long_value));
    strcpy(long_value, "a=");
    memset(long_value + 2, 'v', 64);
    assert_parse_error(long_value, strlen(long_value), 3, "must be no more than 63 characters");
    assert_parse_error("a=-x", 4, 3, "a valid label must be an empty string");
    assert_parse_error("a>x", 3, 3, "for 'Gt', 'Lt' operators, the value must be an integer");
    assert_parse_error("a>", 2, 3, "for 'Gt', 'Lt' operators, the value must be an integer");
    assert_parse_error("a>99999999999999999999", 22, 3, "the value must be an integer");
    assert_parse_error("x,A*B=c", 7, 3, "name part must consist of alphanumeric characters");
    assert_parse_error("a/b/c", 5, 1, "a qualified name must consist of");
    assert_parse_error("Example.com/a", 13, 1, "prefix part a lowercase RFC 1123 subdomain");
    assert_parse_error("/a", 2, 1, "prefix part must be non-empty");
    assert_parse_error("ex.com/", 7, 1, "name part must be non-empty");
    char long_key[80];
    memset(long_key, 'k', 64);
    long_key[64] = '\0';
    assert_parse_error(long_key, 64, 1, "name part must be no more than 63 characters");
    assert_parse_error("a=b\0c", 5, 4, "NUL byte");
}

static void test_cma_selector_matches__kubernetes_semantics(void **state)
{
    (void)state;
    const struct label pod[] = {
        {"app", "web"}, {"tier", "front"}, {"replicas", "3"}, {"bad", "x1"}, {NULL, NULL}};
    assert_true(sel_matches("", pod));
    assert_true(sel_matches("app=web", pod));
    assert_true(sel_matches("app==web", pod));
    assert_false(sel_matches("app=db", pod));
    assert_false(sel_matches("zone=a", pod));
    assert_true(sel_matches("app!=db", pod));
    assert_false(sel_matches("app!=web", pod));
    assert_true(sel_matches("zone!=a", pod)); /* absent label matches != */
    assert_true(sel_matches("app in (db,web)", pod));
    assert_false(sel_matches("app in (db)", pod));
    assert_false(sel_matches("zone in (a)", pod));
    assert_true(sel_matches("app notin (db)", pod));
    assert_false(sel_matches("app notin (web)", pod));
    assert_true(sel_matches("zone notin (a)", pod)); /* absent label matches notin */
    assert_true(sel_matches("app", pod));
    assert_false(sel_matches("zone", pod));
    assert_true(sel_matches("!zone", pod));
    assert_false(sel_matches("!app", pod));
    assert_true(sel_matches("replicas>2", pod));
    assert_false(sel_matches("replicas>3", pod));
    assert_true(sel_matches("replicas<4", pod));
    assert_false(sel_matches("replicas<3", pod));
    assert_false(sel_matches("zone>1", pod)); /* absent fails gt */
    assert_false(sel_matches("bad>0", pod));  /* not an integer fails gt */
    assert_false(sel_matches("bad<9", pod));
    assert_true(sel_matches("app=web,tier in (front),!zone,replicas>0", pod));
    assert_false(sel_matches("app=web,tier=back", pod));
    const struct label empty_value[] = {{"app", ""}, {NULL, NULL}};
    assert_true(sel_matches("app=", empty_value));
    assert_true(sel_matches("app in ()", empty_value));
    assert_true(sel_matches("app", empty_value));
}

static void test_cma_selector_format__canonical_string(void **state)
{
    (void)state;
    assert_string_equal(formatted("b=1,a!=2"), "a!=2,b=1");
    assert_string_equal(formatted("a==b"), "a=b");
    assert_string_equal(formatted("x in (foo,,baz),y,z notin ()"), "x in (,baz,foo),y,z notin ()");
    assert_string_equal(formatted("!a,b>1,c<2"), "!a,b>1,c<2");
    assert_string_equal(formatted("a notin (z,y)"), "a notin (y,z)");
    assert_string_equal(formatted("a="), "a=");
}

static void test_cma_selector_to_promql__reference_section_4(void **state)
{
    (void)state;
    assert_string_equal(promql("a=v"), "a=\"v\"");
    assert_string_equal(promql("a==v"), "a=\"v\"");
    assert_string_equal(promql("a!=v"), "a!=\"v\"");
    assert_string_equal(promql("a in (v)"), "a=~\"v\"");
    assert_string_equal(promql("a notin (v)"), "a!~\"v\"");
    assert_string_equal(promql("a in (b,a)"), "a=~\"a|b\"");
    assert_string_equal(promql("a notin (y,x)"), "a!~\"x|y\"");
    assert_string_equal(promql("a"), "a!=\"\"");
    assert_string_equal(promql("!a"), "a=\"\"");
    assert_string_equal(promql("a="), "a=\"\"");
    assert_string_equal(promql(""), "");
    /* reference 9.2 */
    assert_string_equal(promql("foo=bar, qux in (bar,baz)"), "foo=\"bar\",qux=~\"bar|baz\"");
    /* aggregator-decoded query text */
    assert_string_equal(promql("app in (a,b)"), "app=~\"a|b\"");
    /* sorted by key; regex values not escaped (upstream behaviour) */
    assert_string_equal(promql("z=1,a in (x.y,w)"), "a=~\"w|x.y\",z=\"1\"");
    assert_string_equal(promql("app.kubernetes.io/name=web"), "app.kubernetes.io/name=\"web\"");
}

static void test_cma_selector_to_promql__gt_lt_unsupported(void **state)
{
    (void)state;
    const char *cases[] = {"a>1", "b=2,a<1"};
    for (size_t i = 0; i < 2; i++) {
        struct cma_selector *sel = parse_ok(cases[i]);
        struct cma_buf out;
        cma_buf_init(&out, 1024);
        struct cma_err err;
        cma_err_clear(&err);
        assert_int_equal(cma_selector_to_promql(sel, &out, &err), CMA_ERR_BAD_SELECTOR);
        assert_non_null(strstr(err.msg, "operator not supported by prometheus"));
        assert_non_null(strstr(err.msg, "\"a\""));
        assert_int_equal(out.len, 0); /* nothing half-written */
        cma_buf_done(&out);
        cma_selector_free(sel);
    }
}

static void test_cma_selector_to_promql__buffer_ceiling(void **state)
{
    (void)state;
    struct cma_selector *sel = parse_ok("a in (x1,x2,x3,x4,x5,x6,x7)");
    struct cma_buf out;
    cma_buf_init(&out, 8);
    struct cma_err err;
    cma_err_clear(&err);
    assert_int_equal(cma_selector_to_promql(sel, &out, &err), CMA_ERR_TOO_LARGE);
    assert_int_equal(err.code, CMA_ERR_TOO_LARGE);
    cma_buf_done(&out);
    cma_selector_free(sel);
}

static void test_cma_promql_quote__go_strconv_quote(void **state)
{
    (void)state;
    assert_string_equal(quoted("abc", 3), "\"abc\"");
    assert_string_equal(quoted("", 0), "\"\"");
    assert_string_equal(quoted("a\"b", 3), "\"a\\\"b\"");
    assert_string_equal(quoted("a\\b", 3), "\"a\\\\b\"");
    assert_string_equal(quoted("\a\b\f\n\r\t\v", 7), "\"\\a\\b\\f\\n\\r\\t\\v\"");
    assert_string_equal(quoted("\0\x1f\x7f", 3), "\"\\x00\\x1f\\x7f\"");
    assert_string_equal(quoted("\xc3\xa9", 2), "\"\xc3\xa9\""); /* é printable */
    assert_string_equal(quoted("\xff"
                               "a",
                               2),
                        "\"\\xffa\"");                                     /* invalid byte */
    assert_string_equal(quoted("\xed\xa0\x80", 3), "\"\\xed\\xa0\\x80\""); /* surrogate */
    assert_string_equal(quoted("\xc2\xa0", 2), "\"\\u00a0\"");             /* no-break space */
    assert_string_equal(quoted("\xe2\x80\xa8", 3), "\"\\u2028\"");
    assert_string_equal(quoted("\xf0\x9f\x98\x80", 4), "\"\xf0\x9f\x98\x80\""); /* emoji */
    assert_string_equal(quoted("\xf3\xa0\x80\x81", 4), "\"\\U000e0001\"");      /* tag (Cf) */
    /* printable runs between escapes, at both ends, and a whole-ASCII regex of names */
    assert_string_equal(quoted("ab\"cd\\\x01"
                               "ef \xc3\xa9~\x7f",
                               14),
                        "\"ab\\\"cd\\\\\\x01ef \xc3\xa9~\\x7f\"");
    assert_string_equal(quoted("pod-1|pod-2|pod-3", 17), "\"pod-1|pod-2|pod-3\"");
    assert_string_equal(quoted("a|b.c", 5), "\"a|b.c\"");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cma_selector_parse__operators_and_values),
        cmocka_unit_test(test_cma_selector_parse__sets_dedup_and_keys_sort_stably),
        cmocka_unit_test(test_cma_selector_parse__keywords_as_identifiers),
        cmocka_unit_test(test_cma_selector_parse__whitespace_and_empty),
        cmocka_unit_test(test_cma_selector_parse__qualified_keys),
        cmocka_unit_test(test_cma_selector_parse__kubernetes_error_messages),
        cmocka_unit_test(test_cma_selector_parse__validation_errors),
        cmocka_unit_test(test_cma_selector_matches__kubernetes_semantics),
        cmocka_unit_test(test_cma_selector_format__canonical_string),
        cmocka_unit_test(test_cma_selector_to_promql__reference_section_4),
        cmocka_unit_test(test_cma_selector_to_promql__gt_lt_unsupported),
        cmocka_unit_test(test_cma_selector_to_promql__buffer_ceiling),
        cmocka_unit_test(test_cma_promql_quote__go_strconv_quote),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
