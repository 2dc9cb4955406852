/*
 * harness/cache/evict.c: eviction orders (see evict.h): a binary heap of
 * candidates for lru, lfu and fifo; S3-FIFO's two queues and its ghost.
 */
#include "evict.h"

#include <stdlib.h>
#include <string.h>

#include "status.h"

#define S3_SMALL_PCT   10  /* S: 10% of the capacity (libCacheSim's fifo-size-ratio 0.10) */
#define S3_GHOST_PCT   90  /* G: 90% of the capacity (ghost-size-ratio 0.90) */
#define S3_PROMOTE     2   /* hits in S to move to M (move-to-main-threshold 2) */
#define S3_FREQ_MAX    3

enum { Q_NONE = 0, Q_S = 1, Q_M = 2 };

typedef struct ent {
    uint64_t last, created, seq, ident;
    int64_t  size;
    uint32_t hits;
    uint8_t  freq, queue;
    bool     live, cand;
    int32_t  heap;        /* position in the heap, -1 */
    int32_t  prev, next;  /* s3fifo queue links: prev toward the head, next toward the tail */
} ent;

typedef struct ghost_ent {
    uint64_t ident;
    int64_t  size;
    bool     valid;
} ghost_ent;

typedef struct gslot {
    uint64_t key;   /* 0: empty */
    int64_t  idx;   /* absolute ring position of the latest ghost entry with this identity */
} gslot;

struct hx_evict {
    hx_evict_kind kind;
    bool          mono;       /* lru with monotone stamps: candidates in queue M, newest at the head */
    int64_t       cap;
    ent          *e;
    int32_t       n_e;        /* ids < n_e have a slot */
    int32_t       live, cands;
    uint64_t      seq;
    int32_t      *heap;
    int32_t       n_heap, cap_heap;
    /* s3fifo */
    int32_t       head[3], tail[3], qn[3];
    int64_t       qsize[3];
    ghost_ent    *ring;       /* ring buffer, absolute positions [g_lo, g_hi) */
    int64_t       ring_cap, g_lo, g_hi, g_size;
    gslot        *gmap;
    int64_t       gmap_cap, gmap_n;
};

unsigned hx_cache_faults;

static const char *const k_names[HX_EVICT_N] = {"lru", "lfu", "fifo", "s3fifo"};

const char *hx_evict_name(hx_evict_kind k) { return k >= 0 && k < HX_EVICT_N ? k_names[k] : "?"; }
const char *hx_evict_names(void) { return "lru, lfu, fifo, s3fifo"; }

int hx_evict_parse(const char *s, hx_evict_kind *out) {
    for (int k = 0; k < HX_EVICT_N; k++)
        if (s && !strcmp(s, k_names[k])) { *out = (hx_evict_kind)k; return ENG_OK; }
    return ENG_ERR_ARG;
}

hx_evict *hx_evict_new(hx_evict_kind kind, int64_t capacity) {
    if (kind < 0 || kind >= HX_EVICT_N || capacity < 0) return NULL;
    hx_evict *e = calloc(1, sizeof *e);
    if (!e) return NULL;
    e->kind = kind;
    e->cap = capacity;
    for (int q = 0; q < 3; q++) e->head[q] = e->tail[q] = -1;
    return e;
}

void hx_evict_free(hx_evict *e) {
    if (!e) return;
    free(e->e);
    free(e->heap);
    free(e->ring);
    free(e->gmap);
    free(e);
}

hx_evict_kind hx_evict_kind_of(const hx_evict *e) { return e->kind; }
void hx_evict_monotone(hx_evict *e) { e->mono = e->kind == HX_EVICT_LRU; }
int32_t hx_evict_entries(const hx_evict *e) { return e->live; }
int32_t hx_evict_candidates(const hx_evict *e) { return e->cands; }

static ent *get(hx_evict *e, int32_t id) {
    ENG_ASSERT(id >= 0 && id < e->n_e && e->e[id].live);
    return &e->e[id];
}

// ----------------------------------------------------------------------------
// The heap (lru, lfu, fifo): candidates, least first

static bool less(const hx_evict *e, int32_t a, int32_t b) {
    const ent *x = &e->e[a], *y = &e->e[b];
    if (e->kind == HX_EVICT_FIFO) {
        if (x->created != y->created) return x->created < y->created;
        return x->seq < y->seq;
    }
    if (e->kind == HX_EVICT_LFU && x->hits != y->hits) return x->hits < y->hits;
    if (x->last != y->last) return x->last < y->last;  /* lru, and lfu's ties */
    return x->seq < y->seq;
}

static void heap_set(hx_evict *e, int32_t pos, int32_t id) {
    e->heap[pos] = id;
    e->e[id].heap = pos;
}

static void sift_up(hx_evict *e, int32_t pos) {
    int32_t id = e->heap[pos];
    while (pos > 0) {
        int32_t up = (pos - 1) / 2;
        if (!less(e, id, e->heap[up])) break;
        heap_set(e, pos, e->heap[up]);
        pos = up;
    }
    heap_set(e, pos, id);
}

static void sift_down(hx_evict *e, int32_t pos) {
    int32_t id = e->heap[pos];
    for (;;) {
        int32_t c = 2 * pos + 1;
        if (c >= e->n_heap) break;
        if (c + 1 < e->n_heap && less(e, e->heap[c + 1], e->heap[c])) c++;
        if (!less(e, e->heap[c], id)) break;
        heap_set(e, pos, e->heap[c]);
        pos = c;
    }
    heap_set(e, pos, id);
}

static int heap_push(hx_evict *e, int32_t id) {
    if (e->n_heap == e->cap_heap) {
        int32_t cap = e->cap_heap ? 2 * e->cap_heap : 256;
        int32_t *h = realloc(e->heap, sizeof *h * (size_t)cap);
        if (!h) return ENG_ERR_NOMEM;
        e->heap = h;
        e->cap_heap = cap;
    }
    heap_set(e, e->n_heap++, id);
    sift_up(e, e->n_heap - 1);
    return ENG_OK;
}

static void heap_remove(hx_evict *e, int32_t id) {
    int32_t pos = e->e[id].heap;
    if (pos < 0) return;
    e->e[id].heap = -1;
    int32_t last = e->heap[--e->n_heap];
    if (pos == e->n_heap) return;
    heap_set(e, pos, last);
    sift_up(e, pos);
    sift_down(e, e->e[last].heap);
}

/* id's key changed: restore the heap order. */
static void heap_fix(hx_evict *e, int32_t id) {
    int32_t pos = e->e[id].heap;
    if (pos < 0) return;
    sift_up(e, pos);
    sift_down(e, e->e[id].heap);
}

// ----------------------------------------------------------------------------
// s3fifo's queues (head: newest) and its ghost

static void q_unlink(hx_evict *e, int32_t id) {
    ent *x = &e->e[id];
    if (x->queue == Q_NONE) return;
    int q = x->queue;
    if (x->prev >= 0) e->e[x->prev].next = x->next;
    else e->head[q] = x->next;
    if (x->next >= 0) e->e[x->next].prev = x->prev;
    else e->tail[q] = x->prev;
    e->qn[q]--;
    e->qsize[q] -= x->size;
    x->prev = x->next = -1;
    x->queue = Q_NONE;
}

static void q_push_head(hx_evict *e, int q, int32_t id) {
    ent *x = &e->e[id];
    x->queue = (uint8_t)q;
    x->prev = -1;
    x->next = e->head[q];
    if (e->head[q] >= 0) e->e[e->head[q]].prev = id;
    else e->tail[q] = id;
    e->head[q] = id;
    e->qn[q]++;
    e->qsize[q] += x->size;
}

/* id goes into lower's queue right after lower (on its tail side). */
static void q_insert_after(hx_evict *e, int32_t lower, int32_t id) {
    ent *l = &e->e[lower], *x = &e->e[id];
    int q = l->queue;
    x->queue = (uint8_t)q;
    x->prev = lower;
    x->next = l->next;
    if (l->next >= 0) e->e[l->next].prev = id;
    else e->tail[q] = id;
    l->next = id;
    e->qn[q]++;
    e->qsize[q] += x->size;
}

static int64_t gmap_slot(const hx_evict *e, uint64_t key) {
    int64_t mask = e->gmap_cap - 1, i = (int64_t)(key * 0x9E3779B97F4A7C15ULL >> 17) & mask;
    while (e->gmap[i].key && e->gmap[i].key != key) i = (i + 1) & mask;
    return i;
}

static int gmap_grow(hx_evict *e) {
    int64_t cap = e->gmap_cap ? 2 * e->gmap_cap : 1024;
    gslot *old = e->gmap;
    int64_t old_cap = e->gmap_cap;
    if (!(e->gmap = calloc((size_t)cap, sizeof *e->gmap))) { e->gmap = old; return ENG_ERR_NOMEM; }
    e->gmap_cap = cap;
    for (int64_t i = 0; i < old_cap; i++)
        if (old[i].key) e->gmap[gmap_slot(e, old[i].key)] = old[i];
    free(old);
    return ENG_OK;
}

/* Deletes the slot of key (backward-shift: no tombstones). */
static void gmap_del(hx_evict *e, uint64_t key) {
    int64_t mask = e->gmap_cap - 1, i = gmap_slot(e, key);
    if (!e->gmap[i].key) return;
    e->gmap_n--;
    for (int64_t j = i;;) {
        e->gmap[i].key = 0;
        for (;;) {
            j = (j + 1) & mask;
            if (!e->gmap[j].key) return;
            int64_t home = (int64_t)(e->gmap[j].key * 0x9E3779B97F4A7C15ULL >> 17) & mask;
            if ((j > i && (home <= i || home > j)) || (j < i && home <= i && home > j)) break;
        }
        e->gmap[i] = e->gmap[j];
        i = j;
    }
}

static ghost_ent *ring_at(hx_evict *e, int64_t pos) { return &e->ring[pos % e->ring_cap]; }

static void ghost_pop(hx_evict *e) {
    ghost_ent *g = ring_at(e, e->g_lo);
    if (g->valid) {
        int64_t i = gmap_slot(e, g->ident);
        if (e->gmap[i].key && e->gmap[i].idx == e->g_lo) gmap_del(e, g->ident);
        e->g_size -= g->size;
    }
    e->g_lo++;
}

static void ghost_add(hx_evict *e, uint64_t ident, int64_t size) {
    int64_t limit = e->cap * S3_GHOST_PCT / 100;
    if (!ident || size > limit) return;
    if (e->g_hi - e->g_lo == e->ring_cap) {  /* grow the ring (positions stay absolute) */
        int64_t cap = e->ring_cap ? 2 * e->ring_cap : 256;
        ghost_ent *r = malloc(sizeof *r * (size_t)cap);
        if (!r) { ghost_pop(e); if (e->g_hi - e->g_lo == e->ring_cap) return; }
        else {
            for (int64_t p = e->g_lo; p < e->g_hi; p++) r[p % cap] = *ring_at(e, p);
            free(e->ring);
            e->ring = r;
            e->ring_cap = cap;
        }
    }
    if ((e->gmap_n + 1) * 2 > e->gmap_cap && gmap_grow(e) != ENG_OK) return;
    *ring_at(e, e->g_hi) = (ghost_ent){ident, size, true};
    int64_t i = gmap_slot(e, ident);
    if (!e->gmap[i].key) e->gmap_n++;
    e->gmap[i] = (gslot){ident, e->g_hi};
    e->g_hi++;
    e->g_size += size;
    while (e->g_size > limit) ghost_pop(e);
}

/* Takes ident out of the ghost: true when it was there. */
static bool ghost_take(hx_evict *e, uint64_t ident) {
    if (!ident || !e->gmap_n) return false;
    int64_t i = gmap_slot(e, ident);
    if (!e->gmap[i].key) return false;
    ghost_ent *g = ring_at(e, e->gmap[i].idx);
    g->valid = false;
    e->g_size -= g->size;
    gmap_del(e, ident);
    return true;
}

// ----------------------------------------------------------------------------
// Entries

static int ensure(hx_evict *e, int32_t id) {
    if (id < e->n_e) return ENG_OK;
    int32_t n = e->n_e ? e->n_e : 256;
    while (n <= id) n *= 2;
    ent *g = realloc(e->e, sizeof *g * (size_t)n);
    if (!g) return ENG_ERR_NOMEM;
    memset(g + e->n_e, 0, sizeof *g * (size_t)(n - e->n_e));
    e->e = g;
    e->n_e = n;
    return ENG_OK;
}

int hx_evict_add(hx_evict *e, int32_t id, uint64_t stamp, uint64_t ident, int64_t size) {
    ENG_ASSERT(id >= 0);
    if (ensure(e, id) != ENG_OK) return ENG_ERR_NOMEM;
    ent *x = &e->e[id];
    ENG_ASSERT(!x->live);
    *x = (ent){.last = stamp, .created = stamp, .seq = ++e->seq, .ident = ident, .size = size, .live = true,
               .heap = -1, .prev = -1, .next = -1};
    e->live++;
    if (e->kind == HX_EVICT_S3FIFO) q_push_head(e, ghost_take(e, ident) ? Q_M : Q_S, id);
    return ENG_OK;
}

int hx_evict_split(hx_evict *e, int32_t upper, int32_t lower, int64_t size, uint64_t ident) {
    if (ensure(e, upper) != ENG_OK) return ENG_ERR_NOMEM;
    hx_evict_candidate(e, lower, false);
    ent *l = get(e, lower), *u = &e->e[upper];
    ENG_ASSERT(!u->live && size < l->size);
    *u = *l;
    u->seq = ++e->seq;
    u->ident = ident;
    u->size = size;
    u->heap = u->prev = u->next = -1;
    u->queue = Q_NONE;
    u->cand = false;
    e->live++;
    if (l->queue != Q_NONE) {
        e->qsize[l->queue] -= size;
        l->size -= size;
        q_insert_after(e, lower, upper);
    } else {
        l->size -= size;
    }
    return ENG_OK;
}

void hx_evict_hit(hx_evict *e, int32_t id) {
    ent *x = get(e, id);
    x->hits++;
    if (x->freq < S3_FREQ_MAX) x->freq++;
    if (e->kind == HX_EVICT_LFU) heap_fix(e, id);
}

void hx_evict_use(hx_evict *e, int32_t id, uint64_t stamp) {
    ent *x = get(e, id);
    x->last = stamp;
    if (e->mono) {
        if (x->cand) {  /* the newest now: to the head */
            q_unlink(e, id);
            q_push_head(e, Q_M, id);
        }
    } else if (e->kind == HX_EVICT_LRU || e->kind == HX_EVICT_LFU) {
        heap_fix(e, id);
    }
}

void hx_evict_candidate(hx_evict *e, int32_t id, bool on) {
    ent *x = get(e, id);
    if (x->cand == on) return;
    x->cand = on;
    e->cands += on ? 1 : -1;
    if (e->kind == HX_EVICT_S3FIFO) return;
    if (e->mono) {
        if (on) q_push_head(e, Q_M, id);
        else q_unlink(e, id);
        return;
    }
    if (on) {
        if (heap_push(e, id) != ENG_OK) {  /* out of memory: it stays, never chosen */
            x->cand = false;
            e->cands--;
        }
    } else {
        heap_remove(e, id);
    }
}

bool hx_evict_is_candidate(const hx_evict *e, int32_t id) {
    return id >= 0 && id < e->n_e && e->e[id].live && e->e[id].cand;
}

void hx_evict_drop(hx_evict *e, int32_t id, bool evicted) {
    ent *x = get(e, id);
    hx_evict_candidate(e, id, false);
    if (e->kind == HX_EVICT_S3FIFO) {
        if (evicted && x->queue == Q_S) ghost_add(e, x->ident, x->size);
        q_unlink(e, id);
    }
    x->live = false;
    e->live--;
}

/* S3-FIFO's choice (see evict.h). Entries that are not candidates are moved
 * to their queue's head; a queue whose every entry was skipped in a row has
 * no candidate. */
static int32_t s3_victim(hx_evict *e) {
    int64_t small = e->cap * S3_SMALL_PCT / 100;
    bool s_dry = false, m_dry = false;
    int32_t skipped_s = 0, skipped_m = 0;
    while (e->cands > 0) {
        bool use_s = !s_dry && e->qn[Q_S] > 0 && (e->qsize[Q_S] >= small || m_dry || e->qn[Q_M] == 0);
        if (!use_s && (m_dry || e->qn[Q_M] == 0)) return -1;
        int q = use_s ? Q_S : Q_M;
        int32_t t = e->tail[q];
        ent *x = &e->e[t];
        if (!x->cand) {
            q_unlink(e, t);
            q_push_head(e, q, t);
            if (use_s && ++skipped_s >= e->qn[Q_S]) s_dry = true;
            if (!use_s && ++skipped_m >= e->qn[Q_M]) m_dry = true;
            continue;
        }
        if (use_s) {
            if (x->freq >= S3_PROMOTE) {
                q_unlink(e, t);
                x->freq = 0;
                q_push_head(e, Q_M, t);
                skipped_m = 0;
                m_dry = false;
                continue;
            }
            return t;
        }
        if (x->freq > 0) {
            x->freq--;
            q_unlink(e, t);
            q_push_head(e, Q_M, t);
            skipped_m = 0;
            continue;
        }
        return t;
    }
    return -1;
}

int32_t hx_evict_victim(hx_evict *e) {
    if (e->kind == HX_EVICT_S3FIFO) return s3_victim(e);
    if (e->mono) return e->tail[Q_M];
    return e->n_heap > 0 ? e->heap[0] : -1;
}
