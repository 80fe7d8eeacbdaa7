/* metricrule_test.c: a MetricRule's spec compiled: rules and externalRules through the config
 * compiler, backends taken out per rule, every query enforced with the namespace; errors name
 * the spec field and the line:column inside the field's text (templates, seriesQuery), the
 * rendered query when only the rendering does not parse, and the field a config-loader or
 * compiler error falls in (unknown keys, regexes). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "cma/metricrule.h"
#include "cma/rule.h"

static struct cma_metricrule_compiled *ok(const char *spec)
{
    struct cma_metricrule_compiled *c = NULL;
    struct cma_err err = {0};
    if (cma_metricrule_compile("shop", "namespace", spec, strlen(spec), &c, &err) != CMA_OK)
        fail_msg("%s: %s", spec, err.msg);
    return c;
}

/* Compiling spec fails with a message starting with want_prefix. */
static void refused(const char *spec, const char *want_prefix)
{
    struct cma_metricrule_compiled *c = NULL;
    struct cma_err err = {0};
    enum cma_errc rc = cma_metricrule_compile("shop", "namespace", spec, strlen(spec), &c, &err);
    if (rc == CMA_OK) {
        cma_metricrule_compiled_free(c);
        fail_msg("accepted: %s", spec);
    }
    if (strncmp(err.msg, want_prefix, strlen(want_prefix)) != 0)
        fail_msg("%s\n  got:  %s\n  want: %s...", spec, err.msg, want_prefix);
    assert_null(c);
    assert_int_equal(err.line, 0); /* the position is in the message, inside the field */
}

static void test_cma_metricrule_compile__rules_backends_enforced_queries(void **state)
{
    (void)state;
    struct cma_metricrule_compiled *c = ok(
        "{\"rules\":[{\"seriesQuery\":\"http_requests_total{namespace!=\\\"\\\",pod!=\\\"\\\"}\","
        "\"resources\":{\"overrides\":{\"namespace\":{\"resource\":\"namespace\"},"
        "\"pod\":{\"resource\":\"pod\"}}},\"name\":{\"matches\":\"^(.*)_total$\","
        "\"as\":\"${1}_per_second\"},"
        "\"metricsQuery\":\"sum(rate(<<.Series>>{<<.LabelMatchers>>}[2m])) by (<<.GroupBy>>)\"}],"
        "\"externalRules\":[{\"seriesQuery\":\"queue_depth\",\"backend\":\"mimir\","
        "\"resources\":{\"overrides\":{\"namespace\":{\"resource\":\"namespace\"}}},"
        "\"metricsQuery\":\"max(<<.Series>>{<<.LabelMatchers>>}) or on() vector(1)\"}]}");
    assert_int_equal(c->rules->n_rules, 1);
    assert_int_equal(c->rules->n_external_rules, 1);
    assert_int_equal(c->n_rule_backends, 1);
    assert_null(c->rule_backends[0]);
    assert_string_equal(c->external_backends[0], "mimir");
    assert_string_equal(c->rule_series[0],
                        "http_requests_total{namespace!=\"\",namespace=\"shop\",pod!=\"\"}");
    assert_string_equal(c->rule_queries[0],
                        "sum by (pod) (rate(series_name{namespace=\"shop\",namespace=\"shop\","
                        "pod=~\"p-1|p-2\"}[2m]))");
    assert_string_equal(c->external_series[0], "queue_depth{namespace=\"shop\"}");
    assert_string_equal(c->external_queries[0],
                        "max(series_name{namespace=\"shop\",namespace=\"shop\",pod=~\"p-1|p-2\"}) "
                        "or on () vector(1)");
    cma_metricrule_compiled_free(c);
}

static void test_cma_metricrule_compile__other_namespace_narrowed(void **state)
{
    (void)state;
    struct cma_metricrule_compiled *c =
        ok("{\"rules\":[{\"seriesQuery\":\"{__name__=~\\\".+\\\"}\","
           "\"resources\":{\"template\":\"<<.Resource>>\"},"
           "\"metricsQuery\":\"sum(rate(x{namespace=\\\"other\\\"}[5m:1m] offset 1m))\"}]}");
    assert_string_equal(c->rule_series[0], "{__name__=~\".+\",namespace=\"shop\"}");
    assert_string_equal(c->rule_queries[0],
                        "sum(rate(x{namespace=\"other\",namespace=\"shop\"}[5m:1m] offset 1m))");
    cma_metricrule_compiled_free(c);
}

static void test_cma_metricrule_compile__errors_name_field_and_position(void **state)
{
    (void)state;
    /* template syntax: line:column inside the field's text */
    refused("{\"rules\":[{\"seriesQuery\":\"a\",\"metricsQuery\":\"sum(<<.Series>>{<<."
            "LabelMatchers)}\"}]}",
            "spec.rules[0].metricsQuery: 1:");
    refused("{\"externalRules\":[{\"seriesQuery\":\"a\","
            "\"metricsQuery\":\"sum(\\n  <<.Series\"}]}",
            "spec.externalRules[0].metricsQuery: 2:");
    /* seriesQuery that is not PromQL */
    refused("{\"rules\":[{\"seriesQuery\":\"a\",\"metricsQuery\":\"a\"},"
            "{\"seriesQuery\":\"http_total{namespace!=\\\"\\\"\",\"metricsQuery\":\"a\"}]}",
            "spec.rules[1].seriesQuery: 1:");
    /* a template that parses but renders to text that is not PromQL */
    refused(
        "{\"rules\":[{\"seriesQuery\":\"a\",\"resources\":{\"template\":\"<<.Resource>>\"},"
        "\"metricsQuery\":\"sum(rate(<<.Series>>{<<.LabelMatchers>>}[2m]) by (<<.GroupBy>>)\"}]}",
        "spec.rules[0].metricsQuery: rendered as \"sum(rate(series_name{");
    /* the config loader's and compiler's errors, mapped to the field */
    refused("{\"rules\":[{\"seriesQuery\":\"a\",\"metricsQuery\":\"a\",\"bogus\":1}]}",
            "spec.rules[0].bogus: ");
    refused("{\"rules\":[{\"seriesQuery\":\"a\",\"metricsQuery\":\"a\","
            "\"name\":{\"matches\":\"((\"}}]}",
            "spec.rules[0].name.matches: ");
    refused("{\"rules\":[{\"seriesQuery\":\"a\",\"metricsQuery\":\"a\","
            "\"seriesFilters\":[{\"is\":\"x\"},{\"isNot\":\"[\"}]}]}",
            "spec.rules[0].seriesFilters[1].isNot: ");
    refused("{\"resourceRules\":{}}", "spec");
    refused("[1]", "spec: not a JSON object");
    refused("{\"rules\":[]", "spec: not a JSON object");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cma_metricrule_compile__rules_backends_enforced_queries),
        cmocka_unit_test(test_cma_metricrule_compile__other_namespace_narrowed),
        cmocka_unit_test(test_cma_metricrule_compile__errors_name_field_and_position),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
