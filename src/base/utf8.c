/* utf8.c: UTF-8 with Go's rules (utf8.h). The decoder checks the second byte against the
 * range its lead byte allows (Go's acceptRanges), which rejects overlong forms and surrogates
 * without decoding them first. */
#include "cma/utf8.h"

/* Go's first-byte table, reduced to what the decoder needs: sequence length and the allowed
 * range of the second byte. */
static bool lead_info(unsigned b0, size_t *need, uint32_t *cp, unsigned *lo, unsigned *hi)
{
    *lo = 0x80;
    *hi = 0xBF;
    if (b0 >= 0xC2 && b0 <= 0xDF) {
        *need = 2;
        *cp = b0 & 0x1F;
    } else if (b0 >= 0xE0 && b0 <= 0xEF) {
        *need = 3;
        *cp = b0 & 0x0F;
        if (b0 == 0xE0)
            *lo = 0xA0;
        else if (b0 == 0xED)
            *hi = 0x9F;
    } else if (b0 >= 0xF0 && b0 <= 0xF4) {
        *need = 4;
        *cp = b0 & 0x07;
        if (b0 == 0xF0)
            *lo = 0x90;
        else if (b0 == 0xF4)
            *hi = 0x8F;
    } else {
        return false;
    }
    return true;
}

uint32_t cma_utf8_decode(const char *s, size_t len, size_t *ret_width)
{
    const unsigned char *p = (const unsigned char *)s;
    *ret_width = len ? 1 : 0;
    if (len == 0)
        return CMA_UTF8_RUNE_ERROR;
    if (p[0] < 0x80)
        return p[0];
    size_t need;
    uint32_t cp;
    unsigned lo, hi;
    if (!lead_info(p[0], &need, &cp, &lo, &hi) || len < need || p[1] < lo || p[1] > hi)
        return CMA_UTF8_RUNE_ERROR;
    cp = (cp << 6) | (p[1] & 0x3Fu);
    for (size_t i = 2; i < need; i++) {
        if (p[i] < 0x80 || p[i] > 0xBF)
            return CMA_UTF8_RUNE_ERROR;
        cp = (cp << 6) | (p[i] & 0x3Fu);
    }
    *ret_width = need;
    return cp;
}

bool cma_utf8_valid(int64_t r)
{
    return (r >= 0 && r < 0xD800) || (r > 0xDFFF && r <= CMA_UTF8_MAX_RUNE);
}

size_t cma_utf8_encode(int64_t r, char out[4])
{
    uint32_t c = cma_utf8_valid(r) ? (uint32_t)r : CMA_UTF8_RUNE_ERROR;
    if (c < 0x80) {
        out[0] = (char)c;
        return 1;
    }
    if (c < 0x800) {
        out[0] = (char)(0xC0 | (c >> 6));
        out[1] = (char)(0x80 | (c & 0x3F));
        return 2;
    }
    if (c < 0x10000) {
        out[0] = (char)(0xE0 | (c >> 12));
        out[1] = (char)(0x80 | ((c >> 6) & 0x3F));
        out[2] = (char)(0x80 | (c & 0x3F));
        return 3;
    }
    out[0] = (char)(0xF0 | (c >> 18));
    out[1] = (char)(0x80 | ((c >> 12) & 0x3F));
    out[2] = (char)(0x80 | ((c >> 6) & 0x3F));
    out[3] = (char)(0x80 | (c & 0x3F));
    return 4;
}

size_t cma_utf8_count(const char *s, size_t len)
{
    size_t runes = 0;
    for (size_t i = 0; i < len; runes++) {
        size_t width = 1;
        if ((unsigned char)s[i] >= 0x80)
            cma_utf8_decode(s + i, len - i, &width);
        i += width;
    }
    return runes;
}

size_t cma_utf8_prefix_len(const char *s, size_t len, size_t max_runes)
{
    size_t i = 0;
    for (size_t runes = 0; i < len && runes < max_runes; runes++) {
        size_t width;
        cma_utf8_decode(s + i, len - i, &width);
        i += width;
    }
    return i;
}
