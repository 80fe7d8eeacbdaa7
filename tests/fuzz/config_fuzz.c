/* config_fuzz.c: libFuzzer target for the config loader (yamldoc + config): any input must
 * load or fail with a positioned error, never crash, leak or run away (alias bombs, depth). */
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "cma/config.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct cma_err err;
    cma_err_clear(&err);
    struct cma_config *cfg = NULL;
    enum cma_errc rc = cma_config_load_string("fuzz.yaml", (const char *)data, size, &cfg, &err);
    if (rc == CMA_OK) {
        /* touch the result so a dangling pointer would show under ASan */
        size_t total = 0;
        for (size_t i = 0; i < cfg->n_rules; i++)
            if (cfg->rules[i].series_query.set)
                total += strlen(cfg->rules[i].series_query.s);
        (void)total;
        cma_config_free(cfg);
    } else {
        char out[CMA_ERR_MSG_MAX + CMA_ERR_FILE_MAX + 32];
        cma_err_format_pos(&err, out, sizeof(out));
        if (err.code != rc)
            __builtin_trap();
    }
    return 0;
}
