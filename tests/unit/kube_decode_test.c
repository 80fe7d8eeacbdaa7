/* kube_decode_test.c: the pure decoders of kube-apiserver answers (src/clients/kube_decode.c)
 * fed with real recorded bodies (../shared/fixtures/kube-apiserver): discovery documents, LIST
 * pages of names and objects (with the list's resourceVersion and continue token), Status
 * messages, RFC 3339 times, and the framing of a watch stream into event lines, chunk by chunk. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "../../src/clients/internal.h"
#include "cma/kube.h"
#include "fakehttp.h"

#define T_2026_11_21_213906 INT64_C(1795297146000)

/* ---- fixtures (fakehttp.h finds them under ../shared/fixtures) ---------------------------- */

/* The response body of a recorded .http exchange (after the response head). */
static char *http_fixture_body(const char *name, size_t *ret_len)
{
    char rel[512];
    snprintf(rel, sizeof(rel), "kube-apiserver/%s", name);
    char *body = cma_shared_fixture_http_body(rel, ret_len);
    if (!body)
        fail_msg("no response body in ../shared/fixtures/%s", rel);
    return body;
}

static const struct cma_api_resource *find_resource(const struct cma_api_resources *r,
                                                    const char *group, const char *resource)
{
    for (size_t i = 0; i < r->n; i++)
        if (strcmp(r->items[i].group, group) == 0 && strcmp(r->items[i].resource, resource) == 0)
            return &r->items[i];
    return NULL;
}

static const char *label_of(const struct cma_kube_object *o, const char *name)
{
    for (size_t i = 0; i < o->n_labels; i++)
        if (strcmp(o->label_names[i], name) == 0)
            return o->label_values[i];
    return NULL;
}

/* ---- documents ---------------------------------------------------------------------------- */

static void test_cma_kube_parse_api_versions__fixture(void **state)
{
    (void)state;
    size_t len;
    char *body = cma_kube_fixture_read("discovery-api.json", &len);
    assert_non_null(body);
    char *version = NULL;
    struct cma_err err;
    cma_err_clear(&err);
    assert_int_equal(cma_kube_parse_api_versions(body, len, &version, &err), CMA_OK);
    assert_string_equal(version, "v1");
    free(version);
    free(body);
    const char *bad = "{\"versions\":[]}";
    assert_int_equal(cma_kube_parse_api_versions(bad, strlen(bad), &version, &err),
                     CMA_ERR_KUBE_ERROR);
}

static void test_cma_kube_parse_resource_list__core_fixture(void **state)
{
    (void)state;
    size_t len;
    char *body = cma_kube_fixture_read("discovery-api-v1.json", &len);
    assert_non_null(body);
    struct cma_api_resources *r = calloc(1, sizeof(*r));
    assert_non_null(r);
    struct cma_err err;
    cma_err_clear(&err);
    assert_int_equal(cma_kube_parse_resource_list(body, len, "", "v1", r, &err), CMA_OK);
    assert_int_equal(r->n, 17); /* 38 entries, 21 of them subresources */
    for (size_t i = 0; i < r->n; i++)
        assert_null(strchr(r->items[i].resource, '/'));
    const struct cma_api_resource *pods = find_resource(r, "", "pods");
    assert_non_null(pods);
    assert_string_equal(pods->version, "v1");
    assert_string_equal(pods->kind, "Pod");
    assert_string_equal(pods->singular, "pod"); /* singularName "" → lower-case kind */
    assert_true(pods->namespaced);
    assert_int_equal(pods->n_short_names, 1);
    assert_string_equal(pods->short_names[0], "po");
    const struct cma_api_resource *nodes = find_resource(r, "", "nodes");
    assert_non_null(nodes);
    assert_false(nodes->namespaced);
    const struct cma_api_resource *cs = find_resource(r, "", "componentstatuses");
    assert_string_equal(cs->singular, "componentstatus");
    cma_api_resources_free(r);
    free(body);
}

static void test_cma_kube_parse_resource_list__apps_fixture_appends(void **state)
{
    (void)state;
    size_t len;
    char *body = cma_kube_fixture_read("discovery-apis-apps-v1.json", &len);
    assert_non_null(body);
    struct cma_api_resources *r = calloc(1, sizeof(*r));
    struct cma_err err;
    cma_err_clear(&err);
    assert_int_equal(cma_kube_parse_resource_list(body, len, "apps", "v1", r, &err), CMA_OK);
    assert_int_equal(r->n, 5);
    assert_int_equal(cma_kube_parse_resource_list(body, len, "apps", "v1", r, &err), CMA_OK);
    assert_int_equal(r->n, 10);
    const struct cma_api_resource *d = find_resource(r, "apps", "deployments");
    assert_non_null(d);
    assert_string_equal(d->singular, "deployment");
    assert_string_equal(d->kind, "Deployment");
    assert_string_equal(d->short_names[0], "deploy");
    /* a bad document leaves what was there */
    const char *bad = "{\"resources\":[{\"name\":\"x\",\"kind\":\"X\",\"namespaced\":true},"
                      "{\"name\":\"y\"}]}";
    assert_int_equal(cma_kube_parse_resource_list(bad, strlen(bad), "g", "v1", r, &err),
                     CMA_ERR_KUBE_ERROR);
    assert_int_equal(r->n, 10);
    cma_api_resources_free(r);
    free(body);
}

static void test_cma_kube_parse_resource_list__singular_name_kept(void **state)
{
    (void)state;
    const char *doc = "{\"resources\":[{\"name\":\"widgets\",\"singularName\":\"widgetty\","
                      "\"kind\":\"Widget\",\"namespaced\":false}]}";
    struct cma_api_resources *r = calloc(1, sizeof(*r));
    assert_int_equal(cma_kube_parse_resource_list(doc, strlen(doc), "x.io", "v2", r, NULL), CMA_OK);
    assert_string_equal(r->items[0].singular, "widgetty");
    assert_string_equal(r->items[0].group, "x.io");
    assert_int_equal(r->items[0].n_short_names, 0);
    cma_api_resources_free(r);
}

static void test_cma_kube_parse_group_list__preferred_versions(void **state)
{
    (void)state;
    size_t len;
    char *body = cma_kube_fixture_read("discovery-apis.json", &len);
    assert_non_null(body);
    struct cma_kube_group *groups = NULL;
    size_t n = 0;
    struct cma_err err;
    cma_err_clear(&err);
    assert_int_equal(cma_kube_parse_group_list(body, len, &groups, &n, &err), CMA_OK);
    assert_int_equal(n, 20);
    bool saw_autoscaling = false, saw_custom = false;
    for (size_t i = 0; i < n; i++) {
        if (strcmp(groups[i].name, "autoscaling") == 0) {
            assert_string_equal(groups[i].version, "v2");
            saw_autoscaling = true;
        }
        if (strcmp(groups[i].name, "custom.metrics.k8s.io") == 0) {
            assert_string_equal(groups[i].version, "v1beta1");
            saw_custom = true;
        }
    }
    assert_true(saw_autoscaling && saw_custom);
    cma_kube_groups_free(groups, n);
    free(body);

    body = cma_kube_fixture_read("discovery-apis-with-v1beta2.json", &len);
    assert_non_null(body);
    assert_int_equal(cma_kube_parse_group_list(body, len, &groups, &n, &err), CMA_OK);
    for (size_t i = 0; i < n; i++)
        if (strcmp(groups[i].name, "custom.metrics.k8s.io") == 0)
            assert_string_equal(groups[i].version, "v1beta2");
    cma_kube_groups_free(groups, n);
    free(body);
}

static void test_cma_kube_parse_group_list__fallback_and_errors(void **state)
{
    (void)state;
    const char *doc = "{\"groups\":[{\"name\":\"a\",\"versions\":[{\"version\":\"v3\"}]},"
                      "{\"name\":\"b\",\"versions\":[]}]}";
    struct cma_kube_group *groups = NULL;
    size_t n = 0;
    assert_int_equal(cma_kube_parse_group_list(doc, strlen(doc), &groups, &n, NULL), CMA_OK);
    assert_int_equal(n, 1); /* b has no version at all */
    assert_string_equal(groups[0].version, "v3");
    cma_kube_groups_free(groups, n);
    struct cma_err err;
    cma_err_clear(&err);
    assert_int_equal(cma_kube_parse_group_list("[]", 2, &groups, &n, &err), CMA_ERR_KUBE_ERROR);
    assert_non_null(strstr(err.msg, "not an object"));
    cma_err_clear(&err);
    assert_int_equal(cma_kube_parse_group_list("{}", 2, &groups, &n, &err), CMA_ERR_KUBE_ERROR);
    assert_non_null(strstr(err.msg, "groups is not a list"));
}

static void test_cma_kube_parse_name_page__pages_and_continue(void **state)
{
    (void)state;
    size_t len;
    char *page1 = cma_kube_fixture_read("pods-all-bert-limit2-page1.json", &len);
    assert_non_null(page1);
    char **names = NULL;
    size_t n = 0, cap = 0;
    char *cont = NULL;
    struct cma_err err;
    cma_err_clear(&err);
    assert_int_equal(cma_kube_parse_name_page(page1, len, &names, &n, &cap, &cont, &err), CMA_OK);
    assert_int_equal(n, 2);
    assert_string_equal(names[0], "bert-0");
    assert_string_equal(names[1], "bert-1");
    assert_string_equal(cont, "eyJ2IjoibWV0YS5rOHMuaW8vdjEiLCJydiI6MjY0LCJzdGFydCI6Im1sL2JlcnQtMVx1"
                              "MDAwMCJ9");
    free(cont);
    free(page1);
    char *page2 = cma_kube_fixture_read("pods-all-bert-limit2-page2.json", &len);
    assert_non_null(page2);
    assert_int_equal(cma_kube_parse_name_page(page2, len, &names, &n, &cap, &cont, &err), CMA_OK);
    assert_int_equal(n, 3);
    assert_string_equal(names[2], "bert-2");
    assert_null(cont);
    free(page2);
    for (size_t i = 0; i < n; i++)
        free(names[i]);
    free(names);
}

static void test_cma_kube_parse_name_page__partial_object_metadata(void **state)
{
    (void)state;
    size_t len;
    char *body = cma_kube_fixture_read("pods-all-bert-metadata.json", &len);
    assert_non_null(body);
    char **names = NULL;
    size_t n = 0, cap = 0;
    char *cont = NULL;
    assert_int_equal(cma_kube_parse_name_page(body, len, &names, &n, &cap, &cont, NULL), CMA_OK);
    assert_int_equal(n, 3);
    assert_string_equal(names[2], "bert-2");
    for (size_t i = 0; i < n; i++)
        free(names[i]);
    free(names);
    free(body);
}

static void test_cma_kube_parse_name_page__bad_items_leave_list_unchanged(void **state)
{
    (void)state;
    char **names = NULL;
    size_t n = 0, cap = 0;
    char *cont = NULL;
    const char *ok = "{\"items\":[{\"metadata\":{\"name\":\"a\"}}]}";
    assert_int_equal(cma_kube_parse_name_page(ok, strlen(ok), &names, &n, &cap, &cont, NULL),
                     CMA_OK);
    const char *bad = "{\"items\":[{\"metadata\":{\"name\":\"b\"}},{\"metadata\":{}}]}";
    struct cma_err err;
    cma_err_clear(&err);
    assert_int_equal(cma_kube_parse_name_page(bad, strlen(bad), &names, &n, &cap, &cont, &err),
                     CMA_ERR_KUBE_ERROR);
    assert_non_null(strstr(err.msg, "items[1].metadata.name is missing"));
    assert_int_equal(n, 1);
    const char *empty = "{\"items\":null,\"metadata\":{\"continue\":\"\"}}";
    assert_int_equal(cma_kube_parse_name_page(empty, strlen(empty), &names, &n, &cap, &cont, NULL),
                     CMA_OK);
    assert_null(cont);
    assert_int_equal(n, 1);
    free(names[0]);
    free(names);
}

static void test_cma_kube_status_message__fixtures(void **state)
{
    (void)state;
    char msg[256];
    size_t len;
    char *body = http_fixture_body("error-404-pod-not-found.http", &len);
    cma_kube_status_message(body, len, msg, sizeof(msg));
    assert_string_equal(msg, "pods \"bert-9\" not found");
    free(body);
    body = http_fixture_body("error-503-aggregated-discovery-unavailable.http", &len);
    cma_kube_status_message(body, len, msg, sizeof(msg));
    assert_string_equal(msg, "service unavailable"); /* text/plain body, trailing LF trimmed */
    free(body);
    body = http_fixture_body("error-410-list-continue-expired.http", &len);
    cma_kube_status_message(body, len, msg, 40);
    assert_string_equal(msg, "The provided continue parameter is too");
    free(body);
}

static void test_cma_kube_parse_object_page__full_pods_fixture(void **state)
{
    (void)state;
    size_t len;
    char *body = cma_kube_fixture_read("pods-ml-all-running.json", &len);
    assert_non_null(body);
    struct cma_kube_object *objs = NULL;
    size_t n = 0, cap = 0;
    char *cont = NULL;
    struct cma_err err;
    cma_err_clear(&err);
    assert_int_equal(cma_kube_parse_object_page(body, len, &objs, &n, &cap, &cont, &err), CMA_OK);
    assert_null(cont);
    assert_int_equal(n, 4);
    const char *want[] = {"bert-0", "bert-1", "bert-2", "other-0"};
    for (size_t i = 0; i < n; i++) {
        assert_string_equal(objs[i].name, want[i]);
        assert_string_equal(objs[i].namespace_, "ml");
        assert_string_equal(objs[i].phase, "Running");
        assert_int_equal(objs[i].creation_ms, T_2026_11_21_213906);
        assert_int_equal(objs[i].n_labels, 2);
        assert_string_equal(label_of(&objs[i], "tier"), "inference");
    }
    assert_string_equal(label_of(&objs[0], "app"), "bert");
    assert_string_equal(label_of(&objs[3], "app"), "other");
    cma_kube_objects_free(objs, n);
    free(body);
}

/* What the adapter asks for: PartialObjectMetadataList has no status, so no phase. */
static void test_cma_kube_parse_object_page__partial_object_metadata(void **state)
{
    (void)state;
    size_t len;
    char *body = cma_kube_fixture_read("pods-all-bert-metadata.json", &len);
    assert_non_null(body);
    struct cma_kube_object *objs = NULL;
    size_t n = 0, cap = 0;
    char *cont = NULL;
    assert_int_equal(cma_kube_parse_object_page(body, len, &objs, &n, &cap, &cont, NULL), CMA_OK);
    assert_int_equal(n, 3);
    for (size_t i = 0; i < n; i++) {
        assert_null(objs[i].phase);
        assert_string_equal(objs[i].namespace_, "ml");
        assert_string_equal(label_of(&objs[i], "app"), "bert");
        assert_int_equal(objs[i].creation_ms, T_2026_11_21_213906);
    }
    assert_string_equal(objs[2].name, "bert-2");
    cma_kube_objects_free(objs, n);
    free(body);
}

static void test_cma_kube_parse_object_page__pages_and_continue(void **state)
{
    (void)state;
    size_t len;
    char *page1 = cma_kube_fixture_read("pods-all-bert-limit2-page1.json", &len);
    assert_non_null(page1);
    struct cma_kube_object *objs = NULL;
    size_t n = 0, cap = 0;
    char *cont = NULL;
    assert_int_equal(cma_kube_parse_object_page(page1, len, &objs, &n, &cap, &cont, NULL), CMA_OK);
    assert_int_equal(n, 2);
    assert_non_null(cont);
    assert_memory_equal(cont, "eyJ2IjoibWV0YS5rOHMuaW8vdjEi", 28);
    free(cont);
    free(page1);
    char *page2 = cma_kube_fixture_read("pods-all-bert-limit2-page2.json", &len);
    assert_non_null(page2);
    assert_int_equal(cma_kube_parse_object_page(page2, len, &objs, &n, &cap, &cont, NULL), CMA_OK);
    assert_null(cont);
    assert_int_equal(n, 3);
    assert_string_equal(objs[0].name, "bert-0");
    assert_string_equal(objs[2].name, "bert-2");
    cma_kube_objects_free(objs, n);
    free(page2);
}

/* Cluster-scoped objects, no labels, no creationTimestamp; then malformed pages leave the list
 * as it was. */
static void test_cma_kube_parse_object_page__nodes_and_bad_items(void **state)
{
    (void)state;
    struct cma_kube_object *objs = NULL;
    size_t n = 0, cap = 0;
    char *cont = NULL;
    const char *ok = "{\"kind\":\"PartialObjectMetadataList\",\"items\":[{\"metadata\":{\"name\":"
                     "\"n1\",\"labels\":null}},{\"metadata\":{\"name\":\"n2\",\"namespace\":\"\","
                     "\"creationTimestamp\":\"2026-11-21T21:39:06.5+02:30\"}}]}";
    assert_int_equal(cma_kube_parse_object_page(ok, strlen(ok), &objs, &n, &cap, &cont, NULL),
                     CMA_OK);
    assert_int_equal(n, 2);
    assert_null(objs[0].namespace_);
    assert_null(objs[1].namespace_);
    assert_int_equal(objs[0].n_labels, 0);
    assert_int_equal(objs[0].creation_ms, 0);
    assert_int_equal(objs[1].creation_ms, T_2026_11_21_213906 - 9000000 + 500);
    const char *bad[] = {
        "{\"items\":[{\"metadata\":{\"name\":\"a\"}},{\"metadata\":{}}]}",
        "{\"items\":[{\"metadata\":{\"name\":\"a\",\"labels\":[]}}]}",
        "{\"items\":[{\"metadata\":{\"name\":\"a\",\"labels\":{\"x\":1}}}]}",
        "{\"items\":[{\"metadata\":{\"name\":\"a\",\"creationTimestamp\":\"yesterday\"}}]}",
        "{\"items\":{}}",
        "[]",
        "{",
    };
    const char *why[] = {"items[1].metadata.name is missing",
                         "labels is not an object",
                         "labels[x] is not a string",
                         "not RFC 3339",
                         "items is not a list",
                         "not an object",
                         "unexpected JSON"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        struct cma_err err;
        cma_err_clear(&err);
        assert_int_equal(
            cma_kube_parse_object_page(bad[i], strlen(bad[i]), &objs, &n, &cap, &cont, &err),
            CMA_ERR_KUBE_ERROR);
        if (!strstr(err.msg, why[i]))
            fail_msg("case %zu: %s", i, err.msg);
        assert_int_equal(n, 2);
        assert_null(cont);
    }
    assert_string_equal(objs[1].name, "n2");
    cma_kube_objects_free(objs, n);
    cma_kube_objects_free(NULL, 0);
}

static void test_cma_kube_parse_time__forms(void **state)
{
    (void)state;
    int64_t ms = -1;
    assert_true(cma_kube_parse_time("2026-11-21T21:39:06Z", &ms));
    assert_int_equal(ms, T_2026_11_21_213906);
    assert_true(cma_kube_parse_time("2026-11-21T21:39:06.123456789Z", &ms));
    assert_int_equal(ms, T_2026_11_21_213906 + 123);
    assert_true(cma_kube_parse_time("2026-11-21T22:39:06+01:00", &ms));
    assert_int_equal(ms, T_2026_11_21_213906);
    assert_true(cma_kube_parse_time("2026-11-21t19:39:06-01:00", &ms));
    assert_int_equal(ms, T_2026_11_21_213906 - 3600000);
    assert_true(cma_kube_parse_time("1970-01-01T00:00:00Z", &ms));
    assert_int_equal(ms, 0);
    const char *bad[] = {"",
                         "2026-11-21",
                         "2026-11-21T21:39:06",
                         "2026-13-21T21:39:06Z",
                         "2026-11-21T21:39:06.Z",
                         "2026-11-21T21:39:06Zjunk",
                         "2026-11-21T21:39:06+0100",
                         "2026/11/21T21:39:06Z",
                         "2026-11-21T25:39:06Z"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        ms = 42;
        if (cma_kube_parse_time(bad[i], &ms))
            fail_msg("accepted \"%s\"", bad[i]);
        assert_int_equal(ms, 42);
    }
    assert_false(cma_kube_parse_time(NULL, &ms));
}

/* ---- LIST pages with the list's resourceVersion (watch caches) ---------------------------- */

static void test_cma_kube_parse_list_page__resource_version(void **state)
{
    (void)state;
    size_t len;
    char *body = cma_kube_fixture_read("pods-all-bert-before-watch.json", &len);
    assert_non_null(body);
    struct cma_kube_object *objs = NULL;
    size_t n = 0, cap = 0;
    char *rv = NULL, *cont = NULL;
    struct cma_err err;
    cma_err_clear(&err);
    assert_int_equal(cma_kube_parse_list_page(body, len, &objs, &n, &cap, &rv, &cont, &err),
                     CMA_OK);
    assert_int_equal(n, 3);
    assert_string_equal(rv, "266");
    assert_null(cont);
    assert_string_equal(objs[0].phase, "Running"); /* full objects: status.phase is read */
    free(rv);
    free(body);
    /* a bad page returns neither string and leaves the objects as they were */
    const char *bad = "{\"metadata\":{\"resourceVersion\":\"7\",\"continue\":\"c\"},"
                      "\"items\":[{\"metadata\":{}}]}";
    rv = cont = NULL;
    cma_err_clear(&err);
    assert_int_equal(cma_kube_parse_list_page(bad, strlen(bad), &objs, &n, &cap, &rv, &cont, &err),
                     CMA_ERR_KUBE_ERROR);
    assert_null(rv);
    assert_null(cont);
    assert_int_equal(n, 3);
    /* an empty list without a resourceVersion */
    const char *empty = "{\"metadata\":{\"resourceVersion\":\"\"},\"items\":null}";
    assert_int_equal(
        cma_kube_parse_list_page(empty, strlen(empty), &objs, &n, &cap, &rv, &cont, NULL), CMA_OK);
    assert_null(rv);
    assert_int_equal(n, 3);
    cma_kube_objects_free(objs, n);
}

/* ---- watch stream lines ------------------------------------------------------------------ */

struct lines_seen {
    size_t n;
    size_t bytes;
    char first[64], last[64];
    size_t stop_at; /* > 0: the n-th line fails */
};

static enum cma_errc on_line(void *ctx, const char *line, size_t len, struct cma_err *reterr)
{
    struct lines_seen *ls = ctx;
    ls->n++;
    ls->bytes += len;
    assert_true(len > 0);
    assert_null(memchr(line, '\n', len));
    assert_true(line[len - 1] != '\r' && line[len - 1] != ' ');
    if (ls->n == 1)
        snprintf(ls->first, sizeof(ls->first), "%.*s", (int)len, line);
    snprintf(ls->last, sizeof(ls->last), "%.*s", (int)len, line);
    if (ls->stop_at && ls->n == ls->stop_at)
        return cma_err_set(reterr, CMA_ERR_KUBE_ERROR, "line %zu refused", ls->n);
    return CMA_OK;
}

/* The recorded watch stream, fed in chunks of every size from 1 byte to the whole: the same
 * lines come out whatever the cuts. */
static void test_cma_kube_lines_feed__recorded_stream_any_chunks(void **state)
{
    (void)state;
    size_t len;
    char *body = cma_kube_fixture_read("watch-pods-all.jsonl", &len);
    assert_non_null(body);
    size_t want_lines = 0;
    for (size_t i = 0; i < len; i++)
        want_lines += body[i] == '\n';
    assert_true(want_lines >= 4);
    static const size_t chunks[] = {1, 7, 100, 4096, 0};
    for (size_t c = 0; c < sizeof(chunks) / sizeof(chunks[0]); c++) {
        size_t step = chunks[c] ? chunks[c] : len;
        struct cma_kube_lines l;
        cma_kube_lines_init(&l, 1 << 20);
        struct lines_seen ls = {0};
        for (size_t off = 0; off < len; off += step) {
            size_t n = len - off < step ? len - off : step;
            assert_int_equal(cma_kube_lines_feed(&l, body + off, n, on_line, &ls, NULL), CMA_OK);
        }
        assert_int_equal(cma_kube_lines_finish(&l, on_line, &ls, NULL), CMA_OK);
        assert_int_equal(ls.n, want_lines);
        assert_int_equal(ls.bytes, len - want_lines);
        assert_memory_equal(ls.first, "{\"type\":\"ADDED\"", 15);
        cma_kube_lines_done(&l);
    }
    free(body);
}

static void test_cma_kube_lines_feed__crlf_blank_lines_and_last_line(void **state)
{
    (void)state;
    struct cma_kube_lines l;
    cma_kube_lines_init(&l, 64);
    struct lines_seen ls = {0};
    const char *text = "{\"a\":1}\r\n\n  \r\n{\"b\"";
    assert_int_equal(cma_kube_lines_feed(&l, text, strlen(text), on_line, &ls, NULL), CMA_OK);
    assert_int_equal(ls.n, 1);
    assert_string_equal(ls.first, "{\"a\":1}");
    assert_int_equal(cma_kube_lines_feed(&l, ":2} ", 4, on_line, &ls, NULL), CMA_OK);
    assert_int_equal(ls.n, 1); /* no newline yet */
    assert_int_equal(cma_kube_lines_finish(&l, on_line, &ls, NULL), CMA_OK);
    assert_int_equal(ls.n, 2);
    assert_string_equal(ls.last, "{\"b\":2}");
    assert_int_equal(cma_kube_lines_finish(&l, on_line, &ls, NULL), CMA_OK);
    assert_int_equal(ls.n, 2); /* nothing left */
    cma_kube_lines_done(&l);
}

static void test_cma_kube_lines_feed__errors(void **state)
{
    (void)state;
    struct cma_kube_lines l;
    cma_kube_lines_init(&l, 16);
    struct lines_seen ls = {0};
    struct cma_err err;
    cma_err_clear(&err);
    const char *part = "0123456789";
    assert_int_equal(cma_kube_lines_feed(&l, part, 10, on_line, &ls, &err), CMA_OK);
    assert_int_equal(cma_kube_lines_feed(&l, part, 10, on_line, &ls, &err), CMA_ERR_KUBE_ERROR);
    assert_string_equal(err.msg, "a watch event is over 16 bytes");
    assert_int_equal(ls.n, 0);
    cma_kube_lines_done(&l);
    cma_kube_lines_init(&l, 16);
    ls = (struct lines_seen){.stop_at = 2};
    cma_err_clear(&err);
    const char *three = "a\nb\nc\n";
    assert_int_equal(cma_kube_lines_feed(&l, three, strlen(three), on_line, &ls, &err),
                     CMA_ERR_KUBE_ERROR);
    assert_string_equal(err.msg, "line 2 refused");
    assert_int_equal(ls.n, 2); /* the third line was not handed over */
    cma_kube_lines_done(&l);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cma_kube_parse_api_versions__fixture),
        cmocka_unit_test(test_cma_kube_parse_resource_list__core_fixture),
        cmocka_unit_test(test_cma_kube_parse_resource_list__apps_fixture_appends),
        cmocka_unit_test(test_cma_kube_parse_resource_list__singular_name_kept),
        cmocka_unit_test(test_cma_kube_parse_group_list__preferred_versions),
        cmocka_unit_test(test_cma_kube_parse_group_list__fallback_and_errors),
        cmocka_unit_test(test_cma_kube_parse_name_page__pages_and_continue),
        cmocka_unit_test(test_cma_kube_parse_name_page__partial_object_metadata),
        cmocka_unit_test(test_cma_kube_parse_name_page__bad_items_leave_list_unchanged),
        cmocka_unit_test(test_cma_kube_status_message__fixtures),
        cmocka_unit_test(test_cma_kube_parse_object_page__full_pods_fixture),
        cmocka_unit_test(test_cma_kube_parse_object_page__partial_object_metadata),
        cmocka_unit_test(test_cma_kube_parse_object_page__pages_and_continue),
        cmocka_unit_test(test_cma_kube_parse_object_page__nodes_and_bad_items),
        cmocka_unit_test(test_cma_kube_parse_time__forms),
        cmocka_unit_test(test_cma_kube_parse_list_page__resource_version),
        cmocka_unit_test(test_cma_kube_lines_feed__recorded_stream_any_chunks),
        cmocka_unit_test(test_cma_kube_lines_feed__crlf_blank_lines_and_last_line),
        cmocka_unit_test(test_cma_kube_lines_feed__errors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
