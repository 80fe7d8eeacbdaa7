/* objcache_test.c: the watch cache's event application fed with the real recorded LIST and
 * watch streams of ../shared/fixtures/kube-apiserver (pods-all-bert-before-watch.json at
 * resourceVersion 266, then watch-pods-all.jsonl / watch-pods-bert-selector.jsonl line by line,
 * and the 410 ERROR events of watch-pods-too-old-rv*.jsonl), checking by-selector lookups,
 * resourceVersions and the memory figure after each step; and the label index of lookups against
 * a brute-force reference of the test's own (random objects, selectors, events and re-lists). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "../../src/clients/internal.h"
#include "cma/kube.h"
#include "cma/objcache.h"
#include "cma/selector.h"
#include "fakehttp.h"

/* A cache holding the recorded list at resourceVersion 266 (bert-0..2 in ml). */
static struct cma_objcache *listed_cache(void)
{
    size_t len = 0;
    char *body = cma_kube_fixture_read("pods-all-bert-before-watch.json", &len);
    assert_non_null(body);
    struct cma_kube_object *objs = NULL;
    size_t n = 0, cap = 0;
    char *cont = NULL;
    assert_int_equal(cma_kube_parse_object_page(body, len, &objs, &n, &cap, &cont, NULL), CMA_OK);
    free(body);
    struct cma_objcache *c = NULL;
    assert_int_equal(cma_objcache_new(NULL, "", "v1", "pods", &c, NULL), CMA_OK);
    assert_false(cma_objcache_is_synced(c));
    assert_int_equal(cma_objcache_replace(c, objs, n, "266", NULL), CMA_OK);
    cma_kube_objects_free(objs, n);
    free(cont);
    return c;
}

/* Names matching `selector` in `ns`, joined with ','. */
static void names_of(struct cma_objcache *c, const char *ns, const char *selector, char *out,
                     size_t out_len)
{
    struct cma_selector *sel = NULL;
    if (selector)
        assert_int_equal(cma_selector_parse(selector, strlen(selector), &sel, NULL), CMA_OK);
    char **names = NULL;
    size_t n = 0;
    assert_int_equal(cma_objcache_list_names(c, ns, sel, &names, &n, NULL), CMA_OK);
    assert_non_null(names);
    out[0] = '\0';
    for (size_t i = 0; i < n; i++) {
        size_t used = strlen(out);
        snprintf(out + used, out_len - used, "%s%s", i ? "," : "", names[i]);
        free(names[i]);
    }
    free(names);
    cma_selector_free(sel);
}

/* Applies line number `index` (0-based) of a .jsonl fixture. */
static void apply_line(struct cma_objcache *c, const char *fixture, size_t index, bool *gone)
{
    size_t len = 0;
    char *all = cma_kube_fixture_read(fixture, &len);
    assert_non_null(all);
    char *line = all;
    for (size_t i = 0; i < index; i++) {
        line = strchr(line, '\n');
        assert_non_null(line);
        line++;
    }
    char *end = strchr(line, '\n');
    size_t line_len = end ? (size_t)(end - line) : strlen(line);
    struct cma_err err = {0};
    enum cma_errc rc = cma_objcache_apply_event(c, line, line_len, gone, &err);
    if (rc != CMA_OK)
        fail_msg("line %zu of %s: %s", index, fixture, err.msg);
    free(all);
}

static void assert_rv(struct cma_objcache *c, const char *want)
{
    char rv[64];
    cma_objcache_resource_version(c, rv, sizeof(rv));
    assert_string_equal(rv, want);
}

static void test_cma_objcache_replace__lists_sorted_and_synced(void **state)
{
    (void)state;
    struct cma_objcache *c = listed_cache();
    char names[256];
    assert_true(cma_objcache_is_synced(c));
    assert_int_equal(cma_objcache_count(c), 3);
    assert_rv(c, "266");
    names_of(c, NULL, NULL, names, sizeof(names));
    assert_string_equal(names, "bert-0,bert-1,bert-2");
    names_of(c, "ml", "app=bert", names, sizeof(names));
    assert_string_equal(names, "bert-0,bert-1,bert-2");
    names_of(c, "default", "app=bert", names, sizeof(names));
    assert_string_equal(names, "");
    names_of(c, NULL, "app=bert-canary", names, sizeof(names));
    assert_string_equal(names, "");
    cma_objcache_free(c);
}

static void test_cma_objcache_apply_event__all_pods_stream(void **state)
{
    (void)state;
    struct cma_objcache *c = listed_cache();
    char names[256];
    bool gone = true;
    /* ADDED bert-3 (rv 267) */
    apply_line(c, "watch-pods-all.jsonl", 0, &gone);
    assert_false(gone);
    assert_rv(c, "267");
    names_of(c, "ml", "app=bert", names, sizeof(names));
    assert_string_equal(names, "bert-0,bert-1,bert-2,bert-3");
    apply_line(c, "watch-pods-all.jsonl", 1, &gone);
    apply_line(c, "watch-pods-all.jsonl", 2, &gone);
    /* MODIFIED: relabelled app=bert-canary (rv 270) */
    apply_line(c, "watch-pods-all.jsonl", 3, &gone);
    assert_rv(c, "270");
    names_of(c, "ml", "app=bert", names, sizeof(names));
    assert_string_equal(names, "bert-0,bert-1,bert-2");
    names_of(c, "ml", "app=bert-canary", names, sizeof(names));
    assert_string_equal(names, "bert-3");
    assert_int_equal(cma_objcache_count(c), 4);
    /* relabelled back */
    apply_line(c, "watch-pods-all.jsonl", 4, &gone);
    names_of(c, NULL, "app=bert,tier=inference", names, sizeof(names));
    assert_string_equal(names, "bert-0,bert-1,bert-2,bert-3");
    /* deletionTimestamp set twice, then DELETED (rv 276) */
    for (size_t i = 5; i < 8; i++)
        apply_line(c, "watch-pods-all.jsonl", i, &gone);
    assert_rv(c, "276");
    assert_int_equal(cma_objcache_count(c), 3);
    names_of(c, NULL, "app", names, sizeof(names));
    assert_string_equal(names, "bert-0,bert-1,bert-2");
    /* bookmarks */
    apply_line(c, "watch-pods-all.jsonl", 8, &gone);
    apply_line(c, "watch-pods-all.jsonl", 9, &gone);
    assert_false(gone);
    assert_rv(c, "276");
    assert_int_equal(cma_objcache_count(c), 3);
    cma_objcache_free(c);
}

static void test_cma_objcache_apply_event__relabel_out_of_selector_is_deleted(void **state)
{
    (void)state;
    struct cma_objcache *c = listed_cache();
    char names[256];
    bool gone = false;
    for (size_t i = 0; i < 3; i++)
        apply_line(c, "watch-pods-bert-selector.jsonl", i, &gone);
    names_of(c, "ml", "app=bert", names, sizeof(names));
    assert_string_equal(names, "bert-0,bert-1,bert-2,bert-3");
    /* DELETED carrying the old labels (still app=bert) at the new resourceVersion 270 */
    apply_line(c, "watch-pods-bert-selector.jsonl", 3, &gone);
    assert_rv(c, "270");
    names_of(c, "ml", "app=bert", names, sizeof(names));
    assert_string_equal(names, "bert-0,bert-1,bert-2");
    /* relabelled back: ADDED */
    apply_line(c, "watch-pods-bert-selector.jsonl", 4, &gone);
    assert_rv(c, "271");
    names_of(c, "ml", "app=bert", names, sizeof(names));
    assert_string_equal(names, "bert-0,bert-1,bert-2,bert-3");
    cma_objcache_free(c);
}

static void test_cma_objcache_apply_event__bookmark_moves_rv_only(void **state)
{
    (void)state;
    struct cma_objcache *c = listed_cache();
    size_t before = cma_objcache_bytes(c);
    bool gone = true;
    apply_line(c, "watch-pods-bert-selector.jsonl", 8, &gone);
    assert_false(gone);
    assert_rv(c, "276");
    assert_int_equal(cma_objcache_count(c), 3);
    assert_int_equal(cma_objcache_bytes(c), before);
    cma_objcache_free(c);
}

static void test_cma_objcache_apply_event__410_error_asks_for_relist(void **state)
{
    (void)state;
    const char *fixtures[] = {"watch-pods-too-old-rv.jsonl",
                              "watch-pods-too-old-rv-from-list.jsonl"};
    for (size_t f = 0; f < 2; f++) {
        struct cma_objcache *c = listed_cache();
        bool gone = false;
        apply_line(c, fixtures[f], 0, &gone);
        assert_true(gone);
        /* the state is kept until the re-list replaces it */
        assert_int_equal(cma_objcache_count(c), 3);
        assert_rv(c, "266");
        assert_true(cma_objcache_is_synced(c));
        cma_objcache_replace(c, NULL, 0, "290", NULL);
        assert_int_equal(cma_objcache_count(c), 0);
        assert_rv(c, "290");
        cma_objcache_free(c);
    }
}

static void test_cma_objcache_apply_event__young_cluster_replay(void **state)
{
    (void)state;
    struct cma_objcache *c = NULL;
    assert_int_equal(cma_objcache_new(NULL, "", "v1", "pods", &c, NULL), CMA_OK);
    assert_int_equal(cma_objcache_replace(c, NULL, 0, "1", NULL), CMA_OK);
    for (size_t i = 0; i < 20; i++) {
        bool gone = true;
        apply_line(c, "watch-pods-rv1-young-cluster.jsonl", i, &gone);
        assert_false(gone);
    }
    char names[256];
    names_of(c, "ml", "app=bert", names, sizeof(names));
    assert_string_equal(names, "bert-0,bert-1,bert-2");
    cma_objcache_free(c);
}

static void test_cma_objcache_apply_event__bad_lines_are_errors(void **state)
{
    (void)state;
    struct cma_objcache *c = listed_cache();
    const char *bad[] = {
        "not json",
        "{\"type\":\"ADDED\"}",
        "{\"type\":\"WHAT\",\"object\":{\"metadata\":{\"name\":\"x\"}}}",
        "{\"type\":\"ADDED\",\"object\":{\"metadata\":{}}}",
        "{\"type\":\"ADDED\",\"object\":{\"metadata\":{\"name\":\"x\",\"labels\":{\"a\":1}}}}",
        "{\"type\":\"ERROR\",\"object\":{\"kind\":\"Status\",\"code\":500,\"message\":\"boom\"}}",
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        bool gone = true;
        struct cma_err err = {0};
        assert_int_equal(cma_objcache_apply_event(c, bad[i], strlen(bad[i]), &gone, &err),
                         CMA_ERR_KUBE_ERROR);
        assert_false(gone);
        assert_true(err.msg[0] != '\0');
    }
    assert_int_equal(cma_objcache_count(c), 3);
    assert_rv(c, "266");
    cma_objcache_free(c);
}

static void test_cma_objcache_bytes__compact_per_object(void **state)
{
    (void)state;
    struct cma_objcache *c = NULL;
    assert_int_equal(cma_objcache_new(NULL, "", "v1", "pods", &c, NULL), CMA_OK);
    char line[512];
    size_t label_bytes = 0;
    for (int i = 0; i < 1000; i++) {
        int len = snprintf(line, sizeof(line),
                           "{\"type\":\"ADDED\",\"object\":{\"metadata\":{\"name\":\"pod-%04d\","
                           "\"namespace\":\"ns-%d\",\"resourceVersion\":\"%d\",\"labels\":{"
                           "\"app\":\"a%d\"}},\"status\":{\"phase\":\"Running\"}}}",
                           999 - i, i % 7, i + 1, i % 3);
        bool gone = true;
        assert_int_equal(cma_objcache_apply_event(c, line, (size_t)len, &gone, NULL), CMA_OK);
        label_bytes += strlen("app") + strlen("a0") + 2;
    }
    assert_int_equal(cma_objcache_count(c), 1000);
    assert_rv(c, "1000");
    size_t per = (cma_objcache_bytes(c) - label_bytes) / 1000;
    assert_true(per <= 200);
    char names[16384];
    names_of(c, "ns-3", "app=a1", names, sizeof(names));
    /* sorted by name within the namespace */
    assert_true(strncmp(names, "pod-0", 5) == 0);
    assert_non_null(strstr(names, "pod-0"));
    cma_objcache_free(c);
}

static void test_cma_objcache_registry__needs_a_kube_client(void **state)
{
    (void)state;
    assert_null(cma_objcache_registry_get(NULL, "", "v1", "pods"));
    cma_objcache_registry_free(NULL);
    struct cma_err err = {0};
    struct cma_objcache_registry *r = (struct cma_objcache_registry *)&err; /* must stay */
    assert_int_equal(cma_objcache_registry_new(NULL, &r, &err), CMA_ERR_INTERNAL);
    assert_string_equal(err.msg, "watch caches need a kube client");
    assert_ptr_equal(r, (struct cma_objcache_registry *)&err);
    cma_objcache_free(NULL);
}

/* ---- the label index, against a brute-force reference ------------------------------------ */

#define T_KEYS 12 /* more than the cache indexes (8) */
#define T_VALUES 4
#define T_OBJS 320
#define T_NS 5 /* ns-0 .. ns-3, and cluster-scoped ("") */
#define T_REQS_MAX 3

static const char *const t_keys[T_KEYS] = {"k0", "k1", "k2", "k3", "k4",  "k5",
                                           "k6", "k7", "k8", "k9", "k10", "k11"};
static const char *const t_values[T_VALUES] = {"v0", "v1", "v2", "v3"};
static const char *const t_ns[T_NS] = {"ns-0", "ns-1", "ns-2", "ns-3", ""};

/* The test's own model of the cache: object i is t_ns[i % T_NS]/pod-<i>. */
struct t_obj {
    bool live;
    int label[T_KEYS]; /* value index, -1 = no such label */
};

struct t_model {
    struct t_obj objs[T_OBJS];
    unsigned seed;
    int n_keys; /* keys k0..k<n_keys-1> are used */
};

enum t_op { T_EQ, T_NEQ, T_IN, T_NOTIN, T_EXISTS, T_NOT_EXISTS };

struct t_req {
    enum t_op op;
    int key;
    int values[3];
    int n_values;
};

static unsigned t_rand(struct t_model *m, unsigned below)
{
    m->seed = m->seed * 1103515245u + 12345u;
    return (m->seed >> 16) % below;
}

static void t_name(int i, char *out, size_t len)
{
    snprintf(out, len, "pod-%03d", (i * 37) % 1000); /* names not in slot order */
}

static void t_randomize(struct t_model *m, int i)
{
    m->objs[i].live = true;
    for (int k = 0; k < T_KEYS; k++)
        m->objs[i].label[k] = k < m->n_keys && t_rand(m, 100) < 45 ? (int)t_rand(m, T_VALUES) : -1;
}

/* Replaces the cache's content with the live objects of m (a re-list). */
static void t_replace(struct cma_objcache *c, const struct t_model *m)
{
    static struct cma_kube_object objs[T_OBJS];
    static char names[T_OBJS][16];
    static char *keys[T_OBJS][T_KEYS], *values[T_OBJS][T_KEYS];
    size_t n = 0;
    for (int i = 0; i < T_OBJS; i++) {
        if (!m->objs[i].live)
            continue;
        struct cma_kube_object *o = &objs[n++];
        memset(o, 0, sizeof(*o));
        t_name(i, names[i], sizeof(names[i]));
        o->name = names[i];
        o->namespace_ = t_ns[i % T_NS][0] ? (char *)t_ns[i % T_NS] : NULL;
        o->label_names = keys[i];
        o->label_values = values[i];
        for (int k = 0; k < T_KEYS; k++) {
            if (m->objs[i].label[k] < 0)
                continue;
            keys[i][o->n_labels] = (char *)t_keys[k];
            values[i][o->n_labels++] = (char *)t_values[m->objs[i].label[k]];
        }
    }
    assert_int_equal(cma_objcache_replace(c, objs, n, "1", NULL), CMA_OK);
}

/* Sends object i of m to the cache as a watch event of type `type`. */
static void t_event(struct cma_objcache *c, const struct t_model *m, int i, const char *type)
{
    char line[1024], name[16];
    t_name(i, name, sizeof(name));
    int len = snprintf(line, sizeof(line),
                       "{\"type\":\"%s\",\"object\":{\"metadata\":{\"name\":\"%s\"%s%s%s,"
                       "\"labels\":{",
                       type, name, t_ns[i % T_NS][0] ? ",\"namespace\":\"" : "", t_ns[i % T_NS],
                       t_ns[i % T_NS][0] ? "\"" : "");
    const char *sep = "";
    for (int k = 0; k < T_KEYS; k++) {
        if (m->objs[i].label[k] < 0)
            continue;
        len += snprintf(line + len, sizeof(line) - (size_t)len, "%s\"%s\":\"%s\"", sep, t_keys[k],
                        t_values[m->objs[i].label[k]]);
        sep = ",";
    }
    len += snprintf(line + len, sizeof(line) - (size_t)len, "}}}}");
    bool gone = true;
    struct cma_err err = {0};
    if (cma_objcache_apply_event(c, line, (size_t)len, &gone, &err) != CMA_OK)
        fail_msg("%s: %s", line, err.msg);
}

/* One random watch event: a relabel (upsert), a deletion, or a (re-)addition. */
static void t_random_event(struct cma_objcache *c, struct t_model *m)
{
    int i = (int)t_rand(m, T_OBJS);
    struct t_obj *o = &m->objs[i];
    unsigned what = t_rand(m, 10);
    if (o->live && what < 3) {
        t_event(c, m, i, "DELETED"); /* the object's last labels, as the API server sends */
        o->live = false;
    } else if (o->live && what < 8) {
        int k = (int)t_rand(m, (unsigned)m->n_keys); /* one label changes, or appears/goes */
        o->label[k] = t_rand(m, 5) == 0 ? -1 : (int)t_rand(m, T_VALUES);
        t_event(c, m, i, "MODIFIED");
    } else {
        t_randomize(m, i);
        t_event(c, m, i, o->live ? "MODIFIED" : "ADDED");
    }
}

static bool t_req_matches(const struct t_req *r, int have)
{
    bool in = false;
    for (int j = 0; j < r->n_values; j++)
        in = in || have == r->values[j];
    switch (r->op) {
    case T_EQ:
    case T_IN:
        return have >= 0 && in;
    case T_NEQ:
    case T_NOTIN:
        return have < 0 || !in;
    case T_EXISTS:
        return have >= 0;
    case T_NOT_EXISTS:
        return have < 0;
    }
    return false;
}

/* The selector's text, as a user would write it. */
static void t_format(const struct t_req *reqs, int n, char *out, size_t len)
{
    static const char *const ops[] = {"=", "!=", " in ", " notin ", "", ""};
    size_t used = 0;
    out[0] = '\0';
    for (int i = 0; i < n; i++) {
        const struct t_req *r = &reqs[i];
        used += (size_t)snprintf(out + used, len - used, "%s%s%s%s", i ? "," : "",
                                 r->op == T_NOT_EXISTS ? "!" : "", t_keys[r->key], ops[r->op]);
        bool set = r->op == T_IN || r->op == T_NOTIN;
        for (int j = 0; j < r->n_values; j++)
            used += (size_t)snprintf(out + used, len - used, "%s%s",
                                     j     ? ","
                                     : set ? "("
                                           : "",
                                     t_values[r->values[j]]);
        if (set)
            used += (size_t)snprintf(out + used, len - used, ")");
    }
}

struct t_hit {
    const char *ns;
    char name[16];
};

static int t_cmp_hits(const void *a, const void *b)
{
    const struct t_hit *x = a, *y = b;
    int c = strcmp(x->ns, y->ns);
    return c ? c : strcmp(x->name, y->name);
}

/* The brute-force answer: every live object of ns ("" = all) matching reqs, sorted. */
static size_t t_reference(const struct t_model *m, const char *ns, const struct t_req *reqs,
                          int n_reqs, struct t_hit *out)
{
    size_t n = 0;
    for (int i = 0; i < T_OBJS; i++) {
        const struct t_obj *o = &m->objs[i];
        bool match = o->live && (!ns[0] || strcmp(ns, t_ns[i % T_NS]) == 0);
        for (int r = 0; match && r < n_reqs; r++)
            match = t_req_matches(&reqs[r], o->label[reqs[r].key]);
        if (!match)
            continue;
        out[n].ns = t_ns[i % T_NS];
        t_name(i, out[n].name, sizeof(out[n].name));
        n++;
    }
    qsort(out, n, sizeof(*out), t_cmp_hits);
    return n;
}

/* Asks the cache and the reference for the same selector; they must agree name by name. */
static void t_check(struct cma_objcache *c, const struct t_model *m, const char *ns,
                    const struct t_req *reqs, int n_reqs)
{
    char text[256];
    t_format(reqs, n_reqs, text, sizeof(text));
    struct cma_selector *sel = NULL;
    assert_int_equal(cma_selector_parse(text, strlen(text), &sel, NULL), CMA_OK);
    static struct t_hit want[T_OBJS];
    size_t n_want = t_reference(m, ns, reqs, n_reqs, want);
    char **names = NULL;
    size_t n = 0;
    assert_int_equal(cma_objcache_list_names(c, ns, sel, &names, &n, NULL), CMA_OK);
    assert_non_null(names);
    if (n != n_want)
        fail_msg("ns '%s', selector '%s': %zu names, want %zu", ns, text, n, n_want);
    for (size_t i = 0; i < n; i++) {
        if (strcmp(names[i], want[i].name) != 0)
            fail_msg("ns '%s', selector '%s': name %zu is %s, want %s/%s", ns, text, i, names[i],
                     want[i].ns, want[i].name);
        free(names[i]);
    }
    free(names);
    cma_selector_free(sel);
}

/* A random selector over m's keys, in a random namespace (or all), checked. Most begin with an
 * EQ or IN requirement, which the index serves. */
static void t_random_check(struct cma_objcache *c, struct t_model *m)
{
    struct t_req reqs[T_REQS_MAX];
    int n = 1 + (int)t_rand(m, T_REQS_MAX);
    for (int i = 0; i < n; i++) {
        struct t_req *r = &reqs[i];
        r->op = i == 0 && t_rand(m, 10) < 8 ? (t_rand(m, 2) ? T_EQ : T_IN)
                                            : (enum t_op)t_rand(m, T_NOT_EXISTS + 1);
        r->key = (int)t_rand(m, (unsigned)m->n_keys);
        bool set = r->op == T_IN || r->op == T_NOTIN;
        bool none = r->op == T_EXISTS || r->op == T_NOT_EXISTS;
        r->n_values = none ? 0 : set ? 1 + (int)t_rand(m, 3) : 1;
        for (int j = 0; j < r->n_values; j++)
            r->values[j] = (int)t_rand(m, T_VALUES);
    }
    unsigned w = t_rand(m, T_NS + 1);
    t_check(c, m, w < T_NS - 1 ? t_ns[w] : "", reqs, n); /* "" (cluster) and "": all */
}

static struct cma_objcache *t_cache(struct t_model *m, unsigned seed, int n_keys)
{
    memset(m, 0, sizeof(*m));
    m->seed = seed;
    m->n_keys = n_keys;
    for (int i = 0; i < T_OBJS; i++)
        if (t_rand(m, 10) < 8)
            t_randomize(m, i);
    struct cma_objcache *c = NULL;
    assert_int_equal(cma_objcache_new(NULL, "", "v1", "pods", &c, NULL), CMA_OK);
    t_replace(c, m);
    return c;
}

/* Random selectors after random events and re-lists (before and after keys got indexed), with
 * the keys a cache indexes (k0..k5) or more of them than it indexes (k0..k11: the first 8 used
 * are indexed, the others scan). */
static void test_cma_objcache_list_names__index_equals_brute_force(void **state)
{
    (void)state;
    const int n_keys[] = {6, T_KEYS};
    for (size_t v = 0; v < 2; v++) {
        for (unsigned seed = 1; seed <= 3; seed++) {
            struct t_model m;
            struct cma_objcache *c = t_cache(&m, seed, n_keys[v]);
            for (int round = 0; round < 60; round++) {
                if (round == 20 || round == 45) { /* a re-list of an evolved state */
                    for (int i = 0; i < 40; i++) {
                        int o = (int)t_rand(&m, T_OBJS);
                        m.objs[o].live = t_rand(&m, 3) != 0;
                        if (m.objs[o].live)
                            t_randomize(&m, o);
                    }
                    t_replace(c, &m);
                }
                for (int i = 0; i < 15; i++)
                    t_random_check(c, &m);
                for (int i = 0; i < 25; i++)
                    t_random_event(c, &m);
            }
            cma_objcache_free(c);
        }
    }
}

/* EQ/IN combined with the other operators, one and several namespaces, order of the output. */
static void test_cma_objcache_list_names__indexed_selector_kinds(void **state)
{
    (void)state;
    struct t_model m;
    struct cma_objcache *c = t_cache(&m, 7, 4);
    const struct t_req cases[][2] = {
        {{T_IN, 0, {0, 1, 2}, 3}, {T_NEQ, 1, {0}, 1}},
        {{T_EQ, 0, {1}, 1}, {T_NOTIN, 1, {0, 3}, 2}},
        {{T_EQ, 2, {2}, 1}, {T_EXISTS, 3, {0}, 0}},
        {{T_IN, 2, {3, 0}, 2}, {T_NOT_EXISTS, 0, {0}, 0}},
        {{T_EQ, 1, {1}, 1}, {T_IN, 3, {1, 2}, 2}}, /* two narrowing ones */
        {{T_EQ, 1, {1}, 1}, {T_EQ, 1, {2}, 1}},    /* nothing */
    };
    for (int pass = 0; pass < 3; pass++) {
        for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
            for (int ns = 0; ns <= T_NS; ns++) {
                t_check(c, &m, ns < T_NS ? t_ns[ns] : "", cases[i], 2);
                t_check(c, &m, ns < T_NS ? t_ns[ns] : "", cases[i], 1);
            }
        }
        for (int i = 0; i < 100; i++)
            t_random_event(c, &m);
    }
    cma_objcache_free(c);

    /* in order across values: an IN's runs are merged */
    assert_int_equal(cma_objcache_new(NULL, "", "v1", "pods", &c, NULL), CMA_OK);
    const char *lines[] = {
        "{\"type\":\"ADDED\",\"object\":{\"metadata\":{\"name\":\"p3\",\"namespace\":\"a\","
        "\"labels\":{\"app\":\"x\",\"tier\":\"web\"}}}}",
        "{\"type\":\"ADDED\",\"object\":{\"metadata\":{\"name\":\"p1\",\"namespace\":\"a\","
        "\"labels\":{\"app\":\"y\"}}}}",
        "{\"type\":\"ADDED\",\"object\":{\"metadata\":{\"name\":\"p2\",\"namespace\":\"a\","
        "\"labels\":{\"app\":\"x\"}}}}",
        "{\"type\":\"ADDED\",\"object\":{\"metadata\":{\"name\":\"p0\",\"namespace\":\"b\","
        "\"labels\":{\"app\":\"z\"}}}}",
        "{\"type\":\"ADDED\",\"object\":{\"metadata\":{\"name\":\"c1\",\"labels\":{\"app\":\"x\"}}}"
        "}",
    };
    for (size_t i = 0; i < sizeof(lines) / sizeof(lines[0]); i++) {
        bool gone = true;
        assert_int_equal(cma_objcache_apply_event(c, lines[i], strlen(lines[i]), &gone, NULL),
                         CMA_OK);
    }
    char names[256];
    names_of(c, "a", "app in (x,y)", names, sizeof(names));
    assert_string_equal(names, "p1,p2,p3");
    names_of(c, NULL, "app in (z,x,y)", names, sizeof(names));
    assert_string_equal(names, "c1,p1,p2,p3,p0");
    names_of(c, "", "app=x,!tier", names, sizeof(names));
    assert_string_equal(names, "c1,p2");
    names_of(c, "b", "app in (x,y)", names, sizeof(names));
    assert_string_equal(names, "");
    cma_objcache_free(c);
}

/* Selectors on more keys than the cache indexes: the first 8 keys get an index (the figure of
 * cma_objcache_bytes grows), the others none (it stays), and all answer right through events. */
static void test_cma_objcache_list_names__more_keys_than_indexed(void **state)
{
    (void)state;
    struct t_model m;
    struct cma_objcache *c = t_cache(&m, 11, T_KEYS);
    for (int k = 0; k < T_KEYS; k++) {
        size_t before = cma_objcache_bytes(c);
        struct t_req r = {T_EQ, k, {1}, 1};
        t_check(c, &m, "ns-1", &r, 1);
        if (k < 8)
            assert_true(cma_objcache_bytes(c) > before);
        else
            assert_int_equal(cma_objcache_bytes(c), before);
    }
    for (int round = 0; round < 20; round++) {
        for (int i = 0; i < 30; i++)
            t_random_event(c, &m);
        for (int k = 0; k < T_KEYS; k++) {
            struct t_req r = {T_IN, k, {0, 2}, 2};
            t_check(c, &m, "", &r, 1);
            t_check(c, &m, t_ns[round % T_NS], &r, 1);
        }
    }
    cma_objcache_free(c);
}

/* A label with one value per object (pod-name): values come and go, the index keeps the empty
 * ones until they are most of them, then is rebuilt (its size stays flat); the answers stay
 * right throughout. */
static void test_cma_objcache_list_names__unique_values_churn(void **state)
{
    (void)state;
    struct cma_objcache *c = NULL;
    assert_int_equal(cma_objcache_new(NULL, "", "v1", "pods", &c, NULL), CMA_OK);
    assert_int_equal(cma_objcache_replace(c, NULL, 0, "1", NULL), CMA_OK);
    char line[256], names[64], sel[32], want[32];
    size_t bytes[4];
    for (int gen = 0; gen < 4; gen++) {
        bytes[gen] = cma_objcache_bytes(c);
        for (int i = 0; i < 200; i++) { /* pod-<i> labelled uid=u<gen>-<i> */
            int len = snprintf(line, sizeof(line),
                               "{\"type\":\"%s\",\"object\":{\"metadata\":{\"name\":\"pod-%03d\","
                               "\"namespace\":\"ns\",\"labels\":{\"uid\":\"u%d-%d\"}}}}",
                               gen ? "MODIFIED" : "ADDED", i, gen, i);
            bool gone = true;
            assert_int_equal(cma_objcache_apply_event(c, line, (size_t)len, &gone, NULL), CMA_OK);
            if (i % 50 != 49)
                continue;
            for (int j = i - 49; j <= i + 50 && j < 200; j += 7) {
                snprintf(sel, sizeof(sel), "uid=u%d-%d", gen, j);
                names_of(c, "ns", sel, names, sizeof(names));
                snprintf(want, sizeof(want), "pod-%03d", j);
                assert_string_equal(names, j <= i ? want : "");
                snprintf(sel, sizeof(sel), "uid=u%d-%d", gen - 1, j);
                names_of(c, NULL, sel, names, sizeof(names));
                assert_string_equal(names, gen && j > i ? want : "");
            }
        }
    }
    /* 200 values dropped per generation: the index does not grow with them */
    assert_true(bytes[3] < bytes[2] + bytes[2] / 4);
    for (int i = 0; i < 200; i += 2) {
        int len = snprintf(line, sizeof(line),
                           "{\"type\":\"DELETED\",\"object\":{\"metadata\":{\"name\":\"pod-%03d\","
                           "\"namespace\":\"ns\",\"labels\":{\"uid\":\"u3-%d\"}}}}",
                           i, i);
        bool gone = true;
        assert_int_equal(cma_objcache_apply_event(c, line, (size_t)len, &gone, NULL), CMA_OK);
    }
    names_of(c, "ns", "uid in (u3-10,u3-11,u3-12,u3-13)", names, sizeof(names));
    assert_string_equal(names, "pod-011,pod-013");
    cma_objcache_free(c);
}

/* One indexed key costs little per object: a pointer, growth slack, and per value a group. */
static void test_cma_objcache_bytes__index_per_object(void **state)
{
    (void)state;
    struct cma_objcache *c = NULL;
    assert_int_equal(cma_objcache_new(NULL, "", "v1", "pods", &c, NULL), CMA_OK);
    char line[512];
    for (int i = 0; i < 1000; i++) {
        int len = snprintf(line, sizeof(line),
                           "{\"type\":\"ADDED\",\"object\":{\"metadata\":{\"name\":\"pod-%04d\","
                           "\"namespace\":\"ns-%d\",\"labels\":{\"app\":\"a%d\"}}}}",
                           i, i % 7, i % 20);
        bool gone = true;
        assert_int_equal(cma_objcache_apply_event(c, line, (size_t)len, &gone, NULL), CMA_OK);
    }
    size_t before = cma_objcache_bytes(c);
    char names[16384];
    names_of(c, "ns-3", "app=a3", names, sizeof(names));
    assert_true(strncmp(names, "pod-0003,pod-0143,", 18) == 0);
    size_t index = cma_objcache_bytes(c) - before;
    assert_true(index >= 1000 * sizeof(char *));
    assert_true(index <= 1000 * 16);
    cma_objcache_free(c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cma_objcache_replace__lists_sorted_and_synced),
        cmocka_unit_test(test_cma_objcache_apply_event__all_pods_stream),
        cmocka_unit_test(test_cma_objcache_apply_event__relabel_out_of_selector_is_deleted),
        cmocka_unit_test(test_cma_objcache_apply_event__bookmark_moves_rv_only),
        cmocka_unit_test(test_cma_objcache_apply_event__410_error_asks_for_relist),
        cmocka_unit_test(test_cma_objcache_apply_event__young_cluster_replay),
        cmocka_unit_test(test_cma_objcache_apply_event__bad_lines_are_errors),
        cmocka_unit_test(test_cma_objcache_bytes__compact_per_object),
        cmocka_unit_test(test_cma_objcache_registry__needs_a_kube_client),
        cmocka_unit_test(test_cma_objcache_list_names__index_equals_brute_force),
        cmocka_unit_test(test_cma_objcache_list_names__indexed_selector_kinds),
        cmocka_unit_test(test_cma_objcache_list_names__more_keys_than_indexed),
        cmocka_unit_test(test_cma_objcache_list_names__unique_values_churn),
        cmocka_unit_test(test_cma_objcache_bytes__index_per_object),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
