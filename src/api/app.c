/* app.c: the handler the server calls for every request: method check, route, content
 * negotiation, selector sizes, one catalog reference for the whole request and the rules that
 * come with it (a config reload never changes them under a running request), then the API recipe;
 * the Status-reply helpers every recipe uses (the one place where an error becomes an HTTP
 * status and a Status body, from the same code); and the request-arena helpers (a request the
 * server did not make brings no arena: the handler then uses one of its own for the call). */
#include "cma/app.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "api_internal.h"
#include "api_metrics.h"
#include "explain_trace.h"
#include "cma/arena.h"
#include "cma/auth.h"
#include "cma/backend_metrics.h"
#include "cma/buf.h"
#include "cma/catalog.h"
#include "cma/clock.h"
#include "cma/discovery.h"
#include "cma/encode.h"
#include "cma/log.h"
#include "cma/ns_limit.h"
#include "cma/prom.h"
#include "cma/options.h"
#include "cma/router.h"
#include "cma/rule.h"
#include "cma/selector.h"
#include "cma/server.h"
#include "cma/str.h"

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

enum cma_errc cma_api_arena_error(const struct cma_arena *arena, struct cma_err *err)
{
    if (arena->rc == CMA_ERR_TOO_LARGE)
        return cma_err_set(err, CMA_ERR_INTERNAL,
                           "the request needs more than the %zu bytes of working memory a "
                           "request may use",
                           arena->max);
    return cma_err_set(err, CMA_ERR_NOMEM, "out of memory");
}

enum cma_errc cma_api_adopt(struct cma_arena *arena, void (*fn)(void *), void *ptr,
                            struct cma_err *err)
{
    if (cma_arena_defer(arena, fn, ptr) != CMA_OK)
        return cma_api_arena_error(arena, err);
    return CMA_OK;
}

void cma_api_free_selector(void *selector)
{
    cma_selector_free(selector);
}

void cma_api_free_result(void *result)
{
    cma_prom_result_free(result);
}

struct name_list {
    char **names;
    size_t n;
};

static void free_name_list(void *p)
{
    struct name_list *l = p;
    for (size_t i = 0; i < l->n; i++)
        free(l->names[i]);
    free(l->names);
}

enum cma_errc cma_api_adopt_names(struct cma_arena *arena, char **names, size_t n,
                                  struct cma_err *err)
{
    struct name_list *l = cma_arena_alloc(arena, sizeof(*l));
    if (l) {
        l->names = names;
        l->n = n;
        return cma_api_adopt(arena, free_name_list, l, err);
    }
    struct name_list now = {names, n};
    free_name_list(&now);
    return cma_api_arena_error(arena, err);
}

static void free_buf(void *p)
{
    cma_buf_done(p);
}

struct cma_buf *cma_api_buf(struct cma_arena *arena, size_t max_bytes, struct cma_err *err)
{
    struct cma_buf *b = cma_arena_alloc(arena, sizeof(*b));
    if (!b) {
        cma_api_arena_error(arena, err);
        return NULL;
    }
    cma_buf_init(b, max_bytes);
    return cma_api_adopt(arena, free_buf, b, err) == CMA_OK ? b : NULL;
}

const char *cma_api_keep_id(struct cma_arena *arena, const char *head, const char *const *items,
                            const char *const *seconds, size_t n)
{
    struct cma_err err;
    cma_err_clear(&err);
    struct cma_buf *b = cma_api_buf(arena, (size_t)1 << 20, &err);
    enum cma_errc rc = b ? cma_buf_appends(b, head) : CMA_ERR_NOMEM;
    for (size_t i = 0; rc == CMA_OK && i < n; i++) {
        rc = cma_buf_appendc(b, '\n');
        if (rc == CMA_OK)
            rc = cma_buf_appends(b, items[i] ? items[i] : "");
        if (rc == CMA_OK && seconds) {
            rc = cma_buf_appendc(b, '/');
            if (rc == CMA_OK)
                rc = cma_buf_appends(b, seconds[i] ? seconds[i] : "");
        }
    }
    return rc == CMA_OK ? cma_buf_str(b) : NULL;
}

enum cma_errc cma_api_query(struct cma_app *app, const struct cma_rule_backend *rb,
                            struct cma_explain *ex, const char *what, const char *promql,
                            int64_t time_ms, const struct cma_keep *keep,
                            struct cma_prom_result **ret, struct cma_err *err)
{
    bool own = rb && rb->queries;
    struct cma_backend_measured m;
    struct cma_backend timed;
    const struct cma_backend *b = &app->backend; /* timed for the request by cma_app_handle */
    if (own) {
        timed = cma_backend_measured(rb->queries, NULL, &m);
        b = cma_explain_backend(ex, &timed);
    }
    enum cma_errc rc = cma_backend_query(b, promql, time_ms, keep, ret, err);
    if (own && app->rule_backend_ns)
        *app->rule_backend_ns += cma_backend_measured_busy_ns(&m);
    if (rc != CMA_OK)
        cma_err_prefix(err, "unable to fetch %smetrics from %s%s: ", what,
                       own && rb->name ? "backend " : "prometheus",
                       own && rb->name ? rb->name : "");
    return rc;
}

enum cma_errc cma_api_query_rule(struct cma_app *app, const struct cma_rule *rule,
                                 struct cma_explain *ex, const char *promql, int64_t time_ms,
                                 const struct cma_keep *keep, struct cma_prom_result **ret,
                                 struct cma_err *err)
{
    const struct cma_rule_owner *o = rule->owner;
    if (!o)
        return cma_api_query(app, &rule->backend, ex, "", promql, time_ms, keep, ret, err);
    /* from here on a MetricRule's query: its tenant (if its backend derives one) goes with it */
    const char *backend = rule->backend.name ? rule->backend.name : "";
    if (app->mr_slots &&
        cma_ns_limit_try_acquire(app->mr_slots, backend, o->namespace_, err) != CMA_OK)
        return err->code;
    /* the request's deadline, no later than --metric-rules-max-query-timeout from now */
    struct cma_call call = keep && keep->call ? *keep->call : (struct cma_call){0};
    int64_t max_ms = app->opts ? app->opts->metric_rules_max_query_timeout_ms : 0;
    int64_t limit_ms = max_ms; /* the backend's own timeout applies below (backend_limit.c) */
    if (limit_ms > 0) {
        int64_t until = cma_clock_mono_ms() + limit_ms;
        if (!call.deadline_ms || until < call.deadline_ms) {
            call.deadline_ms = until;
            call.window_ms = limit_ms;
        }
    }
    struct cma_keep narrowed = keep ? *keep : (struct cma_keep){0};
    narrowed.call = &call;
    narrowed.tenant = rule->backend.tenant;
    enum cma_errc rc =
        cma_api_query(app, &rule->backend, ex, "", promql, time_ms, &narrowed, ret, err);
    if (app->mr_slots)
        cma_ns_limit_release(app->mr_slots, backend, o->namespace_);
    return rc;
}

bool cma_api_pending_backend(const struct cma_app *app, const struct cma_catalog *cat,
                             bool external, struct cma_discovery_pending *ret)
{
    const struct cma_ruleset *rs =
        cat && cma_catalog_rules(cat) ? cma_catalog_rules(cat) : app->rules;
    if (!rs || !app->discovery)
        return false;
    const struct cma_rule *rules = external ? rs->external_rules : rs->rules;
    size_t n = external ? rs->n_external_rules : rs->n_rules;
    for (size_t i = 0; i < n; i++) {
        if (!rules[i].series_query[0]) /* lists nothing */
            continue;
        if (cma_discovery_backend_pending(app->discovery, rules[i].backend.index, ret))
            return true;
    }
    return false;
}

enum cma_errc cma_api_pending_error(const struct cma_discovery_pending *p, const char *metric,
                                    const char *where, struct cma_err *err)
{
    char since[21];
    cma_clock_format_rfc3339(p->since_wall_ms, since);
    return cma_err_set(err, CMA_ERR_BACKEND_UNAVAILABLE,
                       "backend %s has not listed its series yet (trying since %s), so the metric "
                       "%s for %s may be one of its: retry once it answers%s%s",
                       p->name, since, metric, where, p->last_error[0] ? "; last error: " : "",
                       p->last_error);
}

void cma_api_reply_no_catalog(const struct cma_app *app, struct cma_response *resp)
{
    struct cma_discovery_status st = {0};
    struct cma_discovery_pending p;
    char since[21];
    if (app->discovery)
        cma_discovery_get_status(app->discovery, &st);
    if (st.last_error[0] && (cma_api_pending_backend(app, NULL, false, &p) ||
                             cma_api_pending_backend(app, NULL, true, &p)))
        cma_api_reply_errorf(resp, CMA_ERR_BACKEND_UNAVAILABLE,
                             "metric discovery has not succeeded yet: backend %s has not listed "
                             "its series yet (trying since %s); last error: %s",
                             p.name, cma_clock_format_rfc3339(p.since_wall_ms, since),
                             p.last_error[0] ? p.last_error : st.last_error);
    else if (st.last_error[0])
        cma_api_reply_errorf(resp, CMA_ERR_BACKEND_UNAVAILABLE,
                             "metric discovery has not succeeded yet: %s", st.last_error);
    else
        cma_api_reply_errorf(resp, CMA_ERR_BACKEND_UNAVAILABLE,
                             "metric discovery has not completed yet; try again shortly");
}

void *cma_api_array(struct cma_arena *arena, size_t n, size_t size, struct cma_err *err)
{
    void *p = cma_arena_array(arena, n, size);
    if (!p)
        cma_api_arena_error(arena, err);
    return p;
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

/* What the gate decided: go on, the response was written, or (memory only) a webhook call is
 * needed: nothing was written, counted or logged. */
enum gate { GATE_PASS, GATE_ANSWERED, GATE_WOULD_BLOCK };

/* The authorization half of auth_gate; *user is the authenticated user. */
static enum gate authorize_gate(struct cma_app *app, const struct cma_request *req,
                                const struct cma_route *route, const struct cma_user *user,
                                enum cma_auth_wait wait, struct cma_response *resp)
{
    struct cma_err err;
    cma_err_clear(&err);
    struct cma_authz_attrs at;
    cma_authz_attrs_from_route(req->path, route, &at);
    enum cma_authz_decision decision = CMA_AUTHZ_DENY;
    char *reason = NULL;
    enum cma_errc rc =
        cma_auth_authorize_wait(app->auth, user, &at, wait, &decision, &reason, &err);
    if (rc == CMA_ERR_WOULD_BLOCK)
        return GATE_WOULD_BLOCK;
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
    return pass ? GATE_PASS : GATE_ANSWERED;
}

/* Delegated authentication and authorization before anything else is looked at (kube's filter
 * order): 401, 403 or 500 are written here. With CMA_AUTH_MEMORY_ONLY, a credential or decision
 * that needs a webhook call is GATE_WOULD_BLOCK, and the authentication is not counted either
 * (the worker that runs the request again counts it). */
static enum gate auth_gate(struct cma_app *app, const struct cma_request *req,
                           const struct cma_route *route, enum cma_auth_wait wait,
                           struct cma_response *resp, struct cma_api_request_info *info)
{
    if (!app->auth)
        return GATE_PASS;
    struct cma_err err;
    cma_err_clear(&err);
    struct cma_user *user = NULL;
    struct cma_authn_tally tally;
    enum cma_errc rc = cma_auth_authenticate_wait(app->auth, req, wait, &tally, &user, &err);
    if (rc == CMA_ERR_WOULD_BLOCK)
        return GATE_WOULD_BLOCK;
    if (rc != CMA_OK) {
        cma_auth_count_authn(app->auth, &tally);
        cma_log_v(2, "authentication of %s failed: %s", req->path, err.msg);
        if (rc == CMA_ERR_UNAUTHORIZED)
            cma_api_reply_errorf(resp, CMA_ERR_UNAUTHORIZED, "Unauthorized");
        else
            cma_api_reply_error(resp, &err);
        return GATE_ANSWERED;
    }
    enum gate g = authorize_gate(app, req, route, user, wait, resp);
    if (g != GATE_WOULD_BLOCK) {
        cma_auth_count_authn(app->auth, &tally);
        cma_str_concat(info->user, sizeof info->user, (const char *const[]){user->name}, 1);
    }
    cma_user_free(user);
    return g;
}

void cma_app_set_rules(struct cma_app *app, const struct cma_ruleset *rules)
{
    const struct cma_options *o = app->opts;
    app->rules = rules;
    bool mr = o && o->enable_metric_rules; /* MetricRules may add either kind at any time */
    app->serve_custom = (rules->n_rules > 0 || mr) && !(o && o->disable_custom_metrics);
    app->serve_external =
        (rules->n_external_rules > 0 || mr) && !(o && o->disable_external_metrics);
    app->serve_resource = rules->has_resource_rules && !(o && o->disable_resource_metrics);
}

/* The request's rules, on its own copy of the app: its catalog's (the entries point into them),
 * else discovery's current ones (before the first catalog). Returns the reference taken for the
 * request, NULL when none was (the catalog's reference keeps its rules alive). */
static const struct cma_ruleset *request_rules(struct cma_app *app, const struct cma_catalog *cat)
{
    const struct cma_ruleset *rules = cat ? cma_catalog_rules(cat) : NULL, *held = NULL;
    if (!rules && app->discovery)
        rules = held = cma_discovery_rules(app->discovery);
    if (rules && rules != app->rules)
        cma_app_set_rules(app, rules);
    return held;
}

static void free_route(void *route)
{
    cma_route_free(route);
}

static void dispatch(struct cma_app *app, struct cma_catalog *cat, const struct cma_route *route,
                     const struct cma_request *req, struct cma_arena *arena,
                     struct cma_response *resp);

/* Routes whose recipe reads memory only (api_index.c, api_health.c, fixed 404/400 Status
 * replies): the ones the event thread may answer (cma_app_try_inline). */
static bool from_memory(enum cma_route_kind k)
{
    switch (k) {
    case CMA_ROUTE_NOT_FOUND:
    case CMA_ROUTE_BAD_PATH:
    case CMA_ROUTE_ROOT:
    case CMA_ROUTE_HEALTHZ:
    case CMA_ROUTE_LIVEZ:
    case CMA_ROUTE_READYZ:
    case CMA_ROUTE_VERSION:
    case CMA_ROUTE_OPENAPI:
    case CMA_ROUTE_APIS:
    case CMA_ROUTE_API_GROUP:
    case CMA_ROUTE_API_GROUP_VERSION:
        return true;
    default:
        return false;
    }
}

/* The route's recipe after the gates: media type, selector sizes, the catalog and its rules. */
static void handle_route(struct cma_app *app, const struct cma_request *req,
                         const struct cma_route *route, struct cma_arena *arena,
                         struct cma_response *resp)
{
    if (!is_health(route->kind) && route->kind != CMA_ROUTE_METRICS &&
        route->kind != CMA_ROUTE_DEBUG_EXPLAIN &&
        !accepts_json(cma_request_header(req, "Accept"))) {
        cma_api_reply_errorf(resp, CMA_ERR_NOT_ACCEPTABLE,
                             "only the following media types are accepted: application/json");
        return;
    }
    if (is_metrics(route->kind) && !selectors_fit(req, resp))
        return;
    if (is_metrics(route->kind) && cma_api_explain_param(app, req, resp))
        return; /* explain=true: the report of this request (explain.c) */
    struct cma_catalog *cat = cma_catalog_store_get(app->store);
    const struct cma_ruleset *held = request_rules(app, cat);
    dispatch(app, cat, route, req, arena, resp);
    cma_catalog_unref(cat);
    cma_ruleset_unref(held);
}

/* The request with its arena: method, route, the gates, then the recipe. false (nothing
 * written, counted or logged) when wait is CMA_AUTH_MEMORY_ONLY and the answer needs more than
 * memory: a route whose recipe may block, or a webhook call of the gate. */
static bool handle(struct cma_app *app, const struct cma_request *req, struct cma_arena *arena,
                   enum cma_auth_wait wait, struct cma_response *resp,
                   struct cma_api_request_info *info)
{
    if (strcmp(req->method, "GET") != 0 && strcmp(req->method, "HEAD") != 0) {
        cma_api_reply_errorf(resp, CMA_ERR_METHOD_NOT_ALLOWED,
                             "the server does not allow this method on the requested resource");
        return true;
    }
    struct cma_err err;
    cma_err_clear(&err);
    struct cma_route *route = NULL;
    if (cma_router_parse(req->path, &route, &err) != CMA_OK) {
        enum gate g = auth_gate(app, req, NULL, wait, resp, info);
        if (g == GATE_PASS)
            cma_api_reply_error(resp, &err);
        return g != GATE_WOULD_BLOCK;
    }
    if (wait == CMA_AUTH_MEMORY_ONLY && !from_memory(route->kind)) {
        cma_route_free(route);
        return false;
    }
    if (cma_api_adopt(arena, free_route, route, &err) != CMA_OK) {
        cma_api_fail(resp, req, err.code, &err);
        return true;
    }
    info->route = route; /* in the arena until the request ends */
    enum gate g = auth_gate(app, req, route, wait, resp, info);
    if (g == GATE_PASS)
        handle_route(app, req, route, arena, resp);
    return g != GATE_WOULD_BLOCK;
}

/* The request with the app's backend timed for it alone (the log line's backend time), then
 * its metrics and log line. The route stays in the arena until the bookkeeping is done. false
 * when handle() gave way (memory only): no metrics, no log line, `resp` untouched. */
static bool serve(struct cma_app *app, const struct cma_request *req, enum cma_auth_wait wait,
                  struct cma_response *resp)
{
    struct cma_app timed = *app;
    struct cma_api_request_info info;
    cma_api_request_begin(&info);
    struct cma_backend_measured backend_time;
    timed.backend = cma_backend_measured(&app->backend, NULL, &backend_time);
    uint64_t rule_backend_ns = 0; /* the time in rules' own backends (cma_api_query) */
    timed.rule_backend_ns = &rule_backend_ns;
    timed.call = req->call; /* every backend query of the request works to its deadline */
    struct cma_arena own, *arena = cma_request_arena(req);
    if (!arena) { /* a request built by hand (unit tests) */
        cma_arena_init(&own, CMA_REQUEST_ARENA_MAX_BYTES);
        arena = &own;
    }
    bool answered = handle(&timed, req, arena, wait, resp, &info);
    if (answered) {
        info.backend_measured = app->backend.ops != NULL;
        info.backend_ns = cma_backend_measured_busy_ns(&backend_time) + rule_backend_ns;
        cma_api_request_end(app, req, resp, &info);
    }
    if (arena == &own)
        cma_arena_done(&own);
    return answered;
}

void cma_app_handle(void *opaque, const struct cma_request *req, struct cma_response *resp)
{
    serve(opaque, req, CMA_AUTH_MAY_BLOCK, resp);
}

bool cma_app_try_inline(void *opaque, const struct cma_request *req, struct cma_response *resp)
{
    return serve(opaque, req, CMA_AUTH_MEMORY_ONLY, resp);
}

/* The API recipe for the route. */
static void dispatch(struct cma_app *app, struct cma_catalog *cat, const struct cma_route *route,
                     const struct cma_request *req, struct cma_arena *arena,
                     struct cma_response *resp)
{
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
            cma_api_custom(app, cat, route, req, arena, resp);
        else
            cma_api_reply_errorf(resp, CMA_ERR_NOT_FOUND,
                                 "custom.metrics.k8s.io is not served: the config has no rules, "
                                 "or --disable-custom-metrics is set");
        break;
    case CMA_ROUTE_EXTERNAL_METRIC:
        if (app->serve_external)
            cma_api_external(app, cat, route, req, arena, resp);
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
            cma_api_resource(app, cat, route, req, arena, resp);
        else
            cma_api_reply_errorf(resp, CMA_ERR_NOT_FOUND,
                                 "metrics.k8s.io is not served: the config has no resourceRules, "
                                 "or --disable-resource-metrics is set");
        break;
    case CMA_ROUTE_METRICS:
        cma_api_metrics(app, resp);
        break;
    case CMA_ROUTE_DEBUG_EXPLAIN: /* off by default, as kube-apiserver's debug handlers */
        if (app->opts && app->opts->enable_explain)
            cma_api_explain(app, req, resp);
        else
            cma_api_reply_errorf(resp, CMA_ERR_NOT_FOUND,
                                 "the server could not find the requested resource");
        break;
    default:
        cma_api_index(app, cat, route, req, resp);
        break;
    }
}
