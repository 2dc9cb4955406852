/*
 * tests/test_swa.c: sliding-window attention (engine/swa.h) on its own:
 * the banded kernel against a naive double oracle, batch invariance of the
 * ref kernel, the ring's truncation rule at its edges, truncation and
 * window save/load followed by more chunks (memcmp against never having
 * left), copies between rings of different sizes, and the key count of
 * the cost model.
 *
 * Inputs are seeded: row p of a [n, H*E + 2*G*E] array is the "qkv" of
 * position p (splitmix64 + Box-Muller).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels.h"
#include "status.h"
#include "swa.h"

static uint64_t g_rng;

static double urand(void) {
    uint64_t z = (g_rng += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    z ^= z >> 31;
    return ((double)(z >> 11) + 0.5) / 9007199254740992.0;
}

static float gauss(void) { return (float)(sqrt(-2.0 * log(urand())) * cos(6.283185307179586 * urand())); }

enum { H = 4, G = 2, E = 16, HE = H * E, GE = G * E, LD = HE + 2 * GE };

/* qkv rows of positions [0, n). */
static float *qkv_rows(uint64_t seed, int32_t n, bool bf16) {
    g_rng = seed;
    float *x = malloc(sizeof(float) * (size_t)n * LD);
    for (int64_t i = 0; i < (int64_t)n * LD; i++) {
        x[i] = gauss();
        if (bf16) x[i] = eng_bf16_round(x[i]);
    }
    return x;
}

static eng_kctx kctx(eng_kernel k, bool bf16, int32_t threads) {
    eng_kctx c = {.kernel = k, .bf16 = bf16, .n_threads = threads, .pool = NULL};
    return c;
}

/* Runs positions [from, to) through a ring in chunks of `chunk` counted
 * from `from`, writing O rows [to - from, HE] at out + (p - from) * HE. */
static void attend_range(const eng_kctx *c, eng_swa_mem *m, int32_t W, const float *x, int32_t from, int32_t to,
                         int32_t chunk, float *out, eng_swa_ws *ws) {
    for (int32_t p = from; p < to;) {
        int32_t T = to - p < chunk ? to - p : chunk;
        assert_int_equal(eng_swa_attend(c, m, W, T, p, H, G, E, x + (int64_t)p * LD, LD, out + (int64_t)(p - from) * HE,
                                        HE, ws),
                         ENG_OK);
        p += T;
    }
}

/* The oracle: query p, head h attends keys j in [max(0, p-W+1), p] of KV head h/(H/G). */
static void oracle(const float *x, int32_t n, int32_t W, double *out) {
    const double scale = 1.0 / sqrt((double)E);
    double *s = malloc(sizeof(double) * (size_t)n);
    for (int32_t p = 0; p < n; p++)
        for (int32_t h = 0; h < H; h++) {
            const int32_t g = h / (H / G), j0 = p - W + 1 > 0 ? p - W + 1 : 0;
            const float *q = x + (int64_t)p * LD + h * E;
            double mx = -INFINITY, sum = 0;
            for (int32_t j = j0; j <= p; j++) {
                const float *k = x + (int64_t)j * LD + HE + g * E;
                double d = 0;
                for (int e = 0; e < E; e++) d += (double)q[e] * k[e];
                s[j] = d * scale;
                if (s[j] > mx) mx = s[j];
            }
            for (int32_t j = j0; j <= p; j++) sum += (s[j] = exp(s[j] - mx));
            for (int e = 0; e < E; e++) {
                double o = 0;
                for (int32_t j = j0; j <= p; j++) o += s[j] / sum * x[(int64_t)j * LD + HE + GE + g * E + e];
                out[((int64_t)p * H + h) * E + e] = o;
            }
        }
    free(s);
}

static double rel_err(const float *a, const double *b, int64_t n) {
    double m = 0, e = 0;
    for (int64_t i = 0; i < n; i++) {
        if (fabs(b[i]) > m) m = fabs(b[i]);
        if (fabs(a[i] - b[i]) > e) e = fabs(a[i] - b[i]);
    }
    return e / (1.0 + m);
}

// ----------------------------------------------------------------------------

static void banded_attention_matches_the_double_oracle(void **state) {
    (void)state;
    const int32_t n = 150;
    float *x = qkv_rows(1, n, false);
    double *ref = malloc(sizeof(double) * n * HE);
    float *out = malloc(sizeof(float) * n * HE);
    const int32_t windows[] = {1, 7, 16, 40, 64, 100, 1000};
    const int32_t chunks[] = {64, 16, 1};
    for (size_t w = 0; w < sizeof windows / sizeof windows[0]; w++) {
        oracle(x, n, windows[w], ref);
        for (int k = 0; k < 2; k++)
            for (size_t ch = 0; ch < sizeof chunks / sizeof chunks[0]; ch++) {
                eng_kctx c = kctx(k ? ENG_KERNEL_REF : ENG_KERNEL_BLAS, false, 1);
                eng_swa_mem m;
                assert_int_equal(eng_swa_mem_alloc(&m, eng_swa_ring_cells(n, windows[w], 64), GE), ENG_OK);
                eng_swa_ws ws = {0};
                attend_range(&c, &m, windows[w], x, 0, n, chunks[ch], out, &ws);
                const double e = rel_err(out, ref, (int64_t)n * HE);
                if (e > 1e-5) fail_msg("W %d, kernel %s, chunk %d: relative error %g", windows[w], k ? "ref" : "blas",
                                       chunks[ch], e);
                eng_swa_ws_free(&ws);
                eng_swa_mem_free(&m);
            }
    }
    free(x); free(ref); free(out);
}

/* ref: a row's output depends only on its position and window, whatever
 * the chunking, the ring's size or the thread count (both precisions). */
static void ref_banded_attention_is_batch_invariant(void **state) {
    (void)state;
    const int32_t n = 200, W = 50;
    for (int bf = 0; bf < 2; bf++) {
        float *x = qkv_rows(2, n, bf);
        float *a = malloc(sizeof(float) * n * HE), *b = malloc(sizeof(float) * n * HE);
        const int32_t chunks[] = {64, 1, 17, 200};
        const int32_t slack[] = {64, 0, 17, 300};
        for (size_t s = 0; s < 4; s++) {
            eng_kctx c = kctx(ENG_KERNEL_REF, bf, s == 2 ? 3 : 1);
            eng_swa_mem m;
            assert_int_equal(eng_swa_mem_alloc(&m, eng_swa_ring_cells(n, W, slack[s]), GE), ENG_OK);
            eng_swa_ws ws = {0};
            attend_range(&c, &m, W, x, 0, n, chunks[s], s ? b : a, &ws);
            if (s) assert_memory_equal(a, b, sizeof(float) * n * HE);
            eng_swa_ws_free(&ws);
            eng_swa_mem_free(&m);
        }
        free(x); free(a); free(b);
    }
}

/* A window as long as the sequence is full causal attention. */
static void window_covering_the_sequence_is_full_attention(void **state) {
    (void)state;
    const int32_t n = 96, T = 32;
    float *x = qkv_rows(3, n, false);
    for (int k = 0; k < 2; k++) {
        eng_kctx c = kctx(k ? ENG_KERNEL_REF : ENG_KERNEL_BLAS, false, 1);
        float *a = malloc(sizeof(float) * n * HE), *b = malloc(sizeof(float) * n * HE);
        eng_swa_mem m;
        assert_int_equal(eng_swa_mem_alloc(&m, n, GE), ENG_OK);
        eng_swa_ws ws = {0};
        attend_range(&c, &m, n, x, 0, n, T, a, &ws);
        /* full attention over the cache rows [0, pos0 + T) */
        float *K = malloc(sizeof(float) * n * GE), *V = malloc(sizeof(float) * n * GE);
        for (int32_t p = 0; p < n; p++) {
            memcpy(K + (int64_t)p * GE, x + (int64_t)p * LD + HE, sizeof(float) * GE);
            memcpy(V + (int64_t)p * GE, x + (int64_t)p * LD + HE + GE, sizeof(float) * GE);
        }
        float *wq = malloc(sizeof(float) * HE * T), *wo = malloc(sizeof(float) * HE * T);
        const int64_t cap = eng_k_attention_ws(&c, T, n, H, G, E);  /* enough for every P <= n */
        float *sc = malloc(sizeof(float) * (size_t)cap);
        for (int32_t p0 = 0; p0 < n; p0 += T)
            eng_k_attention(&c, T, p0, H, G, E, x + (int64_t)p0 * LD, LD, K, V, GE, b + (int64_t)p0 * HE, HE, wq, wo,
                            sc, cap);
        double e = 0;
        for (int64_t i = 0; i < (int64_t)n * HE; i++) e = fmax(e, fabs((double)a[i] - b[i]));
        print_message("kernel %s: W >= n vs eng_k_attention: max |diff| %.3g\n", k ? "ref" : "blas", e);
        assert_true(e < 1e-5);
        free(K); free(V); free(wq); free(wo); free(sc); free(a); free(b);
        eng_swa_ws_free(&ws);
        eng_swa_mem_free(&m);
    }
    free(x);
}

/* After N positions in a ring of R = W + S cells, truncation to n is
 * possible iff [n - W, n) is still there: n - min(n, W) >= N - R. Checked
 * for every n around the edge k = N - n = R - W = S. */
static void can_truncate_follows_the_ring_edge(void **state) {
    (void)state;
    const int32_t W = 24, S = 20, R = W + S, N = 130;
    float *x = qkv_rows(4, N, false);
    float *out = malloc(sizeof(float) * N * HE);
    eng_kctx c = kctx(ENG_KERNEL_REF, false, 1);
    eng_swa_mem m;
    assert_int_equal(eng_swa_mem_alloc(&m, R, GE), ENG_OK);
    eng_swa_ws ws = {0};
    attend_range(&c, &m, W, x, 0, N, 16, out, &ws);
    assert_int_equal(eng_swa_valid_lo(&m, N), N - R);
    for (int32_t n = 0; n <= N; n++) {
        const bool want = n - (n < W ? n : W) >= N - R;
        assert_int_equal(eng_swa_can_truncate(&m, W, N, n), want);
    }
    assert_true(eng_swa_can_truncate(&m, W, N, N - S));
    assert_false(eng_swa_can_truncate(&m, W, N, N - S - 1));
    assert_true(eng_swa_can_truncate(&m, W, N, N));
    /* a short sequence that never wrapped: every n */
    eng_swa_mem_clear(&m);
    attend_range(&c, &m, W, x, 0, R, 16, out, &ws);
    for (int32_t n = 0; n <= R; n++) assert_true(eng_swa_can_truncate(&m, W, R, n));
    eng_swa_ws_free(&ws);
    eng_swa_mem_free(&m);
    free(x); free(out);
}

/* Truncating as far back as the ring allows and recomputing the same
 * chunks gives memcmp-identical outputs (both kernels), and positions
 * dropped by the truncation stay invalid after later writes. */
static void truncation_then_the_same_chunks_is_bit_identical(void **state) {
    (void)state;
    const int32_t W = 24, S = 20, R = W + S, C = 16, N = 128;
    float *x = qkv_rows(5, N, false);
    for (int k = 0; k < 2; k++) {
        eng_kctx c = kctx(k ? ENG_KERNEL_REF : ENG_KERNEL_BLAS, false, 1);
        float *cold = malloc(sizeof(float) * N * HE), *warm = malloc(sizeof(float) * N * HE);
        eng_swa_mem m;
        assert_int_equal(eng_swa_mem_alloc(&m, R, GE), ENG_OK);
        eng_swa_ws ws = {0};
        attend_range(&c, &m, W, x, 0, N, C, cold, &ws);
        const int32_t n = (N - S + C - 1) / C * C;  /* the farthest grid point back: 112 */
        assert_true(eng_swa_can_truncate(&m, W, N, n));
        eng_swa_truncate(&m, N, n);
        assert_int_equal(m.lo, N - R);
        attend_range(&c, &m, W, x, n, N, C, warm, &ws);
        assert_memory_equal(warm, cold + (int64_t)n * HE, sizeof(float) * (size_t)(N - n) * HE);
        /* the truncated sequence at n could not go below N - R even though
         * the ring now holds [N - R, N) again: lo remembers */
        assert_int_equal(eng_swa_valid_lo(&m, N), N - R);
        free(cold); free(warm);
        eng_swa_ws_free(&ws);
        eng_swa_mem_free(&m);
    }
    free(x);
}

/* A window saved at a grid position and loaded into a fresh ring (of
 * another size) continues bit-identically; only truncation to n itself is
 * possible from the loaded window. */
static void saved_window_continues_bit_identically(void **state) {
    (void)state;
    const int32_t W = 40, C = 32, N = 200, n = 96;
    float *x = qkv_rows(6, N, true);
    for (int k = 0; k < 2; k++)
        for (int bf = 0; bf < 2; bf++) {
            eng_kctx c = kctx(k ? ENG_KERNEL_REF : ENG_KERNEL_BLAS, bf, 1);
            float *cold = malloc(sizeof(float) * N * HE), *warm = malloc(sizeof(float) * N * HE);
            eng_swa_mem a, b;
            assert_int_equal(eng_swa_mem_alloc(&a, W + C, GE), ENG_OK);
            assert_int_equal(eng_swa_mem_alloc(&b, W + 3, GE), ENG_OK);
            eng_swa_ws ws = {0};
            attend_range(&c, &a, W, x, 0, n, C, cold, &ws);
            const size_t nb = eng_swa_window_bytes(&a, W, n);
            assert_int_equal(nb, 2u * sizeof(float) * W * GE);
            void *img = malloc(nb);
            eng_swa_save_window(&a, W, n, img);
            eng_swa_load_window(&b, W, n, img);
            assert_int_equal(b.lo, n - W);
            assert_true(eng_swa_can_truncate(&b, W, n, n));
            assert_false(eng_swa_can_truncate(&b, W, n, n - 1));
            attend_range(&c, &a, W, x, n, N, C, cold + (int64_t)n * HE, &ws);
            attend_range(&c, &b, W, x, n, N, C, warm + (int64_t)n * HE, &ws);
            assert_memory_equal(warm + (int64_t)n * HE, cold + (int64_t)n * HE, sizeof(float) * (size_t)(N - n) * HE);
            free(img); free(cold); free(warm);
            eng_swa_ws_free(&ws);
            eng_swa_mem_free(&a);
            eng_swa_mem_free(&b);
        }
    free(x);
}

/* A window shorter than W at the start of a sequence is saved whole. */
static void window_of_a_short_sequence_holds_every_position(void **state) {
    (void)state;
    eng_swa_mem m;
    assert_int_equal(eng_swa_mem_alloc(&m, 64, GE), ENG_OK);
    assert_int_equal(eng_swa_window_cells(40, 10), 10);
    assert_int_equal(eng_swa_window_bytes(&m, 40, 10), 2u * sizeof(float) * 10 * GE);
    assert_int_equal(eng_swa_window_bytes(&m, 40, 0), 0);
    eng_swa_mem_free(&m);
}

/* Copies between rings of different sizes keep exactly the positions the
 * destination can hold, and continuing from the copy is bit-identical. */
static void copy_into_a_smaller_ring_keeps_its_last_cells(void **state) {
    (void)state;
    const int32_t W = 16, N = 100, C = 16;
    float *x = qkv_rows(7, N + 40, false);
    eng_kctx c = kctx(ENG_KERNEL_BLAS, false, 1);
    eng_swa_mem big, small;
    assert_int_equal(eng_swa_mem_alloc(&big, 90, GE), ENG_OK);
    assert_int_equal(eng_swa_mem_alloc(&small, 30, GE), ENG_OK);
    float *a = malloc(sizeof(float) * (N + 40) * HE), *b = malloc(sizeof(float) * (N + 40) * HE);
    eng_swa_ws ws = {0};
    attend_range(&c, &big, W, x, 0, N, C, a, &ws);
    eng_swa_copy(&small, &big, N);
    assert_int_equal(eng_swa_valid_lo(&small, N), N - 30);
    for (int32_t p = N - 30; p < N; p++)
        assert_memory_equal(eng_swa_k(&small, p), eng_swa_k(&big, p), sizeof(float) * GE);
    attend_range(&c, &big, W, x, N, N + 40, C, a, &ws);
    attend_range(&c, &small, W, x, N, N + 40, C, b, &ws);
    assert_memory_equal(a, b, sizeof(float) * 40 * HE);
    free(a); free(b); free(x);
    eng_swa_ws_free(&ws);
    eng_swa_mem_free(&big);
    eng_swa_mem_free(&small);
}

static void key_count_of_the_cost_model_is_exact(void **state) {
    (void)state;
    const int32_t Ws[] = {1, 5, 64, 1000};
    for (size_t w = 0; w < 4; w++)
        for (int64_t p0 = 0; p0 < 130; p0 += 13)
            for (int64_t p1 = p0; p1 < 140; p1 += 7) {
                double want = 0;
                for (int64_t p = p0; p < p1; p++) want += p + 1 < Ws[w] ? p + 1 : Ws[w];
                assert_true(eng_swa_keys(Ws[w], p0, p1) == want);
            }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(banded_attention_matches_the_double_oracle),
        cmocka_unit_test(ref_banded_attention_is_batch_invariant),
        cmocka_unit_test(window_covering_the_sequence_is_full_attention),
        cmocka_unit_test(can_truncate_follows_the_ring_edge),
        cmocka_unit_test(truncation_then_the_same_chunks_is_bit_identical),
        cmocka_unit_test(saved_window_continues_bit_identically),
        cmocka_unit_test(window_of_a_short_sequence_holds_every_position),
        cmocka_unit_test(copy_into_a_smaller_ring_keeps_its_last_cells),
        cmocka_unit_test(key_count_of_the_cost_model_is_exact),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
