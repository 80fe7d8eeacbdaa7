/* file.h: replacing a file's contents atomically, for everything the adapter writes to disk (the
 * serving certificate and key, the client-CA union, the catalog cache).
 *
 * A reader of `path` sees either the old bytes or all of the new ones, never a partial or empty
 * file: the data goes to a fresh temporary file beside `path` (mkstemp, so concurrent writers of
 * the same path never share one), is fsync'd, and is renamed over `path`; then the directory is
 * fsync'd so the rename survives a crash. On failure `path` is untouched and the temporary file
 * is removed. Thread-safe; reentrant. */
#ifndef CMA_FILE_H
#define CMA_FILE_H

#include <stddef.h>
#include <sys/types.h>

#include "cma/err.h"

/* Replaces `path` with `len` bytes of `data`, created with permission bits `mode`. */
enum cma_errc cma_file_replace(const char *path, const void *data, size_t len, mode_t mode,
                               struct cma_err *reterr);

#endif
