/*
 * engine/internal.h: the engine's internal structures, shared by model.c
 * (load), seq.c (sequence state) and forward.c (prefill/decode). Public
 * headers keep these types opaque; only the engine's .c files and its own
 * tests include this file.
 *
 * Adding a layer kind (ENG_LAYER_ATTN_SWA, ENG_LAYER_RECURRENT) is local:
 *   - weights: a per-kind struct inside eng_layer (the FFN half is shared,
 *              absent in mamba2 layers: has_ffn);
 *   - memory:  a per-kind struct inside eng_layer_mem, plus one case in each
 *              switch of seq.c (alloc, free, reset, truncate rules, copy,
 *              compare, serialize, checkpoint) and of forward.c (the mixer);
 *   - loading: one case in model.c's layer loader.
 * Every switch on eng_layer_kind aborts (ENG_ASSERT) on a kind it does not
 * handle, so a half-added kind fails loudly instead of silently.
 *
 * Dimension letters as in model.h: V, D, L, H, G, E, F, T, P.
 */
#ifndef ENG_INTERNAL_H
#define ENG_INTERNAL_H

#include <stdbool.h>
#include <stdint.h>

#include "kernels.h"
#include "model.h"
#include "ssm.h"
#include "swa.h"

// ----------------------------------------------------------------------------
// Model weights

/* The token mixer of a full-attention layer. */
typedef struct eng_attn_weights {
    float   *attn_norm;  /* [D] */
    eng_kmat wqkv;       /* [D + 2*G*E, D]: rows [0,D) Q, [D, D+GE) K, [D+GE, D+2GE) V (fused) */
    eng_kmat wo;         /* [D, H*E] */
} eng_attn_weights;

/* The SwiGLU feed-forward half of a layer (every layer but mamba2's). */
typedef struct eng_ffn_weights {
    float   *ffn_norm;   /* [D] */
    eng_kmat w_gate_up;  /* [2F, D]: rows [0,F) gate, [F,2F) up (fused) */
    eng_kmat w_down;     /* [D, F] */
} eng_ffn_weights;

typedef struct eng_layer {
    eng_layer_kind   kind;
    eng_attn_weights attn;     /* ATTN, ATTN_SWA */
    eng_ssm_weights  ssm;      /* RECURRENT (ssm.h) */
    bool             has_ffn;  /* false for mamba2: norm, mixer, residual only */
    eng_ffn_weights  ffn;
} eng_layer;

struct eng_model {
    eng_model_info info;
    eng_numerics   num;
    eng_kctx       kctx;         /* numerics as the kernels see them */
    uint8_t        sha256[32];   /* of the GGUF file */
    uint64_t       fingerprint;  /* XXH3_64(sha256, kernel, precision[, blas: threads, config]) */
    eng_layer     *layers;       /* [L] */
    eng_ssm_hparams ssm_hp;      /* every RECURRENT layer's (zero when none) */
    float         *tok_embd;     /* [V, D] row-major, in compute precision (lookups) */
    float         *output_norm;  /* [D] */
    eng_kmat       output;       /* [V, D] head; a view of tok_embd when tied and blas */
    bool           output_tied;  /* output.weight absent in the file */
    eng_tokenizer *tok;          /* NULL when the GGUF has no vocabulary */
};

// ----------------------------------------------------------------------------
// Per-layer sequence memory

/* Full-attention KV: row p holds position p (positions are implicit).
 * Rows >= n_tokens are stale or zero and are never read. */
typedef struct eng_attn_mem {
    int32_t n_embd_kv;  /* G*E floats per row */
    float  *k;          /* [n_ctx, G*E], after RoPE */
    float  *v;          /* [n_ctx, G*E] */
} eng_attn_mem;

typedef struct eng_layer_mem {
    eng_layer_kind kind;
    eng_attn_mem   attn;  /* ATTN */
    eng_swa_mem    swa;   /* ATTN_SWA: the window ring (swa.h) */
    eng_ssm_state  ssm;   /* RECURRENT: recurrent + conv state (ssm.h) */
} eng_layer_mem;

/* Forward-pass scratch buffers of one sequence, grown on demand and zeroed
 * when (re)allocated. Capacity is for cap_T tokens and cap_P key positions. */
typedef struct eng_ws {
    int32_t cap_T, cap_P;
    float *x;       /* [T, D] residual stream */
    float *xn;      /* [T, D] normed input of a sublayer */
    float *qkv;     /* [T, D + 2GE] fused projections */
    float *att;     /* [T, H*E] attention output, heads side by side */
    float *proj;    /* [T, D] sublayer output before the residual add */
    float *gu;      /* [T, 2F] gate and up projections */
    float *hid;     /* [T, F] SwiGLU activations */
    float *qg;      /* [H * T, E] queries regrouped by KV head (eng_k_attention) */
    float *og;      /* [H * T, E] their attention outputs */
    float *scores;  /* [nb * H/G * T, P] scores / probabilities of a batch of nb KV heads */
    int64_t scores_cap;  /* floats in scores */
    float *logits;  /* [T, V] output head of a whole chunk */
    float *rope_c;  /* [T, n_rot/2] */
    float *rope_s;  /* [T, n_rot/2] */
    eng_swa_ws swa; /* sliding-window attention scratch */
    eng_ssm_ws ssm; /* Mamba-2 mixer scratch */
} eng_ws;

struct eng_seq {
    const eng_model *m;
    int32_t          n_ctx;
    int32_t          n_tokens;
    int32_t          n_used;  /* high-water mark: rows [n_used, n_ctx) were never written (zero) */
    int32_t          swa_slack;  /* ring cells beyond the window (eng_seq_new_ext) */
    int32_t         *tokens;  /* [n_ctx], valid in [0, n_tokens) */
    eng_layer_mem   *mem;     /* [L] */
    eng_ws           ws;
};

struct eng_ckpt {
    uint64_t fingerprint;
    int32_t  n_tokens;
    int32_t  n_layer;
    size_t  *layer_off;  /* [L + 1] payload offsets per layer (0-byte sections for ATTN;
                            ATTN_SWA: the window's K then V rows; RECURRENT: ssm then conv state) */
    size_t   size;       /* payload bytes */
    uint8_t *payload;    /* NULL when size == 0 */
};

// ----------------------------------------------------------------------------
// Internal functions shared between the engine's files

/* forward.c: runs one chunk of T tokens at positions [pos0, pos0 + T) of s
 * (pos0 == s->n_tokens), writing its KV rows and tokens; when logits_rows is
 * not NULL, applies the output head to all T rows (M = T) and writes them
 * there [T, V]. Does not advance n_tokens. ENG_ERR_NOMEM on workspace OOM. */
int  eng_forward_chunk(eng_seq *s, const int32_t *tokens, int32_t T, float *logits_rows);
void eng_ws_free(eng_ws *ws);

#endif /* ENG_INTERNAL_H */
