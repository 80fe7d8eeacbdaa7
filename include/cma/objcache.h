/* objcache.h: watch caches of Kubernetes objects for label-selector lookups (LIST then WATCH
 * from the list's resourceVersion, bookmarks, re-list on 410 Gone, reconnect with backoff; one
 * thread per watched resource). Keeps only namespace, name, labels and status.phase per object.
 * After the first sync lookups never wait on the kube API; when the API goes away the cache
 * keeps serving its last state. Thread-safe. Nothing is logged here: the caches' events go to
 * the registry's observer. */
#ifndef CMA_OBJCACHE_H
#define CMA_OBJCACHE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cma/err.h"

struct cma_kube;
struct cma_kube_object;
struct cma_selector;
struct cma_objcache;

/* A cache of group/version/resource ("" group = core). `kube` may be NULL (a cache fed only
 * through cma_objcache_replace / cma_objcache_apply_event, as the unit tests do); the cache
 * does not own it. Caller owns: cma_objcache_free(). */
enum cma_errc cma_objcache_new(struct cma_kube *kube, const char *group, const char *version,
                               const char *resource, struct cma_objcache **ret,
                               struct cma_err *reterr);
/* Starts the LIST+WATCH thread (needs a kube client). */
enum cma_errc cma_objcache_start(struct cma_objcache *c, struct cma_err *reterr);
/* Stops the thread (if started) and frees everything. NULL is fine. */
void cma_objcache_free(struct cma_objcache *c);

/* True once a LIST has been applied; stays true while re-listing or disconnected. */
bool cma_objcache_is_synced(struct cma_objcache *c);

/* Names of the objects in `namespace_` (NULL/"" = all namespaces) whose labels match `selector`
 * (NULL = everything), sorted by namespace then name. Caller owns the array and the strings
 * (free each, then the array; the array is non-NULL even when empty). */
enum cma_errc cma_objcache_list_names(struct cma_objcache *c, const char *namespace_,
                                      const struct cma_selector *selector, char ***ret_names,
                                      size_t *ret_n, struct cma_err *reterr);

/* Replaces the whole content with a LIST's objects and its resourceVersion; marks synced. */
enum cma_errc cma_objcache_replace(struct cma_objcache *c, const struct cma_kube_object *objs,
                                   size_t n, const char *resource_version, struct cma_err *reterr);

/* Applies one watch event line (ADDED / MODIFIED / DELETED / BOOKMARK / ERROR). *ret_gone is set
 * to true for an ERROR event with code 410 (the caller must re-list); other ERROR events and
 * undecodable lines → CMA_ERR_KUBE_ERROR. Every applied event updates the resourceVersion. */
enum cma_errc cma_objcache_apply_event(struct cma_objcache *c, const char *line, size_t len,
                                       bool *ret_gone, struct cma_err *reterr);

/* How many objects are held; the resourceVersion to watch from (copied into out, "" before
 * the first LIST); the heap bytes the objects take (index plus packed objects, malloc overhead
 * not counted). */
size_t cma_objcache_count(struct cma_objcache *c);
void cma_objcache_resource_version(struct cma_objcache *c, char *out, size_t out_len);
size_t cma_objcache_bytes(struct cma_objcache *c);
/* Counters for tests and logs: LISTs applied, watch streams opened. */
size_t cma_objcache_lists(struct cma_objcache *c);
size_t cma_objcache_watches(struct cma_objcache *c);

/* ---- what the watch threads go through, for the layer that logs ---------------------------- */

enum cma_objcache_event_kind {
    CMA_OBJCACHE_LIST_FAILED,   /* err; the LIST is tried again after retry_ms */
    CMA_OBJCACHE_LISTED,        /* count objects at resource_version */
    CMA_OBJCACHE_GONE,          /* resource_version expired (410): re-listing */
    CMA_OBJCACHE_WATCH_REFUSED, /* status (a 4xx), err: requests use live LISTs */
    CMA_OBJCACHE_WATCH_FAILED,  /* err; the watch reconnects after retry_ms */
    CMA_OBJCACHE_START_FAILED,  /* err: the cache cannot be made; requests use live LISTs */
};

/* One event of a cache. Pointers are borrowed for the call. */
struct cma_objcache_event {
    enum cma_objcache_event_kind kind;
    const char *resource;         /* "pods" */
    const char *resource_version; /* LISTED, GONE */
    size_t count;                 /* LISTED */
    long status;                  /* WATCH_REFUSED */
    int64_t retry_ms;             /* LIST_FAILED, WATCH_FAILED */
    const struct cma_err *err;    /* LIST_FAILED, WATCH_REFUSED, WATCH_FAILED, START_FAILED */
};

/* Called on the cache's thread (START_FAILED: on the thread asking for the cache); must not
 * call into the registry. */
struct cma_objcache_observer {
    void (*on_event)(void *ctx, const struct cma_objcache_event *ev);
    void *ctx;
};

/* ---- the app's caches (one per resource), for the request path ---------------------------- */

/* The set of watch caches of one app, held by it (no process-global state). Thread-safe. */
struct cma_objcache_registry;

/* Creates the registry for `kube` (borrowed: must outlive it) and starts the pods cache; every
 * cache's events go to `observer` (copied; NULL: nowhere). Caller owns:
 * cma_objcache_registry_free(). */
enum cma_errc cma_objcache_registry_new_observed(struct cma_kube *kube,
                                                 const struct cma_objcache_observer *observer,
                                                 struct cma_objcache_registry **ret,
                                                 struct cma_err *reterr);
/* The same without an observer (events are dropped). */
enum cma_errc cma_objcache_registry_new(struct cma_kube *kube, struct cma_objcache_registry **ret,
                                        struct cma_err *reterr);
/* Stops every cache's thread and frees them all; NULL is fine. */
void cma_objcache_registry_free(struct cma_objcache_registry *r);
/* Calls fn(ctx, cache, group, version, resource) for every cache of r ("" group = core), under
 * the registry's lock: fn may read the cache (cma_objcache_count, ...) but not call into r.
 * NULL r calls nothing. For /metrics. */
void cma_objcache_registry_each(struct cma_objcache_registry *r,
                                void (*fn)(void *ctx, struct cma_objcache *c, const char *group,
                                           const char *version, const char *resource),
                                void *ctx);
/* The cache of group/version/resource, created and started on first use; NULL when r is NULL or
 * the cache cannot be made. Valid until cma_objcache_registry_free(). */
struct cma_objcache *cma_objcache_registry_get(struct cma_objcache_registry *r, const char *group,
                                               const char *version, const char *resource);

#endif
