/* regex.c: Go RE2 regular expressions on PCRE2, plus Go's regexp.Expand.
 *
 * Owns the translation of a Go (RE2 syntax) pattern into an equivalent PCRE2 pattern, its
 * compilation with match limits and JIT, unanchored leftmost-first matching, and the `$1` /
 * `${name}` expansion used by `name.as`. Also the two Unicode predicates other modules need to
 * match Go's unicode package (IsPrint for strconv.Quote) on PCRE2's tables.
 *
 * DESIGN
 * - One pass over the Go pattern, following regexp/syntax/parse.go, validates it with Go's rules
 *   and writes a PCRE2 pattern whose meaning is the same. Everything PCRE2 would read
 *   differently is rewritten: escapes become \x{..} (Go \v is VT, PCRE2 \v is a class; Go octal
 *   \12 is not a backreference), \s becomes [\t\n\f\r ] (PCRE2's \s also has VT), a literal `{`
 *   that Go does not read as a repeat becomes \{ (Go rejects {01}, PCRE2 reads it as {1}),
 *   named groups become plain groups whose names we keep ourselves (Go accepts `(?P<1x>`, PCRE2
 *   does not), and a quantified assertion (`^*`, legal in Go) is wrapped in (?:...).
 * - Constructs RE2 lacks are rejected with their own message and the 1-based column; PCRE2
 *   compile errors are mapped back to the column in the Go pattern through a per-byte offset map.
 * - Go's nested repeat limit (the product of counted repeats along any path must stay <= 1000,
 *   repeatIsValid) is tracked with one number per open group, no tree is built.
 * - Options: UTF with MATCH_INVALID_UTF (bad bytes in a subject never match, no error), no UCP
 *   (Go's \w \d \b are ASCII), DOLLAR_ENDONLY (Go `$` is \z without (?m)), ALT_CIRCUMFLEX (Go's
 *   (?m)^ also matches after a final \n), newline LF (Go's `.` excludes only \n).
 * - Thread safety: a compiled regex is immutable; match data is created per call. Go's Unicode
 *   classes (the Expand name characters) come from base/unicode.c.
 * - Known difference: Go treats each invalid UTF-8 byte in a subject as U+FFFD, which `.` can
 *   match; here such bytes match nothing. Nesting deeper than PCRE2's 250 groups is refused. */
#include "cma/regex.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cma/str.h"
#include "cma/unicode.h"
#include "cma/utf8.h"

/* A match-limit overrun counts as no match (header contract). */
enum {
    REGEX_MATCH_LIMIT = 100000,
    REGEX_DEPTH_LIMIT = 5000,
    REGEX_HEAP_LIMIT_KIB = 65536,
    GO_MAX_REPEAT = 1000,
    MSG_PATTERN_MAX = 160,
};

struct cma_regex {
    char *pattern;
    pcre2_code *code;
    pcre2_match_context *mctx;
    size_t n_groups;
    char **names; /* names[i] for group i (1..n_groups); NULL when unnamed; names[0] unused */
};

/* ---- error messages --------------------------------------------------------------------- */

/* The pattern for a message: quoted characters escaped, long patterns cut with "...". */
static void quote_pattern(char *dst, size_t cap, const char *s)
{
    size_t o = 0;
    for (size_t i = 0; s[i] && o + 8 < cap; i++) {
        if (i >= MSG_PATTERN_MAX) {
            memcpy(dst + o, "...", 3);
            o += 3;
            break;
        }
        unsigned char c = (unsigned char)s[i];
        if (c == '"' || c == '\\') {
            dst[o++] = '\\';
            dst[o++] = (char)c;
        } else if (c < 0x20 || c == 0x7F) {
            o += (size_t)snprintf(dst + o, cap - o, "\\x%02x", c);
        } else {
            dst[o++] = (char)c;
        }
    }
    dst[o] = '\0';
}

static enum cma_errc regex_error(struct cma_err *reterr, const char *pattern, size_t offset,
                                 const char *fmt, ...) __attribute__((format(printf, 4, 5)));

static enum cma_errc regex_error(struct cma_err *reterr, const char *pattern, size_t offset,
                                 const char *fmt, ...)
{
    char quoted[MSG_PATTERN_MAX * 4 + 16];
    char reason[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(reason, sizeof(reason), fmt, ap);
    va_end(ap);
    quote_pattern(quoted, sizeof(quoted), pattern);
    return cma_err_set_at(reterr, CMA_ERR_REGEX, NULL, 0, (unsigned)(offset + 1),
                          "invalid regex \"%s\": %s", quoted, reason);
}

/* ---- translation: Go syntax -> PCRE2 syntax ---------------------------------------------- */

struct frame {
    size_t src_pos;   /* offset of '(' in the Go pattern */
    size_t out_start; /* offset of '(' in the output */
    unsigned max_p;   /* largest repeat product of the finished items (see DESIGN) */
    bool any_item;    /* the group holds an item (else it is an empty match, product 1) */
    bool alt_item;    /* the current alternative holds an item */
};

struct xlat {
    const char *pat;
    size_t len;
    size_t pos;
    struct cma_buf out;
    size_t *map; /* map[i]: offset in pat of the construct that produced output byte i */
    size_t map_cap;
    struct frame *frames; /* frames[0] is the whole pattern */
    size_t n_frames;
    size_t frames_cap;
    char **names; /* names[1..n_groups] */
    size_t names_cap;
    size_t n_groups;
    /* the last atom, which a following repetition operator applies to */
    bool have_atom;
    bool atom_is_assertion;
    size_t atom_out_start;
    unsigned atom_p;
    bool last_was_repeat;
    struct cma_err *err;
};

static enum cma_errc nomem(struct xlat *x)
{
    return cma_err_set(x->err, CMA_ERR_NOMEM, "out of memory compiling regex");
}

static enum cma_errc grow_map(struct xlat *x, size_t need)
{
    if (need <= x->map_cap)
        return CMA_OK;
    size_t cap = x->map_cap ? x->map_cap * 2 : 64;
    while (cap < need)
        cap *= 2;
    size_t *m = realloc(x->map, cap * sizeof(*m));
    if (!m)
        return nomem(x);
    x->map = m;
    x->map_cap = cap;
    return CMA_OK;
}

static enum cma_errc emit(struct xlat *x, const char *s, size_t n, size_t src)
{
    if (grow_map(x, x->out.len + n) != CMA_OK)
        return CMA_ERR_NOMEM;
    size_t at = x->out.len;
    enum cma_errc rc = cma_buf_append(&x->out, s, n);
    if (rc != CMA_OK)
        return rc == CMA_ERR_NOMEM ? nomem(x)
                                   : cma_err_set(x->err, rc, "regex too large to compile");
    for (size_t i = 0; i < n; i++)
        x->map[at + i] = src;
    return CMA_OK;
}

static enum cma_errc emits(struct xlat *x, const char *s, size_t src)
{
    return emit(x, s, strlen(s), src);
}

static enum cma_errc emit_hex(struct xlat *x, uint32_t cp, size_t src)
{
    char tmp[16];
    int n = snprintf(tmp, sizeof(tmp), "\\x{%x}", (unsigned)cp);
    return emit(x, tmp, (size_t)n, src);
}

/* Inserts s before output offset `out_pos` (wraps a quantified assertion in (?:...)). */
static enum cma_errc insert_at(struct xlat *x, size_t out_pos, const char *s, size_t src)
{
    size_t n = strlen(s);
    size_t old_len = x->out.len;
    enum cma_errc rc = emit(x, s, n, src);
    if (rc != CMA_OK)
        return rc;
    memmove(x->out.ptr + out_pos + n, x->out.ptr + out_pos, old_len - out_pos);
    memmove(x->map + out_pos + n, x->map + out_pos, (old_len - out_pos) * sizeof(*x->map));
    memcpy(x->out.ptr + out_pos, s, n);
    for (size_t i = 0; i < n; i++)
        x->map[out_pos + i] = src;
    return CMA_OK;
}

static struct frame *top(struct xlat *x)
{
    return &x->frames[x->n_frames - 1];
}

/* Folds the pending atom into its group; called before the next item, '|' or ')'. */
static void commit_atom(struct xlat *x)
{
    if (!x->have_atom)
        return;
    struct frame *f = top(x);
    if (x->atom_p > f->max_p)
        f->max_p = x->atom_p;
    f->any_item = true;
    f->alt_item = true;
    x->have_atom = false;
}

static void end_alternative(struct xlat *x)
{
    commit_atom(x);
    struct frame *f = top(x);
    if (!f->alt_item && f->max_p < 1)
        f->max_p = 1; /* an empty alternative is an empty-match leaf */
    f->alt_item = false;
}

static void begin_atom(struct xlat *x, bool is_assertion)
{
    commit_atom(x);
    x->have_atom = true;
    x->atom_is_assertion = is_assertion;
    x->atom_out_start = x->out.len;
    x->atom_p = 1;
}

static enum cma_errc push_frame(struct xlat *x, size_t src_pos)
{
    commit_atom(x);
    if (x->n_frames == x->frames_cap) {
        size_t cap = x->frames_cap ? x->frames_cap * 2 : 8;
        struct frame *f = realloc(x->frames, cap * sizeof(*f));
        if (!f)
            return nomem(x);
        x->frames = f;
        x->frames_cap = cap;
    }
    x->frames[x->n_frames++] =
        (struct frame){.src_pos = src_pos, .out_start = x->out.len, .max_p = 0};
    return CMA_OK;
}

static bool is_alnum(unsigned c)
{
    return (c >= '0' && c <= '9') || (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z');
}

static unsigned char at(const struct xlat *x, size_t i)
{
    return i < x->len ? (unsigned char)x->pat[i] : 0;
}

/* Go parseEscape: the single-character escapes allowed at top level and in classes.
 * x->pos is at the backslash; on success it moves past the escape and *ret is the rune. */
static enum cma_errc parse_escape(struct xlat *x, uint32_t *ret)
{
    *ret = 0;
    size_t start = x->pos;
    size_t i = start + 1;
    if (i >= x->len)
        return regex_error(x->err, x->pat, start, "trailing backslash at end of expression");
    size_t w;
    uint32_t c = cma_utf8_decode(x->pat + i, x->len - i, &w);
    i += w;
    switch (c) {
    case '1':
    case '2':
    case '3':
    case '4':
    case '5':
    case '6':
    case '7':
        if (at(x, i) < '0' || at(x, i) > '7')
            return regex_error(x->err, x->pat, start,
                               "backreferences are not supported (RE2 syntax): `%.*s`",
                               (int)(i - start), x->pat + start);
        __attribute__((fallthrough)); /* octal */
    case '0': {
        uint32_t r = c - '0';
        for (int k = 1; k < 3 && at(x, i) >= '0' && at(x, i) <= '7'; k++)
            r = r * 8 + (at(x, i++) - '0');
        x->pos = i;
        *ret = r;
        return CMA_OK;
    }
    case 'x': {
        if (i >= x->len)
            break;
        if (at(x, i) == '{') {
            uint32_t r = 0;
            size_t nhex = 0;
            size_t j = i + 1;
            for (;; j++) {
                if (j >= x->len)
                    goto bad;
                if (at(x, j) == '}')
                    break;
                int v = cma_hex_digit(at(x, j));
                if (v < 0)
                    goto bad;
                r = r * 16 + (uint32_t)v;
                if (r > 0x10FFFF)
                    goto bad;
                nhex++;
            }
            if (nhex == 0)
                goto bad;
            x->pos = j + 1;
            *ret = r;
            return CMA_OK;
        }
        int hx = cma_hex_digit(at(x, i)), lx = i + 1 < x->len ? cma_hex_digit(at(x, i + 1)) : -1;
        if (hx < 0 || lx < 0) {
            i = i + 1 < x->len ? i + 2 : x->len;
            break;
        }
        x->pos = i + 2;
        *ret = (uint32_t)(hx * 16 + lx);
        return CMA_OK;
    }
    case 'a':
        *ret = 7;
        x->pos = i;
        return CMA_OK;
    case 'f':
        *ret = '\f';
        x->pos = i;
        return CMA_OK;
    case 'n':
        *ret = '\n';
        x->pos = i;
        return CMA_OK;
    case 'r':
        *ret = '\r';
        x->pos = i;
        return CMA_OK;
    case 't':
        *ret = '\t';
        x->pos = i;
        return CMA_OK;
    case 'v':
        *ret = '\v';
        x->pos = i;
        return CMA_OK;
    case 'k':
    case 'g':
        return regex_error(x->err, x->pat, start,
                           "backreferences are not supported (RE2 syntax): `\\%c`", (int)c);
    case 'G':
    case 'K':
        return regex_error(x->err, x->pat, start, "\\%c is not supported (RE2 syntax)", (int)c);
    default:
        if (c < 0x80 && !is_alnum(c)) {
            x->pos = i;
            *ret = c;
            return CMA_OK;
        }
        break;
    }
    return regex_error(x->err, x->pat, start, "invalid escape sequence: `%.*s`", (int)(i - start),
                       x->pat + start);
bad:
    return regex_error(x->err, x->pat, start, "invalid escape sequence: `%.*s`",
                       (int)((i < x->len ? i + 1 : x->len) - start), x->pat + start);
}

/* \p{Name}, \pN, \P..: copied verbatim once its extent is known (PCRE2 checks the name). */
static enum cma_errc copy_unicode_class(struct xlat *x)
{
    size_t start = x->pos;
    size_t i = start + 2;
    if (i >= x->len)
        return regex_error(x->err, x->pat, start, "invalid character class range: `%.*s`",
                           (int)(x->len - start), x->pat + start);
    if (at(x, i) == '{') {
        const char *close = memchr(x->pat + i, '}', x->len - i);
        if (!close)
            return regex_error(x->err, x->pat, start, "invalid character class range: `%s`",
                               x->pat + start);
        i = (size_t)(close - x->pat) + 1;
    } else {
        size_t w;
        cma_utf8_decode(x->pat + i, x->len - i, &w);
        i += w;
    }
    x->pos = i;
    return emit(x, x->pat + start, i - start, start);
}

static const char *const posix_class_names[] = {
    "alnum", "alpha", "ascii", "blank", "cntrl", "digit", "graph",
    "lower", "print", "punct", "space", "upper", "word",  "xdigit",
};

/* [:name:] inside a class (Go parseNamedClass). *ret_done tells whether one was consumed. */
static enum cma_errc copy_posix_class(struct xlat *x, bool *ret_done)
{
    *ret_done = false;
    size_t start = x->pos;
    if (at(x, start) != '[' || at(x, start + 1) != ':' || start + 2 >= x->len)
        return CMA_OK;
    const char *end = NULL;
    for (size_t i = start + 2; i + 1 < x->len; i++) {
        if (x->pat[i] == ':' && x->pat[i + 1] == ']') {
            end = x->pat + i;
            break;
        }
    }
    if (!end)
        return CMA_OK;
    const char *name = x->pat + start + 2;
    size_t name_len = (size_t)(end - name);
    size_t total = name_len + 4;
    if (name_len > 0 && name[0] == '^') {
        name++;
        name_len--;
    }
    for (size_t k = 0; k < sizeof(posix_class_names) / sizeof(posix_class_names[0]); k++) {
        if (strlen(posix_class_names[k]) == name_len &&
            memcmp(posix_class_names[k], name, name_len) == 0) {
            *ret_done = true;
            x->pos = start + total;
            return emit(x, x->pat + start, total, start);
        }
    }
    return regex_error(x->err, x->pat, start, "invalid character class range: `%.*s`", (int)total,
                       x->pat + start);
}

/* Go's \s is [\t\n\f\r ]; PCRE2's also holds \v, so both are spelled out. */
static const char space_items[] = "\\x{9}\\x{a}\\x{c}\\x{d}\\x{20}";
static const char not_space_items[] = "\\x{0}-\\x{8}\\x{b}\\x{e}-\\x{1f}\\x{21}-\\x{10ffff}";

/* \d \D \s \S \w \W. Returns true when one was copied (x->pos moves past it). */
static enum cma_errc perl_class(struct xlat *x, bool in_class, bool *ret_done)
{
    *ret_done = false;
    size_t start = x->pos;
    unsigned c = at(x, start + 1);
    switch (c) {
    case 'd':
    case 'D':
    case 'w':
    case 'W':
        *ret_done = true;
        x->pos = start + 2;
        return emit(x, x->pat + start, 2, start);
    case 's':
    case 'S':
        *ret_done = true;
        x->pos = start + 2;
        if (in_class)
            return emits(x, c == 's' ? space_items : not_space_items, start);
        enum cma_errc rc = emits(x, c == 's' ? "[" : "[^", start);
        if (rc == CMA_OK)
            rc = emits(x, space_items, start);
        return rc == CMA_OK ? emits(x, "]", start) : rc;
    default:
        return CMA_OK;
    }
}

/* One class character: an escape or a literal rune (Go parseClassChar). */
static enum cma_errc class_char(struct xlat *x, size_t class_start, uint32_t *ret)
{
    if (x->pos >= x->len)
        return regex_error(x->err, x->pat, class_start, "missing closing ]: `%s`",
                           x->pat + class_start);
    if (at(x, x->pos) == '\\')
        return parse_escape(x, ret);
    size_t w;
    *ret = cma_utf8_decode(x->pat + x->pos, x->len - x->pos, &w);
    x->pos += w;
    return CMA_OK;
}

/* Go parseClass: [...] with Go's rules, written out as PCRE2 items. */
static enum cma_errc translate_class(struct xlat *x)
{
    size_t start = x->pos;
    begin_atom(x, false);
    x->pos++;
    enum cma_errc rc = emits(x, "[", start);
    if (rc == CMA_OK && at(x, x->pos) == '^' && x->pos < x->len) {
        x->pos++;
        rc = emits(x, "^", start);
    }
    bool first = true;
    while (rc == CMA_OK) {
        if (x->pos >= x->len)
            return regex_error(x->err, x->pat, start, "missing closing ]: `%s`", x->pat + start);
        if (at(x, x->pos) == ']' && !first)
            break;
        first = false;
        bool named;
        rc = copy_posix_class(x, &named);
        if (rc != CMA_OK || named)
            continue;
        if (at(x, x->pos) == '\\' && (at(x, x->pos + 1) == 'p' || at(x, x->pos + 1) == 'P')) {
            rc = copy_unicode_class(x);
            continue;
        }
        if (at(x, x->pos) == '\\') {
            bool done;
            rc = perl_class(x, true, &done);
            if (rc != CMA_OK || done)
                continue;
        }
        size_t item = x->pos;
        uint32_t lo, hi;
        rc = class_char(x, start, &lo);
        if (rc != CMA_OK)
            return rc;
        hi = lo;
        if (x->pos + 1 < x->len && at(x, x->pos) == '-' && at(x, x->pos + 1) != ']') {
            x->pos++;
            rc = class_char(x, start, &hi);
            if (rc != CMA_OK)
                return rc;
            if (hi < lo)
                return regex_error(x->err, x->pat, item, "invalid character class range: `%.*s`",
                                   (int)(x->pos - item), x->pat + item);
        }
        rc = emit_hex(x, lo, item);
        if (rc == CMA_OK && hi != lo) {
            rc = emits(x, "-", item);
            if (rc == CMA_OK)
                rc = emit_hex(x, hi, item);
        }
    }
    if (rc != CMA_OK)
        return rc;
    x->pos++; /* ] */
    return emits(x, "]", x->pos - 1);
}

/* Go parseInt for repeat counts: no leading zeros; -1 when too big. */
static bool parse_count(const struct xlat *x, size_t *i, long *ret)
{
    size_t j = *i;
    if (at(x, j) < '0' || at(x, j) > '9' || j >= x->len)
        return false;
    if (at(x, j) == '0' && at(x, j + 1) >= '0' && at(x, j + 1) <= '9')
        return false;
    long n = 0;
    for (; j < x->len && at(x, j) >= '0' && at(x, j) <= '9'; j++) {
        if (n >= 100000000)
            n = -1;
        else if (n >= 0)
            n = n * 10 + (at(x, j) - '0');
    }
    *i = j;
    *ret = n;
    return true;
}

/* Go parseRepeat: {n}, {n,}, {n,m}. On success *end is the offset after '}'; max -1 = none. */
static bool parse_repeat(const struct xlat *x, size_t start, long *min, long *max, size_t *end)
{
    size_t i = start + 1;
    if (!parse_count(x, &i, min) || i >= x->len)
        return false;
    if (at(x, i) != ',') {
        *max = *min;
    } else {
        i++;
        if (i >= x->len)
            return false;
        if (at(x, i) == '}') {
            *max = -1;
        } else {
            if (!parse_count(x, &i, max))
                return false;
            if (*max < 0)
                *min = -1;
        }
    }
    if (i >= x->len || at(x, i) != '}')
        return false;
    *end = i + 1;
    return true;
}

static enum cma_errc apply_repeat(struct xlat *x, size_t op_start, size_t op_end, long min,
                                  long max, bool counted)
{
    size_t end = op_end;
    bool lazy = end < x->len && at(x, end) == '?';
    if (lazy)
        end++;
    if (x->last_was_repeat) {
        if (!lazy && at(x, op_start) == '+')
            return regex_error(x->err, x->pat, op_start,
                               "possessive quantifiers are not supported (RE2 syntax)");
        return regex_error(x->err, x->pat, op_start, "invalid nested repetition operator: `%.*s`",
                           (int)(end - op_start), x->pat + op_start);
    }
    if (!x->have_atom)
        return regex_error(x->err, x->pat, op_start,
                           "missing argument to repetition operator: `%.*s`", (int)(end - op_start),
                           x->pat + op_start);
    if (counted) {
        /* Go repeatIsValid: product of counted repeats on any path <= 1000; {0} prunes. */
        unsigned p = x->atom_p;
        if (max == 0) {
            p = 0;
        } else {
            unsigned m = (unsigned)(max > 0 ? max : min);
            if (m > 0)
                p = m * (p > 1 ? p : 1);
        }
        if ((min >= 2 || max >= 2) && p > GO_MAX_REPEAT)
            return regex_error(x->err, x->pat, op_start, "invalid repeat count: `%.*s`",
                               (int)(op_end - op_start), x->pat + op_start);
        x->atom_p = p;
    }
    enum cma_errc rc = CMA_OK;
    if (x->atom_is_assertion) {
        rc = insert_at(x, x->atom_out_start, "(?:", op_start);
        if (rc == CMA_OK)
            rc = emits(x, ")", op_start);
        x->atom_is_assertion = false;
    }
    if (rc == CMA_OK && counted) {
        char tmp[48];
        int n = max < 0      ? snprintf(tmp, sizeof(tmp), "{%ld,}", min)
                : max == min ? snprintf(tmp, sizeof(tmp), "{%ld}", min)
                             : snprintf(tmp, sizeof(tmp), "{%ld,%ld}", min, max);
        rc = emit(x, tmp, (size_t)n, op_start);
    } else if (rc == CMA_OK) {
        rc = emit(x, x->pat + op_start, 1, op_start);
    }
    if (rc == CMA_OK && lazy)
        rc = emits(x, "?", end - 1);
    x->pos = end;
    return rc;
}

static enum cma_errc add_name(struct xlat *x, size_t group, const char *name, size_t len)
{
    if (group >= x->names_cap) {
        size_t cap = x->names_cap ? x->names_cap * 2 : 8;
        while (cap <= group)
            cap *= 2;
        char **n = realloc(x->names, cap * sizeof(*n));
        if (!n)
            return nomem(x);
        memset(n + x->names_cap, 0, (cap - x->names_cap) * sizeof(*n));
        x->names = n;
        x->names_cap = cap;
    }
    if (!name)
        return CMA_OK;
    x->names[group] = cma_strndup(name, len);
    return x->names[group] ? CMA_OK : nomem(x);
}

static enum cma_errc open_group(struct xlat *x, size_t src, bool capture, const char *name,
                                size_t name_len, const char *out_text)
{
    enum cma_errc rc = push_frame(x, src);
    if (rc != CMA_OK)
        return rc;
    if (capture) {
        x->n_groups++;
        rc = add_name(x, x->n_groups, name, name_len);
        if (rc != CMA_OK)
            return rc;
    }
    return emits(x, out_text, src);
}

/* "(?" constructs: named groups, flags, non-capturing groups; Perl-only ones rejected. */
static enum cma_errc translate_perl_group(struct xlat *x)
{
    size_t start = x->pos;
    const char *t = x->pat + start;
    size_t rest = x->len - start;
    unsigned c2 = at(x, start + 2), c3 = at(x, start + 3);

    if (c2 == '=' || c2 == '!')
        return regex_error(x->err, x->pat, start, "lookahead is not supported (RE2 syntax)");
    if (c2 == '<' && (c3 == '=' || c3 == '!'))
        return regex_error(x->err, x->pat, start, "lookbehind is not supported (RE2 syntax)");
    if (c2 == '>')
        return regex_error(x->err, x->pat, start, "atomic groups are not supported (RE2 syntax)");
    if (c2 == '(')
        return regex_error(x->err, x->pat, start, "conditionals are not supported (RE2 syntax)");
    if (c2 == 'R' || c2 == '&' || (c2 >= '0' && c2 <= '9') ||
        ((c2 == '+' || c2 == '-') && c3 >= '0' && c3 <= '9') || (c2 == 'P' && c3 == '>'))
        return regex_error(x->err, x->pat, start, "recursion is not supported (RE2 syntax)");
    if (c2 == 'P' && c3 == '=')
        return regex_error(x->err, x->pat, start, "backreferences are not supported (RE2 syntax)");

    bool starts_p = rest > 4 && c2 == 'P' && c3 == '<';
    bool starts_name = rest > 3 && c2 == '<';
    if (starts_p || starts_name) {
        size_t name_start = start + (starts_p ? 4 : 3);
        const char *gt = memchr(t, '>', rest);
        if (!gt)
            return regex_error(x->err, x->pat, start, "invalid named capture: `%s`", t);
        size_t name_end = (size_t)(gt - x->pat);
        bool ok = name_end > name_start;
        for (size_t i = name_start; ok && i < name_end; i++)
            ok = is_alnum(at(x, i)) || at(x, i) == '_';
        if (!ok)
            return regex_error(x->err, x->pat, start, "invalid named capture: `%.*s`",
                               (int)(name_end + 1 - start), t);
        x->pos = name_end + 1;
        return open_group(x, start, true, x->pat + name_start, name_end - name_start, "(");
    }

    /* Flags: i m s U, one '-', then ')' (set flags) or ':' (group). */
    size_t i = start + 2;
    int sign = 1;
    bool saw_flag = false;
    while (i < x->len) {
        size_t w;
        uint32_t c = cma_utf8_decode(x->pat + i, x->len - i, &w);
        i += w;
        if (c == 'i' || c == 'm' || c == 's' || c == 'U') {
            saw_flag = true;
            continue;
        }
        if (c == '-') {
            if (sign < 0)
                break;
            sign = -1;
            saw_flag = false;
            continue;
        }
        if (c == ':' || c == ')') {
            if (sign < 0 && !saw_flag)
                break;
            x->pos = i;
            if (c == ':') {
                /* "(?flags:" opens a group with flags, copied as written */
                size_t len = i - start;
                enum cma_errc rc = push_frame(x, start);
                if (rc != CMA_OK)
                    return rc;
                return emit(x, t, len, start);
            }
            if (i - start == 3)
                return CMA_OK; /* "(?)" sets nothing */
            return emit(x, t, i - start, start);
        }
        break;
    }
    if (c2 == '#')
        return regex_error(x->err, x->pat, start, "comments are not supported (RE2 syntax)");
    return regex_error(x->err, x->pat, start, "invalid or unsupported Perl syntax: `%.*s`",
                       (int)(i - start), t);
}

static enum cma_errc close_group(struct xlat *x)
{
    size_t src = x->pos;
    end_alternative(x);
    if (x->n_frames <= 1)
        return regex_error(x->err, x->pat, src, "unexpected ): `%s`", x->pat);
    struct frame f = x->frames[--x->n_frames];
    x->pos++;
    enum cma_errc rc = emits(x, ")", src);
    if (rc != CMA_OK)
        return rc;
    x->have_atom = true;
    x->atom_is_assertion = false;
    x->atom_out_start = f.out_start;
    x->atom_p = f.any_item ? f.max_p : 1;
    return CMA_OK;
}

/* Top-level escapes (Go parse(), case '\\'). */
static enum cma_errc translate_escape(struct xlat *x)
{
    size_t start = x->pos;
    unsigned c = at(x, start + 1);
    if (start + 1 < x->len) {
        switch (c) {
        case 'A':
        case 'b':
        case 'B':
        case 'z':
            begin_atom(x, true);
            x->pos += 2;
            return emit(x, x->pat + start, 2, start);
        case 'C':
            return regex_error(x->err, x->pat, start, "\\C is not supported (RE2 syntax)");
        case 'Q': {
            size_t i = start + 2;
            size_t stop = x->len;
            for (size_t j = i; j + 1 < x->len; j++) {
                if (x->pat[j] == '\\' && x->pat[j + 1] == 'E') {
                    stop = j;
                    break;
                }
            }
            while (i < stop) {
                size_t w;
                uint32_t r = cma_utf8_decode(x->pat + i, stop - i, &w);
                begin_atom(x, false);
                enum cma_errc rc =
                    r < 0x80 && is_alnum(r) ? emit(x, x->pat + i, 1, i) : emit_hex(x, r, i);
                if (rc != CMA_OK)
                    return rc;
                i += w;
            }
            x->pos = stop < x->len ? stop + 2 : x->len;
            return CMA_OK;
        }
        case 'p':
        case 'P':
            begin_atom(x, false);
            return copy_unicode_class(x);
        default:
            break;
        }
    }
    bool done;
    begin_atom(x, false);
    enum cma_errc rc = perl_class(x, false, &done);
    if (rc != CMA_OK || done)
        return rc;
    uint32_t r;
    rc = parse_escape(x, &r);
    if (rc != CMA_OK)
        return rc;
    return emit_hex(x, r, start);
}

static enum cma_errc translate_one(struct xlat *x)
{
    size_t start = x->pos;
    unsigned c = at(x, start);
    switch (c) {
    case '(':
        if (at(x, start + 1) == '?' && start + 1 < x->len)
            return translate_perl_group(x);
        x->pos++;
        return open_group(x, start, true, NULL, 0, "(");
    case ')':
        return close_group(x);
    case '|':
        end_alternative(x);
        x->pos++;
        return emits(x, "|", start);
    case '^':
    case '$':
        begin_atom(x, true);
        x->pos++;
        return emit(x, x->pat + start, 1, start);
    case '.':
        begin_atom(x, false);
        x->pos++;
        return emits(x, ".", start);
    case '[':
        return translate_class(x);
    case '*':
    case '+':
    case '?':
        return apply_repeat(x, start, start + 1, 0, 0, false);
    case '{': {
        long min, max;
        size_t end;
        if (parse_repeat(x, start, &min, &max, &end)) {
            if (min < 0 || min > GO_MAX_REPEAT || max > GO_MAX_REPEAT || (max >= 0 && min > max))
                return regex_error(x->err, x->pat, start, "invalid repeat count: `%.*s`",
                                   (int)(end - start), x->pat + start);
            return apply_repeat(x, start, end, min, max, true);
        }
        begin_atom(x, false);
        x->pos++;
        return emits(x, "\\{", start);
    }
    case '\\':
        return translate_escape(x);
    default: {
        size_t w;
        uint32_t r = cma_utf8_decode(x->pat + start, x->len - start, &w);
        if (r == CMA_UTF8_RUNE_ERROR && w == 1)
            return regex_error(x->err, x->pat, start, "invalid UTF-8: `%s`", x->pat + start);
        begin_atom(x, false);
        x->pos += w;
        return emit(x, x->pat + start, w, start);
    }
    }
}

static void xlat_done(struct xlat *x)
{
    cma_buf_done(&x->out);
    free(x->map);
    free(x->frames);
    if (x->names) {
        for (size_t i = 0; i < x->names_cap; i++)
            free(x->names[i]);
        free(x->names);
    }
}

static enum cma_errc translate(struct xlat *x)
{
    for (size_t i = 0; i < x->len;) {
        size_t w;
        uint32_t r = cma_utf8_decode(x->pat + i, x->len - i, &w);
        if (r == CMA_UTF8_RUNE_ERROR && w == 1)
            return regex_error(x->err, x->pat, i, "invalid UTF-8: `%s`", x->pat + i);
        i += w;
    }
    enum cma_errc rc = push_frame(x, 0);
    if (rc == CMA_OK)
        rc = add_name(x, 0, NULL, 0);
    while (rc == CMA_OK && x->pos < x->len) {
        bool was_repeat_token = false;
        unsigned c = at(x, x->pos);
        if (c == '*' || c == '+' || c == '?')
            was_repeat_token = true;
        else if (c == '{') {
            long a, b;
            size_t e;
            was_repeat_token = parse_repeat(x, x->pos, &a, &b, &e);
        }
        rc = translate_one(x);
        x->last_was_repeat = was_repeat_token;
    }
    if (rc != CMA_OK)
        return rc;
    end_alternative(x);
    if (x->n_frames > 1)
        return regex_error(x->err, x->pat, x->frames[x->n_frames - 1].src_pos,
                           "missing closing ): `%s`", x->pat);
    /* an empty pattern still needs a buffer PCRE2 can read */
    return x->out.ptr ? CMA_OK : emit(x, "", 0, 0);
}

/* ---- public API ------------------------------------------------------------------------- */

void cma_regex_free(struct cma_regex *re)
{
    if (!re)
        return;
    free(re->pattern);
    pcre2_code_free(re->code);
    pcre2_match_context_free(re->mctx);
    if (re->names) {
        for (size_t i = 0; i <= re->n_groups; i++)
            free(re->names[i]);
        free(re->names);
    }
    free(re);
}

static enum cma_errc compile_translated(struct cma_regex *re, struct xlat *x,
                                        struct cma_err *reterr)
{
    pcre2_compile_context *cctx = pcre2_compile_context_create(NULL);
    if (!cctx)
        return cma_err_set(reterr, CMA_ERR_NOMEM, "out of memory compiling regex");
    pcre2_set_newline(cctx, PCRE2_NEWLINE_LF);
    pcre2_set_bsr(cctx, PCRE2_BSR_UNICODE);
    int ec;
    PCRE2_SIZE eo;
    re->code = pcre2_compile((PCRE2_SPTR)x->out.ptr, x->out.len,
                             PCRE2_UTF | PCRE2_MATCH_INVALID_UTF | PCRE2_DOLLAR_ENDONLY |
                                 PCRE2_ALT_CIRCUMFLEX | PCRE2_NEVER_BACKSLASH_C,
                             &ec, &eo, cctx);
    pcre2_compile_context_free(cctx);
    if (!re->code) {
        if (ec == PCRE2_ERROR_NOMEMORY)
            return cma_err_set(reterr, CMA_ERR_NOMEM, "out of memory compiling regex");
        char msg[200];
        if (pcre2_get_error_message(ec, (PCRE2_UCHAR *)msg, sizeof(msg)) < 0)
            snprintf(msg, sizeof(msg), "PCRE2 error %d", ec);
        /* PCRE2 points just past the offending item; map through the construct it came from */
        size_t src = eo < x->out.len ? x->map[eo] : x->out.len ? x->map[x->out.len - 1] : 0;
        return regex_error(reterr, re->pattern, src, "%s", msg);
    }
    uint32_t n_caps = 0;
    pcre2_pattern_info(re->code, PCRE2_INFO_CAPTURECOUNT, &n_caps);
    if (n_caps != x->n_groups)
        return cma_err_set(reterr, CMA_ERR_INTERNAL,
                           "regex %s: translated pattern has %u groups, expected %zu", re->pattern,
                           n_caps, x->n_groups);
    (void)pcre2_jit_compile(re->code, PCRE2_JIT_COMPLETE); /* falls back to the interpreter */
    re->mctx = pcre2_match_context_create(NULL);
    if (!re->mctx)
        return cma_err_set(reterr, CMA_ERR_NOMEM, "out of memory compiling regex");
    pcre2_set_match_limit(re->mctx, REGEX_MATCH_LIMIT);
    pcre2_set_depth_limit(re->mctx, REGEX_DEPTH_LIMIT);
    pcre2_set_heap_limit(re->mctx, REGEX_HEAP_LIMIT_KIB);
    return CMA_OK;
}

enum cma_errc cma_regex_compile(const char *pattern, struct cma_regex **ret, struct cma_err *reterr)
{
    if (!pattern || !ret)
        return cma_err_set(reterr, CMA_ERR_INTERNAL, "cma_regex_compile: NULL argument");
    struct cma_regex *re = calloc(1, sizeof(*re));
    if (!re)
        return cma_err_set(reterr, CMA_ERR_NOMEM, "out of memory compiling regex");
    re->pattern = cma_strdup(pattern);
    if (!re->pattern) {
        cma_regex_free(re);
        return cma_err_set(reterr, CMA_ERR_NOMEM, "out of memory compiling regex");
    }
    struct xlat x = {.pat = pattern, .len = strlen(pattern), .err = reterr};
    cma_buf_init(&x.out, 0);
    enum cma_errc rc = translate(&x);
    if (rc == CMA_OK)
        rc = compile_translated(re, &x, reterr);
    if (rc == CMA_OK) {
        re->n_groups = x.n_groups;
        re->names = calloc(x.n_groups + 1, sizeof(*re->names));
        if (!re->names) {
            rc = cma_err_set(reterr, CMA_ERR_NOMEM, "out of memory compiling regex");
        } else {
            for (size_t i = 1; i <= x.n_groups && i < x.names_cap; i++) {
                re->names[i] = x.names[i];
                x.names[i] = NULL;
            }
        }
    }
    xlat_done(&x);
    if (rc != CMA_OK) {
        cma_regex_free(re);
        return rc;
    }
    *ret = re;
    return CMA_OK;
}

const char *cma_regex_pattern(const struct cma_regex *re)
{
    return re ? re->pattern : "";
}

size_t cma_regex_n_groups(const struct cma_regex *re)
{
    return re ? re->n_groups : 0;
}

int cma_regex_group_index(const struct cma_regex *re, const char *name, size_t name_len)
{
    if (!re || !name)
        return -1;
    for (size_t i = 1; i <= re->n_groups; i++) {
        const char *n = re->names[i];
        if (n && strlen(n) == name_len && memcmp(n, name, name_len) == 0)
            return (int)i;
    }
    return -1;
}

bool cma_regex_match(const struct cma_regex *re, const char *s, size_t len)
{
    if (!re || (!s && len))
        return false;
    pcre2_match_data *md = pcre2_match_data_create(1, NULL);
    if (!md)
        return false;
    int rc = pcre2_match(re->code, (PCRE2_SPTR)(s ? s : ""), len, 0, 0, md, re->mctx);
    pcre2_match_data_free(md);
    return rc >= 0;
}

bool cma_regex_find(const struct cma_regex *re, const char *s, size_t len, size_t *ovector,
                    size_t n_ovector)
{
    if (!re || (!s && len))
        return false;
    pcre2_match_data *md = pcre2_match_data_create((uint32_t)(re->n_groups + 1), NULL);
    if (!md)
        return false;
    int rc = pcre2_match(re->code, (PCRE2_SPTR)(s ? s : ""), len, 0, 0, md, re->mctx);
    if (rc < 0) {
        pcre2_match_data_free(md);
        return false;
    }
    const PCRE2_SIZE *ov = pcre2_get_ovector_pointer(md);
    size_t n_set = rc == 0 ? re->n_groups + 1 : (size_t)rc; /* pairs PCRE2 filled in */
    for (size_t i = 0; i < n_ovector; i++) {
        size_t pair = i / 2;
        if (pair < n_set && pair <= re->n_groups && ov[i] != PCRE2_UNSET)
            ovector[i] = ov[i];
        else
            ovector[i] = (size_t)-1;
    }
    pcre2_match_data_free(md);
    return true;
}

/* Go's extract(): "$name" or "${name}" at t[0..len). Returns false when malformed. */
static enum cma_errc extract_name(const char *t, size_t len, const char **ret_name,
                                  size_t *ret_name_len, long *ret_num, size_t *ret_consumed,
                                  bool *ret_ok)
{
    *ret_ok = false;
    if (len < 2 || t[0] != '$')
        return CMA_OK;
    bool brace = t[1] == '{';
    size_t i = brace ? 2 : 1;
    size_t name_start = i;
    while (i < len) {
        unsigned char c = (unsigned char)t[i];
        if (c < 0x80) {
            if (!is_alnum(c) && c != '_')
                break;
            i++;
            continue;
        }
        size_t w;
        uint32_t r = cma_utf8_decode(t + i, len - i, &w);
        if (r == CMA_UTF8_RUNE_ERROR && w == 1)
            break;
        int in = cma_unicode_is_word(r);
        if (in < 0)
            return CMA_ERR_NOMEM;
        if (!in)
            break;
        i += w;
    }
    if (i == name_start)
        return CMA_OK;
    const char *name = t + name_start;
    size_t name_len = i - name_start;
    if (brace) {
        if (i >= len || t[i] != '}')
            return CMA_OK;
        i++;
    }
    long num = 0;
    for (size_t k = 0; k < name_len; k++) {
        if (name[k] < '0' || name[k] > '9' || num >= 100000000) {
            num = -1;
            break;
        }
        num = num * 10 + (name[k] - '0');
    }
    if (name[0] == '0' && name_len > 1)
        num = -1;
    *ret_name = name;
    *ret_name_len = name_len;
    *ret_num = num;
    *ret_consumed = i;
    *ret_ok = true;
    return CMA_OK;
}

static enum cma_errc append_group(struct cma_buf *out, const char *src, const size_t *ov,
                                  size_t group)
{
    size_t s = ov[2 * group], e = ov[2 * group + 1];
    if (s == (size_t)-1 || e == (size_t)-1 || e < s)
        return CMA_OK;
    return cma_buf_append(out, src + s, e - s);
}

enum cma_errc cma_regex_expand(const struct cma_regex *re, const char *tmpl, const char *src,
                               const size_t *ovector, struct cma_buf *out)
{
    if (!re || !tmpl || !out)
        return CMA_ERR_INTERNAL;
    size_t len = strlen(tmpl);
    size_t i = 0;
    enum cma_errc rc = CMA_OK;
    while (rc == CMA_OK && i < len) {
        const char *dollar = memchr(tmpl + i, '$', len - i);
        if (!dollar)
            break;
        size_t d = (size_t)(dollar - tmpl);
        rc = cma_buf_append(out, tmpl + i, d - i);
        if (rc != CMA_OK)
            break;
        i = d;
        if (i + 1 < len && tmpl[i + 1] == '$') {
            rc = cma_buf_appendc(out, '$');
            i += 2;
            continue;
        }
        const char *name = NULL;
        size_t name_len = 0, consumed = 0;
        long num = -1;
        bool ok;
        rc = extract_name(tmpl + i, len - i, &name, &name_len, &num, &consumed, &ok);
        if (rc != CMA_OK)
            break;
        if (!ok) {
            rc = cma_buf_appendc(out, '$');
            i++;
            continue;
        }
        i += consumed;
        if (!src || !ovector)
            continue;
        if (num >= 0) {
            if ((size_t)num <= re->n_groups)
                rc = append_group(out, src, ovector, (size_t)num);
            continue;
        }
        for (size_t g = 1; g <= re->n_groups; g++) {
            const char *n = re->names[g];
            if (n && strlen(n) == name_len && memcmp(n, name, name_len) == 0 &&
                ovector[2 * g] != (size_t)-1) {
                rc = append_group(out, src, ovector, g);
                break;
            }
        }
    }
    if (rc == CMA_OK && i < len)
        rc = cma_buf_append(out, tmpl + i, len - i);
    if (rc == CMA_OK && !out->ptr)
        rc = cma_buf_append(out, "", 0);
    return rc;
}

bool cma_regex_expand_has_trap(const char *tmpl)
{
    if (!tmpl)
        return false;
    for (size_t i = 0; tmpl[i]; i++) {
        if (tmpl[i] != '$')
            continue;
        if (tmpl[i + 1] == '$') {
            i++;
            continue;
        }
        size_t j = i + 1;
        while (tmpl[j] >= '0' && tmpl[j] <= '9')
            j++;
        char c = tmpl[j];
        if (j > i + 1 && ((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || c == '_'))
            return true;
    }
    return false;
}
