/* template_fuzz.c: libFuzzer target for the template engine. Parses the input as a template;
 * if it parses, renders it against a fixed dot with every field metricsQuery and
 * resources.template offer (plus values of each kind) into a buffer with a 64 KiB ceiling.
 * Any input must end in CMA_OK or a clean error: no crash, no leak, no endless loop. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "cma/template.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct cma_template *t = NULL;
    struct cma_err err;
    cma_err_clear(&err);
    if (cma_template_parse((const char *)data, size, &t, &err) != CMA_OK) {
        if (t != NULL || err.code == CMA_OK || strlen(err.msg) == 0 || strchr(err.msg, '\n'))
            abort();
        return 0;
    }
    (void)cma_template_uses_field(t, "Resource");

    /* unsorted on purpose: printing and range must sort map keys */
    struct cma_tfield values[] = {
        {"resource", cma_tv_string("bar|baz", 7)},
        {"namespaces", cma_tv_string("default", 7)},
        {"", cma_tv_string("", 0)},
    };
    struct cma_tfield groups[] = {
        {NULL, cma_tv_string("resource", 8)},
        {NULL, cma_tv_string("extra", 5)},
        {NULL, cma_tv_string("groups", 6)},
    };
    struct cma_tvalue num = {.kind = CMA_TV_INT, .u.i = -42};
    struct cma_tvalue yes = {.kind = CMA_TV_BOOL, .u.b = true};
    struct cma_tvalue nil = {.kind = CMA_TV_NIL};
    struct cma_tfield inner[] = {{"Group", cma_tv_string("", 0)},
                                 {"Resource", cma_tv_string("pod", 3)}};
    struct cma_tfield fields[] = {
        {"Series", cma_tv_string("http_requests_total", 19)},
        {"LabelMatchers", cma_tv_string("namespace=\"default\",pod=~\"a|b\"", 31)},
        {"LabelValuesByName", cma_tv_list(CMA_TV_MAP, values, 3)},
        {"GroupBy", cma_tv_string("resource,extra,groups", 21)},
        {"GroupBySlice", cma_tv_list(CMA_TV_SLICE, groups, 3)},
        {"Group", cma_tv_string("", 0)},
        {"Resource", cma_tv_string("pod", 3)},
        {"Num", num},
        {"Yes", yes},
        {"Nil", nil},
        {"Inner", cma_tv_list(CMA_TV_STRUCT, inner, 2)},
        {"Empty", cma_tv_list(CMA_TV_SLICE, NULL, 0)},
    };
    struct cma_tvalue dot = cma_tv_list(CMA_TV_STRUCT, fields, sizeof(fields) / sizeof(fields[0]));

    struct cma_buf out;
    cma_buf_init(&out, 64 * 1024);
    cma_err_clear(&err);
    enum cma_errc rc = cma_template_render_limited(t, &dot, &out, 200000, &err);
    if (rc != CMA_OK && (err.code != rc || strchr(err.msg, '\n')))
        abort();
    if (rc == CMA_OK && out.len > 64 * 1024)
        abort();
    cma_buf_done(&out);
    cma_template_free(t);
    return 0;
}
