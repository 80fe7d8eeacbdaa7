/* unicode.c: Unicode character classes answered from PCRE2's tables (unicode.h): one anchored,
 * UTF-mode pattern per class, compiled once (pthread_once) and only read afterwards, matched
 * against the rune's UTF-8 encoding. Latin-1 printable runes are answered without PCRE2. */
#include "cma/unicode.h"

#include <pthread.h>

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "cma/utf8.h"

enum rune_class { RUNE_CLASS_PRINT, RUNE_CLASS_WORD, RUNE_CLASS__COUNT };

struct classes {
    pthread_once_t once;
    pcre2_code *codes[RUNE_CLASS__COUNT];
};

/* Written once under `once`, read-only afterwards: immutable process-wide tables. */
static struct classes classes = {.once = PTHREAD_ONCE_INIT};

static void compile_classes(void)
{
    /* Go unicode.IsPrint: L, M, N, P, S and U+0020. Go Expand names: IsLetter, IsDigit, '_'. */
    static const char *const patterns[RUNE_CLASS__COUNT] = {
        "[\\p{L}\\p{M}\\p{N}\\p{P}\\p{S}\\x{20}]",
        "[\\p{L}\\p{Nd}_]",
    };
    for (int i = 0; i < RUNE_CLASS__COUNT; i++) {
        int ec;
        PCRE2_SIZE eo;
        classes.codes[i] = pcre2_compile((PCRE2_SPTR)patterns[i], PCRE2_ZERO_TERMINATED,
                                         PCRE2_UTF | PCRE2_ANCHORED, &ec, &eo, NULL);
    }
}

/* 1 when the rune is in the class, 0 when not, -1 when the class is unavailable (no memory). */
static int rune_in_class(enum rune_class which, uint32_t cp)
{
    if (cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF))
        return 0;
    if (pthread_once(&classes.once, compile_classes) != 0 || !classes.codes[which])
        return -1;
    char enc[4];
    size_t n = cma_utf8_encode(cp, enc);
    pcre2_match_data *md = pcre2_match_data_create(1, NULL);
    if (!md)
        return -1;
    int rc = pcre2_match(classes.codes[which], (PCRE2_SPTR)enc, n, 0, 0, md, NULL);
    pcre2_match_data_free(md);
    if (rc >= 0)
        return 1;
    return rc == PCRE2_ERROR_NOMATCH ? 0 : -1;
}

bool cma_unicode_is_print(uint32_t rune)
{
    if (rune <= 0xFF) {
        if (rune >= 0x20 && rune <= 0x7E)
            return true;
        return rune >= 0xA1 && rune != 0xAD;
    }
    return rune_in_class(RUNE_CLASS_PRINT, rune) == 1;
}

int cma_unicode_is_word(uint32_t rune)
{
    return rune_in_class(RUNE_CLASS_WORD, rune);
}
