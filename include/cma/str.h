/* str.h: small string helpers shared by every stage: checked duplication, comparisons,
 * Go duration parsing/printing, percent-decoding and URLs for display. Pure functions;
 * thread-safe. */
#ifndef CMA_STR_H
#define CMA_STR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cma/err.h"

/* strdup/strndup that return NULL only when out of memory (s may be NULL → NULL). */
char *cma_strdup(const char *s);
char *cma_strndup(const char *s, size_t len);

bool cma_str_eq(const char *a, const char *b);      /* NULL-safe */
bool cma_str_case_eq(const char *a, const char *b); /* ASCII case-insensitive, NULL-safe */
bool cma_str_has_prefix(const char *s, const char *prefix);

/* Parses a Go time.ParseDuration string ("10m", "1m30s", "500ms", "1h", "0") into ms.
 * Fractions are allowed as in Go ("1.5s"); the result is truncated to whole milliseconds. */
enum cma_errc cma_duration_parse(const char *s, int64_t *ret_ms, struct cma_err *reterr);
/* Formats ms as Go's Duration.String(): "5m0s", "1h0m0s", "1.5s", "500ms", "0s". out >= 32. */
char *cma_duration_format(int64_t ms, char *out, size_t out_len);

/* v in decimal, zero-padded to at least width digits (as "%0*llu"; width above
 * CMA_U64_DIGITS counts as CMA_U64_DIGITS), into out[0..n) without a NUL; returns n. The one
 * integer formatter of the request path (printf costs about a thousand instructions a call). */
#define CMA_U64_DIGITS 20
size_t cma_u64_format(char out[CMA_U64_DIGITS], uint64_t v, unsigned width);

/* Writes parts[0..n) one after the other into out[out_len], as snprintf(out, out_len,
 * "%s%s...") does: cut after out_len - 1 bytes, NUL-terminated when out_len > 0. Returns the
 * whole length (>= out_len: cut). The request path's string joiner, without printf's cost. */
size_t cma_str_concat(char *out, size_t out_len, const char *const *parts, size_t n);

/* The value of one hexadecimal digit (0-9, a-f, A-F), or -1 for any other byte. */
int cma_hex_digit(int c);
/* The byte a percent-escape "%XX" starting at s[i] stands for (0 to 255), or -1 when s[i + 1]
 * and s[i + 2] are not both hex digits inside s[0..len). The one escape decoder of the project:
 * cma_percent_decode(), request paths (router.c) and requestheader extras (authn.c) use it. */
int cma_percent_escape(const char *s, size_t len, size_t i);

/* Percent-decodes src[0..len) into a new string; if plus_is_space, '+' becomes ' ' (query
 * strings). Malformed escapes give CMA_ERR_BAD_REQUEST; a decoded NUL byte is rejected. */
enum cma_errc cma_percent_decode(const char *src, size_t len, bool plus_is_space, char **ret,
                                 struct cma_err *reterr);

/* A URL for display (logs, /metrics labels, explain, error messages): the URL without its
 * userinfo ("https://user:password@host:9090/p?q" → "https://host:9090/p?q"); scheme, host,
 * port, path and query string are kept (a query string is not a secret here: credentials go in
 * userinfo, files or headers). The authority ends at the first '/', '?' or '#' after "//" and
 * its userinfo at the last '@' in it, as URL parsers split it. A URL without "//" is kept as is.
 * Caller frees; NULL when out of memory or url is NULL. */
char *cma_url_display(const char *url);
/* True when url carries userinfo (user[:password]@) in its authority. */
bool cma_url_has_userinfo(const char *url);

#endif
