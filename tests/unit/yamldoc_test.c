/* yamldoc_test.c: unit tests for the libyaml → node tree layer: positions, scalar styles and
 * nulls, anchors and aliases (and their bombs), duplicate keys, syntax errors, limits. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "cma/yamldoc.h"

static struct cma_ydoc *parse_ok(const char *text)
{
    struct cma_err err;
    cma_err_clear(&err);
    struct cma_ydoc *doc = NULL;
    enum cma_errc rc = cma_ydoc_parse("t.yaml", text, strlen(text), &doc, &err);
    if (rc)
        fail_msg("unexpected error: %s", err.msg);
    assert_non_null(doc);
    return doc;
}

/* Parses text that must fail; returns the code and leaves the formatted error in out. */
static enum cma_errc parse_err(const char *text, size_t len, char *out, size_t out_len)
{
    struct cma_err err;
    cma_err_clear(&err);
    struct cma_ydoc *doc = (struct cma_ydoc *)&err; /* must stay untouched */
    struct cma_ydoc *const sentinel = doc;
    enum cma_errc rc = cma_ydoc_parse("t.yaml", text, len, &doc, &err);
    assert_int_not_equal(rc, CMA_OK);
    assert_ptr_equal(doc, sentinel);
    assert_int_equal(err.code, rc);
    cma_err_format_pos(&err, out, out_len);
    return rc;
}

static void test_cma_ydoc_parse__positions_are_one_based(void **state)
{
    (void)state;
    struct cma_ydoc *doc = parse_ok("rules:\n  - seriesQuery: up\n    metricsQuery: x\n");
    const struct cma_ynode *root = cma_ydoc_root(doc);
    assert_non_null(root);
    assert_int_equal(root->kind, CMA_YNODE_MAPPING);
    assert_int_equal(root->line, 1);
    assert_int_equal(root->column, 1);
    assert_string_equal(root->file, "t.yaml");
    assert_string_equal(cma_ydoc_file(doc), "t.yaml");
    const struct cma_ynode *rules = cma_ynode_get(root, "rules");
    assert_non_null(rules);
    assert_int_equal(rules->kind, CMA_YNODE_SEQUENCE);
    assert_int_equal(rules->n_items, 1);
    const struct cma_ynode *rule = rules->items[0];
    assert_int_equal(rule->line, 2);
    assert_int_equal(rule->column, 5);
    const struct cma_ynode *sq = cma_ynode_get(rule, "seriesQuery");
    assert_int_equal(sq->line, 2);
    assert_int_equal(sq->column, 18);
    assert_int_equal(sq->end_line, 2);
    assert_int_equal(sq->end_column, 20);
    assert_string_equal(sq->scalar, "up");
    assert_int_equal(rule->pairs[1].key->line, 3);
    assert_int_equal(rule->pairs[1].key->column, 5);
    cma_ydoc_free(doc);
}

static void test_cma_ydoc_parse__scalar_styles_and_decoding(void **state)
{
    (void)state;
    struct cma_ydoc *doc = parse_ok("a: plain text\n"
                                    "b: 'it''s'\n"
                                    "c: \"tab\\there\\u00e9\"\n"
                                    "d: |\n  line1\n  line2\n"
                                    "e: >\n  folded\n  text\n"
                                    "f: two\n  lines\n");
    const struct cma_ynode *root = cma_ydoc_root(doc);
    const struct cma_ynode *a = cma_ynode_get(root, "a");
    assert_string_equal(a->scalar, "plain text");
    assert_int_equal(a->style, CMA_YSTYLE_PLAIN);
    const struct cma_ynode *b = cma_ynode_get(root, "b");
    assert_string_equal(b->scalar, "it's");
    assert_int_equal(b->style, CMA_YSTYLE_SINGLE);
    const struct cma_ynode *c = cma_ynode_get(root, "c");
    assert_string_equal(c->scalar, "tab\there\xc3\xa9");
    assert_int_equal(c->scalar_len, strlen("tab\there\xc3\xa9"));
    assert_int_equal(c->style, CMA_YSTYLE_DOUBLE);
    const struct cma_ynode *d = cma_ynode_get(root, "d");
    assert_string_equal(d->scalar, "line1\nline2\n");
    assert_int_equal(d->style, CMA_YSTYLE_BLOCK);
    const struct cma_ynode *e = cma_ynode_get(root, "e");
    assert_string_equal(e->scalar, "folded text\n");
    assert_int_equal(e->style, CMA_YSTYLE_BLOCK);
    const struct cma_ynode *f = cma_ynode_get(root, "f");
    assert_string_equal(f->scalar, "two lines");
    assert_int_equal(f->line, 10);
    assert_int_equal(f->end_line, 11);
    cma_ydoc_free(doc);
}

static void test_cma_ydoc_parse__nulls(void **state)
{
    (void)state;
    struct cma_ydoc *doc = parse_ok("a:\nb: ~\nc: null\nd: Null\ne: NULL\nf: ''\ng: \"null\"\n"
                                    "h: nil\ni: !!str null\nj: !!null x\n");
    const struct cma_ynode *root = cma_ydoc_root(doc);
    const char *nulls[] = {"a", "b", "c", "d", "e", "j"};
    const char *not_nulls[] = {"f", "g", "h", "i"};
    for (size_t i = 0; i < sizeof(nulls) / sizeof(nulls[0]); i++) {
        const struct cma_ynode *n = cma_ynode_get(root, nulls[i]);
        assert_non_null(n);
        if (!n->is_null)
            fail_msg("%s should be null", nulls[i]);
    }
    for (size_t i = 0; i < sizeof(not_nulls) / sizeof(not_nulls[0]); i++) {
        const struct cma_ynode *n = cma_ynode_get(root, not_nulls[i]);
        assert_non_null(n);
        if (n->is_null)
            fail_msg("%s should not be null", not_nulls[i]);
    }
    cma_ydoc_free(doc);
}

static void test_cma_ydoc_parse__empty_documents_have_no_root(void **state)
{
    (void)state;
    const char *empties[] = {"", "# only a comment\n", "---\n", "~\n", "---\n...\n"};
    for (size_t i = 0; i < sizeof(empties) / sizeof(empties[0]); i++) {
        struct cma_ydoc *doc = parse_ok(empties[i]);
        assert_null(cma_ydoc_root(doc));
        cma_ydoc_free(doc);
    }
}

static void test_cma_ydoc_parse__json(void **state)
{
    (void)state;
    struct cma_ydoc *doc =
        parse_ok("{\n\t\"rules\": [\n\t\t{\"seriesQuery\": \"up\", \"n\": 1}\n\t]\n}\n");
    const struct cma_ynode *rules = cma_ynode_get(cma_ydoc_root(doc), "rules");
    assert_int_equal(rules->kind, CMA_YNODE_SEQUENCE);
    const struct cma_ynode *sq = cma_ynode_get(rules->items[0], "seriesQuery");
    assert_string_equal(sq->scalar, "up");
    assert_int_equal(sq->style, CMA_YSTYLE_DOUBLE);
    assert_int_equal(sq->line, 3);
    cma_ydoc_free(doc);
}

static void test_cma_ydoc_parse__alias_shares_the_anchored_node(void **state)
{
    (void)state;
    struct cma_ydoc *doc = parse_ok("base: &res\n  template: <<.Resource>>\n"
                                    "one: *res\ntwo: *res\nname: &n x\nalso: *n\n");
    const struct cma_ynode *root = cma_ydoc_root(doc);
    const struct cma_ynode *base = cma_ynode_get(root, "base");
    assert_ptr_equal(cma_ynode_get(root, "one"), base);
    assert_ptr_equal(cma_ynode_get(root, "two"), base);
    assert_string_equal(cma_ynode_get(base, "template")->scalar, "<<.Resource>>");
    assert_ptr_equal(cma_ynode_get(root, "also"), cma_ynode_get(root, "name"));
    cma_ydoc_free(doc);
}

static void test_cma_ydoc_parse__anchor_redefinition_uses_latest(void **state)
{
    (void)state;
    struct cma_ydoc *doc = parse_ok("a: &x first\nb: &x second\nc: *x\n");
    assert_string_equal(cma_ynode_get(cma_ydoc_root(doc), "c")->scalar, "second");
    cma_ydoc_free(doc);
}

static void test_cma_ydoc_parse__unknown_and_recursive_anchors(void **state)
{
    (void)state;
    char out[600];
    const char *unknown = "a: 1\nb: *nope\n";
    assert_int_equal(parse_err(unknown, strlen(unknown), out, sizeof(out)), CMA_ERR_CONFIG_SYNTAX);
    assert_string_equal(out, "t.yaml:2:4: unknown anchor 'nope' referenced");
    const char *cycle = "a: &x\n  - *x\n";
    assert_int_equal(parse_err(cycle, strlen(cycle), out, sizeof(out)), CMA_ERR_CONFIG_SYNTAX);
    assert_string_equal(out, "t.yaml:2:5: anchor 'x' value contains itself");
}

static void test_cma_ydoc_parse__alias_bomb_is_rejected(void **state)
{
    (void)state;
    /* Each level lists the previous one 9 times: 9^10 expanded nodes from a few hundred bytes. */
    char text[2048];
    size_t n = (size_t)snprintf(text, sizeof(text), "l0: &l0 [x, x, x, x, x, x, x, x, x]\n");
    for (int lvl = 1; lvl <= 10; lvl++) {
        n += (size_t)snprintf(text + n, sizeof(text) - n, "l%d: &l%d [", lvl, lvl);
        for (int j = 0; j < 9; j++)
            n += (size_t)snprintf(text + n, sizeof(text) - n, "%s*l%d", j ? ", " : "", lvl - 1);
        n += (size_t)snprintf(text + n, sizeof(text) - n, "]\n");
    }
    assert_true(n < sizeof(text));
    char out[600];
    assert_int_equal(parse_err(text, n, out, sizeof(out)), CMA_ERR_CONFIG_SYNTAX);
    assert_non_null(strstr(out, "document contains excessive aliasing"));
}

static void test_cma_ydoc_parse__duplicate_key(void **state)
{
    (void)state;
    char out[600];
    const char *text = "rules:\n- seriesQuery: a\n  name: {}\n  seriesQuery: b\n";
    assert_int_equal(parse_err(text, strlen(text), out, sizeof(out)), CMA_ERR_CONFIG_KEY);
    assert_string_equal(out, "t.yaml:4:3: mapping key \"seriesQuery\" already defined at line 2");
}

static void test_cma_ydoc_parse__duplicate_key_in_large_mapping(void **state)
{
    (void)state;
    char text[4096];
    size_t n = 0;
    for (int i = 0; i < 40; i++)
        n += (size_t)snprintf(text + n, sizeof(text) - n, "k%02d: %d\n", i, i);
    /* Three repeats: the first repeat in document order (k30, line 41) is reported. */
    n += (size_t)snprintf(text + n, sizeof(text) - n, "k30: again\nk05: again\nk02: again\n");
    char out[600];
    assert_int_equal(parse_err(text, n, out, sizeof(out)), CMA_ERR_CONFIG_KEY);
    assert_string_equal(out, "t.yaml:41:1: mapping key \"k30\" already defined at line 31");
}

static void test_cma_ydoc_parse__merge_keys_expand(void **state)
{
    (void)state;
    struct cma_ydoc *doc = parse_ok("a: &a {x: 1, y: 2}\n"
                                    "b: &b {y: 3, z: 4}\n"
                                    "m:\n"
                                    "  first: 0\n"
                                    "  <<: [*a, *b]\n"
                                    "  x: own\n"
                                    "n: {'<<': *b}\n");
    const struct cma_ynode *root = cma_ydoc_root(doc);
    const struct cma_ynode *a = cma_ynode_get(root, "a"), *b = cma_ynode_get(root, "b");
    const struct cma_ynode *m = cma_ynode_get(root, "m");
    /* document order, the merged keys where "<<" was; x is m's own, y comes from a (earlier) */
    assert_int_equal(m->n_pairs, 4);
    const char *keys[] = {"first", "y", "z", "x"};
    for (size_t i = 0; i < 4; i++)
        assert_string_equal(m->pairs[i].key->scalar, keys[i]);
    assert_string_equal(cma_ynode_get(m, "x")->scalar, "own");
    assert_int_equal(cma_ynode_get(m, "x")->line, 6);
    assert_ptr_equal(cma_ynode_get(m, "y"), cma_ynode_get(a, "y"));
    assert_ptr_equal(cma_ynode_get(m, "z"), cma_ynode_get(b, "z"));
    assert_int_equal(m->pairs[1].key->line, 1); /* the merged key keeps its own position */
    assert_int_equal(m->pairs[1].key->column, 14);
    assert_null(cma_ynode_get(m, "<<"));
    /* a quoted '<<' is a plain key */
    const struct cma_ynode *n = cma_ynode_get(root, "n");
    assert_int_equal(n->n_pairs, 1);
    assert_ptr_equal(cma_ynode_get(n, "<<"), b);
    cma_ydoc_free(doc);
}

/* yaml.v2's order: a key set again takes the new value, two mappings combine key by key. */
static void test_cma_ydoc_parse__merge_keys_decode_order(void **state)
{
    (void)state;
    struct cma_ydoc *doc = parse_ok("base: &b {q: 1, r: {x: 1, y: 1}, s: [1]}\n"
                                    "m: {q: own, <<: *b}\n"
                                    "n:\n"
                                    "  <<: *b\n"
                                    "  r: {y: 2, z: 2}\n"
                                    "  s: [2]\n");
    const struct cma_ynode *root = cma_ydoc_root(doc);
    const struct cma_ynode *b = cma_ynode_get(root, "base");
    const struct cma_ynode *m = cma_ynode_get(root, "m"), *n = cma_ynode_get(root, "n");
    assert_ptr_equal(cma_ynode_get(m, "q"), cma_ynode_get(b, "q")); /* the merge came after */
    assert_ptr_equal(cma_ynode_get(m, "r"), cma_ynode_get(b, "r"));
    const struct cma_ynode *r = cma_ynode_get(n, "r");
    assert_int_equal(r->n_pairs, 3);
    assert_string_equal(cma_ynode_get(r, "x")->scalar, "1");
    assert_string_equal(cma_ynode_get(r, "y")->scalar, "2");
    assert_string_equal(cma_ynode_get(r, "z")->scalar, "2");
    assert_int_equal(r->line, 5); /* the combined mapping stands where n's own r is */
    assert_int_equal(r->column, 6);
    assert_int_equal(cma_ynode_get(b, "r")->n_pairs, 2); /* the source is untouched */
    const struct cma_ynode *sq = cma_ynode_get(n, "s");
    assert_int_equal(sq->n_items, 1); /* lists are replaced, not combined */
    assert_string_equal(sq->items[0]->scalar, "2");
    cma_ydoc_free(doc);
}

static void test_cma_ydoc_parse__merge_key_errors(void **state)
{
    (void)state;
    char out[600];
    const char *bad[] = {"m: {<<: 1}\n", "m: {<<: [{a: 1}, 2]}\n", "s: &s [1]\nm: {<<: *s}\n",
                         "m: {<<: [[{}]]}\n"};
    const char *want[] = {"t.yaml:1:5:", "t.yaml:1:5:", "t.yaml:2:5:", "t.yaml:1:5:"};
    for (size_t i = 0; i < 4; i++) {
        assert_int_equal(parse_err(bad[i], strlen(bad[i]), out, sizeof(out)), CMA_ERR_CONFIG_TYPE);
        assert_string_equal(strchr(out, ' ') + 1,
                            "map merge requires map or sequence of maps as the value");
        assert_memory_equal(out, want[i], strlen(want[i]));
    }
    const char *twice = "m: {<<: {a: 1}, <<: {b: 2}}\n";
    assert_int_equal(parse_err(twice, strlen(twice), out, sizeof(out)), CMA_ERR_CONFIG_KEY);
    assert_string_equal(out, "t.yaml:1:17: mapping key \"<<\" already defined at line 1");
}

/* A 1000-key anchor merged into `copies` mappings; the caller frees the text. */
static char *merge_copies(int copies, size_t *len)
{
    size_t cap = 64 << 10, n = 0;
    char *text = malloc(cap);
    assert_non_null(text);
    n += (size_t)snprintf(text + n, cap - n, "a: &a {");
    for (int i = 0; i < 1000; i++)
        n += (size_t)snprintf(text + n, cap - n, "%sk%d: 1", i ? ", " : "", i);
    n += (size_t)snprintf(text + n, cap - n, "}\nl:\n");
    for (int i = 0; i < copies && n + 16 < cap; i++)
        n += (size_t)snprintf(text + n, cap - n, "- <<: *a\n");
    assert_true(n + 16 < cap);
    *len = n;
    return text;
}

static void test_cma_ydoc_parse__merge_key_limit(void **state)
{
    (void)state;
    size_t len;
    char *text = merge_copies(1000, &len); /* 1e6 merged keys: under 1 Mi */
    struct cma_err err;
    cma_err_clear(&err);
    struct cma_ydoc *doc = NULL;
    assert_int_equal(cma_ydoc_parse("t.yaml", text, len, &doc, &err), CMA_OK);
    const struct cma_ynode *l = cma_ynode_get(cma_ydoc_root(doc), "l");
    assert_int_equal(l->n_items, 1000);
    assert_int_equal(l->items[999]->n_pairs, 1000);
    cma_ydoc_free(doc);
    free(text);
    text = merge_copies(1100, &len);
    char out[600];
    assert_int_equal(parse_err(text, len, out, sizeof(out)), CMA_ERR_TOO_LARGE);
    assert_non_null(strstr(out, "document merges more than 1048576 keys (<<)"));
    free(text);
}

static void test_cma_ydoc_parse__syntax_error_position(void **state)
{
    (void)state;
    char out[600];
    const char *text = "rules:\n- name:\n    as: a: b\n";
    assert_int_equal(parse_err(text, strlen(text), out, sizeof(out)), CMA_ERR_CONFIG_SYNTAX);
    assert_string_equal(out, "t.yaml:3:10: mapping values are not allowed in this context");
    const char *unclosed = "a: [1, 2\nb: 3\n";
    assert_int_equal(parse_err(unclosed, strlen(unclosed), out, sizeof(out)),
                     CMA_ERR_CONFIG_SYNTAX);
    assert_string_equal(out, "t.yaml:2:2: did not find expected ',' or ']'");
}

static void test_cma_ydoc_parse__tab_indentation(void **state)
{
    (void)state;
    char out[600];
    const char *text = "rules:\n\t- seriesQuery: up\n";
    assert_int_equal(parse_err(text, strlen(text), out, sizeof(out)), CMA_ERR_CONFIG_SYNTAX);
    assert_string_equal(out, "t.yaml:2:1: found character that cannot start any token (a tab: "
                             "YAML indentation must use spaces)");
}

static void test_cma_ydoc_parse__invalid_utf8_position(void **state)
{
    (void)state;
    char out[600];
    const char *text = "a: 1\nbb: x\xff\n";
    assert_int_equal(parse_err(text, strlen(text), out, sizeof(out)), CMA_ERR_CONFIG_SYNTAX);
    assert_string_equal(out, "t.yaml:2:6: invalid leading UTF-8 octet");
    const char *nul = "a: x\0y\n";
    assert_int_equal(parse_err(nul, 7, out, sizeof(out)), CMA_ERR_CONFIG_SYNTAX);
    assert_string_equal(out, "t.yaml:1:5: control characters are not allowed");
}

static void test_cma_ydoc_parse__second_document_is_ignored(void **state)
{
    (void)state;
    /* As yaml.v2's Unmarshal: the first document counts; a later one is not even parsed (its
     * syntax error does not count), and where it starts is reported for a warning. */
    struct cma_ydoc *doc = parse_ok("a: 1\n---\nb: [2\n");
    assert_non_null(cma_ynode_get(cma_ydoc_root(doc), "a"));
    assert_null(cma_ynode_get(cma_ydoc_root(doc), "b"));
    unsigned line = 0, column = 0;
    assert_true(cma_ydoc_ignored_document(doc, &line, &column));
    assert_int_equal(line, 2);
    assert_int_equal(column, 1);
    cma_ydoc_free(doc);
    /* A trailing empty document is not ignored content. */
    doc = parse_ok("a: 1\n---\n");
    assert_non_null(cma_ynode_get(cma_ydoc_root(doc), "a"));
    assert_false(cma_ydoc_ignored_document(doc, &line, &column));
    cma_ydoc_free(doc);
    /* A syntax error in the first document still counts. */
    char out[600];
    const char *text = "a: [1\n---\nb: 2\n";
    assert_int_equal(parse_err(text, strlen(text), out, sizeof(out)), CMA_ERR_CONFIG_SYNTAX);
}

static void test_cma_ydoc_parse__non_scalar_key(void **state)
{
    (void)state;
    char out[600];
    const char *text = "a: 1\n? [x, y]\n: 2\n";
    assert_int_equal(parse_err(text, strlen(text), out, sizeof(out)), CMA_ERR_CONFIG_SYNTAX);
    assert_string_equal(out, "t.yaml:2:3: mapping keys must be scalars, not lists or mappings");
}

static void test_cma_ydoc_parse__depth_limit(void **state)
{
    (void)state;
    char text[300];
    memset(text, '[', 64);
    memset(text + 64, ']', 64);
    struct cma_err err;
    cma_err_clear(&err);
    struct cma_ydoc *doc = NULL;
    assert_int_equal(cma_ydoc_parse("t.yaml", text, 128, &doc, &err), CMA_OK);
    cma_ydoc_free(doc);
    memset(text, '[', 65);
    memset(text + 65, ']', 65);
    char out[600];
    assert_int_equal(parse_err(text, 130, out, sizeof(out)), CMA_ERR_CONFIG_SYNTAX);
    assert_string_equal(out, "t.yaml:1:65: nesting deeper than 64 levels");
}

static void test_cma_ydoc_parse__size_limits(void **state)
{
    (void)state;
    size_t big = ((size_t)16 << 20) + 1;
    char *text = malloc(big);
    assert_non_null(text);
    memset(text, ' ', big);
    char out[600];
    assert_int_equal(parse_err(text, big, out, sizeof(out)), CMA_ERR_TOO_LARGE);
    assert_string_equal(out, "t.yaml: config is larger than 16 MiB");
    /* More than 1 Mi nodes in a flow list of 2-byte items. */
    size_t items = ((size_t)1 << 20) + 10, n = 0;
    text[n++] = '[';
    for (size_t i = 0; i < items; i++) {
        text[n++] = '1';
        text[n++] = ',';
    }
    text[n++] = ']';
    assert_int_equal(parse_err(text, n, out, sizeof(out)), CMA_ERR_TOO_LARGE);
    assert_non_null(strstr(out, "document has more than 1048576 nodes"));
    free(text);
}

static void test_cma_ydoc_load_file__reads_file(void **state)
{
    (void)state;
    char path[] = "/tmp/yamldoc_test_XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    const char *text = "rules: []\n";
    assert_int_equal(write(fd, text, strlen(text)), (ssize_t)strlen(text));
    close(fd);
    struct cma_err err;
    cma_err_clear(&err);
    struct cma_ydoc *doc = NULL;
    assert_int_equal(cma_ydoc_load_file(path, &doc, &err), CMA_OK);
    assert_string_equal(cma_ydoc_file(doc), path);
    const struct cma_ynode *rules = cma_ynode_get(cma_ydoc_root(doc), "rules");
    assert_int_equal(rules->kind, CMA_YNODE_SEQUENCE);
    assert_string_equal(rules->file, path);
    cma_ydoc_free(doc);
    unlink(path);
}

static void test_cma_ydoc_load_file__missing_file(void **state)
{
    (void)state;
    struct cma_err err;
    cma_err_clear(&err);
    struct cma_ydoc *doc = NULL;
    assert_int_equal(cma_ydoc_load_file("/nonexistent/adapter.yaml", &doc, &err),
                     CMA_ERR_CONFIG_IO);
    assert_null(doc);
    char out[600];
    cma_err_format_pos(&err, out, sizeof(out));
    assert_string_equal(out, "/nonexistent/adapter.yaml: cannot read config file: No such file or "
                             "directory");
}

static void test_cma_ynode_get__absent_and_non_mapping(void **state)
{
    (void)state;
    struct cma_ydoc *doc = parse_ok("a: [1]\n");
    const struct cma_ynode *root = cma_ydoc_root(doc);
    assert_null(cma_ynode_get(root, "b"));
    assert_null(cma_ynode_get(root, "A"));
    assert_null(cma_ynode_get(cma_ynode_get(root, "a"), "a"));
    assert_null(cma_ynode_get(NULL, "a"));
    cma_ydoc_free(doc);
}

static void test_cma_ynode_as_bool__yaml11_forms(void **state)
{
    (void)state;
    struct cma_ydoc *doc = parse_ok("[y, Yes, TRUE, on, True, n, NO, false, Off, 'true', 1, maybe, "
                                    "[x]]\n");
    const struct cma_ynode *list = cma_ydoc_root(doc);
    const bool expected[] = {true, true, true, true, true, false, false, false, false};
    for (size_t i = 0; i < 9; i++) {
        bool b = !expected[i];
        assert_true(cma_ynode_as_bool(list->items[i], &b));
        assert_int_equal(b, expected[i]);
    }
    for (size_t i = 9; i < list->n_items; i++) {
        bool b = true;
        assert_false(cma_ynode_as_bool(list->items[i], &b));
        assert_true(b);
    }
    cma_ydoc_free(doc);
}

static void test_cma_ydoc_quote__escapes_and_truncates(void **state)
{
    (void)state;
    char out[CMA_YDOC_QUOTE_MAX];
    const char raw[] = "a\"b\\c\nd\te\x01\x7f\xc3\xa9";
    cma_ydoc_quote(raw, sizeof(raw) - 1, out, sizeof(out));
    assert_string_equal(out, "\"a\\\"b\\\\c\\nd\\te\\x01\\x7f\xc3\xa9\"");
    char long_text[300];
    memset(long_text, 'z', sizeof(long_text));
    cma_ydoc_quote(long_text, sizeof(long_text), out, sizeof(out));
    assert_true(strlen(out) < 140);
    assert_int_equal(out[0], '"');
    assert_string_equal(out + strlen(out) - 4, "\"...");
    char small[8];
    cma_ydoc_quote("x", 1, small, sizeof(small));
    assert_string_equal(small, "");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cma_ydoc_parse__positions_are_one_based),
        cmocka_unit_test(test_cma_ydoc_parse__scalar_styles_and_decoding),
        cmocka_unit_test(test_cma_ydoc_parse__nulls),
        cmocka_unit_test(test_cma_ydoc_parse__empty_documents_have_no_root),
        cmocka_unit_test(test_cma_ydoc_parse__json),
        cmocka_unit_test(test_cma_ydoc_parse__alias_shares_the_anchored_node),
        cmocka_unit_test(test_cma_ydoc_parse__anchor_redefinition_uses_latest),
        cmocka_unit_test(test_cma_ydoc_parse__unknown_and_recursive_anchors),
        cmocka_unit_test(test_cma_ydoc_parse__alias_bomb_is_rejected),
        cmocka_unit_test(test_cma_ydoc_parse__duplicate_key),
        cmocka_unit_test(test_cma_ydoc_parse__duplicate_key_in_large_mapping),
        cmocka_unit_test(test_cma_ydoc_parse__merge_keys_expand),
        cmocka_unit_test(test_cma_ydoc_parse__merge_keys_decode_order),
        cmocka_unit_test(test_cma_ydoc_parse__merge_key_errors),
        cmocka_unit_test(test_cma_ydoc_parse__merge_key_limit),
        cmocka_unit_test(test_cma_ydoc_parse__syntax_error_position),
        cmocka_unit_test(test_cma_ydoc_parse__tab_indentation),
        cmocka_unit_test(test_cma_ydoc_parse__invalid_utf8_position),
        cmocka_unit_test(test_cma_ydoc_parse__second_document_is_ignored),
        cmocka_unit_test(test_cma_ydoc_parse__non_scalar_key),
        cmocka_unit_test(test_cma_ydoc_parse__depth_limit),
        cmocka_unit_test(test_cma_ydoc_parse__size_limits),
        cmocka_unit_test(test_cma_ydoc_load_file__reads_file),
        cmocka_unit_test(test_cma_ydoc_load_file__missing_file),
        cmocka_unit_test(test_cma_ynode_get__absent_and_non_mapping),
        cmocka_unit_test(test_cma_ynode_as_bool__yaml11_forms),
        cmocka_unit_test(test_cma_ydoc_quote__escapes_and_truncates),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
