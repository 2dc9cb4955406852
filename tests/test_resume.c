/*
 * tests/test_resume.c: interrupted runs and --resume, against the real
 * binary and SIGKILL (issue #14):
 *   - crash consistency of `experiment --resume`: a kill inside variant 2,
 *     then --resume, leaves exactly one complete run per variant whose
 *     requests equal an uninterrupted experiment's (variant 1 is not run
 *     again, variant 2 is completed, not restarted);
 *   - `replay --resume` of a complete run replays nothing;
 *   - two --resume of one run at once: the second is refused up front with
 *     exit 2 and a message saying why, and the first completes the run.
 * Fixtures: the tiny synthetic model (built-in byte vocabulary) and seeded
 * transcripts, made here.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fixtures.h"
#include "proc.h"
#include "sqlq.h"

static char g_dir[64], g_model[160], g_short[160], g_long[160], g_spec[160];

/* Static contexts (~2K tokens in the byte vocabulary) and a short question
 * per request: prompts of constant length, so every request costs the same. */
static int setup(void **state) {
    (void)state;
    if (fx_dir(g_dir, "kvr_resume")) return -1;
    snprintf(g_model, sizeof g_model, "%s/tiny.gguf", g_dir);
    snprintf(g_short, sizeof g_short, "%s/short.jsonl", g_dir);
    snprintf(g_long, sizeof g_long, "%s/long.jsonl", g_dir);
    if (fx_tiny_model(g_model, 2) || fx_transcript(g_short, HX_SYNTH_STATIC, 3, 3, 600) ||
        fx_transcript(g_long, HX_SYNTH_STATIC, 3, 8, 1000))
        return -1;
    snprintf(g_spec, sizeof g_spec, "%s/spec.json", g_dir);
    FILE *f = fopen(g_spec, "w");
    if (!f) return -1;
    fprintf(f, "{\"name\": \"crash\",\n"
               " \"models\": {\"m\": {\"path\": \"%s\"}},\n"
               " \"transcripts\": {\"s\": {\"path\": \"%s\"}, \"l\": {\"path\": \"%s\"}},\n"
               " \"runs\": [{\"variant\": \"v1\", \"model\": \"m\", \"transcript\": \"s\", \"args\": [\"--decode\", \"4\"]},\n"
               "          {\"variant\": \"v2\", \"model\": \"m\", \"transcript\": \"l\", \"args\": [\"--decode\", \"20\"]},\n"
               "          {\"variant\": \"v3\", \"model\": \"m\", \"transcript\": \"s\", \"args\": [\"--decode\", \"4\", "
               "\"--policy\", \"cold\"]}]}\n", g_model, g_short, g_long);
    return fclose(f);
}

static int teardown(void **state) {
    (void)state;
    return fx_rm(g_dir);
}

static void experiment_resume_after_a_kill_inside_variant_2_runs_each_variant_once(void **state) {
    (void)state;
    char db[200], ref[200], cache[200];
    snprintf(db, sizeof db, "%s/killed.sqlite", g_dir);
    snprintf(ref, sizeof ref, "%s/whole.sqlite", g_dir);
    snprintf(cache, sizeof cache, "%s/cache", g_dir);
    const char *args[] = {"experiment", g_spec, "--db", db, "--cache-root", cache, NULL};
    pid_t pid = proc_spawn(args);
    assert_true(pid > 0);
    /* kill once variant 2 has committed two of its eight requests */
    int64_t n = db_wait_at_least(db, "select count(*) from requests r join runs u using (run_id) where u.variant = 'v2'", 2);
    kill(pid, SIGKILL);
    assert_int_equal(proc_wait(pid), 128 + SIGKILL);
    assert_true(n >= 2);
    assert_true(q_int(db, "select count(*) from requests r join runs u using (run_id) where u.variant = 'v2'") < 8);
    assert_int_equal(q_int(db, "select count(*) from runs where variant = 'v1' and status = 'done'"), 1);
    assert_int_equal(q_int(db, "select count(*) from runs where variant = 'v2' and status = 'running'"), 1);

    const char *resume[] = {"experiment", g_spec, "--db", db, "--cache-root", cache, "--resume", NULL};
    char err[4096];
    assert_int_equal(proc_run(NULL, NULL, 0, err, sizeof err, resume), 0);
    /* one run per variant, all complete, each request once */
    assert_int_equal(q_int(db, "select count(*) from runs"), 3);
    assert_int_equal(q_int(db, "select count(distinct variant) from runs where status = 'done'"), 3);
    assert_int_equal(q_int(db, "select resumes from runs where variant = 'v2'"), 1);
    assert_int_equal(q_int(db, "select resumes from runs where variant = 'v1'"), 0);
    assert_int_equal(q_int(db, "select count(*) from requests"), 3 + 8 + 3);
    assert_int_equal(q_int(db, "select count(distinct run_id || '/' || session || '/' || turn) from requests"), 14);
    assert_int_equal(q_int(db, "select count(*) from steps"), 3 * 4 + 8 * 20 + 3 * 4);
    /* a second --resume has nothing left to do */
    assert_int_equal(proc_run(NULL, NULL, 0, err, sizeof err, resume), 0);
    assert_int_equal(q_int(db, "select count(*) from runs"), 3);
    assert_int_equal(q_int(db, "select count(*) from requests"), 14);

    /* the same requests, reuse and verdicts as an experiment that was never interrupted */
    const char *whole[] = {"experiment", g_spec, "--db", ref, "--cache-root", cache, NULL};
    assert_int_equal(proc_run(NULL, NULL, 0, err, sizeof err, whole), 0);
    char sql[600];
    snprintf(sql, sizeof sql, "attach '%s' as w; select count(*) from requests a join runs ua using (run_id) "
             "join (select * from w.requests b join w.runs ub using (run_id)) b on ua.variant = b.variant and "
             "a.session = b.session and a.turn = b.turn where a.n_prompt = b.n_prompt and a.n_reused = b.n_reused "
             "and a.logits_equal = b.logits_equal and a.decode_equal = b.decode_equal and a.fork_step is b.fork_step",
             ref);
    assert_int_equal(q_int(db, sql), 14);
}

static void replay_resume_of_a_complete_run_replays_nothing(void **state) {
    (void)state;
    char db[200], err[4096];
    snprintf(db, sizeof db, "%s/done.sqlite", g_dir);
    const char *args[] = {"replay", "-m", g_model, "-t", g_short, "--db", db, "--decode", "2", "--resume", NULL};
    assert_int_equal(proc_run(NULL, NULL, 0, err, sizeof err, args), 0);
    assert_int_equal(proc_run(NULL, NULL, 0, err, sizeof err, args), 0);
    assert_non_null(strstr(err, "is complete: nothing to resume"));
    assert_int_equal(q_int(db, "select count(*) from runs"), 1);
    assert_int_equal(q_int(db, "select count(*) from requests"), 3);
}

static void a_second_resume_of_a_run_being_written_is_refused_with_exit_2(void **state) {
    (void)state;
    char db[200], err[4096];
    snprintf(db, sizeof db, "%s/twice.sqlite", g_dir);
    const char *first[] = {"replay", "-m", g_model, "-t", g_long, "--db", db, "--decode", "60", NULL};
    pid_t pid = proc_spawn(first);
    db_wait_at_least(db, "select count(*) from requests", 2);
    kill(pid, SIGKILL);
    proc_wait(pid);
    assert_int_equal(q_int(db, "select status = 'running' from runs"), 1);
    const char *resume[] = {"replay", "-m", g_model, "-t", g_long, "--db", db, "--decode", "60", "--resume", NULL};
    pid_t a = proc_spawn(resume);
    assert_int_equal(db_wait_at_least(db, "select resumes from runs", 1), 1);  /* a holds the run */
    int rc = proc_run(NULL, NULL, 0, err, sizeof err, resume);
    assert_int_equal(proc_wait(a), 0);
    if (rc == 0 && strstr(err, "nothing to resume")) skip();  /* a finished before b started: not concurrent */
    assert_int_equal(rc, 2);
    assert_non_null(strstr(err, "is being written by another kvreplay process"));
    assert_null(strstr(err, "UNIQUE"));
    assert_int_equal(q_int(db, "select count(*) from requests"), 8);
    assert_int_equal(q_int(db, "select count(*) from runs where status = 'done'"), 1);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(experiment_resume_after_a_kill_inside_variant_2_runs_each_variant_once),
        cmocka_unit_test(replay_resume_of_a_complete_run_replays_nothing),
        cmocka_unit_test(a_second_resume_of_a_run_being_written_is_refused_with_exit_2),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
