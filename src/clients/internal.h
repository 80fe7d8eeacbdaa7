/* internal.h: what the files of the clients stage share and what their unit tests reach into.
 * Not a public contract: only the src/clients sources and tests/unit/{prom_client,kube}_test.c
 * include it.
 *
 * - curl_pool.c: a bounded, mutex-protected pool of CURL easy handles (thread-safe) plus the
 *   helpers both HTTP clients use (URL encoding, curl error classes, body snippets, file reads).
 * - transport.c: the one place an HTTP request is performed, for prom.c and kube.c alike: a
 *   handle from the pool, credentials + TLS + timeouts, one mapping of transport failures and
 *   HTTP statuses to cma_err codes, and a report of each request to the client's notifier.
 * - kubeconfig.c: kubeconfig / in-cluster settings → struct cma_kube_conn (plain data).
 * - kube_decode.c: the pure decoders of kube-apiserver bodies (discovery documents, LIST pages,
 *   Status bodies, RFC 3339 times, watch-stream lines).
 * - kube.c: a constructor from a struct cma_kube_conn (tests use it with a plain-HTTP fake
 *   server).
 * - credentials.c (contract in cma/credentials.h): the snapshot a request sets on its handle.
 * - tls_route.c: a kubeconfig's tls-server-name as a renamed URL, a CURLOPT_CONNECT_TO entry and
 *   a Host line, for both clients.
 * - listwatch.c: the LIST+WATCH driver of the watch caches (objcache.c, metricrule_watch.c). */
#ifndef CMA_CLIENTS_INTERNAL_H
#define CMA_CLIENTS_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <curl/curl.h>

#include "cma/buf.h"
#include "cma/credentials.h"
#include "cma/err.h"
#include "cma/kube.h"

/* ---- curl_pool.c ------------------------------------------------------------------------- */

/* Idle handles kept by a pool; handles beyond this are cleaned up when given back. */
#define CMA_CURL_POOL_MAX_IDLE 16

struct cma_curl_pool;

/* Runs curl_global_init() once per process (pthread_once) and creates an empty pool.
 * Caller owns: cma_curl_pool_free(). */
enum cma_errc cma_curl_pool_new(size_t max_idle, struct cma_curl_pool **ret,
                                struct cma_err *reterr);
/* Cleans up every idle handle. Handles still taken must have been given back before. */
void cma_curl_pool_free(struct cma_curl_pool *pool);
/* An idle handle (reset with curl_easy_reset, connection cache kept) or a new one.
 * NULL only when out of memory. Give it back with cma_curl_pool_give(). Thread-safe. */
CURL *cma_curl_pool_take(struct cma_curl_pool *pool);
/* Returns a handle to the pool (or cleans it up when the pool is full). h may be NULL. */
void cma_curl_pool_give(struct cma_curl_pool *pool, CURL *h);

/* Appends s[0..len) percent-encoded as Go's url.QueryEscape does (unreserved bytes kept, ' '
 * → '+', everything else %XX) when plus_for_space, or as url.PathEscape-like (' ' → %20). */
enum cma_errc cma_clients_urlencode(struct cma_buf *b, const char *s, size_t len,
                                    bool plus_for_space);

/* Fetches one part of a parsed URL as a new string; *ret NULL when the part is absent.
 * CMA_ERR_NOMEM only. */
enum cma_errc cma_clients_url_part(CURLU *u, CURLUPart part, char **ret);

/* Appends unix milliseconds as "seconds.mmm" (1732227811123 → "1732227811.123"). */
enum cma_errc cma_clients_append_unix_seconds(struct cma_buf *b, int64_t ms);

/* Copies at most max bytes of body into out (NUL-terminated, out_len > 0) as one printable
 * line: control bytes become spaces, invalid or cut UTF-8 becomes '?'; trailing blanks go. */
void cma_clients_snippet(const char *body, size_t len, size_t max, char *out, size_t out_len);

/* ---- excerpt.c --------------------------------------------------------------------------- */

/* What of an error answer's body goes into a message (excerpt.c): a JSON object's `error`
 * field (after its `errorType`), the text of markup (a gateway's HTML error page: tags,
 * comments, <head>, <script> and <style> dropped, entities decoded, blanks folded), else the
 * body as one line: at most max bytes into out (NUL-terminated, "" for an empty body), as
 * cma_clients_snippet writes them, never markup. */
void cma_clients_excerpt(const char *body, size_t len, size_t max, char *out, size_t out_len);

/* Classes of CURLcode used by both clients. */
enum cma_curl_class {
    CMA_CURL_OK,
    CMA_CURL_TIMEOUT,     /* CURLE_OPERATION_TIMEDOUT */
    CMA_CURL_UNREACHABLE, /* connect, DNS, TLS, send/recv, connection cut */
    CMA_CURL_BAD_REPLY,   /* the peer answered something that is not HTTP, or bad encoding */
    CMA_CURL_ABORTED,     /* our write callback stopped the transfer */
    CMA_CURL_OTHER,
};
enum cma_curl_class cma_clients_curl_class(CURLcode rc);

/* Reads a whole small file (at most max bytes) into a new NUL-terminated string. CMA_ERR_IO
 * with the path and strerror when it cannot be read; CMA_ERR_TOO_LARGE over max. */
enum cma_errc cma_clients_read_file(const char *path, size_t max, char **ret, size_t *ret_len,
                                    struct cma_err *reterr);

/* Trims ASCII whitespace (space, \t, \r, \n, \v, \f) at both ends in place; returns s. */
char *cma_clients_trim(char *s);

/* ---- credentials.c ---------------------------------------------------------------------- */

/* The credentials one request uses: immutable, reference-counted (see credentials.c). */
struct cma_cred_snap {
    atomic_uint refs;
    char *authorization; /* "Authorization: Bearer <token>", or NULL */
    char *username;      /* basic auth when non-NULL, with password */
    char *password;
    unsigned char *ca; /* PEM bytes (NUL-terminated), NULL = unset */
    size_t ca_len;
    unsigned char *cert;
    size_t cert_len;
    unsigned char *key;
    size_t key_len;
    bool insecure_skip_verify;
};

/* Refreshes (as cma_creds_refresh, *warning set once per refused change) and returns a
 * reference to the current snapshot; never NULL. Release it after the transfer. */
struct cma_cred_snap *cma_creds_take(struct cma_creds *c, struct cma_err *warning);
void cma_cred_snap_release(struct cma_cred_snap *s);
/* Sets the CA, client certificate and key (blobs, copied by curl), insecure-skip-verify and
 * basic auth on h. The Authorization line is the caller's to send. */
enum cma_errc cma_cred_snap_setopt(const struct cma_cred_snap *s, CURL *h, struct cma_err *reterr);

/* ---- transport.c ------------------------------------------------------------------------- */

/* How one client's failures become errors: the codes of its stage (BACKEND_* or KUBE_*) and the
 * name its messages give the peer. One table per client, read-only. */
struct cma_transport_errors {
    const char *peer;                 /* "prometheus", "the Kubernetes API" */
    enum cma_errc timeout;            /* curl failures, by class (cma_clients_curl_class) */
    enum cma_errc unreachable;        /*   connect, DNS, TLS, send/recv */
    enum cma_errc bad_reply;          /*   not HTTP, bad encoding */
    enum cma_errc other;              /*   anything else, and a stopped transfer */
    enum cma_errc too_large;          /* a gathered body over its ceiling */
    enum cma_errc status_error;       /* an HTTP status that is no success */
    enum cma_errc status_unavailable; /*   502, 503, 504 (and see busy_5xx_429) */
    enum cma_errc status_not_found;   /*   404 */
    bool busy_5xx_429;                /* every 5xx and 429 are status_unavailable too */
    bool credentials_hint;            /* 401 and 403 add " (check credentials)" */
    bool timeout_names_request;       /* "<peer> did not answer <what> within ..." */
};

/* What one client sends its requests with. Read-only once set up, so shared by every thread;
 * pool and credentials are thread-safe themselves. */
struct cma_transport {
    const char *client; /* "prometheus", "kube": names the client in reports */
    const struct cma_transport_errors *errors;
    struct cma_curl_pool *pool;    /* owned */
    struct cma_creds *creds;       /* owned; set by the client after init */
    struct curl_slist *connect_to; /* owned; NULL, or CURLOPT_CONNECT_TO entries */
    int64_t connect_timeout_ms;
    /* Ask for compressed answers (Accept-Encoding: every encoding curl decodes) when the
     * request's own headers say nothing: the kube client sets it; Prometheus is asked for none
     * (it gzips every answer; transport.c DESIGN, docs/configuration.md "Compression"). */
    bool ask_compressed;
    struct cma_client_notifier notifier;
};

/* Zeroes t, sets its names and connect timeout and creates its handle pool. On failure t holds
 * nothing to free. */
enum cma_errc cma_transport_init(struct cma_transport *t, const char *client,
                                 const struct cma_transport_errors *errors,
                                 int64_t connect_timeout_ms, struct cma_err *reterr);
/* Frees the pool, the credentials and connect_to. */
void cma_transport_done(struct cma_transport *t);

struct cma_http_request {
    const char *method;         /* "GET" or "POST" */
    const char *url;            /* as sent (may hold user:password@) */
    const char *public_url;     /* the same without credentials, for the report; NULL: url */
    const char *what;           /* for messages: "/api/v1/query", "GET /api/v1/pods" */
    const char *where;          /* for "cannot reach <peer> at <where>" */
    struct curl_slist *headers; /* the client's (read only); Authorization goes in front */
    const char *body;           /* POST body, body_len bytes; NULL for GET */
    size_t body_len;
    int64_t timeout_ms;        /* the whole transfer */
    curl_write_callback write; /* NULL: the body is gathered into *gather */
    void *write_ctx;
    struct cma_buf *gather;          /* initialised by the caller with its ceiling */
    curl_xferinfo_callback progress; /* NULL: none */
    void *progress_ctx;
    CURL **handle;  /* when set, receives the transfer's handle before it runs */
    bool dedicated; /* a handle of its own, not the pool's (a long watch) */
    size_t long_get_bytes, max_get_bytes; /* copied into the report */
    /* The request served (backend.h): the transfer gets at most the time left before its
     * deadline and is aborted once its client has gone (both: errors->timeout). NULL: none. */
    const struct cma_call *call;
};

struct cma_http_result {
    long status;     /* 0 when no answer came */
    char reason[64]; /* the status line's reason phrase ("Bad Gateway"); "" when none (HTTP/2) */
    CURLcode curl;
    char error[CURL_ERROR_SIZE]; /* curl's words when curl != CURLE_OK */
    int64_t duration_ms;
    uint64_t bytes;
};

/* Performs req with t's credentials (the current snapshot, held for the transfer; a refused
 * rotation goes to t->notifier.on_credentials), then reports it (t->notifier.on_request).
 * CMA_OK when an HTTP answer came back whole, whatever its status (res->status); otherwise the
 * failure mapped by t->errors (a stopped write callback gives `other`: res->curl is then
 * CURLE_WRITE_ERROR and the caller may put its own verdict instead). */
enum cma_errc cma_transport_perform(struct cma_transport *t, const struct cma_http_request *req,
                                    struct cma_http_result *res, struct cma_err *reterr);

/* The code of an HTTP status that is no success, by e. */
enum cma_errc cma_transport_status_code(const struct cma_transport_errors *e, long status);
/* "<peer> answered HTTP <status>[ <reason>] for <what>[ (check credentials)][: <detail>]" with
 * that code (reason: the status line's phrase, may be NULL or ""). */
enum cma_errc cma_transport_status_error(const struct cma_transport_errors *e, long status,
                                         const char *reason, const char *what, const char *detail,
                                         struct cma_err *reterr);
/* A failed transfer (crc != CURLE_OK; why = curl's words) as an error of e. */
enum cma_errc cma_transport_curl_error(const struct cma_transport_errors *e, CURLcode crc,
                                       const char *why, const char *what, const char *where,
                                       int64_t timeout_ms, struct cma_err *reterr);

/* ---- tls_route.c ------------------------------------------------------------------------- */

/* How requests for a URL go out under a tls-server-name (client-go's ServerName). Owned strings;
 * all NULL when there is no reroute. */
struct cma_tls_route {
    char *url;        /* the URL with tls_name for host (SNI, certificate check), no trailing '/' */
    char *connect_to; /* "tls_name:port:host:port" for CURLOPT_CONNECT_TO: the TCP connection goes
                         to the URL's host and port (the scheme's default when it has none) */
    char *host_line;  /* "Host: host[:port]", the URL's own host and port, as Go sends it */
};

/* The route of url under tls_name, for any scheme (the caller decides whether its scheme wants
 * one). tls_name NULL or "": CMA_OK with every member NULL (no reroute). CMA_ERR_CONFIG_VALUE
 * when url does not parse or has no host, or tls_name is no valid host name (the caller words the
 * message); CMA_ERR_NOMEM. On failure *ret holds nothing. Free with cma_tls_route_done(). */
enum cma_errc cma_clients_tls_route(const char *url, const char *tls_name,
                                    struct cma_tls_route *ret);
void cma_tls_route_done(struct cma_tls_route *r);

/* ---- kubeconfig.c ------------------------------------------------------------------------ */

/* Where and how to reach a kube-apiserver. Every pointer is owned (free with
 * cma_kube_conn_done); NULL / 0 = not set. */
struct cma_kube_conn {
    char *server; /* "https://host:port[/prefix]", no trailing slash */
    char *ca_file;
    unsigned char *ca_data; /* decoded certificate-authority-data (PEM) */
    size_t ca_data_len;
    char *cert_file;
    unsigned char *cert_data;
    size_t cert_data_len;
    char *key_file;
    unsigned char *key_data;
    size_t key_data_len;
    bool insecure_skip_verify;
    char *tls_server_name; /* SNI and certificate name to check instead of the server's host */
    char *token;           /* static bearer token */
    char *token_file;      /* bearer token re-read on every request (rotating SA tokens) */
    char *username;        /* basic auth */
    char *password;
    char *source; /* for messages: "kubeconfig <path>" or "in-cluster service account" */
    bool in_cluster;
};

void cma_kube_conn_done(struct cma_kube_conn *c);

/* Labels of a connection's settings for messages ("kubeconfig /k.yaml client-key-data",
 * "in-cluster service account ca.crt"), filled by cma_kube_conn_cred_spec. */
struct cma_kube_conn_labels {
    char ca[300], cert[300], key[300], token[300], password[300];
};

/* The credentials of a connection as a spec for cma_creds_new (pointers borrowed from conn and
 * labels, which must outlive the call). tokenFile wins over token; *-data over files. */
void cma_kube_conn_cred_spec(const struct cma_kube_conn *conn, struct cma_kube_conn_labels *labels,
                             struct cma_cred_spec *ret);

/* The service-account credentials of this pod for another server (--prometheus-auth-incluster):
 * <sa_dir>/token (sa_dir NULL = /var/run/secrets/kubernetes.io/serviceaccount) and ca.crt when
 * it exists; no server, no KUBERNETES_SERVICE_* variables needed. Only paths: the files are
 * read (and checked) by cma_creds_new. */
enum cma_errc cma_kubeconfig_service_account(const char *sa_dir, struct cma_kube_conn *ret,
                                             struct cma_err *reterr);

/* Loads a kubeconfig file: current-context → context → cluster and user. Relative file paths
 * resolve against the kubeconfig's directory; *-data values are base64-decoded. Errors:
 * CMA_ERR_CONFIG_IO / CONFIG_SYNTAX from the YAML loader; CMA_ERR_CONFIG_VALUE (with the node's
 * position) for a missing context/cluster/user, a bad base64 value or an unsupported auth
 * method (exec, auth-provider). On failure *ret is left zeroed. */
enum cma_errc cma_kubeconfig_load(const char *path, struct cma_kube_conn *ret,
                                  struct cma_err *reterr);
/* Same, from a YAML text already in memory; `path` names it and gives the base directory. */
enum cma_errc cma_kubeconfig_parse(const char *path, const char *text, size_t len,
                                   struct cma_kube_conn *ret, struct cma_err *reterr);

/* In-cluster settings from KUBERNETES_SERVICE_HOST/PORT and the service-account directory
 * (sa_dir NULL = /var/run/secrets/kubernetes.io/serviceaccount): token file (re-read when it
 * changes) and ca.crt when something exists at that path (it must then be a valid bundle; no
 * ca.crt = system CAs, as client-go). CMA_ERR_FLAG when the variables are unset or the token is
 * unreadable. */
enum cma_errc cma_kubeconfig_in_cluster(const char *sa_dir, struct cma_kube_conn *ret,
                                        struct cma_err *reterr);

/* Standard base64 (with or without padding; whitespace ignored) → new buffer. false when
 * malformed (*ret untouched) ; out of memory also gives false with *ret_nomem set. */
bool cma_clients_base64_decode(const char *s, size_t len, unsigned char **ret, size_t *ret_len,
                               bool *ret_nomem);

/* ---- kube.c ------------------------------------------------------------------------------ */

/* Builds a client from explicit settings (cma_kube_new() = kubeconfig/in-cluster + this).
 * Copies what it needs from conn. timeout_ms 0 → 10 s. */
enum cma_errc cma_kube_new_from_conn(const struct cma_kube_conn *conn, int64_t timeout_ms,
                                     struct cma_kube **ret, struct cma_err *reterr);

/* ---- kube_decode.c ----------------------------------------------------------------------- */

/* GET /api (APIVersions): the core version to use ("v1" when listed, else the first).
 * Caller owns *ret. CMA_ERR_KUBE_ERROR on a bad document. */
enum cma_errc cma_kube_parse_api_versions(const char *body, size_t len, char **ret,
                                          struct cma_err *reterr);

struct cma_kube_group {
    char *name;
    char *version; /* preferredVersion.version, else versions[0].version */
};
/* GET /apis (APIGroupList) → groups with their preferred version. Groups without any version
 * are left out. Caller owns: cma_kube_groups_free(). */
enum cma_errc cma_kube_parse_group_list(const char *body, size_t len, struct cma_kube_group **ret,
                                        size_t *ret_n, struct cma_err *reterr);
void cma_kube_groups_free(struct cma_kube_group *groups, size_t n);

/* GET /api/v1 or /apis/<g>/<v> (APIResourceList) → appends its resources (subresources, i.e.
 * names with '/', skipped) to *into with the given group and version. On failure *into keeps
 * what it had. */
enum cma_errc cma_kube_parse_resource_list(const char *body, size_t len, const char *group,
                                           const char *version, struct cma_api_resources *into,
                                           struct cma_err *reterr);

/* One LIST page (PodList, PartialObjectMetadataList, ...): appends items[].metadata.name to
 * *names (growing *n, *cap) and returns metadata.continue (NULL when absent or ""). */
enum cma_errc cma_kube_parse_name_page(const char *body, size_t len, char ***names, size_t *n,
                                       size_t *cap, char **ret_continue, struct cma_err *reterr);

/* One LIST page of objects (full objects or PartialObjectMetadataList): appends an object per
 * item to *objs (growing *n, *cap) and returns metadata.continue (NULL when absent or "").
 * On failure the items of this page are freed and *n is what it was. */
enum cma_errc cma_kube_parse_object_page(const char *body, size_t len,
                                         struct cma_kube_object **objs, size_t *n, size_t *cap,
                                         char **ret_continue, struct cma_err *reterr);

/* The same, also returning the list's metadata.resourceVersion in *ret_rv (NULL when absent or
 * ""; ret_rv may be NULL). On failure neither string is returned. */
enum cma_errc cma_kube_parse_list_page(const char *body, size_t len, struct cma_kube_object **objs,
                                       size_t *n, size_t *cap, char **ret_rv, char **ret_continue,
                                       struct cma_err *reterr);

/* RFC 3339 time as metav1.Time accepts it ("2026-11-21T21:39:06Z", fractions, ±HH:MM
 * offsets) → unix ms. false when malformed. */
bool cma_kube_parse_time(const char *s, int64_t *ret_ms);

/* The `message` of a metav1.Status body, else the body's excerpt (cma_clients_excerpt: never
 * markup, at most 200 bytes), into out. */
void cma_kube_status_message(const char *body, size_t len, char *out, size_t out_len);

/* ---- kube_stream.c ----------------------------------------------------------------------- */

/* A LIST page (PodList and the like, full objects or metadata) decoded as it streams in: fn gets
 * each item as one object (n 1) whose strings are the parser's, valid until fn returns; no page
 * is held whole (kube_stream.c DESIGN). Errors as cma_kube_parse_list_page's. */
struct cma_kube_page_parser;
enum cma_errc cma_kube_page_parser_new(cma_kube_page_fn fn, void *ctx,
                                       struct cma_kube_page_parser **ret);
void cma_kube_page_parser_free(struct cma_kube_page_parser *p);
/* fn's error is returned as it is; bad JSON → CMA_ERR_KUBE_ERROR. */
enum cma_errc cma_kube_page_parser_feed(struct cma_kube_page_parser *p, const char *data,
                                        size_t len, struct cma_err *reterr);
/* The page ended: CMA_OK when it was whole; *ret_rv (may be NULL) and *ret_continue get the
 * list's metadata.resourceVersion and metadata.continue (caller frees; NULL when absent or ""). */
enum cma_errc cma_kube_page_parser_finish(struct cma_kube_page_parser *p, char **ret_rv,
                                          char **ret_continue, struct cma_err *reterr);
/* Items handed to fn so far. */
size_t cma_kube_page_parser_count(const struct cma_kube_page_parser *p);
/* The most bytes the parser held at once for items (its scratch buffer and label arrays): one
 * item's kept strings, whatever the page's size. */
size_t cma_kube_page_parser_peak(const struct cma_kube_page_parser *p);

/* A watch stream cut into event lines as it arrives: chunks of any size go in, each complete
 * line (without its newline, trailing CR and blanks; empty lines skipped) goes to fn at once.
 * Only the unfinished part of a line is kept, at most max_line bytes. */
struct cma_kube_lines {
    struct cma_buf partial;
};
typedef enum cma_errc (*cma_kube_line_fn)(void *ctx, const char *line, size_t len,
                                          struct cma_err *reterr);
void cma_kube_lines_init(struct cma_kube_lines *l, size_t max_line);
void cma_kube_lines_done(struct cma_kube_lines *l);
/* fn's error is returned as it is; a line over max_line → CMA_ERR_KUBE_ERROR "a watch event is
 * over N bytes". */
enum cma_errc cma_kube_lines_feed(struct cma_kube_lines *l, const char *data, size_t len,
                                  cma_kube_line_fn fn, void *ctx, struct cma_err *reterr);
/* The stream ended: a last line without a newline goes to fn too. */
enum cma_errc cma_kube_lines_finish(struct cma_kube_lines *l, cma_kube_line_fn fn, void *ctx,
                                    struct cma_err *reterr);

/* ---- listwatch.c ------------------------------------------------------------------------- */

/* What the driver tells its owner. */
enum cma_listwatch_report_kind {
    CMA_LISTWATCH_LIST_FAILED,  /* err; the LIST is tried again after retry_ms */
    CMA_LISTWATCH_GONE,         /* the watch from resource_version met 410 Gone: re-listing now */
    CMA_LISTWATCH_WATCH_FAILED, /* status (0: none), err (NULL: a clean end without an applied
                                   event); the owner's answer is done after retry_ms */
};

/* One report; pointers borrowed for the call, fields not named for the kind are 0/NULL. */
struct cma_listwatch_report {
    enum cma_listwatch_report_kind kind;
    const char *resource_version;
    long status;
    int64_t retry_ms;
    const struct cma_err *err;
};

/* The owner's answer to a report (only WATCH_FAILED's is read). */
enum cma_listwatch_next {
    CMA_LISTWATCH_RECONNECT, /* watch again from the same resourceVersion after the backoff */
    CMA_LISTWATCH_RELIST,    /* LIST again after the backoff */
    CMA_LISTWATCH_STOP,      /* end the thread */
};

/* What the driver asks of the cache that owns it (ctx). All run on the driver's thread. */
struct cma_listwatch_ops {
    /* LISTs the resource and installs the result with its resourceVersion; reports a success
     * itself. An error is reported (LIST_FAILED) and the LIST tried again after a backoff. */
    enum cma_errc (*list)(void *ctx, struct cma_err *reterr);
    /* Applies one watch event line; *ret_gone set for an ERROR event with code 410. An error
     * ends the watch (WATCH_FAILED). */
    enum cma_errc (*apply)(void *ctx, const char *line, size_t len, bool *ret_gone,
                           struct cma_err *reterr);
    /* The resourceVersion to watch from. */
    void (*resource_version)(void *ctx, char *out, size_t out_len);
    /* What happened; for WATCH_FAILED, what to do next. */
    enum cma_listwatch_next (*report)(void *ctx, const struct cma_listwatch_report *r);
};

/* One LIST+WATCH thread of group/version/resource: LIST, then WATCH from the resourceVersion
 * (a clean end with events: watch again at once), re-list at once on 410 Gone, otherwise back
 * off (backoff_first_ms doubling to backoff_max_ms, jittered ±20 %, reset by a LIST or a watch
 * that applied an event) and do what the owner answers to the WATCH_FAILED report. Embedded in its
 * owner; fields are the driver's (a test may set the backoff bounds between init and start). */
struct cma_listwatch {
    struct cma_kube *kube;                  /* borrowed */
    const char *group, *version, *resource; /* borrowed from the owner */
    struct cma_listwatch_ops ops;
    void *ctx;
    int64_t backoff_first_ms, backoff_max_ms; /* 200 ms, 30 s */
    atomic_bool stop;
    atomic_size_t watches;
    pthread_mutex_t wait_lock; /* with wait_cond: only the backoff sleep, woken by stop */
    pthread_cond_t wait_cond;
    pthread_t thread;
    bool started;
};

/* Sets up lw (no thread yet). Strings and kube are borrowed and must outlive it. */
enum cma_errc cma_listwatch_init(struct cma_listwatch *lw, struct cma_kube *kube, const char *group,
                                 const char *version, const char *resource,
                                 const struct cma_listwatch_ops *ops, void *ctx,
                                 struct cma_err *reterr);
/* Starts the thread (a second call does nothing). */
enum cma_errc cma_listwatch_start(struct cma_listwatch *lw, struct cma_err *reterr);
/* Stops the thread (wakes its sleep, ends its watch) and waits for it; then nothing of ops is
 * called again. Safe to call twice and before start. */
void cma_listwatch_stop(struct cma_listwatch *lw);
/* cma_listwatch_stop, then frees what init made. */
void cma_listwatch_done(struct cma_listwatch *lw);
/* Watch streams opened so far. */
size_t cma_listwatch_watches(struct cma_listwatch *lw);

#endif
