/* router.h: Kubernetes API paths of the three metrics groups → a parsed route. Paths arrive
 * raw (percent-encoded as the aggregator sends them); each segment is percent-decoded here
 * (no '+' → space in paths). A declarative table maps path shapes to route kinds.
 * Pure; thread-safe. Also the request arena's contract (the routing layer's per-request memory,
 * below). */
#ifndef CMA_ROUTER_H
#define CMA_ROUTER_H

#include <stddef.h>

#include "cma/groups.h"
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
    CMA_ROUTE_DEBUG_EXPLAIN,           /* /debug/explain (--enable-explain) */
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

/* ---- the request arena ----
 * Every request the server receives gets an arena (cma/arena.h) when its request line arrives;
 * the server frees it once the response has been sent (or the connection dropped). Handlers
 * allocate their per-request temporaries there and hand other stages' per-request objects to
 * it with cma_arena_defer(), so they free nothing by hand. Defined in server.c. */

/* A request may hold this much arena memory; past it an allocation fails with
 * CMA_ERR_TOO_LARGE and the handler answers 500 (and logs why). A by-selector answer's arrays
 * take under 200 bytes per object (pointers plus the encoder's item structs, 72-80 bytes), so
 * 32 MiB serves well over 100,000 objects; it is half the response body's own ceiling
 * (CMA_BUF_DEFAULT_MAX). Lists from kube and the backend's answers are handed over with
 * cma_arena_defer() and not counted. A build may set it lower
 * (-DCMA_REQUEST_ARENA_MAX_BYTES=...) to see that path. */
#ifndef CMA_REQUEST_ARENA_MAX_BYTES
#define CMA_REQUEST_ARENA_MAX_BYTES ((size_t)32 << 20)
#endif

struct cma_request;
struct cma_arena;
/* The arena of a request the server made; NULL for a request built by hand (unit tests:
 * req->conn is NULL), for which the caller brings its own. */
struct cma_arena *cma_request_arena(const struct cma_request *req);

#endif
