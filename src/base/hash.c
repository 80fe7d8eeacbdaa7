/* hash.c: FNV-1a and the index table of hash.h. Growth re-inserts by hash alone (the items
 * are distinct by construction), so the caller's equality is needed only for lookups. */
#include "cma/hash.h"

#include <stdlib.h>

uint64_t cma_hash_bytes(uint64_t h, const void *p, size_t n)
{
    const unsigned char *s = p;
    for (size_t i = 0; i < n; i++)
        h = cma_hash_byte(h, s[i]);
    return h;
}

uint64_t cma_hash_str(const char *s, size_t n)
{
    return cma_hash_bytes(CMA_HASH_FNV_OFFSET, s, n);
}

size_t *cma_htab_find(const struct cma_htab *t, uint64_t hash, const void *key, cma_htab_eq_fn eq,
                      const void *ctx)
{
    if (!t->cap)
        return NULL;
    size_t mask = t->cap - 1;
    for (size_t i = (size_t)hash & mask;; i = (i + 1) & mask) {
        size_t *slot = &t->slots[i];
        if (*slot == 0 || eq(ctx, *slot - 1, key))
            return slot;
    }
}

enum cma_errc cma_htab_reserve(struct cma_htab *t, size_t n_items, cma_htab_hash_fn hash_of,
                               const void *ctx)
{
    if ((n_items + 1) * 2 <= t->cap)
        return CMA_OK;
    size_t cap = t->cap ? t->cap * 2 : 16;
    while ((n_items + 1) * 2 > cap)
        cap *= 2;
    size_t *slots = calloc(cap, sizeof(*slots));
    if (!slots)
        return CMA_ERR_NOMEM;
    for (size_t k = 0; k < n_items; k++) {
        size_t i = (size_t)hash_of(ctx, k) & (cap - 1);
        while (slots[i])
            i = (i + 1) & (cap - 1);
        slots[i] = k + 1;
    }
    free(t->slots);
    t->slots = slots;
    t->cap = cap;
    return CMA_OK;
}

void cma_htab_done(struct cma_htab *t)
{
    free(t->slots);
    t->slots = NULL;
    t->cap = 0;
}
