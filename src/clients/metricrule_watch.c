/* metricrule_watch.c: the MetricRule watch (metricrule_watch.h): full objects kept by
 * namespace/name in a sorted array under a mutex, one thread doing LIST then WATCH.
 *
 * DESIGN: MetricRules are few and small (per-namespace limits bound them), so the LIST is one
 * request read whole through cma_kube_request (no paging) and each object keeps its spec as JSON
 * text for the rules stage to compile; the WATCH goes through cma_kube_watch, which streams the
 * event lines. Each applied change bumps a counter a consumer can poll, and the observer hears
 * CHANGED. A 410 (HTTP status or ERROR event) re-lists; any other end of a watch reconnects from
 * the last resourceVersion after a backoff of 200 ms doubling to 30 s, with jitter, reset once a
 * watch delivered an event. */
#include "cma/metricrule_watch.h"

#include <errno.h>
#include <jansson.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cma/buf.h"
#include "cma/clock.h"
#include "cma/kube.h"

#define RV_MAX 128
#define WATCH_TIMEOUT_S 300
#define BACKOFF_FIRST_MS 200
#define BACKOFF_MAX_MS 30000
#define LIST_PATH                                                                                  \
    "/apis/" CMA_METRICRULE_GROUP "/" CMA_METRICRULE_VERSION "/" CMA_METRICRULE_RESOURCE

struct cma_metricrule_watch {
    struct cma_kube *kube; /* borrowed; NULL: fed by hand */
    struct cma_metricrule_observer observer;
    pthread_mutex_t lock; /* guards everything below */
    struct cma_metricrule *objs;
    size_t n, cap;
    char rv[RV_MAX];
    bool synced;
    uint64_t changes;
    size_t lists, watches;
    /* the thread */
    pthread_t thread;
    bool started;
    atomic_bool stop;
    pthread_mutex_t wait_lock;
    pthread_cond_t wait_cond;
};

static void obj_done(struct cma_metricrule *o)
{
    free(o->namespace_);
    free(o->name);
    free(o->uid);
    free(o->resource_version);
    free(o->creation_timestamp);
    free(o->spec_json);
    memset(o, 0, sizeof(*o));
}

void cma_metricrules_free(struct cma_metricrule *objs, size_t n)
{
    for (size_t i = 0; objs && i < n; i++)
        obj_done(&objs[i]);
    free(objs);
}

static char *dup_str(const json_t *v)
{
    const char *s = json_is_string(v) ? json_string_value(v) : "";
    return strdup(s);
}

static int64_t parse_time_ms(const char *s)
{
    struct tm tm = {0};
    const char *end = strptime(s, "%Y-%m-%dT%H:%M:%S", &tm);
    if (!end)
        return 0;
    time_t t = timegm(&tm);
    return t < 0 ? 0 : (int64_t)t * 1000;
}

/* Decodes one MetricRule object into *o (zeroed first). */
static enum cma_errc obj_decode(const json_t *obj, struct cma_metricrule *o, struct cma_err *reterr)
{
    memset(o, 0, sizeof(*o));
    const json_t *meta = json_object_get(obj, "metadata");
    if (!json_is_object(meta) || !json_is_string(json_object_get(meta, "name")))
        return cma_err_set(reterr, CMA_ERR_KUBE_ERROR, "a MetricRule without metadata.name");
    o->namespace_ = dup_str(json_object_get(meta, "namespace"));
    o->name = dup_str(json_object_get(meta, "name"));
    o->uid = dup_str(json_object_get(meta, "uid"));
    o->resource_version = dup_str(json_object_get(meta, "resourceVersion"));
    o->creation_timestamp = dup_str(json_object_get(meta, "creationTimestamp"));
    const json_t *gen = json_object_get(meta, "generation");
    o->generation = json_is_integer(gen) ? (int64_t)json_integer_value(gen) : 0;
    const json_t *spec = json_object_get(obj, "spec");
    o->spec_json =
        json_is_object(spec) ? json_dumps(spec, JSON_COMPACT | JSON_PRESERVE_ORDER) : strdup("{}");
    if (!o->namespace_ || !o->name || !o->uid || !o->resource_version || !o->creation_timestamp ||
        !o->spec_json) {
        obj_done(o);
        return cma_err_set(reterr, CMA_ERR_NOMEM, "out of memory decoding a MetricRule");
    }
    o->creation_ms = parse_time_ms(o->creation_timestamp);
    return CMA_OK;
}

static int obj_cmp(const void *a, const void *b)
{
    const struct cma_metricrule *x = a, *y = b;
    int c = strcmp(x->namespace_, y->namespace_);
    return c ? c : strcmp(x->name, y->name);
}

/* Index of namespace/name in w->objs, or where it would go (*found false). Lock held. */
static size_t find(const struct cma_metricrule_watch *w, const char *ns, const char *name,
                   bool *found)
{
    size_t lo = 0, hi = w->n;
    struct cma_metricrule key = {.namespace_ = (char *)ns, .name = (char *)name};
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        int c = obj_cmp(&key, &w->objs[mid]);
        if (c == 0) {
            *found = true;
            return mid;
        }
        if (c < 0)
            hi = mid;
        else
            lo = mid + 1;
    }
    *found = false;
    return lo;
}

static void set_rv(struct cma_metricrule_watch *w, const char *rv)
{
    if (rv && *rv)
        snprintf(w->rv, sizeof(w->rv), "%s", rv);
}

enum cma_errc cma_metricrule_watch_new(struct cma_kube *kube,
                                       const struct cma_metricrule_observer *observer,
                                       struct cma_metricrule_watch **ret, struct cma_err *reterr)
{
    struct cma_metricrule_watch *w = calloc(1, sizeof(*w));
    if (!w)
        return cma_err_set(reterr, CMA_ERR_NOMEM, "out of memory");
    w->kube = kube;
    if (observer)
        w->observer = *observer;
    pthread_mutex_init(&w->lock, NULL);
    pthread_mutex_init(&w->wait_lock, NULL);
    pthread_cond_init(&w->wait_cond, NULL);
    atomic_init(&w->stop, false);
    *ret = w;
    return CMA_OK;
}

void cma_metricrule_watch_free(struct cma_metricrule_watch *w)
{
    if (!w)
        return;
    if (w->started) {
        pthread_mutex_lock(&w->wait_lock);
        atomic_store(&w->stop, true);
        pthread_cond_broadcast(&w->wait_cond);
        pthread_mutex_unlock(&w->wait_lock);
        pthread_join(w->thread, NULL);
    }
    cma_metricrules_free(w->objs, w->n);
    pthread_mutex_destroy(&w->lock);
    pthread_mutex_destroy(&w->wait_lock);
    pthread_cond_destroy(&w->wait_cond);
    free(w);
}

/* Decodes a list's items into a new sorted array. */
static enum cma_errc decode_items(const json_t *items, struct cma_metricrule **ret, size_t *ret_n,
                                  struct cma_err *reterr)
{
    size_t n = json_array_size(items);
    struct cma_metricrule *objs = calloc(n ? n : 1, sizeof(*objs));
    if (!objs)
        return cma_err_set(reterr, CMA_ERR_NOMEM, "out of memory");
    for (size_t i = 0; i < n; i++) {
        enum cma_errc rc = obj_decode(json_array_get(items, i), &objs[i], reterr);
        if (rc != CMA_OK) {
            cma_metricrules_free(objs, i);
            return rc;
        }
    }
    qsort(objs, n, sizeof(*objs), obj_cmp);
    *ret = objs;
    *ret_n = n;
    return CMA_OK;
}

enum cma_errc cma_metricrule_watch_apply_list(struct cma_metricrule_watch *w, const char *body,
                                              size_t len, struct cma_err *reterr)
{
    json_error_t jerr;
    json_t *doc = json_loadb(body, len, 0, &jerr);
    const json_t *items = json_object_get(doc, "items");
    if (!json_is_object(doc) || !(json_is_array(items) || json_is_null(items) || !items)) {
        json_decref(doc);
        return cma_err_set(reterr, CMA_ERR_KUBE_ERROR, "MetricRule list: not a list: %s",
                           jerr.text);
    }
    struct cma_metricrule *objs = NULL;
    size_t n = 0;
    enum cma_errc rc = decode_items(items, &objs, &n, reterr);
    if (rc == CMA_OK) {
        const json_t *rv = json_object_get(json_object_get(doc, "metadata"), "resourceVersion");
        pthread_mutex_lock(&w->lock);
        cma_metricrules_free(w->objs, w->n);
        w->objs = objs;
        w->n = w->cap = n;
        w->rv[0] = '\0';
        set_rv(w, json_string_value(rv));
        w->synced = true;
        w->changes++;
        w->lists++;
        pthread_mutex_unlock(&w->lock);
    }
    json_decref(doc);
    return rc;
}

/* Puts o (taken over) in place of namespace/name, or inserts it. Lock held. */
static enum cma_errc upsert(struct cma_metricrule_watch *w, struct cma_metricrule *o,
                            struct cma_err *reterr)
{
    bool found;
    size_t i = find(w, o->namespace_, o->name, &found);
    if (found) {
        obj_done(&w->objs[i]);
        w->objs[i] = *o;
        return CMA_OK;
    }
    if (w->n == w->cap) {
        size_t cap = w->cap ? w->cap * 2 : 8;
        struct cma_metricrule *grown = realloc(w->objs, cap * sizeof(*grown));
        if (!grown) {
            obj_done(o);
            return cma_err_set(reterr, CMA_ERR_NOMEM, "out of memory");
        }
        w->objs = grown;
        w->cap = cap;
    }
    memmove(&w->objs[i + 1], &w->objs[i], (w->n - i) * sizeof(*w->objs));
    w->objs[i] = *o;
    w->n++;
    return CMA_OK;
}

/* Lock held. */
static void erase(struct cma_metricrule_watch *w, const struct cma_metricrule *o)
{
    bool found;
    size_t i = find(w, o->namespace_, o->name, &found);
    if (!found)
        return;
    obj_done(&w->objs[i]);
    memmove(&w->objs[i], &w->objs[i + 1], (w->n - i - 1) * sizeof(*w->objs));
    w->n--;
}

/* An ERROR event: 410 → gone; anything else is an error. */
static enum cma_errc error_event(const json_t *obj, bool *ret_gone, struct cma_err *reterr)
{
    const json_t *code = json_object_get(obj, "code");
    if (json_is_integer(code) && json_integer_value(code) == 410) {
        *ret_gone = true;
        return CMA_OK;
    }
    const char *msg = json_string_value(json_object_get(obj, "message"));
    return cma_err_set(reterr, CMA_ERR_KUBE_ERROR, "MetricRule watch: ERROR event: %s",
                       msg ? msg : "(no message)");
}

/* Applies an ADDED/MODIFIED/DELETED/BOOKMARK object; lock taken here. */
static enum cma_errc apply_object(struct cma_metricrule_watch *w, const char *type,
                                  const json_t *obj, bool *ret_changed, struct cma_err *reterr)
{
    bool bookmark = strcmp(type, "BOOKMARK") == 0;
    bool deleted = strcmp(type, "DELETED") == 0;
    if (!bookmark && !deleted && strcmp(type, "ADDED") != 0 && strcmp(type, "MODIFIED") != 0)
        return cma_err_set(reterr, CMA_ERR_KUBE_ERROR, "MetricRule watch: unknown event \"%s\"",
                           type);
    const char *rv =
        json_string_value(json_object_get(json_object_get(obj, "metadata"), "resourceVersion"));
    if (bookmark) {
        pthread_mutex_lock(&w->lock);
        set_rv(w, rv);
        pthread_mutex_unlock(&w->lock);
        return CMA_OK;
    }
    struct cma_metricrule o;
    enum cma_errc rc = obj_decode(obj, &o, reterr);
    if (rc != CMA_OK)
        return rc;
    pthread_mutex_lock(&w->lock);
    if (deleted) {
        erase(w, &o);
        obj_done(&o);
    } else {
        rc = upsert(w, &o, reterr);
    }
    if (rc == CMA_OK) {
        set_rv(w, rv);
        w->changes++;
        *ret_changed = true;
    }
    pthread_mutex_unlock(&w->lock);
    return rc;
}

enum cma_errc cma_metricrule_watch_apply_event(struct cma_metricrule_watch *w, const char *line,
                                               size_t len, bool *ret_gone, bool *ret_changed,
                                               struct cma_err *reterr)
{
    bool changed = false;
    *ret_gone = false;
    json_error_t jerr;
    json_t *ev = json_loadb(line, len, 0, &jerr);
    const char *type = json_string_value(json_object_get(ev, "type"));
    const json_t *obj = json_object_get(ev, "object");
    enum cma_errc rc;
    if (!type || !json_is_object(obj))
        rc = cma_err_set(reterr, CMA_ERR_KUBE_ERROR, "MetricRule watch: undecodable event%s%s",
                         ev ? "" : ": ", ev ? "" : jerr.text);
    else if (strcmp(type, "ERROR") == 0)
        rc = error_event(obj, ret_gone, reterr);
    else
        rc = apply_object(w, type, obj, &changed, reterr);
    json_decref(ev);
    if (ret_changed)
        *ret_changed = changed;
    return rc;
}

enum cma_errc cma_metricrule_watch_snapshot(struct cma_metricrule_watch *w,
                                            struct cma_metricrule **ret, size_t *ret_n,
                                            struct cma_err *reterr)
{
    pthread_mutex_lock(&w->lock);
    size_t n = w->n;
    struct cma_metricrule *objs = calloc(n ? n : 1, sizeof(*objs));
    bool ok = objs != NULL;
    for (size_t i = 0; ok && i < n; i++) {
        const struct cma_metricrule *s = &w->objs[i];
        struct cma_metricrule *d = &objs[i];
        *d = (struct cma_metricrule){.namespace_ = strdup(s->namespace_),
                                     .name = strdup(s->name),
                                     .uid = strdup(s->uid),
                                     .resource_version = strdup(s->resource_version),
                                     .creation_timestamp = strdup(s->creation_timestamp),
                                     .creation_ms = s->creation_ms,
                                     .generation = s->generation,
                                     .spec_json = strdup(s->spec_json)};
        ok = d->namespace_ && d->name && d->uid && d->resource_version && d->creation_timestamp &&
             d->spec_json;
    }
    pthread_mutex_unlock(&w->lock);
    if (!ok) {
        cma_metricrules_free(objs, n);
        return cma_err_set(reterr, CMA_ERR_NOMEM, "out of memory");
    }
    *ret = objs;
    *ret_n = n;
    return CMA_OK;
}

bool cma_metricrule_watch_is_synced(struct cma_metricrule_watch *w)
{
    pthread_mutex_lock(&w->lock);
    bool s = w->synced;
    pthread_mutex_unlock(&w->lock);
    return s;
}

void cma_metricrule_watch_resource_version(struct cma_metricrule_watch *w, char *out,
                                           size_t out_len)
{
    pthread_mutex_lock(&w->lock);
    snprintf(out, out_len, "%s", w->rv);
    pthread_mutex_unlock(&w->lock);
}

uint64_t cma_metricrule_watch_changes(struct cma_metricrule_watch *w)
{
    pthread_mutex_lock(&w->lock);
    uint64_t c = w->changes;
    pthread_mutex_unlock(&w->lock);
    return c;
}

size_t cma_metricrule_watch_lists(struct cma_metricrule_watch *w)
{
    pthread_mutex_lock(&w->lock);
    size_t c = w->lists;
    pthread_mutex_unlock(&w->lock);
    return c;
}

size_t cma_metricrule_watch_watches(struct cma_metricrule_watch *w)
{
    pthread_mutex_lock(&w->lock);
    size_t c = w->watches;
    pthread_mutex_unlock(&w->lock);
    return c;
}

/* ---- the thread ---------------------------------------------------------------------------- */

static void notify(const struct cma_metricrule_watch *w, struct cma_metricrule_event ev)
{
    if (w->observer.on_event)
        w->observer.on_event(w->observer.ctx, &ev);
}

/* Waits ms or until stopped; true when stopped. */
static bool sleep_or_stop(struct cma_metricrule_watch *w, int64_t ms)
{
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += (time_t)(ms / 1000);
    until.tv_nsec += (long)(ms % 1000) * 1000000L;
    if (until.tv_nsec >= 1000000000L) {
        until.tv_sec++;
        until.tv_nsec -= 1000000000L;
    }
    pthread_mutex_lock(&w->wait_lock);
    while (!atomic_load(&w->stop)) {
        if (pthread_cond_timedwait(&w->wait_cond, &w->wait_lock, &until) == ETIMEDOUT)
            break;
    }
    bool stopped = atomic_load(&w->stop);
    pthread_mutex_unlock(&w->wait_lock);
    return stopped;
}

static int64_t jitter(int64_t ms, unsigned *seed)
{
    int64_t span = ms / 5; /* ±20 % */
    if (span <= 0)
        return ms;
    return ms - span + (int64_t)(rand_r(seed) % (unsigned)(2 * span + 1));
}

static enum cma_errc do_list(struct cma_metricrule_watch *w, struct cma_err *reterr)
{
    struct cma_buf body = {0};
    long status = 0;
    enum cma_errc rc = cma_kube_request(w->kube, "GET", LIST_PATH, NULL, 0, &body, &status, reterr);
    if (rc != CMA_OK) {
        cma_buf_done(&body);
        return rc;
    }
    if (status < 200 || status > 299)
        rc = cma_err_set(
            reterr, status == 429 || status >= 500 ? CMA_ERR_KUBE_UNAVAILABLE : CMA_ERR_KUBE_ERROR,
            "LIST %s: HTTP %ld", LIST_PATH, status);
    else
        rc = cma_metricrule_watch_apply_list(w, body.ptr, body.len, reterr);
    cma_buf_done(&body);
    return rc;
}

struct watch_ctx {
    struct cma_metricrule_watch *w;
    bool gone, got_event;
};

static enum cma_errc watch_line(void *ctx, const char *line, size_t len, struct cma_err *reterr)
{
    struct watch_ctx *wc = ctx;
    bool changed = false;
    enum cma_errc rc =
        cma_metricrule_watch_apply_event(wc->w, line, len, &wc->gone, &changed, reterr);
    wc->got_event = true;
    if (rc == CMA_OK && changed)
        notify(wc->w, (struct cma_metricrule_event){.kind = CMA_METRICRULE_CHANGED});
    if (rc == CMA_OK && wc->gone)
        return cma_err_set(reterr, CMA_ERR_KUBE_ERROR, "resourceVersion expired (410)");
    return rc;
}

static bool watch_should_stop(void *ctx)
{
    const struct watch_ctx *wc = ctx;
    return atomic_load(&wc->w->stop);
}

/* One LIST; false when it failed (the caller backs off). */
static bool list_once(struct cma_metricrule_watch *w, int64_t backoff)
{
    struct cma_err err = {0};
    if (do_list(w, &err) != CMA_OK) {
        notify(w, (struct cma_metricrule_event){
                      .kind = CMA_METRICRULE_LIST_FAILED, .retry_ms = backoff, .err = &err});
        return false;
    }
    char rv[RV_MAX];
    cma_metricrule_watch_resource_version(w, rv, sizeof(rv));
    pthread_mutex_lock(&w->lock);
    size_t n = w->n;
    pthread_mutex_unlock(&w->lock);
    notify(w, (struct cma_metricrule_event){
                  .kind = CMA_METRICRULE_LISTED, .count = n, .resource_version = rv});
    notify(w, (struct cma_metricrule_event){.kind = CMA_METRICRULE_CHANGED});
    return true;
}

/* One WATCH from the current resourceVersion: 1 = re-list, 0 = watch again now, -1 = back
 * off, then watch again. */
static int watch_once(struct cma_metricrule_watch *w, int64_t *backoff)
{
    char rv[RV_MAX];
    cma_metricrule_watch_resource_version(w, rv, sizeof(rv));
    pthread_mutex_lock(&w->lock);
    w->watches++;
    pthread_mutex_unlock(&w->lock);
    struct watch_ctx wc = {.w = w};
    struct cma_kube_watch_handler h = {
        .on_line = watch_line, .should_stop = watch_should_stop, .ctx = &wc};
    struct cma_err err = {0};
    long status = 0;
    enum cma_errc rc =
        cma_kube_watch(w->kube, CMA_METRICRULE_GROUP, CMA_METRICRULE_VERSION,
                       CMA_METRICRULE_RESOURCE, rv, WATCH_TIMEOUT_S, &h, &status, &err);
    if (wc.gone || status == 410) {
        notify(w,
               (struct cma_metricrule_event){.kind = CMA_METRICRULE_GONE, .resource_version = rv});
        return 1;
    }
    if (wc.got_event)
        *backoff = BACKOFF_FIRST_MS;
    if (rc == CMA_OK && wc.got_event)
        return 0;
    notify(w, (struct cma_metricrule_event){.kind = CMA_METRICRULE_WATCH_FAILED,
                                            .status = status,
                                            .retry_ms = *backoff,
                                            .err = rc != CMA_OK ? &err : NULL});
    /* a refusal other than 410/429 may be a lost permission or a deleted CRD: re-list */
    return status >= 400 && status != 429 ? 2 : -1;
}

static void *watch_thread(void *arg)
{
    struct cma_metricrule_watch *w = arg;
    unsigned seed = (unsigned)cma_clock_mono_ms() ^ (unsigned)(uintptr_t)w;
    int64_t backoff = BACKOFF_FIRST_MS;
    bool need_list = true;
    while (!atomic_load(&w->stop)) {
        int next = 0;
        if (need_list && !list_once(w, backoff)) {
            next = -1;
        } else {
            if (need_list)
                backoff = BACKOFF_FIRST_MS;
            need_list = false;
            next = watch_once(w, &backoff);
        }
        if (atomic_load(&w->stop))
            break;
        if (next == 1) {
            need_list = true;
            continue;
        }
        if (next == 0)
            continue;
        need_list = need_list || next == 2;
        if (sleep_or_stop(w, jitter(backoff, &seed)))
            break;
        backoff = backoff * 2 > BACKOFF_MAX_MS ? BACKOFF_MAX_MS : backoff * 2;
    }
    return NULL;
}

enum cma_errc cma_metricrule_watch_start(struct cma_metricrule_watch *w, struct cma_err *reterr)
{
    if (!w->kube)
        return cma_err_set(reterr, CMA_ERR_INTERNAL, "a MetricRule watch needs a kube client");
    if (w->started)
        return CMA_OK;
    if (pthread_create(&w->thread, NULL, watch_thread, w) != 0)
        return cma_err_set(reterr, CMA_ERR_INTERNAL, "cannot start the MetricRule watch thread");
    w->started = true;
    return CMA_OK;
}
