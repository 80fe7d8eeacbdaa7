/* prom_decode_fuzz.c: libFuzzer target for cma_prom_decode_query() (Prometheus /api/v1/query
 * JSON). Any input must give CMA_OK with a well-formed result or a set error, never a crash. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "cma/prom.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct cma_err err;
    cma_err_clear(&err);
    struct cma_prom_result *r = NULL;
    enum cma_errc rc = cma_prom_decode_query((const char *)data, size, &r, &err);
    if (rc == CMA_OK) {
        if (!r)
            abort();
        for (size_t i = 0; i < r->n_samples; i++) {
            const struct cma_sample *s = &r->samples[i];
            for (size_t j = 0; j < s->n_labels; j++) {
                if (j > 0 && strcmp(s->labels[j - 1].name, s->labels[j].name) >= 0)
                    abort(); /* sorted, no duplicates */
                if (cma_sample_label(s, s->labels[j].name) != s->labels[j].value)
                    abort();
            }
        }
        cma_prom_result_free(r);
    } else if (r || err.code != rc || err.msg[0] == '\0') {
        abort();
    }
    return 0;
}
