/* query_stream_fuzz.c: libFuzzer target for the streaming /api/v1/query decoder with a keep
 * callback and a byte budget. The input is decoded twice: in one piece, and in two chunks split
 * at data[0] % size. Both must agree (code, samples, labels, values); a result's labels must be
 * sorted, unique and NUL-terminated at their stated lengths; kept series must be those the keep
 * callback accepted; and the budget must be back to zero once everything is freed. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "cma/prom.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Keeps series whose label set has an even number of labels, checking the views. */
static bool keep_even(void *ctx, const struct cma_label_view *labels, size_t n)
{
    size_t *calls = ctx;
    (*calls)++;
    for (size_t i = 0; i < n; i++) {
        if (strlen(labels[i].name) != labels[i].name_len ||
            strlen(labels[i].value) != labels[i].value_len)
            abort();
        if (i > 0 && strcmp(labels[i - 1].name, labels[i].name) >= 0)
            abort();
    }
    return n % 2 == 0;
}

static enum cma_errc decode(const uint8_t *data, size_t size, size_t split,
                            struct cma_prom_budget *b, struct cma_prom_result **ret, size_t *calls)
{
    struct cma_query_parser *qp = NULL;
    if (cma_query_parser_new(keep_even, calls, b, &qp) != CMA_OK)
        return CMA_ERR_NOMEM;
    struct cma_err err;
    cma_err_clear(&err);
    enum cma_errc rc = cma_query_parser_feed(qp, (const char *)data, split, &err);
    if (rc == CMA_OK)
        rc = cma_query_parser_feed(qp, (const char *)data + split, size - split, &err);
    if (rc == CMA_OK)
        rc = cma_query_parser_finish(qp, ret, &err);
    if (rc != CMA_OK && (err.code != rc || err.msg[0] == '\0' || *ret))
        abort();
    cma_query_parser_free(qp);
    return rc;
}

static bool same_value(double a, double b)
{
    return (isnan(a) && isnan(b)) || a == b;
}

static void check_result(const struct cma_prom_result *r)
{
    if (r->n_samples > r->n_seen + (r->type == CMA_PROM_SCALAR))
        abort();
    for (size_t i = 0; i < r->n_samples; i++) {
        const struct cma_sample *s = &r->samples[i];
        if (s->n_labels % 2 != 0)
            abort(); /* keep_even refused those */
        for (size_t j = 0; j < s->n_labels; j++) {
            if (j > 0 && strcmp(s->labels[j - 1].name, s->labels[j].name) >= 0)
                abort();
            if (cma_sample_label(s, s->labels[j].name) != s->labels[j].value)
                abort();
        }
    }
}

static void compare(const struct cma_prom_result *a, const struct cma_prom_result *b)
{
    if (a->type != b->type || a->n_samples != b->n_samples || a->n_seen != b->n_seen)
        abort();
    for (size_t i = 0; i < a->n_samples; i++) {
        const struct cma_sample *x = &a->samples[i], *y = &b->samples[i];
        if (x->n_labels != y->n_labels || x->timestamp_ms != y->timestamp_ms ||
            !same_value(x->value, y->value))
            abort();
        for (size_t j = 0; j < x->n_labels; j++)
            if (strcmp(x->labels[j].name, y->labels[j].name) != 0 ||
                strcmp(x->labels[j].value, y->labels[j].value) != 0)
                abort();
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct cma_prom_budget budget = {.max = 1 << 20};
    atomic_init(&budget.used, 0);
    struct cma_prom_result *whole = NULL, *split = NULL;
    size_t calls_whole = 0, calls_split = 0;
    enum cma_errc rc1 = decode(data, size, size, &budget, &whole, &calls_whole);
    enum cma_errc rc2 =
        decode(data, size, size ? data[0] % size : 0, &budget, &split, &calls_split);
    if (rc1 != rc2)
        abort();
    if (rc1 == CMA_OK) {
        check_result(whole);
        compare(whole, split);
        if (calls_whole != calls_split)
            abort();
    }
    cma_prom_result_free(whole);
    cma_prom_result_free(split);
    if (atomic_load(&budget.used) != 0)
        abort();
    return 0;
}
