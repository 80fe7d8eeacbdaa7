/* catalog_test.c: discovery folding and catalog snapshots against prometheus-adapter's own
 * acceptance cases (reference section 9.4 series_registry_test, 9.5 provider_test), plus the
 * queries rendered for catalog entries (9.4 table), through a fake series source; and the relist
 * over several backends: which backend serves a metric two of them list, and a failing backend's
 * last good entries across a config reload. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "cma/catalog.h"
#include "cma/config.h"
#include "cma/discovery.h"
#include "cma/query.h"
#include "cma/restmapper.h"
#include "cma/rule.h"
#include "cma/selector.h"
#include "testlib.h"

#define CONTAINER_SEL "{__name__=~\"^container_.*\",container!=\"POD\",namespace!=\"\",pod!=\"\"}"

/* prometheus-adapter's DefaultConfig(1m, prefix) as cmd/config-gen writes it (reference 8.1). */
static char *default_config(const char *p)
{
    static const char fmt[] =
        "rules:\n"
        "- seriesQuery: '" CONTAINER_SEL "'\n"
        "  seriesFilters: []\n"
        "  resources: {overrides: {namespace: {resource: namespace}, pod: {resource: pod}}}\n"
        "  name: {matches: ^container_(.*)_seconds_total$, as: \"\"}\n"
        "  metricsQuery: sum(rate(<<.Series>>{<<.LabelMatchers>>,container!=\"POD\"}[1m])) by "
        "(<<.GroupBy>>)\n"
        "- seriesQuery: '" CONTAINER_SEL "'\n"
        "  seriesFilters: [{isNot: ^container_.*_seconds_total$}]\n"
        "  resources: {overrides: {namespace: {resource: namespace}, pod: {resource: pod}}}\n"
        "  name: {matches: ^container_(.*)_total$, as: \"\"}\n"
        "  metricsQuery: sum(rate(<<.Series>>{<<.LabelMatchers>>,container!=\"POD\"}[1m])) by "
        "(<<.GroupBy>>)\n"
        "- seriesQuery: '" CONTAINER_SEL "'\n"
        "  seriesFilters: [{isNot: ^container_.*_total$}]\n"
        "  resources: {overrides: {namespace: {resource: namespace}, pod: {resource: pod}}}\n"
        "  name: {matches: ^container_(.*)$, as: \"\"}\n"
        "  metricsQuery: sum(<<.Series>>{<<.LabelMatchers>>,container!=\"POD\"}) by "
        "(<<.GroupBy>>)\n"
        "- seriesQuery: '{%1$snamespace!=\"\",__name__!~\"^container_.*\"}'\n"
        "  seriesFilters: [{isNot: .*_total$}]\n"
        "  resources: {template: %1$s<<.Resource>>}\n"
        "  name: {matches: \"\", as: \"\"}\n"
        "  metricsQuery: sum(<<.Series>>{<<.LabelMatchers>>}) by (<<.GroupBy>>)\n"
        "- seriesQuery: '{%1$snamespace!=\"\",__name__!~\"^container_.*\"}'\n"
        "  seriesFilters: [{isNot: .*_seconds_total}]\n"
        "  resources: {template: %1$s<<.Resource>>}\n"
        "  name: {matches: ^(.*)_total$, as: \"\"}\n"
        "  metricsQuery: sum(rate(<<.Series>>{<<.LabelMatchers>>}[1m])) by (<<.GroupBy>>)\n"
        "- seriesQuery: '{%1$snamespace!=\"\",__name__!~\"^container_.*\"}'\n"
        "  seriesFilters: []\n"
        "  resources: {template: %1$s<<.Resource>>}\n"
        "  name: {matches: ^(.*)_seconds_total$, as: \"\"}\n"
        "  metricsQuery: sum(rate(<<.Series>>{<<.LabelMatchers>>}[1m])) by (<<.GroupBy>>)\n";
    char *out = malloc(8192);
    snprintf(out, 8192, fmt, p);
    return out;
}

struct fixture {
    struct cma_config *cfg;
    struct cma_ruleset *rules;
    struct cma_restmapper *mapper;
};

static void load(struct fixture *fx, const char *prefix)
{
    char *text = default_config(prefix);
    struct cma_err err;
    cma_err_clear(&err);
    if (cma_config_load_string("default.yaml", text, strlen(text), &fx->cfg, &err) != CMA_OK ||
        cma_ruleset_compile(fx->cfg, &fx->rules, &err) != CMA_OK) {
        char line[600];
        cma_err_format_pos(&err, line, sizeof(line));
        fail_msg("config: %s", line);
    }
    free(text);
    fx->mapper = test_mapper(test_resources_default,
                             sizeof(test_resources_default) / sizeof(test_resources_default[0]));
    assert_non_null(fx->mapper);
}

static void unload(struct fixture *fx)
{
    cma_restmapper_unref(fx->mapper);
    cma_ruleset_free(fx->rules);
    cma_config_free(fx->cfg);
}

/* Returns "resource[.group]/metric:T|F" strings of a catalog, sorted, joined by spaces. */
static char *describe(const struct cma_catalog *c)
{
    size_t n = cma_catalog_count(c);
    char **lines = calloc(n + 1, sizeof(*lines));
    for (size_t i = 0; i < n; i++) {
        const struct cma_catalog_entry *e = cma_catalog_entry_at(c, i);
        char gr[256];
        cma_restmapper_group_resource(e->resource, gr, sizeof(gr));
        lines[i] = malloc(512);
        snprintf(lines[i], 512, "%s/%s:%c", gr, e->metric, e->namespaced ? 'T' : 'F');
    }
    for (size_t i = 0; i < n; i++)
        for (size_t j = i + 1; j < n; j++)
            if (strcmp(lines[i], lines[j]) > 0) {
                char *t = lines[i];
                lines[i] = lines[j];
                lines[j] = t;
            }
    char *out = calloc(1, 64 * 1024);
    for (size_t i = 0; i < n; i++) {
        strcat(out, i ? " " : "");
        strcat(out, lines[i]);
        free(lines[i]);
    }
    free(lines);
    return out;
}

static const char *const container_series[] = {
    "container_some_time_seconds_total{pod=somepod,namespace=somens,container=somecont}",
    "container_some_count_total{pod=somepod,namespace=somens,container=somecont}",
    "container_some_usage{pod=somepod,namespace=somens,container=somecont}",
};
static const char *const kube_series[] = {
    "node_gigawatts{kube_node=somenode}",
    "service_proxy_packets{kube_service=somesvc,kube_namespace=somens}",
    "ingress_hits_total{kube_ingress=someingress,kube_service=somesvc,kube_pod=somepod,"
    "kube_namespace=somens}",
    "ingress_hits_total{kube_ingress=someotheringress,kube_service=somesvc,kube_pod=somepod,"
    "kube_namespace=somens}",
    "volume_claims_total{kube_persistentvolume=somepv}",
    "work_queue_wait_seconds_total{kube_deployment=somedep,kube_namespace=somens}",
    "node_fan_seconds_total{kube_node=somenode}",
};

static struct cma_catalog *relist(struct fixture *fx, const struct fake_series *answers,
                                  size_t n_answers)
{
    struct fake_source fs = {.answers = answers, .n_answers = n_answers};
    struct cma_backend src = fake_backend(&fs);
    struct cma_catalog *c = NULL;
    struct cma_err err;
    cma_err_clear(&err);
    if (cma_discovery_relist(&src, fx->rules, fx->mapper, 1700000000000, 60000, &c, &err) != CMA_OK)
        fail_msg("relist: %s", err.msg);
    /* rules sharing a seriesQuery share one call */
    assert_int_equal(fs.calls, 2);
    return c;
}

static void test_cma_discovery_relist__series_registry_17_entries(void **state)
{
    (void)state;
    struct fixture fx;
    load(&fx, "kube_");
    const struct fake_series answers[] = {
        {CONTAINER_SEL, container_series, 3},
        {"{kube_namespace!=\"\",__name__!~\"^container_.*\"}", kube_series, 7},
    };
    struct cma_catalog *c = relist(&fx, answers, 2);
    char *got = describe(c);
    assert_string_equal(
        got, "deployments.extensions/work_queue_wait:T ingresses.extensions/ingress_hits:T "
             "namespaces/ingress_hits:F namespaces/service_proxy_packets:F namespaces/some_count:F "
             "namespaces/some_time:F namespaces/some_usage:F namespaces/work_queue_wait:F "
             "nodes/node_fan:F nodes/node_gigawatts:F persistentvolumes/volume_claims:F "
             "pods/ingress_hits:T pods/some_count:T pods/some_time:T pods/some_usage:T "
             "services/ingress_hits:T services/service_proxy_packets:T");
    free(got);
    cma_catalog_unref(c);
    unload(&fx);
}

static void test_cma_discovery_relist__provider_10_entries(void **state)
{
    (void)state;
    struct fixture fx;
    load(&fx, "");
    static const char *const cont[] = {
        "container_some_usage{pod=somepod,namespace=somens,container=somecont}"};
    static const char *const other[] = {
        "ingress_hits_total{ingress=someingress,service=somesvc,pod=backend1,namespace=somens}",
        "ingress_hits_total{ingress=someingress,service=somesvc,pod=backend2,namespace=somens}",
        "service_proxy_packets{service=somesvc,namespace=somens}",
        "work_queue_wait_seconds_total{deployment=somedep,namespace=somens}",
    };
    const struct fake_series answers[] = {
        {CONTAINER_SEL, cont, 1},
        {"{namespace!=\"\",__name__!~\"^container_.*\"}", other, 4},
    };
    struct cma_catalog *c = relist(&fx, answers, 2);
    char *got = describe(c);
    assert_string_equal(got, "deployments.extensions/work_queue_wait:T "
                             "ingresses.extensions/ingress_hits:T namespaces/ingress_hits:F "
                             "namespaces/service_proxy_packets:F namespaces/some_usage:F "
                             "namespaces/work_queue_wait:F pods/ingress_hits:T pods/some_usage:T "
                             "services/ingress_hits:T services/service_proxy_packets:T");
    free(got);
    cma_catalog_unref(c);
    unload(&fx);
}

static void test_cma_discovery_relist__start_is_now_minus_max_age(void **state)
{
    (void)state;
    struct fixture fx;
    load(&fx, "");
    const struct fake_series answers[] = {
        {CONTAINER_SEL, container_series, 3},
        {"{namespace!=\"\",__name__!~\"^container_.*\"}", kube_series, 0},
    };
    struct fake_source fs = {
        .answers = answers, .n_answers = 2, .min_start_ms = 1700000000000 - 60000};
    struct cma_backend src = fake_backend(&fs);
    struct cma_catalog *c = NULL;
    assert_int_equal(
        cma_discovery_relist(&src, fx.rules, fx.mapper, 1700000000000, 60000, &c, NULL), CMA_OK);
    cma_catalog_unref(c);
    c = NULL;
    struct cma_err err;
    cma_err_clear(&err);
    /* a max age longer than the fake allows: the fake refuses, the relist fails as a whole */
    assert_int_equal(
        cma_discovery_relist(&src, fx.rules, fx.mapper, 1700000000000, 120000, &c, &err),
        CMA_ERR_BACKEND_ERROR);
    assert_null(c);
    assert_non_null(strstr(err.msg, "unable to fetch metrics for query"));
    unload(&fx);
}

/* A rule sent as a tenant (a MetricRule's on a tenantFromNamespace backend) lists its series on
 * its own, as that tenant, even when another rule has the same seriesQuery: the two tenants may
 * see different series. Rules of one tenant and one seriesQuery still share one call. */
static void test_cma_discovery_relist__a_tenant_lists_on_its_own(void **state)
{
    (void)state;
    struct fixture fx;
    load(&fx, "");
    const char *other = "{namespace!=\"\",__name__!~\"^container_.*\"}";
    size_t last = fx.rules->n_rules - 1;
    assert_string_equal(fx.rules->rules[last].series_query, other);
    fx.rules->rules[last].backend.tenant = "shop";
    const struct fake_series answers[] = {
        {CONTAINER_SEL, container_series, 3},
        {other, kube_series, 0},
    };
    struct fake_source fs = {.answers = answers, .n_answers = 2};
    struct cma_backend src = fake_backend(&fs);
    struct cma_catalog *c = NULL;
    assert_int_equal(
        cma_discovery_relist(&src, fx.rules, fx.mapper, 1700000000000, 60000, &c, NULL), CMA_OK);
    assert_int_equal(fs.calls, 3);
    assert_string_equal(fs.matches[0], CONTAINER_SEL);
    assert_string_equal(fs.tenants[0], "");
    assert_string_equal(fs.matches[1], other);
    assert_string_equal(fs.tenants[1], "");
    assert_string_equal(fs.matches[2], other);
    assert_string_equal(fs.tenants[2], "shop");
    cma_catalog_unref(c);
    unload(&fx);
}

struct query_case {
    const char *gr;
    bool namespaced;
    const char *metric;
    const char *ns;
    const char *names[2];
    size_t n_names;
    const char *metric_selector;
    const char *want;
};

static void test_cma_query_build__series_registry_queries(void **state)
{
    (void)state;
    struct fixture fx;
    load(&fx, "kube_");
    const struct fake_series answers[] = {
        {CONTAINER_SEL, container_series, 3},
        {"{kube_namespace!=\"\",__name__!~\"^container_.*\"}", kube_series, 7},
    };
    struct cma_catalog *c = relist(&fx, answers, 2);
    const struct query_case cases[] = {
        {"pods",
         true,
         "some_usage",
         "somens",
         {"somepod1", "somepod2"},
         2,
         NULL,
         "sum(container_some_usage{namespace=\"somens\",pod=~\"somepod1|somepod2\",container!="
         "\"POD\"}) by (pod)"},
        {"pods",
         true,
         "some_count",
         "somens",
         {"somepod1", "somepod2"},
         2,
         NULL,
         "sum(rate(container_some_count_total{namespace=\"somens\",pod=~\"somepod1|somepod2\","
         "container!=\"POD\"}[1m])) by (pod)"},
        {"pods",
         true,
         "some_time",
         "somens",
         {"somepod1", "somepod2"},
         2,
         NULL,
         "sum(rate(container_some_time_seconds_total{namespace=\"somens\",pod=~\"somepod1|"
         "somepod2\",container!=\"POD\"}[1m])) by (pod)"},
        {"service",
         true,
         "ingress_hits",
         "somens",
         {"somesvc"},
         1,
         NULL,
         "sum(rate(ingress_hits_total{kube_namespace=\"somens\",kube_service=\"somesvc\"}[1m])) "
         "by (kube_service)"},
        {"service",
         true,
         "ingress_hits",
         "somens",
         {"somesvc"},
         1,
         "param1=value1",
         "sum(rate(ingress_hits_total{param1=\"value1\",kube_namespace=\"somens\",kube_service="
         "\"somesvc\"}[1m])) by (kube_service)"},
        {"ingress.extensions",
         true,
         "ingress_hits",
         "somens",
         {"someingress"},
         1,
         NULL,
         "sum(rate(ingress_hits_total{kube_namespace=\"somens\",kube_ingress=\"someingress\"}[1m]"
         ")) by (kube_ingress)"},
        {"pod",
         true,
         "ingress_hits",
         "somens",
         {"somepod"},
         1,
         NULL,
         "sum(rate(ingress_hits_total{kube_namespace=\"somens\",kube_pod=\"somepod\"}[1m])) by "
         "(kube_pod)"},
        {"service",
         true,
         "service_proxy_packets",
         "somens",
         {"somesvc"},
         1,
         NULL,
         "sum(service_proxy_packets{kube_namespace=\"somens\",kube_service=\"somesvc\"}) by "
         "(kube_service)"},
        {"deployment.extensions",
         true,
         "work_queue_wait",
         "somens",
         {"somedep"},
         1,
         NULL,
         "sum(rate(work_queue_wait_seconds_total{kube_namespace=\"somens\",kube_deployment="
         "\"somedep\"}[1m])) by (kube_deployment)"},
        {"node",
         false,
         "node_gigawatts",
         NULL,
         {"somenode"},
         1,
         NULL,
         "sum(node_gigawatts{kube_node=\"somenode\"}) by (kube_node)"},
        {"persistentvolume",
         false,
         "volume_claims",
         NULL,
         {"somepv"},
         1,
         NULL,
         "sum(rate(volume_claims_total{kube_persistentvolume=\"somepv\"}[1m])) by "
         "(kube_persistentvolume)"},
        {"node",
         false,
         "node_fan",
         NULL,
         {"somenode"},
         1,
         NULL,
         "sum(rate(node_fan_seconds_total{kube_node=\"somenode\"}[1m])) by (kube_node)"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        const struct query_case *qc = &cases[i];
        const struct cma_api_resource *res = cma_restmapper_parse_for(fx.mapper, qc->gr);
        assert_non_null(res);
        const struct cma_catalog_entry *e = cma_catalog_lookup(c, res, qc->namespaced, qc->metric);
        if (!e)
            fail_msg("case %zu: no catalog entry for %s %s", i, qc->gr, qc->metric);
        struct cma_selector *sel = NULL;
        if (qc->metric_selector)
            assert_int_equal(
                cma_selector_parse(qc->metric_selector, strlen(qc->metric_selector), &sel, NULL),
                CMA_OK);
        struct cma_query_input in = {
            .tmpl = e->rule->metrics_query,
            .resmap = e->rule->resmap,
            .mapper = fx.mapper,
            .series = e->series,
            .resource = res,
            .namespace_ = qc->ns,
            .names = qc->names,
            .n_names = qc->n_names,
            .metric_selector = sel,
        };
        struct cma_buf q, label;
        cma_buf_init(&q, 0);
        cma_buf_init(&label, 0);
        struct cma_err err;
        cma_err_clear(&err);
        if (cma_query_build(&in, &q, &label, &err) != CMA_OK)
            fail_msg("case %zu: %s", i, err.msg);
        assert_string_equal(cma_buf_str(&q), qc->want);
        cma_buf_done(&q);
        cma_buf_done(&label);
        cma_selector_free(sel);
    }
    cma_catalog_unref(c);
    unload(&fx);
}

struct counted_attachment {
    struct cma_catalog_attachment base;
    int *freed;
};

static void counted_free(struct cma_catalog_attachment *a)
{
    struct counted_attachment *c = (struct counted_attachment *)a;
    (*c->freed)++;
    free(c);
}

static struct cma_catalog_attachment *counted(int *freed)
{
    struct counted_attachment *c = calloc(1, sizeof(*c));
    assert_non_null(c);
    c->base.free = counted_free;
    c->freed = freed;
    return &c->base;
}

static void test_cma_catalog_attach__first_wins_and_goes_with_the_snapshot(void **state)
{
    (void)state;
    struct fixture fx;
    load(&fx, "");
    static const char *const none[] = {"x{a=b}"};
    const struct fake_series answers[] = {
        {CONTAINER_SEL, none, 0},
        {"{namespace!=\"\",__name__!~\"^container_.*\"}", none, 0},
    };
    struct cma_catalog *c = relist(&fx, answers, 2);
    assert_null(cma_catalog_attachment(c));
    int freed_first = 0, freed_second = 0;
    struct cma_catalog_attachment *first = counted(&freed_first);
    assert_ptr_equal(cma_catalog_attach(c, first), first);
    assert_ptr_equal(cma_catalog_attachment(c), first);
    /* a second attach (another thread encoded too) is freed at once; the first one stays */
    assert_ptr_equal(cma_catalog_attach(c, counted(&freed_second)), first);
    assert_int_equal(freed_second, 1);
    assert_int_equal(freed_first, 0);
    struct cma_catalog *held = cma_catalog_ref(c);
    cma_catalog_unref(c);
    assert_int_equal(freed_first, 0); /* still referenced */
    cma_catalog_unref(held);
    assert_int_equal(freed_first, 1);
    unload(&fx);
}

static void test_cma_catalog_store__keeps_last_published(void **state)
{
    (void)state;
    struct fixture fx;
    load(&fx, "");
    struct cma_catalog_store *store;
    assert_int_equal(cma_catalog_store_new(&store), CMA_OK);
    assert_null(cma_catalog_store_get(store));
    struct cma_catalog_builder *b;
    assert_int_equal(cma_catalog_builder_new(fx.mapper, &b, NULL), CMA_OK);
    const struct cma_api_resource *pods = cma_restmapper_resource_for(fx.mapper, "", "pods");
    assert_int_equal(cma_catalog_builder_add(b, pods, "m", 1, "m_total", 7, &fx.rules->rules[0]),
                     CMA_OK);
    /* a second series for the same metric overwrites (later wins) without duplicating */
    assert_int_equal(cma_catalog_builder_add(b, pods, "m", 1, "m_other", 7, &fx.rules->rules[1]),
                     CMA_OK);
    struct cma_catalog *c;
    assert_int_equal(cma_catalog_build(b, 5, &c, NULL), CMA_OK);
    assert_int_equal(cma_catalog_count(c), 1);
    assert_string_equal(cma_catalog_lookup(c, pods, true, "m")->series, "m_other");
    assert_null(cma_catalog_lookup(c, pods, false, "m"));
    cma_catalog_store_publish(store, c);
    struct cma_catalog *got = cma_catalog_store_get(store);
    assert_ptr_equal(got, c);
    assert_int_equal(cma_catalog_built_ms(got), 5);
    cma_catalog_unref(got);
    cma_catalog_store_free(store);
    unload(&fx);
}

/* ---- several backends (cma_discovery_relist_backends) ---- */

#define TWO_BACKENDS                                                                               \
    "backends:\n"                                                                                  \
    "- {name: first, url: 'http://first:9090'}\n"                                                  \
    "- {name: second, url: 'http://second:9090'}\n"

/* rules: app_load on both backends (first defined first), app_up on the second only. */
#define SHARED_RULES                                                                               \
    "rules:\n"                                                                                     \
    "- seriesQuery: 'app_load{namespace!=\"\"}'\n"                                                 \
    "  backend: first\n"                                                                           \
    "  resources: {overrides: {namespace: {resource: namespace}, pod: {resource: pod}}}\n"         \
    "  metricsQuery: first_query\n"                                                                \
    "- seriesQuery: 'app_load{namespace!=\"\"}'\n"                                                 \
    "  backend: second\n"                                                                          \
    "  resources: {overrides: {namespace: {resource: namespace}, pod: {resource: pod}}}\n"         \
    "  metricsQuery: second_query\n"                                                               \
    "- seriesQuery: 'app_up{namespace!=\"\"}'\n"                                                   \
    "  backend: second\n"                                                                          \
    "  resources: {overrides: {namespace: {resource: namespace}, pod: {resource: pod}}}\n"         \
    "  metricsQuery: up_query\n"

static const char *const load_series[] = {"app_load{namespace=ns,pod=p1}"};
static const char *const up_series[] = {"app_up{namespace=ns,pod=p1}"};
static const struct fake_series backend_answers[] = {
    {"app_load{namespace!=\"\"}", load_series, 1},
    {"app_up{namespace!=\"\"}", up_series, 1},
};

/* Three backends as main builds them: [0] the flags' (no rule here), [1] first, [2] second;
 * a source whose min_start_ms is in the future fails every listing. */
struct backends3 {
    struct fake_source src[3];
    struct cma_backend table[3];
};

static void backends3_init(struct backends3 *b)
{
    for (size_t i = 0; i < 3; i++) {
        b->src[i] = (struct fake_source){.answers = backend_answers, .n_answers = 2};
        b->table[i] = fake_backend(&b->src[i]);
    }
}

static void set_down(struct backends3 *b, size_t i, bool down)
{
    b->src[i].min_start_ms = down ? INT64_MAX : 0;
}

static struct cma_ruleset *compile_bound(const char *text, struct backends3 *b)
{
    static const char *const names[] = {NULL, "first", "second"};
    struct cma_config *cfg = NULL;
    struct cma_ruleset *rs = NULL;
    struct cma_err err;
    cma_err_clear(&err);
    if (cma_config_load_string("backends.yaml", text, strlen(text), &cfg, &err) != CMA_OK ||
        cma_ruleset_compile(cfg, &rs, &err) != CMA_OK) {
        char line[600];
        cma_err_format_pos(&err, line, sizeof(line));
        fail_msg("config: %s", line);
    }
    cma_ruleset_own_config(rs, cfg);
    assert_int_equal(cma_ruleset_bind_backends(rs, names, b->table, NULL, 3, &err), CMA_OK);
    return rs;
}

static struct cma_catalog *relist3(struct backends3 *b, const struct cma_ruleset *rs,
                                   struct cma_restmapper *mapper, struct cma_catalog *previous)
{
    struct cma_relist_backends bk = {b->table, 3, previous, NULL};
    struct cma_catalog *c = NULL;
    struct cma_err err, partial;
    cma_err_clear(&err);
    cma_err_clear(&partial);
    if (cma_discovery_relist_backends(&bk, rs, mapper, 1700000000000, 60000, &c, &partial, &err) !=
        CMA_OK)
        fail_msg("relist: %s", err.msg);
    return c;
}

static const struct cma_api_resource *pods_of(struct cma_restmapper *m)
{
    const struct cma_api_resource *pods = cma_restmapper_parse_for(m, "pods");
    assert_non_null(pods);
    return pods;
}

/* The metricsQuery text of the rule serving pods/metric, or "" when nothing serves it. */
static const char *served_by(const struct cma_catalog *c, struct cma_restmapper *m,
                             const char *metric)
{
    const struct cma_catalog_entry *e = cma_catalog_lookup(c, pods_of(m), true, metric);
    return e ? e->rule->cfg->metrics_query.s : "";
}

/* The documented choice between two backends serving one (resource, metric): the first-defined
 * backend that has the entry (fresh or kept) wins; before its first successful listing it has
 * none, and the next backend serves. */
static void test_cma_discovery_relist_backends__first_backend_with_entries_wins(void **state)
{
    (void)state;
    struct backends3 b;
    backends3_init(&b);
    struct cma_ruleset *rs = compile_bound(TWO_BACKENDS SHARED_RULES, &b);
    struct cma_restmapper *m = test_mapper(test_resources_default, 8);
    /* first relist, `first` down: nothing to keep, `second` serves app_load */
    set_down(&b, 1, true);
    struct cma_catalog *c1 = relist3(&b, rs, m, NULL);
    assert_string_equal(served_by(c1, m, "app_load"), "second_query");
    assert_string_equal(served_by(c1, m, "app_up"), "up_query");
    assert_int_equal(b.src[1].calls, 1);
    /* `first` answers: defined first, it wins */
    set_down(&b, 1, false);
    struct cma_catalog *c2 = relist3(&b, rs, m, c1);
    assert_string_equal(served_by(c2, m, "app_load"), "first_query");
    /* `first` down again: its kept entry still wins, whatever `second` answers */
    set_down(&b, 1, true);
    struct cma_catalog *c3 = relist3(&b, rs, m, c2);
    assert_string_equal(served_by(c3, m, "app_load"), "first_query");
    /* `second` down, `first` up: the same */
    set_down(&b, 1, false);
    set_down(&b, 2, true);
    struct cma_catalog *c4 = relist3(&b, rs, m, c3);
    assert_string_equal(served_by(c4, m, "app_load"), "first_query");
    assert_string_equal(served_by(c4, m, "app_up"), "up_query"); /* kept */
    cma_catalog_unref(c1);
    cma_catalog_unref(c2);
    cma_catalog_unref(c3);
    cma_catalog_unref(c4);
    cma_restmapper_unref(m);
    cma_ruleset_free(rs);
}

/* Each backend's own listing outcome comes back (what discovery keeps per backend to tell a
 * backend that never listed from a metric that does not exist): CMA_OK for one that listed and
 * for one without rules, its own error for one that failed, also when every backend failed. */
static void test_cma_discovery_relist_backends__outcomes_per_backend(void **state)
{
    (void)state;
    struct backends3 b;
    backends3_init(&b);
    struct cma_ruleset *rs = compile_bound(TWO_BACKENDS SHARED_RULES, &b);
    struct cma_restmapper *m = test_mapper(test_resources_default, 8);
    struct cma_err outcomes[3], err;
    struct cma_relist_backends bk = {b.table, 3, NULL, outcomes};
    struct cma_catalog *c = NULL;
    set_down(&b, 1, true);
    cma_err_clear(&err);
    assert_int_equal(
        cma_discovery_relist_backends(&bk, rs, m, 1700000000000, 60000, &c, NULL, &err), CMA_OK);
    assert_int_equal(outcomes[0].code, CMA_OK); /* no rules: nothing listed, nothing failed */
    assert_int_equal(outcomes[1].code, CMA_ERR_BACKEND_ERROR);
    assert_string_equal(
        outcomes[1].msg,
        "unable to fetch metrics for query app_load{namespace!=\"\"}: start too early");
    assert_int_equal(outcomes[2].code, CMA_OK);
    cma_catalog_unref(c);
    /* every backend with rules down: the call fails, and still says which did */
    set_down(&b, 2, true);
    c = NULL;
    cma_err_clear(&err);
    assert_int_equal(
        cma_discovery_relist_backends(&bk, rs, m, 1700000000000, 60000, &c, NULL, &err),
        CMA_ERR_BACKEND_ERROR);
    assert_null(c);
    assert_int_equal(outcomes[1].code, CMA_ERR_BACKEND_ERROR);
    assert_int_equal(outcomes[2].code, CMA_ERR_BACKEND_ERROR);
    cma_restmapper_unref(m);
    cma_ruleset_free(rs);
}

/* After a config reload, a backend that is down keeps its last good entries for the new rules
 * that list alike (same backend, seriesQuery, filters, name, resources; metricsQuery may
 * change), bound to the new rule; an entry whose rule now names or maps series differently, or
 * moved to another backend, is dropped. */
static void test_cma_discovery_relist_backends__reload_keeps_alike_entries(void **state)
{
    (void)state;
    static const char up_rule[] = "- seriesQuery: 'app_up{namespace!=\"\"}'\n"
                                  "  backend: second\n"
                                  "  resources: {overrides: {namespace: {resource: namespace}, "
                                  "pod: {resource: pod}}}\n";
    static const char load_rule[] = "- seriesQuery: 'app_load{namespace!=\"\"}'\n"
                                    "  backend: first\n"
                                    "  resources: {overrides: {namespace: {resource: namespace}, "
                                    "pod: {resource: pod}}}\n";
    struct backends3 b;
    backends3_init(&b);
    struct cma_restmapper *m = test_mapper(test_resources_default, 8);
    char text[4096];
    snprintf(text, sizeof text,
             TWO_BACKENDS "rules:\n%s  metricsQuery: old_up\n%s  metricsQuery: "
                          "old_load\n",
             up_rule, load_rule);
    struct cma_ruleset *old = compile_bound(text, &b);
    struct cma_catalog *c1 = relist3(&b, old, m, NULL);
    assert_string_equal(served_by(c1, m, "app_up"), "old_up");
    /* reloaded: another rule first (no rule keeps its address), app_up's metricsQuery changed,
     * `second` down */
    snprintf(text, sizeof text,
             TWO_BACKENDS "rules:\n%s  metricsQuery: old_load\n%s  "
                          "metricsQuery: new_up\n",
             load_rule, up_rule);
    struct cma_ruleset *alike = compile_bound(text, &b);
    set_down(&b, 2, true);
    struct cma_catalog *c2 = relist3(&b, alike, m, c1);
    assert_string_equal(served_by(c2, m, "app_up"), "new_up");
    const struct cma_catalog_entry *e = cma_catalog_lookup(c2, pods_of(m), true, "app_up");
    assert_non_null(e);
    assert_ptr_equal(e->rule, &alike->rules[1]);
    assert_string_equal(e->series, "app_up");
    assert_string_equal(served_by(c2, m, "app_load"), "old_load"); /* `first` listed afresh */
    /* reloaded again: app_up is now named otherwise: its old entry is not carried */
    snprintf(text, sizeof text,
             TWO_BACKENDS "rules:\n%s  metricsQuery: old_load\n%s  "
                          "name: {as: renamed_up}\n  metricsQuery: new_up\n",
             load_rule, up_rule);
    struct cma_ruleset *renamed = compile_bound(text, &b);
    struct cma_catalog *c3 = relist3(&b, renamed, m, c2);
    assert_string_equal(served_by(c3, m, "app_up"), "");
    assert_string_equal(served_by(c3, m, "renamed_up"), "");
    assert_string_equal(served_by(c3, m, "app_load"), "old_load");
    /* the same rule moved to the flags' backend, also down: not carried either (another
     * backend's series) */
    snprintf(text, sizeof text,
             TWO_BACKENDS
             "rules:\n%s  metricsQuery: old_load\n"
             "- seriesQuery: 'app_up{namespace!=\"\"}'\n  resources: {overrides: "
             "{namespace: {resource: namespace}, pod: {resource: pod}}}\n  metricsQuery: new_up\n"
             "- seriesQuery: 'app_none{namespace!=\"\"}'\n  backend: second\n  resources: "
             "{template: <<.Resource>>}\n  metricsQuery: x\n",
             load_rule);
    struct cma_ruleset *moved = compile_bound(text, &b);
    set_down(&b, 0, true);
    struct cma_catalog *c4 = relist3(&b, moved, m, c2);
    assert_string_equal(served_by(c4, m, "app_up"), "");
    assert_string_equal(served_by(c4, m, "app_load"), "old_load");
    cma_catalog_unref(c1);
    cma_catalog_unref(c2);
    cma_catalog_unref(c3);
    cma_catalog_unref(c4);
    cma_ruleset_free(old);
    cma_ruleset_free(alike);
    cma_ruleset_free(renamed);
    cma_ruleset_free(moved);
    cma_restmapper_unref(m);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cma_discovery_relist__series_registry_17_entries),
        cmocka_unit_test(test_cma_discovery_relist__provider_10_entries),
        cmocka_unit_test(test_cma_discovery_relist__start_is_now_minus_max_age),
        cmocka_unit_test(test_cma_discovery_relist__a_tenant_lists_on_its_own),
        cmocka_unit_test(test_cma_query_build__series_registry_queries),
        cmocka_unit_test(test_cma_catalog_attach__first_wins_and_goes_with_the_snapshot),
        cmocka_unit_test(test_cma_catalog_store__keeps_last_published),
        cmocka_unit_test(test_cma_discovery_relist_backends__first_backend_with_entries_wins),
        cmocka_unit_test(test_cma_discovery_relist_backends__outcomes_per_backend),
        cmocka_unit_test(test_cma_discovery_relist_backends__reload_keeps_alike_entries),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
