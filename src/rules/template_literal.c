/* template_literal.c: Go's literal syntax for the template parser: integers (strconv.ParseUint
 * and ParseInt with base 0: 0x, 0o, 0b and legacy octal prefixes, underscores between digits),
 * floats (ParseFloat, decimal and hexadecimal, with Go's range errors) and character escapes
 * (strconv.UnquoteChar). Pure functions over bytes; the parser turns failures into positions. */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cma/str.h"
#include "template_internal.h"

/* ---- numbers (parse.go newNumber, strconv.ParseUint/ParseInt/ParseFloat with base 0) ---- */

/* strconv's underscoreOK: underscores only between digits (or after a base prefix). */
static bool underscore_ok(const char *s, size_t n)
{
    char saw = '^';
    size_t i = 0;
    if (n >= 1 && (s[0] == '-' || s[0] == '+')) {
        s++;
        n--;
    }
    bool hex = false;
    if (n >= 2 && s[0] == '0' &&
        (lower_ascii(s[1]) == 'b' || lower_ascii(s[1]) == 'o' || lower_ascii(s[1]) == 'x')) {
        i = 2;
        saw = '0';
        hex = lower_ascii(s[1]) == 'x';
    }
    for (; i < n; i++) {
        char c = s[i];
        if ((c >= '0' && c <= '9') || (hex && lower_ascii(c) >= 'a' && lower_ascii(c) <= 'f')) {
            saw = '0';
            continue;
        }
        if (c == '_') {
            if (saw != '0')
                return false;
            saw = '_';
            continue;
        }
        if (saw == '_')
            return false;
        saw = '!';
    }
    return saw != '_';
}

bool cma_tpl_parse_uint_go(const char *s0, size_t n0, uint64_t *ret)
{
    const char *s = s0;
    size_t n = n0;
    if (n == 0)
        return false;
    unsigned base = 10;
    if (s[0] == '0') {
        char b = n >= 3 ? lower_ascii(s[1]) : 0;
        base = b == 'b' ? 2 : b == 'o' ? 8 : b == 'x' ? 16 : 8;
        size_t skip = (b == 'b' || b == 'o' || b == 'x') ? 2 : 1;
        s += skip;
        n -= skip;
    }
    bool underscores = false;
    uint64_t v = 0;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        unsigned d;
        if (c == '_') {
            underscores = true;
            continue;
        }
        int x = cma_hex_digit(c); /* bases are 2, 8, 10 and 16 */
        if (x < 0)
            return false;
        d = (unsigned)x;
        if (d >= base || v > (UINT64_MAX - d) / base)
            return false;
        v = v * base + d;
    }
    if (underscores && !underscore_ok(s0, n0))
        return false;
    *ret = v;
    return true;
}

bool cma_tpl_parse_int_go(const char *s, size_t n, int64_t *ret)
{
    bool neg = false;
    if (n > 0 && (s[0] == '+' || s[0] == '-')) {
        neg = s[0] == '-';
        s++;
        n--;
    }
    uint64_t u;
    if (!cma_tpl_parse_uint_go(s, n, &u))
        return false;
    if (!neg && u > (uint64_t)INT64_MAX)
        return false;
    if (neg && u > (uint64_t)INT64_MAX + 1)
        return false;
    *ret = neg ? (int64_t)(0 - u) : (int64_t)u;
    return true;
}

bool cma_tpl_parse_float_go(const char *s, size_t n, double *ret)
{
    size_t i = 0;
    if (i < n && (s[i] == '+' || s[i] == '-'))
        i++;
    bool hex = false;
    if (i + 1 < n && s[i] == '0' && lower_ascii(s[i + 1]) == 'x') {
        hex = true;
        i += 2;
    }
    bool saw_dot = false, saw_digits = false, underscores = false;
    for (; i < n; i++) {
        char c = s[i];
        if (c == '_') {
            underscores = true;
        } else if (c == '.') {
            if (saw_dot)
                break;
            saw_dot = true;
        } else if ((c >= '0' && c <= '9') ||
                   (hex && lower_ascii(c) >= 'a' && lower_ascii(c) <= 'f')) {
            saw_digits = true;
        } else {
            break;
        }
    }
    if (!saw_digits)
        return false;
    if (i < n && lower_ascii(s[i]) == (hex ? 'p' : 'e')) {
        i++;
        if (i < n && (s[i] == '+' || s[i] == '-'))
            i++;
        if (i >= n || s[i] < '0' || s[i] > '9')
            return false;
        for (; i < n && ((s[i] >= '0' && s[i] <= '9') || s[i] == '_'); i++)
            if (s[i] == '_')
                underscores = true;
    } else if (hex) {
        return false;
    }
    if (i != n || (underscores && !underscore_ok(s, n)))
        return false;
    char small[128];
    char *buf = n < sizeof(small) ? small : malloc(n + 1);
    if (!buf)
        return false;
    size_t k = 0;
    for (size_t j = 0; j < n; j++)
        if (s[j] != '_')
            buf[k++] = s[j];
    buf[k] = '\0';
    char *end;
    double f = strtod(buf, &end);
    bool ok = *end == '\0' && !isinf(f);
    if (buf != small)
        free(buf);
    if (ok)
        *ret = f;
    return ok;
}

/* strconv.UnquoteChar: one (possibly escaped) character of a literal quoted with quote.
 * Returns false on a syntax error. *ret_raw is true for \x and octal escapes (a byte). */
bool cma_tpl_unquote_char(const char *s, size_t n, char quote, int32_t *ret, bool *ret_raw,
                          size_t *ret_used)
{
    *ret_raw = false;
    if (n == 0)
        return false;
    unsigned char c = (unsigned char)s[0];
    if (c == (unsigned char)quote)
        return false;
    if (c >= 0x80) {
        *ret = cma_utf8_decode(s, n, ret_used);
        return true;
    }
    if (c != '\\') {
        *ret = c;
        *ret_used = 1;
        return true;
    }
    if (n <= 1)
        return false;
    char e = s[1];
    size_t used = 2;
    int32_t v = 0;
    switch (e) {
    case 'a':
        v = '\a';
        break;
    case 'b':
        v = '\b';
        break;
    case 'f':
        v = '\f';
        break;
    case 'n':
        v = '\n';
        break;
    case 'r':
        v = '\r';
        break;
    case 't':
        v = '\t';
        break;
    case 'v':
        v = '\v';
        break;
    case '\\':
        v = '\\';
        break;
    case '\'':
    case '"':
        if (e != quote)
            return false;
        v = (unsigned char)e;
        break;
    case 'x':
    case 'u':
    case 'U': {
        size_t digits = e == 'x' ? 2 : e == 'u' ? 4 : 8;
        if (n < 2 + digits)
            return false;
        for (size_t j = 0; j < digits; j++) {
            char h = s[2 + j];
            int x = cma_hex_digit(h);
            if (x < 0)
                return false;
            v = (int32_t)(((uint32_t)v << 4) | (uint32_t)x);
        }
        used += digits;
        if (e == 'x')
            *ret_raw = true;
        else if (!cma_utf8_valid(v))
            return false;
        break;
    }
    case '0':
    case '1':
    case '2':
    case '3':
    case '4':
    case '5':
    case '6':
    case '7':
        v = e - '0';
        if (n < 4)
            return false;
        for (size_t j = 2; j < 4; j++) {
            if (s[j] < '0' || s[j] > '7')
                return false;
            v = (v << 3) | (s[j] - '0');
        }
        if (v > 255)
            return false;
        used = 4;
        *ret_raw = true;
        break;
    default:
        return false;
    }
    *ret = v;
    *ret_used = used;
    return true;
}
