/*
 * engine/kernels.h: the engine's compute kernels (internal; never included
 * by the harness). Two families of matrix products and one set of shared
 * element-wise ops:
 *
 *   - blas: every product is one cblas_sgemm (OpenBLAS). Its per-row results
 *     depend on the shape (M, N, K) and the thread count: the effect under
 *     study.
 *   - ref: fixed reduction order whatever the shape. Each output element is
 *     one float accumulator, starting at +0, adding x[k]*w[k] for k = 0, 1,
 *     ..., K-1 in that order (multiply then add: -ffp-contract=off). The
 *     loops are vectorised ACROSS outputs (each SIMD lane is one output
 *     element with its own sequential k loop) and parallelised across
 *     output columns, so the result does not depend on M, on the chunking,
 *     or on the thread count: batch-invariant.
 *   - shared (both kernels): RMSNorm, RoPE, causal softmax, SwiGLU, residual
 *     add, bf16 rounding. Each is computed per row with a fixed order, so its
 *     result is the same whatever the number of rows or threads.
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
#include <string.h>

#include "model.h"

/* The engine's thread pool: every parallel loop of both kernels (ref
 * products split by output columns, attention rows, row-wise ops) runs on
 * it, with exactly n_threads threads (the caller is thread 0) and a static
 * split of rows into contiguous ranges. Its workers poll for tens of
 * microseconds (pause instructions, never sched_yield: on a loaded machine a
 * yield gives the core away for a whole time slice), then sleep on a
 * condition variable. OpenMP was measured unusable here: libgomp's threads
 * spin for milliseconds at every barrier, which starves OpenBLAS's threads
 * between sgemms (5x slower) and, when another process holds a core,
 * stalls every region on a descheduled partner (a ref prefill of the tiny
 * model went from 0.2 s to 20 s on this 2-core machine under load). */
typedef struct eng_pool eng_pool;

/* A pool of n_threads (the caller counts as thread 0). NULL on failure. */
eng_pool *eng_pool_new(int32_t n_threads);
void      eng_pool_free(eng_pool *p);  /* accepts NULL; joins the workers */

/* Numerics of one forward pass. */
typedef struct eng_kctx {
    eng_kernel kernel;
    bool       bf16;        /* precision == ENG_PRECISION_BF16 */
    int32_t    n_threads;   /* threads (== eng_numerics.n_threads) */
    eng_pool  *pool;        /* n_threads > 1: the model's pool; else NULL */
} eng_kctx;

/* Runs fn(arg, r0, r1) over [0, n_rows) split into contiguous ranges, one
 * per thread of ctx's pool (inline without a pool or with one row). Results
 * must not depend on the split: fn treats each row on its own. Not
 * reentrant: fn must not call it with the same pool. */
void eng_k_parallel_rows(const eng_kctx *ctx, int32_t n_rows, void (*fn)(void *arg, int32_t r0, int32_t r1),
                         void *arg);
/* Same, but runs on the caller alone when n_rows * row_cost (element
 * operations) is too small to be worth waking threads. */
void eng_k_parallel_rows_cost(const eng_kctx *ctx, int32_t n_rows, int64_t row_cost,
                              void (*fn)(void *arg, int32_t r0, int32_t r1), void *arg);

/* Rounds a float to the nearest bf16 value (ties to even), kept as a float.
 * NaN stays NaN (quieted); infinities stay infinite. */
static inline float eng_bf16_round(float x) {
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    const uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1u)) & 0xffff0000u;
    const uint32_t quiet = (u | 0x00400000u) & 0xffff0000u;
    u = (u & 0x7fffffffu) > 0x7f800000u ? quiet : rounded;  /* branch-free: vectorises */
    memcpy(&x, &u, sizeof x);
    return x;
}

/* exp(x) in float, written so that GCC vectorises it without changing a
 * single operation (the same IEEE operations per element, scalar or SIMD):
 * n = nearest integer to x*log2(e) (the 1.5*2^23 rounding trick), r = x - n*ln2
 * in two steps (Cody-Waite), degree-7 Taylor polynomial of e^r (Estrin),
 * times 2^n built from the exponent bits. Within 2 ulp of glibc's expf on
 * [-87, 88] (tested); 0 below -87.33654, +inf above 88.72283, NaN for NaN.
 * The range tests compare the float's bits as integers and select with bit
 * masks: float comparisons and ternaries become possibly-trapping branches
 * that GCC refuses to if-convert (and so to vectorise) under -ftrapping-math. Used by softmax and SiLU in both
 * kernels, as ggml uses its own vectorised exp. */
/* Bitwise select: a where mask is all ones, b where it is zero. */
static inline float eng_select_(uint32_t mask, float a, float b) {
    uint32_t ua, ub;
    memcpy(&ua, &a, sizeof ua);
    memcpy(&ub, &b, sizeof ub);
    const uint32_t r = (mask & ua) | (~mask & ub);
    float y;
    memcpy(&y, &r, sizeof y);
    return y;
}

static inline float eng_expf(float x) {
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    const uint32_t is_nan = 0u - (uint32_t)((u & 0x7fffffffu) > 0x7f800000u);
    const uint32_t above = 0u - (uint32_t)((int32_t)u > (int32_t)0x42b00000);  /* x > 88 */
    const uint32_t below = 0u - (uint32_t)(u > 0xc2ae0000u);                    /* x < -87 */
    float xc = eng_select_(above, 88.0f, x);
    xc = eng_select_(below, -87.0f, xc);
    xc = eng_select_(is_nan, 0.0f, xc);
    const float t = xc * 1.44269504088896341f + 12582912.0f;
    const float n = t - 12582912.0f;
    float r = xc - n * 0.693145751953125f;
    r = r - n * 1.428606765330187045e-06f;
    /* e^r ~ sum of r^k/k! for k <= 7, evaluated by Estrin's scheme (short
     * dependency chains): (c0 + c1 r) + r2 (c2 + c3 r) + r4 ((c4 + c5 r) + r2 (c6 + c7 r)) */
    const float r2 = r * r, r4 = r2 * r2;
    const float p01 = 1.0f + r;
    const float p23 = 0.5f + r * (1.0f / 6.0f);
    const float p45 = 1.0f / 24.0f + r * (1.0f / 120.0f);
    const float p67 = 1.0f / 720.0f + r * (1.0f / 5040.0f);
    const float p = (p01 + r2 * p23) + r4 * (p45 + r2 * p67);
    const int32_t ni = (int32_t)n;
    const uint32_t bits = (uint32_t)(ni + 127) << 23;
    float scale;
    memcpy(&scale, &bits, sizeof scale);
    float y = p * scale;
    y = eng_select_(0u - (uint32_t)(u > 0xc2aeac4fu), 0.0f, y);                           /* x < -87.33654 */
    y = eng_select_(0u - (uint32_t)((int32_t)u > (int32_t)0x42b17217), __builtin_inff(), y);  /* x > 88.72283 */
    y = eng_select_(is_nan, x, y);
    return y;
}

/* Rounds n floats in place when ctx->bf16 (no-op for fp32). */
void eng_k_round(const eng_kctx *ctx, float *x, int64_t n);

// ----------------------------------------------------------------------------
// Weight matrices in the layout their kernel wants

/* A weight matrix W [N, K] (N outputs, K inputs: GGUF ne = [K, N]), in the
 * layout its kernel reads:
 *   kn (eng_kmat_init, both kernels): W^T row-major [K, ld], ld = N rounded
 *     up to the ref kernel's column block (16), padding columns zero (blas
 *     calls sgemm NoTrans/NoTrans, which OpenBLAS packs faster than
 *     NoTrans/Trans);
 *   panels (eng_kmat_init_for with ENG_KERNEL_REF): W^T cut into panels of
 *     16 columns, each contiguous [K][16], so the ref kernel streams one
 *     panel sequentially (the kn layout strides by a whole row per k);
 *   !kn (eng_kmat_view, blas only): W itself, row-major [N, ld = K]. */
typedef struct eng_kmat {
    int32_t n_out;   /* N */
    int32_t n_in;    /* K */
    int32_t ld;
    bool    kn;      /* data is W^T */
    bool    panels;  /* ... in panels of 16 columns (ref) */
    bool    owned;   /* data is freed by eng_kmat_free */
    float  *data;
} eng_kmat;

/* Builds W's kn layout from w [N, K] (copied; rounded to bf16 when bf16).
 * Returns ENG_OK or ENG_ERR_NOMEM. */
int  eng_kmat_init(eng_kmat *m, const float *w, int32_t n_out, int32_t n_in, bool bf16);
/* The layout that kernel reads fastest (panels for ref, kn for blas). */
int  eng_kmat_init_for(eng_kmat *m, const float *w, int32_t n_out, int32_t n_in, eng_kernel kernel, bool bf16);
/* A view of w [N, K] (not copied, not owned): w must already be in its final
 * precision and outlive m. Only for ENG_KERNEL_BLAS (a tied output head). */
void eng_kmat_view(eng_kmat *m, float *w, int32_t n_out, int32_t n_in);
void eng_kmat_free(eng_kmat *m);  /* accepts a zeroed or freed struct */

// ----------------------------------------------------------------------------
// Products

/* Y[M, N] = X[M, K] . W^T, rounded when bf16. X rows have stride ldx, Y rows
 * stride ldy (>= N). M >= 1. */
void eng_k_matmul(const eng_kctx *ctx, const eng_kmat *W, int32_t M, const float *X, int32_t ldx,
                  float *Y, int32_t ldy);

/* Attention of one KV head, for R = n*T query rows: the n query heads that
 * share the KV head stacked, row r being the query of chunk token t = r % T
 * at absolute position pos0 + t. Keys and values are rows [0, P) of the
 * cache, P = pos0 + T, the end of the chunk.
 *
 * Scores: S[r, j] = Q[r, :] . K[j, :] (E terms), not scaled, not rounded.
 * blas computes the full rectangle j < P in one sgemm; ref computes the
 * causal part j <= pos0 + t only, one fixed-order dot per (r, j). */
void eng_k_attn_scores(const eng_kctx *ctx, int32_t R, int32_t T, int32_t pos0, int32_t E, const float *Q,
                       int32_t ldq, const float *K, int32_t ldk, float *S, int32_t lds);
/* Output: O[r, e] = sum over j of Pr[r, j] * V[j, e], rounded when bf16.
 * blas: one sgemm over j < P (masked probabilities are exactly 0); ref: one
 * accumulator per (r, e), j = 0 .. pos0 + t ascending. */
void eng_k_attn_values(const eng_kctx *ctx, int32_t R, int32_t T, int32_t pos0, int32_t E, const float *Pr,
                       int32_t lds, const float *V, int32_t ldv, float *O, int32_t ldo);

/* Causal grouped-query attention of one chunk of T tokens at positions
 * [pos0, pos0 + T), H query heads sharing G KV heads (head h reads KV head
 * h / (H/G)), head dim E, scale 1/sqrt(E):
 *   Q [T, H*E] (row stride ldq), K and V [P, G*E] (the cache rows [0, P),
 *   P = pos0 + T, row stride ldkv) -> O [T, H*E] (row stride ldo).
 * Per KV head g, its H/G query heads are stacked into R = (H/G)*T rows:
 * eng_k_attn_scores, then one eng_k_softmax_causal over a batch of KV heads,
 * then eng_k_attn_values per head. Batching changes no result.
 * Workspace: wq and wo [H*T*E] floats, ws [ws_cap] floats with
 * ws_cap >= R*P (as many KV heads per batch as fit). */
void eng_k_attention(const eng_kctx *ctx, int32_t T, int32_t pos0, int32_t H, int32_t G, int32_t E, const float *Q,
                     int32_t ldq, const float *K, const float *V, int32_t ldkv, float *O, int32_t ldo, float *wq,
                     float *wo, float *ws, int64_t ws_cap);

// ----------------------------------------------------------------------------
// Shared row-wise ops (identical for both kernels)

/* Y[t, :] = (X[t, :] * (1 / sqrtf(mean(X[t,:]^2) + eps))) * w, rounded.
 * The sum of the float squares is accumulated in double (as ggml) in a
 * fixed order that depends only on D: 8 lanes (lane i % 8, ascending i),
 * combined as ((l0 + l1) + (l2 + l3)) + ((l4 + l5) + (l6 + l7)). */
void eng_k_rmsnorm(const eng_kctx *ctx, int32_t T, int32_t D, const float *X, int32_t ldx,
                   const float *w, float eps, float *Y, int32_t ldy);

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

/* Causal softmax of R score rows (row r: query t = r % T), in place. For
 * row r the n = pos0 + t + 1 attended keys get s_j = round(S[r,j] * scale),
 * e_j = eng_expf(s_j - max_j s_j), p_j = round(e_j * (1 / sum_j e_j)); keys
 * j in [n, pos0 + T) get 0. The sum is a fixed order that depends only on
 * n: 8 float partial sums (lane j % 8, ascending j), combined as
 * ((l0 + l1) + (l2 + l3)) + ((l4 + l5) + (l6 + l7)). */
void eng_k_softmax_causal(const eng_kctx *ctx, int32_t R, int32_t T, int32_t pos0, float scale, float *S,
                          int32_t lds);

/* H[t, f] = round(silu(G[t, f]) * U[t, f]), silu(g) = g / (1 + eng_expf(-g)).
 * G and U are rows of GU: G at GU + t*ldgu, U at GU + t*ldgu + F. */
void eng_k_swiglu(const eng_kctx *ctx, int32_t T, int32_t F, const float *GU, int32_t ldgu, float *H,
                  int32_t ldh);

/* X[t, :] = round(X[t, :] + Y[t, :]) for t < T, D columns. */
void eng_k_add(const eng_kctx *ctx, int32_t T, int32_t D, float *X, int32_t ldx, const float *Y, int32_t ldy);

#endif /* ENG_KERNELS_H */
