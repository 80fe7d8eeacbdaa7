/* discovery.h: the discovery thread. It owns the RESTMapper refresh (kube API discovery every
 * --discovery-interval) and the relist (one /api/v1/series call per distinct seriesQuery every
 * --metrics-relist-interval, start=now-max-age, end=now), folds each streamed series into
 * catalog entries at once (memory does not grow with the number of series), and publishes a new
 * catalog snapshot only when every series call succeeded; otherwise the last good snapshot keeps
 * serving and a warning says so. With several backends (rules' `backend: NAME`) the same holds
 * per backend: a failing backend keeps its own last good entries while the others' are
 * refreshed (cma_discovery_relist_backends). Logging layer. */
#ifndef CMA_DISCOVERY_H
#define CMA_DISCOVERY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cma/backend.h"
#include "cma/err.h"

struct cma_kube;
struct cma_metrics;
struct cma_ruleset;
struct cma_catalog_store;
struct cma_restmapper;
struct cma_catalog;

struct cma_discovery_config {
    struct cma_backend backend; /* where series come from (borrowed) */
    /* Several backends (`backends:`, this project's extension): the table the rules are bound to
     * (cma_ruleset_bind_backends; backends[0] is the flags' backend), borrowed; each rule's
     * series come from backends[rule->backend.index]. NULL: `backend` for every rule. */
    const struct cma_backend *backends;
    size_t n_backends;
    struct cma_metrics *metrics; /* relist metrics (custom_metrics_adapter_relist_*); NULL = off */
    struct cma_kube *kube;
    const struct cma_ruleset *rules; /* the first ruleset (the thread takes a reference) */
    struct cma_catalog_store *store;
    int64_t relist_interval_ms;    /* --metrics-relist-interval */
    int64_t max_age_ms;            /* --metrics-max-age (0 = relist interval) */
    int64_t discovery_interval_ms; /* --discovery-interval: RESTMapper refresh */
    int64_t retry_ms;              /* wait after a failed kube discovery; 0 = 5 s */
};

struct cma_discovery_status {
    bool have_catalog;
    int64_t last_success_wall_ms; /* 0 = never */
    int64_t last_attempt_wall_ms;
    uint64_t n_relists, n_failures;
    char last_error[512]; /* "" when the last relist succeeded */
};

struct cma_discovery;

/* A backend whose series have never been listed (cma_discovery_backend_pending). */
struct cma_discovery_pending {
    char name[256];        /* cma_backend_name() */
    int64_t since_wall_ms; /* when discovery began trying it */
    char last_error[512];  /* its last listing's error; "" while the first one runs */
};

/* Starts the thread (the first relist begins at once). Caller owns: cma_discovery_stop(). */
enum cma_errc cma_discovery_start(const struct cma_discovery_config *cfg,
                                  struct cma_discovery **ret, struct cma_err *reterr);
/* Wakes the thread, waits for it to finish its current step and frees everything. */
void cma_discovery_stop(struct cma_discovery *d);
void cma_discovery_get_status(struct cma_discovery *d, struct cma_discovery_status *ret);
/* Has backend `index` (of cma_discovery_config.backends; 0 without a table) never listed its
 * series? True (and *ret filled) from start-up until its first successful listing, unless the
 * catalog serving when the thread started (from --catalog-cache-file) held entries of its rules:
 * its metrics are then unknown rather than absent (the API answers 503, not 404). False for a
 * NULL d or an index out of range. Thread-safe. */
bool cma_discovery_backend_pending(struct cma_discovery *d, size_t index,
                                   struct cma_discovery_pending *ret);
/* Asks the thread to re-read kube API discovery now (and relist against it), e.g. when a request
 * names a resource the RESTMapper does not know: a CRD installed after start-up. Thread-safe and
 * cheap; accepted at most once a minute (returns false, doing nothing, otherwise or when d is
 * NULL). */
bool cma_discovery_request_refresh(struct cma_discovery *d);
/* A config reload: the thread takes a reference to rules, drops the one to the previous
 * ruleset, and relists with the new rules at once (the current step, if any, finishes first;
 * its snapshot still holds the previous rules). Each published snapshot holds the ruleset it
 * was built from (cma_catalog_rules). Thread-safe; nothing happens when d is NULL. */
void cma_discovery_set_rules(struct cma_discovery *d, const struct cma_ruleset *rules);
/* A new reference to the current ruleset (the last one set), for the caller to
 * cma_ruleset_unref(); NULL when d is NULL. Thread-safe. */
const struct cma_ruleset *cma_discovery_rules(struct cma_discovery *d);

/* One relist against `mapper`, synchronously (used by the thread and by tests): builds a catalog
 * snapshot from the backend's series (in tests a fake that answers canned series per selector,
 * as prometheus-adapter's pkg/client/fake); the snapshot holds a reference to rules. On failure
 * *ret is untouched. */
/* A relist over several backends (cma_discovery_config.backends): one series listing per
 * (backend, seriesQuery). A backend whose listing fails keeps the entries of its rules that
 * `previous` (the snapshot serving now; NULL: none) holds, with a warning naming the backend,
 * while the others' entries are fresh; *ret is then built and `partial` (may be NULL) says
 * which backends failed. When every backend with rules fails, the call fails as
 * cma_discovery_relist does. Two rules on different backends serving the same (resource,
 * metric), or the same external metric: of the backends whose part has the entry (fresh or
 * kept), the one with the lower index wins (the flags' backend, then `backends:` in config
 * order), whichever answered first, with a warning; a backend that fails with no kept entry
 * (`previous` has none: before its first successful listing) leaves it to the next one. */
struct cma_relist_backends {
    const struct cma_backend *table; /* by rule->backend.index */
    size_t n;
    struct cma_catalog *previous;
    /* NULL, or n errors the call fills: each backend's own listing outcome (CMA_OK when it
     * listed, or has no rules), also when the call fails */
    struct cma_err *outcomes;
};
enum cma_errc cma_discovery_relist_backends(const struct cma_relist_backends *backends,
                                            const struct cma_ruleset *rules,
                                            struct cma_restmapper *mapper, int64_t now_wall_ms,
                                            int64_t max_age_ms, struct cma_catalog **ret,
                                            struct cma_err *partial, struct cma_err *reterr);

enum cma_errc cma_discovery_relist(const struct cma_backend *backend,
                                   const struct cma_ruleset *rules, struct cma_restmapper *mapper,
                                   int64_t now_wall_ms, int64_t max_age_ms,
                                   struct cma_catalog **ret, struct cma_err *reterr);

#endif
