/* log.h: levelled logging to stderr, one line per event, in one of two formats:
 *   text (default): "2026-11-21T22:23:31.123Z I message key=\"value\" n=3"
 *   json (--logging-format=json, component-base's name): one JSON object per line,
 *        {"ts":1795299811.123,"level":"info","v":2,"msg":"message","key":"value","n":3}
 *        ts is Unix seconds with milliseconds, level one of error/warning/info, v the klog
 *        verbosity the line was logged at (0 for errors and warnings).
 *
 * Verbosity follows klog's --v: errors, warnings and info at v=0 are always printed;
 * cma_log_v(N, ...) prints only when --v >= N (2 = one line per request, 6 = every backend URL
 * and status, 8 = bodies). Verbosity and format are set once by main before threads start and
 * read atomically afterwards (the only process-wide settings). No line is cut: a message longer
 * than the stack buffer is written whole from the heap; only when that allocation fails is it
 * cut, with an explicit "[truncated: N of M bytes]" marker.
 * Thread-safe: each line is written with write(2) calls of its own (one, unless the kernel
 * takes less). Called only from logging layers (main, server, api, discovery) and, at v>=6
 * for request tracing, from clients. */
#ifndef CMA_LOG_H
#define CMA_LOG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum cma_log_level { CMA_LOG_ERROR, CMA_LOG_WARN, CMA_LOG_INFO, CMA_LOG__COUNT };
enum cma_log_format { CMA_LOG_FORMAT_TEXT, CMA_LOG_FORMAT_JSON };

void cma_log_set_verbosity(int v);
int cma_log_verbosity(void);
bool cma_log_enabled(int v);

void cma_log_set_format(enum cma_log_format f);
enum cma_log_format cma_log_get_format(void);
/* "text" or "json" → *ret; false (ret untouched) for anything else. */
bool cma_log_parse_format(const char *name, enum cma_log_format *ret);

void cma_log(enum cma_log_level level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Info line printed only when the verbosity is >= v. */
void cma_log_v(int v, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#define cma_log_error(...) cma_log(CMA_LOG_ERROR, __VA_ARGS__)
#define cma_log_warn(...) cma_log(CMA_LOG_WARN, __VA_ARGS__)
#define cma_log_info(...) cma_log(CMA_LOG_INFO, __VA_ARGS__)

/* ---- structured lines ---- */

/* CMA_LOG_FIELD_MS: a duration given in nanoseconds (i), written in milliseconds with three
 * decimals (rounded to the nearest microsecond, halves away from zero): "1.500". */
enum cma_log_field_type { CMA_LOG_FIELD_STR, CMA_LOG_FIELD_INT, CMA_LOG_FIELD_MS };

/* One key/value of a structured line. Keys are plain words ([A-Za-z0-9_-]); a NULL string
 * value is written as "". */
struct cma_log_field {
    const char *key;
    enum cma_log_field_type type;
    const char *s;
    int64_t i;
};

#define CMA_LOG_STR(k, v) ((struct cma_log_field){.key = (k), .type = CMA_LOG_FIELD_STR, .s = (v)})
#define CMA_LOG_INT(k, v) ((struct cma_log_field){.key = (k), .type = CMA_LOG_FIELD_INT, .i = (v)})
#define CMA_LOG_MS(k, ns) ((struct cma_log_field){.key = (k), .type = CMA_LOG_FIELD_MS, .i = (ns)})

/* An info line at verbosity v (printed when --v >= v) with a fixed message and fields: in text,
 * strings are double-quoted with Go's escapes (key="a\"b"), numbers bare; in JSON each field is
 * a member after "msg". */
void cma_log_fields(int v, const char *msg, const struct cma_log_field *fields, size_t n);

#endif
