/* log.c: one line per event on stderr with UTC time (ms) and a level letter.
 * The only state is the verbosity, an atomic int set once at start-up by main. */
#include "cma/log.h"

#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static atomic_int log_verbosity;

void cma_log_set_verbosity(int v)
{
    atomic_store(&log_verbosity, v);
}

int cma_log_verbosity(void)
{
    return atomic_load(&log_verbosity);
}

bool cma_log_enabled(int v)
{
    return atomic_load(&log_verbosity) >= v;
}

static void vlog(char letter, const char *fmt, va_list ap) __attribute__((format(printf, 2, 0)));

static void vlog(char letter, const char *fmt, va_list ap)
{
    char line[4096];
    struct timespec ts;
    struct tm tm;
    clock_gettime(CLOCK_REALTIME, &ts);
    gmtime_r(&ts.tv_sec, &tm);
    int n = snprintf(line, sizeof(line), "%04d-%02d-%02dT%02d:%02d:%02d.%03ldZ %c ",
                     tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec,
                     ts.tv_nsec / 1000000, letter);
    if (n < 0)
        return;
    int m = vsnprintf(line + n, sizeof(line) - (size_t)n - 1, fmt, ap);
    size_t len = (size_t)n + (m < 0 ? 0 : (size_t)m);
    if (len > sizeof(line) - 2)
        len = sizeof(line) - 2;
    for (size_t i = (size_t)n; i < len; i++)
        if (line[i] == '\n')
            line[i] = ' ';
    line[len++] = '\n';
    ssize_t w = write(STDERR_FILENO, line, len);
    (void)w;
}

void cma_log(enum cma_log_level level, const char *fmt, ...)
{
    static const char letters[CMA_LOG__COUNT] = {'E', 'W', 'I'};
    va_list ap;
    va_start(ap, fmt);
    vlog(letters[level < CMA_LOG__COUNT ? level : CMA_LOG_INFO], fmt, ap);
    va_end(ap);
}

void cma_log_v(int v, const char *fmt, ...)
{
    if (!cma_log_enabled(v))
        return;
    va_list ap;
    va_start(ap, fmt);
    vlog('I', fmt, ap);
    va_end(ap);
}
