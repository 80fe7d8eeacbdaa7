/* fakehttp.h: what C unit tests share to talk to the outside world, linked into every unit test
 * (cma_testlib, cmake/helpers.cmake):
 * - a fake HTTP/1.1 server on 127.0.0.1 and a free port, in its own thread, that stands in for
 *   Prometheus, kube-apiserver or a webhook: it answers one connection at a time from a table of
 *   canned answers (in order, or by request path) or from a callback, and records every request
 *   (request line, headers, body) for the test to inspect; every answer closes its connection;
 * - loopback client helpers: a plain TCP connect, a port nothing listens on;
 * - a fixture reader that finds files relative to the source tree (../shared/fixtures/... and
 *   tests/fixtures/...): the CMA_SOURCE_DIR environment variable (ctest sets it), else the
 *   source directory compiled in, so a test binary also runs by hand from any directory.
 * Nothing here calls cmocka: functions return NULL/-1/false on failure and the test asserts. */
#ifndef CMA_TEST_FAKEHTTP_H
#define CMA_TEST_FAKEHTTP_H

#include <stdbool.h>
#include <stddef.h>

/* One canned answer. In a table, `path` selects route mode (see cma_fake_http_start). */
struct cma_fake_answer {
    const char *path;         /* route mode: the request path (no query) it answers */
    int status;               /* 0 = close the connection without answering */
    const char *content_type; /* NULL = application/json */
    const char *body;         /* NULL = empty */
    size_t body_len;          /* 0 = strlen(body) */
    size_t chunk;             /* > 0: chunked transfer encoding, this many bytes per chunk */
    int delay_ms;             /* wait before answering (cut short by cma_fake_http_stop) */
    size_t declared_len;      /* > 0: Content-Length to announce (body_len bytes are sent) */
};

/* One recorded request. Strings are NUL-terminated copies owned by the server. */
struct cma_fake_request {
    char *head;   /* request line and headers, CRLFs kept */
    char *method; /* "GET" */
    char *target; /* "/api/v1/query?query=up" as sent */
    char *path;   /* target without the query string */
    char *body;   /* Content-Length bytes (not chunked bodies) */
    size_t body_len;
};

/* Callback mode: fills *ans for req (preset to 404 text/plain). ans->body must stay valid until
 * the server is stopped. Runs on the server thread. */
typedef void (*cma_fake_http_fn)(void *ctx, const struct cma_fake_request *req,
                                 struct cma_fake_answer *ans);

struct cma_fake_http;

/* Starts a server answering from answers[0..n) (copied; bodies are borrowed and must outlive the
 * server). When answers[0].path is set, each request gets the answer whose path equals its path
 * (404 "404 page not found" otherwise); else answers go out in order and the last one repeats.
 * n == 0: every request gets 404. NULL on failure (errno set). */
struct cma_fake_http *cma_fake_http_start(const struct cma_fake_answer *answers, size_t n);
/* Starts a server that asks fn for each answer. NULL on failure. */
struct cma_fake_http *cma_fake_http_start_fn(cma_fake_http_fn fn, void *ctx);
/* Stops the server (waits for its thread) and frees it with its recorded requests. NULL: no-op. */
void cma_fake_http_stop(struct cma_fake_http *s);

int cma_fake_http_port(const struct cma_fake_http *s);
/* "http://127.0.0.1:<port><suffix>" (malloc'ed; NULL on failure). */
char *cma_fake_http_url(const struct cma_fake_http *s, const char *suffix);

/* Requests recorded so far (a request is recorded before it is answered). */
size_t cma_fake_http_count(struct cma_fake_http *s);
/* Recorded request i (oldest first), NULL when there is none yet. Valid until stop. */
const struct cma_fake_request *cma_fake_http_request(struct cma_fake_http *s, size_t i);
/* True when request i has the header line `line` ("Name: value", name case-insensitive, value
 * exact). */
bool cma_fake_http_has_header(struct cma_fake_http *s, size_t i, const char *line);

/* A TCP connection to 127.0.0.1:port; -1 with errno on failure. */
int cma_loopback_connect(int port);
/* A loopback port that nothing listens on right now (bound, then closed); -1 on failure. */
int cma_loopback_unused_port(void);

/* The source tree: $CMA_SOURCE_DIR, else the directory the tests were configured from. */
const char *cma_source_dir(void);
/* Reads <source tree>/<relpath> whole (NUL-terminated; *len = its size, len may be NULL).
 * NULL when it cannot be read. Examples: "../shared/fixtures/kube-apiserver/discovery-api.json",
 * "tests/fixtures/rule-corpus/...". */
char *cma_fixture_read(const char *relpath, size_t *len);
/* Same for ../shared/fixtures/<name> ("kube-apiserver/pods-ml-all-running.json"). */
char *cma_shared_fixture_read(const char *name, size_t *len);
/* Same for ../shared/fixtures/kube-apiserver/<name> (recorded kube-apiserver answers); says on
 * stderr which file it could not read. */
char *cma_kube_fixture_read(const char *name, size_t *len);
/* The response body of a recorded exchange (a .http file under ../shared/fixtures/: request,
 * then "HTTP/1.1 ..." head, blank line, body). NULL when the file or its body is missing. */
char *cma_shared_fixture_http_body(const char *name, size_t *len);

/* Reads any file whole (NUL-terminated); NULL on failure. */
char *cma_file_read(const char *path, size_t *len);
/* Writes text to path (truncating); false on failure. */
bool cma_file_write(const char *path, const char *text);

#endif
