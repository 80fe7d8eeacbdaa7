/* kube_stream_test.c: the streaming decoder of LIST pages (src/clients/kube_stream.c) against
 * the whole-page decoder (kube_decode.c's cma_kube_parse_list_page) on real recorded bodies
 * (../shared/fixtures/kube-apiserver) cut into chunks of many sizes, the same bad pages giving
 * the same errors, a callback's error stopping the page, and what it holds: one item's kept
 * strings, the same for a page of 500 real-shaped pods as for a page of one, and less than one
 * pod's JSON (managedFields, annotations, ownerReferences, spec and status are never copied). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <jansson.h>

#include "../../src/clients/internal.h"
#include "cma/kube.h"
#include "fakehttp.h"

/* What the callback saw: a deep copy of every object. */
struct seen {
    struct cma_kube_object *objs;
    size_t n, cap;
    size_t fail_at; /* refuse the object with this index + 1 (0: never) */
};

static char *dup_or_null(const char *s)
{
    return s ? strdup(s) : NULL;
}

static enum cma_errc on_objects(void *ctx, const struct cma_kube_object *objs, size_t n,
                                struct cma_err *reterr)
{
    struct seen *s = ctx;
    assert_int_equal(n, 1);
    if (s->fail_at && s->n + 1 == s->fail_at)
        return cma_err_set(reterr, CMA_ERR_NOMEM, "refused by the test");
    if (s->n == s->cap) {
        s->cap = s->cap ? s->cap * 2 : 8;
        s->objs = realloc(s->objs, s->cap * sizeof(*s->objs));
        assert_non_null(s->objs);
    }
    struct cma_kube_object *o = &s->objs[s->n++];
    memset(o, 0, sizeof(*o));
    o->name = strdup(objs->name);
    o->namespace_ = dup_or_null(objs->namespace_);
    o->phase = dup_or_null(objs->phase);
    o->creation_ms = objs->creation_ms;
    o->n_labels = objs->n_labels;
    o->label_names = calloc(o->n_labels + 1, sizeof(char *));
    o->label_values = calloc(o->n_labels + 1, sizeof(char *));
    for (size_t i = 0; i < o->n_labels; i++) {
        o->label_names[i] = strdup(objs->label_names[i]);
        o->label_values[i] = strdup(objs->label_values[i]);
    }
    return CMA_OK;
}

static void seen_done(struct seen *s)
{
    cma_kube_objects_free(s->objs, s->n);
    memset(s, 0, sizeof(*s));
}

/* Decodes body in chunks of `chunk` bytes; the parser is returned for its counters. */
static enum cma_errc stream(const char *body, size_t len, size_t chunk, struct seen *s, char **rv,
                            char **cont, struct cma_err *err, size_t *ret_peak)
{
    struct cma_kube_page_parser *p = NULL;
    assert_int_equal(cma_kube_page_parser_new(on_objects, s, &p), CMA_OK);
    enum cma_errc rc = CMA_OK;
    for (size_t at = 0; at < len && rc == CMA_OK; at += chunk)
        rc = cma_kube_page_parser_feed(p, body + at, len - at < chunk ? len - at : chunk, err);
    if (rc == CMA_OK)
        rc = cma_kube_page_parser_finish(p, rv, cont, err);
    if (rc == CMA_OK)
        assert_int_equal(cma_kube_page_parser_count(p), s->n);
    if (ret_peak)
        *ret_peak = cma_kube_page_parser_peak(p);
    cma_kube_page_parser_free(p);
    return rc;
}

static void assert_same_string(const char *a, const char *b)
{
    if (!a || !b)
        assert_ptr_equal(a, b);
    else
        assert_string_equal(a, b);
}

static void assert_same_objects(const struct cma_kube_object *a, const struct cma_kube_object *b,
                                size_t n)
{
    for (size_t i = 0; i < n; i++) {
        assert_string_equal(a[i].name, b[i].name);
        assert_same_string(a[i].namespace_, b[i].namespace_);
        assert_same_string(a[i].phase, b[i].phase);
        assert_int_equal(a[i].creation_ms, b[i].creation_ms);
        assert_int_equal(a[i].n_labels, b[i].n_labels);
        for (size_t l = 0; l < a[i].n_labels; l++) {
            assert_string_equal(a[i].label_names[l], b[i].label_names[l]);
            assert_string_equal(a[i].label_values[l], b[i].label_values[l]);
        }
    }
}

/* The streamed decode of body equals the whole-page one, for every chunk size given. */
static void check_same_as_whole_page(const char *body, size_t len, size_t want_n)
{
    struct cma_kube_object *objs = NULL;
    size_t n = 0, cap = 0;
    char *rv = NULL, *cont = NULL;
    assert_int_equal(cma_kube_parse_list_page(body, len, &objs, &n, &cap, &rv, &cont, NULL),
                     CMA_OK);
    assert_int_equal(n, want_n);
    const size_t chunks[] = {1, 2, 3, 7, 64, 1000, 4096, len};
    for (size_t c = 0; c < sizeof(chunks) / sizeof(chunks[0]); c++) {
        struct seen s = {0};
        char *srv = NULL, *scont = NULL;
        struct cma_err err;
        cma_err_clear(&err);
        if (stream(body, len, chunks[c], &s, &srv, &scont, &err, NULL) != CMA_OK)
            fail_msg("chunks of %zu: %s", chunks[c], err.msg);
        assert_int_equal(s.n, n);
        assert_same_objects(objs, s.objs, n);
        assert_same_string(rv, srv);
        assert_same_string(cont, scont);
        free(srv);
        free(scont);
        seen_done(&s);
    }
    cma_kube_objects_free(objs, n);
    free(rv);
    free(cont);
}

static void test_cma_kube_page_parser__recorded_pages_any_chunks(void **state)
{
    (void)state;
    const char *files[] = {"pods-ml-all-running.json", "pods-all-bert-metadata.json",
                           "pods-all-bert-limit2-page1.json", "pods-all-bert-limit2-page2.json",
                           "pods-all-bert-before-watch.json"};
    const size_t want[] = {4, 3, 2, 1, 3};
    for (size_t f = 0; f < sizeof(files) / sizeof(files[0]); f++) {
        size_t len;
        char *body = cma_kube_fixture_read(files[f], &len);
        if (!body)
            fail_msg("no fixture %s", files[f]);
        check_same_as_whole_page(body, len, want[f]);
        free(body);
    }
}

static void test_cma_kube_page_parser__edge_pages_match_whole_page(void **state)
{
    (void)state;
    const char *pages[] = {
        "{\"items\":null,\"metadata\":{\"resourceVersion\":\"\"}}",
        "{\"metadata\":{\"continue\":\"abc\",\"resourceVersion\":7},\"items\":[]}",
        "{\"items\":[{\"metadata\":{\"name\":\"n1\",\"labels\":null,\"namespace\":7}},"
        "{\"status\":{\"phase\":{}},\"metadata\":{\"name\":\"x\",\"name\":\"n2\",\"namespace\":"
        "\"\",\"creationTimestamp\":\"2026-11-21T21:39:06.5+02:30\"},\"spec\":[1,{\"a\":[]}]}],"
        "\"kind\":\"PartialObjectMetadataList\",\"metadata\":{\"continue\":\"t\"}}",
    };
    const size_t want[] = {0, 0, 2};
    for (size_t i = 0; i < sizeof(pages) / sizeof(pages[0]); i++)
        check_same_as_whole_page(pages[i], strlen(pages[i]), want[i]);
}

static void test_cma_kube_page_parser__bad_pages_same_errors(void **state)
{
    (void)state;
    const char *bad[] = {
        "{\"items\":[{\"metadata\":{\"name\":\"a\"}},{\"metadata\":{}}]}",
        "{\"items\":[{\"metadata\":{\"name\":\"a\",\"labels\":[]}}]}",
        "{\"items\":[{\"metadata\":{\"name\":\"a\",\"labels\":{\"x\":1}}}]}",
        "{\"items\":[{\"metadata\":{\"name\":\"a\",\"creationTimestamp\":\"yesterday\"}}]}",
        "{\"items\":{}}",
        "{\"items\":[3]}",
        "[]",
        "{",
        "",
    };
    const char *why[] = {"items[1].metadata.name is missing",
                         "items[0].metadata.labels is not an object",
                         "items[0].metadata.labels[x] is not a string",
                         "not RFC 3339",
                         "items is not a list",
                         "items[0].metadata.name is missing",
                         "the answer is not an object",
                         "unexpected JSON from the Kubernetes API",
                         "unexpected JSON from the Kubernetes API"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        struct cma_kube_object *objs = NULL;
        size_t n = 0, cap = 0;
        char *rv = NULL, *cont = NULL;
        struct cma_err werr, serr;
        cma_err_clear(&werr);
        cma_err_clear(&serr);
        assert_int_equal(
            cma_kube_parse_list_page(bad[i], strlen(bad[i]), &objs, &n, &cap, &rv, &cont, &werr),
            CMA_ERR_KUBE_ERROR);
        free(objs);
        struct seen s = {0};
        assert_int_equal(stream(bad[i], strlen(bad[i]), 3, &s, &rv, &cont, &serr, NULL),
                         CMA_ERR_KUBE_ERROR);
        if (!strstr(werr.msg, why[i]) || !strstr(serr.msg, why[i]))
            fail_msg("case %zu: whole page \"%s\", streamed \"%s\"", i, werr.msg, serr.msg);
        assert_null(rv);
        assert_null(cont);
        seen_done(&s);
    }
}

static void test_cma_kube_page_parser__callback_error_stops_the_page(void **state)
{
    (void)state;
    size_t len;
    char *body = cma_kube_fixture_read("pods-ml-all-running.json", &len);
    assert_non_null(body);
    struct seen s = {.fail_at = 2};
    char *rv = NULL, *cont = NULL;
    struct cma_err err;
    cma_err_clear(&err);
    assert_int_equal(stream(body, len, 512, &s, &rv, &cont, &err, NULL), CMA_ERR_NOMEM);
    assert_string_equal(err.msg, "refused by the test");
    assert_int_equal(s.n, 1); /* bert-0 went through, bert-1 was refused, nothing after it */
    assert_string_equal(s.objs[0].name, "bert-0");
    assert_null(rv);
    seen_done(&s);
    free(body);
}

/* A page of n pods shaped like a real cluster's (the recorded bert-0 with five labels, three
 * annotations and an ownerReference beside its managedFields, spec and status); *one_len: the
 * JSON length of one of them. */
static char *real_page(size_t n, size_t *one_len)
{
    size_t len;
    char *body = cma_kube_fixture_read("pods-ml-all-running.json", &len);
    assert_non_null(body);
    json_t *list = json_loadb(body, len, 0, NULL);
    free(body);
    assert_non_null(list);
    json_t *pod = json_array_get(json_object_get(list, "items"), 0);
    json_t *meta = json_object_get(pod, "metadata");
    json_object_set_new(meta, "labels",
                        json_pack("{s:s,s:s,s:s,s:s,s:s}", "app", "bert", "pod-template-hash",
                                  "7d9f8c6b5d", "app.kubernetes.io/name", "bert",
                                  "app.kubernetes.io/instance", "bert-prod", "tier", "inference"));
    json_object_set_new(meta, "annotations",
                        json_pack("{s:s,s:s,s:s}", "kubectl.kubernetes.io/restartedAt",
                                  "2026-11-21T21:30:00Z", "prometheus.io/scrape", "true",
                                  "prometheus.io/port", "8002"));
    json_object_set_new(meta, "ownerReferences",
                        json_pack("[{s:s,s:s,s:s,s:s,s:b,s:b}]", "apiVersion", "apps/v1", "kind",
                                  "ReplicaSet", "name", "bert-7d9f8c6b5d", "uid",
                                  "5e0c2a4e-98a1-4c1e-9a57-6f0b3c1d2e4f", "controller", 1,
                                  "blockOwnerDeletion", 1));
    char *one = json_dumps(pod, JSON_COMPACT);
    *one_len = strlen(one);
    free(one);
    json_t *items = json_array();
    for (size_t i = 0; i < n; i++) {
        char name[48];
        snprintf(name, sizeof(name), "bert-7d9f8c6b5d-%05zu", i);
        json_object_set_new(meta, "name", json_string(name));
        json_array_append_new(items, json_deep_copy(pod));
    }
    json_t *page = json_pack("{s:s,s:s,s:{s:s},s:o}", "kind", "PodList", "apiVersion", "v1",
                             "metadata", "resourceVersion", "4242", "items", items);
    char *text = json_dumps(page, JSON_COMPACT);
    json_decref(page);
    json_decref(list);
    assert_non_null(text);
    return text;
}

static void test_cma_kube_page_parser__holds_one_items_kept_strings(void **state)
{
    (void)state;
    size_t one_len = 0, peak[2] = {0, 0};
    const size_t pods[2] = {1, 500};
    for (size_t i = 0; i < 2; i++) {
        char *page = real_page(pods[i], &one_len);
        struct seen s = {0};
        char *rv = NULL, *cont = NULL;
        struct cma_err err;
        cma_err_clear(&err);
        if (stream(page, strlen(page), 16384, &s, &rv, &cont, &err, &peak[i]) != CMA_OK)
            fail_msg("%s", err.msg);
        assert_int_equal(s.n, pods[i]);
        assert_int_equal(s.objs[s.n - 1].n_labels, 5);
        assert_string_equal(s.objs[s.n - 1].label_values[1], "7d9f8c6b5d");
        assert_string_equal(rv, "4242");
        free(rv);
        free(page);
        seen_done(&s);
    }
    /* what a pod keeps (name, namespace, phase, creationTimestamp, five labels) is about 200
     * bytes of its 4 KB: the parser holds that much, not the pod, and not the page */
    assert_true(one_len > 3500);
    assert_true(peak[0] > 0);
    assert_true(peak[0] * 4 < one_len);
    assert_int_equal(peak[1], peak[0]);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cma_kube_page_parser__recorded_pages_any_chunks),
        cmocka_unit_test(test_cma_kube_page_parser__edge_pages_match_whole_page),
        cmocka_unit_test(test_cma_kube_page_parser__bad_pages_same_errors),
        cmocka_unit_test(test_cma_kube_page_parser__callback_error_stops_the_page),
        cmocka_unit_test(test_cma_kube_page_parser__holds_one_items_kept_strings),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
