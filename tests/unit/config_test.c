/* config_test.c: unit tests for the config loader: the Helm default rules, seed 001's GPU rules,
 * resource rules, external rules, yaml.v2 compatibility (scalars as strings, null items, only the
 * first document), positions,
 * every shape error with its exact position, and the tests/config-errors cases verbatim; and
 * several files (cma_config_load_paths): merge order, directories, positions per file, and the
 * conflicts (resourceRules twice, the same metric from two files, the same file twice); and
 * backends: (this project's extension): every setting, relative paths, references across files
 * and every load error with its position. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "cma/config.h"

static struct cma_config *load_ok(const char *text)
{
    struct cma_err err;
    cma_err_clear(&err);
    struct cma_config *cfg = NULL;
    if (cma_config_load_string("cfg.yaml", text, strlen(text), &cfg, &err)) {
        char out[700];
        cma_err_format_pos(&err, out, sizeof(out));
        fail_msg("unexpected error: %s", out);
    }
    assert_non_null(cfg);
    assert_string_equal(cfg->file, "cfg.yaml");
    return cfg;
}

/* Loads text that must fail with `code` and the formatted error `want`. */
static void load_fails(const char *text, enum cma_errc code, const char *want)
{
    struct cma_err err;
    cma_err_clear(&err);
    struct cma_config *sentinel = (struct cma_config *)&err;
    struct cma_config *cfg = sentinel;
    enum cma_errc rc = cma_config_load_string("cfg.yaml", text, strlen(text), &cfg, &err);
    char out[700];
    cma_err_format_pos(&err, out, sizeof(out));
    if (rc != code)
        fail_msg("code %d, want %d (%s) for:\n%s", rc, code, out, text);
    assert_ptr_equal(cfg, sentinel);
    assert_string_equal(out, want);
}

static void assert_str(const struct cma_config_str *s, const char *want)
{
    if (!want) {
        assert_false(s->set);
        assert_null(s->s);
        return;
    }
    assert_true(s->set);
    assert_non_null(s->s);
    assert_string_equal(s->s, want);
}

/* ---- samples -------------------------------------------------------------------------------- */

/* prometheus-community/prometheus-adapter chart, rules.default: true (reference 8.1/8.2). */
static const char helm_default[] =
    "rules:\n"
    "- seriesQuery: '{__name__=~\"^container_.*\",container!=\"POD\",namespace!=\"\",pod!=\"\"}'\n"
    "  seriesFilters: []\n"
    "  resources:\n"
    "    overrides:\n"
    "      namespace:\n"
    "        resource: namespace\n"
    "      pod:\n"
    "        resource: pod\n"
    "  name:\n"
    "    matches: ^container_(.*)_seconds_total$\n"
    "    as: \"\"\n"
    "  metricsQuery: sum(rate(<<.Series>>{<<.LabelMatchers>>,container!=\"POD\"}[5m])) by "
    "(<<.GroupBy>>)\n"
    "- seriesQuery: '{__name__=~\"^container_.*\",container!=\"POD\",namespace!=\"\",pod!=\"\"}'\n"
    "  seriesFilters:\n"
    "  - isNot: ^container_.*_seconds_total$\n"
    "  resources:\n"
    "    overrides:\n"
    "      namespace:\n"
    "        resource: namespace\n"
    "      pod:\n"
    "        resource: pod\n"
    "  name:\n"
    "    matches: ^container_(.*)_total$\n"
    "    as: \"\"\n"
    "  metricsQuery: sum(rate(<<.Series>>{<<.LabelMatchers>>,container!=\"POD\"}[5m])) by "
    "(<<.GroupBy>>)\n"
    "- seriesQuery: '{__name__=~\"^container_.*\",container!=\"POD\",namespace!=\"\",pod!=\"\"}'\n"
    "  seriesFilters:\n"
    "  - isNot: ^container_.*_total$\n"
    "  resources:\n"
    "    overrides:\n"
    "      namespace:\n"
    "        resource: namespace\n"
    "      pod:\n"
    "        resource: pod\n"
    "  name:\n"
    "    matches: ^container_(.*)$\n"
    "    as: \"\"\n"
    "  metricsQuery: sum(<<.Series>>{<<.LabelMatchers>>,container!=\"POD\"}) by (<<.GroupBy>>)\n"
    "- seriesQuery: '{namespace!=\"\",__name__!~\"^container_.*\"}'\n"
    "  seriesFilters:\n"
    "  - isNot: .*_total$\n"
    "  resources:\n"
    "    template: <<.Resource>>\n"
    "  name:\n"
    "    matches: \"\"\n"
    "    as: \"\"\n"
    "  metricsQuery: sum(<<.Series>>{<<.LabelMatchers>>}) by (<<.GroupBy>>)\n"
    "- seriesQuery: '{namespace!=\"\",__name__!~\"^container_.*\"}'\n"
    "  seriesFilters:\n"
    "  - isNot: .*_seconds_total\n"
    "  resources:\n"
    "    template: <<.Resource>>\n"
    "  name:\n"
    "    matches: ^(.*)_total$\n"
    "    as: \"\"\n"
    "  metricsQuery: sum(rate(<<.Series>>{<<.LabelMatchers>>}[5m])) by (<<.GroupBy>>)\n"
    "- seriesQuery: '{namespace!=\"\",__name__!~\"^container_.*\"}'\n"
    "  seriesFilters: []\n"
    "  resources:\n"
    "    template: <<.Resource>>\n"
    "  name:\n"
    "    matches: ^(.*)_seconds_total$\n"
    "    as: \"\"\n"
    "  metricsQuery: sum(rate(<<.Series>>{<<.LabelMatchers>>}[5m])) by (<<.GroupBy>>)\n";

/* Seed 001 (Alibaba Cloud ACK GPU walkthrough), the "Add adapter rules" block verbatim, as the
 * chart places it under rules. */
static const char seed001[] =
    "rules:\n"
    "- metricsQuery: avg(<<.Series>>{<<.LabelMatchers>>}) by (<<.GroupBy>>)\n"
    "  resources:\n"
    "    overrides:\n"
    "      NodeName:\n"
    "        resource: node\n"
    "  seriesQuery: DCGM_FI_DEV_GPU_UTIL{} # GPU utilization\n"
    "- metricsQuery: avg(<<.Series>>{<<.LabelMatchers>>}) by (<<.GroupBy>>)\n"
    "  resources:\n"
    "    overrides:\n"
    "      NamespaceName:\n"
    "        resource: namespace\n"
    "      NodeName:\n"
    "        resource: node\n"
    "      PodName:\n"
    "        resource: pod\n"
    "  seriesQuery: DCGM_CUSTOM_PROCESS_SM_UTIL{} # Container GPU utilization.\n"
    "- metricsQuery: sum(<<.Series>>{<<.LabelMatchers>>}) by (<<.GroupBy>>)\n"
    "  resources:\n"
    "    overrides:\n"
    "      NodeName:\n"
    "        resource: node\n"
    "  seriesQuery: DCGM_FI_DEV_FB_USED{} # GPU memory usage.\n"
    "- metricsQuery: sum(<<.Series>>{<<.LabelMatchers>>}) by (<<.GroupBy>>)\n"
    "  resources:\n"
    "    overrides:\n"
    "      NamespaceName:\n"
    "        resource: namespace\n"
    "      NodeName:\n"
    "        resource: node\n"
    "      PodName:\n"
    "        resource: pod\n"
    "  seriesQuery: DCGM_CUSTOM_PROCESS_MEM_USED{} # Container GPU memory usage.\n"
    "- metricsQuery: sum(<<.Series>>{<<.LabelMatchers>>}) by (<<.GroupBy>>) / "
    "sum(DCGM_CUSTOM_CONTAINER_MEM_ALLOCATED{}) by (<<.GroupBy>>)\n"
    "  name:\n"
    "    as: ${1}_GPU_MEM_USED_RATIO\n"
    "    matches: ^(.*)_MEM_USED\n"
    "  resources:\n"
    "    overrides:\n"
    "      NamespaceName:\n"
    "        resource: namespace\n"
    "      PodName:\n"
    "        resource: pod\n"
    "  seriesQuery: DCGM_CUSTOM_PROCESS_MEM_USED{NamespaceName!=\"\",PodName!=\"\"}  # Container "
    "GPU memory utilization.\n";

/* prometheus-adapter deploy/manifests/config-map.yaml (kube-prometheus, reference 8.3). */
static const char kube_prometheus_resource_rules[] =
    "\"resourceRules\":\n"
    "  \"cpu\":\n"
    "    \"containerQuery\": |\n"
    "      sum by (<<.GroupBy>>) (\n"
    "        irate (\n"
    "            "
    "container_cpu_usage_seconds_total{<<.LabelMatchers>>,container!=\"\",pod!=\"\"}[4m]\n"
    "        )\n"
    "      )\n"
    "    \"nodeQuery\": |\n"
    "      sum by (<<.GroupBy>>) (\n"
    "        irate(\n"
    "            node_cpu_usage_seconds_total{<<.LabelMatchers>>}[4m]\n"
    "        )\n"
    "      )\n"
    "    \"resources\":\n"
    "      \"overrides\":\n"
    "        \"namespace\":\n"
    "          \"resource\": \"namespace\"\n"
    "        \"node\":\n"
    "          \"resource\": \"node\"\n"
    "        \"pod\":\n"
    "          \"resource\": \"pod\"\n"
    "  \"memory\":\n"
    "    \"containerQuery\": |\n"
    "      sum by (<<.GroupBy>>) (\n"
    "        container_memory_working_set_bytes{<<.LabelMatchers>>,container!=\"\",pod!=\"\"}\n"
    "      )\n"
    "    \"nodeQuery\": |\n"
    "      sum by (<<.GroupBy>>) (\n"
    "        node_memory_working_set_bytes{<<.LabelMatchers>>}\n"
    "      )\n"
    "    \"resources\":\n"
    "      \"overrides\":\n"
    "        \"node\":\n"
    "          \"resource\": \"node\"\n"
    "        \"namespace\":\n"
    "          \"resource\": \"namespace\"\n"
    "        \"pod\":\n"
    "          \"resource\": \"pod\"\n"
    "    \"containerLabel\": \"container\"\n"
    "  \"window\": \"5m\"\n";

/* prometheus-adapter docs/sample-config.yaml, externalRules part. */
static const char external_rules[] =
    "externalRules:\n"
    "- seriesQuery: '{__name__=\"queue_consumer_lag\",name!=\"\"}'\n"
    "  metricsQuery: sum(<<.Series>>{<<.LabelMatchers>>}) by (name)\n"
    "  resources:\n"
    "    overrides: { namespace: {resource: namespace} }\n"
    "- seriesQuery: '{__name__=\"queue_depth\",topic!=\"\"}'\n"
    "  metricsQuery: sum(<<.Series>>{<<.LabelMatchers>>}) by (name)\n"
    "  resources:\n"
    "    namespaced: false\n";

/* ---- valid configs -------------------------------------------------------------------------- */

static void test_cma_config_load_string__empty_configs(void **state)
{
    (void)state;
    const char *empties[] = {"",
                             "# nothing here\n",
                             "---\n",
                             "{}\n",
                             "rules:\n",
                             "rules: []\n",
                             "rules: ~\n",
                             "externalRules: []\n",
                             "rules: null\nexternalRules:\nresourceRules:\n"};
    for (size_t i = 0; i < sizeof(empties) / sizeof(empties[0]); i++) {
        struct cma_config *cfg = load_ok(empties[i]);
        assert_int_equal(cfg->n_rules, 0);
        assert_null(cfg->rules);
        assert_int_equal(cfg->n_external_rules, 0);
        assert_null(cfg->resource_rules);
        cma_config_free(cfg);
    }
}

static void test_cma_config_load_string__helm_default_rules(void **state)
{
    (void)state;
    struct cma_config *cfg = load_ok(helm_default);
    assert_int_equal(cfg->n_rules, 6);
    assert_int_equal(cfg->n_external_rules, 0);
    assert_null(cfg->resource_rules);
    const char *container_sq = "{__name__=~\"^container_.*\",container!=\"POD\",namespace!=\"\","
                               "pod!=\"\"}";
    const char *generic_sq = "{namespace!=\"\",__name__!~\"^container_.*\"}";
    const char *matches[] = {"^container_(.*)_seconds_total$",
                             "^container_(.*)_total$",
                             "^container_(.*)$",
                             NULL,
                             "^(.*)_total$",
                             "^(.*)_seconds_total$"};
    const char *filters[] = {NULL,
                             "^container_.*_seconds_total$",
                             "^container_.*_total$",
                             ".*_total$",
                             ".*_seconds_total",
                             NULL};
    for (size_t i = 0; i < 6; i++) {
        const struct cma_config_rule *r = &cfg->rules[i];
        assert_str(&r->series_query, i < 3 ? container_sq : generic_sq);
        assert_false(r->series_query.plain); /* single-quoted */
        if (matches[i]) {
            assert_str(&r->name_matches, matches[i]);
        } else { /* matches: "" is set but empty */
            assert_str(&r->name_matches, "");
        }
        assert_str(&r->name_as, "");
        assert_int_equal(r->n_series_filters, filters[i] ? 1 : 0);
        if (filters[i]) {
            assert_str(&r->series_filters[0].is, NULL);
            assert_str(&r->series_filters[0].is_not, filters[i]);
        }
        assert_true(r->resources.namespaced);
        assert_false(r->resources.namespaced_set);
        if (i < 3) {
            assert_int_equal(r->resources.n_overrides, 2);
            assert_string_equal(r->resources.overrides[0].label, "namespace");
            assert_str(&r->resources.overrides[0].resource, "namespace");
            assert_str(&r->resources.overrides[0].group, NULL);
            assert_string_equal(r->resources.overrides[1].label, "pod");
            assert_str(&r->resources.overrides[1].resource, "pod");
            assert_str(&r->resources.template_, NULL);
        } else {
            assert_int_equal(r->resources.n_overrides, 0);
            assert_str(&r->resources.template_, "<<.Resource>>");
            assert_true(r->resources.template_.plain);
        }
    }
    assert_str(&cfg->rules[0].metrics_query,
               "sum(rate(<<.Series>>{<<.LabelMatchers>>,container!=\"POD\"}[5m])) by "
               "(<<.GroupBy>>)");
    assert_true(cfg->rules[0].metrics_query.plain);
    assert_str(&cfg->rules[2].metrics_query,
               "sum(<<.Series>>{<<.LabelMatchers>>,container!=\"POD\"}) by (<<.GroupBy>>)");
    assert_str(&cfg->rules[5].metrics_query,
               "sum(rate(<<.Series>>{<<.LabelMatchers>>}[5m])) by (<<.GroupBy>>)");
    /* Positions: rule items, values, and the file pointer. */
    assert_int_equal(cfg->rules[0].pos.line, 2);
    assert_int_equal(cfg->rules[0].pos.column, 3);
    assert_ptr_equal(cfg->rules[0].pos.file, cfg->file);
    assert_int_equal(cfg->rules[1].series_filters[0].pos.line, 16);
    assert_int_equal(cfg->rules[1].series_filters[0].pos.column, 5);
    assert_int_equal(cfg->rules[1].series_filters[0].is_not.pos.line, 16);
    assert_int_equal(cfg->rules[1].series_filters[0].is_not.pos.column, 12);
    assert_int_equal(cfg->rules[0].metrics_query.pos.line, 13);
    assert_int_equal(cfg->rules[0].metrics_query.pos.column, 17);
    assert_ptr_equal(cfg->rules[0].metrics_query.pos.file, cfg->file);
    cma_config_free(cfg);
}

static void test_cma_config_load_string__seed001_gpu_rules(void **state)
{
    (void)state;
    struct cma_config *cfg = load_ok(seed001);
    assert_int_equal(cfg->n_rules, 5);
    const char *queries[] = {"DCGM_FI_DEV_GPU_UTIL{}", "DCGM_CUSTOM_PROCESS_SM_UTIL{}",
                             "DCGM_FI_DEV_FB_USED{}", "DCGM_CUSTOM_PROCESS_MEM_USED{}",
                             "DCGM_CUSTOM_PROCESS_MEM_USED{NamespaceName!=\"\",PodName!=\"\"}"};
    const size_t n_overrides[] = {1, 3, 1, 3, 2};
    for (size_t i = 0; i < 5; i++) {
        const struct cma_config_rule *r = &cfg->rules[i];
        assert_str(&r->series_query, queries[i]); /* the trailing # comments are not values */
        assert_true(r->series_query.plain);
        assert_int_equal(r->resources.n_overrides, n_overrides[i]);
        assert_int_equal(r->n_series_filters, 0);
        assert_str(&r->resources.template_, NULL);
    }
    assert_str(&cfg->rules[0].metrics_query,
               "avg(<<.Series>>{<<.LabelMatchers>>}) by (<<.GroupBy>>)");
    assert_string_equal(cfg->rules[0].resources.overrides[0].label, "NodeName");
    assert_str(&cfg->rules[0].resources.overrides[0].resource, "node");
    assert_int_equal(cfg->rules[0].resources.overrides[0].pos.line, 5);
    assert_int_equal(cfg->rules[0].resources.overrides[0].pos.column, 7);
    assert_string_equal(cfg->rules[1].resources.overrides[0].label, "NamespaceName");
    assert_string_equal(cfg->rules[1].resources.overrides[1].label, "NodeName");
    assert_string_equal(cfg->rules[1].resources.overrides[2].label, "PodName");
    assert_str(&cfg->rules[1].resources.overrides[2].resource, "pod");
    const struct cma_config_rule *ratio = &cfg->rules[4];
    assert_str(&ratio->name_as, "${1}_GPU_MEM_USED_RATIO");
    assert_str(&ratio->name_matches, "^(.*)_MEM_USED");
    assert_str(&ratio->metrics_query,
               "sum(<<.Series>>{<<.LabelMatchers>>}) by (<<.GroupBy>>) / "
               "sum(DCGM_CUSTOM_CONTAINER_MEM_ALLOCATED{}) by (<<.GroupBy>>)");
    assert_str(&cfg->rules[0].name_as, NULL);
    assert_str(&cfg->rules[0].name_matches, NULL);
    /* Absent name: positions fall back to the rule. */
    assert_int_equal(cfg->rules[0].name_as.pos.line, 2);
    cma_config_free(cfg);
}

static void test_cma_config_load_string__resource_rules(void **state)
{
    (void)state;
    struct cma_config *cfg = load_ok(kube_prometheus_resource_rules);
    assert_int_equal(cfg->n_rules, 0);
    const struct cma_config_resource_rules *rr = cfg->resource_rules;
    assert_non_null(rr);
    assert_str(&rr->window, "5m");
    assert_int_equal(rr->window_ms, 300000);
    assert_str(&rr->cpu.container_query,
               "sum by (<<.GroupBy>>) (\n  irate (\n      container_cpu_usage_seconds_total"
               "{<<.LabelMatchers>>,container!=\"\",pod!=\"\"}[4m]\n  )\n)\n");
    assert_false(rr->cpu.container_query.plain);
    assert_int_equal(rr->cpu.container_query.pos.line, 3);
    assert_str(&rr->cpu.node_query, "sum by (<<.GroupBy>>) (\n  irate(\n      "
                                    "node_cpu_usage_seconds_total{<<.LabelMatchers>>}[4m]\n  "
                                    ")\n)\n");
    assert_int_equal(rr->cpu.resources.n_overrides, 3);
    assert_string_equal(rr->cpu.resources.overrides[1].label, "node");
    assert_str(&rr->cpu.container_label, NULL);
    assert_str(&rr->memory.container_label, "container");
    assert_int_equal(rr->memory.resources.n_overrides, 3);
    assert_string_equal(rr->memory.resources.overrides[0].label, "node");
    assert_str(&rr->memory.node_query,
               "sum by (<<.GroupBy>>) (\n  node_memory_working_set_bytes{<<.LabelMatchers>>}\n)\n");
    cma_config_free(cfg);
}

static void test_cma_config_load_string__resource_rules_presence(void **state)
{
    (void)state;
    struct cma_config *cfg = load_ok("resourceRules: {}\n");
    assert_non_null(cfg->resource_rules);
    assert_int_equal(cfg->resource_rules->window_ms, 0);
    assert_str(&cfg->resource_rules->window, NULL);
    assert_str(&cfg->resource_rules->cpu.container_query, NULL);
    assert_true(cfg->resource_rules->cpu.resources.namespaced);
    cma_config_free(cfg);
    cfg = load_ok("resourceRules:\n  cpu:\n  window: 0\n");
    assert_non_null(cfg->resource_rules);
    assert_str(&cfg->resource_rules->window, "0");
    assert_int_equal(cfg->resource_rules->window_ms, 0);
    cma_config_free(cfg);
}

static void test_cma_config_load_string__window_durations(void **state)
{
    (void)state;
    static const struct {
        const char *text;
        long long ms;
    } good[] = {{"0", 0},
                {"0s", 0},
                {"90s", 90000},
                {"1h30m", 5400000},
                {"100ms", 100},
                {"1m500ms", 60500},
                {"2d", 172800000},
                {"1w", 604800000},
                {"1y2w3d4h5m6s7ms",
                 31536000000LL + 1209600000LL + 259200000LL + 14400000LL + 300000LL + 6000LL + 7LL},
                {"292y", 292LL * 31536000000LL}};
    for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++) {
        char text[128];
        snprintf(text, sizeof(text), "resourceRules:\n  window: \"%s\"\n", good[i].text);
        struct cma_config *cfg = load_ok(text);
        assert_int_equal(cfg->resource_rules->window_ms, good[i].ms);
        assert_str(&cfg->resource_rules->window, good[i].text);
        cma_config_free(cfg);
    }
    const char *bad[] = {"1.5m",
                         "5",
                         "m",
                         "5m1h",
                         "5mm",
                         "-1m",
                         "1m ",
                         "300y",
                         "1s1s",
                         "5M",
                         "99999999999999999999s"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        char text[128], want[256];
        snprintf(text, sizeof(text), "resourceRules:\n  window: \"%s\"\n", bad[i]);
        snprintf(want, sizeof(want),
                 "cfg.yaml:2:11: invalid window \"%s\": not a Prometheus duration (e.g. 1m, "
                 "5m30s)",
                 bad[i]);
        load_fails(text, CMA_ERR_CONFIG_VALUE, want);
    }
}

static void test_cma_config_load_string__external_rules_namespaced(void **state)
{
    (void)state;
    struct cma_config *cfg = load_ok(external_rules);
    assert_int_equal(cfg->n_rules, 0);
    assert_int_equal(cfg->n_external_rules, 2);
    const struct cma_config_rule *lag = &cfg->external_rules[0];
    assert_str(&lag->series_query, "{__name__=\"queue_consumer_lag\",name!=\"\"}");
    assert_true(lag->resources.namespaced);
    assert_false(lag->resources.namespaced_set);
    assert_int_equal(lag->resources.n_overrides, 1);
    assert_string_equal(lag->resources.overrides[0].label, "namespace");
    assert_str(&lag->resources.overrides[0].resource, "namespace");
    const struct cma_config_rule *depth = &cfg->external_rules[1];
    assert_false(depth->resources.namespaced);
    assert_true(depth->resources.namespaced_set);
    assert_str(&depth->metrics_query, "sum(<<.Series>>{<<.LabelMatchers>>}) by (name)");
    assert_int_equal(depth->pos.line, 6);
    assert_int_equal(depth->resources.pos.line, 9);
    assert_int_equal(depth->resources.pos.column, 5);
    cma_config_free(cfg);
    /* yaml.v2 bools: yes/no/on/off too. */
    cfg = load_ok("externalRules:\n- resources: {namespaced: no}\n- resources: {namespaced: On}\n"
                  "- resources: {namespaced: ~}\n");
    assert_false(cfg->external_rules[0].resources.namespaced);
    assert_true(cfg->external_rules[1].resources.namespaced);
    assert_true(cfg->external_rules[1].resources.namespaced_set);
    assert_true(cfg->external_rules[2].resources.namespaced);
    assert_false(cfg->external_rules[2].resources.namespaced_set);
    cma_config_free(cfg);
}

static void test_cma_config_load_string__json(void **state)
{
    (void)state;
    struct cma_config *cfg =
        load_ok("{\n"
                "\t\"rules\": [{\n"
                "\t\t\"seriesQuery\": \"{__name__=~\\\"^http_.*\\\"}\",\n"
                "\t\t\"seriesFilters\": [{\"isNot\": \"_bucket$\"}],\n"
                "\t\t\"resources\": {\"overrides\": {\"pod\": {\"group\": \"\", \"resource\": "
                "\"pods\"}}},\n"
                "\t\t\"name\": {\"matches\": \"^(.*)_total$\", \"as\": \"${1}_per_second\"},\n"
                "\t\t\"metricsQuery\": \"sum(rate(<<.Series>>{<<.LabelMatchers>>}[2m])) by "
                "(<<.GroupBy>>)\"\n"
                "\t}],\n"
                "\t\"resourceRules\": {\"window\": \"1m\"}\n"
                "}\n");
    assert_int_equal(cfg->n_rules, 1);
    assert_str(&cfg->rules[0].series_query, "{__name__=~\"^http_.*\"}");
    assert_str(&cfg->rules[0].series_filters[0].is_not, "_bucket$");
    assert_str(&cfg->rules[0].resources.overrides[0].group, "");
    assert_str(&cfg->rules[0].resources.overrides[0].resource, "pods");
    assert_str(&cfg->rules[0].name_as, "${1}_per_second");
    assert_int_equal(cfg->rules[0].series_query.pos.line, 3);
    assert_int_equal(cfg->rules[0].series_query.pos.column, 18);
    assert_int_equal(cfg->resource_rules->window_ms, 60000);
    cma_config_free(cfg);
}

static void test_cma_config_load_string__scalars_become_strings(void **state)
{
    (void)state;
    struct cma_config *cfg = load_ok("rules:\n- seriesQuery: 123\n  metricsQuery: true\n"
                                     "  name: {matches: 1.5, as: ~}\n"
                                     "  resources: {template: null}\n");
    const struct cma_config_rule *r = &cfg->rules[0];
    assert_str(&r->series_query, "123");
    assert_str(&r->metrics_query, "true");
    assert_str(&r->name_matches, "1.5");
    /* null: unset, positioned at its key */
    assert_str(&r->name_as, NULL);
    assert_int_equal(r->name_as.pos.line, 4);
    assert_int_equal(r->name_as.pos.column, 24);
    assert_str(&r->resources.template_, NULL);
    assert_int_equal(r->resources.template_.pos.column, 15);
    /* absent: unset, positioned at the enclosing rule */
    assert_int_equal(r->n_series_filters, 0);
    cma_config_free(cfg);
}

static void test_cma_config_load_string__plain_flag(void **state)
{
    (void)state;
    struct cma_config *cfg = load_ok("rules:\n"
                                     "- seriesQuery: up{job=\"x\"}\n"
                                     "  metricsQuery: sum(x)\n"
                                     "    by (y)\n"
                                     "  name: {matches: \"a\", as: 'b'}\n"
                                     "  resources:\n"
                                     "    template: >-\n"
                                     "      <<.Resource>>\n");
    const struct cma_config_rule *r = &cfg->rules[0];
    assert_true(r->series_query.plain);
    assert_int_equal(r->series_query.pos.column, 16);
    assert_str(&r->metrics_query, "sum(x) by (y)");
    assert_false(r->metrics_query.plain); /* two lines */
    assert_false(r->name_matches.plain);
    assert_false(r->name_as.plain);
    assert_str(&r->resources.template_, "<<.Resource>>");
    assert_false(r->resources.template_.plain);
    cma_config_free(cfg);
}

static void test_cma_config_load_string__null_items_are_zero_values(void **state)
{
    (void)state;
    /* yaml.v2 decodes a null list item as the zero value: an empty rule (which rules/rule.c
     * warns about), and a filter with neither is nor isNot (which prometheus-adapter refuses) */
    struct cma_config *cfg = load_ok("rules:\n-\n- seriesQuery: a\n  seriesFilters:\n"
                                     "  - is: x\n-\n");
    assert_int_equal(cfg->n_rules, 3);
    assert_false(cfg->rules[0].series_query.set);
    assert_int_equal(cfg->rules[0].series_query.pos.line, 2);
    assert_true(cfg->rules[0].resources.namespaced);
    assert_str(&cfg->rules[1].series_query, "a");
    assert_int_equal(cfg->rules[1].n_series_filters, 1);
    assert_str(&cfg->rules[1].series_filters[0].is, "x");
    assert_false(cfg->rules[2].metrics_query.set);
    assert_int_equal(cfg->n_warnings, 0);
    cma_config_free(cfg);
    load_fails("rules:\n- seriesQuery: a\n  seriesFilters:\n  - is: x\n  - ~\n",
               CMA_ERR_CONFIG_VALUE,
               "cfg.yaml:5:5: must have either an `is` or `isNot` expression in a filter");
}

static void test_cma_config_load_string__second_document_is_a_warning(void **state)
{
    (void)state;
    struct cma_config *cfg = load_ok("rules:\n- seriesQuery: a\n---\nexternalRules:\n- {}\n");
    assert_int_equal(cfg->n_rules, 1);
    assert_int_equal(cfg->n_external_rules, 0);
    assert_int_equal(cfg->n_warnings, 1);
    assert_string_equal(cfg->warnings[0],
                        "cfg.yaml:3:1: a second YAML document starts here and is ignored: "
                        "prometheus-adapter (yaml.v2) reads only the first one; put every rule in "
                        "one document");
    cma_config_free(cfg);
}

static void test_cma_config_load_string__empty_filter_side_counts_as_absent(void **state)
{
    (void)state;
    struct cma_config *cfg =
        load_ok("rules:\n- seriesFilters:\n  - {is: \"\", isNot: x}\n  - {is: y, isNot: ''}\n");
    const struct cma_config_rule *r = &cfg->rules[0];
    assert_str(&r->series_filters[0].is, NULL);
    assert_str(&r->series_filters[0].is_not, "x");
    assert_str(&r->series_filters[1].is, "y");
    assert_str(&r->series_filters[1].is_not, NULL);
    cma_config_free(cfg);
}

static void test_cma_config_load_string__anchors_and_aliases(void **state)
{
    (void)state;
    struct cma_config *cfg = load_ok("rules:\n"
                                     "- seriesQuery: a\n"
                                     "  resources: &res\n"
                                     "    overrides: {pod: {resource: pod}}\n"
                                     "  metricsQuery: &q sum(<<.Series>>)\n"
                                     "- seriesQuery: b\n"
                                     "  resources: *res\n"
                                     "  metricsQuery: *q\n");
    assert_int_equal(cfg->n_rules, 2);
    assert_string_equal(cfg->rules[1].resources.overrides[0].label, "pod");
    assert_str(&cfg->rules[1].metrics_query, "sum(<<.Series>>)");
    /* separate copies: freeing one rule's strings cannot affect the other */
    assert_ptr_not_equal(cfg->rules[0].metrics_query.s, cfg->rules[1].metrics_query.s);
    cma_config_free(cfg);
}

/* Merge keys as yaml.v2 decodes them into prometheus-adapter's structs (every case here loads
 * there too): in document order, a mapping decoded into a field a merge already filled combines
 * with it, the earlier of several merged mappings wins; positions stay where the text is. */
static void test_cma_config_load_string__merge_keys(void **state)
{
    (void)state;
    struct cma_config *cfg =
        load_ok("rules:\n"
                "- &base\n"
                "  seriesQuery: base_q\n"
                "  resources: &res\n"
                "    overrides:\n"
                "      namespace: {resource: namespace}\n"
                "      pod: {resource: pod}\n"
                "  metricsQuery: sum(<<.Series>>)\n"
                "- <<: *base\n"
                "  seriesQuery: own_q\n"
                "- <<: *base\n"
                "  name: &nm {matches: ^(.*)_total$, as: first_as}\n"
                "  resources:\n"
                "    overrides:\n"
                "      service: {resource: service}\n"
                "- <<: [{name: {as: earlier}}, {name: *nm}, {metricsQuery: later}]\n"
                "  seriesQuery: fourth\n"
                "- metricsQuery: own\n"
                "  <<: {metricsQuery: merged_after, seriesQuery: fifth}\n");
    assert_int_equal(cfg->n_rules, 5);
    const struct cma_config_rule *r = cfg->rules;
    /* rule 2: every key of rule 1 but its own seriesQuery */
    assert_str(&r[1].series_query, "own_q");
    assert_int_equal(r[1].series_query.pos.line, 10);
    assert_str(&r[1].metrics_query, "sum(<<.Series>>)");
    assert_int_equal(r[1].metrics_query.pos.line, 8); /* where the merged text is */
    assert_int_equal(r[1].metrics_query.pos.column, 17);
    assert_int_equal(r[1].resources.n_overrides, 2);
    assert_string_equal(r[1].resources.overrides[1].label, "pod");
    /* rule 3: its own overrides add to the merged ones (yaml.v2 decodes into the filled map) */
    assert_str(&r[2].series_query, "base_q");
    assert_int_equal(r[2].resources.n_overrides, 3);
    const struct cma_config_override *ov = r[2].resources.overrides;
    assert_string_equal(ov[0].label, "namespace");
    assert_string_equal(ov[1].label, "pod");
    assert_int_equal(ov[1].pos.line, 7);
    assert_string_equal(ov[2].label, "service");
    assert_str(&ov[2].resource, "service");
    assert_int_equal(ov[2].pos.line, 15);
    /* rule 4: a list of maps, the earlier wins, key by key within name; keys only the later
     * ones have still come in */
    assert_str(&r[3].name_as, "earlier");
    assert_str(&r[3].name_matches, "^(.*)_total$");
    assert_str(&r[3].metrics_query, "later");
    assert_str(&r[3].series_query, "fourth");
    /* rule 5: a merge key after the own key applies after it, as in yaml.v2 */
    assert_str(&r[4].metrics_query, "merged_after");
    assert_str(&r[4].series_query, "fifth");
    cma_config_free(cfg);
    /* at the top level too, and an empty merge adds nothing */
    cfg = load_ok("<<: [{rules: [{seriesQuery: top}]}, {}]\nexternalRules: []\n");
    assert_int_equal(cfg->n_rules, 1);
    assert_str(&cfg->rules[0].series_query, "top");
    assert_int_equal(cfg->rules[0].series_query.pos.column, 29);
    cma_config_free(cfg);
    cfg = load_ok("rules:\n- <<: []\n  seriesQuery: a\n- {<<: {}}\n");
    assert_int_equal(cfg->n_rules, 2);
    assert_str(&cfg->rules[0].series_query, "a");
    assert_false(cfg->rules[1].series_query.set);
    cma_config_free(cfg);
}

static void test_cma_config_load_string__merge_key_errors(void **state)
{
    (void)state;
    const char *want = "map merge requires map or sequence of maps as the value";
    char buf[200];
    snprintf(buf, sizeof(buf), "cfg.yaml:3:3: %s", want);
    load_fails("rules:\n- seriesQuery: a\n  <<: x\n", CMA_ERR_CONFIG_TYPE, buf);
    load_fails("rules:\n- seriesQuery: a\n  <<: ~\n", CMA_ERR_CONFIG_TYPE, buf);
    load_fails("rules:\n- seriesQuery: a\n  <<: [{name: {}}, [b]]\n", CMA_ERR_CONFIG_TYPE, buf);
    load_fails("a: &s [x]\nrules:\n- <<: *s\n", CMA_ERR_CONFIG_TYPE, buf);
    /* a key written twice stays an error, merged or not */
    load_fails("rules:\n- <<: {seriesQuery: a}\n  metricsQuery: b\n  metricsQuery: c\n",
               CMA_ERR_CONFIG_KEY,
               "cfg.yaml:4:3: mapping key \"metricsQuery\" already defined at "
               "line 3");
    /* quoted, "<<" is an ordinary key */
    load_fails("rules:\n- '<<': {seriesQuery: a}\n", CMA_ERR_CONFIG_KEY,
               "cfg.yaml:2:3: unknown key \"<<\" (allowed: seriesQuery, seriesFilters, "
               "resources, name, metricsQuery, backend, maxSampleAge)");
}

/* ---- errors --------------------------------------------------------------------------------- */

static void test_cma_config_load_string__unknown_keys(void **state)
{
    (void)state;
    load_fails("rules: []\nexternalrules: []\n", CMA_ERR_CONFIG_KEY,
               "cfg.yaml:2:1: unknown key \"externalrules\" (allowed: rules, externalRules, "
               "resourceRules, backends)");
    load_fails("rules:\n- seriesquery: up\n", CMA_ERR_CONFIG_KEY,
               "cfg.yaml:2:3: unknown key \"seriesquery\" (allowed: seriesQuery, seriesFilters, "
               "resources, name, metricsQuery, backend, maxSampleAge)");
    load_fails("rules:\n- resources:\n    overide: {}\n", CMA_ERR_CONFIG_KEY,
               "cfg.yaml:3:5: unknown key \"overide\" (allowed: overrides, template, namespaced)");
    load_fails("rules:\n- name:\n    match: x\n", CMA_ERR_CONFIG_KEY,
               "cfg.yaml:3:5: unknown key \"match\" (allowed: matches, as)");
    load_fails("rules:\n- seriesFilters:\n  - isnot: x\n", CMA_ERR_CONFIG_KEY,
               "cfg.yaml:3:5: unknown key \"isnot\" (allowed: is, isNot)");
    load_fails("rules:\n- resources:\n    overrides:\n      pod: {resource: pod, kind: Pod}\n",
               CMA_ERR_CONFIG_KEY,
               "cfg.yaml:4:28: unknown key \"kind\" (allowed: group, resource)");
    load_fails("resourceRules:\n  disk: {}\n", CMA_ERR_CONFIG_KEY,
               "cfg.yaml:2:3: unknown key \"disk\" (allowed: cpu, memory, window, backend)");
    load_fails("resourceRules:\n  cpu:\n    podQuery: x\n", CMA_ERR_CONFIG_KEY,
               "cfg.yaml:3:5: unknown key \"podQuery\" (allowed: containerQuery, nodeQuery, "
               "resources, containerLabel)");
    load_fails("resourceRules:\n  memory:\n    resources: {templates: x}\n", CMA_ERR_CONFIG_KEY,
               "cfg.yaml:3:17: unknown key \"templates\" (allowed: overrides, template, "
               "namespaced)");
    /* a key reached through a merge key is checked where it is written */
    load_fails("rules:\n- &b {seriesQuery: up}\n- <<: [{metricsQuery: x}, {seriesquery: up}]\n",
               CMA_ERR_CONFIG_KEY,
               "cfg.yaml:3:28: unknown key \"seriesquery\" (allowed: seriesQuery, seriesFilters, "
               "resources, name, metricsQuery, backend, maxSampleAge)");
    load_fails("'<<': 1\n", CMA_ERR_CONFIG_KEY,
               "cfg.yaml:1:1: unknown key \"<<\" (allowed: rules, externalRules, resourceRules, "
               "backends)");
    load_fails("\"a\\tb\": 1\n", CMA_ERR_CONFIG_KEY,
               "cfg.yaml:1:1: unknown key \"a\\tb\" (allowed: rules, externalRules, "
               "resourceRules, backends)");
}

static void test_cma_config_load_string__wrong_shapes(void **state)
{
    (void)state;
    load_fails("- a\n", CMA_ERR_CONFIG_TYPE,
               "cfg.yaml:1:1: expected a mapping (rules, externalRules, resourceRules) at the top "
               "level, got a list");
    load_fails("just text\n", CMA_ERR_CONFIG_TYPE,
               "cfg.yaml:1:1: expected a mapping (rules, externalRules, resourceRules) at the top "
               "level, got a string");
    load_fails("rules: {}\n", CMA_ERR_CONFIG_TYPE,
               "cfg.yaml:1:8: expected a list for rules, got a mapping");
    load_fails("externalRules: x\n", CMA_ERR_CONFIG_TYPE,
               "cfg.yaml:1:16: expected a list for externalRules, got a string");
    load_fails("rules:\n- up\n", CMA_ERR_CONFIG_TYPE,
               "cfg.yaml:2:3: expected a mapping for each rule in rules, got a string");
    load_fails("externalRules:\n- [a]\n", CMA_ERR_CONFIG_TYPE,
               "cfg.yaml:2:3: expected a mapping for each rule in externalRules, got a list");
    load_fails("rules:\n- seriesQuery: [a, b]\n", CMA_ERR_CONFIG_TYPE,
               "cfg.yaml:2:16: expected a string for seriesQuery, got a list");
    load_fails("rules:\n- metricsQuery: {a: b}\n", CMA_ERR_CONFIG_TYPE,
               "cfg.yaml:2:17: expected a string for metricsQuery, got a mapping");
    load_fails("rules:\n- seriesFilters: {is: x}\n", CMA_ERR_CONFIG_TYPE,
               "cfg.yaml:2:18: expected a list for seriesFilters, got a mapping");
    load_fails("rules:\n- seriesFilters: [x]\n", CMA_ERR_CONFIG_TYPE,
               "cfg.yaml:2:19: expected a mapping (is or isNot) for each filter in "
               "seriesFilters, got a string");
    load_fails("rules:\n- seriesFilters: [{is: [x]}]\n", CMA_ERR_CONFIG_TYPE,
               "cfg.yaml:2:24: expected a string for is, got a list");
    load_fails("rules:\n- resources: [a]\n", CMA_ERR_CONFIG_TYPE,
               "cfg.yaml:2:14: expected a mapping for resources, got a list");
    load_fails("rules:\n- resources:\n    overrides: [a]\n", CMA_ERR_CONFIG_TYPE,
               "cfg.yaml:3:16: expected a mapping for overrides, got a list");
    load_fails("rules:\n- resources:\n    overrides:\n      pod: pods\n", CMA_ERR_CONFIG_TYPE,
               "cfg.yaml:4:12: expected a mapping with group and resource for override \"pod\", "
               "got a string");
    load_fails("rules:\n- resources:\n    overrides:\n      pod:\n      resource: pod\n",
               CMA_ERR_CONFIG_TYPE,
               "cfg.yaml:4:7: expected a mapping with group and resource for override \"pod\", "
               "got null");
    load_fails("rules:\n- resources:\n    overrides:\n      pod: {resource: {name: pod}}\n",
               CMA_ERR_CONFIG_TYPE, "cfg.yaml:4:23: expected a string for resource, got a mapping");
    load_fails("rules:\n- resources:\n    template: [x]\n", CMA_ERR_CONFIG_TYPE,
               "cfg.yaml:3:15: expected a string for template, got a list");
    load_fails("rules:\n- name: x\n", CMA_ERR_CONFIG_TYPE,
               "cfg.yaml:2:9: expected a mapping (matches, as) for name, got a string");
    load_fails("rules:\n- name: {as: [x]}\n", CMA_ERR_CONFIG_TYPE,
               "cfg.yaml:2:14: expected a string for as, got a list");
    load_fails("externalRules:\n- resources: {namespaced: maybe}\n", CMA_ERR_CONFIG_TYPE,
               "cfg.yaml:2:27: expected true or false for namespaced, got \"maybe\"");
    load_fails("externalRules:\n- resources: {namespaced: 'true'}\n", CMA_ERR_CONFIG_TYPE,
               "cfg.yaml:2:27: expected true or false for namespaced, got \"true\"");
    load_fails("externalRules:\n- resources: {namespaced: [true]}\n", CMA_ERR_CONFIG_TYPE,
               "cfg.yaml:2:27: expected true or false for namespaced, got a list");
    load_fails("resourceRules: [cpu]\n", CMA_ERR_CONFIG_TYPE,
               "cfg.yaml:1:16: expected a mapping for resourceRules, got a list");
    load_fails("resourceRules:\n  cpu: fast\n", CMA_ERR_CONFIG_TYPE,
               "cfg.yaml:2:8: expected a mapping for cpu, got a string");
    load_fails("resourceRules:\n  memory: []\n", CMA_ERR_CONFIG_TYPE,
               "cfg.yaml:2:11: expected a mapping for memory, got a list");
    load_fails("resourceRules:\n  window: {m: 5}\n", CMA_ERR_CONFIG_TYPE,
               "cfg.yaml:2:11: expected a string for window, got a mapping");
    load_fails("resourceRules:\n  cpu:\n    containerLabel: [c]\n", CMA_ERR_CONFIG_TYPE,
               "cfg.yaml:3:21: expected a string for containerLabel, got a list");
}

static void test_cma_config_load_string__filter_checks(void **state)
{
    (void)state;
    load_fails("rules:\n- seriesQuery: x\n  seriesFilters:\n  - is: a\n    isNot: b\n",
               CMA_ERR_CONFIG_VALUE,
               "cfg.yaml:4:5: cannot have both an `is` (\"a\") and `isNot` (\"b\") expression in a "
               "single filter");
    load_fails("rules:\n- seriesFilters:\n  - is: a\n  - {}\n", CMA_ERR_CONFIG_VALUE,
               "cfg.yaml:4:5: must have either an `is` or `isNot` expression in a filter");
    load_fails("rules:\n- seriesFilters:\n  - is: \"\"\n    isNot: ~\n", CMA_ERR_CONFIG_VALUE,
               "cfg.yaml:3:5: must have either an `is` or `isNot` expression in a filter");
    load_fails("rules:\n- seriesFilters:\n  - {is: \"a\\\"b\", isNot: \"c\\\\d\"}\n",
               CMA_ERR_CONFIG_VALUE,
               "cfg.yaml:3:5: cannot have both an `is` (\"a\\\"b\") and `isNot` (\"c\\\\d\") "
               "expression in a single filter");
}

static void test_cma_config_load_string__nul_in_string(void **state)
{
    (void)state;
    load_fails("rules:\n- seriesQuery: \"up\\0x\"\n", CMA_ERR_CONFIG_VALUE,
               "cfg.yaml:2:16: seriesQuery must not contain a NUL character");
    load_fails("rules:\n- resources: {overrides: {\"a\\0\": {resource: pod}}}\n",
               CMA_ERR_CONFIG_VALUE,
               "cfg.yaml:2:27: override labels must not contain a NUL character");
}

static void test_cma_config_load_string__yaml_errors_pass_through(void **state)
{
    (void)state;
    load_fails("rules:\n- seriesQuery: a\n  seriesQuery: b\n", CMA_ERR_CONFIG_KEY,
               "cfg.yaml:3:3: mapping key \"seriesQuery\" already defined at line 2");
    load_fails("rules:\n- seriesQuery: a: b\n", CMA_ERR_CONFIG_SYNTAX,
               "cfg.yaml:2:17: mapping values are not allowed in this context");
}

static void test_cma_config_load_file__missing_file(void **state)
{
    (void)state;
    struct cma_err err;
    cma_err_clear(&err);
    struct cma_config *cfg = NULL;
    assert_int_equal(cma_config_load_file("/nonexistent/config.yaml", &cfg, &err),
                     CMA_ERR_CONFIG_IO);
    assert_null(cfg);
    char out[600];
    cma_err_format_pos(&err, out, sizeof(out));
    assert_string_equal(out, "/nonexistent/config.yaml: cannot read config file: No such file or "
                             "directory");
}

/* ---- several files (cma_config_load_paths) ------------------------------------------------- */

/* A fresh temporary directory; `name` files are written with write_file(). */
static char *make_tmpdir(void)
{
    char *dir = strdup("/tmp/cma-config-test.XXXXXX");
    assert_non_null(dir);
    assert_non_null(mkdtemp(dir));
    return dir;
}

static char *write_file(const char *dir, const char *name, const char *text)
{
    char *path = malloc(strlen(dir) + strlen(name) + 2);
    assert_non_null(path);
    sprintf(path, "%s/%s", dir, name);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    assert_true(fputs(text, f) >= 0);
    assert_int_equal(fclose(f), 0);
    return path;
}

static void remove_tree(char *dir)
{
    DIR *d = opendir(dir);
    assert_non_null(d);
    for (struct dirent *e; (e = readdir(d)) != NULL;) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
            continue;
        char path[4096];
        snprintf(path, sizeof(path), "%s/%s", dir, e->d_name);
        struct stat st;
        if (lstat(path, &st) == 0 && S_ISDIR(st.st_mode))
            remove_tree(strdup(path));
        else
            unlink(path);
    }
    closedir(d);
    rmdir(dir);
    free(dir);
}

static struct cma_config *paths_ok(const char *const *paths, size_t n)
{
    struct cma_err err;
    cma_err_clear(&err);
    struct cma_config *cfg = NULL;
    if (cma_config_load_paths(paths, n, &cfg, &err) != CMA_OK) {
        char out[700];
        cma_err_format_pos(&err, out, sizeof(out));
        fail_msg("unexpected error: %s", out);
    }
    assert_non_null(cfg);
    return cfg;
}

/* The error of loading `paths`, formatted, with every occurrence of `dir` replaced by "D". */
static void paths_fail(const char *const *paths, size_t n, const char *dir, enum cma_errc code,
                       const char *want)
{
    struct cma_err err;
    cma_err_clear(&err);
    struct cma_config *sentinel = (struct cma_config *)&err, *cfg = sentinel;
    enum cma_errc rc = cma_config_load_paths(paths, n, &cfg, &err);
    char out[1400], got[1400];
    cma_err_format_pos(&err, out, sizeof(out));
    size_t dl = dir ? strlen(dir) : 0, used = 0;
    for (const char *p = out; *p && used + 1 < sizeof(got);) {
        bool at_dir = dl && strncmp(p, dir, dl) == 0;
        got[used++] = at_dir ? 'D' : *p;
        p += at_dir ? dl : 1;
    }
    got[used] = '\0';
    if (rc != code)
        fail_msg("code %d, want %d: %s", rc, code, got);
    assert_ptr_equal(cfg, sentinel);
    assert_string_equal(got, want);
}

static const char gpu_rule[] = "rules:\n"
                               "- seriesQuery: 'DCGM_FI_DEV_GPU_UTIL{pod!=\"\"}'\n"
                               "  resources:\n"
                               "    overrides:\n"
                               "      pod: {resource: pod}\n"
                               "  metricsQuery: avg(<<.Series>>{<<.LabelMatchers>>}) by "
                               "(<<.GroupBy>>)\n";

static void test_cma_config_load_paths__one_file_is_load_file(void **state)
{
    (void)state;
    char *dir = make_tmpdir();
    char *a = write_file(dir, "a.yaml", gpu_rule);
    const char *paths[] = {a};
    struct cma_config *cfg = paths_ok(paths, 1);
    assert_string_equal(cfg->file, a);
    assert_int_equal(cfg->n_files, 1);
    assert_ptr_equal(cfg->files[0], cfg->file);
    assert_int_equal(cfg->n_rules, 1);
    assert_ptr_equal(cfg->rules[0].pos.file, cfg->file);
    assert_int_equal(cfg->rules[0].pos.line, 2);
    cma_config_free(cfg);
    /* no path at all: the message prometheus-adapter gives for a missing --config */
    paths_fail(paths, 0, NULL, CMA_ERR_CONFIG_IO,
               "no metrics discovery configuration file specified (make sure to use --config)");
    free(a);
    remove_tree(dir);
}

static void test_cma_config_load_paths__files_merge_in_order(void **state)
{
    (void)state;
    char *dir = make_tmpdir();
    char *a = write_file(dir, "a.yaml",
                         "rules:\n- seriesQuery: a1\n- seriesQuery: a2\n"
                         "externalRules:\n- seriesQuery: ea\n");
    char *b = write_file(dir, "b.yaml",
                         "# b\nrules:\n- seriesQuery: b1\nresourceRules:\n  window: 2m\n"
                         "---\nrules: []\n");
    char *c = write_file(dir, "c.yaml", "externalRules:\n- seriesQuery: ec\n");
    const char *paths[] = {c, a, b};
    struct cma_config *cfg = paths_ok(paths, 3);
    assert_int_equal(cfg->n_files, 3);
    assert_string_equal(cfg->files[0], c);
    assert_string_equal(cfg->files[1], a);
    assert_string_equal(cfg->files[2], b);
    assert_string_equal(cfg->file, c);
    /* rules: a's then b's (c has none); externalRules: c's then a's */
    assert_int_equal(cfg->n_rules, 3);
    assert_str(&cfg->rules[0].series_query, "a1");
    assert_str(&cfg->rules[1].series_query, "a2");
    assert_str(&cfg->rules[2].series_query, "b1");
    assert_string_equal(cfg->rules[1].pos.file, a);
    assert_int_equal(cfg->rules[1].pos.line, 3);
    assert_string_equal(cfg->rules[2].pos.file, b);
    assert_int_equal(cfg->rules[2].pos.line, 3);
    assert_string_equal(cfg->rules[2].series_query.pos.file, b);
    assert_int_equal(cfg->n_external_rules, 2);
    assert_str(&cfg->external_rules[0].series_query, "ec");
    assert_string_equal(cfg->external_rules[0].pos.file, c);
    assert_str(&cfg->external_rules[1].series_query, "ea");
    assert_string_equal(cfg->external_rules[1].pos.file, a);
    /* resourceRules from the one file that has them; the warning names its file */
    assert_non_null(cfg->resource_rules);
    assert_int_equal(cfg->resource_rules->window_ms, 120000);
    assert_string_equal(cfg->resource_rules->pos.file, b);
    assert_int_equal(cfg->n_warnings, 1);
    char want[600];
    snprintf(want, sizeof(want), "%s:6:1: a second YAML document", b);
    assert_true(strncmp(cfg->warnings[0], want, strlen(want)) == 0);
    cma_config_free(cfg);
    free(a);
    free(b);
    free(c);
    remove_tree(dir);
}

static void test_cma_config_load_paths__directory(void **state)
{
    (void)state;
    char *dir = make_tmpdir();
    char sub[600];
    snprintf(sub, sizeof(sub), "%s/conf.d", dir);
    assert_int_equal(mkdir(sub, 0700), 0);
    free(write_file(sub, "20-b.yml", "rules:\n- seriesQuery: b\n"));
    free(write_file(sub, "10-a.yaml", "rules:\n- seriesQuery: a\n"));
    free(
        write_file(sub, "B.yaml", "rules:\n- seriesQuery: upper\n")); /* byte order: digits first */
    free(write_file(sub, ".hidden.yaml", "rules: [not, loaded\n"));
    free(write_file(sub, "notes.txt", "not yaml at all: [\n"));
    free(write_file(sub, "config.yaml.bak", "rules: [\n"));
    char other[600];
    snprintf(other, sizeof(other), "%s/elsewhere", dir);
    assert_int_equal(mkdir(other, 0700), 0);
    char *target = write_file(other, "x.yaml", "rules:\n- seriesQuery: linked\n");
    char link[700];
    snprintf(link, sizeof(link), "%s/30-link.yaml", sub);
    assert_int_equal(symlink(target, link), 0); /* ConfigMap mounts are links */
    snprintf(link, sizeof(link), "%s/..data", sub);
    assert_int_equal(symlink(other, link), 0);
    snprintf(link, sizeof(link), "%s/dir.yaml", sub);
    assert_int_equal(mkdir(link, 0700), 0); /* a directory is not a rule file */
    const char *paths[] = {sub};
    struct cma_config *cfg = paths_ok(paths, 1);
    assert_int_equal(cfg->n_rules, 4);
    assert_str(&cfg->rules[0].series_query, "a");
    assert_str(&cfg->rules[1].series_query, "b");
    assert_str(&cfg->rules[2].series_query, "linked");
    assert_str(&cfg->rules[3].series_query, "upper");
    char want[700];
    snprintf(want, sizeof(want), "%s/10-a.yaml", sub);
    assert_string_equal(cfg->files[0], want);
    assert_string_equal(cfg->rules[0].pos.file, want);
    snprintf(want, sizeof(want), "%s/30-link.yaml", sub);
    assert_string_equal(cfg->rules[2].pos.file, want);
    cma_config_free(cfg);
    /* a trailing slash gives the same names; a directory and a file mix in the order given */
    char with_slash[700], *extra = write_file(dir, "extra.yaml", "rules:\n- seriesQuery: e\n");
    snprintf(with_slash, sizeof(with_slash), "%s/", sub);
    const char *mixed[] = {extra, with_slash};
    cfg = paths_ok(mixed, 2);
    assert_int_equal(cfg->n_rules, 5);
    assert_str(&cfg->rules[0].series_query, "e");
    assert_str(&cfg->rules[1].series_query, "a");
    snprintf(want, sizeof(want), "%s/10-a.yaml", sub);
    assert_string_equal(cfg->files[1], want);
    cma_config_free(cfg);
    /* the same file twice, here once through the directory's link */
    const char *twice[] = {sub, target};
    paths_fail(twice, 2, dir, CMA_ERR_CONFIG_VALUE,
               "D/elsewhere/x.yaml: the same file as D/conf.d/30-link.yaml: each config file "
               "may be loaded only once");
    const char *same[] = {extra, extra};
    paths_fail(same, 2, dir, CMA_ERR_CONFIG_VALUE,
               "D/extra.yaml: the same file as D/extra.yaml: each config file may be loaded "
               "only once");
    /* an error in a later file names that file */
    free(write_file(sub, "40-bad.yaml", "rules:\n- seriesQuery: x\n  bogus: 1\n"));
    paths_fail(paths, 1, dir, CMA_ERR_CONFIG_KEY,
               "D/conf.d/40-bad.yaml:3:3: unknown key \"bogus\" (allowed: seriesQuery, "
               "seriesFilters, resources, name, metricsQuery, backend, maxSampleAge)");
    /* a directory without rule files */
    const char *empty[] = {link};
    paths_fail(empty, 1, dir, CMA_ERR_CONFIG_IO,
               "D/conf.d/dir.yaml: no *.yaml or *.yml file in this config directory");
    free(extra);
    free(target);
    remove_tree(dir);
}

static void test_cma_config_load_paths__resource_rules_twice(void **state)
{
    (void)state;
    char *dir = make_tmpdir();
    char *a = write_file(dir, "a.yaml", "rules: []\nresourceRules:\n  window: 1m\n");
    char *b = write_file(dir, "b.yaml", "resourceRules: ~\n"); /* null: absent */
    char *c = write_file(dir, "c.yaml", "# c\nresourceRules: {window: 5m}\n");
    const char *ok[] = {a, b};
    struct cma_config *cfg = paths_ok(ok, 2);
    assert_int_equal(cfg->resource_rules->window_ms, 60000);
    cma_config_free(cfg);
    const char *bad[] = {a, b, c};
    paths_fail(bad, 3, dir, CMA_ERR_CONFIG_VALUE,
               "D/c.yaml:2:16: resourceRules is already defined at D/a.yaml:3:3: only one "
               "config file may define resourceRules");
    free(a);
    free(b);
    free(c);
    remove_tree(dir);
}

static void test_cma_config_load_paths__same_metric_from_two_files(void **state)
{
    (void)state;
    char *dir = make_tmpdir();
    char *a = write_file(dir, "a.yaml", gpu_rule);
    /* the same name for Pods (plural, other case) through another label: a conflict */
    char *b = write_file(dir, "b.yaml",
                         "rules:\n"
                         "- seriesQuery: '{__name__=\"DCGM_FI_DEV_GPU_UTIL\",exported_pod!=\"\"}'\n"
                         "  resources:\n"
                         "    overrides:\n"
                         "      exported_pod: {resource: Pods}\n");
    const char *ab[] = {a, b};
    paths_fail(ab, 2, dir, CMA_ERR_CONFIG_VALUE,
               "D/b.yaml:2:3: metric \"DCGM_FI_DEV_GPU_UTIL\" for resource Pods is also served by "
               "the rule at D/a.yaml:2:3: a metric may come from one config file only (drop one "
               "rule, or rename one with name.as)");
    /* the same two rules in one file load as before (the later wins at relist, as upstream) */
    char both[1200];
    snprintf(both, sizeof(both), "%s%s", gpu_rule,
             "- seriesQuery: 'DCGM_FI_DEV_GPU_UTIL{exported_pod!=\"\"}'\n"
             "  resources:\n    overrides:\n      exported_pod: {resource: pods}\n");
    char *one = write_file(dir, "one.yaml", both);
    const char *single[] = {one};
    struct cma_config *cfg = paths_ok(single, 1);
    assert_int_equal(cfg->n_rules, 2);
    cma_config_free(cfg);
    /* a constant name.as, case-insensitively, against a node rule and a pod rule */
    char *c = write_file(dir, "c.yaml",
                         "rules:\n"
                         "- seriesQuery: '{__name__=~\"DCGM_.*\"}'\n"
                         "  resources: {overrides: {Hostname: {resource: node}}}\n"
                         "  name: {as: dcgm_fi_dev_gpu_util}\n"
                         "- seriesQuery: 'other_metric'\n"
                         "  resources: {overrides: {pod: {resource: pod}}}\n"
                         "  name: {matches: ^other_(.*)$, as: DCGM_FI_DEV_GPU_UTIL}\n");
    const char *ac[] = {a, c};
    paths_fail(ac, 2, dir, CMA_ERR_CONFIG_VALUE,
               "D/c.yaml:5:3: metric \"DCGM_FI_DEV_GPU_UTIL\" for resource pod is also served by "
               "the rule at D/a.yaml:2:3: a metric may come from one config file only (drop one "
               "rule, or rename one with name.as)");
    /* names that depend on which series exist are not judged here */
    char *d = write_file(dir, "d.yaml",
                         "rules:\n"
                         "- seriesQuery: '{__name__=~\"DCGM_FI_DEV_.*\"}'\n"
                         "  resources: {overrides: {pod: {resource: pod}}}\n"
                         "- seriesQuery: DCGM_FI_DEV_GPU_UTIL\n"
                         "  resources: {overrides: {pod: {resource: pod}}}\n"
                         "  name: {matches: ^DCGM_(.*)$}\n"
                         "- seriesQuery: DCGM_FI_DEV_GPU_UTIL\n"
                         "  seriesFilters: [{isNot: GPU}]\n"
                         "  resources: {overrides: {pod: {resource: pod}}}\n"
                         "- seriesQuery: DCGM_FI_DEV_GPU_UTIL\n"
                         "  resources: {overrides: {namespace: {resource: namespace}}}\n"
                         "- seriesQuery: 'DCGM_FI_DEV_FB_USED{pod!=\"\"}'\n"
                         "  resources: {overrides: {pod: {resource: pod}}}\n"
                         "  name: {matches: GPU_UTIL}\n");
    const char *ad[] = {a, d};
    cfg = paths_ok(ad, 2);
    assert_int_equal(cfg->n_rules, 6);
    cma_config_free(cfg);
    /* a literal name.matches is the served name when it is in the series name */
    char *e = write_file(dir, "e.yaml",
                         "rules:\n"
                         "- seriesQuery: 'DCGM_FI_DEV_GPU_UTIL{pod!=\"\"}'\n"
                         "  resources: {overrides: {pod: {resource: pod}}}\n"
                         "  name: {matches: ^DCGM_FI_DEV_GPU_UTIL$, as: $0}\n");
    const char *ae[] = {a, e};
    paths_fail(ae, 2, dir, CMA_ERR_CONFIG_VALUE,
               "D/e.yaml:2:3: metric \"DCGM_FI_DEV_GPU_UTIL\" for resource pod is also served by "
               "the rule at D/a.yaml:2:3: a metric may come from one config file only (drop one "
               "rule, or rename one with name.as)");
    free(a);
    free(b);
    free(c);
    free(d);
    free(e);
    free(one);
    remove_tree(dir);
}

static void test_cma_config_load_paths__same_external_metric_from_two_files(void **state)
{
    (void)state;
    char *dir = make_tmpdir();
    char *a = write_file(dir, "a.yaml",
                         "externalRules:\n"
                         "- seriesQuery: 'vllm:num_requests_waiting'\n"
                         "  name: {as: vllm_num_requests_waiting}\n");
    char *b = write_file(dir, "b.yaml",
                         "externalRules:\n"
                         "- seriesQuery: '{__name__=~\"^vllm:num_requests_waiting$\"}'\n"
                         "  resources: {overrides: {namespace: {resource: namespace}}}\n"
                         "  name: {matches: \"\", as: VLLM_num_requests_waiting}\n");
    char *c = write_file(dir, "c.yaml",
                         "rules:\n"
                         "- seriesQuery: 'vllm:num_requests_waiting'\n"
                         "  resources: {overrides: {namespace: {resource: namespace}}}\n"
                         "  name: {as: vllm_num_requests_waiting}\n");
    const char *ab[] = {a, b};
    paths_fail(ab, 2, dir, CMA_ERR_CONFIG_VALUE,
               "D/b.yaml:2:3: external metric \"VLLM_num_requests_waiting\" is also served by the "
               "rule at D/a.yaml:2:3: a metric may come from one config file only (drop one "
               "rule, or rename one with name.as)");
    /* a custom and an external metric of the same name do not collide */
    const char *ac[] = {a, c};
    struct cma_config *cfg = paths_ok(ac, 2);
    assert_int_equal(cfg->n_rules, 1);
    assert_int_equal(cfg->n_external_rules, 1);
    cma_config_free(cfg);
    free(a);
    free(b);
    free(c);
    remove_tree(dir);
}

/* Every tests/config-errors/<case>/ gives exactly its expect.error when loaded as
 * "<case>/config.yaml" from that directory, as the runner does through the binary. */
/* ---- backends: (this project's extension) ---------------------------------------------------- */

static void test_cma_config_load_paths__backends(void **state)
{
    (void)state;
    char *dir = make_tmpdir();
    char *pw = write_file(dir, "password", "s3cret\n");
    char *token = write_file(dir, "token", "t0ken\n");
    char *ca = write_file(dir, "ca.crt", "not parsed here\n");
    /* relative paths resolve against the config file's directory */
    char *a = write_file(dir, "a.yaml",
                         "backends:\n"
                         "- name: mimir-gpu\n"
                         "  url: https://mimir.example/prometheus\n"
                         "  verb: POST\n"
                         "  timeout: 1m30s\n"
                         "  headers: {X-Scope-OrgID: giantswarm}\n"
                         "  queryParameters: {dedup: 'true', partial_response: 'false'}\n"
                         "  maxQueryLength: 16384\n"
                         "  basicAuth: {username: reader, passwordFile: password}\n"
                         "  tls: {caFile: ca.crt, insecureSkipVerify: true}\n"
                         "rules:\n"
                         "- seriesQuery: up\n"
                         "  backend: apps\n"
                         "- seriesQuery: up\n");
    char *b = write_file(dir, "b.yaml",
                         "backends:\n"
                         "- {name: apps, url: 'http://127.0.0.1:9090', bearerTokenFile: token}\n"
                         "externalRules:\n"
                         "- {seriesQuery: up, backend: mimir-gpu}\n"
                         "resourceRules: {backend: apps, window: 1m}\n");
    const char *paths[] = {a, b};
    struct cma_config *cfg = paths_ok(paths, 2);
    assert_int_equal(cfg->n_backends, 2);
    const struct cma_config_backend *m = &cfg->backends[0], *p = &cfg->backends[1];
    assert_string_equal(m->name.s, "mimir-gpu");
    assert_string_equal(m->url.s, "https://mimir.example/prometheus");
    assert_true(m->use_post);
    assert_int_equal(m->timeout_ms, 90000);
    assert_int_equal(m->n_headers, 1);
    assert_string_equal(m->headers[0].key, "X-Scope-OrgID");
    assert_string_equal(m->headers[0].value, "giantswarm");
    assert_int_equal(m->n_query_params, 2);
    assert_string_equal(m->query_params[1].key, "partial_response");
    assert_string_equal(m->query_params[1].value, "false");
    assert_int_equal(m->max_query_length, 16384);
    assert_string_equal(m->basic_username.s, "reader");
    assert_string_equal(m->basic_password_file.s, pw);
    assert_string_equal(m->ca_file.s, ca);
    assert_true(m->insecure_skip_verify);
    assert_false(m->in_cluster);
    assert_false(p->use_post);
    assert_int_equal(p->timeout_ms, 0);
    assert_string_equal(p->bearer_token_file.s, token);
    assert_int_equal(p->name.pos.line, 2);
    assert_ptr_equal(p->name.pos.file, cfg->files[1]);
    /* a rule may name a backend of another file; no backend: is the flags' one (0) */
    assert_int_equal(cfg->rules[0].backend.index, 2);
    assert_string_equal(cfg->rules[0].backend.name.s, "apps");
    assert_int_equal(cfg->rules[1].backend.index, 0);
    assert_false(cfg->rules[1].backend.name.set);
    assert_int_equal(cfg->external_rules[0].backend.index, 1);
    assert_int_equal(cfg->resource_rules->backend.index, 2);
    cma_config_free(cfg);
    /* the same name in two files: both positions */
    char *c = write_file(dir, "c.yaml", "backends:\n- name: apps\n  url: http://other:9090\n");
    const char *twice[] = {a, b, c};
    paths_fail(twice, 3, dir, CMA_ERR_CONFIG_VALUE,
               "D/c.yaml:2:9: backend \"apps\" is already defined at D/b.yaml:2:10: backend "
               "names must be unique");
    /* a.yaml alone names a backend only b.yaml defines */
    const char *alone[] = {a};
    paths_fail(alone, 1, dir, CMA_ERR_CONFIG_VALUE,
               "D/a.yaml:13:12: unknown backend \"apps\" (defined: mimir-gpu)");
    /* a missing secret file: the resolved path and the reason */
    char *d = write_file(dir, "d.yaml",
                         "backends:\n- name: x\n  url: http://x\n  bearerTokenFile: gone\n");
    const char *missing[] = {d};
    paths_fail(missing, 1, dir, CMA_ERR_CONFIG_VALUE,
               "D/d.yaml:4:20: bearerTokenFile: cannot read D/gone: No such file or directory");
    char *files[] = {pw, token, ca, a, b, c, d};
    for (size_t i = 0; i < sizeof(files) / sizeof(files[0]); i++)
        free(files[i]);
    remove_tree(dir);
}

/* maxSampleAge (this project's extension): a positive Go duration on rules and externalRules,
 * with its position; anything else is refused where it is written; resourceRules says why it
 * has none. */
static void test_cma_config_load_string__max_sample_age(void **state)
{
    (void)state;
    static const char yaml[] = "rules:\n"
                               "- {seriesQuery: a, maxSampleAge: 1m30s}\n"
                               "- {seriesQuery: b}\n"
                               "externalRules:\n"
                               "- seriesQuery: c\n"
                               "  maxSampleAge: 1.5s\n";
    struct cma_err err;
    cma_err_clear(&err);
    struct cma_config *cfg = NULL;
    assert_int_equal(cma_config_load_string("cfg.yaml", yaml, strlen(yaml), &cfg, &err), CMA_OK);
    assert_int_equal(cfg->rules[0].max_sample_age_ms, 90000);
    assert_str(&cfg->rules[0].max_sample_age, "1m30s");
    assert_int_equal(cfg->rules[0].max_sample_age.pos.line, 2);
    assert_int_equal(cfg->rules[0].max_sample_age.pos.column, 34);
    assert_int_equal(cfg->rules[1].max_sample_age_ms, 0);
    assert_false(cfg->rules[1].max_sample_age.set);
    assert_int_equal(cfg->external_rules[0].max_sample_age_ms, 1500);
    cma_config_free(cfg);
    static const char *const bad[] = {"2", "-1m", "0", "0s", "1x", "", "1m 30s", "10us"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        char text[128], want[256];
        snprintf(text, sizeof(text), "rules:\n- {seriesQuery: a, maxSampleAge: '%s'}\n", bad[i]);
        snprintf(want, sizeof(want),
                 "cfg.yaml:2:34: maxSampleAge \"%s\": want a positive Go duration of at least "
                 "1ms (90s, 2m, 1h30m)",
                 bad[i]);
        load_fails(text, CMA_ERR_CONFIG_VALUE, want);
    }
    load_fails("rules:\n- {seriesQuery: a, maxSampleAge: [1m]}\n", CMA_ERR_CONFIG_TYPE,
               "cfg.yaml:2:34: expected a string for maxSampleAge, got a list");
    load_fails("resourceRules:\n  window: 1m\n  maxSampleAge: 2m\n", CMA_ERR_CONFIG_KEY,
               "cfg.yaml:3:3: maxSampleAge is not supported in resourceRules: containerQuery and "
               "nodeQuery name their metrics themselves (no .Series), so the adapter cannot "
               "measure the data's age; leave it out");
}

/* metricRules: on a backend: whether MetricRules may name it, for which namespaces. */
static void test_cma_config_load_string__backend_metric_rules(void **state)
{
    (void)state;
    struct cma_config *cfg =
        load_ok("backends:\n- {name: a, url: 'http://a'}\n"
                "- {name: b, url: 'http://b', metricRules: {allowed: true}}\n"
                "- {name: c, url: 'http://c', metricRules: {allowed: true, namespaces: [shop, web],"
                " tenantFromNamespace: false}}\n"
                "- {name: d, url: 'http://d', metricRules: {allowed: true, tenantFromNamespace: "
                "true}}\n");
    assert_int_equal(cfg->n_backends, 4);
    assert_false(cfg->backends[0].mr_tenant_from_namespace); /* default: the backend's header */
    assert_false(cfg->backends[2].mr_tenant_from_namespace);
    assert_true(cfg->backends[3].mr_tenant_from_namespace);
    assert_true(cfg->backends[3].mr_allowed);
    assert_false(cfg->backends[0].mr_allowed); /* default: not offered to MetricRules */
    assert_int_equal(cfg->backends[0].n_mr_namespaces, 0);
    assert_true(cfg->backends[1].mr_allowed);
    assert_int_equal(cfg->backends[1].n_mr_namespaces, 0);
    assert_true(cfg->backends[2].mr_allowed);
    assert_int_equal(cfg->backends[2].n_mr_namespaces, 2);
    assert_string_equal(cfg->backends[2].mr_namespaces[0], "shop");
    assert_string_equal(cfg->backends[2].mr_namespaces[1], "web");
    cma_config_free(cfg);
    load_fails("backends:\n- {name: a, url: 'http://a', metricRules: yes}\n", CMA_ERR_CONFIG_TYPE,
               "cfg.yaml:2:43: expected a mapping (allowed, namespaces, tenantFromNamespace) for "
               "metricRules, got a string");
    load_fails("backends:\n- {name: a, url: 'http://a', metricRules: {namespaces: [shop, [x]]}}\n",
               CMA_ERR_CONFIG_VALUE,
               "cfg.yaml:2:63: backend a: metricRules.namespaces: want namespace names");
    load_fails(
        "backends:\n- {name: a, url: 'http://a', metricRules: {tenantFromNamespace: true}}\n",
        CMA_ERR_CONFIG_VALUE,
        "cfg.yaml:2:65: backend a: metricRules.tenantFromNamespace: true needs "
        "metricRules.allowed: true (only MetricRules' calls are sent as their namespace)");
    load_fails("backends:\n- {name: a, url: 'http://a', metricRules: {allowed: true, "
               "tenantFromNamespace: per-namespace}}\n",
               CMA_ERR_CONFIG_TYPE,
               "cfg.yaml:2:80: expected true or false for tenantFromNamespace, got "
               "\"per-namespace\"");
}

static void test_cma_config_load_string__backend_errors(void **state)
{
    (void)state;
    load_fails("rules:\n- {seriesQuery: up, backend: nope}\n", CMA_ERR_CONFIG_VALUE,
               "cfg.yaml:2:30: unknown backend \"nope\" (no backends: list defines any)");
    load_fails("backends:\n- {name: a, url: 'http://a'}\n- {name: a, url: 'http://b'}\n",
               CMA_ERR_CONFIG_VALUE,
               "cfg.yaml:3:10: backend \"a\" is already defined at cfg.yaml:2:10: backend names "
               "must be unique");
    load_fails("backends:\n- {url: 'http://a'}\n", CMA_ERR_CONFIG_VALUE,
               "cfg.yaml:2:3: backends: each entry needs a name");
    load_fails("backends:\n- {name: 'a b', url: 'http://a'}\n", CMA_ERR_CONFIG_VALUE,
               "cfg.yaml:2:10: backend name \"a b\": use 1 to 63 letters, digits, '-', '_' or "
               "'.'");
    load_fails("backends:\n- {name: a}\n", CMA_ERR_CONFIG_VALUE,
               "cfg.yaml:2:3: backend a: url is required");
    load_fails("backends:\n- {name: a, url: 'ftp://a'}\n", CMA_ERR_CONFIG_VALUE,
               "cfg.yaml:2:18: backend a: url: want http:// or https://");
    load_fails("backends:\n- {name: a, url: 'http://a', verb: PUT}\n", CMA_ERR_CONFIG_VALUE,
               "cfg.yaml:2:36: backend a: verb: want GET or POST");
    load_fails("backends:\n- {name: a, url: 'http://a', timeout: 10}\n", CMA_ERR_CONFIG_VALUE,
               "cfg.yaml:2:39: backend a: timeout \"10\": want a positive duration (10s, 1m30s)");
    load_fails("backends:\n- {name: a, url: 'http://a', maxQueryLength: -1}\n",
               CMA_ERR_CONFIG_VALUE,
               "cfg.yaml:2:46: backend a: maxQueryLength \"-1\": want a positive number of bytes");
    load_fails("backends:\n- {name: a, url: 'http://a', headers: {Authorization: Bearer x}}\n",
               CMA_ERR_CONFIG_VALUE,
               "cfg.yaml:2:40: headers: Authorization may not be written in the config: use "
               "bearerTokenFile or basicAuth.passwordFile (secrets come from files)");
    load_fails("backends:\n- {name: a, url: 'http://a', headers: {'X Y': z}}\n",
               CMA_ERR_CONFIG_VALUE, "cfg.yaml:2:40: headers: \"X Y\" is not a header name");
    load_fails("backends:\n- {name: a, url: 'http://a', basicAuth: {username: u}}\n",
               CMA_ERR_CONFIG_VALUE,
               "cfg.yaml:2:41: backend a: basicAuth needs username and passwordFile");
    load_fails("backends:\n- {name: a, url: 'http://a', basicAuth: {password: p}}\n",
               CMA_ERR_CONFIG_KEY,
               "cfg.yaml:2:42: unknown key \"password\" (allowed: username, passwordFile)");
    load_fails("backends:\n- {name: a, url: 'http://a', tls: {certFile: /etc/hostname}}\n",
               CMA_ERR_CONFIG_VALUE,
               "cfg.yaml:2:35: backend a: tls.certFile and tls.keyFile go "
               "together");
    load_fails("backends:\n- {name: a, url: 'http://a', bearerTokenFile: /etc/hostname,\n"
               "   basicAuth: {username: u, passwordFile: /etc/hostname}}\n",
               CMA_ERR_CONFIG_VALUE,
               "cfg.yaml:2:3: backend a: bearerTokenFile and basicAuth: give one of them, the "
               "backend gets one Authorization header");
    load_fails("backends:\n- {name: a, url: 'http://a', kubeconfig: /etc/hostname, inCluster: "
               "true}\n",
               CMA_ERR_CONFIG_VALUE,
               "cfg.yaml:2:3: backend a: kubeconfig and inCluster: give one "
               "of them");
    load_fails("backends:\n- {name: a, url: 'http://a', tls: {caFile: /}}\n", CMA_ERR_CONFIG_VALUE,
               "cfg.yaml:2:44: tls.caFile: cannot read /: Is a directory");
    load_fails("backends: {name: a}\n", CMA_ERR_CONFIG_TYPE,
               "cfg.yaml:1:11: expected a list for backends, got a mapping");
    load_fails("resourceRules: {backend: b}\n", CMA_ERR_CONFIG_VALUE,
               "cfg.yaml:1:26: unknown backend \"b\" (no backends: list defines any)");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cma_config_load_string__empty_configs),
        cmocka_unit_test(test_cma_config_load_string__helm_default_rules),
        cmocka_unit_test(test_cma_config_load_string__seed001_gpu_rules),
        cmocka_unit_test(test_cma_config_load_string__resource_rules),
        cmocka_unit_test(test_cma_config_load_string__resource_rules_presence),
        cmocka_unit_test(test_cma_config_load_string__window_durations),
        cmocka_unit_test(test_cma_config_load_string__external_rules_namespaced),
        cmocka_unit_test(test_cma_config_load_string__json),
        cmocka_unit_test(test_cma_config_load_string__scalars_become_strings),
        cmocka_unit_test(test_cma_config_load_string__plain_flag),
        cmocka_unit_test(test_cma_config_load_string__null_items_are_zero_values),
        cmocka_unit_test(test_cma_config_load_string__second_document_is_a_warning),
        cmocka_unit_test(test_cma_config_load_string__empty_filter_side_counts_as_absent),
        cmocka_unit_test(test_cma_config_load_string__anchors_and_aliases),
        cmocka_unit_test(test_cma_config_load_string__merge_keys),
        cmocka_unit_test(test_cma_config_load_string__merge_key_errors),
        cmocka_unit_test(test_cma_config_load_string__unknown_keys),
        cmocka_unit_test(test_cma_config_load_string__wrong_shapes),
        cmocka_unit_test(test_cma_config_load_string__filter_checks),
        cmocka_unit_test(test_cma_config_load_string__nul_in_string),
        cmocka_unit_test(test_cma_config_load_string__yaml_errors_pass_through),
        cmocka_unit_test(test_cma_config_load_file__missing_file),
        cmocka_unit_test(test_cma_config_load_paths__one_file_is_load_file),
        cmocka_unit_test(test_cma_config_load_paths__files_merge_in_order),
        cmocka_unit_test(test_cma_config_load_paths__directory),
        cmocka_unit_test(test_cma_config_load_paths__resource_rules_twice),
        cmocka_unit_test(test_cma_config_load_paths__same_metric_from_two_files),
        cmocka_unit_test(test_cma_config_load_paths__same_external_metric_from_two_files),
        cmocka_unit_test(test_cma_config_load_paths__backends),
        cmocka_unit_test(test_cma_config_load_string__backend_metric_rules),
        cmocka_unit_test(test_cma_config_load_string__backend_errors),
        cmocka_unit_test(test_cma_config_load_string__max_sample_age),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
