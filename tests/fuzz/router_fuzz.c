/* router_fuzz.c: libFuzzer target for cma_router_parse: any bytes, as a NUL-terminated path,
 * must give either an error or a route that frees cleanly, and a route's strings must be
 * readable C strings. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "cma/router.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static size_t touch(const char *s)
{
    return s ? strlen(s) : 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *path = malloc(size + 1);
    if (!path)
        return 0;
    memcpy(path, data, size);
    path[size] = '\0';
    struct cma_route *r = NULL;
    struct cma_err err;
    cma_err_clear(&err);
    if (cma_router_parse(path, &r, &err) == CMA_OK) {
        /* Decoding only shrinks: no field can be longer than the input. */
        const char *fields[] = {r->group, r->version, r->namespace_, r->resource,
                                r->name,  r->metric,  r->subpath};
        for (size_t i = 0; i < sizeof(fields) / sizeof(fields[0]); i++)
            if (touch(fields[i]) > size)
                abort();
        cma_route_free(r);
    } else if (err.code == CMA_OK || r != NULL) {
        abort();
    }
    free(path);
    return 0;
}
