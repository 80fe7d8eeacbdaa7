/* api_resource.c: placeholder until the resource metrics API lands: answers 404 Status. */
#include "api_internal.h"

void cma_api_resource(struct cma_app *app, struct cma_catalog *cat, const struct cma_route *route,
                      const struct cma_request *req, struct cma_response *resp)
{
    (void)app;
    (void)cat;
    (void)route;
    (void)req;
    cma_api_reply_errorf(resp, CMA_ERR_NOT_FOUND, "not implemented yet");
}
