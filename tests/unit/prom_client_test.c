/* prom_client_test.c: the HTTP side of the clients stage (prom.c and kube.c, through
 * transport.c) against the shared fake HTTP server (fakehttp.h: a thread on 127.0.0.1 that
 * records each request and answers with a canned status and body, in order or by path,
 * optionally in small chunks, after a delay, or by closing without an answer). The server stands
 * in for Prometheus and for kube-apiserver (with recorded fixture bodies from
 * ../shared/fixtures/kube-apiserver). */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include <cmocka.h>

#include "../../src/clients/internal.h"
#include "cma/kube.h"
#include "cma/prom.h"
#include "fakehttp.h"

/* ---- the fake server (fakehttp.h) -------------------------------------------------------- */

static struct cma_fake_http *serve(const struct cma_fake_answer *answers, size_t n)
{
    struct cma_fake_http *s = cma_fake_http_start(answers, n);
    assert_non_null(s);
    return s;
}

static const struct cma_fake_request *req_of(struct cma_fake_http *s, size_t i)
{
    const struct cma_fake_request *r = cma_fake_http_request(s, i);
    assert_non_null(r);
    return r;
}

/* "http://127.0.0.1:<a port nothing listens on><suffix>" for connection-refused cases. */
static void refused_url(char *out, size_t len, const char *userinfo, const char *suffix)
{
    int port = cma_loopback_unused_port();
    assert_true(port > 0);
    snprintf(out, len, "http://%s127.0.0.1:%d%s", userinfo, port, suffix);
}

static const char vector_body[] = "{\"status\":\"success\",\"data\":{\"resultType\":\"vector\","
                                  "\"result\":[{\"metric\":{\"pod\":\"bert-0\"},"
                                  "\"value\":[1732227811.123,\"3\"]}]}}";

static struct cma_prom *prom_for(const struct cma_prom_config *cfg)
{
    struct cma_prom *p = NULL;
    struct cma_err err;
    cma_err_clear(&err);
    if (cma_prom_new(cfg, &p, &err) != CMA_OK)
        fail_msg("cma_prom_new: %s", err.msg);
    return p;
}

/* ---- prometheus: requests ---------------------------------------------------------------- */

static void test_cma_prom_query__get_keeps_prefix_and_base_query(void **state)
{
    (void)state;
    struct cma_fake_answer a[] = {{.status = 200, .body = vector_body}};
    struct cma_fake_http *s = serve(a, 1);
    char *url = cma_fake_http_url(s, "/prom//sub/?tenant=a%20b&x=1");
    struct cma_prom_config cfg = {.url = url};
    struct cma_prom *p = prom_for(&cfg);
    assert_string_equal(cma_prom_url(p), url);
    struct cma_prom_result *r = NULL;
    struct cma_err err;
    cma_err_clear(&err);
    assert_int_equal(
        cma_prom_query(p, "sum(up{job=\"a b\"})", 1732227811123LL, NULL, NULL, &r, &err), CMA_OK);
    assert_int_equal(r->n_samples, 1);
    assert_true(r->samples[0].value == 3);
    cma_prom_result_free(r);
    assert_int_equal(cma_fake_http_count(s), 1);
    assert_true(strncmp(req_of(s, 0)->head, "GET ", 4) == 0);
    const char *target = req_of(s, 0)->target;
    assert_string_equal(target, "/prom/sub/api/v1/query?tenant=a%20b&x=1&query=sum%28up%7Bjob%3D"
                                "%22a+b%22%7D%29&time=1732227811.123");
    assert_true(cma_fake_http_has_header(s, 0, "Accept: application/json"));
    cma_prom_free(p);
    free(url);
    cma_fake_http_stop(s);
}

static void test_cma_prom_query__post_form_body(void **state)
{
    (void)state;
    struct cma_fake_answer a[] = {{.status = 200, .body = vector_body}};
    struct cma_fake_http *s = serve(a, 1);
    char *url = cma_fake_http_url(s, "/prometheus?namespace=ml");
    struct cma_prom_config cfg = {.url = url, .use_post = true};
    struct cma_prom *p = prom_for(&cfg);
    struct cma_prom_result *r = NULL;
    assert_int_equal(cma_prom_query(p, "up", 1000, NULL, NULL, &r, NULL), CMA_OK);
    cma_prom_result_free(r);
    assert_true(strncmp(req_of(s, 0)->head, "POST ", 5) == 0);
    const char *target = req_of(s, 0)->target;
    assert_string_equal(target, "/prometheus/api/v1/query?namespace=ml");
    assert_string_equal(req_of(s, 0)->body, "query=up&time=1.000");
    assert_true(cma_fake_http_has_header(s, 0, "Content-Type: application/x-www-form-urlencoded"));
    assert_null(strcasestr(req_of(s, 0)->head, "Expect:"));
    cma_prom_free(p);
    free(url);
    cma_fake_http_stop(s);
}

static void test_cma_prom_query__long_query_goes_as_post(void **state)
{
    (void)state;
    struct cma_fake_answer a[] = {{.status = 200, .body = vector_body},
                                  {.status = 200, .body = vector_body}};
    struct cma_fake_http *s = serve(a, 2);
    char *url = cma_fake_http_url(s, "");
    struct cma_prom_config cfg = {.url = url, .max_get_url_bytes = 256};
    struct cma_prom *p = prom_for(&cfg);
    char query[2001];
    memset(query, 'a', 2000);
    query[2000] = '\0';
    struct cma_prom_result *r = NULL;
    assert_int_equal(cma_prom_query(p, query, 0, NULL, NULL, &r, NULL), CMA_OK);
    cma_prom_result_free(r);
    assert_int_equal(cma_prom_query(p, "up", 0, NULL, NULL, &r, NULL), CMA_OK);
    cma_prom_result_free(r);
    assert_true(strncmp(req_of(s, 0)->head, "POST /api/v1/query HTTP", 23) == 0);
    assert_int_equal(req_of(s, 0)->body_len, strlen("query=") + 2000 + strlen("&time=0.000"));
    assert_true(strncmp(req_of(s, 1)->head, "GET /api/v1/query?query=up&time=0.000 ", 38) == 0);
    cma_prom_free(p);
    free(url);
    cma_fake_http_stop(s);
}

static void test_cma_prom_query__headers_and_trimmed_bearer_token(void **state)
{
    (void)state;
    char token_path[] = "/tmp/cma-prom-token-XXXXXX";
    int fd = mkstemp(token_path);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, "  tok123\r\n\n", 11), 11);
    close(fd);
    struct cma_fake_answer a[] = {{.status = 200, .body = vector_body}};
    struct cma_fake_http *s = serve(a, 1);
    char *url = cma_fake_http_url(s, "");
    const char *headers[] = {"X-Scope-OrgID=tenant-1", "X-Empty", "X-Eq=a=b"};
    struct cma_prom_config cfg = {
        .url = url, .headers = headers, .n_headers = 3, .token_file = token_path};
    struct cma_prom *p = prom_for(&cfg);
    struct cma_prom_result *r = NULL;
    assert_int_equal(cma_prom_query(p, "up", 0, NULL, NULL, &r, NULL), CMA_OK);
    cma_prom_result_free(r);
    assert_true(cma_fake_http_has_header(s, 0, "X-Scope-OrgID: tenant-1"));
    assert_true(cma_fake_http_has_header(s, 0, "X-Empty:"));
    assert_true(cma_fake_http_has_header(s, 0, "X-Eq: a=b"));
    assert_true(cma_fake_http_has_header(s, 0, "Authorization: Bearer tok123"));
    cma_prom_free(p);
    free(url);
    cma_fake_http_stop(s);
    unlink(token_path);
}

static void test_cma_prom_query__basic_auth(void **state)
{
    (void)state;
    struct cma_fake_answer a[] = {{.status = 200, .body = vector_body}};
    struct cma_fake_http *s = serve(a, 1);
    char *url = cma_fake_http_url(s, "");
    struct cma_prom_config cfg = {.url = url, .basic_username = "user", .basic_password = "pass"};
    struct cma_prom *p = prom_for(&cfg);
    struct cma_prom_result *r = NULL;
    assert_int_equal(cma_prom_query(p, "up", 0, NULL, NULL, &r, NULL), CMA_OK);
    cma_prom_result_free(r);
    assert_true(cma_fake_http_has_header(s, 0, "Authorization: Basic dXNlcjpwYXNz"));
    cma_prom_free(p);
    free(url);
    cma_fake_http_stop(s);
}

/* ---- prometheus: errors ------------------------------------------------------------------ */

static enum cma_errc query_with(const struct cma_fake_answer *a, size_t n,
                                struct cma_prom_config *cfg, struct cma_err *err)
{
    struct cma_fake_http *s = serve(a, n);
    char *url = cma_fake_http_url(s, "");
    cfg->url = url;
    struct cma_prom *p = prom_for(cfg);
    struct cma_prom_result *r = NULL;
    cma_err_clear(err);
    enum cma_errc rc = cma_prom_query(p, "up", 0, NULL, NULL, &r, err);
    assert_int_equal(rc, err->code);
    if (rc == CMA_OK)
        cma_prom_result_free(r);
    else
        assert_null(r);
    cma_prom_free(p);
    free(url);
    cma_fake_http_stop(s);
    return rc;
}

static void test_cma_prom_query__connection_refused(void **state)
{
    (void)state;
    char url[128];
    refused_url(url, sizeof(url), "user:secret@", "/prom");
    struct cma_prom_config cfg = {.url = url};
    struct cma_prom *p = prom_for(&cfg);
    struct cma_prom_result *r = NULL;
    struct cma_err err;
    cma_err_clear(&err);
    assert_int_equal(cma_prom_query(p, "up", 0, NULL, NULL, &r, &err), CMA_ERR_BACKEND_UNAVAILABLE);
    assert_non_null(strstr(err.msg, "cannot reach prometheus at http://127.0.0.1:"));
    assert_non_null(strstr(err.msg, "/prom/api/v1/query"));
    assert_null(strstr(err.msg, "secret"));
    cma_prom_free(p);
}

static void test_cma_prom_query__timeout(void **state)
{
    (void)state;
    struct cma_fake_answer a[] = {{.status = 200, .body = vector_body, .delay_ms = 2000}};
    struct cma_prom_config cfg = {.timeout_ms = 300};
    struct cma_err err;
    assert_int_equal(query_with(a, 1, &cfg, &err), CMA_ERR_BACKEND_TIMEOUT);
    assert_string_equal(err.msg, "prometheus did not answer within 300ms");
}

static void test_cma_prom_query__422_bad_data(void **state)
{
    (void)state;
    struct cma_fake_answer a[] = {
        {.status = 422,
         .body = "{\"status\":\"error\",\"errorType\":\"bad_data\","
                 "\"error\":\"invalid parameter \\\"query\\\": 1:3: parse error\"}"}};
    struct cma_prom_config cfg = {0};
    struct cma_err err;
    assert_int_equal(query_with(a, 1, &cfg, &err), CMA_ERR_BACKEND_ERROR);
    assert_string_equal(err.msg, "bad_data: invalid parameter \"query\": 1:3: parse error");
}

static void test_cma_prom_query__503_timeout_error_type(void **state)
{
    (void)state;
    struct cma_fake_answer a[] = {{.status = 503,
                                   .body = "{\"status\":\"error\",\"errorType\":\"timeout\","
                                           "\"error\":\"query timed out\"}"}};
    struct cma_prom_config cfg = {0};
    struct cma_err err;
    assert_int_equal(query_with(a, 1, &cfg, &err), CMA_ERR_BACKEND_TIMEOUT);
    assert_string_equal(err.msg, "timeout: query timed out");
}

static void test_cma_prom_query__401_names_status(void **state)
{
    (void)state;
    struct cma_fake_answer a[] = {
        {.status = 401, .content_type = "text/plain", .body = "Unauthorized\n"}};
    struct cma_prom_config cfg = {0};
    struct cma_err err;
    assert_int_equal(query_with(a, 1, &cfg, &err), CMA_ERR_BACKEND_ERROR);
    assert_string_equal(err.msg,
                        "prometheus answered HTTP 401 Unauthorized for /api/v1/query (check "
                        "credentials): "
                        "Unauthorized");
}

static void test_cma_prom_query__proxy_statuses(void **state)
{
    (void)state;
    struct cma_fake_answer a[] = {
        {.status = 503, .content_type = "text/html", .body = "<h1>down</h1>"}};
    struct cma_prom_config cfg = {0};
    struct cma_err err;
    assert_int_equal(query_with(a, 1, &cfg, &err), CMA_ERR_BACKEND_UNAVAILABLE);
    assert_string_equal(err.msg,
                        "prometheus answered HTTP 503 Service Unavailable for /api/v1/query: down");
    struct cma_fake_answer b[] = {{.status = 502, .content_type = "text/plain", .body = ""}};
    assert_int_equal(query_with(b, 1, &cfg, &err), CMA_ERR_BACKEND_UNAVAILABLE);
    assert_string_equal(err.msg, "prometheus answered HTTP 502 Bad Gateway for /api/v1/query");
    struct cma_fake_answer c[] = {{.status = 500, .content_type = "text/plain", .body = "oops"}};
    assert_int_equal(query_with(c, 1, &cfg, &err), CMA_ERR_BACKEND_ERROR);
    assert_string_equal(
        err.msg, "prometheus answered HTTP 500 Internal Server Error for /api/v1/query: oops");
}

/* A gateway's error page in front of the backend: the status line and the page's text, never
 * its markup, and never more than a few hundred bytes however long the page. */
static void test_cma_prom_query__gateway_pages_without_markup(void **state)
{
    (void)state;
    static const char nginx[] =
        "<html>\r\n<head><title>502 Bad Gateway</title></head>\r\n<body>\r\n<center><h1>502 Bad "
        "Gateway</h1></center>\r\n<hr><center>nginx/1.22.1</center>\r\n</body>\r\n</html>\r\n";
    struct cma_fake_answer a[] = {{.status = 502, .content_type = "text/html", .body = nginx}};
    struct cma_prom_config cfg = {0};
    struct cma_err err;
    assert_int_equal(query_with(a, 1, &cfg, &err), CMA_ERR_BACKEND_UNAVAILABLE);
    assert_string_equal(err.msg, "prometheus answered HTTP 502 Bad Gateway for /api/v1/query: "
                                 "502 Bad Gateway nginx/1.22.1");
    /* a long page: a large <head> (styles), then the words, then kilobytes of text */
    static char page[12000];
    int n = snprintf(page, sizeof(page),
                     "<!DOCTYPE html><html><head><title>Error</title><style>%0*d</style>"
                     "<script>var x = '<b>';</script></head><body><!-- <p>hidden</p> -->"
                     "<p>upstream &amp; store gateway unavailable</p>",
                     2500, 0);
    for (size_t i = (size_t)n; i + 1 < sizeof(page); i++)
        page[i] = i % 7 ? 'w' : ' ';
    struct cma_fake_answer b[] = {{.status = 503, .content_type = "text/html", .body = page}};
    assert_int_equal(query_with(b, 1, &cfg, &err), CMA_ERR_BACKEND_UNAVAILABLE);
    const char *want = "prometheus answered HTTP 503 Service Unavailable for /api/v1/query: "
                       "upstream & store gateway unavailable w";
    assert_memory_equal(err.msg, want, strlen(want));
    assert_null(strchr(err.msg, '<'));
    assert_null(strstr(err.msg, "hidden"));
    assert_true(strlen(err.msg) < strlen(want) + 200);
    /* a Prometheus-API JSON error under a status Prometheus does not use: its error field */
    struct cma_fake_answer c[] = {
        {.status = 500,
         .body = "{\"status\":\"error\",\"errorType\":\"internal\",\"error\":\"store "
                 "unavailable\",\"data\":{\"a\":[1,2,3]}}"}};
    assert_int_equal(query_with(c, 1, &cfg, &err), CMA_ERR_BACKEND_ERROR);
    assert_string_equal(err.msg, "prometheus answered HTTP 500 Internal Server Error for "
                                 "/api/v1/query: internal: store unavailable");
}

static void test_cma_prom_query__oversize_body(void **state)
{
    (void)state;
    char *big = malloc(5000);
    memset(big, ' ', 4999);
    big[4999] = '\0';
    memcpy(big, vector_body, strlen(vector_body));
    /* no Content-Length (chunked): refused while it streams, once past the ceiling */
    struct cma_fake_answer a[] = {{.status = 200, .body = big, .chunk = 512}};
    struct cma_prom_config cfg = {.max_response_bytes = 1024};
    struct cma_err err;
    assert_int_equal(query_with(a, 1, &cfg, &err), CMA_ERR_TOO_LARGE);
    assert_string_equal(err.msg, "the prometheus answer to /api/v1/query goes over "
                                 "--prometheus-max-response-bytes (1024 bytes); narrow the query "
                                 "or the selector, or raise the flag");
    /* the same answer under the ceiling decodes */
    cfg.max_response_bytes = 5000;
    assert_int_equal(query_with(a, 1, &cfg, &err), CMA_OK);
    free(big);
}

/* A Content-Length over the ceiling is refused before the body is read: this server announces
 * 100 MB, sends 300 bytes and closes, so only an early refusal gives TOO_LARGE (reading on
 * would end in a transfer error). */
static void test_cma_prom_query__content_length_refused_early(void **state)
{
    (void)state;
    char body[301];
    memset(body, ' ', 300);
    body[300] = '\0';
    memcpy(body, "{\"status\":\"success\",", 21);
    struct cma_fake_answer a[] = {{.status = 200, .body = body, .declared_len = 100000000}};
    struct cma_prom_config cfg = {.max_response_bytes = 1 << 20};
    struct cma_err err;
    assert_int_equal(query_with(a, 1, &cfg, &err), CMA_ERR_TOO_LARGE);
    assert_non_null(strstr(err.msg, "is 100000000 bytes, over --prometheus-max-response-bytes"));
    assert_non_null(strstr(err.msg, "(1048576 bytes)"));
    /* under the ceiling, the cut transfer is what it is: the backend's failure */
    cfg.max_response_bytes = 200000000;
    assert_int_not_equal(query_with(a, 1, &cfg, &err), CMA_ERR_TOO_LARGE);
}

static const char two_pods_body[] = "{\"status\":\"success\",\"data\":{\"resultType\":\"vector\","
                                    "\"result\":[{\"metric\":{\"pod\":\"a\"},\"value\":[1,\"1\"]},"
                                    "{\"metric\":{\"pod\":\"b\"},\"value\":[1,\"2\"]}]}}";

static bool keep_pod_b(void *ctx, const struct cma_label_view *labels, size_t n)
{
    (void)ctx;
    return n == 1 && strcmp(labels[0].value, "b") == 0;
}

/* The client's budget: kept samples are charged until the result is freed; a query that finds
 * it held by others is 429 and succeeds once they let go; an answer that alone needs more than
 * the whole budget is 413. */
static void test_cma_prom_query__keep_and_budget(void **state)
{
    (void)state;
    struct cma_fake_answer a[] = {{.status = 200, .body = two_pods_body}};
    struct cma_fake_http *s = serve(a, 1);
    char *url = cma_fake_http_url(s, "");
    struct cma_prom_config cfg = {.url = url, .max_bytes_in_flight = 64 << 10};
    struct cma_prom *p = prom_for(&cfg);
    struct cma_prom_budget *b = (struct cma_prom_budget *)cma_prom_budget(p);
    struct cma_prom_result *held = NULL, *r = NULL;
    struct cma_err err;
    cma_err_clear(&err);
    assert_int_equal(cma_prom_query(p, "up", 0, keep_pod_b, NULL, &held, &err), CMA_OK);
    assert_int_equal(held->n_seen, 2);
    assert_int_equal(held->n_samples, 1);
    assert_string_equal(cma_sample_label(&held->samples[0], "pod"), "b");
    assert_true(held->charged > 0);
    assert_int_equal(atomic_load(&b->used), held->charged);
    size_t others = b->max - held->charged - 100; /* leaves 100 bytes */
    atomic_fetch_add(&b->used, others);
    cma_err_clear(&err);
    assert_int_equal(cma_prom_query(p, "up", 0, NULL, NULL, &r, &err), CMA_ERR_TOO_MANY_REQUESTS);
    assert_non_null(strstr(err.msg, "--prometheus-max-bytes-in-flight"));
    assert_null(r);
    assert_int_equal(atomic_load(&b->used), others + held->charged); /* nothing leaked */
    atomic_fetch_sub(&b->used, others);
    cma_err_clear(&err);
    assert_int_equal(cma_prom_query(p, "up", 0, NULL, NULL, &r, &err), CMA_OK);
    assert_int_equal(r->n_samples, 2);
    cma_prom_result_free(r);
    cma_prom_result_free(held);
    assert_int_equal(atomic_load(&b->used), 0);
    cma_prom_free(p);
    /* a budget smaller than what one answer needs: 413, whatever others do */
    cfg.max_bytes_in_flight = 100;
    p = prom_for(&cfg);
    cma_err_clear(&err);
    assert_int_equal(cma_prom_query(p, "up", 0, NULL, NULL, &r, &err), CMA_ERR_TOO_LARGE);
    assert_non_null(strstr(err.msg, "take over 100 bytes (--prometheus-max-bytes-in-flight)"));
    assert_int_equal(atomic_load(&cma_prom_budget(p)->used), 0);
    cma_prom_free(p);
    free(url);
    cma_fake_http_stop(s);
}

static void test_cma_prom_query__closed_without_answer(void **state)
{
    (void)state;
    struct cma_fake_answer a[] = {{.status = 0}};
    struct cma_prom_config cfg = {0};
    struct cma_err err;
    assert_int_equal(query_with(a, 1, &cfg, &err), CMA_ERR_BACKEND_UNAVAILABLE);
}

static void test_cma_prom_query__undecodable_200(void **state)
{
    (void)state;
    struct cma_fake_answer a[] = {{.status = 200, .content_type = "text/html", .body = "<html>"}};
    struct cma_prom_config cfg = {0};
    struct cma_err err;
    assert_int_equal(query_with(a, 1, &cfg, &err), CMA_ERR_BACKEND_RESPONSE);
    assert_non_null(strstr(err.msg, "unexpected JSON from prometheus"));
}

/* What a client reported to its notifier (copies: the strings are borrowed for the call). */
struct reports {
    int requests, answers;
    char method[8], url[256], what[64], error[256], head[256];
    long status;
    uint64_t bytes;
    size_t long_get, max_get, kept, seen;
    bool decoded;
};

static void on_request(void *ctx, const struct cma_http_report *r)
{
    struct reports *rec = ctx;
    rec->requests++;
    snprintf(rec->method, sizeof(rec->method), "%s", r->method);
    snprintf(rec->url, sizeof(rec->url), "%s", r->url);
    snprintf(rec->what, sizeof(rec->what), "%s", r->what);
    snprintf(rec->error, sizeof(rec->error), "%s", r->error ? r->error : "");
    assert_string_equal(r->client, "prometheus");
    assert_true(r->duration_ms >= 0);
    rec->status = r->status;
    rec->bytes = r->bytes;
    rec->long_get = r->long_get_bytes;
    rec->max_get = r->max_get_bytes;
}

static void on_answer(void *ctx, const struct cma_answer_report *a)
{
    struct reports *rec = ctx;
    rec->answers++;
    snprintf(rec->head, sizeof(rec->head), "%.*s", (int)a->head_len, a->head);
    rec->decoded = a->decoded;
    rec->kept = a->kept;
    rec->seen = a->seen;
}

/* The client logs nothing itself: each request and each answer go to the notifier, the URL
 * without the credentials the base URL carries (main logs them at --v=6 and --v=8). */
static void test_cma_prom_query__reports_without_credentials(void **state)
{
    (void)state;
    struct cma_fake_answer a[] = {{.status = 200, .body = two_pods_body}};
    struct cma_fake_http *s = serve(a, 1);
    char url[128];
    snprintf(url, sizeof(url), "http://user:secret@127.0.0.1:%d/p", cma_fake_http_port(s));
    struct reports rec = {0};
    struct cma_prom_config cfg = {
        .url = url,
        .max_get_url_bytes = 200,
        .notifier = {.on_request = on_request, .on_answer = on_answer, .ctx = &rec}};
    struct cma_prom *p = prom_for(&cfg);
    struct cma_prom_result *r = NULL;
    assert_int_equal(cma_prom_query(p, "up", 0, keep_pod_b, NULL, &r, NULL), CMA_OK);
    cma_prom_result_free(r);
    assert_int_equal(rec.requests, 1);
    assert_string_equal(rec.method, "GET");
    char want[256];
    snprintf(want, sizeof(want), "http://127.0.0.1:%d/p/api/v1/query?query=up&time=0.000",
             cma_fake_http_port(s));
    assert_string_equal(rec.url, want);
    assert_string_equal(rec.what, "/api/v1/query");
    assert_int_equal(rec.status, 200);
    assert_string_equal(rec.error, "");
    assert_int_equal(rec.bytes, strlen(two_pods_body));
    assert_int_equal(rec.long_get, 0);
    assert_int_equal(rec.answers, 1);
    assert_string_equal(rec.head, two_pods_body);
    assert_true(rec.decoded);
    assert_int_equal(rec.kept, 1);
    assert_int_equal(rec.seen, 2);
    /* the credentials in the URL still reach the server, as basic auth */
    assert_true(cma_fake_http_has_header(s, 0, "Authorization: Basic dXNlcjpzZWNyZXQ="));
    /* a query whose GET URL would be too long goes as POST, and the report says why */
    char query[301];
    memset(query, 'a', 300);
    query[300] = '\0';
    assert_int_equal(cma_prom_query(p, query, 0, NULL, NULL, &r, NULL), CMA_OK);
    cma_prom_result_free(r);
    assert_string_equal(rec.method, "POST");
    assert_true(rec.long_get > 200);
    assert_int_equal(rec.max_get, 200);
    snprintf(want, sizeof(want), "http://127.0.0.1:%d/p/api/v1/query", cma_fake_http_port(s));
    assert_string_equal(rec.url, want);
    assert_null(strstr(rec.url, "secret"));
    cma_prom_free(p);
    cma_fake_http_stop(s);
}

/* A failed transfer is reported with curl's words and no status; an error answer is reported
 * as an answer that was not decoded. */
static void test_cma_prom_query__reports_failures(void **state)
{
    (void)state;
    char url[128];
    refused_url(url, sizeof(url), "", "");
    struct reports rec = {0};
    struct cma_prom_config cfg = {
        .url = url, .notifier = {.on_request = on_request, .on_answer = on_answer, .ctx = &rec}};
    struct cma_prom *p = prom_for(&cfg);
    struct cma_prom_result *r = NULL;
    assert_int_equal(cma_prom_query(p, "up", 0, NULL, NULL, &r, NULL), CMA_ERR_BACKEND_UNAVAILABLE);
    assert_int_equal(rec.requests, 1);
    assert_int_equal(rec.status, 0);
    assert_true(rec.error[0] != '\0');
    assert_int_equal(rec.answers, 0); /* no answer came */
    cma_prom_free(p);
    struct cma_fake_answer a[] = {{.status = 500, .content_type = "text/plain", .body = "oops"}};
    struct cma_fake_http *s = serve(a, 1);
    char *base = cma_fake_http_url(s, "");
    cfg.url = base;
    p = prom_for(&cfg);
    assert_int_equal(cma_prom_query(p, "up", 0, NULL, NULL, &r, NULL), CMA_ERR_BACKEND_ERROR);
    assert_int_equal(rec.requests, 2);
    assert_int_equal(rec.status, 500);
    assert_string_equal(rec.error, "");
    assert_int_equal(rec.answers, 1);
    assert_string_equal(rec.head, "oops");
    assert_false(rec.decoded);
    cma_prom_free(p);
    free(base);
    cma_fake_http_stop(s);
}

struct thread_job {
    struct cma_prom *prom;
    int ok;
};

static void *query_thread(void *arg)
{
    struct thread_job *job = arg;
    for (int i = 0; i < 5; i++) {
        struct cma_prom_result *r = NULL;
        if (cma_prom_query(job->prom, "up", 0, NULL, NULL, &r, NULL) == CMA_OK && r->n_samples == 1)
            job->ok++;
        cma_prom_result_free(r);
    }
    return NULL;
}

static void test_cma_prom_query__threads_share_one_client(void **state)
{
    (void)state;
    struct cma_fake_answer a[] = {{.status = 200, .body = vector_body}};
    struct cma_fake_http *s = serve(a, 1);
    char *url = cma_fake_http_url(s, "");
    struct cma_prom_config cfg = {.url = url};
    struct cma_prom *p = prom_for(&cfg);
    pthread_t threads[4];
    struct thread_job jobs[4];
    for (int i = 0; i < 4; i++) {
        jobs[i] = (struct thread_job){.prom = p, .ok = 0};
        assert_int_equal(pthread_create(&threads[i], NULL, query_thread, &jobs[i]), 0);
    }
    for (int i = 0; i < 4; i++) {
        pthread_join(threads[i], NULL);
        assert_int_equal(jobs[i].ok, 5);
    }
    assert_int_equal(cma_fake_http_count(s), 20);
    cma_prom_free(p);
    free(url);
    cma_fake_http_stop(s);
}

static void test_cma_prom_new__bad_settings(void **state)
{
    (void)state;
    struct cma_prom *p = NULL;
    struct cma_err err;
    struct cma_prom_config cfg = {.url = "localhost:9090"};
    cma_err_clear(&err);
    assert_int_equal(cma_prom_new(&cfg, &p, &err), CMA_ERR_FLAG);
    assert_non_null(strstr(err.msg, "--prometheus-url"));
    cfg.url = "file:///etc/passwd";
    cma_err_clear(&err);
    assert_int_equal(cma_prom_new(&cfg, &p, &err), CMA_ERR_FLAG);
    cfg.url = "http://127.0.0.1:9090";
    cfg.token_file = "/nonexistent/token";
    cma_err_clear(&err);
    assert_int_equal(cma_prom_new(&cfg, &p, &err), CMA_ERR_IO);
    assert_non_null(strstr(err.msg, "/nonexistent/token"));
    cfg.token_file = NULL;
    cfg.client_cert_file = "/nonexistent/cert";
    cma_err_clear(&err);
    assert_int_equal(cma_prom_new(&cfg, &p, &err), CMA_ERR_FLAG);
    cfg.client_key_file = "/nonexistent/key";
    cma_err_clear(&err);
    assert_int_equal(cma_prom_new(&cfg, &p, &err), CMA_ERR_IO);
    cfg.client_cert_file = cfg.client_key_file = NULL;
    const char *bad_headers[] = {"X-Bad=a\r\nInjected: yes"};
    cfg.headers = bad_headers;
    cfg.n_headers = 1;
    cma_err_clear(&err);
    assert_int_equal(cma_prom_new(&cfg, &p, &err), CMA_ERR_FLAG);
    const char *bad_names[] = {"=value"};
    cfg.headers = bad_names;
    cma_err_clear(&err);
    assert_int_equal(cma_prom_new(&cfg, &p, &err), CMA_ERR_FLAG);
    assert_null(p);
    cma_prom_free(NULL);
}

/* ---- prometheus: series ------------------------------------------------------------------ */

struct series_seen {
    size_t n;
    char names[8][64];
};

static int series_fn(void *ctx, const char *metric, size_t metric_len,
                     const struct cma_label_view *labels, size_t n_labels)
{
    struct series_seen *seen = ctx;
    if (seen->n < 8)
        snprintf(seen->names[seen->n], sizeof(seen->names[0]), "%.*s/%zu/%.*s", (int)metric_len,
                 metric, n_labels, n_labels ? (int)labels[0].value_len : 0,
                 n_labels ? labels[0].value : "");
    seen->n++;
    return 0;
}

static const char series_body[] =
    "{\"status\":\"success\",\"data\":[{\"__name__\":\"DCGM_FI_DEV_GPU_UTIL\",\"pod\":\"bert-0\"},"
    "{\"__name__\":\"DCGM_FI_DEV_FB_USED\",\"pod\":\"bert-1\",\"gpu\":\"0\"},"
    "{\"pod\":\"no-name\"},{\"__name__\":\"up\"}],\"warnings\":[\"partial\"]}";

static void test_cma_prom_series__streams_small_chunks(void **state)
{
    (void)state;
    struct cma_fake_answer a[] = {{.status = 200, .body = series_body, .chunk = 7}};
    struct cma_fake_http *s = serve(a, 1);
    char *url = cma_fake_http_url(s, "/prom?tenant=x");
    const char *headers[] = {"X-Scope-OrgID=t1"};
    struct cma_prom_config cfg = {.url = url, .headers = headers, .n_headers = 1};
    struct cma_prom *p = prom_for(&cfg);
    struct series_seen seen = {0};
    struct cma_err err;
    cma_err_clear(&err);
    assert_int_equal(cma_prom_series(p, "{__name__=~\"DCGM_.*\"}", 1732227811000LL, 1732227871123LL,
                                     0, NULL, series_fn, &seen, &err),
                     CMA_OK);
    assert_int_equal(seen.n, 3);
    assert_string_equal(seen.names[0], "DCGM_FI_DEV_GPU_UTIL/1/bert-0");
    assert_string_equal(seen.names[1], "DCGM_FI_DEV_FB_USED/2/bert-1");
    assert_string_equal(seen.names[2], "up/0/");
    const char *target = req_of(s, 0)->target;
    assert_string_equal(target, "/prom/api/v1/series?tenant=x&match%5B%5D=%7B__name__%3D~%22DCGM_."
                                "%2A%22%7D&start=1732227811.000&end=1732227871.123");
    assert_true(cma_fake_http_has_header(s, 0, "X-Scope-OrgID: t1"));
    cma_prom_free(p);
    free(url);
    cma_fake_http_stop(s);
}

/* How many X-Scope-OrgID lines request i carried (any case). */
static size_t tenant_lines(struct cma_fake_http *s, size_t i)
{
    size_t n = 0;
    for (const char *p = strstr(req_of(s, i)->head, "\r\n"); p; p = strstr(p + 2, "\r\n"))
        n += strncasecmp(p + 2, "X-Scope-OrgID:", 14) == 0;
    return n;
}

/* A call's tenant replaces the configured X-Scope-OrgID (whatever its case) for that call only;
 * the other headers go as configured, with GET and POST, for queries and series listings. */
static void test_cma_prom_query_call__tenant_per_call(void **state)
{
    (void)state;
    struct cma_fake_answer a[] = {{.status = 200, .body = vector_body},
                                  {.status = 200, .body = vector_body},
                                  {.status = 200, .body = series_body},
                                  {.status = 200, .body = series_body}};
    struct cma_fake_http *s = serve(a, 4);
    char *url = cma_fake_http_url(s, "");
    const char *headers[] = {"x-scope-orgid=configured", "X-Other=1"};
    struct cma_prom_config cfg = {.url = url, .headers = headers, .n_headers = 2};
    struct cma_prom *p = prom_for(&cfg);
    struct cma_prom_result *r = NULL;
    struct cma_err err;
    cma_err_clear(&err);
    assert_int_equal(cma_prom_query_call(p, "up", 0, NULL, NULL, NULL, "shop", &r, &err), CMA_OK);
    cma_prom_result_free(r);
    assert_true(cma_fake_http_has_header(s, 0, "X-Scope-OrgID: shop"));
    assert_int_equal(tenant_lines(s, 0), 1);
    assert_true(cma_fake_http_has_header(s, 0, "X-Other: 1"));
    assert_true(cma_fake_http_has_header(s, 0, "Accept: application/json"));
    /* the next call without a tenant: the configured header again */
    assert_int_equal(cma_prom_query_call(p, "up", 0, NULL, NULL, NULL, NULL, &r, &err), CMA_OK);
    cma_prom_result_free(r);
    assert_true(cma_fake_http_has_header(s, 1, "X-Scope-OrgID: configured"));
    assert_int_equal(tenant_lines(s, 1), 1);
    struct series_seen seen = {0};
    assert_int_equal(cma_prom_series(p, "up", 0, 1000, 0, "web", series_fn, &seen, &err), CMA_OK);
    assert_int_equal(seen.n, 3);
    assert_true(cma_fake_http_has_header(s, 2, "X-Scope-OrgID: web"));
    assert_int_equal(tenant_lines(s, 2), 1);
    assert_true(cma_fake_http_has_header(s, 2, "X-Other: 1"));
    assert_int_equal(cma_prom_series(p, "up", 0, 1000, 0, NULL, series_fn, &seen, &err), CMA_OK);
    assert_true(cma_fake_http_has_header(s, 3, "X-Scope-OrgID: configured"));
    /* a tenant that cannot be a header value is refused before anything is sent */
    assert_int_equal(cma_prom_query_call(p, "up", 0, NULL, NULL, NULL, "a\r\nX-Evil: 1", &r, &err),
                     CMA_ERR_INTERNAL);
    assert_non_null(strstr(err.msg, "cannot be sent as X-Scope-OrgID"));
    cma_err_clear(&err);
    assert_int_equal(cma_prom_series(p, "up", 0, 1000, 0, "", series_fn, &seen, &err),
                     CMA_ERR_INTERNAL);
    assert_int_equal(cma_fake_http_count(s), 4);
    cma_prom_free(p);
    free(url);
    cma_fake_http_stop(s);
}

/* POST keeps its form headers with a tenant; a client without a tenant header gets one per call. */
static void test_cma_prom_query_call__tenant_with_post(void **state)
{
    (void)state;
    struct cma_fake_answer a[] = {{.status = 200, .body = vector_body},
                                  {.status = 200, .body = vector_body}};
    struct cma_fake_http *s = serve(a, 2);
    char *url = cma_fake_http_url(s, "");
    struct cma_prom_config cfg = {.url = url, .use_post = true};
    struct cma_prom *p = prom_for(&cfg);
    struct cma_prom_result *r = NULL;
    assert_int_equal(cma_prom_query_call(p, "up", 0, NULL, NULL, NULL, "team-a", &r, NULL), CMA_OK);
    cma_prom_result_free(r);
    assert_true(strncmp(req_of(s, 0)->head, "POST /api/v1/query HTTP", 23) == 0);
    assert_true(cma_fake_http_has_header(s, 0, "X-Scope-OrgID: team-a"));
    assert_true(cma_fake_http_has_header(s, 0, "Content-Type: application/x-www-form-urlencoded"));
    assert_string_equal(req_of(s, 0)->body, "query=up&time=0.000");
    assert_int_equal(cma_prom_query(p, "up", 0, NULL, NULL, &r, NULL), CMA_OK);
    cma_prom_result_free(r);
    assert_int_equal(tenant_lines(s, 1), 0);
    cma_prom_free(p);
    free(url);
    cma_fake_http_stop(s);
}

static enum cma_errc series_with(const struct cma_fake_answer *a, struct cma_err *err,
                                 size_t *seen_n)
{
    struct cma_fake_http *s = serve(a, 1);
    char *url = cma_fake_http_url(s, "");
    struct cma_prom_config cfg = {.url = url, .use_post = true};
    struct cma_prom *p = prom_for(&cfg);
    struct series_seen seen = {0};
    cma_err_clear(err);
    enum cma_errc rc = cma_prom_series(p, "up", 0, 1000, 0, NULL, series_fn, &seen, err);
    assert_int_equal(rc, err->code);
    if (seen_n)
        *seen_n = seen.n;
    if (cma_fake_http_count(s) > 0)
        assert_string_equal(req_of(s, 0)->body, "match%5B%5D=up&start=0.000&end=1.000");
    cma_prom_free(p);
    free(url);
    cma_fake_http_stop(s);
    return rc;
}

static void test_cma_prom_series__error_answers(void **state)
{
    (void)state;
    struct cma_err err;
    struct cma_fake_answer bad_data = {.status = 400,
                                       .body = "{\"status\":\"error\",\"errorType\":\"bad_data\","
                                               "\"error\":\"1:3: parse error\"}",
                                       .chunk = 5};
    assert_int_equal(series_with(&bad_data, &err, NULL), CMA_ERR_BACKEND_ERROR);
    assert_string_equal(err.msg, "bad_data: 1:3: parse error");
    struct cma_fake_answer not_found = {
        .status = 404, .content_type = "text/plain", .body = "404 page not found\n"};
    assert_int_equal(series_with(&not_found, &err, NULL), CMA_ERR_BACKEND_ERROR);
    assert_string_equal(err.msg, "prometheus answered HTTP 404 Not Found for /api/v1/series: "
                                 "404 page not found");
    struct cma_fake_answer null_data = {.status = 200,
                                        .body = "{\"status\":\"success\",\"data\":null}"};
    assert_int_equal(series_with(&null_data, &err, NULL), CMA_ERR_BACKEND_RESPONSE);
    assert_string_equal(err.msg, "no metrics retrieved");
    struct cma_fake_answer proxy = {
        .status = 503, .content_type = "text/plain", .body = "no healthy upstream"};
    assert_int_equal(series_with(&proxy, &err, NULL), CMA_ERR_BACKEND_UNAVAILABLE);
    assert_string_equal(err.msg,
                        "prometheus answered HTTP 503 Service Unavailable for /api/v1/series: "
                        "no healthy upstream");
    struct cma_fake_answer truncated = {.status = 200,
                                        .body = "{\"status\":\"success\",\"data\":[{\"__"};
    assert_int_equal(series_with(&truncated, &err, NULL), CMA_ERR_BACKEND_RESPONSE);
    struct cma_fake_answer after = {.status = 200,
                                    .chunk = 3,
                                    .body = "{\"data\":[{\"__name__\":\"a\"}],\"status\":\"error\","
                                            "\"error\":\"late\"}"};
    assert_int_equal(series_with(&after, &err, NULL), CMA_ERR_BACKEND_ERROR);
    assert_string_equal(err.msg, "late");
}

static int stop_fn(void *ctx, const char *metric, size_t metric_len,
                   const struct cma_label_view *labels, size_t n_labels)
{
    (void)metric;
    (void)metric_len;
    (void)labels;
    (void)n_labels;
    return ++*(size_t *)ctx >= 2;
}

static void test_cma_prom_series__caller_stops(void **state)
{
    (void)state;
    struct cma_fake_answer a[] = {{.status = 200, .body = series_body, .chunk = 11}};
    struct cma_fake_http *s = serve(a, 1);
    char *url = cma_fake_http_url(s, "");
    struct cma_prom_config cfg = {.url = url};
    struct cma_prom *p = prom_for(&cfg);
    size_t calls = 0;
    struct cma_err err;
    cma_err_clear(&err);
    assert_int_equal(cma_prom_series(p, "up", 0, 0, 0, NULL, stop_fn, &calls, &err),
                     CMA_ERR_INTERNAL);
    assert_string_equal(err.msg, "series listing stopped by caller");
    assert_int_equal(calls, 2);
    cma_prom_free(p);
    free(url);
    cma_fake_http_stop(s);
}

/* ---- kube-apiserver ---------------------------------------------------------------------- */

static struct cma_kube *kube_for(const struct cma_fake_http *s, const char *token_file)
{
    char *url = cma_fake_http_url(s, "/");
    struct cma_kube_conn conn = {.server = url, .token_file = (char *)token_file};
    struct cma_kube *k = NULL;
    struct cma_err err;
    cma_err_clear(&err);
    if (cma_kube_new_from_conn(&conn, 2000, &k, &err) != CMA_OK)
        fail_msg("cma_kube_new_from_conn: %s", err.msg);
    free(url);
    return k;
}

static void free_names(char **names, size_t n)
{
    for (size_t i = 0; i < n; i++)
        free(names[i]);
    free(names);
}

static void test_cma_kube_list_names__pages_and_rotating_token(void **state)
{
    (void)state;
    size_t l1, l2;
    char *page1 = cma_kube_fixture_read("pods-all-bert-limit2-page1.json", &l1);
    assert_non_null(page1);
    char *page2 = cma_kube_fixture_read("pods-all-bert-limit2-page2.json", &l2);
    assert_non_null(page2);
    struct cma_fake_answer a[] = {{.status = 200, .body = page1, .chunk = 1000},
                                  {.status = 200, .body = page2}};
    struct cma_fake_http *s = serve(a, 2);
    char token_path[] = "/tmp/cma-kube-token-XXXXXX";
    int fd = mkstemp(token_path);
    assert_int_equal(write(fd, "first\n", 6), 6);
    close(fd);
    struct cma_kube *k = kube_for(s, token_path);
    char **names = NULL;
    size_t n = 0;
    struct cma_err err;
    cma_err_clear(&err);
    assert_int_equal(cma_kube_list_names(k, "", "v1", "pods", "ml", "app=bert", &names, &n, &err),
                     CMA_OK);
    assert_int_equal(n, 3);
    assert_string_equal(names[0], "bert-0");
    assert_string_equal(names[2], "bert-2");
    free_names(names, n);
    assert_int_equal(cma_fake_http_count(s), 2);
    const char *t0 = req_of(s, 0)->target;
    const char *t1 = req_of(s, 1)->target;
    assert_string_equal(t0, "/api/v1/namespaces/ml/pods?labelSelector=app%3Dbert&limit=500");
    assert_string_equal(t1, "/api/v1/namespaces/ml/pods?labelSelector=app%3Dbert&limit=500"
                            "&continue=eyJ2IjoibWV0YS5rOHMuaW8vdjEiLCJydiI6MjY0LCJzdGFydCI6Im1s"
                            "L2JlcnQtMVx1MDAwMCJ9");
    assert_true(cma_fake_http_has_header(s, 0, "Authorization: Bearer first"));
    assert_true(cma_fake_http_has_header(s, 0,
                                         "Accept: application/json;as=PartialObjectMetadataList;"
                                         "g=meta.k8s.io;v=v1,application/json"));
    cma_kube_free(k);
    cma_fake_http_stop(s);

    /* the token file is read again on every request */
    struct cma_fake_answer b[] = {{.status = 200, .body = page2}};
    s = serve(b, 1);
    k = kube_for(s, token_path);
    FILE *f = fopen(token_path, "w");
    fputs("second", f);
    fclose(f);
    assert_int_equal(
        cma_kube_list_names(k, "apps", "v1", "deployments", NULL, NULL, &names, &n, NULL), CMA_OK);
    free_names(names, n);
    assert_true(cma_fake_http_has_header(s, 0, "Authorization: Bearer second"));
    t0 = req_of(s, 0)->target;
    assert_string_equal(t0, "/apis/apps/v1/deployments?limit=500");
    cma_kube_free(k);
    cma_fake_http_stop(s);
    unlink(token_path);
    free(page1);
    free(page2);
}

static void test_cma_kube_list_names__expired_continue_restarts_once(void **state)
{
    (void)state;
    size_t l1, l2, l3;
    char *page1 = cma_kube_fixture_read("pods-all-bert-limit2-page1.json", &l1);
    assert_non_null(page1);
    char *page2 = cma_kube_fixture_read("pods-all-bert-limit2-page2.json", &l2);
    assert_non_null(page2);
    char *expired = cma_kube_fixture_read("error-410-list-continue-expired.http", &l3);
    assert_non_null(expired);
    char *gone = strstr(expired, "{\"kind\":\"Status\"");
    assert_non_null(gone);
    struct cma_fake_answer a[] = {{.status = 200, .body = page1},
                                  {.status = 410, .body = gone},
                                  {.status = 200, .body = page1},
                                  {.status = 200, .body = page2}};
    struct cma_fake_http *s = serve(a, 4);
    struct cma_kube *k = kube_for(s, NULL);
    char **names = NULL;
    size_t n = 0;
    struct cma_err err;
    cma_err_clear(&err);
    assert_int_equal(cma_kube_list_names(k, NULL, "v1", "pods", NULL, "app=bert", &names, &n, &err),
                     CMA_OK);
    assert_int_equal(n, 3); /* the names of the abandoned first page are not repeated */
    assert_string_equal(names[0], "bert-0");
    assert_string_equal(names[1], "bert-1");
    assert_string_equal(names[2], "bert-2");
    free_names(names, n);
    assert_int_equal(cma_fake_http_count(s), 4);
    const char *t2 = req_of(s, 2)->target;
    assert_null(strstr(t2, "continue="));
    cma_kube_free(k);
    cma_fake_http_stop(s);

    /* a second expiry is an error */
    struct cma_fake_answer b[] = {{.status = 200, .body = page1}, {.status = 410, .body = gone}};
    s = serve(b, 2);
    k = kube_for(s, NULL);
    cma_err_clear(&err);
    assert_int_equal(cma_kube_list_names(k, NULL, "v1", "pods", NULL, NULL, &names, &n, &err),
                     CMA_ERR_KUBE_ERROR);
    assert_non_null(strstr(err.msg, "HTTP 410"));
    assert_non_null(strstr(err.msg, "too old"));
    cma_kube_free(k);
    cma_fake_http_stop(s);
    free(page1);
    free(page2);
    free(expired);
}

static void test_cma_kube_list_names__status_mapping(void **state)
{
    (void)state;
    static const struct {
        int status;
        const char *body;
        enum cma_errc want;
        const char *msg;
    } cases[] = {
        {403,
         "{\"kind\":\"Status\",\"status\":\"Failure\",\"message\":\"pods is forbidden: User "
         "\\\"alice\\\" cannot list resource\",\"reason\":\"Forbidden\",\"code\":403}",
         CMA_ERR_KUBE_ERROR,
         "the Kubernetes API answered HTTP 403 for GET /api/v1/namespaces/ml/pods: pods is "
         "forbidden: User \"alice\" cannot list resource"},
        {401, "{\"kind\":\"Status\",\"message\":\"Unauthorized\",\"code\":401}", CMA_ERR_KUBE_ERROR,
         "HTTP 401 for GET /api/v1/namespaces/ml/pods: Unauthorized"},
        {404,
         "{\"kind\":\"Status\",\"message\":\"the server could not find the requested "
         "resource\",\"code\":404}",
         CMA_ERR_NOT_FOUND, "could not find the requested resource"},
        {503, "service unavailable\n", CMA_ERR_KUBE_UNAVAILABLE, "HTTP 503"},
        {400, "{\"kind\":\"Status\",\"message\":\"unable to parse requirement\",\"code\":400}",
         CMA_ERR_KUBE_ERROR, "unable to parse requirement"},
        {200, "{\"items\":{}}", CMA_ERR_KUBE_ERROR, "items is not a list"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        struct cma_fake_answer a = {.status = cases[i].status, .body = cases[i].body};
        struct cma_fake_http *s = serve(&a, 1);
        struct cma_kube *k = kube_for(s, NULL);
        char **names = NULL;
        size_t n = 0;
        struct cma_err err;
        cma_err_clear(&err);
        enum cma_errc rc = cma_kube_list_names(k, "", "v1", "pods", "ml", NULL, &names, &n, &err);
        if (rc != cases[i].want || !strstr(err.msg, cases[i].msg))
            fail_msg("case %zu: got %s \"%s\"", i, cma_errc_name(rc), err.msg);
        cma_kube_free(k);
        cma_fake_http_stop(s);
    }
}

static void test_cma_kube_list_names__unreachable(void **state)
{
    (void)state;
    char url[64];
    refused_url(url, sizeof(url), "", "");
    struct cma_kube_conn conn = {.server = url};
    struct cma_kube *k = NULL;
    assert_int_equal(cma_kube_new_from_conn(&conn, 0, &k, NULL), CMA_OK);
    char **names = NULL;
    size_t n = 0;
    struct cma_err err;
    cma_err_clear(&err);
    assert_int_equal(cma_kube_list_names(k, "", "v1", "pods", NULL, NULL, &names, &n, &err),
                     CMA_ERR_KUBE_UNAVAILABLE);
    assert_non_null(strstr(err.msg, "cannot reach the Kubernetes API"));
    struct cma_api_resources *r = NULL;
    cma_err_clear(&err);
    assert_int_equal(cma_kube_discover(k, &r, &err), CMA_ERR_KUBE_UNAVAILABLE);
    assert_null(r);
    cma_kube_free(k);
}

static void test_cma_kube_discover__fixtures_and_failing_groups(void **state)
{
    (void)state;
    static const char *const files[][2] = {
        {"/api", "discovery-api.json"},
        {"/api/v1", "discovery-api-v1.json"},
        {"/apis", "discovery-apis.json"},
        {"/apis/apps/v1", "discovery-apis-apps-v1.json"},
        {"/apis/batch/v1", "discovery-apis-batch-v1.json"},
        {"/apis/autoscaling/v2", "discovery-apis-autoscaling-v2.json"},
        {"/apis/networking.k8s.io/v1", "discovery-apis-networking.k8s.io-v1.json"},
        {"/apis/apiregistration.k8s.io/v1", "discovery-apis-apiregistration.k8s.io-v1.json"},
    };
    size_t nf = sizeof(files) / sizeof(files[0]);
    struct cma_fake_answer a[16];
    char *bodies[16];
    for (size_t i = 0; i < nf; i++) {
        size_t len;
        bodies[i] = cma_kube_fixture_read(files[i][1], &len);
        assert_non_null(bodies[i]);
        a[i] = (struct cma_fake_answer){.path = files[i][0], .status = 200, .body = bodies[i]};
    }
    a[nf] = (struct cma_fake_answer){.path = "/apis/custom.metrics.k8s.io/v1beta1",
                                     .status = 503,
                                     .content_type = "text/plain",
                                     .body = "service unavailable\n"};
    struct cma_fake_http *s = serve(a, nf + 1);
    struct cma_kube *k = kube_for(s, NULL);
    struct cma_api_resources *r = NULL;
    struct cma_err err;
    cma_err_clear(&err);
    assert_int_equal(cma_kube_discover(k, &r, &err), CMA_OK);
    bool pods = false, deployments = false, jobs = false, ingresses = false;
    for (size_t i = 0; i < r->n; i++) {
        const struct cma_api_resource *x = &r->items[i];
        assert_null(strchr(x->resource, '/'));
        if (!strcmp(x->group, "") && !strcmp(x->resource, "pods"))
            pods = x->namespaced && !strcmp(x->version, "v1");
        if (!strcmp(x->group, "apps") && !strcmp(x->resource, "deployments"))
            deployments = !strcmp(x->singular, "deployment");
        if (!strcmp(x->group, "batch") && !strcmp(x->resource, "jobs"))
            jobs = true;
        if (!strcmp(x->group, "networking.k8s.io") && !strcmp(x->resource, "ingresses"))
            ingresses = true;
    }
    assert_true(pods && deployments && jobs && ingresses);
    /* 20 groups: 5 served, custom.metrics answers 503, 14 answer 404 */
    assert_int_equal(cma_kube_skipped_groups(k), 15);
    assert_int_equal(cma_fake_http_count(s), 3 + 20);
    cma_api_resources_free(r);
    cma_kube_free(k);
    cma_fake_http_stop(s);

    /* /apis failing is fatal */
    struct cma_fake_answer b[] = {a[0], a[1]};
    s = serve(b, 2);
    k = kube_for(s, NULL);
    cma_err_clear(&err);
    assert_int_equal(cma_kube_discover(k, &r, &err), CMA_ERR_NOT_FOUND);
    assert_non_null(strstr(err.msg, "GET /apis"));
    cma_kube_free(k);
    cma_fake_http_stop(s);
    for (size_t i = 0; i < nf; i++)
        free(bodies[i]);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cma_prom_query__get_keeps_prefix_and_base_query),
        cmocka_unit_test(test_cma_prom_query__post_form_body),
        cmocka_unit_test(test_cma_prom_query__long_query_goes_as_post),
        cmocka_unit_test(test_cma_prom_query__headers_and_trimmed_bearer_token),
        cmocka_unit_test(test_cma_prom_query__basic_auth),
        cmocka_unit_test(test_cma_prom_query__connection_refused),
        cmocka_unit_test(test_cma_prom_query__timeout),
        cmocka_unit_test(test_cma_prom_query__422_bad_data),
        cmocka_unit_test(test_cma_prom_query__503_timeout_error_type),
        cmocka_unit_test(test_cma_prom_query__401_names_status),
        cmocka_unit_test(test_cma_prom_query__proxy_statuses),
        cmocka_unit_test(test_cma_prom_query__gateway_pages_without_markup),
        cmocka_unit_test(test_cma_prom_query__oversize_body),
        cmocka_unit_test(test_cma_prom_query__content_length_refused_early),
        cmocka_unit_test(test_cma_prom_query__keep_and_budget),
        cmocka_unit_test(test_cma_prom_query__closed_without_answer),
        cmocka_unit_test(test_cma_prom_query__undecodable_200),
        cmocka_unit_test(test_cma_prom_query__reports_without_credentials),
        cmocka_unit_test(test_cma_prom_query__reports_failures),
        cmocka_unit_test(test_cma_prom_query__threads_share_one_client),
        cmocka_unit_test(test_cma_prom_new__bad_settings),
        cmocka_unit_test(test_cma_prom_series__streams_small_chunks),
        cmocka_unit_test(test_cma_prom_query_call__tenant_per_call),
        cmocka_unit_test(test_cma_prom_query_call__tenant_with_post),
        cmocka_unit_test(test_cma_prom_series__error_answers),
        cmocka_unit_test(test_cma_prom_series__caller_stops),
        cmocka_unit_test(test_cma_kube_list_names__pages_and_rotating_token),
        cmocka_unit_test(test_cma_kube_list_names__expired_continue_restarts_once),
        cmocka_unit_test(test_cma_kube_list_names__status_mapping),
        cmocka_unit_test(test_cma_kube_list_names__unreachable),
        cmocka_unit_test(test_cma_kube_discover__fixtures_and_failing_groups),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
