/* tlsmat.h: TLS material (OpenSSL), the one place that reads, checks and watches it for the
 * outgoing clients (credentials.c), the serving certificate (http/server.c, http/tls.c) and the
 * client CAs of authentication (auth/authn.c): reading PEM files, checking a CA bundle, a
 * certificate with its key, the stat signature that tells a reload whether a file changed, and
 * the OpenSSL error text of a failure. Pure functions; no logging; thread-safe (OpenSSL's error
 * queue is thread-local and every function leaves it empty). Never prompts for a passphrase:
 * encrypted keys are refused. */
#ifndef CMA_TLSMAT_H
#define CMA_TLSMAT_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <time.h>

#include <openssl/x509_vfy.h>

#include "cma/err.h"

#define CMA_TLSMAT_PEM_MAX ((size_t)4 << 20) /* ceiling of one PEM file */

/* ---- change detection -------------------------------------------------------------------- */

/* What stat() says about a file: device, inode, size, mtime, ctime. stat() follows symlinks, so
 * the atomic `..data` swap of a projected volume changes the inode. A difference means
 * "changed". Timestamps are coarse (a kernel tick), so a file rewritten in place within one tick
 * with the same size can keep its signature: a reader that must not miss that re-reads while
 * the signature is not settled (cma_tlsmat_sig_settled) and compares the bytes. */
struct cma_tlsmat_sig {
    bool exists; /* false: stat() failed, every other member is zero */
    dev_t dev;
    ino_t ino;
    off_t size;
    struct timespec mtime, ctime;
};

void cma_tlsmat_sig_of(const struct stat *st, struct cma_tlsmat_sig *ret);
/* The signature of path now (exists = false when it cannot be stat'ed). */
void cma_tlsmat_sig_stat(const char *path, struct cma_tlsmat_sig *ret);
bool cma_tlsmat_sig_eq(const struct cma_tlsmat_sig *a, const struct cma_tlsmat_sig *b);
/* True when the newer of mtime and ctime is more than two seconds in the past: a later rewrite
 * will change the timestamps. */
bool cma_tlsmat_sig_settled(const struct cma_tlsmat_sig *s);

/* ---- reading ----------------------------------------------------------------------------- */

/* Reads a file whole (at most max bytes) and the signature of what was read (fstat of the open
 * file). *ret owns the bytes, NUL-terminated. On failure *ret_errno says why (EFBIG: over max)
 * and the message is "cannot read it: <reason>" (the caller names the file). */
enum cma_errc cma_tlsmat_read(const char *path, size_t max, struct cma_tlsmat_sig *ret_sig,
                              unsigned char **ret, size_t *ret_len, int *ret_errno,
                              struct cma_err *reterr);

/* Reads one PEM file of the serving side ("certificate", "private key": what) whole, at most
 * CMA_TLSMAT_PEM_MAX bytes; refuses an empty file and one with a NUL byte. CMA_ERR_TLS with
 * "<what> <path> ..." messages. Buffers that held the bytes are zeroed. Caller frees *ret. */
enum cma_errc cma_tlsmat_read_pem(const char *what, const char *path, char **ret, size_t *ret_len,
                                  struct cma_err *reterr);

/* ---- checks ------------------------------------------------------------------------------ */

/* A CA bundle: at least one PEM certificate and nothing that fails to parse. *ret_n (may be
 * NULL) gets the number of certificates. CMA_ERR_TLS with the reason. */
enum cma_errc cma_tlsmat_check_ca(const char *pem, size_t len, size_t *ret_n,
                                  struct cma_err *reterr);

/* A certificate (the first PEM certificate, further ones must parse) and an unencrypted PEM
 * private key that matches it. CMA_ERR_TLS with the reason. */
enum cma_errc cma_tlsmat_check_pair(const char *cert_pem, size_t cert_len, const char *key_pem,
                                    size_t key_len, struct cma_err *reterr);

/* The same for two files (CMA_ERR_TLS also when one cannot be read); the message names them. */
enum cma_errc cma_tlsmat_check_pair_files(const char *cert_file, const char *key_file,
                                          struct cma_err *reterr);

/* True when the first certificate of cert_file loads and has not expired yet. */
bool cma_tlsmat_leaf_current(const char *cert_file);

/* A trust store of every certificate of a PEM bundle that parses (later unparsable blocks are
 * ignored). NULL with CMA_ERR_TLS "no PEM certificate in it"
 * when none does, or CMA_ERR_NOMEM. *ret_n (may be NULL): certificates added. */
X509_STORE *cma_tlsmat_ca_store(const char *pem, size_t len, size_t *ret_n, struct cma_err *reterr);

/* ---- errors ------------------------------------------------------------------------------ */

/* Sets CMA_ERR_TLS "<message>: <first queued OpenSSL error>" (or just the message when the queue
 * is empty), clears the queue, and returns CMA_ERR_TLS. */
enum cma_errc cma_tlsmat_fail(struct cma_err *reterr, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

#endif
