/* template_lex.c: the template lexer (Go's parse/lex.go with "<<" and ">>" as delimiters):
 * the whole text becomes one token array that ends with T_EOF or T_ERROR, with Go's token
 * kinds, trim markers ("<<- " and " ->>"), comments, keywords, numbers, quoted strings and
 * characters, and Go's error texts ("unclosed action", "unterminated quoted string", ...). The
 * parser (template_parse.c) reads the array with random access. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "template_internal.h"

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

enum lex_state { LS_TEXT, LS_INSIDE, LS_DONE };

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
    return at < l->len ? (int32_t)cma_utf8_decode(l->in + at, l->len - at, &size) : -1;
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
                      cma_tpl_unicode_fixed(u, sizeof(u), rune_at(l, l->pos)));
}

/* After the '.' of a field or the '$' of a variable. */
static enum lex_state lex_field_or_variable(struct lexer *l, enum tok_type type)
{
    if (at_terminator(l))
        return lex_emit(l, type == T_VARIABLE ? T_VARIABLE : T_DOT);
    while (l->pos < l->len) {
        size_t size;
        if (!cma_tpl_is_alnum_rune(cma_utf8_decode(l->in + l->pos, l->len - l->pos, &size)))
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
        if (!cma_tpl_is_alnum_rune(cma_utf8_decode(l->in + l->pos, l->len - l->pos, &size)))
            break;
        l->pos += size;
    }
    if (!at_terminator(l))
        return lex_bad_char(l);
    const char *word = l->in + l->start;
    size_t n = l->pos - l->start;
    for (size_t i = 0; i < sizeof(keywords) / sizeof(keywords[0]); i++)
        if (cma_tpl_name_is(keywords[i].word, word, n))
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
        if (cma_tpl_is_alnum_rune(cma_utf8_decode(l->in + l->pos, l->len - l->pos, &size))) {
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
        return lex_errorf(
            l, l->start, "bad number syntax: %s",
            cma_tpl_quote_fixed(q, sizeof(q), l->in + l->start, l->pos - l->start, 0));
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
    if (cma_tpl_is_alnum_rune(r)) {
        l->pos--;
        return lex_identifier(l);
    }
    if (r >= 0x20 && r < 0x7F)
        return lex_emit(l, T_CHAR);
    char u[32];
    return lex_errorf(l, l->start, "unrecognized character in action: %s",
                      cma_tpl_unicode_fixed(u, sizeof(u), r));
}

/* Lexes the whole text; false when out of memory. */
bool cma_tpl_lex_all(struct lexer *l)
{
    enum lex_state s = LS_TEXT;
    while (s != LS_DONE)
        s = s == LS_TEXT ? lex_text(l) : lex_inside(l);
    return !l->nomem;
}
