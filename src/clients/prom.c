/* prom.c: one Prometheus-compatible backend over libcurl: instant queries (streamed through
 * query_stream.c, which keeps only the series the caller needs) and series listings (streamed
 * through series_stream.c). Nothing buffers a whole answer.
 *
 * DESIGN: everything derived from the flags is computed once in cma_prom_new() and read-only
 * afterwards, so any number of threads may call query/series at once: the base URL split into
 * origin (with and without credentials), cleaned path prefix and base query string; two header
 * lists (GET, and POST with the form content type and an empty Expect:) shared read-only by all
 * handles, and a copy of each without X-Scope-OrgID: a call with a tenant (a MetricRule's
 * namespace, tenantFromNamespace) sends one stack node with its own X-Scope-OrgID in front of
 * that copy, so per-tenant calls need no allocation and no lock. Credentials (CA, client
 * certificate and key, bearer token, basic auth) are a struct cma_creds (credentials.c) merged
 * from the explicit flags and --prometheus-auth-config / --prometheus-auth-incluster
 * (make_creds: the precedence is written there and in docs/configuration.md). The transfer itself
 * (a pooled handle, the current credentials, TLS, timeouts, the transport-failure mapping, the
 * report of each request) is transport.c's, the same as kube.c's; this file builds the URL and
 * form, picks GET or POST, and decodes the body as it streams. The mutable members are the byte
 * budget (atomics) that query decoders charge what they keep to, and the credentials (their own
 * mutex). Ceilings on a query answer, checked as early as they can be: Content-Length over
 * max_response_bytes before the first byte is decoded; the streamed bytes as they arrive; the
 * kept series against the budget as each one is kept (query_stream.c).
 * Error mapping, in this order: our write callback stopped the transfer (body over the ceiling,
 * bad JSON, over the budget, caller stop) → that error; curl timeouts → BACKEND_TIMEOUT;
 * connect/DNS/TLS/send/recv failures → BACKEND_UNAVAILABLE; then HTTP: 2xx, 400, 422 and 503
 * carry Prometheus JSON whose status:error gives "<errorType>: <error>"; any other status (or one
 * of those with a body that is not a Prometheus error) → "prometheus answered HTTP N for <path>:
 * <body start>", BACKEND_UNAVAILABLE for 502/503/504, BACKEND_ERROR otherwise (401/403 say "check
 * credentials"). Nothing is logged here: each request and each decoded answer is reported to
 * the notifier of the config (main logs them at --v=6 and --v=8), never with credentials. */
#include "cma/prom.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "cma/buf.h"
#include "cma/str.h"
#include "internal.h"

#define DEFAULT_TIMEOUT_MS 10000
#define DEFAULT_CONNECT_TIMEOUT_MS 3000
#define DEFAULT_MAX_GET_URL ((size_t)8 << 10)
#define SNIPPET_BYTES 200
#define HEAD_BYTES 4096 /* the start of a body kept for error snippets and the notifier */

struct cma_prom {
    char *url;           /* as given */
    char *origin;        /* scheme://[user[:password]@]host[:port] */
    char *origin_public; /* the same without credentials, for logs and errors */
    char *prefix;        /* cleaned path prefix: "" or "/prometheus" */
    char *base_query;    /* NULL or the base URL's query string, kept encoded */
    bool use_post;
    struct curl_slist *get_headers;
    struct curl_slist *post_headers;
    /* the same two without any X-Scope-OrgID line: a call with a tenant puts its own in front */
    struct curl_slist *get_headers_tenantless;
    struct curl_slist *post_headers_tenantless;
    struct cma_transport tr; /* pool, credentials, notifier */
    int64_t timeout_ms;
    int64_t series_timeout_ms;
    size_t max_response_bytes;
    size_t max_get_url_bytes;
    size_t max_query_bytes;        /* 0 = no limit */
    struct cma_prom_budget budget; /* shared by every query in flight */
};

/* A backend's failures: timeouts, unreachable, undecodable; statuses a proxy gives when the
 * backend behind it is down are "unavailable", the rest "error". */
static const struct cma_transport_errors PROM_ERRORS = {
    .peer = "prometheus",
    .timeout = CMA_ERR_BACKEND_TIMEOUT,
    .unreachable = CMA_ERR_BACKEND_UNAVAILABLE,
    .bad_reply = CMA_ERR_BACKEND_RESPONSE,
    .other = CMA_ERR_BACKEND_ERROR,
    .too_large = CMA_ERR_TOO_LARGE,
    .status_error = CMA_ERR_BACKEND_ERROR,
    .status_unavailable = CMA_ERR_BACKEND_UNAVAILABLE,
    .status_not_found = CMA_ERR_BACKEND_ERROR,
    .busy_5xx_429 = false,
    .credentials_hint = true,
    .timeout_names_request = false,
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
    curl_slist_free_all(p->get_headers_tenantless);
    curl_slist_free_all(p->post_headers_tenantless);
    cma_transport_done(&p->tr);
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
    enum cma_errc rc = cma_clients_url_part(u, CURLUPART_SCHEME, &parts.scheme);
    if (rc == CMA_OK)
        rc = cma_clients_url_part(u, CURLUPART_USER, &parts.user);
    if (rc == CMA_OK)
        rc = cma_clients_url_part(u, CURLUPART_PASSWORD, &parts.password);
    if (rc == CMA_OK)
        rc = cma_clients_url_part(u, CURLUPART_HOST, &parts.host);
    if (rc == CMA_OK)
        rc = cma_clients_url_part(u, CURLUPART_PORT, &parts.port);
    if (rc == CMA_OK)
        rc = cma_clients_url_part(u, CURLUPART_PATH, &parts.path);
    if (rc == CMA_OK)
        rc = cma_clients_url_part(u, CURLUPART_QUERY, &parts.query);
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

/* Is this header line the tenant's ("X-Scope-OrgID: t", or "X-Scope-OrgID;", curl's form of an
 * empty value), whatever the case of its name? */
static bool is_tenant_line(const char *line)
{
    size_t n = sizeof(CMA_TENANT_HEADER) - 1;
    return strncasecmp(line, CMA_TENANT_HEADER, n) == 0 && (line[n] == ':' || line[n] == ';');
}

/* *ret: a copy of list without its tenant lines (see the struct's tenantless lists). */
static enum cma_errc copy_tenantless(const struct curl_slist *list, struct curl_slist **ret,
                                     struct cma_err *reterr)
{
    enum cma_errc rc = CMA_OK;
    for (const struct curl_slist *l = list; rc == CMA_OK && l; l = l->next)
        if (!is_tenant_line(l->data))
            rc = add_header(ret, l->data, reterr);
    return rc;
}

/* The config's query_params appended to base_query ("k=v&k2=v2", each side percent-encoded). */
static enum cma_errc add_query_params(struct cma_prom *p, const struct cma_prom_config *cfg,
                                      struct cma_err *reterr)
{
    if (cfg->n_query_params == 0)
        return CMA_OK;
    struct cma_buf b;
    cma_buf_init(&b, 0);
    enum cma_errc rc = cma_buf_appends(&b, p->base_query ? p->base_query : "");
    for (size_t i = 0; rc == CMA_OK && i < cfg->n_query_params; i++) {
        const char *kv = cfg->query_params[i] ? cfg->query_params[i] : "";
        const char *eq = strchr(kv, '=');
        size_t key_len = eq ? (size_t)(eq - kv) : strlen(kv);
        if (key_len == 0) {
            cma_buf_done(&b);
            return cma_err_set(reterr, CMA_ERR_FLAG,
                               "query parameter \"%s\": want key=value with a non-empty key", kv);
        }
        if (b.len > 0)
            rc = cma_buf_appendc(&b, '&');
        if (rc == CMA_OK)
            rc = cma_clients_urlencode(&b, kv, key_len, true);
        if (rc == CMA_OK)
            rc = cma_buf_appendc(&b, '=');
        if (rc == CMA_OK && eq)
            rc = cma_clients_urlencode(&b, eq + 1, strlen(eq + 1), true);
    }
    char *q = rc == CMA_OK ? cma_buf_take(&b) : NULL;
    cma_buf_done(&b);
    if (!q)
        return cma_err_set(reterr, CMA_ERR_NOMEM, "out of memory");
    free(p->base_query);
    p->base_query = q;
    return CMA_OK;
}

/* The kubeconfig of --prometheus-auth-config, or this pod's service account for
 * --prometheus-auth-incluster, as a connection whose labels name the flag; zeroed when neither. */
static enum cma_errc auth_source(const struct cma_prom_config *cfg, struct cma_kube_conn *conn,
                                 struct cma_err *reterr)
{
    memset(conn, 0, sizeof(*conn));
    if (cfg->auth_config && cfg->auth_config[0] && cfg->auth_incluster)
        return cma_err_set(reterr, CMA_ERR_FLAG,
                           "--prometheus-auth-config and --prometheus-auth-incluster: may not use "
                           "both in-cluster auth and an explicit kubeconfig at the same time");
    enum cma_errc rc = CMA_OK;
    const char *flag = NULL;
    if (cfg->auth_config && cfg->auth_config[0]) {
        rc = cma_kubeconfig_load(cfg->auth_config, conn, reterr);
        flag = "--prometheus-auth-config";
    } else if (cfg->auth_incluster) {
        rc = cma_kubeconfig_service_account(cfg->service_account_dir, conn, reterr);
        flag = "--prometheus-auth-incluster";
    }
    if (rc != CMA_OK) {
        cma_err_prefix(reterr, "%s: ", flag);
        return rc;
    }
    if (!flag)
        return CMA_OK;
    struct cma_buf b;
    cma_buf_init(&b, 0);
    rc = cma_buf_printf(&b, "%s %s", flag, conn->source ? conn->source : "");
    free(conn->source);
    conn->source = rc == CMA_OK ? cma_buf_take(&b) : NULL;
    cma_buf_done(&b);
    if (!conn->source) {
        cma_kube_conn_done(conn);
        return cma_err_set(reterr, CMA_ERR_NOMEM, "out of memory");
    }
    return CMA_OK;
}

/* Explicit flags win over the kubeconfig / service account, setting by setting: the CA file;
 * the client certificate and key (as a pair); insecure-skip-verify adds. Only one credential
 * goes in Authorization: --prometheus-token-file, else the basic-auth flags, else the
 * kubeconfig's tokenFile/token (which win over its username/password), else the service
 * account's token. Giving both the token file and the basic-auth user is refused. */
static enum cma_errc apply_flags(const struct cma_prom_config *cfg, struct cma_cred_spec *spec,
                                 struct cma_err *reterr)
{
    if (!cfg->client_cert_file != !cfg->client_key_file)
        return cma_err_set(reterr, CMA_ERR_FLAG,
                           "--prometheus-client-tls-cert-file and "
                           "--prometheus-client-tls-key-file go together");
    if (cfg->token_file && cfg->basic_username)
        return cma_err_set(reterr, CMA_ERR_FLAG,
                           "--prometheus-token-file and --prometheus-basic-auth-username: give "
                           "one of them, Prometheus gets one Authorization header");
    if (cfg->ca_file)
        spec->ca = (struct cma_cred_item){.label = "--prometheus-ca-file", .file = cfg->ca_file};
    if (cfg->client_cert_file) {
        spec->cert = (struct cma_cred_item){.label = "--prometheus-client-tls-cert-file",
                                            .file = cfg->client_cert_file};
        spec->key = (struct cma_cred_item){.label = "--prometheus-client-tls-key-file",
                                           .file = cfg->client_key_file};
    }
    spec->insecure_skip_verify = spec->insecure_skip_verify || cfg->insecure_skip_verify;
    if (spec->token.file || spec->token.data)
        spec->username = NULL; /* the kubeconfig's token wins over its basic auth */
    if (cfg->token_file || cfg->basic_username) {
        spec->token = (struct cma_cred_item){0};
        spec->username = NULL;
        spec->password = (struct cma_cred_item){0};
    }
    if (cfg->token_file)
        spec->token =
            (struct cma_cred_item){.label = "--prometheus-token-file", .file = cfg->token_file};
    if (cfg->basic_username) {
        spec->username = cfg->basic_username;
        if (cfg->basic_password_file)
            spec->password = (struct cma_cred_item){
                .label = "--prometheus-basic-auth-password-file", .file = cfg->basic_password_file};
        else if (cfg->basic_password)
            spec->password =
                (struct cma_cred_item){.label = "basic-auth password",
                                       .data = (const unsigned char *)cfg->basic_password,
                                       .len = strlen(cfg->basic_password)};
    }
    return CMA_OK;
}

/* The kubeconfig's tls-server-name, as client-go's ServerName (tls_route.c): for https, the
 * connection still goes to the URL's host and port (CURLOPT_CONNECT_TO) but the TLS server name
 * asked for (SNI) and checked in the certificate is tls_name (the host curl sees in the URL), and
 * the Host header keeps the URL's host. Ignored for http://, as in Go. */
static enum cma_errc use_tls_server_name(struct cma_prom *p, const char *tls_name,
                                         struct cma_err *reterr)
{
    if (!tls_name || !tls_name[0] || strncmp(p->origin, "https://", 8) != 0)
        return CMA_OK;
    struct cma_tls_route r;
    enum cma_errc rc = cma_clients_tls_route(p->origin, tls_name, &r);
    if (rc == CMA_OK && !(p->tr.connect_to = curl_slist_append(NULL, r.connect_to)))
        rc = CMA_ERR_NOMEM;
    if (rc == CMA_OK)
        rc = add_header(&p->get_headers, r.host_line, reterr);
    if (rc == CMA_OK)
        rc = add_header(&p->post_headers, r.host_line, reterr);
    if (rc == CMA_OK) {
        free(p->origin);
        p->origin = r.url;
        r.url = NULL;
    }
    cma_tls_route_done(&r);
    if (rc == CMA_ERR_CONFIG_VALUE)
        return cma_err_set(reterr, CMA_ERR_FLAG,
                           "--prometheus-auth-config: invalid tls-server-name \"%s\"", tls_name);
    if (rc != CMA_OK)
        return cma_err_set(reterr, CMA_ERR_NOMEM, "out of memory");
    return CMA_OK;
}

static enum cma_errc make_creds(struct cma_prom *p, const struct cma_prom_config *cfg,
                                struct cma_err *reterr)
{
    struct cma_kube_conn conn;
    enum cma_errc rc = auth_source(cfg, &conn, reterr);
    if (rc != CMA_OK)
        return rc;
    struct cma_kube_conn_labels labels;
    struct cma_cred_spec spec;
    cma_kube_conn_cred_spec(&conn, &labels, &spec);
    rc = apply_flags(cfg, &spec, reterr);
    if (rc == CMA_OK)
        rc = use_tls_server_name(p, conn.tls_server_name, reterr);
    if (rc == CMA_OK)
        rc = cma_creds_new(&spec, &p->tr.creds, reterr);
    cma_kube_conn_done(&conn);
    return rc;
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
    p->max_response_bytes = cfg->max_response_bytes ? cfg->max_response_bytes : CMA_BUF_DEFAULT_MAX;
    p->max_get_url_bytes = cfg->max_get_url_bytes ? cfg->max_get_url_bytes : DEFAULT_MAX_GET_URL;
    p->max_query_bytes = cfg->max_query_bytes;
    enum cma_errc rc = (p->url = cma_strdup(cfg->url)) ? CMA_OK : CMA_ERR_NOMEM;
    if (rc != CMA_OK)
        cma_err_set(reterr, rc, "out of memory");
    if (rc == CMA_OK)
        rc = cma_transport_init(&p->tr, "prometheus", &PROM_ERRORS,
                                cfg->connect_timeout_ms > 0 ? cfg->connect_timeout_ms
                                                            : DEFAULT_CONNECT_TIMEOUT_MS,
                                reterr);
    p->tr.notifier = cfg->notifier;
    if (rc == CMA_OK)
        rc = split_url(p, cfg->url, reterr);
    if (rc == CMA_OK)
        rc = add_query_params(p, cfg, reterr);
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
    if (rc == CMA_OK)
        rc = make_creds(p, cfg, reterr);
    if (rc == CMA_OK)
        rc = copy_tenantless(p->get_headers, &p->get_headers_tenantless, reterr);
    if (rc == CMA_OK)
        rc = copy_tenantless(p->post_headers, &p->post_headers_tenantless, reterr);
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
    CURL *handle; /* the transfer's handle, set by the transport before it runs */
};

struct request {
    const char *api_path; /* "/api/v1/query" */
    const char *params;   /* our form parameters, encoded */
    int64_t timeout_ms;
    curl_write_callback write;
    struct sink *sink; /* first member of the write callback's context */
    void *write_ctx;
    long status;                 /* out: HTTP status */
    char reason[64];             /* out: its reason phrase ("" when none) */
    const struct cma_call *call; /* the request served (deadline, client gone); NULL: none */
    const char *tenant;          /* X-Scope-OrgID for this call (checked); NULL: the client's */
};

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

/* The URLs of one request: as sent, without credentials (for the report, only when someone
 * listens), and the place named when the backend cannot be reached. */
struct urls {
    struct cma_buf url, pub, where;
    bool post;
    size_t long_get; /* the GET URL's length when it was too long and POST was chosen */
};

static void urls_done(struct urls *u)
{
    cma_buf_done(&u->url);
    cma_buf_done(&u->pub);
    cma_buf_done(&u->where);
}

/* GET, or POST when asked or when the GET URL would be over max_get_url_bytes. */
static enum cma_errc build_urls(const struct cma_prom *p, const struct request *req, struct urls *u)
{
    cma_buf_init(&u->url, 0);
    cma_buf_init(&u->pub, 0);
    cma_buf_init(&u->where, 0);
    u->post = p->use_post;
    u->long_get = 0;
    enum cma_errc rc =
        build_url(p, p->origin, req->api_path, u->post ? NULL : req->params, &u->url);
    if (rc == CMA_OK && !u->post && u->url.len > p->max_get_url_bytes) {
        u->post = true;
        u->long_get = u->url.len;
        cma_buf_clear(&u->url);
        rc = build_url(p, p->origin, req->api_path, NULL, &u->url);
    }
    if (rc == CMA_OK && p->tr.notifier.on_request)
        rc = build_url(p, p->origin_public, req->api_path, u->post ? NULL : req->params, &u->pub);
    if (rc == CMA_OK)
        rc = cma_buf_printf(&u->where, "%s%s%s", p->origin_public, p->prefix, req->api_path);
    return rc;
}

/* A call's tenant, refused before anything is sent when it could not be a header value. */
static enum cma_errc check_tenant(const char *tenant, struct cma_err *reterr)
{
    if (!tenant)
        return CMA_OK;
    size_t len = strlen(tenant);
    bool ok = len > 0 && len <= CMA_TENANT_MAX_BYTES;
    for (size_t i = 0; ok && i < len; i++)
        ok = tenant[i] > 0x20 && tenant[i] < 0x7f;
    if (!ok)
        return cma_err_set(reterr, CMA_ERR_INTERNAL,
                           "tenant \"%.64s\" cannot be sent as " CMA_TENANT_HEADER
                           ": want 1 to %d visible ASCII characters",
                           tenant, CMA_TENANT_MAX_BYTES);
    return CMA_OK;
}

/* The request's header list: the client's, or with a tenant, `line` (filled here) in front of
 * the client's tenantless list (node and line live on the caller's stack for the transfer). */
static struct curl_slist *request_headers(const struct cma_prom *p, const struct request *req,
                                          bool post, struct curl_slist *node, char *line,
                                          size_t line_size)
{
    if (!req->tenant)
        return post ? p->post_headers : p->get_headers;
    snprintf(line, line_size, "%s: %s", CMA_TENANT_HEADER, req->tenant);
    node->data = line;
    node->next = post ? p->post_headers_tenantless : p->get_headers_tenantless;
    return node;
}

/* Sends the request through the transport. On CMA_OK, req->status holds the HTTP status; when
 * a write callback stopped the transfer, its own verdict is returned. */
static enum cma_errc perform(struct cma_prom *p, struct request *req, struct cma_err *reterr)
{
    struct urls u;
    if (build_urls(p, req, &u) != CMA_OK) {
        urls_done(&u);
        return cma_err_set(reterr, CMA_ERR_NOMEM, "out of memory");
    }
    struct curl_slist tenant_node;
    char tenant_line[sizeof(CMA_TENANT_HEADER) + 2 + CMA_TENANT_MAX_BYTES + 1];
    struct cma_http_request hr = {
        .method = u.post ? "POST" : "GET",
        .url = cma_buf_str(&u.url),
        .public_url = cma_buf_str(&u.pub),
        .what = req->api_path,
        .where = cma_buf_str(&u.where),
        .headers = request_headers(p, req, u.post, &tenant_node, tenant_line, sizeof(tenant_line)),
        .body = u.post ? req->params : NULL,
        .body_len = u.post ? strlen(req->params) : 0,
        .timeout_ms = req->timeout_ms,
        .write = req->write,
        .write_ctx = req->write_ctx,
        .handle = &req->sink->handle,
        .long_get_bytes = u.long_get,
        .max_get_bytes = u.long_get ? p->max_get_url_bytes : 0,
        .call = req->call,
    };
    struct cma_http_result res;
    struct cma_err terr;
    cma_err_clear(&terr);
    enum cma_errc rc = cma_transport_perform(&p->tr, &hr, &res, &terr);
    urls_done(&u);
    req->status = res.status;
    memcpy(req->reason, res.reason, sizeof(req->reason));
    if (rc != CMA_OK && res.curl == CURLE_WRITE_ERROR && req->sink->aborted) {
        cma_err_copy(reterr, &req->sink->err);
        return req->sink->err.code;
    }
    cma_err_copy(reterr, &terr);
    return rc;
}

/* An HTTP status that is not a Prometheus answer: the status line and a plain-text excerpt of
 * the body (a JSON `error`, a gateway page's text; never markup, at most SNIPPET_BYTES). */
static enum cma_errc http_status_error(const struct request *req, const char *body, size_t len,
                                       struct cma_err *reterr)
{
    char excerpt[SNIPPET_BYTES + 8];
    cma_clients_excerpt(body, len, SNIPPET_BYTES, excerpt, sizeof(excerpt));
    return cma_transport_status_error(&PROM_ERRORS, req->status, req->reason, req->api_path,
                                      excerpt, reterr);
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

/* ---- the start of a body: error snippets and the notifier ----------------------------------- */

enum body_mode { MODE_UNDECIDED, MODE_STREAM, MODE_HEAD };

struct head {
    char buf[HEAD_BYTES];
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

/* MODE_HEAD: a body that is not a Prometheus answer; its first HEAD_BYTES are all the error
 * message needs (a gateway page's text may come after a long <head>). Returns what the write
 * callback returns. */
static size_t head_only(struct sink *sink, const struct head *h, size_t len)
{
    if (h->len < sizeof(h->buf))
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

/* Tells the notifier about an answer that came: its first bytes, and what was kept of it. */
static void notify_answer(const struct cma_prom *p, const struct request *req,
                          const struct query_sink *qs, const struct cma_prom_result *r)
{
    if (!p->tr.notifier.on_answer)
        return;
    struct cma_answer_report a = {
        .api_path = req->api_path,
        .head = qs->head.buf,
        .head_len = qs->head.len,
        .bytes = qs->bytes,
        .decoded = r != NULL,
        .kept = r ? r->n_samples : 0,
        .seen = r ? r->n_seen : 0,
    };
    p->tr.notifier.on_answer(p->tr.notifier.ctx, &a);
}

/* After the transfer: the decoder's verdict or the HTTP status, whichever explains it. */
static enum cma_errc query_outcome(const struct cma_prom *p, struct request *req,
                                   struct query_sink *qs, enum cma_errc rc, struct cma_err *perr,
                                   struct cma_prom_result **ret, struct cma_err *reterr)
{
    if (rc != CMA_OK && !qs->sink.aborted) {
        cma_err_copy(reterr, perr); /* transport failure */
        return rc;
    }
    if (!is_prometheus_status(req->status)) {
        notify_answer(p, req, qs, NULL);
        return http_status_error(req, qs->head.buf, qs->head.len, reterr);
    }
    struct cma_prom_result *r = NULL;
    if (rc == CMA_OK)
        rc = cma_query_parser_finish(qs->parser, &r, perr);
    bool ok = rc == CMA_OK && req->status >= 200 && req->status < 300;
    notify_answer(p, req, qs, ok ? r : NULL);
    if (ok) {
        *ret = r;
        return CMA_OK;
    }
    cma_prom_result_free(r);
    if ((req->status >= 200 && req->status < 300) || (rc != CMA_OK && is_own_verdict(rc))) {
        cma_err_copy(reterr, perr);
        return rc;
    }
    /* 400/422/503 whose body is not a Prometheus error (a proxy's page, say). */
    return http_status_error(req, qs->head.buf, qs->head.len, reterr);
}

enum cma_errc cma_prom_query(struct cma_prom *p, const char *promql, int64_t time_ms,
                             cma_sample_keep_fn keep, void *keep_ctx, struct cma_prom_result **ret,
                             struct cma_err *reterr)
{
    return cma_prom_query_call(p, promql, time_ms, keep, keep_ctx, NULL, NULL, ret, reterr);
}

enum cma_errc cma_prom_query_call(struct cma_prom *p, const char *promql, int64_t time_ms,
                                  cma_sample_keep_fn keep, void *keep_ctx,
                                  const struct cma_call *call, const char *tenant,
                                  struct cma_prom_result **ret, struct cma_err *reterr)
{
    enum cma_errc bad = check_tenant(tenant, reterr);
    if (bad != CMA_OK)
        return bad;
    size_t promql_len = strlen(promql);
    if (p->max_query_bytes && promql_len > p->max_query_bytes)
        return cma_err_set(reterr, CMA_ERR_BACKEND_ERROR,
                           "the query is %zu bytes, over this backend's maxQueryLength %zu; "
                           "shorten the rule's query or raise the limit",
                           promql_len, p->max_query_bytes);
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
        .call = call,
        .tenant = tenant,
    };
    struct cma_err perr;
    cma_err_clear(&perr);
    rc = perform(p, &req, &perr);
    rc = query_outcome(p, &req, &qs, rc, &perr, ret, reterr);
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
        return http_status_error(req, ss->head.buf, ss->head.len, reterr);
    if (rc == CMA_OK)
        rc = cma_series_parser_finish(ss->parser, perr);
    bool ok_status = req->status >= 200 && req->status < 300;
    if (ok_status || rc == CMA_ERR_INTERNAL || rc == CMA_ERR_NOMEM ||
        (rc != CMA_OK && is_status_error_code(rc))) {
        cma_err_copy(reterr, perr);
        return rc;
    }
    /* 400/422/503 whose body is not a Prometheus error (a proxy's page, say). */
    return http_status_error(req, ss->head.buf, ss->head.len, reterr);
}

enum cma_errc cma_prom_series(struct cma_prom *p, const char *match, int64_t start_ms,
                              int64_t end_ms, int64_t series_timeout_ms, const char *tenant,
                              cma_series_fn fn, void *ctx, struct cma_err *reterr)
{
    enum cma_errc bad = check_tenant(tenant, reterr);
    if (bad != CMA_OK)
        return bad;
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
        .tenant = tenant,
    };
    struct cma_err perr;
    cma_err_clear(&perr);
    rc = perform(p, &req, &perr);
    rc = series_outcome(&req, &ss, rc, &perr, reterr);
    cma_buf_done(&params);
    cma_series_parser_free(ss.parser);
    return rc;
}
