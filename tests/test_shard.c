/*
 * tests/test_shard.c: experiments in shards and `kvreplay merge`
 * (docs/scale.md), against the real binary:
 *   - the plan: for every N from 1 to 9, the N shards' dry runs list every
 *     unit exactly once, agree on the plan, and no shard exceeds twice the
 *     mean unless it holds a single indivisible unit or group;
 *   - two shards run by GNU parallel, merged, equal the unsharded run row for
 *     row (tests/helpers/same-rows.sh: timing and host columns aside), and so
 *     do nine shards (more shards than units: the empty ones still merge);
 *     merging again, or with a shard given twice, changes nothing;
 *   - same-rows.sh itself catches a planted difference;
 *   - merge refuses each planted mismatch with exit 2 naming the field and
 *     both values: another git revision, another spec file, another kernel
 *     (OpenBLAS forced to another core type), another model file, another
 *     schema version, two different databases of one shard, a missing shard;
 *     and refuses to replace a file that is not a results database;
 *   - a shard killed mid-run cannot be merged (its unit is named, with the
 *     --resume command); after --resume the merged database equals the
 *     uninterrupted one.
 * Fixtures: the tiny synthetic model (built-in byte vocabulary) and seeded
 * transcripts, made here; GNU parallel when installed (skipped otherwise).
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
#include <sys/wait.h>
#include <unistd.h>

#include "fixtures.h"
#include "proc.h"
#include "runcli.h"
#include "sqlq.h"

static char g_dir[64], g_model[160], g_spec[160], g_cal[160], g_cache[160], g_whole[160], g_s1[160], g_s2[160];
static char g_kv[160];
static char g_err[16384];

#define N_UNITS 8

/* A growing conversation under three policies and disk-anchor (one cache directory),
 * a static context at two chunk sizes and under align none, an extending
 * conversation: 8 units, some sharing cold results, some not. */
static int setup(void **state) {
    (void)state;
    char agent[160], stat_[160], ext[160];
    if (fx_dir(g_dir, "kvr_shard")) return -1;
    snprintf(g_model, sizeof g_model, "%s/tiny.gguf", g_dir);
    snprintf(agent, sizeof agent, "%s/agent.jsonl", g_dir);
    snprintf(stat_, sizeof stat_, "%s/static.jsonl", g_dir);
    snprintf(ext, sizeof ext, "%s/extend.jsonl", g_dir);
    if (fx_tiny_model(g_model, 3) || fx_transcript(agent, HX_SYNTH_EXTEND, 5, 3, 200) ||
        fx_transcript(stat_, HX_SYNTH_STATIC, 6, 3, 400) || fx_transcript(ext, HX_SYNTH_EXTEND, 7, 3, 400))
        return -1;
    snprintf(g_spec, sizeof g_spec, "%s/spec.json", g_dir);
    snprintf(g_cal, sizeof g_cal, "%s/cal.json", g_dir);
    snprintf(g_cache, sizeof g_cache, "%s/cache", g_dir);
    snprintf(g_kv, sizeof g_kv, "%s/kv", g_dir);
    snprintf(g_whole, sizeof g_whole, "%s/whole.sqlite", g_dir);
    snprintf(g_s1, sizeof g_s1, "%s/s1.sqlite", g_dir);
    snprintf(g_s2, sizeof g_s2, "%s/s2.sqlite", g_dir);
    FILE *f = fopen(g_spec, "w");
    if (!f) return -1;
    fprintf(f, "{\"name\": \"shards\",\n"
               " \"models\": {\"m\": {\"path\": \"%s\"}},\n"
               " \"transcripts\": {\"a\": {\"path\": \"%s\"}, \"s\": {\"path\": \"%s\"}, \"e\": {\"path\": \"%s\"}},\n"
               " \"runs\": [\n"
               "  {\"variant\": \"a/${policy}\", \"model\": \"m\", \"transcript\": \"a\", \"sweep\": {\"name\": \"policy\","
               " \"values\": \"cold,slot-lcp,radix\"}, \"args\": [\"--policy\", \"${policy}\", \"--decode\", \"4\"]},\n"
               "  {\"variant\": \"a/disk\", \"model\": \"m\", \"transcript\": \"a\", \"args\": [\"--policy\", \"disk-anchor\","
               " \"--cache-dir\", \"%s\", \"--fresh-cache\", \"--decode\", \"4\"]},\n"
               "  {\"variant\": \"s/chunk\", \"model\": \"m\", \"transcript\": \"s\", \"sweep\": {\"name\": \"chunk\","
               " \"values\": [32, 64]}, \"args\": [\"--chunk\", \"${chunk}\", \"--decode\", \"3\"]},\n"
               "  {\"variant\": \"s/none\", \"model\": \"m\", \"transcript\": \"s\", \"args\": [\"--align\", \"none\","
               " \"--decode\", \"3\"]},\n"
               "  {\"variant\": \"e/extend\", \"model\": \"m\", \"transcript\": \"e\", \"args\": [\"--decode\", \"8\"]}\n"
               " ]}\n", g_model, agent, stat_, ext, g_kv);
    if (fclose(f)) return -1;
    /* the unsharded run every merge is compared with (it adds the calibration entries first) */
    const char *args[] = {"experiment", g_spec, "--db", g_whole, "--calibration", g_cal, "--cache-root", g_cache, NULL};
    return proc_run(NULL, NULL, 0, g_err, sizeof g_err, args) == 0 ? 0 : -1;
}

static int teardown(void **state) {
    (void)state;
    return fx_rm(g_dir);
}

/* Runs shard k/n of the spec (spec: NULL for g_spec) into db; env: "VAR=VALUE " or "". */
static int run_shard(const char *spec, const char *db, int k, int n, const char *env) {
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "%s'%s' experiment '%s' --db '%s' --shard %d/%d --calibration '%s' --cache-root '%s' "
             "2>/dev/null", env, kvr_bin(), spec ? spec : g_spec, db, k, n, g_cal, g_cache);
    int st = system(cmd);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/* kvreplay merge OUT IN... (NULL-terminated); stderr in g_err. */
static int merge(const char *out, ...) {
    const char *args[16] = {"merge", out};
    int n = 2;
    va_list ap;
    va_start(ap, out);
    for (const char *p; n < 15 && (p = va_arg(ap, const char *));) args[n++] = p;
    va_end(ap);
    args[n] = NULL;
    return proc_run(NULL, NULL, 0, g_err, sizeof g_err, args);
}

/* sh tests/helpers/same-rows.sh a b: its exit code (its report in g_err). */
static int same_rows(const char *a, const char *b) {
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "sh tests/helpers/same-rows.sh '%s' '%s' > '%s/same-rows.out' 2>&1", a, b, g_dir);
    int st = system(cmd);
    snprintf(cmd, sizeof cmd, "%s/same-rows.out", g_dir);
    FILE *f = fopen(cmd, "r");
    size_t m = f ? fread(g_err, 1, sizeof g_err - 1, f) : 0;
    g_err[m] = '\0';
    if (f) fclose(f);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/* The two shards of the spec, made once. */
static void two_shards(void) {
    if (access(g_s1, F_OK) == 0 && access(g_s2, F_OK) == 0) return;
    assert_int_equal(run_shard(NULL, g_s1, 1, 2, ""), 0);
    assert_int_equal(run_shard(NULL, g_s2, 2, 2, ""), 0);
}

static void copy_file(const char *from, const char *to) {
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "cp '%s' '%s' && rm -f '%s-wal' '%s-shm'", from, to, to, to);
    assert_int_equal(system(cmd), 0);
}

static void sql(const char *db, const char *q) {
    char cmd[1200];
    snprintf(cmd, sizeof cmd, "sqlite3 '%s' \"%s\"", db, q);
    assert_int_equal(system(cmd), 0);
}

/* The whole content of a database as text (sqlite3 .dump), for exact comparisons. */
static char *dump(const char *db) {
    char cmd[600];
    snprintf(cmd, sizeof cmd, "sqlite3 -readonly '%s' .dump", db);
    FILE *p = popen(cmd, "r");
    assert_non_null(p);
    size_t cap = 1 << 20, n = 0;
    char *buf = malloc(cap);
    for (size_t r; (r = fread(buf + n, 1, cap - n - 1, p)) > 0;) {
        n += r;
        if (n + 1 == cap) buf = realloc(buf, cap *= 2);
    }
    buf[n] = '\0';
    pclose(p);
    return buf;
}

// ----------------------------------------------------------------------------

static void every_n_runs_every_unit_exactly_once_and_balanced(void **state) {
    (void)state;
    for (int n = 1; n <= 9; n++) {
        int seen[N_UNITS] = {0};
        char plan0[64] = "";
        for (int k = 1; k <= n; k++) {
            char cmd[1024], line[1024], shard[16];
            snprintf(cmd, sizeof cmd, "'%s' experiment '%s' --db '%s/dry.sqlite' --shard %d/%d --dry-run "
                     "--calibration '%s' --cache-root '%s'", kvr_bin(), g_spec, g_dir, k, n, g_cal, g_cache);
            FILE *p = popen(cmd, "r");
            assert_non_null(p);
            snprintf(shard, sizeof shard, "%d/%d", k, n);
            while (fgets(line, sizeof line, p)) {
                const char *u = strstr(line, "   # unit ");
                char *plan = strstr(line, "; plan ");
                if (u) {  /* a replay line of this shard */
                    int unit = atoi(u + 10);
                    assert_true(unit >= 0 && unit < N_UNITS);
                    seen[unit]++;
                } else if (plan) {  /* every shard computed the same plan */
                    if (!plan0[0]) snprintf(plan0, sizeof plan0, "%s", plan);
                    assert_string_equal(plan, plan0);
                } else if (k == 1 && line[0] == '#' && strstr(line, "/") && strstr(line, "x mean") == NULL) {
                    int sk, sn, units;
                    double s, x;
                    if (sscanf(line, "# %d/%d %d %lf %lf", &sk, &sn, &units, &s, &x) == 5 && x > 2.0) {
                        /* above twice the mean only when what it holds cannot be split */
                        if (!strstr(line, "cannot be split")) print_error("%s", line);
                        assert_non_null(strstr(line, "cannot be split"));
                    }
                }
            }
            assert_int_equal(WEXITSTATUS(pclose(p)), 0);
        }
        for (int u = 0; u < N_UNITS; u++) {
            if (seen[u] != 1) print_error("N = %d: unit %d listed %d times\n", n, u, seen[u]);
            assert_int_equal(seen[u], 1);
        }
    }
}

static void two_shards_under_gnu_parallel_merge_to_the_unsharded_rows(void **state) {
    (void)state;
    if (system("command -v parallel > /dev/null 2>&1") != 0) {
        print_message("GNU parallel is not installed (Debian: parallel; .ci/deps installs it): skipped\n");
        skip();
    }
    char cmd[2048], out[200];
    snprintf(cmd, sizeof cmd, "parallel --will-cite --halt now,fail=1 -j 2 '%s' experiment '%s' --db '%s/p{}.sqlite' "
             "--shard {}/2 --calibration '%s' --cache-root '%s' ::: 1 2 2>/dev/null", kvr_bin(), g_spec, g_dir, g_cal,
             g_cache);
    assert_int_equal(system(cmd), 0);
    snprintf(out, sizeof out, "%s/pmerged.sqlite", g_dir);
    char p1[200], p2[200];
    snprintf(p1, sizeof p1, "%s/p1.sqlite", g_dir);
    snprintf(p2, sizeof p2, "%s/p2.sqlite", g_dir);
    assert_int_equal(merge(out, p1, p2, NULL), 0);
    if (same_rows(g_whole, out) != 0) print_error("%s", g_err);
    assert_int_equal(same_rows(g_whole, out), 0);
    assert_int_equal(q_int(out, "select count(*) from shards"), 2);
    assert_int_equal(q_int(out, "select count(distinct shard) from runs"), 2);
    assert_int_equal(q_int(out, "select count(*) from runs where status = 'done'"), N_UNITS);
    /* the figures' and the report's readers see one run per unit, in spec order */
    assert_int_equal(q_int(out, "select count(*) from runs where run_id = unit + 1"), N_UNITS);

    /* idempotent: merging again, or with one shard given twice, changes nothing */
    char *d1 = dump(out);
    assert_int_equal(merge(out, p2, p1, p1, NULL), 0);
    assert_non_null(strstr(g_err, "counted once"));
    char *d2 = dump(out);
    assert_string_equal(d1, d2);
    free(d1);
    free(d2);
}

static void more_shards_than_units_merge_to_the_unsharded_rows(void **state) {
    (void)state;
    enum { N = 9 };  /* more than the 8 units: some shards hold none */
    char dbs[N][200], out[200];
    for (int k = 1; k <= N; k++) {
        snprintf(dbs[k - 1], sizeof dbs[k - 1], "%s/n%d.sqlite", g_dir, k);
        assert_int_equal(run_shard(NULL, dbs[k - 1], k, N, ""), 0);
    }
    int empty = 0;  /* shards without a unit still leave a database (its `shards` row) */
    for (int k = 0; k < N; k++) empty += q_int(dbs[k], "select count(*) from runs") == 0;
    assert_true(empty >= 1);
    snprintf(out, sizeof out, "%s/nmerged.sqlite", g_dir);
    assert_int_equal(merge(out, dbs[0], dbs[1], dbs[2], dbs[3], dbs[4], dbs[5], dbs[6], dbs[7], dbs[8], NULL), 0);
    if (same_rows(g_whole, out) != 0) print_error("%s", g_err);
    assert_int_equal(same_rows(g_whole, out), 0);
}

static void same_rows_catches_a_planted_difference(void **state) {
    (void)state;
    char a[200];
    snprintf(a, sizeof a, "%s/planted-rows.sqlite", g_dir);
    copy_file(g_whole, a);
    sql(a, "update requests set ttft_cold_ms = ttft_cold_ms * 3, cold_shared = 1 - cold_shared where rowid = 2");
    assert_int_equal(same_rows(g_whole, a), 0);  /* timing columns are left aside */
    sql(a, "update requests set n_reused = n_reused + 64 where rowid = 2");
    assert_int_equal(same_rows(g_whole, a), 1);
    assert_non_null(strstr(g_err, "requests differs"));
    copy_file(g_whole, a);
    sql(a, "update steps set token_reuse = token_reuse + 1 where rowid = 3");
    assert_int_equal(same_rows(g_whole, a), 1);
    copy_file(g_whole, a);
    sql(a, "update runs set quirks = 'x' where run_id = 2");
    assert_int_equal(same_rows(g_whole, a), 1);
}

/* merge OUT s1 BAD must exit 2 naming field and both values. */
static void refused(const char *bad, const char *field, const char *value_a, const char *value_b) {
    char out[200];
    snprintf(out, sizeof out, "%s/refused.sqlite", g_dir);
    unlink(out);
    int rc = merge(out, g_s1, bad, NULL);
    if (rc != 2 || !strstr(g_err, field)) print_error("merge exited %d: %s\n", rc, g_err);
    assert_int_equal(rc, 2);
    assert_non_null(strstr(g_err, field));
    if (value_a) assert_non_null(strstr(g_err, value_a));
    if (value_b) assert_non_null(strstr(g_err, value_b));
    assert_int_equal(access(out, F_OK), -1);  /* nothing written */
}

static void merge_refuses_another_git_revision(void **state) {
    (void)state;
    two_shards();
    char bad[200], rev[64];
    snprintf(bad, sizeof bad, "%s/other-rev.sqlite", g_dir);
    copy_file(g_s2, bad);
    sql(bad, "update shards set git_rev = 'feedfacecafe'; update runs set git_rev = 'feedfacecafe'");
    char cmd[400];
    snprintf(cmd, sizeof cmd, "sqlite3 '%s' 'select git_rev from shards'", g_s1);
    FILE *p = popen(cmd, "r");
    assert_non_null(fgets(rev, sizeof rev, p));
    pclose(p);
    rev[strcspn(rev, "\n")] = '\0';
    refused(bad, "git_rev differs", "feedfacecafe", rev);
}

static void merge_refuses_another_spec(void **state) {
    (void)state;
    two_shards();
    /* the same runs, one byte more in the file: another spec as far as anyone can prove */
    char spec2[200], bad[200], cmd[600];
    snprintf(spec2, sizeof spec2, "%s/spec-edited.json", g_dir);
    snprintf(cmd, sizeof cmd, "cp '%s' '%s' && echo ' ' >> '%s'", g_spec, spec2, spec2);
    assert_int_equal(system(cmd), 0);
    snprintf(bad, sizeof bad, "%s/other-spec.sqlite", g_dir);
    assert_int_equal(run_shard(spec2, bad, 2, 2, ""), 0);
    refused(bad, "spec_sha256 differs", NULL, NULL);
}

static void merge_refuses_another_kernel(void **state) {
    (void)state;
    two_shards();
    /* OpenBLAS forced to another core's kernels: other bits, and another runs.blas */
    char blas[512] = "", cmd[600], bad[200];
    snprintf(cmd, sizeof cmd, "sqlite3 '%s' 'select blas from shards'", g_s1);
    FILE *p = popen(cmd, "r");
    assert_non_null(fgets(blas, sizeof blas, p));
    pclose(p);
    blas[strcspn(blas, "\n")] = '\0';
    const char *core = strstr(blas, "Prescott") ? "Nehalem" : "Prescott";
    snprintf(cmd, sizeof cmd, "OPENBLAS_CORETYPE=%s ", core);
    snprintf(bad, sizeof bad, "%s/other-kernel.sqlite", g_dir);
    assert_int_equal(run_shard(NULL, bad, 2, 2, cmd), 0);
    if (q_int(bad, "select count(*) from shards where blas like '%DYNAMIC_ARCH%'") == 0) {
        print_message("this OpenBLAS is not a DYNAMIC_ARCH build: cannot force another core; planting the value\n");
        sql(bad, "update shards set blas = blas || ' Other'; update runs set blas = blas || ' Other'");
    }
    refused(bad, "blas differs", blas, core);
}

static void merge_refuses_another_model_file(void **state) {
    (void)state;
    two_shards();
    char bad[200];
    snprintf(bad, sizeof bad, "%s/other-model.sqlite", g_dir);
    copy_file(g_s2, bad);
    sql(bad, "update runs set model_sha256 = '00ff'");
    refused(bad, "model_sha256 of tiny.gguf differs", "00ff", NULL);
}

static void merge_refuses_another_schema_version(void **state) {
    (void)state;
    two_shards();
    char bad[200];
    snprintf(bad, sizeof bad, "%s/other-schema.sqlite", g_dir);
    copy_file(g_s2, bad);
    sql(bad, "pragma user_version = 5");
    refused(bad, "schema version differs", "has 8", "has 5");
}

static void merge_refuses_two_different_databases_of_one_shard(void **state) {
    (void)state;
    two_shards();
    char again[200], out[200];
    snprintf(again, sizeof again, "%s/s2-again.sqlite", g_dir);
    assert_int_equal(run_shard(NULL, again, 2, 2, ""), 0);  /* a second attempt: other timings */
    snprintf(out, sizeof out, "%s/dup.sqlite", g_dir);
    assert_int_equal(merge(out, g_s1, g_s2, again, NULL), 2);
    assert_non_null(strstr(g_err, "shard 2/2 is given twice"));
    assert_non_null(strstr(g_err, again));
    assert_int_equal(access(out, F_OK), -1);
}

static void merge_names_a_missing_shard_and_its_units(void **state) {
    (void)state;
    two_shards();
    char out[200], label[300];
    snprintf(out, sizeof out, "%s/missing.sqlite", g_dir);
    assert_int_equal(merge(out, g_s1, NULL), 2);
    assert_non_null(strstr(g_err, "shard 2/2 is missing"));
    /* it names the missing shard's units by their labels */
    char cmd[400];
    snprintf(cmd, sizeof cmd, "sqlite3 '%s' \"select json_extract(value, '$[2]') from shards, json_each(plan) "
             "where json_extract(value, '$[1]') = 2 limit 1\"", g_s1);
    FILE *p = popen(cmd, "r");
    assert_non_null(fgets(label, sizeof label, p));
    pclose(p);
    label[strcspn(label, "\n")] = '\0';
    assert_non_null(strstr(g_err, label));
    assert_int_equal(access(out, F_OK), -1);
    /* --partial merges what there is */
    const char *args[] = {"merge", out, g_s1, "--partial", NULL};
    assert_int_equal(proc_run(NULL, NULL, 0, g_err, sizeof g_err, args), 0);
    assert_int_equal(q_int(out, "select count(*) from runs where shard = 2"), 0);
    assert_true(q_int(out, "select count(*) from runs") > 0);
}

static void merge_refuses_to_replace_a_file_that_is_not_a_results_database(void **state) {
    (void)state;
    two_shards();
    char out[200];
    snprintf(out, sizeof out, "%s/notes.txt", g_dir);
    FILE *f = fopen(out, "w");
    fputs("my notes\n", f);
    fclose(f);
    assert_int_equal(merge(out, g_s1, g_s2, NULL), 2);
    assert_non_null(strstr(g_err, "refusing to replace it"));
    f = fopen(out, "r");
    char line[32] = "";
    assert_non_null(fgets(line, sizeof line, f));
    fclose(f);
    assert_string_equal(line, "my notes\n");
}

/* A probe run (runs[] with "server") talks to a live server and is not a unit: --shard refuses a
 * spec with one (exit 2, naming the entry) and writes no database; without --shard it is accepted. */
static void shard_refuses_a_spec_with_a_probe_run(void **state) {
    (void)state;
    char spec[200], db[200];
    snprintf(spec, sizeof spec, "%s/probe-spec.json", g_dir);
    snprintf(db, sizeof db, "%s/probe.sqlite", g_dir);
    FILE *f = fopen(spec, "w");
    assert_non_null(f);
    fprintf(f, "{\"name\": \"p\", \"models\": {\"m\": {\"path\": \"%s\"}},\n"
               " \"transcripts\": {\"t\": {\"path\": \"%s/agent.jsonl\"}},\n"
               " \"servers\": {\"live\": {\"url_env\": \"KVR_TEST_UNSET_URL\"}},\n"
               " \"runs\": [{\"variant\": \"live\", \"server\": \"live\", \"transcript\": \"t\"}]}\n", g_model,
            g_dir);
    fclose(f);
    const char *args[] = {"experiment", spec, "--db", db, "--shard", "1/2", "--cache-root", g_cache, NULL};
    assert_int_equal(proc_run(NULL, NULL, 0, g_err, sizeof g_err, args), 2);
    assert_non_null(strstr(g_err, "runs[0] probes a live server"));
    assert_int_equal(access(db, F_OK), -1);
    const char *dry[] = {"experiment", spec, "--db", db, "--dry-run", "--cache-root", g_cache, NULL};
    assert_int_equal(proc_run(NULL, NULL, 0, g_err, sizeof g_err, dry), 0);
    assert_non_null(strstr(g_err, "set KVR_TEST_UNSET_URL"));
}

static void a_shard_killed_then_resumed_merges_to_the_uninterrupted_rows(void **state) {
    (void)state;
    /* long enough to be killed in the middle: ten turns, 60 decode steps each; one unit per shard */
    char tr[200], spec[200], whole[200], k1[200], k2[200], out[200];
    snprintf(tr, sizeof tr, "%s/long.jsonl", g_dir);
    assert_int_equal(fx_transcript(tr, HX_SYNTH_STATIC, 8, 10, 800), 0);
    snprintf(spec, sizeof spec, "%s/kill.json", g_dir);
    FILE *f = fopen(spec, "w");
    fprintf(f, "{\"name\": \"kill\", \"models\": {\"m\": {\"path\": \"%s\"}}, \"transcripts\": {\"l\": {\"path\": \"%s\"}},\n"
               " \"runs\": [{\"variant\": \"c${chunk}\", \"model\": \"m\", \"transcript\": \"l\", \"sweep\": {\"name\": "
               "\"chunk\", \"values\": [32, 64]}, \"args\": [\"--chunk\", \"${chunk}\", \"--decode\", \"60\"]}]}\n",
            g_model, tr);
    fclose(f);
    snprintf(whole, sizeof whole, "%s/kill-whole.sqlite", g_dir);
    snprintf(k1, sizeof k1, "%s/kill-1.sqlite", g_dir);
    snprintf(k2, sizeof k2, "%s/kill-2.sqlite", g_dir);
    snprintf(out, sizeof out, "%s/kill-merged.sqlite", g_dir);
    const char *ref[] = {"experiment", spec, "--db", whole, "--calibration", g_cal, "--cache-root", g_cache, NULL};
    assert_int_equal(proc_run(NULL, NULL, 0, g_err, sizeof g_err, ref), 0);
    assert_int_equal(run_shard(spec, k1, 1, 2, ""), 0);
    const char *s2[] = {"experiment", spec, "--db", k2, "--shard", "2/2", "--calibration", g_cal, "--cache-root",
                        g_cache, NULL};
    pid_t pid = proc_spawn(s2);
    assert_true(pid > 0);
    int64_t n = db_wait_at_least(k2, "select count(*) from requests", 3);
    kill(pid, SIGKILL);
    assert_int_equal(proc_wait(pid), 128 + SIGKILL);
    assert_true(n >= 3);
    assert_true(q_int(k2, "select count(*) from requests") < 10);  /* killed before its unit's 10 requests */

    /* the unfinished unit is named, with the command that completes it */
    assert_int_equal(merge(out, k1, k2, NULL), 2);
    assert_non_null(strstr(g_err, "has no finished run"));
    assert_non_null(strstr(g_err, "--shard 2/2 --resume"));

    const char *resume[] = {"experiment", spec, "--db", k2, "--shard", "2/2", "--calibration", g_cal, "--cache-root",
                            g_cache, "--resume", NULL};
    assert_int_equal(proc_run(NULL, NULL, 0, g_err, sizeof g_err, resume), 0);
    assert_int_equal(q_int(k2, "select sum(resumes) from runs"), 1);
    assert_int_equal(merge(out, k1, k2, NULL), 0);
    if (same_rows(whole, out) != 0) print_error("%s", g_err);
    assert_int_equal(same_rows(whole, out), 0);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(every_n_runs_every_unit_exactly_once_and_balanced),
        cmocka_unit_test(two_shards_under_gnu_parallel_merge_to_the_unsharded_rows),
        cmocka_unit_test(shard_refuses_a_spec_with_a_probe_run),
        cmocka_unit_test(more_shards_than_units_merge_to_the_unsharded_rows),
        cmocka_unit_test(same_rows_catches_a_planted_difference),
        cmocka_unit_test(merge_refuses_another_git_revision),
        cmocka_unit_test(merge_refuses_another_spec),
        cmocka_unit_test(merge_refuses_another_kernel),
        cmocka_unit_test(merge_refuses_another_model_file),
        cmocka_unit_test(merge_refuses_another_schema_version),
        cmocka_unit_test(merge_refuses_two_different_databases_of_one_shard),
        cmocka_unit_test(merge_names_a_missing_shard_and_its_units),
        cmocka_unit_test(merge_refuses_to_replace_a_file_that_is_not_a_results_database),
        cmocka_unit_test(a_shard_killed_then_resumed_merges_to_the_uninterrupted_rows),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
