/* metricrule_ctl_test.c: the MetricRule controller: the merged ruleset (config rules first at
 * their own indexes, then each accepted MetricRule's rules with their owner and enforced
 * seriesQuery, the older MetricRule of a namespace later), published once per change and not
 * for an unchanged update, the previous compile kept while uid/generation/spec are the same,
 * refused specs and backends reported as outcomes, a config reload re-merging, and a merged
 * ruleset outliving the controller. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "cma/backend.h"
#include "cma/config.h"
#include "cma/metricrule_ctl.h"
#include "cma/metricrule_watch.h"
#include "cma/rule.h"

#define CONFIG                                                                                     \
    "rules:\n"                                                                                     \
    "- seriesQuery: 'cfg_total{namespace!=\"\",pod!=\"\"}'\n"                                      \
    "  resources: {template: <<.Resource>>}\n"                                                     \
    "  metricsQuery: 'sum(<<.Series>>{<<.LabelMatchers>>}) by (<<.GroupBy>>)'\n"                   \
    "backends:\n"                                                                                  \
    "- name: mimir\n"                                                                              \
    "  url: http://127.0.0.1:1\n"

/* the tail of an external rule naming the namespace label */
#define EXT_TAIL                                                                                   \
    "\"resources\":{\"overrides\":{\"namespace\":{\"resource\":\"namespace\"}}},"                  \
    "\"metricsQuery\":\"sum(<<.Series>>{<<.LabelMatchers>>})\"}]}"

#define SPEC(series)                                                                               \
    "{\"rules\":[{\"seriesQuery\":\"" series "\",\"resources\":{\"template\":\"<<.Resource>>\"},"  \
    "\"metricsQuery\":\"sum(<<.Series>>{<<.LabelMatchers>>}) by (<<.GroupBy>>)\"}]}"

struct published {
    int calls;
    const struct cma_ruleset *last; /* a reference */
};

static void on_publish(void *ctx, const struct cma_ruleset *rs)
{
    struct published *p = ctx;
    p->calls++;
    cma_ruleset_unref(p->last);
    p->last = cma_ruleset_ref(rs);
}

struct fixture {
    struct cma_config *cfg;
    struct cma_ruleset *rules;
    struct cma_metricrule_ctl *ctl;
    struct published pub;
    const char *names[2];
    struct cma_backend queries[2];
};

static void setup_fixture(struct fixture *f, const struct cma_metricrule_ctl_backend_policy *pol)
{
    struct cma_err err = {0};
    memset(f, 0, sizeof(*f));
    if (cma_config_load_string("c.yaml", CONFIG, strlen(CONFIG), &f->cfg, &err) != CMA_OK ||
        cma_ruleset_compile(f->cfg, &f->rules, &err) != CMA_OK)
        fail_msg("config: %s", err.msg);
    f->names[0] = NULL;
    f->names[1] = "mimir";
    if (cma_ruleset_bind_backends(f->rules, f->names, f->queries, NULL, 2, &err) != CMA_OK)
        fail_msg("bind: %s", err.msg);
    struct cma_metricrule_ctl_config mc = {
        .ns_label = "namespace",
        .backend_names = f->names,
        .queries = f->queries,
        .policies = pol,
        .n_backends = 2,
        .publish = on_publish,
        .ctx = &f->pub,
    };
    if (cma_metricrule_ctl_new(&mc, f->rules, &f->ctl, &err) != CMA_OK)
        fail_msg("new: %s", err.msg);
}

static void teardown_fixture(struct fixture *f)
{
    cma_metricrule_ctl_free(f->ctl);
    cma_ruleset_unref(f->pub.last);
    cma_ruleset_free(f->rules);
    cma_config_free(f->cfg);
}

static struct cma_metricrule obj(const char *ns, const char *name, const char *uid, int64_t gen,
                                 int64_t created, const char *spec)
{
    return (struct cma_metricrule){
        .namespace_ = (char *)ns,
        .name = (char *)name,
        .uid = (char *)uid,
        .resource_version = (char *)"1",
        .creation_timestamp = (char *)"",
        .creation_ms = created,
        .generation = gen,
        .spec_json = (char *)spec,
    };
}

static void update(struct fixture *f, const struct cma_metricrule *objs, size_t n)
{
    struct cma_err err = {0};
    if (cma_metricrule_ctl_update(f->ctl, objs, n, &err) != CMA_OK)
        fail_msg("update: %s", err.msg);
}

static void test_metricrule_ctl__merge_owner_order_enforced(void **state)
{
    (void)state;
    struct fixture f;
    setup_fixture(&f, NULL);
    struct cma_metricrule objs[] = {
        /* sorted by namespace then name, as the watch's snapshot; b-old is older than a-new */
        obj("shop", "a-new", "u1", 1, 2000, SPEC("q_total")),
        obj("shop", "b-old", "u2", 1, 1000, SPEC("q_total")),
        obj("web", "w", "u3", 1, 500, SPEC("w_total")),
    };
    update(&f, objs, 3);
    assert_int_equal(f.pub.calls, 1);
    const struct cma_ruleset *rs = f.pub.last;
    assert_non_null(rs);
    assert_int_equal(rs->n_rules, 4);
    assert_ptr_equal(rs->base, f.rules);
    /* the config's rule first, same index, no owner, its own seriesQuery */
    assert_null(rs->rules[0].owner);
    assert_int_equal(rs->rules[0].index, 0);
    assert_ptr_equal(rs->rules[0].cfg, f.rules->rules[0].cfg);
    /* shop: the newer object first, the older one later (it wins) */
    assert_string_equal(rs->rules[1].owner->name, "a-new");
    assert_string_equal(rs->rules[2].owner->name, "b-old");
    assert_string_equal(rs->rules[3].owner->namespace_, "web");
    assert_string_equal(rs->rules[3].owner->label, "namespace");
    for (size_t i = 1; i < 4; i++) {
        assert_int_equal(rs->rules[i].index, i);
        assert_int_equal(rs->rules[i].backend.index, 0);
        assert_ptr_equal(rs->rules[i].backend.queries, &f.queries[0]);
    }
    assert_string_equal(rs->rules[1].series_query, "q_total{namespace=\"shop\"}");
    assert_string_equal(rs->rules[3].series_query, "w_total{namespace=\"web\"}");
    /* the same objects again: nothing compiled, nothing published */
    update(&f, objs, 3);
    assert_int_equal(f.pub.calls, 1);
    /* a new generation of one: published, the others' compiles kept (same rule pointers) */
    const struct cma_naming *kept = rs->rules[3].naming;
    objs[0] = obj("shop", "a-new", "u1", 2, 2000, SPEC("r_total"));
    update(&f, objs, 3);
    assert_int_equal(f.pub.calls, 2);
    rs = f.pub.last;
    assert_ptr_equal(rs->rules[3].naming, kept);
    assert_string_equal(rs->rules[1].series_query, "r_total{namespace=\"shop\"}");
    /* deleted: gone from the merge */
    update(&f, &objs[2], 1);
    assert_int_equal(f.pub.calls, 3);
    assert_int_equal(f.pub.last->n_rules, 2);
    teardown_fixture(&f);
}

static void test_metricrule_ctl__refused_specs_and_backends(void **state)
{
    (void)state;
    struct cma_metricrule_ctl_backend_policy pol[2] = {
        {.allowed = true},
        {.allowed = true, .namespaces = (const char *const[]){"web"}, .n_namespaces = 1},
    };
    struct fixture f;
    setup_fixture(&f, pol);
    struct cma_metricrule objs[] = {
        obj("shop", "bad", "u1", 3, 1,
            "{\"rules\":[{\"seriesQuery\":\"x{\",\"metricsQuery\":\"x\"}]}"),
        obj("shop", "mimir", "u2", 1, 1,
            "{\"externalRules\":[{\"seriesQuery\":\"q\",\"backend\":\"mimir\"," EXT_TAIL),
        obj("shop", "nope", "u3", 1, 1,
            "{\"externalRules\":[{\"seriesQuery\":\"q\",\"backend\":\"nope\"," EXT_TAIL),
        obj("web", "mimir", "u4", 1, 1,
            "{\"externalRules\":[{\"seriesQuery\":\"q\",\"backend\":\"mimir\"," EXT_TAIL),
    };
    update(&f, objs, 4);
    assert_int_equal(f.pub.calls, 1);
    const struct cma_ruleset *rs = f.pub.last;
    assert_int_equal(rs->n_rules, 1); /* the config's only */
    assert_int_equal(rs->n_external_rules, 1);
    assert_string_equal(rs->external_rules[0].owner->namespace_, "web");
    assert_int_equal(rs->external_rules[0].backend.index, 1);
    assert_ptr_equal(rs->external_rules[0].backend.queries, &f.queries[1]);
    struct cma_metricrule_ctl_outcome *o = NULL;
    size_t n = 0;
    struct cma_err err = {0};
    assert_int_equal(cma_metricrule_ctl_outcomes(f.ctl, &o, &n, &err), CMA_OK);
    assert_int_equal(n, 4);
    assert_false(o[0].accepted);
    assert_string_equal(o[0].reason, "InvalidSpec");
    assert_int_equal(o[0].generation, 3);
    assert_non_null(strstr(o[0].message, "spec.rules[0].seriesQuery: 1:"));
    assert_false(o[1].accepted);
    assert_string_equal(o[1].reason, "BackendNotAllowed");
    assert_non_null(strstr(o[1].message, "spec.externalRules[0].backend: backend \"mimir\" is "
                                         "not allowed for MetricRules in namespace shop"));
    assert_false(o[2].accepted);
    assert_non_null(strstr(o[2].message, "backend \"nope\" is not defined"));
    assert_true(o[3].accepted);
    assert_string_equal(o[3].reason, "Accepted");
    assert_string_equal(o[3].message, "");
    cma_metricrule_ctl_outcomes_free(o, n);
    teardown_fixture(&f);
}

static void test_metricrule_ctl__config_reload_and_lifetime(void **state)
{
    (void)state;
    struct fixture f;
    setup_fixture(&f, NULL); /* no policies: the flags' backend only */
    struct cma_metricrule objs[] = {obj("shop", "a", "u1", 1, 1, SPEC("q_total"))};
    update(&f, objs, 1);
    assert_int_equal(f.pub.calls, 1);
    /* a reloaded config: re-merged at once with the MetricRule kept */
    struct cma_config *cfg2 = NULL;
    struct cma_ruleset *rs2 = NULL;
    struct cma_err err = {0};
    const char *text = "externalRules:\n- seriesQuery: 'e'\n  metricsQuery: 'sum(<<.Series>>)'\n";
    assert_int_equal(cma_config_load_string("c2.yaml", text, strlen(text), &cfg2, &err), CMA_OK);
    assert_int_equal(cma_ruleset_compile(cfg2, &rs2, &err), CMA_OK);
    cma_ruleset_own_config(rs2, cfg2);
    assert_int_equal(cma_metricrule_ctl_set_config(f.ctl, rs2, &err), CMA_OK);
    cma_ruleset_free(rs2); /* the controller and the merge hold theirs */
    assert_int_equal(f.pub.calls, 2);
    const struct cma_ruleset *rs = f.pub.last;
    assert_int_equal(rs->n_rules, 1);
    assert_int_equal(rs->n_external_rules, 1);
    assert_null(rs->external_rules[0].owner);
    assert_string_equal(rs->rules[0].owner->name, "a");
    const struct cma_ruleset *cur = cma_metricrule_ctl_current(f.ctl);
    assert_ptr_equal(cur, rs);
    cma_ruleset_unref(cur);
    /* a named backend without a policy is refused */
    struct cma_metricrule named[] = {
        obj("shop", "m", "u9", 1, 1,
            "{\"externalRules\":[{\"seriesQuery\":\"q\",\"backend\":\"mimir\"," EXT_TAIL)};
    update(&f, named, 1);
    assert_int_equal(f.pub.last->n_external_rules, 1); /* the config's only */
    /* the merged ruleset outlives the controller (and its parts live with it) */
    update(&f, objs, 1);
    const struct cma_ruleset *held = cma_ruleset_ref(f.pub.last);
    cma_metricrule_ctl_free(f.ctl);
    f.ctl = NULL;
    assert_string_equal(held->rules[0].owner->namespace_, "shop");
    assert_string_equal(held->rules[0].series_query, "q_total{namespace=\"shop\"}");
    cma_ruleset_unref(held);
    teardown_fixture(&f);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_metricrule_ctl__merge_owner_order_enforced),
        cmocka_unit_test(test_metricrule_ctl__refused_specs_and_backends),
        cmocka_unit_test(test_metricrule_ctl__config_reload_and_lifetime),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
