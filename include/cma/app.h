/* app.h: the request handler that ties the stages together: route → API recipe
 * (api_custom, api_index, api_health) → response. Everything it points to is owned by main and
 * outlives the server; the catalog is read through the store (a reference per request), and the
 * rules come with it (a config reload swaps both). */
#ifndef CMA_APP_H
#define CMA_APP_H

#include <stdbool.h>
#include <stdint.h>

#include "cma/backend.h"

struct cma_options;
struct cma_ruleset;
struct cma_kube;
struct cma_catalog_store;
struct cma_discovery;
struct cma_auth;
struct cma_request;
struct cma_response;
struct cma_metrics;
struct cma_metric;
struct cma_ns_limit;
struct cma_explain;
struct cma_watch;

struct cma_app {
    const struct cma_options *opts;
    /* The rules a request uses: with `discovery` set, each request takes its catalog's ruleset
     * (the one its entries point into), or discovery's current one before the first catalog,
     * through cma_app_set_rules() on its own copy of the app; a config reload so never changes
     * the rules under a running request. Without discovery (tests) this one, as set. */
    const struct cma_ruleset *rules;
    struct cma_backend backend; /* every query goes through it (cma/backend.h) */
    struct cma_kube *kube;
    struct cma_objcache_registry *caches; /* watch caches for selectors; NULL = live LISTs */
    struct cma_catalog_store *store;
    struct cma_discovery *discovery;
    bool serve_custom;   /* rules non-empty */
    bool serve_external; /* externalRules non-empty */
    bool serve_resource; /* resourceRules present */
    int64_t started_wall_ms;
    struct cma_auth *auth; /* NULL = no authentication/authorization (--insecure-disable-auth) */
    struct cma_metrics *metrics; /* /metrics and request metrics; NULL = 404, not measured */
    uint64_t *rule_backend_ns;   /* per request: time in rules' own backends (cma_api_query) */
    struct cma_explain *explain; /* the trace of an explained request (explain.h); else NULL */
    struct cma_watch *reload;    /* config reload status (/readyz's config-reload); NULL: none */
    /* query slots per (backend, namespace) for MetricRules' queries
     * (--metric-rules-max-concurrent-queries, cma_api_query_rule); NULL: none */
    struct cma_ns_limit *mr_slots;
    /* The request's deadline and client (backend.h), set on the request's own copy of the app
     * by cma_app_handle() and passed down with every backend query; NULL: none. */
    const struct cma_call *call;
    /* private: set by cma_app_register_metrics() */
    struct cma_metric *requests_total, *request_duration;
};

/* Sets app->rules and the groups served from it: a group is served when the rules have rules
 * of its kind and opts (if any) does not disable it. */
void cma_app_set_rules(struct cma_app *app, const struct cma_ruleset *rules);

/* Sets app->metrics and registers the request metrics in it (kube-apiserver's
 * apiserver_request_total and apiserver_request_duration_seconds). m may be NULL. Call before
 * the server starts. */
void cma_app_register_metrics(struct cma_app *app, struct cma_metrics *m);

/* cma_handler_fn for the server: `app` is a struct cma_app. Thread-safe. */
void cma_app_handle(void *app, const struct cma_request *req, struct cma_response *resp);

/* cma_inline_fn for the server (server.h): the same handling as cma_app_handle, run on the
 * event thread with no wait allowed. It answers (true) only when the whole answer comes from
 * memory: the route is a discovery document, /, /version, /openapi, a health endpoint or an
 * unknown path (404/400), the method is not GET/HEAD (405), and authentication and
 * authorization are decided without a webhook call (certificates, anonymous, a cached
 * TokenReview answer; system:masters, --authorization-always-allow-paths, a cached
 * SubjectAccessReview answer). Then status, body, log line and metrics are those
 * cma_app_handle gives. Otherwise false, with nothing written, counted or logged: the server
 * hands the request to a worker, which runs cma_app_handle. Never blocks: it takes only short
 * mutexes never held across I/O (auth snapshot, verifier and webhook caches, catalog store,
 * discovery's ruleset pointer, a metric's label set). Thread-safe. */
bool cma_app_try_inline(void *app, const struct cma_request *req, struct cma_response *resp);

#endif
