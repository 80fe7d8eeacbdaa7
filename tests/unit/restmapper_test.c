/* restmapper_test.c: the RESTMapper (src/model/restmapper.c) over the resources a real
 * kube-apiserver discovered (the recorded APIResourceLists under
 * ../shared/fixtures/kube-apiserver: core v1, apps/v1, batch/v1, networking.k8s.io/v1,
 * autoscaling/v2; subresources skipped, an empty singularName derived from the kind as the kube
 * client does): the core group first, lookups by plural, singular, short name and kind
 * (case-insensitive), plurals winning over other groups' short names, group filters and
 * "resource.group" parsing, scope and preferred version, GroupResource and apiVersion strings,
 * unknown names, and the reference count. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <ctype.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "cma/apiresource.h"
#include "cma/restmapper.h"
#include "fakehttp.h"

static char *lower_dup(const char *s)
{
    char *d = strdup(s);
    assert_non_null(d);
    for (char *p = d; *p; p++)
        *p = (char)tolower((unsigned char)*p);
    return d;
}

static void add(struct cma_api_resources *rs, const char *group, const char *version,
                const char *plural, const char *singular, const char *kind, bool namespaced,
                const json_t *short_names)
{
    rs->items = realloc(rs->items, (rs->n + 1) * sizeof(*rs->items));
    assert_non_null(rs->items);
    struct cma_api_resource *r = &rs->items[rs->n++];
    memset(r, 0, sizeof(*r));
    r->group = strdup(group);
    r->version = strdup(version);
    r->resource = strdup(plural);
    r->singular = singular[0] ? strdup(singular) : lower_dup(kind);
    r->kind = strdup(kind);
    r->namespaced = namespaced;
    size_t n = json_array_size(short_names);
    r->short_names = calloc(n ? n : 1, sizeof(char *));
    for (size_t i = 0; i < n; i++)
        r->short_names[r->n_short_names++] =
            strdup(json_string_value(json_array_get(short_names, i)));
}

/* Appends the resources (not subresources) of one recorded APIResourceList. */
static void add_fixture(struct cma_api_resources *rs, const char *name)
{
    size_t len;
    char *body = cma_kube_fixture_read(name, &len);
    assert_non_null(body);
    json_error_t jerr;
    json_t *root = json_loadb(body, len, 0, &jerr);
    free(body);
    assert_non_null(root);
    const char *gv = json_string_value(json_object_get(root, "groupVersion"));
    assert_non_null(gv);
    char group[128] = "";
    const char *version = gv;
    const char *slash = strchr(gv, '/');
    if (slash) {
        snprintf(group, sizeof(group), "%.*s", (int)(slash - gv), gv);
        version = slash + 1;
    }
    size_t i;
    json_t *item;
    json_array_foreach(json_object_get(root, "resources"), i, item)
    {
        const char *plural = json_string_value(json_object_get(item, "name"));
        if (strchr(plural, '/'))
            continue;
        add(rs, group, version, plural, json_string_value(json_object_get(item, "singularName")),
            json_string_value(json_object_get(item, "kind")),
            json_is_true(json_object_get(item, "namespaced")), json_object_get(item, "shortNames"));
    }
    json_decref(root);
}

/* Discovery order as listed: apps before core, so the mapper's reordering shows; a made-up
 * example.com group whose short name is another group's plural; a legacy extensions group that
 * repeats apps' "deployments" after it. */
static int setup(void **state)
{
    struct cma_api_resources *rs = calloc(1, sizeof(*rs));
    add_fixture(rs, "discovery-apis-apps-v1.json");
    add_fixture(rs, "discovery-api-v1.json");
    json_t *shorts = json_pack("[s]", "ingresses");
    add(rs, "example.com", "v1alpha1", "gateways", "gateway", "Gateway", false, shorts);
    json_decref(shorts);
    add_fixture(rs, "discovery-apis-batch-v1.json");
    add_fixture(rs, "discovery-apis-networking.k8s.io-v1.json");
    add_fixture(rs, "discovery-apis-autoscaling-v2.json");
    add(rs, "extensions", "v1beta1", "deployments", "deployment", "Deployment", true, NULL);
    struct cma_restmapper *m = NULL;
    if (cma_restmapper_new(rs, &m, NULL) != CMA_OK)
        return -1;
    *state = m;
    return 0;
}

static int teardown(void **state)
{
    cma_restmapper_unref(*state);
    return 0;
}

static void test_cma_restmapper_at__core_group_first(void **state)
{
    const struct cma_restmapper *m = *state;
    /* 5 apps + 17 core + 1 example.com + 2 batch + 3 networking + 1 autoscaling + 1 extensions */
    assert_int_equal(cma_restmapper_count(m), 30);
    assert_string_equal(cma_restmapper_at(m, 0)->resource, "bindings");
    assert_string_equal(cma_restmapper_at(m, 16)->resource, "services");
    for (size_t i = 0; i < 17; i++)
        assert_string_equal(cma_restmapper_at(m, i)->group, "");
    /* then the other groups in discovery order */
    assert_string_equal(cma_restmapper_at(m, 17)->resource, "controllerrevisions");
    assert_string_equal(cma_restmapper_at(m, 17)->group, "apps");
    assert_string_equal(cma_restmapper_at(m, 22)->group, "example.com");
    assert_string_equal(cma_restmapper_at(m, 29)->group, "extensions");
    assert_null(cma_restmapper_at(m, 30));
}

static void test_cma_restmapper_resource_for__every_name_form(void **state)
{
    const struct cma_restmapper *m = *state;
    const struct cma_api_resource *pods = cma_restmapper_resource_for(m, "", "pods");
    assert_non_null(pods);
    assert_string_equal(pods->group, "");
    assert_string_equal(pods->version, "v1");
    assert_string_equal(pods->kind, "Pod");
    assert_string_equal(pods->singular, "pod");
    assert_true(pods->namespaced);
    assert_ptr_equal(cma_restmapper_resource_for(m, "", "pod"), pods);    /* singular */
    assert_ptr_equal(cma_restmapper_resource_for(m, "", "po"), pods);     /* short name */
    assert_ptr_equal(cma_restmapper_resource_for(m, "", "Pod"), pods);    /* kind */
    assert_ptr_equal(cma_restmapper_resource_for(m, "", "PODS"), pods);   /* any case */
    assert_ptr_equal(cma_restmapper_resource_for(m, NULL, "pods"), pods); /* NULL group: any */
    const struct cma_api_resource *hpa = cma_restmapper_resource_for(m, "", "hpa");
    assert_non_null(hpa);
    assert_string_equal(hpa->resource, "horizontalpodautoscalers");
    assert_string_equal(hpa->group, "autoscaling");
    assert_string_equal(hpa->version, "v2");
    assert_string_equal(cma_restmapper_resource_for(m, "", "pvc")->resource,
                        "persistentvolumeclaims");
    assert_string_equal(cma_restmapper_resource_for(m, "", "statefulset")->resource,
                        "statefulsets");
    assert_string_equal(cma_restmapper_resource_for(m, "", "CronJob")->resource, "cronjobs");
}

static void test_cma_restmapper_resource_for__scope(void **state)
{
    const struct cma_restmapper *m = *state;
    assert_false(cma_restmapper_resource_for(m, "", "nodes")->namespaced);
    assert_false(cma_restmapper_resource_for(m, "", "ns")->namespaced);
    assert_false(cma_restmapper_resource_for(m, "", "ingressclasses")->namespaced);
    assert_true(cma_restmapper_resource_for(m, "", "ingresses")->namespaced);
    assert_true(cma_restmapper_resource_for(m, "", "jobs")->namespaced);
}

static void test_cma_restmapper_resource_for__priority(void **state)
{
    const struct cma_restmapper *m = *state;
    /* a plural anywhere beats a short name of an earlier group */
    const struct cma_api_resource *ing = cma_restmapper_resource_for(m, "", "ingresses");
    assert_string_equal(ing->group, "networking.k8s.io");
    assert_string_equal(cma_restmapper_resource_for(m, "example.com", "ingresses")->resource,
                        "gateways");
    /* the same plural in two groups: the first in discovery order, unless a group is named */
    assert_string_equal(cma_restmapper_resource_for(m, "", "deployments")->group, "apps");
    assert_string_equal(cma_restmapper_resource_for(m, "extensions", "deployments")->group,
                        "extensions");
    /* the group compares case-insensitively; a filtered-out group's short name does not leak in */
    assert_string_equal(cma_restmapper_resource_for(m, "EXTENSIONS", "Deployment")->group,
                        "extensions");
    assert_null(cma_restmapper_resource_for(m, "extensions", "deploy"));
}

static void test_cma_restmapper_resource_for__unknown(void **state)
{
    const struct cma_restmapper *m = *state;
    assert_null(cma_restmapper_resource_for(m, "", "gadgets"));
    assert_null(cma_restmapper_resource_for(m, "", ""));
    assert_null(cma_restmapper_resource_for(m, "", NULL));
    assert_null(cma_restmapper_resource_for(m, "apps", "pods")); /* pods is core only */
    assert_null(cma_restmapper_resource_for(m, "no.such.group", "deployments"));
    assert_null(cma_restmapper_resource_for(m, "", "pod "));    /* exact, not a prefix */
    assert_null(cma_restmapper_resource_for(NULL, "", "pods")); /* no mapper yet */
}

static void test_cma_restmapper_parse_for__group_resource(void **state)
{
    const struct cma_restmapper *m = *state;
    const struct cma_api_resource *d = cma_restmapper_parse_for(m, "deployments.apps");
    assert_non_null(d);
    assert_string_equal(d->group, "apps");
    assert_string_equal(cma_restmapper_parse_for(m, "ingresses.networking.k8s.io")->group,
                        "networking.k8s.io");
    assert_string_equal(cma_restmapper_parse_for(m, "pods")->resource, "pods");
    assert_string_equal(cma_restmapper_parse_for(m, "deployments.extensions")->group, "extensions");
    assert_null(cma_restmapper_parse_for(m, "deployments.batch"));
    assert_null(cma_restmapper_parse_for(m, ".apps"));
    assert_null(cma_restmapper_parse_for(m, "gadgets.apps"));
}

static void test_cma_restmapper__strings(void **state)
{
    const struct cma_restmapper *m = *state;
    char out[64];
    cma_restmapper_group_resource(cma_restmapper_resource_for(m, "", "pods"), out, sizeof(out));
    assert_string_equal(out, "pods");
    cma_restmapper_group_resource(cma_restmapper_resource_for(m, "", "ing"), out, sizeof(out));
    assert_string_equal(out, "ingresses.networking.k8s.io");
    cma_restmapper_api_version(cma_restmapper_resource_for(m, "", "pods"), out, sizeof(out));
    assert_string_equal(out, "v1");
    cma_restmapper_api_version(cma_restmapper_resource_for(m, "", "sts"), out, sizeof(out));
    assert_string_equal(out, "apps/v1");
    /* truncated, still terminated */
    char small[8];
    cma_restmapper_group_resource(cma_restmapper_resource_for(m, "", "deploy"), small,
                                  sizeof(small));
    assert_string_equal(small, "deploym");
}

static void test_cma_restmapper__empty_and_refcount(void **state)
{
    (void)state;
    struct cma_restmapper *m = NULL;
    assert_int_equal(cma_restmapper_new(NULL, &m, NULL), CMA_OK);
    assert_int_equal(cma_restmapper_count(m), 0);
    assert_null(cma_restmapper_at(m, 0));
    assert_null(cma_restmapper_resource_for(m, "", "pods"));
    cma_restmapper_unref(m);

    struct cma_api_resources *rs = calloc(1, sizeof(*rs));
    add(rs, "", "v1", "pods", "", "Pod", true, NULL);
    assert_int_equal(cma_restmapper_new(rs, &m, NULL), CMA_OK);
    assert_ptr_equal(cma_restmapper_ref(m), m);
    const struct cma_api_resource *pods = cma_restmapper_resource_for(m, "", "pods");
    cma_restmapper_unref(m); /* one reference left: still usable */
    assert_ptr_equal(cma_restmapper_resource_for(m, "", "pod"), pods);
    assert_int_equal(cma_restmapper_count(m), 1);
    cma_restmapper_unref(m); /* the last: frees (ASan would see a leak or a double free) */
    assert_null(cma_restmapper_ref(NULL));
    cma_restmapper_unref(NULL);
    assert_int_equal(cma_restmapper_count(NULL), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_cma_restmapper_at__core_group_first, setup, teardown),
        cmocka_unit_test_setup_teardown(test_cma_restmapper_resource_for__every_name_form, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_cma_restmapper_resource_for__scope, setup, teardown),
        cmocka_unit_test_setup_teardown(test_cma_restmapper_resource_for__priority, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_cma_restmapper_resource_for__unknown, setup, teardown),
        cmocka_unit_test_setup_teardown(test_cma_restmapper_parse_for__group_resource, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_cma_restmapper__strings, setup, teardown),
        cmocka_unit_test(test_cma_restmapper__empty_and_refcount),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
