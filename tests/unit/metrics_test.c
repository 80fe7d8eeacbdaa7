/* metrics_test.c: the self-metrics registry: registration rules, counters, gauges, histograms
 * (kube's buckets, cumulative output), label escaping, sorted stable exposition, the child
 * ceiling, NULL safety, and concurrent increments from several threads. */
#include <math.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "cma/metrics.h"

static struct cma_metrics *new_registry(void)
{
    struct cma_metrics *m = NULL;
    assert_int_equal(cma_metrics_new(&m, NULL), CMA_OK);
    return m;
}

static char *render(struct cma_metrics *m)
{
    struct cma_buf b;
    cma_buf_init(&b, 0);
    assert_int_equal(cma_metrics_write(m, &b), CMA_OK);
    char *s = cma_buf_take(&b);
    assert_non_null(s);
    return s;
}

static void test_cma_metrics_counter__unlabelled_starts_at_zero(void **state)
{
    (void)state;
    struct cma_metrics *m = new_registry();
    struct cma_metric *c = cma_metrics_counter(m, "x_total", "Things.", NULL, 0);
    assert_non_null(c);
    char *out = render(m);
    assert_string_equal(out, "# HELP x_total Things.\n# TYPE x_total counter\nx_total 0\n");
    free(out);
    cma_metric_inc(c, NULL);
    cma_metric_add(c, NULL, 2.5);
    cma_metric_add(c, NULL, -1); /* a counter never goes down */
    assert_true(cma_metric_value(c, NULL) == 3.5);
    cma_metrics_free(m);
}

static void test_cma_metrics_counter__same_name_same_family(void **state)
{
    (void)state;
    struct cma_metrics *m = new_registry();
    const char *labels[] = {"code"};
    struct cma_metric *a = cma_metrics_counter(m, "r_total", "R.", labels, 1);
    assert_non_null(a);
    assert_ptr_equal(cma_metrics_counter(m, "r_total", "R.", labels, 1), a);
    assert_null(cma_metrics_gauge(m, "r_total", "R.", labels, 1));
    const char *other[] = {"verb"};
    assert_null(cma_metrics_counter(m, "r_total", "R.", other, 1));
    assert_null(cma_metrics_counter(m, "r_total", "R.", NULL, 0));
    cma_metrics_free(m);
}

static void test_cma_metrics_counter__bad_names_refused(void **state)
{
    (void)state;
    struct cma_metrics *m = new_registry();
    const char *dunder[] = {"__name"}, *colon[] = {"a:b"}, *dup[] = {"a", "a"}, *le[] = {"le"};
    double b[] = {1, 2};
    assert_null(cma_metrics_counter(m, "1abc", "", NULL, 0));
    assert_null(cma_metrics_counter(m, "a-b", "", NULL, 0));
    assert_null(cma_metrics_counter(m, "", "", NULL, 0));
    assert_null(cma_metrics_counter(m, "ok", "", dunder, 1));
    assert_null(cma_metrics_counter(m, "ok", "", colon, 1));
    assert_null(cma_metrics_counter(m, "ok", "", dup, 2));
    assert_null(cma_metrics_histogram(m, "h", "", le, 1, b, 2));
    double unsorted[] = {2, 1}, inf[] = {1, INFINITY};
    assert_null(cma_metrics_histogram(m, "h", "", NULL, 0, unsorted, 2));
    assert_null(cma_metrics_histogram(m, "h", "", NULL, 0, inf, 2));
    assert_non_null(cma_metrics_counter(m, "ns:ok_total", "", NULL, 0));
    assert_null(cma_metrics_counter(NULL, "ok", "", NULL, 0));
    cma_metrics_free(m);
}

static void test_cma_metrics_write__sorted_and_escaped(void **state)
{
    (void)state;
    struct cma_metrics *m = new_registry();
    const char *labels[] = {"b", "a"};
    struct cma_metric *g = cma_metrics_gauge(m, "zz", "Help with \\ and\nnewline.", labels, 2);
    struct cma_metric *c = cma_metrics_counter(m, "aa_total", "First.", NULL, 0);
    cma_metric_set(g, (const char *[]){"y", "q\"uote\\\n"}, 1.5);
    cma_metric_set(g, (const char *[]){"x", NULL}, -2);
    cma_metric_set(g, (const char *[]){"y", "a"}, 1e-9);
    cma_metric_add(c, NULL, 12);
    char *out = render(m);
    assert_string_equal(out, "# HELP aa_total First.\n"
                             "# TYPE aa_total counter\n"
                             "aa_total 12\n"
                             "# HELP zz Help with \\\\ and\\nnewline.\n"
                             "# TYPE zz gauge\n"
                             "zz{b=\"x\",a=\"\"} -2\n"
                             "zz{b=\"y\",a=\"a\"} 1e-09\n"
                             "zz{b=\"y\",a=\"q\\\"uote\\\\\\n\"} 1.5\n");
    char *again = render(m);
    assert_string_equal(out, again);
    free(out);
    free(again);
    cma_metrics_free(m);
}

static void test_cma_metrics_histogram__kube_buckets_cumulative(void **state)
{
    (void)state;
    struct cma_metrics *m = new_registry();
    static const double bounds[] = {CMA_METRICS_KUBE_BUCKETS};
    assert_int_equal(sizeof(bounds) / sizeof(bounds[0]), CMA_METRICS_N_KUBE_BUCKETS);
    const char *labels[] = {"verb"};
    struct cma_metric *h =
        cma_metrics_histogram(m, "d_seconds", "D.", labels, 1, bounds, CMA_METRICS_N_KUBE_BUCKETS);
    assert_non_null(h);
    const char *get[] = {"GET"};
    cma_metric_observe(h, get, 0.001); /* <= 0.005 */
    cma_metric_observe(h, get, 0.005); /* le is inclusive */
    cma_metric_observe(h, get, 0.3);   /* <= 0.4 */
    cma_metric_observe(h, get, 100);   /* +Inf only */
    assert_true(cma_metric_value(h, get) == 4);
    char *out = render(m);
    assert_non_null(strstr(out, "# TYPE d_seconds histogram\n"));
    assert_non_null(strstr(out, "d_seconds_bucket{verb=\"GET\",le=\"0.005\"} 2\n"));
    assert_non_null(strstr(out, "d_seconds_bucket{verb=\"GET\",le=\"0.2\"} 2\n"));
    assert_non_null(strstr(out, "d_seconds_bucket{verb=\"GET\",le=\"0.4\"} 3\n"));
    assert_non_null(strstr(out, "d_seconds_bucket{verb=\"GET\",le=\"60\"} 3\n"));
    assert_non_null(strstr(out, "d_seconds_bucket{verb=\"GET\",le=\"+Inf\"} 4\n"));
    const char *sum = strstr(out, "d_seconds_sum{verb=\"GET\"} ");
    assert_non_null(sum);
    assert_true(fabs(strtod(strchr(sum, ' ') + 1, NULL) - 100.306) < 1e-9);
    assert_non_null(strstr(out, "d_seconds_count{verb=\"GET\"} 4\n"));
    /* 23 bounds + Inf bucket lines, sum, count, HELP, TYPE */
    size_t lines = 0;
    for (const char *p = out; *p; p++)
        lines += *p == '\n';
    assert_int_equal(lines, 23 + 1 + 2 + 2);
    free(out);
    cma_metrics_free(m);
}

static void test_cma_metrics__wrong_use_is_ignored(void **state)
{
    (void)state;
    struct cma_metrics *m = new_registry();
    struct cma_metric *c = cma_metrics_counter(m, "c_total", "", NULL, 0);
    double b[] = {1};
    struct cma_metric *h = cma_metrics_histogram(m, "h", "", NULL, 0, b, 1);
    cma_metric_observe(c, NULL, 5);
    cma_metric_set(h, NULL, 5);
    cma_metric_add(h, NULL, 5);
    assert_true(cma_metric_value(c, NULL) == 0);
    assert_true(cma_metric_value(h, NULL) == 0);
    /* NULL family or registry: nothing happens, nothing crashes */
    cma_metric_inc(NULL, NULL);
    cma_metric_observe(NULL, NULL, 1);
    assert_true(cma_metric_value(NULL, NULL) == 0);
    assert_int_equal(cma_metrics_write(NULL, NULL), CMA_OK);
    cma_metrics_free(NULL);
    cma_metrics_free(m);
}

static void test_cma_metrics__child_ceiling_drops_and_counts(void **state)
{
    (void)state;
    struct cma_metrics *m = new_registry();
    const char *labels[] = {"k"};
    struct cma_metric *c = cma_metrics_counter(m, "many_total", "", labels, 1);
    char v[32];
    for (int i = 0; i < CMA_METRICS_MAX_CHILDREN + 10; i++) {
        snprintf(v, sizeof v, "v%05d", i);
        cma_metric_inc(c, (const char *[]){v});
    }
    assert_int_equal(cma_metrics_dropped(m), 10);
    snprintf(v, sizeof v, "v%05d", 0);
    cma_metric_inc(c, (const char *[]){v}); /* existing children keep counting */
    assert_true(cma_metric_value(c, (const char *[]){v}) == 2);
    snprintf(v, sizeof v, "v%05d", CMA_METRICS_MAX_CHILDREN);
    assert_true(cma_metric_value(c, (const char *[]){v}) == 0);
    char *out = render(m);
    size_t lines = 0;
    for (const char *p = out; *p; p++)
        lines += *p == '\n';
    assert_int_equal(lines, CMA_METRICS_MAX_CHILDREN + 2);
    assert_non_null(strstr(out, "\nmany_total{k=\"v00000\"} 2\nmany_total{k=\"v00001\"} 1\n"));
    free(out);
    cma_metrics_free(m);
}

static void test_cma_metrics_write__ceiling_empties_buffer(void **state)
{
    (void)state;
    struct cma_metrics *m = new_registry();
    cma_metrics_counter(m, "a_long_enough_name_total", "Some help text.", NULL, 0);
    struct cma_buf b;
    cma_buf_init(&b, 16);
    assert_int_equal(cma_metrics_write(m, &b), CMA_ERR_TOO_LARGE);
    assert_int_equal(b.len, 0);
    cma_buf_done(&b);
    cma_metrics_free(m);
}

static void test_cma_metrics_format_value__shortest(void **state)
{
    (void)state;
    char out[32];
    assert_string_equal(cma_metrics_format_value(0, out), "0");
    assert_string_equal(cma_metrics_format_value(60, out), "60");
    assert_string_equal(cma_metrics_format_value(0.1, out), "0.1");
    assert_string_equal(cma_metrics_format_value(1.25, out), "1.25");
    assert_string_equal(cma_metrics_format_value(1.0 / 3, out), "0.3333333333333333");
    assert_string_equal(cma_metrics_format_value(1e20, out), "1e+20");
    assert_string_equal(cma_metrics_format_value(NAN, out), "NaN");
    assert_string_equal(cma_metrics_format_value(INFINITY, out), "+Inf");
    assert_string_equal(cma_metrics_format_value(-INFINITY, out), "-Inf");
    assert_string_equal(cma_metrics_format_value(1.7e9 + 0.5, out), "1700000000.5");
}

struct worker {
    struct cma_metric *c, *h;
    int id;
};

static void *hammer(void *arg)
{
    struct worker *w = arg;
    char v[16];
    for (int i = 0; i < 20000; i++) {
        snprintf(v, sizeof v, "k%d", i % 50); /* children created while others increment */
        cma_metric_inc(w->c, (const char *[]){v});
        cma_metric_observe(w->h, NULL, 0.01);
    }
    return NULL;
}

static void test_cma_metrics__concurrent_increments_all_counted(void **state)
{
    (void)state;
    struct cma_metrics *m = new_registry();
    const char *labels[] = {"k"};
    double b[] = {0.005, 0.05};
    struct worker w[4];
    pthread_t t[4];
    for (int i = 0; i < 4; i++) {
        w[i] = (struct worker){cma_metrics_counter(m, "hits_total", "", labels, 1),
                               cma_metrics_histogram(m, "lat_seconds", "", NULL, 0, b, 2), i};
        assert_int_equal(pthread_create(&t[i], NULL, hammer, &w[i]), 0);
    }
    for (int i = 0; i < 4; i++)
        pthread_join(t[i], NULL);
    double total = 0;
    char v[16];
    for (int k = 0; k < 50; k++) {
        snprintf(v, sizeof v, "k%d", k);
        total += cma_metric_value(w[0].c, (const char *[]){v});
    }
    assert_true(total == 4 * 20000);
    assert_true(cma_metric_value(w[0].h, NULL) == 4 * 20000);
    char *out = render(m);
    assert_non_null(strstr(out, "lat_seconds_bucket{le=\"0.05\"} 80000\n"));
    assert_non_null(strstr(out, "lat_seconds_bucket{le=\"0.005\"} 0\n"));
    free(out);
    cma_metrics_free(m);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cma_metrics_counter__unlabelled_starts_at_zero),
        cmocka_unit_test(test_cma_metrics_counter__same_name_same_family),
        cmocka_unit_test(test_cma_metrics_counter__bad_names_refused),
        cmocka_unit_test(test_cma_metrics_write__sorted_and_escaped),
        cmocka_unit_test(test_cma_metrics_histogram__kube_buckets_cumulative),
        cmocka_unit_test(test_cma_metrics__wrong_use_is_ignored),
        cmocka_unit_test(test_cma_metrics__child_ceiling_drops_and_counts),
        cmocka_unit_test(test_cma_metrics_write__ceiling_empties_buffer),
        cmocka_unit_test(test_cma_metrics_format_value__shortest),
        cmocka_unit_test(test_cma_metrics__concurrent_increments_all_counted),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
