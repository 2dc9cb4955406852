/*
 * tests/test_check.c: `kvreplay check`'s self-test must test something
 * (issue #14). --inject-fault plants a fault the checker has to catch; a
 * fault that cannot be planted (no such request, a logit index past the
 * vocabulary, kv-row on a request that restored nothing, a request an
 * earlier run already stored) is exit 2 with a message saying why, never
 * "OK" with exit 0. A fault that is planted still gives exit 1.
 * Fixtures: the tiny synthetic model (built-in byte vocabulary, V = 259)
 * and a seeded 3-request transcript whose requests 1 and 2 reuse a prefix.
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
#include "proc.h"
#include "sqlq.h"

static char g_dir[64], g_model[160], g_tr[160];

static int setup(void **state) {
    (void)state;
    if (fx_dir(g_dir, "kvr_check")) return -1;
    snprintf(g_model, sizeof g_model, "%s/tiny.gguf", g_dir);
    snprintf(g_tr, sizeof g_tr, "%s/t.jsonl", g_dir);
    return fx_tiny_model(g_model, 4) || fx_transcript(g_tr, HX_SYNTH_STATIC, 5, 3, 300) ? -1 : 0;
}

static int teardown(void **state) {
    (void)state;
    return fx_rm(g_dir);
}

/* check with the fault flags given; returns the exit code, stdout in out, stderr in err. */
static int check(char *out, char *err, const char *policy, const char *fault, const char *req, const char *index) {
    const char *args[] = {"check", "-m", g_model, "-t", g_tr, "--decode", "2", "--policy", policy, "--inject-fault",
                          fault, "--fault-request", req, "--fault-index", index, NULL};
    return proc_run(NULL, out, 4096, err, 4096, args);
}

static void a_planted_fault_is_caught_with_exit_1(void **state) {
    (void)state;
    char out[4096], err[4096];
    assert_int_equal(check(out, err, "slot-lcp", "ulp-flip", "1", "258"), 1);
    assert_non_null(strstr(out, "logits differ at index 258"));
    assert_int_equal(check(out, err, "slot-lcp", "kv-row", "2", "0"), 1);
}

static void a_fault_on_a_request_that_does_not_exist_is_exit_2(void **state) {
    (void)state;
    char out[4096], err[4096];
    assert_int_equal(check(out, err, "slot-lcp", "ulp-flip", "99", "0"), 2);
    assert_non_null(strstr(err, "--fault-request 99: the replay has 3 requests"));
    assert_null(strstr(out, "OK"));
}

static void a_fault_index_past_the_vocabulary_is_exit_2(void **state) {
    (void)state;
    char out[4096], err[4096];
    assert_int_equal(check(out, err, "slot-lcp", "ulp-flip", "1", "100000"), 2);
    assert_non_null(strstr(err, "--fault-index 100000: the vocabulary has 259 logits"));
    assert_null(strstr(out, "OK"));
}

static void kv_row_on_a_request_without_reuse_is_exit_2(void **state) {
    (void)state;
    char out[4096], err[4096];
    assert_int_equal(check(out, err, "cold", "kv-row", "1", "0"), 2);  /* the cold policy restores nothing */
    assert_non_null(strstr(err, "--inject-fault kv-row: request 1"));
    assert_non_null(strstr(err, "reused nothing"));
    assert_int_equal(check(out, err, "slot-lcp", "kv-row", "0", "0"), 2);  /* the first request has no cache yet */
    assert_null(strstr(out, "OK"));
}

/* --batch-check K: every request also computed inside steps with K other sequences off its grid. Under
 * ref its rows are its cold rows bit for bit (exit 0); a batch-dependent reduction planted in those steps
 * (batch-split-k) is caught (exit 1, the row and the message say where); under blas the batch changes
 * the bits, as on real servers. */
static void the_batch_verdict_passes_ref_and_catches_a_batch_dependent_fault_and_blas(void **state) {
    (void)state;
    char out[4096], err[4096], db[160];
    snprintf(db, sizeof db, "%s/batch.sqlite", g_dir);
    const char *ok[] = {"check", "-m", g_model, "-t", g_tr, "--decode", "3", "--kernel", "ref", "--batch-check", "5",
                        "--db", db, NULL};
    assert_int_equal(proc_run(NULL, out, sizeof out, err, sizeof err, ok), 0);
    assert_int_equal(q_int(db, "SELECT count(*) FROM requests WHERE batch_k = 5 AND batch_equal = 1"), 3);
    const char *fault[] = {"check", "-m", g_model, "-t", g_tr, "--decode", "3", "--kernel", "ref", "--batch-check", "5",
                           "--inject-fault", "batch-split-k", "--fault-request", "1", NULL};
    assert_int_equal(proc_run(NULL, out, sizeof out, err, sizeof err, fault), 1);
    assert_non_null(strstr(out, "request 1)"));
    assert_non_null(strstr(out, "inside a batch with 5 other sequences"));
    const char *blas[] = {"check", "-m", g_model, "-t", g_tr, "--decode", "3", "--kernel", "blas", "--batch-check", "5",
                          NULL};
    assert_int_equal(proc_run(NULL, out, sizeof out, err, sizeof err, blas), 1);
    const char *alone[] = {"check", "-m", g_model, "-t", g_tr, "--inject-fault", "batch-split-k", NULL};
    assert_int_equal(proc_run(NULL, out, sizeof out, err, sizeof err, alone), 2);
    assert_non_null(strstr(err, "--batch-check"));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(a_planted_fault_is_caught_with_exit_1),
        cmocka_unit_test(a_fault_on_a_request_that_does_not_exist_is_exit_2),
        cmocka_unit_test(a_fault_index_past_the_vocabulary_is_exit_2),
        cmocka_unit_test(kv_row_on_a_request_without_reuse_is_exit_2),
        cmocka_unit_test(the_batch_verdict_passes_ref_and_catches_a_batch_dependent_fault_and_blas),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
