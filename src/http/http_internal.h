/* http_internal.h: contracts between the parts of the HTTP stage that server.c composes: the
 * handler worker pool (workpool.c) and per-connection deadlines (conntrack.c). Neither knows
 * libmicrohttpd: server.c feeds them file descriptors, phases and jobs. Exposed for unit tests. */
#ifndef CMA_HTTP_INTERNAL_H
#define CMA_HTTP_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cma/err.h"

/* ----- workpool.c: a bounded pool of handler threads ----- */

/* Threads are started on demand, up to max_threads, and exit after idle_exit_ms without work
 * (min_threads stay). A job is accepted only when a thread can run it now: there is no queue, so
 * an accepted job never waits behind another one. Thread-safe. */
struct cma_workpool;

typedef void (*cma_work_fn)(void *arg);

enum cma_errc cma_workpool_new(unsigned min_threads, unsigned max_threads, int64_t idle_exit_ms,
                               struct cma_workpool **ret, struct cma_err *reterr);
/* Runs fn(arg) on a pool thread. false (fn not called) when max_threads jobs are running or no
 * thread can be started. */
bool cma_workpool_submit(struct cma_workpool *p, cma_work_fn fn, void *arg);
/* Jobs running now. */
unsigned cma_workpool_busy(struct cma_workpool *p);
/* Threads alive now (busy or idle). */
unsigned cma_workpool_threads(struct cma_workpool *p);
/* Waits until no job runs or the monotonic deadline passes; true when idle. */
bool cma_workpool_wait_idle(struct cma_workpool *p, int64_t deadline_mono_ms);
/* Joins every thread; running jobs are waited for. NULL is a no-op. */
void cma_workpool_free(struct cma_workpool *p);

/* ----- conntrack.c: absolute deadlines per connection ----- */

/* Every accepted connection is tracked from accept to close, in one phase at a time:
 *   HANDSHAKE  accepted; the TLS handshake must end within handshake_ms of accept;
 *   HEADERS    handshake done; the request (line, headers, any body) must be received within
 *              header_ms of the handshake's end;
 *   BUSY       a request is being handled or its response written: no deadline here (the
 *              handler's own timeouts and libmicrohttpd's inactivity timeout bound it);
 *   IDLE       keep-alive after a response: the next request must be received within
 *              idle_ms + header_ms of the previous response.
 * Deadlines are absolute: activity does not extend them. A sweeper thread cuts a connection
 * past its deadline with shutdown(2): the owner's event loop then reads end-of-file and closes
 * it as it would a client that went away. The descriptor stays the owner's; the owner must call
 * cma_conntrack_remove() before it closes it. Thread-safe. */
struct cma_conntrack;
struct cma_conn;

enum cma_conn_phase {
    CMA_CONN_HANDSHAKE,
    CMA_CONN_HEADERS,
    CMA_CONN_BUSY,
    CMA_CONN_IDLE,
    CMA_CONN_CUT, /* shut down by the sweeper or a drain; waiting for the owner to close it */
};

/* What the tracker reports; it does not log (the owner does, server.c). Deadline cuts and
 * evictions are summed and reported at most once a second, from the sweeper thread. */
enum cma_conntrack_event_kind {
    CMA_CONNTRACK_CUT_DEADLINE,   /* n connections cut past their deadline, by phase below */
    CMA_CONNTRACK_EVICTED,        /* n connections cut to make room at max_open */
    CMA_CONNTRACK_SWEEPER_FAILED, /* the sweeper thread could not start (tried again later) */
};

struct cma_conntrack_event {
    enum cma_conntrack_event_kind kind;
    uint64_t n;
    uint64_t handshake, request, keep_alive; /* CUT_DEADLINE: n by phase */
};

struct cma_conntrack_config {
    int64_t handshake_ms; /* > 0 */
    int64_t header_ms;    /* > 0 */
    int64_t idle_ms;      /* >= 0 */
    size_t max_open;      /* live (not cut) connections; 0 = no eviction */
    /* Called without the tracker's lock held; NULL = not reported. */
    void (*on_event)(void *ctx, const struct cma_conntrack_event *ev);
    void *on_event_ctx;
};

struct cma_conntrack_stats {
    size_t open;           /* tracked connections */
    size_t busy;           /* of which in phase BUSY */
    uint64_t cut_deadline; /* connections cut because a deadline passed, since start */
    uint64_t cut_drain;    /* connections cut by a drain, since start */
    uint64_t cut_evict;    /* connections cut to make room at max_open, since start */
};

/* Starts the sweeper thread. Caller owns: cma_conntrack_free(). */
enum cma_errc cma_conntrack_new(const struct cma_conntrack_config *cfg, struct cma_conntrack **ret,
                                struct cma_err *reterr);
/* Tracks a just-accepted descriptor in phase HANDSHAKE; `owner` is returned by
 * cma_conn_owner(). Over max_open live connections, the oldest one in HANDSHAKE, else HEADERS,
 * else IDLE is cut to make room. NULL when out of memory (the connection is not tracked). */
struct cma_conn *cma_conntrack_add(struct cma_conntrack *t, int fd, void *owner);
/* Moves c to `phase` (HANDSHAKE and CUT are not targets) and starts that phase's deadline.
 * A connection already cut stays cut. While draining, IDLE means cut now. */
void cma_conntrack_set_phase(struct cma_conn *c, enum cma_conn_phase phase);
enum cma_conn_phase cma_conntrack_phase(struct cma_conn *c);
void *cma_conn_owner(const struct cma_conn *c);
/* Forgets and frees c (the owner closes the descriptor afterwards). NULL is a no-op. */
void cma_conntrack_remove(struct cma_conn *c);
/* Starts a drain: connections in HANDSHAKE or IDLE are cut now, later ones that turn IDLE are
 * cut then; HEADERS and BUSY connections keep their deadlines. */
void cma_conntrack_drain(struct cma_conntrack *t);
/* Waits until no connection is tracked or the monotonic deadline passes; true when none. */
bool cma_conntrack_wait_empty(struct cma_conntrack *t, int64_t deadline_mono_ms);
void cma_conntrack_stats(struct cma_conntrack *t, struct cma_conntrack_stats *ret);
/* Stops the sweeper and frees what is still listed (their descriptors are not touched); the
 * owner must have removed every BUSY and CUT entry. */
void cma_conntrack_free(struct cma_conntrack *t);

#endif
