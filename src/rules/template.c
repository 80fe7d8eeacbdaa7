/* template.c: the Go text/template engine behind metricsQuery, containerQuery, nodeQuery and
 * resources.template: lexing, parsing into an immutable tree, rendering into a cma_buf. This
 * file holds the public entry points that need no engine internals (free, parse, render,
 * uses_field) and the error helpers every part shares; the engine is split by job:
 *   template_lex.c      lexer: text -> token array (parse/lex.go)
 *   template_literal.c  Go literal syntax: integers, floats, character escapes (strconv)
 *   template_parse.c    parser: tokens -> tree in the template's arena (parse/parse.go)
 *   template_exec.c     executor and builtins (exec.go, funcs.go)
 *   template_fmt.c      values and Go's fmt (print, println, printf, %v of composites)
 *   template_text.c     output sink, Unicode classes, strconv quoting, html/js/urlquery
 *   template_internal.h what they share
 * The arena (cma/arena.h) and UTF-8 (cma/utf8.h) come from base/.
 *
 * DESIGN
 * - Lexer, parser and executor follow Go's text/template (parse/lex.go, parse/parse.go,
 *   exec.go, funcs.go) step by step: same token kinds, same look-ahead, same scoping of
 *   variables, same error texts where Go has them. fmt's printing rules (%v of slices, maps and
 *   structs, printf verbs, flags, width, precision, %!verb(type=value)) are reimplemented in
 *   template_fmt.c.
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
#include <stdlib.h>

#include "template_internal.h"

void cma_tpl_line_col(const char *text, size_t pos, unsigned *line, unsigned *col)
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
void cma_tpl_one_line(struct cma_err *err)
{
    if (!err)
        return;
    for (char *p = err->msg; *p; p++)
        if (*p == '\n' || *p == '\r')
            *p = ' ';
}

void cma_template_free(struct cma_template *t)
{
    if (!t)
        return;
    cma_arena_done(&t->arena);
    free(t->text);
    free(t);
}

enum cma_errc cma_template_parse(const char *text, size_t len, struct cma_template **ret,
                                 struct cma_err *reterr)
{
    return cma_template_parse_go(text, len, ret, NULL, reterr);
}

static bool pipe_uses_field(const struct pipe *pipe, const char *name);

static bool node_uses_field(const struct node *n, const char *name)
{
    for (; n; n = n->next) {
        switch (n->kind) {
        case N_FIELD:
            if (cma_tpl_name_is(name, n->u.field.idents[0].ptr, n->u.field.idents[0].len))
                return true;
            break;
        case N_VAR:
            if (n->u.field.var == 0 && n->u.field.n > 0 &&
                cma_tpl_name_is(name, n->u.field.idents[0].ptr, n->u.field.idents[0].len))
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

enum cma_errc cma_template_render(const struct cma_template *t, const struct cma_tvalue *dot,
                                  struct cma_buf *out, struct cma_err *reterr)
{
    return cma_template_render_limited(t, dot, out, CMA_TEMPLATE_MAX_STEPS, reterr);
}
