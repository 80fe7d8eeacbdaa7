/* fakehttp.c: the shared test helpers of fakehttp.h: the fake HTTP server (one listening socket
 * on 127.0.0.1:0, one thread that accepts, records and answers one connection at a time until
 * stopped, polling a stop flag every 20 ms), loopback client helpers and the fixture reader.
 * Test code only: it is linked into unit tests (cma_testlib), never into the adapter. */
#include "fakehttp.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#ifndef CMA_SOURCE_DIR_DEFAULT
#define CMA_SOURCE_DIR_DEFAULT "."
#endif

#define MAX_TABLE 64
#define MAX_REQUEST_BYTES ((size_t)64 << 20)

struct cma_fake_http {
    int fd;
    int port;
    pthread_t thread;
    atomic_bool stop;
    struct cma_fake_answer table[MAX_TABLE];
    size_t n_table;
    size_t next; /* in-order mode: the next answer */
    cma_fake_http_fn fn;
    void *fn_ctx;
    pthread_mutex_t lock; /* guards reqs, n_reqs, cap_reqs */
    struct cma_fake_request **reqs;
    size_t n_reqs, cap_reqs;
};

/* ---- requests ---------------------------------------------------------------------------- */

static void request_free(struct cma_fake_request *r)
{
    if (!r)
        return;
    free(r->head);
    free(r->method);
    free(r->target);
    free(r->path);
    free(r->body);
    free(r);
}

static void sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

static void send_all(int fd, const char *p, size_t len)
{
    while (len > 0) {
        ssize_t n = send(fd, p, len, MSG_NOSIGNAL);
        if (n <= 0)
            return;
        p += n;
        len -= (size_t)n;
    }
}

/* Receives into *buf (grown as needed) until `done` says enough or the peer stops; false when
 * the peer is gone before that, or on allocation failure. */
static bool recv_more(int fd, char **buf, size_t *cap, size_t *len)
{
    if (*len == *cap) {
        if (*cap >= MAX_REQUEST_BYTES)
            return false;
        char *grown = realloc(*buf, *cap * 2 + 1);
        if (!grown)
            return false;
        *buf = grown;
        *cap *= 2;
    }
    ssize_t n = recv(fd, *buf + *len, *cap - *len, 0);
    if (n <= 0)
        return false;
    *len += (size_t)n;
    (*buf)[*len] = '\0';
    return true;
}

/* Splits the request line into method, target and path. */
static bool parse_request_line(struct cma_fake_request *r)
{
    const char *sp = strchr(r->head, ' ');
    if (!sp)
        return false;
    const char *target = sp + 1;
    size_t tlen = strcspn(target, " \r\n");
    r->method = strndup(r->head, (size_t)(sp - r->head));
    r->target = strndup(target, tlen);
    r->path = strndup(target, strcspn(target, "? \r\n"));
    return r->method && r->target && r->path;
}

/* Reads one request (head, then a Content-Length body); NULL when the peer is gone. */
static struct cma_fake_request *read_request(int fd)
{
    size_t cap = 1 << 16, len = 0;
    char *buf = malloc(cap + 1);
    char *end = NULL;
    while (buf && !end) {
        if (!recv_more(fd, &buf, &cap, &len)) {
            free(buf);
            return NULL;
        }
        end = strstr(buf, "\r\n\r\n");
    }
    if (!buf)
        return NULL;
    size_t head_len = (size_t)(end - buf) + 4, body_len = 0;
    const char *cl = strcasestr(buf, "\r\nContent-Length:");
    if (cl && cl < end)
        body_len = (size_t)strtoul(cl + 17, NULL, 10);
    while (len < head_len + body_len && recv_more(fd, &buf, &cap, &len))
        ;
    if (len < head_len + body_len)
        body_len = len - head_len;
    struct cma_fake_request *r = calloc(1, sizeof(*r));
    if (r) {
        r->head = strndup(buf, head_len);
        r->body = strndup(buf + head_len, body_len);
        r->body_len = body_len;
    }
    free(buf);
    if (r && (!r->head || !r->body || !parse_request_line(r))) {
        request_free(r);
        return NULL;
    }
    return r;
}

static bool record(struct cma_fake_http *s, struct cma_fake_request *r)
{
    bool ok = true;
    pthread_mutex_lock(&s->lock);
    if (s->n_reqs == s->cap_reqs) {
        size_t cap = s->cap_reqs ? s->cap_reqs * 2 : 16;
        struct cma_fake_request **grown = realloc(s->reqs, cap * sizeof(*grown));
        if (grown) {
            s->reqs = grown;
            s->cap_reqs = cap;
        } else {
            ok = false;
        }
    }
    if (ok)
        s->reqs[s->n_reqs++] = r;
    pthread_mutex_unlock(&s->lock);
    return ok;
}

/* ---- answers ----------------------------------------------------------------------------- */

static const struct cma_fake_answer not_found = {
    .status = 404, .content_type = "text/plain", .body = "404 page not found\n"};

static struct cma_fake_answer pick_answer(struct cma_fake_http *s, const struct cma_fake_request *r)
{
    struct cma_fake_answer a = not_found;
    if (s->fn) {
        s->fn(s->fn_ctx, r, &a);
        return a;
    }
    if (s->n_table == 0)
        return a;
    if (s->table[0].path) {
        for (size_t i = 0; i < s->n_table; i++)
            if (s->table[i].path && strcmp(s->table[i].path, r->path) == 0)
                return s->table[i];
        return a;
    }
    size_t i = s->next < s->n_table ? s->next++ : s->n_table - 1;
    return s->table[i];
}

/* The status line's reason phrase, as a real server writes it (a client's error message may
 * quote it). */
static const char *reason_of(int status)
{
    switch (status) {
    case 200:
        return "OK";
    case 400:
        return "Bad Request";
    case 401:
        return "Unauthorized";
    case 403:
        return "Forbidden";
    case 404:
        return "Not Found";
    case 422:
        return "Unprocessable Entity";
    case 429:
        return "Too Many Requests";
    case 500:
        return "Internal Server Error";
    case 502:
        return "Bad Gateway";
    case 503:
        return "Service Unavailable";
    case 504:
        return "Gateway Timeout";
    default:
        return "Other";
    }
}

static void send_chunked(int fd, const struct cma_fake_answer *a, const char *body, size_t len)
{
    char head[512];
    int n = snprintf(head, sizeof(head),
                     "HTTP/1.1 %d %s\r\nContent-Type: %s\r\nTransfer-Encoding: chunked\r\n"
                     "Connection: close\r\n\r\n",
                     a->status, reason_of(a->status),
                     a->content_type ? a->content_type : "application/json");
    send_all(fd, head, (size_t)n);
    for (size_t off = 0; off < len; off += a->chunk) {
        size_t c = len - off < a->chunk ? len - off : a->chunk;
        n = snprintf(head, sizeof(head), "%zx\r\n", c);
        send_all(fd, head, (size_t)n);
        send_all(fd, body + off, c);
        send_all(fd, "\r\n", 2);
    }
    send_all(fd, "0\r\n\r\n", 5);
}

static void send_answer(struct cma_fake_http *s, int fd, const struct cma_fake_answer *a)
{
    for (int waited = 0; waited < a->delay_ms && !atomic_load(&s->stop); waited += 10)
        sleep_ms(10);
    if (a->status == 0)
        return;
    const char *body = a->body ? a->body : "";
    size_t len = a->body_len ? a->body_len : strlen(body);
    if (a->chunk) {
        send_chunked(fd, a, body, len);
        return;
    }
    char head[512];
    int n = snprintf(head, sizeof(head),
                     "HTTP/1.1 %d %s\r\nContent-Type: %s\r\nContent-Length: %zu\r\n"
                     "Connection: close\r\n\r\n",
                     a->status, reason_of(a->status),
                     a->content_type ? a->content_type : "application/json",
                     a->declared_len ? a->declared_len : len);
    send_all(fd, head, (size_t)n);
    send_all(fd, body, len);
}

static void *serve(void *arg)
{
    struct cma_fake_http *s = arg;
    while (!atomic_load(&s->stop)) {
        struct pollfd p = {s->fd, POLLIN, 0};
        if (poll(&p, 1, 20) <= 0)
            continue;
        int c = accept(s->fd, NULL, NULL);
        if (c < 0)
            continue;
        struct cma_fake_request *r = read_request(c);
        if (r) {
            struct cma_fake_answer a = pick_answer(s, r);
            if (!record(s, r))
                request_free(r);
            send_answer(s, c, &a);
        }
        shutdown(c, SHUT_RDWR);
        close(c);
    }
    return NULL;
}

/* ---- server lifecycle -------------------------------------------------------------------- */

/* A TCP socket bound to 127.0.0.1 on a port the kernel picks (*port), listening when `listen_too`
 * (a backlog of 64); -1 with errno on failure. */
static int bind_loopback(bool listen_too, int *port)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -1;
    struct sockaddr_in addr = {.sin_family = AF_INET, .sin_port = 0};
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t alen = sizeof(addr);
    if (bind(fd, (struct sockaddr *)&addr, sizeof(addr)) != 0 ||
        (listen_too && listen(fd, 64) != 0) ||
        getsockname(fd, (struct sockaddr *)&addr, &alen) != 0) {
        int e = errno;
        close(fd);
        errno = e;
        return -1;
    }
    *port = ntohs(addr.sin_port);
    return fd;
}

static int listen_loopback(int *port)
{
    return bind_loopback(true, port);
}

static struct cma_fake_http *start(struct cma_fake_http *s)
{
    if (!s)
        return NULL;
    pthread_mutex_init(&s->lock, NULL);
    s->fd = listen_loopback(&s->port);
    if (s->fd < 0 || pthread_create(&s->thread, NULL, serve, s) != 0) {
        if (s->fd >= 0)
            close(s->fd);
        pthread_mutex_destroy(&s->lock);
        free(s);
        return NULL;
    }
    return s;
}

struct cma_fake_http *cma_fake_http_start(const struct cma_fake_answer *answers, size_t n)
{
    if (n > MAX_TABLE) {
        errno = E2BIG;
        return NULL;
    }
    struct cma_fake_http *s = calloc(1, sizeof(*s));
    if (s && n) {
        memcpy(s->table, answers, n * sizeof(*answers));
        s->n_table = n;
    }
    return start(s);
}

struct cma_fake_http *cma_fake_http_start_fn(cma_fake_http_fn fn, void *ctx)
{
    struct cma_fake_http *s = calloc(1, sizeof(*s));
    if (s) {
        s->fn = fn;
        s->fn_ctx = ctx;
    }
    return start(s);
}

void cma_fake_http_stop(struct cma_fake_http *s)
{
    if (!s)
        return;
    atomic_store(&s->stop, true);
    pthread_join(s->thread, NULL);
    close(s->fd);
    for (size_t i = 0; i < s->n_reqs; i++)
        request_free(s->reqs[i]);
    free(s->reqs);
    pthread_mutex_destroy(&s->lock);
    free(s);
}

int cma_fake_http_port(const struct cma_fake_http *s)
{
    return s->port;
}

char *cma_fake_http_url(const struct cma_fake_http *s, const char *suffix)
{
    char *url = NULL;
    if (asprintf(&url, "http://127.0.0.1:%d%s", s->port, suffix ? suffix : "") < 0)
        return NULL;
    return url;
}

size_t cma_fake_http_count(struct cma_fake_http *s)
{
    pthread_mutex_lock(&s->lock);
    size_t n = s->n_reqs;
    pthread_mutex_unlock(&s->lock);
    return n;
}

const struct cma_fake_request *cma_fake_http_request(struct cma_fake_http *s, size_t i)
{
    pthread_mutex_lock(&s->lock);
    const struct cma_fake_request *r = i < s->n_reqs ? s->reqs[i] : NULL;
    pthread_mutex_unlock(&s->lock);
    return r;
}

bool cma_fake_http_has_header(struct cma_fake_http *s, size_t i, const char *line)
{
    const struct cma_fake_request *r = cma_fake_http_request(s, i);
    const char *colon = strchr(line, ':');
    if (!r || !colon)
        return false;
    size_t name_len = (size_t)(colon - line);
    for (const char *p = strstr(r->head, "\r\n"); p; p = strstr(p + 2, "\r\n")) {
        const char *h = p + 2;
        size_t hlen = strcspn(h, "\r\n");
        if (hlen == strlen(line) && strncasecmp(h, line, name_len) == 0 &&
            strncmp(h + name_len, colon, hlen - name_len) == 0)
            return true;
    }
    return false;
}

/* ---- loopback client --------------------------------------------------------------------- */

int cma_loopback_connect(int port)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -1;
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (connect(fd, (struct sockaddr *)&a, sizeof a) != 0) {
        int e = errno;
        close(fd);
        errno = e;
        return -1;
    }
    return fd;
}

int cma_loopback_unused_port(void)
{
    int port = -1;
    int fd = bind_loopback(false, &port);
    if (fd < 0)
        return -1;
    close(fd); /* nothing listens there now */
    return port;
}

/* ---- files and fixtures ------------------------------------------------------------------ */

const char *cma_source_dir(void)
{
    const char *env = getenv("CMA_SOURCE_DIR");
    return env && env[0] ? env : CMA_SOURCE_DIR_DEFAULT;
}

char *cma_file_read(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    size_t cap = 4096, n = 0;
    char *buf = malloc(cap + 1);
    size_t got;
    while (buf && (got = fread(buf + n, 1, cap - n, f)) > 0) {
        n += got;
        if (n == cap) {
            char *grown = realloc(buf, cap * 2 + 1);
            if (!grown)
                free(buf);
            buf = grown;
            cap *= 2;
        }
    }
    bool failed = ferror(f) != 0;
    fclose(f);
    if (!buf || failed) {
        free(buf);
        return NULL;
    }
    buf[n] = '\0';
    if (len)
        *len = n;
    return buf;
}

bool cma_file_write(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    if (!f)
        return false;
    bool ok = fputs(text, f) >= 0;
    return fclose(f) == 0 && ok;
}

char *cma_fixture_read(const char *relpath, size_t *len)
{
    char path[4096];
    int n = snprintf(path, sizeof(path), "%s/%s", cma_source_dir(), relpath);
    if (n < 0 || (size_t)n >= sizeof(path))
        return NULL;
    return cma_file_read(path, len);
}

/* cma_fixture_read() of <prefix><name>; NULL when the path is too long or cannot be read. */
static char *fixture_under(const char *prefix, const char *name, size_t *len)
{
    char rel[2048];
    int n = snprintf(rel, sizeof(rel), "%s%s", prefix, name);
    if (n < 0 || (size_t)n >= sizeof(rel))
        return NULL;
    return cma_fixture_read(rel, len);
}

char *cma_shared_fixture_read(const char *name, size_t *len)
{
    return fixture_under("../shared/fixtures/", name, len);
}

char *cma_kube_fixture_read(const char *name, size_t *len)
{
    char *text = fixture_under("../shared/fixtures/kube-apiserver/", name, len);
    if (!text)
        fprintf(stderr, "cannot read fixture ../shared/fixtures/kube-apiserver/%s under %s\n", name,
                cma_source_dir());
    return text;
}

char *cma_shared_fixture_http_body(const char *name, size_t *len)
{
    size_t all_len = 0;
    char *all = cma_shared_fixture_read(name, &all_len);
    char *resp = all ? strstr(all, "\nHTTP/1.1 ") : NULL;
    char *body = resp ? strstr(resp, "\n\n") : NULL;
    if (!body) {
        free(all);
        return NULL;
    }
    body += 2;
    size_t blen = all_len - (size_t)(body - all);
    memmove(all, body, blen);
    all[blen] = '\0';
    if (len)
        *len = blen;
    return all;
}
