/* excerpt_test.c: what of an error answer's body goes into a message (src/clients/excerpt.c):
 * a JSON error field, the text of markup (gateway error pages), a plain body as one line; never
 * markup, never more than the bound. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "../../src/clients/internal.h"

static const char *excerpt(const char *body, size_t max)
{
    static char out[1024];
    cma_clients_excerpt(body, body ? strlen(body) : 0, max, out, sizeof(out));
    return out;
}

static void test_cma_clients_excerpt__json_error_field(void **state)
{
    (void)state;
    assert_string_equal(excerpt(" {\"status\":\"error\",\"errorType\":\"execution\",\"error\":"
                                "\"query timed out\"}",
                                200),
                        "execution: query timed out");
    assert_string_equal(excerpt("{\"error\":\"too many\\nlines\"}", 200), "too many lines");
    /* JSON without an error field, or cut short: its first bytes (JSON is not markup) */
    assert_string_equal(excerpt("{\"message\":\"no\"}", 200), "{\"message\":\"no\"}");
    assert_string_equal(excerpt("{\"error\":\"cut", 200), "{\"error\":\"cut");
    /* a long error field is bounded too */
    char body[700];
    int n = snprintf(body, sizeof(body), "{\"error\":\"");
    memset(body + n, 'e', 600);
    strcpy(body + n + 600, "\"}");
    assert_int_equal(strlen(excerpt(body, 200)), 200);
}

static void test_cma_clients_excerpt__markup_text(void **state)
{
    (void)state;
    /* nginx's own 502 page */
    assert_string_equal(
        excerpt("<html>\r\n<head><title>502 Bad Gateway</title></head>\r\n<body>\r\n<center>"
                "<h1>502 Bad Gateway</h1></center>\r\n<hr><center>nginx/1.22.1</center>\r\n"
                "</body>\r\n</html>\r\n",
                200),
        "502 Bad Gateway nginx/1.22.1");
    /* comments, scripts and styles are not text; entities are decoded */
    assert_string_equal(excerpt("<!DOCTYPE html><!-- <b>x</b> --><style>p{color:red}</style>"
                                "<script>if (a < b) {}</script><p>a &lt;b&gt; &amp; &quot;c&quot; "
                                "&#39;d&#39;&nbsp;e &unknown;</p>",
                                200),
                        "a <b> & \"c\" 'd' e &unknown;");
    /* only a title: the title */
    assert_string_equal(
        excerpt("<html><head><title>Service Unavailable</title></head></html>", 200),
        "Service Unavailable");
    /* nothing but markup: nothing */
    assert_string_equal(excerpt("<html><body><hr/></body></html>", 200), "");
    /* a tag cut at the end of what was kept */
    assert_string_equal(excerpt("<p>down</p><a href=\"http://x", 200), "down");
    /* <header> is not <head> */
    assert_string_equal(excerpt("<header>top</header>", 200), "top");
}

static void test_cma_clients_excerpt__bounded_and_plain(void **state)
{
    (void)state;
    assert_string_equal(excerpt("no healthy upstream\n", 200), "no healthy upstream");
    assert_string_equal(excerpt("", 200), "");
    assert_string_equal(excerpt(NULL, 200), "");
    char page[3000];
    int n = snprintf(page, sizeof(page), "<html><body>");
    for (int i = n; i < 2980; i++)
        page[i] = (char)('a' + i % 26);
    strcpy(page + 2980, "</body>");
    const char *e = excerpt(page, 300);
    assert_int_equal(strlen(e), 300);
    assert_null(strchr(e, '<'));
    /* invalid UTF-8 and control bytes become printable */
    assert_string_equal(excerpt("bad \xff byte\ttab", 200), "bad ? byte tab");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cma_clients_excerpt__json_error_field),
        cmocka_unit_test(test_cma_clients_excerpt__markup_text),
        cmocka_unit_test(test_cma_clients_excerpt__bounded_and_plain),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
