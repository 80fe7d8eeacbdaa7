/* auth.h: delegated authentication and authorization, as k8s.io/apiserver does it for an
 * aggregated API server (reference §7). Authentication: front-proxy certificate + X-Remote-*
 * headers (requestheader), then client certificates (x509), then bearer tokens (TokenReview),
 * else anonymous. Authorization: system:masters and always-allow paths, else a
 * SubjectAccessReview. The CAs come from flags or from ConfigMap
 * kube-system/extension-apiserver-authentication, re-read every 30 s. Thread-safe. */
#ifndef CMA_AUTH_H
#define CMA_AUTH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cma/buf.h"
#include "cma/err.h"

struct cma_kube;
struct cma_metrics;
struct cma_request;
struct cma_route;

struct cma_auth_options {
    const char *requestheader_client_ca_file; /* NULL → ConfigMap */
    char **requestheader_allowed_names;       /* empty = any CN from that CA */
    size_t n_requestheader_allowed_names;
    char **requestheader_username_headers; /* empty → X-Remote-User */
    size_t n_requestheader_username_headers;
    char **requestheader_group_headers; /* empty → X-Remote-Group */
    size_t n_requestheader_group_headers;
    char **requestheader_extra_headers_prefix; /* empty → X-Remote-Extra- */
    size_t n_requestheader_extra_headers_prefix;
    const char *client_ca_file; /* NULL → ConfigMap */
    bool skip_lookup;           /* --authentication-skip-lookup */
    bool tolerate_lookup_failure;
    int64_t token_cache_ttl_ms;  /* 10 s */
    int64_t authorized_ttl_ms;   /* 10 s */
    int64_t unauthorized_ttl_ms; /* 10 s */
    char **always_allow_paths;   /* exact; a trailing '*' makes a prefix */
    size_t n_always_allow_paths;
    int64_t configmap_refresh_ms; /* 0 → 30 s */
    struct cma_kube *authn_kube;  /* TokenReview, ConfigMap; borrowed */
    struct cma_kube *authz_kube;  /* SubjectAccessReview; borrowed */
    /* custom_metrics_adapter_authentication_attempts_total, ..._authorization_decisions_total,
     * ..._auth_cache_requests_total are recorded here; NULL = not measured. Borrowed. */
    struct cma_metrics *metrics;
    /* What the auth layer decides with no caller to answer (the deciding layer logs it): a failed
     * re-read of the authentication ConfigMap, the current config kept ("authentication config:
     * keeping the current one"), and going on without it under
     * --authentication-tolerate-lookup-failure. NULL: not reported. Called from the refresher
     * thread or from cma_auth_new(). */
    void (*on_event)(void *ctx, const char *what, const struct cma_err *err);
    void *on_event_ctx;
};

struct cma_user_extra {
    char *key; /* lower-cased, unescaped */
    char **values;
    size_t n_values;
};

struct cma_user {
    char *name;
    char *uid; /* may be NULL */
    char **groups;
    size_t n_groups;
    struct cma_user_extra *extra;
    size_t n_extra;
};
void cma_user_free(struct cma_user *u);

struct cma_auth;

/* Loads the CAs (flags, else the ConfigMap unless skip_lookup) and starts the refresh thread.
 * Lookup failure is fatal unless tolerate_lookup_failure. Caller owns: cma_auth_free(). */
enum cma_errc cma_auth_new(const struct cma_auth_options *o, struct cma_auth **ret,
                           struct cma_err *reterr);
void cma_auth_free(struct cma_auth *a);

/* PEM of every CA that may sign a client certificate we accept (requestheader ∪ client CA),
 * for the server's CertificateRequest; "" when none. Caller frees. NULL only when out of
 * memory. */
char *cma_auth_client_ca_pem(struct cma_auth *a);

/* Re-reads the ConfigMap now (the refresh thread calls this); CMA_OK when the snapshot was
 * replaced or kept (flags fix everything). */
enum cma_errc cma_auth_refresh(struct cma_auth *a, struct cma_err *reterr);

/* Authenticates one request. CMA_OK with *ret set (anonymous when no credentials);
 * CMA_ERR_UNAUTHORIZED when a credential was presented and rejected (reason in reterr, for
 * the log only: the client gets "Unauthorized"). Caller owns *ret: cma_user_free(). */
enum cma_errc cma_auth_authenticate(struct cma_auth *a, const struct cma_request *req,
                                    struct cma_user **ret, struct cma_err *reterr);

/* How far authentication and authorization may go for an answer. CMA_AUTH_MAY_BLOCK: webhook
 * calls (TokenReview, SubjectAccessReview) as needed, on a worker. CMA_AUTH_MEMORY_ONLY: the
 * event thread's attempt (server.h, cma_inline_fn): certificates are verified (CPU only) and
 * cached webhook answers used; where a webhook call would be needed the call returns
 * CMA_ERR_WOULD_BLOCK having counted and logged nothing, so the request can be run again with
 * CMA_AUTH_MAY_BLOCK. The locks taken are the snapshot pointer's, the verifier cache's and the
 * webhook caches' mutexes, none of which is ever held across I/O. */
enum cma_auth_wait { CMA_AUTH_MAY_BLOCK, CMA_AUTH_MEMORY_ONLY };

/* What an authentication counts in the self-metrics, kept until the caller knows the request
 * will not be run again (cma_auth_count_authn). */
struct cma_authn_tally {
    const char *method;      /* "requestheader", "x509", "token", "anonymous" */
    const char *result;      /* "success", "failure", "error" */
    signed char token_cache; /* TokenReview cache lookup: -1 none, 0 miss, 1 hit */
};

/* cma_auth_authenticate with a choice of waiting, counting nothing: *tally says what to count
 * (cma_auth_count_authn) unless the answer is CMA_ERR_WOULD_BLOCK (then nothing is). */
enum cma_errc cma_auth_authenticate_wait(struct cma_auth *a, const struct cma_request *req,
                                         enum cma_auth_wait wait, struct cma_authn_tally *tally,
                                         struct cma_user **ret, struct cma_err *reterr);
/* Counts what cma_auth_authenticate_wait decided. */
void cma_auth_count_authn(struct cma_auth *a, const struct cma_authn_tally *tally);

/* The attributes kube's RequestInfo gives a request (reference §7.2). */
struct cma_authz_attrs {
    bool resource_request;
    const char *verb; /* "get", "list" */
    const char *path; /* non-resource */
    const char *namespace_;
    const char *group;
    const char *version;
    const char *resource;
    const char *subresource;
    const char *name;
};

/* Attributes for a request path and its parsed route (pointers borrow from both). */
void cma_authz_attrs_from_route(const char *path, const struct cma_route *route,
                                struct cma_authz_attrs *ret);

/* The SubjectAccessReview request body for user+attrs (appended to out). */
enum cma_errc cma_authz_sar_body(const struct cma_user *u, const struct cma_authz_attrs *at,
                                 struct cma_buf *out);

/* The 403 Status body kube writes for a denial (appended to out). */
enum cma_errc cma_authz_forbidden_body(const struct cma_user *u, const struct cma_authz_attrs *at,
                                       const char *reason, struct cma_buf *out);

enum cma_authz_decision { CMA_AUTHZ_ALLOW, CMA_AUTHZ_DENY };

/* Authorizes; *ret_reason (may be NULL) gets the SAR's reason, caller frees. A transport or
 * decoding error of the SAR → error (the caller answers 500). */
enum cma_errc cma_auth_authorize(struct cma_auth *a, const struct cma_user *u,
                                 const struct cma_authz_attrs *at, enum cma_authz_decision *ret,
                                 char **ret_reason, struct cma_err *reterr);
/* cma_auth_authorize with a choice of waiting: with CMA_AUTH_MEMORY_ONLY a SubjectAccessReview
 * whose answer is not cached is CMA_ERR_WOULD_BLOCK, and nothing is counted. */
enum cma_errc cma_auth_authorize_wait(struct cma_auth *a, const struct cma_user *u,
                                      const struct cma_authz_attrs *at, enum cma_auth_wait wait,
                                      enum cma_authz_decision *ret, char **ret_reason,
                                      struct cma_err *reterr);

/* Parses a TokenReview response body: CMA_OK with *ret for an authenticated token,
 * CMA_ERR_UNAUTHORIZED otherwise. Exposed for tests. */
enum cma_errc cma_auth_parse_token_review(const char *body, size_t len, struct cma_user **ret,
                                          struct cma_err *reterr);

/* Appends system:authenticated as kube's AuthenticatedGroupAdder does. */
enum cma_errc cma_user_add_authenticated(struct cma_user *u);

#endif
