/* api_health_test.c: /healthz, /livez and /readyz (api/api_health.c) through cma_app_handle:
 * "ok" as text/plain for a passing endpoint; ?verbose lists each check with [+]/[-] and ends
 * "<endpoint> check passed|failed"; readyz has the metrics-discovery check, which fails (500,
 * reason withheld) while no discovery has run, livez and healthz do not; a per-check subpath
 * answers that check alone and an unknown check is 404. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "api_fixture.h"

static const char CONFIG[] = "rules:\n"
                             "- seriesQuery: 'up{pod!=\"\",namespace!=\"\"}'\n"
                             "  resources: {template: <<.Resource>>}\n";

static const char *const UP[] = {"up{namespace=ml,pod=a}"};
static const struct fake_series SERIES[] = {{"up{pod!=\"\",namespace!=\"\"}", UP, 1}};
static const struct api_fixture_spec SPEC = {
    .config = CONFIG, .series = SERIES, .n_series = 1, .no_relist = true};

static int setup(void **state)
{
    *state = cma_test_api_fixture_new(&SPEC);
    return 0;
}

static int teardown(void **state)
{
    cma_test_api_fixture_free(*state);
    return 0;
}

static void expect_text(struct cma_app *app, const char *target, int status, const char *text)
{
    struct api_answer a = cma_test_api_request(app, "GET", target);
    if (a.status != status || strcmp(a.text, text) != 0)
        fail_msg("%s: want %d \"%s\", got %d \"%s\"", target, status, text, a.status, a.text);
    assert_string_equal(a.content_type, "text/plain; charset=utf-8");
    cma_test_api_answer_done(&a);
}

static void test_health__healthz_and_livez_pass(void **state)
{
    struct api_fixture *fx = *state;
    expect_text(&fx->app, "/healthz", 200, "ok");
    expect_text(&fx->app, "/livez", 200, "ok");
    expect_text(&fx->app, "/healthz?verbose", 200, "[+]ping ok\nhealthz check passed\n");
    expect_text(&fx->app, "/livez?verbose=1", 200, "[+]ping ok\nlivez check passed\n");
    expect_text(&fx->app, "/livez/ping", 200, "ok");
}

static void test_health__readyz_fails_until_discovery_ran(void **state)
{
    struct api_fixture *fx = *state;
    /* a published catalog without a discovery thread still has no relist counted */
    cma_test_api_fixture_relist(fx);
    expect_text(&fx->app, "/readyz?verbose", 500,
                "[+]ping ok\n[-]metrics-discovery failed: reason withheld\nreadyz check failed\n");
    struct api_answer a = cma_test_api_request(&fx->app, "GET", "/readyz");
    assert_int_equal(a.status, 500);
    assert_non_null(strstr(a.text, "[-]metrics-discovery failed: reason withheld\n"));
    cma_test_api_answer_done(&a);
    expect_text(&fx->app, "/readyz/ping", 200, "ok");
    expect_text(&fx->app, "/readyz/metrics-discovery", 500,
                "internal server error: metrics-discovery");
}

static void test_health__unknown_check_is_404(void **state)
{
    struct api_fixture *fx = *state;
    struct api_answer a = cma_test_api_request(&fx->app, "GET", "/livez/metrics-discovery");
    assert_int_equal(a.status, 404);
    cma_test_api_answer_done(&a);
    a = cma_test_api_request(&fx->app, "GET", "/healthz/no-such-check");
    assert_int_equal(a.status, 404);
    cma_test_api_answer_done(&a);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_health__healthz_and_livez_pass, setup, teardown),
        cmocka_unit_test_setup_teardown(test_health__readyz_fails_until_discovery_ran, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_health__unknown_check_is_404, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
