/* internal.h: what the files of the clients stage share and what their unit tests reach into.
 * Not a public contract: only the src/clients sources and tests/unit/{prom_client,kube}_test.c
 * include it.
 *
 * - curl_pool.c: a bounded, mutex-protected pool of CURL easy handles (thread-safe) plus the
 *   helpers both HTTP clients use (URL encoding, curl error classes, body snippets, file reads).
 * - kubeconfig.c: kubeconfig / in-cluster settings → struct cma_kube_conn (plain data).
 * - kube.c: the pure JSON helpers for discovery documents, LIST pages and Status bodies, and a
 *   constructor from a struct cma_kube_conn (tests use it with a plain-HTTP fake server). */
#ifndef CMA_CLIENTS_INTERNAL_H
#define CMA_CLIENTS_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <curl/curl.h>

#include "cma/buf.h"
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

/* Appends unix milliseconds as "seconds.mmm" (1732227811123 → "1732227811.123"). */
enum cma_errc cma_clients_append_unix_seconds(struct cma_buf *b, int64_t ms);

/* Copies at most max bytes of body into out (NUL-terminated, out_len > 0) as one printable
 * line: control bytes become spaces, invalid or cut UTF-8 becomes '?'; trailing blanks go. */
void cma_clients_snippet(const char *body, size_t len, size_t max, char *out, size_t out_len);

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
};

void cma_kube_conn_done(struct cma_kube_conn *c);

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
 * (sa_dir NULL = /var/run/secrets/kubernetes.io/serviceaccount): token file (re-read per
 * request) and ca.crt. CMA_ERR_FLAG when the variables are unset or the token is unreadable. */
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

/* RFC 3339 time as metav1.Time accepts it ("2026-11-21T21:39:06Z", fractions, ±HH:MM
 * offsets) → unix ms. false when malformed. */
bool cma_kube_parse_time(const char *s, int64_t *ret_ms);

/* The `message` of a metav1.Status body, else the body as a one-line snippet (at most 200
 * bytes), into out. */
void cma_kube_status_message(const char *body, size_t len, char *out, size_t out_len);

#endif
