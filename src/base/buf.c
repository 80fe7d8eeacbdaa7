/* buf.c: growable, NUL-terminated byte buffer with a ceiling fixed at init. */
#include "cma/buf.h"

#include "cma/str.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void cma_buf_init(struct cma_buf *b, size_t max_bytes)
{
    b->ptr = NULL;
    b->len = 0;
    b->cap = 0;
    b->max = max_bytes ? max_bytes : CMA_BUF_DEFAULT_MAX;
}

void cma_buf_done(struct cma_buf *b)
{
    if (!b)
        return;
    free(b->ptr);
    b->ptr = NULL;
    b->len = 0;
    b->cap = 0;
}

void cma_buf_clear(struct cma_buf *b)
{
    b->len = 0;
    if (b->ptr)
        b->ptr[0] = '\0';
}

static enum cma_errc fail(struct cma_buf *b, enum cma_errc code)
{
    cma_buf_done(b);
    return code;
}

static enum cma_errc reserve(struct cma_buf *b, size_t extra)
{
    if (extra > b->max || b->len > b->max - extra)
        return fail(b, CMA_ERR_TOO_LARGE);
    size_t need = b->len + extra + 1;
    if (need <= b->cap)
        return CMA_OK;
    size_t cap = b->cap ? b->cap : 64;
    while (cap < need)
        cap = cap > SIZE_MAX / 2 ? need : cap * 2;
    if (cap > b->max + 1)
        cap = b->max + 1;
    char *p = realloc(b->ptr, cap);
    if (!p)
        return fail(b, CMA_ERR_NOMEM);
    b->ptr = p;
    b->cap = cap;
    return CMA_OK;
}

enum cma_errc cma_buf_append(struct cma_buf *b, const void *data, size_t len)
{
    enum cma_errc rc = reserve(b, len);
    if (rc != CMA_OK)
        return rc;
    if (len)
        memcpy(b->ptr + b->len, data, len);
    b->len += len;
    b->ptr[b->len] = '\0';
    return CMA_OK;
}

enum cma_errc cma_buf_appends(struct cma_buf *b, const char *s)
{
    return cma_buf_append(b, s, strlen(s));
}

enum cma_errc cma_buf_appendc(struct cma_buf *b, char c)
{
    return cma_buf_append(b, &c, 1);
}

enum cma_errc cma_buf_vprintf(struct cma_buf *b, const char *fmt, va_list ap)
{
    va_list ap2;
    va_copy(ap2, ap);
    int n = vsnprintf(NULL, 0, fmt, ap2);
    va_end(ap2);
    if (n < 0)
        return fail(b, CMA_ERR_INTERNAL);
    enum cma_errc rc = reserve(b, (size_t)n);
    if (rc != CMA_OK)
        return rc;
    vsnprintf(b->ptr + b->len, (size_t)n + 1, fmt, ap);
    b->len += (size_t)n;
    return CMA_OK;
}

enum cma_errc cma_buf_printf(struct cma_buf *b, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    enum cma_errc rc = cma_buf_vprintf(b, fmt, ap);
    va_end(ap);
    return rc;
}

enum cma_errc cma_buf_append_u64(struct cma_buf *b, unsigned long long v)
{
    char digits[CMA_U64_DIGITS];
    return cma_buf_append(b, digits, cma_u64_format(digits, v, 1));
}

char *cma_buf_take(struct cma_buf *b)
{
    char *p = b->ptr;
    if (!p)
        p = calloc(1, 1);
    b->ptr = NULL;
    b->len = 0;
    b->cap = 0;
    return p;
}

const char *cma_buf_str(const struct cma_buf *b)
{
    return b->ptr ? b->ptr : "";
}
