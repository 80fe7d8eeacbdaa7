/* watch.c: the config reload trigger (watch.h): inotify on the config directories, a debounce,
 * explicit requests, and the outcome of the last reload.
 *
 * DESIGN: one thread waits in poll(2) on the inotify descriptor and an eventfd that
 * cma_watch_request() and cma_watch_stop() write to, so it needs no signal and no timer. An
 * event counts when it names a config file of that directory, `..data` (the ConfigMap swap),
 * or, for a --config directory, any entry not starting with '.' (kubelet's `..2024_...` and
 * `..data_tmp` entries and editors' dot files come and go around every change and are left
 * out). A counted event moves the reload to debounce_ms later, but never more than
 * 8 × debounce_ms after the first one, so a directory that never stays quiet still reloads. A
 * directory that goes away (IN_IGNORED) is watched again, checked every second, and its return
 * counts as a change. The status is the one piece of shared state: written by the thread under
 * the mutex, read by /readyz. */
#include "cma/watch.h"

#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/inotify.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cma/clock.h"

#define WATCH_MASK                                                                                 \
    (IN_CREATE | IN_DELETE | IN_MODIFY | IN_CLOSE_WRITE | IN_MOVED_TO | IN_MOVED_FROM |            \
     IN_ATTRIB | IN_DELETE_SELF | IN_MOVE_SELF)
#define RETRY_LOST_MS 1000

struct watched {
    char *dir;     /* as given to inotify_add_watch */
    int wd;        /* -1: the directory went away; watched again every RETRY_LOST_MS */
    bool any_name; /* a --config directory: every entry not starting with '.' */
    char **names;  /* --config files in this directory: their base names */
    size_t n_names;
};

struct cma_watch {
    struct cma_watch_config cfg;
    int ifd, efd;
    struct watched *dirs;
    size_t n_dirs;
    pthread_t thread;
    pthread_mutex_t mu;
    bool stop, requested;           /* guarded by mu */
    struct cma_watch_status status; /* guarded by mu */
};

static void free_dirs(struct cma_watch *w)
{
    for (size_t i = 0; i < w->n_dirs; i++) {
        free(w->dirs[i].dir);
        for (size_t k = 0; k < w->dirs[i].n_names; k++)
            free(w->dirs[i].names[k]);
        free(w->dirs[i].names);
    }
    free(w->dirs);
}

/* The entry for (dir, wd): an existing one with the same descriptor (the same directory named
 * twice) or a new one. Takes dir. NULL when out of memory (dir freed). */
static struct watched *entry_for(struct cma_watch *w, char *dir, int wd)
{
    for (size_t i = 0; i < w->n_dirs; i++) {
        if (w->dirs[i].wd == wd) {
            free(dir);
            return &w->dirs[i];
        }
    }
    struct watched *d = realloc(w->dirs, (w->n_dirs + 1) * sizeof(*d));
    if (!d) {
        free(dir);
        return NULL;
    }
    w->dirs = d;
    d[w->n_dirs] = (struct watched){.dir = dir, .wd = wd};
    return &d[w->n_dirs++];
}

static enum cma_errc add_name(struct watched *d, const char *name)
{
    char **names = realloc(d->names, (d->n_names + 1) * sizeof(*names));
    if (!names)
        return CMA_ERR_NOMEM;
    d->names = names;
    if (!(names[d->n_names] = strdup(name)))
        return CMA_ERR_NOMEM;
    d->n_names++;
    return CMA_OK;
}

/* Watches the directory of one --config value: the value itself when it is a directory. */
static enum cma_errc watch_path(struct cma_watch *w, const char *path, struct cma_err *reterr)
{
    struct stat st;
    if (stat(path, &st) != 0)
        return cma_err_set(reterr, CMA_ERR_IO, "cannot watch %s: %s", path, strerror(errno));
    bool is_dir = S_ISDIR(st.st_mode);
    const char *slash = strrchr(path, '/');
    char *dir = is_dir  ? strdup(path)
                : slash ? strndup(path, slash == path ? 1 : (size_t)(slash - path))
                        : strdup(".");
    if (!dir)
        return cma_err_set(reterr, CMA_ERR_NOMEM, "out of memory");
    int wd = inotify_add_watch(w->ifd, dir, WATCH_MASK);
    if (wd < 0) {
        enum cma_errc rc =
            cma_err_set(reterr, CMA_ERR_IO, "cannot watch %s: %s", dir, strerror(errno));
        free(dir);
        return rc;
    }
    struct watched *d = entry_for(w, dir, wd);
    if (!d || (!is_dir && add_name(d, slash ? slash + 1 : path) != CMA_OK))
        return cma_err_set(reterr, CMA_ERR_NOMEM, "out of memory");
    d->any_name |= is_dir;
    return CMA_OK;
}

/* True when an event for `name` in d can change the config. */
static bool counts(const struct watched *d, const char *name)
{
    if (!name[0] || strcmp(name, "..data") == 0)
        return true;
    if (name[0] == '.')
        return false;
    if (d->any_name)
        return true;
    for (size_t i = 0; i < d->n_names; i++)
        if (strcmp(d->names[i], name) == 0)
            return true;
    return false;
}

static struct watched *by_wd(struct cma_watch *w, int wd)
{
    for (size_t i = 0; i < w->n_dirs; i++)
        if (w->dirs[i].wd == wd)
            return &w->dirs[i];
    return NULL;
}

/* Reads every pending event; returns the directory of the last one that counts, or NULL. */
static const char *drain_events(struct cma_watch *w)
{
    char buf[8192] __attribute__((aligned(__alignof__(struct inotify_event))));
    const char *changed = NULL;
    for (;;) {
        ssize_t n = read(w->ifd, buf, sizeof(buf));
        if (n <= 0)
            return changed; /* EAGAIN: drained */
        for (char *p = buf; p < buf + n;) {
            const struct inotify_event *ev = (const struct inotify_event *)p;
            p += sizeof(*ev) + ev->len;
            if (ev->mask & IN_Q_OVERFLOW) {
                changed = w->n_dirs ? w->dirs[0].dir : "";
                continue;
            }
            struct watched *d = by_wd(w, ev->wd);
            if (!d)
                continue;
            if (ev->mask & IN_IGNORED)
                d->wd = -1; /* the directory went away: watched again later */
            if ((ev->mask & IN_IGNORED) || counts(d, ev->len ? ev->name : ""))
                changed = d->dir;
        }
    }
}

/* Watches the directories that went away again; returns one that is back, or NULL. */
static const char *rewatch_lost(struct cma_watch *w, bool *any_lost)
{
    const char *back = NULL;
    *any_lost = false;
    for (size_t i = 0; i < w->n_dirs; i++) {
        if (w->dirs[i].wd >= 0)
            continue;
        w->dirs[i].wd = inotify_add_watch(w->ifd, w->dirs[i].dir, WATCH_MASK);
        if (w->dirs[i].wd >= 0)
            back = w->dirs[i].dir;
        else
            *any_lost = true;
    }
    return back;
}

static void run_reload(struct cma_watch *w, const char *why)
{
    struct cma_err err;
    cma_err_clear(&err);
    enum cma_errc rc = w->cfg.reload(w->cfg.ctx, why, &err);
    char line[sizeof(w->status.last_error)] = "";
    if (rc != CMA_OK && err.msg[0])
        cma_err_format_pos(&err, line, sizeof(line));
    else if (rc != CMA_OK)
        snprintf(line, sizeof(line), "%s", cma_errc_meaning(rc));
    pthread_mutex_lock(&w->mu);
    w->status.n_reloads++;
    w->status.last_wall_ms = cma_clock_wall_ms();
    w->status.last_ok = rc == CMA_OK;
    if (rc != CMA_OK)
        w->status.n_failures++;
    snprintf(w->status.last_error, sizeof(w->status.last_error), "%s", line);
    pthread_mutex_unlock(&w->mu);
}

/* poll(2)'s timeout: until the pending reload (due, 0 = none), at most RETRY_LOST_MS while a
 * directory is lost; -1 = no limit. */
static int poll_timeout(int64_t due, bool any_lost)
{
    int64_t t = -1;
    if (due) {
        t = due - cma_clock_mono_ms();
        t = t < 0 ? 0 : t;
    }
    if (any_lost && (t < 0 || t > RETRY_LOST_MS))
        t = RETRY_LOST_MS;
    return (int)t;
}

/* The thread's pending reload: when it is due (0: none), the change that started it, whether a
 * directory is lost, and why the reload will run. */
struct pending {
    int64_t due, first;
    bool any_lost;
    char why[1100];
};

/* Waits for inotify, the eventfd or the pending deadline; takes the stop and request flags (the
 * request is cleared). Returns whether inotify has events to read. */
static bool wait_wakeup(struct cma_watch *w, const struct pending *p, bool *stop, bool *requested)
{
    struct pollfd pf[2] = {{.fd = w->ifd, .events = POLLIN}, {.fd = w->efd, .events = POLLIN}};
    if (poll(pf, 2, poll_timeout(p->due, p->any_lost)) < 0 && errno != EINTR)
        pf[0].revents = pf[1].revents = 0;
    uint64_t wakeups;
    if ((pf[1].revents & POLLIN) && read(w->efd, &wakeups, sizeof(wakeups)) < 0)
        wakeups = 0; /* EAGAIN: another read took it */
    pthread_mutex_lock(&w->mu);
    *stop = w->stop;
    *requested = w->requested;
    w->requested = false;
    pthread_mutex_unlock(&w->mu);
    return (pf[0].revents & POLLIN) != 0;
}

/* A counted change in `where`: the reload moves to debounce_ms later, but never more than
 * 8 × debounce_ms after the first change. */
static void note_change(struct pending *p, const char *where, int64_t debounce)
{
    int64_t now = cma_clock_mono_ms();
    p->first = p->due ? p->first : now;
    p->due = now + debounce < p->first + 8 * debounce ? now + debounce : p->first + 8 * debounce;
    snprintf(p->why, sizeof(p->why), "a change in %s", where);
}

static void *watch_main(void *arg)
{
    struct cma_watch *w = arg;
    int64_t debounce = w->cfg.debounce_ms > 0 ? w->cfg.debounce_ms : CMA_WATCH_DEBOUNCE_MS;
    struct pending p = {0};
    for (;;) {
        bool stop = false, requested = false;
        bool events = wait_wakeup(w, &p, &stop, &requested);
        if (stop)
            break;
        const char *dir = events ? drain_events(w) : NULL;
        const char *back = rewatch_lost(w, &p.any_lost);
        if (dir || back)
            note_change(&p, dir ? dir : back, debounce);
        if (requested) {
            p.due = 0; /* a requested reload reads every file, pending changes included */
            run_reload(w, "a reload request");
        } else if (p.due && cma_clock_mono_ms() >= p.due) {
            p.due = 0;
            run_reload(w, p.why);
        }
    }
    return NULL;
}

static void wake(struct cma_watch *w)
{
    uint64_t one = 1;
    if (write(w->efd, &one, sizeof(one)) < 0) {
        /* EAGAIN: the counter is full, so the thread has a wake-up pending anyway */
    }
}

static void destroy(struct cma_watch *w)
{
    if (w->ifd >= 0)
        close(w->ifd);
    if (w->efd >= 0)
        close(w->efd);
    free_dirs(w);
    pthread_mutex_destroy(&w->mu);
    free(w);
}

enum cma_errc cma_watch_start(const struct cma_watch_config *cfg, struct cma_watch **ret,
                              struct cma_err *reterr)
{
    struct cma_watch *w = calloc(1, sizeof(*w));
    if (!w)
        return cma_err_set(reterr, CMA_ERR_NOMEM, "out of memory");
    w->cfg = *cfg;
    w->cfg.paths = NULL; /* borrowed for the start only */
    w->status.last_ok = true;
    pthread_mutex_init(&w->mu, NULL);
    w->ifd = inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
    w->efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    enum cma_errc rc = CMA_OK;
    if (w->ifd < 0 || w->efd < 0)
        rc = cma_err_set(reterr, CMA_ERR_IO, "cannot watch the config: %s", strerror(errno));
    for (size_t i = 0; rc == CMA_OK && i < cfg->n_paths; i++)
        rc = watch_path(w, cfg->paths[i], reterr);
    if (rc == CMA_OK && pthread_create(&w->thread, NULL, watch_main, w) != 0)
        rc = cma_err_set(reterr, CMA_ERR_INTERNAL, "cannot start the config watch thread");
    if (rc != CMA_OK) {
        destroy(w);
        return rc;
    }
    *ret = w;
    return CMA_OK;
}

void cma_watch_request(struct cma_watch *w)
{
    pthread_mutex_lock(&w->mu);
    w->requested = true;
    pthread_mutex_unlock(&w->mu);
    wake(w);
}

void cma_watch_stop(struct cma_watch *w)
{
    if (!w)
        return;
    pthread_mutex_lock(&w->mu);
    w->stop = true;
    pthread_mutex_unlock(&w->mu);
    wake(w);
    pthread_join(w->thread, NULL);
    destroy(w);
}

void cma_watch_get_status(struct cma_watch *w, struct cma_watch_status *ret)
{
    if (!w) {
        *ret = (struct cma_watch_status){.last_ok = true};
        return;
    }
    pthread_mutex_lock(&w->mu);
    *ret = w->status;
    pthread_mutex_unlock(&w->mu);
}
