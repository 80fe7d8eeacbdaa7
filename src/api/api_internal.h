/* api_internal.h: the API recipes' entry points and the reply and request-arena helpers they
 * share. Every recipe gets the request's arena (cma/router.h: freed once the response has been
 * sent) and keeps its per-request memory there, so no recipe frees by hand. */
#ifndef CMA_API_INTERNAL_H
#define CMA_API_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cma/app.h"
#include "cma/arena.h"
#include "cma/err.h"

struct cma_buf;
struct cma_route;
struct cma_catalog;
struct cma_request;
struct cma_label_view;

/* The longest labelSelector, metricLabelSelector or fieldSelector a metrics request may carry,
 * in bytes as received (decoded). Longer ones are refused with 413 before any kube-apiserver or
 * backend call: percent-encoded they can triple, and a LIST URL must stay under the 64 KiB that
 * common proxies (and Python's http.server) accept for a request line. */
#define CMA_API_MAX_SELECTOR_BYTES ((size_t)16 << 10)

/* Sets status, JSON Content-Type and a metav1.Status body from err, both from one code: an err
 * that is NULL or has no code is answered (and logged) as INTERNAL, so the HTTP status always
 * equals the body's code. */
void cma_api_reply_error(struct cma_response *resp, const struct cma_err *err);
/* A recipe's failure: gives err a code when the callee returned rc without saying why (rc's
 * meaning, or INTERNAL when rc is CMA_OK too), logs it (--v=2 for 4xx, a warning otherwise, with
 * the request path) and replies with its Status. */
void cma_api_fail(struct cma_response *resp, const struct cma_request *req, enum cma_errc rc,
                  struct cma_err *err);
/* The value of label `name` among views sorted by name (cma_sample_keep_fn), NULL when absent. */
const char *cma_api_view_value(const struct cma_label_view *views, size_t n, const char *name);
/* Same from a code and a printf message. */
void cma_api_reply_errorf(struct cma_response *resp, enum cma_errc code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* ---- the request arena ---- */

/* err for an arena that refused an allocation (its rc): 500 either way, saying whether the
 * request went past CMA_REQUEST_ARENA_MAX_BYTES or memory ran out. Returns err's code. */
enum cma_errc cma_api_arena_error(const struct cma_arena *arena, struct cma_err *err);
/* Hands ptr to the arena (fn(ptr) runs when the request ends); on failure ptr is freed at once
 * and err set as above. */
enum cma_errc cma_api_adopt(struct cma_arena *arena, void (*fn)(void *), void *ptr,
                            struct cma_err *err);
/* Cleanups for cma_api_adopt(): a parsed selector, a backend answer. */
void cma_api_free_selector(void *selector);
void cma_api_free_result(void *result);
/* Hands a malloc'd list of malloc'd strings (kube LIST, watch cache) to the arena. */
enum cma_errc cma_api_adopt_names(struct cma_arena *arena, char **names, size_t n,
                                  struct cma_err *err);
/* A cma_buf with ceiling max_bytes whose memory goes with the arena; NULL with err set. */
struct cma_buf *cma_api_buf(struct cma_arena *arena, size_t max_bytes, struct cma_err *err);
/* The id of a keep filter (struct cma_keep, backend.h) for the query cache: `head`, then each
 * of the n strings items[i] (and, when seconds is not NULL, "/" seconds[i]), one per line, in the
 * arena. Two requests with the same id keep the same series. NULL (the query is not shared) when
 * it would exceed 1 MiB or memory runs out. */
const char *cma_api_keep_id(struct cma_arena *arena, const char *head, const char *const *items,
                            const char *const *seconds, size_t n);
/* One query of a request, sent to the backend its rule names (`backend: NAME`: rb->queries) or
 * to the app's; its time counts toward the request's backend time (the log line) and explain
 * records it when on. An error is prefixed "unable to fetch <what>metrics from <backend>: "
 * (what: "" or e.g. "cpu "). rb may be NULL (the app's backend). */
struct cma_rule_backend;
struct cma_explain;
struct cma_keep;
struct cma_prom_result;
enum cma_errc cma_api_query(struct cma_app *app, const struct cma_rule_backend *rb,
                            struct cma_explain *ex, const char *what, const char *promql,
                            int64_t time_ms, const struct cma_keep *keep,
                            struct cma_prom_result **ret, struct cma_err *err);
/* cma_api_query for a rule's query (what ""): a MetricRule's (rule->owner) first takes a slot of
 * its namespace on the rule's backend (app->mr_slots: CMA_ERR_TOO_MANY_REQUESTS, a 429 with
 * Retry-After, when they are all taken; given back after the query, whose answer may come from
 * the query cache) and runs to --metric-rules-max-query-timeout at most; a config rule's
 * query is cma_api_query's. */
struct cma_rule;
enum cma_errc cma_api_query_rule(struct cma_app *app, const struct cma_rule *rule,
                                 struct cma_explain *ex, const char *promql, int64_t time_ms,
                                 const struct cma_keep *keep, struct cma_prom_result **ret,
                                 struct cma_err *err);
/* A backend that may hold a metric the catalog lacks: one with rules of that kind (external or
 * custom; the catalog's ruleset, else the app's) whose series discovery has never listed
 * (cma_discovery_backend_pending). Fills *ret and returns true; false without discovery. */
struct cma_discovery_pending;
bool cma_api_pending_backend(const struct cma_app *app, const struct cma_catalog *cat,
                             bool external, struct cma_discovery_pending *ret);
/* BACKEND_UNAVAILABLE (503) naming the backend, since when discovery tries it and its last error,
 * for `metric` of `where` ("pods", "namespace ml"): the answer instead of a 404 while the metric
 * may be the pending backend's. Also explain's words. Returns the code. */
enum cma_errc cma_api_pending_error(const struct cma_discovery_pending *p, const char *metric,
                                    const char *where, struct cma_err *err);
/* 503 before the first catalog: discovery's last error, naming a backend that has never listed
 * when there is one, or "has not completed yet" before the first relist ends. */
void cma_api_reply_no_catalog(const struct cma_app *app, struct cma_response *resp);
/* Zeroed memory for n elements of size bytes in the arena; NULL with err set. */
void *cma_api_array(struct cma_arena *arena, size_t n, size_t size, struct cma_err *err);

/* The code that goes with an err set by the helpers above: INTERNAL past the request's limit,
 * NOMEM otherwise. Never CMA_OK, visibly (the static analyzer cannot see into cma_err_set). */
static inline enum cma_errc cma_api_arena_rc(const struct cma_arena *arena)
{
    return arena->rc == CMA_ERR_TOO_LARGE ? CMA_ERR_INTERNAL : CMA_ERR_NOMEM;
}

/* ---- the recipes: arena is the request's ---- */

void cma_api_custom(struct cma_app *app, struct cma_catalog *cat, const struct cma_route *route,
                    const struct cma_request *req, struct cma_arena *arena,
                    struct cma_response *resp);
/* external.metrics.k8s.io v1beta1 (api_external.c). */
void cma_api_external(struct cma_app *app, struct cma_catalog *cat, const struct cma_route *route,
                      const struct cma_request *req, struct cma_arena *arena,
                      struct cma_response *resp);
/* metrics.k8s.io v1beta1 PodMetrics/NodeMetrics (api_resource.c). */
void cma_api_resource(struct cma_app *app, struct cma_catalog *cat, const struct cma_route *route,
                      const struct cma_request *req, struct cma_arena *arena,
                      struct cma_response *resp);
void cma_api_index(struct cma_app *app, struct cma_catalog *cat, const struct cma_route *route,
                   const struct cma_request *req, struct cma_response *resp);
void cma_api_health(struct cma_app *app, struct cma_catalog *cat, const struct cma_route *route,
                    const struct cma_request *req, struct cma_response *resp);

#endif
