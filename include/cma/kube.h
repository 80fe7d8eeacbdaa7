/* kube.h: a small kube-apiserver client over libcurl: API discovery (for the RESTMapper), LIST
 * of object names by label selector and LIST of objects' metadata by label and field selector.
 * Configured in-cluster (service-account token re-read on each request, CA at
 * /var/run/secrets/kubernetes.io/serviceaccount/ca.crt, host from KUBERNETES_SERVICE_HOST/PORT) or
 * from a kubeconfig (current-context; cluster server, certificate-authority[-data],
 * insecure-skip-tls-verify; user client-certificate[-data] + client-key[-data], token, tokenFile,
 * username/password). Thread-safe (handle pool as in prom.c). Errors: unreachable →
 * CMA_ERR_KUBE_UNAVAILABLE; timeouts → CMA_ERR_KUBE_UNAVAILABLE; non-2xx → CMA_ERR_KUBE_ERROR with
 * the Status message (404 → CMA_ERR_NOT_FOUND; 429 and 5xx → CMA_ERR_KUBE_UNAVAILABLE). Nothing
 * is logged: requests are reported to the notifier (cma_kube_set_notifier). */
#ifndef CMA_KUBE_H
#define CMA_KUBE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cma/apiresource.h"
#include "cma/buf.h"
#include "cma/credentials.h"
#include "cma/err.h"

struct cma_kube;

/* kubeconfig_path NULL → in-cluster. timeout_ms 0 → 10 s. Caller owns: cma_kube_free(). */
enum cma_errc cma_kube_new(const char *kubeconfig_path, int64_t timeout_ms, struct cma_kube **ret,
                           struct cma_err *reterr);
void cma_kube_free(struct cma_kube *k);
/* Where the client reports each request (client "kube") and a refused credential rotation
 * (credentials.h); copied. Set it before the client is shared with other threads; NULL (the
 * default) reports nothing. The client itself does not log. */
void cma_kube_set_notifier(struct cma_kube *k, const struct cma_client_notifier *n);
const char *cma_kube_server(const struct cma_kube *k);

/* GET /api, /api/<v1>, /apis, then /apis/<group>/<preferredVersion> for each group.
 * Subresources (names with '/') are skipped. Groups that fail (e.g. an aggregated API that is
 * down, answering 503) are skipped, not fatal; /api and /apis failing is fatal.
 * Caller owns: cma_api_resources_free(). */
enum cma_errc cma_kube_discover(struct cma_kube *k, struct cma_api_resources **ret,
                                struct cma_err *reterr);

/* How many groups listed by GET /apis the last successful cma_kube_discover() call skipped
 * because /apis/<group>/<version> answered an error or an undecodable document (an aggregated
 * API that is down). For a log line; 0 before any discovery. Thread-safe (atomic). */
size_t cma_kube_skipped_groups(const struct cma_kube *k);

/* Names of the objects of group/version/resource in `namespace` (NULL/"" = all namespaces) that
 * match `label_selector` (may be NULL/""), in the order the server lists them. Follows
 * `metadata.continue` pages (limit 500). Caller owns the array and strings: free each, then the
 * array. */
enum cma_errc cma_kube_list_names(struct cma_kube *k, const char *group, const char *version,
                                  const char *resource, const char *namespace_,
                                  const char *label_selector, char ***ret_names, size_t *ret_n,
                                  struct cma_err *reterr);

/* One object of a LIST: what metrics.k8s.io needs. Every pointer is owned. */
struct cma_kube_object {
    char *name;
    char *namespace_;   /* NULL for cluster-scoped objects */
    char **label_names; /* metadata.labels, in the server's order */
    char **label_values;
    size_t n_labels;
    char *phase;         /* status.phase when the server sent full objects, else NULL */
    int64_t creation_ms; /* metadata.creationTimestamp; 0 when absent */
};

/* Objects of group/version/resource in `namespace_` (NULL/"" = all namespaces) that match
 * `label_selector` and `field_selector` (each may be NULL/""; both are sent to the server as
 * they are, so they must be in the server's syntax), in the order the server lists them.
 * Asks for PartialObjectMetadataList (metadata only: filter on status.phase with the field
 * selector); full objects are read as well. Pages and errors as cma_kube_list_names.
 * Caller owns: cma_kube_objects_free(*ret, *ret_n). */
enum cma_errc cma_kube_list_objects(struct cma_kube *k, const char *group, const char *version,
                                    const char *resource, const char *namespace_,
                                    const char *label_selector, const char *field_selector,
                                    struct cma_kube_object **ret, size_t *ret_n,
                                    struct cma_err *reterr);
void cma_kube_objects_free(struct cma_kube_object *objs, size_t n);

/* Raw request to the Kubernetes API (auth stage: TokenReview, SubjectAccessReview, ConfigMap;
 * MetricRule status writes). method "GET", "POST" or "PATCH"; for POST, body[0..body_len) is
 * sent as application/json, for PATCH as application/merge-patch+json (RFC 7386). CMA_OK
 * whenever an HTTP answer came back: the status is in *ret_status and the body (initialised
 * here; caller cma_buf_done()s) in *ret_body. Transport failures → CMA_ERR_KUBE_UNAVAILABLE. */
enum cma_errc cma_kube_request(struct cma_kube *k, const char *method, const char *path,
                               const char *body, size_t body_len, struct cma_buf *ret_body,
                               long *ret_status, struct cma_err *reterr);

/* ---- LIST+WATCH for watch caches (objcache.c) ---------------------------------------------- */

/* Called with the LIST's objects as they are decoded (full objects: status.phase is filled),
 * one at a time (n is 1); their strings are borrowed, valid until it returns. A non-OK return
 * stops the LIST and is returned. */
typedef enum cma_errc (*cma_kube_page_fn)(void *ctx, const struct cma_kube_object *objs, size_t n,
                                          struct cma_err *reterr);

/* LIST of every object of group/version/resource (all namespaces, pages of 500), each page
 * decoded as it streams in, never held whole (kube_stream.c); *ret_rv (caller frees) is the
 * list's metadata.resourceVersion. *ret_status is the HTTP
 * status of the failing page (410 for an expired continue token: re-list), 0 when none. */
enum cma_errc cma_kube_list_pages(struct cma_kube *k, const char *group, const char *version,
                                  const char *resource, cma_kube_page_fn fn, void *ctx,
                                  char **ret_rv, long *ret_status, struct cma_err *reterr);

struct cma_kube_watch_handler {
    /* One event line (no newline, never empty). A non-OK return ends the watch with it. */
    enum cma_errc (*on_line)(void *ctx, const char *line, size_t len, struct cma_err *reterr);
    /* Polled about once a second and on every chunk; true ends the watch (CMA_OK). */
    bool (*should_stop)(void *ctx);
    void *ctx;
};

/* GET ...?watch=1&allowWatchBookmarks=true&resourceVersion=RV&timeoutSeconds=N (all
 * namespaces), handing each event line to h->on_line as it arrives; lines are never gathered into
 * one body (a line is at most 16 MiB). CMA_OK when the server closed the stream cleanly or
 * should_stop said so. Non-2xx → the Status error, with the status in *ret_status (410 Gone:
 * re-list); transport failure → CMA_ERR_KUBE_UNAVAILABLE. */
enum cma_errc cma_kube_watch(struct cma_kube *k, const char *group, const char *version,
                             const char *resource, const char *resource_version,
                             int timeout_seconds, const struct cma_kube_watch_handler *h,
                             long *ret_status, struct cma_err *reterr);

#endif
