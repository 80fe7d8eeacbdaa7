/* file_test.c: cma_file_replace writes the bytes and the mode, leaves no temporary file behind,
 * keeps the old contents when it cannot write, and never lets a concurrent reader see an empty
 * or partial file while other threads replace the same path (the client-CA union that several
 * adapters sharing one --cert-dir write at start-up). */
#include <dirent.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "cma/file.h"
#include "fakehttp.h"

static char *make_dir(void)
{
    char tmpl[] = "/tmp/cma-file-test.XXXXXX";
    char *d = mkdtemp(tmpl);
    assert_non_null(d);
    return strdup(d);
}

static size_t count_entries(const char *dir)
{
    DIR *d = opendir(dir);
    assert_non_null(d);
    size_t n = 0;
    for (struct dirent *e; (e = readdir(d));)
        n += e->d_name[0] != '.';
    closedir(d);
    return n;
}

static void test_cma_file_replace__writes_bytes_and_mode(void **state)
{
    (void)state;
    char *dir = make_dir();
    char path[256];
    snprintf(path, sizeof path, "%s/a.pem", dir);
    struct cma_err err;
    cma_err_clear(&err);
    assert_int_equal(cma_file_replace(path, "first", 5, 0644, &err), CMA_OK);
    assert_int_equal(cma_file_replace(path, "second\n", 7, 0600, &err), CMA_OK);
    size_t len = 0;
    char *got = cma_file_read(path, &len);
    assert_non_null(got);
    assert_int_equal(len, 7);
    assert_memory_equal(got, "second\n", 7);
    struct stat st;
    assert_int_equal(stat(path, &st), 0);
    assert_int_equal(st.st_mode & 0777, 0600);
    assert_int_equal(count_entries(dir), 1); /* no temporary file left */
    free(got);
    unlink(path);
    rmdir(dir);
    free(dir);
}

static void test_cma_file_replace__missing_directory_is_an_error(void **state)
{
    (void)state;
    struct cma_err err;
    cma_err_clear(&err);
    assert_int_equal(cma_file_replace("/nonexistent-cma-dir/x/a.pem", "x", 1, 0644, &err),
                     CMA_ERR_IO);
    assert_non_null(strstr(err.msg, "cannot create /nonexistent-cma-dir/x/a.pem.tmp."));
}

struct race {
    const char *path;
    char body[2][4096];
    volatile bool stop;
    size_t bad_reads;
    size_t reads;
    size_t failed_writes;
};

static void *writer(void *arg)
{
    struct race *r = arg;
    struct cma_err err;
    for (int i = 0; i < 300; i++) {
        cma_err_clear(&err);
        const char *b = r->body[i & 1];
        if (cma_file_replace(r->path, b, strlen(b), 0644, &err) != CMA_OK)
            __atomic_add_fetch(&r->failed_writes, 1, __ATOMIC_RELAXED);
    }
    return NULL;
}

static void *reader(void *arg)
{
    struct race *r = arg;
    while (!r->stop) {
        size_t len = 0;
        char *got = cma_file_read(r->path, &len);
        if (!got)
            continue;
        r->reads++;
        bool whole = (len == strlen(r->body[0]) && memcmp(got, r->body[0], len) == 0) ||
                     (len == strlen(r->body[1]) && memcmp(got, r->body[1], len) == 0);
        r->bad_reads += !whole;
        free(got);
    }
    return NULL;
}

static void test_cma_file_replace__readers_never_see_a_partial_file(void **state)
{
    (void)state;
    char *dir = make_dir();
    char path[256];
    snprintf(path, sizeof path, "%s/client-ca-union.crt", dir);
    struct race r = {.path = path};
    memset(r.body[0], 'A', sizeof r.body[0] - 1);
    memset(r.body[1], 'B', sizeof r.body[1] / 2);
    pthread_t w[2], rd;
    assert_int_equal(pthread_create(&rd, NULL, reader, &r), 0);
    for (int i = 0; i < 2; i++)
        assert_int_equal(pthread_create(&w[i], NULL, writer, &r), 0);
    for (int i = 0; i < 2; i++)
        pthread_join(w[i], NULL);
    r.stop = true;
    pthread_join(rd, NULL);
    assert_int_equal(r.failed_writes, 0);
    assert_true(r.reads > 0);
    assert_int_equal(r.bad_reads, 0);
    assert_int_equal(count_entries(dir), 1);
    unlink(path);
    rmdir(dir);
    free(dir);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cma_file_replace__writes_bytes_and_mode),
        cmocka_unit_test(test_cma_file_replace__missing_directory_is_an_error),
        cmocka_unit_test(test_cma_file_replace__readers_never_see_a_partial_file),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
