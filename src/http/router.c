/* router.c: raw Kubernetes API request paths → struct cma_route, driven by one declarative
 * table of path shapes (route_rows[]).
 *
 * DESIGN
 * - The path is checked for well-formed escapes first (every '%' followed by two hex digits,
 *   no %00, no %2F: a decoded '/' would change the segment structure), then one trailing '/'
 *   is dropped ("/apis/g/v/" is "/apis/g/v", as kube's muxes treat it), then it is split on
 *   '/' and each segment is percent-decoded ('+' stays '+'). An empty segment ("//") matches
 *   nothing. Paths with more than MAX_SEGMENTS segments match nothing either.
 * - route_rows[] is searched in order; the first row whose shape matches wins. A row with a
 *   group only matches under "/apis/{group}/{version}/" for a (group, version) pair listed in
 *   served_versions[], and its pattern is matched against the segments after the version.
 *   Pattern tokens: literals, "{ns}", "{resource}", "{name}", "{metric}" (one segment each,
 *   stored in the route), "{group}" (one of the served groups), "{check}" (any one segment),
 *   "{*}" (one or more segments). `subpath_at` names the first segment copied into
 *   route->subpath (joined with '/').
 * - Custom metrics follow custom-metrics-apiserver: "{resource}/{name}/{metric}" (root scope),
 *   "namespaces/{ns}/{resource}/{name}/{metric}", "namespaces/{ns}/metrics/{metric}" (the
 *   Namespace object itself: resource "namespaces", name = the namespace, root-scoped so
 *   namespace_ stays NULL). "namespaces/{ns}/{x}" also fits the root-scoped shape, but its
 *   RequestInfo has fewer than 3 parts, so Go answers 400 "invalid request path": BAD_PATH
 *   here too. Every other shape is NOT_FOUND, as go-restful answers.
 * - A captured segment that is "." or ".." makes the route BAD_PATH: such names can never
 *   be Kubernetes object or metric names (IsValidPathSegmentName).
 * Pure; thread-safe (the table is const). */
#include "cma/router.h"

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "cma/str.h"

#define MAX_SEGMENTS 32

struct served_version {
    const char *group;
    const char *version;
};

static const struct served_version served_versions[] = {
    {CMA_GROUP_CUSTOM, "v1beta1"},
    {CMA_GROUP_CUSTOM, "v1beta2"},
    {CMA_GROUP_EXTERNAL, "v1beta1"},
    {CMA_GROUP_RESOURCE, "v1beta1"},
};

struct route_row {
    const char *group;   /* NULL: the pattern is the whole path; else under /apis/{g}/{v} */
    const char *pattern; /* '/'-separated tokens; "" = no more segments */
    enum cma_route_kind kind;
    const char *resource;   /* fixed route->resource when the pattern has no {resource} */
    bool name_is_namespace; /* route->name = the {ns} segment */
    size_t subpath_at;      /* 0: no subpath; else first path segment of route->subpath */
};

static const struct route_row route_rows[] = {
    /* Outside the API groups. */
    {.pattern = "", .kind = CMA_ROUTE_ROOT},
    {.pattern = "healthz", .kind = CMA_ROUTE_HEALTHZ},
    {.pattern = "healthz/{check}", .kind = CMA_ROUTE_HEALTHZ, .subpath_at = 1},
    {.pattern = "livez", .kind = CMA_ROUTE_LIVEZ},
    {.pattern = "livez/{check}", .kind = CMA_ROUTE_LIVEZ, .subpath_at = 1},
    {.pattern = "readyz", .kind = CMA_ROUTE_READYZ},
    {.pattern = "readyz/{check}", .kind = CMA_ROUTE_READYZ, .subpath_at = 1},
    {.pattern = "version", .kind = CMA_ROUTE_VERSION},
    {.pattern = "metrics", .kind = CMA_ROUTE_METRICS},
    {.pattern = "debug/explain", .kind = CMA_ROUTE_DEBUG_EXPLAIN},
    {.pattern = "openapi/v2", .kind = CMA_ROUTE_OPENAPI, .subpath_at = 1},
    {.pattern = "openapi/v3", .kind = CMA_ROUTE_OPENAPI, .subpath_at = 1},
    {.pattern = "openapi/v3/{*}", .kind = CMA_ROUTE_OPENAPI, .subpath_at = 1},
    {.pattern = "apis", .kind = CMA_ROUTE_APIS},
    {.pattern = "apis/{group}", .kind = CMA_ROUTE_API_GROUP},

    /* custom.metrics.k8s.io/{v1beta1,v1beta2} */
    {.group = CMA_GROUP_CUSTOM, .pattern = "", .kind = CMA_ROUTE_API_GROUP_VERSION},
    {.group = CMA_GROUP_CUSTOM,
     .pattern = "namespaces/{ns}/metrics/{metric}",
     .kind = CMA_ROUTE_CUSTOM_NAMESPACE_METRIC,
     .resource = "namespaces",
     .name_is_namespace = true},
    {.group = CMA_GROUP_CUSTOM,
     .pattern = "namespaces/{ns}/{resource}/{name}/{metric}",
     .kind = CMA_ROUTE_CUSTOM_OBJECT},
    {.group = CMA_GROUP_CUSTOM, .pattern = "namespaces/{ns}/{metric}", .kind = CMA_ROUTE_BAD_PATH},
    {.group = CMA_GROUP_CUSTOM,
     .pattern = "{resource}/{name}/{metric}",
     .kind = CMA_ROUTE_CUSTOM_OBJECT},

    /* external.metrics.k8s.io/v1beta1 */
    {.group = CMA_GROUP_EXTERNAL, .pattern = "", .kind = CMA_ROUTE_API_GROUP_VERSION},
    {.group = CMA_GROUP_EXTERNAL,
     .pattern = "namespaces/{ns}/{metric}",
     .kind = CMA_ROUTE_EXTERNAL_METRIC},

    /* metrics.k8s.io/v1beta1 */
    {.group = CMA_GROUP_RESOURCE, .pattern = "", .kind = CMA_ROUTE_API_GROUP_VERSION},
    {.group = CMA_GROUP_RESOURCE, .pattern = "nodes", .kind = CMA_ROUTE_RESOURCE_NODES},
    {.group = CMA_GROUP_RESOURCE, .pattern = "nodes/{name}", .kind = CMA_ROUTE_RESOURCE_NODE},
    {.group = CMA_GROUP_RESOURCE, .pattern = "pods", .kind = CMA_ROUTE_RESOURCE_PODS},
    {.group = CMA_GROUP_RESOURCE,
     .pattern = "namespaces/{ns}/pods",
     .kind = CMA_ROUTE_RESOURCE_PODS},
    {.group = CMA_GROUP_RESOURCE,
     .pattern = "namespaces/{ns}/pods/{name}",
     .kind = CMA_ROUTE_RESOURCE_POD},
};

/* Decoded path segments (each owned). */
struct segments {
    char *seg[MAX_SEGMENTS];
    size_t n;
};

static void segments_done(struct segments *s)
{
    for (size_t i = 0; i < s->n; i++)
        free(s->seg[i]);
    s->n = 0;
}

/* What a matched row captured: borrowed pointers into the segments. */
struct captures {
    const char *group;
    const char *version;
    const char *namespace_;
    const char *resource;
    const char *name;
    const char *metric;
};

/* Every escape well-formed, and none that decodes to NUL or '/'. */
static enum cma_errc check_escapes(const char *path, size_t len, struct cma_err *reterr)
{
    for (size_t i = 0; i < len; i++) {
        if (path[i] != '%')
            continue;
        int c = cma_percent_escape(path, len, i);
        if (c < 0)
            return cma_err_set(reterr, CMA_ERR_BAD_REQUEST,
                               "malformed percent-escape at offset %zu of the request path", i);
        if (c == 0 || c == '/')
            return cma_err_set(reterr, CMA_ERR_BAD_REQUEST,
                               "escaped %s at offset %zu of the request path is not allowed",
                               c == 0 ? "NUL" : "'/'", i);
        i += 2;
    }
    return CMA_OK;
}

/* Splits path (after its leading '/') into decoded segments. *ret_usable is false when the
 * path cannot match any route (empty segment, too many segments, no leading '/'). */
static enum cma_errc split_path(const char *path, struct segments *segs, bool *ret_usable,
                                struct cma_err *reterr)
{
    size_t len = strlen(path);
    segs->n = 0;
    *ret_usable = false;
    enum cma_errc rc = check_escapes(path, len, reterr);
    if (rc != CMA_OK)
        return rc;
    if (len == 0 || path[0] != '/')
        return CMA_OK;
    if (len > 1 && path[len - 1] == '/') {
        len--; /* one trailing slash is tolerated */
        if (len == 1)
            return CMA_OK; /* "//" */
    }
    size_t pos = 1;
    while (pos < len) {
        const char *slash = memchr(path + pos, '/', len - pos);
        size_t end = slash ? (size_t)(slash - path) : len;
        if (end == pos || segs->n == MAX_SEGMENTS) {
            segments_done(segs);
            return CMA_OK;
        }
        rc = cma_percent_decode(path + pos, end - pos, false, &segs->seg[segs->n], reterr);
        if (rc != CMA_OK) {
            segments_done(segs);
            return rc;
        }
        segs->n++;
        pos = end + 1;
        if (slash && pos == len) { /* a second trailing slash: "a//" */
            segments_done(segs);
            return CMA_OK;
        }
    }
    *ret_usable = true;
    return CMA_OK;
}

static bool is_served_group(const char *group)
{
    for (size_t i = 0; i < sizeof(served_versions) / sizeof(served_versions[0]); i++)
        if (strcmp(served_versions[i].group, group) == 0)
            return true;
    return false;
}

static bool is_served_version(const char *group, const char *version)
{
    for (size_t i = 0; i < sizeof(served_versions) / sizeof(served_versions[0]); i++)
        if (strcmp(served_versions[i].group, group) == 0 &&
            strcmp(served_versions[i].version, version) == 0)
            return true;
    return false;
}

static bool token_is(const char *tok, size_t len, const char *s)
{
    return strlen(s) == len && memcmp(tok, s, len) == 0;
}

/* Matches segs[first..n) against a pattern; fills the captures it names. */
static bool match_pattern(const char *pattern, const struct segments *segs, size_t first,
                          struct captures *cap)
{
    size_t i = first;
    const char *p = pattern;
    while (*p) {
        const char *slash = strchr(p, '/');
        size_t tlen = slash ? (size_t)(slash - p) : strlen(p);
        if (token_is(p, tlen, "{*}"))
            return i < segs->n; /* the rest, at least one segment */
        if (i >= segs->n)
            return false;
        const char *seg = segs->seg[i];
        if (token_is(p, tlen, "{ns}"))
            cap->namespace_ = seg;
        else if (token_is(p, tlen, "{resource}"))
            cap->resource = seg;
        else if (token_is(p, tlen, "{name}"))
            cap->name = seg;
        else if (token_is(p, tlen, "{metric}"))
            cap->metric = seg;
        else if (token_is(p, tlen, "{group}")) {
            if (!is_served_group(seg))
                return false;
            cap->group = seg;
        } else if (!token_is(p, tlen, "{check}") && !token_is(p, tlen, seg))
            return false;
        i++;
        p = slash ? slash + 1 : p + tlen;
    }
    return i == segs->n;
}

static bool match_row(const struct route_row *row, const struct segments *segs,
                      struct captures *cap)
{
    memset(cap, 0, sizeof(*cap));
    size_t first = 0;
    if (row->group) {
        if (segs->n < 3 || strcmp(segs->seg[0], "apis") != 0 ||
            strcmp(segs->seg[1], row->group) != 0 || !is_served_version(row->group, segs->seg[2]))
            return false;
        cap->group = segs->seg[1];
        cap->version = segs->seg[2];
        first = 3;
    }
    return match_pattern(row->pattern, segs, first, cap);
}

static bool is_dot_segment(const char *s)
{
    return s && (strcmp(s, ".") == 0 || strcmp(s, "..") == 0);
}

static bool has_dot_segment(const struct segments *segs, size_t from)
{
    for (size_t i = from; i < segs->n; i++)
        if (is_dot_segment(segs->seg[i]))
            return true;
    return false;
}

/* segs[from..n) joined with '/'. */
static char *join_segments(const struct segments *segs, size_t from)
{
    size_t len = 0;
    for (size_t i = from; i < segs->n; i++)
        len += strlen(segs->seg[i]) + 1;
    char *out = malloc(len ? len : 1);
    if (!out)
        return NULL;
    size_t o = 0;
    for (size_t i = from; i < segs->n; i++) {
        size_t l = strlen(segs->seg[i]);
        if (i > from)
            out[o++] = '/';
        memcpy(out + o, segs->seg[i], l);
        o += l;
    }
    out[o] = '\0';
    return out;
}

/* Copies s into *dst (NULL stays NULL); false when out of memory. */
static bool copy_field(char **dst, const char *s)
{
    if (!s)
        return true;
    *dst = cma_strdup(s);
    return *dst != NULL;
}

static enum cma_errc fill_route(struct cma_route *r, const struct route_row *row,
                                const struct captures *cap, const struct segments *segs,
                                struct cma_err *reterr)
{
    r->kind = row->kind;
    const char *name = row->name_is_namespace ? cap->namespace_ : cap->name;
    const char *namespace_ = row->name_is_namespace ? NULL : cap->namespace_;
    const char *resource = cap->resource ? cap->resource : row->resource;
    /* Captured names, and anything after /apis/{g}/{v}/, may not be "." or "..". */
    if (is_dot_segment(cap->namespace_) || is_dot_segment(cap->resource) ||
        is_dot_segment(cap->name) || is_dot_segment(cap->metric) ||
        (row->subpath_at && has_dot_segment(segs, row->subpath_at)))
        r->kind = CMA_ROUTE_BAD_PATH;
    bool ok = copy_field(&r->group, cap->group) && copy_field(&r->version, cap->version) &&
              copy_field(&r->namespace_, namespace_) && copy_field(&r->resource, resource) &&
              copy_field(&r->name, name) && copy_field(&r->metric, cap->metric);
    if (ok && row->subpath_at) {
        r->subpath = join_segments(segs, row->subpath_at);
        ok = r->subpath != NULL;
    }
    if (!ok)
        return cma_err_set(reterr, CMA_ERR_NOMEM, "out of memory");
    return CMA_OK;
}

enum cma_errc cma_router_parse(const char *path, struct cma_route **ret, struct cma_err *reterr)
{
    if (!path)
        return cma_err_set(reterr, CMA_ERR_BAD_REQUEST, "no request path");
    struct segments segs;
    bool usable;
    enum cma_errc rc = split_path(path, &segs, &usable, reterr);
    if (rc != CMA_OK)
        return rc;
    struct cma_route *r = calloc(1, sizeof(*r));
    if (!r) {
        segments_done(&segs);
        return cma_err_set(reterr, CMA_ERR_NOMEM, "out of memory");
    }
    r->kind = CMA_ROUTE_NOT_FOUND;
    for (size_t i = 0; usable && i < sizeof(route_rows) / sizeof(route_rows[0]); i++) {
        struct captures cap;
        if (!match_row(&route_rows[i], &segs, &cap))
            continue;
        rc = fill_route(r, &route_rows[i], &cap, &segs, reterr);
        break;
    }
    segments_done(&segs);
    if (rc != CMA_OK) {
        cma_route_free(r);
        return rc;
    }
    *ret = r;
    return CMA_OK;
}

void cma_route_free(struct cma_route *r)
{
    if (!r)
        return;
    free(r->group);
    free(r->version);
    free(r->namespace_);
    free(r->resource);
    free(r->name);
    free(r->metric);
    free(r->subpath);
    free(r);
}
