/* template_text.c: the template engine's text primitives: the output sink (a cma_buf, or a
 * fixed array for error messages), the two Unicode classes Go's lexer and quoting need
 * (approximated outside ASCII), Go's strconv quoting (Quote, QuoteToASCII, QuoteRune, %U) and
 * the escapers behind the html, js and urlquery builtins (funcs.go, net/url). */
#include <stdio.h>
#include <string.h>

#include "template_internal.h"

/* ------------------------------------------------------------------------------------------ */
/* Unicode classes. */

/* Approximates Go's unicode.IsPrint: letters, marks, numbers, punctuation, symbols and the
 * ASCII space. Outside ASCII, controls, other spaces, format characters, private use,
 * surrogates and non-characters are excluded; unassigned code points count as printable. */
static bool is_print_rune(int64_t r)
{
    if (r < 0x80)
        return r >= 0x20 && r < 0x7F;
    if (!cma_utf8_valid(r))
        return false;
    static const int32_t ranges[][2] = {
        {0x80, 0xA0},     {0xAD, 0xAD},       {0x600, 0x605},     {0x61C, 0x61C},
        {0x6DD, 0x6DD},   {0x70F, 0x70F},     {0x1680, 0x1680},   {0x180E, 0x180E},
        {0x2000, 0x200F}, {0x2028, 0x202F},   {0x205F, 0x206F},   {0x3000, 0x3000},
        {0xD800, 0xF8FF}, {0xFDD0, 0xFDEF},   {0xFEFF, 0xFEFF},   {0xFFF9, 0xFFFB},
        {0xFFFE, 0xFFFF}, {0x1FFFE, 0x1FFFF}, {0xE0000, 0xE0FFF}, {0xF0000, 0x10FFFF},
    };
    for (size_t i = 0; i < sizeof(ranges) / sizeof(ranges[0]); i++)
        if (r >= ranges[i][0] && r <= ranges[i][1])
            return false;
    return true;
}

/* Approximates Go's unicode.IsLetter || unicode.IsDigit || '_' for identifiers. */
bool cma_tpl_is_alnum_rune(int32_t r)
{
    if (r < 0x80)
        return r == '_' || (r >= 'a' && r <= 'z') || (r >= 'A' && r <= 'Z') ||
               (r >= '0' && r <= '9');
    if (r == CMA_UTF8_RUNE_ERROR || !is_print_rune(r))
        return false;
    if (r <= 0xBF)
        return r == 0xAA || r == 0xB5 || r == 0xBA;
    if (r == 0xD7 || r == 0xF7)
        return false;
    static const int32_t symbols[][2] = {
        {0x2010, 0x2BFF}, {0x3001, 0x303F}, {0xFE30, 0xFE4F}, {0xFF01, 0xFF0F},   {0xFF1A, 0xFF20},
        {0xFF3B, 0xFF40}, {0xFF5B, 0xFF65}, {0xFFE0, 0xFFEF}, {0x1F000, 0x1FAFF},
    };
    for (size_t i = 0; i < sizeof(symbols) / sizeof(symbols[0]); i++)
        if (r >= symbols[i][0] && r <= symbols[i][1])
            return false;
    return true;
}

/* ------------------------------------------------------------------------------------------ */
/* Output sink: a cma_buf, or a fixed array (for error messages, silently truncated). */

void cma_tpl_w_put(struct wbuf *w, const void *p, size_t n)
{
    if (w->rc != CMA_OK || n == 0)
        return;
    if (w->fixed) {
        size_t room = w->fixed_cap - 1 - w->fixed_len;
        if (n > room)
            n = room;
        memcpy(w->fixed + w->fixed_len, p, n);
        w->fixed_len += n;
        w->fixed[w->fixed_len] = '\0';
        return;
    }
    enum cma_errc rc = cma_buf_append(w->buf, p, n);
    if (rc != CMA_OK)
        w->rc = rc;
}

void cma_tpl_w_fill(struct wbuf *w, char c, size_t n)
{
    char tmp[256];
    memset(tmp, c, n < sizeof(tmp) ? n : sizeof(tmp));
    while (n > 0 && w->rc == CMA_OK) {
        size_t k = n < sizeof(tmp) ? n : sizeof(tmp);
        cma_tpl_w_put(w, tmp, k);
        n -= k;
        if (!w->buf && w->fixed_len + 1 >= w->fixed_cap)
            break;
    }
}

/* Inserts n copies of c at byte offset at (at <= length). */
void cma_tpl_w_insert_fill(struct wbuf *w, size_t at, char c, size_t n)
{
    cma_tpl_w_fill(w, c, n);
    if (w->rc != CMA_OK)
        return;
    size_t now = w_len(w);
    char *p = w_data(w);
    if (now - at <= n) {
        memset(p + at, c, now - at);
        return;
    }
    memmove(p + at + n, p + at, now - at - n);
    memset(p + at, c, n);
}

/* ------------------------------------------------------------------------------------------ */
/* Go's strconv quoting. */

static const char lower_hex[] = "0123456789abcdef";

static void w_escaped_rune(struct wbuf *w, int32_t r, char quote, bool ascii_only)
{
    if (r == quote || r == '\\') {
        w_putc(w, '\\');
        w_putc(w, (char)r);
        return;
    }
    if (ascii_only ? (r < 0x80 && is_print_rune(r)) : is_print_rune(r)) {
        w_rune(w, r);
        return;
    }
    char tmp[12];
    switch (r) {
    case '\a':
        w_puts(w, "\\a");
        return;
    case '\b':
        w_puts(w, "\\b");
        return;
    case '\f':
        w_puts(w, "\\f");
        return;
    case '\n':
        w_puts(w, "\\n");
        return;
    case '\r':
        w_puts(w, "\\r");
        return;
    case '\t':
        w_puts(w, "\\t");
        return;
    case '\v':
        w_puts(w, "\\v");
        return;
    default:
        break;
    }
    if (r < ' ' || r == 0x7F) {
        tmp[0] = '\\';
        tmp[1] = 'x';
        tmp[2] = lower_hex[(r >> 4) & 0xF];
        tmp[3] = lower_hex[r & 0xF];
        cma_tpl_w_put(w, tmp, 4);
        return;
    }
    if (!cma_utf8_valid(r))
        r = CMA_UTF8_RUNE_ERROR;
    if (r < 0x10000)
        snprintf(tmp, sizeof(tmp), "\\u%04x", (unsigned)r);
    else
        snprintf(tmp, sizeof(tmp), "\\U%08x", (unsigned)r);
    w_puts(w, tmp);
}

/* strconv.Quote (quote '"') and QuoteToASCII. */
void cma_tpl_w_quote(struct wbuf *w, const char *s, size_t n, bool ascii_only)
{
    w_putc(w, '"');
    for (size_t i = 0; i < n && w->rc == CMA_OK;) {
        size_t size;
        int32_t r = cma_utf8_decode(s + i, n - i, &size);
        if (size == 1 && r == CMA_UTF8_RUNE_ERROR) {
            unsigned char c = (unsigned char)s[i];
            char tmp[4] = {'\\', 'x', lower_hex[c >> 4], lower_hex[c & 0xF]};
            cma_tpl_w_put(w, tmp, 4);
        } else {
            w_escaped_rune(w, r, '"', ascii_only);
        }
        i += size;
    }
    w_putc(w, '"');
}

/* strconv.QuoteRune and QuoteRuneToASCII. */
void cma_tpl_w_quote_rune(struct wbuf *w, int64_t r, bool ascii_only)
{
    if (!cma_utf8_valid(r))
        r = CMA_UTF8_RUNE_ERROR;
    w_putc(w, '\'');
    w_escaped_rune(w, (int32_t)r, '\'', ascii_only);
    w_putc(w, '\'');
}

/* Go's %q of s into a fixed array, for error messages; max_runes > 0 truncates like %.Nq. */
const char *cma_tpl_quote_fixed(char *dst, size_t cap, const char *s, size_t n, size_t max_runes)
{
    struct wbuf w = wbuf_fixed(dst, cap);
    size_t len = max_runes ? cma_utf8_prefix_len(s, n, max_runes) : n;
    cma_tpl_w_quote(&w, s, len, false);
    return dst;
}

/* Go's %U and %#U: "U+0041 'A'", at least prec hex digits. */
void cma_tpl_w_unicode(struct wbuf *w, uint64_t u, size_t prec, bool sharp)
{
    char digits[16];
    size_t nd = 0;
    uint64_t x = u;
    do {
        digits[sizeof(digits) - 1 - nd++] = "0123456789ABCDEF"[x & 0xF];
        x >>= 4;
    } while (x);
    w_puts(w, "U+");
    if (prec > nd)
        cma_tpl_w_fill(w, '0', prec - nd);
    cma_tpl_w_put(w, digits + sizeof(digits) - nd, nd);
    if (sharp && u <= CMA_UTF8_MAX_RUNE && is_print_rune((int64_t)u)) {
        w_puts(w, " '");
        w_rune(w, (int64_t)u);
        w_putc(w, '\'');
    }
}

const char *cma_tpl_unicode_fixed(char *dst, size_t cap, int32_t r)
{
    struct wbuf w = wbuf_fixed(dst, cap);
    cma_tpl_w_unicode(&w, (uint64_t)r, 4, true);
    return dst;
}

/* ------------------------------------------------------------------------------------------ */
/* The escapers of html, js and urlquery (funcs.go, net/url). */

void cma_tpl_html_escape(struct wbuf *w, const char *s, size_t n)
{
    size_t last = 0;
    for (size_t i = 0; i < n; i++) {
        const char *rep;
        switch (s[i]) {
        case '\0':
            rep = "\xEF\xBF\xBD";
            break;
        case '"':
            rep = "&#34;";
            break;
        case '\'':
            rep = "&#39;";
            break;
        case '&':
            rep = "&amp;";
            break;
        case '<':
            rep = "&lt;";
            break;
        case '>':
            rep = "&gt;";
            break;
        default:
            continue;
        }
        cma_tpl_w_put(w, s + last, i - last);
        w_puts(w, rep);
        last = i + 1;
    }
    cma_tpl_w_put(w, s + last, n - last);
}

void cma_tpl_js_escape(struct wbuf *w, const char *s, size_t n)
{
    size_t last = 0;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        bool special = c == '\\' || c == '\'' || c == '"' || c == '<' || c == '>' || c == '&' ||
                       c == '=' || c < ' ' || c >= 0x80;
        if (!special)
            continue;
        cma_tpl_w_put(w, s + last, i - last);
        if (c < 0x80) {
            switch (c) {
            case '\\':
                w_puts(w, "\\\\");
                break;
            case '\'':
                w_puts(w, "\\'");
                break;
            case '"':
                w_puts(w, "\\\"");
                break;
            case '<':
                w_puts(w, "\\u003C");
                break;
            case '>':
                w_puts(w, "\\u003E");
                break;
            case '&':
                w_puts(w, "\\u0026");
                break;
            case '=':
                w_puts(w, "\\u003D");
                break;
            default: {
                char tmp[7] = {
                    '\\', 'u', '0', '0', "0123456789ABCDEF"[c >> 4], "0123456789ABCDEF"[c & 0xF],
                    0};
                w_puts(w, tmp);
            }
            }
        } else {
            size_t size;
            int32_t r = cma_utf8_decode(s + i, n - i, &size);
            if (is_print_rune(r)) {
                cma_tpl_w_put(w, s + i, size);
            } else {
                char tmp[16];
                snprintf(tmp, sizeof(tmp), "\\u%04X", (unsigned)r);
                w_puts(w, tmp);
            }
            i += size - 1;
        }
        last = i + 1;
    }
    cma_tpl_w_put(w, s + last, n - last);
}

void cma_tpl_url_query_escape(struct wbuf *w, const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
            c == '-' || c == '_' || c == '.' || c == '~') {
            w_putc(w, (char)c);
        } else if (c == ' ') {
            w_putc(w, '+');
        } else {
            char tmp[3] = {'%', "0123456789ABCDEF"[c >> 4], "0123456789ABCDEF"[c & 0xF]};
            cma_tpl_w_put(w, tmp, 3);
        }
    }
}
