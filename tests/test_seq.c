/*
 * tests/test_seq.c: sequence state: truncation rules, copy, reset,
 * comparison, serialisation (round trip, foreign and corrupt blobs) and
 * checkpoints of a pure full-attention model (0-byte payload + n_tokens).
 *
 * Models: the synthetic tiny preset with seeds 1 and 2 (two different
 * models of the same shape), loaded with several numerics.
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

#include "attn.h"
#include "internal.h"
#include "model.h"
#include "status.h"
#include "synth.h"

static char g_dir[64];
static char g_seed1[128], g_seed2[128];
static int32_t g_toks[64];

static int write_model(const char *path, uint64_t seed) {
    eng_synth_params p = eng_synth_preset("tiny");
    p.seed = seed;
    char err[256];
    return eng_synth_write(&p, path, err, sizeof err) == ENG_OK ? 0 : -1;
}

static int setup_models(void **state) {
    (void)state;
    snprintf(g_dir, sizeof g_dir, "/tmp/kvr_seq_XXXXXX");
    if (!mkdtemp(g_dir)) return -1;
    snprintf(g_seed1, sizeof g_seed1, "%s/tiny1.gguf", g_dir);
    snprintf(g_seed2, sizeof g_seed2, "%s/tiny2.gguf", g_dir);
    for (int i = 0; i < 64; i++) g_toks[i] = (i * 53 + 17) % 259;
    return write_model(g_seed1, 1) || write_model(g_seed2, 2);
}

static int teardown_models(void **state) {
    (void)state;
    unlink(g_seed1);
    unlink(g_seed2);
    rmdir(g_dir);
    return 0;
}

static eng_model *load(const char *path, eng_kernel k, eng_precision p) {
    eng_numerics num = {.kernel = k, .precision = p, .n_threads = 1};
    eng_model *m = NULL;
    char err[256] = "";
    if (eng_model_load(path, &num, &m, err, sizeof err) != ENG_OK) fail_msg("load: %s", err);
    return m;
}

/* A sequence of m holding the first n test tokens (chunk 16). */
static eng_seq *filled(const eng_model *m, int32_t n_ctx, int32_t n) {
    eng_seq *s = eng_seq_new(m, n_ctx);
    assert_non_null(s);
    eng_prefill_params pp = eng_prefill_params_default();
    pp.chunk = 16;
    if (n > 0) assert_int_equal(eng_prefill(s, g_toks, n, &pp, NULL), ENG_OK);
    return s;
}

static char *blob_of(const eng_seq *s, size_t *n) {
    *n = eng_seq_serialized_size(s);
    char *b = malloc(*n);
    size_t w = 0;
    assert_int_equal(eng_seq_serialize(s, b, *n, &w), ENG_OK);
    assert_int_equal(w, *n);
    return b;
}

// ----------------------------------------------------------------------------
// Lifecycle, truncation, copy

static void a_new_sequence_is_empty_and_rejects_a_zero_context(void **state) {
    (void)state;
    eng_model *m = load(g_seed1, ENG_KERNEL_BLAS, ENG_PRECISION_FP32);
    assert_null(eng_seq_new(m, 0));
    assert_null(eng_seq_new(NULL, 8));
    eng_seq *s = eng_seq_new(m, 8);
    assert_int_equal(eng_seq_n_tokens(s), 0);
    assert_int_equal(eng_seq_n_ctx(s), 8);
    assert_ptr_equal(eng_seq_model(s), m);
    eng_seq_free(s);
    eng_seq_free(NULL);
    eng_model_free(m);
}

static void full_attention_can_truncate_to_any_length_up_to_n_tokens(void **state) {
    (void)state;
    eng_model *m = load(g_seed1, ENG_KERNEL_BLAS, ENG_PRECISION_FP32);
    eng_seq *s = filled(m, 64, 30);
    for (int32_t n = 0; n <= 30; n++) assert_true(eng_seq_can_truncate(s, n));
    assert_false(eng_seq_can_truncate(s, 31));
    assert_false(eng_seq_can_truncate(s, -1));
    assert_int_equal(eng_seq_truncate(s, 31), ENG_ERR_RANGE);
    assert_int_equal(eng_seq_truncate(s, -1), ENG_ERR_ARG);
    assert_int_equal(eng_seq_truncate(s, 30), ENG_OK);
    assert_int_equal(eng_seq_truncate(s, 17), ENG_OK);
    assert_int_equal(eng_seq_n_tokens(s), 17);
    assert_memory_equal(eng_seq_tokens(s), g_toks, sizeof(int32_t) * 17);
    assert_int_equal(eng_seq_truncate(s, 0), ENG_OK);
    assert_int_equal(eng_seq_n_tokens(s), 0);
    eng_seq_free(s);
    eng_model_free(m);
}

static void truncating_to_a_grid_position_equals_a_cold_prefill_of_that_prefix(void **state) {
    (void)state;
    eng_model *m = load(g_seed1, ENG_KERNEL_BLAS, ENG_PRECISION_BF16);
    eng_seq *a = filled(m, 64, 50), *b = filled(m, 64, 32);
    assert_int_equal(eng_seq_truncate(a, 32), ENG_OK);  /* 32 = 2 * C */
    size_t na, nb;
    char *ba = blob_of(a, &na), *bb = blob_of(b, &nb);
    assert_int_equal(na, nb);
    assert_memory_equal(ba, bb, na);
    free(ba); free(bb);
    eng_seq_free(a); eng_seq_free(b);
    eng_model_free(m);
}

static void reset_returns_to_the_state_of_a_fresh_sequence(void **state) {
    (void)state;
    eng_model *m = load(g_seed1, ENG_KERNEL_REF, ENG_PRECISION_FP32);
    eng_seq *s = filled(m, 64, 40), *fresh = eng_seq_new(m, 64);
    eng_seq_reset(s);
    assert_int_equal(eng_seq_n_tokens(s), 0);
    /* every row is zero again, not only the logical length */
    for (int32_t il = 0; il < m->info.n_layer; il++) {
        const eng_attn_mem *a = s->mem[il].state, *b = fresh->mem[il].state;
        assert_memory_equal(a->k, b->k, sizeof(float) * 64 * (size_t)a->n_embd_kv);
        assert_memory_equal(a->v, b->v, sizeof(float) * 64 * (size_t)a->n_embd_kv);
    }
    eng_seq_free(s); eng_seq_free(fresh);
    eng_model_free(m);
}

static void copy_gives_an_identical_state_and_blob(void **state) {
    (void)state;
    eng_model *m = load(g_seed1, ENG_KERNEL_BLAS, ENG_PRECISION_FP32);
    eng_seq *s = filled(m, 64, 41), *c = filled(m, 48, 45);  /* dst holds more, stale */
    assert_int_equal(eng_seq_copy(c, s), ENG_OK);
    eng_seq_diff d;
    assert_int_equal(eng_seq_compare(s, c, &d), ENG_OK);
    assert_true(d.equal);
    size_t na, nb;
    char *ba = blob_of(s, &na), *bb = blob_of(c, &nb);
    assert_int_equal(na, nb);
    assert_memory_equal(ba, bb, na);
    free(ba); free(bb);
    eng_seq *small = eng_seq_new(m, 40);
    assert_int_equal(eng_seq_copy(small, s), ENG_ERR_RANGE);
    eng_model *other = load(g_seed2, ENG_KERNEL_BLAS, ENG_PRECISION_FP32);
    eng_seq *o = eng_seq_new(other, 64);
    assert_int_equal(eng_seq_copy(o, s), ENG_ERR_MISMATCH);
    eng_seq_free(o); eng_seq_free(small); eng_seq_free(s); eng_seq_free(c);
    eng_model_free(other);
    eng_model_free(m);
}

static void compare_reports_token_and_length_differences(void **state) {
    (void)state;
    eng_model *m = load(g_seed1, ENG_KERNEL_BLAS, ENG_PRECISION_FP32);
    eng_seq *a = filled(m, 64, 20), *b = filled(m, 64, 20);
    eng_seq_diff d;
    assert_int_equal(eng_seq_truncate(b, 16), ENG_OK);
    assert_int_equal(eng_seq_compare(a, b, &d), ENG_OK);
    assert_false(d.equal);
    assert_int_equal(d.part, ENG_SEQ_PART_N_TOKENS);
    assert_int_equal(d.pos, 16);
    int32_t other = (g_toks[16] + 1) % 259;
    assert_int_equal(eng_prefill(b, &other, 1, NULL, NULL), ENG_OK);
    assert_int_equal(eng_seq_compare(a, b, &d), ENG_OK);
    assert_int_equal(d.part, ENG_SEQ_PART_TOKENS);
    assert_int_equal(d.pos, 16);
    eng_model *m2 = load(g_seed2, ENG_KERNEL_BLAS, ENG_PRECISION_FP32);
    eng_seq *c = filled(m2, 64, 20);
    assert_int_equal(eng_seq_compare(a, c, &d), ENG_ERR_MISMATCH);
    eng_seq_free(a); eng_seq_free(b); eng_seq_free(c);
    eng_model_free(m2);
    eng_model_free(m);
}

// ----------------------------------------------------------------------------
// Serialisation

static void serialize_then_deserialize_is_a_byte_identical_round_trip(void **state) {
    (void)state;
    eng_model *m = load(g_seed1, ENG_KERNEL_BLAS, ENG_PRECISION_BF16);
    eng_seq *s = filled(m, 64, 37), *t = filled(m, 64, 5);
    size_t n, n2;
    char *b = blob_of(s, &n);
    assert_int_equal(eng_seq_deserialize(t, b, n), ENG_OK);
    eng_seq_diff d;
    assert_int_equal(eng_seq_compare(s, t, &d), ENG_OK);
    assert_true(d.equal);
    char *b2 = blob_of(t, &n2);
    assert_int_equal(n, n2);
    assert_memory_equal(b, b2, n);
    /* continuing after a restore equals continuing the original */
    const int32_t V = eng_model_get_info(m)->n_vocab;
    float *la = malloc(sizeof(float) * V), *lb = malloc(sizeof(float) * V);
    assert_int_equal(eng_decode(s, 7, la), ENG_OK);
    assert_int_equal(eng_decode(t, 7, lb), ENG_OK);
    assert_memory_equal(la, lb, sizeof(float) * V);
    /* the header says what it is */
    assert_memory_equal(b, "KVRS", 4);
    const size_t hdr = 24 + 16 * (size_t)m->info.n_layer;
    assert_int_equal(n, hdr + 4 * 37 + m->info.n_layer * 2 * 37 * 32 * sizeof(float) + 8);
    free(la); free(lb); free(b); free(b2);
    eng_seq_free(s); eng_seq_free(t);
    eng_model_free(m);
}

static void an_empty_sequence_serialises_and_restores(void **state) {
    (void)state;
    eng_model *m = load(g_seed1, ENG_KERNEL_REF, ENG_PRECISION_FP32);
    eng_seq *s = eng_seq_new(m, 8), *t = filled(m, 16, 9);
    size_t n;
    char *b = blob_of(s, &n);
    assert_int_equal(eng_seq_deserialize(t, b, n), ENG_OK);
    assert_int_equal(eng_seq_n_tokens(t), 0);
    free(b);
    eng_seq_free(s); eng_seq_free(t);
    eng_model_free(m);
}

static void serialize_into_a_short_buffer_is_out_of_range(void **state) {
    (void)state;
    eng_model *m = load(g_seed1, ENG_KERNEL_BLAS, ENG_PRECISION_FP32);
    eng_seq *s = filled(m, 64, 10);
    size_t n = eng_seq_serialized_size(s), w = 99;
    char *b = malloc(n);
    assert_int_equal(eng_seq_serialize(s, b, n - 1, &w), ENG_ERR_RANGE);
    assert_int_equal(w, 0);
    free(b);
    eng_seq_free(s);
    eng_model_free(m);
}

static void deserialize_refuses_a_blob_from_another_model(void **state) {
    (void)state;
    eng_model *m1 = load(g_seed1, ENG_KERNEL_BLAS, ENG_PRECISION_FP32);
    eng_model *m2 = load(g_seed2, ENG_KERNEL_BLAS, ENG_PRECISION_FP32);
    eng_seq *s = filled(m2, 64, 20), *t = filled(m1, 64, 3);
    size_t n;
    char *b = blob_of(s, &n);
    assert_int_equal(eng_seq_deserialize(t, b, n), ENG_ERR_MISMATCH);
    assert_int_equal(eng_seq_n_tokens(t), 3);  /* untouched */
    free(b);
    eng_seq_free(s); eng_seq_free(t);
    eng_model_free(m1); eng_model_free(m2);
}

static void deserialize_refuses_a_blob_computed_with_other_numerics(void **state) {
    (void)state;
    eng_model *blas = load(g_seed1, ENG_KERNEL_BLAS, ENG_PRECISION_FP32);
    eng_model *ref = load(g_seed1, ENG_KERNEL_REF, ENG_PRECISION_FP32);
    eng_model *bf16 = load(g_seed1, ENG_KERNEL_BLAS, ENG_PRECISION_BF16);
    eng_seq *s = filled(ref, 64, 20), *t = eng_seq_new(blas, 64), *u = eng_seq_new(bf16, 64);
    size_t n;
    char *b = blob_of(s, &n);
    assert_int_equal(eng_seq_deserialize(t, b, n), ENG_ERR_MISMATCH);
    assert_int_equal(eng_seq_deserialize(u, b, n), ENG_ERR_MISMATCH);
    free(b);
    eng_seq_free(s); eng_seq_free(t); eng_seq_free(u);
    eng_model_free(blas); eng_model_free(ref); eng_model_free(bf16);
}

static void a_blob_with_any_single_byte_flipped_is_rejected_as_malformed(void **state) {
    (void)state;
    eng_model *m = load(g_seed1, ENG_KERNEL_BLAS, ENG_PRECISION_FP32);
    eng_seq *s = filled(m, 64, 3), *t = filled(m, 64, 2);
    size_t n;
    char *b = blob_of(s, &n);
    for (size_t i = 0; i < n; i++) {
        for (int bit = 0; bit < 8; bit += 7) {
            b[i] ^= (char)(1 << bit);
            int rc = eng_seq_deserialize(t, b, n);
            if (rc != ENG_ERR_FORMAT) fail_msg("flip of bit %d at offset %zu: %s", bit, i, eng_status_str(rc));
            b[i] ^= (char)(1 << bit);
        }
    }
    assert_int_equal(eng_seq_n_tokens(t), 2);  /* never half-applied */
    assert_int_equal(eng_seq_deserialize(t, b, n), ENG_OK);
    free(b);
    eng_seq_free(s); eng_seq_free(t);
    eng_model_free(m);
}

static void a_blob_truncated_or_extended_at_any_length_is_rejected(void **state) {
    (void)state;
    eng_model *m = load(g_seed1, ENG_KERNEL_BLAS, ENG_PRECISION_FP32);
    eng_seq *s = filled(m, 64, 3), *t = eng_seq_new(m, 64);
    size_t n;
    char *b = blob_of(s, &n);
    char *big = calloc(n + 16, 1);
    memcpy(big, b, n);
    for (size_t len = 0; len < n; len++) assert_int_equal(eng_seq_deserialize(t, b, len), ENG_ERR_FORMAT);
    for (size_t len = n + 1; len <= n + 16; len++) assert_int_equal(eng_seq_deserialize(t, big, len), ENG_ERR_FORMAT);
    assert_int_equal(eng_seq_deserialize(t, NULL, n), ENG_ERR_FORMAT);
    free(b); free(big);
    eng_seq_free(s); eng_seq_free(t);
    eng_model_free(m);
}

static void deserialize_into_a_smaller_context_is_out_of_range(void **state) {
    (void)state;
    eng_model *m = load(g_seed1, ENG_KERNEL_BLAS, ENG_PRECISION_FP32);
    eng_seq *s = filled(m, 64, 30), *t = eng_seq_new(m, 20);
    size_t n;
    char *b = blob_of(s, &n);
    assert_int_equal(eng_seq_deserialize(t, b, n), ENG_ERR_RANGE);
    free(b);
    eng_seq_free(s); eng_seq_free(t);
    eng_model_free(m);
}

// ----------------------------------------------------------------------------
// Checkpoints of a full-attention model

static void a_full_attention_checkpoint_is_n_tokens_and_an_empty_payload(void **state) {
    (void)state;
    eng_model *m = load(g_seed1, ENG_KERNEL_BLAS, ENG_PRECISION_FP32);
    eng_seq *s = filled(m, 64, 32), *cold = filled(m, 64, 32);
    eng_ckpt *c = eng_seq_checkpoint(s);
    assert_non_null(c);
    assert_int_equal(eng_ckpt_n_tokens(c), 32);
    assert_int_equal(eng_ckpt_size(c), 0);
    eng_prefill_params pp = eng_prefill_params_default();
    pp.chunk = 16;
    assert_int_equal(eng_prefill(s, g_toks + 32, 20, &pp, NULL), ENG_OK);
    assert_int_equal(eng_seq_restore(s, c), ENG_OK);
    eng_seq_diff d;
    assert_int_equal(eng_seq_compare(s, cold, &d), ENG_OK);
    assert_true(d.equal);
    eng_ckpt_free(c);
    eng_ckpt_free(NULL);
    eng_seq_free(s); eng_seq_free(cold);
    eng_model_free(m);
}

static void restore_refuses_another_model_and_a_longer_checkpoint(void **state) {
    (void)state;
    eng_model *m1 = load(g_seed1, ENG_KERNEL_BLAS, ENG_PRECISION_FP32);
    eng_model *m2 = load(g_seed2, ENG_KERNEL_BLAS, ENG_PRECISION_FP32);
    eng_seq *s = filled(m1, 64, 32), *o = filled(m2, 64, 32);
    eng_ckpt *c = eng_seq_checkpoint(s);
    assert_int_equal(eng_seq_restore(o, c), ENG_ERR_MISMATCH);
    assert_int_equal(eng_seq_truncate(s, 16), ENG_OK);
    assert_int_equal(eng_seq_restore(s, c), ENG_ERR_RANGE);
    assert_int_equal(eng_seq_n_tokens(s), 16);
    eng_ckpt_free(c);
    eng_seq_free(s); eng_seq_free(o);
    eng_model_free(m1); eng_model_free(m2);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(a_new_sequence_is_empty_and_rejects_a_zero_context),
        cmocka_unit_test(full_attention_can_truncate_to_any_length_up_to_n_tokens),
        cmocka_unit_test(truncating_to_a_grid_position_equals_a_cold_prefill_of_that_prefix),
        cmocka_unit_test(reset_returns_to_the_state_of_a_fresh_sequence),
        cmocka_unit_test(copy_gives_an_identical_state_and_blob),
        cmocka_unit_test(compare_reports_token_and_length_differences),
        cmocka_unit_test(serialize_then_deserialize_is_a_byte_identical_round_trip),
        cmocka_unit_test(an_empty_sequence_serialises_and_restores),
        cmocka_unit_test(serialize_into_a_short_buffer_is_out_of_range),
        cmocka_unit_test(deserialize_refuses_a_blob_from_another_model),
        cmocka_unit_test(deserialize_refuses_a_blob_computed_with_other_numerics),
        cmocka_unit_test(a_blob_with_any_single_byte_flipped_is_rejected_as_malformed),
        cmocka_unit_test(a_blob_truncated_or_extended_at_any_length_is_rejected),
        cmocka_unit_test(deserialize_into_a_smaller_context_is_out_of_range),
        cmocka_unit_test(a_full_attention_checkpoint_is_n_tokens_and_an_empty_payload),
        cmocka_unit_test(restore_refuses_another_model_and_a_longer_checkpoint),
    };
    return cmocka_run_group_tests(tests, setup_models, teardown_models);
}
