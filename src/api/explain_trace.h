/* explain_trace.h: the hooks the API recipes call while a request is explained (explain.c).
 * Every hook takes the app's trace (struct cma_app's `explain`) and does nothing when it is
 * NULL, so a recipe calls them unconditionally and an ordinary request pays one NULL test per
 * hook. The report is kept in sections, printed in this order whatever order the hooks ran in.
 * Not a public contract. */
#ifndef CMA_EXPLAIN_TRACE_H
#define CMA_EXPLAIN_TRACE_H

#include <stdbool.h>
#include <stddef.h>

struct cma_app;
struct cma_backend;
struct cma_catalog;
struct cma_catalog_entry;
struct cma_explain;
struct cma_sample;
struct cma_api_resource;
struct cma_request;
struct cma_response;

enum cma_explain_section {
    CMA_EX_RULE,    /* the rule that matched, with its position */
    CMA_EX_ENTRY,   /* the catalog entry */
    CMA_EX_OBJECTS, /* the objects the request names or its selector resolved to */
    CMA_EX_QUERY,   /* the PromQL, the backend, its timing */
    CMA_EX_SAMPLES, /* the backend's raw answer, every series */
    CMA_EX_DROPPED, /* each sample left out of the answer, and why */
    CMA_EX_WHY,     /* why nothing (or not everything) matched */
    CMA_EX__COUNT
};

/* The backend a recipe queries when a rule names its own (`backend:`): b itself, or, while
 * explaining, a recorder around b (the app's backend is recorded already). Valid until the next
 * call for the same trace. */
const struct cma_backend *cma_explain_backend(struct cma_explain *ex, const struct cma_backend *b);
/* One line in a section. */
void cma_explain_addf(struct cma_explain *ex, enum cma_explain_section s, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* A sample as `{a="1",b="2"} value @ time`, then ": why" when why is not NULL. */
void cma_explain_sample(struct cma_explain *ex, enum cma_explain_section s,
                        const struct cma_sample *sample, const char *why);
/* The objects a request resolved to, on one line (cut after a few KiB). */
void cma_explain_names(struct cma_explain *ex, const char *const *names, size_t n);
/* The matched catalog entry and its rule (file:line:column, seriesQuery, metricsQuery). */
void cma_explain_entry(struct cma_explain *ex, const struct cma_catalog *cat,
                       const struct cma_catalog_entry *entry);
/* Why no catalog entry answers `metric` for resource (NULL: an external metric): lists each
 * rule's seriesQuery again through the app's backend and says what became of the series whose
 * names resemble the metric. Blocks on the backend. */
void cma_explain_why_missing(struct cma_explain *ex, const struct cma_app *app,
                             const struct cma_catalog *cat, const struct cma_api_resource *resource,
                             bool namespaced, const char *metric);

/* GET /debug/explain?path=<target>: the report of cma_explain_run() as text/plain (200), or a
 * Status (400 without a path or for an undecodable one). app->opts->enable_explain is the
 * caller's to check. */
void cma_api_explain(struct cma_app *app, const struct cma_request *req, struct cma_response *resp);

/* `explain=true` on a metrics request itself (custom, external or resource metrics; on with
 * --enable-metric-rules or --enable-explain): the report of that very request, without the
 * parameter, as text/plain (200, the request's own status inside), after the request passed
 * authentication and the SubjectAccessReview of its own attributes. The report is scoped: no
 * sample the request's filter leaves out, each rule's series counted only in the request's
 * namespace (the MetricRules' namespace label added), no MetricRule of another namespace.
 * Returns true when it answered (the report, a 400 Status for a value strconv.ParseBool does not
 * take, or the Status of a failure); false when the request is to be served as usual (no such
 * parameter, explain=false, the feature off, or already explaining). */
bool cma_api_explain_param(struct cma_app *app, const struct cma_request *req,
                           struct cma_response *resp);

#endif
