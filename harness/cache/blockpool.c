/*
 * harness/cache/blockpool.c: block hashes, the hash map, the free queue
 * (see blockpool.h).
 */
#include "blockpool.h"

#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "status.h"

/* The hash chain's starting point (vLLM's NONE_HASH), fixed so runs repeat. */
#define NONE_SEED 0x6b7672706c617931ULL  /* "kvrplay1" */

#define SLOT_EMPTY (-1)
#define SLOT_GONE  (-2)

typedef struct slot {
    uint64_t hash;
    int32_t  head;  /* first (oldest) block with the hash, or SLOT_EMPTY / SLOT_GONE */
} slot;

struct hx_blockpool {
    int32_t           B;
    int32_t           capacity;   /* 0: unbounded */
    hx_block         *blocks;
    int32_t           n_blocks, cap_blocks;
    int32_t           head, tail; /* free queue: head = least recently freed */
    int32_t           n_cached;
    int64_t           evictions;
    slot             *map;
    int32_t           map_cap, map_used;  /* used: live + gone slots */
    hx_block_evict_fn on_evict;
    void             *ud;
};

// ----------------------------------------------------------------------------
// Hashes

uint64_t hx_block_hash(uint64_t parent, const int32_t *tokens, int32_t block_size, const void *extra, size_t n_extra) {
    uint64_t h = XXH3_64bits_withSeed(tokens, sizeof(int32_t) * (size_t)block_size, parent ^ NONE_SEED);
    if (extra && n_extra) h = XXH3_64bits_withSeed(extra, n_extra, h);
    return h ? h : 1;
}

int32_t hx_block_hashes(const int32_t *tokens, int32_t n, int32_t block_size, const char *salt, uint64_t *out) {
    int32_t nb = n / block_size;
    uint64_t parent = 0;
    for (int32_t i = 0; i < nb; i++) {
        bool first = i == 0 && salt && *salt;
        parent = out[i] = hx_block_hash(parent, tokens + (size_t)i * block_size, block_size, first ? salt : NULL,
                                        first ? strlen(salt) : 0);
    }
    return nb;
}

// ----------------------------------------------------------------------------
// The map: hash -> the oldest block with it (open addressing, linear probing)

static slot *map_find(hx_blockpool *p, uint64_t h) {
    if (!p->map_cap) return NULL;
    for (int32_t i = (int32_t)(h & (uint64_t)(p->map_cap - 1));; i = (i + 1) & (p->map_cap - 1)) {
        slot *s = &p->map[i];
        if (s->head == SLOT_EMPTY) return NULL;
        if (s->head >= 0 && s->hash == h) return s;
    }
}

static int map_grow(hx_blockpool *p) {
    int32_t cap = p->map_cap ? 2 * p->map_cap : 1024;
    while (p->n_cached * 2 >= cap) cap *= 2;
    slot *m = malloc(sizeof *m * (size_t)cap);
    if (!m) return ENG_ERR_NOMEM;
    for (int32_t i = 0; i < cap; i++) m[i].head = SLOT_EMPTY;
    int32_t used = 0;
    for (int32_t i = 0; i < p->map_cap; i++) {
        if (p->map[i].head < 0) continue;
        int32_t j = (int32_t)(p->map[i].hash & (uint64_t)(cap - 1));
        while (m[j].head != SLOT_EMPTY) j = (j + 1) & (cap - 1);
        m[j] = p->map[i];
        used++;
    }
    free(p->map);
    p->map = m;
    p->map_cap = cap;
    p->map_used = used;
    return ENG_OK;
}

/* The slot for h, inserted empty-headed when absent. */
static slot *map_put(hx_blockpool *p, uint64_t h) {
    slot *s = map_find(p, h);
    if (s) return s;
    if ((p->map_used + 1) * 2 > p->map_cap && map_grow(p) != ENG_OK) return NULL;
    int32_t i = (int32_t)(h & (uint64_t)(p->map_cap - 1));
    while (p->map[i].head >= 0) i = (i + 1) & (p->map_cap - 1);
    if (p->map[i].head == SLOT_EMPTY) p->map_used++;
    p->map[i].hash = h;
    p->map[i].head = SLOT_GONE;  /* the caller sets the head */
    return &p->map[i];
}

// ----------------------------------------------------------------------------
// The free queue

static void queue_remove(hx_blockpool *p, hx_block *b) {
    if (!b->queued) return;
    if (b->prev >= 0) p->blocks[b->prev].next = b->next;
    else p->head = b->next;
    if (b->next >= 0) p->blocks[b->next].prev = b->prev;
    else p->tail = b->prev;
    b->prev = b->next = -1;
    b->queued = false;
}

static void queue_append(hx_blockpool *p, int32_t id) {
    hx_block *b = &p->blocks[id];
    b->prev = p->tail;
    b->next = -1;
    if (p->tail >= 0) p->blocks[p->tail].next = id;
    else p->head = id;
    p->tail = id;
    b->queued = true;
}

// ----------------------------------------------------------------------------
// The pool

hx_blockpool *hx_blockpool_new(int32_t block_size, int32_t capacity, hx_block_evict_fn on_evict, void *ud) {
    if (block_size < 1 || capacity < 0) return NULL;
    hx_blockpool *p = calloc(1, sizeof *p);
    if (!p) return NULL;
    p->B = block_size;
    p->capacity = capacity;
    p->head = p->tail = -1;
    p->on_evict = on_evict;
    p->ud = ud;
    return p;
}

/* Takes block id's contents out of the cache (payload freed by on_evict). */
static void uncache(hx_blockpool *p, int32_t id) {
    hx_block *b = &p->blocks[id];
    if (!b->hash) return;
    slot *s = map_find(p, b->hash);
    ENG_ASSERT(s != NULL);
    if (s->head == id) {
        s->head = b->dup >= 0 ? b->dup : SLOT_GONE;
    } else {
        int32_t k = s->head;
        while (p->blocks[k].dup != id) k = p->blocks[k].dup;
        p->blocks[k].dup = b->dup;
    }
    if (p->on_evict) p->on_evict(p->ud, b);
    free(b->tokens);
    b->tokens = NULL;
    b->data = NULL;
    b->hash = b->parent = 0;
    b->dup = -1;
    p->n_cached--;
}

void hx_blockpool_free(hx_blockpool *p) {
    if (!p) return;
    for (int32_t i = 0; i < p->n_blocks; i++) uncache(p, i);
    free(p->blocks);
    free(p->map);
    free(p);
}

int32_t hx_blockpool_find(hx_blockpool *p, uint64_t hash, uint64_t parent, const int32_t *tokens,
                          hx_block_accept_fn accept, void *ud) {
    slot *s = map_find(p, hash);
    for (int32_t k = s ? s->head : -1; k >= 0; k = p->blocks[k].dup) {
        const hx_block *b = &p->blocks[k];
        if (b->parent != parent || memcmp(b->tokens, tokens, sizeof(int32_t) * (size_t)p->B) != 0) continue;
        if (!accept || accept(ud, b)) return k;
    }
    return -1;
}

hx_block *hx_blockpool_get(hx_blockpool *p, int32_t id) {
    ENG_ASSERT(id >= 0 && id < p->n_blocks);
    return &p->blocks[id];
}

void hx_blockpool_touch(hx_blockpool *p, int32_t id) {
    hx_block *b = hx_blockpool_get(p, id);
    queue_remove(p, b);
    b->ref++;
}

int32_t hx_blockpool_alloc(hx_blockpool *p) {
    int32_t id;
    if (p->capacity == 0 || p->n_blocks < p->capacity) {  /* a block never used before */
        if (p->n_blocks == p->cap_blocks) {
            int32_t cap = p->cap_blocks ? 2 * p->cap_blocks : 256;
            if (p->capacity && cap > p->capacity) cap = p->capacity;
            hx_block *nb = realloc(p->blocks, sizeof *nb * (size_t)cap);
            if (!nb) return -1;
            p->blocks = nb;
            p->cap_blocks = cap;
        }
        id = p->n_blocks++;
        p->blocks[id] = (hx_block){.prev = -1, .next = -1, .dup = -1};
    } else {
        if (p->head < 0) return -1;  /* every block is in use */
        id = p->head;
        queue_remove(p, &p->blocks[id]);
        if (p->blocks[id].hash) {
            uncache(p, id);
            p->evictions++;
        }
    }
    p->blocks[id].ref = 1;
    p->blocks[id].index = -1;
    return id;
}

int hx_blockpool_cache(hx_blockpool *p, int32_t id, uint64_t hash, uint64_t parent, int32_t index,
                       const int32_t *tokens, void *data) {
    hx_block *b = hx_blockpool_get(p, id);
    ENG_ASSERT(b->hash == 0 && hash != 0);
    int32_t *t = malloc(sizeof(int32_t) * (size_t)p->B);
    if (!t) return ENG_ERR_NOMEM;
    p->n_cached++;  /* counted first: map_grow sizes for it */
    slot *s = map_put(p, hash);
    if (!s) { p->n_cached--; free(t); return ENG_ERR_NOMEM; }
    memcpy(t, tokens, sizeof(int32_t) * (size_t)p->B);
    b->tokens = t;
    b->hash = hash;
    b->parent = parent;
    b->index = index;
    b->data = data;
    b->dup = -1;
    if (s->head < 0) {
        s->head = id;
    } else {  /* after the older blocks with this hash */
        int32_t k = s->head;
        while (p->blocks[k].dup >= 0) k = p->blocks[k].dup;
        p->blocks[k].dup = id;
    }
    return ENG_OK;
}

void hx_blockpool_release(hx_blockpool *p, const int32_t *ids, int32_t n) {
    for (int32_t i = n - 1; i >= 0; i--) {
        hx_block *b = hx_blockpool_get(p, ids[i]);
        ENG_ASSERT(b->ref > 0);
        if (--b->ref == 0) queue_append(p, ids[i]);
    }
}

int32_t hx_blockpool_block_size(const hx_blockpool *p) { return p->B; }
int32_t hx_blockpool_cached(const hx_blockpool *p) { return p->n_cached; }
int64_t hx_blockpool_evictions(const hx_blockpool *p) { return p->evictions; }

void hx_blockpool_each(hx_blockpool *p, void (*fn)(void *ud, hx_block *b), void *ud) {
    for (int32_t i = 0; i < p->n_blocks; i++)
        if (p->blocks[i].hash) fn(ud, &p->blocks[i]);
}
