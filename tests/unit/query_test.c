/* query_test.c: one request's PromQL from a compiled metricsQuery template (query.c), as
 * prometheus-adapter's Build/BuildExternal render it: .LabelMatchers holds the metric-selector
 * matchers sorted by key, then the namespace matcher, then the resource matcher (= for one name,
 * =~ with names joined by '|' for several, regex values not escaped); values are Go-%q quoted;
 * .LabelValuesByName maps each label to its values joined by '|' (a later entry of the same
 * label wins); .GroupBy and .GroupBySlice are the resource label plus extra labels; external
 * requests have no resource; label names come from overrides or resources.template. And every
 * error: gt/lt selectors, no namespaces resource, no label for the resource, an empty render,
 * a template execution error. cma_query_build_bounded: the wide form past a backend's limit.
 * Rules are compiled from YAML text, templates parsed here; the
 * RESTMapper is testlib.h's hand-written resource list. */
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "cma/config.h"
#include "cma/query.h"
#include "cma/restmapper.h"
#include "cma/rule.h"
#include "cma/selector.h"
#include "cma/template.h"
#include "testlib.h"

/* the enforced text as the PromQL printer writes it: shop's matcher on every selector */
#define ENFORCED_WANT                                                                              \
    "kept:sum by (pod) (gpu_util{namespace=\"shop\",namespace=\"shop\",pod=\"orders-0\"}) "        \
    "or on () label_replace(other{namespace=\"shop\",namespace=\"web\"}, \"namespace\", "          \
    "\"shop\", \"\", \"\")"

static const char rules_yaml[] = "rules:\n"
                                 "- seriesQuery: 'gpu_util'\n"
                                 "  resources:\n"
                                 "    overrides:\n"
                                 "      namespace: {resource: namespace}\n"
                                 "      pod: {resource: pod}\n"
                                 "  metricsQuery: 'unused'\n"
                                 "- seriesQuery: 'kube_hits'\n"
                                 "  resources:\n"
                                 "    template: 'kube_<<.Resource>>'\n"
                                 "  metricsQuery: 'unused'\n";

struct fixture {
    struct cma_config *cfg;
    struct cma_ruleset *rules;
    struct cma_restmapper *mapper;
    const struct cma_resmap *overrides; /* namespace, pod */
    const struct cma_resmap *templated; /* kube_<resource> */
};

static int setup(void **state)
{
    struct fixture *fx = calloc(1, sizeof(*fx));
    assert_non_null(fx);
    struct cma_err err;
    cma_err_clear(&err);
    if (cma_config_load_string("rules.yaml", rules_yaml, strlen(rules_yaml), &fx->cfg, &err) !=
            CMA_OK ||
        cma_ruleset_compile(fx->cfg, &fx->rules, &err) != CMA_OK)
        fail_msg("rules: %s", err.msg);
    assert_int_equal(fx->rules->n_rules, 2);
    fx->overrides = fx->rules->rules[0].resmap;
    fx->templated = fx->rules->rules[1].resmap;
    fx->mapper = test_mapper(test_resources_default,
                             sizeof(test_resources_default) / sizeof(test_resources_default[0]));
    assert_non_null(fx->mapper);
    *state = fx;
    return 0;
}

static int teardown(void **state)
{
    struct fixture *fx = *state;
    cma_restmapper_unref(fx->mapper);
    cma_ruleset_free(fx->rules);
    cma_config_free(fx->cfg);
    free(fx);
    return 0;
}

static struct cma_template *parse(const char *text)
{
    struct cma_template *t = NULL;
    struct cma_err err;
    cma_err_clear(&err);
    if (cma_template_parse(text, strlen(text), &t, &err) != CMA_OK)
        fail_msg("template %s: %s", text, err.msg);
    return t;
}

static struct cma_selector *selector(const char *text)
{
    struct cma_selector *sel = NULL;
    if (!text)
        return NULL;
    assert_int_equal(cma_selector_parse(text, strlen(text), &sel, NULL), CMA_OK);
    return sel;
}

/* A pods request in `ns` for `names`, rendered with `tmpl` over the override mapping. */
static struct cma_query_input pods_input(const struct fixture *fx, const struct cma_template *t,
                                         const char *ns, const char *const *names, size_t n)
{
    struct cma_query_input in = {
        .tmpl = t,
        .resmap = fx->overrides,
        .mapper = fx->mapper,
        .series = "gpu_util",
        .resource = cma_restmapper_resource_for(fx->mapper, "", "pods"),
        .namespace_ = ns,
        .names = names,
        .n_names = n,
    };
    assert_non_null(in.resource);
    return in;
}

/* Builds `in`; on success compares the PromQL (and the resource label when want_label is set). */
static enum cma_errc build(const struct cma_query_input *in, const char *want,
                           const char *want_label, struct cma_err *err)
{
    struct cma_buf q, label;
    cma_buf_init(&q, 0);
    cma_buf_init(&label, 0);
    cma_err_clear(err);
    enum cma_errc rc = cma_query_build(in, &q, &label, err);
    if (rc == CMA_OK && want)
        assert_string_equal(cma_buf_str(&q), want);
    if (rc == CMA_OK && want_label)
        assert_string_equal(cma_buf_str(&label), want_label);
    cma_buf_done(&q);
    cma_buf_done(&label);
    return rc;
}

static void test_cma_query_build__matcher_order_and_group_by(void **state)
{
    struct fixture *fx = *state;
    struct cma_template *t = parse("avg(<<.Series>>{<<.LabelMatchers>>}) by (<<.GroupBy>>)");
    static const char *const names[] = {"bert-0", "bert-1"};
    struct cma_query_input in = pods_input(fx, t, "ml", names, 2);
    struct cma_selector *sel = selector("zone=b,app in (y,x),!gone,tier!=batch");
    in.metric_selector = sel;
    struct cma_err err;
    /* selector requirements sorted by key, then namespace, then the objects (=~ for two) */
    assert_int_equal(build(&in,
                           "avg(gpu_util{app=~\"x|y\",gone=\"\",tier!=\"batch\",zone=\"b\","
                           "namespace=\"ml\",pod=~\"bert-0|bert-1\"}) by (pod)",
                           "pod", &err),
                     CMA_OK);
    /* one name: =, no selector, no namespace (a cluster-wide pods request) */
    in.metric_selector = NULL;
    in.namespace_ = NULL;
    in.n_names = 1;
    assert_int_equal(build(&in, "avg(gpu_util{pod=\"bert-0\"}) by (pod)", "pod", &err), CMA_OK);
    in.namespace_ = ""; /* "" is no namespace too */
    assert_int_equal(build(&in, "avg(gpu_util{pod=\"bert-0\"}) by (pod)", "pod", &err), CMA_OK);
    cma_selector_free(sel);
    cma_template_free(t);
}

static void test_cma_query_build__values_by_name_and_group_by_slice(void **state)
{
    struct fixture *fx = *state;
    struct cma_template *t =
        parse("<<index .LabelValuesByName \"pod\">>;<<index .LabelValuesByName \"namespace\">>;"
              "<<index .LabelValuesByName \"gpu\">>;<<range .GroupBySlice>><<.>>,<<end>>;"
              "<<.GroupBy>>");
    static const char *const names[] = {"bert-0", "bert-1", "bert-2"};
    static const char *const extra[] = {"container", "gpu"};
    struct cma_query_input in = pods_input(fx, t, "ml", names, 3);
    in.extra_group_by = extra;
    in.n_extra_group_by = 2;
    struct cma_selector *sel = selector("gpu in (1,0)");
    in.metric_selector = sel;
    struct cma_err err;
    assert_int_equal(
        build(&in, "bert-0|bert-1|bert-2;ml;0|1;pod,container,gpu,;pod,container,gpu", "pod", &err),
        CMA_OK);
    cma_selector_free(sel);
    /* a selector on the namespace label: its matcher stays, the request's namespace value wins;
     * a missing key is "" (Go's index on a map[string]string) */
    sel = selector("namespace=other");
    in.metric_selector = sel;
    in.n_extra_group_by = 0;
    assert_int_equal(build(&in, "bert-0|bert-1|bert-2;ml;;pod,;pod", "pod", &err), CMA_OK);
    cma_template_free(t);
    t = parse("<<.LabelMatchers>>");
    in.tmpl = t;
    assert_int_equal(build(&in,
                           "namespace=\"other\",namespace=\"ml\",pod=~\"bert-0|bert-1|bert-2\"",
                           NULL, &err),
                     CMA_OK);
    cma_selector_free(sel);
    cma_template_free(t);
}

static void test_cma_query_build__go_quoting_and_regex_pass_through(void **state)
{
    struct fixture *fx = *state;
    struct cma_template *t = parse("<<.LabelMatchers>>");
    static const char *const one[] = {"we\"ird\\pod\n"};
    struct cma_query_input in = pods_input(fx, t, "n\"s", one, 1);
    struct cma_err err;
    assert_int_equal(build(&in, "namespace=\"n\\\"s\",pod=\"we\\\"ird\\\\pod\\n\"", NULL, &err),
                     CMA_OK);
    /* several names form a regex alternation: regex characters are passed through unescaped */
    static const char *const two[] = {"a.b", "c+"};
    in = pods_input(fx, t, "ml", two, 2);
    assert_int_equal(build(&in, "namespace=\"ml\",pod=~\"a.b|c+\"", NULL, &err), CMA_OK);
    cma_template_free(t);
}

static void test_cma_query_build__external_has_no_resource(void **state)
{
    struct fixture *fx = *state;
    struct cma_template *t =
        parse("sum(<<.Series>>{<<.LabelMatchers>>}) by (<<.GroupBy>>)[<<len .GroupBySlice>>]");
    struct cma_selector *sel = selector("app=my-gpu-app");
    struct cma_query_input in = {
        .tmpl = t,
        .resmap = fx->overrides,
        .mapper = fx->mapper,
        .series = "gpu_util",
        .namespace_ = "default",
        .metric_selector = sel,
    };
    struct cma_buf q, label;
    cma_buf_init(&q, 0);
    cma_buf_init(&label, 0);
    assert_int_equal(cma_buf_appends(&q, "kept:"), CMA_OK); /* the render is appended */
    struct cma_err err;
    cma_err_clear(&err);
    assert_int_equal(cma_query_build(&in, &q, &label, &err), CMA_OK);
    assert_string_equal(cma_buf_str(&q),
                        "kept:sum(gpu_util{app=\"my-gpu-app\",namespace=\"default\"}) by ()[0]");
    assert_int_equal(label.len, 0);
    /* namespaced: false (no namespace) and no selector: no matchers at all; NULL label buffer */
    cma_buf_clear(&q);
    in.namespace_ = NULL;
    in.metric_selector = NULL;
    assert_int_equal(cma_query_build(&in, &q, NULL, &err), CMA_OK);
    assert_string_equal(cma_buf_str(&q), "sum(gpu_util{}) by ()[0]");
    cma_buf_done(&q);
    cma_buf_done(&label);
    cma_selector_free(sel);
    cma_template_free(t);
}

/* A MetricRule's query (in.enforce): every selector restricted to the owner's namespace, the
 * enforced text appended after what the buffer held; one that does not parse is refused naming
 * the MetricRule, and nothing is appended. */
static void test_cma_query_build__metricrule_enforced(void **state)
{
    struct fixture *fx = *state;
    struct cma_template *t = parse("sum(<<.Series>>{<<.LabelMatchers>>}) by (<<.GroupBy>>) or "
                                   "on() label_replace(other{namespace=\"web\"}, \"namespace\", "
                                   "\"shop\", \"\", \"\")");
    const char *names[] = {"orders-0"};
    struct cma_query_input in = pods_input(fx, t, "shop", names, 1);
    const struct cma_rule_owner owner = {"shop", "queue", "namespace"};
    in.enforce = &owner;
    struct cma_buf q;
    cma_buf_init(&q, 0);
    assert_int_equal(cma_buf_appends(&q, "kept:"), CMA_OK);
    struct cma_err err;
    cma_err_clear(&err);
    assert_int_equal(cma_query_build(&in, &q, NULL, &err), CMA_OK);
    assert_string_equal(cma_buf_str(&q), ENFORCED_WANT);
    /* a render that is not PromQL: refused, naming the MetricRule; nothing appended */
    struct cma_template *bad = parse("sum(<<.Series>>{<<.LabelMatchers>>}");
    in.tmpl = bad;
    cma_buf_clear(&q);
    assert_int_equal(cma_buf_appends(&q, "kept:"), CMA_OK);
    cma_err_clear(&err);
    assert_int_equal(cma_query_build(&in, &q, NULL, &err), CMA_ERR_RULE);
    assert_string_equal(cma_buf_str(&q), "kept:");
    assert_non_null(strstr(err.msg, "MetricRule shop/queue: its query cannot be restricted to "
                                    "namespace shop, so it is not sent: 1:"));
    cma_buf_done(&q);
    cma_template_free(bad);
    cma_template_free(t);
}

static void test_cma_query_build__resources_template_labels(void **state)
{
    struct fixture *fx = *state;
    struct cma_template *t = parse("<<.Series>>{<<.LabelMatchers>>} by (<<.GroupBy>>)");
    static const char *const names[] = {"web"};
    struct cma_query_input in = pods_input(fx, t, "shop", names, 1);
    in.resmap = fx->templated;
    in.series = "kube_hits";
    in.resource = cma_restmapper_resource_for(fx->mapper, "", "services");
    assert_non_null(in.resource);
    struct cma_err err;
    assert_int_equal(build(&in,
                           "kube_hits{kube_namespace=\"shop\",kube_service=\"web\"} by "
                           "(kube_service)",
                           "kube_service", &err),
                     CMA_OK);
    /* a cluster-scoped resource: no namespace matcher */
    in.namespace_ = NULL;
    in.resource = cma_restmapper_resource_for(fx->mapper, "", "nodes");
    static const char *const node[] = {"gpu-node-1"};
    in.names = node;
    assert_int_equal(
        build(&in, "kube_hits{kube_node=\"gpu-node-1\"} by (kube_node)", "kube_node", &err),
        CMA_OK);
    cma_template_free(t);
}

static void test_cma_query_build__errors(void **state)
{
    struct fixture *fx = *state;
    struct cma_template *t = parse("<<.Series>>{<<.LabelMatchers>>}");
    static const char *const names[] = {"bert-0"};
    struct cma_query_input in = pods_input(fx, t, "ml", names, 1);
    struct cma_err err;
    /* gt/lt have no PromQL matcher */
    struct cma_selector *sel = selector("gpu>1");
    in.metric_selector = sel;
    assert_int_equal(build(&in, NULL, NULL, &err), CMA_ERR_BAD_SELECTOR);
    assert_non_null(strstr(err.msg, "operator not supported by prometheus"));
    cma_selector_free(sel);
    in.metric_selector = NULL;
    /* no label maps to the resource (the override mapping knows only namespace and pod) */
    in.resource = cma_restmapper_resource_for(fx->mapper, "", "nodes");
    assert_int_equal(build(&in, NULL, NULL, &err), CMA_ERR_RULE);
    assert_non_null(strstr(err.msg, "nodes"));
    cma_template_free(t);
    /* an empty render */
    t = parse("<<if false>>x<<end>>");
    in = pods_input(fx, t, "ml", names, 1);
    assert_int_equal(build(&in, NULL, NULL, &err), CMA_ERR_RULE);
    assert_string_equal(err.msg, "empty query produced by metrics query template");
    cma_template_free(t);
    /* a template that fails while executing */
    t = parse("<<index .Series 50>>");
    in.tmpl = t;
    assert_int_equal(build(&in, NULL, NULL, &err), CMA_ERR_TEMPLATE_EXEC);
    assert_int_equal(err.code, CMA_ERR_TEMPLATE_EXEC);
    cma_template_free(t);
}

static void test_cma_query_build__no_namespaces_resource(void **state)
{
    struct fixture *fx = *state;
    static const struct test_resource pods_only[] = {{"", "v1", "pods", "pod", "Pod", true}};
    struct cma_restmapper *m = test_mapper(pods_only, 1);
    assert_non_null(m);
    struct cma_template *t = parse("<<.LabelMatchers>>");
    static const char *const names[] = {"bert-0"};
    struct cma_query_input in = pods_input(fx, t, "ml", names, 1);
    in.mapper = m;
    in.resource = cma_restmapper_resource_for(m, "", "pods");
    struct cma_err err;
    assert_int_equal(build(&in, NULL, NULL, &err), CMA_ERR_RULE);
    assert_string_equal(err.msg, "the cluster's API discovery has no namespaces resource");
    /* without a namespace the same mapper serves */
    in.namespace_ = NULL;
    assert_int_equal(build(&in, "pod=\"bert-0\"", "pod", &err), CMA_OK);
    cma_template_free(t);
    cma_restmapper_unref(m);
}

/* Renders in->tmpl held to max bytes after `prefix` (already in the buffer); compares the PromQL
 * and whether it took the wide form. */
static void bounded(const struct cma_query_input *in, size_t max, const char *prefix,
                    const char *want, bool want_wide)
{
    struct cma_buf q, label;
    cma_buf_init(&q, 0);
    cma_buf_init(&label, 0);
    struct cma_err err;
    cma_err_clear(&err);
    assert_int_equal(cma_buf_appends(&q, prefix), CMA_OK);
    bool wide = !want_wide;
    assert_int_equal(cma_query_build_bounded(in, max, &q, &label, &wide, &err), CMA_OK);
    assert_string_equal(cma_buf_str(&q), want);
    assert_string_equal(cma_buf_str(&label), "pod");
    assert_int_equal(wide, want_wide);
    cma_buf_done(&q);
    cma_buf_done(&label);
}

/* Past the backend's limit the names go (the resource label only has to be set, =~".+", in
 * .LabelMatchers and .LabelValuesByName); at the limit, with one name, or with no limit, the
 * query is exactly cma_query_build's; only what the call appends is measured. */
static void test_cma_query_build_bounded__wide_past_the_limit(void **state)
{
    struct fixture *fx = *state;
    struct cma_template *t = parse("sum(<<.Series>>{<<.LabelMatchers>>}) by (<<.GroupBy>>)");
    enum { N = 200 };
    static char bufs[N][16];
    const char *names[N];
    for (int i = 0; i < N; i++) {
        snprintf(bufs[i], sizeof(bufs[i]), "pod-%04d", i);
        names[i] = bufs[i];
    }
    struct cma_query_input in = pods_input(fx, t, "ml", names, N);
    struct cma_buf named;
    cma_buf_init(&named, 0);
    struct cma_err err;
    assert_int_equal(cma_query_build(&in, &named, NULL, &err), CMA_OK);
    size_t len = named.len; /* 200 names of 8 bytes, '|' between them, and the rest */
    assert_true(len > N * 9);
    const char *wide = "sum(gpu_util{namespace=\"ml\",pod=~\".+\"}) by (pod)";
    bounded(&in, 0, "", cma_buf_str(&named), false);
    bounded(&in, len, "", cma_buf_str(&named), false);
    bounded(&in, len - 1, "", wide, true);
    bounded(&in, 1000, "max by (pod) (",
            "max by (pod) (sum(gpu_util{namespace=\"ml\",pod=~\".+\"}) "
            "by (pod)",
            true);
    /* a prefix does not count against the limit: only what the call appends */
    struct cma_buf with_prefix;
    cma_buf_init(&with_prefix, 0);
    assert_int_equal(cma_buf_appends(&with_prefix, "max by (pod) ("), CMA_OK);
    assert_int_equal(cma_buf_append(&with_prefix, named.ptr, named.len), CMA_OK);
    bounded(&in, len, "max by (pod) (", cma_buf_str(&with_prefix), false);
    /* one name is never dropped (nothing to gain): the backend refuses it if it is too long */
    in.n_names = 1;
    bounded(&in, 10, "", "sum(gpu_util{namespace=\"ml\",pod=\"pod-0000\"}) by (pod)", false);
    /* LabelValuesByName follows, and the age template renders the same way */
    in.n_names = N;
    struct cma_template *byname =
        parse("x{pod=~\"<<index .LabelValuesByName \"pod\">>\",namespace=\"<<index "
              ".LabelValuesByName \"namespace\">>\"}");
    in.tmpl = byname;
    bounded(&in, 100, "", "x{pod=~\".+\",namespace=\"ml\"}", true);
    struct cma_template *age = parse(CMA_RULE_AGE_QUERY);
    in.tmpl = age;
    bounded(&in, 100, "", "timestamp(gpu_util{namespace=\"ml\",pod=~\".+\"})", true);
    cma_template_free(age);
    cma_template_free(byname);
    cma_buf_done(&with_prefix);
    cma_buf_done(&named);
    cma_template_free(t);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cma_query_build__matcher_order_and_group_by),
        cmocka_unit_test(test_cma_query_build__values_by_name_and_group_by_slice),
        cmocka_unit_test(test_cma_query_build__go_quoting_and_regex_pass_through),
        cmocka_unit_test(test_cma_query_build__external_has_no_resource),
        cmocka_unit_test(test_cma_query_build__resources_template_labels),
        cmocka_unit_test(test_cma_query_build__metricrule_enforced),
        cmocka_unit_test(test_cma_query_build__errors),
        cmocka_unit_test(test_cma_query_build__no_namespaces_resource),
        cmocka_unit_test(test_cma_query_build_bounded__wide_past_the_limit),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
