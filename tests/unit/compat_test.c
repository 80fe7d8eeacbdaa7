/* compat_test.c: prometheus-adapter's flag table and Go cipher suite names (src/config/compat.c)
 * on their own: the table's size and order, that every no-effect flag is found by
 * cma_compat_ignored_flag under its name and its alias (and only by an exact, length-bounded
 * name) and gets exactly one "no effect" row in docs/flags.md's table, that implemented flags are
 * never ignored, that names are unique, and which --tls-cipher-suites names are served, known but
 * not offered (RC4), or unknown. (options_test checks the one warning line each no-effect flag
 * prints when parsed.) */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cma/compat.h"

static const struct cma_compat_flag *ignored(const char *name)
{
    return cma_compat_ignored_flag(name, strlen(name));
}

static void test_cma_compat_flag_at__table(void **state)
{
    (void)state;
    size_t n = cma_compat_flag_count();
    assert_int_equal(n, 92);
    size_t no_effect = 0, aliases = 0;
    for (size_t i = 0; i < n; i++) {
        const struct cma_compat_flag *f = cma_compat_flag_at(i);
        assert_non_null(f);
        assert_non_null(f->name);
        assert_non_null(f->origin);
        no_effect += f->no_effect != NULL;
        aliases += f->alias != NULL;
        if (f->alias)
            assert_non_null(f->no_effect); /* only klog's ignored flags have two spellings */
    }
    assert_int_equal(no_effect, 55);
    assert_int_equal(aliases, 8);
    assert_null(cma_compat_flag_at(n));
    assert_string_equal(cma_compat_flag_at(0)->name, "prometheus-url");
    assert_null(cma_compat_flag_at(0)->no_effect);
    assert_string_equal(cma_compat_flag_at(n - 1)->name, "enable-priority-and-fairness");
}

static void test_cma_compat_flag_at__names_are_unique(void **state)
{
    (void)state;
    size_t n = cma_compat_flag_count();
    for (size_t i = 0; i < n; i++) {
        const struct cma_compat_flag *a = cma_compat_flag_at(i);
        for (size_t j = i + 1; j < n; j++) {
            const struct cma_compat_flag *b = cma_compat_flag_at(j);
            if (strcmp(a->name, b->name) == 0 || (a->alias && strcmp(a->alias, b->name) == 0) ||
                (b->alias && strcmp(b->alias, a->name) == 0))
                fail_msg("--%s and --%s share a spelling", a->name, b->name);
        }
    }
}

static void test_cma_compat_ignored_flag__every_no_effect_flag(void **state)
{
    (void)state;
    for (size_t i = 0; i < cma_compat_flag_count(); i++) {
        const struct cma_compat_flag *f = cma_compat_flag_at(i);
        if (!f->no_effect) {
            if (ignored(f->name))
                fail_msg("implemented flag --%s is reported as ignored", f->name);
            continue;
        }
        assert_ptr_equal(ignored(f->name), f);
        if (f->alias)
            assert_ptr_equal(ignored(f->alias), f);
        /* exact names only: a prefix is not the flag */
        assert_ptr_not_equal(cma_compat_ignored_flag(f->name, strlen(f->name) - 1), f);
        assert_true(f->no_effect[0] != '\0');
    }
    assert_string_equal(ignored("log-dir")->name, "log_dir");
    assert_string_equal(ignored("log_dir")->alias, "log-dir");
    assert_int_equal(ignored("client-qps")->type, CMA_COMPAT_FLOAT);
    assert_int_equal(ignored("audit-log-maxage")->type, CMA_COMPAT_INT);
    assert_int_equal(ignored("log-flush-frequency")->type, CMA_COMPAT_DURATION);
    assert_string_equal(ignored("profiling")->no_effect, "no /debug/pprof endpoints are served");
    /* the name is bounded by len, not by a NUL */
    assert_non_null(cma_compat_ignored_flag("vmodule=x", 7));
    assert_null(ignored("v"));
    assert_null(ignored("logdir"));
    assert_null(ignored("no-such-flag"));
    assert_null(cma_compat_ignored_flag("", 0));
}

static void test_cma_compat_print_markdown__one_row_each(void **state)
{
    (void)state;
    char *text = NULL;
    size_t len = 0;
    FILE *out = open_memstream(&text, &len);
    assert_non_null(out);
    cma_compat_print_markdown(out);
    fclose(out);
    size_t lines = 0, noop_rows = 0, impl_rows = 0;
    for (const char *p = text; *p; p++)
        lines += *p == '\n';
    for (const char *p = text; (p = strstr(p, "accepted, no effect (one warning line): ")); p++)
        noop_rows++;
    for (const char *p = text; (p = strstr(p, "implemented: see the table above")); p++)
        impl_rows++;
    assert_int_equal(lines, 2 + cma_compat_flag_count());
    assert_int_equal(noop_rows, 55);
    assert_int_equal(impl_rows, 37);
    assert_non_null(strstr(text, "| `--log_dir` (also `--log-dir`) | klog (component-base logs) | "
                                 "accepted, no effect (one warning line): logs go to stderr in "
                                 "this adapter's own format; --v sets the verbosity |\n"));
    assert_non_null(strstr(text, "| `--secure-port` | apiserver secure serving | implemented: "
                                 "see the table above |\n"));
    assert_int_equal(strncmp(text, "| prometheus-adapter flag | comes from | here |\n", 47), 0);
    free(text);
}

static enum cma_cipher_suite_support cipher(const char *name)
{
    return cma_compat_cipher_suite(name, strlen(name));
}

static void test_cma_compat_cipher_suite__go_names(void **state)
{
    (void)state;
    static const char *const served[] = {
        "TLS_AES_128_GCM_SHA256",
        "TLS_AES_256_GCM_SHA384",
        "TLS_CHACHA20_POLY1305_SHA256",
        "TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA",
        "TLS_ECDHE_ECDSA_WITH_AES_256_CBC_SHA",
        "TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA",
        "TLS_ECDHE_RSA_WITH_AES_256_CBC_SHA",
        "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256",
        "TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384",
        "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256",
        "TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384",
        "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256",
        "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256",
        "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305", /* Kubernetes' legacy alias */
        "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305",
        "TLS_RSA_WITH_AES_128_CBC_SHA",
        "TLS_RSA_WITH_AES_256_CBC_SHA",
        "TLS_RSA_WITH_AES_128_GCM_SHA256",
        "TLS_RSA_WITH_AES_256_GCM_SHA384",
        "TLS_RSA_WITH_AES_128_CBC_SHA256",
        "TLS_RSA_WITH_3DES_EDE_CBC_SHA",
        "TLS_ECDHE_RSA_WITH_3DES_EDE_CBC_SHA",
        "TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA256",
        "TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA256",
    };
    for (size_t i = 0; i < sizeof(served) / sizeof(served[0]); i++)
        if (cipher(served[i]) != CMA_CIPHER_SERVED)
            fail_msg("%s is not served", served[i]);
    assert_int_equal(cipher("TLS_RSA_WITH_RC4_128_SHA"), CMA_CIPHER_NOT_OFFERED);
    assert_int_equal(cipher("TLS_ECDHE_ECDSA_WITH_RC4_128_SHA"), CMA_CIPHER_NOT_OFFERED);
    assert_int_equal(cipher("TLS_ECDHE_RSA_WITH_RC4_128_SHA"), CMA_CIPHER_NOT_OFFERED);
    /* unknown: OpenSSL spellings, other case, prefixes, extensions, empty */
    assert_int_equal(cipher("ECDHE-RSA-AES128-GCM-SHA256"), CMA_CIPHER_UNKNOWN);
    assert_int_equal(cipher("tls_aes_128_gcm_sha256"), CMA_CIPHER_UNKNOWN);
    assert_int_equal(cipher("TLS_AES_128_GCM_SHA25"), CMA_CIPHER_UNKNOWN);
    assert_int_equal(cipher("TLS_AES_128_GCM_SHA2566"), CMA_CIPHER_UNKNOWN);
    assert_int_equal(cipher(""), CMA_CIPHER_UNKNOWN);
    /* length-bounded: the first name of a comma-separated list */
    assert_int_equal(cma_compat_cipher_suite("TLS_AES_256_GCM_SHA384,TLS_FOO", 22),
                     CMA_CIPHER_SERVED);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cma_compat_flag_at__table),
        cmocka_unit_test(test_cma_compat_flag_at__names_are_unique),
        cmocka_unit_test(test_cma_compat_ignored_flag__every_no_effect_flag),
        cmocka_unit_test(test_cma_compat_print_markdown__one_row_each),
        cmocka_unit_test(test_cma_compat_cipher_suite__go_names),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
