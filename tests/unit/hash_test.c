/* hash_test.c: FNV-1a against the reference vectors, piecewise hashing, and the index table:
 * every item found after many growths, absent keys land on free slots, colliding hashes told
 * apart by the caller's equality, load kept at most one half; a table built in one reserve over
 * an existing array (as api_custom.c indexes a request's object names) finds every item, and the
 * first of equal keys, with hashes spread or all colliding. */
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

/* One cma_htab_reserve() over n items already in the array: every distinct key is found at its
 * position; a key listed again (every 10th item repeats the key 9 places before) answers the
 * first position. */
static void bulk_first_wins(bool collide)
{
    static struct items it;
    memset(&it, 0, sizeof(it));
    it.collide = collide;
    for (size_t i = 0; i < 300; i++) {
        size_t key = i % 10 == 9 ? i - 9 : i; /* item 9 repeats item 0's key, 19 item 10's... */
        snprintf(it.keys[i], sizeof(it.keys[i]), "pod-%zu", key);
    }
    it.n = 300;
    struct cma_htab t = {0};
    assert_int_equal(cma_htab_reserve(&t, it.n, item_hash, &it), CMA_OK);
    assert_true((it.n + 1) * 2 <= t.cap);
    for (size_t i = 0; i < it.n; i++) {
        size_t *slot = cma_htab_find(&t, key_hash(&it, it.keys[i]), it.keys[i], item_eq, &it);
        assert_non_null(slot);
        assert_int_equal(*slot, (i % 10 == 9 ? i - 9 : i) + 1);
    }
    size_t *slot = cma_htab_find(&t, key_hash(&it, "pod-9"), "pod-9", item_eq, &it);
    assert_int_equal(*slot, 0); /* never listed: every 10th item repeats a key */
    cma_htab_done(&t);
}

static void test_cma_htab__bulk_reserve_first_of_equal_keys(void **state)
{
    (void)state;
    bulk_first_wins(false);
    bulk_first_wins(true);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cma_hash_str__reference_vectors),
        cmocka_unit_test(test_cma_htab__grows_and_finds),
        cmocka_unit_test(test_cma_htab__collisions),
        cmocka_unit_test(test_cma_htab__bulk_reserve_first_of_equal_keys),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
