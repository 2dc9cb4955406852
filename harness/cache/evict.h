/*
 * harness/cache/evict.h: the order in which a cache gives up its entries
 * (--evict lru|lfu|fifo|s3fifo), shared by the block pool (blockpool.c),
 * the radix tree (radixtree.c) and the prefix entries of slot-lcp and
 * disk-anchor (prefixset.c), in replay and in simulate alike.
 *
 * An entry is an int32 id chosen by the structure (a block number, a node
 * slot). The structure says which entries may go now (candidates: a free
 * block, an unlocked leaf) and asks for a victim; it then removes the
 * victim itself and reports it with hx_evict_drop. The orders:
 *   lru     least recently used first: smallest `last` stamp, then oldest
 *           insertion (seq);
 *   lfu     fewest hits first, then lru's order (SGLang's LFU strategy:
 *           (hit_count, last_access_time));
 *   fifo    oldest insertion first (`created` stamp, then seq);
 *   s3fifo  S3-FIFO (Yang et al., SOSP'23), with libCacheSim's defaults: a
 *           small FIFO S of 10% of the capacity, a main FIFO M, a ghost G of
 *           the identities of entries evicted from S (up to 90% of the
 *           capacity, by size); a new entry enters M when its identity is in
 *           G, else S; a hit raises its frequency (at most 3); while S holds
 *           10% or more, S's tail is promoted to M (frequency reset) when it
 *           was hit twice or more, else evicted into G; otherwise M's tail is
 *           reinserted at M's head with its frequency lowered by one while it
 *           is above 0, else evicted. An entry that is not a candidate when
 *           it reaches a tail is moved to the head of its queue unchanged.
 * Stamps come from the structure (a walk, a release); `seq` is this
 * module's insertion counter and breaks every tie, so the order is total and
 * deterministic. lru, lfu and fifo keep their candidates in a binary heap
 * (O(log n) per change); s3fifo keeps doubly linked queues (O(1) per change,
 * plus the entries skipped at a tail).
 *
 * Sizes are in the structure's unit (blocks, tokens) and only s3fifo uses
 * them (the queue fractions). Ids may be reused after a drop. Every function
 * takes a valid, added id unless said otherwise; a bug asserts.
 */
#ifndef HX_EVICT_H
#define HX_EVICT_H

#include <stdbool.h>
#include <stdint.h>

typedef enum hx_evict_kind {
    HX_EVICT_LRU = 0,
    HX_EVICT_LFU,
    HX_EVICT_FIFO,
    HX_EVICT_S3FIFO,
    HX_EVICT_N
} hx_evict_kind;

/* "lru", "lfu", "fifo", "s3fifo" (static). */
const char *hx_evict_name(hx_evict_kind k);
/* Parses a name; ENG_OK or ENG_ERR_ARG. */
int         hx_evict_parse(const char *s, hx_evict_kind *out);
/* "lru, lfu, fifo, s3fifo" (static). */
const char *hx_evict_names(void);

typedef struct hx_evict hx_evict;

/* capacity: the structure's capacity in its size unit (s3fifo's queue
 * fractions; 0: unbounded, nothing is ever asked to go). NULL on OOM. */
hx_evict *hx_evict_new(hx_evict_kind kind, int64_t capacity);
void      hx_evict_free(hx_evict *e);  /* accepts NULL */
hx_evict_kind hx_evict_kind_of(const hx_evict *e);
/* The structure's promise, under lru: an entry becomes a candidate only at
 * the largest `last` stamp so far (the block pool stamps a block as it frees
 * it). The candidates are then one list, oldest first: O(1) per change. */
void hx_evict_monotone(hx_evict *e);

/* A new entry id (not a candidate yet) of size units, inserted at stamp
 * (its created and last stamps), with an identity (s3fifo's ghost: equal
 * identities are the same content; 0 for none). ENG_OK or ENG_ERR_NOMEM. */
int  hx_evict_add(hx_evict *e, int32_t id, uint64_t stamp, uint64_t ident, int64_t size);
/* upper (a new id) was split off the front of lower (a radix node): it takes
 * lower's stamps, hits and queue, with its own seq, placed on the tail side
 * of lower; size moves from lower to upper. Neither is a candidate after. */
int  hx_evict_split(hx_evict *e, int32_t upper, int32_t lower, int64_t size, uint64_t ident);
/* A hit: hits + 1 (lfu), frequency + 1 up to 3 (s3fifo). */
void hx_evict_hit(hx_evict *e, int32_t id);
/* A use at stamp: the `last` stamp (lru, lfu's tie). */
void hx_evict_use(hx_evict *e, int32_t id, uint64_t stamp);
/* Whether id may be evicted now. */
void hx_evict_candidate(hx_evict *e, int32_t id, bool on);
bool hx_evict_is_candidate(const hx_evict *e, int32_t id);
/* id is gone; evicted: it left as a victim (s3fifo: an entry of S enters the ghost). */
void hx_evict_drop(hx_evict *e, int32_t id, bool evicted);
/* The candidate to evict next, or -1 when there is none. It is not removed:
 * the caller removes it and calls hx_evict_drop(id, true). s3fifo may move
 * entries between its queues while looking. */
int32_t hx_evict_victim(hx_evict *e);

/* Test-only fault injection, as SQLite plants faults to show that a checker
 * catches them: bits of hx_cache_faults, 0 in every real run. The caches
 * that honour a bit name it where they do. */
enum {
    HX_FAULT_HIT_AFTER_GAP = 1u << 0,  /* a lookup goes on past the first block it does not find */
    HX_FAULT_ORPHAN_EVICT  = 1u << 1,  /* radix: an eviction removes a node whose children stay reachable */
    HX_FAULT_OVER_CAPACITY = 1u << 2,  /* a pool holds one block more than its capacity */
};
extern unsigned hx_cache_faults;

/* Entries and candidates now. */
int32_t hx_evict_entries(const hx_evict *e);
int32_t hx_evict_candidates(const hx_evict *e);

#endif /* HX_EVICT_H */
