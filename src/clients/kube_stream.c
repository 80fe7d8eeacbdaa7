/* kube_stream.c: the streaming decoder of kube-apiserver LIST pages (PodList and the like) for
 * the watch caches (yajl 2), fed chunk by chunk from the curl write callback, calling back once
 * per item with what objcache.c packs: name, namespace, labels, status.phase and
 * creationTimestamp, plus the list's resourceVersion and continue token at the end.
 *
 * DESIGN: a page is never held whole, neither as bytes nor as a tree. A real pod is 3.5-4 KB of
 * JSON (managedFields, annotations, ownerReferences, spec, status) of which the cache keeps
 * about a tenth; the tree of a 500-pod page that jansson built was 25 MiB of transient heap,
 * around which the kept packs were allocated (docs/benchmarks.md, "Watch cache memory at real
 * cluster sizes"). Here every value the cache does not keep is skipped by prom_envelope.c's
 * yajl wrapper without a copy; the kept strings of the current item go into one reusable
 * scratch buffer (ceiling 1 MiB) and are handed to the callback as borrowed pointers at the
 * item's end, so what the decoder holds is one item's kept strings, whatever the page size
 * (cma_kube_page_parser_peak says how much; kube_stream_test pins it). The envelope's bounds
 * apply: values nested at most 64 deep, 2 MiB at most without a JSON event. The item rules are
 * kube_decode.c's (cma_kube_parse_list_page), with its messages: metadata.name is required,
 * labels must be an object (or null) of strings, creationTimestamp RFC 3339; keys may come in
 * any order and a repeated key's last value wins (but a key repeated inside labels, which no
 * Go encoder writes, is kept twice: lookups find the first). A parser decodes one page, in one
 * thread. */
#include <stdlib.h>
#include <string.h>

#include "cma/buf.h"
#include "cma/kube.h"
#include "cma/str.h"
#include "internal.h"
#include "prom_envelope.h"

#define BAD_JSON "unexpected JSON from the Kubernetes API: "
#define ITEM_MAX_BYTES ((size_t)1 << 20)
#define ITEM_MAX_LABELS 65535
#define LIST_META_MAX 8192 /* resourceVersion and continue: opaque, short */
#define FRAMES_MAX 8

/* The containers being read (the skipped ones are the envelope's). */
enum frame { F_ROOT, F_LISTMETA, F_ITEMS, F_ITEM, F_META, F_STATUS, F_LABELS };

/* What the next value is, by the key before it. */
enum want {
    W_SKIP,
    W_LISTMETA,
    W_ITEMS,
    W_ITEM,
    W_META,
    W_STATUS,
    W_LABELS,
    W_RV,
    W_CONT,
    W_NAME,
    W_NS,
    W_CREATED,
    W_PHASE,
    W_LABEL
};

/* Offsets into scratch, plus one (0: absent). */
enum field { FD_NAME, FD_NS, FD_CREATED, FD_PHASE, FD_COUNT };

struct label_at {
    size_t key, value;
};

struct cma_kube_page_parser {
    struct cma_prom_envelope env;
    cma_kube_page_fn fn;
    void *ctx;
    enum frame frames[FRAMES_MAX];
    size_t depth;
    bool ended; /* the answer's object closed */
    enum want want;
    size_t index, count;
    char *rv, *cont;
    /* the item being read */
    struct cma_buf scratch;
    size_t field[FD_COUNT];
    struct label_at *labels;
    char **label_names, **label_values;
    size_t n_labels, cap_labels;
    size_t peak; /* most bytes held at once for items */
};

static int fail(struct cma_kube_page_parser *p, enum cma_errc code, const char *msg)
{
    return cma_prom_envelope_fail(&p->env, code, "%s", msg);
}

static int fail_item(struct cma_kube_page_parser *p, const char *what)
{
    return cma_prom_envelope_fail(&p->env, CMA_ERR_KUBE_ERROR, BAD_JSON "items[%zu]%s", p->index,
                                  what);
}

static size_t held(const struct cma_kube_page_parser *p)
{
    return p->scratch.cap + p->cap_labels * (sizeof(*p->labels) + 2 * sizeof(char *));
}

/* Appends s[0..len) and a NUL to the scratch; *ret_at: its offset plus one. */
static int keep(struct cma_kube_page_parser *p, const unsigned char *s, size_t len, size_t *ret_at)
{
    if (memchr(s, '\0', len))
        return fail_item(p, " has a string with a NUL byte");
    size_t at = p->scratch.len;
    enum cma_errc rc = cma_buf_append(&p->scratch, s, len);
    if (rc == CMA_OK)
        rc = cma_buf_appendc(&p->scratch, '\0');
    if (rc == CMA_ERR_NOMEM)
        return fail(p, CMA_ERR_NOMEM, "out of memory");
    if (rc != CMA_OK)
        return cma_prom_envelope_fail(&p->env, CMA_ERR_KUBE_ERROR,
                                      BAD_JSON "items[%zu] keeps over %zu bytes of strings",
                                      p->index, ITEM_MAX_BYTES);
    *ret_at = at + 1;
    if (held(p) > p->peak)
        p->peak = held(p);
    return 1;
}

static int push(struct cma_kube_page_parser *p, enum frame f)
{
    if (p->depth == FRAMES_MAX)
        return fail(p, CMA_ERR_INTERNAL, "LIST page decoder nested too deep");
    p->frames[p->depth++] = f;
    return 1;
}

/* A list-level string (resourceVersion, continue): a bounded copy, the last one wins. */
static int keep_list_meta(struct cma_kube_page_parser *p, char **slot, const unsigned char *s,
                          size_t len)
{
    if (len > LIST_META_MAX || memchr(s, '\0', len))
        return fail(p, CMA_ERR_KUBE_ERROR, BAD_JSON "the list's metadata holds a bad string");
    char *copy = cma_strndup((const char *)s, len);
    if (!copy)
        return fail(p, CMA_ERR_NOMEM, "out of memory");
    free(*slot);
    *slot = copy;
    return 1;
}

/* A string, number, bool or null where the item keeps a field: kept when it is a string,
 * absent otherwise (as json_string_value reads it). */
static int item_field(struct cma_kube_page_parser *p, enum field f, enum cma_json_kind k,
                      const unsigned char *s, size_t len)
{
    p->field[f] = 0;
    if (k == CMA_JSON_STRING)
        return keep(p, s, len, &p->field[f]);
    return cma_prom_envelope_skip(&p->env, k);
}

static int label_value(struct cma_kube_page_parser *p, enum cma_json_kind k, const unsigned char *s,
                       size_t len)
{
    struct label_at *l = &p->labels[p->n_labels - 1];
    if (k != CMA_JSON_STRING)
        return cma_prom_envelope_fail(&p->env, CMA_ERR_KUBE_ERROR,
                                      BAD_JSON "items[%zu].metadata.labels[%.64s] is not a string",
                                      p->index, p->scratch.ptr + l->key - 1);
    return keep(p, s, len, &l->value);
}

/* A value begins where the decoder wants containers. */
static int open_value(struct cma_kube_page_parser *p, enum cma_json_kind k)
{
    switch (p->want) {
    case W_LISTMETA:
        return k == CMA_JSON_MAP ? push(p, F_LISTMETA) : cma_prom_envelope_skip(&p->env, k);
    case W_ITEMS:
        if (k == CMA_JSON_ARRAY)
            return push(p, F_ITEMS);
        return k == CMA_JSON_NULL ? 1 : fail(p, CMA_ERR_KUBE_ERROR, BAD_JSON "items is not a list");
    case W_ITEM:
        if (k != CMA_JSON_MAP)
            return fail_item(p, ".metadata.name is missing");
        cma_buf_clear(&p->scratch);
        memset(p->field, 0, sizeof(p->field));
        p->n_labels = 0;
        return push(p, F_ITEM);
    case W_META:
        return k == CMA_JSON_MAP ? push(p, F_META) : cma_prom_envelope_skip(&p->env, k);
    case W_STATUS:
        return k == CMA_JSON_MAP ? push(p, F_STATUS) : cma_prom_envelope_skip(&p->env, k);
    case W_LABELS:
        p->n_labels = 0; /* a repeated labels key: the last one wins */
        if (k == CMA_JSON_MAP)
            return push(p, F_LABELS);
        return k == CMA_JSON_NULL ? 1 : fail_item(p, ".metadata.labels is not an object");
    default:
        return cma_prom_envelope_skip(&p->env, k);
    }
}

static int on_begin(void *ctx, enum cma_json_kind k, const unsigned char *s, size_t len)
{
    struct cma_kube_page_parser *p = ctx;
    if (p->depth == 0) {
        if (k != CMA_JSON_MAP || p->ended)
            return fail(p, CMA_ERR_KUBE_ERROR, BAD_JSON "the answer is not an object");
        return push(p, F_ROOT);
    }
    if (p->frames[p->depth - 1] == F_ITEMS)
        p->want = W_ITEM;
    switch (p->want) {
    case W_RV:
        return k == CMA_JSON_STRING ? keep_list_meta(p, &p->rv, s, len)
                                    : cma_prom_envelope_skip(&p->env, k);
    case W_CONT:
        return k == CMA_JSON_STRING ? keep_list_meta(p, &p->cont, s, len)
                                    : cma_prom_envelope_skip(&p->env, k);
    case W_NAME:
        return item_field(p, FD_NAME, k, s, len);
    case W_NS:
        return item_field(p, FD_NS, k, s, len);
    case W_CREATED:
        return item_field(p, FD_CREATED, k, s, len);
    case W_PHASE:
        return item_field(p, FD_PHASE, k, s, len);
    case W_LABEL:
        return label_value(p, k, s, len);
    default:
        return open_value(p, k);
    }
}

static bool is(const unsigned char *s, size_t len, const char *word)
{
    return strlen(word) == len && memcmp(s, word, len) == 0;
}

/* A label's key: kept, with room for its value's offset. */
static int label_key(struct cma_kube_page_parser *p, const unsigned char *s, size_t len)
{
    if (p->n_labels == ITEM_MAX_LABELS)
        return fail_item(p, " has too many labels");
    if (p->n_labels == p->cap_labels) {
        size_t want = p->cap_labels ? p->cap_labels * 2 : 8;
        struct label_at *l = realloc(p->labels, want * sizeof(*l));
        if (l)
            p->labels = l;
        char **names = l ? realloc(p->label_names, want * sizeof(*names)) : NULL;
        if (names)
            p->label_names = names;
        char **values = names ? realloc(p->label_values, want * sizeof(*values)) : NULL;
        if (!values)
            return fail(p, CMA_ERR_NOMEM, "out of memory");
        p->label_values = values;
        p->cap_labels = want;
    }
    struct label_at *l = &p->labels[p->n_labels++];
    l->value = 0;
    p->want = W_LABEL;
    return keep(p, s, len, &l->key);
}

/* The keys whose values the decoder reads, by the container they are in; any other: skipped. */
static const struct {
    enum frame in;
    const char *key;
    enum want want;
} KEYS[] = {
    {F_ROOT, "metadata", W_LISTMETA},
    {F_ROOT, "items", W_ITEMS},
    {F_LISTMETA, "resourceVersion", W_RV},
    {F_LISTMETA, "continue", W_CONT},
    {F_ITEM, "metadata", W_META},
    {F_ITEM, "status", W_STATUS},
    {F_META, "name", W_NAME},
    {F_META, "namespace", W_NS},
    {F_META, "creationTimestamp", W_CREATED},
    {F_META, "labels", W_LABELS},
    {F_STATUS, "phase", W_PHASE},
};

static int on_key(void *ctx, const unsigned char *s, size_t len)
{
    struct cma_kube_page_parser *p = ctx;
    enum frame in = p->frames[p->depth - 1];
    if (in == F_LABELS)
        return label_key(p, s, len);
    p->want = W_SKIP;
    for (size_t i = 0; i < sizeof(KEYS) / sizeof(KEYS[0]); i++)
        if (KEYS[i].in == in && is(s, len, KEYS[i].key))
            p->want = KEYS[i].want;
    return 1;
}

static const char *field_str(const struct cma_kube_page_parser *p, enum field f)
{
    return p->field[f] ? p->scratch.ptr + p->field[f] - 1 : NULL;
}

/* The item's end: its object (strings borrowed from the scratch) goes to the callback. */
static int emit(struct cma_kube_page_parser *p)
{
    const char *name = field_str(p, FD_NAME), *ns = field_str(p, FD_NS);
    const char *created = field_str(p, FD_CREATED);
    if (!name)
        return fail_item(p, ".metadata.name is missing");
    struct cma_kube_object o = {.name = (char *)name,
                                .namespace_ = ns && ns[0] ? (char *)ns : NULL,
                                .phase = (char *)field_str(p, FD_PHASE),
                                .label_names = p->label_names,
                                .label_values = p->label_values,
                                .n_labels = p->n_labels};
    if (created && !cma_kube_parse_time(created, &o.creation_ms))
        return cma_prom_envelope_fail(
            &p->env, CMA_ERR_KUBE_ERROR,
            BAD_JSON "items[%zu].metadata.creationTimestamp \"%.40s\" is not RFC 3339", p->index,
            created);
    for (size_t i = 0; i < p->n_labels; i++) {
        p->label_names[i] = p->scratch.ptr + p->labels[i].key - 1;
        p->label_values[i] = p->scratch.ptr + p->labels[i].value - 1;
    }
    struct cma_err err;
    cma_err_clear(&err);
    enum cma_errc rc = p->fn(p->ctx, &o, 1, &err);
    if (rc != CMA_OK)
        return cma_prom_envelope_fail(&p->env, rc, "%s", err.msg);
    p->count++;
    return 1;
}

static int on_end(void *ctx, bool map)
{
    (void)map;
    struct cma_kube_page_parser *p = ctx;
    enum frame f = p->frames[--p->depth];
    p->want = W_SKIP;
    if (f == F_ITEM) {
        int ok = emit(p);
        p->index++;
        return ok;
    }
    if (f == F_ROOT)
        p->ended = true;
    return 1;
}

static const struct cma_prom_events events = {on_begin, on_key, on_end};

enum cma_errc cma_kube_page_parser_new(cma_kube_page_fn fn, void *ctx,
                                       struct cma_kube_page_parser **ret)
{
    struct cma_kube_page_parser *p = calloc(1, sizeof(*p));
    if (!p)
        return CMA_ERR_NOMEM;
    p->fn = fn;
    p->ctx = ctx;
    cma_buf_init(&p->scratch, ITEM_MAX_BYTES);
    if (cma_prom_envelope_init(&p->env, &events, p, "LIST page decoder", BAD_JSON) != CMA_OK) {
        free(p);
        return CMA_ERR_NOMEM;
    }
    *ret = p;
    return CMA_OK;
}

void cma_kube_page_parser_free(struct cma_kube_page_parser *p)
{
    if (!p)
        return;
    cma_prom_envelope_done(&p->env);
    cma_buf_done(&p->scratch);
    free(p->labels);
    free(p->label_names);
    free(p->label_values);
    free(p->rv);
    free(p->cont);
    free(p);
}

/* The envelope's JSON failures are the Kubernetes API's here. */
static enum cma_errc kube_code(enum cma_errc rc, struct cma_err *reterr)
{
    if (rc != CMA_ERR_BACKEND_RESPONSE)
        return rc;
    if (reterr)
        reterr->code = CMA_ERR_KUBE_ERROR;
    return CMA_ERR_KUBE_ERROR;
}

enum cma_errc cma_kube_page_parser_feed(struct cma_kube_page_parser *p, const char *data,
                                        size_t len, struct cma_err *reterr)
{
    return kube_code(cma_prom_envelope_feed(&p->env, data, len, reterr), reterr);
}

enum cma_errc cma_kube_page_parser_finish(struct cma_kube_page_parser *p, char **ret_rv,
                                          char **ret_continue, struct cma_err *reterr)
{
    *ret_continue = NULL;
    if (ret_rv)
        *ret_rv = NULL;
    enum cma_errc rc = kube_code(cma_prom_envelope_complete(&p->env, reterr), reterr);
    if (rc != CMA_OK)
        return rc;
    if (p->cont && p->cont[0]) {
        *ret_continue = p->cont;
        p->cont = NULL;
    }
    if (ret_rv && p->rv && p->rv[0]) {
        *ret_rv = p->rv;
        p->rv = NULL;
    }
    return CMA_OK;
}

size_t cma_kube_page_parser_count(const struct cma_kube_page_parser *p)
{
    return p ? p->count : 0;
}

size_t cma_kube_page_parser_peak(const struct cma_kube_page_parser *p)
{
    return p ? p->peak : 0;
}
