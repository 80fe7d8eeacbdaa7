/* options_test.c: unit tests for command-line flags: defaults, pflag forms, repeatable
 * headers, the --disable-*-metrics group switches, errors (unknown, bad values, verbs, pairs),
 * prometheus-adapter's flags accepted without effect, Go cipher suite names, validation, --help and
 * the Markdown reference that docs/flags.md must match. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "cma/compat.h"
#include "cma/options.h"

#define ARGV(...) ((char *[]){"custom-metrics-adapter", __VA_ARGS__, NULL})
#define ARGC(...)                                                                                  \
    ((int)(sizeof((char *[]){"custom-metrics-adapter", __VA_ARGS__}) / sizeof(char *)))
#define PARSE_OK(...) parse_ok(ARGC(__VA_ARGS__), ARGV(__VA_ARGS__))
#define PARSE_FAILS(want, ...) parse_fails(ARGC(__VA_ARGS__), ARGV(__VA_ARGS__), want)

static struct cma_options *parse_ok(int argc, char **argv)
{
    struct cma_err err;
    cma_err_clear(&err);
    struct cma_options *o = NULL;
    if (cma_options_parse(argc, argv, &o, NULL, &err))
        fail_msg("unexpected error: %s", err.msg);
    assert_non_null(o);
    return o;
}

static void parse_fails(int argc, char **argv, const char *want)
{
    struct cma_err err;
    cma_err_clear(&err);
    struct cma_options *sentinel = (struct cma_options *)&err;
    struct cma_options *o = sentinel;
    assert_int_equal(cma_options_parse(argc, argv, &o, NULL, &err), CMA_ERR_FLAG);
    assert_ptr_equal(o, sentinel);
    assert_int_equal(err.code, CMA_ERR_FLAG);
    assert_string_equal(err.msg, want);
}

static void test_cma_options_parse__defaults(void **state)
{
    (void)state;
    struct cma_options *o = PARSE_OK("--config=/etc/adapter/config.yaml");
    assert_int_equal(o->n_configs, 1);
    assert_string_equal(o->configs[0], "/etc/adapter/config.yaml");
    assert_int_equal(o->metrics_relist_interval_ms, 600000);
    assert_int_equal(o->metrics_max_age_ms, 0);
    assert_int_equal(o->metrics_cache_ttl_ms, 5000);
    assert_int_equal(o->metrics_cache_max_bytes, 8388608);
    assert_string_equal(o->prometheus_url, "https://localhost");
    assert_string_equal(o->prometheus_verb, "GET");
    assert_null(o->prometheus_headers);
    assert_int_equal(o->n_prometheus_headers, 0);
    assert_null(o->prometheus_token_file);
    assert_null(o->prometheus_ca_file);
    assert_null(o->prometheus_client_tls_cert_file);
    assert_null(o->prometheus_client_tls_key_file);
    assert_null(o->prometheus_auth_config);
    assert_null(o->prometheus_basic_auth_username);
    assert_null(o->prometheus_basic_auth_password_file);
    assert_false(o->prometheus_insecure_skip_tls_verify);
    assert_false(o->prometheus_auth_incluster);
    assert_int_equal(o->prometheus_timeout_ms, 10000);
    assert_int_equal(o->prometheus_connect_timeout_ms, 3000);
    assert_int_equal(o->prometheus_max_response_bytes, 67108864);
    assert_int_equal(o->prometheus_max_concurrent_queries, 8);
    assert_string_equal(o->bind_address, "0.0.0.0");
    assert_int_equal(o->secure_port, 6443);
    assert_string_equal(o->cert_dir, "apiserver.local.config/certificates");
    assert_null(o->tls_cert_file);
    assert_null(o->tls_private_key_file);
    assert_string_equal(o->tls_min_version, "VersionTLS12");
    assert_null(o->tls_cipher_suites);
    assert_false(o->disable_custom_metrics);
    assert_false(o->disable_external_metrics);
    assert_false(o->disable_resource_metrics);
    assert_false(o->disable_http2);
    assert_int_equal(o->max_connections, 1000);
    assert_null(o->lister_kubeconfig);
    assert_int_equal(o->discovery_interval_ms, 600000);
    assert_int_equal(o->v, 0);
    assert_false(o->help);
    assert_false(o->version);
    assert_false(o->check_config);
    assert_false(o->print_flags_markdown);
    cma_options_free(o);
    cma_options_free(NULL); /* destructors accept NULL */
}

static void test_cma_options_parse__flag_forms(void **state)
{
    (void)state;
    /* the Helm chart's and kube-prometheus's argument lists */
    struct cma_options *o =
        PARSE_OK("--secure-port=6443", "--cert-dir=/tmp/cert",
                 "--prometheus-url=http://prometheus.default.svc:9090", "--metrics-relist-interval",
                 "1m", "-v", "4", "--config", "/etc/adapter/config.yaml", "--disable-http2",
                 "--prometheus-auth-incluster=true", "--prometheus-insecure-skip-tls-verify=false",
                 "-prometheus-timeout", "1m30s", "-max-connections=50", "--check-config");
    assert_int_equal(o->secure_port, 6443);
    assert_string_equal(o->cert_dir, "/tmp/cert");
    assert_string_equal(o->prometheus_url, "http://prometheus.default.svc:9090");
    assert_int_equal(o->metrics_relist_interval_ms, 60000);
    assert_int_equal(o->v, 4);
    assert_int_equal(o->n_configs, 1);
    assert_string_equal(o->configs[0], "/etc/adapter/config.yaml");
    assert_true(o->disable_http2);
    assert_true(o->prometheus_auth_incluster);
    assert_false(o->prometheus_insecure_skip_tls_verify);
    assert_int_equal(o->prometheus_timeout_ms, 90000);
    assert_int_equal(o->max_connections, 50);
    assert_true(o->check_config);
    cma_options_free(o);

    o = PARSE_OK("--config=a", "-v=6", "--disable-http2=T", "--disable-http2=0");
    assert_int_equal(o->v, 6);
    assert_false(o->disable_http2);
    cma_options_free(o);
    o = PARSE_OK("--config=a", "-v10", "--v=8", "--prometheus-url=", "--config=b");
    assert_int_equal(o->v, 8);                  /* last one wins */
    assert_string_equal(o->prometheus_url, ""); /* an explicit empty value */
    assert_int_equal(o->n_configs, 2);          /* --config is repeatable: both, in order */
    assert_string_equal(o->configs[0], "a");
    assert_string_equal(o->configs[1], "b");
    cma_options_free(o);
    /* a value may start with '-' once the flag asks for one (pflag) */
    o = PARSE_OK("--config", "-odd-name.yaml", "--secure-port", "0x1bb");
    assert_int_equal(o->n_configs, 1);
    assert_string_equal(o->configs[0], "-odd-name.yaml");
    assert_int_equal(o->secure_port, 443);
    cma_options_free(o);
}

static void test_cma_options_parse__help_and_version_need_no_config(void **state)
{
    (void)state;
    struct cma_options *o = PARSE_OK("-h");
    assert_true(o->help);
    cma_options_free(o);
    o = PARSE_OK("--version");
    assert_true(o->version);
    cma_options_free(o);
    o = PARSE_OK("--print-flags-markdown");
    assert_true(o->print_flags_markdown);
    cma_options_free(o);
    PARSE_FAILS("no metrics discovery configuration file specified (make sure to use --config)",
                "--v=2");
}

static void test_cma_options_parse__repeatable_header(void **state)
{
    (void)state;
    struct cma_options *o =
        PARSE_OK("--config=c", "--prometheus-header=X-Scope-OrgID=tenant-a", "--prometheus-header",
                 "foo", "--prometheus-header=bux=baz=23", "--prometheus-header=X-Scope-OrgID=b");
    assert_int_equal(o->n_prometheus_headers, 4);
    assert_string_equal(o->prometheus_headers[0], "X-Scope-OrgID=tenant-a");
    assert_string_equal(o->prometheus_headers[1], "foo");
    assert_string_equal(o->prometheus_headers[2], "bux=baz=23");
    assert_string_equal(o->prometheus_headers[3], "X-Scope-OrgID=b");
    cma_options_free(o);
}

static void test_cma_options_parse__unknown_flags_and_arguments(void **state)
{
    (void)state;
    PARSE_FAILS("unknown flag: --foo", "--config=c", "--foo");
    PARSE_FAILS("unknown flag: --foo", "--config=c", "--foo=bar");
    PARSE_FAILS("unknown flag: -foo", "--config=c", "-foo");
    PARSE_FAILS("unknown flag: --", "--config=c", "--=x");
    PARSE_FAILS("unknown shorthand flag: 'x' in -hx", "-hx");
    PARSE_FAILS("unexpected argument \"extra\": the adapter takes only flags", "--config=c",
                "extra");
    PARSE_FAILS("unexpected argument \"-\": the adapter takes only flags", "--config=c", "-");
    PARSE_FAILS("unexpected argument \"--v=3\": the adapter takes only flags", "--config=c", "--",
                "--v=3");
    PARSE_FAILS("flag needs an argument: --config", "--config");
    PARSE_FAILS("flag needs an argument: -v", "--config=c", "-v");
    /* "--" alone is fine */
    struct cma_options *o = PARSE_OK("--config=c", "--");
    assert_int_equal(o->n_configs, 1);
    assert_string_equal(o->configs[0], "c");
    cma_options_free(o);
}

static void test_cma_options_parse__bad_values(void **state)
{
    (void)state;
    PARSE_FAILS("invalid argument \"abc\" for \"--secure-port\" flag: not an integer", "--config=c",
                "--secure-port=abc");
    PARSE_FAILS("invalid argument \"65536\" for \"--secure-port\" flag: must be an integer from 0 "
                "to 65535",
                "--config=c", "--secure-port=65536");
    PARSE_FAILS("invalid argument \"-1\" for \"--secure-port\" flag: must be an integer from 0 to "
                "65535",
                "--config=c", "--secure-port", "-1");
    PARSE_FAILS("invalid argument \" 8\" for \"--secure-port\" flag: not an integer", "--config=c",
                "--secure-port= 8");
    PARSE_FAILS("invalid argument \"99999999999999999999\" for \"--prometheus-max-response-bytes\" "
                "flag: not an integer",
                "--config=c", "--prometheus-max-response-bytes=99999999999999999999");
    PARSE_FAILS("invalid argument \"0\" for \"--prometheus-max-response-bytes\" flag: must be at "
                "least 1",
                "--config=c", "--prometheus-max-response-bytes=0");
    PARSE_FAILS("invalid argument \"10\" for \"--metrics-relist-interval\" flag: not a duration "
                "(e.g. 30s, 5m, 1h30m)",
                "--config=c", "--metrics-relist-interval=10");
    PARSE_FAILS("invalid argument \"soon\" for \"--prometheus-timeout\" flag: not a duration (e.g. "
                "30s, 5m, 1h30m)",
                "--config=c", "--prometheus-timeout", "soon");
    PARSE_FAILS("invalid argument \"0s\" for \"--metrics-relist-interval\" flag: must be at least "
                "1ms",
                "--config=c", "--metrics-relist-interval=0s");
    PARSE_FAILS("invalid argument \"-5m\" for \"--metrics-max-age\" flag: must be at least 0s",
                "--config=c", "--metrics-max-age=-5m");
    PARSE_FAILS("invalid argument \"-1s\" for \"--metrics-cache-ttl\" flag: must be at least 0s",
                "--config=c", "--metrics-cache-ttl=-1s");
    PARSE_FAILS("invalid argument \"maybe\" for \"--disable-http2\" flag: expected true or false",
                "--config=c", "--disable-http2=maybe");
    PARSE_FAILS("invalid argument \"101\" for \"--v\" flag: must be an integer from 0 to 100",
                "--config=c", "-v101");
    PARSE_FAILS("invalid argument \"VersionTLS14\" for \"--tls-min-version\" flag: allowed values "
                "are VersionTLS10, VersionTLS11, VersionTLS12, VersionTLS13",
                "--config=c", "--tls-min-version=VersionTLS14");
    struct cma_options *o = PARSE_OK("--config=c", "--metrics-max-age=0", "--secure-port=0",
                                     "--tls-min-version=VersionTLS13", "--metrics-cache-ttl=0");
    assert_int_equal(o->metrics_max_age_ms, 0);
    assert_int_equal(o->metrics_cache_ttl_ms, 0);
    assert_int_equal(o->secure_port, 0);
    assert_string_equal(o->tls_min_version, "VersionTLS13");
    cma_options_free(o);
}

static void test_cma_options_parse__disable_api_groups(void **state)
{
    (void)state;
    /* each flag sets only its own field */
    struct cma_options *o = PARSE_OK("--config=c", "--disable-external-metrics");
    assert_false(o->disable_custom_metrics);
    assert_true(o->disable_external_metrics);
    assert_false(o->disable_resource_metrics);
    cma_options_free(o);
    o = PARSE_OK("--config=c", "--disable-resource-metrics=true");
    assert_false(o->disable_custom_metrics);
    assert_false(o->disable_external_metrics);
    assert_true(o->disable_resource_metrics);
    cma_options_free(o);
    o = PARSE_OK("--config=c", "-disable-custom-metrics");
    assert_true(o->disable_custom_metrics);
    assert_false(o->disable_external_metrics);
    assert_false(o->disable_resource_metrics);
    cma_options_free(o);
    /* all three, then switched back with =false (last one wins) */
    o = PARSE_OK("--config=c", "--disable-custom-metrics", "--disable-external-metrics=1",
                 "--disable-resource-metrics=T", "--disable-external-metrics=false");
    assert_true(o->disable_custom_metrics);
    assert_false(o->disable_external_metrics);
    assert_true(o->disable_resource_metrics);
    cma_options_free(o);
    /* a bool flag does not take the next argument as its value */
    PARSE_FAILS("unexpected argument \"true\": the adapter takes only flags", "--config=c",
                "--disable-external-metrics", "true");
    PARSE_FAILS("invalid argument \"keda\" for \"--disable-external-metrics\" flag: expected "
                "true or false",
                "--config=c", "--disable-external-metrics=keda");
    PARSE_FAILS("unknown flag: --disable-external", "--config=c", "--disable-external");
}

static void test_cma_options_parse__prometheus_verb(void **state)
{
    (void)state;
    struct cma_options *o = PARSE_OK("--config=c", "--prometheus-verb=POST");
    assert_string_equal(o->prometheus_verb, "POST");
    cma_options_free(o);
    PARSE_FAILS("unsupported Prometheus HTTP verb \"PUT\"; supported verbs: \"GET\" and \"POST\"",
                "--config=c", "--prometheus-verb=PUT");
    PARSE_FAILS("unsupported Prometheus HTTP verb \"post\"; supported verbs: \"GET\" and \"POST\"",
                "--config=c", "--prometheus-verb", "post");
}

static void test_cma_options_parse__certificate_pairs(void **state)
{
    (void)state;
    PARSE_FAILS("--prometheus-client-tls-cert-file and --prometheus-client-tls-key-file must be "
                "given together",
                "--config=c", "--prometheus-client-tls-cert-file=c.pem");
    PARSE_FAILS("--prometheus-client-tls-cert-file and --prometheus-client-tls-key-file must be "
                "given together",
                "--config=c", "--prometheus-client-tls-key-file=k.pem");
    PARSE_FAILS("--tls-cert-file and --tls-private-key-file must be given together", "--config=c",
                "--tls-private-key-file=k.pem");
    struct cma_options *o =
        PARSE_OK("--config=c", "--prometheus-client-tls-cert-file=c.pem",
                 "--prometheus-client-tls-key-file=k.pem", "--prometheus-ca-file=ca.pem",
                 "--tls-cert-file=/var/run/serving-cert/tls.crt",
                 "--tls-private-key-file=/var/run/serving-cert/tls.key");
    assert_string_equal(o->prometheus_client_tls_cert_file, "c.pem");
    assert_string_equal(o->prometheus_client_tls_key_file, "k.pem");
    assert_string_equal(o->prometheus_ca_file, "ca.pem");
    assert_string_equal(o->tls_cert_file, "/var/run/serving-cert/tls.crt");
    assert_string_equal(o->tls_private_key_file, "/var/run/serving-cert/tls.key");
    cma_options_free(o);
}

/* Runs cma_options_parse with a warnings stream; returns the options (NULL on error) and the
 * warning text in *text (caller frees both). */
static struct cma_options *parse_with_warnings(int argc, char **argv, char **text,
                                               struct cma_err *err)
{
    size_t len = 0;
    *text = NULL;
    FILE *warnings = open_memstream(text, &len);
    assert_non_null(warnings);
    cma_err_clear(err);
    struct cma_options *o = NULL;
    if (cma_options_parse(argc, argv, &o, warnings, err) != CMA_OK)
        o = NULL;
    fclose(warnings);
    assert_non_null(*text);
    return o;
}

#define KLOG_WHY "(logs go to stderr in this adapter's own format; --v sets the verbosity)"

static void test_cma_options_parse__klog_flags_are_ignored_with_a_warning(void **state)
{
    (void)state;
    char *argv[] = {
        "adapter",           "--logtostderr=true", "--log-dir", "/var/log",         "--v=10",
        "--alsologtostderr", "--config",           "c.yaml",    "--log_file=x.log", "-vmodule=a=2",
        "--skip-headers",    "--stderrthreshold",  "ERROR",     "--one_output",     NULL};
    struct cma_err err;
    char *text;
    struct cma_options *o = parse_with_warnings(14, argv, &text, &err);
    if (!o)
        fail_msg("unexpected error: %s", err.msg);
    assert_int_equal(o->n_configs, 1);
    assert_string_equal(o->configs[0], "c.yaml"); /* --log-dir consumed /var/log, not --v */
    assert_int_equal(o->v, 10);
    cma_options_free(o);
    assert_string_equal(text,
                        "flag --logtostderr has no effect here " KLOG_WHY "; ignoring it\n"
                        "flag --log-dir has no effect here " KLOG_WHY "; ignoring it\n"
                        "flag --alsologtostderr has no effect here " KLOG_WHY "; ignoring it\n"
                        "flag --log_file has no effect here " KLOG_WHY "; ignoring it\n"
                        "flag --vmodule has no effect here " KLOG_WHY "; ignoring it\n"
                        "flag --skip-headers has no effect here " KLOG_WHY "; ignoring it\n"
                        "flag --stderrthreshold has no effect here " KLOG_WHY "; ignoring it\n"
                        "flag --one_output has no effect here " KLOG_WHY "; ignoring it\n");
    free(text);
    /* no warnings stream: still accepted; the value is still checked with the flag's Go type */
    o = PARSE_OK("--config=c", "--add-dir-header", "--log-flush-frequency=5s");
    cma_options_free(o);
    PARSE_FAILS("invalid argument \"yes\" for \"--logtostderr\" flag: expected true or false",
                "--config=c", "--logtostderr=yes");
    PARSE_FAILS("invalid argument \"soon\" for \"--log-flush-frequency\" flag: not a duration "
                "(e.g. 30s, 5m, 1h30m)",
                "--config=c", "--log-flush-frequency=soon");
    PARSE_FAILS("flag needs an argument: --log_dir", "--config=c", "--log_dir");
}

/* A value of the Go type of each ignored flag. */
static const char *sample_value(enum cma_compat_type type)
{
    switch (type) {
    case CMA_COMPAT_BOOL:
        return "false";
    case CMA_COMPAT_INT:
        return "7";
    case CMA_COMPAT_FLOAT:
        return "2.5";
    case CMA_COMPAT_DURATION:
        return "90s";
    case CMA_COMPAT_STRING:
        break;
    }
    return "x";
}

static void test_cma_options_parse__every_ignored_upstream_flag_warns_once(void **state)
{
    (void)state;
    size_t n_ignored = 0;
    for (size_t i = 0; i < cma_compat_flag_count(); i++) {
        const struct cma_compat_flag *f = cma_compat_flag_at(i);
        if (!f->no_effect)
            continue;
        n_ignored++;
        char arg[160], want[600];
        snprintf(arg, sizeof(arg), "--%s=%s", f->name, sample_value(f->type));
        char *argv[] = {"adapter", "--config=c", arg, NULL};
        struct cma_err err;
        char *text;
        struct cma_options *o = parse_with_warnings(3, argv, &text, &err);
        if (!o)
            fail_msg("%s: %s", arg, err.msg);
        snprintf(want, sizeof(want), "flag --%s has no effect here (%s); ignoring it\n", f->name,
                 f->no_effect);
        assert_string_equal(text, want);
        cma_options_free(o);
        free(text);
        if (f->type != CMA_COMPAT_STRING) { /* a value of the wrong type fails, as upstream */
            snprintf(arg, sizeof(arg), "--%s=not-a-%d", f->name, (int)f->type);
            char *bad[] = {"adapter", "--config=c", arg, NULL};
            o = parse_with_warnings(3, bad, &text, &err);
            assert_null(o);
            assert_non_null(strstr(err.msg, "invalid argument"));
            free(text);
        }
    }
    assert_true(n_ignored >= 50);
    /* a bool needs no value; the others take the next argument */
    struct cma_options *o = PARSE_OK("--profiling", "--audit-log-path", "/tmp/a", "--config=c");
    assert_int_equal(o->n_configs, 1);
    assert_string_equal(o->configs[0], "c");
    cma_options_free(o);
    /* unknown flags still fail, close relatives of known ones included */
    PARSE_FAILS("unknown flag: --audit-log-paths", "--config=c", "--audit-log-paths=x");
    PARSE_FAILS("unknown flag: --profile", "--config=c", "--profile");
    PARSE_FAILS("unknown flag: --logging", "--config=c", "--logging=json");
    /* --logging-format (component-base's name, not in prometheus-adapter v0.12.0) is ours */
    o = PARSE_OK("--logging-format=json", "--config=c");
    assert_string_equal(o->logging_format, "json");
    cma_options_free(o);
    o = PARSE_OK("--config=c");
    assert_string_equal(o->logging_format, "text");
    cma_options_free(o);
    PARSE_FAILS("invalid argument \"xml\" for \"--logging-format\" flag: supported values are "
                "\"json\" and \"text\"",
                "--config=c", "--logging-format=xml");
}

static void test_cma_options_parse__tls_cipher_suites_take_go_names(void **state)
{
    (void)state;
    char *argv[] = {"adapter", "--config=c",
                    "--tls-cipher-suites=TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305, "
                    "TLS_RSA_WITH_RC4_128_SHA,TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256",
                    NULL};
    struct cma_err err;
    char *text;
    struct cma_options *o = parse_with_warnings(3, argv, &text, &err);
    if (!o)
        fail_msg("unexpected error: %s", err.msg);
    assert_string_equal(
        o->tls_cipher_suites,
        "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305,TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256");
    assert_string_equal(text, "cipher suite TLS_RSA_WITH_RC4_128_SHA of --tls-cipher-suites has no "
                              "effect here (RC4 is never offered); ignoring it\n");
    cma_options_free(o);
    free(text);
    PARSE_FAILS(
        "invalid argument \"TLS_FOO\" for \"--tls-cipher-suites\" flag: cipher suite TLS_FOO "
        "not supported or doesn't exist",
        "--config=c", "--tls-cipher-suites=TLS_FOO");
    assert_int_equal(cma_compat_cipher_suite("TLS_AES_128_GCM_SHA256", 22), CMA_CIPHER_SERVED);
    assert_int_equal(cma_compat_cipher_suite("TLS_AES_128_GCM_SHA25", 21), CMA_CIPHER_UNKNOWN);
    o = PARSE_OK("--config=c", "--tls-min-version=VersionTLS10", "--strict-config");
    assert_string_equal(o->tls_min_version, "VersionTLS10");
    assert_true(o->strict_config);
    cma_options_free(o);
}

static void test_cma_options_parse__metric_rules(void **state)
{
    (void)state;
    struct cma_options *o = PARSE_OK("--config=c.yaml");
    assert_false(o->enable_metric_rules);
    assert_string_equal(o->metric_rules_namespace_label, "namespace");
    assert_null(o->metric_rules_namespace_selector);
    assert_int_equal(o->metric_rules_max_per_namespace, 20);
    assert_int_equal(o->metric_rules_max_metrics_per_namespace, 200);
    assert_int_equal(o->metric_rules_max_query_timeout_ms, 30000);
    assert_int_equal(o->metric_rules_max_concurrent_queries, 4);
    cma_options_free(o);
    o = PARSE_OK("--config=c.yaml", "--metric-rules-namespace-label=kubernetes_namespace",
                 "--metric-rules-namespace-selector=team in (a,b),!legacy",
                 "--metric-rules-max-per-namespace=3", "--metric-rules-max-query-timeout=1m",
                 "--enable-metric-rules=false");
    assert_string_equal(o->metric_rules_namespace_label, "kubernetes_namespace");
    assert_string_equal(o->metric_rules_namespace_selector, "team in (a,b),!legacy");
    assert_int_equal(o->metric_rules_max_per_namespace, 3);
    assert_int_equal(o->metric_rules_max_query_timeout_ms, 60000);
    cma_options_free(o);
    o = PARSE_OK("--config=c.yaml", "--enable-metric-rules");
    assert_true(o->enable_metric_rules);
    cma_options_free(o);
    PARSE_FAILS("invalid argument \"1ns\" for \"--metric-rules-namespace-label\" flag: not a "
                "Prometheus label name ([a-zA-Z_][a-zA-Z0-9_]*)",
                "--config=c.yaml", "--metric-rules-namespace-label=1ns");
    struct cma_err err = {0};
    o = NULL;
    char *argv[] = {"custom-metrics-adapter", "--config=c.yaml",
                    "--metric-rules-namespace-selector=team in (a"};
    assert_int_equal(cma_options_parse(3, argv, &o, NULL, &err), CMA_ERR_FLAG);
    assert_null(o);
    assert_non_null(strstr(err.msg, "--metric-rules-namespace-selector"));
}

static void test_cma_options_validate__max_age_and_relist(void **state)
{
    (void)state;
    struct cma_options *o =
        PARSE_OK("--config=c", "--metrics-relist-interval=5m", "--metrics-max-age=1m");
    struct cma_err err;
    cma_err_clear(&err);
    assert_int_equal(cma_options_validate(o, true, &err), CMA_ERR_FLAG);
    assert_string_equal(err.msg, "max age must not be less than relist interval");
    assert_int_equal(cma_options_validate(o, false, NULL), CMA_OK);
    cma_options_free(o);
    o = PARSE_OK("--config=c", "--metrics-relist-interval=5m");
    assert_int_equal(cma_options_validate(o, true, NULL), CMA_OK); /* 0 = relist interval */
    cma_options_free(o);
    o = PARSE_OK("--config=c", "--metrics-relist-interval=1m", "--metrics-max-age=1m");
    assert_int_equal(cma_options_validate(o, true, NULL), CMA_OK);
    cma_options_free(o);
}

static char *capture(void (*print)(FILE *, const char *), const char *argv0, bool markdown)
{
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    assert_non_null(f);
    if (markdown)
        cma_options_print_markdown(f);
    else
        print(f, argv0);
    fclose(f);
    assert_non_null(text);
    /* A heap copy: gcc 12's -Wdangling-pointer (Release) otherwise takes the result for a pointer
     * into this frame, because open_memstream() was given &text. */
    char *copy = strdup(text);
    free(text);
    assert_non_null(copy);
    return copy;
}

static void test_cma_options_print_help__lists_flags_with_defaults(void **state)
{
    (void)state;
    char *help = capture(cma_options_print_help, "/usr/local/bin/custom-metrics-adapter", false);
    assert_true(strncmp(help, "Usage: custom-metrics-adapter [flags]\n", 38) == 0);
    assert_non_null(strstr(help, "\n      --secure-port int "));
    assert_non_null(strstr(help, "Port on which to serve HTTPS (default 6443)\n"));
    assert_non_null(strstr(help, "(default \"https://localhost\")\n"));
    assert_non_null(strstr(help, "re-read from the backend (default 10m0s)\n"));
    assert_non_null(strstr(help, "\n  -v, --v int "));
    assert_non_null(strstr(help, "\n  -h, --help "));
    assert_non_null(strstr(help, "\n      --prometheus-header stringArray "));
    assert_non_null(strstr(help, "\n      --disable-http2 "));
    assert_non_null(strstr(help, "\n      --disable-custom-metrics "));
    assert_non_null(strstr(help, "\n      --disable-external-metrics "));
    assert_non_null(strstr(help, "\n      --disable-resource-metrics "));
    assert_non_null(strstr(help, "(to run next to KEDA, which owns that group)\n"));
    assert_null(strstr(help, "--print-flags-markdown"));
    assert_null(strstr(help, "--logtostderr"));
    assert_null(strstr(help, "(default 0"));
    /* every flag of the Markdown table is in the help, and the columns line up */
    char *md = capture(NULL, NULL, true);
    char *upstream = strstr(md, "\n## prometheus-adapter's flags\n");
    assert_non_null(upstream);
    *upstream = '\0'; /* the first table: this adapter's flags */
    size_t n_flags = 0;
    for (const char *p = strstr(md, "\n| `"); p; p = strstr(p + 1, "\n| `")) {
        const char *name = strstr(p, "`--");
        const char *end = strchr(name + 1, '`');
        char needle[96];
        snprintf(needle, sizeof(needle), "%.*s ", (int)(end - name - 1), name + 1);
        if (!strstr(help, needle))
            fail_msg("%s is missing from --help", needle);
        n_flags++;
    }
    assert_int_equal(n_flags, 76);
    /* every upstream flag marked implemented is one of them, under the same name */
    for (size_t i = 0; i < cma_compat_flag_count(); i++) {
        const struct cma_compat_flag *f = cma_compat_flag_at(i);
        char needle[96];
        snprintf(needle, sizeof(needle), "--%s ", f->name);
        if (!f->no_effect && !strstr(help, needle))
            fail_msg("%s is marked implemented but is not a flag here", needle);
        if (f->no_effect && strstr(help, needle))
            fail_msg("%s is marked as having no effect but is a flag here", needle);
    }
    const char *col_a = strstr(help, "      --config string");
    const char *col_b = strstr(help, "  -h, --help");
    assert_non_null(col_a);
    assert_non_null(col_b);
    assert_int_equal(strstr(col_a, "Metrics") - col_a, strstr(col_b, "Print") - col_b);
    free(md);
    free(help);
}

static void test_cma_options_print_markdown__matches_docs_flags_md(void **state)
{
    (void)state;
    const char *src = getenv("CMA_SOURCE_DIR");
    assert_non_null(src);
    char path[4096];
    snprintf(path, sizeof(path), "%s/docs/flags.md", src);
    FILE *f = fopen(path, "rb");
    if (!f)
        fail_msg("cannot open %s", path);
    char *doc = calloc(1, 1 << 16);
    assert_non_null(doc);
    size_t n = fread(doc, 1, (1 << 16) - 1, f);
    fclose(f);
    doc[n] = '\0';
    const char *marker = "<!-- generated by --print-flags-markdown: do not edit below -->\n";
    const char *at = strstr(doc, marker);
    if (!at)
        fail_msg("docs/flags.md has no marker line");
    char *md = capture(NULL, NULL, true);
    assert_string_equal(at + strlen(marker), md);
    assert_true(strncmp(md, "| flag | type | default | description |\n", 40) == 0);
    assert_non_null(strstr(md, "| `--secure-port` | int | `6443` | "));
    assert_non_null(strstr(md, "| `-v`, `--v` | int | | "));
    free(md);
    free(doc);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cma_options_parse__defaults),
        cmocka_unit_test(test_cma_options_parse__flag_forms),
        cmocka_unit_test(test_cma_options_parse__help_and_version_need_no_config),
        cmocka_unit_test(test_cma_options_parse__repeatable_header),
        cmocka_unit_test(test_cma_options_parse__unknown_flags_and_arguments),
        cmocka_unit_test(test_cma_options_parse__bad_values),
        cmocka_unit_test(test_cma_options_parse__disable_api_groups),
        cmocka_unit_test(test_cma_options_parse__prometheus_verb),
        cmocka_unit_test(test_cma_options_parse__certificate_pairs),
        cmocka_unit_test(test_cma_options_parse__klog_flags_are_ignored_with_a_warning),
        cmocka_unit_test(test_cma_options_parse__every_ignored_upstream_flag_warns_once),
        cmocka_unit_test(test_cma_options_parse__tls_cipher_suites_take_go_names),
        cmocka_unit_test(test_cma_options_parse__metric_rules),
        cmocka_unit_test(test_cma_options_validate__max_age_and_relist),
        cmocka_unit_test(test_cma_options_print_help__lists_flags_with_defaults),
        cmocka_unit_test(test_cma_options_print_markdown__matches_docs_flags_md),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
