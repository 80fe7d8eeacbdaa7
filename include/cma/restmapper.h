/* restmapper.h: the cluster's resource list (from kube API discovery) as an immutable,
 * reference-counted lookup table: Kubernetes' RESTMapper.ResourceFor for the adapter.
 * Built by the discovery thread, shared read-only by request threads (refcount is atomic). */
#ifndef CMA_RESTMAPPER_H
#define CMA_RESTMAPPER_H

#include <stdbool.h>
#include <stddef.h>

#include "cma/err.h"

struct cma_api_resource;
struct cma_api_resources;
struct cma_restmapper;

/* Takes ownership of `resources` (freed with the mapper, also on failure). Caller owns the
 * result with one reference: cma_restmapper_unref(). */
enum cma_errc cma_restmapper_new(struct cma_api_resources *resources, struct cma_restmapper **ret,
                                 struct cma_err *reterr);
struct cma_restmapper *cma_restmapper_ref(struct cma_restmapper *m);
void cma_restmapper_unref(struct cma_restmapper *m);

/* ResourceFor with an empty version: `resource` may be the plural, the singular, a short name or
 * the kind, compared case-insensitively; `group` "" matches any group, the core group first, then
 * groups in discovery order (Kubernetes' priority mapper). NULL when unknown. Borrowed: valid
 * while the mapper is referenced. */
const struct cma_api_resource *cma_restmapper_resource_for(const struct cma_restmapper *m,
                                                           const char *group, const char *resource);

/* Parses "deployments.apps" / "pods" (schema.ParseGroupResource: split at the first '.') and
 * resolves it. */
const struct cma_api_resource *cma_restmapper_parse_for(const struct cma_restmapper *m,
                                                        const char *group_resource);

/* Writes "pods" or "deployments.apps" (GroupResource.String()) into out (size out_len). */
void cma_restmapper_group_resource(const struct cma_api_resource *r, char *out, size_t out_len);

/* "v1" for the core group, else "group/version". */
void cma_restmapper_api_version(const struct cma_api_resource *r, char *out, size_t out_len);

size_t cma_restmapper_count(const struct cma_restmapper *m);
/* The i-th resource in priority order (core group first), NULL past the end. */
const struct cma_api_resource *cma_restmapper_at(const struct cma_restmapper *m, size_t i);

#endif
