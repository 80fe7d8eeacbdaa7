/* clock.h: the one time unit of the project, milliseconds in int64_t (STYLE 3.2).
 * Monotonic time for intervals and deadlines, wall time for timestamps. Thread-safe. */
#ifndef CMA_CLOCK_H
#define CMA_CLOCK_H

#include <stdint.h>

int64_t cma_clock_mono_ms(void);
int64_t cma_clock_wall_ms(void);

/* Formats unix milliseconds as RFC 3339 in UTC with seconds precision ("2026-07-30T12:00:00Z"),
 * as metav1.Time does. `out` needs 21 bytes. Returns out. */
char *cma_clock_format_rfc3339(int64_t wall_ms, char out[21]);

#endif
