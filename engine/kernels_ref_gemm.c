/*
 * engine/kernels_ref_gemm.c: the ref kernel's products (contract:
 * kernels.h, kernels_ref.h). Each output element is one float accumulator
 * that starts at +0 and takes acc = fma(x[k], b[k], acc) for k = 0..K-1 in
 * that order, so its bits depend on K and its own inputs only: not on the
 * register block, the rows around it, the threads or the path (avx512,
 * avx2, scalar: the same bits, tested). Work is split over column panels
 * and row blocks, never over k.
 *
 * B (weights W^T, keys, values) is read in panels of 32 columns; weights
 * are packed once at load into [N/32][K][32], so a block streams one panel.
 * On avx2 the caller packs X per thread and product (eng_k_ref_pack): 4 to
 * 6 rows read in place a multiple of 4 KiB apart fall in one L1 set.
 * The vector paths are compiled with target attributes and picked at run
 * time (eng_kpath_best), so the build needs no -march.
 */
#include "kernels_ref_int.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "status.h"

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
        _mm_prefetch(pf + k * pf_step, _MM_HINT_T0);
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
/* One block of MR rows x W columns (W a multiple of 16 no wider than
 * tile_w, starting on a panel boundary unless W == 16) whose B columns are
 * all readable. While it runs, the K lines pf + k*pf_step are prefetched
 * (the next weights; pf_step 0: nothing new), into L1 on avx512 (1-2%
 * faster than L2 when the weights stream from memory) and into L2 on avx2.
 * xt: X transposed (row r, k at x[r + k*ldx]), in MR x 16 blocks, not on
 * the avx512 path. */
void eng_kr_ukr_run(eng_kpath p, int32_t MR, int32_t W, int32_t K, const float *x, int64_t ldx, int xt,
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

/* One row block of MR rows over columns [c0, c1) of an N-column product
 * (c0 on a panel boundary), in blocks of at most wmax columns. Blocks whose
 * columns run past N go through a small tile; columns past B's readable
 * width through the portable block (same chains). The pf_bytes at pf are
 * prefetched along the way (0: none). */
void eng_kr_gemm_rows(eng_kpath p, int32_t MR, int32_t K, const float *X, int64_t ldx, int xt, const ref_b *B,
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
            eng_kr_ukr_run(p, MR, w, K, X, ldx, xt, bb, B->ps, B->ldb, Y + c, ldy, acc_in, pf, step);
        } else {
            float t[MR_MAX * TILE_W];
            if (acc_in)
                for (int32_t r = 0; r < MR; r++) memcpy(t + r * w, Y + r * ldy + c, sizeof(float) * (size_t)nc);
            if (c + w <= B->nread) eng_kr_ukr_run(p, MR, w, K, X, ldx, xt, bb, B->ps, B->ldb, t, w, acc_in, pf, step);
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
 * blocks of a chunk prefetch the next chunk, a slice each. xp: X packed by
 * eng_k_ref_pack (row block [r0, r1) of the region transposed at xp +
 * r0*K), or NULL (X read in place).
 *
 * A K over KSPLIT with one-panel chunks, over a region of at least
 * KB_MIN_COLS columns, goes in balanced k-blocks of at most KBLOCK, the
 * whole region per k-block, so that the rows' k-block of X and a chunk of
 * B stay in L2 together (the FFN's down product, K = F: 64 rows of X are
 * 720 KB at F = 2,816; 3-4% faster on its own). The last chunk of a
 * k-block prefetches the first of the next. Each chain continues through
 * Y from one k-block to the next (a stored float is exact): the same steps
 * in the same order, the same bits. */
#define KBLOCK 1024
#define KSPLIT 1536
#define KB_MIN_COLS (4 * PW)

/* Rows [k0, k0 + kn) of the k-steps of eng_kr_gemm_region. */
static void gemm_region_k(eng_kpath p, int32_t i0, int32_t i1, int32_t c0, int32_t c1, int32_t N, int32_t K,
                          int32_t k0, int32_t kn, int32_t kn_next, const float *X, int64_t ldx, const float *xp,
                          const ref_b *B, float *Y, int64_t ldy, int acc_in) {
    const int32_t M = i1 - i0, mr = mr_max(p);
    const int32_t nb = (M + mr - 1) / mr;
    const int32_t wmax = tile_w(p, (M + nb - 1) / nb);
    const bool contig = B->ldb == PW && B->ps == (int64_t)K * PW;
    const ref_b Bk = {.b = B->b + (int64_t)k0 * B->ldb, .ps = B->ps, .ldb = B->ldb, .nread = B->nread};
    for (int32_t cc = c0; cc < c1; cc += wmax) {
        const int32_t ce = cc + wmax < c1 ? cc + wmax : c1;
        /* the next chunk's panels [ce, min(ce + wmax, c1)): whole, or their rows [k0, k0 + kn) (one panel) */
        const int32_t ne = ce + wmax < c1 ? ce + wmax : c1;
        int64_t next = !contig || ne <= ce ? 0
                       : kn == K        ? (int64_t)((ne + PW - 1) / PW - ce / PW) * B->ps * 4
                                        : (int64_t)kn * PW * 4;
        const char *nb0 = (const char *)(Bk.b + (ce / PW) * B->ps);
        if (contig && ne <= ce && kn_next > 0) {  /* the last chunk: the next k-block's first chunk */
            nb0 = (const char *)(Bk.b + (int64_t)kn * B->ldb + (c0 / PW) * B->ps);
            next = (int64_t)kn_next * PW * 4;
        }
        for (int32_t ib = 0; ib < nb; ib++) {
            int32_t r0, r1;
            row_block(M, nb, ib, &r0, &r1);
            const int64_t s0 = next * ib / nb, s1 = next * (ib + 1) / nb;
            const float *x = xp ? xp + (int64_t)r0 * K + (int64_t)k0 * (r1 - r0) : X + (int64_t)(i0 + r0) * ldx + k0;
            eng_kr_gemm_rows(p, r1 - r0, kn, x, xp ? r1 - r0 : ldx, xp != NULL, &Bk, cc, ce, N,
                             Y + (int64_t)(i0 + r0) * ldy, ldy, acc_in,
                             tile_w(p, r1 - r0) < wmax ? tile_w(p, r1 - r0) : wmax, next ? nb0 + s0 : NULL, s1 - s0);
        }
    }
}

void eng_kr_gemm_region(eng_kpath p, int32_t i0, int32_t i1, int32_t c0, int32_t c1, int32_t N, int32_t K,
                        const float *X, int64_t ldx, const float *xp, const ref_b *B, float *Y, int64_t ldy,
                        int acc_in) {
    const int32_t M = i1 - i0, mr = mr_max(p);
    if (M <= 0 || c1 <= c0) return;
    const int32_t nb = (M + mr - 1) / mr;
    const int32_t nkb = K > KSPLIT && tile_w(p, (M + nb - 1) / nb) == PW && c1 - c0 >= KB_MIN_COLS
                            ? (K + KBLOCK - 1) / KBLOCK : 1;
    for (int32_t kb = 0; kb < nkb; kb++) {
        const int32_t k0 = (int32_t)((int64_t)K * kb / nkb), k1 = (int32_t)((int64_t)K * (kb + 1) / nkb);
        const int32_t k2 = (int32_t)((int64_t)K * (kb + 2) / nkb);
        gemm_region_k(p, i0, i1, c0, c1, N, K, k0, k1 - k0, kb + 1 < nkb ? k2 - k1 : 0, X, ldx, xp, B, Y, ldy,
                      acc_in || kb > 0);
    }
}

// ----------------------------------------------------------------------------
// Products with packed weights, split over panels

/* B operand of W: panels, or W^T [K, ld] read in place (panel q at column
 * 32q, rows a whole ld apart). */
static ref_b weights_b(const eng_kmat *W) {
    if (W->panels) return (ref_b){.b = W->data, .ps = (int64_t)W->n_in * PW, .ldb = PW, .nread = W->ld};
    ENG_ASSERT(W->kn);
    return (ref_b){.b = W->data, .ps = PW, .ldb = W->ld, .nread = W->ld};
}

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

/* Row block [r0, r1) of eng_kr_gemm_region's blocks over M rows transposed at
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
    eng_kr_gemm_region(ctx->path, r0, r1, c0, c1, W->n_out, W->n_in, X, ldx, xp, &B, Y, ldy, 0);
}
