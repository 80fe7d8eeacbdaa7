/* router.h: Kubernetes API paths of the three metrics groups → a parsed route. Paths arrive
 * raw (percent-encoded as the aggregator sends them); each segment is percent-decoded here
 * (no '+' → space in paths). A declarative table maps path shapes to route kinds.
 * Pure; thread-safe. */
#ifndef CMA_ROUTER_H
#define CMA_ROUTER_H

#include <stddef.h>

#include "cma/err.h"

enum cma_route_kind {
    CMA_ROUTE_NOT_FOUND,               /* unknown path: 404 */
    CMA_ROUTE_BAD_PATH,                /* known group but malformed: 400 "invalid request path" */
    CMA_ROUTE_ROOT,                    /* "/" */
    CMA_ROUTE_HEALTHZ,                 /* /healthz[/check] */
    CMA_ROUTE_LIVEZ,                   /* /livez[/check] */
    CMA_ROUTE_READYZ,                  /* /readyz[/check] */
    CMA_ROUTE_VERSION,                 /* /version */
    CMA_ROUTE_OPENAPI,                 /* /openapi/v2, /openapi/v3[/...] */
    CMA_ROUTE_METRICS,                 /* /metrics */
    CMA_ROUTE_APIS,                    /* /apis */
    CMA_ROUTE_API_GROUP,               /* /apis/{group} */
    CMA_ROUTE_API_GROUP_VERSION,       /* /apis/{group}/{version} */
    CMA_ROUTE_CUSTOM_OBJECT,           /* custom: [namespaces/{ns}/]{resource}/{name|*}/{metric} */
    CMA_ROUTE_CUSTOM_NAMESPACE_METRIC, /* custom: namespaces/{ns}/metrics/{metric} */
    CMA_ROUTE_EXTERNAL_METRIC,         /* external: namespaces/{ns}/{metric} */
    CMA_ROUTE_RESOURCE_NODES,          /* metrics.k8s.io: nodes */
    CMA_ROUTE_RESOURCE_NODE,           /* metrics.k8s.io: nodes/{name} */
    CMA_ROUTE_RESOURCE_PODS,           /* metrics.k8s.io: pods, namespaces/{ns}/pods */
    CMA_ROUTE_RESOURCE_POD,            /* metrics.k8s.io: namespaces/{ns}/pods/{name} */
};

#define CMA_GROUP_CUSTOM "custom.metrics.k8s.io"
#define CMA_GROUP_EXTERNAL "external.metrics.k8s.io"
#define CMA_GROUP_RESOURCE "metrics.k8s.io"

struct cma_route {
    enum cma_route_kind kind;
    char *group;      /* API group for /apis/... routes, else NULL */
    char *version;    /* "v1beta1", "v1beta2" */
    char *namespace_; /* decoded; NULL for root-scoped routes; "*" allowed for custom */
    char *resource;   /* custom: "pods", "deployments.apps" as in the path */
    char *name;       /* object name or "*"; for CUSTOM_NAMESPACE_METRIC the namespace */
    char *metric;     /* metric name (custom: case kept; external: as sent) */
    char *subpath;    /* health check name after /healthz/, openapi remainder */
};

/* Parses `path` (the raw request path without the query string). Only unknown groups/versions
 * or shapes give NOT_FOUND/BAD_PATH routes; a CMA_OK return with kind NOT_FOUND is normal.
 * Errors (CMA_ERR_BAD_REQUEST) are for undecodable escapes or a decoded '/' or NUL inside a
 * segment. Caller owns *ret: cma_route_free(). */
enum cma_errc cma_router_parse(const char *path, struct cma_route **ret, struct cma_err *reterr);
void cma_route_free(struct cma_route *r);

#endif
