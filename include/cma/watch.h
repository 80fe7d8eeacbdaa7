/* watch.h: the config reload trigger. A thread watches, with inotify, the directory of each
 * --config file and each --config directory: a ConfigMap volume changes by creating a new
 * timestamped directory and renaming a `..data` symlink over the old one, which is an event in
 * the directory, never in the file the path names (that is a symlink through `..data`). Once the
 * directories have been quiet for the debounce time, the thread calls the reload function;
 * cma_watch_request() (main, on SIGHUP) calls it at once. Reloads run one at a time, on this
 * thread only. It keeps the outcome of the last call for /readyz and logs nothing: the reload
 * function decides what a change means and logs it. */
#ifndef CMA_WATCH_H
#define CMA_WATCH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cma/err.h"

/* Quiet time after the last change before a reload, when the config says 0. kubelet's swap is
 * one rename; an editor's save or `kubectl cp` is a few writes within milliseconds. */
#define CMA_WATCH_DEBOUNCE_MS 250

/* The reload: CMA_OK when the new config serves, otherwise the error (file:line:column) that
 * kept the previous one serving. `why` says what triggered it ("SIGHUP", "a change in DIR"). */
typedef enum cma_errc (*cma_watch_reload_fn)(void *ctx, const char *why, struct cma_err *reterr);

struct cma_watch_config {
    const char *const *paths; /* --config values, as given (files or directories) */
    size_t n_paths;
    int64_t debounce_ms; /* 0: CMA_WATCH_DEBOUNCE_MS */
    cma_watch_reload_fn reload;
    void *ctx;
};

struct cma_watch_status {
    uint64_t n_reloads, n_failures; /* calls of the reload function, and those that failed */
    bool last_ok;                   /* true until a reload fails, and after each that succeeds */
    int64_t last_wall_ms;           /* when the last reload ended; 0: none yet */
    char last_error[1024];          /* "" when last_ok */
};

struct cma_watch;

/* Watches the paths' directories and starts the thread. Errors: a path that does not exist,
 * inotify unavailable (CMA_ERR_IO with the reason). Caller owns: cma_watch_stop(). */
enum cma_errc cma_watch_start(const struct cma_watch_config *cfg, struct cma_watch **ret,
                              struct cma_err *reterr);
/* Asks for a reload now (SIGHUP). Thread-safe; requests made during a reload give one more. */
void cma_watch_request(struct cma_watch *w);
/* Stops the thread (a reload in progress finishes first) and frees everything. NULL is fine. */
void cma_watch_stop(struct cma_watch *w);
/* The outcome of the reloads so far. Thread-safe; with w NULL: no reload yet, ok. */
void cma_watch_get_status(struct cma_watch *w, struct cma_watch_status *ret);

#endif
