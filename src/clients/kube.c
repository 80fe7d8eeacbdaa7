/* kube.c: a small kube-apiserver client over libcurl: API discovery for the RESTMapper and LIST
 * of object names by label selector, plus the pure JSON helpers behind them (internal.h).
 *
 * DESIGN: the settings (struct cma_kube_conn, from kubeconfig.c) are copied at construction and
 * read-only afterwards; requests take a handle from the pool as prom.c does, so the client is
 * thread-safe. A token file is re-read on every request (projected service-account tokens
 * rotate). tls-server-name is done with CURLOPT_CONNECT_TO: the request URL names the TLS name
 * (SNI and certificate check) and curl connects to the configured host. Transport failures and
 * timeouts are CMA_ERR_KUBE_UNAVAILABLE; HTTP answers are judged by the caller: discovery skips
 * groups that answer an error (an aggregated API that is down), LIST maps 404 → NOT_FOUND, 5xx
 * and 429 → KUBE_UNAVAILABLE, others → KUBE_ERROR with the Status message, and restarts once
 * from the first page when a continue token has expired (410). */
#include "cma/kube.h"

#include <jansson.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cma/buf.h"
#include "cma/clock.h"
#include "cma/log.h"
#include "cma/str.h"
#include "internal.h"

#define DEFAULT_TIMEOUT_MS 10000
#define MAX_CONNECT_TIMEOUT_MS 5000
#define MAX_BODY_BYTES ((size_t)64 << 20)
#define TOKEN_FILE_MAX ((size_t)64 << 10)
#define LIST_PAGE_LIMIT 500
#define LIST_MAX_PAGES 10000
#define BAD_JSON "unexpected JSON from the Kubernetes API: "
#define ACCEPT_JSON "Accept: application/json"
#define ACCEPT_METADATA                                                                            \
    "Accept: application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1,application/json"

struct cma_kube {
    char *server;        /* what requests go to (host replaced by tls_server_name if set) */
    char *server_public; /* as configured, for logs and errors */
    struct curl_slist *connect_to;
    char *ca_file;
    struct curl_blob ca_blob; /* data NULL when unused; owned */
    char *cert_file;
    struct curl_blob cert_blob;
    char *key_file;
    struct curl_blob key_blob;
    bool insecure_skip_verify;
    char *token;
    char *token_file;
    char *username;
    char *password;
    int64_t timeout_ms;
    struct cma_curl_pool *pool;
    atomic_size_t skipped_groups;
};

/* ---- construction ------------------------------------------------------------------------ */

void cma_kube_free(struct cma_kube *k)
{
    if (!k)
        return;
    free(k->server);
    free(k->server_public);
    curl_slist_free_all(k->connect_to);
    free(k->ca_file);
    free(k->ca_blob.data);
    free(k->cert_file);
    free(k->cert_blob.data);
    free(k->key_file);
    free(k->key_blob.data);
    free(k->token);
    free(k->token_file);
    free(k->username);
    free(k->password);
    cma_curl_pool_free(k->pool);
    free(k);
}

const char *cma_kube_server(const struct cma_kube *k)
{
    return k ? k->server_public : NULL;
}

size_t cma_kube_skipped_groups(const struct cma_kube *k)
{
    return k ? atomic_load(&((struct cma_kube *)k)->skipped_groups) : 0;
}

static bool dup_opt(const char *src, char **dst)
{
    if (!src)
        return true;
    *dst = cma_strdup(src);
    return *dst != NULL;
}

static bool dup_blob(const unsigned char *data, size_t len, struct curl_blob *blob)
{
    if (!data)
        return true;
    blob->data = malloc(len ? len : 1);
    if (!blob->data)
        return false;
    memcpy(blob->data, data, len);
    blob->len = len;
    blob->flags = CURL_BLOB_NOCOPY; /* lives as long as the client */
    return true;
}

static enum cma_errc url_get(CURLU *u, CURLUPart part, char **ret)
{
    char *s = NULL;
    CURLUcode uc = curl_url_get(u, part, &s, 0);
    *ret = NULL;
    if (uc == CURLUE_OUT_OF_MEMORY)
        return CMA_ERR_NOMEM;
    if (uc == CURLUE_OK && s) {
        *ret = cma_strdup(s);
        curl_free(s);
        if (!*ret)
            return CMA_ERR_NOMEM;
    }
    return CMA_OK;
}

/* For tls-server-name: connects to the server's host while naming tls_name in the URL (so the
 * certificate is checked against it); sets connect_to and server. */
static enum cma_errc set_connect_to(struct cma_kube *k, CURLU *u, const char *scheme,
                                    const char *host, const char *port, const char *tls_name,
                                    struct cma_err *reterr)
{
    const char *p = port ? port : (strcmp(scheme, "https") == 0 ? "443" : "80");
    struct cma_buf entry;
    cma_buf_init(&entry, 0);
    bool ok = cma_buf_printf(&entry, "%s:%s:%s:%s", tls_name, p, host, p) == CMA_OK &&
              curl_url_set(u, CURLUPART_HOST, tls_name, 0) == CURLUE_OK &&
              (k->connect_to = curl_slist_append(NULL, cma_buf_str(&entry))) != NULL;
    cma_buf_done(&entry);
    if (!ok)
        return cma_err_set(reterr, CMA_ERR_CONFIG_VALUE, "invalid tls-server-name \"%s\"",
                           tls_name);
    char *full = NULL;
    if (curl_url_get(u, CURLUPART_URL, &full, 0) == CURLUE_OK && full) {
        size_t flen = strlen(full);
        while (flen > 0 && full[flen - 1] == '/')
            flen--;
        k->server = cma_strndup(full, flen);
    }
    curl_free(full);
    if (!k->server)
        return cma_err_set(reterr, CMA_ERR_NOMEM, "out of memory");
    return CMA_OK;
}

/* Checks the server URL and sets server/server_public (and connect_to for tls-server-name). */
static enum cma_errc set_server(struct cma_kube *k, const char *server, const char *tls_name,
                                struct cma_err *reterr)
{
    size_t len = strlen(server);
    while (len > 0 && server[len - 1] == '/')
        len--;
    k->server_public = cma_strndup(server, len);
    if (!k->server_public)
        return cma_err_set(reterr, CMA_ERR_NOMEM, "out of memory");
    CURLU *u = curl_url();
    if (!u)
        return cma_err_set(reterr, CMA_ERR_NOMEM, "out of memory");
    CURLUcode uc = curl_url_set(u, CURLUPART_URL, k->server_public, 0);
    char *scheme = NULL, *host = NULL, *port = NULL;
    enum cma_errc rc = CMA_OK;
    if (uc != CURLUE_OK) {
        rc = cma_err_set(reterr, CMA_ERR_CONFIG_VALUE, "invalid Kubernetes API server \"%s\": %s",
                         k->server_public, curl_url_strerror(uc));
        goto done;
    }
    if (url_get(u, CURLUPART_SCHEME, &scheme) != CMA_OK ||
        url_get(u, CURLUPART_HOST, &host) != CMA_OK ||
        url_get(u, CURLUPART_PORT, &port) != CMA_OK) {
        rc = cma_err_set(reterr, CMA_ERR_NOMEM, "out of memory");
        goto done;
    }
    if (!scheme || !host || (strcmp(scheme, "https") != 0 && strcmp(scheme, "http") != 0)) {
        rc = cma_err_set(reterr, CMA_ERR_CONFIG_VALUE,
                         "invalid Kubernetes API server \"%s\": want https:// or http://",
                         k->server_public);
        goto done;
    }
    if (!tls_name || !tls_name[0]) {
        k->server = cma_strdup(k->server_public);
        if (!k->server)
            rc = cma_err_set(reterr, CMA_ERR_NOMEM, "out of memory");
    } else {
        rc = set_connect_to(k, u, scheme, host, port, tls_name, reterr);
    }
done:
    free(scheme);
    free(host);
    free(port);
    curl_url_cleanup(u);
    return rc;
}

enum cma_errc cma_kube_new_from_conn(const struct cma_kube_conn *conn, int64_t timeout_ms,
                                     struct cma_kube **ret, struct cma_err *reterr)
{
    if (!conn->server || !conn->server[0])
        return cma_err_set(reterr, CMA_ERR_CONFIG_VALUE, "no Kubernetes API server is set");
    struct cma_kube *k = calloc(1, sizeof(*k));
    if (!k)
        return cma_err_set(reterr, CMA_ERR_NOMEM, "out of memory");
    atomic_init(&k->skipped_groups, 0);
    k->timeout_ms = timeout_ms > 0 ? timeout_ms : DEFAULT_TIMEOUT_MS;
    k->insecure_skip_verify = conn->insecure_skip_verify;
    enum cma_errc rc = set_server(k, conn->server, conn->tls_server_name, reterr);
    if (rc == CMA_OK &&
        !(dup_opt(conn->ca_file, &k->ca_file) && dup_opt(conn->cert_file, &k->cert_file) &&
          dup_opt(conn->key_file, &k->key_file) && dup_opt(conn->token, &k->token) &&
          dup_opt(conn->token_file, &k->token_file) && dup_opt(conn->username, &k->username) &&
          dup_opt(conn->password, &k->password) &&
          dup_blob(conn->ca_data, conn->ca_data_len, &k->ca_blob) &&
          dup_blob(conn->cert_data, conn->cert_data_len, &k->cert_blob) &&
          dup_blob(conn->key_data, conn->key_data_len, &k->key_blob)))
        rc = cma_err_set(reterr, CMA_ERR_NOMEM, "out of memory");
    if (rc == CMA_OK && k->username && !k->password && !(k->password = cma_strdup("")))
        rc = cma_err_set(reterr, CMA_ERR_NOMEM, "out of memory");
    if (rc == CMA_OK)
        rc = cma_curl_pool_new(CMA_CURL_POOL_MAX_IDLE, &k->pool, reterr);
    if (rc != CMA_OK) {
        cma_kube_free(k);
        return rc;
    }
    *ret = k;
    return CMA_OK;
}

enum cma_errc cma_kube_new(const char *kubeconfig_path, int64_t timeout_ms, struct cma_kube **ret,
                           struct cma_err *reterr)
{
    struct cma_kube_conn conn;
    enum cma_errc rc = kubeconfig_path && kubeconfig_path[0]
                           ? cma_kubeconfig_load(kubeconfig_path, &conn, reterr)
                           : cma_kubeconfig_in_cluster(NULL, &conn, reterr);
    if (rc != CMA_OK)
        return rc;
    rc = cma_kube_new_from_conn(&conn, timeout_ms, ret, reterr);
    cma_kube_conn_done(&conn);
    return rc;
}

/* ---- one GET ----------------------------------------------------------------------------- */

struct body_sink {
    struct cma_buf body;
    bool too_large;
};

static size_t body_write(char *data, size_t size, size_t nmemb, void *ctx)
{
    struct body_sink *bs = ctx;
    size_t len = size * nmemb;
    if (cma_buf_append(&bs->body, data, len) == CMA_OK)
        return len;
    bs->too_large = true;
    return 0;
}

#define SETOPT(h, opt, val)                                                                        \
    do {                                                                                           \
        CURLcode setopt_rc_ = curl_easy_setopt(h, opt, val);                                       \
        if (setopt_rc_ != CURLE_OK)                                                                \
            return cma_err_set(                                                                    \
                reterr, setopt_rc_ == CURLE_OUT_OF_MEMORY ? CMA_ERR_NOMEM : CMA_ERR_INTERNAL,      \
                "curl option %s: %s", #opt, curl_easy_strerror(setopt_rc_));                       \
    } while (0)

static enum cma_errc configure_tls(const struct cma_kube *k, CURL *h, struct cma_err *reterr)
{
    if (k->ca_blob.data)
        SETOPT(h, CURLOPT_CAINFO_BLOB, &k->ca_blob);
    else if (k->ca_file)
        SETOPT(h, CURLOPT_CAINFO, k->ca_file);
    if (k->cert_blob.data) {
        SETOPT(h, CURLOPT_SSLCERTTYPE, "PEM");
        SETOPT(h, CURLOPT_SSLCERT_BLOB, &k->cert_blob);
    } else if (k->cert_file) {
        SETOPT(h, CURLOPT_SSLCERT, k->cert_file);
    }
    if (k->key_blob.data) {
        SETOPT(h, CURLOPT_SSLKEYTYPE, "PEM");
        SETOPT(h, CURLOPT_SSLKEY_BLOB, &k->key_blob);
    } else if (k->key_file) {
        SETOPT(h, CURLOPT_SSLKEY, k->key_file);
    }
    if (k->insecure_skip_verify) {
        SETOPT(h, CURLOPT_SSL_VERIFYPEER, 0L);
        SETOPT(h, CURLOPT_SSL_VERIFYHOST, 0L);
    }
    if (k->connect_to)
        SETOPT(h, CURLOPT_CONNECT_TO, k->connect_to);
    return CMA_OK;
}

static enum cma_errc configure(const struct cma_kube *k, CURL *h, const char *url,
                               struct curl_slist *headers, struct body_sink *bs, char *errbuf,
                               struct cma_err *reterr)
{
    long connect_ms =
        k->timeout_ms < MAX_CONNECT_TIMEOUT_MS ? (long)k->timeout_ms : MAX_CONNECT_TIMEOUT_MS;
    SETOPT(h, CURLOPT_URL, url);
    SETOPT(h, CURLOPT_PROTOCOLS_STR, "http,https");
    SETOPT(h, CURLOPT_NOSIGNAL, 1L);
    SETOPT(h, CURLOPT_TIMEOUT_MS, (long)k->timeout_ms);
    SETOPT(h, CURLOPT_CONNECTTIMEOUT_MS, connect_ms);
    SETOPT(h, CURLOPT_ACCEPT_ENCODING, "");
    SETOPT(h, CURLOPT_TCP_KEEPALIVE, 1L);
    SETOPT(h, CURLOPT_TCP_NODELAY, 1L);
    SETOPT(h, CURLOPT_USERAGENT, "custom-metrics-adapter/" CMA_VERSION);
    SETOPT(h, CURLOPT_ERRORBUFFER, errbuf);
    SETOPT(h, CURLOPT_HTTPHEADER, headers);
    SETOPT(h, CURLOPT_HTTPGET, 1L);
    SETOPT(h, CURLOPT_WRITEFUNCTION, body_write);
    SETOPT(h, CURLOPT_WRITEDATA, bs);
    if (k->username) {
        SETOPT(h, CURLOPT_HTTPAUTH, (long)CURLAUTH_BASIC);
        SETOPT(h, CURLOPT_USERNAME, k->username);
        SETOPT(h, CURLOPT_PASSWORD, k->password);
    }
    return configure_tls(k, h, reterr);
}

/* Accept plus Authorization (the token file is read now: it rotates). */
static enum cma_errc request_headers(const struct cma_kube *k, const char *accept,
                                     struct curl_slist **ret, struct cma_err *reterr)
{
    struct curl_slist *list = curl_slist_append(NULL, accept);
    if (!list)
        return cma_err_set(reterr, CMA_ERR_NOMEM, "out of memory");
    char *token = NULL;
    if (k->token_file) {
        enum cma_errc rc =
            cma_clients_read_file(k->token_file, TOKEN_FILE_MAX, &token, NULL, reterr);
        if (rc != CMA_OK) {
            curl_slist_free_all(list);
            cma_err_prefix(reterr, "Kubernetes token: ");
            return rc;
        }
        cma_clients_trim(token);
    } else if (k->token) {
        token = cma_strdup(k->token);
        if (!token) {
            curl_slist_free_all(list);
            return cma_err_set(reterr, CMA_ERR_NOMEM, "out of memory");
        }
    }
    if (token && token[0] && !strpbrk(token, "\r\n")) {
        struct cma_buf line;
        cma_buf_init(&line, 0);
        struct curl_slist *l = NULL;
        if (cma_buf_printf(&line, "Authorization: Bearer %s", token) == CMA_OK)
            l = curl_slist_append(list, cma_buf_str(&line));
        cma_buf_done(&line);
        if (!l) {
            free(token);
            curl_slist_free_all(list);
            return cma_err_set(reterr, CMA_ERR_NOMEM, "out of memory");
        }
        list = l;
    }
    free(token);
    *ret = list;
    return CMA_OK;
}

static void log_request(const char *url, long status, CURLcode crc, const char *errbuf,
                        int64_t started)
{
    long long took = (long long)(cma_clock_mono_ms() - started);
    if (crc == CURLE_OK)
        cma_log_v(6, "kube GET %s -> %ld (%lld ms)", url, status, took);
    else
        cma_log_v(6, "kube GET %s -> %s (%lld ms)", url,
                  errbuf[0] ? errbuf : curl_easy_strerror(crc), took);
}

/* GET server + path. CMA_OK whenever an HTTP answer came back (any status, in *ret_status);
 * transport failures → KUBE_UNAVAILABLE. *body is initialised here; caller cma_buf_done()s. */
static enum cma_errc kube_get(struct cma_kube *k, const char *path, const char *accept,
                              struct cma_buf *body, long *ret_status, struct cma_err *reterr)
{
    struct body_sink bs = {.too_large = false};
    cma_buf_init(&bs.body, MAX_BODY_BYTES);
    *body = bs.body;
    struct cma_buf url;
    cma_buf_init(&url, 0);
    if (cma_buf_printf(&url, "%s%s", k->server, path) != CMA_OK)
        return cma_err_set(reterr, CMA_ERR_NOMEM, "out of memory");
    struct curl_slist *headers = NULL;
    enum cma_errc rc = request_headers(k, accept, &headers, reterr);
    CURL *h = rc == CMA_OK ? cma_curl_pool_take(k->pool) : NULL;
    if (rc == CMA_OK && !h)
        rc = cma_err_set(reterr, CMA_ERR_NOMEM, "out of memory (curl handle)");
    char errbuf[CURL_ERROR_SIZE];
    errbuf[0] = '\0';
    if (rc == CMA_OK)
        rc = configure(k, h, cma_buf_str(&url), headers, &bs, errbuf, reterr);
    if (rc != CMA_OK) {
        cma_curl_pool_give(k->pool, h);
        curl_slist_free_all(headers);
        cma_buf_done(&url);
        return rc;
    }
    int64_t started = cma_clock_mono_ms();
    CURLcode crc = curl_easy_perform(h);
    long status = 0;
    curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &status);
    cma_curl_pool_give(k->pool, h);
    curl_slist_free_all(headers);
    if (cma_log_enabled(6)) {
        struct cma_buf pub;
        cma_buf_init(&pub, 0);
        if (cma_buf_printf(&pub, "%s%s", k->server_public, path) == CMA_OK)
            log_request(cma_buf_str(&pub), status, crc, errbuf, started);
        cma_buf_done(&pub);
    }
    cma_buf_done(&url);
    if (crc != CURLE_OK) {
        cma_buf_done(&bs.body);
        char timeout[32];
        const char *why = errbuf[0] ? errbuf : curl_easy_strerror(crc);
        if (crc == CURLE_WRITE_ERROR && bs.too_large)
            return cma_err_set(reterr, CMA_ERR_KUBE_ERROR,
                               "answer of the Kubernetes API to GET %s is over %zu bytes", path,
                               MAX_BODY_BYTES);
        if (crc == CURLE_OPERATION_TIMEDOUT)
            return cma_err_set(reterr, CMA_ERR_KUBE_UNAVAILABLE,
                               "the Kubernetes API did not answer GET %s within %s", path,
                               cma_duration_format(k->timeout_ms, timeout, sizeof(timeout)));
        return cma_err_set(reterr, CMA_ERR_KUBE_UNAVAILABLE,
                           "cannot reach the Kubernetes API at %s: %s", k->server_public, why);
    }
    *body = bs.body;
    *ret_status = status;
    return CMA_OK;
}

/* A non-2xx answer → error with the Status message. */
static enum cma_errc status_error(long status, const char *path, const struct cma_buf *body,
                                  struct cma_err *reterr)
{
    char msg[256];
    cma_kube_status_message(body->ptr, body->len, msg, sizeof(msg));
    size_t plen = strcspn(path, "?");
    enum cma_errc code = CMA_ERR_KUBE_ERROR;
    if (status == 404)
        code = CMA_ERR_NOT_FOUND;
    else if (status >= 500 || status == 429)
        code = CMA_ERR_KUBE_UNAVAILABLE;
    return cma_err_set(reterr, code, "the Kubernetes API answered HTTP %ld for GET %.*s%s%s",
                       status, (int)plen, path, msg[0] ? ": " : "", msg);
}

/* ---- JSON helpers ------------------------------------------------------------------------ */

static json_t *load_json(const char *body, size_t len, struct cma_err *reterr)
{
    json_error_t jerr;
    json_t *root = json_loadb(body ? body : "", body ? len : 0, 0, &jerr);
    if (!root) {
        cma_err_set(reterr, CMA_ERR_KUBE_ERROR, BAD_JSON "%s at line %d column %d", jerr.text,
                    jerr.line, jerr.column);
        return NULL;
    }
    if (!json_is_object(root)) {
        json_decref(root);
        cma_err_set(reterr, CMA_ERR_KUBE_ERROR, BAD_JSON "the answer is not an object");
        return NULL;
    }
    return root;
}

void cma_kube_status_message(const char *body, size_t len, char *out, size_t out_len)
{
    if (out_len == 0)
        return;
    out[0] = '\0';
    json_error_t jerr;
    json_t *root = body && len ? json_loadb(body, len, 0, &jerr) : NULL;
    const char *msg = json_string_value(json_object_get(root, "message"));
    if (msg)
        cma_clients_snippet(msg, strlen(msg), out_len - 1, out, out_len);
    else
        cma_clients_snippet(body, len, 200, out, out_len);
    json_decref(root);
}

enum cma_errc cma_kube_parse_api_versions(const char *body, size_t len, char **ret,
                                          struct cma_err *reterr)
{
    json_t *root = load_json(body, len, reterr);
    if (!root)
        return CMA_ERR_KUBE_ERROR;
    const json_t *versions = json_object_get(root, "versions");
    const char *pick = NULL;
    size_t i;
    const json_t *v;
    json_array_foreach(versions, i, v)
    {
        const char *s = json_string_value(v);
        if (!s || !s[0]) {
            pick = NULL;
            break;
        }
        if (!pick || strcmp(s, "v1") == 0)
            pick = s;
    }
    enum cma_errc rc = CMA_OK;
    if (!pick)
        rc = cma_err_set(reterr, CMA_ERR_KUBE_ERROR,
                         BAD_JSON "/api versions is not a non-empty list of names");
    else if (!(*ret = cma_strdup(pick)))
        rc = cma_err_set(reterr, CMA_ERR_NOMEM, "out of memory");
    json_decref(root);
    return rc;
}

void cma_kube_groups_free(struct cma_kube_group *groups, size_t n)
{
    if (!groups)
        return;
    for (size_t i = 0; i < n; i++) {
        free(groups[i].name);
        free(groups[i].version);
    }
    free(groups);
}

enum cma_errc cma_kube_parse_group_list(const char *body, size_t len, struct cma_kube_group **ret,
                                        size_t *ret_n, struct cma_err *reterr)
{
    json_t *root = load_json(body, len, reterr);
    if (!root)
        return CMA_ERR_KUBE_ERROR;
    const json_t *groups = json_object_get(root, "groups");
    if (!json_is_array(groups)) {
        json_decref(root);
        return cma_err_set(reterr, CMA_ERR_KUBE_ERROR, BAD_JSON "/apis groups is not a list");
    }
    size_t n = json_array_size(groups);
    struct cma_kube_group *out = calloc(n ? n : 1, sizeof(*out));
    if (!out) {
        json_decref(root);
        return cma_err_set(reterr, CMA_ERR_NOMEM, "out of memory");
    }
    size_t k = 0;
    enum cma_errc rc = CMA_OK;
    for (size_t i = 0; i < n && rc == CMA_OK; i++) {
        const json_t *g = json_array_get(groups, i);
        const char *name = json_string_value(json_object_get(g, "name"));
        if (!name || !name[0]) {
            rc = cma_err_set(reterr, CMA_ERR_KUBE_ERROR, BAD_JSON "/apis groups[%zu] has no name",
                             i);
            break;
        }
        const json_t *pref = json_object_get(g, "preferredVersion");
        const char *version = json_string_value(json_object_get(pref, "version"));
        if (!version || !version[0])
            version = json_string_value(
                json_object_get(json_array_get(json_object_get(g, "versions"), 0), "version"));
        if (!version || !version[0])
            continue;
        out[k].name = cma_strdup(name);
        out[k].version = cma_strdup(version);
        k++;
        if (!out[k - 1].name || !out[k - 1].version)
            rc = cma_err_set(reterr, CMA_ERR_NOMEM, "out of memory");
    }
    json_decref(root);
    if (rc != CMA_OK) {
        cma_kube_groups_free(out, k);
        return rc;
    }
    *ret = out;
    *ret_n = k;
    return CMA_OK;
}

static void resource_done(struct cma_api_resource *r)
{
    free(r->group);
    free(r->version);
    free(r->resource);
    free(r->singular);
    free(r->kind);
    for (size_t i = 0; i < r->n_short_names; i++)
        free(r->short_names[i]);
    free(r->short_names);
}

void cma_api_resources_free(struct cma_api_resources *r)
{
    if (!r)
        return;
    for (size_t i = 0; i < r->n; i++)
        resource_done(&r->items[i]);
    free(r->items);
    free(r);
}

static char *lower_dup(const char *s)
{
    char *out = cma_strdup(s);
    for (char *p = out; p && *p; p++)
        if (*p >= 'A' && *p <= 'Z')
            *p = (char)(*p - 'A' + 'a');
    return out;
}

static enum cma_errc fill_resource(const json_t *item, size_t index, const char *group,
                                   const char *version, struct cma_api_resource *r,
                                   struct cma_err *reterr)
{
    const char *name = json_string_value(json_object_get(item, "name"));
    const char *kind = json_string_value(json_object_get(item, "kind"));
    const char *singular = json_string_value(json_object_get(item, "singularName"));
    const json_t *namespaced = json_object_get(item, "namespaced");
    if (!name || !name[0] || !kind || !kind[0] || (namespaced && !json_is_boolean(namespaced)))
        return cma_err_set(reterr, CMA_ERR_KUBE_ERROR,
                           BAD_JSON "resources[%zu] of %s%s%s lacks name, kind or namespaced",
                           index, group, group[0] ? "/" : "", version);
    r->namespaced = json_is_true(namespaced);
    r->group = cma_strdup(group);
    r->version = cma_strdup(version);
    r->resource = cma_strdup(name);
    r->kind = cma_strdup(kind);
    r->singular = singular && singular[0] ? cma_strdup(singular) : lower_dup(kind);
    if (!r->group || !r->version || !r->resource || !r->kind || !r->singular)
        return cma_err_set(reterr, CMA_ERR_NOMEM, "out of memory");
    const json_t *shorts = json_object_get(item, "shortNames");
    size_t ns = json_array_size(shorts);
    if (ns == 0)
        return CMA_OK;
    r->short_names = calloc(ns, sizeof(*r->short_names));
    if (!r->short_names)
        return cma_err_set(reterr, CMA_ERR_NOMEM, "out of memory");
    for (size_t j = 0; j < ns; j++) {
        const char *s = json_string_value(json_array_get(shorts, j));
        if (!s)
            return cma_err_set(reterr, CMA_ERR_KUBE_ERROR,
                               BAD_JSON "resources[%zu].shortNames[%zu] is not a string", index, j);
        if (!(r->short_names[r->n_short_names] = cma_strdup(s)))
            return cma_err_set(reterr, CMA_ERR_NOMEM, "out of memory");
        r->n_short_names++;
    }
    return CMA_OK;
}

enum cma_errc cma_kube_parse_resource_list(const char *body, size_t len, const char *group,
                                           const char *version, struct cma_api_resources *into,
                                           struct cma_err *reterr)
{
    json_t *root = load_json(body, len, reterr);
    if (!root)
        return CMA_ERR_KUBE_ERROR;
    const json_t *resources = json_object_get(root, "resources");
    if (!json_is_array(resources) && !json_is_null(resources)) {
        json_decref(root);
        return cma_err_set(reterr, CMA_ERR_KUBE_ERROR, BAD_JSON "resources of %s%s%s is not a list",
                           group, group[0] ? "/" : "", version);
    }
    size_t n = json_array_size(resources);
    struct cma_api_resource *items = realloc(into->items, (into->n + n + 1) * sizeof(*into->items));
    if (!items) {
        json_decref(root);
        return cma_err_set(reterr, CMA_ERR_NOMEM, "out of memory");
    }
    into->items = items;
    size_t added = 0;
    enum cma_errc rc = CMA_OK;
    for (size_t i = 0; i < n && rc == CMA_OK; i++) {
        const json_t *item = json_array_get(resources, i);
        const char *name = json_string_value(json_object_get(item, "name"));
        if (name && strchr(name, '/'))
            continue; /* subresource */
        struct cma_api_resource *r = &items[into->n + added];
        memset(r, 0, sizeof(*r));
        added++;
        rc = fill_resource(item, i, group, version, r, reterr);
    }
    json_decref(root);
    if (rc != CMA_OK) {
        for (size_t i = 0; i < added; i++)
            resource_done(&items[into->n + i]);
        return rc;
    }
    into->n += added;
    return CMA_OK;
}

enum cma_errc cma_kube_parse_name_page(const char *body, size_t len, char ***names, size_t *n,
                                       size_t *cap, char **ret_continue, struct cma_err *reterr)
{
    *ret_continue = NULL;
    json_t *root = load_json(body, len, reterr);
    if (!root)
        return CMA_ERR_KUBE_ERROR;
    const json_t *items = json_object_get(root, "items");
    if (items && !json_is_array(items) && !json_is_null(items)) {
        json_decref(root);
        return cma_err_set(reterr, CMA_ERR_KUBE_ERROR, BAD_JSON "items is not a list");
    }
    size_t count = json_array_size(items);
    if (*n + count > *cap) {
        size_t want = *cap ? *cap : 16;
        while (want < *n + count)
            want *= 2;
        char **grown = realloc(*names, want * sizeof(**names));
        if (!grown) {
            json_decref(root);
            return cma_err_set(reterr, CMA_ERR_NOMEM, "out of memory");
        }
        *names = grown;
        *cap = want;
    }
    enum cma_errc rc = CMA_OK;
    size_t start = *n;
    for (size_t i = 0; i < count && rc == CMA_OK; i++) {
        const json_t *meta = json_object_get(json_array_get(items, i), "metadata");
        const char *name = json_string_value(json_object_get(meta, "name"));
        if (!name)
            rc = cma_err_set(reterr, CMA_ERR_KUBE_ERROR,
                             BAD_JSON "items[%zu].metadata.name is missing", i);
        else if (!((*names)[*n] = cma_strdup(name)))
            rc = cma_err_set(reterr, CMA_ERR_NOMEM, "out of memory");
        else
            (*n)++;
    }
    const char *cont =
        json_string_value(json_object_get(json_object_get(root, "metadata"), "continue"));
    if (rc == CMA_OK && cont && cont[0] && !(*ret_continue = cma_strdup(cont)))
        rc = cma_err_set(reterr, CMA_ERR_NOMEM, "out of memory");
    json_decref(root);
    if (rc != CMA_OK) {
        for (size_t i = start; i < *n; i++)
            free((*names)[i]);
        *n = start;
    }
    return rc;
}

/* ---- discovery --------------------------------------------------------------------------- */

/* GET path and require 2xx; the body is left in *body on success. */
static enum cma_errc get_ok(struct cma_kube *k, const char *path, struct cma_buf *body,
                            struct cma_err *reterr)
{
    long status = 0;
    enum cma_errc rc = kube_get(k, path, ACCEPT_JSON, body, &status, reterr);
    if (rc != CMA_OK)
        return rc;
    if (status < 200 || status >= 300) {
        rc = status_error(status, path, body, reterr);
        cma_buf_done(body);
    }
    return rc;
}

static enum cma_errc discover_core(struct cma_kube *k, struct cma_api_resources *out,
                                   struct cma_err *reterr)
{
    struct cma_buf body;
    enum cma_errc rc = get_ok(k, "/api", &body, reterr);
    if (rc != CMA_OK)
        return rc;
    char *version = NULL;
    rc = cma_kube_parse_api_versions(body.ptr, body.len, &version, reterr);
    cma_buf_done(&body);
    if (rc != CMA_OK)
        return rc;
    struct cma_buf path;
    cma_buf_init(&path, 0);
    rc = cma_buf_appends(&path, "/api/");
    if (rc == CMA_OK)
        rc = cma_clients_urlencode(&path, version, strlen(version), false);
    if (rc != CMA_OK)
        rc = cma_err_set(reterr, CMA_ERR_NOMEM, "out of memory");
    if (rc == CMA_OK)
        rc = get_ok(k, cma_buf_str(&path), &body, reterr);
    if (rc == CMA_OK) {
        rc = cma_kube_parse_resource_list(body.ptr, body.len, "", version, out, reterr);
        cma_buf_done(&body);
    }
    cma_buf_done(&path);
    free(version);
    return rc;
}

/* One group's resources; HTTP errors and bad documents only skip the group. */
static enum cma_errc discover_group(struct cma_kube *k, const struct cma_kube_group *g,
                                    struct cma_api_resources *out, size_t *skipped,
                                    struct cma_err *reterr)
{
    struct cma_buf path;
    cma_buf_init(&path, 0);
    enum cma_errc rc = cma_buf_appends(&path, "/apis/");
    if (rc == CMA_OK)
        rc = cma_clients_urlencode(&path, g->name, strlen(g->name), false);
    if (rc == CMA_OK)
        rc = cma_buf_appendc(&path, '/');
    if (rc == CMA_OK)
        rc = cma_clients_urlencode(&path, g->version, strlen(g->version), false);
    if (rc != CMA_OK) {
        cma_buf_done(&path);
        return cma_err_set(reterr, CMA_ERR_NOMEM, "out of memory");
    }
    struct cma_buf body;
    long status = 0;
    rc = kube_get(k, cma_buf_str(&path), ACCEPT_JSON, &body, &status, reterr);
    cma_buf_done(&path);
    if (rc != CMA_OK)
        return rc; /* the API server itself is gone: fatal */
    if (status >= 200 && status < 300) {
        struct cma_err perr;
        cma_err_clear(&perr);
        rc = cma_kube_parse_resource_list(body.ptr, body.len, g->name, g->version, out, &perr);
        if (rc == CMA_ERR_NOMEM) {
            cma_buf_done(&body);
            cma_err_copy(reterr, &perr);
            return rc;
        }
        if (rc != CMA_OK)
            (*skipped)++;
    } else {
        (*skipped)++;
    }
    cma_buf_done(&body);
    return CMA_OK;
}

enum cma_errc cma_kube_discover(struct cma_kube *k, struct cma_api_resources **ret,
                                struct cma_err *reterr)
{
    struct cma_api_resources *out = calloc(1, sizeof(*out));
    if (!out)
        return cma_err_set(reterr, CMA_ERR_NOMEM, "out of memory");
    enum cma_errc rc = discover_core(k, out, reterr);
    struct cma_buf body = {0};
    if (rc == CMA_OK)
        rc = get_ok(k, "/apis", &body, reterr);
    struct cma_kube_group *groups = NULL;
    size_t n_groups = 0, skipped = 0;
    if (rc == CMA_OK) {
        rc = cma_kube_parse_group_list(body.ptr, body.len, &groups, &n_groups, reterr);
        cma_buf_done(&body);
    }
    for (size_t i = 0; rc == CMA_OK && i < n_groups; i++)
        rc = discover_group(k, &groups[i], out, &skipped, reterr);
    cma_kube_groups_free(groups, n_groups);
    if (rc != CMA_OK) {
        cma_api_resources_free(out);
        return rc;
    }
    atomic_store(&k->skipped_groups, skipped);
    *ret = out;
    return CMA_OK;
}

/* ---- LIST names -------------------------------------------------------------------------- */

static enum cma_errc list_path(const char *group, const char *version, const char *resource,
                               const char *ns, const char *selector, const char *field_selector,
                               const char *cont, struct cma_buf *path)
{
    enum cma_errc rc;
    if (group && group[0]) {
        rc = cma_buf_appends(path, "/apis/");
        if (rc == CMA_OK)
            rc = cma_clients_urlencode(path, group, strlen(group), false);
        if (rc == CMA_OK)
            rc = cma_buf_appendc(path, '/');
    } else {
        rc = cma_buf_appends(path, "/api/");
    }
    if (rc == CMA_OK)
        rc = cma_clients_urlencode(path, version, strlen(version), false);
    if (rc == CMA_OK && ns && ns[0]) {
        rc = cma_buf_appends(path, "/namespaces/");
        if (rc == CMA_OK)
            rc = cma_clients_urlencode(path, ns, strlen(ns), false);
    }
    if (rc == CMA_OK)
        rc = cma_buf_appendc(path, '/');
    if (rc == CMA_OK)
        rc = cma_clients_urlencode(path, resource, strlen(resource), false);
    if (rc == CMA_OK)
        rc = cma_buf_appendc(path, '?');
    if (rc == CMA_OK && selector && selector[0]) {
        rc = cma_buf_appends(path, "labelSelector=");
        if (rc == CMA_OK)
            rc = cma_clients_urlencode(path, selector, strlen(selector), true);
        if (rc == CMA_OK)
            rc = cma_buf_appendc(path, '&');
    }
    if (rc == CMA_OK && field_selector && field_selector[0]) {
        rc = cma_buf_appends(path, "fieldSelector=");
        if (rc == CMA_OK)
            rc = cma_clients_urlencode(path, field_selector, strlen(field_selector), true);
        if (rc == CMA_OK)
            rc = cma_buf_appendc(path, '&');
    }
    if (rc == CMA_OK)
        rc = cma_buf_printf(path, "limit=%d", LIST_PAGE_LIMIT);
    if (rc == CMA_OK && cont) {
        rc = cma_buf_appends(path, "&continue=");
        if (rc == CMA_OK)
            rc = cma_clients_urlencode(path, cont, strlen(cont), true);
    }
    return rc;
}

static void free_names(char **names, size_t n)
{
    for (size_t i = 0; i < n; i++)
        free(names[i]);
    free(names);
}

enum cma_errc cma_kube_list_names(struct cma_kube *k, const char *group, const char *version,
                                  const char *resource, const char *namespace_,
                                  const char *label_selector, char ***ret_names, size_t *ret_n,
                                  struct cma_err *reterr)
{
    if (!version || !version[0] || !resource || !resource[0])
        return cma_err_set(reterr, CMA_ERR_INTERNAL, "LIST needs a version and a resource");
    char **names = NULL;
    size_t n = 0, cap = 0;
    char *cont = NULL;
    bool restarted = false;
    enum cma_errc rc = CMA_OK;
    for (size_t page = 0;; page++) {
        if (page >= LIST_MAX_PAGES) {
            rc = cma_err_set(reterr, CMA_ERR_KUBE_ERROR, "LIST of %s goes on past %d pages",
                             resource, LIST_MAX_PAGES);
            break;
        }
        struct cma_buf path, body;
        cma_buf_init(&path, 0);
        if (list_path(group, version, resource, namespace_, label_selector, NULL, cont, &path) !=
            CMA_OK) {
            cma_buf_done(&path);
            rc = cma_err_set(reterr, CMA_ERR_NOMEM, "out of memory");
            break;
        }
        long status = 0;
        rc = kube_get(k, cma_buf_str(&path), ACCEPT_METADATA, &body, &status, reterr);
        if (rc == CMA_OK && status == 410 && cont && !restarted) {
            /* The continue token expired: start over once, from the first page. */
            restarted = true;
            free(cont);
            cont = NULL;
            for (size_t i = 0; i < n; i++)
                free(names[i]);
            n = 0;
            cma_buf_done(&body);
            cma_buf_done(&path);
            continue;
        }
        if (rc == CMA_OK && (status < 200 || status >= 300))
            rc = status_error(status, cma_buf_str(&path), &body, reterr);
        free(cont);
        cont = NULL;
        if (rc == CMA_OK)
            rc = cma_kube_parse_name_page(body.ptr, body.len, &names, &n, &cap, &cont, reterr);
        cma_buf_done(&body);
        cma_buf_done(&path);
        if (rc != CMA_OK || !cont)
            break;
    }
    free(cont);
    if (rc != CMA_OK) {
        free_names(names, n);
        return rc;
    }
    if (!names) {
        names = calloc(1, sizeof(*names));
        if (!names)
            return cma_err_set(reterr, CMA_ERR_NOMEM, "out of memory");
    }
    *ret_names = names;
    *ret_n = n;
    return CMA_OK;
}

/* ---- LIST objects ------------------------------------------------------------------------ */

void cma_kube_objects_free(struct cma_kube_object *objs, size_t n)
{
    if (!objs)
        return;
    for (size_t i = 0; i < n; i++) {
        struct cma_kube_object *o = &objs[i];
        free(o->name);
        free(o->namespace_);
        for (size_t l = 0; l < o->n_labels; l++) {
            free(o->label_names[l]);
            free(o->label_values[l]);
        }
        free(o->label_names);
        free(o->label_values);
        free(o->phase);
    }
    free(objs);
}

static bool digits(const char *s, int n, int *ret)
{
    int v = 0;
    for (int i = 0; i < n; i++) {
        if (s[i] < '0' || s[i] > '9')
            return false;
        v = v * 10 + (s[i] - '0');
    }
    *ret = v;
    return true;
}

bool cma_kube_parse_time(const char *s, int64_t *ret_ms)
{
    /* RFC 3339 as metav1.Time unmarshals it: YYYY-MM-DDTHH:MM:SS[.frac](Z|±HH:MM) */
    int year, mon, day, hour, min, sec;
    if (!s || strlen(s) < 20 || !digits(s, 4, &year) || s[4] != '-' || !digits(s + 5, 2, &mon) ||
        s[7] != '-' || !digits(s + 8, 2, &day) || (s[10] != 'T' && s[10] != 't') ||
        !digits(s + 11, 2, &hour) || s[13] != ':' || !digits(s + 14, 2, &min) || s[16] != ':' ||
        !digits(s + 17, 2, &sec))
        return false;
    if (mon < 1 || mon > 12 || day < 1 || day > 31 || hour > 23 || min > 59 || sec > 60)
        return false;
    const char *p = s + 19;
    int64_t frac_ms = 0;
    if (*p == '.') {
        int scale = 100, n = 0;
        for (p++; *p >= '0' && *p <= '9'; p++, n++) {
            frac_ms += (*p - '0') * scale;
            scale /= 10;
        }
        if (n == 0)
            return false;
    }
    int64_t offset_s = 0;
    if (*p == 'Z' || *p == 'z') {
        p++;
    } else if (*p == '+' || *p == '-') {
        int oh, om;
        if (!digits(p + 1, 2, &oh) || p[3] != ':' || !digits(p + 4, 2, &om) || oh > 23 || om > 59)
            return false;
        offset_s = (int64_t)(oh * 3600 + om * 60) * (*p == '-' ? -1 : 1);
        p += 6;
    } else {
        return false;
    }
    if (*p)
        return false;
    struct tm tm = {.tm_year = year - 1900,
                    .tm_mon = mon - 1,
                    .tm_mday = day,
                    .tm_hour = hour,
                    .tm_min = min,
                    .tm_sec = sec};
    time_t t = timegm(&tm);
    *ret_ms = ((int64_t)t - offset_s) * 1000 + frac_ms;
    return true;
}

/* Fills o from one list item (metadata.name required; the rest optional). */
static enum cma_errc fill_object(const json_t *item, size_t index, struct cma_kube_object *o,
                                 struct cma_err *reterr)
{
    const json_t *meta = json_object_get(item, "metadata");
    const char *name = json_string_value(json_object_get(meta, "name"));
    if (!name)
        return cma_err_set(reterr, CMA_ERR_KUBE_ERROR,
                           BAD_JSON "items[%zu].metadata.name is missing", index);
    const char *ns = json_string_value(json_object_get(meta, "namespace"));
    const char *phase =
        json_string_value(json_object_get(json_object_get(item, "status"), "phase"));
    const char *created = json_string_value(json_object_get(meta, "creationTimestamp"));
    const json_t *labels = json_object_get(meta, "labels");
    if (!(o->name = cma_strdup(name)) || (ns && ns[0] && !(o->namespace_ = cma_strdup(ns))) ||
        (phase && !(o->phase = cma_strdup(phase))))
        return cma_err_set(reterr, CMA_ERR_NOMEM, "out of memory");
    if (created && !cma_kube_parse_time(created, &o->creation_ms))
        return cma_err_set(reterr, CMA_ERR_KUBE_ERROR,
                           BAD_JSON
                           "items[%zu].metadata.creationTimestamp \"%.40s\" is not RFC 3339",
                           index, created);
    if (labels && !json_is_object(labels) && !json_is_null(labels))
        return cma_err_set(reterr, CMA_ERR_KUBE_ERROR,
                           BAD_JSON "items[%zu].metadata.labels is not an object", index);
    size_t n_labels = json_object_size(labels);
    if (n_labels) {
        o->label_names = calloc(n_labels, sizeof(*o->label_names));
        o->label_values = calloc(n_labels, sizeof(*o->label_values));
        if (!o->label_names || !o->label_values)
            return cma_err_set(reterr, CMA_ERR_NOMEM, "out of memory");
        const char *key;
        const json_t *value;
        json_object_foreach((json_t *)labels, key, value)
        {
            const char *v = json_string_value(value);
            if (!v)
                return cma_err_set(reterr, CMA_ERR_KUBE_ERROR,
                                   BAD_JSON "items[%zu].metadata.labels[%s] is not a string", index,
                                   key);
            size_t l = o->n_labels;
            o->label_names[l] = cma_strdup(key);
            o->label_values[l] = cma_strdup(v);
            if (o->label_names[l] || o->label_values[l])
                o->n_labels++; /* counted as soon as one is owned, so the free path sees it */
            if (!o->label_names[l] || !o->label_values[l])
                return cma_err_set(reterr, CMA_ERR_NOMEM, "out of memory");
        }
    }
    return CMA_OK;
}

enum cma_errc cma_kube_parse_object_page(const char *body, size_t len,
                                         struct cma_kube_object **objs, size_t *n, size_t *cap,
                                         char **ret_continue, struct cma_err *reterr)
{
    *ret_continue = NULL;
    json_t *root = load_json(body, len, reterr);
    if (!root)
        return CMA_ERR_KUBE_ERROR;
    const json_t *items = json_object_get(root, "items");
    if (items && !json_is_array(items) && !json_is_null(items)) {
        json_decref(root);
        return cma_err_set(reterr, CMA_ERR_KUBE_ERROR, BAD_JSON "items is not a list");
    }
    size_t count = json_array_size(items);
    if (*n + count > *cap) {
        size_t want = *cap ? *cap : 16;
        while (want < *n + count)
            want *= 2;
        struct cma_kube_object *grown = realloc(*objs, want * sizeof(**objs));
        if (!grown) {
            json_decref(root);
            return cma_err_set(reterr, CMA_ERR_NOMEM, "out of memory");
        }
        *objs = grown;
        *cap = want;
    }
    enum cma_errc rc = CMA_OK;
    size_t start = *n;
    for (size_t i = 0; i < count && rc == CMA_OK; i++) {
        struct cma_kube_object *o = &(*objs)[*n];
        memset(o, 0, sizeof(*o));
        (*n)++; /* owned from here on: freed below on failure */
        rc = fill_object(json_array_get(items, i), i, o, reterr);
    }
    const char *cont =
        json_string_value(json_object_get(json_object_get(root, "metadata"), "continue"));
    if (rc == CMA_OK && cont && cont[0] && !(*ret_continue = cma_strdup(cont)))
        rc = cma_err_set(reterr, CMA_ERR_NOMEM, "out of memory");
    json_decref(root);
    if (rc != CMA_OK) {
        /* free the items of this page only; earlier pages stay */
        for (size_t i = start; i < *n; i++) {
            struct cma_kube_object *o = &(*objs)[i];
            free(o->name);
            free(o->namespace_);
            for (size_t l = 0; l < o->n_labels; l++) {
                free(o->label_names[l]);
                free(o->label_values[l]);
            }
            free(o->label_names);
            free(o->label_values);
            free(o->phase);
        }
        *n = start;
    }
    return rc;
}

enum cma_errc cma_kube_list_objects(struct cma_kube *k, const char *group, const char *version,
                                    const char *resource, const char *namespace_,
                                    const char *label_selector, const char *field_selector,
                                    struct cma_kube_object **ret, size_t *ret_n,
                                    struct cma_err *reterr)
{
    if (!version || !version[0] || !resource || !resource[0])
        return cma_err_set(reterr, CMA_ERR_INTERNAL, "LIST needs a version and a resource");
    struct cma_kube_object *objs = NULL;
    size_t n = 0, cap = 0;
    char *cont = NULL;
    bool restarted = false;
    enum cma_errc rc = CMA_OK;
    for (size_t page = 0;; page++) {
        if (page >= LIST_MAX_PAGES) {
            rc = cma_err_set(reterr, CMA_ERR_KUBE_ERROR, "LIST of %s goes on past %d pages",
                             resource, LIST_MAX_PAGES);
            break;
        }
        struct cma_buf path, body;
        cma_buf_init(&path, 0);
        if (list_path(group, version, resource, namespace_, label_selector, field_selector, cont,
                      &path) != CMA_OK) {
            cma_buf_done(&path);
            rc = cma_err_set(reterr, CMA_ERR_NOMEM, "out of memory");
            break;
        }
        long status = 0;
        rc = kube_get(k, cma_buf_str(&path), ACCEPT_METADATA, &body, &status, reterr);
        if (rc == CMA_OK && status == 410 && cont && !restarted) {
            /* The continue token expired: start over once, from the first page. */
            restarted = true;
            free(cont);
            cont = NULL;
            cma_kube_objects_free(objs, n);
            objs = NULL;
            n = cap = 0;
            cma_buf_done(&body);
            cma_buf_done(&path);
            continue;
        }
        if (rc == CMA_OK && (status < 200 || status >= 300))
            rc = status_error(status, cma_buf_str(&path), &body, reterr);
        free(cont);
        cont = NULL;
        if (rc == CMA_OK)
            rc = cma_kube_parse_object_page(body.ptr, body.len, &objs, &n, &cap, &cont, reterr);
        cma_buf_done(&body);
        cma_buf_done(&path);
        if (rc != CMA_OK || !cont)
            break;
    }
    free(cont);
    if (rc != CMA_OK) {
        cma_kube_objects_free(objs, n);
        return rc;
    }
    if (!objs && !(objs = calloc(1, sizeof(*objs))))
        return cma_err_set(reterr, CMA_ERR_NOMEM, "out of memory");
    *ret = objs;
    *ret_n = n;
    return CMA_OK;
}

/* ---- raw requests (auth stage) ----------------------------------------------------------- */

enum cma_errc cma_kube_request(struct cma_kube *k, const char *method, const char *path,
                               const char *body, size_t body_len, struct cma_buf *ret_body,
                               long *ret_status, struct cma_err *reterr)
{
    bool post = strcmp(method, "POST") == 0;
    if (!post)
        return kube_get(k, path, ACCEPT_JSON, ret_body, ret_status, reterr);
    struct body_sink bs = {.too_large = false};
    cma_buf_init(&bs.body, MAX_BODY_BYTES);
    *ret_body = bs.body;
    struct cma_buf url;
    cma_buf_init(&url, 0);
    if (cma_buf_printf(&url, "%s%s", k->server, path) != CMA_OK)
        return cma_err_set(reterr, CMA_ERR_NOMEM, "out of memory");
    struct curl_slist *headers = NULL;
    enum cma_errc rc = request_headers(k, ACCEPT_JSON, &headers, reterr);
    if (rc == CMA_OK) {
        struct curl_slist *l = curl_slist_append(headers, "Content-Type: application/json");
        if (!l)
            rc = cma_err_set(reterr, CMA_ERR_NOMEM, "out of memory");
        else
            headers = l;
    }
    CURL *h = rc == CMA_OK ? cma_curl_pool_take(k->pool) : NULL;
    if (rc == CMA_OK && !h)
        rc = cma_err_set(reterr, CMA_ERR_NOMEM, "out of memory (curl handle)");
    char errbuf[CURL_ERROR_SIZE];
    errbuf[0] = '\0';
    if (rc == CMA_OK)
        rc = configure(k, h, cma_buf_str(&url), headers, &bs, errbuf, reterr);
    if (rc == CMA_OK &&
        (curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)body_len) != CURLE_OK ||
         curl_easy_setopt(h, CURLOPT_POSTFIELDS, body) != CURLE_OK))
        rc = cma_err_set(reterr, CMA_ERR_INTERNAL, "curl: cannot set the POST body");
    if (rc != CMA_OK) {
        cma_curl_pool_give(k->pool, h);
        curl_slist_free_all(headers);
        cma_buf_done(&url);
        return rc;
    }
    CURLcode crc = curl_easy_perform(h);
    long status = 0;
    curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &status);
    cma_curl_pool_give(k->pool, h);
    curl_slist_free_all(headers);
    cma_buf_done(&url);
    cma_log_v(6, "kube POST %s%s -> %ld", k->server_public, path, status);
    if (crc != CURLE_OK) {
        cma_buf_done(&bs.body);
        return cma_err_set(reterr, CMA_ERR_KUBE_UNAVAILABLE,
                           "cannot reach the Kubernetes API at %s: %s", k->server_public,
                           errbuf[0] ? errbuf : curl_easy_strerror(crc));
    }
    *ret_body = bs.body;
    *ret_status = status;
    return CMA_OK;
}

/* ---- LIST pages and WATCH for watch caches ------------------------------------------------ */

/* One LIST page body → objects handed to fn; the page's resourceVersion and continue token. */
static enum cma_errc list_page_apply(const char *body, size_t len, cma_kube_page_fn fn, void *ctx,
                                     char **rv, char **cont, struct cma_err *reterr)
{
    json_t *root = load_json(body, len, reterr);
    if (!root)
        return CMA_ERR_KUBE_ERROR;
    const json_t *items = json_object_get(root, "items");
    const json_t *meta = json_object_get(root, "metadata");
    if (items && !json_is_array(items) && !json_is_null(items)) {
        json_decref(root);
        return cma_err_set(reterr, CMA_ERR_KUBE_ERROR, BAD_JSON "items is not a list");
    }
    size_t count = json_array_size(items);
    struct cma_kube_object *objs = calloc(count ? count : 1, sizeof(*objs));
    if (!objs) {
        json_decref(root);
        return cma_err_set(reterr, CMA_ERR_NOMEM, "out of memory");
    }
    enum cma_errc rc = CMA_OK;
    size_t n = 0;
    for (size_t i = 0; i < count && rc == CMA_OK; i++) {
        n++;
        rc = fill_object(json_array_get(items, i), i, &objs[i], reterr);
    }
    if (rc == CMA_OK && n)
        rc = fn(ctx, objs, n, reterr);
    cma_kube_objects_free(objs, n);
    const char *page_rv = json_string_value(json_object_get(meta, "resourceVersion"));
    const char *page_cont = json_string_value(json_object_get(meta, "continue"));
    if (rc == CMA_OK && !*rv && page_rv && !(*rv = cma_strdup(page_rv)))
        rc = cma_err_set(reterr, CMA_ERR_NOMEM, "out of memory");
    if (rc == CMA_OK && page_cont && page_cont[0] && !(*cont = cma_strdup(page_cont)))
        rc = cma_err_set(reterr, CMA_ERR_NOMEM, "out of memory");
    json_decref(root);
    return rc;
}

enum cma_errc cma_kube_list_pages(struct cma_kube *k, const char *group, const char *version,
                                  const char *resource, cma_kube_page_fn fn, void *ctx,
                                  char **ret_rv, long *ret_status, struct cma_err *reterr)
{
    *ret_rv = NULL;
    *ret_status = 0;
    if (!version || !version[0] || !resource || !resource[0])
        return cma_err_set(reterr, CMA_ERR_INTERNAL, "LIST needs a version and a resource");
    char *rv = NULL, *cont = NULL;
    enum cma_errc rc = CMA_OK;
    for (size_t page = 0;; page++) {
        if (page >= LIST_MAX_PAGES) {
            rc = cma_err_set(reterr, CMA_ERR_KUBE_ERROR, "LIST of %s goes on past %d pages",
                             resource, LIST_MAX_PAGES);
            break;
        }
        struct cma_buf path, body;
        cma_buf_init(&path, 0);
        if (list_path(group, version, resource, NULL, NULL, NULL, cont, &path) != CMA_OK) {
            cma_buf_done(&path);
            rc = cma_err_set(reterr, CMA_ERR_NOMEM, "out of memory");
            break;
        }
        free(cont);
        cont = NULL;
        long status = 0;
        rc = kube_get(k, cma_buf_str(&path), ACCEPT_JSON, &body, &status, reterr);
        if (rc == CMA_OK && (status < 200 || status >= 300)) {
            *ret_status = status;
            rc = status_error(status, cma_buf_str(&path), &body, reterr);
        }
        if (rc == CMA_OK)
            rc = list_page_apply(body.ptr, body.len, fn, ctx, &rv, &cont, reterr);
        cma_buf_done(&body);
        cma_buf_done(&path);
        if (rc != CMA_OK || !cont)
            break;
    }
    free(cont);
    if (rc != CMA_OK) {
        free(rv);
        return rc;
    }
    if (!rv && !(rv = cma_strdup("")))
        return cma_err_set(reterr, CMA_ERR_NOMEM, "out of memory");
    *ret_rv = rv;
    return CMA_OK;
}

#define WATCH_LINE_MAX ((size_t)16 << 20)
#define WATCH_ERROR_BODY_MAX ((size_t)64 << 10)

struct watch_sink {
    CURL *h;
    const struct cma_kube_watch_handler *handler;
    struct cma_buf line; /* the part of a line received so far */
    struct cma_buf error_body;
    long status; /* known once the first body bytes arrive */
    enum cma_errc rc;
    struct cma_err *reterr;
    bool stopped;
};

static size_t watch_write(char *data, size_t size, size_t nmemb, void *ctx)
{
    struct watch_sink *ws = ctx;
    size_t len = size * nmemb;
    if (ws->status == 0)
        curl_easy_getinfo(ws->h, CURLINFO_RESPONSE_CODE, &ws->status);
    if (ws->status < 200 || ws->status >= 300) {
        if (cma_buf_append(&ws->error_body, data, len) != CMA_OK)
            return 0;
        return len;
    }
    if (ws->handler->should_stop && ws->handler->should_stop(ws->handler->ctx)) {
        ws->stopped = true;
        return 0;
    }
    size_t start = 0;
    for (size_t i = 0; i < len; i++) {
        if (data[i] != '\n')
            continue;
        const char *line = data + start;
        size_t line_len = i - start;
        if (ws->line.len) {
            if (cma_buf_append(&ws->line, line, line_len) != CMA_OK) {
                ws->rc = cma_err_set(ws->reterr, CMA_ERR_KUBE_ERROR,
                                     "a watch event is over %zu bytes", WATCH_LINE_MAX);
                return 0;
            }
            line = ws->line.ptr;
            line_len = ws->line.len;
        }
        while (line_len && (line[line_len - 1] == '\r' || line[line_len - 1] == ' '))
            line_len--;
        if (line_len) {
            ws->rc = ws->handler->on_line(ws->handler->ctx, line, line_len, ws->reterr);
            if (ws->rc != CMA_OK)
                return 0;
        }
        cma_buf_clear(&ws->line);
        start = i + 1;
    }
    if (start < len && cma_buf_append(&ws->line, data + start, len - start) != CMA_OK) {
        ws->rc = cma_err_set(ws->reterr, CMA_ERR_KUBE_ERROR, "a watch event is over %zu bytes",
                             WATCH_LINE_MAX);
        return 0;
    }
    return len;
}

static int watch_progress(void *ctx, curl_off_t dltotal, curl_off_t dlnow, curl_off_t ultotal,
                          curl_off_t ulnow)
{
    (void)dltotal;
    (void)dlnow;
    (void)ultotal;
    (void)ulnow;
    struct watch_sink *ws = ctx;
    if (ws->handler->should_stop && ws->handler->should_stop(ws->handler->ctx)) {
        ws->stopped = true;
        return 1;
    }
    return 0;
}

enum cma_errc cma_kube_watch(struct cma_kube *k, const char *group, const char *version,
                             const char *resource, const char *resource_version,
                             int timeout_seconds, const struct cma_kube_watch_handler *h,
                             long *ret_status, struct cma_err *reterr)
{
    *ret_status = 0;
    if (!version || !version[0] || !resource || !resource[0] || !h || !h->on_line)
        return cma_err_set(reterr, CMA_ERR_INTERNAL, "WATCH needs a version and a resource");
    if (timeout_seconds <= 0)
        timeout_seconds = 300;
    struct cma_buf path, url;
    cma_buf_init(&path, 0);
    cma_buf_init(&url, 0);
    enum cma_errc rc = list_path(group, version, resource, NULL, NULL, NULL, NULL, &path);
    if (rc == CMA_OK)
        rc = cma_buf_printf(&path, "&watch=1&allowWatchBookmarks=true&timeoutSeconds=%d",
                            timeout_seconds);
    if (rc == CMA_OK && resource_version && resource_version[0]) {
        rc = cma_buf_appends(&path, "&resourceVersion=");
        if (rc == CMA_OK)
            rc = cma_clients_urlencode(&path, resource_version, strlen(resource_version), true);
    }
    if (rc == CMA_OK)
        rc = cma_buf_printf(&url, "%s%s", k->server, cma_buf_str(&path));
    if (rc != CMA_OK) {
        cma_buf_done(&path);
        cma_buf_done(&url);
        return cma_err_set(reterr, CMA_ERR_NOMEM, "out of memory");
    }
    struct watch_sink ws = {.handler = h, .rc = CMA_OK, .reterr = reterr};
    cma_buf_init(&ws.line, WATCH_LINE_MAX);
    cma_buf_init(&ws.error_body, WATCH_ERROR_BODY_MAX);
    struct curl_slist *headers = NULL;
    rc = request_headers(k, ACCEPT_JSON, &headers, reterr);
    /* A handle of its own, not the pool's: it stays busy for the whole watch. */
    CURL *curl = rc == CMA_OK ? curl_easy_init() : NULL;
    if (rc == CMA_OK && !curl)
        rc = cma_err_set(reterr, CMA_ERR_NOMEM, "out of memory (curl handle)");
    ws.h = curl;
    char errbuf[CURL_ERROR_SIZE];
    errbuf[0] = '\0';
    struct body_sink unused = {.too_large = false};
    cma_buf_init(&unused.body, 1);
    if (rc == CMA_OK)
        rc = configure(k, curl, cma_buf_str(&url), headers, &unused, errbuf, reterr);
    if (rc == CMA_OK) {
        long limit_ms = ((long)timeout_seconds + 30) * 1000L;
        if (curl_easy_setopt(curl, CURLOPT_TIMEOUT_MS, limit_ms) != CURLE_OK ||
            curl_easy_setopt(curl, CURLOPT_WRITEFUNCTION, watch_write) != CURLE_OK ||
            curl_easy_setopt(curl, CURLOPT_WRITEDATA, &ws) != CURLE_OK ||
            curl_easy_setopt(curl, CURLOPT_XFERINFOFUNCTION, watch_progress) != CURLE_OK ||
            curl_easy_setopt(curl, CURLOPT_XFERINFODATA, &ws) != CURLE_OK ||
            curl_easy_setopt(curl, CURLOPT_NOPROGRESS, 0L) != CURLE_OK)
            rc = cma_err_set(reterr, CMA_ERR_INTERNAL, "curl options for a watch");
    }
    if (rc == CMA_OK) {
        int64_t started = cma_clock_mono_ms();
        CURLcode crc = curl_easy_perform(curl);
        long status = 0;
        curl_easy_getinfo(curl, CURLINFO_RESPONSE_CODE, &status);
        if (cma_log_enabled(6)) {
            struct cma_buf pub;
            cma_buf_init(&pub, 0);
            if (cma_buf_printf(&pub, "%s%s", k->server_public, cma_buf_str(&path)) == CMA_OK)
                log_request(cma_buf_str(&pub), status, crc, errbuf, started);
            cma_buf_done(&pub);
        }
        *ret_status = status;
        if (ws.rc != CMA_OK) {
            rc = ws.rc;
        } else if (ws.stopped) {
            rc = CMA_OK;
        } else if (crc != CURLE_OK) {
            rc = cma_err_set(reterr, CMA_ERR_KUBE_UNAVAILABLE,
                             "watch of %s at the Kubernetes API %s ended: %s", resource,
                             k->server_public, errbuf[0] ? errbuf : curl_easy_strerror(crc));
        } else if (status < 200 || status >= 300) {
            rc = status_error(status, cma_buf_str(&path), &ws.error_body, reterr);
        } else if (ws.line.len) {
            /* the last line had no newline: hand it over too */
            rc = h->on_line(h->ctx, ws.line.ptr, ws.line.len, reterr);
        }
    }
    if (curl)
        curl_easy_cleanup(curl);
    curl_slist_free_all(headers);
    cma_buf_done(&ws.line);
    cma_buf_done(&ws.error_body);
    cma_buf_done(&unused.body);
    cma_buf_done(&path);
    cma_buf_done(&url);
    return rc;
}
