/* promql.h: PromQL expressions: parse text into a tree, print a tree as canonical text, and add
 * a label matcher to every selector of a tree (the namespace isolation of MetricRule queries).
 *
 * The grammar is the union of what Prometheus 2.42 (Debian bookworm) and 3.x accept; the
 * printer writes Prometheus' one-line canonical text (Expr.String()). docs/architecture.md,
 * "The PromQL parser", lists the version differences and the limits.
 * Errors carry a position: err.line and err.column (1-based, the column counted in bytes), the
 * code is CMA_ERR_RULE (the text is not PromQL) or CMA_ERR_TOO_LARGE (over a limit below), and
 * err.file is left empty for the caller to name the field.
 * A parsed query is one allocation owner (an arena); nothing in it is shared. Not thread-safe per
 * query; distinct queries may be used from distinct threads. */
#ifndef CMA_PROMQL_H
#define CMA_PROMQL_H

#include <stdbool.h>
#include <stddef.h>

#include "cma/buf.h"
#include "cma/err.h"

#define CMA_PROMQL_MAX_BYTES ((size_t)64 << 10) /* longest query text accepted */
/* deepest nesting: parentheses, calls, aggregations and unary signs, one per level of the text */
#define CMA_PROMQL_MAX_DEPTH 200
#define CMA_PROMQL_MAX_NODES 20000 /* most nodes in one tree */

struct cma_promql;

/* Parses text[0..len) (need not be NUL-terminated). On success *ret_q is the tree (caller frees
 * with cma_promql_free). On failure *ret_q is untouched and reterr holds the first error with
 * its line and column: what Prometheus rejects is rejected (syntax, types, arity, duplicated
 * modifiers, selectors that match everything). */
enum cma_errc cma_promql_parse(const char *text, size_t len, struct cma_promql **ret_q,
                               struct cma_err *reterr);

/* Appends the canonical text of q to out (CMA_ERR_TOO_LARGE or CMA_ERR_NOMEM from the buffer). */
enum cma_errc cma_promql_print(const struct cma_promql *q, struct cma_buf *out);

/* Adds the matcher label="value" to every selector of q: vector selectors, the selector of each
 * range selector, and every selector inside subqueries, functions, aggregations and binary
 * operations, including selectors that only match on __name__. Existing matchers are kept, so a
 * selector that already says label="other" then matches nothing. label must be a label name
 * (letters, digits, '_', not starting with a digit). *ret_had_selector (may be NULL) says whether
 * q has any selector at all (a query without one reads no series). Fails with CMA_ERR_RULE for a
 * bad label name, CMA_ERR_NOMEM or CMA_ERR_TOO_LARGE (node limit). */
enum cma_errc cma_promql_enforce(struct cma_promql *q, const char *label, const char *value,
                                 bool *ret_had_selector, struct cma_err *reterr);

/* Frees q; accepts NULL. */
void cma_promql_free(struct cma_promql *q);

#endif
