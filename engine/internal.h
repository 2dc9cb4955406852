/*
 * engine/internal.h: the engine's internal structures, shared by model_load.c
 * (load), seq.c (sequence state), forward.c (prefill/decode), batch.c (steps
 * of several sequences) and the layer kinds (engine/layers/). Public headers
 * keep these types opaque; only the
 * engine's .c files and its own tests include this file.
 *
 * A model is a stack of layers, each of one kind (engine/layer.h):
 * the layer holds its kind's table and a pointer to the kind's weights, a
 * sequence holds per layer a pointer to the kind's memory. Nothing here
 * knows what a kind's weights or memory look like.
 *
 * Dimension letters as in model.h: V, D, L, H, G, E, F, T, P.
 */
#ifndef ENG_INTERNAL_H
#define ENG_INTERNAL_H

#include <stdbool.h>
#include <stdint.h>

#include "kernels.h"
#include "layer.h"
#include "model.h"

// ----------------------------------------------------------------------------
// Model

/* The norm of an architecture: its pre-norms and its output norm. */
typedef enum eng_norm_type {
    ENG_NORM_RMS   = 0,  /* llama.cpp's LLM_NORM_RMS, eps = info.rms_eps */
    ENG_NORM_LAYER = 1,  /* LLM_NORM (mean and variance), eps = info.norm_eps */
} eng_norm_type;

typedef struct eng_layer {
    const eng_layer_ops *ops;      /* the kind */
    int32_t              kind_ix;  /* index of ops in eng_layer_kinds[] */
    bool                 has_ffn;  /* a SwiGLU FFN half (attention and Mamba-2 kinds) */
    bool                 rope;     /* attention kinds: RoPE on Q and K (false: NoPE) */
    bool                 parallel; /* attention kinds: x + ffn(n) + attn(n) from one norm (cohere2) */
    void                *w;        /* the kind's weights */
} eng_layer;

struct eng_model {
    eng_model_info  info;
    eng_numerics    num;
    eng_kctx        kctx;          /* numerics as the kernels see them */
    uint8_t         sha256[32];    /* of the GGUF file */
    uint64_t        fingerprint;   /* XXH3_64(sha256, kernel, precision[, blas: threads, config]) */
    const eng_arch *arch;
    eng_layer      *layers;        /* [L] */
    eng_norm_type   norm;
    float           logit_scale;   /* logits are multiplied by it when != 1 (cohere2) */
    bool            embd_norm;     /* token_embd_norm after the embedding (rwkv7) */
    bool            norm_bias;     /* output_norm (and token_embd_norm) have a bias */
    bool            tie_output;    /* the head is token_embd whatever the file holds (cohere2) */
    float          *tok_embd;      /* [V, D] row-major, in compute precision (lookups) */
    float          *embd_norm_w;   /* [D] or NULL */
    float          *embd_norm_b;   /* [D] or NULL */
    float          *output_norm;   /* [D] */
    float          *output_norm_b; /* [D] or NULL */
    eng_kmat        output;        /* [V, D] head; a view of tok_embd when tied and blas */
    bool            output_tied;   /* output.weight absent in the file (or ignored) */
    eng_tokenizer  *tok;           /* NULL when the GGUF has no vocabulary */
};

// ----------------------------------------------------------------------------
// Sequence

typedef struct eng_layer_mem {
    const eng_layer_ops *ops;
    void                *state;  /* the kind's memory */
} eng_layer_mem;

struct eng_seq {
    const eng_model *m;
    int32_t          n_ctx;
    int32_t          n_tokens;
    int32_t          n_used;     /* high-water mark: positions [n_used, n_ctx) were never written */
    int32_t          swa_slack;  /* ring cells beyond the window (eng_seq_new_ext) */
    int32_t         *tokens;     /* [n_ctx], valid in [0, n_tokens) */
    eng_layer_mem   *mem;        /* [L] */
    eng_ws           ws;
};

struct eng_ckpt {
    uint64_t fingerprint;
    int32_t  n_tokens;
    int32_t  n_layer;
    size_t  *layer_off;  /* [L + 1] payload offsets per layer (the kinds' ckpt sections) */
    size_t   size;       /* payload bytes */
    uint8_t *payload;    /* NULL when size == 0 */
};

// ----------------------------------------------------------------------------
// Internal functions shared between the engine's files

/* forward.c: runs one step on scratch w: n_span >= 1 spans stacked in
 * order (sp[i].r0 the sum of the T of the spans before it; each span's
 * sequence of model m, pos0 == its n_tokens, room for T more; no sequence
 * twice), span i's T tokens tokens[i] (ids checked by the caller). Writes
 * each span's tokens and memory; does not advance n_tokens. The spans with
 * want[i] (want may be NULL: none) get the output head on all their rows:
 * [sum of their T, V] in stack order, into out when not NULL, else into
 * w->logits. ENG_ERR_NOMEM (scratch) before any state changes, else ENG_OK. */
int  eng_forward_step(eng_ws *w, const eng_model *m, const eng_fspan *sp, int32_t n_span,
                      const int32_t *const *tokens, const bool *want, float *out);
/* forward.c: one chunk of T tokens of s at pos0 == s->n_tokens, a step of
 * one span on s's own scratch; when logits_rows is not NULL, the output
 * head on all T rows (M = T) into logits_rows [T, V]. */
int  eng_forward_chunk(eng_seq *s, const int32_t *tokens, int32_t T, float *logits_rows);
void eng_ws_free(eng_ws *ws);

#endif /* ENG_INTERNAL_H */
