/* discovery.h: the discovery thread. It owns the RESTMapper refresh (kube API discovery every
 * --discovery-interval) and the relist (one /api/v1/series call per distinct seriesQuery every
 * --metrics-relist-interval, start=now-max-age, end=now), folds each streamed series into
 * catalog entries at once (memory does not grow with the number of series), and publishes a new
 * catalog snapshot only when every series call succeeded; otherwise the last good snapshot keeps
 * serving and a warning says so. Logging layer. */
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
    struct cma_backend backend;  /* where series come from (borrowed) */
    struct cma_metrics *metrics; /* relist metrics (custom_metrics_adapter_relist_*); NULL = off */
    struct cma_kube *kube;
    const struct cma_ruleset *rules;
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

/* Starts the thread (the first relist begins at once). Caller owns: cma_discovery_stop(). */
enum cma_errc cma_discovery_start(const struct cma_discovery_config *cfg,
                                  struct cma_discovery **ret, struct cma_err *reterr);
/* Wakes the thread, waits for it to finish its current step and frees everything. */
void cma_discovery_stop(struct cma_discovery *d);
void cma_discovery_get_status(struct cma_discovery *d, struct cma_discovery_status *ret);
/* Asks the thread to re-read kube API discovery now (and relist against it), e.g. when a request
 * names a resource the RESTMapper does not know: a CRD installed after start-up. Thread-safe and
 * cheap; accepted at most once a minute (returns false, doing nothing, otherwise or when d is
 * NULL). */
bool cma_discovery_request_refresh(struct cma_discovery *d);

/* One relist against `mapper`, synchronously (used by the thread and by tests): builds a catalog
 * snapshot from the backend's series (in tests a fake that answers canned series per selector,
 * as prometheus-adapter's pkg/client/fake). On failure *ret is untouched. */
enum cma_errc cma_discovery_relist(const struct cma_backend *backend,
                                   const struct cma_ruleset *rules, struct cma_restmapper *mapper,
                                   int64_t now_wall_ms, int64_t max_age_ms,
                                   struct cma_catalog **ret, struct cma_err *reterr);

#endif
