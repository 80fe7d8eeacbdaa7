/* transport_test.c: the one HTTP transport of the clients stage (src/clients/transport.c) on its
 * own, against the shared fake HTTP server (fakehttp.h), which stands in for any peer
 * (Prometheus, kube-apiserver): what a request sends (method, headers with the credentials'
 * Authorization line in front, body), where the body goes (gathered under a ceiling, or streamed
 * to a write callback), the report handed to the notifier (never with credentials), and the one
 * mapping of transport failures and HTTP statuses to error codes, with each client's table. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "../../src/clients/internal.h"
#include "cma/backend.h"
#include "cma/clock.h"
#include "fakehttp.h"

/* Two tables shaped like the clients' (prom.c's and kube.c's). */
static const struct cma_transport_errors BACKEND = {
    .peer = "prometheus",
    .timeout = CMA_ERR_BACKEND_TIMEOUT,
    .unreachable = CMA_ERR_BACKEND_UNAVAILABLE,
    .bad_reply = CMA_ERR_BACKEND_RESPONSE,
    .other = CMA_ERR_BACKEND_ERROR,
    .too_large = CMA_ERR_TOO_LARGE,
    .status_error = CMA_ERR_BACKEND_ERROR,
    .status_unavailable = CMA_ERR_BACKEND_UNAVAILABLE,
    .status_not_found = CMA_ERR_BACKEND_ERROR,
    .credentials_hint = true,
};

static const struct cma_transport_errors KUBE = {
    .peer = "the Kubernetes API",
    .timeout = CMA_ERR_KUBE_UNAVAILABLE,
    .unreachable = CMA_ERR_KUBE_UNAVAILABLE,
    .bad_reply = CMA_ERR_KUBE_UNAVAILABLE,
    .other = CMA_ERR_KUBE_UNAVAILABLE,
    .too_large = CMA_ERR_KUBE_ERROR,
    .status_error = CMA_ERR_KUBE_ERROR,
    .status_unavailable = CMA_ERR_KUBE_UNAVAILABLE,
    .status_not_found = CMA_ERR_NOT_FOUND,
    .busy_5xx_429 = true,
    .timeout_names_request = true,
};

/* What the notifier saw (copies). */
struct seen {
    int requests, warnings;
    char client[16], method[8], url[256], what[64], error[256], warning[512];
    long status;
    uint64_t bytes;
};

static void on_request(void *ctx, const struct cma_http_report *r)
{
    struct seen *s = ctx;
    s->requests++;
    snprintf(s->client, sizeof(s->client), "%s", r->client);
    snprintf(s->method, sizeof(s->method), "%s", r->method);
    snprintf(s->url, sizeof(s->url), "%s", r->url);
    snprintf(s->what, sizeof(s->what), "%s", r->what);
    snprintf(s->error, sizeof(s->error), "%s", r->error ? r->error : "");
    s->status = r->status;
    s->bytes = r->bytes;
}

static void on_credentials(void *ctx, const struct cma_err *w)
{
    struct seen *s = ctx;
    s->warnings++;
    snprintf(s->warning, sizeof(s->warning), "%s", w->msg);
}

/* A transport with the credentials of spec, reporting to seen. */
static void transport_for(struct cma_transport *t, const struct cma_transport_errors *e,
                          const struct cma_cred_spec *spec, struct seen *seen)
{
    struct cma_err err;
    cma_err_clear(&err);
    if (cma_transport_init(t, "test", e, 2000, &err) != CMA_OK)
        fail_msg("cma_transport_init: %s", err.msg);
    struct cma_cred_spec none = {0};
    if (cma_creds_new(spec ? spec : &none, &t->creds, &err) != CMA_OK)
        fail_msg("cma_creds_new: %s", err.msg);
    t->notifier = (struct cma_client_notifier){
        .on_request = on_request, .on_credentials = on_credentials, .ctx = seen};
}

static struct cma_fake_http *serve(const struct cma_fake_answer *a, size_t n)
{
    struct cma_fake_http *s = cma_fake_http_start(a, n);
    assert_non_null(s);
    return s;
}

static char *write_token(const char *text)
{
    char *path = strdup("/tmp/cma-transport-token-XXXXXX");
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, text, strlen(text)), (ssize_t)strlen(text));
    close(fd);
    return path;
}

/* A GET gathers its body; the Authorization line of the credentials goes in front of the
 * client's headers; the report names the URL without credentials. A token rewritten into
 * something unusable is refused once, through the notifier, and the previous one is sent. */
static void test_cma_transport_perform__get_gathers_and_reports(void **state)
{
    (void)state;
    struct cma_fake_answer a[] = {{.status = 200, .body = "{\"ok\":true}"}};
    struct cma_fake_http *s = serve(a, 1);
    char *token = write_token("tok-1\n");
    struct cma_cred_spec spec = {.token = {.label = "--token-file", .file = token}};
    struct cma_transport t;
    struct seen seen = {0};
    transport_for(&t, &BACKEND, &spec, &seen);
    struct curl_slist *headers = curl_slist_append(NULL, "Accept: application/json");
    char *url = cma_fake_http_url(s, "/api/v1/query?query=up");
    struct cma_buf body;
    cma_buf_init(&body, 1024);
    struct cma_http_request req = {.method = "GET",
                                   .url = url,
                                   .public_url = "http://public/api/v1/query?query=up",
                                   .what = "/api/v1/query",
                                   .where = "http://public",
                                   .headers = headers,
                                   .timeout_ms = 2000,
                                   .gather = &body};
    struct cma_http_result res;
    struct cma_err err;
    cma_err_clear(&err);
    assert_int_equal(cma_transport_perform(&t, &req, &res, &err), CMA_OK);
    assert_int_equal(res.status, 200);
    assert_string_equal(cma_buf_str(&body), "{\"ok\":true}");
    assert_int_equal(res.bytes, 11);
    const struct cma_fake_request *r = cma_fake_http_request(s, 0);
    assert_non_null(r);
    assert_string_equal(r->method, "GET");
    assert_string_equal(r->target, "/api/v1/query?query=up");
    assert_true(cma_fake_http_has_header(s, 0, "Authorization: Bearer tok-1"));
    assert_true(cma_fake_http_has_header(s, 0, "Accept: application/json"));
    assert_non_null(strstr(r->head, "\r\nUser-Agent: custom-metrics-adapter/"));
    assert_int_equal(seen.requests, 1);
    assert_string_equal(seen.client, "test");
    assert_string_equal(seen.method, "GET");
    assert_string_equal(seen.url, "http://public/api/v1/query?query=up");
    assert_string_equal(seen.what, "/api/v1/query");
    assert_int_equal(seen.status, 200);
    assert_int_equal(seen.bytes, 11);
    assert_string_equal(seen.error, "");
    assert_int_equal(seen.warnings, 0);
    /* a half-written token: refused, reported once, the previous one still sent */
    FILE *f = fopen(token, "w");
    assert_non_null(f);
    fclose(f);
    for (int i = 0; i < 2; i++) {
        cma_buf_done(&body);
        cma_buf_init(&body, 1024);
        assert_int_equal(cma_transport_perform(&t, &req, &res, &err), CMA_OK);
        assert_true(cma_fake_http_has_header(s, (size_t)i + 1, "Authorization: Bearer tok-1"));
    }
    assert_int_equal(seen.warnings, 1);
    assert_non_null(strstr(seen.warning, "--token-file"));
    assert_non_null(strstr(seen.warning, "keeping the previous"));
    cma_buf_done(&body);
    curl_slist_free_all(headers);
    free(url);
    cma_transport_done(&t);
    cma_fake_http_stop(s);
    unlink(token);
    free(token);
}

/* A POST sends its body with the client's headers; any HTTP status is an answer (CMA_OK). */
static void test_cma_transport_perform__post_body_and_status(void **state)
{
    (void)state;
    struct cma_fake_answer a[] = {{.status = 403, .body = "{\"kind\":\"Status\"}"}};
    struct cma_fake_http *s = serve(a, 1);
    struct cma_transport t;
    struct seen seen = {0};
    transport_for(&t, &KUBE, NULL, &seen);
    struct curl_slist *headers = curl_slist_append(NULL, "Content-Type: application/json");
    char *url = cma_fake_http_url(s, "/apis/authorization.k8s.io/v1/subjectaccessreviews");
    struct cma_buf body;
    cma_buf_init(&body, 1024);
    struct cma_http_request req = {.method = "POST",
                                   .url = url,
                                   .what = "POST /apis/authorization.k8s.io/v1/...",
                                   .where = url,
                                   .headers = headers,
                                   .body = "{\"a\":1}",
                                   .body_len = 7,
                                   .timeout_ms = 2000,
                                   .gather = &body};
    struct cma_http_result res;
    assert_int_equal(cma_transport_perform(&t, &req, &res, NULL), CMA_OK);
    assert_int_equal(res.status, 403);
    assert_string_equal(res.reason, "Forbidden"); /* the status line's own words */
    const struct cma_fake_request *r = cma_fake_http_request(s, 0);
    assert_string_equal(r->method, "POST");
    assert_string_equal(r->body, "{\"a\":1}");
    assert_true(cma_fake_http_has_header(s, 0, "Content-Type: application/json"));
    assert_null(strstr(r->head, "Authorization:")); /* no credentials, no line */
    assert_string_equal(seen.url, url);             /* no public URL given: the URL itself */
    assert_int_equal(seen.status, 403);
    cma_buf_done(&body);
    curl_slist_free_all(headers);
    free(url);
    cma_transport_done(&t);
    cma_fake_http_stop(s);
}

/* A gathered body over its ceiling is the table's too_large, naming the peer and the request. */
static void test_cma_transport_perform__gathered_body_over_ceiling(void **state)
{
    (void)state;
    static char big[5000];
    memset(big, 'x', sizeof(big) - 1);
    struct cma_fake_answer a[] = {{.status = 200, .body = big, .chunk = 1000}};
    struct cma_fake_http *s = serve(a, 1);
    struct cma_transport t;
    struct seen seen = {0};
    transport_for(&t, &KUBE, NULL, &seen);
    char *url = cma_fake_http_url(s, "/api/v1/pods");
    struct cma_buf body;
    cma_buf_init(&body, 1024);
    struct cma_http_request req = {.method = "GET",
                                   .url = url,
                                   .what = "GET /api/v1/pods",
                                   .where = "x",
                                   .timeout_ms = 2000,
                                   .gather = &body};
    struct cma_http_result res;
    struct cma_err err;
    cma_err_clear(&err);
    assert_int_equal(cma_transport_perform(&t, &req, &res, &err), CMA_ERR_KUBE_ERROR);
    assert_string_equal(err.msg, "answer of the Kubernetes API to GET /api/v1/pods is over 1024 "
                                 "bytes");
    assert_int_equal(res.curl, CURLE_WRITE_ERROR);
    cma_buf_done(&body);
    free(url);
    cma_transport_done(&t);
    cma_fake_http_stop(s);
}

struct stopper {
    size_t seen;
    CURL *handle;
};

static size_t stop_after_first(char *data, size_t size, size_t nmemb, void *ctx)
{
    (void)data;
    struct stopper *st = ctx;
    st->seen += size * nmemb;
    return 0;
}

/* A write callback sees the body as it streams and may stop it: the caller then gets
 * CURLE_WRITE_ERROR in the result to put its own verdict in place of the table's `other`. */
static void test_cma_transport_perform__write_callback_streams_and_stops(void **state)
{
    (void)state;
    struct cma_fake_answer a[] = {{.status = 200, .body = "0123456789", .chunk = 2}};
    struct cma_fake_http *s = serve(a, 1);
    struct cma_transport t;
    struct seen seen = {0};
    transport_for(&t, &BACKEND, NULL, &seen);
    char *url = cma_fake_http_url(s, "/x");
    struct stopper st = {0};
    struct cma_http_request req = {.method = "GET",
                                   .url = url,
                                   .what = "/x",
                                   .where = "http://p",
                                   .timeout_ms = 2000,
                                   .write = stop_after_first,
                                   .write_ctx = &st,
                                   .handle = &st.handle};
    struct cma_http_result res;
    struct cma_err err;
    cma_err_clear(&err);
    assert_int_equal(cma_transport_perform(&t, &req, &res, &err), CMA_ERR_BACKEND_ERROR);
    assert_int_equal(res.curl, CURLE_WRITE_ERROR);
    assert_int_equal(st.seen, 2);
    assert_non_null(st.handle);
    assert_non_null(strstr(err.msg, "request to prometheus at http://p failed: "));
    assert_int_equal(res.status, 200);
    assert_int_equal(seen.requests, 1);
    free(url);
    cma_transport_done(&t);
    cma_fake_http_stop(s);
}

/* Nothing listening: unreachable, reported with curl's words and no status. Too slow: the
 * table's timeout, with or without the request's name. A handle of its own works the same. */
static void test_cma_transport_perform__unreachable_and_timeouts(void **state)
{
    (void)state;
    struct cma_transport t;
    struct seen seen = {0};
    transport_for(&t, &BACKEND, NULL, &seen);
    char url[128];
    snprintf(url, sizeof(url), "http://127.0.0.1:%d/api/v1/query", cma_loopback_unused_port());
    struct cma_buf body;
    cma_buf_init(&body, 1024);
    struct cma_http_request req = {.method = "GET",
                                   .url = url,
                                   .what = "/api/v1/query",
                                   .where = "http://127.0.0.1/api/v1/query",
                                   .timeout_ms = 300,
                                   .gather = &body};
    struct cma_http_result res;
    struct cma_err err;
    cma_err_clear(&err);
    assert_int_equal(cma_transport_perform(&t, &req, &res, &err), CMA_ERR_BACKEND_UNAVAILABLE);
    assert_non_null(strstr(err.msg, "cannot reach prometheus at http://127.0.0.1/api/v1/query: "));
    assert_int_equal(seen.status, 0);
    assert_true(seen.error[0] != '\0');
    cma_transport_done(&t);

    struct cma_fake_answer a[] = {{.status = 200, .body = "{}", .delay_ms = 3000}};
    struct cma_fake_http *s = serve(a, 1);
    char *slow = cma_fake_http_url(s, "/api/v1/pods");
    req.url = slow;
    req.what = "GET /api/v1/pods";
    req.dedicated = true;
    transport_for(&t, &KUBE, NULL, &seen);
    cma_err_clear(&err);
    assert_int_equal(cma_transport_perform(&t, &req, &res, &err), CMA_ERR_KUBE_UNAVAILABLE);
    assert_string_equal(err.msg, "the Kubernetes API did not answer GET /api/v1/pods within 300ms");
    cma_transport_done(&t);
    transport_for(&t, &BACKEND, NULL, &seen);
    cma_err_clear(&err);
    assert_int_equal(cma_transport_perform(&t, &req, &res, &err), CMA_ERR_BACKEND_TIMEOUT);
    assert_string_equal(err.msg, "prometheus did not answer within 300ms");
    /* Cut short by the call's deadline: the message names the deadline's whole length. */
    struct cma_call call = {.deadline_ms = cma_clock_mono_ms() + 300, .window_ms = 400};
    req.timeout_ms = 5000;
    req.call = &call;
    cma_err_clear(&err);
    assert_int_equal(cma_transport_perform(&t, &req, &res, &err), CMA_ERR_BACKEND_TIMEOUT);
    assert_string_equal(err.msg, "prometheus did not answer within 400ms");
    cma_transport_done(&t);
    cma_buf_done(&body);
    free(slow);
    cma_fake_http_stop(s);
}

/* What a test's struct cma_call and progress callback see. */
struct asked {
    int gone;      /* gone() questions */
    int progress;  /* calls of the caller's progress callback */
    bool left;     /* what gone() answers */
    bool leave_at; /* the first progress call sets left: the client goes mid-transfer */
};

static bool count_gone(const void *ctx)
{
    struct asked *a = (struct asked *)ctx;
    a->gone++;
    return a->left;
}

static int count_progress(void *ctx, curl_off_t dltotal, curl_off_t dlnow, curl_off_t ultotal,
                          curl_off_t ulnow)
{
    (void)dltotal, (void)dlnow, (void)ultotal, (void)ulnow;
    struct asked *a = ctx;
    a->progress++;
    if (a->leave_at)
        a->left = true;
    return 0;
}

/* gone() may cost a system call (the server polls the client's socket): while data flows, curl
 * calls the progress callback for every read, and the transport asks gone() at most every
 * CMA_GONE_CHECK_MS. A client that goes mid-transfer still ends a silent transfer early: as a
 * timeout, with nothing of the answer kept. */
static void test_cma_transport_perform__gone_asked_sparingly(void **state)
{
    (void)state;
    size_t len = (size_t)4 << 20;
    char *big = malloc(len);
    assert_non_null(big);
    memset(big, 'x', len);
    struct cma_fake_answer a[] = {
        {.path = "/big", .status = 200, .body = big, .body_len = len, .chunk = 1024},
        {.path = "/slow", .status = 200, .body = "{}", .delay_ms = 10000}};
    struct cma_fake_http *s = serve(a, 2);
    struct cma_transport t;
    struct seen seen = {0};
    transport_for(&t, &BACKEND, NULL, &seen);
    char *url = cma_fake_http_url(s, "/big");
    struct asked asked = {0};
    struct cma_call call = {.gone = count_gone, .gone_ctx = &asked};
    struct cma_buf body;
    cma_buf_init(&body, len);
    struct cma_http_request req = {.method = "GET",
                                   .url = url,
                                   .what = "/big",
                                   .where = "http://p",
                                   .timeout_ms = 30000,
                                   .gather = &body,
                                   .call = &call,
                                   .progress = count_progress,
                                   .progress_ctx = &asked};
    struct cma_http_result res;
    struct cma_err err;
    cma_err_clear(&err);
    int64_t t0 = cma_clock_mono_ms();
    assert_int_equal(cma_transport_perform(&t, &req, &res, &err), CMA_OK);
    int64_t took = cma_clock_mono_ms() - t0;
    assert_int_equal(body.len, len);
    /* once before the transfer, then at most once per CMA_GONE_CHECK_MS that passed */
    assert_true(asked.gone <= 2 + (int)(took / CMA_GONE_CHECK_MS));
    assert_true(asked.progress > asked.gone); /* curl called back more often than gone() ran */

    char *slow = cma_fake_http_url(s, "/slow");
    req.url = slow;
    req.what = "/slow";
    asked = (struct asked){.leave_at = true};
    cma_buf_clear(&body);
    cma_err_clear(&err);
    assert_int_equal(cma_transport_perform(&t, &req, &res, &err), CMA_ERR_BACKEND_TIMEOUT);
    assert_int_equal(res.curl, CURLE_ABORTED_BY_CALLBACK);
    assert_true(asked.gone >= 2); /* before the transfer ("there"), then during it ("gone") */
    assert_int_equal(body.len, 0);
    cma_transport_done(&t);
    cma_buf_done(&body);
    free(slow);
    free(url);
    free(big);
    cma_fake_http_stop(s);
}

/* CURLOPT_CONNECT_TO: the URL names one host, the connection goes to another (kube's
 * tls-server-name). */
static void test_cma_transport_perform__connect_to(void **state)
{
    (void)state;
    struct cma_fake_answer a[] = {{.status = 200, .body = "{}"}};
    struct cma_fake_http *s = serve(a, 1);
    struct cma_transport t;
    struct seen seen = {0};
    transport_for(&t, &KUBE, NULL, &seen);
    char entry[128], url[128];
    int port = cma_fake_http_port(s);
    snprintf(entry, sizeof(entry), "kube.invalid:%d:127.0.0.1:%d", port, port);
    snprintf(url, sizeof(url), "http://kube.invalid:%d/api", port);
    t.connect_to = curl_slist_append(NULL, entry);
    struct cma_buf body;
    cma_buf_init(&body, 1024);
    struct cma_http_request req = {.method = "GET",
                                   .url = url,
                                   .what = "GET /api",
                                   .where = url,
                                   .timeout_ms = 2000,
                                   .gather = &body};
    struct cma_http_result res;
    assert_int_equal(cma_transport_perform(&t, &req, &res, NULL), CMA_OK);
    assert_int_equal(res.status, 200);
    assert_non_null(strstr(cma_fake_http_request(s, 0)->head, "\r\nHost: kube.invalid:"));
    cma_buf_done(&body);
    cma_transport_done(&t);
    cma_fake_http_stop(s);
}

/* One GET of url with headers through t; returns the body (the caller frees it). */
static char *get_body(struct cma_transport *t, const char *url, struct curl_slist *headers)
{
    struct cma_buf body;
    cma_buf_init(&body, 1024);
    struct cma_http_request req = {.method = "GET",
                                   .url = url,
                                   .what = "/api/v1/query",
                                   .where = url,
                                   .headers = headers,
                                   .timeout_ms = 2000,
                                   .gather = &body};
    struct cma_http_result res;
    struct cma_err err;
    cma_err_clear(&err);
    if (cma_transport_perform(t, &req, &res, &err) != CMA_OK)
        fail_msg("cma_transport_perform: %s", err.msg);
    assert_int_equal(res.status, 200);
    char *s = strdup(cma_buf_str(&body));
    cma_buf_done(&body);
    return s;
}

/* Compression: Prometheus gzips every answer, which costs more than it saves on small ones, so
 * the "prometheus" client asks for no encoding; a caller's own Accept-Encoding line (a
 * --prometheus-header) is sent as given and the answer inflated; the kube client still asks for
 * every encoding curl decodes. */
static void test_cma_transport_perform__accept_encoding(void **state)
{
    (void)state;
    /* gzip of {"ok":true}; the fake writes Content-Type's value verbatim, so it carries
     * Content-Encoding too */
    static const char gz[] = "\x1f\x8b\x08\x00\x00\x00\x00\x00\x02\x03\xab\x56\xca\xcf\x56\xb2"
                             "\x2a\x29\x2a\x4d\xad\x05\x00\x90\x5f\xd4\xa7\x0b\x00\x00\x00";
    struct cma_fake_answer a[] = {{.path = "/plain", .status = 200, .body = "{\"ok\":true}"},
                                  {.path = "/gzip",
                                   .status = 200,
                                   .content_type = "application/json\r\nContent-Encoding: gzip",
                                   .body = gz,
                                   .body_len = sizeof(gz) - 1}};
    struct cma_fake_http *s = serve(a, 2);
    char *plain = cma_fake_http_url(s, "/plain");
    char *gzip = cma_fake_http_url(s, "/gzip");
    struct curl_slist *ask = curl_slist_append(NULL, "Accept: application/json");
    ask = curl_slist_append(ask, "accept-encoding: gzip");
    struct cma_err err;
    cma_err_clear(&err);
    struct cma_transport prom, kube;
    assert_int_equal(cma_transport_init(&prom, "prometheus", &BACKEND, 2000, &err), CMA_OK);
    assert_int_equal(cma_transport_init(&kube, "kube", &KUBE, 2000, &err), CMA_OK);
    kube.ask_compressed = true; /* as cma_kube_new sets it */
    struct cma_cred_spec none = {0};
    assert_int_equal(cma_creds_new(&none, &prom.creds, &err), CMA_OK);
    assert_int_equal(cma_creds_new(&none, &kube.creds, &err), CMA_OK);

    /* prometheus, nothing asked: no Accept-Encoding line */
    char *got = get_body(&prom, plain, NULL);
    assert_string_equal(got, "{\"ok\":true}");
    free(got);
    assert_null(strcasestr(cma_fake_http_request(s, 0)->head, "\r\nAccept-Encoding"));
    /* prometheus, the caller's line: sent once, as given, and the gzip answer inflated */
    got = get_body(&prom, gzip, ask);
    assert_string_equal(got, "{\"ok\":true}");
    free(got);
    const char *head = cma_fake_http_request(s, 1)->head;
    assert_true(cma_fake_http_has_header(s, 1, "Accept-Encoding: gzip"));
    assert_ptr_equal(strcasestr(head, "\r\nAccept-Encoding"), strstr(head, "\r\naccept-encoding"));
    assert_null(strcasestr(strcasestr(head, "\r\nAccept-Encoding") + 2, "\r\nAccept-Encoding"));
    /* the Kubernetes API: every encoding curl decodes, as before */
    got = get_body(&kube, gzip, NULL);
    assert_string_equal(got, "{\"ok\":true}");
    free(got);
    const char *ae = strcasestr(cma_fake_http_request(s, 2)->head, "\r\nAccept-Encoding: ");
    assert_non_null(ae);
    char line[256];
    snprintf(line, sizeof(line), "%.*s", (int)strcspn(ae + 2, "\r"), ae + 2);
    assert_non_null(strstr(line, "gzip"));

    cma_transport_done(&prom);
    cma_transport_done(&kube);
    curl_slist_free_all(ask);
    free(plain);
    free(gzip);
    cma_fake_http_stop(s);
}

/* One mapping, two tables: which status is "unavailable", "not found" or an error. */
static void test_cma_transport_status_code__tables(void **state)
{
    (void)state;
    static const struct {
        long status;
        enum cma_errc backend, kube;
    } cases[] = {
        {400, CMA_ERR_BACKEND_ERROR, CMA_ERR_KUBE_ERROR},
        {401, CMA_ERR_BACKEND_ERROR, CMA_ERR_KUBE_ERROR},
        {404, CMA_ERR_BACKEND_ERROR, CMA_ERR_NOT_FOUND},
        {410, CMA_ERR_BACKEND_ERROR, CMA_ERR_KUBE_ERROR},
        {429, CMA_ERR_BACKEND_ERROR, CMA_ERR_KUBE_UNAVAILABLE},
        {500, CMA_ERR_BACKEND_ERROR, CMA_ERR_KUBE_UNAVAILABLE},
        {502, CMA_ERR_BACKEND_UNAVAILABLE, CMA_ERR_KUBE_UNAVAILABLE},
        {503, CMA_ERR_BACKEND_UNAVAILABLE, CMA_ERR_KUBE_UNAVAILABLE},
        {504, CMA_ERR_BACKEND_UNAVAILABLE, CMA_ERR_KUBE_UNAVAILABLE},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        assert_int_equal(cma_transport_status_code(&BACKEND, cases[i].status), cases[i].backend);
        assert_int_equal(cma_transport_status_code(&KUBE, cases[i].status), cases[i].kube);
    }
}

static void test_cma_transport_status_error__messages(void **state)
{
    (void)state;
    struct cma_err err;
    cma_err_clear(&err);
    assert_int_equal(
        cma_transport_status_error(&BACKEND, 401, NULL, "/api/v1/query", "Unauthorized", &err),
        CMA_ERR_BACKEND_ERROR);
    assert_string_equal(err.msg, "prometheus answered HTTP 401 for /api/v1/query (check "
                                 "credentials): Unauthorized");
    cma_err_clear(&err);
    assert_int_equal(
        cma_transport_status_error(&BACKEND, 502, "Bad Gateway", "/api/v1/series", "", &err),
        CMA_ERR_BACKEND_UNAVAILABLE);
    assert_string_equal(err.msg, "prometheus answered HTTP 502 Bad Gateway for /api/v1/series");
    cma_err_clear(&err);
    assert_int_equal(
        cma_transport_status_error(&KUBE, 403, "", "GET /api/v1/pods", "forbidden", &err),
        CMA_ERR_KUBE_ERROR);
    assert_string_equal(err.msg, "the Kubernetes API answered HTTP 403 for GET /api/v1/pods: "
                                 "forbidden");
}

static void test_cma_transport_curl_error__classes(void **state)
{
    (void)state;
    struct cma_err err;
    cma_err_clear(&err);
    assert_int_equal(cma_transport_curl_error(&BACKEND, CURLE_WEIRD_SERVER_REPLY, "", "/q",
                                              "http://p/q", 1000, &err),
                     CMA_ERR_BACKEND_RESPONSE);
    assert_string_equal(err.msg, "bad answer from prometheus at http://p/q: Weird server reply");
    cma_err_clear(&err);
    assert_int_equal(cma_transport_curl_error(&BACKEND, CURLE_FAILED_INIT, "init", "/q",
                                              "http://p/q", 1000, &err),
                     CMA_ERR_BACKEND_ERROR);
    assert_string_equal(err.msg, "request to prometheus at http://p/q failed: init");
    cma_err_clear(&err);
    assert_int_equal(cma_transport_curl_error(&KUBE, CURLE_COULDNT_CONNECT, "refused", "GET /api",
                                              "https://k", 1000, &err),
                     CMA_ERR_KUBE_UNAVAILABLE);
    assert_string_equal(err.msg, "cannot reach the Kubernetes API at https://k: refused");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cma_transport_perform__get_gathers_and_reports),
        cmocka_unit_test(test_cma_transport_perform__post_body_and_status),
        cmocka_unit_test(test_cma_transport_perform__gathered_body_over_ceiling),
        cmocka_unit_test(test_cma_transport_perform__write_callback_streams_and_stops),
        cmocka_unit_test(test_cma_transport_perform__unreachable_and_timeouts),
        cmocka_unit_test(test_cma_transport_perform__gone_asked_sparingly),
        cmocka_unit_test(test_cma_transport_perform__connect_to),
        cmocka_unit_test(test_cma_transport_perform__accept_encoding),
        cmocka_unit_test(test_cma_transport_status_code__tables),
        cmocka_unit_test(test_cma_transport_status_error__messages),
        cmocka_unit_test(test_cma_transport_curl_error__classes),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
