/*
 * tests/test_plots.c: `make plots` (plots/render.sh and plots/report.sh) on
 * the synthetic databases of plots/fake.sh.
 *
 * The group setup builds the seven fake experiment databases in a temporary
 * directory and renders them once (RESULTS_DIR=that directory, DATA_DIR
 * keeping the rows each figure plots); most tests then inspect what came out:
 * every figure as a non-empty PNG (1200x700) and PDF (6x3.5 in) with its
 * caption file, REPORT.md with a section per experiment and its figures
 * linked relatively, and for the policies and quirks figures the rows their
 * queries gave gnuplot. The fake rows come from awk's rand(), whose sequence
 * differs between awk implementations, so those checks assert what fake.sh
 * determines by construction (series, order, block sizes, shares of
 * bit-identical requests, which runs are plotted), not the random numbers.
 * Other tests render into directories of their own: with only one database
 * present (the others are skipped), and with a gnuplot that fails (the
 * render must fail, naming it).
 *
 * Every test is skipped when gnuplot or sqlite3 is not installed. The shell
 * scripts run from the repository root, the tests' working directory.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>

// ----------------------------------------------------------------------------
// Fixture: the fake databases rendered once

typedef struct fixture {
    bool tools;      /* gnuplot and sqlite3 are installed */
    char dir[64];    /* RESULTS_DIR of the shared render */
    int render_rc;   /* exit status of that render */
} fixture;

static fixture fx;

/* The figures render.sh must draw from the fake databases. */
static const char *const figures[] = {
    "seed000-prefilled", "seed000-ttft",     "seed000-anchor",
    "seed001-reuse",     "seed001-prefilled",
    "seed002-cumulative", "seed002-rwkv7", "seed002-summary",
    "seed003-identical", "seed003-sweep",
    "seed004-reuse",     "seed004-ttft",
    "policies-overview", "policies-identical",
    "quirks-vllm40696",  "quirks-sglang16521", "quirks-sglang34683",
    "probe-seed001-reuse", "probe-seed001-identical", "probe-seed001-ttft",
};
#define N_FIGURES (sizeof figures / sizeof figures[0])

static const char *const experiments[] = {"seed000", "seed001", "seed002", "seed003", "seed004",
                                          "policies", "quirks", "probe-seed001"};
#define N_EXPERIMENTS (sizeof experiments / sizeof experiments[0])

/* Runs cmd with sh; returns its exit status (-1 when it did not exit). */
static int run(const char *cmd) {
    int st = system(cmd);
    if (st == -1 || !WIFEXITED(st)) return -1;
    return WEXITSTATUS(st);
}

/* The whole file at path, NUL-terminated (caller frees), or NULL; its length
 * in *len when len is not NULL. */
static char *slurp_n(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    char *buf = NULL;
    size_t cap = 0, n = 0;
    for (;;) {
        if (n + 4096 + 1 > cap) {
            cap = cap ? 2 * cap : 65536;
            char *nb = realloc(buf, cap);
            if (!nb) { free(buf); fclose(f); return NULL; }
            buf = nb;
        }
        size_t got = fread(buf + n, 1, 4096, f);
        n += got;
        if (got == 0) break;
    }
    fclose(f);
    buf[n] = '\0';
    if (len) *len = n;
    return buf;
}

static char *slurp(const char *path) { return slurp_n(path, NULL); }

static long file_size(const char *path) {
    struct stat st;
    return stat(path, &st) == 0 ? (long)st.st_size : -1;
}

/* The rows a figure's query gave gnuplot (DATA_DIR/FIG.tsv): tab-separated,
 * column 0 the series. */
#define MAX_ROWS 128
#define MAX_COLS 8
typedef struct table {
    char *buf;
    size_t rows;
    size_t cols[MAX_ROWS];
    const char *cell[MAX_ROWS][MAX_COLS];
} table;

static void table_load(table *t, const char *fig) {
    char path[256];
    snprintf(path, sizeof path, "%s/data/%s.tsv", fx.dir, fig);
    memset(t, 0, sizeof *t);
    t->buf = slurp(path);
    if (!t->buf) fprintf(stderr, "no data file %s\n", path);
    assert_non_null(t->buf);
    for (char *line = t->buf, *next; *line; line = next) {
        next = strchr(line, '\n');
        if (next) *next++ = '\0';
        else next = line + strlen(line);
        assert_true(t->rows < MAX_ROWS);
        size_t r = t->rows++;
        for (char *f = line, *tab; f; f = tab) {
            tab = strchr(f, '\t');
            if (tab) *tab++ = '\0';
            assert_true(t->cols[r] < MAX_COLS);
            t->cell[r][t->cols[r]++] = f;
        }
    }
}

/* The first row whose leading cells are key[0..n-1], or -1. */
static long table_find(const table *t, const char *const key[], size_t n) {
    for (size_t r = 0; r < t->rows; r++) {
        size_t k = 0;
        while (k < n && k < t->cols[r] && strcmp(t->cell[r][k], key[k]) == 0) k++;
        if (k == n) return (long)r;
    }
    return -1;
}
#define ROW(t, ...)                                               \
    table_find((t), (const char *const[]){__VA_ARGS__},           \
               sizeof((const char *const[]){__VA_ARGS__}) / sizeof(const char *))

static void table_free(table *t) { free(t->buf); }

/* Cell (r, c) as a number (the row must exist and have that column). */
static double num(const table *t, long r, size_t c) {
    assert_true(r >= 0 && (size_t)r < t->rows);
    assert_true(c < t->cols[r]);
    char *end;
    double v = strtod(t->cell[r][c], &end);
    assert_true(end != t->cell[r][c] && *end == '\0');
    return v;
}

/* A caption file's text (caller frees). */
static char *caption(const char *fig) {
    char path[256];
    snprintf(path, sizeof path, "%s/figures/%s.txt", fx.dir, fig);
    char *cap = slurp(path);
    assert_non_null(cap);
    return cap;
}

static int group_setup(void **state) {
    (void)state;
    memset(&fx, 0, sizeof fx);
    fx.tools = run("command -v gnuplot >/dev/null 2>&1 && command -v sqlite3 >/dev/null 2>&1") == 0;
    if (!fx.tools) return 0;
    snprintf(fx.dir, sizeof fx.dir, "/tmp/kvr_plots_XXXXXX");
    if (!mkdtemp(fx.dir)) return -1;
    char cmd[512];
    snprintf(cmd, sizeof cmd, "sh plots/fake.sh %s >%s/fake.log 2>&1", fx.dir, fx.dir);
    if (run(cmd) != 0) return -1;
    snprintf(cmd, sizeof cmd, "RESULTS_DIR=%s DATA_DIR=%s/data sh plots/render.sh >%s/render.log 2>&1",
             fx.dir, fx.dir, fx.dir);
    fx.render_rc = run(cmd);
    return 0;
}

static int group_teardown(void **state) {
    (void)state;
    if (fx.dir[0]) {
        char cmd[128];
        snprintf(cmd, sizeof cmd, "rm -rf %s", fx.dir);
        run(cmd);
    }
    return 0;
}

#define NEED_TOOLS()                                                              \
    do {                                                                          \
        if (!fx.tools) {                                                          \
            fprintf(stderr, "gnuplot or sqlite3 not installed: plots not tested\n"); \
            skip();                                                               \
        }                                                                         \
    } while (0)

/* A fresh empty directory under fx.dir named name; its path in out. */
static void subdir(const char *name, char *out, size_t cap) {
    snprintf(out, cap, "%s/%s", fx.dir, name);
    assert_int_equal(mkdir(out, 0755), 0);
}

// ----------------------------------------------------------------------------
// The render of all seven databases

static void render_of_the_fake_databases_succeeds(void **state) {
    (void)state;
    NEED_TOOLS();
    if (fx.render_rc != 0) {
        char log[128];
        snprintf(log, sizeof log, "%s/render.log", fx.dir);
        char *text = slurp(log);
        fprintf(stderr, "render.sh exited %d:\n%s\n", fx.render_rc, text ? text : "(no log)");
        free(text);
    }
    assert_int_equal(fx.render_rc, 0);
}

static void every_figure_exists_as_non_empty_png_pdf_and_caption(void **state) {
    (void)state;
    NEED_TOOLS();
    static const char *const ext[] = {"png", "pdf", "txt"};
    for (size_t i = 0; i < N_FIGURES; i++) {
        for (size_t e = 0; e < 3; e++) {
            char path[256];
            snprintf(path, sizeof path, "%s/figures/%s.%s", fx.dir, figures[i], ext[e]);
            if (file_size(path) <= 0) fprintf(stderr, "missing or empty: %s\n", path);
            assert_true(file_size(path) > 0);
        }
        /* and the rows it plots, kept by DATA_DIR */
        char path[256];
        snprintf(path, sizeof path, "%s/data/%s.tsv", fx.dir, figures[i]);
        if (file_size(path) <= 0) fprintf(stderr, "missing or empty: %s\n", path);
        assert_true(file_size(path) > 0);
    }
}

static void png_figures_are_1200_by_700_pixels(void **state) {
    (void)state;
    NEED_TOOLS();
    for (size_t i = 0; i < N_FIGURES; i++) {
        char path[256];
        snprintf(path, sizeof path, "%s/figures/%s.png", fx.dir, figures[i]);
        FILE *f = fopen(path, "rb");
        assert_non_null(f);
        unsigned char h[24];
        assert_int_equal(fread(h, 1, sizeof h, f), sizeof h);
        fclose(f);
        assert_memory_equal(h, "\x89PNG\r\n\x1a\n", 8);
        assert_memory_equal(h + 12, "IHDR", 4);
        uint32_t w = (uint32_t)h[16] << 24 | (uint32_t)h[17] << 16 | (uint32_t)h[18] << 8 | h[19];
        uint32_t ht = (uint32_t)h[20] << 24 | (uint32_t)h[21] << 16 | (uint32_t)h[22] << 8 | h[23];
        assert_int_equal(w, 1200);
        assert_int_equal(ht, 700);
    }
}

static void pdf_figures_are_6_by_3_5_inches(void **state) {
    (void)state;
    NEED_TOOLS();
    for (size_t i = 0; i < N_FIGURES; i++) {
        char path[256];
        snprintf(path, sizeof path, "%s/figures/%s.pdf", fx.dir, figures[i]);
        size_t n;
        char *pdf = slurp_n(path, &n);
        assert_non_null(pdf);
        assert_memory_equal(pdf, "%PDF-", 5);
        /* 6 in x 3.5 in = 432 x 252 points (binary file: memmem) */
        static const char box[] = "MediaBox [ 0 0 432 252 ]";
        assert_non_null(memmem(pdf, n, box, sizeof box - 1));
        free(pdf);
    }
}

static void captions_hold_the_runs_configuration(void **state) {
    (void)state;
    NEED_TOOLS();
    static const char *const fields[] = {"model_name", "n_params", "kernel", "precision", "threads",
                                         "chunk", "align", "policy", "quirks", "normalize",
                                         "decode_n", "cpu", "blas", "git_rev", "started_at",
                                         "transcript"};
    for (size_t i = 0; i < N_FIGURES; i++) {
        char path[256];
        snprintf(path, sizeof path, "%s/figures/%s.txt", fx.dir, figures[i]);
        char *cap = slurp(path);
        assert_non_null(cap);
        assert_int_equal(strncmp(cap, figures[i], strlen(figures[i])), 0);
        for (size_t k = 0; k < sizeof fields / sizeof fields[0]; k++) {
            if (!strstr(cap, fields[k])) fprintf(stderr, "%s: no %s\n", path, fields[k]);
            assert_non_null(strstr(cap, fields[k]));
        }
        free(cap);
    }
}

static void superseded_and_empty_runs_are_left_out_of_the_figures(void **state) {
    (void)state;
    NEED_TOOLS();
    /* seed001 holds a failed older "raw" run and an empty "cold" run besides
     * the two finished ones: only the two finished runs are plotted. */
    char *cap = caption("seed001-reuse");
    assert_non_null(strstr(cap, "2 runs ("));
    assert_null(strstr(cap, "0123456789ab"));  /* the failed run's git_rev */
    free(cap);
    /* policies: a rerun of pydicom/llama/none/radix that failed after the
     * finished one; quirks: an older finished sglang34683/extend superseded by
     * a later one, and a vllm40696/fixed rerun without requests */
    static const struct { const char *fig, *runs; } keep[] = {
        {"policies-identical", "54 runs ("},
        {"quirks-sglang34683", "3 runs ("},
        {"quirks-vllm40696", "12 runs ("},
    };
    for (size_t i = 0; i < sizeof keep / sizeof keep[0]; i++) {
        cap = caption(keep[i].fig);
        if (!strstr(cap, keep[i].runs)) fprintf(stderr, "%s: not %s\n", keep[i].fig, keep[i].runs);
        assert_non_null(strstr(cap, keep[i].runs));
        assert_null(strstr(cap, "0123456789ab"));
        free(cap);
    }
}

// ----------------------------------------------------------------------------
// The policies and quirks figures: the rows their queries plot

static const char *const policies[] = {"cold", "slot-lcp", "disk-anchor", "block-hash", "radix"};
static const char *const workloads[] = {"pydicom/llama", "pydicom/hybrid", "fcsimple/llama",
                                        "fcsimple/hybrid", "agent/llama", "agent/hybrid"};
enum { N_POLICIES = 5, N_WORKLOADS = 6 };

static void policies_overview_plots_every_policy_per_workload_with_align_chunk(void **state) {
    (void)state;
    NEED_TOOLS();
    table t;
    table_load(&t, "policies-overview");
    /* the --align chunk runs only: one row per policy and workload, the
     * policies in their order, the workloads in run order */
    assert_int_equal(t.rows, N_POLICIES * N_WORKLOADS);
    for (size_t p = 0; p < N_POLICIES; p++) {
        for (size_t w = 0; w < N_WORKLOADS; w++) {
            char gi[8];
            snprintf(gi, sizeof gi, "%zu", w);
            long r = ROW(&t, policies[p], gi, workloads[w]);
            if (r != (long)(p * N_WORKLOADS + w))
                fprintf(stderr, "policies-overview: %s %s at row %ld\n", policies[p], workloads[w], r);
            assert_int_equal(r, (long)(p * N_WORKLOADS + w));
            double reuse = num(&t, r, 3), speedup = num(&t, r, 4), mib = num(&t, r, 5);
            if (p == 0) {  /* cold reuses nothing and holds nothing */
                assert_true(reuse == 0.0 && mib == 0.0);
                assert_true(speedup > 0.8 && speedup < 1.25);
            } else if (p == 1 && w == 2) {  /* a run of an older build: cache_bytes NULL */
                assert_true(reuse > 0.0);
                assert_true(mib == 0.0);
            } else {
                assert_true(reuse > 0.0 && mib > 0.0);
            }
            if (p == 4) assert_true(speedup > 2.0);  /* radix reuses the previous prompts */
        }
    }
    table_free(&t);
}

static void policies_identical_shows_which_runs_diverge_with_align_none(void **state) {
    (void)state;
    NEED_TOOLS();
    table t;
    table_load(&t, "policies-identical");
    /* every run: five policies with --align chunk, four with none */
    assert_int_equal(t.rows, (N_POLICIES + N_POLICIES - 1) * N_WORKLOADS);
    /* requests per run: pydicom 6, fcsimple 5, agent 3 sessions x 6 turns */
    static const int n_req[N_WORKLOADS] = {6, 6, 5, 5, 18, 18};
    for (size_t p = 0; p < N_POLICIES; p++) {
        for (size_t w = 0; w < N_WORKLOADS; w++) {
            for (int a = 0; a <= 1; a++) {
                char gi[8], al[4];
                snprintf(gi, sizeof gi, "%zu", w);
                snprintf(al, sizeof al, "%d", a);
                long r = ROW(&t, policies[p], gi, workloads[w], al);
                if (p == 2 && a == 1) {  /* disk-anchor needs the grid */
                    assert_int_equal(r, -1);
                    continue;
                }
                assert_true(r >= 0);
                /* with --align none a llama request that reuses is not
                 * bit-identical, nor a hybrid one of block-hash (logits equal,
                 * state_equal 0): only each run's first request is (the
                 * failed rerun of pydicom/llama/none/radix, all identical,
                 * is not plotted) */
                bool diverge = a == 1 && p > 0 && (strstr(workloads[w], "llama") || p == 3);
                double want = diverge ? 100.0 / n_req[w] : 100.0;
                double ident = num(&t, r, 4);
                if (ident < want - 0.01 || ident > want + 0.01)
                    fprintf(stderr, "policies-identical: %s %s align %d: %.2f%%, not %.2f%%\n", policies[p],
                            workloads[w], a, ident, want);
                assert_true(ident > want - 0.01 && ident < want + 0.01);
            }
        }
    }
    table_free(&t);
}

static void quirks_vllm40696_plots_the_raised_1088_token_block_against_64(void **state) {
    (void)state;
    NEED_TOOLS();
    char *cap = caption("quirks-vllm40696");
    assert_non_null(strstr(cap, "quirks=hybrid-block-size, transcript="));
    assert_non_null(strstr(cap, "block_size=1088"));
    assert_non_null(strstr(cap, "block_size=64"));
    free(cap);
    table t;
    table_load(&t, "quirks-vllm40696");
    /* six contexts per variant, quirk first, prompts growing; column 3 the
     * block size; the quirk never hits below one 1088-token block (the two
     * shortest contexts), the fixed 64-token block always does: over 3/4 of
     * the follow-up requests (with the first request, which reuses nothing,
     * the shortest context would be under 0.7) */
    assert_int_equal(t.rows, 12);
    for (long r = 0; r < 12; r++) {
        bool quirk = r < 6;
        assert_string_equal(t.cell[r][0], quirk ? "vllm40696/quirk" : "vllm40696/fixed");
        assert_int_equal((long)num(&t, r, 3), quirk ? 1088 : 64);
        if (r % 6 > 0) assert_true(num(&t, r, 1) > num(&t, r - 1, 1));
        if (quirk && r < 2) {
            assert_true(num(&t, r, 1) < 1088);
            assert_true(num(&t, r, 2) == 0.0);
        } else {
            assert_true(num(&t, r, 2) > (quirk ? 0.5 : 0.75));
        }
    }
    table_free(&t);
}

static void quirks_sglang16521_fixed_reuses_the_answer_and_diverges(void **state) {
    (void)state;
    NEED_TOOLS();
    table t;
    table_load(&t, "quirks-sglang16521");
    assert_int_equal(t.rows, 6);
    static const char *const tr[] = {"fcsimple", "pydicom"};
    static const int n_req[] = {5, 6};
    for (int i = 0; i < 2; i++) {
        char gi[8];
        snprintf(gi, sizeof gi, "%d", i);
        long q = ROW(&t, "quirk", gi, tr[i]), f = ROW(&t, "fixed", gi, tr[i]), c = ROW(&t, "fixed-cap", gi, tr[i]);
        assert_int_equal(q, i);
        assert_int_equal(f, 2 + i);
        assert_int_equal(c, 4 + i);
        /* the prompt-only key and the harness's cap reuse the same prefix */
        assert_string_equal(t.cell[q][3], t.cell[c][3]);
        assert_true(num(&t, f, 3) > num(&t, q, 3));
        assert_true(num(&t, q, 4) == 100.0 && num(&t, c, 4) == 100.0);
        /* fixed: every follow-up reuses decode-written rows */
        assert_true(fabs(num(&t, f, 4) - 100.0 / n_req[i]) < 0.01);
    }
    table_free(&t);
}

static void quirks_sglang34683_extend_differs_while_cold_and_grid_agree(void **state) {
    (void)state;
    NEED_TOOLS();
    table t;
    table_load(&t, "quirks-sglang34683");
    assert_int_equal(t.rows, 3);
    assert_int_equal(ROW(&t, "sglang34683/cold-vs-cold", "0", "cold-vs-cold", "100.00", "1"), 0);
    assert_int_equal(ROW(&t, "sglang34683/grid", "2", "grid", "100.00", "1"), 2);
    /* the later extend run: 1 of 12 requests (the first, which reuses
     * nothing) identical, logits some ULP apart; the superseded one had all 4 */
    assert_int_equal(ROW(&t, "sglang34683/extend", "1", "extend", "8.33"), 1);
    assert_true(num(&t, 1, 4) > 1.0);
    table_free(&t);
}

/* kvreplay probe's figures, drawn for each probe-* experiment from plots/probe-all-*: reported
 * against expected reuse in pairs of series per server (a server that reports nothing gives no
 * reported point, a failed request neither), the shares of bit-identical requests and of reuse as
 * expected over the compared and checked ones, the latest run of a variant only. */
static void probe_figures_pair_reported_with_expected_and_count_what_was_compared(void **state) {
    (void)state;
    NEED_TOOLS();
    table t;
    table_load(&t, "probe-seed001-reuse");
    assert_int_equal(t.rows, 5 * 2 * 6);
    static const char *const v[] = {"serve/raw", "serve/normalize", "llama.cpp 0949beb5a3fc", "llama.cpp c807c6e3b0c7", "other"};
    for (int i = 0; i < 5; i++) {
        char rep[64], ex[64];
        snprintf(rep, sizeof rep, "%s: reported", v[i]);
        snprintf(ex, sizeof ex, "%s: expected", v[i]);
        assert_string_equal(t.cell[12 * i][0], rep);  /* reported first, then expected, in run order */
        assert_string_equal(t.cell[12 * i + 6][0], ex);
    }
    for (int k = 0; k < 6; k++) assert_string_equal(t.cell[12 * 4 + k][2], "");  /* "other" reports nothing */
    assert_string_equal(t.cell[5][2], "");                                          /* serve/raw request 6 failed */
    assert_true(num(&t, 12 * 2 + 6 + 3, 2) > 0.5 && num(&t, 12 * 2 + 3, 2) < 0.05);  /* 0949: expected full, reported 47 */
    table_free(&t);
    table_load(&t, "probe-seed001-identical");
    assert_int_equal(t.rows, 10);
    assert_string_equal(t.cell[0][0], "bit-identical");
    assert_string_equal(t.cell[0][4], "5/5");  /* serve/raw: its failed request is not compared */
    assert_string_equal(t.cell[3][4], "5/6");  /* c807c6e3b0c7: request 3 differs */
    assert_string_equal(t.cell[5][4], "1/5");  /* serve/raw: only the first request reused as expected (0) */
    assert_string_equal(t.cell[8][4], "6/6");
    assert_string_equal(t.cell[9][3], "");     /* nothing to check without a reported reuse */
    assert_string_equal(t.cell[9][4], "0/0");
    table_free(&t);
}

static void report_has_a_section_per_experiment_and_links_every_figure(void **state) {
    (void)state;
    NEED_TOOLS();
    char path[256];
    snprintf(path, sizeof path, "%s/REPORT.md", fx.dir);
    char *md = slurp(path);
    assert_non_null(md);
    assert_int_equal(strncmp(md, "# ", 2), 0);
    for (size_t i = 0; i < N_EXPERIMENTS; i++) {
        char h[64];
        snprintf(h, sizeof h, "\n## %s\n", experiments[i]);
        if (!strstr(md, h)) fprintf(stderr, "REPORT.md: no heading %s\n", experiments[i]);
        assert_non_null(strstr(md, h));
    }
    for (size_t i = 0; i < N_FIGURES; i++) {
        char link[128];
        snprintf(link, sizeof link, "](figures/%s.png)", figures[i]);
        assert_non_null(strstr(md, link));
    }
    /* tables from the queries, and no temporary file left behind */
    assert_non_null(strstr(md, "| TTFT p50 cold (ms) |"));
    assert_non_null(strstr(md, "miss_where"));
    /* policies: say-policies.sql per alignment; tab-policies.sql shows "-"
     * for the run that stored no cache_bytes; a sweep without a numeric value
     * (sweep_name "policy") adds no "policy=" to the run's name */
    assert_non_null(strstr(md, "With --align chunk the reuse fractions over all workloads are cold 0.000, slot-lcp "));
    assert_non_null(strstr(md, "With --align none the reuse fractions"));
    const char *row = strstr(md, "| fcsimple/llama  | chunk | slot-lcp    |");
    assert_non_null(row);
    const char *eol = strchr(row, '\n');
    const char *dash = strstr(row, "| -  ");
    assert_true(dash && eol && dash < eol);
    assert_null(strstr(md, "/cold policy="));
    /* quirks: say-quirks.sql names each run's block size */
    assert_non_null(strstr(md, "vllm40696/quirk (block 1088) at "));
    assert_non_null(strstr(md, "vllm40696/fixed (block 64) at "));
    char tmp[256];
    snprintf(tmp, sizeof tmp, "ls -a %s | grep -q 'REPORT.md.tmp'", fx.dir);
    assert_int_not_equal(run(tmp), 0);
    free(md);
}

// ----------------------------------------------------------------------------
// Renders of their own

static void missing_databases_are_skipped(void **state) {
    (void)state;
    NEED_TOOLS();
    char dir[128], cmd[1024];
    subdir("only001", dir, sizeof dir);
    snprintf(cmd, sizeof cmd, "cp %s/seed001.sqlite %s/ && RESULTS_DIR=%s sh plots/render.sh >%s/log 2>&1",
             fx.dir, dir, dir, dir);
    assert_int_equal(run(cmd), 0);
    char path[256];
    snprintf(path, sizeof path, "%s/figures/seed001-reuse.png", dir);
    assert_true(file_size(path) > 0);
    snprintf(path, sizeof path, "%s/figures/seed003-identical.png", dir);
    assert_int_equal(file_size(path), -1);
    snprintf(path, sizeof path, "%s/REPORT.md", dir);
    char *md = slurp(path);
    assert_non_null(md);
    assert_non_null(strstr(md, "\n## seed001\n"));
    assert_null(strstr(md, "\n## seed003\n"));
    free(md);
}

/* FULL_ONLY=1: the full-scale databases (RESULTS_DIR/full) are drawn into
 * full/figures and REPORT.md gets their part after its demo sections, which
 * are kept as they are; the issue report's table of seed004 says which
 * variant re-prefills everything where, and a run short of its requests is
 * marked PARTIAL. Rewriting it again replaces that part, never duplicates it. */
static void the_full_scale_part_keeps_the_demo_sections_and_marks_partial_runs(void **state) {
    (void)state;
    NEED_TOOLS();
    char dir[128], cmd[2400], path[256];
    subdir("fullscale", dir, sizeof dir);
    snprintf(cmd, sizeof cmd,
             "mkdir -p %s/full && cp %s/seed004.sqlite %s/full/ && printf '# kvreplay results\\n\\n## seed001\\n\\ndemo "
             "text\\n\\n' > %s/REPORT.md && printf 'experiment\\tcore-hours\\nseed004\\t12.5\\n' > %s/full/costs.tsv && "
             "sqlite3 %s/full/seed004.sqlite \"update runs set status = 'running', n_requests = 12 where variant = "
             "'fixed' and sweep_value = 32768\" && FULL_ONLY=1 RESULTS_DIR=%s sh plots/render.sh >%s/log 2>&1 && "
             "FULL_ONLY=1 RESULTS_DIR=%s sh plots/render.sh >>%s/log 2>&1",
             dir, fx.dir, dir, dir, dir, dir, dir, dir, dir, dir);
    assert_int_equal(run(cmd), 0);
    snprintf(path, sizeof path, "%s/REPORT.md", dir);
    char *md = slurp(path);
    assert_non_null(md);
    static const char head[] = "# kvreplay results\n\n## seed001\n\ndemo text\n\n# Full scale";
    assert_int_equal(strncmp(md, head, sizeof head - 1), 0);
    const char *full = strstr(md, "# Full scale");
    assert_null(strstr(full + 1, "# Full scale:"));  /* rewritten, not appended twice */
    assert_non_null(strstr(md, "\n## seed004 at full scale\n"));
    assert_non_null(strstr(md, "| seed004 | 12.5 |"));
    assert_non_null(strstr(md, "PARTIAL (running)"));
    assert_non_null(strstr(md, "partial: 9 of 12"));
    assert_non_null(strstr(md, "| 32.768K |"));
    assert_non_null(strstr(md, "re-prefills everything (0.000)"));
    assert_non_null(strstr(md, "(full/figures/seed004-reuse.png)"));
    free(md);
    snprintf(path, sizeof path, "%s/full/figures/seed004-reuse.png", dir);
    assert_true(file_size(path) > 0);
    snprintf(path, sizeof path, "%s/figures/seed004-reuse.png", dir);
    assert_int_equal(file_size(path), -1);  /* no demo figure drawn */
}

/* A render of the demo databases where no full-scale database is present (a fresh clone: they
 * are not committed) keeps the full-scale part REPORT.md already has, word for word, after the
 * demo sections it rewrites. */
static void a_render_without_full_scale_databases_keeps_the_full_scale_part(void **state) {
    (void)state;
    NEED_TOOLS();
    char dir[128], cmd[1400], path[256];
    subdir("keepfull", dir, sizeof dir);
    snprintf(cmd, sizeof cmd,
             "cp %s/seed001.sqlite %s/ && printf '# kvreplay results\\n\\nold demo text\\n\\n# Full scale: the "
             "issue reports'\\''s own sizes\\n\\nkept words 7c1e\\n' > %s/REPORT.md && RESULTS_DIR=%s sh "
             "plots/render.sh >%s/log 2>&1",
             fx.dir, dir, dir, dir, dir);
    assert_int_equal(run(cmd), 0);
    snprintf(path, sizeof path, "%s/REPORT.md", dir);
    char *md = slurp(path);
    assert_non_null(md);
    assert_null(strstr(md, "old demo text"));            /* the demo part is rewritten */
    assert_non_null(strstr(md, "\n## seed001\n"));
    const char *full = strstr(md, "\n# Full scale");
    assert_non_null(full);                                /* the full-scale part is kept */
    assert_non_null(strstr(full, "kept words 7c1e"));
    assert_null(strstr(full + 1, "\n# Full scale"));     /* once */
    free(md);
}

static void a_failing_gnuplot_fails_the_render_with_a_message(void **state) {
    (void)state;
    NEED_TOOLS();
    char dir[128], cmd[1024];
    subdir("badgnuplot", dir, sizeof dir);
    snprintf(cmd, sizeof cmd,
             "cp %s/seed004.sqlite %s/ && RESULTS_DIR=%s GNUPLOT=false sh plots/render.sh >%s/log 2>&1",
             fx.dir, dir, dir, dir);
    assert_int_not_equal(run(cmd), 0);
    char path[256];
    snprintf(path, sizeof path, "%s/log", dir);
    char *log = slurp(path);
    assert_non_null(log);
    assert_non_null(strstr(log, "gnuplot failed"));
    free(log);
    snprintf(path, sizeof path, "%s/figures/seed004-reuse.png", dir);
    assert_int_equal(file_size(path), -1);  /* nothing half-drawn published */
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(render_of_the_fake_databases_succeeds),
        cmocka_unit_test(every_figure_exists_as_non_empty_png_pdf_and_caption),
        cmocka_unit_test(png_figures_are_1200_by_700_pixels),
        cmocka_unit_test(pdf_figures_are_6_by_3_5_inches),
        cmocka_unit_test(captions_hold_the_runs_configuration),
        cmocka_unit_test(superseded_and_empty_runs_are_left_out_of_the_figures),
        cmocka_unit_test(policies_overview_plots_every_policy_per_workload_with_align_chunk),
        cmocka_unit_test(policies_identical_shows_which_runs_diverge_with_align_none),
        cmocka_unit_test(quirks_vllm40696_plots_the_raised_1088_token_block_against_64),
        cmocka_unit_test(quirks_sglang16521_fixed_reuses_the_answer_and_diverges),
        cmocka_unit_test(quirks_sglang34683_extend_differs_while_cold_and_grid_agree),
        cmocka_unit_test(probe_figures_pair_reported_with_expected_and_count_what_was_compared),
        cmocka_unit_test(report_has_a_section_per_experiment_and_links_every_figure),
        cmocka_unit_test(missing_databases_are_skipped),
        cmocka_unit_test(the_full_scale_part_keeps_the_demo_sections_and_marks_partial_runs),
        cmocka_unit_test(a_render_without_full_scale_databases_keeps_the_full_scale_part),
        cmocka_unit_test(a_failing_gnuplot_fails_the_render_with_a_message),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
