/* template_internal.h: what the parts of the template engine share (template.c says what each
 * part owns): the output sink, the value type, fmt's operand spec, tokens, the parse tree, and
 * the functions one part calls in another (prefixed cma_tpl_). Private to src/rules/template*.c;
 * include/cma/template.h is the contract. */
#ifndef CMA_TEMPLATE_INTERNAL_H
#define CMA_TEMPLATE_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "cma/arena.h"
#include "cma/buf.h"
#include "cma/err.h"
#include "cma/template.h"
#include "cma/utf8.h"

#define MAX_VALUE_DEPTH 64 /* nesting of data printed by fmt (cuts cycles) */

/* The first write of the sink is cma_tpl_w_put (template_text.c); the inline helpers wrap it. */
struct wbuf;
void cma_tpl_w_put(struct wbuf *w, const void *p, size_t n);

/* ------------------------------------------------------------------------------------------ */
/* Output sink: a cma_buf, or a fixed array (for error messages, silently truncated). */

struct wbuf {
    struct cma_buf *buf;
    char *fixed;
    size_t fixed_len;
    size_t fixed_cap; /* >= 1 when fixed is used */
    enum cma_errc rc; /* first failure; later writes are ignored */
};

static inline struct wbuf wbuf_of(struct cma_buf *b)
{
    struct wbuf w = {b, NULL, 0, 0, CMA_OK};
    return w;
}

static inline struct wbuf wbuf_fixed(char *p, size_t cap)
{
    struct wbuf w = {NULL, p, 0, cap, CMA_OK};
    p[0] = '\0';
    return w;
}

static inline size_t w_len(const struct wbuf *w)
{
    return w->buf ? w->buf->len : w->fixed_len;
}

static inline char *w_data(const struct wbuf *w)
{
    return w->buf ? w->buf->ptr : w->fixed;
}

static inline void w_putc(struct wbuf *w, char c)
{
    cma_tpl_w_put(w, &c, 1);
}

static inline void w_puts(struct wbuf *w, const char *s)
{
    cma_tpl_w_put(w, s, strlen(s));
}

static inline void w_rune(struct wbuf *w, int64_t r)
{
    char tmp[4];
    cma_tpl_w_put(w, tmp, cma_utf8_encode(r, tmp));
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

static inline struct val val_nil(void)
{
    struct val v;
    memset(&v, 0, sizeof(v));
    v.kind = V_NIL;
    return v;
}

static inline struct val val_string(const char *p, size_t n)
{
    struct val v = val_nil();
    v.kind = V_STRING;
    v.u.s.ptr = p ? p : "";
    v.u.s.len = p ? n : 0;
    return v;
}

static inline struct val val_bool(bool b)
{
    struct val v = val_nil();
    v.kind = V_BOOL;
    v.u.b = b;
    return v;
}

static inline struct val val_int(enum val_kind kind, int64_t i)
{
    struct val v = val_nil();
    v.kind = kind;
    v.u.i = i;
    return v;
}

static inline struct val val_list(enum val_kind kind, const struct cma_tfield *items, size_t n)
{
    struct val v = val_nil();
    v.kind = kind;
    v.u.l.items = items;
    v.u.l.n = items ? n : 0;
    return v;
}

static inline const char *field_name(const struct cma_tfield *f)
{
    return f->name ? f->name : "";
}

/* Iterates a map in Go's order (keys sorted bytewise); allocates only if the data is unsorted. */
struct map_iter {
    const struct cma_tfield *items;
    const struct cma_tfield **sorted; /* NULL when items are already in order */
    size_t n;
};

/* One printf operand's flags, width and precision. */
struct fspec {
    bool sharp, zero, plus, minus, space; /* flags */
    bool sharp_v, plus_v;                 /* %#v, %+v */
    bool wid_present, prec_present;
    int wid, prec;
};

/* ------------------------------------------------------------------------------------------ */
/* Tokens (template_lex.c). */

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

/* ------------------------------------------------------------------------------------------ */
/* Parse tree (template_parse.c builds it, template_exec.c walks it). */

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
    CMA_TPL_F__COUNT,
};

struct cma_tpl_func {
    const char *name;
    unsigned n_fixed; /* parameters before the variadic part (or all of them) */
    bool variadic;
};

/* The builtins by id (template_parse.c). */
extern const struct cma_tpl_func cma_tpl_functions[CMA_TPL_F__COUNT];

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
    struct cma_arena arena;
    struct node *root;
    struct ident *var_names; /* indexed by variable id; 0 is "$" */
    size_t n_var_names;
    size_t max_vars; /* bound on live variables during a render, "$" included */
};

static inline bool is_space(int c)
{
    return c == ' ' || c == '\t' || c == '\r' || c == '\n';
}

static inline char lower_ascii(char c)
{
    return (char)(c | 0x20);
}

/* ------------------------------------------------------------------------------------------ */
/* Calls across parts. */

/* template_text.c: the output sink, Unicode classes, strconv quoting, escapers. */
bool cma_tpl_is_alnum_rune(int32_t r);
void cma_tpl_w_fill(struct wbuf *w, char c, size_t n);
/* Inserts n copies of c at byte offset at (at <= length). */
void cma_tpl_w_insert_fill(struct wbuf *w, size_t at, char c, size_t n);
/* strconv.Quote (quote '"') and QuoteToASCII. */
void cma_tpl_w_quote(struct wbuf *w, const char *s, size_t n, bool ascii_only);
/* strconv.QuoteRune and QuoteRuneToASCII. */
void cma_tpl_w_quote_rune(struct wbuf *w, int64_t r, bool ascii_only);
/* Go's %q of s into a fixed array, for error messages; max_runes > 0 truncates like %.Nq. */
const char *cma_tpl_quote_fixed(char *dst, size_t cap, const char *s, size_t n, size_t max_runes);
/* Go's %U and %#U: "U+0041 'A'", at least prec hex digits. */
void cma_tpl_w_unicode(struct wbuf *w, uint64_t u, size_t prec, bool sharp);
const char *cma_tpl_unicode_fixed(char *dst, size_t cap, int32_t r);
void cma_tpl_html_escape(struct wbuf *w, const char *s, size_t n);
void cma_tpl_js_escape(struct wbuf *w, const char *s, size_t n);
void cma_tpl_url_query_escape(struct wbuf *w, const char *s, size_t n);

/* template_fmt.c: values and Go's fmt. */
struct val cma_tpl_val_from_data(const struct cma_tvalue *tv);
/* True if the C string name is exactly p[0..n). */
bool cma_tpl_name_is(const char *name, const char *p, size_t n);
/* Generic Go type names: the data carries kinds, not Go types. */
const char *cma_tpl_type_name(const struct val *v);
bool cma_tpl_map_iter_init(struct map_iter *it, const struct cma_tfield *items, size_t n);
const struct cma_tfield *cma_tpl_map_iter_at(const struct map_iter *it, size_t i);
void cma_tpl_map_iter_done(struct map_iter *it);
/* fmt's printArg / printValue. */
void cma_tpl_fmt_arg(struct wbuf *w, const struct fspec *f, const struct val *v, int32_t verb,
                     int depth);
/* fmt.Sprint, fmt.Sprintln and fmt.Sprintf. */
void cma_tpl_do_print(struct wbuf *w, const struct val *a, size_t n);
void cma_tpl_do_println(struct wbuf *w, const struct val *a, size_t n);
void cma_tpl_do_printf(struct wbuf *w, const char *format, size_t end, const struct val *a,
                       size_t n);
/* %v of v into a fixed array, for error messages. */
const char *cma_tpl_value_fixed(char *dst, size_t cap, const struct val *v);

/* template_lex.c: lexes the whole text; false when out of memory. */
bool cma_tpl_lex_all(struct lexer *l);

/* template_literal.c: Go's strconv for literals (base prefixes, underscores, escapes). */
bool cma_tpl_parse_uint_go(const char *s0, size_t n0, uint64_t *ret);
bool cma_tpl_parse_int_go(const char *s, size_t n, int64_t *ret);
bool cma_tpl_parse_float_go(const char *s, size_t n, double *ret);
bool cma_tpl_unquote_char(const char *s, size_t n, char quote, int32_t *ret, bool *ret_raw,
                          size_t *ret_used);

/* template.c: 1-based line and byte column of pos; error messages made one line. */
void cma_tpl_line_col(const char *text, size_t pos, unsigned *line, unsigned *col);
void cma_tpl_one_line(struct cma_err *err);

#endif
