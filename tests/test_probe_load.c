/*
 * tests/test_probe_load.c: `kvreplay probe --concurrency K` against a real
 * `kvreplay serve --parallel 4` on stories260K: each request's cold run is
 * sent alone and again while K-1 filler generations stream on the server,
 * and the top-K log-probabilities are compared bit for bit.
 *
 *   - --kernel ref: every request under load is bit-identical to the same
 *     request alone (exit 0), the fillers were still generating when it was
 *     done, and the rows say so (batch_k 3, batch_equal 1);
 *   - --kernel blas: the batch changes the bits (OpenBLAS's sgemm over the
 *     stacked rows): caught, exit 1;
 *   - --kernel ref with a planted batch-dependent fault (serve
 *     --inject-fault batch-split-k): caught, exit 1, the row names the
 *     first differing position and candidate.
 * Skipped without stories260K (../shared/data).
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
#include "runcli.h"
#include "served.h"
#include "sqlq.h"

#define STORIES "../shared/data/models/stories260K.gguf"

static char g_dir[64], g_tr[160];

static int setup(void **state) {
    (void)state;
    if (access(STORIES, R_OK) != 0 || !kvr_bin()) return 0;
    if (fx_dir(g_dir, "kvr_probe_load") != 0) return -1;
    snprintf(g_tr, sizeof g_tr, "%s/static.jsonl", g_dir);
    return fx_transcript(g_tr, HX_SYNTH_STATIC, 3, 3, 600);
}

static int teardown(void **state) {
    (void)state;
    served_kill_all();
    return fx_rm(g_dir);
}

/* probe --concurrency 4 against serve --parallel 4 with kernel (and fault, or NULL); its exit code, db. */
static int probe_under_load(const char *name, const char *kernel, const char *fault, char *db, size_t cap) {
    served sv;
    const char *args[] = {"-m", STORIES, "--parallel", "4", "--kernel", kernel, "-c", "2048",
                          fault ? "--inject-fault" : NULL, fault, NULL};
    if (served_start(&sv, g_dir, name, args) != 0) fail_msg("the server did not start");
    char url[64], out[4096], err[8192];
    snprintf(url, sizeof url, "http://127.0.0.1:%d", sv.port);
    snprintf(db, cap, "%s/%s-probe.sqlite", g_dir, name);
    const char *cli[] = {"probe", "--server", url, "--api", "llama", "-t", g_tr, "-m", STORIES, "--concurrency", "4",
                         "-o", db, NULL};
    int rc = proc_run(NULL, out, sizeof out, err, sizeof err, cli);
    if (rc != 0 && rc != 1) fprintf(stderr, "probe exited %d: %s\n", rc, err);
    assert_int_equal(served_stop(&sv), 0);
    return rc;
}

static void under_ref_each_request_under_load_is_its_bits_alone(void **state) {
    (void)state;
    if (!g_dir[0]) skip();
    char db[192];
    assert_int_equal(probe_under_load("ref", "ref", NULL, db, sizeof db), 0);
    assert_int_equal(q_int(db, "SELECT count(*) FROM requests WHERE batch_k = 3 AND batch_equal = 1"), 3);
    /* the fillers were generating while each request ran: a real batch */
    assert_int_equal(q_int(db, "SELECT count(*) FROM requests WHERE json_extract(extra, '$.load.overlapped') = 3"), 3);
}

static void under_blas_the_batch_changes_the_bits_and_probe_catches_it(void **state) {
    (void)state;
    if (!g_dir[0]) skip();
    char db[192];
    assert_int_equal(probe_under_load("blas", "blas", NULL, db, sizeof db), 1);
    assert_true(q_int(db, "SELECT count(*) FROM requests WHERE batch_equal = 0") > 0);
}

static void a_planted_batch_dependent_fault_is_caught(void **state) {
    (void)state;
    if (!g_dir[0]) skip();
    char db[192];
    assert_int_equal(probe_under_load("fault", "ref", "batch-split-k", db, sizeof db), 1);
    assert_int_equal(q_int(db, "SELECT count(*) FROM requests WHERE batch_equal = 0 AND batch_first_diff >= 0"), 3);
    /* alone, the same server is bit-exact: the fault is in the batch only */
    assert_int_equal(q_int(db, "SELECT count(*) FROM requests WHERE logits_equal = 1 AND decode_equal = 1"), 3);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(under_ref_each_request_under_load_is_its_bits_alone),
        cmocka_unit_test(under_blas_the_batch_changes_the_bits_and_probe_catches_it),
        cmocka_unit_test(a_planted_batch_dependent_fault_is_caught),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
