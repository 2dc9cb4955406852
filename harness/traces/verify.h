/*
 * harness/traces/verify.h: a simulated hit, checked bit for bit: trace
 * blocks turned into tokens (--materialize) and one request run through the
 * engine cold and through the state the simulated cache says it holds
 * (--verify-sample; docs/traces.md, "Checking hits").
 *
 * Materialized tokens: block id X becomes B tokens, token j being
 * 3 + splitmix64(X * 2^20 + j) mod (V - 3) (ids 0..2 are left out: the unknown,
 * BOS and EOS tokens of the usual vocabularies), so equal ids are equal
 * tokens and a request is its blocks' tokens, cut to input_length.
 *
 * The reused run rebuilds the state the way the simulation says it was
 * built: the request r hit k blocks computed by request q (its origin), q
 * had reused the state of its own origin p up to its hit, and so on back to
 * a request that hit nothing. Their reuse points, b_1 < b_2 < ... < b_m
 * (tokens), are where each of those prefills started; the reused run
 * prefills r's tokens [0, b_1), [b_1, b_2), ..., [b_m, n) on one sequence,
 * each segment one eng_prefill call starting where the last one stopped, as
 * the requests that put the state there did (every request of the chain
 * shares these tokens: equal ids). The cold run prefills [0, n) in one call.
 * The last token's logits are compared with memcmp (compare.h). A reuse
 * point is the request's hit in tokens, at most n - 1, floored to the grid C
 * under --align chunk (a server recomputes the last token; hx_policy_reuse_len's
 * rule).
 */
#ifndef HX_VERIFY_H
#define HX_VERIFY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "model.h"

/* The tokens of block id (block_tokens of them) into out, for a vocabulary of
 * n_vocab (> 3) tokens. */
void hx_materialize_block(int64_t id, int32_t block_tokens, int32_t n_vocab, int32_t *out);
/* A request's tokens: its n_blocks blocks cut to input_length (<= n_blocks *
 * block_tokens) into out (input_length ids). */
void hx_materialize_prompt(const int64_t *ids, int32_t n_blocks, int32_t input_length, int32_t block_tokens,
                           int32_t n_vocab, int32_t *out);

/* The reuse point of a hit of hit_tokens on a prompt of n tokens. */
int64_t hx_verify_reuse_point(int64_t hit_tokens, int64_t n, const eng_prefill_params *pp);

typedef struct hx_verify_result {
    bool     equal;        /* the last token's logits memcmp-equal */
    int64_t  first_diff;   /* first differing logit, -1 */
    uint64_t max_ulp;
    double   max_abs;
    int32_t  top1_cold, top1_reuse;
} hx_verify_result;

/* Runs tokens[0, n) cold and in segments at bounds[0, n_bounds) (ascending,
 * each in (0, n)) on model m under pp; ENG_OK with *out, or the engine's
 * error (ENG_ERR_NOMEM, ENG_ERR_RANGE) with a message. */
int hx_verify_one(const eng_model *m, const eng_prefill_params *pp, const int32_t *tokens, int32_t n,
                  const int64_t *bounds, int32_t n_bounds, hx_verify_result *out, char *err, size_t errlen);

#endif /* HX_VERIFY_H */
