/* metricrule_status_cli.c: a test driver (not a unit test; tests/e2e/test_metric_rule_status.sh
 * runs it against the fake kube-apiserver) for the status path a MetricRule controller takes:
 * read the object (GET), build its status from an outcome (cma_metricrule_status_build), compare
 * with the stored one (cma_metricrule_status_needs_write) and write it when it differs
 * (cma_metricrule_status_write). Built next to the adapter, like promql_cli.
 *
 *   metricrule_status_cli KUBECONFIG NAMESPACE NAME NOW_MS REASON MESSAGE [METRIC...]
 *
 * REASON is a reason name (Accepted, InvalidSpec, ...); MESSAGE "" for the reason's default. The
 * generation is the object's. Prints one line: "written <status JSON>", "unchanged <status
 * JSON>", "gone", "stale" or "error <code> <message>" (exit 1), and exits 0 otherwise. */
#include <jansson.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cma/buf.h"
#include "cma/kube.h"
#include "cma/metricrule_status.h"
#include "cma/metricrule_status_write.h"
#include "cma/metricrule_watch.h"

static int fail(const struct cma_err *err)
{
    printf("error %s %s\n", cma_errc_name(err->code), err->msg);
    return 1;
}

/* The object's generation and status (compact JSON, "" when none); *ret_gone on 404. */
static enum cma_errc read_object(struct cma_kube *k, const char *ns, const char *name,
                                 int64_t *ret_gen, char **ret_status, int *ret_gone,
                                 struct cma_err *err)
{
    char path[1024];
    snprintf(path, sizeof(path), "/apis/%s/%s/namespaces/%s/%s/%s", CMA_METRICRULE_GROUP,
             CMA_METRICRULE_VERSION, ns, CMA_METRICRULE_RESOURCE, name);
    struct cma_buf body;
    long status = 0;
    enum cma_errc rc = cma_kube_request(k, "GET", path, NULL, 0, &body, &status, err);
    if (rc != CMA_OK)
        return rc;
    *ret_gone = status == 404;
    json_t *obj = status == 200 ? json_loadb(body.ptr, body.len, 0, NULL) : NULL;
    cma_buf_done(&body);
    if (*ret_gone)
        return CMA_OK;
    if (!obj)
        return cma_err_set(err, CMA_ERR_KUBE_ERROR, "GET %s: %ld", path, status);
    *ret_gen = json_integer_value(json_object_get(json_object_get(obj, "metadata"), "generation"));
    json_t *st = json_object_get(obj, "status");
    *ret_status = st ? json_dumps(st, JSON_COMPACT) : strdup("");
    json_decref(obj);
    return *ret_status ? CMA_OK : cma_err_set(err, CMA_ERR_NOMEM, "out of memory");
}

int main(int argc, char **argv)
{
    enum cma_metricrule_reason reason = CMA_METRICRULE_REASON_ACCEPTED;
    if (argc < 7 || !cma_metricrule_reason_from_name(argv[5], &reason)) {
        fprintf(stderr, "usage: %s KUBECONFIG NAMESPACE NAME NOW_MS REASON MESSAGE [METRIC...]\n",
                argv[0]);
        return 2;
    }
    struct cma_err err = {0};
    struct cma_kube *k = NULL;
    if (cma_kube_new(argv[1], 10000, &k, &err) != CMA_OK)
        return fail(&err);
    int64_t gen = 0;
    char *current = NULL, *next = NULL;
    int gone = 0, code = 0;
    bool need = false;
    struct cma_metricrule_outcome o = {reason, argv[6], (const char *const *)argv + 7,
                                       (size_t)(argc - 7)};
    enum cma_metricrule_write w = CMA_METRICRULE_WRITE_DONE;
    if (read_object(k, argv[2], argv[3], &gen, &current, &gone, &err) != CMA_OK ||
        (!gone &&
         (cma_metricrule_status_build(gen, &o, current, strtoll(argv[4], NULL, 10), &next, &err) !=
              CMA_OK ||
          cma_metricrule_status_needs_write(current, next, &need, &err) != CMA_OK ||
          (need && cma_metricrule_status_write(k, argv[2], argv[3], next, &w, &err) != CMA_OK))))
        code = fail(&err);
    else if (gone || w == CMA_METRICRULE_WRITE_GONE)
        printf("gone\n");
    else if (w == CMA_METRICRULE_WRITE_STALE)
        printf("stale\n");
    else
        printf("%s %s\n", need ? "written" : "unchanged", next);
    free(current);
    free(next);
    cma_kube_free(k);
    return code;
}
