/*
 * tests/helpers/simref.h: the brute-force reference of simulate's caches
 * (tests/test_simulate.c compares every policy with it, hit for hit).
 *
 * Written from the rules of docs/traces.md with plain arrays, linear scans
 * and whole prefixes compared element by element: no hash, no map, no heap
 * and no line of harness/cache/. A request is its policy blocks, each g
 * trace ids; every figure is in policy blocks.
 */
#ifndef KVR_TESTS_SIMREF_H
#define KVR_TESTS_SIMREF_H

#include <stdbool.h>
#include <stdint.h>

#include "evict.h"

typedef struct rreq {
    const int64_t *sym;  /* (n * g) */
    int32_t        n;    /* policy blocks */
    int32_t        g;
    int32_t        input_length, block_tokens;
    int64_t        index;
} rreq;

typedef struct rres {
    int32_t hit;       /* policy blocks */
    int64_t evicted;   /* policy blocks */
    int64_t held;      /* policy blocks */
} rres;

/* What a reference cache is: the policy, its order and capacity, its options. */
typedef struct setup {
    const char   *policy;        /* block-hash, radix, slot-lcp, disk-anchor, cold */
    hx_evict_kind evict;
    int64_t       cap_blocks;    /* policy blocks, 0: unbounded */
    int32_t       g;             /* trace blocks per policy block */
    int32_t       slots;         /* slot-lcp */
    int32_t       waypoint, anchor;  /* disk-anchor, tokens */
} setup;

typedef struct ref ref;

/* A reference cache for s, its blocks of block_tokens tokens. */
ref    *ref_new(const setup *s, int32_t block_tokens);
void    ref_free(ref *f);
rres    ref_access(ref *f, const rreq *r);
int32_t ref_peek(ref *f, const rreq *r);  /* leading policy blocks held, changing nothing */

#endif
