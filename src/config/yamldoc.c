/* yamldoc.c: libyaml events → an immutable node tree with 1-based file/line/column per node.
 * The only libyaml user in the project.
 *
 * DESIGN
 * - One pass over libyaml's event stream with an explicit stack of open collections (at most
 *   MAX_DEPTH), so nesting never recurses on the C stack.
 * - Nodes live in slabs owned by the document; collections hold pointers into the slabs, so an
 *   alias is simply a second pointer to the anchored node (no copy). An alias to a collection
 *   that is still open (a cycle) is an error.
 * - Alias bombs: every node has a weight (1 + its scalar bytes, or 1 + its children's weights,
 *   counting aliased nodes in full). The weight of any node is capped at MAX_WEIGHT, so a walk
 *   over the tree that follows aliases is bounded too. Anchors are found through a hash table.
 * - Duplicate keys are checked when a mapping closes (sorted copy of the keys: O(n log n)).
 * - Merge keys (`<<: *a`, `<<: [*a, *b]`) are expanded when their mapping closes, the way
 *   yaml.v2 decodes them into structs (expand_merge): in document order, a key set again takes
 *   the new value, two mappings combine key by key, an earlier merged mapping wins over a later
 *   one. The pairs point to the source nodes, so positions stay where the text is; a combined
 *   mapping is a new node at the position of the later one. A merge value that is not a mapping
 *   or a list of mappings is an error at the "<<".
 * - Only the first document counts, as in yaml.v2's Unmarshal (prometheus-adapter's loader): a
 *   later document that is not empty is neither parsed nor checked; where it starts is kept
 *   (cma_ydoc_ignored_document) so the caller can warn. */
#include "cma/yamldoc.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <yaml.h>

#include "cma/hash.h"
#include "cma/str.h"

#define MAX_INPUT_BYTES ((size_t)16 << 20)
#define MAX_DEPTH 64
#define MAX_NODES ((size_t)1 << 20)
#define MAX_WEIGHT ((size_t)64 << 20)
#define MAX_MERGED ((size_t)1 << 20) /* keys added by merge keys, in the whole document */
#define SLAB_NODES 256

struct node_slab {
    struct node_slab *next;
    size_t used;
    struct cma_ynode nodes[SLAB_NODES];
};

struct cma_ydoc {
    char *file;
    struct cma_ynode *root;
    struct node_slab *slabs;
    size_t n_nodes;
    unsigned ignored_line, ignored_column; /* a later, non-empty document; 0 = none */
};

struct anchor {
    char *name;
    struct cma_ynode *node;
    size_t weight;
    bool complete;
    bool redefined; /* a later anchor of the same name hides this one */
};

struct frame {
    struct cma_ynode *node;
    struct cma_ynode *pending_key; /* mappings: key waiting for its value */
    size_t cap;                    /* capacity of pairs/items */
    size_t weight;
    size_t anchor; /* index into anchors, SIZE_MAX when none */
};

struct parser {
    struct cma_ydoc *doc;
    struct frame frames[MAX_DEPTH];
    size_t depth;
    struct anchor *anchors;
    size_t n_anchors, cap_anchors;
    struct cma_htab table; /* anchors by name: index + 1 */
    unsigned n_docs;
    size_t n_merged;   /* keys laid out by merge keys so far (MAX_MERGED) */
    bool in_later_doc; /* inside the second or a later document */
    unsigned later_doc_line, later_doc_column;
};

/* ---- document memory ---------------------------------------------------------------------- */

static struct cma_ynode *node_new(struct cma_ydoc *doc, enum cma_ynode_kind kind,
                                  const yaml_mark_t *start, const yaml_mark_t *end)
{
    if (doc->n_nodes >= MAX_NODES)
        return NULL;
    struct node_slab *slab = doc->slabs;
    if (!slab || slab->used == SLAB_NODES) {
        slab = calloc(1, sizeof(*slab));
        if (!slab)
            return NULL;
        slab->next = doc->slabs;
        doc->slabs = slab;
    }
    struct cma_ynode *n = &slab->nodes[slab->used++];
    doc->n_nodes++;
    memset(n, 0, sizeof(*n));
    n->kind = kind;
    n->file = doc->file;
    n->line = (unsigned)start->line + 1;
    n->column = (unsigned)start->column + 1;
    n->end_line = (unsigned)end->line + 1;
    n->end_column = (unsigned)end->column + 1;
    return n;
}

void cma_ydoc_free(struct cma_ydoc *doc)
{
    if (!doc)
        return;
    struct node_slab *slab = doc->slabs;
    while (slab) {
        struct node_slab *next = slab->next;
        for (size_t i = 0; i < slab->used; i++) {
            free(slab->nodes[i].scalar);
            free(slab->nodes[i].pairs);
            free(slab->nodes[i].items);
        }
        free(slab);
        slab = next;
    }
    free(doc->file);
    free(doc);
}

/* ---- anchors -------------------------------------------------------------------------------- */

/* Only the newest anchor of a name matches (older ones stay in the table after a growth). */
static bool anchor_eq(const void *ctx, size_t index, const void *key)
{
    const struct parser *p = ctx;
    return !p->anchors[index].redefined && strcmp(p->anchors[index].name, key) == 0;
}

static uint64_t anchor_hash(const void *ctx, size_t index)
{
    const struct parser *p = ctx;
    return cma_hash_str(p->anchors[index].name, strlen(p->anchors[index].name));
}

/* Returns the slot of `name` in the table: holding its index + 1, or 0 when free. */
static size_t *table_slot(struct parser *p, const char *name)
{
    return cma_htab_find(&p->table, cma_hash_str(name, strlen(name)), name, anchor_eq, p);
}

/* Defines (or redefines) an anchor; returns its index or SIZE_MAX when out of memory. */
static size_t anchor_define(struct parser *p, const char *name, struct cma_ynode *node)
{
    if (cma_htab_reserve(&p->table, p->n_anchors, anchor_hash, p) != CMA_OK)
        return SIZE_MAX;
    if (p->n_anchors == p->cap_anchors) {
        size_t cap = p->cap_anchors ? p->cap_anchors * 2 : 16;
        struct anchor *a = realloc(p->anchors, cap * sizeof(*a));
        if (!a)
            return SIZE_MAX;
        p->anchors = a;
        p->cap_anchors = cap;
    }
    char *copy = cma_strdup(name);
    if (!copy)
        return SIZE_MAX;
    size_t *slot = table_slot(p, name);
    if (*slot)
        p->anchors[*slot - 1].redefined = true;
    size_t idx = p->n_anchors++;
    p->anchors[idx] = (struct anchor){.name = copy, .node = node, .weight = 0, .complete = false};
    *slot = idx + 1;
    return idx;
}

static const struct anchor *anchor_find(struct parser *p, const char *name)
{
    if (!p->table.cap)
        return NULL;
    size_t slot = *table_slot(p, name);
    return slot ? &p->anchors[slot - 1] : NULL;
}

/* ---- tree building -------------------------------------------------------------------------- */

static enum cma_errc err_at_node(struct cma_err *reterr, enum cma_errc code,
                                 const struct cma_ynode *n, const char *msg)
{
    return cma_err_set_at(reterr, code, n->file, n->line, n->column, "%s", msg);
}

static size_t add_weight(size_t a, size_t b)
{
    return a > SIZE_MAX - b ? SIZE_MAX : a + b;
}

static enum cma_errc grow_array(void **arr, size_t *cap, size_t used, size_t elem)
{
    if (used < *cap)
        return CMA_OK;
    size_t new_cap = *cap ? *cap * 2 : 4;
    void *p = realloc(*arr, new_cap * elem);
    if (!p)
        return CMA_ERR_NOMEM;
    *arr = p;
    *cap = new_cap;
    return CMA_OK;
}

/* Attaches a finished node (or an aliased one) of the given weight to the open collection, or
 * makes it the root. `at` is where the reference appears (the alias, or the node itself). */
static enum cma_errc attach(struct parser *p, struct cma_ynode *node, size_t weight,
                            const struct cma_ynode *at, struct cma_err *reterr)
{
    if (p->depth == 0) {
        p->doc->root = node->kind == CMA_YNODE_SCALAR && node->is_null ? NULL : node;
        return CMA_OK;
    }
    struct frame *f = &p->frames[p->depth - 1];
    f->weight = add_weight(f->weight, weight);
    if (f->weight > MAX_WEIGHT)
        return err_at_node(reterr, CMA_ERR_CONFIG_SYNTAX, at,
                           "document contains excessive aliasing");
    struct cma_ynode *coll = f->node;
    if (coll->kind == CMA_YNODE_SEQUENCE) {
        if (grow_array((void **)&coll->items, &f->cap, coll->n_items, sizeof(*coll->items)))
            return cma_err_set(reterr, CMA_ERR_NOMEM, "out of memory");
        coll->items[coll->n_items++] = node;
        return CMA_OK;
    }
    if (!f->pending_key) {
        if (node->kind != CMA_YNODE_SCALAR)
            return err_at_node(reterr, CMA_ERR_CONFIG_SYNTAX, at,
                               "mapping keys must be scalars, not lists or mappings");
        f->pending_key = node;
        return CMA_OK;
    }
    if (grow_array((void **)&coll->pairs, &f->cap, coll->n_pairs, sizeof(*coll->pairs)))
        return cma_err_set(reterr, CMA_ERR_NOMEM, "out of memory");
    coll->pairs[coll->n_pairs++] = (struct cma_ypair){.key = f->pending_key, .value = node};
    f->pending_key = NULL;
    return CMA_OK;
}

struct key_ref {
    const struct cma_ynode *key;
    size_t index;
};

static int key_ref_cmp(const void *a, const void *b)
{
    const struct key_ref *x = a, *y = b;
    size_t n = x->key->scalar_len < y->key->scalar_len ? x->key->scalar_len : y->key->scalar_len;
    int c = memcmp(x->key->scalar, y->key->scalar, n);
    if (c)
        return c;
    if (x->key->scalar_len != y->key->scalar_len)
        return x->key->scalar_len < y->key->scalar_len ? -1 : 1;
    return x->index < y->index ? -1 : x->index > y->index;
}

static bool same_key(const struct cma_ynode *a, const struct cma_ynode *b)
{
    return a->scalar_len == b->scalar_len && memcmp(a->scalar, b->scalar, a->scalar_len) == 0;
}

static enum cma_errc duplicate_error(const struct cma_ynode *second, const struct cma_ynode *first,
                                     struct cma_err *reterr)
{
    char quoted[CMA_YDOC_QUOTE_MAX];
    cma_ydoc_quote(second->scalar, second->scalar_len, quoted, sizeof(quoted));
    return cma_err_set_at(reterr, CMA_ERR_CONFIG_KEY, second->file, second->line, second->column,
                          "mapping key %s already defined at line %u", quoted, first->line);
}

/* Reports the earliest repeated key of a mapping (in document order). */
static enum cma_errc check_duplicates(const struct cma_ynode *map, struct cma_err *reterr)
{
    size_t n = map->n_pairs;
    if (n < 2)
        return CMA_OK;
    if (n <= 16) {
        for (size_t j = 1; j < n; j++)
            for (size_t i = 0; i < j; i++)
                if (same_key(map->pairs[i].key, map->pairs[j].key))
                    return duplicate_error(map->pairs[j].key, map->pairs[i].key, reterr);
        return CMA_OK;
    }
    struct key_ref *refs = malloc(n * sizeof(*refs));
    if (!refs)
        return cma_err_set(reterr, CMA_ERR_NOMEM, "out of memory");
    for (size_t i = 0; i < n; i++)
        refs[i] = (struct key_ref){.key = map->pairs[i].key, .index = i};
    qsort(refs, n, sizeof(*refs), key_ref_cmp);
    size_t best_second = SIZE_MAX, best_first = 0;
    size_t group_start = 0;
    for (size_t i = 1; i < n; i++) {
        if (!same_key(refs[i].key, refs[group_start].key)) {
            group_start = i;
            continue;
        }
        if (refs[i].index < best_second) {
            best_second = refs[i].index;
            best_first = refs[group_start].index;
        }
    }
    free(refs);
    if (best_second == SIZE_MAX)
        return CMA_OK;
    return duplicate_error(map->pairs[best_second].key, map->pairs[best_first].key, reterr);
}

static bool is_null_scalar(const yaml_event_t *ev)
{
    const char *tag = (const char *)ev->data.scalar.tag;
    const char *v = (const char *)ev->data.scalar.value;
    if (tag && strcmp(tag, YAML_NULL_TAG) == 0)
        return true;
    if (tag)
        return false;
    if (ev->data.scalar.style != YAML_PLAIN_SCALAR_STYLE)
        return false;
    return ev->data.scalar.length == 0 || strcmp(v, "~") == 0 || strcmp(v, "null") == 0 ||
           strcmp(v, "Null") == 0 || strcmp(v, "NULL") == 0;
}

static enum cma_yscalar_style scalar_style(yaml_scalar_style_t style)
{
    switch (style) {
    case YAML_SINGLE_QUOTED_SCALAR_STYLE:
        return CMA_YSTYLE_SINGLE;
    case YAML_DOUBLE_QUOTED_SCALAR_STYLE:
        return CMA_YSTYLE_DOUBLE;
    case YAML_LITERAL_SCALAR_STYLE:
    case YAML_FOLDED_SCALAR_STYLE:
        return CMA_YSTYLE_BLOCK;
    default:
        return CMA_YSTYLE_PLAIN;
    }
}

static enum cma_errc too_many_nodes(struct parser *p, const yaml_mark_t *m, struct cma_err *reterr)
{
    if (p->doc->n_nodes >= MAX_NODES)
        return cma_err_set_at(reterr, CMA_ERR_TOO_LARGE, p->doc->file, (unsigned)m->line + 1,
                              (unsigned)m->column + 1, "document has more than %zu nodes",
                              MAX_NODES);
    return cma_err_set(reterr, CMA_ERR_NOMEM, "out of memory");
}

static enum cma_errc on_scalar(struct parser *p, const yaml_event_t *ev, struct cma_err *reterr)
{
    struct cma_ynode *n = node_new(p->doc, CMA_YNODE_SCALAR, &ev->start_mark, &ev->end_mark);
    if (!n)
        return too_many_nodes(p, &ev->start_mark, reterr);
    n->scalar = cma_strndup((const char *)ev->data.scalar.value, ev->data.scalar.length);
    if (!n->scalar)
        return cma_err_set(reterr, CMA_ERR_NOMEM, "out of memory");
    n->scalar_len = ev->data.scalar.length;
    n->style = scalar_style(ev->data.scalar.style);
    n->is_null = is_null_scalar(ev);
    size_t weight = add_weight(1, n->scalar_len);
    if (ev->data.scalar.anchor) {
        size_t idx = anchor_define(p, (const char *)ev->data.scalar.anchor, n);
        if (idx == SIZE_MAX)
            return cma_err_set(reterr, CMA_ERR_NOMEM, "out of memory");
        p->anchors[idx].weight = weight;
        p->anchors[idx].complete = true;
    }
    return attach(p, n, weight, n, reterr);
}

static enum cma_errc on_start(struct parser *p, const yaml_event_t *ev, enum cma_ynode_kind kind,
                              const yaml_char_t *anchor, struct cma_err *reterr)
{
    if (p->depth == MAX_DEPTH)
        return cma_err_set_at(
            reterr, CMA_ERR_CONFIG_SYNTAX, p->doc->file, (unsigned)ev->start_mark.line + 1,
            (unsigned)ev->start_mark.column + 1, "nesting deeper than %d levels", MAX_DEPTH);
    struct cma_ynode *n = node_new(p->doc, kind, &ev->start_mark, &ev->end_mark);
    if (!n)
        return too_many_nodes(p, &ev->start_mark, reterr);
    size_t idx = SIZE_MAX;
    if (anchor) {
        idx = anchor_define(p, (const char *)anchor, n);
        if (idx == SIZE_MAX)
            return cma_err_set(reterr, CMA_ERR_NOMEM, "out of memory");
    }
    p->frames[p->depth++] = (struct frame){.node = n, .weight = 1, .anchor = idx};
    return CMA_OK;
}

/* ---- merge keys ----------------------------------------------------------------------------- */

/* A plain "<<" key, as yaml.v2's isMerge (a quoted '<<' is an ordinary key). */
static bool is_merge_key(const struct cma_ynode *key)
{
    return key->style == CMA_YSTYLE_PLAIN && key->scalar_len == 2 &&
           memcmp(key->scalar, "<<", 2) == 0;
}

/* The mappings a merge value names (itself, or the items of a sequence), in order; false when
 * the value is something else. */
static bool merge_sources(struct cma_ynode *const *value, struct cma_ynode *const **src, size_t *n)
{
    const struct cma_ynode *v = *value;
    *src = value;
    *n = 1;
    if (v->kind == CMA_YNODE_MAPPING)
        return true;
    if (v->kind != CMA_YNODE_SEQUENCE)
        return false;
    for (size_t i = 0; i < v->n_items; i++)
        if (v->items[i]->kind != CMA_YNODE_MAPPING)
            return false;
    *src = v->items;
    *n = v->n_items;
    return true;
}

/* A mapping being laid out: its pairs so far and an index of them by key. */
struct layout {
    struct cma_ypair *pairs;
    size_t n, cap;
    struct cma_htab table;
};

static bool layout_eq(const void *ctx, size_t index, const void *key)
{
    const struct layout *l = ctx;
    return same_key(l->pairs[index].key, key);
}

static uint64_t layout_hash(const void *ctx, size_t index)
{
    const struct layout *l = ctx;
    return cma_hash_str(l->pairs[index].key->scalar, l->pairs[index].key->scalar_len);
}

static enum cma_errc set_pair(struct parser *p, struct layout *l, const struct cma_ypair *pair,
                              struct cma_err *reterr);

/* A new mapping: `old` decoded over by `value` (both mappings), as yaml.v2 decodes a mapping into
 * a struct that a merge has already filled. It stands where `value` is. */
static enum cma_errc merge_mappings(struct parser *p, const struct cma_ynode *old,
                                    const struct cma_ynode *value, struct cma_ynode **ret,
                                    struct cma_err *reterr)
{
    yaml_mark_t start = {.line = value->line - 1, .column = value->column - 1};
    yaml_mark_t end = {.line = value->end_line - 1, .column = value->end_column - 1};
    struct cma_ynode *n = node_new(p->doc, CMA_YNODE_MAPPING, &start, &end);
    if (!n)
        return too_many_nodes(p, &start, reterr);
    struct layout l = {0};
    enum cma_errc rc = CMA_OK;
    for (size_t i = 0; rc == CMA_OK && i < old->n_pairs; i++)
        rc = set_pair(p, &l, &old->pairs[i], reterr);
    for (size_t i = 0; rc == CMA_OK && i < value->n_pairs; i++)
        rc = set_pair(p, &l, &value->pairs[i], reterr);
    cma_htab_done(&l.table);
    n->pairs = l.pairs; /* freed with the document, even on failure */
    n->n_pairs = l.n;
    *ret = n;
    return rc;
}

/* Sets key = value in the mapping being laid out, in yaml.v2's decoding order: a new key is
 * appended; a key already there takes the new value, or, when both values are mappings, the old
 * one decoded over by the new one (yaml.v2 decodes into the struct field it already filled). */
static enum cma_errc set_pair(struct parser *p, struct layout *l, const struct cma_ypair *pair,
                              struct cma_err *reterr)
{
    if (++p->n_merged > MAX_MERGED)
        return cma_err_set_at(reterr, CMA_ERR_TOO_LARGE, pair->key->file, pair->key->line,
                              pair->key->column, "document merges more than %zu keys (<<)",
                              MAX_MERGED);
    if (cma_htab_reserve(&l->table, l->n, layout_hash, l) != CMA_OK ||
        grow_array((void **)&l->pairs, &l->cap, l->n, sizeof(*l->pairs)) != CMA_OK)
        return cma_err_set(reterr, CMA_ERR_NOMEM, "out of memory");
    const struct cma_ynode *key = pair->key;
    size_t *slot =
        cma_htab_find(&l->table, cma_hash_str(key->scalar, key->scalar_len), key, layout_eq, l);
    if (!*slot) {
        l->pairs[l->n] = *pair;
        *slot = ++l->n;
        return CMA_OK;
    }
    struct cma_ypair *at = &l->pairs[*slot - 1];
    if (at->value->kind != CMA_YNODE_MAPPING || pair->value->kind != CMA_YNODE_MAPPING) {
        *at = *pair;
        return CMA_OK;
    }
    struct cma_ynode *merged = NULL;
    enum cma_errc rc = merge_mappings(p, at->value, pair->value, &merged, reterr);
    at->key = pair->key;
    at->value = merged;
    return rc;
}

/* Lays out the pairs of `map` as yaml.v2 decodes it (see expand_merge). */
static enum cma_errc lay_out(struct parser *p, const struct cma_ynode *map, struct layout *l,
                             struct cma_err *reterr)
{
    enum cma_errc rc = CMA_OK;
    for (size_t i = 0; rc == CMA_OK && i < map->n_pairs; i++) {
        if (!is_merge_key(map->pairs[i].key)) {
            rc = set_pair(p, l, &map->pairs[i], reterr);
            continue;
        }
        size_t n_src = 0;
        struct cma_ynode *const *src = NULL;
        if (!merge_sources(&map->pairs[i].value, &src, &n_src))
            return err_at_node(reterr, CMA_ERR_CONFIG_TYPE, map->pairs[i].key,
                               "map merge requires map or sequence of maps as the value");
        for (size_t s = n_src; rc == CMA_OK && s-- > 0;) /* the earlier mappings win */
            for (size_t j = 0; rc == CMA_OK && j < src[s]->n_pairs; j++)
                rc = set_pair(p, l, &src[s]->pairs[j], reterr);
    }
    return rc;
}

/* Expands the merge keys ("<<: *a", "<<: [*a, *b]") of a closed mapping the way yaml.v2 decodes
 * them into prometheus-adapter's structs: the pairs apply in document order, a merge key applying
 * its mappings' pairs (the last mapping of a list first, so the earlier ones win); a key set again
 * takes the new value, and when both values are mappings they combine key by key (yaml.v2
 * decodes into the struct field already filled). So the usual `<<: *base` first, then the
 * mapping's own keys, gives the own keys precedence. Merged mappings were closed before, so
 * their own merge keys are already expanded; the pairs are the source nodes (positions stay). */
static enum cma_errc expand_merge(struct parser *p, struct cma_ynode *map, struct cma_err *reterr)
{
    bool any = false;
    for (size_t i = 0; i < map->n_pairs && !any; i++)
        any = is_merge_key(map->pairs[i].key);
    if (!any)
        return CMA_OK;
    struct layout l = {0};
    enum cma_errc rc = lay_out(p, map, &l, reterr);
    cma_htab_done(&l.table);
    if (rc != CMA_OK) {
        free(l.pairs);
        return rc;
    }
    free(map->pairs);
    map->pairs = l.pairs;
    map->n_pairs = l.n;
    return CMA_OK;
}

static enum cma_errc on_end(struct parser *p, const yaml_event_t *ev, struct cma_err *reterr)
{
    if (p->depth == 0) /* libyaml balances its events; never trust that blindly */
        return cma_err_set(reterr, CMA_ERR_INTERNAL, "unbalanced YAML events");
    struct frame f = p->frames[--p->depth];
    f.node->end_line = (unsigned)ev->end_mark.line + 1;
    f.node->end_column = (unsigned)ev->end_mark.column + 1;
    if (f.node->kind == CMA_YNODE_MAPPING) {
        enum cma_errc rc = check_duplicates(f.node, reterr);
        if (rc == CMA_OK)
            rc = expand_merge(p, f.node, reterr);
        if (rc)
            return rc;
    }
    if (f.anchor != SIZE_MAX) {
        p->anchors[f.anchor].weight = f.weight;
        p->anchors[f.anchor].complete = true;
    }
    return attach(p, f.node, f.weight, f.node, reterr);
}

static enum cma_errc on_alias(struct parser *p, const yaml_event_t *ev, struct cma_err *reterr)
{
    const char *name = (const char *)ev->data.alias.anchor;
    unsigned line = (unsigned)ev->start_mark.line + 1, column = (unsigned)ev->start_mark.column + 1;
    const struct anchor *a = anchor_find(p, name);
    if (!a)
        return cma_err_set_at(reterr, CMA_ERR_CONFIG_SYNTAX, p->doc->file, line, column,
                              "unknown anchor '%s' referenced", name);
    if (!a->complete)
        return cma_err_set_at(reterr, CMA_ERR_CONFIG_SYNTAX, p->doc->file, line, column,
                              "anchor '%s' value contains itself", name);
    /* The alias is reported at its own position, the node keeps the anchored position. */
    struct cma_ynode at = {.file = p->doc->file, .line = line, .column = column};
    return attach(p, a->node, a->weight, &at, reterr);
}

/* Line and column (1-based, in characters) of a byte offset, for libyaml reader errors. */
static void offset_position(const char *text, size_t len, size_t offset, unsigned *line,
                            unsigned *column)
{
    unsigned l = 1, c = 1;
    if (offset > len)
        offset = len;
    for (size_t i = 0; i < offset; i++) {
        unsigned char ch = (unsigned char)text[i];
        if (ch == '\n') {
            l++;
            c = 1;
        } else if ((ch & 0xC0) != 0x80) {
            c++;
        }
    }
    *line = l;
    *column = c;
}

/* The byte at a 0-based line and character column, or -1 past the end. */
static int byte_at(const char *text, size_t len, size_t line, size_t column)
{
    size_t i = 0;
    for (size_t l = 0; l < line; i++) {
        if (i >= len)
            return -1;
        if (text[i] == '\n')
            l++;
    }
    for (size_t c = 0; c < column && i < len; c++)
        for (i++; i < len && ((unsigned char)text[i] & 0xC0) == 0x80; i++)
            ;
    return i < len ? (unsigned char)text[i] : -1;
}

static enum cma_errc libyaml_error(const yaml_parser_t *yp, const char *file, const char *text,
                                   size_t len, struct cma_err *reterr)
{
    const char *problem = yp->problem ? yp->problem : "unknown YAML error";
    unsigned line, column;
    switch (yp->error) {
    case YAML_MEMORY_ERROR:
        return cma_err_set(reterr, CMA_ERR_NOMEM, "out of memory");
    case YAML_READER_ERROR:
        offset_position(text, len, yp->problem_offset, &line, &column);
        return cma_err_set_at(reterr, CMA_ERR_CONFIG_SYNTAX, file, line, column, "%s", problem);
    default:
        return cma_err_set_at(
            reterr, CMA_ERR_CONFIG_SYNTAX, file, (unsigned)yp->problem_mark.line + 1,
            (unsigned)yp->problem_mark.column + 1, "%s%s", problem,
            byte_at(text, len, yp->problem_mark.line, yp->problem_mark.column) == '\t'
                ? " (a tab: YAML indentation must use spaces)"
                : "");
    }
}

static enum cma_errc on_event(struct parser *p, const yaml_event_t *ev, struct cma_err *reterr)
{
    switch (ev->type) {
    case YAML_DOCUMENT_START_EVENT:
        if (p->n_docs++ > 0) {
            p->in_later_doc = true;
            p->later_doc_line = (unsigned)ev->start_mark.line + 1;
            p->later_doc_column = (unsigned)ev->start_mark.column + 1;
        }
        return CMA_OK;
    case YAML_SCALAR_EVENT:
        return on_scalar(p, ev, reterr);
    case YAML_SEQUENCE_START_EVENT:
        return on_start(p, ev, CMA_YNODE_SEQUENCE, ev->data.sequence_start.anchor, reterr);
    case YAML_MAPPING_START_EVENT:
        return on_start(p, ev, CMA_YNODE_MAPPING, ev->data.mapping_start.anchor, reterr);
    case YAML_SEQUENCE_END_EVENT:
    case YAML_MAPPING_END_EVENT:
        return on_end(p, ev, reterr);
    case YAML_ALIAS_EVENT:
        return on_alias(p, ev, reterr);
    default:
        return CMA_OK;
    }
}

/* True for the events of an empty later document (its start and end, an empty plain scalar),
 * which may follow the first document without being ignored content. */
static bool later_document_event_is_empty(const yaml_event_t *ev)
{
    switch (ev->type) {
    case YAML_DOCUMENT_START_EVENT:
    case YAML_DOCUMENT_END_EVENT:
    case YAML_STREAM_END_EVENT:
        return true;
    case YAML_SCALAR_EVENT:
        return ev->data.scalar.length == 0 && ev->data.scalar.plain_implicit &&
               !ev->data.scalar.anchor && !ev->data.scalar.tag;
    default:
        return false;
    }
}

static void ignore_later_document(struct parser *p)
{
    p->doc->ignored_line = p->later_doc_line;
    p->doc->ignored_column = p->later_doc_column;
}

static void parser_done(struct parser *p)
{
    for (size_t i = 0; i < p->n_anchors; i++)
        free(p->anchors[i].name);
    free(p->anchors);
    cma_htab_done(&p->table);
}

enum cma_errc cma_ydoc_parse(const char *file, const char *text, size_t len, struct cma_ydoc **ret,
                             struct cma_err *reterr)
{
    if (!file)
        file = "";
    if (len > MAX_INPUT_BYTES)
        return cma_err_set_at(reterr, CMA_ERR_TOO_LARGE, file, 0, 0,
                              "config is larger than %zu MiB", MAX_INPUT_BYTES >> 20);
    struct cma_ydoc *doc = calloc(1, sizeof(*doc));
    if (!doc || !(doc->file = cma_strdup(file))) {
        free(doc);
        return cma_err_set(reterr, CMA_ERR_NOMEM, "out of memory");
    }
    yaml_parser_t yp;
    if (!yaml_parser_initialize(&yp)) {
        cma_ydoc_free(doc);
        return cma_err_set(reterr, CMA_ERR_NOMEM, "out of memory");
    }
    yaml_parser_set_input_string(&yp, (const unsigned char *)(text ? text : ""), text ? len : 0);
    struct parser p = {.doc = doc};
    enum cma_errc rc = CMA_OK;
    for (;;) {
        yaml_event_t ev;
        if (!yaml_parser_parse(&yp, &ev)) {
            if (p.in_later_doc)
                ignore_later_document(&p); /* never read: its errors do not count */
            else
                rc = libyaml_error(&yp, doc->file, text, len, reterr);
            break;
        }
        bool stop = p.in_later_doc && !later_document_event_is_empty(&ev);
        if (stop)
            ignore_later_document(&p);
        else if (!p.in_later_doc || ev.type == YAML_DOCUMENT_START_EVENT)
            rc = on_event(&p, &ev, reterr); /* an empty later document adds nothing */
        bool done = ev.type == YAML_STREAM_END_EVENT;
        yaml_event_delete(&ev);
        if (rc || done || stop)
            break;
    }
    yaml_parser_delete(&yp);
    parser_done(&p);
    if (rc) {
        cma_ydoc_free(doc);
        return rc;
    }
    *ret = doc;
    return CMA_OK;
}

enum cma_errc cma_ydoc_load_file(const char *path, struct cma_ydoc **ret, struct cma_err *reterr)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return cma_err_set_at(reterr, CMA_ERR_CONFIG_IO, path, 0, 0, "cannot read config file: %s",
                              strerror(errno));
    char *buf = malloc(MAX_INPUT_BYTES + 1);
    if (!buf) {
        fclose(f);
        return cma_err_set(reterr, CMA_ERR_NOMEM, "out of memory");
    }
    size_t len = fread(buf, 1, MAX_INPUT_BYTES + 1, f);
    int read_errno = ferror(f) ? errno : 0;
    fclose(f);
    enum cma_errc rc;
    if (read_errno)
        rc = cma_err_set_at(reterr, CMA_ERR_CONFIG_IO, path, 0, 0, "cannot read config file: %s",
                            strerror(read_errno ? read_errno : EIO));
    else
        rc = cma_ydoc_parse(path, buf, len, ret, reterr);
    free(buf);
    return rc;
}

const struct cma_ynode *cma_ydoc_root(const struct cma_ydoc *doc)
{
    return doc ? doc->root : NULL;
}

const char *cma_ydoc_file(const struct cma_ydoc *doc)
{
    return doc ? doc->file : NULL;
}

bool cma_ydoc_ignored_document(const struct cma_ydoc *doc, unsigned *line, unsigned *column)
{
    if (!doc || doc->ignored_line == 0)
        return false;
    *line = doc->ignored_line;
    *column = doc->ignored_column;
    return true;
}

const struct cma_ynode *cma_ynode_get(const struct cma_ynode *map, const char *key)
{
    if (!map || map->kind != CMA_YNODE_MAPPING || !key)
        return NULL;
    size_t klen = strlen(key);
    for (size_t i = 0; i < map->n_pairs; i++) {
        const struct cma_ynode *k = map->pairs[i].key;
        if (k->scalar_len == klen && memcmp(k->scalar, key, klen) == 0)
            return map->pairs[i].value;
    }
    return NULL;
}

void cma_ydoc_quote(const char *s, size_t len, char *out, size_t out_len)
{
    static const char hex[] = "0123456789abcdef";
    const size_t max_input = CMA_YDOC_QUOTE_MAX / 4 - 4;
    size_t o = 0;
    if (out_len < CMA_YDOC_QUOTE_MAX) {
        if (out_len)
            out[0] = '\0';
        return;
    }
    bool cut = false;
    if (len > max_input) {
        len = max_input;
        while (len > 0 && ((unsigned char)s[len] & 0xC0) == 0x80)
            len--; /* never split a UTF-8 sequence */
        cut = true;
    }
    out[o++] = '"';
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)s[i];
        const char *esc = NULL;
        switch (c) {
        case '"':
            esc = "\\\"";
            break;
        case '\\':
            esc = "\\\\";
            break;
        case '\n':
            esc = "\\n";
            break;
        case '\r':
            esc = "\\r";
            break;
        case '\t':
            esc = "\\t";
            break;
        default:
            break;
        }
        if (esc) {
            out[o++] = esc[0];
            out[o++] = esc[1];
        } else if (c < 0x20 || c == 0x7f) {
            out[o++] = '\\';
            out[o++] = 'x';
            out[o++] = hex[c >> 4];
            out[o++] = hex[c & 15];
        } else {
            out[o++] = (char)c;
        }
    }
    out[o++] = '"';
    if (cut) {
        memcpy(out + o, "...", 3);
        o += 3;
    }
    out[o] = '\0';
}

bool cma_ynode_as_bool(const struct cma_ynode *scalar, bool *ret)
{
    static const char *const truths[] = {"y",    "Y",    "yes", "Yes", "YES", "true",
                                         "True", "TRUE", "on",  "On",  "ON"};
    static const char *const falsehoods[] = {"n",     "N",     "no",  "No",  "NO", "false",
                                             "False", "FALSE", "off", "Off", "OFF"};
    if (!scalar || scalar->kind != CMA_YNODE_SCALAR || scalar->style != CMA_YSTYLE_PLAIN)
        return false;
    for (size_t i = 0; i < sizeof(truths) / sizeof(truths[0]); i++) {
        if (strcmp(scalar->scalar, truths[i]) == 0) {
            *ret = true;
            return true;
        }
        if (strcmp(scalar->scalar, falsehoods[i]) == 0) {
            *ret = false;
            return true;
        }
    }
    return false;
}
