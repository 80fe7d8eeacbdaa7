/* options.h: command-line flags, named as in prometheus-adapter and kube-apiserver, from one
 * table that also prints --help and docs/flags.md. Parsed once by main; immutable afterwards. */
#ifndef CMA_OPTIONS_H
#define CMA_OPTIONS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "cma/err.h"

struct cma_options {
    /* adapter */
    char **configs;   /* --config, repeatable: files and directories, merged in this order */
    size_t n_configs; /* (required unless --help/--version) */
    int64_t metrics_relist_interval_ms; /* --metrics-relist-interval, default 10m */
    int64_t metrics_max_age_ms;         /* --metrics-max-age, default 0 = relist interval */
    char *catalog_cache_file;           /* --catalog-cache-file; NULL or "" = off */
    int64_t metrics_cache_ttl_ms;       /* --metrics-cache-ttl, default 5s; 0 = no cache */
    int64_t metrics_cache_max_bytes;    /* --metrics-cache-max-bytes, default 8Mi */
    /* backend */
    char *prometheus_url;      /* --prometheus-url, default https://localhost */
    char *prometheus_verb;     /* --prometheus-verb GET|POST, default GET */
    char **prometheus_headers; /* --prometheus-header k=v (repeatable) */
    size_t n_prometheus_headers;
    char *prometheus_token_file;               /* --prometheus-token-file */
    char *prometheus_ca_file;                  /* --prometheus-ca-file */
    char *prometheus_client_tls_cert_file;     /* --prometheus-client-tls-cert-file */
    char *prometheus_client_tls_key_file;      /* --prometheus-client-tls-key-file */
    char *prometheus_auth_config;              /* --prometheus-auth-config (kubeconfig for auth) */
    char *prometheus_basic_auth_username;      /* --prometheus-basic-auth-username */
    char *prometheus_basic_auth_password_file; /* --prometheus-basic-auth-password-file */
    bool prometheus_insecure_skip_tls_verify;  /* --prometheus-insecure-skip-tls-verify */
    bool prometheus_auth_incluster;            /* --prometheus-auth-incluster */
    int64_t prometheus_timeout_ms;             /* --prometheus-timeout, default 10s */
    int64_t prometheus_series_timeout_ms;      /* --prometheus-series-timeout, default 30s */
    int64_t prometheus_connect_timeout_ms;     /* --prometheus-connect-timeout, default 3s */
    int64_t prometheus_max_response_bytes;     /* --prometheus-max-response-bytes, default 64Mi */
    int64_t prometheus_max_bytes_in_flight;    /* --prometheus-max-bytes-in-flight, default 32Mi */
    int64_t prometheus_max_concurrent_queries; /* --prometheus-max-concurrent-queries, default 8 */
    int64_t
        prometheus_max_query_length; /* --prometheus-max-query-length, default 16384; 0 = none */
    /* serving */
    char *bind_address;            /* --bind-address, default 0.0.0.0 */
    int secure_port;               /* --secure-port, default 6443 */
    char *cert_dir;                /* --cert-dir, default apiserver.local.config/certificates */
    char *service_name;            /* --service-name: self-signed certificate SANs */
    char *tls_cert_file;           /* --tls-cert-file */
    char *tls_private_key_file;    /* --tls-private-key-file */
    char *tls_min_version;         /* --tls-min-version, default VersionTLS12 */
    char *tls_cipher_suites;       /* --tls-cipher-suites (comma list) */
    bool disable_custom_metrics;   /* --disable-custom-metrics */
    bool disable_external_metrics; /* --disable-external-metrics (e.g. next to KEDA) */
    bool disable_resource_metrics; /* --disable-resource-metrics (e.g. next to metrics-server) */
    bool disable_http2;            /* --disable-http2 (accepted; we never serve h2) */
    int64_t max_connections;       /* --max-connections, default 1000 */
    int64_t max_connections_per_client; /* --max-connections-per-client, default 100 */
    int64_t max_requests_inflight;      /* --max-requests-inflight, default 64 */
    int64_t tls_handshake_timeout_ms;   /* --tls-handshake-timeout, default 10s */
    int64_t request_header_timeout_ms;  /* --request-header-timeout, default 10s */
    int64_t keep_alive_timeout_ms;      /* --keep-alive-timeout, default 2m */
    int64_t max_request_header_bytes;   /* --max-request-header-bytes, default 16384 */
    int64_t shutdown_grace_period_ms;   /* --shutdown-grace-period, default 25s */
    /* kube */
    char *lister_kubeconfig;       /* --lister-kubeconfig; NULL = in-cluster */
    int64_t discovery_interval_ms; /* --discovery-interval, default 10m */
    /* delegated authentication and authorization (comma lists are split by the caller) */
    char *requestheader_client_ca_file;          /* --requestheader-client-ca-file */
    char *requestheader_allowed_names;           /* --requestheader-allowed-names (comma list) */
    char *requestheader_username_headers;        /* --requestheader-username-headers */
    char *requestheader_group_headers;           /* --requestheader-group-headers */
    char *requestheader_extra_headers_prefix;    /* --requestheader-extra-headers-prefix */
    char *client_ca_file;                        /* --client-ca-file */
    char *authentication_kubeconfig;             /* --authentication-kubeconfig */
    bool authentication_skip_lookup;             /* --authentication-skip-lookup */
    bool authentication_tolerate_lookup_failure; /* --authentication-tolerate-lookup-failure */
    int64_t authentication_token_webhook_cache_ttl_ms;       /* default 10s */
    char *authorization_kubeconfig;                          /* --authorization-kubeconfig */
    int64_t authorization_webhook_cache_authorized_ttl_ms;   /* default 10s */
    int64_t authorization_webhook_cache_unauthorized_ttl_ms; /* default 10s */
    char *authorization_always_allow_paths;                  /* default /healthz,/readyz,/livez */
    bool insecure_disable_auth;                              /* --insecure-disable-auth */
    bool enable_explain;                                     /* --enable-explain */
    /* MetricRules (docs/metric-rules.md). Serving them is not implemented yet: a true
     * --enable-metric-rules is refused by cma_options_parse; the others are checked and kept. */
    bool enable_metric_rules;               /* --enable-metric-rules, default false */
    char *metric_rules_namespace_label;     /* --metric-rules-namespace-label, default namespace */
    char *metric_rules_namespace_selector;  /* --metric-rules-namespace-selector; "" = every one */
    int64_t metric_rules_max_per_namespace; /* default 20 MetricRules */
    int64_t metric_rules_max_metrics_per_namespace; /* default 200 metrics */
    int64_t metric_rules_max_query_timeout_ms;      /* default 30s */
    int64_t metric_rules_max_concurrent_queries;    /* per namespace and backend, default 4 */
    /* logging */
    int v;                     /* --v */
    char *logging_format;      /* --logging-format: "text" (default) or "json" */
    bool help;                 /* --help / -h */
    bool check_config;         /* --check-config: load and compile the config, then exit */
    bool strict_config;        /* --strict-config: config warnings are fatal */
    bool print_flags_markdown; /* --print-flags-markdown (hidden): docs/flags.md */
    bool version;              /* --version */
};

/* Parses argv (argv[0] is skipped). Accepts --flag=value, --flag value, -flag (Go style single
 * dash), bools as --flag, --flag=true/false. Durations use Go syntax. prometheus-adapter's flags
 * that have no effect here (klog's --logtostderr, --log_dir, --vmodule, ..., --audit-*,
 * --profiling, ...: compat.h) are checked and ignored with one warning line each on `warnings`
 * (may be NULL), as are RC4 names in --tls-cipher-suites. Unknown flags and bad values give
 * CMA_ERR_FLAG "unknown flag: --x" / "invalid argument \"x\" for \"--secure-port\"".
 * Also rejected here: positional arguments, a --prometheus-verb other than GET/POST, a client
 * or serving certificate without its key (or the reverse), and a missing --config unless
 * --help, --version or --print-flags-markdown is given.
 * On failure *ret is untouched. Caller owns the result: cma_options_free(). */
enum cma_errc cma_options_parse(int argc, char **argv, struct cma_options **ret, FILE *warnings,
                                struct cma_err *reterr);
void cma_options_free(struct cma_options *opts);

/* Checks that need the loaded config: with custom rules, a non-zero --metrics-max-age must not
 * be less than --metrics-relist-interval (CMA_ERR_FLAG "max age must not be less than relist
 * interval", prometheus-adapter's words). */
enum cma_errc cma_options_validate(const struct cma_options *o, bool has_custom_rules,
                                   struct cma_err *reterr);

/* Prints usage with one line per flag: name, type, default, help text (the same table). */
void cma_options_print_help(FILE *out, const char *argv0);
/* Prints the Markdown flag reference (docs/flags.md is generated from this). */
void cma_options_print_markdown(FILE *out);

#endif
