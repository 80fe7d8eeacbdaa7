/* objcache_test.c: the watch cache's event application fed with the real recorded LIST and
 * watch streams of ../shared/fixtures/kube-apiserver (pods-all-bert-before-watch.json at
 * resourceVersion 266, then watch-pods-all.jsonl / watch-pods-bert-selector.jsonl line by line,
 * and the 410 ERROR events of watch-pods-too-old-rv*.jsonl), checking by-selector lookups,
 * resourceVersions and the memory figure after each step. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "../../src/clients/internal.h"
#include "cma/kube.h"
#include "cma/objcache.h"
#include "cma/selector.h"
#include "fakehttp.h"

/* A cache holding the recorded list at resourceVersion 266 (bert-0..2 in ml). */
static struct cma_objcache *listed_cache(void)
{
    size_t len = 0;
    char *body = cma_kube_fixture_read("pods-all-bert-before-watch.json", &len);
    assert_non_null(body);
    struct cma_kube_object *objs = NULL;
    size_t n = 0, cap = 0;
    char *cont = NULL;
    assert_int_equal(cma_kube_parse_object_page(body, len, &objs, &n, &cap, &cont, NULL), CMA_OK);
    free(body);
    struct cma_objcache *c = NULL;
    assert_int_equal(cma_objcache_new(NULL, "", "v1", "pods", &c, NULL), CMA_OK);
    assert_false(cma_objcache_is_synced(c));
    assert_int_equal(cma_objcache_replace(c, objs, n, "266", NULL), CMA_OK);
    cma_kube_objects_free(objs, n);
    free(cont);
    return c;
}

/* Names matching `selector` in `ns`, joined with ','. */
static void names_of(struct cma_objcache *c, const char *ns, const char *selector, char *out,
                     size_t out_len)
{
    struct cma_selector *sel = NULL;
    if (selector)
        assert_int_equal(cma_selector_parse(selector, strlen(selector), &sel, NULL), CMA_OK);
    char **names = NULL;
    size_t n = 0;
    assert_int_equal(cma_objcache_list_names(c, ns, sel, &names, &n, NULL), CMA_OK);
    assert_non_null(names);
    out[0] = '\0';
    for (size_t i = 0; i < n; i++) {
        size_t used = strlen(out);
        snprintf(out + used, out_len - used, "%s%s", i ? "," : "", names[i]);
        free(names[i]);
    }
    free(names);
    cma_selector_free(sel);
}

/* Applies line number `index` (0-based) of a .jsonl fixture. */
static void apply_line(struct cma_objcache *c, const char *fixture, size_t index, bool *gone)
{
    size_t len = 0;
    char *all = cma_kube_fixture_read(fixture, &len);
    assert_non_null(all);
    char *line = all;
    for (size_t i = 0; i < index; i++) {
        line = strchr(line, '\n');
        assert_non_null(line);
        line++;
    }
    char *end = strchr(line, '\n');
    size_t line_len = end ? (size_t)(end - line) : strlen(line);
    struct cma_err err = {0};
    enum cma_errc rc = cma_objcache_apply_event(c, line, line_len, gone, &err);
    if (rc != CMA_OK)
        fail_msg("line %zu of %s: %s", index, fixture, err.msg);
    free(all);
}

static void assert_rv(struct cma_objcache *c, const char *want)
{
    char rv[64];
    cma_objcache_resource_version(c, rv, sizeof(rv));
    assert_string_equal(rv, want);
}

static void test_cma_objcache_replace__lists_sorted_and_synced(void **state)
{
    (void)state;
    struct cma_objcache *c = listed_cache();
    char names[256];
    assert_true(cma_objcache_is_synced(c));
    assert_int_equal(cma_objcache_count(c), 3);
    assert_rv(c, "266");
    names_of(c, NULL, NULL, names, sizeof(names));
    assert_string_equal(names, "bert-0,bert-1,bert-2");
    names_of(c, "ml", "app=bert", names, sizeof(names));
    assert_string_equal(names, "bert-0,bert-1,bert-2");
    names_of(c, "default", "app=bert", names, sizeof(names));
    assert_string_equal(names, "");
    names_of(c, NULL, "app=bert-canary", names, sizeof(names));
    assert_string_equal(names, "");
    cma_objcache_free(c);
}

static void test_cma_objcache_apply_event__all_pods_stream(void **state)
{
    (void)state;
    struct cma_objcache *c = listed_cache();
    char names[256];
    bool gone = true;
    /* ADDED bert-3 (rv 267) */
    apply_line(c, "watch-pods-all.jsonl", 0, &gone);
    assert_false(gone);
    assert_rv(c, "267");
    names_of(c, "ml", "app=bert", names, sizeof(names));
    assert_string_equal(names, "bert-0,bert-1,bert-2,bert-3");
    apply_line(c, "watch-pods-all.jsonl", 1, &gone);
    apply_line(c, "watch-pods-all.jsonl", 2, &gone);
    /* MODIFIED: relabelled app=bert-canary (rv 270) */
    apply_line(c, "watch-pods-all.jsonl", 3, &gone);
    assert_rv(c, "270");
    names_of(c, "ml", "app=bert", names, sizeof(names));
    assert_string_equal(names, "bert-0,bert-1,bert-2");
    names_of(c, "ml", "app=bert-canary", names, sizeof(names));
    assert_string_equal(names, "bert-3");
    assert_int_equal(cma_objcache_count(c), 4);
    /* relabelled back */
    apply_line(c, "watch-pods-all.jsonl", 4, &gone);
    names_of(c, NULL, "app=bert,tier=inference", names, sizeof(names));
    assert_string_equal(names, "bert-0,bert-1,bert-2,bert-3");
    /* deletionTimestamp set twice, then DELETED (rv 276) */
    for (size_t i = 5; i < 8; i++)
        apply_line(c, "watch-pods-all.jsonl", i, &gone);
    assert_rv(c, "276");
    assert_int_equal(cma_objcache_count(c), 3);
    names_of(c, NULL, "app", names, sizeof(names));
    assert_string_equal(names, "bert-0,bert-1,bert-2");
    /* bookmarks */
    apply_line(c, "watch-pods-all.jsonl", 8, &gone);
    apply_line(c, "watch-pods-all.jsonl", 9, &gone);
    assert_false(gone);
    assert_rv(c, "276");
    assert_int_equal(cma_objcache_count(c), 3);
    cma_objcache_free(c);
}

static void test_cma_objcache_apply_event__relabel_out_of_selector_is_deleted(void **state)
{
    (void)state;
    struct cma_objcache *c = listed_cache();
    char names[256];
    bool gone = false;
    for (size_t i = 0; i < 3; i++)
        apply_line(c, "watch-pods-bert-selector.jsonl", i, &gone);
    names_of(c, "ml", "app=bert", names, sizeof(names));
    assert_string_equal(names, "bert-0,bert-1,bert-2,bert-3");
    /* DELETED carrying the old labels (still app=bert) at the new resourceVersion 270 */
    apply_line(c, "watch-pods-bert-selector.jsonl", 3, &gone);
    assert_rv(c, "270");
    names_of(c, "ml", "app=bert", names, sizeof(names));
    assert_string_equal(names, "bert-0,bert-1,bert-2");
    /* relabelled back: ADDED */
    apply_line(c, "watch-pods-bert-selector.jsonl", 4, &gone);
    assert_rv(c, "271");
    names_of(c, "ml", "app=bert", names, sizeof(names));
    assert_string_equal(names, "bert-0,bert-1,bert-2,bert-3");
    cma_objcache_free(c);
}

static void test_cma_objcache_apply_event__bookmark_moves_rv_only(void **state)
{
    (void)state;
    struct cma_objcache *c = listed_cache();
    size_t before = cma_objcache_bytes(c);
    bool gone = true;
    apply_line(c, "watch-pods-bert-selector.jsonl", 8, &gone);
    assert_false(gone);
    assert_rv(c, "276");
    assert_int_equal(cma_objcache_count(c), 3);
    assert_int_equal(cma_objcache_bytes(c), before);
    cma_objcache_free(c);
}

static void test_cma_objcache_apply_event__410_error_asks_for_relist(void **state)
{
    (void)state;
    const char *fixtures[] = {"watch-pods-too-old-rv.jsonl",
                              "watch-pods-too-old-rv-from-list.jsonl"};
    for (size_t f = 0; f < 2; f++) {
        struct cma_objcache *c = listed_cache();
        bool gone = false;
        apply_line(c, fixtures[f], 0, &gone);
        assert_true(gone);
        /* the state is kept until the re-list replaces it */
        assert_int_equal(cma_objcache_count(c), 3);
        assert_rv(c, "266");
        assert_true(cma_objcache_is_synced(c));
        cma_objcache_replace(c, NULL, 0, "290", NULL);
        assert_int_equal(cma_objcache_count(c), 0);
        assert_rv(c, "290");
        cma_objcache_free(c);
    }
}

static void test_cma_objcache_apply_event__young_cluster_replay(void **state)
{
    (void)state;
    struct cma_objcache *c = NULL;
    assert_int_equal(cma_objcache_new(NULL, "", "v1", "pods", &c, NULL), CMA_OK);
    assert_int_equal(cma_objcache_replace(c, NULL, 0, "1", NULL), CMA_OK);
    for (size_t i = 0; i < 20; i++) {
        bool gone = true;
        apply_line(c, "watch-pods-rv1-young-cluster.jsonl", i, &gone);
        assert_false(gone);
    }
    char names[256];
    names_of(c, "ml", "app=bert", names, sizeof(names));
    assert_string_equal(names, "bert-0,bert-1,bert-2");
    cma_objcache_free(c);
}

static void test_cma_objcache_apply_event__bad_lines_are_errors(void **state)
{
    (void)state;
    struct cma_objcache *c = listed_cache();
    const char *bad[] = {
        "not json",
        "{\"type\":\"ADDED\"}",
        "{\"type\":\"WHAT\",\"object\":{\"metadata\":{\"name\":\"x\"}}}",
        "{\"type\":\"ADDED\",\"object\":{\"metadata\":{}}}",
        "{\"type\":\"ADDED\",\"object\":{\"metadata\":{\"name\":\"x\",\"labels\":{\"a\":1}}}}",
        "{\"type\":\"ERROR\",\"object\":{\"kind\":\"Status\",\"code\":500,\"message\":\"boom\"}}",
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        bool gone = true;
        struct cma_err err = {0};
        assert_int_equal(cma_objcache_apply_event(c, bad[i], strlen(bad[i]), &gone, &err),
                         CMA_ERR_KUBE_ERROR);
        assert_false(gone);
        assert_true(err.msg[0] != '\0');
    }
    assert_int_equal(cma_objcache_count(c), 3);
    assert_rv(c, "266");
    cma_objcache_free(c);
}

static void test_cma_objcache_bytes__compact_per_object(void **state)
{
    (void)state;
    struct cma_objcache *c = NULL;
    assert_int_equal(cma_objcache_new(NULL, "", "v1", "pods", &c, NULL), CMA_OK);
    char line[512];
    size_t label_bytes = 0;
    for (int i = 0; i < 1000; i++) {
        int len = snprintf(line, sizeof(line),
                           "{\"type\":\"ADDED\",\"object\":{\"metadata\":{\"name\":\"pod-%04d\","
                           "\"namespace\":\"ns-%d\",\"resourceVersion\":\"%d\",\"labels\":{"
                           "\"app\":\"a%d\"}},\"status\":{\"phase\":\"Running\"}}}",
                           999 - i, i % 7, i + 1, i % 3);
        bool gone = true;
        assert_int_equal(cma_objcache_apply_event(c, line, (size_t)len, &gone, NULL), CMA_OK);
        label_bytes += strlen("app") + strlen("a0") + 2;
    }
    assert_int_equal(cma_objcache_count(c), 1000);
    assert_rv(c, "1000");
    size_t per = (cma_objcache_bytes(c) - label_bytes) / 1000;
    assert_true(per <= 200);
    char names[16384];
    names_of(c, "ns-3", "app=a1", names, sizeof(names));
    /* sorted by name within the namespace */
    assert_true(strncmp(names, "pod-0", 5) == 0);
    assert_non_null(strstr(names, "pod-0"));
    cma_objcache_free(c);
}

static void test_cma_objcache_registry__needs_a_kube_client(void **state)
{
    (void)state;
    assert_null(cma_objcache_registry_get(NULL, "", "v1", "pods"));
    cma_objcache_registry_free(NULL);
    struct cma_err err = {0};
    struct cma_objcache_registry *r = (struct cma_objcache_registry *)&err; /* must stay */
    assert_int_equal(cma_objcache_registry_new(NULL, &r, &err), CMA_ERR_INTERNAL);
    assert_string_equal(err.msg, "watch caches need a kube client");
    assert_ptr_equal(r, (struct cma_objcache_registry *)&err);
    cma_objcache_free(NULL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cma_objcache_replace__lists_sorted_and_synced),
        cmocka_unit_test(test_cma_objcache_apply_event__all_pods_stream),
        cmocka_unit_test(test_cma_objcache_apply_event__relabel_out_of_selector_is_deleted),
        cmocka_unit_test(test_cma_objcache_apply_event__bookmark_moves_rv_only),
        cmocka_unit_test(test_cma_objcache_apply_event__410_error_asks_for_relist),
        cmocka_unit_test(test_cma_objcache_apply_event__young_cluster_replay),
        cmocka_unit_test(test_cma_objcache_apply_event__bad_lines_are_errors),
        cmocka_unit_test(test_cma_objcache_bytes__compact_per_object),
        cmocka_unit_test(test_cma_objcache_registry__needs_a_kube_client),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
