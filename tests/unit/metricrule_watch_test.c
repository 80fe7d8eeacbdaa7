/* metricrule_watch_test.c: the MetricRule watch: objects decoded whole (namespace, name, uid,
 * generation, creationTimestamp, resourceVersion, spec as JSON), events applied in order and
 * kept sorted, bookmarks, ERROR events; and the thread against the fake HTTP server: LIST, WATCH
 * from the list's resourceVersion, a clean end watched again from the bookmark, an ERROR 410 and
 * an HTTP 410 each re-listed, a dropped connection reconnected from the last resourceVersion. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cmocka.h>

#include "../../src/clients/internal.h"
#include "cma/kube.h"
#include "cma/metricrule_watch.h"
#include "fakehttp.h"

#define MR(ns, name, rv, gen, spec)                                                                \
    "{\"apiVersion\":\"metrics.custom-metrics-adapter.dev/v1alpha1\",\"kind\":\"MetricRule\","     \
    "\"metadata\":{\"name\":\"" name "\",\"namespace\":\"" ns "\",\"uid\":\"uid-" name "\","       \
    "\"resourceVersion\":\"" rv "\",\"generation\":" gen ","                                       \
    "\"creationTimestamp\":\"2026-12-01T10:00:0" gen "Z\"},\"spec\":" spec "}"

#define SPEC_A "{\"rules\":[{\"seriesQuery\":\"a_total\",\"metricsQuery\":\"sum(<<.Series>>)\"}]}"
#define SPEC_B "{\"externalRules\":[{\"seriesQuery\":\"b\",\"metricsQuery\":\"max(<<.Series>>)\"}]}"

static const char list_1[] =
    "{\"kind\":\"MetricRuleList\",\"metadata\":{\"resourceVersion\":\"10\"},"
    "\"items\":[" MR("shop", "b", "9", "1", SPEC_B) "," MR("bank", "a", "8", "1", SPEC_A) "]}";

static struct cma_metricrule_watch *fed(void)
{
    struct cma_metricrule_watch *w = NULL;
    assert_int_equal(cma_metricrule_watch_new(NULL, NULL, &w, NULL), CMA_OK);
    assert_int_equal(cma_metricrule_watch_apply_list(w, list_1, strlen(list_1), NULL), CMA_OK);
    return w;
}

static void event(struct cma_metricrule_watch *w, const char *line, bool want_changed)
{
    bool gone = true, changed = !want_changed;
    struct cma_err err = {0};
    if (cma_metricrule_watch_apply_event(w, line, strlen(line), &gone, &changed, &err) != CMA_OK)
        fail_msg("event %s: %s", line, err.msg);
    assert_false(gone);
    assert_int_equal(changed, want_changed);
}

static void test_cma_metricrule_watch__list_decodes_whole_objects_sorted(void **state)
{
    (void)state;
    struct cma_metricrule_watch *w = fed();
    assert_true(cma_metricrule_watch_is_synced(w));
    char rv[64];
    cma_metricrule_watch_resource_version(w, rv, sizeof(rv));
    assert_string_equal(rv, "10");
    struct cma_metricrule *o = NULL;
    size_t n = 0;
    assert_int_equal(cma_metricrule_watch_snapshot(w, &o, &n, NULL), CMA_OK);
    assert_int_equal(n, 2);
    assert_string_equal(o[0].namespace_, "bank");
    assert_string_equal(o[0].name, "a");
    assert_string_equal(o[0].uid, "uid-a");
    assert_string_equal(o[0].resource_version, "8");
    assert_int_equal(o[0].generation, 1);
    assert_string_equal(o[0].creation_timestamp, "2026-12-01T10:00:01Z");
    /* 2026-12-01T10:00:01Z */
    assert_int_equal(o[0].creation_ms, 1796119201000LL);
    assert_string_equal(o[0].spec_json, SPEC_A);
    assert_string_equal(o[1].namespace_, "shop");
    assert_string_equal(o[1].spec_json, SPEC_B);
    cma_metricrules_free(o, n);
    cma_metricrule_watch_free(w);
}

static void test_cma_metricrule_watch__events_in_order(void **state)
{
    (void)state;
    struct cma_metricrule_watch *w = fed();
    uint64_t before = cma_metricrule_watch_changes(w);
    event(w, "{\"type\":\"ADDED\",\"object\":" MR("dev", "c", "11", "1", SPEC_A) "}", true);
    event(w,
          "{\"type\":\"MODIFIED\",\"object\":" MR(
              "shop", "b", "12", "2",
              SPEC_A ",\"status\":{\"observedGeneration\":2,\"metrics\":[]}") "}",
          true);
    event(w, "{\"type\":\"DELETED\",\"object\":" MR("bank", "a", "13", "1", SPEC_A) "}", true);
    event(w, "{\"type\":\"DELETED\",\"object\":" MR("bank", "zz", "14", "1", SPEC_A) "}", true);
    event(w,
          "{\"type\":\"BOOKMARK\",\"object\":{\"kind\":\"MetricRule\",\"metadata\":"
          "{\"resourceVersion\":\"15\"}}}",
          false);
    assert_int_equal(cma_metricrule_watch_changes(w), before + 4);
    char rv[64];
    cma_metricrule_watch_resource_version(w, rv, sizeof(rv));
    assert_string_equal(rv, "15");
    struct cma_metricrule *o = NULL;
    size_t n = 0;
    assert_int_equal(cma_metricrule_watch_snapshot(w, &o, &n, NULL), CMA_OK);
    assert_int_equal(n, 2);
    assert_string_equal(o[0].namespace_, "dev");
    assert_string_equal(o[1].name, "b");
    assert_int_equal(o[1].generation, 2);
    assert_string_equal(o[1].resource_version, "12");
    assert_string_equal(o[1].spec_json, SPEC_A);
    /* the status as the server sent it, compact, keys in its order; "" without one */
    assert_string_equal(o[1].status_json, "{\"observedGeneration\":2,\"metrics\":[]}");
    assert_string_equal(o[0].status_json, "");
    cma_metricrules_free(o, n);
    cma_metricrule_watch_free(w);
}

static void test_cma_metricrule_watch__error_events(void **state)
{
    (void)state;
    struct cma_metricrule_watch *w = fed();
    bool gone = false;
    const char *g = "{\"type\":\"ERROR\",\"object\":{\"kind\":\"Status\",\"code\":410,"
                    "\"message\":\"too old resource version\"}}";
    assert_int_equal(cma_metricrule_watch_apply_event(w, g, strlen(g), &gone, NULL, NULL), CMA_OK);
    assert_true(gone);
    struct cma_err err = {0};
    const char *e = "{\"type\":\"ERROR\",\"object\":{\"kind\":\"Status\",\"code\":500,"
                    "\"message\":\"etcd down\"}}";
    assert_int_equal(cma_metricrule_watch_apply_event(w, e, strlen(e), &gone, NULL, &err),
                     CMA_ERR_KUBE_ERROR);
    assert_false(gone);
    assert_non_null(strstr(err.msg, "etcd down"));
    cma_err_clear(&err);
    assert_int_equal(cma_metricrule_watch_apply_event(w, "{not json", 9, &gone, NULL, &err),
                     CMA_ERR_KUBE_ERROR);
    const char *nameless = "{\"type\":\"ADDED\",\"object\":{\"metadata\":{}}}";
    assert_int_equal(
        cma_metricrule_watch_apply_event(w, nameless, strlen(nameless), &gone, NULL, NULL),
        CMA_ERR_KUBE_ERROR);
    assert_int_equal(cma_metricrule_watch_apply_list(w, "[]", 2, NULL), CMA_ERR_KUBE_ERROR);
    size_t n = 0;
    struct cma_metricrule *o = NULL;
    assert_int_equal(cma_metricrule_watch_snapshot(w, &o, &n, NULL), CMA_OK);
    assert_int_equal(n, 2); /* nothing applied */
    cma_metricrules_free(o, n);
    cma_metricrule_watch_free(w);
}

/* ---- the thread against the fake kube-apiserver ------------------------------------------- */

static const char list_2[] =
    "{\"kind\":\"MetricRuleList\",\"metadata\":{\"resourceVersion\":\"20\"},"
    "\"items\":[" MR("shop", "b", "19", "3", SPEC_B) "]}";
static const char list_3[] =
    "{\"kind\":\"MetricRuleList\",\"metadata\":{\"resourceVersion\":\"30\"},"
    "\"items\":[" MR("shop", "b", "19", "3", SPEC_B) "," MR("dev", "d", "29", "1", SPEC_A) "]}";
static const char watch_1[] = "{\"type\":\"ADDED\",\"object\":" MR(
    "dev", "c", "11", "1",
    SPEC_A) "}\n"
            "{\"type\":\"BOOKMARK\",\"object\":{\"kind\":\"MetricRule\",\"metadata\":"
            "{\"resourceVersion\":\"15\"}}}\n";
static const char watch_gone[] = "{\"type\":\"ERROR\",\"object\":{\"kind\":\"Status\",\"code\":410,"
                                 "\"reason\":\"Expired\",\"message\":\"too old\"}}\n";
static const char status_410[] =
    "{\"kind\":\"Status\",\"apiVersion\":\"v1\",\"status\":\"Failure\","
    "\"reason\":\"Expired\",\"code\":410,\"message\":\"too old\"}";

struct script {
    int step; /* server thread only */
};

/* The apiserver's answers in order: LIST, WATCH (events, clean end), WATCH (ERROR 410), LIST,
 * WATCH (dropped), WATCH (HTTP 410), LIST, then WATCHes held open until the test stops. */
static void answer(void *ctx, const struct cma_fake_request *req, struct cma_fake_answer *ans)
{
    struct script *s = ctx;
    static const struct cma_fake_answer steps[] = {
        {.status = 200, .body = list_1},
        {.status = 200, .body = watch_1, .chunk = 40},
        {.status = 200, .body = watch_gone},
        {.status = 200, .body = list_2},
        {.status = 0},
        {.status = 410, .body = status_410},
        {.status = 200, .body = list_3},
    };
    size_t n = sizeof(steps) / sizeof(steps[0]);
    (void)req;
    if ((size_t)s->step < n)
        *ans = steps[s->step];
    else
        *ans = (struct cma_fake_answer){.status = 200, .body = "", .delay_ms = 60000};
    s->step++;
}

static void on_event(void *ctx, const struct cma_metricrule_event *ev)
{
    int *counts = ctx; /* one thread calls this */
    counts[ev->kind]++;
}

static bool wait_for_requests(struct cma_fake_http *s, size_t n)
{
    for (int i = 0; i < 3000; i++) { /* a bound against a hang, not a timing check */
        if (cma_fake_http_count(s) >= n)
            return true;
        struct timespec ts = {0, 10 * 1000000L};
        nanosleep(&ts, NULL);
    }
    return false;
}

static void test_cma_metricrule_watch__thread_relists_and_reconnects(void **state)
{
    (void)state;
    struct script sc = {0};
    struct cma_fake_http *srv = cma_fake_http_start_fn(answer, &sc);
    assert_non_null(srv);
    char *url = cma_fake_http_url(srv, "");
    struct cma_kube_conn conn = {.server = url, .token = "t"};
    struct cma_kube *k = NULL;
    assert_int_equal(cma_kube_new_from_conn(&conn, 5000, &k, NULL), CMA_OK);
    int counts[8] = {0};
    struct cma_metricrule_observer obs = {.on_event = on_event, .ctx = counts};
    struct cma_metricrule_watch *w = NULL;
    assert_int_equal(cma_metricrule_watch_new(k, &obs, &w, NULL), CMA_OK);
    assert_int_equal(cma_metricrule_watch_start(w, NULL), CMA_OK);
    assert_true(wait_for_requests(srv, 8));
    struct cma_metricrule *o = NULL;
    size_t n = 0;
    assert_int_equal(cma_metricrule_watch_snapshot(w, &o, &n, NULL), CMA_OK);
    size_t lists = cma_metricrule_watch_lists(w);
    cma_metricrule_watch_free(w); /* stops the held watch */

    const char *want[] = {
        "/apis/metrics.custom-metrics-adapter.dev/v1alpha1/metricrules",
        "resourceVersion=10",
        "resourceVersion=15",
        "/metricrules",
        "resourceVersion=20",
        "resourceVersion=20",
        "/metricrules",
        "resourceVersion=30",
    };
    for (size_t i = 0; i < 8; i++) {
        const struct cma_fake_request *r = cma_fake_http_request(srv, i);
        assert_non_null(r);
        assert_non_null(strstr(r->target, want[i]));
        bool is_watch = strstr(r->target, "watch=") != NULL;
        assert_int_equal(is_watch, strchr("036", '0' + (int)i) == NULL);
        assert_true(cma_fake_http_has_header(srv, i, "Authorization: Bearer t"));
    }
    assert_int_equal(lists, 3);
    assert_int_equal(counts[CMA_METRICRULE_LISTED], 3);
    assert_int_equal(counts[CMA_METRICRULE_GONE], 2);
    assert_true(counts[CMA_METRICRULE_WATCH_FAILED] >= 1);
    assert_int_equal(n, 2);
    assert_string_equal(o[0].namespace_, "dev");
    assert_string_equal(o[0].name, "d");
    assert_string_equal(o[1].name, "b");
    assert_int_equal(o[1].generation, 3);
    cma_metricrules_free(o, n);
    cma_kube_free(k);
    free(url);
    cma_fake_http_stop(srv);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cma_metricrule_watch__list_decodes_whole_objects_sorted),
        cmocka_unit_test(test_cma_metricrule_watch__events_in_order),
        cmocka_unit_test(test_cma_metricrule_watch__error_events),
        cmocka_unit_test(test_cma_metricrule_watch__thread_relists_and_reconnects),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
