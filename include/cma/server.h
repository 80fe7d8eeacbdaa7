/* server.h: the HTTPS server on libmicrohttpd (GnuTLS). The only user of <microhttpd.h>.
 *
 * Threading (docs/architecture.md, "Connection model"): a few event-loop threads own every
 * connection and never block; each complete request goes to a bounded pool of handler workers,
 * so a request blocked on a slow backend holds one worker and delays nothing else. The
 * handler is called once per complete request, on a worker, with the request fully read (GET
 * bodies are ignored; bodies over 1 MiB → 413). When all max_requests_inflight workers are busy
 * the server answers 429 itself. Health probes without credentials (GET/HEAD /healthz, /livez,
 * /readyz and their subpaths, no Authorization header) run on the event-loop thread instead:
 * the handler must answer them without blocking. With cma_server_config.try_inline set, every
 * other request is first offered to it on the event-loop thread; what it declines goes to a
 * worker.
 * Limits: max_connections in all (at the limit a new connection takes the slot of the oldest
 * one without a request in progress), max_connections_per_client per client IP address; absolute
 * deadlines for the TLS handshake (from accept) and for receiving a request (from the end of
 * the handshake, or from the previous response plus the keep-alive timeout); the keep-alive
 * timeout itself is an inactivity timeout. Request targets with a NUL, control or space byte
 * get 400. The TLS handshake requests, but does not require, a client certificate.
 * The server adds Content-Type (default application/json), Content-Length,
 * Cache-Control: no-cache, private, X-Content-Type-Options: nosniff, and echoes Audit-Id. */
#ifndef CMA_SERVER_H
#define CMA_SERVER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cma/buf.h"
#include "cma/err.h"

struct cma_kv {
    char *key;
    char *value;
};

struct cma_call;

/* How long a request may run: kube-apiserver's --request-timeout default, after which the
 * aggregator in front of the adapter has answered 504 anyway; a client's shorter `timeout`
 * query parameter (a Go duration, as client-go sends it) wins. */
#define CMA_SERVER_REQUEST_TIMEOUT_MS 60000

struct cma_request {
    const char *method;   /* "GET" */
    const char *path;     /* raw, still percent-encoded, without the query string */
    struct cma_kv *query; /* decoded ('+' → space, %XX), in arrival order */
    size_t n_query;
    int64_t start_mono_ms;
    /* The request's deadline (start_mono_ms + CMA_SERVER_REQUEST_TIMEOUT_MS or the client's
     * `timeout`) and whether its client has gone (its connection closed or reset while the
     * handler runs): what backend calls work to (backend.h). NULL for a request built by hand. */
    const struct cma_call *call;
    void *conn; /* private: the MHD connection */
};

/* First value of a query parameter, NULL when absent. */
const char *cma_request_query(const struct cma_request *req, const char *key);
/* A request header (case-insensitive), NULL when absent. */
const char *cma_request_header(const struct cma_request *req, const char *name);

/* Calls fn(ctx, name, value) for every request header in arrival order (repeated headers
 * once per line) until fn returns false. */
void cma_request_headers_each(const struct cma_request *req,
                              bool (*fn)(void *ctx, const char *name, const char *value),
                              void *ctx);

/* Client certificate presented in this connection's TLS handshake (requested, never required,
 * never verified by the server: authenticators verify it). The DER bytes are borrowed from the
 * TLS session and stay valid until the handler returns. */
bool cma_request_has_peer_cert(const struct cma_request *req);
/* The client's leaf certificate; CMA_ERR_NOT_FOUND (with *der NULL, *len 0) when none. */
enum cma_errc cma_request_peer_cert_der(const struct cma_request *req, const unsigned char **der,
                                        size_t *len);
/* Number of certificates the client sent (leaf first, then its intermediates); 0 when none. */
size_t cma_request_peer_chain_len(const struct cma_request *req);
/* Certificate `index` of that chain (0 = leaf); CMA_ERR_NOT_FOUND past the end. */
enum cma_errc cma_request_peer_chain_der(const struct cma_request *req, size_t index,
                                         const unsigned char **der, size_t *len);

struct cma_response {
    int status;               /* default 200 */
    const char *content_type; /* default "application/json"; must be a string literal */
    struct cma_buf body;      /* initialised by the server; the handler appends */
};

typedef void (*cma_handler_fn)(void *app, const struct cma_request *req, struct cma_response *resp);

/* Optional: the event thread's attempt to answer a request without a worker (a thread switch
 * there and back per request). Called on the event-loop thread for every complete request
 * that is not a credential-less probe, with the query decoded and the deadline set, and `resp`
 * initialised as for the handler. true: `resp` is the complete answer, sent as the handler's
 * would be. false: `resp` must be as it was given (nothing written, nothing counted or logged
 * for the request); the request then goes to a worker exactly as without this callback (429
 * when every worker is busy). It must never wait: no network call and no lock that anyone
 * holds across I/O. */
typedef bool (*cma_inline_fn)(void *app, const struct cma_request *req, struct cma_response *resp);

struct cma_server_config {
    const char *bind_address;    /* "0.0.0.0", "127.0.0.1", "::" */
    int port;                    /* 0 → the OS picks; cma_server_port() tells */
    const char *cert_file;       /* PEM serving certificate (chain) */
    const char *key_file;        /* PEM private key */
    const char *client_ca_file;  /* CAs announced in CertificateRequest; NULL → request anyway */
    const char *tls_min_version; /* "VersionTLS12" (default) or "VersionTLS13" */
    const char *tls_cipher_suites;       /* Go names, comma list; NULL = GnuTLS secure defaults */
    unsigned max_connections;            /* 0 → 1000 */
    unsigned max_connections_per_client; /* per client IP; 0 → 100 */
    unsigned max_requests_inflight;      /* handler workers; 0 → 64 */
    unsigned event_threads;              /* event-loop threads; 0 → 2 */
    int64_t tls_handshake_timeout_ms;    /* accept → handshake done; 0 → 10000 */
    int64_t request_header_timeout_ms;   /* handshake done → request received; 0 → 10000 */
    int64_t keep_alive_timeout_ms;       /* idle between requests (inactivity); 0 → 120000 */
    size_t max_request_header_bytes;     /* request line + headers, about; 0 → 16384, min 4096 */
    unsigned tls_reload_interval_ms;     /* how often cert_file/key_file are checked; 0 → 5000 */
    cma_inline_fn try_inline; /* answers from memory on the event thread; NULL: all to workers */
};

struct cma_server;

/* Starts listening and serving. Caller owns: cma_server_stop(). */
enum cma_errc cma_server_start(const struct cma_server_config *cfg, cma_handler_fn handler,
                               void *app, struct cma_server **ret, struct cma_err *reterr);
int cma_server_port(const struct cma_server *s);

/* Graceful shutdown, first half: stops accepting (new connections are refused), closes idle
 * and handshaking connections, answers requests already received (their replies close the
 * connection) and waits up to grace_ms for all of them. true when every connection is gone in
 * time; false leaves the stragglers running (cma_server_stop() then leaves the server to
 * process exit rather than free memory a handler still uses). */
bool cma_server_drain(struct cma_server *s, int64_t grace_ms);

struct cma_server_stats {
    size_t connections;       /* open now */
    size_t busy;              /* of which with a request being handled or answered */
    unsigned workers;         /* handler threads alive now */
    uint64_t cut_deadline;    /* connections closed at a handshake/request deadline */
    uint64_t cut_drain;       /* connections closed by cma_server_drain() */
    uint64_t cut_evict;       /* connections closed to make room at max_connections */
    uint64_t rejected_busy;   /* 429s: every worker was busy */
    uint64_t rejected_target; /* 400s: invalid request target */
    uint64_t inline_answers;  /* requests try_inline answered on the event thread */
};
void cma_server_stats(struct cma_server *s, struct cma_server_stats *ret);
/* Serving certificate reload. A watcher thread calls this every tls_reload_interval_ms; tests
 * may call it directly. When cert_file or key_file changed (device, inode, size or mtime) since
 * the last check, reads both, checks that the key matches the certificate and makes the pair
 * the one every new TLS handshake uses. CMA_OK when unchanged or reloaded; CMA_ERR_TLS (logged,
 * the previous pair keeps serving) when the new files are not a usable pair. */
enum cma_errc cma_server_reload_tls(struct cma_server *s, struct cma_err *reterr);
/* How many times a new pair was swapped in since start. */
unsigned cma_server_tls_reloads(const struct cma_server *s);
/* Stops serving and frees the server (closing every connection) unless a drain that did not
 * finish left handlers running (see cma_server_drain). NULL is a no-op. */
void cma_server_stop(struct cma_server *s);

#endif
