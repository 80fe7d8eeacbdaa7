/* selector.h: Kubernetes label selectors (k8s.io/apimachinery labels.Parse syntax) parsed into
 * requirements, matched against label sets, printed in canonical form, and turned into PromQL
 * label matchers exactly as prometheus-adapter does (reference section 4). Also Go %q quoting
 * for PromQL string literals. Parsed selectors are immutable; thread-safe. */
#ifndef CMA_SELECTOR_H
#define CMA_SELECTOR_H

#include <stdbool.h>
#include <stddef.h>

#include "cma/buf.h"
#include "cma/err.h"

enum cma_selector_op {
    CMA_SEL_EQ,         /* a=b, a==b */
    CMA_SEL_NEQ,        /* a!=b */
    CMA_SEL_IN,         /* a in (x,y) */
    CMA_SEL_NOTIN,      /* a notin (x,y) */
    CMA_SEL_EXISTS,     /* a */
    CMA_SEL_NOT_EXISTS, /* !a */
    CMA_SEL_GT,         /* a>1 */
    CMA_SEL_LT,         /* a<1 */
};

struct cma_selector_req {
    char *key;
    enum cma_selector_op op;
    char **values; /* sorted, deduplicated (Kubernetes keeps a string set) */
    size_t n_values;
};

struct cma_selector {
    struct cma_selector_req *reqs; /* sorted by key (stable), as labels.Parse returns them */
    size_t n_reqs;
};

/* Parses text[0..len). Empty or all-space text gives a selector with no requirements (matches
 * everything). Errors (CMA_ERR_BAD_SELECTOR) quote the input and say what was expected, with
 * column = 1-based offset. Keys and values are validated as Kubernetes does (qualified names,
 * label values up to 63 chars). Caller owns the result: cma_selector_free(). */
enum cma_errc cma_selector_parse(const char *text, size_t len, struct cma_selector **ret,
                                 struct cma_err *reterr);
void cma_selector_free(struct cma_selector *sel);

bool cma_selector_is_empty(const struct cma_selector *sel);

/* Looks a label up by name; returns NULL when absent. */
typedef const char *(*cma_label_lookup_fn)(void *ctx, const char *name);
bool cma_selector_matches(const struct cma_selector *sel, cma_label_lookup_fn lookup, void *ctx);

/* Canonical string, as labels.Selector.String(): "a=b,c in (x,y),!d" (appends). */
enum cma_errc cma_selector_format(const struct cma_selector *sel, struct cma_buf *out);

/* Appends the PromQL matchers for the requirements, comma-joined, in order (reference section 4
 * table): =/== → k="v"; != → k!="v"; in 1 value → k=~"v", n values → k=~"a|b"; notin → !~;
 * exists → k!=""; !k → k=""; gt/lt → CMA_ERR_BAD_SELECTOR "operator not supported by
 * prometheus". Nothing is appended for an empty selector. */
enum cma_errc cma_selector_to_promql(const struct cma_selector *sel, struct cma_buf *out,
                                     struct cma_err *reterr);

/* Appends s as a Go strconv.Quote string literal ("a\"b", \\, \n, \x00 ...) usable in PromQL. */
enum cma_errc cma_promql_quote(struct cma_buf *out, const char *s, size_t len);

#endif
