/* quantity.c: Kubernetes resource.Quantity canonical text for milli-unit values, as
 * apimachinery's NewMilliQuantity(v, format).String() prints them, and the float → milli
 * conversion prometheus-adapter applies to samples.
 *
 * DESIGN
 * A milli quantity is an int64Amount{value: v, scale: -3}. CanonicalizeBytes then:
 * - zero → "0";
 * - DecimalSI: strip factors of 10 from |v| into the exponent (removeInt64Factors), then
 *   multiply back by 10 or 100 until the exponent is a multiple of 3, and print the mantissa
 *   with the SI suffix of that exponent (m, "", k, M, G, T, P). Multiplying back never exceeds
 *   |v|, so the int64 fast path always holds and inf.Dec is never needed;
 * - BinarySI: values with -1024 < q < 1024, and values that are not whole numbers, print as
 *   DecimalSI; whole numbers lose factors of 1024 into Ki, Mi, Gi, Ti, Pi, Ei.
 * INT64_MIN behaves as in Go: its negation overflows, no factor is removed,
 * "-9223372036854775808m". */
#include "cma/quantity.h"

#include <math.h>
#include <string.h>

#include "cma/str.h"

bool cma_quantity_milli_from_double(double v, int64_t *ret_milli)
{
    if (isnan(v) || isinf(v))
        return false;
    double milli = v * 1000.0;
    /* 9.223372036854775807e18 rounds to 2^63: anything at or past it does not fit */
    if (fabs(milli) >= 9.223372036854775807e18)
        return false;
    *ret_milli = (int64_t)milli; /* C conversion truncates toward zero, as Go's int64() */
    return true;
}

/* removeInt64Factors: value == result * base^times, working on the magnitude. */
static int64_t remove_factors(int64_t value, int64_t base, int *times)
{
    *times = 0;
    bool negative = value < 0;
    /* -INT64_MIN overflows in Go too and stays negative, so its loop never runs */
    uint64_t mag = negative ? (uint64_t)0 - (uint64_t)value : (uint64_t)value;
    if (negative && mag > (uint64_t)INT64_MAX)
        return value;
    int64_t result = (int64_t)mag;
    while (result >= base && result % base == 0) {
        (*times)++;
        result /= base;
    }
    return negative ? -result : result;
}

/* The mantissa in decimal, then the suffix (at most 2 bytes), NUL-terminated: at most
 * 1 + 19 + 2 + 1 bytes, well inside CMA_QUANTITY_MAX_LEN. Written by hand: snprintf took about
 * 1,000 instructions per value, and a MetricValueList has one per item. */
static size_t write_number(char out[CMA_QUANTITY_MAX_LEN], int64_t mantissa, const char *suffix)
{
    uint64_t mag = mantissa < 0 ? (uint64_t)0 - (uint64_t)mantissa : (uint64_t)mantissa;
    size_t n = 0;
    if (mantissa < 0)
        out[n++] = '-';
    n += cma_u64_format(out + n, mag, 1);
    size_t sl = strlen(suffix);
    memcpy(out + n, suffix, sl + 1);
    return n + sl;
}

static size_t format_decimal(int64_t milli, char out[CMA_QUANTITY_MAX_LEN])
{
    int times;
    int64_t amount = remove_factors(milli, 10, &times);
    int exponent = -3 + times;
    /* Go's % keeps the dividend's sign: 1 and -2 need one more digit, 2 and -1 two more */
    switch (exponent % 3) {
    case 1:
    case -2:
        amount *= 10;
        exponent -= 1;
        break;
    case 2:
    case -1:
        amount *= 100;
        exponent -= 2;
        break;
    default:
        break;
    }
    const char *suffix;
    switch (exponent) {
    case -3:
        suffix = "m";
        break;
    case 0:
        suffix = "";
        break;
    case 3:
        suffix = "k";
        break;
    case 6:
        suffix = "M";
        break;
    case 9:
        suffix = "G";
        break;
    case 12:
        suffix = "T";
        break;
    case 15:
        suffix = "P";
        break;
    default:
        suffix = "E";
        break; /* 18: unreachable from an int64 milli value */
    }
    return write_number(out, amount, suffix);
}

size_t cma_quantity_format_milli(int64_t milli, enum cma_quantity_format format,
                                 char out[CMA_QUANTITY_MAX_LEN])
{
    if (milli == 0) {
        memcpy(out, "0", 2);
        return 1;
    }
    if (format != CMA_QUANTITY_BINARY_SI)
        return format_decimal(milli, out);
    /* BinarySI: |q| < 1024 or a fraction → DecimalSI (CanonicalizeBytes) */
    if ((milli > -1024000 && milli < 1024000) || milli % 1000 != 0)
        return format_decimal(milli, out);
    int times;
    int64_t amount = remove_factors(milli / 1000, 1024, &times);
    static const char *const suffixes[] = {"", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei"};
    return write_number(out, amount, suffixes[times]);
}
