/* api_internal.h: the API recipes' entry points and the reply helpers they share. */
#ifndef CMA_API_INTERNAL_H
#define CMA_API_INTERNAL_H

#include "cma/app.h"
#include "cma/err.h"

struct cma_route;
struct cma_catalog;

/* Sets status, JSON Content-Type and a metav1.Status body from err. */
void cma_api_reply_error(struct cma_response *resp, const struct cma_err *err);
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
