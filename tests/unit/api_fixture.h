/* api_fixture.h: what the API stage's unit tests share (api_*_test.c): an app over a config, a
 * fake series source (testlib.h fake_list, one canned series list per exact seriesQuery), a fake
 * backend that answers each instant query from canned Prometheus bodies chosen by a part of the
 * PromQL (recording the last PromQL), an optional fake kube-apiserver (fakehttp.h, route mode)
 * for LISTs, and request helpers that run cma_app_handle and decode the body with jansson,
 * independently of the encoder. Helpers fail the running cmocka test on setup errors. */
#ifndef CMA_API_FIXTURE_H
#define CMA_API_FIXTURE_H

#include <stdbool.h>
#include <stddef.h>

#include <jansson.h>

#include "cma/app.h"
#include "fakehttp.h"
#include "testlib.h"

struct cma_config;
struct cma_ruleset;
struct cma_catalog_store;
struct cma_kube;

/* A canned answer of the fake backend: the first whose promql_part occurs in the query wins;
 * every "@NOW@" in body becomes the current Unix time in seconds. No match: a backend error. */
struct api_reply {
    const char *promql_part;
    const char *body;
};

struct api_fixture_spec {
    const char *config; /* YAML */
    const struct fake_series *series;
    size_t n_series;
    const struct api_reply *replies;
    size_t n_replies;
    const struct cma_fake_answer *kube; /* route mode (each with path); NULL: no kube client */
    size_t n_kube;
    bool no_relist; /* true: no catalog published (before the first relist) */
};

struct api_fixture {
    struct cma_config *cfg;
    struct cma_ruleset *rules;
    struct cma_restmapper *mapper;
    struct cma_catalog_store *store;
    struct fake_source series;
    const struct api_reply *replies;
    size_t n_replies;
    char last_promql[4096];
    char last_tenant[64]; /* the last query's cma_keep.tenant; "" when it had none */
    size_t queries;
    struct cma_fake_http *kube_http;
    struct cma_kube *kube;
    struct cma_options *opts;
    struct cma_app app;
};

/* A fixture for spec (borrowed: it must outlive the fixture); fails the test on error. */
struct api_fixture *cma_test_api_fixture_new(const struct api_fixture_spec *spec);
void cma_test_api_fixture_free(struct api_fixture *fx);
/* Relists the fake series into a new catalog snapshot and publishes it. */
void cma_test_api_fixture_relist(struct api_fixture *fx);

/* One answer of cma_app_handle. */
struct api_answer {
    int status;
    const char *content_type;
    json_t *json; /* NULL when the body is not JSON */
    char *text;   /* the whole body */
};

/* Runs method target ("path?k=v&k2=v2": values taken as written, not percent-decoded). */
struct api_answer cma_test_api_request(struct cma_app *app, const char *method, const char *target);
void cma_test_api_answer_done(struct api_answer *a);
/* The string member key of obj, "(none)" when absent. */
const char *cma_test_api_str(json_t *obj, const char *key);
/* A Status answer with HTTP status code, the same code in the body, and a message containing
 * part; fails the test otherwise. */
void cma_test_api_expect_status(struct cma_app *app, const char *method, const char *target,
                                int code, const char *part);

#endif
