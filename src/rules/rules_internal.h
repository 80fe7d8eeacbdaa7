/* rules_internal.h: helpers shared by the rules stage's files (not a public contract). */
#ifndef CMA_RULES_INTERNAL_H
#define CMA_RULES_INTERNAL_H

#include "cma/config.h"
#include "cma/err.h"

/* Copies `inner` into reterr with the position of config value `s`. When the value is a plain
 * one-line scalar and inner has a column (a byte offset inside the value, 1-based), the column
 * points at that byte in the file. `what` prefixes the message ("name.matches: "). */
enum cma_errc cma_rules_err_at(struct cma_err *reterr, const struct cma_config_str *s,
                               const struct cma_err *inner, const char *what);

#endif
