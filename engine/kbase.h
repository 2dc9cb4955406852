/*
 * engine/kbase.h: what both kernels share (internal; never included by the
 * harness): the numerics context of a forward pass, the ref kernel's code
 * paths, the weight-matrix layouts, bf16 rounding, the engine's exp, and the
 * parallel loops over the model's thread pool (pool.h). kernels_ref.h (the
 * ref kernel) and kernels.h (blas, the dispatch and the shared row-wise ops)
 * build on it; see kernels.h for the numerical contract.
 */
#ifndef ENG_KBASE_H
#define ENG_KBASE_H

#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "model.h"
#include "pool.h"

/* Threads a model may run (eng_model_load refuses more). */
#define ENG_MAX_THREADS 1024

/* The ref kernel's code paths: the same bits from each (tested), at
 * different speeds. */
typedef enum eng_kpath {
    ENG_KPATH_SCALAR = 0,  /* portable C, fmaf() */
    ENG_KPATH_AVX2   = 1,  /* AVX2 + FMA intrinsics */
    ENG_KPATH_AVX512 = 2,  /* AVX-512F intrinsics */
} eng_kpath;

/* Numerics of one forward pass. */
typedef struct eng_kctx {
    eng_kernel kernel;
    bool       bf16;        /* precision == ENG_PRECISION_BF16 */
    int32_t    n_threads;   /* threads (== eng_numerics.n_threads) */
    eng_pool  *pool;        /* n_threads > 1: the model's pool; else NULL */
    eng_kpath  path;        /* ref: the code path (zero: scalar) */
} eng_kctx;

/* Runs fn(arg, r0, r1) over [0, n_rows) cut into contiguous sub-ranges
 * that the threads of ctx's pool claim (inline without a pool or with one
 * row). Results must not depend on the split: fn treats each row on its
 * own. Not reentrant: fn must not call it with the same pool (pool.h). */
static inline void eng_k_parallel_rows(const eng_kctx *ctx, int32_t n_rows,
                                       void (*fn)(void *arg, int32_t r0, int32_t r1), void *arg) {
    eng_pool_rows(ctx->n_threads > 1 ? ctx->pool : NULL, n_rows, 0, fn, arg);
}
/* Same, but runs on the caller alone when n_rows * row_cost (element
 * operations) is too small to be worth waking threads (ENG_POOL_MIN_WORK). */
static inline void eng_k_parallel_rows_cost(const eng_kctx *ctx, int32_t n_rows, int64_t row_cost,
                                            void (*fn)(void *arg, int32_t r0, int32_t r1), void *arg) {
    eng_pool_rows(ctx->n_threads > 1 ? ctx->pool : NULL, n_rows, row_cost > 0 ? row_cost : 1, fn, arg);
}
/* Same as eng_k_parallel_rows_cost, and fn learns which thread runs it
 * (ith in [0, n_threads)), for per-thread scratch. */
static inline void eng_k_parallel_ith(const eng_kctx *ctx, int32_t n_rows, int64_t row_cost,
                                      void (*fn)(void *arg, int32_t ith, int32_t r0, int32_t r1), void *arg) {
    eng_pool_ith(ctx->n_threads > 1 ? ctx->pool : NULL, n_rows, row_cost > 0 ? row_cost : 1, fn, arg);
}

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

/* Rounds n floats to bf16 in place. */
static inline void eng_bf16_round_vec(float *x, int64_t n) {
    #pragma omp simd
    for (int64_t i = 0; i < n; i++) x[i] = eng_bf16_round(x[i]);
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

/* Columns of a ref panel: the ref kernel reads W^T in panels of 32 columns. */
#define ENG_REF_PANEL 32

/* A weight matrix W [N, K] (N outputs, K inputs: GGUF ne = [K, N]), in the
 * layout its kernel reads:
 *   kn (eng_kmat_init; blas at one thread): W^T row-major [K, ld], ld = N
 *     rounded up to 16, padding columns zero (blas calls sgemm
 *     NoTrans/NoTrans, which OpenBLAS packs faster than NoTrans/Trans, and
 *     its one-row sgemv reads it faster too);
 *   panels (eng_kmat_init_for with ENG_KERNEL_REF): W^T cut into panels of
 *     ENG_REF_PANEL columns, each contiguous [K][32], ld = N rounded up to
 *     32, padding columns zero: packed once at load, so the ref kernel's
 *     register blocks stream one panel sequentially;
 *   !kn (blas only: eng_kmat_init_for with more than one thread, copied;
 *     eng_kmat_view, not): W itself, row-major [N, ld = K]. A thread's column
 *     unit is then a contiguous block of rows, which a one-row sgemv streams
 *     faster than the kn layout's part-rows (decode); prefill is the same. */
typedef struct eng_kmat {
    int32_t n_out;   /* N */
    int32_t n_in;    /* K */
    int32_t ld;
    bool    kn;      /* data is W^T */
    bool    panels;  /* ... in panels of ENG_REF_PANEL columns (ref) */
    bool    owned;   /* data is freed by eng_kmat_free */
    float  *data;
} eng_kmat;

#endif /* ENG_KBASE_H */
