/* promql_fuzz.c: libFuzzer target for src/promql. Parses the input as a PromQL expression; a
 * failure must be a located CMA_ERR_RULE or CMA_ERR_TOO_LARGE. When it parses: prints it, parses
 * the printed text (must succeed) and prints that again (must be identical: the printer's text is
 * a fixpoint); adds a namespace matcher to both trees, and the two enforced texts must be
 * identical, parse, and carry the matcher whenever the query has a selector. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "cma/promql.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static struct cma_promql *parse_or_abort(const char *text, size_t len)
{
    struct cma_err err;
    cma_err_clear(&err);
    struct cma_promql *q = NULL;
    if (cma_promql_parse(text, len, &q, &err) != CMA_OK)
        abort(); /* printed text must parse */
    return q;
}

static void print_or_abort(const struct cma_promql *q, struct cma_buf *out)
{
    if (cma_promql_print(q, out) != CMA_OK)
        abort();
}

static void enforce_or_abort(struct cma_promql *q, bool *ret_had)
{
    struct cma_err err;
    cma_err_clear(&err);
    if (cma_promql_enforce(q, "namespace", "fuzz\"\n", ret_had, &err) != CMA_OK)
        abort();
}

static bool same(const struct cma_buf *a, const struct cma_buf *b)
{
    return a->len == b->len && memcmp(cma_buf_str(a), cma_buf_str(b), a->len) == 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct cma_err err;
    cma_err_clear(&err);
    struct cma_promql *q = NULL;
    if (cma_promql_parse((const char *)data, size, &q, &err) != CMA_OK) {
        if ((err.code != CMA_ERR_RULE && err.code != CMA_ERR_TOO_LARGE) || err.line == 0 ||
            err.column == 0 || err.column > size + 1)
            abort(); /* every parse error is located */
        return 0;
    }
    struct cma_buf text, again, enforced, enforced2;
    cma_buf_init(&text, 1 << 24);
    cma_buf_init(&again, 1 << 24);
    cma_buf_init(&enforced, 1 << 24);
    cma_buf_init(&enforced2, 1 << 24);
    print_or_abort(q, &text);
    struct cma_promql *q2 = parse_or_abort(cma_buf_str(&text), text.len);
    print_or_abort(q2, &again);
    if (!same(&text, &again))
        abort(); /* print(parse(print(x))) == print(x) */
    bool had = false, had2 = false;
    enforce_or_abort(q, &had);
    enforce_or_abort(q2, &had2);
    print_or_abort(q, &enforced);
    print_or_abort(q2, &enforced2);
    if (had != had2 || !same(&enforced, &enforced2))
        abort();
    if (had && !strstr(cma_buf_str(&enforced), "namespace=\"fuzz\\\"\\n\""))
        abort();
    cma_promql_free(parse_or_abort(cma_buf_str(&enforced), enforced.len));
    cma_promql_free(q2);
    cma_promql_free(q);
    cma_buf_done(&text);
    cma_buf_done(&again);
    cma_buf_done(&enforced);
    cma_buf_done(&enforced2);
    return 0;
}
