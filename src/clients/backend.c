/* backend.c: the backend seam's dispatch (cma_backend_query/series/name check that a backend
 * is set and call its operations) and its first implementation, the Prometheus client: each
 * operation is the matching cma_prom_* call, with the client's own deadlines. */
#include "cma/backend.h"

#include <stddef.h>

#include "cma/str.h"

static enum cma_errc prom_query(void *ctx, const char *promql, int64_t time_ms,
                                const struct cma_keep *keep, struct cma_prom_result **ret,
                                struct cma_err *reterr)
{
    return cma_prom_query_call(ctx, promql, time_ms, keep ? keep->fn : NULL,
                               keep ? keep->ctx : NULL, keep ? keep->call : NULL,
                               keep ? keep->tenant : NULL, ret, reterr);
}

static enum cma_errc prom_series(void *ctx, const char *match, int64_t start_ms, int64_t end_ms,
                                 const char *tenant, cma_series_fn fn, void *fn_ctx,
                                 struct cma_err *reterr)
{
    return cma_prom_series(ctx, match, start_ms, end_ms, 0, tenant, fn, fn_ctx, reterr);
}

/* The URL, unless it carries userinfo: a name never holds a credential (main names each client
 * by its URL for display, cma_url_display, before anything shows it). */
static const char *prom_name(const void *ctx)
{
    const char *url = cma_prom_url(ctx);
    return cma_url_has_userinfo(url) ? "prometheus" : url;
}

static const struct cma_backend_ops PROM_OPS = {
    .query = prom_query,
    .series = prom_series,
    .name = prom_name,
};

struct cma_backend cma_backend_prom(struct cma_prom *prom)
{
    return (struct cma_backend){.ops = &PROM_OPS, .ctx = prom};
}

enum cma_errc cma_backend_query(const struct cma_backend *b, const char *promql, int64_t time_ms,
                                const struct cma_keep *keep, struct cma_prom_result **ret,
                                struct cma_err *reterr)
{
    if (!b || !b->ops || !b->ops->query)
        return cma_err_set(reterr, CMA_ERR_INTERNAL, "no backend to query");
    return b->ops->query(b->ctx, promql, time_ms, keep, ret, reterr);
}

enum cma_errc cma_backend_series(const struct cma_backend *b, const char *match, int64_t start_ms,
                                 int64_t end_ms, cma_series_fn fn, void *fn_ctx,
                                 struct cma_err *reterr)
{
    return cma_backend_series_as(b, NULL, match, start_ms, end_ms, fn, fn_ctx, reterr);
}

enum cma_errc cma_backend_series_as(const struct cma_backend *b, const char *tenant,
                                    const char *match, int64_t start_ms, int64_t end_ms,
                                    cma_series_fn fn, void *fn_ctx, struct cma_err *reterr)
{
    if (!b || !b->ops || !b->ops->series)
        return cma_err_set(reterr, CMA_ERR_INTERNAL, "no backend to list series from");
    return b->ops->series(b->ctx, match, start_ms, end_ms, tenant, fn, fn_ctx, reterr);
}

const char *cma_backend_name(const struct cma_backend *b)
{
    return b && b->ops && b->ops->name ? b->ops->name(b->ctx) : "(no backend)";
}
