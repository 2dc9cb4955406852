/*
 * tests/test_policies.c: slot-lcp with memory that cannot be truncated
 * (recurrent and hybrid models): each quirk from an issue report shows its
 * bug, and the default shows the fix, bit-identical to cold.
 *
 *   full-reprocess     (seeds/002) every turn re-prefills the whole prompt;
 *                      fixed: the newest grid checkpoint at or below the
 *                      reusable prefix is restored.
 *   swa-threshold      (seeds/004) no checkpoint qualifies; only the host
 *                      prompt cache still works, while its snapshots fit.
 *   offgrid-checkpoint a checkpoint at the prompt's end, off the grid: the
 *                      suffix is prefilled in shifted chunks and the
 *                      comparator must catch the divergence.
 *
 * Models come from `kvreplay model synth --arch ...` (tiny presets with the
 * Llama SPM vocabulary from ../shared/data; skipped when absent). The
 * databases go to /tmp/kvr_policies_*, removed at the end unless KVR_KEEP is
 * set (to inspect a failure with sqlite3).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "fixtures.h"
#include "replay.h"
#include "sqlq.h"
#include "status.h"
#include "synth_transcript.h"
#include "transcript.h"

#define VOCAB "../shared/data/vocab/ggml-vocab-llama-spm.gguf"

static char g_dir[64], g_kvr[256], g_rec[160], g_hyb[160], g_agent[160], g_static[160];
static int g_ready;

static int synth_model(const char *arch, const char *path) {
    char cmd[768];
    snprintf(cmd, sizeof cmd, "%s model synth --arch %s --preset tiny --vocab %s --seed 3 -o %s 2>/dev/null", g_kvr,
             arch, VOCAB, path);
    return system(cmd);
}

static int setup(void **state) {
    (void)state;
    const char *b = getenv("BUILD");
    snprintf(g_kvr, sizeof g_kvr, "%s/kvreplay", b && *b ? b : "build");
    if (access(VOCAB, R_OK) != 0 || access(g_kvr, X_OK) != 0) return 0;
    snprintf(g_dir, sizeof g_dir, "/tmp/kvr_policies_XXXXXX");
    if (!mkdtemp(g_dir)) return -1;
    snprintf(g_rec, sizeof g_rec, "%s/recurrent.gguf", g_dir);
    snprintf(g_hyb, sizeof g_hyb, "%s/hybrid.gguf", g_dir);
    if (synth_model("recurrent", g_rec) != 0 || synth_model("hybrid", g_hyb) != 0) return -1;
    hx_synth_params p;
    hx_synth_params_init(&p, HX_SYNTH_AGENT);
    p.seed = 2;
    p.sessions = 1;
    p.turns = 4;
    p.system_bytes = 8000;
    p.tool_result_bytes = 300;
    snprintf(g_agent, sizeof g_agent, "%s/agent.jsonl", g_dir);
    if (fx_write_transcript(&p, g_agent) != 0) return -1;
    hx_synth_params_init(&p, HX_SYNTH_STATIC);
    p.seed = 4;
    p.turns = 3;
    p.base_bytes = 5000;  /* ~2530 tokens: the reuse point lies below the last grid point */
    snprintf(g_static, sizeof g_static, "%s/static.jsonl", g_dir);
    if (fx_write_transcript(&p, g_static) != 0) return -1;
    g_ready = 1;
    return 0;
}

static int teardown(void **state) {
    (void)state;
    return fx_rm(g_dir);
}

/* One replay into db (a new run); returns its run_id. */
static int64_t replay(const char *model, const char *tr, const char *db, const char *quirk, int64_t cache_ram,
                      int32_t every) {
    hx_replay_opts o;
    hx_replay_opts_default(&o);
    o.sp.model_path = model;
    o.transcript_path = tr;
    o.db_path = db;
    o.sp.decode_n = 4;
    o.sp.normalize = "anthropic-cch";
    o.sp.quirks = quirk ? quirk : "";
    hx_policy_args_set_num(&o.sp.policy_args, "--cache-ram", cache_ram);
    hx_policy_args_set_num(&o.sp.policy_args, "--checkpoint-every", every);
    o.sp.quiet = true;
    hx_replay_summary sum;
    assert_int_equal(hx_replay_run(&o, NULL, &sum), 0);
    return sum.run_id;
}

static void need(void) {
    if (!g_ready) skip();
}

// ----------------------------------------------------------------------------
// full-reprocess (seeds/002)

static void full_reprocess_quirk_reprefills_every_turn_of_a_recurrent_model(void **state) {
    (void)state;
    need();
    char db[160];
    snprintf(db, sizeof db, "%s/s002.sqlite", g_dir);
    replay(g_rec, g_agent, db, "full-reprocess", 0, 0);
    assert_int_equal(q_int(db, "select sum(n_reused) from requests where run_id = 1"), 0);
    assert_int_equal(q_int(db, "select count(*) from requests where run_id = 1 and turn > 0 and "
                               "note like '%forcing full prompt re-processing%'"), 3);
}

static void checkpoints_restore_reuse_of_recurrent_and_hybrid_models_bit_exactly(void **state) {
    (void)state;
    need();
    char db[160];
    snprintf(db, sizeof db, "%s/s002fix.sqlite", g_dir);
    replay(g_rec, g_agent, db, NULL, 0, 0);
    replay(g_hyb, g_agent, db, NULL, 0, 0);
    assert_int_equal(q_int(db, "select count(*) from requests where turn > 0 and n_reused = 0"), 0);
    assert_int_equal(q_int(db, "select count(*) from requests where turn > 0 and note like 'restored context checkpoint%'"), 6);
    assert_int_equal(q_int(db, "select count(*) from requests where n_reused % 64 != 0"), 0);
    assert_int_equal(q_int(db, "select count(*) from requests where logits_equal = 0 or decode_equal = 0"), 0);
    /* and the state left behind is the cold state, byte for byte */
    assert_int_equal(q_int(db, "select count(*) from requests where state_equal is not 1"), 0);
}

// ----------------------------------------------------------------------------
// swa-threshold (seeds/004)

static void swa_threshold_quirk_loses_reuse_and_erases_checkpoints_without_the_prompt_cache(void **state) {
    (void)state;
    need();
    char db[160];
    snprintf(db, sizeof db, "%s/s004.sqlite", g_dir);
    replay(g_hyb, g_static, db, "swa-threshold", 0, 256);
    assert_int_equal(q_int(db, "select sum(n_reused) from requests"), 0);
    assert_int_equal(q_int(db, "select count(*) from requests where turn > 0 and note like '%erased%checkpoints%'"), 2);
}

static void swa_threshold_quirk_still_reuses_through_the_prompt_cache_while_snapshots_fit(void **state) {
    (void)state;
    need();
    char db[160];
    snprintf(db, sizeof db, "%s/s004ram.sqlite", g_dir);
    replay(g_hyb, g_static, db, "swa-threshold", (int64_t)256 << 20, 256);
    assert_int_equal(q_int(db, "select count(*) from requests where turn > 0 and n_reused > 0 and "
                               "note like 'prompt cache%'"), 2);
    assert_int_equal(q_int(db, "select count(*) from requests where logits_equal = 0"), 0);
}

/* The scale dependence of seeds/004 in miniature: a budget that holds the
 * snapshot the request needs, but not the prompt's full state, caches
 * nothing, so the quirk loses reuse once the context outgrows --cache-ram;
 * without the quirk the context checkpoints still give it. */
static void swa_threshold_quirk_fails_once_the_prompt_state_outgrows_the_cache_budget(void **state) {
    (void)state;
    need();
    char db[160], sql[256];
    snprintf(db, sizeof db, "%s/s004scale.sqlite", g_dir);
    replay(g_hyb, g_static, db, "swa-threshold", (int64_t)256 << 20, 256);
    int64_t need_bytes = q_int(db, "select max(bytes_restored) from requests where run_id = 1");
    assert_true(need_bytes > 0);  /* the 2304-token snapshot; the prompt's state at 2496 is larger */
    replay(g_hyb, g_static, db, "swa-threshold", need_bytes + 1, 256);
    assert_int_equal(q_int(db, "select sum(n_reused) from requests where run_id = 2"), 0);
    replay(g_hyb, g_static, db, NULL, need_bytes + 1, 256);
    snprintf(sql, sizeof sql, "select count(*) from requests where run_id = 3 and turn > 0 and n_reused > 0");
    assert_int_equal(q_int(db, sql), 2);
    assert_int_equal(q_int(db, "select count(*) from requests where logits_equal = 0 or decode_equal = 0"), 0);
}

static void without_the_quirk_checkpoints_give_reuse_at_any_length(void **state) {
    (void)state;
    need();
    char db[160];
    snprintf(db, sizeof db, "%s/s004fix.sqlite", g_dir);
    replay(g_hyb, g_static, db, NULL, 0, 256);
    assert_int_equal(q_int(db, "select count(*) from requests where turn > 0 and n_reused > 0 and "
                               "note like 'restored context checkpoint%'"), 2);
    assert_int_equal(q_int(db, "select count(*) from requests where logits_equal = 0 or decode_equal = 0"), 0);
}

// ----------------------------------------------------------------------------
// offgrid-checkpoint: the comparator catches it
//
// The hybrid model, not the recurrent one: the tiny recurrent preset's
// decay forgets the shifted SSD blocks' rounding within two chunks, so its
// state differs (tests/test_hybrid.c catches that with eng_seq_compare) while
// the last prompt logits can still match. The hybrid's attention layers keep
// the difference in the logits.

static void offgrid_checkpoints_shift_the_suffix_chunks_and_the_comparator_catches_it(void **state) {
    (void)state;
    need();
    char db[160];
    snprintf(db, sizeof db, "%s/offgrid.sqlite", g_dir);
    replay(g_hyb, g_agent, db, "offgrid-checkpoint", 0, 0);
    /* the restores happen off the grid ... */
    assert_true(q_int(db, "select count(*) from requests where turn > 0 and n_reused % 64 != 0") > 0);
    /* ... and the comparator reports the difference (memcmp), with its first index */
    assert_true(q_int(db, "select count(*) from requests where turn > 0 and logits_equal = 0 and "
                          "first_diff_index >= 0") > 0);
    /* the same transcript on the grid is bit-identical */
    replay(g_hyb, g_agent, db, NULL, 0, 0);
    assert_int_equal(q_int(db, "select count(*) from requests where run_id = 2 and logits_equal = 0"), 0);
}

/* The recurrent model's off-grid restores: the tiny preset's decay can wash
 * the shifted rounding out before the last prompt token, so the logits can
 * match cold while the state left behind does not. The state comparison
 * catches that, and `check` counts it as a divergence (exit 1). */
static void offgrid_state_divergence_is_caught_even_where_the_logits_match(void **state) {
    (void)state;
    need();
    char db[160], cmd[1024];
    snprintf(db, sizeof db, "%s/offgrid-rec.sqlite", g_dir);
    replay(g_rec, g_agent, db, "offgrid-checkpoint", 0, 0);
    assert_true(q_int(db, "select count(*) from requests where turn > 0 and n_reused % 64 != 0") > 0);
    assert_true(q_int(db, "select count(*) from requests where state_equal = 0") > 0);
    assert_int_equal(q_int(db, "select count(*) from requests where state_equal is null"), 0);
    print_message("recurrent, off-grid restores: %lld of %lld follow-up requests have identical logits and a "
                  "different state\n",
                  (long long)q_int(db, "select count(*) from requests where logits_equal = 1 and decode_equal = 1 "
                                       "and state_equal = 0"),
                  (long long)q_int(db, "select count(*) from requests where turn > 0"));
    snprintf(cmd, sizeof cmd, "%s check -m %s -t %s --db %s/check.sqlite --quirk offgrid-checkpoint "
             "--normalize anthropic-cch --decode 4 >/dev/null 2>&1", g_kvr, g_rec, g_agent, g_dir);
    int rc = system(cmd);
    assert_true(WIFEXITED(rc) && WEXITSTATUS(rc) == 1);
    replay(g_rec, g_agent, db, NULL, 0, 0);
    assert_int_equal(q_int(db, "select count(*) from requests where run_id = 2 and state_equal is not 1"), 0);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(full_reprocess_quirk_reprefills_every_turn_of_a_recurrent_model),
        cmocka_unit_test(checkpoints_restore_reuse_of_recurrent_and_hybrid_models_bit_exactly),
        cmocka_unit_test(swa_threshold_quirk_loses_reuse_and_erases_checkpoints_without_the_prompt_cache),
        cmocka_unit_test(swa_threshold_quirk_still_reuses_through_the_prompt_cache_while_snapshots_fit),
        cmocka_unit_test(swa_threshold_quirk_fails_once_the_prompt_state_outgrows_the_cache_budget),
        cmocka_unit_test(without_the_quirk_checkpoints_give_reuse_at_any_length),
        cmocka_unit_test(offgrid_checkpoints_shift_the_suffix_chunks_and_the_comparator_catches_it),
        cmocka_unit_test(offgrid_state_divergence_is_caught_even_where_the_logits_match),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
