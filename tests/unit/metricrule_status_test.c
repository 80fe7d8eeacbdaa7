/* metricrule_status_test.c: a MetricRule's status JSON (src/rules/metricrule_status.c): the exact
 * bytes for each reason (sorted keys, sorted and deduplicated metrics), lastTransitionTime kept
 * while the condition's status stays and moved when it changes, the comparison that ignores
 * only that time, the schema's caps (message length at a character boundary, 1000 metrics, 253
 * bytes a name), the Conflict messages, and every produced status validated against the CRD's
 * schema by tests/lib/crd_validate.py (python3-jsonschema, as test_metric_rule_crd.sh runs it). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "cma/metricrule_status.h"
#include "fakehttp.h"

/* 2026-12-01T15:00:00Z and one hour later, in unix milliseconds. */
#define T0_MS 1796137200000LL
#define T1_MS (T0_MS + 3600000LL)

/* Not inlined: gcc 12 at -O2 then reports the result as a dangling pointer to the local `json`
 * (-Wdangling-pointer, a false positive: the string is on the heap). */
__attribute__((noinline)) static char *build(int64_t gen, enum cma_metricrule_reason reason,
                                             const char *msg, const char *const *metrics, size_t n,
                                             const char *current, int64_t now_ms)
{
    struct cma_metricrule_outcome o = {reason, msg, metrics, n};
    char *json = NULL;
    struct cma_err err = {0};
    if (cma_metricrule_status_build(gen, &o, current, now_ms, &json, &err) != CMA_OK)
        fail_msg("build: %s", err.msg);
    return json;
}

static bool needs_write(const char *current, const char *next)
{
    bool need = false;
    struct cma_err err = {0};
    if (cma_metricrule_status_needs_write(current, next, &need, &err) != CMA_OK)
        fail_msg("needs_write: %s", err.msg);
    return need;
}

static void test_cma_metricrule_reason_name__every_reason(void **state)
{
    (void)state;
    static const char *const want[CMA_METRICRULE_REASON__COUNT] = {
        "Accepted",     "InvalidSpec",    "BackendNotAllowed", "NamespaceNotAllowed",
        "TooManyRules", "TooManyMetrics", "Conflict"};
    for (int r = 0; r < CMA_METRICRULE_REASON__COUNT; r++)
        assert_string_equal(cma_metricrule_reason_name((enum cma_metricrule_reason)r), want[r]);
    assert_null(cma_metricrule_reason_name(CMA_METRICRULE_REASON__COUNT));
    enum cma_metricrule_reason got = CMA_METRICRULE_REASON__COUNT;
    for (int r = 0; r < CMA_METRICRULE_REASON__COUNT; r++) {
        assert_true(cma_metricrule_reason_from_name(want[r], &got));
        assert_int_equal(got, r);
    }
    got = CMA_METRICRULE_REASON_CONFLICT;
    assert_false(cma_metricrule_reason_from_name("Invalid", &got));
    assert_false(cma_metricrule_reason_from_name("accepted", &got));
    assert_false(cma_metricrule_reason_from_name("", &got));
    assert_false(cma_metricrule_reason_from_name(NULL, &got));
    assert_int_equal(got, CMA_METRICRULE_REASON_CONFLICT);
}

static void test_cma_metricrule_status_build__exact_bytes(void **state)
{
    (void)state;
    const char *metrics[] = {"queue_depth", "http_per_second", "queue_depth"};
    char *s = build(3, CMA_METRICRULE_REASON_ACCEPTED, NULL, metrics, 3, NULL, T0_MS);
    assert_string_equal(
        s, "{\"conditions\":[{\"lastTransitionTime\":\"2026-12-01T15:00:00Z\",\"message\":"
           "\"every rule loaded\",\"observedGeneration\":3,\"reason\":\"Accepted\",\"status\":"
           "\"True\",\"type\":\"Accepted\"}],\"metrics\":[\"http_per_second\",\"queue_depth\"],"
           "\"observedGeneration\":3}");
    free(s);
    s = build(4, CMA_METRICRULE_REASON_INVALID_SPEC,
              "spec.rules[0].metricsQuery: 1:23: unexpected \"(\"", NULL, 0, NULL, T0_MS);
    assert_string_equal(
        s, "{\"conditions\":[{\"lastTransitionTime\":\"2026-12-01T15:00:00Z\",\"message\":"
           "\"spec.rules[0].metricsQuery: 1:23: unexpected \\\"(\\\"\",\"observedGeneration\":4,"
           "\"reason\":\"InvalidSpec\",\"status\":\"False\",\"type\":\"Accepted\"}],\"metrics\":"
           "[],\"observedGeneration\":4}");
    free(s);
    /* the same inputs give the same bytes, whatever order the metrics come in */
    const char *a[] = {"b", "a", "c"}, *b[] = {"c", "b", "a", "a"};
    char *x = build(1, CMA_METRICRULE_REASON_CONFLICT, "m", a, 3, NULL, T0_MS);
    char *y = build(1, CMA_METRICRULE_REASON_CONFLICT, "m", b, 4, NULL, T0_MS);
    assert_string_equal(x, y);
    assert_non_null(strstr(x, "\"metrics\":[\"a\",\"b\",\"c\"]"));
    assert_non_null(strstr(x, "\"reason\":\"Conflict\",\"status\":\"False\""));
    free(x);
    free(y);
}

static void test_cma_metricrule_status_build__transition_time(void **state)
{
    (void)state;
    char *first = build(1, CMA_METRICRULE_REASON_ACCEPTED, NULL, NULL, 0, NULL, T0_MS);
    /* a new generation, still True: the time stays */
    char *same = build(2, CMA_METRICRULE_REASON_ACCEPTED, NULL, NULL, 0, first, T1_MS);
    assert_non_null(strstr(same, "\"lastTransitionTime\":\"2026-12-01T15:00:00Z\""));
    assert_non_null(strstr(same, "\"observedGeneration\":2"));
    /* True → False: the time moves */
    char *broke = build(3, CMA_METRICRULE_REASON_INVALID_SPEC, "x", NULL, 0, same, T1_MS);
    assert_non_null(strstr(broke, "\"lastTransitionTime\":\"2026-12-01T16:00:00Z\""));
    /* False with another reason: status unchanged, the time stays (the Kubernetes rule) */
    char *other = build(3, CMA_METRICRULE_REASON_CONFLICT, "y", NULL, 0, broke, T1_MS + 5000);
    assert_non_null(strstr(other, "\"lastTransitionTime\":\"2026-12-01T16:00:00Z\""));
    /* an undecodable or foreign current status counts as none */
    char *junk = build(1, CMA_METRICRULE_REASON_ACCEPTED, NULL, NULL, 0, "{nope", T1_MS);
    assert_non_null(strstr(junk, "\"lastTransitionTime\":\"2026-12-01T16:00:00Z\""));
    char *none = build(1, CMA_METRICRULE_REASON_ACCEPTED, NULL, NULL, 0,
                       "{\"conditions\":[{\"type\":\"Ready\",\"status\":\"True\","
                       "\"lastTransitionTime\":\"2020-01-01T00:00:00Z\"}]}",
                       T1_MS);
    assert_non_null(strstr(none, "\"lastTransitionTime\":\"2026-12-01T16:00:00Z\""));
    free(first);
    free(same);
    free(broke);
    free(other);
    free(junk);
    free(none);
}

static void test_cma_metricrule_status_needs_write__ignores_only_transition_time(void **state)
{
    (void)state;
    char *mine = build(2, CMA_METRICRULE_REASON_ACCEPTED, NULL, NULL, 0, NULL, T0_MS);
    /* another replica wrote the same status at another instant */
    char *theirs = build(2, CMA_METRICRULE_REASON_ACCEPTED, NULL, NULL, 0, NULL, T1_MS);
    assert_false(needs_write(theirs, mine));
    assert_false(needs_write(mine, mine));
    /* the same value, other key order and spacing (as the API server stores it) */
    assert_false(needs_write(
        "{ \"observedGeneration\": 2, \"metrics\": [], \"conditions\": [{\"type\": \"Accepted\", "
        "\"status\": \"True\", \"reason\": \"Accepted\", \"message\": \"every rule loaded\", "
        "\"observedGeneration\": 2, \"lastTransitionTime\": \"2020-01-01T00:00:00Z\"}]}",
        mine));
    /* no status yet, or anything else different: write */
    assert_true(needs_write(NULL, mine));
    assert_true(needs_write("", mine));
    assert_true(needs_write("null", mine));
    char *next_gen = build(3, CMA_METRICRULE_REASON_ACCEPTED, NULL, NULL, 0, mine, T1_MS);
    assert_true(needs_write(mine, next_gen));
    const char *m[] = {"x"};
    char *more = build(2, CMA_METRICRULE_REASON_ACCEPTED, NULL, m, 1, mine, T1_MS);
    assert_true(needs_write(mine, more));
    char *msg = build(2, CMA_METRICRULE_REASON_ACCEPTED, "other text", NULL, 0, mine, T1_MS);
    assert_true(needs_write(mine, msg));
    /* a new status that is not JSON is the caller's bug */
    bool need = false;
    struct cma_err err = {0};
    assert_int_equal(cma_metricrule_status_needs_write(mine, "nope", &need, &err),
                     CMA_ERR_INTERNAL);
    free(mine);
    free(theirs);
    free(next_gen);
    free(more);
    free(msg);
}

static void test_cma_metricrule_status_build__schema_caps(void **state)
{
    (void)state;
    /* a message over 32768 bytes, cut before a 3-byte character that would cross the cap */
    size_t len = CMA_METRICRULE_STATUS_MAX_MESSAGE + 10;
    char *long_msg = malloc(len + 1);
    assert_non_null(long_msg);
    memset(long_msg, 'a', len);
    memcpy(long_msg + CMA_METRICRULE_STATUS_MAX_MESSAGE - 1, "\xe2\x82\xac", 3); /* € */
    long_msg[len] = '\0';
    /* 1,100 metrics and one name of 254 bytes */
    const char **names = calloc(1101, sizeof(*names));
    char(*store)[8] = calloc(1100, sizeof(*store));
    char *big = malloc(255); /* on the heap: names[] outlives no frame, but gcc -O2 flags a local */
    assert_non_null(names);
    assert_non_null(store);
    assert_non_null(big);
    for (int i = 0; i < 1100; i++) {
        snprintf(store[i], sizeof(store[i]), "m%04d", 1099 - i);
        names[i] = store[i];
    }
    memset(big, 'z', 254);
    big[254] = '\0';
    names[1100] = big;
    char *s = build(1, CMA_METRICRULE_REASON_TOO_MANY_METRICS, long_msg, names, 1101, NULL, T0_MS);
    char *want_msg_end = strstr(s, "\",\"observedGeneration\"");
    char *msg_start = strstr(s, "\"message\":\"") + strlen("\"message\":\"");
    assert_int_equal(want_msg_end - msg_start, CMA_METRICRULE_STATUS_MAX_MESSAGE - 1);
    assert_non_null(strstr(s, "\"m0999\"]"));
    assert_null(strstr(s, "\"m1000\""));
    assert_null(strstr(s, "zzz"));
    /* invalid UTF-8 in a message becomes '?' instead of failing */
    char *bad = build(1, CMA_METRICRULE_REASON_INVALID_SPEC, "bad \xff byte", NULL, 0, NULL, T0_MS);
    assert_non_null(strstr(bad, "\"message\":\"bad ? byte\""));
    free(bad);
    free(s);
    free(big);
    free(store);
    free(names);
    free(long_msg);
    char *json = NULL;
    struct cma_err err = {0};
    struct cma_metricrule_outcome o = {CMA_METRICRULE_REASON__COUNT, NULL, NULL, 0};
    assert_int_equal(cma_metricrule_status_build(1, &o, NULL, T0_MS, &json, &err),
                     CMA_ERR_INTERNAL);
    o.reason = CMA_METRICRULE_REASON_ACCEPTED;
    assert_int_equal(cma_metricrule_status_build(-1, &o, NULL, T0_MS, &json, &err),
                     CMA_ERR_INTERNAL);
    assert_null(json);
}

static void test_cma_metricrule_status_conflict_message__winners(void **state)
{
    (void)state;
    char *m = NULL;
    struct cma_metricrule_winner file = {.file = "config.yaml", .line = 12, .column = 5};
    assert_int_equal(cma_metricrule_status_conflict_message("pods/queue_depth", &file, &m, NULL),
                     CMA_OK);
    assert_string_equal(m, "pods/queue_depth is served by the config file's rule config.yaml:12:5");
    free(m);
    struct cma_metricrule_winner older = {.namespace_ = "shop", .name = "older"};
    assert_int_equal(cma_metricrule_status_conflict_message("queue_depth", &older, &m, NULL),
                     CMA_OK);
    assert_string_equal(m, "queue_depth is served by MetricRule shop/older");
    free(m);
    struct cma_metricrule_winner nobody = {0};
    struct cma_err err = {0};
    assert_int_equal(cma_metricrule_status_conflict_message("x", &nobody, &m, &err),
                     CMA_ERR_INTERNAL);
}

/* Every reason's status, as a status write would store it, through crd_validate.py. */
static void test_cma_metricrule_status_build__valid_under_crd_schema(void **state)
{
    (void)state;
    char path[] = "/tmp/cma-mr-status-XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    FILE *f = fdopen(fd, "w");
    assert_non_null(f);
    const char *metrics[] = {"queue_depth", "http_requests_per_second"};
    char *prev = NULL;
    for (int r = 0; r < CMA_METRICRULE_REASON__COUNT; r++) {
        char *s = build(r + 1, (enum cma_metricrule_reason)r,
                        r == CMA_METRICRULE_REASON_INVALID_SPEC
                            ? "spec.rules[0].metricsQuery: 1:23: unexpected \"(\" in aggregation"
                            : NULL,
                        metrics, r == CMA_METRICRULE_REASON_ACCEPTED ? 2 : 0, prev, T0_MS);
        fprintf(f,
                "---\n{\"apiVersion\":\"metrics.custom-metrics-adapter.dev/v1alpha1\","
                "\"kind\":\"MetricRule\",\"metadata\":{\"name\":\"r%d\",\"namespace\":\"shop\"},"
                "\"spec\":{\"rules\":[{\"seriesQuery\":\"a\",\"metricsQuery\":\"b\"}]},"
                "\"status\":%s}\n",
                r, s);
        free(prev);
        prev = s;
    }
    free(prev);
    assert_int_equal(fclose(f), 0);
    char cmd[4096];
    snprintf(cmd, sizeof(cmd),
             "python3 '%s/tests/lib/crd_validate.py' validate --with-status "
             "'%s/deploy/components/metric-rules/crd.yaml' '%s' 2>&1",
             cma_source_dir(), cma_source_dir(), path);
    FILE *p = popen(cmd, "r");
    assert_non_null(p);
    char line[4096];
    int ok = 0, lines = 0;
    while (fgets(line, sizeof(line), p)) {
        lines++;
        if (strncmp(line, "ok ", 3) == 0)
            ok++;
        else
            print_error("crd_validate: %s", line);
    }
    int rc = pclose(p);
    unlink(path);
    assert_int_equal(rc, 0);
    assert_int_equal(lines, CMA_METRICRULE_REASON__COUNT);
    assert_int_equal(ok, CMA_METRICRULE_REASON__COUNT);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cma_metricrule_reason_name__every_reason),
        cmocka_unit_test(test_cma_metricrule_status_build__exact_bytes),
        cmocka_unit_test(test_cma_metricrule_status_build__transition_time),
        cmocka_unit_test(test_cma_metricrule_status_needs_write__ignores_only_transition_time),
        cmocka_unit_test(test_cma_metricrule_status_build__schema_caps),
        cmocka_unit_test(test_cma_metricrule_status_conflict_message__winners),
        cmocka_unit_test(test_cma_metricrule_status_build__valid_under_crd_schema),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
