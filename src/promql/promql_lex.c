/* promql_lex.c: the PromQL lexer and the literal decoders (strings, numbers, durations).
 *
 * Owns what Prometheus' promql/parser/lex.go decides: which bytes form one token, keywords
 * (case-insensitive; "inf" and "nan" are numbers), comments ("# ..." to '\n' or '\r'),
 * the two lexical contexts (inside braces every word is a plain label name and ':' is refused;
 * right after '[' a number must carry a duration unit), string escapes (Go's, checked while
 * scanning so the error points at the string), and model.ParseDuration. Positions are byte
 * offsets; pq_error_at turns one into line and column (both 1-based, the column in bytes).
 *
 * DESIGN: a pull lexer (the parser asks for one token at a time and keeps one of look-ahead)
 * rather than Prometheus' goroutine-free state machine with an item channel: the parser needs
 * the context (brace/bracket) only at the points it opens them, which the lexer tracks itself. */
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "cma/str.h"
#include "cma/utf8.h"
#include "promql_internal.h"

enum cma_errc cma_pq_error_at(struct cma_err *err, enum cma_errc code, const char *src, size_t pos,
                              const char *fmt, ...)
{
    unsigned line = 1;
    size_t line_start = 0;
    for (size_t i = 0; i < pos; i++) {
        if (src[i] == '\n') {
            line++;
            line_start = i + 1;
        }
    }
    if (!err || err->code != CMA_OK)
        return code;
    va_list ap;
    va_start(ap, fmt);
    cma_err_vset(err, code, fmt, ap);
    va_end(ap);
    cma_err_set_pos(err, NULL, line, (unsigned)(pos - line_start + 1));
    return code;
}

static bool is_alpha(int c)
{
    return c == '_' || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
}

static bool is_digit(int c)
{
    return c >= '0' && c <= '9';
}

static bool is_alnum(int c)
{
    return is_alpha(c) || is_digit(c);
}

static int peek_at(const struct pq_lexer *lx, size_t i)
{
    return i < lx->len ? (unsigned char)lx->src[i] : -1;
}

static const struct {
    const char *word;
    enum pq_kw kw;
    enum pq_agg agg;
} keywords[] = {
    {"and", PQ_KW_AND, 0},
    {"or", PQ_KW_OR, 0},
    {"unless", PQ_KW_UNLESS, 0},
    {"atan2", PQ_KW_ATAN2, 0},
    {"bool", PQ_KW_BOOL, 0},
    {"by", PQ_KW_BY, 0},
    {"without", PQ_KW_WITHOUT, 0},
    {"on", PQ_KW_ON, 0},
    {"ignoring", PQ_KW_IGNORING, 0},
    {"group_left", PQ_KW_GROUP_LEFT, 0},
    {"group_right", PQ_KW_GROUP_RIGHT, 0},
    {"offset", PQ_KW_OFFSET, 0},
    {"start", PQ_KW_START, 0},
    {"end", PQ_KW_END, 0},
    {"inf", PQ_KW_INF, 0},
    {"nan", PQ_KW_NAN, 0},
    {"sum", PQ_KW_AGG, PQ_AGG_SUM},
    {"avg", PQ_KW_AGG, PQ_AGG_AVG},
    {"count", PQ_KW_AGG, PQ_AGG_COUNT},
    {"min", PQ_KW_AGG, PQ_AGG_MIN},
    {"max", PQ_KW_AGG, PQ_AGG_MAX},
    {"group", PQ_KW_AGG, PQ_AGG_GROUP},
    {"stddev", PQ_KW_AGG, PQ_AGG_STDDEV},
    {"stdvar", PQ_KW_AGG, PQ_AGG_STDVAR},
    {"topk", PQ_KW_AGG, PQ_AGG_TOPK},
    {"bottomk", PQ_KW_AGG, PQ_AGG_BOTTOMK},
    {"count_values", PQ_KW_AGG, PQ_AGG_COUNT_VALUES},
    {"quantile", PQ_KW_AGG, PQ_AGG_QUANTILE},
    {"limitk", PQ_KW_AGG, PQ_AGG_LIMITK},
    {"limit_ratio", PQ_KW_AGG, PQ_AGG_LIMIT_RATIO},
};

static void classify_word(const char *s, size_t len, struct pq_token *t)
{
    t->kw = PQ_KW_NONE;
    for (size_t i = 0; i < sizeof(keywords) / sizeof(keywords[0]); i++) {
        if (strlen(keywords[i].word) == len && strncasecmp(keywords[i].word, s, len) == 0) {
            t->kw = keywords[i].kw;
            t->agg = keywords[i].agg;
            break;
        }
    }
    if (t->kw == PQ_KW_INF || t->kw == PQ_KW_NAN)
        t->type = PQ_NUMBER;
    else if (t->kw == PQ_KW_AND)
        t->type = PQ_LAND;
    else if (t->kw == PQ_KW_OR)
        t->type = PQ_LOR;
    else if (t->kw == PQ_KW_UNLESS)
        t->type = PQ_LUNLESS;
    else if (t->kw == PQ_KW_ATAN2)
        t->type = PQ_ATAN2;
}

static enum cma_errc lex_word(struct pq_lexer *lx, struct pq_token *t, struct cma_err *reterr)
{
    size_t p = lx->pos;
    bool colon = false;
    while (p < lx->len) {
        int c = (unsigned char)lx->src[p];
        if (c == ':' && lx->brace_depth == 0)
            colon = true;
        else if (!is_alnum(c))
            break;
        p++;
    }
    if (lx->brace_depth > 0 && p < lx->len && lx->src[p] == ':')
        return cma_pq_error_at(reterr, CMA_ERR_RULE, lx->src, p,
                               "unexpected character inside braces: ':'");
    t->type = colon ? PQ_METRIC_IDENT : PQ_IDENT;
    t->len = p - lx->pos;
    t->kw = PQ_KW_NONE;
    if (!colon && lx->brace_depth == 0)
        classify_word(lx->src + lx->pos, t->len, t);
    lx->pos = p;
    return CMA_OK;
}

/* Go's accept(set) on one byte */
static bool accept(struct pq_lexer *lx, size_t *p, const char *set)
{
    int c = peek_at(lx, *p);
    if (c > 0 && strchr(set, c)) {
        (*p)++;
        return true;
    }
    return false;
}

static void accept_run(struct pq_lexer *lx, size_t *p, const char *set)
{
    while (accept(lx, p, set))
        ;
}

/* scanNumber: true when the number ends at a non-alphanumeric byte */
static bool scan_number(struct pq_lexer *lx, size_t *p)
{
    const char *digits = "0123456789";
    if (accept(lx, p, "0") && accept(lx, p, "xX"))
        digits = "0123456789abcdefABCDEF";
    accept_run(lx, p, digits);
    if (accept(lx, p, "."))
        accept_run(lx, p, digits);
    if (accept(lx, p, "eE")) {
        accept(lx, p, "+-");
        accept_run(lx, p, "0123456789");
    }
    return !is_alnum(peek_at(lx, *p));
}

/* acceptRemainingDuration */
static bool scan_duration_rest(struct pq_lexer *lx, size_t *p)
{
    if (!accept(lx, p, "smhdwy"))
        return false;
    accept(lx, p, "s");
    while (accept(lx, p, "0123456789")) {
        accept_run(lx, p, "0123456789");
        if (!accept(lx, p, "smhdwy"))
            return false;
        accept(lx, p, "s");
    }
    return !is_alnum(peek_at(lx, *p));
}

static enum cma_errc lex_number(struct pq_lexer *lx, struct pq_token *t, bool after_bracket,
                                struct cma_err *reterr)
{
    size_t p = lx->pos;
    if (scan_number(lx, &p)) {
        if (after_bracket)
            return cma_pq_error_at(reterr, CMA_ERR_RULE, lx->src, lx->pos,
                                   "missing unit character in duration");
        t->type = PQ_NUMBER;
    } else if (scan_duration_rest(lx, &p)) {
        t->type = PQ_DURATION;
    } else {
        while (p < lx->len && is_alnum((unsigned char)lx->src[p]))
            p++;
        return cma_pq_error_at(reterr, CMA_ERR_RULE, lx->src, lx->pos,
                               "bad number or duration syntax: \"%.*s\"", (int)(p - lx->pos),
                               lx->src + lx->pos);
    }
    t->len = p - lx->pos;
    lx->pos = p;
    return CMA_OK;
}

/* \NNN (octal), \xNN, \uNNNN, \UNNNNNNNN at s[*i] (the letter or first digit) */
static const char *numeric_escape(const char *s, size_t len, size_t *i, char *out, size_t *n_out)
{
    static const struct {
        char c;
        int ndig, base;
        uint32_t max;
    } kinds[] = {
        {'x', 2, 16, 255}, {'u', 4, 16, CMA_UTF8_MAX_RUNE}, {'U', 8, 16, CMA_UTF8_MAX_RUNE}};
    int ndig = 3, base = 8;
    uint32_t max = 255;
    for (size_t k = 0; k < sizeof(kinds) / sizeof(kinds[0]); k++)
        if (s[*i] == kinds[k].c) {
            ndig = kinds[k].ndig;
            base = kinds[k].base;
            max = kinds[k].max;
            (*i)++;
        }
    uint32_t v = 0;
    for (int k = 0; k < ndig; k++, (*i)++) {
        int d = *i < len ? cma_hex_digit((unsigned char)s[*i]) : -1;
        if (d < 0 || d >= base)
            return "illegal character in escape sequence";
        v = v * (uint32_t)base + (uint32_t)d;
    }
    if (v > max || (max > 255 && !cma_utf8_valid(v)))
        return "escape sequence is an invalid Unicode code point";
    if (out && max == 255)
        out[(*n_out)++] = (char)v;
    else if (out)
        *n_out += cma_utf8_encode(v, out + *n_out);
    return NULL;
}

/* One escape at s[*i] (just after the backslash) of a string quoted with q: checks it the way
 * lex.go's lexEscape and strconv.Unquote do; appends the bytes it stands for to out when out is
 * not NULL. Returns an error message or NULL. */
static const char *escape(const char *s, size_t len, size_t *i, char q, char *out, size_t *n_out)
{
    static const char simple_from[] = "abfnrtv\\'\"";
    static const char simple_to[] = "\a\b\f\n\r\t\v\\'\"";
    if (*i >= len)
        return "escape sequence not terminated";
    char c = s[*i];
    const char *hit = c != '\0' ? strchr(simple_from, c) : NULL;
    if (hit) {
        if ((c == '\'' || c == '"') && c != q)
            return "unknown escape sequence";
        if (out)
            out[(*n_out)++] = simple_to[hit - simple_from];
        (*i)++;
        return NULL;
    }
    if ((c >= '0' && c <= '7') || c == 'x' || c == 'u' || c == 'U')
        return numeric_escape(s, len, i, out, n_out);
    return "unknown escape sequence";
}

/* Decodes (out != NULL) or only checks the body of a quoted string; *ret_bad is the offset of
 * the byte a failure points at. */
static const char *string_body(const char *s, size_t len, char q, char *out, size_t *n_out,
                               size_t *ret_bad)
{
    size_t i = 0;
    while (i < len) {
        if (q != '`' && s[i] == '\\') {
            size_t at = i;
            i++;
            const char *msg = escape(s, len, &i, q, out, n_out);
            if (msg) {
                *ret_bad = at;
                return msg;
            }
            continue;
        }
        if (q != '`' && s[i] == '\n') {
            *ret_bad = i;
            return "unterminated quoted string";
        }
        if (out)
            out[(*n_out)++] = s[i];
        i++;
    }
    return NULL;
}

/* An escape error, at the string's first byte as Prometheus reports it, naming the character
 * after the backslash when it is ASCII ("unknown escape sequence U+0071 'q'"). */
static enum cma_errc escape_error(struct cma_err *reterr, const char *src, size_t string_pos,
                                  const char *at, const char *msg)
{
    unsigned char c = (unsigned char)at[1];
    if (strcmp(msg, "unknown escape sequence") == 0 && c >= 0x20 && c < 0x7f)
        return cma_pq_error_at(reterr, CMA_ERR_RULE, src, string_pos, "%s U+%04X '%c'", msg, c,
                               (char)c);
    return cma_pq_error_at(reterr, CMA_ERR_RULE, src, string_pos, "%s", msg);
}

static enum cma_errc lex_string(struct pq_lexer *lx, struct pq_token *t, struct cma_err *reterr)
{
    char q = lx->src[lx->pos];
    size_t p = lx->pos + 1;
    while (p < lx->len && lx->src[p] != q) {
        if (q != '`' && lx->src[p] == '\n')
            break;
        if (q != '`' && lx->src[p] == '\\' && p + 1 < lx->len)
            p++;
        p++;
    }
    if (p >= lx->len || lx->src[p] != q)
        return cma_pq_error_at(reterr, CMA_ERR_RULE, lx->src, lx->pos,
                               q == '`' ? "unterminated raw string" : "unterminated quoted string");
    size_t bad = 0, n = 0;
    const char *msg = string_body(lx->src + lx->pos + 1, p - lx->pos - 1, q, NULL, &n, &bad);
    if (msg)
        return escape_error(reterr, lx->src, lx->pos, lx->src + lx->pos + 1 + bad, msg);
    t->type = PQ_STRING;
    t->len = p + 1 - lx->pos;
    lx->pos = p + 1;
    return CMA_OK;
}

enum cma_errc cma_pq_unquote(struct cma_arena *a, const char *s, size_t len, const char *src,
                             char **ret, size_t *ret_len, struct cma_err *reterr)
{
    char *out = cma_arena_alloc(a, len + 1);
    if (!out)
        return cma_err_set(reterr, a->rc, "out of memory decoding a string");
    size_t n = 0, bad = 0;
    const char *msg = string_body(s + 1, len - 2, s[0], out, &n, &bad);
    if (msg)
        return escape_error(reterr, src, (size_t)(s - src), s + 1 + bad, msg);
    out[n] = '\0';
    *ret = out;
    *ret_len = n;
    return CMA_OK;
}

/* Right after '[' Prometheus' lexer reads a duration at once (after spaces): a comment there
 * is refused as 2.42 does ("x[ # c\n5m]"), comments elsewhere are skipped. */
static void skip_space_and_comments(struct pq_lexer *lx)
{
    while (lx->pos < lx->len) {
        char c = lx->src[lx->pos];
        if (c == ' ' || c == '\t' || c == '\n' || c == '\r') {
            lx->pos++;
        } else if (c == '#' && !lx->after_lbracket) {
            /* a comment ends at '\r' too, as in Prometheus' lexer */
            while (lx->pos < lx->len && lx->src[lx->pos] != '\n' && lx->src[lx->pos] != '\r')
                lx->pos++;
        } else {
            break;
        }
    }
}

/* operators of one or two bytes; returns false when c starts none */
static bool lex_operator(struct pq_lexer *lx, struct pq_token *t)
{
    static const struct {
        const char *text;
        enum pq_tok type;
    } ops[] = {
        {"==", PQ_EQLC},    {"=~", PQ_EQL_REGEX}, {"!=", PQ_NEQ},   {"!~", PQ_NEQ_REGEX},
        {"<=", PQ_LTE},     {">=", PQ_GTE},       {"=", PQ_EQL},    {"<", PQ_LSS},
        {">", PQ_GTR},      {"+", PQ_ADD},        {"-", PQ_SUB},    {"*", PQ_MUL},
        {"/", PQ_DIV},      {"%", PQ_MOD},        {"^", PQ_POW},    {"@", PQ_AT},
        {"(", PQ_LPAREN},   {")", PQ_RPAREN},     {"{", PQ_LBRACE}, {"}", PQ_RBRACE},
        {"[", PQ_LBRACKET}, {"]", PQ_RBRACKET},   {",", PQ_COMMA},  {":", PQ_COLON},
    };
    for (size_t i = 0; i < sizeof(ops) / sizeof(ops[0]); i++) {
        size_t n = strlen(ops[i].text);
        if (lx->len - lx->pos >= n && memcmp(lx->src + lx->pos, ops[i].text, n) == 0) {
            t->type = ops[i].type;
            t->len = n;
            lx->pos += n;
            return true;
        }
    }
    return false;
}

static void track_context(struct pq_lexer *lx, enum pq_tok type)
{
    if (type == PQ_LBRACE)
        lx->brace_depth = 1;
    else if (type == PQ_RBRACE)
        lx->brace_depth = 0;
    else if (type == PQ_LBRACKET)
        lx->bracket_depth = 1;
    else if (type == PQ_RBRACKET)
        lx->bracket_depth = 0;
    lx->after_lbracket = type == PQ_LBRACKET;
}

static enum cma_errc lex_token(struct pq_lexer *lx, struct pq_token *t, bool after_bracket,
                               struct cma_err *reterr)
{
    int c = peek_at(lx, lx->pos);
    if (c < 0)
        return CMA_OK; /* PQ_EOF */
    if (c == '"' || c == '\'' || c == '`')
        return lex_string(lx, t, reterr);
    if (is_digit(c) || (c == '.' && is_digit(peek_at(lx, lx->pos + 1))))
        return lex_number(lx, t, after_bracket, reterr);
    /* ':' inside brackets separates a subquery's range and step; elsewhere it starts a name */
    bool colon_op = c == ':' && lx->brace_depth == 0 && lx->bracket_depth;
    if ((is_alpha(c) || c == ':') && !colon_op)
        return lex_word(lx, t, reterr);
    if (lex_operator(lx, t))
        return CMA_OK;
    uint32_t r = cma_utf8_decode(lx->src + lx->pos, lx->len - lx->pos, &(size_t){0});
    return cma_pq_error_at(reterr, CMA_ERR_RULE, lx->src, lx->pos, "unexpected character: U+%04X",
                           (unsigned)r);
}

enum cma_errc cma_pq_lex_next(struct pq_lexer *lx, struct pq_token *ret, struct cma_err *reterr)
{
    bool after_bracket = lx->after_lbracket;
    skip_space_and_comments(lx);
    int c = peek_at(lx, lx->pos);
    if (after_bracket && c >= 0 && !is_digit(c) && c != '.')
        return cma_pq_error_at(reterr, CMA_ERR_RULE, lx->src, lx->pos,
                               "missing unit character in duration");
    struct pq_token t = {.type = PQ_EOF, .pos = lx->pos};
    enum cma_errc rc = lex_token(lx, &t, after_bracket, reterr);
    if (rc != CMA_OK)
        return rc;
    track_context(lx, t.type);
    *ret = t;
    return CMA_OK;
}

/* ---- literals ---- */

/* strconv.ParseInt(s, 0, 64) for hex and octal forms: true when s is one (*ret set, or *ret_bad
 * when it does not fit) */
static bool parse_int_prefix(const char *buf, size_t len, double *ret, bool *ret_bad)
{
    char *end = NULL;
    errno = 0;
    *ret_bad = false;
    if (len > 2 && buf[0] == '0' && (buf[1] == 'x' || buf[1] == 'X')) {
        unsigned long long v = strtoull(buf + 2, &end, 16);
        *ret_bad =
            end == buf + 2 || *end != '\0' || errno == ERANGE || v > (unsigned long long)INT64_MAX;
        *ret = (double)v;
        return true;
    }
    /* a leading 0 means octal ("017" is 15); "08" is not octal and parses as a float */
    if (len > 1 && buf[0] == '0' && strspn(buf, "01234567") == len) {
        unsigned long long o = strtoull(buf, &end, 8);
        if (errno != ERANGE && o <= (unsigned long long)INT64_MAX) {
            *ret = (double)o;
            return true;
        }
    }
    return false;
}

enum cma_errc cma_pq_parse_number(const char *s, size_t len, double *ret)
{
    char buf[128];
    if (len == 0 || len >= sizeof(buf))
        return CMA_ERR_RULE;
    memcpy(buf, s, len);
    buf[len] = '\0';
    if (strcasecmp(buf, "inf") == 0 || strcasecmp(buf, "nan") == 0) {
        *ret = buf[0] == 'i' || buf[0] == 'I' ? INFINITY : NAN;
        return CMA_OK;
    }
    bool bad = false;
    if (parse_int_prefix(buf, len, ret, &bad))
        return bad ? CMA_ERR_RULE : CMA_OK;
    char *end = NULL;
    errno = 0;
    double v = strtod(buf, &end);
    /* Go's ParseFloat: out of range is an error (it returns +-Inf with it) */
    if (end == buf || *end != '\0' || (errno == ERANGE && isinf(v)))
        return CMA_ERR_RULE;
    *ret = v;
    return CMA_OK;
}

static const struct {
    const char *unit;
    int64_t ms;
} duration_units[] = {
    {"y", 365LL * 24 * 3600 * 1000},
    {"w", 7LL * 24 * 3600 * 1000},
    {"d", 24LL * 3600 * 1000},
    {"h", 3600LL * 1000},
    {"m", 60LL * 1000},
    {"s", 1000},
    {"ms", 1},
};
#define N_DURATION_UNITS (sizeof(duration_units) / sizeof(duration_units[0]))

/* one "<digits><unit>" at s[*i]; *u is the first unit still allowed (units come in order) */
static enum cma_errc duration_part(const char *s, size_t len, size_t *i, size_t *u, int64_t *total)
{
    int64_t v = 0;
    size_t start = *i;
    for (; *i < len && is_digit((unsigned char)s[*i]); (*i)++) {
        if (v > (INT64_MAX - 9) / 10)
            return CMA_ERR_TOO_LARGE;
        v = v * 10 + (s[*i] - '0');
    }
    /* "ms" is one unit; "m" followed by digits is minutes */
    size_t ulen = *i + 1 < len && s[*i] == 'm' && s[*i + 1] == 's' ? 2 : 1;
    if (*i == start || *i >= len)
        return CMA_ERR_RULE;
    while (*u < N_DURATION_UNITS && !(strlen(duration_units[*u].unit) == ulen &&
                                      memcmp(duration_units[*u].unit, s + *i, ulen) == 0))
        (*u)++;
    if (*u == N_DURATION_UNITS)
        return CMA_ERR_RULE; /* unknown unit, repeated, or out of order */
    if (v > (INT64_MAX - *total) / duration_units[*u].ms)
        return CMA_ERR_TOO_LARGE;
    *total += v * duration_units[*u].ms;
    (*u)++;
    *i += ulen;
    return CMA_OK;
}

enum cma_errc cma_pq_parse_duration(const char *s, size_t len, int64_t *ret_ms)
{
    size_t i = 0, u = 0;
    int64_t total = 0;
    if (len == 0)
        return CMA_ERR_RULE;
    while (i < len) {
        enum cma_errc rc = duration_part(s, len, &i, &u, &total);
        if (rc != CMA_OK)
            return rc;
    }
    /* Prometheus holds durations as Go time.Duration (nanoseconds in an int64) */
    if (total > INT64_MAX / 1000000)
        return CMA_ERR_TOO_LARGE;
    *ret_ms = total;
    return CMA_OK;
}
