/* hash.h: the one string hash (64-bit FNV-1a) and the one small hash table of the project: an
 * index table, open addressing with linear probing over a power-of-two array of slots, each
 * holding the position + 1 of an item in the caller's own array (0 = free). The caller keeps its
 * items where it likes (an array it appends to) and says how to compare and re-hash them; the
 * table keeps the load at most one half, so a probe always ends at a free slot. No removal:
 * every user builds, looks up and frees. Not thread-safe: a table has one owner. */
#ifndef CMA_HASH_H
#define CMA_HASH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cma/err.h"

#define CMA_HASH_FNV_OFFSET 14695981039346656037ULL
#define CMA_HASH_FNV_PRIME 1099511628211ULL

/* One more byte into a running FNV-1a hash (for keys hashed piece by piece, or folded). */
static inline uint64_t cma_hash_byte(uint64_t h, unsigned char c)
{
    return (h ^ c) * CMA_HASH_FNV_PRIME;
}
/* n more bytes into a running hash h (start from CMA_HASH_FNV_OFFSET). */
uint64_t cma_hash_bytes(uint64_t h, const void *p, size_t n);
/* FNV-1a of s[0..n). */
uint64_t cma_hash_str(const char *s, size_t n);

struct cma_htab {
    size_t *slots; /* item position + 1; 0 = free */
    size_t cap;    /* 0 or a power of two */
};

/* Is item `index` of the caller's array equal to `key`? */
typedef bool (*cma_htab_eq_fn)(const void *ctx, size_t index, const void *key);
/* The hash of item `index` (used when the table grows). */
typedef uint64_t (*cma_htab_hash_fn)(const void *ctx, size_t index);

/* The slot for key: it holds the matching item's position + 1, or 0 where it would go. NULL
 * only when the table has no slots yet (cma_htab_reserve() was never called). */
size_t *cma_htab_find(const struct cma_htab *t, uint64_t hash, const void *key, cma_htab_eq_fn eq,
                      const void *ctx);
/* Makes room for one more item when n_items are in: grows (16 slots first, then doubling) and
 * re-inserts items 0..n_items-1 by their hash. CMA_ERR_NOMEM leaves the table as it was. */
enum cma_errc cma_htab_reserve(struct cma_htab *t, size_t n_items, cma_htab_hash_fn hash_of,
                               const void *ctx);
void cma_htab_done(struct cma_htab *t);

#endif
