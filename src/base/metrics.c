/* metrics.c: the self-metrics registry (metrics.h): families, their children, lock-free
 * recording and the text exposition format 0.0.4 writer.
 *
 * DESIGN
 * - The registry keeps its families in an array guarded by its mutex (registration and
 *   exposition take it; recording never does: a component keeps the family pointer it got).
 * - A family's children live in an open-addressing table of atomic child pointers, keyed by the
 *   FNV hash of the label values. Readers probe it without a lock (acquire loads); a miss takes
 *   the family mutex, probes again and inserts (release store). The table never shrinks and is
 *   at most half full: to grow, a doubled copy is published with one atomic store and the old
 *   table is kept on a retired list until the registry is freed, so a reader still probing the
 *   old one stays safe. Children are never removed.
 * - Values are doubles stored as their bit patterns in _Atomic uint64_t: set is a store, add a
 *   compare-and-swap loop. A histogram child holds one non-cumulative count per bucket plus
 *   +Inf and the sum; the writer accumulates the counts, and _count is the +Inf total, so
 *   _bucket and _count always agree within one exposition.
 * - Exposition copies the family list and each family's child pointers, sorts them (by name, by
 *   label values) and prints: stable output whatever the insertion order. */
#include "cma/metrics.h"

#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cma/hash.h"

struct child {
    uint64_t hash;
    size_t n_values;
    char **values;             /* n_values strings, in the same allocation */
    _Atomic uint64_t sum_bits; /* histogram: sum of observations */
    _Atomic uint64_t cells[];  /* counter/gauge: [0] = value bits; histogram: n_bounds + 1 counts */
};

struct table {
    size_t cap; /* power of two */
    struct table *retired_next;
    _Atomic(struct child *) slots[];
};

struct cma_metric {
    struct cma_metrics *owner;
    enum cma_metric_type type;
    char *name, *help;
    char *labels[CMA_METRICS_MAX_LABELS];
    size_t n_labels;
    double bounds[CMA_METRICS_MAX_BUCKETS];
    size_t n_bounds;
    pthread_mutex_t lock; /* guards insertion and growth */
    _Atomic(struct table *) table;
    struct table *retired;
    size_t n_children; /* guarded by lock */
};

struct cma_metrics {
    pthread_mutex_t lock; /* guards the family array */
    struct cma_metric **families;
    size_t n_families, cap_families;
    _Atomic uint64_t dropped;
};

/* ---- values --------------------------------------------------------------------------------- */

static uint64_t to_bits(double v)
{
    uint64_t b;
    memcpy(&b, &v, sizeof b);
    return b;
}

static double from_bits(uint64_t b)
{
    double v;
    memcpy(&v, &b, sizeof v);
    return v;
}

static void atomic_add_double(_Atomic uint64_t *cell, double v)
{
    uint64_t old = atomic_load_explicit(cell, memory_order_relaxed);
    while (!atomic_compare_exchange_weak_explicit(cell, &old, to_bits(from_bits(old) + v),
                                                  memory_order_relaxed, memory_order_relaxed))
        ;
}

char *cma_metrics_format_value(double v, char out[32])
{
    if (isnan(v))
        return strcpy(out, "NaN");
    if (isinf(v))
        return strcpy(out, v > 0 ? "+Inf" : "-Inf");
    if (v == trunc(v) && fabs(v) < 1e15) {
        snprintf(out, 32, "%.0f", v);
        return out;
    }
    for (int prec = 15; prec <= 17; prec++) {
        snprintf(out, 32, "%.*g", prec, v);
        if (strtod(out, NULL) == v)
            break;
    }
    return out;
}

/* ---- names ---------------------------------------------------------------------------------- */

static bool valid_name(const char *s, bool colon_ok)
{
    if (!s || !*s || (*s >= '0' && *s <= '9'))
        return false;
    for (const char *p = s; *p; p++) {
        char c = *p;
        bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                  c == '_' || (colon_ok && c == ':');
        if (!ok)
            return false;
    }
    return true;
}

static bool valid_labels(const char *const *labels, size_t n, enum cma_metric_type type)
{
    if (n > CMA_METRICS_MAX_LABELS || (n > 0 && !labels))
        return false;
    for (size_t i = 0; i < n; i++) {
        if (!valid_name(labels[i], false) || strncmp(labels[i], "__", 2) == 0 ||
            (type == CMA_METRIC_HISTOGRAM && strcmp(labels[i], "le") == 0))
            return false;
        for (size_t j = 0; j < i; j++)
            if (strcmp(labels[i], labels[j]) == 0)
                return false;
    }
    return true;
}

static bool valid_bounds(const double *bounds, size_t n)
{
    if (n > CMA_METRICS_MAX_BUCKETS || (n > 0 && !bounds))
        return false;
    for (size_t i = 0; i < n; i++)
        if (!isfinite(bounds[i]) || (i > 0 && !(bounds[i] > bounds[i - 1])))
            return false;
    return true;
}

/* ---- children ------------------------------------------------------------------------------- */

static size_t n_cells(const struct cma_metric *f)
{
    return f->type == CMA_METRIC_HISTOGRAM ? f->n_bounds + 1 : 1;
}

static uint64_t hash_values(const char *const *values, size_t n)
{
    uint64_t h = CMA_HASH_FNV_OFFSET;
    for (size_t i = 0; i < n; i++) {
        const char *v = values && values[i] ? values[i] : "";
        h = cma_hash_bytes(h, v, strlen(v) + 1); /* the NUL separates the values */
    }
    return h;
}

static bool child_matches(const struct child *c, uint64_t h, const char *const *values, size_t n)
{
    if (c->hash != h)
        return false;
    for (size_t i = 0; i < n; i++)
        if (strcmp(c->values[i], values && values[i] ? values[i] : "") != 0)
            return false;
    return true;
}

/* Probes t for the child with these values; NULL when absent. Lock-free. */
static struct child *table_find(struct table *t, uint64_t h, const char *const *values, size_t n)
{
    for (size_t i = h & (t->cap - 1);; i = (i + 1) & (t->cap - 1)) {
        struct child *c = atomic_load_explicit(&t->slots[i], memory_order_acquire);
        if (!c || child_matches(c, h, values, n))
            return c;
    }
}

static void table_put(struct table *t, struct child *c)
{
    size_t i = c->hash & (t->cap - 1);
    while (atomic_load_explicit(&t->slots[i], memory_order_relaxed))
        i = (i + 1) & (t->cap - 1);
    atomic_store_explicit(&t->slots[i], c, memory_order_release);
}

static struct table *table_new(size_t cap)
{
    struct table *t = calloc(1, sizeof(*t) + cap * sizeof(t->slots[0]));
    if (t)
        t->cap = cap;
    return t;
}

static struct child *child_new(const struct cma_metric *f, uint64_t h, const char *const *values)
{
    size_t strings = 0, cells = n_cells(f) * sizeof(_Atomic uint64_t);
    for (size_t i = 0; i < f->n_labels; i++)
        strings += strlen(values && values[i] ? values[i] : "") + 1;
    struct child *c = calloc(1, sizeof(*c) + cells + f->n_labels * sizeof(char *) + strings);
    if (!c)
        return NULL;
    c->hash = h;
    c->n_values = f->n_labels;
    c->values = (char **)((char *)c + sizeof(*c) + cells);
    char *p = (char *)(c->values + f->n_labels);
    for (size_t i = 0; i < f->n_labels; i++) {
        const char *v = values && values[i] ? values[i] : "";
        size_t len = strlen(v) + 1;
        c->values[i] = memcpy(p, v, len);
        p += len;
    }
    return c;
}

/* Makes room for one more child (caller holds f->lock): a doubled table when half full. */
static bool table_reserve(struct cma_metric *f)
{
    struct table *t = atomic_load_explicit(&f->table, memory_order_relaxed);
    if ((f->n_children + 1) * 2 <= t->cap)
        return true;
    struct table *grown = table_new(t->cap * 2);
    if (!grown)
        return false;
    for (size_t i = 0; i < t->cap; i++) {
        struct child *c = atomic_load_explicit(&t->slots[i], memory_order_relaxed);
        if (c)
            table_put(grown, c);
    }
    t->retired_next = f->retired;
    f->retired = t;
    atomic_store_explicit(&f->table, grown, memory_order_release);
    return true;
}

/* The child for these values, created on first use; NULL when f is NULL, at the limit or out
 * of memory. */
static struct child *child_get(struct cma_metric *f, const char *const *values)
{
    if (!f)
        return NULL;
    uint64_t h = hash_values(values, f->n_labels);
    struct child *c =
        table_find(atomic_load_explicit(&f->table, memory_order_acquire), h, values, f->n_labels);
    if (c)
        return c;
    pthread_mutex_lock(&f->lock);
    c = table_find(atomic_load_explicit(&f->table, memory_order_relaxed), h, values, f->n_labels);
    if (!c && f->n_children < CMA_METRICS_MAX_CHILDREN && table_reserve(f) &&
        (c = child_new(f, h, values)) != NULL) {
        table_put(atomic_load_explicit(&f->table, memory_order_relaxed), c);
        f->n_children++;
    } else if (!c) {
        atomic_fetch_add_explicit(&f->owner->dropped, 1, memory_order_relaxed);
    }
    pthread_mutex_unlock(&f->lock);
    return c;
}

/* ---- families ------------------------------------------------------------------------------- */

static void family_free(struct cma_metric *f)
{
    if (!f)
        return;
    struct table *t = atomic_load_explicit(&f->table, memory_order_relaxed);
    for (size_t i = 0; t && i < t->cap; i++)
        free(atomic_load_explicit(&t->slots[i], memory_order_relaxed));
    free(t);
    while (f->retired) {
        struct table *next = f->retired->retired_next;
        free(f->retired);
        f->retired = next;
    }
    for (size_t i = 0; i < f->n_labels; i++)
        free(f->labels[i]);
    free(f->name);
    free(f->help);
    pthread_mutex_destroy(&f->lock);
    free(f);
}

static bool same_shape(const struct cma_metric *f, enum cma_metric_type type,
                       const char *const *labels, size_t n_labels, const double *bounds,
                       size_t n_bounds)
{
    if (f->type != type || f->n_labels != n_labels || f->n_bounds != n_bounds)
        return false;
    for (size_t i = 0; i < n_labels; i++)
        if (strcmp(f->labels[i], labels[i]) != 0)
            return false;
    for (size_t i = 0; i < n_bounds; i++)
        if (f->bounds[i] != bounds[i])
            return false;
    return true;
}

static struct cma_metric *family_new(struct cma_metrics *m, enum cma_metric_type type,
                                     const char *name, const char *help, const char *const *labels,
                                     size_t n_labels, const double *bounds, size_t n_bounds)
{
    struct cma_metric *f = calloc(1, sizeof(*f));
    if (!f)
        return NULL;
    *f = (struct cma_metric){.owner = m, .type = type, .n_bounds = n_bounds};
    pthread_mutex_init(&f->lock, NULL);
    f->name = strdup(name);
    f->help = strdup(help ? help : "");
    bool ok = f->name && f->help;
    for (size_t i = 0; ok && i < n_labels; i++, f->n_labels++)
        ok = (f->labels[i] = strdup(labels[i])) != NULL;
    if (n_bounds)
        memcpy(f->bounds, bounds, n_bounds * sizeof(double));
    struct table *t = ok ? table_new(n_labels ? 16 : 2) : NULL;
    atomic_init(&f->table, t);
    if (!t || (n_labels == 0 && !child_get(f, NULL))) {
        family_free(f);
        return NULL;
    }
    return f;
}

static struct cma_metric *find_family(struct cma_metrics *m, const char *name)
{
    for (size_t i = 0; i < m->n_families; i++)
        if (strcmp(m->families[i]->name, name) == 0)
            return m->families[i];
    return NULL;
}

static struct cma_metric *add_family(struct cma_metrics *m, struct cma_metric *f)
{
    if (m->n_families == m->cap_families) {
        size_t cap = m->cap_families ? m->cap_families * 2 : 32;
        struct cma_metric **grown = realloc(m->families, cap * sizeof(*grown));
        if (!grown) {
            family_free(f);
            return NULL;
        }
        m->families = grown;
        m->cap_families = cap;
    }
    m->families[m->n_families++] = f;
    return f;
}

static struct cma_metric *reg(struct cma_metrics *m, enum cma_metric_type type, const char *name,
                              const char *help, const char *const *labels, size_t n_labels,
                              const double *bounds, size_t n_bounds)
{
    if (!m || !valid_name(name, true) || !valid_labels(labels, n_labels, type) ||
        !valid_bounds(bounds, n_bounds))
        return NULL;
    pthread_mutex_lock(&m->lock);
    struct cma_metric *f = find_family(m, name);
    if (f && !same_shape(f, type, labels, n_labels, bounds, n_bounds))
        f = NULL;
    else if (!f && (f = family_new(m, type, name, help, labels, n_labels, bounds, n_bounds)))
        f = add_family(m, f);
    pthread_mutex_unlock(&m->lock);
    return f;
}

struct cma_metric *cma_metrics_counter(struct cma_metrics *m, const char *name, const char *help,
                                       const char *const *labels, size_t n_labels)
{
    return reg(m, CMA_METRIC_COUNTER, name, help, labels, n_labels, NULL, 0);
}

struct cma_metric *cma_metrics_gauge(struct cma_metrics *m, const char *name, const char *help,
                                     const char *const *labels, size_t n_labels)
{
    return reg(m, CMA_METRIC_GAUGE, name, help, labels, n_labels, NULL, 0);
}

struct cma_metric *cma_metrics_histogram(struct cma_metrics *m, const char *name, const char *help,
                                         const char *const *labels, size_t n_labels,
                                         const double *bounds, size_t n_bounds)
{
    return reg(m, CMA_METRIC_HISTOGRAM, name, help, labels, n_labels, bounds, n_bounds);
}

enum cma_errc cma_metrics_new(struct cma_metrics **ret, struct cma_err *reterr)
{
    struct cma_metrics *m = calloc(1, sizeof(*m));
    if (!m)
        return cma_err_set(reterr, CMA_ERR_NOMEM, "out of memory");
    pthread_mutex_init(&m->lock, NULL);
    atomic_init(&m->dropped, 0);
    *ret = m;
    return CMA_OK;
}

void cma_metrics_free(struct cma_metrics *m)
{
    if (!m)
        return;
    for (size_t i = 0; i < m->n_families; i++)
        family_free(m->families[i]);
    free(m->families);
    pthread_mutex_destroy(&m->lock);
    free(m);
}

uint64_t cma_metrics_dropped(const struct cma_metrics *m)
{
    return m ? atomic_load_explicit(&((struct cma_metrics *)m)->dropped, memory_order_relaxed) : 0;
}

/* ---- recording ------------------------------------------------------------------------------ */

void cma_metric_add(struct cma_metric *f, const char *const *values, double v)
{
    if (!f || f->type == CMA_METRIC_HISTOGRAM || (f->type == CMA_METRIC_COUNTER && !(v >= 0)))
        return;
    struct child *c = child_get(f, values);
    if (c)
        atomic_add_double(&c->cells[0], v);
}

void cma_metric_inc(struct cma_metric *f, const char *const *values)
{
    cma_metric_add(f, values, 1);
}

void cma_metric_set(struct cma_metric *f, const char *const *values, double v)
{
    if (!f || f->type == CMA_METRIC_HISTOGRAM)
        return;
    struct child *c = child_get(f, values);
    if (c)
        atomic_store_explicit(&c->cells[0], to_bits(v), memory_order_relaxed);
}

void cma_metric_observe(struct cma_metric *f, const char *const *values, double v)
{
    if (!f || f->type != CMA_METRIC_HISTOGRAM)
        return;
    struct child *c = child_get(f, values);
    if (!c)
        return;
    size_t i = 0;
    while (i < f->n_bounds && !(v <= f->bounds[i]))
        i++;
    atomic_fetch_add_explicit(&c->cells[i], 1, memory_order_relaxed);
    atomic_add_double(&c->sum_bits, v);
}

static uint64_t histogram_count(const struct cma_metric *f, struct child *c)
{
    uint64_t n = 0;
    for (size_t i = 0; i <= f->n_bounds; i++)
        n += atomic_load_explicit(&c->cells[i], memory_order_relaxed);
    return n;
}

double cma_metric_value(struct cma_metric *f, const char *const *values)
{
    if (!f)
        return 0;
    uint64_t h = hash_values(values, f->n_labels);
    struct child *c =
        table_find(atomic_load_explicit(&f->table, memory_order_acquire), h, values, f->n_labels);
    if (!c)
        return 0;
    if (f->type == CMA_METRIC_HISTOGRAM)
        return (double)histogram_count(f, c);
    return from_bits(atomic_load_explicit(&c->cells[0], memory_order_relaxed));
}

/* ---- exposition ----------------------------------------------------------------------------- */

/* Appends s with the exposition format's escapes: backslash and newline always, the double quote
 * inside label values. */
static enum cma_errc append_escaped(struct cma_buf *out, const char *s, bool quote)
{
    enum cma_errc rc = CMA_OK;
    for (const char *p = s; rc == CMA_OK && *p; p++) {
        if (*p == '\\')
            rc = cma_buf_appends(out, "\\\\");
        else if (*p == '\n')
            rc = cma_buf_appends(out, "\\n");
        else if (quote && *p == '"')
            rc = cma_buf_appends(out, "\\\"");
        else
            rc = cma_buf_appendc(out, *p);
    }
    return rc;
}

/* name{l1="v1",...[,le="x"]} value\n; `le` NULL for no le label. */
static enum cma_errc write_sample(struct cma_buf *out, const struct cma_metric *f,
                                  const struct child *c, const char *suffix, const char *le,
                                  double v)
{
    char num[32];
    enum cma_errc rc = cma_buf_printf(out, "%s%s", f->name, suffix);
    bool braces = f->n_labels > 0 || le;
    if (rc == CMA_OK && braces)
        rc = cma_buf_appendc(out, '{');
    for (size_t i = 0; rc == CMA_OK && i < f->n_labels; i++) {
        rc = cma_buf_printf(out, "%s%s=\"", i ? "," : "", f->labels[i]);
        if (rc == CMA_OK)
            rc = append_escaped(out, c->values[i], true);
        if (rc == CMA_OK)
            rc = cma_buf_appendc(out, '"');
    }
    if (rc == CMA_OK && le)
        rc = cma_buf_printf(out, "%sle=\"%s\"", f->n_labels ? "," : "", le);
    if (rc == CMA_OK && braces)
        rc = cma_buf_appendc(out, '}');
    if (rc == CMA_OK)
        rc = cma_buf_printf(out, " %s\n", cma_metrics_format_value(v, num));
    return rc;
}

static enum cma_errc write_histogram(struct cma_buf *out, const struct cma_metric *f,
                                     struct child *c)
{
    char le[32];
    uint64_t cumulative = 0;
    enum cma_errc rc = CMA_OK;
    for (size_t i = 0; rc == CMA_OK && i <= f->n_bounds; i++) {
        cumulative += atomic_load_explicit(&c->cells[i], memory_order_relaxed);
        if (i < f->n_bounds)
            cma_metrics_format_value(f->bounds[i], le);
        else
            strcpy(le, "+Inf");
        rc = write_sample(out, f, c, "_bucket", le, (double)cumulative);
    }
    double sum = from_bits(atomic_load_explicit(&c->sum_bits, memory_order_relaxed));
    if (rc == CMA_OK)
        rc = write_sample(out, f, c, "_sum", NULL, sum);
    if (rc == CMA_OK)
        rc = write_sample(out, f, c, "_count", NULL, (double)cumulative);
    return rc;
}

static int cmp_children(const void *a, const void *b)
{
    const struct child *x = *(struct child *const *)a, *y = *(struct child *const *)b;
    for (size_t i = 0; i < x->n_values; i++) {
        int d = strcmp(x->values[i], y->values[i]);
        if (d)
            return d;
    }
    return 0;
}

static int cmp_families(const void *a, const void *b)
{
    return strcmp((*(struct cma_metric *const *)a)->name, (*(struct cma_metric *const *)b)->name);
}

static const char *const TYPE_NAMES[] = {"counter", "gauge", "histogram"};

/* The family's children, sorted by label values (caller frees the array). */
static struct child **sorted_children(struct cma_metric *f, size_t *ret_n)
{
    pthread_mutex_lock(&f->lock);
    struct table *t = atomic_load_explicit(&f->table, memory_order_relaxed);
    struct child **v = malloc((f->n_children ? f->n_children : 1) * sizeof(*v));
    size_t n = 0;
    for (size_t i = 0; v && i < t->cap; i++) {
        struct child *c = atomic_load_explicit(&t->slots[i], memory_order_relaxed);
        if (c)
            v[n++] = c;
    }
    pthread_mutex_unlock(&f->lock);
    if (v)
        qsort(v, n, sizeof(*v), cmp_children);
    *ret_n = n;
    return v;
}

static enum cma_errc write_family(struct cma_buf *out, struct cma_metric *f)
{
    size_t n = 0;
    struct child **children = sorted_children(f, &n);
    if (!children)
        return CMA_ERR_NOMEM;
    enum cma_errc rc = cma_buf_printf(out, "# HELP %s ", f->name);
    if (rc == CMA_OK)
        rc = append_escaped(out, f->help, false);
    if (rc == CMA_OK)
        rc = cma_buf_printf(out, "\n# TYPE %s %s\n", f->name, TYPE_NAMES[f->type]);
    for (size_t i = 0; rc == CMA_OK && i < n; i++) {
        if (f->type == CMA_METRIC_HISTOGRAM)
            rc = write_histogram(out, f, children[i]);
        else
            rc = write_sample(
                out, f, children[i], "", NULL,
                from_bits(atomic_load_explicit(&children[i]->cells[0], memory_order_relaxed)));
    }
    free(children);
    return rc;
}

enum cma_errc cma_metrics_write(struct cma_metrics *m, struct cma_buf *out)
{
    if (!m)
        return CMA_OK;
    pthread_mutex_lock(&m->lock);
    size_t n = m->n_families;
    struct cma_metric **v = malloc((n ? n : 1) * sizeof(*v));
    if (v && n)
        memcpy(v, m->families, n * sizeof(*v));
    pthread_mutex_unlock(&m->lock);
    if (!v) {
        cma_buf_done(out);
        return CMA_ERR_NOMEM;
    }
    qsort(v, n, sizeof(*v), cmp_families);
    enum cma_errc rc = CMA_OK;
    for (size_t i = 0; rc == CMA_OK && i < n; i++)
        rc = write_family(out, v[i]);
    free(v);
    if (rc != CMA_OK)
        cma_buf_done(out);
    return rc;
}
