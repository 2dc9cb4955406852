/*
 * engine/kernels.h: the engine's compute kernels (internal; never included
 * by the harness). Two families of matrix products and one set of shared
 * element-wise ops:
 *
 *   - blas: every product is one cblas_sgemm (OpenBLAS). Its per-row results
 *     depend on the shape (M, N, K) and the thread count: the effect under
 *     study.
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
 *     (kernels_ref.c).
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
 * products split by output columns and rows, attention blocks, row-wise
 * ops) runs on it, with exactly n_threads threads (the caller is thread 0)
 * and a static split of rows into contiguous ranges. Its workers poll for a
 * few microseconds (pause instructions, never sched_yield: on a loaded
 * machine a yield gives the core away for a whole time slice), then sleep
 * on a condition variable: they never spin against OpenBLAS's threads. A
 * range no worker has claimed by the time the caller finished its own is
 * run by the caller (a worker asleep or descheduled on a loaded machine
 * cannot hold a job up; the ranges, and so the results, stay the same).
 * OpenMP was measured unusable here: libgomp's threads spin for
 * milliseconds at every barrier, which starves OpenBLAS's threads between
 * sgemms (5x slower) and, when another process holds a core, stalls every
 * region on a descheduled partner (a ref prefill of the tiny model went
 * from 0.2 s to 20 s on this 2-core machine under load). A time-bounded
 * spin between ops was measured too: on a quiet machine it gained about
 * 10% on a 2-thread prefill of the base preset, under load it lost 20% there
 * and 35% on the tiny RWKV-7, so it is not used. */
typedef struct eng_pool eng_pool;

/* A pool of n_threads (the caller counts as thread 0). NULL on failure. */
eng_pool *eng_pool_new(int32_t n_threads);
void      eng_pool_free(eng_pool *p);  /* accepts NULL; joins the workers */

/* The ref kernel's code paths: the same bits from each (tested), at
 * different speeds. */
typedef enum eng_kpath {
    ENG_KPATH_SCALAR = 0,  /* portable C, fmaf() */
    ENG_KPATH_AVX2   = 1,  /* AVX2 + FMA intrinsics */
    ENG_KPATH_AVX512 = 2,  /* AVX-512F intrinsics */
} eng_kpath;

/* The fastest path this CPU runs; the environment variable
 * KVREPLAY_REF_PATH=scalar|avx2|avx512 can lower it (never raise it). */
eng_kpath   eng_kpath_best(void);
const char *eng_kpath_name(eng_kpath p);  /* "scalar", "avx2", "avx512" */

/* Numerics of one forward pass. */
typedef struct eng_kctx {
    eng_kernel kernel;
    bool       bf16;        /* precision == ENG_PRECISION_BF16 */
    int32_t    n_threads;   /* threads (== eng_numerics.n_threads) */
    eng_pool  *pool;        /* n_threads > 1: the model's pool; else NULL */
    eng_kpath  path;        /* ref: the code path (zero: scalar) */
} eng_kctx;

/* Runs fn(arg, r0, r1) over [0, n_rows) split into contiguous ranges, one
 * per thread of ctx's pool (inline without a pool or with one row). Results
 * must not depend on the split: fn treats each row on its own. Not
 * reentrant: fn must not call it with the same pool. Any thread may run
 * any range (see the pool). */
void eng_k_parallel_rows(const eng_kctx *ctx, int32_t n_rows, void (*fn)(void *arg, int32_t r0, int32_t r1),
                         void *arg);
/* Same, but runs on the caller alone when n_rows * row_cost (element
 * operations) is too small to be worth waking threads. */
void eng_k_parallel_rows_cost(const eng_kctx *ctx, int32_t n_rows, int64_t row_cost,
                              void (*fn)(void *arg, int32_t r0, int32_t r1), void *arg);
/* Same as eng_k_parallel_rows_cost, and fn learns which range it runs
 * (ith in [0, n_threads): the range's index, not the thread's), for
 * per-range scratch. */
void eng_k_parallel_ith(const eng_kctx *ctx, int32_t n_rows, int64_t row_cost,
                        void (*fn)(void *arg, int32_t ith, int32_t r0, int32_t r1), void *arg);

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

/* Columns of a ref panel: the ref kernel reads W^T in panels of 32 columns. */
#define ENG_REF_PANEL 32

/* A weight matrix W [N, K] (N outputs, K inputs: GGUF ne = [K, N]), in the
 * layout its kernel reads:
 *   kn (eng_kmat_init, both kernels): W^T row-major [K, ld], ld = N rounded
 *     up to 16, padding columns zero (blas calls sgemm NoTrans/NoTrans,
 *     which OpenBLAS packs faster than NoTrans/Trans);
 *   panels (eng_kmat_init_for with ENG_KERNEL_REF): W^T cut into panels of
 *     ENG_REF_PANEL columns, each contiguous [K][32], ld = N rounded up to
 *     32, padding columns zero: packed once at load, so the ref kernel's
 *     register blocks stream one panel sequentially;
 *   !kn (eng_kmat_view, blas only): W itself, row-major [N, ld = K]. */
typedef struct eng_kmat {
    int32_t n_out;   /* N */
    int32_t n_in;    /* K */
    int32_t ld;
    bool    kn;      /* data is W^T */
    bool    panels;  /* ... in panels of ENG_REF_PANEL columns (ref) */
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
 * stride ldy (>= N). M >= 1. blas: one sgemm; ref: eng_k_matmul_ref. */
void eng_k_matmul(const eng_kctx *ctx, const eng_kmat *W, int32_t M, const float *X, int32_t ldx,
                  float *Y, int32_t ldy);
/* The ref product, not rounded (kernels_ref.c): W in panels or kn. */
void eng_k_matmul_ref(const eng_kctx *ctx, const eng_kmat *W, int32_t M, const float *X, int32_t ldx, float *Y,
                      int32_t ldy);

/* The ref attention of one chunk (kernels_ref.c), full causal (W == 0) or
 * with a window of W keys (a query at p attends the positions (p - W, p]):
 * qg [H*T, E] the queries regrouped by KV head (query head h's T rows at
 * qg + h*T*E), K and V [P, G*E] (row stride ldkv) holding the positions
 * [kpos0, pos0 + T), P = pos0 + T - kpos0 -> O [T, H*E] (row stride ldo),
 * scale 1/sqrt(E), rounded when bf16. Scores are chains over e, the softmax
 * is eng_k_softmax_row over each row's attended keys, outputs are chains
 * over the attended keys in ascending position. ws: at least
 * eng_k_attention_ref_ws(ctx->n_threads, P, E) floats. */
void eng_k_attention_ref(const eng_kctx *ctx, int32_t T, int32_t pos0, int32_t W, int32_t kpos0, int32_t H, int32_t G,
                         int32_t E, const float *qg, const float *K, const float *V, int32_t ldkv, float *O,
                         int32_t ldo, float *ws, int64_t ws_cap);
int64_t eng_k_attention_ref_ws(int32_t n_threads, int32_t P, int32_t E);

/* Causal grouped-query attention of one chunk of T tokens at positions
 * [pos0, pos0 + T), H query heads sharing G KV heads (head h reads KV head
 * h / (H/G)), head dim E, scale 1/sqrt(E):
 *   Q [T, H*E] (row stride ldq), K and V [P, G*E] (the cache rows [0, P),
 *   P = pos0 + T, row stride ldkv) -> O [T, H*E] (row stride ldo).
 * The queries are regrouped into wq [H*T, E] (head h's rows at wq + h*T*E).
 * blas: per KV head g, its H/G query heads stacked into R = (H/G)*T rows,
 * one sgemm for the scores over the full rectangle of keys [0, P), one
 * eng_k_softmax_causal over a batch of KV heads, one sgemm for P V (masked
 * probabilities are exactly 0); wo [H*T, E] holds the outputs and ws
 * [ws_cap] the scores, ws_cap >= R*P (as many KV heads per batch as fit).
 * ref: eng_k_attention_ref (W = 0), ws_cap >= eng_k_attention_ws. Batching
 * changes no result. */
void eng_k_attention(const eng_kctx *ctx, int32_t T, int32_t pos0, int32_t H, int32_t G, int32_t E, const float *Q,
                     int32_t ldq, const float *K, const float *V, int32_t ldkv, float *O, int32_t ldo, float *wq,
                     float *wo, float *ws, int64_t ws_cap);
/* Floats of ws eng_k_attention needs at least for P keys: R*P for blas (one
 * KV head per batch), the ref kernel's per-thread scratch for ref. */
int64_t eng_k_attention_ws(const eng_kctx *ctx, int32_t T, int32_t P, int32_t H, int32_t G, int32_t E);

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
 * row r the n = pos0 + t + 1 attended keys get eng_k_softmax_row; keys j in
 * [n, pos0 + T) get 0. */
void eng_k_softmax_causal(const eng_kctx *ctx, int32_t R, int32_t T, int32_t pos0, float scale, float *S,
                          int32_t lds);
/* Softmax of n scores in place: s_j = round(s_j * scale),
 * e_j = eng_expf(s_j - max_j s_j), p_j = round(e_j * (1 / sum_j e_j)). The
 * max and the sum are a fixed order that depends only on n: 8 float
 * partial sums (lane j % 8, ascending j), combined as
 * ((l0 + l1) + (l2 + l3)) + ((l4 + l5) + (l6 + l7)). Rounded when bf16. */
void eng_k_softmax_row(float *s, int32_t n, float scale, bool bf16);
/* The same on one of the ref kernel's paths (the ref attention's softmax;
 * identical bits on every path, which the tests check through this). */
void eng_k_softmax_path(eng_kpath path, float *s, int32_t n, float scale, bool bf16);

/* H[t, f] = round(silu(G[t, f]) * U[t, f]), silu(g) = g / (1 + eng_expf(-g)).
 * G and U are rows of GU: G at GU + t*ldgu, U at GU + t*ldgu + F. */
void eng_k_swiglu(const eng_kctx *ctx, int32_t T, int32_t F, const float *GU, int32_t ldgu, float *H,
                  int32_t ldh);

/* X[t, :] = round(X[t, :] + Y[t, :]) for t < T, D columns. */
void eng_k_add(const eng_kctx *ctx, int32_t T, int32_t D, float *X, int32_t ldx, const float *Y, int32_t ldy);

#endif /* ENG_KERNELS_H */
