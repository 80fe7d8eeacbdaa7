/* template_test.c: the Go text/template subset with << >> delimiters: prometheus-adapter's
 * acceptance cases (reference 9.1/9.2), real-config templates, Go's printing, control flow,
 * builtins and printf, trimming, parse errors with positions, execution errors, limits,
 * and concurrent rendering of one compiled template. */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "cma/template.h"

/* ---- data: the metricsQuery dot (queryTemplateArgs) ---- */

struct query_dot {
    struct cma_tfield values[8];
    struct cma_tfield groups[8];
    struct cma_tfield fields[5];
    char group_by[256];
    struct cma_tvalue dot;
};

static struct cma_tvalue str(const char *s)
{
    return cma_tv_string(s, strlen(s));
}

/* values: NULL-terminated key, value pairs; groups: NULL-terminated names. */
static const struct cma_tvalue *query_dot(struct query_dot *d, const char *series,
                                          const char *matchers, const char *const *values,
                                          const char *const *groups)
{
    size_t n_values = 0, n_groups = 0;
    char *group_by = d->group_by;
    group_by[0] = '\0';
    for (; values && values[2 * n_values]; n_values++) {
        d->values[n_values].name = values[2 * n_values];
        d->values[n_values].value = str(values[2 * n_values + 1]);
    }
    for (; groups && groups[n_groups]; n_groups++) {
        d->groups[n_groups].name = NULL;
        d->groups[n_groups].value = str(groups[n_groups]);
        if (n_groups > 0)
            strcat(group_by, ",");
        strcat(group_by, groups[n_groups]);
    }
    d->fields[0] = (struct cma_tfield){"Series", str(series)};
    d->fields[1] = (struct cma_tfield){"LabelMatchers", str(matchers)};
    d->fields[2] =
        (struct cma_tfield){"LabelValuesByName", cma_tv_list(CMA_TV_MAP, d->values, n_values)};
    d->fields[3] = (struct cma_tfield){"GroupBy", str(group_by)};
    d->fields[4] =
        (struct cma_tfield){"GroupBySlice", cma_tv_list(CMA_TV_SLICE, d->groups, n_groups)};
    d->dot = cma_tv_list(CMA_TV_STRUCT, d->fields, 5);
    return &d->dot;
}

/* A dot with every kind of value, for the builtins. */
struct kinds_dot {
    struct cma_tfield list[3];
    struct cma_tfield map[3];
    struct cma_tfield ints[3];
    struct cma_tfield fields[10];
    struct cma_tvalue dot;
};

static const struct cma_tvalue *kinds_dot(struct kinds_dot *d)
{
    d->list[0] = (struct cma_tfield){NULL, str("a")};
    d->list[1] = (struct cma_tfield){NULL, str("b")};
    d->list[2] = (struct cma_tfield){NULL, str("c")};
    /* deliberately not in key order: printing and range must sort */
    d->map[0] = (struct cma_tfield){"zeta", str("26")};
    d->map[1] = (struct cma_tfield){"alpha", str("1")};
    d->map[2] = (struct cma_tfield){"mid", str("13")};
    for (int i = 0; i < 3; i++) {
        d->ints[i].name = NULL;
        d->ints[i].value.kind = CMA_TV_INT;
        d->ints[i].value.u.i = (i + 1) * 10;
    }
    struct cma_tvalue t = {.kind = CMA_TV_BOOL, .u.b = true};
    struct cma_tvalue f = {.kind = CMA_TV_BOOL, .u.b = false};
    struct cma_tvalue zero = {.kind = CMA_TV_INT, .u.i = 0};
    struct cma_tvalue seven = {.kind = CMA_TV_INT, .u.i = 7};
    struct cma_tvalue nil = {.kind = CMA_TV_NIL};
    d->fields[0] = (struct cma_tfield){"List", cma_tv_list(CMA_TV_SLICE, d->list, 3)};
    d->fields[1] = (struct cma_tfield){"Map", cma_tv_list(CMA_TV_MAP, d->map, 3)};
    d->fields[2] = (struct cma_tfield){"Ints", cma_tv_list(CMA_TV_SLICE, d->ints, 3)};
    d->fields[3] = (struct cma_tfield){"Empty", cma_tv_list(CMA_TV_SLICE, NULL, 0)};
    d->fields[4] = (struct cma_tfield){"True", t};
    d->fields[5] = (struct cma_tfield){"False", f};
    d->fields[6] = (struct cma_tfield){"Zero", zero};
    d->fields[7] = (struct cma_tfield){"Seven", seven};
    d->fields[8] = (struct cma_tfield){"Nil", nil};
    d->fields[9] = (struct cma_tfield){"Str", str("hello")};
    d->dot = cma_tv_list(CMA_TV_STRUCT, d->fields, 10);
    return &d->dot;
}

/* ---- helpers ---- */

static enum cma_errc render(const char *text, const struct cma_tvalue *dot, size_t max, char **ret,
                            struct cma_err *err)
{
    struct cma_template *t = NULL;
    cma_err_clear(err);
    *ret = NULL;
    enum cma_errc rc = cma_template_parse(text, strlen(text), &t, err);
    if (rc != CMA_OK)
        return rc;
    struct cma_buf b;
    cma_buf_init(&b, max);
    rc = cma_template_render(t, dot, &b, err);
    *ret = cma_buf_take(&b);
    cma_buf_done(&b);
    cma_template_free(t);
    return rc;
}

#define EXPECT_RENDER(text, dot, want) expect_render(text, dot, want, __LINE__)
static void expect_render(const char *text, const struct cma_tvalue *dot, const char *want,
                          int line)
{
    char *got;
    struct cma_err err;
    enum cma_errc rc = render(text, dot, 0, &got, &err);
    if (rc != CMA_OK)
        fail_msg("line %d: %s: failed with %s: %s (at %u:%u)", line, text, cma_errc_name(rc),
                 err.msg, err.line, err.column);
    if (strcmp(got, want) != 0)
        fail_msg("line %d: %s: got \"%s\", want \"%s\"", line, text, got, want);
    free(got);
}

#define EXPECT_PARSE_ERROR(text, line_no, col, msg)                                                \
    expect_parse_error(text, line_no, col, msg, __LINE__)
static void expect_parse_error(const char *text, unsigned line_no, unsigned col, const char *msg,
                               int line)
{
    struct cma_template *t = NULL;
    struct cma_err err;
    cma_err_clear(&err);
    enum cma_errc rc = cma_template_parse(text, strlen(text), &t, &err);
    if (rc != CMA_ERR_TEMPLATE_PARSE || t != NULL)
        fail_msg("line %d: %s: parse gave %s, want TEMPLATE_PARSE", line, text, cma_errc_name(rc));
    if (err.code != CMA_ERR_TEMPLATE_PARSE || err.line != line_no || err.column != col ||
        strcmp(err.msg, msg) != 0)
        fail_msg("line %d: %s: got %u:%u \"%s\", want %u:%u \"%s\"", line, text, err.line,
                 err.column, err.msg, line_no, col, msg);
}

#define EXPECT_EXEC_ERROR(text, dot, msg) expect_exec_error(text, dot, msg, __LINE__)
static void expect_exec_error(const char *text, const struct cma_tvalue *dot, const char *msg,
                              int line)
{
    char *got;
    struct cma_err err;
    enum cma_errc rc = render(text, dot, 0, &got, &err);
    if (rc != CMA_ERR_TEMPLATE_EXEC || err.code != CMA_ERR_TEMPLATE_EXEC)
        fail_msg("line %d: %s: got %s (\"%s\"), want TEMPLATE_EXEC", line, text, cma_errc_name(rc),
                 got ? got : "");
    if (!strstr(err.msg, msg))
        fail_msg("line %d: %s: message \"%s\" lacks \"%s\"", line, text, err.msg, msg);
    free(got);
}

/* ---- cma_template_parse ---- */

static void test_cma_template_parse__plain_text_passes_through(void **state)
{
    (void)state;
    EXPECT_RENDER("up{job=\"x\"}[5m] {}[] < > <x", NULL, "up{job=\"x\"}[5m] {}[] < > <x");
    EXPECT_RENDER("", NULL, "");
    EXPECT_RENDER("a >> b", NULL, "a >> b");
    /* NUL bytes and non-UTF-8 text are copied as they are */
    struct cma_template *t;
    struct cma_err err;
    cma_err_clear(&err);
    const char raw[] = {'a', '\0', 'b', (char)0xff};
    assert_int_equal(cma_template_parse(raw, sizeof(raw), &t, &err), CMA_OK);
    struct cma_buf b;
    cma_buf_init(&b, 0);
    assert_int_equal(cma_template_render(t, NULL, &b, &err), CMA_OK);
    assert_int_equal(b.len, sizeof(raw));
    assert_memory_equal(b.ptr, raw, sizeof(raw));
    cma_buf_done(&b);
    cma_template_free(t);
}

static void test_cma_template_parse__unclosed_action_points_at_its_start(void **state)
{
    (void)state;
    EXPECT_PARSE_ERROR("sum(<<.Series", 1, 5, "unclosed action");
    EXPECT_PARSE_ERROR("a\nb <<.Series\n | len", 2, 3, "unclosed action");
    EXPECT_PARSE_ERROR("<<(.Series>>", 1, 11, "unclosed left paren");
    EXPECT_PARSE_ERROR("<<.Series)>>", 1, 10, "unexpected right paren");
}

static void test_cma_template_parse__unknown_function(void **state)
{
    (void)state;
    EXPECT_PARSE_ERROR("sum(x) by (<<join \",\" .GroupBySlice>>)", 1, 14,
                       "function \"join\" not defined");
    EXPECT_PARSE_ERROR("x\n  <<.Series | upper>>", 2, 15, "function \"upper\" not defined");
    /* unknown functions are parse errors even in branches that never run */
    EXPECT_PARSE_ERROR("<<if false>><<default 1 .X>><<end>>", 1, 15,
                       "function \"default\" not defined");
}

static void test_cma_template_parse__call_rejected(void **state)
{
    (void)state;
    EXPECT_PARSE_ERROR("<<call .F 1>>", 1, 3,
                       "function \"call\" is not supported: there are no function values");
}

static void test_cma_template_parse__end_without_block(void **state)
{
    (void)state;
    EXPECT_PARSE_ERROR("a <<end>>", 1, 3, "unexpected {{end}}");
    EXPECT_PARSE_ERROR("<<if .X>>a<<end>>\n<<end>>", 2, 1, "unexpected {{end}}");
    EXPECT_PARSE_ERROR("<<else>>", 1, 1, "unexpected {{else}}");
    EXPECT_PARSE_ERROR("<<if 1>>a<<else>>b<<else>>c<<end>>", 1, 19, "expected end; found {{else}}");
    EXPECT_PARSE_ERROR("<<end 1>>", 1, 7, "unexpected \"1\" in end");
}

static void test_cma_template_parse__missing_end_points_at_the_block(void **state)
{
    (void)state;
    EXPECT_PARSE_ERROR("x\n<<range .GroupBySlice>>a", 2, 1,
                       "unexpected EOF: no {{end}} for this {{range}}");
    EXPECT_PARSE_ERROR("<<if 1>><<with .X>>\n\n<<end>>", 1, 1,
                       "unexpected EOF: no {{end}} for this {{if}}");
}

static void test_cma_template_parse__bad_literals(void **state)
{
    (void)state;
    EXPECT_PARSE_ERROR("<<3x>>", 1, 3, "bad number syntax: \"3x\"");
    EXPECT_PARSE_ERROR("<<printf \"%d\" 1.2.3>>", 1, 18, "unexpected \".3\" in operand");
    EXPECT_PARSE_ERROR("<<0x>>", 1, 3, "illegal number syntax: \"0x\"");
    EXPECT_PARSE_ERROR("<<99999999999999999999>>", 1, 3,
                       "integer overflow: \"99999999999999999999\"");
    EXPECT_PARSE_ERROR("<<1i>>", 1, 3, "complex number \"1i\" is not supported");
    EXPECT_PARSE_ERROR("<<printf \"%s\" \"abc>>", 1, 15, "unterminated quoted string");
    EXPECT_PARSE_ERROR("<<\"a\nb\">>", 1, 3, "unterminated quoted string");
    EXPECT_PARSE_ERROR("<<`abc>>", 1, 3, "unterminated raw quoted string");
    EXPECT_PARSE_ERROR("<<\"\\q\">>", 1, 3, "invalid syntax");
    EXPECT_PARSE_ERROR("<<'ab'>>", 1, 3, "malformed character constant: 'ab'");
    EXPECT_PARSE_ERROR("<<'a>>", 1, 3, "unterminated character constant");
}

static void test_cma_template_parse__bad_syntax(void **state)
{
    (void)state;
    EXPECT_PARSE_ERROR("<<>>", 1, 3, "missing value for command");
    EXPECT_PARSE_ERROR("<<if>>x<<end>>", 1, 5, "missing value for if");
    EXPECT_PARSE_ERROR("<<.X | 3>>", 1, 8, "non executable command in pipeline stage 2");
    EXPECT_PARSE_ERROR("<<$x>>", 1, 3, "undefined variable \"$x\"");
    EXPECT_PARSE_ERROR("<<if 1>><<$x := 1>><<end>><<$x>>", 1, 29, "undefined variable \"$x\"");
    EXPECT_PARSE_ERROR("<<.X.Y-1>>", 1, 5, "bad character U+002D '-'");
    EXPECT_PARSE_ERROR("<<.X->>", 1, 3, "bad character U+002D '-'");
    EXPECT_PARSE_ERROR("<<.X ; 1>>", 1, 6, "unexpected \";\" in operand");
    EXPECT_PARSE_ERROR("<<\x01>>", 1, 3, "unrecognized character in action: U+0001");
    EXPECT_PARSE_ERROR("<<\"x\".Y>>", 1, 6, "unexpected . after term \"\\\"x\\\"\"");
    EXPECT_PARSE_ERROR("<<$x, $y := 1>>", 1, 5, "too many declarations in command");
    EXPECT_PARSE_ERROR("<<range $a, $b, $c := .X>><<end>>", 1, 15,
                       "too many declarations in range");
    EXPECT_PARSE_ERROR("<<range $a, 1>><<end>>", 1, 13, "range can only initialize variables");
    EXPECT_PARSE_ERROR("<<.X : 1>>", 1, 6, "expected :=");
    EXPECT_PARSE_ERROR("<<break>>", 1, 3, "{{break}} outside {{range}}");
    EXPECT_PARSE_ERROR("<<range .X>><<continue 1>><<end>>", 1, 24,
                       "unexpected \"1\" in {{continue}}");
    EXPECT_PARSE_ERROR("<<define \"x\">>y<<end>>", 1, 3,
                       "{{define}} is not supported: a template cannot define others");
    EXPECT_PARSE_ERROR("<<template \"x\">>", 1, 3,
                       "{{template}} is not supported: a template cannot define others");
    EXPECT_PARSE_ERROR("<<.VeryLongFieldName ! 1>>", 1, 22, "unexpected \"!\" in operand");
    EXPECT_PARSE_ERROR("<<if .X>><<else if>><<end>>", 1, 19, "missing value for if");
}

static void test_cma_template_parse__comments(void **state)
{
    (void)state;
    EXPECT_RENDER("a<</* note */>>b", NULL, "ab");
    EXPECT_RENDER("a <<- /* note */ ->> b", NULL, "ab");
    EXPECT_RENDER("a<</* multi\nline */>>b", NULL, "ab");
    EXPECT_PARSE_ERROR("a<</* x", 1, 4, "unclosed comment");
    EXPECT_PARSE_ERROR("a<</* x */ >>", 1, 4, "comment ends before closing delimiter");
}

static void test_cma_template_parse__size_and_depth_limits(void **state)
{
    (void)state;
    struct cma_template *t = NULL;
    struct cma_err err;
    cma_err_clear(&err);
    size_t big = CMA_TEMPLATE_MAX_BYTES + 1;
    char *text = malloc(big);
    assert_non_null(text);
    memset(text, 'x', big);
    assert_int_equal(cma_template_parse(text, big, &t, &err), CMA_ERR_TEMPLATE_PARSE);
    assert_null(t);
    assert_non_null(strstr(err.msg, "more than the limit"));
    assert_int_equal(cma_template_parse(text, big - 1, &t, &err), CMA_OK);
    cma_template_free(t);
    free(text);

    /* CMA_TEMPLATE_MAX_DEPTH nested blocks parse and render; one more does not */
    char nested[4096] = "", *p = nested;
    for (int i = 0; i < CMA_TEMPLATE_MAX_DEPTH; i++)
        p += sprintf(p, "<<if 1>>");
    p += sprintf(p, "deep");
    for (int i = 0; i < CMA_TEMPLATE_MAX_DEPTH; i++)
        p += sprintf(p, "<<end>>");
    EXPECT_RENDER(nested, NULL, "deep");
    char deeper[4200];
    snprintf(deeper, sizeof(deeper), "<<with 1>>%s<<end>>", nested);
    EXPECT_PARSE_ERROR(deeper, 1, 805, "template nesting is deeper than 100");

    char parens[1024] = "<<", *q = parens + 2;
    for (int i = 0; i <= CMA_TEMPLATE_MAX_DEPTH; i++)
        *q++ = '(';
    *q++ = '1';
    for (int i = 0; i <= CMA_TEMPLATE_MAX_DEPTH; i++)
        *q++ = ')';
    strcpy(q, ">>");
    EXPECT_PARSE_ERROR(parens, 1, 103, "template nesting is deeper than 100");
}

static void test_cma_template_parse__many_variables(void **state)
{
    (void)state;
    /* thousands of variables: more slots than a render keeps on its stack */
    enum { N = 3000 };
    size_t cap = (size_t)N * 40 + 64;
    char *text = malloc(cap), *p = text;
    assert_non_null(text);
    for (int i = 0; i < N; i++)
        p += sprintf(p, "<<$v%d := %d>>", i, i);
    p += sprintf(p, "<<range $i, $x := .>><<$x>><<end>>");
    for (int i = N - 1; i >= 0; i -= 1000)
        p += sprintf(p, "<<$v%d>>,", i);
    p += sprintf(p, "<<$v0 = 7>><<$v0>>");
    struct cma_tfield items[2] = {{NULL, str("a")}, {NULL, str("b")}};
    struct cma_tvalue dot = cma_tv_list(CMA_TV_SLICE, items, 2);
    EXPECT_RENDER(text, &dot, "ab2999,1999,999,7");
    free(text);
}

static void test_cma_template_parse__null_and_free(void **state)
{
    (void)state;
    struct cma_template *t = NULL;
    struct cma_err err;
    cma_err_clear(&err);
    assert_int_equal(cma_template_parse(NULL, 0, &t, &err), CMA_OK);
    assert_non_null(t);
    cma_template_free(t);
    cma_template_free(NULL);
    assert_int_not_equal(cma_template_parse(NULL, 3, &t, NULL), CMA_OK);
}

/* ---- cma_template_uses_field ---- */

static void test_cma_template_uses_field__finds_top_level_fields(void **state)
{
    (void)state;
    struct cma_err err;
    cma_err_clear(&err);
    const char *yes[] = {
        "kube_<<.Group>>_<<.Resource>>",
        "<<.Resource>>",
        "<<if .X>><<else>><<printf \"%s\" (.Resource)>><<end>>",
        "<<range .X>><<$.Resource>><<end>>",
        "<<.Resource.Name>>",
    };
    const char *no[] = {"<<.Group>>",          "Resource",
                        "<<.X.Resource>>",     "<<$x := 1>><<$x>>",
                        "<</* .Resource */>>", "<<.Resources>>"};
    for (size_t i = 0; i < sizeof(yes) / sizeof(yes[0]); i++) {
        struct cma_template *t = NULL;
        assert_int_equal(cma_template_parse(yes[i], strlen(yes[i]), &t, &err), CMA_OK);
        if (!cma_template_uses_field(t, "Resource"))
            fail_msg("%s should use .Resource", yes[i]);
        cma_template_free(t);
    }
    for (size_t i = 0; i < sizeof(no) / sizeof(no[0]); i++) {
        struct cma_template *t = NULL;
        assert_int_equal(cma_template_parse(no[i], strlen(no[i]), &t, &err), CMA_OK);
        if (cma_template_uses_field(t, "Resource"))
            fail_msg("%s should not use .Resource", no[i]);
        cma_template_free(t);
    }
}

/* ---- cma_template_render: prometheus-adapter acceptance cases ---- */

static void test_cma_template_render__acceptance_build_selector(void **state)
{
    (void)state;
    struct query_dot d;
    const char *res_bar[] = {"resource", "bar", NULL};
    const char *res_barbaz[] = {"resource", "bar|baz", NULL};
    const char *ns_res[] = {"namespaces", "default", "resource", "bar|baz", NULL};
    const char *g_res[] = {"resource", NULL};
    const char *g_extra[] = {"resource", "extra", "groups", NULL};

    EXPECT_RENDER("series <<.Series>>", query_dot(&d, "foo", "", NULL, g_res), "series foo");
    EXPECT_RENDER("<<.LabelMatchers>>", query_dot(&d, "foo", "resource=~\"bar|baz\"", NULL, NULL),
                  "resource=~\"bar|baz\"");
    EXPECT_RENDER("<<index .LabelValuesByName \"resource\">>",
                  query_dot(&d, "foo", "", res_bar, g_res), "bar");
    EXPECT_RENDER("<<index .LabelValuesByName \"resource\">>",
                  query_dot(&d, "foo", "", res_barbaz, g_res), "bar|baz");
    EXPECT_RENDER("<<index .LabelValuesByName \"namespaces\">> <<index .LabelValuesByName "
                  "\"resource\">>",
                  query_dot(&d, "foo", "", ns_res, g_res), "default bar|baz");
    EXPECT_RENDER("<<.GroupBy>>", query_dot(&d, "foo", "", NULL, g_res), "resource");
    EXPECT_RENDER("<<.GroupBy>>", query_dot(&d, "foo", "", NULL, g_extra), "resource,extra,groups");
    EXPECT_RENDER("<<.GroupBySlice>>", query_dot(&d, "foo", "", NULL, g_res), "[resource]");
    EXPECT_RENDER("<<.GroupBySlice>>", query_dot(&d, "foo", "", NULL, g_extra),
                  "[resource extra groups]");
}

static void test_cma_template_render__acceptance_build_external_selector(void **state)
{
    (void)state;
    struct query_dot d;
    const char *g_foo_bar[] = {"foo", "bar", NULL};
    const char *ns[] = {"namespaces", "default", NULL};
    const char *foo_bar[] = {"foo", "bar", NULL};
    const char *foo_barbaz[] = {"foo", "bar|baz", NULL};

    EXPECT_RENDER("series <<.Series>>", query_dot(&d, "foo", "", NULL, NULL), "series foo");
    EXPECT_RENDER("<<.GroupBySlice>>", query_dot(&d, "foo", "", NULL, g_foo_bar), "[foo bar]");
    EXPECT_RENDER("<<index .LabelValuesByName \"namespaces\">> <<.GroupBySlice>>",
                  query_dot(&d, "foo", "", ns, g_foo_bar), "default [foo bar]");
    EXPECT_RENDER("<<index .LabelValuesByName \"namespaces\">> <<.GroupBySlice>>",
                  query_dot(&d, "foo", "", NULL, g_foo_bar), " [foo bar]");
    EXPECT_RENDER("<<.LabelMatchers>>", query_dot(&d, "foo", "foo=\"bar\"", NULL, NULL),
                  "foo=\"bar\"");
    EXPECT_RENDER("<<.LabelValuesByName>>", query_dot(&d, "foo", "", foo_bar, NULL),
                  "map[foo:bar]");
    EXPECT_RENDER("<<.LabelValuesByName>>", query_dot(&d, "foo", "", foo_barbaz, NULL),
                  "map[foo:bar|baz]");
    /* external GroupBy is empty */
    EXPECT_RENDER("sum(<<.Series>>) by (<<.GroupBy>>) <<.GroupBySlice>> <<.LabelValuesByName>>",
                  query_dot(&d, "queue", "", NULL, NULL), "sum(queue) by () [] map[]");
}

static void test_cma_template_render__real_config_templates(void **state)
{
    (void)state;
    struct query_dot d;
    const char *g_pod[] = {"pod", NULL};
    const struct cma_tvalue *dot =
        query_dot(&d, "http_requests_total", "namespace=\"default\",pod=~\"a|b\"", NULL, g_pod);
    EXPECT_RENDER("sum(rate(<<.Series>>{<<.LabelMatchers>>}[2m])) by (<<.GroupBy>>)", dot,
                  "sum(rate(http_requests_total{namespace=\"default\",pod=~\"a|b\"}[2m])) by "
                  "(pod)");
    dot = query_dot(&d, "DCGM_FI_DEV_FB_USED", "pod=\"p\"", NULL, g_pod);
    EXPECT_RENDER("sum(<<.Series>>{<<.LabelMatchers>>}) by (<<.GroupBy>>) / "
                  "sum(DCGM_CUSTOM_CONTAINER_MEM_ALLOCATED{}) by (<<.GroupBy>>)",
                  dot,
                  "sum(DCGM_FI_DEV_FB_USED{pod=\"p\"}) by (pod) / "
                  "sum(DCGM_CUSTOM_CONTAINER_MEM_ALLOCATED{}) by (pod)");
    EXPECT_RENDER("sum by (<<.GroupBy>>)(irate(<<.Series>>{<<.LabelMatchers>>}[1m]))", dot,
                  "sum by (pod)(irate(DCGM_FI_DEV_FB_USED{pod=\"p\"}[1m]))");

    struct cma_tfield gr[2] = {{"Group", str("")}, {"Resource", str("pod")}};
    struct cma_tvalue res_dot = cma_tv_list(CMA_TV_STRUCT, gr, 2);
    EXPECT_RENDER("kube_<<.Group>>_<<.Resource>>", &res_dot, "kube__pod");
    gr[0].value = str("apps");
    gr[1].value = str("deployment");
    EXPECT_RENDER("kube_<<.Group>>_<<.Resource>>", &res_dot, "kube_apps_deployment");
    gr[0].value = str("(?P<group>.+?)");
    gr[1].value = str("(?P<resource>.+?)");
    EXPECT_RENDER("kube_<<.Group>>_<<.Resource>>", &res_dot,
                  "kube_(?P<group>.+?)_(?P<resource>.+?)");
}

/* ---- cma_template_render: values and fields ---- */

static void test_cma_template_render__missing_map_key(void **state)
{
    (void)state;
    struct query_dot d;
    const char *vals[] = {"foo", "bar", NULL};
    const struct cma_tvalue *dot = query_dot(&d, "s", "", vals, NULL);
    EXPECT_RENDER("<<.LabelValuesByName.x>>", dot, "<no value>");
    EXPECT_RENDER("<<.LabelValuesByName.foo>>", dot, "bar");
    EXPECT_RENDER("[<<index .LabelValuesByName \"x\">>]", dot, "[]");
    EXPECT_RENDER("<<.LabelValuesByName.x.y>>", dot, "<no value>");
    EXPECT_RENDER("<<if .LabelValuesByName.x>>y<<else>>n<<end>>", dot, "n");
    EXPECT_RENDER("<<printf \"%v|%s\" .LabelValuesByName.x .LabelValuesByName.x>>", dot,
                  "<nil>|%!s(<nil>)");
    EXPECT_RENDER("<<print .LabelValuesByName.x>> <<html .LabelValuesByName.x>>", dot,
                  "<nil> &lt;no value&gt;");
    EXPECT_RENDER("<<eq .LabelValuesByName.x \"bar\">> <<eq .LabelValuesByName.x nil>>", dot,
                  "false true");
    EXPECT_RENDER("<<.LabelValuesByName.foo | printf \"%s!\">>", dot, "bar!");
}

static void test_cma_template_render__struct_field_errors_name_the_field(void **state)
{
    (void)state;
    struct query_dot d;
    const struct cma_tvalue *dot = query_dot(&d, "s", "", NULL, NULL);
    EXPECT_EXEC_ERROR("x <<.Foo>>", dot, "can't evaluate field Foo in type struct");
    EXPECT_EXEC_ERROR("x <<.Foo>>", dot, "template: 1:5: executing at <.Foo>");
    EXPECT_EXEC_ERROR("<<.Series.Len>>", dot, "can't evaluate field Len in type string");
    EXPECT_EXEC_ERROR("<<.GroupBySlice.X>>", dot, "can't evaluate field X in type []string");
    EXPECT_EXEC_ERROR("<<.Series 1>>", dot, "Series has arguments but cannot be invoked");
    EXPECT_EXEC_ERROR("<<.LabelValuesByName.x 1>>", dot, "x is not a method but has arguments");
    EXPECT_EXEC_ERROR("<<1 | .Series>>", dot, "Series has arguments but cannot be invoked");
    /* a field of a missing value is missing, not an error (Go's default missingkey) */
    EXPECT_RENDER("<<.Series>>", NULL, "<no value>");
    EXPECT_RENDER("<<.>>", NULL, "<no value>");
}

static void test_cma_template_render__prints_like_go(void **state)
{
    (void)state;
    struct kinds_dot d;
    const struct cma_tvalue *dot = kinds_dot(&d);
    EXPECT_RENDER("<<.List>> <<.Empty>> <<.Ints>> <<.Map>>", dot,
                  "[a b c] [] [10 20 30] map[alpha:1 mid:13 zeta:26]");
    EXPECT_RENDER("<<.True>> <<.False>> <<.Zero>> <<.Nil>> <<.Str>>", dot,
                  "true false 0 <no value> hello");
    EXPECT_RENDER("<<1>> <<-7>> <<1.5>> <<1e6>> <<100000.0>> <<'a'>> <<0x1F>> <<true>> <<\"s\">> "
                  "<<`r\\n`>>",
                  dot, "1 -7 1.5 1e+06 100000 97 31 true s r\\n");
    struct cma_tfield inner[2] = {{"A", str("x")}, {"B", {.kind = CMA_TV_NIL}}};
    struct cma_tfield outer[2] = {{"S", cma_tv_list(CMA_TV_STRUCT, inner, 2)},
                                  {"L", cma_tv_list(CMA_TV_SLICE, inner, 2)}};
    struct cma_tvalue o = cma_tv_list(CMA_TV_STRUCT, outer, 2);
    EXPECT_RENDER("<<.S>> <<.L>> <<.>>", &o, "{x <nil>} [x <nil>] {{x <nil>} [x <nil>]}");
    EXPECT_RENDER("<<printf \"%+v\" .S>>", &o, "{A:x B:<nil>}");
}

static void test_cma_template_render__map_printing_sorts_unsorted_data(void **state)
{
    (void)state;
    struct cma_tfield m[4] = {{"b", str("2")}, {"a", str("1")}, {"B", str("0")}, {"aa", str("3")}};
    struct cma_tfield f[1] = {{"M", cma_tv_list(CMA_TV_MAP, m, 4)}};
    struct cma_tvalue dot = cma_tv_list(CMA_TV_STRUCT, f, 1);
    EXPECT_RENDER("<<.M>>", &dot, "map[B:0 a:1 aa:3 b:2]");
    EXPECT_RENDER("<<range $k, $v := .M>><<$k>>=<<$v>>;<<end>>", &dot, "B=0;a=1;aa=3;b=2;");
    EXPECT_RENDER("<<.M.aa>> <<index .M \"b\">> <<len .M>>", &dot, "3 2 4");
}

/* ---- cma_template_render: control flow ---- */

static void test_cma_template_render__range(void **state)
{
    (void)state;
    struct kinds_dot d;
    const struct cma_tvalue *dot = kinds_dot(&d);
    EXPECT_RENDER("<<range .List>>(<<.>>)<<end>>", dot, "(a)(b)(c)");
    EXPECT_RENDER("<<range $i, $v := .List>><<$i>>=<<$v>>,<<end>>", dot, "0=a,1=b,2=c,");
    EXPECT_RENDER("<<range $v := .List>><<$v>><<end>>", dot, "abc");
    EXPECT_RENDER("<<range $k, $v := .Map>><<$k>>:<<$v>> <<end>>", dot, "alpha:1 mid:13 zeta:26 ");
    EXPECT_RENDER("<<range .Map>><<.>>,<<end>>", dot, "1,13,26,");
    EXPECT_RENDER("<<range .Empty>>x<<else>>empty<<end>>", dot, "empty");
    EXPECT_RENDER("<<range .Nil>>x<<else>>nil<<end>>", dot, "nil");
    EXPECT_RENDER("<<range .List>><<if eq . \"b\">><<break>><<end>><<.>><<end>>", dot, "a");
    EXPECT_RENDER("<<range .List>><<if eq . \"b\">><<continue>><<end>><<.>><<end>>", dot, "ac");
    EXPECT_RENDER("<<range .List>><<$.Str>><<end>>", dot, "hellohellohello");
    EXPECT_RENDER("<<range .List>><<range $.Empty>><<else>><<break>>x<<end>><<.>><<end>>", dot,
                  "abc");
    EXPECT_RENDER("<<range .List>><<range $.Empty>><<else>><<continue>><<end>><<.>><<end>>|", dot,
                  "|");
    EXPECT_RENDER("<<range .List>><<with $.Str>><<break>><<end>><<.>><<end>>|", dot, "|");
    EXPECT_RENDER("<<range .List>><<$x := .>><<$x>><<end>>", dot, "abc");
    EXPECT_RENDER("<<$i := 0>><<$v := 0>><<range $i, $v = .List>><<end>><<$i>><<$v>>", dot, "2c");
    EXPECT_EXEC_ERROR("<<$i := 0>><<range $i, $v = .List>><<end>>", dot, "undefined variable: $v");
    EXPECT_RENDER("<<$v := 0>><<range $v = .List>><<end>><<$v>>", dot, "c");
    EXPECT_RENDER("<<range .Ints>><<range $.List>><<.>><<end>>|<<end>>", dot, "abc|abc|abc|");
    EXPECT_EXEC_ERROR("<<range .Str>><<end>>", dot, "range can't iterate over hello");
    EXPECT_EXEC_ERROR("<<range .Seven>><<end>>", dot, "range can't iterate over 7");
}

static void test_cma_template_render__if_with_and_truth(void **state)
{
    (void)state;
    struct kinds_dot d;
    const struct cma_tvalue *dot = kinds_dot(&d);
    const char *falsy[] = {".False", ".Zero", ".Nil",      ".Empty",          "\"\"",
                           "0",      "0.0",   ".Map.none", "(slice .Str 0 0)"};
    const char *truthy[] = {".True", ".Seven", ".Str", ".List", ".Map", ".", "\"0\"", "-1", "0.5"};
    char text[128];
    for (size_t i = 0; i < sizeof(falsy) / sizeof(falsy[0]); i++) {
        snprintf(text, sizeof(text), "<<if %s>>T<<else>>F<<end>>", falsy[i]);
        EXPECT_RENDER(text, dot, "F");
    }
    for (size_t i = 0; i < sizeof(truthy) / sizeof(truthy[0]); i++) {
        snprintf(text, sizeof(text), "<<if %s>>T<<else>>F<<end>>", truthy[i]);
        EXPECT_RENDER(text, dot, "T");
    }
    EXPECT_RENDER("<<if .False>>a<<else if .Zero>>b<<else if .Seven>>c<<else>>d<<end>>", dot, "c");
    EXPECT_RENDER("<<if .False>>a<<else if .Zero>>b<<else>>d<<end>>", dot, "d");
    EXPECT_RENDER("<<with .Str>><<.>>!<<end>> <<with .Empty>>x<<else>><<.Str>><<end>>", dot,
                  "hello! hello");
    EXPECT_RENDER("<<with .Nil>>x<<else with .Map>><<.mid>><<end>>", dot, "13");
    EXPECT_RENDER("<<if $x := .Seven>><<$x>><<end>>", dot, "7");
    EXPECT_RENDER("<<with $x := .Map>><<$x.alpha>><<.zeta>><<end>>", dot, "126");
}

static void test_cma_template_render__variables_and_pipelines(void **state)
{
    (void)state;
    struct query_dot d;
    const char *g[] = {"a", "b", NULL};
    const struct cma_tvalue *dot = query_dot(&d, "up", "job=\"x\"", NULL, g);
    EXPECT_RENDER("<<$x := .Series>><<$x>>-<<$x = \"down\">><<$x>>", dot, "up-down");
    EXPECT_RENDER("<< .Series | printf \"%s-x\" >>", dot, "up-x");
    EXPECT_RENDER("<<.Series | printf \"%s-%s\" \"a\">>", dot, "a-up");
    EXPECT_RENDER("<<printf \"%s-%d\" .Series (len .GroupBySlice)>>", dot, "up-2");
    EXPECT_RENDER("<<(index .GroupBySlice 1) | printf \"[%s]\">>", dot, "[b]");
    EXPECT_RENDER("<<$.Series>> <<$.GroupBySlice>>", dot, "up [a b]");
    EXPECT_RENDER("<<.GroupBySlice | len>>", dot, "2");
    EXPECT_RENDER("<<.Series | printf \"%s\" | printf \"%s!\" | len>>", dot, "3");
    EXPECT_RENDER("<<$m := .LabelValuesByName>><<len $m>>", dot, "0");
    EXPECT_RENDER("<<(printf \"%s\" .Series)>>", dot, "up");
    EXPECT_EXEC_ERROR("<<(.Series) 1>>", dot, "can't give argument to non-function (.Series)");
    EXPECT_EXEC_ERROR("<<nil>>", dot, "nil is not a command");
    /* Go's scoping quirk: $x parses in the else branch but does not exist there at run time */
    EXPECT_EXEC_ERROR("<<if 0>><<$x := 1>><<else>><<$x>><<end>>", dot,
                      "executing at <$x>: undefined variable: $x");
}

static void test_cma_template_render__trim_markers(void **state)
{
    (void)state;
    struct query_dot d;
    const struct cma_tvalue *dot = query_dot(&d, "up", "", NULL, NULL);
    EXPECT_RENDER("a  \n <<- .Series ->> \n\t b", dot, "aupb");
    EXPECT_RENDER("a <<- .Series>> b", dot, "aup b");
    EXPECT_RENDER("a <<.Series ->> b", dot, "a upb");
    EXPECT_RENDER("a <<-\t.Series\t->> b", dot, "aupb");
    /* without the space the minus is a number sign or a bad character */
    EXPECT_RENDER("a <<-3>> b", dot, "a -3 b");
    EXPECT_RENDER("a <<- 3 ->> b", dot, "a3b");
    EXPECT_RENDER("<<range $i, $x := .LabelValuesByName>>\n<<- end>>\nz", dot, "\nz");
    EXPECT_RENDER("sum(\n  <<- .Series ->>\n)", dot, "sum(up)");
}

/* ---- cma_template_render: builtins ---- */

static void test_cma_template_render__index_slice_len(void **state)
{
    (void)state;
    struct kinds_dot d;
    const struct cma_tvalue *dot = kinds_dot(&d);
    EXPECT_RENDER("<<index .List 0>><<index .List 2>> <<index .Map \"mid\">> <<index .Ints 1>>",
                  dot, "ac 13 20");
    EXPECT_RENDER("<<index .Str 1>> <<printf \"%c\" (index .Str 1)>> <<index .List>>", dot,
                  "101 e [a b c]");
    EXPECT_RENDER("<<slice .Str 1 3>> <<slice .Str 2>> <<slice .List 1>> <<slice .List 0 1>> "
                  "<<slice .List>> <<slice .List 1 2 3>>",
                  dot, "el llo [b c] [a] [a b c] [b]");
    EXPECT_RENDER("<<len .Str>> <<len .List>> <<len .Map>> <<len .Empty>>", dot, "5 3 3 0");
    EXPECT_EXEC_ERROR("<<index .List 3>>", dot,
                      "error calling index: reflect: slice index out of range");
    EXPECT_EXEC_ERROR("<<index .List 4>>", dot, "error calling index: index out of range: 4");
    EXPECT_EXEC_ERROR("<<index .List -1>>", dot, "index out of range: -1");
    EXPECT_EXEC_ERROR("<<index .List \"a\">>", dot, "cannot index slice/array with type string");
    EXPECT_EXEC_ERROR("<<index .Map 1>>", dot, "value has type int; should be string");
    EXPECT_EXEC_ERROR("<<index .Nil 1>>", dot, "index of untyped nil");
    EXPECT_EXEC_ERROR("<<index .Seven 1>>", dot, "can't index item of type int");
    EXPECT_EXEC_ERROR("<<slice .Str 3 1>>", dot, "invalid slice index: 3 > 1");
    EXPECT_EXEC_ERROR("<<slice .Str 1 2 3>>", dot, "cannot 3-index slice a string");
    EXPECT_EXEC_ERROR("<<slice .Map>>", dot, "can't slice item of type map[string]string");
    EXPECT_EXEC_ERROR("<<len .Seven>>", dot, "error calling len: len of type int");
    EXPECT_EXEC_ERROR("<<len>>", dot, "wrong number of args for len: want 1 got 0");
    EXPECT_EXEC_ERROR("<<len 1 2>>", dot, "wrong number of args for len: want 1 got 2");
}

static void test_cma_template_render__comparisons(void **state)
{
    (void)state;
    struct kinds_dot d;
    const struct cma_tvalue *dot = kinds_dot(&d);
    EXPECT_RENDER("<<eq .Str \"x\" \"hello\">> <<eq .Str \"x\" \"y\">> <<eq .Seven 7>> "
                  "<<ne .Seven 7>> <<eq .True true>>",
                  dot, "true false true false true");
    EXPECT_RENDER("<<lt 1 2>> <<le 2 2>> <<gt \"b\" \"a\">> <<ge 1 2>> <<lt 1.5 2.5>> "
                  "<<lt \"ab\" \"b\">>",
                  dot, "true true true false true true");
    EXPECT_RENDER("<<eq (index .Str 0) 104>> <<lt (index .Str 0) 200>>", dot, "true true");
    EXPECT_RENDER("<<eq .Nil nil>> <<eq .Nil \"x\">>", dot, "true false");
    EXPECT_EXEC_ERROR("<<eq 1 \"1\">>", dot,
                      "error calling eq: incompatible types for comparison: int and string");
    EXPECT_EXEC_ERROR("<<eq 1 1.0>>", dot, "incompatible types for comparison: int and float64");
    EXPECT_EXEC_ERROR("<<lt true false>>", dot, "error calling lt: invalid type for comparison");
    EXPECT_EXEC_ERROR("<<lt .List 1>>", dot, "invalid type for comparison");
    EXPECT_EXEC_ERROR("<<eq .List .List>>", dot, "non-comparable type [a b c]: []string");
    EXPECT_EXEC_ERROR("<<eq .Str>>", dot, "missing argument for comparison");
    EXPECT_EXEC_ERROR("<<ne 1>>", dot, "wrong number of args for ne: want 2 got 1");
}

static void test_cma_template_render__and_or_not_short_circuit(void **state)
{
    (void)state;
    struct kinds_dot d;
    const struct cma_tvalue *dot = kinds_dot(&d);
    /* the operand value is returned, not a bool */
    EXPECT_RENDER("<<and 1 .Str>> <<and 0 .Str>> <<or 0 \"\" .Str>> <<or .Zero .Empty>>", dot,
                  "hello 0 hello []");
    /* evaluation stops at the deciding operand: index 9 would fail */
    EXPECT_RENDER("<<and .Zero (index .List 9)>> <<or .Str (index .List 9)>>", dot, "0 hello");
    EXPECT_EXEC_ERROR("<<and 1 (index .List 9)>>", dot, "index out of range: 9");
    EXPECT_RENDER("<<not .Zero>> <<not .Str>> <<.Seven | not>>", dot, "true false false");
    EXPECT_RENDER("<<.Zero | and 1>> <<.Str | or 0>>", dot, "0 hello");
    EXPECT_RENDER("<<if and .Str (not .Empty)>>ok<<end>>", dot, "ok");
    EXPECT_EXEC_ERROR("<<and>>", dot, "wrong number of args for and: want at least 1 got 0");
}

static void test_cma_template_render__printf_verbs(void **state)
{
    (void)state;
    struct kinds_dot d;
    const struct cma_tvalue *dot = kinds_dot(&d);
    EXPECT_RENDER("<<printf \"%s|%v|%q|%d|%x|%X|%%\" .Str .List .Str .Seven 255 .Str>>", dot,
                  "hello|[a b c]|\"hello\"|7|ff|68656C6C6F|%");
    EXPECT_RENDER("<<printf \"[%5s][%-5s][%.2s][%5.1s][%05d][%-4d][%+d][% d][%.3d]\" \"ab\" \"ab\" "
                  "\"abc\" \"xyz\" 42 7 3 3 5>>",
                  dot, "[   ab][ab   ][ab][    x][00042][7   ][+3][ 3][005]");
    EXPECT_RENDER("<<printf \"%q %v %d %x\" .List .Map .Ints .Str>>", dot,
                  "[\"a\" \"b\" \"c\"] map[alpha:1 mid:13 zeta:26] [10 20 30] 68656c6c6f");
    EXPECT_RENDER("<<printf \"%t %v %5t|\" .True .False true>>", dot, "true false  true|");
    EXPECT_RENDER("<<printf \"%c%c %q %U %#U %o %#o %b %#x %O\" 72 105 65 9731 65 8 8 5 255 8>>",
                  dot, "Hi 'A' U+2603 U+0041 'A' 10 010 101 0xff 0o10");
    EXPECT_RENDER("<<printf \"%.2f %e %g %v %6.1f %-6.1f| %08.3f %+.1e %G\" 3.14159 1234.5 "
                  "0.000012345 2.5 9.87 9.87 -3.14159 12345.0 1e21>>",
                  dot, "3.14 1.234500e+03 1.2345e-05 2.5    9.9 9.9   | -003.142 +1.2e+04 1E+21");
    EXPECT_RENDER("<<printf \"%T %T %T %T %T\" .Str .Seven .List .Map 1.5>>", dot,
                  "string int []string map[string]string float64");
    EXPECT_RENDER(
        "<<printf \"%[2]s-%[1]s\" \"a\" \"b\">> <<printf \"%*d|%-*d|%.*s\" 4 1 3 2 2 \"xyz\">>",
        dot, "b-a    1|2  |xy");
    /* after %[1]s the next argument is the second one */
    EXPECT_RENDER("<<printf \"%[1]s %s %*d\" \"a\" \"b\" 1>>", dot, "a b %!d(MISSING)");
    EXPECT_EXEC_ERROR("<<if nil>>T<<end>>", dot, "nil is not a command");
    EXPECT_RENDER("<<printf \"%q %x % x %#q\" \"a\\tb\" \"hi\" \"hi\" \"c`d\">>", dot,
                  "\"a\\tb\" 6869 68 69 \"c`d\"");
    EXPECT_RENDER("<<printf \"%#q %+q\" \"ab\" \"\\u00e9\">>", dot, "`ab` \"\\u00e9\"");
}

static void test_cma_template_render__printf_errors_like_go(void **state)
{
    (void)state;
    struct kinds_dot d;
    const struct cma_tvalue *dot = kinds_dot(&d);
    EXPECT_RENDER("<<printf \"%d %s\" \"x\">>", dot, "%!d(string=x) %!s(MISSING)");
    EXPECT_RENDER("<<printf \"%s\" 1 \"x\">>", dot, "%!s(int=1)%!(EXTRA string=x)");
    EXPECT_RENDER("<<printf \"%z|%!\" 1>>", dot, "%!z(int=1)|%!!(MISSING)");
    EXPECT_RENDER("<<printf \"%d\" .List>>", dot, "[%!d(string=a) %!d(string=b) %!d(string=c)]");
    EXPECT_RENDER("<<printf \"%s %d\" nil .Nil>>", dot, "%!s(<nil>) %!d(<nil>)");
    EXPECT_RENDER("<<printf \"abc%\">>", dot, "abc%!(NOVERB)");
    EXPECT_RENDER("<<printf \"%[3]d %[0]d\" 1>>", dot, "%!d(BADINDEX) %!d(BADINDEX)");
    EXPECT_RENDER("<<printf \"%*d\" \"x\" 1>>", dot, "%!(BADWIDTH)1");
    EXPECT_RENDER("<<printf \"%.*d\" \"x\" 1>>", dot, "%!(BADPREC)1");
    EXPECT_EXEC_ERROR("<<printf 1>>", dot, "expected string; found 1");
    EXPECT_EXEC_ERROR("<<printf .Seven>>", dot, "wrong type for value; expected string; got int");
    EXPECT_EXEC_ERROR("<<printf .Nil>>", dot, "invalid value; expected string");
    EXPECT_EXEC_ERROR("<<printf nil>>", dot, "cannot assign nil to string");
    EXPECT_EXEC_ERROR("<<printf>>", dot, "wrong number of args for printf: want at least 1 got 0");
}

static void test_cma_template_render__print_println(void **state)
{
    (void)state;
    struct kinds_dot d;
    const struct cma_tvalue *dot = kinds_dot(&d);
    EXPECT_RENDER("<<print 1 2 \"a\" \"b\" 3 .List>>", dot, "1 2ab3 [a b c]");
    EXPECT_RENDER("<<println 1 \"a\" .True>>|", dot, "1 a true\n|");
    EXPECT_RENDER("<<print>>|<<println>>|", dot, "|\n|");
    EXPECT_RENDER("<<print nil 1>>", dot, "<nil> 1");
}

static void test_cma_template_render__escapers(void **state)
{
    (void)state;
    struct kinds_dot d;
    const struct cma_tvalue *dot = kinds_dot(&d);
    EXPECT_RENDER("<<html \"<a href='x'>&\\\"\">>", dot, "&lt;a href=&#39;x&#39;&gt;&amp;&#34;");
    EXPECT_RENDER("<<js \"it's <b>\\\"=&\\n\\\\\">>", dot,
                  "it\\'s \\u003Cb\\u003E\\\"\\u003D\\u0026\\u000A\\\\");
    EXPECT_RENDER("<<urlquery \"a b&c=d/é~_.-\">>", dot, "a+b%26c%3Dd%2F%C3%A9~_.-");
    EXPECT_RENDER("<<html 1 2 \"x\">> <<urlquery .List>> <<.Str | html>>", dot,
                  "1 2x %5Ba+b+c%5D hello");
    EXPECT_RENDER("<<js \"\\u00e9\\u2028\">>", dot, "\xc3\xa9\\u2028");
}

/* ---- cma_template_render: limits and concurrency ---- */

static void test_cma_template_render__output_ceiling(void **state)
{
    (void)state;
    struct kinds_dot d;
    const struct cma_tvalue *dot = kinds_dot(&d);
    char *got;
    struct cma_err err;
    assert_int_equal(render("<<range .List>>0123456789<<end>>", dot, 25, &got, &err),
                     CMA_ERR_TOO_LARGE);
    assert_int_equal(err.code, CMA_ERR_TOO_LARGE);
    free(got);
    assert_int_equal(render("<<printf \"%30s\" \"x\">>", dot, 25, &got, &err), CMA_ERR_TOO_LARGE);
    free(got);
    assert_int_equal(render("<<range .List>>0123456789<<end>>", dot, 30, &got, &err), CMA_OK);
    assert_int_equal(strlen(got), 30);
    free(got);
    /* intermediate values have their own ceiling */
    assert_int_equal(render("<<printf \"%999999d\" 1 | len>>", dot, 0, &got, &err), CMA_OK);
    assert_string_equal(got, "999999");
    free(got);
}

static void test_cma_template_render_limited__step_budget(void **state)
{
    (void)state;
    struct cma_tfield items[10];
    for (int i = 0; i < 10; i++)
        items[i] = (struct cma_tfield){NULL, str("x")};
    struct cma_tfield f[1] = {{"L", cma_tv_list(CMA_TV_SLICE, items, 10)}};
    struct cma_tvalue dot = cma_tv_list(CMA_TV_STRUCT, f, 1);
    /* 10^6 silent iterations: far below the output ceiling, bounded by the steps */
    const char *text = "<<range .L>><<range $.L>><<range $.L>><<range $.L>><<range $.L>><<range "
                       "$.L>><<end>><<end>><<end>><<end>><<end>><<end>>done";
    struct cma_template *t;
    struct cma_err err;
    cma_err_clear(&err);
    assert_int_equal(cma_template_parse(text, strlen(text), &t, &err), CMA_OK);
    struct cma_buf b;
    cma_buf_init(&b, 0);
    assert_int_equal(cma_template_render_limited(t, &dot, &b, 5000, &err), CMA_ERR_TEMPLATE_EXEC);
    assert_non_null(strstr(err.msg, "exceeded 5000 steps"));
    cma_buf_clear(&b);
    cma_err_clear(&err);
    assert_int_equal(cma_template_render_limited(t, &dot, &b, 0, &err), CMA_OK);
    assert_string_equal(cma_buf_str(&b), "done");
    cma_buf_done(&b);
    cma_template_free(t);
}

static void test_cma_template_render__appends_and_reuses_template(void **state)
{
    (void)state;
    struct query_dot d1, d2;
    struct cma_template *t;
    struct cma_err err;
    cma_err_clear(&err);
    const char *text = "<<.Series>>";
    assert_int_equal(cma_template_parse(text, strlen(text), &t, &err), CMA_OK);
    struct cma_buf b;
    cma_buf_init(&b, 0);
    assert_int_equal(cma_buf_appends(&b, "pre:"), CMA_OK);
    assert_int_equal(cma_template_render(t, query_dot(&d1, "a", "", NULL, NULL), &b, &err), CMA_OK);
    assert_int_equal(cma_template_render(t, query_dot(&d2, "b", "", NULL, NULL), &b, &err), CMA_OK);
    assert_string_equal(cma_buf_str(&b), "pre:ab");
    cma_buf_done(&b);
    cma_template_free(t);
}

struct thread_arg {
    const struct cma_template *t;
    int id;
    int failures;
};

static void *render_many(void *p)
{
    struct thread_arg *a = p;
    char series[32], want[256];
    for (int i = 0; i < 300; i++) {
        struct query_dot d;
        const char *g[] = {"pod", "container", NULL};
        snprintf(series, sizeof(series), "s%d_%d", a->id, i);
        snprintf(want, sizeof(want), "sum(%s) by (pod,container) [0:pod 1:container] 00000",
                 series);
        struct cma_buf b;
        cma_buf_init(&b, 0);
        struct cma_err err;
        cma_err_clear(&err);
        const struct cma_tvalue *dot = query_dot(&d, series, "", NULL, g);
        if (cma_template_render(a->t, dot, &b, &err) != CMA_OK ||
            strcmp(cma_buf_str(&b), want) != 0)
            a->failures++;
        cma_buf_done(&b);
    }
    return NULL;
}

static void test_cma_template_render__concurrent_renders_share_one_template(void **state)
{
    (void)state;
    const char *text = "sum(<<.Series>>) by (<<.GroupBy>>) [<<range $i, $g := .GroupBySlice>>"
                       "<<- if $i>> <<end>><<$i>>:<<$g>><<end>>] <<printf \"%05d\" 0>>";
    struct cma_template *t;
    struct cma_err err;
    cma_err_clear(&err);
    assert_int_equal(cma_template_parse(text, strlen(text), &t, &err), CMA_OK);
    pthread_t th[4];
    struct thread_arg args[4];
    for (int i = 0; i < 4; i++) {
        args[i] = (struct thread_arg){t, i, 0};
        assert_int_equal(pthread_create(&th[i], NULL, render_many, &args[i]), 0);
    }
    for (int i = 0; i < 4; i++) {
        pthread_join(th[i], NULL);
        assert_int_equal(args[i].failures, 0);
    }
    cma_template_free(t);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cma_template_parse__plain_text_passes_through),
        cmocka_unit_test(test_cma_template_parse__unclosed_action_points_at_its_start),
        cmocka_unit_test(test_cma_template_parse__unknown_function),
        cmocka_unit_test(test_cma_template_parse__call_rejected),
        cmocka_unit_test(test_cma_template_parse__end_without_block),
        cmocka_unit_test(test_cma_template_parse__missing_end_points_at_the_block),
        cmocka_unit_test(test_cma_template_parse__bad_literals),
        cmocka_unit_test(test_cma_template_parse__bad_syntax),
        cmocka_unit_test(test_cma_template_parse__comments),
        cmocka_unit_test(test_cma_template_parse__size_and_depth_limits),
        cmocka_unit_test(test_cma_template_parse__many_variables),
        cmocka_unit_test(test_cma_template_parse__null_and_free),
        cmocka_unit_test(test_cma_template_uses_field__finds_top_level_fields),
        cmocka_unit_test(test_cma_template_render__acceptance_build_selector),
        cmocka_unit_test(test_cma_template_render__acceptance_build_external_selector),
        cmocka_unit_test(test_cma_template_render__real_config_templates),
        cmocka_unit_test(test_cma_template_render__missing_map_key),
        cmocka_unit_test(test_cma_template_render__struct_field_errors_name_the_field),
        cmocka_unit_test(test_cma_template_render__prints_like_go),
        cmocka_unit_test(test_cma_template_render__map_printing_sorts_unsorted_data),
        cmocka_unit_test(test_cma_template_render__range),
        cmocka_unit_test(test_cma_template_render__if_with_and_truth),
        cmocka_unit_test(test_cma_template_render__variables_and_pipelines),
        cmocka_unit_test(test_cma_template_render__trim_markers),
        cmocka_unit_test(test_cma_template_render__index_slice_len),
        cmocka_unit_test(test_cma_template_render__comparisons),
        cmocka_unit_test(test_cma_template_render__and_or_not_short_circuit),
        cmocka_unit_test(test_cma_template_render__printf_verbs),
        cmocka_unit_test(test_cma_template_render__printf_errors_like_go),
        cmocka_unit_test(test_cma_template_render__print_println),
        cmocka_unit_test(test_cma_template_render__escapers),
        cmocka_unit_test(test_cma_template_render__output_ceiling),
        cmocka_unit_test(test_cma_template_render_limited__step_budget),
        cmocka_unit_test(test_cma_template_render__appends_and_reuses_template),
        cmocka_unit_test(test_cma_template_render__concurrent_renders_share_one_template),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
