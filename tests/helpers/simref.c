/*
 * tests/helpers/simref.c: the brute-force reference (see simref.h).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdlib.h>
#include <string.h>

#include "simref.h"

// ============================================================================
// The reference: eviction orders over entries (evict.h's rules, by scanning)

enum { RQ_NONE = 0, RQ_S = 1, RQ_M = 2 };

typedef struct rmeta {
    bool     live, cand;
    uint64_t last, created, seq;
    uint32_t hits;
    int      freq, queue;
    int64_t  size;
    int64_t *ident;      /* the content that names it (a prefix), owned */
    int32_t  ident_len;  /* in elements */
} rmeta;

typedef struct rghost {
    int64_t *ident;
    int32_t  len;
    int64_t  size;
    bool     valid;
} rghost;

typedef struct rorder {
    hx_evict_kind kind;
    int64_t       cap;
    rmeta        *m;
    int32_t       n_m;
    uint64_t      seq;
    int32_t      *q[3];  /* q[RQ_S], q[RQ_M]: entry ids, index 0 the head (newest) */
    int32_t       qn[3];
    int64_t       qsize[3];
    rghost       *g;     /* index 0 the oldest */
    int32_t       n_g;
    int64_t       g_size;
} rorder;

static void *xcalloc(size_t n, size_t s) {
    void *p = calloc(n ? n : 1, s);
    assert_non_null(p);
    return p;
}

static void ro_init(rorder *o, hx_evict_kind kind, int64_t cap) {
    memset(o, 0, sizeof *o);
    o->kind = kind;
    o->cap = cap;
}

static void ro_free(rorder *o) {
    for (int32_t i = 0; i < o->n_m; i++) free(o->m[i].ident);
    for (int32_t i = 0; i < o->n_g; i++) free(o->g[i].ident);
    free(o->m);
    free(o->g);
    free(o->q[1]);
    free(o->q[2]);
}

static rmeta *ro_at(rorder *o, int32_t id) {
    if (id >= o->n_m) {
        int32_t n = o->n_m ? o->n_m : 64;
        while (n <= id) n *= 2;
        o->m = realloc(o->m, sizeof *o->m * (size_t)n);
        assert_non_null(o->m);
        memset(o->m + o->n_m, 0, sizeof *o->m * (size_t)(n - o->n_m));
        for (int q = 1; q < 3; q++) {
            o->q[q] = realloc(o->q[q], sizeof(int32_t) * (size_t)n);
            assert_non_null(o->q[q]);
        }
        o->n_m = n;
    }
    return &o->m[id];
}

static int32_t q_pos(const rorder *o, int q, int32_t id) {
    for (int32_t i = 0; i < o->qn[q]; i++)
        if (o->q[q][i] == id) return i;
    return -1;
}

static void q_remove(rorder *o, int32_t id) {
    rmeta *x = &o->m[id];
    if (!x->queue) return;
    int q = x->queue;
    int32_t p = q_pos(o, q, id);
    assert_true(p >= 0);
    memmove(o->q[q] + p, o->q[q] + p + 1, sizeof(int32_t) * (size_t)(o->qn[q] - p - 1));
    o->qn[q]--;
    o->qsize[q] -= x->size;
    x->queue = RQ_NONE;
}

static void q_insert(rorder *o, int q, int32_t at, int32_t id) {
    memmove(o->q[q] + at + 1, o->q[q] + at, sizeof(int32_t) * (size_t)(o->qn[q] - at));
    o->q[q][at] = id;
    o->qn[q]++;
    o->qsize[q] += o->m[id].size;
    o->m[id].queue = q;
}

static bool same_ident(const int64_t *a, int32_t na, const int64_t *b, int32_t nb) {
    return na == nb && (na == 0 || !memcmp(a, b, sizeof(int64_t) * (size_t)na));
}

/* The ghost holds ident when its latest entry with that content is valid. */
static int32_t ghost_find(const rorder *o, const int64_t *id, int32_t n) {
    for (int32_t i = o->n_g - 1; i >= 0; i--)
        if (same_ident(o->g[i].ident, o->g[i].len, id, n)) return o->g[i].valid ? i : -1;
    return -1;
}

static void ghost_pop(rorder *o) {
    if (o->g[0].valid) o->g_size -= o->g[0].size;
    free(o->g[0].ident);
    memmove(o->g, o->g + 1, sizeof *o->g * (size_t)(o->n_g - 1));
    o->n_g--;
}

static void ghost_add(rorder *o, const rmeta *x) {
    int64_t limit = o->cap * 90 / 100;
    if (!x->ident_len || x->size > limit) return;
    o->g = realloc(o->g, sizeof *o->g * (size_t)(o->n_g + 1));
    assert_non_null(o->g);
    int64_t *c = xcalloc((size_t)x->ident_len, sizeof *c);
    memcpy(c, x->ident, sizeof *c * (size_t)x->ident_len);
    o->g[o->n_g++] = (rghost){c, x->ident_len, x->size, true};
    o->g_size += x->size;
    while (o->g_size > limit) ghost_pop(o);
}

/* A new entry: ident is copied. */
static void ro_add(rorder *o, int32_t id, uint64_t stamp, const int64_t *ident, int32_t ident_len, int64_t size) {
    rmeta *x = ro_at(o, id);
    assert_false(x->live);
    free(x->ident);
    *x = (rmeta){.live = true, .last = stamp, .created = stamp, .seq = ++o->seq, .size = size};
    x->ident = xcalloc((size_t)ident_len, sizeof *x->ident);
    memcpy(x->ident, ident, sizeof *x->ident * (size_t)ident_len);
    x->ident_len = ident_len;
    if (o->kind == HX_EVICT_S3FIFO) {
        int32_t g = ghost_find(o, ident, ident_len);
        if (g >= 0) {
            o->g[g].valid = false;
            o->g_size -= o->g[g].size;
        }
        q_insert(o, g >= 0 ? RQ_M : RQ_S, 0, id);
    }
}

static void ro_cand(rorder *o, int32_t id, bool on) { o->m[id].cand = on; }
static void ro_hit(rorder *o, int32_t id) {
    o->m[id].hits++;
    if (o->m[id].freq < 3) o->m[id].freq++;
}
static void ro_use(rorder *o, int32_t id, uint64_t stamp) { o->m[id].last = stamp; }

static void ro_drop(rorder *o, int32_t id, bool evicted) {
    rmeta *x = &o->m[id];
    assert_true(x->live);
    if (o->kind == HX_EVICT_S3FIFO) {
        if (evicted && x->queue == RQ_S) ghost_add(o, x);
        q_remove(o, id);
    }
    x->live = x->cand = false;
}

/* upper, new, split off lower: lower's figures, its own seq, after lower in lower's queue. */
static void ro_split(rorder *o, int32_t upper, int32_t lower, int64_t size, const int64_t *ident, int32_t ident_len) {
    ro_at(o, upper);
    rmeta *l = &o->m[lower], *u = &o->m[upper];
    free(u->ident);
    *u = *l;
    u->seq = ++o->seq;
    u->size = size;
    u->cand = false;
    u->queue = RQ_NONE;
    u->ident = xcalloc((size_t)ident_len, sizeof *u->ident);
    memcpy(u->ident, ident, sizeof *u->ident * (size_t)ident_len);
    u->ident_len = ident_len;
    l->cand = false;
    if (l->queue) {
        int q = l->queue;
        o->qsize[q] -= size;
        l->size -= size;
        q_insert(o, q, q_pos(o, q, lower) + 1, upper);
    } else {
        l->size -= size;
    }
}

static bool ro_less(const rorder *o, const rmeta *x, const rmeta *y) {
    if (o->kind == HX_EVICT_FIFO) return x->created != y->created ? x->created < y->created : x->seq < y->seq;
    if (o->kind == HX_EVICT_LFU && x->hits != y->hits) return x->hits < y->hits;
    return x->last != y->last ? x->last < y->last : x->seq < y->seq;
}

static int32_t ro_victim(rorder *o) {
    int32_t cands = 0;
    for (int32_t i = 0; i < o->n_m; i++) cands += o->m[i].live && o->m[i].cand;
    if (o->kind != HX_EVICT_S3FIFO) {
        int32_t best = -1;
        for (int32_t i = 0; i < o->n_m; i++)
            if (o->m[i].live && o->m[i].cand && (best < 0 || ro_less(o, &o->m[i], &o->m[best]))) best = i;
        return best;
    }
    int64_t small = o->cap * 10 / 100;
    bool s_dry = false, m_dry = false;
    int32_t sk_s = 0, sk_m = 0;
    while (cands > 0) {
        bool use_s = !s_dry && o->qn[RQ_S] > 0 && (o->qsize[RQ_S] >= small || m_dry || o->qn[RQ_M] == 0);
        if (!use_s && (m_dry || o->qn[RQ_M] == 0)) return -1;
        int q = use_s ? RQ_S : RQ_M;
        int32_t t = o->q[q][o->qn[q] - 1];
        rmeta *x = &o->m[t];
        if (!x->cand) {
            q_remove(o, t);
            q_insert(o, q, 0, t);
            if (use_s && ++sk_s >= o->qn[RQ_S]) s_dry = true;
            if (!use_s && ++sk_m >= o->qn[RQ_M]) m_dry = true;
            continue;
        }
        if (use_s) {
            if (x->freq >= 2) {
                q_remove(o, t);
                x->freq = 0;
                q_insert(o, RQ_M, 0, t);
                sk_m = 0;
                m_dry = false;
                continue;
            }
            return t;
        }
        if (x->freq > 0) {
            x->freq--;
            q_remove(o, t);
            q_insert(o, RQ_M, 0, t);
            sk_m = 0;
            continue;
        }
        return t;
    }
    return -1;
}

// ============================================================================
// The reference caches. A request is its policy blocks, each g trace ids.


static bool sym_eq(const int64_t *a, const int64_t *b, int32_t nsym, int32_t g) {
    return !memcmp(a, b, sizeof(int64_t) * (size_t)nsym * (size_t)g);
}

static int32_t sym_lcp(const int64_t *a, int32_t na, const int64_t *b, int32_t nb, int32_t g) {
    int32_t i = 0;
    while (i < na && i < nb && sym_eq(a + (size_t)i * g, b + (size_t)i * g, 1, g)) i++;
    return i;
}


/* ---- block-hash: vLLM's pool ---- */

typedef struct rblk {
    bool     used, cached, free_;
    int64_t *prefix;   /* its whole prefix: (len * g) ids */
    int32_t  len;
    uint64_t stamp;
} rblk;

typedef struct rbh {
    int32_t  cap, g;   /* blocks, 0: unbounded */
    rblk    *b;
    int32_t  n_b, n_alloc;
    uint64_t clock;
    int64_t  evictions;
    rorder   o;
} rbh;

static void rbh_init(rbh *c, hx_evict_kind k, int32_t cap, int32_t g) {
    memset(c, 0, sizeof *c);
    c->cap = cap;
    c->g = g;
    ro_init(&c->o, k, cap);
}

static void rbh_free(rbh *c) {
    for (int32_t i = 0; i < c->n_b; i++) free(c->b[i].prefix);
    free(c->b);
    ro_free(&c->o);
}

/* The oldest cached block holding sym[0, d + 1). */
static int32_t rbh_find(rbh *c, const int64_t *sym, int32_t d) {
    int32_t best = -1;
    for (int32_t i = 0; i < c->n_alloc; i++)
        if (c->b[i].cached && c->b[i].len == d + 1 && sym_eq(c->b[i].prefix, sym, d + 1, c->g) &&
            (best < 0 || c->o.m[i].seq < c->o.m[best].seq))
            best = i;
    return best;
}

static int32_t rbh_alloc(rbh *c) {
    if (c->cap == 0 || c->n_alloc < c->cap) {
        if (c->n_alloc == c->n_b) {
            int32_t n = c->n_b ? 2 * c->n_b : 64;
            c->b = realloc(c->b, sizeof *c->b * (size_t)n);
            assert_non_null(c->b);
            memset(c->b + c->n_b, 0, sizeof *c->b * (size_t)(n - c->n_b));
            c->n_b = n;
        }
        c->b[c->n_alloc].used = true;
        return c->n_alloc++;
    }
    int32_t v = ro_victim(&c->o);
    if (v < 0) return -1;
    ro_drop(&c->o, v, true);
    c->b[v].cached = false;
    c->evictions++;
    return v;
}

static int32_t rbh_peek(rbh *c, const rreq *r) {
    int32_t k = 0;
    while (k < r->n && rbh_find(c, r->sym, k) >= 0) k++;
    return k;
}

static rres rbh_access(rbh *c, const rreq *r) {
    int64_t ev0 = c->evictions;
    int32_t *ids = xcalloc((size_t)r->n, sizeof *ids), k = 0, n = 0;
    for (int32_t id; k < r->n && (id = rbh_find(c, r->sym, k)) >= 0; k++) ids[n++] = id;
    for (int32_t i = 0; i < k; i++) {
        c->b[ids[i]].free_ = false;
        ro_cand(&c->o, ids[i], false);
        ro_hit(&c->o, ids[i]);
    }
    for (int32_t i = k; i < r->n; i++) {
        int32_t id = rbh_alloc(c);
        if (id < 0) break;
        rblk *b = &c->b[id];
        b->free_ = false;
        free(b->prefix);
        b->prefix = xcalloc((size_t)(i + 1) * (size_t)c->g, sizeof *b->prefix);
        memcpy(b->prefix, r->sym, sizeof *b->prefix * (size_t)(i + 1) * (size_t)c->g);
        b->len = i + 1;
        b->cached = true;
        ro_add(&c->o, id, ++c->clock, b->prefix, (i + 1) * c->g, 1);
        ids[n++] = id;
    }
    for (int32_t i = n - 1; i >= 0; i--) {
        rblk *b = &c->b[ids[i]];
        b->free_ = true;
        b->stamp = ++c->clock;
        ro_use(&c->o, ids[i], b->stamp);
        ro_cand(&c->o, ids[i], true);
    }
    free(ids);
    int64_t held = 0;
    for (int32_t i = 0; i < c->n_alloc; i++) held += c->b[i].cached;
    return (rres){k, c->evictions - ev0, held};
}

/* ---- radix: SGLang's tree, in words (W per policy block) ---- */

typedef struct rnode {
    bool     alive;
    int32_t  parent;
    int64_t *sym;      /* (len * g) */
    int32_t  len;      /* policy blocks */
    int32_t  start;
    int32_t  lock;
    int32_t *kids;
    int32_t  n_kids;
} rnode;

typedef struct rrx {
    int64_t  cap_w;    /* words, 0: unbounded */
    int32_t  g, W;
    rnode   *nd;       /* nd[0]: the root */
    int32_t  n_nd, cap_nd;
    uint64_t clock;
    int64_t  tokens_w, evicted_w;
    rorder   o;
    uint64_t root_last;
} rrx;

static void rrx_init(rrx *c, hx_evict_kind k, int64_t cap_blocks, int32_t g) {
    memset(c, 0, sizeof *c);
    c->g = g;
    c->W = 2 * g;
    c->cap_w = cap_blocks * c->W;
    c->cap_nd = 64;
    c->nd = xcalloc((size_t)c->cap_nd, sizeof *c->nd);
    c->nd[0].alive = true;
    c->nd[0].parent = -1;
    c->n_nd = 1;
    ro_init(&c->o, k, c->cap_w);
}

static void rrx_free(rrx *c) {
    for (int32_t i = 0; i < c->n_nd; i++) {
        free(c->nd[i].sym);
        free(c->nd[i].kids);
    }
    free(c->nd);
    ro_free(&c->o);
}

static int32_t rrx_new(rrx *c) {
    if (c->n_nd == c->cap_nd) {
        c->cap_nd *= 2;
        c->nd = realloc(c->nd, sizeof *c->nd * (size_t)c->cap_nd);
        assert_non_null(c->nd);
        memset(c->nd + c->n_nd, 0, sizeof *c->nd * (size_t)(c->cap_nd - c->n_nd));
    }
    c->nd[c->n_nd].alive = true;
    return c->n_nd++;
}

static void kid_add(rnode *p, int32_t k) {
    p->kids = realloc(p->kids, sizeof *p->kids * (size_t)(p->n_kids + 1));
    assert_non_null(p->kids);
    p->kids[p->n_kids++] = k;
}

static void kid_remove(rnode *p, int32_t k) {
    for (int32_t i = 0; i < p->n_kids; i++)
        if (p->kids[i] == k) {
            memmove(p->kids + i, p->kids + i + 1, sizeof *p->kids * (size_t)(p->n_kids - i - 1));
            p->n_kids--;
            return;
        }
    fail_msg("radix reference: a node missing from its parent");
}

/* The path's content from the root to the end of node x, in *out (len * g). */
static int32_t path_of(const rrx *c, int32_t x, int64_t **out) {
    int32_t len = c->nd[x].start + c->nd[x].len;
    int64_t *p = xcalloc((size_t)len * (size_t)c->g, sizeof *p);
    for (int32_t y = x; y > 0; y = c->nd[y].parent)
        memcpy(p + (size_t)c->nd[y].start * c->g, c->nd[y].sym, sizeof *p * (size_t)c->nd[y].len * c->g);
    *out = p;
    return len * c->g;
}

static void rrx_cand(rrx *c, int32_t x) {
    if (x <= 0) return;
    ro_cand(&c->o, x, c->nd[x].lock == 0 && c->nd[x].n_kids == 0);
}

static int32_t rrx_child(const rrx *c, int32_t x, const int64_t *first) {
    for (int32_t i = 0; i < c->nd[x].n_kids; i++)
        if (sym_eq(c->nd[c->nd[x].kids[i]].sym, first, 1, c->g)) return c->nd[x].kids[i];
    return -1;
}

/* Splits x after k blocks; returns the upper node. */
static int32_t rrx_split(rrx *c, int32_t x, int32_t k) {
    int32_t u = rrx_new(c);
    rnode *n = &c->nd[x], *up = &c->nd[u];
    up->parent = n->parent;
    up->sym = xcalloc((size_t)k * c->g, sizeof *up->sym);
    memcpy(up->sym, n->sym, sizeof *up->sym * (size_t)k * c->g);
    up->len = k;
    up->start = n->start;
    up->lock = n->lock;
    rnode *p = &c->nd[n->parent];
    for (int32_t i = 0; i < p->n_kids; i++)
        if (p->kids[i] == x) p->kids[i] = u;
    kid_add(up, x);
    n = &c->nd[x];
    memmove(n->sym, n->sym + (size_t)k * c->g, sizeof *n->sym * (size_t)(n->len - k) * c->g);
    n->len -= k;
    n->start += k;
    n->parent = u;
    int64_t *path;
    int32_t pl = path_of(c, u, &path);
    ro_split(&c->o, u, x, (int64_t)k * c->W, path, pl);
    free(path);
    rrx_cand(c, u);
    rrx_cand(c, x);
    return u;
}

/* Walks key[0, n) (blocks); returns the length and the node ending there. */
static int32_t rrx_walk(rrx *c, const int64_t *key, int32_t n, bool hit, int32_t *last) {
    uint64_t stamp = ++c->clock;
    c->root_last = stamp;
    int32_t x = 0, pos = 0;
    while (pos < n) {
        int32_t kid = rrx_child(c, x, key + (size_t)pos * c->g);
        if (kid < 0) break;
        rnode *k = &c->nd[kid];
        int32_t lim = k->len < n - pos ? k->len : n - pos;
        int32_t l = sym_lcp(k->sym, lim, key + (size_t)pos * c->g, lim, c->g);
        ro_use(&c->o, kid, stamp);
        if (hit) ro_hit(&c->o, kid);
        if (l < k->len) {
            x = rrx_split(c, kid, l);
            pos += l;
            break;
        }
        x = kid;
        pos += l;
    }
    *last = x;
    return pos;
}

static int32_t rrx_peek(const rrx *c, const int64_t *key, int32_t n) {
    int32_t x = 0, pos = 0;
    while (pos < n) {
        int32_t kid = rrx_child(c, x, key + (size_t)pos * c->g);
        if (kid < 0) break;
        const rnode *k = &c->nd[kid];
        int32_t lim = k->len < n - pos ? k->len : n - pos;
        int32_t l = sym_lcp(k->sym, lim, key + (size_t)pos * c->g, lim, c->g);
        pos += l;
        if (l < k->len) break;
        x = kid;
    }
    return pos;
}

static void rrx_lock(rrx *c, int32_t x, int d) {
    for (; x > 0; x = c->nd[x].parent) {
        c->nd[x].lock += d;
        rrx_cand(c, x);
    }
}

static void rrx_evict(rrx *c, int64_t over_w) {
    int64_t gone = 0;
    while (gone < over_w) {
        int32_t v = ro_victim(&c->o);
        if (v < 0) break;
        rnode *n = &c->nd[v];
        assert_int_equal(n->n_kids, 0);
        gone += (int64_t)n->len * c->W;
        c->tokens_w -= (int64_t)n->len * c->W;
        int32_t p = n->parent;
        kid_remove(&c->nd[p], v);
        ro_drop(&c->o, v, true);
        n->alive = false;
        rrx_cand(c, p);
    }
    c->evicted_w += gone;
}

static rres rrx_access(rrx *c, const rreq *r) {
    int64_t ev0 = c->evicted_w;
    int32_t last, n = r->n;
    int32_t m = rrx_walk(c, r->sym, n, true, &last);
    rrx_lock(c, last, 1);
    if (c->cap_w > 0) {
        int64_t present = rrx_peek(c, r->sym, n), nw = (int64_t)n * c->W;
        int64_t over = c->tokens_w + (nw - present * c->W) - c->cap_w;
        if (over > 0) rrx_evict(c, over);
        present = rrx_peek(c, r->sym, n);
        int64_t room = c->cap_w - c->tokens_w;
        if (nw - present * c->W > room) nw = (present * c->W + (room > 0 ? room : 0)) / c->W * c->W;
        n = (int32_t)(nw / c->W);
    }
    if (n > m) {
        int32_t x;
        int32_t pos = rrx_walk(c, r->sym, n, false, &x);
        if (pos < n) {
            int32_t l = rrx_new(c);
            rnode *leaf = &c->nd[l];
            leaf->parent = x;
            leaf->len = n - pos;
            leaf->start = pos;
            leaf->sym = xcalloc((size_t)leaf->len * c->g, sizeof *leaf->sym);
            memcpy(leaf->sym, r->sym + (size_t)pos * c->g, sizeof *leaf->sym * (size_t)leaf->len * c->g);
            kid_add(&c->nd[x], l);
            int64_t *path;
            int32_t pl = path_of(c, l, &path);
            ro_add(&c->o, l, x ? c->o.m[x].last : c->root_last, path, pl, (int64_t)leaf->len * c->W);
            free(path);
            c->tokens_w += (int64_t)leaf->len * c->W;
            rrx_cand(c, l);
            rrx_cand(c, x);
        }
    }
    rrx_lock(c, last, -1);
    return (rres){m, (c->evicted_w - ev0) / c->W, c->tokens_w / c->W};
}

/* ---- prefix entries: slot-lcp's prompt cache, disk-anchor's files ---- */

typedef struct rent {
    bool     live;
    int64_t *sym;
    int32_t  n;
    int64_t  origin;
    uint64_t front;   /* stored or used last */
} rent;

typedef struct rset {
    int64_t budget, held, evicted;
    int32_t g;
    rent   *e;
    int32_t n_e;
    rorder  o;
} rset;

static void rset_init(rset *s, hx_evict_kind k, int64_t budget, int32_t g) {
    memset(s, 0, sizeof *s);
    s->budget = budget;
    s->g = g;
    ro_init(&s->o, k, budget);
}

static void rset_free(rset *s) {
    for (int32_t i = 0; i < s->n_e; i++) free(s->e[i].sym);
    free(s->e);
    ro_free(&s->o);
}

static int32_t rset_find(const rset *s, const int64_t *sym, int32_t n) {
    for (int32_t i = 0; i < s->n_e; i++)
        if (s->e[i].live && s->e[i].n == n && sym_eq(s->e[i].sym, sym, n, s->g)) return i;
    return -1;
}

static void rset_touch(rset *s, int32_t i, uint64_t stamp) {
    ro_use(&s->o, i, stamp);
    ro_hit(&s->o, i);
    s->e[i].front = stamp;
}

static void rset_drop(rset *s, int32_t i, bool evicted) {
    ro_drop(&s->o, i, evicted);
    s->e[i].live = false;
    s->held -= s->e[i].n;
}

static void rset_add(rset *s, const int64_t *sym, int32_t n, int64_t origin, uint64_t stamp) {
    if (n <= 0) return;
    int32_t have = rset_find(s, sym, n);
    if (have >= 0) { rset_touch(s, have, stamp); return; }
    if (s->budget && n > s->budget) return;
    while (s->budget && s->held + n > s->budget) {
        int32_t v = ro_victim(&s->o);
        if (v < 0) return;
        s->evicted += s->e[v].n;
        rset_drop(s, v, true);
    }
    s->e = realloc(s->e, sizeof *s->e * (size_t)(s->n_e + 1));
    assert_non_null(s->e);
    int32_t i = s->n_e++;
    rent *x = &s->e[i];
    x->live = true;
    x->sym = xcalloc((size_t)n * s->g, sizeof *x->sym);
    memcpy(x->sym, sym, sizeof *x->sym * (size_t)n * s->g);
    x->n = n;
    x->origin = origin;
    x->front = stamp;
    ro_add(&s->o, i, stamp, sym, n * s->g, n);
    ro_cand(&s->o, i, true);
    s->held += n;
}

/* The longest common prefix with any entry, and the one used last among those holding it. */
static int32_t rset_common(const rset *s, const int64_t *sym, int32_t n, int32_t *which) {
    int32_t best = 0;
    *which = -1;
    for (int32_t i = 0; i < s->n_e; i++) {
        if (!s->e[i].live) continue;
        int32_t l = sym_lcp(s->e[i].sym, s->e[i].n, sym, n, s->g);
        if (l > best || (l == best && l > 0 && s->e[i].front > s->e[*which].front)) {
            best = l;
            *which = i;
        }
    }
    return best;
}

/* The longest entry that is a prefix of the request. */
static int32_t rset_within(const rset *s, const int64_t *sym, int32_t n, int32_t *which) {
    int32_t best = 0;
    *which = -1;
    for (int32_t i = 0; i < s->n_e; i++)
        if (s->e[i].live && s->e[i].n <= n && s->e[i].n > best && sym_eq(s->e[i].sym, sym, s->e[i].n, s->g)) {
            best = s->e[i].n;
            *which = i;
        }
    return best;
}

/* ---- slot-lcp: slots and llama.cpp's prompt cache ---- */

typedef struct rslot {
    int64_t *sym;
    int32_t  n;
    int64_t  origin;
    uint64_t last_used;
} rslot;

typedef struct rsl {
    int32_t  n_slots, g;
    double   threshold;
    rslot   *s;
    rset     cache;
    uint64_t clock;
} rsl;

static void rsl_init(rsl *c, hx_evict_kind k, int64_t budget, int32_t n_slots, double threshold, int32_t g) {
    memset(c, 0, sizeof *c);
    c->n_slots = n_slots;
    c->threshold = threshold;
    c->g = g;
    c->s = xcalloc((size_t)n_slots, sizeof *c->s);
    rset_init(&c->cache, k, budget, g);
}

static void rsl_free(rsl *c) {
    for (int32_t i = 0; i < c->n_slots; i++) free(c->s[i].sym);
    free(c->s);
    rset_free(&c->cache);
}

static int32_t rsl_pick(const rsl *c, const rreq *r, int32_t *lcp) {
    int32_t best = -1;
    double sim_best = 0;
    for (int32_t i = 0; i < c->n_slots; i++) {
        lcp[i] = sym_lcp(c->s[i].sym, c->s[i].n, r->sym, r->n, c->g);
        double sim = (double)lcp[i] / (double)r->n;
        if (lcp[i] > 0 && sim > sim_best && sim > c->threshold) { best = i; sim_best = sim; }
    }
    if (best >= 0) return best;
    int32_t lru = 0;
    for (int32_t i = 1; i < c->n_slots; i++)
        if (c->s[i].last_used < c->s[lru].last_used) lru = i;
    return lru;
}

static int32_t rsl_peek(rsl *c, const rreq *r) {
    int32_t lcp[64], w;
    int32_t k = lcp[rsl_pick(c, r, lcp)], cc = rset_common(&c->cache, r->sym, r->n, &w);
    return cc > k ? cc : k;
}

static rres rsl_access(rsl *c, const rreq *r) {
    int64_t ev0 = c->cache.evicted;
    int32_t lcp[64], w;
    rslot *sl = &c->s[rsl_pick(c, r, lcp)];
    int32_t k = lcp[sl - c->s];
    if (sl->n > 0) rset_add(&c->cache, sl->sym, sl->n, sl->origin, ++c->clock);
    int32_t cc = rset_common(&c->cache, r->sym, r->n, &w);
    if (cc > k) {
        k = cc;
        rset_drop(&c->cache, w, false);
    }
    free(sl->sym);
    sl->sym = xcalloc((size_t)r->n * c->g, sizeof *sl->sym);
    memcpy(sl->sym, r->sym, sizeof *sl->sym * (size_t)r->n * c->g);
    sl->n = r->n;
    sl->origin = r->index;
    sl->last_used = ++c->clock;
    int64_t held = c->cache.held;
    for (int32_t i = 0; i < c->n_slots; i++) held += c->s[i].n;
    return (rres){k, c->cache.evicted - ev0, held};
}

/* ---- disk-anchor: the live sequence and checkpoint files ---- */

typedef struct rda {
    int32_t  g, bt;          /* trace blocks per policy block; tokens per policy block */
    int32_t  waypoint, anchor;  /* tokens */
    bool     cold_only;
    int64_t *live;
    int32_t  n_live, full_live;
    rset     files;
    uint64_t clock;
} rda;

static void rda_init(rda *c, hx_evict_kind k, int64_t budget, int32_t g, int32_t bt, int32_t waypoint, int32_t anchor) {
    memset(c, 0, sizeof *c);
    c->g = g;
    c->bt = bt;
    c->waypoint = waypoint;
    c->anchor = anchor / bt * bt;
    rset_init(&c->files, k, budget, g);
}

static void rda_free(rda *c) {
    free(c->live);
    rset_free(&c->files);
}

static int32_t rda_lookup(rda *c, const rreq *r, int32_t *file) {
    *file = -1;
    int32_t lcp = sym_lcp(c->live, c->n_live, r->sym, r->n, c->g);
    if (c->n_live > 0 && c->full_live > 0 && lcp >= c->full_live) return c->full_live;
    return -rset_within(&c->files, r->sym, r->n, file);
}

static int32_t rda_peek(rda *c, const rreq *r) {
    int32_t f, k = rda_lookup(c, r, &f);
    return k < 0 ? -k : k;
}

static rres rda_access(rda *c, const rreq *r) {
    int64_t ev0 = c->files.evicted;
    int32_t file, k = rda_lookup(c, r, &file);
    if (k < 0) {
        k = -k;
        if (file >= 0) rset_touch(&c->files, file, ++c->clock);
    }
    /* the checkpoints: waypoints in (cached, n], the anchor when the hit lies below it */
    int64_t n_tok = (int64_t)r->n * c->bt, cached = (int64_t)k * c->bt;
    bool want_anchor = c->anchor > 0 && c->anchor <= n_tok && (c->cold_only ? cached == 0 : cached < c->anchor);
    for (int64_t pos = c->bt; pos <= n_tok; pos += c->bt) {
        bool wp = c->waypoint > 0 && pos % c->waypoint == 0 && pos > cached;
        bool an = want_anchor && pos == c->anchor;
        if (!wp && !an) continue;
        int32_t b = (int32_t)(pos / c->bt);
        if (rset_find(&c->files, r->sym, b) >= 0) continue;
        rset_add(&c->files, r->sym, b, r->index, ++c->clock);
    }
    free(c->live);
    c->live = xcalloc((size_t)r->n * c->g, sizeof *c->live);
    memcpy(c->live, r->sym, sizeof *c->live * (size_t)r->n * c->g);
    c->n_live = r->n;
    c->full_live = r->input_length / c->bt;
    if (c->full_live > r->n) c->full_live = r->n;
    return (rres){k, c->files.evicted - ev0, c->files.held + c->n_live};
}

struct ref {
    const char *policy;
    int         kind;   /* 0 bh, 1 radix, 2 slot, 3 disk, 4 cold */
    rbh         bh;
    rrx         rx;
    rsl         sl;
    rda         da;
};


ref *ref_new(const setup *s, int32_t block_tokens) {
    ref *f = calloc(1, sizeof *f);
    assert_non_null(f);
    f->policy = s->policy;
    if (!strcmp(s->policy, "block-hash")) { f->kind = 0; rbh_init(&f->bh, s->evict, (int32_t)s->cap_blocks, s->g); }
    else if (!strcmp(s->policy, "radix")) { f->kind = 1; rrx_init(&f->rx, s->evict, s->cap_blocks, s->g); }
    else if (!strcmp(s->policy, "slot-lcp")) { f->kind = 2; rsl_init(&f->sl, s->evict, s->cap_blocks, s->slots, 0.1, s->g); }
    else if (!strcmp(s->policy, "cold")) f->kind = 4;
    else { f->kind = 3; rda_init(&f->da, s->evict, s->cap_blocks, s->g, block_tokens * s->g, s->waypoint, s->anchor); }
    return f;
}

void ref_free(ref *f) {
    if (!f) return;
    if (f->kind == 0) rbh_free(&f->bh);
    if (f->kind == 1) rrx_free(&f->rx);
    if (f->kind == 2) rsl_free(&f->sl);
    if (f->kind == 3) rda_free(&f->da);
    free(f);
}

rres ref_access(ref *f, const rreq *r) {
    switch (f->kind) {
    case 0: return rbh_access(&f->bh, r);
    case 1: return rrx_access(&f->rx, r);
    case 2: return rsl_access(&f->sl, r);
    case 3: return rda_access(&f->da, r);
    default: return (rres){0, 0, 0};  /* cold: nothing held, nothing hit */
    }
}

int32_t ref_peek(ref *f, const rreq *r) {
    switch (f->kind) {
    case 0: return rbh_peek(&f->bh, r);
    case 1: return rrx_peek(&f->rx, r->sym, r->n);
    case 2: return rsl_peek(&f->sl, r);
    case 3: return rda_peek(&f->da, r);
    default: return 0;
    }
}

