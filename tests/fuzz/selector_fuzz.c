/* selector_fuzz.c: libFuzzer target for selector.c. Parses the input as a label selector; when it
 * parses, prints it, re-parses the printed form (must succeed and print identically), matches it
 * against a fixed label set and converts it to PromQL into a capped buffer. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "cma/selector.h"

static const char *lookup(void *ctx, const char *name)
{
    (void)ctx;
    static const char *const labels[][2] = {
        {"app", "web"}, {"tier", "front"}, {"n", "42"}, {"in", ""}, {"a", "b"},
    };
    for (size_t i = 0; i < sizeof(labels) / sizeof(labels[0]); i++)
        if (strcmp(labels[i][0], name) == 0)
            return labels[i][1];
    return NULL;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct cma_err err;
    cma_err_clear(&err);
    struct cma_selector *sel = NULL;
    if (cma_selector_parse((const char *)data, size, &sel, &err) != CMA_OK) {
        if (err.code != CMA_ERR_BAD_SELECTOR || err.column == 0 || err.column > size + 1)
            abort(); /* every parse error is a located BAD_SELECTOR */
        return 0;
    }
    struct cma_buf text, again, promql;
    cma_buf_init(&text, 1 << 20);
    cma_buf_init(&again, 1 << 20);
    cma_buf_init(&promql, 4096);
    if (cma_selector_format(sel, &text) != CMA_OK)
        abort();
    struct cma_selector *sel2 = NULL;
    if (cma_selector_parse(cma_buf_str(&text), text.len, &sel2, &err) != CMA_OK)
        abort(); /* the canonical form must parse */
    if (cma_selector_format(sel2, &again) != CMA_OK || again.len != text.len ||
        memcmp(cma_buf_str(&again), cma_buf_str(&text), text.len) != 0)
        abort(); /* and print identically */
    if (cma_selector_matches(sel, lookup, NULL) != cma_selector_matches(sel2, lookup, NULL))
        abort();
    (void)cma_selector_to_promql(sel, &promql, NULL);
    cma_selector_free(sel2);
    cma_selector_free(sel);
    cma_buf_done(&text);
    cma_buf_done(&again);
    cma_buf_done(&promql);
    return 0;
}
