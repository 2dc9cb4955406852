/*
 * harness/cache/blockpool.h: vLLM's KV block pool (vllm/v1/core/block_pool.py,
 * docs/design/prefix_caching.md), as a data structure without KV: block
 * hashes chained over the prompt, the hash-to-block map, reference counts
 * and the free queue whose head is evicted (LRU).
 *
 * A block holds block_size tokens. Its hash covers its parent block's hash,
 * its own token ids and, for the first block, extra keys (vLLM's cache salt):
 * XXH3-64 with a fixed seed (vLLM's NONE_HASH is random unless PYTHONHASHSEED
 * is set; ours is fixed so runs repeat). A change in block k changes the
 * hashes of k and of every block after it, so a lookup, which walks the
 * chain from block 0 and stops at the first hash it does not find, misses
 * from k on. Only full blocks are cached. Several blocks can carry one hash
 * (vLLM's block table is append-only: a recomputed block is cached again);
 * a lookup takes the oldest acceptable one.
 *
 * The free blocks: blocks with no user. A request's blocks are freed in
 * reverse order (its last block first), each taking a release stamp, so a
 * sequence's tail goes before its head. Allocation takes a block never used
 * before while the pool has one, else a free block: under lru (vLLM's free
 * queue) the least recently freed, cached or not; under the other orders of
 * evict.h (lfu, fifo, s3fifo) an uncached free block first, else the
 * victim among the cached free blocks. Evicting a cached block hands it to
 * on_evict first, to free its payload. capacity 0 means unbounded: nothing
 * is ever evicted.
 *
 * The same code serves replay (tokens are token ids, B = the block size)
 * and simulate (tokens are the words of trace block ids, B = words per
 * block; cache/policies/block_hash.c): only what a "token" is differs.
 *
 * Workload: a few hundred blocks per request, lookups of a few hundred
 * hashes; the map is open addressing over 64-bit hashes; up to millions of
 * blocks in simulate.
 */
#ifndef HX_BLOCKPOOL_H
#define HX_BLOCKPOOL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "evict.h"

typedef struct hx_block {
    uint64_t hash;     /* 0 when not cached */
    uint64_t parent;   /* the parent block's hash, 0 for the first block */
    int32_t  index;    /* block number in its sequence: tokens [index * B, index * B + B) */
    int32_t  ref;      /* requests using it */
    int32_t  dup;      /* the next cached block with the same hash (newer), -1 */
    int32_t  free_next;/* the next uncached free block (freed later), -1 */
    bool     free;     /* ref 0 (a candidate when cached, on the free list when not) */
    uint64_t stamp;    /* when it was last freed */
    void    *data;     /* the policy's payload while cached */
} hx_block;

typedef struct hx_blockpool hx_blockpool;

/* Called on a cached block about to lose its contents (eviction or
 * hx_blockpool_free); frees b->data. */
typedef void (*hx_block_evict_fn)(void *ud, hx_block *b);
/* Whether a cached block may serve a lookup (NULL: every one). */
typedef bool (*hx_block_accept_fn)(void *ud, const hx_block *b);

/* block_size >= 1 tokens per block; capacity blocks (0: unbounded); vLLM's
 * lru order. NULL on OOM or a bad argument. */
hx_blockpool *hx_blockpool_new(int32_t block_size, int32_t capacity, hx_block_evict_fn on_evict, void *ud);
/* The same with another eviction order (evict.h). */
hx_blockpool *hx_blockpool_new_evict(int32_t block_size, int32_t capacity, hx_evict_kind kind,
                                     hx_block_evict_fn on_evict, void *ud);
/* Calls on_evict on every cached block, then frees the pool. Accepts NULL. */
void hx_blockpool_free(hx_blockpool *p);

/* The hash of a full block: parent's hash (0 for none), its tokens (B ids),
 * extra bytes (NULL/0 for none). Never 0. */
uint64_t hx_block_hash(uint64_t parent, const int32_t *tokens, int32_t block_size, const void *extra, size_t n_extra);
/* The chained hashes of the n / B full blocks of tokens into out; the salt
 * (may be NULL) is the first block's extra key. Returns n / B. */
int32_t  hx_block_hashes(const int32_t *tokens, int32_t n, int32_t block_size, const char *salt, uint64_t *out);

/* The oldest cached block with this hash, parent and token ids that accept
 * takes (accept NULL: any), or -1. */
int32_t hx_blockpool_find(hx_blockpool *p, uint64_t hash, uint64_t parent, const int32_t *tokens,
                          hx_block_accept_fn accept, void *ud);
/* Block id; the pointer is valid until the next hx_blockpool_alloc. */
hx_block *hx_blockpool_get(hx_blockpool *p, int32_t id);
/* Block id's token ids (B) while cached; valid until the next hx_blockpool_alloc. */
const int32_t *hx_blockpool_tokens(const hx_blockpool *p, int32_t id);
/* A cache hit: one more user; the block leaves the free queue. */
void    hx_blockpool_touch(hx_blockpool *p, int32_t id);
/* A block for a running request (one user, not cached), evicting the free
 * queue's head when the pool is full; -1 when every block is in use. */
int32_t hx_blockpool_alloc(hx_blockpool *p);
/* Caches block id (allocated, full) under hash: after the blocks already
 * cached with that hash. tokens (B ids) are copied. ENG_OK or ENG_ERR_NOMEM. */
int     hx_blockpool_cache(hx_blockpool *p, int32_t id, uint64_t hash, uint64_t parent, int32_t index,
                           const int32_t *tokens, void *data);
/* A request ends: each of its n blocks (in request order) loses a user; those
 * left unused join the free queue's tail, last block first. */
void    hx_blockpool_release(hx_blockpool *p, const int32_t *ids, int32_t n);

int32_t hx_blockpool_block_size(const hx_blockpool *p);
int32_t hx_blockpool_cached(const hx_blockpool *p);     /* blocks with a hash */
int64_t hx_blockpool_evictions(const hx_blockpool *p);  /* cached blocks evicted so far */
/* Blocks allocated so far (never more than the capacity). */
int32_t hx_blockpool_blocks(const hx_blockpool *p);
/* Visits every cached block (any order). */
void    hx_blockpool_each(hx_blockpool *p, void (*fn)(void *ud, hx_block *b), void *ud);
/* Checks the invariants: at most capacity blocks; every cached block found
 * by its hash in the map, every map entry a cached block; the cached count;
 * the free blocks are exactly those with no user. ENG_OK, or ENG_ERR_FORMAT
 * with the first broken one in err. */
int     hx_blockpool_check(hx_blockpool *p, char *err, size_t errlen);

#endif /* HX_BLOCKPOOL_H */
