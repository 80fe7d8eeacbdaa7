/* prom.h: one Prometheus-compatible backend (Prometheus, Thanos, Mimir, VictoriaMetrics) over
 * libcurl: instant queries and streaming series listing.
 *
 * A struct cma_prom is created by main from flags and shared by all threads: it keeps a small
 * mutex-protected pool of curl easy handles so connections are reused; every call is
 * thread-safe and blocking (the caller's thread waits at most timeout_ms).
 * URL handling: the base URL's path prefix is kept ("/prometheus" for Mimir) and its query
 * string is kept for GET and POST alike (Thanos/prom-label-proxy parameters), unlike
 * prometheus-adapter. A query longer than max_get_url_bytes goes as POST by itself.
 * Errors: connect/DNS/TLS failures → CMA_ERR_BACKEND_UNAVAILABLE; timeouts →
 * CMA_ERR_BACKEND_TIMEOUT; Prometheus `status:error` bodies → CMA_ERR_BACKEND_ERROR with
 * "<errorType>: <error>" (errorType timeout → BACKEND_TIMEOUT, unavailable → BACKEND_UNAVAILABLE);
 * other HTTP statuses → "prometheus answered HTTP N for <path>: <first 200 bytes of body>",
 * BACKEND_UNAVAILABLE for 502/503/504, BACKEND_ERROR otherwise (401/403 add "check
 * credentials"); a 400/422/503 with a Prometheus error body is decoded as above;
 * undecodable bodies or bodies over max_response_bytes → CMA_ERR_BACKEND_RESPONSE.
 * At --v=6 each request logs method, URL (without credentials) and status; at --v=8 the body. */
#ifndef CMA_PROM_H
#define CMA_PROM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cma/err.h"

struct cma_prom_config {
    const char *url; /* base URL, e.g. http://127.0.0.1:9090 or https://mimir/prometheus */
    bool use_post;   /* --prometheus-verb=POST */
    const char *const *headers; /* "Key=Value" strings (split on the first '='), repeatable */
    size_t n_headers;
    const char *token_file;     /* bearer token file, read at start and trimmed; NULL = none */
    const char *basic_username; /* basic auth; NULL = none */
    const char *basic_password;
    const char *ca_file;          /* NULL = system CAs */
    const char *client_cert_file; /* mTLS client certificate; needs client_key_file */
    const char *client_key_file;
    bool insecure_skip_verify;
    int64_t timeout_ms;         /* total per request; 0 = 10 s */
    int64_t connect_timeout_ms; /* 0 = 3 s */
    size_t max_response_bytes;  /* ceiling on a query answer; 0 = 64 MiB */
    size_t max_get_url_bytes;   /* longer queries go as POST; 0 = 8 KiB */
};

struct cma_prom;

/* Copies everything it needs from cfg. Reads the token file now (CMA_ERR_IO if unreadable) and
 * checks that the CA and client cert/key files are readable. Caller owns: cma_prom_free(). */
enum cma_errc cma_prom_new(const struct cma_prom_config *cfg, struct cma_prom **ret,
                           struct cma_err *reterr);
void cma_prom_free(struct cma_prom *p);

/* The base URL, as given (for logs). */
const char *cma_prom_url(const struct cma_prom *p);

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
    struct cma_sample *samples; /* VECTOR: one per series; SCALAR: exactly one, no labels;
                                   MATRIX: the last point of each series; STRING: none */
    size_t n_samples;
};

/* Instant query `GET|POST <base>/api/v1/query` with query=<promql>&time=<time_ms as seconds
 * with 3 decimals>. Caller owns *ret: cma_prom_result_free(). */
enum cma_errc cma_prom_query(struct cma_prom *p, const char *promql, int64_t time_ms,
                             struct cma_prom_result **ret, struct cma_err *reterr);
void cma_prom_result_free(struct cma_prom_result *r);

/* Value of a label in a sample, NULL when absent. */
const char *cma_sample_label(const struct cma_sample *s, const char *name);

/* Decodes a Prometheus /api/v1/query JSON body (exposed for tests and fuzzing). */
enum cma_errc cma_prom_decode_query(const char *body, size_t len, struct cma_prom_result **ret,
                                    struct cma_err *reterr);

/* One series of a /api/v1/series answer: its __name__ and its other labels (borrowed, valid
 * only during the callback; n_labels excludes __name__). Return 0 to go on, non-zero to stop
 * (the call then returns CMA_ERR_INTERNAL "series listing stopped by caller"). */
struct cma_label_view {
    const char *name;
    size_t name_len;
    const char *value;
    size_t value_len;
};
typedef int (*cma_series_fn)(void *ctx, const char *metric, size_t metric_len,
                             const struct cma_label_view *labels, size_t n_labels);

/* `GET|POST <base>/api/v1/series` with match[]=<match>&start=<s>&end=<s> (seconds, 3 decimals).
 * The body is parsed as a stream (yajl) fed from the curl write callback: memory stays flat
 * whatever the number of series; no response size ceiling applies, but one series object
 * over 1 MiB is an error. `data: null` → CMA_ERR_BACKEND_RESPONSE "no metrics retrieved".
 * Timeout: series_timeout_ms (0 = 10x the query timeout). */
enum cma_errc cma_prom_series(struct cma_prom *p, const char *match, int64_t start_ms,
                              int64_t end_ms, int64_t series_timeout_ms, cma_series_fn fn,
                              void *ctx, struct cma_err *reterr);

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
