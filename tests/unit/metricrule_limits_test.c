/* metricrule_limits_test.c: the per-namespace decisions over MetricRules
 * (src/rules/metricrule_limits.c): the namespace selector over a Namespace's labels, the
 * admission of a namespace's MetricRules oldest first under the rule and metric limits (whatever
 * order they come in), and the query time limit clamped to --metric-rules-max-query-timeout.
 * The namespace selection is also taken the way the controller can get it without labels in
 * hand: a watch cache of Namespaces (clients/objcache.c, cluster-scoped objects) listing the
 * names the selector matches, which must agree with the pure check on each namespace. */
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "cma/kube.h"
#include "cma/metricrule_limits.h"
#include "cma/objcache.h"
#include "cma/selector.h"

static struct cma_selector *sel(const char *text)
{
    struct cma_selector *s = NULL;
    struct cma_err err = {0};
    if (cma_selector_parse(text, strlen(text), &s, &err) != CMA_OK)
        fail_msg("%s: %s", text, err.msg);
    return s;
}

static void test_cma_metricrule_namespace_is_allowed__selector(void **state)
{
    (void)state;
    const char *names[] = {"team", "metric-rules"};
    const char *values[] = {"shop", "on"};
    /* no selector, or an empty one: every namespace, labelled or not */
    assert_true(cma_metricrule_namespace_is_allowed(NULL, NULL, NULL, 0));
    struct cma_selector *empty = sel("");
    assert_true(cma_metricrule_namespace_is_allowed(empty, NULL, NULL, 0));
    cma_selector_free(empty);
    struct cma_selector *on = sel("metric-rules=on");
    assert_true(cma_metricrule_namespace_is_allowed(on, names, values, 2));
    assert_false(cma_metricrule_namespace_is_allowed(on, names, values, 1));
    assert_false(cma_metricrule_namespace_is_allowed(on, NULL, NULL, 0));
    cma_selector_free(on);
    struct cma_selector *not_sys = sel("team,team notin (kube-system,monitoring)");
    assert_true(cma_metricrule_namespace_is_allowed(not_sys, names, values, 2));
    const char *sys_values[] = {"monitoring", "on"};
    assert_false(cma_metricrule_namespace_is_allowed(not_sys, names, sys_values, 2));
    cma_selector_free(not_sys);
    struct cma_selector *absent = sel("!frozen");
    assert_true(cma_metricrule_namespace_is_allowed(absent, names, values, 2));
    const char *frozen[] = {"frozen"}, *yes[] = {""};
    assert_false(cma_metricrule_namespace_is_allowed(absent, frozen, yes, 1));
    cma_selector_free(absent);
}

/* Namespaces as a LIST gives them (cluster-scoped: no namespace), in a cache fed by hand. */
static void test_cma_metricrule_namespace_is_allowed__agrees_with_namespace_cache(void **state)
{
    (void)state;
    char *k_team[] = {"team"}, *v_shop[] = {"shop"}, *v_bill[] = {"billing"};
    char *k_two[] = {"metric-rules", "team"}, *v_two[] = {"off", "ops"};
    struct cma_kube_object objs[] = {
        {.name = "shop", .label_names = k_team, .label_values = v_shop, .n_labels = 1},
        {.name = "billing", .label_names = k_team, .label_values = v_bill, .n_labels = 1},
        {.name = "ops", .label_names = k_two, .label_values = v_two, .n_labels = 2},
        {.name = "kube-system"},
    };
    struct cma_objcache *c = NULL;
    assert_int_equal(cma_objcache_new(NULL, "", "v1", "namespaces", &c, NULL), CMA_OK);
    assert_int_equal(cma_objcache_replace(c, objs, 4, "7", NULL), CMA_OK);
    static const char *const sels[] = {"", "team", "team in (shop,ops)", "metric-rules!=off",
                                       "!team"};
    static const char *const want[] = {"billing kube-system ops shop", "billing ops shop",
                                       "ops shop", "billing kube-system shop", "kube-system"};
    for (size_t i = 0; i < sizeof(sels) / sizeof(sels[0]); i++) {
        struct cma_selector *s = sel(sels[i]);
        char **names = NULL;
        size_t n = 0;
        assert_int_equal(cma_objcache_list_names(c, NULL, s, &names, &n, NULL), CMA_OK);
        char got[256] = "";
        for (size_t j = 0; j < n; j++) {
            strcat(strcat(got, j ? " " : ""), names[j]);
            free(names[j]);
        }
        free(names);
        assert_string_equal(got, want[i]);
        for (size_t j = 0; j < 4; j++) { /* the pure check says the same of each namespace */
            char word[64], padded[260];
            snprintf(word, sizeof(word), " %s ", objs[j].name);
            snprintf(padded, sizeof(padded), " %s ", got);
            bool listed = strstr(padded, word) != NULL;
            assert_int_equal(cma_metricrule_namespace_is_allowed(
                                 s, (const char *const *)objs[j].label_names,
                                 (const char *const *)objs[j].label_values, objs[j].n_labels),
                             listed);
        }
        cma_selector_free(s);
    }
    cma_objcache_free(c);
}

static void test_cma_metricrule_candidate_cmp__oldest_then_name(void **state)
{
    (void)state;
    struct cma_metricrule_candidate a = {.name = "b", .creation_ms = 1000};
    struct cma_metricrule_candidate b = {.name = "a", .creation_ms = 2000};
    struct cma_metricrule_candidate c = {.name = "a", .creation_ms = 1000};
    assert_true(cma_metricrule_candidate_cmp(&a, &b) < 0);
    assert_true(cma_metricrule_candidate_cmp(&b, &a) > 0);
    assert_true(cma_metricrule_candidate_cmp(&c, &a) < 0);
    assert_int_equal(cma_metricrule_candidate_cmp(&a, &a), 0);
}

/* Candidates given newest first (the admission must not depend on the caller's order). */
static void test_cma_metricrule_admit__oldest_win(void **state)
{
    (void)state;
    struct cma_metricrule_candidate c[] = {
        {.name = "e", .creation_ms = 5000, .eligible = true, .n_metrics = 1},
        {.name = "d", .creation_ms = 4000, .eligible = true, .n_metrics = 1},
        {.name = "broken", .creation_ms = 500, .eligible = false, .n_metrics = 0},
        {.name = "c", .creation_ms = 3000, .eligible = true, .n_metrics = 1},
        {.name = "b2", .creation_ms = 1000, .eligible = true, .n_metrics = 1},
        {.name = "b1", .creation_ms = 1000, .eligible = true, .n_metrics = 1},
    };
    enum cma_metricrule_admission d[6];
    size_t total = 0;
    struct cma_metricrule_limits lim = {.max_per_namespace = 3, .max_metrics_per_namespace = 0};
    assert_int_equal(cma_metricrule_admit(&lim, c, 6, d, &total, NULL), CMA_OK);
    assert_int_equal(d[0], CMA_METRICRULE_ADMIT_TOO_MANY_RULES);
    assert_int_equal(d[1], CMA_METRICRULE_ADMIT_TOO_MANY_RULES);
    assert_int_equal(d[2], CMA_METRICRULE_ADMIT_NOT_ELIGIBLE); /* takes no slot */
    assert_int_equal(d[3], CMA_METRICRULE_ADMIT_ACCEPTED);
    assert_int_equal(d[4], CMA_METRICRULE_ADMIT_ACCEPTED);
    assert_int_equal(d[5], CMA_METRICRULE_ADMIT_ACCEPTED); /* b1 before b2 at the same time */
    assert_int_equal(total, 3);
    /* the same limit of 2: the tie is broken by name */
    lim.max_per_namespace = 2;
    assert_int_equal(cma_metricrule_admit(&lim, c, 6, d, NULL, NULL), CMA_OK);
    assert_int_equal(d[5], CMA_METRICRULE_ADMIT_ACCEPTED);
    assert_int_equal(d[4], CMA_METRICRULE_ADMIT_ACCEPTED);
    assert_int_equal(d[3], CMA_METRICRULE_ADMIT_TOO_MANY_RULES);
    /* no limits: every eligible one */
    struct cma_metricrule_limits none = {0};
    assert_int_equal(cma_metricrule_admit(&none, c, 6, d, &total, NULL), CMA_OK);
    for (int i = 0; i < 6; i++)
        assert_int_equal(d[i], i == 2 ? CMA_METRICRULE_ADMIT_NOT_ELIGIBLE
                                      : CMA_METRICRULE_ADMIT_ACCEPTED);
    assert_int_equal(total, 5);
    /* nothing to decide */
    assert_int_equal(cma_metricrule_admit(&lim, c, 0, d, &total, NULL), CMA_OK);
    assert_int_equal(total, 0);
}

static void test_cma_metricrule_admit__metric_budget(void **state)
{
    (void)state;
    struct cma_metricrule_candidate c[] = {
        {.name = "old", .creation_ms = 1, .eligible = true, .n_metrics = 6},
        {.name = "mid", .creation_ms = 2, .eligible = true, .n_metrics = 5},   /* 11 > 10 */
        {.name = "small", .creation_ms = 3, .eligible = true, .n_metrics = 4}, /* fits: 10 */
        {.name = "late", .creation_ms = 4, .eligible = true, .n_metrics = 1},  /* 11 > 10 */
        {.name = "empty", .creation_ms = 5, .eligible = true, .n_metrics = 0}, /* fits */
        {.name = "huge", .creation_ms = 0, .eligible = true, .n_metrics = SIZE_MAX},
    };
    enum cma_metricrule_admission d[6];
    size_t total = 0;
    struct cma_metricrule_limits lim = {.max_per_namespace = 20, .max_metrics_per_namespace = 10};
    assert_int_equal(cma_metricrule_admit(&lim, c, 6, d, &total, NULL), CMA_OK);
    assert_int_equal(d[0], CMA_METRICRULE_ADMIT_ACCEPTED);
    assert_int_equal(d[1], CMA_METRICRULE_ADMIT_TOO_MANY_METRICS);
    assert_int_equal(d[2], CMA_METRICRULE_ADMIT_ACCEPTED);
    assert_int_equal(d[3], CMA_METRICRULE_ADMIT_TOO_MANY_METRICS);
    assert_int_equal(d[4], CMA_METRICRULE_ADMIT_ACCEPTED);
    assert_int_equal(d[5], CMA_METRICRULE_ADMIT_TOO_MANY_METRICS); /* no overflow */
    assert_int_equal(total, 10);
    /* the rule limit is checked first: a full namespace says TooManyRules */
    lim.max_per_namespace = 1;
    assert_int_equal(cma_metricrule_admit(&lim, c, 6, d, &total, NULL), CMA_OK);
    assert_int_equal(d[5], CMA_METRICRULE_ADMIT_TOO_MANY_METRICS);
    assert_int_equal(d[0], CMA_METRICRULE_ADMIT_ACCEPTED);
    assert_int_equal(d[2], CMA_METRICRULE_ADMIT_TOO_MANY_RULES);
    assert_int_equal(d[4], CMA_METRICRULE_ADMIT_TOO_MANY_RULES);
    assert_int_equal(total, 6);
}

static void test_cma_metricrule_query_timeout_ms__clamped(void **state)
{
    (void)state;
    assert_int_equal(cma_metricrule_query_timeout_ms(10000, 30000), 10000);
    assert_int_equal(cma_metricrule_query_timeout_ms(60000, 30000), 30000);
    assert_int_equal(cma_metricrule_query_timeout_ms(30000, 30000), 30000);
    assert_int_equal(cma_metricrule_query_timeout_ms(0, 30000), 30000);
    assert_int_equal(cma_metricrule_query_timeout_ms(60000, 0), 60000);
    assert_int_equal(cma_metricrule_query_timeout_ms(-1, 0), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cma_metricrule_namespace_is_allowed__selector),
        cmocka_unit_test(test_cma_metricrule_namespace_is_allowed__agrees_with_namespace_cache),
        cmocka_unit_test(test_cma_metricrule_candidate_cmp__oldest_then_name),
        cmocka_unit_test(test_cma_metricrule_admit__oldest_win),
        cmocka_unit_test(test_cma_metricrule_admit__metric_budget),
        cmocka_unit_test(test_cma_metricrule_query_timeout_ms__clamped),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
