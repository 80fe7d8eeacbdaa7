/* unicode_test.c: Go's unicode.IsPrint and regexp.Expand name characters (base/unicode.c)
 * against runes whose class Go's tables give, and from several threads at once. */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h>

#include "cma/unicode.h"

static void test_cma_unicode_is_print__matches_go(void **state)
{
    (void)state;
    assert_true(cma_unicode_is_print(' '));
    assert_true(cma_unicode_is_print('~'));
    assert_false(cma_unicode_is_print(0x7F));
    assert_false(cma_unicode_is_print('\n'));
    assert_false(cma_unicode_is_print(0xA0)); /* no-break space */
    assert_false(cma_unicode_is_print(0xAD)); /* soft hyphen */
    assert_true(cma_unicode_is_print(0xE9));
    assert_true(cma_unicode_is_print(0x4E16));  /* CJK */
    assert_true(cma_unicode_is_print(0x1F600)); /* emoji */
    assert_true(cma_unicode_is_print(0xFFFD));
    assert_false(cma_unicode_is_print(0x2028)); /* line separator */
    assert_false(cma_unicode_is_print(0x200B)); /* zero width space (Cf) */
    assert_false(cma_unicode_is_print(0xE000)); /* private use */
    assert_false(cma_unicode_is_print(0x3000)); /* ideographic space */
    assert_false(cma_unicode_is_print(0xD800)); /* a surrogate is no rune */
    assert_false(cma_unicode_is_print(0x110000));
}

static void test_cma_unicode_is_word__letters_digits_underscore(void **state)
{
    (void)state;
    assert_int_equal(cma_unicode_is_word('a'), 1);
    assert_int_equal(cma_unicode_is_word('Z'), 1);
    assert_int_equal(cma_unicode_is_word('7'), 1);
    assert_int_equal(cma_unicode_is_word('_'), 1);
    assert_int_equal(cma_unicode_is_word(0xE9), 1);   /* é */
    assert_int_equal(cma_unicode_is_word(0x0663), 1); /* Arabic-Indic digit three (Nd) */
    assert_int_equal(cma_unicode_is_word('-'), 0);
    assert_int_equal(cma_unicode_is_word(' '), 0);
    assert_int_equal(cma_unicode_is_word(0x00BD), 0); /* ½ is No, not Nd */
    assert_int_equal(cma_unicode_is_word(0xDFFF), 0);
}

static void *classify_many(void *arg)
{
    int *ok = arg;
    for (int i = 0; i < 2000; i++)
        if (cma_unicode_is_print(0x4E16) && !cma_unicode_is_print(0x2028) &&
            cma_unicode_is_word(0x4E16) == 1)
            (*ok)++;
    return NULL;
}

static void test_cma_unicode__threads_agree(void **state)
{
    (void)state;
    pthread_t t[4];
    int ok[4] = {0};
    for (int i = 0; i < 4; i++)
        assert_int_equal(pthread_create(&t[i], NULL, classify_many, &ok[i]), 0);
    for (int i = 0; i < 4; i++) {
        assert_int_equal(pthread_join(t[i], NULL), 0);
        assert_int_equal(ok[i], 2000);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cma_unicode_is_print__matches_go),
        cmocka_unit_test(test_cma_unicode_is_word__letters_digits_underscore),
        cmocka_unit_test(test_cma_unicode__threads_agree),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
