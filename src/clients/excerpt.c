/* excerpt.c: owns what of an error answer's body goes into a message (and so into a Kubernetes
 * Status): a short plain-text excerpt, never markup, never more than the caller's bound.
 *
 * - A Prometheus-API JSON answer ({"status":"error","errorType":...,"error":...}) gives its
 *   `error` field, after its errorType ("execution: query timed out");
 * - markup (a gateway's error page: nginx's 502 page, the HTML error of a proxy in front of Mimir
 *   or Thanos) gives its text: tags and comments dropped, <head>, <script> and <style> skipped
 *   (the <title> only when the body has no text), the common entities decoded, blanks folded
 *   ("502 Bad Gateway nginx/1.22.1");
 * - anything else is the body's first bytes as one printable line (cma_clients_snippet).
 * The body is whatever the caller kept of the answer (its first HEAD_BYTES in prom.c): a JSON
 * document cut short is not JSON, and its excerpt is its first bytes. */
#include <ctype.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include <jansson.h>

#include "internal.h"

static size_t skip_blanks(const char *s, size_t len, size_t i)
{
    while (i < len && isspace((unsigned char)s[i]))
        i++;
    return i;
}

/* ---- JSON: the error field ---------------------------------------------------------------- */

/* The `error` (and errorType) of a JSON object body, into out; false when it has none. */
static bool json_error(const char *body, size_t len, size_t max, char *out, size_t out_len)
{
    json_t *doc = json_loadb(body, len, 0, NULL);
    const char *error = json_string_value(json_object_get(doc, "error"));
    const char *type = json_string_value(json_object_get(doc, "errorType"));
    bool found = error && error[0];
    if (found) {
        char text[CMA_ERR_MSG_MAX];
        bool typed = type && type[0] && strlen(type) < 64;
        int n = snprintf(text, sizeof(text), "%s%s%s", typed ? type : "", typed ? ": " : "", error);
        size_t kept = n < 0 ? 0 : (size_t)n < sizeof(text) ? (size_t)n : sizeof(text) - 1;
        cma_clients_snippet(text, kept, max, out, out_len);
    }
    json_decref(doc);
    return found;
}

/* ---- markup: its text ---------------------------------------------------------------------- */

/* The text of markup, built in a bounded buffer. */
struct text {
    char *out;
    size_t cap, len;
    bool blank; /* a blank is due before the next character */
};

static void text_put(struct text *t, char c)
{
    if (t->len > 0 && t->blank && t->len + 1 < t->cap)
        t->out[t->len++] = ' ';
    t->blank = false;
    if (t->len + 1 < t->cap)
        t->out[t->len++] = c;
}

/* Index of the first case-insensitive occurrence of needle in s[i..len), or len. */
static size_t find_ci(const char *s, size_t len, size_t i, const char *needle)
{
    size_t n = strlen(needle);
    for (; i + n <= len; i++)
        if (strncasecmp(s + i, needle, n) == 0)
            return i;
    return len;
}

/* Is the tag at s[i] ('<' then optional '/') named `name`? */
static bool tag_is(const char *s, size_t len, size_t i, const char *name)
{
    size_t n = strlen(name);
    if (i + n + 1 > len || strncasecmp(s + i + 1, name, n) != 0)
        return false;
    return i + n + 1 == len || !isalnum((unsigned char)s[i + n + 1]);
}

/* Past the tag, comment or skipped element that begins at s[i] == '<'. */
static size_t past_tag(const char *s, size_t len, size_t i, bool skip_head)
{
    static const char *const skipped[] = {"script", "style", "head"};
    static const char *const closing[] = {"</script", "</style", "</head"};
    if (len - i >= 4 && memcmp(s + i, "<!--", 4) == 0) {
        size_t end = find_ci(s, len, i + 4, "-->");
        return end < len ? end + 3 : len;
    }
    for (size_t k = 0; k < sizeof(skipped) / sizeof(skipped[0]); k++)
        if ((k < 2 || skip_head) && tag_is(s, len, i, skipped[k]))
            i = find_ci(s, len, i + 1, closing[k]);
    const char *gt = i < len ? memchr(s + i, '>', len - i) : NULL;
    return gt ? (size_t)(gt - s) + 1 : len;
}

/* The entity at s[i] == '&' decoded into *c; returns its length, 0 when it is none we know. */
static size_t entity(const char *s, size_t len, size_t i, char *c)
{
    static const struct {
        const char *name;
        char c;
    } known[] = {{"&amp;", '&'},  {"&lt;", '<'},    {"&gt;", '>'},   {"&quot;", '"'},
                 {"&#39;", '\''}, {"&apos;", '\''}, {"&nbsp;", ' '}, {"&#34;", '"'}};
    for (size_t k = 0; k < sizeof(known) / sizeof(known[0]); k++) {
        size_t n = strlen(known[k].name);
        if (len - i >= n && strncasecmp(s + i, known[k].name, n) == 0) {
            *c = known[k].c;
            return n;
        }
    }
    return 0;
}

/* The text of the markup body into t (skip_head: without <head>'s). */
static void markup_text(const char *s, size_t len, bool skip_head, struct text *t)
{
    for (size_t i = 0; i < len && t->len + 1 < t->cap;) {
        char c = s[i];
        size_t n = 1;
        if (c == '<') {
            i = past_tag(s, len, i, skip_head);
            t->blank = true;
            continue;
        }
        if (c == '&' && (n = entity(s, len, i, &c)) == 0)
            n = 1;
        if (isspace((unsigned char)c) || (unsigned char)c < 0x20)
            t->blank = true;
        else
            text_put(t, c);
        i += n;
    }
    t->out[t->len] = '\0';
}

void cma_clients_excerpt(const char *body, size_t len, size_t max, char *out, size_t out_len)
{
    if (out_len == 0)
        return;
    out[0] = '\0';
    if (!body)
        return;
    size_t start = skip_blanks(body, len, 0);
    if (start < len && body[start] == '{' && json_error(body, len, max, out, out_len))
        return;
    if (start >= len || body[start] != '<') {
        cma_clients_snippet(body + start, len - start, max, out, out_len);
        return;
    }
    char text[1024];
    struct text t = {text, sizeof(text), 0, false};
    markup_text(body + start, len - start, true, &t);
    if (t.len == 0) /* a page whose only words are its <title> */
        markup_text(body + start, len - start, false, &t);
    cma_clients_snippet(text, t.len, max, out, out_len);
}
