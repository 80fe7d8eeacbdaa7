/* curl_pool.c: a bounded pool of CURL easy handles shared by the threads of one client, plus
 * the small helpers prom.c and kube.c both need (URL encoding and parts, curl error classes,
 * one-line body snippets, small file reads).
 *
 * DESIGN: an easy handle owns its connection cache, so handing the same handles from thread to
 * thread (never two threads at once) is what lets keep-alive connections be reused. take()
 * pops an idle handle under the mutex and resets its options (curl_easy_reset keeps the
 * connection, DNS and TLS-session caches); give() pushes it back, or cleans it up when
 * max_idle handles are already idle, so the pool never holds more than max_idle handles while
 * any number of threads may be in flight. curl_global_init() runs once per process through
 * pthread_once; its result is stored once and only read afterwards. */
#include "internal.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cma/str.h"

struct cma_curl_pool {
    pthread_mutex_t lock; /* guards idle and n_idle */
    CURL **idle;
    size_t n_idle;
    size_t max_idle;
};

static pthread_once_t global_once = PTHREAD_ONCE_INIT;
static CURLcode global_rc = CURLE_FAILED_INIT; /* written once inside global_once */

static void global_init_once(void)
{
    global_rc = curl_global_init(CURL_GLOBAL_DEFAULT);
}

enum cma_errc cma_curl_pool_new(size_t max_idle, struct cma_curl_pool **ret, struct cma_err *reterr)
{
    pthread_once(&global_once, global_init_once);
    if (global_rc != CURLE_OK)
        return cma_err_set(reterr, CMA_ERR_INTERNAL, "curl_global_init failed: %s",
                           curl_easy_strerror(global_rc));
    if (max_idle == 0)
        max_idle = CMA_CURL_POOL_MAX_IDLE;
    struct cma_curl_pool *pool = calloc(1, sizeof(*pool));
    if (!pool)
        return cma_err_set(reterr, CMA_ERR_NOMEM, "out of memory");
    pool->idle = calloc(max_idle, sizeof(*pool->idle));
    if (!pool->idle) {
        free(pool);
        return cma_err_set(reterr, CMA_ERR_NOMEM, "out of memory");
    }
    if (pthread_mutex_init(&pool->lock, NULL) != 0) {
        free(pool->idle);
        free(pool);
        return cma_err_set(reterr, CMA_ERR_INTERNAL, "pthread_mutex_init failed");
    }
    pool->max_idle = max_idle;
    *ret = pool;
    return CMA_OK;
}

void cma_curl_pool_free(struct cma_curl_pool *pool)
{
    if (!pool)
        return;
    for (size_t i = 0; i < pool->n_idle; i++)
        curl_easy_cleanup(pool->idle[i]);
    pthread_mutex_destroy(&pool->lock);
    free(pool->idle);
    free(pool);
}

CURL *cma_curl_pool_take(struct cma_curl_pool *pool)
{
    CURL *h = NULL;
    pthread_mutex_lock(&pool->lock);
    if (pool->n_idle > 0)
        h = pool->idle[--pool->n_idle];
    pthread_mutex_unlock(&pool->lock);
    if (h) {
        curl_easy_reset(h);
        return h;
    }
    return curl_easy_init();
}

void cma_curl_pool_give(struct cma_curl_pool *pool, CURL *h)
{
    if (!h)
        return;
    bool kept = false;
    pthread_mutex_lock(&pool->lock);
    if (pool->n_idle < pool->max_idle) {
        pool->idle[pool->n_idle++] = h;
        kept = true;
    }
    pthread_mutex_unlock(&pool->lock);
    if (!kept)
        curl_easy_cleanup(h);
}

static bool is_unreserved(unsigned char c)
{
    return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' ||
           c == '_' || c == '.' || c == '~';
}

enum cma_errc cma_clients_urlencode(struct cma_buf *b, const char *s, size_t len,
                                    bool plus_for_space)
{
    static const char hex[] = "0123456789ABCDEF";
    char chunk[192];
    size_t n = 0;
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)s[i];
        if (n > sizeof(chunk) - 4) {
            enum cma_errc rc = cma_buf_append(b, chunk, n);
            if (rc != CMA_OK)
                return rc;
            n = 0;
        }
        if (is_unreserved(c)) {
            chunk[n++] = (char)c;
        } else if (c == ' ' && plus_for_space) {
            chunk[n++] = '+';
        } else {
            chunk[n++] = '%';
            chunk[n++] = hex[c >> 4];
            chunk[n++] = hex[c & 15];
        }
    }
    return cma_buf_append(b, chunk, n);
}

enum cma_errc cma_clients_url_part(CURLU *u, CURLUPart part, char **ret)
{
    char *s = NULL;
    CURLUcode uc = curl_url_get(u, part, &s, 0);
    *ret = NULL;
    if (uc == CURLUE_OUT_OF_MEMORY)
        return CMA_ERR_NOMEM;
    if (uc != CURLUE_OK || !s)
        return CMA_OK;
    *ret = cma_strdup(s);
    curl_free(s);
    return *ret ? CMA_OK : CMA_ERR_NOMEM;
}

enum cma_errc cma_clients_append_unix_seconds(struct cma_buf *b, int64_t ms)
{
    const char *sign = ms < 0 ? "-" : "";
    uint64_t u = ms < 0 ? (uint64_t)(-(ms + 1)) + 1 : (uint64_t)ms;
    return cma_buf_printf(b, "%s%llu.%03llu", sign, (unsigned long long)(u / 1000),
                          (unsigned long long)(u % 1000));
}

/* Length of the valid UTF-8 sequence at s[0..len), 0 if invalid or cut. */
static size_t utf8_seq_len(const unsigned char *s, size_t len)
{
    size_t need;
    unsigned min;
    unsigned cp;
    if (s[0] >= 0xc2 && s[0] <= 0xdf) {
        need = 2;
        cp = s[0] & 0x1f;
        min = 0x80;
    } else if (s[0] >= 0xe0 && s[0] <= 0xef) {
        need = 3;
        cp = s[0] & 0x0f;
        min = 0x800;
    } else if (s[0] >= 0xf0 && s[0] <= 0xf4) {
        need = 4;
        cp = s[0] & 0x07;
        min = 0x10000;
    } else {
        return 0;
    }
    if (len < need)
        return 0;
    for (size_t i = 1; i < need; i++) {
        if ((s[i] & 0xc0) != 0x80)
            return 0;
        cp = (cp << 6) | (s[i] & 0x3f);
    }
    if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
        return 0;
    return need;
}

void cma_clients_snippet(const char *body, size_t len, size_t max, char *out, size_t out_len)
{
    if (out_len == 0)
        return;
    const unsigned char *s = (const unsigned char *)body;
    if (!s)
        len = 0;
    if (len > max)
        len = max;
    size_t o = 0;
    for (size_t i = 0; i < len && o + 1 < out_len;) {
        if (s[i] < 0x80) {
            out[o++] = (s[i] < 0x20 || s[i] == 0x7f) ? ' ' : (char)s[i];
            i++;
            continue;
        }
        size_t n = utf8_seq_len(s + i, len - i);
        if (n == 0) {
            out[o++] = '?';
            i++;
        } else if (o + n < out_len) {
            memcpy(out + o, s + i, n);
            o += n;
            i += n;
        } else {
            break;
        }
    }
    while (o > 0 && out[o - 1] == ' ')
        o--;
    out[o] = '\0';
}

enum cma_curl_class cma_clients_curl_class(CURLcode rc)
{
    switch (rc) {
    case CURLE_OK:
        return CMA_CURL_OK;
    case CURLE_OPERATION_TIMEDOUT:
        return CMA_CURL_TIMEOUT;
    case CURLE_WRITE_ERROR:
        return CMA_CURL_ABORTED;
    case CURLE_COULDNT_RESOLVE_PROXY:
    case CURLE_COULDNT_RESOLVE_HOST:
    case CURLE_COULDNT_CONNECT:
    case CURLE_SSL_CONNECT_ERROR:
    case CURLE_PEER_FAILED_VERIFICATION:
    case CURLE_SSL_ENGINE_NOTFOUND:
    case CURLE_SSL_ENGINE_SETFAILED:
    case CURLE_SSL_CERTPROBLEM:
    case CURLE_SSL_CIPHER:
    case CURLE_SSL_ENGINE_INITFAILED:
    case CURLE_SSL_CACERT_BADFILE:
    case CURLE_SSL_SHUTDOWN_FAILED:
    case CURLE_SSL_CRL_BADFILE:
    case CURLE_SSL_ISSUER_ERROR:
    case CURLE_SSL_PINNEDPUBKEYNOTMATCH:
    case CURLE_SSL_INVALIDCERTSTATUS:
    case CURLE_SSL_CLIENTCERT:
    case CURLE_SEND_ERROR:
    case CURLE_RECV_ERROR:
    case CURLE_GOT_NOTHING:
    case CURLE_PARTIAL_FILE:
    case CURLE_HTTP2:
    case CURLE_HTTP2_STREAM:
    case CURLE_HTTP3:
    case CURLE_QUIC_CONNECT_ERROR:
    case CURLE_PROXY:
        return CMA_CURL_UNREACHABLE;
    case CURLE_WEIRD_SERVER_REPLY:
    case CURLE_BAD_CONTENT_ENCODING:
    case CURLE_UNSUPPORTED_PROTOCOL:
    case CURLE_TOO_MANY_REDIRECTS:
        return CMA_CURL_BAD_REPLY;
    default:
        return CMA_CURL_OTHER;
    }
}

enum cma_errc cma_clients_read_file(const char *path, size_t max, char **ret, size_t *ret_len,
                                    struct cma_err *reterr)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return cma_err_set(reterr, CMA_ERR_IO, "cannot read %s: %s", path, strerror(errno));
    struct cma_buf b;
    cma_buf_init(&b, max);
    char chunk[4096];
    enum cma_errc rc = CMA_OK;
    for (;;) {
        size_t n = fread(chunk, 1, sizeof(chunk), f);
        if (n > 0) {
            rc = cma_buf_append(&b, chunk, n);
            if (rc != CMA_OK)
                break;
        }
        if (n < sizeof(chunk)) {
            if (ferror(f)) {
                int e = errno;
                fclose(f);
                cma_buf_done(&b);
                return cma_err_set(reterr, CMA_ERR_IO, "cannot read %s: %s", path, strerror(e));
            }
            break;
        }
    }
    fclose(f);
    if (rc == CMA_ERR_TOO_LARGE)
        return cma_err_set(reterr, rc, "%s is over %zu bytes", path, max);
    if (rc != CMA_OK)
        return cma_err_set(reterr, rc, "out of memory reading %s", path);
    size_t len = b.len;
    char *s = b.ptr ? cma_buf_take(&b) : calloc(1, 1);
    if (!s)
        return cma_err_set(reterr, CMA_ERR_NOMEM, "out of memory reading %s", path);
    *ret = s;
    if (ret_len)
        *ret_len = len;
    return CMA_OK;
}

static bool is_blank(char c)
{
    return c == ' ' || c == '\t' || c == '\r' || c == '\n' || c == '\v' || c == '\f';
}

char *cma_clients_trim(char *s)
{
    size_t len = strlen(s);
    while (len > 0 && is_blank(s[len - 1]))
        len--;
    s[len] = '\0';
    size_t start = 0;
    while (is_blank(s[start]))
        start++;
    if (start > 0)
        memmove(s, s + start, len - start + 1);
    return s;
}
