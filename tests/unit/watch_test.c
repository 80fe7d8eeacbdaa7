/* watch_test.c: unit tests for the config reload trigger (watch.c) on a real inotify in a temp
 * directory: a ConfigMap-style swap of the `..data` symlink (kubelet's atomic writer: a new
 * timestamped directory, a `..data_tmp` link renamed over `..data`, the old directory removed)
 * reloads and the reload reads the new content through the file's symlink; a --config directory
 * reloads on a new file and again after it was deleted and re-created; a request reloads without
 * any change; the status keeps the last outcome (a failure's file:line:column, then ok again);
 * a path that does not exist is refused. Waits are for an event with a generous deadline (the
 * watch reacts in milliseconds); no assertion depends on how long anything took. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <pthread.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "cma/watch.h"

#define WAIT_S 20

/* What the reload function saw; guarded by mu. */
struct seen {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    char path[512]; /* read at each reload */
    char content[256];
    char why[1200];
    int calls;
    bool fail; /* answer the next reloads with an error */
};

static enum cma_errc reload(void *ctx, const char *why, struct cma_err *reterr)
{
    struct seen *s = ctx;
    pthread_mutex_lock(&s->mu);
    s->content[0] = '\0';
    FILE *f = fopen(s->path, "r");
    if (f) {
        size_t n = fread(s->content, 1, sizeof(s->content) - 1, f);
        s->content[n] = '\0';
        fclose(f);
    }
    snprintf(s->why, sizeof(s->why), "%s", why);
    s->calls++;
    bool fail = s->fail;
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
    if (fail)
        return cma_err_set_at(reterr, CMA_ERR_CONFIG_SYNTAX, "rules.yaml", 3, 5,
                              "did not find expected key");
    return CMA_OK;
}

/* Copies what the last reload saw (under the lock: the watch thread writes it). */
static void last_seen(struct seen *s, char content[256], char why[1200])
{
    pthread_mutex_lock(&s->mu);
    memcpy(content, s->content, sizeof(s->content));
    memcpy(why, s->why, sizeof(s->why));
    pthread_mutex_unlock(&s->mu);
}

/* Waits until a reload saw `want` (or, with want NULL, until `calls` reloads happened). */
static bool wait_for(struct seen *s, const char *want, int calls)
{
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += WAIT_S;
    pthread_mutex_lock(&s->mu);
    while (!(want ? strcmp(s->content, want) == 0 : s->calls >= calls))
        if (pthread_cond_timedwait(&s->cv, &s->mu, &until) != 0)
            break;
    bool ok = want ? strcmp(s->content, want) == 0 : s->calls >= calls;
    pthread_mutex_unlock(&s->mu);
    return ok;
}

static void write_file(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    assert_true(fputs(text, f) >= 0);
    assert_int_equal(fclose(f), 0);
}

static void run(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void run(const char *fmt, ...)
{
    char cmd[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(cmd, sizeof(cmd), fmt, ap);
    va_end(ap);
    assert_int_equal(system(cmd), 0);
}

static struct cma_watch *start(struct seen *s, const char *const *paths, size_t n)
{
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->cv, NULL);
    struct cma_watch_config wc = {
        .paths = paths, .n_paths = n, .debounce_ms = 50, .reload = reload, .ctx = s};
    struct cma_err err;
    cma_err_clear(&err);
    struct cma_watch *w = NULL;
    if (cma_watch_start(&wc, &w, &err) != CMA_OK)
        fail_msg("cma_watch_start: %s", err.msg);
    return w;
}

static void done(struct cma_watch *w, struct seen *s, const char *dir)
{
    cma_watch_stop(w);
    pthread_mutex_destroy(&s->mu);
    pthread_cond_destroy(&s->cv);
    run("rm -rf '%s'", dir);
}

/* kubelet's atomic writer: ts/rules.yaml, ..data -> ts, rules.yaml -> ..data/rules.yaml. */
static void configmap_write(const char *dir, const char *ts, const char *old_ts, const char *text)
{
    char path[512];
    run("mkdir -p '%s/%s'", dir, ts);
    snprintf(path, sizeof(path), "%s/%s/rules.yaml", dir, ts);
    write_file(path, text);
    run("cd '%s' && ln -sfn '%s' ..data_tmp && mv -T ..data_tmp ..data", dir, ts);
    if (old_ts)
        run("rm -rf '%s/%s'", dir, old_ts);
}

static void test_cma_watch__configmap_swap_reloads_the_new_content(void **state)
{
    (void)state;
    char dir[] = "/tmp/cma-watch-XXXXXX";
    assert_non_null(mkdtemp(dir));
    configmap_write(dir, "..2024_01_01_00_00_00.1", NULL, "v1");
    run("cd '%s' && ln -s ..data/rules.yaml rules.yaml", dir);
    struct seen s = {0};
    snprintf(s.path, sizeof(s.path), "%s/rules.yaml", dir);
    const char *paths[] = {s.path};
    struct cma_watch *w = start(&s, paths, 1);

    configmap_write(dir, "..2024_01_01_00_01_00.2", "..2024_01_01_00_00_00.1", "v2");
    assert_true(wait_for(&s, "v2", 0));
    char content[256], why[1200], want[600];
    last_seen(&s, content, why);
    snprintf(want, sizeof(want), "a change in %s", dir);
    assert_string_equal(why, want);
    struct cma_watch_status st;
    /* the status is recorded once the reload function has returned: wait for it (deadline 5 s) */
    for (int i = 0; i < 500; i++) {
        cma_watch_get_status(w, &st);
        if (st.n_reloads >= 1)
            break;
        usleep(10000);
    }
    assert_true(st.n_reloads >= 1);
    assert_int_equal(st.n_failures, 0);
    assert_true(st.last_ok);
    assert_true(st.last_wall_ms > 0);
    assert_string_equal(st.last_error, "");
    done(w, &s, dir);
}

static void test_cma_watch__directory_new_file_and_recreated_directory(void **state)
{
    (void)state;
    char dir[] = "/tmp/cma-watch-XXXXXX";
    assert_non_null(mkdtemp(dir));
    char conf[64];
    snprintf(conf, sizeof(conf), "%s/conf.d", dir);
    run("mkdir '%s'", conf);
    struct seen s = {0};
    snprintf(s.path, sizeof(s.path), "%s/b.yaml", conf);
    write_file(s.path, "b1"); /* before the watch: not a change */
    const char *paths[] = {conf};
    struct cma_watch *w = start(&s, paths, 1);

    char a[128];
    snprintf(a, sizeof(a), "%s/a.yaml", conf);
    write_file(a, "a1"); /* a new file in a --config directory counts */
    assert_true(wait_for(&s, NULL, 1));
    char content[256], why[1200];
    last_seen(&s, content, why);
    assert_string_equal(content, "b1");

    run("rm -rf '%s' && mkdir '%s'", conf, conf); /* the directory goes away and comes back */
    write_file(s.path, "b2");
    assert_true(wait_for(&s, "b2", 0));
    done(w, &s, dir);
}

static void test_cma_watch__request_and_status(void **state)
{
    (void)state;
    char dir[] = "/tmp/cma-watch-XXXXXX";
    assert_non_null(mkdtemp(dir));
    struct seen s = {0};
    snprintf(s.path, sizeof(s.path), "%s/rules.yaml", dir);
    write_file(s.path, "r1");
    const char *paths[] = {s.path};
    struct cma_watch *w = start(&s, paths, 1);
    struct cma_watch_status st;
    cma_watch_get_status(w, &st);
    assert_int_equal(st.n_reloads, 0);
    assert_true(st.last_ok);

    pthread_mutex_lock(&s.mu);
    s.fail = true;
    pthread_mutex_unlock(&s.mu);
    cma_watch_request(w); /* no change at all: a request reloads anyway */
    assert_true(wait_for(&s, NULL, 1));
    char content[256], why[1200];
    last_seen(&s, content, why);
    assert_string_equal(why, "a reload request");
    assert_string_equal(content, "r1");
    /* the status is written after the reload function returns */
    for (int i = 0; i < WAIT_S * 100 && (cma_watch_get_status(w, &st), st.n_reloads < 1); i++)
        usleep(10000);
    assert_int_equal(st.n_reloads, 1);
    assert_int_equal(st.n_failures, 1);
    assert_false(st.last_ok);
    assert_string_equal(st.last_error, "rules.yaml:3:5: did not find expected key");

    pthread_mutex_lock(&s.mu);
    s.fail = false;
    pthread_mutex_unlock(&s.mu);
    write_file(s.path, "r2"); /* a plain file rewritten in place counts too */
    assert_true(wait_for(&s, "r2", 0));
    for (int i = 0; i < WAIT_S * 100 && (cma_watch_get_status(w, &st), !st.last_ok); i++)
        usleep(10000);
    assert_true(st.last_ok);
    assert_int_equal(st.n_failures, 1);
    assert_string_equal(st.last_error, "");
    done(w, &s, dir);
}

static void test_cma_watch__missing_path_is_refused(void **state)
{
    (void)state;
    const char *paths[] = {"/nonexistent-cma-watch/rules.yaml"};
    struct cma_watch_config wc = {.paths = paths, .n_paths = 1, .reload = reload};
    struct cma_err err;
    cma_err_clear(&err);
    struct cma_watch *w = NULL;
    assert_int_equal(cma_watch_start(&wc, &w, &err), CMA_ERR_IO);
    assert_null(w);
    assert_non_null(strstr(err.msg, "/nonexistent-cma-watch/rules.yaml"));
    struct cma_watch_status st;
    cma_watch_get_status(NULL, &st); /* no watch: ok, nothing reloaded */
    assert_true(st.last_ok);
    assert_int_equal(st.n_reloads, 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cma_watch__configmap_swap_reloads_the_new_content),
        cmocka_unit_test(test_cma_watch__directory_new_file_and_recreated_directory),
        cmocka_unit_test(test_cma_watch__request_and_status),
        cmocka_unit_test(test_cma_watch__missing_path_is_refused),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
