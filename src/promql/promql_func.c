/* promql_func.c: the PromQL function table and the names of operators and types.
 *
 * Owns what Prometheus' promql/parser/functions.go says about each function: its argument types,
 * how many may be left out or repeated (variadic), and its result type; the table is the union
 * of Prometheus 2.42 (holt_winters, removed in 3.0) and 3.x (including the functions 3.x keeps
 * behind --enable-feature=promql-experimental-functions: a rule may name them, the backend
 * decides whether it runs them). Also the type of any tree node (Expr.Type()). */
#include <string.h>

#include "promql_internal.h"

#define V PQ_T_VECTOR
#define M PQ_T_MATRIX
#define S PQ_T_SCALAR
#define STR PQ_T_STRING

/* name, argument types, number of them, variadic, result; sorted by name */
static const struct pq_func functions[] = {
    {"abs", {V}, 1, 0, V},
    {"absent", {V}, 1, 0, V},
    {"absent_over_time", {M}, 1, 0, V},
    {"acos", {V}, 1, 0, V},
    {"acosh", {V}, 1, 0, V},
    {"asin", {V}, 1, 0, V},
    {"asinh", {V}, 1, 0, V},
    {"atan", {V}, 1, 0, V},
    {"atanh", {V}, 1, 0, V},
    {"avg_over_time", {M}, 1, 0, V},
    {"ceil", {V}, 1, 0, V},
    {"changes", {M}, 1, 0, V},
    {"clamp", {V, S, S}, 3, 0, V},
    {"clamp_max", {V, S}, 2, 0, V},
    {"clamp_min", {V, S}, 2, 0, V},
    {"cos", {V}, 1, 0, V},
    {"cosh", {V}, 1, 0, V},
    {"count_over_time", {M}, 1, 0, V},
    {"day_of_month", {V}, 1, 1, V},
    {"day_of_week", {V}, 1, 1, V},
    {"day_of_year", {V}, 1, 1, V},
    {"days_in_month", {V}, 1, 1, V},
    {"deg", {V}, 1, 0, V},
    {"delta", {M}, 1, 0, V},
    {"deriv", {M}, 1, 0, V},
    {"double_exponential_smoothing", {M, S, S}, 3, 0, V},
    {"exp", {V}, 1, 0, V},
    {"first_over_time", {M}, 1, 0, V},
    {"floor", {V}, 1, 0, V},
    {"histogram_avg", {V}, 1, 0, V},
    {"histogram_count", {V}, 1, 0, V},
    {"histogram_fraction", {S, S, V}, 3, 0, V},
    {"histogram_quantile", {S, V}, 2, 0, V},
    {"histogram_stddev", {V}, 1, 0, V},
    {"histogram_stdvar", {V}, 1, 0, V},
    {"histogram_sum", {V}, 1, 0, V},
    {"holt_winters", {M, S, S}, 3, 0, V},
    {"hour", {V}, 1, 1, V},
    {"idelta", {M}, 1, 0, V},
    {"increase", {M}, 1, 0, V},
    {"info", {V, V}, 2, 1, V},
    {"irate", {M}, 1, 0, V},
    {"label_join", {V, STR, STR, STR}, 4, -1, V},
    {"label_replace", {V, STR, STR, STR, STR}, 5, 0, V},
    {"last_over_time", {M}, 1, 0, V},
    {"ln", {V}, 1, 0, V},
    {"log10", {V}, 1, 0, V},
    {"log2", {V}, 1, 0, V},
    {"mad_over_time", {M}, 1, 0, V},
    {"max_over_time", {M}, 1, 0, V},
    {"min_over_time", {M}, 1, 0, V},
    {"minute", {V}, 1, 1, V},
    {"month", {V}, 1, 1, V},
    {"pi", {0}, 0, 0, S},
    {"predict_linear", {M, S}, 2, 0, V},
    {"present_over_time", {M}, 1, 0, V},
    {"quantile_over_time", {S, M}, 2, 0, V},
    {"rad", {V}, 1, 0, V},
    {"rate", {M}, 1, 0, V},
    {"resets", {M}, 1, 0, V},
    {"round", {V, S}, 2, 1, V},
    {"scalar", {V}, 1, 0, S},
    {"sgn", {V}, 1, 0, V},
    {"sin", {V}, 1, 0, V},
    {"sinh", {V}, 1, 0, V},
    {"sort", {V}, 1, 0, V},
    {"sort_by_label", {V, STR}, 2, -1, V},
    {"sort_by_label_desc", {V, STR}, 2, -1, V},
    {"sort_desc", {V}, 1, 0, V},
    {"sqrt", {V}, 1, 0, V},
    {"stddev_over_time", {M}, 1, 0, V},
    {"stdvar_over_time", {M}, 1, 0, V},
    {"sum_over_time", {M}, 1, 0, V},
    {"tan", {V}, 1, 0, V},
    {"tanh", {V}, 1, 0, V},
    {"time", {0}, 0, 0, S},
    {"timestamp", {V}, 1, 0, V},
    {"ts_of_first_over_time", {M}, 1, 0, V},
    {"ts_of_last_over_time", {M}, 1, 0, V},
    {"ts_of_max_over_time", {M}, 1, 0, V},
    {"ts_of_min_over_time", {M}, 1, 0, V},
    {"vector", {S}, 1, 0, V},
    {"year", {V}, 1, 1, V},
};

const struct pq_func *cma_pq_func_lookup(const char *name, size_t len)
{
    size_t lo = 0, hi = sizeof(functions) / sizeof(functions[0]);
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        const char *f = functions[mid].name;
        size_t flen = strlen(f);
        int c = memcmp(f, name, flen < len ? flen : len);
        if (c == 0)
            c = flen < len ? -1 : flen > len ? 1 : 0;
        if (c == 0)
            return &functions[mid];
        if (c < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return NULL;
}

const char *cma_pq_agg_name(enum pq_agg op)
{
    static const char *const names[PQ_AGG__COUNT] = {
        [PQ_AGG_SUM] = "sum",
        [PQ_AGG_AVG] = "avg",
        [PQ_AGG_COUNT] = "count",
        [PQ_AGG_MIN] = "min",
        [PQ_AGG_MAX] = "max",
        [PQ_AGG_GROUP] = "group",
        [PQ_AGG_STDDEV] = "stddev",
        [PQ_AGG_STDVAR] = "stdvar",
        [PQ_AGG_TOPK] = "topk",
        [PQ_AGG_BOTTOMK] = "bottomk",
        [PQ_AGG_COUNT_VALUES] = "count_values",
        [PQ_AGG_QUANTILE] = "quantile",
        [PQ_AGG_LIMITK] = "limitk",
        [PQ_AGG_LIMIT_RATIO] = "limit_ratio",
    };
    return (unsigned)op < PQ_AGG__COUNT ? names[op] : "?";
}

const char *cma_pq_binop_name(enum pq_tok op)
{
    static const char *const names[] = {
        [PQ_ADD] = "+",  [PQ_SUB] = "-",    [PQ_MUL] = "*",       [PQ_DIV] = "/",
        [PQ_MOD] = "%",  [PQ_POW] = "^",    [PQ_ATAN2] = "atan2", [PQ_EQLC] = "==",
        [PQ_NEQ] = "!=", [PQ_GTR] = ">",    [PQ_GTE] = ">=",      [PQ_LSS] = "<",
        [PQ_LTE] = "<=", [PQ_LAND] = "and", [PQ_LOR] = "or",      [PQ_LUNLESS] = "unless",
    };
    if ((size_t)op < sizeof(names) / sizeof(names[0]) && names[op])
        return names[op];
    return "?";
}

const char *cma_pq_type_name(enum pq_type t)
{
    switch (t) {
    case PQ_T_SCALAR:
        return "scalar";
    case PQ_T_VECTOR:
        return "instant vector";
    case PQ_T_MATRIX:
        return "range vector";
    case PQ_T_STRING:
        return "string";
    default:
        return "none";
    }
}

enum pq_type cma_pq_node_type(const struct pq_node *n)
{
    switch (n->kind) {
    case PQ_N_NUMBER:
        return PQ_T_SCALAR;
    case PQ_N_STRING:
        return PQ_T_STRING;
    case PQ_N_SELECTOR:
    case PQ_N_AGGREGATE:
        return PQ_T_VECTOR;
    case PQ_N_MATRIX:
    case PQ_N_SUBQUERY:
        return PQ_T_MATRIX;
    case PQ_N_CALL:
        return n->u.call.fn->ret;
    case PQ_N_BINARY:
        return n->u.bin.lhs->type == PQ_T_SCALAR && n->u.bin.rhs->type == PQ_T_SCALAR ? PQ_T_SCALAR
                                                                                      : PQ_T_VECTOR;
    case PQ_N_UNARY:
        return n->u.unary.expr->type;
    case PQ_N_PAREN:
        return n->u.paren->type;
    }
    return PQ_T_NONE;
}
