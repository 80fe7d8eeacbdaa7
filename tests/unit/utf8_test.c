/* utf8_test.c: decoding as Go's utf8.DecodeRune (valid forms of every length, and every kind of
 * bad input: overlong, surrogate, out of range, truncated, stray continuation, empty), encoding
 * as utf8.EncodeRune (invalid runes become U+FFFD), and rune counting and prefixes. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "cma/utf8.h"

static void test_cma_utf8_decode__valid_and_invalid(void **state)
{
    (void)state;
    struct {
        const char *in;
        size_t len;
        uint32_t rune;
        size_t width;
    } cases[] = {
        {"A", 1, 'A', 1},
        {"\xc3\xa9", 2, 0xE9, 2},
        {"\xe2\x82\xac", 3, 0x20AC, 3},
        {"\xf0\x9f\x98\x80", 4, 0x1F600, 4},
        {"\xf4\x8f\xbf\xbf", 4, 0x10FFFF, 4},
        {"\xef\xbf\xbd", 3, 0xFFFD, 3},     /* a real U+FFFD has width 3 */
        {"\xc0\x80", 2, 0xFFFD, 1},         /* overlong NUL */
        {"\xe0\x80\x80", 3, 0xFFFD, 1},     /* overlong */
        {"\xed\xa0\x80", 3, 0xFFFD, 1},     /* surrogate D800 */
        {"\xf4\x90\x80\x80", 4, 0xFFFD, 1}, /* above U+10FFFF */
        {"\xf5\x80\x80\x80", 4, 0xFFFD, 1}, /* bad lead byte */
        {"\xe2\x82", 2, 0xFFFD, 1},         /* truncated */
        {"\xe2\x82\xac", 2, 0xFFFD, 1},     /* truncated by len */
        {"\x80", 1, 0xFFFD, 1},             /* stray continuation */
        {"\xe2\x28\xa1", 3, 0xFFFD, 1},     /* bad second byte */
        {"\xf0\x9f\x98\x41", 4, 0xFFFD, 1}, /* bad last byte */
        {"", 0, 0xFFFD, 0},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        size_t w = 99;
        assert_int_equal(cma_utf8_decode(cases[i].in, cases[i].len, &w), cases[i].rune);
        assert_int_equal(w, cases[i].width);
    }
}

static void test_cma_utf8_encode__round_trip_and_invalid(void **state)
{
    (void)state;
    const int64_t runes[] = {0,      'z',    0x7F,   0x80,    0x7FF,   0x800,
                             0xD7FF, 0xE000, 0xFFFF, 0x10000, 0x10FFFF};
    const size_t lens[] = {1, 1, 1, 2, 2, 3, 3, 3, 3, 4, 4};
    for (size_t i = 0; i < sizeof(runes) / sizeof(runes[0]); i++) {
        char out[4];
        size_t n = cma_utf8_encode(runes[i], out);
        assert_int_equal(n, lens[i]);
        size_t w;
        assert_int_equal(cma_utf8_decode(out, n, &w), (uint32_t)runes[i]);
        assert_int_equal(w, n);
        assert_true(cma_utf8_valid(runes[i]));
    }
    const int64_t bad[] = {-1, 0xD800, 0xDFFF, 0x110000, (int64_t)1 << 40};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        char out[4];
        assert_false(cma_utf8_valid(bad[i]));
        assert_int_equal(cma_utf8_encode(bad[i], out), 3);
        assert_memory_equal(out, "\xef\xbf\xbd", 3);
    }
}

static void test_cma_utf8_count__and_prefix(void **state)
{
    (void)state;
    const char *s = "a\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80z"; /* a é € 😀 z */
    size_t n = strlen(s);
    assert_int_equal(cma_utf8_count(s, n), 5);
    assert_int_equal(cma_utf8_count("", 0), 0);
    assert_int_equal(cma_utf8_count("\xff\xfe", 2), 2); /* each bad byte is one rune */
    assert_int_equal(cma_utf8_count("\xe2\x82", 2), 2);
    assert_int_equal(cma_utf8_prefix_len(s, n, 0), 0);
    assert_int_equal(cma_utf8_prefix_len(s, n, 1), 1);
    assert_int_equal(cma_utf8_prefix_len(s, n, 2), 3);
    assert_int_equal(cma_utf8_prefix_len(s, n, 3), 6);
    assert_int_equal(cma_utf8_prefix_len(s, n, 4), 10);
    assert_int_equal(cma_utf8_prefix_len(s, n, 100), n);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cma_utf8_decode__valid_and_invalid),
        cmocka_unit_test(test_cma_utf8_encode__round_trip_and_invalid),
        cmocka_unit_test(test_cma_utf8_count__and_prefix),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
