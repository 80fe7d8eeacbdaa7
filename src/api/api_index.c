/* api_index.c: discovery and informational endpoints: /, /version, /apis, /apis/{group},
 * /apis/{group}/{version} (the pre-encoded APIResourceList of the current catalog, or an empty
 * list before the first relist: discovery must always answer 2xx fast; metrics.k8s.io's
 * document is static: nodes and pods), /openapi (404: the
 * aggregator skips it cleanly). /metrics is api_metrics.c. */
#include <stdio.h>
#include <string.h>

#include "api_internal.h"
#include "cma/catalog.h"
#include "cma/encode.h"
#include "cma/router.h"
#include "cma/server.h"

#ifndef CMA_VERSION
#define CMA_VERSION "0.0.0"
#endif
#ifndef CMA_GIT_COMMIT
#define CMA_GIT_COMMIT ""
#endif

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
    size_t len = 0;
    const char *doc =
        cat ? cma_catalog_discovery_doc(cat, route->group, route->version, &len) : NULL;
    if (doc) {
        reply_encoded(resp, cma_buf_append(&resp->body, doc, len));
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
