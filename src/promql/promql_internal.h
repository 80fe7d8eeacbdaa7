/* promql_internal.h: what the modules of src/promql share: tokens (promql_lex.c), the tree
 * (built by promql_parse.c in the query's arena, walked by promql_print.c and promql_enforce.c)
 * and the function table (promql_func.c). Not a public contract: cma/promql.h is. */
#ifndef CMA_PROMQL_INTERNAL_H
#define CMA_PROMQL_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cma/arena.h"
#include "cma/buf.h"
#include "cma/err.h"

/* ---- tokens ---- */

enum pq_tok {
    PQ_EOF,
    PQ_IDENT,        /* letters, digits, '_' (and keywords; see kw) */
    PQ_METRIC_IDENT, /* an identifier with ':' */
    PQ_NUMBER,
    PQ_DURATION,
    PQ_STRING,
    PQ_LPAREN,
    PQ_RPAREN,
    PQ_LBRACE,
    PQ_RBRACE,
    PQ_LBRACKET,
    PQ_RBRACKET,
    PQ_COMMA,
    PQ_COLON,
    PQ_EQL,       /* = */
    PQ_EQL_REGEX, /* =~ */
    PQ_NEQ_REGEX, /* !~ */
    PQ_AT,
    /* binary operators, in this order (see pq_binop_*) */
    PQ_ADD,
    PQ_SUB,
    PQ_MUL,
    PQ_DIV,
    PQ_MOD,
    PQ_POW,
    PQ_ATAN2,
    PQ_EQLC, /* == */
    PQ_NEQ,  /* != */
    PQ_GTR,
    PQ_GTE,
    PQ_LSS,
    PQ_LTE,
    PQ_LAND,
    PQ_LOR,
    PQ_LUNLESS,
};

/* Keywords: an identifier token also says which keyword it spells (case-insensitive, as
 * Prometheus' lexer), PQ_KW_NONE for a plain name. */
enum pq_kw {
    PQ_KW_NONE,
    PQ_KW_AND,
    PQ_KW_OR,
    PQ_KW_UNLESS,
    PQ_KW_ATAN2,
    PQ_KW_BOOL,
    PQ_KW_BY,
    PQ_KW_WITHOUT,
    PQ_KW_ON,
    PQ_KW_IGNORING,
    PQ_KW_GROUP_LEFT,
    PQ_KW_GROUP_RIGHT,
    PQ_KW_OFFSET,
    PQ_KW_START,
    PQ_KW_END,
    PQ_KW_INF,
    PQ_KW_NAN,
    PQ_KW_AGG, /* an aggregation operator; token.agg says which */
};

enum pq_agg {
    PQ_AGG_SUM,
    PQ_AGG_AVG,
    PQ_AGG_COUNT,
    PQ_AGG_MIN,
    PQ_AGG_MAX,
    PQ_AGG_GROUP,
    PQ_AGG_STDDEV,
    PQ_AGG_STDVAR,
    PQ_AGG_TOPK,
    PQ_AGG_BOTTOMK,
    PQ_AGG_COUNT_VALUES,
    PQ_AGG_QUANTILE,
    PQ_AGG_LIMITK,      /* Prometheus 3 (feature promql-experimental-functions) */
    PQ_AGG_LIMIT_RATIO, /* Prometheus 3 (same) */
    PQ_AGG__COUNT
};

struct pq_token {
    enum pq_tok type;
    enum pq_kw kw;   /* for PQ_IDENT */
    enum pq_agg agg; /* for PQ_KW_AGG */
    size_t pos;      /* byte offset of the first byte */
    size_t len;      /* bytes of source text */
};

/* The lexer: tokens on demand; whitespace and comments ("# ..." to the end of the line) are
 * skipped. Inside braces every word is a plain identifier; inside brackets numbers must be
 * durations. */
struct pq_lexer {
    const char *src;
    size_t len;
    size_t pos;
    int brace_depth;     /* 0 or 1 */
    int bracket_depth;   /* 0 or 1 */
    bool after_lbracket; /* the last token was '[': a duration must follow, no comment */
};

/* Reads the next token. On a lexical error returns CMA_ERR_RULE with the error (position set
 * from the offending byte). */
enum cma_errc cma_pq_lex_next(struct pq_lexer *lx, struct pq_token *ret, struct cma_err *reterr);

/* Unquotes a string token (Go strconv.Unquote for "", '' and ``) into the arena. */
enum cma_errc cma_pq_unquote(struct cma_arena *a, const char *s, size_t len, const char *src,
                             char **ret, size_t *ret_len, struct cma_err *reterr);
/* model.ParseDuration of a duration token: units y w d h m s ms, each at most once, in that
 * order; the result in milliseconds. Errors say why, at the token. */
enum cma_errc cma_pq_parse_duration(const char *s, size_t len, int64_t *ret_ms);
/* strconv.ParseInt(s, 0, 64), else ParseFloat: decimal, hex (0x..), exponent, Inf, NaN. */
enum cma_errc cma_pq_parse_number(const char *s, size_t len, double *ret);

/* Sets an error at byte offset pos of src (line and column 1-based, column in bytes). */
enum cma_errc cma_pq_error_at(struct cma_err *err, enum cma_errc code, const char *src, size_t pos,
                              const char *fmt, ...) __attribute__((format(printf, 5, 6)));

/* ---- tree ---- */

/* Tallest tree accepted: walkers recurse once per level, so this bounds their stack (a chain
 * "a + a + ... + a" is built by a loop, not by recursion, so CMA_PROMQL_MAX_DEPTH alone would
 * not bound it). */
#define CMA_PROMQL_MAX_HEIGHT 1000

enum pq_type { PQ_T_NONE, PQ_T_SCALAR, PQ_T_VECTOR, PQ_T_MATRIX, PQ_T_STRING };

enum pq_kind {
    PQ_N_NUMBER,
    PQ_N_STRING,
    PQ_N_SELECTOR,
    PQ_N_MATRIX,
    PQ_N_SUBQUERY,
    PQ_N_CALL,
    PQ_N_AGGREGATE,
    PQ_N_BINARY,
    PQ_N_UNARY,
    PQ_N_PAREN,
};

enum pq_match { PQ_M_EQ, PQ_M_NEQ, PQ_M_RE, PQ_M_NRE };

struct pq_str {
    const char *s; /* NUL-terminated too, but may hold NUL bytes: use len */
    size_t len;
};

struct pq_matcher {
    struct pq_str name;
    enum pq_match op;
    struct pq_str value;
    size_t pos; /* byte offset of the label name, for errors */
};

enum pq_at { PQ_AT_NONE, PQ_AT_TIME, PQ_AT_START, PQ_AT_END };

/* offset and @ of a selector or subquery */
struct pq_mods {
    int64_t offset_ms; /* 0: none (Prometheus prints no "offset 0s") */
    bool has_offset;
    enum pq_at at;
    int64_t at_ms; /* for PQ_AT_TIME */
};

enum pq_card { PQ_CARD_ONE_TO_ONE, PQ_CARD_MANY_TO_ONE, PQ_CARD_ONE_TO_MANY, PQ_CARD_MANY_TO_MANY };

struct pq_labels {
    struct pq_str *items;
    size_t n;
};

struct pq_func {
    const char *name;
    enum pq_type args[5];
    unsigned n_args;
    int variadic; /* 0: exactly n_args; > 0: up to that many more of the last; -1: any more */
    enum pq_type ret;
};

struct pq_node {
    enum pq_kind kind;
    size_t pos;        /* byte offset where the node starts, for errors */
    enum pq_type type; /* set once the node is complete (its children are) */
    unsigned height;   /* 1 for a leaf; bounded by CMA_PROMQL_MAX_HEIGHT */
    union {
        double number;
        struct pq_str string;
        struct {
            struct pq_str name; /* "" when written without one */
            struct pq_matcher *matchers;
            size_t n_matchers;
            struct pq_mods mods;
        } sel;
        struct {
            struct pq_node *sel; /* a PQ_N_SELECTOR, holding the modifiers */
            int64_t range_ms;
        } matrix;
        struct {
            struct pq_node *expr;
            int64_t range_ms, step_ms; /* step 0: "[1h:]" */
            struct pq_mods mods;
        } sub;
        struct {
            const struct pq_func *fn;
            struct pq_node **args;
            size_t n_args;
        } call;
        struct {
            enum pq_agg op;
            struct pq_node *param; /* NULL unless the operator takes one */
            struct pq_node *expr;
            struct pq_labels grouping;
            bool without;
        } agg;
        struct {
            enum pq_tok op;
            struct pq_node *lhs, *rhs;
            bool ret_bool;
            bool on;           /* on (...) rather than ignoring (...) */
            bool has_matching; /* on/ignoring was written */
            enum pq_card card;
            struct pq_labels matching, include;
        } bin;
        struct {
            enum pq_tok op; /* PQ_ADD or PQ_SUB */
            struct pq_node *expr;
        } unary;
        struct pq_node *paren;
    } u;
};

struct cma_promql {
    struct cma_arena arena;
    struct pq_node *root;
    size_t n_nodes;
};

/* ---- functions table (promql_func.c) ---- */

/* The function of that name, or NULL. */
const struct pq_func *cma_pq_func_lookup(const char *name, size_t len);
/* Lower-case name of an aggregation operator. */
const char *cma_pq_agg_name(enum pq_agg op);
/* Text of a binary operator token ("+", "and", "atan2"). */
const char *cma_pq_binop_name(enum pq_tok op);
/* "scalar", "instant vector", "range vector", "string". */
const char *cma_pq_type_name(enum pq_type t);
/* The type an expression evaluates to, from its children's cached types. */
enum pq_type cma_pq_node_type(const struct pq_node *n);

/* ---- regular expressions (promql_regex.c) ---- */

/* NULL when Go's regexp (RE2 syntax) would accept what PCRE2 accepts of re[0..len), else what
 * Go would say is wrong ("invalid escape sequence"). PCRE2 still compiles the pattern after. */
const char *cma_pq_regex_check(const char *re, size_t len);

/* ---- printing helpers (promql_print.c) ---- */

/* Go strconv.Quote of s[0..len) appended to out. */
enum cma_errc cma_pq_quote(struct cma_buf *out, const char *s, size_t len);
/* True when s is a legacy label name ([a-zA-Z_][a-zA-Z0-9_]*). */
bool cma_pq_is_label_name(const char *s, size_t len);
/* True when s is a legacy metric name ([a-zA-Z_:][a-zA-Z0-9_:]*). */
bool cma_pq_is_metric_name(const char *s, size_t len);

#endif
