/* file.c: atomic replacement of a file (file.h): a unique temporary file in the same directory,
 * write, fchmod, fsync, rename, fsync of the directory. One implementation for every file the
 * adapter writes, so none of them can be seen half-written by a concurrent reader (a second
 * adapter sharing --cert-dir, a restarted pod reading the catalog cache). */
#include "cma/file.h"

#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static enum cma_errc write_all(int fd, const char *data, size_t len, const char *path,
                               struct cma_err *reterr)
{
    while (len) {
        ssize_t n = write(fd, data, len);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return cma_err_set(reterr, CMA_ERR_IO, "cannot write %s: %s", path,
                               n < 0 ? strerror(errno) : "no progress");
        data += n;
        len -= (size_t)n;
    }
    return CMA_OK;
}

/* fsync of the directory holding path, so the rename itself is durable. */
static enum cma_errc sync_dir(const char *path, struct cma_err *reterr)
{
    char *copy = strdup(path);
    if (!copy)
        return cma_err_set(reterr, CMA_ERR_NOMEM, "out of memory");
    const char *dir = dirname(copy);
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    enum cma_errc rc = CMA_OK;
    if (fd < 0 || fsync(fd) != 0)
        rc = cma_err_set(reterr, CMA_ERR_IO, "cannot sync the directory %s: %s", dir,
                         strerror(errno));
    if (fd >= 0)
        close(fd);
    free(copy);
    return rc;
}

enum cma_errc cma_file_replace(const char *path, const void *data, size_t len, mode_t mode,
                               struct cma_err *reterr)
{
    static const char suffix[] = ".tmp.XXXXXX";
    size_t plen = strlen(path);
    char *tmp = malloc(plen + sizeof suffix);
    if (!tmp)
        return cma_err_set(reterr, CMA_ERR_NOMEM, "out of memory");
    memcpy(tmp, path, plen);
    memcpy(tmp + plen, suffix, sizeof suffix);
    int fd = mkostemp(tmp, O_CLOEXEC); /* mode 0600 until the fchmod */
    if (fd < 0) {
        enum cma_errc rc =
            cma_err_set(reterr, CMA_ERR_IO, "cannot create %s: %s", tmp, strerror(errno));
        free(tmp);
        return rc;
    }
    enum cma_errc rc = write_all(fd, data, len, tmp, reterr);
    if (rc == CMA_OK && fchmod(fd, mode) != 0)
        rc = cma_err_set(reterr, CMA_ERR_IO, "cannot chmod %s: %s", tmp, strerror(errno));
    if (rc == CMA_OK && fsync(fd) != 0)
        rc = cma_err_set(reterr, CMA_ERR_IO, "cannot sync %s: %s", tmp, strerror(errno));
    if (close(fd) != 0 && rc == CMA_OK)
        rc = cma_err_set(reterr, CMA_ERR_IO, "cannot close %s: %s", tmp, strerror(errno));
    if (rc == CMA_OK && rename(tmp, path) != 0)
        rc = cma_err_set(reterr, CMA_ERR_IO, "cannot rename %s to %s: %s", tmp, path,
                         strerror(errno));
    if (rc != CMA_OK)
        unlink(tmp);
    free(tmp);
    return rc == CMA_OK ? sync_dir(path, reterr) : rc;
}
