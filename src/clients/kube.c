/* kube.c: a small kube-apiserver client: API discovery for the RESTMapper, LIST of object names
 * and objects by label and field selector (one paged LIST loop for every kind of LIST), raw GET
 * and POST for the auth stage, and LIST+WATCH for the watch caches. The requests are here; the
 * decoding of what comes back is kube_decode.c, the HTTP transfer transport.c.
 *
 * DESIGN: the settings (struct cma_kube_conn, from kubeconfig.c) are copied at construction and
 * read-only afterwards, so the client is thread-safe. Credentials (CA, client certificate and
 * key, token or tokenFile, basic auth) are a struct cma_creds (credentials.c) held by the
 * client's transport: checked at construction, every file re-read when it changes (projected
 * service-account tokens rotate), a refused rotation reported to the notifier. tls-server-name is
 * tls_route.c's, as prom.c's: the request URL names the TLS name (SNI and certificate check),
 * curl connects to the configured host (CURLOPT_CONNECT_TO) and Host stays the configured host,
 * as client-go sends it. Transport failures and timeouts are
 * CMA_ERR_KUBE_UNAVAILABLE (KUBE_ERRORS below, transport.c's one mapping); HTTP answers are
 * judged by the caller: discovery skips groups that answer an error (an aggregated API that is
 * down), LIST maps 404 → NOT_FOUND, 5xx and 429 → KUBE_UNAVAILABLE, others → KUBE_ERROR with the
 * Status message, and a LIST of names or objects restarts once from the first page when its
 * continue token has expired (410); the watch caches' LIST hands the 410 to its caller, which
 * re-lists anyway. */
#include "cma/kube.h"

#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cma/buf.h"
#include "cma/str.h"
#include "internal.h"

#define DEFAULT_TIMEOUT_MS 10000
#define MAX_CONNECT_TIMEOUT_MS 5000
#define MAX_BODY_BYTES ((size_t)64 << 20)
#define LIST_PAGE_LIMIT 500
#define LIST_MAX_PAGES 10000
#define WATCH_LINE_MAX ((size_t)16 << 20)
#define WATCH_ERROR_BODY_MAX ((size_t)64 << 10)
#define LIST_ERROR_BODY_MAX ((size_t)64 << 10) /* a streamed LIST page's non-2xx body */
#define ACCEPT_JSON "Accept: application/json"
#define ACCEPT_METADATA                                                                            \
    "Accept: application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1,application/json"

struct cma_kube {
    char *server;        /* what requests go to (host replaced by tls_server_name if set) */
    char *server_public; /* as configured, for reports and errors */
    struct cma_transport tr;
    int64_t timeout_ms;
    struct curl_slist *accept_json, *accept_metadata, *post_json; /* read-only header lists */
    struct curl_slist *merge_patch;                               /* PATCH's */
    atomic_size_t skipped_groups;
};

/* Every failure is "the Kubernetes API is not there" except a refusal it answered. */
static const struct cma_transport_errors KUBE_ERRORS = {
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
    .credentials_hint = false,
    .timeout_names_request = true,
};

/* ---- construction ------------------------------------------------------------------------ */

void cma_kube_free(struct cma_kube *k)
{
    if (!k)
        return;
    free(k->server);
    free(k->server_public);
    cma_transport_done(&k->tr);
    curl_slist_free_all(k->accept_json);
    curl_slist_free_all(k->accept_metadata);
    curl_slist_free_all(k->post_json);
    curl_slist_free_all(k->merge_patch);
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

void cma_kube_set_notifier(struct cma_kube *k, const struct cma_client_notifier *n)
{
    if (k)
        k->tr.notifier = n ? *n : (struct cma_client_notifier){0};
}

/* For tls-server-name (tls_route.c): requests name tls_name in the URL (SNI and certificate
 * check), connect to the server's host and port and send its host in Host. Sets server,
 * connect_to and *host_line. */
static enum cma_errc set_route(struct cma_kube *k, const char *tls_name, char **host_line,
                               struct cma_err *reterr)
{
    struct cma_tls_route r;
    enum cma_errc rc = cma_clients_tls_route(k->server_public, tls_name, &r);
    if (rc == CMA_OK && !(k->tr.connect_to = curl_slist_append(NULL, r.connect_to)))
        rc = CMA_ERR_NOMEM;
    if (rc == CMA_OK) {
        k->server = r.url;
        *host_line = r.host_line;
        r.url = r.host_line = NULL;
    }
    cma_tls_route_done(&r);
    if (rc == CMA_ERR_CONFIG_VALUE)
        return cma_err_set(reterr, rc, "invalid tls-server-name \"%s\"", tls_name);
    if (rc != CMA_OK)
        return cma_err_set(reterr, CMA_ERR_NOMEM, "out of memory");
    return CMA_OK;
}

/* Checks the server URL and sets server/server_public (and connect_to and *host_line for
 * tls-server-name). */
static enum cma_errc set_server(struct cma_kube *k, const char *server, const char *tls_name,
                                char **host_line, struct cma_err *reterr)
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
    char *scheme = NULL, *host = NULL;
    enum cma_errc rc = CMA_OK;
    if (uc != CURLUE_OK) {
        rc = cma_err_set(reterr, CMA_ERR_CONFIG_VALUE, "invalid Kubernetes API server \"%s\": %s",
                         k->server_public, curl_url_strerror(uc));
        goto done;
    }
    if (cma_clients_url_part(u, CURLUPART_SCHEME, &scheme) != CMA_OK ||
        cma_clients_url_part(u, CURLUPART_HOST, &host) != CMA_OK) {
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
        rc = set_route(k, tls_name, host_line, reterr);
    }
done:
    free(scheme);
    free(host);
    curl_url_cleanup(u);
    return rc;
}

/* A header list of a, then b and c when not NULL. */
static enum cma_errc header_list(struct curl_slist **list, const char *a, const char *b,
                                 const char *c, struct cma_err *reterr)
{
    *list = curl_slist_append(NULL, a);
    struct curl_slist *l = *list && b ? curl_slist_append(*list, b) : *list;
    l = l && c ? curl_slist_append(l, c) : l;
    if (!l) {
        curl_slist_free_all(*list);
        *list = NULL;
        return cma_err_set(reterr, CMA_ERR_NOMEM, "out of memory");
    }
    *list = l;
    return CMA_OK;
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
    int64_t connect_ms =
        k->timeout_ms < MAX_CONNECT_TIMEOUT_MS ? k->timeout_ms : MAX_CONNECT_TIMEOUT_MS;
    enum cma_errc rc = cma_transport_init(&k->tr, "kube", &KUBE_ERRORS, connect_ms, reterr);
    k->tr.ask_compressed = true; /* kube-apiserver compresses only answers over 128 KiB */
    char *host = NULL;           /* "Host: ..." under tls-server-name */
    if (rc == CMA_OK)
        rc = set_server(k, conn->server, conn->tls_server_name, &host, reterr);
    struct cma_kube_conn_labels labels;
    struct cma_cred_spec spec;
    cma_kube_conn_cred_spec(conn, &labels, &spec);
    if (rc == CMA_OK)
        rc = cma_creds_new(&spec, &k->tr.creds, reterr);
    if (rc == CMA_OK)
        rc = header_list(&k->accept_json, ACCEPT_JSON, host, NULL, reterr);
    if (rc == CMA_OK)
        rc = header_list(&k->accept_metadata, ACCEPT_METADATA, host, NULL, reterr);
    if (rc == CMA_OK)
        rc =
            header_list(&k->post_json, ACCEPT_JSON, "Content-Type: application/json", host, reterr);
    if (rc == CMA_OK)
        rc = header_list(&k->merge_patch, ACCEPT_JSON, "Content-Type: application/merge-patch+json",
                         host, reterr);
    free(host);
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

/* ---- one request ------------------------------------------------------------------------- */

/* The strings a request needs: URL, the same without credentials (for reports) and "GET /path"
 * (without the query, for messages). */
struct names {
    struct cma_buf url, pub, what;
};

static void names_done(struct names *n)
{
    cma_buf_done(&n->url);
    cma_buf_done(&n->pub);
    cma_buf_done(&n->what);
}

static enum cma_errc names_of(const struct cma_kube *k, const char *method, const char *path,
                              struct names *n, struct cma_err *reterr)
{
    cma_buf_init(&n->url, 0);
    cma_buf_init(&n->pub, 0);
    cma_buf_init(&n->what, 0);
    enum cma_errc rc = cma_buf_printf(&n->url, "%s%s", k->server, path);
    if (rc == CMA_OK && k->tr.notifier.on_request)
        rc = cma_buf_printf(&n->pub, "%s%s", k->server_public, path);
    if (rc == CMA_OK)
        rc = cma_buf_printf(&n->what, "%s %.*s", method, (int)strcspn(path, "?"), path);
    if (rc != CMA_OK) {
        names_done(n);
        return cma_err_set(reterr, CMA_ERR_NOMEM, "out of memory");
    }
    return CMA_OK;
}

/* method server + path. CMA_OK whenever an HTTP answer came back (any status, in *ret_status);
 * transport failures → KUBE_UNAVAILABLE. *body is initialised here; caller cma_buf_done()s. */
static enum cma_errc kube_call(struct cma_kube *k, const char *method, const char *path,
                               struct curl_slist *headers, const char *req_body, size_t req_len,
                               struct cma_buf *body, long *ret_status, struct cma_err *reterr)
{
    cma_buf_init(body, MAX_BODY_BYTES);
    struct names n;
    if (names_of(k, method, path, &n, reterr) != CMA_OK)
        return CMA_ERR_NOMEM;
    struct cma_http_request req = {
        .method = method,
        .url = cma_buf_str(&n.url),
        .public_url = cma_buf_str(&n.pub),
        .what = cma_buf_str(&n.what),
        .where = k->server_public,
        .headers = headers,
        .body = req_body,
        .body_len = req_len,
        .timeout_ms = k->timeout_ms,
        .gather = body,
    };
    struct cma_http_result res;
    enum cma_errc rc = cma_transport_perform(&k->tr, &req, &res, reterr);
    names_done(&n);
    if (rc != CMA_OK) {
        cma_buf_done(body);
        return rc;
    }
    *ret_status = res.status;
    return CMA_OK;
}

static enum cma_errc kube_get(struct cma_kube *k, const char *path, struct curl_slist *accept,
                              struct cma_buf *body, long *ret_status, struct cma_err *reterr)
{
    return kube_call(k, "GET", path, accept, NULL, 0, body, ret_status, reterr);
}

static bool is_success(long status)
{
    return status >= 200 && status < 300;
}

/* A non-2xx answer to GET path → error with the Status message. */
static enum cma_errc status_error(long status, const char *path, const struct cma_buf *body,
                                  struct cma_err *reterr)
{
    char msg[256];
    cma_kube_status_message(body->ptr, body->len, msg, sizeof(msg));
    char what[1024];
    snprintf(what, sizeof(what), "GET %.*s", (int)strcspn(path, "?"), path);
    return cma_transport_status_error(&KUBE_ERRORS, status, NULL, what, msg, reterr);
}

/* ---- discovery --------------------------------------------------------------------------- */

/* GET path and require 2xx; the body is left in *body on success. */
static enum cma_errc get_ok(struct cma_kube *k, const char *path, struct cma_buf *body,
                            struct cma_err *reterr)
{
    long status = 0;
    enum cma_errc rc = kube_get(k, path, k->accept_json, body, &status, reterr);
    if (rc != CMA_OK)
        return rc;
    if (!is_success(status)) {
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
    rc = kube_get(k, cma_buf_str(&path), k->accept_json, &body, &status, reterr);
    cma_buf_done(&path);
    if (rc != CMA_OK)
        return rc; /* the API server itself is gone: fatal */
    if (is_success(status)) {
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

/* ---- LIST paths ---------------------------------------------------------------------------- */

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

/* ---- the paged LIST ---------------------------------------------------------------------- */

struct list_query {
    const char *group, *version, *resource, *ns, *label_selector, *field_selector;
    struct curl_slist *accept;
};

/* What a LIST does with its pages: each 2xx page whole (page), or as it streams in (feed). */
struct pager {
    /* One 2xx page: take its items, set *ret_continue (NULL on the last page). */
    enum cma_errc (*page)(void *ctx, const struct cma_buf *body, char **ret_continue,
                          struct cma_err *reterr);
    /* Or, when set, a 2xx page's bytes as they arrive, never gathered (the error body of any
     * other status is); then end (ok false: the page failed before its end, only clean up),
     * which sets *ret_continue. */
    enum cma_errc (*feed)(void *ctx, const char *data, size_t len, struct cma_err *reterr);
    enum cma_errc (*end)(void *ctx, bool ok, char **ret_continue, struct cma_err *reterr);
    /* Drops what earlier pages gave: the LIST starts over once when its continue token has
     * expired (410). NULL: a 410 is an error like any other. */
    void (*restart)(void *ctx);
    void *ctx;
};

/* A streamed page: 2xx bytes go to the pager's feed, any other status's body is gathered. */
struct page_sink {
    CURL *h; /* the transfer's, set by the transport before it runs */
    const struct pager *p;
    long status; /* known once the first body bytes arrive */
    struct cma_buf *error_body;
    enum cma_errc rc;
    struct cma_err *reterr;
};

static size_t page_write(char *data, size_t size, size_t nmemb, void *ctx)
{
    struct page_sink *ps = ctx;
    size_t len = size * nmemb;
    if (ps->status == 0)
        curl_easy_getinfo(ps->h, CURLINFO_RESPONSE_CODE, &ps->status);
    if (!is_success(ps->status)) {
        size_t room = ps->error_body->max - ps->error_body->len;
        if (room && cma_buf_append(ps->error_body, data, len < room ? len : room) != CMA_OK)
            return 0;
        return len; /* the Status is at the start: the rest of a long body is dropped */
    }
    ps->rc = ps->p->feed(ps->p->ctx, data, len, ps->reterr);
    return ps->rc == CMA_OK ? len : 0;
}

/* GET path with each 2xx byte handed to p->feed as it arrives; *body (initialised here, caller
 * cma_buf_done()s) gets the body of any other status. Returns as kube_get does, or feed's error. */
static enum cma_errc kube_get_streamed(struct cma_kube *k, const char *path,
                                       struct curl_slist *accept, const struct pager *p,
                                       struct cma_buf *body, long *ret_status,
                                       struct cma_err *reterr)
{
    cma_buf_init(body, LIST_ERROR_BODY_MAX);
    struct names n;
    if (names_of(k, "GET", path, &n, reterr) != CMA_OK)
        return CMA_ERR_NOMEM;
    struct page_sink ps = {.p = p, .error_body = body, .rc = CMA_OK, .reterr = reterr};
    struct cma_http_request req = {
        .method = "GET",
        .url = cma_buf_str(&n.url),
        .public_url = cma_buf_str(&n.pub),
        .what = cma_buf_str(&n.what),
        .where = k->server_public,
        .headers = accept,
        .timeout_ms = k->timeout_ms,
        .write = page_write,
        .write_ctx = &ps,
        .handle = &ps.h,
    };
    struct cma_http_result res;
    struct cma_err perr;
    cma_err_clear(&perr);
    enum cma_errc rc = cma_transport_perform(&k->tr, &req, &res, &perr);
    names_done(&n);
    *ret_status = res.status;
    if (ps.rc != CMA_OK)
        return ps.rc; /* feed's error, already in *reterr */
    if (rc != CMA_OK)
        cma_err_copy(reterr, &perr);
    return rc;
}

/* GET path: the page whole in *body, or streamed to p->feed (see struct pager). */
static enum cma_errc list_get(struct cma_kube *k, const char *path, const struct list_query *q,
                              const struct pager *p, struct cma_buf *body, long *ret_status,
                              struct cma_err *reterr)
{
    if (p->feed)
        return kube_get_streamed(k, path, q->accept, p, body, ret_status, reterr);
    return kube_get(k, path, q->accept, body, ret_status, reterr);
}

/* A 2xx page's items, the page whole or at the end of its stream; *cont: its continue token. */
static enum cma_errc page_take(const struct pager *p, const struct cma_buf *body, char **cont,
                               struct cma_err *reterr)
{
    if (p->feed)
        return p->end(p->ctx, true, cont, reterr);
    return p->page(p->ctx, body, cont, reterr);
}

/* A page that did not end well: a streaming pager drops what it began. */
static void page_drop(const struct pager *p)
{
    if (p->feed)
        p->end(p->ctx, false, NULL, NULL);
}

/* One page: GET with *cont (replaced by the next token, NULL at the end); *more tells whether
 * another page follows (the next one, or the first again after an expired token). */
static enum cma_errc list_one(struct cma_kube *k, const struct list_query *q, const struct pager *p,
                              char **cont, bool *restarted, bool *more, long *ret_status,
                              struct cma_err *reterr)
{
    struct cma_buf path, body;
    cma_buf_init(&path, 0);
    if (list_path(q->group, q->version, q->resource, q->ns, q->label_selector, q->field_selector,
                  *cont, &path) != CMA_OK) {
        cma_buf_done(&path);
        return cma_err_set(reterr, CMA_ERR_NOMEM, "out of memory");
    }
    long status = 0;
    enum cma_errc rc = list_get(k, cma_buf_str(&path), q, p, &body, &status, reterr);
    bool expired = rc == CMA_OK && status == 410 && *cont && p->restart && !*restarted;
    free(*cont);
    *cont = NULL;
    if (expired) {
        *restarted = true; /* start over once, from the first page */
        p->restart(p->ctx);
    } else if (rc == CMA_OK && !is_success(status)) {
        *ret_status = status;
        rc = status_error(status, cma_buf_str(&path), &body, reterr);
    } else if (rc == CMA_OK) {
        rc = page_take(p, &body, cont, reterr);
    }
    if (rc != CMA_OK || expired)
        page_drop(p);
    *more = rc == CMA_OK && (expired || *cont);
    cma_buf_done(&body);
    cma_buf_done(&path);
    return rc;
}

/* Every page of q, in order (limit 500 a page, at most LIST_MAX_PAGES). *ret_status is the HTTP
 * status of a page that failed with one, 0 otherwise. */
static enum cma_errc list_paged(struct cma_kube *k, const struct list_query *q,
                                const struct pager *p, long *ret_status, struct cma_err *reterr)
{
    *ret_status = 0;
    if (!q->version || !q->version[0] || !q->resource || !q->resource[0])
        return cma_err_set(reterr, CMA_ERR_INTERNAL, "LIST needs a version and a resource");
    char *cont = NULL;
    bool restarted = false, more = true;
    enum cma_errc rc = CMA_OK;
    for (size_t page = 0; rc == CMA_OK && more; page++) {
        if (page >= LIST_MAX_PAGES)
            rc = cma_err_set(reterr, CMA_ERR_KUBE_ERROR, "LIST of %s goes on past %d pages",
                             q->resource, LIST_MAX_PAGES);
        else
            rc = list_one(k, q, p, &cont, &restarted, &more, ret_status, reterr);
    }
    free(cont);
    return rc;
}

/* ---- LIST names and objects -------------------------------------------------------------- */

struct names_acc {
    char **v;
    size_t n, cap;
};

static enum cma_errc names_page(void *ctx, const struct cma_buf *body, char **ret_continue,
                                struct cma_err *reterr)
{
    struct names_acc *a = ctx;
    return cma_kube_parse_name_page(body->ptr, body->len, &a->v, &a->n, &a->cap, ret_continue,
                                    reterr);
}

static void names_restart(void *ctx)
{
    struct names_acc *a = ctx;
    for (size_t i = 0; i < a->n; i++)
        free(a->v[i]);
    a->n = 0;
}

enum cma_errc cma_kube_list_names(struct cma_kube *k, const char *group, const char *version,
                                  const char *resource, const char *namespace_,
                                  const char *label_selector, char ***ret_names, size_t *ret_n,
                                  struct cma_err *reterr)
{
    struct list_query q = {group,          version, resource,          namespace_,
                           label_selector, NULL,    k->accept_metadata};
    struct names_acc acc = {0};
    struct pager p = {.page = names_page, .restart = names_restart, .ctx = &acc};
    long status = 0;
    enum cma_errc rc = list_paged(k, &q, &p, &status, reterr);
    if (rc == CMA_OK && !acc.v && !(acc.v = calloc(1, sizeof(*acc.v))))
        rc = cma_err_set(reterr, CMA_ERR_NOMEM, "out of memory");
    if (rc != CMA_OK) {
        names_restart(&acc);
        free(acc.v);
        return rc;
    }
    *ret_names = acc.v;
    *ret_n = acc.n;
    return CMA_OK;
}

struct objects_acc {
    struct cma_kube_object *v;
    size_t n, cap;
};

static enum cma_errc objects_page(void *ctx, const struct cma_buf *body, char **ret_continue,
                                  struct cma_err *reterr)
{
    struct objects_acc *a = ctx;
    return cma_kube_parse_object_page(body->ptr, body->len, &a->v, &a->n, &a->cap, ret_continue,
                                      reterr);
}

static void objects_restart(void *ctx)
{
    struct objects_acc *a = ctx;
    cma_kube_objects_free(a->v, a->n);
    *a = (struct objects_acc){0};
}

enum cma_errc cma_kube_list_objects(struct cma_kube *k, const char *group, const char *version,
                                    const char *resource, const char *namespace_,
                                    const char *label_selector, const char *field_selector,
                                    struct cma_kube_object **ret, size_t *ret_n,
                                    struct cma_err *reterr)
{
    struct list_query q = {group,          version,        resource,          namespace_,
                           label_selector, field_selector, k->accept_metadata};
    struct objects_acc acc = {0};
    struct pager p = {.page = objects_page, .restart = objects_restart, .ctx = &acc};
    long status = 0;
    enum cma_errc rc = list_paged(k, &q, &p, &status, reterr);
    if (rc == CMA_OK && !acc.v && !(acc.v = calloc(1, sizeof(*acc.v))))
        rc = cma_err_set(reterr, CMA_ERR_NOMEM, "out of memory");
    if (rc != CMA_OK) {
        objects_restart(&acc);
        return rc;
    }
    *ret = acc.v;
    *ret_n = acc.n;
    return CMA_OK;
}

/* ---- raw requests (auth stage) ----------------------------------------------------------- */

enum cma_errc cma_kube_request(struct cma_kube *k, const char *method, const char *path,
                               const char *body, size_t body_len, struct cma_buf *ret_body,
                               long *ret_status, struct cma_err *reterr)
{
    bool patch = strcmp(method, "PATCH") == 0;
    bool post = patch || strcmp(method, "POST") == 0;
    return kube_call(k,
                     patch  ? "PATCH"
                     : post ? "POST"
                            : "GET",
                     path,
                     patch  ? k->merge_patch
                     : post ? k->post_json
                            : k->accept_json,
                     post ? body : NULL, post ? body_len : 0, ret_body, ret_status, reterr);
}

/* ---- LIST pages and WATCH for watch caches ------------------------------------------------ */

struct pages_acc {
    cma_kube_page_fn fn;
    void *ctx;
    struct cma_kube_page_parser *parser; /* the page being read */
    char *rv;                            /* the first page's resourceVersion: the list's */
};

/* A page's bytes go to its parser (made at its first bytes), each object to the caller's fn as
 * soon as it is read: neither the page nor its objects are kept. */
static enum cma_errc pages_feed(void *ctx, const char *data, size_t len, struct cma_err *reterr)
{
    struct pages_acc *a = ctx;
    if (!a->parser && cma_kube_page_parser_new(a->fn, a->ctx, &a->parser) != CMA_OK)
        return cma_err_set(reterr, CMA_ERR_NOMEM, "out of memory");
    return cma_kube_page_parser_feed(a->parser, data, len, reterr);
}

static enum cma_errc pages_end(void *ctx, bool ok, char **ret_continue, struct cma_err *reterr)
{
    struct pages_acc *a = ctx;
    enum cma_errc rc = CMA_OK;
    if (ok) {
        char *rv = NULL;
        if (!a->parser) /* a 2xx answer without a body */
            rc = cma_err_set(reterr, CMA_ERR_KUBE_ERROR,
                             "unexpected JSON from the Kubernetes API: an empty answer");
        else
            rc = cma_kube_page_parser_finish(a->parser, a->rv ? NULL : &rv, ret_continue, reterr);
        if (rc == CMA_OK && !a->rv)
            a->rv = rv;
    }
    cma_kube_page_parser_free(a->parser);
    a->parser = NULL;
    return rc;
}

enum cma_errc cma_kube_list_pages(struct cma_kube *k, const char *group, const char *version,
                                  const char *resource, cma_kube_page_fn fn, void *ctx,
                                  char **ret_rv, long *ret_status, struct cma_err *reterr)
{
    *ret_rv = NULL;
    struct list_query q = {group, version, resource, NULL, NULL, NULL, k->accept_json};
    struct pages_acc acc = {.fn = fn, .ctx = ctx};
    struct pager p = {.feed = pages_feed, .end = pages_end, .ctx = &acc};
    enum cma_errc rc = list_paged(k, &q, &p, ret_status, reterr);
    if (rc == CMA_OK && !acc.rv && !(acc.rv = cma_strdup("")))
        rc = cma_err_set(reterr, CMA_ERR_NOMEM, "out of memory");
    if (rc != CMA_OK) {
        free(acc.rv);
        return rc;
    }
    *ret_rv = acc.rv;
    return CMA_OK;
}

struct watch_sink {
    CURL *h; /* the transfer's, set by the transport before it runs */
    const struct cma_kube_watch_handler *handler;
    struct cma_kube_lines lines;
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
    if (!is_success(ws->status))
        return cma_buf_append(&ws->error_body, data, len) == CMA_OK ? len : 0;
    const struct cma_kube_watch_handler *h = ws->handler;
    if (h->should_stop && h->should_stop(h->ctx)) {
        ws->stopped = true;
        return 0;
    }
    ws->rc = cma_kube_lines_feed(&ws->lines, data, len, h->on_line, h->ctx, ws->reterr);
    return ws->rc == CMA_OK ? len : 0;
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

static enum cma_errc watch_path(const char *group, const char *version, const char *resource,
                                const char *resource_version, int timeout_seconds,
                                struct cma_buf *path)
{
    enum cma_errc rc = list_path(group, version, resource, NULL, NULL, NULL, NULL, path);
    if (rc == CMA_OK)
        rc = cma_buf_printf(path, "&watch=1&allowWatchBookmarks=true&timeoutSeconds=%d",
                            timeout_seconds);
    if (rc == CMA_OK && resource_version && resource_version[0]) {
        rc = cma_buf_appends(path, "&resourceVersion=");
        if (rc == CMA_OK)
            rc = cma_clients_urlencode(path, resource_version, strlen(resource_version), true);
    }
    return rc;
}

/* After the stream: the handler's error, a stop, the transport's failure, the Status of a
 * refusal, or the last line when it had no newline. */
static enum cma_errc watch_outcome(struct watch_sink *ws, enum cma_errc rc,
                                   const struct cma_err *perr, const char *resource,
                                   const char *path, struct cma_err *reterr)
{
    if (ws->rc != CMA_OK)
        return ws->rc;
    if (ws->stopped)
        return CMA_OK;
    if (rc != CMA_OK) {
        cma_err_copy(reterr, perr);
        cma_err_prefix(reterr, "watch of %s ended: ", resource);
        return rc;
    }
    if (!is_success(ws->status))
        return status_error(ws->status, path, &ws->error_body, reterr);
    const struct cma_kube_watch_handler *h = ws->handler;
    return cma_kube_lines_finish(&ws->lines, h->on_line, h->ctx, reterr);
}

static enum cma_errc watch_run(struct cma_kube *k, struct names *n, int timeout_seconds,
                               struct watch_sink *ws, long *ret_status, struct cma_err *perr)
{
    struct cma_http_request req = {
        .method = "GET",
        .url = cma_buf_str(&n->url),
        .public_url = cma_buf_str(&n->pub),
        .what = cma_buf_str(&n->what),
        .where = k->server_public,
        .headers = k->accept_json,
        .timeout_ms = ((int64_t)timeout_seconds + 30) * 1000,
        .write = watch_write,
        .write_ctx = ws,
        .progress = watch_progress,
        .progress_ctx = ws,
        .handle = &ws->h,
        .dedicated = true, /* it stays busy for the whole watch: not the pool's */
    };
    struct cma_http_result res;
    enum cma_errc rc = cma_transport_perform(&k->tr, &req, &res, perr);
    *ret_status = res.status;
    if (ws->status == 0)
        ws->status = res.status;
    return rc;
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
    struct cma_buf path;
    cma_buf_init(&path, 0);
    struct names n;
    if (watch_path(group, version, resource, resource_version, timeout_seconds, &path) != CMA_OK ||
        names_of(k, "GET", cma_buf_str(&path), &n, reterr) != CMA_OK) {
        cma_buf_done(&path);
        return cma_err_set(reterr, CMA_ERR_NOMEM, "out of memory");
    }
    struct watch_sink ws = {.handler = h, .rc = CMA_OK, .reterr = reterr};
    cma_kube_lines_init(&ws.lines, WATCH_LINE_MAX);
    cma_buf_init(&ws.error_body, WATCH_ERROR_BODY_MAX);
    struct cma_err perr;
    cma_err_clear(&perr);
    enum cma_errc rc = watch_run(k, &n, timeout_seconds, &ws, ret_status, &perr);
    rc = watch_outcome(&ws, rc, &perr, resource, cma_buf_str(&path), reterr);
    cma_kube_lines_done(&ws.lines);
    cma_buf_done(&ws.error_body);
    names_done(&n);
    cma_buf_done(&path);
    return rc;
}
