/*
 * harness/cache/prefixset.h: a set of cached prefixes under a budget: the
 * prompts of llama.cpp's host prompt cache (slot-lcp) and the checkpoint
 * files of disk-anchor, in simulate's token-only mode.
 *
 * An entry is a sequence of n blocks (each `page` int32 words: a block's
 * token ids, or the words of a trace block id) together with the chained
 * hashes of its prefixes (blockpool.h's hx_block_hashes: h[i] names the
 * first i + 1 blocks, so an equal h[i] is an equal prefix), the trace index
 * of the request that stored it (its origin), and a size of n units. Two
 * questions are answered in O(n) hash lookups:
 *   common(h, n): the longest prefix the request shares with any entry, and
 *                 the entry holding it that was stored or used last (llama.cpp's
 *                 prompt_load takes the cached prompt with the best common
 *                 prefix, whose state is truncated to it);
 *   within(h, n): the longest entry that is itself a prefix of the request
 *                 (a checkpoint file restores exactly its tokens: the disk
 *                 cache's lookup).
 * Entries are unique by content: adding one already present uses it instead.
 * The budget counts units (blocks); adding an entry evicts others in the
 * set's order (evict.h) until it fits, and an entry larger than the whole
 * budget is not added. Budget 0: unbounded.
 *
 * Memory: the entries' words and one link per block, plus the hash maps:
 * proportional to what the set holds, never to what went through it.
 */
#ifndef HX_PREFIXSET_H
#define HX_PREFIXSET_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "evict.h"

typedef struct hx_prefixset hx_prefixset;

/* page >= 1 words per block; budget in blocks (0: unbounded). NULL on OOM. */
hx_prefixset *hx_prefixset_new(int32_t page, hx_evict_kind kind, int64_t budget);
void          hx_prefixset_free(hx_prefixset *s);  /* accepts NULL */

/* Stores words[0, n * page) (hashes h[0, n) as above) at stamp with its
 * origin; *id gets the entry (the one already present, touched, when it was
 * there), or -1 when it is larger than the budget. ENG_OK or ENG_ERR_NOMEM. */
int  hx_prefixset_add(hx_prefixset *s, const int32_t *words, const uint64_t *h, int32_t n, int64_t origin,
                      uint64_t stamp, int32_t *id);
/* A hit on entry id at stamp (the order's use and hit). */
void hx_prefixset_touch(hx_prefixset *s, int32_t id, uint64_t stamp);
/* Removes entry id (not an eviction). */
void hx_prefixset_remove(hx_prefixset *s, int32_t id);

/* The longest common prefix with any entry (blocks, 0 when none) and that
 * entry in *id (-1 when none). Changes nothing. */
int32_t hx_prefixset_common(const hx_prefixset *s, const uint64_t *h, int32_t n, int32_t *id);
/* The longest entry that is a prefix of the request (its length in blocks, 0
 * when none), in *id. Changes nothing. */
int32_t hx_prefixset_within(const hx_prefixset *s, const uint64_t *h, int32_t n, int32_t *id);
/* The entry whose content is exactly the first n blocks (h[n - 1]), or -1. */
int32_t hx_prefixset_find(const hx_prefixset *s, const uint64_t *h, int32_t n);

const int32_t *hx_prefixset_words(const hx_prefixset *s, int32_t id);
int32_t hx_prefixset_blocks(const hx_prefixset *s, int32_t id);
int64_t hx_prefixset_origin(const hx_prefixset *s, int32_t id);

int64_t hx_prefixset_held(const hx_prefixset *s);      /* blocks held */
int32_t hx_prefixset_entries(const hx_prefixset *s);
int64_t hx_prefixset_evicted(const hx_prefixset *s);   /* blocks evicted so far */
/* Checks the invariants: held within the budget and equal to the entries'
 * blocks; every entry found by each of its prefixes, exactly by its last;
 * the order's entries. ENG_OK or ENG_ERR_FORMAT with err. */
int     hx_prefixset_check(const hx_prefixset *s, char *err, size_t errlen);

#endif /* HX_PREFIXSET_H */
