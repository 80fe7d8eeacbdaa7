/* credentials.c: the credentials of one outgoing HTTP client (CA bundle, client certificate and
 * key, bearer token, basic-auth password) loaded, checked and re-read when their files change,
 * for prom.c and kube.c alike. Reading the files, the PEM checks and the change signature are
 * the project's one TLS-material module (tlsmat.c); this file decides what a client uses.
 *
 * DESIGN
 * - Snapshots: what a request uses is an immutable, reference-counted struct cma_cred_snap
 *   (bytes of the CA, certificate and key, the Authorization line, the password). A request
 *   takes the current one, sets it on its curl handle and releases it after the transfer; a
 *   rotation publishes a new snapshot under the mutex and drops the client's reference to the
 *   old one, which lives on until its last request ends.
 * - Change detection per file: a stat signature (device, inode, size, mtime, ctime; tlsmat.h).
 *   stat() follows symlinks, so the atomic `..data` swap of a projected volume changes the inode.
 *   Timestamps are coarse (a kernel tick), so a file rewritten within one tick of our read could
 *   keep its signature: until its timestamps are more than two seconds in the past, a file is
 *   "unsettled" (cma_tlsmat_sig_settled) and read again at every check; its content, compared
 *   with what was last read, decides whether it changed.
 * - Validation before use: a changed CA bundle must parse; a changed certificate or key is read
 *   with its partner and swapped in only when the key matches the certificate (a rotation that
 *   has written one file of the pair, or half a file, keeps the previous pair); a token must be
 *   one non-empty line. A refusal is reported once per refused content (FNV-1a of the bytes), a
 *   file that cannot be read once per errno; the caller logs it. Nothing here logs.
 * - curl receives copies (CURL_BLOB_COPY, string options are copied by curl), and CA bundles
 *   always go as CURLOPT_CAINFO_BLOB: curl's CA store cache (CURLOPT_CA_CACHE_TIMEOUT, 24 h) is
 *   only used for CA files, so a rotated CA takes effect at the next handshake. curl reuses a
 *   kept-alive connection only when the TLS blobs are equal, so connections made with old
 *   material finish their transfers and are not reused for new ones.
 * - PEM checks (tlsmat.c) never prompt: encrypted keys are refused. */
#include "cma/credentials.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cma/buf.h"
#include "cma/hash.h"
#include "cma/str.h"
#include "cma/tlsmat.h"
#include "internal.h"

#define PEM_FILE_MAX CMA_TLSMAT_PEM_MAX
#define SECRET_FILE_MAX ((size_t)64 << 10)

/* ---- snapshots --------------------------------------------------------------------------- */

static void snap_free(struct cma_cred_snap *s)
{
    if (!s)
        return;
    free(s->authorization);
    free(s->username);
    free(s->password);
    free(s->ca);
    free(s->cert);
    free(s->key);
    free(s);
}

void cma_cred_snap_release(struct cma_cred_snap *s)
{
    if (s && atomic_fetch_sub(&s->refs, 1) == 1)
        snap_free(s);
}

static bool dup_bytes(const unsigned char *src, size_t len, unsigned char **dst, size_t *dst_len)
{
    *dst = NULL;
    *dst_len = 0;
    if (!src)
        return true;
    *dst = malloc(len + 1);
    if (!*dst)
        return false;
    memcpy(*dst, src, len);
    (*dst)[len] = '\0';
    *dst_len = len;
    return true;
}

static bool dup_str(const char *src, char **dst)
{
    *dst = NULL;
    if (!src)
        return true;
    *dst = cma_strdup(src);
    return *dst != NULL;
}

static struct cma_cred_snap *snap_copy(const struct cma_cred_snap *o)
{
    struct cma_cred_snap *s = calloc(1, sizeof(*s));
    if (!s)
        return NULL;
    atomic_init(&s->refs, 1);
    s->insecure_skip_verify = o->insecure_skip_verify;
    if (!dup_str(o->authorization, &s->authorization) || !dup_str(o->username, &s->username) ||
        !dup_str(o->password, &s->password) || !dup_bytes(o->ca, o->ca_len, &s->ca, &s->ca_len) ||
        !dup_bytes(o->cert, o->cert_len, &s->cert, &s->cert_len) ||
        !dup_bytes(o->key, o->key_len, &s->key, &s->key_len)) {
        snap_free(s);
        return NULL;
    }
    return s;
}

/* CURLOPT_* setters; each returns the first failure. */
static CURLcode setopt_tls(const struct cma_cred_snap *s, CURL *h)
{
    CURLcode crc = CURLE_OK;
    struct curl_blob ca = {s->ca, s->ca_len, CURL_BLOB_COPY};
    struct curl_blob cert = {s->cert, s->cert_len, CURL_BLOB_COPY};
    struct curl_blob key = {s->key, s->key_len, CURL_BLOB_COPY};
    if (s->ca)
        crc = curl_easy_setopt(h, CURLOPT_CAINFO_BLOB, &ca);
    if (crc == CURLE_OK && s->cert && (crc = curl_easy_setopt(h, CURLOPT_SSLCERTTYPE, "PEM")) == 0)
        crc = curl_easy_setopt(h, CURLOPT_SSLCERT_BLOB, &cert);
    if (crc == CURLE_OK && s->key && (crc = curl_easy_setopt(h, CURLOPT_SSLKEYTYPE, "PEM")) == 0)
        crc = curl_easy_setopt(h, CURLOPT_SSLKEY_BLOB, &key);
    if (crc == CURLE_OK && s->insecure_skip_verify &&
        (crc = curl_easy_setopt(h, CURLOPT_SSL_VERIFYPEER, 0L)) == CURLE_OK)
        crc = curl_easy_setopt(h, CURLOPT_SSL_VERIFYHOST, 0L);
    return crc;
}

static CURLcode setopt_basic(const struct cma_cred_snap *s, CURL *h)
{
    if (!s->username)
        return CURLE_OK;
    CURLcode crc = curl_easy_setopt(h, CURLOPT_HTTPAUTH, (long)CURLAUTH_BASIC);
    if (crc == CURLE_OK)
        crc = curl_easy_setopt(h, CURLOPT_USERNAME, s->username);
    if (crc == CURLE_OK)
        crc = curl_easy_setopt(h, CURLOPT_PASSWORD, s->password ? s->password : "");
    return crc;
}

enum cma_errc cma_cred_snap_setopt(const struct cma_cred_snap *s, CURL *h, struct cma_err *reterr)
{
    CURLcode crc = setopt_tls(s, h);
    if (crc == CURLE_OK)
        crc = setopt_basic(s, h);
    if (crc == CURLE_OK)
        return CMA_OK;
    return cma_err_set(reterr, crc == CURLE_OUT_OF_MEMORY ? CMA_ERR_NOMEM : CMA_ERR_INTERNAL,
                       "curl TLS/auth options: %s", curl_easy_strerror(crc));
}

/* ---- one watched setting ----------------------------------------------------------------- */

struct item {
    char *label;
    char *file;              /* NULL: fixed bytes or unset */
    unsigned char *examined; /* the content last read (or the fixed bytes) */
    size_t examined_len;
    bool set;                   /* file or fixed bytes given */
    struct cma_tlsmat_sig seen; /* of `examined` */
    bool settled;               /* seen was settled when read (cma_tlsmat_sig_settled) */
    int failed_errno;           /* the file could not be read last time: errno (0 = it could) */
    uint64_t warned_hash;       /* content last refused (reported once) */
};

enum probe { PROBE_SAME, PROBE_FRESH, PROBE_FAILED };

static void item_done(struct item *it)
{
    free(it->label);
    free(it->file);
    free(it->examined);
    memset(it, 0, sizeof(*it));
}

static uint64_t fnv1a(const unsigned char *p, size_t len)
{
    return cma_hash_bytes(CMA_HASH_FNV_OFFSET, p, len) | 1; /* never 0: "nothing refused yet" */
}

/* "<label> <file>: " or "<label>: " in front of an error. */
static void prefix_item(struct cma_err *e, const struct item *it)
{
    if (it->file)
        cma_err_prefix(e, "%s %s: ", it->label, it->file);
    else
        cma_err_prefix(e, "%s: ", it->label);
}

/* Looks at the file again: PROBE_FRESH when it holds other bytes than last read (now in
 * it->examined), PROBE_FAILED (with *fail set once per errno) when it cannot be read. */
static enum probe probe_item(struct item *it, size_t max, struct cma_err *fail)
{
    struct stat st;
    if (!it->file)
        return PROBE_SAME;
    if (stat(it->file, &st) == 0 && it->failed_errno == 0 && it->settled) {
        struct cma_tlsmat_sig now;
        cma_tlsmat_sig_of(&st, &now);
        if (cma_tlsmat_sig_eq(&now, &it->seen))
            return PROBE_SAME;
    }
    struct cma_tlsmat_sig sig;
    memset(&sig, 0, sizeof(sig));
    unsigned char *bytes = NULL;
    size_t len = 0;
    int saved_errno = 0;
    struct cma_err e;
    cma_err_clear(&e);
    if (cma_tlsmat_read(it->file, max, &sig, &bytes, &len, &saved_errno, &e) != CMA_OK) {
        if (saved_errno != it->failed_errno) {
            it->failed_errno = saved_errno;
            prefix_item(&e, it);
            cma_err_copy(fail, &e);
        }
        return PROBE_FAILED;
    }
    it->failed_errno = 0;
    it->seen = sig;
    it->settled = cma_tlsmat_sig_settled(&sig);
    if (bytes && it->examined && len == it->examined_len && memcmp(bytes, it->examined, len) == 0) {
        free(bytes);
        return PROBE_SAME;
    }
    free(it->examined);
    it->examined = bytes;
    it->examined_len = len;
    return PROBE_FRESH;
}

static enum cma_errc item_init(struct item *it, const struct cma_cred_item *spec,
                               struct cma_err *reterr)
{
    memset(it, 0, sizeof(*it));
    it->set = spec->file || spec->data;
    if (!it->set)
        return CMA_OK;
    if (!dup_str(spec->label ? spec->label : "credential", &it->label) ||
        !dup_str(spec->file, &it->file))
        return cma_err_set(reterr, CMA_ERR_NOMEM, "out of memory");
    if (!it->file) {
        if (!dup_bytes(spec->data, spec->len, &it->examined, &it->examined_len))
            return cma_err_set(reterr, CMA_ERR_NOMEM, "out of memory");
        return CMA_OK;
    }
    struct cma_err e;
    cma_err_clear(&e);
    int unused_errno = 0;
    enum cma_errc rc = cma_tlsmat_read(it->file, PEM_FILE_MAX, &it->seen, &it->examined,
                                       &it->examined_len, &unused_errno, &e);
    if (rc != CMA_OK) {
        prefix_item(&e, it);
        cma_err_copy(reterr, &e);
        return rc;
    }
    it->settled = cma_tlsmat_sig_settled(&it->seen);
    return CMA_OK;
}

/* ---- the client's credentials ------------------------------------------------------------ */

struct cma_creds {
    pthread_mutex_t lock; /* guards everything below */
    struct item ca, cert, key, token, password;
    struct cma_cred_snap *cur;
    atomic_uint generation;
};

/* "Authorization: Bearer <token>" from token bytes (trimmed), or an error for a token that is
 * empty or spans lines. */
static enum cma_errc token_line(const unsigned char *bytes, size_t len, char **ret,
                                struct cma_err *reterr)
{
    char *t = bytes ? cma_strndup((const char *)bytes, len) : cma_strdup("");
    if (!t)
        return cma_err_set(reterr, CMA_ERR_NOMEM, "out of memory");
    cma_clients_trim(t);
    if (!t[0] || strlen(t) != strcspn(t, "\r\n")) {
        free(t);
        return cma_err_set(reterr, CMA_ERR_FLAG, "want one non-empty line");
    }
    struct cma_buf line;
    cma_buf_init(&line, 0);
    enum cma_errc rc = cma_buf_printf(&line, "Authorization: Bearer %s", t);
    free(t);
    *ret = rc == CMA_OK ? cma_buf_take(&line) : NULL;
    cma_buf_done(&line);
    return *ret ? CMA_OK : cma_err_set(reterr, CMA_ERR_NOMEM, "out of memory");
}

/* The password: the bytes without trailing blanks and line ends (as kubectl create secret
 * --from-file leaves a newline). */
static char *password_of(const unsigned char *bytes, size_t len)
{
    while (len && (bytes[len - 1] == '\n' || bytes[len - 1] == '\r' || bytes[len - 1] == ' '))
        len--;
    return cma_strndup((const char *)bytes, len);
}

static enum cma_errc check_pem_items(struct cma_creds *c, struct cma_err *reterr)
{
    struct cma_err e;
    cma_err_clear(&e);
    if (c->ca.set &&
        cma_tlsmat_check_ca((const char *)c->ca.examined, c->ca.examined_len, NULL, &e) != CMA_OK) {
        prefix_item(&e, &c->ca);
        cma_err_copy(reterr, &e);
        return e.code;
    }
    if (c->cert.set != c->key.set) {
        const struct item *it = c->cert.set ? &c->cert : &c->key;
        return cma_err_set(reterr, CMA_ERR_FLAG,
                           "%s: a client certificate needs its key and "
                           "a key its certificate",
                           it->label);
    }
    if (c->cert.set &&
        cma_tlsmat_check_pair((const char *)c->cert.examined, c->cert.examined_len,
                              (const char *)c->key.examined, c->key.examined_len, &e) != CMA_OK) {
        cma_err_prefix(&e, "%s %s and %s %s: ", c->cert.label, c->cert.file ? c->cert.file : "",
                       c->key.label, c->key.file ? c->key.file : "");
        cma_err_copy(reterr, &e);
        return e.code;
    }
    return CMA_OK;
}

/* The first snapshot, from the items as read by cma_creds_new. */
static enum cma_errc first_snapshot(struct cma_creds *c, const struct cma_cred_spec *spec,
                                    struct cma_err *reterr)
{
    struct cma_cred_snap *s = calloc(1, sizeof(*s));
    if (!s)
        return cma_err_set(reterr, CMA_ERR_NOMEM, "out of memory");
    atomic_init(&s->refs, 1);
    c->cur = s;
    s->insecure_skip_verify = spec->insecure_skip_verify;
    struct cma_err e;
    cma_err_clear(&e);
    if (c->token.set &&
        token_line(c->token.examined, c->token.examined_len, &s->authorization, &e) != CMA_OK) {
        prefix_item(&e, &c->token);
        cma_err_copy(reterr, &e);
        return e.code;
    }
    bool ok = dup_str(spec->username, &s->username) &&
              dup_bytes(c->ca.examined, c->ca.examined_len, &s->ca, &s->ca_len) &&
              dup_bytes(c->cert.examined, c->cert.examined_len, &s->cert, &s->cert_len) &&
              dup_bytes(c->key.examined, c->key.examined_len, &s->key, &s->key_len);
    if (ok && spec->username)
        ok = (s->password = c->password.set
                                ? password_of(c->password.examined, c->password.examined_len)
                                : cma_strdup("")) != NULL;
    return ok ? CMA_OK : cma_err_set(reterr, CMA_ERR_NOMEM, "out of memory");
}

void cma_creds_free(struct cma_creds *c)
{
    if (!c)
        return;
    item_done(&c->ca);
    item_done(&c->cert);
    item_done(&c->key);
    item_done(&c->token);
    item_done(&c->password);
    cma_cred_snap_release(c->cur);
    pthread_mutex_destroy(&c->lock);
    free(c);
}

enum cma_errc cma_creds_new(const struct cma_cred_spec *spec, struct cma_creds **ret,
                            struct cma_err *reterr)
{
    struct cma_creds *c = calloc(1, sizeof(*c));
    if (!c)
        return cma_err_set(reterr, CMA_ERR_NOMEM, "out of memory");
    if (pthread_mutex_init(&c->lock, NULL) != 0) {
        free(c);
        return cma_err_set(reterr, CMA_ERR_INTERNAL, "pthread_mutex_init failed");
    }
    atomic_init(&c->generation, 0);
    enum cma_errc rc = item_init(&c->ca, &spec->ca, reterr);
    if (rc == CMA_OK)
        rc = item_init(&c->cert, &spec->cert, reterr);
    if (rc == CMA_OK)
        rc = item_init(&c->key, &spec->key, reterr);
    if (rc == CMA_OK)
        rc = item_init(&c->token, &spec->token, reterr);
    if (rc == CMA_OK)
        rc = item_init(&c->password, &spec->password, reterr);
    if (rc == CMA_OK)
        rc = check_pem_items(c, reterr);
    if (rc == CMA_OK)
        rc = first_snapshot(c, spec, reterr);
    if (rc != CMA_OK) {
        cma_creds_free(c);
        return rc;
    }
    *ret = c;
    return CMA_OK;
}

/* ---- refresh ----------------------------------------------------------------------------- */

/* Reports a refused content once: sets *warning unless this content was reported already. */
static void refuse(struct item *it, uint64_t hash, const char *what, const struct cma_err *why,
                   const char *keeping, struct cma_err *warning)
{
    if (it->warned_hash == hash)
        return;
    it->warned_hash = hash;
    cma_err_set(warning, why->code, "%s: %s; keeping the previous %s", what, why->msg, keeping);
}

/* "<label> <file>" of an item into out. */
static const char *item_name(const struct item *it, char *out, size_t out_len)
{
    snprintf(out, out_len, "%s%s%s", it->label, it->file ? " " : "", it->file ? it->file : "");
    return out;
}

/* Replaces *dst (and *dst_len) with a copy of src; false (nothing changed) when out of memory. */
static bool replace_bytes(const struct item *src, unsigned char **dst, size_t *dst_len)
{
    unsigned char *copy = NULL;
    size_t len = 0;
    if (!dup_bytes(src->examined, src->examined_len, &copy, &len))
        return false;
    free(*dst);
    *dst = copy;
    *dst_len = len;
    return true;
}

/* A fresh CA bundle: taken when valid, else refused. */
static bool fresh_ca(struct cma_creds *c, struct cma_cred_snap *s, struct cma_err *warning)
{
    struct cma_err e;
    cma_err_clear(&e);
    struct item *it = &c->ca;
    char name[600];
    if (cma_tlsmat_check_ca((const char *)it->examined, it->examined_len, NULL, &e) != CMA_OK) {
        refuse(it, fnv1a(it->examined, it->examined_len), item_name(it, name, sizeof(name)), &e,
               "CA bundle", warning);
        return false;
    }
    return replace_bytes(it, &s->ca, &s->ca_len);
}

static bool fresh_pair(struct cma_creds *c, struct cma_cred_snap *s, struct cma_err *warning)
{
    struct cma_err e;
    cma_err_clear(&e);
    if (cma_tlsmat_check_pair((const char *)c->cert.examined, c->cert.examined_len,
                              (const char *)c->key.examined, c->key.examined_len, &e) != CMA_OK) {
        uint64_t h = fnv1a(c->cert.examined, c->cert.examined_len) ^
                     fnv1a(c->key.examined, c->key.examined_len);
        char cert[600], key[600], both[1300];
        snprintf(both, sizeof(both), "%s and %s", item_name(&c->cert, cert, sizeof(cert)),
                 item_name(&c->key, key, sizeof(key)));
        refuse(&c->cert, h | 1, both, &e, "client certificate and key", warning);
        return false;
    }
    unsigned char *cert = NULL, *key = NULL;
    size_t cert_len = 0, key_len = 0;
    if (!dup_bytes(c->cert.examined, c->cert.examined_len, &cert, &cert_len) ||
        !dup_bytes(c->key.examined, c->key.examined_len, &key, &key_len)) {
        free(cert);
        return false;
    }
    free(s->cert);
    free(s->key);
    s->cert = cert;
    s->cert_len = cert_len;
    s->key = key;
    s->key_len = key_len;
    return true;
}

static bool fresh_token(struct cma_creds *c, struct cma_cred_snap *s, struct cma_err *warning)
{
    struct cma_err e;
    cma_err_clear(&e);
    char *line = NULL;
    struct item *it = &c->token;
    char name[600];
    if (token_line(it->examined, it->examined_len, &line, &e) != CMA_OK) {
        if (e.code != CMA_ERR_NOMEM)
            refuse(it, fnv1a(it->examined, it->examined_len), item_name(it, name, sizeof(name)), &e,
                   "token", warning);
        return false;
    }
    free(s->authorization);
    s->authorization = line;
    return true;
}

static bool fresh_password(struct cma_creds *c, struct cma_cred_snap *s)
{
    char *p = password_of(c->password.examined, c->password.examined_len);
    if (!p)
        return false;
    free(s->password);
    s->password = p;
    return true;
}

/* Probes every file; builds and publishes a new snapshot when something valid changed. Called
 * with the lock held. */
static void refresh_locked(struct cma_creds *c, struct cma_err *warning)
{
    enum probe ca = probe_item(&c->ca, PEM_FILE_MAX, warning);
    enum probe cert = probe_item(&c->cert, PEM_FILE_MAX, warning);
    enum probe key = probe_item(&c->key, PEM_FILE_MAX, warning);
    enum probe token = probe_item(&c->token, SECRET_FILE_MAX, warning);
    enum probe password = probe_item(&c->password, SECRET_FILE_MAX, warning);
    bool pair = (cert == PROBE_FRESH && key != PROBE_FAILED) ||
                (key == PROBE_FRESH && cert != PROBE_FAILED);
    if (ca != PROBE_FRESH && !pair && token != PROBE_FRESH && password != PROBE_FRESH)
        return;
    struct cma_cred_snap *s = snap_copy(c->cur);
    if (!s)
        return; /* out of memory: keep the current material, try again next time */
    bool changed = false;
    if (ca == PROBE_FRESH)
        changed |= fresh_ca(c, s, warning);
    if (pair)
        changed |= fresh_pair(c, s, warning);
    if (token == PROBE_FRESH)
        changed |= fresh_token(c, s, warning);
    if (password == PROBE_FRESH)
        changed |= fresh_password(c, s);
    if (!changed) {
        snap_free(s);
        return;
    }
    cma_cred_snap_release(c->cur);
    c->cur = s;
    atomic_fetch_add(&c->generation, 1);
}

enum cma_errc cma_creds_refresh(struct cma_creds *c, struct cma_err *warning)
{
    pthread_mutex_lock(&c->lock);
    refresh_locked(c, warning);
    pthread_mutex_unlock(&c->lock);
    return CMA_OK;
}

struct cma_cred_snap *cma_creds_take(struct cma_creds *c, struct cma_err *warning)
{
    pthread_mutex_lock(&c->lock);
    refresh_locked(c, warning);
    struct cma_cred_snap *s = c->cur;
    atomic_fetch_add(&s->refs, 1);
    pthread_mutex_unlock(&c->lock);
    return s;
}

unsigned cma_creds_generation(const struct cma_creds *c)
{
    return c ? atomic_load(&((struct cma_creds *)c)->generation) : 0;
}
