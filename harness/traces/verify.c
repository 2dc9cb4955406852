/*
 * harness/traces/verify.c: materialized prompts and the cold/reused check
 * (see verify.h). hx_verify_one is the only place simulate touches the
 * engine.
 */
#include "verify.h"

#include <stdlib.h>
#include <string.h>

#include "compare.h"
#include "status.h"

static uint64_t splitmix64(uint64_t x) {
    x += 0x9E3779B97F4A7C15ULL;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ULL;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBULL;
    return x ^ (x >> 31);
}

void hx_materialize_block(int64_t id, int32_t block_tokens, int32_t n_vocab, int32_t *out) {
    uint64_t span = n_vocab > 3 ? (uint64_t)(n_vocab - 3) : 1;
    for (int32_t j = 0; j < block_tokens; j++)
        out[j] = 3 + (int32_t)(splitmix64(((uint64_t)id << 20) + (uint64_t)j) % span);
}

void hx_materialize_prompt(const int64_t *ids, int32_t n_blocks, int32_t input_length, int32_t block_tokens,
                           int32_t n_vocab, int32_t *out) {
    int32_t *tmp = NULL;
    for (int32_t i = 0; i < n_blocks; i++) {
        int64_t at = (int64_t)i * block_tokens;
        if (at >= input_length) break;
        if (at + block_tokens <= input_length) {
            hx_materialize_block(ids[i], block_tokens, n_vocab, out + at);
        } else {  /* the last, partial block */
            if (!tmp && !(tmp = malloc(sizeof *tmp * (size_t)block_tokens))) return;
            hx_materialize_block(ids[i], block_tokens, n_vocab, tmp);
            memcpy(out + at, tmp, sizeof *tmp * (size_t)(input_length - at));
        }
    }
    free(tmp);
}

int64_t hx_verify_reuse_point(int64_t hit_tokens, int64_t n, const eng_prefill_params *pp) {
    int64_t r = hit_tokens < n - 1 ? hit_tokens : n - 1;
    if (r < 0) r = 0;
    if (pp->align == ENG_ALIGN_CHUNK) r = r / pp->chunk * pp->chunk;
    return r;
}

int hx_verify_one(const eng_model *m, const eng_prefill_params *pp, const int32_t *tokens, int32_t n,
                  const int64_t *bounds, int32_t n_bounds, hx_verify_result *out, char *err, size_t errlen) {
    memset(out, 0, sizeof *out);
    out->first_diff = -1;
    int32_t V = eng_model_get_info(m)->n_vocab;
    float *cold = malloc(sizeof(float) * (size_t)V), *reuse = malloc(sizeof(float) * (size_t)V);
    eng_seq *s = eng_seq_new(m, n);
    int rc = ENG_ERR_NOMEM;
    eng_prefill_params p = *pp;
    p.on_chunk = NULL;
    p.all_logits = false;
    if (!cold || !reuse || !s) {
        eng_errf(err, errlen, "verify: out of memory for a %d-token sequence", n);
        goto out;
    }
    if ((rc = eng_prefill(s, tokens, n, &p, cold)) != ENG_OK) {
        eng_errf(err, errlen, "verify: cold prefill of %d tokens: %s", n, eng_status_str(rc));
        goto out;
    }
    eng_seq_reset(s);
    int64_t at = 0;
    for (int32_t i = 0; i <= n_bounds; i++) {
        int64_t end = i < n_bounds ? bounds[i] : n;
        if (end <= at) continue;
        if ((rc = eng_prefill(s, tokens + at, (int32_t)(end - at), &p, end == n ? reuse : NULL)) != ENG_OK) {
            eng_errf(err, errlen, "verify: prefill of tokens [%lld, %lld): %s", (long long)at, (long long)end,
                     eng_status_str(rc));
            goto out;
        }
        at = end;
    }
    hx_cmp c;
    hx_compare_logits(cold, reuse, V, &c);
    out->equal = c.equal;
    out->first_diff = c.first_diff;
    out->max_ulp = c.max_ulp;
    out->max_abs = c.max_abs;
    out->top1_cold = c.top1_a;
    out->top1_reuse = c.top1_b;
    rc = ENG_OK;
out:
    free(cold);
    free(reuse);
    eng_seq_free(s);
    return rc;
}
