/* tls.c: serving-certificate material for the HTTPS server (OpenSSL): checking that a given
 * certificate/key pair belongs together (with the check the outgoing clients use,
 * clients/tlsmat.c), and generating a self-signed pair into --cert-dir when the user gives
 * none, as kube's secure-serving options do.
 *
 * DESIGN
 * - Like k8s.io/client-go/util/cert.GenerateSelfSignedCertKey, generation makes a throw-away CA
 *   ("localhost-ca@<unix time>") and a serving leaf ("localhost@<unix time>") signed by it, both
 *   EC P-256 / SHA-256, valid from one hour ago for one year. apiserver.crt holds the leaf then
 *   the CA, so a client may trust the file itself (curl --cacert, an APIService caBundle); the CA
 *   key is discarded. The leaf has SANs DNS:localhost, the extra names, IP:127.0.0.1 and IP:::1
 *   (an extra name that parses as an IP address becomes an IP SAN).
 * - A pair is reused when both files load, the key matches the leaf and the leaf has not
 *   expired; otherwise it is regenerated.
 * - Files are written atomically (temporary file in the same directory, fsync, rename); the key
 *   is created with mode 0600, the certificate 0644; the directory is created with mode 0700.
 * - Reading and checking the material, and the OpenSSL error text, are the project's one
 *   TLS-material module (clients/tlsmat.c), so serving and client material are judged by the
 *   same code. OpenSSL's error queue is thread-local; every exit path clears it. */
#include "cma/tls.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <openssl/bn.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/rand.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

#include "cma/file.h"
#include "cma/tlsmat.h"

#define CERT_NAME "apiserver.crt"
#define KEY_NAME "apiserver.key"
#define VALID_BEFORE_NOW_S (60L * 60L)
#define VALID_DAYS 365
#define MAX_DNS_NAME 253

/* The pair check is the one of the outgoing clients' credentials (clients/tlsmat.c), so
 * serving and client material are judged by the same code. */
enum cma_errc cma_tls_check_pair(const char *cert_file, const char *key_file,
                                 struct cma_err *reterr)
{
    return cma_tlsmat_check_pair_files(cert_file, key_file, reterr);
}

/* ----- files and directories ----- */

static enum cma_errc mkdir_p(const char *dir, struct cma_err *reterr)
{
    size_t len = strlen(dir);
    char *path = malloc(len + 1);
    if (!path)
        return cma_err_set(reterr, CMA_ERR_NOMEM, "out of memory");
    memcpy(path, dir, len + 1);
    enum cma_errc rc = CMA_OK;
    for (size_t i = 1; i <= len && rc == CMA_OK; i++) {
        if (path[i] != '/' && path[i] != '\0')
            continue;
        char saved = path[i];
        path[i] = '\0';
        struct stat st;
        if (mkdir(path, 0700) != 0 && errno != EEXIST)
            rc = cma_err_set(reterr, CMA_ERR_IO, "cannot create directory %s: %s", path,
                             strerror(errno));
        else if (stat(path, &st) != 0 || !S_ISDIR(st.st_mode))
            rc = cma_err_set(reterr, CMA_ERR_IO, "%s is not a directory", path);
        path[i] = saved;
    }
    free(path);
    return rc;
}

static bool is_readable_file(const char *path)
{
    return access(path, R_OK) == 0;
}

enum pem_kind { PEM_KEY, PEM_CERTS };

/* Writes `final_path` atomically with the given mode (file.h): the key, or the certificates in
 * order, encoded in memory first. */
static enum cma_errc write_pem_atomic(const char *final_path, mode_t mode, enum pem_kind kind,
                                      EVP_PKEY *key, X509 *const *certs, size_t n_certs,
                                      struct cma_err *reterr)
{
    BIO *mem = BIO_new(BIO_s_mem());
    if (!mem)
        return cma_tlsmat_fail(reterr, "cannot encode %s", final_path);
    bool ok = true;
    if (kind == PEM_KEY)
        ok = PEM_write_bio_PrivateKey(mem, key, NULL, NULL, 0, NULL, NULL) == 1;
    for (size_t i = 0; kind == PEM_CERTS && ok && i < n_certs; i++)
        ok = PEM_write_bio_X509(mem, certs[i]) == 1;
    char *data = NULL;
    long len = ok ? BIO_get_mem_data(mem, &data) : -1;
    enum cma_errc rc = len < 0 || !data
                           ? cma_tlsmat_fail(reterr, "cannot encode %s", final_path)
                           : cma_file_replace(final_path, data, (size_t)len, mode, reterr);
    BIO_free(mem); /* OpenSSL clears a memory BIO's buffer as it frees it (BUF_MEM_free) */
    return rc;
}

/* ----- generation ----- */

static bool dns_name_ok(const char *name)
{
    size_t len = strlen(name);
    if (len == 0 || len > MAX_DNS_NAME)
        return false;
    for (size_t i = 0; i < len; i++) {
        char c = name[i];
        bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                  c == '-' || c == '.' || c == '*' || c == '_';
        if (!ok)
            return false;
    }
    return true;
}

static bool add_dns_san(GENERAL_NAMES *gens, const char *name)
{
    GENERAL_NAME *gen = GENERAL_NAME_new();
    ASN1_IA5STRING *ia5 = ASN1_IA5STRING_new();
    if (!gen || !ia5 || ASN1_STRING_set(ia5, name, (int)strlen(name)) != 1) {
        GENERAL_NAME_free(gen);
        ASN1_IA5STRING_free(ia5);
        return false;
    }
    GENERAL_NAME_set0_value(gen, GEN_DNS, ia5);
    if (!sk_GENERAL_NAME_push(gens, gen)) {
        GENERAL_NAME_free(gen);
        return false;
    }
    return true;
}

static bool add_ip_san(GENERAL_NAMES *gens, const unsigned char *addr, int len)
{
    GENERAL_NAME *gen = GENERAL_NAME_new();
    ASN1_OCTET_STRING *oct = ASN1_OCTET_STRING_new();
    if (!gen || !oct || ASN1_OCTET_STRING_set(oct, addr, len) != 1) {
        GENERAL_NAME_free(gen);
        ASN1_OCTET_STRING_free(oct);
        return false;
    }
    GENERAL_NAME_set0_value(gen, GEN_IPADD, oct);
    if (!sk_GENERAL_NAME_push(gens, gen)) {
        GENERAL_NAME_free(gen);
        return false;
    }
    return true;
}

/* Adds `name` as an IP SAN when it parses as an address, else as a DNS SAN. */
static bool add_name_san(GENERAL_NAMES *gens, const char *name)
{
    unsigned char addr[16];
    if (inet_pton(AF_INET, name, addr) == 1)
        return add_ip_san(gens, addr, 4);
    if (inet_pton(AF_INET6, name, addr) == 1)
        return add_ip_san(gens, addr, 16);
    return add_dns_san(gens, name);
}

static enum cma_errc build_sans(const char *const *extra_dns, size_t n_extra_dns,
                                GENERAL_NAMES **ret_gens, struct cma_err *reterr)
{
    for (size_t i = 0; i < n_extra_dns; i++) {
        if (!extra_dns[i] || !dns_name_ok(extra_dns[i]))
            return cma_err_set(reterr, CMA_ERR_TLS,
                               "\"%s\" is not a valid DNS name for the serving certificate",
                               extra_dns[i] ? extra_dns[i] : "(null)");
    }
    GENERAL_NAMES *gens = sk_GENERAL_NAME_new_null();
    bool ok = gens && add_dns_san(gens, "localhost");
    for (size_t i = 0; ok && i < n_extra_dns; i++) {
        if (strcmp(extra_dns[i], "localhost") == 0 || strcmp(extra_dns[i], "127.0.0.1") == 0 ||
            strcmp(extra_dns[i], "::1") == 0)
            continue;
        ok = add_name_san(gens, extra_dns[i]);
    }
    ok = ok && add_name_san(gens, "127.0.0.1") && add_name_san(gens, "::1");
    if (!ok) {
        GENERAL_NAMES_free(gens);
        return cma_tlsmat_fail(reterr, "cannot build the subjectAltName list");
    }
    *ret_gens = gens;
    return CMA_OK;
}

static bool add_conf_ext(X509 *cert, X509V3_CTX *ctx, int nid, const char *value)
{
    X509_EXTENSION *ext = X509V3_EXT_conf_nid(NULL, ctx, nid, value);
    if (!ext)
        return false;
    int ok = X509_add_ext(cert, ext, -1);
    X509_EXTENSION_free(ext);
    return ok == 1;
}

static bool set_random_serial(X509 *cert)
{
    unsigned char rnd[16];
    if (RAND_bytes(rnd, sizeof rnd) != 1)
        return false;
    rnd[0] &= 0x7f; /* positive */
    rnd[0] |= 0x01; /* non-zero */
    BIGNUM *bn = BN_bin2bn(rnd, sizeof rnd, NULL);
    if (!bn)
        return false;
    bool ok = BN_to_ASN1_INTEGER(bn, X509_get_serialNumber(cert)) != NULL;
    BN_free(bn);
    return ok;
}

/* Makes a certificate for `key` named CN=`cn`, signed by issuer/issuer_key (self-signed when
 * issuer is NULL). A CA when `sans` is NULL, else a serving leaf with those SANs. */
static X509 *make_cert(const char *cn, EVP_PKEY *key, X509 *issuer, EVP_PKEY *issuer_key,
                       const GENERAL_NAMES *sans)
{
    X509 *cert = X509_new();
    if (!cert)
        return NULL;
    X509_NAME *name = X509_get_subject_name(cert);
    bool ok = X509_set_version(cert, X509_VERSION_3) == 1 && set_random_serial(cert) &&
              X509_gmtime_adj(X509_getm_notBefore(cert), -VALID_BEFORE_NOW_S) != NULL &&
              X509_time_adj_ex(X509_getm_notAfter(cert), VALID_DAYS, 0, NULL) != NULL &&
              X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_ASC, (const unsigned char *)cn, -1,
                                         -1, 0) == 1 &&
              X509_set_issuer_name(cert, issuer ? X509_get_subject_name(issuer) : name) == 1 &&
              X509_set_pubkey(cert, key) == 1;
    X509V3_CTX ctx;
    X509V3_set_ctx_nodb(&ctx);
    X509V3_set_ctx(&ctx, issuer ? issuer : cert, cert, NULL, NULL, 0);
    if (ok && !sans) {
        ok = add_conf_ext(cert, &ctx, NID_basic_constraints, "critical,CA:TRUE") &&
             add_conf_ext(cert, &ctx, NID_key_usage,
                          "critical,digitalSignature,keyEncipherment,keyCertSign") &&
             add_conf_ext(cert, &ctx, NID_subject_key_identifier, "hash");
    } else if (ok) {
        ok =
            add_conf_ext(cert, &ctx, NID_basic_constraints, "critical,CA:FALSE") &&
            add_conf_ext(cert, &ctx, NID_key_usage, "critical,digitalSignature,keyEncipherment") &&
            add_conf_ext(cert, &ctx, NID_ext_key_usage, "serverAuth") &&
            add_conf_ext(cert, &ctx, NID_authority_key_identifier, "keyid:always") &&
            X509_add1_ext_i2d(cert, NID_subject_alt_name, (void *)sans, 0, X509V3_ADD_DEFAULT) == 1;
    }
    ok = ok && X509_sign(cert, issuer_key ? issuer_key : key, EVP_sha256()) > 0;
    if (!ok) {
        X509_free(cert);
        return NULL;
    }
    return cert;
}

static enum cma_errc generate_pair(const char *cert_path, const char *key_path,
                                   const char *const *extra_dns, size_t n_extra_dns,
                                   struct cma_err *reterr)
{
    GENERAL_NAMES *sans = NULL;
    enum cma_errc rc = build_sans(extra_dns, n_extra_dns, &sans, reterr);
    if (rc != CMA_OK)
        return rc;
    EVP_PKEY *ca_key = EVP_PKEY_Q_keygen(NULL, NULL, "EC", "P-256");
    EVP_PKEY *leaf_key = EVP_PKEY_Q_keygen(NULL, NULL, "EC", "P-256");
    X509 *ca = NULL;
    X509 *leaf = NULL;
    if (!ca_key || !leaf_key) {
        rc = cma_tlsmat_fail(reterr, "cannot generate an EC P-256 key");
        goto out;
    }
    char ca_cn[64];
    char leaf_cn[64];
    long long now = (long long)time(NULL);
    snprintf(ca_cn, sizeof ca_cn, "localhost-ca@%lld", now);
    snprintf(leaf_cn, sizeof leaf_cn, "localhost@%lld", now);
    ca = make_cert(ca_cn, ca_key, NULL, NULL, NULL);
    leaf = ca ? make_cert(leaf_cn, leaf_key, ca, ca_key, sans) : NULL;
    if (!leaf) {
        rc = cma_tlsmat_fail(reterr, "cannot build the self-signed certificate");
        goto out;
    }
    X509 *chain[2] = {leaf, ca};
    rc = write_pem_atomic(key_path, 0600, PEM_KEY, leaf_key, NULL, 0, reterr);
    if (rc == CMA_OK)
        rc = write_pem_atomic(cert_path, 0644, PEM_CERTS, NULL, chain, 2, reterr);
out:
    X509_free(leaf);
    X509_free(ca);
    EVP_PKEY_free(leaf_key);
    EVP_PKEY_free(ca_key);
    GENERAL_NAMES_free(sans);
    ERR_clear_error();
    return rc;
}

/* True when the pair at these paths can be served as is: it loads, matches, and the leaf has
 * not expired yet. */
static bool pair_is_usable(const char *cert_path, const char *key_path)
{
    if (!is_readable_file(cert_path) || !is_readable_file(key_path))
        return false;
    if (cma_tls_check_pair(cert_path, key_path, NULL) != CMA_OK)
        return false;
    return cma_tlsmat_leaf_current(cert_path);
}

static enum cma_errc join_path(char *out, size_t out_len, const char *dir, const char *name,
                               struct cma_err *reterr)
{
    size_t dlen = strlen(dir);
    const char *sep = (dlen > 0 && dir[dlen - 1] == '/') ? "" : "/";
    int n = snprintf(out, out_len, "%s%s%s", dir, sep, name);
    if (n < 0 || (size_t)n >= out_len)
        return cma_err_set(reterr, CMA_ERR_TLS, "path %s%s%s is longer than %zu bytes", dir, sep,
                           name, out_len ? out_len - 1 : 0);
    return CMA_OK;
}

enum cma_errc cma_tls_ensure_self_signed(const char *cert_dir, const char *const *extra_dns,
                                         size_t n_extra_dns, char *cert_path, size_t cert_len,
                                         char *key_path, size_t key_len, struct cma_err *reterr)
{
    if (!cert_dir || !*cert_dir)
        return cma_err_set(reterr, CMA_ERR_TLS, "--cert-dir is empty");
    if (!cert_path || !key_path || (n_extra_dns > 0 && !extra_dns))
        return cma_err_set(reterr, CMA_ERR_INTERNAL, "cma_tls_ensure_self_signed: bad arguments");
    enum cma_errc rc = join_path(cert_path, cert_len, cert_dir, CERT_NAME, reterr);
    if (rc == CMA_OK)
        rc = join_path(key_path, key_len, cert_dir, KEY_NAME, reterr);
    if (rc == CMA_OK)
        rc = mkdir_p(cert_dir, reterr);
    if (rc != CMA_OK)
        return rc;
    if (pair_is_usable(cert_path, key_path))
        return CMA_OK;
    rc = generate_pair(cert_path, key_path, extra_dns, n_extra_dns, reterr);
    if (rc != CMA_OK) {
        cma_err_prefix(reterr, "self-signed certificate in %s: ", cert_dir);
        return rc;
    }
    return CMA_OK; /* main logs that it generated one (a new file: the rename gave a new inode) */
}
