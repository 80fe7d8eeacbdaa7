/* series_stream_fuzz.c: libFuzzer target for the streaming /api/v1/series parser. The input is
 * fed in two chunks split at data[0] % size, then finished; every callback's views must lie
 * inside NUL-terminated strings of the stated lengths. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "cma/prom.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int check_series(void *ctx, const char *metric, size_t metric_len,
                        const struct cma_label_view *labels, size_t n_labels)
{
    size_t *calls = ctx;
    (*calls)++;
    if (strlen(metric) != metric_len)
        abort();
    for (size_t i = 0; i < n_labels; i++)
        if (strlen(labels[i].name) != labels[i].name_len ||
            strlen(labels[i].value) != labels[i].value_len)
            abort();
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct cma_series_parser *sp = NULL;
    size_t calls = 0;
    if (cma_series_parser_new(check_series, &calls, &sp) != CMA_OK)
        return 0;
    size_t split = size ? data[0] % size : 0;
    struct cma_err err;
    cma_err_clear(&err);
    enum cma_errc rc = cma_series_parser_feed(sp, (const char *)data, split, &err);
    if (rc == CMA_OK)
        rc = cma_series_parser_feed(sp, (const char *)data + split, size - split, &err);
    if (rc == CMA_OK)
        rc = cma_series_parser_finish(sp, &err);
    if (rc != CMA_OK && (err.code != rc || err.msg[0] == '\0'))
        abort();
    if (cma_series_parser_count(sp) < calls)
        abort();
    cma_series_parser_free(sp);
    return 0;
}
