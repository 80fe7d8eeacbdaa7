/* template.c: the Go text/template engine behind metricsQuery, containerQuery, nodeQuery and
 * resources.template: lexing, parsing into an immutable tree, rendering into a cma_buf.
 *
 * DESIGN
 * - Lexer, parser and executor follow Go's text/template (parse/lex.go, parse/parse.go,
 *   exec.go, funcs.go) step by step: same token kinds, same look-ahead, same scoping of
 *   variables, same error texts where Go has them. fmt's printing rules (%v of slices, maps and
 *   structs, printf verbs, flags, width, precision, %!verb(type=value)) are reimplemented below.
 * - Parsing first lexes the whole text into a token array, then parses with random access (Go's
 *   two-token backup becomes an index reset). The tree, identifiers and decoded string literals
 *   live in one arena owned by the template; nothing is written after cma_template_parse()
 *   returns, so one template is rendered from many threads at once.
 * - A render keeps all its state on its own stack: variable slots (their number is bounded at
 *   parse time; names are interned to ids, so lookups are O(1) through per-name chains), a
 *   step counter, one scratch buffer and one scratch arena for computed strings (printf, html,
 *   ...). Data values are borrowed views of the caller's cma_tvalue; text and plain fields are
 *   written straight into the output buffer without copies. Maps print and range in sorted key
 *   order; an index is allocated only when the caller's map is not already sorted.
 * - Errors: parse errors carry line and column (bytes, 1-based) of the offending token, or of
 *   the "<<" that opens an unclosed action or block; execution errors say where in the text
 *   ("template: 1:9: executing at <.Foo>: ...") but leave cma_err's position unset.
 * - Bounds: text size, nesting depth (which also bounds recursion in the executor), a step
 *   budget per render, a ceiling on scratch bytes and the caller's output ceiling. Data cycles
 *   are cut by a depth limit when printing.
 * - Known differences from Go: complex constants, define/template/block and `call` are
 *   rejected at parse time; range over an integer is an error (as before Go 1.22); Unicode
 *   letter/printable classes are approximated outside ASCII; %#v and the # flag on floats are
 *   approximated; %b/%x on floats are bad verbs; type names in messages are generic ("struct",
 *   "[]string", "map[string]string") because the data carries no Go types; the zero value of
 *   a missing map key via `index` is that of the map's first value ("" for an empty map);
 *   "unexpected EOF" names the unclosed block; floats come only from literals. */
#include "cma/template.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_VALUE_DEPTH 64 /* nesting of data printed by fmt (cuts cycles) */
#define LOCAL_SLOTS 16     /* variable slots and call arguments kept on the stack */

/* ------------------------------------------------------------------------------------------ */
/* Arena: bump allocation in chunks, freed at once. */

#define ARENA_ALIGN ((size_t)16)
#define ARENA_CHUNK ((size_t)4096)

struct chunk {
    struct chunk *next;
    size_t used;
    size_t cap;
};
#define CHUNK_HDR ((sizeof(struct chunk) + ARENA_ALIGN - 1) & ~(ARENA_ALIGN - 1))

struct arena {
    struct chunk *head;
    size_t total;     /* bytes in all chunks */
    size_t max;       /* ceiling on total, 0 = none */
    enum cma_errc rc; /* why the last allocation failed */
};

static void arena_init(struct arena *a, size_t max)
{
    a->head = NULL;
    a->total = 0;
    a->max = max;
    a->rc = CMA_OK;
}

static void arena_done(struct arena *a)
{
    struct chunk *c = a->head;
    while (c) {
        struct chunk *next = c->next;
        free(c);
        c = next;
    }
    a->head = NULL;
    a->total = 0;
}

/* Returns zeroed memory, or NULL with a->rc set. */
static void *arena_alloc(struct arena *a, size_t n)
{
    if (n > SIZE_MAX / 4) {
        a->rc = CMA_ERR_TOO_LARGE;
        return NULL;
    }
    n = n ? (n + ARENA_ALIGN - 1) & ~(ARENA_ALIGN - 1) : ARENA_ALIGN;
    struct chunk *c = a->head;
    if (!c || c->cap - c->used < n) {
        size_t cap = n > ARENA_CHUNK ? n : ARENA_CHUNK;
        if (a->max && (cap > a->max || a->total > a->max - cap)) {
            a->rc = CMA_ERR_TOO_LARGE;
            return NULL;
        }
        c = malloc(CHUNK_HDR + cap);
        if (!c) {
            a->rc = CMA_ERR_NOMEM;
            return NULL;
        }
        c->next = a->head;
        c->used = 0;
        c->cap = cap;
        a->head = c;
        a->total += cap;
    }
    unsigned char *p = (unsigned char *)c + CHUNK_HDR + c->used;
    c->used += n;
    memset(p, 0, n);
    return p;
}

static char *arena_dup(struct arena *a, const char *s, size_t n)
{
    char *p = arena_alloc(a, n + 1);
    if (p && n)
        memcpy(p, s, n);
    return p;
}

/* ------------------------------------------------------------------------------------------ */
/* UTF-8 and the few Unicode classes Go's lexer and quoting need. */

#define RUNE_ERROR 0xFFFD
#define MAX_RUNE 0x10FFFF

/* Decodes one rune like Go's utf8.DecodeRune: invalid input gives RUNE_ERROR, size 1. */
static int32_t decode_rune(const char *str, size_t n, size_t *size)
{
    const unsigned char *s = (const unsigned char *)str;
    *size = 1;
    if (n == 0)
        return RUNE_ERROR;
    unsigned c = s[0];
    if (c < 0x80)
        return (int32_t)c;
    if (c < 0xC2 || c > 0xF4)
        return RUNE_ERROR;
    if (c < 0xE0) {
        if (n < 2 || (s[1] & 0xC0) != 0x80)
            return RUNE_ERROR;
        *size = 2;
        return (int32_t)(((c & 0x1F) << 6) | (s[1] & 0x3Fu));
    }
    if (c < 0xF0) {
        if (n < 3 || (s[1] & 0xC0) != 0x80 || (s[2] & 0xC0) != 0x80)
            return RUNE_ERROR;
        if ((c == 0xE0 && s[1] < 0xA0) || (c == 0xED && s[1] >= 0xA0))
            return RUNE_ERROR;
        *size = 3;
        return (int32_t)(((c & 0x0F) << 12) | ((s[1] & 0x3Fu) << 6) | (s[2] & 0x3Fu));
    }
    if (n < 4 || (s[1] & 0xC0) != 0x80 || (s[2] & 0xC0) != 0x80 || (s[3] & 0xC0) != 0x80)
        return RUNE_ERROR;
    if ((c == 0xF0 && s[1] < 0x90) || (c == 0xF4 && s[1] >= 0x90))
        return RUNE_ERROR;
    *size = 4;
    return (int32_t)(((c & 0x07) << 18) | ((s[1] & 0x3Fu) << 12) | ((s[2] & 0x3Fu) << 6) |
                     (s[3] & 0x3Fu));
}

static bool valid_rune(int64_t r)
{
    return (r >= 0 && r < 0xD800) || (r > 0xDFFF && r <= MAX_RUNE);
}

/* Encodes r (invalid runes become U+FFFD); returns the length. */
static size_t encode_rune(int64_t r, char out[4])
{
    if (!valid_rune(r))
        r = RUNE_ERROR;
    if (r < 0x80) {
        out[0] = (char)r;
        return 1;
    }
    if (r < 0x800) {
        out[0] = (char)(0xC0 | (r >> 6));
        out[1] = (char)(0x80 | (r & 0x3F));
        return 2;
    }
    if (r < 0x10000) {
        out[0] = (char)(0xE0 | (r >> 12));
        out[1] = (char)(0x80 | ((r >> 6) & 0x3F));
        out[2] = (char)(0x80 | (r & 0x3F));
        return 3;
    }
    out[0] = (char)(0xF0 | (r >> 18));
    out[1] = (char)(0x80 | ((r >> 12) & 0x3F));
    out[2] = (char)(0x80 | ((r >> 6) & 0x3F));
    out[3] = (char)(0x80 | (r & 0x3F));
    return 4;
}

static size_t count_runes(const char *s, size_t n)
{
    size_t runes = 0;
    for (size_t i = 0; i < n; runes++) {
        size_t size;
        if ((unsigned char)s[i] < 0x80)
            size = 1;
        else
            decode_rune(s + i, n - i, &size);
        i += size;
    }
    return runes;
}

/* Byte length of the first max_runes runes of s. */
static size_t rune_prefix_len(const char *s, size_t n, size_t max_runes)
{
    size_t i = 0;
    for (size_t runes = 0; i < n && runes < max_runes; runes++) {
        size_t size;
        decode_rune(s + i, n - i, &size);
        i += size;
    }
    return i;
}

/* Approximates Go's unicode.IsPrint: letters, marks, numbers, punctuation, symbols and the
 * ASCII space. Outside ASCII, controls, other spaces, format characters, private use,
 * surrogates and non-characters are excluded; unassigned code points count as printable. */
static bool is_print_rune(int64_t r)
{
    if (r < 0x80)
        return r >= 0x20 && r < 0x7F;
    if (!valid_rune(r))
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
static bool is_alnum_rune(int32_t r)
{
    if (r < 0x80)
        return r == '_' || (r >= 'a' && r <= 'z') || (r >= 'A' && r <= 'Z') ||
               (r >= '0' && r <= '9');
    if (r == RUNE_ERROR || !is_print_rune(r))
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

struct wbuf {
    struct cma_buf *buf;
    char *fixed;
    size_t fixed_len;
    size_t fixed_cap; /* >= 1 when fixed is used */
    enum cma_errc rc; /* first failure; later writes are ignored */
};

static struct wbuf wbuf_of(struct cma_buf *b)
{
    struct wbuf w = {b, NULL, 0, 0, CMA_OK};
    return w;
}

static struct wbuf wbuf_fixed(char *p, size_t cap)
{
    struct wbuf w = {NULL, p, 0, cap, CMA_OK};
    p[0] = '\0';
    return w;
}

static size_t w_len(const struct wbuf *w)
{
    return w->buf ? w->buf->len : w->fixed_len;
}

static char *w_data(const struct wbuf *w)
{
    return w->buf ? w->buf->ptr : w->fixed;
}

static void w_put(struct wbuf *w, const void *p, size_t n)
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

static void w_putc(struct wbuf *w, char c)
{
    w_put(w, &c, 1);
}

static void w_puts(struct wbuf *w, const char *s)
{
    w_put(w, s, strlen(s));
}

static void w_rune(struct wbuf *w, int64_t r)
{
    char tmp[4];
    w_put(w, tmp, encode_rune(r, tmp));
}

static void w_fill(struct wbuf *w, char c, size_t n)
{
    char tmp[256];
    memset(tmp, c, n < sizeof(tmp) ? n : sizeof(tmp));
    while (n > 0 && w->rc == CMA_OK) {
        size_t k = n < sizeof(tmp) ? n : sizeof(tmp);
        w_put(w, tmp, k);
        n -= k;
        if (!w->buf && w->fixed_len + 1 >= w->fixed_cap)
            break;
    }
}

/* Inserts n copies of c at byte offset at (at <= length). */
static void w_insert_fill(struct wbuf *w, size_t at, char c, size_t n)
{
    w_fill(w, c, n);
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
        w_put(w, tmp, 4);
        return;
    }
    if (!valid_rune(r))
        r = RUNE_ERROR;
    if (r < 0x10000)
        snprintf(tmp, sizeof(tmp), "\\u%04x", (unsigned)r);
    else
        snprintf(tmp, sizeof(tmp), "\\U%08x", (unsigned)r);
    w_puts(w, tmp);
}

/* strconv.Quote (quote '"') and QuoteToASCII. */
static void w_quote(struct wbuf *w, const char *s, size_t n, bool ascii_only)
{
    w_putc(w, '"');
    for (size_t i = 0; i < n && w->rc == CMA_OK;) {
        size_t size;
        int32_t r = decode_rune(s + i, n - i, &size);
        if (size == 1 && r == RUNE_ERROR) {
            unsigned char c = (unsigned char)s[i];
            char tmp[4] = {'\\', 'x', lower_hex[c >> 4], lower_hex[c & 0xF]};
            w_put(w, tmp, 4);
        } else {
            w_escaped_rune(w, r, '"', ascii_only);
        }
        i += size;
    }
    w_putc(w, '"');
}

/* strconv.QuoteRune and QuoteRuneToASCII. */
static void w_quote_rune(struct wbuf *w, int64_t r, bool ascii_only)
{
    if (!valid_rune(r))
        r = RUNE_ERROR;
    w_putc(w, '\'');
    w_escaped_rune(w, (int32_t)r, '\'', ascii_only);
    w_putc(w, '\'');
}

/* Go's %q of s into a fixed array, for error messages; max_runes > 0 truncates like %.Nq. */
static const char *quote_fixed(char *dst, size_t cap, const char *s, size_t n, size_t max_runes)
{
    struct wbuf w = wbuf_fixed(dst, cap);
    size_t len = max_runes ? rune_prefix_len(s, n, max_runes) : n;
    w_quote(&w, s, len, false);
    return dst;
}

/* Go's %U and %#U: "U+0041 'A'", at least prec hex digits. */
static void w_unicode(struct wbuf *w, uint64_t u, size_t prec, bool sharp)
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
        w_fill(w, '0', prec - nd);
    w_put(w, digits + sizeof(digits) - nd, nd);
    if (sharp && u <= MAX_RUNE && is_print_rune((int64_t)u)) {
        w_puts(w, " '");
        w_rune(w, (int64_t)u);
        w_putc(w, '\'');
    }
}

static const char *unicode_fixed(char *dst, size_t cap, int32_t r)
{
    struct wbuf w = wbuf_fixed(dst, cap);
    w_unicode(&w, (uint64_t)r, 4, true);
    return dst;
}

/* ------------------------------------------------------------------------------------------ */
/* Values: borrowed views of the caller's data, plus what literals and functions produce. */

enum val_kind {
    V_NIL,    /* Go's nil interface / invalid reflect.Value (a missing map key) */
    V_STRING, /* u.s */
    V_BOOL,   /* u.b */
    V_INT,    /* u.i, Go int */
    V_BYTE,   /* u.i, Go uint8 (index of a string) */
    V_FLOAT,  /* u.f, Go float64 (only from literals) */
    V_SLICE,  /* u.l */
    V_MAP,    /* u.l, names are keys */
    V_STRUCT, /* u.l, names are field names */
};

struct val {
    enum val_kind kind;
    union {
        struct {
            const char *ptr;
            size_t len;
        } s;
        bool b;
        int64_t i;
        double f;
        struct {
            const struct cma_tfield *items;
            size_t n;
        } l;
    } u;
};

static struct val val_nil(void)
{
    struct val v;
    memset(&v, 0, sizeof(v));
    v.kind = V_NIL;
    return v;
}

static struct val val_string(const char *p, size_t n)
{
    struct val v = val_nil();
    v.kind = V_STRING;
    v.u.s.ptr = p ? p : "";
    v.u.s.len = p ? n : 0;
    return v;
}

static struct val val_bool(bool b)
{
    struct val v = val_nil();
    v.kind = V_BOOL;
    v.u.b = b;
    return v;
}

static struct val val_int(enum val_kind kind, int64_t i)
{
    struct val v = val_nil();
    v.kind = kind;
    v.u.i = i;
    return v;
}

static struct val val_list(enum val_kind kind, const struct cma_tfield *items, size_t n)
{
    struct val v = val_nil();
    v.kind = kind;
    v.u.l.items = items;
    v.u.l.n = items ? n : 0;
    return v;
}

static struct val val_from_data(const struct cma_tvalue *tv)
{
    switch (tv->kind) {
    case CMA_TV_STRING:
        return val_string(tv->u.str.ptr, tv->u.str.len);
    case CMA_TV_BOOL:
        return val_bool(tv->u.b);
    case CMA_TV_INT:
        return val_int(V_INT, tv->u.i);
    case CMA_TV_SLICE:
        return val_list(V_SLICE, tv->u.list.items, tv->u.list.n);
    case CMA_TV_MAP:
        return val_list(V_MAP, tv->u.list.items, tv->u.list.n);
    case CMA_TV_STRUCT:
        return val_list(V_STRUCT, tv->u.list.items, tv->u.list.n);
    case CMA_TV_NIL:
    default:
        return val_nil();
    }
}

static const char *field_name(const struct cma_tfield *f)
{
    return f->name ? f->name : "";
}

/* True if the C string name is exactly p[0..n). */
static bool name_is(const char *name, const char *p, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (name[i] == '\0' || name[i] != p[i])
            return false;
    return name[n] == '\0';
}

/* Generic Go type names: the data carries kinds, not Go types. */
static const char *type_name(const struct val *v)
{
    static const char *const names[][3] = {
        {"[]string", "[]int", "[]interface {}"},
        {"map[string]string", "map[string]int", "map[string]interface {}"},
    };
    switch (v->kind) {
    case V_NIL:
        return "<nil>";
    case V_STRING:
        return "string";
    case V_BOOL:
        return "bool";
    case V_INT:
        return "int";
    case V_BYTE:
        return "uint8";
    case V_FLOAT:
        return "float64";
    case V_STRUCT:
        return "struct";
    case V_SLICE:
    case V_MAP: {
        int row = v->kind == V_MAP;
        enum cma_tvalue_kind k = CMA_TV_STRING;
        for (size_t i = 0; i < v->u.l.n; i++) {
            if (i == 0)
                k = v->u.l.items[0].value.kind;
            if (v->u.l.items[i].value.kind != k)
                return names[row][2];
        }
        return names[row][k == CMA_TV_STRING ? 0 : k == CMA_TV_INT ? 1 : 2];
    }
    }
    return "<nil>";
}

/* Iterates a map in Go's order (keys sorted bytewise); allocates only if the data is unsorted. */
struct map_iter {
    const struct cma_tfield *items;
    const struct cma_tfield **sorted; /* NULL when items are already in order */
    size_t n;
};

static int cmp_fields(const void *a, const void *b)
{
    const struct cma_tfield *const *fa = a;
    const struct cma_tfield *const *fb = b;
    return strcmp(field_name(*fa), field_name(*fb));
}

static bool map_iter_init(struct map_iter *it, const struct cma_tfield *items, size_t n)
{
    it->items = items;
    it->sorted = NULL;
    it->n = n;
    bool in_order = true;
    for (size_t i = 1; i < n && in_order; i++)
        in_order = strcmp(field_name(&items[i - 1]), field_name(&items[i])) <= 0;
    if (in_order)
        return true;
    it->sorted = malloc(n * sizeof(*it->sorted));
    if (!it->sorted)
        return false;
    for (size_t i = 0; i < n; i++)
        it->sorted[i] = &items[i];
    qsort(it->sorted, n, sizeof(*it->sorted), cmp_fields);
    return true;
}

static const struct cma_tfield *map_iter_at(const struct map_iter *it, size_t i)
{
    return it->sorted ? it->sorted[i] : &it->items[i];
}

static void map_iter_done(struct map_iter *it)
{
    free(it->sorted);
    it->sorted = NULL;
}

/* ------------------------------------------------------------------------------------------ */
/* fmt: Go's Sprint, Sprintln and Sprintf over struct val. */

struct fspec {
    bool sharp, zero, plus, minus, space; /* flags */
    bool sharp_v, plus_v;                 /* %#v, %+v */
    bool wid_present, prec_present;
    int wid, prec;
};

static void fmt_arg(struct wbuf *w, const struct fspec *f, const struct val *v, int32_t verb,
                    int depth);

/* Pads what was written since mark to the width, as fmt's pad() does. */
static void pad_from(struct wbuf *w, size_t mark, const struct fspec *f)
{
    if (!f->wid_present || f->wid <= 0 || w->rc != CMA_OK)
        return;
    size_t runes = count_runes(w_data(w) + mark, w_len(w) - mark);
    if ((size_t)f->wid <= runes)
        return;
    size_t n = (size_t)f->wid - runes;
    if (f->minus)
        w_fill(w, ' ', n);
    else
        w_insert_fill(w, mark, f->zero ? '0' : ' ', n);
}

static void pad_str(struct wbuf *w, const struct fspec *f, const char *s, size_t n)
{
    size_t mark = w_len(w);
    w_put(w, s, n);
    pad_from(w, mark, f);
}

static void bad_verb(struct wbuf *w, const struct fspec *f, int32_t verb, const struct val *v)
{
    w_puts(w, "%!");
    w_rune(w, verb);
    w_putc(w, '(');
    if (v->kind == V_NIL) {
        w_puts(w, "<nil>");
    } else {
        w_puts(w, type_name(v));
        w_putc(w, '=');
        fmt_arg(w, f, v, 'v', 0);
    }
    w_putc(w, ')');
}

static void fmt_integer(struct wbuf *w, const struct fspec *f, uint64_t u, unsigned base,
                        bool is_signed, int32_t verb, bool upper)
{
    const char *digits = upper ? "0123456789ABCDEFX" : "0123456789abcdefx";
    bool negative = is_signed && (int64_t)u < 0;
    if (negative)
        u = -u;
    size_t prec = 0;
    if (f->prec_present) {
        prec = (size_t)f->prec;
        if (prec == 0 && u == 0) {
            if (f->wid_present && f->wid > 0)
                w_fill(w, ' ', (size_t)f->wid);
            return;
        }
    } else if (f->zero && !f->minus && f->wid_present && f->wid > 0) {
        prec = (size_t)f->wid;
        if ((negative || f->plus || f->space) && prec > 0)
            prec--;
    }
    char tmp[72];
    size_t i = sizeof(tmp);
    do {
        tmp[--i] = digits[u % base];
        u /= base;
    } while (u);
    size_t nd = sizeof(tmp) - i;
    size_t zeros = prec > nd ? prec - nd : 0;
    size_t mark = w_len(w);
    if (negative)
        w_putc(w, '-');
    else if (f->plus)
        w_putc(w, '+');
    else if (f->space)
        w_putc(w, ' ');
    if (verb == 'O')
        w_puts(w, "0o");
    if (f->sharp) {
        if (base == 2)
            w_puts(w, "0b");
        else if (base == 16) {
            w_putc(w, '0');
            w_putc(w, digits[16]);
        } else if (base == 8 && zeros == 0 && tmp[i] != '0')
            w_putc(w, '0');
    }
    w_fill(w, '0', zeros);
    w_put(w, tmp + i, nd);
    struct fspec g = *f;
    g.zero = false;
    pad_from(w, mark, &g);
}

static void fmt_int_verb(struct wbuf *w, const struct fspec *f, const struct val *v, int32_t verb)
{
    uint64_t u = (uint64_t)v->u.i;
    bool is_signed = v->kind == V_INT;
    size_t mark = w_len(w);
    struct fspec g = *f;
    switch (verb) {
    case 'v':
        if (f->sharp_v && !is_signed) {
            g.sharp = true;
            fmt_integer(w, &g, u, 16, false, verb, false);
        } else {
            fmt_integer(w, f, u, 10, is_signed, verb, false);
        }
        return;
    case 'd':
        fmt_integer(w, f, u, 10, is_signed, verb, false);
        return;
    case 'b':
        fmt_integer(w, f, u, 2, is_signed, verb, false);
        return;
    case 'o':
    case 'O':
        fmt_integer(w, f, u, 8, is_signed, verb, false);
        return;
    case 'x':
        fmt_integer(w, f, u, 16, is_signed, verb, false);
        return;
    case 'X':
        fmt_integer(w, f, u, 16, is_signed, verb, true);
        return;
    case 'c':
        w_rune(w, u > MAX_RUNE ? RUNE_ERROR : (int64_t)u);
        pad_from(w, mark, f);
        return;
    case 'q':
        w_quote_rune(w, u > MAX_RUNE ? RUNE_ERROR : (int64_t)u, f->plus);
        pad_from(w, mark, f);
        return;
    case 'U':
        w_unicode(w, u, f->prec_present && f->prec > 4 ? (size_t)f->prec : 4, f->sharp);
        g.zero = false;
        pad_from(w, mark, &g);
        return;
    default:
        bad_verb(w, f, verb, v);
        return;
    }
}

/* Decimal digits of a non-negative double: value = 0.d[0]d[1]... * 10^dp, no trailing zeros. */
struct digits {
    char *d; /* malloc'd */
    size_t nd;
    long dp;
};

/* sig > 0: rounded to sig significant digits; sig == 0: shortest that reads back exactly. */
static bool float_digits(double a, int sig, struct digits *ret)
{
    char small[64];
    char *buf = small;
    if (sig == 0) {
        for (int p = 1; p <= 17; p++) {
            snprintf(small, sizeof(small), "%.*e", p - 1, a);
            if (strtod(small, NULL) == a)
                break;
        }
    } else {
        int n = snprintf(NULL, 0, "%.*e", sig - 1, a);
        if (n < 0)
            return false;
        buf = malloc((size_t)n + 1);
        if (!buf)
            return false;
        snprintf(buf, (size_t)n + 1, "%.*e", sig - 1, a);
    }
    size_t len = strlen(buf);
    ret->d = malloc(len + 1);
    if (!ret->d) {
        if (buf != small)
            free(buf);
        return false;
    }
    ret->nd = 0;
    size_t i = 0;
    for (; i < len && buf[i] != 'e'; i++)
        if (buf[i] >= '0' && buf[i] <= '9')
            ret->d[ret->nd++] = buf[i];
    long exp = i < len ? strtol(buf + i + 1, NULL, 10) : 0;
    if (buf != small)
        free(buf);
    while (ret->nd > 0 && ret->d[ret->nd - 1] == '0')
        ret->nd--;
    ret->dp = ret->nd ? exp + 1 : 0;
    return true;
}

static void digits_e(struct wbuf *w, const struct digits *d, long prec, char echar)
{
    w_putc(w, d->nd ? d->d[0] : '0');
    if (prec > 0) {
        w_putc(w, '.');
        for (long i = 1; i <= prec && w->rc == CMA_OK; i++)
            w_putc(w, (size_t)i < d->nd ? d->d[i] : '0');
    }
    long exp = d->nd ? d->dp - 1 : 0;
    char tmp[32];
    snprintf(tmp, sizeof(tmp), "%c%c%02ld", echar, exp < 0 ? '-' : '+', exp < 0 ? -exp : exp);
    w_puts(w, tmp);
}

static void digits_f(struct wbuf *w, const struct digits *d, long prec)
{
    if (d->dp > 0) {
        size_t m = (size_t)d->dp < d->nd ? (size_t)d->dp : d->nd;
        w_put(w, d->d, m);
        w_fill(w, '0', (size_t)d->dp - m);
    } else {
        w_putc(w, '0');
    }
    if (prec > 0) {
        w_putc(w, '.');
        for (long i = 1; i <= prec && w->rc == CMA_OK; i++) {
            long j = d->dp + i - 1;
            w_putc(w, j >= 0 && (size_t)j < d->nd ? d->d[j] : '0');
        }
    }
}

/* strconv.FormatFloat(a, 'g'/'G', prec) for a >= 0; prec < 0 means shortest. */
static void float_g(struct wbuf *w, double a, int prec, bool upper)
{
    bool shortest = prec < 0;
    struct digits d;
    if (!float_digits(a, shortest ? 0 : (prec == 0 ? 1 : prec), &d)) {
        w->rc = CMA_ERR_NOMEM;
        return;
    }
    long p = shortest ? (long)d.nd : (prec == 0 ? 1 : prec);
    long eprec = p;
    if (eprec > (long)d.nd && (long)d.nd >= d.dp)
        eprec = (long)d.nd;
    if (shortest)
        eprec = 6;
    long exp = d.dp - 1;
    if (exp < -4 || exp >= eprec) {
        if (p > (long)d.nd)
            p = (long)d.nd;
        digits_e(w, &d, p - 1, upper ? 'E' : 'e');
    } else {
        if (p > d.dp)
            p = (long)d.nd;
        digits_f(w, &d, p - d.dp > 0 ? p - d.dp : 0);
    }
    free(d.d);
}

static void float_printf(struct wbuf *w, double a, int prec, int32_t verb)
{
    char small[128];
    int n = verb == 'e'   ? snprintf(small, sizeof(small), "%.*e", prec, a)
            : verb == 'E' ? snprintf(small, sizeof(small), "%.*E", prec, a)
                          : snprintf(small, sizeof(small), "%.*f", prec, a);
    if (n < 0)
        return;
    if ((size_t)n < sizeof(small)) {
        w_put(w, small, (size_t)n);
        return;
    }
    char *big = malloc((size_t)n + 1);
    if (!big) {
        w->rc = CMA_ERR_NOMEM;
        return;
    }
    if (verb == 'e')
        snprintf(big, (size_t)n + 1, "%.*e", prec, a);
    else if (verb == 'E')
        snprintf(big, (size_t)n + 1, "%.*E", prec, a);
    else
        snprintf(big, (size_t)n + 1, "%.*f", prec, a);
    w_put(w, big, (size_t)n);
    free(big);
}

static void fmt_float(struct wbuf *w, const struct fspec *f, double v, int32_t verb, int prec)
{
    if (f->prec_present)
        prec = f->prec;
    bool neg = signbit(v) != 0;
    double a = neg ? -v : v;
    struct cma_buf body;
    cma_buf_init(&body, CMA_TEMPLATE_MAX_SCRATCH_BYTES);
    struct wbuf bw = wbuf_of(&body);
    if (verb == 'g' || verb == 'G')
        float_g(&bw, a, prec, verb == 'G');
    else
        float_printf(&bw, a, prec, verb == 'F' ? 'f' : verb);
    if (bw.rc != CMA_OK) {
        w->rc = bw.rc;
        cma_buf_done(&body);
        return;
    }
    const char *num = cma_buf_str(&body);
    size_t len = body.len;
    char sign = neg ? '-' : '+';
    if (f->space && sign == '+' && !f->plus)
        sign = ' ';
    size_t mark = w_len(w);
    if (f->plus || sign != '+') {
        if (f->zero && !f->minus && f->wid_present && (size_t)f->wid > len + 1) {
            w_putc(w, sign);
            w_fill(w, '0', (size_t)f->wid - len - 1);
            w_put(w, num, len);
        } else {
            w_putc(w, sign);
            w_put(w, num, len);
            pad_from(w, mark, f);
        }
    } else {
        w_put(w, num, len);
        pad_from(w, mark, f);
    }
    cma_buf_done(&body);
}

static void fmt_float_verb(struct wbuf *w, const struct fspec *f, const struct val *v, int32_t verb)
{
    switch (verb) {
    case 'v':
        fmt_float(w, f, v->u.f, 'g', -1);
        return;
    case 'g':
    case 'G':
        fmt_float(w, f, v->u.f, verb, -1);
        return;
    case 'e':
    case 'E':
    case 'f':
    case 'F':
        fmt_float(w, f, v->u.f, verb, 6);
        return;
    default:
        bad_verb(w, f, verb, v);
        return;
    }
}

/* %s and %v of a string: precision truncates to that many runes. */
static void fmt_s(struct wbuf *w, const struct fspec *f, const char *s, size_t n)
{
    if (f->prec_present)
        n = rune_prefix_len(s, n, (size_t)f->prec);
    pad_str(w, f, s, n);
}

static void fmt_sx(struct wbuf *w, const struct fspec *f, const char *s, size_t n, bool upper)
{
    const char *digits = upper ? "0123456789ABCDEFX" : "0123456789abcdefx";
    size_t length = n;
    if (f->prec_present && (size_t)f->prec < length)
        length = (size_t)f->prec;
    size_t width = 2 * length;
    if (width == 0) {
        if (f->wid_present && f->wid > 0)
            w_fill(w, f->zero && !f->minus ? '0' : ' ', (size_t)f->wid);
        return;
    }
    if (f->space) {
        if (f->sharp)
            width *= 2;
        width += length - 1;
    } else if (f->sharp) {
        width += 2;
    }
    bool pad = f->wid_present && f->wid > 0 && (size_t)f->wid > width;
    if (pad && !f->minus)
        w_fill(w, f->zero ? '0' : ' ', (size_t)f->wid - width);
    if (f->sharp) {
        w_putc(w, '0');
        w_putc(w, digits[16]);
    }
    for (size_t i = 0; i < length && w->rc == CMA_OK; i++) {
        if (f->space && i > 0) {
            w_putc(w, ' ');
            if (f->sharp) {
                w_putc(w, '0');
                w_putc(w, digits[16]);
            }
        }
        unsigned char c = (unsigned char)s[i];
        w_putc(w, digits[c >> 4]);
        w_putc(w, digits[c & 0xF]);
    }
    if (pad && f->minus)
        w_fill(w, ' ', (size_t)f->wid - width);
}

static bool can_backquote(const char *s, size_t n)
{
    for (size_t i = 0; i < n;) {
        size_t size;
        int32_t r = decode_rune(s + i, n - i, &size);
        i += size;
        if (size > 1) {
            if (r == 0xFEFF)
                return false;
            continue;
        }
        if (r == RUNE_ERROR || r == '`' || (r < ' ' && r != '\t') || r == 0x7F)
            return false;
    }
    return true;
}

static void fmt_q(struct wbuf *w, const struct fspec *f, const char *s, size_t n)
{
    if (f->prec_present)
        n = rune_prefix_len(s, n, (size_t)f->prec);
    size_t mark = w_len(w);
    if (f->sharp && can_backquote(s, n)) {
        w_putc(w, '`');
        w_put(w, s, n);
        w_putc(w, '`');
    } else {
        w_quote(w, s, n, f->plus);
    }
    pad_from(w, mark, f);
}

static void fmt_string_verb(struct wbuf *w, const struct fspec *f, const struct val *v,
                            int32_t verb)
{
    const char *s = v->u.s.ptr;
    size_t n = v->u.s.len;
    switch (verb) {
    case 'v':
        if (f->sharp_v)
            fmt_q(w, f, s, n);
        else
            fmt_s(w, f, s, n);
        return;
    case 's':
        fmt_s(w, f, s, n);
        return;
    case 'x':
        fmt_sx(w, f, s, n, false);
        return;
    case 'X':
        fmt_sx(w, f, s, n, true);
        return;
    case 'q':
        fmt_q(w, f, s, n);
        return;
    default:
        bad_verb(w, f, verb, v);
        return;
    }
}

static void fmt_composite(struct wbuf *w, const struct fspec *f, const struct val *v, int32_t verb,
                          int depth)
{
    const char *sep = f->sharp_v ? ", " : " ";
    const struct cma_tfield *items = v->u.l.items;
    size_t n = v->u.l.n;
    if (f->sharp_v) {
        w_puts(w, type_name(v));
        w_putc(w, '{');
    } else {
        w_puts(w, v->kind == V_SLICE ? "[" : v->kind == V_MAP ? "map[" : "{");
    }
    if (v->kind == V_MAP) {
        struct map_iter it;
        if (!map_iter_init(&it, items, n)) {
            w->rc = CMA_ERR_NOMEM;
            return;
        }
        for (size_t i = 0; i < n && w->rc == CMA_OK; i++) {
            const struct cma_tfield *e = map_iter_at(&it, i);
            const char *key = field_name(e);
            struct val k = val_string(key, strlen(key));
            struct val x = val_from_data(&e->value);
            if (i > 0)
                w_puts(w, sep);
            fmt_arg(w, f, &k, verb, depth + 1);
            w_putc(w, ':');
            fmt_arg(w, f, &x, verb, depth + 1);
        }
        map_iter_done(&it);
    } else {
        for (size_t i = 0; i < n && w->rc == CMA_OK; i++) {
            struct val x = val_from_data(&items[i].value);
            if (i > 0)
                w_puts(w, sep);
            if (v->kind == V_STRUCT && (f->plus_v || f->sharp_v)) {
                w_puts(w, field_name(&items[i]));
                w_putc(w, ':');
            }
            fmt_arg(w, f, &x, verb, depth + 1);
        }
    }
    w_putc(w, v->kind == V_SLICE || v->kind == V_MAP ? (f->sharp_v ? '}' : ']') : '}');
}

/* fmt's printArg / printValue. */
static void fmt_arg(struct wbuf *w, const struct fspec *f, const struct val *v, int32_t verb,
                    int depth)
{
    if (depth > MAX_VALUE_DEPTH) {
        w->rc = CMA_ERR_TEMPLATE_EXEC;
        return;
    }
    if (v->kind == V_NIL) {
        if (depth > 0 || verb == 'v' || verb == 'T')
            pad_str(w, f, "<nil>", 5);
        else
            bad_verb(w, f, verb, v);
        return;
    }
    if (verb == 'T' && depth == 0) {
        const char *name = type_name(v);
        fmt_s(w, f, name, strlen(name));
        return;
    }
    switch (v->kind) {
    case V_BOOL:
        if (verb == 't' || verb == 'v')
            pad_str(w, f, v->u.b ? "true" : "false", v->u.b ? 4 : 5);
        else
            bad_verb(w, f, verb, v);
        return;
    case V_INT:
    case V_BYTE:
        fmt_int_verb(w, f, v, verb);
        return;
    case V_FLOAT:
        fmt_float_verb(w, f, v, verb);
        return;
    case V_STRING:
        fmt_string_verb(w, f, v, verb);
        return;
    case V_SLICE:
    case V_MAP:
    case V_STRUCT:
        fmt_composite(w, f, v, verb, depth);
        return;
    case V_NIL:
        return;
    }
}

static bool is_string_val(const struct val *v)
{
    return v->kind == V_STRING;
}

/* fmt.Sprint: a space between operands when neither is a string. */
static void do_print(struct wbuf *w, const struct val *a, size_t n)
{
    struct fspec f = {0};
    for (size_t i = 0; i < n; i++) {
        if (i > 0 && !is_string_val(&a[i]) && !is_string_val(&a[i - 1]))
            w_putc(w, ' ');
        fmt_arg(w, &f, &a[i], 'v', 0);
    }
}

/* fmt.Sprintln: spaces between all operands, a newline at the end. */
static void do_println(struct wbuf *w, const struct val *a, size_t n)
{
    struct fspec f = {0};
    for (size_t i = 0; i < n; i++) {
        if (i > 0)
            w_putc(w, ' ');
        fmt_arg(w, &f, &a[i], 'v', 0);
    }
    w_putc(w, '\n');
}

static bool too_large(long x)
{
    return !(x > -1000000 && x < 1000000);
}

/* fmt's parsenum: digits at s[*i..end); on overflow the rest of the format is consumed. */
static bool parse_num(const char *s, size_t *i, size_t end, int *ret)
{
    long num = 0;
    bool isnum = false;
    size_t k = *i;
    for (; k < end && s[k] >= '0' && s[k] <= '9'; k++) {
        if (too_large(num)) {
            *ret = 0;
            *i = end;
            return false;
        }
        num = num * 10 + (s[k] - '0');
        isnum = true;
    }
    *i = k;
    *ret = (int)num;
    return isnum;
}

struct printf_state {
    size_t argnum;
    bool reordered;
    bool good_argnum;
    bool after_index;
};

/* fmt's argNumber: an explicit "[n]" argument index at format[*i]. */
static void arg_number(struct printf_state *ps, const char *format, size_t *i, size_t end,
                       size_t n_args)
{
    ps->after_index = false;
    if (*i >= end || format[*i] != '[')
        return;
    ps->reordered = true;
    size_t rem = end - *i;
    const char *s = format + *i;
    size_t wid = 1;
    bool ok = false;
    int index = 0;
    if (rem >= 3) {
        for (size_t k = 1; k < rem; k++) {
            if (s[k] == ']') {
                size_t j = 1;
                int num;
                bool isnum = parse_num(s, &j, k, &num);
                wid = k + 1;
                if (isnum && j == k) {
                    ok = true;
                    index = num - 1;
                }
                break;
            }
        }
    }
    *i += wid;
    if (ok && index >= 0 && (size_t)index < n_args) {
        ps->argnum = (size_t)index;
        ps->after_index = true;
        return;
    }
    ps->good_argnum = false;
    ps->after_index = ok;
}

/* fmt's intFromArg, for '*' width and precision. */
static bool int_from_arg(const struct val *a, size_t n, size_t *argnum, int *ret)
{
    *ret = 0;
    if (*argnum >= n)
        return false;
    const struct val *v = &a[(*argnum)++];
    if (v->kind != V_INT && v->kind != V_BYTE)
        return false;
    if (too_large((long)v->u.i))
        return false;
    *ret = (int)v->u.i;
    return true;
}

static void percent_bang(struct wbuf *w, int32_t verb, const char *what)
{
    w_puts(w, "%!");
    w_rune(w, verb);
    w_putc(w, '(');
    w_puts(w, what);
    w_putc(w, ')');
}

/* fmt.Sprintf. */
static void do_printf(struct wbuf *w, const char *format, size_t end, const struct val *a, size_t n)
{
    struct printf_state ps = {0, false, true, false};
    size_t i = 0;
    while (i < end && w->rc == CMA_OK) {
        ps.good_argnum = true;
        size_t lasti = i;
        while (i < end && format[i] != '%')
            i++;
        if (i > lasti)
            w_put(w, format + lasti, i - lasti);
        if (i >= end)
            break;
        i++;
        struct fspec f = {0};
        bool done = false;
        for (; i < end; i++) {
            char c = format[i];
            if (c == '#') {
                f.sharp = true;
            } else if (c == '0') {
                f.zero = !f.minus;
            } else if (c == '+') {
                f.plus = true;
            } else if (c == '-') {
                f.minus = true;
                f.zero = false;
            } else if (c == ' ') {
                f.space = true;
            } else {
                if (c >= 'a' && c <= 'z' && ps.argnum < n) {
                    if (c == 'v') {
                        f.sharp_v = f.sharp;
                        f.sharp = false;
                        f.plus_v = f.plus;
                        f.plus = false;
                    }
                    fmt_arg(w, &f, &a[ps.argnum++], c, 0);
                    i++;
                    done = true;
                }
                break;
            }
        }
        if (done)
            continue;

        arg_number(&ps, format, &i, end, n);
        if (i < end && format[i] == '*') {
            i++;
            f.wid_present = int_from_arg(a, n, &ps.argnum, &f.wid);
            if (!f.wid_present)
                w_puts(w, "%!(BADWIDTH)");
            if (f.wid < 0) {
                f.wid = -f.wid;
                f.minus = true;
                f.zero = false;
            }
            ps.after_index = false;
        } else {
            f.wid_present = parse_num(format, &i, end, &f.wid);
            if (ps.after_index && f.wid_present)
                ps.good_argnum = false;
        }
        if (i + 1 < end && format[i] == '.') {
            i++;
            if (ps.after_index)
                ps.good_argnum = false;
            arg_number(&ps, format, &i, end, n);
            if (i < end && format[i] == '*') {
                i++;
                f.prec_present = int_from_arg(a, n, &ps.argnum, &f.prec);
                if (f.prec < 0) {
                    f.prec = 0;
                    f.prec_present = false;
                }
                if (!f.prec_present)
                    w_puts(w, "%!(BADPREC)");
                ps.after_index = false;
            } else {
                f.prec_present = parse_num(format, &i, end, &f.prec);
                if (!f.prec_present) {
                    f.prec = 0;
                    f.prec_present = true;
                }
            }
        }
        if (!ps.after_index)
            arg_number(&ps, format, &i, end, n);
        if (i >= end) {
            w_puts(w, "%!(NOVERB)");
            break;
        }
        size_t size;
        int32_t verb = decode_rune(format + i, end - i, &size);
        i += size;
        if (verb == '%') {
            w_putc(w, '%');
        } else if (!ps.good_argnum) {
            percent_bang(w, verb, "BADINDEX");
        } else if (ps.argnum >= n) {
            percent_bang(w, verb, "MISSING");
        } else {
            if (verb == 'v') {
                f.sharp_v = f.sharp;
                f.sharp = false;
                f.plus_v = f.plus;
                f.plus = false;
            }
            fmt_arg(w, &f, &a[ps.argnum++], verb, 0);
        }
    }
    if (!ps.reordered && ps.argnum < n) {
        struct fspec f = {0};
        w_puts(w, "%!(EXTRA ");
        for (size_t k = ps.argnum; k < n; k++) {
            if (k > ps.argnum)
                w_puts(w, ", ");
            if (a[k].kind == V_NIL) {
                w_puts(w, "<nil>");
            } else {
                w_puts(w, type_name(&a[k]));
                w_putc(w, '=');
                fmt_arg(w, &f, &a[k], 'v', 0);
            }
        }
        w_putc(w, ')');
    }
}

/* Go's %v of one value into a fixed array, for error messages. */
static const char *value_fixed(char *dst, size_t cap, const struct val *v)
{
    struct wbuf w = wbuf_fixed(dst, cap);
    struct fspec f = {0};
    fmt_arg(&w, &f, v, 'v', 0);
    return dst;
}

/* ------------------------------------------------------------------------------------------ */
/* The escapers of html, js and urlquery (funcs.go, net/url). */

static void html_escape(struct wbuf *w, const char *s, size_t n)
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
        w_put(w, s + last, i - last);
        w_puts(w, rep);
        last = i + 1;
    }
    w_put(w, s + last, n - last);
}

static void js_escape(struct wbuf *w, const char *s, size_t n)
{
    size_t last = 0;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        bool special = c == '\\' || c == '\'' || c == '"' || c == '<' || c == '>' || c == '&' ||
                       c == '=' || c < ' ' || c >= 0x80;
        if (!special)
            continue;
        w_put(w, s + last, i - last);
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
            int32_t r = decode_rune(s + i, n - i, &size);
            if (is_print_rune(r)) {
                w_put(w, s + i, size);
            } else {
                char tmp[16];
                snprintf(tmp, sizeof(tmp), "\\u%04X", (unsigned)r);
                w_puts(w, tmp);
            }
            i += size - 1;
        }
        last = i + 1;
    }
    w_put(w, s + last, n - last);
}

static void url_query_escape(struct wbuf *w, const char *s, size_t n)
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
            w_put(w, tmp, 3);
        }
    }
}

/* ------------------------------------------------------------------------------------------ */
/* Lexer (parse/lex.go with "<<" and ">>"): the whole text becomes a token array that ends with
 * T_EOF or T_ERROR. */

enum tok_type {
    T_ERROR,
    T_BOOL,
    T_CHAR,
    T_CHAR_CONST,
    T_COMPLEX,
    T_ASSIGN,
    T_DECLARE,
    T_EOF,
    T_FIELD,
    T_IDENT,
    T_LDELIM,
    T_LPAREN,
    T_NUMBER,
    T_PIPE,
    T_RAW_STRING,
    T_RDELIM,
    T_RPAREN,
    T_SPACE,
    T_STRING,
    T_TEXT,
    T_VARIABLE,
    T_KEYWORD, /* keywords follow */
    T_BLOCK,
    T_BREAK,
    T_CONTINUE,
    T_DOT,
    T_DEFINE,
    T_ELSE,
    T_END,
    T_IF,
    T_NIL,
    T_RANGE,
    T_TEMPLATE,
    T_WITH,
};

static const struct {
    const char *word;
    enum tok_type type;
} keywords[] = {
    {"block", T_BLOCK},
    {"break", T_BREAK},
    {"continue", T_CONTINUE},
    {"define", T_DEFINE},
    {"else", T_ELSE},
    {"end", T_END},
    {"if", T_IF},
    {"nil", T_NIL},
    {"range", T_RANGE},
    {"template", T_TEMPLATE},
    {"with", T_WITH},
};

struct token {
    enum tok_type type;
    uint32_t pos; /* byte offset in the text */
    uint32_t len;
};

struct lexer {
    const char *in;
    size_t len;
    size_t pos;        /* current position */
    size_t start;      /* start of the pending token */
    size_t action_pos; /* the "<<" of the current action, for "unclosed action" */
    int paren_depth;
    struct token *toks;
    size_t n_toks;
    size_t cap_toks;
    char msg[256]; /* text of the T_ERROR token */
    bool nomem;
};

enum lex_state { LS_TEXT, LS_INSIDE, LS_DONE };

static bool is_space(int c)
{
    return c == ' ' || c == '\t' || c == '\r' || c == '\n';
}

static bool lex_push(struct lexer *l, enum tok_type type, size_t pos, size_t len)
{
    if (l->n_toks == l->cap_toks) {
        size_t cap = l->cap_toks ? l->cap_toks * 2 : 64;
        struct token *t = realloc(l->toks, cap * sizeof(*t));
        if (!t) {
            l->nomem = true;
            return false;
        }
        l->toks = t;
        l->cap_toks = cap;
    }
    l->toks[l->n_toks].type = type;
    l->toks[l->n_toks].pos = (uint32_t)pos;
    l->toks[l->n_toks].len = (uint32_t)len;
    l->n_toks++;
    return true;
}

static enum lex_state lex_emit(struct lexer *l, enum tok_type type)
{
    if (!lex_push(l, type, l->start, l->pos - l->start))
        return LS_DONE;
    l->start = l->pos;
    return LS_INSIDE;
}

static enum lex_state lex_errorf(struct lexer *l, size_t pos, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static enum lex_state lex_errorf(struct lexer *l, size_t pos, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(l->msg, sizeof(l->msg), fmt, ap);
    va_end(ap);
    lex_push(l, T_ERROR, pos, 0);
    return LS_DONE;
}

static bool has_prefix_at(const struct lexer *l, size_t at, const char *p, size_t n)
{
    return at <= l->len && l->len - at >= n && memcmp(l->in + at, p, n) == 0;
}

static bool has_left_trim(const struct lexer *l, size_t at)
{
    return at + 2 <= l->len && l->in[at] == '-' && is_space((unsigned char)l->in[at + 1]);
}

static bool has_right_trim(const struct lexer *l, size_t at)
{
    return at + 2 <= l->len && is_space((unsigned char)l->in[at]) && l->in[at + 1] == '-';
}

static bool at_right_delim(const struct lexer *l, bool *trim)
{
    *trim = has_right_trim(l, l->pos) && has_prefix_at(l, l->pos + 2, ">>", 2);
    return *trim || has_prefix_at(l, l->pos, ">>", 2);
}

static size_t left_trim_len(const struct lexer *l, size_t at)
{
    size_t i = at;
    while (i < l->len && is_space((unsigned char)l->in[i]))
        i++;
    return i - at;
}

/* First occurrence of the two bytes a b in s[0..n), or NULL. */
static const char *find2(const char *s, size_t n, char a, char b)
{
    for (const char *p = s; n >= 2;) {
        const char *q = memchr(p, a, n - 1);
        if (!q)
            return NULL;
        if (q[1] == b)
            return q;
        n -= (size_t)(q - p) + 1;
        p = q + 1;
    }
    return NULL;
}

static int32_t rune_at(const struct lexer *l, size_t at)
{
    size_t size;
    return at < l->len ? decode_rune(l->in + at, l->len - at, &size) : -1;
}

static enum lex_state lex_comment(struct lexer *l)
{
    l->pos += 2;
    const char *end = find2(l->in + l->pos, l->len - l->pos, '*', '/');
    if (!end)
        return lex_errorf(l, l->start, "unclosed comment");
    l->pos = (size_t)(end - l->in) + 2;
    bool trim;
    if (!at_right_delim(l, &trim))
        return lex_errorf(l, l->start, "comment ends before closing delimiter");
    l->pos += trim ? 4 : 2;
    if (trim)
        l->pos += left_trim_len(l, l->pos);
    l->start = l->pos;
    return LS_TEXT;
}

static enum lex_state lex_left_delim(struct lexer *l)
{
    l->action_pos = l->pos;
    l->pos += 2;
    size_t after = has_left_trim(l, l->pos) ? 2 : 0;
    if (has_prefix_at(l, l->pos + after, "/*", 2)) {
        l->pos += after;
        l->start = l->pos;
        return lex_comment(l);
    }
    if (!lex_push(l, T_LDELIM, l->action_pos, 2))
        return LS_DONE;
    l->pos += after;
    l->start = l->pos;
    l->paren_depth = 0;
    return LS_INSIDE;
}

static enum lex_state lex_text(struct lexer *l)
{
    const char *hit = find2(l->in + l->pos, l->len - l->pos, '<', '<');
    if (hit) {
        size_t x = (size_t)(hit - l->in);
        if (x > l->pos) {
            size_t trim = 0;
            if (has_left_trim(l, x + 2))
                while (trim < x - l->start && is_space((unsigned char)l->in[x - trim - 1]))
                    trim++;
            if (x - trim > l->start && !lex_push(l, T_TEXT, l->start, x - trim - l->start))
                return LS_DONE;
            l->pos = x;
            l->start = x;
        }
        return lex_left_delim(l);
    }
    l->pos = l->len;
    if (l->pos > l->start && !lex_push(l, T_TEXT, l->start, l->pos - l->start))
        return LS_DONE;
    l->start = l->pos;
    lex_push(l, T_EOF, l->pos, 0);
    return LS_DONE;
}

static enum lex_state lex_right_delim(struct lexer *l, bool trim)
{
    if (trim) {
        l->pos += 2;
        l->start = l->pos;
    }
    l->pos += 2;
    if (lex_emit(l, T_RDELIM) == LS_DONE)
        return LS_DONE;
    if (trim) {
        l->pos += left_trim_len(l, l->pos);
        l->start = l->pos;
    }
    return LS_TEXT;
}

static enum lex_state lex_space(struct lexer *l)
{
    size_t n = 0;
    while (l->pos < l->len && is_space((unsigned char)l->in[l->pos])) {
        l->pos++;
        n++;
    }
    if (has_right_trim(l, l->pos - 1) && has_prefix_at(l, l->pos + 1, ">>", 2)) {
        l->pos--;
        if (n == 1)
            return lex_right_delim(l, true);
    }
    return lex_emit(l, T_SPACE);
}

static bool at_terminator(const struct lexer *l)
{
    if (l->pos >= l->len)
        return true;
    char c = l->in[l->pos];
    if (is_space((unsigned char)c))
        return true;
    if (c == '.' || c == ',' || c == '|' || c == ':' || c == ')' || c == '(')
        return true;
    return has_prefix_at(l, l->pos, ">>", 2);
}

static enum lex_state lex_bad_char(struct lexer *l)
{
    char u[32];
    return lex_errorf(l, l->start, "bad character %s",
                      unicode_fixed(u, sizeof(u), rune_at(l, l->pos)));
}

/* After the '.' of a field or the '$' of a variable. */
static enum lex_state lex_field_or_variable(struct lexer *l, enum tok_type type)
{
    if (at_terminator(l))
        return lex_emit(l, type == T_VARIABLE ? T_VARIABLE : T_DOT);
    while (l->pos < l->len) {
        size_t size;
        if (!is_alnum_rune(decode_rune(l->in + l->pos, l->len - l->pos, &size)))
            break;
        l->pos += size;
    }
    if (!at_terminator(l))
        return lex_bad_char(l);
    return lex_emit(l, type);
}

static enum lex_state lex_identifier(struct lexer *l)
{
    while (l->pos < l->len) {
        size_t size;
        if (!is_alnum_rune(decode_rune(l->in + l->pos, l->len - l->pos, &size)))
            break;
        l->pos += size;
    }
    if (!at_terminator(l))
        return lex_bad_char(l);
    const char *word = l->in + l->start;
    size_t n = l->pos - l->start;
    for (size_t i = 0; i < sizeof(keywords) / sizeof(keywords[0]); i++)
        if (name_is(keywords[i].word, word, n))
            return lex_emit(l, keywords[i].type);
    if ((n == 4 && memcmp(word, "true", 4) == 0) || (n == 5 && memcmp(word, "false", 5) == 0))
        return lex_emit(l, T_BOOL);
    return lex_emit(l, T_IDENT);
}

/* Character constants and quoted strings; syntax is checked by the parser. */
static enum lex_state lex_quoted(struct lexer *l, char quote, enum tok_type type, const char *what)
{
    for (;;) {
        if (l->pos >= l->len)
            return lex_errorf(l, l->start, "unterminated %s", what);
        char c = l->in[l->pos++];
        if (c == '\\') {
            if (l->pos >= l->len || l->in[l->pos] == '\n')
                return lex_errorf(l, l->start, "unterminated %s", what);
            l->pos++;
        } else if (c == '\n') {
            return lex_errorf(l, l->start, "unterminated %s", what);
        } else if (c == quote) {
            return lex_emit(l, type);
        }
    }
}

static enum lex_state lex_raw_quote(struct lexer *l)
{
    const char *end = memchr(l->in + l->pos, '`', l->len - l->pos);
    if (!end)
        return lex_errorf(l, l->start, "unterminated raw quoted string");
    l->pos = (size_t)(end - l->in) + 1;
    return lex_emit(l, T_RAW_STRING);
}

static bool accept(struct lexer *l, const char *valid)
{
    if (l->pos < l->len && l->in[l->pos] != '\0' && strchr(valid, l->in[l->pos])) {
        l->pos++;
        return true;
    }
    return false;
}

static void accept_run(struct lexer *l, const char *valid)
{
    while (accept(l, valid)) {
    }
}

static bool scan_number(struct lexer *l)
{
    static const char dec[] = "0123456789_";
    static const char hex[] = "0123456789abcdefABCDEF_";
    const char *digits = dec;
    accept(l, "+-");
    if (accept(l, "0")) {
        if (accept(l, "xX"))
            digits = hex;
        else if (accept(l, "oO"))
            digits = "01234567_";
        else if (accept(l, "bB"))
            digits = "01_";
    }
    accept_run(l, digits);
    if (accept(l, "."))
        accept_run(l, digits);
    if (digits == dec && accept(l, "eE")) {
        accept(l, "+-");
        accept_run(l, dec);
    }
    if (digits == hex && accept(l, "pP")) {
        accept(l, "+-");
        accept_run(l, dec);
    }
    accept(l, "i");
    if (l->pos < l->len) {
        size_t size;
        if (is_alnum_rune(decode_rune(l->in + l->pos, l->len - l->pos, &size))) {
            l->pos += size;
            return false;
        }
    }
    return true;
}

static enum lex_state lex_number(struct lexer *l)
{
    char q[96];
    bool ok = scan_number(l);
    enum tok_type type = T_NUMBER;
    if (ok && l->pos < l->len && (l->in[l->pos] == '+' || l->in[l->pos] == '-')) {
        ok = scan_number(l) && l->in[l->pos - 1] == 'i';
        type = T_COMPLEX;
    }
    if (!ok)
        return lex_errorf(l, l->start, "bad number syntax: %s",
                          quote_fixed(q, sizeof(q), l->in + l->start, l->pos - l->start, 0));
    return lex_emit(l, type);
}

static enum lex_state lex_inside(struct lexer *l)
{
    bool trim;
    if (at_right_delim(l, &trim)) {
        if (l->paren_depth == 0)
            return lex_right_delim(l, trim);
        return lex_errorf(l, l->start, "unclosed left paren");
    }
    if (l->pos >= l->len)
        return lex_errorf(l, l->action_pos, "unclosed action");
    char c = l->in[l->pos];
    if (is_space((unsigned char)c))
        return lex_space(l);
    l->pos++;
    switch (c) {
    case '=':
        return lex_emit(l, T_ASSIGN);
    case ':':
        if (l->pos >= l->len || l->in[l->pos] != '=')
            return lex_errorf(l, l->start, "expected :=");
        l->pos++;
        return lex_emit(l, T_DECLARE);
    case '|':
        return lex_emit(l, T_PIPE);
    case '"':
        return lex_quoted(l, '"', T_STRING, "quoted string");
    case '`':
        return lex_raw_quote(l);
    case '$':
        return lex_field_or_variable(l, T_VARIABLE);
    case '\'':
        return lex_quoted(l, '\'', T_CHAR_CONST, "character constant");
    case '.':
        if (l->pos < l->len && (l->in[l->pos] < '0' || l->in[l->pos] > '9'))
            return lex_field_or_variable(l, T_FIELD);
        l->pos--;
        return lex_number(l);
    case '(':
        l->paren_depth++;
        return lex_emit(l, T_LPAREN);
    case ')':
        if (--l->paren_depth < 0)
            return lex_errorf(l, l->start, "unexpected right paren");
        return lex_emit(l, T_RPAREN);
    default:
        break;
    }
    if (c == '+' || c == '-' || (c >= '0' && c <= '9')) {
        l->pos--;
        return lex_number(l);
    }
    int32_t r = rune_at(l, l->pos - 1);
    if (is_alnum_rune(r)) {
        l->pos--;
        return lex_identifier(l);
    }
    if (r >= 0x20 && r < 0x7F)
        return lex_emit(l, T_CHAR);
    char u[32];
    return lex_errorf(l, l->start, "unrecognized character in action: %s",
                      unicode_fixed(u, sizeof(u), r));
}

/* Lexes the whole text; false when out of memory. */
static bool lex_all(struct lexer *l)
{
    enum lex_state s = LS_TEXT;
    while (s != LS_DONE)
        s = s == LS_TEXT ? lex_text(l) : lex_inside(l);
    return !l->nomem;
}

/* ------------------------------------------------------------------------------------------ */
/* Parse tree. */

enum fn_id {
    F_AND,
    F_HTML,
    F_INDEX,
    F_JS,
    F_LEN,
    F_NOT,
    F_OR,
    F_PRINT,
    F_PRINTF,
    F_PRINTLN,
    F_SLICE,
    F_URLQUERY,
    F_EQ,
    F_GE,
    F_GT,
    F_LE,
    F_LT,
    F_NE,
};

static const struct {
    const char *name;
    unsigned n_fixed; /* parameters before the variadic part (or all of them) */
    bool variadic;
} functions[] = {
    [F_AND] = {"and", 1, true},       [F_HTML] = {"html", 0, true},
    [F_INDEX] = {"index", 1, true},   [F_JS] = {"js", 0, true},
    [F_LEN] = {"len", 1, false},      [F_NOT] = {"not", 1, false},
    [F_OR] = {"or", 1, true},         [F_PRINT] = {"print", 0, true},
    [F_PRINTF] = {"printf", 1, true}, [F_PRINTLN] = {"println", 0, true},
    [F_SLICE] = {"slice", 1, true},   [F_URLQUERY] = {"urlquery", 0, true},
    [F_EQ] = {"eq", 1, true},         [F_GE] = {"ge", 2, false},
    [F_GT] = {"gt", 2, false},        [F_LE] = {"le", 2, false},
    [F_LT] = {"lt", 2, false},        [F_NE] = {"ne", 2, false},
};

enum ideal { IDEAL_INT, IDEAL_FLOAT, IDEAL_OVERFLOW };

struct number {
    enum ideal ideal; /* what the literal means where no type is known (exec's idealConstant) */
    int64_t i;
    double f;
};

struct ident {
    const char *ptr;
    uint32_t len;
};

enum node_kind {
    N_TEXT,     /* u.str */
    N_ACTION,   /* u.pipe */
    N_IF,       /* u.ctl */
    N_RANGE,    /* u.ctl */
    N_WITH,     /* u.ctl */
    N_BREAK,    /* - */
    N_CONTINUE, /* - */
    N_FIELD,    /* u.field: .A.B on dot */
    N_CHAIN,    /* u.field: (pipe).A.B, base is the term */
    N_VAR,      /* u.field: $x.A.B, var is the slot name */
    N_FUNC,     /* u.func */
    N_DOT,      /* - */
    N_NIL,      /* - */
    N_BOOL,     /* u.b */
    N_NUMBER,   /* u.num */
    N_STRING,   /* u.str, decoded */
    N_PIPE,     /* u.pipe: a parenthesized pipeline */
    N_END,      /* parser only: {{end}} */
    N_ELSE,     /* parser only: {{else}} */
};

struct pipe;

struct node {
    enum node_kind kind;
    uint32_t pos, end; /* source span, for error messages */
    struct node *next; /* next node of a list, or next argument of a command */
    union {
        struct {
            const char *ptr;
            size_t len;
        } str;
        struct pipe *pipe;
        struct {
            struct pipe *pipe;
            struct node *list;
            struct node *else_list;
        } ctl;
        struct {
            struct node *base;
            const struct ident *idents;
            uint32_t n;
            int var;
        } field;
        enum fn_id func;
        bool b;
        struct number num;
    } u;
};

struct cmd {
    struct cmd *next;
    uint32_t pos, end;
    struct node *args; /* linked by next; args[0] is the function, field, ... */
    uint32_t n_args;
};

struct pipe {
    uint32_t pos, end;
    bool is_assign;
    uint32_t n_decl;
    int decl[2]; /* variable names */
    struct cmd *cmds;
    uint32_t n_cmds;
};

struct cma_template {
    char *text;
    size_t len;
    struct arena arena;
    struct node *root;
    struct ident *var_names; /* indexed by variable id; 0 is "$" */
    size_t n_var_names;
    size_t max_vars; /* bound on live variables during a render, "$" included */
};

static void line_col(const char *text, size_t pos, unsigned *line, unsigned *col)
{
    unsigned l = 1;
    size_t line_start = 0;
    for (size_t i = 0; i < pos; i++)
        if (text[i] == '\n') {
            l++;
            line_start = i + 1;
        }
    *line = l;
    *col = (unsigned)(pos - line_start + 1);
}

/* cma_err messages are one line. */
static void one_line(struct cma_err *err)
{
    if (!err)
        return;
    for (char *p = err->msg; *p; p++)
        if (*p == '\n' || *p == '\r')
            *p = ' ';
}

/* ------------------------------------------------------------------------------------------ */
/* Parser (parse/parse.go). Functions return NULL (or false) once p->rc is set. */

struct parser {
    struct cma_template *t;
    const struct token *toks;
    size_t n_toks;
    size_t cur;
    const char *lexmsg;
    int *scope; /* variables visible now, innermost last */
    size_t n_scope, cap_scope;
    struct ident *names;  /* interned variable names, indexed by id */
    uint32_t *n_in_scope; /* per id: how many times it is in scope */
    size_t n_names, cap_names;
    int *hash;       /* open addressing: id + 1, 0 = empty */
    size_t cap_hash; /* power of two, > 2 * n_names */
    int range_depth;
    int depth;
    size_t n_decls;
    struct cma_err *err;
    enum cma_errc rc;
    bool go_only; /* the error is a construct Go accepts and this engine does not implement */
};

static void perr(struct parser *p, size_t pos, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static void perr(struct parser *p, size_t pos, const char *fmt, ...)
{
    if (p->rc != CMA_OK)
        return;
    char msg[CMA_ERR_MSG_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    unsigned line, col;
    line_col(p->t->text, pos, &line, &col);
    cma_err_set_at(p->err, CMA_ERR_TEMPLATE_PARSE, NULL, line, col, "%s", msg);
    one_line(p->err);
    p->rc = CMA_ERR_TEMPLATE_PARSE;
}

static void pnomem(struct parser *p)
{
    if (p->rc != CMA_OK)
        return;
    cma_err_set(p->err, CMA_ERR_NOMEM, "out of memory while parsing a template");
    p->rc = CMA_ERR_NOMEM;
}

static void *palloc(struct parser *p, size_t n)
{
    void *m = arena_alloc(&p->t->arena, n);
    if (!m)
        pnomem(p);
    return m;
}

static const struct token *tok_at(const struct parser *p, size_t i)
{
    return &p->toks[i < p->n_toks ? i : p->n_toks - 1];
}

static const struct token *next_tok(struct parser *p)
{
    return tok_at(p, p->cur++);
}

static void backup(struct parser *p)
{
    p->cur--;
}

static const struct token *peek_tok(const struct parser *p)
{
    return tok_at(p, p->cur);
}

static const struct token *next_non_space(struct parser *p)
{
    const struct token *t;
    do
        t = next_tok(p);
    while (t->type == T_SPACE);
    return t;
}

static const struct token *peek_non_space(struct parser *p)
{
    const struct token *t = next_non_space(p);
    backup(p);
    return t;
}

static const char *tok_text(const struct parser *p, const struct token *t)
{
    return p->t->text + t->pos;
}

static uint32_t tok_end(const struct token *t)
{
    return t->pos + t->len;
}

/* Go's item.String(): EOF, <keyword>, "quoted" (at most 10 runes, then ...). */
static const char *tok_string(const struct parser *p, const struct token *t, char *buf, size_t cap)
{
    if (t->type == T_EOF)
        return "EOF";
    if (t->type == T_ERROR)
        return p->lexmsg;
    if (t->type > T_KEYWORD) {
        snprintf(buf, cap, "<%.*s>", (int)t->len, tok_text(p, t));
        return buf;
    }
    const char *s = tok_text(p, t);
    if (count_runes(s, t->len) > 10) {
        quote_fixed(buf, cap - 3, s, t->len, 10);
        strcat(buf, "...");
        return buf;
    }
    return quote_fixed(buf, cap, s, t->len, 0);
}

static void unexpected(struct parser *p, const struct token *t, const char *context)
{
    char buf[96];
    if (t->type == T_ERROR)
        perr(p, t->pos, "%s", p->lexmsg);
    else
        perr(p, t->pos, "unexpected %s in %s", tok_string(p, t, buf, sizeof(buf)), context);
}

static struct node *new_node(struct parser *p, enum node_kind kind, uint32_t pos, uint32_t end)
{
    struct node *n = palloc(p, sizeof(*n));
    if (n) {
        n->kind = kind;
        n->pos = pos;
        n->end = end;
    }
    return n;
}

static size_t hash_name(const char *s, size_t n)
{
    size_t h = 2166136261u;
    for (size_t i = 0; i < n; i++)
        h = (h ^ (unsigned char)s[i]) * 16777619u;
    return h;
}

static bool rehash(struct parser *p, size_t cap)
{
    int *h = calloc(cap, sizeof(*h));
    if (!h) {
        pnomem(p);
        return false;
    }
    for (size_t id = 0; id < p->n_names; id++) {
        size_t i = hash_name(p->names[id].ptr, p->names[id].len) & (cap - 1);
        while (h[i])
            i = (i + 1) & (cap - 1);
        h[i] = (int)id + 1;
    }
    free(p->hash);
    p->hash = h;
    p->cap_hash = cap;
    return true;
}

/* Interns a variable name ("$", "$x"); returns its id or -1. */
static int intern_var(struct parser *p, const char *name, size_t len)
{
    if (p->cap_hash < 2 * (p->n_names + 1) + 2 && !rehash(p, p->cap_hash ? 2 * p->cap_hash : 16))
        return -1;
    size_t i = hash_name(name, len) & (p->cap_hash - 1);
    for (; p->hash[i]; i = (i + 1) & (p->cap_hash - 1)) {
        const struct ident *id = &p->names[p->hash[i] - 1];
        if (id->len == len && memcmp(id->ptr, name, len) == 0)
            return p->hash[i] - 1;
    }
    if (p->n_names == p->cap_names) {
        size_t cap = p->cap_names ? p->cap_names * 2 : 8;
        struct ident *n = realloc(p->names, cap * sizeof(*n));
        if (n)
            p->names = n;
        uint32_t *c = n ? realloc(p->n_in_scope, cap * sizeof(*c)) : NULL;
        if (!c) {
            pnomem(p);
            return -1;
        }
        p->n_in_scope = c;
        p->cap_names = cap;
    }
    p->names[p->n_names].ptr = name;
    p->names[p->n_names].len = (uint32_t)len;
    p->n_in_scope[p->n_names] = 0;
    p->hash[i] = (int)p->n_names + 1;
    return (int)p->n_names++;
}

static bool scope_push(struct parser *p, int id)
{
    if (p->n_scope == p->cap_scope) {
        size_t cap = p->cap_scope ? p->cap_scope * 2 : 8;
        int *s = realloc(p->scope, cap * sizeof(*s));
        if (!s) {
            pnomem(p);
            return false;
        }
        p->scope = s;
        p->cap_scope = cap;
    }
    p->scope[p->n_scope++] = id;
    p->n_in_scope[id]++;
    return true;
}

/* Ends the scope of the variables declared since the scope had n entries. */
static void scope_pop_to(struct parser *p, size_t n)
{
    while (p->n_scope > n)
        p->n_in_scope[p->scope[--p->n_scope]]--;
}

/* ---- numbers (parse.go newNumber, strconv.ParseUint/ParseInt/ParseFloat with base 0) ---- */

static char lower_ascii(char c)
{
    return (char)(c | 0x20);
}

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

static bool parse_uint_go(const char *s0, size_t n0, uint64_t *ret)
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
        } else if (c >= '0' && c <= '9') {
            d = (unsigned)(c - '0');
        } else if (lower_ascii(c) >= 'a' && lower_ascii(c) <= 'z') {
            d = (unsigned)(lower_ascii(c) - 'a' + 10);
        } else {
            return false;
        }
        if (d >= base || v > (UINT64_MAX - d) / base)
            return false;
        v = v * base + d;
    }
    if (underscores && !underscore_ok(s0, n0))
        return false;
    *ret = v;
    return true;
}

static bool parse_int_go(const char *s, size_t n, int64_t *ret)
{
    bool neg = false;
    if (n > 0 && (s[0] == '+' || s[0] == '-')) {
        neg = s[0] == '-';
        s++;
        n--;
    }
    uint64_t u;
    if (!parse_uint_go(s, n, &u))
        return false;
    if (!neg && u > (uint64_t)INT64_MAX)
        return false;
    if (neg && u > (uint64_t)INT64_MAX + 1)
        return false;
    *ret = neg ? (int64_t)(0 - u) : (int64_t)u;
    return true;
}

static bool parse_float_go(const char *s, size_t n, double *ret)
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
static bool unquote_char(const char *s, size_t n, char quote, int32_t *ret, bool *ret_raw,
                         size_t *ret_used)
{
    *ret_raw = false;
    if (n == 0)
        return false;
    unsigned char c = (unsigned char)s[0];
    if (c == (unsigned char)quote)
        return false;
    if (c >= 0x80) {
        *ret = decode_rune(s, n, ret_used);
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
            int x = (h >= '0' && h <= '9')   ? h - '0'
                    : (h >= 'a' && h <= 'f') ? h - 'a' + 10
                    : (h >= 'A' && h <= 'F') ? h - 'A' + 10
                                             : -1;
            if (x < 0)
                return false;
            v = (int32_t)(((uint32_t)v << 4) | (uint32_t)x);
        }
        used += digits;
        if (e == 'x')
            *ret_raw = true;
        else if (!valid_rune(v))
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

static bool contains_any(const char *s, size_t n, const char *set)
{
    for (size_t i = 0; i < n; i++)
        if (s[i] && strchr(set, s[i]))
            return true;
    return false;
}

static bool parse_number(struct parser *p, const struct token *t, struct number *num)
{
    const char *s = tok_text(p, t);
    size_t n = t->len;
    char q[96];
    if (t->type == T_CHAR_CONST) {
        int32_t r;
        bool raw;
        size_t used;
        if (!unquote_char(s + 1, n - 1, '\'', &r, &raw, &used)) {
            perr(p, t->pos, "invalid syntax");
            return false;
        }
        if (used + 2 != n) {
            perr(p, t->pos, "malformed character constant: %.*s", (int)n, s);
            return false;
        }
        num->ideal = IDEAL_INT;
        num->i = r;
        return true;
    }
    double f;
    if (t->type == T_COMPLEX || (n > 0 && s[n - 1] == 'i' && parse_float_go(s, n - 1, &f))) {
        p->go_only = p->rc == CMA_OK;
        perr(p, t->pos, "complex number %s is not supported", quote_fixed(q, sizeof(q), s, n, 0));
        return false;
    }
    uint64_t u = 0;
    int64_t i = 0;
    bool is_uint = parse_uint_go(s, n, &u);
    bool is_int = parse_int_go(s, n, &i);
    bool is_float = is_int || is_uint;
    if (is_int) {
        f = (double)i;
    } else if (is_uint) {
        f = (double)u;
    } else if (parse_float_go(s, n, &f)) {
        if (!contains_any(s, n, ".eEpP")) {
            perr(p, t->pos, "integer overflow: %s", quote_fixed(q, sizeof(q), s, n, 0));
            return false;
        }
        is_float = true;
        if (f >= -9223372036854775808.0 && f < 9223372036854775808.0 && (double)(int64_t)f == f) {
            is_int = true;
            i = (int64_t)f;
        }
        /* Go also sets IsUint here; a uint-only constant overflows int either way. */
    } else {
        perr(p, t->pos, "illegal number syntax: %s", quote_fixed(q, sizeof(q), s, n, 0));
        return false;
    }
    bool hex_int = n > 2 && s[0] == '0' && lower_ascii(s[1]) == 'x' && !contains_any(s, n, "pP");
    num->i = i;
    num->f = f;
    if (is_float && !hex_int && contains_any(s, n, ".eEpP"))
        num->ideal = IDEAL_FLOAT;
    else if (is_int)
        num->ideal = IDEAL_INT;
    else
        num->ideal = IDEAL_OVERFLOW;
    return true;
}

/* strconv.Unquote of a "..." or `...` literal into the arena. */
static bool parse_string(struct parser *p, const struct token *t, struct node *n)
{
    const char *s = tok_text(p, t);
    size_t len = t->len;
    char *out = palloc(p, 3 * len + 1);
    if (!out)
        return false;
    size_t k = 0;
    if (t->type == T_RAW_STRING) {
        for (size_t i = 1; i + 1 < len; i++)
            if (s[i] != '\r')
                out[k++] = s[i];
    } else {
        for (size_t i = 1; i + 1 < len;) {
            int32_t r;
            bool raw;
            size_t used;
            if (!unquote_char(s + i, len - 1 - i, '"', &r, &raw, &used)) {
                perr(p, t->pos, "invalid syntax");
                return false;
            }
            if (raw)
                out[k++] = (char)r;
            else
                k += encode_rune(r, out + k);
            i += used;
        }
    }
    n->u.str.ptr = out;
    n->u.str.len = k;
    return true;
}

/* ---- grammar ---- */

static struct pipe *parse_pipeline(struct parser *p, const char *context, enum tok_type end);
static struct node *parse_control(struct parser *p, const struct token *kw, uint32_t start);

static bool enter(struct parser *p, const struct token *t)
{
    if (++p->depth > CMA_TEMPLATE_MAX_DEPTH) {
        perr(p, t->pos, "template nesting is deeper than %d", CMA_TEMPLATE_MAX_DEPTH);
        return false;
    }
    return true;
}

static struct node *parse_term(struct parser *p)
{
    const struct token *t = next_non_space(p);
    const char *s = tok_text(p, t);
    char q[96];
    struct node *n;
    switch (t->type) {
    case T_IDENT:
        for (size_t i = 0; i < sizeof(functions) / sizeof(functions[0]); i++) {
            if (name_is(functions[i].name, s, t->len)) {
                n = new_node(p, N_FUNC, t->pos, tok_end(t));
                if (n)
                    n->u.func = (enum fn_id)i;
                return n;
            }
        }
        if (name_is("call", s, t->len)) {
            p->go_only = p->rc == CMA_OK;
            perr(p, t->pos, "function \"call\" is not supported: there are no function values");
        } else {
            perr(p, t->pos, "function %s not defined", quote_fixed(q, sizeof(q), s, t->len, 0));
        }
        return NULL;
    case T_DOT:
        return new_node(p, N_DOT, t->pos, tok_end(t));
    case T_NIL:
        return new_node(p, N_NIL, t->pos, tok_end(t));
    case T_VARIABLE: {
        int id = intern_var(p, s, t->len);
        if (id < 0)
            return NULL;
        if (p->n_in_scope[id] == 0) {
            perr(p, t->pos, "undefined variable %s", quote_fixed(q, sizeof(q), s, t->len, 0));
            return NULL;
        }
        n = new_node(p, N_VAR, t->pos, tok_end(t));
        if (n)
            n->u.field.var = id;
        return n;
    }
    case T_FIELD: {
        n = new_node(p, N_FIELD, t->pos, tok_end(t));
        struct ident *id = palloc(p, sizeof(*id));
        if (!n || !id)
            return NULL;
        id->ptr = s + 1;
        id->len = t->len - 1;
        n->u.field.idents = id;
        n->u.field.n = 1;
        return n;
    }
    case T_BOOL:
        n = new_node(p, N_BOOL, t->pos, tok_end(t));
        if (n)
            n->u.b = t->len == 4;
        return n;
    case T_CHAR_CONST:
    case T_COMPLEX:
    case T_NUMBER:
        n = new_node(p, N_NUMBER, t->pos, tok_end(t));
        if (n && !parse_number(p, t, &n->u.num))
            return NULL;
        return n;
    case T_LPAREN: {
        if (!enter(p, t))
            return NULL;
        struct pipe *pipe = parse_pipeline(p, "parenthesized pipeline", T_RPAREN);
        p->depth--;
        if (!pipe)
            return NULL;
        n = new_node(p, N_PIPE, t->pos, pipe->end + 1);
        if (n)
            n->u.pipe = pipe;
        return n;
    }
    case T_STRING:
    case T_RAW_STRING:
        n = new_node(p, N_STRING, t->pos, tok_end(t));
        if (n && !parse_string(p, t, n))
            return NULL;
        return n;
    default:
        backup(p);
        return NULL;
    }
}

/* term .Field* */
static struct node *parse_operand(struct parser *p)
{
    struct node *n = parse_term(p);
    if (!n || peek_tok(p)->type != T_FIELD)
        return n;
    size_t k = 0;
    while (tok_at(p, p->cur + k)->type == T_FIELD)
        k++;
    switch (n->kind) {
    case N_BOOL:
    case N_STRING:
    case N_NUMBER:
    case N_NIL:
    case N_DOT: {
        char q[96];
        perr(p, peek_tok(p)->pos, "unexpected . after term %s",
             quote_fixed(q, sizeof(q), p->t->text + n->pos, n->end - n->pos, 0));
        return NULL;
    }
    default:
        break;
    }
    size_t have = (n->kind == N_FIELD || n->kind == N_VAR) ? n->u.field.n : 0;
    struct ident *ids = palloc(p, (have + k) * sizeof(*ids));
    if (!ids)
        return NULL;
    if (have)
        memcpy(ids, n->u.field.idents, have * sizeof(*ids));
    for (size_t j = 0; j < k; j++) {
        const struct token *t = next_tok(p);
        ids[have + j].ptr = tok_text(p, t) + 1;
        ids[have + j].len = t->len - 1;
        n->end = tok_end(t);
    }
    if (n->kind == N_FIELD || n->kind == N_VAR) {
        n->u.field.idents = ids;
        n->u.field.n = (uint32_t)(have + k);
        return n;
    }
    struct node *chain = new_node(p, N_CHAIN, n->pos, n->end);
    if (!chain)
        return NULL;
    chain->u.field.base = n;
    chain->u.field.idents = ids;
    chain->u.field.n = (uint32_t)k;
    return chain;
}

/* operand (space operand)*, up to "|", ">>" or ")". */
static struct cmd *parse_command(struct parser *p)
{
    struct cmd *c = palloc(p, sizeof(*c));
    if (!c)
        return NULL;
    c->pos = c->end = peek_non_space(p)->pos;
    struct node **tail = &c->args;
    for (;;) {
        peek_non_space(p);
        struct node *op = parse_operand(p);
        if (p->rc != CMA_OK)
            return NULL;
        if (op) {
            *tail = op;
            tail = &op->next;
            c->n_args++;
            c->end = op->end;
        }
        const struct token *t = next_tok(p);
        if (t->type == T_SPACE)
            continue;
        if (t->type == T_RDELIM || t->type == T_RPAREN)
            backup(p);
        else if (t->type != T_PIPE) {
            unexpected(p, t, "operand");
            return NULL;
        }
        break;
    }
    if (c->n_args == 0) {
        perr(p, c->pos, "empty command");
        return NULL;
    }
    return c;
}

static bool add_decl(struct parser *p, struct pipe *pipe, const struct token *v)
{
    int id = intern_var(p, tok_text(p, v), v->len);
    if (id < 0 || !scope_push(p, id))
        return false;
    pipe->decl[pipe->n_decl++] = id;
    p->n_decls++;
    return true;
}

/* declarations? command ("|" command)* */
static struct pipe *parse_pipeline(struct parser *p, const char *context, enum tok_type end)
{
    struct pipe *pipe = palloc(p, sizeof(*pipe));
    if (!pipe)
        return NULL;
    pipe->pos = peek_non_space(p)->pos;
    bool is_range = strcmp(context, "range") == 0;
    for (;;) {
        const struct token *v = peek_non_space(p);
        if (v->type != T_VARIABLE)
            break;
        size_t at_var = p->cur;
        next_tok(p);
        const struct token *nx = peek_non_space(p);
        if (nx->type == T_ASSIGN || nx->type == T_DECLARE) {
            pipe->is_assign = nx->type == T_ASSIGN;
            next_non_space(p);
            if (!add_decl(p, pipe, v))
                return NULL;
        } else if (nx->type == T_CHAR && tok_text(p, nx)[0] == ',') {
            next_non_space(p);
            if (!add_decl(p, pipe, v))
                return NULL;
            if (is_range && pipe->n_decl < 2) {
                const struct token *t = peek_non_space(p);
                if (t->type == T_VARIABLE || t->type == T_RDELIM || t->type == T_RPAREN)
                    continue;
                perr(p, t->pos, "range can only initialize variables");
                return NULL;
            }
            perr(p, nx->pos, "too many declarations in %s", context);
            return NULL;
        } else {
            p->cur = at_var;
        }
        break;
    }
    struct cmd **tail = &pipe->cmds;
    for (;;) {
        const struct token *t = next_non_space(p);
        if (t->type == end) {
            pipe->end = t->pos;
            if (pipe->n_cmds == 0) {
                perr(p, t->pos, "missing value for %s", context);
                return NULL;
            }
            uint32_t stage = 1;
            for (struct cmd *c = pipe->cmds->next; c; c = c->next) {
                stage++;
                enum node_kind k = c->args->kind;
                if (k == N_BOOL || k == N_DOT || k == N_NIL || k == N_NUMBER || k == N_STRING) {
                    perr(p, c->pos, "non executable command in pipeline stage %u", stage);
                    return NULL;
                }
            }
            return pipe;
        }
        switch (t->type) {
        case T_BOOL:
        case T_CHAR_CONST:
        case T_COMPLEX:
        case T_DOT:
        case T_FIELD:
        case T_IDENT:
        case T_NUMBER:
        case T_NIL:
        case T_RAW_STRING:
        case T_STRING:
        case T_VARIABLE:
        case T_LPAREN: {
            backup(p);
            struct cmd *c = parse_command(p);
            if (!c)
                return NULL;
            *tail = c;
            tail = &c->next;
            pipe->n_cmds++;
            break;
        }
        default:
            unexpected(p, t, context);
            return NULL;
        }
    }
}

static struct node *parse_text_or_action(struct parser *p);

/* textOrAction* up to {{end}} or {{else}}, returned in *ret_stop. */
static bool parse_list(struct parser *p, struct node **ret_list, struct node **ret_stop,
                       const struct token *opener, uint32_t start)
{
    struct node **tail = ret_list;
    *ret_list = NULL;
    while (peek_non_space(p)->type != T_EOF) {
        struct node *n = parse_text_or_action(p);
        if (!n)
            return false;
        if (n->kind == N_END || n->kind == N_ELSE) {
            *ret_stop = n;
            return true;
        }
        *tail = n;
        tail = &n->next;
    }
    perr(p, start, "unexpected EOF: no {{end}} for this {{%.*s}}", (int)opener->len,
         tok_text(p, opener));
    return false;
}

/* if/range/with pipeline >> list ({{else}} list | {{else if/with ...}})? {{end}} */
static struct node *parse_control(struct parser *p, const struct token *kw, uint32_t start)
{
    if (!enter(p, kw))
        return NULL;
    const char *context = kw->type == T_IF ? "if" : kw->type == T_RANGE ? "range" : "with";
    enum node_kind kind = kw->type == T_IF ? N_IF : kw->type == T_RANGE ? N_RANGE : N_WITH;
    size_t saved_scope = p->n_scope;
    struct node *n = new_node(p, kind, start, tok_end(kw));
    if (!n)
        return NULL;
    n->u.ctl.pipe = parse_pipeline(p, context, T_RDELIM);
    if (!n->u.ctl.pipe)
        return NULL;
    n->end = n->u.ctl.pipe->end;
    if (kind == N_RANGE)
        p->range_depth++;
    struct node *stop;
    if (!parse_list(p, &n->u.ctl.list, &stop, kw, start))
        return NULL;
    if (kind == N_RANGE)
        p->range_depth--;
    if (stop->kind == N_ELSE) {
        const struct token *t = peek_tok(p);
        if ((kind == N_IF && t->type == T_IF) || (kind == N_WITH && t->type == T_WITH)) {
            next_tok(p);
            n->u.ctl.else_list = parse_control(p, t, stop->pos);
            if (!n->u.ctl.else_list)
                return NULL;
        } else {
            struct node *stop2;
            if (!parse_list(p, &n->u.ctl.else_list, &stop2, kw, start))
                return NULL;
            if (stop2->kind != N_END) {
                perr(p, stop2->pos, "expected end; found {{else}}");
                return NULL;
            }
        }
    }
    scope_pop_to(p, saved_scope);
    p->depth--;
    return n;
}

static struct node *parse_action(struct parser *p, const struct token *ldelim)
{
    const struct token *t = next_non_space(p);
    switch (t->type) {
    case T_BLOCK:
    case T_DEFINE:
    case T_TEMPLATE:
        p->go_only = p->rc == CMA_OK;
        perr(p, t->pos, "{{%.*s}} is not supported: a template cannot define others", (int)t->len,
             tok_text(p, t));
        return NULL;
    case T_BREAK:
    case T_CONTINUE: {
        const char *what = t->type == T_BREAK ? "{{break}}" : "{{continue}}";
        const struct token *t2 = next_non_space(p);
        if (t2->type != T_RDELIM) {
            unexpected(p, t2, what);
            return NULL;
        }
        if (p->range_depth == 0) {
            perr(p, t->pos, "%s outside {{range}}", what);
            return NULL;
        }
        return new_node(p, t->type == T_BREAK ? N_BREAK : N_CONTINUE, ldelim->pos, tok_end(t2));
    }
    case T_ELSE: {
        const struct token *t2 = peek_non_space(p);
        if (t2->type != T_IF && t2->type != T_WITH) {
            t2 = next_non_space(p);
            if (t2->type != T_RDELIM) {
                unexpected(p, t2, "else");
                return NULL;
            }
        }
        return new_node(p, N_ELSE, ldelim->pos, tok_end(t));
    }
    case T_END: {
        const struct token *t2 = next_non_space(p);
        if (t2->type != T_RDELIM) {
            unexpected(p, t2, "end");
            return NULL;
        }
        return new_node(p, N_END, ldelim->pos, tok_end(t2));
    }
    case T_IF:
    case T_RANGE:
    case T_WITH:
        return parse_control(p, t, ldelim->pos);
    default:
        break;
    }
    backup(p);
    struct pipe *pipe = parse_pipeline(p, "command", T_RDELIM);
    if (!pipe)
        return NULL;
    struct node *n = new_node(p, N_ACTION, ldelim->pos, pipe->end);
    if (n)
        n->u.pipe = pipe;
    return n;
}

static struct node *parse_text_or_action(struct parser *p)
{
    const struct token *t = next_non_space(p);
    if (t->type == T_TEXT) {
        struct node *n = new_node(p, N_TEXT, t->pos, tok_end(t));
        if (n) {
            n->u.str.ptr = tok_text(p, t);
            n->u.str.len = t->len;
        }
        return n;
    }
    if (t->type == T_LDELIM)
        return parse_action(p, t);
    unexpected(p, t, "input");
    return NULL;
}

static bool parse_root(struct parser *p)
{
    struct node **tail = &p->t->root;
    while (peek_tok(p)->type != T_EOF) {
        struct node *n = parse_text_or_action(p);
        if (!n)
            return false;
        if (n->kind == N_END || n->kind == N_ELSE) {
            perr(p, n->pos, "unexpected %s", n->kind == N_END ? "{{end}}" : "{{else}}");
            return false;
        }
        *tail = n;
        tail = &n->next;
    }
    return true;
}

/* ------------------------------------------------------------------------------------------ */
/* Executor (exec.go, funcs.go). Functions return 0, or -1 once e->rc is set; walking also
 * returns FLOW_BREAK / FLOW_CONTINUE out of a range body. */

#define FLOW_BREAK 1
#define FLOW_CONTINUE 2

enum arg_type { ARG_ANY, ARG_STRING }; /* interface{} / reflect.Value, or string */

struct slot {
    int id;
    int prev; /* the slot this one hides (same name), or -1 */
    struct val v;
};

struct exec {
    const struct cma_template *t;
    struct cma_buf *out;
    struct cma_buf scratch; /* where function results are formatted */
    struct arena arena;     /* where function results are kept until the render ends */
    struct slot *vars;      /* the variable stack */
    size_t n_vars, cap_vars;
    int *top; /* per variable name: its innermost slot, or -1 */
    uint64_t steps, max_steps;
    struct cma_err *err;
    enum cma_errc rc;
};

static int exec_fail(struct exec *e, uint32_t pos, uint32_t end, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

static int exec_fail(struct exec *e, uint32_t pos, uint32_t end, const char *fmt, ...)
{
    if (e->rc != CMA_OK)
        return -1;
    e->rc = CMA_ERR_TEMPLATE_EXEC;
    char msg[CMA_ERR_MSG_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    unsigned line, col;
    line_col(e->t->text, pos, &line, &col);
    while (end > pos && is_space((unsigned char)e->t->text[end - 1]))
        end--;
    size_t ctx_len = end > pos ? end - pos : 0;
    if (ctx_len > 40)
        ctx_len = rune_prefix_len(e->t->text + pos, ctx_len, 40);
    cma_err_set(e->err, CMA_ERR_TEMPLATE_EXEC, "template: %u:%u: executing at <%.*s>: %s", line,
                col, (int)ctx_len, e->t->text + pos, msg);
    one_line(e->err);
    return -1;
}

/* A failed write into the output or scratch buffer (or the scratch arena). */
static int exec_buf_fail(struct exec *e, enum cma_errc rc, bool output)
{
    if (e->rc != CMA_OK)
        return -1;
    e->rc = rc;
    if (rc == CMA_ERR_TOO_LARGE && output)
        cma_err_set(e->err, rc, "template output is larger than the limit of %zu bytes",
                    e->out->max);
    else if (rc == CMA_ERR_TOO_LARGE)
        cma_err_set(e->err, rc, "template values are larger than the limit of %zu bytes",
                    (size_t)CMA_TEMPLATE_MAX_SCRATCH_BYTES);
    else if (rc == CMA_ERR_TEMPLATE_EXEC)
        cma_err_set(e->err, rc, "template: a value is nested deeper than %d levels",
                    MAX_VALUE_DEPTH);
    else
        cma_err_set(e->err, rc, "out of memory while rendering a template");
    return -1;
}

static int step(struct exec *e, uint32_t pos, uint32_t end)
{
    if (++e->steps <= e->max_steps)
        return 0;
    return exec_fail(e, pos, end, "template execution exceeded %llu steps",
                     (unsigned long long)e->max_steps);
}

static const char *var_name(const struct exec *e, int id, int *len)
{
    *len = (int)e->t->var_names[id].len;
    return e->t->var_names[id].ptr;
}

static int push_var(struct exec *e, int id, const struct val *v, const struct node *at)
{
    if (e->n_vars == e->cap_vars)
        return exec_fail(e, at->pos, at->end, "internal error: too many variables");
    e->vars[e->n_vars].id = id;
    e->vars[e->n_vars].prev = e->top[id];
    e->vars[e->n_vars].v = *v;
    e->top[id] = (int)e->n_vars++;
    return 0;
}

static struct slot *find_var(struct exec *e, int id)
{
    return e->top[id] >= 0 ? &e->vars[e->top[id]] : NULL;
}

/* Drops the variables declared since the stack had mark slots. */
static void pop_vars(struct exec *e, size_t mark)
{
    while (e->n_vars > mark) {
        const struct slot *s = &e->vars[--e->n_vars];
        e->top[s->id] = s->prev;
    }
}

static int undefined_var(struct exec *e, int id, uint32_t pos, uint32_t end)
{
    int len;
    const char *name = var_name(e, id, &len);
    exec_fail(e, pos, end, "undefined variable: %.*s", len, name);
    return -1;
}

/* Copies the scratch buffer into the arena as the string result of a function. */
static int scratch_result(struct exec *e, struct wbuf *w, struct val *ret)
{
    if (w->rc != CMA_OK)
        return exec_buf_fail(e, w->rc, false);
    char *s = arena_dup(&e->arena, cma_buf_str(&e->scratch), e->scratch.len);
    if (!s)
        return exec_buf_fail(e, e->arena.rc, false);
    *ret = val_string(s, e->scratch.len);
    cma_buf_clear(&e->scratch);
    return 0;
}

static struct wbuf scratch_begin(struct exec *e)
{
    cma_buf_clear(&e->scratch);
    return wbuf_of(&e->scratch);
}

static bool truth(const struct val *v)
{
    switch (v->kind) {
    case V_NIL:
        return false;
    case V_STRING:
        return v->u.s.len > 0;
    case V_BOOL:
        return v->u.b;
    case V_INT:
    case V_BYTE:
        return v->u.i != 0;
    case V_FLOAT:
        return v->u.f != 0;
    case V_SLICE:
    case V_MAP:
        return v->u.l.n > 0;
    case V_STRUCT:
        return true;
    }
    return false;
}

static int eval_pipeline(struct exec *e, const struct val *dot, const struct pipe *pipe,
                         struct val *ret);
static int eval_arg(struct exec *e, const struct val *dot, enum arg_type typ, const struct node *n,
                    struct val *ret);

static int validate(struct exec *e, const struct val *v, enum arg_type typ, const struct node *at)
{
    if (typ == ARG_ANY || v->kind == V_STRING)
        return 0;
    if (v->kind == V_NIL)
        return exec_fail(e, at->pos, at->end, "invalid value; expected string");
    return exec_fail(e, at->pos, at->end, "wrong type for value; expected string; got %s",
                     type_name(v));
}

static int not_a_function(struct exec *e, const struct node *head, uint32_t n_args,
                          const struct val *final)
{
    if (n_args > 1 || final)
        return exec_fail(e, head->pos, head->end, "can't give argument to non-function %.*s",
                         (int)(head->end - head->pos), e->t->text + head->pos);
    return 0;
}

/* evalField: .Name on receiver; n_args counts the command's words (the field included). */
static int eval_field(struct exec *e, const struct ident *name, const struct node *at,
                      uint32_t n_args, const struct val *final, const struct val *receiver,
                      struct val *ret)
{
    bool has_args = n_args > 1 || final;
    if (receiver->kind == V_NIL) {
        *ret = val_nil();
        return 0;
    }
    if (receiver->kind == V_STRUCT || receiver->kind == V_MAP) {
        const struct cma_tfield *items = receiver->u.l.items;
        size_t found = receiver->u.l.n;
        for (size_t i = 0; i < receiver->u.l.n && found == receiver->u.l.n; i++)
            if (name_is(field_name(&items[i]), name->ptr, name->len))
                found = i;
        if (receiver->kind == V_MAP && has_args)
            return exec_fail(e, at->pos, at->end, "%.*s is not a method but has arguments",
                             (int)name->len, name->ptr);
        if (found < receiver->u.l.n) {
            if (has_args)
                return exec_fail(e, at->pos, at->end,
                                 "%.*s has arguments but cannot be invoked as function",
                                 (int)name->len, name->ptr);
            *ret = val_from_data(&items[found].value);
            return 0;
        }
        if (receiver->kind == V_MAP) {
            *ret = val_nil();
            return 0;
        }
    }
    return exec_fail(e, at->pos, at->end, "can't evaluate field %.*s in type %s", (int)name->len,
                     name->ptr, type_name(receiver));
}

static int eval_field_chain(struct exec *e, const struct val *receiver, const struct node *n,
                            uint32_t n_args, const struct val *final, struct val *ret)
{
    struct val r = *receiver;
    uint32_t k = n->u.field.n;
    for (uint32_t i = 0; i + 1 < k; i++)
        if (eval_field(e, &n->u.field.idents[i], n, 1, NULL, &r, &r) < 0)
            return -1;
    return eval_field(e, &n->u.field.idents[k - 1], n, n_args, final, &r, ret);
}

static int eval_variable(struct exec *e, const struct node *n, uint32_t n_args,
                         const struct val *final, struct val *ret)
{
    struct slot *s = find_var(e, n->u.field.var);
    if (!s)
        return undefined_var(e, n->u.field.var, n->pos, n->end);
    if (n->u.field.n == 0) {
        if (not_a_function(e, n, n_args, final) < 0)
            return -1;
        *ret = s->v;
        return 0;
    }
    struct val v = s->v;
    return eval_field_chain(e, &v, n, n_args, final, ret);
}

static int eval_chain(struct exec *e, const struct val *dot, const struct node *n, uint32_t n_args,
                      const struct val *final, struct val *ret)
{
    struct val base;
    if (eval_arg(e, dot, ARG_ANY, n->u.field.base, &base) < 0)
        return -1;
    return eval_field_chain(e, &base, n, n_args, final, ret);
}

static int ideal_constant(struct exec *e, const struct node *n, struct val *ret)
{
    switch (n->u.num.ideal) {
    case IDEAL_FLOAT:
        *ret = val_nil();
        ret->kind = V_FLOAT;
        ret->u.f = n->u.num.f;
        return 0;
    case IDEAL_INT:
        *ret = val_int(V_INT, n->u.num.i);
        return 0;
    case IDEAL_OVERFLOW:
        break;
    }
    return exec_fail(e, n->pos, n->end, "%.*s overflows int", (int)(n->end - n->pos),
                     e->t->text + n->pos);
}

/* ---- builtins ---- */

enum basic_kind { K_INVALID, K_BOOL, K_INT, K_FLOAT, K_STRING, K_UINT };

static enum basic_kind basic_kind(const struct val *v)
{
    switch (v->kind) {
    case V_BOOL:
        return K_BOOL;
    case V_INT:
        return K_INT;
    case V_BYTE:
        return K_UINT;
    case V_FLOAT:
        return K_FLOAT;
    case V_STRING:
        return K_STRING;
    default:
        return K_INVALID;
    }
}

static int str_cmp(const struct val *a, const struct val *b)
{
    size_t n = a->u.s.len < b->u.s.len ? a->u.s.len : b->u.s.len;
    int c = n ? memcmp(a->u.s.ptr, b->u.s.ptr, n) : 0;
    if (c)
        return c;
    return a->u.s.len < b->u.s.len ? -1 : a->u.s.len > b->u.s.len;
}

static bool comparable(const struct val *v, int depth)
{
    if (depth > MAX_VALUE_DEPTH || v->kind == V_SLICE || v->kind == V_MAP)
        return false;
    if (v->kind != V_STRUCT)
        return true;
    for (size_t i = 0; i < v->u.l.n; i++) {
        struct val f = val_from_data(&v->u.l.items[i].value);
        if (!comparable(&f, depth + 1))
            return false;
    }
    return true;
}

static bool same_value(const struct val *a, const struct val *b, int depth)
{
    if (a->kind != b->kind)
        return false;
    switch (a->kind) {
    case V_NIL:
        return true;
    case V_STRING:
        return str_cmp(a, b) == 0;
    case V_BOOL:
        return a->u.b == b->u.b;
    case V_INT:
    case V_BYTE:
        return a->u.i == b->u.i;
    case V_FLOAT:
        return a->u.f == b->u.f;
    case V_STRUCT:
        if (a->u.l.n != b->u.l.n || depth > MAX_VALUE_DEPTH)
            return false;
        for (size_t i = 0; i < a->u.l.n; i++) {
            struct val x = val_from_data(&a->u.l.items[i].value);
            struct val y = val_from_data(&b->u.l.items[i].value);
            if (strcmp(field_name(&a->u.l.items[i]), field_name(&b->u.l.items[i])) != 0 ||
                !same_value(&x, &y, depth + 1))
                return false;
        }
        return true;
    default:
        return false;
    }
}

/* funcs.go eq: true if a equals any of b[0..n). Errors go to msg. */
static bool fn_eq(const struct val *a, const struct val *b, size_t n, bool *ret, char *msg,
                  size_t cap)
{
    char v1[64], v2[64];
    if (n == 0) {
        snprintf(msg, cap, "missing argument for comparison");
        return false;
    }
    enum basic_kind k1 = basic_kind(a);
    for (size_t i = 0; i < n; i++) {
        const struct val *x = &b[i];
        enum basic_kind k2 = basic_kind(x);
        bool t = false;
        if (k1 != k2) {
            if (k1 == K_INT && k2 == K_UINT)
                t = a->u.i >= 0 && a->u.i == x->u.i;
            else if (k1 == K_UINT && k2 == K_INT)
                t = x->u.i >= 0 && a->u.i == x->u.i;
            else if (a->kind != V_NIL && x->kind != V_NIL) {
                snprintf(msg, cap, "incompatible types for comparison: %s and %s", type_name(a),
                         type_name(x));
                return false;
            }
        } else {
            switch (k1) {
            case K_BOOL:
                t = a->u.b == x->u.b;
                break;
            case K_FLOAT:
                t = a->u.f == x->u.f;
                break;
            case K_INT:
            case K_UINT:
                t = a->u.i == x->u.i;
                break;
            case K_STRING:
                t = str_cmp(a, x) == 0;
                break;
            case K_INVALID:
                if (a->kind != x->kind && a->kind != V_NIL && x->kind != V_NIL) {
                    snprintf(msg, cap, "non-comparable types %s: %s, %s: %s",
                             value_fixed(v1, sizeof(v1), a), type_name(a), type_name(x),
                             value_fixed(v2, sizeof(v2), x));
                    return false;
                }
                if (a->kind == V_NIL || x->kind == V_NIL) {
                    t = a->kind == x->kind;
                } else if (!comparable(x, 0)) {
                    snprintf(msg, cap, "non-comparable type %s: %s", value_fixed(v1, sizeof(v1), x),
                             type_name(x));
                    return false;
                } else {
                    t = same_value(a, x, 0);
                }
                break;
            }
        }
        if (t) {
            *ret = true;
            return true;
        }
    }
    *ret = false;
    return true;
}

/* funcs.go lt. */
static bool fn_lt(const struct val *a, const struct val *b, bool *ret, char *msg, size_t cap)
{
    enum basic_kind k1 = basic_kind(a), k2 = basic_kind(b);
    if (k1 == K_INVALID || k2 == K_INVALID) {
        snprintf(msg, cap, "invalid type for comparison");
        return false;
    }
    if (k1 != k2) {
        if (k1 == K_INT && k2 == K_UINT)
            *ret = a->u.i < 0 || a->u.i < b->u.i;
        else if (k1 == K_UINT && k2 == K_INT)
            *ret = b->u.i >= 0 && a->u.i < b->u.i;
        else {
            snprintf(msg, cap, "incompatible types for comparison: %s and %s", type_name(a),
                     type_name(b));
            return false;
        }
        return true;
    }
    switch (k1) {
    case K_FLOAT:
        *ret = a->u.f < b->u.f;
        return true;
    case K_INT:
    case K_UINT:
        *ret = a->u.i < b->u.i;
        return true;
    case K_STRING:
        *ret = str_cmp(a, b) < 0;
        return true;
    default:
        snprintf(msg, cap, "invalid type for comparison");
        return false;
    }
}

/* funcs.go indexArg: an int index into a slice or string of length cap. */
static bool index_arg(const struct val *x, size_t cap, size_t *ret, char *msg, size_t mcap)
{
    if (x->kind == V_NIL) {
        snprintf(msg, mcap, "cannot index slice/array with nil");
        return false;
    }
    if (x->kind != V_INT && x->kind != V_BYTE) {
        snprintf(msg, mcap, "cannot index slice/array with type %s", type_name(x));
        return false;
    }
    if (x->u.i < 0 || (uint64_t)x->u.i > cap) {
        snprintf(msg, mcap, "index out of range: %lld", (long long)x->u.i);
        return false;
    }
    *ret = (size_t)x->u.i;
    return true;
}

/* The zero value of a map's element type, as `index` returns for a missing key. */
static struct val map_zero(const struct val *m)
{
    if (m->u.l.n == 0)
        return val_string("", 0);
    switch (m->u.l.items[0].value.kind) {
    case CMA_TV_STRING:
        return val_string("", 0);
    case CMA_TV_BOOL:
        return val_bool(false);
    case CMA_TV_INT:
        return val_int(V_INT, 0);
    case CMA_TV_SLICE:
        return val_list(V_SLICE, NULL, 0);
    case CMA_TV_MAP:
        return val_list(V_MAP, NULL, 0);
    default:
        return val_nil();
    }
}

static bool fn_index(const struct val *a, size_t n, struct val *ret, char *msg, size_t cap)
{
    struct val item = a[0];
    if (item.kind == V_NIL) {
        snprintf(msg, cap, "index of untyped nil");
        return false;
    }
    for (size_t i = 1; i < n; i++) {
        const struct val *x = &a[i];
        size_t k;
        switch (item.kind) {
        case V_NIL:
            snprintf(msg, cap, "index of nil pointer");
            return false;
        case V_SLICE:
        case V_STRING: {
            size_t len = item.kind == V_SLICE ? item.u.l.n : item.u.s.len;
            if (!index_arg(x, len, &k, msg, cap))
                return false;
            if (k == len) {
                snprintf(msg, cap, "reflect: %s index out of range",
                         item.kind == V_SLICE ? "slice" : "string");
                return false;
            }
            if (item.kind == V_SLICE)
                item = val_from_data(&item.u.l.items[k].value);
            else
                item = val_int(V_BYTE, (unsigned char)item.u.s.ptr[k]);
            break;
        }
        case V_MAP: {
            if (x->kind == V_NIL) {
                snprintf(msg, cap, "value is nil; should be of type string");
                return false;
            }
            if (x->kind != V_STRING) {
                snprintf(msg, cap, "value has type %s; should be string", type_name(x));
                return false;
            }
            size_t j = 0;
            while (j < item.u.l.n &&
                   !name_is(field_name(&item.u.l.items[j]), x->u.s.ptr, x->u.s.len))
                j++;
            if (j < item.u.l.n)
                item = val_from_data(&item.u.l.items[j].value);
            else
                item = map_zero(&item);
            break;
        }
        default:
            snprintf(msg, cap, "can't index item of type %s", type_name(&item));
            return false;
        }
    }
    *ret = item;
    return true;
}

static bool fn_slice(const struct val *a, size_t n, struct val *ret, char *msg, size_t cap)
{
    const struct val *item = &a[0];
    if (item->kind == V_NIL) {
        snprintf(msg, cap, "slice of untyped nil");
        return false;
    }
    size_t n_idx = n - 1;
    if (n_idx > 3) {
        snprintf(msg, cap, "too many slice indexes: %zu", n_idx);
        return false;
    }
    size_t len;
    if (item->kind == V_STRING) {
        if (n_idx == 3) {
            snprintf(msg, cap, "cannot 3-index slice a string");
            return false;
        }
        len = item->u.s.len;
    } else if (item->kind == V_SLICE) {
        len = item->u.l.n;
    } else {
        snprintf(msg, cap, "can't slice item of type %s", type_name(item));
        return false;
    }
    size_t idx[3] = {0, len, len};
    for (size_t i = 0; i < n_idx; i++)
        if (!index_arg(&a[1 + i], len, &idx[i], msg, cap))
            return false;
    if (idx[0] > idx[1]) {
        snprintf(msg, cap, "invalid slice index: %zu > %zu", idx[0], idx[1]);
        return false;
    }
    if (n_idx == 3 && idx[1] > idx[2]) {
        snprintf(msg, cap, "invalid slice index: %zu > %zu", idx[1], idx[2]);
        return false;
    }
    if (item->kind == V_STRING)
        *ret = val_string(item->u.s.ptr + idx[0], idx[1] - idx[0]);
    else
        *ret = val_list(V_SLICE, item->u.l.items + idx[0], idx[1] - idx[0]);
    return true;
}

static bool fn_len(const struct val *v, struct val *ret, char *msg, size_t cap)
{
    switch (v->kind) {
    case V_STRING:
        *ret = val_int(V_INT, (int64_t)v->u.s.len);
        return true;
    case V_SLICE:
    case V_MAP:
        *ret = val_int(V_INT, (int64_t)v->u.l.n);
        return true;
    case V_NIL:
        snprintf(msg, cap, "len of untyped nil");
        return false;
    default:
        snprintf(msg, cap, "len of type %s", type_name(v));
        return false;
    }
}

/* evalArgs of html/js/urlquery: one string as is, else Sprint with missing values shown. */
static int eval_args_string(struct exec *e, const struct val *a, size_t n, struct val *ret)
{
    if (n == 1 && a[0].kind == V_STRING) {
        *ret = a[0];
        return 0;
    }
    struct wbuf w = scratch_begin(e);
    struct fspec f = {0};
    for (size_t i = 0; i < n; i++) {
        bool str_i = a[i].kind == V_STRING || a[i].kind == V_NIL;
        bool str_prev = i > 0 && (a[i - 1].kind == V_STRING || a[i - 1].kind == V_NIL);
        if (i > 0 && !str_i && !str_prev)
            w_putc(&w, ' ');
        if (a[i].kind == V_NIL)
            w_puts(&w, "<no value>");
        else
            fmt_arg(&w, &f, &a[i], 'v', 0);
    }
    return scratch_result(e, &w, ret);
}

static int call_builtin(struct exec *e, enum fn_id fn, const struct val *a, size_t n,
                        const struct node *at, struct val *ret)
{
    char msg[256] = "";
    bool ok = true, b = false;
    struct wbuf w;
    switch (fn) {
    case F_PRINT:
    case F_PRINTLN:
    case F_PRINTF:
        w = scratch_begin(e);
        if (fn == F_PRINT)
            do_print(&w, a, n);
        else if (fn == F_PRINTLN)
            do_println(&w, a, n);
        else
            do_printf(&w, a[0].u.s.ptr, a[0].u.s.len, a + 1, n - 1);
        return scratch_result(e, &w, ret);
    case F_HTML:
    case F_JS:
    case F_URLQUERY: {
        struct val s;
        if (eval_args_string(e, a, n, &s) < 0)
            return -1;
        w = scratch_begin(e);
        if (fn == F_HTML)
            html_escape(&w, s.u.s.ptr, s.u.s.len);
        else if (fn == F_JS)
            js_escape(&w, s.u.s.ptr, s.u.s.len);
        else
            url_query_escape(&w, s.u.s.ptr, s.u.s.len);
        return scratch_result(e, &w, ret);
    }
    case F_INDEX:
        ok = fn_index(a, n, ret, msg, sizeof(msg));
        break;
    case F_SLICE:
        ok = fn_slice(a, n, ret, msg, sizeof(msg));
        break;
    case F_LEN:
        ok = fn_len(&a[0], ret, msg, sizeof(msg));
        break;
    case F_NOT:
        *ret = val_bool(!truth(&a[0]));
        break;
    case F_EQ:
    case F_NE:
        ok = fn_eq(&a[0], a + 1, n - 1, &b, msg, sizeof(msg));
        *ret = val_bool(fn == F_NE ? !b : b);
        break;
    case F_LT:
    case F_GE:
        ok = fn_lt(&a[0], &a[1], &b, msg, sizeof(msg));
        *ret = val_bool(fn == F_GE ? !b : b);
        break;
    case F_LE:
    case F_GT:
        ok = fn_lt(&a[0], &a[1], &b, msg, sizeof(msg));
        if (ok && !b)
            ok = fn_eq(&a[0], &a[1], 1, &b, msg, sizeof(msg));
        *ret = val_bool(fn == F_GT ? !b : b);
        break;
    case F_AND:
    case F_OR:
        break; /* evaluated lazily by eval_function */
    }
    if (!ok)
        return exec_fail(e, at->pos, at->end, "error calling %s: %s", functions[fn].name, msg);
    return 0;
}

/* evalFunction/evalCall: head is the function node, followed by n_args - 1 arguments. */
static int eval_function(struct exec *e, const struct val *dot, const struct node *head,
                         uint32_t n_args, const struct node *at, const struct val *final,
                         struct val *ret)
{
    enum fn_id fn = head->u.func;
    const char *name = functions[fn].name;
    size_t n = n_args > 0 ? n_args - 1 : 0;
    size_t n_in = n + (final ? 1 : 0);
    size_t n_fixed = functions[fn].n_fixed;
    if (functions[fn].variadic && n_in < n_fixed)
        return exec_fail(e, at->pos, at->end,
                         "wrong number of args for %s: want at least %zu got %zu", name, n_fixed,
                         n);
    if (!functions[fn].variadic && n_in != n_fixed)
        return exec_fail(e, at->pos, at->end, "wrong number of args for %s: want %zu got %zu", name,
                         n_fixed, n_in);
    const struct node *arg = n > 0 ? head->next : NULL;
    if (fn == F_AND || fn == F_OR) {
        struct val v = val_nil();
        for (size_t i = 0; i < n; i++, arg = arg->next) {
            if (eval_arg(e, dot, ARG_ANY, arg, &v) < 0)
                return -1;
            if (truth(&v) == (fn == F_OR)) {
                *ret = v;
                return 0;
            }
        }
        *ret = final ? *final : v;
        return 0;
    }
    struct val local[LOCAL_SLOTS] = {0};
    struct val *a = local;
    if (n_in > LOCAL_SLOTS) {
        a = malloc(n_in * sizeof(*a));
        if (!a)
            return exec_buf_fail(e, CMA_ERR_NOMEM, false);
    }
    int rc = 0;
    for (size_t i = 0; i < n && rc == 0; i++, arg = arg->next)
        rc = eval_arg(e, dot, fn == F_PRINTF && i == 0 ? ARG_STRING : ARG_ANY, arg, &a[i]);
    if (rc == 0 && final) {
        a[n] = *final;
        rc = validate(e, final, fn == F_PRINTF && n == 0 ? ARG_STRING : ARG_ANY, at);
    }
    if (rc == 0)
        rc = call_builtin(e, fn, a, n_in, at, ret);
    if (a != local)
        free(a);
    return rc;
}

/* evalArg: one argument of a function, or the receiver of a chain. */
static int eval_arg(struct exec *e, const struct val *dot, enum arg_type typ, const struct node *n,
                    struct val *ret)
{
    int rc;
    switch (n->kind) {
    case N_DOT:
        *ret = *dot;
        break;
    case N_NIL:
        if (typ == ARG_STRING)
            return exec_fail(e, n->pos, n->end, "cannot assign nil to string");
        *ret = val_nil();
        return 0;
    case N_FIELD:
        rc = eval_field_chain(e, dot, n, 1, NULL, ret);
        if (rc < 0)
            return rc;
        break;
    case N_VAR:
        if (eval_variable(e, n, 1, NULL, ret) < 0)
            return -1;
        break;
    case N_PIPE:
        if (eval_pipeline(e, dot, n->u.pipe, ret) < 0)
            return -1;
        break;
    case N_FUNC:
        if (eval_function(e, dot, n, 1, n, NULL, ret) < 0)
            return -1;
        break;
    case N_CHAIN:
        if (eval_chain(e, dot, n, 1, NULL, ret) < 0)
            return -1;
        break;
    case N_STRING:
        *ret = val_string(n->u.str.ptr, n->u.str.len);
        return 0;
    case N_BOOL:
    case N_NUMBER:
        if (typ == ARG_STRING)
            return exec_fail(e, n->pos, n->end, "expected string; found %.*s",
                             (int)(n->end - n->pos), e->t->text + n->pos);
        if (n->kind == N_BOOL) {
            *ret = val_bool(n->u.b);
            return 0;
        }
        return ideal_constant(e, n, ret);
    default:
        return exec_fail(e, n->pos, n->end, "can't handle argument");
    }
    return validate(e, ret, typ, n);
}

static int eval_command(struct exec *e, const struct val *dot, const struct cmd *c,
                        const struct val *final, struct val *ret)
{
    const struct node *head = c->args;
    if (step(e, c->pos, c->end) < 0)
        return -1;
    switch (head->kind) {
    case N_FIELD:
        return eval_field_chain(e, dot, head, c->n_args, final, ret);
    case N_CHAIN:
        return eval_chain(e, dot, head, c->n_args, final, ret);
    case N_FUNC: {
        struct node at = {.pos = c->pos, .end = c->end};
        return eval_function(e, dot, head, c->n_args, &at, final, ret);
    }
    case N_VAR:
        return eval_variable(e, head, c->n_args, final, ret);
    default:
        break;
    }
    if (not_a_function(e, head, c->n_args, final) < 0)
        return -1;
    switch (head->kind) {
    case N_PIPE:
        return eval_pipeline(e, dot, head->u.pipe, ret);
    case N_BOOL:
        *ret = val_bool(head->u.b);
        return 0;
    case N_DOT:
        *ret = *dot;
        return 0;
    case N_NIL:
        return exec_fail(e, head->pos, head->end, "nil is not a command");
    case N_NUMBER:
        return ideal_constant(e, head, ret);
    case N_STRING:
        *ret = val_string(head->u.str.ptr, head->u.str.len);
        return 0;
    default:
        return exec_fail(e, head->pos, head->end, "can't evaluate command");
    }
}

/* Evaluates the commands left to right, each getting the previous value as its last argument,
 * then declares or assigns the pipeline's variables. */
static int eval_pipeline(struct exec *e, const struct val *dot, const struct pipe *pipe,
                         struct val *ret)
{
    struct val value = val_nil(), next;
    bool have = false;
    for (const struct cmd *c = pipe->cmds; c; c = c->next) {
        if (eval_command(e, dot, c, have ? &value : NULL, &next) < 0)
            return -1;
        value = next;
        have = true;
    }
    for (uint32_t i = 0; i < pipe->n_decl; i++) {
        int id = pipe->decl[i];
        if (pipe->is_assign) {
            struct slot *s = find_var(e, id);
            if (!s)
                return undefined_var(e, id, pipe->pos, pipe->end);
            s->v = value;
        } else {
            struct node at = {.pos = pipe->pos, .end = pipe->end};
            if (push_var(e, id, &value, &at) < 0)
                return -1;
        }
    }
    *ret = value;
    return 0;
}

static int walk_list(struct exec *e, const struct val *dot, const struct node *list);

static int set_range_var(struct exec *e, const struct pipe *pipe, size_t which, size_t top_n,
                         const struct val *v)
{
    if (pipe->is_assign) {
        struct slot *s = find_var(e, pipe->decl[which]);
        if (!s)
            return undefined_var(e, pipe->decl[which], pipe->pos, pipe->end);
        s->v = *v;
    } else {
        e->vars[e->n_vars - top_n].v = *v;
    }
    return 0;
}

/* One iteration of range: sets $i and $v, walks the body, drops the body's variables. */
static int range_iteration(struct exec *e, const struct node *r, size_t mark,
                           const struct val *index, const struct val *elem)
{
    const struct pipe *pipe = r->u.ctl.pipe;
    if (step(e, r->pos, r->end) < 0)
        return -1;
    if (pipe->n_decl > 0 &&
        set_range_var(e, pipe, 0, 1, pipe->n_decl > 1 && pipe->is_assign ? index : elem) < 0)
        return -1;
    if (pipe->n_decl > 1 && set_range_var(e, pipe, 1, 2, pipe->is_assign ? elem : index) < 0)
        return -1;
    int flow = walk_list(e, elem, r->u.ctl.list);
    pop_vars(e, mark);
    return flow;
}

static int walk_range(struct exec *e, const struct val *dot, const struct node *r)
{
    size_t mark0 = e->n_vars;
    struct val v;
    if (eval_pipeline(e, dot, r->u.ctl.pipe, &v) < 0)
        return -1;
    size_t mark = e->n_vars;
    int flow = 0;
    bool ran = false;
    if (v.kind == V_SLICE) {
        for (size_t i = 0; i < v.u.l.n; i++) {
            struct val index = val_int(V_INT, (int64_t)i);
            struct val elem = val_from_data(&v.u.l.items[i].value);
            ran = true;
            flow = range_iteration(e, r, mark, &index, &elem);
            if (flow < 0 || flow == FLOW_BREAK)
                break;
        }
    } else if (v.kind == V_MAP) {
        struct map_iter it;
        if (!map_iter_init(&it, v.u.l.items, v.u.l.n))
            return exec_buf_fail(e, CMA_ERR_NOMEM, false);
        for (size_t i = 0; i < v.u.l.n; i++) {
            const struct cma_tfield *f = map_iter_at(&it, i);
            struct val key = val_string(field_name(f), strlen(field_name(f)));
            struct val elem = val_from_data(&f->value);
            ran = true;
            flow = range_iteration(e, r, mark, &key, &elem);
            if (flow < 0 || flow == FLOW_BREAK)
                break;
        }
        map_iter_done(&it);
    } else if (v.kind != V_NIL) {
        char buf[96];
        return exec_fail(e, r->u.ctl.pipe->pos, r->u.ctl.pipe->end, "range can't iterate over %s",
                         value_fixed(buf, sizeof(buf), &v));
    }
    pop_vars(e, mark0);
    if (flow < 0)
        return -1;
    if (!ran && r->u.ctl.else_list) {
        /* as in Go, a break in the else list ends this range, not an enclosing one */
        flow = walk_list(e, dot, r->u.ctl.else_list);
        return flow == FLOW_BREAK ? 0 : flow;
    }
    return 0;
}

static int print_value(struct exec *e, const struct val *v)
{
    struct wbuf w = wbuf_of(e->out);
    if (v->kind == V_NIL) {
        w_puts(&w, "<no value>");
    } else {
        struct fspec f = {0};
        fmt_arg(&w, &f, v, 'v', 0);
    }
    return w.rc == CMA_OK ? 0 : exec_buf_fail(e, w.rc, w.rc == CMA_ERR_TOO_LARGE);
}

static int walk_node(struct exec *e, const struct val *dot, const struct node *n)
{
    if (step(e, n->pos, n->end) < 0)
        return -1;
    struct val v;
    switch (n->kind) {
    case N_TEXT: {
        enum cma_errc rc = cma_buf_append(e->out, n->u.str.ptr, n->u.str.len);
        return rc == CMA_OK ? 0 : exec_buf_fail(e, rc, true);
    }
    case N_ACTION:
        if (eval_pipeline(e, dot, n->u.pipe, &v) < 0)
            return -1;
        return n->u.pipe->n_decl == 0 ? print_value(e, &v) : 0;
    case N_IF:
    case N_WITH: {
        size_t mark = e->n_vars;
        if (eval_pipeline(e, dot, n->u.ctl.pipe, &v) < 0)
            return -1;
        int flow = 0;
        if (truth(&v))
            flow = walk_list(e, n->kind == N_WITH ? &v : dot, n->u.ctl.list);
        else if (n->u.ctl.else_list)
            flow = walk_list(e, dot, n->u.ctl.else_list);
        pop_vars(e, mark);
        return flow;
    }
    case N_RANGE:
        return walk_range(e, dot, n);
    case N_BREAK:
        return FLOW_BREAK;
    case N_CONTINUE:
        return FLOW_CONTINUE;
    default:
        return exec_fail(e, n->pos, n->end, "unknown node");
    }
}

static int walk_list(struct exec *e, const struct val *dot, const struct node *list)
{
    for (const struct node *n = list; n; n = n->next) {
        int flow = walk_node(e, dot, n);
        if (flow != 0)
            return flow;
    }
    return 0;
}

/* ------------------------------------------------------------------------------------------ */
/* Public API. */

void cma_template_free(struct cma_template *t)
{
    if (!t)
        return;
    arena_done(&t->arena);
    free(t->text);
    free(t);
}

enum cma_errc cma_template_parse(const char *text, size_t len, struct cma_template **ret,
                                 struct cma_err *reterr)
{
    return cma_template_parse_go(text, len, ret, NULL, reterr);
}

enum cma_errc cma_template_parse_go(const char *text, size_t len, struct cma_template **ret,
                                    bool *go_only, struct cma_err *reterr)
{
    if (go_only)
        *go_only = false;
    if (!ret || (!text && len > 0))
        return cma_err_set(reterr, CMA_ERR_INTERNAL, "cma_template_parse: NULL argument");
    if (len > CMA_TEMPLATE_MAX_BYTES)
        return cma_err_set(reterr, CMA_ERR_TEMPLATE_PARSE,
                           "template is %zu bytes, more than the limit of %zu", len,
                           CMA_TEMPLATE_MAX_BYTES);
    struct cma_template *t = calloc(1, sizeof(*t));
    if (!t)
        return cma_err_set(reterr, CMA_ERR_NOMEM, "out of memory while parsing a template");
    arena_init(&t->arena, 0);
    t->text = malloc(len + 1);
    if (!t->text) {
        cma_template_free(t);
        return cma_err_set(reterr, CMA_ERR_NOMEM, "out of memory while parsing a template");
    }
    if (len)
        memcpy(t->text, text, len);
    t->text[len] = '\0';
    t->len = len;

    struct lexer l;
    memset(&l, 0, sizeof(l));
    l.in = t->text;
    l.len = len;
    struct parser p;
    memset(&p, 0, sizeof(p));
    p.t = t;
    p.err = reterr;
    if (!lex_all(&l)) {
        pnomem(&p);
    } else {
        p.toks = l.toks;
        p.n_toks = l.n_toks;
        p.lexmsg = l.msg;
        if (intern_var(&p, "$", 1) == 0 && scope_push(&p, 0))
            parse_root(&p);
    }
    if (p.rc == CMA_OK) {
        t->n_var_names = p.n_names;
        t->var_names = palloc(&p, p.n_names * sizeof(*t->var_names));
        if (t->var_names)
            memcpy(t->var_names, p.names, p.n_names * sizeof(*t->var_names));
        t->max_vars = p.n_decls + 1;
    }
    free(l.toks);
    free(p.scope);
    free(p.names);
    free(p.n_in_scope);
    free(p.hash);
    if (p.rc != CMA_OK) {
        if (go_only)
            *go_only = p.go_only && p.rc == CMA_ERR_TEMPLATE_PARSE;
        cma_template_free(t);
        return p.rc;
    }
    *ret = t;
    return CMA_OK;
}

static bool pipe_uses_field(const struct pipe *pipe, const char *name);

static bool node_uses_field(const struct node *n, const char *name)
{
    for (; n; n = n->next) {
        switch (n->kind) {
        case N_FIELD:
            if (name_is(name, n->u.field.idents[0].ptr, n->u.field.idents[0].len))
                return true;
            break;
        case N_VAR:
            if (n->u.field.var == 0 && n->u.field.n > 0 &&
                name_is(name, n->u.field.idents[0].ptr, n->u.field.idents[0].len))
                return true;
            break;
        case N_CHAIN:
            if (node_uses_field(n->u.field.base, name))
                return true;
            break;
        case N_ACTION:
        case N_PIPE:
            if (pipe_uses_field(n->u.pipe, name))
                return true;
            break;
        case N_IF:
        case N_RANGE:
        case N_WITH:
            if (pipe_uses_field(n->u.ctl.pipe, name) || node_uses_field(n->u.ctl.list, name) ||
                node_uses_field(n->u.ctl.else_list, name))
                return true;
            break;
        default:
            break;
        }
    }
    return false;
}

static bool pipe_uses_field(const struct pipe *pipe, const char *name)
{
    for (const struct cmd *c = pipe->cmds; c; c = c->next)
        if (node_uses_field(c->args, name))
            return true;
    return false;
}

bool cma_template_uses_field(const struct cma_template *t, const char *name)
{
    return t && name && node_uses_field(t->root, name);
}

enum cma_errc cma_template_render_limited(const struct cma_template *t,
                                          const struct cma_tvalue *dot, struct cma_buf *out,
                                          uint64_t max_steps, struct cma_err *reterr)
{
    if (!t || !out)
        return cma_err_set(reterr, CMA_ERR_INTERNAL, "cma_template_render: NULL argument");
    struct exec e;
    memset(&e, 0, sizeof(e));
    e.t = t;
    e.out = out;
    e.err = reterr;
    e.max_steps = max_steps ? max_steps : CMA_TEMPLATE_MAX_STEPS;
    cma_buf_init(&e.scratch, CMA_TEMPLATE_MAX_SCRATCH_BYTES);
    arena_init(&e.arena, CMA_TEMPLATE_MAX_SCRATCH_BYTES);
    struct slot local[LOCAL_SLOTS];
    int local_top[LOCAL_SLOTS] = {0};
    e.vars = local;
    e.cap_vars = LOCAL_SLOTS;
    e.top = local_top;
    if (t->max_vars > LOCAL_SLOTS) {
        e.vars = malloc(t->max_vars * sizeof(*e.vars));
        e.cap_vars = t->max_vars;
    }
    if (t->n_var_names > LOCAL_SLOTS)
        e.top = malloc(t->n_var_names * sizeof(*e.top));
    if (e.vars && e.top) {
        for (size_t i = 0; i < t->n_var_names; i++)
            e.top[i] = -1;
        struct val d = dot ? val_from_data(dot) : val_nil();
        struct node at = {.pos = 0, .end = 0};
        if (push_var(&e, 0, &d, &at) == 0)
            walk_list(&e, &d, t->root);
    } else {
        exec_buf_fail(&e, CMA_ERR_NOMEM, false);
    }
    if (e.vars != local)
        free(e.vars);
    if (e.top != local_top)
        free(e.top);
    cma_buf_done(&e.scratch);
    arena_done(&e.arena);
    return e.rc;
}

enum cma_errc cma_template_render(const struct cma_template *t, const struct cma_tvalue *dot,
                                  struct cma_buf *out, struct cma_err *reterr)
{
    return cma_template_render_limited(t, dot, out, CMA_TEMPLATE_MAX_STEPS, reterr);
}
