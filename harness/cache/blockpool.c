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
    int32_t          *tokens;     /* (cap_blocks * B) each block's token ids while cached */
    int32_t           n_blocks, cap_blocks;
    hx_evict         *ev;         /* the cached blocks' order; candidates: the free ones */
    int32_t           free_head, free_tail;  /* uncached free blocks, least recently freed first */
    uint64_t          clock;      /* stamps: a release, a block cached */
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

/* Rebuilds the map for the live entries (dropping the gone ones), at a
 * size where they fill at most a quarter of it. */
static int map_grow(hx_blockpool *p) {
    int32_t cap = 1024;
    while (p->n_cached * 4 >= cap) cap *= 2;
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
// The free blocks: cached ones are candidates of the eviction order, uncached
// ones wait on a list in release order

static void free_list_append(hx_blockpool *p, int32_t id) {
    p->blocks[id].free_next = -1;
    if (p->free_tail >= 0) p->blocks[p->free_tail].free_next = id;
    else p->free_head = id;
    p->free_tail = id;
}

static int32_t free_list_pop(hx_blockpool *p) {
    int32_t id = p->free_head;
    if (id < 0) return -1;
    p->free_head = p->blocks[id].free_next;
    if (p->free_head < 0) p->free_tail = -1;
    p->blocks[id].free_next = -1;
    return id;
}

// ----------------------------------------------------------------------------
// The pool

hx_blockpool *hx_blockpool_new_evict(int32_t block_size, int32_t capacity, hx_evict_kind kind,
                                     hx_block_evict_fn on_evict, void *ud) {
    if (block_size < 1 || capacity < 0) return NULL;
    hx_blockpool *p = calloc(1, sizeof *p);
    if (!p || !(p->ev = hx_evict_new(kind, capacity))) { free(p); return NULL; }
    hx_evict_monotone(p->ev);  /* lru: blocks become candidates as they are freed, stamped then */
    p->B = block_size;
    p->capacity = capacity;
    p->free_head = p->free_tail = -1;
    p->on_evict = on_evict;
    p->ud = ud;
    return p;
}

hx_blockpool *hx_blockpool_new(int32_t block_size, int32_t capacity, hx_block_evict_fn on_evict, void *ud) {
    return hx_blockpool_new_evict(block_size, capacity, HX_EVICT_LRU, on_evict, ud);
}

/* Takes block id's contents out of the cache (payload freed by on_evict). */
static void uncache(hx_blockpool *p, int32_t id, bool evicted) {
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
    hx_evict_drop(p->ev, id, evicted);
    b->data = NULL;
    b->hash = b->parent = 0;
    b->dup = -1;
    p->n_cached--;
}

void hx_blockpool_free(hx_blockpool *p) {
    if (!p) return;
    for (int32_t i = 0; i < p->n_blocks; i++) uncache(p, i, false);
    hx_evict_free(p->ev);
    free(p->blocks);
    free(p->tokens);
    free(p->map);
    free(p);
}

int32_t hx_blockpool_find(hx_blockpool *p, uint64_t hash, uint64_t parent, const int32_t *tokens,
                          hx_block_accept_fn accept, void *ud) {
    slot *s = map_find(p, hash);
    for (int32_t k = s ? s->head : -1; k >= 0; k = p->blocks[k].dup) {
        const hx_block *b = &p->blocks[k];
        if (b->parent != parent ||
            memcmp(p->tokens + (size_t)k * (size_t)p->B, tokens, sizeof(int32_t) * (size_t)p->B) != 0)
            continue;
        if (!accept || accept(ud, b)) return k;
    }
    return -1;
}

hx_block *hx_blockpool_get(hx_blockpool *p, int32_t id) {
    ENG_ASSERT(id >= 0 && id < p->n_blocks);
    return &p->blocks[id];
}

const int32_t *hx_blockpool_tokens(const hx_blockpool *p, int32_t id) {
    ENG_ASSERT(id >= 0 && id < p->n_blocks && p->blocks[id].hash);
    return p->tokens + (size_t)id * (size_t)p->B;
}

void hx_blockpool_touch(hx_blockpool *p, int32_t id) {
    hx_block *b = hx_blockpool_get(p, id);
    ENG_ASSERT(b->hash != 0);
    if (b->free) hx_evict_candidate(p->ev, id, false);
    b->free = false;
    hx_evict_hit(p->ev, id);
    b->ref++;
}

/* The free block to reuse: under lru the least recently freed, cached or not
 * (vLLM's one free queue); else an uncached one first. -1 when none. */
static int32_t take_free(hx_blockpool *p) {
    int32_t victim = hx_evict_victim(p->ev), empty = p->free_head;
    if (victim >= 0 && empty >= 0 && hx_evict_kind_of(p->ev) == HX_EVICT_LRU &&
        p->blocks[victim].stamp < p->blocks[empty].stamp)
        empty = -1;
    if (empty >= 0) return free_list_pop(p);
    if (victim < 0) return -1;
    uncache(p, victim, true);
    p->evictions++;
    return victim;
}

int32_t hx_blockpool_alloc(hx_blockpool *p) {
    int32_t id;
    int32_t limit = p->capacity + ((hx_cache_faults & HX_FAULT_OVER_CAPACITY) ? 1 : 0);
    if (p->capacity == 0 || p->n_blocks < limit) {  /* a block never used before */
        if (p->n_blocks == p->cap_blocks) {
            int32_t cap = p->cap_blocks ? 2 * p->cap_blocks : 256;
            if (p->capacity && cap > limit) cap = limit;
            hx_block *nb = realloc(p->blocks, sizeof *nb * (size_t)cap);
            if (!nb) return -1;
            p->blocks = nb;
            int32_t *nt = realloc(p->tokens, sizeof *nt * (size_t)cap * (size_t)p->B);
            if (!nt) return -1;
            p->tokens = nt;
            p->cap_blocks = cap;
        }
        id = p->n_blocks++;
        p->blocks[id] = (hx_block){.dup = -1, .free_next = -1};
    } else if ((id = take_free(p)) < 0) {
        return -1;  /* every block is in use */
    }
    p->blocks[id].free = false;
    p->blocks[id].ref = 1;
    p->blocks[id].index = -1;
    return id;
}

int hx_blockpool_cache(hx_blockpool *p, int32_t id, uint64_t hash, uint64_t parent, int32_t index,
                       const int32_t *tokens, void *data) {
    hx_block *b = hx_blockpool_get(p, id);
    ENG_ASSERT(b->hash == 0 && hash != 0 && !b->free);
    if (hx_evict_add(p->ev, id, ++p->clock, hash, 1) != ENG_OK) return ENG_ERR_NOMEM;
    p->n_cached++;  /* counted first: map_grow sizes for it */
    slot *s = map_put(p, hash);
    if (!s) { p->n_cached--; hx_evict_drop(p->ev, id, false); return ENG_ERR_NOMEM; }
    memcpy(p->tokens + (size_t)id * (size_t)p->B, tokens, sizeof(int32_t) * (size_t)p->B);
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
        if (--b->ref > 0) continue;
        b->free = true;
        b->stamp = ++p->clock;
        if (b->hash) {
            hx_evict_use(p->ev, ids[i], b->stamp);
            hx_evict_candidate(p->ev, ids[i], true);
        } else {
            free_list_append(p, ids[i]);
        }
    }
}

int32_t hx_blockpool_block_size(const hx_blockpool *p) { return p->B; }
int32_t hx_blockpool_cached(const hx_blockpool *p) { return p->n_cached; }
int64_t hx_blockpool_evictions(const hx_blockpool *p) { return p->evictions; }
int32_t hx_blockpool_blocks(const hx_blockpool *p) { return p->n_blocks; }

void hx_blockpool_each(hx_blockpool *p, void (*fn)(void *ud, hx_block *b), void *ud) {
    for (int32_t i = 0; i < p->n_blocks; i++)
        if (p->blocks[i].hash) fn(ud, &p->blocks[i]);
}

int hx_blockpool_check(hx_blockpool *p, char *err, size_t errlen) {
    if (p->capacity && p->n_blocks > p->capacity) {
        eng_errf(err, errlen, "block pool: %d blocks, capacity %d", p->n_blocks, p->capacity);
        return ENG_ERR_FORMAT;
    }
    int32_t cached = 0, on_list = 0;
    for (int32_t k = p->free_head; k >= 0 && on_list <= p->n_blocks; k = p->blocks[k].free_next) on_list++;
    for (int32_t i = 0; i < p->n_blocks; i++) {
        const hx_block *b = &p->blocks[i];
        if (b->free != (b->ref == 0)) {
            eng_errf(err, errlen, "block pool: block %d: ref %d but %s", i, b->ref, b->free ? "free" : "not free");
            return ENG_ERR_FORMAT;
        }
        if (b->hash) {
            cached++;
            if (hx_evict_is_candidate(p->ev, i) != b->free) {
                eng_errf(err, errlen, "block pool: cached block %d: free %d, candidate %d", i, b->free,
                         hx_evict_is_candidate(p->ev, i));
                return ENG_ERR_FORMAT;
            }
            slot *s = map_find(p, b->hash);
            int32_t k = s ? s->head : -1;
            while (k >= 0 && k != i) k = p->blocks[k].dup;
            if (k != i) {
                eng_errf(err, errlen, "block pool: cached block %d: not found under its hash %016llx", i,
                         (unsigned long long)b->hash);
                return ENG_ERR_FORMAT;
            }
        } else if (b->free) {
            on_list--;
        }
    }
    if (on_list != 0) {
        eng_errf(err, errlen, "block pool: the free list and the uncached free blocks differ by %d", on_list);
        return ENG_ERR_FORMAT;
    }
    if (cached != p->n_cached || cached != hx_evict_entries(p->ev)) {
        eng_errf(err, errlen, "block pool: %d cached blocks, counted %d, ordered %d", cached, p->n_cached,
                 hx_evict_entries(p->ev));
        return ENG_ERR_FORMAT;
    }
    for (int32_t i = 0; i < p->map_cap; i++) {
        for (int32_t k = p->map[i].head; k >= 0; k = p->blocks[k].dup)
            if (p->blocks[k].hash != p->map[i].hash) {
                eng_errf(err, errlen, "block pool: the map lists block %d under a hash it does not have", k);
                return ENG_ERR_FORMAT;
            }
    }
    return ENG_OK;
}
