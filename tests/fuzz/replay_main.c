/* replay_main.c: runs a libFuzzer entry point over every file of a corpus directory, so that
 * builds without libFuzzer still exercise each fuzz target on its seeds (h2o t/99fuzzer), and then
 * over every file of the optional regression directories (inputs scripts/fuzz.sh saved from
 * crashes, leaks and timeouts: they must stay harmless). The corpus must hold at least one input;
 * a regression directory that does not exist holds none. */
#include <dirent.h>
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Runs one file; 0 on success, -1 when it cannot be read. */
static int replay_file(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return -1;
    long len = -1;
    if (fseek(f, 0, SEEK_END) == 0)
        len = ftell(f);
    uint8_t *buf = len >= 0 ? malloc(len > 0 ? (size_t)len : 1) : NULL;
    bool ok = buf && fseek(f, 0, SEEK_SET) == 0 && fread(buf, 1, (size_t)len, f) == (size_t)len;
    fclose(f);
    if (ok)
        LLVMFuzzerTestOneInput(buf, (size_t)len);
    free(buf);
    return ok ? 0 : -1;
}

/* Replays every non-hidden file of dir; the count in *ret_n. -1 on an unreadable file or (unless
 * missing_ok) a directory that cannot be opened. */
static int replay_dir(const char *dir, bool missing_ok, size_t *ret_n)
{
    *ret_n = 0;
    DIR *d = opendir(dir);
    if (!d) {
        if (missing_ok && errno == ENOENT)
            return 0;
        perror(dir);
        return -1;
    }
    int rc = 0;
    struct dirent *e;
    while (rc == 0 && (e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.')
            continue;
        char path[4096];
        snprintf(path, sizeof(path), "%s/%s", dir, e->d_name);
        rc = replay_file(path);
        if (rc != 0)
            fprintf(stderr, "cannot read %s\n", path);
        else
            (*ret_n)++;
    }
    closedir(d);
    return rc;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: %s CORPUS_DIR [REGRESSION_DIR...]\n", argv[0]);
        return 2;
    }
    for (int i = 1; i < argc; i++) {
        size_t n = 0;
        if (replay_dir(argv[i], i > 1, &n) != 0)
            return 1;
        printf("replayed %zu inputs from %s\n", n, argv[i]);
        if (i == 1 && n == 0)
            return 1;
    }
    return 0;
}
