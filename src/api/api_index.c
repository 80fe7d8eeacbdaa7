/* api_index.c: discovery and informational endpoints: /, /version, /apis, /apis/{group},
 * /apis/{group}/{version} (the APIResourceList of the current catalog, encoded once per snapshot
 * and kept with it as its attachment (cma_catalog_attach); an empty list before the first
 * relist: discovery must always answer 2xx fast; metrics.k8s.io's document is static: nodes and
 * pods), /openapi (404: the
 * aggregator skips it cleanly). /metrics is api_metrics.c. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api_internal.h"
#include "cma/catalog.h"
#include "cma/encode.h"
#include "cma/restmapper.h"
#include "cma/router.h"
#include "cma/server.h"

#ifndef CMA_VERSION
#define CMA_VERSION "0.0.0"
#endif
#ifndef CMA_GIT_COMMIT
#define CMA_GIT_COMMIT ""
#endif

/* ---- the discovery documents of a catalog snapshot ---------------------------------------- */

enum { DOC_CUSTOM_V1BETA1, DOC_CUSTOM_V1BETA2, DOC_EXTERNAL_V1BETA1, N_DOCS };

struct discovery_docs {
    struct cma_catalog_attachment base; /* first: the snapshot frees it with itself */
    char *doc[N_DOCS];
    size_t len[N_DOCS];
};

static void docs_free(struct cma_catalog_attachment *a)
{
    struct discovery_docs *d = (struct discovery_docs *)a;
    for (int i = 0; i < N_DOCS; i++)
        free(d->doc[i]);
    free(d);
}

static int cmp_entry_names(const void *a, const void *b)
{
    const struct cma_resource_entry *x = a, *y = b;
    return strcmp(x->name, y->name);
}

/* Keeps one of each name in the sorted entries (the config and MetricRules of several namespaces
 * may serve one metric: it is listed once); returns the new count. */
static size_t drop_repeats(struct cma_resource_entry *entries, size_t n)
{
    size_t kept = 0;
    for (size_t i = 0; i < n; i++) {
        if (kept > 0 && strcmp(entries[kept - 1].name, entries[i].name) == 0) {
            free((char *)entries[i].name);
            continue;
        }
        entries[kept++] = entries[i];
    }
    return kept;
}

/* One APIResourceList of the snapshot's custom (external: false) or external entries, sorted by
 * name so the output is stable across relists (upstream's order is random). */
static enum cma_errc encode_doc(const struct cma_catalog *cat, bool external, const char *gv,
                                const char *kind, struct discovery_docs *d, int slot)
{
    static const char *const verbs[] = {"get"};
    size_t total = external ? cma_catalog_count_external(cat) : cma_catalog_count(cat);
    struct cma_resource_entry *entries = calloc(total + 1, sizeof(*entries));
    enum cma_errc rc = entries ? CMA_OK : CMA_ERR_NOMEM;
    size_t n = 0;
    for (size_t i = 0; rc == CMA_OK && i < total; i++) {
        const struct cma_catalog_entry *e =
            external ? cma_catalog_external_at(cat, i) : cma_catalog_entry_at(cat, i);
        char gr[512] = "";
        if (e->resource)
            cma_restmapper_group_resource(e->resource, gr, sizeof(gr));
        size_t len = strlen(gr) + strlen(e->metric) + 2;
        char *name = malloc(len);
        if (!name) {
            rc = CMA_ERR_NOMEM;
            break;
        }
        snprintf(name, len, "%s%s%s", gr, e->resource ? "/" : "", e->metric);
        entries[n++] = (struct cma_resource_entry){name, e->namespaced, kind, verbs, 1};
    }
    if (rc == CMA_OK) {
        qsort(entries, n, sizeof(*entries), cmp_entry_names);
        n = drop_repeats(entries, n);
        struct cma_buf out;
        cma_buf_init(&out, 0);
        rc = cma_encode_api_resource_list(gv, entries, n, &out, NULL);
        d->len[slot] = out.len;
        d->doc[slot] = cma_buf_take(&out);
        if (rc == CMA_OK && !d->doc[slot])
            rc = CMA_ERR_NOMEM;
    }
    for (size_t i = 0; i < n; i++)
        free((char *)entries[i].name);
    free(entries);
    return rc;
}

/* The snapshot's documents: encoded by the first request that needs them, then shared. NULL when
 * out of memory. */
static const struct discovery_docs *docs_of(struct cma_catalog *cat)
{
    struct cma_catalog_attachment *a = cma_catalog_attachment(cat);
    if (a)
        return (const struct discovery_docs *)a;
    struct discovery_docs *d = calloc(1, sizeof(*d));
    if (!d)
        return NULL;
    d->base.free = docs_free;
    enum cma_errc rc = encode_doc(cat, false, CMA_GROUP_CUSTOM "/v1beta1", "MetricValueList", d,
                                  DOC_CUSTOM_V1BETA1);
    if (rc == CMA_OK)
        rc = encode_doc(cat, false, CMA_GROUP_CUSTOM "/v1beta2", "MetricValueList", d,
                        DOC_CUSTOM_V1BETA2);
    if (rc == CMA_OK)
        rc = encode_doc(cat, true, CMA_GROUP_EXTERNAL "/v1beta1", "ExternalMetricValueList", d,
                        DOC_EXTERNAL_V1BETA1);
    if (rc != CMA_OK) {
        docs_free(&d->base);
        return NULL;
    }
    return (const struct discovery_docs *)cma_catalog_attach(cat, &d->base);
}

/* The document slot of group/version; -1 for a pair the catalog does not describe. */
static int doc_slot(const char *group, const char *version)
{
    if (strcmp(group, CMA_GROUP_CUSTOM) == 0)
        return strcmp(version, "v1beta1") == 0   ? DOC_CUSTOM_V1BETA1
               : strcmp(version, "v1beta2") == 0 ? DOC_CUSTOM_V1BETA2
                                                 : -1;
    if (strcmp(group, CMA_GROUP_EXTERNAL) == 0 && strcmp(version, "v1beta1") == 0)
        return DOC_EXTERNAL_V1BETA1;
    return -1;
}

static const char *const custom_versions[] = {"v1beta1", "v1beta2"};
static const char *const v1beta1_only[] = {"v1beta1"};

static size_t served_groups(const struct cma_app *app, struct cma_api_group_desc *out)
{
    size_t n = 0;
    if (app->serve_custom)
        out[n++] = (struct cma_api_group_desc){CMA_GROUP_CUSTOM, custom_versions, 2};
    if (app->serve_external)
        out[n++] = (struct cma_api_group_desc){CMA_GROUP_EXTERNAL, v1beta1_only, 1};
    if (app->serve_resource)
        out[n++] = (struct cma_api_group_desc){CMA_GROUP_RESOURCE, v1beta1_only, 1};
    return n;
}

static const struct cma_api_group_desc *find_group(const struct cma_api_group_desc *groups,
                                                   size_t n, const char *name)
{
    for (size_t i = 0; i < n; i++)
        if (strcmp(groups[i].name, name) == 0)
            return &groups[i];
    return NULL;
}

static void reply_encoded(struct cma_response *resp, enum cma_errc rc)
{
    if (rc != CMA_OK)
        cma_api_reply_errorf(resp, rc, "cannot encode the response");
}

/* metrics.k8s.io/v1beta1 is static (metrics-server's document): it does not depend on
 * discovery, so it answers even before the first catalog. */
static void resource_metrics_doc(struct cma_response *resp)
{
    static const char *const verbs[] = {"get", "list"};
    static const struct cma_resource_entry entries[] = {
        {"nodes", false, "NodeMetrics", verbs, 2},
        {"pods", true, "PodMetrics", verbs, 2},
    };
    reply_encoded(resp, cma_encode_api_resource_list(CMA_GROUP_RESOURCE "/v1beta1", entries, 2,
                                                     &resp->body, NULL));
}

static void group_version(struct cma_app *app, struct cma_catalog *cat,
                          const struct cma_route *route, struct cma_response *resp)
{
    struct cma_api_group_desc groups[3];
    size_t n = served_groups(app, groups);
    const struct cma_api_group_desc *g = find_group(groups, n, route->group);
    bool version_ok = false;
    for (size_t i = 0; g && i < g->n_versions; i++)
        version_ok |= strcmp(g->versions[i], route->version) == 0;
    if (!version_ok) {
        cma_api_reply_errorf(resp, CMA_ERR_NOT_FOUND,
                             "the server could not find the requested resource");
        return;
    }
    if (strcmp(route->group, CMA_GROUP_RESOURCE) == 0) {
        resource_metrics_doc(resp);
        return;
    }
    int slot = doc_slot(route->group, route->version);
    if (cat && slot >= 0) {
        const struct discovery_docs *d = docs_of(cat);
        reply_encoded(resp,
                      d ? cma_buf_append(&resp->body, d->doc[slot], d->len[slot]) : CMA_ERR_NOMEM);
        return;
    }
    char gv[128];
    snprintf(gv, sizeof(gv), "%s/%s", route->group, route->version);
    reply_encoded(resp, cma_encode_api_resource_list(gv, NULL, 0, &resp->body, NULL));
}

static void root_paths(struct cma_app *app, struct cma_response *resp)
{
    struct cma_api_group_desc groups[3];
    size_t n = served_groups(app, groups);
    enum cma_errc rc = cma_buf_appends(&resp->body, "{\"paths\":[\"/apis\"");
    for (size_t i = 0; rc == CMA_OK && i < n; i++) {
        rc = cma_buf_printf(&resp->body, ",\"/apis/%s\"", groups[i].name);
        for (size_t v = 0; rc == CMA_OK && v < groups[i].n_versions; v++)
            rc = cma_buf_printf(&resp->body, ",\"/apis/%s/%s\"", groups[i].name,
                                groups[i].versions[v]);
    }
    if (rc == CMA_OK)
        rc = cma_buf_appends(&resp->body, ",\"/healthz\",\"/livez\",\"/readyz\",\"/version\"]}\n");
    reply_encoded(resp, rc);
}

void cma_api_index(struct cma_app *app, struct cma_catalog *cat, const struct cma_route *route,
                   const struct cma_request *req, struct cma_response *resp)
{
    (void)req;
    struct cma_api_group_desc groups[3];
    size_t n = served_groups(app, groups);
    switch (route->kind) {
    case CMA_ROUTE_ROOT:
        root_paths(app, resp);
        break;
    case CMA_ROUTE_VERSION:
        reply_encoded(resp, cma_encode_version("v" CMA_VERSION, CMA_GIT_COMMIT, "", &resp->body));
        break;
    case CMA_ROUTE_APIS:
        reply_encoded(resp, cma_encode_api_group_list(groups, n, &resp->body, NULL));
        break;
    case CMA_ROUTE_API_GROUP: {
        const struct cma_api_group_desc *g = find_group(groups, n, route->group);
        if (g)
            reply_encoded(resp, cma_encode_api_group(g, &resp->body, NULL));
        else
            cma_api_reply_errorf(resp, CMA_ERR_NOT_FOUND,
                                 "the server could not find the requested resource");
        break;
    }
    case CMA_ROUTE_API_GROUP_VERSION:
        group_version(app, cat, route, resp);
        break;
    case CMA_ROUTE_OPENAPI:
        cma_api_reply_errorf(resp, CMA_ERR_NOT_FOUND,
                             "the server does not serve an OpenAPI document");
        break;
    default:
        cma_api_reply_errorf(resp, CMA_ERR_NOT_FOUND,
                             "the server could not find the requested resource");
        break;
    }
}
