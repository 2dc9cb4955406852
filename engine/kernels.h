/*
 * engine/kernels.h: the engine's compute kernels (internal; never included
 * by the harness). Two families of matrix products and one set of shared
 * element-wise ops:
 *
 *   - blas: every product is one cblas_sgemm (OpenBLAS), or one cblas_sgemv
 *     for a single row (decode), as a serving engine picks its routine by
 *     batch size. Its per-row results depend on the shape (M, N, K) and the
 *     thread count: the effect under study.
 *   - ref: fixed reduction order whatever the shape. Each output element is
 *     one float accumulator, starting at +0, taking acc = fma(x[k], w[k], acc)
 *     for k = 0, 1, ..., K-1 in that order: a fused multiply-add rounded
 *     once, written out on purpose (intrinsics, or fmaf() in the portable
 *     path; the build keeps -ffp-contract=off so the compiler fuses nothing
 *     by itself). The loops are vectorised ACROSS outputs (each SIMD lane
 *     is one output element with its own sequential k loop), blocked in
 *     registers and split over threads by output columns and rows, never
 *     over k, so the result does not depend on M, on the chunking, on the
 *     thread count or on the instruction set: batch-invariant
 *     (kernels_ref_gemm.c).
 *   - shared (both kernels): RMSNorm, RoPE, causal softmax, SwiGLU, residual
 *     add, bf16 rounding. Each is computed per row with a fixed order, so its
 *     result is the same whatever the number of rows or threads. The norm
 *     before a product and RoPE, SwiGLU and residual adds after it run in the
 *     product's own parallel region (eng_k_matmul_fused): one region per
 *     product instead of one per op.
 *
 * Precision bf16: the caller's weights are rounded to bf16 at load
 * (eng_kmat_init); every op here rounds its output to bf16 (round to nearest
 * even) when ctx->bf16, accumulating in fp32. Values are always stored as
 * float (a bf16 value is a float whose low 16 bits are zero).
 *
 * Dimension letters: M rows of activations (T tokens), N outputs, K inputs,
 * E head dim, P key positions. Row-major everywhere; ld* are row strides in
 * floats.
 */
#ifndef ENG_KERNELS_H
#define ENG_KERNELS_H

#include <stdbool.h>
#include <stdint.h>

#include "kbase.h"
#include "kernels_ref.h"
#include "model.h"

/* Rounds n floats in place when ctx->bf16 (no-op for fp32). */
void eng_k_round(const eng_kctx *ctx, float *x, int64_t n);

// ----------------------------------------------------------------------------
// Weight matrices in the layout their kernel wants (eng_kmat: kbase.h)

/* Builds W's kn layout from w [N, K] (copied; rounded to bf16 when bf16).
 * Returns ENG_OK or ENG_ERR_NOMEM. */
int  eng_kmat_init(eng_kmat *m, const float *w, int32_t n_out, int32_t n_in, bool bf16);
/* The layout that kernel reads fastest at that thread count: panels for
 * ref; for blas kn at one thread, W itself [N, K] (rows) with more, so that
 * each thread's column unit is a contiguous block of rows (kbase.h). */
int  eng_kmat_init_for(eng_kmat *m, const float *w, int32_t n_out, int32_t n_in, eng_kernel kernel, int32_t n_threads,
                       bool bf16);
/* A view of w [N, K] (not copied, not owned): w must already be in its final
 * precision and outlive m. Only for ENG_KERNEL_BLAS (a tied output head). */
void eng_kmat_view(eng_kmat *m, float *w, int32_t n_out, int32_t n_in);
void eng_kmat_free(eng_kmat *m);  /* accepts a zeroed or freed struct */

// ----------------------------------------------------------------------------
// Products

/* Y[M, N] = X[M, K] . W^T, rounded when bf16. X rows have stride ldx, Y rows
 * stride ldy (>= N). M >= 1. blas: one sgemm (column units on the pool:
 * eng_k_matmul_fused); ref: blocks of eng_k_matmul_ref_block over the pool
 * by column panels, each thread reading its rows packed
 * once per product (eng_k_ref_pack) where the path packs: same bits.
 * eng_k_matmul_fused without ops. */
void eng_k_matmul(const eng_kctx *ctx, const eng_kmat *W, int32_t M, const float *X, int32_t ldx,
                  float *Y, int32_t ldy);

/* Norms a fused product applies to its rows first. */
typedef enum eng_knorm {
    ENG_KNORM_NONE  = 0,
    ENG_KNORM_RMS   = 1,  /* eng_k_rmsnorm */
    ENG_KNORM_LAYER = 2,  /* eng_k_layernorm */
} eng_knorm;

/* What a fused product does around Y = X . W^T, all in the product's one
 * parallel region instead of one region per op (every field optional,
 * zero: off). Each op is computed element for element as its row-wise
 * function below (SwiGLU exists only here), so a fused product gives the
 * bits of the separate ops:
 *   prologue  X is replaced by norm(X) (eng_k_rmsnorm or eng_k_layernorm of
 *             its rows with norm_w, norm_b, eps); each thread norms the rows
 *             into its own slice of ws (n_threads * M * K floats), since
 *             every thread reads every row;
 *   epilogue  on each block of Y a thread computed (after Y's rounding):
 *     rope:   eng_k_rope on the columns [0, rope_cols) (heads of rope_E
 *             columns, rope_n_rot rotated, tables rope_cs/rope_sn of the
 *             chunk's rows);
 *     res:    res = round(res + Y), then res = round(res + add2) when add2
 *             (the residual adds of eng_k_add, in that order);
 *     glu:    SwiGLU, H[t, c] = round(silu(Y[t, c]) * Y[t, c + glu_off])
 *             for c < glu_cols, silu(g) = g / (1 + eng_expf(-g)): the gate
 *             columns of a block and their up columns are computed by the
 *             same thread; under ref glu_off is a multiple of ENG_REF_PANEL.
 * blas with n_threads > 1 splits the product into column units (at least
 * 64 columns, up to 4 per thread, one per thread for a single row: fixed by
 * M = 1, N and the thread count), one single-threaded sgemm (sgemv for one
 * row) each; with one thread it is one sgemm (sgemv). */
typedef struct eng_kfuse {
    eng_knorm    norm;
    const float *norm_w, *norm_b;
    float        eps;
    float       *ws;
    int32_t      rope_cols, rope_E, rope_n_rot;
    const float *rope_cs, *rope_sn;
    float       *res;
    int32_t      ldres;
    const float *add2;
    int32_t      ld_add2;
    int32_t      glu_cols, glu_off;
    float       *H;
    int32_t      ldh;
} eng_kfuse;

/* Y = X . W^T with the prologue and epilogue of fu (NULL: none), in one
 * parallel region; Y is rounded when bf16 as eng_k_matmul. */
void eng_k_matmul_fused(const eng_kctx *ctx, const eng_kmat *W, int32_t M, const float *X, int32_t ldx, float *Y,
                        int32_t ldy, const eng_kfuse *fu);

/* Causal grouped-query attention of one chunk of T tokens at positions
 * [pos0, pos0 + T), H query heads sharing G KV heads (head h reads KV head
 * h / (H/G)), head dim E, scale 1/sqrt(E):
 *   Q [T, H*E] (row stride ldq), K and V [P, G*E] (the cache rows [0, P),
 *   P = pos0 + T, row stride ldkv) -> O [T, H*E] (row stride ldo).
 * The queries are regrouped into wq [H*T, E] (head h's rows at wq + h*T*E).
 * blas: per KV head g, its H/G query heads stacked into R = (H/G)*T rows,
 * cut into qb query blocks (one with one thread; with n threads, enough for
 * 2 items per thread, blocks of at least 16 rows: fixed by T, H, G and the
 * thread count); per (KV head, block), on the pool, the keys in blocks of
 * kb positions from 0 (kb fixed by the block's rows: 128 Ki floats of
 * scores at most, 256 to 2,048 keys), each block: one single-threaded
 * sgemm for the scores, each row's eng_k_softmax_step_path over its
 * attended keys there (the rest 0; its outputs so far rescaled when its max
 * grows), one sgemm adding P V to the outputs (masked probabilities are
 * exactly 0); at the end the outputs times 1 / the row's sum, rounded when
 * bf16. wo [H*T, E] holds the outputs, ws each thread's block of scores.
 * ref: eng_k_attention_ref (W = 0). */
void eng_k_attention(const eng_kctx *ctx, int32_t T, int32_t pos0, int32_t H, int32_t G, int32_t E, const float *Q,
                     int32_t ldq, const float *K, const float *V, int32_t ldkv, float *O, int32_t ldo, float *wq,
                     float *wo, float *ws, int64_t ws_cap);
/* Floats of ws eng_k_attention needs at least for P keys: each thread's
 * block of scores (not P-dependent) for blas, the ref kernel's per-thread
 * scratch for ref. */
int64_t eng_k_attention_ws(const eng_kctx *ctx, int32_t T, int32_t P, int32_t H, int32_t G, int32_t E);

// ----------------------------------------------------------------------------
// Shared row-wise ops (identical for both kernels)

/* Y[t, :] = (X[t, :] * (1 / sqrtf(mean(X[t,:]^2) + eps))) * w, rounded.
 * The sum of the float squares is accumulated in double (as ggml) in a
 * fixed order that depends only on D: 8 lanes (lane i % 8, ascending i),
 * combined as ((l0 + l1) + (l2 + l3)) + ((l4 + l5) + (l6 + l7)). */
void eng_k_rmsnorm(const eng_kctx *ctx, int32_t T, int32_t D, const float *X, int32_t ldx,
                   const float *w, float eps, float *Y, int32_t ldy);

/* The same for rows [t0, t1) on the calling thread (a kind's own row loop). */
void eng_k_rmsnorm_rows(const eng_kctx *ctx, int32_t D, const float *X, int32_t ldx, const float *w, float eps,
                        float *Y, int32_t ldy, int32_t t0, int32_t t1);

/* Layer norm (llama.cpp's LLM_NORM): Y[t, :] = ((X[t, :] - mean) * (1 / sqrtf(var + eps))) * w + b,
 * rounded; w and b may be NULL (no scale, no bias). mean = (float)(sum / D) and
 * var = (float)(sum of (x - mean)^2 / D), each sum in double over 8 lanes
 * (lane i % 8, ascending i) combined as in eng_k_rmsnorm. */
void eng_k_layernorm(const eng_kctx *ctx, int32_t T, int32_t D, const float *X, int32_t ldx, const float *w,
                     const float *b, float eps, float *Y, int32_t ldy);

/* RoPE tables for positions pos0 .. pos0+T-1: cs[t, i] = cosf(theta),
 * sn[t, i] = sinf(theta) for i < n_rot/2, theta = pos * base^(-2i/n_rot)
 * computed as ggml does: theta_scale = powf(base, -2.0f/n_rot), theta starts
 * at (float)pos and is multiplied by theta_scale once per pair, in float. */
void eng_k_rope_table(int32_t T, int32_t pos0, int32_t n_rot, float base, float *cs, float *sn);
/* Rotates, in place, each head's consecutive pairs (x[2i], x[2i+1]) for
 * i < n_rot/2 ("normal" mode): x0' = x0*c - x1*s, x1' = x0*s + x1*c;
 * dims >= n_rot pass through. X [T, n_head*E] with row stride ldx; rounded. */
void eng_k_rope(const eng_kctx *ctx, int32_t T, int32_t n_head, int32_t E, int32_t n_rot,
                const float *cs, const float *sn, float *X, int32_t ldx);

/* X[t, :] = round(X[t, :] + Y[t, :]) for t < T, D columns. */
void eng_k_add(const eng_kctx *ctx, int32_t T, int32_t D, float *X, int32_t ldx, const float *Y, int32_t ldy);

#endif /* ENG_KERNELS_H */
