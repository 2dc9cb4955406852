/*
 * tests/test_report.c: the figures of `kvreplay report` on a database with
 * known numbers, the verdict of `kvreplay check` (first divergence), the
 * per-experiment table, and the `report` subcommand itself (in a forked
 * child, and through build/kvreplay when it has been built).
 *
 * The database (built once per test in a temporary directory):
 *   run 1 (exp / fixed): 100 requests i = 0..99, inserted in reverse replay
 *     order; ttft_cold = i + 1 ms, ttft_reuse = (i + 1) / 10 ms; 100 prompt
 *     tokens, 75 reused, 25 prefilled; 1 GFLOP cold, 0.25 reused; logits
 *     differ for i = 40..44 (max_ulp 3..7; i = 40 at index 123, 1.0f vs the
 *     next float), decode differs for i = 50..54, forks at step 2 for 50..53.
 *     So: p50 cold 50.5, p95 cold 95.05, reuse fraction 0.75, 90% identical,
 *     4% forked, max ULP 7, first divergence request 40.
 *   run 2 (exp / buggy): 10 identical requests.
 *   run 3 (plain replay): one request whose decode step 1 differs, no fork.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <jansson.h>

#include "cli.h"
#include "report.h"
#include "status.h"
#include "store.h"
#include "util.h"

// ----------------------------------------------------------------------------
// Fixture

typedef struct fixture {
    char dir[64];
    char db[128];
    hx_store *s;
} fixture;

static void meta(hx_run_meta *m, const char *experiment, const char *variant) {
    hx_run_meta_init(m);
    m->model_path = "models/tiny.gguf";
    m->model_name = "tiny";
    m->policy = "slot-lcp";
    m->align = "chunk";
    m->chunk = 64;
    m->kernel = "blas";
    m->precision = "fp32";
    m->threads = 2;
    m->decode_n = 4;
    m->exp.experiment = experiment;
    m->exp.variant = variant;
}

static void put(hx_store *s, int64_t run, const hx_request_row *r, const hx_step_row *st, int n) {
    char err[512] = "";
    if (hx_store_put_request(s, run, r, st, n, err, sizeof err) != ENG_OK) fail_msg("%s", err);
}

static void base_row(hx_request_row *r, const char *sess, int i) {
    hx_request_row_init(r);
    r->req_index = i;
    r->session = sess;
    r->turn = i;
    r->n_prompt = 100;
    r->n_reused = 75;
    r->n_prefilled = 25;
    r->ttft_cold_ms = i + 1;
    r->ttft_reuse_ms = (i + 1) / 10.0;
    r->flops_cold = 1e9;
    r->flops_reuse = 0.25e9;
    r->logits_equal = r->decode_equal = r->top1_equal = true;
    r->n_decode = 4;
    r->max_ulp = 0;
}

static void build_db(fixture *f) {
    char err[512] = "";
    if (hx_store_open(f->db, &f->s, err, sizeof err) != ENG_OK) fail_msg("%s", err);
    hx_run_meta m;
    int64_t run;

    meta(&m, "exp", "fixed");
    m.exp.sweep_name = "chunk";
    m.exp.sweep_value = 64;
    if (hx_store_begin_run(f->s, &m, &run, err, sizeof err)) fail_msg("%s", err);
    assert_int_equal(run, 1);
    for (int i = 99; i >= 0; i--) {
        char sess[8];
        snprintf(sess, sizeof sess, "s%d", i % 4);
        hx_request_row r;
        base_row(&r, sess, i);
        if (i >= 40 && i <= 44) {
            r.logits_equal = false;
            r.first_diff_index = 123 + (i - 40);
            r.a_first = 1.0f;
            r.b_first = nextafterf(1.0f, 2.0f);
            r.ulp_first = 1;
            r.max_abs_diff = 2.5e-7;
            r.max_ulp = (uint64_t)(i - 37);
        }
        if (i >= 50 && i <= 54) r.decode_equal = false;
        if (i >= 50 && i <= 53) r.fork_step = 2;
        put(f->s, run, &r, NULL, 0);
    }
    hx_store_finish_run(f->s, run, HX_RUN_DONE, NULL, 0);

    meta(&m, "exp", "buggy");
    m.quirks = "cch-drift";
    m.exp.sweep_name = "policy";  /* a sweep over names: the value is NULL */
    if (hx_store_begin_run(f->s, &m, &run, err, sizeof err)) fail_msg("%s", err);
    for (int i = 0; i < 10; i++) {
        hx_request_row r;
        base_row(&r, "only", i);
        put(f->s, run, &r, NULL, 0);
    }
    hx_store_finish_run(f->s, run, HX_RUN_DONE, NULL, 0);

    meta(&m, NULL, NULL);
    if (hx_store_begin_run(f->s, &m, &run, err, sizeof err)) fail_msg("%s", err);
    hx_request_row r;
    base_row(&r, "d", 0);
    r.decode_equal = false;
    hx_step_row st[3];
    for (int k = 0; k < 3; k++) {
        hx_step_row_init(&st[k]);
        st[k].step = k;
        st[k].logits_equal = k != 1;
        st[k].token_cold = st[k].token_reuse = 7;
    }
    st[1].first_diff_index = 5;
    st[1].a_first = 2.0f;
    st[1].b_first = nextafterf(2.0f, 3.0f);
    st[1].ulp_first = 1;
    st[1].max_abs_diff = 2.384185791015625e-07;
    st[1].max_ulp = 1;
    put(f->s, run, &r, st, 3);
}

static int setup(void **state) {
    fixture *f = calloc(1, sizeof *f);
    snprintf(f->dir, sizeof f->dir, "/tmp/kvr_report_XXXXXX");
    if (!mkdtemp(f->dir)) return -1;
    snprintf(f->db, sizeof f->db, "%s/out.sqlite", f->dir);
    build_db(f);
    *state = f;
    return 0;
}

static int teardown(void **state) {
    fixture *f = *state;
    hx_store_close(f->s);
    char cmd[160];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", f->dir);
    if (system(cmd) != 0) return -1;
    free(f);
    return 0;
}

/* Runs fn into a memory stream; returns the malloc'd text and the status. */
typedef int (*printer)(hx_store *, int64_t, FILE *, char *, size_t);
static char *capture(printer fn, hx_store *s, int64_t run, int *status) {
    char *text = NULL;
    size_t len = 0;
    FILE *mem = open_memstream(&text, &len);
    assert_non_null(mem);
    char err[512] = "";
    *status = fn(s, run, mem, err, sizeof err);
    fclose(mem);
    if (*status < 0) print_message("status %d: %s\n", *status, err);
    return text;
}

// ----------------------------------------------------------------------------
// Figures

static void summary_of_known_numbers_has_the_expected_figures(void **state) {
    fixture *f = *state;
    hx_run_summary r;
    assert_int_equal(hx_report_summarize(f->s, 1, &r, NULL, 0), ENG_OK);
    assert_int_equal(r.n_requests, 100);
    assert_float_equal(r.ttft_cold_p50_ms, 50.5, 1e-12);
    assert_float_equal(r.ttft_cold_p95_ms, 95.05, 1e-9);
    assert_float_equal(r.ttft_reuse_p50_ms, 5.05, 1e-12);
    assert_float_equal(r.ttft_reuse_p95_ms, 9.505, 1e-9);
    assert_float_equal(r.speedup_p50, 10.0, 1e-9);
    assert_float_equal(r.reuse_fraction, 0.75, 0);
    assert_int_equal(r.n_prefilled_tokens, 2500);
    assert_int_equal(r.n_identical, 90);
    assert_int_equal(r.n_logits_equal, 95);
    assert_float_equal(r.pct_identical, 90.0, 1e-12);
    assert_float_equal(r.pct_forked, 4.0, 1e-12);
    assert_int_equal(r.max_ulp, 7);
    assert_float_equal(r.gflop_cold, 100.0, 1e-9);
    assert_float_equal(r.gflop_reuse, 25.0, 1e-9);
}

static void max_ulp_covers_decode_steps_up_to_the_fork_only(void **state) {
    fixture *f = *state;
    hx_run_summary r;
    assert_int_equal(hx_report_summarize(f->s, 3, &r, NULL, 0), ENG_OK);
    assert_int_equal(r.max_ulp, 1); /* prompt logits equal; decode step 1 is 1 ULP off */
    hx_run_meta m;
    meta(&m, NULL, NULL);
    int64_t run;
    assert_int_equal(hx_store_begin_run(f->s, &m, &run, NULL, 0), ENG_OK);
    hx_request_row q;
    base_row(&q, "f", 0);
    q.decode_equal = false;
    q.fork_step = 1;
    hx_step_row st[3];
    for (int k = 0; k < 3; k++) {
        hx_step_row_init(&st[k]);
        st[k].step = k;
    }
    st[0].logits_equal = true;
    st[1].max_ulp = 5;         /* same context: the fork is decided here */
    st[2].max_ulp = 1000000;   /* after the fork: different contexts, not counted */
    put(f->s, run, &q, st, 3);
    assert_int_equal(hx_report_summarize(f->s, run, &r, NULL, 0), ENG_OK);
    assert_int_equal(r.max_ulp, 5);
}

static void an_unknown_run_is_not_found(void **state) {
    fixture *f = *state;
    hx_run_summary r;
    char err[256] = "";
    assert_int_equal(hx_report_summarize(f->s, 77, &r, err, sizeof err), ENG_ERR_NOT_FOUND);
    assert_non_null(strstr(err, "77"));
    int st;
    free(capture(hx_report_markdown, f->s, 77, &st));
    assert_int_equal(st, ENG_ERR_NOT_FOUND);
}

static void a_run_without_requests_shows_dashes_and_nulls(void **state) {
    fixture *f = *state;
    hx_run_meta m;
    meta(&m, NULL, NULL);
    int64_t run;
    assert_int_equal(hx_store_begin_run(f->s, &m, &run, NULL, 0), ENG_OK);
    hx_run_summary r;
    assert_int_equal(hx_report_summarize(f->s, run, &r, NULL, 0), ENG_OK);
    assert_int_equal(r.n_requests, 0);
    assert_true(isnan(r.ttft_cold_p50_ms) && isnan(r.reuse_fraction) && isnan(r.pct_identical));
    assert_int_equal(r.max_ulp, -1);
    int st;
    char *md = capture(hx_report_markdown, f->s, run, &st);
    assert_int_equal(st, ENG_OK);
    assert_non_null(strstr(md, "| 0 | - | 0 | - |"));
    assert_non_null(strstr(md, "status running"));
    free(md);
}

static void markdown_shows_the_config_and_the_figures(void **state) {
    fixture *f = *state;
    int st;
    char *md = capture(hx_report_markdown, f->s, 1, &st);
    assert_int_equal(st, ENG_OK);
    assert_non_null(strstr(md, "### Run 1 (exp / fixed): model tiny, policy slot-lcp, quirks none,"
                               " normalize none, align chunk, chunk 64, kernel blas,"
                               " precision fp32, threads 2, decode_n 4"));
    /* requests | reuse | prefilled | p50 cold | p50 reused | speedup | p95 cold */
    assert_non_null(strstr(md, "| 100 | 0.750 | 2500 | 50.50 | 5.05 | 10.00x | 95.05 | "));
    /* bit-identical | forked | max ULP | GFLOP cold | GFLOP reused | modeled p50 cold, reused (none stored: -) */
    assert_non_null(strstr(md, " | 90.0% | 4.0% | 7 | 100.000 | 25.000 | - | - |\n"));
    assert_null(strstr(md, "### Run 2"));
    free(md);
    md = capture(hx_report_markdown, f->s, 0, &st);
    assert_int_equal(st, ENG_OK);
    assert_non_null(strstr(md, "### Run 1 "));
    assert_non_null(strstr(md, "### Run 2 (exp / buggy): model tiny, policy slot-lcp, quirks cch-drift"));
    assert_non_null(strstr(md, ", sweep policy (see the variant)\n"));
    assert_null(strstr(md, "nan"));
    assert_non_null(strstr(md, "### Run 3: model tiny"));
    free(md);
}

static void json_has_the_same_figures_and_parses(void **state) {
    fixture *f = *state;
    json_t *o = NULL;
    assert_int_equal(hx_report_json(f->s, 0, NULL, &o, NULL, 0), ENG_OK);
    char *text = json_dumps(o, JSON_COMPACT);
    json_decref(o);
    json_error_t je;
    json_t *root = json_loads(text, 0, &je);
    free(text);
    assert_non_null(root);
    json_t *runs = json_object_get(root, "runs");
    assert_int_equal(json_array_size(runs), 3);
    json_t *r = json_array_get(runs, 0);
    assert_int_equal(json_integer_value(json_object_get(r, "run_id")), 1);
    assert_string_equal(json_string_value(json_object_get(r, "variant")), "fixed");
    assert_int_equal(json_integer_value(json_object_get(r, "requests")), 100);
    assert_float_equal(json_real_value(json_object_get(r, "ttft_cold_p50_ms")), 50.5, 1e-12);
    assert_float_equal(json_real_value(json_object_get(r, "ttft_cold_p95_ms")), 95.05, 1e-9);
    assert_float_equal(json_real_value(json_object_get(r, "ttft_reuse_p95_ms")), 9.505, 1e-9);
    assert_float_equal(json_real_value(json_object_get(r, "reuse_fraction")), 0.75, 0);
    assert_float_equal(json_real_value(json_object_get(r, "pct_bit_identical")), 90.0, 1e-12);
    assert_float_equal(json_real_value(json_object_get(r, "pct_forked")), 4.0, 1e-12);
    assert_int_equal(json_integer_value(json_object_get(r, "max_ulp")), 7);
    assert_float_equal(json_real_value(json_object_get(r, "gflop_reuse")), 25.0, 1e-9);
    assert_true(json_is_null(json_object_get(json_array_get(runs, 2), "experiment")));
    json_decref(root);

    assert_int_equal(hx_report_json(f->s, 0, "exp", &o, NULL, 0), ENG_OK);
    runs = json_object_get(o, "runs");
    assert_int_equal(json_array_size(runs), 2);
    assert_string_equal(json_string_value(json_object_get(json_array_get(runs, 0), "variant")),
                        "buggy");
    json_decref(o);
}

static void experiment_table_has_a_row_per_run_grouped_by_variant(void **state) {
    fixture *f = *state;
    char *text = NULL;
    size_t len = 0;
    FILE *mem = open_memstream(&text, &len);
    assert_int_equal(hx_report_experiment(f->s, "exp", mem, NULL, 0), ENG_OK);
    fclose(mem);
    assert_non_null(strstr(text, "## Experiment exp\n"));
    char *buggy = strstr(text, "| buggy | 2 | policy (see the variant) | slot-lcp | cch-drift |");
    char *fixed = strstr(text, "| fixed | 1 | chunk = 64 | slot-lcp | none |");
    assert_non_null(buggy);
    assert_non_null(fixed);
    assert_true(buggy < fixed);
    assert_non_null(strstr(fixed, "| 100 | 0.750 | 2500 | 50.50 |"));
    free(text);
    char err[256] = "";
    mem = open_memstream(&text, &len);
    assert_int_equal(hx_report_experiment(f->s, "nope", mem, err, sizeof err), ENG_ERR_NOT_FOUND);
    fclose(mem);
    free(text);
    assert_non_null(strstr(err, "nope"));
}

// ----------------------------------------------------------------------------
// check: the first divergence

static void first_divergence_prints_the_planted_request_in_replay_order(void **state) {
    fixture *f = *state;
    int st;
    char *line = capture(hx_report_first_divergence, f->s, 1, &st);
    assert_int_equal(st, 1);
    assert_string_equal(line, "DIVERGED: session s0 turn 40 (request 40): logits differ at index 123:"
                              " cold=0x1p+0 reused=0x1.000002p+0 (ULP distance 1, max |diff| 2.5e-07);"
                              " greedy tokens never fork\n");
    free(line);
}

static void first_divergence_reports_a_decode_step_and_the_fork(void **state) {
    fixture *f = *state;
    int st;
    char *line = capture(hx_report_first_divergence, f->s, 3, &st);
    assert_int_equal(st, 1);
    assert_string_equal(line, "DIVERGED: session d turn 0 (request 0): decode step 1 logits differ"
                              " at index 5: cold=0x1p+1 reused=0x1.000002p+1 (ULP distance 1,"
                              " max |diff| 2.38419e-07); greedy tokens never fork\n");
    free(line);
    /* Make request 40 of run 1 equal: the next one (50) is decode-only and forks. */
    assert_int_equal(sqlite3_exec(hx_store_db(f->s),
                                  "UPDATE requests SET logits_equal = 1 WHERE run_id = 1"
                                  " AND req_index BETWEEN 40 AND 44", NULL, NULL, NULL), SQLITE_OK);
    line = capture(hx_report_first_divergence, f->s, 1, &st);
    assert_int_equal(st, 1);
    assert_string_equal(line, "DIVERGED: session s2 turn 50 (request 50): decode logits differ"
                              " (no steps rows); greedy fork at step 2\n");
    free(line);
}

static void first_divergence_says_ok_when_every_request_is_identical(void **state) {
    fixture *f = *state;
    int st;
    char *line = capture(hx_report_first_divergence, f->s, 2, &st);
    assert_int_equal(st, 0);
    assert_string_equal(line, "OK: 10 requests, all bit-identical to cold\n");
    free(line);
}

static void first_divergence_defaults_to_the_latest_run(void **state) {
    fixture *f = *state;
    int st;
    char *line = capture(hx_report_first_divergence, f->s, 0, &st);
    assert_int_equal(st, 1);
    assert_non_null(strstr(line, "session d turn 0"));
    free(line);
    char err[256] = "";
    FILE *null = fopen("/dev/null", "w");
    assert_int_equal(hx_report_first_divergence(f->s, 99, null, err, sizeof err), ENG_ERR_NOT_FOUND);
    fclose(null);
}

static void check_json_names_the_first_divergence(void **state) {
    fixture *f = *state;
    json_t *o = NULL;
    assert_int_equal(hx_report_check_json(f->s, 1, &o, NULL, 0), 1);
    assert_false(json_is_true(json_object_get(o, "ok")));
    assert_int_equal(json_integer_value(json_object_get(o, "n_requests")), 100);
    assert_int_equal(json_integer_value(json_object_get(o, "n_diverged")), 10);
    json_t *d = json_object_get(o, "first_divergence");
    assert_string_equal(json_string_value(json_object_get(d, "session")), "s0");
    assert_int_equal(json_integer_value(json_object_get(d, "req_index")), 40);
    assert_string_equal(json_string_value(json_object_get(d, "where")), "logits");
    assert_int_equal(json_integer_value(json_object_get(d, "index")), 123);
    assert_string_equal(json_string_value(json_object_get(d, "cold")), "0x1p+0");
    assert_string_equal(json_string_value(json_object_get(d, "reused")), "0x1.000002p+0");
    assert_int_equal(json_integer_value(json_object_get(d, "ulp")), 1);
    assert_true(json_is_null(json_object_get(d, "fork_step")));
    json_decref(o);
    assert_int_equal(hx_report_check_json(f->s, 2, &o, NULL, 0), 0);
    assert_true(json_is_true(json_object_get(o, "ok")));
    assert_true(json_is_null(json_object_get(o, "first_divergence")));
    json_decref(o);
}

// ----------------------------------------------------------------------------
// The subcommand

/* Runs hx_cmd_report(args) in a child with stdout/stderr captured; returns
 * the exit code and the malloc'd output (stdout then stderr). */
static int run_report(fixture *f, const char *const *args, char **out) {
    char path[160];
    snprintf(path, sizeof path, "%s/cli.out", f->dir);
    fflush(NULL);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        if (fd < 0) _exit(99);
        dup2(fd, 1);
        dup2(fd, 2);
        char *argv[16];
        int argc = 0;
        for (; args[argc]; argc++) argv[argc] = (char *)args[argc];
        argv[argc] = NULL;
        int rc = hx_cmd_report(argc, argv);
        fflush(NULL);
        _exit(rc);
    }
    int wst = 0;
    assert_int_equal(waitpid(pid, &wst, 0), pid);
    assert_true(WIFEXITED(wst));
    size_t n = 0;
    assert_int_equal(eng_read_file(path, out, &n, NULL, 0), ENG_OK);
    return WEXITSTATUS(wst);
}

static void report_command_prints_markdown_and_json(void **state) {
    fixture *f = *state;
    char *out = NULL;
    assert_int_equal(run_report(f, (const char *[]){"report", "--db", f->db, NULL}, &out), 0);
    assert_non_null(strstr(out, "| 100 | 0.750 | 2500 | 50.50 | 5.05 | 10.00x | 95.05 | "));
    free(out);
    assert_int_equal(run_report(f, (const char *[]){"report", "--db", f->db, "--run", "2", "--json",
                                                    NULL}, &out), 0);
    json_t *o = json_loads(out, 0, NULL);
    assert_non_null(o);
    assert_int_equal(json_array_size(json_object_get(o, "runs")), 1);
    json_decref(o);
    free(out);
    assert_int_equal(run_report(f, (const char *[]){"report", "--help", NULL}, &out), 0);
    assert_non_null(strstr(out, "usage: kvreplay report --db FILE"));
    free(out);
}

static void report_command_writes_the_output_file_atomically(void **state) {
    fixture *f = *state;
    char dest[160], *out = NULL, *text = NULL;
    size_t n = 0;
    snprintf(dest, sizeof dest, "%s/REPORT.md", f->dir);
    assert_int_equal(run_report(f, (const char *[]){"report", "--db", f->db, "-o", dest, NULL},
                                &out), 0);
    assert_string_equal(out, "");
    free(out);
    assert_int_equal(eng_read_file(dest, &text, &n, NULL, 0), ENG_OK);
    assert_non_null(strstr(text, "### Run 3"));
    free(text);
}

static void report_command_on_a_missing_or_invalid_db_exits_2_naming_it(void **state) {
    fixture *f = *state;
    char missing[160], *out = NULL;
    snprintf(missing, sizeof missing, "%s/missing.sqlite", f->dir);
    assert_int_equal(run_report(f, (const char *[]){"report", "--db", missing, NULL}, &out), 2);
    assert_non_null(strstr(out, missing));
    free(out);
    char junk[160];
    snprintf(junk, sizeof junk, "%s/junk.sqlite", f->dir);
    char bytes[4096];
    memset(bytes, 'x', sizeof bytes);
    assert_int_equal(eng_write_atomic(junk, bytes, sizeof bytes, NULL, 0), ENG_OK);
    assert_int_equal(run_report(f, (const char *[]){"report", "--db", junk, NULL}, &out), 2);
    assert_non_null(strstr(out, junk));
    free(out);
    assert_int_equal(run_report(f, (const char *[]){"report", "--db", f->db, "--run", "42", NULL},
                                &out), 2);
    assert_non_null(strstr(out, "42"));
    free(out);
    assert_int_equal(run_report(f, (const char *[]){"report", NULL}, &out), 2);
    free(out);
    assert_int_equal(run_report(f, (const char *[]){"report", "--db", f->db, "--bogus", NULL}, &out), 2);
    free(out);
}

static void the_built_binary_reports_and_rejects_a_missing_db(void **state) {
    fixture *f = *state;
    const char *build = getenv("BUILD");
    char bin[256], cmd[512];
    snprintf(bin, sizeof bin, "%s/kvreplay", build && *build ? build : "build");
    if (access(bin, X_OK) != 0) {
        print_message("%s not built (make build/kvreplay): skipping the binary test\n", bin);
        skip();
    }
    snprintf(cmd, sizeof cmd, "%s report --db '%s' 2>&1", bin, f->db);
    FILE *p = popen(cmd, "r");
    assert_non_null(p);
    char buf[65536];
    size_t n = fread(buf, 1, sizeof buf - 1, p);
    buf[n] = '\0';
    int wst = pclose(p);
    assert_true(WIFEXITED(wst));
    assert_int_equal(WEXITSTATUS(wst), 0);
    assert_non_null(strstr(buf, "| 90.0% | 4.0% | 7 |"));
    snprintf(cmd, sizeof cmd, "%s report --db '%s/missing.sqlite' 2>&1", bin, f->dir);
    p = popen(cmd, "r");
    n = fread(buf, 1, sizeof buf - 1, p);
    buf[n] = '\0';
    wst = pclose(p);
    assert_int_equal(WEXITSTATUS(wst), 2);
    assert_non_null(strstr(buf, "missing.sqlite"));
}

int main(void) {
    const struct CMUnitTest tests[] = {
#define T(name) cmocka_unit_test_setup_teardown(name, setup, teardown)
        T(summary_of_known_numbers_has_the_expected_figures),
        T(max_ulp_covers_decode_steps_up_to_the_fork_only),
        T(an_unknown_run_is_not_found),
        T(a_run_without_requests_shows_dashes_and_nulls),
        T(markdown_shows_the_config_and_the_figures),
        T(json_has_the_same_figures_and_parses),
        T(experiment_table_has_a_row_per_run_grouped_by_variant),
        T(first_divergence_prints_the_planted_request_in_replay_order),
        T(first_divergence_reports_a_decode_step_and_the_fork),
        T(first_divergence_says_ok_when_every_request_is_identical),
        T(first_divergence_defaults_to_the_latest_run),
        T(check_json_names_the_first_divergence),
        T(report_command_prints_markdown_and_json),
        T(report_command_writes_the_output_file_atomically),
        T(report_command_on_a_missing_or_invalid_db_exits_2_naming_it),
        T(the_built_binary_reports_and_rejects_a_missing_db),
#undef T
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
