/*
 * engine/kernels_ref.c: the ref kernel's products and attention: fixed-order
 * fused multiply-add chains, batch-invariant and fast. See kernels.h for the
 * numerical contract; this file is how it is kept at speed.
 *
 * The chain. Every output element of a ref product is ONE float accumulator
 * that starts at +0 and takes acc = fma(x[k], b[k], acc) for k = 0, 1, ...,
 * K-1 in that order, each step a fused multiply-add rounded once (IEEE 754
 * fusedMultiplyAdd). The operations an element sees depend only on K and on
 * its own inputs: not on M, on which rows or columns share its register
 * block, on the row offset, on the thread count, nor on the instruction set.
 * So the result is batch-invariant by construction, and every path below
 * gives the same bits (tested). The FMA is deliberate: the build keeps
 * -ffp-contract=off, so the compiler never fuses a multiply and an add on
 * its own anywhere; here each fused step is written out (an intrinsic, or
 * fmaf() in the portable path), and the result is fixed by this code, not
 * by the compiler's choices. An element's chain may be interrupted (its
 * accumulator stored as a float and loaded again later, as the attention's
 * band heads and tails do): a stored float is exact, so the chain continues
 * bit for bit.
 *
 * Paths (eng_kpath, chosen at model load by what the CPU runs; the
 * environment variable KVREPLAY_REF_PATH=scalar|avx2|avx512 lowers it, for
 * comparisons):
 *   avx512: register blocks of up to 12 rows x 32 columns (24 zmm
 *           accumulators), 6 x 64 or 3 x 128 for short blocks;
 *   avx2:   up to 6 rows x 16 columns (12 ymm accumulators), 3 x 32, 1 x 64;
 *   scalar: portable C, fmaf() per element (compiled for any target).
 * The vector paths are compiled with target attributes and picked at run
 * time, so one binary runs on any x86-64 (and the build needs no -march).
 *
 * The B operand (weights W^T, keys, values) is read in panels of 32
 * columns: panel q, row k at b + q*pstride + k*ldb, 32 contiguous floats.
 * Weights are packed once at load into [N/32][K][32] (eng_kmat, padded with
 * zero columns), so a register block streams one panel sequentially. Keys
 * are packed per chunk; values are read in place when E is a multiple of
 * 32. Work is split over column panels and row blocks, never over k.
 *
 * The X operand of a weight product: on avx2, a register block of 4 to 6
 * rows broadcasts one x per row and k. Read in place, those are 4 to 6
 * streams a row stride apart, and a stride of a multiple of 4 KiB (K =
 * 1024 on the base preset) puts all of them in one set of the L1 cache; so
 * the caller packs X once per thread and product (eng_k_ref_pack: each row
 * block transposed, one contiguous stream) and the blocks read that copy
 * with the same chains (ukr_run's xt). Weights are allocated on huge
 * pages where the kernel allows (kernels.c), since they stream from memory.
 *
 * Attention (eng_k_attention_ref): per KV head, its query heads' rows are
 * cut into super blocks of up to 32 rows (register blocks of the path's MR
 * rows inside), the items of the pool. A super block walks the keys in
 * blocks of ENG_REF_ATTN_KB = 256 absolute positions with an online
 * softmax: each block's scores (fixed-order chains over e against the
 * packed keys) for every register block into a small buffer that stays in
 * cache; per row its scale, the block's max, the rescale of the row's
 * outputs and sum when the max grows, the exponentials and their sum (8
 * lanes from the row's first key in the block); then the block's values:
 * the keys every row attends through the register-blocked product (the
 * exponentials times the values, continuing the outputs' chains), the few
 * that only some rows attend (the causal diagonal, a window's start)
 * through a per-row axpy that continues the same chains. At the end each
 * output is multiplied by 1 / sum. The block boundaries are absolute
 * positions and every step a row sees depends only on its own keys, so
 * nothing depends on the super block, the chunk, the thread or the path;
 * the scores never leave the cache and the scratch does not grow with the
 * context beyond the packed keys and values.
 *
 * Super blocks of 16 rows or more (prefill) take the same steps in another
 * form (attn_group): the super blocks of a KV head go in step over the key
 * blocks, each block's keys and values copied once into contiguous scratch
 * for all of them (the next block's prefetched meanwhile), the scores
 * computed transposed (keys by rows, against the queries as one panel: no
 * key packing, and the cache rows, a whole row of every head apart, are
 * read once per block rather than repacked per chunk), the softmax of a
 * block every row attends whole taken 8 rows a vector, and the values'
 * product reading the transposed probabilities in place. Same chains, same
 * bits.
 *
 * Dimension letters: M rows, N columns, K the reduction, E head dim, P keys.
 */
#include "kernels_ref.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "status.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define REF_X86 1
#else
#define REF_X86 0
#endif

#define PW ENG_REF_PANEL  /* panel width: 32 columns */
#define MR_MAX 12         /* rows of the largest register block (avx512) */
#define TILE_W 128        /* widest register block: 4 panels */

// ----------------------------------------------------------------------------
// Paths

const char *eng_kpath_name(eng_kpath p) {
    return p == ENG_KPATH_AVX512 ? "avx512" : p == ENG_KPATH_AVX2 ? "avx2" : "scalar";
}

eng_kpath eng_kpath_best(void) {
    eng_kpath p = ENG_KPATH_SCALAR;
#if REF_X86
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) p = ENG_KPATH_AVX2;
    if (p == ENG_KPATH_AVX2 && __builtin_cpu_supports("avx512f")) p = ENG_KPATH_AVX512;
#endif
    const char *env = getenv("KVREPLAY_REF_PATH");
    if (env) {
        eng_kpath want = p;
        if (!strcmp(env, "scalar")) want = ENG_KPATH_SCALAR;
        else if (!strcmp(env, "avx2")) want = ENG_KPATH_AVX2;
        else if (!strcmp(env, "avx512")) want = ENG_KPATH_AVX512;
        if (want < p) p = want;  /* never above what the CPU runs */
    }
    return p;
}

/* Rows of the largest register block of a path. */
static int32_t mr_max(eng_kpath p) { return p == ENG_KPATH_AVX2 ? 6 : MR_MAX; }

// ----------------------------------------------------------------------------
// Register blocks: Y[MR, W] (+)= X[MR, K] . B[K, W], W = NV vectors of the
// path's width, vector v of row k at b + (v*lanes / 32)*pstride + (v*lanes) % 32 + k*ldb.
// acc_in: the accumulators start from Y (a chain continued) instead of +0.

typedef void (*ref_ukr)(int32_t K, const float *x, int64_t ldx, const float *b, int64_t ps, int64_t ldb, float *y,
                        int64_t ldy, int acc_in, const char *pf, int64_t pf_step);

#if REF_X86
#define AI512 static inline __attribute__((always_inline, target("avx512f")))
#define AI2 static inline __attribute__((always_inline, target("avx2,fma")))

AI512 void ukr512(const int MR, const int NV, const int XT, int32_t K, const float *x, int64_t ldx, const float *b,
                  int64_t ps, int64_t ldb, float *y, int64_t ldy, int acc_in, const char *pf, int64_t pf_step) {
    __m512 acc[MR_MAX][8];
    const float *bv[8];
    _Pragma("GCC unroll 8") for (int v = 0; v < NV; v++) bv[v] = b + (v / 2) * ps + (v % 2) * 16;
    _Pragma("GCC unroll 12") for (int r = 0; r < MR; r++)
        _Pragma("GCC unroll 8") for (int v = 0; v < NV; v++)
            acc[r][v] = acc_in ? _mm512_loadu_ps(y + r * ldy + 16 * v) : _mm512_setzero_ps();
    _Pragma("GCC unroll 2") for (int32_t k = 0; k < K; k++) {
        __m512 w[8];
        _Pragma("GCC unroll 8") for (int v = 0; v < NV; v++) w[v] = _mm512_loadu_ps(bv[v] + k * ldb);
        _mm_prefetch(pf + k * pf_step, _MM_HINT_T1);
        _Pragma("GCC unroll 12") for (int r = 0; r < MR; r++) {
            const __m512 xb = _mm512_set1_ps(XT ? x[r + (int64_t)k * ldx] : x[r * ldx + k]);
            _Pragma("GCC unroll 8") for (int v = 0; v < NV; v++) acc[r][v] = _mm512_fmadd_ps(xb, w[v], acc[r][v]);
        }
    }
    _Pragma("GCC unroll 12") for (int r = 0; r < MR; r++)
        _Pragma("GCC unroll 8") for (int v = 0; v < NV; v++) _mm512_storeu_ps(y + r * ldy + 16 * v, acc[r][v]);
}

AI2 void ukr256(const int MR, const int NV, const int XT, int32_t K, const float *x, int64_t ldx, const float *b,
                int64_t ps, int64_t ldb, float *y, int64_t ldy, int acc_in, const char *pf, int64_t pf_step) {
    __m256 acc[6][8];
    const float *bv[8];
    _Pragma("GCC unroll 8") for (int v = 0; v < NV; v++) bv[v] = b + (v / 4) * ps + (v % 4) * 8;
    _Pragma("GCC unroll 6") for (int r = 0; r < MR; r++)
        _Pragma("GCC unroll 8") for (int v = 0; v < NV; v++)
            acc[r][v] = acc_in ? _mm256_loadu_ps(y + r * ldy + 8 * v) : _mm256_setzero_ps();
    _Pragma("GCC unroll 2") for (int32_t k = 0; k < K; k++) {
        __m256 w[8];
        _Pragma("GCC unroll 8") for (int v = 0; v < NV; v++) w[v] = _mm256_loadu_ps(bv[v] + k * ldb);
        _mm_prefetch(pf + k * pf_step, _MM_HINT_T1);
        _Pragma("GCC unroll 6") for (int r = 0; r < MR; r++) {
            const __m256 xb = _mm256_broadcast_ss(XT ? x + r + (int64_t)k * ldx : x + r * ldx + k);
            _Pragma("GCC unroll 8") for (int v = 0; v < NV; v++) acc[r][v] = _mm256_fmadd_ps(xb, w[v], acc[r][v]);
        }
    }
    _Pragma("GCC unroll 6") for (int r = 0; r < MR; r++)
        _Pragma("GCC unroll 8") for (int v = 0; v < NV; v++) _mm256_storeu_ps(y + r * ldy + 8 * v, acc[r][v]);
}

#define K512(MR, NV)                                                                                          \
    __attribute__((target("avx512f"))) static void k512_##MR##_##NV(int32_t K, const float *x, int64_t ldx,  \
                                                                     const float *b, int64_t ps, int64_t ldb, \
                                                                     float *y, int64_t ldy, int acc_in,       \
                                                                     const char *pf, int64_t pf_step) {       \
        ukr512(MR, NV, 0, K, x, ldx, b, ps, ldb, y, ldy, acc_in, pf, pf_step);                                 \
    }
/* XT: X transposed, row r and k at x[r + k*ldx] (k256t: the attention's probabilities, keys by rows). */
#define K256X(NAME, MR, NV, XT)                                                                               \
    __attribute__((target("avx2,fma"))) static void NAME##MR##_##NV(int32_t K, const float *x, int64_t ldx,  \
                                                                    const float *b, int64_t ps, int64_t ldb, \
                                                                    float *y, int64_t ldy, int acc_in,       \
                                                                    const char *pf, int64_t pf_step) {       \
        ukr256(MR, NV, XT, K, x, ldx, b, ps, ldb, y, ldy, acc_in, pf, pf_step);                             \
    }
#define K256(MR, NV) K256X(k256_, MR, NV, 0)
#define K256T(MR, NV) K256X(k256t_, MR, NV, 1)
/* avx512: MR x 32 for every MR, MR x 64 for MR <= 6, MR x 128 for MR <= 3 (at most 24 accumulators) */
K512(1, 2) K512(2, 2) K512(3, 2) K512(4, 2) K512(5, 2) K512(6, 2)
K512(7, 2) K512(8, 2) K512(9, 2) K512(10, 2) K512(11, 2) K512(12, 2)
K512(1, 4) K512(2, 4) K512(3, 4) K512(4, 4) K512(5, 4) K512(6, 4)
K512(1, 8) K512(2, 8) K512(3, 8)
/* avx2: MR x 16 for every MR <= 6, MR x 32 for MR <= 3, 1 x 64 (at most 12 accumulators) */
K256(1, 2) K256(2, 2) K256(3, 2) K256(4, 2) K256(5, 2) K256(6, 2)
K256(1, 4) K256(2, 4) K256(3, 4)
K256(1, 8)
K256T(1, 2) K256T(2, 2) K256T(3, 2) K256T(4, 2) K256T(5, 2) K256T(6, 2)

static const ref_ukr k512_w32[MR_MAX] = {k512_1_2, k512_2_2, k512_3_2, k512_4_2,  k512_5_2,  k512_6_2,
                                         k512_7_2, k512_8_2, k512_9_2, k512_10_2, k512_11_2, k512_12_2};
static const ref_ukr k512_w64[6] = {k512_1_4, k512_2_4, k512_3_4, k512_4_4, k512_5_4, k512_6_4};
static const ref_ukr k512_w128[3] = {k512_1_8, k512_2_8, k512_3_8};
static const ref_ukr k256_w16[6] = {k256_1_2, k256_2_2, k256_3_2, k256_4_2, k256_5_2, k256_6_2};
static const ref_ukr k256_w32[3] = {k256_1_4, k256_2_4, k256_3_4};
static const ref_ukr k256t_w16[6] = {k256t_1_2, k256t_2_2, k256t_3_2, k256t_4_2, k256t_5_2, k256t_6_2};
#endif

/* The portable block: the same chain per element with fmaf(), any width
 * up to TILE_W (columns w of panel-relative index c at b + (c/32)*ps + c%32);
 * xt: X transposed (row r, k at x[r + k*ldx]). */
static void ukr_scalar(int32_t MR, int32_t W, int32_t K, const float *x, int64_t ldx, int xt, const float *b,
                       int64_t ps, int64_t ldb, float *y, int64_t ldy, int acc_in) {
    for (int32_t r = 0; r < MR; r++)
        for (int32_t c0 = 0; c0 < W; c0 += PW) {
            const int32_t nc = W - c0 < PW ? W - c0 : PW;
            const float *bp = b + (c0 / PW) * ps;
            float acc[PW];
            for (int32_t c = 0; c < nc; c++) acc[c] = acc_in ? y[r * ldy + c0 + c] : 0.0f;
            for (int32_t k = 0; k < K; k++) {
                const float xr = xt ? x[r + (int64_t)k * ldx] : x[r * ldx + k];
                const float *bk = bp + k * ldb;
                for (int32_t c = 0; c < nc; c++) acc[c] = fmaf(xr, bk[c], acc[c]);
            }
            memcpy(y + r * ldy + c0, acc, sizeof(float) * (size_t)nc);
        }
}

/* Widest block (columns) the path has for MR rows. */
static int32_t tile_w(eng_kpath p, int32_t MR) {
    if (p == ENG_KPATH_AVX512) return MR <= 3 ? 128 : MR <= 6 ? 64 : 32;
    if (p == ENG_KPATH_AVX2) return MR <= 1 ? 64 : MR <= 3 ? 32 : 16;
    return PW;
}

/* One block of MR rows x W columns (W a multiple of 16 no wider than
 * tile_w, starting on a panel boundary unless W == 16) whose B columns are
 * all readable. While it runs, the K lines pf + k*pf_step are prefetched
 * into L2 (the next weights; pf_step 0: nothing new). xt: X transposed
 * (row r, k at x[r + k*ldx]), in MR x 16 blocks, not on the avx512 path. */
static void ukr_run(eng_kpath p, int32_t MR, int32_t W, int32_t K, const float *x, int64_t ldx, int xt,
                    const float *b, int64_t ps, int64_t ldb, float *y, int64_t ldy, int acc_in, const char *pf,
                    int64_t pf_step) {
    ENG_ASSERT(!xt || p != ENG_KPATH_AVX512);
#if REF_X86
    if (xt && p == ENG_KPATH_AVX2) {
        for (int32_t c = 0; c < W; c += 16)  /* halves of panels */
            k256t_w16[MR - 1](K, x, ldx, b + (c / PW) * ps + c % PW, ps, ldb, y + c, ldy, acc_in,
                              pf + (c / 16) * pf_step * K, pf_step);
        return;
    }
    if (p == ENG_KPATH_AVX512 && W % 32 == 0) {
        const ref_ukr f = W == 128 ? k512_w128[MR - 1] : W == 64 ? k512_w64[MR - 1] : k512_w32[MR - 1];
        f(K, x, ldx, b, ps, ldb, y, ldy, acc_in, pf, pf_step);
        return;
    }
    if (p == ENG_KPATH_AVX2) {
        if (W == 64) { k256_1_8(K, x, ldx, b, ps, ldb, y, ldy, acc_in, pf, pf_step); return; }
        if (W == 32 && MR <= 3) { k256_w32[MR - 1](K, x, ldx, b, ps, ldb, y, ldy, acc_in, pf, pf_step); return; }
        for (int32_t c = 0; c < W; c += 16)  /* halves of panels */
            k256_w16[MR - 1](K, x, ldx, b + (c / PW) * ps + c % PW, ps, ldb, y + c, ldy, acc_in,
                             pf + (c / 16) * pf_step * K, pf_step);
        return;
    }
#endif
    (void)pf;
    (void)pf_step;
    ukr_scalar(MR, W, K, x, ldx, xt, b, ps, ldb, y, ldy, acc_in);
}

// ----------------------------------------------------------------------------
// The blocked product over a region: rows [0, M) x columns [c0, c1)

/* B operand: panel q, row k at b + q*ps + k*ldb; columns [0, nread) may be
 * read (nread >= the product's N: panels padded, or a row stride). */
typedef struct ref_b {
    const float *b;
    int64_t      ps, ldb;
    int32_t      nread;
} ref_b;

/* Balanced row blocks: M rows in ceil(M / mr) blocks, sizes differing by at most one. */
static inline void row_block(int32_t M, int32_t nb, int32_t ib, int32_t *r0, int32_t *r1) {
    *r0 = (int32_t)((int64_t)M * ib / nb);
    *r1 = (int32_t)((int64_t)M * (ib + 1) / nb);
}

/* One row block of MR rows over columns [c0, c1) of an N-column product
 * (c0 on a panel boundary), in blocks of at most wmax columns. Blocks whose
 * columns run past N go through a small tile; columns past B's readable
 * width through the portable block (same chains). The pf_bytes at pf are
 * prefetched along the way (0: none). */
static void gemm_rows(eng_kpath p, int32_t MR, int32_t K, const float *X, int64_t ldx, int xt, const ref_b *B,
                      int32_t c0, int32_t c1, int32_t N, float *Y, int64_t ldy, int acc_in, int32_t wmax,
                      const char *pf, int64_t pf_bytes) {
    const int32_t wmin = p == ENG_KPATH_AVX2 ? 16 : PW;
    const int32_t cend = (c1 + wmin - 1) / wmin * wmin;
    const int32_t n_calls = (c1 - c0 + wmax - 1) / wmax;
    const int64_t step = K > 0 ? pf_bytes / n_calls / K : 0;
    if (!pf) pf = (const char *)B->b;
    for (int32_t c = c0; c < c1;) {
        int32_t w = wmax;
        while (w > wmin && c + w > cend) w /= 2;  /* narrower at the end of the region */
        const float *bb = B->b + (c / PW) * B->ps + c % PW;
        const int32_t nc = N - c < w ? N - c : w;
        if (c + w <= B->nread && nc == w) {
            ukr_run(p, MR, w, K, X, ldx, xt, bb, B->ps, B->ldb, Y + c, ldy, acc_in, pf, step);
        } else {
            float t[MR_MAX * TILE_W];
            if (acc_in)
                for (int32_t r = 0; r < MR; r++) memcpy(t + r * w, Y + r * ldy + c, sizeof(float) * (size_t)nc);
            if (c + w <= B->nread) ukr_run(p, MR, w, K, X, ldx, xt, bb, B->ps, B->ldb, t, w, acc_in, pf, step);
            else ukr_scalar(MR, nc, K, X, ldx, xt, bb, B->ps, B->ldb, t, w, acc_in);
            for (int32_t r = 0; r < MR; r++) memcpy(Y + r * ldy + c, t + r * w, sizeof(float) * (size_t)nc);
        }
        pf += step * K;
        c += w;
    }
}

/* Y[i0..i1, c0..c1) (+)= X . B: rows in balanced blocks of at most the
 * path's MR, columns in chunks of the widest block of the largest row
 * block, each chunk of B reused by every row block while it is in cache.
 * With contiguous panels (packed weights: B streams from memory), the row
 * blocks of a chunk prefetch the next chunk into L2, a slice each. xp: X
 * packed by eng_k_ref_pack (row block [r0, r1) of the region transposed at
 * xp + r0*K), or NULL (X read in place). */
static void gemm_region(eng_kpath p, int32_t i0, int32_t i1, int32_t c0, int32_t c1, int32_t N, int32_t K,
                        const float *X, int64_t ldx, const float *xp, const ref_b *B, float *Y, int64_t ldy,
                        int acc_in) {
    const int32_t M = i1 - i0, mr = mr_max(p);
    if (M <= 0 || c1 <= c0) return;
    const int32_t nb = (M + mr - 1) / mr;
    const int32_t wmax = tile_w(p, (M + nb - 1) / nb);
    const bool contig = B->ldb == PW && B->ps == (int64_t)K * PW;
    for (int32_t cc = c0; cc < c1; cc += wmax) {
        const int32_t ce = cc + wmax < c1 ? cc + wmax : c1;
        /* the next chunk's panels: [ce, min(ce + wmax, c1)) */
        const int32_t ne = ce + wmax < c1 ? ce + wmax : c1;
        const int64_t next = contig && ne > ce ? (int64_t)((ne + PW - 1) / PW - ce / PW) * B->ps * 4 : 0;
        const char *nb0 = (const char *)(B->b + (ce / PW) * B->ps);
        for (int32_t ib = 0; ib < nb; ib++) {
            int32_t r0, r1;
            row_block(M, nb, ib, &r0, &r1);
            const int64_t s0 = next * ib / nb, s1 = next * (ib + 1) / nb;
            const float *x = xp ? xp + (int64_t)r0 * K : X + (int64_t)(i0 + r0) * ldx;
            gemm_rows(p, r1 - r0, K, x, xp ? r1 - r0 : ldx, xp != NULL, B, cc, ce, N, Y + (int64_t)(i0 + r0) * ldy,
                      ldy, acc_in, tile_w(p, r1 - r0) < wmax ? tile_w(p, r1 - r0) : wmax, next ? nb0 + s0 : NULL,
                      s1 - s0);
        }
    }
}

// ----------------------------------------------------------------------------
// Products with packed weights, split over panels (and rows when panels are few)

/* B operand of W: panels, or W^T [K, ld] read in place (panel q at column
 * 32q, rows a whole ld apart). */
static ref_b weights_b(const eng_kmat *W) {
    if (W->panels) return (ref_b){.b = W->data, .ps = (int64_t)W->n_in * PW, .ldb = PW, .nread = W->ld};
    ENG_ASSERT(W->kn);
    return (ref_b){.b = W->data, .ps = PW, .ldb = W->ld, .nread = W->ld};
}

int32_t eng_k_ref_row_groups(const eng_kctx *ctx, int32_t M, int32_t n_pan) {
    /* Rows are split too when there are few panels for the threads. */
    const int32_t nth = ctx->n_threads, mr = mr_max(ctx->path);
    int32_t n_rg = 1;
    if (nth > 1 && n_pan < 4 * nth) {
        n_rg = (4 * nth + n_pan - 1) / n_pan;
        const int32_t max_rg = (M + mr - 1) / mr;
        if (n_rg > max_rg) n_rg = max_rg;
    }
    return n_rg;
}

void eng_k_ref_row_group(int32_t M, int32_t n_rg, int32_t rg, int32_t *r0, int32_t *r1) { row_block(M, n_rg, rg, r0, r1); }

/* Whether the ref product packs M rows (rows per block of the region: 4
 * to 6 on avx2). */
static bool packs(const eng_kctx *ctx, int32_t M) {
    const int32_t mr = mr_max(ctx->path), nb = (M + mr - 1) / mr;
    return ctx->path == ENG_KPATH_AVX2 && M > 0 && (M + nb - 1) / nb >= 4;
}

int64_t eng_k_ref_pack_floats(const eng_kctx *ctx, int32_t M, int32_t K) {
    return packs(ctx, M) ? (int64_t)M * K : 0;
}

#if REF_X86
/* Columns [0, K8) of n <= 8 rows (ld apart), 8 at a time, into d[k*n + r]:
 * the 8 x 8 transpose of 8 columns, each k's n values stored as a whole
 * vector (its 8 - n extra lanes are overwritten by the next k's; the last
 * k's spill past d + K8*n, which the caller allows). */
__attribute__((target("avx2"))) static void pack_t256(const float *x, int64_t ld, int32_t n, int32_t K8, float *d) {
    const float *row[8];
    for (int r = 0; r < 8; r++) row[r] = x + (int64_t)(r < n ? r : 0) * ld;
    for (int32_t k = 0; k < K8; k += 8) {
        __m256 v[8], t[8];
        for (int r = 0; r < 8; r++) v[r] = _mm256_loadu_ps(row[r] + k);
        for (int r = 0; r < 8; r += 2) {
            t[r] = _mm256_unpacklo_ps(v[r], v[r + 1]);
            t[r + 1] = _mm256_unpackhi_ps(v[r], v[r + 1]);
        }
        for (int r = 0; r < 8; r += 4) {
            v[r] = _mm256_shuffle_ps(t[r], t[r + 2], 0x44);
            v[r + 1] = _mm256_shuffle_ps(t[r], t[r + 2], 0xee);
            v[r + 2] = _mm256_shuffle_ps(t[r + 1], t[r + 3], 0x44);
            v[r + 3] = _mm256_shuffle_ps(t[r + 1], t[r + 3], 0xee);
        }
        /* v[0..3]: rows 0-3 of columns k+{0,1,2,3} | k+{4,5,6,7}; v[4..7] the same for rows 4-7;
         * stored in ascending k, each store's extra lanes overwritten by the next */
        for (int j = 0; j < 4; j++)
            _mm256_storeu_ps(d + (int64_t)(k + j) * n, _mm256_permute2f128_ps(v[j], v[j + 4], 0x20));
        for (int j = 0; j < 4; j++)
            _mm256_storeu_ps(d + (int64_t)(k + j + 4) * n, _mm256_permute2f128_ps(v[j], v[j + 4], 0x31));
    }
}
#endif

/* Row block [r0, r1) of gemm_region's blocks over M rows transposed at
 * xp + r0*K: element (r, k) at xp[r0*K + k*(r1 - r0) + r - r0]. Blocks
 * in order, so a block's vector stores past its end land in the next
 * block's place before it is written; the last block's last 8 columns
 * (and any short of 8) are copied one by one. */
void eng_k_ref_pack(const eng_kctx *ctx, int32_t M, int32_t K, const float *X, int32_t ldx, float *xp) {
    const int32_t mr = mr_max(ctx->path), nb = (M + mr - 1) / mr;
    for (int32_t ib = 0; ib < nb; ib++) {
        int32_t r0, r1;
        row_block(M, nb, ib, &r0, &r1);
        const int32_t n = r1 - r0;
        const float *x = X + (int64_t)r0 * ldx;
        float *d = xp + (int64_t)r0 * K;
        int32_t k = 0;
#if REF_X86
        if (ctx->path == ENG_KPATH_AVX2 && n <= 8) {
            k = (ib == nb - 1 ? K - 8 : K) / 8 * 8;  /* >= 0: C's division truncates toward zero */
            if (k > 0) pack_t256(x, ldx, n, k, d);
        }
#endif
        for (; k < K; k++)
            for (int32_t r = 0; r < n; r++) d[(int64_t)k * n + r] = x[(int64_t)r * ldx + k];
    }
}

void eng_k_matmul_ref_block(const eng_kctx *ctx, const eng_kmat *W, int32_t r0, int32_t r1, int32_t c0, int32_t c1,
                            const float *X, int32_t ldx, const float *xp, float *Y, int32_t ldy) {
    const ref_b B = weights_b(W);
    ENG_ASSERT(!xp || packs(ctx, r1 - r0));
    gemm_region(ctx->path, r0, r1, c0, c1, W->n_out, W->n_in, X, ldx, xp, &B, Y, ldy, 0);
}

// ----------------------------------------------------------------------------
// Attention

/* y[0..W) = fma(p, B[j][0..W), y): one step of W chains (W a multiple of
 * 32; b is row j of panel 0, panels ps apart). */
#if REF_X86
__attribute__((target("avx512f"))) static void axpy512(int32_t W, float p, const float *b, int64_t ps, float *y) {
    const __m512 pv = _mm512_set1_ps(p);
    for (int32_t c0 = 0; c0 < W; c0 += PW) {
        const float *bp = b + (c0 / PW) * ps;
        _mm512_storeu_ps(y + c0, _mm512_fmadd_ps(pv, _mm512_loadu_ps(bp), _mm512_loadu_ps(y + c0)));
        _mm512_storeu_ps(y + c0 + 16, _mm512_fmadd_ps(pv, _mm512_loadu_ps(bp + 16), _mm512_loadu_ps(y + c0 + 16)));
    }
}

__attribute__((target("avx2,fma"))) static void axpy256(int32_t W, float p, const float *b, int64_t ps, float *y) {
    const __m256 pv = _mm256_set1_ps(p);
    for (int32_t c0 = 0; c0 < W; c0 += PW) {
        const float *bp = b + (c0 / PW) * ps;
        for (int c = 0; c < PW; c += 8)
            _mm256_storeu_ps(y + c0 + c, _mm256_fmadd_ps(pv, _mm256_loadu_ps(bp + c), _mm256_loadu_ps(y + c0 + c)));
    }
}
#endif

static void axpy_row(eng_kpath path, int32_t W, float p, const float *b, int64_t ps, float *y) {
#if REF_X86
    if (path == ENG_KPATH_AVX512) { axpy512(W, p, b, ps, y); return; }
    if (path == ENG_KPATH_AVX2) { axpy256(W, p, b, ps, y); return; }
#endif
    for (int32_t c0 = 0; c0 < W; c0 += PW)
        for (int32_t c = 0; c < PW; c++) y[c0 + c] = fmaf(p, b[(c0 / PW) * ps + c], y[c0 + c]);
}

// ----------------------------------------------------------------------------
// The softmax of a row, portable: the bits every path gives (both kernels
// use it: blas's causal softmax through eng_k_softmax_path)

/* Softmax of one row's n attended scores, in place (kernels_ref.h). The
 * `omp simd` loops are element-wise (no reduction clause): they let GCC
 * vectorise eng_expf without changing any element's operations. The max
 * and the sum use 8 explicit lanes (lane j % 8, ascending j). */
void eng_k_softmax_row(float *s, int32_t n, float scale, bool bf16) {
    #pragma omp simd
    for (int32_t j = 0; j < n; j++) s[j] = s[j] * scale;
    if (bf16) eng_bf16_round_vec(s, n);
    float m8[8], a8[8];
    for (int c = 0; c < 8; c++) { m8[c] = -INFINITY; a8[c] = 0.0f; }
    const int32_t n8 = n / 8 * 8;
    for (int32_t j = 0; j < n8; j += 8)
        for (int c = 0; c < 8; c++) m8[c] = s[j + c] > m8[c] ? s[j + c] : m8[c];
    for (int32_t j = n8; j < n; j++) m8[j & 7] = s[j] > m8[j & 7] ? s[j] : m8[j & 7];
    float mx = m8[0];
    for (int c = 1; c < 8; c++) mx = m8[c] > mx ? m8[c] : mx;
    #pragma omp simd
    for (int32_t j = 0; j < n; j++) s[j] = eng_expf(s[j] - mx);
    for (int32_t j = 0; j < n8; j += 8)
        for (int c = 0; c < 8; c++) a8[c] += s[j + c];
    for (int32_t j = n8; j < n; j++) a8[j & 7] += s[j];
    const float sum = ((a8[0] + a8[1]) + (a8[2] + a8[3])) + ((a8[4] + a8[5]) + (a8[6] + a8[7]));
    const float inv = 1.0f / sum;
    #pragma omp simd
    for (int32_t j = 0; j < n; j++) s[j] = s[j] * inv;
    if (bf16) eng_bf16_round_vec(s, n);
}

// ----------------------------------------------------------------------------
// The softmax of a row, AVX-512: eng_k_softmax_row's operations element for
// element (the same bits, tested), 16 lanes wide. The 8 partial maxima and
// sums of eng_k_softmax_row (lane j % 8, ascending j) are kept as 8-lane
// vectors that take the low, then the high half of each 16 scores, so each
// partial sees its elements in the same order.

#if REF_X86
#define AI512F static inline __attribute__((always_inline, target("avx512f")))

/* eng_bf16_round, 16 lanes. */
AI512F __m512 bf16_512(__m512 x) {
    const __m512i u = _mm512_castps_si512(x);
    const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
    const __m512i rounded = _mm512_and_si512(_mm512_add_epi32(_mm512_add_epi32(u, _mm512_set1_epi32(0x7fff)), lsb),
                                             _mm512_set1_epi32((int32_t)0xffff0000u));
    const __m512i quiet = _mm512_and_si512(_mm512_or_si512(u, _mm512_set1_epi32(0x00400000)),
                                           _mm512_set1_epi32((int32_t)0xffff0000u));
    const __mmask16 nan = _mm512_cmpgt_epu32_mask(_mm512_and_si512(u, _mm512_set1_epi32(0x7fffffff)),
                                                  _mm512_set1_epi32(0x7f800000));
    return _mm512_castsi512_ps(_mm512_mask_blend_epi32(nan, rounded, quiet));
}

/* eng_expf, 16 lanes: the same operations (no fused steps). The range
 * selections change nothing for x in [-87, 88]; a block whose lanes are all
 * there (the usual case: softmax's inputs are <= 0 and rarely below -87)
 * skips them. */
AI512F __m512 exp512_core(__m512 xc) {
    const __m512 t = _mm512_add_ps(_mm512_mul_ps(xc, _mm512_set1_ps(1.44269504088896341f)), _mm512_set1_ps(12582912.0f));
    const __m512 n = _mm512_sub_ps(t, _mm512_set1_ps(12582912.0f));
    __m512 r = _mm512_sub_ps(xc, _mm512_mul_ps(n, _mm512_set1_ps(0.693145751953125f)));
    r = _mm512_sub_ps(r, _mm512_mul_ps(n, _mm512_set1_ps(1.428606765330187045e-06f)));
    const __m512 r2 = _mm512_mul_ps(r, r), r4 = _mm512_mul_ps(r2, r2);
    const __m512 p01 = _mm512_add_ps(_mm512_set1_ps(1.0f), r);
    const __m512 p23 = _mm512_add_ps(_mm512_set1_ps(0.5f), _mm512_mul_ps(r, _mm512_set1_ps(1.0f / 6.0f)));
    const __m512 p45 = _mm512_add_ps(_mm512_set1_ps(1.0f / 24.0f), _mm512_mul_ps(r, _mm512_set1_ps(1.0f / 120.0f)));
    const __m512 p67 = _mm512_add_ps(_mm512_set1_ps(1.0f / 720.0f), _mm512_mul_ps(r, _mm512_set1_ps(1.0f / 5040.0f)));
    const __m512 p = _mm512_add_ps(_mm512_add_ps(p01, _mm512_mul_ps(r2, p23)),
                                   _mm512_mul_ps(r4, _mm512_add_ps(p45, _mm512_mul_ps(r2, p67))));
    const __m512i bits = _mm512_slli_epi32(_mm512_add_epi32(_mm512_cvttps_epi32(n), _mm512_set1_epi32(127)), 23);
    return _mm512_mul_ps(p, _mm512_castsi512_ps(bits));
}

AI512F __m512 exp512(__m512 x) {
    const __m512i u = _mm512_castps_si512(x);
    /* in [-87, 88] and not NaN: u <= 0x42b00000 as signed (x <= 88, or negative), u <= 0xc2ae0000 as unsigned */
    const __mmask16 out = _mm512_cmpgt_epi32_mask(u, _mm512_set1_epi32(0x42b00000)) |
                          _mm512_cmpgt_epu32_mask(u, _mm512_set1_epi32((int32_t)0xc2ae0000u));
    if (!out) return exp512_core(x);
    const __mmask16 is_nan = _mm512_cmpgt_epu32_mask(_mm512_and_si512(u, _mm512_set1_epi32(0x7fffffff)),
                                                     _mm512_set1_epi32(0x7f800000));
    const __mmask16 above = _mm512_cmpgt_epi32_mask(u, _mm512_set1_epi32(0x42b00000));
    const __mmask16 below = _mm512_cmpgt_epu32_mask(u, _mm512_set1_epi32((int32_t)0xc2ae0000u));
    __m512 xc = _mm512_mask_blend_ps(above, x, _mm512_set1_ps(88.0f));
    xc = _mm512_mask_blend_ps(below, xc, _mm512_set1_ps(-87.0f));
    xc = _mm512_mask_blend_ps(is_nan, xc, _mm512_setzero_ps());
    __m512 y = exp512_core(xc);
    y = _mm512_mask_blend_ps(_mm512_cmpgt_epu32_mask(u, _mm512_set1_epi32((int32_t)0xc2aeac4fu)), y,
                             _mm512_setzero_ps());
    y = _mm512_mask_blend_ps(_mm512_cmpgt_epi32_mask(u, _mm512_set1_epi32(0x42b17217)), y,
                             _mm512_set1_ps(__builtin_inff()));
    return _mm512_mask_blend_ps(is_nan, y, x);
}

/* Lanes [0, n) of 16 (n <= 16). */
static inline __mmask16 mask16(int32_t n) { return n >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << n) - 1); }

/* R <= 4 rows at once, row r at s[r] with n[r] scores: each row's operations
 * are exactly eng_k_softmax_row's; interleaving rows only overlaps their
 * dependency chains (the 8 partial sums of a row are serial by definition). */
#define SM_ROWS 4
/* Rows beyond R get n = 0 and are skipped; the loops over r are unrolled,
 * so each row's partial maxima and sums stay in registers. */
__attribute__((target("avx512f"))) static void softmax512_rows(float *const *sr, const int32_t *nr, int R, float scale,
                                                                 bool bf16) {
    const __m512 vs = _mm512_set1_ps(scale);
    __m512 m8[SM_ROWS], a8[SM_ROWS], vmx[SM_ROWS], inv[SM_ROWS];
    float *s[SM_ROWS];
    int32_t n[SM_ROWS], nmax = 0;
    _Pragma("GCC unroll 4") for (int r = 0; r < SM_ROWS; r++) {
        s[r] = r < R ? sr[r] : NULL;
        n[r] = r < R ? nr[r] : 0;
        m8[r] = _mm512_set1_ps(-__builtin_inff());  /* lanes 0..7 used */
        a8[r] = _mm512_setzero_ps();
        if (n[r] > nmax) nmax = n[r];
    }
    for (int32_t j = 0; j < nmax; j += 16)
        _Pragma("GCC unroll 4") for (int r = 0; r < SM_ROWS; r++) {
            if (j >= n[r]) continue;
            const __mmask16 k = mask16(n[r] - j);
            __m512 v = _mm512_mul_ps(_mm512_maskz_loadu_ps(k, s[r] + j), vs);
            if (bf16) v = bf16_512(v);
            _mm512_mask_storeu_ps(s[r] + j, k, v);
            m8[r] = _mm512_mask_max_ps(m8[r], k & 0xff, v, m8[r]);  /* low half: j .. j+7 */
            const __m512 hi = _mm512_shuffle_f32x4(v, v, 0x4e);    /* j+8 .. j+15 into lanes 0..7 */
            m8[r] = _mm512_mask_max_ps(m8[r], (__mmask16)(k >> 8), hi, m8[r]);
        }
    _Pragma("GCC unroll 4") for (int r = 0; r < SM_ROWS; r++) {
        float m[16];
        _mm512_storeu_ps(m, m8[r]);
        float mx = m[0];
        for (int c = 1; c < 8; c++) mx = m[c] > mx ? m[c] : mx;
        vmx[r] = _mm512_set1_ps(mx);
    }
    for (int32_t j = 0; j < nmax; j += 16)
        _Pragma("GCC unroll 4") for (int r = 0; r < SM_ROWS; r++) {
            if (j >= n[r]) continue;
            const __mmask16 k = mask16(n[r] - j);
            const __m512 e = exp512(_mm512_sub_ps(_mm512_maskz_loadu_ps(k, s[r] + j), vmx[r]));
            _mm512_mask_storeu_ps(s[r] + j, k, e);
            a8[r] = _mm512_mask_add_ps(a8[r], k & 0xff, a8[r], e);
            a8[r] = _mm512_mask_add_ps(a8[r], (__mmask16)(k >> 8), a8[r], _mm512_shuffle_f32x4(e, e, 0x4e));
        }
    _Pragma("GCC unroll 4") for (int r = 0; r < SM_ROWS; r++) {
        float a[16];
        _mm512_storeu_ps(a, a8[r]);
        const float sum = ((a[0] + a[1]) + (a[2] + a[3])) + ((a[4] + a[5]) + (a[6] + a[7]));
        inv[r] = _mm512_set1_ps(1.0f / sum);
    }
    for (int32_t j = 0; j < nmax; j += 16)
        _Pragma("GCC unroll 4") for (int r = 0; r < SM_ROWS; r++) {
            if (j >= n[r]) continue;
            const __mmask16 k = mask16(n[r] - j);
            __m512 v = _mm512_mul_ps(_mm512_maskz_loadu_ps(k, s[r] + j), inv[r]);
            if (bf16) v = bf16_512(v);
            _mm512_mask_storeu_ps(s[r] + j, k, v);
        }
}
#endif


// ----------------------------------------------------------------------------
// The softmax of a row, AVX2: eng_k_softmax_row's operations element for
// element (the same bits, tested). Its 8 partial maxima and sums (lane
// j % 8, ascending j) are exactly one 8-lane vector; the tail past the last
// multiple of 8 takes the same scalar steps as eng_k_softmax_row, on the
// lanes stored back to floats.

#if REF_X86
#define AI2F static inline __attribute__((always_inline, target("avx2,fma")))

/* eng_bf16_round, 8 lanes. */
AI2F __m256 bf16_256(__m256 x) {
    const __m256i u = _mm256_castps_si256(x);
    const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
    const __m256i rounded = _mm256_and_si256(_mm256_add_epi32(_mm256_add_epi32(u, _mm256_set1_epi32(0x7fff)), lsb),
                                             _mm256_set1_epi32((int32_t)0xffff0000u));
    const __m256i quiet = _mm256_and_si256(_mm256_or_si256(u, _mm256_set1_epi32(0x00400000)),
                                           _mm256_set1_epi32((int32_t)0xffff0000u));
    const __m256i nan = _mm256_cmpgt_epi32(_mm256_and_si256(u, _mm256_set1_epi32(0x7fffffff)),
                                           _mm256_set1_epi32(0x7f800000));
    return _mm256_castsi256_ps(_mm256_blendv_epi8(rounded, quiet, nan));
}

/* Unsigned a > b, lane by lane (all ones or zero). */
AI2F __m256i gtu_256(__m256i a, uint32_t b) {
    const __m256i bias = _mm256_set1_epi32((int32_t)0x80000000u);
    return _mm256_cmpgt_epi32(_mm256_xor_si256(a, bias), _mm256_set1_epi32((int32_t)(b ^ 0x80000000u)));
}

/* eng_expf, 8 lanes: the same operations (no fused steps), but for the
 * power of two: its exponent comes from t's bits instead of converting n.
 * On the core's domain (after exp256's clamp, [-87, 88]) t lies in
 * [2^23, 2^24), where its bits are 0x4B400000 + n, so this is (int)n + 127
 * exactly, one operation fewer and off the chain through n (the tests
 * compare every float's exp with eng_expf's). */
AI2F __m256 exp256_core(__m256 xc) {
    const __m256 t = _mm256_add_ps(_mm256_mul_ps(xc, _mm256_set1_ps(1.44269504088896341f)), _mm256_set1_ps(12582912.0f));
    const __m256 n = _mm256_sub_ps(t, _mm256_set1_ps(12582912.0f));
    __m256 r = _mm256_sub_ps(xc, _mm256_mul_ps(n, _mm256_set1_ps(0.693145751953125f)));
    r = _mm256_sub_ps(r, _mm256_mul_ps(n, _mm256_set1_ps(1.428606765330187045e-06f)));
    const __m256 r2 = _mm256_mul_ps(r, r), r4 = _mm256_mul_ps(r2, r2);
    const __m256 p01 = _mm256_add_ps(_mm256_set1_ps(1.0f), r);
    const __m256 p23 = _mm256_add_ps(_mm256_set1_ps(0.5f), _mm256_mul_ps(r, _mm256_set1_ps(1.0f / 6.0f)));
    const __m256 p45 = _mm256_add_ps(_mm256_set1_ps(1.0f / 24.0f), _mm256_mul_ps(r, _mm256_set1_ps(1.0f / 120.0f)));
    const __m256 p67 = _mm256_add_ps(_mm256_set1_ps(1.0f / 720.0f), _mm256_mul_ps(r, _mm256_set1_ps(1.0f / 5040.0f)));
    const __m256 p = _mm256_add_ps(_mm256_add_ps(p01, _mm256_mul_ps(r2, p23)),
                                   _mm256_mul_ps(r4, _mm256_add_ps(p45, _mm256_mul_ps(r2, p67))));
    const __m256i bits =
        _mm256_slli_epi32(_mm256_sub_epi32(_mm256_castps_si256(t), _mm256_set1_epi32(0x4B400000 - 127)), 23);
    return _mm256_mul_ps(p, _mm256_castsi256_ps(bits));
}

AI2F __m256 exp256(__m256 x) {
    const __m256i u = _mm256_castps_si256(x);
    /* in [-87, 88] and not NaN: u <= 0x42b00000 as signed, u <= 0xc2ae0000 as unsigned */
    const __m256i out = _mm256_or_si256(_mm256_cmpgt_epi32(u, _mm256_set1_epi32(0x42b00000)), gtu_256(u, 0xc2ae0000u));
    if (_mm256_testz_si256(out, out)) return exp256_core(x);
    const __m256 is_nan = _mm256_castsi256_ps(_mm256_cmpgt_epi32(_mm256_and_si256(u, _mm256_set1_epi32(0x7fffffff)),
                                                                 _mm256_set1_epi32(0x7f800000)));
    const __m256 above = _mm256_castsi256_ps(_mm256_cmpgt_epi32(u, _mm256_set1_epi32(0x42b00000)));
    const __m256 below = _mm256_castsi256_ps(gtu_256(u, 0xc2ae0000u));
    __m256 xc = _mm256_blendv_ps(x, _mm256_set1_ps(88.0f), above);
    xc = _mm256_blendv_ps(xc, _mm256_set1_ps(-87.0f), below);
    xc = _mm256_blendv_ps(xc, _mm256_setzero_ps(), is_nan);
    __m256 y = exp256_core(xc);
    y = _mm256_blendv_ps(y, _mm256_setzero_ps(), _mm256_castsi256_ps(gtu_256(u, 0xc2aeac4fu)));
    y = _mm256_blendv_ps(y, _mm256_set1_ps(__builtin_inff()),
                         _mm256_castsi256_ps(_mm256_cmpgt_epi32(u, _mm256_set1_epi32(0x42b17217))));
    return _mm256_blendv_ps(y, x, is_nan);
}

/* x[k] = exp256(x[k]) for k < n (n <= 8), the common case (every lane in
 * [-87, 88]) tested once for all of them: the lanes' largest bits as
 * signed and as unsigned integers against exp256's two bounds (a lane is
 * past one exactly when their maximum is), so that the vectors' chains
 * run side by side without a branch between them. */
AI2F void exp256_n(__m256 *x, int n) {
    __m256i ms = _mm256_castps_si256(x[0]), mu = ms;
    _Pragma("GCC unroll 8") for (int k = 1; k < n; k++) {
        ms = _mm256_max_epi32(ms, _mm256_castps_si256(x[k]));
        mu = _mm256_max_epu32(mu, _mm256_castps_si256(x[k]));
    }
    const __m256i out =
        _mm256_or_si256(_mm256_cmpgt_epi32(ms, _mm256_set1_epi32(0x42b00000)), gtu_256(mu, 0xc2ae0000u));
    if (_mm256_testz_si256(out, out)) {
        _Pragma("GCC unroll 8") for (int k = 0; k < n; k++) x[k] = exp256_core(x[k]);
    } else {
        _Pragma("GCC unroll 8") for (int k = 0; k < n; k++) x[k] = exp256(x[k]);
    }
}

/* R <= SM_ROWS rows at once (their dependency chains overlap), row r at
 * s[r] with n[r] scores. */
__attribute__((target("avx2,fma"))) static void softmax256_rows(float *const *sr, const int32_t *nr, int R, float scale,
                                                                 bool bf16) {
    const __m256 vs = _mm256_set1_ps(scale);
    __m256 m8[SM_ROWS], a8[SM_ROWS];
    float *s[SM_ROWS], mx[SM_ROWS], inv[SM_ROWS];
    int32_t n[SM_ROWS], n8[SM_ROWS], nmax = 0;
    _Pragma("GCC unroll 4") for (int r = 0; r < SM_ROWS; r++) {
        s[r] = r < R ? sr[r] : NULL;
        n[r] = r < R ? nr[r] : 0;
        n8[r] = n[r] / 8 * 8;
        m8[r] = _mm256_set1_ps(-__builtin_inff());
        a8[r] = _mm256_setzero_ps();
        if (n8[r] > nmax) nmax = n8[r];
    }
    /* scale (and round), the 8 partial maxima */
    for (int32_t j = 0; j < nmax; j += 8)
        _Pragma("GCC unroll 4") for (int r = 0; r < SM_ROWS; r++) {
            if (j >= n8[r]) continue;
            __m256 v = _mm256_mul_ps(_mm256_loadu_ps(s[r] + j), vs);
            if (bf16) v = bf16_256(v);
            _mm256_storeu_ps(s[r] + j, v);
            m8[r] = _mm256_max_ps(v, m8[r]);  /* v > m ? v : m, as the scalar lanes */
        }
    for (int r = 0; r < R; r++) {
        float m[8];
        _mm256_storeu_ps(m, m8[r]);
        for (int32_t j = n8[r]; j < n[r]; j++) {
            s[r][j] = s[r][j] * scale;
            if (bf16) s[r][j] = eng_bf16_round(s[r][j]);
            m[j & 7] = s[r][j] > m[j & 7] ? s[r][j] : m[j & 7];
        }
        float x = m[0];
        for (int c = 1; c < 8; c++) x = m[c] > x ? m[c] : x;
        mx[r] = x;
    }
    /* exponentials, the 8 partial sums */
    for (int32_t j = 0; j < nmax; j += 8)
        _Pragma("GCC unroll 4") for (int r = 0; r < SM_ROWS; r++) {
            if (j >= n8[r]) continue;
            const __m256 e = exp256(_mm256_sub_ps(_mm256_loadu_ps(s[r] + j), _mm256_set1_ps(mx[r])));
            _mm256_storeu_ps(s[r] + j, e);
            a8[r] = _mm256_add_ps(a8[r], e);
        }
    for (int r = 0; r < R; r++) {
        float a[8];
        _mm256_storeu_ps(a, a8[r]);
        for (int32_t j = n8[r]; j < n[r]; j++) {
            s[r][j] = eng_expf(s[r][j] - mx[r]);
            a[j & 7] += s[r][j];
        }
        const float sum = ((a[0] + a[1]) + (a[2] + a[3])) + ((a[4] + a[5]) + (a[6] + a[7]));
        inv[r] = 1.0f / sum;
    }
    /* normalised (and rounded) */
    for (int32_t j = 0; j < nmax; j += 8)
        _Pragma("GCC unroll 4") for (int r = 0; r < SM_ROWS; r++) {
            if (j >= n8[r]) continue;
            __m256 v = _mm256_mul_ps(_mm256_loadu_ps(s[r] + j), _mm256_set1_ps(inv[r]));
            if (bf16) v = bf16_256(v);
            _mm256_storeu_ps(s[r] + j, v);
        }
    for (int r = 0; r < R; r++)
        for (int32_t j = n8[r]; j < n[r]; j++) {
            s[r][j] = s[r][j] * inv[r];
            if (bf16) s[r][j] = eng_bf16_round(s[r][j]);
        }
}
#endif

/* The softmax of R rows (row r: s[r], n[r] scores), eng_k_softmax_row's bits on every path. */
static void softmax_rows(eng_kpath path, float *const *s, const int32_t *n, int R, float scale, bool bf16) {
#if REF_X86
    if (path == ENG_KPATH_AVX512) {
        for (int r0 = 0; r0 < R; r0 += SM_ROWS)
            softmax512_rows(s + r0, n + r0, R - r0 < SM_ROWS ? R - r0 : SM_ROWS, scale, bf16);
        return;
    }
    if (path == ENG_KPATH_AVX2) {
        for (int r0 = 0; r0 < R; r0 += SM_ROWS)
            softmax256_rows(s + r0, n + r0, R - r0 < SM_ROWS ? R - r0 : SM_ROWS, scale, bf16);
        return;
    }
#endif
    for (int r = 0; r < R; r++) eng_k_softmax_row(s[r], n[r], scale, bf16);
}

/* The softmax of n scores (eng_k_softmax_row's bits on every path). */
void eng_k_softmax_path(eng_kpath path, float *s, int32_t n, float scale, bool bf16) {
    softmax_rows(path, &s, &n, 1, scale, bf16);
}

#if REF_X86
__attribute__((target("avx512f"))) static int64_t exp_path512(const float *x, float *y, int64_t n) {
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) _mm512_storeu_ps(y + i, exp512(_mm512_loadu_ps(x + i)));
    return i;
}
__attribute__((target("avx2,fma"))) static int64_t exp_path256(const float *x, float *y, int64_t n) {
    int64_t i = 0;
    for (; i + 32 <= n; i += 32) {  /* as the softmax steps take them: 4 vectors, one range test */
        __m256 v[4];
        for (int k = 0; k < 4; k++) v[k] = _mm256_loadu_ps(x + i + 8 * k);
        exp256_n(v, 4);
        for (int k = 0; k < 4; k++) _mm256_storeu_ps(y + i + 8 * k, v[k]);
    }
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, exp256(_mm256_loadu_ps(x + i)));
    return i;
}
#endif

/* y = exp(x), eng_expf's bits, through path's vector exponential (the
 * tests compare them over every float). */
void eng_k_exp_path(eng_kpath path, const float *x, float *y, int64_t n) {
    int64_t i = 0;
#if REF_X86
    if (path == ENG_KPATH_AVX512) i = exp_path512(x, y, n);
    else if (path == ENG_KPATH_AVX2) i = exp_path256(x, y, n);
#endif
    for (; i < n; i++) y[i] = eng_expf(x[i]);
}

// ----------------------------------------------------------------------------
// The steps of the attention's online softmax over one key block of a row
// (attn_super), the same bits on every path:
//   sm_scale_max: s = round(s * scale) over the row's keys in the block, and
//     the running max. The max is taken over 8 lanes then across them, with
//     `s > m ? s : m`: NaN never wins and the value is the largest of the
//     others, whatever the order; only the sign of a zero maximum can depend
//     on it, and s - (+0) and s - (-0) give the same e = exp(s - max) for
//     every s (exp(+0) = exp(-0) = 1), as +0 > -0 is false (no rescale).
//   sm_exp_sum: e = round(exp(s - max)) over the row's keys in the block, and
//     the sum in 8 lanes (lane j % 8 from the row's first key there,
//     ascending j), combined pairwise.
//   sm_norm: d = round(s * f) (the outputs' rescale, and the final 1 / sum).
// The AVX2 versions serve the avx512 path too (an AVX-512 CPU runs AVX2).

static void sm_scale_max_c(float *s, int32_t n, float scale, bool bf16, float *mx) {
    #pragma omp simd
    for (int32_t j = 0; j < n; j++) s[j] = s[j] * scale;
    if (bf16) eng_bf16_round_vec(s, n);
    float m = *mx;
    for (int32_t j = 0; j < n; j++) m = s[j] > m ? s[j] : m;
    *mx = m;
}

static float sm_exp_sum_c(float *s, int32_t n, float mx, bool bf16) {
    #pragma omp simd
    for (int32_t j = 0; j < n; j++) s[j] = eng_expf(s[j] - mx);
    if (bf16) eng_bf16_round_vec(s, n);
    float a8[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    const int32_t n8 = n / 8 * 8;
    for (int32_t j = 0; j < n8; j += 8)
        for (int c = 0; c < 8; c++) a8[c] += s[j + c];
    for (int32_t j = n8; j < n; j++) a8[j & 7] += s[j];
    return ((a8[0] + a8[1]) + (a8[2] + a8[3])) + ((a8[4] + a8[5]) + (a8[6] + a8[7]));
}

static void sm_norm_c(const float *s, float *d, int32_t n, float inv, bool bf16) {
    #pragma omp simd
    for (int32_t j = 0; j < n; j++) d[j] = s[j] * inv;
    if (bf16) eng_bf16_round_vec(d, n);
}

#if REF_X86
__attribute__((target("avx2,fma"))) static void sm_scale_max256(float *s, int32_t n, float scale, bool bf16,
                                                                 float *mx) {
    const __m256 vs = _mm256_set1_ps(scale);
    __m256 m0 = _mm256_set1_ps(*mx), m1 = m0;
    int32_t j = 0;
    for (; j + 16 <= n; j += 16) {
        __m256 v0 = _mm256_mul_ps(_mm256_loadu_ps(s + j), vs), v1 = _mm256_mul_ps(_mm256_loadu_ps(s + j + 8), vs);
        if (bf16) { v0 = bf16_256(v0); v1 = bf16_256(v1); }
        _mm256_storeu_ps(s + j, v0);
        _mm256_storeu_ps(s + j + 8, v1);
        m0 = _mm256_max_ps(v0, m0);
        m1 = _mm256_max_ps(v1, m1);
    }
    for (; j + 8 <= n; j += 8) {
        __m256 v = _mm256_mul_ps(_mm256_loadu_ps(s + j), vs);
        if (bf16) v = bf16_256(v);
        _mm256_storeu_ps(s + j, v);
        m0 = _mm256_max_ps(v, m0);
    }
    float m[16];
    _mm256_storeu_ps(m, m0);
    _mm256_storeu_ps(m + 8, m1);
    float x = *mx;
    for (int c = 0; c < 16; c++) x = m[c] > x ? m[c] : x;
    for (; j < n; j++) {
        s[j] = s[j] * scale;
        if (bf16) s[j] = eng_bf16_round(s[j]);
        x = s[j] > x ? s[j] : x;
    }
    *mx = x;
}

__attribute__((target("avx2,fma"))) static float sm_exp_sum256(float *s, int32_t n, float mx, bool bf16) {
    const __m256 vm = _mm256_set1_ps(mx);
    __m256 a8 = _mm256_setzero_ps();
    const int32_t n8 = n / 8 * 8;
    int32_t j = 0;
    for (; j + 32 <= n8; j += 32) {  /* 4 vectors a step (exp256_n), added in order */
        __m256 x[4];
        _Pragma("GCC unroll 4") for (int k = 0; k < 4; k++) x[k] = _mm256_sub_ps(_mm256_loadu_ps(s + j + 8 * k), vm);
        exp256_n(x, 4);
        _Pragma("GCC unroll 4") for (int k = 0; k < 4; k++) {
            if (bf16) x[k] = bf16_256(x[k]);
            _mm256_storeu_ps(s + j + 8 * k, x[k]);
            a8 = _mm256_add_ps(a8, x[k]);
        }
    }
    for (; j < n8; j += 8) {
        __m256 e = exp256(_mm256_sub_ps(_mm256_loadu_ps(s + j), vm));
        if (bf16) e = bf16_256(e);
        _mm256_storeu_ps(s + j, e);
        a8 = _mm256_add_ps(a8, e);
    }
    float a[8];
    _mm256_storeu_ps(a, a8);
    for (; j < n; j++) {
        s[j] = eng_expf(s[j] - mx);
        if (bf16) s[j] = eng_bf16_round(s[j]);
        a[j & 7] += s[j];
    }
    return ((a[0] + a[1]) + (a[2] + a[3])) + ((a[4] + a[5]) + (a[6] + a[7]));
}

__attribute__((target("avx2,fma"))) static void sm_norm256(const float *s, float *d, int32_t n, float inv, bool bf16) {
    const __m256 vi = _mm256_set1_ps(inv);
    int32_t j = 0;
    for (; j + 8 <= n; j += 8) {
        __m256 v = _mm256_mul_ps(_mm256_loadu_ps(s + j), vi);
        if (bf16) v = bf16_256(v);
        _mm256_storeu_ps(d + j, v);
    }
    for (; j < n; j++) {
        d[j] = s[j] * inv;
        if (bf16) d[j] = eng_bf16_round(d[j]);
    }
}
#endif

static void sm_scale_max(eng_kpath path, float *s, int32_t n, float scale, bool bf16, float *mx) {
    if (n <= 0) return;
#if REF_X86
    if (path != ENG_KPATH_SCALAR) { sm_scale_max256(s, n, scale, bf16, mx); return; }
#endif
    sm_scale_max_c(s, n, scale, bf16, mx);
}

static float sm_exp_sum(eng_kpath path, float *s, int32_t n, float mx, bool bf16) {
#if REF_X86
    if (path != ENG_KPATH_SCALAR) return sm_exp_sum256(s, n, mx, bf16);
#endif
    return sm_exp_sum_c(s, n, mx, bf16);
}

/* d = round(s * inv) (d may be s) */
static void sm_norm(eng_kpath path, const float *s, float *d, int32_t n, float inv, bool bf16) {
    if (n <= 0) return;
#if REF_X86
    if (path != ENG_KPATH_SCALAR) { sm_norm256(s, d, n, inv, bf16); return; }
#endif
    sm_norm_c(s, d, n, inv, bf16);
}

static inline int32_t round32(int32_t n) { return (n + PW - 1) / PW * PW; }

/* One key block of a row's online softmax, the steps above (attn_super's
 * step 2, and blas's blocked attention in kernels.c): s = round(s * scale)
 * and m = max(*mx, max s); when m > *mx, a = exp(*mx - m), the row's
 * outputs so far o[0, no) = o * a and *l = *l * a (a = 0 on the row's first
 * block, whose *mx is -inf: o and *l are still 0); *mx = m; then
 * e = round(exp(s - m)) in place and *l = *l + the sum of the e in 8 lanes. */
void eng_k_softmax_step_path(eng_kpath path, float *s, int32_t n, float scale, bool bf16, float *mx, float *l,
                             float *o, int32_t no) {
    float m = *mx;
    sm_scale_max(path, s, n, scale, bf16, &m);
    if (m > *mx) {
        const float al = eng_expf(*mx - m);
        sm_norm(path, o, o, no, al, false);
        *l = *l * al;
    }
    *mx = m;
    *l = *l + sm_exp_sum(path, s, n, m, bf16);
}

/* Rows of a super block: the rows that share one pass over the keys and
 * values (register blocks of the path's MR rows inside). Key blocks: the
 * online softmax's blocks, ATTN_KB keys on absolute positions [ATTN_KB*b,
 * ATTN_KB*(b+1)); a block's scores take up to ATTN_SW columns of whole key
 * panels (one more panel when the gathered keys are not panel-aligned). */
#define ATTN_RB 32
#define ATTN_KB ENG_REF_ATTN_KB
#define ATTN_SW (ATTN_KB + PW)

#define ATTN_GRP 8  /* super blocks of a group (transposed scores) */

/* Floats of one thread's scratch for P keys of head dim E, the larger of
 * the two forms': packed, the head's packed keys and values, the super
 * block's scores of one key block and its outputs; grouped (attn_group),
 * one key block's keys, values and transposed scores, the row-major scores,
 * and the group's transposed queries and outputs. */
static int64_t attn_thread_floats(int32_t P, int32_t E) {
    const int64_t P32 = round32(P), E32 = round32(E);
    const int64_t packed = P32 * E + E32 * P32 + (int64_t)ATTN_RB * ATTN_SW + (int64_t)ATTN_RB * E32;
    const int64_t tr = (int64_t)ATTN_KB * (E + E32 + PW) + (int64_t)ATTN_RB * ATTN_SW + (int64_t)ATTN_GRP * E * PW +
                       (int64_t)ATTN_GRP * ATTN_RB * E32;
    return packed > tr ? packed : tr;
}

int64_t eng_k_attention_ref_ws(int32_t n_threads, int32_t P, int32_t E) {
    return (int64_t)(n_threads > 1 ? n_threads : 1) * attn_thread_floats(P, E);
}

typedef struct attn_args {
    eng_kpath    path;
    bool         bf16;
    int32_t      T, pos0, W, kpos0, GR, E, P, ldkv, ldo;
    int32_t      seg_rows, nb_seg, n_seg, nb_g;  /* row blocks: n_seg segments of seg_rows rows per KV head */
    bool         tr;     /* scores transposed: keys by rows (super blocks of at least ATTN_TR_MIN rows) */
    int32_t      n_grp;  /* tr: groups of super blocks per KV head (the items) */
    float        scale;
    const float *qg, *K, *V;
    float       *O, *ws;
} attn_args;

/* Packs key panel q of KV head g: Kp[q][e][c] = K[32q + c][g*E + e] (0 past P). */
#if REF_X86
__attribute__((target("avx512f"))) static void pack_keys512(const float *k0, int64_t ldkv, int32_t n, int32_t E,
                                                              float *dst) {
    const __m512i idx = _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                                           _mm512_set1_epi32((int32_t)ldkv));
    const __mmask16 m0 = n >= 16 ? 0xffff : (__mmask16)((1u << n) - 1);
    const __mmask16 m1 = n >= 32 ? 0xffff : n <= 16 ? 0 : (__mmask16)((1u << (n - 16)) - 1);
    const float *k1 = k0 + 16 * ldkv;
    for (int32_t e = 0; e < E; e++) {
        _mm512_storeu_ps(dst + e * PW, _mm512_mask_i32gather_ps(_mm512_setzero_ps(), m0, idx, k0 + e, 4));
        _mm512_storeu_ps(dst + e * PW + 16,
                         m1 ? _mm512_mask_i32gather_ps(_mm512_setzero_ps(), m1, idx, k1 + e, 4) : _mm512_setzero_ps());
    }
}

/* The same with 8 x 8 transposes (AVX2): keys [0, n8) in groups of 8, head
 * dims [0, E8) in groups of 8; the rest as the portable loop. A copy: the
 * bits are the keys'. */
__attribute__((target("avx2,fma"))) static int32_t pack_keys256(const float *k0, int64_t ldkv, int32_t n, int32_t E,
                                                                 float *dst) {
    const int32_t n8 = n / 8 * 8, E8 = E / 8 * 8;
    for (int32_t c0 = 0; c0 < n8; c0 += 8)
        for (int32_t e0 = 0; e0 < E8; e0 += 8) {
            __m256 r[8];
            for (int k = 0; k < 8; k++) r[k] = _mm256_loadu_ps(k0 + (int64_t)(c0 + k) * ldkv + e0);
            const __m256 t0 = _mm256_unpacklo_ps(r[0], r[1]), t1 = _mm256_unpackhi_ps(r[0], r[1]);
            const __m256 t2 = _mm256_unpacklo_ps(r[2], r[3]), t3 = _mm256_unpackhi_ps(r[2], r[3]);
            const __m256 t4 = _mm256_unpacklo_ps(r[4], r[5]), t5 = _mm256_unpackhi_ps(r[4], r[5]);
            const __m256 t6 = _mm256_unpacklo_ps(r[6], r[7]), t7 = _mm256_unpackhi_ps(r[6], r[7]);
            const __m256 u0 = _mm256_shuffle_ps(t0, t2, 0x44), u1 = _mm256_shuffle_ps(t0, t2, 0xee);
            const __m256 u2 = _mm256_shuffle_ps(t1, t3, 0x44), u3 = _mm256_shuffle_ps(t1, t3, 0xee);
            const __m256 u4 = _mm256_shuffle_ps(t4, t6, 0x44), u5 = _mm256_shuffle_ps(t4, t6, 0xee);
            const __m256 u6 = _mm256_shuffle_ps(t5, t7, 0x44), u7 = _mm256_shuffle_ps(t5, t7, 0xee);
            const __m256 o[8] = {
                _mm256_permute2f128_ps(u0, u4, 0x20), _mm256_permute2f128_ps(u1, u5, 0x20),
                _mm256_permute2f128_ps(u2, u6, 0x20), _mm256_permute2f128_ps(u3, u7, 0x20),
                _mm256_permute2f128_ps(u0, u4, 0x31), _mm256_permute2f128_ps(u1, u5, 0x31),
                _mm256_permute2f128_ps(u2, u6, 0x31), _mm256_permute2f128_ps(u3, u7, 0x31),
            };
            for (int e = 0; e < 8; e++) _mm256_storeu_ps(dst + (int64_t)(e0 + e) * PW + c0, o[e]);
        }
    for (int32_t c = 0; c < n8; c++)  /* head dims past the last group of 8 */
        for (int32_t e = E8; e < E; e++) dst[(int64_t)e * PW + c] = k0[(int64_t)c * ldkv + e];
    return n8;
}
#endif

static void pack_keys(const attn_args *a, int32_t g, int32_t q, float *Kp) {
    const int32_t E = a->E;
    float *dst = Kp + (int64_t)q * E * PW;
    const int32_t n = a->P - q * PW < PW ? a->P - q * PW : PW;
    const float *k0 = a->K + (int64_t)q * PW * a->ldkv + (int64_t)g * E;
#if REF_X86
    if (a->path == ENG_KPATH_AVX512 && (int64_t)a->ldkv * PW < INT32_MAX) {
        pack_keys512(k0, a->ldkv, n, E, dst);
        return;
    }
#endif
    int32_t c_done = 0;
#if REF_X86
    if (a->path == ENG_KPATH_AVX2) c_done = pack_keys256(k0, a->ldkv, n, E, dst);
#endif
    for (int32_t c = c_done; c < n; c++) {
        const float *k = k0 + (int64_t)c * a->ldkv;
        for (int32_t e = 0; e < E; e++) dst[e * PW + c] = k[e];
    }
    for (int32_t c = n; c < PW; c++)
        for (int32_t e = 0; e < E; e++) dst[e * PW + c] = 0.0f;
}

/* Packs the values of keys [j0, j0 + n) of KV head g into panels of ldp
 * rows: Vp[qe][j - j0][c] = V[j][g*E + 32qe + c] (0 past E). */
static void pack_values(const attn_args *a, int32_t g, int32_t j0, int32_t n_keys, float *Vp, int32_t ldp) {
    const int32_t E = a->E, E32 = round32(E);
    for (int32_t qe = 0; qe < E32 / PW; qe++)
        for (int32_t j = j0; j < j0 + n_keys; j++) {
            float *dst = Vp + ((int64_t)qe * ldp + (j - j0)) * PW;
            const float *v = a->V + (int64_t)j * a->ldkv + (int64_t)g * E + qe * PW;
            const int32_t n = E - qe * PW < PW ? E - qe * PW : PW;
            memcpy(dst, v, sizeof(float) * (size_t)n);
            for (int32_t c = n; c < PW; c++) dst[c] = 0.0f;
        }
}

/* Keys attended by row r of a KV head's stack (query head r / T, token r % T):
 * [lo, hi] in gathered key rows. */
static inline void row_band(const attn_args *a, int32_t r, int32_t *lo, int32_t *hi) {
    const int32_t p = a->pos0 + r % a->T;
    int32_t l = a->W > 0 ? p - a->W + 1 : 0;
    if (l < a->kpos0) l = a->kpos0;
    *lo = l - a->kpos0;
    *hi = p - a->kpos0;
}

// ----------------------------------------------------------------------------
// Transposed scores (super blocks of ATTN_TR_MIN rows or more; not yet on
// the avx512 path, which has no X-transposed blocks): ST[j - js][c] = the
// chain over e of k_j[e] * q_c[e], the block's keys as the rows of the
// product and the super block's queries as one panel of its columns, so the
// keys are never transposed into panels. The chains are the same fmaf steps
// as q_c . k_j (a product's operands commute), so the bits are those of the
// packed form. A block that every row attends whole (all but a window's
// start and the causal diagonal) then takes its softmax across rows, 8 rows
// a vector (avx2; each row's steps exactly), and its values through
// X-transposed register blocks reading ST itself; any other block is copied
// back to the row-major S and takes attn_super's per-row steps.

#define ATTN_TR_MIN 16

/* Qt[e][c] = q[c][e] for rows c < R, 0 for c in [R, w). */
static void pack_q_t(const float *q, int32_t R, int32_t E, int32_t w, float *Qt) {
    for (int32_t e = 0; e < E; e++)
        for (int32_t c = 0; c < w; c++) Qt[(int64_t)e * PW + c] = c < R ? q[(int64_t)c * E + e] : 0.0f;
}

/* ST[jj][0, w) = the scores of keys jj < nk (rows of k0, ld apart) (row stride PW). */
static void scores_t(const attn_args *a, const float *k0, int32_t ld, int32_t nk, const float *Qt, int32_t w,
                     float *ST) {
    const int32_t mr = mr_max(a->path);  /* avx2: 6 x 16 blocks (6 x 32 in halves) */
    for (int32_t i = 0; i < nk; i += mr) {
        const int32_t n = nk - i < mr ? nk - i : mr;
        ukr_run(a->path, n, w, a->E, k0 + (int64_t)i * ld, ld, 0, Qt, 0, PW, ST + (int64_t)i * PW, PW, 0,
                (const char *)Qt, 0);
    }
}

/* S[c][off + jj] = ST[jj][c] (the per-row steps' layout). */
static void st_to_s(const float *ST, int32_t nk, int32_t R, float *S, int32_t off) {
    for (int32_t c = 0; c < R; c++)
        for (int32_t jj = 0; jj < nk; jj++) S[(int64_t)c * ATTN_SW + off + jj] = ST[(int64_t)jj * PW + c];
}

/* Ot[c][0, WV) (+)= the chains over keys jj < nk of e[c][jj] * (value row js + jj of Vb), e in ST
 * (rows: keys), in passes of PV_KS keys (each chain continued through Ot: a stored float is exact). */
#define PV_KS 32  /* keys per pass of the value product: the values and the ST rows it reads stay in L1 */
static void pv_t(eng_kpath path, int32_t R, int32_t nk, const float *ST, const ref_b *Vb, int32_t js, float *Ot,
                 int32_t E32, int32_t WV) {
    const int32_t mr = mr_max(path), nb = (R + mr - 1) / mr;
    for (int32_t k0 = 0; k0 < nk; k0 += PV_KS) {
        const int32_t kn = nk - k0 < PV_KS ? nk - k0 : PV_KS;
        for (int32_t ib = 0; ib < nb; ib++) {
            int32_t b0, b1;
            row_block(R, nb, ib, &b0, &b1);
            for (int32_t c = 0; c < WV; c += PW) {
                const float *v = Vb->b + (int64_t)(js + k0) * Vb->ldb + (c / PW) * Vb->ps + c % PW;
                ukr_run(path, b1 - b0, PW, kn, ST + (int64_t)k0 * PW + b0, PW, 1, v, 0, Vb->ldb,
                        Ot + (int64_t)b0 * E32 + c, E32, 1, (const char *)v, 0);
            }
        }
    }
}

#if REF_X86
/* One group of 8 rows of sm_block_t256's last step: for the vectors
 * p[jj * PW] (keys jj < nk), e = round(exp(v - m)) in place, and then
 * l[c] = l[c] + the sum of row c's e (c < nc): lane jj % 8, ascending jj,
 * the 8 lanes combined pairwise. 4 keys a step (exp256_n), each e added
 * to its own lane's sum. */
AI2F void exp_sum_t256(float *p, int32_t nk, __m256 m, bool bf16, float *l, int32_t nc) {
    __m256 s8[8];
    for (int k = 0; k < 8; k++) s8[k] = _mm256_setzero_ps();
    int32_t jj = 0;
    for (; jj + 8 <= nk; jj += 8, p += 8 * PW)
        _Pragma("GCC unroll 2") for (int h = 0; h < 8; h += 4) {
            __m256 x[4];
            _Pragma("GCC unroll 4") for (int k = 0; k < 4; k++)
                x[k] = _mm256_sub_ps(_mm256_loadu_ps(p + (h + k) * PW), m);
            exp256_n(x, 4);
            _Pragma("GCC unroll 4") for (int k = 0; k < 4; k++) {
                if (bf16) x[k] = bf16_256(x[k]);
                _mm256_storeu_ps(p + (h + k) * PW, x[k]);
                s8[h + k] = _mm256_add_ps(s8[h + k], x[k]);
            }
        }
    for (int k = 0; jj < nk; jj++, k++, p += PW) {
        __m256 x = _mm256_sub_ps(_mm256_loadu_ps(p), m);
        exp256_n(&x, 1);
        if (bf16) x = bf16_256(x);
        _mm256_storeu_ps(p, x);
        s8[k] = _mm256_add_ps(s8[k], x);
    }
    const __m256 sum = _mm256_add_ps(_mm256_add_ps(_mm256_add_ps(s8[0], s8[1]), _mm256_add_ps(s8[2], s8[3])),
                                     _mm256_add_ps(_mm256_add_ps(s8[4], s8[5]), _mm256_add_ps(s8[6], s8[7])));
    float sb[8];
    _mm256_storeu_ps(sb, sum);
    for (int32_t c = 0; c < nc && c < 8; c++) l[c] = l[c] + sb[c];
}

/* The per-row steps of a block every row c < R attends whole (keys [0, nk)
 * of ST), 8 rows a vector: s = round(s * scale) and the max with the
 * running max mx[c] (the same value in any order); the rescale of Ot[c]
 * and l[c] when it grew; e = round(exp(s - m)) in place, and l[c] = l[c] +
 * the sum of its 8 lanes (lane jj % 8, ascending jj), combined pairwise. */
__attribute__((target("avx2,fma"))) static void sm_block_t256(float *ST, int32_t nk, int32_t R, float scale,
                                                               bool bf16, float *mx, float *l, float *Ot,
                                                               int32_t E32, int32_t WV) {
    const __m256 vs = _mm256_set1_ps(scale);
    const int32_t ng = (R + 7) / 8;  /* groups of 8 rows */
    float mb[PW];
    for (int32_t c = 0; c < ng * 8; c++) mb[c] = c < R ? mx[c] : 0.0f;
    __m256 mv[PW / 8];
    for (int32_t t = 0; t < ng; t++) mv[t] = _mm256_loadu_ps(mb + 8 * t);
    for (int32_t t = 0; t < ng; t++) {  /* group by group, its max in a register, keys ascending */
        __m256 m = mv[t];
        float *p = ST + 8 * t;
        if (bf16)
            for (int32_t jj = 0; jj < nk; jj++, p += PW) {
                const __m256 v = bf16_256(_mm256_mul_ps(_mm256_loadu_ps(p), vs));
                _mm256_storeu_ps(p, v);
                m = _mm256_max_ps(v, m);
            }
        else
            for (int32_t jj = 0; jj < nk; jj++, p += PW) {
                const __m256 v = _mm256_mul_ps(_mm256_loadu_ps(p), vs);
                _mm256_storeu_ps(p, v);
                m = _mm256_max_ps(v, m);
            }
        mv[t] = m;
    }
    for (int32_t t = 0; t < ng; t++) _mm256_storeu_ps(mb + 8 * t, mv[t]);
    for (int32_t i = 0; i < R; i++) {
        if (mb[i] > mx[i]) {  /* on a row's first block mx is -inf: a = 0, and Ot and l are still 0 */
            const float al = eng_expf(mx[i] - mb[i]);
            sm_norm256(Ot + (int64_t)i * E32, Ot + (int64_t)i * E32, WV, al, false);
            l[i] = l[i] * al;
        }
        mx[i] = mb[i];
    }
    /* exponentials and sums, group by group (mv holds the new maxima) */
    if (bf16)
        for (int32_t t = 0; t < ng; t++) exp_sum_t256(ST + 8 * t, nk, mv[t], true, l + 8 * t, R - 8 * t);
    else
        for (int32_t t = 0; t < ng; t++) exp_sum_t256(ST + 8 * t, nk, mv[t], false, l + 8 * t, R - 8 * t);
}
#endif

/* A super block of KV head g: rows [r0, r0 + R) of the head's stack (at
 * most ATTN_RB), each with its keys [lo, hi], running max mx, sum l and
 * outputs Ot (R rows of E32). */
typedef struct attn_sb {
    int32_t      r0, R, lo_min, hi_max;
    int32_t      lo[ATTN_RB], hi[ATTN_RB];
    float        mx[ATTN_RB], l[ATTN_RB];
    const float *q;   /* its query rows [R][E] */
    float       *Ot;
} attn_sb;

static void sb_init(const attn_args *a, int32_t g, int32_t r0, int32_t r1, float *Ot, attn_sb *sb) {
    sb->r0 = r0;
    sb->R = r1 - r0;
    sb->lo_min = INT32_MAX;
    sb->hi_max = 0;
    for (int32_t i = 0; i < sb->R; i++) {
        row_band(a, r0 + i, &sb->lo[i], &sb->hi[i]);
        if (sb->lo[i] < sb->lo_min) sb->lo_min = sb->lo[i];
        if (sb->hi[i] > sb->hi_max) sb->hi_max = sb->hi[i];
        sb->mx[i] = -INFINITY;
        sb->l[i] = 0.0f;
    }
    sb->q = a->qg + ((int64_t)g * a->GR * a->T + r0) * a->E;
    sb->Ot = Ot;
    memset(Ot, 0, sizeof(float) * (size_t)sb->R * (size_t)round32(a->E));
}

/* The last key block of a block that starts at absolute position kpos0 + js. */
static inline int32_t block_end(const attn_args *a, int32_t js) {
    return (int32_t)(((int64_t)a->kpos0 + js) / ATTN_KB * ATTN_KB + ATTN_KB - a->kpos0 - 1);
}

/* Steps 2 and 3 of attn_super for key block [js, je] of a super block,
 * row by row: the scores of row i at S + i*ATTN_SW, key j in column j - cs;
 * the values of key j at Vb->b + (j - jb)*Vb->ldb. */
static void block_rows(const attn_args *a, attn_sb *sb, int32_t js, int32_t je, int32_t cs, float *S, const ref_b *Vb,
                       int32_t jb) {
    const eng_kpath path = a->path;
    const int32_t E32 = round32(a->E), WV = a->E % PW ? E32 : a->E, R = sb->R;
    int32_t j0[ATTN_RB], j1[ATTN_RB];
    float *Ot = sb->Ot;
    /* 2. per row: max, rescale, exponentials and sum */
    int32_t i0 = -1, i1 = -1, A = 0, B = INT32_MAX;
    bool together = true;
    for (int32_t i = 0; i < R; i++) {
        j0[i] = sb->lo[i] > js ? sb->lo[i] : js;
        j1[i] = sb->hi[i] < je ? sb->hi[i] : je;
        if (j0[i] > j1[i]) continue;
        if (i0 < 0) i0 = i;
        else if (i1 != i) together = false;
        i1 = i + 1;
        if (j0[i] > A) A = j0[i];
        if (j1[i] < B) B = j1[i];
        eng_k_softmax_step_path(path, S + (int64_t)i * ATTN_SW + (j0[i] - cs), j1[i] - j0[i] + 1, a->scale, a->bf16,
                                &sb->mx[i], &sb->l[i], Ot + (int64_t)i * E32, WV);
    }
    /* 3. values */
    if (i0 < 0) return;
    if (!together || A > B) A = INT32_MAX;  /* no keys common to the attending rows: each row on its own */
    for (int32_t i = i0; i < i1; i++)
        for (int32_t j = j0[i]; j < A && j <= j1[i]; j++)
            axpy_row(path, WV, S[(int64_t)i * ATTN_SW + (j - cs)], Vb->b + (int64_t)(j - jb) * Vb->ldb, Vb->ps,
                     Ot + (int64_t)i * E32);
    if (A != INT32_MAX) {
        const ref_b VS = {.b = Vb->b + (int64_t)(A - jb) * Vb->ldb, .ps = Vb->ps, .ldb = Vb->ldb, .nread = Vb->nread};
        gemm_region(path, i0, i1, 0, WV, WV, B - A + 1, S + (A - cs), ATTN_SW, NULL, &VS, Ot, E32, 1);
        for (int32_t i = i0; i < i1; i++)
            for (int32_t j = B + 1; j <= j1[i]; j++)
                axpy_row(path, WV, S[(int64_t)i * ATTN_SW + (j - cs)], Vb->b + (int64_t)(j - jb) * Vb->ldb, Vb->ps,
                         Ot + (int64_t)i * E32);
    }
}

/* out = round(o * (1 / l)) for every row of a super block. */
static void sb_finish(const attn_args *a, int32_t g, const attn_sb *sb) {
    for (int32_t i = 0; i < sb->R; i++) {
        const int32_t r = sb->r0 + i, t = r % a->T, h = g * a->GR + r / a->T;
        sm_norm(a->path, sb->Ot + (int64_t)i * round32(a->E), a->O + (int64_t)t * a->ldo + (int64_t)h * a->E, a->E,
                1.0f / sb->l[i], a->bf16);
    }
}

/* One super block [r0, r1) of KV head g (at most ATTN_RB rows), key block
 * by key block (absolute positions [ATTN_KB*b, ATTN_KB*(b+1)), cut to the
 * rows' keys), each row with its running max m, sum l and outputs o:
 *   1. the block's scores for every register block (chains over e against
 *      the packed keys), into S;
 *   2. per row attending keys [j0, j1] of the block: s = round(s * scale)
 *      and the block's max; when it is above m (after the row's first
 *      block), o = o * a and l = l * a with a = exp(m - max), and m = max;
 *      then e = exp(s - m) (rounded when bf16) in place, and l = l + the
 *      sum of the e in 8 lanes (lane (j - j0) % 8), combined pairwise;
 *   3. the block's values: the keys every attending row attends through
 *      the register-blocked product over those rows (chains continued from
 *      o), the rest (a window's start, the causal diagonal) by per-row axpy
 *      continuing the same chains, in ascending position.
 * Then out = round(o * (1 / l)). Every operation a row sees depends on its
 * keys and the absolute block boundaries only: not on the super block, the
 * chunk, the thread or the path. */
static void attn_super(const attn_args *a, int32_t g, int32_t r0, int32_t r1, float *Kp, bool packed, const ref_b *Vb,
                       float *S, float *Ot) {
    const eng_kpath path = a->path;
    const int32_t E = a->E, P32 = round32(a->P), mr = mr_max(path);
    attn_sb sb;
    sb_init(a, g, r0, r1, Ot, &sb);
    const int32_t nb = (sb.R + mr - 1) / mr;
    int32_t q_next = sb.lo_min / PW;  /* streamed keys: the next panel to pack */
    for (int32_t js = sb.lo_min, je; js <= sb.hi_max; js = je + 1) {
        je = block_end(a, js);
        if (je > sb.hi_max) je = sb.hi_max;
        /* 1. scores of the key panels [cs, ce) (extra scores are never read) */
        const int32_t cs = js / PW * PW, ce = (je / PW + 1) * PW;
        if (!packed)
            for (; q_next < ce / PW; q_next++) pack_keys(a, g, q_next, Kp);
        const ref_b KB = {.b = Kp + (int64_t)(cs / PW) * E * PW, .ps = (int64_t)E * PW, .ldb = PW, .nread = P32 - cs};
        for (int32_t ib = 0; ib < nb; ib++) {
            int32_t b0, b1;
            row_block(sb.R, nb, ib, &b0, &b1);
            gemm_rows(path, b1 - b0, E, sb.q + (int64_t)b0 * E, E, 0, &KB, 0, ce - cs, P32 - cs,
                      S + (int64_t)b0 * ATTN_SW, ATTN_SW, 0, tile_w(path, b1 - b0), NULL, 0);
        }
        block_rows(a, &sb, js, je, cs, S, Vb, 0);
    }
    sb_finish(a, g, &sb);
}

/* dst[jj][0, E) = src[jj * ld][0, E) for jj < n. */
#if REF_X86
__attribute__((target("avx2"))) static void copy_rows8(const float *src, int64_t ld, int32_t n, int32_t E, float *dst,
                                                        int32_t ldd) {
    for (int32_t jj = 0; jj < n; jj++)
        for (int32_t e = 0; e < E; e += 8)
            _mm256_storeu_ps(dst + (int64_t)jj * ldd + e, _mm256_loadu_ps(src + (int64_t)jj * ld + e));
}
#endif
static void copy_rows(eng_kpath path, const float *src, int64_t ld, int32_t n, int32_t E, float *dst, int32_t ldd) {
#if REF_X86
    if (E % 8 == 0 && path != ENG_KPATH_SCALAR) { copy_rows8(src, ld, n, E, dst, ldd); return; }
#endif
    for (int32_t jj = 0; jj < n; jj++) {
        const float *a = src + (int64_t)jj * ld;
        float *d = dst + (int64_t)jj * ldd;
        for (int32_t e = 0; e < E; e++) d[e] = a[e];
    }
}

/* Prefetches rows [j0, j1) of src (ld apart, E floats each) into L2. */
static void prefetch_rows(const float *src, int64_t ld, int32_t j0, int32_t j1, int32_t E) {
#if REF_X86
    for (int32_t j = j0; j < j1; j++)
        for (int32_t e = 0; e < E; e += 16) _mm_prefetch((const char *)(src + (int64_t)j * ld + e), _MM_HINT_T1);
#else
    (void)src, (void)ld, (void)j0, (void)j1, (void)E;
#endif
}

/* Super blocks [b0, b1) of KV head g (at most ATTN_GRP), in step over the
 * key blocks: each block's keys and values are copied once into contiguous
 * Kc [nk][E] and Vc ([nk][E], or panels [E32/32][nk][32] zero-padded when E
 * is not a multiple of 32) and serve every super block, with transposed
 * scores (above). Each super block takes exactly attn_super's steps. */
static void attn_group(const attn_args *a, int32_t g, int32_t b0, int32_t b1, float *w) {
    const eng_kpath path = a->path;
    const int32_t E = a->E, E32 = round32(E), WV = E % PW ? E32 : E, n = b1 - b0;
    float *Kc = w, *Vc = Kc + (int64_t)ATTN_KB * E, *ST = Vc + (int64_t)ATTN_KB * E32;
    float *S = ST + (int64_t)ATTN_KB * PW, *Qt = S + (int64_t)ATTN_RB * ATTN_SW;
    float *Ob = Qt + (int64_t)ATTN_GRP * E * PW;
    attn_sb sb[ATTN_GRP];
    int32_t wt[ATTN_GRP], lo_min = INT32_MAX, hi_max = 0;
    for (int32_t k = 0; k < n; k++) {
        const int32_t b = b0 + k, s = b / a->nb_seg;
        int32_t r0, r1;
        row_block(a->seg_rows, a->nb_seg, b % a->nb_seg, &r0, &r1);
        sb_init(a, g, s * a->seg_rows + r0, s * a->seg_rows + r1, Ob + (int64_t)k * ATTN_RB * E32, &sb[k]);
        wt[k] = sb[k].R <= 16 ? 16 : PW;
        pack_q_t(sb[k].q, sb[k].R, E, wt[k], Qt + (int64_t)k * E * PW);
        if (sb[k].lo_min < lo_min) lo_min = sb[k].lo_min;
        if (sb[k].hi_max > hi_max) hi_max = sb[k].hi_max;
    }
    const ref_b Vb = E % PW ? (ref_b){.b = Vc, .ps = (int64_t)ATTN_KB * PW, .ldb = PW, .nread = E32}
                            : (ref_b){.b = Vc, .ps = PW, .ldb = E, .nread = E};
    for (int32_t js = lo_min, je; js <= hi_max; js = je + 1) {
        je = block_end(a, js);
        if (je > hi_max) je = hi_max;
        const int32_t nk = je - js + 1;
        const float *k0 = a->K + (int64_t)js * a->ldkv + (int64_t)g * E;
        const float *v0 = a->V + (int64_t)js * a->ldkv + (int64_t)g * E;
        copy_rows(path, k0, a->ldkv, nk, E, Kc, E);
        if (E % PW) pack_values(a, g, js, nk, Vc, ATTN_KB);
        else copy_rows(path, v0, a->ldkv, nk, E, Vc, E);
        /* the next block's keys and values, into L2 while this one is computed (a share per super block) */
        const int32_t nn = je < hi_max ? (block_end(a, je + 1) < hi_max ? block_end(a, je + 1) : hi_max) - je : 0;
        for (int32_t k = 0; k < n; k++) {
            attn_sb *s = &sb[k];
            prefetch_rows(k0 + (int64_t)nk * a->ldkv, a->ldkv, nn * k / n, nn * (k + 1) / n, E);
            prefetch_rows(v0 + (int64_t)nk * a->ldkv, a->ldkv, nn * k / n, nn * (k + 1) / n, E);
            const int32_t bs = js > s->lo_min ? js : s->lo_min, be = je < s->hi_max ? je : s->hi_max;
            if (bs > be) continue;
            const int32_t nkk = be - bs + 1;
            scores_t(a, Kc + (int64_t)(bs - js) * E, E, nkk, Qt + (int64_t)k * E * PW, wt[k], ST);
            bool whole = true;  /* every row attends the whole block */
            for (int32_t i = 0; i < s->R && whole; i++) whole = s->lo[i] <= bs && s->hi[i] >= be;
#if REF_X86
            if (whole && path == ENG_KPATH_AVX2) {
                sm_block_t256(ST, nkk, s->R, a->scale, a->bf16, s->mx, s->l, s->Ot, E32, WV);
                pv_t(path, s->R, nkk, ST, &Vb, bs - js, s->Ot, E32, WV);
                continue;
            }
#endif
            const int32_t cs = bs / PW * PW;
            st_to_s(ST, nkk, s->R, S, bs - cs);
            block_rows(a, s, bs, be, cs, S, &Vb, js);
        }
    }
    for (int32_t k = 0; k < n; k++) sb_finish(a, g, &sb[k]);
}

/* Items [it0, it1) of thread ith: item = KV head * nb_g + row block, or
 * with transposed scores KV head * n_grp + group of super blocks. */
static void attn_items(void *v, int32_t ith, int32_t it0, int32_t it1) {
    const attn_args *a = v;
    const int32_t E = a->E, P32 = round32(a->P), E32 = round32(E);
    float *Kp = a->ws + (int64_t)ith * attn_thread_floats(a->P, E);
    if (a->tr) {
        for (int32_t it = it0; it < it1; it++) {
            const int32_t g = it / a->n_grp, k = it % a->n_grp;
            int32_t b0, b1;
            row_block(a->nb_g, a->n_grp, k, &b0, &b1);  /* the same balanced split as rows */
            attn_group(a, g, b0, b1, Kp);
        }
        return;
    }
    float *Vp = Kp + (int64_t)P32 * E;
    float *S = Vp + (int64_t)E32 * P32;
    float *Ot = S + (int64_t)ATTN_RB * ATTN_SW;
    int32_t g_packed = -1;
    for (int32_t it = it0; it < it1; it++) {
        const int32_t g = it / a->nb_g, b = it % a->nb_g;
        /* keys: packed once per head when the thread has several blocks of it, else panel by panel */
        const int32_t g_first = it0 > g * a->nb_g ? it0 : g * a->nb_g;
        const int32_t g_end = it1 < (g + 1) * a->nb_g ? it1 : (g + 1) * a->nb_g;
        const bool pack_all = g_end - g_first > 1;
        /* values: packed too (a contiguous stream per panel) when reused, else read in place */
        const bool pack_v = pack_all || E % PW;
        ref_b Vb;
        if (g != g_packed) {
            if (pack_all)
                for (int32_t q = 0; q < P32 / PW; q++) pack_keys(a, g, q, Kp);
            if (pack_v) pack_values(a, g, 0, a->P, Vp, P32);
            g_packed = g;
        }
        if (pack_v) Vb = (ref_b){.b = Vp, .ps = (int64_t)P32 * PW, .ldb = PW, .nread = E32};
        else Vb = (ref_b){.b = a->V + (int64_t)g * E, .ps = PW, .ldb = a->ldkv, .nread = E};
        const int32_t s = b / a->nb_seg, bs = b % a->nb_seg;
        int32_t r0, r1;
        row_block(a->seg_rows, a->nb_seg, bs, &r0, &r1);
        attn_super(a, g, s * a->seg_rows + r0, s * a->seg_rows + r1, Kp, pack_all, &Vb, S, Ot);
    }
}

void eng_k_attention_ref(const eng_kctx *ctx, int32_t T, int32_t pos0, int32_t W, int32_t kpos0, int32_t H, int32_t G,
                         int32_t E, const float *qg, const float *K, const float *V, int32_t ldkv, float *O,
                         int32_t ldo, float *ws, int64_t ws_cap) {
    const int32_t GR = H / G, P = pos0 + T - kpos0, mr = mr_max(ctx->path);
    ENG_ASSERT(GR * G == H && T >= 1 && P >= T && ws_cap >= eng_k_attention_ref_ws(ctx->n_threads, P, E));
    attn_args a = {
        .path = ctx->path, .bf16 = ctx->bf16, .T = T, .pos0 = pos0, .W = W, .kpos0 = kpos0, .GR = GR, .E = E,
        .P = P, .ldkv = ldkv, .ldo = ldo, .scale = 1.0f / sqrtf((float)E), .qg = qg, .K = K, .V = V, .O = O,
        .ws = ws,
    };
    /* A KV head's GR*T rows: per query head when a head's T rows fill blocks,
     * else all together (decode: the GR rows of one token share a block). */
    if (T >= mr) { a.seg_rows = T; a.n_seg = GR; }
    else { a.seg_rows = GR * T; a.n_seg = 1; }
    /* super blocks of at most ATTN_RB rows; more (down to one register block
     * each) when they would be too few for the threads */
    a.nb_seg = (a.seg_rows + ATTN_RB - 1) / ATTN_RB;
    const int32_t want = (2 * ctx->n_threads + G * a.n_seg - 1) / (G * a.n_seg);
    if (ctx->n_threads > 1 && a.nb_seg < want) {
        const int32_t most = (a.seg_rows + mr - 1) / mr;
        a.nb_seg = want < most ? want : most;
    }
    a.nb_g = a.n_seg * a.nb_seg;
    a.tr = ctx->path != ENG_KPATH_AVX512 && a.seg_rows / a.nb_seg >= ATTN_TR_MIN;
    /* transposed: a head's super blocks in groups of at most ATTN_GRP, more when the heads are too few for
     * the threads */
    const int32_t want_g = (2 * ctx->n_threads + G - 1) / G;
    a.n_grp = (a.nb_g + ATTN_GRP - 1) / ATTN_GRP;
    if (a.n_grp < want_g) a.n_grp = want_g < a.nb_g ? want_g : a.nb_g;
    const int32_t items = a.tr ? G * a.n_grp : G * a.nb_g;
    eng_k_parallel_ith(ctx, items, (int64_t)a.n_seg * a.seg_rows * P * E * 4 * G / items + 1, attn_items, &a);
}
