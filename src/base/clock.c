/* clock.c: monotonic and wall clocks in milliseconds, RFC 3339 formatting. */
#include "cma/clock.h"

#include <time.h>

static int64_t read_ms(clockid_t id)
{
    struct timespec ts;
    clock_gettime(id, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

int64_t cma_clock_mono_ms(void)
{
    return read_ms(CLOCK_MONOTONIC);
}

int64_t cma_clock_wall_ms(void)
{
    return read_ms(CLOCK_REALTIME);
}

char *cma_clock_format_rfc3339(int64_t wall_ms, char out[21])
{
    /* Floor division so that times before 1970 still truncate toward the past, like Go. */
    int64_t secs = wall_ms / 1000 - (wall_ms % 1000 < 0 ? 1 : 0);
    time_t t = (time_t)secs;
    struct tm tm;
    gmtime_r(&t, &tm);
    strftime(out, 21, "%Y-%m-%dT%H:%M:%SZ", &tm);
    return out;
}
