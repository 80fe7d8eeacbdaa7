/* apiresource.c: the lifetime of the discovery description of resources (apiresource.h). */
#include "cma/apiresource.h"

#include <stdlib.h>

void cma_api_resource_done(struct cma_api_resource *r)
{
    free(r->group);
    free(r->version);
    free(r->resource);
    free(r->singular);
    free(r->kind);
    for (size_t i = 0; i < r->n_short_names; i++)
        free(r->short_names[i]);
    free(r->short_names);
}

void cma_api_resources_free(struct cma_api_resources *r)
{
    if (!r)
        return;
    for (size_t i = 0; i < r->n; i++)
        cma_api_resource_done(&r->items[i]);
    free(r->items);
    free(r);
}
