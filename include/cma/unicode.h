/* unicode.h: the two Unicode character classes Go's standard library uses where the adapter
 * must answer as prometheus-adapter does: unicode.IsPrint (strconv.Quote's escaping, in messages
 * and PromQL string literals) and the letters, decimal digits and '_' of a regexp.Expand group
 * name. Answered from PCRE2's Unicode tables. Thread-safe (the class patterns are compiled once,
 * then only read). */
#ifndef CMA_UNICODE_H
#define CMA_UNICODE_H

#include <stdbool.h>
#include <stdint.h>

/* Go's strconv.IsPrint / unicode.IsPrint: letters, marks, numbers, punctuation, symbols and
 * U+0020. False for anything else, and when out of memory. */
bool cma_unicode_is_print(uint32_t rune);

/* 1 when the rune is a letter, a decimal digit or '_' (Go's regexp.Expand name characters), 0
 * when not, -1 when the class is unavailable (out of memory). */
int cma_unicode_is_word(uint32_t rune);

#endif
