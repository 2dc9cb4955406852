/*
 * tests/test_bench.c: the benchmarks of harness/bench/ as library code,
 * called in this process (an exit would end the test binary, so each
 * assertion also proves that nothing exited):
 *
 *   - a usage error is ENG_ERR_ARG (exit 2) with the message the command
 *     prints, naming the flag; a model, vocabulary or --dir the user named
 *     that cannot be used is ENG_ERR_ARG naming the path;
 *   - work that fails under way is exit 3, never the user's: an engine
 *     call fed a token outside the vocabulary (planted) fails as
 *     ENG_ERR_ARG inside, and the measurement returns a status of exit
 *     class 3 naming the step; a failing --exec command likewise;
 *   - a benchmark that succeeds returns ENG_OK and prints its JSON.
 * Under `make asan` every one of these paths is also checked for leaks.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <fcntl.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench.h"
#include "bench_engine.h"
#include "bench_util.h"
#include "errors.h"
#include "fixtures.h"
#include "model.h"
#include "status.h"

static char g_dir[64], g_model[160], g_missing[160], g_text[160];

static int setup(void **state) {
    (void)state;
    if (fx_dir(g_dir, "kvr_bench")) return -1;
    snprintf(g_model, sizeof g_model, "%s/tiny.gguf", g_dir);
    snprintf(g_missing, sizeof g_missing, "%s/no-such-file", g_dir);
    snprintf(g_text, sizeof g_text, "%s/not-a-model.txt", g_dir);
    FILE *f = fopen(g_text, "w");
    if (!f) return -1;
    fputs("this is not a model\n", f);
    fclose(f);
    return fx_tiny_model(g_model, 1);
}

static int teardown(void **state) {
    (void)state;
    return fx_rm(g_dir);
}

#define ARGC(v) ((int)(sizeof v / sizeof v[0]) - 1)

/* Runs fn on argv (NULL-terminated), stdout into a scratch file whose
 * text (malloc'd) goes to *out when out is not NULL. */
static int call(hx_bench_fn fn, int argc, char **argv, char *err, size_t errlen, char **out) {
    char path[128];
    snprintf(path, sizeof path, "%s/stdout", g_dir);
    fflush(stdout);
    int saved = dup(1), fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    assert_true(saved >= 0 && fd >= 0);
    dup2(fd, 1);
    close(fd);
    err[0] = '\0';
    int rc = fn(argc, argv, err, errlen);
    fflush(stdout);
    dup2(saved, 1);
    close(saved);
    if (out) {
        FILE *f = fopen(path, "r");
        assert_non_null(f);
        *out = calloc(1, 1 << 16);
        assert_non_null(*out);
        size_t n = fread(*out, 1, (1 << 16) - 1, f);
        (*out)[n] = '\0';
        fclose(f);
    }
    return rc;
}

/* fn on argv must be a usage error (exit 2) whose message holds want. */
static void usage_error(hx_bench_fn fn, int argc, char **argv, const char *want) {
    char err[1024];
    int rc = call(fn, argc, argv, err, sizeof err, NULL);
    if (rc != ENG_ERR_ARG || !strstr(err, want))
        fail_msg("%s %s: status %d, message '%s' (want ENG_ERR_ARG and '%s')", argv[1], argc > 2 ? argv[2] : "", rc,
                 err, want);
    assert_int_equal(hx_exit_for_status(rc), HX_EXIT_USAGE);
}

static void a_usage_error_is_exit_2_naming_the_flag(void **state) {
    (void)state;
    char *prefill[] = {"bench", NULL};
    usage_error(hx_bench_prefill, ARGC(prefill), prefill, "bench: -m MODEL.gguf is required (see --help)");
    char *bogus[] = {"bench", "--bogus", NULL};
    usage_error(hx_bench_prefill, ARGC(bogus), bogus, "bench: unknown option '--bogus' (see kvreplay bench --help)");
    char *tok[] = {"bench", "--tokenizer", "stray", NULL};
    usage_error(hx_bench_tokenizer, ARGC(tok), tok,
                "bench --tokenizer: unexpected argument 'stray' (see kvreplay bench --tokenizer --help)");
    char *tok_m[] = {"bench", "--tokenizer", NULL};
    usage_error(hx_bench_tokenizer, ARGC(tok_m), tok_m, "bench --tokenizer: -m VOCAB.gguf is required");
    char *ck[] = {"bench", "--checkpoints", "-m", g_model, "--lengths", "2048,0", NULL};
    usage_error(hx_bench_checkpoints, ARGC(ck), ck, "--lengths: expected at most 32 comma-separated integers");
    char *depth[] = {"bench", "--depth", "128,64", "-m", g_model, NULL};
    usage_error(hx_bench_depth, ARGC(depth), depth, "bench --depth: depths must ascend");
    char *mem[] = {"bench", "--memory", NULL};
    usage_error(hx_bench_memory, ARGC(mem), mem, "bench --memory: -m MODEL.gguf is required");
    char *child[] = {"bench", "--memory-child", "--help", NULL};
    usage_error(hx_bench_memory_child, ARGC(child), child, "bench --memory-child: unknown option '--help'");
    char *cont[] = {"bench", "--contention", "-m", g_model, "--threads", "1000", NULL};
    usage_error(hx_bench_contention, ARGC(cont), cont, "--threads: expected an integer in [1, 256], got '1000'");
    char *disk[] = {"bench", "--disk-cache", "--mb", "0", NULL};
    usage_error(hx_bench_disk_cache, ARGC(disk), disk, "--mb: expected an integer in [1, 65536], got '0'");
    char *table[] = {"bench", "--table", NULL};
    usage_error(hx_bench_table, ARGC(table), table, "bench --table: unknown option '--table'");
}

static void a_path_the_user_named_is_exit_2_naming_it(void **state) {
    (void)state;
    const char *paths[] = {g_missing, g_dir, g_text};
    for (int p = 0; p < 3; p++) {
        char *path = (char *)paths[p];
        char *prefill[] = {"bench", "-m", path, NULL};
        usage_error(hx_bench_prefill, ARGC(prefill), prefill, path);
        char *tok[] = {"bench", "--tokenizer", "-m", path, NULL};
        usage_error(hx_bench_tokenizer, ARGC(tok), tok, path);
        char *ck[] = {"bench", "--checkpoints", "-m", path, NULL};
        usage_error(hx_bench_checkpoints, ARGC(ck), ck, path);
        char *depth[] = {"bench", "--depth", "64", "-m", path, NULL};
        usage_error(hx_bench_depth, ARGC(depth), depth, path);
        char *mem[] = {"bench", "--memory", "-m", path, NULL};
        usage_error(hx_bench_memory, ARGC(mem), mem, path);
        char *child[] = {"bench", "--memory-child", "-m", path, NULL};
        usage_error(hx_bench_memory_child, ARGC(child), child, path);
        char *cont[] = {"bench", "--contention", "-m", path, NULL};
        usage_error(hx_bench_contention, ARGC(cont), cont, path);
    }
    char *disk[] = {"bench", "--disk-cache", "--dir", g_missing, NULL};
    usage_error(hx_bench_disk_cache, ARGC(disk), disk, "bench --disk-cache: --dir");
    char *disk_file[] = {"bench", "--disk-cache", "--dir", g_text, NULL};
    usage_error(hx_bench_disk_cache, ARGC(disk_file), disk_file, g_text);
    char *table[] = {"bench", "--table", g_missing, NULL};
    usage_error(hx_bench_table, ARGC(table), table, "no-such-file: not a directory");
}

static void a_failure_under_way_is_exit_3_never_the_users(void **state) {
    (void)state;
    /* the mapping: a status that would read as bad input becomes one of exit class 3 */
    const int in[] = {ENG_ERR_ARG, ENG_ERR_FORMAT, ENG_ERR_UNSUPPORTED, ENG_ERR_NOMEM, ENG_ERR_RANGE, ENG_ERR_IO};
    for (size_t i = 0; i < sizeof in / sizeof in[0]; i++)
        assert_int_equal(hx_exit_for_status(hx_bench_failed(in[i])), HX_EXIT_INTERNAL);
    assert_int_equal(hx_bench_failed(ENG_ERR_NOMEM), ENG_ERR_NOMEM);
    assert_int_equal(hx_bench_failed(ENG_OK), ENG_OK);

    /* planted: a token outside the vocabulary, so that the engine refuses it (ENG_ERR_ARG inside) */
    eng_numerics num = eng_numerics_default();
    eng_model *m = NULL;
    char err[512];
    assert_int_equal(hx_bench_load(g_model, &num, &m, err, sizeof err), ENG_OK);
    const int32_t V = eng_model_get_info(m)->n_vocab;
    int32_t good[24], bad[24];
    for (int i = 0; i < 24; i++) good[i] = bad[i] = i % V;
    bad[5] = V;
    hx_run run;
    assert_int_equal(hx_measure_prefill(m, NULL, 0, good, 16, 8, 1, NULL, &run, err, sizeof err), ENG_OK);
    assert_true(run.seconds > 0 && run.tok_s > 0);
    int rc = hx_measure_prefill(m, NULL, 0, bad, 16, 8, 1, NULL, &run, err, sizeof err);
    assert_int_equal(hx_exit_for_status(rc), HX_EXIT_INTERNAL);
    assert_non_null(strstr(err, "bench: prefill failed: "));
    rc = hx_measure_prefill(m, bad, 8, good, 8, 8, 1, NULL, &run, err, sizeof err);
    assert_int_equal(hx_exit_for_status(rc), HX_EXIT_INTERNAL);
    assert_non_null(strstr(err, "bench: depth prefill failed: "));
    rc = hx_measure_decode(m, bad, 2, 8, 1, &run, err, sizeof err);  /* decodes bad[2..10) */
    assert_int_equal(hx_exit_for_status(rc), HX_EXIT_INTERNAL);
    assert_non_null(strstr(err, "bench: decode failed: "));
    assert_int_equal(hx_measure_decode(m, good, 2, 8, 1, &run, err, sizeof err), ENG_OK);
    eng_model_free(m);

    char *cont[] = {"bench", "--contention", "--exec", "false", "--reps", "1", "--competitors", "1", NULL};
    rc = call(hx_bench_contention, ARGC(cont), cont, err, sizeof err, NULL);
    assert_int_equal(hx_exit_for_status(rc), HX_EXIT_INTERNAL);
    assert_non_null(strstr(err, "bench --contention: the command failed (status 1): false"));
}

static void a_benchmark_that_succeeds_returns_ok_and_prints_its_json(void **state) {
    (void)state;
    char err[512], *out = NULL;
    char *prefill[] = {"bench", "-m", g_model, "--tokens", "16", "--reps", "1", "--peak-size", "16", "--json", NULL};
    assert_int_equal(call(hx_bench_prefill, ARGC(prefill), prefill, err, sizeof err, &out), ENG_OK);
    json_error_t je;
    json_t *o = json_loads(out, 0, &je);
    assert_non_null(o);
    assert_true(json_number_value(json_object_get(o, "prefill_tok_s")) > 0);
    assert_int_equal(json_integer_value(json_object_get(o, "n_tokens")), 16);
    json_decref(o);
    free(out);
    char *ck[] = {"bench", "--checkpoints", "-m", g_model, "--lengths", "32", "--json", NULL};
    assert_int_equal(call(hx_bench_checkpoints, ARGC(ck), ck, err, sizeof err, &out), ENG_OK);
    assert_non_null(o = json_loads(out, 0, &je));
    assert_int_equal(json_array_size(json_object_get(o, "lengths")), 1);
    json_decref(o);
    free(out);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(a_usage_error_is_exit_2_naming_the_flag),
        cmocka_unit_test(a_path_the_user_named_is_exit_2_naming_it),
        cmocka_unit_test(a_failure_under_way_is_exit_3_never_the_users),
        cmocka_unit_test(a_benchmark_that_succeeds_returns_ok_and_prints_its_json),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
