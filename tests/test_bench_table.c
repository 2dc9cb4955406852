/*
 * tests/test_bench_table.c: `kvreplay bench --table DIR`, the issue targets'
 * table of `make bench` (harness/bench/bench_table.c), on planted JSON:
 *
 *   - a figure meeting its goal says "yes", one missing it "**no**" (a
 *     ratio below a >= goal, a slowdown above a <= goal), both counted;
 *   - llama.cpp's side comes from llama-bench's own JSON (n_prompt, n_gen,
 *     n_depth, n_threads, flash_attn, avg_ts) and divides ours;
 *   - an absent file is "-" and counted as not measured, never guessed;
 *   - a file that is not JSON is named on stderr, a DIR that is not there
 *     is an error (exit 2);
 *   - a ratio to an FMA peak below its file's sgemm is "untrusted".
 * Figures are never timed here: the files are planted.
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

#include "fixtures.h"
#include "runcli.h"

static char g_dir[64];

static void put(const char *name, const char *text) {
    char path[128];
    snprintf(path, sizeof path, "%s/%s", g_dir, name);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
}

static void drop(const char *name) {
    char path[128];
    snprintf(path, sizeof path, "%s/%s", g_dir, name);
    unlink(path);
}

static char *table(int *status, const char *redirect) {
    char cmd[256];
    snprintf(cmd, sizeof cmd, "%s bench --table %s %s", kvr_bin(), g_dir, redirect);
    char *out = NULL;
    size_t n = 0;
    *status = kvr_run(cmd, &out, &n);
    assert_non_null(out);
    return out;
}

static int setup(void **state) {
    (void)state;
    return fx_dir(g_dir, "kvr_btab");
}

static int teardown(void **state) {
    (void)state;
    return fx_rm(g_dir);
}

static void goals_met_missed_and_absent_are_told_apart(void **state) {
    (void)state;
    if (!kvr_bin()) skip();
    put("prefill-t2.json", "{\"cpu\": \"Test CPU\", \"cores\": 2, \"blas_core\": \"Haswell\", \"fma_vector\": \"avx2+fma\","
                           " \"ref_path\": \"avx2\", \"runs\": [{\"kernel\": \"ref\", \"ratio\": 0.5, \"ratio_fma\": 0.9,"
                           " \"prefill_tok_s\": 1000}, {\"kernel\": \"blas\", \"ratio\": 0.3, \"ratio_fma\": 0.4,"
                           " \"prefill_tok_s\": 400}]}");
    put("contention.json", "{\"runs\": [{\"variant\": \"ref\", \"slowdown\": 2.1, \"loaded_tok_s\": 476},"
                           " {\"variant\": \"blas\", \"slowdown\": 3.0, \"loaded_tok_s\": 133}]}");
    put("llama-pp.json", "[{\"n_prompt\": 512, \"n_gen\": 0, \"n_depth\": 0, \"n_threads\": 2, \"avg_ts\": 400.0},"
                         " {\"n_prompt\": 512, \"n_gen\": 0, \"n_depth\": 0, \"n_threads\": 1, \"avg_ts\": 250.0}]");
    int st;
    char *out = table(&st, "2>/dev/null");
    assert_int_equal(st, 0);
    assert_non_null(strstr(out, "machine: Test CPU; 2 cores; OpenBLAS core Haswell"));
    assert_non_null(strstr(out, "| ref / FMA peak, base, C = 64, 2 threads | >= 0.80 | 0.900 | yes |"));
    assert_non_null(strstr(out, "| ref / sgemm peak, base, C = 64, 2 threads | >= 0.85 | 0.500 | **no** |"));
    /* 1000 tok/s against llama.cpp's 400: 2.50, its figure beside */
    assert_non_null(strstr(out, "| ref prefill / llama.cpp pp512, base, 2 threads | >= 2.00 | 2.50 | yes | - | 400.0 |"));
    /* a slowdown is a <= goal */
    assert_non_null(strstr(out, "| ref prefill loaded / quiet, 2 busy competitors, 2 threads | <= 2.50 | 2.10 | yes | 476.0 |"));
    assert_non_null(strstr(out, "| blas prefill loaded / quiet, 2 busy competitors, 2 threads | <= 2.50 | 3.00 | **no** |"));
    /* absent: the 1-thread prefill file, the depths */
    assert_non_null(strstr(out, "| ref / FMA peak, base, C = 64, 1 thread | >= 0.80 | - | - |"));
    assert_non_null(strstr(out, "3 met, 2 missed,"));
    free(out);
}

static void a_file_that_is_not_json_is_named(void **state) {
    (void)state;
    if (!kvr_bin()) skip();
    put("depth-t2.json", "{ not json");
    int st;
    char *out = table(&st, "2>&1 >/dev/null");
    assert_non_null(strstr(out, "depth-t2.json: line 1"));
    free(out);
    drop("depth-t2.json");
}

/* The FMA peak is the machine's limit: a file whose sustained sgemm is above
 * it (the FMA samples were disturbed) gets its /FMA ratios marked, not
 * judged, and named on stderr; its sgemm ratio is still judged. */
static void an_fma_peak_below_the_sgemm_peak_is_not_trusted(void **state) {
    (void)state;
    if (!kvr_bin()) skip();
    put("prefill-t2.json", "{\"peak_gflops\": 145.1, \"fma_peak_gflops\": 128.9, \"runs\": [{\"kernel\": \"ref\","
                           " \"ratio\": 0.73, \"ratio_fma\": 0.823, \"prefill_tok_s\": 358}]}");
    put("prefill-t1.json", "{\"peak_gflops\": 78.7, \"fma_peak_gflops\": 99.6, \"runs\": [{\"kernel\": \"ref\","
                           " \"ratio\": 0.776, \"ratio_fma\": 0.613, \"prefill_tok_s\": 206}]}");
    int st;
    char *out = table(&st, "2>/dev/null");
    assert_int_equal(st, 0);
    assert_non_null(strstr(out, "| ref / FMA peak, base, C = 64, 2 threads | >= 0.80 | 0.823 | untrusted |"));
    assert_non_null(strstr(out, "| ref / sgemm peak, base, C = 64, 2 threads | >= 0.85 | 0.730 | **no** |"));
    assert_non_null(strstr(out, "| ref / FMA peak, base, C = 64, 1 thread | >= 0.80 | 0.613 | **no** |"));
    assert_non_null(strstr(out, "1 untrusted: a ratio to an FMA peak below"));
    free(out);
    out = table(&st, "2>&1 >/dev/null");
    assert_non_null(strstr(out, "prefill-t2.json: FMA peak 128.9 GFLOP/s below the sustained sgemm 145.1"));
    assert_null(strstr(out, "prefill-t1.json"));
    free(out);
    drop("prefill-t2.json");
    drop("prefill-t1.json");
}

/* A mistyped DIR is an error naming it (exit 2), not a table of "-". */
static void a_directory_that_is_not_there_is_named(void **state) {
    (void)state;
    if (!kvr_bin()) skip();
    char cmd[256], *out = NULL;
    size_t n = 0;
    snprintf(cmd, sizeof cmd, "%s bench --table %s/absent 2>&1", kvr_bin(), g_dir);
    const int st = kvr_run(cmd, &out, &n);
    assert_int_equal(st, 2);
    assert_non_null(strstr(out, "/absent: not a directory"));
    assert_null(strstr(out, "| target |"));
    free(out);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(goals_met_missed_and_absent_are_told_apart),
        cmocka_unit_test(a_file_that_is_not_json_is_named),
        cmocka_unit_test(an_fma_peak_below_the_sgemm_peak_is_not_trusted),
        cmocka_unit_test(a_directory_that_is_not_there_is_named),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
