/*
 * harness/probe/reuse.h: what a server's prefix cache should reuse, for
 * `kvreplay probe`: the sequences the server holds after the requests it
 * was sent (each a prompt and the tokens generated after it), and the cap
 * each server puts on a hit:
 *
 *   llama.cpp  one slot keeps the last sequence; a hit is the common prefix,
 *              at most the prompt's length - 1 (the last prompt token is
 *              always evaluated: tools/server/server-context.cpp);
 *   vllm       every full block of every sequence is kept (hashed blocks);
 *              at most the prompt's length - 1, floored to the block size
 *              (vllm/v1/core/kv_cache_manager.py, get_computed_blocks:
 *              max_cache_hit_length = num_tokens - 1, whole blocks only);
 *   sglang     every sequence is kept (radix tree); at most the prompt's
 *              length - 1 (schedule_batch.py, max_prefix_len = input_len - 1),
 *              floored to the page size;
 *   kvreplay   `kvreplay serve`'s slot policy: one slot keeps the last
 *              sequence; the hit is capped at the cached prompt's length
 *              (cap_prompt: tokens written by decode are off the grid), at the
 *              prompt's length - 1, and floored to the chunk grid under align
 *              chunk (cache/policies/policy.h, hx_policy_reuse_len);
 *   unknown    every sequence, at most the prompt's length - 1.
 * The last generated token of a sequence is never held: it was sampled, not
 * evaluated.
 */
#ifndef HX_PROBE_REUSE_H
#define HX_PROBE_REUSE_H

#include <stdbool.h>
#include <stdint.h>

typedef enum hx_engine {
    HX_ENGINE_UNKNOWN = 0,
    HX_ENGINE_LLAMA,
    HX_ENGINE_VLLM,
    HX_ENGINE_SGLANG,
    HX_ENGINE_KVREPLAY,
} hx_engine;

const char *hx_engine_name(hx_engine e);            /* "llama.cpp", "vllm", "sglang", "kvreplay", "unknown" */
int         hx_engine_from_name(const char *name);  /* -1 when unknown */

typedef struct hx_reuse_rule {
    hx_engine engine;
    bool      tree;        /* every sequence is kept (false: one slot keeps the last) */
    int32_t   grid;        /* hits floored to multiples of this (>= 1) */
    bool      cap_prompt;  /* hits capped at the cached sequence's prompt length */
} hx_reuse_rule;

/* The engine's rule with its defaults (vLLM block 16, SGLang page 1,
 * kvreplay chunk 64 with cap_prompt). */
void hx_reuse_rule_default(hx_reuse_rule *r, hx_engine e);

typedef struct hx_held_seq {
    int32_t *ids;
    int32_t  n;         /* tokens held */
    int32_t  n_prompt;  /* of which the prompt */
} hx_held_seq;

typedef struct hx_held {
    hx_held_seq *v;
    int32_t      n, cap;
} hx_held;

void hx_held_clear(hx_held *h);
void hx_held_free(hx_held *h);
/* The server ran prompt (n_prompt ids) and generated gen (n_gen ids): under
 * a slot rule the sequence replaces what was held, under a tree rule it is
 * added. ENG_OK or ENG_ERR_NOMEM. */
int  hx_held_add(hx_held *h, const hx_reuse_rule *rule, const int32_t *prompt, int32_t n_prompt, const int32_t *gen,
                 int32_t n_gen);
/* The reuse a correct cache with rule gives the prompt ids (n): the best
 * capped hit over the held sequences. *lcp (may be NULL) gets the longest
 * raw common prefix. */
int32_t hx_reuse_expected(const hx_reuse_rule *rule, const hx_held *h, const int32_t *ids, int32_t n, int32_t *lcp);
/* The cap of one hit: lcp tokens in common with a sequence whose prompt was
 * n_cached_prompt long, for a prompt of n. */
int32_t hx_reuse_cap(const hx_reuse_rule *rule, int32_t lcp, int32_t n_cached_prompt, int32_t n);

#endif /* HX_PROBE_REUSE_H */
