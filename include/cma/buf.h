/* buf.h: growable byte buffer with a mandatory ceiling (curl's dynbuf, STYLE 3.4).
 *
 * The content is always NUL-terminated (once anything was appended), so cma_buf_str() can be
 * handed to C string functions. A failed append (over the ceiling or out of memory) frees the
 * content and leaves the buffer empty, so a half-built value is never used by mistake.
 * Not thread-safe: a buffer has one owner. */
#ifndef CMA_BUF_H
#define CMA_BUF_H

#include <stdarg.h>
#include <stddef.h>

#include "cma/err.h"

struct cma_buf {
    char *ptr;  /* NULL until the first append */
    size_t len; /* bytes used, not counting the NUL */
    size_t cap; /* bytes allocated */
    size_t max; /* ceiling on len; appends past it fail with CMA_ERR_TOO_LARGE */
};

#define CMA_BUF_DEFAULT_MAX ((size_t)64 << 20)

void cma_buf_init(struct cma_buf *b, size_t max_bytes);

/* Each returns CMA_OK, CMA_ERR_TOO_LARGE or CMA_ERR_NOMEM; on failure the buffer is emptied. */
enum cma_errc cma_buf_append(struct cma_buf *b, const void *data, size_t len);
enum cma_errc cma_buf_appends(struct cma_buf *b, const char *s);
enum cma_errc cma_buf_appendc(struct cma_buf *b, char c);
/* v in decimal, as "%llu" writes it, without printf's cost (request paths build keys with it). */
enum cma_errc cma_buf_append_u64(struct cma_buf *b, unsigned long long v);
enum cma_errc cma_buf_printf(struct cma_buf *b, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
enum cma_errc cma_buf_vprintf(struct cma_buf *b, const char *fmt, va_list ap)
    __attribute__((format(printf, 2, 0)));

/* Sets len to 0 and keeps the memory for reuse. */
void cma_buf_clear(struct cma_buf *b);
/* Frees the memory; the buffer can be reused after cma_buf_init(). Accepts a zeroed struct. */
void cma_buf_done(struct cma_buf *b);
/* Hands the content to the caller (free with free()); never NULL unless out of memory; the
 * buffer is left empty. */
char *cma_buf_take(struct cma_buf *b);
/* The content as a C string, "" when empty. Borrowed: valid until the next change. */
const char *cma_buf_str(const struct cma_buf *b);

#endif
