/* promql_enforce.c: namespace isolation of a parsed query: adds one label matcher to every
 * selector of the tree (the contract of prom-label-proxy's injectproxy/enforce.go, without its
 * refusal of a conflicting matcher: matchers are ANDed, so adding one never widens what a
 * selector reads, and a selector that names another namespace simply reads nothing).
 *
 * Every selector is reached because the walk visits every node kind: selectors, the selector
 * of a range selector, subqueries (any expression inside), function arguments (absent(x),
 * label_replace(x, ...): the selector inside is restricted, whatever the function does to the
 * labels afterwards), aggregation parameters and arguments, both sides of binary operations
 * (x or on() vector(1): vector(1) reads no series), unary operands and parentheses.
 * Recursion is bounded by the parser's tree height limit. */
#include <string.h>

#include "cma/promql.h"
#include "promql_internal.h"

struct enforcer {
    struct cma_promql *q;
    struct pq_matcher add;
    size_t n_selectors;
};

static enum cma_errc add_matcher(struct enforcer *e, struct pq_node *sel)
{
    size_t n = sel->u.sel.n_matchers;
    struct pq_matcher *m = cma_arena_array(&e->q->arena, n + 1, sizeof(*m));
    if (!m)
        return e->q->arena.rc ? e->q->arena.rc : CMA_ERR_NOMEM;
    memcpy(m, sel->u.sel.matchers, n * sizeof(*m));
    m[n] = e->add;
    sel->u.sel.matchers = m;
    sel->u.sel.n_matchers = n + 1;
    e->n_selectors++;
    return CMA_OK;
}

static enum cma_errc walk(struct enforcer *e, struct pq_node *n);

static enum cma_errc walk_all(struct enforcer *e, struct pq_node **nodes, size_t n)
{
    enum cma_errc rc = CMA_OK;
    for (size_t i = 0; rc == CMA_OK && i < n; i++)
        if (nodes[i])
            rc = walk(e, nodes[i]);
    return rc;
}

static enum cma_errc walk(struct enforcer *e, struct pq_node *n)
{
    switch (n->kind) {
    case PQ_N_NUMBER:
    case PQ_N_STRING:
        return CMA_OK;
    case PQ_N_SELECTOR:
        return add_matcher(e, n);
    case PQ_N_MATRIX:
        return walk(e, n->u.matrix.sel);
    case PQ_N_SUBQUERY:
        return walk(e, n->u.sub.expr);
    case PQ_N_CALL:
        return walk_all(e, n->u.call.args, n->u.call.n_args);
    case PQ_N_AGGREGATE:
        return walk_all(e, (struct pq_node *[]){n->u.agg.param, n->u.agg.expr}, 2);
    case PQ_N_BINARY:
        return walk_all(e, (struct pq_node *[]){n->u.bin.lhs, n->u.bin.rhs}, 2);
    case PQ_N_UNARY:
        return walk(e, n->u.unary.expr);
    case PQ_N_PAREN:
        return walk(e, n->u.paren);
    }
    return CMA_ERR_INTERNAL;
}

enum cma_errc cma_promql_enforce(struct cma_promql *q, const char *label, const char *value,
                                 bool *ret_had_selector, struct cma_err *reterr)
{
    if (!label || !cma_pq_is_label_name(label, strlen(label)) || !value)
        return cma_err_set(reterr, CMA_ERR_RULE,
                           "the enforced label \"%s\" is not a label name (letters, digits "
                           "and '_', not starting with a digit)",
                           label ? label : "");
    struct enforcer e = {.q = q};
    char *name = cma_arena_strdup(&q->arena, label);
    char *val = cma_arena_strdup(&q->arena, value);
    if (!name || !val)
        return cma_err_set(reterr, q->arena.rc ? q->arena.rc : CMA_ERR_NOMEM,
                           "out of memory enforcing a label");
    e.add = (struct pq_matcher){
        .name = {name, strlen(name)}, .op = PQ_M_EQ, .value = {val, strlen(val)}};
    enum cma_errc rc = walk(&e, q->root);
    if (rc != CMA_OK)
        return cma_err_set(reterr, rc, "cannot enforce %s=\"%s\" on the query", label, value);
    if (ret_had_selector)
        *ret_had_selector = e.n_selectors > 0;
    return CMA_OK;
}
