/* promql_regex.c: the RE2 syntax check of label-matcher regular expressions.
 *
 * Prometheus compiles =~ and !~ values with Go's regexp (RE2 syntax, Perl flags) and refuses the
 * query when that fails. The parser compiles them with PCRE2 (which also answers "does it match
 * the empty string?"); PCRE2 accepts more than RE2, so this module refuses, before PCRE2 sees the
 * pattern, what Go's regexp/syntax refuses and PCRE2 would take: escapes outside Go's set (\e, \h,
 * \K, \R, \X, \G, \Z, \c, \o, \N, a backreference \1, \x without two hex digits, an escaped
 * letter or non-ASCII rune), look-around and every other (?...) group but flags and (?P<name>,
 * possessive or doubled quantifiers (a++, a**, a{2}*), and repeat counts over 1000.
 * Not checked: Unicode class names (\p{...}) and group-name rules, where both engines mostly
 * agree; a difference there lets through a regex the backend then refuses, which can never widen
 * a selector (the enforced matcher is beside it). */
#include <string.h>

#include "promql_internal.h"

static bool is_hex(char c)
{
    return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
}

static bool is_octal(char c)
{
    return c >= '0' && c <= '7';
}

/* \x: two hex digits or {hex...}; *i is at the 'x' */
static const char *hex_escape(const char *re, size_t len, size_t *i)
{
    size_t p = *i + 1;
    if (p < len && re[p] == '{') {
        size_t start = ++p;
        while (p < len && is_hex(re[p]))
            p++;
        if (p == start || p >= len || re[p] != '}')
            return "invalid escape sequence";
        *i = p + 1;
        return NULL;
    }
    if (p + 1 < len && is_hex(re[p]) && is_hex(re[p + 1])) {
        *i = p + 2;
        return NULL;
    }
    return "invalid escape sequence";
}

static bool is_alnum_ascii(char c)
{
    return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
}

/* \0, \0N, \0NN or \NN (not \N alone: a backreference); *i is at the backslash */
static bool octal_escape(const char *re, size_t len, size_t *i)
{
    char c = re[*i + 1];
    if (!(c == '0' || (c >= '1' && c <= '7' && *i + 2 < len && is_octal(re[*i + 2]))))
        return false;
    size_t p = *i + 2, n = 1;
    while (n < 3 && p < len && is_octal(re[p]))
        p++, n++;
    *i = p;
    return true;
}

/* one escape; *i is at the backslash and moves past the escape */
static const char *check_escape(const char *re, size_t len, size_t *i, bool in_class)
{
    if (*i + 1 >= len)
        return "trailing backslash at end of expression";
    char c = re[*i + 1];
    bool ascii = (unsigned char)c < 0x80;
    if (ascii && !is_alnum_ascii(c)) {
        *i += 2; /* escaped punctuation is itself */
        return NULL;
    }
    if (c == 'x') {
        (*i)++;
        return hex_escape(re, len, i);
    }
    if (octal_escape(re, len, i))
        return NULL;
    const char *letters = in_class ? "afnrtvdDsSwWpP" : "afnrtvdDsSwWpPAzbB";
    if (ascii && strchr(letters, c)) {
        *i += 2;
        return NULL;
    }
    return "invalid escape sequence";
}

/* a character class; *i is at '[' and moves past the closing ']' */
static const char *check_class(const char *re, size_t len, size_t *i)
{
    size_t p = *i + 1;
    if (p < len && re[p] == '^')
        p++;
    if (p < len && re[p] == ']')
        p++; /* a leading ']' is literal */
    while (p < len && re[p] != ']') {
        if (re[p] == '\\') {
            const char *msg = check_escape(re, len, &p, true);
            if (msg)
                return msg;
        } else if (re[p] == '[' && p + 1 < len && re[p + 1] == ':') {
            const char *end = strstr(re + p + 2, ":]"); /* [:alpha:] */
            p = end && (size_t)(end - re) < len ? (size_t)(end - re) + 2 : p + 1;
        } else {
            p++;
        }
    }
    if (p >= len)
        return "missing closing ]";
    *i = p + 1;
    return NULL;
}

/* "(?" groups: flags (?imsU-imsU) or (?flags:...), and (?P<name>...); *i is at '(' */
static const char *check_group(const char *re, size_t len, size_t *i)
{
    size_t p = *i + 2;
    if (p + 1 < len && re[p] == 'P' && re[p + 1] == '<') {
        *i = p + 2;
        return NULL;
    }
    while (p < len && strchr("imsU-", re[p]) && re[p] != '\0')
        p++;
    if (p < len && (re[p] == ':' || re[p] == ')')) { /* "(?)" too, as Go */
        *i = p + 1;
        return NULL;
    }
    return "invalid or unsupported Perl syntax";
}

/* decimal digits at re[*p], capped so they cannot overflow; -1 when there are none */
static long number_at(const char *re, size_t len, size_t *p)
{
    size_t start = *p;
    long v = 0;
    while (*p < len && re[*p] >= '0' && re[*p] <= '9') {
        if (v <= 100000)
            v = v * 10 + (re[*p] - '0');
        (*p)++;
    }
    return *p == start ? -1 : v;
}

/* {n}, {n,}, {n,m}: the length of a repeat at re[i] ('{'), 0 when it is a literal '{' */
static size_t repeat_len(const char *re, size_t len, size_t i, const char **ret_msg)
{
    size_t p = i + 1;
    long n = number_at(re, len, &p), m = n;
    if (n < 0)
        return 0;
    if (p < len && re[p] == ',') {
        p++;
        m = number_at(re, len, &p);
    }
    if (p >= len || re[p] != '}')
        return 0;
    if (n > 1000 || m > 1000)
        *ret_msg = "invalid repeat count";
    return p + 1 - i;
}

/* \Q...\E: literal text up to \E (or the end); *i is at the backslash */
static void skip_quoted(const char *re, size_t len, size_t *i)
{
    size_t p = *i + 2;
    while (p + 1 < len && !(re[p] == '\\' && re[p + 1] == 'E'))
        p++;
    *i = p + 1 < len ? p + 2 : len;
}

/* a quantifier at re[*i], or false; a second one right after the first (but a lazy '?') is
 * Go's "invalid nested repetition operator" */
static bool quantifier(const char *re, size_t len, size_t *i, int *last, const char **ret_msg)
{
    char c = re[*i];
    size_t n = c == '{' ? repeat_len(re, len, *i, ret_msg) : strchr("*+?", c) && c ? 1 : 0;
    if (n == 0)
        return false;
    if (c == '?' && *last == 1) {
        *last = 2; /* lazy */
    } else if (*last != 0) {
        *ret_msg = "invalid nested repetition operator";
    } else {
        *last = 1;
    }
    *i += n;
    return true;
}

const char *cma_pq_regex_check(const char *re, size_t len)
{
    size_t i = 0;
    int last = 0; /* 0: an atom, 1: a quantifier, 2: a lazy quantifier */
    const char *msg = NULL;
    while (i < len && !msg) {
        if (quantifier(re, len, &i, &last, &msg))
            continue;
        last = 0;
        if (re[i] == '\\' && i + 1 < len && re[i + 1] == 'Q')
            skip_quoted(re, len, &i);
        else if (re[i] == '\\')
            msg = check_escape(re, len, &i, false);
        else if (re[i] == '[')
            msg = check_class(re, len, &i);
        else if (re[i] == '(' && i + 1 < len && re[i + 1] == '?')
            msg = check_group(re, len, &i);
        else
            i++;
    }
    return msg;
}
