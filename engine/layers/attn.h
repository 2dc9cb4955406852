/*
 * engine/layers/attn.h: the full-attention layer kind and the attention
 * layer it shares with the sliding-window kind (internal).
 *
 * The layer (llama.cpp's build_llama; build_cohere2 when parallel):
 *   n = norm(x) * attn_norm
 *   q|k|v = n . [Wq; Wk; Wv]^T       one product, N = H*E + 2*G*E
 *   q, k = rope(q), rope(k)          unless the layer is NoPE (cohere2's full-attention layers)
 *   a = core(q, k, v) . Wo^T         the kind's attention over its memory
 *   sequential: x += a; x += ffn(ffn_norm(x)) when the layer has an FFN
 *   parallel:   x = (x + ffn(n)) + a
 *
 * Dimension letters as in model.h.
 */
#ifndef ENG_LAYERS_ATTN_H
#define ENG_LAYERS_ATTN_H

#include "internal.h"

typedef struct eng_attn_weights {
    float          *attn_norm;  /* [D] */
    eng_kmat        wqkv;       /* [H*E + 2*G*E, D]: rows Q, then K, then V (fused) */
    eng_kmat        wo;         /* [D, H*E] */
    eng_ffn_weights ffn;        /* when the layer has_ffn */
} eng_attn_weights;

/* Full-attention KV of one layer: row p holds position p (positions are
 * implicit). Rows >= n_tokens are stale or zero and are never read. */
typedef struct eng_attn_mem {
    int32_t n_embd_kv;  /* G*E floats per row */
    float  *k;          /* [n_ctx, G*E], after RoPE */
    float  *v;          /* [n_ctx, G*E] */
} eng_attn_mem;

/* Scratch of the attention layer, grown on demand (zeroed when (re)allocated). */
typedef struct eng_attn_ws {
    int32_t cap_T, cap_P;
    float  *qkv;     /* [T, H*E + 2GE] fused projections */
    float  *att;     /* [T, H*E] attention output, heads side by side */
    float  *ffo;     /* [T, D] FFN output of a parallel layer */
    float  *qg;      /* [H * T, E] queries regrouped by KV head (eng_k_attention) */
    float  *og;      /* [H * T, E] their attention outputs */
    float  *scores;  /* [nb * H/G * T, P] scores of a batch of nb KV heads (full attention) */
    int64_t scores_cap;
    float  *rope_c;  /* [T, n_rot/2] the step's RoPE table (row r: the position of stacked row r) */
    float  *rope_s;
} eng_attn_ws;

/* The attention hyperparameters (llama.cpp's keys under the arch's prefix):
 * feed_forward_length, head_count, head_count_kv, key_length, rope. With
 * is_rec, head_count_kv is read per layer (granitehybrid) and a 0 marks a
 * recurrent layer (is_rec[il] true). */
int  eng_attn_hparams(eng_loader *ld, eng_model *m, bool *is_rec);
/* blk.il.attn_norm, attn_q/k/v, attn_output, and the FFN half when has_ffn. */
int  eng_attn_load(eng_loader *ld, eng_model *m, int32_t il, eng_attn_weights *w);
void eng_attn_free(eng_attn_weights *w);
int64_t eng_attn_params(const eng_model *m, int32_t il);
/* Weight products of one token (and its FFN). */
double  eng_attn_token_flops(const eng_model *m, int32_t il);

/* Room for the step f's rows; full: the full attention's scores for each
 * span's keys (the largest pos0 + T, capped at the largest n_ctx). Fills
 * the RoPE table, each span's rows with its own positions. */
int  eng_attn_ws_prepare(const eng_model *m, eng_attn_ws *ws, const eng_fwd *f, bool full);
void eng_attn_ws_free(eng_attn_ws *ws);

/* The attention core of a kind: ws->att [T, H*E] from ws->qkv (Q and K
 * after RoPE), per span over its own sequence's memory, updating it. */
typedef void (*eng_attn_core)(eng_fwd *f, int32_t il, eng_attn_ws *ws);
/* Runs layer il (see the top of this file) around the kind's core. */
void eng_attn_layer(eng_fwd *f, int32_t il, const eng_attn_weights *w, eng_attn_ws *ws, eng_attn_core core);

/* Synthetic writers of attention layers (attn.c), shared by the
 * architectures with attention: the checks of the attention params, llama's
 * keys under the arch's prefix (head_count_kv when hkv_scalar, the RMS eps
 * when rms_eps), and the tensors of layer il. */
int eng_synth_attn_check(synth_ctx *c);
int eng_synth_attn_meta(synth_ctx *c, bool hkv_scalar, bool rms_eps);
int eng_synth_attn_tensors(synth_ctx *c, int32_t il);
int eng_synth_ffn_tensors(synth_ctx *c, int32_t il, bool with_norm);

extern const eng_layer_ops eng_kind_attn;

#endif /* ENG_LAYERS_ATTN_H */
