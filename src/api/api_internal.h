/* api_internal.h: the API recipes' entry points and the reply helpers they share. */
#ifndef CMA_API_INTERNAL_H
#define CMA_API_INTERNAL_H

#include <stddef.h>

#include "cma/app.h"
#include "cma/err.h"

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

void cma_api_custom(struct cma_app *app, struct cma_catalog *cat, const struct cma_route *route,
                    const struct cma_request *req, struct cma_response *resp);
/* external.metrics.k8s.io v1beta1 (api_external.c). */
void cma_api_external(struct cma_app *app, struct cma_catalog *cat, const struct cma_route *route,
                      const struct cma_request *req, struct cma_response *resp);
/* metrics.k8s.io v1beta1 PodMetrics/NodeMetrics (api_resource.c). */
void cma_api_resource(struct cma_app *app, struct cma_catalog *cat, const struct cma_route *route,
                      const struct cma_request *req, struct cma_response *resp);
void cma_api_index(struct cma_app *app, struct cma_catalog *cat, const struct cma_route *route,
                   const struct cma_request *req, struct cma_response *resp);
void cma_api_health(struct cma_app *app, struct cma_catalog *cat, const struct cma_route *route,
                    const struct cma_request *req, struct cma_response *resp);

#endif
