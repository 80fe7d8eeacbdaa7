/* api_metrics.h: what app.c needs from api_metrics.c: the /metrics recipe and the bookkeeping
 * that ends every request (kube-apiserver's request metrics and the --v=2 request log line).
 * Not a public contract. */
#ifndef CMA_API_METRICS_H
#define CMA_API_METRICS_H

#include <stdbool.h>
#include <stdint.h>

#include "cma/app.h"

struct cma_request;
struct cma_response;
struct cma_route;

/* What the handler learns about a request on its way (filled by app.c). */
struct cma_api_request_info {
    int64_t start_ns;              /* monotonic, when the handler started */
    int64_t start_ms;              /* cma_clock_mono_ms() at the same moment */
    char user[128];                /* the authenticated user name; "" when not authenticated */
    const struct cma_route *route; /* borrowed (request arena); NULL when the path did not parse */
    bool backend_measured;         /* backend_ns is known (the request's backend was timed) */
    uint64_t backend_ns;           /* time spent in backend calls */
};

/* Starts the clock of a request. */
void cma_api_request_begin(struct cma_api_request_info *info);
/* Records the finished request: apiserver_request_total and apiserver_request_duration_seconds
 * (when app->metrics is set) and the "HTTP" log line at --v=2. */
void cma_api_request_end(struct cma_app *app, const struct cma_request *req,
                         const struct cma_response *resp, const struct cma_api_request_info *info);

/* GET /metrics: the registry in the text exposition format (404 when app->metrics is NULL). */
void cma_api_metrics(struct cma_app *app, struct cma_response *resp);

#endif
