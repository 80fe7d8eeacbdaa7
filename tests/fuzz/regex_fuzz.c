/* regex_fuzz.c: libFuzzer target for regex.c. Input: "pattern\nsubject\ntemplate" (missing parts
 * fall back to defaults). Compiles the pattern (Go RE2 syntax → PCRE2) and, when it compiles,
 * matches, finds and expands; checks that match and find agree and that offsets are in range. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "cma/regex.h"

#define FUZZ_MAX_INPUT 4096

static const char *next_line(const char **p, const char *end, size_t *ret_len)
{
    const char *start = *p;
    const char *nl = memchr(start, '\n', (size_t)(end - start));
    const char *stop = nl ? nl : end;
    *ret_len = (size_t)(stop - start);
    *p = nl ? nl + 1 : end;
    return start;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size > FUZZ_MAX_INPUT)
        return 0;
    char *copy = malloc(size + 1);
    if (!copy)
        return 0;
    memcpy(copy, data, size);
    copy[size] = '\0';
    const char *p = copy, *end = copy + strlen(copy); /* the pattern API takes a C string */
    size_t pattern_len, subject_len, tmpl_len;
    const char *pattern = next_line(&p, end, &pattern_len);
    int had_subject = p < end;
    const char *subject = next_line(&p, end, &subject_len);
    int had_tmpl = p < end;
    const char *tmpl = next_line(&p, end, &tmpl_len);
    copy[pattern_len] = '\0';
    if (!had_subject) {
        subject = pattern;
        subject_len = pattern_len;
    } else {
        ((char *)subject)[subject_len] = '\0';
    }
    if (!had_tmpl)
        tmpl = "$1-${name}-$0-$$";
    else
        ((char *)tmpl)[tmpl_len] = '\0';

    (void)cma_regex_expand_has_trap(tmpl);
    struct cma_err err;
    cma_err_clear(&err);
    struct cma_regex *re = NULL;
    if (cma_regex_compile(pattern, &re, &err) != CMA_OK) {
        if (err.code == CMA_OK || err.msg[0] == '\0')
            abort(); /* a failure must say why */
        free(copy);
        return 0;
    }
    size_t n_groups = cma_regex_n_groups(re);
    size_t n_ov = 2 * (n_groups + 1);
    size_t *ov = malloc(n_ov * sizeof(*ov));
    if (ov) {
        bool m = cma_regex_match(re, subject, subject_len);
        bool f = cma_regex_find(re, subject, subject_len, ov, n_ov);
        if (m != f)
            abort();
        if (f) {
            for (size_t i = 0; i < n_ov; i += 2) {
                if (ov[i] == (size_t)-1)
                    continue;
                if (ov[i] > ov[i + 1] || ov[i + 1] > subject_len)
                    abort();
            }
            struct cma_buf out;
            cma_buf_init(&out, 1 << 16);
            (void)cma_regex_expand(re, tmpl, subject, ov, &out);
            cma_buf_done(&out);
        }
        (void)cma_regex_group_index(re, "name", 4);
        free(ov);
    }
    cma_regex_free(re);
    free(copy);
    return 0;
}
