/* credentials.h: the credentials of one outgoing HTTP client (the Prometheus backend, the
 * kube-apiserver), read the same way for every client. The TLS material checks (CA bundles,
 * certificate + key pairs) and the change signature are in tlsmat.h, shared with the serving
 * side.
 *
 * A struct cma_creds is built once from a spec: every file is read, every PEM parsed and the
 * key checked against its certificate, so broken material stops start-up with the setting's
 * label, the path and the reason. Afterwards each request asks for the current credentials:
 * files whose stat signature (device, inode, size, mtime, ctime) changed are read again, and
 * what they hold replaces the old material only when it is valid (a CA bundle with a
 * certificate, a certificate with its matching key, a one-line token); otherwise the previous
 * material stays and the refusal is reported once, as a warning the caller logs. Thread-safe;
 * no logging here. The curl side (what a request sets on its handle) is in clients/internal.h.
 *
 * Also here: the notifier through which every outgoing client (prom.c, kube.c, through their one
 * transport, clients/transport.c) reports what happened (each request, a refused credential
 * rotation, a decoded answer) to the layer that decides what to log or count (main), since the
 * clients stage does not log. */
#ifndef CMA_CREDENTIALS_H
#define CMA_CREDENTIALS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cma/err.h"

/* One setting: a file (read now and again whenever it changes) or fixed bytes (a kubeconfig
 * *-data field, a static token). label names the setting in messages ("--prometheus-ca-file",
 * "kubeconfig /etc/k.yaml client-key-data"). Unset when both file and data are NULL. */
struct cma_cred_item {
    const char *label;
    const char *file;
    const unsigned char *data;
    size_t len;
};

struct cma_cred_spec {
    struct cma_cred_item ca;       /* PEM CA bundle that verifies the server; unset = system CAs */
    struct cma_cred_item cert;     /* PEM client certificate (chain); needs key */
    struct cma_cred_item key;      /* its unencrypted PEM private key */
    struct cma_cred_item token;    /* bearer token, trimmed; must be one non-empty line */
    const char *username;          /* HTTP basic auth when non-NULL */
    struct cma_cred_item password; /* its password (trailing blanks and newlines dropped) */
    bool insecure_skip_verify;     /* do not verify the server's certificate */
};

struct cma_creds;

/* Copies the spec, reads and checks everything. Errors (the message names the label, the path
 * when there is one, and the reason): CMA_ERR_IO unreadable file; CMA_ERR_TLS unparsable PEM,
 * a key that does not match its certificate; CMA_ERR_FLAG a certificate without a key (or the
 * reverse), an empty or multi-line token. Caller owns: cma_creds_free(). */
enum cma_errc cma_creds_new(const struct cma_cred_spec *spec, struct cma_creds **ret,
                            struct cma_err *reterr);
void cma_creds_free(struct cma_creds *c);

/* Re-reads the files that changed (what each request does first). CMA_OK when the material in
 * use is current or was replaced; when a changed file was refused, returns CMA_OK and sets
 * *warning (code != CMA_OK) once per refused content: "<label> <path>: <reason>; keeping the
 * previous ...". warning may be NULL. */
enum cma_errc cma_creds_refresh(struct cma_creds *c, struct cma_err *warning);

/* How many times material was replaced since creation (for tests and logs). */
unsigned cma_creds_generation(const struct cma_creds *c);

/* ---- reports to the deciding layer ------------------------------------------------------ */

/* One HTTP request of a client, as it ended (answered or not). Strings are borrowed for the
 * call and never carry credentials. */
struct cma_http_report {
    const char *client; /* "prometheus", "kube" */
    const char *method; /* "GET", "POST" */
    const char *url;    /* as sent, without user:password@ */
    const char *what;   /* what it was for, in messages: "/api/v1/query", "GET /api/v1/pods" */
    long status;        /* the HTTP status; 0 when no answer came */
    const char *error;  /* NULL when an answer came, else why not (curl's words) */
    int64_t duration_ms;
    uint64_t bytes;        /* body bytes received */
    size_t long_get_bytes; /* > 0: the GET URL would have been this long, over max_get_bytes, */
    size_t max_get_bytes;  /*       so the request went as POST */
};

/* A Prometheus answer after its transfer (prom.c): the first bytes of its body, and what the
 * decoder kept when it decoded a success. */
struct cma_answer_report {
    const char *api_path; /* "/api/v1/query" */
    const char *head;     /* the body's first bytes (at most 4 KiB), not NUL-terminated */
    size_t head_len;
    size_t bytes; /* body bytes decoded */
    bool decoded; /* a success answer was decoded: kept and seen are set */
    size_t kept;  /* series kept */
    size_t seen;  /* series in the answer */
};

/* What a client reports, supplied by the layer that logs (main). Every member may be NULL. The
 * functions run on the thread of the request, after its transfer; they must not call back into
 * the client. */
struct cma_client_notifier {
    void (*on_request)(void *ctx, const struct cma_http_report *r);
    /* A changed credential file was refused; the previous material stays (cma_creds_refresh). */
    void (*on_credentials)(void *ctx, const struct cma_err *warning);
    void (*on_answer)(void *ctx, const struct cma_answer_report *a);
    void *ctx;
};

#endif
