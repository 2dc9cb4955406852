/*
 * tests/helpers/seqcheck.c: see seqcheck.h.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdlib.h>
#include <string.h>

#include "seqcheck.h"
#include "status.h"

char *sc_blob(const eng_seq *s, size_t *n) {
    *n = eng_seq_serialized_size(s);
    char *b = malloc(*n);
    size_t w = 0;
    assert_int_equal(eng_seq_serialize(s, b, *n, &w), ENG_OK);
    assert_int_equal(w, *n);
    return b;
}

void sc_same_state(const eng_seq *a, const eng_seq *b, const char *what) {
    eng_seq_diff d;
    assert_int_equal(eng_seq_compare(a, b, &d), ENG_OK);
    if (!d.equal) fail_msg("%s: states differ: part %d layer %d pos %d index %lld", what, d.part, d.layer, d.pos,
                           (long long)d.index);
    size_t na, nb;
    char *ba = sc_blob(a, &na), *bb = sc_blob(b, &nb);
    assert_int_equal(na, nb);
    assert_memory_equal(ba, bb, na);
    free(ba);
    free(bb);
}

/* Grid checkpoints taken during a prefill (on_chunk), kept by n_tokens. */
typedef struct ckpts {
    eng_ckpt **c;  /* [n_ctx + 1] */
    int32_t    n, C;
} ckpts;

static void keep_ckpt(void *ud, eng_seq *s, int32_t n) {
    ckpts *k = ud;
    if (n % k->C != 0 || n > k->n || k->c[n]) return;  /* grid positions only */
    k->c[n] = eng_seq_checkpoint(s);
    assert_non_null(k->c[n]);
}

/* One split: the slot served tokens [0, k) plus 5 tokens the next prompt
 * does not share (its state went past k); the next prompt is [0, n). */
static void check_split(const eng_model *m, const int32_t *toks, int32_t n_ctx, int32_t n, int32_t k, int32_t C,
                        const float *lcold, const eng_seq *cold, const float *dcold) {
    const int32_t V = eng_model_get_info(m)->n_vocab;
    eng_prefill_params pp = eng_prefill_params_default();
    pp.chunk = C;
    ckpts kp = {.c = calloc((size_t)n_ctx + 1, sizeof(eng_ckpt *)), .n = n_ctx, .C = C};
    pp.on_chunk = keep_ckpt;
    pp.ud = &kp;
    eng_seq *s = eng_seq_new(m, n_ctx);
    assert_int_equal(eng_prefill(s, toks, k, &pp, NULL), ENG_OK);
    const int32_t other[5] = {3, 1, 4, 1, 5};
    for (int i = 0; i < 5; i++) assert_int_equal(eng_decode(s, other[i], NULL), ENG_OK);
    int32_t g = k / C * C;
    while (g > 0 && !kp.c[g]) g -= C;
    pp.on_chunk = NULL;
    float *l = malloc(sizeof(float) * V);
    if (g > 0) {
        assert_int_equal(eng_seq_restore(s, kp.c[g]), ENG_OK);
        assert_int_equal(eng_seq_n_tokens(s), g);
    } else {
        assert_int_equal(eng_seq_truncate(s, 0), ENG_OK);
    }
    assert_int_equal(eng_prefill(s, toks + g, n - g, &pp, l), ENG_OK);
    if (memcmp(l, lcold, sizeof(float) * V) != 0) fail_msg("split k=%d (restore at %d), C=%d: logits differ", k, g, C);
    sc_same_state(s, cold, "after the prompt");
    /* two decode steps from there */
    float *d = malloc(sizeof(float) * V);
    int32_t t = eng_argmax(l, V);
    for (int i = 0; i < 2; i++) {
        assert_int_equal(eng_decode(s, t, d), ENG_OK);
        assert_memory_equal(d, dcold + (int64_t)i * V, sizeof(float) * V);
        t = eng_argmax(d, V);
    }
    free(d);
    free(l);
    for (int32_t i = 0; i <= n_ctx; i++) eng_ckpt_free(kp.c[i]);
    free(kp.c);
    eng_seq_free(s);
}

int sc_invariant(const eng_model *m, const int32_t *toks, int32_t n_ctx, const int32_t *chunks, int n_chunks,
                 const int32_t *ns, int n_ns) {
    const int32_t V = eng_model_get_info(m)->n_vocab;
    int cases = 0;
    for (int c = 0; c < n_chunks; c++)
        for (int q = 0; q < n_ns; q++) {
            const int32_t C = chunks[c], n = ns[q];
            eng_prefill_params pp = eng_prefill_params_default();
            pp.chunk = C;
            eng_seq *cold = eng_seq_new(m, n_ctx), *dec = eng_seq_new(m, n_ctx);
            float *lc = malloc(sizeof(float) * V), *dc = malloc(sizeof(float) * V * 2);
            assert_int_equal(eng_prefill(cold, toks, n, &pp, lc), ENG_OK);
            /* cold's two decode steps, on a copy */
            assert_int_equal(eng_seq_copy(dec, cold), ENG_OK);
            int32_t t = eng_argmax(lc, V);
            for (int i = 0; i < 2; i++) {
                assert_int_equal(eng_decode(dec, t, dc + (int64_t)i * V), ENG_OK);
                t = eng_argmax(dc + (int64_t)i * V, V);
            }
            const int32_t cand[] = {1, C - 1, C, C + 1, 2 * C, 2 * C + 3, n / 2, n - 1, n - C + 1, n};
            for (size_t i = 0; i < sizeof cand / sizeof cand[0]; i++)
                if (cand[i] >= 1 && cand[i] <= n) {
                    check_split(m, toks, n_ctx, n, cand[i], C, lc, cold, dc);
                    cases++;
                }
            free(lc); free(dc);
            eng_seq_free(cold); eng_seq_free(dec);
        }
    return cases;
}

int sc_off_grid_differences(const eng_model *m, const int32_t *toks, int32_t n, const int32_t *ks, int n_ks) {
    const int32_t V = eng_model_get_info(m)->n_vocab, C = 64;
    eng_prefill_params pp = eng_prefill_params_default();
    pp.chunk = C;
    eng_seq *cold = eng_seq_new(m, n + 8), *s = eng_seq_new(m, n + 8);
    float *lc = malloc(sizeof(float) * V), *l = malloc(sizeof(float) * V);
    assert_int_equal(eng_prefill(cold, toks, n, &pp, lc), ENG_OK);
    int differ = 0;
    for (int i = 0; i < n_ks; i++) {
        eng_seq_reset(s);
        assert_int_equal(eng_prefill(s, toks, ks[i], &pp, NULL), ENG_OK);
        eng_ckpt *c = eng_seq_checkpoint(s);  /* at ks[i], off the grid */
        assert_int_equal(eng_decode(s, 9, NULL), ENG_OK);
        assert_int_equal(eng_seq_restore(s, c), ENG_OK);
        assert_int_equal(eng_prefill(s, toks + ks[i], n - ks[i], &pp, l), ENG_OK);
        eng_seq_diff d;
        assert_int_equal(eng_seq_compare(s, cold, &d), ENG_OK);
        differ += !(!memcmp(l, lc, sizeof(float) * V) && d.equal);
        eng_ckpt_free(c);
    }
    free(lc); free(l);
    eng_seq_free(cold); eng_seq_free(s);
    return differ;
}
