/* compat.h: prometheus-adapter v0.12.0's command line, flag by flag (its own flags, klog's and
 * the generic apiserver's that it inherits): which ones this adapter implements under the same
 * name and which ones it accepts without acting on them, with why. options.c consults it for the
 * names its own table lacks (one warning line each, unknown flags still fail); docs/flags.md
 * prints it. Also the Go names of TLS cipher suites --tls-cipher-suites accepts. Static data:
 * thread-safe. */
#ifndef CMA_COMPAT_H
#define CMA_COMPAT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

/* The value a flag takes, as Go's pflag parses it (bools need none: --x, --x=false). */
enum cma_compat_type {
    CMA_COMPAT_BOOL,
    CMA_COMPAT_STRING,
    CMA_COMPAT_INT,
    CMA_COMPAT_FLOAT,
    CMA_COMPAT_DURATION,
};

struct cma_compat_flag {
    const char *name;  /* as prometheus-adapter spells it */
    const char *alias; /* another accepted spelling (klog's log_dir as log-dir), or NULL */
    const char *origin;
    enum cma_compat_type type;
    const char *no_effect; /* NULL: implemented here under the same name; else why it is not */
};

size_t cma_compat_flag_count(void);
const struct cma_compat_flag *cma_compat_flag_at(size_t i); /* NULL past the end */

/* The flag accepted without effect named name[0..len) (either spelling), or NULL. */
const struct cma_compat_flag *cma_compat_ignored_flag(const char *name, size_t len);

enum cma_cipher_suite_support {
    CMA_CIPHER_UNKNOWN,     /* not a name Go's crypto/tls (or Kubernetes' flag) knows */
    CMA_CIPHER_SERVED,      /* offered when listed */
    CMA_CIPHER_NOT_OFFERED, /* a Go name this server never offers (RC4) */
};

/* What --tls-cipher-suites does with the Go cipher suite name name[0..len). */
enum cma_cipher_suite_support cma_compat_cipher_suite(const char *name, size_t len);

/* Prints the Markdown table of prometheus-adapter's flags (docs/flags.md). */
void cma_compat_print_markdown(FILE *out);

#endif
