/*
 * tests/test_kernels.c: the ref kernel's batch invariance and its code
 * paths (engine/kernels_ref_*.c).
 *
 *   - every ref product equals the documented chain, acc = fmaf(x[k], w[k],
 *     acc) for k ascending from +0, computed plainly here (memcmp), on every
 *     path the CPU runs (scalar, avx2, avx512), for both weight layouts, at
 *     1, 2 and 3 threads, for every M in 1..256 and row offsets;
 *   - blas: one row is one sgemv, more rows one sgemm (OpenBLAS's bytes at
 *     one thread), X . W^T within a tolerance at 1, 2 and 3 threads;
 *   - the ref attention (full and windowed) equals a plain oracle of the
 *     same chains on every path, whatever the chunking; over long contexts
 *     (1,200 keys) every query's output is identical at shifted chunk
 *     offsets, at 1 and 2 threads, on every path;
 *   - the blas attention over long contexts (2,600 keys, in several of its
 *     key blocks) has the same bits on every path and stays within a
 *     tolerance of that oracle;
 *   - the softmax of every path gives eng_k_softmax_row's bits, on scores
 *     that reach exp's clamps, infinities and NaN;
 *   - through the public API, on llama, sliding-window, hybrid (Mamba-2) and
 *     RWKV-7 tiny models: logits, KV and recurrent state are
 *     memcmp-identical whatever the chunk length M (every M in 1..256
 *     against 64), the row offset of each token in its chunk and the thread
 *     count (1 and 2); and ref differs from blas only within a tolerance.
 *
 * Paths the CPU does not run are skipped with a message (the scalar path
 * always runs).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <cblas.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "internal.h"
#include "kernels.h"
#include "model.h"
#include "seqcheck.h"
#include "status.h"
#include "synth.h"

#define TOL_FP32 1e-4  /* ref vs blas, relative to the largest |logit| (as test_engine.c) */

static uint64_t g_rng;
static float frand(void) {  /* uniform in [-1, 1) */
    g_rng = g_rng * 6364136223846793005ull + 1442695040888963407ull;
    return (float)((int64_t)(g_rng >> 40) - (1 << 23)) / (float)(1 << 23);
}
static float *rvec(int64_t n, float scale) {
    float *v = malloc(sizeof(float) * (size_t)(n > 0 ? n : 1));
    for (int64_t i = 0; i < n; i++) v[i] = frand() * scale;
    return v;
}

/* The paths this CPU runs: scalar, then avx2 and avx512 when available. */
static int paths(eng_kpath out[3]) {
    const eng_kpath best = eng_kpath_best();
    int n = 0;
    for (int p = ENG_KPATH_SCALAR; p <= (int)best; p++) out[n++] = (eng_kpath)p;
    return n;
}

static eng_kctx ctx_of(eng_kpath path, int32_t threads, eng_pool *pool) {
    eng_kctx c = {.kernel = ENG_KERNEL_REF, .bf16 = false, .n_threads = threads, .pool = threads > 1 ? pool : NULL,
                  .path = path};
    return c;
}

// ----------------------------------------------------------------------------
// Products

/* y[i][j] = the fmaf chain of row i of x with row j of w (k ascending from +0). */
static void oracle_matmul(int32_t M, int32_t N, int32_t K, const float *x, int32_t ldx, const float *w, float *y) {
    for (int32_t i = 0; i < M; i++)
        for (int32_t j = 0; j < N; j++) {
            float acc = 0.0f;
            for (int32_t k = 0; k < K; k++) acc = fmaf(x[(int64_t)i * ldx + k], w[(int64_t)j * K + k], acc);
            y[(int64_t)i * N + j] = acc;
        }
}

static void ref_products_equal_the_fma_chain_on_every_path_layout_and_thread_count(void **state) {
    (void)state;
    static const int32_t shapes[][3] = {  /* M, N, K */
        {1, 45, 777}, {5, 64, 64}, {13, 100, 33}, {64, 96, 257}, {37, 300, 128}, {2, 33, 1}, {130, 17, 40},
        {64, 300, 2100}, {33, 200, 3001},  /* K in k-blocks (kernels_ref_gemm.c) */
    };
    eng_kpath ps[3];
    const int np = paths(ps);
    eng_pool *p2 = eng_pool_new(2), *p3 = eng_pool_new(3);
    int checked = 0;
    for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++) {
        const int32_t M = shapes[si][0], N = shapes[si][1], K = shapes[si][2], ldx = K + 3;
        g_rng = 100 + si;
        float *w = rvec((int64_t)N * K, 1.0f), *x = rvec((int64_t)M * ldx, 1.0f);
        float *want = malloc(sizeof(float) * (size_t)M * N), *y = malloc(sizeof(float) * (size_t)M * (N + 5));
        oracle_matmul(M, N, K, x, ldx, w, want);
        eng_kmat Wp, Wkn;
        assert_int_equal(eng_kmat_init_for(&Wp, w, N, K, ENG_KERNEL_REF, 1, false), ENG_OK);
        assert_int_equal(eng_kmat_init(&Wkn, w, N, K, false), ENG_OK);
        assert_true(Wp.panels && Wp.ld % ENG_REF_PANEL == 0);
        for (int pi = 0; pi < np; pi++)
            for (int32_t th = 1; th <= 3; th++)
                for (int lay = 0; lay < 2; lay++) {
                    const eng_kctx c = ctx_of(ps[pi], th, th == 2 ? p2 : p3);
                    memset(y, 0xff, sizeof(float) * (size_t)M * (N + 5));
                    eng_k_matmul(&c, lay ? &Wkn : &Wp, M, x, ldx, y, N + 5);
                    for (int32_t i = 0; i < M; i++)
                        if (memcmp(y + (int64_t)i * (N + 5), want + (int64_t)i * N, sizeof(float) * (size_t)N))
                            fail_msg("path %s, %d threads, %s layout, M %d N %d K %d: row %d differs from the chain",
                                     eng_kpath_name(ps[pi]), th, lay ? "kn" : "panel", M, N, K, i);
                    checked++;
                }
        eng_kmat_free(&Wp);
        eng_kmat_free(&Wkn);
        free(w); free(x); free(want); free(y);
    }
    print_message("%d products checked on %d path(s) (best: %s)\n", checked, np, eng_kpath_name(eng_kpath_best()));
    eng_pool_free(p2);
    eng_pool_free(p3);
}

/* The weights' layout by kernel and thread count: ref's panels; blas's
 * W^T (kn) at one thread and W itself (rows, a copy of w) with more, so a
 * thread's column unit is a block of whole rows; bf16 rounds the copy. */
static void blas_weights_are_whole_rows_with_more_than_one_thread(void **state) {
    (void)state;
    const int32_t N = 100, K = 70;
    g_rng = 77;
    float *w = rvec((int64_t)N * K, 1.0f);
    for (int bf = 0; bf < 2; bf++)
        for (int32_t th = 1; th <= 3; th++) {
            eng_kmat B, R;
            assert_int_equal(eng_kmat_init_for(&B, w, N, K, ENG_KERNEL_BLAS, th, bf), ENG_OK);
            assert_int_equal(eng_kmat_init_for(&R, w, N, K, ENG_KERNEL_REF, th, bf), ENG_OK);
            assert_true(R.panels && R.kn);
            assert_true(B.owned && !B.panels);
            if (th == 1) {
                assert_true(B.kn);
                assert_int_equal(B.ld, 112);  /* N rounded up to 16 */
            } else {
                assert_false(B.kn);
                assert_int_equal(B.ld, K);
            }
            for (int32_t j = 0; j < N; j++)
                for (int32_t k = 0; k < K; k++) {
                    const float want = bf ? eng_bf16_round(w[(int64_t)j * K + k]) : w[(int64_t)j * K + k];
                    const float got = B.kn ? B.data[(int64_t)k * B.ld + j] : B.data[(int64_t)j * B.ld + k];
                    if (memcmp(&got, &want, sizeof got))
                        fail_msg("blas, %d thread(s), bf16 %d: W(%d, %d) is %g, want %g", th, bf, j, k, got, want);
                }
            eng_kmat_free(&B);
            eng_kmat_free(&R);
        }
    free(w);
}

/* blas: a product of one row is one sgemv, of more rows one sgemm (the
 * routine a serving engine picks by batch size; OpenBLAS 0.3.21's sgemm
 * would pack the weights first, which halved decode). At one thread the
 * rows are OpenBLAS's own bytes (memcmp against the routine called here);
 * at 1, 2 and 3 threads, for both weight layouts, the product is X . W^T
 * within a tolerance of the chain (a wrong transpose or unit offset is not
 * within it). */
static void blas_products_are_sgemv_for_one_row_and_sgemm_for_more(void **state) {
    (void)state;
    static const int32_t shapes[][3] = {{1, 300, 777}, {1, 2816, 1024}, {2, 300, 777}, {7, 100, 64}};
    eng_pool *p2 = eng_pool_new(2), *p3 = eng_pool_new(3);
    openblas_set_num_threads(1);  /* as the engine before each forward pass */
    for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++) {
        const int32_t M = shapes[si][0], N = shapes[si][1], K = shapes[si][2], ldx = K + 3, ldy = N + 5;
        g_rng = 300 + si;
        float *w = rvec((int64_t)N * K, 1.0f), *x = rvec((int64_t)M * ldx, 1.0f);
        float *want = malloc(sizeof(float) * (size_t)M * N), *y = malloc(sizeof(float) * (size_t)M * ldy);
        float *lib = malloc(sizeof(float) * (size_t)M * ldy);
        oracle_matmul(M, N, K, x, ldx, w, want);
        eng_kmat Wkn, Wnk;
        assert_int_equal(eng_kmat_init(&Wkn, w, N, K, false), ENG_OK);
        eng_kmat_view(&Wnk, w, N, K);
        for (int lay = 0; lay < 2; lay++) {
            const eng_kmat *W = lay ? &Wnk : &Wkn;
            memset(lib, 0, sizeof(float) * (size_t)M * ldy);
            if (M == 1 && W->kn) cblas_sgemv(CblasRowMajor, CblasTrans, K, N, 1.0f, W->data, W->ld, x, 1, 0.0f, lib, 1);
            else if (M == 1) cblas_sgemv(CblasRowMajor, CblasNoTrans, N, K, 1.0f, W->data, W->ld, x, 1, 0.0f, lib, 1);
            else
                cblas_sgemm(CblasRowMajor, CblasNoTrans, W->kn ? CblasNoTrans : CblasTrans, M, N, K, 1.0f, x, ldx,
                            W->data, W->ld, 0.0f, lib, ldy);
            for (int32_t th = 1; th <= 3; th++) {
                eng_kctx c = ctx_of(ENG_KPATH_SCALAR, th, th == 2 ? p2 : p3);
                c.kernel = ENG_KERNEL_BLAS;
                memset(y, 0xff, sizeof(float) * (size_t)M * ldy);
                eng_k_matmul(&c, W, M, x, ldx, y, ldy);
                for (int32_t i = 0; i < M; i++) {
                    if (th == 1 && memcmp(y + (int64_t)i * ldy, lib + (int64_t)i * ldy, sizeof(float) * (size_t)N))
                        fail_msg("%s layout, M %d N %d K %d: row %d is not OpenBLAS's %s", lay ? "nk" : "kn", M, N, K,
                                 i, M == 1 ? "sgemv" : "sgemm");
                    for (int32_t j = 0; j < N; j++) {
                        const double d = fabs((double)y[(int64_t)i * ldy + j] - want[(int64_t)i * N + j]);
                        if (!(d <= 1e-4 * sqrt((double)K)))
                            fail_msg("%s layout, %d threads, M %d N %d K %d: element (%d, %d) is %g, X . W^T is %g",
                                     lay ? "nk" : "kn", th, M, N, K, i, j, y[(int64_t)i * ldy + j],
                                     want[(int64_t)i * N + j]);
                    }
                }
            }
        }
        eng_kmat_free(&Wkn);
        free(w); free(x); free(want); free(y); free(lib);
    }
    eng_pool_free(p2);
    eng_pool_free(p3);
}

/* Every M in 1..256 at every row offset class: the rows of X[i0, i0 + M)
 * come out as the same rows of the full product, at 1 and 2 threads. */
static void ref_product_rows_do_not_depend_on_m_the_row_offset_or_threads(void **state) {
    (void)state;
    const int32_t MAX = 300, N = 70, K = 96;
    g_rng = 7;
    float *w = rvec((int64_t)N * K, 1.0f), *x = rvec((int64_t)MAX * K, 1.0f);
    float *full = malloc(sizeof(float) * (size_t)MAX * N), *y = malloc(sizeof(float) * (size_t)MAX * N);
    eng_kmat W;
    assert_int_equal(eng_kmat_init_for(&W, w, N, K, ENG_KERNEL_REF, 1, false), ENG_OK);
    eng_pool *p2 = eng_pool_new(2);
    eng_kpath ps[3];
    const int np = paths(ps);
    for (int pi = 0; pi < np; pi++) {
        const eng_kctx c1 = ctx_of(ps[pi], 1, NULL);
        eng_k_matmul(&c1, &W, MAX, x, K, full, N);
        for (int32_t M = 1; M <= 256; M++) {
            const int32_t i0 = (M * 37) % (MAX - M + 1);
            const eng_kctx c = ctx_of(ps[pi], M % 2 ? 1 : 2, p2);
            eng_k_matmul(&c, &W, M, x + (int64_t)i0 * K, K, y, N);
            if (memcmp(y, full + (int64_t)i0 * N, sizeof(float) * (size_t)M * N))
                fail_msg("path %s: M %d at row offset %d differs from the full product", eng_kpath_name(ps[pi]), M, i0);
        }
    }
    eng_kmat_free(&W);
    eng_pool_free(p2);
    free(w); free(x); free(full); free(y);
}

/* The packed rows (eng_k_ref_pack): on avx2, blocks of 4 to 6 rows read X
 * as one transposed stream. Same chains: every block of rows [r0, r1) and
 * columns [c0, c1) equals the oracle, K = 1024 included (a row stride of 4
 * KiB, the case the packing is for); the scalar path packs nothing; and a
 * planted fault in the packed copy changes exactly its row (so the
 * product reads the copy, not X). */
static void ref_products_read_packed_rows_with_the_same_chains(void **state) {
    (void)state;
    static const int32_t shapes[][3] = {{4, 40, 1024}, {6, 64, 33}, {7, 50, 1024}, {13, 96, 257}, {64, 70, 100}};
    const eng_kctx sc = ctx_of(ENG_KPATH_SCALAR, 1, NULL);
    assert_int_equal(eng_k_ref_pack_floats(&sc, 64, 1024), 0);
    if (eng_kpath_best() < ENG_KPATH_AVX2) {
        print_message("no avx2 here: the scalar path reads X in place (checked); nothing packs\n");
        return;
    }
    const eng_kctx c = ctx_of(ENG_KPATH_AVX2, 1, NULL);
    assert_int_equal(eng_k_ref_pack_floats(&c, 3, 1024), 0);  /* blocks of 3 rows or fewer: 32 columns wide */
    assert_int_equal(eng_k_ref_pack_floats(&c, 64, 1024), 64 * 1024);
    int checked = 0;
    for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++) {
        const int32_t M = shapes[si][0], N = shapes[si][1], K = shapes[si][2], r0 = 3, ldx = K;
        g_rng = 900 + si;
        float *w = rvec((int64_t)N * K, 1.0f), *x = rvec((int64_t)(M + r0) * ldx, 1.0f);
        float *want = malloc(sizeof(float) * (size_t)M * N), *y = malloc(sizeof(float) * (size_t)(M + r0) * N);
        oracle_matmul(M, N, K, x + (int64_t)r0 * ldx, ldx, w, want);
        eng_kmat W;
        assert_int_equal(eng_kmat_init_for(&W, w, N, K, ENG_KERNEL_REF, 1, false), ENG_OK);
        const int64_t n = eng_k_ref_pack_floats(&c, M, K);
        assert_int_equal(n, (int64_t)M * K);
        float *xp = malloc(sizeof(float) * (size_t)n);
        eng_k_ref_pack(&c, M, K, x + (int64_t)r0 * ldx, ldx, xp);
        const int32_t cuts[3] = {0, N > ENG_REF_PANEL ? ENG_REF_PANEL : N, N};  /* one panel, then the rest */
        for (int ci = 0; ci < 2 && cuts[ci] < N; ci++) {
            const int32_t c0 = cuts[ci], c1 = cuts[ci + 1];
            memset(y, 0xff, sizeof(float) * (size_t)(M + r0) * N);
            eng_k_matmul_ref_block(&c, &W, r0, r0 + M, c0, c1, x, ldx, xp, y, N);
            for (int32_t i = 0; i < M; i++)
                if (memcmp(y + (int64_t)(r0 + i) * N + c0, want + (int64_t)i * N + c0, sizeof(float) * (size_t)(c1 - c0)))
                    fail_msg("M %d N %d K %d, columns [%d, %d): packed row %d differs from the chain", M, N, K, c0, c1, i);
            checked++;
        }
        /* planted: row M-1's k = 5 in the copy (its block's last row) */
        const int32_t mr = 6, nb = (M + mr - 1) / mr, b0 = (int32_t)((int64_t)M * (nb - 1) / nb), nbr = M - b0;
        xp[(int64_t)b0 * K + 5 * nbr + (M - 1 - b0)] += 1.0f;
        eng_k_matmul_ref_block(&c, &W, r0, r0 + M, 0, N, x, ldx, xp, y, N);
        for (int32_t i = 0; i < M; i++) {
            const bool same = !memcmp(y + (int64_t)(r0 + i) * N, want + (int64_t)i * N, sizeof(float) * (size_t)N);
            if (same != (i != M - 1))
                fail_msg("M %d N %d K %d: a fault planted in packed row %d shows in row %d: %s", M, N, K, M - 1, i,
                         same ? "missed" : "leaked");
        }
        eng_kmat_free(&W);
        free(w); free(x); free(want); free(y); free(xp);
    }
    print_message("%d packed blocks checked, each planted fault caught in its row only\n", checked);
}

// ----------------------------------------------------------------------------
// Softmax and attention

/* Every one of the 2^32 floats (NaNs, infinities, subnormals, both sides
 * of exp's clamps at -87 and 88): each path's vector exponential, in the
 * steps of four vectors the softmax takes them in, gives eng_expf's bits.
 * Checked against eng_expf itself, so the assertion is that the paths do
 * not drift from the scalar function. */
static void every_float_has_the_same_exp_on_every_path(void **state) {
    (void)state;
    eng_kpath ps[3];
    const int np = paths(ps);
    if (np < 2) {  /* the scalar path is eng_expf itself */
        print_message("no vector path on this CPU: nothing to compare\n");
        return;
    }
    const int64_t B = (int64_t)1 << 22;
    uint32_t *x = malloc(sizeof(uint32_t) * (size_t)B);
    float *want = malloc(sizeof(float) * (size_t)B), *got = malloc(sizeof(float) * (size_t)B);
    int64_t checked = 0;
    for (int64_t b0 = 0; b0 < ((int64_t)1 << 32); b0 += B) {
        for (int64_t i = 0; i < B; i++) x[i] = (uint32_t)(b0 + i);
        const float *xf = (const float *)(const void *)x;
        for (int64_t i = 0; i < B; i++) want[i] = eng_expf(xf[i]);
        for (int pi = 1; pi < np; pi++) {
            eng_k_exp_path(ps[pi], xf, got, B);
            if (memcmp(got, want, sizeof(float) * (size_t)B)) {
                int64_t i = 0;
                while (!memcmp(got + i, want + i, sizeof(float))) i++;
                fail_msg("exp on path %s of bits 0x%08x differs from eng_expf's", eng_kpath_name(ps[pi]),
                         (unsigned)x[i]);
            }
            checked += B;
        }
    }
    print_message("%lld exponentials on %d vector path(s) equal to eng_expf's\n", (long long)checked, np - 1);
    free(x); free(want); free(got);
}

/* The SwiGLU of the fused epilogue, h = (g / (1 + exp(-g))) * u, on every
 * path against the scalar formula: 2^24 bit patterns spread over every
 * exponent (both signs), the specials, and finite u of every sign and size. */
static void silu_mul_is_the_same_on_every_path(void **state) {
    (void)state;
    eng_kpath ps[3];
    const int np = paths(ps);
    const int64_t n = ((int64_t)1 << 24) + 16;
    float *g = malloc(sizeof(float) * (size_t)n), *u = malloc(sizeof(float) * (size_t)n);
    float *want = malloc(sizeof(float) * (size_t)n), *got = malloc(sizeof(float) * (size_t)n);
    static const uint32_t specials[16] = {0x00000000u, 0x80000000u, 0x7f800000u, 0xff800000u, 0x7fc00000u,
                                          0xffc00001u, 0x00000001u, 0x807fffffu, 0x42b00000u, 0xc2ae0000u,
                                          0x42b17218u, 0xc2aeac50u, 0x3f800000u, 0xbf800000u, 0x7f7fffffu,
                                          0xff7fffffu};
    for (int64_t i = 0; i < n; i++) {
        const uint32_t gb = i < 16 ? specials[i] : (uint32_t)(i - 16) * 257u;
        uint32_t ub = (uint32_t)(i * 2654435761u);
        if ((ub & 0x7f800000u) == 0x7f800000u) ub ^= 0x40000000u;  /* u finite: a NaN in both factors has no one product */
        memcpy(&g[i], &gb, sizeof gb);
        memcpy(&u[i], &ub, sizeof ub);
        want[i] = (g[i] / (1.0f + eng_expf(-g[i]))) * u[i];
    }
    for (int pi = 0; pi < np; pi++)
        for (int64_t off = 0; off < 3; off++) {  /* vector tails of every length */
            eng_k_silu_mul_path(ps[pi], g + off, u + off, got + off, n - 2 * off);
            if (memcmp(got + off, want + off, sizeof(float) * (size_t)(n - 2 * off))) {
                int64_t i = off;
                while (!memcmp(got + i, want + i, sizeof(float))) i++;
                fail_msg("silu(g) * u on path %s differs at g = %a, u = %a: %a against %a", eng_kpath_name(ps[pi]),
                         (double)g[i], (double)u[i], (double)got[i], (double)want[i]);
            }
        }
    free(g); free(u); free(want); free(got);
}

static void softmax_paths_give_the_bits_of_the_shared_softmax(void **state) {
    (void)state;
    eng_kpath ps[3];
    const int np = paths(ps);
    static const int32_t lens[] = {1, 2, 7, 8, 9, 15, 16, 17, 31, 33, 64, 100, 1000};
    int rows = 0;
    for (size_t li = 0; li < sizeof lens / sizeof lens[0]; li++)
        for (int kind = 0; kind < 4; kind++)
            for (int bf = 0; bf < 2; bf++) {
                const int32_t n = lens[li];
                g_rng = 1000 + li * 8 + kind * 2 + bf;
                /* kind 0: ordinary scores; 1: a range past exp's clamps (-87, 88);
                 * 2: with -inf, huge values and subnormals; 3: with a NaN */
                float *s0 = rvec(n, kind == 0 ? 8.0f : 400.0f);
                if (kind >= 2) {
                    s0[n / 2] = -INFINITY;
                    if (n > 2) s0[n / 3] = 3e38f;
                    if (n > 3) s0[1] = 1e-40f;
                }
                if (kind == 3) s0[n - 1] = NAN;
                float *want = malloc(sizeof(float) * (size_t)n), *got = malloc(sizeof(float) * (size_t)n);
                memcpy(want, s0, sizeof(float) * (size_t)n);
                eng_k_softmax_row(want, n, 0.125f, bf);
                for (int pi = 0; pi < np; pi++) {
                    memcpy(got, s0, sizeof(float) * (size_t)n);
                    eng_k_softmax_path(ps[pi], got, n, 0.125f, bf);
                    if (memcmp(got, want, sizeof(float) * (size_t)n))
                        fail_msg("softmax path %s, n %d, kind %d, bf16 %d differs", eng_kpath_name(ps[pi]), n, kind, bf);
                }
                rows++;
                free(s0); free(want); free(got);
            }
    print_message("%d softmax rows on %d path(s)\n", rows, np);
}

/* The ref attention's chains, plainly: for query head h, token t at
 * position p = pos0 + t, keys j in [lo, p] (lo = max(p - W + 1, kpos0),
 * W == 0: 0), s_j = fmaf chain over e of q[e]*k_j[e]; then the online
 * softmax over key blocks of 256 absolute positions, each cut to [lo, p]:
 * s = round(s * scale), the block max; when it is above the running max m
 * (after the first block), o = o * a and l = l * a with a = exp(m - max),
 * m = max; e = round(exp(s - m)); l = l + the block's sum in 8 lanes (lane
 * (j - first key of the block) % 8) combined pairwise; o[e] = fmaf chain
 * over the block's keys ascending of e_j * v_j[e]. Then o * (1 / l),
 * rounded when bf16. */
static void oracle_attention(int32_t T, int32_t pos0, int32_t W, int32_t kpos0, int32_t H, int32_t G, int32_t E,
                             const float *Q, int32_t ldq, const float *K, const float *V, int32_t ldkv, float *O,
                             int32_t ldo, bool bf16) {
    const int32_t GR = H / G, KB = ENG_REF_ATTN_KB;
    const float scale = 1.0f / sqrtf((float)E);
    float *s = malloc(sizeof(float) * KB), *o = malloc(sizeof(float) * (size_t)E);
    for (int32_t h = 0; h < H; h++)
        for (int32_t t = 0; t < T; t++) {
            const int32_t p = pos0 + t, g = h / GR;
            int32_t lo = W > 0 ? p - W + 1 : 0;
            if (lo < kpos0) lo = kpos0;
            const float *q = Q + (int64_t)t * ldq + (int64_t)h * E;
            float m = -INFINITY, l = 0.0f;
            for (int32_t e = 0; e < E; e++) o[e] = 0.0f;
            for (int32_t b0 = lo; b0 <= p;) {
                const int32_t b1 = (b0 / KB + 1) * KB - 1 < p ? (b0 / KB + 1) * KB - 1 : p, n = b1 - b0 + 1;
                float bm = m;
                for (int32_t j = b0; j <= b1; j++) {
                    const float *k = K + (int64_t)(j - kpos0) * ldkv + (int64_t)g * E;
                    float acc = 0.0f;
                    for (int32_t e = 0; e < E; e++) acc = fmaf(q[e], k[e], acc);
                    acc = acc * scale;
                    s[j - b0] = bf16 ? eng_bf16_round(acc) : acc;
                    bm = s[j - b0] > bm ? s[j - b0] : bm;
                }
                if (b0 > lo && bm > m) {
                    const float al = eng_expf(m - bm);
                    for (int32_t e = 0; e < E; e++) o[e] = o[e] * al;
                    l = l * al;
                }
                m = bm;
                float a8[8] = {0, 0, 0, 0, 0, 0, 0, 0};
                for (int32_t j = 0; j < n; j++) {
                    s[j] = eng_expf(s[j] - m);
                    if (bf16) s[j] = eng_bf16_round(s[j]);
                    a8[j % 8] += s[j];
                }
                l = l + (((a8[0] + a8[1]) + (a8[2] + a8[3])) + ((a8[4] + a8[5]) + (a8[6] + a8[7])));
                for (int32_t e = 0; e < E; e++)
                    for (int32_t j = b0; j <= b1; j++)
                        o[e] = fmaf(s[j - b0], V[(int64_t)(j - kpos0) * ldkv + (int64_t)g * E + e], o[e]);
                b0 = b1 + 1;
            }
            float *out = O + (int64_t)t * ldo + (int64_t)h * E;
            const float inv = 1.0f / l;
            for (int32_t e = 0; e < E; e++) out[e] = bf16 ? eng_bf16_round(o[e] * inv) : o[e] * inv;
        }
    free(s);
    free(o);
}

static void ref_attention_equals_its_chains_on_every_path_and_chunking(void **state) {
    (void)state;
    static const struct { int32_t H, G, E, W; } cfg[] = {
        {4, 2, 16, 0}, {8, 8, 64, 0}, {2, 1, 8, 0}, {4, 2, 48, 0}, {6, 3, 32, 0},
        {4, 2, 16, 20}, {4, 4, 64, 33}, {2, 1, 8, 1}, {4, 2, 40, 64},
    };
    static const int32_t chunks[] = {64, 1, 7, 13, 100};
    const int32_t n = 150;
    eng_kpath ps[3];
    const int np = paths(ps);
    eng_pool *p2 = eng_pool_new(2);
    int cases = 0;
    for (size_t ci = 0; ci < sizeof cfg / sizeof cfg[0]; ci++)
        for (int bf = 0; bf < 2; bf++) {
            const int32_t H = cfg[ci].H, G = cfg[ci].G, E = cfg[ci].E, W = cfg[ci].W;
            const int32_t HE = H * E, GE = G * E, LD = HE + 2 * GE;
            g_rng = 500 + ci * 2 + bf;
            float *x = rvec((int64_t)n * LD, 2.0f);  /* rows [Q | K | V] */
            if (bf)
                for (int64_t i = 0; i < (int64_t)n * LD; i++) x[i] = eng_bf16_round(x[i]);
            float *want = malloc(sizeof(float) * (size_t)n * HE), *got = malloc(sizeof(float) * (size_t)n * HE);
            float *qg = malloc(sizeof(float) * (size_t)H * 100 * E);
            /* the oracle, chunk by chunk of 64 (a row's result does not depend on its chunk) */
            for (int32_t p0 = 0; p0 < n; p0 += 64) {
                const int32_t T = n - p0 < 64 ? n - p0 : 64;
                const int32_t kpos0 = W > 0 && p0 - W + 1 > 0 ? p0 - W + 1 : 0;
                oracle_attention(T, p0, W, kpos0, H, G, E, x + (int64_t)p0 * LD, LD, x + (int64_t)kpos0 * LD + HE,
                                 x + (int64_t)kpos0 * LD + HE + GE, LD, want + (int64_t)p0 * HE, HE, bf);
            }
            for (int pi = 0; pi < np; pi++)
                for (size_t ki = 0; ki < sizeof chunks / sizeof chunks[0]; ki++) {
                    const eng_kctx c = {.kernel = ENG_KERNEL_REF, .bf16 = bf, .n_threads = ki % 2 ? 2 : 1,
                                        .pool = ki % 2 ? p2 : NULL, .path = ps[pi]};
                    memset(got, 0xff, sizeof(float) * (size_t)n * HE);
                    for (int32_t p0 = 0; p0 < n; p0 += chunks[ki]) {
                        const int32_t T = n - p0 < chunks[ki] ? n - p0 : chunks[ki];
                        const int32_t kpos0 = W > 0 && p0 - W + 1 > 0 ? p0 - W + 1 : 0, P = p0 + T - kpos0;
                        for (int32_t h = 0; h < H; h++)
                            for (int32_t t = 0; t < T; t++)
                                memcpy(qg + ((int64_t)h * T + t) * E, x + (int64_t)(p0 + t) * LD + (int64_t)h * E,
                                       sizeof(float) * (size_t)E);
                        const int64_t cap = eng_k_attention_ref_ws(c.n_threads, P, E);
                        float *ws = malloc(sizeof(float) * (size_t)cap);
                        eng_k_attention_ref(&c, T, p0, W, kpos0, H, G, E, qg, x + (int64_t)kpos0 * LD + HE,
                                            x + (int64_t)kpos0 * LD + HE + GE, LD, got + (int64_t)p0 * HE, HE, ws, cap);
                        free(ws);
                    }
                    for (int32_t t = 0; t < n; t++)
                        if (memcmp(got + (int64_t)t * HE, want + (int64_t)t * HE, sizeof(float) * (size_t)HE))
                            fail_msg("attention H %d G %d E %d W %d bf16 %d, path %s, chunk %d: token %d differs",
                                     H, G, E, W, bf, eng_kpath_name(ps[pi]), chunks[ki], t);
                    cases++;
                }
            free(x); free(want); free(got); free(qg);
        }
    print_message("%d attention runs equal to the oracle\n", cases);
    eng_pool_free(p2);
}

/* Runs the ref attention over positions [0, n) of x (rows [Q | K | V]) in
 * chunks: the first of `head` positions (none when 0), then `chunk` at a
 * time, into out [n, H*E]. */
static void attention_chunked(const eng_kctx *c, int32_t n, int32_t head, int32_t chunk, int32_t H, int32_t G,
                              int32_t E, int32_t W, const float *x, float *out) {
    const int32_t HE = H * E, GE = G * E, LD = HE + 2 * GE;
    float *qg = malloc(sizeof(float) * (size_t)H * (size_t)(chunk > head ? chunk : head) * E);
    for (int32_t p0 = 0; p0 < n;) {
        const int32_t want = p0 == 0 && head > 0 ? head : chunk;
        const int32_t T = n - p0 < want ? n - p0 : want;
        const int32_t kpos0 = W > 0 && p0 - W + 1 > 0 ? p0 - W + 1 : 0, P = p0 + T - kpos0;
        for (int32_t h = 0; h < H; h++)
            for (int32_t t = 0; t < T; t++)
                memcpy(qg + ((int64_t)h * T + t) * E, x + (int64_t)(p0 + t) * LD + (int64_t)h * E, sizeof(float) * (size_t)E);
        const int64_t cap = eng_k_attention_ref_ws(c->n_threads, P, E);
        float *ws = malloc(sizeof(float) * (size_t)cap);
        eng_k_attention_ref(c, T, p0, W, kpos0, H, G, E, qg, x + (int64_t)kpos0 * LD + HE, x + (int64_t)kpos0 * LD + HE + GE,
                            LD, out + (int64_t)p0 * HE, HE, ws, cap);
        free(ws);
        p0 += T;
    }
    free(qg);
}

/* Long contexts (1,200 keys: five blocks of the online softmax, and a
 * 500-key window over them, which starts blocks off the key panels): every
 * query's output is memcmp-identical whatever the chunk it sits in (64 from
 * 0; a first chunk of 37 then 64; 256 from an offset of 100; 1,000; 16), at
 * 1 and 2 threads, on every path, in fp32 and bf16, and equals the plain
 * oracle of its chains (the key blocks on absolute positions, whatever the
 * chunk, row blocks and super blocks the kernel uses). The chunks give
 * super blocks of 16 to 32 rows (transposed scores, 16 and 32 columns; the
 * blocks every row attends whole take the across-rows softmax) and, at 2
 * threads with chunks of 16, of 8 (packed keys). Two configs scale the
 * keys so that scores fall past exp's clamp, in vectors with ordinary
 * lanes beside them. */
static void ref_attention_over_long_contexts_is_identical_at_shifted_chunk_offsets(void **state) {
    (void)state;
    /* wide: the keys scaled by it, so that many scores fall more than 87 below their row's max (past exp's
     * clamp; the vectors mixing such lanes with ordinary ones take exp's slow path) */
    static const struct { int32_t H, G, E, W; bool bf16; float wide; } cfg[] = {
        {2, 1, 32, 0, false, 1}, {4, 2, 64, 0, false, 1}, {2, 1, 32, 500, false, 1}, {4, 2, 40, 300, true, 1},
        {2, 1, 32, 0, true, 1},  {2, 1, 32, 0, false, 20}, {2, 1, 32, 0, true, 20},
    };
    static const struct { int32_t head, chunk; } split[] = {{0, 64}, {37, 64}, {100, 256}, {0, 1000}, {0, 16}};
    const int32_t n = 1200;
    eng_kpath ps[3];
    const int np = paths(ps);
    eng_pool *p2 = eng_pool_new(2);
    int cases = 0;
    for (size_t ci = 0; ci < sizeof cfg / sizeof cfg[0]; ci++) {
        const int32_t H = cfg[ci].H, G = cfg[ci].G, E = cfg[ci].E, W = cfg[ci].W;
        const int32_t HE = H * E, GE = G * E, LD = HE + 2 * GE;
        const bool bf = cfg[ci].bf16;
        g_rng = 900 + ci;
        float *x = rvec((int64_t)n * LD, 2.0f);
        for (int32_t p = 0; p < n; p++)
            for (int32_t e = 0; e < GE; e++) x[(int64_t)p * LD + HE + e] *= cfg[ci].wide;
        if (bf)
            for (int64_t i = 0; i < (int64_t)n * LD; i++) x[i] = eng_bf16_round(x[i]);
        float *want = malloc(sizeof(float) * (size_t)n * HE), *got = malloc(sizeof(float) * (size_t)n * HE);
        /* the oracle: the kernel's chains exactly, from the whole context */
        for (int32_t p = 0; p < n; p++) {
            const int32_t kpos0 = W > 0 && p - W + 1 > 0 ? p - W + 1 : 0;
            oracle_attention(1, p, W, kpos0, H, G, E, x + (int64_t)p * LD, LD, x + (int64_t)kpos0 * LD + HE,
                             x + (int64_t)kpos0 * LD + HE + GE, LD, want + (int64_t)p * HE, HE, bf);
        }
        for (int pi = 0; pi < np; pi++)
            for (size_t si = 0; si < sizeof split / sizeof split[0]; si++)
                for (int32_t th = 1; th <= 2; th++) {
                    eng_kctx c = ctx_of(ps[pi], th, p2);
                    c.bf16 = bf;
                    memset(got, 0xff, sizeof(float) * (size_t)n * HE);
                    attention_chunked(&c, n, split[si].head, split[si].chunk, H, G, E, W, x, got);
                    for (int32_t t = 0; t < n; t++)
                        if (memcmp(got + (int64_t)t * HE, want + (int64_t)t * HE, sizeof(float) * (size_t)HE))
                            fail_msg("long attention H %d G %d E %d W %d bf16 %d wide %g, path %s, first chunk %d then "
                                     "%d, %d thread(s): token %d differs", H, G, E, W, bf, (double)cfg[ci].wide,
                                     eng_kpath_name(ps[pi]), split[si].head, split[si].chunk, th, t);
                    cases++;
                }
        free(x); free(want); free(got);
    }
    print_message("%d long-context attention runs (1,200 keys) identical at every chunk offset\n", cases);
    eng_pool_free(p2);
}

/* The blas attention over long contexts (2,600 keys): it goes through the
 * keys in blocks of 1,024 or 2,048 positions (by its query blocks' rows),
 * the last one partial, with an online softmax. The keys grow along the
 * context (k_p scaled by 1 + p/400, or 1 + p/60: scores past exp's
 * clamp), so later blocks raise the rows' maxima and the outputs so far
 * must be rescaled. Per chunking (64 from 0, 1 at a time as in decode, 256
 * from an offset of 100) and thread count (1 and 2): the outputs are
 * memcmp-identical on every path (the softmax steps have the same bits on
 * every path, the sgemms are the same calls), and within a tolerance of
 * the ref oracle (a cross-implementation check: 1e-5 of the largest
 * |output| in fp32, 1e-4 with the steep keys, 2e-2 in bf16). */
static void blas_attention_over_long_contexts_matches_the_oracle_on_every_path(void **state) {
    (void)state;
    /* wide: the keys' growth along the context (k_p scaled by 1 + p/wide), steep enough in the last config
     * that scores fall past exp's clamp (more than 87 below their row's max); tol: the tolerance in fp32,
     * wider there because exp turns a score's rounding (scores reach about 100) into a relative error */
    static const struct { int32_t H, G, E; bool bf16; float wide; double tol; } cfg[] = {
        {4, 2, 32, false, 400, 1e-5}, {4, 1, 40, true, 400, 1e-5}, {4, 2, 32, false, 60, 1e-4}};
    static const struct { int32_t head, chunk; } split[] = {{0, 64}, {0, 1}, {100, 256}};
    const int32_t n = 2600;
    eng_kpath ps[3];
    const int np = paths(ps);
    eng_pool *p2 = eng_pool_new(2);
    openblas_set_num_threads(1);  /* as the engine before each forward pass */
    int cases = 0;
    for (size_t ci = 0; ci < sizeof cfg / sizeof cfg[0]; ci++) {
        const int32_t H = cfg[ci].H, G = cfg[ci].G, E = cfg[ci].E;
        const int32_t HE = H * E, GE = G * E, LD = HE + 2 * GE;
        const bool bf = cfg[ci].bf16;
        g_rng = 1700 + ci;
        float *x = rvec((int64_t)n * LD, 2.0f);
        for (int32_t p = 0; p < n; p++)
            for (int32_t e = 0; e < GE; e++) x[(int64_t)p * LD + HE + e] *= 1.0f + (float)p / cfg[ci].wide;
        if (bf)
            for (int64_t i = 0; i < (int64_t)n * LD; i++) x[i] = eng_bf16_round(x[i]);
        float *want = malloc(sizeof(float) * (size_t)n * HE), *got = malloc(sizeof(float) * (size_t)n * HE);
        float *first = malloc(sizeof(float) * (size_t)n * HE);
        for (int32_t p = 0; p < n; p++)
            oracle_attention(1, p, 0, 0, H, G, E, x + (int64_t)p * LD, LD, x + HE, x + HE + GE, LD,
                             want + (int64_t)p * HE, HE, bf);
        double omax = 0;
        for (int64_t i = 0; i < (int64_t)n * HE; i++) omax = fmax(omax, fabs((double)want[i]));
        const double tol = (bf ? 2e-2 : cfg[ci].tol) * omax;
        for (size_t si = 0; si < sizeof split / sizeof split[0]; si++)
            for (int32_t th = 1; th <= 2; th++)
                for (int pi = 0; pi < np; pi++) {
                    eng_kctx c = ctx_of(ps[pi], th, p2);
                    c.kernel = ENG_KERNEL_BLAS;
                    c.bf16 = bf;
                    const int32_t Tmax = split[si].chunk > split[si].head ? split[si].chunk : split[si].head;
                    const int64_t cap = eng_k_attention_ws(&c, Tmax, n, H, G, E);
                    float *ws = malloc(sizeof(float) * (size_t)cap);
                    float *wq = malloc(sizeof(float) * (size_t)HE * Tmax), *wo = malloc(sizeof(float) * (size_t)HE * Tmax);
                    memset(got, 0xff, sizeof(float) * (size_t)n * HE);
                    for (int32_t p0 = 0; p0 < n;) {
                        const int32_t want_T = p0 == 0 && split[si].head > 0 ? split[si].head : split[si].chunk;
                        const int32_t T = n - p0 < want_T ? n - p0 : want_T;
                        eng_k_attention(&c, T, p0, H, G, E, x + (int64_t)p0 * LD, LD, x + HE, x + HE + GE, LD,
                                        got + (int64_t)p0 * HE, HE, wq, wo, ws, cap);
                        p0 += T;
                    }
                    double md = 0;
                    for (int64_t i = 0; i < (int64_t)n * HE; i++) md = fmax(md, fabs((double)got[i] - want[i]));
                    if (!(md <= tol))
                        fail_msg("blas attention H %d G %d E %d bf16 %d, path %s, first chunk %d then %d, %d thread(s): "
                                 "max |diff| %.3g from the oracle, over %.3g", H, G, E, bf, eng_kpath_name(ps[pi]),
                                 split[si].head, split[si].chunk, th, md, tol);
                    if (pi == 0) memcpy(first, got, sizeof(float) * (size_t)n * HE);
                    else if (memcmp(first, got, sizeof(float) * (size_t)n * HE))
                        fail_msg("blas attention H %d G %d E %d bf16 %d, chunk %d, %d thread(s): path %s differs from %s",
                                 H, G, E, bf, split[si].chunk, th, eng_kpath_name(ps[pi]), eng_kpath_name(ps[0]));
                    free(ws); free(wq); free(wo);
                    cases++;
                }
        free(x); free(want); free(got); free(first);
    }
    print_message("%d blas attention runs (2,600 keys) within the tolerance, the same bits on every path\n", cases);
    eng_pool_free(p2);
}

// ----------------------------------------------------------------------------
// Through the public API: every chunk length, row offset and thread count

#define N_ARCH 4
#define NT 320
static const char *const g_arch[N_ARCH] = {"llama", "swa", "hybrid", "rwkv7"};
static char g_dir[64], g_path[N_ARCH][128];
static int32_t g_toks[NT];

static int setup(void **state) {
    (void)state;
    snprintf(g_dir, sizeof g_dir, "/tmp/kvr_kernels_XXXXXX");
    if (!mkdtemp(g_dir)) return -1;
    for (int a = 0; a < N_ARCH; a++) {
        snprintf(g_path[a], sizeof g_path[a], "%s/%s.gguf", g_dir, g_arch[a]);
        eng_synth_params p = eng_synth_preset_arch(g_arch[a], "tiny");
        p.seed = 11 + a;
        char err[256];
        if (eng_synth_write(&p, g_path[a], err, sizeof err) != ENG_OK) {
            fprintf(stderr, "synth %s: %s\n", g_arch[a], err);
            return -1;
        }
    }
    return 0;
}

static int teardown(void **state) {
    (void)state;
    for (int a = 0; a < N_ARCH; a++) unlink(g_path[a]);
    rmdir(g_dir);
    return 0;
}

static eng_model *load(int a, eng_kernel k, int32_t threads) {
    eng_numerics num = {.kernel = k, .precision = ENG_PRECISION_FP32, .n_threads = threads};
    eng_model *m = NULL;
    char err[256] = "";
    if (eng_model_load(g_path[a], &num, &m, err, sizeof err) != ENG_OK) fail_msg("load %s: %s", g_path[a], err);
    return m;
}

/* Prefills toks [0, n): first `head` tokens as one chunk (none when 0), the
 * rest in chunks of M counted from there (align none): token p sits at row
 * (p - head) % M of its chunk. All logits into lg [n, V]. */
static eng_seq *prefill_m(const eng_model *m, int32_t n, int32_t head, int32_t M, float *lg) {
    const int32_t V = eng_model_get_info(m)->n_vocab;
    eng_seq *s = eng_seq_new(m, n);
    assert_non_null(s);
    eng_prefill_params pp = eng_prefill_params_default();
    pp.align = ENG_ALIGN_NONE;
    pp.all_logits = true;
    if (head > 0) {
        pp.ubatch = head;
        assert_int_equal(eng_prefill(s, g_toks, head, &pp, lg), ENG_OK);
    }
    pp.ubatch = M;
    assert_int_equal(eng_prefill(s, g_toks + head, n - head, &pp, lg + (int64_t)head * V), ENG_OK);
    return s;
}

static void ref_logits_kv_and_state_are_identical_for_every_m_offset_and_thread_count(void **state) {
    (void)state;
    g_rng = 99;
    for (int i = 0; i < NT; i++) g_toks[i] = (int32_t)((g_rng = g_rng * 6364136223846793005ull + 1) >> 33);
    for (int a = 0; a < N_ARCH; a++) {
        eng_model *m1 = load(a, ENG_KERNEL_REF, 1), *m2 = load(a, ENG_KERNEL_REF, 2);
        const int32_t V = eng_model_get_info(m1)->n_vocab, n = NT;
        for (int i = 0; i < NT; i++) g_toks[i] = (int32_t)((uint32_t)g_toks[i] % (uint32_t)V);
        float *lref = malloc(sizeof(float) * (size_t)n * V), *lg = malloc(sizeof(float) * (size_t)n * V);
        /* the reference: the grid of C = 64, one thread */
        eng_seq *ref = eng_seq_new(m1, n);
        eng_prefill_params pp = eng_prefill_params_default();
        pp.all_logits = true;
        assert_int_equal(eng_prefill(ref, g_toks, n, &pp, lref), ENG_OK);
        for (int32_t M = 1; M <= 256; M++) {
            const int32_t head = (M * 7) % 61;  /* shifts every token's row in its chunk */
            eng_seq *s = prefill_m(M % 2 ? m1 : m2, n, head, M, lg);
            for (int32_t t = 0; t < n; t++)
                if (memcmp(lg + (int64_t)t * V, lref + (int64_t)t * V, sizeof(float) * (size_t)V))
                    fail_msg("%s: M %d, first chunk %d, %d thread(s): logits of token %d differ from C = 64",
                             g_arch[a], M, head, M % 2 ? 1 : 2, t);
            char what[96];
            snprintf(what, sizeof what, "%s: M %d, first chunk %d", g_arch[a], M, head);
            sc_same_state(s, ref, what);
            eng_seq_free(s);
        }
        print_message("%s: 256 chunk lengths x row offsets x 1/2 threads: logits, KV and state identical\n",
                      g_arch[a]);
        /* ref vs blas: a cross-implementation check, within tolerance */
        eng_model *mb = load(a, ENG_KERNEL_BLAS, 2);
        eng_seq *sb = eng_seq_new(mb, n);
        assert_int_equal(eng_prefill(sb, g_toks, n, &pp, lg), ENG_OK);
        double md = 0, mx = 0;
        for (int64_t i = 0; i < (int64_t)n * V; i++) {
            md = fmax(md, fabs((double)lg[i] - lref[i]));
            mx = fmax(mx, fabs((double)lref[i]));
        }
        print_message("%s: ref vs blas max |diff| %.3g (max |logit| %.3g)\n", g_arch[a], md, mx);
        assert_true(md <= TOL_FP32 * mx);
        eng_seq_free(sb);
        eng_model_free(mb);
        eng_seq_free(ref);
        free(lref); free(lg);
        eng_model_free(m1);
        eng_model_free(m2);
    }
}

/* The model uses the fastest path; forcing the scalar path gives the same bits. */
static void model_logits_are_the_same_on_every_path(void **state) {
    (void)state;
    eng_kpath ps[3];
    const int np = paths(ps);
    for (int a = 0; a < N_ARCH; a++) {
        eng_model *m = load(a, ENG_KERNEL_REF, 2);
        const int32_t V = eng_model_get_info(m)->n_vocab, n = 200;
        for (int i = 0; i < n; i++) g_toks[i] = (int32_t)((uint32_t)(i * 7919 + 13) % (uint32_t)V);
        float *want = malloc(sizeof(float) * (size_t)n * V), *got = malloc(sizeof(float) * (size_t)n * V);
        eng_prefill_params pp = eng_prefill_params_default();
        pp.all_logits = true;
        eng_seq *first = NULL;
        for (int pi = np - 1; pi >= 0; pi--) {
            m->kctx.path = ps[pi];
            eng_seq *s = eng_seq_new(m, n);
            assert_int_equal(eng_prefill(s, g_toks, n, &pp, pi == np - 1 ? want : got), ENG_OK);
            if (!first) {
                first = s;
                continue;
            }
            if (memcmp(got, want, sizeof(float) * (size_t)n * V))
                fail_msg("%s: path %s gives other logits than %s", g_arch[a], eng_kpath_name(ps[pi]),
                         eng_kpath_name(ps[np - 1]));
            sc_same_state(s, first, eng_kpath_name(ps[pi]));
            eng_seq_free(s);
        }
        eng_seq_free(first);
        free(want); free(got);
        eng_model_free(m);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(ref_products_equal_the_fma_chain_on_every_path_layout_and_thread_count),
        cmocka_unit_test(ref_product_rows_do_not_depend_on_m_the_row_offset_or_threads),
        cmocka_unit_test(ref_products_read_packed_rows_with_the_same_chains),
        cmocka_unit_test(blas_products_are_sgemv_for_one_row_and_sgemm_for_more),
        cmocka_unit_test(blas_weights_are_whole_rows_with_more_than_one_thread),
        cmocka_unit_test(every_float_has_the_same_exp_on_every_path),
        cmocka_unit_test(silu_mul_is_the_same_on_every_path),
        cmocka_unit_test(softmax_paths_give_the_bits_of_the_shared_softmax),
        cmocka_unit_test(ref_attention_equals_its_chains_on_every_path_and_chunking),
        cmocka_unit_test(ref_attention_over_long_contexts_is_identical_at_shifted_chunk_offsets),
        cmocka_unit_test(blas_attention_over_long_contexts_matches_the_oracle_on_every_path),
        cmocka_unit_test(ref_logits_kv_and_state_are_identical_for_every_m_offset_and_thread_count),
        cmocka_unit_test(model_logits_are_the_same_on_every_path),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
