/* resmap_test.c: one rule's Prometheus label ↔ Kubernetes resource mapping (src/rules/resmap.c),
 * compiled straight from a loaded config's `resources:` with cma_resmap_compile, over a
 * RESTMapper of core, apps, extensions and networking.k8s.io resources: overrides (with and
 * without a group, resolved through the mapper at each lookup, unknown ones), the template in
 * both directions (reverse regex, core-group and dotted-group labels found by rendering, group
 * dots and dashes as '_', the singular as .Resource), overrides winning over the template, the
 * error when nothing names a resource, cma_resmap_is_empty, and compile errors. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cma/apiresource.h"
#include "cma/buf.h"
#include "cma/config.h"
#include "cma/restmapper.h"
#include "cma/rule.h"

struct res {
    const char *group, *version, *resource, *singular, *kind;
    bool namespaced;
};

static const struct res resources[] = {
    {"", "v1", "pods", "pod", "Pod", true},
    {"", "v1", "nodes", "node", "Node", false},
    {"", "v1", "namespaces", "namespace", "Namespace", false},
    {"apps", "v1", "deployments", "deployment", "Deployment", true},
    {"extensions", "v1beta1", "ingresses", "ingress", "Ingress", true},
    {"networking.k8s.io", "v1", "ingresses", "ingress", "Ingress", true},
    {"cert-manager.io", "v1", "certificates", "", "Certificate", true},
};

static struct cma_restmapper *mapper(void)
{
    size_t n = sizeof(resources) / sizeof(resources[0]);
    struct cma_api_resources *rs = calloc(1, sizeof(*rs));
    rs->items = calloc(n, sizeof(*rs->items));
    rs->n = n;
    for (size_t i = 0; i < n; i++) {
        struct cma_api_resource *d = &rs->items[i];
        d->group = strdup(resources[i].group);
        d->version = strdup(resources[i].version);
        d->resource = strdup(resources[i].resource);
        d->singular = strdup(resources[i].singular);
        d->kind = strdup(resources[i].kind);
        d->namespaced = resources[i].namespaced;
    }
    struct cma_restmapper *m = NULL;
    assert_int_equal(cma_restmapper_new(rs, &m, NULL), CMA_OK);
    return m;
}

struct fixture {
    struct cma_config *cfg;
    struct cma_resmap *rm;
    struct cma_restmapper *m;
    struct cma_buf b;
};

/* Loads "rules: [{seriesQuery: x, resources: <resources>}]" and compiles its mapping. */
static void load(struct fixture *f, const char *resources_yaml)
{
    char yaml[1024];
    snprintf(yaml, sizeof(yaml), "rules:\n- seriesQuery: x\n  resources: %s\n", resources_yaml);
    struct cma_err err;
    cma_err_clear(&err);
    if (cma_config_load_string("t.yaml", yaml, strlen(yaml), &f->cfg, &err) != CMA_OK)
        fail_msg("load: %s", err.msg);
    if (cma_resmap_compile(&f->cfg->rules[0].resources, &f->rm, &err) != CMA_OK)
        fail_msg("compile: %s", err.msg);
    f->m = mapper();
    cma_buf_init(&f->b, 0);
}

static void unload(struct fixture *f)
{
    cma_buf_done(&f->b);
    cma_resmap_free(f->rm);
    cma_restmapper_unref(f->m);
    cma_config_free(f->cfg);
}

static const struct cma_api_resource *res_of(const struct fixture *f, const char *group,
                                             const char *resource)
{
    const struct cma_api_resource *r = cma_restmapper_resource_for(f->m, group, resource);
    assert_non_null(r);
    return r;
}

static const struct cma_api_resource *for_label(const struct fixture *f, const char *label)
{
    return cma_resmap_resource_for_label(f->rm, f->m, label, strlen(label));
}

/* The label for a resource, or "<error: msg>". */
static const char *label_of(struct fixture *f, const struct cma_api_resource *r)
{
    static char out[600];
    struct cma_err err;
    cma_err_clear(&err);
    cma_buf_clear(&f->b);
    if (cma_resmap_label_for_resource(f->rm, f->m, r, &f->b, &err) == CMA_OK)
        snprintf(out, sizeof(out), "%s", cma_buf_str(&f->b));
    else
        snprintf(out, sizeof(out), "<error: %s>", err.msg);
    return out;
}

static void test_cma_resmap__overrides(void **state)
{
    (void)state;
    struct fixture f;
    load(&f, "{overrides: {namespace: {resource: namespace}, pod: {resource: pods},"
             " ingress: {group: networking.k8s.io, resource: ingresses},"
             " deployment: {group: apps, resource: Deployment}, gpu: {resource: gpus}}}");
    assert_false(cma_resmap_is_empty(f.rm));
    /* label → resource, normalised through the mapper (singular, plural, kind) */
    assert_ptr_equal(for_label(&f, "namespace"), res_of(&f, "", "namespaces"));
    assert_ptr_equal(for_label(&f, "pod"), res_of(&f, "", "pods"));
    assert_ptr_equal(for_label(&f, "ingress"), res_of(&f, "networking.k8s.io", "ingresses"));
    assert_ptr_equal(for_label(&f, "deployment"), res_of(&f, "apps", "deployments"));
    assert_null(for_label(&f, "gpu"));        /* names no known resource */
    assert_null(for_label(&f, "node"));       /* no override, no template */
    assert_null(for_label(&f, "namespace_")); /* labels compare exactly */
    /* the label is bounded by len */
    assert_ptr_equal(cma_resmap_resource_for_label(f.rm, f.m, "podXYZ", 3), res_of(&f, "", "pods"));
    /* resource → label */
    assert_string_equal(label_of(&f, res_of(&f, "", "pods")), "pod");
    assert_string_equal(label_of(&f, res_of(&f, "networking.k8s.io", "ingresses")), "ingress");
    assert_string_equal(label_of(&f, res_of(&f, "extensions", "ingresses")),
                        "<error: unable to convert resource ingresses.extensions into label: no "
                        "override or resources.template names it>");
    assert_string_equal(label_of(&f, res_of(&f, "", "nodes")),
                        "<error: unable to convert resource nodes into label: no override or "
                        "resources.template names it>");
    unload(&f);
}

static void test_cma_resmap__template(void **state)
{
    (void)state;
    struct fixture f;
    load(&f, "{template: 'kube_<<.Group>>_<<.Resource>>'}");
    assert_false(cma_resmap_is_empty(f.rm));
    const struct cma_api_resource *pods = res_of(&f, "", "pods");
    const struct cma_api_resource *deploy = res_of(&f, "apps", "deployments");
    const struct cma_api_resource *ing = res_of(&f, "networking.k8s.io", "ingresses");
    const struct cma_api_resource *cert = res_of(&f, "cert-manager.io", "certificates");
    /* query direction: Group with dots and dashes as '_', Resource singular (or plural if none) */
    assert_string_equal(label_of(&f, pods), "kube__pod");
    assert_string_equal(label_of(&f, deploy), "kube_apps_deployment");
    assert_string_equal(label_of(&f, ing), "kube_networking_k8s_io_ingress");
    assert_string_equal(label_of(&f, res_of(&f, "extensions", "ingresses")),
                        "kube_extensions_ingress");
    assert_string_equal(label_of(&f, cert), "kube_cert_manager_io_certificates");
    /* discovery direction: the reverse regex, else rendering each resource */
    assert_ptr_equal(for_label(&f, "kube_apps_deployment"), deploy);
    assert_ptr_equal(for_label(&f, "kube_apps_deployments"), deploy);
    assert_ptr_equal(for_label(&f, "kube__pod"), pods);
    assert_ptr_equal(for_label(&f, "kube_networking_k8s_io_ingress"), ing);
    assert_ptr_equal(for_label(&f, "kube_cert_manager_io_certificates"), cert);
    assert_null(for_label(&f, "kube_apps_gadget"));
    assert_null(for_label(&f, "kube__container"));
    assert_null(for_label(&f, "pod")); /* anchored: the literal parts must be there */
    assert_null(for_label(&f, "xkube_apps_deployment"));
    unload(&f);

    load(&f, "{template: '<<.Resource>>'}");
    assert_ptr_equal(for_label(&f, "pod"), res_of(&f, "", "pods"));
    assert_ptr_equal(for_label(&f, "node"), res_of(&f, "", "nodes"));
    assert_ptr_equal(for_label(&f, "deployment"), res_of(&f, "apps", "deployments"));
    assert_null(for_label(&f, "container"));
    assert_string_equal(label_of(&f, res_of(&f, "", "namespaces")), "namespace");
    unload(&f);
}

static void test_cma_resmap__overrides_win_over_the_template(void **state)
{
    (void)state;
    struct fixture f;
    load(&f, "{overrides: {kubernetes_node: {resource: node}}, template: '<<.Resource>>'}");
    const struct cma_api_resource *nodes = res_of(&f, "", "nodes");
    assert_string_equal(label_of(&f, nodes), "kubernetes_node");
    assert_ptr_equal(for_label(&f, "kubernetes_node"), nodes);
    assert_ptr_equal(for_label(&f, "node"), nodes); /* the template still maps it back too */
    assert_string_equal(label_of(&f, res_of(&f, "", "pods")), "pod");
    unload(&f);
}

static void test_cma_resmap_is_empty(void **state)
{
    (void)state;
    struct fixture f;
    load(&f, "{}");
    assert_true(cma_resmap_is_empty(f.rm));
    assert_null(for_label(&f, "pod"));
    unload(&f);
    load(&f, "{template: ''}"); /* an empty template is no template */
    assert_true(cma_resmap_is_empty(f.rm));
    unload(&f);
}

static void test_cma_resmap_compile__errors(void **state)
{
    (void)state;
    const char *yaml = "rules:\n- seriesQuery: x\n  resources: {template: kube_<<.Group>>}\n";
    struct cma_config *cfg = NULL;
    struct cma_err err;
    cma_err_clear(&err);
    assert_int_equal(cma_config_load_string("t.yaml", yaml, strlen(yaml), &cfg, &err), CMA_OK);
    struct cma_resmap *rm = NULL;
    assert_int_equal(cma_resmap_compile(&cfg->rules[0].resources, &rm, &err), CMA_ERR_CONFIG_VALUE);
    assert_null(rm);
    char got[600];
    cma_err_format_pos(&err, got, sizeof(got));
    assert_string_equal(got, "t.yaml:3:25: resources.template must include at least "
                             "`<<.Resource>>` (got \"kube_<<.Group>>\")");
    cma_config_free(cfg);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cma_resmap__overrides),
        cmocka_unit_test(test_cma_resmap__template),
        cmocka_unit_test(test_cma_resmap__overrides_win_over_the_template),
        cmocka_unit_test(test_cma_resmap_is_empty),
        cmocka_unit_test(test_cma_resmap_compile__errors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
