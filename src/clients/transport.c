/* transport.c: the one HTTP transport of the clients stage. prom.c and kube.c describe a request
 * (method, URL, headers, body, deadline, where the body goes) and this file performs it: a
 * handle from the client's curl pool (or one of its own for a long watch), the current
 * credentials (credentials.c: files that changed are read again first; the snapshot is held
 * until the transfer ends, since its Authorization line is one list node on this stack in front
 * of the client's shared headers), TLS material, timeouts and CURLOPT_CONNECT_TO; then it maps
 * what went wrong to a cma_err code with one mapping for both clients, parameterised by a table
 * per client (struct cma_transport_errors: BACKEND_* codes and "prometheus" for one, KUBE_* and
 * "the Kubernetes API" for the other), and reports the request to the client's notifier
 * (method, URL without credentials, status or curl's error, duration, bytes).
 *
 * DESIGN: nothing here logs or keeps state between requests; a struct cma_transport is read-only
 * once its client has set it up, so any number of threads perform through it at once. Bodies
 * stream: the caller's write callback sees each chunk as curl hands it over (prom's decoders,
 * kube's watch lines); only when the caller gives no callback is the body gathered into a
 * buffer with the caller's ceiling.
 *
 * A request's deadline and cancellation (struct cma_call, backend.h): a transfer serving a
 * request gets at most the time left before that request's deadline (none left: the timeout
 * error at once, nothing sent), and curl's progress callback, which curl calls about once a
 * second while the peer is silent and on every chunk while data flows, aborts it once the
 * request's client has gone; either ends as errors->timeout, so a query never outlives its
 * request. gone() costs a system call (the server polls the client's socket), so the callback
 * asks it at most every CMA_GONE_CHECK_MS: a 10-pod answer made curl call it about ten times,
 * a large answer once per chunk, and a client that left is still noticed within a second.
 *
 * Compression (see accept_encoding): Prometheus is asked for none unless the caller's headers
 * ask (--prometheus-header or a backend's headers: Accept-Encoding=gzip), since it gzips every
 * answer, however small, and compressing plus inflating cost more than the bytes saved on
 * loopback or a cluster network (docs/configuration.md, "Compression"); the Kubernetes API is
 * asked for every encoding curl decodes, as before (kube-apiserver compresses only large
 * answers). */
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "cma/backend.h"
#include "cma/clock.h"
#include "cma/str.h"
#include "internal.h"

enum cma_errc cma_transport_init(struct cma_transport *t, const char *client,
                                 const struct cma_transport_errors *errors,
                                 int64_t connect_timeout_ms, struct cma_err *reterr)
{
    memset(t, 0, sizeof(*t));
    t->client = client;
    t->errors = errors;
    t->connect_timeout_ms = connect_timeout_ms;
    return cma_curl_pool_new(CMA_CURL_POOL_MAX_IDLE, &t->pool, reterr);
}

void cma_transport_done(struct cma_transport *t)
{
    if (!t)
        return;
    curl_slist_free_all(t->connect_to);
    cma_creds_free(t->creds);
    cma_curl_pool_free(t->pool);
    memset(t, 0, sizeof(*t));
}

/* ---- error mapping ----------------------------------------------------------------------- */

enum cma_errc cma_transport_status_code(const struct cma_transport_errors *e, long status)
{
    if (status == 404)
        return e->status_not_found;
    if (status == 502 || status == 503 || status == 504)
        return e->status_unavailable;
    if (e->busy_5xx_429 && (status >= 500 || status == 429))
        return e->status_unavailable;
    return e->status_error;
}

enum cma_errc cma_transport_status_error(const struct cma_transport_errors *e, long status,
                                         const char *reason, const char *what, const char *detail,
                                         struct cma_err *reterr)
{
    const char *hint = "";
    if (e->credentials_hint && (status == 401 || status == 403))
        hint = " (check credentials)";
    bool has_detail = detail && detail[0], has_reason = reason && reason[0];
    return cma_err_set(reterr, cma_transport_status_code(e, status),
                       "%s answered HTTP %ld%s%s for %s%s%s%s", e->peer, status,
                       has_reason ? " " : "", has_reason ? reason : "", what, hint,
                       has_detail ? ": " : "", has_detail ? detail : "");
}

enum cma_errc cma_transport_curl_error(const struct cma_transport_errors *e, CURLcode crc,
                                       const char *why, const char *what, const char *where,
                                       int64_t timeout_ms, struct cma_err *reterr)
{
    if (!why || !why[0])
        why = curl_easy_strerror(crc);
    char took[32];
    switch (cma_clients_curl_class(crc)) {
    case CMA_CURL_TIMEOUT:
        return cma_err_set(reterr, e->timeout, "%s did not answer%s%s within %s", e->peer,
                           e->timeout_names_request ? " " : "",
                           e->timeout_names_request ? what : "",
                           cma_duration_format(timeout_ms, took, sizeof(took)));
    case CMA_CURL_UNREACHABLE:
        return cma_err_set(reterr, e->unreachable, "cannot reach %s at %s: %s", e->peer, where,
                           why);
    case CMA_CURL_BAD_REPLY:
        return cma_err_set(reterr, e->bad_reply, "bad answer from %s at %s: %s", e->peer, where,
                           why);
    default:
        return cma_err_set(reterr, e->other, "request to %s at %s failed: %s", e->peer, where, why);
    }
}

/* ---- one transfer ------------------------------------------------------------------------ */

/* The gathering write callback (req->write NULL). */
struct gather {
    struct cma_buf *body;
    bool over;
};

static size_t gather_write(char *data, size_t size, size_t nmemb, void *ctx)
{
    struct gather *g = ctx;
    size_t len = size * nmemb;
    if (cma_buf_append(g->body, data, len) == CMA_OK)
        return len;
    g->over = true;
    return 0;
}

#define SETOPT(h, opt, val)                                                                        \
    do {                                                                                           \
        CURLcode setopt_rc_ = curl_easy_setopt(h, opt, val);                                       \
        if (setopt_rc_ != CURLE_OK)                                                                \
            return setopt_failed(reterr, #opt, setopt_rc_);                                        \
    } while (0)

static enum cma_errc setopt_failed(struct cma_err *reterr, const char *opt, CURLcode rc)
{
    return cma_err_set(reterr, rc == CURLE_OUT_OF_MEMORY ? CMA_ERR_NOMEM : CMA_ERR_INTERNAL,
                       "curl option %s: %s", opt, curl_easy_strerror(rc));
}

/* What one transfer holds while it runs. */
struct transfer {
    CURL *h;
    struct cma_cred_snap *cred;
    struct curl_slist auth_node; /* Authorization in front of the request's headers */
    struct gather gather;
    char errbuf[CURL_ERROR_SIZE];
    int64_t timeout_ms; /* req's, bounded by its call's deadline */
    int64_t shown_ms;   /* the limit a timeout message names (see said_limit) */
    const struct cma_call *call;
    curl_xferinfo_callback progress; /* the caller's, called after the call's check */
    void *progress_ctx;
    int64_t gone_check_ms; /* monotonic: call_progress asks gone() again from then on */
    bool gone;             /* aborted: the call's client has gone */
    char reason[64];       /* the last status line's reason phrase (see header_line) */
};

/* Header callback: keeps the reason phrase of each status line ("HTTP/1.1 502 Bad Gateway"), so
 * an error names the peer's own words; the last one wins (after a 100 Continue or a redirect).
 * Printable ASCII only, cut to the buffer; every other header line is passed over. */
static size_t header_line(char *data, size_t size, size_t nmemb, void *ctx)
{
    struct transfer *x = ctx;
    size_t len = size * nmemb;
    if (len < 12 || memcmp(data, "HTTP/", 5) != 0)
        return len;
    const char *sp = memchr(data, ' ', len);
    const char *reason = sp ? memchr(sp + 1, ' ', len - (size_t)(sp + 1 - data)) : NULL;
    size_t n = 0;
    for (size_t i = reason ? (size_t)(reason + 1 - data) : len; i < len; i++) {
        unsigned char c = (unsigned char)data[i];
        if (c < 0x20 || c > 0x7e || n + 1 >= sizeof(x->reason))
            break;
        x->reason[n++] = (char)c;
    }
    while (n > 0 && x->reason[n - 1] == ' ')
        n--;
    x->reason[n] = '\0';
    return len;
}

/* Progress callback of a transfer that serves a request: non-zero (abort) once its client has
 * gone, else the caller's own callback decides. */
static int call_progress(void *ctx, curl_off_t dltotal, curl_off_t dlnow, curl_off_t ultotal,
                         curl_off_t ulnow)
{
    struct transfer *x = ctx;
    int64_t now = cma_clock_mono_ms();
    if (now >= x->gone_check_ms) {
        x->gone_check_ms = now + CMA_GONE_CHECK_MS;
        if (cma_call_gone(x->call)) {
            x->gone = true;
            return 1;
        }
    }
    return x->progress ? x->progress(x->progress_ctx, dltotal, dlnow, ultotal, ulnow) : 0;
}

static struct curl_slist *headers_of(struct transfer *x, const struct cma_http_request *req)
{
    if (!x->cred->authorization)
        return req->headers;
    x->auth_node.data = x->cred->authorization;
    x->auth_node.next = req->headers;
    return &x->auth_node;
}

/* Does this header line name Accept-Encoding ("Accept-Encoding: gzip", or "Accept-Encoding;",
 * curl's form of an empty value)? */
static bool is_accept_encoding(const char *line)
{
    static const char name[] = "Accept-Encoding";
    size_t n = sizeof(name) - 1;
    return strncasecmp(line, name, n) == 0 && (line[n] == ':' || line[n] == ';');
}

/* CURLOPT_ACCEPT_ENCODING for req: "" (every encoding curl decodes, and curl decodes the answer)
 * when the caller's headers carry an Accept-Encoding line (curl then sends that line instead of
 * its own) or the client asks for compressed answers (t->ask_compressed); NULL (nothing asked,
 * nothing decoded) otherwise (see DESIGN). */
static const char *accept_encoding(const struct cma_transport *t,
                                   const struct cma_http_request *req)
{
    for (const struct curl_slist *l = req->headers; l; l = l->next)
        if (l->data && is_accept_encoding(l->data))
            return "";
    return t->ask_compressed ? "" : NULL;
}

static enum cma_errc set_body(CURL *h, const struct cma_http_request *req, struct cma_err *reterr)
{
    bool post = strcmp(req->method, "POST") == 0;
    if (!post && strcmp(req->method, "PUT") != 0 && strcmp(req->method, "PATCH") != 0) {
        SETOPT(h, CURLOPT_HTTPGET, 1L);
        return CMA_OK;
    }
    SETOPT(h, CURLOPT_POST, 1L);
    SETOPT(h, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)req->body_len);
    SETOPT(h, CURLOPT_POSTFIELDS, req->body ? req->body : "");
    if (!post) /* a body sent as POST sends it, under this method (the pool resets it) */
        SETOPT(h, CURLOPT_CUSTOMREQUEST, req->method);
    return CMA_OK;
}

static enum cma_errc set_sinks(const struct cma_transport *t, struct transfer *x,
                               const struct cma_http_request *req, struct cma_err *reterr)
{
    CURL *h = x->h;
    if (req->write) {
        SETOPT(h, CURLOPT_WRITEFUNCTION, req->write);
        SETOPT(h, CURLOPT_WRITEDATA, req->write_ctx);
    } else {
        x->gather.body = req->gather;
        SETOPT(h, CURLOPT_WRITEFUNCTION, gather_write);
        SETOPT(h, CURLOPT_WRITEDATA, &x->gather);
    }
    if (req->call) {
        x->progress = req->progress;
        x->progress_ctx = req->progress_ctx;
        SETOPT(h, CURLOPT_XFERINFOFUNCTION, call_progress);
        SETOPT(h, CURLOPT_XFERINFODATA, x);
        SETOPT(h, CURLOPT_NOPROGRESS, 0L);
    } else if (req->progress) {
        SETOPT(h, CURLOPT_XFERINFOFUNCTION, req->progress);
        SETOPT(h, CURLOPT_XFERINFODATA, req->progress_ctx);
        SETOPT(h, CURLOPT_NOPROGRESS, 0L);
    }
    if (t->connect_to)
        SETOPT(h, CURLOPT_CONNECT_TO, t->connect_to);
    return cma_cred_snap_setopt(x->cred, h, reterr);
}

static enum cma_errc configure(const struct cma_transport *t, struct transfer *x,
                               const struct cma_http_request *req, struct cma_err *reterr)
{
    CURL *h = x->h;
    SETOPT(h, CURLOPT_URL, req->url);
    SETOPT(h, CURLOPT_PROTOCOLS_STR, "http,https");
    SETOPT(h, CURLOPT_NOSIGNAL, 1L);
    SETOPT(h, CURLOPT_TIMEOUT_MS, (long)x->timeout_ms);
    SETOPT(h, CURLOPT_CONNECTTIMEOUT_MS, (long)t->connect_timeout_ms);
    SETOPT(h, CURLOPT_ACCEPT_ENCODING, accept_encoding(t, req));
    SETOPT(h, CURLOPT_TCP_KEEPALIVE, 1L);
    SETOPT(h, CURLOPT_TCP_NODELAY, 1L);
    SETOPT(h, CURLOPT_USERAGENT, "custom-metrics-adapter/" CMA_VERSION);
    SETOPT(h, CURLOPT_ERRORBUFFER, x->errbuf);
    SETOPT(h, CURLOPT_HTTPHEADER, headers_of(x, req));
    SETOPT(h, CURLOPT_HEADERFUNCTION, header_line);
    SETOPT(h, CURLOPT_HEADERDATA, x);
    enum cma_errc rc = set_body(h, req, reterr);
    return rc == CMA_OK ? set_sinks(t, x, req, reterr) : rc;
}

/* The current credentials; a refused rotation goes to the notifier, once. */
static struct cma_cred_snap *take_creds(const struct cma_transport *t)
{
    struct cma_err warning;
    cma_err_clear(&warning);
    struct cma_cred_snap *cred = cma_creds_take(t->creds, &warning);
    if (warning.code != CMA_OK && t->notifier.on_credentials)
        t->notifier.on_credentials(t->notifier.ctx, &warning);
    return cred;
}

static void report(const struct cma_transport *t, const struct cma_http_request *req,
                   const struct cma_http_result *res)
{
    if (!t->notifier.on_request)
        return;
    struct cma_http_report r = {
        .client = t->client,
        .method = req->method,
        .url = req->public_url ? req->public_url : req->url,
        .what = req->what,
        .status = res->status,
        .error = res->curl == CURLE_OK ? NULL : res->error,
        .duration_ms = res->duration_ms,
        .bytes = res->bytes,
        .long_get_bytes = req->long_get_bytes,
        .max_get_bytes = req->max_get_bytes,
    };
    t->notifier.on_request(t->notifier.ctx, &r);
}

static void run(struct transfer *x, struct cma_http_result *res)
{
    int64_t started = cma_clock_mono_ms();
    res->curl = curl_easy_perform(x->h);
    res->duration_ms = cma_clock_mono_ms() - started;
    curl_easy_getinfo(x->h, CURLINFO_RESPONSE_CODE, &res->status);
    memcpy(res->reason, x->reason, sizeof(res->reason));
    curl_off_t got = 0;
    if (curl_easy_getinfo(x->h, CURLINFO_SIZE_DOWNLOAD_T, &got) == CURLE_OK && got > 0)
        res->bytes = (uint64_t)got;
    if (res->curl != CURLE_OK)
        snprintf(res->error, sizeof(res->error), "%s",
                 x->errbuf[0] ? x->errbuf : curl_easy_strerror(res->curl));
}

static enum cma_errc outcome(const struct cma_transport *t, const struct cma_http_request *req,
                             const struct transfer *x, const struct cma_http_result *res,
                             struct cma_err *reterr)
{
    if (res->curl == CURLE_OK)
        return CMA_OK;
    if (res->curl == CURLE_ABORTED_BY_CALLBACK && x->gone)
        return cma_err_set(
            reterr, t->errors->timeout,
            "%s request %s abandoned after %lld ms: the client of the request closed "
            "its connection",
            t->errors->peer, req->what, (long long)res->duration_ms);
    if (res->curl == CURLE_WRITE_ERROR && !req->write && x->gather.over)
        return cma_err_set(reterr, t->errors->too_large, "answer of %s to %s is over %zu bytes",
                           t->errors->peer, req->what, req->gather->max);
    return cma_transport_curl_error(t->errors, res->curl, res->error, req->what, req->where,
                                    x->shown_ms, reterr);
}

/* A request whose deadline has passed, or whose client has gone, before its transfer starts. */
static enum cma_errc too_late(const struct cma_transport *t, const struct cma_http_request *req,
                              bool late, struct cma_err *reterr)
{
    if (late)
        return cma_err_set(reterr, t->errors->timeout,
                           "%s request %s not sent: the request's deadline has passed",
                           t->errors->peer, req->what);
    return cma_err_set(reterr, t->errors->timeout,
                       "%s request %s not sent: the client of the request closed its connection",
                       t->errors->peer, req->what);
}

static void give_back(const struct cma_transport *t, const struct cma_http_request *req, CURL *h)
{
    if (req->dedicated)
        curl_easy_cleanup(h);
    else
        cma_curl_pool_give(t->pool, h);
}

/* The limit a timeout message names: the request's own timeout, or, when the call's deadline
 * cut the transfer short, the whole length of that deadline (a --prometheus-timeout of 3s that
 * also bounded the wait for a query slot reads "within 3s", not "within 2.999s"). */
static int64_t said_limit(const struct cma_http_request *req, int64_t budget_ms)
{
    if (budget_ms < req->timeout_ms && req->call && req->call->window_ms > 0)
        return req->call->window_ms;
    return budget_ms;
}

enum cma_errc cma_transport_perform(struct cma_transport *t, const struct cma_http_request *req,
                                    struct cma_http_result *res, struct cma_err *reterr)
{
    memset(res, 0, sizeof(*res));
    if (!req->write && !req->gather)
        return cma_err_set(reterr, CMA_ERR_INTERNAL, "a request needs a body sink");
    int64_t now = cma_clock_mono_ms();
    int64_t timeout_ms = cma_call_budget_ms(req->call, req->timeout_ms, now);
    if (timeout_ms <= 0 || cma_call_gone(req->call))
        return too_late(t, req, timeout_ms <= 0, reterr);
    if (req->call && req->call->on_send)
        req->call->on_send(req->call->on_send_ctx);
    struct transfer x = {.h = req->dedicated ? curl_easy_init() : cma_curl_pool_take(t->pool),
                         .timeout_ms = timeout_ms,
                         .shown_ms = said_limit(req, timeout_ms),
                         .call = req->call,
                         .gone_check_ms = now + CMA_GONE_CHECK_MS};
    if (!x.h)
        return cma_err_set(reterr, CMA_ERR_NOMEM, "out of memory (curl handle)");
    x.cred = take_creds(t);
    enum cma_errc rc = configure(t, &x, req, reterr);
    if (rc == CMA_OK) {
        if (req->handle)
            *req->handle = x.h;
        run(&x, res);
        report(t, req, res);
        rc = outcome(t, req, &x, res, reterr);
    }
    give_back(t, req, x.h);
    cma_cred_snap_release(x.cred);
    return rc;
}
