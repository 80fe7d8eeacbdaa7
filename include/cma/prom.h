/* prom.h: one Prometheus-compatible backend (Prometheus, Thanos, Mimir, VictoriaMetrics) over
 * libcurl: instant queries and series listing, both decoded as a stream.
 *
 * A struct cma_prom is created by main from flags and shared by all threads: it keeps a small
 * mutex-protected pool of curl easy handles so connections are reused, and one byte budget
 * (struct cma_prom_budget) that every query answer being decoded draws from; every call is
 * thread-safe and blocking (the caller's thread waits at most the call's deadline).
 * Deadlines, one per call: a query waits at most timeout_ms, a series listing at most
 * series_timeout_ms; connecting is bounded by connect_timeout_ms within them.
 * URL handling: the base URL's path prefix is kept ("/prometheus" for Mimir) and its query
 * string is kept for GET and POST alike (Thanos/prom-label-proxy parameters), unlike
 * prometheus-adapter. A query longer than max_get_url_bytes goes as POST by itself.
 * Errors: connect/DNS/TLS failures → CMA_ERR_BACKEND_UNAVAILABLE; timeouts →
 * CMA_ERR_BACKEND_TIMEOUT; Prometheus `status:error` bodies → CMA_ERR_BACKEND_ERROR with
 * "<errorType>: <error>" (errorType timeout → BACKEND_TIMEOUT, unavailable → BACKEND_UNAVAILABLE);
 * other HTTP statuses → "prometheus answered HTTP N for <path>: <first 200 bytes of body>",
 * BACKEND_UNAVAILABLE for 502/503/504, BACKEND_ERROR otherwise (401/403 add "check
 * credentials"); a 400/422/503 with a Prometheus error body is decoded as above;
 * undecodable bodies → CMA_ERR_BACKEND_RESPONSE; a query answer over max_response_bytes, or
 * whose kept samples alone need more than the whole budget → CMA_ERR_TOO_LARGE (refused as soon
 * as it is known: from Content-Length, else while it streams); kept samples that do not fit in
 * what other queries leave of the budget → CMA_ERR_TOO_MANY_REQUESTS (retry shortly).
 * Nothing is logged here: each request (method, URL without credentials, status, duration,
 * bytes) and each query answer (its first 4 KiB, the series kept) go to the config's notifier,
 * and main logs them (--v=6, --v=8). */
#ifndef CMA_PROM_H
#define CMA_PROM_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cma/credentials.h"
#include "cma/err.h"

struct cma_prom_config {
    const char *url; /* base URL, e.g. http://127.0.0.1:9090 or https://mimir/prometheus */
    bool use_post;   /* --prometheus-verb=POST */
    const char *const *headers; /* "Key=Value" strings (split on the first '='), repeatable */
    size_t n_headers;
    /* Credentials: every file is read and checked at creation and read again whenever it
     * changes (credentials.h). Explicit settings win over auth_config / auth_incluster setting
     * by setting; one credential goes in Authorization (token_file, else basic auth, else the
     * kubeconfig's or service account's token or basic auth). */
    const char *token_file;          /* bearer token file, trimmed; NULL = none */
    const char *basic_username;      /* basic auth; NULL = none; not with token_file */
    const char *basic_password;      /* fixed password, or: */
    const char *basic_password_file; /* the password's file (trailing newline dropped) */
    const char *ca_file;             /* NULL = the kubeconfig's, else system CAs */
    const char *client_cert_file;    /* mTLS client certificate; needs client_key_file */
    const char *client_key_file;
    bool insecure_skip_verify;
    const char *auth_config; /* --prometheus-auth-config: kubeconfig whose current context gives
                                CA, insecure-skip-tls-verify, client cert/key, token[File], basic
                                auth (its server is not used); NULL = none */
    bool auth_incluster;     /* --prometheus-auth-incluster: the pod's service-account token
                                and ca.crt; not with auth_config */
    const char *service_account_dir; /* NULL = /var/run/secrets/kubernetes.io/serviceaccount */
    int64_t timeout_ms;              /* total per query; 0 = 10 s */
    int64_t series_timeout_ms;       /* total per series listing; 0 = 30 s (the DEFAULT below) */
    int64_t connect_timeout_ms;      /* 0 = 3 s */
    size_t max_response_bytes;  /* ceiling on a query answer's (decompressed) bytes; 0 = 64 MiB */
    size_t max_bytes_in_flight; /* the budget: 0 = CMA_PROM_DEFAULT_MAX_BYTES_IN_FLIGHT */
    size_t max_get_url_bytes;   /* longer queries go as POST; 0 = 8 KiB */
    /* Query parameters added to every query and series call after the base URL's own (Thanos
     * dedup, partial_response): "key=value" strings split on the first '=', each side
     * percent-encoded here; a non-empty key is required (CMA_ERR_FLAG). */
    const char *const *query_params;
    size_t n_query_params;
    /* A PromQL expression longer than this many bytes is refused before it is sent, with
     * CMA_ERR_BACKEND_ERROR "the query is N bytes, over this backend's maxQueryLength M"
     * (VictoriaMetrics' -search.maxQueryLen, a gateway's limit); 0 = no limit. */
    size_t max_query_bytes;
    /* Where each request (client "prometheus"), each query answer and a refused credential
     * rotation are reported (credentials.h); copied. Zeroed: nothing is reported. */
    struct cma_client_notifier notifier;
};

#define CMA_PROM_DEFAULT_SERIES_TIMEOUT_MS 30000
#define CMA_PROM_DEFAULT_MAX_BYTES_IN_FLIGHT ((size_t)32 << 20)

/* Bytes held at once by the query answers being decoded and by the results they became, across
 * every thread of one client: each kept sample (struct, label array and strings), the result's
 * sample array and each decoder's scratch buffer are charged when allocated and released when
 * freed (cma_prom_result_free). `used` is updated with atomics; `max` is fixed at creation
 * (0 = no ceiling). Decoders that run without a client may use one of their own or none. */
struct cma_prom_budget {
    atomic_size_t used;
    size_t max;
};

struct cma_prom;

/* The header a call's tenant goes in (Mimir's, Cortex's, Loki's: a tenant per namespace for
 * MetricRules, tenantFromNamespace). A call with a tenant sends `X-Scope-OrgID: <tenant>` and
 * none of the client's own X-Scope-OrgID headers (matched without regard to case); the rest of
 * its headers go as configured. A tenant that is empty, longer than CMA_TENANT_MAX_BYTES or holds
 * a byte outside visible ASCII (a space, a control character) is refused before anything is sent
 * (CMA_ERR_INTERNAL: callers pass namespace names). */
#define CMA_TENANT_HEADER "X-Scope-OrgID"
#define CMA_TENANT_MAX_BYTES 253

/* A label of a sample or series, borrowed: name and value are NUL-terminated and hold no NUL. */
struct cma_label_view {
    const char *name;
    size_t name_len;
    const char *value;
    size_t value_len;
};

/* Copies everything it needs from cfg. Reads every credential file now: CMA_ERR_IO when one
 * cannot be read, CMA_ERR_TLS when a CA, certificate or key does not parse or the key does not
 * match the certificate, CMA_ERR_FLAG for contradicting settings; the message names the flag
 * (or the kubeconfig and its field), the path and the reason. Caller owns: cma_prom_free(). */
enum cma_errc cma_prom_new(const struct cma_prom_config *cfg, struct cma_prom **ret,
                           struct cma_err *reterr);
void cma_prom_free(struct cma_prom *p);

/* The base URL, as given (for logs). */
const char *cma_prom_url(const struct cma_prom *p);
/* The client's byte budget (for logs and tests); never NULL for a client. */
const struct cma_prom_budget *cma_prom_budget(const struct cma_prom *p);

struct cma_label {
    char *name;
    char *value;
};

struct cma_sample {
    struct cma_label *labels; /* sorted by name; includes __name__ if the result kept it */
    size_t n_labels;
    double value; /* may be NaN or ±Inf: callers decide */
    int64_t timestamp_ms;
};

enum cma_prom_result_type { CMA_PROM_VECTOR, CMA_PROM_SCALAR, CMA_PROM_MATRIX, CMA_PROM_STRING };

struct cma_prom_result {
    enum cma_prom_result_type type;
    struct cma_sample *samples; /* VECTOR: one per kept series; SCALAR: exactly one, no labels;
                                   MATRIX: the last point of each kept series; STRING: none */
    size_t n_samples;
    size_t n_seen; /* series in the answer, kept or not (SCALAR: 1, STRING: 0) */
    /* private: what this result holds of a budget, released by cma_prom_result_free() */
    struct cma_prom_budget *budget;
    size_t charged;
};

/* Decides whether the caller needs a series of a vector or matrix answer, from its labels
 * (sorted by name, borrowed, valid only during the call). true keeps it. Scalars are always
 * kept. */
typedef bool (*cma_sample_keep_fn)(void *ctx, const struct cma_label_view *labels, size_t n_labels);

/* Instant query `GET|POST <base>/api/v1/query` with query=<promql>&time=<time_ms as seconds
 * with 3 decimals>. The answer is decoded as it arrives: only the series keep() accepts are
 * stored (keep NULL stores every series), so memory follows what the caller needs, not the
 * answer's size. Caller owns *ret: cma_prom_result_free(), which also gives its bytes back to
 * the client's budget. */
enum cma_errc cma_prom_query(struct cma_prom *p, const char *promql, int64_t time_ms,
                             cma_sample_keep_fn keep, void *keep_ctx, struct cma_prom_result **ret,
                             struct cma_err *reterr);
/* The same for a request (struct cma_call, backend.h): sent with at most the time left before
 * the call's deadline (and at most timeout_ms), aborted when the call's client has gone; either
 * gives CMA_ERR_BACKEND_TIMEOUT. call NULL: as cma_prom_query. tenant: see CMA_TENANT_HEADER;
 * NULL = the client's headers as configured. */
struct cma_call;
enum cma_errc cma_prom_query_call(struct cma_prom *p, const char *promql, int64_t time_ms,
                                  cma_sample_keep_fn keep, void *keep_ctx,
                                  const struct cma_call *call, const char *tenant,
                                  struct cma_prom_result **ret, struct cma_err *reterr);
void cma_prom_result_free(struct cma_prom_result *r);

/* Value of a label in a sample, NULL when absent. */
const char *cma_sample_label(const struct cma_sample *s, const char *name);

/* Decodes a whole Prometheus /api/v1/query JSON body, every series kept, no budget (for tests
 * and fuzzing; the same decoder as the stream). */
enum cma_errc cma_prom_decode_query(const char *body, size_t len, struct cma_prom_result **ret,
                                    struct cma_err *reterr);

/* The streaming /api/v1/query decoder on its own (prom.c feeds it from the curl write callback;
 * tests and fuzzing feed it directly). keep/keep_ctx as for cma_prom_query; budget may be NULL.
 * Feed chunks of any size, then finish: on success *ret holds the kept samples (caller owns:
 * cma_prom_result_free) and the budget charge moves to it. Limits: one series object (labels and
 * strings) at most 1 MiB and 1,000 labels; 2 MiB of input without a JSON value ending is an
 * error; values nested at most 64 deep. Errors name the JSON path ("data.result[3].value is not a
 * [time, \"value\"] pair"). A parser is used by one thread; free accepts NULL. */
struct cma_query_parser;
enum cma_errc cma_query_parser_new(cma_sample_keep_fn keep, void *keep_ctx,
                                   struct cma_prom_budget *budget, struct cma_query_parser **ret);
enum cma_errc cma_query_parser_feed(struct cma_query_parser *qp, const char *data, size_t len,
                                    struct cma_err *reterr);
enum cma_errc cma_query_parser_finish(struct cma_query_parser *qp, struct cma_prom_result **ret,
                                      struct cma_err *reterr);
size_t cma_query_parser_seen(const struct cma_query_parser *qp); /* series seen so far */
void cma_query_parser_free(struct cma_query_parser *qp);

/* One series of a /api/v1/series answer: its __name__ and its other labels (borrowed, valid
 * only during the callback; n_labels excludes __name__). Return 0 to go on, non-zero to stop
 * (the call then returns CMA_ERR_INTERNAL "series listing stopped by caller"). */
typedef int (*cma_series_fn)(void *ctx, const char *metric, size_t metric_len,
                             const struct cma_label_view *labels, size_t n_labels);

/* `GET|POST <base>/api/v1/series` with match[]=<match>&start=<s>&end=<s> (seconds, 3 decimals).
 * The body is parsed as a stream (yajl) fed from the curl write callback: memory stays flat
 * whatever the number of series; no response size ceiling applies, but one series object
 * over 1 MiB is an error. `data: null` → CMA_ERR_BACKEND_RESPONSE "no metrics retrieved".
 * Deadline: series_timeout_ms, or the client's series_timeout_ms when 0. tenant: see
 * CMA_TENANT_HEADER; NULL = the client's headers as configured. */
enum cma_errc cma_prom_series(struct cma_prom *p, const char *match, int64_t start_ms,
                              int64_t end_ms, int64_t series_timeout_ms, const char *tenant,
                              cma_series_fn fn, void *ctx, struct cma_err *reterr);

/* The streaming series parser on its own (for tests and fuzzing): feed chunks, then finish. */
struct cma_series_parser;
enum cma_errc cma_series_parser_new(cma_series_fn fn, void *ctx, struct cma_series_parser **ret);
enum cma_errc cma_series_parser_feed(struct cma_series_parser *sp, const char *data, size_t len,
                                     struct cma_err *reterr);
enum cma_errc cma_series_parser_finish(struct cma_series_parser *sp, struct cma_err *reterr);
size_t cma_series_parser_count(const struct cma_series_parser *sp); /* series seen so far */
/* Series objects seen so far that had no __name__ (counted in _count, never passed to fn). */
size_t cma_series_parser_skipped(const struct cma_series_parser *sp);
void cma_series_parser_free(struct cma_series_parser *sp);

#endif
