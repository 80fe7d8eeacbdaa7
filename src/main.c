/* main.c: the composition root: flags → config → rules → clients → catalog store + discovery
 * thread → HTTPS server; then waits for SIGTERM/SIGINT and tears everything down in reverse.
 * No logic of its own beyond wiring and start-up diagnostics. */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cma/app.h"
#include "cma/auth.h"
#include "cma/backend.h"
#include "cma/catalog.h"
#include "cma/clock.h"
#include "cma/config.h"
#include "cma/discovery.h"
#include "cma/kube.h"
#include "cma/objcache.h"
#include "cma/log.h"
#include "cma/options.h"
#include "cma/persist.h"
#include "cma/prom.h"
#include "cma/rule.h"
#include "cma/server.h"
#include "cma/str.h"
#include "cma/tls.h"

#ifndef CMA_VERSION
#define CMA_VERSION "0.0.0"
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

struct runtime {
    struct cma_options *opts;
    struct cma_config *cfg;
    struct cma_ruleset *rules;
    struct cma_prom *prom;
    struct cma_kube *kube;
    struct cma_objcache_registry *caches; /* watch caches; one per resource, pods at start */
    struct cma_catalog_store *store;
    struct cma_persist *catalog_cache; /* NULL: --catalog-cache-file is off */
    struct cma_discovery *discovery;
    struct cma_server *server;
    char *basic_password;
    struct cma_auth *auth;
    struct cma_kube *authn_kube, *authz_kube; /* NULL = rt->kube */
    struct auth_lists {
        char **v;
        size_t n;
    } allowed_names, user_headers, group_headers, extra_prefixes, allow_paths;
    char client_ca_union[1024];
};

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
    cma_objcache_registry_free(rt->caches);
    cma_kube_free(rt->kube);
    cma_prom_free(rt->prom);
    cma_ruleset_free(rt->rules);
    cma_config_free(rt->cfg);
    cma_options_free(rt->opts);
    free(rt->basic_password);
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
        cma_log_error("%s: %zu config warning%s and --strict-config: not starting",
                      rt->opts->config, n, n == 1 ? "" : "s");
        return 1;
    }
    return 0;
}

static int load_rules(struct runtime *rt)
{
    struct cma_err err;
    cma_err_clear(&err);
    if (!rt->opts->config) {
        cma_log_error("no metrics discovery configuration file specified (make sure to use "
                      "--config)");
        return 1;
    }
    if (cma_config_load_file(rt->opts->config, &rt->cfg, &err) != CMA_OK ||
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

static int start_clients(struct runtime *rt)
{
    struct cma_err err;
    cma_err_clear(&err);
    const struct cma_options *o = rt->opts;
    if (o->prometheus_auth_config || o->prometheus_auth_incluster) {
        cma_log_error("--prometheus-auth-config and --prometheus-auth-incluster are not supported "
                      "yet; use --prometheus-token-file, --prometheus-basic-auth-username with "
                      "--prometheus-basic-auth-password-file, --prometheus-ca-file and "
                      "--prometheus-client-tls-cert-file/--prometheus-client-tls-key-file");
        return 1;
    }
    if (o->prometheus_basic_auth_password_file &&
        !(rt->basic_password = read_secret(o->prometheus_basic_auth_password_file))) {
        cma_log_error("cannot read --prometheus-basic-auth-password-file %s: %s",
                      o->prometheus_basic_auth_password_file, strerror(errno));
        return 1;
    }
    struct cma_prom_config pc = {
        .url = o->prometheus_url,
        .use_post = strcmp(o->prometheus_verb, "POST") == 0,
        .headers = (const char *const *)o->prometheus_headers,
        .n_headers = o->n_prometheus_headers,
        .token_file = o->prometheus_token_file,
        .basic_username = o->prometheus_basic_auth_username,
        .basic_password = rt->basic_password,
        .ca_file = o->prometheus_ca_file,
        .client_cert_file = o->prometheus_client_tls_cert_file,
        .client_key_file = o->prometheus_client_tls_key_file,
        .insecure_skip_verify = o->prometheus_insecure_skip_tls_verify,
        .timeout_ms = o->prometheus_timeout_ms,
        .series_timeout_ms = o->prometheus_series_timeout_ms,
        .connect_timeout_ms = o->prometheus_connect_timeout_ms,
        .max_response_bytes = (size_t)o->prometheus_max_response_bytes,
        .max_bytes_in_flight = (size_t)o->prometheus_max_bytes_in_flight,
    };
    if (cma_prom_new(&pc, &rt->prom, &err) != CMA_OK) {
        log_err("prometheus client", &err);
        return 1;
    }
    if (cma_kube_new(o->lister_kubeconfig, o->prometheus_timeout_ms, &rt->kube, &err) != CMA_OK) {
        log_err("kubernetes client", &err);
        return 1;
    }
    cma_log_info("backend %s, kube-apiserver %s", cma_prom_url(rt->prom),
                 cma_kube_server(rt->kube));
    /* The pod watch cache (LIST+WATCH in its own thread); other resources' on first use. */
    if (cma_objcache_registry_new(rt->kube, &rt->caches, &err) != CMA_OK) {
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

/* Self-signed certificate: localhost and loopback IPs (tls.c) plus the Service's DNS names. */
static enum cma_errc self_signed(const struct cma_options *o, char *cert, size_t cert_len,
                                 char *key, size_t key_len, struct cma_err *err)
{
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
    return cma_tls_ensure_self_signed(o->cert_dir, extra, n, cert, cert_len, key, key_len, err);
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
    };
    if (cma_auth_new(&ao, &rt->auth, &err) != CMA_OK) {
        log_err("delegated authentication", &err);
        return 1;
    }
    char *pem = cma_auth_client_ca_pem(rt->auth);
    if (pem && pem[0] && o->cert_dir && *o->cert_dir) {
        snprintf(rt->client_ca_union, sizeof rt->client_ca_union, "%s/client-ca-union.crt",
                 o->cert_dir);
        FILE *f = fopen(rt->client_ca_union, "w");
        bool ok = f && fputs(pem, f) >= 0;
        if (f && fclose(f) != 0)
            ok = false;
        if (!ok) {
            cma_log_warn("cannot write %s: %s; client certificates are requested without a CA "
                         "list",
                         rt->client_ca_union, strerror(errno));
            rt->client_ca_union[0] = '\0';
        }
    }
    free(pem);
    return 0;
}

/* The store's publish hook (discovery thread): writes each new catalog to the cache file. */
static void save_catalog(void *ctx, const struct cma_catalog *c)
{
    struct cma_persist *p = ctx;
    struct cma_err err;
    cma_err_clear(&err);
    bool written = false;
    if (cma_persist_save(p, c, &written, &err) != CMA_OK)
        cma_log_warn("catalog cache: cannot write %s: %s; the previous file stays",
                     cma_persist_path(p), err.msg);
    else if (written)
        cma_log_v(2, "catalog cache: wrote %s", cma_persist_path(p));
}

/* The catalog cache's fingerprint: the config file's bytes and what decides which series a
 * relist finds (backend URL and headers, the effective max age, the cluster). */
static enum cma_errc cache_fingerprint(const struct runtime *rt,
                                       uint8_t fp[CMA_PERSIST_FINGERPRINT_LEN], struct cma_err *err)
{
    const struct cma_options *o = rt->opts;
    int64_t max_age_ms =
        o->metrics_max_age_ms ? o->metrics_max_age_ms : o->metrics_relist_interval_ms;
    char max_age[32];
    snprintf(max_age, sizeof(max_age), "%lld", (long long)max_age_ms);
    size_t n = 3 + o->n_prometheus_headers;
    const char **parts = calloc(n, sizeof(*parts));
    if (!parts)
        return cma_err_set(err, CMA_ERR_NOMEM, "out of memory");
    parts[0] = o->prometheus_url;
    parts[1] = max_age;
    parts[2] = cma_kube_server(rt->kube);
    for (size_t i = 0; i < o->n_prometheus_headers; i++)
        parts[3 + i] = o->prometheus_headers[i];
    enum cma_errc rc = cma_persist_fingerprint(o->config, parts, n, fp, err);
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
    if (cache_fingerprint(rt, fp, &err) != CMA_OK ||
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
    cma_catalog_store_on_publish(rt->store, save_catalog, rt->catalog_cache);
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
        .backend = cma_backend_prom(rt->prom),
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
        .backend = cma_backend_prom(rt->prom),
        .kube = rt->kube,
        .caches = rt->caches,
        .store = rt->store,
        .discovery = rt->discovery,
        .serve_custom = rt->rules->n_rules > 0 && !o->disable_custom_metrics,
        .serve_external = rt->rules->n_external_rules > 0 && !o->disable_external_metrics,
        .serve_resource = rt->rules->has_resource_rules && !o->disable_resource_metrics,
    };
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

int main(int argc, char **argv)
{
    struct runtime rt = {0};
    struct cma_err err;
    cma_err_clear(&err);
    drop_chart_argument(&argc, &argv);
    if (cma_options_parse(argc, argv, &rt.opts, stderr, &err) != CMA_OK) {
        fprintf(stderr, "Error: %s\nRun '%s --help' for usage.\n", err.msg, argv[0]);
        return 2;
    }
    if (rt.opts->help) {
        cma_options_print_help(stdout, argv[0]);
        cma_options_free(rt.opts);
        return 0;
    }
    if (rt.opts->version) {
        printf("custom-metrics-adapter v%s\n", CMA_VERSION);
        cma_options_free(rt.opts);
        return 0;
    }
    if (rt.opts->print_flags_markdown) {
        cma_options_print_markdown(stdout);
        cma_options_free(rt.opts);
        return 0;
    }
    cma_log_set_verbosity(rt.opts->v);
    if (load_rules(&rt) != 0) {
        runtime_done(&rt);
        return 1;
    }
    if (rt.opts->check_config) {
        size_t n_warnings = rt.rules->n_warnings;
        printf("%s: OK: %zu rules, %zu externalRules, resourceRules %s", rt.opts->config,
               rt.rules->n_rules, rt.rules->n_external_rules,
               rt.rules->has_resource_rules ? "present" : "absent");
        if (n_warnings > 0)
            printf("; %zu warning%s (on stderr)", n_warnings, n_warnings == 1 ? "" : "s");
        putchar('\n');
        runtime_done(&rt);
        return 0;
    }
    /* Block the signals before any thread starts so only sigwait() below sees them. */
    sigset_t sigs;
    sigemptyset(&sigs);
    sigaddset(&sigs, SIGINT);
    sigaddset(&sigs, SIGTERM);
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
        sigwait(&sigs, &sig);
        drain_or_exit(&rt, sig);
    }
    runtime_done(&rt);
    return rc;
}
