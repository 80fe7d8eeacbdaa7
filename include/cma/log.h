/* log.h: levelled logging to stderr, one line per event: "2026-11-21T22:23:31.123Z I message".
 *
 * Verbosity follows klog's --v: errors, warnings and info at v=0 are always printed;
 * cma_log_v(N, ...) prints only when --v >= N (6 = every backend URL and status, 8 = bodies).
 * The verbosity is set once by main before threads start and read atomically afterwards.
 * Thread-safe: each line is written with one write(2). Called only from logging layers (main,
 * server, api, discovery) and, at v>=6 for request tracing, from clients. */
#ifndef CMA_LOG_H
#define CMA_LOG_H

#include <stdbool.h>

enum cma_log_level { CMA_LOG_ERROR, CMA_LOG_WARN, CMA_LOG_INFO, CMA_LOG__COUNT };

void cma_log_set_verbosity(int v);
int cma_log_verbosity(void);
bool cma_log_enabled(int v);

void cma_log(enum cma_log_level level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Info line printed only when the verbosity is >= v. */
void cma_log_v(int v, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#define cma_log_error(...) cma_log(CMA_LOG_ERROR, __VA_ARGS__)
#define cma_log_warn(...) cma_log(CMA_LOG_WARN, __VA_ARGS__)
#define cma_log_info(...) cma_log(CMA_LOG_INFO, __VA_ARGS__)

#endif
