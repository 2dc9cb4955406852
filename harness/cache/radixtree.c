/*
 * harness/cache/radixtree.c: the radix tree (see radixtree.h).
 */
#include "radixtree.h"

#include <stdlib.h>
#include <string.h>

#include "blockpool.h"
#include "status.h"

struct hx_radix {
    hx_rnode          root;
    int32_t           page;
    uint64_t          clock;
    int64_t           tokens, evicted;
    int32_t           nodes;
    hx_evict         *ev;        /* eviction order over the nodes; candidates: unlocked leaves */
    int32_t          *free_eid;  /* entry ids of removed nodes, for reuse */
    int32_t           n_free_eid, cap_free_eid, next_eid;
    hx_rnode        **by_eid;    /* (cap_by_eid) the node of each entry id in use */
    int32_t           cap_by_eid;
    hx_radix_split_fn on_split;
    hx_radix_drop_fn  on_drop;
    void             *ud;
};

hx_radix *hx_radix_new_evict(int32_t page, hx_evict_kind kind, int64_t capacity, hx_radix_split_fn on_split,
                             hx_radix_drop_fn on_drop, void *ud) {
    if (page < 1) return NULL;
    hx_radix *t = calloc(1, sizeof *t);
    if (!t || !(t->ev = hx_evict_new(kind, capacity))) { free(t); return NULL; }
    t->page = page;
    t->on_split = on_split;
    t->on_drop = on_drop;
    t->ud = ud;
    t->root.lock = 1;  /* never evicted */
    t->root.eid = -1;
    return t;
}

hx_radix *hx_radix_new(int32_t page, hx_radix_split_fn on_split, hx_radix_drop_fn on_drop, void *ud) {
    return hx_radix_new_evict(page, HX_EVICT_LRU, 0, on_split, on_drop, ud);
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
    hx_evict_free(t->ev);
    free(t->free_eid);
    free(t->by_eid);
    free(t);
}

hx_rnode *hx_radix_root(hx_radix *t) { return &t->root; }
int32_t hx_radix_page(const hx_radix *t) { return t->page; }
int64_t hx_radix_tokens(const hx_radix *t) { return t->tokens; }
int32_t hx_radix_nodes(const hx_radix *t) { return t->nodes; }
int64_t hx_radix_evicted(const hx_radix *t) { return t->evicted; }

// ----------------------------------------------------------------------------
// Entries of the eviction order

/* An entry id for node n (-1 on OOM). */
static int32_t take_eid(hx_radix *t, hx_rnode *n) {
    int32_t eid = t->n_free_eid ? t->free_eid[--t->n_free_eid] : t->next_eid;
    if (eid >= t->cap_by_eid) {
        int32_t cap = t->cap_by_eid ? 2 * t->cap_by_eid : 256;
        hx_rnode **v = realloc(t->by_eid, sizeof *v * (size_t)cap);
        if (!v) {
            if (eid < t->next_eid) t->n_free_eid++;
            return -1;
        }
        t->by_eid = v;
        t->cap_by_eid = cap;
    }
    if (eid == t->next_eid) t->next_eid++;
    t->by_eid[eid] = n;
    return eid;
}

static void give_eid(hx_radix *t, int32_t eid) {
    if (eid < 0) return;
    t->by_eid[eid] = NULL;
    if (t->n_free_eid == t->cap_free_eid) {
        int32_t cap = t->cap_free_eid ? 2 * t->cap_free_eid : 256;
        int32_t *v = realloc(t->free_eid, sizeof *v * (size_t)cap);
        if (!v) return;  /* the id is not reused: harmless */
        t->free_eid = v;
        t->cap_free_eid = cap;
    }
    t->free_eid[t->n_free_eid++] = eid;
}

/* A node is a candidate when it is an unlocked leaf (with the planted fault,
 * any unlocked node: its children would outlive it). */
static void update_candidate(hx_radix *t, hx_rnode *n) {
    if (n == &t->root) return;
    bool leafish = n->n_kids == 0 || (hx_cache_faults & HX_FAULT_ORPHAN_EVICT);
    hx_evict_candidate(t->ev, n->eid, n->lock == 0 && leafish);
}

/* The identity of a path: ident chained over key's len / page pages. */
static uint64_t chain(const hx_radix *t, uint64_t ident, const int32_t *key, int32_t len) {
    for (int32_t i = 0; i + t->page <= len; i += t->page) ident = hx_block_hash(ident, key + i, t->page, NULL, 0);
    return ident;
}

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
    int32_t eid = u ? take_eid(t, u) : -1;
    uint64_t ident = chain(t, n->parent->ident, n->key, k);
    if (!u || !uk || !rest || !kids || eid < 0 || hx_evict_split(t->ev, eid, n->eid, k, ident) != ENG_OK) {
        free(u); free(uk); free(rest); free(kids);
        give_eid(t, eid);
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
    u->ident = ident;
    u->eid = eid;
    u->kids = kids;
    u->cap_kids = 2;
    u->kids[u->n_kids++] = n;
    free(n->key);
    n->key = rest;
    n->len -= k;
    n->start += k;
    n->parent = u;
    t->nodes++;
    update_candidate(t, u);
    update_candidate(t, n);
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

static void touch(hx_radix *t, hx_rnode *n, uint64_t stamp, bool hit) {
    n->last_access = stamp;
    if (n == &t->root) return;
    hx_evict_use(t->ev, n->eid, stamp);
    if (hit) hx_evict_hit(t->ev, n->eid);
}

/* Walks key[0, n) from the root, splitting where it ends inside an edge;
 * touches the path (and counts a hit on it when hit). Returns the length
 * walked, *last the node ending there. */
static int32_t walk(hx_radix *t, const int32_t *key, int32_t n, bool hit, hx_rnode **last) {
    uint64_t stamp = ++t->clock;
    hx_rnode *node = &t->root;
    int32_t pos = 0;
    touch(t, node, stamp, false);
    while (n - pos >= t->page) {
        hx_rnode *kid = find_kid(t, node, key + pos);
        if (!kid) break;
        int32_t lim = kid->len < n - pos ? kid->len : n - pos;
        int32_t l = paged_match(t->page, kid->key, key + pos, lim);
        touch(t, kid, stamp, hit);
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
    return walk(t, key, n, true, last);
}

int32_t hx_radix_peek(const hx_radix *t, const int32_t *key, int32_t n) {
    n = n / t->page * t->page;
    const hx_rnode *node = &t->root;
    int32_t pos = 0;
    while (n - pos >= t->page) {
        const hx_rnode *kid = find_kid(t, node, key + pos);
        if (!kid) break;
        int32_t lim = kid->len < n - pos ? kid->len : n - pos;
        int32_t l = paged_match(t->page, kid->key, key + pos, lim);
        pos += l;
        if (l < kid->len) break;
        node = kid;
    }
    return pos;
}

int32_t hx_radix_insert(hx_radix *t, const int32_t *key, int32_t n, hx_rnode **leaf) {
    n = n / t->page * t->page;
    hx_rnode *node;
    int32_t pos = walk(t, key, n, false, &node);
    if (pos < 0) return -1;
    if (pos < n) {
        hx_rnode *l = calloc(1, sizeof *l);
        int32_t *k = malloc(sizeof(int32_t) * (size_t)(n - pos));
        int32_t eid = l ? take_eid(t, l) : -1;
        uint64_t ident = chain(t, node->ident, key + pos, n - pos);
        if (!l || !k || eid < 0 || hx_evict_add(t->ev, eid, node->last_access, ident, n - pos) != ENG_OK) {
            free(l); free(k);
            give_eid(t, eid);
            return -1;
        }
        if (add_kid(node, l) != ENG_OK) {
            hx_evict_drop(t->ev, eid, false);
            give_eid(t, eid);
            free(l); free(k);
            return -1;
        }
        memcpy(k, key + pos, sizeof(int32_t) * (size_t)(n - pos));
        l->key = k;
        l->len = n - pos;
        l->start = pos;
        l->last_access = node->last_access;
        l->ident = ident;
        l->eid = eid;
        t->tokens += l->len;
        t->nodes++;
        update_candidate(t, l);
        update_candidate(t, node);
        node = l;
    }
    *leaf = node;
    return pos;
}

// ----------------------------------------------------------------------------
// Locks and eviction

void hx_radix_lock(hx_radix *t, hx_rnode *node) {
    for (; node && node != &t->root; node = node->parent)
        if (node->lock++ == 0) update_candidate(t, node);
}

void hx_radix_unlock(hx_radix *t, hx_rnode *node) {
    for (; node && node != &t->root; node = node->parent) {
        ENG_ASSERT(node->lock > 0);
        if (--node->lock == 0) update_candidate(t, node);
    }
}

static void remove_node(hx_radix *t, hx_rnode *victim) {
    hx_rnode *parent = victim->parent;
    if (t->on_drop) t->on_drop(t->ud, victim);
    remove_kid(parent, victim);
    for (int32_t i = 0; i < victim->n_kids; i++)  /* only under HX_FAULT_ORPHAN_EVICT: kids outlive it */
        if (add_kid(parent, victim->kids[i]) != ENG_OK) break;
    hx_evict_drop(t->ev, victim->eid, true);
    give_eid(t, victim->eid);
    t->tokens -= victim->len;
    t->nodes--;
    free(victim->key);
    free(victim->kids);
    free(victim);
    update_candidate(t, parent);
}

int64_t hx_radix_evict(hx_radix *t, int64_t n_tokens) {
    int64_t gone = 0;
    while (gone < n_tokens) {
        int32_t eid = hx_evict_victim(t->ev);
        if (eid < 0) break;
        hx_rnode *victim = t->by_eid[eid];
        ENG_ASSERT(victim != NULL);
        gone += victim->len;
        remove_node(t, victim);
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

// ----------------------------------------------------------------------------
// Invariants

typedef struct check_ctx {
    hx_radix *t;
    int64_t   tokens;
    int32_t   nodes;
    char     *err;
    size_t    errlen;
    int       rc;
} check_ctx;

static void check_node(void *ud, hx_rnode *n) {
    check_ctx *c = ud;
    if (c->rc != ENG_OK) return;
    hx_radix *t = c->t;
    hx_rnode *p = n->parent;
    c->tokens += n->len;
    c->nodes++;
    bool under = false;
    for (int32_t i = 0; p && i < p->n_kids; i++) under |= p->kids[i] == n;
    if (!p || !under) {
        eng_errf(c->err, c->errlen, "radix tree: node [%d, %d) is not among its parent's children", n->start,
                 n->start + n->len);
    } else if (n->start != p->start + p->len) {
        eng_errf(c->err, c->errlen, "radix tree: node [%d, %d) hangs under [%d, %d): a child reachable past a "
                 "gap (its parent's tokens are gone)", n->start, n->start + n->len, p->start, p->start + p->len);
    } else if (n->len <= 0 || n->len % t->page) {
        eng_errf(c->err, c->errlen, "radix tree: node [%d, %d) is not whole pages of %d", n->start,
                 n->start + n->len, t->page);
    } else if (n->ident != chain(t, p->ident, n->key, n->len)) {
        eng_errf(c->err, c->errlen, "radix tree: node [%d, %d) carries another path's identity", n->start,
                 n->start + n->len);
    } else if (hx_evict_is_candidate(t->ev, n->eid) != (n->lock == 0 && n->n_kids == 0)) {
        eng_errf(c->err, c->errlen, "radix tree: node [%d, %d) (lock %d, %d children) %s a candidate for eviction",
                 n->start, n->start + n->len, n->lock, n->n_kids, n->n_kids ? "is" : "is not");
    } else {
        for (int32_t i = 0; i < p->n_kids; i++)
            if (p->kids[i] != n && !memcmp(p->kids[i]->key, n->key, sizeof(int32_t) * (size_t)t->page)) {
                eng_errf(c->err, c->errlen, "radix tree: two children of [%d, %d) share their first page",
                         p->start, p->start + p->len);
                c->rc = ENG_ERR_FORMAT;
                return;
            }
        return;
    }
    c->rc = ENG_ERR_FORMAT;
}

int hx_radix_check(hx_radix *t, char *err, size_t errlen) {
    check_ctx c = {t, 0, 0, err, errlen, ENG_OK};
    each(&t->root, check_node, &c);
    if (c.rc != ENG_OK) return c.rc;
    if (c.tokens != t->tokens || c.nodes != t->nodes || c.nodes != hx_evict_entries(t->ev)) {
        eng_errf(err, errlen, "radix tree: %d nodes holding %lld tokens, counted %d and %lld, ordered %d", c.nodes,
                 (long long)c.tokens, t->nodes, (long long)t->tokens, hx_evict_entries(t->ev));
        return ENG_ERR_FORMAT;
    }
    return ENG_OK;
}
