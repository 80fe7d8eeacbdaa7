/* hash_test.c: FNV-1a against the reference vectors, piecewise hashing, and the index table:
 * every item found after many growths, absent keys land on free slots, colliding hashes told
 * apart by the caller's equality, load kept at most one half. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "cma/hash.h"

static void test_cma_hash_str__reference_vectors(void **state)
{
    (void)state;
    /* From the FNV reference test suite (64-bit FNV-1a). */
    assert_true(cma_hash_str("", 0) == 0xcbf29ce484222325ULL);
    assert_true(cma_hash_str("a", 1) == 0xaf63dc4c8601ec8cULL);
    assert_true(cma_hash_str("foobar", 6) == 0x85944171f73967e8ULL);
    uint64_t h = cma_hash_bytes(CMA_HASH_FNV_OFFSET, "foo", 3);
    h = cma_hash_byte(h, 'b');
    h = cma_hash_bytes(h, "ar", 2);
    assert_true(h == cma_hash_str("foobar", 6));
}

struct items {
    char keys[1000][24];
    size_t n;
    bool collide; /* every item hashes the same */
};

static uint64_t key_hash(const struct items *it, const char *k)
{
    return it->collide ? 7 : cma_hash_str(k, strlen(k));
}

static bool item_eq(const void *ctx, size_t index, const void *key)
{
    const struct items *it = ctx;
    return strcmp(it->keys[index], key) == 0;
}

static uint64_t item_hash(const void *ctx, size_t index)
{
    const struct items *it = ctx;
    return key_hash(it, it->keys[index]);
}

static void fill(struct cma_htab *t, struct items *it, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        char key[24];
        snprintf(key, sizeof(key), "k%zu", i);
        assert_int_equal(cma_htab_reserve(t, it->n, item_hash, it), CMA_OK);
        assert_true((it->n + 1) * 2 <= t->cap);
        size_t *slot = cma_htab_find(t, key_hash(it, key), key, item_eq, it);
        assert_non_null(slot);
        assert_int_equal(*slot, 0);
        memcpy(it->keys[it->n], key, sizeof(key));
        *slot = ++it->n;
    }
}

static void check(const struct cma_htab *t, const struct items *it)
{
    for (size_t i = 0; i < it->n; i++) {
        size_t *slot = cma_htab_find(t, key_hash(it, it->keys[i]), it->keys[i], item_eq, it);
        assert_int_equal(*slot, i + 1);
    }
    size_t *slot = cma_htab_find(t, key_hash(it, "absent"), "absent", item_eq, it);
    assert_int_equal(*slot, 0);
}

static void test_cma_htab__grows_and_finds(void **state)
{
    (void)state;
    static struct items it;
    memset(&it, 0, sizeof(it));
    struct cma_htab t = {0};
    assert_null(cma_htab_find(&t, 1, "x", item_eq, &it));
    fill(&t, &it, 1000);
    assert_int_equal(t.cap, 2048);
    check(&t, &it);
    cma_htab_done(&t);
    assert_null(t.slots);
    assert_int_equal(t.cap, 0);
}

static void test_cma_htab__collisions(void **state)
{
    (void)state;
    static struct items it;
    memset(&it, 0, sizeof(it));
    it.collide = true;
    struct cma_htab t = {0};
    fill(&t, &it, 100);
    check(&t, &it);
    cma_htab_done(&t);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cma_hash_str__reference_vectors),
        cmocka_unit_test(test_cma_htab__grows_and_finds),
        cmocka_unit_test(test_cma_htab__collisions),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
