/* objcache.h: watch caches of Kubernetes objects for label-selector lookups (LIST then WATCH
 * from the list's resourceVersion, bookmarks, re-list on 410 Gone, reconnect with backoff; one
 * thread per watched resource). Keeps only namespace, name, labels and status.phase per object.
 * After the first sync lookups never wait on the kube API; when the API goes away the cache
 * keeps serving its last state. Thread-safe. */
#ifndef CMA_OBJCACHE_H
#define CMA_OBJCACHE_H

#include <stdbool.h>
#include <stddef.h>

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

/* ---- the app's caches (one per resource), for the request path ---------------------------- */

/* The set of watch caches of one app, held by it (no process-global state). Thread-safe. */
struct cma_objcache_registry;

/* Creates the registry for `kube` (borrowed: must outlive it) and starts the pods cache.
 * Caller owns: cma_objcache_registry_free(). */
enum cma_errc cma_objcache_registry_new(struct cma_kube *kube, struct cma_objcache_registry **ret,
                                        struct cma_err *reterr);
/* Stops every cache's thread and frees them all; NULL is fine. */
void cma_objcache_registry_free(struct cma_objcache_registry *r);
/* The cache of group/version/resource, created and started on first use; NULL when r is NULL or
 * the cache cannot be made. Valid until cma_objcache_registry_free(). */
struct cma_objcache *cma_objcache_registry_get(struct cma_objcache_registry *r, const char *group,
                                               const char *version, const char *resource);

#endif
