/* metricrule_watch.h: a watch of MetricRule objects (metrics.custom-metrics-adapter.dev/v1alpha1
 * metricrules, all namespaces) that keeps each object whole enough to compile and report on it:
 * namespace, name, uid, generation, creationTimestamp, resourceVersion and the spec as compact
 * JSON text (and its status, for the status writer). LIST, then WATCH from the list's
 * resourceVersion (bookmarks move it on), re-list on 410 Gone, reconnect after a dropped watch with
 * a backoff (200 ms doubling to 30 s, jittered); one thread. After the first LIST the state is kept
 * while the API is away. Nothing is logged: what happens goes to the observer. Thread-safe. The
 * MetricRule controller (metricrule_ctl.h) runs it. */
#ifndef CMA_METRICRULE_WATCH_H
#define CMA_METRICRULE_WATCH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cma/err.h"

struct cma_kube;
struct cma_metricrule_watch;

#define CMA_METRICRULE_GROUP "metrics.custom-metrics-adapter.dev"
#define CMA_METRICRULE_VERSION "v1alpha1"
#define CMA_METRICRULE_RESOURCE "metricrules"

/* One MetricRule as last seen. Every pointer is owned; none is NULL ("" when absent). */
struct cma_metricrule {
    char *namespace_;
    char *name;
    char *uid;
    char *resource_version;
    char *creation_timestamp; /* RFC 3339 text as the server sent it */
    int64_t creation_ms;      /* parsed; 0 when absent or unparsable */
    int64_t generation;       /* metadata.generation; 0 when absent */
    char *spec_json;          /* spec re-encoded compactly, keys in the server's order; "{}" */
    char *status_json;        /* status re-encoded the same way; "" when absent */
};

void cma_metricrules_free(struct cma_metricrule *objs, size_t n);

enum cma_metricrule_event_kind {
    CMA_METRICRULE_LISTED,       /* count objects at resource_version */
    CMA_METRICRULE_LIST_FAILED,  /* err; tried again after retry_ms */
    CMA_METRICRULE_GONE,         /* resource_version expired (410): re-listing */
    CMA_METRICRULE_WATCH_FAILED, /* err (or a clean end with no event); reconnect after retry_ms */
    CMA_METRICRULE_CHANGED,      /* an object was added, changed or deleted (after a LIST too) */
};

/* Pointers borrowed for the call. */
struct cma_metricrule_event {
    enum cma_metricrule_event_kind kind;
    const char *resource_version;
    size_t count;
    long status;
    int64_t retry_ms;
    const struct cma_err *err;
};

/* Called on the watch thread; must not call cma_metricrule_watch_free(). */
struct cma_metricrule_observer {
    void (*on_event)(void *ctx, const struct cma_metricrule_event *ev);
    void *ctx;
};

/* `kube` may be NULL (fed only through the apply functions, as the unit test does); borrowed.
 * observer copied (NULL: nowhere). Caller owns: cma_metricrule_watch_free(). */
enum cma_errc cma_metricrule_watch_new(struct cma_kube *kube,
                                       const struct cma_metricrule_observer *observer,
                                       struct cma_metricrule_watch **ret, struct cma_err *reterr);
/* Starts the LIST+WATCH thread (needs a kube client). */
enum cma_errc cma_metricrule_watch_start(struct cma_metricrule_watch *w, struct cma_err *reterr);
/* Stops the thread (if started) and frees everything. NULL is fine. */
void cma_metricrule_watch_free(struct cma_metricrule_watch *w);

/* Replaces the content with a MetricRuleList body (its items and metadata.resourceVersion). */
enum cma_errc cma_metricrule_watch_apply_list(struct cma_metricrule_watch *w, const char *body,
                                              size_t len, struct cma_err *reterr);
/* Applies one watch event line (ADDED / MODIFIED / DELETED / BOOKMARK / ERROR). *ret_gone is
 * set for an ERROR event with code 410 (re-list); other ERROR events and undecodable lines →
 * CMA_ERR_KUBE_ERROR. *ret_changed (may be NULL) says whether the set of objects changed. */
enum cma_errc cma_metricrule_watch_apply_event(struct cma_metricrule_watch *w, const char *line,
                                               size_t len, bool *ret_gone, bool *ret_changed,
                                               struct cma_err *reterr);

/* A copy of every object, sorted by namespace then name (caller: cma_metricrules_free). */
enum cma_errc cma_metricrule_watch_snapshot(struct cma_metricrule_watch *w,
                                            struct cma_metricrule **ret, size_t *ret_n,
                                            struct cma_err *reterr);
bool cma_metricrule_watch_is_synced(struct cma_metricrule_watch *w);
/* The resourceVersion to watch from (copied into out; "" before the first LIST). */
void cma_metricrule_watch_resource_version(struct cma_metricrule_watch *w, char *out,
                                           size_t out_len);
/* How many changes were applied (a LIST counts one): a generation number for consumers. */
uint64_t cma_metricrule_watch_changes(struct cma_metricrule_watch *w);
/* Counters for tests and logs: LISTs applied, watch streams opened. */
size_t cma_metricrule_watch_lists(struct cma_metricrule_watch *w);
size_t cma_metricrule_watch_watches(struct cma_metricrule_watch *w);

#endif
