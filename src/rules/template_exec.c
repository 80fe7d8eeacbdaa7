/* template_exec.c: the template executor (Go's exec.go and funcs.go): walks the tree of
 * template_parse.c over the caller's data with Go's semantics for fields, variables, pipelines,
 * if/with/range (break, continue, else), truth, comparison (eq, ne, lt, ...), index, slice,
 * len, and/or, not, and the printing and escaping builtins (template_fmt.c, template_text.c).
 * A render keeps its state on its own stack (variable slots, a step counter, one scratch
 * buffer and one scratch arena for computed strings) and writes text and plain fields straight
 * into the output; errors say where in the text they happened. Owns
 * cma_template_render_limited(). */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "template_internal.h"

#define LOCAL_SLOTS 16 /* variable slots and call arguments kept on the stack */

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
    struct cma_arena arena; /* where function results are kept until the render ends */
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
    cma_tpl_line_col(e->t->text, pos, &line, &col);
    while (end > pos && is_space((unsigned char)e->t->text[end - 1]))
        end--;
    size_t ctx_len = end > pos ? end - pos : 0;
    if (ctx_len > 40)
        ctx_len = cma_utf8_prefix_len(e->t->text + pos, ctx_len, 40);
    cma_err_set(e->err, CMA_ERR_TEMPLATE_EXEC, "template: %u:%u: executing at <%.*s>: %s", line,
                col, (int)ctx_len, e->t->text + pos, msg);
    cma_tpl_one_line(e->err);
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
    char *s = cma_arena_strndup(&e->arena, cma_buf_str(&e->scratch), e->scratch.len);
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
                     cma_tpl_type_name(v));
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
            if (cma_tpl_name_is(field_name(&items[i]), name->ptr, name->len))
                found = i;
        if (receiver->kind == V_MAP && has_args)
            return exec_fail(e, at->pos, at->end, "%.*s is not a method but has arguments",
                             (int)name->len, name->ptr);
        if (found < receiver->u.l.n) {
            if (has_args)
                return exec_fail(e, at->pos, at->end,
                                 "%.*s has arguments but cannot be invoked as function",
                                 (int)name->len, name->ptr);
            *ret = cma_tpl_val_from_data(&items[found].value);
            return 0;
        }
        if (receiver->kind == V_MAP) {
            *ret = val_nil();
            return 0;
        }
    }
    return exec_fail(e, at->pos, at->end, "can't evaluate field %.*s in type %s", (int)name->len,
                     name->ptr, cma_tpl_type_name(receiver));
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
        struct val f = cma_tpl_val_from_data(&v->u.l.items[i].value);
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
            struct val x = cma_tpl_val_from_data(&a->u.l.items[i].value);
            struct val y = cma_tpl_val_from_data(&b->u.l.items[i].value);
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
                snprintf(msg, cap, "incompatible types for comparison: %s and %s",
                         cma_tpl_type_name(a), cma_tpl_type_name(x));
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
                             cma_tpl_value_fixed(v1, sizeof(v1), a), cma_tpl_type_name(a),
                             cma_tpl_type_name(x), cma_tpl_value_fixed(v2, sizeof(v2), x));
                    return false;
                }
                if (a->kind == V_NIL || x->kind == V_NIL) {
                    t = a->kind == x->kind;
                } else if (!comparable(x, 0)) {
                    snprintf(msg, cap, "non-comparable type %s: %s",
                             cma_tpl_value_fixed(v1, sizeof(v1), x), cma_tpl_type_name(x));
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
            snprintf(msg, cap, "incompatible types for comparison: %s and %s", cma_tpl_type_name(a),
                     cma_tpl_type_name(b));
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
        snprintf(msg, mcap, "cannot index slice/array with type %s", cma_tpl_type_name(x));
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
                item = cma_tpl_val_from_data(&item.u.l.items[k].value);
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
                snprintf(msg, cap, "value has type %s; should be string", cma_tpl_type_name(x));
                return false;
            }
            size_t j = 0;
            while (j < item.u.l.n &&
                   !cma_tpl_name_is(field_name(&item.u.l.items[j]), x->u.s.ptr, x->u.s.len))
                j++;
            if (j < item.u.l.n)
                item = cma_tpl_val_from_data(&item.u.l.items[j].value);
            else
                item = map_zero(&item);
            break;
        }
        default:
            snprintf(msg, cap, "can't index item of type %s", cma_tpl_type_name(&item));
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
        snprintf(msg, cap, "can't slice item of type %s", cma_tpl_type_name(item));
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
        snprintf(msg, cap, "len of type %s", cma_tpl_type_name(v));
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
            cma_tpl_fmt_arg(&w, &f, &a[i], 'v', 0);
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
            cma_tpl_do_print(&w, a, n);
        else if (fn == F_PRINTLN)
            cma_tpl_do_println(&w, a, n);
        else
            cma_tpl_do_printf(&w, a[0].u.s.ptr, a[0].u.s.len, a + 1, n - 1);
        return scratch_result(e, &w, ret);
    case F_HTML:
    case F_JS:
    case F_URLQUERY: {
        struct val s;
        if (eval_args_string(e, a, n, &s) < 0)
            return -1;
        w = scratch_begin(e);
        if (fn == F_HTML)
            cma_tpl_html_escape(&w, s.u.s.ptr, s.u.s.len);
        else if (fn == F_JS)
            cma_tpl_js_escape(&w, s.u.s.ptr, s.u.s.len);
        else
            cma_tpl_url_query_escape(&w, s.u.s.ptr, s.u.s.len);
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
    case CMA_TPL_F__COUNT:
        break; /* and, or: evaluated lazily by eval_function */
    }
    if (!ok)
        return exec_fail(e, at->pos, at->end, "error calling %s: %s", cma_tpl_functions[fn].name,
                         msg);
    return 0;
}

/* evalFunction/evalCall: head is the function node, followed by n_args - 1 arguments. */
static int eval_function(struct exec *e, const struct val *dot, const struct node *head,
                         uint32_t n_args, const struct node *at, const struct val *final,
                         struct val *ret)
{
    enum fn_id fn = head->u.func;
    const char *name = cma_tpl_functions[fn].name;
    size_t n = n_args > 0 ? n_args - 1 : 0;
    size_t n_in = n + (final ? 1 : 0);
    size_t n_fixed = cma_tpl_functions[fn].n_fixed;
    if (cma_tpl_functions[fn].variadic && n_in < n_fixed)
        return exec_fail(e, at->pos, at->end,
                         "wrong number of args for %s: want at least %zu got %zu", name, n_fixed,
                         n);
    if (!cma_tpl_functions[fn].variadic && n_in != n_fixed)
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
            struct val elem = cma_tpl_val_from_data(&v.u.l.items[i].value);
            ran = true;
            flow = range_iteration(e, r, mark, &index, &elem);
            if (flow < 0 || flow == FLOW_BREAK)
                break;
        }
    } else if (v.kind == V_MAP) {
        struct map_iter it;
        if (!cma_tpl_map_iter_init(&it, v.u.l.items, v.u.l.n))
            return exec_buf_fail(e, CMA_ERR_NOMEM, false);
        for (size_t i = 0; i < v.u.l.n; i++) {
            const struct cma_tfield *f = cma_tpl_map_iter_at(&it, i);
            struct val key = val_string(field_name(f), strlen(field_name(f)));
            struct val elem = cma_tpl_val_from_data(&f->value);
            ran = true;
            flow = range_iteration(e, r, mark, &key, &elem);
            if (flow < 0 || flow == FLOW_BREAK)
                break;
        }
        cma_tpl_map_iter_done(&it);
    } else if (v.kind != V_NIL) {
        char buf[96];
        return exec_fail(e, r->u.ctl.pipe->pos, r->u.ctl.pipe->end, "range can't iterate over %s",
                         cma_tpl_value_fixed(buf, sizeof(buf), &v));
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
        cma_tpl_fmt_arg(&w, &f, v, 'v', 0);
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
    cma_arena_init(&e.arena, CMA_TEMPLATE_MAX_SCRATCH_BYTES);
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
        struct val d = dot ? cma_tpl_val_from_data(dot) : val_nil();
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
    cma_arena_done(&e.arena);
    return e.rc;
}
