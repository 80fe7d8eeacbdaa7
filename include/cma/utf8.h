/* utf8.h: UTF-8 decoding, encoding and counting with Go's rules (unicode/utf8): an invalid or
 * truncated sequence, an overlong form or a surrogate decodes as U+FFFD of width 1, so a loop
 * over a string always advances. Shared by the template engine and the regex translator.
 * Pure; thread-safe. */
#ifndef CMA_UTF8_H
#define CMA_UTF8_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define CMA_UTF8_RUNE_ERROR 0xFFFDu /* utf8.RuneError */
#define CMA_UTF8_MAX_RUNE 0x10FFFF  /* unicode.MaxRune */

/* utf8.DecodeRune: the rune at s and its width in bytes; (U+FFFD, 1) for bad input and
 * (U+FFFD, 0) for len 0. */
uint32_t cma_utf8_decode(const char *s, size_t len, size_t *ret_width);
/* utf8.ValidRune: in range and not a surrogate. Takes int64_t so callers need not range-check
 * wider values first. */
bool cma_utf8_valid(int64_t r);
/* utf8.EncodeRune: writes r (an invalid rune as U+FFFD) and returns its length, 1 to 4. */
size_t cma_utf8_encode(int64_t r, char out[4]);
/* utf8.RuneCount: runes in s[0..len), each bad byte counting as one. */
size_t cma_utf8_count(const char *s, size_t len);
/* Byte length of the first max_runes runes of s[0..len) (all of s when it has fewer). */
size_t cma_utf8_prefix_len(const char *s, size_t len, size_t max_runes);

#endif
