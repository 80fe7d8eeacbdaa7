/* persist_test.c: the catalog cache file (persist.c) and the store's publish hook: a snapshot
 * survives a round trip byte for byte (discovery documents, entries, RESTMapper with short names,
 * names with tabs, spaces, '%' and UTF-8); every truncation and every flipped byte of a good file,
 * foreign files, files from another configuration and records the rules would not produce are
 * refused with a positioned message; saves are atomic (no temporary file left, a new inode) and
 * skipped when nothing changed; the fingerprint depends on every input. */
#include <dirent.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>
#include <openssl/evp.h>

#include "cma/catalog.h"
#include "cma/config.h"
#include "cma/discovery.h"
#include "cma/persist.h"
#include "cma/restmapper.h"
#include "cma/rule.h"
#include "testlib.h"

#define SHARED_SEL "{namespace!=\"\",pod!=\"\"}"
#define QUEUE_SEL "{__name__=~\"^queue_.*\"}"
#define T0 1700000000000LL /* a relist's wall clock */

static const char config_text[] =
    "rules:\n"
    "- seriesQuery: '" SHARED_SEL "'\n"
    "  resources: {overrides: {namespace: {resource: namespace}, pod: {resource: pod}}}\n"
    "  name: {matches: ^(.*)_total$, as: \"${1}_per_second\"}\n"
    "  metricsQuery: sum(rate(<<.Series>>{<<.LabelMatchers>>}[1m])) by (<<.GroupBy>>)\n"
    "- seriesQuery: '" SHARED_SEL "'\n"
    "  seriesFilters: [{isNot: .*_total$}, {isNot: ^odd}]\n"
    "  resources:\n"
    "    overrides:\n"
    "      namespace: {resource: namespace}\n"
    "      pod: {resource: pod}\n"
    "      widget: {group: example.com, resource: widgets}\n"
    "  metricsQuery: sum(<<.Series>>{<<.LabelMatchers>>}) by (<<.GroupBy>>)\n"
    "- seriesQuery: '" SHARED_SEL "'\n"
    "  seriesFilters: [{is: ^odd}]\n"
    "  resources:\n"
    "    overrides:\n"
    "      namespace: {resource: namespace}\n"
    "      ingress: {group: networking.k8s.io, resource: ingresses}\n"
    "  name: {matches: ^odd, as: odd_series}\n"
    "  metricsQuery: sum(<<.Series>>{<<.LabelMatchers>>}) by (<<.GroupBy>>)\n"
    "externalRules:\n"
    "- seriesQuery: '" QUEUE_SEL "'\n"
    "  resources: {namespaced: false}\n"
    "  metricsQuery: sum(<<.Series>>{<<.LabelMatchers>>})\n";

/* Series names Prometheus 3 allows (UTF-8, spaces, '%', a tab) next to ordinary ones; the third
 * rule names the odd one with a constant. */
static const char *const shared_series[] = {
    "http_requests_total{namespace=ns1,pod=p1}",
    "gpu util{namespace=ns1,pod=p1}",
    "odd\t100%{namespace=ns1,ingress=i1}",
    ("\xc3\xbcnic\xc3\xb6"
     "de_bytes{namespace=ns2,pod=p2}"),
    "widget_spins{namespace=ns2,widget=w1}",
};
static const char *const queue_series[] = {"queue_depth{topic=a}", "queue_lag{topic=b}"};

struct fixture {
    struct cma_config *cfg;
    struct cma_ruleset *rules;
    struct cma_restmapper *mapper;
    uint8_t fp[CMA_PERSIST_FINGERPRINT_LEN];
};

static char **strv(const char *a, const char *b)
{
    char **v = calloc(3, sizeof(*v));
    v[0] = a ? strdup(a) : NULL;
    v[1] = b ? strdup(b) : NULL;
    return v;
}

/* A cluster with short names, a root-scoped CRD and a resource without a singular name. */
static struct cma_restmapper *mapper_with_short_names(void)
{
    static const struct {
        const char *g, *v, *r, *s, *k, *sn1, *sn2;
        bool ns;
    } rs[] = {
        {"", "v1", "pods", "pod", "Pod", "po", NULL, true},
        {"", "v1", "namespaces", "namespace", "Namespace", "ns", NULL, false},
        {"", "v1", "nodes", "node", "Node", "no", NULL, false},
        {"networking.k8s.io", "v1", "ingresses", "ingress", "Ingress", "ing", NULL, true},
        {"example.com", "v1alpha1", "widgets", "", "Widget", "wd", "wdg", false},
    };
    size_t n = sizeof(rs) / sizeof(rs[0]);
    struct cma_api_resources *r = calloc(1, sizeof(*r));
    r->items = calloc(n, sizeof(*r->items));
    r->n = n;
    for (size_t i = 0; i < n; i++)
        r->items[i] = (struct cma_api_resource){strdup(rs[i].g),
                                                strdup(rs[i].v),
                                                strdup(rs[i].r),
                                                strdup(rs[i].s),
                                                strdup(rs[i].k),
                                                rs[i].ns,
                                                strv(rs[i].sn1, rs[i].sn2),
                                                rs[i].sn2 ? 2 : 1};
    struct cma_restmapper *m = NULL;
    assert_int_equal(cma_restmapper_new(r, &m, NULL), CMA_OK);
    return m;
}

static void load(struct fixture *fx)
{
    struct cma_err err;
    cma_err_clear(&err);
    if (cma_config_load_string("persist.yaml", config_text, strlen(config_text), &fx->cfg, &err) !=
            CMA_OK ||
        cma_ruleset_compile(fx->cfg, &fx->rules, &err) != CMA_OK)
        fail_msg("config: %s", err.msg);
    fx->mapper = mapper_with_short_names();
    for (size_t i = 0; i < sizeof(fx->fp); i++)
        fx->fp[i] = (uint8_t)(i * 7 + 1);
}

static void unload(struct fixture *fx)
{
    cma_restmapper_unref(fx->mapper);
    cma_ruleset_free(fx->rules);
    cma_config_free(fx->cfg);
}

/* A relist over the canned series; n_shared of shared_series are answered. */
static struct cma_catalog *relist(struct fixture *fx, size_t n_shared, int64_t now_ms)
{
    const struct fake_series answers[] = {
        {SHARED_SEL, shared_series, n_shared},
        {QUEUE_SEL, queue_series, 2},
    };
    struct fake_source fs = {.answers = answers, .n_answers = 2};
    struct cma_backend src = fake_backend(&fs);
    struct cma_catalog *c = NULL;
    struct cma_err err;
    cma_err_clear(&err);
    if (cma_discovery_relist(&src, fx->rules, fx->mapper, now_ms, 60000, &c, &err) != CMA_OK)
        fail_msg("relist: %s", err.msg);
    return c;
}

static char *encode(const struct cma_catalog *c, const uint8_t *fp)
{
    struct cma_buf out;
    cma_buf_init(&out, 0);
    struct cma_err err;
    cma_err_clear(&err);
    if (cma_persist_encode(c, fp, &out, &err) != CMA_OK)
        fail_msg("encode: %s", err.msg);
    return cma_buf_take(&out);
}

/* Decodes text; on failure returns NULL and leaves "name:line: message" in msg. */
static struct cma_catalog *decode(struct fixture *fx, const char *data, size_t len, char *msg,
                                  size_t msg_len)
{
    struct cma_err err;
    cma_err_clear(&err);
    struct cma_catalog *c = NULL;
    enum cma_errc rc = cma_persist_decode("cache", data, len, fx->fp, fx->rules, &c, &err);
    if (msg)
        cma_err_format_pos(&err, msg, msg_len);
    if (rc == CMA_OK) {
        assert_non_null(c);
        return c;
    }
    assert_int_equal(err.code, rc);
    assert_true(err.msg[0] != '\0');
    assert_null(c);
    return NULL;
}

static int cmp_lines(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Every entry of c as "kind group-resource/metric series namespaced", sorted, one per line. */
static char *entries_text(const struct cma_catalog *c)
{
    size_t n_custom = cma_catalog_count(c), n = n_custom + cma_catalog_count_external(c);
    char **lines = calloc(n + 1, sizeof(*lines));
    assert_non_null(lines);
    size_t total = 1;
    for (size_t i = 0; i < n; i++) {
        bool ext = i >= n_custom;
        const struct cma_catalog_entry *e =
            ext ? cma_catalog_external_at(c, i - n_custom) : cma_catalog_entry_at(c, i);
        char gr[256] = "";
        if (e->resource)
            cma_restmapper_group_resource(e->resource, gr, sizeof(gr));
        size_t len = strlen(gr) + strlen(e->metric) + strlen(e->series) + 32;
        lines[i] = malloc(len);
        assert_non_null(lines[i]);
        snprintf(lines[i], len, "%s %s/%s %s %d", ext ? "external" : "custom", gr, e->metric,
                 e->series, e->namespaced);
        total += strlen(lines[i]) + 1;
    }
    qsort(lines, n, sizeof(*lines), cmp_lines);
    char *text = calloc(1, total);
    assert_non_null(text);
    for (size_t i = 0; i < n; i++) {
        strcat(text, lines[i]);
        strcat(text, "\n");
        free(lines[i]);
    }
    free(lines);
    return text;
}

/* The same entries (order aside: the cache file need not keep it). */
static void assert_same_entries(const struct cma_catalog *a, const struct cma_catalog *b)
{
    char *ta = entries_text(a), *tb = entries_text(b);
    assert_true(ta[0] != '\0');
    assert_string_equal(ta, tb);
    free(ta);
    free(tb);
}

static void test_cma_persist__round_trip(void **state)
{
    (void)state;
    struct fixture fx;
    load(&fx);
    struct cma_catalog *c = relist(&fx, 5, 1700000000123);
    /* the relist found what the rules say, so the round trip has something to carry */
    assert_int_equal(cma_catalog_count(c), 10);
    assert_int_equal(cma_catalog_count_external(c), 2);
    char *text = encode(c, fx.fp);
    struct cma_catalog *back = decode(&fx, text, strlen(text), NULL, 0);
    assert_non_null(back);
    assert_int_equal(cma_catalog_built_ms(back), 1700000000123);
    assert_int_equal(cma_catalog_count(back), cma_catalog_count(c));
    assert_int_equal(cma_catalog_count_external(back), 2);
    assert_same_entries(c, back);
    /* every entry: same resource (by name), metric, series and the same rule object */
    const struct cma_restmapper *m = cma_catalog_mapper(back);
    for (size_t i = 0; i < cma_catalog_count(c); i++) {
        const struct cma_catalog_entry *e = cma_catalog_entry_at(c, i);
        char gr[256];
        cma_restmapper_group_resource(e->resource, gr, sizeof(gr));
        const struct cma_api_resource *r = cma_restmapper_parse_for(m, gr);
        assert_non_null(r);
        const struct cma_catalog_entry *f = cma_catalog_lookup(back, r, e->namespaced, e->metric);
        assert_non_null(f);
        assert_string_equal(f->series, e->series);
        assert_ptr_equal(f->rule, e->rule);
    }
    const struct cma_catalog_entry *q = cma_catalog_lookup_external(back, "QUEUE_LAG");
    assert_non_null(q);
    assert_ptr_equal(q->rule, &fx.rules->external_rules[0]);
    /* the names that need escapes came through intact */
    const struct cma_api_resource *ing = cma_restmapper_parse_for(m, "ingresses.networking.k8s.io");
    const struct cma_catalog_entry *odd = cma_catalog_lookup(back, ing, true, "odd_series");
    assert_non_null(odd);
    assert_string_equal(odd->series, "odd\t100%");
    assert_non_null(strstr(text, "\todd%09100%25\n"));
    assert_non_null(strstr(text, "\tgpu%20util\tgpu%20util\n"));
    assert_non_null(cma_catalog_lookup(back, cma_restmapper_parse_for(m, "pods"), true,
                                       "\xc3\xbcnic\xc3\xb6"
                                       "de_bytes"));
    /* the RESTMapper: short names, scope and the empty singular name survive */
    assert_int_equal(cma_restmapper_count(m), 5);
    const struct cma_api_resource *wd = cma_restmapper_resource_for(m, "", "wdg");
    assert_non_null(wd);
    assert_string_equal(wd->kind, "Widget");
    assert_string_equal(wd->singular, "");
    assert_false(wd->namespaced);
    assert_non_null(cma_restmapper_resource_for(m, "", "po"));
    /* encoding the decoded snapshot gives the same bytes */
    char *again = encode(back, fx.fp);
    assert_string_equal(again, text);
    free(again);
    free(text);
    cma_catalog_unref(back);
    cma_catalog_unref(c);
    unload(&fx);
}

static void test_cma_persist_decode__every_truncation_and_flipped_byte(void **state)
{
    (void)state;
    struct fixture fx;
    load(&fx);
    struct cma_catalog *c = relist(&fx, 5, 1700000000000);
    char *text = encode(c, fx.fp);
    size_t len = strlen(text);
    char msg[700];
    for (size_t i = 0; i < len; i++)
        assert_null(decode(&fx, text, i, NULL, 0));
    assert_null(decode(&fx, text, len - 1, msg, sizeof(msg)));
    assert_string_equal(msg, "cache: truncated (no end line)");
    char *copy = malloc(len);
    for (size_t i = 0; i < len; i++) {
        memcpy(copy, text, len);
        copy[i] ^= 0x01;
        if (decode(&fx, copy, len, msg, sizeof(msg)))
            fail_msg("a flipped bit at byte %zu was accepted", i);
    }
    /* a flip in the records is caught by the checksum */
    memcpy(copy, text, len);
    copy[strstr(text, "\nR\t") - text + 3] ^= 0x01;
    assert_null(decode(&fx, copy, len, msg, sizeof(msg)));
    assert_string_equal(msg, "cache: checksum mismatch: the file is corrupt");
    /* and the untouched file still decodes (the failures above are the flips) */
    struct cma_catalog *ok = decode(&fx, text, len, NULL, 0);
    assert_non_null(ok);
    cma_catalog_unref(ok);
    free(copy);
    free(text);
    cma_catalog_unref(c);
    unload(&fx);
}

static void test_cma_persist_decode__foreign_and_other_config(void **state)
{
    (void)state;
    struct fixture fx;
    load(&fx);
    struct cma_catalog *c = relist(&fx, 5, 1700000000000);
    char msg[700];
    static const char *const foreign[] = {"", "\n", "rules: []\n", "cma-catalog-cache\n",
                                          ("\x7f"
                                           "ELF\x02\x01\x01")};
    for (size_t i = 0; i < sizeof(foreign) / sizeof(foreign[0]); i++) {
        assert_null(decode(&fx, foreign[i], strlen(foreign[i]), msg, sizeof(msg)));
        assert_string_equal(msg, "cache:1: not a catalog cache file");
    }
    assert_null(decode(&fx, "cma-catalog-cache\t2\n", 20, msg, sizeof(msg)));
    assert_string_equal(msg,
                        "cache:1: unsupported catalog cache format version (this build reads 1)");
    uint8_t other[CMA_PERSIST_FINGERPRINT_LEN];
    memcpy(other, fx.fp, sizeof(other));
    other[31] ^= 0x80;
    char *text = encode(c, other);
    assert_null(decode(&fx, text, strlen(text), msg, sizeof(msg)));
    assert_string_equal(msg, "cache:2: built from another configuration (the config file or "
                             "the backend flags differ)");
    free(text);
    cma_catalog_unref(c);
    unload(&fx);
}

/* body + "end\t<sha256 of body>\n": a file with a good checksum around hand-written records. */
static char *seal(const char *body)
{
    uint8_t sum[32];
    unsigned n = 0;
    assert_int_equal(EVP_Digest(body, strlen(body), sum, &n, EVP_sha256(), NULL), 1);
    size_t len = strlen(body);
    char *out = malloc(len + 70);
    memcpy(out, body, len);
    memcpy(out + len, "end\t", 4);
    for (size_t i = 0; i < 32; i++)
        snprintf(out + len + 4 + 2 * i, 3, "%02x", sum[i]);
    memcpy(out + len + 68, "\n", 2);
    return out;
}

/* The header lines of a file for fx (fingerprint included). */
static char *head(const struct fixture *fx)
{
    char *out = malloc(256);
    int n = snprintf(out, 256, "cma-catalog-cache\t1\nfingerprint\t");
    for (size_t i = 0; i < 32; i++)
        n += snprintf(out + n, 256 - (size_t)n, "%02x", fx->fp[i]);
    snprintf(out + n, 256 - (size_t)n, "\nbuilt-ms\t42\n");
    return out;
}

/* Decodes head + records, sealed; returns the message ("" when it decoded). */
static void check_records(struct fixture *fx, const char *records, const char *want)
{
    char *h = head(fx);
    char body[2048];
    snprintf(body, sizeof(body), "%s%s", h, records);
    char *file = seal(body);
    char msg[700] = "";
    struct cma_catalog *c = decode(fx, file, strlen(file), msg, sizeof(msg));
    if (c)
        msg[0] = '\0';
    cma_catalog_unref(c);
    assert_string_equal(msg, want);
    free(file);
    free(h);
}

#define R_PODS "R\t\tv1\tpods\tpod\tPod\t1\tpo\n"
#define R_ING "R\tnetworking.k8s.io\tv1\tingresses\tingress\tIngress\t1\n"

static void test_cma_persist_decode__records_the_rules_would_not_produce(void **state)
{
    (void)state;
    struct fixture fx;
    load(&fx);
    /* the positive control: each case below differs from it in one place */
    check_records(&fx, R_PODS R_ING "C\t0\t0\tx_per_second\tx_total\nE\t0\tqueue_a\tqueue_a\n", "");
    check_records(&fx, R_PODS "C\t1\t0\tx_per_second\tx_total\n",
                  "cache:5: entry record: no such resource");
    check_records(&fx, R_PODS "C\t0\t3\tx_per_second\tx_total\n",
                  "cache:5: entry record: no such rule in the current config");
    check_records(&fx, R_PODS "E\t1\tqueue_a\tqueue_a\n",
                  "cache:5: entry record: no such rule in the current config");
    check_records(&fx, R_PODS "C\t0\t0\tevil\tx_total\n",
                  "cache:5: entry record: the rule does not name this series so");
    check_records(&fx, R_PODS "C\t0\t1\tx_total\tx_total\n",
                  "cache:5: entry record: the rule does not name this series so");
    check_records(&fx, R_PODS "E\t0\tother\tqueue_a\n",
                  "cache:5: entry record: the rule does not name this series so");
    check_records(&fx, R_PODS "C\t0\t0\tx_per_second\n",
                  "cache:5: entry record: wrong number of fields");
    check_records(&fx, R_PODS "C\t0\t-1\tx_per_second\tx_total\n",
                  "cache:5: entry record: index expected");
    check_records(&fx, R_PODS "X\t0\n", "cache:5: unknown record");
    check_records(&fx, R_PODS "C\t0\t0\tx_per_second\tx_total\n" R_ING,
                  "cache:6: resource record after the first entry");
    check_records(&fx, R_ING R_PODS, "cache:5: resource record: core resources must come first");
    check_records(&fx, "R\t\tv1\tpods\tpod\tPod\tyes\n",
                  "cache:4: resource record: namespaced must be 0 or 1");
    check_records(&fx, "R\t\tv1\tpods\n", "cache:4: resource record: wrong number of fields");
    check_records(&fx, R_PODS "C\t0\t0\tx_per_second\tx%zztotal\n",
                  "cache:5: bad escape or control byte in a field");
    check_records(&fx, R_PODS "C\t0\t0\tx_per_second\tx%00_total\n",
                  "cache:5: bad escape or control byte in a field");
    check_records(&fx, R_PODS "C\t0\t0\tx_per_second\tx_total%2\n",
                  "cache:5: bad escape or control byte in a field");
    check_records(&fx, R_PODS "C\t0\t0\tx_per_second\tx total\n",
                  "cache:5: bad escape or control byte in a field");
    /* escapes decode: "x%5Ftotal" is x_total */
    check_records(&fx, R_PODS "C\t0\t0\tx_per_second\tx%5Ftotal\n", "");
    unload(&fx);
    /* a header without the built-ms line */
    load(&fx);
    char *h = head(&fx);
    *strstr(h, "built-ms") = '\0';
    char *file = seal(h);
    char msg[700];
    assert_null(decode(&fx, file, strlen(file), msg, sizeof(msg)));
    assert_string_equal(msg, "cache:3: built-ms line expected");
    free(file);
    free(h);
    unload(&fx);
}

static char *temp_dir(void)
{
    char tmpl[] = "/tmp/cma-persist-test.XXXXXX";
    assert_non_null(mkdtemp(tmpl));
    return strdup(tmpl);
}

static ino_t inode_of(const char *path)
{
    struct stat st;
    assert_int_equal(stat(path, &st), 0);
    return st.st_ino;
}

static size_t entries_in(const char *dir)
{
    DIR *d = opendir(dir);
    assert_non_null(d);
    size_t n = 0;
    for (struct dirent *e; (e = readdir(d));)
        n += strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0;
    closedir(d);
    return n;
}

static void test_cma_persist__save_load_atomic_skip_unchanged(void **state)
{
    (void)state;
    struct fixture fx;
    load(&fx);
    char *dir = temp_dir();
    char path[512];
    snprintf(path, sizeof(path), "%s/catalog.cache", dir);
    struct cma_persist *p;
    assert_int_equal(cma_persist_new(path, fx.fp, &p, NULL), CMA_OK);
    struct cma_catalog *got = NULL;
    struct cma_err err;
    cma_err_clear(&err);
    assert_int_equal(cma_persist_load(p, fx.rules, &got, &err), CMA_ERR_NOT_FOUND);
    struct cma_catalog *c1 = relist(&fx, 3, T0 + 1000), *c1b = relist(&fx, 3, T0 + 2000);
    struct cma_catalog *c2 = relist(&fx, 5, T0 + 3000);
    bool written = false;
    assert_int_equal(cma_persist_save(p, c1, &written, NULL), CMA_OK);
    assert_true(written);
    assert_int_equal(entries_in(dir), 1); /* no temporary file left behind */
    ino_t first = inode_of(path);
    /* same content at a later relist: not rewritten, the file keeps the first build time */
    assert_int_equal(cma_persist_save(p, c1b, &written, NULL), CMA_OK);
    assert_false(written);
    assert_true(inode_of(path) == first);
    /* new content: a new file renamed over the old one */
    assert_int_equal(cma_persist_save(p, c2, &written, NULL), CMA_OK);
    assert_true(written);
    assert_true(inode_of(path) != first);
    assert_int_equal(entries_in(dir), 1); /* no temporary file left behind */
    /* a fresh object (a restarted adapter) loads it */
    struct cma_persist *p2;
    assert_int_equal(cma_persist_new(path, fx.fp, &p2, NULL), CMA_OK);
    assert_int_equal(cma_persist_load(p2, fx.rules, &got, NULL), CMA_OK);
    assert_same_entries(got, c2);
    assert_int_equal(cma_catalog_built_ms(got), T0 + 3000);
    /* after a load, the same content is not rewritten; a file removed meanwhile is */
    ino_t second = inode_of(path);
    assert_int_equal(cma_persist_save(p2, c2, &written, NULL), CMA_OK);
    assert_false(written);
    assert_true(inode_of(path) == second);
    assert_int_equal(unlink(path), 0);
    assert_int_equal(cma_persist_save(p2, c2, &written, NULL), CMA_OK);
    assert_true(written);
    cma_catalog_unref(got);
    cma_persist_free(p2);
    /* another fingerprint: refused with the file's name */
    uint8_t other[CMA_PERSIST_FINGERPRINT_LEN] = {0};
    assert_int_equal(cma_persist_new(path, other, &p2, NULL), CMA_OK);
    got = NULL;
    cma_err_clear(&err);
    assert_int_equal(cma_persist_load(p2, fx.rules, &got, &err), CMA_ERR_IO);
    assert_null(got);
    assert_string_equal(err.file, path);
    assert_non_null(strstr(err.msg, "another configuration"));
    cma_persist_free(p2);
    /* a directory in its place, and a directory that does not exist */
    assert_int_equal(cma_persist_new(dir, fx.fp, &p2, NULL), CMA_OK);
    cma_err_clear(&err);
    assert_int_equal(cma_persist_load(p2, fx.rules, &got, &err), CMA_ERR_IO);
    assert_non_null(strstr(err.msg, "is not a regular file"));
    cma_persist_free(p2);
    char missing[600];
    snprintf(missing, sizeof(missing), "%s/no/such/dir/cache", dir);
    assert_int_equal(cma_persist_new(missing, fx.fp, &p2, NULL), CMA_OK);
    cma_err_clear(&err);
    assert_int_equal(cma_persist_save(p2, c1, &written, &err), CMA_ERR_IO);
    assert_false(written);
    assert_non_null(strstr(err.msg, "cannot create"));
    cma_persist_free(p2);
    unlink(path);
    rmdir(dir);
    free(dir);
    cma_persist_free(p);
    cma_catalog_unref(c1);
    cma_catalog_unref(c1b);
    cma_catalog_unref(c2);
    unload(&fx);
}

static void fingerprint(const char *config, const char *const *parts, size_t n, uint8_t *out)
{
    struct cma_err err;
    cma_err_clear(&err);
    if (cma_persist_fingerprint(config, parts, n, out, &err) != CMA_OK)
        fail_msg("fingerprint: %s", err.msg);
}

static void test_cma_persist_fingerprint__depends_on_every_input(void **state)
{
    (void)state;
    char *dir = temp_dir();
    char path[512];
    snprintf(path, sizeof(path), "%s/config.yaml", dir);
    FILE *f = fopen(path, "w");
    fputs("rules: []\n", f);
    fclose(f);
    static const char *const ab_c[] = {"ab", "c"}, *const a_bc[] = {"a", "bc"};
    uint8_t x[32], y[32], z[32];
    fingerprint(path, ab_c, 2, x);
    fingerprint(path, ab_c, 2, y);
    assert_memory_equal(x, y, 32);
    fingerprint(path, a_bc, 2, z);
    assert_memory_not_equal(x, z, 32);
    fingerprint(path, ab_c, 1, z);
    assert_memory_not_equal(x, z, 32);
    f = fopen(path, "w");
    fputs("rules: [] \n", f);
    fclose(f);
    fingerprint(path, ab_c, 2, z);
    assert_memory_not_equal(x, z, 32);
    unlink(path);
    struct cma_err err;
    cma_err_clear(&err);
    assert_int_equal(cma_persist_fingerprint(path, NULL, 0, z, &err), CMA_ERR_IO);
    assert_non_null(strstr(err.msg, path));
    rmdir(dir);
    free(dir);
}

struct hook_log {
    size_t calls;
    const struct cma_catalog *last;
};

static void on_publish(void *ctx, const struct cma_catalog *c)
{
    struct hook_log *log = ctx;
    log->calls++;
    log->last = c;
}

static void test_cma_catalog_store__on_publish_hook(void **state)
{
    (void)state;
    struct fixture fx;
    load(&fx);
    struct cma_catalog_store *store;
    assert_int_equal(cma_catalog_store_new(&store), CMA_OK);
    struct hook_log log = {0};
    struct cma_catalog *a = relist(&fx, 1, T0), *b = relist(&fx, 2, T0);
    cma_catalog_store_publish(store, a); /* before the hook is set: not seen */
    cma_catalog_store_on_publish(store, on_publish, &log);
    assert_int_equal(log.calls, 0);
    cma_catalog_store_publish(store, b);
    assert_int_equal(log.calls, 1);
    assert_ptr_equal(log.last, b);
    struct cma_catalog *cur = cma_catalog_store_get(store);
    assert_ptr_equal(cur, b);
    cma_catalog_unref(cur);
    cma_catalog_store_free(store);
    unload(&fx);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cma_persist__round_trip),
        cmocka_unit_test(test_cma_persist_decode__every_truncation_and_flipped_byte),
        cmocka_unit_test(test_cma_persist_decode__foreign_and_other_config),
        cmocka_unit_test(test_cma_persist_decode__records_the_rules_would_not_produce),
        cmocka_unit_test(test_cma_persist__save_load_atomic_skip_unchanged),
        cmocka_unit_test(test_cma_persist_fingerprint__depends_on_every_input),
        cmocka_unit_test(test_cma_catalog_store__on_publish_hook),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
