/* tls.h: serving-certificate material: validating a given cert/key pair, and generating a
 * self-signed certificate (OpenSSL) into --cert-dir when none is given, with SANs for
 * localhost, 127.0.0.1, ::1 and the service DNS names. Reading and checking material is
 * clients/tlsmat.h. */
#ifndef CMA_TLS_H
#define CMA_TLS_H

#include <stddef.h>

#include "cma/err.h"

/* Ensures <cert_dir>/apiserver.crt and apiserver.key exist (generating an EC P-256 self-signed
 * pair valid 1 year if either is missing or unreadable) and returns their paths in the
 * caller-provided buffers. extra_dns may list more DNS SANs (e.g. "custom-metrics-adapter.
 * monitoring.svc"). Creates cert_dir (mode 0700) if needed. */
enum cma_errc cma_tls_ensure_self_signed(const char *cert_dir, const char *const *extra_dns,
                                         size_t n_extra_dns, char *cert_path, size_t cert_len,
                                         char *key_path, size_t key_len, struct cma_err *reterr);

/* Checks that cert_file and key_file parse and that the key matches the certificate. */
enum cma_errc cma_tls_check_pair(const char *cert_file, const char *key_file,
                                 struct cma_err *reterr);

#endif
