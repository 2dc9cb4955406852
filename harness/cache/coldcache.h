/*
 * harness/cache/coldcache.h: the shared cold baseline.
 *
 * Within one process (an experiment running several policy variants), the
 * cold run of an identical prompt under identical numerics is computed once
 * and shared. The key is XXH3-128 over (model+numerics fingerprint, the
 * cold prefill's chunk length, decode steps, the prompt tokens): a cold
 * prefill starts at position 0, where align chunk with C and align none
 * with ubatch C cut the same chunks, so they share it. A hit also compares the
 * stored tokens, so a hash collision can never return another prompt's
 * logits. The value is everything the comparison needs: the last prompt
 * token's logits, every greedy decode step's logits and tokens, the cold
 * TTFT that was measured when it was computed (median, min and max of its
 * --repeat timings), and its FLOPs. Entries are
 * evicted LRU beyond a byte budget.
 */
#ifndef HX_COLDCACHE_H
#define HX_COLDCACHE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "model.h"

typedef struct hx_cold_result {
    float   *logits;       /* (1 + n_decode, V): row 0 = last prompt token, row 1+s = after decode step s */
    int32_t *greedy;       /* (n_decode) greedy tokens chosen at each step (from rows 0..n_decode-1) */
    int32_t  n_decode;
    int32_t  n_vocab;
    double   ttft_ms;      /* measured when computed (the median of n_repeat timings) */
    double   ttft_min_ms;  /* the fastest and slowest of them */
    double   ttft_max_ms;
    int32_t  n_repeat;
    double   decode_ms;
    double   flops;
    uint64_t state_hash;   /* XXH3-64 of the serialized state after the prompt (0: not taken) */
} hx_cold_result;

typedef struct hx_coldcache hx_coldcache;

typedef struct hx_coldcache_stats {
    int64_t hits, misses, evictions;
    double  saved_ms;      /* sum of ttft_ms + decode_ms of the hits: compute time not spent */
    int64_t bytes;         /* resident */
} hx_coldcache_stats;

hx_coldcache *hx_coldcache_new(int64_t budget_bytes);  /* NULL on OOM */
void          hx_coldcache_free(hx_coldcache *c);      /* accepts NULL */

/* Looks up the cold result of tokens under m's numerics and pp's shape.
 * Returns a pointer owned by the cache (valid until the next put) or NULL. */
const hx_cold_result *hx_coldcache_get(hx_coldcache *c, const eng_model *m, const eng_prefill_params *pp,
                                       int32_t n_decode, const int32_t *tokens, int32_t n);
/* Stores a copy of r. Returns a pointer to the cached copy, or NULL when it
 * could not be stored (too large for the budget, or OOM): r stays the caller's. */
const hx_cold_result *hx_coldcache_put(hx_coldcache *c, const eng_model *m, const eng_prefill_params *pp,
                                       const int32_t *tokens, int32_t n, const hx_cold_result *r);
hx_coldcache_stats hx_coldcache_get_stats(const hx_coldcache *c);

/* Allocates/frees a result's arrays. */
int  hx_cold_result_alloc(hx_cold_result *r, int32_t n_decode, int32_t n_vocab);
void hx_cold_result_free(hx_cold_result *r);

#endif /* HX_COLDCACHE_H */
