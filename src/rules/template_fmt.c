/* template_fmt.c: the template engine's values and Go's fmt over them. Values (struct val)
 * are borrowed views of the caller's cma_tvalue data plus what literals and builtins produce;
 * this file converts the data, names Go types generically and iterates maps in Go's sorted key
 * order. fmt's printing rules are reimplemented here: %v of slices, maps and structs (with %+v
 * and an approximated %#v), integer, float, string and rune verbs with flags, width and
 * precision, argument indexes ("%[2]d"), and Go's error forms (%!verb(type=value),
 * %!(EXTRA ...), %!(MISSING)); Sprint, Sprintln and Sprintf are the builtins print, println
 * and printf. Floats follow strconv's shortest formatting. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "template_internal.h"

/* ------------------------------------------------------------------------------------------ */
/* Values: borrowed views of the caller's data, plus what literals and functions produce. */

struct val cma_tpl_val_from_data(const struct cma_tvalue *tv)
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

/* True if the C string name is exactly p[0..n). */
bool cma_tpl_name_is(const char *name, const char *p, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (name[i] == '\0' || name[i] != p[i])
            return false;
    return name[n] == '\0';
}

/* Generic Go type names: the data carries kinds, not Go types. */
const char *cma_tpl_type_name(const struct val *v)
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

static int cmp_fields(const void *a, const void *b)
{
    const struct cma_tfield *const *fa = a;
    const struct cma_tfield *const *fb = b;
    return strcmp(field_name(*fa), field_name(*fb));
}

bool cma_tpl_map_iter_init(struct map_iter *it, const struct cma_tfield *items, size_t n)
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

const struct cma_tfield *cma_tpl_map_iter_at(const struct map_iter *it, size_t i)
{
    return it->sorted ? it->sorted[i] : &it->items[i];
}

void cma_tpl_map_iter_done(struct map_iter *it)
{
    free(it->sorted);
    it->sorted = NULL;
}

/* ------------------------------------------------------------------------------------------ */
/* fmt: Go's Sprint, Sprintln and Sprintf over struct val. */

/* Pads what was written since mark to the width, as fmt's pad() does. */
static void pad_from(struct wbuf *w, size_t mark, const struct fspec *f)
{
    if (!f->wid_present || f->wid <= 0 || w->rc != CMA_OK)
        return;
    size_t runes = cma_utf8_count(w_data(w) + mark, w_len(w) - mark);
    if ((size_t)f->wid <= runes)
        return;
    size_t n = (size_t)f->wid - runes;
    if (f->minus)
        cma_tpl_w_fill(w, ' ', n);
    else
        cma_tpl_w_insert_fill(w, mark, f->zero ? '0' : ' ', n);
}

static void pad_str(struct wbuf *w, const struct fspec *f, const char *s, size_t n)
{
    size_t mark = w_len(w);
    cma_tpl_w_put(w, s, n);
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
        w_puts(w, cma_tpl_type_name(v));
        w_putc(w, '=');
        cma_tpl_fmt_arg(w, f, v, 'v', 0);
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
                cma_tpl_w_fill(w, ' ', (size_t)f->wid);
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
    cma_tpl_w_fill(w, '0', zeros);
    cma_tpl_w_put(w, tmp + i, nd);
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
        w_rune(w, u > CMA_UTF8_MAX_RUNE ? CMA_UTF8_RUNE_ERROR : (int64_t)u);
        pad_from(w, mark, f);
        return;
    case 'q':
        cma_tpl_w_quote_rune(w, u > CMA_UTF8_MAX_RUNE ? CMA_UTF8_RUNE_ERROR : (int64_t)u, f->plus);
        pad_from(w, mark, f);
        return;
    case 'U':
        cma_tpl_w_unicode(w, u, f->prec_present && f->prec > 4 ? (size_t)f->prec : 4, f->sharp);
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
        cma_tpl_w_put(w, d->d, m);
        cma_tpl_w_fill(w, '0', (size_t)d->dp - m);
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
        cma_tpl_w_put(w, small, (size_t)n);
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
    cma_tpl_w_put(w, big, (size_t)n);
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
            cma_tpl_w_fill(w, '0', (size_t)f->wid - len - 1);
            cma_tpl_w_put(w, num, len);
        } else {
            w_putc(w, sign);
            cma_tpl_w_put(w, num, len);
            pad_from(w, mark, f);
        }
    } else {
        cma_tpl_w_put(w, num, len);
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
        n = cma_utf8_prefix_len(s, n, (size_t)f->prec);
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
            cma_tpl_w_fill(w, f->zero && !f->minus ? '0' : ' ', (size_t)f->wid);
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
        cma_tpl_w_fill(w, f->zero ? '0' : ' ', (size_t)f->wid - width);
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
        cma_tpl_w_fill(w, ' ', (size_t)f->wid - width);
}

static bool can_backquote(const char *s, size_t n)
{
    for (size_t i = 0; i < n;) {
        size_t size;
        int32_t r = cma_utf8_decode(s + i, n - i, &size);
        i += size;
        if (size > 1) {
            if (r == 0xFEFF)
                return false;
            continue;
        }
        if (r == CMA_UTF8_RUNE_ERROR || r == '`' || (r < ' ' && r != '\t') || r == 0x7F)
            return false;
    }
    return true;
}

static void fmt_q(struct wbuf *w, const struct fspec *f, const char *s, size_t n)
{
    if (f->prec_present)
        n = cma_utf8_prefix_len(s, n, (size_t)f->prec);
    size_t mark = w_len(w);
    if (f->sharp && can_backquote(s, n)) {
        w_putc(w, '`');
        cma_tpl_w_put(w, s, n);
        w_putc(w, '`');
    } else {
        cma_tpl_w_quote(w, s, n, f->plus);
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
        w_puts(w, cma_tpl_type_name(v));
        w_putc(w, '{');
    } else {
        w_puts(w, v->kind == V_SLICE ? "[" : v->kind == V_MAP ? "map[" : "{");
    }
    if (v->kind == V_MAP) {
        struct map_iter it;
        if (!cma_tpl_map_iter_init(&it, items, n)) {
            w->rc = CMA_ERR_NOMEM;
            return;
        }
        for (size_t i = 0; i < n && w->rc == CMA_OK; i++) {
            const struct cma_tfield *e = cma_tpl_map_iter_at(&it, i);
            const char *key = field_name(e);
            struct val k = val_string(key, strlen(key));
            struct val x = cma_tpl_val_from_data(&e->value);
            if (i > 0)
                w_puts(w, sep);
            cma_tpl_fmt_arg(w, f, &k, verb, depth + 1);
            w_putc(w, ':');
            cma_tpl_fmt_arg(w, f, &x, verb, depth + 1);
        }
        cma_tpl_map_iter_done(&it);
    } else {
        for (size_t i = 0; i < n && w->rc == CMA_OK; i++) {
            struct val x = cma_tpl_val_from_data(&items[i].value);
            if (i > 0)
                w_puts(w, sep);
            if (v->kind == V_STRUCT && (f->plus_v || f->sharp_v)) {
                w_puts(w, field_name(&items[i]));
                w_putc(w, ':');
            }
            cma_tpl_fmt_arg(w, f, &x, verb, depth + 1);
        }
    }
    w_putc(w, v->kind == V_SLICE || v->kind == V_MAP ? (f->sharp_v ? '}' : ']') : '}');
}

/* fmt's printArg / printValue. */
void cma_tpl_fmt_arg(struct wbuf *w, const struct fspec *f, const struct val *v, int32_t verb,
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
        const char *name = cma_tpl_type_name(v);
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
void cma_tpl_do_print(struct wbuf *w, const struct val *a, size_t n)
{
    struct fspec f = {0};
    for (size_t i = 0; i < n; i++) {
        if (i > 0 && !is_string_val(&a[i]) && !is_string_val(&a[i - 1]))
            w_putc(w, ' ');
        cma_tpl_fmt_arg(w, &f, &a[i], 'v', 0);
    }
}

/* fmt.Sprintln: spaces between all operands, a newline at the end. */
void cma_tpl_do_println(struct wbuf *w, const struct val *a, size_t n)
{
    struct fspec f = {0};
    for (size_t i = 0; i < n; i++) {
        if (i > 0)
            w_putc(w, ' ');
        cma_tpl_fmt_arg(w, &f, &a[i], 'v', 0);
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
void cma_tpl_do_printf(struct wbuf *w, const char *format, size_t end, const struct val *a,
                       size_t n)
{
    struct printf_state ps = {0, false, true, false};
    size_t i = 0;
    while (i < end && w->rc == CMA_OK) {
        ps.good_argnum = true;
        size_t lasti = i;
        while (i < end && format[i] != '%')
            i++;
        if (i > lasti)
            cma_tpl_w_put(w, format + lasti, i - lasti);
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
                    cma_tpl_fmt_arg(w, &f, &a[ps.argnum++], c, 0);
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
        int32_t verb = cma_utf8_decode(format + i, end - i, &size);
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
            cma_tpl_fmt_arg(w, &f, &a[ps.argnum++], verb, 0);
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
                w_puts(w, cma_tpl_type_name(&a[k]));
                w_putc(w, '=');
                cma_tpl_fmt_arg(w, &f, &a[k], 'v', 0);
            }
        }
        w_putc(w, ')');
    }
}

/* Go's %v of one value into a fixed array, for error messages. */
const char *cma_tpl_value_fixed(char *dst, size_t cap, const struct val *v)
{
    struct wbuf w = wbuf_fixed(dst, cap);
    struct fspec f = {0};
    cma_tpl_fmt_arg(&w, &f, v, 'v', 0);
    return dst;
}
