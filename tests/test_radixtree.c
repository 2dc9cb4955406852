/*
 * tests/test_radixtree.c: SGLang's radix tree without KV (cache/radixtree):
 * matches rounded down to whole pages, splits where a match or an insertion
 * ends inside an edge (the branch point), the payload given to the upper
 * half of a split, and LRU eviction of unlocked leaves.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdlib.h>
#include <string.h>

#include "radixtree.h"
#include "status.h"

static void seq(int32_t *t, int32_t n, int32_t base) {
    for (int32_t i = 0; i < n; i++) t[i] = base + i;
}

static int g_splits, g_drops;
static int64_t g_dropped_tokens;
static void on_split(void *ud, hx_rnode *upper, hx_rnode *lower) {
    (void)ud;
    g_splits++;
    upper->data = lower->data;  /* the prefix keeps the payload's tag */
}
static void on_drop(void *ud, hx_rnode *n) {
    (void)ud;
    g_drops++;
    g_dropped_tokens += n->len;
}

static hx_radix *tree(int32_t page) {
    g_splits = g_drops = 0;
    g_dropped_tokens = 0;
    hx_radix *t = hx_radix_new(page, on_split, on_drop, NULL);
    assert_non_null(t);
    return t;
}

static void matches_and_insertions_are_rounded_down_to_whole_pages(void **state) {
    (void)state;
    int32_t a[20];
    seq(a, 20, 1);
    hx_radix *t = tree(4);
    hx_rnode *leaf, *last;
    assert_int_equal(hx_radix_insert(t, a, 19, &leaf), 0);  /* 19 -> 16 tokens */
    assert_int_equal(hx_radix_tokens(t), 16);
    assert_int_equal(leaf->start + leaf->len, 16);
    assert_int_equal(hx_radix_match(t, a, 15, &last), 12);  /* 15 -> 12 */
    assert_int_equal(last->start + last->len, 12);
    /* a mismatch inside a page loses the whole page */
    int32_t b[20];
    memcpy(b, a, sizeof b);
    b[10] = -1;
    assert_int_equal(hx_radix_match(t, b, 20, &last), 8);
    hx_radix_free(t);
}

static void a_divergent_insertion_splits_the_edge_at_the_branch_point(void **state) {
    (void)state;
    int32_t a[16], b[16];
    seq(a, 16, 1);
    memcpy(b, a, sizeof b);
    for (int32_t i = 6; i < 16; i++) b[i] = 1000 + i;
    hx_radix *t = tree(1);
    hx_rnode *la, *lb;
    assert_int_equal(hx_radix_insert(t, a, 16, &la), 0);
    la->data = (void *)"a";
    assert_int_equal(hx_radix_nodes(t), 1);
    assert_int_equal(hx_radix_insert(t, b, 16, &lb), 6);  /* 6 tokens were present */
    /* root -> [0, 6) -> {[6, 16) of a, [6, 16) of b} */
    assert_int_equal(hx_radix_nodes(t), 3);
    assert_int_equal(g_splits, 1);
    hx_rnode *root = hx_radix_root(t);
    assert_int_equal(root->n_kids, 1);
    hx_rnode *shared = root->kids[0];
    assert_int_equal(shared->start, 0);
    assert_int_equal(shared->len, 6);
    assert_int_equal(shared->n_kids, 2);
    assert_string_equal((const char *)shared->data, "a");  /* the split gave the prefix a's payload */
    assert_ptr_equal(la->parent, shared);
    assert_int_equal(la->start, 6);
    assert_ptr_equal(lb->parent, shared);
    assert_int_equal(hx_radix_tokens(t), 26);
    /* both branches match in full; a third one stops at the branch point */
    hx_rnode *last;
    assert_int_equal(hx_radix_match(t, a, 16, &last), 16);
    assert_ptr_equal(last, la);
    int32_t c[16];
    memcpy(c, a, sizeof c);
    c[6] = -5;
    assert_int_equal(hx_radix_match(t, c, 16, &last), 6);
    assert_ptr_equal(last, shared);
    hx_radix_free(t);
}

static void a_match_that_ends_inside_an_edge_splits_it_there(void **state) {
    (void)state;
    int32_t a[16];
    seq(a, 16, 1);
    hx_radix *t = tree(1);
    hx_rnode *leaf, *last;
    hx_radix_insert(t, a, 16, &leaf);
    assert_int_equal(hx_radix_match(t, a, 9, &last), 9);
    assert_int_equal(g_splits, 1);
    assert_int_equal(last->start + last->len, 9);
    assert_ptr_equal(leaf->parent, last);
    assert_int_equal(leaf->start, 9);
    /* split_at makes a boundary without a match */
    hx_rnode *u = hx_radix_split_at(t, leaf, 12);
    assert_int_equal(u->start, 9);
    assert_int_equal(u->len, 3);
    assert_int_equal(hx_radix_tokens(t), 16);
    assert_int_equal(hx_radix_nodes(t), 3);
    hx_rnode *path[8];
    assert_int_equal(hx_radix_path(leaf, path, 8), 3);
    assert_ptr_equal(path[0], last);
    assert_ptr_equal(path[2], leaf);
    hx_radix_free(t);
}

static void eviction_removes_the_least_recently_used_unlocked_leaves_first(void **state) {
    (void)state;
    int32_t a[8], b[8], c[8];
    seq(a, 8, 100);
    seq(b, 8, 200);
    seq(c, 8, 300);
    hx_radix *t = tree(1);
    hx_rnode *la, *lb, *lc, *last;
    hx_radix_insert(t, a, 8, &la);
    hx_radix_insert(t, b, 8, &lb);
    hx_radix_insert(t, c, 8, &lc);
    hx_radix_match(t, a, 8, &last);  /* a is now the most recent; b the least */
    hx_radix_lock(t, lc);           /* c is in use */
    assert_int_equal(hx_radix_evict(t, 1), 8);
    assert_int_equal(hx_radix_match(t, b, 8, &last), 0);
    assert_int_equal(hx_radix_match(t, a, 8, &last), 8);
    /* c is locked: evicting everything leaves it */
    assert_int_equal(hx_radix_evict(t, 100), 8);
    assert_int_equal(hx_radix_match(t, c, 8, &last), 8);
    assert_int_equal(hx_radix_tokens(t), 8);
    hx_radix_unlock(t, lc);
    assert_int_equal(hx_radix_evict(t, 100), 8);
    assert_int_equal(hx_radix_tokens(t), 0);
    assert_int_equal(hx_radix_evicted(t), 24);
    assert_int_equal(g_drops, 3);
    hx_radix_free(t);
}

static void a_parent_left_without_children_becomes_a_leaf_to_evict(void **state) {
    (void)state;
    int32_t a[12], b[12];
    seq(a, 12, 1);
    memcpy(b, a, sizeof b);
    for (int32_t i = 4; i < 12; i++) b[i] = 500 + i;
    hx_radix *t = tree(1);
    hx_rnode *la, *lb;
    hx_radix_insert(t, a, 12, &la);
    hx_radix_insert(t, b, 12, &lb);  /* [0,4) -> {a [4,12), b [4,12)} */
    assert_int_equal(hx_radix_nodes(t), 3);
    /* an internal node is never a victim while it has children: the two
     * leaves go first, then the shared prefix */
    assert_int_equal(hx_radix_evict(t, 9), 16);
    assert_int_equal(hx_radix_nodes(t), 1);
    assert_int_equal(hx_radix_evict(t, 1), 4);
    assert_int_equal(hx_radix_nodes(t), 0);
    assert_int_equal(g_dropped_tokens, 20);
    hx_radix_free(t);
}

static void freeing_the_tree_drops_every_node(void **state) {
    (void)state;
    int32_t a[10], b[10];
    seq(a, 10, 1);
    seq(b, 10, 50);
    hx_radix *t = tree(2);
    hx_rnode *l;
    hx_radix_insert(t, a, 10, &l);
    hx_radix_insert(t, b, 10, &l);
    hx_radix_free(t);
    assert_int_equal(g_drops, 2);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(matches_and_insertions_are_rounded_down_to_whole_pages),
        cmocka_unit_test(a_divergent_insertion_splits_the_edge_at_the_branch_point),
        cmocka_unit_test(a_match_that_ends_inside_an_edge_splits_it_there),
        cmocka_unit_test(eviction_removes_the_least_recently_used_unlocked_leaves_first),
        cmocka_unit_test(a_parent_left_without_children_becomes_a_leaf_to_evict),
        cmocka_unit_test(freeing_the_tree_drops_every_node),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
