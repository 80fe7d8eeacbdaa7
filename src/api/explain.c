/* explain.c: owns `explain` (cma/explain.h): the trace of one explained request, the recording
 * backend that wraps the app's backend for it, the diagnosis of a metric that nothing serves,
 * the report, the GET /debug/explain recipe and the CLI's one-off relist.
 *
 * DESIGN
 * - The request runs through cma_app_handle() like any other: same routing, same recipes, same
 *   PromQL, same keep filters. Only the app is a copy, with the trace attached, no
 *   authentication (the CLI has none; the debug path authorized /debug/explain itself), no
 *   request metrics, and its backend wrapped by the recorder.
 * - The recorder asks the inner backend for every series (a filter that keeps all, without an
 *   id, so the query cache sends it on its own and the timing is the backend's), records the
 *   PromQL, the backend's name, the duration and every sample, notes which series the request's
 *   own filter leaves out, and hands the recipe the copy that filter keeps
 *   (cma_prom_result_filter): the recipe sees exactly what it would have seen.
 * - "Why nothing matches" lists each rule's seriesQuery again and folds the series with the
 *   relist's own functions (naming, resource mapping): what the catalog was built from, now.
 * - Sections are buffers filled in any order and printed in a fixed one; each keeps at most
 *   MAX_LINES lines and counts the rest.
 * - explain=true on a metrics request (cma_api_explain_param) runs the same report for its
 *   own user, who passed the request's own SubjectAccessReview and may see no more than the
 *   request reads: the report is scoped. Samples the request's filter leaves out are counted,
 *   not shown; the why section lists each config rule's seriesQuery with the namespace label
 *   of the request's namespace added (a MetricRule's is enforced already) and never a rule of
 *   another namespace's MetricRule (in either mode: none can serve the request). The
 *   MetricRules of the request's namespace are read through the adapter's kube client (one
 *   LIST of that namespace only), so that one the adapter did not accept is explained too: by
 *   its status (what `kubectl describe mr` shows) when that refuses the current generation,
 *   else by whether the request's ruleset serves it, else by the MetricRule compiler's answer
 *   now (a status may not be written yet). */
#include "cma/explain.h"

#include <jansson.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "api_internal.h"
#include "cma/app.h"
#include "cma/backend.h"
#include "cma/backend_cache.h"
#include "cma/catalog.h"
#include "cma/clock.h"
#include "cma/config.h"
#include "cma/discovery.h"
#include "cma/kube.h"
#include "cma/metricrule.h"
#include "cma/options.h"
#include "cma/prom.h"
#include "cma/promql.h"
#include "cma/restmapper.h"
#include "cma/router.h"
#include "cma/rule.h"
#include "cma/server.h"
#include "cma/str.h"
#include "explain_trace.h"

#define MAX_LINES 200                       /* per section; the rest are counted */
#define SECTION_MAX_BYTES ((size_t)4 << 20) /* a section's ceiling */
#define MAX_QUERY_PARAMS 64
#define MAX_NOTED_NAMES 20 /* distinct series names described per rule */

/* A recording backend: what it wraps, and the trace it writes to. */
struct recorder {
    struct cma_explain *ex;
    struct cma_backend inner;
};

struct cma_explain {
    struct cma_buf sec[CMA_EX__COUNT];
    size_t n_lines[CMA_EX__COUNT];
    size_t n_cut[CMA_EX__COUNT]; /* lines over MAX_LINES, counted only */
    struct recorder app_rec;     /* around the app's backend */
    struct recorder rule_rec;    /* around a rule's own backend (cma_explain_backend) */
    struct cma_backend rule_backend;
    /* ?explain=true (cma_api_explain_param): the report shows only what the explained
     * request's own authorization covers. namespace_ is the namespace it reads (NULL:
     * cluster-scoped); ns_label the label MetricRules are enforced with. */
    bool scoped;
    const char *namespace_;
    const char *ns_label;
    size_t n_hidden; /* scoped: series of the backend's answer not shown */
};

static const char *const SECTION_TITLES[CMA_EX__COUNT] = {
    "rule",
    "catalog entry",
    "objects",
    "query",
    "backend answer (every series, before the request's filter)",
    "left out of the answer",
    "why",
};

/* ---- sections ---- */

static void vaddf(struct cma_explain *ex, enum cma_explain_section s, const char *fmt, va_list ap)
    __attribute__((format(printf, 3, 0)));

static void vaddf(struct cma_explain *ex, enum cma_explain_section s, const char *fmt, va_list ap)
{
    struct cma_buf *b = &ex->sec[s];
    if (ex->n_lines[s] >= MAX_LINES || b->len > SECTION_MAX_BYTES / 2) {
        ex->n_cut[s]++;
        return;
    }
    ex->n_lines[s]++;
    if (cma_buf_appends(b, "  ") == CMA_OK && cma_buf_vprintf(b, fmt, ap) == CMA_OK)
        cma_buf_appendc(b, '\n');
}

void cma_explain_addf(struct cma_explain *ex, enum cma_explain_section s, const char *fmt, ...)
{
    if (!ex)
        return;
    va_list ap;
    va_start(ap, fmt);
    vaddf(ex, s, fmt, ap);
    va_end(ap);
}

/* `{a="1",b="2"}` into out (cut with "..." when it does not fit). */
static const char *format_labels(const struct cma_sample *s, char *out, size_t len)
{
    size_t used = 0;
    int n = snprintf(out, len, "{");
    for (size_t i = 0; n >= 0 && i < s->n_labels && (used += (size_t)n) < len; i++)
        n = snprintf(out + used, len - used, "%s%s=\"%s\"", i ? "," : "", s->labels[i].name,
                     s->labels[i].value);
    if (n >= 0 && used < len)
        used += (size_t)n;
    if (used + 2 > len) {
        snprintf(out + len - 5, 5, "...}");
        return out;
    }
    snprintf(out + used, len - used, "}");
    return out;
}

void cma_explain_sample(struct cma_explain *ex, enum cma_explain_section s,
                        const struct cma_sample *sample, const char *why)
{
    if (!ex)
        return;
    char labels[2048], when[21], value[32];
    if (isnan(sample->value)) /* Prometheus's spelling, not printf's */
        snprintf(value, sizeof value, "NaN");
    else if (isinf(sample->value))
        snprintf(value, sizeof value, "%cInf", sample->value < 0 ? '-' : '+');
    else
        snprintf(value, sizeof value, "%.15g", sample->value);
    cma_explain_addf(ex, s, "%s %s @ %s%s%s", format_labels(sample, labels, sizeof labels), value,
                     cma_clock_format_rfc3339(sample->timestamp_ms, when), why ? ": " : "",
                     why ? why : "");
}

static const char *rule_list(const struct cma_rule *r)
{
    return r->kind == CMA_RULE_CUSTOM ? "rules" : "externalRules";
}

/* The index of a MetricRule's rule r in its spec.rules / spec.externalRules. A merged ruleset
 * (metricrule_ctl.h) renumbers its rules (index is the position in the merge) and keeps each
 * MetricRule's rules together, in spec order, with one owner record: so it is r's distance from
 * the first rule of rs with the same owner. r->index when r is not one of rs's rules. */
static size_t spec_index(const struct cma_ruleset *rs, const struct cma_rule *r)
{
    const struct cma_rule *rules = NULL;
    size_t n = 0;
    if (rs) {
        rules = r->kind == CMA_RULE_CUSTOM ? rs->rules : rs->external_rules;
        n = r->kind == CMA_RULE_CUSTOM ? rs->n_rules : rs->n_external_rules;
    }
    size_t first = 0;
    for (size_t i = 0; i < n; i++) {
        if (rules[i].owner != r->owner)
            first = i + 1;
        else if (&rules[i] == r)
            return i - first;
    }
    return r->index;
}

/* A config rule answered: does a MetricRule of the request's namespace define the same metric
 * (the conflict the config files win)? Only that namespace's is looked up. */
static void explain_conflict(struct cma_explain *ex, const struct cma_catalog *cat,
                             const struct cma_catalog_entry *entry)
{
    if (entry->rule->owner || !ex->namespace_ || !ex->namespace_[0])
        return;
    const struct cma_catalog_entry *mr = cma_catalog_lookup_owner(
        cat, entry->resource, entry->namespaced, entry->metric, ex->namespace_);
    if (!mr || !mr->rule->owner)
        return;
    const struct cma_rule *r = mr->rule;
    cma_explain_addf(ex, CMA_EX_RULE,
                     "MetricRule %s/%s (spec.%s[%zu]) of this namespace defines %s too: the config "
                     "files' rule wins the conflict",
                     r->owner->namespace_, r->owner->name, rule_list(r),
                     spec_index(cma_catalog_rules(cat), r), entry->metric);
}

void cma_explain_entry(struct cma_explain *ex, const struct cma_catalog *cat,
                       const struct cma_catalog_entry *entry)
{
    if (!ex)
        return;
    const struct cma_rule *r = entry->rule;
    const struct cma_config_rule *c = r->cfg;
    if (r->owner) /* a MetricRule's rule: its object, and the enforced seriesQuery */
        cma_explain_addf(
            ex, CMA_EX_RULE, "MetricRule %s/%s (spec.%s[%zu]), every query enforced with %s=\"%s\"",
            r->owner->namespace_, r->owner->name, rule_list(r),
            spec_index(cma_catalog_rules(cat), r), r->owner->label, r->owner->namespace_);
    else
        cma_explain_addf(ex, CMA_EX_RULE, "%s:%u:%u (%s[%zu])", c->pos.file, c->pos.line,
                         c->pos.column, rule_list(r), r->index);
    cma_explain_addf(ex, CMA_EX_RULE, "seriesQuery: %s", r->series_query);
    cma_explain_addf(ex, CMA_EX_RULE, "metricsQuery: %s",
                     c->metrics_query.s ? c->metrics_query.s : "");
    explain_conflict(ex, cat, entry);
    char gr[300] = "", when[21];
    if (entry->resource)
        cma_restmapper_group_resource(entry->resource, gr, sizeof gr);
    const char *scope = entry->namespaced ? " (namespaced)" : " (cluster-scoped)";
    cma_explain_addf(ex, CMA_EX_ENTRY, "%s%s metric %s <- series %s",
                     entry->resource ? gr : "external", entry->resource ? scope : "", entry->metric,
                     entry->series);
    cma_explain_addf(ex, CMA_EX_ENTRY,
                     "catalog of the relist at %s: %zu custom, %zu external "
                     "metrics",
                     cma_clock_format_rfc3339(cma_catalog_built_ms(cat), when),
                     cma_catalog_count(cat), cma_catalog_count_external(cat));
}

void cma_explain_names(struct cma_explain *ex, const char *const *names, size_t n)
{
    if (!ex)
        return;
    char line[4096];
    size_t used = 0;
    line[0] = '\0';
    for (size_t i = 0; i < n && used + 8 < sizeof line; i++) {
        int k = snprintf(line + used, sizeof line - used, "%s%s", i ? ", " : "", names[i]);
        used += k > 0 ? (size_t)k : 0;
    }
    if (used >= sizeof line)
        snprintf(line + sizeof line - 5, 5, "...");
    cma_explain_addf(ex, CMA_EX_OBJECTS, "%zu object%s: %s", n, n == 1 ? "" : "s",
                     n ? line : "none (an empty list is the answer)");
}

/* ---- the recording backend ---- */

static bool keep_all(void *ctx, const struct cma_label_view *labels, size_t n_labels)
{
    (void)ctx;
    (void)labels;
    (void)n_labels;
    return true;
}

/* Whether the request's own filter keeps sample s. */
static bool request_keeps(const struct cma_keep *keep, const struct cma_sample *s)
{
    if (!keep || !keep->fn)
        return true;
    struct cma_label_view views[256];
    size_t n = s->n_labels < 256 ? s->n_labels : 256;
    for (size_t i = 0; i < n; i++)
        views[i] = (struct cma_label_view){s->labels[i].name, strlen(s->labels[i].name),
                                           s->labels[i].value, strlen(s->labels[i].value)};
    return keep->fn(keep->ctx, views, n);
}

static void record_answer(struct cma_explain *ex, const struct cma_prom_result *all,
                          const struct cma_keep *keep)
{
    size_t hidden = 0;
    for (size_t i = 0; i < all->n_samples; i++) {
        const struct cma_sample *s = &all->samples[i];
        bool kept = all->type == CMA_PROM_SCALAR || request_keeps(keep, s);
        if (!kept && ex->scoped) { /* labels of objects the request did not name: not shown */
            hidden++;
            continue;
        }
        cma_explain_sample(ex, CMA_EX_SAMPLES, s, NULL);
        if (!kept)
            cma_explain_sample(ex, CMA_EX_DROPPED, s,
                               "no matching object (its labels name none of the requested "
                               "objects)");
    }
    if (hidden) {
        ex->n_hidden += hidden;
        cma_explain_addf(ex, CMA_EX_DROPPED,
                         "%zu series name none of the requested objects (not shown with "
                         "explain=true)",
                         hidden);
    }
    if (all->n_samples == 0)
        cma_explain_addf(ex, CMA_EX_SAMPLES,
                         "(none: no series has a sample at the query time; "
                         "Prometheus looks back 5m by default)");
}

static enum cma_errc record_query(void *ctx, const char *promql, int64_t time_ms,
                                  const struct cma_keep *keep, struct cma_prom_result **ret,
                                  struct cma_err *reterr)
{
    struct recorder *rec = ctx;
    struct cma_explain *ex = rec->ex;
    /* no id: never shared, always sent; the request's deadline and cancellation kept */
    struct cma_keep every = {keep_all, NULL, NULL, keep ? keep->call : NULL,
                             keep ? keep->tenant : NULL};
    struct cma_prom_result *all = NULL;
    char when[21];
    int64_t t0 = cma_clock_mono_ms();
    enum cma_errc rc = cma_backend_query(&rec->inner, promql, time_ms, &every, &all, reterr);
    int64_t took = cma_clock_mono_ms() - t0;
    cma_explain_addf(ex, CMA_EX_QUERY, "promql: %s", promql);
    const char *tenant = keep ? keep->tenant : NULL;
    cma_explain_addf(ex, CMA_EX_QUERY, "backend: %s%s%s%s, instant query at %s: %lld ms, %s",
                     cma_backend_name(&rec->inner), tenant ? " (tenant " : "", tenant ? tenant : "",
                     tenant ? ")" : "", cma_clock_format_rfc3339(time_ms, when), (long long)took,
                     rc == CMA_OK ? "answered" : "failed");
    if (rc != CMA_OK) {
        cma_explain_addf(ex, CMA_EX_QUERY, "error: %s", reterr->msg);
        return rc;
    }
    cma_explain_addf(ex, CMA_EX_QUERY, "%zu series in the answer", all->n_samples);
    record_answer(ex, all, keep);
    rc = cma_prom_result_filter(all, keep ? keep->fn : NULL, keep ? keep->ctx : NULL, ret, reterr);
    cma_prom_result_free(all);
    return rc;
}

static enum cma_errc record_series(void *ctx, const char *match, int64_t start_ms, int64_t end_ms,
                                   const char *tenant, cma_series_fn fn, void *fn_ctx,
                                   struct cma_err *reterr)
{
    struct recorder *rec = ctx;
    return cma_backend_series_as(&rec->inner, tenant, match, start_ms, end_ms, fn, fn_ctx, reterr);
}

static const char *record_name(const void *ctx)
{
    const struct recorder *rec = ctx;
    return cma_backend_name(&rec->inner);
}

static const struct cma_backend_ops RECORD_OPS = {record_query, record_series, record_name};

const struct cma_backend *cma_explain_backend(struct cma_explain *ex, const struct cma_backend *b)
{
    if (!ex || !b)
        return b;
    ex->rule_rec = (struct recorder){ex, *b};
    ex->rule_backend = (struct cma_backend){&RECORD_OPS, &ex->rule_rec};
    return &ex->rule_backend;
}

/* ---- why nothing matches: each rule's series, folded again ---- */

struct why_rule {
    struct cma_explain *ex;
    const struct cma_rule *rule;
    const struct cma_restmapper *mapper;
    const struct cma_api_resource *want; /* NULL: external */
    const char *metric;
    size_t n_series, n_named, n_mapped;
    char *noted[MAX_NOTED_NAMES]; /* series names already described */
    size_t n_noted;
    struct cma_buf scratch;
};

static bool names_equal(const struct why_rule *w, const char *a, const char *b)
{
    return w->want ? strcmp(a, b) == 0 : strcasecmp(a, b) == 0;
}

/* The series name looks like the metric (either contains the other, ignoring case). */
static bool resembles(const char *series, const char *metric)
{
    return strcasestr(series, metric) || strcasestr(metric, series);
}

/* True the first time a series name is seen (then it is described); false after, or when
 * MAX_NOTED_NAMES were described already. */
static bool first_time(struct why_rule *w, const char *name, size_t len)
{
    for (size_t i = 0; i < w->n_noted; i++)
        if (strlen(w->noted[i]) == len && memcmp(w->noted[i], name, len) == 0)
            return false;
    if (w->n_noted == MAX_NOTED_NAMES)
        return false;
    w->noted[w->n_noted] = cma_strndup(name, len);
    return w->noted[w->n_noted++] != NULL;
}

/* The labels of a series that map to some resource, as "label -> resource" (for the note). */
static void describe_labels(struct why_rule *w, const struct cma_label_view *labels, size_t n,
                            char *out, size_t len)
{
    size_t used = 0;
    out[0] = '\0';
    for (size_t i = 0; i < n && used < len; i++) {
        const struct cma_api_resource *r = cma_resmap_resource_for_label(
            w->rule->resmap, w->mapper, labels[i].name, labels[i].name_len);
        char gr[200] = "";
        if (r)
            cma_restmapper_group_resource(r, gr, sizeof gr);
        int k = snprintf(out + used, len - used, "%s%.*s%s%s", used ? ", " : "",
                         (int)labels[i].name_len, labels[i].name, r ? " -> " : "", gr);
        used += k > 0 ? (size_t)k : 0;
    }
}

/* A series whose API name is the metric: does one of its labels map to the resource? */
static void check_resource(struct why_rule *w, const char *metric, size_t len,
                           const struct cma_label_view *labels, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (cma_resmap_resource_for_label(w->rule->resmap, w->mapper, labels[i].name,
                                          labels[i].name_len) == w->want) {
            w->n_mapped++;
            return;
        }
    if (!first_time(w, metric, len))
        return;
    char gr[200], desc[1024];
    cma_restmapper_group_resource(w->want, gr, sizeof gr);
    describe_labels(w, labels, n, desc, sizeof desc);
    cma_explain_addf(w->ex, CMA_EX_WHY,
                     "series %.*s becomes %s, but the resource label does not map: none of its "
                     "labels maps to %s through resources.overrides/template (its labels: %s)",
                     (int)len, metric, w->metric, gr, desc[0] ? desc : "none");
}

static int why_series(void *ctx, const char *metric, size_t len,
                      const struct cma_label_view *labels, size_t n_labels)
{
    struct why_rule *w = ctx;
    w->n_series++;
    cma_buf_clear(&w->scratch);
    char series[512];
    snprintf(series, sizeof series, "%.*s", (int)len, metric);
    bool looks = resembles(series, w->metric);
    if (!cma_naming_accepts(w->rule->naming, metric, len)) {
        if (looks && first_time(w, metric, len))
            cma_explain_addf(w->ex, CMA_EX_WHY,
                             "series %s is dropped by seriesFilters or name.matches (not "
                             "accepted)",
                             series);
        return 0;
    }
    struct cma_err err;
    cma_err_clear(&err);
    if (cma_naming_metric_name(w->rule->naming, metric, len, &w->scratch, &err) != CMA_OK) {
        if (looks && first_time(w, metric, len))
            cma_explain_addf(w->ex, CMA_EX_WHY, "series %s: name.as gives no metric name: %s",
                             series, err.msg);
        return 0;
    }
    if (!names_equal(w, cma_buf_str(&w->scratch), w->metric)) {
        if (looks && first_time(w, metric, len))
            cma_explain_addf(w->ex, CMA_EX_WHY, "series %s is named %s by name.matches/as, not %s",
                             series, cma_buf_str(&w->scratch), w->metric);
        return 0;
    }
    w->n_named++;
    if (w->want)
        check_resource(w, metric, len, labels, n_labels);
    return 0;
}

static int64_t max_age_ms(const struct cma_app *app)
{
    const struct cma_options *o = app->opts;
    if (!o)
        return 600000;
    return o->metrics_max_age_ms ? o->metrics_max_age_ms : o->metrics_relist_interval_ms;
}

/* Series counted over every rule: those named as the metric, those of them also mapped. */
struct why_total {
    size_t named, mapped;
};

/* query with label="value" added to every selector (cma_promql_enforce), as canonical text.
 * Caller frees; NULL with err set when query is not PromQL (or on a limit). */
static char *enforced_query(const char *query, const char *label, const char *value,
                            struct cma_err *err)
{
    struct cma_promql *q = NULL;
    struct cma_buf b;
    cma_buf_init(&b, 2 * CMA_PROMQL_MAX_BYTES);
    enum cma_errc rc = cma_promql_parse(query, strlen(query), &q, err);
    if (rc == CMA_OK)
        rc = cma_promql_enforce(q, label, value, NULL, err);
    if (rc == CMA_OK && (rc = cma_promql_print(q, &b)) != CMA_OK)
        cma_err_set(err, rc, "the enforced seriesQuery does not fit in %zu bytes", b.max);
    cma_promql_free(q);
    char *text = rc == CMA_OK ? cma_buf_take(&b) : NULL;
    cma_buf_done(&b);
    if (rc == CMA_OK && !text)
        cma_err_set(err, CMA_ERR_NOMEM, "out of memory");
    return text;
}

/* The seriesQuery explain lists for r (caller frees; NULL with err set): the rule's own; in a
 * report scoped to a namespace (explain=true), with the namespace label of that namespace added
 * to every selector, so that only series of the request's namespace are counted and named. */
static char *listing_query(const struct cma_explain *ex, const struct cma_rule *r,
                           struct cma_err *err)
{
    /* a MetricRule's seriesQuery is enforced already (metricrule_ctl.h) */
    if (!r->owner && ex->scoped && ex->namespace_ && ex->ns_label)
        return enforced_query(r->series_query, ex->ns_label, ex->namespace_, err);
    char *text = cma_strdup(r->series_query);
    if (!text)
        cma_err_set(err, CMA_ERR_NOMEM, "out of memory");
    return text;
}

/* How the why section names r, one of rs's rules: "rules[0] (file:line)", "MetricRule ns/name
 * spec.rules[0]". */
static const char *rule_title(const struct cma_ruleset *rs, const struct cma_rule *r, char *out,
                              size_t len)
{
    const struct cma_config_rule *c = r->cfg;
    if (r->owner)
        snprintf(out, len, "MetricRule %s/%s spec.%s[%zu]", r->owner->namespace_, r->owner->name,
                 rule_list(r), spec_index(rs, r));
    else
        snprintf(out, len, "%s[%zu] (%s:%u)", rule_list(r), r->index, c->pos.file, c->pos.line);
    return out;
}

/* Whether the why section lists r: every config rule; a MetricRule's only for a request in its
 * own namespace (the only one it serves), so another namespace's never appears. */
static bool may_list(const struct cma_explain *ex, const struct cma_rule *r)
{
    if (!r->series_query[0]) /* an empty one lists nothing (warned at load) */
        return false;
    return !r->owner || (ex->namespace_ && strcmp(r->owner->namespace_, ex->namespace_) == 0);
}

/* Lists one rule's seriesQuery and says what became of the series; adds to *total. */
static void why_rule(struct cma_explain *ex, const struct cma_app *app,
                     const struct cma_catalog *cat, const struct cma_rule *r,
                     const struct cma_api_resource *resource, const char *metric,
                     struct why_total *total)
{
    struct why_rule w = {
        .ex = ex, .rule = r, .mapper = cma_catalog_mapper(cat), .want = resource, .metric = metric};
    cma_buf_init(&w.scratch, 64 * 1024);
    struct cma_err err;
    cma_err_clear(&err);
    int64_t now = cma_clock_wall_ms();
    char title[512];
    rule_title(app->rules, r, title, sizeof title);
    const struct cma_backend *b = r->backend.queries ? r->backend.queries : &app->backend;
    char *listed = listing_query(ex, r, &err);
    enum cma_errc rc = listed
                           ? cma_backend_series_as(b, r->backend.tenant, listed,
                                                   now - max_age_ms(app), now, why_series, &w, &err)
                           : err.code;
    const char *shown = listed ? listed : r->series_query;
    if (rc != CMA_OK)
        cma_explain_addf(ex, CMA_EX_WHY, "%s: seriesQuery %s: listing failed: %s", title, shown,
                         err.msg);
    else
        cma_explain_addf(ex, CMA_EX_WHY,
                         "%s: seriesQuery %s finds %zu series, %zu named %s, %zu "
                         "of them with a label that maps to the resource",
                         title, shown, w.n_series, w.n_named, metric,
                         resource ? w.n_mapped : w.n_named);
    free(listed);
    total->named += w.n_named;
    total->mapped += resource ? w.n_mapped : w.n_named;
    for (size_t i = 0; i < w.n_noted; i++)
        free(w.noted[i]);
    cma_buf_done(&w.scratch);
}

/* ---- the MetricRules of the request's namespace, as their status says ---- */

#define METRICRULES_PATH "/apis/metrics.custom-metrics-adapter.dev/v1alpha1/namespaces/"
#define METRICRULES_MAX_BYTES ((size_t)16 << 20)

static enum cma_errc append_escaped(struct cma_buf *b, const char *s);

static const char *json_str(json_t *obj, const char *key)
{
    const char *v = json_string_value(json_object_get(obj, key));
    return v ? v : "";
}

/* The Accepted condition of a MetricRule's status (borrowed), NULL when there is none. */
static json_t *accepted_condition(json_t *status)
{
    size_t i;
    json_t *c;
    json_array_foreach(json_object_get(status, "conditions"), i, c)
    {
        if (strcmp(json_str(c, "type"), "Accepted") == 0)
            return c;
    }
    return NULL;
}

/* status.metrics on one line (cut with "..."); "" when it has none. */
static const char *metrics_of(json_t *status, char *line, size_t len)
{
    size_t used = 0, i;
    json_t *v;
    line[0] = '\0';
    json_array_foreach(json_object_get(status, "metrics"), i, v)
    {
        const char *name = json_string_value(v);
        int k = name && used < len
                    ? snprintf(line + used, len - used, "%s%s", used ? ", " : "", name)
                    : 0;
        used += k > 0 ? (size_t)k : 0;
    }
    if (used >= len && len > 4)
        snprintf(line + len - 4, 4, "...");
    return line;
}

/* Whether the rules the request used (a merged ruleset: metricrule_ctl.h) hold a rule of the
 * MetricRule ns/name: the adapter accepted and serves it. */
static bool is_served(const struct cma_ruleset *rs, const char *ns, const char *name)
{
    for (int kind = 0; rs && kind < 2; kind++) {
        const struct cma_rule *rules = kind ? rs->external_rules : rs->rules;
        size_t n = kind ? rs->n_external_rules : rs->n_rules;
        for (size_t i = 0; i < n; i++) {
            const struct cma_rule_owner *o = rules[i].owner;
            if (o && strcmp(o->namespace_, ns) == 0 && strcmp(o->name, name) == 0)
                return true;
        }
    }
    return false;
}

/* The compiler's error for the MetricRule's spec (what the adapter's status says as
 * InvalidSpec), into why; false when it compiles. */
static bool spec_error(const struct cma_explain *ex, json_t *item, char *why, size_t len)
{
    char *spec = json_dumps(json_object_get(item, "spec"), JSON_COMPACT | JSON_ENCODE_ANY);
    struct cma_metricrule_compiled *c = NULL;
    struct cma_err err;
    cma_err_clear(&err);
    enum cma_errc rc =
        spec ? cma_metricrule_compile(ex->namespace_, ex->ns_label, spec, strlen(spec), &c, &err)
             : cma_err_set(&err, CMA_ERR_NOMEM, "out of memory");
    free(spec);
    cma_metricrule_compiled_free(c);
    if (rc == CMA_OK)
        return false;
    snprintf(why, len, "%s", err.msg);
    return true;
}

/* One line for a MetricRule of the namespace: refused (its status, else the compiler's error
 * now), served, or not served yet and why that may be. */
static void report_metricrule(struct cma_explain *ex, const struct cma_app *app, json_t *item)
{
    json_t *meta = json_object_get(item, "metadata"), *status = json_object_get(item, "status");
    const char *name = json_str(meta, "name"), *ns = ex->namespace_;
    long long gen = (long long)json_integer_value(json_object_get(meta, "generation"));
    long long seen = (long long)json_integer_value(json_object_get(status, "observedGeneration"));
    json_t *cond = accepted_condition(status);
    bool refused = cond && seen >= gen && strcmp(json_str(cond, "status"), "True") != 0;
    char text[1024];
    if (refused)
        cma_explain_addf(ex, CMA_EX_WHY, "MetricRule %s/%s: not accepted (%s): %s", ns, name,
                         json_str(cond, "reason"), json_str(cond, "message"));
    else if (is_served(app->rules, ns, name))
        cma_explain_addf(ex, CMA_EX_WHY,
                         "MetricRule %s/%s: accepted and served (its rules of this kind are listed "
                         "above; the metrics its status names: %s)",
                         ns, name, metrics_of(status, text, sizeof text)[0] ? text : "none yet");
    else if (spec_error(ex, item, text, sizeof text))
        cma_explain_addf(ex, CMA_EX_WHY, "MetricRule %s/%s: not accepted (InvalidSpec): %s", ns,
                         name, text);
    else if (cond && seen < gen)
        cma_explain_addf(ex, CMA_EX_WHY,
                         "MetricRule %s/%s: generation %lld is not processed yet (its status is "
                         "of generation %lld: Accepted=%s, %s)",
                         ns, name, gen, seen, json_str(cond, "status"), json_str(cond, "reason"));
    else
        cma_explain_addf(ex, CMA_EX_WHY,
                         "MetricRule %s/%s: not served: the adapter has not accepted it (not "
                         "processed yet, a backend MetricRules may not use, a limit of the "
                         "namespace or --metric-rules-namespace-selector; its status says which "
                         "once written)",
                         ns, name);
}

/* GET of the MetricRuleList of namespace ns through the adapter's own kube client: the decoded
 * list (caller json_decref()s), or NULL with the reason in why. */
static json_t *list_metricrules(const struct cma_app *app, const char *ns, char *why, size_t len)
{
    struct cma_buf path, body;
    cma_buf_init(&path, 4096);
    cma_buf_init(&body, METRICRULES_MAX_BYTES);
    struct cma_err err;
    cma_err_clear(&err);
    long status = 0;
    enum cma_errc rc = cma_buf_appends(&path, METRICRULES_PATH);
    if (rc == CMA_OK)
        rc = append_escaped(&path, ns);
    if (rc == CMA_OK)
        rc = cma_buf_appends(&path, "/metricrules");
    if (rc == CMA_OK)
        rc = cma_kube_request(app->kube, "GET", cma_buf_str(&path), NULL, 0, &body, &status, &err);
    json_t *list = rc == CMA_OK && status == 200
                       ? json_loadb(body.ptr ? body.ptr : "", body.len, 0, NULL)
                       : NULL;
    if (rc != CMA_OK)
        snprintf(why, len, "%s", err.msg[0] ? err.msg : "out of memory");
    else if (status != 200)
        snprintf(why, len, "HTTP %ld from %s", status, cma_buf_str(&path));
    else if (!json_is_array(json_object_get(list, "items")))
        snprintf(why, len, "the answer is no list");
    if (!json_is_array(json_object_get(list, "items"))) {
        json_decref(list);
        list = NULL;
    }
    cma_buf_done(&body);
    cma_buf_done(&path);
    return list;
}

/* Lists the MetricRules of the request's namespace through the Kubernetes API (the adapter's
 * own client and rights) and reports each one: why one that should serve the metric does not
 * (not accepted, a conflict another source won, not processed yet), or that it is served. Only with
 * --enable-metric-rules and a namespaced request; never another namespace's. */
static void why_metricrules(struct cma_explain *ex, const struct cma_app *app)
{
    const char *ns = ex->namespace_;
    if (!ns || !ns[0] || strcmp(ns, "*") == 0 || !app->kube || !app->opts ||
        !app->opts->enable_metric_rules)
        return;
    char why[1024];
    json_t *list = list_metricrules(app, ns, why, sizeof why);
    json_t *items = json_object_get(list, "items");
    if (!list)
        cma_explain_addf(ex, CMA_EX_WHY, "MetricRules of namespace %s: not listed: %s", ns, why);
    else if (json_array_size(items) == 0)
        cma_explain_addf(ex, CMA_EX_WHY, "MetricRules of namespace %s: none", ns);
    size_t i;
    json_t *item;
    json_array_foreach(items, i, item)
    {
        report_metricrule(ex, app, item);
    }
    json_decref(list);
}

/* The conclusion once every rule was listed. */
static void why_conclusion(struct cma_explain *ex, const struct cma_catalog *cat,
                           const struct cma_api_resource *resource, bool namespaced,
                           const char *metric, const struct why_total *total)
{
    char gr[200] = "", when[21];
    if (resource)
        cma_restmapper_group_resource(resource, gr, sizeof gr);
    if (resource && resource->namespaced != namespaced)
        cma_explain_addf(ex, CMA_EX_WHY,
                         "%s is %s in this cluster, and the request asks for it "
                         "%s a namespace",
                         gr, resource->namespaced ? "namespaced" : "cluster-scoped",
                         namespaced ? "in" : "without");
    if (total->named == 0)
        cma_explain_addf(ex, CMA_EX_WHY,
                         "no rule's seriesQuery finds a series that becomes "
                         "metric %s (within --metrics-max-age)",
                         metric);
    else if (total->mapped == 0)
        cma_explain_addf(ex, CMA_EX_WHY,
                         "series become metric %s, but none has a label that "
                         "maps to %s",
                         metric, gr);
    else if (!resource || resource->namespaced == namespaced)
        cma_explain_addf(ex, CMA_EX_WHY,
                         "the backend has such series now, but the catalog of "
                         "the relist at %s does not: they appeared since, or had no sample "
                         "within --metrics-max-age then; the next relist lists them",
                         cma_clock_format_rfc3339(cma_catalog_built_ms(cat), when));
}

void cma_explain_why_missing(struct cma_explain *ex, const struct cma_app *app,
                             const struct cma_catalog *cat, const struct cma_api_resource *resource,
                             bool namespaced, const char *metric)
{
    if (!ex || !app->rules)
        return;
    const struct cma_ruleset *rs = app->rules;
    const struct cma_rule *rules = resource ? rs->rules : rs->external_rules;
    size_t n = resource ? rs->n_rules : rs->n_external_rules;
    struct why_total total = {0, 0};
    cma_explain_addf(ex, CMA_EX_RULE, "none: no catalog entry serves %s (see why)", metric);
    struct cma_discovery_pending pending;
    if (cma_api_pending_backend(app, cat, !resource, &pending)) {
        char gr[200] = "external metrics";
        if (resource)
            cma_restmapper_group_resource(resource, gr, sizeof gr);
        struct cma_err err;
        cma_err_clear(&err);
        cma_api_pending_error(&pending, metric, gr, &err);
        cma_explain_addf(ex, CMA_EX_WHY, "%s", err.msg);
    }
    for (size_t i = 0; i < n; i++)
        if (may_list(ex, &rules[i]))
            why_rule(ex, app, cat, &rules[i], resource, metric, &total);
    why_metricrules(ex, app);
    why_conclusion(ex, cat, resource, namespaced, metric, &total);
}

/* ---- one explained request ---- */

/* A target split into its path and decoded query parameters. */
struct target {
    char *path;
    struct cma_kv kv[MAX_QUERY_PARAMS];
    size_t n;
};

static void target_done(struct target *t)
{
    free(t->path);
    for (size_t i = 0; i < t->n; i++) {
        free(t->kv[i].key);
        free(t->kv[i].value);
    }
    memset(t, 0, sizeof(*t));
}

/* One "key=value" (or "key") of a query string, decoded as a server decodes it. */
static enum cma_errc parse_param(const char *p, size_t len, struct target *t, struct cma_err *err)
{
    if (t->n == MAX_QUERY_PARAMS)
        return cma_err_set(err, CMA_ERR_BAD_REQUEST, "more than %d query parameters",
                           MAX_QUERY_PARAMS);
    const char *eq = memchr(p, '=', len);
    size_t klen = eq ? (size_t)(eq - p) : len;
    struct cma_kv *kv = &t->kv[t->n];
    enum cma_errc rc = cma_percent_decode(p, klen, true, &kv->key, err);
    if (rc == CMA_OK)
        rc = eq ? cma_percent_decode(eq + 1, len - klen - 1, true, &kv->value, err)
                : ((kv->value = cma_strdup("")) ? CMA_OK : CMA_ERR_NOMEM);
    if (rc != CMA_OK) {
        free(kv->key);
        free(kv->value);
        *kv = (struct cma_kv){NULL, NULL};
        return err->code ? err->code : cma_err_set(err, rc, "out of memory");
    }
    t->n++;
    return CMA_OK;
}

static enum cma_errc parse_target(const char *target, struct target *t, struct cma_err *err)
{
    memset(t, 0, sizeof(*t));
    if (!target || target[0] != '/')
        return cma_err_set(err, CMA_ERR_BAD_REQUEST,
                           "the path to explain must start with '/', as kubectl get --raw "
                           "takes it (e.g. /apis/custom.metrics.k8s.io/v1beta2/...)");
    const char *q = strchr(target, '?');
    t->path = cma_strndup(target, q ? (size_t)(q - target) : strlen(target));
    if (!t->path)
        return cma_err_set(err, CMA_ERR_NOMEM, "out of memory");
    enum cma_errc rc = CMA_OK;
    for (const char *p = q ? q + 1 : NULL; rc == CMA_OK && p && *p;) {
        const char *amp = strchr(p, '&');
        size_t len = amp ? (size_t)(amp - p) : strlen(p);
        if (len > 0)
            rc = parse_param(p, len, t, err);
        p = amp ? amp + 1 : NULL;
    }
    if (rc != CMA_OK) {
        cma_err_prefix(err, "the query string of the path to explain: ");
        target_done(t);
    }
    return rc;
}

/* Appends text with every line indented by two spaces. */
static void append_indented(struct cma_buf *out, const char *text)
{
    while (*text) {
        const char *nl = strchr(text, '\n');
        size_t len = nl ? (size_t)(nl - text) : strlen(text);
        cma_buf_appends(out, "  ");
        cma_buf_append(out, text, len);
        cma_buf_appendc(out, '\n');
        text += nl ? len + 1 : len;
    }
}

static enum cma_errc render(const struct cma_explain *ex, const char *target,
                            const struct cma_response *resp, struct cma_buf *out)
{
    cma_buf_printf(out, "explain: GET %s\n", target);
    if (ex->scoped)
        cma_buf_printf(out,
                       "scope: %s%s (explain=true shows what this request may read: no series, "
                       "objects or MetricRules of other namespaces)\n",
                       ex->namespace_ ? "namespace " : "cluster-scoped",
                       ex->namespace_ ? ex->namespace_ : "");
    for (int s = 0; s < CMA_EX__COUNT; s++) {
        if (ex->n_lines[s] == 0)
            continue;
        cma_buf_printf(out, "%s:\n", SECTION_TITLES[s]);
        cma_buf_appends(out, cma_buf_str(&ex->sec[s]));
        if (ex->n_cut[s])
            cma_buf_printf(out, "  ... and %zu more lines\n", ex->n_cut[s]);
    }
    cma_buf_printf(out, "answer: HTTP %d\n", resp->status);
    append_indented(out, cma_buf_str(&resp->body));
    return out->ptr ? CMA_OK : CMA_ERR_TOO_LARGE;
}

/* The namespace a metrics route reads, as its SubjectAccessReview names it (authz.c); NULL for
 * a cluster-scoped one or a path that is no route. */
static const char *route_namespace(const struct cma_route *route)
{
    if (!route)
        return NULL;
    if (route->kind == CMA_ROUTE_CUSTOM_NAMESPACE_METRIC && !route->namespace_)
        return route->name;
    return route->namespace_;
}

/* cma_explain_run, scoped (explain=true: only what the request's own authorization covers) or
 * not (the CLI, /debug/explain). The explained request works to app->call's deadline. */
static enum cma_errc run(const struct cma_app *app, const char *target, bool scoped,
                         struct cma_buf *out, int *ret_status, struct cma_err *reterr)
{
    struct target t;
    enum cma_errc rc = parse_target(target, &t, reterr);
    if (rc != CMA_OK)
        return rc;
    struct cma_route *route = NULL; /* the request's namespace (a bad path is the answer's) */
    struct cma_err ignored;
    cma_err_clear(&ignored);
    if (cma_router_parse(t.path, &route, &ignored) != CMA_OK)
        route = NULL;
    struct cma_explain ex = {.app_rec = {NULL, app->backend},
                             .scoped = scoped,
                             .namespace_ = route_namespace(route),
                             .ns_label = app->opts && app->opts->metric_rules_namespace_label
                                             ? app->opts->metric_rules_namespace_label
                                             : "namespace"};
    ex.app_rec.ex = &ex;
    for (int s = 0; s < CMA_EX__COUNT; s++)
        cma_buf_init(&ex.sec[s], SECTION_MAX_BYTES);
    struct cma_app traced = *app;
    traced.explain = &ex;
    traced.auth = NULL; /* the CLI has none; the debug path authorized /debug/explain */
    traced.metrics = NULL;
    traced.requests_total = traced.request_duration = NULL;
    traced.backend = (struct cma_backend){&RECORD_OPS, &ex.app_rec};
    struct cma_request req = {.method = "GET",
                              .path = t.path,
                              .query = t.kv,
                              .n_query = t.n,
                              .start_mono_ms = cma_clock_mono_ms(),
                              .call = app->call}; /* the outer request's deadline, if any */
    struct cma_response resp = {.status = 200, .content_type = "application/json"};
    cma_buf_init(&resp.body, CMA_BUF_DEFAULT_MAX);
    cma_app_handle(&traced, &req, &resp);
    *ret_status = resp.status;
    rc = render(&ex, target, &resp, out);
    if (rc != CMA_OK)
        cma_err_set(reterr, rc, "the report does not fit in %zu bytes", out->max);
    cma_buf_done(&resp.body);
    for (int s = 0; s < CMA_EX__COUNT; s++)
        cma_buf_done(&ex.sec[s]);
    cma_route_free(route);
    target_done(&t);
    return rc;
}

enum cma_errc cma_explain_run(const struct cma_app *app, const char *target, struct cma_buf *out,
                              int *ret_status, struct cma_err *reterr)
{
    return run(app, target, false, out, ret_status, reterr);
}

void cma_api_explain(struct cma_app *app, const struct cma_request *req, struct cma_response *resp)
{
    if (app->explain) {
        cma_api_reply_errorf(resp, CMA_ERR_BAD_REQUEST, "/debug/explain cannot explain itself");
        return;
    }
    const char *target = cma_request_query(req, "path");
    if (!target || !target[0]) {
        cma_api_reply_errorf(resp, CMA_ERR_BAD_REQUEST,
                             "the path parameter is required: /debug/explain?path=<the request "
                             "path, query string included, URL-encoded>");
        return;
    }
    struct cma_err err;
    cma_err_clear(&err);
    int status = 0;
    cma_buf_clear(&resp->body);
    if (cma_explain_run(app, target, &resp->body, &status, &err) != CMA_OK) {
        cma_api_fail(resp, req, err.code, &err);
        return;
    }
    resp->status = 200;
    resp->content_type = "text/plain; charset=utf-8";
}

/* ---- explain=true on the metrics path itself ---- */

/* strconv.ParseBool, as Kubernetes reads boolean query parameters. false when s is not one. */
static bool parse_bool(const char *s, bool *ret)
{
    static const char *const yes[] = {"1", "t", "T", "true", "TRUE", "True"};
    static const char *const no[] = {"0", "f", "F", "false", "FALSE", "False"};
    for (size_t i = 0; i < sizeof yes / sizeof yes[0]; i++) {
        if (strcmp(s, yes[i]) == 0 || strcmp(s, no[i]) == 0) {
            *ret = strcmp(s, yes[i]) == 0;
            return true;
        }
    }
    return false;
}

/* Appends s percent-encoded for a query string (RFC 3986 unreserved characters kept). */
static enum cma_errc append_escaped(struct cma_buf *b, const char *s)
{
    static const char hex[] = "0123456789ABCDEF";
    enum cma_errc rc = CMA_OK;
    for (const unsigned char *p = (const unsigned char *)s; rc == CMA_OK && *p; p++) {
        bool plain = (*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') ||
                     (*p >= '0' && *p <= '9') || strchr("-._~", *p);
        char esc[3] = {'%', hex[*p >> 4], hex[*p & 15]};
        rc = plain ? cma_buf_appendc(b, (char)*p) : cma_buf_append(b, esc, 3);
    }
    return rc;
}

/* The request as a target for run(): its raw path and its query parameters but `explain`,
 * encoded again. */
static enum cma_errc request_target(const struct cma_request *req, struct cma_buf *out)
{
    enum cma_errc rc = cma_buf_appends(out, req->path);
    char sep = '?';
    for (size_t i = 0; rc == CMA_OK && i < req->n_query; i++) {
        const struct cma_kv *kv = &req->query[i];
        if (strcmp(kv->key, "explain") == 0)
            continue;
        rc = cma_buf_appendc(out, sep);
        sep = '&';
        if (rc == CMA_OK)
            rc = append_escaped(out, kv->key);
        if (rc == CMA_OK)
            rc = cma_buf_appendc(out, '=');
        if (rc == CMA_OK)
            rc = append_escaped(out, kv->value ? kv->value : "");
    }
    return rc;
}

bool cma_api_explain_param(struct cma_app *app, const struct cma_request *req,
                           struct cma_response *resp)
{
    const struct cma_options *o = app->opts;
    const char *value = cma_request_query(req, "explain");
    if (!value || app->explain || !o || !(o->enable_metric_rules || o->enable_explain))
        return false;
    bool on = false;
    if (!parse_bool(value, &on)) {
        cma_api_reply_errorf(resp, CMA_ERR_BAD_REQUEST,
                             "explain: invalid value \"%s\": true or false (explain=true answers "
                             "the request's explain report as text)",
                             value);
        return true;
    }
    if (!on)
        return false;
    struct cma_err err;
    cma_err_clear(&err);
    struct cma_buf target;
    cma_buf_init(&target, CMA_BUF_DEFAULT_MAX);
    int status = 0;
    cma_buf_clear(&resp->body);
    enum cma_errc rc = request_target(req, &target);
    if (rc != CMA_OK)
        cma_err_set(&err, rc, "the request is too long to explain");
    else
        rc = run(app, cma_buf_str(&target), true, &resp->body, &status, &err);
    cma_buf_done(&target);
    if (rc != CMA_OK) {
        cma_api_fail(resp, req, err.code, &err);
        return true;
    }
    resp->status = 200;
    resp->content_type = "text/plain; charset=utf-8";
    return true;
}

/* ---- the CLI's one relist ---- */

enum cma_errc cma_explain_prepare(const struct cma_backend *backends, size_t n_backends,
                                  struct cma_kube *kube, const struct cma_ruleset *rules,
                                  int64_t max_age_ms, struct cma_catalog_store *store,
                                  struct cma_err *reterr)
{
    struct cma_api_resources *res = NULL;
    struct cma_restmapper *mapper = NULL;
    enum cma_errc rc = cma_kube_discover(kube, &res, reterr);
    if (rc == CMA_OK)
        rc = cma_restmapper_new(res, &mapper, reterr);
    if (rc != CMA_OK) {
        cma_err_prefix(reterr, "kube API discovery: ");
        return rc;
    }
    struct cma_catalog *c = NULL;
    struct cma_relist_backends bk = {backends, n_backends, NULL, NULL};
    rc = cma_discovery_relist_backends(&bk, rules, mapper, cma_clock_wall_ms(), max_age_ms, &c,
                                       NULL, reterr);
    cma_restmapper_unref(mapper); /* the catalog holds its own reference */
    if (rc != CMA_OK)
        return rc;
    cma_catalog_store_publish(store, c);
    return CMA_OK;
}
