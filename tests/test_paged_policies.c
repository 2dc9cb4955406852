/*
 * tests/test_paged_policies.c: the block-hash (vLLM) and radix (SGLang)
 * policies on real engine state, driven request by request:
 *
 *   block-hash  a change in block k reuses k blocks; a prompt that is all
 *               cached recomputes its last block; the block size must lie
 *               on the grid; --cache-blocks evicts a sequence's tail first;
 *               the recurrent rules (mamba_cache_mode all / align, and the
 *               align step budget); quirk hybrid-block-size (vLLM #40696);
 *   radix       matches rounded down to pages; a branch point gets a state,
 *               so the second request through it hits (MambaRadixCache);
 *               --max-total-tokens evicts the least recently used leaf;
 *               quirk prompt-key (SGLang #16521);
 *   every policy, with --align chunk, reuses bit-identically to cold
 *   (memcmp of logits and of the state left) on the llama, recurrent and
 *   hybrid presets, and records what its cache holds; disk-anchor serves a
 *   hybrid model from disk where its live sequence cannot be truncated.
 *
 * Models are synthesised with the Llama SPM vocabulary from ../shared/data
 * (skipped when absent) into /tmp/kvr_paged_*, removed at the end unless
 * KVR_KEEP is set.
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

#include "model.h"
#include "policy.h"
#include "fixtures.h"
#include "replay.h"
#include "sqlq.h"
#include "status.h"
#include "synth.h"
#include "synth_transcript.h"
#include "transcript.h"

#define VOCAB "../shared/data/vocab/ggml-vocab-llama-spm.gguf"

static char g_dir[64], g_llama[128], g_rec[128], g_hyb[128], g_big[128], g_agent[128], g_loop[128], g_static[128];
static int g_ready;

static int synth(const char *arch, int32_t kv_heads, int32_t ssm_state, const char *path) {
    eng_synth_params p = eng_synth_preset_arch(arch, "tiny");
    p.seed = 16;
    p.vocab_path = VOCAB;
    p.n_vocab = 0;
    if (kv_heads) p.n_head_kv = kv_heads;
    if (ssm_state) p.ssm_d_state = ssm_state;
    char err[256];
    if (eng_synth_write(&p, path, err, sizeof err) != ENG_OK) {
        fprintf(stderr, "synth: %s\n", err);
        return -1;
    }
    return 0;
}

static int setup(void **state) {
    (void)state;
    if (access(VOCAB, R_OK) != 0) return 0;
    snprintf(g_dir, sizeof g_dir, "/tmp/kvr_paged_XXXXXX");
    if (!mkdtemp(g_dir)) return -1;
    snprintf(g_llama, sizeof g_llama, "%s/llama.gguf", g_dir);
    snprintf(g_rec, sizeof g_rec, "%s/recurrent.gguf", g_dir);
    snprintf(g_hyb, sizeof g_hyb, "%s/hybrid.gguf", g_dir);
    snprintf(g_big, sizeof g_big, "%s/hybrid-bigstate.gguf", g_dir);
    if (synth("llama", 0, 0, g_llama) || synth("recurrent", 0, 0, g_rec) || synth("hybrid", 0, 0, g_hyb) ||
        synth("hybrid", 1, 256, g_big))
        return -1;
    hx_synth_params p;
    hx_synth_params_init(&p, HX_SYNTH_AGENT);
    p.seed = 16;
    p.sessions = 2;
    p.turns = 3;
    p.interleave = true;
    p.system_bytes = 5000;
    p.tool_result_bytes = 400;
    snprintf(g_agent, sizeof g_agent, "%s/agent.jsonl", g_dir);
    if (fx_write_transcript(&p, g_agent) != 0) return -1;
    p.sessions = 1;  /* one session: each request extends the last */
    p.interleave = false;
    snprintf(g_loop, sizeof g_loop, "%s/loop.jsonl", g_dir);
    if (fx_write_transcript(&p, g_loop) != 0) return -1;
    hx_synth_params_init(&p, HX_SYNTH_STATIC);
    p.seed = 7;
    p.turns = 3;
    p.base_bytes = 600;  /* prompts of about 725 tokens: shorter than the hybrid block of vLLM #40696 */
    snprintf(g_static, sizeof g_static, "%s/static.jsonl", g_dir);
    if (fx_write_transcript(&p, g_static) != 0) return -1;
    g_ready = 1;
    return 0;
}

static int teardown(void **state) {
    (void)state;
    return fx_rm(g_dir);
}

static void need(void) {
    if (!g_ready) skip();
}

// ----------------------------------------------------------------------------
// A policy driven request by request: acquire, prefill the rest, decode the
// response tokens, release (what the replay loop does, without the cold run)

typedef struct drv {
    eng_model *m;
    hx_policy *p;
    float     *logits;
    char       note[256];
} drv;

static int drv_open(drv *d, const char *model, const char *policy, eng_align align, bool cap, const char *quirks,
                    const hx_policy_args *args, char *err, size_t errlen) {
    memset(d, 0, sizeof *d);
    eng_numerics num = eng_numerics_default();
    assert_int_equal(eng_model_load(model, &num, &d->m, err, errlen), ENG_OK);
    d->logits = malloc(sizeof(float) * (size_t)eng_model_get_info(d->m)->n_vocab);
    hx_policy_config cfg = {0};
    cfg.model = d->m;
    cfg.pp = eng_prefill_params_default();
    cfg.pp.align = align;
    cfg.cap_prompt = cap;
    cfg.n_ctx = 4096;
    assert_int_equal(hx_quirks_parse(policy, quirks ? quirks : "", &cfg.quirks, err, errlen), ENG_OK);
    return hx_policy_create(policy, &cfg, args, &d->p, err, errlen);
}

static void drv_close(drv *d) {
    hx_policy_destroy(d->p);
    eng_model_free(d->m);
    free(d->logits);
}

/* Serves tokens[0, n) then decodes resp[0, n_resp); returns the tokens reused. */
static int32_t serve(drv *d, const int32_t *tokens, int32_t n, const int32_t *resp, int32_t n_resp) {
    hx_acquire acq;
    assert_int_equal(d->p->ops->acquire(d->p->state, tokens, n, -1, &acq), ENG_OK);
    assert_int_equal(eng_seq_n_tokens(acq.seq), acq.n_reused);
    snprintf(d->note, sizeof d->note, "%s", acq.note);
    eng_prefill_params pp = d->p->cfg.pp;
    pp.on_chunk = d->p->ops->on_chunk;
    pp.ud = d->p->state;
    assert_int_equal(eng_prefill(acq.seq, tokens + acq.n_reused, n - acq.n_reused, &pp, d->logits), ENG_OK);
    for (int32_t k = 0; k < n_resp; k++) assert_int_equal(eng_decode(acq.seq, resp[k], NULL), ENG_OK);
    hx_release rel;
    memset(&rel, 0, sizeof rel);
    assert_int_equal(d->p->ops->release(d->p->state, acq.seq, n, &rel), ENG_OK);
    assert_true(rel.bytes_held >= 0 && rel.entries_held >= 0);
    return acq.n_reused;
}

static void random_tokens(int32_t *t, int32_t n, uint32_t seed) {
    for (int32_t i = 0; i < n; i++) {
        seed = seed * 1664525u + 1013904223u;
        t[i] = 3 + (int32_t)((seed >> 8) % 31000u);
    }
}

static void set_arg(hx_policy_args *a, const char *name, const char *value) {
    assert_int_equal(hx_policy_args_set(a, name, value), ENG_OK);
}

// ----------------------------------------------------------------------------
// block-hash

static void block_hash_reuses_the_blocks_before_a_change_and_recomputes_a_full_hits_last_block(void **state) {
    (void)state;
    need();
    drv d;
    char err[256];
    assert_int_equal(drv_open(&d, g_llama, "block-hash", ENG_ALIGN_CHUNK, true, NULL, NULL, err, sizeof err), ENG_OK);
    int32_t a[640], b[640];
    random_tokens(a, 640, 1);
    assert_int_equal(serve(&d, a, 640, NULL, 0), 0);
    for (int32_t k = 2; k <= 8; k += 3) {  /* a change in block k: blocks 0..k-1 hit */
        memcpy(b, a, sizeof a);
        b[k * 64 + 10] ^= 1;
        assert_int_equal(serve(&d, b, 640, NULL, 0), k * 64);
    }
    /* the same prompt again: at most n - 1 tokens hit, so the last block is recomputed */
    assert_int_equal(serve(&d, a, 640, NULL, 0), 576);
    assert_non_null(strstr(d.note, "last block recomputed"));
    /* one token more: every block of the first 640 hits */
    int32_t c[641];
    memcpy(c, a, sizeof a);
    c[640] = 7;
    assert_int_equal(serve(&d, c, 641, NULL, 0), 640);
    drv_close(&d);
}

static void block_hash_needs_a_block_size_on_the_grid_under_align_chunk(void **state) {
    (void)state;
    need();
    drv d;
    char err[256] = "";
    hx_policy_args args = {0};
    set_arg(&args, "--block-size", "32");
    assert_int_equal(drv_open(&d, g_llama, "block-hash", ENG_ALIGN_CHUNK, true, NULL, &args, err, sizeof err),
                     ENG_ERR_ARG);
    assert_non_null(strstr(err, "--block-size 32 is not a multiple of the chunk 64"));
    drv_close(&d);
    assert_int_equal(drv_open(&d, g_llama, "block-hash", ENG_ALIGN_NONE, true, NULL, &args, err, sizeof err), ENG_OK);
    drv_close(&d);
    set_arg(&args, "--block-size", "128");
    assert_int_equal(drv_open(&d, g_llama, "block-hash", ENG_ALIGN_CHUNK, true, NULL, &args, err, sizeof err), ENG_OK);
    int32_t a[700];
    random_tokens(a, 700, 2);
    serve(&d, a, 600, NULL, 0);
    assert_int_equal(serve(&d, a, 700, NULL, 0), 512);  /* 4 blocks of 128 */
    drv_close(&d);
}

static void block_hash_evicts_the_least_recently_freed_sequences_tail_first(void **state) {
    (void)state;
    need();
    drv d;
    char err[256];
    hx_policy_args args = {0};
    set_arg(&args, "--cache-blocks", "12");
    assert_int_equal(drv_open(&d, g_llama, "block-hash", ENG_ALIGN_CHUNK, true, NULL, &args, err, sizeof err), ENG_OK);
    int32_t a[641], b[640];
    random_tokens(a, 641, 3);
    random_tokens(b, 640, 4);
    serve(&d, a, 640, NULL, 0);      /* 10 blocks */
    serve(&d, b, 640, NULL, 0);      /* 10 more in a pool of 12: a's blocks 9..2 go */
    assert_int_equal(serve(&d, a, 641, NULL, 0), 128);
    assert_non_null(strstr(d.note, "block 2: hash"));
    drv_close(&d);
}

/* The state rules: `all` keeps a state at every block boundary, `align` only
 * where a scheduler step ends on one (the prompt's last boundary with the
 * default step of 8192 tokens; every 128 tokens with --max-num-batched-tokens
 * 128). The second prompt leaves the first in block 5 (tokens 320..383). */
static int32_t second_hit(const char *model, const char *mode, const char *steps) {
    drv d;
    char err[256];
    hx_policy_args args = {0};
    set_arg(&args, "--mamba-cache-mode", mode);
    if (steps) set_arg(&args, "--max-num-batched-tokens", steps);
    assert_int_equal(drv_open(&d, model, "block-hash", ENG_ALIGN_CHUNK, true, NULL, &args, err, sizeof err), ENG_OK);
    int32_t a[640], b[640];
    random_tokens(a, 640, 5);
    memcpy(b, a, sizeof a);
    b[330] ^= 1;
    serve(&d, a, 640, NULL, 0);
    int32_t r = serve(&d, b, 640, NULL, 0);
    drv_close(&d);
    return r;
}

static void block_hash_keeps_recurrent_states_where_mamba_cache_mode_says(void **state) {
    (void)state;
    need();
    const char *models[] = {g_rec, g_hyb};
    for (int i = 0; i < 2; i++) {
        assert_int_equal(second_hit(models[i], "all", NULL), 320);
        assert_int_equal(second_hit(models[i], "align", NULL), 0);     /* the only state is at 640 */
        assert_int_equal(second_hit(models[i], "align", "128"), 256);  /* states every 128 tokens */
    }
}

/* vLLM #40696: the hybrid block is raised until one layer's KV covers a Mamba
 * state page (1088 tokens for this model): prompts of ~725 tokens never fill
 * one, so nothing is ever cached; with the block left at 64 the shared
 * context hits. (States at every boundary, to test the block size alone.) */
static void hybrid_block_size_quirk_loses_every_hit_on_prompts_shorter_than_the_raised_block(void **state) {
    (void)state;
    need();
    char db[160];
    snprintf(db, sizeof db, "%s/q40696.sqlite", g_dir);
    for (int quirk = 1; quirk >= 0; quirk--) {
        hx_replay_opts o;
        hx_replay_opts_default(&o);
        o.sp.model_path = g_big;
        o.transcript_path = g_static;
        o.db_path = db;
        o.sp.policy = "block-hash";
        o.sp.quirks = quirk ? "hybrid-block-size" : "";
        o.sp.decode_n = 2;
        o.sp.quiet = true;
        hx_policy_args_set(&o.sp.policy_args, "--mamba-cache-mode", "all");
        hx_replay_summary sum;
        assert_int_equal(hx_replay_run(&o, NULL, &sum), 0);
    }
    assert_int_equal(q_int(db, "select block_size from runs where run_id = 1"), 1088);
    assert_int_equal(q_int(db, "select max(n_prompt) < 1088 from requests where run_id = 1"), 1);
    assert_int_equal(q_int(db, "select sum(n_reused) from requests where run_id = 1"), 0);
    assert_int_equal(q_int(db, "select block_size from runs where run_id = 2"), 64);
    assert_int_equal(q_int(db, "select count(*) from requests where run_id = 2 and turn > 0 and n_reused >= 512"), 2);
    assert_int_equal(q_int(db, "select count(*) from requests where logits_equal = 0 or state_equal = 0"), 0);
}

// ----------------------------------------------------------------------------
// radix

static void radix_rounds_matches_down_to_whole_pages(void **state) {
    (void)state;
    need();
    int32_t a[300], b[300];
    random_tokens(a, 300, 6);
    memcpy(b, a, sizeof a);
    b[201] ^= 1;  /* 201 tokens in common */
    const char *pages[] = {"1", "16", "64"};
    int32_t want[] = {201, 192, 192};
    for (int i = 0; i < 3; i++) {
        drv d;
        char err[256];
        hx_policy_args args = {0};
        set_arg(&args, "--page-size", pages[i]);
        assert_int_equal(drv_open(&d, g_llama, "radix", ENG_ALIGN_NONE, true, NULL, &args, err, sizeof err), ENG_OK);
        serve(&d, a, 300, NULL, 0);
        assert_int_equal(serve(&d, b, 300, NULL, 0), want[i]);
        drv_close(&d);
    }
    /* under --align chunk the reuse point is then floored to the grid */
    drv d;
    char err[256];
    assert_int_equal(drv_open(&d, g_llama, "radix", ENG_ALIGN_CHUNK, true, NULL, NULL, err, sizeof err), ENG_OK);
    serve(&d, a, 300, NULL, 0);
    assert_int_equal(serve(&d, b, 300, NULL, 0), 192);
    drv_close(&d);
}

/* MambaRadixCache: the first request through a branch point misses (no
 * state there) and leaves one; the next request through it hits. A model
 * without recurrent memory hits at once. */
static void radix_keeps_a_state_at_the_branch_point_for_the_next_request(void **state) {
    (void)state;
    need();
    int32_t a[500], b[500], c[500];
    random_tokens(a, 500, 7);
    memcpy(b, a, sizeof a);
    memcpy(c, a, sizeof a);
    random_tokens(b + 300, 200, 8);  /* 300 shared tokens, then each its own */
    random_tokens(c + 300, 200, 9);
    const char *models[] = {g_rec, g_hyb, g_llama};
    for (int i = 0; i < 3; i++) {
        drv d;
        char err[256];
        assert_int_equal(drv_open(&d, models[i], "radix", ENG_ALIGN_CHUNK, true, NULL, NULL, err, sizeof err), ENG_OK);
        assert_int_equal(serve(&d, a, 500, NULL, 0), 0);
        int32_t rb = serve(&d, b, 500, NULL, 0);
        if (i < 2) {
            assert_int_equal(rb, 0);  /* a's only state is at 448, past the branch */
            assert_non_null(strstr(d.note, "states wanted at 256"));
        } else {
            assert_int_equal(rb, 256);
        }
        assert_int_equal(serve(&d, c, 500, NULL, 0), 256);  /* the branch point's state */
        drv_close(&d);
    }
}

static void radix_evicts_the_least_recently_used_leaf_over_its_token_budget(void **state) {
    (void)state;
    need();
    drv d;
    char err[256];
    hx_policy_args args = {0};
    set_arg(&args, "--max-total-tokens", "1000");
    assert_int_equal(drv_open(&d, g_llama, "radix", ENG_ALIGN_CHUNK, true, NULL, &args, err, sizeof err), ENG_OK);
    int32_t a[600], b[600], c[600];
    random_tokens(a, 600, 10);
    random_tokens(b, 600, 11);
    random_tokens(c, 600, 12);
    serve(&d, a, 600, NULL, 0);
    serve(&d, b, 600, NULL, 0);  /* over 1000 tokens: a, the least recently used, goes */
    assert_int_equal(serve(&d, b, 600, NULL, 0), 576);
    assert_int_equal(serve(&d, a, 600, NULL, 0), 0);  /* and a comes back, pushing b out */
    assert_int_equal(serve(&d, a, 600, NULL, 0), 576);
    assert_int_equal(serve(&d, b, 600, NULL, 0), 0);
    (void)c;
    drv_close(&d);
}

/* SGLang #16521: a multi-turn conversation. Turn 1 is a 300-token prompt and
 * a 100-token answer; turn 2's prompt contains both. With the quirk the tree
 * holds the prompt only, so turn 2 reuses the prompt (floored to the grid);
 * without it, the answer too (up to its last token, whose KV a server never
 * computes). Decode-written rows are not bit-exact, so this runs with
 * --cap-prompt off (SGLang's own behaviour); with the cap both reuse the
 * prompt. */
static void prompt_key_quirk_leaves_the_generated_tokens_out_of_the_tree(void **state) {
    (void)state;
    need();
    int32_t conv[500];
    random_tokens(conv, 500, 13);
    int32_t want[2][2] = {{384, 256}, {256, 256}};  /* [cap][no quirk, quirk]: reuse of turn 2 */
    for (int cap = 0; cap < 2; cap++)
        for (int quirk = 0; quirk < 2; quirk++) {
            drv d;
            char err[256];
            assert_int_equal(drv_open(&d, g_llama, "radix", ENG_ALIGN_CHUNK, cap, quirk ? "prompt-key" : NULL, NULL,
                                      err, sizeof err), ENG_OK);
            serve(&d, conv, 300, conv + 300, 100);
            int32_t r = serve(&d, conv, 500, NULL, 0);
            assert_int_equal(r, quirk ? want[cap][1] : want[cap][0]);
            drv_close(&d);
        }
}

// ----------------------------------------------------------------------------
// Every policy, every preset: bit-identical to cold under --align chunk

static void every_policy_reuses_bit_identically_to_cold_on_llama_recurrent_and_hybrid(void **state) {
    (void)state;
    need();
    const char *models[] = {g_llama, g_rec, g_hyb};
    const char *policies[] = {"cold", "slot-lcp", "disk-anchor", "block-hash", "radix"};
    char db[160], kv[160];
    snprintf(db, sizeof db, "%s/every.sqlite", g_dir);
    snprintf(kv, sizeof kv, "%s/kv", g_dir);
    for (int m = 0; m < 3; m++)
        for (int p = 0; p < 5; p++) {
            hx_replay_opts o;
            hx_replay_opts_default(&o);
            o.sp.model_path = models[m];
            o.transcript_path = g_agent;
            o.db_path = db;
            o.sp.policy = policies[p];
            o.sp.normalize = "anthropic-cch";
            o.sp.decode_n = 4;
            o.sp.quiet = true;
            hx_policy_args_set(&o.sp.policy_args, "--cache-dir", kv);
            hx_policy_args_set(&o.sp.policy_args, "--fresh-cache", NULL);
            hx_policy_args_set(&o.sp.policy_args, "--slots", "2");  /* one per interleaved session */
            hx_replay_summary sum;
            assert_int_equal(hx_replay_run(&o, NULL, &sum), 0);
            assert_int_equal(sum.t.n_diverged, 0);
        }
    assert_int_equal(q_int(db, "select count(*) from runs"), 15);
    assert_int_equal(q_int(db, "select count(*) from requests where logits_equal = 0 or decode_equal = 0 or "
                               "state_equal is not 1"), 0);
    /* each policy but cold reused something on each model */
    assert_int_equal(q_int(db, "select count(*) from (select run_id from requests join runs using(run_id) where "
                               "policy != 'cold' group by run_id having sum(n_reused) > 0)"), 12);
    assert_int_equal(q_int(db, "select count(*) from requests join runs using(run_id) where policy = 'cold' and "
                               "(n_reused > 0 or cache_bytes != 0)"), 0);
    /* what each cache holds is recorded, and the paged ones record their block */
    assert_int_equal(q_int(db, "select count(*) from requests where cache_bytes is null or cache_entries is null"), 0);
    assert_int_equal(q_int(db, "select count(*) from runs where policy in ('block-hash', 'radix') and "
                               "(block_size is null or policy_opts is null)"), 0);
}

/* disk-anchor's live hit truncates the live sequence to the reuse point,
 * which a recurrent layer cannot do: a hybrid model's extension of the last
 * prompt is served from the disk checkpoints instead (it used to abort). */
static void disk_anchor_serves_a_hybrid_models_extension_from_disk(void **state) {
    (void)state;
    need();
    char db[160], kv[160];
    snprintf(db, sizeof db, "%s/da-hybrid.sqlite", g_dir);
    snprintf(kv, sizeof kv, "%s/kv-hybrid", g_dir);
    hx_replay_opts o;
    hx_replay_opts_default(&o);
    o.sp.model_path = g_hyb;
    o.transcript_path = g_loop;
    o.db_path = db;
    o.sp.policy = "disk-anchor";
    o.sp.normalize = "anthropic-cch";
    o.sp.decode_n = 2;
    o.sp.quiet = true;
    hx_policy_args_set(&o.sp.policy_args, "--cache-dir", kv);
    hx_policy_args_set(&o.sp.policy_args, "--fresh-cache", NULL);
    hx_policy_args_set(&o.sp.policy_args, "--waypoint-every", "256");
    hx_replay_summary sum;
    assert_int_equal(hx_replay_run(&o, NULL, &sum), 0);
    assert_int_equal(q_int(db, "select count(*) from requests where turn > 0 and n_reused > 0 and "
                               "note like '%disk kv cache hit%'"), 2);
    assert_int_equal(q_int(db, "select count(*) from requests where logits_equal = 0 or state_equal = 0"), 0);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(block_hash_reuses_the_blocks_before_a_change_and_recomputes_a_full_hits_last_block),
        cmocka_unit_test(block_hash_needs_a_block_size_on_the_grid_under_align_chunk),
        cmocka_unit_test(block_hash_evicts_the_least_recently_freed_sequences_tail_first),
        cmocka_unit_test(block_hash_keeps_recurrent_states_where_mamba_cache_mode_says),
        cmocka_unit_test(hybrid_block_size_quirk_loses_every_hit_on_prompts_shorter_than_the_raised_block),
        cmocka_unit_test(radix_rounds_matches_down_to_whole_pages),
        cmocka_unit_test(radix_keeps_a_state_at_the_branch_point_for_the_next_request),
        cmocka_unit_test(radix_evicts_the_least_recently_used_leaf_over_its_token_budget),
        cmocka_unit_test(prompt_key_quirk_leaves_the_generated_tokens_out_of_the_tree),
        cmocka_unit_test(every_policy_reuses_bit_identically_to_cold_on_llama_recurrent_and_hybrid),
        cmocka_unit_test(disk_anchor_serves_a_hybrid_models_extension_from_disk),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
