/* arena.h: bump allocation in chunks, everything freed in one call, with a ceiling on the bytes
 * it may hold. Used for whatever lives exactly as long as one piece of work: a parsed template
 * tree, the values a template render computes, and everything an HTTP request handler allocates
 * (the server creates one arena per request and frees it once the response has been sent).
 * Allocations are zeroed and aligned to 16 bytes. What other modules allocate for the same piece
 * of work (a parsed selector, a backend answer) can be handed to the arena with
 * cma_arena_defer(): it is freed with the arena, so the owner frees nothing by hand.
 * Not thread-safe: an arena has one owner. */
#ifndef CMA_ARENA_H
#define CMA_ARENA_H

#include <stddef.h>

#include "cma/err.h"

struct cma_arena_chunk;
struct cma_arena_cleanup;

struct cma_arena {
    struct cma_arena_chunk *head;
    struct cma_arena_cleanup *cleanups; /* newest first */
    size_t total;                       /* bytes in all chunks (headers not counted) */
    size_t max;                         /* ceiling on total, 0 = none */
    enum cma_errc rc; /* why the last allocation failed: CMA_ERR_TOO_LARGE or CMA_ERR_NOMEM */
};

void cma_arena_init(struct cma_arena *a, size_t max_bytes);
/* Runs the deferred cleanups (newest first), then frees every chunk; the arena can be used
 * again (same ceiling). Accepts a zeroed struct. */
void cma_arena_done(struct cma_arena *a);

/* Zeroed memory for n bytes, or NULL with a->rc set (over the ceiling, or out of memory). */
void *cma_arena_alloc(struct cma_arena *a, size_t n);
/* Zeroed memory for n elements of size bytes (overflow checked), or NULL with a->rc set. */
void *cma_arena_array(struct cma_arena *a, size_t n, size_t size);
/* s[0..n) copied and NUL-terminated (s may be NULL when n is 0), or NULL with a->rc set. */
char *cma_arena_strndup(struct cma_arena *a, const char *s, size_t n);
/* A copy of the C string s (NULL gives NULL without an error), or NULL with a->rc set. */
char *cma_arena_strdup(struct cma_arena *a, const char *s);
/* printf into the arena, or NULL with a->rc set. */
char *cma_arena_printf(struct cma_arena *a, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

typedef void (*cma_arena_cleanup_fn)(void *ptr);
/* Calls fn(ptr) when the arena is done (ptr NULL: nothing to do, CMA_OK). When the record
 * cannot be allocated, fn(ptr) runs at once and a->rc is returned: ptr is gone either way once
 * this returns an error, so the caller never frees it by hand. */
enum cma_errc cma_arena_defer(struct cma_arena *a, cma_arena_cleanup_fn fn, void *ptr);

#endif
