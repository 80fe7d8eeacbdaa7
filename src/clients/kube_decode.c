/* kube_decode.c: the pure decoders of kube-apiserver answers, apart from the requests that fetch
 * them (kube.c): discovery documents (APIVersions, APIGroupList, APIResourceList), LIST pages
 * (names, objects with labels, phase and creation time, the list's resourceVersion and continue
 * token), metav1.Status messages, RFC 3339 times as metav1.Time reads them, and the framing of a
 * watch stream into event lines. Nothing here does I/O, logs or keeps state: every function
 * works on the bytes it is given (unit-tested with recorded bodies, tests/unit/kube_decode_test.c).
 *
 * DESIGN: jansson parses a whole page (LIST pages are bounded by limit=500 and kube.c's body
 * ceiling); watch lines are framed as they stream, never gathered into one body. On failure a
 * decoder leaves what the caller already had (earlier pages, earlier resources) as it was. */
#include <jansson.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cma/kube.h"
#include "cma/str.h"
#include "internal.h"

#define BAD_JSON "unexpected JSON from the Kubernetes API: "

/* ---- JSON documents ---------------------------------------------------------------------- */

static json_t *load_json(const char *body, size_t len, struct cma_err *reterr)
{
    json_error_t jerr;
    json_t *root = json_loadb(body ? body : "", body ? len : 0, 0, &jerr);
    if (!root) {
        cma_err_set(reterr, CMA_ERR_KUBE_ERROR, BAD_JSON "%s at line %d column %d", jerr.text,
                    jerr.line, jerr.column);
        return NULL;
    }
    if (!json_is_object(root)) {
        json_decref(root);
        cma_err_set(reterr, CMA_ERR_KUBE_ERROR, BAD_JSON "the answer is not an object");
        return NULL;
    }
    return root;
}

void cma_kube_status_message(const char *body, size_t len, char *out, size_t out_len)
{
    if (out_len == 0)
        return;
    out[0] = '\0';
    json_error_t jerr;
    json_t *root = body && len ? json_loadb(body, len, 0, &jerr) : NULL;
    const char *msg = json_string_value(json_object_get(root, "message"));
    if (msg)
        cma_clients_snippet(msg, strlen(msg), out_len - 1, out, out_len);
    else
        cma_clients_excerpt(body, len, 200, out, out_len);
    json_decref(root);
}

enum cma_errc cma_kube_parse_api_versions(const char *body, size_t len, char **ret,
                                          struct cma_err *reterr)
{
    json_t *root = load_json(body, len, reterr);
    if (!root)
        return CMA_ERR_KUBE_ERROR;
    const json_t *versions = json_object_get(root, "versions");
    const char *pick = NULL;
    size_t i;
    const json_t *v;
    json_array_foreach(versions, i, v)
    {
        const char *s = json_string_value(v);
        if (!s || !s[0]) {
            pick = NULL;
            break;
        }
        if (!pick || strcmp(s, "v1") == 0)
            pick = s;
    }
    enum cma_errc rc = CMA_OK;
    if (!pick)
        rc = cma_err_set(reterr, CMA_ERR_KUBE_ERROR,
                         BAD_JSON "/api versions is not a non-empty list of names");
    else if (!(*ret = cma_strdup(pick)))
        rc = cma_err_set(reterr, CMA_ERR_NOMEM, "out of memory");
    json_decref(root);
    return rc;
}

void cma_kube_groups_free(struct cma_kube_group *groups, size_t n)
{
    if (!groups)
        return;
    for (size_t i = 0; i < n; i++) {
        free(groups[i].name);
        free(groups[i].version);
    }
    free(groups);
}

enum cma_errc cma_kube_parse_group_list(const char *body, size_t len, struct cma_kube_group **ret,
                                        size_t *ret_n, struct cma_err *reterr)
{
    json_t *root = load_json(body, len, reterr);
    if (!root)
        return CMA_ERR_KUBE_ERROR;
    const json_t *groups = json_object_get(root, "groups");
    if (!json_is_array(groups)) {
        json_decref(root);
        return cma_err_set(reterr, CMA_ERR_KUBE_ERROR, BAD_JSON "/apis groups is not a list");
    }
    size_t n = json_array_size(groups);
    struct cma_kube_group *out = calloc(n ? n : 1, sizeof(*out));
    if (!out) {
        json_decref(root);
        return cma_err_set(reterr, CMA_ERR_NOMEM, "out of memory");
    }
    size_t k = 0;
    enum cma_errc rc = CMA_OK;
    for (size_t i = 0; i < n && rc == CMA_OK; i++) {
        const json_t *g = json_array_get(groups, i);
        const char *name = json_string_value(json_object_get(g, "name"));
        if (!name || !name[0]) {
            rc = cma_err_set(reterr, CMA_ERR_KUBE_ERROR, BAD_JSON "/apis groups[%zu] has no name",
                             i);
            break;
        }
        const json_t *pref = json_object_get(g, "preferredVersion");
        const char *version = json_string_value(json_object_get(pref, "version"));
        if (!version || !version[0])
            version = json_string_value(
                json_object_get(json_array_get(json_object_get(g, "versions"), 0), "version"));
        if (!version || !version[0])
            continue;
        out[k].name = cma_strdup(name);
        out[k].version = cma_strdup(version);
        k++;
        if (!out[k - 1].name || !out[k - 1].version)
            rc = cma_err_set(reterr, CMA_ERR_NOMEM, "out of memory");
    }
    json_decref(root);
    if (rc != CMA_OK) {
        cma_kube_groups_free(out, k);
        return rc;
    }
    *ret = out;
    *ret_n = k;
    return CMA_OK;
}

static char *lower_dup(const char *s)
{
    char *out = cma_strdup(s);
    for (char *p = out; p && *p; p++)
        if (*p >= 'A' && *p <= 'Z')
            *p = (char)(*p - 'A' + 'a');
    return out;
}

static enum cma_errc fill_resource(const json_t *item, size_t index, const char *group,
                                   const char *version, struct cma_api_resource *r,
                                   struct cma_err *reterr)
{
    const char *name = json_string_value(json_object_get(item, "name"));
    const char *kind = json_string_value(json_object_get(item, "kind"));
    const char *singular = json_string_value(json_object_get(item, "singularName"));
    const json_t *namespaced = json_object_get(item, "namespaced");
    if (!name || !name[0] || !kind || !kind[0] || (namespaced && !json_is_boolean(namespaced)))
        return cma_err_set(reterr, CMA_ERR_KUBE_ERROR,
                           BAD_JSON "resources[%zu] of %s%s%s lacks name, kind or namespaced",
                           index, group, group[0] ? "/" : "", version);
    r->namespaced = json_is_true(namespaced);
    r->group = cma_strdup(group);
    r->version = cma_strdup(version);
    r->resource = cma_strdup(name);
    r->kind = cma_strdup(kind);
    r->singular = singular && singular[0] ? cma_strdup(singular) : lower_dup(kind);
    if (!r->group || !r->version || !r->resource || !r->kind || !r->singular)
        return cma_err_set(reterr, CMA_ERR_NOMEM, "out of memory");
    const json_t *shorts = json_object_get(item, "shortNames");
    size_t ns = json_array_size(shorts);
    if (ns == 0)
        return CMA_OK;
    r->short_names = calloc(ns, sizeof(*r->short_names));
    if (!r->short_names)
        return cma_err_set(reterr, CMA_ERR_NOMEM, "out of memory");
    for (size_t j = 0; j < ns; j++) {
        const char *s = json_string_value(json_array_get(shorts, j));
        if (!s)
            return cma_err_set(reterr, CMA_ERR_KUBE_ERROR,
                               BAD_JSON "resources[%zu].shortNames[%zu] is not a string", index, j);
        if (!(r->short_names[r->n_short_names] = cma_strdup(s)))
            return cma_err_set(reterr, CMA_ERR_NOMEM, "out of memory");
        r->n_short_names++;
    }
    return CMA_OK;
}

enum cma_errc cma_kube_parse_resource_list(const char *body, size_t len, const char *group,
                                           const char *version, struct cma_api_resources *into,
                                           struct cma_err *reterr)
{
    json_t *root = load_json(body, len, reterr);
    if (!root)
        return CMA_ERR_KUBE_ERROR;
    const json_t *resources = json_object_get(root, "resources");
    if (!json_is_array(resources) && !json_is_null(resources)) {
        json_decref(root);
        return cma_err_set(reterr, CMA_ERR_KUBE_ERROR, BAD_JSON "resources of %s%s%s is not a list",
                           group, group[0] ? "/" : "", version);
    }
    size_t n = json_array_size(resources);
    struct cma_api_resource *items = realloc(into->items, (into->n + n + 1) * sizeof(*into->items));
    if (!items) {
        json_decref(root);
        return cma_err_set(reterr, CMA_ERR_NOMEM, "out of memory");
    }
    into->items = items;
    size_t added = 0;
    enum cma_errc rc = CMA_OK;
    for (size_t i = 0; i < n && rc == CMA_OK; i++) {
        const json_t *item = json_array_get(resources, i);
        const char *name = json_string_value(json_object_get(item, "name"));
        if (name && strchr(name, '/'))
            continue; /* subresource */
        struct cma_api_resource *r = &items[into->n + added];
        memset(r, 0, sizeof(*r));
        added++;
        rc = fill_resource(item, i, group, version, r, reterr);
    }
    json_decref(root);
    if (rc != CMA_OK) {
        for (size_t i = 0; i < added; i++)
            cma_api_resource_done(&items[into->n + i]);
        return rc;
    }
    into->n += added;
    return CMA_OK;
}

/* The items of a LIST page (NULL when absent or null) and its metadata; NULL root on error. */
static json_t *load_page(const char *body, size_t len, const json_t **items, struct cma_err *reterr)
{
    json_t *root = load_json(body, len, reterr);
    if (!root)
        return NULL;
    *items = json_object_get(root, "items");
    if (*items && !json_is_array(*items) && !json_is_null(*items)) {
        json_decref(root);
        cma_err_set(reterr, CMA_ERR_KUBE_ERROR, BAD_JSON "items is not a list");
        return NULL;
    }
    return root;
}

/* Room for `more` elements of `size` bytes after *n in *arr (capacity *cap, doubling). */
static enum cma_errc grow(void **arr, size_t size, size_t n, size_t more, size_t *cap,
                          struct cma_err *reterr)
{
    if (n + more <= *cap)
        return CMA_OK;
    size_t want = *cap ? *cap : 16;
    while (want < n + more)
        want *= 2;
    void *grown = realloc(*arr, want * size);
    if (!grown)
        return cma_err_set(reterr, CMA_ERR_NOMEM, "out of memory");
    *arr = grown;
    *cap = want;
    return CMA_OK;
}

/* metadata.<key> of a page as a new string in *ret (NULL when absent or ""). */
static enum cma_errc page_meta(const json_t *root, const char *key, char **ret,
                               struct cma_err *reterr)
{
    const char *v = json_string_value(json_object_get(json_object_get(root, "metadata"), key));
    if (v && v[0] && !(*ret = cma_strdup(v)))
        return cma_err_set(reterr, CMA_ERR_NOMEM, "out of memory");
    return CMA_OK;
}

static enum cma_errc append_names(const json_t *items, char **names, size_t *n,
                                  struct cma_err *reterr)
{
    for (size_t i = 0; i < json_array_size(items); i++) {
        const json_t *meta = json_object_get(json_array_get(items, i), "metadata");
        const char *name = json_string_value(json_object_get(meta, "name"));
        if (!name)
            return cma_err_set(reterr, CMA_ERR_KUBE_ERROR,
                               BAD_JSON "items[%zu].metadata.name is missing", i);
        if (!(names[*n] = cma_strdup(name)))
            return cma_err_set(reterr, CMA_ERR_NOMEM, "out of memory");
        (*n)++;
    }
    return CMA_OK;
}

enum cma_errc cma_kube_parse_name_page(const char *body, size_t len, char ***names, size_t *n,
                                       size_t *cap, char **ret_continue, struct cma_err *reterr)
{
    *ret_continue = NULL;
    const json_t *items = NULL;
    json_t *root = load_page(body, len, &items, reterr);
    if (!root)
        return CMA_ERR_KUBE_ERROR;
    size_t start = *n;
    enum cma_errc rc =
        grow((void **)names, sizeof(**names), *n, json_array_size(items), cap, reterr);
    if (rc == CMA_OK)
        rc = append_names(items, *names, n, reterr);
    if (rc == CMA_OK)
        rc = page_meta(root, "continue", ret_continue, reterr);
    json_decref(root);
    if (rc != CMA_OK) {
        for (size_t i = start; i < *n; i++)
            free((*names)[i]);
        *n = start;
    }
    return rc;
}

/* ---- LIST pages of objects ---------------------------------------------------------------- */

static void object_done(struct cma_kube_object *o)
{
    free(o->name);
    free(o->namespace_);
    for (size_t l = 0; l < o->n_labels; l++) {
        free(o->label_names[l]);
        free(o->label_values[l]);
    }
    free(o->label_names);
    free(o->label_values);
    free(o->phase);
}

void cma_kube_objects_free(struct cma_kube_object *objs, size_t n)
{
    if (!objs)
        return;
    for (size_t i = 0; i < n; i++)
        object_done(&objs[i]);
    free(objs);
}

static bool digits(const char *s, int n, int *ret)
{
    int v = 0;
    for (int i = 0; i < n; i++) {
        if (s[i] < '0' || s[i] > '9')
            return false;
        v = v * 10 + (s[i] - '0');
    }
    *ret = v;
    return true;
}

bool cma_kube_parse_time(const char *s, int64_t *ret_ms)
{
    /* RFC 3339 as metav1.Time unmarshals it: YYYY-MM-DDTHH:MM:SS[.frac](Z|±HH:MM) */
    int year, mon, day, hour, min, sec;
    if (!s || strlen(s) < 20 || !digits(s, 4, &year) || s[4] != '-' || !digits(s + 5, 2, &mon) ||
        s[7] != '-' || !digits(s + 8, 2, &day) || (s[10] != 'T' && s[10] != 't') ||
        !digits(s + 11, 2, &hour) || s[13] != ':' || !digits(s + 14, 2, &min) || s[16] != ':' ||
        !digits(s + 17, 2, &sec))
        return false;
    if (mon < 1 || mon > 12 || day < 1 || day > 31 || hour > 23 || min > 59 || sec > 60)
        return false;
    const char *p = s + 19;
    int64_t frac_ms = 0;
    if (*p == '.') {
        int scale = 100, n = 0;
        for (p++; *p >= '0' && *p <= '9'; p++, n++) {
            frac_ms += (*p - '0') * scale;
            scale /= 10;
        }
        if (n == 0)
            return false;
    }
    int64_t offset_s = 0;
    if (*p == 'Z' || *p == 'z') {
        p++;
    } else if (*p == '+' || *p == '-') {
        int oh, om;
        if (!digits(p + 1, 2, &oh) || p[3] != ':' || !digits(p + 4, 2, &om) || oh > 23 || om > 59)
            return false;
        offset_s = (int64_t)(oh * 3600 + om * 60) * (*p == '-' ? -1 : 1);
        p += 6;
    } else {
        return false;
    }
    if (*p)
        return false;
    struct tm tm = {.tm_year = year - 1900,
                    .tm_mon = mon - 1,
                    .tm_mday = day,
                    .tm_hour = hour,
                    .tm_min = min,
                    .tm_sec = sec};
    time_t t = timegm(&tm);
    *ret_ms = ((int64_t)t - offset_s) * 1000 + frac_ms;
    return true;
}

/* Fills o from one list item (metadata.name required; the rest optional). */
static enum cma_errc fill_object(const json_t *item, size_t index, struct cma_kube_object *o,
                                 struct cma_err *reterr)
{
    const json_t *meta = json_object_get(item, "metadata");
    const char *name = json_string_value(json_object_get(meta, "name"));
    if (!name)
        return cma_err_set(reterr, CMA_ERR_KUBE_ERROR,
                           BAD_JSON "items[%zu].metadata.name is missing", index);
    const char *ns = json_string_value(json_object_get(meta, "namespace"));
    const char *phase =
        json_string_value(json_object_get(json_object_get(item, "status"), "phase"));
    const char *created = json_string_value(json_object_get(meta, "creationTimestamp"));
    const json_t *labels = json_object_get(meta, "labels");
    if (!(o->name = cma_strdup(name)) || (ns && ns[0] && !(o->namespace_ = cma_strdup(ns))) ||
        (phase && !(o->phase = cma_strdup(phase))))
        return cma_err_set(reterr, CMA_ERR_NOMEM, "out of memory");
    if (created && !cma_kube_parse_time(created, &o->creation_ms))
        return cma_err_set(reterr, CMA_ERR_KUBE_ERROR,
                           BAD_JSON
                           "items[%zu].metadata.creationTimestamp \"%.40s\" is not RFC 3339",
                           index, created);
    if (labels && !json_is_object(labels) && !json_is_null(labels))
        return cma_err_set(reterr, CMA_ERR_KUBE_ERROR,
                           BAD_JSON "items[%zu].metadata.labels is not an object", index);
    size_t n_labels = json_object_size(labels);
    if (n_labels) {
        o->label_names = calloc(n_labels, sizeof(*o->label_names));
        o->label_values = calloc(n_labels, sizeof(*o->label_values));
        if (!o->label_names || !o->label_values)
            return cma_err_set(reterr, CMA_ERR_NOMEM, "out of memory");
        const char *key;
        const json_t *value;
        json_object_foreach((json_t *)labels, key, value)
        {
            const char *v = json_string_value(value);
            if (!v)
                return cma_err_set(reterr, CMA_ERR_KUBE_ERROR,
                                   BAD_JSON "items[%zu].metadata.labels[%s] is not a string", index,
                                   key);
            size_t l = o->n_labels;
            o->label_names[l] = cma_strdup(key);
            o->label_values[l] = cma_strdup(v);
            if (o->label_names[l] || o->label_values[l])
                o->n_labels++; /* counted as soon as one is owned, so the free path sees it */
            if (!o->label_names[l] || !o->label_values[l])
                return cma_err_set(reterr, CMA_ERR_NOMEM, "out of memory");
        }
    }
    return CMA_OK;
}

enum cma_errc cma_kube_parse_list_page(const char *body, size_t len, struct cma_kube_object **objs,
                                       size_t *n, size_t *cap, char **ret_rv, char **ret_continue,
                                       struct cma_err *reterr)
{
    *ret_continue = NULL;
    if (ret_rv)
        *ret_rv = NULL;
    const json_t *items = NULL;
    json_t *root = load_page(body, len, &items, reterr);
    if (!root)
        return CMA_ERR_KUBE_ERROR;
    size_t count = json_array_size(items), start = *n;
    enum cma_errc rc = grow((void **)objs, sizeof(**objs), *n, count, cap, reterr);
    for (size_t i = 0; i < count && rc == CMA_OK; i++) {
        struct cma_kube_object *o = &(*objs)[*n];
        memset(o, 0, sizeof(*o));
        (*n)++; /* owned from here on: freed below on failure */
        rc = fill_object(json_array_get(items, i), i, o, reterr);
    }
    if (rc == CMA_OK)
        rc = page_meta(root, "continue", ret_continue, reterr);
    if (rc == CMA_OK && ret_rv)
        rc = page_meta(root, "resourceVersion", ret_rv, reterr);
    json_decref(root);
    if (rc != CMA_OK) {
        /* free the items of this page only; earlier pages stay */
        for (size_t i = start; i < *n; i++)
            object_done(&(*objs)[i]);
        *n = start;
        free(*ret_continue);
        *ret_continue = NULL;
    }
    return rc;
}

enum cma_errc cma_kube_parse_object_page(const char *body, size_t len,
                                         struct cma_kube_object **objs, size_t *n, size_t *cap,
                                         char **ret_continue, struct cma_err *reterr)
{
    return cma_kube_parse_list_page(body, len, objs, n, cap, NULL, ret_continue, reterr);
}

/* ---- watch streams ----------------------------------------------------------------------- */

void cma_kube_lines_init(struct cma_kube_lines *l, size_t max_line)
{
    cma_buf_init(&l->partial, max_line);
}

void cma_kube_lines_done(struct cma_kube_lines *l)
{
    cma_buf_done(&l->partial);
}

/* One complete line: trailing CR and blanks go; an empty line is skipped. */
static enum cma_errc hand_over(const char *line, size_t len, cma_kube_line_fn fn, void *ctx,
                               struct cma_err *reterr)
{
    while (len && (line[len - 1] == '\r' || line[len - 1] == ' '))
        len--;
    return len ? fn(ctx, line, len, reterr) : CMA_OK;
}

static enum cma_errc line_too_long(const struct cma_kube_lines *l, struct cma_err *reterr)
{
    return cma_err_set(reterr, CMA_ERR_KUBE_ERROR, "a watch event is over %zu bytes",
                       l->partial.max);
}

enum cma_errc cma_kube_lines_feed(struct cma_kube_lines *l, const char *data, size_t len,
                                  cma_kube_line_fn fn, void *ctx, struct cma_err *reterr)
{
    size_t start = 0;
    for (const char *nl; start < len && (nl = memchr(data + start, '\n', len - start));) {
        const char *line = data + start;
        size_t line_len = (size_t)(nl - line);
        if (l->partial.len) {
            if (cma_buf_append(&l->partial, line, line_len) != CMA_OK)
                return line_too_long(l, reterr);
            line = l->partial.ptr;
            line_len = l->partial.len;
        }
        enum cma_errc rc = hand_over(line, line_len, fn, ctx, reterr);
        cma_buf_clear(&l->partial);
        if (rc != CMA_OK)
            return rc;
        start = (size_t)(nl - data) + 1;
    }
    if (start < len && cma_buf_append(&l->partial, data + start, len - start) != CMA_OK)
        return line_too_long(l, reterr);
    return CMA_OK;
}

enum cma_errc cma_kube_lines_finish(struct cma_kube_lines *l, cma_kube_line_fn fn, void *ctx,
                                    struct cma_err *reterr)
{
    if (!l->partial.len)
        return CMA_OK;
    enum cma_errc rc = hand_over(l->partial.ptr, l->partial.len, fn, ctx, reterr);
    cma_buf_clear(&l->partial);
    return rc;
}
