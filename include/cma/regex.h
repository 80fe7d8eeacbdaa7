/* regex.h: regular expressions with Go RE2 syntax and Go semantics (unanchored, leftmost-first),
 * on PCRE2 with match limits; plus Go's regexp.Expand for `name.as`.
 * Constructs RE2 lacks (backreferences, lookaround, possessive/atomic groups, \C, recursion)
 * are rejected at compile time so behaviour matches prometheus-adapter. A compiled regex is
 * immutable and may be used from many threads at once. */
#ifndef CMA_REGEX_H
#define CMA_REGEX_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cma/buf.h"
#include "cma/err.h"

struct cma_regex;

/* On failure reterr holds CMA_ERR_REGEX, the message quotes the pattern and says what is wrong,
 * and column is the 1-based byte offset of the problem inside the pattern (0 if unknown). */
enum cma_errc cma_regex_compile(const char *pattern, struct cma_regex **ret,
                                struct cma_err *reterr);
void cma_regex_free(struct cma_regex *re);

const char *cma_regex_pattern(const struct cma_regex *re);

/* Unanchored search, like Go's MatchString. A match-limit overrun counts as no match. */
bool cma_regex_match(const struct cma_regex *re, const char *s, size_t len);

/* Number of capturing groups (named or not; (?:...) does not count). */
size_t cma_regex_n_groups(const struct cma_regex *re);

/* Group number for a named group `(?P<name>...)`, or -1. */
int cma_regex_group_index(const struct cma_regex *re, const char *name, size_t name_len);

/* Leftmost-first match with submatches. ovector must hold 2*(n_groups+1) entries; unset groups
 * get (size_t)-1 in both slots. Returns false when there is no match. */
bool cma_regex_find(const struct cma_regex *re, const char *s, size_t len, size_t *ovector,
                    size_t n_ovector);

/* Go regexp.Expand: appends `tmpl` with $1, ${1}, $name, ${name}, $$ replaced from `src` and
 * `ovector` (as filled by cma_regex_find). `$name` takes the longest run of [A-Za-z0-9_], so
 * "$1_x" refers to group "1_x" and expands to "" (Go's behaviour). Unknown groups expand to "". */
enum cma_errc cma_regex_expand(const struct cma_regex *re, const char *tmpl, const char *src,
                               const size_t *ovector, struct cma_buf *out);

/* True when tmpl contains `$<digits><[A-Za-z_]>` outside braces: the `$1_per_second` trap that
 * expands to "" in Go. Used to warn at load. */
bool cma_regex_expand_has_trap(const char *tmpl);

#endif
