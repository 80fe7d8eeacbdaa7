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
    char *config;                     /* --config (required unless --help/--version) */
    int64_t metrics_relist_interval_ms; /* --metrics-relist-interval, default 10m */
    int64_t metrics_max_age_ms;         /* --metrics-max-age, default 0 = relist interval */
    /* backend */
    char *prometheus_url;             /* --prometheus-url, default https://localhost */
    char *prometheus_verb;            /* --prometheus-verb GET|POST, default GET */
    char **prometheus_headers;        /* --prometheus-header k=v (repeatable) */
    size_t n_prometheus_headers;
    char *prometheus_token_file;      /* --prometheus-token-file */
    char *prometheus_ca_file;         /* --prometheus-ca-file */
    char *prometheus_client_tls_cert_file; /* --prometheus-client-tls-cert-file */
    char *prometheus_client_tls_key_file;  /* --prometheus-client-tls-key-file */
    char *prometheus_auth_config;     /* --prometheus-auth-config (kubeconfig for auth) */
    bool prometheus_auth_incluster;   /* --prometheus-auth-incluster */
    int64_t prometheus_timeout_ms;    /* --prometheus-timeout, default 10s */
    int64_t prometheus_connect_timeout_ms; /* --prometheus-connect-timeout, default 3s */
    int64_t prometheus_max_response_bytes; /* --prometheus-max-response-bytes, default 64Mi */
    /* serving */
    char *bind_address;               /* --bind-address, default 0.0.0.0 */
    int secure_port;                  /* --secure-port, default 6443 */
    char *cert_dir;                   /* --cert-dir, default apiserver.local.config/certificates */
    char *tls_cert_file;              /* --tls-cert-file */
    char *tls_private_key_file;       /* --tls-private-key-file */
    char *tls_min_version;            /* --tls-min-version, default VersionTLS12 */
    char *tls_cipher_suites;          /* --tls-cipher-suites (comma list) */
    bool disable_http2;               /* --disable-http2 (accepted; we never serve h2) */
    int64_t max_connections;          /* --max-connections, default 1000 */
    /* kube */
    char *lister_kubeconfig;          /* --lister-kubeconfig; NULL = in-cluster */
    int64_t discovery_interval_ms;    /* --discovery-interval, default 10m */
    /* logging */
    int v;                            /* --v */
    bool help;                        /* --help / -h */
    bool version;                     /* --version */
};

/* Parses argv (argv[0] is skipped). Accepts --flag=value, --flag value, -flag (Go style single
 * dash), bools as --flag, --flag=true/false. Durations use Go syntax. klog's deprecated flags
 * (--logtostderr, --alsologtostderr, --log-dir, --log-file, --skip-headers, ...) are accepted
 * and ignored with a warning line pushed to `warnings` (may be NULL). Unknown flags and bad
 * values give CMA_ERR_FLAG "unknown flag: --x" / "invalid argument \"x\" for \"--secure-port\"".
 * On failure *ret is untouched. Caller owns the result: cma_options_free(). */
enum cma_errc cma_options_parse(int argc, char **argv, struct cma_options **ret, FILE *warnings,
                                struct cma_err *reterr);
void cma_options_free(struct cma_options *opts);

/* Prints usage with one line per flag: name, type, default, help text (the same table). */
void cma_options_print_help(FILE *out, const char *argv0);
/* Prints the Markdown flag reference (docs/flags.md is generated from this). */
void cma_options_print_markdown(FILE *out);

#endif
