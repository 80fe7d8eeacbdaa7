/* explain.h: `custom-metrics-adapter explain PATH` and GET /debug/explain?path=PATH: one metrics
 * request run through the same handlers as any other, with a trace attached (struct cma_app's
 * `explain`), turned into a report for a person: the rule that matched (file:line:column), the
 * catalog entry, the objects the selector resolved to, the PromQL, the backend, its timing and
 * raw answer, every sample left out and why, and the final answer; when nothing matches, why
 * (no rule's seriesQuery finds the series, a filter or the name mapping drops it, no label maps
 * to the resource, the resource is unknown to the cluster; with --enable-metric-rules, each
 * MetricRule of the request's namespace as its status says). The same report, scoped to what the
 * request may read, answers a metrics request with explain=true (explain_trace.h). stage: api.
 * Thread-safe: each run has its own trace. */
#ifndef CMA_EXPLAIN_H
#define CMA_EXPLAIN_H

#include <stddef.h>
#include <stdint.h>

#include "cma/buf.h"
#include "cma/err.h"

struct cma_app;
struct cma_backend;
struct cma_kube;
struct cma_ruleset;
struct cma_catalog_store;

/* Runs `target` (a request path as the HPA or `kubectl get --raw` sends it, query string
 * included, e.g. "/apis/custom.metrics.k8s.io/v1beta2/namespaces/ml/pods/%2A/m?labelSelector=
 * app%3Dbert") through app's handlers without authentication, and appends the report to out.
 * *ret_status is the explained request's HTTP status. CMA_ERR_BAD_REQUEST for a target that is
 * not a path or not decodable; CMA_ERR_NOMEM. */
enum cma_errc cma_explain_run(const struct cma_app *app, const char *target, struct cma_buf *out,
                              int *ret_status, struct cma_err *reterr);

/* What the CLI does before cma_explain_run(): reads the cluster's API discovery through kube,
 * relists once as the server's discovery does (series with a sample in the last max_age_ms;
 * each rule's seriesQuery through backends[rule->backend.index], the table the rules are bound
 * to, [0] the flags' backend; a backend whose listing fails contributes nothing, with a warning,
 * unless every one fails) and publishes the catalog into store. Errors as discovery's. */
enum cma_errc cma_explain_prepare(const struct cma_backend *backends, size_t n_backends,
                                  struct cma_kube *kube, const struct cma_ruleset *rules,
                                  int64_t max_age_ms, struct cma_catalog_store *store,
                                  struct cma_err *reterr);

#endif
