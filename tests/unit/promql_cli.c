/* promql_cli.c: the driver the differential test of the PromQL parser runs against Prometheus
 * (tests/e2e/test_promql_oracle.sh); built with the unit tests, not a test itself.
 *
 *   promql_cli print                  < queries.jsonl
 *   promql_cli enforce LABEL VALUE    < queries.jsonl
 *
 * stdin: JSON Lines, each line one JSON string (a query). stdout: for each line one JSON object,
 * {"ok":true,"text":"<printed or enforced query>"} or {"ok":false,"error":"<line:col: message>"}
 * (the column counts bytes). Exit status 0, or 2 when stdin is not JSON Lines of strings or on
 * a usage error. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cma/promql.h"

static void answer(json_t *obj)
{
    char *line = obj ? json_dumps(obj, JSON_COMPACT | JSON_ENSURE_ASCII) : NULL;
    if (line) {
        fputs(line, stdout);
        fputc('\n', stdout);
    } else {
        fputs("{\"ok\":false,\"error\":\"out of memory writing the answer\"}\n", stdout);
    }
    free(line);
    json_decref(obj);
}

static void one_query(const char *text, size_t len, int argc, char **argv)
{
    struct cma_err err;
    cma_err_clear(&err);
    struct cma_promql *q = NULL;
    struct cma_buf out;
    cma_buf_init(&out, (size_t)16 << 20);
    enum cma_errc rc = cma_promql_parse(text, len, &q, &err);
    if (rc == CMA_OK && argc == 4)
        rc = cma_promql_enforce(q, argv[2], argv[3], NULL, &err);
    if (rc == CMA_OK && cma_promql_print(q, &out) != CMA_OK)
        rc = cma_err_set(&err, CMA_ERR_NOMEM, "cannot print the query");
    if (rc == CMA_OK) {
        answer(json_pack("{s:b,s:s%}", "ok", 1, "text", cma_buf_str(&out), out.len));
    } else {
        char msg[CMA_ERR_MSG_MAX + 64];
        if (err.line)
            snprintf(msg, sizeof(msg), "%u:%u: %s", err.line, err.column, err.msg);
        else
            snprintf(msg, sizeof(msg), "%s", err.msg);
        answer(json_pack("{s:b,s:s}", "ok", 0, "error", msg));
    }
    cma_buf_done(&out);
    cma_promql_free(q);
}

int main(int argc, char **argv)
{
    if (!((argc == 2 && strcmp(argv[1], "print") == 0) ||
          (argc == 4 && strcmp(argv[1], "enforce") == 0))) {
        fprintf(stderr, "usage: promql_cli print | promql_cli enforce LABEL VALUE (stdin: JSON "
                        "Lines of query strings)\n");
        return 2;
    }
    char *line = NULL;
    size_t cap = 0;
    ssize_t n;
    unsigned long lineno = 0;
    int status = 0;
    while ((n = getline(&line, &cap, stdin)) >= 0) {
        lineno++;
        json_error_t jerr;
        json_t *v = json_loadb(line, (size_t)n, JSON_DECODE_ANY | JSON_ALLOW_NUL, &jerr);
        if (!v && strspn(line, " \t\r\n") == (size_t)n)
            continue; /* an empty line */
        if (!json_is_string(v)) {
            fprintf(stderr, "promql_cli: stdin line %lu is not a JSON string: %s\n", lineno,
                    v ? "another JSON value" : jerr.text);
            json_decref(v);
            status = 2;
            break;
        }
        one_query(json_string_value(v), json_string_length(v), argc, argv);
        json_decref(v);
        fflush(stdout);
    }
    free(line);
    return status;
}
