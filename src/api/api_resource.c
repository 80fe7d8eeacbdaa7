/* api_resource.c: metrics.k8s.io v1beta1 from resourceRules: PodMetrics (list in one namespace
 * or all namespaces, get one) and NodeMetrics (list, get one), with labelSelector and
 * fieldSelector (metadata.name, metadata.namespace). A short recipe: objects from the Kubernetes
 * API (Running pods, or nodes) → one PromQL query per resource (cpu, then memory) → samples keyed
 * by namespace/pod/container or node → PodMetrics/NodeMetrics JSON.
 *
 * DESIGN
 * - One backend query per resource per request, whatever the number of namespaces (upstream runs
 *   two per namespace): the namespace label is added to the query's GroupBy (next to the
 *   containerLabel), so pods of the same name in two namespaces never sum together, and samples
 *   are keyed by (namespace, pod). The cpu and memory queries run one after the other on the
 *   request's thread: simple, and the two together still cost one round trip each.
 * - Pods come from a LIST of PartialObjectMetadata with fieldSelector status.phase=Running plus
 *   the user's fieldSelector (the user's terms are also checked here, and nodes, whose field
 *   selector support differs, are filtered here only). Labels are the objects' own;
 *   creationTimestamp is the time of the answer, as metrics-server does.
 * - Assembly follows prometheus-adapter (reference section 6.5, trap 25): a pod needs at least
 *   one cpu and one memory sample, else it is left out (a GET of it is 404); a container with
 *   only one of them gets 0 for the other; a node needs both. NaN, ±Inf, negative and
 *   unrepresentable values become 0, as metrics-server and prometheus-adapter do: usage cannot be
 *   negative, and the HPA must see a number for every pod it averages. When a query returns more
 *   than one sample for a container or a node (its template does not aggregate by GroupBy), the
 *   sample whose label set sorts first is used, so the answer does not depend on the backend's
 *   result order (upstream takes whichever comes first for nodes, last for containers), and a
 *   warning says so. timestamp = the earliest timestamp of the samples used; window =
 *   resourceRules.window.
 * - Lists are sorted by namespace then name (pods) or name (nodes); containers by name.
 * - Each answer is decoded as a stream that keeps only the samples of listed objects (the same
 *   test collect() applies), so a containerQuery that returns every pod of the cluster for a
 *   request about one namespace costs memory only for that namespace's pods. That is also what
 *   makes the wide query safe: when the listed names would make the PromQL longer than the
 *   backend's limit (resourceRules' backend, cma_query_build_bounded), it goes without them.
 * - maxSampleAge is not a resourceRules key (config.c says why): containerQuery and nodeQuery
 *   have no .Series whose raw samples would tell the data's age.
 * - Errors are Status JSON with the code of the cause: a backend failure fails the request
 *   (upstream answers 200 with the namespaces that worked, which an HPA cannot tell from "no
 *   pods").
 * - Memory: the selectors, the listed objects, name arrays, PromQL, the answers and the items
 *   live in the request arena; nothing here is freed by hand. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api_internal.h"
#include "explain_trace.h"
#include "cma/arena.h"
#include "cma/buf.h"
#include "cma/catalog.h"
#include "cma/clock.h"
#include "cma/discovery.h"
#include "cma/encode.h"
#include "cma/kube.h"
#include "cma/log.h"
#include "cma/backend.h"
#include "cma/prom.h"
#include "cma/quantity.h"
#include "cma/query.h"
#include "cma/restmapper.h"
#include "cma/router.h"
#include "cma/rule.h"
#include "cma/selector.h"
#include "cma/server.h"

#define FIELD_NAME "metadata.name"
#define FIELD_NAMESPACE "metadata.namespace"

/* ---- fieldSelector (k8s.io/apimachinery/pkg/fields, restricted to metadata fields) ---- */

enum field_kind { FIELD_KIND_NAME, FIELD_KIND_NAMESPACE };

struct field_term {
    enum field_kind field;
    bool equal;  /* =, == (true) or != (false) */
    char *value; /* unescaped */
};

struct field_sel {
    struct field_term *terms;
    size_t n;
};

/* fields.UnescapeValue: \\ \, \= are the escapes; any other escape, a trailing backslash
 * or an unescaped '=' (or ',') is an error, with apimachinery's texts. */
static enum cma_errc unescape_value(struct cma_arena *arena, const char *s, size_t len, char **ret,
                                    struct cma_err *err)
{
    char *out = cma_api_array(arena, len + 1, 1, err);
    if (!out)
        return cma_api_arena_rc(arena);
    size_t n = 0;
    for (size_t i = 0; i < len; i++) {
        if (s[i] == '=' || s[i] == ',') { /* Go prints the rune with %v: its code point */
            return cma_err_set(err, CMA_ERR_BAD_SELECTOR,
                               "invalid field selector: unescaped character in value: %d",
                               (int)(unsigned char)s[i]);
        }
        if (s[i] != '\\') {
            out[n++] = s[i];
            continue;
        }
        if (i + 1 == len || (s[i + 1] != '\\' && s[i + 1] != ',' && s[i + 1] != '=')) {
            int seq_len = i + 1 == len ? 1 : 2;
            return cma_err_set(err, CMA_ERR_BAD_SELECTOR,
                               "invalid field selector: invalid escape sequence: %.*s", seq_len,
                               s + i);
        }
        out[n++] = s[++i];
    }
    out[n] = '\0';
    *ret = out;
    return CMA_OK;
}

/* Parses one term "field<op>value" (Go splitTerm: the first `!=`, `==` or `=` splits). */
static enum cma_errc parse_term(struct cma_arena *arena, const char *text, const char *term,
                                size_t len, struct field_term *ret, struct cma_err *err)
{
    size_t i = 0, op_len = 0;
    bool equal = true;
    for (; i < len; i++) {
        if (i + 1 < len && term[i] == '!' && term[i + 1] == '=') {
            op_len = 2;
            equal = false;
        } else if (i + 1 < len && term[i] == '=' && term[i + 1] == '=') {
            op_len = 2;
        } else if (term[i] == '=') {
            op_len = 1;
        }
        if (op_len)
            break;
    }
    if (!op_len)
        return cma_err_set(err, CMA_ERR_BAD_SELECTOR,
                           "invalid selector: '%s'; can't understand '%.*s'", text, (int)len, term);
    if (i == strlen(FIELD_NAME) && memcmp(term, FIELD_NAME, i) == 0)
        ret->field = FIELD_KIND_NAME;
    else if (i == strlen(FIELD_NAMESPACE) && memcmp(term, FIELD_NAMESPACE, i) == 0)
        ret->field = FIELD_KIND_NAMESPACE;
    else /* the text of apimachinery's DefaultMetaV1FieldSelectorConversion */
        return cma_err_set(err, CMA_ERR_BAD_SELECTOR,
                           "\"%.*s\" is not a known field selector: only \"" FIELD_NAME
                           "\", \"" FIELD_NAMESPACE "\"",
                           (int)i, term);
    ret->equal = equal;
    return unescape_value(arena, term + i + op_len, len - i - op_len, &ret->value, err);
}

/* fields.ParseSelector: terms split on unescaped commas; empty terms are skipped. */
static enum cma_errc field_sel_parse(struct cma_arena *arena, const char *text,
                                     struct field_sel *ret, struct cma_err *err)
{
    size_t len = strlen(text);
    /* a term takes >= 2 bytes */
    ret->terms = cma_api_array(arena, len / 2 + 1, sizeof(*ret->terms), err);
    if (!ret->terms)
        return cma_api_arena_rc(arena);
    size_t start = 0;
    for (size_t i = 0; i <= len; i++) {
        if (i < len && text[i] == '\\' && i + 1 < len) {
            i++;
            continue;
        }
        if (i < len && text[i] != ',')
            continue;
        if (i > start) {
            enum cma_errc rc =
                parse_term(arena, text, text + start, i - start, &ret->terms[ret->n], err);
            if (rc != CMA_OK)
                return rc;
            ret->n++;
        }
        start = i + 1;
    }
    return CMA_OK;
}

/* RequiresExactMatch(field): the value of the first `=` term on field, NULL when none. */
static const char *field_sel_exact(const struct field_sel *fs, enum field_kind field)
{
    for (size_t i = 0; i < fs->n; i++)
        if (fs->terms[i].field == field && fs->terms[i].equal)
            return fs->terms[i].value;
    return NULL;
}

static bool field_sel_matches(const struct field_sel *fs, const char *name, const char *ns)
{
    for (size_t i = 0; i < fs->n; i++) {
        const struct field_term *t = &fs->terms[i];
        const char *have = t->field == FIELD_KIND_NAME ? name : (ns ? ns : "");
        if ((strcmp(have, t->value) == 0) != t->equal)
            return false;
    }
    return true;
}

/* fields.EscapeValue */
static enum cma_errc append_escaped(struct cma_buf *out, const char *v)
{
    enum cma_errc rc = CMA_OK;
    for (; v && *v && rc == CMA_OK; v++) {
        if (*v == '\\' || *v == ',' || *v == '=')
            rc = cma_buf_appendc(out, '\\');
        if (rc == CMA_OK)
            rc = cma_buf_appendc(out, *v);
    }
    return rc;
}

/* Appends ",field=value" terms (the leading comma only when out is not empty). */
static enum cma_errc field_sel_format(const struct field_sel *fs, struct cma_buf *out)
{
    enum cma_errc rc = CMA_OK;
    for (size_t i = 0; i < fs->n && rc == CMA_OK; i++) {
        if (out->len)
            rc = cma_buf_appendc(out, ',');
        if (rc == CMA_OK)
            rc = cma_buf_appends(out, fs->terms[i].field == FIELD_KIND_NAME ? FIELD_NAME
                                                                            : FIELD_NAMESPACE);
        if (rc == CMA_OK)
            rc = cma_buf_appends(out, fs->terms[i].equal ? "=" : "!=");
        if (rc == CMA_OK)
            rc = append_escaped(out, fs->terms[i].value);
    }
    return rc;
}

/* ---- the request ---- */

struct resource_request {
    struct cma_app *app;
    struct cma_arena *arena; /* the request's: everything below lives as long as it */
    struct cma_restmapper *mapper;
    bool nodes;             /* NodeMetrics, else PodMetrics */
    const char *namespace_; /* pods: NULL = all namespaces */
    const char *name;       /* GET: the object, else NULL */
    struct cma_selector *label_selector;
    struct field_sel fields;
    struct cma_kube_object *objs; /* selected objects first, sorted by (namespace, name) */
    size_t n_objs;                /* selected */
    size_t n_listed;              /* all of objs */
    char **names;                 /* distinct object names for the queries (borrowed from objs) */
    size_t n_names;
    int64_t now_ms;
};

struct object_list {
    struct cma_kube_object *objs;
    size_t n;
};

static void free_object_list(void *p)
{
    struct object_list *l = p;
    cma_kube_objects_free(l->objs, l->n);
}

/* Hands the listed objects to the request arena. */
static enum cma_errc adopt_objects(struct resource_request *rr, struct cma_err *err)
{
    struct object_list *l = cma_arena_alloc(rr->arena, sizeof(*l));
    if (l) {
        *l = (struct object_list){rr->objs, rr->n_listed};
        return cma_api_adopt(rr->arena, free_object_list, l, err);
    }
    cma_kube_objects_free(rr->objs, rr->n_listed);
    rr->objs = NULL;
    rr->n_listed = 0;
    cma_api_arena_error(rr->arena, err);
    return cma_api_arena_rc(rr->arena);
}

static int cmp_str(const char *a, const char *b)
{
    return strcmp(a ? a : "", b ? b : "");
}

static int cmp_objects(const void *a, const void *b)
{
    const struct cma_kube_object *x = a, *y = b;
    int c = cmp_str(x->namespace_, y->namespace_);
    return c ? c : strcmp(x->name, y->name);
}

static int cmp_name_ptrs(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Index of (ns, name) in the sorted objects, or -1. */
static long find_object(const struct resource_request *rr, const char *ns, const char *name)
{
    size_t lo = 0, hi = rr->n_objs;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        const struct cma_kube_object *o = &rr->objs[mid];
        int c = cmp_str(o->namespace_, ns);
        if (!c)
            c = strcmp(o->name, name);
        if (!c)
            return (long)mid;
        if (c < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return -1;
}

static enum cma_errc parse_label_selector(struct resource_request *rr,
                                          const struct cma_request *req, struct cma_err *err)
{
    const char *text = cma_request_query(req, "labelSelector");
    if (!text)
        text = "";
    /* the parser's message already says "invalid label selector \"<text>\": ..." */
    enum cma_errc rc = cma_selector_parse(text, strlen(text), &rr->label_selector, err);
    if (rc != CMA_OK)
        return rc;
    return cma_api_adopt(rr->arena, cma_api_free_selector, rr->label_selector, err);
}

static enum cma_errc parse_field_selector(struct resource_request *rr,
                                          const struct cma_request *req, struct cma_err *err)
{
    const char *text = cma_request_query(req, "fieldSelector");
    if (!text)
        text = "";
    if (field_sel_parse(rr->arena, text, &rr->fields, err) != CMA_OK) {
        cma_err_prefix(err, "invalid fieldSelector \"%s\": ", text);
        return err->code;
    }
    /* A GET names its object: a field selector may only repeat that name (as kube-apiserver's
     * list-by-name rule: any other selector is a contradiction). */
    if (rr->name && rr->fields.n) {
        const char *selected = field_sel_exact(&rr->fields, FIELD_KIND_NAME);
        if (!selected || strcmp(selected, rr->name) != 0)
            return cma_err_set(err, CMA_ERR_BAD_REQUEST,
                               "fieldSelector metadata.name doesn't match requested name");
    }
    return CMA_OK;
}

/* LISTs the objects (Running pods or nodes), keeps those the field selector matches, sorts
 * them and collects their distinct names. */
static enum cma_errc list_objects(struct resource_request *rr, struct cma_err *err)
{
    struct cma_buf *labels = cma_api_buf(rr->arena, 64 * 1024, err);
    struct cma_buf *fields = labels ? cma_api_buf(rr->arena, 64 * 1024, err) : NULL;
    if (!fields)
        return cma_api_arena_rc(rr->arena);
    enum cma_errc rc = cma_selector_format(rr->label_selector, labels);
    if (rc == CMA_OK && !rr->nodes) {
        rc = cma_buf_appends(fields, "status.phase=Running");
        if (rc == CMA_OK)
            rc = field_sel_format(&rr->fields, fields);
    }
    if (rc == CMA_OK && rr->name) { /* GET: only that object */
        if (fields->len)
            rc = cma_buf_appendc(fields, ',');
        if (rc == CMA_OK)
            rc = cma_buf_appends(fields, FIELD_NAME "=");
        if (rc == CMA_OK)
            rc = append_escaped(fields, rr->name);
    }
    if (rc != CMA_OK)
        cma_err_set(err, rc, "selectors too large: %s", cma_errc_meaning(rc));
    if (rc == CMA_OK)
        rc = cma_kube_list_objects(rr->app->kube, "", "v1", rr->nodes ? "nodes" : "pods",
                                   rr->namespace_, cma_buf_str(labels), cma_buf_str(fields),
                                   &rr->objs, &rr->n_listed, err);
    if (rc != CMA_OK)
        cma_err_prefix(err, "unable to list %s: ", rr->nodes ? "nodes" : "pods");
    else
        rc = adopt_objects(rr, err);
    if (rc != CMA_OK)
        return rc;
    /* The server applied the selectors; check the field terms again (nodes: only here) and
     * the phase when full objects came back. */
    size_t kept = 0;
    for (size_t i = 0; i < rr->n_listed; i++) {
        struct cma_kube_object *o = &rr->objs[i];
        bool keep = field_sel_matches(&rr->fields, o->name, o->namespace_) &&
                    (!rr->name || strcmp(o->name, rr->name) == 0) &&
                    (rr->nodes || !o->phase || strcmp(o->phase, "Running") == 0);
        if (keep) {
            if (kept != i) {
                struct cma_kube_object tmp = rr->objs[kept];
                rr->objs[kept] = *o;
                *o = tmp;
            }
            kept++;
        }
    }
    rr->n_objs = kept; /* the dropped ones stay at the end, owned until the request ends */
    qsort(rr->objs, rr->n_objs, sizeof(*rr->objs), cmp_objects);
    rr->names = cma_api_array(rr->arena, rr->n_objs + 1, sizeof(*rr->names), err);
    if (!rr->names)
        return cma_api_arena_rc(rr->arena);
    for (size_t i = 0; i < rr->n_objs; i++)
        rr->names[i] = rr->objs[i].name;
    qsort(rr->names, rr->n_objs, sizeof(*rr->names), cmp_name_ptrs);
    for (size_t i = 0; i < rr->n_objs; i++)
        if (rr->n_names == 0 || strcmp(rr->names[rr->n_names - 1], rr->names[i]) != 0)
            rr->names[rr->n_names++] = rr->names[i];
    return CMA_OK;
}

/* ---- queries ---- */

struct resource_result { /* in the request arena */
    struct cma_prom_result *result;
    struct cma_buf *object_label;    /* pod or node label */
    struct cma_buf *namespace_label; /* pods only */
    const char *container_label;     /* pods only */
};

/* Which series of an answer the request needs: those naming one of the listed objects. */
struct keep_objects {
    const struct resource_request *rr;
    const struct resource_result *r;
};

static bool keep_listed(void *ctx, const struct cma_label_view *labels, size_t n_labels)
{
    const struct keep_objects *k = ctx;
    const char *name = cma_api_view_value(labels, n_labels, cma_buf_str(k->r->object_label));
    if (!name)
        return false;
    const char *ns = NULL;
    if (!k->rr->nodes) {
        ns = cma_api_view_value(labels, n_labels, cma_buf_str(k->r->namespace_label));
        if (!ns)
            ns = k->rr->namespace_;
        if (!ns)
            return false;
    }
    return find_object(k->rr, ns, name) >= 0;
}

/* keep_listed's id for the query cache: what it depends on (the kind, the two labels, the
 * request's namespace) and the listed objects, "namespace/name" each. NULL: not shared. */
static const char *listed_id(const struct resource_request *rr, const struct resource_result *r)
{
    const char *head = cma_arena_printf(rr->arena, "%s %s %s %s", rr->nodes ? "nodes" : "pods",
                                        r->object_label ? cma_buf_str(r->object_label) : "",
                                        r->namespace_label ? cma_buf_str(r->namespace_label) : "",
                                        rr->namespace_ ? rr->namespace_ : "");
    const char **names = cma_arena_array(rr->arena, rr->n_objs + 1, sizeof(*names));
    const char **spaces = cma_arena_array(rr->arena, rr->n_objs + 1, sizeof(*spaces));
    if (!head || !names || !spaces)
        return NULL;
    for (size_t i = 0; i < rr->n_objs; i++) { /* the selected ones: what keep_listed looks in */
        names[i] = rr->objs[i].name;
        spaces[i] = rr->objs[i].namespace_;
    }
    return cma_api_keep_id(rr->arena, head, spaces, names, rr->n_objs);
}

/* Renders and runs the containerQuery or nodeQuery of one resource (cpu or memory). */
static enum cma_errc run_query(struct resource_request *rr, const struct cma_resource_query *q,
                               const char *what, struct resource_result *out, struct cma_err *err)
{
    out->result = NULL;
    out->object_label = cma_api_buf(rr->arena, 4096, err);
    out->namespace_label = out->object_label ? cma_api_buf(rr->arena, 4096, err) : NULL;
    if (!out->namespace_label)
        return cma_api_arena_rc(rr->arena);
    out->container_label = q->container_label;
    const struct cma_template *tmpl = rr->nodes ? q->node_query : q->container_query;
    const char *key = rr->nodes ? "nodeQuery" : "containerQuery";
    /* codes returned apart from cma_err_set: the analyzer cannot see its result */
    if (!tmpl) {
        cma_err_set(err, CMA_ERR_RULE, "resourceRules.%s.%s is not set", what, key);
        return CMA_ERR_RULE;
    }
    if (!rr->nodes && (!q->container_label || !q->container_label[0])) {
        cma_err_set(err, CMA_ERR_RULE, "resourceRules.%s.containerLabel is not set", what);
        return CMA_ERR_RULE;
    }
    const struct cma_api_resource *res =
        cma_restmapper_resource_for(rr->mapper, "", rr->nodes ? "nodes" : "pods");
    const struct cma_api_resource *ns_res =
        cma_restmapper_resource_for(rr->mapper, "", "namespaces");
    if (!res || !ns_res) {
        cma_err_set(err, CMA_ERR_INTERNAL,
                    "the cluster's API discovery has no pods, nodes or namespaces resource");
        return CMA_ERR_INTERNAL;
    }
    enum cma_errc rc = CMA_OK;
    const char *extra[2];
    size_t n_extra = 0;
    if (!rr->nodes) {
        rc =
            cma_resmap_label_for_resource(q->resmap, rr->mapper, ns_res, out->namespace_label, err);
        if (rc != CMA_OK) {
            cma_err_prefix(err, "resourceRules.%s.resources: ", what);
            return rc;
        }
        extra[n_extra++] = q->container_label;
        extra[n_extra++] = cma_buf_str(out->namespace_label);
    }
    struct cma_query_input in = {
        .tmpl = tmpl,
        .resmap = q->resmap,
        .mapper = rr->mapper,
        .series = "",
        .resource = res,
        .namespace_ = rr->nodes ? NULL : rr->namespace_,
        .names = (const char *const *)rr->names,
        .n_names = rr->n_names,
        .extra_group_by = extra,
        .n_extra_group_by = n_extra,
    };
    struct cma_buf *promql = cma_api_buf(rr->arena, 1 << 20, err);
    if (!promql)
        return cma_api_arena_rc(rr->arena);
    /* past the backend's query-length limit: without the names, keep_listed keeps the objects */
    size_t max = rr->app->rules->resource_backend.max_query_bytes;
    bool wide = false;
    rc = cma_query_build_bounded(&in, max, promql, out->object_label, &wide, err);
    if (rc != CMA_OK)
        cma_err_prefix(err, "resourceRules.%s.%s: ", what, key);
    if (rc == CMA_OK && wide) {
        cma_explain_addf(rr->app->explain, CMA_EX_QUERY,
                         "the names of %zu objects would make the %s query longer than the "
                         "backend's limit of %zu bytes: sent without them, keeping the listed "
                         "objects from the answer",
                         rr->n_names, what, max);
        cma_log_v(4,
                  "resource metrics %s: %zu object names would pass the query limit of %zu "
                  "bytes: querying without the name matcher (%zu bytes)",
                  what, rr->n_names, max, promql->len);
    }
    if (rc == CMA_OK) {
        cma_log_v(5, "resource metrics %s for %zu %s: %s", what, rr->n_names,
                  rr->nodes ? "nodes" : "pods", cma_buf_str(promql));
        struct keep_objects keep = {rr, out};
        struct cma_keep filter = {keep_listed, &keep, listed_id(rr, out), rr->app->call, NULL};
        /* resourceRules.backend: one backend for the block, cpu and memory alike */
        char what_[16];
        snprintf(what_, sizeof(what_), "%s ", what);
        rc = cma_api_query(rr->app, &rr->app->rules->resource_backend, rr->app->explain, what_,
                           cma_buf_str(promql), rr->now_ms, &filter, &out->result, err);
        if (rc == CMA_OK)
            rc = cma_api_adopt(rr->arena, cma_api_free_result, out->result, err);
    }
    if (rc == CMA_OK && !out->result)
        rc = CMA_ERR_INTERNAL;
    if (rc == CMA_OK && out->result->type != CMA_PROM_VECTOR)
        rc = cma_err_set(err, CMA_ERR_BACKEND_RESPONSE,
                         "unexpected result type from prometheus for %s (want a vector); check "
                         "resourceRules.%s.%s",
                         what, what, key);
    return rc;
}

/* NaN, ±Inf, negative and out-of-range values → 0 (see DESIGN). */
static int64_t usage_milli(double v)
{
    int64_t milli = 0;
    if (!(v > 0) || !cma_quantity_milli_from_double(v, &milli))
        return 0;
    return milli;
}

/* Orders samples by their label sets (names and values), for a choice that does not depend on
 * the backend's result order. */
static int cmp_samples(const struct cma_sample *a, const struct cma_sample *b)
{
    size_t n = a->n_labels < b->n_labels ? a->n_labels : b->n_labels;
    for (size_t i = 0; i < n; i++) {
        int c = strcmp(a->labels[i].name, b->labels[i].name);
        if (!c)
            c = strcmp(a->labels[i].value, b->labels[i].value);
        if (c)
            return c;
    }
    return a->n_labels < b->n_labels ? -1 : a->n_labels > b->n_labels;
}

/* One (object, container) with the samples chosen for it. */
struct usage_entry {
    size_t object;
    const char *container; /* "" for nodes */
    const struct cma_sample *cpu, *memory;
};

static int cmp_entries(const void *a, const void *b)
{
    const struct usage_entry *x = a, *y = b;
    if (x->object != y->object)
        return x->object < y->object ? -1 : 1;
    return strcmp(x->container, y->container);
}

/* Adds an entry per sample of r that names one of the objects. */
static size_t collect(const struct resource_request *rr, const struct resource_result *r, bool cpu,
                      struct usage_entry *entries, size_t n)
{
    for (size_t i = 0; i < r->result->n_samples; i++) {
        const struct cma_sample *s = &r->result->samples[i];
        const char *name = cma_sample_label(s, cma_buf_str(r->object_label));
        if (!name)
            continue;
        const char *ns = NULL, *container = "";
        if (!rr->nodes) {
            ns = cma_sample_label(s, cma_buf_str(r->namespace_label));
            if (!ns)
                ns = rr->namespace_; /* the query already matched the namespace */
            if (!ns)
                continue;
            container = cma_sample_label(s, r->container_label);
            if (!container)
                container = "";
        }
        long k = find_object(rr, ns, name);
        if (k < 0)
            continue;
        entries[n] = (struct usage_entry){.object = (size_t)k, .container = container};
        if (cpu)
            entries[n].cpu = s;
        else
            entries[n].memory = s;
        n++;
    }
    return n;
}

/* Merges entries with the same (object, container); returns how many remain. Sets *dups when a
 * resource had more than one sample for one of them. */
static size_t merge(struct usage_entry *entries, size_t n, size_t *dups)
{
    qsort(entries, n, sizeof(*entries), cmp_entries);
    size_t out = 0;
    for (size_t i = 0; i < n; i++) {
        if (out && cmp_entries(&entries[out - 1], &entries[i]) == 0) {
            struct usage_entry *m = &entries[out - 1];
            const struct cma_sample *pairs[2][2] = {{m->cpu, entries[i].cpu},
                                                    {m->memory, entries[i].memory}};
            for (int r = 0; r < 2; r++) {
                const struct cma_sample *keep = pairs[r][0], *other = pairs[r][1];
                if (keep && other) {
                    (*dups)++;
                    if (cmp_samples(other, keep) < 0)
                        keep = other;
                } else if (!keep) {
                    keep = other;
                }
                if (r == 0)
                    m->cpu = keep;
                else
                    m->memory = keep;
            }
            continue;
        }
        entries[out++] = entries[i];
    }
    return out;
}

static int64_t earliest(int64_t ts, const struct cma_sample *s)
{
    return s && s->timestamp_ms < ts ? s->timestamp_ms : ts;
}

static struct cma_metrics_object_meta object_meta(const struct resource_request *rr,
                                                  const struct cma_kube_object *o)
{
    return (struct cma_metrics_object_meta){
        .name = o->name,
        .namespace_ = o->namespace_,
        .creation_ms = rr->now_ms,
        .label_names = (const char *const *)o->label_names,
        .label_values = (const char *const *)o->label_values,
        .n_labels = o->n_labels,
    };
}

static enum cma_errc not_found(const struct resource_request *rr, struct cma_err *err)
{
    if (rr->nodes)
        return cma_err_set(err, CMA_ERR_NOT_FOUND, "nodemetrics.metrics.k8s.io \"%s\" not found",
                           rr->name);
    return cma_err_set(err, CMA_ERR_NOT_FOUND, "podmetrics.metrics.k8s.io \"%s/%s\" not found",
                       rr->namespace_, rr->name);
}

static enum cma_errc encode_pods(struct resource_request *rr, struct usage_entry *entries, size_t n,
                                 struct cma_buf *out, struct cma_err *err)
{
    int64_t window = rr->app->rules->window_ms;
    struct cma_pod_metrics *pods = cma_api_array(rr->arena, rr->n_objs + 1, sizeof(*pods), err);
    struct cma_container_metrics *containers =
        pods ? cma_api_array(rr->arena, n + 1, sizeof(*containers), err) : NULL;
    if (!containers)
        return cma_api_arena_rc(rr->arena);
    size_t n_pods = 0;
    for (size_t i = 0; i < n;) {
        size_t j = i;
        bool has_cpu = false, has_memory = false;
        int64_t ts = INT64_MAX;
        for (; j < n && entries[j].object == entries[i].object; j++) {
            has_cpu |= entries[j].cpu != NULL;
            has_memory |= entries[j].memory != NULL;
            ts = earliest(earliest(ts, entries[j].cpu), entries[j].memory);
            containers[j] = (struct cma_container_metrics){
                .name = entries[j].container,
                .usage = {.cpu_milli = entries[j].cpu ? usage_milli(entries[j].cpu->value) : 0,
                          .memory_milli =
                              entries[j].memory ? usage_milli(entries[j].memory->value) : 0},
            };
        }
        const struct cma_kube_object *o = &rr->objs[entries[i].object];
        if (has_cpu && has_memory)
            pods[n_pods++] = (struct cma_pod_metrics){
                .meta = object_meta(rr, o),
                .timestamp_ms = ts,
                .window_ms = window,
                .containers = &containers[i],
                .n_containers = j - i,
            };
        else
            cma_log_v(4, "resource metrics: pod %s/%s has no %s samples; leaving it out",
                      o->namespace_ ? o->namespace_ : "", o->name, has_cpu ? "memory" : "cpu");
        i = j;
    }
    enum cma_errc rc;
    if (rr->name && n_pods == 0)
        rc = not_found(rr, err);
    else if (rr->name)
        rc = cma_encode_pod_metrics(&pods[0], out, err);
    else
        rc = cma_encode_pod_metrics_list(pods, n_pods, out, err);
    return rc;
}

static enum cma_errc encode_nodes(struct resource_request *rr, const struct usage_entry *entries,
                                  size_t n, struct cma_buf *out, struct cma_err *err)
{
    struct cma_node_metrics *nodes = cma_api_array(rr->arena, n + 1, sizeof(*nodes), err);
    if (!nodes)
        return cma_api_arena_rc(rr->arena);
    size_t n_nodes = 0;
    for (size_t i = 0; i < n; i++) {
        const struct usage_entry *e = &entries[i];
        const struct cma_kube_object *o = &rr->objs[e->object];
        if (!e->cpu || !e->memory) {
            cma_log_v(4, "resource metrics: node %s has no %s sample; leaving it out", o->name,
                      e->cpu ? "memory" : "cpu");
            continue;
        }
        nodes[n_nodes++] = (struct cma_node_metrics){
            .meta = object_meta(rr, o),
            .timestamp_ms = earliest(earliest(INT64_MAX, e->cpu), e->memory),
            .window_ms = rr->app->rules->window_ms,
            .usage = {.cpu_milli = usage_milli(e->cpu->value),
                      .memory_milli = usage_milli(e->memory->value)},
        };
    }
    enum cma_errc rc;
    if (rr->name && n_nodes == 0)
        rc = not_found(rr, err);
    else if (rr->name)
        rc = cma_encode_node_metrics(&nodes[0], out, err);
    else
        rc = cma_encode_node_metrics_list(nodes, n_nodes, out, err);
    return rc;
}

/* Objects are listed: query cpu and memory, assemble, encode. */
static enum cma_errc query_and_encode(struct resource_request *rr, struct cma_response *resp,
                                      struct cma_err *err)
{
    const struct cma_ruleset *rules = rr->app->rules;
    struct resource_result cpu = {0}, memory = {0};
    enum cma_errc rc = run_query(rr, &rules->cpu, "cpu", &cpu, err);
    if (rc == CMA_OK)
        rc = run_query(rr, &rules->memory, "memory", &memory, err);
    struct usage_entry *entries = NULL;
    if (rc == CMA_OK) {
        size_t total = cpu.result->n_samples + memory.result->n_samples;
        entries = cma_api_array(rr->arena, total + 1, sizeof(*entries), err);
        if (!entries)
            rc = cma_api_arena_rc(rr->arena);
    }
    if (rc == CMA_OK) {
        size_t n = collect(rr, &cpu, true, entries, 0);
        n = collect(rr, &memory, false, entries, n);
        size_t dups = 0;
        n = merge(entries, n, &dups);
        if (dups)
            cma_log_warn("resource metrics: %zu %s had more than one sample per resource; used "
                         "the sample whose labels sort first (make the %s aggregate by "
                         "<<.GroupBy>>)",
                         dups, rr->nodes ? "nodes" : "containers",
                         rr->nodes ? "nodeQuery" : "containerQuery");
        if (rr->nodes)
            rc = encode_nodes(rr, entries, n, &resp->body, err);
        else
            rc = encode_pods(rr, entries, n, &resp->body, err);
    }
    return rc;
}

void cma_api_resource(struct cma_app *app, struct cma_catalog *cat, const struct cma_route *route,
                      const struct cma_request *req, struct cma_arena *arena,
                      struct cma_response *resp)
{
    struct cma_err err;
    cma_err_clear(&err);
    if (!cat) { /* the RESTMapper (label ↔ resource) comes with the first catalog */
        struct cma_discovery_status st = {0};
        if (app->discovery)
            cma_discovery_get_status(app->discovery, &st);
        if (st.last_error[0])
            cma_api_reply_errorf(resp, CMA_ERR_BACKEND_UNAVAILABLE,
                                 "metric discovery has not succeeded yet: %s", st.last_error);
        else
            cma_api_reply_errorf(resp, CMA_ERR_BACKEND_UNAVAILABLE,
                                 "metric discovery has not completed yet; try again shortly");
        return;
    }
    struct resource_request rr = {
        .app = app,
        .arena = arena,
        .mapper = cma_catalog_mapper(cat),
        .nodes = route->kind == CMA_ROUTE_RESOURCE_NODES || route->kind == CMA_ROUTE_RESOURCE_NODE,
        .namespace_ = route->namespace_,
        .name = (route->kind == CMA_ROUTE_RESOURCE_NODE || route->kind == CMA_ROUTE_RESOURCE_POD)
                    ? route->name
                    : NULL,
        .now_ms = cma_clock_wall_ms(),
    };
    if (rr.nodes)
        rr.namespace_ = NULL;
    enum cma_errc rc = parse_label_selector(&rr, req, &err);
    if (rc == CMA_OK)
        rc = parse_field_selector(&rr, req, &err);
    if (rc == CMA_OK)
        rc = list_objects(&rr, &err);
    if (rc == CMA_OK && rr.n_objs == 0) { /* nothing to query: an honest empty answer */
        if (rr.name)
            rc = not_found(&rr, &err);
        else if (rr.nodes)
            rc = cma_encode_node_metrics_list(NULL, 0, &resp->body, &err);
        else
            rc = cma_encode_pod_metrics_list(NULL, 0, &resp->body, &err);
    } else if (rc == CMA_OK) {
        rc = query_and_encode(&rr, resp, &err);
    }
    if (rc != CMA_OK)
        cma_api_fail(resp, req, rc, &err);
}
