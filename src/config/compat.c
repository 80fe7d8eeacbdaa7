/* compat.c: the table of prometheus-adapter v0.12.0's flags and what this adapter does with each,
 * and the Go TLS cipher suite names.
 *
 * DESIGN: one static table, in the order upstream registers the flags: cmd/adapter/adapter.go,
 * then what it inherits — klog through k8s.io/component-base/logs.AddFlags (klog's own
 * underscore names: upstream's pflag set has no normalizer, the dashed forms are accepted here as
 * well because Kubernetes components take them), custom-metrics-apiserver's AdapterBase and its
 * k8s.io/apiserver v0.30 option groups (secure serving, delegated authentication and
 * authorization, audit, features). A row with no_effect == NULL names a flag of options.c's own
 * table (a unit test checks that); the others are parsed with their Go type and ignored. */
#include "cma/compat.h"

#include <string.h>

#define IMPL(n, o, t)                                                                              \
    {                                                                                              \
        .name = (n), .origin = (o), .type = (t)                                                    \
    }
#define NOOP(n, o, t, why)                                                                         \
    {                                                                                              \
        .name = (n), .origin = (o), .type = (t), .no_effect = (why)                                \
    }
#define NOOP2(n, a, o, t, why)                                                                     \
    {                                                                                              \
        .name = (n), .alias = (a), .origin = (o), .type = (t), .no_effect = (why)                  \
    }

#define ADAPTER "prometheus-adapter"
#define KLOG "klog (component-base logs)"
#define BASE "custom-metrics-apiserver"
#define SERVING "apiserver secure serving"
#define AUTHN "apiserver authentication"
#define AUTHZ "apiserver authorization"
#define AUDIT "apiserver audit"
#define FEATURES "apiserver features"

#define WHY_KLOG "logs go to stderr in this adapter's own format; --v sets the verbosity"
#define WHY_AUDIT "no audit log is written"
#define WHY_H2 "HTTP/2 is not served"

static const struct cma_compat_flag compat_flags[] = {
    /* cmd/adapter/adapter.go */
    IMPL("prometheus-url", ADAPTER, CMA_COMPAT_STRING),
    IMPL("prometheus-auth-incluster", ADAPTER, CMA_COMPAT_BOOL),
    IMPL("prometheus-auth-config", ADAPTER, CMA_COMPAT_STRING),
    IMPL("prometheus-ca-file", ADAPTER, CMA_COMPAT_STRING),
    IMPL("prometheus-client-tls-cert-file", ADAPTER, CMA_COMPAT_STRING),
    IMPL("prometheus-client-tls-key-file", ADAPTER, CMA_COMPAT_STRING),
    IMPL("prometheus-token-file", ADAPTER, CMA_COMPAT_STRING),
    IMPL("prometheus-header", ADAPTER, CMA_COMPAT_STRING),
    IMPL("prometheus-verb", ADAPTER, CMA_COMPAT_STRING),
    IMPL("config", ADAPTER, CMA_COMPAT_STRING),
    IMPL("metrics-relist-interval", ADAPTER, CMA_COMPAT_DURATION),
    IMPL("metrics-max-age", ADAPTER, CMA_COMPAT_DURATION),
    IMPL("disable-http2", ADAPTER, CMA_COMPAT_BOOL),
    /* k8s.io/component-base/logs.AddFlags: klog's flags and the flush frequency */
    IMPL("v", KLOG, CMA_COMPAT_INT),
    NOOP("vmodule", KLOG, CMA_COMPAT_STRING, WHY_KLOG),
    NOOP("log-flush-frequency", KLOG, CMA_COMPAT_DURATION, "every log line is written at once"),
    NOOP2("log_dir", "log-dir", KLOG, CMA_COMPAT_STRING, WHY_KLOG),
    NOOP2("log_file", "log-file", KLOG, CMA_COMPAT_STRING, WHY_KLOG),
    NOOP2("log_file_max_size", "log-file-max-size", KLOG, CMA_COMPAT_INT, WHY_KLOG),
    NOOP("logtostderr", KLOG, CMA_COMPAT_BOOL, WHY_KLOG),
    NOOP("alsologtostderr", KLOG, CMA_COMPAT_BOOL, WHY_KLOG),
    NOOP2("add_dir_header", "add-dir-header", KLOG, CMA_COMPAT_BOOL, WHY_KLOG),
    NOOP2("skip_headers", "skip-headers", KLOG, CMA_COMPAT_BOOL, WHY_KLOG),
    NOOP2("skip_log_headers", "skip-log-headers", KLOG, CMA_COMPAT_BOOL, WHY_KLOG),
    NOOP2("one_output", "one-output", KLOG, CMA_COMPAT_BOOL, WHY_KLOG),
    NOOP("stderrthreshold", KLOG, CMA_COMPAT_STRING, WHY_KLOG),
    NOOP2("log_backtrace_at", "log-backtrace-at", KLOG, CMA_COMPAT_STRING, WHY_KLOG),
    /* custom-metrics-apiserver pkg/cmd AdapterBase */
    IMPL("lister-kubeconfig", BASE, CMA_COMPAT_STRING),
    IMPL("discovery-interval", BASE, CMA_COMPAT_DURATION),
    NOOP("client-qps", BASE, CMA_COMPAT_FLOAT, "requests to kube-apiserver are not throttled here"),
    NOOP("client-burst", BASE, CMA_COMPAT_INT, "requests to kube-apiserver are not throttled here"),
    /* k8s.io/apiserver pkg/server/options: SecureServingOptions */
    IMPL("bind-address", SERVING, CMA_COMPAT_STRING),
    IMPL("secure-port", SERVING, CMA_COMPAT_INT),
    IMPL("cert-dir", SERVING, CMA_COMPAT_STRING),
    IMPL("tls-cert-file", SERVING, CMA_COMPAT_STRING),
    IMPL("tls-private-key-file", SERVING, CMA_COMPAT_STRING),
    IMPL("tls-cipher-suites", SERVING, CMA_COMPAT_STRING),
    IMPL("tls-min-version", SERVING, CMA_COMPAT_STRING),
    NOOP("tls-sni-cert-key", SERVING, CMA_COMPAT_STRING,
         "no SNI certificates: the --tls-cert-file pair (or the self-signed one) serves every "
         "name"),
    NOOP("http2-max-streams-per-connection", SERVING, CMA_COMPAT_INT, WHY_H2),
    NOOP("permit-port-sharing", SERVING, CMA_COMPAT_BOOL,
         "the listening socket is never shared with another process"),
    NOOP("permit-address-sharing", SERVING, CMA_COMPAT_BOOL,
         "the listening socket is never shared with another process"),
    /* DelegatingAuthenticationOptions */
    IMPL("authentication-kubeconfig", AUTHN, CMA_COMPAT_STRING),
    IMPL("authentication-token-webhook-cache-ttl", AUTHN, CMA_COMPAT_DURATION),
    IMPL("authentication-skip-lookup", AUTHN, CMA_COMPAT_BOOL),
    IMPL("authentication-tolerate-lookup-failure", AUTHN, CMA_COMPAT_BOOL),
    IMPL("client-ca-file", AUTHN, CMA_COMPAT_STRING),
    IMPL("requestheader-username-headers", AUTHN, CMA_COMPAT_STRING),
    IMPL("requestheader-group-headers", AUTHN, CMA_COMPAT_STRING),
    IMPL("requestheader-extra-headers-prefix", AUTHN, CMA_COMPAT_STRING),
    IMPL("requestheader-client-ca-file", AUTHN, CMA_COMPAT_STRING),
    IMPL("requestheader-allowed-names", AUTHN, CMA_COMPAT_STRING),
    /* DelegatingAuthorizationOptions */
    IMPL("authorization-kubeconfig", AUTHZ, CMA_COMPAT_STRING),
    IMPL("authorization-webhook-cache-authorized-ttl", AUTHZ, CMA_COMPAT_DURATION),
    IMPL("authorization-webhook-cache-unauthorized-ttl", AUTHZ, CMA_COMPAT_DURATION),
    IMPL("authorization-always-allow-paths", AUTHZ, CMA_COMPAT_STRING),
    /* AuditOptions: policy, log backend, webhook backend */
    NOOP("audit-policy-file", AUDIT, CMA_COMPAT_STRING, WHY_AUDIT),
    NOOP("audit-log-path", AUDIT, CMA_COMPAT_STRING, WHY_AUDIT),
    NOOP("audit-log-maxage", AUDIT, CMA_COMPAT_INT, WHY_AUDIT),
    NOOP("audit-log-maxbackup", AUDIT, CMA_COMPAT_INT, WHY_AUDIT),
    NOOP("audit-log-maxsize", AUDIT, CMA_COMPAT_INT, WHY_AUDIT),
    NOOP("audit-log-format", AUDIT, CMA_COMPAT_STRING, WHY_AUDIT),
    NOOP("audit-log-compress", AUDIT, CMA_COMPAT_BOOL, WHY_AUDIT),
    NOOP("audit-log-version", AUDIT, CMA_COMPAT_STRING, WHY_AUDIT),
    NOOP("audit-log-mode", AUDIT, CMA_COMPAT_STRING, WHY_AUDIT),
    NOOP("audit-log-batch-buffer-size", AUDIT, CMA_COMPAT_INT, WHY_AUDIT),
    NOOP("audit-log-batch-max-size", AUDIT, CMA_COMPAT_INT, WHY_AUDIT),
    NOOP("audit-log-batch-max-wait", AUDIT, CMA_COMPAT_DURATION, WHY_AUDIT),
    NOOP("audit-log-batch-throttle-enable", AUDIT, CMA_COMPAT_BOOL, WHY_AUDIT),
    NOOP("audit-log-batch-throttle-qps", AUDIT, CMA_COMPAT_FLOAT, WHY_AUDIT),
    NOOP("audit-log-batch-throttle-burst", AUDIT, CMA_COMPAT_INT, WHY_AUDIT),
    NOOP("audit-log-truncate-enabled", AUDIT, CMA_COMPAT_BOOL, WHY_AUDIT),
    NOOP("audit-log-truncate-max-batch-size", AUDIT, CMA_COMPAT_INT, WHY_AUDIT),
    NOOP("audit-log-truncate-max-event-size", AUDIT, CMA_COMPAT_INT, WHY_AUDIT),
    NOOP("audit-webhook-config-file", AUDIT, CMA_COMPAT_STRING, WHY_AUDIT),
    NOOP("audit-webhook-initial-backoff", AUDIT, CMA_COMPAT_DURATION, WHY_AUDIT),
    NOOP("audit-webhook-batch-initial-backoff", AUDIT, CMA_COMPAT_DURATION, WHY_AUDIT),
    NOOP("audit-webhook-version", AUDIT, CMA_COMPAT_STRING, WHY_AUDIT),
    NOOP("audit-webhook-mode", AUDIT, CMA_COMPAT_STRING, WHY_AUDIT),
    NOOP("audit-webhook-batch-buffer-size", AUDIT, CMA_COMPAT_INT, WHY_AUDIT),
    NOOP("audit-webhook-batch-max-size", AUDIT, CMA_COMPAT_INT, WHY_AUDIT),
    NOOP("audit-webhook-batch-max-wait", AUDIT, CMA_COMPAT_DURATION, WHY_AUDIT),
    NOOP("audit-webhook-batch-throttle-enable", AUDIT, CMA_COMPAT_BOOL, WHY_AUDIT),
    NOOP("audit-webhook-batch-throttle-qps", AUDIT, CMA_COMPAT_FLOAT, WHY_AUDIT),
    NOOP("audit-webhook-batch-throttle-burst", AUDIT, CMA_COMPAT_INT, WHY_AUDIT),
    NOOP("audit-webhook-truncate-enabled", AUDIT, CMA_COMPAT_BOOL, WHY_AUDIT),
    NOOP("audit-webhook-truncate-max-batch-size", AUDIT, CMA_COMPAT_INT, WHY_AUDIT),
    NOOP("audit-webhook-truncate-max-event-size", AUDIT, CMA_COMPAT_INT, WHY_AUDIT),
    /* FeatureOptions */
    NOOP("profiling", FEATURES, CMA_COMPAT_BOOL, "no /debug/pprof endpoints are served"),
    NOOP("contention-profiling", FEATURES, CMA_COMPAT_BOOL, "no /debug/pprof endpoints are served"),
    NOOP("debug-socket-path", FEATURES, CMA_COMPAT_STRING, "no debug socket is served"),
    NOOP("enable-priority-and-fairness", FEATURES, CMA_COMPAT_BOOL,
         "no API Priority and Fairness: --max-requests-inflight bounds concurrent requests"),
};

#define N_COMPAT (sizeof(compat_flags) / sizeof(compat_flags[0]))

size_t cma_compat_flag_count(void)
{
    return N_COMPAT;
}

const struct cma_compat_flag *cma_compat_flag_at(size_t i)
{
    return i < N_COMPAT ? &compat_flags[i] : NULL;
}

static bool same(const char *a, const char *name, size_t len)
{
    return a && strlen(a) == len && memcmp(a, name, len) == 0;
}

const struct cma_compat_flag *cma_compat_ignored_flag(const char *name, size_t len)
{
    for (size_t i = 0; i < N_COMPAT; i++) {
        const struct cma_compat_flag *f = &compat_flags[i];
        if (f->no_effect && (same(f->name, name, len) || same(f->alias, name, len)))
            return f;
    }
    return NULL;
}

/* Go's crypto/tls names (CipherSuites and InsecureCipherSuites) plus the two legacy aliases that
 * Kubernetes' --tls-cipher-suites flag also takes. */
static const struct {
    const char *name;
    bool offered;
} cipher_suites[] = {
    {"TLS_AES_128_GCM_SHA256", true},
    {"TLS_AES_256_GCM_SHA384", true},
    {"TLS_CHACHA20_POLY1305_SHA256", true},
    {"TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA", true},
    {"TLS_ECDHE_ECDSA_WITH_AES_256_CBC_SHA", true},
    {"TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA", true},
    {"TLS_ECDHE_RSA_WITH_AES_256_CBC_SHA", true},
    {"TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256", true},
    {"TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384", true},
    {"TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256", true},
    {"TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384", true},
    {"TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256", true},
    {"TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256", true},
    {"TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305", true},
    {"TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305", true},
    {"TLS_RSA_WITH_AES_128_CBC_SHA", true},
    {"TLS_RSA_WITH_AES_256_CBC_SHA", true},
    {"TLS_RSA_WITH_AES_128_GCM_SHA256", true},
    {"TLS_RSA_WITH_AES_256_GCM_SHA384", true},
    {"TLS_RSA_WITH_AES_128_CBC_SHA256", true},
    {"TLS_RSA_WITH_3DES_EDE_CBC_SHA", true},
    {"TLS_ECDHE_RSA_WITH_3DES_EDE_CBC_SHA", true},
    {"TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA256", true},
    {"TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA256", true},
    {"TLS_RSA_WITH_RC4_128_SHA", false},
    {"TLS_ECDHE_ECDSA_WITH_RC4_128_SHA", false},
    {"TLS_ECDHE_RSA_WITH_RC4_128_SHA", false},
};

enum cma_cipher_suite_support cma_compat_cipher_suite(const char *name, size_t len)
{
    for (size_t i = 0; i < sizeof(cipher_suites) / sizeof(cipher_suites[0]); i++)
        if (same(cipher_suites[i].name, name, len))
            return cipher_suites[i].offered ? CMA_CIPHER_SERVED : CMA_CIPHER_NOT_OFFERED;
    return CMA_CIPHER_UNKNOWN;
}

void cma_compat_print_markdown(FILE *out)
{
    fputs("| prometheus-adapter flag | comes from | here |\n", out);
    fputs("|-------------------------|------------|------|\n", out);
    for (size_t i = 0; i < N_COMPAT; i++) {
        const struct cma_compat_flag *f = &compat_flags[i];
        fprintf(out, "| `--%s`", f->name);
        if (f->alias)
            fprintf(out, " (also `--%s`)", f->alias);
        fprintf(out, " | %s | ", f->origin);
        if (f->no_effect)
            fprintf(out, "accepted, no effect (one warning line): %s |\n", f->no_effect);
        else
            fputs("implemented: see the table above |\n", out);
    }
}
