/* rule_test.c: rule compilation (naming, resource mapping, load-time errors and warnings) and
 * every tests/config-errors case, loaded and compiled exactly as main does, compared word for
 * word with its expect.error. */
#include <dirent.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

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
    /* no metricsQuery in these rules: one warning each, with its position */
    assert_int_equal(rs->n_warnings, 4);
    assert_non_null(strstr(rs->warnings[0], "t.yaml:2:3: rules: metricsQuery is empty"));
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
                                     "  metricsQuery: q\n",
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
        {"rules:\n- metricsQuery: x\n", "t.yaml:2:3: rules[0]: seriesQuery is required"},
        {"externalRules:\n- seriesQuery: x\n  metricsQuery: q\n", NULL},
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
    assert_true(n_cases >= 13);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cma_naming__filters_and_names),
        cmocka_unit_test(test_cma_ruleset_compile__dollar_trap_warns),
        cmocka_unit_test(test_cma_ruleset_compile__errors_with_positions),
        cmocka_unit_test(test_cma_resmap__overrides_and_template),
        cmocka_unit_test(test_cma_restmapper__priority_and_forms),
        cmocka_unit_test(test_config_errors__every_case),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
