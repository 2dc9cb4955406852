/*
 * tests/test_inflight.c: several requests in flight through one policy
 * (policy.h, "Requests in flight"; serve --parallel N).
 *
 * For every policy (cold, slot-lcp, block-hash, radix, disk-anchor) and a
 * llama and a hybrid (Mamba-2 + attention) model under ref:
 *   - three requests acquired at once hold three distinct sequences, are
 *     prefilled together in batch steps (each on its own grid, the policy's
 *     on_chunk at every chunk end) and released in another order;
 *   - a fourth acquire while three are open is refused (ENG_ERR_RANGE);
 *   - what they left is reused by the next two requests, also in flight at
 *     once, and their logits are memcmp-identical to a cold prefill.
 * slot-lcp: fewer slots than requests in flight is refused at creation; a
 * hint naming a busy slot fails that acquire (the caller waits for it).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fixtures.h"
#include "model.h"
#include "policy.h"
#include "status.h"
#include "synth.h"

#define N_CTX 1024
#define C 64

static char g_dir[64], g_llama[128], g_hybrid[128];

static int setup(void **state) {
    (void)state;
    if (fx_dir(g_dir, "kvr_inflight") != 0) return -1;
    snprintf(g_llama, sizeof g_llama, "%s/llama.gguf", g_dir);
    snprintf(g_hybrid, sizeof g_hybrid, "%s/hybrid.gguf", g_dir);
    char err[256];
    eng_synth_params p = eng_synth_preset_arch("llama", "tiny");
    p.seed = 11;
    if (eng_synth_write(&p, g_llama, err, sizeof err) != ENG_OK) return -1;
    p = eng_synth_preset_arch("hybrid", "tiny");
    p.seed = 12;
    return eng_synth_write(&p, g_hybrid, err, sizeof err) == ENG_OK ? 0 : -1;
}

static int teardown(void **state) {
    (void)state;
    return fx_rm(g_dir);
}

/* A prompt: a shared head of `head` tokens, then `tail` tokens of its own (seeded). */
static void prompt(int32_t *t, int32_t head, int32_t tail, uint32_t seed) {
    for (int32_t i = 0; i < head; i++) t[i] = 3 + (i * 7) % 250;
    for (int32_t i = 0; i < tail; i++) {
        seed = seed * 1103515245u + 12345u;
        t[head + i] = 3 + (int32_t)((seed >> 8) % 250);
    }
}

typedef struct req {
    const int32_t *tok;
    int32_t        n;
    hx_acquire     acq;
    int32_t        done;     /* prompt tokens in the sequence */
    float         *logits;   /* V: the last prompt token's */
} req;

/* Prefills the requests together, one grid chunk of each per step, the policy's on_chunk at every chunk end. */
static void prefill_together(hx_policy *pol, eng_batch *b, req *r, int32_t n, int32_t V) {
    for (;;) {
        eng_batch_span sp[8];
        int32_t k = 0, who[8];
        for (int32_t i = 0; i < n; i++) {
            if (r[i].done >= r[i].n) continue;
            int32_t len = eng_batch_chunk_len(r[i].acq.seq, r[i].n - r[i].done, NULL);
            sp[k] = (eng_batch_span){.seq = r[i].acq.seq, .tokens = r[i].tok + r[i].done, .n = len,
                                     .logits = r[i].done + len == r[i].n ? r[i].logits : NULL};
            who[k++] = i;
        }
        if (!k) return;
        char err[256];
        assert_int_equal(eng_batch_forward(b, sp, k, NULL, err, sizeof err), ENG_OK);
        for (int32_t j = 0; j < k; j++) {
            req *x = &r[who[j]];
            x->done += sp[j].n;
            pol->ops->on_chunk(pol->state, x->acq.seq, eng_seq_n_tokens(x->acq.seq));
        }
    }
    (void)V;
}

static void acquire(hx_policy *pol, req *r, const int32_t *tok, int32_t n, float *logits) {
    memset(r, 0, sizeof *r);
    r->tok = tok;
    r->n = n;
    r->logits = logits;
    assert_int_equal(hx_policy_acquire(pol, tok, n, -1, NULL, &r->acq), ENG_OK);
    r->done = r->acq.n_reused;
    assert_int_equal(eng_seq_n_tokens(r->acq.seq), r->acq.n_reused);
}

static void release(hx_policy *pol, req *r) {
    hx_release rel;
    memset(&rel, 0, sizeof rel);
    assert_int_equal(pol->ops->release(pol->state, r->acq.seq, r->n, &rel), ENG_OK);
}

static void run_policy(const char *model, const char *policy) {
    char err[512];
    eng_numerics num = eng_numerics_default();
    num.kernel = ENG_KERNEL_REF;
    eng_model *m = NULL;
    assert_int_equal(eng_model_load(model, &num, &m, err, sizeof err), ENG_OK);
    const int32_t V = eng_model_get_info(m)->n_vocab;
    hx_policy_config cfg = {.model = m, .pp = eng_prefill_params_default(), .cap_prompt = true, .n_ctx = N_CTX,
                            .n_parallel = 3};
    hx_policy_args args = {0};
    char dir[160];
    snprintf(dir, sizeof dir, "%s/kv-%s", g_dir, strrchr(model, '/') + 1);
    if (!strcmp(policy, "slot-lcp")) assert_int_equal(hx_policy_args_set_num(&args, "--slots", 3), ENG_OK);
    if (!strcmp(policy, "disk-anchor")) {
        assert_int_equal(hx_policy_args_set(&args, "--cache-dir", dir), ENG_OK);
        assert_int_equal(hx_policy_args_set(&args, "--waypoint-every", "64"), ENG_OK);
    }
    hx_policy *pol = NULL;
    assert_int_equal(hx_policy_create(policy, &cfg, &args, &pol, err, sizeof err), ENG_OK);
    eng_batch *b = eng_batch_new(m);
    assert_non_null(b);

    static int32_t p1[400], p2[400], p3[400], d1[600], d2[600];
    prompt(p1, 192, 60, 1);
    prompt(p2, 192, 90, 2);
    prompt(p3, 0, 150, 3);
    float *lg = calloc((size_t)V * 5, sizeof(float)), *cold = calloc((size_t)V, sizeof(float));
    assert_non_null(lg);
    assert_non_null(cold);
    req r[3];
    acquire(pol, &r[0], p1, 252, lg);
    acquire(pol, &r[1], p2, 282, lg + V);
    acquire(pol, &r[2], p3, 150, lg + 2 * V);
    assert_ptr_not_equal(r[0].acq.seq, r[1].acq.seq);
    assert_ptr_not_equal(r[0].acq.seq, r[2].acq.seq);
    assert_ptr_not_equal(r[1].acq.seq, r[2].acq.seq);
    hx_acquire extra;
    assert_int_equal(hx_policy_acquire(pol, p3, 150, -1, NULL, &extra), ENG_ERR_RANGE);  /* a fourth in flight */
    prefill_together(pol, b, r, 3, V);
    release(pol, &r[0]);
    release(pol, &r[2]);
    release(pol, &r[1]);

    /* the next two extend the first two, in flight at once: reused, and bit-identical to cold */
    memcpy(d1, p1, sizeof(int32_t) * 252);
    prompt(d1 + 252, 0, 100, 4);
    memcpy(d2, p2, sizeof(int32_t) * 282);
    prompt(d2 + 282, 0, 70, 5);
    req d[2];
    acquire(pol, &d[0], d1, 352, lg + 3 * V);
    acquire(pol, &d[1], d2, 352, lg + 4 * V);
    print_message("%s %s: reused %d and %d (%s; %s)\n", strrchr(model, '/') + 1, policy, d[0].acq.n_reused,
                  d[1].acq.n_reused, d[0].acq.note, d[1].acq.note);
    if (strcmp(policy, "cold")) {
        assert_true(d[0].acq.n_reused >= 192);
        assert_true(d[1].acq.n_reused >= 192);
    }
    prefill_together(pol, b, d, 2, V);
    eng_seq *s = eng_seq_new(m, N_CTX);
    const int32_t *dp[2] = {d1, d2};
    for (int i = 0; i < 2; i++) {
        eng_seq_reset(s);
        assert_int_equal(eng_prefill(s, dp[i], 352, NULL, cold), ENG_OK);
        assert_memory_equal(cold, lg + (3 + i) * V, sizeof(float) * (size_t)V);
    }
    release(pol, &d[0]);
    release(pol, &d[1]);
    eng_seq_free(s);
    free(lg);
    free(cold);
    eng_batch_free(b);
    hx_policy_destroy(pol);
    eng_model_free(m);
}

static void each_policy_holds_requests_in_flight_apart_and_reuses_bit_exactly(void **state) {
    (void)state;
    static const char *const pols[] = {"cold", "slot-lcp", "block-hash", "radix", "disk-anchor"};
    for (size_t i = 0; i < sizeof pols / sizeof pols[0]; i++) {
        run_policy(g_llama, pols[i]);
        run_policy(g_hybrid, pols[i]);
    }
}

static void slot_lcp_needs_a_slot_per_request_in_flight_and_waits_for_a_busy_one(void **state) {
    (void)state;
    char err[512];
    eng_numerics num = eng_numerics_default();
    eng_model *m = NULL;
    assert_int_equal(eng_model_load(g_llama, &num, &m, err, sizeof err), ENG_OK);
    hx_policy_config cfg = {.model = m, .pp = eng_prefill_params_default(), .cap_prompt = true, .n_ctx = 256,
                            .n_parallel = 4};
    hx_policy_args args = {0};
    assert_int_equal(hx_policy_args_set_num(&args, "--slots", 2), ENG_OK);
    hx_policy *pol = NULL;
    assert_int_equal(hx_policy_create("slot-lcp", &cfg, &args, &pol, err, sizeof err), ENG_ERR_ARG);
    assert_non_null(strstr(err, "--slots 2"));
    cfg.n_parallel = 2;
    assert_int_equal(hx_policy_create("slot-lcp", &cfg, &args, &pol, err, sizeof err), ENG_OK);
    int32_t t[8] = {5, 6, 7, 8, 9, 10, 11, 12};
    hx_acquire a, b;
    hx_acquire_hint h = {.id_slot = 1};
    assert_int_equal(hx_policy_acquire(pol, t, 8, -1, &h, &a), ENG_OK);
    assert_int_equal(a.slot, 1);
    assert_int_equal(hx_policy_erase(pol, 1), ENG_ERR_RANGE);  /* busy */
    assert_int_equal(hx_policy_acquire(pol, t, 8, -1, &h, &b), ENG_ERR_RANGE);
    assert_int_equal(hx_policy_acquire(pol, t, 8, -1, NULL, &b), ENG_OK);  /* the other slot */
    assert_int_equal(b.slot, 0);
    hx_release rel;
    memset(&rel, 0, sizeof rel);
    assert_int_equal(pol->ops->release(pol->state, a.seq, 8, &rel), ENG_OK);
    assert_int_equal(hx_policy_acquire(pol, t, 8, -1, &h, &a), ENG_OK);  /* free again */
    hx_policy_destroy(pol);
    eng_model_free(m);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(each_policy_holds_requests_in_flight_apart_and_reuses_bit_exactly),
        cmocka_unit_test(slot_lcp_needs_a_slot_per_request_in_flight_and_waits_for_a_busy_one),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
