/* app.c: the handler the server calls for every request: method check, route, content
 * negotiation, selector sizes, one catalog reference for the whole request, then the API recipe;
 * and the Status-reply helpers every recipe uses (the one place where an error becomes an HTTP
 * status and a Status body, from the same code). */
#include "cma/app.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "api_internal.h"
#include "cma/auth.h"
#include "cma/catalog.h"
#include "cma/encode.h"
#include "cma/log.h"
#include "cma/prom.h"
#include "cma/router.h"
#include "cma/server.h"

void cma_api_reply_error(struct cma_response *resp, const struct cma_err *err)
{
    struct cma_err internal;
    if (!err || err->code <= CMA_OK || err->code >= CMA_ERRC__COUNT) {
        cma_err_clear(&internal);
        cma_err_set(&internal, CMA_ERR_INTERNAL,
                    "internal error: a failure was reported without a cause%s%s",
                    err && err->msg[0] ? ": " : "", err ? err->msg : "");
        cma_log_warn("%s (a bug: please report it)", internal.msg);
        err = &internal;
    }
    resp->status = cma_errc_http_status(err->code);
    resp->content_type = "application/json";
    cma_buf_clear(&resp->body);
    if (cma_encode_status_from_err(err, &resp->body) != CMA_OK) {
        resp->status = 500;
        cma_buf_clear(&resp->body);
        cma_buf_appends(&resp->body, "{\"kind\":\"Status\",\"apiVersion\":\"v1\",\"metadata\":{},"
                                     "\"status\":\"Failure\",\"reason\":\"InternalError\","
                                     "\"code\":500}\n");
    }
}

void cma_api_fail(struct cma_response *resp, const struct cma_request *req, enum cma_errc rc,
                  struct cma_err *err)
{
    if (err->code == CMA_OK && rc != CMA_OK)
        cma_err_set(err, rc, "%s (no further detail)", cma_errc_meaning(rc));
    if (err->code == CMA_OK)
        cma_err_set(err, CMA_ERR_INTERNAL,
                    "internal error: a failure was reported without a cause (a bug)");
    int status = cma_errc_http_status(err->code);
    if (status >= 400 && status < 500 && status != 429)
        cma_log_v(2, "GET %s: %d %s", req->path, status, err->msg);
    else
        cma_log_warn("GET %s: %d %s", req->path, status, err->msg);
    cma_api_reply_error(resp, err);
}

const char *cma_api_view_value(const struct cma_label_view *views, size_t n, const char *name)
{
    size_t lo = 0, hi = n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        int c = strcmp(views[mid].name, name);
        if (c == 0)
            return views[mid].value;
        if (c < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return NULL;
}

void cma_api_reply_errorf(struct cma_response *resp, enum cma_errc code, const char *fmt, ...)
{
    struct cma_err err;
    cma_err_clear(&err);
    va_list ap;
    va_start(ap, fmt);
    cma_err_vset(&err, code, fmt, ap);
    va_end(ap);
    cma_api_reply_error(resp, &err);
}

/* True when the Accept header admits application/json (apiserver negotiation rules for a
 * JSON-only server: application/json without as=/g=/v= transforms, application/any and any/any). */
static bool accepts_json(const char *accept)
{
    if (!accept || !*accept)
        return true;
    const char *p = accept;
    while (*p) {
        const char *end = strchr(p, ',');
        size_t len = end ? (size_t)(end - p) : strlen(p);
        char item[256];
        if (len >= sizeof(item))
            len = sizeof(item) - 1;
        memcpy(item, p, len);
        item[len] = '\0';
        char *type = item;
        while (*type == ' ' || *type == '\t')
            type++;
        char *params = strchr(type, ';');
        if (params)
            *params++ = '\0';
        for (char *t = type + strlen(type); t > type && (t[-1] == ' ' || t[-1] == '\t'); t--)
            t[-1] = '\0';
        bool transform =
            params && (strstr(params, "as=") || strstr(params, "g=") || strstr(params, "v="));
        bool zero_q = params && strstr(params, "q=0") && !strstr(params, "q=0.");
        if (!transform && !zero_q &&
            (strcasecmp(type, "application/json") == 0 || strcasecmp(type, "application/*") == 0 ||
             strcmp(type, "*/*") == 0))
            return true;
        if (!end)
            break;
        p = end + 1;
    }
    return false;
}

static bool is_health(enum cma_route_kind k)
{
    return k == CMA_ROUTE_HEALTHZ || k == CMA_ROUTE_LIVEZ || k == CMA_ROUTE_READYZ;
}

static bool is_metrics(enum cma_route_kind k)
{
    return k == CMA_ROUTE_CUSTOM_OBJECT || k == CMA_ROUTE_CUSTOM_NAMESPACE_METRIC ||
           k == CMA_ROUTE_EXTERNAL_METRIC || k == CMA_ROUTE_RESOURCE_NODES ||
           k == CMA_ROUTE_RESOURCE_NODE || k == CMA_ROUTE_RESOURCE_PODS ||
           k == CMA_ROUTE_RESOURCE_POD;
}

/* Refuses (413) a selector too long for a kube-apiserver LIST URL or a backend query, before
 * either is called. false when the response was written. */
static bool selectors_fit(const struct cma_request *req, struct cma_response *resp)
{
    static const char *const params[] = {"labelSelector", "metricLabelSelector", "fieldSelector"};
    for (size_t i = 0; i < sizeof(params) / sizeof(params[0]); i++) {
        const char *text = cma_request_query(req, params[i]);
        size_t len = text ? strlen(text) : 0;
        if (len <= CMA_API_MAX_SELECTOR_BYTES)
            continue;
        cma_log_v(2, "GET %s: %s of %zu bytes refused", req->path, params[i], len);
        cma_api_reply_errorf(resp, CMA_ERR_TOO_LARGE,
                             "%s is %zu bytes, over the limit of %zu bytes for a selector",
                             params[i], len, CMA_API_MAX_SELECTOR_BYTES);
        return false;
    }
    return true;
}

/* Delegated authentication and authorization before anything else is looked at (kube's filter
 * order). false when the response was written (401, 403 or 500). */
static bool auth_gate(struct cma_app *app, const struct cma_request *req,
                      const struct cma_route *route, struct cma_response *resp)
{
    if (!app->auth)
        return true;
    struct cma_err err;
    cma_err_clear(&err);
    struct cma_user *user = NULL;
    enum cma_errc rc = cma_auth_authenticate(app->auth, req, &user, &err);
    if (rc != CMA_OK) {
        cma_log_v(2, "authentication of %s failed: %s", req->path, err.msg);
        if (rc == CMA_ERR_UNAUTHORIZED)
            cma_api_reply_errorf(resp, CMA_ERR_UNAUTHORIZED, "Unauthorized");
        else
            cma_api_reply_error(resp, &err);
        return false;
    }
    struct cma_authz_attrs at;
    cma_authz_attrs_from_route(req->path, route, &at);
    enum cma_authz_decision decision = CMA_AUTHZ_DENY;
    char *reason = NULL;
    rc = cma_auth_authorize(app->auth, user, &at, &decision, &reason, &err);
    bool pass = rc == CMA_OK && decision == CMA_AUTHZ_ALLOW;
    if (rc != CMA_OK) {
        cma_log_warn("authorization of %s failed: %s", req->path, err.msg);
        resp->status = 500;
        resp->content_type = "text/plain; charset=utf-8";
        cma_buf_clear(&resp->body);
        cma_buf_printf(&resp->body, "Internal Server Error: \"%s\": %s\n", req->path, err.msg);
    } else if (!pass) {
        cma_log_v(2, "forbidden: user %s, %s %s", user->name, at.verb, req->path);
        resp->status = 403;
        resp->content_type = "application/json";
        cma_buf_clear(&resp->body);
        if (cma_authz_forbidden_body(user, &at, reason, &resp->body) != CMA_OK)
            cma_api_reply_errorf(resp, CMA_ERR_FORBIDDEN, "forbidden");
    }
    free(reason);
    cma_user_free(user);
    return pass;
}

void cma_app_handle(void *opaque, const struct cma_request *req, struct cma_response *resp)
{
    struct cma_app *app = opaque;
    if (strcmp(req->method, "GET") != 0 && strcmp(req->method, "HEAD") != 0) {
        cma_api_reply_errorf(resp, CMA_ERR_METHOD_NOT_ALLOWED,
                             "the server does not allow this method on the requested resource");
        return;
    }
    struct cma_err err;
    cma_err_clear(&err);
    struct cma_route *route = NULL;
    if (cma_router_parse(req->path, &route, &err) != CMA_OK) {
        if (auth_gate(app, req, NULL, resp))
            cma_api_reply_error(resp, &err);
        return;
    }
    if (!auth_gate(app, req, route, resp)) {
        cma_route_free(route);
        return;
    }
    if (!is_health(route->kind) && !accepts_json(cma_request_header(req, "Accept"))) {
        cma_api_reply_errorf(resp, CMA_ERR_NOT_ACCEPTABLE,
                             "only the following media types are accepted: application/json");
        cma_route_free(route);
        return;
    }
    if (is_metrics(route->kind) && !selectors_fit(req, resp)) {
        cma_route_free(route);
        return;
    }
    struct cma_catalog *cat = cma_catalog_store_get(app->store);
    switch (route->kind) {
    case CMA_ROUTE_HEALTHZ:
    case CMA_ROUTE_LIVEZ:
    case CMA_ROUTE_READYZ:
        cma_api_health(app, cat, route, req, resp);
        break;
    case CMA_ROUTE_NOT_FOUND:
        cma_api_reply_errorf(resp, CMA_ERR_NOT_FOUND,
                             "the server could not find the requested resource");
        break;
    case CMA_ROUTE_BAD_PATH:
        cma_api_reply_errorf(resp, CMA_ERR_BAD_REQUEST, "invalid request path");
        break;
    case CMA_ROUTE_CUSTOM_OBJECT:
    case CMA_ROUTE_CUSTOM_NAMESPACE_METRIC:
        if (app->serve_custom)
            cma_api_custom(app, cat, route, req, resp);
        else
            cma_api_reply_errorf(resp, CMA_ERR_NOT_FOUND,
                                 "custom.metrics.k8s.io is not served: the config has no rules, "
                                 "or --disable-custom-metrics is set");
        break;
    case CMA_ROUTE_EXTERNAL_METRIC:
        if (app->serve_external)
            cma_api_external(app, cat, route, req, resp);
        else
            cma_api_reply_errorf(resp, CMA_ERR_NOT_FOUND,
                                 "external.metrics.k8s.io is not served: the config has no "
                                 "externalRules, or --disable-external-metrics is set");
        break;
    case CMA_ROUTE_RESOURCE_NODES:
    case CMA_ROUTE_RESOURCE_NODE:
    case CMA_ROUTE_RESOURCE_PODS:
    case CMA_ROUTE_RESOURCE_POD:
        if (app->serve_resource)
            cma_api_resource(app, cat, route, req, resp);
        else
            cma_api_reply_errorf(resp, CMA_ERR_NOT_FOUND,
                                 "metrics.k8s.io is not served: the config has no resourceRules, "
                                 "or --disable-resource-metrics is set");
        break;
    default:
        cma_api_index(app, cat, route, req, resp);
        break;
    }
    cma_catalog_unref(cat);
    cma_route_free(route);
}
