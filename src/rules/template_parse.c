/* template_parse.c: the template parser (Go's parse/parse.go): tokens from template_lex.c
 * become an immutable tree (nodes, commands, pipelines) allocated in the template's arena, with
 * Go's look-ahead, its scoping of variables (names interned to ids in a hash table, so the
 * executor finds them in O(1)), number and string literals decoded at parse time
 * (template_literal.c), Go's error texts and line:column positions, and a nesting limit that
 * also bounds the executor's recursion. Constructs Go accepts and this engine does not
 * implement (define, template, block, call, complex numbers) are rejected and marked so.
 * Owns cma_template_parse_go(). */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cma/hash.h"
#include "template_internal.h"

const struct cma_tpl_func cma_tpl_functions[CMA_TPL_F__COUNT] = {
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
    struct cma_htab vars; /* names by text: id + 1 */
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
    cma_tpl_line_col(p->t->text, pos, &line, &col);
    cma_err_set_at(p->err, CMA_ERR_TEMPLATE_PARSE, NULL, line, col, "%s", msg);
    cma_tpl_one_line(p->err);
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
    void *m = cma_arena_alloc(&p->t->arena, n);
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
    if (cma_utf8_count(s, t->len) > 10) {
        cma_tpl_quote_fixed(buf, cap - 3, s, t->len, 10);
        strcat(buf, "...");
        return buf;
    }
    return cma_tpl_quote_fixed(buf, cap, s, t->len, 0);
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

static bool name_eq(const void *ctx, size_t index, const void *key)
{
    const struct parser *p = ctx;
    const struct ident *k = key;
    const struct ident *id = &p->names[index];
    return id->len == k->len && memcmp(id->ptr, k->ptr, k->len) == 0;
}

static uint64_t name_hash(const void *ctx, size_t index)
{
    const struct parser *p = ctx;
    return cma_hash_str(p->names[index].ptr, p->names[index].len);
}

/* Interns a variable name ("$", "$x"); returns its id or -1. */
static int intern_var(struct parser *p, const char *name, size_t len)
{
    if (cma_htab_reserve(&p->vars, p->n_names, name_hash, p) != CMA_OK) {
        pnomem(p);
        return -1;
    }
    struct ident key = {name, (uint32_t)len};
    size_t *slot = cma_htab_find(&p->vars, cma_hash_str(name, len), &key, name_eq, p);
    if (*slot)
        return (int)*slot - 1;
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
    *slot = p->n_names + 1;
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
        if (!cma_tpl_unquote_char(s + 1, n - 1, '\'', &r, &raw, &used)) {
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
    if (t->type == T_COMPLEX ||
        (n > 0 && s[n - 1] == 'i' && cma_tpl_parse_float_go(s, n - 1, &f))) {
        p->go_only = p->rc == CMA_OK;
        perr(p, t->pos, "complex number %s is not supported",
             cma_tpl_quote_fixed(q, sizeof(q), s, n, 0));
        return false;
    }
    uint64_t u = 0;
    int64_t i = 0;
    bool is_uint = cma_tpl_parse_uint_go(s, n, &u);
    bool is_int = cma_tpl_parse_int_go(s, n, &i);
    bool is_float = is_int || is_uint;
    if (is_int) {
        f = (double)i;
    } else if (is_uint) {
        f = (double)u;
    } else if (cma_tpl_parse_float_go(s, n, &f)) {
        if (!contains_any(s, n, ".eEpP")) {
            perr(p, t->pos, "integer overflow: %s", cma_tpl_quote_fixed(q, sizeof(q), s, n, 0));
            return false;
        }
        is_float = true;
        if (f >= -9223372036854775808.0 && f < 9223372036854775808.0 && (double)(int64_t)f == f) {
            is_int = true;
            i = (int64_t)f;
        }
        /* Go also sets IsUint here; a uint-only constant overflows int either way. */
    } else {
        perr(p, t->pos, "illegal number syntax: %s", cma_tpl_quote_fixed(q, sizeof(q), s, n, 0));
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
            if (!cma_tpl_unquote_char(s + i, len - 1 - i, '"', &r, &raw, &used)) {
                perr(p, t->pos, "invalid syntax");
                return false;
            }
            if (raw)
                out[k++] = (char)r;
            else
                k += cma_utf8_encode(r, out + k);
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
        for (size_t i = 0; i < CMA_TPL_F__COUNT; i++) {
            if (cma_tpl_name_is(cma_tpl_functions[i].name, s, t->len)) {
                n = new_node(p, N_FUNC, t->pos, tok_end(t));
                if (n)
                    n->u.func = (enum fn_id)i;
                return n;
            }
        }
        if (cma_tpl_name_is("call", s, t->len)) {
            p->go_only = p->rc == CMA_OK;
            perr(p, t->pos, "function \"call\" is not supported: there are no function values");
        } else {
            perr(p, t->pos, "function %s not defined",
                 cma_tpl_quote_fixed(q, sizeof(q), s, t->len, 0));
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
            perr(p, t->pos, "undefined variable %s",
                 cma_tpl_quote_fixed(q, sizeof(q), s, t->len, 0));
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
             cma_tpl_quote_fixed(q, sizeof(q), p->t->text + n->pos, n->end - n->pos, 0));
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
    cma_arena_init(&t->arena, 0);
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
    if (!cma_tpl_lex_all(&l)) {
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
    cma_htab_done(&p.vars);
    if (p.rc != CMA_OK) {
        if (go_only)
            *go_only = p.go_only && p.rc == CMA_ERR_TEMPLATE_PARSE;
        cma_template_free(t);
        return p.rc;
    }
    *ret = t;
    return CMA_OK;
}
