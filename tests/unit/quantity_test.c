/* quantity_test.c: unit tests for quantity.c. Expected strings come from apimachinery's
 * quantity_test.go (TestQuantityString, TestMilliNewSet, TestNewSet,
 * TestBinarySIZeroExponentString) where they apply to milli-scale values, and from the brief. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "cma/quantity.h"

struct quantity_case {
    int64_t milli;
    enum cma_quantity_format format;
    const char *expect;
};

#define D CMA_QUANTITY_DECIMAL_SI
#define B CMA_QUANTITY_BINARY_SI

static const struct quantity_case cases[] = {
    /* brief */
    {1500, D, "1500m"},
    {1000, D, "1"},
    {1500000, D, "1500"},
    {5000000, D, "5k"},
    {1000000000, D, "1M"},
    {0, D, "0"},
    {-1500, D, "-1500m"},
    {20500, D, "20500m"},
    {16, D, "16m"},
    {1024000, B, "1Ki"},
    {1536000, B, "1536"},
    {123500, B, "123500m"},
    {512000, B, "512"},
    /* TestQuantityString (decQuantity(v, e, f) = v * 10^e, in milli) */
    {1073741824000LL, B, "1Gi"},
    {314572800000LL, B, "300Mi"},
    {6144000, B, "6Ki"},
    {1074815565824000LL, B, "1001Gi"},
    {1099511627776000LL, B, "1Ti"},
    {5000, B, "5"},
    {500, B, "500m"},
    {1000000000000LL, D, "1G"},
    {1, D, "1m"},
    {80, D, "80m"},
    {1080, D, "1080m"},
    {300000000000LL, D, "300M"},
    {1000000000000000LL, D, "1T"},
    {1234567000000000LL, D, "1234567M"},
    {1234567, B, "1234567m"},
    {3000000, D, "3k"},
    {1025000, B, "1025"},
    {0, B, "0"},
    /* negatives print as "-" + the positive form */
    {-1073741824000LL, B, "-1Gi"},
    {-6144000, B, "-6Ki"},
    {-5000, B, "-5"},
    {-500, B, "-500m"},
    {-1000000000000LL, D, "-1G"},
    {-1080, D, "-1080m"},
    {-3000000, D, "-3k"},
    {-1025000, B, "-1025"},
    {-1024000, B, "-1Ki"}, /* -1024 is not > -1024: binary */
    /* TestMilliNewSet */
    {1234000, D, "1234"},
    {1024, B, "1024m"},
    {1048576, B, "1048576m"},
    /* TestNewSet (whole values, so milli = v * 1000) */
    {1000000, D, "1k"},
    {1234000000, D, "1234k"},
    {1048576000, B, "1Mi"},
    /* TestBinarySIZeroExponentString */
    {2000000, B, "2000"},
    {-2000000, B, "-2000"},
    /* exponent adjustments (removeInt64Factors then back to a multiple of 3) */
    {10, D, "10m"},
    {100, D, "100m"},
    {10000, D, "10"},
    {100000, D, "100"},
    {120000000, D, "120k"},
    {1000000000000000000LL, D, "1P"},
    {1023999, B, "1023999m"},
    {1023000, B, "1023"},
    {1125899906842624000LL, B, "1Pi"},
    /* int64 edges */
    {INT64_MAX, D, "9223372036854775807m"},
    {INT64_MAX, B, "9223372036854775807m"},
    {INT64_MIN, D, "-9223372036854775808m"},
    {INT64_MIN, B, "-9223372036854775808m"},
    {INT64_MIN + 8, D, "-9223372036854775800m"},
    {9223372036854775000LL, D, "9223372036854775"},
    {9223372036854775000LL, B, "9223372036854775"},
};

static void test_cma_quantity_format_milli__apimachinery_table(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        char out[CMA_QUANTITY_MAX_LEN];
        memset(out, 'X', sizeof(out));
        size_t n = cma_quantity_format_milli(cases[i].milli, cases[i].format, out);
        if (strcmp(out, cases[i].expect) != 0)
            fail_msg("milli %lld (%s): got \"%s\", want \"%s\"", (long long)cases[i].milli,
                     cases[i].format == D ? "DecimalSI" : "BinarySI", out, cases[i].expect);
        assert_int_equal(n, strlen(cases[i].expect));
    }
}

/* Every DecimalSI string reads back as the value it was made from: the digits and the sign are
 * right for values of every length (the table above has few), checked by parsing, not by a
 * second formatter. */
static void test_cma_quantity_format_milli__decimal_reads_back(void **state)
{
    (void)state;
    uint64_t x = 0x9E3779B97F4A7C15u;
    for (int i = 0; i < 200000; i++) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        int64_t milli = (int64_t)(x >> (x % 64)); /* every magnitude */
        if (i & 1)
            milli = -milli;
        if (i % 5 == 0)
            milli -= milli % 1000; /* whole numbers: suffixes k, M, G... */
        char out[CMA_QUANTITY_MAX_LEN];
        size_t n = cma_quantity_format_milli(milli, CMA_QUANTITY_DECIMAL_SI, out);
        assert_int_equal(n, strlen(out));
        char *end = NULL;
        long long mantissa = strtoll(out, &end, 10);
        static const struct {
            const char *suffix;
            int exp; /* power of ten relative to milli */
        } sfx[] = {{"m", 0}, {"", 3}, {"k", 6}, {"M", 9}, {"G", 12}, {"T", 15}, {"P", 18}};
        int exp = -1;
        for (size_t k = 0; k < sizeof(sfx) / sizeof(sfx[0]); k++)
            if (strcmp(end, sfx[k].suffix) == 0)
                exp = sfx[k].exp;
        if (exp < 0)
            fail_msg("milli %lld: unexpected suffix in \"%s\"", (long long)milli, out);
        __int128 back = mantissa;
        for (int e = 0; e < exp; e++)
            back *= 10;
        if (back != (__int128)milli)
            fail_msg("milli %lld printed as \"%s\"", (long long)milli, out);
    }
}

static void test_cma_quantity_milli_from_double__truncates_toward_zero(void **state)
{
    (void)state;
    int64_t m = 42;
    assert_true(cma_quantity_milli_from_double(0.0004, &m));
    assert_int_equal(m, 0);
    assert_true(cma_quantity_milli_from_double(-0.0015, &m));
    assert_int_equal(m, -1);
    assert_true(cma_quantity_milli_from_double(23.456, &m));
    assert_int_equal(m, 23456);
    assert_true(cma_quantity_milli_from_double(1.5, &m));
    assert_int_equal(m, 1500);
    assert_true(cma_quantity_milli_from_double(-2.9999, &m));
    assert_int_equal(m, -2999);
    assert_true(cma_quantity_milli_from_double(9.2e15, &m));
    assert_int_equal(m, 9200000000000000000LL);
    assert_true(cma_quantity_milli_from_double(-0.0, &m));
    assert_int_equal(m, 0);
}

static void test_cma_quantity_milli_from_double__rejects_unrepresentable(void **state)
{
    (void)state;
    int64_t m = 42;
    assert_false(cma_quantity_milli_from_double(NAN, &m));
    assert_false(cma_quantity_milli_from_double(INFINITY, &m));
    assert_false(cma_quantity_milli_from_double(-INFINITY, &m));
    assert_false(cma_quantity_milli_from_double(9.3e15, &m));
    assert_false(cma_quantity_milli_from_double(-9.3e15, &m));
    assert_false(cma_quantity_milli_from_double(9223372036854775.807, &m)); /* 2^63 milli */
    assert_false(cma_quantity_milli_from_double(-9223372036854775.808, &m));
    assert_false(cma_quantity_milli_from_double(1e300, &m));
    assert_int_equal(m, 42); /* untouched on failure */
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cma_quantity_format_milli__apimachinery_table),
        cmocka_unit_test(test_cma_quantity_format_milli__decimal_reads_back),
        cmocka_unit_test(test_cma_quantity_milli_from_double__truncates_toward_zero),
        cmocka_unit_test(test_cma_quantity_milli_from_double__rejects_unrepresentable),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
