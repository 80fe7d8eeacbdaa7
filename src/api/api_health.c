/* api_health.c: /healthz, /livez and /readyz in the apiserver's format ("ok", ?verbose lists
 * each check, a failed check answers 500 "[-]<check> failed: reason withheld").
 * Checks: ping (always ok); readyz also has metrics-discovery, which passes once the first relist
 * has finished — successfully or not — so start-up does not answer 404 for every metric before
 * discovery ran (upstream trap 7), while a backend outage at start-up cannot keep the pod out of
 * its Service (and the APIService unavailable) forever: discovery documents keep answering.
 * With a config watch, readyz also lists config-reload, the last reload's outcome, without
 * letting it decide readiness (see reload_check). */
#include <stdio.h>
#include <string.h>

#include "api_internal.h"
#include "cma/discovery.h"
#include "cma/router.h"
#include "cma/server.h"
#include "cma/watch.h"

struct check {
    const char *name;
    bool ok;
    bool decides;       /* false: listed, but the verdict does not depend on it */
    const char *reason; /* shown after "failed: "; NULL: withheld */
};

/* config-reload: the last reload of the config (watch.h). It is listed but never fails readiness:
 * a refused config leaves the previous one serving, and a bad ConfigMap reaches every replica at
 * once, so failing readiness would take the whole APIService down for a problem that does not
 * stop any replica from serving. Its reason (file:line:column) is shown: it is about a config
 * file, not a secret. */
static struct check reload_check(struct cma_app *app, struct cma_watch_status *st)
{
    cma_watch_get_status(app->reload, st);
    return (struct check){"config-reload", st->last_ok, false, st->last_error};
}

static void reply_check(const struct check *c, struct cma_response *resp)
{
    resp->status = c->ok ? 200 : 500;
    if (c->ok)
        cma_buf_appends(&resp->body, "ok");
    else if (c->reason)
        cma_buf_printf(&resp->body, "internal server error: %s failed: %s", c->name, c->reason);
    else
        cma_buf_printf(&resp->body, "internal server error: %s", c->name);
}

void cma_api_health(struct cma_app *app, struct cma_catalog *cat, const struct cma_route *route,
                    const struct cma_request *req, struct cma_response *resp)
{
    (void)cat;
    const char *what = route->kind == CMA_ROUTE_HEALTHZ ? "healthz"
                       : route->kind == CMA_ROUTE_LIVEZ ? "livez"
                                                        : "readyz";
    struct check checks[3] = {{"ping", true, true, NULL}};
    struct cma_watch_status reload;
    size_t n = 1;
    if (route->kind == CMA_ROUTE_READYZ) {
        struct cma_discovery_status st = {0};
        if (app->discovery)
            cma_discovery_get_status(app->discovery, &st);
        checks[n++] = (struct check){"metrics-discovery", st.n_relists > 0, true, NULL};
        if (app->reload)
            checks[n++] = reload_check(app, &reload);
    }
    resp->content_type = "text/plain; charset=utf-8";
    if (route->subpath && route->subpath[0]) {
        for (size_t i = 0; i < n; i++) {
            if (strcmp(route->subpath, checks[i].name) == 0) {
                reply_check(&checks[i], resp);
                return;
            }
        }
        resp->status = 404;
        cma_buf_appends(&resp->body, "404 page not found\n");
        return;
    }
    bool all_ok = true;
    for (size_t i = 0; i < n; i++)
        all_ok &= checks[i].ok || !checks[i].decides;
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
            cma_buf_printf(&resp->body, "[-]%s failed: %s\n", checks[i].name,
                           checks[i].reason ? checks[i].reason : "reason withheld");
    }
    cma_buf_printf(&resp->body, all_ok ? "%s check passed\n" : "%s check failed\n", what);
}
