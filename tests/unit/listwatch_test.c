/* listwatch_test.c: the shared LIST+WATCH driver against the fake HTTP server, with an owner of
 * the test's own that keeps only a resourceVersion and writes down what the driver tells it:
 * LIST, then WATCH from the list's resourceVersion; a bookmark moves it on; a clean end after
 * events is watched again at once; an ERROR 410 event and an HTTP 410 each re-list; a dropped
 * watch reconnects from the last resourceVersion with a backoff that doubles to its bound and
 * starts over once a watch applied an event; the owner's answer to a failed watch (re-list,
 * stop) is followed; a failed LIST backs off; stop wakes the thread from its backoff sleep. */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cmocka.h>

#include <jansson.h>

#include "../../src/clients/internal.h"
#include "cma/kube.h"
#include "fakehttp.h"

#define LIST_PATH "/apis/example.dev/v1/things"
#define LOG_MAX 32

/* The owner: a resourceVersion and a log of what it was told. */
struct owner {
    struct cma_kube *kube;
    pthread_mutex_t lock; /* guards everything below */
    char rv[64];
    size_t lists, applied;
    char log[LOG_MAX][96];
    size_t n_log;
    long relist_status, stop_status; /* watch_failed: RELIST / STOP for these statuses */
};

static void owner_log(struct owner *o, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void owner_log(struct owner *o, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    pthread_mutex_lock(&o->lock);
    if (o->n_log < LOG_MAX)
        vsnprintf(o->log[o->n_log++], sizeof(o->log[0]), fmt, ap);
    pthread_mutex_unlock(&o->lock);
    va_end(ap);
}

static size_t owner_n_log(struct owner *o)
{
    pthread_mutex_lock(&o->lock);
    size_t n = o->n_log;
    pthread_mutex_unlock(&o->lock);
    return n;
}

/* Sets o->rv from doc's path metadata.resourceVersion (obj may be the document itself). */
static void owner_set_rv(struct owner *o, const json_t *obj)
{
    const char *rv =
        json_string_value(json_object_get(json_object_get(obj, "metadata"), "resourceVersion"));
    pthread_mutex_lock(&o->lock);
    if (rv && rv[0])
        snprintf(o->rv, sizeof(o->rv), "%s", rv);
    pthread_mutex_unlock(&o->lock);
}

static enum cma_errc owner_list(void *ctx, struct cma_err *reterr)
{
    struct owner *o = ctx;
    struct cma_buf body = {0};
    long status = 0;
    enum cma_errc rc = cma_kube_request(o->kube, "GET", LIST_PATH, NULL, 0, &body, &status, reterr);
    json_t *doc = rc == CMA_OK ? json_loadb(body.ptr, body.len, 0, NULL) : NULL;
    cma_buf_done(&body);
    if (rc == CMA_OK && (status != 200 || !doc))
        rc = cma_err_set(reterr, CMA_ERR_KUBE_ERROR, "LIST: HTTP %ld", status);
    if (rc == CMA_OK) {
        owner_set_rv(o, doc);
        pthread_mutex_lock(&o->lock);
        o->lists++;
        pthread_mutex_unlock(&o->lock);
        owner_log(o, "LISTED %s", o->rv);
    }
    json_decref(doc);
    return rc;
}

static enum cma_errc owner_apply(void *ctx, const char *line, size_t len, bool *ret_gone,
                                 struct cma_err *reterr)
{
    struct owner *o = ctx;
    json_t *ev = json_loadb(line, len, 0, NULL);
    const char *type = json_string_value(json_object_get(ev, "type"));
    const json_t *obj = json_object_get(ev, "object");
    enum cma_errc rc = CMA_OK;
    if (!type || !json_is_object(obj))
        rc = cma_err_set(reterr, CMA_ERR_KUBE_ERROR, "undecodable event");
    else if (strcmp(type, "ERROR") == 0)
        *ret_gone = json_integer_value(json_object_get(obj, "code")) == 410;
    else
        owner_set_rv(o, obj);
    if (rc == CMA_OK && !*ret_gone) {
        pthread_mutex_lock(&o->lock);
        o->applied++;
        pthread_mutex_unlock(&o->lock);
    }
    json_decref(ev);
    return rc;
}

static void owner_rv(void *ctx, char *out, size_t out_len)
{
    struct owner *o = ctx;
    pthread_mutex_lock(&o->lock);
    snprintf(out, out_len, "%s", o->rv);
    pthread_mutex_unlock(&o->lock);
}

static enum cma_listwatch_next owner_report(void *ctx, const struct cma_listwatch_report *r)
{
    struct owner *o = ctx;
    const char *err = r->err && r->err->msg[0] ? "err" : r->err ? "empty" : "clean";
    if (r->kind == CMA_LISTWATCH_LIST_FAILED)
        owner_log(o, "LIST_FAILED %lld %s", (long long)r->retry_ms, err);
    else if (r->kind == CMA_LISTWATCH_GONE)
        owner_log(o, "GONE %s", r->resource_version);
    else
        owner_log(o, "WATCH_FAILED %ld %lld %s", r->status, (long long)r->retry_ms, err);
    if (r->status && r->status == o->stop_status)
        return CMA_LISTWATCH_STOP;
    return r->status && r->status == o->relist_status ? CMA_LISTWATCH_RELIST
                                                      : CMA_LISTWATCH_RECONNECT;
}

static const struct cma_listwatch_ops owner_ops = {
    .list = owner_list,
    .apply = owner_apply,
    .resource_version = owner_rv,
    .report = owner_report,
};

/* A fake kube-apiserver answering answers[0..n) in order (the last repeats), a kube client for
 * it, an owner and its driver (not started). */
struct rig {
    struct cma_fake_http *srv;
    char *url;
    struct owner o;
    struct cma_listwatch lw;
};

static void rig_up(struct rig *r, const struct cma_fake_answer *answers, size_t n)
{
    memset(r, 0, sizeof(*r));
    r->srv = cma_fake_http_start(answers, n);
    assert_non_null(r->srv);
    r->url = cma_fake_http_url(r->srv, "");
    assert_non_null(r->url);
    struct cma_kube_conn conn = {.server = r->url, .token = "t"};
    assert_int_equal(cma_kube_new_from_conn(&conn, 5000, &r->o.kube, NULL), CMA_OK);
    assert_int_equal(pthread_mutex_init(&r->o.lock, NULL), 0);
    assert_int_equal(cma_listwatch_init(&r->lw, r->o.kube, "example.dev", "v1", "things",
                                        &owner_ops, &r->o, NULL),
                     CMA_OK);
}

static void rig_down(struct rig *r)
{
    cma_listwatch_done(&r->lw);
    cma_kube_free(r->o.kube);
    pthread_mutex_destroy(&r->o.lock);
    cma_fake_http_stop(r->srv);
    free(r->url);
}

/* Waits until cond(r, n) holds; false after about 30 s (a bound against a hang, not a timing
 * check). */
static bool wait_until(struct rig *r, bool (*cond)(struct rig *r, size_t n), size_t n)
{
    for (int i = 0; i < 3000; i++) {
        if (cond(r, n))
            return true;
        struct timespec ts = {0, 10 * 1000000L};
        nanosleep(&ts, NULL);
    }
    return false;
}

static bool has_requests(struct rig *r, size_t n)
{
    return cma_fake_http_count(r->srv) >= n;
}

static bool has_log(struct rig *r, size_t n)
{
    return owner_n_log(&r->o) >= n;
}

/* Request i went to LIST_PATH as a LIST (want_rv NULL) or as a watch from want_rv. */
static void assert_request(struct rig *r, size_t i, const char *want_rv)
{
    const struct cma_fake_request *q = cma_fake_http_request(r->srv, i);
    assert_non_null(q);
    assert_string_equal(q->path, LIST_PATH);
    assert_true(cma_fake_http_has_header(r->srv, i, "Authorization: Bearer t"));
    if (!want_rv) {
        assert_null(strstr(q->target, "watch="));
        return;
    }
    assert_non_null(strstr(q->target, "watch=1"));
    assert_non_null(strstr(q->target, "allowWatchBookmarks=true"));
    char want[64];
    snprintf(want, sizeof(want), "resourceVersion=%s", want_rv);
    const char *at = strstr(q->target, want);
    assert_non_null(at);
    char end = at[strlen(want)];
    assert_true(end == '\0' || end == '&');
}

static void assert_log(struct rig *r, const char *const *want, size_t n)
{
    assert_int_equal(owner_n_log(&r->o), n);
    for (size_t i = 0; i < n; i++)
        assert_string_equal(r->o.log[i], want[i]);
}

#define LIST(rv)                                                                                   \
    "{\"kind\":\"ThingList\",\"metadata\":{\"resourceVersion\":\"" rv "\"},\"items\":[]}"
#define EVENT(type, rv)                                                                            \
    "{\"type\":\"" type "\",\"object\":{\"kind\":\"Thing\",\"metadata\":{\"name\":\"a\","          \
    "\"resourceVersion\":\"" rv "\"}}}\n"
#define GONE_EVENT "{\"type\":\"ERROR\",\"object\":{\"kind\":\"Status\",\"code\":410}}\n"
#define STATUS(code)                                                                               \
    "{\"kind\":\"Status\",\"apiVersion\":\"v1\",\"status\":\"Failure\",\"code\":" #code "}"
static void test_cma_listwatch__lists_watches_and_relists_on_410(void **state)
{
    (void)state;
    static const struct cma_fake_answer answers[] = {
        {.status = 200, .body = LIST("10")},
        {.status = 200, .body = EVENT("ADDED", "11") EVENT("BOOKMARK", "15"), .chunk = 30},
        {.status = 200, .body = EVENT("MODIFIED", "16") GONE_EVENT EVENT("ADDED", "99")},
        {.status = 200, .body = LIST("20")},
        {.status = 410, .body = STATUS(410)},
        {.status = 200, .body = LIST("30")},
        {.status = 200, .body = "", .delay_ms = 60000}, /* held until the test stops */
    };
    struct rig r;
    rig_up(&r, answers, sizeof(answers) / sizeof(answers[0]));
    assert_int_equal(cma_listwatch_start(&r.lw, NULL), CMA_OK);
    assert_int_equal(cma_listwatch_start(&r.lw, NULL), CMA_OK); /* a second start: nothing */
    assert_true(wait_until(&r, has_requests, 7));
    cma_listwatch_stop(&r.lw); /* ends the held watch */
    assert_request(&r, 0, NULL);
    assert_request(&r, 1, "10");
    assert_request(&r, 2, "15"); /* the bookmark's, watched again at once */
    assert_request(&r, 3, NULL); /* the ERROR 410 event */
    assert_request(&r, 4, "20");
    assert_request(&r, 5, NULL); /* the HTTP 410 */
    assert_request(&r, 6, "30");
    assert_int_equal(cma_fake_http_count(r.srv), 7);
    static const char *const want[] = {"LISTED 10", "GONE 15", "LISTED 20", "GONE 20", "LISTED 30"};
    assert_log(&r, want, sizeof(want) / sizeof(want[0]));
    assert_int_equal(r.o.lists, 3);
    assert_int_equal(r.o.applied, 3); /* ADDED, BOOKMARK, MODIFIED: nothing after the 410 */
    assert_string_equal(r.o.rv, "30");
    assert_int_equal(cma_listwatch_watches(&r.lw), 4);
    rig_down(&r);
}

static void test_cma_listwatch__dropped_watch_reconnects_with_backoff(void **state)
{
    (void)state;
    static const struct cma_fake_answer answers[] = {
        {.status = 200, .body = LIST("10")},
        {.status = 0},                                              /* dropped: 10 ms */
        {.status = 0},                                              /* 20 */
        {.status = 0},                                              /* 40 */
        {.status = 0},                                              /* 40: the bound */
        {.status = 200, .body = EVENT("ADDED", "12") "not json\n"}, /* applied one: 10 again */
        {.status = 200, .body = ""},          /* a clean end without events: 20 */
        {.status = 503, .body = STATUS(503)}, /* the owner re-lists: 40 */
        {.status = 200, .body = LIST("50")},
        {.status = 405, .body = STATUS(405)}, /* the owner stops */
        {.status = 200, .body = LIST("60")},
    };
    struct rig r;
    rig_up(&r, answers, sizeof(answers) / sizeof(answers[0]));
    r.lw.backoff_first_ms = 10;
    r.lw.backoff_max_ms = 40;
    r.o.relist_status = 503;
    r.o.stop_status = 405;
    assert_int_equal(cma_listwatch_start(&r.lw, NULL), CMA_OK);
    assert_true(wait_until(&r, has_log, 10));
    /* the owner said stop: the thread ends by itself (tried until the hang bound) */
    bool ended = false;
    for (int i = 0; i < 3000 && !ended; i++) {
        ended = pthread_tryjoin_np(r.lw.thread, NULL) == 0;
        struct timespec ts = {0, 10 * 1000000L};
        if (!ended)
            nanosleep(&ts, NULL);
    }
    assert_true(ended);
    r.lw.started = false; /* joined here */
    static const char *const want[] = {
        "LISTED 10",
        "WATCH_FAILED 0 10 err",
        "WATCH_FAILED 0 20 err",
        "WATCH_FAILED 0 40 err",
        "WATCH_FAILED 0 40 err",
        "WATCH_FAILED 200 10 err",
        "WATCH_FAILED 200 20 clean",
        "WATCH_FAILED 503 40 err",
        "LISTED 50",
        "WATCH_FAILED 405 10 err",
    };
    assert_log(&r, want, sizeof(want) / sizeof(want[0]));
    assert_int_equal(cma_fake_http_count(r.srv), 10);
    static const char *const rvs[] = {NULL, "10", "10", "10", "10", "10", "12", "12", NULL, "50"};
    for (size_t i = 0; i < 10; i++)
        assert_request(&r, i, rvs[i]);
    assert_int_equal(cma_listwatch_watches(&r.lw), 8);
    rig_down(&r);
}

struct stopper {
    struct cma_listwatch *lw;
    atomic_bool done;
};

static void *stop_thread(void *arg)
{
    struct stopper *s = arg;
    cma_listwatch_stop(s->lw);
    atomic_store(&s->done, true);
    return NULL;
}

static void test_cma_listwatch__failed_list_backs_off_and_stop_wakes_the_sleep(void **state)
{
    (void)state;
    static const struct cma_fake_answer failing[] = {{.status = 503, .body = STATUS(503)}};
    struct rig r;
    rig_up(&r, failing, 1);
    r.lw.backoff_first_ms = 10;
    r.lw.backoff_max_ms = 30;
    assert_int_equal(cma_listwatch_start(&r.lw, NULL), CMA_OK);
    assert_true(wait_until(&r, has_log, 4));
    cma_listwatch_stop(&r.lw);
    assert_string_equal(r.o.log[0], "LIST_FAILED 10 err");
    assert_string_equal(r.o.log[1], "LIST_FAILED 20 err");
    assert_string_equal(r.o.log[2], "LIST_FAILED 30 err");
    assert_string_equal(r.o.log[3], "LIST_FAILED 30 err");
    assert_int_equal(cma_listwatch_watches(&r.lw), 0);
    rig_down(&r);

    /* A ten-minute backoff: stop must not wait for it. */
    rig_up(&r, failing, 1);
    r.lw.backoff_first_ms = 600000;
    assert_int_equal(cma_listwatch_start(&r.lw, NULL), CMA_OK);
    assert_true(wait_until(&r, has_log, 1));
    assert_string_equal(r.o.log[0], "LIST_FAILED 600000 err");
    struct stopper s = {.lw = &r.lw};
    atomic_init(&s.done, false);
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, stop_thread, &s), 0);
    bool done = false;
    for (int i = 0; i < 3000 && !done; i++) { /* a bound against a hang, not a timing check */
        done = atomic_load(&s.done);
        struct timespec ts = {0, 10 * 1000000L};
        if (!done)
            nanosleep(&ts, NULL);
    }
    assert_true(done);
    pthread_join(t, NULL);
    assert_int_equal(cma_fake_http_count(r.srv), 1);
    assert_int_equal(owner_n_log(&r.o), 1);
    rig_down(&r);
}

static void test_cma_listwatch__stop_before_start(void **state)
{
    (void)state;
    static const struct cma_fake_answer none[] = {{.status = 200, .body = LIST("1")}};
    struct rig r;
    rig_up(&r, none, 1);
    cma_listwatch_stop(&r.lw);
    assert_int_equal(cma_fake_http_count(r.srv), 0);
    rig_down(&r);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cma_listwatch__lists_watches_and_relists_on_410),
        cmocka_unit_test(test_cma_listwatch__dropped_watch_reconnects_with_backoff),
        cmocka_unit_test(test_cma_listwatch__failed_list_backs_off_and_stop_wakes_the_sleep),
        cmocka_unit_test(test_cma_listwatch__stop_before_start),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
