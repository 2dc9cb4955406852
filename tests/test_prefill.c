/*
 * tests/test_prefill.c: the bit-exactness invariant as property tests.
 *
 * For n tokens, a split k (0 < k < n) and a chunk C: a cold prefill of n
 * tokens and "prefill k, truncate to floor(k/C)*C, prefill the rest" must
 * give memcmp-identical last logits and memcmp-identical state (tokens, K
 * and V of every layer at every position), for both kernels and both
 * precisions; with all_logits, the rows both runs computed are identical.
 * Decode is a chunk of one. With align NONE the invariant is broken on
 * purpose: the test measures and reports how often blas differs, and checks
 * that the checkers (hx_compare_logits, eng_seq_compare) catch planted
 * faults at the right place.
 *
 * Model: the synthetic tiny preset (D 64, L 2, H 4, G 2, F 176, V 259), at
 * one thread (and a smaller grid at two threads, which runs the thread pool
 * and OpenMP paths).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "compare.h"
#include "attn.h"
#include "internal.h"
#include "model.h"
#include "status.h"
#include "synth.h"

#define N_MAX 140

static char g_dir[64];
static char g_tiny[128];
static int32_t g_toks[N_MAX];

static int setup_models(void **state) {
    (void)state;
    snprintf(g_dir, sizeof g_dir, "/tmp/kvr_prefill_XXXXXX");
    if (!mkdtemp(g_dir)) return -1;
    snprintf(g_tiny, sizeof g_tiny, "%s/tiny.gguf", g_dir);
    eng_synth_params p = eng_synth_preset("tiny");
    p.seed = 3;
    char err[256];
    if (eng_synth_write(&p, g_tiny, err, sizeof err) != ENG_OK) return -1;
    uint64_t x = 11;
    for (int i = 0; i < N_MAX; i++) {
        x = x * 6364136223846793005ull + 1442695040888963407ull;
        g_toks[i] = (int32_t)((x >> 33) % 259);
    }
    return 0;
}

static int teardown_models(void **state) {
    (void)state;
    unlink(g_tiny);
    rmdir(g_dir);
    return 0;
}

static eng_model *load_threads(eng_kernel k, eng_precision p, int32_t threads) {
    eng_numerics num = {.kernel = k, .precision = p, .n_threads = threads};
    eng_model *m = NULL;
    char err[256] = "";
    if (eng_model_load(g_tiny, &num, &m, err, sizeof err) != ENG_OK) fail_msg("load: %s", err);
    return m;
}

static eng_model *load(eng_kernel k, eng_precision p) { return load_threads(k, p, 1); }

static void assert_seq_equal(const eng_seq *a, const eng_seq *b, const char *what) {
    eng_seq_diff d;
    assert_int_equal(eng_seq_compare(a, b, &d), ENG_OK);
    if (!d.equal)
        fail_msg("%s: state differs: part %d, layer %d, pos %d, index %lld", what, (int)d.part, d.layer, d.pos,
                 (long long)d.index);
}

static void assert_logits_equal(const float *a, const float *b, int64_t n, const char *what) {
    hx_cmp c;
    hx_compare_logits(a, b, n, &c);
    if (!c.equal)
        fail_msg("%s: logits differ first at %lld: %a vs %a (%llu ulp)", what, (long long)c.first_diff,
                 (double)c.a_first, (double)c.b_first, (unsigned long long)c.ulp_first);
}

// ----------------------------------------------------------------------------
// The property: cold == resumed from the grid

typedef struct split_stats {
    int cases;
    int off_grid;
} split_stats;

/* One (n, k, C) case on model m, with scratch sequences and logit buffers. */
static void check_split(eng_model *m, int32_t n, int32_t k, int32_t C, split_stats *st) {
    const int32_t V = eng_model_get_info(m)->n_vocab;
    const int32_t j = k / C * C;  /* the reuse boundary, floored to the grid */
    eng_prefill_params pp = eng_prefill_params_default();
    pp.chunk = C;
    eng_seq *cold = eng_seq_new(m, N_MAX), *re = eng_seq_new(m, N_MAX);
    float *lc = malloc(sizeof(float) * V), *lr = malloc(sizeof(float) * V);
    assert_int_equal(eng_prefill(cold, g_toks, n, &pp, lc), ENG_OK);
    assert_int_equal(eng_prefill(re, g_toks, k, &pp, lr), ENG_OK);
    assert_true(eng_seq_can_truncate(re, j));
    assert_int_equal(eng_seq_truncate(re, j), ENG_OK);
    assert_int_equal(eng_prefill(re, g_toks + j, n - j, &pp, lr), ENG_OK);
    char what[128];
    snprintf(what, sizeof what, "%s/%s n=%d k=%d C=%d", eng_kernel_name(eng_model_get_numerics(m)->kernel),
             eng_precision_name(eng_model_get_numerics(m)->precision), n, k, C);
    assert_logits_equal(lc, lr, V, what);
    assert_seq_equal(cold, re, what);
    /* The serialised state is byte-identical too. */
    size_t sz = eng_seq_serialized_size(cold);
    assert_int_equal(sz, eng_seq_serialized_size(re));
    char *ba = malloc(sz), *bb = malloc(sz);
    assert_int_equal(eng_seq_serialize(cold, ba, sz, NULL), ENG_OK);
    assert_int_equal(eng_seq_serialize(re, bb, sz, NULL), ENG_OK);
    assert_memory_equal(ba, bb, sz);
    st->cases++;
    st->off_grid += k % C != 0;
    free(ba); free(bb);
    free(lc); free(lr);
    eng_seq_free(cold); eng_seq_free(re);
}

/* Every (n, k) of a grid of prompt lengths and splits (on and off the C grid),
 * for each C in chunks; at one thread, or at two for a smaller grid. */
static void property(eng_kernel kern, eng_precision prec, int32_t threads) {
    eng_model *m = load_threads(kern, prec, threads);
    const int32_t chunks_all[] = {1, 3, 16, 64}, chunks_mt[] = {3, 16};
    const int32_t ns_all[] = {2, 5, 17, 64, 65, 100, 133}, ns_mt[] = {17, 65, 100};
    const int32_t *chunks = threads > 1 ? chunks_mt : chunks_all, *ns = threads > 1 ? ns_mt : ns_all;
    const size_t n_chunks = threads > 1 ? 2 : 4, n_ns = threads > 1 ? 3 : 7;
    split_stats st = {0, 0};
    for (size_t c = 0; c < n_chunks; c++) {
        const int32_t C = chunks[c];
        for (size_t a = 0; a < n_ns; a++) {
            const int32_t n = ns[a];
            if (C == 1 && n > 65) continue;  /* one forward per token: keep the suite fast */
            /* k on and off the grid: around each multiple of C, the ends, the middle */
            int32_t ks[16], nk = 0;
            const int32_t cand[] = {1, C - 1, C, C + 1, 2 * C, 2 * C + 1, n / 2, n - 1, n - C, n - C + 1};
            for (size_t i = 0; i < sizeof cand / sizeof cand[0]; i++) {
                const int32_t k = cand[i];
                if (k <= 0 || k >= n) continue;
                bool dup = false;
                for (int q = 0; q < nk; q++) dup |= ks[q] == k;
                if (!dup) ks[nk++] = k;
            }
            for (int q = 0; q < nk; q++) check_split(m, n, ks[q], C, &st);
        }
    }
    print_message("%s/%s, %d thread(s): %d splits bit-identical (%d off the grid)\n", eng_kernel_name(kern),
                  eng_precision_name(prec), threads, st.cases, st.off_grid);
    assert_true(threads > 1 ? st.cases > 30 : st.cases > 100 && st.off_grid > 50);
    eng_model_free(m);
}

static void cold_and_grid_resumed_prefill_are_bit_identical_blas_fp32(void **state) {
    (void)state;
    property(ENG_KERNEL_BLAS, ENG_PRECISION_FP32, 1);
}

static void cold_and_grid_resumed_prefill_are_bit_identical_blas_bf16(void **state) {
    (void)state;
    property(ENG_KERNEL_BLAS, ENG_PRECISION_BF16, 1);
}

static void cold_and_grid_resumed_prefill_are_bit_identical_ref_fp32(void **state) {
    (void)state;
    property(ENG_KERNEL_REF, ENG_PRECISION_FP32, 1);
}

static void cold_and_grid_resumed_prefill_are_bit_identical_ref_bf16(void **state) {
    (void)state;
    property(ENG_KERNEL_REF, ENG_PRECISION_BF16, 1);
}

static void cold_and_grid_resumed_prefill_are_bit_identical_at_two_threads(void **state) {
    (void)state;
    for (int kern = 0; kern < 2; kern++)
        for (int prec = 0; prec < 2; prec++) property((eng_kernel)kern, (eng_precision)prec, 2);
}

static void all_logits_rows_computed_by_both_runs_are_identical(void **state) {
    (void)state;
    for (int kern = 0; kern < 2; kern++)
        for (int prec = 0; prec < 2; prec++) {
            eng_model *m = load((eng_kernel)kern, (eng_precision)prec);
            const int32_t V = eng_model_get_info(m)->n_vocab, n = 100, C = 16;
            eng_prefill_params pp = eng_prefill_params_default();
            pp.chunk = C;
            pp.all_logits = true;
            for (int32_t k = 1; k < n; k += 9) {
                const int32_t j = k / C * C;
                eng_seq *cold = eng_seq_new(m, n), *re = eng_seq_new(m, n);
                float *lc = malloc(sizeof(float) * V * n), *lr = malloc(sizeof(float) * V * n);
                assert_int_equal(eng_prefill(cold, g_toks, n, &pp, lc), ENG_OK);
                assert_int_equal(eng_prefill(re, g_toks, k, &pp, lr), ENG_OK);
                /* rows [0, j) of the first pass were computed in the same chunks as cold */
                assert_memory_equal(lc, lr, sizeof(float) * V * j);
                assert_int_equal(eng_seq_truncate(re, j), ENG_OK);
                assert_int_equal(eng_prefill(re, g_toks + j, n - j, &pp, lr), ENG_OK);
                assert_logits_equal(lc + (int64_t)j * V, lr, (int64_t)(n - j) * V, "all_logits overlap");
                free(lc); free(lr);
                eng_seq_free(cold); eng_seq_free(re);
            }
            eng_model_free(m);
        }
}

static void decode_after_prefill_equals_prefill_of_one_more_token(void **state) {
    (void)state;
    for (int kern = 0; kern < 2; kern++)
        for (int prec = 0; prec < 2; prec++) {
            eng_model *m = load((eng_kernel)kern, (eng_precision)prec);
            const int32_t V = eng_model_get_info(m)->n_vocab;
            eng_prefill_params pp = eng_prefill_params_default();
            pp.chunk = 16;
            eng_seq *a = eng_seq_new(m, 64), *b = eng_seq_new(m, 64);
            float *la = malloc(sizeof(float) * V), *lb = malloc(sizeof(float) * V);
            assert_int_equal(eng_prefill(a, g_toks, 37, &pp, la), ENG_OK);
            assert_int_equal(eng_prefill(b, g_toks, 37, &pp, lb), ENG_OK);
            for (int step = 0; step < 5; step++) {
                const int32_t t = eng_argmax(la, V);
                assert_int_equal(eng_decode(a, t, la), ENG_OK);
                /* a prefill of one token is a chunk of one at any C and alignment */
                eng_prefill_params one = pp;
                one.chunk = 1 + step * 7;
                one.align = step % 2 ? ENG_ALIGN_NONE : ENG_ALIGN_CHUNK;
                assert_int_equal(eng_prefill(b, &t, 1, &one, lb), ENG_OK);
                assert_logits_equal(la, lb, V, "decode vs prefill of one");
                assert_seq_equal(a, b, "decode vs prefill of one");
            }
            free(la); free(lb);
            eng_seq_free(a); eng_seq_free(b);
            eng_model_free(m);
        }
}

// ----------------------------------------------------------------------------
// align NONE: the invariant broken on purpose, and the checkers

static void align_none_breaks_bit_exactness_for_blas_and_ref_stays_exact(void **state) {
    (void)state;
    for (int kern = 0; kern < 2; kern++) {
        eng_model *m = load((eng_kernel)kern, ENG_PRECISION_FP32);
        const int32_t V = eng_model_get_info(m)->n_vocab, n = 120;
        eng_prefill_params pp = eng_prefill_params_default();
        pp.align = ENG_ALIGN_NONE;
        pp.ubatch = 32;
        int differ = 0, splits = 0;
        eng_seq *cold = eng_seq_new(m, n), *re = eng_seq_new(m, n);
        float *lc = malloc(sizeof(float) * V), *lr = malloc(sizeof(float) * V);
        assert_int_equal(eng_prefill(cold, g_toks, n, &pp, lc), ENG_OK);
        for (int32_t k = 1; k < n; k += 7) {
            /* llama.cpp-style reuse: keep all k tokens, prefill the rest from there */
            eng_seq_reset(re);
            assert_int_equal(eng_prefill(re, g_toks, k, &pp, lr), ENG_OK);
            assert_int_equal(eng_prefill(re, g_toks + k, n - k, &pp, lr), ENG_OK);
            eng_seq_diff d;
            assert_int_equal(eng_seq_compare(cold, re, &d), ENG_OK);
            hx_cmp c;
            hx_compare_logits(lc, lr, V, &c);
            differ += !c.equal || !d.equal;
            splits++;
        }
        print_message("align none, %s: %d of %d splits differ from cold (ubatch 32, n %d)\n",
                      eng_kernel_name((eng_kernel)kern), differ, splits, n);
        if (kern == ENG_KERNEL_REF) assert_int_equal(differ, 0);  /* batch-invariant by construction */
        free(lc); free(lr);
        eng_seq_free(cold); eng_seq_free(re);
        eng_model_free(m);
    }
}

static void compare_logits_reports_a_planted_one_ulp_flip_at_its_index(void **state) {
    (void)state;
    eng_model *m = load(ENG_KERNEL_BLAS, ENG_PRECISION_FP32);
    const int32_t V = eng_model_get_info(m)->n_vocab;
    eng_seq *s = eng_seq_new(m, 64);
    float *a = malloc(sizeof(float) * V), *b = malloc(sizeof(float) * V);
    assert_int_equal(eng_prefill(s, g_toks, 40, NULL, a), ENG_OK);
    memcpy(b, a, sizeof(float) * V);
    hx_cmp c;
    hx_compare_logits(a, b, V, &c);
    assert_true(c.equal);
    const int64_t at = 123;
    b[at] = hx_next_ulp(b[at]);
    hx_compare_logits(a, b, V, &c);
    assert_false(c.equal);
    assert_int_equal(c.first_diff, at);
    assert_int_equal(c.ulp_first, 1);
    assert_int_equal(c.max_ulp, 1);
    free(a); free(b);
    eng_seq_free(s);
    eng_model_free(m);
}

static void seq_compare_reports_a_dropped_kv_row_at_its_layer_and_position(void **state) {
    (void)state;
    eng_model *m = load(ENG_KERNEL_BLAS, ENG_PRECISION_FP32);
    eng_seq *s = eng_seq_new(m, 64), *c = eng_seq_new(m, 64);
    assert_int_equal(eng_prefill(s, g_toks, 50, NULL, NULL), ENG_OK);
    assert_int_equal(eng_seq_copy(c, s), ENG_OK);
    eng_seq_diff d;
    assert_int_equal(eng_seq_compare(s, c, &d), ENG_OK);
    assert_true(d.equal);
    const int32_t layer = 1, pos = 33;
    eng_attn_mem *mem = (eng_attn_mem *)c->mem[layer].state;
    memset(mem->k + (int64_t)pos * mem->n_embd_kv, 0, sizeof(float) * (size_t)mem->n_embd_kv);  /* drop the row */
    assert_int_equal(eng_seq_compare(s, c, &d), ENG_OK);
    assert_false(d.equal);
    assert_int_equal(d.part, ENG_SEQ_PART_K);
    assert_int_equal(d.layer, layer);
    assert_int_equal(d.pos, pos);
    assert_int_equal(d.index, 0);
    /* a V row one ulp off, in layer 0, is found first (layer order) */
    eng_attn_mem *m0 = (eng_attn_mem *)c->mem[0].state;
    m0->v[(int64_t)7 * m0->n_embd_kv + 5] = hx_next_ulp(m0->v[(int64_t)7 * m0->n_embd_kv + 5]);
    assert_int_equal(eng_seq_compare(s, c, &d), ENG_OK);
    assert_int_equal(d.part, ENG_SEQ_PART_V);
    assert_int_equal(d.layer, 0);
    assert_int_equal(d.pos, 7);
    assert_int_equal(d.index, 5);
    eng_seq_free(s); eng_seq_free(c);
    eng_model_free(m);
}

// ----------------------------------------------------------------------------
// Chunking and argument checks

typedef struct chunk_log {
    int32_t ends[64];
    int     n;
} chunk_log;

static void log_chunk(void *ud, eng_seq *s, int32_t n_tokens) {
    chunk_log *l = ud;
    assert_int_equal(eng_seq_n_tokens(s), n_tokens);
    if (l->n < 64) l->ends[l->n++] = n_tokens;
}

static void chunks_end_on_absolute_multiples_of_c_or_every_ubatch(void **state) {
    (void)state;
    eng_model *m = load(ENG_KERNEL_REF, ENG_PRECISION_FP32);
    eng_seq *s = eng_seq_new(m, 128);
    chunk_log log = {.n = 0};
    eng_prefill_params pp = eng_prefill_params_default();
    pp.chunk = 16;
    pp.on_chunk = log_chunk;
    pp.ud = &log;
    assert_int_equal(eng_prefill(s, g_toks, 5, &pp, NULL), ENG_OK);
    assert_int_equal(eng_prefill(s, g_toks + 5, 40, &pp, NULL), ENG_OK);  /* from 5 to 45 */
    const int32_t want[] = {5, 16, 32, 45};
    assert_int_equal(log.n, 4);
    assert_memory_equal(log.ends, want, sizeof want);
    log.n = 0;
    pp.align = ENG_ALIGN_NONE;
    pp.ubatch = 16;
    assert_int_equal(eng_prefill(s, g_toks, 40, &pp, NULL), ENG_OK);  /* from 45 to 85 */
    const int32_t want2[] = {61, 77, 85};
    assert_int_equal(log.n, 3);
    assert_memory_equal(log.ends, want2, sizeof want2);
    eng_seq_free(s);
    eng_model_free(m);
}

static void prefill_and_decode_refuse_bad_arguments_without_changing_state(void **state) {
    (void)state;
    eng_model *m = load(ENG_KERNEL_BLAS, ENG_PRECISION_FP32);
    eng_seq *s = eng_seq_new(m, 10);
    eng_prefill_params pp = eng_prefill_params_default();
    assert_int_equal(eng_prefill(s, g_toks, 0, &pp, NULL), ENG_ERR_ARG);
    assert_int_equal(eng_prefill(s, g_toks, 11, &pp, NULL), ENG_ERR_RANGE);
    int32_t bad[2] = {3, 259};
    assert_int_equal(eng_prefill(s, bad, 2, &pp, NULL), ENG_ERR_ARG);
    pp.chunk = 0;
    assert_int_equal(eng_prefill(s, g_toks, 2, &pp, NULL), ENG_ERR_ARG);
    pp = eng_prefill_params_default();
    pp.align = ENG_ALIGN_NONE;
    pp.ubatch = 0;
    assert_int_equal(eng_prefill(s, g_toks, 2, &pp, NULL), ENG_ERR_ARG);
    assert_int_equal(eng_seq_n_tokens(s), 0);
    assert_int_equal(eng_prefill(s, g_toks, 10, NULL, NULL), ENG_OK);
    assert_int_equal(eng_decode(s, 1, NULL), ENG_ERR_RANGE);
    assert_int_equal(eng_decode(s, -1, NULL), ENG_ERR_ARG);
    assert_int_equal(eng_seq_n_tokens(s), 10);
    eng_seq_free(s);
    eng_model_free(m);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(cold_and_grid_resumed_prefill_are_bit_identical_blas_fp32),
        cmocka_unit_test(cold_and_grid_resumed_prefill_are_bit_identical_blas_bf16),
        cmocka_unit_test(cold_and_grid_resumed_prefill_are_bit_identical_ref_fp32),
        cmocka_unit_test(cold_and_grid_resumed_prefill_are_bit_identical_ref_bf16),
        cmocka_unit_test(cold_and_grid_resumed_prefill_are_bit_identical_at_two_threads),
        cmocka_unit_test(all_logits_rows_computed_by_both_runs_are_identical),
        cmocka_unit_test(decode_after_prefill_equals_prefill_of_one_more_token),
        cmocka_unit_test(align_none_breaks_bit_exactness_for_blas_and_ref_stays_exact),
        cmocka_unit_test(compare_logits_reports_a_planted_one_ulp_flip_at_its_index),
        cmocka_unit_test(seq_compare_reports_a_dropped_kv_row_at_its_layer_and_position),
        cmocka_unit_test(chunks_end_on_absolute_multiples_of_c_or_every_ubatch),
        cmocka_unit_test(prefill_and_decode_refuse_bad_arguments_without_changing_state),
    };
    return cmocka_run_group_tests(tests, setup_models, teardown_models);
}
