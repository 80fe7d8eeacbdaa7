/* metricrule_ctl_test.c: the MetricRule controller: the merged ruleset (config rules first at
 * their own indexes, then each accepted MetricRule's rules with their owner and enforced
 * seriesQuery, the older MetricRule of a namespace later), published once per change and not
 * for an unchanged update, the previous compile kept while uid/generation/spec are the same,
 * refused specs and backends reported as outcomes, a config reload re-merging, and a merged
 * ruleset outliving the controller. The status path: the metrics each MetricRule serves read from
 * a catalog of the current merge only, a Conflict naming the config rule's file:line:column, no
 * status to write once the stored one says the same; a metric lost to an older MetricRule a
 * Conflict naming it; the limits (TooManyRules, TooManyMetrics
 * from discovery's counts, kept while left out); the namespace selector over a watch cache of
 * Namespaces (nothing served nor reported before it is synced, a label change picked up). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "cma/apiresource.h"
#include "cma/backend.h"
#include "cma/catalog.h"
#include "cma/config.h"
#include "cma/kube.h"
#include "cma/metricrule_ctl.h"
#include "cma/metricrule_watch.h"
#include "cma/objcache.h"
#include "cma/restmapper.h"
#include "cma/rule.h"
#include "cma/selector.h"
#include "testlib.h"

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

/* tenantFromNamespace on backend mimir: each MetricRule's rule on it is sent as its namespace;
 * its rules on the flags' backend (no tenantFromNamespace) and the config's rules are not. */
static void test_metricrule_ctl__tenant_from_namespace(void **state)
{
    (void)state;
    struct cma_metricrule_ctl_backend_policy pol[2] = {
        {.allowed = true},
        {.allowed = true, .tenant_from_namespace = true},
    };
    struct fixture f;
    setup_fixture(&f, pol);
    struct cma_metricrule objs[] = {
        obj("shop", "m", "u1", 1, 1,
            "{\"rules\":[{\"seriesQuery\":\"q_total\",\"backend\":\"mimir\","
            "\"resources\":{\"template\":\"<<.Resource>>\"},"
            "\"metricsQuery\":\"sum(<<.Series>>{<<.LabelMatchers>>}) by (<<.GroupBy>>)\"}],"
            "\"externalRules\":[{\"seriesQuery\":\"e\",\"backend\":\"mimir\"," EXT_TAIL),
        obj("web", "flags", "u2", 1, 1, SPEC("w_total")),
        obj("web", "mimir", "u3", 1, 2,
            "{\"externalRules\":[{\"seriesQuery\":\"e\",\"backend\":\"mimir\"," EXT_TAIL),
    };
    update(&f, objs, 3);
    const struct cma_ruleset *rs = f.pub.last;
    assert_non_null(rs);
    assert_int_equal(rs->n_rules, 3);
    assert_null(rs->rules[0].owner); /* the config's rule: the backend's own header */
    assert_null(rs->rules[0].backend.tenant);
    assert_string_equal(rs->rules[1].owner->namespace_, "shop");
    assert_int_equal(rs->rules[1].backend.index, 1);
    assert_string_equal(rs->rules[1].backend.tenant, "shop");
    assert_string_equal(rs->rules[2].owner->namespace_, "web"); /* on the flags' backend */
    assert_int_equal(rs->rules[2].backend.index, 0);
    assert_null(rs->rules[2].backend.tenant);
    assert_int_equal(rs->n_external_rules, 2);
    assert_string_equal(rs->external_rules[0].backend.tenant, "shop");
    assert_string_equal(rs->external_rules[1].backend.tenant, "web");
    /* the same seriesQuery as two tenants: two listings (their enforced text differs anyway) */
    assert_string_equal(rs->external_rules[0].series_query, "e{namespace=\"shop\"}");
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

/* ---- status, limits and the namespace selector ------------------------------------------- */

static void setup_with(struct fixture *f, const struct cma_selector *sel, struct cma_objcache *nsc,
                       struct cma_metricrule_limits limits)
{
    struct cma_err err = {0};
    memset(f, 0, sizeof(*f));
    if (cma_config_load_string("c.yaml", CONFIG, strlen(CONFIG), &f->cfg, &err) != CMA_OK ||
        cma_ruleset_compile(f->cfg, &f->rules, &err) != CMA_OK)
        fail_msg("config: %s", err.msg);
    f->names[1] = "mimir";
    if (cma_ruleset_bind_backends(f->rules, f->names, f->queries, NULL, 2, &err) != CMA_OK)
        fail_msg("bind: %s", err.msg);
    struct cma_metricrule_ctl_config mc = {
        .ns_label = "namespace",
        .backend_names = f->names,
        .queries = f->queries,
        .n_backends = 2,
        .publish = on_publish,
        .ctx = &f->pub,
        .ns_selector = sel,
        .namespaces = nsc,
        .limits = limits,
    };
    if (cma_metricrule_ctl_new(&mc, f->rules, &f->ctl, &err) != CMA_OK)
        fail_msg("new: %s", err.msg);
}

/* The rule of the last merge owned by MetricRule name (NULL: the config's first). */
static const struct cma_rule *rule_of(const struct fixture *f, const char *name)
{
    const struct cma_ruleset *rs = f->pub.last;
    for (size_t i = 0; i < rs->n_rules; i++)
        if (name ? rs->rules[i].owner && strcmp(rs->rules[i].owner->name, name) == 0
                 : !rs->rules[i].owner)
            return &rs->rules[i];
    fail_msg("no rule of %s in the merge", name ? name : "the config");
    return NULL;
}

/* A catalog of the last merge: pods/<metric> per (rule owner, metric) pair. */
static struct cma_catalog *catalog_of(const struct fixture *f, struct cma_restmapper *m,
                                      const char *const *owners, const char *const *metrics,
                                      size_t n)
{
    struct cma_catalog_builder *b = NULL;
    assert_int_equal(cma_catalog_builder_new(m, &b, NULL), CMA_OK);
    const struct cma_api_resource *pods = cma_restmapper_resource_for(m, "", "pods");
    for (size_t i = 0; i < n; i++)
        assert_int_equal(cma_catalog_builder_add(b, pods, metrics[i], strlen(metrics[i]), "s", 1,
                                                 rule_of(f, owners[i])),
                         CMA_OK);
    struct cma_catalog *c = NULL;
    assert_int_equal(cma_catalog_build(b, 1, &c, NULL), CMA_OK);
    cma_catalog_hold_rules(c, f->pub.last);
    return c;
}

static void observe(struct fixture *f, struct cma_catalog *cat, bool want_current)
{
    bool current = !want_current;
    struct cma_err err = {0};
    assert_int_equal(cma_metricrule_ctl_observe(f->ctl, cat, &current, &err), CMA_OK);
    assert_int_equal(current, want_current);
}

static size_t statuses(struct fixture *f, const struct cma_metricrule *objs, size_t n,
                       struct cma_metricrule_ctl_status **ret)
{
    size_t k = 0;
    struct cma_err err = {0};
    assert_int_equal(cma_metricrule_ctl_statuses(f->ctl, objs, n, 1700000000000, ret, &k, &err),
                     CMA_OK);
    return k;
}

static void test_metricrule_ctl__status_metrics_conflict_no_rewrite(void **state)
{
    (void)state;
    struct fixture f;
    setup_with(&f, NULL, NULL, (struct cma_metricrule_limits){0, 0});
    struct cma_metricrule objs[] = {
        obj("shop", "a", "u1", 2, 2000, SPEC("q_total")),
        obj("shop", "b", "u2", 1, 1000, SPEC("cfg_total")),
        obj("shop", "bad", "u3", 4, 1000, "{\"rules\":[{\"seriesQuery\":\"x{\"}]}"),
    };
    update(&f, objs, 3);
    struct cma_metricrule_ctl_status *st = NULL;
    /* before discovery listed the merge: only the refused one is known */
    assert_int_equal(statuses(&f, objs, 3, &st), 1);
    assert_string_equal(st[0].name, "bad");
    assert_non_null(strstr(st[0].json, "\"reason\":\"InvalidSpec\""));
    assert_non_null(strstr(st[0].json, "spec.rules[0].seriesQuery: 1:"));
    assert_non_null(strstr(st[0].json, "\"observedGeneration\":4"));
    cma_metricrule_ctl_statuses_free(st, 1);
    struct cma_restmapper *m = test_mapper(test_resources_default, 8);
    /* a catalog of an older merge is not read */
    const char *own_old[] = {"a"}, *met_old[] = {"q"};
    struct cma_catalog *cat = catalog_of(&f, m, own_old, met_old, 1);
    cma_catalog_hold_rules(cat, f.rules);
    observe(&f, cat, false);
    cma_catalog_unref(cat);
    /* a's q twice (two series), b's cfg lost to the config's rule */
    const char *owners[] = {"a", "a", NULL, "b"}, *metrics[] = {"q", "q", "cfg", "cfg"};
    cat = catalog_of(&f, m, owners, metrics, 4);
    observe(&f, cat, true);
    size_t k = statuses(&f, objs, 3, &st);
    assert_int_equal(k, 3);
    assert_string_equal(st[0].name, "a");
    assert_non_null(strstr(st[0].json, "\"metrics\":[\"q\"]"));
    assert_non_null(strstr(st[0].json, "\"reason\":\"Accepted\""));
    assert_non_null(strstr(st[0].json, "\"observedGeneration\":2"));
    assert_string_equal(st[1].name, "b");
    char want[256];
    const struct cma_pos *pos = &f.rules->rules[0].cfg->pos;
    snprintf(want, sizeof(want), "pods/cfg is served by the config file's rule %s:%u:%u", pos->file,
             pos->line, pos->column);
    assert_non_null(strstr(st[1].json, want));
    assert_non_null(strstr(st[1].json, "\"reason\":\"Conflict\""));
    assert_non_null(strstr(st[1].json, "\"metrics\":[]"));
    /* written and stored: nothing more to write, also for another clock */
    struct cma_metricrule stored[3];
    memcpy(stored, objs, sizeof(stored));
    for (size_t i = 0; i < 3; i++)
        stored[i].status_json = st[i].json;
    struct cma_metricrule_ctl_status *again = NULL;
    assert_int_equal(cma_metricrule_ctl_statuses(f.ctl, stored, 3, 1800000000000, &again, &k, NULL),
                     CMA_OK);
    assert_int_equal(k, 0);
    cma_metricrule_ctl_statuses_free(again, k);
    /* a new generation of a is not known until it is applied, then needs its own status */
    stored[0].generation = 3;
    assert_int_equal(cma_metricrule_ctl_statuses(f.ctl, stored, 3, 1, &again, &k, NULL), CMA_OK);
    assert_int_equal(k, 0);
    cma_metricrule_ctl_statuses_free(again, k);
    cma_metricrule_ctl_statuses_free(st, 3);
    cma_catalog_unref(cat);
    cma_restmapper_unref(m);
    teardown_fixture(&f);
}

static void test_metricrule_ctl__limits_rules_and_metrics(void **state)
{
    (void)state;
    struct fixture f;
    setup_with(&f, NULL, NULL, (struct cma_metricrule_limits){2, 3});
    struct cma_metricrule objs[] = {
        obj("shop", "new", "u1", 1, 3000, SPEC("n_total")),
        obj("shop", "old", "u2", 1, 1000, SPEC("o_total")),
        obj("shop", "young", "u3", 1, 2000, SPEC("y_total")),
        obj("web", "w", "u4", 1, 1000, SPEC("w_total")),
    };
    update(&f, objs, 4);
    assert_int_equal(f.pub.last->n_rules, 4); /* the config's, old, young, w */
    struct cma_metricrule_ctl_outcome *o = NULL;
    size_t n = 0;
    assert_int_equal(cma_metricrule_ctl_outcomes(f.ctl, &o, &n, NULL), CMA_OK);
    assert_string_equal(o[0].reason, "TooManyRules");
    assert_false(o[0].accepted);
    assert_true(o[1].accepted);
    assert_true(o[2].accepted);
    cma_metricrule_ctl_outcomes_free(o, n);
    /* discovery counts old 2 and young 2 metrics: young no longer fits under 3 */
    struct cma_restmapper *m = test_mapper(test_resources_default, 8);
    const char *owners[] = {"old", "old", "young", "young", "w"};
    const char *metrics[] = {"o1", "o2", "y1", "y2", "w1"};
    struct cma_catalog *cat = catalog_of(&f, m, owners, metrics, 5);
    int calls = f.pub.calls;
    observe(&f, cat, true);
    assert_int_equal(f.pub.calls, calls + 1); /* re-merged without young, with new */
    assert_int_equal(f.pub.last->n_rules, 4);
    assert_non_null(rule_of(&f, "new"));
    assert_int_equal(cma_metricrule_ctl_outcomes(f.ctl, &o, &n, NULL), CMA_OK);
    assert_string_equal(o[2].reason, "TooManyMetrics");
    assert_string_equal(o[0].reason, "Accepted"); /* the rule slot young left */
    assert_string_equal(o[1].reason, "Accepted");
    assert_int_equal(o[1].n_metrics, 2);
    cma_metricrule_ctl_outcomes_free(o, n);
    cma_catalog_unref(cat);
    /* the next catalog has no entry of young: its count is kept, it stays out */
    const char *owners2[] = {"old", "old", "new", "w"}, *metrics2[] = {"o1", "o2", "n1", "w1"};
    cat = catalog_of(&f, m, owners2, metrics2, 4);
    calls = f.pub.calls;
    observe(&f, cat, true);
    assert_int_equal(f.pub.calls, calls);
    assert_int_equal(cma_metricrule_ctl_outcomes(f.ctl, &o, &n, NULL), CMA_OK);
    assert_string_equal(o[2].reason, "TooManyMetrics");
    cma_metricrule_ctl_outcomes_free(o, n);
    cma_catalog_unref(cat);
    cma_restmapper_unref(m);
    teardown_fixture(&f);
}

static void test_metricrule_ctl__namespace_selector(void **state)
{
    (void)state;
    char *k_team[] = {"team"}, *v_shop[] = {"shop"}, *v_web[] = {"web"};
    struct cma_kube_object ns[] = {
        {.name = "shop", .label_names = k_team, .label_values = v_shop, .n_labels = 1},
        {.name = "web", .label_names = k_team, .label_values = v_web, .n_labels = 1},
    };
    struct cma_objcache *nsc = NULL;
    assert_int_equal(cma_objcache_new(NULL, "", "v1", "namespaces", &nsc, NULL), CMA_OK);
    struct cma_selector *sel = NULL;
    assert_int_equal(cma_selector_parse("team=shop", 9, &sel, NULL), CMA_OK);
    struct fixture f;
    setup_with(&f, sel, nsc, (struct cma_metricrule_limits){0, 0});
    struct cma_metricrule objs[] = {
        obj("shop", "a", "u1", 1, 1, SPEC("q_total")),
        obj("web", "w", "u2", 1, 1, SPEC("w_total")),
    };
    update(&f, objs, 2);
    assert_int_equal(f.pub.last->n_rules, 1); /* the cache is empty: none allowed yet */
    struct cma_metricrule_ctl_status *st = NULL;
    assert_int_equal(statuses(&f, objs, 2, &st), 0); /* nor reported before it is synced */
    cma_metricrule_ctl_statuses_free(st, 0);
    assert_int_equal(cma_objcache_replace(nsc, ns, 2, "5", NULL), CMA_OK);
    assert_int_equal(cma_metricrule_ctl_recheck_namespaces(f.ctl, objs, 2, NULL), CMA_OK);
    assert_int_equal(f.pub.last->n_rules, 2);
    assert_string_equal(f.pub.last->rules[1].owner->namespace_, "shop");
    assert_int_equal(statuses(&f, objs, 2, &st), 1);
    assert_string_equal(st[0].name, "w");
    assert_non_null(strstr(st[0].json, "\"reason\":\"NamespaceNotAllowed\""));
    cma_metricrule_ctl_statuses_free(st, 1);
    /* web's label changes: both served; nothing re-merged for an unchanged set */
    v_web[0] = "shop";
    assert_int_equal(cma_objcache_replace(nsc, ns, 2, "6", NULL), CMA_OK);
    assert_int_equal(cma_metricrule_ctl_recheck_namespaces(f.ctl, objs, 2, NULL), CMA_OK);
    assert_int_equal(f.pub.last->n_rules, 3);
    int calls = f.pub.calls;
    assert_int_equal(cma_metricrule_ctl_recheck_namespaces(f.ctl, objs, 2, NULL), CMA_OK);
    assert_int_equal(f.pub.calls, calls);
    teardown_fixture(&f);
    cma_selector_free(sel);
    cma_objcache_free(nsc);
}

static void test_metricrule_ctl__conflict_between_metricrules(void **state)
{
    (void)state;
    struct fixture f;
    setup_with(&f, NULL, NULL, (struct cma_metricrule_limits){0, 0});
    struct cma_metricrule objs[] = {
        obj("shop", "new", "u1", 1, 3000, SPEC("q_total")),
        obj("shop", "old", "u2", 1, 1000, SPEC("q_total")),
    };
    update(&f, objs, 2);
    struct cma_restmapper *m = test_mapper(test_resources_default, 8);
    /* the series of both come in turns: the older MetricRule's rule (later) keeps the entry */
    const char *owners[] = {"new", "old", "new", "old"}, *metrics[] = {"q", "q", "q", "q"};
    struct cma_catalog *cat = catalog_of(&f, m, owners, metrics, 4);
    assert_int_equal(cma_catalog_lost_count(cat), 1);
    observe(&f, cat, true);
    struct cma_metricrule_ctl_status *st = NULL;
    assert_int_equal(statuses(&f, objs, 2, &st), 2);
    assert_string_equal(st[0].name, "new");
    assert_non_null(strstr(st[0].json, "\"reason\":\"Conflict\""));
    assert_non_null(strstr(st[0].json, "pods/q is served by MetricRule shop/old"));
    assert_non_null(strstr(st[0].json, "\"metrics\":[]"));
    assert_string_equal(st[1].name, "old");
    assert_non_null(strstr(st[1].json, "\"reason\":\"Accepted\""));
    assert_non_null(strstr(st[1].json, "\"metrics\":[\"q\"]"));
    cma_metricrule_ctl_statuses_free(st, 2);
    cma_catalog_unref(cat);
    cma_restmapper_unref(m);
    teardown_fixture(&f);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_metricrule_ctl__merge_owner_order_enforced),
        cmocka_unit_test(test_metricrule_ctl__refused_specs_and_backends),
        cmocka_unit_test(test_metricrule_ctl__tenant_from_namespace),
        cmocka_unit_test(test_metricrule_ctl__config_reload_and_lifetime),
        cmocka_unit_test(test_metricrule_ctl__status_metrics_conflict_no_rewrite),
        cmocka_unit_test(test_metricrule_ctl__limits_rules_and_metrics),
        cmocka_unit_test(test_metricrule_ctl__namespace_selector),
        cmocka_unit_test(test_metricrule_ctl__conflict_between_metricrules),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
