/* catalog.h: what discovery found, as an immutable, reference-counted snapshot:
 * (group-resource, namespaced, metric) → the rule and series that answer it, external metrics by
 * name, the RESTMapper it was built against, and the discovery documents pre-encoded once per
 * snapshot (so /apis/custom.metrics.k8s.io/v1beta1 costs a memcpy).
 * The discovery thread builds snapshots; a store publishes the current one by pointer swap under
 * a mutex; request threads take a reference at request start and drop it at the end. A failed
 * relist simply does not publish, so the last good snapshot keeps serving. */
#ifndef CMA_CATALOG_H
#define CMA_CATALOG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cma/err.h"

struct cma_api_resource;
struct cma_restmapper;
struct cma_rule;
struct cma_ruleset;

struct cma_catalog_entry {
    const struct cma_api_resource *resource; /* owned by the snapshot's mapper; NULL: external */
    bool namespaced;                         /* the resource's scope from API discovery */
    char *metric;                            /* API metric name */
    char *series;                            /* Prometheus series name */
    const struct cma_rule *rule;
};

struct cma_catalog;
struct cma_catalog_builder;

/* Takes a reference on mapper. rules must outlive every catalog built from it (see
 * cma_catalog_hold_rules). */
enum cma_errc cma_catalog_builder_new(struct cma_restmapper *mapper,
                                      struct cma_catalog_builder **ret, struct cma_err *reterr);
void cma_catalog_builder_free(struct cma_catalog_builder *b);
/* Adds (or, for an existing key, overwrites: later rules and series win, as upstream) a custom
 * metric entry. */
enum cma_errc cma_catalog_builder_add(struct cma_catalog_builder *b,
                                      const struct cma_api_resource *resource, const char *metric,
                                      size_t metric_len, const char *series, size_t series_len,
                                      const struct cma_rule *rule);
/* Adds an external metric (key: metric name, case-insensitive). */
enum cma_errc cma_catalog_builder_add_external(struct cma_catalog_builder *b, const char *metric,
                                               size_t metric_len, const char *series,
                                               size_t series_len, const struct cma_rule *rule);
size_t cma_catalog_builder_count(const struct cma_catalog_builder *b);
/* Finishes the snapshot (sorts entries, encodes discovery documents) and frees the builder, also
 * on failure. Caller owns one reference. */
enum cma_errc cma_catalog_build(struct cma_catalog_builder *b, int64_t built_wall_ms,
                                struct cma_catalog **ret, struct cma_err *reterr);

struct cma_catalog *cma_catalog_ref(struct cma_catalog *c);
void cma_catalog_unref(struct cma_catalog *c);

/* Entries are keyed by (resource, namespaced, metric, owner): the owner is the namespace of the
 * MetricRule whose rule serves the entry (cma_rule.owner), NULL for the config files' rules. A
 * builder's "later rules win" holds per owner. */
/* The config files' entry (owner NULL). */
const struct cma_catalog_entry *cma_catalog_lookup(const struct cma_catalog *c,
                                                   const struct cma_api_resource *resource,
                                                   bool namespaced, const char *metric);
const struct cma_catalog_entry *cma_catalog_lookup_external(const struct cma_catalog *c,
                                                            const char *metric);
/* The entry of exactly that owner (NULL: the config's); resource NULL: an external metric. */
const struct cma_catalog_entry *cma_catalog_lookup_owner(const struct cma_catalog *c,
                                                         const struct cma_api_resource *resource,
                                                         bool namespaced, const char *metric,
                                                         const char *owner);
/* What a request in namespace_ (NULL or "": cluster-scoped, or external across all namespaces)
 * is served by: the config files' entry, else the entry of a MetricRule of namespace_ (never
 * for a cluster-scoped resource or without a namespace). resource NULL: an external metric. */
const struct cma_catalog_entry *cma_catalog_lookup_in(const struct cma_catalog *c,
                                                      const struct cma_api_resource *resource,
                                                      bool namespaced, const char *metric,
                                                      const char *namespace_);
size_t cma_catalog_count(const struct cma_catalog *c); /* custom entries */
size_t cma_catalog_count_external(const struct cma_catalog *c);
const struct cma_catalog_entry *cma_catalog_entry_at(const struct cma_catalog *c, size_t i);
/* The i-th external entry, NULL past the end. */
const struct cma_catalog_entry *cma_catalog_external_at(const struct cma_catalog *c, size_t i);
/* A key two MetricRules of one namespace both served: `rule` (the earlier in the ruleset, so the
 * newer MetricRule) lost it; the entry of the key (cma_catalog_lookup_owner with the rule's
 * owner namespace) names the winner. The MetricRule controller reports it as a Conflict. */
struct cma_catalog_loss {
    const struct cma_api_resource *resource; /* NULL: external */
    bool namespaced;
    char *metric;
    const struct cma_rule *rule;
};
size_t cma_catalog_lost_count(const struct cma_catalog *c);
/* The i-th loss (custom then external), NULL past the end. */
const struct cma_catalog_loss *cma_catalog_lost_at(const struct cma_catalog *c, size_t i);
struct cma_restmapper *cma_catalog_mapper(const struct cma_catalog *c); /* borrowed */
/* The ruleset the entries' rules point into: the snapshot holds a reference to it, so a config
 * reload never frees the rules of a snapshot a request still uses. Attach it (a new reference;
 * a previous one is dropped) before the snapshot is shared: discovery does for each relist,
 * main for the snapshot loaded from --catalog-cache-file. cma_catalog_rules() is NULL when none
 * was attached (snapshots built by hand in tests). */
void cma_catalog_hold_rules(struct cma_catalog *c, const struct cma_ruleset *rules);
const struct cma_ruleset *cma_catalog_rules(const struct cma_catalog *c); /* borrowed */
int64_t cma_catalog_built_ms(const struct cma_catalog *c);

/* One value a later stage derives from a snapshot once and keeps with it (the API layer's
 * encoded discovery documents, so the catalog knows nothing of encodings). Embed this first in
 * your struct; `free` is called with it when the snapshot is freed. */
struct cma_catalog_attachment {
    void (*free)(struct cma_catalog_attachment *a);
};
/* The snapshot's attachment; NULL until one was attached. Borrowed while c is referenced. */
struct cma_catalog_attachment *cma_catalog_attachment(const struct cma_catalog *c);
/* Attaches a when c has none yet and returns a; otherwise frees a and returns the attachment
 * that was first. Thread-safe (one atomic compare-and-swap). */
struct cma_catalog_attachment *cma_catalog_attach(struct cma_catalog *c,
                                                  struct cma_catalog_attachment *a);

/* The store: the current snapshot, replaced atomically. Thread-safe. */
struct cma_catalog_store;
enum cma_errc cma_catalog_store_new(struct cma_catalog_store **ret);
void cma_catalog_store_free(struct cma_catalog_store *s);
/* Returns a new reference to the current snapshot (NULL before the first publish). */
struct cma_catalog *cma_catalog_store_get(struct cma_catalog_store *s);
/* Publishes c (takes the caller's reference) and drops the store's reference to the old one. */
void cma_catalog_store_publish(struct cma_catalog_store *s, struct cma_catalog *c);
/* Called after each publish on the publishing thread, outside the store's lock, with a reference
 * held for the call (persist.c writes the snapshot to disk). Set before the store is shared. */
typedef void (*cma_catalog_publish_fn)(void *ctx, const struct cma_catalog *c);
void cma_catalog_store_on_publish(struct cma_catalog_store *s, cma_catalog_publish_fn fn,
                                  void *ctx);

#endif
