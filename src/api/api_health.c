/* api_health.c: /healthz, /livez and /readyz in the apiserver's format ("ok", ?verbose lists
 * each check, a failed check answers 500 "[-]<check> failed: reason withheld").
 * Checks: ping (always ok); readyz also has metrics-discovery, which passes once the first relist
 * has finished — successfully or not — so start-up does not answer 404 for every metric before
 * discovery ran (upstream trap 7), while a backend outage at start-up cannot keep the pod out of
 * its Service (and the APIService unavailable) forever: discovery documents keep answering. */
#include <stdio.h>
#include <string.h>

#include "api_internal.h"
#include "cma/discovery.h"
#include "cma/router.h"
#include "cma/server.h"

struct check {
    const char *name;
    bool ok;
};

void cma_api_health(struct cma_app *app, struct cma_catalog *cat, const struct cma_route *route,
                    const struct cma_request *req, struct cma_response *resp)
{
    (void)cat;
    const char *what = route->kind == CMA_ROUTE_HEALTHZ ? "healthz"
                       : route->kind == CMA_ROUTE_LIVEZ ? "livez"
                                                        : "readyz";
    struct check checks[2] = {{"ping", true}, {"metrics-discovery", true}};
    size_t n = 1;
    if (route->kind == CMA_ROUTE_READYZ) {
        struct cma_discovery_status st = {0};
        if (app->discovery)
            cma_discovery_get_status(app->discovery, &st);
        checks[n++].ok = st.n_relists > 0;
    }
    resp->content_type = "text/plain; charset=utf-8";
    if (route->subpath && route->subpath[0]) {
        for (size_t i = 0; i < n; i++) {
            if (strcmp(route->subpath, checks[i].name) == 0) {
                resp->status = checks[i].ok ? 200 : 500;
                cma_buf_printf(&resp->body, checks[i].ok ? "ok" : "internal server error: %s",
                               checks[i].name);
                return;
            }
        }
        resp->status = 404;
        cma_buf_appends(&resp->body, "404 page not found\n");
        return;
    }
    bool all_ok = true;
    for (size_t i = 0; i < n; i++)
        all_ok &= checks[i].ok;
    bool verbose = cma_request_query(req, "verbose") != NULL;
    resp->status = all_ok ? 200 : 500;
    if (all_ok && !verbose) {
        cma_buf_appends(&resp->body, "ok");
        return;
    }
    for (size_t i = 0; i < n; i++) {
        if (checks[i].ok)
            cma_buf_printf(&resp->body, "[+]%s ok\n", checks[i].name);
        else
            cma_buf_printf(&resp->body, "[-]%s failed: reason withheld\n", checks[i].name);
    }
    cma_buf_printf(&resp->body, all_ok ? "%s check passed\n" : "%s check failed\n", what);
}
