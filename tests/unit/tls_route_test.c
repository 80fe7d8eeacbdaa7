/* tls_route_test.c: clients/tls_route.c, a kubeconfig's tls-server-name as the renamed URL, the
 * CURLOPT_CONNECT_TO entry and the Host line both clients send: host names, IPv4 and bracketed
 * IPv6 addresses with and without a port (the scheme's default port in the entry, none in Host),
 * a URL with a path, query and user info, no tls-server-name (no reroute) and the refusals. The
 * clients' use of it is in kube_test.c (the Host a fake kube-apiserver sees) and
 * tests/e2e/test_backend_auth.sh (a real TLS gateway). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "../../src/clients/internal.h"

static void expect_route(const char *url, const char *tls_name, const char *want_url,
                         const char *want_entry, const char *want_host)
{
    struct cma_tls_route r;
    assert_int_equal(cma_clients_tls_route(url, tls_name, &r), CMA_OK);
    assert_string_equal(r.url, want_url);
    assert_string_equal(r.connect_to, want_entry);
    assert_string_equal(r.host_line, want_host);
    cma_tls_route_done(&r);
    assert_null(r.url);
}

static void test_cma_clients_tls_route__hosts_and_ports(void **state)
{
    (void)state;
    expect_route("https://prometheus.monitoring.svc:9090", "prometheus.example.test",
                 "https://prometheus.example.test:9090",
                 "prometheus.example.test:9090:prometheus.monitoring.svc:9090",
                 "Host: prometheus.monitoring.svc:9090");
    expect_route("https://10.0.0.1:6443", "kubernetes.default", "https://kubernetes.default:6443",
                 "kubernetes.default:6443:10.0.0.1:6443", "Host: 10.0.0.1:6443");
    expect_route("https://[fd00::1]:6443", "kubernetes.default", "https://kubernetes.default:6443",
                 "kubernetes.default:6443:[fd00::1]:6443", "Host: [fd00::1]:6443");
    expect_route("http://127.0.0.1:8080", "kube.invalid", "http://kube.invalid:8080",
                 "kube.invalid:8080:127.0.0.1:8080", "Host: 127.0.0.1:8080");
}

/* No port: the entry names the scheme's default, Host none (as the URL's host is sent). */
static void test_cma_clients_tls_route__no_port(void **state)
{
    (void)state;
    expect_route("https://10.96.0.1", "kubernetes.default", "https://kubernetes.default",
                 "kubernetes.default:443:10.96.0.1:443", "Host: 10.96.0.1");
    expect_route("https://[fd00::1]/", "kubernetes.default", "https://kubernetes.default",
                 "kubernetes.default:443:[fd00::1]:443", "Host: [fd00::1]");
    expect_route("http://gateway", "named", "http://named", "named:80:gateway:80", "Host: gateway");
}

/* The path, query and user info stay in the URL; Host has neither. */
static void test_cma_clients_tls_route__path_query_userinfo(void **state)
{
    (void)state;
    expect_route("https://10.0.0.1:6443/prefix/api?x=1&y=%2F", "kubernetes.default",
                 "https://kubernetes.default:6443/prefix/api?x=1&y=%2F",
                 "kubernetes.default:6443:10.0.0.1:6443", "Host: 10.0.0.1:6443");
    expect_route("https://u:p%40ss@127.0.0.1:9443/prometheus/", "prom.example.test",
                 "https://u:p%40ss@prom.example.test:9443/prometheus",
                 "prom.example.test:9443:127.0.0.1:9443", "Host: 127.0.0.1:9443");
}

static void test_cma_clients_tls_route__none_and_refusals(void **state)
{
    (void)state;
    struct cma_tls_route r;
    assert_int_equal(cma_clients_tls_route("https://10.0.0.1:6443", "", &r), CMA_OK);
    assert_null(r.url);
    assert_null(r.connect_to);
    assert_null(r.host_line);
    assert_int_equal(cma_clients_tls_route("https://10.0.0.1:6443", NULL, &r), CMA_OK);
    assert_null(r.url);
    cma_tls_route_done(&r);
    assert_int_equal(cma_clients_tls_route("https://10.0.0.1:6443", "bad name", &r),
                     CMA_ERR_CONFIG_VALUE);
    assert_null(r.url);
    assert_null(r.connect_to);
    assert_null(r.host_line);
    assert_int_equal(cma_clients_tls_route("https://10.0.0.1:6443", "a:1", &r),
                     CMA_ERR_CONFIG_VALUE);
    assert_int_equal(cma_clients_tls_route("https://", "kubernetes.default", &r),
                     CMA_ERR_CONFIG_VALUE);
    assert_int_equal(cma_clients_tls_route("not a url", "kubernetes.default", &r),
                     CMA_ERR_CONFIG_VALUE);
    assert_null(r.host_line);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cma_clients_tls_route__hosts_and_ports),
        cmocka_unit_test(test_cma_clients_tls_route__no_port),
        cmocka_unit_test(test_cma_clients_tls_route__path_query_userinfo),
        cmocka_unit_test(test_cma_clients_tls_route__none_and_refusals),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
