/* quantity.h: Kubernetes resource.Quantity canonical text for milli-unit values, exactly as
 * apimachinery's NewMilliQuantity(v, format).String() prints them ("1500m", "1", "5k", "1M",
 * "-20500m"; BinarySI "1Ki", "512", "123500m"). Pure functions; thread-safe. */
#ifndef CMA_QUANTITY_H
#define CMA_QUANTITY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum cma_quantity_format { CMA_QUANTITY_DECIMAL_SI, CMA_QUANTITY_BINARY_SI };

#define CMA_QUANTITY_MAX_LEN 32

/* Converts a sample value to milli-units as prometheus-adapter does: int64(v*1000), truncated
 * toward zero. Returns false (and leaves *ret_milli untouched) for NaN, ±Inf and values whose
 * milli form does not fit in int64: such samples are never encoded. */
bool cma_quantity_milli_from_double(double v, int64_t *ret_milli);

/* Writes the canonical string; returns its length. out must hold CMA_QUANTITY_MAX_LEN bytes. */
size_t cma_quantity_format_milli(int64_t milli, enum cma_quantity_format format,
                                 char out[CMA_QUANTITY_MAX_LEN]);

#endif
