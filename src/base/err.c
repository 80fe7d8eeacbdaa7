/* err.c: struct cma_err and the error-code table (name, HTTP status, Kubernetes reason,
 * meaning), and the "file:line:column: message" renderer. No allocation, no global state. */
#include "cma/err.h"

#include <stdio.h>
#include <string.h>

struct errc_row {
    const char *name;
    int status;
    const char *reason;
    const char *meaning;
};

static const struct errc_row errc_rows[CMA_ERRC__COUNT] = {
#define CMA_ERRC_ROW(name, status, reason, meaning) {#name, status, reason, meaning},
    CMA_ERRC_MAP(CMA_ERRC_ROW)
#undef CMA_ERRC_ROW
};

static const struct errc_row *row_for(enum cma_errc code)
{
    if ((unsigned)code >= CMA_ERRC__COUNT)
        return &errc_rows[CMA_ERR_INTERNAL];
    return &errc_rows[code];
}

void cma_err_clear(struct cma_err *err)
{
    if (!err)
        return;
    err->code = CMA_OK;
    err->file[0] = '\0';
    err->line = 0;
    err->column = 0;
    err->msg[0] = '\0';
}

/* Replaces newlines so a message always stays on one line. */
static void one_line(char *s)
{
    for (; *s; s++)
        if (*s == '\n' || *s == '\r')
            *s = ' ';
}

/* A message that did not fit msg (`wanted` bytes long) says so at its end, after the last whole
 * UTF-8 character that fits: "... [N more bytes]" (N: the bytes left out), so no log line is
 * cut silently. */
static void mark_cut(char *msg, size_t size, int wanted)
{
    if (wanted < 0 || (size_t)wanted < size)
        return;
    char mark[48];
    /* The widest the mark can be (N <= wanted), then where it goes, then the exact N. */
    int n = snprintf(mark, sizeof(mark), "... [%d more bytes]", wanted);
    if (n < 0 || (size_t)n >= size)
        return;
    size_t at = size - 1 - (size_t)n;
    while (at > 0 && ((unsigned char)msg[at] & 0xC0) == 0x80)
        at--;
    snprintf(msg + at, size - at, "... [%zu more bytes]", (size_t)wanted - at);
}

enum cma_errc cma_err_vset(struct cma_err *err, enum cma_errc code, const char *fmt, va_list ap)
{
    if (!err || err->code != CMA_OK)
        return code;
    err->code = code;
    mark_cut(err->msg, sizeof(err->msg), vsnprintf(err->msg, sizeof(err->msg), fmt, ap));
    one_line(err->msg);
    return code;
}

enum cma_errc cma_err_set(struct cma_err *err, enum cma_errc code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    cma_err_vset(err, code, fmt, ap);
    va_end(ap);
    return code;
}

void cma_err_set_pos(struct cma_err *err, const char *file, unsigned line, unsigned column)
{
    if (!err || err->line != 0)
        return;
    snprintf(err->file, sizeof(err->file), "%s", file ? file : "");
    err->line = line;
    err->column = column;
}

enum cma_errc cma_err_set_at(struct cma_err *err, enum cma_errc code, const char *file,
                             unsigned line, unsigned column, const char *fmt, ...)
{
    if (!err || err->code != CMA_OK)
        return code;
    va_list ap;
    va_start(ap, fmt);
    cma_err_vset(err, code, fmt, ap);
    va_end(ap);
    cma_err_set_pos(err, file, line, column);
    return code;
}

void cma_err_prefix(struct cma_err *err, const char *fmt, ...)
{
    if (!err || err->code == CMA_OK)
        return;
    char prefix[CMA_ERR_MSG_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(prefix, sizeof(prefix), fmt, ap);
    va_end(ap);
    char joined[2 * CMA_ERR_MSG_MAX];
    snprintf(joined, sizeof(joined), "%s%s", prefix, err->msg);
    mark_cut(err->msg, sizeof(err->msg), snprintf(err->msg, sizeof(err->msg), "%s", joined));
    one_line(err->msg);
}

void cma_err_copy(struct cma_err *dst, const struct cma_err *src)
{
    if (!dst || !src || dst->code != CMA_OK)
        return;
    *dst = *src;
}

size_t cma_err_format_pos(const struct cma_err *err, char *out, size_t out_len)
{
    int n;
    if (err->line && err->column)
        n = snprintf(out, out_len, "%s:%u:%u: %s", err->file, err->line, err->column, err->msg);
    else if (err->line)
        n = snprintf(out, out_len, "%s:%u: %s", err->file, err->line, err->msg);
    else if (err->file[0])
        n = snprintf(out, out_len, "%s: %s", err->file, err->msg);
    else
        n = snprintf(out, out_len, "%s", err->msg);
    return n < 0 ? 0 : (size_t)n;
}

int cma_errc_http_status(enum cma_errc code)
{
    return row_for(code)->status;
}

const char *cma_errc_reason(enum cma_errc code)
{
    return row_for(code)->reason;
}

const char *cma_errc_name(enum cma_errc code)
{
    return row_for(code)->name;
}

const char *cma_errc_meaning(enum cma_errc code)
{
    return row_for(code)->meaning;
}
