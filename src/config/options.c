/* options.c: command-line flags from one static table (name, type, field, default, help) that
 * drives parsing, --help and the Markdown reference in docs/flags.md.
 *
 * DESIGN
 * - Parsing follows Go pflag: --name=value, --name value, bools as --name or --name=false,
 *   shorthands -v 3 / -v=3 / -v3, "--" ends the flags. Go's flag package style (-name value) is
 *   accepted too. Positional arguments are errors (the adapter takes none).
 * - Defaults are text in the table and are applied with the same setters as user values, so the
 *   printed default and the effective default cannot drift apart.
 * - prometheus-adapter's flags that this table lacks (klog's, audit, profiling, ...: compat.c)
 *   are parsed with their Go type and ignored with one warning line each on the caller's
 *   `warnings` stream; this module does not log. Any other unknown flag is an error.
 * - --tls-cipher-suites takes Go's names; the RC4 ones (never offered here) are dropped with a
 *   warning, an unknown name is an error, as in Kubernetes. */
#include "cma/options.h"

#include <errno.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "cma/compat.h"
#include "cma/selector.h"
#include "cma/str.h"

enum flag_type {
    FLAG_STRING,       /* char * */
    FLAG_STRING_ARRAY, /* char ** + size_t count (repeatable) */
    FLAG_BOOL,         /* bool */
    FLAG_DURATION,     /* int64_t milliseconds, Go duration syntax */
    FLAG_INT,          /* int */
    FLAG_INT64,        /* int64_t */
};

typedef enum cma_errc (*value_check_fn)(const char *value, struct cma_err *reterr);
/* Rewrites a FLAG_STRING value before it is stored (*ret: malloc'd); may warn. */
typedef enum cma_errc (*value_normalize_fn)(const char *value, FILE *warnings, char **ret,
                                            struct cma_err *reterr);

struct flag {
    const char *name;
    char shorthand;
    enum flag_type type;
    size_t offset;       /* field in struct cma_options */
    size_t count_offset; /* FLAG_STRING_ARRAY: the size_t count field */
    const char *def;     /* default as text; NULL = zero value */
    const char *help;
    bool hidden;
    int64_t min, max; /* FLAG_INT, FLAG_INT64, FLAG_DURATION (ms); both 0 = no range */
    value_check_fn check;
    value_normalize_fn normalize;
};

#define OPT(field) offsetof(struct cma_options, field)

static enum cma_errc check_verb(const char *value, struct cma_err *reterr)
{
    if (strcmp(value, "GET") == 0 || strcmp(value, "POST") == 0)
        return CMA_OK;
    return cma_err_set(reterr, CMA_ERR_FLAG,
                       "unsupported Prometheus HTTP verb \"%s\"; supported verbs: \"GET\" and "
                       "\"POST\"",
                       value);
}

/* --metric-rules-namespace-label: a Prometheus label name. */
static enum cma_errc check_label_name(const char *value, struct cma_err *reterr)
{
    bool ok = value[0] != '\0' && !(value[0] >= '0' && value[0] <= '9');
    for (const char *p = value; ok && *p; p++)
        ok = (*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') ||
             *p == '_';
    if (ok)
        return CMA_OK;
    return cma_err_set(reterr, CMA_ERR_FLAG,
                       "invalid argument \"%s\" for \"--metric-rules-namespace-label\" flag: "
                       "not a Prometheus label name ([a-zA-Z_][a-zA-Z0-9_]*)",
                       value);
}

/* --metric-rules-namespace-selector: a Kubernetes label selector. */
static enum cma_errc check_label_selector(const char *value, struct cma_err *reterr)
{
    struct cma_selector *sel = NULL;
    struct cma_err inner = {0};
    if (cma_selector_parse(value, strlen(value), &sel, &inner) == CMA_OK) {
        cma_selector_free(sel);
        return CMA_OK;
    }
    return cma_err_set(reterr, CMA_ERR_FLAG,
                       "invalid argument \"%s\" for \"--metric-rules-namespace-selector\" "
                       "flag: %s",
                       value, inner.msg);
}

static enum cma_errc check_logging_format(const char *value, struct cma_err *reterr)
{
    if (strcmp(value, "text") == 0 || strcmp(value, "json") == 0)
        return CMA_OK;
    return cma_err_set(reterr, CMA_ERR_FLAG,
                       "invalid argument \"%s\" for \"--logging-format\" flag: supported values "
                       "are \"json\" and \"text\"",
                       value);
}

static enum cma_errc check_tls_version(const char *value, struct cma_err *reterr)
{
    static const char *const versions[] = {"VersionTLS10", "VersionTLS11", "VersionTLS12",
                                           "VersionTLS13"};
    for (size_t i = 0; i < sizeof(versions) / sizeof(versions[0]); i++)
        if (strcmp(value, versions[i]) == 0)
            return CMA_OK;
    return cma_err_set(reterr, CMA_ERR_FLAG,
                       "invalid argument \"%s\" for \"--tls-min-version\" flag: allowed values "
                       "are VersionTLS10, VersionTLS11, VersionTLS12, VersionTLS13",
                       value);
}

/* --tls-cipher-suites: Go names, comma-separated. Kept: the ones offered here; dropped with a
 * warning: RC4 (Go knows them, this server never offers them); unknown: an error. */
static enum cma_errc normalize_cipher_suites(const char *value, FILE *warnings, char **ret,
                                             struct cma_err *reterr)
{
    size_t cap = strlen(value) + 1, used = 0;
    char *out = malloc(cap);
    if (!out)
        return cma_err_set(reterr, CMA_ERR_NOMEM, "out of memory");
    for (const char *p = value; *p;) {
        while (*p == ' ' || *p == ',')
            p++;
        size_t len = strcspn(p, ",");
        while (len > 0 && p[len - 1] == ' ')
            len--;
        if (len == 0)
            break;
        enum cma_cipher_suite_support support = cma_compat_cipher_suite(p, len);
        if (support == CMA_CIPHER_UNKNOWN) {
            free(out);
            return cma_err_set(reterr, CMA_ERR_FLAG,
                               "invalid argument \"%s\" for \"--tls-cipher-suites\" flag: cipher "
                               "suite %.*s not supported or doesn't exist",
                               value, (int)(len > 100 ? 100 : len), p);
        }
        if (support == CMA_CIPHER_SERVED) {
            used +=
                (size_t)snprintf(out + used, cap - used, "%s%.*s", used ? "," : "", (int)len, p);
        } else if (warnings) {
            fprintf(warnings,
                    "cipher suite %.*s of --tls-cipher-suites has no effect here (RC4 is never "
                    "offered); ignoring it\n",
                    (int)len, p);
        }
        p += strcspn(p, ",");
    }
    *ret = out;
    return CMA_OK;
}

static const struct flag flags[] = {
    /* adapter */
    {.name = "config",
     .type = FLAG_STRING_ARRAY,
     .offset = OPT(configs),
     .count_offset = OPT(n_configs),
     .help = "Metrics discovery config file (rules, externalRules, resourceRules) in "
             "prometheus-adapter's format; required. Repeat it for more files, or name a "
             "directory (its .yaml and .yml files, in name order); files merge in the order "
             "given (docs/configuration.md)"},
    {.name = "metrics-relist-interval",
     .type = FLAG_DURATION,
     .offset = OPT(metrics_relist_interval_ms),
     .def = "10m",
     .min = 1,
     .max = INT64_MAX,
     .help = "Interval at which the list of available series is re-read from the backend"},
    {.name = "metrics-max-age",
     .type = FLAG_DURATION,
     .offset = OPT(metrics_max_age_ms),
     .min = 0,
     .max = INT64_MAX,
     .help = "How far back a series must have a sample to be listed; 0 means the relist "
             "interval"},
    {.name = "catalog-cache-file",
     .type = FLAG_STRING,
     .offset = OPT(catalog_cache_file),
     .help = "File that keeps the last good metric catalog (written atomically after each "
             "successful relist, read at start), so a restarted adapter serves discovery at once "
             "even while the backend is down; empty means off (e.g. a file on an emptyDir "
             "volume)"},
    {.name = "metrics-cache-ttl",
     .type = FLAG_DURATION,
     .offset = OPT(metrics_cache_ttl_ms),
     .def = "5s",
     .min = 0,
     .max = 3600000,
     .help = "How long a backend query's answer is reused for identical queries (same backend "
             "and PromQL), counted from when the backend answered; identical queries in flight "
             "at once always go out once. 0 turns the cache off (docs/operations.md)"},
    {.name = "metrics-cache-max-bytes",
     .type = FLAG_INT64,
     .offset = OPT(metrics_cache_max_bytes),
     .def = "8388608",
     .min = 1,
     .max = INT64_MAX,
     .help = "Bytes the cached answers of --metrics-cache-ttl may hold; the oldest are dropped "
             "first"},
    /* API groups: each is served only when its rules exist and its flag is not set */
    {.name = "disable-custom-metrics",
     .type = FLAG_BOOL,
     .offset = OPT(disable_custom_metrics),
     .help = "Do not serve custom.metrics.k8s.io even if rules exist (when another adapter owns "
             "that group)"},
    {.name = "disable-external-metrics",
     .type = FLAG_BOOL,
     .offset = OPT(disable_external_metrics),
     .help = "Do not serve external.metrics.k8s.io even if externalRules exist (to run next to "
             "KEDA, which owns that group)"},
    {.name = "disable-resource-metrics",
     .type = FLAG_BOOL,
     .offset = OPT(disable_resource_metrics),
     .help = "Do not serve metrics.k8s.io even if resourceRules exist (to run next to "
             "metrics-server, which owns that group)"},
    /* backend */
    {.name = "prometheus-url",
     .type = FLAG_STRING,
     .offset = OPT(prometheus_url),
     .def = "https://localhost",
     .help = "URL of the Prometheus-compatible API; a path prefix is kept"},
    {.name = "prometheus-verb",
     .type = FLAG_STRING,
     .offset = OPT(prometheus_verb),
     .def = "GET",
     .check = check_verb,
     .help = "HTTP method for Prometheus API calls: GET or POST"},
    {.name = "prometheus-header",
     .type = FLAG_STRING_ARRAY,
     .offset = OPT(prometheus_headers),
     .count_offset = OPT(n_prometheus_headers),
     .help = "Extra header for every Prometheus request, as key=value; repeat the flag for more "
             "(e.g. X-Scope-OrgID=tenant)"},
    {.name = "prometheus-token-file",
     .type = FLAG_STRING,
     .offset = OPT(prometheus_token_file),
     .help = "File holding a bearer token sent to Prometheus (read again when it changes)"},
    {.name = "prometheus-ca-file",
     .type = FLAG_STRING,
     .offset = OPT(prometheus_ca_file),
     .help = "CA certificates (PEM) that verify Prometheus's serving certificate (read again "
             "when the file changes)"},
    {.name = "prometheus-client-tls-cert-file",
     .type = FLAG_STRING,
     .offset = OPT(prometheus_client_tls_cert_file),
     .help = "Client certificate (PEM) presented to Prometheus; needs "
             "--prometheus-client-tls-key-file (the pair is read again when it changes)"},
    {.name = "prometheus-client-tls-key-file",
     .type = FLAG_STRING,
     .offset = OPT(prometheus_client_tls_key_file),
     .help = "Private key (PEM) of --prometheus-client-tls-cert-file"},
    {.name = "prometheus-auth-config",
     .type = FLAG_STRING,
     .offset = OPT(prometheus_auth_config),
     .help = "kubeconfig file whose current context's credentials and TLS settings are used "
             "for Prometheus (not its server); explicit --prometheus-* flags win"},
    {.name = "prometheus-auth-incluster",
     .type = FLAG_BOOL,
     .offset = OPT(prometheus_auth_incluster),
     .help = "Use the pod's service account token (read again as it rotates) and ca.crt for "
             "Prometheus; not with --prometheus-auth-config"},
    {.name = "prometheus-basic-auth-username",
     .type = FLAG_STRING,
     .offset = OPT(prometheus_basic_auth_username),
     .help = "User name for HTTP basic authentication to Prometheus"},
    {.name = "prometheus-basic-auth-password-file",
     .type = FLAG_STRING,
     .offset = OPT(prometheus_basic_auth_password_file),
     .help = "File holding the password for HTTP basic authentication to Prometheus (read "
             "again when it changes)"},
    {.name = "prometheus-insecure-skip-tls-verify",
     .type = FLAG_BOOL,
     .offset = OPT(prometheus_insecure_skip_tls_verify),
     .help = "Do not verify Prometheus's serving certificate (testing only)"},
    {.name = "prometheus-timeout",
     .type = FLAG_DURATION,
     .offset = OPT(prometheus_timeout_ms),
     .def = "10s",
     .min = 1,
     .max = INT64_MAX,
     .help = "Time limit for one Prometheus query (/api/v1/query); kube-apiserver LIST and "
             "discovery calls use it too"},
    {.name = "prometheus-series-timeout",
     .type = FLAG_DURATION,
     .offset = OPT(prometheus_series_timeout_ms),
     .def = "30s",
     .min = 1,
     .max = INT64_MAX,
     .help = "Time limit for one series listing (/api/v1/series) of a relist; a relist stops at "
             "the first failure and the last good list of metrics keeps serving"},
    {.name = "prometheus-connect-timeout",
     .type = FLAG_DURATION,
     .offset = OPT(prometheus_connect_timeout_ms),
     .def = "3s",
     .min = 1,
     .max = INT64_MAX,
     .help = "Time limit for connecting to Prometheus"},
    {.name = "prometheus-max-response-bytes",
     .type = FLAG_INT64,
     .offset = OPT(prometheus_max_response_bytes),
     .def = "67108864",
     .min = 1,
     .max = INT64_MAX,
     .help = "Largest Prometheus query answer accepted, in bytes; a larger one is refused "
             "(413) as soon as it is known to be larger"},
    {.name = "prometheus-max-bytes-in-flight",
     .type = FLAG_INT64,
     .offset = OPT(prometheus_max_bytes_in_flight),
     .def = "33554432",
     .min = 1,
     .max = INT64_MAX,
     .help = "Bytes that the samples kept from Prometheus query answers may hold at once, across "
             "all requests; a request that would go over is refused: 429 while others hold "
             "them, 413 when its answer alone needs more"},
    {.name = "prometheus-max-concurrent-queries",
     .type = FLAG_INT64,
     .offset = OPT(prometheus_max_concurrent_queries),
     .def = "8",
     .min = 1,
     .max = 1000,
     .help = "Most instant queries sent to each backend at once (identical ones go once); a "
             "query that finds no free slot waits, within --prometheus-timeout and its "
             "request's deadline, then gets 429. 8 per replica keeps two replicas under "
             "Prometheus' --query.max-concurrency (20)"},
    {.name = "prometheus-max-query-length",
     .type = FLAG_INT64,
     .offset = OPT(prometheus_max_query_length),
     .def = "16384",
     .min = 0,
     .max = INT64_MAX,
     .help = "Longest PromQL sent to the --prometheus-url backend, and to each backend of the "
             "config that sets no maxQueryLength, in bytes (VictoriaMetrics' "
             "-search.maxQueryLen is 16384). A query whose object names would make it longer "
             "is sent without them and only the requested objects are kept from the answer; "
             "a query still longer is refused. 0 = no limit"},
    /* serving */
    {.name = "bind-address",
     .type = FLAG_STRING,
     .offset = OPT(bind_address),
     .def = "0.0.0.0",
     .help = "IP address on which to serve HTTPS"},
    {.name = "secure-port",
     .type = FLAG_INT,
     .offset = OPT(secure_port),
     .def = "6443",
     .min = 0,
     .max = 65535,
     .help = "Port on which to serve HTTPS"},
    {.name = "cert-dir",
     .type = FLAG_STRING,
     .offset = OPT(cert_dir),
     .def = "apiserver.local.config/certificates",
     .help = "Directory where a self-signed serving certificate is written when --tls-cert-file "
             "is not given"},
    {.name = "service-name",
     .type = FLAG_STRING,
     .offset = OPT(service_name),
     .def = "custom-metrics-adapter",
     .help = "Service name put in the self-signed certificate as <name>.<namespace>.svc (the "
             "namespace comes from POD_NAMESPACE or the service account)"},
    {.name = "tls-cert-file",
     .type = FLAG_STRING,
     .offset = OPT(tls_cert_file),
     .help = "Serving certificate (PEM, may include intermediates); needs --tls-private-key-file"},
    {.name = "tls-private-key-file",
     .type = FLAG_STRING,
     .offset = OPT(tls_private_key_file),
     .help = "Private key (PEM) of --tls-cert-file"},
    {.name = "tls-min-version",
     .type = FLAG_STRING,
     .offset = OPT(tls_min_version),
     .def = "VersionTLS12",
     .check = check_tls_version,
     .help = "Lowest TLS version served: VersionTLS10, VersionTLS11, VersionTLS12 or "
             "VersionTLS13"},
    {.name = "tls-cipher-suites",
     .type = FLAG_STRING,
     .offset = OPT(tls_cipher_suites),
     .normalize = normalize_cipher_suites,
     .help = "Comma-separated cipher suites for TLS 1.2 and older (Go's names, as Kubernetes "
             "takes them; the RC4 ones are ignored with a warning); a secure default list when "
             "empty"},
    {.name = "disable-http2",
     .type = FLAG_BOOL,
     .offset = OPT(disable_http2),
     .help = "Disable HTTP/2 on the serving port (accepted for compatibility; only HTTP/1.1 is "
             "served)"},
    {.name = "max-connections",
     .type = FLAG_INT64,
     .offset = OPT(max_connections),
     .def = "1000",
     .min = 1,
     .max = 1000000,
     .help = "Most client connections open at once. At the limit a new connection takes the slot "
             "of the oldest one without a request in progress (an unfinished TLS handshake "
             "first, then an unfinished request, then an idle keep-alive connection)"},
    {.name = "max-connections-per-client",
     .type = FLAG_INT64,
     .offset = OPT(max_connections_per_client),
     .def = "100",
     .min = 1,
     .max = 1000000,
     .help = "Most connections open at once from one client IP address; further ones are "
             "closed at accept"},
    {.name = "max-requests-inflight",
     .type = FLAG_INT64,
     .offset = OPT(max_requests_inflight),
     .def = "64",
     .min = 1,
     .max = 10000,
     .help = "Most requests handled at once (handler threads); further ones get 429 "
             "TooManyRequests. Health probes without credentials do not count"},
    {.name = "tls-handshake-timeout",
     .type = FLAG_DURATION,
     .offset = OPT(tls_handshake_timeout_ms),
     .def = "10s",
     .min = 1,
     .max = 3600000,
     .help = "Time from accepting a connection to the end of its TLS handshake; the connection "
             "is closed when it runs out, whatever the client still sends"},
    {.name = "request-header-timeout",
     .type = FLAG_DURATION,
     .offset = OPT(request_header_timeout_ms),
     .def = "10s",
     .min = 1,
     .max = 3600000,
     .help = "Time to receive a whole request (line, headers and any body) after the TLS "
             "handshake, or after the previous response plus --keep-alive-timeout; the "
             "connection is closed when it runs out"},
    {.name = "keep-alive-timeout",
     .type = FLAG_DURATION,
     .offset = OPT(keep_alive_timeout_ms),
     .def = "2m",
     .min = 1000,
     .max = 86400000,
     .help = "How long an idle keep-alive connection stays open without traffic (whole seconds)"},
    {.name = "max-request-header-bytes",
     .type = FLAG_INT64,
     .offset = OPT(max_request_header_bytes),
     .def = "16384",
     .min = 4096,
     .max = 1048576,
     .help = "Memory per connection for the request line and headers (a request needs a few "
             "hundred bytes less); a longer request line gets 414, longer headers 431. Every "
             "connection that made a request holds this much"},
    {.name = "shutdown-grace-period",
     .type = FLAG_DURATION,
     .offset = OPT(shutdown_grace_period_ms),
     .def = "25s",
     .min = 0,
     .max = 3600000,
     .help = "On SIGTERM or SIGINT, how long requests already received may take to finish; new "
             "connections are refused at once"},
    /* kube */
    {.name = "lister-kubeconfig",
     .type = FLAG_STRING,
     .offset = OPT(lister_kubeconfig),
     .help = "kubeconfig file for the Kubernetes API; the in-cluster configuration when empty"},
    {.name = "discovery-interval",
     .type = FLAG_DURATION,
     .offset = OPT(discovery_interval_ms),
     .def = "10m",
     .min = 1,
     .max = INT64_MAX,
     .help = "Interval at which Kubernetes API discovery (resources and their scope) is "
             "refreshed"},
    /* delegated authentication and authorization */
    {.name = "requestheader-client-ca-file",
     .type = FLAG_STRING,
     .offset = OPT(requestheader_client_ca_file),
     .help =
         "CA bundle that verifies the front-proxy client certificate before X-Remote-* headers are "
         "believed; read from ConfigMap kube-system/extension-apiserver-authentication when empty"},
    {.name = "requestheader-allowed-names",
     .type = FLAG_STRING,
     .offset = OPT(requestheader_allowed_names),
     .help = "Comma-separated common names allowed for the front-proxy client certificate; empty "
             "allows any certificate from that CA"},
    {.name = "requestheader-username-headers",
     .type = FLAG_STRING,
     .offset = OPT(requestheader_username_headers),
     .def = "X-Remote-User",
     .help = "Comma-separated request headers holding the user name"},
    {.name = "requestheader-group-headers",
     .type = FLAG_STRING,
     .offset = OPT(requestheader_group_headers),
     .def = "X-Remote-Group",
     .help = "Comma-separated request headers holding the groups"},
    {.name = "requestheader-extra-headers-prefix",
     .type = FLAG_STRING,
     .offset = OPT(requestheader_extra_headers_prefix),
     .def = "X-Remote-Extra-",
     .help = "Comma-separated prefixes of request headers holding extra user attributes"},
    {.name = "client-ca-file",
     .type = FLAG_STRING,
     .offset = OPT(client_ca_file),
     .help = "CA bundle that verifies client certificates (user = CN, groups = O); read from the "
             "ConfigMap when empty"},
    {.name = "authentication-kubeconfig",
     .type = FLAG_STRING,
     .offset = OPT(authentication_kubeconfig),
     .help = "kubeconfig for TokenReview and the ConfigMap lookup; --lister-kubeconfig (or "
             "in-cluster) when empty"},
    {.name = "authentication-skip-lookup",
     .type = FLAG_BOOL,
     .offset = OPT(authentication_skip_lookup),
     .help = "Do not read ConfigMap kube-system/extension-apiserver-authentication"},
    {.name = "authentication-tolerate-lookup-failure",
     .type = FLAG_BOOL,
     .offset = OPT(authentication_tolerate_lookup_failure),
     .help =
         "Start even when the ConfigMap lookup fails (client certificates are then not accepted)"},
    {.name = "authentication-token-webhook-cache-ttl",
     .type = FLAG_DURATION,
     .offset = OPT(authentication_token_webhook_cache_ttl_ms),
     .def = "10s",
     .min = 0,
     .max = INT64_MAX,
     .help = "How long TokenReview answers are cached"},
    {.name = "authorization-kubeconfig",
     .type = FLAG_STRING,
     .offset = OPT(authorization_kubeconfig),
     .help = "kubeconfig for SubjectAccessReview; --lister-kubeconfig (or in-cluster) when empty"},
    {.name = "authorization-webhook-cache-authorized-ttl",
     .type = FLAG_DURATION,
     .offset = OPT(authorization_webhook_cache_authorized_ttl_ms),
     .def = "10s",
     .min = 0,
     .max = INT64_MAX,
     .help = "How long allowed SubjectAccessReview answers are cached"},
    {.name = "authorization-webhook-cache-unauthorized-ttl",
     .type = FLAG_DURATION,
     .offset = OPT(authorization_webhook_cache_unauthorized_ttl_ms),
     .def = "10s",
     .min = 0,
     .max = INT64_MAX,
     .help = "How long denied SubjectAccessReview answers are cached"},
    {.name = "authorization-always-allow-paths",
     .type = FLAG_STRING,
     .offset = OPT(authorization_always_allow_paths),
     .def = "/healthz,/readyz,/livez",
     .help =
         "Comma-separated exact paths served without authorization (a trailing * makes a prefix)"},
    {.name = "insecure-disable-auth",
     .type = FLAG_BOOL,
     .offset = OPT(insecure_disable_auth),
     .help = "Serve every request without authentication or authorization (local demos only; never "
             "in a cluster)"},
    {.name = "enable-explain",
     .type = FLAG_BOOL,
     .offset = OPT(enable_explain),
     .help = "Serve GET /debug/explain?path=PATH: the explain report of a metrics request (rule, "
             "PromQL, raw samples, what was left out and why), authorized as the non-resource "
             "path /debug/explain; off by default, as kube-apiserver's debug handlers "
             "(docs/operations.md)"},
    /* MetricRules */
    {.name = "enable-metric-rules",
     .type = FLAG_BOOL,
     .offset = OPT(enable_metric_rules),
     .help = "List and watch MetricRule objects (metrics.custom-metrics-adapter.dev) and serve "
             "their rules next to the config file's, each restricted to its own namespace "
             "(docs/metric-rules.md); false (the default) changes nothing"},
    {.name = "metric-rules-namespace-label",
     .type = FLAG_STRING,
     .offset = OPT(metric_rules_namespace_label),
     .def = "namespace",
     .check = check_label_name,
     .help = "The Prometheus label holding the namespace: every query of a MetricRule of "
             "namespace N gets the matcher LABEL=\"N\" added to each selector"},
    {.name = "metric-rules-namespace-selector",
     .type = FLAG_STRING,
     .offset = OPT(metric_rules_namespace_selector),
     .check = check_label_selector,
     .help = "Label selector on Namespaces: only MetricRules in matching namespaces are served "
             "(empty: every namespace)"},
    {.name = "metric-rules-max-per-namespace",
     .type = FLAG_INT64,
     .offset = OPT(metric_rules_max_per_namespace),
     .def = "20",
     .min = 1,
     .max = 100000,
     .help = "Most MetricRule objects served in one namespace (the oldest win)"},
    {.name = "metric-rules-max-metrics-per-namespace",
     .type = FLAG_INT64,
     .offset = OPT(metric_rules_max_metrics_per_namespace),
     .def = "200",
     .min = 1,
     .max = 1000000,
     .help = "Most metrics the MetricRules of one namespace may serve together"},
    {.name = "metric-rules-max-query-timeout",
     .type = FLAG_DURATION,
     .offset = OPT(metric_rules_max_query_timeout_ms),
     .def = "30s",
     .min = 1,
     .max = INT64_MAX,
     .help = "Longest time limit a MetricRule's query may have"},
    {.name = "metric-rules-max-concurrent-queries",
     .type = FLAG_INT64,
     .offset = OPT(metric_rules_max_concurrent_queries),
     .def = "4",
     .min = 1,
     .max = 1000,
     .help = "Most queries of one namespace's MetricRules sent to one backend at once (within "
             "--prometheus-max-concurrent-queries), so one team cannot take every slot"},
    /* logging and modes */
    {.name = "v",
     .shorthand = 'v',
     .type = FLAG_INT,
     .offset = OPT(v),
     .min = 0,
     .max = 100,
     .help = "Log verbosity: 2 logs one line per request, 6 every backend request and status, 8 "
             "response bodies"},
    {.name = "logging-format",
     .type = FLAG_STRING,
     .offset = OPT(logging_format),
     .def = "text",
     .check = check_logging_format,
     .help = "Log format: text (one line per event) or json (one JSON object per line: ts, "
             "level, v, msg and the event's fields)"},
    {.name = "help",
     .shorthand = 'h',
     .type = FLAG_BOOL,
     .offset = OPT(help),
     .help = "Print this help and exit"},
    {.name = "version",
     .type = FLAG_BOOL,
     .offset = OPT(version),
     .help = "Print the version and exit"},
    {.name = "check-config",
     .type = FLAG_BOOL,
     .offset = OPT(check_config),
     .help = "Load and compile the config file, print its warnings, and exit: 0 when it loads "
             "(warnings included), 1 at the first error"},
    {.name = "strict-config",
     .type = FLAG_BOOL,
     .offset = OPT(strict_config),
     .help = "Treat config warnings (rules prometheus-adapter would load but cannot serve, an "
             "ignored second YAML document, ...) as errors: exit 1 instead of starting; with "
             "--check-config, for CI"},
    {.name = "print-flags-markdown",
     .type = FLAG_BOOL,
     .offset = OPT(print_flags_markdown),
     .hidden = true,
     .help = "Print this flag reference as Markdown (docs/flags.md) and exit"},
};

#define N_FLAGS (sizeof(flags) / sizeof(flags[0]))

/* ---- lookup --------------------------------------------------------------------------------- */

static const struct flag *find_long(const char *name, size_t len)
{
    for (size_t i = 0; i < N_FLAGS; i++)
        if (strlen(flags[i].name) == len && memcmp(flags[i].name, name, len) == 0)
            return &flags[i];
    return NULL;
}

static const struct flag *find_short(char c)
{
    for (size_t i = 0; i < N_FLAGS; i++)
        if (flags[i].shorthand && flags[i].shorthand == c)
            return &flags[i];
    return NULL;
}

static bool takes_value(const struct flag *f)
{
    return f->type != FLAG_BOOL;
}

/* ---- setters -------------------------------------------------------------------------------- */

static enum cma_errc bad_value(const struct flag *f, const char *value, struct cma_err *reterr,
                               const char *fmt, ...) __attribute__((format(printf, 4, 5)));

static enum cma_errc bad_value(const struct flag *f, const char *value, struct cma_err *reterr,
                               const char *fmt, ...)
{
    char why[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, sizeof(why), fmt, ap);
    va_end(ap);
    return cma_err_set(reterr, CMA_ERR_FLAG, "invalid argument \"%s\" for \"--%s\" flag: %s", value,
                       f->name, why);
}

/* Go strconv.ParseBool. */
static bool parse_bool(const char *s, bool *ret)
{
    static const char *const truths[] = {"1", "t", "T", "TRUE", "true", "True"};
    static const char *const falsehoods[] = {"0", "f", "F", "FALSE", "false", "False"};
    for (size_t i = 0; i < sizeof(truths) / sizeof(truths[0]); i++) {
        if (strcmp(s, truths[i]) == 0) {
            *ret = true;
            return true;
        }
        if (strcmp(s, falsehoods[i]) == 0) {
            *ret = false;
            return true;
        }
    }
    return false;
}

/* Go strconv.ParseInt(s, 0, 64) without underscores: decimal, 0x hex, 0 octal. */
static bool parse_int(const char *s, int64_t *ret)
{
    if (!((*s >= '0' && *s <= '9') || *s == '-' || *s == '+'))
        return false;
    errno = 0;
    char *end;
    long long v = strtoll(s, &end, 0);
    if (errno || end == s || *end)
        return false;
    *ret = v;
    return true;
}

static enum cma_errc check_range(const struct flag *f, const char *value, int64_t v,
                                 struct cma_err *reterr)
{
    if (f->min == 0 && f->max == 0)
        return CMA_OK;
    if (v >= f->min && v <= f->max)
        return CMA_OK;
    if (f->type == FLAG_DURATION) {
        char min[32];
        return bad_value(f, value, reterr, "must be at least %s",
                         cma_duration_format(f->min, min, sizeof(min)));
    }
    if (f->max == INT64_MAX)
        return bad_value(f, value, reterr, "must be at least %lld", (long long)f->min);
    return bad_value(f, value, reterr, "must be an integer from %lld to %lld", (long long)f->min,
                     (long long)f->max);
}

static enum cma_errc set_string_array(struct cma_options *o, const struct flag *f,
                                      const char *value, struct cma_err *reterr)
{
    char ***arr = (char ***)((char *)o + f->offset);
    size_t *n = (size_t *)((char *)o + f->count_offset);
    char *copy = cma_strdup(value);
    char **grown = copy ? realloc(*arr, (*n + 1) * sizeof(**arr)) : NULL;
    if (!grown) {
        free(copy);
        return cma_err_set(reterr, CMA_ERR_NOMEM, "out of memory");
    }
    grown[(*n)++] = copy;
    *arr = grown;
    return CMA_OK;
}

static enum cma_errc set_value(struct cma_options *o, const struct flag *f, const char *value,
                               FILE *warnings, struct cma_err *reterr)
{
    void *field = (char *)o + f->offset;
    int64_t v;
    bool b;
    switch (f->type) {
    case FLAG_STRING: {
        if (f->check) {
            enum cma_errc rc = f->check(value, reterr);
            if (rc)
                return rc;
        }
        char *copy = NULL;
        if (f->normalize) {
            enum cma_errc rc = f->normalize(value, warnings, &copy, reterr);
            if (rc)
                return rc;
        } else if (!(copy = cma_strdup(value))) {
            return cma_err_set(reterr, CMA_ERR_NOMEM, "out of memory");
        }
        free(*(char **)field);
        *(char **)field = copy;
        return CMA_OK;
    }
    case FLAG_STRING_ARRAY:
        return set_string_array(o, f, value, reterr);
    case FLAG_BOOL:
        if (!parse_bool(value, &b))
            return bad_value(f, value, reterr, "expected true or false");
        *(bool *)field = b;
        return CMA_OK;
    case FLAG_DURATION: {
        if (cma_duration_parse(value, &v, NULL))
            return bad_value(f, value, reterr, "not a duration (e.g. 30s, 5m, 1h30m)");
        enum cma_errc rc = check_range(f, value, v, reterr);
        if (!rc)
            *(int64_t *)field = v;
        return rc;
    }
    case FLAG_INT:
    case FLAG_INT64: {
        if (!parse_int(value, &v))
            return bad_value(f, value, reterr, "not an integer");
        enum cma_errc rc = check_range(f, value, v, reterr);
        if (rc)
            return rc;
        if (f->type == FLAG_INT)
            *(int *)field = (int)v;
        else
            *(int64_t *)field = v;
        return CMA_OK;
    }
    }
    return cma_err_set(reterr, CMA_ERR_INTERNAL, "flag --%s has no type", f->name);
}

static enum cma_errc apply_defaults(struct cma_options *o, struct cma_err *reterr)
{
    for (size_t i = 0; i < N_FLAGS; i++) {
        if (!flags[i].def)
            continue;
        enum cma_errc rc = set_value(o, &flags[i], flags[i].def, NULL, reterr);
        if (rc)
            return rc;
    }
    return CMA_OK;
}

/* ---- parsing -------------------------------------------------------------------------------- */

/* True when value parses as the Go type of a flag accepted without effect. */
static bool ignored_value_ok(enum cma_compat_type type, const char *value, const char **expected)
{
    bool b;
    int64_t v;
    char *end = NULL;
    switch (type) {
    case CMA_COMPAT_BOOL:
        *expected = "expected true or false";
        return parse_bool(value, &b);
    case CMA_COMPAT_INT:
        *expected = "not an integer";
        return parse_int(value, &v);
    case CMA_COMPAT_FLOAT:
        *expected = "not a number";
        errno = 0;
        (void)strtod(value, &end);
        return *value && errno == 0 && end && *end == '\0';
    case CMA_COMPAT_DURATION:
        *expected = "not a duration (e.g. 30s, 5m, 1h30m)";
        return cma_duration_parse(value, &v, NULL) == CMA_OK;
    case CMA_COMPAT_STRING:
        break;
    }
    return true;
}

/* A prometheus-adapter flag this adapter accepts without acting on it: the value is taken and
 * checked as upstream's parser would, then one warning line says so. */
static enum cma_errc parse_ignored(const struct cma_compat_flag *c, int argc, char **argv, int *i,
                                   size_t name_len, const char *value, FILE *warnings,
                                   struct cma_err *reterr)
{
    const char *arg = argv[*i];
    const char *name = arg[1] == '-' ? arg + 2 : arg + 1;
    if (!value && c->type == CMA_COMPAT_BOOL)
        value = "true";
    else if (!value && *i + 1 < argc)
        value = argv[++*i];
    else if (!value)
        return cma_err_set(reterr, CMA_ERR_FLAG, "flag needs an argument: %s", arg);
    const char *expected = "";
    if (!ignored_value_ok(c->type, value, &expected))
        return cma_err_set(reterr, CMA_ERR_FLAG, "invalid argument \"%s\" for \"--%.*s\" flag: %s",
                           value, (int)name_len, name, expected);
    if (warnings)
        fprintf(warnings, "flag --%.*s has no effect here (%s); ignoring it\n", (int)name_len, name,
                c->no_effect);
    return CMA_OK;
}

/* Parses argv[*i] (a flag); may consume argv[*i + 1] as its value. */
static enum cma_errc parse_one(struct cma_options *o, int argc, char **argv, int *i, FILE *warnings,
                               struct cma_err *reterr)
{
    const char *arg = argv[*i];
    const char *body = arg[1] == '-' ? arg + 2 : arg + 1;
    const char *eq = strchr(body, '=');
    size_t name_len = eq ? (size_t)(eq - body) : strlen(body);
    const char *value = eq ? eq + 1 : NULL;
    const struct flag *f = find_long(body, name_len);
    const struct cma_compat_flag *ignored = f ? NULL : cma_compat_ignored_flag(body, name_len);
    if (ignored && name_len > 0)
        return parse_ignored(ignored, argc, argv, i, name_len, value, warnings, reterr);
    if (!f && arg[1] != '-') {
        /* -x, -x=v, -xv: a shorthand */
        f = find_short(body[0]);
        if (f) {
            if (body[1] == '=')
                value = body + 2;
            else if (body[1] && takes_value(f))
                value = body + 1;
            else if (body[1])
                return cma_err_set(reterr, CMA_ERR_FLAG, "unknown shorthand flag: '%c' in %s",
                                   body[1], arg);
            else
                value = NULL;
        }
    }
    if (!f || name_len == 0) {
        if (eq)
            return cma_err_set(reterr, CMA_ERR_FLAG, "unknown flag: %.*s", (int)(eq - arg), arg);
        return cma_err_set(reterr, CMA_ERR_FLAG, "unknown flag: %s", arg);
    }
    if (!value) {
        if (!takes_value(f)) {
            value = "true";
        } else if (*i + 1 < argc) {
            value = argv[++*i];
        } else {
            /* no '=' on this path: arg is the flag exactly as written */
            return cma_err_set(reterr, CMA_ERR_FLAG, "flag needs an argument: %s", arg);
        }
    }
    return set_value(o, f, value, warnings, reterr);
}

/* Checks across flags, done once all are parsed. */
static enum cma_errc check_combinations(const struct cma_options *o, struct cma_err *reterr)
{
    if (o->n_configs == 0 && !o->help && !o->version && !o->print_flags_markdown)
        return cma_err_set(reterr, CMA_ERR_FLAG,
                           "no metrics discovery configuration file specified (make sure to "
                           "use --config)");
    if (!o->prometheus_client_tls_cert_file != !o->prometheus_client_tls_key_file)
        return cma_err_set(reterr, CMA_ERR_FLAG,
                           "--prometheus-client-tls-cert-file and "
                           "--prometheus-client-tls-key-file must be given together");
    if (!o->tls_cert_file != !o->tls_private_key_file)
        return cma_err_set(reterr, CMA_ERR_FLAG,
                           "--tls-cert-file and --tls-private-key-file must be given together");
    return CMA_OK;
}

enum cma_errc cma_options_parse(int argc, char **argv, struct cma_options **ret, FILE *warnings,
                                struct cma_err *reterr)
{
    struct cma_options *o = calloc(1, sizeof(*o));
    if (!o)
        return cma_err_set(reterr, CMA_ERR_NOMEM, "out of memory");
    enum cma_errc rc = apply_defaults(o, reterr);
    bool flags_done = false;
    for (int i = 1; !rc && i < argc; i++) {
        const char *arg = argv[i];
        if (!flags_done && strcmp(arg, "--") == 0) {
            flags_done = true;
            continue;
        }
        if (flags_done || arg[0] != '-' || arg[1] == '\0') {
            rc = cma_err_set(reterr, CMA_ERR_FLAG,
                             "unexpected argument \"%s\": the adapter takes only flags", arg);
            break;
        }
        rc = parse_one(o, argc, argv, &i, warnings, reterr);
    }
    if (!rc)
        rc = check_combinations(o, reterr);
    if (rc) {
        cma_options_free(o);
        return rc;
    }
    *ret = o;
    return CMA_OK;
}

void cma_options_free(struct cma_options *opts)
{
    if (!opts)
        return;
    for (size_t i = 0; i < N_FLAGS; i++) {
        const struct flag *f = &flags[i];
        if (f->type == FLAG_STRING) {
            free(*(char **)((char *)opts + f->offset));
        } else if (f->type == FLAG_STRING_ARRAY) {
            char **arr = *(char ***)((char *)opts + f->offset);
            size_t n = *(size_t *)((char *)opts + f->count_offset);
            for (size_t j = 0; j < n; j++)
                free(arr[j]);
            free(arr);
        }
    }
    free(opts);
}

enum cma_errc cma_options_validate(const struct cma_options *o, bool has_custom_rules,
                                   struct cma_err *reterr)
{
    if (has_custom_rules && o->metrics_max_age_ms != 0 &&
        o->metrics_max_age_ms < o->metrics_relist_interval_ms)
        return cma_err_set(reterr, CMA_ERR_FLAG, "max age must not be less than relist interval");
    return CMA_OK;
}

/* ---- help and Markdown ---------------------------------------------------------------------- */

static const char *type_name(const struct flag *f)
{
    switch (f->type) {
    case FLAG_STRING:
        return "string";
    case FLAG_STRING_ARRAY:
        return "stringArray";
    case FLAG_DURATION:
        return "duration";
    case FLAG_INT:
    case FLAG_INT64:
        return "int";
    case FLAG_BOOL:
        return "bool";
    }
    return "";
}

/* The default as pflag prints it ("10m0s", "6443", "GET"); "" for a zero value. */
static void default_text(const struct flag *f, char *out, size_t out_len)
{
    out[0] = '\0';
    if (!f->def)
        return;
    if (f->type == FLAG_DURATION) {
        int64_t ms = 0;
        if (cma_duration_parse(f->def, &ms, NULL) == CMA_OK && ms != 0)
            cma_duration_format(ms, out, out_len);
        return;
    }
    snprintf(out, out_len, "%s", f->def);
}

/* "  -v, --v int" or "      --config string" (bools have no type). */
static void usage_head(const struct flag *f, char *out, size_t out_len)
{
    const char *type = f->type == FLAG_BOOL ? "" : type_name(f);
    if (f->shorthand)
        snprintf(out, out_len, "  -%c, --%s%s%s", f->shorthand, f->name, *type ? " " : "", type);
    else
        snprintf(out, out_len, "      --%s%s%s", f->name, *type ? " " : "", type);
}

void cma_options_print_help(FILE *out, const char *argv0)
{
    const char *prog = "custom-metrics-adapter";
    if (argv0 && *argv0) {
        const char *slash = strrchr(argv0, '/');
        prog = slash ? slash + 1 : argv0;
    }
    fprintf(out, "Usage: %s [flags]\n\nFlags:\n", prog);
    size_t width = 0;
    char head[160];
    for (size_t i = 0; i < N_FLAGS; i++) {
        if (flags[i].hidden)
            continue;
        usage_head(&flags[i], head, sizeof(head));
        if (strlen(head) > width)
            width = strlen(head);
    }
    for (size_t i = 0; i < N_FLAGS; i++) {
        const struct flag *f = &flags[i];
        if (f->hidden)
            continue;
        char def[64];
        usage_head(f, head, sizeof(head));
        default_text(f, def, sizeof(def));
        fprintf(out, "%-*s   %s", (int)width, head, f->help);
        if (def[0] && f->type == FLAG_STRING)
            fprintf(out, " (default \"%s\")", def);
        else if (def[0])
            fprintf(out, " (default %s)", def);
        fputc('\n', out);
    }
}

/* Writes s with '|' escaped for a Markdown table cell. */
static void md_cell(FILE *out, const char *s)
{
    for (; *s; s++) {
        if (*s == '|')
            fputc('\\', out);
        fputc(*s, out);
    }
}

void cma_options_print_markdown(FILE *out)
{
    fputs("| flag | type | default | description |\n", out);
    fputs("|------|------|---------|-------------|\n", out);
    for (size_t i = 0; i < N_FLAGS; i++) {
        const struct flag *f = &flags[i];
        if (f->hidden)
            continue;
        char def[64];
        default_text(f, def, sizeof(def));
        if (f->shorthand)
            fprintf(out, "| `-%c`, `--%s` | %s | ", f->shorthand, f->name, type_name(f));
        else
            fprintf(out, "| `--%s` | %s | ", f->name, type_name(f));
        if (def[0])
            fprintf(out, "`%s` ", def);
        fputs("| ", out);
        md_cell(out, f->help);
        fputs(" |\n", out);
    }
    fputs("\n## prometheus-adapter's flags\n\n"
          "Every flag of prometheus-adapter v0.12.0 (its own, klog's and the generic apiserver's "
          "that it inherits) and what this adapter does with it. A flag marked *accepted, no "
          "effect* is parsed with its type and ignored with one warning line on stderr.\n\n",
          out);
    cma_compat_print_markdown(out);
}
