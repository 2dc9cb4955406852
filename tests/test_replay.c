/*
 * tests/test_replay.c: the replay loop end to end: policies, comparison,
 * the SQLite rows, `check` exit codes with planted faults, normalization,
 * the disk anchor, SIGKILL + --resume, and the experiment runner's shared
 * cold cache.
 *
 * Fixtures are made here: a tiny synthetic model with the real Llama SPM
 * vocabulary (../shared/data/vocab; the tests skip without it) and seeded
 * synthetic transcripts, all under a temporary directory. CLI tests run
 * $BUILD/kvreplay (default build/kvreplay).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <fcntl.h>
#include <signal.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "coldcache.h"
#include "fixtures.h"
#include "model.h"
#include "replay.h"
#include "sqlq.h"
#include "status.h"
#include "synth.h"
#include "synth_transcript.h"
#include "transcript.h"

#define VOCAB "../shared/data/vocab/ggml-vocab-llama-spm.gguf"

static char g_dir[64];
static char g_model[128];
static char g_kvr[256];

// ----------------------------------------------------------------------------
// Fixtures

static int setup(void **state) {
    (void)state;
    if (access(VOCAB, R_OK) != 0) return 0;
    snprintf(g_dir, sizeof g_dir, "/tmp/kvr_replay_XXXXXX");
    if (!mkdtemp(g_dir)) return -1;
    snprintf(g_model, sizeof g_model, "%s/tiny.gguf", g_dir);
    if (fx_tiny_model_vocab(g_model, 5, VOCAB) != 0) return -1;
    const char *b = getenv("BUILD");
    snprintf(g_kvr, sizeof g_kvr, "%s/kvreplay", b && *b ? b : "build");
    return 0;
}

static int teardown(void **state) {
    (void)state;
    if (g_dir[0]) {
        char cmd[128];
        snprintf(cmd, sizeof cmd, "rm -rf %s", g_dir);
        if (system(cmd) != 0) return -1;
    }
    return 0;
}

static void need_fixtures(void) {
    if (access(VOCAB, R_OK) != 0) skip();  /* ../shared/data absent */
}

static void need_cli(void) {
    need_fixtures();
    if (access(g_kvr, X_OK) != 0) skip();
}

/* Writes a synthetic transcript and returns its path (static buffer per name). */
static const char *transcript(const char *name, hx_synth_params *p) {
    static char paths[8][160];
    static int k;
    char *path = paths[k++ % 8];
    snprintf(path, 160, "%s/%s.jsonl", g_dir, name);
    hx_transcript t;
    char err[256];
    assert_int_equal(hx_synth_transcript(p, &t, err, sizeof err), ENG_OK);
    assert_int_equal(hx_transcript_write(path, &t, err, sizeof err), ENG_OK);
    hx_transcript_free(&t);
    return path;
}

static const char *extend_transcript(void) {
    hx_synth_params p;
    hx_synth_params_init(&p, HX_SYNTH_EXTEND);
    p.seed = 11;
    p.turns = 4;
    p.base_bytes = 900;
    p.step_bytes = 300;
    return transcript("extend", &p);
}

static const char *agent_transcript(void) {
    hx_synth_params p;
    hx_synth_params_init(&p, HX_SYNTH_AGENT);
    p.seed = 12;
    p.sessions = 1;
    p.turns = 3;
    p.system_bytes = 8000;
    p.tool_result_bytes = 300;
    return transcript("agent", &p);
}

static void replay_ok(hx_replay_opts *o) {
    o->sp.quiet = true;
    hx_replay_summary sum;
    assert_int_equal(hx_replay_run(o, NULL, &sum), 0);
}

static hx_replay_opts opts(const char *tr, const char *db) {
    hx_replay_opts o;
    hx_replay_opts_default(&o);
    o.sp.model_path = g_model;
    o.transcript_path = tr;
    o.db_path = db;
    o.sp.decode_n = 6;
    return o;
}

/* Runs a shell command, captures stdout into out, returns the exit code. */
static int run(char *out, size_t cap, const char *fmt, ...) {
    char cmd[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(cmd, sizeof cmd, fmt, ap);
    va_end(ap);
    FILE *f = popen(cmd, "r");
    assert_non_null(f);
    size_t n = out ? fread(out, 1, cap - 1, f) : 0;
    if (out) out[n] = '\0';
    else { char sink[4096]; while (fread(sink, 1, sizeof sink, f) > 0) {} }
    int st = pclose(f);
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128;
}

// ----------------------------------------------------------------------------
// Comparison through the policies

static void chunk_aligned_reuse_is_bit_identical_with_both_kernels_and_precisions(void **state) {
    (void)state;
    need_fixtures();
    const char *tr = extend_transcript();
    const char *kernels[] = {"blas", "ref"}, *precs[] = {"fp32", "bf16"};
    char db[160];
    snprintf(db, sizeof db, "%s/aligned.sqlite", g_dir);
    for (int k = 0; k < 2; k++)
        for (int p = 0; p < 2; p++) {
            hx_replay_opts o = opts(tr, db);
            eng_kernel_parse(kernels[k], &o.sp.num.kernel);
            eng_precision_parse(precs[p], &o.sp.num.precision);
            replay_ok(&o);
        }
    assert_int_equal(q_int(db, "select count(*) from runs"), 4);
    assert_int_equal(q_int(db, "select count(*) from requests"), 16);
    assert_int_equal(q_int(db, "select count(*) from requests where logits_equal = 0 or decode_equal = 0"), 0);
    /* reuse really happened, on the grid, capped at the previous prompt */
    assert_int_equal(q_int(db, "select count(*) from requests where turn > 0 and n_reused = 0"), 0);
    assert_int_equal(q_int(db, "select count(*) from requests where n_reused % 64 != 0"), 0);
    assert_int_equal(q_int(db, "select count(*) from steps where logits_equal = 0"), 0);
}

static void cold_policy_reuses_nothing_and_matches_cold(void **state) {
    (void)state;
    need_fixtures();
    char db[160];
    snprintf(db, sizeof db, "%s/cold.sqlite", g_dir);
    hx_replay_opts o = opts(extend_transcript(), db);
    o.sp.policy = "cold";
    replay_ok(&o);
    assert_int_equal(q_int(db, "select sum(n_reused) from requests"), 0);
    assert_int_equal(q_int(db, "select min(logits_equal) from requests"), 1);
}

static void cap_prompt_off_reuses_tokens_written_by_decode(void **state) {
    (void)state;
    need_fixtures();
    char db[160];
    snprintf(db, sizeof db, "%s/nocap.sqlite", g_dir);
    const char *tr = extend_transcript();
    hx_replay_opts on = opts(tr, db), off = opts(tr, db);
    off.sp.cap_prompt = false;
    replay_ok(&on);
    replay_ok(&off);
    /* with the cap, reuse never passes the previous prompt; without it, it does */
    int64_t more = q_int(db, "select count(*) from requests a join requests b on a.session = b.session and "
                             "a.turn = b.turn and a.run_id = 1 and b.run_id = 2 where b.n_reused > a.n_reused");
    assert_true(more > 0);
    assert_int_equal(q_int(db, "select count(*) from requests r join requests p on r.run_id = p.run_id and "
                               "r.session = p.session and r.turn = p.turn + 1 where r.run_id = 1 and "
                               "r.n_reused > p.n_prompt"), 0);
}

static void normalization_restores_reuse_and_the_store_names_where_the_prefix_broke(void **state) {
    (void)state;
    need_fixtures();
    char db[160];
    snprintf(db, sizeof db, "%s/cch.sqlite", g_dir);
    const char *tr = agent_transcript();
    hx_replay_opts raw = opts(tr, db), norm = opts(tr, db);
    raw.sp.decode_n = norm.sp.decode_n = 1;
    norm.sp.normalize = "anthropic-cch";
    replay_ok(&raw);
    replay_ok(&norm);
    assert_int_equal(q_int(db, "select sum(n_reused) from requests where run_id = 1"), 0);
    assert_int_equal(q_int(db, "select count(*) from requests where run_id = 1 and turn > 0 and "
                               "miss_where like 'system block 0%' and miss_text like '%cch=%'"), 2);
    assert_int_equal(q_int(db, "select count(*) from requests where run_id = 2 and turn > 0 and n_reused > 1000"), 2);
    assert_int_equal(q_int(db, "select normalize = 'anthropic-cch' from runs where run_id = 2"), 1);
    assert_int_equal(q_int(db, "select min(logits_equal) from requests"), 1);
}

// ----------------------------------------------------------------------------
// check: exit codes, and the faults it must catch

static void check_exits_0_when_every_reused_run_is_bit_identical(void **state) {
    (void)state;
    need_cli();
    char out[4096];
    int rc = run(out, sizeof out, "%s check -m %s -t %s --decode 4 2>/dev/null", g_kvr, g_model, extend_transcript());
    assert_int_equal(rc, 0);
    assert_non_null(strstr(out, "OK: 4 requests, all bit-identical to cold"));
}

static void check_finds_a_planted_one_ulp_flip_at_its_index(void **state) {
    (void)state;
    need_cli();
    char out[4096];
    int rc = run(out, sizeof out, "%s check -m %s -t %s --decode 4 --inject-fault ulp-flip --fault-request 2 "
                 "--fault-index 123 2>/dev/null", g_kvr, g_model, extend_transcript());
    assert_int_equal(rc, 1);
    assert_non_null(strstr(out, "turn 2 (request 2): logits differ at index 123"));
    assert_non_null(strstr(out, "ULP distance 1,"));
    assert_non_null(strstr(out, "cold=0x") ? strstr(out, "cold=0x") : strstr(out, "cold=-0x"));
}

static void check_catches_a_corrupted_kv_row_in_the_restored_state(void **state) {
    (void)state;
    need_cli();
    char out[4096];
    int rc = run(out, sizeof out, "%s check -m %s -t %s --decode 4 --inject-fault kv-row --fault-request 1 2>/dev/null",
                 g_kvr, g_model, extend_transcript());
    assert_int_equal(rc, 1);
    assert_non_null(strstr(out, "DIVERGED: session extend-000 turn 1"));
    /* the rewritten row is also a different state after the prompt */
    char db[200];
    snprintf(db, sizeof db, "%s/kvrow.sqlite", g_dir);
    rc = run(out, sizeof out, "%s replay -m %s -t %s --db %s --decode 4 --inject-fault kv-row --fault-request 1 2>/dev/null",
             g_kvr, g_model, extend_transcript(), db);
    assert_int_equal(rc, 0);
    assert_int_equal(q_int(db, "select state_equal from requests where req_index = 1"), 0);
    assert_int_equal(q_int(db, "select count(*) from requests where req_index != 1 and state_equal is not 1"), 0);
}

// ----------------------------------------------------------------------------
// --repeat and the modeled TTFT

static void repeat_stores_median_min_max_and_the_modeled_ttft_is_the_priced_work(void **state) {
    (void)state;
    need_fixtures();
    char db[160];
    snprintf(db, sizeof db, "%s/repeat.sqlite", g_dir);
    hx_replay_opts o = opts(extend_transcript(), db);
    o.sp.repeat = 3;
    o.sp.num.kernel = ENG_KERNEL_REF;
    o.sp.num.n_threads = 2;
    replay_ok(&o);
    assert_int_equal(q_int(db, "select n_repeat from runs"), 3);
    assert_int_equal(q_int(db, "select price_source = 'measured' and price_gflops = calib_gflops and "
                               "price_restore_gbs = calib_restore_gbs and calib_gflops > 0 from runs"), 1);
    assert_int_equal(q_int(db, "select count(*) from requests where ttft_cold_min_ms <= ttft_cold_ms and "
                               "ttft_cold_ms <= ttft_cold_max_ms and ttft_reuse_min_ms <= ttft_reuse_ms and "
                               "ttft_reuse_ms <= ttft_reuse_max_ms"), 4);
    /* the modeled TTFT is the request's work at the run's price, to the last bit of a double */
    assert_int_equal(q_int(db, "select count(*) from requests join runs using(run_id) where "
                               "abs(model_cold_ms - flops_cold / (price_gflops * 1e9) * 1e3) <= 1e-12 * model_cold_ms "
                               "and abs(model_reuse_ms - (flops_reuse / (price_gflops * 1e9) + "
                               "coalesce(bytes_restored, 0) / (price_restore_gbs * 1e9)) * 1e3) <= 1e-9"), 4);
    assert_int_equal(q_int(db, "select min(logits_equal) from requests"), 1);
    /* without --repeat the band columns stay NULL */
    hx_replay_opts one = opts(extend_transcript(), db);
    replay_ok(&one);
    assert_int_equal(q_int(db, "select count(ttft_cold_min_ms) + count(ttft_reuse_max_ms) from requests where run_id = 2"),
                     0);
    assert_int_equal(q_int(db, "select count(model_cold_ms) from requests where run_id = 2"), 4);
}

static void a_reference_calibration_makes_the_modeled_ttft_identical_between_runs(void **state) {
    (void)state;
    need_fixtures();
    char db[160], cal[160];
    snprintf(db, sizeof db, "%s/calib.sqlite", g_dir);
    snprintf(cal, sizeof cal, "%s/calibration.json", g_dir);
    unlink(cal);
    for (int k = 0; k < 2; k++) {
        hx_replay_opts o = opts(extend_transcript(), db);
        o.sp.calibration = cal;
        replay_ok(&o);
    }
    assert_int_equal(access(cal, R_OK), 0);
    assert_int_equal(q_int(db, "select count(distinct price_gflops) from runs"), 1);
    assert_int_equal(q_int(db, "select count(*) from runs where price_source like 'reference %calibration.json'"), 2);
    /* every request's modeled TTFTs are the same doubles in both runs */
    assert_int_equal(q_int(db, "select count(*) from requests a join requests b on a.session = b.session and "
                               "a.turn = b.turn and a.run_id = 1 and b.run_id = 2 where a.model_cold_ms = b.model_cold_ms "
                               "and a.model_reuse_ms = b.model_reuse_ms"), 4);
    /* another thread count is another configuration: a second entry */
    hx_replay_opts t2 = opts(extend_transcript(), db);
    t2.sp.calibration = cal;
    t2.sp.num.n_threads = 2;
    replay_ok(&t2);
    char out[256];
    assert_int_equal(run(out, sizeof out, "grep -c '\"threads\"' %s", cal), 0);
    assert_int_equal(atoi(out), 2);
}

static void a_malformed_calibration_file_is_refused_naming_the_field(void **state) {
    (void)state;
    need_cli();
    char cal[160], db[160], out[512];
    snprintf(cal, sizeof cal, "%s/bad-calibration.json", g_dir);
    snprintf(db, sizeof db, "%s/badcal.sqlite", g_dir);
    FILE *f = fopen(cal, "w");
    assert_non_null(f);
    fputs("{\"format\": \"kvreplay-calibration\", \"version\": 1, \"entries\": [{\"model_sha256\": \"x\", "
          "\"kernel\": \"blas\", \"precision\": \"fp32\", \"align\": \"chunk\", \"threads\": 1, \"chunk\": 64, "
          "\"ubatch\": 512, \"gflops\": -3, \"restore_gbs\": 1}]}\n", f);
    fclose(f);
    int rc = run(out, sizeof out, "%s replay -m %s -t %s --db %s --decode 1 --calibration %s 2>&1", g_kvr, g_model,
                 extend_transcript(), db, cal);
    assert_int_equal(rc, 2);
    assert_non_null(strstr(out, "bad-calibration.json: entries[0].gflops: expected a positive number"));
}

static void a_repetition_with_other_bits_is_caught(void **state) {
    (void)state;
    need_cli();
    char out[1024], db[160];
    snprintf(db, sizeof db, "%s/repflip.sqlite", g_dir);
    int rc = run(out, sizeof out, "%s replay -m %s -t %s --db %s --decode 2 --repeat 2 --inject-fault repeat-flip "
                 "--fault-request 2 --fault-index 77 2>&1", g_kvr, g_model, extend_transcript(), db);
    assert_int_equal(rc, 3);
    assert_non_null(strstr(out, "turn 2: cold prefill, repetition 2 of --repeat: logit 77 is"));
    assert_non_null(strstr(out, "(the engine is not deterministic)"));
    assert_int_equal(q_int(db, "select count(*) from requests"), 2);  /* the requests before it are kept */
    assert_int_equal(q_int(db, "select status = 'failed' from runs"), 1);
}

static void bench_rejects_a_bad_integer_list_naming_the_flag(void **state) {
    (void)state;
    need_cli();
    char err[1024];
    assert_int_equal(run(err, sizeof err, "%s bench -m %s --sweep-chunks 16,x64 2>&1", g_kvr, g_model), 2);
    assert_non_null(strstr(err, "--sweep-chunks: expected at most 32 comma-separated integers"));
    assert_int_equal(run(err, sizeof err, "%s bench --checkpoints -m %s --lengths 2048,0 2>&1", g_kvr, g_model), 2);
    assert_non_null(strstr(err, "--lengths: expected"));
}

static void check_rejects_a_bad_transcript_line_with_file_line_and_field(void **state) {
    (void)state;
    need_cli();
    char path[160], err[4096];
    snprintf(path, sizeof path, "%s/bad.jsonl", g_dir);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs("{\"v\":1,\"session\":\"s\",\"turn\":0,\"prompt\":\"hello world\"}\n", f);
    fputs("{\"v\":1,\"session\":\"s\",\"turn\":1,\"prompt\":42}\n", f);
    fclose(f);
    int rc = run(err, sizeof err, "%s check -m %s -t %s 2>&1", g_kvr, g_model, path);
    assert_int_equal(rc, 2);
    char want[200];
    snprintf(want, sizeof want, "%s:2: prompt", path);
    assert_non_null(strstr(err, want));
    rc = run(err, sizeof err, "%s check -m %s/missing.gguf -t %s 2>&1", g_kvr, g_dir, path);
    assert_int_equal(rc, 2);
    rc = run(err, sizeof err, "%s replay -m %s -t %s --db %s/x.sqlite --chunk 0 2>&1", g_kvr, g_model, path, g_dir);
    assert_int_equal(rc, 2);
    assert_non_null(strstr(err, "--chunk"));
}

// ----------------------------------------------------------------------------
// disk-anchor: seed 000's self-locking loop, and its fix

static void disk_anchor_quirk_stays_on_the_waypoint_and_the_fix_returns_to_the_anchor(void **state) {
    (void)state;
    need_fixtures();
    hx_synth_params sp;
    hx_synth_params_init(&sp, HX_SYNTH_AGENT);
    sp.seed = 7;
    sp.sessions = 6;
    sp.turns = 2;
    sp.fresh_sessions = true;
    sp.env_last = true;
    sp.system_bytes = 9000;
    sp.tool_result_bytes = 200;
    sp.commit_rate = 0.5;
    const char *tr = transcript("fresh", &sp);
    char db[160], cache_q[160], cache_f[160];
    snprintf(db, sizeof db, "%s/anchor.sqlite", g_dir);
    snprintf(cache_q, sizeof cache_q, "%s/kv-quirk", g_dir);
    snprintf(cache_f, sizeof cache_f, "%s/kv-fixed", g_dir);
    hx_replay_opts q = opts(tr, db), fx = opts(tr, db);
    q.sp.policy = fx.sp.policy = "disk-anchor";
    q.sp.normalize = fx.sp.normalize = "anthropic-cch";
    q.sp.decode_n = fx.sp.decode_n = 1;
    hx_policy_args_set_num(&q.sp.policy_args, "--waypoint-every", 1536);
    hx_policy_args_set_num(&fx.sp.policy_args, "--waypoint-every", 1536);
    q.sp.quirks = "anchor-cold-only";
    hx_policy_args_set(&q.sp.policy_args, "--cache-dir", cache_q);
    hx_policy_args_set(&fx.sp.policy_args, "--cache-dir", cache_f);
    replay_ok(&q);
    replay_ok(&fx);
    /* some fresh session hit the waypoint below a changed block (the precondition) */
    assert_true(q_int(db, "select count(*) from requests where run_id = 1 and turn = 0 and n_reused = 1536") > 0);
    /* quirk: once a session hit the waypoint, the anchor is never written again, and every later fresh
     * session hits at most the waypoint */
    assert_int_equal(q_int(db, "select count(*) from requests where run_id = 1 and turn = 0 and n_reused > 0 "
                               "and anchor_pos > 0"), 0);
    int64_t first = q_int(db, "select min(req_index) from requests where run_id = 1 and turn = 0 and n_reused = 1536");
    char sql[300];
    snprintf(sql, sizeof sql, "select count(*) from requests where run_id = 1 and turn = 0 and req_index > %lld "
             "and n_reused > 1536", (long long)first);
    assert_int_equal(q_int(db, sql), 0);
    /* fix: a hit below the anchor writes the anchor in the same prefill ... */
    assert_true(q_int(db, "select count(*) from requests where run_id = 2 and turn = 0 and n_reused = 1536 "
                          "and anchor_pos > 1536") > 0);
    /* ... so some later fresh session restores the anchor itself (n_reused = its anchor, past the waypoint) */
    assert_true(q_int(db, "select count(*) from requests where run_id = 2 and turn = 0 and n_reused > 1536") > 0);
    assert_true(q_int(db, "select sum(n_prefilled) from requests where run_id = 2 and turn = 0") <
                q_int(db, "select sum(n_prefilled) from requests where run_id = 1 and turn = 0"));
    assert_int_equal(q_int(db, "select min(logits_equal) from requests"), 1);
}

// ----------------------------------------------------------------------------
// Interrupted runs: SIGKILL, then --resume

static void resume_after_sigkill_completes_the_run_without_duplicates(void **state) {
    (void)state;
    need_cli();
    hx_synth_params p;
    hx_synth_params_init(&p, HX_SYNTH_EXTEND);
    p.seed = 21;
    p.turns = 10;
    p.base_bytes = 2500;
    p.step_bytes = 300;
    const char *tr = transcript("long", &p);
    char db[160], ref[160];
    snprintf(db, sizeof db, "%s/killed.sqlite", g_dir);
    snprintf(ref, sizeof ref, "%s/whole.sqlite", g_dir);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        int fd = open("/dev/null", 1);
        if (fd >= 0) { dup2(fd, 1); dup2(fd, 2); }
        execl(g_kvr, "kvreplay", "replay", "-m", g_model, "-t", tr, "--db", db, "--decode", "30", (char *)NULL);
        _exit(127);
    }
    int64_t n = 0;
    for (int tries = 0; tries < 6000 && n < 3; tries++) {  /* wait for 3 committed requests (at most 60 s) */
        usleep(10000);
        if (access(db, F_OK) != 0) continue;
        sqlite3 *h = NULL;
        if (sqlite3_open_v2(db, &h, SQLITE_OPEN_READONLY, NULL) == SQLITE_OK) {
            sqlite3_stmt *st = NULL;
            if (sqlite3_prepare_v2(h, "select count(*) from requests", -1, &st, NULL) == SQLITE_OK &&
                sqlite3_step(st) == SQLITE_ROW)
                n = sqlite3_column_int64(st, 0);
            sqlite3_finalize(st);
        }
        sqlite3_close(h);
    }
    kill(pid, SIGKILL);
    int status;
    waitpid(pid, &status, 0);
    assert_true(n >= 3);
    int64_t before = q_int(db, "select count(*) from requests");
    assert_true(before < 10);  /* it really was interrupted */
    assert_int_equal(q_int(db, "select status = 'running' from runs"), 1);
    assert_int_equal(run(NULL, 0, "%s replay -m %s -t %s --db %s --decode 30 --resume --quiet 2>/dev/null", g_kvr,
                         g_model, tr, db), 0);
    assert_int_equal(q_int(db, "select count(*) from runs"), 1);
    assert_int_equal(q_int(db, "select count(*) from requests"), 10);
    assert_int_equal(q_int(db, "select count(distinct session || '/' || turn) from requests"), 10);
    assert_int_equal(q_int(db, "select count(*) from steps"), 10 * 30);
    assert_int_equal(q_int(db, "select status = 'done' from runs"), 1);
    /* the resumed requests saw the same cache as an uninterrupted run */
    assert_int_equal(run(NULL, 0, "%s replay -m %s -t %s --db %s --decode 30 --quiet 2>/dev/null", g_kvr, g_model, tr,
                         ref), 0);
    char sql[512];
    snprintf(sql, sizeof sql, "attach '%s' as w; select count(*) from requests a join w.requests b using (session, turn) "
             "where a.n_reused = b.n_reused and a.logits_equal = b.logits_equal and a.n_prompt = b.n_prompt", ref);
    assert_int_equal(q_int(db, sql), 10);
}

// ----------------------------------------------------------------------------
// Experiments: variants share the cold run

static void experiment_runs_every_variant_and_computes_each_cold_run_once(void **state) {
    (void)state;
    need_cli();
    char spec[160], db[160];
    snprintf(spec, sizeof spec, "%s/spec.json", g_dir);
    snprintf(db, sizeof db, "%s/exp.sqlite", g_dir);
    FILE *f = fopen(spec, "w");
    assert_non_null(f);
    fprintf(f, "{\"name\": \"t\", \"vars\": {\"demo\": {\"turns\": 3}, \"full\": {\"turns\": 5}},\n"
               " \"models\": {\"m\": {\"path\": \"%s\"}},\n"
               " \"transcripts\": {\"x\": {\"synth\": [\"--scenario\", \"extend\", \"--turns\", \"${turns}\", "
               "\"--base-bytes\", \"700\", \"--step-bytes\", \"200\", \"--seed\", \"1\"]}},\n"
               " \"runs\": [{\"variant\": \"slot\", \"model\": \"m\", \"transcript\": \"x\", \"args\": [\"--decode\", \"4\"]},\n"
               "          {\"variant\": \"cold\", \"model\": \"m\", \"transcript\": \"x\", \"args\": [\"--decode\", \"4\", "
               "\"--policy\", \"cold\"]},\n"
               "          {\"variant\": \"sweep\", \"model\": \"m\", \"transcript\": \"x\", \"sweep\": {\"name\": \"chunk\", "
               "\"values\": [32, 64]}, \"args\": [\"--decode\", \"4\", \"--chunk\", \"${chunk}\"]}]}\n", g_model);
    fclose(f);
    assert_int_equal(run(NULL, 0, "%s experiment %s --db %s --cache-root %s/cache 2>/dev/null", g_kvr, spec, db, g_dir), 0);
    assert_int_equal(q_int(db, "select count(*) from runs where experiment = 't'"), 4);
    assert_int_equal(q_int(db, "select count(*) from requests"), 12);
    /* every run records the transcript generator's seed */
    assert_int_equal(q_int(db, "select count(*) from runs where seed is not 1"), 0);
    /* the cold variant reused the slot variant's cold runs (same prompts, numerics and grid) */
    assert_int_equal(q_int(db, "select count(*) from requests r join runs u using (run_id) where u.variant = 'cold' "
                               "and r.cold_shared = 1"), 3);
    assert_int_equal(q_int(db, "select count(*) from requests a join requests b using (session, turn) "
                               "where a.run_id = 1 and b.run_id = 2 and a.ttft_cold_ms = b.ttft_cold_ms"), 3);
    /* the chunk sweep recorded its knob, and chunk 32 is a different grid: not shared with chunk 64 */
    assert_int_equal(q_int(db, "select count(*) from runs where sweep_name = 'chunk' and sweep_value in (32, 64) "
                               "and chunk = sweep_value"), 2);
    assert_int_equal(q_int(db, "select count(*) from requests r join runs u using (run_id) where u.sweep_value = 32 "
                               "and r.cold_shared = 1"), 0);
    assert_int_equal(q_int(db, "select count(*) from requests where logits_equal = 0"), 0);
    /* --scale full picks the other vars */
    assert_int_equal(run(NULL, 0, "%s experiment %s --db %s/full.sqlite --scale full --only slot --cache-root %s/cache "
                         "2>/dev/null", g_kvr, spec, g_dir, g_dir), 0);
    char full[160];
    snprintf(full, sizeof full, "%s/full.sqlite", g_dir);
    assert_int_equal(q_int(full, "select count(*) from requests"), 5);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(chunk_aligned_reuse_is_bit_identical_with_both_kernels_and_precisions),
        cmocka_unit_test(cold_policy_reuses_nothing_and_matches_cold),
        cmocka_unit_test(cap_prompt_off_reuses_tokens_written_by_decode),
        cmocka_unit_test(normalization_restores_reuse_and_the_store_names_where_the_prefix_broke),
        cmocka_unit_test(check_exits_0_when_every_reused_run_is_bit_identical),
        cmocka_unit_test(check_finds_a_planted_one_ulp_flip_at_its_index),
        cmocka_unit_test(check_catches_a_corrupted_kv_row_in_the_restored_state),
        cmocka_unit_test(check_rejects_a_bad_transcript_line_with_file_line_and_field),
        cmocka_unit_test(disk_anchor_quirk_stays_on_the_waypoint_and_the_fix_returns_to_the_anchor),
        cmocka_unit_test(resume_after_sigkill_completes_the_run_without_duplicates),
        cmocka_unit_test(experiment_runs_every_variant_and_computes_each_cold_run_once),
        cmocka_unit_test(repeat_stores_median_min_max_and_the_modeled_ttft_is_the_priced_work),
        cmocka_unit_test(a_reference_calibration_makes_the_modeled_ttft_identical_between_runs),
        cmocka_unit_test(a_malformed_calibration_file_is_refused_naming_the_field),
        cmocka_unit_test(a_repetition_with_other_bits_is_caught),
        cmocka_unit_test(bench_rejects_a_bad_integer_list_naming_the_flag),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
