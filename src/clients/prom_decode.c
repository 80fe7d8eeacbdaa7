/* prom_decode.c: the helpers of struct cma_prom_result (free, label lookup) and
 * cma_prom_decode_query(), which runs a whole /api/v1/query body through the streaming decoder
 * (query_stream.c) so tests and fuzzing exercise the very code that decodes live answers.
 *
 * DESIGN: a sample's labels and their strings are one allocation (query_stream.c), so freeing a
 * sample is one free(); the bytes a result holds go back to the budget it was charged to. */
#include "cma/prom.h"

#include <stdlib.h>
#include <string.h>

void cma_prom_result_free(struct cma_prom_result *r)
{
    if (!r)
        return;
    for (size_t i = 0; i < r->n_samples; i++)
        free(r->samples[i].labels);
    free(r->samples);
    if (r->budget && r->charged)
        atomic_fetch_sub(&r->budget->used, r->charged);
    free(r);
}

const char *cma_sample_label(const struct cma_sample *s, const char *name)
{
    if (!s || !name)
        return NULL;
    size_t lo = 0, hi = s->n_labels;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        int c = strcmp(s->labels[mid].name, name);
        if (c == 0)
            return s->labels[mid].value;
        if (c < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return NULL;
}

enum cma_errc cma_prom_decode_query(const char *body, size_t len, struct cma_prom_result **ret,
                                    struct cma_err *reterr)
{
    struct cma_query_parser *qp = NULL;
    if (cma_query_parser_new(NULL, NULL, NULL, &qp) != CMA_OK)
        return cma_err_set(reterr, CMA_ERR_NOMEM, "out of memory");
    enum cma_errc rc = cma_query_parser_feed(qp, body ? body : "", body ? len : 0, reterr);
    if (rc == CMA_OK)
        rc = cma_query_parser_finish(qp, ret, reterr);
    cma_query_parser_free(qp);
    return rc;
}
