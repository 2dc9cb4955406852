/*
 * engine/kernels_ref_int.h: what the ref kernel's files share (internal to
 * kernels_ref_gemm.c, kernels_ref_softmax.c and kernels_ref_attn.c): the
 * panel layout of the B operand, balanced row blocks, the register blocks
 * and the blocked product (gemm), and the softmax steps the attention takes
 * (softmax). Every function here keeps the chains of kernels_ref.h: one
 * float accumulator per output element, fused steps in ascending k.
 */
#ifndef ENG_KERNELS_REF_INT_H
#define ENG_KERNELS_REF_INT_H

#include "kernels_ref.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define REF_X86 1
#else
#define REF_X86 0
#endif

#define PW ENG_REF_PANEL  /* panel width: 32 columns */
#define MR_MAX 12         /* rows of the largest register block (avx512) */
#define TILE_W 128        /* widest register block: 4 panels */

/* Rows of the largest register block of a path. */
static inline int32_t mr_max(eng_kpath p) { return p == ENG_KPATH_AVX2 ? 6 : MR_MAX; }

/* Widest block (columns) the path has for MR rows. */
static inline int32_t tile_w(eng_kpath p, int32_t MR) {
    if (p == ENG_KPATH_AVX512) return MR <= 3 ? 128 : MR <= 6 ? 64 : 32;
    if (p == ENG_KPATH_AVX2) return MR <= 1 ? 64 : MR <= 3 ? 32 : 16;
    return PW;
}

static inline int32_t round32(int32_t n) { return (n + PW - 1) / PW * PW; }

/* B operand: panel q, row k at b + q*ps + k*ldb; columns [0, nread) may be
 * read (nread >= the product's N: panels padded, or a row stride). */
typedef struct ref_b {
    const float *b;
    int64_t      ps, ldb;
    int32_t      nread;
} ref_b;

/* Balanced row blocks: M rows in nb blocks, sizes differing by at most one; block ib is [r0, r1). */
static inline void row_block(int32_t M, int32_t nb, int32_t ib, int32_t *r0, int32_t *r1) {
    *r0 = (int32_t)((int64_t)M * ib / nb);
    *r1 = (int32_t)((int64_t)M * (ib + 1) / nb);
}

// ----------------------------------------------------------------------------
// Products (kernels_ref_gemm.c)

/* One register block: Y[MR, W] (+)= X[MR, K] . B[K, W] (W a multiple of 16
 * no wider than tile_w, starting on a panel boundary unless W == 16) whose
 * B columns are all readable; acc_in: the chains continue from Y instead
 * of +0. While it runs, the K lines pf + k*pf_step are prefetched (L1 on
 * avx512, L2 on avx2; pf_step 0: nothing new). xt: X transposed (row r, k at x[r + k*ldx]),
 * not on the avx512 path. */
void eng_kr_ukr_run(eng_kpath p, int32_t MR, int32_t W, int32_t K, const float *x, int64_t ldx, int xt,
                    const float *b, int64_t ps, int64_t ldb, float *y, int64_t ldy, int acc_in, const char *pf,
                    int64_t pf_step);
/* One row block of MR rows over columns [c0, c1) of an N-column product
 * (c0 on a panel boundary), in blocks of at most wmax columns; columns past
 * N or past B's readable width take the same chains through a small tile.
 * The pf_bytes at pf are prefetched along the way (pf NULL: none). */
void eng_kr_gemm_rows(eng_kpath p, int32_t MR, int32_t K, const float *X, int64_t ldx, int xt, const ref_b *B,
                      int32_t c0, int32_t c1, int32_t N, float *Y, int64_t ldy, int acc_in, int32_t wmax,
                      const char *pf, int64_t pf_bytes);
/* Y[i0..i1, c0..c1) (+)= X . B in balanced row blocks of at most the path's
 * MR rows. xp: X packed by eng_k_ref_pack, or NULL (X read in place). */
void eng_kr_gemm_region(eng_kpath p, int32_t i0, int32_t i1, int32_t c0, int32_t c1, int32_t N, int32_t K,
                        const float *X, int64_t ldx, const float *xp, const ref_b *B, float *Y, int64_t ldy,
                        int acc_in);

// ----------------------------------------------------------------------------
// Softmax steps (kernels_ref_softmax.c)

/* d[0, n) = round(s * inv) (d may be s), the same bits on every path. */
void eng_kr_sm_norm(eng_kpath path, const float *s, float *d, int32_t n, float inv, bool bf16);
#if REF_X86
/* The online-softmax step of a key block that every row c < R attends
 * whole, on transposed scores ST (key jj's row at ST + jj*PW, row c in
 * column c), 8 rows a vector (AVX2): the same bits as
 * eng_k_softmax_step_path on each row, whose outputs are Ot[c] (WV of
 * E32), running max mx[c] and sum l[c]. */
void eng_kr_sm_block_t256(float *ST, int32_t nk, int32_t R, float scale, bool bf16, float *mx, float *l, float *Ot,
                          int32_t E32, int32_t WV);
#endif

#endif /* ENG_KERNELS_REF_INT_H */
