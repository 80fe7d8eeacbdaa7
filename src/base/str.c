/* str.c: checked string duplication, comparisons, Go durations, hex digits and percent-escapes
 * (the one decoder of "%XX" in the project), and URLs for display (without userinfo). */
#include "cma/str.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

char *cma_strdup(const char *s)
{
    return s ? strdup(s) : NULL;
}

char *cma_strndup(const char *s, size_t len)
{
    if (!s)
        return NULL;
    char *p = malloc(len + 1);
    if (!p)
        return NULL;
    memcpy(p, s, len);
    p[len] = '\0';
    return p;
}

bool cma_str_eq(const char *a, const char *b)
{
    if (!a || !b)
        return a == b;
    return strcmp(a, b) == 0;
}

bool cma_str_case_eq(const char *a, const char *b)
{
    if (!a || !b)
        return a == b;
    return strcasecmp(a, b) == 0;
}

bool cma_str_has_prefix(const char *s, const char *prefix)
{
    return strncmp(s, prefix, strlen(prefix)) == 0;
}

struct unit {
    const char *name;
    double ms;
};

static const struct unit duration_units[] = {
    {"ns", 1e-6}, {"us", 1e-3}, {"\xc2\xb5s", 1e-3}, {"ms", 1},
    {"s", 1e3},   {"m", 60e3},  {"h", 3600e3},
};

enum cma_errc cma_duration_parse(const char *s, int64_t *ret_ms, struct cma_err *reterr)
{
    const char *p = s;
    bool neg = false;
    if (!s || !*s)
        return cma_err_set(reterr, CMA_ERR_FLAG, "invalid duration \"\"");
    if (*p == '-' || *p == '+')
        neg = *p++ == '-';
    if (strcmp(p, "0") == 0) {
        *ret_ms = 0;
        return CMA_OK;
    }
    if (!*p)
        return cma_err_set(reterr, CMA_ERR_FLAG, "invalid duration \"%s\"", s);
    double total = 0;
    while (*p) {
        if (!isdigit((unsigned char)*p) && *p != '.')
            return cma_err_set(reterr, CMA_ERR_FLAG, "invalid duration \"%s\"", s);
        char *end;
        double v = strtod(p, &end);
        if (end == p)
            return cma_err_set(reterr, CMA_ERR_FLAG, "invalid duration \"%s\"", s);
        p = end;
        const struct unit *u = NULL;
        size_t ulen = 0;
        for (size_t i = 0; i < sizeof(duration_units) / sizeof(duration_units[0]); i++) {
            size_t l = strlen(duration_units[i].name);
            if (strncmp(p, duration_units[i].name, l) == 0 && l > ulen) {
                u = &duration_units[i];
                ulen = l;
            }
        }
        if (!u)
            return cma_err_set(reterr, CMA_ERR_FLAG, "missing unit in duration \"%s\"", s);
        p += ulen;
        total += v * u->ms;
    }
    if (total > 9.2e15)
        return cma_err_set(reterr, CMA_ERR_FLAG, "invalid duration \"%s\": too large", s);
    *ret_ms = (int64_t)(neg ? -total : total);
    return CMA_OK;
}

/* Writes the fraction of v/scale without trailing zeros, Go style. */
static int fmt_frac(char *out, size_t len, int64_t v, int64_t scale, const char *unit)
{
    int64_t whole = v / scale, frac = v % scale;
    if (!frac)
        return snprintf(out, len, "%lld%s", (long long)whole, unit);
    char digits[64];
    int width = 0;
    for (int64_t s = scale; s > 1; s /= 10)
        width++;
    snprintf(digits, sizeof(digits), "%0*lld", width & 31, (long long)frac);
    for (int i = (int)strlen(digits) - 1; i >= 0 && digits[i] == '0'; i--)
        digits[i] = '\0';
    return snprintf(out, len, "%lld.%s%s", (long long)whole, digits, unit);
}

char *cma_duration_format(int64_t ms, char *out, size_t out_len)
{
    char tmp[64];
    const char *sign = ms < 0 ? "-" : "";
    uint64_t u = ms < 0 ? (uint64_t)(-(ms + 1)) + 1 : (uint64_t)ms;
    if (u == 0) {
        snprintf(out, out_len, "0s");
        return out;
    }
    if (u < 1000) {
        snprintf(out, out_len, "%s%llums", sign, (unsigned long long)u);
        return out;
    }
    uint64_t h = u / 3600000, m = (u / 60000) % 60, rest_ms = u % 60000;
    fmt_frac(tmp, sizeof(tmp), (int64_t)rest_ms, 1000, "s");
    if (h)
        snprintf(out, out_len, "%s%lluh%llum%s", sign, (unsigned long long)h, (unsigned long long)m,
                 tmp);
    else if (m)
        snprintf(out, out_len, "%s%llum%s", sign, (unsigned long long)m, tmp);
    else
        snprintf(out, out_len, "%s%s", sign, tmp);
    return out;
}

size_t cma_u64_format(char out[CMA_U64_DIGITS], uint64_t v, unsigned width)
{
    char rev[CMA_U64_DIGITS];
    size_t n = 0;
    do {
        rev[n++] = (char)('0' + v % 10);
        v /= 10;
    } while (v);
    while (n < width && n < sizeof rev)
        rev[n++] = '0';
    for (size_t i = 0; i < n; i++)
        out[i] = rev[n - 1 - i];
    return n;
}

size_t cma_str_concat(char *out, size_t out_len, const char *const *parts, size_t n)
{
    size_t total = 0, at = 0;
    for (size_t i = 0; i < n; i++) {
        size_t len = strlen(parts[i]);
        total += len;
        if (out_len > 0 && at < out_len - 1) {
            size_t k = len < out_len - 1 - at ? len : out_len - 1 - at;
            memcpy(out + at, parts[i], k);
            at += k;
        }
    }
    if (out_len > 0)
        out[at] = '\0';
    return total;
}

int cma_hex_digit(int c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

int cma_percent_escape(const char *s, size_t len, size_t i)
{
    if (i + 2 >= len)
        return -1;
    int hi = cma_hex_digit(s[i + 1]), lo = cma_hex_digit(s[i + 2]);
    return hi < 0 || lo < 0 ? -1 : hi * 16 + lo;
}

enum cma_errc cma_percent_decode(const char *src, size_t len, bool plus_is_space, char **ret,
                                 struct cma_err *reterr)
{
    char *out = malloc(len + 1);
    if (!out)
        return cma_err_set(reterr, CMA_ERR_NOMEM, "out of memory");
    size_t o = 0;
    for (size_t i = 0; i < len; i++) {
        char c = src[i];
        if (c == '%') {
            int b = cma_percent_escape(src, len, i);
            if (b <= 0) {
                free(out);
                return cma_err_set(reterr, CMA_ERR_BAD_REQUEST,
                                   "malformed percent-escape in \"%.*s\"",
                                   (int)(len > 200 ? 200 : len), src);
            }
            out[o++] = (char)b;
            i += 2;
        } else if (c == '+' && plus_is_space) {
            out[o++] = ' ';
        } else {
            out[o++] = c;
        }
    }
    out[o] = '\0';
    *ret = out;
    return CMA_OK;
}

/* The userinfo of url's authority, as [*ret_start, *ret_end) with *ret_end just past its last
 * '@'; false when there is none. */
static bool url_userinfo(const char *url, size_t *ret_start, size_t *ret_end)
{
    const char *slashes = url ? strstr(url, "//") : NULL;
    if (!slashes)
        return false;
    const char *auth = slashes + 2;
    size_t len = strcspn(auth, "/?#");
    const char *at = NULL;
    for (size_t i = 0; i < len; i++)
        if (auth[i] == '@')
            at = auth + i;
    if (!at)
        return false;
    *ret_start = (size_t)(auth - url);
    *ret_end = (size_t)(at + 1 - url);
    return true;
}

bool cma_url_has_userinfo(const char *url)
{
    size_t start, end;
    return url_userinfo(url, &start, &end);
}

char *cma_url_display(const char *url)
{
    size_t start, end;
    if (!url_userinfo(url, &start, &end))
        return cma_strdup(url);
    size_t len = strlen(url);
    char *out = malloc(len - (end - start) + 1);
    if (!out)
        return NULL;
    memcpy(out, url, start);
    memcpy(out + start, url + end, len - end + 1);
    return out;
}
