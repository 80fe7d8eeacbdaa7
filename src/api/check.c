/* check.c: owns the `check` subcommand (cma/check.h): for each APIService, GET
 * /apis/apiregistration.k8s.io/v1/apiservices/<name> (its Available condition, with the
 * aggregator's reason and message when it is not True), then GET /apis/<group>/<version> through
 * kube-apiserver (the discovery document the HPA controller and the garbage collector read), which
 * must list at least one resource. One line per APIService: "ok", "FAIL" or "skip" (not
 * registered, when the names were not given), then a summary line.
 *
 * DESIGN: the checks run through the same kube client as the adapter (kubeconfig or in-cluster),
 * so a laptop and the helm test pod ask exactly what the cluster answers; nothing is retried (the
 * caller decides whether to ask again). */
#include "cma/check.h"

#include <jansson.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "cma/buf.h"
#include "cma/err.h"
#include "cma/kube.h"

#define MAX_NAMES 16
#define APISERVICES "/apis/apiregistration.k8s.io/v1/apiservices/"

static const char *const adapter_apiservices[] = {
    "v1beta1.custom.metrics.k8s.io",
    "v1beta2.custom.metrics.k8s.io",
    "v1beta1.external.metrics.k8s.io",
    "v1beta1.metrics.k8s.io",
};

enum verdict { VERDICT_OK, VERDICT_FAIL, VERDICT_SKIP };

/* A JSON string member of o, "" when absent or not a string. */
static const char *str_member(const json_t *o, const char *key)
{
    const char *s = json_string_value(json_object_get(o, key));
    return s ? s : "";
}

/* GET path: the decoded JSON object of a 200 answer in *ret (caller json_decref()s), the status in
 * *ret_status; a transport failure or a body that is not a JSON object says why in line. */
static enum verdict get_json(struct cma_kube *k, const char *path, json_t **ret, long *ret_status,
                             char *line, size_t cap)
{
    struct cma_buf body;
    struct cma_err err;
    cma_err_clear(&err);
    long status = 0;
    *ret = NULL;
    if (cma_kube_request(k, "GET", path, NULL, 0, &body, &status, &err) != CMA_OK) {
        snprintf(line, cap, "GET %s: %s", path, err.msg);
        return VERDICT_FAIL;
    }
    *ret_status = status;
    json_t *doc = json_loadb(body.ptr ? body.ptr : "", body.len, 0, NULL);
    cma_buf_done(&body);
    if (status == 200 && !json_is_object(doc)) {
        json_decref(doc);
        snprintf(line, cap, "GET %s: the answer is not a JSON object", path);
        return VERDICT_FAIL;
    }
    if (status != 200) {
        const char *msg = json_string_value(json_object_get(doc, "message"));
        snprintf(line, cap, "GET %s: HTTP %ld%s%s", path, status, msg ? ": " : "", msg ? msg : "");
        json_decref(doc);
        return VERDICT_FAIL;
    }
    *ret = doc;
    return VERDICT_OK;
}

/* The APIService's Available condition: OK when True; else line says status, reason, message. */
static enum verdict available(const json_t *svc, char *line, size_t cap)
{
    const json_t *conds = json_object_get(json_object_get(svc, "status"), "conditions");
    size_t i;
    const json_t *c;
    json_array_foreach(conds, i, c)
    {
        if (strcmp(str_member(c, "type"), "Available") != 0)
            continue;
        const char *status = str_member(c, "status");
        if (strcmp(status, "True") == 0)
            return VERDICT_OK;
        const char *reason = json_string_value(json_object_get(c, "reason"));
        const char *msg = json_string_value(json_object_get(c, "message"));
        snprintf(line, cap, "not Available (status %s%s%s)%s%s", status, reason ? ", " : "",
                 reason ? reason : "", msg ? ": " : "", msg ? msg : "");
        return VERDICT_FAIL;
    }
    snprintf(line, cap, "no Available condition yet (the aggregator has not checked it)");
    return VERDICT_FAIL;
}

/* Discovery of group/version through kube-apiserver: at least one resource. */
static enum verdict discovery(struct cma_kube *k, const char *group, const char *version,
                              char *line, size_t cap)
{
    char path[512];
    snprintf(path, sizeof(path), "/apis/%s/%s", group, version);
    json_t *doc = NULL;
    long status = 0;
    if (get_json(k, path, &doc, &status, line, cap) != VERDICT_OK)
        return VERDICT_FAIL;
    size_t n = json_array_size(json_object_get(doc, "resources"));
    json_decref(doc);
    if (n == 0) {
        snprintf(line, cap,
                 "Available, but discovery of %s/%s lists no metric (the rules match no "
                 "series, or discovery has not succeeded yet)",
                 group, version);
        return VERDICT_FAIL;
    }
    snprintf(line, cap, "Available; discovery of %s/%s lists %zu resource%s", group, version, n,
             n == 1 ? "" : "s");
    return VERDICT_OK;
}

/* One APIService: registered, Available, discovery lists something. `required`: a 404 is a
 * failure (the name was asked for), else a skip. */
static enum verdict check_one(struct cma_kube *k, const char *name, bool required, char *line,
                              size_t cap)
{
    char path[512];
    int w = snprintf(path, sizeof(path), APISERVICES "%s", name);
    if (w < 0 || (size_t)w >= sizeof(path) || strchr(name, '/') || strchr(name, '?')) {
        snprintf(line, cap, "not an APIService name");
        return VERDICT_FAIL;
    }
    json_t *svc = NULL;
    long status = 0;
    if (get_json(k, path, &svc, &status, line, cap) != VERDICT_OK) {
        if (status == 404) {
            snprintf(line, cap, "not registered");
            return required ? VERDICT_FAIL : VERDICT_SKIP;
        }
        return VERDICT_FAIL;
    }
    const json_t *spec = json_object_get(svc, "spec");
    const char *group = json_string_value(json_object_get(spec, "group"));
    const char *version = json_string_value(json_object_get(spec, "version"));
    enum verdict v = available(svc, line, cap);
    if (v == VERDICT_OK && (!group || !version)) {
        snprintf(line, cap, "spec.group or spec.version missing");
        v = VERDICT_FAIL;
    } else if (v == VERDICT_OK) {
        v = discovery(k, group, version, line, cap);
    }
    json_decref(svc);
    return v;
}

size_t cma_check_run(struct cma_kube *k, const char *const *names, size_t n, FILE *out)
{
    bool given = n > 0;
    if (!given) {
        names = adapter_apiservices;
        n = sizeof(adapter_apiservices) / sizeof(adapter_apiservices[0]);
    }
    static const char *const words[] = {"ok  ", "FAIL", "skip"};
    size_t failed = 0, checked = 0;
    for (size_t i = 0; i < n; i++) {
        char line[1024] = "";
        enum verdict v = check_one(k, names[i], given, line, sizeof(line));
        fprintf(out, "%s %s: %s\n", words[v], names[i], line);
        failed += v == VERDICT_FAIL;
        checked += v != VERDICT_SKIP;
    }
    if (checked == 0) {
        fprintf(out, "check: no APIService of custom-metrics-adapter is registered\n");
        return 1;
    }
    if (failed)
        fprintf(out, "check: %zu of %zu APIServices not working\n", failed, checked);
    else
        fprintf(out, "check: %zu APIService%s working\n", checked, checked == 1 ? "" : "s");
    return failed;
}

/* "10s", "2m", "1500ms" or a number of seconds → milliseconds; -1 when not that. */
static long long parse_duration_ms(const char *s)
{
    char *end = NULL;
    long long v = strtoll(s, &end, 10);
    if (end == s || v <= 0 || v > 3600000)
        return -1;
    if (strcmp(end, "ms") == 0)
        return v;
    if (*end == '\0' || strcmp(end, "s") == 0)
        return v * 1000;
    if (strcmp(end, "m") == 0)
        return v * 60000;
    return -1;
}

static void usage(FILE *f, const char *prog)
{
    fprintf(f,
            "Usage: %s check [--kubeconfig=PATH] [--apiservice=NAME]... [--timeout=DURATION]\n"
            "Checks through the Kubernetes API that each APIService of the adapter is Available\n"
            "and that discovery of its group version lists at least one metric.\n"
            "  --kubeconfig=PATH   kubeconfig to use (current context); default: in-cluster\n"
            "  --apiservice=NAME   an APIService to check (repeat); default: every registered\n"
            "                      APIService of custom.metrics.k8s.io, external.metrics.k8s.io\n"
            "                      and metrics.k8s.io\n"
            "  --timeout=DURATION  per request (default 10s)\n"
            "Exit status: 0 all working, 1 one is not, 2 usage or client error.\n",
            prog);
}

/* "--name=value" or "--name value": the value, advancing *i for the second form; NULL when arg is
 * not this flag. *ret_missing when the flag has no value. */
static const char *flag_value(int argc, char **argv, int *i, const char *name, bool *ret_missing)
{
    size_t len = strlen(name);
    const char *arg = argv[*i];
    if (!arg || strncmp(arg, name, len) != 0)
        return NULL;
    if (arg[len] == '=')
        return arg + len + 1;
    if (arg[len] != '\0')
        return NULL;
    if (*i + 1 >= argc) {
        *ret_missing = true;
        return NULL;
    }
    return argv[++*i];
}

int cma_check_main(int argc, char **argv, FILE *out, FILE *errout)
{
    const char *kubeconfig = NULL, *names[MAX_NAMES];
    size_t n = 0;
    long long timeout_ms = 10000;
    for (int i = 1; i < argc; i++) {
        bool missing = false;
        const char *v;
        if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
            usage(out, "custom-metrics-adapter");
            return 0;
        } else if ((v = flag_value(argc, argv, &i, "--kubeconfig", &missing))) {
            kubeconfig = v;
        } else if ((v = flag_value(argc, argv, &i, "--apiservice", &missing)) && n < MAX_NAMES) {
            names[n++] = v;
        } else if ((v = flag_value(argc, argv, &i, "--timeout", &missing)) &&
                   (timeout_ms = parse_duration_ms(v)) > 0) {
            continue;
        } else {
            fprintf(errout, "Error: check: %s: %s\n", argv[i],
                    missing ? "needs a value" : "unknown flag or bad value");
            usage(errout, "custom-metrics-adapter");
            return 2;
        }
    }
    struct cma_kube *k = NULL;
    struct cma_err err;
    cma_err_clear(&err);
    if (cma_kube_new(kubeconfig && *kubeconfig ? kubeconfig : NULL, timeout_ms, &k, &err) !=
        CMA_OK) {
        char line[1024];
        cma_err_format_pos(&err, line, sizeof(line));
        fprintf(errout, "Error: check: %s\n", line);
        return 2;
    }
    fprintf(out, "check: asking %s\n", cma_kube_server(k));
    size_t failed = cma_check_run(k, names, n, out);
    cma_kube_free(k);
    return failed ? 1 : 0;
}
