/* persist_fuzz.c: libFuzzer target for the catalog cache reader (persist.c). Each input is decoded
 * twice: as a whole file (magic, version, end line, checksum, fingerprint), and as the part of a
 * file after its fingerprint line, wrapped in the header this target expects and sealed with a
 * correct end line, so that mutations reach the record parser past the checksum. Any failure
 * must carry its code and a message; a snapshot that decodes must encode and decode again to the
 * same bytes. The ruleset is built once from the config below (custom rules with overrides, a
 * constant name and a filter; an external rule); the fingerprint is 32 bytes of 0x5a. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/evp.h>

#include "cma/catalog.h"
#include "cma/config.h"
#include "cma/persist.h"
#include "cma/rule.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const char config_text[] =
    "rules:\n"
    "- seriesQuery: '{namespace!=\"\",pod!=\"\"}'\n"
    "  resources: {overrides: {namespace: {resource: namespace}, pod: {resource: pod}}}\n"
    "  name: {matches: ^(.*)_total$, as: \"${1}_per_second\"}\n"
    "  metricsQuery: sum(rate(<<.Series>>{<<.LabelMatchers>>}[1m])) by (<<.GroupBy>>)\n"
    "- seriesQuery: '{namespace!=\"\",pod!=\"\"}'\n"
    "  seriesFilters: [{isNot: .*_total$}, {isNot: ^odd}]\n"
    "  resources: {template: <<.Resource>>}\n"
    "  metricsQuery: sum(<<.Series>>{<<.LabelMatchers>>}) by (<<.GroupBy>>)\n"
    "- seriesQuery: '{namespace!=\"\",pod!=\"\"}'\n"
    "  seriesFilters: [{is: ^odd}]\n"
    "  resources: {overrides: {namespace: {resource: namespace}}}\n"
    "  name: {matches: ^odd, as: odd_series}\n"
    "  metricsQuery: sum(<<.Series>>{<<.LabelMatchers>>}) by (<<.GroupBy>>)\n"
    "externalRules:\n"
    "- seriesQuery: '{__name__=~\"^queue_.*\"}'\n"
    "  resources: {namespaced: false}\n"
    "  metricsQuery: sum(<<.Series>>{<<.LabelMatchers>>})\n";

static const struct cma_ruleset *ruleset(void)
{
    static struct cma_config *cfg;
    static struct cma_ruleset *rules;
    if (!rules && (cma_config_load_string("fuzz.yaml", config_text, strlen(config_text), &cfg,
                                          NULL) != CMA_OK ||
                   cma_ruleset_compile(cfg, &rules, NULL) != CMA_OK))
        abort();
    return rules;
}

/* Decodes; on success re-encodes twice and checks the round trip is stable. */
static void decode_and_check(const char *data, size_t len, const uint8_t *fp)
{
    struct cma_err err;
    cma_err_clear(&err);
    struct cma_catalog *c = NULL;
    enum cma_errc rc = cma_persist_decode("fuzz", data, len, fp, ruleset(), &c, &err);
    if (rc != CMA_OK) {
        if (err.code != rc || err.msg[0] == '\0' || c)
            abort();
        return;
    }
    struct cma_buf a, b;
    cma_buf_init(&a, 0);
    cma_buf_init(&b, 0);
    struct cma_catalog *again = NULL;
    if (cma_persist_encode(c, fp, &a, NULL) != CMA_OK ||
        cma_persist_decode("again", a.ptr, a.len, fp, ruleset(), &again, NULL) != CMA_OK ||
        cma_persist_encode(again, fp, &b, NULL) != CMA_OK || a.len != b.len ||
        memcmp(a.ptr, b.ptr, a.len) != 0 || cma_catalog_count(again) != cma_catalog_count(c))
        abort();
    cma_catalog_unref(again);
    cma_catalog_unref(c);
    cma_buf_done(&a);
    cma_buf_done(&b);
}

/* header + data + "end\t<sha256 of header + data>\n" */
static char *seal(const uint8_t *fp, const uint8_t *data, size_t size, size_t *ret_len)
{
    char head[160];
    int n = snprintf(head, sizeof(head), "cma-catalog-cache\t1\nfingerprint\t");
    for (size_t i = 0; i < CMA_PERSIST_FINGERPRINT_LEN; i++)
        n += snprintf(head + n, sizeof(head) - (size_t)n, "%02x", fp[i]);
    head[n++] = '\n';
    size_t body = (size_t)n + size;
    char *out = malloc(body + 70);
    if (!out)
        return NULL;
    memcpy(out, head, (size_t)n);
    if (size)
        memcpy(out + n, data, size);
    uint8_t sum[32];
    unsigned sum_len = 0;
    if (EVP_Digest(out, body, sum, &sum_len, EVP_sha256(), NULL) != 1)
        abort();
    memcpy(out + body, "end\t", 4);
    for (size_t i = 0; i < 32; i++)
        snprintf(out + body + 4 + 2 * i, 3, "%02x", sum[i]);
    out[body + 68] = '\n';
    *ret_len = body + 69;
    return out;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    uint8_t fp[CMA_PERSIST_FINGERPRINT_LEN];
    memset(fp, 0x5a, sizeof(fp));
    decode_and_check((const char *)data, size, fp);
    size_t len = 0;
    char *file = seal(fp, data, size, &len);
    if (file)
        decode_and_check(file, len, fp);
    free(file);
    return 0;
}
