/* persist.h: the last good catalog on disk (--catalog-cache-file), so a restarted adapter serves
 * discovery at once, even while the backend is down, until its first successful relist replaces
 * the loaded snapshot.
 *
 * The file is tied to what it was built from: a fingerprint (SHA-256 over the config file's bytes
 * and the flags that change what a relist finds) must match, and a SHA-256 of the content on its
 * last line catches corrupt and truncated files. Every entry must also name a rule of the current
 * ruleset that derives its metric name from its series name. Anything else is refused with one
 * error (file:line: what is wrong) and never served. Writes are atomic: a temporary file in the
 * same directory, fsync, rename, fsync of the directory. Non-logging: callers log. */
#ifndef CMA_PERSIST_H
#define CMA_PERSIST_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cma/buf.h"
#include "cma/err.h"

struct cma_catalog;
struct cma_ruleset;

#define CMA_PERSIST_FINGERPRINT_LEN 32
/* Larger files are refused unread. */
#define CMA_PERSIST_MAX_BYTES ((size_t)64 << 20)

/* SHA-256 over the bytes of config_path and each of parts (length-prefixed, so part boundaries
 * count). CMA_ERR_IO when the config file cannot be read. */
enum cma_errc cma_persist_fingerprint(const char *config_path, const char *const *parts,
                                      size_t n_parts, uint8_t ret[CMA_PERSIST_FINGERPRINT_LEN],
                                      struct cma_err *reterr);

/* The file's bytes for snapshot c, appended to out (a failed append empties it). */
enum cma_errc cma_persist_encode(const struct cma_catalog *c,
                                 const uint8_t fingerprint[CMA_PERSIST_FINGERPRINT_LEN],
                                 struct cma_buf *out, struct cma_err *reterr);

/* Parses data[0..len) (any bytes; `name` is used in error positions) into a new snapshot whose
 * rules point into `rules`. Errors: CMA_ERR_IO with "name:line: ..." for a foreign, corrupt,
 * truncated or mismatched file; CMA_ERR_NOMEM; CMA_ERR_TOO_LARGE. On failure *ret is untouched.
 * Caller owns one reference. */
enum cma_errc cma_persist_decode(const char *name, const char *data, size_t len,
                                 const uint8_t fingerprint[CMA_PERSIST_FINGERPRINT_LEN],
                                 const struct cma_ruleset *rules, struct cma_catalog **ret,
                                 struct cma_err *reterr);

/* One cache file. Not thread-safe: one thread saves (the publisher of the catalog store). */
struct cma_persist;

enum cma_errc cma_persist_new(const char *path,
                              const uint8_t fingerprint[CMA_PERSIST_FINGERPRINT_LEN],
                              struct cma_persist **ret, struct cma_err *reterr);
void cma_persist_free(struct cma_persist *p);
const char *cma_persist_path(const struct cma_persist *p);

/* Reads and decodes the file. CMA_ERR_NOT_FOUND when it does not exist (a first start); other
 * errors as cma_persist_decode, or CMA_ERR_IO when it cannot be read. */
enum cma_errc cma_persist_load(struct cma_persist *p, const struct cma_ruleset *rules,
                               struct cma_catalog **ret, struct cma_err *reterr);

/* Writes c atomically. Skipped (*ret_written false) when its entries and resources equal those
 * this object last wrote or loaded and the file still exists: the file's built time is then the
 * relist that first found this content. ret_written may be NULL. */
enum cma_errc cma_persist_save(struct cma_persist *p, const struct cma_catalog *c,
                               bool *ret_written, struct cma_err *reterr);

#endif
