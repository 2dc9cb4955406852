/*
 * harness/cache/radixtree.c: the radix tree (see radixtree.h).
 */
#include "radixtree.h"

#include <stdlib.h>
#include <string.h>

#include "status.h"

struct hx_radix {
    hx_rnode          root;
    int32_t           page;
    uint64_t          clock;
    int64_t           tokens, evicted;
    int32_t           nodes;
    hx_radix_split_fn on_split;
    hx_radix_drop_fn  on_drop;
    void             *ud;
};

hx_radix *hx_radix_new(int32_t page, hx_radix_split_fn on_split, hx_radix_drop_fn on_drop, void *ud) {
    if (page < 1) return NULL;
    hx_radix *t = calloc(1, sizeof *t);
    if (!t) return NULL;
    t->page = page;
    t->on_split = on_split;
    t->on_drop = on_drop;
    t->ud = ud;
    t->root.lock = 1;  /* never evicted */
    return t;
}

static void free_subtree(hx_radix *t, hx_rnode *n) {
    for (int32_t i = 0; i < n->n_kids; i++) free_subtree(t, n->kids[i]);
    if (n != &t->root) {
        if (t->on_drop) t->on_drop(t->ud, n);
        free(n->key);
        free(n->kids);
        free(n);
    }
}

void hx_radix_free(hx_radix *t) {
    if (!t) return;
    free_subtree(t, &t->root);
    free(t->root.kids);
    free(t);
}

hx_rnode *hx_radix_root(hx_radix *t) { return &t->root; }
int32_t hx_radix_page(const hx_radix *t) { return t->page; }
int64_t hx_radix_tokens(const hx_radix *t) { return t->tokens; }
int32_t hx_radix_nodes(const hx_radix *t) { return t->nodes; }
int64_t hx_radix_evicted(const hx_radix *t) { return t->evicted; }

// ----------------------------------------------------------------------------
// Children

static int add_kid(hx_rnode *p, hx_rnode *k) {
    if (p->n_kids == p->cap_kids) {
        int32_t cap = p->cap_kids ? 2 * p->cap_kids : 2;
        hx_rnode **v = realloc(p->kids, sizeof *v * (size_t)cap);
        if (!v) return ENG_ERR_NOMEM;
        p->kids = v;
        p->cap_kids = cap;
    }
    p->kids[p->n_kids++] = k;
    k->parent = p;
    return ENG_OK;
}

static void remove_kid(hx_rnode *p, hx_rnode *k) {
    for (int32_t i = 0; i < p->n_kids; i++)
        if (p->kids[i] == k) {
            memmove(p->kids + i, p->kids + i + 1, sizeof *p->kids * (size_t)(p->n_kids - i - 1));
            p->n_kids--;
            return;
        }
    ENG_ASSERT(0);
}

/* The child whose first page is key's first page (key holds >= page tokens). */
static hx_rnode *find_kid(const hx_radix *t, const hx_rnode *n, const int32_t *key) {
    for (int32_t i = 0; i < n->n_kids; i++)
        if (!memcmp(n->kids[i]->key, key, sizeof(int32_t) * (size_t)t->page)) return n->kids[i];
    return NULL;
}

/* Tokens of a and b (at most n each) equal in whole pages from the start. */
static int32_t paged_match(int32_t page, const int32_t *a, const int32_t *b, int32_t n) {
    int32_t i = 0;
    while (i + page <= n && !memcmp(a + i, b + i, sizeof(int32_t) * (size_t)page)) i += page;
    return i;
}

// ----------------------------------------------------------------------------
// Splits

/* Splits n after its first k tokens (0 < k < len): a new upper node takes
 * them, n keeps the rest. Returns the upper node, NULL on OOM. */
static hx_rnode *split(hx_radix *t, hx_rnode *n, int32_t k) {
    ENG_ASSERT(k > 0 && k < n->len);
    hx_rnode *u = calloc(1, sizeof *u);
    int32_t *uk = malloc(sizeof(int32_t) * (size_t)k);
    int32_t *rest = malloc(sizeof(int32_t) * (size_t)(n->len - k));
    hx_rnode **kids = malloc(sizeof *kids * 2);
    if (!u || !uk || !rest || !kids) {
        free(u); free(uk); free(rest); free(kids);
        return NULL;
    }
    memcpy(uk, n->key, sizeof(int32_t) * (size_t)k);
    memcpy(rest, n->key + k, sizeof(int32_t) * (size_t)(n->len - k));
    hx_rnode *p = n->parent;
    for (int32_t i = 0; i < p->n_kids; i++)
        if (p->kids[i] == n) p->kids[i] = u;
    u->parent = p;
    u->key = uk;
    u->len = k;
    u->start = n->start;
    u->last_access = n->last_access;
    u->lock = n->lock;
    u->kids = kids;
    u->cap_kids = 2;
    u->kids[u->n_kids++] = n;
    free(n->key);
    n->key = rest;
    n->len -= k;
    n->start += k;
    n->parent = u;
    t->nodes++;
    if (t->on_split) t->on_split(t->ud, u, n);
    return u;
}

hx_rnode *hx_radix_split_at(hx_radix *t, hx_rnode *node, int32_t pos) {
    if (pos == node->start + node->len) return node;
    ENG_ASSERT(node != &t->root && pos > node->start && pos < node->start + node->len);
    return split(t, node, pos - node->start);
}

// ----------------------------------------------------------------------------
// Match and insert

/* Walks key[0, n) from the root, splitting where it ends inside an edge;
 * touches the path. Returns the length walked, *last the node ending there. */
static int32_t walk(hx_radix *t, const int32_t *key, int32_t n, hx_rnode **last) {
    uint64_t stamp = ++t->clock;
    hx_rnode *node = &t->root;
    int32_t pos = 0;
    node->last_access = stamp;
    while (n - pos >= t->page) {
        hx_rnode *kid = find_kid(t, node, key + pos);
        if (!kid) break;
        int32_t lim = kid->len < n - pos ? kid->len : n - pos;
        int32_t l = paged_match(t->page, kid->key, key + pos, lim);
        kid->last_access = stamp;
        if (l < kid->len) {
            hx_rnode *u = split(t, kid, l);
            if (!u) { *last = node; return -1; }
            node = u;
            pos += l;
            break;
        }
        node = kid;
        pos += l;
    }
    *last = node;
    return pos;
}

int32_t hx_radix_match(hx_radix *t, const int32_t *key, int32_t n, hx_rnode **last) {
    n = n / t->page * t->page;
    return walk(t, key, n, last);
}

int32_t hx_radix_insert(hx_radix *t, const int32_t *key, int32_t n, hx_rnode **leaf) {
    n = n / t->page * t->page;
    hx_rnode *node;
    int32_t pos = walk(t, key, n, &node);
    if (pos < 0) return -1;
    if (pos < n) {
        hx_rnode *l = calloc(1, sizeof *l);
        int32_t *k = malloc(sizeof(int32_t) * (size_t)(n - pos));
        if (!l || !k || add_kid(node, l) != ENG_OK) {
            free(l); free(k);
            return -1;
        }
        memcpy(k, key + pos, sizeof(int32_t) * (size_t)(n - pos));
        l->key = k;
        l->len = n - pos;
        l->start = pos;
        l->last_access = node->last_access;
        t->tokens += l->len;
        t->nodes++;
        node = l;
    }
    *leaf = node;
    return pos;
}

// ----------------------------------------------------------------------------
// Locks and eviction

void hx_radix_lock(hx_radix *t, hx_rnode *node) {
    for (; node && node != &t->root; node = node->parent) node->lock++;
}

void hx_radix_unlock(hx_radix *t, hx_rnode *node) {
    for (; node && node != &t->root; node = node->parent) {
        ENG_ASSERT(node->lock > 0);
        node->lock--;
    }
}

/* The unlocked leaf touched least recently (first in a depth-first walk on a tie). */
static void lru_leaf(hx_rnode *n, hx_rnode **best) {
    if (n->n_kids == 0) {
        if (n->lock == 0 && (!*best || n->last_access < (*best)->last_access)) *best = n;
        return;
    }
    for (int32_t i = 0; i < n->n_kids; i++) lru_leaf(n->kids[i], best);
}

int64_t hx_radix_evict(hx_radix *t, int64_t n_tokens) {
    int64_t gone = 0;
    while (gone < n_tokens) {
        hx_rnode *victim = NULL;
        for (int32_t i = 0; i < t->root.n_kids; i++) lru_leaf(t->root.kids[i], &victim);
        if (!victim) break;
        if (t->on_drop) t->on_drop(t->ud, victim);
        remove_kid(victim->parent, victim);
        gone += victim->len;
        t->tokens -= victim->len;
        t->nodes--;
        free(victim->key);
        free(victim->kids);
        free(victim);
    }
    t->evicted += gone;
    return gone;
}

int32_t hx_radix_path(hx_rnode *node, hx_rnode **out, int32_t cap) {
    int32_t n = 0;
    for (hx_rnode *x = node; x && x->parent; x = x->parent) n++;
    ENG_ASSERT(n <= cap);
    int32_t i = n;
    for (hx_rnode *x = node; x && x->parent; x = x->parent) out[--i] = x;
    return n;
}

static void each(hx_rnode *n, void (*fn)(void *, hx_rnode *), void *ud) {
    for (int32_t i = 0; i < n->n_kids; i++) {
        fn(ud, n->kids[i]);
        each(n->kids[i], fn, ud);
    }
}

void hx_radix_each(hx_radix *t, void (*fn)(void *ud, hx_rnode *n), void *ud) { each(&t->root, fn, ud); }
