/* testlib.h: helpers shared by unit tests: a RESTMapper over a hand-written resource list (the
 * shape kube.c produces from API discovery), a fake series source that answers canned series
 * per exact selector string (prometheus-adapter's pkg/client/fake), parsing "name{a=b,c=d}",
 * and a stub backend that records the arguments of each call. */
#ifndef CMA_TESTLIB_H
#define CMA_TESTLIB_H

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cma/backend.h"
#include "cma/discovery.h"
#include "cma/kube.h"
#include "cma/prom.h"
#include "cma/restmapper.h"

struct test_resource {
    const char *group, *version, *resource, *singular, *kind;
    bool namespaced;
};

/* Core pods, services, nodes, persistentvolumes, namespaces, endpoints; batch jobs;
 * apps deployments; extensions/v1beta1 ingresses and deployments (as upstream's test mapper). */
static const struct test_resource test_resources_default[] = {
    {"", "v1", "pods", "pod", "Pod", true},
    {"", "v1", "services", "service", "Service", true},
    {"", "v1", "nodes", "node", "Node", false},
    {"", "v1", "persistentvolumes", "persistentvolume", "PersistentVolume", false},
    {"", "v1", "namespaces", "namespace", "Namespace", false},
    {"extensions", "v1beta1", "ingresses", "ingress", "Ingress", true},
    {"extensions", "v1beta1", "deployments", "deployment", "Deployment", true},
    {"networking.k8s.io", "v1", "ingresses", "ingress", "Ingress", true},
};

static inline struct cma_restmapper *test_mapper(const struct test_resource *rs, size_t n)
{
    struct cma_api_resources *r = calloc(1, sizeof(*r));
    r->items = calloc(n, sizeof(*r->items));
    r->n = n;
    for (size_t i = 0; i < n; i++) {
        struct cma_api_resource *d = &r->items[i];
        d->group = strdup(rs[i].group);
        d->version = strdup(rs[i].version);
        d->resource = strdup(rs[i].resource);
        d->singular = strdup(rs[i].singular);
        d->kind = strdup(rs[i].kind);
        d->namespaced = rs[i].namespaced;
    }
    struct cma_restmapper *m = NULL;
    if (cma_restmapper_new(r, &m, NULL) != CMA_OK)
        return NULL;
    return m;
}

struct fake_series {
    const char *selector;
    const char *const *series; /* "name{a=b,c=d}" */
    size_t n;
};

struct fake_source {
    const struct fake_series *answers;
    size_t n_answers;
    int64_t min_start_ms; /* a start before this is refused (checks start = now - maxAge) */
    size_t calls;
    /* copies of each call's match and tenant (the first 32 calls; tenant "": none, the
     * backend's own) */
    char matches[32][128];
    char tenants[32][64];
};

static inline enum cma_errc fake_list(void *opaque, const char *match, int64_t start_ms,
                                      int64_t end_ms, const char *tenant, cma_series_fn fn,
                                      void *fn_ctx, struct cma_err *reterr)
{
    struct fake_source *fs = opaque;
    (void)end_ms;
    if (fs->calls < 32) {
        snprintf(fs->matches[fs->calls], sizeof(fs->matches[0]), "%s", match);
        snprintf(fs->tenants[fs->calls], sizeof(fs->tenants[0]), "%s", tenant ? tenant : "");
    }
    fs->calls++;
    if (start_ms < fs->min_start_ms)
        return cma_err_set(reterr, CMA_ERR_BACKEND_ERROR, "start too early");
    for (size_t a = 0; a < fs->n_answers; a++) {
        if (strcmp(fs->answers[a].selector, match) != 0)
            continue;
        for (size_t s = 0; s < fs->answers[a].n; s++) {
            const char *text = fs->answers[a].series[s];
            const char *brace = strchr(text, '{');
            struct cma_label_view labels[16];
            size_t n = 0;
            const char *p = brace + 1;
            while (*p && *p != '}' && n < 16) {
                const char *eq = strchr(p, '=');
                const char *end = eq + strcspn(eq, ",}");
                labels[n++] =
                    (struct cma_label_view){p, (size_t)(eq - p), eq + 1, (size_t)(end - eq - 1)};
                p = *end == ',' ? end + 1 : end;
            }
            if (fn(fn_ctx, text, (size_t)(brace - text), labels, n) != 0)
                return cma_err_set(reterr, CMA_ERR_INTERNAL, "stopped");
        }
        return CMA_OK;
    }
    return cma_err_set(reterr, CMA_ERR_BACKEND_ERROR, "fake: no answer for %s", match);
}

static inline const char *fake_name(const void *opaque)
{
    (void)opaque;
    return "fake";
}

/* The fake as a backend (series only) for cma_discovery_relist. */
static inline struct cma_backend fake_backend(struct fake_source *fs)
{
    static const struct cma_backend_ops ops = {.series = fake_list, .name = fake_name};
    return (struct cma_backend){.ops = &ops, .ctx = fs};
}

/* A backend that records each call's arguments: query waits pause_ms, then answers no result and
 * query_rc (with query_msg when it is an error); series reports one series, up{pod="p1"}, and
 * returns what the callback says; its name is `name`. */
struct test_stub {
    const char *promql, *match;
    const char *tenant; /* the last call's (cma_keep.tenant or the series call's) */
    int64_t time_ms, start_ms, end_ms;
    void *keep_ctx, *fn_ctx;
    int calls;
    enum cma_errc query_rc;
    const char *query_msg;
    long pause_ms;
    const char *name;
};

static inline enum cma_errc test_stub_query(void *ctx, const char *promql, int64_t time_ms,
                                            const struct cma_keep *keep,
                                            struct cma_prom_result **ret, struct cma_err *reterr)
{
    struct test_stub *s = ctx;
    s->calls++;
    s->promql = promql;
    s->time_ms = time_ms;
    s->keep_ctx = keep ? keep->ctx : NULL;
    s->tenant = keep ? keep->tenant : NULL;
    if (s->pause_ms > 0) {
        struct timespec ts = {0, s->pause_ms * 1000000L};
        nanosleep(&ts, NULL);
    }
    *ret = NULL;
    if (s->query_rc != CMA_OK)
        return cma_err_set(reterr, s->query_rc, "%s", s->query_msg ? s->query_msg : "stub error");
    return CMA_OK;
}

static inline enum cma_errc test_stub_series(void *ctx, const char *match, int64_t start_ms,
                                             int64_t end_ms, const char *tenant, cma_series_fn fn,
                                             void *fn_ctx, struct cma_err *reterr)
{
    struct test_stub *s = ctx;
    (void)reterr;
    s->calls++;
    s->match = match;
    s->tenant = tenant;
    s->start_ms = start_ms;
    s->end_ms = end_ms;
    s->fn_ctx = fn_ctx;
    struct cma_label_view l = {.name = "pod", .name_len = 3, .value = "p1", .value_len = 2};
    return fn(fn_ctx, "up", 2, &l, 1) == 0 ? CMA_OK : CMA_ERR_INTERNAL;
}

static inline const char *test_stub_name(const void *ctx)
{
    return ((const struct test_stub *)ctx)->name;
}

static inline struct cma_backend test_stub_backend(struct test_stub *s)
{
    static const struct cma_backend_ops ops = {test_stub_query, test_stub_series, test_stub_name};
    return (struct cma_backend){.ops = &ops, .ctx = s};
}

#endif
