/*
 * tests/test_simulate.c: `kvreplay simulate`'s caches against a brute-force
 * reference, hit for hit.
 *
 * The reference is written here from the rules of docs/traces.md, with
 * plain arrays, linear scans and whole prefixes compared element by element:
 * no hash, no map, no heap and no line of harness/cache/ (it shares nothing
 * with the policies but the trace reader that feeds both). For every policy
 * (block-hash, radix, slot-lcp, disk-anchor), every eviction order (lru,
 * lfu, fifo, s3fifo) and capacities from a few blocks to unbounded, on
 * synthetic traces of both formats and on the head of the real Mooncake
 * trace, each request's hit, the blocks it evicted and what the cache holds
 * after it must be the reference's, and the structures' own invariant checks
 * must pass after every access. Then the faults the checks exist for are
 * planted (cache/evict.h's hx_cache_faults) and must be caught: a hit counted
 * after a missing block, a radix eviction that leaves a child reachable
 * without its parent, a capacity exceeded by one block.
 *
 * KVR_SIM_BENCH=1 runs instead the benchmark quoted in docs/traces.md: the
 * whole conversation trace through each policy at one capacity, simulate's
 * structures against this reference, requests per second side by side.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include "evict.h"
#include "policy.h"
#include "radixtree.h"
#include "sim.h"
#include "status.h"
#include "trace.h"

#define MOONCAKE "../shared/data/traces/mooncake_conversation_trace.jsonl"

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

typedef struct rreq {
    const int64_t *sym;  /* (n * g) */
    int32_t        n;    /* policy blocks */
    int32_t        g;
    int32_t        input_length, block_tokens;
    int64_t        index;
} rreq;

static bool sym_eq(const int64_t *a, const int64_t *b, int32_t nsym, int32_t g) {
    return !memcmp(a, b, sizeof(int64_t) * (size_t)nsym * (size_t)g);
}

static int32_t sym_lcp(const int64_t *a, int32_t na, const int64_t *b, int32_t nb, int32_t g) {
    int32_t i = 0;
    while (i < na && i < nb && sym_eq(a + (size_t)i * g, b + (size_t)i * g, 1, g)) i++;
    return i;
}

typedef struct rres {
    int32_t hit;       /* policy blocks */
    int64_t evicted;   /* policy blocks */
    int64_t held;      /* policy blocks */
} rres;

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

// ============================================================================
// Traces for the tests

typedef struct rng {
    uint64_t s;
} rng;

static uint64_t rnext(rng *r) {
    uint64_t x = (r->s += 0x9E3779B97F4A7C15ULL);
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ULL;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBULL;
    return x ^ (x >> 31);
}

static int32_t rint_(rng *r, int32_t lo, int32_t hi) { return lo + (int32_t)(rnext(r) % (uint64_t)(hi - lo + 1)); }

/* A Mooncake-style trace (prefix ids, 512-token blocks): conversations that
 * extend their context, a shared system prompt, repeated prompts. */
static void write_mooncake(const char *path, int32_t n_req, uint64_t seed) {
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    rng r = {seed};
    enum { SESS = 12, MAXB = 40 };
    int64_t ctx[SESS][MAXB];
    int32_t nctx[SESS] = {0}, last_n[SESS] = {0}, last_len[SESS] = {0};
    int64_t last[SESS][MAXB + 1];
    int64_t next_id = 3;
    for (int32_t s = 0; s < SESS; s++) {
        if (rint_(&r, 0, 9) < 7) { ctx[s][0] = 0; ctx[s][1] = 1; nctx[s] = 2; }  /* the shared system prompt */
    }
    for (int32_t i = 0; i < n_req; i++) {
        int32_t s = rint_(&r, 0, SESS - 1);
        int64_t ids[MAXB + 1];
        int32_t n, len;
        if (last_n[s] && rint_(&r, 0, 9) == 0) {  /* the same prompt again */
            n = last_n[s];
            memcpy(ids, last[s], sizeof ids[0] * (size_t)n);
            len = last_len[s];
        } else {
            if (nctx[s] > MAXB - 4 || rint_(&r, 0, 12) == 0) {  /* a new conversation in this session */
                nctx[s] = rint_(&r, 0, 1) ? 2 : 0;
                ctx[s][0] = 0;
                ctx[s][1] = 1;
            }
            int32_t grow = rint_(&r, 0, 3);
            for (int32_t k = 0; k < grow; k++) ctx[s][nctx[s]++] = next_id++;
            n = nctx[s] + 1;
            memcpy(ids, ctx[s], sizeof ids[0] * (size_t)nctx[s]);
            ids[n - 1] = next_id++;  /* the partial last block */
            len = (n - 1) * 512 + rint_(&r, 1, 512);
            memcpy(last[s], ids, sizeof ids[0] * (size_t)n);
            last_n[s] = n;
            last_len[s] = len;
            ctx[s][nctx[s]++] = next_id++;  /* the next turn: that block, full now, under its own id */
        }
        fprintf(f, "{\"timestamp\": %d, \"input_length\": %d, \"output_length\": %d, \"hash_ids\": [", i * 37, len,
                rint_(&r, 1, 400));
        for (int32_t k = 0; k < n; k++) fprintf(f, "%s%lld", k ? ", " : "", (long long)ids[k]);
        fprintf(f, "]}\n");
    }
    fclose(f);
}

/* A Bailian-style trace (16-token blocks, each id a hash of its block alone:
 * few distinct ids, repeated in other positions and other contexts). */
static void write_bailian(const char *path, int32_t n_req, uint64_t seed) {
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    rng r = {seed};
    int64_t prev[64];
    int32_t n_prev = 0;
    for (int32_t i = 0; i < n_req; i++) {
        int64_t ids[64];
        int32_t n = rint_(&r, 1, 24), parent = -1;
        bool follow = n_prev && rint_(&r, 0, 2) > 0;
        int32_t keep = follow ? rint_(&r, 0, n_prev) : 0;
        if (keep > n) keep = n;
        for (int32_t k = 0; k < n; k++) ids[k] = k < keep ? prev[k] : rint_(&r, 0, 11);
        if (follow && i > 0) parent = rint_(&r, 0, i - 1);
        int32_t len = (n - 1) * 16 + rint_(&r, 1, 16);
        fprintf(f, "{\"chat_id\": %d, \"parent_chat_id\": %d, \"timestamp\": %.3f, \"input_length\": %d, "
                "\"output_length\": %d, \"type\": \"%s\", \"turn\": %d, \"hash_ids\": [", i, parent, i * 0.25, len,
                rint_(&r, 0, 300), rint_(&r, 0, 3) ? "text" : "search", parent < 0 ? 1 : 2);
        for (int32_t k = 0; k < n; k++) fprintf(f, "%s%lld", k ? ", " : "", (long long)ids[k]);
        fprintf(f, "]}\n");
        memcpy(prev, ids, sizeof ids[0] * (size_t)n);
        n_prev = n;
    }
    fclose(f);
}

/* The head of the real conversation trace, or NULL when it is absent. */
static const char *mooncake_head(int32_t n) {
    static char path[64];
    FILE *in = fopen(MOONCAKE, "r");
    if (!in) return NULL;
    snprintf(path, sizeof path, "/tmp/kvr-sim-head-%d.jsonl", (int)getpid());
    FILE *out = fopen(path, "w");
    assert_non_null(out);
    char line[1 << 16];
    for (int32_t i = 0; i < n && fgets(line, sizeof line, in); i++) fputs(line, out);
    fclose(in);
    fclose(out);
    return path;
}

// ============================================================================
// The comparison

typedef struct ref {
    const char *policy;
    int         kind;   /* 0 bh, 1 radix, 2 slot, 3 disk */
    rbh         bh;
    rrx         rx;
    rsl         sl;
    rda         da;
} ref;

typedef struct setup {
    const char   *policy;
    hx_evict_kind evict;
    int64_t       cap_blocks;    /* policy blocks, 0: unbounded */
    int32_t       g;             /* trace blocks per policy block */
    int32_t       slots;         /* slot-lcp */
    int32_t       waypoint, anchor;  /* disk-anchor, tokens */
} setup;

static void ref_init(ref *f, const setup *s, int32_t block_tokens) {
    memset(f, 0, sizeof *f);
    f->policy = s->policy;
    if (!strcmp(s->policy, "block-hash")) { f->kind = 0; rbh_init(&f->bh, s->evict, (int32_t)s->cap_blocks, s->g); }
    else if (!strcmp(s->policy, "radix")) { f->kind = 1; rrx_init(&f->rx, s->evict, s->cap_blocks, s->g); }
    else if (!strcmp(s->policy, "slot-lcp")) { f->kind = 2; rsl_init(&f->sl, s->evict, s->cap_blocks, s->slots, 0.1, s->g); }
    else { f->kind = 3; rda_init(&f->da, s->evict, s->cap_blocks, s->g, block_tokens * s->g, s->waypoint, s->anchor); }
}

static void ref_free(ref *f) {
    if (f->kind == 0) rbh_free(&f->bh);
    if (f->kind == 1) rrx_free(&f->rx);
    if (f->kind == 2) rsl_free(&f->sl);
    if (f->kind == 3) rda_free(&f->da);
}

static rres ref_access(ref *f, const rreq *r) {
    switch (f->kind) {
    case 0: return rbh_access(&f->bh, r);
    case 1: return rrx_access(&f->rx, r);
    case 2: return rsl_access(&f->sl, r);
    default: return rda_access(&f->da, r);
    }
}

static int32_t ref_peek(ref *f, const rreq *r) {
    switch (f->kind) {
    case 0: return rbh_peek(&f->bh, r);
    case 1: return rrx_peek(&f->rx, r->sym, r->n);
    case 2: return rsl_peek(&f->sl, r);
    default: return rda_peek(&f->da, r);
    }
}

static hx_sim_policy *make_sim(const setup *s, int32_t block_tokens) {
    hx_policy_args args = {0};
    char slots[16], wp[16], an[16];
    snprintf(slots, sizeof slots, "%d", s->slots ? s->slots : 1);
    snprintf(wp, sizeof wp, "%d", s->waypoint);
    snprintf(an, sizeof an, "%d", s->anchor);
    if (!strcmp(s->policy, "slot-lcp")) assert_int_equal(hx_policy_args_set(&args, "--slots", slots), ENG_OK);
    if (!strcmp(s->policy, "disk-anchor")) {
        assert_int_equal(hx_policy_args_set(&args, "--waypoint-every", wp), ENG_OK);
        if (s->anchor) assert_int_equal(hx_policy_args_set(&args, "--anchor", an), ENG_OK);
    }
    hx_sim_config cfg = {.block_tokens = block_tokens, .block_size = (int64_t)block_tokens * s->g,
                         .capacity_tokens = s->cap_blocks * block_tokens * s->g, .evict = s->evict};
    hx_sim_policy *p = NULL;
    char err[512] = "";
    int rc = hx_sim_policy_create(s->policy, &cfg, &args, &p, err, sizeof err);
    if (rc != ENG_OK) fail_msg("%s: %s", s->policy, err);
    return p;
}

/* Runs the trace through simulate's policy and the reference. Returns the
 * index of the first request where they differ (or where an invariant check
 * fails), -1 when they agree all along; *why says what differed. */
static int64_t compare(const char *trace, const setup *s, int64_t *n_hits, char *why, size_t whylen) {
    hx_trace_opts to = {0};
    hx_trace *t = NULL;
    char err[512] = "";
    assert_int_equal(hx_trace_open(trace, &to, &t, err, sizeof err), ENG_OK);
    hx_trace_rec r;
    hx_sim_policy *p = NULL;
    ref f;
    bool started = false;
    int64_t bad = -1, hits = 0;
    int rc;
    int64_t *sym = NULL;
    while ((rc = hx_trace_next(t, &r, err, sizeof err)) == 1 && bad < 0) {
        int32_t B = hx_trace_block_tokens(t);
        if (!started) {
            p = make_sim(s, B);
            ref_init(&f, s, B);
            started = true;
        }
        int32_t m = r.n_blocks / s->g;
        sym = realloc(sym, sizeof *sym * (size_t)(r.n_blocks + 1));
        memcpy(sym, r.ids, sizeof *sym * (size_t)r.n_blocks);
        rreq q = {.sym = sym, .n = m, .g = s->g, .input_length = r.input_length, .block_tokens = B, .index = r.index};
        hx_sim_req sq = {.words = r.words, .n_blocks = r.n_blocks, .n_tokens = r.input_length, .index = r.index};
        int32_t peek_sim = p->sim->peek(p->state, &sq), peek_ref = ref_peek(&f, &q) * s->g;
        hx_sim_access a;
        assert_int_equal(p->sim->access(p->state, &sq, &a), ENG_OK);
        rres e = ref_access(&f, &q);
        hits += e.hit;
        char cerr[512] = "";
        if (peek_sim != peek_ref) {
            snprintf(why, whylen, "peek %d, reference %d", peek_sim, peek_ref);
            bad = r.index;
        } else if (a.hit_blocks != e.hit * s->g) {
            snprintf(why, whylen, "hit %d blocks (peek %d), reference %d", a.hit_blocks, peek_sim, e.hit * s->g);
            bad = r.index;
        } else if (a.evicted_blocks != e.evicted * s->g || a.held_blocks != e.held * s->g) {
            snprintf(why, whylen, "evicted %lld held %lld, reference %lld and %lld", (long long)a.evicted_blocks,
                     (long long)a.held_blocks, (long long)e.evicted * s->g, (long long)e.held * s->g);
            bad = r.index;
        } else if (p->sim->check(p->state, cerr, sizeof cerr) != ENG_OK) {
            snprintf(why, whylen, "invariant: %s", cerr);
            bad = r.index;
        }
    }
    if (rc < 0) fail_msg("%s", err);
    if (started) {
        hx_sim_policy_destroy(p);
        ref_free(&f);
    }
    free(sym);
    hx_trace_close(t);
    if (n_hits) *n_hits = hits;
    return bad;
}

static const char *const k_policies[] = {"block-hash", "radix", "slot-lcp", "disk-anchor"};

static void agree_on(const char *trace, const int64_t *caps, int n_caps, int32_t waypoint, int32_t g) {
    int n_runs = 0;
    for (int pi = 0; pi < 4; pi++)
        for (int e = 0; e < HX_EVICT_N; e++)
            for (int c = 0; c < n_caps; c++) {
                setup s = {.policy = k_policies[pi], .evict = (hx_evict_kind)e, .cap_blocks = caps[c], .g = g,
                           .slots = 2, .waypoint = waypoint, .anchor = waypoint / 2};
                char why[512] = "";
                int64_t hits = 0, bad = compare(trace, &s, &hits, why, sizeof why);
                if (bad >= 0)
                    fail_msg("%s, %s, capacity %lld blocks (group %d), %s: request %lld: %s", s.policy,
                             hx_evict_name(s.evict), (long long)s.cap_blocks, g, trace, (long long)bad, why);
                n_runs++;
            }
    assert_int_equal(n_runs, 4 * HX_EVICT_N * n_caps);
}

static char g_moon[64], g_bail[64];

static int setup_traces(void **state) {
    (void)state;
    snprintf(g_moon, sizeof g_moon, "/tmp/kvr-sim-moon-%d.jsonl", (int)getpid());
    snprintf(g_bail, sizeof g_bail, "/tmp/kvr-sim-bail-%d.jsonl", (int)getpid());
    write_mooncake(g_moon, 400, 7);
    write_bailian(g_bail, 400, 11);
    return 0;
}

static int teardown_traces(void **state) {
    (void)state;
    remove(g_moon);
    remove(g_bail);
    return 0;
}

// ============================================================================
// Tests

static void every_policy_and_order_agrees_with_the_reference_on_a_mooncake_style_trace(void **state) {
    (void)state;
    const int64_t caps[] = {3, 8, 21, 60, 0};
    agree_on(g_moon, caps, 5, 1024, 1);
}

static void every_policy_and_order_agrees_with_the_reference_on_a_bailian_style_trace(void **state) {
    (void)state;
    const int64_t caps[] = {4, 15, 50, 0};
    agree_on(g_bail, caps, 4, 64, 1);
}

static void policy_blocks_of_two_trace_blocks_agree_with_the_reference(void **state) {
    (void)state;
    const int64_t caps[] = {5, 30, 0};
    agree_on(g_moon, caps, 3, 2048, 2);
}

static void every_policy_and_order_agrees_with_the_reference_on_the_real_trace_head(void **state) {
    (void)state;
    const char *head = mooncake_head(250);
    if (!head) { skip(); return; }
    const int64_t caps[] = {40, 400, 0};
    agree_on(head, caps, 3, 2048, 1);
    remove(head);
}

/* The comparison with the reference (and the invariant checks) must fail
 * under each planted fault, for the policies the fault applies to. */
static int64_t with_fault(unsigned fault, const setup *s, char *why, size_t whylen) {
    hx_cache_faults = fault;
    int64_t bad = compare(g_moon, s, NULL, why, whylen);
    hx_cache_faults = 0;
    return bad;
}

static void a_hit_counted_after_a_missing_block_is_caught(void **state) {
    (void)state;
    char why[512] = "";
    /* fifo evicts a sequence's first block first: later blocks stay cached behind a gap */
    setup s = {.policy = "block-hash", .evict = HX_EVICT_FIFO, .cap_blocks = 8, .g = 1};
    assert_int_equal(compare(g_moon, &s, NULL, why, sizeof why), -1);  /* agrees without the fault */
    int64_t bad = with_fault(HX_FAULT_HIT_AFTER_GAP, &s, why, sizeof why);
    assert_true(bad >= 0);
    assert_non_null(strstr(why, "hit"));
}

static void a_radix_eviction_that_leaves_a_child_reachable_is_caught(void **state) {
    (void)state;
    char why[512] = "";
    setup s = {.policy = "radix", .evict = HX_EVICT_LRU, .cap_blocks = 8, .g = 1};
    assert_int_equal(compare(g_moon, &s, NULL, why, sizeof why), -1);
    int64_t bad = with_fault(HX_FAULT_ORPHAN_EVICT, &s, why, sizeof why);
    assert_true(bad >= 0);
    /* the tree's own check names it, or the reference saw the wrong hit first */
    assert_true(strstr(why, "gap") || strstr(why, "candidate") || strstr(why, "hit") || strstr(why, "evicted"));
}

static void a_capacity_exceeded_by_one_block_is_caught(void **state) {
    (void)state;
    const char *pols[] = {"block-hash", "radix"};
    for (int i = 0; i < 2; i++) {
        char why[512] = "";
        setup s = {.policy = pols[i], .evict = HX_EVICT_LRU, .cap_blocks = 8, .g = 1};
        assert_int_equal(compare(g_moon, &s, NULL, why, sizeof why), -1);
        int64_t bad = with_fault(HX_FAULT_OVER_CAPACITY, &s, why, sizeof why);
        if (bad < 0) fail_msg("%s: a capacity exceeded by one block went unnoticed", pols[i]);
    }
}

/* The orphan check itself, on a tree built by hand: the tree's check names the gap. */
static void the_radix_check_names_a_child_left_without_its_parent(void **state) {
    (void)state;
    hx_radix *t = hx_radix_new_evict(2, HX_EVICT_LRU, 0, NULL, NULL, NULL);
    int32_t a[8] = {1, 0, 2, 0, 3, 0, 4, 0}, b[8] = {1, 0, 2, 0, 9, 0, 9, 0};
    hx_rnode *leaf;
    assert_true(hx_radix_insert(t, a, 8, &leaf) >= 0);
    assert_true(hx_radix_insert(t, b, 8, &leaf) >= 0);  /* [1,2] then {[3,4], [9,9]} */
    char err[256] = "";
    assert_int_equal(hx_radix_check(t, err, sizeof err), ENG_OK);
    hx_cache_faults = HX_FAULT_ORPHAN_EVICT;
    hx_rnode *shared = hx_radix_root(t)->kids[0];  /* [1,2], the parent of both leaves */
    hx_radix_lock(t, shared);  /* its candidacy is recomputed: under the fault, any unlocked node */
    hx_radix_unlock(t, shared);
    hx_radix_evict(t, 8);      /* a's leaf [3,4] (the oldest), then [1,2] with [9,9] still under it */
    hx_cache_faults = 0;
    int rc = hx_radix_check(t, err, sizeof err);
    hx_radix_free(t);
    assert_int_equal(rc, ENG_ERR_FORMAT);
    if (!strstr(err, "gap")) fail_msg("%s", err);
}

/* hx_sim_run on the whole conversation trace, unbounded: the ideal hit rate
 * trace info prints, exactly (block-hash and radix). */
static void the_unbounded_cache_gives_the_ideal_hit_rate_of_trace_info(void **state) {
    (void)state;
    FILE *f = fopen(MOONCAKE, "r");
    if (!f) { skip(); return; }
    fclose(f);
    hx_trace_opts to = {0};
    hx_trace_info in;
    char err[512] = "";
    assert_int_equal(hx_trace_info_read(MOONCAKE, &to, &in, err, sizeof err), ENG_OK);
    assert_int_equal(in.requests, 12031);
    const char *pols[] = {"block-hash", "radix"};
    for (int i = 0; i < 2; i++) {
        hx_sim_opts o;
        hx_sim_opts_default(&o);
        o.trace_path = MOONCAKE;
        o.policy = pols[i];
        hx_sim_summary sum;
        assert_int_equal(hx_sim_run(&o, &sum, err, sizeof err), ENG_OK);
        assert_int_equal(sum.hit_tokens, in.ideal_hit_tokens);
        assert_int_equal(sum.hit_blocks, in.ideal_hit_blocks);
        assert_int_equal(sum.evictions, 0);
    }
    assert_true(fabs(in.ideal_hit_rate_tokens - 0.3736) < 0.0001);
}

/* A hit rate never rises when the capacity falls (block-hash, lru, on the real trace's head). */
static void a_smaller_cache_never_hits_more_under_lru(void **state) {
    (void)state;
    const char *head = mooncake_head(2000);
    if (!head) { skip(); return; }
    int64_t prev = INT64_MAX;
    const int64_t caps[] = {0, 20000, 4000, 800, 160, 32};
    for (int i = 0; i < 6; i++) {
        hx_sim_opts o;
        hx_sim_opts_default(&o);
        o.trace_path = head;
        o.policy = "radix";
        o.capacity_tokens = caps[i] * 512;
        hx_sim_summary sum;
        char err[256];
        assert_int_equal(hx_sim_run(&o, &sum, err, sizeof err), ENG_OK);
        assert_true(sum.hit_tokens <= prev);
        prev = sum.hit_tokens;
    }
    remove(head);
}

// ============================================================================
// The benchmark (KVR_SIM_BENCH=1): simulate's structures against the reference

static double cpu_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

static void bench(void) {
    const int64_t cap_blocks = 1000000 / 512;
    double load[3] = {0};
    if (getloadavg(load, 3) < 0) load[0] = NAN;
    printf("# the conversation trace (12,031 requests) through each policy at %lld blocks (1e6 tokens), lru, one "
           "thread; CPU seconds (load average %.2f)\n", (long long)cap_blocks, load[0]);
    printf("%-12s %12s %12s %14s %14s %8s\n", "policy", "sim_s", "ref_s", "sim_req_s", "ref_req_s", "speedup");
    for (int pi = 0; pi < 4; pi++) {
        setup s = {.policy = k_policies[pi], .evict = HX_EVICT_LRU, .cap_blocks = cap_blocks, .g = 1, .slots = 1,
                   .waypoint = 2048};
        hx_trace_opts to = {0};
        hx_trace *t;
        char err[256];
        if (hx_trace_open(MOONCAKE, &to, &t, err, sizeof err) != ENG_OK) { printf("%s\n", err); return; }
        /* read the trace once: both sides are timed on the accesses alone */
        typedef struct rec { int64_t *ids; int32_t *words; int32_t n, len; } rec;
        rec *rs = NULL;
        int64_t n = 0;
        hx_trace_rec r;
        while (hx_trace_next(t, &r, err, sizeof err) == 1) {
            rs = realloc(rs, sizeof *rs * (size_t)(n + 1));
            rs[n].ids = malloc(sizeof(int64_t) * (size_t)r.n_blocks);
            rs[n].words = malloc(sizeof(int32_t) * 2 * (size_t)r.n_blocks);
            memcpy(rs[n].ids, r.ids, sizeof(int64_t) * (size_t)r.n_blocks);
            memcpy(rs[n].words, r.words, sizeof(int32_t) * 2 * (size_t)r.n_blocks);
            rs[n].n = r.n_blocks;
            rs[n].len = r.input_length;
            n++;
        }
        hx_trace_close(t);
        hx_sim_policy *p = make_sim(&s, 512);
        double t0 = cpu_s();
        int64_t hs = 0, hr = 0;
        for (int64_t i = 0; i < n; i++) {
            hx_sim_req q = {.words = rs[i].words, .n_blocks = rs[i].n, .n_tokens = rs[i].len, .index = i};
            hx_sim_access a;
            p->sim->access(p->state, &q, &a);
            hs += a.hit_blocks;
        }
        double ts = cpu_s() - t0;
        ref f;
        ref_init(&f, &s, 512);
        t0 = cpu_s();
        for (int64_t i = 0; i < n; i++) {
            rreq q = {.sym = rs[i].ids, .n = rs[i].n, .g = 1, .input_length = rs[i].len, .block_tokens = 512, .index = i};
            hr += ref_access(&f, &q).hit;
        }
        double tr = cpu_s() - t0;
        printf("%-12s %12.4f %12.4f %14.0f %14.0f %8.1f%s\n", s.policy, ts, tr, n / ts, n / tr, tr / ts,
               hs == hr ? "" : "  (hits differ!)");
        ref_free(&f);
        hx_sim_policy_destroy(p);
        for (int64_t i = 0; i < n; i++) { free(rs[i].ids); free(rs[i].words); }
        free(rs);
    }
}

int main(void) {
    if (getenv("KVR_SIM_BENCH")) {
        bench();
        return 0;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(every_policy_and_order_agrees_with_the_reference_on_a_mooncake_style_trace),
        cmocka_unit_test(every_policy_and_order_agrees_with_the_reference_on_a_bailian_style_trace),
        cmocka_unit_test(policy_blocks_of_two_trace_blocks_agree_with_the_reference),
        cmocka_unit_test(every_policy_and_order_agrees_with_the_reference_on_the_real_trace_head),
        cmocka_unit_test(a_hit_counted_after_a_missing_block_is_caught),
        cmocka_unit_test(a_radix_eviction_that_leaves_a_child_reachable_is_caught),
        cmocka_unit_test(a_capacity_exceeded_by_one_block_is_caught),
        cmocka_unit_test(the_radix_check_names_a_child_left_without_its_parent),
        cmocka_unit_test(the_unbounded_cache_gives_the_ideal_hit_rate_of_trace_info),
        cmocka_unit_test(a_smaller_cache_never_hits_more_under_lru),
    };
    return cmocka_run_group_tests(tests, setup_traces, teardown_traces);
}
