/* api_fixture.c: the API stage's shared test fixture (api_fixture.h). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cmocka.h>

#include "../../src/clients/internal.h"
#include "api_fixture.h"
#include "cma/backend_cache.h"
#include "cma/buf.h"
#include "cma/catalog.h"
#include "cma/config.h"
#include "cma/discovery.h"
#include "cma/kube.h"
#include "cma/options.h"
#include "cma/prom.h"
#include "cma/rule.h"
#include "cma/server.h"

/* body with every "@NOW@" replaced by the current Unix time in seconds (malloc'd). */
static char *with_now(const char *body)
{
    char now[32];
    int now_len = snprintf(now, sizeof now, "%lld", (long long)time(NULL));
    size_t n = 1;
    for (const char *p = strstr(body, "@NOW@"); p; p = strstr(p + 5, "@NOW@"))
        n++;
    char *out = malloc(strlen(body) + n * (size_t)now_len + 1);
    if (!out)
        return NULL;
    char *o = out;
    for (const char *p = body;;) {
        const char *at = strstr(p, "@NOW@");
        size_t len = at ? (size_t)(at - p) : strlen(p);
        memcpy(o, p, len);
        o += len;
        if (!at)
            break;
        memcpy(o, now, (size_t)now_len);
        o += now_len;
        p = at + 5;
    }
    *o = '\0';
    return out;
}

static enum cma_errc fixture_query(void *ctx, const char *promql, int64_t time_ms,
                                   const struct cma_keep *keep, struct cma_prom_result **ret,
                                   struct cma_err *reterr)
{
    struct api_fixture *fx = ctx;
    (void)time_ms;
    fx->queries++;
    snprintf(fx->last_promql, sizeof fx->last_promql, "%s", promql);
    snprintf(fx->last_tenant, sizeof fx->last_tenant, "%s",
             keep && keep->tenant ? keep->tenant : "");
    for (size_t i = 0; i < fx->n_replies; i++) {
        if (!strstr(promql, fx->replies[i].promql_part))
            continue;
        char *body = with_now(fx->replies[i].body);
        if (!body)
            return cma_err_set(reterr, CMA_ERR_NOMEM, "fake backend: out of memory");
        struct cma_prom_result *all = NULL;
        enum cma_errc rc = cma_prom_decode_query(body, strlen(body), &all, reterr);
        free(body);
        if (rc != CMA_OK)
            return rc;
        rc = cma_prom_result_filter(all, keep ? keep->fn : NULL, keep ? keep->ctx : NULL, ret,
                                    reterr);
        cma_prom_result_free(all);
        return rc;
    }
    return cma_err_set(reterr, CMA_ERR_BACKEND_ERROR, "fake backend: no answer for %s", promql);
}

static enum cma_errc fixture_series(void *ctx, const char *match, int64_t start_ms, int64_t end_ms,
                                    const char *tenant, cma_series_fn fn, void *fn_ctx,
                                    struct cma_err *reterr)
{
    struct api_fixture *fx = ctx;
    return fake_list(&fx->series, match, start_ms, end_ms, tenant, fn, fn_ctx, reterr);
}

static const char *fixture_backend_name(const void *ctx)
{
    (void)ctx;
    return "http://fake-prometheus:9090";
}

static const struct cma_backend_ops FIXTURE_OPS = {fixture_query, fixture_series,
                                                   fixture_backend_name};

static void start_kube(struct api_fixture *fx, const struct api_fixture_spec *spec)
{
    fx->kube_http = cma_fake_http_start(spec->kube, spec->n_kube);
    assert_non_null(fx->kube_http);
    char *url = cma_fake_http_url(fx->kube_http, "");
    assert_non_null(url);
    struct cma_kube_conn conn = {.server = url, .token = "t"};
    struct cma_err err;
    cma_err_clear(&err);
    if (cma_kube_new_from_conn(&conn, 5000, &fx->kube, &err) != CMA_OK)
        fail_msg("kube client: %s", err.msg);
    free(url);
}

struct api_fixture *cma_test_api_fixture_new(const struct api_fixture_spec *spec)
{
    struct api_fixture *fx = calloc(1, sizeof(*fx));
    assert_non_null(fx);
    fx->opts = calloc(1, sizeof(*fx->opts));
    assert_non_null(fx->opts);
    struct cma_err err;
    cma_err_clear(&err);
    if (cma_config_load_string("rules.yaml", spec->config, strlen(spec->config), &fx->cfg, &err) !=
            CMA_OK ||
        cma_ruleset_compile(fx->cfg, &fx->rules, &err) != CMA_OK)
        fail_msg("config: %s", err.msg);
    fx->mapper = test_mapper(test_resources_default,
                             sizeof(test_resources_default) / sizeof(test_resources_default[0]));
    assert_non_null(fx->mapper);
    fx->series = (struct fake_source){.answers = spec->series, .n_answers = spec->n_series};
    fx->replies = spec->replies;
    fx->n_replies = spec->n_replies;
    assert_int_equal(cma_catalog_store_new(&fx->store), CMA_OK);
    if (spec->kube)
        start_kube(fx, spec);
    fx->app = (struct cma_app){
        .opts = fx->opts, .backend = {&FIXTURE_OPS, fx}, .store = fx->store, .kube = fx->kube};
    cma_app_set_rules(&fx->app, fx->rules);
    if (!spec->no_relist)
        cma_test_api_fixture_relist(fx);
    return fx;
}

void cma_test_api_fixture_relist(struct api_fixture *fx)
{
    struct cma_err err;
    cma_err_clear(&err);
    struct cma_catalog *c = NULL;
    int64_t now_ms = (int64_t)time(NULL) * 1000;
    if (cma_discovery_relist(&fx->app.backend, fx->rules, fx->mapper, now_ms, 600000, &c, &err) !=
        CMA_OK)
        fail_msg("relist: %s", err.msg);
    cma_catalog_store_publish(fx->store, c);
}

void cma_test_api_fixture_free(struct api_fixture *fx)
{
    if (!fx)
        return;
    cma_kube_free(fx->kube);
    cma_fake_http_stop(fx->kube_http);
    cma_catalog_store_free(fx->store);
    cma_restmapper_unref(fx->mapper);
    cma_ruleset_free(fx->rules);
    cma_config_free(fx->cfg);
    free(fx->opts);
    free(fx);
}

/* Splits "k=v&k2=v2" (in buf, modified) into kv; returns the count. */
static size_t split_query(char *q, struct cma_kv *kv, size_t max)
{
    size_t n = 0;
    while (q && *q && n < max) {
        char *amp = strchr(q, '&');
        if (amp)
            *amp = '\0';
        char *eq = strchr(q, '=');
        if (eq)
            *eq = '\0';
        kv[n++] = (struct cma_kv){q, eq ? eq + 1 : q + strlen(q)};
        q = amp ? amp + 1 : NULL;
    }
    return n;
}

struct api_answer cma_test_api_request(struct cma_app *app, const char *method, const char *target)
{
    char *copy = strdup(target);
    assert_non_null(copy);
    char *q = strchr(copy, '?');
    if (q)
        *q++ = '\0';
    struct cma_kv kv[8];
    size_t n = split_query(q, kv, 8);
    struct cma_request req = {.method = method, .path = copy, .query = kv, .n_query = n};
    struct cma_response resp = {.status = 200, .content_type = "application/json"};
    cma_buf_init(&resp.body, 1 << 20);
    cma_app_handle(app, &req, &resp);
    struct api_answer a = {.status = resp.status, .content_type = resp.content_type};
    a.json = json_loadb(resp.body.ptr, resp.body.len, 0, NULL);
    a.text = cma_buf_take(&resp.body);
    if (!a.text)
        a.text = strdup("");
    free(copy);
    return a;
}

void cma_test_api_answer_done(struct api_answer *a)
{
    json_decref(a->json);
    free(a->text);
}

const char *cma_test_api_str(json_t *obj, const char *key)
{
    const char *v = json_string_value(json_object_get(obj, key));
    return v ? v : "(none)";
}

void cma_test_api_expect_status(struct cma_app *app, const char *method, const char *target,
                                int code, const char *part)
{
    struct api_answer a = cma_test_api_request(app, method, target);
    if (a.status != code || !a.json || strcmp(cma_test_api_str(a.json, "kind"), "Status") != 0 ||
        json_integer_value(json_object_get(a.json, "code")) != code ||
        !strstr(cma_test_api_str(a.json, "message"), part))
        fail_msg("%s %s: want %d Status with \"%s\", got %d %s", method, target, code, part,
                 a.status, a.text);
    cma_test_api_answer_done(&a);
}
