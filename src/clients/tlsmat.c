/* tlsmat.c: TLS material (OpenSSL) for the whole adapter: reading PEM files, checking CA
 * bundles and certificate/key pairs, the stat signature that decides a reload, trust stores
 * from a CA bundle, and the OpenSSL error text of a failure (tlsmat.h). The outgoing clients
 * (credentials.c), the serving side (http/server.c, http/tls.c) and authentication
 * (auth/authn.c) all judge material with this code, so a file is accepted or refused the same
 * way wherever it is used.
 *
 * DESIGN
 * - OpenSSL's error queue is thread-local; every exit path clears it. Encrypted keys are
 *   refused through a password callback that returns none (never prompts).
 * - Files are read through the open descriptor: the signature of what was read is the fstat of
 *   that descriptor, so a rename between stat and open cannot pair old bytes with a new
 *   signature. Chunks and buffers that held key bytes are zeroed on the serving-side path. */
#include "cma/tlsmat.h"

#include <errno.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>

#include "cma/buf.h"
#include "internal.h"

#define SETTLE_NS 2000000000LL

/* ---- errors ------------------------------------------------------------------------------ */

/* Sets CMA_ERR_TLS with msg and the first queued OpenSSL error ("msg: e" or "msg (e)"), then
 * clears the queue. */
static enum cma_errc ossl_error(struct cma_err *reterr, const char *msg, bool parens)
{
    unsigned long e = ERR_peek_error();
    if (e != 0) {
        char ossl[160];
        ERR_error_string_n(e, ossl, sizeof ossl);
        cma_err_set(reterr, CMA_ERR_TLS, parens ? "%s (%s)" : "%s: %s", msg, ossl);
    } else {
        cma_err_set(reterr, CMA_ERR_TLS, "%s", msg);
    }
    ERR_clear_error();
    return CMA_ERR_TLS;
}

enum cma_errc cma_tlsmat_fail(struct cma_err *reterr, const char *fmt, ...)
{
    char msg[CMA_ERR_MSG_MAX / 2];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return ossl_error(reterr, msg, false);
}

static enum cma_errc ossl_fail(struct cma_err *reterr, const char *msg)
{
    return ossl_error(reterr, msg, true);
}

/* ---- parsing ----------------------------------------------------------------------------- */

static int no_password(char *buf, int size, int rwflag, void *u)
{
    (void)buf;
    (void)size;
    (void)rwflag;
    (void)u;
    return 0;
}

/* True when the last error queued is only "no more PEM blocks". */
static bool pem_end_only(void)
{
    unsigned long e = ERR_peek_last_error();
    return e == 0 || (ERR_GET_LIB(e) == ERR_LIB_PEM && ERR_GET_REASON(e) == PEM_R_NO_START_LINE);
}

/* What both readers start with: a clear error queue and a read-only memory BIO over the PEM
 * text (the caller frees it). */
static enum cma_errc pem_bio(const char *pem, size_t len, BIO **ret, struct cma_err *reterr)
{
    ERR_clear_error();
    if (len > INT32_MAX)
        return cma_err_set(reterr, CMA_ERR_TLS, "too large for a PEM file");
    *ret = BIO_new_mem_buf(pem, (int)len);
    return *ret ? CMA_OK : ossl_fail(reterr, "out of memory");
}

/* Hands every certificate of a PEM text that parses, in order, to take (which owns it and
 * says whether it counts); stops at the first block that does not parse. *ret_n: counted. */
static enum cma_errc each_cert(const char *pem, size_t len, bool (*take)(X509 *x, void *ctx),
                               void *ctx, size_t *ret_n, struct cma_err *reterr)
{
    *ret_n = 0;
    BIO *bio = NULL;
    enum cma_errc rc = pem_bio(pem, len, &bio, reterr);
    if (rc != CMA_OK)
        return rc;
    for (X509 *x; (x = PEM_read_bio_X509(bio, NULL, no_password, NULL)) != NULL;)
        if (take(x, ctx))
            (*ret_n)++;
    BIO_free(bio);
    return CMA_OK;
}

static bool keep_first(X509 *x, void *ctx)
{
    X509 **first = ctx;
    if (!*first)
        *first = x;
    else
        X509_free(x);
    return true;
}

/* Reads every certificate of a PEM text: the first one into *ret_first (may be NULL), the
 * count into *ret_n. Fails when there is none or when a certificate block does not parse. */
static enum cma_errc read_certs(const char *pem, size_t len, X509 **ret_first, size_t *ret_n,
                                struct cma_err *reterr)
{
    size_t n = 0;
    X509 *first = NULL;
    enum cma_errc rc = each_cert(pem, len, keep_first, &first, &n, reterr);
    if (rc != CMA_OK)
        return rc;
    if (n == 0)
        rc = ossl_fail(reterr, "no PEM certificate in it");
    else if (!pem_end_only())
        rc = ossl_fail(reterr, "a certificate in it does not parse");
    ERR_clear_error();
    if (rc != CMA_OK || !ret_first)
        X509_free(first);
    else
        *ret_first = first;
    if (ret_n)
        *ret_n = n;
    return rc;
}

static enum cma_errc read_key(const char *pem, size_t len, EVP_PKEY **ret, struct cma_err *reterr)
{
    BIO *bio = NULL;
    enum cma_errc rc = pem_bio(pem, len, &bio, reterr);
    if (rc != CMA_OK)
        return rc;
    EVP_PKEY *key = PEM_read_bio_PrivateKey(bio, NULL, no_password, NULL);
    BIO_free(bio);
    if (!key)
        return ossl_fail(reterr, "no unencrypted PEM private key in it");
    ERR_clear_error();
    *ret = key;
    return CMA_OK;
}

/* ---- checks ------------------------------------------------------------------------------ */

enum cma_errc cma_tlsmat_check_ca(const char *pem, size_t len, size_t *ret_n,
                                  struct cma_err *reterr)
{
    return read_certs(pem, len, NULL, ret_n, reterr);
}

enum cma_errc cma_tlsmat_check_pair(const char *cert_pem, size_t cert_len, const char *key_pem,
                                    size_t key_len, struct cma_err *reterr)
{
    X509 *leaf = NULL;
    EVP_PKEY *key = NULL;
    struct cma_err e;
    cma_err_clear(&e);
    enum cma_errc rc = read_certs(cert_pem, cert_len, &leaf, NULL, &e);
    if (rc != CMA_OK) {
        cma_err_prefix(&e, "certificate: ");
    } else if ((rc = read_key(key_pem, key_len, &key, &e)) != CMA_OK) {
        cma_err_prefix(&e, "key: ");
    } else if (X509_check_private_key(leaf, key) != 1) {
        rc = ossl_fail(&e, "the private key does not match the certificate");
    }
    X509_free(leaf);
    EVP_PKEY_free(key);
    ERR_clear_error();
    cma_err_copy(reterr, &e);
    return rc;
}

enum cma_errc cma_tlsmat_check_pair_files(const char *cert_file, const char *key_file,
                                          struct cma_err *reterr)
{
    if (!cert_file || !*cert_file || !key_file || !*key_file)
        return cma_err_set(reterr, CMA_ERR_TLS, "a certificate file and a key file are required");
    char *cert = NULL, *key = NULL;
    size_t cert_len = 0, key_len = 0;
    struct cma_err e;
    cma_err_clear(&e);
    enum cma_errc rc = cma_clients_read_file(cert_file, CMA_TLSMAT_PEM_MAX, &cert, &cert_len, &e);
    if (rc == CMA_OK)
        rc = cma_clients_read_file(key_file, CMA_TLSMAT_PEM_MAX, &key, &key_len, &e);
    if (rc == CMA_OK) {
        rc = cma_tlsmat_check_pair(cert, cert_len, key, key_len, &e);
        cma_err_prefix(&e, "certificate %s, key %s: ", cert_file, key_file);
    }
    free(cert);
    free(key);
    if (rc != CMA_OK && rc != CMA_ERR_NOMEM)
        rc = e.code = CMA_ERR_TLS;
    cma_err_copy(reterr, &e);
    return rc;
}

bool cma_tlsmat_leaf_current(const char *cert_file)
{
    char *pem = NULL;
    size_t len = 0;
    if (cma_clients_read_file(cert_file, CMA_TLSMAT_PEM_MAX, &pem, &len, NULL) != CMA_OK)
        return false;
    X509 *leaf = NULL;
    bool fresh = read_certs(pem, len, &leaf, NULL, NULL) == CMA_OK &&
                 X509_cmp_current_time(X509_get0_notAfter(leaf)) > 0;
    X509_free(leaf);
    free(pem);
    ERR_clear_error();
    return fresh;
}

static bool add_to_store(X509 *x, void *ctx)
{
    bool added = X509_STORE_add_cert(ctx, x) == 1;
    X509_free(x);
    return added;
}

X509_STORE *cma_tlsmat_ca_store(const char *pem, size_t len, size_t *ret_n, struct cma_err *reterr)
{
    X509_STORE *store = X509_STORE_new();
    if (!store) {
        cma_err_set(reterr, CMA_ERR_NOMEM, "out of memory");
        return NULL;
    }
    size_t n = 0;
    enum cma_errc rc = each_cert(pem, len, add_to_store, store, &n, reterr);
    ERR_clear_error();
    if (rc == CMA_OK && n == 0)
        rc = cma_err_set(reterr, CMA_ERR_TLS, "no PEM certificate in it");
    if (rc != CMA_OK) {
        X509_STORE_free(store);
        return NULL;
    }
    if (ret_n)
        *ret_n = n;
    return store;
}

/* ---- change detection -------------------------------------------------------------------- */

void cma_tlsmat_sig_of(const struct stat *st, struct cma_tlsmat_sig *ret)
{
    memset(ret, 0, sizeof(*ret));
    ret->exists = true;
    ret->dev = st->st_dev;
    ret->ino = st->st_ino;
    ret->size = st->st_size;
    ret->mtime = st->st_mtim;
    ret->ctime = st->st_ctim;
}

void cma_tlsmat_sig_stat(const char *path, struct cma_tlsmat_sig *ret)
{
    struct stat st;
    memset(ret, 0, sizeof(*ret));
    if (stat(path, &st) == 0)
        cma_tlsmat_sig_of(&st, ret);
}

static bool ts_eq(struct timespec a, struct timespec b)
{
    return a.tv_sec == b.tv_sec && a.tv_nsec == b.tv_nsec;
}

bool cma_tlsmat_sig_eq(const struct cma_tlsmat_sig *a, const struct cma_tlsmat_sig *b)
{
    return a->exists == b->exists && a->dev == b->dev && a->ino == b->ino && a->size == b->size &&
           ts_eq(a->mtime, b->mtime) && ts_eq(a->ctime, b->ctime);
}

static int64_t ts_ns(struct timespec t)
{
    return (int64_t)t.tv_sec * 1000000000LL + t.tv_nsec;
}

bool cma_tlsmat_sig_settled(const struct cma_tlsmat_sig *s)
{
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    int64_t newest = ts_ns(s->mtime) > ts_ns(s->ctime) ? ts_ns(s->mtime) : ts_ns(s->ctime);
    return ts_ns(now) - newest > SETTLE_NS;
}

/* ---- reading ----------------------------------------------------------------------------- */

/* Reads an open file whole into b (ceiling: b's max); 0 or an errno (EFBIG over the ceiling).
 * The chunk buffer is zeroed after use (it may have held a key). */
static int read_all(FILE *f, struct cma_buf *b)
{
    char chunk[4096];
    size_t n;
    int e = 0;
    while (e == 0 && (n = fread(chunk, 1, sizeof(chunk), f)) > 0) {
        enum cma_errc rc = cma_buf_append(b, chunk, n);
        if (rc != CMA_OK)
            e = rc == CMA_ERR_TOO_LARGE ? EFBIG : ENOMEM;
    }
    explicit_bzero(chunk, sizeof chunk);
    if (e == 0 && ferror(f))
        e = errno ? errno : EIO;
    return e;
}

/* Opens and reads path into b with the fstat of what was read; 0 or an errno, *ret_opened
 * false when the file could not be opened. */
static int slurp(const char *path, struct cma_buf *b, struct stat *st, bool *ret_opened)
{
    memset(st, 0, sizeof(*st));
    FILE *f = fopen(path, "rb");
    *ret_opened = f != NULL;
    if (!f)
        return errno;
    int e = fstat(fileno(f), st) != 0 ? errno : read_all(f, b);
    fclose(f);
    return e;
}

enum cma_errc cma_tlsmat_read(const char *path, size_t max, struct cma_tlsmat_sig *ret_sig,
                              unsigned char **ret, size_t *ret_len, int *ret_errno,
                              struct cma_err *reterr)
{
    struct stat st;
    struct cma_buf b;
    cma_buf_init(&b, max);
    bool opened = false;
    int e = slurp(path, &b, &st, &opened);
    *ret_errno = e;
    if (e != 0) {
        cma_buf_done(&b);
        if (e == EFBIG)
            return cma_err_set(reterr, CMA_ERR_IO, "cannot read it: over %zu bytes", max);
        return cma_err_set(reterr, e == ENOMEM ? CMA_ERR_NOMEM : CMA_ERR_IO, "cannot read it: %s",
                           strerror(e));
    }
    cma_tlsmat_sig_of(&st, ret_sig);
    *ret_len = b.len;
    *ret = (unsigned char *)(b.ptr ? cma_buf_take(&b) : calloc(1, 1));
    return *ret ? CMA_OK : cma_err_set(reterr, CMA_ERR_NOMEM, "out of memory");
}

static enum cma_errc pem_read_error(const char *what, const char *path, int e, bool opened,
                                    struct cma_err *reterr)
{
    if (!opened)
        return cma_err_set(reterr, CMA_ERR_TLS, "cannot open %s %s: %s", what, path, strerror(e));
    if (e == EFBIG)
        return cma_err_set(reterr, CMA_ERR_TLS, "%s %s is larger than %zu bytes", what, path,
                           CMA_TLSMAT_PEM_MAX);
    if (e == ENOMEM)
        return cma_err_set(reterr, CMA_ERR_NOMEM, "cannot read %s %s: out of memory", what, path);
    return cma_err_set(reterr, CMA_ERR_TLS, "cannot read %s %s", what, path);
}

enum cma_errc cma_tlsmat_read_pem(const char *what, const char *path, char **ret, size_t *ret_len,
                                  struct cma_err *reterr)
{
    struct stat st;
    struct cma_buf b;
    cma_buf_init(&b, CMA_TLSMAT_PEM_MAX);
    bool opened = false;
    int e = slurp(path, &b, &st, &opened);
    enum cma_errc rc = CMA_OK;
    if (e != 0)
        rc = pem_read_error(what, path, e, opened, reterr);
    else if (b.len == 0)
        rc = cma_err_set(reterr, CMA_ERR_TLS, "%s %s is empty", what, path);
    else if (memchr(b.ptr, '\0', b.len))
        rc = cma_err_set(reterr, CMA_ERR_TLS, "%s %s is not PEM text", what, path);
    if (rc != CMA_OK) {
        if (b.ptr)
            explicit_bzero(b.ptr, b.len);
        cma_buf_done(&b);
        return rc;
    }
    *ret_len = b.len;
    *ret = cma_buf_take(&b);
    return CMA_OK;
}
