/* server.c: the HTTPS server on libmicrohttpd 0.9.75 + GnuTLS; the only <microhttpd.h> user.
 * Owns the daemon and its event loops, the hand-off of requests to the worker pool and back,
 * the wiring of connections to their deadlines, draining, TLS options (priorities,
 * client-certificate request, certificate reload), raw-path, target and query handling,
 * per-request state, body limits and the common response headers.
 *
 * DESIGN
 * - Connection model (docs/architecture.md): libmicrohttpd's epoll event loop on a few threads
 *   (MHD_OPTION_THREAD_POOL_SIZE) that never block: they accept, run TLS handshakes, parse
 *   requests and write responses for every connection. A complete request is then handed to a
 *   bounded worker pool (workpool.c): the connection is suspended (MHD_suspend_connection), a
 *   worker runs the handler, which may block on the backend, kube API or auth webhooks, stores
 *   the reply in the request state and resumes the connection; libmicrohttpd then calls
 *   on_request again on the event thread, which queues the stored reply. A full pool answers 429
 *   at once. Health probes without credentials (GET/HEAD /healthz, /livez, /readyz and their
 *   subpaths, no Authorization header) are answered on the event thread itself: their handler
 *   never blocks, so kubelet probes answer even when every worker waits on a hung backend.
 * - Event-thread fast path (cma_server_config.try_inline, the app's cma_app_try_inline): every
 *   other complete request is first offered to try_inline on the event thread, after its query
 *   is decoded and its deadline set (prepare_request: once per request, a worker reuses it). It
 *   answers what comes from memory (discovery documents, /version, health, 404/405) when
 *   authentication and authorization need no webhook call (certificates, anonymous, cached
 *   TokenReview/SubjectAccessReview answers), through the same code the worker runs with a
 *   "memory only" flag, so the reply, log line and metrics are the worker's. Anything else
 *   (a data route, a cache miss) is declined with nothing written or counted and goes to a
 *   worker as before. This saves the two thread switches per request (suspend, worker, resume)
 *   that dominated discovery's CPU, and discovery answers while every worker is busy. It cannot
 *   block: the app makes no network call there, and the only locks on that path are short
 *   mutexes never held across I/O (auth snapshot, verifier and webhook caches, catalog store,
 *   discovery's ruleset pointer, a metric's new label set). What it costs is CPU on the event
 *   thread: a client certificate chain's first verification (then cached), a discovery document's
 *   first encoding per catalog snapshot, and freeing a snapshot whose last reference it held.
 * - Deadlines (conntrack.c): NOTIFY_CONNECTION tracks each socket from accept to close; a
 *   GnuTLS handshake hook marks the end of the handshake; the last on_request call of a request
 *   marks it received; NOTIFY_COMPLETED marks it answered (keep-alive). A sweeper thread cuts
 *   connections whose handshake or request is not complete by an absolute deadline.
 *   MHD_OPTION_CONNECTION_TIMEOUT stays the (activity-reset) keep-alive idle timeout;
 *   MHD_OPTION_PER_IP_CONNECTION_LIMIT caps connections per client address. At
 *   max_connections a new connection takes the slot of the oldest one without a request in
 *   progress; libmicrohttpd's own limit is set a little higher (hard_limit) so the newcomer is
 *   accepted while the evicted connection closes.
 * - Draining (SIGTERM): the listening socket is quiesced and shut down (new connections are
 *   refused), idle and handshaking connections are cut, replies get "Connection: close", and
 *   cma_server_drain() waits for the requests already received. libmicrohttpd must not be
 *   stopped while a connection is suspended, so cma_server_stop() only stops it after a drain
 *   that finished (or when no worker is busy).
 * - Request targets: the URI log callback sees the request target as the client sent it, up to
 *   the first NUL. libmicrohttpd cuts the request line in place, writing a NUL over the space
 *   before the HTTP version, so the target is whole exactly when the version string starts one
 *   byte after that NUL; a NUL the client sent ends the string earlier and the request gets 400,
 *   as do control characters and spaces (Go's net/http rejects the same bytes).
 * - Raw paths: MHD_OPTION_UNESCAPE_CALLBACK is a no-op, so `url` and the query arguments arrive
 *   still percent-encoded. MHD itself turns '+' into ' ' in query arguments before calling it
 *   (MHD_parse_arguments_: MHD_unescape_plus, then the callback); we then percent-decode keys
 *   and values with plus_is_space=false, so "%2B" becomes a literal '+'. A malformed escape or
 *   an encoded NUL in the query gives 400.
 * - Per-request state lives in *con_cls: the URI log callback creates it; the first on_request
 *   call checks the target (and rejects a declared body over 1 MiB at once, before any
 *   "100 Continue"; MHD then closes the connection), upload calls count and discard the body (a
 *   chunked one over 1 MiB is answered 413 at its end, one over 16 MiB gets the connection
 *   closed), the final call (no upload data) runs the handler or hands it to a worker, and the
 *   call after the worker resumed the connection queues the reply.
 *   MHD_OPTION_NOTIFY_COMPLETED frees it.
 * - A request's deadline and its client (struct cma_call, backend.h, in the request state): the
 *   deadline is CMA_SERVER_REQUEST_TIMEOUT_MS after the request arrived, or the client's shorter
 *   `timeout` parameter. libmicrohttpd does not watch a suspended connection, so nothing tells
 *   the worker that the client left; instead gone() polls the socket (POLLRDHUP: the client
 *   closed its end; POLLHUP/POLLERR: reset), without reading, so the bytes stay for the event
 *   loop. The descriptor stays open while the connection is suspended (the sweeper leaves BUSY
 *   connections alone). Backend calls ask it about once a second, and at most every
 *   CMA_GONE_CHECK_MS (transport.c), so a query whose client has gone is aborted instead of
 *   holding a Prometheus query slot until its timeout.
 *   Like Go's net/http, a client that half-closes its side counts as gone.
 * - Client certificates are requested, never required: MHD 0.9.75 calls
 *   gnutls_certificate_server_set_request(GNUTLS_CERT_REQUEST) on every session only when
 *   MHD_OPTION_HTTPS_MEM_TRUST is set (daemon.c, new_connection_prepare_), and never verifies
 *   the peer. So the trust list is always set: the client CA bundle when given, else the
 *   serving certificate file itself. Its CA names are sent in the CertificateRequest.
 * - No ALPN (MHD_OPTION_TLS_NO_ALPN): h2 is never offered, clients fall back to HTTP/1.1.
 * - TLS priorities: min version → "NORMAL:-VERS-ALL:+VERS-TLS1.3:+VERS-TLS1.2"...; Go cipher
 *   suite names → GnuTLS key exchanges, ciphers and MACs (see suite_map). GnuTLS cannot list
 *   TLS 1.2 suites one by one, so the named parts are allowed in every combination; TLS 1.3
 *   keeps its AEAD suites, as Go's TLS 1.3 suites are not configurable either.
 * - TLS material is checked with GnuTLS before the daemon starts, so a bad key or CA bundle is
 *   a CMA_ERR_TLS with GnuTLS's reason instead of a bare start failure.
 * - MHD's own log lines go to our log: as errors while starting, at --v=2 afterwards (they are
 *   mostly about misbehaving clients: failed handshakes, resets).
 * - Serving certificate reload (cert-manager rotates the files in place): the certificate and key
 *   are not given to MHD; MHD_OPTION_HTTPS_CERT_CALLBACK (gnutls retrieve_function2) hands each
 *   handshake the current pair. MHD 0.9.75 has no per-daemon argument for that callback, so
 *   MHD_OPTION_NOTIFY_CONNECTION (called after the GnuTLS session exists, before the handshake)
 *   stores the connection's tracking entry, whose owner is the server, in the session
 *   (gnutls_session_set_ptr). A watcher thread stats both files every tls_reload_interval_ms
 *   (the change signature of clients/tlsmat.h: device, inode, size, mtime, ctime); on a change
 *   it reads and checks the pair with tlsmat (the key matches the leaf) and swaps it in under
 *   tls_lock. A bad pair is logged and the old
 *   one keeps serving; it is tried again on the next change of either file. GnuTLS does not
 *   free what the callback returns and a handshake may still use a pair after a swap, so
 *   replaced pairs are kept (a few KiB per rotation) and freed by cma_server_stop(). */
#include "cma/server.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <gnutls/abstract.h>
#include <gnutls/gnutls.h>
#include <microhttpd.h>
#include <poll.h>

#include "cma/arena.h"
#include "cma/backend.h"
#include "cma/clock.h"
#include "cma/log.h"
#include "cma/router.h"
#include "cma/str.h"
#include "cma/tlsmat.h"
#include "http_internal.h"

#define MAX_BODY_BYTES ((size_t)1 << 20)
/* A body that grows past the limit is discarded up to this much, then the connection closes. */
#define MAX_DISCARD_BYTES ((size_t)16 << 20)
#define DEFAULT_MAX_CONNECTIONS 1000u
#define DEFAULT_MAX_PER_CLIENT 100u
#define DEFAULT_MAX_IN_FLIGHT 64u
#define DEFAULT_HANDSHAKE_TIMEOUT_MS 10000
#define DEFAULT_HEADER_TIMEOUT_MS 10000
#define DEFAULT_KEEP_ALIVE_TIMEOUT_MS 120000
#define DEFAULT_EVENT_THREADS 2u
/* Worker threads kept when idle, and how long an extra idle one lives. */
#define MIN_WORKERS 2u
#define WORKER_IDLE_EXIT_MS 30000
/* cma_server_stop() without a finished drain: how long it waits for running handlers. */
#define STOP_WAIT_MS 1000
/* libmicrohttpd's per-connection memory: request line + headers must fit (a little less than
 * this: the reply's headers are built there too). It is touched in full by every connection
 * that made a request, so it is most of a keep-alive connection's cost besides the TLS
 * session (docs/architecture.md). */
#define DEFAULT_HEADER_BYTES ((size_t)16 << 10)
#define MIN_HEADER_BYTES ((size_t)4 << 10)
#define MAX_QUERY_PARAMS 1024
#define LOG_LINE_MAX 512
#define DEFAULT_TLS_RELOAD_INTERVAL_MS 5000u
#define MAX_CHAIN_CERTS 16u

/* One parsed serving certificate chain and its key; immutable once published. */
struct tls_pair {
    gnutls_pcert_st pcerts[MAX_CHAIN_CERTS];
    unsigned n_pcerts;
    gnutls_privkey_t key;
    struct tls_pair *older; /* replaced pairs, freed at stop */
};

struct cma_server {
    struct MHD_Daemon *daemon;
    cma_handler_fn handler;
    cma_inline_fn try_inline; /* NULL: every request goes to a worker (see DESIGN) */
    void *app;
    int port;
    char *cert_pem;
    char *key_pem;
    size_t key_len;
    char *trust_pem;
    char *priorities;
    atomic_bool started;            /* MHD log lines: errors before, --v=2 after */
    pthread_mutex_t start_msg_lock; /* guards start_msg */
    char start_msg[LOG_LINE_MAX];   /* last MHD log line while starting */
    /* serving certificate reload (see DESIGN) */
    char *cert_file;
    char *key_file;
    pthread_mutex_t tls_lock;       /* guards pair, cert_sig, key_sig, stopping */
    pthread_cond_t tls_wake;        /* signalled by stop */
    struct tls_pair *pair;          /* current pair; older ones hang off it */
    struct cma_tlsmat_sig cert_sig; /* files as last seen (loaded or rejected) */
    struct cma_tlsmat_sig key_sig;
    bool stopping;
    bool watcher_running;
    pthread_t watcher;
    unsigned reload_interval_ms;
    atomic_uint reloads; /* pairs swapped in since start */
    /* connection model (see DESIGN) */
    struct cma_workpool *pool;
    struct cma_conntrack *track;
    atomic_bool draining;          /* replies close their connection */
    atomic_ullong rejected_busy;   /* 429s because every worker was busy */
    atomic_ullong rejected_target; /* 400s for an invalid request target */
    atomic_ullong inline_answers;  /* requests try_inline answered on the event thread */
    int quiesced_fd;               /* listening socket after a drain, closed by stop; -1 */
    bool drained;                  /* a drain finished: no suspended connection is left */
};

struct request_state {
    struct cma_request req;
    struct cma_server *server;
    const char *raw_target;  /* the URI log callback's view (MHD's read buffer) */
    size_t raw_target_len;   /* bytes up to the first NUL */
    size_t body_bytes;       /* counted (and discarded) body bytes */
    bool headers_seen;       /* the first on_request call has run */
    bool target_bad;         /* NUL, control or space byte in the request target */
    bool body_too_large;     /* past MAX_BODY_BYTES */
    bool responded;          /* a response was queued for this request */
    bool prepared;           /* query decoded and deadline set (prepare_request) */
    bool dispatched;         /* handed to a worker (the connection was suspended) */
    atomic_bool reply_ready; /* the worker's reply is in `reply` */
    struct cma_response reply;
    size_t query_cap;
    struct cma_arena arena; /* cma_request_arena(): from the request line to on_completed */
    int fd;                 /* the connection's socket, for gone(); -1: unknown */
    struct cma_call call;   /* req.call: the request's deadline and gone() */
};

static const char STATUS_413[] =
    "{\"kind\":\"Status\",\"apiVersion\":\"v1\",\"metadata\":{},\"status\":\"Failure\","
    "\"message\":\"request body too large\",\"reason\":\"RequestEntityTooLarge\",\"code\":413}";
static const char STATUS_400_QUERY[] =
    "{\"kind\":\"Status\",\"apiVersion\":\"v1\",\"metadata\":{},\"status\":\"Failure\","
    "\"message\":\"malformed query string\",\"reason\":\"BadRequest\",\"code\":400}";
static const char STATUS_500_NOMEM[] =
    "{\"kind\":\"Status\",\"apiVersion\":\"v1\",\"metadata\":{},\"status\":\"Failure\","
    "\"message\":\"out of memory\",\"reason\":\"InternalError\",\"code\":500}";

static const char STATUS_400_TARGET[] =
    "{\"kind\":\"Status\",\"apiVersion\":\"v1\",\"metadata\":{},\"status\":\"Failure\","
    "\"message\":\"invalid request target: NUL, control and space bytes must be percent-encoded\","
    "\"reason\":\"BadRequest\",\"code\":400}";
/* kube-apiserver's answer when --max-requests-inflight is reached (apiserver/pkg/server/filters).
 */
static const char STATUS_429[] =
    "{\"kind\":\"Status\",\"apiVersion\":\"v1\",\"metadata\":{},\"status\":\"Failure\","
    "\"message\":\"Too many requests, please try again later.\",\"reason\":\"TooManyRequests\","
    "\"details\":{\"retryAfterSeconds\":1},\"code\":429}";

static const char STATUS_500_STATUS[] =
    "{\"kind\":\"Status\",\"apiVersion\":\"v1\",\"metadata\":{},\"status\":\"Failure\","
    "\"message\":\"invalid response status\",\"reason\":\"InternalError\",\"code\":500}";

/* ----- request accessors ----- */

const char *cma_request_query(const struct cma_request *req, const char *key)
{
    if (!req || !key)
        return NULL;
    for (size_t i = 0; i < req->n_query; i++) {
        if (strcmp(req->query[i].key, key) == 0)
            return req->query[i].value;
    }
    return NULL;
}

const char *cma_request_header(const struct cma_request *req, const char *name)
{
    if (!req || !req->conn || !name)
        return NULL;
    return MHD_lookup_connection_value(req->conn, MHD_HEADER_KIND, name);
}

static const gnutls_datum_t *peer_chain(const struct cma_request *req, unsigned *ret_n)
{
    *ret_n = 0;
    if (!req || !req->conn)
        return NULL;
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(req->conn, MHD_CONNECTION_INFO_GNUTLS_SESSION);
    if (!ci || !ci->tls_session)
        return NULL;
    gnutls_session_t session = ci->tls_session;
    if (gnutls_certificate_type_get2(session, GNUTLS_CTYPE_PEERS) != GNUTLS_CRT_X509)
        return NULL;
    unsigned n = 0;
    const gnutls_datum_t *chain = gnutls_certificate_get_peers(session, &n);
    if (!chain || n == 0)
        return NULL;
    *ret_n = n;
    return chain;
}

size_t cma_request_peer_chain_len(const struct cma_request *req)
{
    unsigned n;
    peer_chain(req, &n);
    return n;
}

bool cma_request_has_peer_cert(const struct cma_request *req)
{
    return cma_request_peer_chain_len(req) > 0;
}

enum cma_errc cma_request_peer_chain_der(const struct cma_request *req, size_t index,
                                         const unsigned char **der, size_t *len)
{
    unsigned n;
    const gnutls_datum_t *chain = peer_chain(req, &n);
    if (der)
        *der = NULL;
    if (len)
        *len = 0;
    if (!chain || index >= n || chain[index].size == 0)
        return CMA_ERR_NOT_FOUND;
    if (der)
        *der = chain[index].data;
    if (len)
        *len = chain[index].size;
    return CMA_OK;
}

enum cma_errc cma_request_peer_cert_der(const struct cma_request *req, const unsigned char **der,
                                        size_t *len)
{
    return cma_request_peer_chain_der(req, 0, der, len);
}

/* ----- TLS options ----- */

/* Go crypto/tls names (and their legacy aliases) → GnuTLS priority parts. kx NULL: a TLS 1.3
 * suite, which Go accepts in the list and ignores (its TLS 1.3 suites are fixed). */
struct suite_map {
    const char *go_name;
    const char *kx;
    const char *cipher;
    const char *mac;
};

static const struct suite_map suite_map[] = {
    {"TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256", "ECDHE-ECDSA", "AES-128-GCM", "AEAD"},
    {"TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384", "ECDHE-ECDSA", "AES-256-GCM", "AEAD"},
    {"TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256", "ECDHE-RSA", "AES-128-GCM", "AEAD"},
    {"TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384", "ECDHE-RSA", "AES-256-GCM", "AEAD"},
    {"TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256", "ECDHE-ECDSA", "CHACHA20-POLY1305", "AEAD"},
    {"TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305", "ECDHE-ECDSA", "CHACHA20-POLY1305", "AEAD"},
    {"TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256", "ECDHE-RSA", "CHACHA20-POLY1305", "AEAD"},
    {"TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305", "ECDHE-RSA", "CHACHA20-POLY1305", "AEAD"},
    {"TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA", "ECDHE-ECDSA", "AES-128-CBC", "SHA1"},
    {"TLS_ECDHE_ECDSA_WITH_AES_256_CBC_SHA", "ECDHE-ECDSA", "AES-256-CBC", "SHA1"},
    {"TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA", "ECDHE-RSA", "AES-128-CBC", "SHA1"},
    {"TLS_ECDHE_RSA_WITH_AES_256_CBC_SHA", "ECDHE-RSA", "AES-256-CBC", "SHA1"},
    {"TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA256", "ECDHE-ECDSA", "AES-128-CBC", "SHA256"},
    {"TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA256", "ECDHE-RSA", "AES-128-CBC", "SHA256"},
    {"TLS_RSA_WITH_AES_128_GCM_SHA256", "RSA", "AES-128-GCM", "AEAD"},
    {"TLS_RSA_WITH_AES_256_GCM_SHA384", "RSA", "AES-256-GCM", "AEAD"},
    {"TLS_RSA_WITH_AES_128_CBC_SHA", "RSA", "AES-128-CBC", "SHA1"},
    {"TLS_RSA_WITH_AES_256_CBC_SHA", "RSA", "AES-256-CBC", "SHA1"},
    {"TLS_RSA_WITH_AES_128_CBC_SHA256", "RSA", "AES-128-CBC", "SHA256"},
    {"TLS_ECDHE_RSA_WITH_3DES_EDE_CBC_SHA", "ECDHE-RSA", "3DES-CBC", "SHA1"},
    {"TLS_RSA_WITH_3DES_EDE_CBC_SHA", "RSA", "3DES-CBC", "SHA1"},
    {"TLS_AES_128_GCM_SHA256", NULL, NULL, NULL},
    {"TLS_AES_256_GCM_SHA384", NULL, NULL, NULL},
    {"TLS_CHACHA20_POLY1305_SHA256", NULL, NULL, NULL},
};

static bool has_part(const char *s, const char *part)
{
    size_t n = strlen(part);
    for (const char *p = strstr(s, ":+"); p; p = strstr(p + 1, ":+")) {
        if (strncmp(p + 2, part, n) == 0 && (p[2 + n] == ':' || p[2 + n] == '\0'))
            return true;
    }
    return false;
}

/* Appends ":+<part>" unless that element is already there. */
static enum cma_errc add_part(struct cma_buf *b, const char *part)
{
    if (has_part(cma_buf_str(b), part))
        return CMA_OK;
    return cma_buf_printf(b, ":+%s", part);
}

static const char *versions_for(const char *min_version)
{
    if (!min_version || !*min_version || strcmp(min_version, "VersionTLS12") == 0)
        return "-VERS-ALL:+VERS-TLS1.3:+VERS-TLS1.2";
    if (strcmp(min_version, "VersionTLS13") == 0)
        return "-VERS-ALL:+VERS-TLS1.3";
    if (strcmp(min_version, "VersionTLS11") == 0)
        return "-VERS-ALL:+VERS-TLS1.3:+VERS-TLS1.2:+VERS-TLS1.1";
    if (strcmp(min_version, "VersionTLS10") == 0)
        return "-VERS-ALL:+VERS-TLS1.3:+VERS-TLS1.2:+VERS-TLS1.1:+VERS-TLS1.0";
    return NULL;
}

static enum cma_errc add_suites(struct cma_buf *b, const char *suites, struct cma_err *reterr)
{
    enum cma_errc rc = cma_buf_appends(b, ":-KX-ALL:-CIPHER-ALL:-MAC-ALL");
    /* TLS 1.3's suites stay as GnuTLS's defaults (Go's are not configurable either). */
    static const char *const tls13[] = {"AES-256-GCM", "CHACHA20-POLY1305", "AES-128-GCM", "AEAD"};
    for (size_t i = 0; rc == CMA_OK && i < sizeof tls13 / sizeof tls13[0]; i++)
        rc = add_part(b, tls13[i]);
    const char *p = suites;
    while (rc == CMA_OK && *p) {
        while (*p == ' ' || *p == '\t' || *p == ',')
            p++;
        const char *end = p;
        while (*end && *end != ',')
            end++;
        size_t len = (size_t)(end - p);
        while (len > 0 && (p[len - 1] == ' ' || p[len - 1] == '\t'))
            len--;
        if (len == 0)
            break;
        const struct suite_map *m = NULL;
        for (size_t i = 0; i < sizeof suite_map / sizeof suite_map[0]; i++) {
            if (strlen(suite_map[i].go_name) == len && memcmp(suite_map[i].go_name, p, len) == 0)
                m = &suite_map[i];
        }
        if (!m)
            return cma_err_set(reterr, CMA_ERR_TLS,
                               "--tls-cipher-suites: unknown or unsupported cipher suite \"%.*s\"",
                               (int)(len > 100 ? 100 : len), p);
        if (m->kx) {
            rc = add_part(b, m->kx);
            if (rc == CMA_OK)
                rc = add_part(b, m->cipher);
            if (rc == CMA_OK)
                rc = add_part(b, m->mac);
        }
        p = end;
    }
    if (rc != CMA_OK)
        return cma_err_set(reterr, rc, "cannot build the TLS priority string");
    return CMA_OK;
}

/* Builds and checks the GnuTLS priority string; caller frees *ret. */
static enum cma_errc build_priorities(const struct cma_server_config *cfg, char **ret,
                                      struct cma_err *reterr)
{
    const char *versions = versions_for(cfg->tls_min_version);
    if (!versions)
        return cma_err_set(reterr, CMA_ERR_TLS,
                           "--tls-min-version: \"%s\" is not one of VersionTLS10, VersionTLS11, "
                           "VersionTLS12, VersionTLS13",
                           cfg->tls_min_version);
    struct cma_buf b;
    cma_buf_init(&b, 4096);
    enum cma_errc rc = cma_buf_printf(&b, "NORMAL:%s", versions);
    if (rc != CMA_OK) {
        cma_buf_done(&b);
        return cma_err_set(reterr, rc, "cannot build the TLS priority string");
    }
    if (cfg->tls_cipher_suites && *cfg->tls_cipher_suites) {
        rc = add_suites(&b, cfg->tls_cipher_suites, reterr);
        if (rc != CMA_OK) {
            cma_buf_done(&b);
            return rc;
        }
    }
    gnutls_priority_t prio;
    const char *err_pos = NULL;
    int grc = gnutls_priority_init(&prio, cma_buf_str(&b), &err_pos);
    if (grc != GNUTLS_E_SUCCESS) {
        cma_err_set(reterr, CMA_ERR_TLS, "TLS priority \"%s\" rejected at \"%s\": %s",
                    cma_buf_str(&b), err_pos ? err_pos : "", gnutls_strerror(grc));
        cma_buf_done(&b);
        return CMA_ERR_TLS;
    }
    gnutls_priority_deinit(prio);
    char *s = cma_buf_take(&b);
    if (!s)
        return cma_err_set(reterr, CMA_ERR_NOMEM, "out of memory");
    *ret = s;
    return CMA_OK;
}

/* Loads the PEM material into a throw-away GnuTLS credential to report problems precisely. */
static enum cma_errc check_tls_material(const struct cma_server *s,
                                        const struct cma_server_config *cfg, struct cma_err *reterr)
{
    gnutls_certificate_credentials_t cred;
    if (gnutls_certificate_allocate_credentials(&cred) != GNUTLS_E_SUCCESS)
        return cma_err_set(reterr, CMA_ERR_NOMEM, "out of memory");
    gnutls_datum_t cert = {(unsigned char *)s->cert_pem, (unsigned)strlen(s->cert_pem)};
    gnutls_datum_t key = {(unsigned char *)s->key_pem, (unsigned)s->key_len};
    gnutls_datum_t trust = {(unsigned char *)s->trust_pem, (unsigned)strlen(s->trust_pem)};
    enum cma_errc rc = CMA_OK;
    int grc = gnutls_certificate_set_x509_key_mem(cred, &cert, &key, GNUTLS_X509_FMT_PEM);
    if (grc < 0)
        rc = cma_err_set(reterr, CMA_ERR_TLS, "cannot use certificate %s with key %s: %s",
                         cfg->cert_file, cfg->key_file, gnutls_strerror(grc));
    if (rc == CMA_OK) {
        grc = gnutls_certificate_set_x509_trust_mem(cred, &trust, GNUTLS_X509_FMT_PEM);
        if (grc <= 0)
            rc = cma_err_set(reterr, CMA_ERR_TLS, "no usable CA certificate in %s%s%s",
                             cfg->client_ca_file ? cfg->client_ca_file : cfg->cert_file,
                             grc < 0 ? ": " : "", grc < 0 ? gnutls_strerror(grc) : "");
    }
    gnutls_certificate_free_credentials(cred);
    return rc;
}

/* ----- serving certificate reload ----- */

static void free_pair(struct tls_pair *p)
{
    while (p) {
        struct tls_pair *older = p->older;
        for (unsigned i = 0; i < p->n_pcerts; i++)
            gnutls_pcert_deinit(&p->pcerts[i]);
        if (p->key)
            gnutls_privkey_deinit(p->key);
        free(p);
        p = older;
    }
}

/* Parses PEM text into a pair for GnuTLS, once the project's one TLS material check
 * (clients/tlsmat.c: parses, key matches the first certificate) has accepted it. */
static enum cma_errc parse_pair(const char *cert_pem, size_t cert_len, const char *key_pem,
                                size_t key_len, struct tls_pair **ret, struct cma_err *reterr)
{
    enum cma_errc rc = cma_tlsmat_check_pair(cert_pem, cert_len, key_pem, key_len, reterr);
    if (rc != CMA_OK)
        return rc;
    struct tls_pair *p = calloc(1, sizeof *p);
    if (!p)
        return cma_err_set(reterr, CMA_ERR_NOMEM, "out of memory");
    gnutls_datum_t cert = {(unsigned char *)cert_pem, (unsigned)cert_len};
    gnutls_datum_t key = {(unsigned char *)key_pem, (unsigned)key_len};
    unsigned n = MAX_CHAIN_CERTS;
    int grc = gnutls_pcert_list_import_x509_raw(p->pcerts, &n, &cert, GNUTLS_X509_FMT_PEM, 0);
    if (grc < 0 || n == 0) {
        free(p);
        return cma_err_set(reterr, CMA_ERR_TLS, "cannot parse the certificate chain: %s",
                           grc < 0 ? gnutls_strerror(grc) : "no certificate");
    }
    p->n_pcerts = n;
    grc = gnutls_privkey_init(&p->key);
    if (grc == GNUTLS_E_SUCCESS)
        grc = gnutls_privkey_import_x509_raw(p->key, &key, GNUTLS_X509_FMT_PEM, NULL, 0);
    if (grc != GNUTLS_E_SUCCESS) {
        free_pair(p);
        return cma_err_set(reterr, CMA_ERR_TLS, "cannot parse the private key: %s",
                           gnutls_strerror(grc));
    }
    *ret = p;
    return CMA_OK;
}

/* Reads and parses the pair from its files. */
static enum cma_errc load_pair(const struct cma_server *s, struct tls_pair **ret,
                               struct cma_err *reterr)
{
    char *cert_pem = NULL;
    char *key_pem = NULL;
    size_t cert_len = 0;
    size_t key_len = 0;
    enum cma_errc rc =
        cma_tlsmat_read_pem("certificate", s->cert_file, &cert_pem, &cert_len, reterr);
    if (rc == CMA_OK)
        rc = cma_tlsmat_read_pem("private key", s->key_file, &key_pem, &key_len, reterr);
    if (rc == CMA_OK) {
        rc = parse_pair(cert_pem, cert_len, key_pem, key_len, ret, reterr);
        if (rc != CMA_OK)
            cma_err_prefix(reterr, "%s and %s: ", s->cert_file, s->key_file);
    }
    free(cert_pem);
    if (key_pem) {
        explicit_bzero(key_pem, key_len);
        free(key_pem);
    }
    return rc;
}

enum cma_errc cma_server_reload_tls(struct cma_server *s, struct cma_err *reterr)
{
    if (!s || !s->cert_file || !s->key_file)
        return cma_err_set(reterr, CMA_ERR_INTERNAL, "cma_server_reload_tls: bad arguments");
    struct cma_tlsmat_sig cert_sig;
    struct cma_tlsmat_sig key_sig;
    cma_tlsmat_sig_stat(s->cert_file, &cert_sig);
    cma_tlsmat_sig_stat(s->key_file, &key_sig);
    pthread_mutex_lock(&s->tls_lock);
    bool unchanged =
        cma_tlsmat_sig_eq(&cert_sig, &s->cert_sig) && cma_tlsmat_sig_eq(&key_sig, &s->key_sig);
    s->cert_sig = cert_sig;
    s->key_sig = key_sig;
    pthread_mutex_unlock(&s->tls_lock);
    if (unchanged)
        return CMA_OK;
    struct tls_pair *fresh = NULL;
    struct cma_err err = {0};
    enum cma_errc rc = load_pair(s, &fresh, &err);
    if (rc != CMA_OK) {
        cma_log_error("https: serving certificate changed but cannot be used, keeping the "
                      "previous one: %s",
                      err.msg);
        if (reterr)
            *reterr = err;
        return rc;
    }
    pthread_mutex_lock(&s->tls_lock);
    fresh->older = s->pair;
    s->pair = fresh;
    pthread_mutex_unlock(&s->tls_lock);
    atomic_fetch_add(&s->reloads, 1u);
    cma_log_info("https: reloaded the serving certificate from %s", s->cert_file);
    return CMA_OK;
}

unsigned cma_server_tls_reloads(const struct cma_server *s)
{
    return s ? atomic_load(&s->reloads) : 0;
}

static void *watch_tls_files(void *arg)
{
    struct cma_server *s = arg;
    pthread_mutex_lock(&s->tls_lock);
    while (!s->stopping) {
        struct timespec until;
        clock_gettime(CLOCK_REALTIME, &until);
        until.tv_sec += (time_t)(s->reload_interval_ms / 1000u);
        until.tv_nsec += (long)(s->reload_interval_ms % 1000u) * 1000000L;
        if (until.tv_nsec >= 1000000000L) {
            until.tv_sec++;
            until.tv_nsec -= 1000000000L;
        }
        while (!s->stopping && pthread_cond_timedwait(&s->tls_wake, &s->tls_lock, &until) == 0) {
        }
        if (s->stopping)
            break;
        pthread_mutex_unlock(&s->tls_lock);
        cma_server_reload_tls(s, NULL);
        pthread_mutex_lock(&s->tls_lock);
    }
    pthread_mutex_unlock(&s->tls_lock);
    return NULL;
}

/* gnutls_certificate_retrieve_function2: the current pair for this handshake. */
static int retrieve_cert(gnutls_session_t session, const gnutls_datum_t *req_ca_dn, int nreqs,
                         const gnutls_pk_algorithm_t *pk_algos, int pk_algos_length,
                         gnutls_pcert_st **pcert, unsigned int *pcert_length,
                         gnutls_privkey_t *pkey)
{
    (void)req_ca_dn;
    (void)nreqs;
    (void)pk_algos;
    (void)pk_algos_length;
    struct cma_server *s = cma_conn_owner(gnutls_session_get_ptr(session));
    if (!s)
        return -1;
    pthread_mutex_lock(&s->tls_lock);
    struct tls_pair *p = s->pair;
    pthread_mutex_unlock(&s->tls_lock);
    if (!p)
        return -1;
    *pcert = p->pcerts;
    *pcert_length = p->n_pcerts;
    *pkey = p->key;
    return 0;
}

/* GnuTLS handshake hook: the client's Finished is the last message of every handshake kind the
 * server runs (full or resumed, TLS 1.2 or 1.3), so receiving it ends the handshake phase. */
static int on_handshake_msg(gnutls_session_t session, unsigned int htype, unsigned when,
                            unsigned int incoming, const gnutls_datum_t *msg)
{
    (void)msg;
    if (htype == GNUTLS_HANDSHAKE_FINISHED && when == GNUTLS_HOOK_POST && incoming) {
        struct cma_conn *c = gnutls_session_get_ptr(session);
        if (c && cma_conntrack_phase(c) == CMA_CONN_HANDSHAKE)
            cma_conntrack_set_phase(c, CMA_CONN_HEADERS);
    }
    return 0;
}

/* The connection's tracking entry (NOTIFY_CONNECTION's socket context); NULL when untracked. */
static struct cma_conn *conn_track(struct MHD_Connection *conn)
{
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(conn, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
    return ci ? ci->socket_context : NULL;
}

/* MHD_OPTION_NOTIFY_CONNECTION: tracks the socket for its deadlines and ties the new TLS
 * session to it (see DESIGN). Without memory to track it, the connection is cut at once. */
/* Called just before libmicrohttpd closes a socket (after its answer and FIN went out). A close()
 * with unread bytes in the receive queue makes the kernel send RST instead, and the client may then
 * lose the answer it has not read yet: a 414 for a request line that was still arriving is the
 * usual case. Discard what is already queued, without blocking and at most DRAIN_MAX_BYTES, so the
 * close ends with the FIN. */
#define DRAIN_MAX_BYTES (256 * 1024)
static void drain_before_close(int fd)
{
    char sink[4096];
    size_t total = 0;
    while (total < DRAIN_MAX_BYTES) {
        ssize_t n = recv(fd, sink, sizeof(sink), MSG_DONTWAIT);
        if (n <= 0)
            break;
        total += (size_t)n;
    }
}

static void on_connection(void *cls, struct MHD_Connection *conn, void **socket_context,
                          enum MHD_ConnectionNotificationCode code)
{
    struct cma_server *s = cls;
    if (code == MHD_CONNECTION_NOTIFY_CLOSED) {
        const union MHD_ConnectionInfo *cfd =
            MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CONNECTION_FD);
        if (cfd)
            drain_before_close(cfd->connect_fd);
        cma_conntrack_remove(*socket_context);
        *socket_context = NULL;
        return;
    }
    const union MHD_ConnectionInfo *fdi =
        MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CONNECTION_FD);
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(conn, MHD_CONNECTION_INFO_GNUTLS_SESSION);
    if (!fdi)
        return;
    struct cma_conn *c = cma_conntrack_add(s->track, fdi->connect_fd, s);
    *socket_context = c;
    if (!c) {
        cma_log_error("https: out of memory: closing a new connection");
        shutdown(fdi->connect_fd, SHUT_RDWR);
        return;
    }
    if (ci && ci->tls_session) {
        gnutls_session_set_ptr(ci->tls_session, c);
        gnutls_handshake_set_hook_function(ci->tls_session, GNUTLS_HANDSHAKE_FINISHED,
                                           GNUTLS_HOOK_POST, on_handshake_msg);
    }
}

/* ----- MHD callbacks ----- */

__attribute__((format(printf, 2, 0))) static void on_mhd_log(void *cls, const char *fmt, va_list ap)
{
    struct cma_server *s = cls;
    char line[LOG_LINE_MAX];
    vsnprintf(line, sizeof line, fmt, ap);
    size_t n = strlen(line);
    while (n > 0 && (line[n - 1] == '\n' || line[n - 1] == '\r' || line[n - 1] == ' '))
        line[--n] = '\0';
    if (atomic_load(&s->started)) {
        cma_log_v(2, "https: %s", line);
        return;
    }
    pthread_mutex_lock(&s->start_msg_lock);
    memcpy(s->start_msg, line, n + 1);
    pthread_mutex_unlock(&s->start_msg_lock);
    cma_log_error("https: %s", line);
}

/* Leaves paths and query arguments percent-encoded (see DESIGN). */
static size_t keep_escaped(void *cls, struct MHD_Connection *conn, char *s)
{
    (void)cls;
    (void)conn;
    return strlen(s);
}

/* True for bytes that must be percent-encoded in a request target: NUL and the other control
 * characters, space and DEL (Go's net/http answers 400 for the same). */
static bool target_has_bad_byte(const char *target, size_t len)
{
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)target[i];
        if (c <= 0x20 || c == 0x7f)
            return true;
    }
    return false;
}

/* MHD_OPTION_URI_LOG_CALLBACK: the request line was parsed; the result is the initial *con_cls. */
static void *on_uri(void *cls, const char *uri, struct MHD_Connection *conn)
{
    (void)conn;
    struct request_state *st = calloc(1, sizeof *st);
    if (!st)
        return NULL;
    st->server = cls;
    st->raw_target = uri;
    st->raw_target_len = uri ? strlen(uri) : 0;
    st->target_bad = !uri || target_has_bad_byte(uri, st->raw_target_len);
    atomic_init(&st->reply_ready, false);
    st->fd = -1;
    cma_arena_init(&st->arena, CMA_REQUEST_ARENA_MAX_BYTES);
    return st;
}

/* The request is the first member of its state; a request the server did not make (no
 * connection, as in unit tests) has no arena. */
struct cma_arena *cma_request_arena(const struct cma_request *req)
{
    return req->conn ? &((struct request_state *)req)->arena : NULL;
}

static void free_state(struct request_state *st)
{
    if (!st)
        return;
    cma_arena_done(&st->arena);
    for (size_t i = 0; i < st->req.n_query; i++) {
        free(st->req.query[i].key);
        free(st->req.query[i].value);
    }
    free(st->req.query);
    cma_buf_done(&st->reply.body);
    free(st);
}

/* A request ended (answered or aborted): free its state; the connection now idles in keep-alive
 * (or closes, which NOTIFY_CONNECTION reports next). */
static void on_completed(void *cls, struct MHD_Connection *conn, void **con_cls,
                         enum MHD_RequestTerminationCode toe)
{
    (void)cls;
    (void)toe;
    free_state(*con_cls);
    *con_cls = NULL;
    cma_conntrack_set_phase(conn_track(conn), CMA_CONN_IDLE);
}

struct query_ctx {
    struct request_state *st;
    enum cma_errc rc;
};

static enum MHD_Result collect_query(void *cls, enum MHD_ValueKind kind, const char *key,
                                     size_t key_size, const char *value, size_t value_size)
{
    (void)kind;
    struct query_ctx *q = cls;
    struct request_state *st = q->st;
    if (st->req.n_query >= MAX_QUERY_PARAMS) {
        q->rc = CMA_ERR_BAD_REQUEST;
        return MHD_NO;
    }
    if (st->req.n_query == st->query_cap) {
        size_t cap = st->query_cap ? st->query_cap * 2 : 8;
        struct cma_kv *grown = realloc(st->req.query, cap * sizeof *grown);
        if (!grown) {
            q->rc = CMA_ERR_NOMEM;
            return MHD_NO;
        }
        st->req.query = grown;
        st->query_cap = cap;
    }
    char *k = NULL;
    char *v = NULL;
    q->rc = cma_percent_decode(key ? key : "", key ? key_size : 0, false, &k, NULL);
    if (q->rc == CMA_OK)
        q->rc = cma_percent_decode(value ? value : "", value ? value_size : 0, false, &v, NULL);
    if (q->rc != CMA_OK) {
        free(k);
        return MHD_NO;
    }
    st->req.query[st->req.n_query].key = k;
    st->req.query[st->req.n_query].value = v;
    st->req.n_query++;
    return MHD_YES;
}

/* Copies `s` for a log line with control bytes replaced, at most out_len-1 bytes. */
static const char *printable(const char *s, char *out, size_t out_len)
{
    size_t i = 0;
    for (; s && s[i] && i + 1 < out_len; i++) {
        unsigned char c = (unsigned char)s[i];
        out[i] = (c < 0x20 || c == 0x7f) ? '?' : (char)c;
    }
    out[i] = '\0';
    return out;
}

/* Our headers on every reply; "Connection: close" while draining, Retry-After with a 429. */
static bool add_common_headers(struct cma_server *s, struct MHD_Connection *conn,
                               struct MHD_Response *resp, int status, const char *content_type)
{
    const char *audit_id = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "Audit-Id");
    return MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE,
                                   content_type ? content_type : "application/json") == MHD_YES &&
           MHD_add_response_header(resp, MHD_HTTP_HEADER_CACHE_CONTROL, "no-cache, private") ==
               MHD_YES &&
           MHD_add_response_header(resp, "X-Content-Type-Options", "nosniff") == MHD_YES &&
           (!audit_id || MHD_add_response_header(resp, "Audit-Id", audit_id) == MHD_YES) &&
           (status != 429 || MHD_add_response_header(resp, "Retry-After", "1") == MHD_YES) &&
           (!atomic_load(&s->draining) ||
            MHD_add_response_header(resp, MHD_HTTP_HEADER_CONNECTION, "close") == MHD_YES);
}

/* Queues body (taken from `body`) with our headers; always empties `body`. Event thread only. */
static enum MHD_Result send_reply(struct request_state *st, int status, const char *content_type,
                                  struct cma_buf *body)
{
    struct MHD_Connection *conn = st->req.conn;
    size_t len = body->len;
    char *data = cma_buf_take(body);
    if (!data)
        return MHD_NO;
    struct MHD_Response *resp = MHD_create_response_from_buffer(len, data, MHD_RESPMEM_MUST_FREE);
    if (!resp) {
        free(data);
        return MHD_NO;
    }
    bool ok = add_common_headers(st->server, conn, resp, status, content_type);
    enum MHD_Result ret = ok ? MHD_queue_response(conn, (unsigned)status, resp) : MHD_NO;
    MHD_destroy_response(resp);
    if (ret == MHD_YES)
        st->responded = true;
    if (cma_log_enabled(6)) {
        char path[256];
        cma_log_v(6, "%s %s %d %lldms%s", st->req.method ? st->req.method : "?",
                  printable(st->req.path, path, sizeof path), status,
                  (long long)(cma_clock_mono_ms() - st->req.start_mono_ms),
                  ret == MHD_YES ? "" : " (not sent)");
    }
    return ret;
}

/* Replaces `out` with a fixed JSON body. */
static void set_static(struct cma_response *out, int status, const char *json)
{
    out->status = status;
    out->content_type = "application/json";
    cma_buf_clear(&out->body);
    cma_buf_appends(&out->body, json);
}

static enum MHD_Result send_static(struct request_state *st, int status, const char *json)
{
    struct cma_buf body;
    cma_buf_init(&body, 0);
    if (cma_buf_appends(&body, json) != CMA_OK)
        return MHD_NO;
    return send_reply(st, status, "application/json", &body);
}

/* True when a Content-Length header announces more than `limit` bytes. */
static bool declared_length_over(struct MHD_Connection *conn, size_t limit)
{
    const char *cl =
        MHD_lookup_connection_value(conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH);
    if (!cl)
        return false;
    size_t v = 0;
    for (const char *p = cl; *p; p++) {
        if (*p < '0' || *p > '9')
            return false; /* MHD answers malformed lengths itself */
        if (v > (SIZE_MAX - 9) / 10)
            return true;
        v = v * 10 + (size_t)(*p - '0');
    }
    return v > limit;
}

/* struct cma_call's gone() (see DESIGN): the client closed or reset the connection. */
static bool client_gone(const void *ctx)
{
    const struct request_state *st = ctx;
    struct pollfd p = {.fd = st->fd, .events = POLLRDHUP};
    return st->fd >= 0 && poll(&p, 1, 0) > 0 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR));
}

/* The request's deadline and gone() (see DESIGN); query parameters are decoded by now. */
static void set_call(struct request_state *st)
{
    int64_t timeout = CMA_SERVER_REQUEST_TIMEOUT_MS, asked = 0;
    const char *t = cma_request_query(&st->req, "timeout");
    if (t && cma_duration_parse(t, &asked, NULL) == CMA_OK && asked > 0 && asked < timeout)
        timeout = asked;
    st->call = (struct cma_call){.deadline_ms = st->req.start_mono_ms + timeout,
                                 .window_ms = timeout,
                                 .gone = client_gone,
                                 .gone_ctx = st};
    st->req.call = &st->call;
}

/* A fresh reply: 200, application/json, an empty body. */
static void reply_init(struct cma_response *out)
{
    *out = (struct cma_response){.status = 200, .content_type = "application/json"};
    cma_buf_init(&out->body, CMA_BUF_DEFAULT_MAX);
}

/* Decodes the query and sets the deadline, once per request (the event thread's attempt and
 * then a worker share it). false with a Status reply in `out` when the query is malformed. */
static bool prepare_request(struct request_state *st, struct cma_response *out)
{
    if (st->prepared)
        return true;
    struct query_ctx q = {st, CMA_OK};
    MHD_get_connection_values_n(st->req.conn, MHD_GET_ARGUMENT_KIND, collect_query, &q);
    if (q.rc == CMA_ERR_NOMEM) {
        set_static(out, 500, STATUS_500_NOMEM);
        return false;
    }
    if (q.rc != CMA_OK) {
        set_static(out, 400, STATUS_400_QUERY);
        return false;
    }
    set_call(st);
    st->prepared = true;
    return true;
}

/* A handler's status outside 100..599 becomes a 500 Status reply. */
static void check_status(const struct request_state *st, struct cma_response *out)
{
    if (out->status >= 100 && out->status <= 599)
        return;
    cma_log_error("https: handler for %s returned HTTP status %d; answering 500", st->req.method,
                  out->status);
    set_static(out, 500, STATUS_500_STATUS);
}

/* Runs the handler into `out` (query decoding errors and bad statuses become Status replies).
 * On a worker, or on the event thread for probes. */
static void run_handler(struct cma_server *s, struct request_state *st, struct cma_response *out)
{
    reply_init(out);
    if (!prepare_request(st, out))
        return;
    s->handler(s->app, &st->req, out);
    check_status(st, out);
}

/* The app's event-thread attempt (see DESIGN): true with the reply in st->reply (a malformed
 * query's 400 included); false leaves the request to a worker. */
static bool answer_inline(struct cma_server *s, struct request_state *st)
{
    if (!s->try_inline)
        return false;
    reply_init(&st->reply);
    if (prepare_request(st, &st->reply)) {
        if (!s->try_inline(s->app, &st->req, &st->reply)) {
            cma_buf_done(&st->reply.body); /* run_handler starts a fresh reply */
            return false;
        }
        check_status(st, &st->reply);
    }
    atomic_fetch_add(&s->inline_answers, 1ull);
    return true;
}

/* Worker job: the handler may block here; the event thread sends the reply once resumed. */
static void run_job(void *arg)
{
    struct request_state *st = arg;
    run_handler(st->server, st, &st->reply);
    atomic_store(&st->reply_ready, true);
    MHD_resume_connection(st->req.conn);
}

/* GET/HEAD of /healthz, /livez or /readyz (or a check under them) without credentials: the
 * handler answers these from memory, so they run on the event thread (see DESIGN). */
static bool is_probe(const struct request_state *st)
{
    static const char *const probes[] = {"/healthz", "/livez", "/readyz"};
    const char *m = st->req.method;
    if (!m || (strcmp(m, "GET") != 0 && strcmp(m, "HEAD") != 0))
        return false;
    bool match = false;
    for (size_t i = 0; i < sizeof probes / sizeof probes[0] && !match; i++) {
        size_t n = strlen(probes[i]);
        match = strncmp(st->req.path, probes[i], n) == 0 &&
                (st->req.path[n] == '\0' || st->req.path[n] == '/');
    }
    return match && !MHD_lookup_connection_value(st->req.conn, MHD_HEADER_KIND,
                                                 MHD_HTTP_HEADER_AUTHORIZATION);
}

/* The request is complete: answer a probe, or what try_inline answers from memory, on the event
 * thread; else hand it to a worker (429 when none). */
static enum MHD_Result dispatch(struct cma_server *s, struct request_state *st)
{
    if (is_probe(st)) {
        run_handler(s, st, &st->reply);
        return send_reply(st, st->reply.status, st->reply.content_type, &st->reply.body);
    }
    if (answer_inline(s, st))
        return send_reply(st, st->reply.status, st->reply.content_type, &st->reply.body);
    MHD_suspend_connection(st->req.conn);
    st->dispatched = true;
    if (cma_workpool_submit(s->pool, run_job, st))
        return MHD_YES; /* st belongs to the worker until it resumes the connection */
    atomic_fetch_add(&s->rejected_busy, 1ull);
    cma_log_v(4, "https: every worker is busy; answering 429");
    cma_buf_init(&st->reply.body, 0);
    set_static(&st->reply, 429, STATUS_429);
    atomic_store(&st->reply_ready, true);
    MHD_resume_connection(st->req.conn);
    return MHD_YES;
}

/* First call of a request: the request line and headers are in. */
static enum MHD_Result on_headers(struct request_state *st, struct MHD_Connection *conn,
                                  const char *url, const char *method, const char *version)
{
    st->headers_seen = true;
    st->req.method = method;
    st->req.path = url;
    st->req.conn = conn;
    st->req.start_mono_ms = cma_clock_mono_ms();
    const union MHD_ConnectionInfo *fdi =
        MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CONNECTION_FD);
    st->fd = fdi ? fdi->connect_fd : -1;
    /* see DESIGN: the target's NUL must be the one MHD wrote before the version */
    if (!st->target_bad &&
        (url != st->raw_target || !version || version != st->raw_target + st->raw_target_len + 1))
        st->target_bad = true;
    if (declared_length_over(conn, MAX_BODY_BYTES)) {
        st->body_too_large = true;
        return send_static(st, 413, STATUS_413);
    }
    return MHD_YES;
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *conn, const char *url,
                                  const char *method, const char *version, const char *upload_data,
                                  size_t *upload_data_size, void **con_cls)
{
    (void)upload_data;
    struct cma_server *s = cls;
    struct request_state *st = *con_cls;
    if (!st)
        return MHD_NO; /* the URI log callback ran out of memory */
    if (!st->headers_seen)
        return on_headers(st, conn, url, method, version);
    if (*upload_data_size > 0) {
        size_t n = *upload_data_size;
        *upload_data_size = 0; /* discarded: no handler reads request bodies */
        /* MHD 0.9.75 refuses a response queued while a body is still arriving, so a body
         * without a declared length is discarded to its end and answered then; one that goes
         * on past MAX_DISCARD_BYTES gets the connection closed instead. */
        if (n > MAX_DISCARD_BYTES - st->body_bytes)
            return MHD_NO;
        st->body_bytes += n;
        if (st->body_bytes > MAX_BODY_BYTES)
            st->body_too_large = true;
        return MHD_YES;
    }
    if (st->responded)
        return MHD_YES;
    if (st->dispatched) {
        if (!atomic_load(&st->reply_ready))
            return MHD_YES; /* not ours yet (cannot happen while suspended) */
        return send_reply(st, st->reply.status, st->reply.content_type, &st->reply.body);
    }
    cma_conntrack_set_phase(conn_track(conn), CMA_CONN_BUSY);
    if (st->body_too_large)
        return send_static(st, 413, STATUS_413);
    if (st->target_bad) {
        atomic_fetch_add(&s->rejected_target, 1ull);
        return send_static(st, 400, STATUS_400_TARGET);
    }
    return dispatch(s, st);
}

/* ----- start / stop ----- */

union bind_addr {
    struct sockaddr sa;
    struct sockaddr_in v4;
    struct sockaddr_in6 v6;
};

static enum cma_errc parse_bind(const char *address, int port, union bind_addr *ret,
                                unsigned *ret_flags, struct cma_err *reterr)
{
    if (port < 0 || port > 65535)
        return cma_err_set(reterr, CMA_ERR_FLAG, "--secure-port %d is not in 0..65535", port);
    const char *addr = (address && *address) ? address : "0.0.0.0";
    memset(ret, 0, sizeof *ret);
    if (inet_pton(AF_INET, addr, &ret->v4.sin_addr) == 1) {
        ret->v4.sin_family = AF_INET;
        ret->v4.sin_port = htons((uint16_t)port);
        *ret_flags = 0;
        return CMA_OK;
    }
    if (inet_pton(AF_INET6, addr, &ret->v6.sin6_addr) == 1) {
        ret->v6.sin6_family = AF_INET6;
        ret->v6.sin6_port = htons((uint16_t)port);
        bool any = memcmp(&ret->v6.sin6_addr, &in6addr_any, sizeof in6addr_any) == 0;
        *ret_flags = any ? MHD_USE_DUAL_STACK : MHD_USE_IPv6;
        return CMA_OK;
    }
    return cma_err_set(reterr, CMA_ERR_FLAG, "--bind-address \"%s\" is not an IP address", addr);
}

static void free_server(struct cma_server *s)
{
    if (!s)
        return;
    cma_workpool_free(s->pool);
    cma_conntrack_free(s->track);
    if (s->quiesced_fd >= 0)
        close(s->quiesced_fd);
    free(s->cert_pem);
    if (s->key_pem) {
        explicit_bzero(s->key_pem, s->key_len);
        free(s->key_pem);
    }
    free(s->trust_pem);
    free(s->priorities);
    free_pair(s->pair);
    free(s->cert_file);
    free(s->key_file);
    pthread_cond_destroy(&s->tls_wake);
    pthread_mutex_destroy(&s->tls_lock);
    pthread_mutex_destroy(&s->start_msg_lock);
    free(s);
}

static enum cma_errc load_material(struct cma_server *s, const struct cma_server_config *cfg,
                                   struct cma_err *reterr)
{
    if (!cfg->cert_file || !*cfg->cert_file || !cfg->key_file || !*cfg->key_file)
        return cma_err_set(reterr, CMA_ERR_TLS, "a serving certificate and key are required");
    size_t len;
    enum cma_errc rc =
        cma_tlsmat_read_pem("certificate", cfg->cert_file, &s->cert_pem, &len, reterr);
    if (rc != CMA_OK)
        return rc;
    rc = cma_tlsmat_read_pem("private key", cfg->key_file, &s->key_pem, &s->key_len, reterr);
    if (rc != CMA_OK)
        return rc;
    if (cfg->client_ca_file && *cfg->client_ca_file) {
        rc =
            cma_tlsmat_read_pem("client CA file", cfg->client_ca_file, &s->trust_pem, &len, reterr);
        if (rc != CMA_OK)
            return rc;
    } else if (!(s->trust_pem = cma_strdup(s->cert_pem))) {
        return cma_err_set(reterr, CMA_ERR_NOMEM, "out of memory");
    }
    rc = build_priorities(cfg, &s->priorities, reterr);
    if (rc != CMA_OK)
        return rc;
    return check_tls_material(s, cfg, reterr);
}

/* The connection model's limits and timeouts with defaults applied. */
struct limits {
    unsigned max_connections;
    unsigned max_per_client;
    unsigned max_in_flight;
    unsigned event_threads;
    int64_t handshake_ms;
    int64_t header_ms;
    int64_t keep_alive_ms;
    size_t header_bytes;
};

static struct limits limits_of(const struct cma_server_config *cfg)
{
    struct limits l = {
        .max_connections = cfg->max_connections ? cfg->max_connections : DEFAULT_MAX_CONNECTIONS,
        .max_per_client = cfg->max_connections_per_client ? cfg->max_connections_per_client
                                                          : DEFAULT_MAX_PER_CLIENT,
        .max_in_flight =
            cfg->max_requests_inflight ? cfg->max_requests_inflight : DEFAULT_MAX_IN_FLIGHT,
        .event_threads = cfg->event_threads ? cfg->event_threads : DEFAULT_EVENT_THREADS,
        .handshake_ms = cfg->tls_handshake_timeout_ms > 0 ? cfg->tls_handshake_timeout_ms
                                                          : DEFAULT_HANDSHAKE_TIMEOUT_MS,
        .header_ms = cfg->request_header_timeout_ms > 0 ? cfg->request_header_timeout_ms
                                                        : DEFAULT_HEADER_TIMEOUT_MS,
        .keep_alive_ms = cfg->keep_alive_timeout_ms > 0 ? cfg->keep_alive_timeout_ms
                                                        : DEFAULT_KEEP_ALIVE_TIMEOUT_MS,
        .header_bytes =
            cfg->max_request_header_bytes ? cfg->max_request_header_bytes : DEFAULT_HEADER_BYTES,
    };
    if (l.header_bytes < MIN_HEADER_BYTES)
        l.header_bytes = MIN_HEADER_BYTES;
    return l;
}

/* The deadline tracker's reports (conntrack.c does not log). */
static void on_conntrack_event(void *ctx, const struct cma_conntrack_event *ev)
{
    (void)ctx;
    if (ev->kind == CMA_CONNTRACK_CUT_DEADLINE)
        cma_log_v(2,
                  "https: closed %llu connection(s) past their deadline (%s: %llu, %s: %llu, "
                  "%s: %llu)",
                  (unsigned long long)ev->n, "TLS handshake", (unsigned long long)ev->handshake,
                  "request", (unsigned long long)ev->request, "keep-alive",
                  (unsigned long long)ev->keep_alive);
    else if (ev->kind == CMA_CONNTRACK_EVICTED)
        cma_log_v(2,
                  "https: at --max-connections: closed %llu connection(s) without a request in "
                  "progress to make room for new ones",
                  (unsigned long long)ev->n);
    else
        cma_log_error("https: cannot start the connection deadline sweeper");
}

/* The worker pool and the deadline tracker. */
static enum cma_errc start_model(struct cma_server *s, const struct limits *l,
                                 struct cma_err *reterr)
{
    unsigned min_workers = l->max_in_flight < MIN_WORKERS ? l->max_in_flight : MIN_WORKERS;
    enum cma_errc rc =
        cma_workpool_new(min_workers, l->max_in_flight, WORKER_IDLE_EXIT_MS, &s->pool, reterr);
    if (rc != CMA_OK)
        return rc;
    struct cma_conntrack_config tc = {
        .handshake_ms = l->handshake_ms,
        .header_ms = l->header_ms,
        .idle_ms = l->keep_alive_ms,
        .max_open = l->max_connections,
        .on_event = on_conntrack_event,
    };
    return cma_conntrack_new(&tc, &s->track, reterr);
}

/* libmicrohttpd's own cap: above max_connections, so that a newcomer is accepted and takes the
 * slot of an unused connection (conntrack.c) while the evicted one is still closing. */
static unsigned hard_limit(unsigned max_connections)
{
    return max_connections + max_connections / 8 + 16;
}

static struct MHD_Daemon *start_daemon(struct cma_server *s, const struct cma_server_config *cfg,
                                       const union bind_addr *addr, unsigned family_flags,
                                       const struct limits *l)
{
    /* MHD's timeout is whole seconds and reset by activity: the keep-alive idle timeout */
    unsigned idle_s = (unsigned)((l->keep_alive_ms + 999) / 1000);
    unsigned flags = MHD_USE_EPOLL_INTERNAL_THREAD | MHD_ALLOW_SUSPEND_RESUME | MHD_USE_TLS |
                     MHD_USE_ERROR_LOG | family_flags;
    return MHD_start_daemon(
        flags, (uint16_t)cfg->port, NULL, NULL, on_request, s, MHD_OPTION_EXTERNAL_LOGGER,
        on_mhd_log, s, MHD_OPTION_SOCK_ADDR, &addr->sa, MHD_OPTION_THREAD_POOL_SIZE,
        l->event_threads, MHD_OPTION_CONNECTION_LIMIT, hard_limit(l->max_connections),
        MHD_OPTION_PER_IP_CONNECTION_LIMIT, l->max_per_client, MHD_OPTION_CONNECTION_TIMEOUT,
        idle_s, MHD_OPTION_CONNECTION_MEMORY_LIMIT, l->header_bytes, MHD_OPTION_NOTIFY_COMPLETED,
        on_completed, s, MHD_OPTION_URI_LOG_CALLBACK, on_uri, s, MHD_OPTION_UNESCAPE_CALLBACK,
        keep_escaped, s, MHD_OPTION_NOTIFY_CONNECTION, on_connection, s,
        MHD_OPTION_HTTPS_CERT_CALLBACK, retrieve_cert, MHD_OPTION_HTTPS_MEM_TRUST, s->trust_pem,
        MHD_OPTION_HTTPS_PRIORITIES, s->priorities, MHD_OPTION_TLS_NO_ALPN, 1, MHD_OPTION_END);
}

/* Allocates the server with its locks; NULL (reterr set) on failure. */
static struct cma_server *new_server(struct cma_err *reterr)
{
    struct cma_server *s = calloc(1, sizeof *s);
    if (!s) {
        cma_err_set(reterr, CMA_ERR_NOMEM, "out of memory");
        return NULL;
    }
    s->quiesced_fd = -1;
    bool ok = false;
    if (pthread_mutex_init(&s->start_msg_lock, NULL) == 0) {
        if (pthread_mutex_init(&s->tls_lock, NULL) == 0) {
            if (pthread_cond_init(&s->tls_wake, NULL) == 0)
                ok = true;
            else
                pthread_mutex_destroy(&s->tls_lock);
        }
        if (!ok)
            pthread_mutex_destroy(&s->start_msg_lock);
    }
    if (!ok) {
        free(s);
        cma_err_set(reterr, CMA_ERR_INTERNAL, "cannot create the server's locks");
        return NULL;
    }
    atomic_init(&s->reloads, 0u);
    atomic_init(&s->started, false);
    atomic_init(&s->draining, false);
    atomic_init(&s->rejected_busy, 0ull);
    atomic_init(&s->rejected_target, 0ull);
    atomic_init(&s->inline_answers, 0ull);
    return s;
}

/* Certificate files, material, the first pair, and the connection model. */
static enum cma_errc prepare_server(struct cma_server *s, const struct cma_server_config *cfg,
                                    const struct limits *l, struct cma_err *reterr)
{
    s->reload_interval_ms =
        cfg->tls_reload_interval_ms ? cfg->tls_reload_interval_ms : DEFAULT_TLS_RELOAD_INTERVAL_MS;
    if (cfg->cert_file && cfg->key_file) {
        /* stat before reading: a change while reading shows up at the next check */
        cma_tlsmat_sig_stat(cfg->cert_file, &s->cert_sig);
        cma_tlsmat_sig_stat(cfg->key_file, &s->key_sig);
        s->cert_file = cma_strdup(cfg->cert_file);
        s->key_file = cma_strdup(cfg->key_file);
        if (!s->cert_file || !s->key_file)
            return cma_err_set(reterr, CMA_ERR_NOMEM, "out of memory");
    }
    enum cma_errc rc = load_material(s, cfg, reterr);
    if (rc == CMA_OK)
        rc = parse_pair(s->cert_pem, strlen(s->cert_pem), s->key_pem, s->key_len, &s->pair, reterr);
    if (rc == CMA_OK)
        rc = start_model(s, l, reterr);
    return rc;
}

enum cma_errc cma_server_start(const struct cma_server_config *cfg, cma_handler_fn handler,
                               void *app, struct cma_server **ret, struct cma_err *reterr)
{
    if (!cfg || !handler || !ret)
        return cma_err_set(reterr, CMA_ERR_INTERNAL, "cma_server_start: bad arguments");
    union bind_addr addr;
    unsigned family_flags = 0;
    enum cma_errc rc = parse_bind(cfg->bind_address, cfg->port, &addr, &family_flags, reterr);
    if (rc != CMA_OK)
        return rc;
    struct cma_server *s = new_server(reterr);
    if (!s)
        return reterr && reterr->code != CMA_OK ? reterr->code : CMA_ERR_NOMEM;
    s->handler = handler;
    s->try_inline = cfg->try_inline;
    s->app = app;
    struct limits l = limits_of(cfg);
    rc = prepare_server(s, cfg, &l, reterr);
    if (rc != CMA_OK) {
        free_server(s);
        return rc;
    }
    s->daemon = start_daemon(s, cfg, &addr, family_flags, &l);
    const char *shown = (cfg->bind_address && *cfg->bind_address) ? cfg->bind_address : "0.0.0.0";
    if (!s->daemon) {
        pthread_mutex_lock(&s->start_msg_lock);
        cma_err_set(reterr, CMA_ERR_IO, "cannot serve HTTPS on [%s]:%d: %s", shown, cfg->port,
                    s->start_msg[0] ? s->start_msg : "libmicrohttpd failed to start");
        pthread_mutex_unlock(&s->start_msg_lock);
        free_server(s);
        return CMA_ERR_IO;
    }
    atomic_store(&s->started, true);
    if (pthread_create(&s->watcher, NULL, watch_tls_files, s) == 0)
        s->watcher_running = true;
    else
        cma_log_error("https: cannot start the certificate watcher; the serving certificate will "
                      "not be reloaded");
    const union MHD_DaemonInfo *info = MHD_get_daemon_info(s->daemon, MHD_DAEMON_INFO_BIND_PORT);
    s->port = info ? (int)info->port : cfg->port;
    cma_log_v(1,
              "serving HTTPS on [%s]:%d: %u event threads, up to %u handler workers, %u "
              "connections (%u per client)",
              shown, s->port, l.event_threads, l.max_in_flight, l.max_connections,
              l.max_per_client);
    *ret = s;
    return CMA_OK;
}

int cma_server_port(const struct cma_server *s)
{
    return s ? s->port : 0;
}

bool cma_server_drain(struct cma_server *s, int64_t grace_ms)
{
    if (!s || !s->daemon)
        return true;
    int64_t deadline = cma_clock_mono_ms() + (grace_ms > 0 ? grace_ms : 0);
    atomic_store(&s->draining, true);
    if (s->quiesced_fd < 0) {
        MHD_socket fd = MHD_quiesce_daemon(s->daemon);
        if (fd != MHD_INVALID_SOCKET) {
            /* MHD's threads may still hold the descriptor: shut it down (pending and new
             * connections are refused) and close it after MHD_stop_daemon() */
            shutdown(fd, SHUT_RDWR);
            s->quiesced_fd = fd;
        }
    }
    cma_conntrack_drain(s->track);
    bool done =
        cma_conntrack_wait_empty(s->track, deadline) && cma_workpool_wait_idle(s->pool, deadline);
    s->drained = done;
    return done;
}

void cma_server_stats(struct cma_server *s, struct cma_server_stats *ret)
{
    memset(ret, 0, sizeof *ret);
    if (!s)
        return;
    struct cma_conntrack_stats ts;
    cma_conntrack_stats(s->track, &ts);
    ret->connections = ts.open;
    ret->busy = ts.busy;
    ret->cut_deadline = ts.cut_deadline;
    ret->cut_drain = ts.cut_drain;
    ret->cut_evict = ts.cut_evict;
    ret->workers = cma_workpool_threads(s->pool);
    ret->rejected_busy = atomic_load(&s->rejected_busy);
    ret->rejected_target = atomic_load(&s->rejected_target);
    ret->inline_answers = atomic_load(&s->inline_answers);
}

void cma_server_stop(struct cma_server *s)
{
    if (!s)
        return;
    if (s->watcher_running) {
        pthread_mutex_lock(&s->tls_lock);
        s->stopping = true;
        pthread_cond_broadcast(&s->tls_wake);
        pthread_mutex_unlock(&s->tls_lock);
        pthread_join(s->watcher, NULL);
        s->watcher_running = false;
    }
    if (s->daemon && !s->drained &&
        !cma_workpool_wait_idle(s->pool, cma_clock_mono_ms() + STOP_WAIT_MS)) {
        /* A handler still runs on a suspended connection: stopping MHD now would abort the
         * process, and freeing the server would pull memory from under the handler. (A worker
         * that has just resumed its connection is done within the wait.) */
        cma_log_warn("https: handlers still running at stop; leaving the server to process exit");
        return;
    }
    if (s->daemon)
        MHD_stop_daemon(s->daemon);
    s->daemon = NULL;
    free_server(s);
}

struct header_each_ctx {
    bool (*fn)(void *ctx, const char *name, const char *value);
    void *ctx;
};

static enum MHD_Result header_each_cb(void *cls, enum MHD_ValueKind kind, const char *key,
                                      const char *value)
{
    (void)kind;
    struct header_each_ctx *hc = cls;
    return hc->fn(hc->ctx, key, value ? value : "") ? MHD_YES : MHD_NO;
}

void cma_request_headers_each(const struct cma_request *req,
                              bool (*fn)(void *ctx, const char *name, const char *value), void *ctx)
{
    if (!req || !req->conn || !fn)
        return;
    struct header_each_ctx hc = {.fn = fn, .ctx = ctx};
    MHD_get_connection_values(req->conn, MHD_HEADER_KIND, header_each_cb, &hc);
}
