/* rule_test.c: rule compilation (naming, resource mapping, load-time errors and warnings, what
 * prometheus-adapter loads but cannot serve) and every tests/config-errors case, loaded and
 * compiled exactly as main does, compared word for word with its expect.error (or, for a config
 * that loads, its first warning with expect.warning); the rule → backend mapping (`backend:`). */
#include <dirent.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "cma/backend.h"
#include "cma/config.h"
#include "cma/restmapper.h"
#include "cma/rule.h"
#include "testlib.h"

static struct cma_ruleset *compile(const char *yaml, struct cma_config **ret_cfg,
                                   struct cma_err *err)
{
    struct cma_ruleset *rs = NULL;
    cma_err_clear(err);
    if (cma_config_load_string("t.yaml", yaml, strlen(yaml), ret_cfg, err) != CMA_OK)
        return NULL;
    if (cma_ruleset_compile(*ret_cfg, &rs, err) != CMA_OK) {
        cma_config_free(*ret_cfg);
        *ret_cfg = NULL;
        return NULL;
    }
    return rs;
}

static char *metric_name(const struct cma_rule *r, const char *series)
{
    struct cma_buf b;
    cma_buf_init(&b, 0);
    if (!cma_naming_accepts(r->naming, series, strlen(series)))
        return NULL;
    if (cma_naming_metric_name(r->naming, series, strlen(series), &b, NULL) != CMA_OK) {
        cma_buf_done(&b);
        return strdup("<error>");
    }
    return cma_buf_take(&b);
}

static void test_cma_naming__filters_and_names(void **state)
{
    (void)state;
    struct cma_config *cfg;
    struct cma_err err;
    struct cma_ruleset *rs = compile("rules:\n"
                                     "- seriesQuery: x\n"
                                     "  seriesFilters: [{isNot: _seconds_total}]\n"
                                     "  name: {matches: ^(.*)_total$, as: '${1}_per_second'}\n"
                                     "- seriesQuery: x\n"
                                     "  name: {matches: _total}\n"
                                     "- seriesQuery: x\n"
                                     "  name: {matches: '^(.*)_MEM_USED', as: "
                                     "'${1}_GPU_MEM_USED_RATIO'}\n"
                                     "- seriesQuery: x\n"
                                     "  name: {as: constant_name}\n",
                                     &cfg, &err);
    if (!rs)
        fail_msg("%s", err.msg);
    char *n = metric_name(&rs->rules[0], "http_requests_total");
    assert_string_equal(n, "http_requests_per_second");
    free(n);
    assert_null(metric_name(&rs->rules[0], "cpu_seconds_total")); /* filtered out */
    assert_null(metric_name(&rs->rules[0], "up"));                /* matches does not match */
    n = metric_name(&rs->rules[1], "http_requests_total"); /* unanchored, $0: only the match */
    assert_string_equal(n, "_total");
    free(n);
    n = metric_name(&rs->rules[2], "DCGM_CUSTOM_PROCESS_MEM_USED");
    assert_string_equal(n, "DCGM_CUSTOM_PROCESS_GPU_MEM_USED_RATIO");
    free(n);
    n = metric_name(&rs->rules[3], "anything");
    assert_string_equal(n, "constant_name");
    free(n);
    assert_true(cma_naming_is_constant(rs->rules[3].naming));
    assert_false(cma_naming_is_constant(rs->rules[0].naming));
    /* no metricsQuery and no resources in these rules: two warnings each, with positions */
    assert_int_equal(rs->n_warnings, 8);
    assert_string_equal(rs->warnings[0], "t.yaml:2:3: rules[0]: metricsQuery is empty: every "
                                         "request for its metrics fails");
    assert_string_equal(rs->warnings[1], "t.yaml:2:3: rules[0]: resources has neither overrides "
                                         "nor a template: no label names a Kubernetes object, so "
                                         "the rule serves no metric");
    struct cma_err why;
    cma_err_clear(&why);
    assert_int_equal(cma_rule_servable(&rs->rules[0], &why), CMA_ERR_RULE);
    assert_string_equal(why.msg, "the rule of this metric cannot be served: t.yaml:2:3: rules[0]: "
                                 "metricsQuery is empty: every request for its metrics fails");
    cma_ruleset_free(rs);
    cma_config_free(cfg);
}

static void test_cma_ruleset_compile__dollar_trap_warns(void **state)
{
    (void)state;
    struct cma_config *cfg;
    struct cma_err err;
    struct cma_ruleset *rs = compile("rules:\n"
                                     "- seriesQuery: x\n"
                                     "  name: {matches: ^(.*)_total$, as: $1_per_second}\n"
                                     "  metricsQuery: q\n"
                                     "  resources: {template: <<.Resource>>}\n",
                                     &cfg, &err);
    if (!rs)
        fail_msg("%s", err.msg);
    assert_int_equal(rs->n_warnings, 1);
    assert_non_null(strstr(rs->warnings[0], "t.yaml:3:"));
    assert_non_null(strstr(rs->warnings[0], "${1}_"));
    /* Go's Expand: the group named "1_per_second" does not exist → "" → not a path segment */
    struct cma_buf b;
    cma_buf_init(&b, 0);
    assert_int_equal(cma_naming_metric_name(rs->rules[0].naming, "a_total", 7, &b, NULL),
                     CMA_ERR_RULE);
    cma_buf_done(&b);
    cma_ruleset_free(rs);
    cma_config_free(cfg);
}

static void test_cma_ruleset_compile__errors_with_positions(void **state)
{
    (void)state;
    struct {
        const char *yaml;
        const char *want;
    } cases[] = {
        {"rules:\n- seriesQuery: x\n  name: {matches: '(a)(b)'}\n",
         "t.yaml:3:19: must specify an 'as' value for name matcher \"(a)(b)\" (it has 2 capture "
         "groups)"},
        {"rules:\n- seriesQuery: x\n  metricsQuery: sum(<<.Series\n",
         NULL /* position inside the template */},
        {"rules:\n- seriesQuery: x\n  resources: {template: kube_<<.Group>>}\n",
         "t.yaml:3:25: resources.template must include at least `<<.Resource>>` (got "
         "\"kube_<<.Group>>\")"},
        {"rules:\n- seriesQuery: x\n  metricsQuery: <<call>>\n  seriesFilters: [~]\n",
         "t.yaml:4:19: must have either an `is` or `isNot` expression in a filter"},
        {"rules:\n- seriesQuery: x\n  metricsQuery: <<.Series>><<end>>\n", NULL},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        struct cma_config *cfg = NULL;
        struct cma_err err;
        struct cma_ruleset *rs = compile(cases[i].yaml, &cfg, &err);
        if (rs)
            fail_msg("case %zu compiled", i);
        char got[700];
        cma_err_format_pos(&err, got, sizeof(got));
        if (cases[i].want)
            assert_string_equal(got, cases[i].want);
        else
            assert_non_null(strstr(got, "t.yaml:"));
    }
}

static void test_cma_resmap__overrides_and_template(void **state)
{
    (void)state;
    struct cma_config *cfg;
    struct cma_err err;
    struct cma_ruleset *rs =
        compile("rules:\n"
                "- seriesQuery: x\n"
                "  resources: {overrides: {NodeName: {resource: node}, PodName: {resource: pod}}}\n"
                "- seriesQuery: x\n"
                "  resources: {template: 'kube_<<.Group>>_<<.Resource>>'}\n",
                &cfg, &err);
    if (!rs)
        fail_msg("%s", err.msg);
    struct cma_restmapper *m = test_mapper(
        test_resources_default, sizeof(test_resources_default) / sizeof(test_resources_default[0]));
    const struct cma_resmap *ov = rs->rules[0].resmap, *tm = rs->rules[1].resmap;
    const struct cma_api_resource *node = cma_restmapper_resource_for(m, "", "nodes");
    const struct cma_api_resource *pod = cma_restmapper_resource_for(m, "", "pods");
    assert_ptr_equal(cma_resmap_resource_for_label(ov, m, "NodeName", 8), node);
    assert_ptr_equal(cma_resmap_resource_for_label(ov, m, "PodName", 7), pod);
    assert_null(cma_resmap_resource_for_label(ov, m, "gpu", 3));
    struct cma_buf b;
    cma_buf_init(&b, 0);
    assert_int_equal(cma_resmap_label_for_resource(ov, m, node, &b, NULL), CMA_OK);
    assert_string_equal(cma_buf_str(&b), "NodeName");
    cma_buf_clear(&b);
    /* template: core group renders empty (kube__pod), dotted groups map back */
    assert_int_equal(cma_resmap_label_for_resource(tm, m, pod, &b, NULL), CMA_OK);
    assert_string_equal(cma_buf_str(&b), "kube__pod");
    assert_ptr_equal(cma_resmap_resource_for_label(tm, m, "kube__pod", 9), pod);
    const struct cma_api_resource *ing =
        cma_restmapper_resource_for(m, "networking.k8s.io", "ingresses");
    cma_buf_clear(&b);
    assert_int_equal(cma_resmap_label_for_resource(tm, m, ing, &b, NULL), CMA_OK);
    assert_string_equal(cma_buf_str(&b), "kube_networking_k8s_io_ingress");
    assert_ptr_equal(cma_resmap_resource_for_label(tm, m, cma_buf_str(&b), b.len), ing);
    assert_null(cma_resmap_resource_for_label(tm, m, "kube__container", 15));
    /* no override or template names namespaces: a clear error */
    const struct cma_api_resource *ns = cma_restmapper_resource_for(m, "", "namespaces");
    struct cma_err e2;
    cma_err_clear(&e2);
    assert_int_equal(cma_resmap_label_for_resource(ov, m, ns, &b, &e2), CMA_ERR_RULE);
    assert_non_null(strstr(e2.msg, "namespaces"));
    cma_buf_done(&b);
    cma_restmapper_unref(m);
    cma_ruleset_free(rs);
    cma_config_free(cfg);
}

static void test_cma_restmapper__priority_and_forms(void **state)
{
    (void)state;
    struct cma_restmapper *m = test_mapper(
        test_resources_default, sizeof(test_resources_default) / sizeof(test_resources_default[0]));
    const struct cma_api_resource *r = cma_restmapper_resource_for(m, "", "Ingress");
    assert_string_equal(r->group, "extensions"); /* first group in discovery order */
    r = cma_restmapper_parse_for(m, "ingresses.networking.k8s.io");
    assert_string_equal(r->group, "networking.k8s.io");
    r = cma_restmapper_resource_for(m, "", "POD");
    assert_string_equal(r->resource, "pods");
    assert_null(cma_restmapper_resource_for(m, "", "widgets"));
    char buf[64];
    cma_restmapper_api_version(r, buf, sizeof(buf));
    assert_string_equal(buf, "v1");
    cma_restmapper_unref(m);
}

/* What prometheus-adapter loads and fails per request (or never lists) loads here with a
 * warning each; only the rules that would be requested carry a problem. */
static void test_cma_ruleset_compile__upstream_loads_with_warnings(void **state)
{
    (void)state;
    struct cma_config *cfg;
    struct cma_err err;
    struct cma_ruleset *rs =
        compile("rules:\n"
                "- {}\n"
                "- seriesQuery: a\n"
                "  resources: {template: <<.Resource>>}\n"
                "  metricsQuery: <<define \"x\">>q<<end>><<template \"x\">>\n"
                "- seriesQuery: b\n"
                "  resources: {template: <<.Resource>>}\n"
                "  metricsQuery: <<call .Series>>\n"
                "externalRules:\n"
                "- seriesQuery: queue_consumer_lag\n"
                "  metricsQuery: sum(<<.Series>>) by (name)\n"
                "- seriesQuery: queue_depth\n"
                "  metricsQuery: sum(<<.Series>>) by (name)\n"
                "  resources: {namespaced: false}\n"
                "resourceRules:\n"
                "  memory: {containerQuery: q, nodeQuery: q, containerLabel: c}\n"
                "---\n"
                "rules: []\n",
                &cfg, &err);
    if (!rs)
        fail_msg("%s", err.msg);
    const char *want[] = {
        "t.yaml:17:1: a second YAML document starts here and is ignored: prometheus-adapter "
        "(yaml.v2) reads only the first one; put every rule in one document",
        "t.yaml:2:3: rules[0]: seriesQuery is empty: the rule is left out of discovery "
        "(prometheus-adapter sends the empty query and every relist fails)",
        "t.yaml:5:19: rules[1]: metricsQuery: {{define}} is not supported: a template cannot "
        "define others; prometheus-adapter (Go's text/template) loads it, this adapter cannot "
        "render it: requests for its metrics fail",
        "t.yaml:8:19: rules[2]: metricsQuery: function \"call\" is not supported: there are no "
        "function values; prometheus-adapter (Go's text/template) loads it, this adapter cannot "
        "render it: requests for its metrics fail",
        "t.yaml:10:3: externalRules[0]: resources.namespaced is true (the default) but no "
        "override or template names the namespace label, so requests for its metrics fail; add "
        "`resources: {overrides: {namespace: {resource: namespace}}}` or set "
        "`resources.namespaced: false`",
        "t.yaml:16:3: resourceRules.cpu.containerQuery is empty: pod metrics requests fail",
        "t.yaml:16:3: resourceRules.cpu.nodeQuery is empty: node metrics requests fail",
        "t.yaml:16:3: resourceRules.cpu.containerLabel is empty: pod metrics requests fail",
    };
    assert_int_equal(rs->n_warnings, sizeof(want) / sizeof(want[0]));
    for (size_t i = 0; i < rs->n_warnings; i++)
        assert_string_equal(rs->warnings[i], want[i]);
    assert_string_equal(rs->rules[0].series_query, ""); /* left out of discovery */
    assert_null(rs->rules[0].problem);
    assert_non_null(rs->rules[1].metrics_query); /* a stand-in, never rendered */
    struct cma_err why;
    cma_err_clear(&why);
    assert_int_equal(cma_rule_servable(&rs->rules[2], &why), CMA_ERR_RULE);
    assert_non_null(strstr(why.msg, "t.yaml:8:19: rules[2]: metricsQuery: function \"call\""));
    cma_err_clear(&why);
    assert_int_equal(cma_rule_servable(&rs->external_rules[0], &why), CMA_ERR_RULE);
    assert_int_equal(why.code, CMA_ERR_RULE);
    assert_true(strncmp(why.msg,
                        "the rule of this metric cannot be served: t.yaml:10:3: "
                        "externalRules[0]: resources.namespaced is true",
                        97) == 0);
    assert_int_equal(cma_rule_servable(&rs->external_rules[1], NULL), CMA_OK);
    cma_ruleset_free(rs);
    cma_config_free(cfg);
}

static char *read_text(const char *path)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return NULL;
    static char buf[4096];
    size_t n = fread(buf, 1, sizeof(buf) - 1, f);
    fclose(f);
    while (n && (buf[n - 1] == '\n' || buf[n - 1] == '\r'))
        n--;
    buf[n] = '\0';
    return strdup(buf);
}

static void test_config_errors__every_case(void **state)
{
    (void)state;
    const char *src = getenv("CMA_SOURCE_DIR");
    assert_non_null(src);
    char dir[4096], cwd[4096];
    snprintf(dir, sizeof(dir), "%s/tests/config-errors", src);
    assert_non_null(getcwd(cwd, sizeof(cwd)));
    assert_int_equal(chdir(dir), 0);
    DIR *d = opendir(".");
    assert_non_null(d);
    size_t n_cases = 0;
    struct dirent *e;
    char failures[8192] = "";
    while ((e = readdir(d)) != NULL) {
        char path[600], expect_path[600];
        struct stat st;
        snprintf(path, sizeof(path), "%s/config.yaml", e->d_name);
        if (e->d_name[0] == '.' || stat(path, &st) != 0)
            continue;
        snprintf(expect_path, sizeof(expect_path), "%s/expect.error", e->d_name);
        bool warning_case = access(expect_path, F_OK) != 0;
        if (warning_case) /* loads; its first warning is the line */
            snprintf(expect_path, sizeof(expect_path), "%s/expect.warning", e->d_name);
        char *want = read_text(expect_path);
        struct cma_err err;
        cma_err_clear(&err);
        struct cma_config *cfg = NULL;
        struct cma_ruleset *rs = NULL;
        if (cma_config_load_file(path, &cfg, &err) == CMA_OK)
            cma_ruleset_compile(cfg, &rs, &err);
        char got[700] = "(no error)";
        if (err.code != CMA_OK)
            cma_err_format_pos(&err, got, sizeof(got));
        else if (warning_case)
            snprintf(got, sizeof(got), "%s", rs->n_warnings ? rs->warnings[0] : "(no warning)");
        if (!want || strcmp(got, want) != 0) {
            size_t used = strlen(failures);
            snprintf(failures + used, sizeof(failures) - used, "\n%s:\n  want: %s\n  got:  %s",
                     e->d_name, want ? want : "(no expect.error)", got);
        }
        free(want);
        cma_ruleset_free(rs);
        cma_config_free(cfg);
        n_cases++;
    }
    closedir(d);
    assert_int_equal(chdir(cwd), 0);
    if (failures[0])
        fail_msg("config-errors cases differ:%s", failures);
    assert_true(n_cases >= 20);
}

/* The rule → backend mapping: each rule (and resourceRules) goes to the backend it names, by
 * name, whatever the order of main's table; no `backend:` is the flags' backend (index 0); a
 * name missing from the table (a reload that adds a backend) is refused with the rule's
 * position. */
static void test_cma_ruleset_bind_backends__by_name(void **state)
{
    (void)state;
    static const char yaml[] =
        "backends:\n"
        "- {name: gpu, url: 'http://gpu:9090'}\n"
        "- {name: apps, url: 'http://apps:9090'}\n"
        "rules:\n"
        "- {seriesQuery: a, metricsQuery: x, resources: {template: <<.Resource>>}}\n"
        "- {seriesQuery: b, metricsQuery: x, resources: {template: <<.Resource>>}, backend: apps}\n"
        "externalRules:\n"
        "- {seriesQuery: c, metricsQuery: x, backend: gpu, resources: {namespaced: false}}\n"
        "resourceRules: {backend: gpu, cpu: {}, memory: {}}\n";
    struct cma_config *cfg = NULL;
    struct cma_err err;
    struct cma_ruleset *rs = compile(yaml, &cfg, &err);
    assert_non_null(rs);
    assert_null(rs->rules[0].backend.name);
    assert_string_equal(rs->rules[1].backend.name, "apps");
    assert_null(rs->rules[0].backend.queries); /* unbound until main binds */
    /* the table in another order than the config's backends: binding is by name */
    const char *names[] = {NULL, "apps", "gpu"};
    struct cma_backend table[3] = {0};
    const size_t limits[3] = {16384, 300, 0}; /* each backend's query-length limit */
    assert_int_equal(cma_ruleset_bind_backends(rs, names, table, limits, 3, &err), CMA_OK);
    assert_int_equal(rs->rules[0].backend.index, 0);
    assert_int_equal(rs->rules[0].backend.max_query_bytes, 16384);
    assert_int_equal(rs->rules[1].backend.max_query_bytes, 300);
    assert_int_equal(rs->external_rules[0].backend.max_query_bytes, 0);
    assert_int_equal(rs->resource_backend.max_query_bytes, 0);
    assert_ptr_equal(rs->rules[0].backend.queries, &table[0]);
    assert_int_equal(rs->rules[1].backend.index, 1);
    assert_ptr_equal(rs->rules[1].backend.queries, &table[1]);
    assert_int_equal(rs->external_rules[0].backend.index, 2);
    assert_ptr_equal(rs->external_rules[0].backend.queries, &table[2]);
    assert_int_equal(rs->resource_backend.index, 2);
    assert_ptr_equal(rs->resource_backend.queries, &table[2]);
    /* a table without "apps": refused at the rule naming it */
    const char *fewer[] = {NULL, "gpu"};
    cma_err_clear(&err);
    assert_int_equal(cma_ruleset_bind_backends(rs, fewer, table, NULL, 2, &err),
                     CMA_ERR_CONFIG_VALUE);
    char out[512];
    cma_err_format_pos(&err, out, sizeof(out));
    assert_string_equal(out, "t.yaml:6:84: backend \"apps\" is not one of the backends this "
                             "process started with: backends are created at start-up, restart "
                             "to add one");
    cma_ruleset_free(rs);
    cma_config_free(cfg);
}

/* maxSampleAge: carried in the compiled rule, with the age template only when it is set. */
static void test_cma_ruleset_compile__max_sample_age(void **state)
{
    (void)state;
    static const char yaml[] =
        "rules:\n"
        "- {seriesQuery: a, metricsQuery: x, resources: {template: <<.Resource>>}, "
        "maxSampleAge: 1m30s}\n"
        "- {seriesQuery: b, metricsQuery: x, resources: {template: <<.Resource>>}}\n"
        "externalRules:\n"
        "- {seriesQuery: c, metricsQuery: x, resources: {namespaced: false}, maxSampleAge: "
        "500ms}\n";
    struct cma_config *cfg = NULL;
    struct cma_err err;
    struct cma_ruleset *rs = compile(yaml, &cfg, &err);
    assert_non_null(rs);
    assert_int_equal(rs->rules[0].max_sample_age_ms, 90000);
    assert_non_null(rs->rules[0].age_query);
    assert_int_equal(rs->rules[1].max_sample_age_ms, 0);
    assert_null(rs->rules[1].age_query);
    assert_int_equal(rs->external_rules[0].max_sample_age_ms, 500);
    assert_non_null(rs->external_rules[0].age_query);
    cma_ruleset_free(rs);
    cma_config_free(cfg);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cma_naming__filters_and_names),
        cmocka_unit_test(test_cma_ruleset_compile__dollar_trap_warns),
        cmocka_unit_test(test_cma_ruleset_compile__errors_with_positions),
        cmocka_unit_test(test_cma_resmap__overrides_and_template),
        cmocka_unit_test(test_cma_restmapper__priority_and_forms),
        cmocka_unit_test(test_cma_ruleset_compile__upstream_loads_with_warnings),
        cmocka_unit_test(test_config_errors__every_case),
        cmocka_unit_test(test_cma_ruleset_bind_backends__by_name),
        cmocka_unit_test(test_cma_ruleset_compile__max_sample_age),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
