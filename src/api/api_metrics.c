/* api_metrics.c: GET /metrics (the registry in the text exposition format, after refreshing the
 * values only a scrape reads: process_* from /proc/self, the watch caches, the build info), and
 * what ends every request: kube-apiserver's apiserver_request_total and
 * apiserver_request_duration_seconds, and one "HTTP" line at --v=2 (kube's httplog).
 *
 * DESIGN: request labels are kube-apiserver's RequestInfo labels, taken from the same
 * attributes authorization uses (cma_authz_attrs_from_route): resource requests carry group,
 * version, resource, subresource and a scope (resource when a name is given, else namespace,
 * else cluster; GET becomes LIST without a name, as kube's CanonicalVerb does); other paths carry
 * the path, as kube does, but only the route's fixed shape ("/healthz", "/apis/<served group>"),
 * so a client cannot grow the label set with made-up paths. Requests refused by authentication
 * or authorization (401, 403) are counted without any path-derived label for the same reason. */
#include "api_metrics.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include "api_internal.h"
#include "cma/auth.h"
#include "cma/catalog.h"
#include "cma/clock.h"
#include "cma/log.h"
#include "cma/metrics.h"
#include "cma/objcache.h"
#include "cma/router.h"
#include "cma/server.h"
#include "cma/str.h"

#ifndef CMA_VERSION
#define CMA_VERSION "0.0.0"
#endif
#ifndef CMA_GIT_COMMIT
#define CMA_GIT_COMMIT ""
#endif

static const char *const REQUEST_LABELS[] = {
    "verb", "dry_run", "group", "version", "resource", "subresource", "scope", "component", "code"};
#define N_REQUEST_LABELS (sizeof(REQUEST_LABELS) / sizeof(REQUEST_LABELS[0]))

void cma_app_register_metrics(struct cma_app *app, struct cma_metrics *m)
{
    static const double bounds[] = {CMA_METRICS_KUBE_BUCKETS};
    app->metrics = m;
    app->requests_total = cma_metrics_counter(
        m, "apiserver_request_total",
        "Counter of apiserver requests broken out for each verb, dry run value, group, version, "
        "resource, scope, component, and HTTP response code.",
        REQUEST_LABELS, N_REQUEST_LABELS);
    app->request_duration = cma_metrics_histogram(
        m, "apiserver_request_duration_seconds",
        "Response latency distribution in seconds for each verb, dry run value, group, version, "
        "resource, subresource, scope and component.",
        REQUEST_LABELS, N_REQUEST_LABELS - 1, bounds, CMA_METRICS_N_KUBE_BUCKETS);
}

/* ---- request labels ------------------------------------------------------------------------- */

struct request_labels {
    const char *v[N_REQUEST_LABELS];
    char path[160];
    char code[8];
};

/* The fixed shape of a non-resource path ("" for paths no route knows). */
static void nonresource_path(const struct cma_route *r, char *out, size_t len)
{
    const char *fixed = "";
    switch (r ? r->kind : CMA_ROUTE_NOT_FOUND) {
    case CMA_ROUTE_ROOT:
        fixed = "/";
        break;
    case CMA_ROUTE_HEALTHZ:
        fixed = "/healthz";
        break;
    case CMA_ROUTE_LIVEZ:
        fixed = "/livez";
        break;
    case CMA_ROUTE_READYZ:
        fixed = "/readyz";
        break;
    case CMA_ROUTE_VERSION:
        fixed = "/version";
        break;
    case CMA_ROUTE_OPENAPI:
        fixed = "/openapi";
        break;
    case CMA_ROUTE_METRICS:
        fixed = "/metrics";
        break;
    case CMA_ROUTE_DEBUG_EXPLAIN:
        fixed = "/debug/explain";
        break;
    case CMA_ROUTE_APIS:
        fixed = "/apis";
        break;
    case CMA_ROUTE_API_GROUP: /* the router matches served groups and versions only */
    case CMA_ROUTE_API_GROUP_VERSION:
        cma_str_concat(out, len,
                       (const char *const[]){"/apis/", r->group, r->version ? "/" : "",
                                             r->version ? r->version : ""},
                       4);
        return;
    default:
        break;
    }
    cma_str_concat(out, len, &fixed, 1);
}

static const char *request_verb(const char *method, const char *scope)
{
    static const char *const known[] = {"GET", "POST", "PUT", "PATCH", "DELETE", "CONNECT"};
    if (strcmp(method, "GET") == 0 || strcmp(method, "HEAD") == 0)
        return strcmp(scope, "namespace") == 0 || strcmp(scope, "cluster") == 0 ? "LIST" : "GET";
    for (size_t i = 0; i < sizeof(known) / sizeof(known[0]); i++)
        if (strcmp(method, known[i]) == 0)
            return known[i];
    return "other";
}

static void request_labels(const struct cma_request *req, const struct cma_route *route, int status,
                           struct request_labels *l)
{
    struct cma_authz_attrs at;
    bool refused = status == 401 || status == 403;
    cma_authz_attrs_from_route(req->path, refused ? NULL : route, &at);
    const char *scope = "";
    l->path[0] = '\0';
    if (at.resource_request)
        scope = at.name && *at.name               ? "resource"
                : at.namespace_ && *at.namespace_ ? "namespace"
                                                  : "cluster";
    else if (!refused)
        nonresource_path(route, l->path, sizeof l->path);
    snprintf(l->code, sizeof l->code, "%d", status);
    const char *v[N_REQUEST_LABELS] = {
        request_verb(req->method ? req->method : "", scope),
        "",
        at.resource_request ? at.group : "",
        at.resource_request ? at.version : "",
        at.resource_request ? at.resource : "",
        at.resource_request ? at.subresource : l->path,
        scope,
        "apiserver",
        l->code,
    };
    memcpy(l->v, v, sizeof v);
}

/* ---- the request's end ---------------------------------------------------------------------- */

void cma_api_request_begin(struct cma_api_request_info *info)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    *info = (struct cma_api_request_info){
        .start_ns = (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec,
        .start_ms = cma_clock_mono_ms(),
    };
}

/* Nanoseconds since the request was read: the handler's part, plus the wait before it (the
 * server stamps requests in milliseconds). */
static int64_t elapsed_ns(const struct cma_request *req, const struct cma_api_request_info *info)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    int64_t ns = (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec - info->start_ns;
    int64_t wait_ms = req->start_mono_ms > 0 && req->start_mono_ms <= info->start_ms
                          ? info->start_ms - req->start_mono_ms
                          : 0;
    return ns + wait_ms * 1000000;
}

static void log_request(const struct cma_request *req, int status, int64_t ns,
                        const struct cma_api_request_info *info)
{
    struct cma_log_field f[7];
    size_t n = 0;
    f[n++] = CMA_LOG_STR("verb", req->method);
    f[n++] = CMA_LOG_STR("path", req->path);
    f[n++] = CMA_LOG_INT("code", status);
    f[n++] = CMA_LOG_STR("user", info->user);
    f[n++] = CMA_LOG_MS("duration_ms", ns);
    if (info->backend_measured)
        f[n++] = CMA_LOG_MS("backend_ms", (int64_t)info->backend_ns);
    const char *audit = cma_request_header(req, "Audit-Id");
    if (audit)
        f[n++] = CMA_LOG_STR("audit_id", audit);
    cma_log_fields(2, "HTTP", f, n);
}

void cma_api_request_end(struct cma_app *app, const struct cma_request *req,
                         const struct cma_response *resp, const struct cma_api_request_info *info)
{
    int status = resp->status ? resp->status : 200;
    int64_t ns = elapsed_ns(req, info);
    if (app->requests_total || app->request_duration) {
        struct request_labels l;
        request_labels(req, info->route, status, &l);
        cma_metric_inc(app->requests_total, l.v);
        cma_metric_observe(app->request_duration, l.v, (double)ns / 1e9);
    }
    if (cma_log_enabled(2))
        log_request(req, status, ns, info);
}

/* ---- /metrics ------------------------------------------------------------------------------- */

/* Field `index` (1-based, after the ")" that ends the command name) of /proc/self/stat. */
static bool proc_stat_field(int index, unsigned long long *ret)
{
    char buf[1024];
    FILE *f = fopen("/proc/self/stat", "r");
    size_t n = f ? fread(buf, 1, sizeof buf - 1, f) : 0;
    if (f)
        fclose(f);
    buf[n] = '\0';
    char *p = strrchr(buf, ')');
    for (int i = 2; p && i < index; i++)
        p = strchr(p + 1, ' ');
    return p && sscanf(p + 1, "%llu", ret) == 1;
}

static double boot_time_seconds(void)
{
    FILE *f = fopen("/proc/stat", "r");
    char line[256];
    unsigned long long btime = 0;
    while (f && fgets(line, sizeof line, f))
        if (sscanf(line, "btime %llu", &btime) == 1)
            break;
    if (f)
        fclose(f);
    return (double)btime;
}

static double open_fds(void)
{
    DIR *d = opendir("/proc/self/fd");
    double n = 0;
    for (struct dirent *e; d && (e = readdir(d)) != NULL;)
        n += e->d_name[0] != '.';
    if (d)
        closedir(d);
    return d ? n - 1 : 0; /* the directory stream's own descriptor */
}

static void gauge(struct cma_metrics *m, const char *name, const char *help, double v)
{
    cma_metric_set(cma_metrics_gauge(m, name, help, NULL, 0), NULL, v);
}

/* The standard process_* metrics (client_golang's process collector names and units). */
static void process_metrics(struct cma_metrics *m)
{
    struct rusage ru;
    if (getrusage(RUSAGE_SELF, &ru) == 0)
        cma_metric_set(cma_metrics_counter(m, "process_cpu_seconds_total",
                                           "Total user and system CPU time spent in seconds.", NULL,
                                           0),
                       NULL,
                       (double)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) +
                           (double)(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6);
    long page = sysconf(_SC_PAGESIZE), tick = sysconf(_SC_CLK_TCK);
    unsigned long long v = 0;
    if (proc_stat_field(24, &v))
        gauge(m, "process_resident_memory_bytes", "Resident memory size in bytes.",
              (double)v * (double)page);
    if (proc_stat_field(23, &v))
        gauge(m, "process_virtual_memory_bytes", "Virtual memory size in bytes.", (double)v);
    if (proc_stat_field(22, &v) && tick > 0)
        gauge(m, "process_start_time_seconds",
              "Start time of the process since unix epoch in seconds.",
              boot_time_seconds() + (double)v / (double)tick);
    gauge(m, "process_open_fds", "Number of open file descriptors.", open_fds());
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0)
        gauge(m, "process_max_fds", "Maximum number of open file descriptors.",
              rl.rlim_cur == RLIM_INFINITY ? -1 : (double)rl.rlim_cur);
}

static void build_info(struct cma_metrics *m)
{
    static const char *const labels[] = {"version", "git_commit", "compiler"};
    struct cma_metric *f = cma_metrics_gauge(
        m, "custom_metrics_adapter_build_info",
        "A metric with a constant '1' value labeled by the version and git commit the binary "
        "was built from, and the compiler.",
        labels, 3);
#if defined(__clang__)
    const char *compiler = "clang " __clang_version__;
#elif defined(__GNUC__)
    const char *compiler = "gcc " __VERSION__;
#else
    const char *compiler = "";
#endif
    cma_metric_set(f, (const char *const[]){"v" CMA_VERSION, CMA_GIT_COMMIT, compiler}, 1);
}

/* Entries of the catalog serving now, per API group (a catalog from --catalog-cache-file
 * included). */
static void catalog_metrics(struct cma_app *app, struct cma_metrics *m)
{
    static const char *const labels[] = {"group"};
    struct cma_metric *f = cma_metrics_gauge(
        m, "custom_metrics_adapter_catalog_entries",
        "Metrics the catalog serving now lists, per API group (custom: resource and metric "
        "pairs; external: metric names).",
        labels, 1);
    struct cma_catalog *c = app->store ? cma_catalog_store_get(app->store) : NULL;
    cma_metric_set(f, (const char *const[]){CMA_GROUP_CUSTOM},
                   c ? (double)cma_catalog_count(c) : 0);
    cma_metric_set(f, (const char *const[]){CMA_GROUP_EXTERNAL},
                   c ? (double)cma_catalog_count_external(c) : 0);
    cma_catalog_unref(c);
}

struct cache_families {
    struct cma_metric *objects, *lists, *watches, *synced;
};

static void cache_values(void *ctx, struct cma_objcache *c, const char *group, const char *version,
                         const char *resource)
{
    struct cache_families *f = ctx;
    const char *const v[] = {group, version, resource};
    cma_metric_set(f->objects, v, (double)cma_objcache_count(c));
    cma_metric_set(f->lists, v, (double)cma_objcache_lists(c));
    cma_metric_set(f->watches, v, (double)cma_objcache_watches(c));
    cma_metric_set(f->synced, v, cma_objcache_is_synced(c) ? 1 : 0);
}

static void watch_cache_metrics(struct cma_app *app, struct cma_metrics *m)
{
    static const char *const labels[] = {"group", "version", "resource"};
    struct cache_families f = {
        cma_metrics_gauge(m, "custom_metrics_adapter_watch_cache_objects",
                          "Objects held by the watch cache of a resource.", labels, 3),
        cma_metrics_counter(m, "custom_metrics_adapter_watch_cache_lists_total",
                            "Full LISTs applied by the watch cache of a resource: the first "
                            "sync and every resync (410 Gone, reconnect without a "
                            "resourceVersion).",
                            labels, 3),
        cma_metrics_counter(m, "custom_metrics_adapter_watch_cache_watches_total",
                            "WATCH streams opened by the watch cache of a resource.", labels, 3),
        cma_metrics_gauge(m, "custom_metrics_adapter_watch_cache_synced",
                          "1 once the watch cache of a resource has applied a LIST.", labels, 3),
    };
    cma_objcache_registry_each(app->caches, cache_values, &f);
}

void cma_api_metrics(struct cma_app *app, struct cma_response *resp)
{
    struct cma_metrics *m = app->metrics;
    if (!m) {
        cma_api_reply_errorf(resp, CMA_ERR_NOT_FOUND,
                             "the server could not find the requested resource");
        return;
    }
    process_metrics(m);
    build_info(m);
    catalog_metrics(app, m);
    watch_cache_metrics(app, m);
    cma_metric_set(cma_metrics_counter(m, "custom_metrics_adapter_metrics_dropped_total",
                                       "Label-value combinations this adapter did not record "
                                       "because a metric already had its maximum of series.",
                                       NULL, 0),
                   NULL, (double)cma_metrics_dropped(m));
    resp->content_type = CMA_METRICS_CONTENT_TYPE;
    if (cma_metrics_write(m, &resp->body) != CMA_OK)
        cma_api_reply_errorf(resp, CMA_ERR_NOMEM, "cannot render the metrics");
}
