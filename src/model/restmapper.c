/* restmapper.c: resolves resource names the way Kubernetes' discovery RESTMapper does, over the
 * resource list that kube.c discovered. Immutable after construction; atomic refcount.
 *
 * DESIGN: lookups scan the list (a few hundred entries in a real cluster) in priority order:
 * the core group first, then the other groups in discovery order. Plural names are tried over the
 * whole list before singular names, short names and kinds, so "pods" never loses to a kind or
 * short name of another group. */
#include "cma/restmapper.h"

#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "cma/apiresource.h"
#include "cma/str.h"

struct cma_restmapper {
    atomic_int refs;
    struct cma_api_resources *resources;
    size_t *order; /* indexes into resources->items: core group first */
};

enum cma_errc cma_restmapper_new(struct cma_api_resources *resources, struct cma_restmapper **ret,
                                 struct cma_err *reterr)
{
    struct cma_restmapper *m = calloc(1, sizeof(*m));
    size_t n = resources ? resources->n : 0;
    size_t *order = malloc((n ? n : 1) * sizeof(*order));
    if (!m || !order) {
        free(m);
        free(order);
        cma_api_resources_free(resources);
        return cma_err_set(reterr, CMA_ERR_NOMEM, "out of memory");
    }
    size_t k = 0;
    for (size_t i = 0; i < n; i++)
        if (resources->items[i].group[0] == '\0')
            order[k++] = i;
    for (size_t i = 0; i < n; i++)
        if (resources->items[i].group[0] != '\0')
            order[k++] = i;
    atomic_init(&m->refs, 1);
    m->resources = resources;
    m->order = order;
    *ret = m;
    return CMA_OK;
}

struct cma_restmapper *cma_restmapper_ref(struct cma_restmapper *m)
{
    if (m)
        atomic_fetch_add(&m->refs, 1);
    return m;
}

void cma_restmapper_unref(struct cma_restmapper *m)
{
    if (!m || atomic_fetch_sub(&m->refs, 1) != 1)
        return;
    cma_api_resources_free(m->resources);
    free(m->order);
    free(m);
}

size_t cma_restmapper_count(const struct cma_restmapper *m)
{
    return m && m->resources ? m->resources->n : 0;
}

const struct cma_api_resource *cma_restmapper_at(const struct cma_restmapper *m, size_t i)
{
    if (!m || !m->resources || i >= m->resources->n)
        return NULL;
    return &m->resources->items[m->order[i]];
}

enum match_kind { MATCH_PLURAL, MATCH_SINGULAR, MATCH_SHORT, MATCH_KIND, MATCH__COUNT };

static bool matches(const struct cma_api_resource *r, enum match_kind kind, const char *name)
{
    switch (kind) {
    case MATCH_PLURAL:
        return strcasecmp(r->resource, name) == 0;
    case MATCH_SINGULAR:
        return r->singular && strcasecmp(r->singular, name) == 0;
    case MATCH_SHORT:
        for (size_t i = 0; i < r->n_short_names; i++)
            if (strcasecmp(r->short_names[i], name) == 0)
                return true;
        return false;
    case MATCH_KIND:
        return r->kind && strcasecmp(r->kind, name) == 0;
    default:
        return false;
    }
}

const struct cma_api_resource *cma_restmapper_resource_for(const struct cma_restmapper *m,
                                                           const char *group, const char *resource)
{
    if (!m || !m->resources || !resource || !resource[0])
        return NULL;
    for (int kind = 0; kind < MATCH__COUNT; kind++) {
        for (size_t k = 0; k < m->resources->n; k++) {
            const struct cma_api_resource *r = &m->resources->items[m->order[k]];
            if (group && group[0] && strcasecmp(r->group, group) != 0)
                continue;
            if (matches(r, (enum match_kind)kind, resource))
                return r;
        }
    }
    return NULL;
}

const struct cma_api_resource *cma_restmapper_parse_for(const struct cma_restmapper *m,
                                                        const char *group_resource)
{
    const char *dot = strchr(group_resource, '.');
    if (!dot)
        return cma_restmapper_resource_for(m, "", group_resource);
    char resource[256];
    size_t len = (size_t)(dot - group_resource);
    if (len == 0 || len >= sizeof(resource))
        return NULL;
    memcpy(resource, group_resource, len);
    resource[len] = '\0';
    return cma_restmapper_resource_for(m, dot + 1, resource);
}

void cma_restmapper_group_resource(const struct cma_api_resource *r, char *out, size_t out_len)
{
    cma_str_concat(out, out_len,
                   (const char *const[]){r->resource, r->group[0] ? "." : "", r->group}, 3);
}

void cma_restmapper_api_version(const struct cma_api_resource *r, char *out, size_t out_len)
{
    cma_str_concat(out, out_len,
                   (const char *const[]){r->group, r->group[0] ? "/" : "", r->version}, 3);
}
