/* main.c: the composition root: flags → config → rules → clients → catalog store + discovery
 * thread → config watch → HTTPS server; then waits for signals: SIGHUP reloads the config (as
 * does a change the watch sees), SIGTERM/SIGINT tear everything down in reverse.
 * No logic of its own beyond wiring and start-up diagnostics, and the log lines of what the
 * layers below report instead of logging (client requests and credential rotations, the watch
 * caches' events, a generated serving certificate). */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cma/app.h"
#include "cma/auth.h"
#include "cma/backend.h"
#include "cma/backend_cache.h"
#include "cma/backend_limit.h"
#include "cma/backend_metrics.h"
#include "cma/catalog.h"
#include "cma/check.h"
#include "cma/clock.h"
#include "cma/config.h"
#include "cma/discovery.h"
#include "cma/explain.h"
#include "cma/file.h"
#include "cma/kube.h"
#include "cma/objcache.h"
#include "cma/log.h"
#include "cma/metricrule_ctl.h"
#include "cma/metricrule_watch.h"
#include "cma/metrics.h"
#include "cma/ns_limit.h"
#include "cma/options.h"
#include "cma/persist.h"
#include "cma/prom.h"
#include "cma/rule.h"
#include "cma/selector.h"
#include "cma/server.h"
#include "cma/str.h"
#include "cma/tls.h"
#include "cma/watch.h"

#ifndef CMA_VERSION
#define CMA_VERSION "0.0.0"
#endif
#ifndef CMA_REVISION
#define CMA_REVISION "unknown"
#endif

static void log_err(const char *what, const struct cma_err *err)
{
    char line[1024];
    cma_err_format_pos(err, line, sizeof(line));
    if (what)
        cma_log_error("%s: %s", what, line);
    else
        cma_log_error("%s", line);
}

/* Reads a small secret file (password), trimmed; NULL on error. */
static char *read_secret(const char *path)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return NULL;
    char buf[4096];
    size_t n = fread(buf, 1, sizeof(buf) - 1, f);
    fclose(f);
    buf[n] = '\0';
    while (n && (buf[n - 1] == '\n' || buf[n - 1] == '\r' || buf[n - 1] == ' '))
        buf[--n] = '\0';
    return strdup(buf);
}

/* ---- what the layers below report (they do not log; the lines are written here) --------- */

/* How one client's reports are named in the log. */
struct client_log {
    const char *trace; /* request lines at --v=6: "prometheus", "kube" */
    const char *creds; /* a refused credential rotation */
};

static const struct client_log PROM_LOG = {"prometheus", "prometheus credentials"};
static const struct client_log KUBE_LOG = {"kube", "Kubernetes API credentials"};

static void log_request(void *ctx, const struct cma_http_report *r)
{
    const struct client_log *l = ctx;
    if (!cma_log_enabled(6))
        return;
    if (r->long_get_bytes)
        cma_log_v(6, "%s %s: URL of %zu bytes is over %zu, sending POST", l->trace, r->what,
                  r->long_get_bytes, r->max_get_bytes);
    if (r->error)
        cma_log_v(6, "%s %s %s -> %s (%lld ms)", l->trace, r->method, r->url, r->error,
                  (long long)r->duration_ms);
    else
        cma_log_v(6, "%s %s %s -> %ld (%lld ms)", l->trace, r->method, r->url, r->status,
                  (long long)r->duration_ms);
}

static void log_credentials(void *ctx, const struct cma_err *warning)
{
    const struct client_log *l = ctx;
    cma_log_warn("%s: %s", l->creds, warning->msg);
}

static void log_answer(void *ctx, const struct cma_answer_report *a)
{
    const struct client_log *l = ctx;
    if (cma_log_enabled(8))
        cma_log_v(8, "%s %s body: %.*s", l->trace, a->api_path, (int)a->head_len, a->head);
    if (a->decoded)
        cma_log_v(6, "%s %s: %zu bytes, kept %zu of %zu series", l->trace, a->api_path, a->bytes,
                  a->kept, a->seen);
}

static struct cma_client_notifier client_notifier(const struct client_log *l)
{
    return (struct cma_client_notifier){.on_request = log_request,
                                        .on_credentials = log_credentials,
                                        .on_answer = log_answer,
                                        .ctx = (void *)l};
}

static void log_cache_event(void *ctx, const struct cma_objcache_event *ev)
{
    (void)ctx;
    const char *why = ev->err ? ev->err->msg : "";
    switch (ev->kind) {
    case CMA_OBJCACHE_LIST_FAILED:
        cma_log_warn("cache of %s: LIST failed (retry in %lld ms): %s", ev->resource,
                     (long long)ev->retry_ms, why);
        break;
    case CMA_OBJCACHE_LISTED:
        cma_log_v(4, "cache of %s: listed %zu objects at resourceVersion %s", ev->resource,
                  ev->count, ev->resource_version);
        break;
    case CMA_OBJCACHE_GONE:
        cma_log_v(2, "cache of %s: resourceVersion %s is gone: re-listing", ev->resource,
                  ev->resource_version);
        break;
    case CMA_OBJCACHE_WATCH_REFUSED:
        cma_log_warn("cache of %s: watch refused (HTTP %ld), using live LISTs: %s", ev->resource,
                     ev->status, why);
        break;
    case CMA_OBJCACHE_WATCH_FAILED:
        cma_log_warn("cache of %s: watch failed (reconnect in %lld ms): %s", ev->resource,
                     (long long)ev->retry_ms, why);
        break;
    case CMA_OBJCACHE_START_FAILED:
        cma_log_warn("cache of %s: %s (live LISTs instead)", ev->resource, why);
        break;
    }
}

/* A kube client that reports to the log (NULL stays NULL). */
static struct cma_kube *logged_kube(struct cma_kube *k)
{
    struct cma_client_notifier n = client_notifier(&KUBE_LOG);
    cma_kube_set_notifier(k, &n);
    return k;
}

/* ---- named backends (`backends:` in the rules file, this project's extension) -------------- */

/* A backend under its config name (the flags' backend: its URL for display, cma_url_display):
 * /metrics' backend label, explain, error messages and logs say the name, never the URL's
 * credentials; calls go to the inner backend. */
struct named_backend {
    struct cma_backend inner;
    const char *name;
};

static enum cma_errc named_query(void *ctx, const char *promql, int64_t time_ms,
                                 const struct cma_keep *keep, struct cma_prom_result **ret,
                                 struct cma_err *reterr)
{
    const struct named_backend *n = ctx;
    return cma_backend_query(&n->inner, promql, time_ms, keep, ret, reterr);
}

static enum cma_errc named_series(void *ctx, const char *match, int64_t start_ms, int64_t end_ms,
                                  const char *tenant, cma_series_fn fn, void *fn_ctx,
                                  struct cma_err *reterr)
{
    const struct named_backend *n = ctx;
    return cma_backend_series_as(&n->inner, tenant, match, start_ms, end_ms, fn, fn_ctx, reterr);
}

static const char *named_name(const void *ctx)
{
    const struct named_backend *n = ctx;
    return n->name;
}

static const struct cma_backend_ops NAMED_OPS = {named_query, named_series, named_name};

/* One named backend's client, as the flags' one is built, from its config entry. */
struct backend_slot {
    struct cma_prom *prom;
    char *url_display; /* the url without its userinfo, for the start-up log */
    struct named_backend named;
    struct cma_backend_measured measured;
    struct cma_backend_limit *limit; /* --prometheus-max-concurrent-queries, inside the cache */
    struct client_log log;
    char trace[96]; /* "backend NAME" */
    char creds[96]; /* "backend NAME credentials" */
};

struct runtime {
    struct cma_options *opts;
    struct cma_config *cfg;
    struct cma_ruleset *rules;
    struct cma_prom *prom;
    char *prom_display;                        /* --prometheus-url without its userinfo */
    struct named_backend prom_named;           /* the client under prom_display */
    struct cma_metrics *metrics;               /* /metrics: every component records here */
    struct cma_backend_measured backend_state; /* prom_named, measured: */
    struct cma_backend backend;                /* what the app and discovery call */
    struct cma_backend_limit *limit;       /* --prometheus-max-concurrent-queries around backend */
    struct cma_backend_cache *query_cache; /* coalescing + --metrics-cache-ttl around limit: */
    struct cma_backend cached_backend;     /* what the request handlers call */
    /* The rules' backends ([0] the flags' one above, [i] the config's backends[i - 1]), made at
     * start-up and fixed for the process: what rules are bound to (cma_ruleset_bind_backends,
     * also for a reloaded ruleset) and what discovery lists series from. */
    size_t n_backends;
    struct backend_slot *slots;          /* [i >= 1]: the named backends' clients */
    const char **backend_names;          /* [0] NULL */
    struct cma_backend *series_backends; /* measured (discovery) */
    struct cma_backend *query_backends;  /* measured and cached (request handlers) */
    size_t *query_limits; /* longest PromQL each takes (maxQueryLength, else the flag; 0: none) */
    struct cma_kube *kube;
    struct cma_objcache_registry *caches; /* watch caches; one per resource, pods at start */
    struct cma_catalog_store *store;
    struct cma_persist *catalog_cache;     /* NULL: --catalog-cache-file is off; under cache_mu */
    const struct cma_ruleset *cache_rules; /* what the file's fingerprint covers; under cache_mu */
    pthread_mutex_t cache_mu;              /* the publish hook against a config reload */
    struct cma_watch *watch; /* config reloads (on a change, on SIGHUP); NULL: SIGHUP only */
    struct cma_metric *m_reloads, *m_reload_ok, *m_reload_time; /* config reload metrics */
    struct cma_discovery *discovery;
    struct cma_metricrule_ctl *metric_rules; /* --enable-metric-rules; NULL when off */
    struct cma_metricrule_ctl_backend_policy *mr_policies; /* per backend, [0] the flags' */
    struct cma_selector *mr_selector; /* --metric-rules-namespace-selector, parsed */
    struct cma_ns_limit *mr_slots;    /* --metric-rules-max-concurrent-queries */
    struct cma_server *server;
    struct cma_auth *auth;
    struct cma_kube *authn_kube, *authz_kube; /* NULL = rt->kube */
    struct auth_lists {
        char **v;
        size_t n;
    } allowed_names, user_headers, group_headers, extra_prefixes, allow_paths;
    char client_ca_union[1024];
};

/* The "Key=Value" strings of a config mapping (the prom client's form), in *out (caller frees
 * each string and the array). */
static bool kv_strings(const struct cma_config_kv *kv, size_t n, char ***out)
{
    *out = calloc(n + 1, sizeof(**out));
    for (size_t i = 0; *out && i < n; i++) {
        size_t len = strlen(kv[i].key) + strlen(kv[i].value) + 2;
        if (!((*out)[i] = malloc(len)))
            return false;
        snprintf((*out)[i], len, "%s=%s", kv[i].key, kv[i].value);
    }
    return *out != NULL;
}

static void strings_free(char **v, size_t n)
{
    for (size_t i = 0; v && i < n; i++)
        free(v[i]);
    free(v);
}

static const char *str_or_null(const struct cma_config_str *s)
{
    return s->set ? s->s : NULL;
}

static enum cma_errc new_named_prom(const struct runtime *rt, const struct cma_config_backend *b,
                                    struct backend_slot *slot, struct cma_err *err)
{
    const struct cma_options *o = rt->opts;
    char **headers = NULL, **params = NULL;
    enum cma_errc rc = CMA_OK;
    if (!kv_strings(b->headers, b->n_headers, &headers) ||
        !kv_strings(b->query_params, b->n_query_params, &params))
        rc = cma_err_set(err, CMA_ERR_NOMEM, "out of memory");
    struct cma_prom_config pc = {
        .url = b->url.s,
        .use_post = b->use_post,
        .headers = (const char *const *)headers,
        .n_headers = b->n_headers,
        .query_params = (const char *const *)params,
        .n_query_params = b->n_query_params,
        .max_query_bytes =
            (size_t)(b->max_query_length ? b->max_query_length : o->prometheus_max_query_length),
        .token_file = str_or_null(&b->bearer_token_file),
        .basic_username = str_or_null(&b->basic_username),
        .basic_password_file = str_or_null(&b->basic_password_file),
        .ca_file = str_or_null(&b->ca_file),
        .client_cert_file = str_or_null(&b->cert_file),
        .client_key_file = str_or_null(&b->key_file),
        .insecure_skip_verify = b->insecure_skip_verify,
        .auth_config = str_or_null(&b->kubeconfig),
        .auth_incluster = b->in_cluster,
        .timeout_ms = b->timeout_ms ? b->timeout_ms : o->prometheus_timeout_ms,
        .series_timeout_ms = o->prometheus_series_timeout_ms,
        .connect_timeout_ms = o->prometheus_connect_timeout_ms,
        .max_response_bytes = (size_t)o->prometheus_max_response_bytes,
        .max_bytes_in_flight = (size_t)o->prometheus_max_bytes_in_flight,
        .notifier = client_notifier(&slot->log),
    };
    if (rc == CMA_OK)
        rc = cma_prom_new(&pc, &slot->prom, err);
    strings_free(headers, b->n_headers);
    strings_free(params, b->n_query_params);
    return rc;
}

/* The concurrency bound around one backend's queries (backend_limit.h): *ret_backend is what the
 * query cache wraps, so coalesced and cached requests take no slot. */
static int new_limit(const struct runtime *rt, const struct cma_backend *inner, int64_t timeout_ms,
                     struct cma_backend_limit **ret, struct cma_backend *ret_backend)
{
    struct cma_err err;
    cma_err_clear(&err);
    struct cma_backend_limit_config lc = {
        .max_in_flight = (unsigned)rt->opts->prometheus_max_concurrent_queries,
        .timeout_ms = timeout_ms,
    };
    if (cma_backend_limit_new(&lc, inner, ret, &err) != CMA_OK) {
        log_err("backend limit", &err);
        return 1;
    }
    *ret_backend = cma_backend_limit_backend(*ret);
    return 0;
}

/* Backend i of the tables (config entry b, i >= 1): its client, measured under its name, inside
 * its concurrency bound and the query cache. */
static int start_named_backend(struct runtime *rt, size_t i, const struct cma_config_backend *b)
{
    struct cma_err err;
    cma_err_clear(&err);
    rt->query_limits[i] =
        (size_t)(b->max_query_length ? b->max_query_length : rt->opts->prometheus_max_query_length);
    struct backend_slot *s = &rt->slots[i];
    snprintf(s->trace, sizeof(s->trace), "backend %s", b->name.s);
    snprintf(s->creds, sizeof(s->creds), "backend %s credentials", b->name.s);
    s->log = (struct client_log){s->trace, s->creds};
    if (new_named_prom(rt, b, s, &err) != CMA_OK) {
        char what[256];
        snprintf(what, sizeof(what), "backend %s (%s:%u:%u)", b->name.s, b->pos.file, b->pos.line,
                 b->pos.column);
        log_err(what, &err);
        return 1;
    }
    rt->backend_names[i] = b->name.s;
    if (!(s->url_display = cma_url_display(b->url.s))) {
        cma_log_error("out of memory");
        return 1;
    }
    s->named = (struct named_backend){cma_backend_prom(s->prom), b->name.s};
    struct cma_backend named = {&NAMED_OPS, &s->named};
    rt->series_backends[i] = cma_backend_measured(&named, rt->metrics, &s->measured);
    int64_t timeout_ms = b->timeout_ms ? b->timeout_ms : rt->opts->prometheus_timeout_ms;
    struct cma_backend limited;
    if (new_limit(rt, &rt->series_backends[i], timeout_ms, &s->limit, &limited) != 0)
        return 1;
    if (cma_backend_cache_wrap(rt->query_cache, &limited, &rt->query_backends[i], &err) != CMA_OK) {
        log_err("query cache", &err);
        return 1;
    }
    cma_log_info("backend %s: %s (%s, %zu headers, %zu query parameters%s)", b->name.s,
                 s->url_display, b->use_post ? "POST" : "GET", b->n_headers, b->n_query_params,
                 b->max_query_length ? ", maxQueryLength" : "");
    return 0;
}

/* Creates the config's backends (start_named_backend), fills the tables discovery and the rules
 * use ([0]: the flags' backend) and binds the rules. */
static int start_named_backends(struct runtime *rt)
{
    struct cma_err err;
    cma_err_clear(&err);
    size_t n = rt->cfg->n_backends + 1;
    rt->n_backends = n;
    rt->slots = calloc(n, sizeof(*rt->slots));
    rt->backend_names = calloc(n, sizeof(*rt->backend_names));
    rt->series_backends = calloc(n, sizeof(*rt->series_backends));
    rt->query_backends = calloc(n, sizeof(*rt->query_backends));
    rt->query_limits = calloc(n, sizeof(*rt->query_limits));
    if (!rt->slots || !rt->backend_names || !rt->series_backends || !rt->query_backends ||
        !rt->query_limits) {
        cma_log_error("out of memory");
        return 1;
    }
    rt->series_backends[0] = rt->backend;
    rt->query_backends[0] = rt->cached_backend;
    rt->query_limits[0] = (size_t)rt->opts->prometheus_max_query_length;
    for (size_t i = 1; i < n; i++)
        if (start_named_backend(rt, i, &rt->cfg->backends[i - 1]) != 0)
            return 1;
    if (cma_ruleset_bind_backends(rt->rules, rt->backend_names, rt->query_backends,
                                  rt->query_limits, n, &err) != CMA_OK) {
        log_err(NULL, &err);
        return 1;
    }
    return 0;
}

static void named_backends_free(struct runtime *rt)
{
    for (size_t i = 0; rt->slots && i < rt->n_backends; i++) {
        cma_backend_limit_free(rt->slots[i].limit);
        cma_prom_free(rt->slots[i].prom);
        free(rt->slots[i].url_display);
    }
    free(rt->slots);
    free(rt->backend_names);
    free(rt->series_backends);
    free(rt->query_backends);
    free(rt->query_limits);
}

static void auth_list_free(struct auth_lists *l)
{
    for (size_t i = 0; i < l->n; i++)
        free(l->v[i]);
    free(l->v);
    l->v = NULL;
    l->n = 0;
}

static void runtime_done(struct runtime *rt)
{
    cma_server_stop(rt->server);
    cma_watch_stop(rt->watch);
    cma_metricrule_ctl_free(rt->metric_rules); /* before discovery: it publishes there */
    free(rt->mr_policies);
    cma_selector_free(rt->mr_selector);
    cma_ns_limit_free(rt->mr_slots);
    cma_auth_free(rt->auth);
    cma_kube_free(rt->authn_kube);
    cma_kube_free(rt->authz_kube);
    auth_list_free(&rt->allowed_names);
    auth_list_free(&rt->user_headers);
    auth_list_free(&rt->group_headers);
    auth_list_free(&rt->extra_prefixes);
    auth_list_free(&rt->allow_paths);
    cma_discovery_stop(rt->discovery);
    cma_catalog_store_free(rt->store);
    cma_persist_free(rt->catalog_cache);
    cma_ruleset_unref(rt->cache_rules);
    cma_objcache_registry_free(rt->caches);
    cma_kube_free(rt->kube);
    cma_backend_cache_free(rt->query_cache);
    cma_backend_limit_free(rt->limit);
    named_backends_free(rt);
    cma_prom_free(rt->prom);
    free(rt->prom_display);
    cma_ruleset_free(rt->rules);
    cma_config_free(rt->cfg);
    cma_options_free(rt->opts);
    cma_metrics_free(rt->metrics);
}

/* The config files loaded, in merge order, as "a.yaml, b.yaml" (one file: its path as given). */
static const char *config_files(const struct cma_config *cfg, char *out, size_t len)
{
    size_t used = 0;
    out[0] = '\0';
    for (size_t i = 0; i < cfg->n_files && used < len; i++) {
        int n = snprintf(out + used, len - used, "%s%s", i ? ", " : "", cfg->files[i]);
        used += n > 0 ? (size_t)n : 0;
    }
    return out;
}

/* Logs the config's warnings (rules prometheus-adapter would load but cannot serve, ...): as
 * warnings, or as errors that stop start-up with --strict-config. */
static int log_config_warnings(const struct runtime *rt)
{
    size_t n = rt->rules->n_warnings;
    bool strict = rt->opts->strict_config;
    for (size_t i = 0; i < n; i++) {
        if (strict)
            cma_log_error("%s", rt->rules->warnings[i]);
        else
            cma_log_warn("%s", rt->rules->warnings[i]);
    }
    if (strict && n > 0) {
        char files[1024];
        cma_log_error("%s: %zu config warning%s and --strict-config: not starting",
                      config_files(rt->cfg, files, sizeof(files)), n, n == 1 ? "" : "s");
        return 1;
    }
    return 0;
}

static int load_rules(struct runtime *rt)
{
    struct cma_err err;
    cma_err_clear(&err);
    if (rt->opts->n_configs == 0) {
        cma_log_error("no metrics discovery configuration file specified (make sure to use "
                      "--config)");
        return 1;
    }
    if (cma_config_load_paths((const char *const *)rt->opts->configs, rt->opts->n_configs, &rt->cfg,
                              &err) != CMA_OK ||
        cma_ruleset_compile(rt->cfg, &rt->rules, &err) != CMA_OK) {
        log_err(NULL, &err);
        return 1;
    }
    if (log_config_warnings(rt) != 0)
        return 1;
    if (cma_options_validate(rt->opts, rt->rules->n_rules > 0, &err) != CMA_OK) {
        log_err(NULL, &err);
        return 1;
    }
    return 0;
}

/* Identical queries of the request handlers go to the backend once while in flight, and their
 * answers are reused for --metrics-cache-ttl (discovery's series listings are not cached). */
static int start_query_cache(struct runtime *rt)
{
    struct cma_err err;
    cma_err_clear(&err);
    struct cma_backend_cache_config cc = {
        .ttl_ms = rt->opts->metrics_cache_ttl_ms,
        .max_bytes = (size_t)rt->opts->metrics_cache_max_bytes,
        .query_timeout_ms = rt->opts->prometheus_timeout_ms,
    };
    for (size_t i = 0; i < rt->cfg->n_backends; i++) /* the longest a query may take */
        if (rt->cfg->backends[i].timeout_ms > cc.query_timeout_ms)
            cc.query_timeout_ms = rt->cfg->backends[i].timeout_ms;
    struct cma_backend_cache *c = NULL;
    struct cma_backend limited;
    if (new_limit(rt, &rt->backend, rt->opts->prometheus_timeout_ms, &rt->limit, &limited) != 0)
        return 1;
    if (cma_backend_cache_new(&cc, &c, &err) != CMA_OK ||
        cma_backend_cache_wrap(c, &limited, &rt->cached_backend, &err) != CMA_OK) {
        cma_backend_cache_free(c);
        log_err("query cache", &err);
        return 1;
    }
    rt->query_cache = c;
    cma_log_v(2,
              "query cache: --metrics-cache-ttl=%lldms, --metrics-cache-max-bytes=%lld, "
              "--prometheus-max-concurrent-queries=%lld per backend",
              (long long)rt->opts->metrics_cache_ttl_ms,
              (long long)rt->opts->metrics_cache_max_bytes,
              (long long)rt->opts->prometheus_max_concurrent_queries);
    return 0;
}

/* The config reload metrics (Prometheus' own names): the load at start-up counts as the first
 * successful one. Each later attempt (record_reload) counts in
 * custom_metrics_adapter_config_reloads_total{result="success"|"failure"}, and sets the other two
 * after a success (the gauge to 0 after a failure). */
static void register_reload_metrics(struct runtime *rt)
{
    static const char *const result[] = {"result"};
    struct cma_metrics *m = rt->metrics;
    struct cma_metric *total = cma_metrics_counter(
        m, "custom_metrics_adapter_config_reloads_total",
        "Config reloads attempted after start-up, by result (success, failure).", result, 1);
    cma_metric_add(total, (const char *const[]){"success"}, 0);
    cma_metric_add(total, (const char *const[]){"failure"}, 0);
    rt->m_reloads = total;
    rt->m_reload_ok = cma_metrics_gauge(m, "custom_metrics_adapter_config_last_reload_successful",
                                        "Whether the last config load or reload succeeded (1) or "
                                        "was refused, the previous config serving on (0).",
                                        NULL, 0);
    rt->m_reload_time =
        cma_metrics_gauge(m, "custom_metrics_adapter_config_last_reload_success_timestamp_seconds",
                          "Unix time of the last successful config load or reload.", NULL, 0);
    cma_metric_set(rt->m_reload_ok, NULL, 1);
    cma_metric_set(rt->m_reload_time, NULL, (double)cma_clock_wall_ms() / 1e3);
}

static void record_reload(struct runtime *rt, bool ok)
{
    cma_metric_inc(rt->m_reloads, (const char *const[]){ok ? "success" : "failure"});
    cma_metric_set(rt->m_reload_ok, NULL, ok ? 1 : 0);
    if (ok)
        cma_metric_set(rt->m_reload_time, NULL, (double)cma_clock_wall_ms() / 1e3);
}

static int start_clients(struct runtime *rt)
{
    struct cma_err err;
    cma_err_clear(&err);
    const struct cma_options *o = rt->opts;
    struct cma_prom_config pc = {
        .url = o->prometheus_url,
        .use_post = strcmp(o->prometheus_verb, "POST") == 0,
        .headers = (const char *const *)o->prometheus_headers,
        .n_headers = o->n_prometheus_headers,
        .token_file = o->prometheus_token_file,
        .basic_username = o->prometheus_basic_auth_username,
        .basic_password_file = o->prometheus_basic_auth_password_file,
        .ca_file = o->prometheus_ca_file,
        .client_cert_file = o->prometheus_client_tls_cert_file,
        .client_key_file = o->prometheus_client_tls_key_file,
        .insecure_skip_verify = o->prometheus_insecure_skip_tls_verify,
        .auth_config = o->prometheus_auth_config,
        .auth_incluster = o->prometheus_auth_incluster,
        .timeout_ms = o->prometheus_timeout_ms,
        .series_timeout_ms = o->prometheus_series_timeout_ms,
        .connect_timeout_ms = o->prometheus_connect_timeout_ms,
        .max_response_bytes = (size_t)o->prometheus_max_response_bytes,
        .max_bytes_in_flight = (size_t)o->prometheus_max_bytes_in_flight,
        .max_query_bytes = (size_t)o->prometheus_max_query_length,
        .notifier = client_notifier(&PROM_LOG),
    };
    if (cma_metrics_new(&rt->metrics, &err) != CMA_OK ||
        cma_prom_new(&pc, &rt->prom, &err) != CMA_OK) {
        log_err("prometheus client", &err);
        return 1;
    }
    if (!(rt->prom_display = cma_url_display(o->prometheus_url))) {
        cma_log_error("out of memory");
        return 1;
    }
    register_reload_metrics(rt);
    rt->prom_named = (struct named_backend){cma_backend_prom(rt->prom), rt->prom_display};
    struct cma_backend prom = {&NAMED_OPS, &rt->prom_named};
    rt->backend = cma_backend_measured(&prom, rt->metrics, &rt->backend_state);
    if (start_query_cache(rt) != 0 || start_named_backends(rt) != 0)
        return 1;
    if (cma_kube_new(o->lister_kubeconfig, o->prometheus_timeout_ms, &rt->kube, &err) != CMA_OK) {
        log_err("kubernetes client", &err);
        return 1;
    }
    logged_kube(rt->kube);
    cma_log_info("backend %s, kube-apiserver %s", rt->prom_display, cma_kube_server(rt->kube));
    /* The pod watch cache (LIST+WATCH in its own thread); other resources' on first use. */
    struct cma_objcache_observer cache_log = {.on_event = log_cache_event};
    if (cma_objcache_registry_new_observed(rt->kube, &cache_log, &rt->caches, &err) != CMA_OK) {
        log_err("pod watch cache", &err);
        return 1;
    }
    return 0;
}

/* The namespace this pod runs in: POD_NAMESPACE (Downward API) or the service account's. */
static char *own_namespace(void)
{
    const char *env = getenv("POD_NAMESPACE");
    if (env && env[0])
        return strdup(env);
    return read_secret("/var/run/secrets/kubernetes.io/serviceaccount/namespace");
}

/* The inode of path, 0 when there is none. */
static ino_t inode_of(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 ? st.st_ino : 0;
}

/* Self-signed certificate: localhost and loopback IPs (tls.c) plus the Service's DNS names.
 * tls.c writes a new pair by rename into <cert_dir>/apiserver.crt (tls.h), so a certificate
 * whose inode changed was generated now: that is logged here. */
static enum cma_errc self_signed(const struct cma_options *o, char *cert, size_t cert_len,
                                 char *key, size_t key_len, struct cma_err *err)
{
    char before_path[1024];
    size_t dlen = o->cert_dir ? strlen(o->cert_dir) : 0;
    snprintf(before_path, sizeof(before_path), "%s%sapiserver.crt", o->cert_dir ? o->cert_dir : "",
             dlen && o->cert_dir[dlen - 1] == '/' ? "" : "/");
    ino_t before = inode_of(before_path);
    char names[4][512];
    const char *extra[4];
    size_t n = 0;
    char *ns = own_namespace();
    if (ns && ns[0] && o->service_name && o->service_name[0]) {
        snprintf(names[0], sizeof(names[0]), "%s", o->service_name);
        snprintf(names[1], sizeof(names[1]), "%s.%s", o->service_name, ns);
        snprintf(names[2], sizeof(names[2]), "%s.%s.svc", o->service_name, ns);
        snprintf(names[3], sizeof(names[3]), "%s.%s.svc.cluster.local", o->service_name, ns);
        for (n = 0; n < 4; n++)
            extra[n] = names[n];
    }
    free(ns);
    enum cma_errc rc =
        cma_tls_ensure_self_signed(o->cert_dir, extra, n, cert, cert_len, key, key_len, err);
    if (rc == CMA_OK && (before == 0 || inode_of(cert) != before))
        cma_log_info("generated a self-signed serving certificate: %s, %s", cert, key);
    return rc;
}

/* "a, b,,c" → {"a","b","c"}; false when out of memory. */
static bool split_commas(const char *text, struct auth_lists *l)
{
    for (const char *p = text; p && *p;) {
        size_t len = strcspn(p, ",");
        const char *b = p, *e = p + len;
        while (b < e && *b == ' ')
            b++;
        while (e > b && e[-1] == ' ')
            e--;
        if (e > b) {
            char *item = strndup(b, (size_t)(e - b));
            char **grown = item ? realloc(l->v, (l->n + 1) * sizeof *grown) : NULL;
            if (!grown) {
                free(item);
                return false;
            }
            grown[l->n++] = item;
            l->v = grown;
        }
        p += len + (p[len] == ',');
    }
    return true;
}

/* Delegated authentication/authorization (unless --insecure-disable-auth), and the union of the
 * requestheader and client CAs written into the cert dir for the server's CertificateRequest
 * (rt->client_ca_union, "" when there is none). */
/* What the auth layer decided on its own (cma_auth_options.on_event): a warning line. */
static void log_auth_event(void *ctx, const char *what, const struct cma_err *err)
{
    (void)ctx;
    cma_log_warn("%s: %s", what, err->msg);
}

static int start_auth(struct runtime *rt)
{
    struct cma_err err;
    cma_err_clear(&err);
    const struct cma_options *o = rt->opts;
    rt->client_ca_union[0] = '\0';
    if (o->insecure_disable_auth) {
        cma_log_warn("--insecure-disable-auth: every request is served without authentication "
                     "or authorization");
        return 0;
    }
    if ((o->authentication_kubeconfig &&
         cma_kube_new(o->authentication_kubeconfig, 10000, &rt->authn_kube, &err) != CMA_OK) ||
        (o->authorization_kubeconfig &&
         cma_kube_new(o->authorization_kubeconfig, 10000, &rt->authz_kube, &err) != CMA_OK)) {
        log_err("authentication/authorization kubeconfig", &err);
        return 1;
    }
    logged_kube(rt->authn_kube);
    logged_kube(rt->authz_kube);
    if (!split_commas(o->requestheader_allowed_names, &rt->allowed_names) ||
        !split_commas(o->requestheader_username_headers, &rt->user_headers) ||
        !split_commas(o->requestheader_group_headers, &rt->group_headers) ||
        !split_commas(o->requestheader_extra_headers_prefix, &rt->extra_prefixes) ||
        !split_commas(o->authorization_always_allow_paths, &rt->allow_paths)) {
        cma_log_error("out of memory");
        return 1;
    }
    struct cma_auth_options ao = {
        .requestheader_client_ca_file = o->requestheader_client_ca_file,
        .requestheader_allowed_names = rt->allowed_names.v,
        .n_requestheader_allowed_names = rt->allowed_names.n,
        .requestheader_username_headers = rt->user_headers.v,
        .n_requestheader_username_headers = rt->user_headers.n,
        .requestheader_group_headers = rt->group_headers.v,
        .n_requestheader_group_headers = rt->group_headers.n,
        .requestheader_extra_headers_prefix = rt->extra_prefixes.v,
        .n_requestheader_extra_headers_prefix = rt->extra_prefixes.n,
        .client_ca_file = o->client_ca_file,
        .skip_lookup = o->authentication_skip_lookup,
        .tolerate_lookup_failure = o->authentication_tolerate_lookup_failure,
        .token_cache_ttl_ms = o->authentication_token_webhook_cache_ttl_ms,
        .authorized_ttl_ms = o->authorization_webhook_cache_authorized_ttl_ms,
        .unauthorized_ttl_ms = o->authorization_webhook_cache_unauthorized_ttl_ms,
        .always_allow_paths = rt->allow_paths.v,
        .n_always_allow_paths = rt->allow_paths.n,
        .authn_kube = rt->authn_kube ? rt->authn_kube : rt->kube,
        .authz_kube = rt->authz_kube ? rt->authz_kube : rt->kube,
        .metrics = rt->metrics,
        .on_event = log_auth_event,
    };
    if (cma_auth_new(&ao, &rt->auth, &err) != CMA_OK) {
        log_err("delegated authentication", &err);
        return 1;
    }
    char *pem = cma_auth_client_ca_pem(rt->auth);
    if (pem && pem[0] && o->cert_dir && *o->cert_dir) {
        snprintf(rt->client_ca_union, sizeof rt->client_ca_union, "%s/client-ca-union.crt",
                 o->cert_dir);
        /* Atomically: adapters sharing a --cert-dir must never read each other's half-written
         * file (an empty CA list fails the server's start). */
        cma_err_clear(&err);
        if (cma_file_replace(rt->client_ca_union, pem, strlen(pem), 0644, &err) != CMA_OK) {
            cma_log_warn("%s; client certificates are requested without a CA list", err.msg);
            rt->client_ca_union[0] = '\0';
        }
    }
    free(pem);
    return 0;
}

static void save_catalog_to(struct cma_persist *p, const struct cma_catalog *c)
{
    struct cma_err err;
    cma_err_clear(&err);
    bool written = false;
    if (cma_persist_save(p, c, &written, &err) != CMA_OK)
        cma_log_warn("catalog cache: cannot write %s: %s; the previous file stays",
                     cma_persist_path(p), err.msg);
    else if (written)
        cma_log_v(2, "catalog cache: wrote %s", cma_persist_path(p));
}

/* The store's publish hook (discovery thread): writes each new catalog to the cache file, when it
 * was built from the rules the file's fingerprint covers (after a config reload, a relist that
 * began with the previous rules is not written under the new fingerprint). */
static void save_catalog(void *ctx, const struct cma_catalog *c)
{
    struct runtime *rt = ctx;
    const struct cma_ruleset *rules = cma_catalog_rules(c);
    if (rules && rules->base) /* merged with MetricRules: the file keeps the config's entries */
        rules = rules->base;
    pthread_mutex_lock(&rt->cache_mu);
    if (rt->catalog_cache && rules == rt->cache_rules)
        save_catalog_to(rt->catalog_cache, c);
    pthread_mutex_unlock(&rt->cache_mu);
}

/* A further config file for the fingerprint: its name and bytes (NULL when unreadable). */
static char *config_file_part(const char *path)
{
    FILE *f = fopen(path, "rb");
    char *text = NULL;
    size_t len = 0;
    FILE *mem = f ? open_memstream(&text, &len) : NULL;
    bool ok = mem != NULL && fprintf(mem, "%s\n", path) >= 0; /* parts are C strings */
    for (int c; ok && (c = fgetc(f)) != EOF;)
        ok = fputc(c ? c : ' ', mem) != EOF;
    if (mem && fclose(mem) != 0)
        ok = false;
    if (f)
        fclose(f);
    if (!ok) {
        free(text);
        return NULL;
    }
    return text;
}

/* The catalog cache's fingerprint: the config files' bytes and what decides which series a
 * relist finds (backend URL and headers, the effective max age, the cluster). */
static enum cma_errc cache_fingerprint(const struct runtime *rt, const struct cma_config *cfg,
                                       uint8_t fp[CMA_PERSIST_FINGERPRINT_LEN], struct cma_err *err)
{
    const struct cma_options *o = rt->opts;
    int64_t max_age_ms =
        o->metrics_max_age_ms ? o->metrics_max_age_ms : o->metrics_relist_interval_ms;
    char max_age[32];
    snprintf(max_age, sizeof(max_age), "%lld", (long long)max_age_ms);
    if (cfg->n_files == 0) /* a loaded config has at least one file */
        return cma_err_set(err, CMA_ERR_INTERNAL, "no config file to fingerprint");
    size_t n_more = cfg->n_files - 1, n = 3 + o->n_prometheus_headers + n_more;
    const char **parts = calloc(n + 1, sizeof(*parts));
    char **more = calloc(n_more + 1, sizeof(*more));
    if (!parts || !more) {
        free(parts);
        free(more);
        return cma_err_set(err, CMA_ERR_NOMEM, "out of memory");
    }
    enum cma_errc rc = CMA_OK;
    for (size_t i = 0; rc == CMA_OK && i < n_more; i++)
        if (!(more[i] = config_file_part(cfg->files[i + 1])))
            rc = cma_err_set(err, CMA_ERR_IO, "cannot read %s", cfg->files[i + 1]);
    if (rc == CMA_OK) {
        parts[0] = o->prometheus_url;
        parts[1] = max_age;
        parts[2] = cma_kube_server(rt->kube);
        for (size_t i = 0; i < o->n_prometheus_headers; i++)
            parts[3 + i] = o->prometheus_headers[i];
        for (size_t i = 0; i < n_more; i++)
            parts[3 + o->n_prometheus_headers + i] = more[i];
        rc = cma_persist_fingerprint(cfg->files[0], parts, n, fp, err);
    }
    for (size_t i = 0; i < n_more; i++)
        free(more[i]);
    free(more);
    free(parts);
    return rc;
}

/* --catalog-cache-file: publishes the cached catalog before the first relist (discovery answers
 * at once after a restart, even with the backend down) and writes every later one. A missing
 * file is normal on a first start; any other unusable file is ignored with one warning. */
static void start_catalog_cache(struct runtime *rt)
{
    const char *path = rt->opts->catalog_cache_file;
    if (!path || !path[0])
        return;
    struct cma_err err;
    cma_err_clear(&err);
    uint8_t fp[CMA_PERSIST_FINGERPRINT_LEN];
    if (cache_fingerprint(rt, rt->cfg, fp, &err) != CMA_OK ||
        cma_persist_new(path, fp, &rt->catalog_cache, &err) != CMA_OK) {
        cma_log_warn("catalog cache: off: %s", err.msg);
        return;
    }
    struct cma_catalog *c = NULL;
    enum cma_errc rc = cma_persist_load(rt->catalog_cache, rt->rules, &c, &err);
    if (rc == CMA_OK) {
        char when[21];
        cma_log_info("catalog cache: serving %zu custom and %zu external metrics from %s (listed "
                     "%s) until the first successful relist",
                     cma_catalog_count(c), cma_catalog_count_external(c), path,
                     cma_clock_format_rfc3339(cma_catalog_built_ms(c), when));
        cma_catalog_hold_rules(c, rt->rules);
        cma_catalog_store_publish(rt->store, c);
    } else if (rc == CMA_ERR_NOT_FOUND) {
        cma_log_info("catalog cache: %s does not exist yet; the first successful relist writes "
                     "it",
                     path);
    } else {
        char line[1024];
        cma_err_format_pos(&err, line, sizeof(line));
        cma_log_warn("catalog cache ignored: %s; discovery waits for the first relist", line);
    }
    rt->cache_rules = cma_ruleset_ref(rt->rules);
    cma_catalog_store_on_publish(rt->store, save_catalog, rt);
}

/* ---- config reload (the watch thread: a change in a config directory, or SIGHUP) ---------- */

/* After a reload the cache file's fingerprint covers the new config, and only snapshots built
 * from the new rules are written (save_catalog). */
static void refresh_catalog_cache(struct runtime *rt, const struct cma_ruleset *rs,
                                  const struct cma_config *cfg)
{
    if (!rt->catalog_cache) /* off, or turned off by an earlier reload; only this thread sets it */
        return;
    struct cma_err err;
    cma_err_clear(&err);
    uint8_t fp[CMA_PERSIST_FINGERPRINT_LEN];
    struct cma_persist *p = NULL;
    if (cache_fingerprint(rt, cfg, fp, &err) != CMA_OK ||
        cma_persist_new(rt->opts->catalog_cache_file, fp, &p, &err) != CMA_OK)
        cma_log_warn("catalog cache: off after the config reload: %s", err.msg);
    pthread_mutex_lock(&rt->cache_mu);
    struct cma_persist *old = rt->catalog_cache;
    const struct cma_ruleset *old_rules = rt->cache_rules;
    rt->catalog_cache = p;
    rt->cache_rules = p ? cma_ruleset_ref(rs) : NULL;
    pthread_mutex_unlock(&rt->cache_mu);
    cma_persist_free(old);
    cma_ruleset_unref(old_rules);
}

/* What start-up checks after compiling, for a reloaded ruleset: its warnings (errors with
 * --strict-config) and the flags that depend on the rules. */
static enum cma_errc check_reloaded(const struct runtime *rt, const struct cma_ruleset *rs,
                                    struct cma_err *err)
{
    bool strict = rt->opts->strict_config;
    for (size_t i = 0; i < rs->n_warnings; i++) {
        if (strict)
            cma_log_error("%s", rs->warnings[i]);
        else
            cma_log_warn("%s", rs->warnings[i]);
    }
    if (strict && rs->n_warnings > 0)
        return cma_err_set(err, CMA_ERR_CONFIG_VALUE,
                           "%s (%zu config warning%s and --strict-config)", rs->warnings[0],
                           rs->n_warnings, rs->n_warnings == 1 ? "" : "s");
    return cma_options_validate(rt->opts, rs->n_rules > 0, err);
}

/* ---- a reload keeps the backends the process started with ---- */

static bool same_str(const struct cma_config_str *a, const struct cma_config_str *b)
{
    return a->set == b->set && (!a->set || cma_str_eq(a->s, b->s));
}

static bool same_kv(const struct cma_config_kv *a, size_t na, const struct cma_config_kv *b,
                    size_t nb)
{
    if (na != nb)
        return false;
    for (size_t i = 0; i < na; i++)
        if (!cma_str_eq(a[i].key, b[i].key) || !cma_str_eq(a[i].value, b[i].value))
            return false;
    return true;
}

/* The same metricRules: block (allowed, namespaces in order, tenantFromNamespace). */
static bool same_mr(const struct cma_config_backend *a, const struct cma_config_backend *b)
{
    if (a->mr_allowed != b->mr_allowed || a->n_mr_namespaces != b->n_mr_namespaces ||
        a->mr_tenant_from_namespace != b->mr_tenant_from_namespace)
        return false;
    for (size_t i = 0; i < a->n_mr_namespaces; i++)
        if (!cma_str_eq(a->mr_namespaces[i], b->mr_namespaces[i]))
            return false;
    return true;
}

/* The first setting in which a reloaded backend differs from the one the process started with
 * (its name, never its value: some are secrets), or NULL when they are the same. */
static const char *backend_change(const struct cma_config_backend *was,
                                  const struct cma_config_backend *now)
{
    const struct {
        const char *name;
        bool same;
    } settings[] = {
        {"url", same_str(&was->url, &now->url)},
        {"verb", was->use_post == now->use_post},
        {"timeout", was->timeout_ms == now->timeout_ms},
        {"headers", same_kv(was->headers, was->n_headers, now->headers, now->n_headers)},
        {"queryParameters",
         same_kv(was->query_params, was->n_query_params, now->query_params, now->n_query_params)},
        {"maxQueryLength", was->max_query_length == now->max_query_length},
        {"bearerTokenFile", same_str(&was->bearer_token_file, &now->bearer_token_file)},
        {"basicAuth.username", same_str(&was->basic_username, &now->basic_username)},
        {"basicAuth.passwordFile", same_str(&was->basic_password_file, &now->basic_password_file)},
        {"tls.caFile", same_str(&was->ca_file, &now->ca_file)},
        {"tls.certFile", same_str(&was->cert_file, &now->cert_file)},
        {"tls.keyFile", same_str(&was->key_file, &now->key_file)},
        {"tls.insecureSkipVerify", was->insecure_skip_verify == now->insecure_skip_verify},
        {"kubeconfig", same_str(&was->kubeconfig, &now->kubeconfig)},
        {"inCluster", was->in_cluster == now->in_cluster},
        {"metricRules", same_mr(was, now)},
    };
    for (size_t i = 0; i < sizeof(settings) / sizeof(settings[0]); i++)
        if (!settings[i].same)
            return settings[i].name;
    return NULL;
}

/* Backends are created at start-up (their clients, limits and cache entries live as long as the
 * process): a reloaded config may drop a backend or keep it as it was, but a backend it adds or
 * defines differently is refused, at that backend, naming what changed. */
static enum cma_errc same_backends(const struct cma_config *started, const struct cma_config *cfg,
                                   struct cma_err *err)
{
    for (size_t i = 0; i < cfg->n_backends; i++) {
        const struct cma_config_backend *now = &cfg->backends[i], *was = NULL;
        for (size_t j = 0; !was && j < started->n_backends; j++)
            if (cma_str_eq(started->backends[j].name.s, now->name.s))
                was = &started->backends[j];
        const char *change = was ? backend_change(was, now) : NULL;
        if (!was || change)
            return cma_err_set_at(
                err, CMA_ERR_CONFIG_VALUE, now->pos.file, now->pos.line, now->pos.column,
                "backend \"%s\" %s%s%s: a change to backends needs a restart "
                "(backends are created at start-up)",
                now->name.s, was ? "changed (" : "is new", was ? change : "", was ? ")" : "");
    }
    return CMA_OK;
}

/* The watch's reload function: the new config is loaded, compiled and checked completely
 * before discovery gets it (and relists at once); a refused one changes nothing. */
static enum cma_errc reload_config(void *ctx, const char *why, struct cma_err *err)
{
    struct runtime *rt = ctx;
    struct cma_config *cfg = NULL;
    struct cma_ruleset *rs = NULL;
    cma_log_info("config: reloading after %s", why);
    enum cma_errc rc = cma_config_load_paths((const char *const *)rt->opts->configs,
                                             rt->opts->n_configs, &cfg, err);
    if (rc == CMA_OK && (rc = cma_ruleset_compile(cfg, &rs, err)) == CMA_OK) {
        cma_ruleset_own_config(rs, cfg);
        rc = same_backends(rt->cfg, cfg, err);
        if (rc == CMA_OK)
            rc = cma_ruleset_bind_backends(rs, rt->backend_names, rt->query_backends,
                                           rt->query_limits, rt->n_backends, err);
        if (rc == CMA_OK)
            rc = check_reloaded(rt, rs, err);
    } else {
        cma_config_free(cfg);
    }
    record_reload(rt, rc == CMA_OK);
    if (rc != CMA_OK) {
        cma_ruleset_free(rs); /* frees cfg with it */
        char line[1024];
        cma_err_format_pos(err, line, sizeof(line));
        cma_log_error("config reload refused, the previous config keeps serving: %s", line);
        return rc;
    }
    char files[1024];
    cma_log_info("config reloaded: %s: %zu rules, %zu externalRules, resourceRules %s; relisting",
                 config_files(cfg, files, sizeof(files)), rs->n_rules, rs->n_external_rules,
                 rs->has_resource_rules ? "present" : "absent");
    refresh_catalog_cache(rt, rs, cfg);
    if (rt->metric_rules) /* merged with the current MetricRules, then to discovery */
        rc = cma_metricrule_ctl_set_config(rt->metric_rules, rs, err);
    else
        cma_discovery_set_rules(rt->discovery, rs);
    if (rc != CMA_OK)
        cma_log_error("config reload: cannot merge with the MetricRules: %s", err->msg);
    cma_ruleset_free(rs); /* discovery and the snapshots hold their own references */
    return rc;
}

/* ---- MetricRules (--enable-metric-rules) --------------------------------------------------- */

/* The controller's merged ruleset goes to discovery exactly as a config reload's. */
static void publish_merged(void *ctx, const struct cma_ruleset *merged)
{
    struct runtime *rt = ctx;
    cma_discovery_set_rules(rt->discovery, merged);
}

/* The MetricRule controller and its watch; nothing at all when the flag is off. MetricRules may
 * use the flags' backend; the config's named backends are not offered to them. */
static int start_metric_rules(struct runtime *rt)
{
    if (!rt->opts->enable_metric_rules)
        return 0;
    struct cma_err err;
    cma_err_clear(&err);
    /* which backends MetricRules may name: the flags' one, and config entries that allow it */
    if (!(rt->mr_policies = calloc(rt->n_backends, sizeof(*rt->mr_policies)))) {
        cma_log_error("out of memory");
        return 1;
    }
    rt->mr_policies[0].allowed = true;
    for (size_t i = 1; i < rt->n_backends; i++) {
        const struct cma_config_backend *b = &rt->cfg->backends[i - 1];
        rt->mr_policies[i] = (struct cma_metricrule_ctl_backend_policy){
            .allowed = b->mr_allowed,
            .namespaces = (const char *const *)b->mr_namespaces,
            .n_namespaces = b->n_mr_namespaces,
            .tenant_from_namespace = b->mr_tenant_from_namespace,
        };
    }
    const char *sel = rt->opts->metric_rules_namespace_selector;
    if (cma_selector_parse(sel ? sel : "", sel ? strlen(sel) : 0, &rt->mr_selector, &err) !=
        CMA_OK) {
        log_err("metric rules: --metric-rules-namespace-selector", &err);
        return 1;
    }
    if (cma_ns_limit_new((size_t)rt->opts->metric_rules_max_concurrent_queries, 0, &rt->mr_slots,
                         &err) != CMA_OK) {
        log_err("metric rules", &err);
        return 1;
    }
    bool selecting = !cma_selector_is_empty(rt->mr_selector);
    struct cma_metricrule_ctl_config mc = {
        .ns_label = rt->opts->metric_rules_namespace_label,
        .ns_selector = rt->mr_selector,
        .namespaces =
            selecting ? cma_objcache_registry_get(rt->caches, "", "v1", "namespaces") : NULL,
        .limits = {(size_t)rt->opts->metric_rules_max_per_namespace,
                   (size_t)rt->opts->metric_rules_max_metrics_per_namespace},
        .store = rt->store,
        .backend_names = rt->backend_names,
        .queries = rt->query_backends,
        .max_query_bytes = rt->query_limits,
        .policies = rt->mr_policies,
        .n_backends = rt->n_backends,
        .publish = publish_merged,
        .ctx = rt,
    };
    if (cma_metricrule_ctl_new(&mc, rt->rules, &rt->metric_rules, &err) != CMA_OK ||
        cma_metricrule_ctl_start(rt->metric_rules, rt->kube, &err) != CMA_OK) {
        log_err("metric rules", &err);
        return 1;
    }
    cma_log_info("metric rules: watching MetricRules (%s/%s), queries restricted by the label %s",
                 CMA_METRICRULE_GROUP, CMA_METRICRULE_VERSION,
                 rt->opts->metric_rules_namespace_label);
    return 0;
}

/* The watch on the config paths. Without one (inotify unavailable, e.g. at the per-user instance
 * limit) changes are not noticed, and SIGHUP reloads on main's thread. */
static void start_watch(struct runtime *rt)
{
    struct cma_err err;
    cma_err_clear(&err);
    struct cma_watch_config wc = {.paths = (const char *const *)rt->opts->configs,
                                  .n_paths = rt->opts->n_configs,
                                  .reload = reload_config,
                                  .ctx = rt};
    if (cma_watch_start(&wc, &rt->watch, &err) != CMA_OK)
        cma_log_warn("config: changes are not watched (%s); SIGHUP reloads", err.msg);
}

static void reload_on_sighup(struct runtime *rt)
{
    cma_log_info("received SIGHUP: reloading the config");
    if (rt->watch) {
        cma_watch_request(rt->watch);
        return;
    }
    struct cma_err err;
    cma_err_clear(&err);
    reload_config(rt, "SIGHUP", &err);
}

static int start_serving(struct runtime *rt, struct cma_app *app)
{
    struct cma_err err;
    cma_err_clear(&err);
    const struct cma_options *o = rt->opts;
    if (cma_catalog_store_new(&rt->store) != CMA_OK)
        return 1;
    start_catalog_cache(rt);
    struct cma_discovery_config dc = {
        .backend = rt->backend,
        .backends = rt->series_backends,
        .n_backends = rt->n_backends,
        .metrics = rt->metrics,
        .kube = rt->kube,
        .rules = rt->rules,
        .store = rt->store,
        .relist_interval_ms = o->metrics_relist_interval_ms,
        .max_age_ms = o->metrics_max_age_ms,
        .discovery_interval_ms = o->discovery_interval_ms,
    };
    if (cma_discovery_start(&dc, &rt->discovery, &err) != CMA_OK) {
        log_err(NULL, &err);
        return 1;
    }
    if (start_metric_rules(rt) != 0)
        return 1;
    start_watch(rt);
    char cert[1024], key[1024];
    const char *cert_file = o->tls_cert_file, *key_file = o->tls_private_key_file;
    if (cert_file && key_file) {
        if (cma_tls_check_pair(cert_file, key_file, &err) != CMA_OK) {
            log_err("serving certificate", &err);
            return 1;
        }
    } else if (cert_file || key_file) {
        cma_log_error("--tls-cert-file and --tls-private-key-file must be given together");
        return 1;
    } else {
        if (self_signed(o, cert, sizeof(cert), key, sizeof(key), &err) != CMA_OK) {
            log_err("self-signed certificate", &err);
            return 1;
        }
        cert_file = cert;
        key_file = key;
        cma_log_info("serving with the self-signed certificate %s", cert);
    }
    if (start_auth(rt) != 0)
        return 1;
    *app = (struct cma_app){
        .auth = rt->auth,
        .opts = o,
        .rules = rt->rules,
        .backend = rt->cached_backend,
        .kube = rt->kube,
        .caches = rt->caches,
        .store = rt->store,
        .discovery = rt->discovery,
        .reload = rt->watch,
        .mr_slots = rt->mr_slots,
        /* with MetricRules both groups are served, whatever the config holds */
        .serve_custom =
            (rt->rules->n_rules > 0 || o->enable_metric_rules) && !o->disable_custom_metrics,
        .serve_external = (rt->rules->n_external_rules > 0 || o->enable_metric_rules) &&
                          !o->disable_external_metrics,
        .serve_resource = rt->rules->has_resource_rules && !o->disable_resource_metrics,
    };
    cma_app_register_metrics(app, rt->metrics);
    struct cma_server_config sc = {
        .bind_address = o->bind_address,
        .port = o->secure_port,
        .cert_file = cert_file,
        .key_file = key_file,
        .tls_min_version = o->tls_min_version,
        .tls_cipher_suites = o->tls_cipher_suites,
        .max_connections = (unsigned)o->max_connections,
        .max_connections_per_client = (unsigned)o->max_connections_per_client,
        .max_requests_inflight = (unsigned)o->max_requests_inflight,
        .tls_handshake_timeout_ms = o->tls_handshake_timeout_ms,
        .request_header_timeout_ms = o->request_header_timeout_ms,
        .keep_alive_timeout_ms = o->keep_alive_timeout_ms,
        .max_request_header_bytes = (size_t)o->max_request_header_bytes,
        .client_ca_file = rt->client_ca_union[0] ? rt->client_ca_union : NULL,
        .try_inline = cma_app_try_inline, /* discovery from memory on the event thread */
    };
    if (cma_server_start(&sc, cma_app_handle, app, &rt->server, &err) != CMA_OK) {
        log_err("server", &err);
        return 1;
    }
    cma_log_info("serving securely on %s:%d", o->bind_address, cma_server_port(rt->server));
    return 0;
}

/* The prometheus-community prometheus-adapter chart passes "/adapter" as the first container
 * argument (upstream's flag parser skips non-flag arguments); dropping it makes this image a
 * drop-in for that chart. Only the first argument, only that exact string: anything else that is
 * not a flag stays an error. */
static void drop_chart_argument(int *argc, char ***argv)
{
    if (*argc > 1 && strcmp((*argv)[1], "/adapter") == 0) {
        (*argv)[1] = (*argv)[0];
        (*argv)++;
        (*argc)--;
    }
}

/* Graceful shutdown: new connections are refused at once; requests already received get up
 * to --shutdown-grace-period. Handlers still running then use everything main owns, so the
 * process exits without tearing down (status 0: the shutdown was asked for). */
static void drain_or_exit(struct runtime *rt, int sig)
{
    int64_t grace = rt->opts->shutdown_grace_period_ms;
    cma_log_info("received signal %d, shutting down: no new connections, up to %lldms for "
                 "requests in flight",
                 sig, (long long)grace);
    if (cma_server_drain(rt->server, grace))
        return;
    cma_log_warn("requests still in flight after --shutdown-grace-period=%lldms; exiting anyway",
                 (long long)grace);
    fflush(NULL);
    _exit(0);
}

/* --check-config: the config loaded (load_rules); says so and tears the runtime down. */
static int check_config(struct runtime *rt)
{
    size_t n_warnings = rt->rules->n_warnings;
    char files[4096];
    printf("%s: OK: %zu rules, %zu externalRules, resourceRules %s",
           config_files(rt->cfg, files, sizeof(files)), rt->rules->n_rules,
           rt->rules->n_external_rules, rt->rules->has_resource_rules ? "present" : "absent");
    if (n_warnings > 0)
        printf("; %zu warning%s (on stderr)", n_warnings, n_warnings == 1 ? "" : "s");
    putchar('\n');
    runtime_done(rt);
    return 0;
}

/* `custom-metrics-adapter explain [flags] PATH`: takes "explain" and the last argument (the
 * request path) out of argv, so the flags parse as usual. 0: not explain; 1: *ret_path set;
 * -1: explain without a path (said on stderr). */
static int explain_argument(int *argc, char **argv, const char **ret_path)
{
    if (*argc < 2 || strcmp(argv[1], "explain") != 0)
        return 0;
    const char *last = argv[*argc - 1];
    if (*argc < 3 || last[0] != '/') {
        fprintf(stderr,
                "Error: explain needs the request path as its last argument, e.g.\n  %s "
                "explain --config=rules.yaml --prometheus-url=URL "
                "'/apis/custom.metrics.k8s.io/v1beta2/namespaces/NS/pods/*/METRIC'\n",
                argv[0]);
        return -1;
    }
    *ret_path = last;
    memmove(&argv[1], &argv[2], (size_t)(*argc - 3) * sizeof(*argv));
    *argc -= 2;
    argv[*argc] = NULL;
    return 1;
}

/* explain_once: the work of run_explain(), below. */
static int explain_once(struct runtime *rt, const char *path)
{
    struct cma_err err;
    cma_err_clear(&err);
    const struct cma_options *o = rt->opts;
    int64_t max_age = o->metrics_max_age_ms ? o->metrics_max_age_ms : o->metrics_relist_interval_ms;
    if (start_clients(rt) != 0 || cma_catalog_store_new(&rt->store) != CMA_OK)
        return 1;
    /* the same backends the server lists from: each rule's series from its own */
    if (cma_explain_prepare(rt->series_backends, rt->n_backends, rt->kube, rt->rules, max_age,
                            rt->store, &err) != CMA_OK) {
        log_err("explain: relist", &err);
        return 1;
    }
    /* no watch caches: the selector resolves through a live LIST, shown in the report */
    struct cma_app app = {.opts = o, .backend = rt->backend, .kube = rt->kube, .store = rt->store};
    cma_app_set_rules(&app, rt->rules);
    struct cma_buf out;
    cma_buf_init(&out, CMA_BUF_DEFAULT_MAX);
    int status = 0;
    enum cma_errc rc = cma_explain_run(&app, path, &out, &status, &err);
    if (rc == CMA_OK)
        fwrite(cma_buf_str(&out), 1, out.len, stdout);
    else
        log_err("explain", &err);
    cma_buf_done(&out);
    if (rc != CMA_OK)
        return 1;
    return status >= 200 && status < 300 ? 0 : 3;
}

/* explain: one relist, then the request through the handlers with a trace (explain.h); the
 * report goes to stdout; tears the runtime down. Exit 0 when the explained request answers 2xx,
 * 3 when it fails, 1 when explain cannot run (clients, kube API discovery, relist). */
static int run_explain(struct runtime *rt, const char *path)
{
    signal(SIGPIPE, SIG_IGN);
    int rc = explain_once(rt, path);
    runtime_done(rt);
    return rc;
}

/* --help, --version, --print-flags-markdown: prints what was asked for; false when none was. */
static bool print_only(const struct cma_options *o, const char *argv0)
{
    if (o->help)
        cma_options_print_help(stdout, argv0);
    else if (o->version)
        printf("custom-metrics-adapter v%s (revision %s)\n", CMA_VERSION, CMA_REVISION);
    else if (o->print_flags_markdown)
        cma_options_print_markdown(stdout);
    else
        return false;
    return true;
}

int main(int argc, char **argv)
{
    struct runtime rt = {.cache_mu = PTHREAD_MUTEX_INITIALIZER};
    struct cma_err err;
    cma_err_clear(&err);
    drop_chart_argument(&argc, &argv);
    if (argc > 1 && strcmp(argv[1], "check") == 0)
        return cma_check_main(argc - 1, argv + 1, stdout, stderr);
    const char *explain_path = NULL;
    if (explain_argument(&argc, argv, &explain_path) < 0)
        return 2;
    if (cma_options_parse(argc, argv, &rt.opts, stderr, &err) != CMA_OK) {
        fprintf(stderr, "Error: %s\nRun '%s --help' for usage.\n", err.msg, argv[0]);
        return 2;
    }
    if (print_only(rt.opts, argv[0])) {
        cma_options_free(rt.opts);
        return 0;
    }
    cma_log_set_verbosity(rt.opts->v);
    enum cma_log_format format = CMA_LOG_FORMAT_TEXT;
    if (cma_log_parse_format(rt.opts->logging_format, &format))
        cma_log_set_format(format);
    if (load_rules(&rt) != 0) {
        runtime_done(&rt);
        return 1;
    }
    if (rt.opts->check_config)
        return check_config(&rt);
    if (explain_path)
        return run_explain(&rt, explain_path);
    /* Block the signals before any thread starts so only sigwait() below sees them. */
    sigset_t sigs;
    sigemptyset(&sigs);
    sigaddset(&sigs, SIGINT);
    sigaddset(&sigs, SIGTERM);
    sigaddset(&sigs, SIGHUP);
    pthread_sigmask(SIG_BLOCK, &sigs, NULL);
    signal(SIGPIPE, SIG_IGN);
    cma_log_info("custom-metrics-adapter v%s starting: %zu rules, %zu externalRules", CMA_VERSION,
                 rt.rules->n_rules, rt.rules->n_external_rules);
    struct cma_app app;
    int rc = start_clients(&rt);
    if (rc == 0)
        rc = start_serving(&rt, &app);
    if (rc == 0) {
        int sig = 0;
        while (sigwait(&sigs, &sig) == 0 && sig == SIGHUP)
            reload_on_sighup(&rt);
        drain_or_exit(&rt, sig);
    }
    runtime_done(&rt);
    return rc;
}
