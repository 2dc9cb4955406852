/*
 * tests/test_blockpool.c: vLLM's block pool without KV (cache/blockpool):
 * chained hashes (a change in block k misses k and every block after it),
 * the cache salt, lookups of the oldest acceptable duplicate, and the free
 * queue's eviction order (a request's tail first, least recently freed
 * first, blocks in use never).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdlib.h>
#include <string.h>

#include "blockpool.h"
#include "status.h"

#define B 4

static void fill(int32_t *t, int32_t n, int32_t seed) {
    for (int32_t i = 0; i < n; i++) t[i] = 100 + (seed * 7919 + i * 31) % 5000;
}

/* Caches the n / B full blocks of t as one request (ids out), then frees them. */
static int32_t cache_request(hx_blockpool *p, const int32_t *t, int32_t n, int32_t *ids) {
    uint64_t h[64];
    int32_t nb = hx_block_hashes(t, n, B, NULL, h);
    for (int32_t i = 0; i < nb; i++) {
        ids[i] = hx_blockpool_alloc(p);
        assert_true(ids[i] >= 0);
        assert_int_equal(hx_blockpool_cache(p, ids[i], h[i], i ? h[i - 1] : 0, i, t + i * B, NULL), ENG_OK);
    }
    hx_blockpool_release(p, ids, nb);
    return nb;
}

/* How many leading blocks of t the pool has, walking the chain as vLLM does. */
static int32_t hit_blocks(hx_blockpool *p, const int32_t *t, int32_t n) {
    uint64_t h[64];
    int32_t nb = hx_block_hashes(t, n, B, NULL, h), k = 0;
    while (k < nb && hx_blockpool_find(p, h[k], k ? h[k - 1] : 0, t + k * B, NULL, NULL) >= 0) k++;
    return k;
}

static void a_change_in_block_k_changes_the_hash_of_k_and_of_every_block_after(void **state) {
    (void)state;
    int32_t a[40], b[40];
    fill(a, 40, 1);
    for (int32_t k = 0; k < 10; k++) {
        memcpy(b, a, sizeof a);
        b[k * B + 2] ^= 1;  /* one token of block k */
        uint64_t ha[10], hb[10];
        assert_int_equal(hx_block_hashes(a, 40, B, NULL, ha), 10);
        hx_block_hashes(b, 40, B, NULL, hb);
        for (int32_t i = 0; i < 10; i++) {
            if (i < k) assert_true(ha[i] == hb[i]);
            else assert_true(ha[i] != hb[i]);
        }
    }
}

static void a_lookup_hits_the_blocks_before_the_change_and_none_after(void **state) {
    (void)state;
    int32_t a[40], b[40], ids[16];
    fill(a, 40, 2);
    hx_blockpool *p = hx_blockpool_new(B, 0, NULL, NULL);
    assert_int_equal(cache_request(p, a, 40, ids), 10);
    assert_int_equal(hit_blocks(p, a, 40), 10);
    memcpy(b, a, sizeof a);
    b[6 * B] ^= 1;
    assert_int_equal(hit_blocks(p, b, 40), 6);
    /* the same tokens at block 7 onward are not found either: their parent differs */
    uint64_t hb[10];
    hx_block_hashes(b, 40, B, NULL, hb);
    assert_int_equal(hx_blockpool_find(p, hb[7], hb[6], b + 7 * B, NULL, NULL), -1);
    /* a partial block is never cached */
    assert_int_equal(hx_block_hashes(a, 39, B, NULL, hb), 9);
    hx_blockpool_free(p);
}

static void the_cache_salt_keys_the_first_block_and_so_the_whole_chain(void **state) {
    (void)state;
    int32_t a[16];
    fill(a, 16, 3);
    uint64_t h0[4], h1[4], h2[4];
    hx_block_hashes(a, 16, B, NULL, h0);
    hx_block_hashes(a, 16, B, "tenant-a", h1);
    hx_block_hashes(a, 16, B, "tenant-b", h2);
    for (int32_t i = 0; i < 4; i++) {
        assert_true(h0[i] != h1[i]);
        assert_true(h1[i] != h2[i]);
    }
}

static bool accept_odd(void *ud, const hx_block *b) {
    (void)ud;
    return (intptr_t)b->data % 2 == 1;
}

static void duplicates_are_found_oldest_first_among_the_acceptable(void **state) {
    (void)state;
    int32_t a[4];
    fill(a, 4, 4);
    uint64_t h = hx_block_hash(0, a, B, NULL, 0);
    hx_blockpool *p = hx_blockpool_new(B, 0, NULL, NULL);
    int32_t ids[3];
    for (intptr_t k = 0; k < 3; k++) {  /* three blocks with one hash, payloads 2, 3, 4 */
        ids[k] = hx_blockpool_alloc(p);
        assert_int_equal(hx_blockpool_cache(p, ids[k], h, 0, 0, a, (void *)(k + 2)), ENG_OK);
    }
    hx_blockpool_release(p, ids, 3);
    assert_int_equal(hx_blockpool_find(p, h, 0, a, NULL, NULL), ids[0]);
    assert_int_equal(hx_blockpool_find(p, h, 0, a, accept_odd, NULL), ids[1]);
    assert_int_equal(hx_blockpool_cached(p), 3);
    /* other tokens under the same hash (a collision) are never served */
    int32_t other[4] = {1, 2, 3, 4};
    assert_int_equal(hx_blockpool_find(p, h, 0, other, NULL, NULL), -1);
    hx_blockpool_free(p);
}

static int g_evicted[32], g_n_evicted;
static void record_evict(void *ud, hx_block *b) {
    (void)ud;
    if (g_n_evicted < (int)(sizeof g_evicted / sizeof g_evicted[0])) g_evicted[g_n_evicted] = b->index;
    g_n_evicted++;
}

/* vLLM's design doc: freed blocks join the free queue's tail in reverse
 * order, so a request's last block is evicted first; the queue's head is
 * the least recently freed. */
static void eviction_takes_the_tail_of_the_least_recently_freed_request_first(void **state) {
    (void)state;
    int32_t a[12], b[12], ids[8];
    fill(a, 12, 5);
    fill(b, 12, 6);
    g_n_evicted = 0;
    hx_blockpool *p = hx_blockpool_new(B, 6, record_evict, NULL);
    cache_request(p, a, 12, ids);  /* blocks a0 a1 a2, freed a2 a1 a0 */
    cache_request(p, b, 12, ids);  /* b0 b1 b2 */
    assert_int_equal(hx_blockpool_cached(p), 6);
    int32_t got[3];
    for (int32_t i = 0; i < 3; i++) got[i] = hx_blockpool_alloc(p);
    assert_int_equal(g_n_evicted, 3);
    assert_int_equal(g_evicted[0], 2);  /* a's tail first */
    assert_int_equal(g_evicted[1], 1);
    assert_int_equal(g_evicted[2], 0);
    assert_int_equal(hit_blocks(p, a, 12), 0);
    assert_int_equal(hit_blocks(p, b, 12), 3);
    assert_int_equal(hx_blockpool_evictions(p), 3);
    hx_blockpool_release(p, got, 3);
    hx_blockpool_free(p);
}

static void a_hit_block_is_touched_out_of_the_queue_and_never_evicted_while_in_use(void **state) {
    (void)state;
    int32_t a[12], b[12], ids[8];
    fill(a, 12, 7);
    fill(b, 12, 8);
    g_n_evicted = 0;
    hx_blockpool *p = hx_blockpool_new(B, 6, record_evict, NULL);
    cache_request(p, a, 12, ids);
    cache_request(p, b, 12, ids);
    /* a request hits a0, a1: touched, in use */
    uint64_t h[3];
    hx_block_hashes(a, 12, B, NULL, h);
    int32_t hit[2] = {hx_blockpool_find(p, h[0], 0, a, NULL, NULL), hx_blockpool_find(p, h[1], h[0], a + B, NULL, NULL)};
    hx_blockpool_touch(p, hit[0]);
    hx_blockpool_touch(p, hit[1]);
    int32_t got[4];
    for (int32_t i = 0; i < 4; i++) got[i] = hx_blockpool_alloc(p);  /* a2, then b's blocks */
    assert_int_equal(g_n_evicted, 4);
    assert_int_equal(g_evicted[0], 2);
    assert_int_equal(g_evicted[1], 2);  /* b2 */
    assert_int_equal(g_evicted[2], 1);
    assert_int_equal(g_evicted[3], 0);
    /* every block is in use now: nothing left to allocate */
    assert_int_equal(hx_blockpool_alloc(p), -1);
    assert_int_equal(hit_blocks(p, a, 12), 2);
    hx_blockpool_release(p, hit, 2);
    hx_blockpool_release(p, got, 4);
    hx_blockpool_free(p);
}

static void an_unbounded_pool_never_evicts(void **state) {
    (void)state;
    int32_t t[40], ids[16];
    g_n_evicted = 0;
    hx_blockpool *p = hx_blockpool_new(B, 0, record_evict, NULL);
    for (int32_t s = 0; s < 20; s++) {
        fill(t, 40, 100 + s);
        cache_request(p, t, 40, ids);
    }
    assert_int_equal(hx_blockpool_cached(p), 200);
    assert_int_equal(g_n_evicted, 0);
    g_n_evicted = 0;
    hx_blockpool_free(p);  /* frees every payload through on_evict */
    assert_int_equal(g_n_evicted, 200);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(a_change_in_block_k_changes_the_hash_of_k_and_of_every_block_after),
        cmocka_unit_test(a_lookup_hits_the_blocks_before_the_change_and_none_after),
        cmocka_unit_test(the_cache_salt_keys_the_first_block_and_so_the_whole_chain),
        cmocka_unit_test(duplicates_are_found_oldest_first_among_the_acceptable),
        cmocka_unit_test(eviction_takes_the_tail_of_the_least_recently_freed_request_first),
        cmocka_unit_test(a_hit_block_is_touched_out_of_the_queue_and_never_evicted_while_in_use),
        cmocka_unit_test(an_unbounded_pool_never_evicts),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
