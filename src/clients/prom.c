/* prom.c: one Prometheus-compatible backend over libcurl: instant queries (streamed through
 * query_stream.c, which keeps only the series the caller needs) and series listings (streamed
 * through series_stream.c). Nothing buffers a whole answer.
 *
 * DESIGN: everything derived from the flags is computed once in cma_prom_new() and read-only
 * afterwards, so any number of threads may call query/series at once: the base URL split into
 * origin (with and without credentials), cleaned path prefix and base query string; two header
 * lists (GET, and POST with the form content type and an empty Expect:) shared read-only by all
 * handles; the bearer token read and trimmed. Each request takes an easy handle from the pool,
 * configures it from scratch, performs, and gives it back (connections stay cached). The one
 * mutable member is the byte budget (atomics) that query decoders charge what they keep to.
 * Ceilings on a query answer, checked as early as they can be: Content-Length over
 * max_response_bytes before the first byte is decoded; the streamed bytes as they arrive; the
 * kept series against the budget as each one is kept (query_stream.c).
 * Error mapping, in this order: our write callback stopped the transfer (body over the ceiling,
 * bad JSON, over the budget, caller stop) → that error; curl timeouts → BACKEND_TIMEOUT;
 * connect/DNS/TLS/send/recv failures → BACKEND_UNAVAILABLE; then HTTP: 2xx, 400, 422 and 503
 * carry Prometheus JSON whose status:error gives "<errorType>: <error>"; any other status (or one
 * of those with a body that is not a Prometheus error) → "prometheus answered HTTP N for <path>:
 * <body start>", BACKEND_UNAVAILABLE for 502/503/504, BACKEND_ERROR otherwise (401/403 say "check
 * credentials"). Log lines (--v>=6 only) never carry credentials. */
#include "cma/prom.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cma/buf.h"
#include "cma/clock.h"
#include "cma/log.h"
#include "cma/str.h"
#include "internal.h"

#define DEFAULT_TIMEOUT_MS 10000
#define DEFAULT_CONNECT_TIMEOUT_MS 3000
#define DEFAULT_MAX_GET_URL ((size_t)8 << 10)
#define TOKEN_FILE_MAX ((size_t)64 << 10)
#define SNIPPET_BYTES 200
#define LOG_BODY_BYTES 4096

struct cma_prom {
    char *url;           /* as given */
    char *origin;        /* scheme://[user[:password]@]host[:port] */
    char *origin_public; /* the same without credentials, for logs and errors */
    char *prefix;        /* cleaned path prefix: "" or "/prometheus" */
    char *base_query;    /* NULL or the base URL's query string, kept encoded */
    bool use_post;
    struct curl_slist *get_headers;
    struct curl_slist *post_headers;
    char *basic_username;
    char *basic_password;
    char *ca_file;
    char *client_cert_file;
    char *client_key_file;
    bool insecure_skip_verify;
    int64_t timeout_ms;
    int64_t series_timeout_ms;
    int64_t connect_timeout_ms;
    size_t max_response_bytes;
    size_t max_get_url_bytes;
    struct cma_curl_pool *pool;
    struct cma_prom_budget budget; /* shared by every query in flight */
};

void cma_prom_free(struct cma_prom *p)
{
    if (!p)
        return;
    free(p->url);
    free(p->origin);
    free(p->origin_public);
    free(p->prefix);
    free(p->base_query);
    curl_slist_free_all(p->get_headers);
    curl_slist_free_all(p->post_headers);
    free(p->basic_username);
    free(p->basic_password);
    free(p->ca_file);
    free(p->client_cert_file);
    free(p->client_key_file);
    cma_curl_pool_free(p->pool);
    free(p);
}

const char *cma_prom_url(const struct cma_prom *p)
{
    return p ? p->url : NULL;
}

const struct cma_prom_budget *cma_prom_budget(const struct cma_prom *p)
{
    return p ? &p->budget : NULL;
}

/* Go's path.Clean of the prefix, without a trailing slash: "/a//b/./c/../" → "/a/b". */
static enum cma_errc clean_prefix(const char *path, char **ret)
{
    struct cma_buf b;
    cma_buf_init(&b, strlen(path) + 2);
    const char *s = path;
    while (*s) {
        while (*s == '/')
            s++;
        const char *end = strchr(s, '/');
        size_t len = end ? (size_t)(end - s) : strlen(s);
        if (len == 0)
            break;
        enum cma_errc rc = CMA_OK;
        if (len == 1 && s[0] == '.') {
            /* nothing */
        } else if (len == 2 && s[0] == '.' && s[1] == '.') {
            char *slash = b.ptr ? strrchr(b.ptr, '/') : NULL;
            if (slash) {
                b.len = (size_t)(slash - b.ptr);
                *slash = '\0';
            }
        } else {
            rc = cma_buf_appendc(&b, '/');
            if (rc == CMA_OK)
                rc = cma_buf_append(&b, s, len);
        }
        if (rc != CMA_OK)
            return rc;
        s += len;
    }
    *ret = cma_buf_take(&b);
    return *ret ? CMA_OK : CMA_ERR_NOMEM;
}

/* Fetches one part of a parsed URL; *ret NULL when the part is absent. */
static enum cma_errc url_part(CURLU *u, CURLUPart part, char **ret)
{
    char *s = NULL;
    CURLUcode uc = curl_url_get(u, part, &s, 0);
    *ret = NULL;
    if (uc == CURLUE_OUT_OF_MEMORY)
        return CMA_ERR_NOMEM;
    if (uc != CURLUE_OK || !s)
        return CMA_OK;
    *ret = cma_strdup(s);
    curl_free(s);
    return *ret ? CMA_OK : CMA_ERR_NOMEM;
}

struct url_parts {
    char *scheme, *user, *password, *host, *port, *path, *query;
};

static void url_parts_done(struct url_parts *u)
{
    free(u->scheme);
    free(u->user);
    free(u->password);
    free(u->host);
    free(u->port);
    free(u->path);
    free(u->query);
}

static enum cma_errc split_url(struct cma_prom *p, const char *url, struct cma_err *reterr)
{
    CURLU *u = curl_url();
    if (!u)
        return cma_err_set(reterr, CMA_ERR_NOMEM, "out of memory");
    CURLUcode uc = curl_url_set(u, CURLUPART_URL, url, 0);
    if (uc != CURLUE_OK) {
        curl_url_cleanup(u);
        return cma_err_set(reterr, uc == CURLUE_OUT_OF_MEMORY ? CMA_ERR_NOMEM : CMA_ERR_FLAG,
                           "invalid --prometheus-url \"%s\": %s", url, curl_url_strerror(uc));
    }
    struct url_parts parts = {0};
    enum cma_errc rc = url_part(u, CURLUPART_SCHEME, &parts.scheme);
    if (rc == CMA_OK)
        rc = url_part(u, CURLUPART_USER, &parts.user);
    if (rc == CMA_OK)
        rc = url_part(u, CURLUPART_PASSWORD, &parts.password);
    if (rc == CMA_OK)
        rc = url_part(u, CURLUPART_HOST, &parts.host);
    if (rc == CMA_OK)
        rc = url_part(u, CURLUPART_PORT, &parts.port);
    if (rc == CMA_OK)
        rc = url_part(u, CURLUPART_PATH, &parts.path);
    if (rc == CMA_OK)
        rc = url_part(u, CURLUPART_QUERY, &parts.query);
    curl_url_cleanup(u);
    if (rc != CMA_OK) {
        url_parts_done(&parts);
        return cma_err_set(reterr, rc, "out of memory");
    }
    if (!parts.scheme || !parts.host ||
        (strcmp(parts.scheme, "http") != 0 && strcmp(parts.scheme, "https") != 0)) {
        url_parts_done(&parts);
        return cma_err_set(reterr, CMA_ERR_FLAG,
                           "invalid --prometheus-url \"%s\": want http:// or https://", url);
    }
    struct cma_buf pub, full;
    cma_buf_init(&pub, 0);
    cma_buf_init(&full, 0);
    rc = cma_buf_printf(&pub, "%s://%s%s%s", parts.scheme, parts.host, parts.port ? ":" : "",
                        parts.port ? parts.port : "");
    if (rc == CMA_OK)
        rc =
            cma_buf_printf(&full, "%s://%s%s%s%s%s%s%s", parts.scheme, parts.user ? parts.user : "",
                           parts.password ? ":" : "", parts.password ? parts.password : "",
                           parts.user || parts.password ? "@" : "", parts.host,
                           parts.port ? ":" : "", parts.port ? parts.port : "");
    if (rc == CMA_OK)
        rc = clean_prefix(parts.path ? parts.path : "", &p->prefix);
    if (rc == CMA_OK) {
        p->origin_public = cma_buf_take(&pub);
        p->origin = cma_buf_take(&full);
        if (parts.query && parts.query[0]) {
            p->base_query = parts.query;
            parts.query = NULL;
        }
        if (!p->origin_public || !p->origin)
            rc = CMA_ERR_NOMEM;
    }
    cma_buf_done(&pub);
    cma_buf_done(&full);
    url_parts_done(&parts);
    if (rc != CMA_OK)
        return cma_err_set(reterr, rc, "out of memory");
    return CMA_OK;
}

static bool is_token_char(unsigned char c)
{
    return c > 0x20 && c < 0x7f && !strchr("()<>@,;:\\\"/[]?={}", c);
}

static enum cma_errc add_header(struct curl_slist **list, const char *line, struct cma_err *reterr)
{
    struct curl_slist *l = curl_slist_append(*list, line);
    if (!l)
        return cma_err_set(reterr, CMA_ERR_NOMEM, "out of memory");
    *list = l;
    return CMA_OK;
}

/* "Key=Value" → "Key: Value" ("Key;" for an empty value, which is how curl sends one). */
static enum cma_errc add_user_header(struct cma_prom *p, const char *kv, struct cma_err *reterr)
{
    const char *eq = strchr(kv, '=');
    size_t key_len = eq ? (size_t)(eq - kv) : strlen(kv);
    const char *value = eq ? eq + 1 : "";
    if (key_len == 0)
        return cma_err_set(reterr, CMA_ERR_FLAG,
                           "--prometheus-header \"%s\": want key=value with a non-empty key", kv);
    for (size_t i = 0; i < key_len; i++)
        if (!is_token_char((unsigned char)kv[i]))
            return cma_err_set(reterr, CMA_ERR_FLAG,
                               "--prometheus-header \"%s\": the key is not a valid header name",
                               kv);
    if (strpbrk(value, "\r\n"))
        return cma_err_set(reterr, CMA_ERR_FLAG,
                           "--prometheus-header \"%.*s=...\": the value has a line break",
                           (int)key_len, kv);
    struct cma_buf line;
    cma_buf_init(&line, 0);
    enum cma_errc rc = value[0] ? cma_buf_printf(&line, "%.*s: %s", (int)key_len, kv, value)
                                : cma_buf_printf(&line, "%.*s;", (int)key_len, kv);
    if (rc == CMA_OK)
        rc = add_header(&p->get_headers, cma_buf_str(&line), reterr);
    if (rc == CMA_OK)
        rc = add_header(&p->post_headers, cma_buf_str(&line), reterr);
    cma_buf_done(&line);
    if (rc == CMA_ERR_NOMEM)
        return cma_err_set(reterr, rc, "out of memory");
    return rc;
}

static enum cma_errc read_token(struct cma_prom *p, const char *path, struct cma_err *reterr)
{
    char *token = NULL;
    enum cma_errc rc = cma_clients_read_file(path, TOKEN_FILE_MAX, &token, NULL, reterr);
    if (rc != CMA_OK) {
        cma_err_prefix(reterr, "--prometheus-token-file: ");
        return rc;
    }
    cma_clients_trim(token);
    if (!token[0] || strpbrk(token, "\r\n")) {
        free(token);
        return cma_err_set(reterr, CMA_ERR_IO,
                           "--prometheus-token-file %s: want one non-empty line", path);
    }
    struct cma_buf line;
    cma_buf_init(&line, 0);
    rc = cma_buf_printf(&line, "Authorization: Bearer %s", token);
    free(token);
    if (rc == CMA_OK)
        rc = add_header(&p->get_headers, cma_buf_str(&line), reterr);
    if (rc == CMA_OK)
        rc = add_header(&p->post_headers, cma_buf_str(&line), reterr);
    cma_buf_done(&line);
    if (rc == CMA_ERR_NOMEM)
        return cma_err_set(reterr, rc, "out of memory");
    return rc;
}

static enum cma_errc check_readable(const char *what, const char *path, struct cma_err *reterr)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return cma_err_set(reterr, CMA_ERR_IO, "%s %s cannot be read", what, path);
    fclose(f);
    return CMA_OK;
}

static enum cma_errc copy_opt(const char *src, char **dst)
{
    if (!src)
        return CMA_OK;
    *dst = cma_strdup(src);
    return *dst ? CMA_OK : CMA_ERR_NOMEM;
}

static enum cma_errc fill_tls_and_auth(struct cma_prom *p, const struct cma_prom_config *cfg,
                                       struct cma_err *reterr)
{
    if (!cfg->client_cert_file != !cfg->client_key_file)
        return cma_err_set(reterr, CMA_ERR_FLAG,
                           "--prometheus-client-tls-cert-file and "
                           "--prometheus-client-tls-key-file go together");
    enum cma_errc rc = CMA_OK;
    if (cfg->ca_file)
        rc = check_readable("--prometheus-ca-file", cfg->ca_file, reterr);
    if (rc == CMA_OK && cfg->client_cert_file)
        rc = check_readable("--prometheus-client-tls-cert-file", cfg->client_cert_file, reterr);
    if (rc == CMA_OK && cfg->client_key_file)
        rc = check_readable("--prometheus-client-tls-key-file", cfg->client_key_file, reterr);
    if (rc != CMA_OK)
        return rc;
    if (copy_opt(cfg->ca_file, &p->ca_file) != CMA_OK ||
        copy_opt(cfg->client_cert_file, &p->client_cert_file) != CMA_OK ||
        copy_opt(cfg->client_key_file, &p->client_key_file) != CMA_OK ||
        copy_opt(cfg->basic_username, &p->basic_username) != CMA_OK ||
        copy_opt(cfg->basic_username ? (cfg->basic_password ? cfg->basic_password : "") : NULL,
                 &p->basic_password) != CMA_OK)
        return cma_err_set(reterr, CMA_ERR_NOMEM, "out of memory");
    p->insecure_skip_verify = cfg->insecure_skip_verify;
    return CMA_OK;
}

enum cma_errc cma_prom_new(const struct cma_prom_config *cfg, struct cma_prom **ret,
                           struct cma_err *reterr)
{
    if (!cfg || !cfg->url || !cfg->url[0])
        return cma_err_set(reterr, CMA_ERR_FLAG, "--prometheus-url is required");
    struct cma_prom *p = calloc(1, sizeof(*p));
    if (!p)
        return cma_err_set(reterr, CMA_ERR_NOMEM, "out of memory");
    p->use_post = cfg->use_post;
    p->timeout_ms = cfg->timeout_ms > 0 ? cfg->timeout_ms : DEFAULT_TIMEOUT_MS;
    p->series_timeout_ms =
        cfg->series_timeout_ms > 0 ? cfg->series_timeout_ms : CMA_PROM_DEFAULT_SERIES_TIMEOUT_MS;
    atomic_init(&p->budget.used, 0);
    p->budget.max =
        cfg->max_bytes_in_flight ? cfg->max_bytes_in_flight : CMA_PROM_DEFAULT_MAX_BYTES_IN_FLIGHT;
    p->connect_timeout_ms =
        cfg->connect_timeout_ms > 0 ? cfg->connect_timeout_ms : DEFAULT_CONNECT_TIMEOUT_MS;
    p->max_response_bytes = cfg->max_response_bytes ? cfg->max_response_bytes : CMA_BUF_DEFAULT_MAX;
    p->max_get_url_bytes = cfg->max_get_url_bytes ? cfg->max_get_url_bytes : DEFAULT_MAX_GET_URL;
    enum cma_errc rc = (p->url = cma_strdup(cfg->url)) ? CMA_OK : CMA_ERR_NOMEM;
    if (rc != CMA_OK)
        cma_err_set(reterr, rc, "out of memory");
    if (rc == CMA_OK)
        rc = cma_curl_pool_new(CMA_CURL_POOL_MAX_IDLE, &p->pool, reterr);
    if (rc == CMA_OK)
        rc = split_url(p, cfg->url, reterr);
    if (rc == CMA_OK)
        rc = add_header(&p->get_headers, "Accept: application/json", reterr);
    if (rc == CMA_OK)
        rc = add_header(&p->post_headers, "Accept: application/json", reterr);
    if (rc == CMA_OK)
        rc =
            add_header(&p->post_headers, "Content-Type: application/x-www-form-urlencoded", reterr);
    if (rc == CMA_OK)
        rc = add_header(&p->post_headers, "Expect:", reterr);
    for (size_t i = 0; rc == CMA_OK && i < cfg->n_headers; i++)
        rc = add_user_header(p, cfg->headers[i] ? cfg->headers[i] : "", reterr);
    if (rc == CMA_OK && cfg->token_file)
        rc = read_token(p, cfg->token_file, reterr);
    if (rc == CMA_OK)
        rc = fill_tls_and_auth(p, cfg, reterr);
    if (rc != CMA_OK) {
        cma_prom_free(p);
        return rc;
    }
    *ret = p;
    return CMA_OK;
}

/* ---- one request ------------------------------------------------------------------------- */

/* What a write callback reports when it stops the transfer. */
struct sink {
    bool aborted;
    struct cma_err err;
    CURL *handle; /* the transfer's handle, set by perform() */
};

struct request {
    const char *api_path; /* "/api/v1/query" */
    const char *params;   /* our form parameters, encoded */
    int64_t timeout_ms;
    curl_write_callback write;
    struct sink *sink; /* first member of the write callback's context */
    void *write_ctx;
    long status; /* out: HTTP status */
};

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

static enum cma_errc configure(const struct cma_prom *p, CURL *h, const struct request *req,
                               const char *url, const char *body, size_t body_len, char *errbuf,
                               struct cma_err *reterr)
{
    SETOPT(h, CURLOPT_URL, url);
    SETOPT(h, CURLOPT_PROTOCOLS_STR, "http,https");
    SETOPT(h, CURLOPT_NOSIGNAL, 1L);
    SETOPT(h, CURLOPT_TIMEOUT_MS, (long)req->timeout_ms);
    SETOPT(h, CURLOPT_CONNECTTIMEOUT_MS, (long)p->connect_timeout_ms);
    SETOPT(h, CURLOPT_ACCEPT_ENCODING, "");
    SETOPT(h, CURLOPT_TCP_KEEPALIVE, 1L);
    SETOPT(h, CURLOPT_TCP_NODELAY, 1L);
    SETOPT(h, CURLOPT_USERAGENT, "custom-metrics-adapter/" CMA_VERSION);
    SETOPT(h, CURLOPT_ERRORBUFFER, errbuf);
    SETOPT(h, CURLOPT_WRITEFUNCTION, req->write);
    SETOPT(h, CURLOPT_WRITEDATA, req->write_ctx);
    if (body) {
        SETOPT(h, CURLOPT_HTTPHEADER, p->post_headers);
        SETOPT(h, CURLOPT_POST, 1L);
        SETOPT(h, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)body_len);
        SETOPT(h, CURLOPT_POSTFIELDS, body);
    } else {
        SETOPT(h, CURLOPT_HTTPHEADER, p->get_headers);
        SETOPT(h, CURLOPT_HTTPGET, 1L);
    }
    if (p->basic_username) {
        SETOPT(h, CURLOPT_HTTPAUTH, (long)CURLAUTH_BASIC);
        SETOPT(h, CURLOPT_USERNAME, p->basic_username);
        SETOPT(h, CURLOPT_PASSWORD, p->basic_password);
    }
    if (p->ca_file)
        SETOPT(h, CURLOPT_CAINFO, p->ca_file);
    if (p->client_cert_file) {
        SETOPT(h, CURLOPT_SSLCERT, p->client_cert_file);
        SETOPT(h, CURLOPT_SSLKEY, p->client_key_file);
    }
    if (p->insecure_skip_verify) {
        SETOPT(h, CURLOPT_SSL_VERIFYPEER, 0L);
        SETOPT(h, CURLOPT_SSL_VERIFYHOST, 0L);
    }
    return CMA_OK;
}

/* url = origin + prefix + api_path [+ "?" + base_query [+ "&" + params]]. */
static enum cma_errc build_url(const struct cma_prom *p, const char *origin, const char *api_path,
                               const char *params, struct cma_buf *url)
{
    enum cma_errc rc = cma_buf_printf(url, "%s%s%s", origin, p->prefix, api_path);
    bool q = p->base_query || params;
    if (rc == CMA_OK && q)
        rc = cma_buf_appendc(url, '?');
    if (rc == CMA_OK && p->base_query)
        rc = cma_buf_appends(url, p->base_query);
    if (rc == CMA_OK && p->base_query && params)
        rc = cma_buf_appendc(url, '&');
    if (rc == CMA_OK && params)
        rc = cma_buf_appends(url, params);
    return rc;
}

static enum cma_errc curl_failure(const struct cma_prom *p, const struct request *req, CURLcode crc,
                                  const char *errbuf, struct cma_err *reterr)
{
    const char *why = errbuf[0] ? errbuf : curl_easy_strerror(crc);
    char timeout[32];
    switch (cma_clients_curl_class(crc)) {
    case CMA_CURL_TIMEOUT:
        return cma_err_set(reterr, CMA_ERR_BACKEND_TIMEOUT, "prometheus did not answer within %s",
                           cma_duration_format(req->timeout_ms, timeout, sizeof(timeout)));
    case CMA_CURL_UNREACHABLE:
        return cma_err_set(reterr, CMA_ERR_BACKEND_UNAVAILABLE,
                           "cannot reach prometheus at %s%s%s: %s", p->origin_public, p->prefix,
                           req->api_path, why);
    case CMA_CURL_BAD_REPLY:
        return cma_err_set(reterr, CMA_ERR_BACKEND_RESPONSE,
                           "bad answer from prometheus at %s%s%s: %s", p->origin_public, p->prefix,
                           req->api_path, why);
    default:
        return cma_err_set(reterr, CMA_ERR_BACKEND_ERROR,
                           "request to prometheus at %s%s%s failed: %s", p->origin_public,
                           p->prefix, req->api_path, why);
    }
}

static void log_request(const struct cma_prom *p, const char *method, const struct request *req,
                        const char *params_in_url, CURLcode crc, const char *errbuf,
                        int64_t started_ms)
{
    struct cma_buf url;
    cma_buf_init(&url, 0);
    if (build_url(p, p->origin_public, req->api_path, params_in_url, &url) != CMA_OK)
        return;
    int64_t took = cma_clock_mono_ms() - started_ms;
    if (crc == CURLE_OK)
        cma_log_v(6, "prometheus %s %s -> %ld (%lld ms)", method, cma_buf_str(&url), req->status,
                  (long long)took);
    else
        cma_log_v(6, "prometheus %s %s -> %s (%lld ms)", method, cma_buf_str(&url),
                  errbuf[0] ? errbuf : curl_easy_strerror(crc), (long long)took);
    cma_buf_done(&url);
}

/* Sends the request (GET, or POST when asked or when the GET URL would be too long) and maps
 * transport failures. On CMA_OK, req->status holds the HTTP status. */
static enum cma_errc perform(struct cma_prom *p, struct request *req, struct cma_err *reterr)
{
    struct cma_buf url;
    cma_buf_init(&url, 0);
    bool post = p->use_post;
    enum cma_errc rc = build_url(p, p->origin, req->api_path, post ? NULL : req->params, &url);
    if (rc == CMA_OK && !post && url.len > p->max_get_url_bytes) {
        cma_log_v(6, "prometheus %s: URL of %zu bytes is over %zu, sending POST", req->api_path,
                  url.len, p->max_get_url_bytes);
        post = true;
        cma_buf_clear(&url);
        rc = build_url(p, p->origin, req->api_path, NULL, &url);
    }
    if (rc != CMA_OK) {
        cma_buf_done(&url);
        return cma_err_set(reterr, CMA_ERR_NOMEM, "out of memory");
    }
    CURL *h = cma_curl_pool_take(p->pool);
    if (!h) {
        cma_buf_done(&url);
        return cma_err_set(reterr, CMA_ERR_NOMEM, "out of memory (curl handle)");
    }
    char errbuf[CURL_ERROR_SIZE];
    errbuf[0] = '\0';
    rc = configure(p, h, req, cma_buf_str(&url), post ? req->params : NULL, strlen(req->params),
                   errbuf, reterr);
    if (rc != CMA_OK) {
        cma_curl_pool_give(p->pool, h);
        cma_buf_done(&url);
        return rc;
    }
    req->sink->handle = h;
    int64_t started = cma_clock_mono_ms();
    CURLcode crc = curl_easy_perform(h);
    req->status = 0;
    curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &req->status);
    if (cma_log_enabled(6))
        log_request(p, post ? "POST" : "GET", req, post ? NULL : req->params, crc, errbuf, started);
    cma_curl_pool_give(p->pool, h);
    cma_buf_done(&url);
    if (crc == CURLE_OK)
        return CMA_OK;
    if (crc == CURLE_WRITE_ERROR && req->sink->aborted) {
        cma_err_copy(reterr, &req->sink->err);
        return req->sink->err.code;
    }
    return curl_failure(p, req, crc, errbuf, reterr);
}

/* An HTTP status that is not a Prometheus answer. */
static enum cma_errc http_status_error(const char *api_path, long status, const char *body,
                                       size_t len, struct cma_err *reterr)
{
    char snippet[SNIPPET_BYTES + 8];
    cma_clients_snippet(body, len, SNIPPET_BYTES, snippet, sizeof(snippet));
    enum cma_errc code = CMA_ERR_BACKEND_ERROR;
    const char *hint = "";
    if (status == 502 || status == 503 || status == 504)
        code = CMA_ERR_BACKEND_UNAVAILABLE;
    else if (status == 401 || status == 403)
        hint = " (check credentials)";
    return cma_err_set(reterr, code, "prometheus answered HTTP %ld for %s%s%s%s", status, api_path,
                       hint, snippet[0] ? ": " : "", snippet);
}

static bool is_prometheus_status(long status)
{
    return (status >= 200 && status < 300) || status == 400 || status == 422 || status == 503;
}

static bool is_status_error_code(enum cma_errc code)
{
    return code == CMA_ERR_BACKEND_ERROR || code == CMA_ERR_BACKEND_TIMEOUT ||
           code == CMA_ERR_BACKEND_UNAVAILABLE;
}

/* ---- the start of a body: error snippets and the --v=8 log -------------------------------- */

enum body_mode { MODE_UNDECIDED, MODE_STREAM, MODE_HEAD };

struct head {
    char buf[LOG_BODY_BYTES];
    size_t len;
};

static void keep_head(struct head *h, const char *data, size_t len)
{
    if (h->len < sizeof(h->buf)) {
        size_t n = sizeof(h->buf) - h->len;
        if (n > len)
            n = len;
        memcpy(h->buf + h->len, data, n);
        h->len += n;
    }
}

/* MODE_HEAD: a body that is not a Prometheus answer; its first bytes are all the error message
 * needs. Returns what the write callback returns. */
static size_t head_only(struct sink *sink, const struct head *h, size_t len)
{
    if (h->len < SNIPPET_BYTES)
        return len;
    sink->aborted = true;
    cma_err_set(&sink->err, CMA_ERR_BACKEND_ERROR, "not a prometheus answer");
    return 0;
}

static enum body_mode body_mode(const struct sink *sink)
{
    long status = 0;
    curl_easy_getinfo(sink->handle, CURLINFO_RESPONSE_CODE, &status);
    return is_prometheus_status(status) ? MODE_STREAM : MODE_HEAD;
}

/* ---- instant query ----------------------------------------------------------------------- */

struct query_sink {
    struct sink sink; /* first */
    struct cma_query_parser *parser;
    enum body_mode mode;
    struct head head;
    size_t bytes; /* body bytes so far (decompressed) */
    size_t max;
};

/* Stops the transfer: the answer is over the ceiling (announced: its Content-Length; 0 while
 * it streams). */
static size_t query_refuse(struct query_sink *qs, size_t announced)
{
    qs->sink.aborted = true;
    char size[64] = "goes";
    if (announced)
        snprintf(size, sizeof(size), "is %zu bytes,", announced);
    cma_err_set(&qs->sink.err, CMA_ERR_TOO_LARGE,
                "the prometheus answer to /api/v1/query %s over --prometheus-max-response-bytes "
                "(%zu bytes); narrow the query or the selector, or raise the flag",
                size, qs->max);
    return 0;
}

/* Refuses at once an answer whose Content-Length is over the ceiling. */
static size_t query_check_length(struct query_sink *qs, size_t len)
{
    curl_off_t cl = -1;
    if (curl_easy_getinfo(qs->sink.handle, CURLINFO_CONTENT_LENGTH_DOWNLOAD_T, &cl) == CURLE_OK &&
        cl > 0 && (uint64_t)cl > qs->max)
        return query_refuse(qs, (size_t)cl);
    return len;
}

static size_t query_write(char *data, size_t size, size_t nmemb, void *ctx)
{
    struct query_sink *qs = ctx;
    size_t len = size * nmemb;
    keep_head(&qs->head, data, len);
    if (qs->mode == MODE_UNDECIDED) {
        qs->mode = body_mode(&qs->sink);
        if (qs->mode == MODE_STREAM && query_check_length(qs, len) != len)
            return 0;
    }
    if (qs->mode == MODE_HEAD)
        return head_only(&qs->sink, &qs->head, len);
    qs->bytes += len;
    if (qs->bytes > qs->max)
        return query_refuse(qs, 0);
    if (cma_query_parser_feed(qs->parser, data, len, &qs->sink.err) != CMA_OK) {
        qs->sink.aborted = true;
        return 0;
    }
    return len;
}

/* Codes that explain themselves whatever the HTTP status was. */
static bool is_own_verdict(enum cma_errc code)
{
    return code == CMA_ERR_INTERNAL || code == CMA_ERR_NOMEM || code == CMA_ERR_TOO_LARGE ||
           code == CMA_ERR_TOO_MANY_REQUESTS || is_status_error_code(code);
}

/* After the transfer: the decoder's verdict or the HTTP status, whichever explains it. */
static enum cma_errc query_outcome(struct request *req, struct query_sink *qs, enum cma_errc rc,
                                   struct cma_err *perr, struct cma_prom_result **ret,
                                   struct cma_err *reterr)
{
    if (rc != CMA_OK && !qs->sink.aborted) {
        cma_err_copy(reterr, perr); /* transport failure */
        return rc;
    }
    if (cma_log_enabled(8))
        cma_log_v(8, "prometheus /api/v1/query body: %.*s", (int)qs->head.len, qs->head.buf);
    if (!is_prometheus_status(req->status))
        return http_status_error(req->api_path, req->status, qs->head.buf, qs->head.len, reterr);
    struct cma_prom_result *r = NULL;
    if (rc == CMA_OK)
        rc = cma_query_parser_finish(qs->parser, &r, perr);
    if (rc == CMA_OK && req->status >= 200 && req->status < 300) {
        cma_log_v(6, "prometheus /api/v1/query: %zu bytes, kept %zu of %zu series", qs->bytes,
                  r->n_samples, r->n_seen);
        *ret = r;
        return CMA_OK;
    }
    cma_prom_result_free(r);
    if ((req->status >= 200 && req->status < 300) || (rc != CMA_OK && is_own_verdict(rc))) {
        cma_err_copy(reterr, perr);
        return rc;
    }
    /* 400/422/503 whose body is not a Prometheus error (a proxy's page, say). */
    return http_status_error(req->api_path, req->status, qs->head.buf, qs->head.len, reterr);
}

enum cma_errc cma_prom_query(struct cma_prom *p, const char *promql, int64_t time_ms,
                             cma_sample_keep_fn keep, void *keep_ctx, struct cma_prom_result **ret,
                             struct cma_err *reterr)
{
    struct cma_buf params;
    cma_buf_init(&params, 0);
    enum cma_errc rc = cma_buf_appends(&params, "query=");
    if (rc == CMA_OK)
        rc = cma_clients_urlencode(&params, promql, strlen(promql), true);
    if (rc == CMA_OK)
        rc = cma_buf_appends(&params, "&time=");
    if (rc == CMA_OK)
        rc = cma_clients_append_unix_seconds(&params, time_ms);
    struct query_sink qs = {.mode = MODE_UNDECIDED, .max = p->max_response_bytes};
    if (rc == CMA_OK && cma_query_parser_new(keep, keep_ctx, &p->budget, &qs.parser) != CMA_OK)
        rc = CMA_ERR_NOMEM;
    if (rc != CMA_OK) {
        cma_buf_done(&params);
        return cma_err_set(reterr, CMA_ERR_NOMEM, "out of memory");
    }
    struct request req = {
        .api_path = "/api/v1/query",
        .params = cma_buf_str(&params),
        .timeout_ms = p->timeout_ms,
        .write = query_write,
        .sink = &qs.sink,
        .write_ctx = &qs,
    };
    struct cma_err perr;
    cma_err_clear(&perr);
    rc = perform(p, &req, &perr);
    rc = query_outcome(&req, &qs, rc, &perr, ret, reterr);
    cma_buf_done(&params);
    cma_query_parser_free(qs.parser);
    return rc;
}

/* ---- series listing ---------------------------------------------------------------------- */

struct series_sink {
    struct sink sink; /* first */
    struct cma_series_parser *parser;
    enum body_mode mode;
    struct head head;
};

static size_t series_write(char *data, size_t size, size_t nmemb, void *ctx)
{
    struct series_sink *ss = ctx;
    size_t len = size * nmemb;
    keep_head(&ss->head, data, len);
    if (ss->mode == MODE_UNDECIDED)
        ss->mode = body_mode(&ss->sink);
    if (ss->mode == MODE_HEAD)
        return head_only(&ss->sink, &ss->head, len);
    if (cma_series_parser_feed(ss->parser, data, len, &ss->sink.err) != CMA_OK) {
        ss->sink.aborted = true;
        return 0;
    }
    return len;
}

/* After the transfer: the parser's verdict or the HTTP status, whichever explains it. */
static enum cma_errc series_outcome(struct request *req, struct series_sink *ss, enum cma_errc rc,
                                    struct cma_err *perr, struct cma_err *reterr)
{
    if (rc != CMA_OK && !ss->sink.aborted) {
        cma_err_copy(reterr, perr); /* transport failure */
        return rc;
    }
    if (!is_prometheus_status(req->status))
        return http_status_error(req->api_path, req->status, ss->head.buf, ss->head.len, reterr);
    if (rc == CMA_OK)
        rc = cma_series_parser_finish(ss->parser, perr);
    bool ok_status = req->status >= 200 && req->status < 300;
    if (ok_status || rc == CMA_ERR_INTERNAL || rc == CMA_ERR_NOMEM ||
        (rc != CMA_OK && is_status_error_code(rc))) {
        cma_err_copy(reterr, perr);
        return rc;
    }
    /* 400/422/503 whose body is not a Prometheus error (a proxy's page, say). */
    return http_status_error(req->api_path, req->status, ss->head.buf, ss->head.len, reterr);
}

enum cma_errc cma_prom_series(struct cma_prom *p, const char *match, int64_t start_ms,
                              int64_t end_ms, int64_t series_timeout_ms, cma_series_fn fn,
                              void *ctx, struct cma_err *reterr)
{
    struct cma_buf params;
    cma_buf_init(&params, 0);
    enum cma_errc rc = cma_buf_appends(&params, "match%5B%5D=");
    if (rc == CMA_OK)
        rc = cma_clients_urlencode(&params, match, strlen(match), true);
    if (rc == CMA_OK)
        rc = cma_buf_appends(&params, "&start=");
    if (rc == CMA_OK)
        rc = cma_clients_append_unix_seconds(&params, start_ms);
    if (rc == CMA_OK)
        rc = cma_buf_appends(&params, "&end=");
    if (rc == CMA_OK)
        rc = cma_clients_append_unix_seconds(&params, end_ms);
    if (rc != CMA_OK) {
        cma_buf_done(&params);
        return cma_err_set(reterr, CMA_ERR_NOMEM, "out of memory");
    }
    struct series_sink ss = {.mode = MODE_UNDECIDED};
    if (cma_series_parser_new(fn, ctx, &ss.parser) != CMA_OK) {
        cma_buf_done(&params);
        return cma_err_set(reterr, CMA_ERR_NOMEM, "out of memory");
    }
    struct request req = {
        .api_path = "/api/v1/series",
        .params = cma_buf_str(&params),
        .timeout_ms = series_timeout_ms > 0 ? series_timeout_ms : p->series_timeout_ms,
        .write = series_write,
        .sink = &ss.sink,
        .write_ctx = &ss,
    };
    struct cma_err perr;
    cma_err_clear(&perr);
    rc = perform(p, &req, &perr);
    rc = series_outcome(&req, &ss, rc, &perr, reterr);
    cma_buf_done(&params);
    cma_series_parser_free(ss.parser);
    return rc;
}
