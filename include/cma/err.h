/* err.h: the one error type of the project (STYLE 3.3).
 *
 * Fallible functions return enum cma_errc (CMA_OK == 0) and take `struct cma_err *reterr` last
 * (may be NULL). The struct is caller-owned, usually on the stack; nothing is allocated on the
 * error path. The first error set is kept: later cma_err_set() calls on a set struct do nothing,
 * so the innermost cause survives unwinding. Context is added with cma_err_prefix().
 * Every code has one row in CMA_ERRC_MAP: name, HTTP status, Kubernetes Status reason, meaning.
 * docs/errors.md lists every row (a unit test checks that). Thread-safe: no shared state. */
#ifndef CMA_ERR_H
#define CMA_ERR_H

#include <stdarg.h>
#include <stddef.h>

/* X(name, http_status, k8s_reason, meaning). Ranges: 1xx config, 2xx rules/templates,
 * 3xx request, 4xx auth, 5xx backend and kube API, 6xx internal. */
#define CMA_ERRC_MAP(X)                                                                            \
    X(OK, 200, "", "no error")                                                                     \
    X(FLAG, 400, "BadRequest", "a command-line flag is unknown or has a bad value")                \
    X(CONFIG_IO, 500, "InternalError", "the config file cannot be read")                           \
    X(CONFIG_SYNTAX, 500, "InternalError", "the config file is not valid YAML")                    \
    X(CONFIG_KEY, 500, "InternalError", "unknown or duplicate key in the config")                  \
    X(CONFIG_TYPE, 500, "InternalError", "a config value has the wrong shape")                     \
    X(CONFIG_VALUE, 500, "InternalError", "a config value is not allowed")                         \
    X(REGEX, 500, "InternalError", "a regular expression does not compile")                        \
    X(TEMPLATE_PARSE, 500, "InternalError", "a template does not parse")                           \
    X(TEMPLATE_EXEC, 500, "InternalError", "a template failed while rendering")                    \
    X(RULE, 500, "InternalError", "a rule cannot be compiled or applied")                          \
    X(BAD_REQUEST, 400, "BadRequest", "the request path or parameters are malformed")              \
    X(BAD_SELECTOR, 400, "BadRequest", "a label selector does not parse or cannot be expressed")   \
    X(NOT_FOUND, 404, "NotFound", "no such metric, resource or object")                            \
    X(METHOD_NOT_ALLOWED, 405, "MethodNotAllowed", "only GET is served")                           \
    X(NOT_ACCEPTABLE, 406, "NotAcceptable", "the client accepts no media type we serve")           \
    X(TOO_LARGE, 413, "RequestEntityTooLarge", "an input or response is over its size limit")      \
    X(UNAUTHORIZED, 401, "Unauthorized", "credentials were presented and rejected")                \
    X(FORBIDDEN, 403, "Forbidden", "the user may not do this")                                     \
    X(BACKEND_UNAVAILABLE, 503, "ServiceUnavailable", "the metrics backend cannot be reached")     \
    X(BACKEND_TIMEOUT, 504, "Timeout", "the metrics backend did not answer in time")               \
    X(BACKEND_ERROR, 500, "InternalError", "the metrics backend answered with an error")           \
    X(BACKEND_RESPONSE, 500, "InternalError", "the metrics backend answer cannot be decoded")      \
    X(TOO_MANY_REQUESTS, 429, "TooManyRequests",                                                   \
      "backend answers being decoded hold the whole byte budget; retry shortly")                   \
    X(KUBE_UNAVAILABLE, 503, "ServiceUnavailable", "the Kubernetes API cannot be reached")         \
    X(KUBE_ERROR, 500, "InternalError", "the Kubernetes API answered with an error")               \
    X(NOMEM, 500, "InternalError", "out of memory")                                                \
    X(IO, 500, "InternalError", "an I/O operation failed")                                         \
    X(TLS, 500, "InternalError", "TLS material cannot be loaded or generated")                     \
    X(INTERNAL, 500, "InternalError", "an internal invariant failed")                              \
    X(WOULD_BLOCK, 503, "ServiceUnavailable",                                                      \
      "the answer needs a network call the caller may not wait for (never sent to a client)")

enum cma_errc {
#define CMA_ERRC_ENUM(name, status, reason, meaning) CMA_ERR_##name,
    CMA_ERRC_MAP(CMA_ERRC_ENUM)
#undef CMA_ERRC_ENUM
        CMA_ERRC__COUNT
};
#define CMA_OK CMA_ERR_OK

#define CMA_ERR_MSG_MAX 512
#define CMA_ERR_FILE_MAX 256

struct cma_err {
    enum cma_errc code;          /* CMA_OK while unset */
    char file[CMA_ERR_FILE_MAX]; /* "" when no position */
    unsigned line;               /* 1-based; 0 = no position */
    unsigned column;             /* 1-based; 0 = no column */
    char msg[CMA_ERR_MSG_MAX];   /* one line, no trailing newline */
};

/* Resets to CMA_OK with no position and an empty message. */
void cma_err_clear(struct cma_err *err);

/* Sets code and message unless err is NULL or already set. Returns `code` so callers can write
 * `return cma_err_set(reterr, CMA_ERR_X, "...")`. */
enum cma_errc cma_err_set(struct cma_err *err, enum cma_errc code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
enum cma_errc cma_err_vset(struct cma_err *err, enum cma_errc code, const char *fmt, va_list ap)
    __attribute__((format(printf, 3, 0)));

/* Same, with a position (file may be NULL or ""). */
enum cma_errc cma_err_set_at(struct cma_err *err, enum cma_errc code, const char *file,
                             unsigned line, unsigned column, const char *fmt, ...)
    __attribute__((format(printf, 6, 7)));

/* Adds a position to an error that has none yet (keeps an existing one). */
void cma_err_set_pos(struct cma_err *err, const char *file, unsigned line, unsigned column);

/* Prefixes the message of a set error: cma_err_prefix(err, "rule %zu: ", i). No-op if unset. */
void cma_err_prefix(struct cma_err *err, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* Copies src into dst unless dst is NULL or set. */
void cma_err_copy(struct cma_err *dst, const struct cma_err *src);

/* "file:line:column: message" (or "file:line: message", or "message"). Returns the length that
 * would have been written (snprintf semantics); `out` is always NUL-terminated when out_len > 0. */
size_t cma_err_format_pos(const struct cma_err *err, char *out, size_t out_len);

int cma_errc_http_status(enum cma_errc code);
const char *cma_errc_reason(enum cma_errc code);  /* Kubernetes Status reason */
const char *cma_errc_name(enum cma_errc code);    /* "BACKEND_TIMEOUT" */
const char *cma_errc_meaning(enum cma_errc code); /* one line */

#endif
