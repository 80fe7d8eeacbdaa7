/* metricrule_watch.c: the MetricRule watch (metricrule_watch.h): full objects kept by
 * namespace/name in a sorted array under a mutex, one thread doing LIST then WATCH.
 *
 * DESIGN: MetricRules are few and small (per-namespace limits bound them), so the LIST is one
 * request read whole through cma_kube_request (no paging) and each object keeps its spec as JSON
 * text for the rules stage to compile; the thread is the shared LIST+WATCH driver (listwatch.c),
 * whose WATCH goes through cma_kube_watch, which streams the event lines. Each applied change
 * bumps a counter a consumer can poll, and the observer hears CHANGED. A 410 (HTTP status or
 * ERROR event) re-lists at once; a watch refused with another 4xx or a 5xx (a lost permission,
 * a deleted CRD) re-lists after the backoff; any other end of a watch reconnects from the last
 * resourceVersion after a backoff of 200 ms doubling to 30 s, with jitter, reset once a watch
 * applied an event. */
#include "cma/metricrule_watch.h"

#include <jansson.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cma/buf.h"
#include "cma/kube.h"
#include "internal.h"

#define RV_MAX 128
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
    size_t lists;
    struct cma_listwatch lw; /* the LIST+WATCH thread */
};

static enum cma_errc watch_init(struct cma_metricrule_watch *w, struct cma_err *reterr);

static void obj_done(struct cma_metricrule *o)
{
    free(o->namespace_);
    free(o->name);
    free(o->uid);
    free(o->resource_version);
    free(o->creation_timestamp);
    free(o->spec_json);
    free(o->status_json);
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
    const json_t *status = json_object_get(obj, "status");
    o->status_json = json_is_object(status) ? json_dumps(status, JSON_COMPACT | JSON_PRESERVE_ORDER)
                                            : strdup("");
    if (!o->namespace_ || !o->name || !o->uid || !o->resource_version || !o->creation_timestamp ||
        !o->spec_json || !o->status_json) {
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
    if (pthread_mutex_init(&w->lock, NULL) != 0) {
        free(w);
        return cma_err_set(reterr, CMA_ERR_INTERNAL, "cannot create the MetricRule watch");
    }
    enum cma_errc rc = watch_init(w, reterr);
    if (rc != CMA_OK) {
        pthread_mutex_destroy(&w->lock);
        free(w);
        return rc;
    }
    *ret = w;
    return CMA_OK;
}

void cma_metricrule_watch_free(struct cma_metricrule_watch *w)
{
    if (!w)
        return;
    cma_listwatch_done(&w->lw); /* the thread is stopped first */
    cma_metricrules_free(w->objs, w->n);
    pthread_mutex_destroy(&w->lock);
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
                                     .spec_json = strdup(s->spec_json),
                                     .status_json = strdup(s->status_json)};
        ok = d->namespace_ && d->name && d->uid && d->resource_version && d->creation_timestamp &&
             d->spec_json && d->status_json;
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
    return cma_listwatch_watches(&w->lw);
}

/* ---- the thread ---------------------------------------------------------------------------- */

static void notify(const struct cma_metricrule_watch *w, struct cma_metricrule_event ev)
{
    if (w->observer.on_event)
        w->observer.on_event(w->observer.ctx, &ev);
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

/* The LIST, read whole and installed; the observer hears LISTED and CHANGED. */
static enum cma_errc watch_list(void *ctx, struct cma_err *reterr)
{
    struct cma_metricrule_watch *w = ctx;
    enum cma_errc rc = do_list(w, reterr);
    if (rc != CMA_OK)
        return rc;
    char rv[RV_MAX];
    cma_metricrule_watch_resource_version(w, rv, sizeof(rv));
    pthread_mutex_lock(&w->lock);
    size_t n = w->n;
    pthread_mutex_unlock(&w->lock);
    notify(w, (struct cma_metricrule_event){
                  .kind = CMA_METRICRULE_LISTED, .count = n, .resource_version = rv});
    notify(w, (struct cma_metricrule_event){.kind = CMA_METRICRULE_CHANGED});
    return CMA_OK;
}

static enum cma_errc watch_apply(void *ctx, const char *line, size_t len, bool *ret_gone,
                                 struct cma_err *reterr)
{
    struct cma_metricrule_watch *w = ctx;
    bool changed = false;
    enum cma_errc rc = cma_metricrule_watch_apply_event(w, line, len, ret_gone, &changed, reterr);
    if (rc == CMA_OK && changed)
        notify(w, (struct cma_metricrule_event){.kind = CMA_METRICRULE_CHANGED});
    return rc;
}

static void watch_rv(void *ctx, char *out, size_t out_len)
{
    cma_metricrule_watch_resource_version(ctx, out, out_len);
}

/* The driver's reports as this watch's events, one for one. */
static enum cma_listwatch_next watch_report(void *ctx, const struct cma_listwatch_report *r)
{
    static const enum cma_metricrule_event_kind kinds[] = {
        [CMA_LISTWATCH_LIST_FAILED] = CMA_METRICRULE_LIST_FAILED,
        [CMA_LISTWATCH_GONE] = CMA_METRICRULE_GONE,
        [CMA_LISTWATCH_WATCH_FAILED] = CMA_METRICRULE_WATCH_FAILED,
    };
    notify(ctx, (struct cma_metricrule_event){.kind = kinds[r->kind],
                                              .resource_version = r->resource_version,
                                              .status = r->status,
                                              .retry_ms = r->retry_ms,
                                              .err = r->err});
    /* a refusal other than 410/429 may be a lost permission or a deleted CRD: re-list */
    return r->status >= 400 && r->status != 429 ? CMA_LISTWATCH_RELIST : CMA_LISTWATCH_RECONNECT;
}

static enum cma_errc watch_init(struct cma_metricrule_watch *w, struct cma_err *reterr)
{
    static const struct cma_listwatch_ops ops = {
        .list = watch_list,
        .apply = watch_apply,
        .resource_version = watch_rv,
        .report = watch_report,
    };
    return cma_listwatch_init(&w->lw, w->kube, CMA_METRICRULE_GROUP, CMA_METRICRULE_VERSION,
                              CMA_METRICRULE_RESOURCE, &ops, w, reterr);
}

enum cma_errc cma_metricrule_watch_start(struct cma_metricrule_watch *w, struct cma_err *reterr)
{
    if (!w->kube)
        return cma_err_set(reterr, CMA_ERR_INTERNAL, "a MetricRule watch needs a kube client");
    return cma_listwatch_start(&w->lw, reterr);
}
