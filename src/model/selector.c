/* selector.c: Kubernetes label selectors (k8s.io/apimachinery/pkg/labels): parsing, validation,
 * matching, the canonical String() form, and their PromQL matchers (prometheus-adapter's
 * metricSelector conversion). Also Go %q quoting for PromQL string literals.
 *
 * DESIGN
 * - The lexer and the recursive-descent parser follow labels/selector.go token by token
 *   (scan everything first, then lookahead/consume with the Values context that turns `in` and
 *   `notin` into identifiers), so accepted input, value sets and error texts are Kubernetes'.
 *   Each token keeps its byte offset so errors carry a column.
 * - Requirements are sorted by key with a stable sort. Kubernetes uses sort.Sort, which is an
 *   insertion sort (stable) up to 12 elements; beyond that its order of equal keys may differ
 *   from ours. Values are a sorted, deduplicated set, as sets.String.List() returns them.
 * - Differences from Kubernetes, on purpose: a NUL byte is an error (Kubernetes stops reading
 *   there and ignores the rest), `a==b` is printed back as `a=b` (same meaning), and validation
 *   messages leave out Kubernetes' "(e.g. ..., regex used for validation is ...)" tail.
 * - PromQL conversion copies prometheus-adapter: label names are inserted verbatim and regex
 *   values (`in`/`notin`) are joined with '|' without regex escaping (upstream behaviour; a
 *   value with '.' matches loosely). Only the quoting is ours: Go's strconv.Quote. */
#include "cma/selector.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cma/unicode.h"
#include "cma/utf8.h"
#include "cma/str.h"

#define SELECTOR_MAX_BYTES ((size_t)1 << 20)
#define MSG_INPUT_MAX 96
#define MSG_LITERAL_MAX 64
#define LABEL_VALUE_MAX 63
#define QUALIFIED_NAME_MAX 63
#define DNS1123_SUBDOMAIN_MAX 253

enum tok {
    TOK_EOS,
    TOK_CLOSE_PAR,
    TOK_COMMA,
    TOK_NOT,
    TOK_DOUBLE_EQUALS,
    TOK_EQUALS,
    TOK_GT,
    TOK_IDENT,
    TOK_IN,
    TOK_LT,
    TOK_NOT_EQUALS,
    TOK_NOT_IN,
    TOK_OPEN_PAR,
};

struct token {
    enum tok type;
    const char *lit;
    size_t lit_len;
    size_t pos; /* byte offset in the input */
};

enum context { CTX_KEY_AND_OPERATOR, CTX_VALUES };

struct value_ref {
    const char *s;
    size_t len;
    size_t pos;
};

struct parser {
    const char *text;
    size_t len;
    struct token *tokens;
    size_t n_tokens;
    size_t cur;
    struct value_ref *vals; /* values of the requirement being parsed */
    size_t n_vals;
    size_t vals_cap;
    struct cma_err *err;
};

/* ---- Go %q quoting ---------------------------------------------------------------------- */

static enum cma_errc quote_body(struct cma_buf *out, const char *s, size_t len)
{
    static const char hex[] = "0123456789abcdef";
    enum cma_errc rc = CMA_OK;
    for (size_t i = 0; i < len && rc == CMA_OK;) {
        /* A run of printable ASCII other than '"' and '\\' (strconv.IsPrint is true for all of
         * 0x20-0x7e) is copied as it is, in one append: a 1,000-pod name regex is 11 KB of it. */
        size_t run = i;
        while (run < len && s[run] >= 0x20 && s[run] < 0x7f && s[run] != '"' && s[run] != '\\')
            run++;
        if (run > i) {
            rc = cma_buf_append(out, s + i, run - i);
            i = run;
            continue;
        }
        unsigned char c = (unsigned char)s[i];
        size_t w = 1;
        uint32_t r = c;
        if (c >= 0x80) {
            r = cma_utf8_decode(s + i, len - i, &w);
            if (r == 0xFFFD && w == 1) {
                char esc[4] = {'\\', 'x', hex[c >> 4], hex[c & 15]};
                rc = cma_buf_append(out, esc, 4);
                i++;
                continue;
            }
        }
        char esc[16];
        size_t n = 0;
        if (r == '"' || r == '\\') {
            esc[n++] = '\\';
            esc[n++] = (char)r;
        } else if (cma_unicode_is_print(r)) {
            rc = cma_buf_append(out, s + i, w);
            i += w;
            continue;
        } else {
            const char *named = NULL;
            switch (r) {
            case '\a':
                named = "\\a";
                break;
            case '\b':
                named = "\\b";
                break;
            case '\f':
                named = "\\f";
                break;
            case '\n':
                named = "\\n";
                break;
            case '\r':
                named = "\\r";
                break;
            case '\t':
                named = "\\t";
                break;
            case '\v':
                named = "\\v";
                break;
            default:
                break;
            }
            if (named) {
                memcpy(esc, named, 2);
                n = 2;
            } else if (r < ' ' || r == 0x7F) {
                n = (size_t)snprintf(esc, sizeof(esc), "\\x%02x", (unsigned)r);
            } else if (r < 0x10000) {
                n = (size_t)snprintf(esc, sizeof(esc), "\\u%04x", (unsigned)r);
            } else {
                n = (size_t)snprintf(esc, sizeof(esc), "\\U%08x", (unsigned)r);
            }
        }
        rc = cma_buf_append(out, esc, n);
        i += w;
    }
    return rc;
}

enum cma_errc cma_promql_quote(struct cma_buf *out, const char *s, size_t len)
{
    enum cma_errc rc = cma_buf_appendc(out, '"');
    if (rc == CMA_OK && len)
        rc = quote_body(out, s, len);
    if (rc == CMA_OK)
        rc = cma_buf_appendc(out, '"');
    return rc;
}

/* ---- errors ----------------------------------------------------------------------------- */

/* Quotes at most `max` bytes of s for a message (Go %q, "..." appended when cut). */
static void quote_for_msg(char *dst, size_t cap, const char *s, size_t len, size_t max)
{
    struct cma_buf b;
    cma_buf_init(&b, cap);
    bool cut = len > max;
    if (cma_promql_quote(&b, s, cut ? max : len) == CMA_OK && cut)
        cma_buf_appends(&b, "...");
    snprintf(dst, cap, "%s", b.ptr ? b.ptr : "\"\"");
    cma_buf_done(&b);
}

static enum cma_errc sel_error(struct parser *p, size_t pos, bool requirement, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

static enum cma_errc sel_error(struct parser *p, size_t pos, bool requirement, const char *fmt, ...)
{
    char input[MSG_INPUT_MAX * 4 + 16];
    char detail[CMA_ERR_MSG_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(detail, sizeof(detail), fmt, ap);
    va_end(ap);
    quote_for_msg(input, sizeof(input), p->text, p->len, MSG_INPUT_MAX);
    return cma_err_set_at(p->err, CMA_ERR_BAD_SELECTOR, NULL, 0, (unsigned)(pos + 1),
                          "invalid label selector %s: %s%s", input,
                          requirement ? "unable to parse requirement: " : "", detail);
}

static enum cma_errc sel_nomem(struct parser *p)
{
    return cma_err_set(p->err, CMA_ERR_NOMEM, "out of memory parsing a label selector");
}

/* A token literal for "found '%s'" (Go prints it raw; long ones are cut here). */
static int lit_len_for_msg(const struct token *t)
{
    return (int)(t->lit_len > MSG_LITERAL_MAX ? MSG_LITERAL_MAX : t->lit_len);
}

/* ---- lexer ------------------------------------------------------------------------------ */

static bool is_whitespace(char c)
{
    return c == ' ' || c == '\t' || c == '\r' || c == '\n';
}

static bool is_special(char c)
{
    switch (c) {
    case '=':
    case '!':
    case '(':
    case ')':
    case ',':
    case '>':
    case '<':
        return true;
    default:
        return false;
    }
}

static void lex_all(struct parser *p)
{
    size_t pos = 0;
    for (;;) {
        while (pos < p->len && is_whitespace(p->text[pos]))
            pos++;
        struct token *t = &p->tokens[p->n_tokens++];
        t->pos = pos;
        t->lit = p->text + pos;
        if (pos >= p->len) {
            t->type = TOK_EOS;
            t->lit_len = 0;
            return;
        }
        char c = p->text[pos];
        if (is_special(c)) {
            char next = pos + 1 < p->len ? p->text[pos + 1] : '\0';
            t->lit_len = 1;
            if ((c == '=' || c == '!') && next == '=') {
                t->lit_len = 2;
                t->type = c == '=' ? TOK_DOUBLE_EQUALS : TOK_NOT_EQUALS;
            } else {
                switch (c) {
                case '=':
                    t->type = TOK_EQUALS;
                    break;
                case '!':
                    t->type = TOK_NOT;
                    break;
                case '(':
                    t->type = TOK_OPEN_PAR;
                    break;
                case ')':
                    t->type = TOK_CLOSE_PAR;
                    break;
                case ',':
                    t->type = TOK_COMMA;
                    break;
                case '>':
                    t->type = TOK_GT;
                    break;
                default:
                    t->type = TOK_LT;
                    break;
                }
            }
            pos += t->lit_len;
            continue;
        }
        size_t start = pos;
        while (pos < p->len && !is_special(p->text[pos]) && !is_whitespace(p->text[pos]))
            pos++;
        t->lit_len = pos - start;
        if (t->lit_len == 2 && memcmp(t->lit, "in", 2) == 0)
            t->type = TOK_IN;
        else if (t->lit_len == 5 && memcmp(t->lit, "notin", 5) == 0)
            t->type = TOK_NOT_IN;
        else
            t->type = TOK_IDENT;
    }
}

static enum tok in_context(enum tok type, enum context ctx)
{
    if (ctx == CTX_VALUES && (type == TOK_IN || type == TOK_NOT_IN))
        return TOK_IDENT;
    return type;
}

static const struct token *lookahead(const struct parser *p, enum context ctx, enum tok *ret)
{
    const struct token *t = &p->tokens[p->cur];
    *ret = in_context(t->type, ctx);
    return t;
}

static const struct token *consume(struct parser *p, enum context ctx, enum tok *ret)
{
    const struct token *t = lookahead(p, ctx, ret);
    if (p->cur + 1 < p->n_tokens)
        p->cur++;
    return t;
}

/* ---- validation (k8s.io/apimachinery/pkg/util/validation) -------------------------------- */

static bool is_alnum(char c)
{
    return (c >= '0' && c <= '9') || (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z');
}

/* ([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9] */
static bool is_qualified_name_part(const char *s, size_t len)
{
    if (len == 0 || !is_alnum(s[0]) || !is_alnum(s[len - 1]))
        return false;
    for (size_t i = 1; i + 1 < len; i++)
        if (!is_alnum(s[i]) && s[i] != '-' && s[i] != '_' && s[i] != '.')
            return false;
    return true;
}

/* [a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)* */
static bool is_dns1123_subdomain(const char *s, size_t len)
{
    size_t label_start = 0;
    for (size_t i = 0; i <= len; i++) {
        if (i < len && s[i] != '.') {
            char c = s[i];
            if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-'))
                return false;
            continue;
        }
        size_t n = i - label_start;
        if (n == 0 || s[label_start] == '-' || s[i - 1] == '-')
            return false;
        label_start = i + 1;
    }
    return true;
}

static const char name_part_msg[] =
    "name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end "
    "with an alphanumeric character";

/* IsQualifiedName: writes Go's messages joined by "; " into msg; returns false when invalid. */
static bool check_label_key(const char *k, size_t len, char *msg, size_t cap)
{
    msg[0] = '\0';
    size_t o = 0;
#define ADD_MSG(...)                                                                               \
    do {                                                                                           \
        if (o > 0 && o < cap)                                                                      \
            o += (size_t)snprintf(msg + o, cap - o, "; ");                                         \
        if (o < cap)                                                                               \
            o += (size_t)snprintf(msg + o, cap - o, __VA_ARGS__);                                  \
    } while (0)
    const char *slash = memchr(k, '/', len);
    const char *name = k;
    size_t name_len = len;
    if (slash) {
        if (memchr(slash + 1, '/', len - (size_t)(slash + 1 - k))) {
            ADD_MSG("a qualified name must consist of alphanumeric characters, '-', '_' or '.', "
                    "and must start and end with an alphanumeric character with an optional DNS "
                    "subdomain prefix and '/' (e.g. 'example.com/MyName')");
            return false;
        }
        size_t prefix_len = (size_t)(slash - k);
        name = slash + 1;
        name_len = len - prefix_len - 1;
        if (prefix_len == 0) {
            ADD_MSG("prefix part must be non-empty");
        } else {
            if (prefix_len > DNS1123_SUBDOMAIN_MAX)
                ADD_MSG("prefix part must be no more than %d characters", DNS1123_SUBDOMAIN_MAX);
            if (!is_dns1123_subdomain(k, prefix_len))
                ADD_MSG("prefix part a lowercase RFC 1123 subdomain must consist of lower case "
                        "alphanumeric characters, '-' or '.', and must start and end with an "
                        "alphanumeric character");
        }
    }
    if (name_len == 0)
        ADD_MSG("name part must be non-empty");
    else if (name_len > QUALIFIED_NAME_MAX)
        ADD_MSG("name part must be no more than %d characters", QUALIFIED_NAME_MAX);
    if (!is_qualified_name_part(name, name_len))
        ADD_MSG("%s", name_part_msg);
#undef ADD_MSG
    return o == 0;
}

/* IsValidLabelValue. */
static bool check_label_value(const char *v, size_t len, char *msg, size_t cap)
{
    msg[0] = '\0';
    size_t o = 0;
    if (len > LABEL_VALUE_MAX)
        o += (size_t)snprintf(msg, cap, "must be no more than %d characters", LABEL_VALUE_MAX);
    if (len > 0 && !is_qualified_name_part(v, len))
        snprintf(msg + o, cap - o,
                 "%sa valid label must be an empty string or consist of "
                 "alphanumeric characters, '-', '_' or '.', and must start and end with an "
                 "alphanumeric character",
                 o ? "; " : "");
    return msg[0] == '\0';
}

/* strconv.ParseInt(s, 10, 64). */
static bool parse_int64(const char *s, size_t len, int64_t *ret)
{
    size_t i = 0;
    bool neg = false;
    if (len > 0 && (s[0] == '+' || s[0] == '-')) {
        neg = s[0] == '-';
        i = 1;
    }
    if (i >= len)
        return false;
    uint64_t limit = neg ? (uint64_t)INT64_MAX + 1 : (uint64_t)INT64_MAX;
    uint64_t v = 0;
    for (; i < len; i++) {
        if (s[i] < '0' || s[i] > '9')
            return false;
        unsigned d = (unsigned)(s[i] - '0');
        if (v > (limit - d) / 10)
            return false;
        v = v * 10 + d;
    }
    *ret = neg ? (v == (uint64_t)INT64_MAX + 1 ? INT64_MIN : -(int64_t)v) : (int64_t)v;
    return true;
}

/* ---- parser ----------------------------------------------------------------------------- */

static void req_done(struct cma_selector_req *r)
{
    free(r->key);
    for (size_t i = 0; i < r->n_values; i++)
        free(r->values[i]);
    free(r->values);
}

void cma_selector_free(struct cma_selector *sel)
{
    if (!sel)
        return;
    for (size_t i = 0; i < sel->n_reqs; i++)
        req_done(&sel->reqs[i]);
    free(sel->reqs);
    free(sel);
}

static enum cma_errc add_value(struct parser *p, const char *s, size_t len, size_t pos)
{
    if (p->n_vals == p->vals_cap) {
        size_t cap = p->vals_cap ? p->vals_cap * 2 : 4;
        struct value_ref *v = realloc(p->vals, cap * sizeof(*v));
        if (!v)
            return sel_nomem(p);
        p->vals = v;
        p->vals_cap = cap;
    }
    p->vals[p->n_vals++] = (struct value_ref){.s = s, .len = len, .pos = pos};
    return CMA_OK;
}

static int cmp_bytes(const char *a, size_t alen, const char *b, size_t blen)
{
    int c = memcmp(a, b, alen < blen ? alen : blen);
    if (c)
        return c;
    return alen < blen ? -1 : alen > blen;
}

static int cmp_value_ref(const void *a, const void *b)
{
    const struct value_ref *x = a, *y = b;
    int c = cmp_bytes(x->s, x->len, y->s, y->len);
    if (c)
        return c;
    return x->pos < y->pos ? -1 : x->pos > y->pos; /* first occurrence first */
}

/* Sorts and deduplicates p->vals (sets.String.List()). */
static void value_set(struct parser *p)
{
    if (p->n_vals < 2)
        return;
    qsort(p->vals, p->n_vals, sizeof(*p->vals), cmp_value_ref);
    size_t w = 1;
    for (size_t i = 1; i < p->n_vals; i++) {
        const struct value_ref *prev = &p->vals[w - 1];
        if (cmp_bytes(prev->s, prev->len, p->vals[i].s, p->vals[i].len) != 0)
            p->vals[w++] = p->vals[i];
    }
    p->n_vals = w;
}

/* parseValues / parseIdentifiersList: "(" values ")". */
static enum cma_errc parse_value_list(struct parser *p)
{
    enum tok t;
    const struct token *tk = consume(p, CTX_VALUES, &t);
    if (t != TOK_OPEN_PAR)
        return sel_error(p, tk->pos, true, "found '%.*s' expected: '('", lit_len_for_msg(tk),
                         tk->lit);
    tk = lookahead(p, CTX_VALUES, &t);
    if (t == TOK_CLOSE_PAR) {
        consume(p, CTX_VALUES, &t);
        return add_value(p, "", 0, tk->pos);
    }
    if (t != TOK_IDENT && t != TOK_COMMA)
        return sel_error(p, tk->pos, true, "found '%.*s', expected: ',', ')' or identifier",
                         lit_len_for_msg(tk), tk->lit);
    for (;;) {
        tk = consume(p, CTX_VALUES, &t);
        if (t == TOK_IDENT) {
            enum cma_errc rc = add_value(p, tk->lit, tk->lit_len, tk->pos);
            if (rc != CMA_OK)
                return rc;
            enum tok t2;
            const struct token *tk2 = lookahead(p, CTX_VALUES, &t2);
            if (t2 == TOK_COMMA)
                continue;
            if (t2 == TOK_CLOSE_PAR)
                break;
            return sel_error(p, tk2->pos, true, "found '%.*s', expected: ',' or ')'",
                             lit_len_for_msg(tk2), tk2->lit);
        }
        if (t == TOK_COMMA) {
            enum cma_errc rc = CMA_OK;
            if (p->n_vals == 0)
                rc = add_value(p, "", 0, tk->pos); /* "(," */
            enum tok t2;
            const struct token *tk2 = lookahead(p, CTX_VALUES, &t2);
            if (rc == CMA_OK && t2 == TOK_CLOSE_PAR) {
                rc = add_value(p, "", 0, tk2->pos); /* ",)" */
                if (rc != CMA_OK)
                    return rc;
                break;
            }
            if (rc == CMA_OK && t2 == TOK_COMMA) {
                consume(p, CTX_VALUES, &t2);
                rc = add_value(p, "", 0, tk2->pos); /* ",," */
            }
            if (rc != CMA_OK)
                return rc;
            continue;
        }
        return sel_error(p, tk->pos, true, "found '%.*s', expected: ',', or identifier",
                         lit_len_for_msg(tk), tk->lit);
    }
    consume(p, CTX_VALUES, &t); /* ')' */
    return CMA_OK;
}

/* parseExactValue: one value, possibly empty ("a=" or "a=,b"). */
static enum cma_errc parse_exact_value(struct parser *p)
{
    enum tok t;
    const struct token *tk = lookahead(p, CTX_VALUES, &t);
    if (t == TOK_EOS || t == TOK_COMMA)
        return add_value(p, "", 0, tk->pos);
    tk = consume(p, CTX_VALUES, &t);
    if (t == TOK_IDENT)
        return add_value(p, tk->lit, tk->lit_len, tk->pos);
    return sel_error(p, tk->pos, true, "found '%.*s', expected: identifier", lit_len_for_msg(tk),
                     tk->lit);
}

static enum cma_errc parse_operator(struct parser *p, enum cma_selector_op *ret)
{
    enum tok t;
    const struct token *tk = consume(p, CTX_KEY_AND_OPERATOR, &t);
    switch (t) {
    case TOK_IN:
        *ret = CMA_SEL_IN;
        return CMA_OK;
    case TOK_EQUALS:
    case TOK_DOUBLE_EQUALS:
        *ret = CMA_SEL_EQ;
        return CMA_OK;
    case TOK_GT:
        *ret = CMA_SEL_GT;
        return CMA_OK;
    case TOK_LT:
        *ret = CMA_SEL_LT;
        return CMA_OK;
    case TOK_NOT_IN:
        *ret = CMA_SEL_NOTIN;
        return CMA_OK;
    case TOK_NOT_EQUALS:
        *ret = CMA_SEL_NEQ;
        return CMA_OK;
    default:
        return sel_error(p, tk->pos, true, "found '%.*s', expected: in, notin, =, ==, !=, gt, lt",
                         lit_len_for_msg(tk), tk->lit);
    }
}

/* NewRequirement's checks on values, then the copy into r. */
static enum cma_errc finish_requirement(struct parser *p, struct cma_selector_req *r)
{
    char msg[CMA_ERR_MSG_MAX];
    char quoted[MSG_LITERAL_MAX * 4 + 16];
    value_set(p);
    if (r->op == CMA_SEL_GT || r->op == CMA_SEL_LT) {
        for (size_t i = 0; i < p->n_vals; i++) {
            int64_t unused;
            if (!parse_int64(p->vals[i].s, p->vals[i].len, &unused)) {
                quote_for_msg(quoted, sizeof(quoted), p->vals[i].s, p->vals[i].len,
                              MSG_LITERAL_MAX);
                return sel_error(p, p->vals[i].pos, true,
                                 "values[%zu]: Invalid value: %s: for 'Gt', 'Lt' operators, the "
                                 "value must be an integer",
                                 i, quoted);
            }
        }
    }
    for (size_t i = 0; i < p->n_vals; i++) {
        if (!check_label_value(p->vals[i].s, p->vals[i].len, msg, sizeof(msg))) {
            quote_for_msg(quoted, sizeof(quoted), p->vals[i].s, p->vals[i].len, MSG_LITERAL_MAX);
            return sel_error(p, p->vals[i].pos, true, "values[%zu][%s]: Invalid value: %s: %s", i,
                             r->key, quoted, msg);
        }
    }
    r->values = calloc(p->n_vals ? p->n_vals : 1, sizeof(*r->values));
    if (!r->values)
        return sel_nomem(p);
    for (size_t i = 0; i < p->n_vals; i++) {
        r->values[i] = cma_strndup(p->vals[i].s, p->vals[i].len);
        if (!r->values[i])
            return sel_nomem(p);
        r->n_values++;
    }
    return CMA_OK;
}

/* parseRequirement with parseKeyAndInferOperator. */
static enum cma_errc parse_requirement(struct parser *p, struct cma_selector_req *r)
{
    enum tok t;
    bool not_exists = false;
    const struct token *tk = consume(p, CTX_VALUES, &t);
    if (t == TOK_NOT) {
        not_exists = true;
        tk = consume(p, CTX_VALUES, &t);
    }
    if (t != TOK_IDENT)
        return sel_error(p, tk->pos, true, "found '%.*s', expected: identifier",
                         lit_len_for_msg(tk), tk->lit);
    char msg[CMA_ERR_MSG_MAX];
    if (!check_label_key(tk->lit, tk->lit_len, msg, sizeof(msg))) {
        char quoted[MSG_LITERAL_MAX * 4 + 16];
        quote_for_msg(quoted, sizeof(quoted), tk->lit, tk->lit_len, MSG_LITERAL_MAX);
        return sel_error(p, tk->pos, true, "Invalid value: %s: %s", quoted, msg);
    }
    r->key = cma_strndup(tk->lit, tk->lit_len);
    if (!r->key)
        return sel_nomem(p);
    p->n_vals = 0;
    enum tok next;
    lookahead(p, CTX_VALUES, &next);
    if (not_exists || next == TOK_EOS || next == TOK_COMMA) {
        r->op = not_exists ? CMA_SEL_NOT_EXISTS : CMA_SEL_EXISTS;
        return finish_requirement(p, r);
    }
    enum cma_errc rc = parse_operator(p, &r->op);
    if (rc != CMA_OK)
        return rc;
    rc = (r->op == CMA_SEL_IN || r->op == CMA_SEL_NOTIN) ? parse_value_list(p)
                                                         : parse_exact_value(p);
    if (rc != CMA_OK)
        return rc;
    return finish_requirement(p, r);
}

static enum cma_errc add_requirement(struct parser *p, struct cma_selector *sel, size_t *cap)
{
    if (sel->n_reqs == *cap) {
        size_t ncap = *cap ? *cap * 2 : 4;
        struct cma_selector_req *r = realloc(sel->reqs, ncap * sizeof(*r));
        if (!r)
            return sel_nomem(p);
        sel->reqs = r;
        *cap = ncap;
    }
    struct cma_selector_req *r = &sel->reqs[sel->n_reqs++];
    memset(r, 0, sizeof(*r));
    return parse_requirement(p, r);
}

static enum cma_errc parse_all(struct parser *p, struct cma_selector *sel)
{
    size_t cap = 0;
    for (;;) {
        enum tok t;
        const struct token *tk = lookahead(p, CTX_VALUES, &t);
        if (t == TOK_EOS)
            return CMA_OK;
        if (t != TOK_IDENT && t != TOK_NOT)
            return sel_error(p, tk->pos, false,
                             "found '%.*s', expected: !, identifier, or 'end of string'",
                             lit_len_for_msg(tk), tk->lit);
        enum cma_errc rc = add_requirement(p, sel, &cap);
        if (rc != CMA_OK)
            return rc;
        tk = consume(p, CTX_VALUES, &t);
        if (t == TOK_EOS)
            return CMA_OK;
        if (t != TOK_COMMA)
            return sel_error(p, tk->pos, false, "found '%.*s', expected: ',' or 'end of string'",
                             lit_len_for_msg(tk), tk->lit);
        const struct token *tk2 = lookahead(p, CTX_VALUES, &t);
        if (t != TOK_IDENT && t != TOK_NOT)
            return sel_error(p, tk2->pos, false, "found '%.*s', expected: identifier after ','",
                             lit_len_for_msg(tk2), tk2->lit);
    }
}

/* Stable merge sort of the requirements by key (bytewise, as Go compares strings). */
static bool sort_by_key(struct cma_selector *sel)
{
    size_t n = sel->n_reqs;
    if (n < 2)
        return true;
    struct cma_selector_req *tmp = malloc(n * sizeof(*tmp));
    if (!tmp)
        return false;
    struct cma_selector_req *a = sel->reqs, *b = tmp;
    for (size_t width = 1; width < n; width *= 2) {
        for (size_t lo = 0; lo < n; lo += 2 * width) {
            size_t mid = lo + width < n ? lo + width : n;
            size_t hi = lo + 2 * width < n ? lo + 2 * width : n;
            size_t i = lo, j = mid, k = lo;
            while (i < mid && j < hi)
                b[k++] = strcmp(a[j].key, a[i].key) < 0 ? a[j++] : a[i++];
            while (i < mid)
                b[k++] = a[i++];
            while (j < hi)
                b[k++] = a[j++];
        }
        struct cma_selector_req *swap = a;
        a = b;
        b = swap;
    }
    if (a != sel->reqs)
        memcpy(sel->reqs, a, n * sizeof(*a));
    free(tmp);
    return true;
}

enum cma_errc cma_selector_parse(const char *text, size_t len, struct cma_selector **ret,
                                 struct cma_err *reterr)
{
    if (!ret || (!text && len))
        return cma_err_set(reterr, CMA_ERR_INTERNAL, "cma_selector_parse: NULL argument");
    struct parser p = {.text = text ? text : "", .len = len, .err = reterr};
    if (len > SELECTOR_MAX_BYTES)
        return sel_error(&p, 0, false, "label selector longer than %zu bytes",
                         (size_t)SELECTOR_MAX_BYTES);
    const char *nul = len ? memchr(p.text, '\0', len) : NULL;
    if (nul)
        return sel_error(&p, (size_t)(nul - p.text), false, "found NUL byte");
    struct cma_selector *sel = calloc(1, sizeof(*sel));
    p.tokens = calloc(len + 1, sizeof(*p.tokens));
    if (!sel || !p.tokens) {
        free(sel);
        free(p.tokens);
        return sel_nomem(&p);
    }
    lex_all(&p);
    enum cma_errc rc = parse_all(&p, sel);
    if (rc == CMA_OK && !sort_by_key(sel))
        rc = sel_nomem(&p);
    free(p.tokens);
    free(p.vals);
    if (rc != CMA_OK) {
        cma_selector_free(sel);
        return rc;
    }
    *ret = sel;
    return CMA_OK;
}

bool cma_selector_is_empty(const struct cma_selector *sel)
{
    return !sel || sel->n_reqs == 0;
}

/* ---- matching --------------------------------------------------------------------------- */

static bool has_value(const struct cma_selector_req *r, const char *v)
{
    for (size_t i = 0; i < r->n_values; i++)
        if (strcmp(r->values[i], v) == 0)
            return true;
    return false;
}

static bool req_matches(const struct cma_selector_req *r, cma_label_lookup_fn lookup, void *ctx)
{
    const char *v = lookup(ctx, r->key);
    switch (r->op) {
    case CMA_SEL_EQ:
    case CMA_SEL_IN:
        return v && has_value(r, v);
    case CMA_SEL_NEQ:
    case CMA_SEL_NOTIN:
        return !v || !has_value(r, v);
    case CMA_SEL_EXISTS:
        return v != NULL;
    case CMA_SEL_NOT_EXISTS:
        return v == NULL;
    case CMA_SEL_GT:
    case CMA_SEL_LT: {
        int64_t have, want;
        if (!v || r->n_values != 1 || !parse_int64(v, strlen(v), &have) ||
            !parse_int64(r->values[0], strlen(r->values[0]), &want))
            return false;
        return r->op == CMA_SEL_GT ? have > want : have < want;
    }
    }
    return false;
}

bool cma_selector_matches(const struct cma_selector *sel, cma_label_lookup_fn lookup, void *ctx)
{
    if (!sel)
        return true;
    for (size_t i = 0; i < sel->n_reqs; i++)
        if (!req_matches(&sel->reqs[i], lookup, ctx))
            return false;
    return true;
}

/* ---- printing --------------------------------------------------------------------------- */

static enum cma_errc append_joined(struct cma_buf *out, const struct cma_selector_req *r, char sep)
{
    enum cma_errc rc = CMA_OK;
    for (size_t i = 0; i < r->n_values && rc == CMA_OK; i++) {
        if (i > 0)
            rc = cma_buf_appendc(out, sep);
        if (rc == CMA_OK)
            rc = cma_buf_appends(out, r->values[i]);
    }
    return rc;
}

enum cma_errc cma_selector_format(const struct cma_selector *sel, struct cma_buf *out)
{
    enum cma_errc rc = CMA_OK;
    for (size_t i = 0; sel && i < sel->n_reqs && rc == CMA_OK; i++) {
        const struct cma_selector_req *r = &sel->reqs[i];
        if (i > 0)
            rc = cma_buf_appendc(out, ',');
        if (rc == CMA_OK && r->op == CMA_SEL_NOT_EXISTS)
            rc = cma_buf_appendc(out, '!');
        if (rc == CMA_OK)
            rc = cma_buf_appends(out, r->key);
        const char *op = NULL;
        switch (r->op) {
        case CMA_SEL_EQ:
            op = "=";
            break;
        case CMA_SEL_NEQ:
            op = "!=";
            break;
        case CMA_SEL_IN:
            op = " in (";
            break;
        case CMA_SEL_NOTIN:
            op = " notin (";
            break;
        case CMA_SEL_GT:
            op = ">";
            break;
        case CMA_SEL_LT:
            op = "<";
            break;
        case CMA_SEL_EXISTS:
        case CMA_SEL_NOT_EXISTS:
            break;
        }
        if (rc == CMA_OK && op) {
            rc = cma_buf_appends(out, op);
            if (rc == CMA_OK)
                rc = append_joined(out, r, ',');
            if (rc == CMA_OK && (r->op == CMA_SEL_IN || r->op == CMA_SEL_NOTIN))
                rc = cma_buf_appendc(out, ')');
        }
    }
    if (rc == CMA_OK && !out->ptr)
        rc = cma_buf_append(out, "", 0);
    return rc;
}

enum cma_errc cma_selector_to_promql(const struct cma_selector *sel, struct cma_buf *out,
                                     struct cma_err *reterr)
{
    for (size_t i = 0; sel && i < sel->n_reqs; i++) {
        const struct cma_selector_req *r = &sel->reqs[i];
        if (r->op == CMA_SEL_GT || r->op == CMA_SEL_LT)
            return cma_err_set(reterr, CMA_ERR_BAD_SELECTOR,
                               "operator not supported by prometheus: label \"%s\" uses '%s'",
                               r->key, r->op == CMA_SEL_GT ? ">" : "<");
    }
    enum cma_errc rc = CMA_OK;
    for (size_t i = 0; sel && i < sel->n_reqs && rc == CMA_OK; i++) {
        const struct cma_selector_req *r = &sel->reqs[i];
        const char *op = "=";
        switch (r->op) {
        case CMA_SEL_EQ:
            op = r->n_values > 1 ? "=~" : "=";
            break;
        case CMA_SEL_NEQ:
            op = r->n_values > 1 ? "!~" : "!=";
            break;
        case CMA_SEL_IN:
            op = "=~";
            break;
        case CMA_SEL_NOTIN:
            op = "!~";
            break;
        case CMA_SEL_EXISTS:
            op = "!=";
            break;
        case CMA_SEL_NOT_EXISTS:
            op = "=";
            break;
        case CMA_SEL_GT:
        case CMA_SEL_LT:
            break;
        }
        if (i > 0)
            rc = cma_buf_appendc(out, ',');
        if (rc == CMA_OK)
            rc = cma_buf_appends(out, r->key);
        if (rc == CMA_OK)
            rc = cma_buf_appends(out, op);
        if (rc == CMA_OK)
            rc = cma_buf_appendc(out, '"');
        for (size_t k = 0; k < r->n_values && rc == CMA_OK; k++) {
            if (k > 0)
                rc = cma_buf_appendc(out, '|');
            if (rc == CMA_OK)
                rc = quote_body(out, r->values[k], strlen(r->values[k]));
        }
        if (rc == CMA_OK)
            rc = cma_buf_appendc(out, '"');
    }
    if (rc != CMA_OK)
        return cma_err_set(reterr, rc, "label selector too large for a PromQL query");
    return CMA_OK;
}
