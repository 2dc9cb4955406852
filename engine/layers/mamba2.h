/*
 * engine/layers/mamba2.h: the Mamba-2 selective state-space mixer (internal;
 * never included by the harness): its hyperparameters, weights, per-sequence
 * state, scratch, and the forward pass of one chunk of T tokens.
 *
 * Semantics (llama.cpp's build_mamba2_layer, ggml_ssm_conv, ggml_ssm_scan):
 *   zxbcdt = in_proj . xn                    [T, 2I + 2*NG*N + NH]: z | xBC | dt
 *   xBC    = silu(conv1d(xBC) + conv_b)      causal depthwise, kernel K, over
 *                                            [conv state (K-1 rows); xBC (T rows)]
 *   x | B | C = xBC                          x [T, NH, P], B and C [T, NG, N]
 *   dt     = softplus(dt + dt_bias)          [T, NH]; softplus(v) = v > 20 ? v : log1p(exp(v))
 *   per head h (group g = h / (NH/NG)), per token t:
 *     S_h <- exp(dt*A_h) * S_h + dt * x_h B_g^T     S_h [P, N], A_h = -exp(A_log) < 0
 *     y_h  = S_h C_g + D_h * x_h
 *   y      = y * silu(z)
 *   y      = grouped RMSNorm(y) * norm_w     NG groups of I/NG, eps as the model's
 *   out    = out_proj . y                    [T, D]
 * The caller does the layer's pre-norm (xn = rmsnorm(x) * attn_norm) and the
 * residual add (x += out), as in llama.cpp's mamba2 and granitehybrid.
 *
 * The scan over a chunk, by kernel:
 *   - ref: the recurrence token by token, as ggml's scalar path: for each
 *     (h, p): s = S[p,n]*dA + B[n]*(x*dt); y += s*C[n], n ascending. Each
 *     token's result depends only on the prior state and its own inputs, so
 *     it is independent of the chunking (batch-invariant).
 *   - blas: the chunked SSD ("state space duality") form, in blocks of
 *     ENG_SSM_BLOCK tokens counted from the chunk's first token, every product
 *     one single-threaded cblas_sgemm (heads spread over the threads, so the
 *     result does not depend on the thread count, as eng_k_attention):
 *     Y = (L o C B^T) X + diag(e^cum) C S^T (S = S_h^T [N, P]),
 *     S <- e^cum_end S + (diag(w) B)^T X, with cum the running sum of dt*A_h in
 *     the block, L[t,s] = e^(cum_t - cum_s) dt_s for s <= t, and
 *     w_s = e^(cum_end - cum_s) dt_s. A token's result depends on where its
 *     block starts, like the GPU kernels (mamba_chunk_scan): the effect under
 *     study. A chunk of one token (decode) uses the recurrence.
 * Either way the result for a token depends only on its chunk's boundaries
 * and the state before the chunk, so the bit-exactness invariant holds.
 * In a step of several sequences (eng_ssm_forward_spans) the projections,
 * the gate and the grouped norm run over the stacked rows, the conv and
 * the scan per span from its own state.
 *
 * Precision bf16 (kernels.h): in_proj and out_proj round as every product;
 * the fused conv + bias + SiLU rounds its output; the scan runs in fp32
 * (state kept fp32, as ggml and the GPU kernels keep it) and y + D*x is
 * rounded; the gate y * silu(z) is rounded; the grouped norm rounds.
 *
 * Dimension letters: T tokens, D model dim, I = NH*P inner dim, NH heads
 * (GGUF ssm.time_step_rank), P head dim, NG groups, N state size
 * (ssm.state_size), K conv kernel (ssm.conv_kernel), CD = I + 2*NG*N conv
 * channels, DP = 2I + 2*NG*N + NH in_proj outputs.
 */
#ifndef ENG_SSM_H
#define ENG_SSM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kernels.h"
#include "layer.h"

/* SSD block length of the blas scan (tokens, counted from the chunk start). */
#define ENG_SSM_BLOCK 64

typedef struct eng_ssm_hparams {
    int32_t n_embd;     /* D */
    int32_t d_inner;    /* I */
    int32_t d_state;    /* N */
    int32_t n_head;     /* NH */
    int32_t head_dim;   /* P = I / NH */
    int32_t n_group;    /* NG, divides NH */
    int32_t d_conv;     /* K >= 1 */
    int32_t conv_dim;   /* CD = I + 2*NG*N */
    int32_t d_in_proj;  /* DP = 2I + 2*NG*N + NH */
    float   eps;        /* RMS eps of the grouped norm */
} eng_ssm_hparams;

/* Fills *hp from the GGUF-level numbers and checks them: every count >= 1,
 * NH divides I, NG divides NH and I. Returns ENG_OK or ENG_ERR_FORMAT with a
 * message "ssm.FIELD: what is wrong" in err (may be NULL). */
int eng_ssm_hparams_init(eng_ssm_hparams *hp, int32_t n_embd, int32_t d_inner, int32_t d_state, int32_t n_head,
                         int32_t n_group, int32_t d_conv, float eps, char *err, size_t errlen);

/* Weights of one layer's mixer, every value in compute precision (bf16
 * values when bf16). Owned by the model; eng_ssm_weights_free frees them. */
typedef struct eng_ssm_weights {
    float   *attn_norm;  /* [D] the layer's pre-norm (applied by the caller) */
    eng_kmat in_proj;    /* [DP, D] */
    float   *conv_w;     /* [K, CD]: tap k of every channel, k = 0 the oldest input (the
                            transpose of GGUF ssm_conv1d.weight, ne = [K, CD]) */
    float   *conv_b;     /* [CD] */
    float   *dt_bias;    /* [NH] */
    float   *A;          /* [NH] A = -exp(A_log) (GGUF ssm_a, as llama.cpp's converter stores it) */
    float   *D;          /* [NH] skip */
    float   *norm_w;     /* [I] grouped RMSNorm weight (group g: [g*I/NG, (g+1)*I/NG)) */
    eng_kmat out_proj;   /* [D, I] */
} eng_ssm_weights;

void eng_ssm_weights_free(eng_ssm_weights *w);  /* accepts a zeroed struct */

/* One sequence's state of one layer. Zero is the initial state. */
typedef struct eng_ssm_state {
    float *ssm;   /* [NH, N, P] recurrent state S_h^T per head (ggml keeps {N, P, NH}:
                     the same numbers, transposed per head, so the recurrence
                     vectorises over P) */
    float *conv;  /* [K-1, CD] the last K-1 xBC rows before the conv, oldest first */
} eng_ssm_state;

/* Floats of each part, and bytes of both (the recurrent state of one layer). */
int64_t eng_ssm_state_floats_ssm(const eng_ssm_hparams *hp);   /* NH*N*P */
int64_t eng_ssm_state_floats_conv(const eng_ssm_hparams *hp);  /* (K-1)*CD */
size_t  eng_ssm_state_bytes(const eng_ssm_hparams *hp);

/* Allocates a zeroed state. ENG_OK or ENG_ERR_NOMEM (then *st is freed). */
int  eng_ssm_state_alloc(eng_ssm_state *st, const eng_ssm_hparams *hp);
void eng_ssm_state_free(eng_ssm_state *st);  /* accepts a zeroed struct */
void eng_ssm_state_clear(eng_ssm_state *st, const eng_ssm_hparams *hp);
void eng_ssm_state_copy(eng_ssm_state *dst, const eng_ssm_state *src, const eng_ssm_hparams *hp);
/* Byte image: the ssm floats then the conv floats (eng_ssm_state_bytes). */
void eng_ssm_state_save(const eng_ssm_state *st, const eng_ssm_hparams *hp, void *dst);
void eng_ssm_state_load(eng_ssm_state *st, const eng_ssm_hparams *hp, const void *src);

/* Scratch of the mixer, grown on demand (zeroed when (re)allocated). */
typedef struct eng_ssm_ws {
    int32_t cap_T;      /* tokens */
    int32_t cap_dp;     /* DP the buffers were sized for */
    int32_t cap_cd;     /* CD */
    int32_t cap_i;      /* I */
    int32_t cap_blk;    /* NH * per-head SSD scratch floats */
    float  *zxbcdt;     /* [T, DP] */
    float  *xpad;       /* [K-1+T, CD] conv input */
    float  *xbc;        /* [T, CD] conv output */
    float  *dt;         /* [T, NH] softplus(dt + bias) */
    float  *y;          /* [T, I] scan output, then y + D*x gated in place */
    float  *yn;         /* [T, I] normed */
    float  *gcb;        /* [NG, Q, Q] C B^T of the current SSD block */
    float  *blk;        /* [NH, Q*Q + Q*N + 2Q + 2P] per-head scratch (SSD block or recurrence) */
} eng_ssm_ws;

void eng_ssm_ws_free(eng_ssm_ws *ws);  /* accepts a zeroed struct */
/* Grows ws for chunks of up to T tokens, so that eng_ssm_forward cannot
 * fail. ENG_OK or ENG_ERR_NOMEM. */
int  eng_ssm_ws_reserve(eng_ssm_ws *ws, const eng_ssm_hparams *hp, int32_t T);

/* The mixer of one chunk: T >= 1 tokens whose normed inputs are xn [T, D]
 * (row stride ldx), from state st (updated in place to the state after the
 * chunk), writing out [T, D] (row stride ldo). in_fu and out_fu (NULL:
 * none) are fused into the input and output projections (kernels.h: the
 * layer's norm before in_proj, the residual add after out_proj; with a
 * norm in in_fu, xn is the layer's input x). Returns ENG_OK or
 * ENG_ERR_NOMEM (workspace; st untouched then). */
int eng_ssm_forward(const eng_kctx *ctx, const eng_ssm_hparams *hp, const eng_ssm_weights *w, eng_ssm_state *st,
                    int32_t T, const float *xn, int32_t ldx, float *out, int32_t ldo, eng_ssm_ws *ws,
                    const eng_kfuse *in_fu, const eng_kfuse *out_fu);

/* One sequence's rows in a step of several (eng_ssm_forward_spans): its
 * state, and its rows [r0, r0 + T) of the step's T rows. */
typedef struct eng_ssm_span {
    eng_ssm_state *st;
    int32_t        r0, T;
} eng_ssm_span;

/* The mixer of a step of several sequences: the projections over all T
 * rows (xn [T, D], out [T, D]), the conv and the scan per span from its
 * own state (updated), each as eng_ssm_forward runs them for a chunk of
 * that span alone (the blas scan picks the recurrence for a span of one
 * token). The spans cover disjoint rows. eng_ssm_forward is this with one
 * span of every row. ENG_OK or ENG_ERR_NOMEM (states untouched then). */
int eng_ssm_forward_spans(const eng_kctx *ctx, const eng_ssm_hparams *hp, const eng_ssm_weights *w,
                          const eng_ssm_span *sp, int32_t n_span, int32_t T, const float *xn, int32_t ldx, float *out,
                          int32_t ldo, eng_ssm_ws *ws, const eng_kfuse *in_fu, const eng_kfuse *out_fu);

/* Cost model: FLOPs of one token through the mixer (2 per multiply-add):
 * in_proj 2*D*DP, out_proj 2*I*D, conv 2*K*CD, scan 5*I*N (state update 3,
 * output 2 per state element). Independent of the kernel. */
double eng_ssm_token_flops(const eng_ssm_hparams *hp);

/* The Mamba-2 layer kind (mamba2.c), and the hyperparameters of its layer il. */
extern const eng_layer_ops eng_kind_mamba2;
const eng_ssm_hparams *eng_mamba2_hparams(const eng_model *m, int32_t il);

#endif /* ENG_SSM_H */
