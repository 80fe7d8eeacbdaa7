/* prom_envelope.h: what the two streamed Prometheus decoders (series_stream.c, query_stream.c)
 * share, private to the clients stage: the yajl handle and its one callback table (each event
 * marked for the input accounting, values the decoder skips counted through here, the rest
 * handed to the decoder's three handlers), the top-level `status` / `errorType` / `error`
 * strings of Prometheus' HTTP API envelope, the first failure, and the input accounting that
 * bounds how far a value may run without an event. Each decoder embeds one and keeps only its
 * own state (the data it keeps) beside it. */
#ifndef CMA_CLIENTS_PROM_ENVELOPE_H
#define CMA_CLIENTS_PROM_ENVELOPE_H

#include <stdbool.h>
#include <stddef.h>

#include <yajl/yajl_parse.h>

#include "cma/err.h"

/* What a JSON value is as it begins. */
enum cma_json_kind {
    CMA_JSON_NULL,
    CMA_JSON_BOOL,
    CMA_JSON_NUMBER,
    CMA_JSON_STRING,
    CMA_JSON_MAP,
    CMA_JSON_ARRAY,
};

/* A decoder's handlers of yajl's events, called only outside the values it skips
 * (cma_prom_envelope_skip). Each returns 1 to go on, or 0 (cma_prom_envelope_fail) to stop. */
struct cma_prom_events {
    /* A value begins; s/len: the text of a number or a string, else NULL/0. */
    int (*begin)(void *ctx, enum cma_json_kind k, const unsigned char *s, size_t len);
    int (*key)(void *ctx, const unsigned char *s, size_t len);
    int (*end)(void *ctx, bool map); /* a map (map true) or an array ends */
};

struct cma_prom_envelope {
    yajl_handle yajl;
    const struct cma_prom_events *events;
    void *ctx;            /* the decoder, handed to events */
    unsigned skip_depth;  /* > 0 while skipping a map or an array (its nesting) */
    const char *what;     /* "series parser", "query decoder": for internal misuse messages */
    const char *bad_json; /* the prefix of messages about the backend's JSON */
    /* top-level strings, bounded copies */
    bool have_status;
    bool status_bad; /* status was there but not a string */
    char status[32];
    char error_type[64];
    char error[400];
    /* the first failure and input accounting */
    struct cma_err err;
    bool failed;
    bool finished;
    bool event_seen; /* set by every callback: a value ended */
    size_t bytes_fed;
    size_t bytes_without_event;
};

/* Allocates the yajl handle whose events go to `events` with `ctx`. CMA_ERR_NOMEM when it
 * cannot. */
enum cma_errc cma_prom_envelope_init(struct cma_prom_envelope *e,
                                     const struct cma_prom_events *events, void *ctx,
                                     const char *what, const char *bad_json);
void cma_prom_envelope_done(struct cma_prom_envelope *e);

/* Records the first failure (later ones are dropped) and returns 0, so that a yajl callback can
 * `return cma_prom_envelope_fail(...)` to cancel the parse. */
int cma_prom_envelope_fail(struct cma_prom_envelope *e, enum cma_errc code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Skips the value that has just begun with kind k: for a map or an array, every event up to
 * its end (nested at most 64 deep) bypasses the decoder. Returns 1, for `return ...skip(...)`. */
int cma_prom_envelope_skip(struct cma_prom_envelope *e, enum cma_json_kind k);

/* The recorded failure, copied to reterr; returns its code. */
enum cma_errc cma_prom_envelope_error(const struct cma_prom_envelope *e, struct cma_err *reterr);

/* Stores a top-level string ("status", "errorType" or "error"; others are ignored). */
void cma_prom_envelope_string(struct cma_prom_envelope *e, const char *key, const unsigned char *s,
                              size_t len);

/* Feeds a chunk of the answer in slices; fails when yajl does, when a callback failed, or when
 * no JSON value ends within 2 MiB. */
enum cma_errc cma_prom_envelope_feed(struct cma_prom_envelope *e, const char *data, size_t len,
                                     struct cma_err *reterr);

/* Ends the input (yajl_complete_parse). CMA_OK when the document was complete and well formed;
 * it does not judge `status` (see cma_prom_envelope_judge). */
enum cma_errc cma_prom_envelope_complete(struct cma_prom_envelope *e, struct cma_err *reterr);

/* The envelope's verdict: CMA_OK for status "success"; the backend's own error for "error"
 * (errorType timeout → CMA_ERR_BACKEND_TIMEOUT, unavailable → CMA_ERR_BACKEND_UNAVAILABLE,
 * else CMA_ERR_BACKEND_ERROR); CMA_ERR_BACKEND_RESPONSE when status is missing or unknown. */
enum cma_errc cma_prom_envelope_judge(const struct cma_prom_envelope *e, struct cma_err *reterr);

#endif
