/*
 * tests/test_hybrid.c: memory kinds beyond full attention, end to end
 * through the public API: sliding-window attention (cohere2, and
 * kvreplay-swa, the older synthetic architecture, still read), Mamba-2
 * (mamba2) and the hybrid of both with full attention (granitehybrid),
 * tiny synthetic models.
 *
 *   - the bit-exactness invariant with checkpoints: prefill k tokens (and a
 *     few more that the next request does not share), restore the newest
 *     grid checkpoint at or below k, prefill the rest: logits, decode steps
 *     and state memcmp-identical to cold, for every arch, both kernels, both
 *     precisions, over many split points;
 *   - a checkpoint off the grid followed by prefill in shifted chunks:
 *     measured (blas), identical with ref (batch-invariant);
 *   - eng_seq_can_truncate at the ring's edge (SWA) and for recurrent
 *     memory (only n_tokens and 0); truncation where allowed equals cold;
 *   - serialisation round trips; blobs of another arch, model or numerics
 *     refused; checkpoint sizes equal the documented bytes;
 *   - eng_seq_compare catches a planted flip in recurrent state, conv state
 *     and a window cell; the cost model counts the new layers;
 *   - the CLI: `model info --json` reports the memory kinds and sizes,
 *     `bench --checkpoints --json` its figures (skipped without $BUILD/kvreplay).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "gguf.h"
#include "internal.h"
#include "mamba2.h"
#include "swa.h"
#include "model.h"
#include "status.h"
#include "runcli.h"
#include "seqcheck.h"
#include "synth.h"

enum { A_SWA, A_SWA_WIDE, A_REC, A_HYB, A_HYB2, A_SWA_OLD, N_MODELS };
static const char *const g_arch[N_MODELS] = {"swa", "swa", "recurrent", "hybrid", "hybrid", "kvreplay-swa"};
static char g_dir[64], g_path[N_MODELS][128];
enum { NT = 256 };
static int32_t g_toks[NT];

static int setup(void **state) {
    (void)state;
    snprintf(g_dir, sizeof g_dir, "/tmp/kvr_hybrid_XXXXXX");
    if (!mkdtemp(g_dir)) return -1;
    for (int i = 0; i < NT; i++) g_toks[i] = (i * 131 + 7) % 259;
    for (int a = 0; a < N_MODELS; a++) {
        eng_synth_params p = eng_synth_preset_arch(g_arch[a], "tiny");
        p.seed = a == A_HYB2 ? 2 : 1;
        if (a == A_SWA_WIDE) p.n_swa = 100;  /* a window spanning several chunks */
        snprintf(g_path[a], sizeof g_path[a], "%s/m%d.gguf", g_dir, a);
        char err[256];
        if (eng_synth_write(&p, g_path[a], err, sizeof err) != ENG_OK) {
            fprintf(stderr, "%s\n", err);
            return -1;
        }
    }
    return 0;
}

static int teardown(void **state) {
    (void)state;
    for (int a = 0; a < N_MODELS; a++) unlink(g_path[a]);
    rmdir(g_dir);
    return 0;
}

static eng_model *load_t(int a, eng_kernel k, eng_precision p, int32_t threads) {
    eng_numerics num = {.kernel = k, .precision = p, .n_threads = threads};
    eng_model *m = NULL;
    char err[256] = "";
    if (eng_model_load(g_path[a], &num, &m, err, sizeof err) != ENG_OK) fail_msg("load %s: %s", g_path[a], err);
    return m;
}

static eng_model *load(int a, eng_kernel k, eng_precision p) { return load_t(a, k, p, 1); }

#define blob_of sc_blob
#define assert_same_state sc_same_state

// ----------------------------------------------------------------------------
// The invariant with checkpoints

static void invariant_t(int a, eng_kernel kern, eng_precision prec, int32_t threads) {
    eng_model *m = load_t(a, kern, prec, threads);
    const int32_t chunks[] = {16, 64}, ns[] = {70, 150, 200};
    const int cases = sc_invariant(m, g_toks, NT + 16, chunks, 2, ns, 3);
    print_message("%s (%s, window %d) %s/%s, %d threads: %d splits bit-identical to cold\n", g_arch[a],
                  eng_model_get_info(m)->arch, eng_model_get_info(m)->n_swa, eng_kernel_name(kern),
                  eng_precision_name(prec), threads, cases);
    assert_true(cases >= 50);
    eng_model_free(m);
}

static void invariant(int a, eng_kernel kern, eng_precision prec) { invariant_t(a, kern, prec, 1); }

static void grid_checkpoint_restore_is_bit_identical_to_cold_swa(void **state) {
    (void)state;
    for (int k = 0; k < 2; k++)
        for (int p = 0; p < 2; p++) {
            invariant(A_SWA, (eng_kernel)k, (eng_precision)p);
            invariant(A_SWA_WIDE, (eng_kernel)k, (eng_precision)p);
            invariant(A_SWA_OLD, (eng_kernel)k, (eng_precision)p);
        }
}

static void grid_checkpoint_restore_is_bit_identical_to_cold_recurrent(void **state) {
    (void)state;
    for (int k = 0; k < 2; k++)
        for (int p = 0; p < 2; p++) invariant(A_REC, (eng_kernel)k, (eng_precision)p);
}

static void grid_checkpoint_restore_is_bit_identical_to_cold_hybrid(void **state) {
    (void)state;
    for (int k = 0; k < 2; k++)
        for (int p = 0; p < 2; p++) invariant(A_HYB, (eng_kernel)k, (eng_precision)p);
}

/* The thread pool splits heads and rows; the invariant holds at 3 threads. */
static void grid_checkpoint_restore_is_bit_identical_with_threads(void **state) {
    (void)state;
    for (int k = 0; k < 2; k++) {
        invariant_t(A_HYB, (eng_kernel)k, ENG_PRECISION_FP32, 3);
        invariant_t(A_SWA_WIDE, (eng_kernel)k, ENG_PRECISION_FP32, 3);
    }
}

/* ref: the thread count changes no bit of the new layers either. */
static void ref_results_do_not_depend_on_the_thread_count(void **state) {
    (void)state;
    const int archs[] = {A_SWA_WIDE, A_REC, A_HYB};
    for (int ai = 0; ai < 3; ai++) {
        eng_model *m1 = load_t(archs[ai], ENG_KERNEL_REF, ENG_PRECISION_FP32, 1);
        eng_model *m3 = load_t(archs[ai], ENG_KERNEL_REF, ENG_PRECISION_FP32, 3);
        const int32_t V = eng_model_get_info(m1)->n_vocab;
        eng_seq *a = eng_seq_new(m1, NT), *b = eng_seq_new(m3, NT);
        float *la = malloc(sizeof(float) * V), *lb = malloc(sizeof(float) * V);
        assert_int_equal(eng_prefill(a, g_toks, 200, NULL, la), ENG_OK);
        assert_int_equal(eng_prefill(b, g_toks, 200, NULL, lb), ENG_OK);
        assert_memory_equal(la, lb, sizeof(float) * V);
        size_t na, nb;
        char *ba = blob_of(a, &na), *bb = blob_of(b, &nb);
        assert_int_equal(na, nb);
        assert_memory_equal(ba, bb, na);  /* the fingerprint leaves the thread count out */
        free(ba); free(bb); free(la); free(lb);
        eng_seq_free(a); eng_seq_free(b);
        eng_model_free(m1); eng_model_free(m3);
    }
}

/* A checkpoint at the end of a prompt off the grid, then the rest in
 * chunks cut at absolute multiples of C from there: the first chunk is
 * shorter than cold's. blas: measured (SSD blocks and sgemm shapes move);
 * ref: bit-identical (every kernel is batch-invariant). */
static void off_grid_checkpoint_then_prefill_is_measured(void **state) {
    (void)state;
    const int archs[] = {A_SWA, A_REC, A_HYB};
    for (int ai = 0; ai < 3; ai++)
        for (int kern = 0; kern < 2; kern++) {
            eng_model *m = load(archs[ai], (eng_kernel)kern, ENG_PRECISION_FP32);
            const int32_t ks[] = {37, 70, 100, 150};
            const int differ = sc_off_grid_differences(m, g_toks, 200, ks, 4), total = 4;
            if (kern == ENG_KERNEL_REF) assert_int_equal(differ, 0);
            print_message("%s %s: off-grid checkpoint + shifted chunks differ from cold on %d of %d splits\n",
                          g_arch[archs[ai]], eng_kernel_name((eng_kernel)kern), differ, total);
            eng_model_free(m);
        }
}

// ----------------------------------------------------------------------------
// Truncation rules

static void swa_can_truncate_exactly_while_the_window_cells_exist(void **state) {
    (void)state;
    eng_model *m = load(A_SWA, ENG_KERNEL_BLAS, ENG_PRECISION_FP32);
    const int32_t W = eng_model_get_info(m)->n_swa;
    const int32_t slacks[] = {ENG_SWA_SLACK_DEFAULT, 10, 0};
    for (int si = 0; si < 3; si++) {
        const int32_t S = slacks[si], R = W + S;
        eng_seq *s = si == 0 ? eng_seq_new(m, NT) : eng_seq_new_ext(m, NT, S);
        assert_int_equal(eng_seq_swa_cells(s), R);
        eng_prefill_params pp = eng_prefill_params_default();
        pp.chunk = 16;
        const int32_t N = 200;
        assert_int_equal(eng_prefill(s, g_toks, N, &pp, NULL), ENG_OK);
        /* the edge: k = N - n around R - W */
        for (int32_t k = 0; k <= N; k++) {
            const int32_t n = N - k;
            const bool want = n == 0 || n - (n < W ? n : W) >= N - R;
            if (eng_seq_can_truncate(s, n) != want) fail_msg("slack %d: can_truncate(%d) at N=%d", S, n, N);
        }
        assert_true(eng_seq_can_truncate(s, N - S));
        if (S > 0) assert_false(eng_seq_can_truncate(s, N - S - 1));
        assert_int_equal(eng_seq_truncate(s, N - S - 1), ENG_ERR_UNSUPPORTED);
        /* decode past the edge moves it */
        assert_int_equal(eng_decode(s, 5, NULL), ENG_OK);
        assert_false(eng_seq_can_truncate(s, N - S));
        assert_true(eng_seq_can_truncate(s, N + 1 - S));
        eng_seq_free(s);
    }
    eng_model_free(m);
}

/* A short sequence whose ring never wrapped truncates anywhere; truncation
 * to a grid point then the rest equals cold. */
static void swa_truncation_to_a_grid_point_equals_cold(void **state) {
    (void)state;
    for (int kern = 0; kern < 2; kern++) {
        eng_model *m = load(A_SWA, (eng_kernel)kern, ENG_PRECISION_FP32);
        const int32_t V = eng_model_get_info(m)->n_vocab, C = 16, n = 180;
        eng_prefill_params pp = eng_prefill_params_default();
        pp.chunk = C;
        eng_seq *cold = eng_seq_new(m, NT), *s = eng_seq_new(m, NT);
        float *lc = malloc(sizeof(float) * V), *l = malloc(sizeof(float) * V);
        assert_int_equal(eng_prefill(cold, g_toks, n, &pp, lc), ENG_OK);
        for (int32_t k = C; k < n; k += 23) {
            eng_seq_reset(s);
            assert_int_equal(eng_prefill(s, g_toks, k + 7, &pp, NULL), ENG_OK);
            const int32_t g = k / C * C;
            if (!eng_seq_can_truncate(s, g)) continue;
            assert_int_equal(eng_seq_truncate(s, g), ENG_OK);
            assert_int_equal(eng_prefill(s, g_toks + g, n - g, &pp, l), ENG_OK);
            assert_memory_equal(l, lc, sizeof(float) * V);
            assert_same_state(s, cold, "swa truncation");
        }
        free(lc); free(l);
        eng_seq_free(cold); eng_seq_free(s);
        eng_model_free(m);
    }
}

static void recurrent_memory_truncates_only_to_its_length_or_zero(void **state) {
    (void)state;
    const int archs[] = {A_REC, A_HYB};
    for (int ai = 0; ai < 2; ai++) {
        eng_model *m = load(archs[ai], ENG_KERNEL_BLAS, ENG_PRECISION_FP32);
        eng_seq *s = eng_seq_new(m, NT);
        assert_true(eng_seq_can_truncate(s, 0));
        assert_int_equal(eng_prefill(s, g_toks, 100, NULL, NULL), ENG_OK);
        for (int32_t n = 0; n <= 100; n++) assert_int_equal(eng_seq_can_truncate(s, n), n == 0 || n == 100);
        assert_false(eng_seq_can_truncate(s, 101));
        assert_int_equal(eng_seq_truncate(s, 64), ENG_ERR_UNSUPPORTED);
        assert_int_equal(eng_seq_n_tokens(s), 100);
        assert_int_equal(eng_seq_truncate(s, 100), ENG_OK);
        assert_int_equal(eng_seq_truncate(s, 0), ENG_OK);
        assert_int_equal(eng_seq_n_tokens(s), 0);
        /* after the reset, the state is the initial one: same logits as a fresh sequence */
        eng_seq *f = eng_seq_new(m, NT);
        const int32_t V = eng_model_get_info(m)->n_vocab;
        float *a = malloc(sizeof(float) * V), *b = malloc(sizeof(float) * V);
        assert_int_equal(eng_prefill(s, g_toks, 40, NULL, a), ENG_OK);
        assert_int_equal(eng_prefill(f, g_toks, 40, NULL, b), ENG_OK);
        assert_memory_equal(a, b, sizeof(float) * V);
        free(a); free(b);
        eng_seq_free(f); eng_seq_free(s);
        eng_model_free(m);
    }
}

// ----------------------------------------------------------------------------
// Checkpoint sizes, serialisation, copies

/* Documented bytes: per SWA layer 2*min(n, W)*G*E floats, per recurrent
 * layer NH*N*P + (K-1)*(I + 2*NG*N) floats; full attention 0. */
static size_t expected_ckpt_bytes(const eng_model *m, int32_t n) {
    const eng_model_info *in = eng_model_get_info(m);
    size_t b = 0;
    for (int32_t il = 0; il < in->n_layer; il++) {
        switch (eng_model_layer_kind(m, il)) {
        case ENG_LAYER_ATTN: break;
        case ENG_LAYER_ATTN_SWA:
            b += 2u * 4u * (size_t)(n < in->n_swa ? n : in->n_swa) * (size_t)(in->n_head_kv * in->head_dim);
            break;
        case ENG_LAYER_RECURRENT:
            b += 4u * ((size_t)in->ssm_n_head * in->ssm_d_state * in->ssm_head_dim +
                       (size_t)(in->ssm_d_conv - 1) * (in->ssm_d_inner + 2 * in->ssm_n_group * in->ssm_d_state));
            break;
        }
    }
    return b;
}

static void checkpoint_size_equals_the_documented_bytes(void **state) {
    (void)state;
    for (int a = 0; a < N_MODELS; a++) {
        eng_model *m = load(a, ENG_KERNEL_BLAS, ENG_PRECISION_FP32);
        const eng_model_info *in = eng_model_get_info(m);
        eng_seq *s = eng_seq_new(m, NT);
        const int32_t ns[] = {0, 10, 64, 128, 200};
        int32_t done = 0;
        for (int i = 0; i < 5; i++) {
            if (ns[i] > done) assert_int_equal(eng_prefill(s, g_toks + done, ns[i] - done, NULL, NULL), ENG_OK);
            done = ns[i];
            eng_ckpt *c = eng_seq_checkpoint(s);
            assert_int_equal(eng_ckpt_n_tokens(c), ns[i]);
            assert_int_equal(eng_ckpt_size(c), expected_ckpt_bytes(m, ns[i]));
            eng_ckpt_free(c);
        }
        /* the info fields say the same */
        assert_int_equal(in->rec_state_bytes + in->swa_bytes_per_token * (in->n_swa < 200 ? in->n_swa : 200),
                         (int64_t)expected_ckpt_bytes(m, 200));
        eng_seq_free(s);
        eng_model_free(m);
    }
}

static void info_reports_layer_kinds_and_memory_sizes(void **state) {
    (void)state;
    eng_model *m = load(A_HYB, ENG_KERNEL_BLAS, ENG_PRECISION_FP32);
    const eng_model_info *in = eng_model_get_info(m);
    assert_string_equal(in->arch, "granitehybrid");
    assert_int_equal(in->n_layer, 4);
    assert_int_equal(in->n_layer_attn, 2);
    assert_int_equal(in->n_layer_rec, 2);
    assert_int_equal(in->n_layer_swa, 0);
    for (int32_t il = 0; il < 4; il++)
        assert_int_equal(eng_model_layer_kind(m, il), il % 2 == 1 ? ENG_LAYER_ATTN : ENG_LAYER_RECURRENT);
    assert_int_equal(in->ssm_d_inner, 128);
    assert_int_equal(in->ssm_d_state, 16);
    assert_int_equal(in->ssm_head_dim, 32);
    assert_int_equal(in->ssm_n_head, 4);
    assert_int_equal(in->kv_bytes_per_token, 2 * 2 * 4 * (in->n_head_kv * in->head_dim));
    assert_int_equal(in->rec_state_bytes, 2 * 4 * (4 * 16 * 32 + 3 * (128 + 32)));
    eng_model_free(m);
    for (int a = A_SWA; a <= A_SWA_OLD; a += A_SWA_OLD - A_SWA) {
        m = load(a, ENG_KERNEL_BLAS, ENG_PRECISION_FP32);
        in = eng_model_get_info(m);
        assert_string_equal(in->arch, a == A_SWA ? "cohere2" : "kvreplay-swa");
        assert_int_equal(in->n_swa, 40);
        assert_int_equal(eng_model_layer_kind(m, 0), ENG_LAYER_ATTN_SWA);
        assert_int_equal(eng_model_layer_kind(m, 1), ENG_LAYER_ATTN);
        assert_string_equal(eng_model_layer_kind_name(m, 0), "swa");
        assert_int_equal(in->swa_bytes_per_token, 2 * 4 * (in->n_head_kv * in->head_dim));
        if (a == A_SWA) {  /* layer norm, no ffn_norm, the head tied to token_embd */
            assert_true(in->norm_eps == 1e-5f);
            const int64_t D = in->n_embd, F = in->n_ff, GE = in->n_head_kv * in->head_dim;
            assert_int_equal(in->n_params, in->n_vocab * D + D + 2 * (D + D * (D + 2 * GE) + D * D + 3 * D * F));
        }
        eng_model_free(m);
    }
    m = load(A_REC, ENG_KERNEL_BLAS, ENG_PRECISION_FP32);
    in = eng_model_get_info(m);
    assert_string_equal(in->arch, "mamba2");
    assert_int_equal(in->n_layer_rec, 2);
    assert_int_equal(in->n_ff, 0);
    assert_int_equal(in->kv_bytes_per_token, 0);
    eng_model_free(m);
}

static void serialization_round_trips_for_every_arch(void **state) {
    (void)state;
    for (int a = 0; a < N_MODELS; a++)
        for (int kern = 0; kern < 2; kern++) {
            eng_model *m = load(a, (eng_kernel)kern, ENG_PRECISION_FP32);
            const int32_t V = eng_model_get_info(m)->n_vocab;
            eng_seq *s = eng_seq_new(m, NT), *t = eng_seq_new(m, NT);
            assert_int_equal(eng_prefill(s, g_toks, 150, NULL, NULL), ENG_OK);
            assert_int_equal(eng_decode(s, 4, NULL), ENG_OK);  /* off the grid is fine */
            size_t n;
            char *b = blob_of(s, &n);
            assert_int_equal(eng_seq_deserialize(t, b, n), ENG_OK);
            assert_same_state(s, t, "round trip");
            float *la = malloc(sizeof(float) * V), *lb = malloc(sizeof(float) * V);
            assert_int_equal(eng_prefill(s, g_toks + 150, 30, NULL, la), ENG_OK);
            assert_int_equal(eng_prefill(t, g_toks + 150, 30, NULL, lb), ENG_OK);
            assert_memory_equal(la, lb, sizeof(float) * V);
            free(la); free(lb); free(b);
            eng_seq_free(s); eng_seq_free(t);
            eng_model_free(m);
        }
}

static void blobs_of_another_arch_model_or_numerics_are_refused(void **state) {
    (void)state;
    eng_model *hy = load(A_HYB, ENG_KERNEL_BLAS, ENG_PRECISION_FP32);
    eng_model *hy2 = load(A_HYB2, ENG_KERNEL_BLAS, ENG_PRECISION_FP32);
    eng_model *hyr = load(A_HYB, ENG_KERNEL_REF, ENG_PRECISION_FP32);
    eng_model *rec = load(A_REC, ENG_KERNEL_BLAS, ENG_PRECISION_FP32);
    eng_model *swa = load(A_SWA, ENG_KERNEL_BLAS, ENG_PRECISION_FP32);
    eng_seq *s = eng_seq_new(hy, NT);
    assert_int_equal(eng_prefill(s, g_toks, 80, NULL, NULL), ENG_OK);
    size_t n;
    char *b = blob_of(s, &n);
    eng_model *others[] = {hy2, hyr, rec, swa};
    for (int i = 0; i < 4; i++) {
        eng_seq *t = eng_seq_new(others[i], NT);
        assert_int_equal(eng_seq_deserialize(t, b, n), ENG_ERR_MISMATCH);
        assert_int_equal(eng_seq_n_tokens(t), 0);
        eng_seq_free(t);
    }
    /* a flipped byte in the recurrent section is malformed (checksum) */
    b[n / 2] ^= 0x10;
    eng_seq *t = eng_seq_new(hy, NT);
    assert_int_equal(eng_seq_deserialize(t, b, n), ENG_ERR_FORMAT);
    /* checkpoints: another model is refused, a longer one out of range */
    eng_ckpt *c = eng_seq_checkpoint(s);
    eng_seq *u = eng_seq_new(hy2, NT);
    assert_int_equal(eng_prefill(u, g_toks, 90, NULL, NULL), ENG_OK);
    assert_int_equal(eng_seq_restore(u, c), ENG_ERR_MISMATCH);
    assert_int_equal(eng_seq_restore(t, c), ENG_ERR_RANGE);
    eng_ckpt_free(c);
    free(b);
    eng_seq_free(s); eng_seq_free(t); eng_seq_free(u);
    eng_model_free(hy); eng_model_free(hy2); eng_model_free(hyr); eng_model_free(rec); eng_model_free(swa);
}

static void copy_gives_an_identical_state_that_continues_identically(void **state) {
    (void)state;
    for (int a = 0; a < N_MODELS; a++) {
        eng_model *m = load(a, ENG_KERNEL_BLAS, ENG_PRECISION_FP32);
        const int32_t V = eng_model_get_info(m)->n_vocab;
        eng_seq *s = eng_seq_new(m, NT), *t = eng_seq_new_ext(m, NT, 5);
        assert_int_equal(eng_prefill(s, g_toks, 130, NULL, NULL), ENG_OK);
        assert_int_equal(eng_seq_copy(t, s), ENG_OK);
        assert_same_state(s, t, "copy");
        float *la = malloc(sizeof(float) * V), *lb = malloc(sizeof(float) * V);
        assert_int_equal(eng_prefill(s, g_toks + 130, 70, NULL, la), ENG_OK);
        assert_int_equal(eng_prefill(t, g_toks + 130, 70, NULL, lb), ENG_OK);
        assert_memory_equal(la, lb, sizeof(float) * V);
        free(la); free(lb);
        eng_seq_free(s); eng_seq_free(t);
        eng_model_free(m);
    }
}

// ----------------------------------------------------------------------------
// The comparator catches planted faults

static void compare_catches_a_flip_in_recurrent_conv_and_window_memory(void **state) {
    (void)state;
    /* recurrent state, then conv state (index past the ssm floats) */
    eng_model *m = load(A_HYB, ENG_KERNEL_BLAS, ENG_PRECISION_FP32);
    eng_seq *a = eng_seq_new(m, NT), *b = eng_seq_new(m, NT);
    assert_int_equal(eng_prefill(a, g_toks, 70, NULL, NULL), ENG_OK);
    assert_int_equal(eng_seq_copy(b, a), ENG_OK);
    const eng_ssm_hparams *hp = eng_mamba2_hparams(m, 2);
    float *x = &((eng_ssm_state *)b->mem[2].state)->ssm[77];
    uint32_t u;
    memcpy(&u, x, 4);
    u ^= 1u;  /* one ULP */
    memcpy(x, &u, 4);
    eng_seq_diff d;
    assert_int_equal(eng_seq_compare(a, b, &d), ENG_OK);
    assert_false(d.equal);
    assert_int_equal(d.part, ENG_SEQ_PART_STATE);
    assert_int_equal(d.layer, 2);
    assert_int_equal(d.index, 77);
    assert_int_equal(eng_seq_copy(b, a), ENG_OK);
    ((eng_ssm_state *)b->mem[0].state)->conv[5] += 1.0f;
    assert_int_equal(eng_seq_compare(a, b, &d), ENG_OK);
    assert_int_equal(d.part, ENG_SEQ_PART_STATE);
    assert_int_equal(d.layer, 0);
    assert_int_equal(d.index, eng_ssm_state_floats_ssm(hp) + 5);
    eng_seq_free(a); eng_seq_free(b);
    eng_model_free(m);
    /* a window cell: V row of position 60 */
    m = load(A_SWA, ENG_KERNEL_BLAS, ENG_PRECISION_FP32);
    a = eng_seq_new(m, NT);
    b = eng_seq_new(m, NT);
    assert_int_equal(eng_prefill(a, g_toks, 70, NULL, NULL), ENG_OK);
    assert_int_equal(eng_seq_copy(b, a), ENG_OK);
    eng_swa_mem *w = b->mem[0].state;
    w->v[(int64_t)(60 % w->n_cells) * w->n_embd_kv + 3] += 1.0f;
    assert_int_equal(eng_seq_compare(a, b, &d), ENG_OK);
    assert_int_equal(d.part, ENG_SEQ_PART_V);
    assert_int_equal(d.layer, 0);
    assert_int_equal(d.pos, 60);
    assert_int_equal(d.index, 3);
    eng_seq_free(a); eng_seq_free(b);
    eng_model_free(m);
}

// ----------------------------------------------------------------------------
// The cost model

static void prefill_flops_count_the_new_layers(void **state) {
    (void)state;
    eng_model *m = load(A_HYB, ENG_KERNEL_BLAS, ENG_PRECISION_FP32);
    const eng_model_info *in = eng_model_get_info(m);
    const double D = in->n_embd, F = in->n_ff, GE = in->n_head_kv * in->head_dim, HE = in->n_head * in->head_dim;
    const double NI = in->ssm_d_inner, N = in->ssm_d_state, NH = in->ssm_n_head, K = in->ssm_d_conv;
    const double CD = NI + 2 * in->ssm_n_group * N, DP = 2 * NI + 2 * in->ssm_n_group * N + NH;
    const double ssm = 2 * D * DP + 2 * NI * D + 2 * K * CD + 5 * NI * N;
    const double attn = 2 * D * (HE + 2 * GE) + 2 * HE * D, ffn = 6 * D * F;
    const int32_t n = 100;
    const double keys = (double)n * (n + 1) / 2;
    const double want = n * (2 * ssm + 2 * attn + 4 * ffn) + 2 * 4 * HE * keys + (n - 64) * 2 * D * in->n_vocab;
    const double got = eng_model_prefill_flops(m, 0, n);
    if (got != want) fail_msg("hybrid flops %.17g, want %.17g", got, want);
    eng_model_free(m);
    m = load(A_SWA, ENG_KERNEL_BLAS, ENG_PRECISION_FP32);
    in = eng_model_get_info(m);
    {
        const double d = in->n_embd, f = in->n_ff, ge = in->n_head_kv * in->head_dim, he = in->n_head * in->head_dim;
        const double W = in->n_swa;
        double swkeys = 0;
        for (int32_t p = 0; p < n; p++) swkeys += p + 1 < W ? p + 1 : W;
        const double w = n * 2 * (2 * d * (he + 2 * ge) + 2 * he * d + 6 * d * f) + 4 * he * (keys + swkeys) +
                         (n - 64) * 2 * d * in->n_vocab;
        const double g = eng_model_prefill_flops(m, 0, n);
        if (g != w) fail_msg("swa flops %.17g, want %.17g", g, w);
    }
    eng_model_free(m);
}

// ----------------------------------------------------------------------------
// Synthetic models of the new architectures

static int64_t kv_int(const eng_gguf *g, const char *key) {
    int64_t v = -1;
    if (eng_gguf_get_int(g, key, &v) != ENG_OK) fail_msg("%s: missing", key);
    return v;
}

static void assert_shape(const eng_gguf *g, const char *name, int64_t ne0, int64_t ne1) {
    const eng_gguf_tensor *t = eng_gguf_find_tensor(g, name);
    if (!t) fail_msg("%s: missing", name);
    if (t->ne[0] != ne0 || t->ne[1] != ne1)
        fail_msg("%s: [%lld, %lld], want [%lld, %lld]", name, (long long)t->ne[0], (long long)t->ne[1],
                 (long long)ne0, (long long)ne1);
    assert_int_equal(t->type, ENG_GGML_TYPE_F32);
}

/* llama.cpp's cohere2, mamba2 and granitehybrid keys and tensor shapes,
 * kvreplay-swa's window keys; the same params give the same bytes. */
static void synthetic_archs_carry_the_documented_keys_and_shapes(void **state) {
    (void)state;
    for (int a = A_SWA; a <= A_SWA_OLD; a++) {
        if (a == A_SWA_WIDE || a == A_HYB2) continue;
        eng_synth_params p = eng_synth_preset_arch(g_arch[a], "tiny");
        assert_true(p.ok);
        p.seed = 9;
        void *b1, *b2;
        size_t n1, n2;
        char err[256];
        assert_int_equal(eng_synth_to_buffer(&p, &b1, &n1, err, sizeof err), ENG_OK);
        assert_int_equal(eng_synth_to_buffer(&p, &b2, &n2, err, sizeof err), ENG_OK);
        assert_int_equal(n1, n2);
        assert_memory_equal(b1, b2, n1);
        eng_gguf *g;
        assert_int_equal(eng_gguf_open_buffer(b1, n1, "synth", &g, err, sizeof err), ENG_OK);
        const char *arch;
        size_t len;
        assert_int_equal(eng_gguf_get_str(g, "general.architecture", &arch, &len), ENG_OK);
        if (a == A_SWA) {
            assert_int_equal(len, strlen("cohere2"));
            assert_memory_equal(arch, "cohere2", len);
            assert_int_equal(kv_int(g, "cohere2.attention.sliding_window"), 40);
            assert_int_equal(kv_int(g, "cohere2.attention.sliding_window_pattern"), 2);
            double v = 0;
            assert_int_equal(eng_gguf_get_float(g, "cohere2.attention.layer_norm_epsilon", &v), ENG_OK);
            assert_true((float)v == 1e-5f);
            assert_int_equal(eng_gguf_get_float(g, "cohere2.logit_scale", &v), ENG_OK);
            assert_true((float)v == 0.25f);  /* 2 / sqrt(64) */
            assert_int_equal(eng_gguf_find_key(g, "cohere2.attention.layer_norm_rms_epsilon"), -1);
            assert_shape(g, "blk.0.attn_q.weight", 64, 64);
            assert_shape(g, "blk.1.ffn_gate.weight", 64, 176);
            assert_null(eng_gguf_find_tensor(g, "blk.0.ffn_norm.weight"));  /* FFN reads the attention norm */
            assert_null(eng_gguf_find_tensor(g, "output.weight"));          /* tied */
        } else if (a == A_SWA_OLD) {  /* as the swa of earlier versions wrote it, name included */
            assert_int_equal(len, strlen("kvreplay-swa"));
            const char *nm;
            size_t nl;
            assert_int_equal(eng_gguf_get_str(g, "general.name", &nm, &nl), ENG_OK);
            assert_int_equal(nl, strlen("kvreplay-synth-swa-tiny"));
            assert_memory_equal(nm, "kvreplay-synth-swa-tiny", nl);
            assert_int_equal(kv_int(g, "kvreplay-swa.attention.sliding_window"), 40);
            assert_int_equal(kv_int(g, "kvreplay-swa.attention.sliding_window_pattern"), 2);
            assert_shape(g, "blk.0.attn_q.weight", 64, 64);
            assert_non_null(eng_gguf_find_tensor(g, "blk.0.ffn_norm.weight"));
            assert_non_null(eng_gguf_find_tensor(g, "output.weight"));
        } else {
            const char *pre = a == A_REC ? "mamba2" : "granitehybrid";
            char key[96];
            assert_int_equal(len, strlen(pre));
            assert_memory_equal(arch, pre, len);
            const int64_t D = 64, I = 128, N = 16, NH = 4, K = 4, CD = I + 2 * N, DP = 2 * I + 2 * N + NH;
            snprintf(key, sizeof key, "%s.ssm.inner_size", pre);
            assert_int_equal(kv_int(g, key), I);
            snprintf(key, sizeof key, "%s.ssm.state_size", pre);
            assert_int_equal(kv_int(g, key), N);
            snprintf(key, sizeof key, "%s.ssm.time_step_rank", pre);
            assert_int_equal(kv_int(g, key), NH);
            snprintf(key, sizeof key, "%s.ssm.conv_kernel", pre);
            assert_int_equal(kv_int(g, key), K);
            snprintf(key, sizeof key, "%s.ssm.group_count", pre);
            assert_int_equal(kv_int(g, key), 1);
            const eng_gguf_tensor *t = eng_gguf_find_tensor(g, "blk.0.ssm_in.weight");
            assert_true(t && t->ne[0] == D && t->ne[1] == DP);
            assert_shape(g, "blk.0.ssm_conv1d.weight", K, CD);
            assert_shape(g, "blk.0.ssm_conv1d.bias", CD, 1);
            assert_shape(g, "blk.0.ssm_dt.bias", NH, 1);
            assert_shape(g, "blk.0.ssm_a", 1, NH);
            assert_shape(g, "blk.0.ssm_d", 1, NH);
            assert_shape(g, "blk.0.ssm_norm.weight", I, 1);
            /* A = -exp(A_log) < 0, as llama.cpp's converter stores it */
            const float *A = eng_gguf_find_tensor(g, "blk.0.ssm_a")->data;
            for (int h = 0; h < NH; h++) assert_true(A[h] <= -1.0f && A[h] >= -16.0f);
            if (a == A_REC) {
                assert_int_equal(kv_int(g, "mamba2.feed_forward_length"), 0);
                assert_null(eng_gguf_find_tensor(g, "blk.0.ffn_gate.weight"));
            } else {
                const int64_t i = eng_gguf_find_key(g, "granitehybrid.attention.head_count_kv");
                assert_true(i >= 0 && eng_gguf_arr_n(g, i) == 4);
                for (uint64_t il = 0; il < 4; il++)
                    assert_true(eng_gguf_get_arr_num(g, i, il) == (il % 2 == 1 ? 2.0 : 0.0));
                assert_non_null(eng_gguf_find_tensor(g, "blk.1.attn_q.weight"));
                assert_non_null(eng_gguf_find_tensor(g, "blk.0.ffn_gate.weight"));
                bool rope = false;
                assert_int_equal(eng_gguf_get_bool(g, "granitehybrid.rope.scaling.finetuned", &rope), ENG_OK);
                assert_true(rope);
            }
        }
        eng_gguf_close(g);
        free(b1);
        free(b2);
    }
}

/* The narrow preset of every synthetic architecture loads with the documented
 * shape: D 64, two layers, attention of 2 heads of 32 with one KV head (256
 * bytes of F32 KV per token and attention layer); the hybrid is one Mamba-2
 * layer then one attention layer, as the full-scale experiments rely on. */
static void narrow_presets_have_the_documented_shapes(void **state) {
    (void)state;
    const char *archs[] = {"llama", "swa", "kvreplay-swa", "recurrent", "hybrid", "rwkv7"};
    for (size_t a = 0; a < sizeof archs / sizeof archs[0]; a++) {
        eng_synth_params p = eng_synth_preset_arch(archs[a], "narrow");
        assert_true(p.ok);
        assert_string_equal(p.preset, "narrow");
        p.seed = 37;
        char path[160], err[256] = "";
        snprintf(path, sizeof path, "%s/narrow-%zu.gguf", g_dir, a);
        assert_int_equal(eng_synth_write(&p, path, err, sizeof err), ENG_OK);
        eng_numerics num = eng_numerics_default();
        eng_model *m = NULL;
        assert_int_equal(eng_model_load(path, &num, &m, err, sizeof err), ENG_OK);
        const eng_model_info *in = eng_model_get_info(m);
        assert_int_equal(in->n_embd, 64);
        assert_int_equal(in->n_layer, 2);
        assert_int_equal(in->n_ctx_train, 262144);
        if (!strcmp(archs[a], "llama")) assert_int_equal(in->kv_bytes_per_token, 2 * 256);
        if (!strcmp(archs[a], "hybrid")) {
            assert_int_equal(eng_model_layer_kind(m, 0), ENG_LAYER_RECURRENT);
            assert_int_equal(eng_model_layer_kind(m, 1), ENG_LAYER_ATTN);
            assert_int_equal(in->n_head, 2);
            assert_int_equal(in->n_head_kv, 1);
            assert_int_equal(in->head_dim, 32);
            assert_int_equal(in->kv_bytes_per_token, 256);
            assert_int_equal(in->rec_state_bytes, 4 * (4 * 16 * 32 + 3 * (128 + 32)));
        }
        eng_model_free(m);
        unlink(path);
    }
}

/* A granitehybrid file with rope.scaling.finetuned = false (NoPE attention,
 * as real Granite-4.0-H files have) is refused, naming the key; the same
 * file with true loads. */
static void granitehybrid_without_rope_is_refused_naming_the_key(void **state) {
    (void)state;
    eng_synth_params p = eng_synth_preset_arch("hybrid", "tiny");
    p.seed = 4;
    void *b;
    size_t n;
    char err[256] = "";
    assert_int_equal(eng_synth_to_buffer(&p, &b, &n, err, sizeof err), ENG_OK);
    const char *key = "granitehybrid.rope.scaling.finetuned";
    unsigned char *at = memmem(b, n, key, strlen(key));
    assert_non_null(at);
    at += strlen(key);
    assert_int_equal(at[0], 7);  /* u32 type: bool */
    assert_int_equal(at[4], 1);
    char path[160];
    snprintf(path, sizeof path, "%s/norope.gguf", g_dir);
    eng_numerics num = eng_numerics_default();
    for (int v = 1; v >= 0; v--) {
        at[4] = (unsigned char)v;
        FILE *f = fopen(path, "wb");
        assert_non_null(f);
        assert_int_equal(fwrite(b, 1, n, f), n);
        fclose(f);
        eng_model *m = NULL;
        int rc = eng_model_load(path, &num, &m, err, sizeof err);
        if (v) {
            assert_int_equal(rc, ENG_OK);
            eng_model_free(m);
        } else {
            assert_int_equal(rc, ENG_ERR_UNSUPPORTED);
            assert_null(m);
            assert_non_null(strstr(err, "rope.scaling.finetuned"));
        }
    }
    unlink(path);
    free(b);
}

/* cohere2's head is token_embd: llama.cpp refuses a file with an
 * output.weight (an extra tensor), and so does the engine, naming it. */
static void cohere2_with_an_output_tensor_is_refused_naming_it(void **state) {
    (void)state;
    eng_synth_params p = eng_synth_preset_arch("swa", "tiny");
    p.seed = 4;
    char err[256] = "";
    /* the synthetic file, and a copy with output.weight added (token_embd's data) */
    eng_gguf_writer *w = eng_gguf_writer_new(3, 32);
    eng_gguf *g;
    char path[160];
    snprintf(path, sizeof path, "%s/cohere2.gguf", g_dir);
    assert_int_equal(eng_synth_write(&p, path, err, sizeof err), ENG_OK);
    assert_int_equal(eng_gguf_open(path, &g, err, sizeof err), ENG_OK);
    assert_int_equal(eng_gguf_writer_copy_kv(w, g, ""), ENG_OK);
    for (int64_t i = 0; i < eng_gguf_n_tensors(g); i++) {
        const eng_gguf_tensor *t = eng_gguf_tensor_at(g, i);
        assert_int_equal(eng_gguf_writer_add_tensor(w, t->name, t->type, t->n_dims, t->ne, t->data, t->nbytes), ENG_OK);
    }
    const eng_gguf_tensor *te = eng_gguf_find_tensor(g, "token_embd.weight");
    assert_int_equal(eng_gguf_writer_add_tensor(w, "output.weight", te->type, te->n_dims, te->ne, te->data, te->nbytes),
                     ENG_OK);
    char path2[160];
    snprintf(path2, sizeof path2, "%s/cohere2-out.gguf", g_dir);
    assert_int_equal(eng_gguf_writer_write(w, path2, err, sizeof err), ENG_OK);
    eng_gguf_writer_free(w);
    eng_gguf_close(g);
    eng_numerics num = eng_numerics_default();
    eng_model *m = NULL;
    assert_int_equal(eng_model_load(path, &num, &m, err, sizeof err), ENG_OK);
    eng_model_free(m);
    m = NULL;
    assert_int_equal(eng_model_load(path2, &num, &m, err, sizeof err), ENG_ERR_UNSUPPORTED);
    assert_null(m);
    assert_non_null(strstr(err, "output.weight"));
    unlink(path);
    unlink(path2);
}

// ----------------------------------------------------------------------------
// The CLI

#define kvreplay_bin kvr_bin

static json_t *run_json(const char *cmd) {
    char *out = NULL;
    assert_int_equal(kvr_run(cmd, &out, NULL), 0);
    json_error_t je;
    json_t *o = json_loads(out ? out : "", 0, &je);
    if (!o) fail_msg("%s: not JSON: %s", cmd, je.text);
    free(out);
    return o;
}

static void model_info_reports_memory_kinds_and_sizes(void **state) {
    (void)state;
    const char *bin = kvreplay_bin();
    if (!bin) skip();
    char cmd[512];
    snprintf(cmd, sizeof cmd, "%s model info --json --prompts 2 %s", bin, g_path[A_HYB]);
    json_t *o = run_json(cmd);
    assert_string_equal(json_string_value(json_object_get(o, "arch")), "granitehybrid");
    json_t *kinds = json_object_get(o, "layer_kinds");
    assert_int_equal(json_array_size(kinds), 4);
    assert_string_equal(json_string_value(json_array_get(kinds, 0)), "recurrent");
    assert_string_equal(json_string_value(json_array_get(kinds, 1)), "attn");
    assert_int_equal(json_integer_value(json_object_get(json_object_get(o, "ssm"), "d_state")), 16);
    assert_int_equal(json_integer_value(json_object_get(o, "rec_state_bytes")), 2 * 4 * (4 * 16 * 32 + 3 * 160));
    assert_int_equal(json_integer_value(json_object_get(o, "checkpoint_bytes")), 2 * 4 * (4 * 16 * 32 + 3 * 160));
    assert_true(json_integer_value(json_object_get(o, "kv_bytes_per_token")) > 0);
    json_decref(o);
    snprintf(cmd, sizeof cmd, "%s model info --json --prompts 0 %s", bin, g_path[A_SWA]);
    o = run_json(cmd);
    assert_int_equal(json_integer_value(json_object_get(o, "n_swa")), 40);
    assert_int_equal(json_integer_value(json_object_get(o, "checkpoint_bytes")),
                     40 * json_integer_value(json_object_get(o, "swa_bytes_per_token")));
    json_decref(o);
}

static void bench_checkpoints_reports_save_and_restore_against_memcpy(void **state) {
    (void)state;
    const char *bin = kvreplay_bin();
    if (!bin) skip();
    char cmd[512];
    snprintf(cmd, sizeof cmd, "%s bench --checkpoints -m %s --lengths 64,192 --json", bin, g_path[A_HYB]);
    json_t *o = run_json(cmd);
    json_t *rows = json_object_get(o, "lengths");
    assert_int_equal(json_array_size(rows), 2);
    for (size_t i = 0; i < 2; i++) {
        json_t *r = json_array_get(rows, i);
        assert_int_equal(json_integer_value(json_object_get(r, "tokens")), i ? 192 : 64);
        assert_int_equal(json_integer_value(json_object_get(r, "ckpt_bytes")), 2 * 4 * (4 * 16 * 32 + 3 * 160));
        const char *keys[] = {"prefill_tok_s", "save_bytes_s", "restore_bytes_s", "memcpy_bytes_s", "save_ratio",
                              "restore_ratio"};
        for (size_t k = 0; k < 6; k++) assert_true(json_real_value(json_object_get(r, keys[k])) > 0);
    }
    json_decref(o);
}

/* bench --decode: tokens/s of single-token steps for both kernels (the
 * recurrent state is restored before each repetition); --compare-kernels:
 * per chunk the ref/blas ratio. */
static void bench_reports_decode_and_the_kernels_side_by_side(void **state) {
    (void)state;
    const char *bin = kvreplay_bin();
    if (!bin) skip();
    char cmd[512];
    snprintf(cmd, sizeof cmd, "%s bench -m %s --decode --compare-kernels --tokens 96 --decode-steps 8 --reps 2 --json",
             bin, g_path[A_HYB]);
    json_t *o = run_json(cmd);
    assert_int_equal(json_integer_value(json_object_get(o, "decode_steps")), 8);
    assert_true(json_real_value(json_object_get(o, "decode_tok_s")) > 0);
    json_t *rows = json_object_get(o, "runs");
    assert_int_equal(json_array_size(rows), 2);
    assert_string_equal(json_string_value(json_object_get(json_array_get(rows, 0), "kernel")), "ref");
    assert_string_equal(json_string_value(json_object_get(json_array_get(rows, 1), "kernel")), "blas");
    for (size_t i = 0; i < 2; i++) assert_true(json_real_value(json_object_get(json_array_get(rows, i), "decode_tok_s")) > 0);
    json_decref(o);
    snprintf(cmd, sizeof cmd, "%s bench -m %s --sweep-chunks 16,32 --compare-kernels --tokens 96 --reps 1 "
             "--peak-size 64 --json", bin, g_path[A_HYB]);
    o = run_json(cmd);
    rows = json_object_get(o, "runs");
    assert_int_equal(json_array_size(rows), 4);
    assert_true(json_string_value(json_object_get(o, "ref_path")) != NULL);
    for (size_t i = 0; i < 4; i += 2) {
        json_t *ref = json_array_get(rows, i), *blas = json_array_get(rows, i + 1);
        assert_float_equal(json_real_value(json_object_get(ref, "ref_over_blas")),
                           json_real_value(json_object_get(ref, "gflops")) / json_real_value(json_object_get(blas, "gflops")),
                           1e-3 * json_real_value(json_object_get(ref, "ref_over_blas")));
    }
    json_decref(o);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(grid_checkpoint_restore_is_bit_identical_to_cold_swa),
        cmocka_unit_test(grid_checkpoint_restore_is_bit_identical_to_cold_recurrent),
        cmocka_unit_test(grid_checkpoint_restore_is_bit_identical_to_cold_hybrid),
        cmocka_unit_test(grid_checkpoint_restore_is_bit_identical_with_threads),
        cmocka_unit_test(ref_results_do_not_depend_on_the_thread_count),
        cmocka_unit_test(off_grid_checkpoint_then_prefill_is_measured),
        cmocka_unit_test(swa_can_truncate_exactly_while_the_window_cells_exist),
        cmocka_unit_test(swa_truncation_to_a_grid_point_equals_cold),
        cmocka_unit_test(recurrent_memory_truncates_only_to_its_length_or_zero),
        cmocka_unit_test(checkpoint_size_equals_the_documented_bytes),
        cmocka_unit_test(info_reports_layer_kinds_and_memory_sizes),
        cmocka_unit_test(serialization_round_trips_for_every_arch),
        cmocka_unit_test(blobs_of_another_arch_model_or_numerics_are_refused),
        cmocka_unit_test(copy_gives_an_identical_state_that_continues_identically),
        cmocka_unit_test(compare_catches_a_flip_in_recurrent_conv_and_window_memory),
        cmocka_unit_test(prefill_flops_count_the_new_layers),
        cmocka_unit_test(synthetic_archs_carry_the_documented_keys_and_shapes),
        cmocka_unit_test(narrow_presets_have_the_documented_shapes),
        cmocka_unit_test(granitehybrid_without_rope_is_refused_naming_the_key),
        cmocka_unit_test(cohere2_with_an_output_tensor_is_refused_naming_it),
        cmocka_unit_test(model_info_reports_memory_kinds_and_sizes),
        cmocka_unit_test(bench_checkpoints_reports_save_and_restore_against_memcpy),
        cmocka_unit_test(bench_reports_decode_and_the_kernels_side_by_side),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
