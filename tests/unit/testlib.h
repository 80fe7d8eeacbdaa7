/* testlib.h: helpers shared by unit tests: a RESTMapper over a hand-written resource list (the
 * shape kube.c produces from API discovery), and a fake series source that answers canned series
 * per exact selector string (prometheus-adapter's pkg/client/fake), parsing "name{a=b,c=d}". */
#ifndef CMA_TESTLIB_H
#define CMA_TESTLIB_H

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

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
};

static inline enum cma_errc fake_list(void *opaque, const char *match, int64_t start_ms,
                                      int64_t end_ms, cma_series_fn fn, void *fn_ctx,
                                      struct cma_err *reterr)
{
    struct fake_source *fs = opaque;
    (void)end_ms;
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

#endif
