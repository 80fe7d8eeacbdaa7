/* authz.c: delegated authorization (reference §7.2): system:masters and the always-allow paths
 * skip it; everything else is a SubjectAccessReview with the attributes kube's RequestInfo gives
 * the path, its answer cached (allowed and denied each with their TTL, keyed by every field the
 * review carries: cma_authz_sar_key). Also the 403 Status body kube writes for a denial. */
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "auth_internal.h"
#include "cma/clock.h"
#include "cma/kube.h"
#include "cma/router.h"
#include "cma/str.h"

#define SAR_PATH "/apis/authorization.k8s.io/v1/subjectaccessreviews"
#define SAR_CACHE_MAX_KEY 8192

void cma_authz_attrs_from_route(const char *path, const struct cma_route *r,
                                struct cma_authz_attrs *at)
{
    *at = (struct cma_authz_attrs){.verb = "get", .path = path};
    if (!r)
        return;
    switch (r->kind) {
    case CMA_ROUTE_CUSTOM_OBJECT:
        at->resource_request = true;
        at->namespace_ = r->namespace_;
        at->resource = r->resource;
        at->name = r->name;
        at->subresource = r->metric;
        break;
    case CMA_ROUTE_CUSTOM_NAMESPACE_METRIC:
        at->resource_request = true;
        at->namespace_ = r->namespace_ ? r->namespace_ : r->name;
        at->resource = "metrics";
        at->name = r->metric;
        break;
    case CMA_ROUTE_EXTERNAL_METRIC:
        at->resource_request = true;
        at->verb = "list";
        at->namespace_ = r->namespace_;
        at->resource = r->metric;
        break;
    case CMA_ROUTE_RESOURCE_NODES:
    case CMA_ROUTE_RESOURCE_PODS:
        at->resource_request = true;
        at->verb = "list";
        at->namespace_ = r->namespace_;
        at->resource = r->kind == CMA_ROUTE_RESOURCE_NODES ? "nodes" : "pods";
        break;
    case CMA_ROUTE_RESOURCE_NODE:
    case CMA_ROUTE_RESOURCE_POD:
        at->resource_request = true;
        at->namespace_ = r->namespace_;
        at->resource = r->kind == CMA_ROUTE_RESOURCE_NODE ? "nodes" : "pods";
        at->name = r->name;
        break;
    default:
        return;
    }
    at->group = r->group;
    at->version = r->version;
}

static int set_str(json_t *obj, const char *key, const char *v)
{
    return v && *v ? json_object_set_new(obj, key, json_string(v)) : 0;
}

static json_t *sar_spec(const struct cma_user *u, const struct cma_authz_attrs *at)
{
    json_t *spec = json_object(), *attrs = json_object(), *groups = json_array();
    int bad = !spec || !attrs || !groups;
    if (!bad && at->resource_request) {
        bad |= set_str(attrs, "namespace", at->namespace_);
        bad |= set_str(attrs, "verb", at->verb);
        bad |= set_str(attrs, "group", at->group);
        bad |= set_str(attrs, "version", at->version);
        bad |= set_str(attrs, "resource", at->resource);
        bad |= set_str(attrs, "subresource", at->subresource);
        bad |= set_str(attrs, "name", at->name);
        bad |= json_object_set(spec, "resourceAttributes", attrs);
    } else if (!bad) {
        bad |= set_str(attrs, "path", at->path);
        bad |= set_str(attrs, "verb", at->verb);
        bad |= json_object_set(spec, "nonResourceAttributes", attrs);
    }
    json_decref(attrs);
    if (!bad)
        bad |= set_str(spec, "user", u->name);
    for (size_t i = 0; !bad && i < u->n_groups; i++)
        bad |= json_array_append_new(groups, json_string(u->groups[i]));
    if (!bad && u->n_groups)
        bad |= json_object_set(spec, "groups", groups);
    json_decref(groups);
    if (!bad && u->n_extra) {
        json_t *extra = json_object();
        bad |= !extra;
        for (size_t i = 0; !bad && i < u->n_extra; i++) {
            json_t *vals = json_array();
            for (size_t j = 0; vals && j < u->extra[i].n_values; j++)
                bad |= json_array_append_new(vals, json_string(u->extra[i].values[j]));
            bad |= !vals || json_object_set_new(extra, u->extra[i].key, vals);
        }
        bad |= json_object_set_new(spec, "extra", extra);
    }
    if (!bad)
        bad |= set_str(spec, "uid", u->uid);
    if (bad) {
        json_decref(spec);
        return NULL;
    }
    return spec;
}

/* One field of a cache key: its length, ':', the bytes ("-" for NULL), so no two field lists
 * make the same key. Built on every request: no printf (it was 30 vsnprintf calls a request). */
static enum cma_errc key_str(struct cma_buf *k, const char *v)
{
    if (!v)
        return cma_buf_appendc(k, '-');
    size_t n = strlen(v);
    enum cma_errc rc = cma_buf_append_u64(k, n);
    if (rc == CMA_OK)
        rc = cma_buf_appendc(k, ':');
    return rc == CMA_OK ? cma_buf_append(k, v, n) : rc;
}

/* A count in the key: the tag letter, then the number in decimal. */
static enum cma_errc key_count(struct cma_buf *k, char tag, size_t n)
{
    enum cma_errc rc = cma_buf_appendc(k, tag);
    return rc == CMA_OK ? cma_buf_append_u64(k, n) : rc;
}

/* The SubjectAccessReview cache key of (u, at): every field the review's body carries, length
 * prefixed. Built on every request instead of the body itself, which is encoded (jansson) only
 * when the cache has no answer. */
enum cma_errc cma_authz_sar_key(const struct cma_user *u, const struct cma_authz_attrs *at,
                                struct cma_buf *k)
{
    const char *fields[] = {at->resource_request ? "R" : "N",
                            at->verb,
                            at->path,
                            at->namespace_,
                            at->group,
                            at->version,
                            at->resource,
                            at->subresource,
                            at->name,
                            u->name,
                            u->uid};
    enum cma_errc rc = CMA_OK;
    for (size_t i = 0; rc == CMA_OK && i < sizeof fields / sizeof fields[0]; i++)
        rc = key_str(k, fields[i]);
    if (rc == CMA_OK)
        rc = key_count(k, 'g', u->n_groups);
    for (size_t i = 0; rc == CMA_OK && i < u->n_groups; i++)
        rc = key_str(k, u->groups[i]);
    if (rc == CMA_OK)
        rc = key_count(k, 'e', u->n_extra);
    for (size_t i = 0; rc == CMA_OK && i < u->n_extra; i++) {
        rc = key_str(k, u->extra[i].key);
        if (rc == CMA_OK)
            rc = key_count(k, 'v', u->extra[i].n_values);
        for (size_t j = 0; rc == CMA_OK && j < u->extra[i].n_values; j++)
            rc = key_str(k, u->extra[i].values[j]);
    }
    return rc;
}

enum cma_errc cma_authz_sar_body(const struct cma_user *u, const struct cma_authz_attrs *at,
                                 struct cma_buf *out)
{
    json_t *spec = sar_spec(u, at);
    json_t *sar = spec ? json_pack("{s:s,s:s,s:{s:n},s:o,s:{s:b}}", "kind", "SubjectAccessReview",
                                   "apiVersion", "authorization.k8s.io/v1", "metadata",
                                   "creationTimestamp", "spec", spec, "status", "allowed", 0)
                       : NULL;
    char *text = sar ? json_dumps(sar, JSON_COMPACT | JSON_PRESERVE_ORDER) : NULL;
    json_decref(sar);
    enum cma_errc rc = text ? cma_buf_appends(out, text) : CMA_ERR_NOMEM;
    free(text);
    return rc;
}

enum cma_errc cma_authz_forbidden_body(const struct cma_user *u, const struct cma_authz_attrs *at,
                                       const char *reason, struct cma_buf *out)
{
    struct cma_buf msg;
    cma_buf_init(&msg, 0);
    enum cma_errc rc;
    json_t *details = NULL;
    if (at->resource_request) {
        const char *name = at->name ? at->name : "";
        rc = cma_buf_printf(&msg,
                            "%s.%s%s%s%s is forbidden: User \"%s\" cannot %s resource \"%s%s%s\" "
                            "in API group \"%s\" ",
                            at->resource ? at->resource : "", at->group ? at->group : "",
                            *name ? " \"" : "", name, *name ? "\"" : "", u->name, at->verb,
                            at->resource ? at->resource : "", at->subresource ? "/" : "",
                            at->subresource ? at->subresource : "", at->group ? at->group : "");
        if (rc == CMA_OK && at->namespace_ && *at->namespace_)
            rc = cma_buf_printf(&msg, "in the namespace \"%s\"", at->namespace_);
        else if (rc == CMA_OK)
            rc = cma_buf_appends(&msg, "at the cluster scope");
        details = json_pack("{s:s,s:s,s:s}", "name", name, "group", at->group ? at->group : "",
                            "kind", at->resource ? at->resource : "");
        if (details && !*name)
            json_object_del(details, "name");
    } else {
        rc = cma_buf_printf(&msg, "forbidden: User \"%s\" cannot %s path \"%s\"", u->name, at->verb,
                            at->path ? at->path : "");
    }
    if (rc == CMA_OK && reason && *reason)
        rc = cma_buf_printf(&msg, ": %s", reason);
    json_t *st = rc == CMA_OK ? json_pack("{s:s,s:s,s:{},s:s,s:s,s:s}", "kind", "Status",
                                          "apiVersion", "v1", "metadata", "status", "Failure",
                                          "message", cma_buf_str(&msg), "reason", "Forbidden")
                              : NULL;
    cma_buf_done(&msg);
    if (st && details)
        json_object_set(st, "details", details);
    json_decref(details);
    if (st)
        json_object_set_new(st, "code", json_integer(403));
    char *text = st ? json_dumps(st, JSON_COMPACT | JSON_PRESERVE_ORDER) : NULL;
    json_decref(st);
    rc = text ? cma_buf_printf(out, "%s\n", text) : CMA_ERR_NOMEM;
    free(text);
    return rc;
}

static bool path_always_allowed(const struct cma_auth *a, const char *path)
{
    for (size_t i = 0; path && i < a->opts.n_always_allow_paths; i++) {
        const char *p = a->opts.always_allow_paths[i];
        size_t n = strlen(p);
        if (n > 0 && p[n - 1] == '*' ? strncmp(path, p, n - 1) == 0 : strcmp(path, p) == 0)
            return true;
    }
    return false;
}

/* Sends the SubjectAccessReview `body`: *ret gets its answer ("A" or "D" + reason, caller
 * frees), cached when cacheable. */
/* Sends the review of (u, at) and caches its answer under key (NULL: not cached). */
static enum cma_errc sar_call(struct cma_auth *a, const struct cma_user *u,
                              const struct cma_authz_attrs *at, const char *key, char **ret,
                              struct cma_err *reterr)
{
    struct cma_buf body, resp;
    cma_buf_init(&body, 0);
    if (cma_authz_sar_body(u, at, &body) != CMA_OK) {
        cma_buf_done(&body);
        return cma_err_set(reterr, CMA_ERR_NOMEM, "out of memory");
    }
    long status = 0;
    enum cma_errc rc = cma_kube_request(a->opts.authz_kube, "POST", SAR_PATH, body.ptr, body.len,
                                        &resp, &status, reterr);
    cma_buf_done(&body);
    if (rc != CMA_OK)
        return rc;
    json_t *root = status >= 200 && status < 300
                       ? json_loadb(resp.ptr ? resp.ptr : "", resp.len, 0, NULL)
                       : NULL;
    cma_buf_done(&resp);
    json_t *st = json_object_get(root, "status");
    if (!json_is_object(st)) {
        json_decref(root);
        return cma_err_set(reterr, CMA_ERR_KUBE_ERROR, "SubjectAccessReview failed: HTTP %ld",
                           status);
    }
    bool allowed = json_is_true(json_object_get(st, "allowed")) &&
                   !json_is_true(json_object_get(st, "denied"));
    const char *reason = json_string_value(json_object_get(st, "reason"));
    struct cma_buf val;
    cma_buf_init(&val, 0);
    char *answer = NULL;
    if (cma_buf_printf(&val, "%c%s", allowed ? 'A' : 'D', reason ? reason : "") == CMA_OK)
        answer = cma_strdup(cma_buf_str(&val));
    cma_buf_done(&val);
    json_decref(root);
    if (!answer)
        return cma_err_set(reterr, CMA_ERR_NOMEM, "out of memory");
    if (key)
        cma_auth_cache_put(&a->sar_cache, key, answer,
                           cma_clock_mono_ms() +
                               (allowed ? a->opts.authorized_ttl_ms : a->opts.unauthorized_ttl_ms));
    *ret = answer;
    return CMA_OK;
}

/* cma_auth_authorize without the metrics; *ret_source says what decided. */
static enum cma_errc authorize(struct cma_auth *a, const struct cma_user *u,
                               const struct cma_authz_attrs *at, enum cma_auth_wait wait,
                               enum cma_authz_decision *ret, char **ret_reason,
                               const char **ret_source, struct cma_err *reterr)
{
    if (ret_reason)
        *ret_reason = NULL;
    for (size_t i = 0; i < u->n_groups; i++) {
        if (strcmp(u->groups[i], "system:masters") == 0) {
            *ret = CMA_AUTHZ_ALLOW;
            *ret_source = "system_masters";
            return CMA_OK;
        }
    }
    if (!at->resource_request && path_always_allowed(a, at->path)) {
        *ret = CMA_AUTHZ_ALLOW;
        *ret_source = "always_allow_paths";
        return CMA_OK;
    }
    *ret_source = "subjectaccessreview";
    if (!a->opts.authz_kube)
        return cma_err_set(reterr, CMA_ERR_INTERNAL, "no Kubernetes client for authorization");
    struct cma_buf key;
    cma_buf_init(&key, 0);
    if (cma_authz_sar_key(u, at, &key) != CMA_OK) {
        cma_buf_done(&key);
        return cma_err_set(reterr, CMA_ERR_NOMEM, "out of memory");
    }
    const char *k = key.len <= SAR_CACHE_MAX_KEY ? cma_buf_str(&key) : NULL;
    char *cached = k ? cma_auth_cache_get(&a->sar_cache, k, cma_clock_mono_ms()) : NULL;
    if (!cached && wait == CMA_AUTH_MEMORY_ONLY) {
        cma_buf_done(&key);
        return cma_err_set(reterr, CMA_ERR_WOULD_BLOCK,
                           "the request's SubjectAccessReview answer is not cached");
    }
    cma_auth_count_cache(a, "subjectaccessreview", cached != NULL);
    enum cma_errc rc = cached ? CMA_OK : sar_call(a, u, at, k, &cached, reterr);
    cma_buf_done(&key);
    if (rc != CMA_OK)
        return rc;
    *ret = cached[0] == 'A' ? CMA_AUTHZ_ALLOW : CMA_AUTHZ_DENY;
    if (ret_reason && cached[1])
        *ret_reason = cma_strdup(cached + 1);
    free(cached);
    return CMA_OK;
}

enum cma_errc cma_auth_authorize(struct cma_auth *a, const struct cma_user *u,
                                 const struct cma_authz_attrs *at, enum cma_authz_decision *ret,
                                 char **ret_reason, struct cma_err *reterr)
{
    return cma_auth_authorize_wait(a, u, at, CMA_AUTH_MAY_BLOCK, ret, ret_reason, reterr);
}

enum cma_errc cma_auth_authorize_wait(struct cma_auth *a, const struct cma_user *u,
                                      const struct cma_authz_attrs *at, enum cma_auth_wait wait,
                                      enum cma_authz_decision *ret, char **ret_reason,
                                      struct cma_err *reterr)
{
    const char *source = "subjectaccessreview";
    enum cma_errc rc = authorize(a, u, at, wait, ret, ret_reason, &source, reterr);
    if (rc == CMA_ERR_WOULD_BLOCK)
        return rc; /* nothing decided: the caller runs it again, allowed to wait */
    const char *decision = rc != CMA_OK ? "error" : *ret == CMA_AUTHZ_ALLOW ? "allowed" : "denied";
    cma_auth_count_authz(a, decision, source);
    return rc;
}
