/* apiresource_test.c: the lifetime of discovered resources (src/model/apiresource.c):
 * cma_api_resource_done frees exactly one resource's strings, short names and short-name array
 * and not the struct; cma_api_resources_free frees every item's strings, the item array and the
 * list, and takes NULL. The test is linked with -Wl,--wrap=free, so each pointer the module
 * frees is recorded and compared with the ones it owns. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "cma/apiresource.h"

void __real_free(void *p);
void __wrap_free(void *p);

#define MAX_FREED 64
static bool recording;
static void *freed[MAX_FREED];
static size_t n_freed;

void __wrap_free(void *p)
{
    if (recording && p && n_freed < MAX_FREED)
        freed[n_freed++] = p;
    __real_free(p);
}

static void record(void)
{
    n_freed = 0;
    recording = true;
}

static size_t times_freed(const void *p)
{
    size_t n = 0;
    for (size_t i = 0; i < n_freed; i++)
        if (freed[i] == p)
            n++;
    return n;
}

/* What one resource owns, remembered before it is freed. */
struct owned {
    void *ptrs[16];
    size_t n;
};

static void fill(struct cma_api_resource *r, const char *plural, size_t n_short, struct owned *own)
{
    memset(r, 0, sizeof(*r));
    r->group = strdup("apps");
    r->version = strdup("v1");
    r->resource = strdup(plural);
    r->singular = strdup("deployment");
    r->kind = strdup("Deployment");
    r->namespaced = true;
    r->short_names = n_short ? calloc(n_short, sizeof(char *)) : NULL;
    r->n_short_names = n_short;
    for (size_t i = 0; i < n_short; i++)
        r->short_names[i] = strdup(i == 0 ? "deploy" : "dp");
    own->n = 0;
    void *base[] = {r->group, r->version, r->resource, r->singular, r->kind};
    for (size_t i = 0; i < 5; i++)
        own->ptrs[own->n++] = base[i];
    for (size_t i = 0; i < n_short; i++)
        own->ptrs[own->n++] = r->short_names[i];
    if (r->short_names)
        own->ptrs[own->n++] = r->short_names;
    for (size_t i = 0; i < own->n; i++)
        assert_non_null(own->ptrs[i]);
}

static void assert_all_freed_once(const struct owned *own)
{
    for (size_t i = 0; i < own->n; i++)
        assert_int_equal(times_freed(own->ptrs[i]), 1);
}

static void test_cma_api_resource_done__frees_its_strings_not_the_struct(void **state)
{
    (void)state;
    struct cma_api_resource *r = malloc(sizeof(*r));
    assert_non_null(r);
    struct owned own;
    fill(r, "deployments", 2, &own);
    assert_int_equal(own.n, 8); /* 5 strings, 2 short names, the array */
    record();
    cma_api_resource_done(r);
    recording = false;
    assert_int_equal(n_freed, 8);
    assert_all_freed_once(&own);
    assert_int_equal(times_freed(r), 0); /* the struct is the caller's */
    free(r);
}

static void test_cma_api_resource_done__no_short_names(void **state)
{
    (void)state;
    struct cma_api_resource r;
    struct owned own;
    fill(&r, "controllerrevisions", 0, &own);
    record();
    cma_api_resource_done(&r);
    recording = false;
    /* 5 strings and free(NULL) for the absent array (not recorded) */
    assert_int_equal(n_freed, 5);
    assert_all_freed_once(&own);
}

static void test_cma_api_resources_free__frees_items_array_and_list(void **state)
{
    (void)state;
    struct cma_api_resources *list = calloc(1, sizeof(*list));
    assert_non_null(list);
    list->items = calloc(3, sizeof(*list->items));
    assert_non_null(list->items);
    list->n = 3;
    struct owned own[3];
    fill(&list->items[0], "deployments", 1, &own[0]);
    fill(&list->items[1], "statefulsets", 2, &own[1]);
    fill(&list->items[2], "controllerrevisions", 0, &own[2]);
    void *items = list->items;
    record();
    cma_api_resources_free(list);
    recording = false;
    /* 7 + 8 + 5 pointers the items own, the item array, the list */
    assert_int_equal(n_freed, 22);
    for (size_t i = 0; i < 3; i++)
        assert_all_freed_once(&own[i]);
    assert_int_equal(times_freed(items), 1);
    assert_int_equal(times_freed(list), 1);
}

static void test_cma_api_resources_free__null_and_empty(void **state)
{
    (void)state;
    record();
    cma_api_resources_free(NULL);
    recording = false;
    assert_int_equal(n_freed, 0);
    struct cma_api_resources *list = calloc(1, sizeof(*list));
    assert_non_null(list);
    record();
    cma_api_resources_free(list); /* no items: free(NULL) for the array, then the list */
    recording = false;
    assert_int_equal(n_freed, 1);
    assert_int_equal(times_freed(list), 1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cma_api_resource_done__frees_its_strings_not_the_struct),
        cmocka_unit_test(test_cma_api_resource_done__no_short_names),
        cmocka_unit_test(test_cma_api_resources_free__frees_items_array_and_list),
        cmocka_unit_test(test_cma_api_resources_free__null_and_empty),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
