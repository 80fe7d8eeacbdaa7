/* arena.c: the bump allocator of arena.h. Chunks of at least 4 KiB are linked newest first;
 * an allocation that does not fit the newest chunk starts a new one (a large allocation gets a
 * chunk of its own size), so the unused tail of older chunks is never revisited: simple, and
 * the waste is bounded by one chunk per large allocation. The ceiling counts chunk bytes, so it
 * bounds the memory really taken, not just what was asked for. Deferred cleanups are records
 * in the arena itself, run newest first before the chunks go. */
#include "cma/arena.h"

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define ARENA_ALIGN ((size_t)16)
#define ARENA_CHUNK ((size_t)4096)

struct cma_arena_chunk {
    struct cma_arena_chunk *next;
    size_t used;
    size_t cap;
};

struct cma_arena_cleanup {
    struct cma_arena_cleanup *next;
    cma_arena_cleanup_fn fn;
    void *ptr;
};

#define CHUNK_HDR ((sizeof(struct cma_arena_chunk) + ARENA_ALIGN - 1) & ~(ARENA_ALIGN - 1))

void cma_arena_init(struct cma_arena *a, size_t max_bytes)
{
    a->head = NULL;
    a->cleanups = NULL;
    a->total = 0;
    a->max = max_bytes;
    a->rc = CMA_OK;
}

void cma_arena_done(struct cma_arena *a)
{
    for (struct cma_arena_cleanup *d = a->cleanups; d; d = d->next)
        d->fn(d->ptr);
    a->cleanups = NULL;
    struct cma_arena_chunk *c = a->head;
    while (c) {
        struct cma_arena_chunk *next = c->next;
        free(c);
        c = next;
    }
    a->head = NULL;
    a->total = 0;
}

static void *fail(struct cma_arena *a, enum cma_errc rc)
{
    a->rc = rc;
    return NULL;
}

void *cma_arena_alloc(struct cma_arena *a, size_t n)
{
    if (n > SIZE_MAX / 4)
        return fail(a, CMA_ERR_TOO_LARGE);
    n = n ? (n + ARENA_ALIGN - 1) & ~(ARENA_ALIGN - 1) : ARENA_ALIGN;
    struct cma_arena_chunk *c = a->head;
    if (!c || c->cap - c->used < n) {
        size_t cap = n > ARENA_CHUNK ? n : ARENA_CHUNK;
        if (a->max && (cap > a->max || a->total > a->max - cap))
            return fail(a, CMA_ERR_TOO_LARGE);
        c = malloc(CHUNK_HDR + cap);
        if (!c)
            return fail(a, CMA_ERR_NOMEM);
        c->next = a->head;
        c->used = 0;
        c->cap = cap;
        a->head = c;
        a->total += cap;
    }
    unsigned char *p = (unsigned char *)c + CHUNK_HDR + c->used;
    c->used += n;
    memset(p, 0, n);
    return p;
}

void *cma_arena_array(struct cma_arena *a, size_t n, size_t size)
{
    if (size && n > SIZE_MAX / size)
        return fail(a, CMA_ERR_TOO_LARGE);
    return cma_arena_alloc(a, n * size);
}

char *cma_arena_strndup(struct cma_arena *a, const char *s, size_t n)
{
    char *p = cma_arena_alloc(a, n + 1);
    if (p && n)
        memcpy(p, s, n);
    return p;
}

char *cma_arena_strdup(struct cma_arena *a, const char *s)
{
    return s ? cma_arena_strndup(a, s, strlen(s)) : NULL;
}

char *cma_arena_printf(struct cma_arena *a, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (n < 0)
        return fail(a, CMA_ERR_INTERNAL);
    char *p = cma_arena_alloc(a, (size_t)n + 1);
    if (!p)
        return NULL;
    va_start(ap, fmt);
    vsnprintf(p, (size_t)n + 1, fmt, ap);
    va_end(ap);
    return p;
}

enum cma_errc cma_arena_defer(struct cma_arena *a, cma_arena_cleanup_fn fn, void *ptr)
{
    if (!ptr)
        return CMA_OK;
    struct cma_arena_cleanup *d = cma_arena_alloc(a, sizeof(*d));
    if (!d) {
        fn(ptr);
        return a->rc;
    }
    d->fn = fn;
    d->ptr = ptr;
    d->next = a->cleanups;
    a->cleanups = d;
    return CMA_OK;
}
