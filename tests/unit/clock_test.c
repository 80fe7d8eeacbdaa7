/* clock_test.c: the project's clocks (src/base/clock.c): cma_clock_mono_ms and cma_clock_wall_ms
 * read CLOCK_MONOTONIC and CLOCK_REALTIME in milliseconds (bracketed by direct clock_gettime
 * reads, never by sleeping), and cma_clock_format_rfc3339 formats unix milliseconds as
 * metav1.Time does: UTC, seconds precision, milliseconds truncated toward the past (also before
 * 1970, like Go). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <time.h>

#include <cmocka.h>

#include "cma/clock.h"

static int64_t raw_ms(clockid_t id)
{
    struct timespec ts;
    assert_int_equal(clock_gettime(id, &ts), 0);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void test_cma_clock_mono_ms__reads_the_monotonic_clock(void **state)
{
    (void)state;
    int64_t before = raw_ms(CLOCK_MONOTONIC);
    int64_t a = cma_clock_mono_ms();
    int64_t b = cma_clock_mono_ms();
    int64_t after = raw_ms(CLOCK_MONOTONIC);
    assert_true(before <= a);
    assert_true(a <= b); /* never goes back */
    assert_true(b <= after);
}

static void test_cma_clock_wall_ms__reads_the_realtime_clock_in_ms(void **state)
{
    (void)state;
    int64_t before = raw_ms(CLOCK_REALTIME);
    int64_t w = cma_clock_wall_ms();
    int64_t after = raw_ms(CLOCK_REALTIME);
    assert_true(before <= w);
    assert_true(w <= after);
    /* milliseconds, not seconds or microseconds: within a second of time(NULL) * 1000 */
    int64_t secs = (int64_t)time(NULL);
    assert_true(w / 1000 >= secs - 1);
    assert_true(w / 1000 <= secs + 1);
}

static void test_cma_clock_format_rfc3339__utc_seconds(void **state)
{
    (void)state;
    char out[21];
    assert_ptr_equal(cma_clock_format_rfc3339(0, out), out);
    assert_string_equal(out, "1970-01-01T00:00:00Z");
    assert_string_equal(cma_clock_format_rfc3339(1785412800000, out), "2026-07-30T12:00:00Z");
    /* milliseconds are truncated, not rounded */
    assert_string_equal(cma_clock_format_rfc3339(1785412800999, out), "2026-07-30T12:00:00Z");
    assert_string_equal(cma_clock_format_rfc3339(1785412801000, out), "2026-07-30T12:00:01Z");
    assert_string_equal(cma_clock_format_rfc3339(999, out), "1970-01-01T00:00:00Z");
    /* the widest year that fits the 21 bytes */
    assert_string_equal(cma_clock_format_rfc3339(253402300799000, out), "9999-12-31T23:59:59Z");
    assert_int_equal(strlen(out), 20);
}

static void test_cma_clock_format_rfc3339__before_1970_floors(void **state)
{
    (void)state;
    char out[21];
    assert_string_equal(cma_clock_format_rfc3339(-1, out), "1969-12-31T23:59:59Z");
    assert_string_equal(cma_clock_format_rfc3339(-999, out), "1969-12-31T23:59:59Z");
    assert_string_equal(cma_clock_format_rfc3339(-1000, out), "1969-12-31T23:59:59Z");
    assert_string_equal(cma_clock_format_rfc3339(-1001, out), "1969-12-31T23:59:58Z");
    assert_string_equal(cma_clock_format_rfc3339(-86400000, out), "1969-12-31T00:00:00Z");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cma_clock_mono_ms__reads_the_monotonic_clock),
        cmocka_unit_test(test_cma_clock_wall_ms__reads_the_realtime_clock_in_ms),
        cmocka_unit_test(test_cma_clock_format_rfc3339__utc_seconds),
        cmocka_unit_test(test_cma_clock_format_rfc3339__before_1970_floors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
