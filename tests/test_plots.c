/*
 * tests/test_plots.c: `make plots` (plots/render.sh and plots/report.sh) on
 * the synthetic databases of plots/fake.sh.
 *
 * The group setup builds the five fake experiment databases in a temporary
 * directory and renders them once (RESULTS_DIR=that directory); most tests
 * then inspect what came out: every figure as a non-empty PNG (1200x700) and
 * PDF (6x3.5 in) with its caption file, REPORT.md with a section per
 * experiment and its figures linked relatively. Other tests render into
 * directories of their own: with only one database present (the others are
 * skipped), and with a gnuplot that fails (the render must fail, naming it).
 *
 * Every test is skipped when gnuplot or sqlite3 is not installed. The shell
 * scripts run from the repository root, the tests' working directory.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

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
};
#define N_FIGURES (sizeof figures / sizeof figures[0])

static const char *const experiments[] = {"seed000", "seed001", "seed002", "seed003", "seed004"};
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
    snprintf(cmd, sizeof cmd, "RESULTS_DIR=%s sh plots/render.sh >%s/render.log 2>&1", fx.dir, fx.dir);
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
// The render of all five databases

static void render_of_the_five_fake_databases_succeeds(void **state) {
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
    char path[256];
    snprintf(path, sizeof path, "%s/figures/seed001-reuse.txt", fx.dir);
    char *cap = slurp(path);
    assert_non_null(cap);
    assert_non_null(strstr(cap, "2 runs ("));
    assert_null(strstr(cap, "0123456789ab"));  /* the failed run's git_rev */
    free(cap);
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
        cmocka_unit_test(render_of_the_five_fake_databases_succeeds),
        cmocka_unit_test(every_figure_exists_as_non_empty_png_pdf_and_caption),
        cmocka_unit_test(png_figures_are_1200_by_700_pixels),
        cmocka_unit_test(pdf_figures_are_6_by_3_5_inches),
        cmocka_unit_test(captions_hold_the_runs_configuration),
        cmocka_unit_test(superseded_and_empty_runs_are_left_out_of_the_figures),
        cmocka_unit_test(report_has_a_section_per_experiment_and_links_every_figure),
        cmocka_unit_test(missing_databases_are_skipped),
        cmocka_unit_test(a_failing_gnuplot_fails_the_render_with_a_message),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
