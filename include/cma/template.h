/* template.h: the Go text/template subset that prometheus-adapter configs use, with `<<` `>>`
 * delimiters. Parsed once at load (errors carry line/column inside the template text), rendered
 * per request into a cma_buf. A compiled template is immutable and may be rendered from many
 * threads at once.
 *
 * Supported: text, actions `<< pipeline >>` with `<<-`/`->>` trimming, comments (slash-star inside
 * the delimiters), fields `.A.B`, `$` and `$x` variables (`<< $x := ... >>`, `range $i, $v :=
 * ...`), `if/else if/ else/end`, `range/else/end`, `with/else/end`, pipelines `a | f b`,
 * parenthesised sub-expressions, string ("..", `..`), int, bool and nil literals, and the Go
 * builtins `index len printf print println eq ne lt le gt ge and or not slice html urlquery js
 * call` (call is rejected at parse time: no function values exist here). Printing follows Go's fmt
 * %v: strings raw, slices "[a b]", maps "map[k:v]" sorted by key, bools true/false, missing map key
 * via field syntax prints "<no value>", via index gives "". */
#ifndef CMA_TEMPLATE_H
#define CMA_TEMPLATE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cma/buf.h"
#include "cma/err.h"

struct cma_template;

enum cma_tvalue_kind {
    CMA_TV_NIL,    /* Go nil / missing value */
    CMA_TV_STRING, /* .str */
    CMA_TV_BOOL,   /* .b */
    CMA_TV_INT,    /* .i */
    CMA_TV_SLICE,  /* .list: []string-like, items of any kind */
    CMA_TV_MAP,    /* .list: map[string]X; keys are the field names (any order; printed sorted) */
    CMA_TV_STRUCT, /* .list: struct; fields by name, printed as {v1 v2} in declaration order */
};

struct cma_tfield;

/* A borrowed view of data the caller owns for the duration of one render. */
struct cma_tvalue {
    enum cma_tvalue_kind kind;
    union {
        struct {
            const char *ptr;
            size_t len;
        } str;
        bool b;
        int64_t i;
        struct {
            const struct cma_tfield *items; /* SLICE: names are ignored (may be NULL) */
            size_t n;
        } list;
    } u;
};

struct cma_tfield {
    const char *name;
    struct cma_tvalue value;
};

/* Parses `text` (len bytes, need not be NUL-terminated). On failure *ret is untouched and
 * reterr has CMA_ERR_TEMPLATE_PARSE with line/column relative to the template text (1-based,
 * column in bytes) and a message like "unexpected \"}\" in operand" or "function \"join\" not
 * defined". Caller owns the result: free with cma_template_free(). */
enum cma_errc cma_template_parse(const char *text, size_t len, struct cma_template **ret,
                                 struct cma_err *reterr);
/* Same, and *go_only (may be NULL) tells a failure on text that Go's text/template accepts but
 * this engine does not implement (define, template, block, call, complex constants) from a real
 * syntax error: prometheus-adapter loads such text, so callers may load it with a warning. */
enum cma_errc cma_template_parse_go(const char *text, size_t len, struct cma_template **ret,
                                    bool *go_only, struct cma_err *reterr);
void cma_template_free(struct cma_template *t);

/* True if the template refers to the top-level field `name` anywhere (".Resource" → "Resource"). */
bool cma_template_uses_field(const struct cma_template *t, const char *name);

/* Renders with `dot` as the data; appends to out. Execution errors (index out of range, wrong
 * argument types, field of a non-struct, ...) give CMA_ERR_TEMPLATE_EXEC; out may then hold a
 * partial render that the caller must discard. Buffer limits give CMA_ERR_TOO_LARGE. */
enum cma_errc cma_template_render(const struct cma_template *t, const struct cma_tvalue *dot,
                                  struct cma_buf *out, struct cma_err *reterr);

/* Same as cma_template_render() with a budget of evaluation steps (actions, commands and range
 * iterations; 0 means CMA_TEMPLATE_MAX_STEPS). A render that needs more fails with
 * CMA_ERR_TEMPLATE_EXEC, so nested ranges over large data cannot run for ever. */
enum cma_errc cma_template_render_limited(const struct cma_template *t,
                                          const struct cma_tvalue *dot, struct cma_buf *out,
                                          uint64_t max_steps, struct cma_err *reterr);

/* Limits. Parse: text size and nesting of if/range/with/else-if blocks and parentheses (over
 * them: CMA_ERR_TEMPLATE_PARSE). Render: evaluation steps, and bytes of intermediate values
 * such as printf results (over them: CMA_ERR_TEMPLATE_EXEC and CMA_ERR_TOO_LARGE). */
#define CMA_TEMPLATE_MAX_BYTES ((size_t)1 << 20)
#define CMA_TEMPLATE_MAX_DEPTH 100
#define CMA_TEMPLATE_MAX_STEPS ((uint64_t)10 * 1000 * 1000)
#define CMA_TEMPLATE_MAX_SCRATCH_BYTES ((size_t)16 << 20)

/* Convenience constructors for building data. */
static inline struct cma_tvalue cma_tv_string(const char *s, size_t len)
{
    struct cma_tvalue v;
    v.kind = CMA_TV_STRING;
    v.u.str.ptr = s;
    v.u.str.len = len;
    return v;
}
static inline struct cma_tvalue cma_tv_list(enum cma_tvalue_kind kind, const struct cma_tfield *f,
                                            size_t n)
{
    struct cma_tvalue v;
    v.kind = kind;
    v.u.list.items = f;
    v.u.list.n = n;
    return v;
}

#endif
