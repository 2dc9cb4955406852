/*
 * tests/test_blas_core.c: the OpenBLAS core kvreplay runs (engine/blas_core.h,
 * harness/cli/blas_select.c).
 *
 * The decision table (levels of core names, the core for a CPU, when to
 * select and when to warn); the test hook that fakes the CPU can only lower
 * it. Then the binary, with a planted pick (KVREPLAY_TEST_BLAS_PICKED=
 * Prescott, OPENBLAS_CORETYPE unset): it must re-execute with the CPU's core,
 * say so once on stderr, and bench and replay must record the new core; with
 * OPENBLAS_CORETYPE=Prescott set by the user it must obey and warn, once per
 * process tree. The binary tests skip, with a message, on a CPU without AVX
 * (no better core to pick) or off x86-64.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "blas_core.h"
#include "fixtures.h"
#include "proc.h"
#include "runcli.h"
#include "sqlq.h"

static const eng_cpu_isa k_sse = {ENG_ISA_SSE, false}, k_avx2 = {ENG_ISA_AVX2, false},
                         k_512 = {ENG_ISA_AVX512, false}, k_512bf = {ENG_ISA_AVX512, true},
                         k_unknown = {ENG_ISA_UNKNOWN, false};

static void core_names_have_their_levels(void **state) {
    (void)state;
    assert_int_equal(eng_blas_core_level("Prescott"), ENG_ISA_SSE);
    assert_int_equal(eng_blas_core_level("NEHALEM"), ENG_ISA_SSE);   /* case-insensitive, as OpenBLAS */
    assert_int_equal(eng_blas_core_level("core2"), ENG_ISA_SSE);
    assert_int_equal(eng_blas_core_level("Sandybridge"), ENG_ISA_AVX);
    assert_int_equal(eng_blas_core_level("Haswell"), ENG_ISA_AVX2);
    assert_int_equal(eng_blas_core_level("Zen"), ENG_ISA_AVX2);
    assert_int_equal(eng_blas_core_level("SkylakeX"), ENG_ISA_AVX512);
    assert_int_equal(eng_blas_core_level("Cooperlake"), ENG_ISA_AVX512);
    assert_int_equal(eng_blas_core_level("armv8"), ENG_ISA_UNKNOWN);
    assert_int_equal(eng_blas_core_level("unknown"), ENG_ISA_UNKNOWN);
    assert_int_equal(eng_blas_core_level(NULL), ENG_ISA_UNKNOWN);
    assert_string_equal(eng_blas_core_for(k_512bf), "Cooperlake");
    assert_string_equal(eng_blas_core_for(k_512), "SkylakeX");
    assert_string_equal(eng_blas_core_for(k_avx2), "Haswell");
    assert_null(eng_blas_core_for(k_sse));
    assert_null(eng_blas_core_for(k_unknown));
    /* every core recommended is one this table knows, at the level it is recommended for */
    const eng_cpu_isa all[] = {{ENG_ISA_AVX, false}, k_avx2, k_512, k_512bf};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        assert_int_equal(eng_blas_core_level(eng_blas_core_for(all[i])), all[i].level);
}

static void an_older_core_is_replaced_unless_the_user_chose_it(void **state) {
    (void)state;
    eng_blas_plan p = eng_blas_core_decide(k_512bf, "Prescott", NULL);
    assert_int_equal(p.action, ENG_BLAS_SELECT);
    assert_string_equal(p.core, "Cooperlake");
    assert_non_null(strstr(p.why, "Prescott"));
    assert_non_null(strstr(p.why, "AVX-512 and BF16"));
    p = eng_blas_core_decide(k_512, "Haswell", "");  /* "" is unset; Haswell is older on AVX-512 */
    assert_int_equal(p.action, ENG_BLAS_SELECT);
    assert_string_equal(p.core, "SkylakeX");
    p = eng_blas_core_decide(k_avx2, "Nehalem", NULL);
    assert_int_equal(p.action, ENG_BLAS_SELECT);
    assert_string_equal(p.core, "Haswell");
    p = eng_blas_core_decide(k_avx2, "Prescott", "Prescott");  /* the user's choice: obeyed, and said */
    assert_int_equal(p.action, ENG_BLAS_WARN);
    assert_string_equal(p.core, "Haswell");
    assert_non_null(strstr(p.why, "OPENBLAS_CORETYPE=Prescott"));
    /* nothing to do: as new as the CPU allows, the same level, an unknown core or CPU */
    assert_int_equal(eng_blas_core_decide(k_avx2, "Zen", NULL).action, ENG_BLAS_KEEP);
    assert_int_equal(eng_blas_core_decide(k_512bf, "SkylakeX", NULL).action, ENG_BLAS_KEEP);
    assert_int_equal(eng_blas_core_decide(k_avx2, "SkylakeX", "SkylakeX").action, ENG_BLAS_KEEP);
    assert_int_equal(eng_blas_core_decide(k_512, "armv8", NULL).action, ENG_BLAS_KEEP);
    assert_int_equal(eng_blas_core_decide(k_sse, "Prescott", NULL).action, ENG_BLAS_KEEP);
    assert_int_equal(eng_blas_core_decide(k_unknown, "Prescott", NULL).action, ENG_BLAS_KEEP);
    assert_string_equal(eng_blas_core_decide(k_avx2, "Zen", NULL).why, "");
}

static void the_fake_cpu_can_only_lower_the_level(void **state) {
    (void)state;
    unsetenv("KVREPLAY_TEST_CPU_ISA");
    const eng_cpu_isa real = eng_cpu_isa_detect();
    eng_cpu_isa c;
    assert_true(eng_cpu_isa_parse("avx512-bf16", &c));
    assert_int_equal(c.level, ENG_ISA_AVX512);
    assert_true(c.bf16);
    assert_false(eng_cpu_isa_parse("avx1024", &c));
    setenv("KVREPLAY_TEST_CPU_ISA", "avx512-bf16", 1);  /* never raised */
    c = eng_cpu_isa_detect();
    assert_int_equal(c.level, real.level);
    assert_true(c.bf16 == real.bf16);
    if (real.level >= ENG_ISA_SSE) {
        setenv("KVREPLAY_TEST_CPU_ISA", "sse", 1);
        assert_int_equal(eng_cpu_isa_detect().level, ENG_ISA_SSE);
    }
    unsetenv("KVREPLAY_TEST_CPU_ISA");
}

// ----------------------------------------------------------------------------
// The binary

static char g_dir[128], g_model[192], g_tr[192];

static int setup(void **state) {
    (void)state;
    if (fx_dir(g_dir, "kvr_blascore") != 0) return -1;
    snprintf(g_model, sizeof g_model, "%s/tiny.gguf", g_dir);
    snprintf(g_tr, sizeof g_tr, "%s/t.jsonl", g_dir);
    if (fx_tiny_model(g_model, 7) != 0) return -1;
    return fx_transcript(g_tr, HX_SYNTH_STATIC, 3, 2, 600);
}

static int teardown(void **state) {
    (void)state;
    return fx_rm(g_dir);
}

/* The core kvreplay would pick here, or NULL (with a skip message) when there is none. */
static const char *best_core_or_skip(void) {
    unsetenv("KVREPLAY_TEST_CPU_ISA");
    const char *best = eng_blas_core_for(eng_cpu_isa_detect());
    if (!best) fprintf(stderr, "test_blas_core: skipped: this CPU (%s) has no core newer than SSE's\n",
                       eng_cpu_isa_name(eng_cpu_isa_detect()));
    return best;
}

static void clear_env(void) {
    unsetenv("OPENBLAS_CORETYPE");
    unsetenv("KVREPLAY_TEST_BLAS_PICKED");
    unsetenv("KVREPLAY_TEST_CPU_ISA");
    unsetenv("KVREPLAY_BLAS_CORE_SELECTED");
    unsetenv("KVREPLAY_BLAS_CORE_WARNED");
}

/* `kvreplay bench --json` on the tiny model: exit code; out and err filled. */
static int bench(char *out, size_t on, char *err, size_t en) {
    const char *args[] = {"bench", "-m", g_model, "--tokens", "64", "--reps", "1", "--peak-size", "64", "--json", NULL};
    return proc_run(NULL, out, on, err, en, args);
}

static size_t count(const char *hay, const char *needle) {
    size_t n = 0;
    for (const char *p = hay; (p = strstr(p, needle)); p += strlen(needle)) n++;
    return n;
}

static void a_planted_old_pick_is_replaced_said_once_and_recorded(void **state) {
    (void)state;
    const char *best = best_core_or_skip();
    if (!best) skip();
    clear_env();
    setenv("KVREPLAY_TEST_BLAS_PICKED", "Prescott", 1);
    static char out[1 << 16], err[1 << 14];
    assert_int_equal(bench(out, sizeof out, err, sizeof err), 0);
    assert_int_equal(count(err, "picked its Prescott kernels"), 1);
    char want[96];
    snprintf(want, sizeof want, "running with OPENBLAS_CORETYPE=%s", best);
    assert_non_null(strstr(err, want));
    snprintf(want, sizeof want, "\"blas_core\": \"%s\"", best);
    assert_non_null(strstr(out, want));
    snprintf(want, sizeof want, " %s ", best);  /* the fingerprint: OpenBLAS's config names its core */
    char *b = strstr(out, "\"blas\": \"");
    assert_non_null(b);
    assert_non_null(strstr(b, want));

    /* a replay records it in runs.blas; without the plant nothing is said (the core is the CPU's) */
    char db[256];
    snprintf(db, sizeof db, "%s/r.sqlite", g_dir);
    const char *rargs[] = {"replay", "-m", g_model, "-t", g_tr, "--db", db, "--decode", "2", NULL};
    assert_int_equal(proc_run(NULL, NULL, 0, err, sizeof err, rargs), 0);
    assert_int_equal(count(err, "kernels"), 1);
    char sql[160];
    snprintf(sql, sizeof sql, "SELECT count(*) FROM runs WHERE instr(blas, ' %s ') > 0", best);
    assert_int_equal(q_int(db, sql), 1);
    unsetenv("KVREPLAY_TEST_BLAS_PICKED");
    assert_int_equal(bench(out, sizeof out, err, sizeof err), 0);
    assert_null(strstr(err, "OPENBLAS_CORETYPE"));
    clear_env();
}

static void a_user_choice_is_obeyed_and_warned_once(void **state) {
    (void)state;
    const char *best = best_core_or_skip();
    if (!best) skip();
    clear_env();
    setenv("OPENBLAS_CORETYPE", "Prescott", 1);
    setenv("KVREPLAY_TEST_BLAS_PICKED", "Nehalem", 1);  /* ignored: the user chose */
    static char out[1 << 16], err[1 << 14];
    assert_int_equal(bench(out, sizeof out, err, sizeof err), 0);
    assert_non_null(strstr(out, "\"blas_core\": \"Prescott\""));
    assert_int_equal(count(err, "OPENBLAS_CORETYPE=Prescott: OpenBLAS runs its Prescott kernels"), 1);
    assert_null(strstr(err, "Nehalem"));
    /* a process it starts (or any with the mark) stays quiet */
    setenv("KVREPLAY_BLAS_CORE_WARNED", "1", 1);
    assert_int_equal(bench(out, sizeof out, err, sizeof err), 0);
    assert_null(strstr(err, "OPENBLAS_CORETYPE"));
    unsetenv("KVREPLAY_BLAS_CORE_WARNED");
    /* on a CPU (faked) with nothing newer than Prescott's SSE, the choice is not older: no word */
    setenv("KVREPLAY_TEST_CPU_ISA", "sse", 1);
    assert_int_equal(bench(out, sizeof out, err, sizeof err), 0);
    assert_null(strstr(err, "OPENBLAS_CORETYPE"));
    /* commands that do not compute say nothing */
    unsetenv("KVREPLAY_TEST_CPU_ISA");
    const char *rargs[] = {"render", "-t", g_tr, "-q", NULL};
    assert_int_equal(proc_run(NULL, out, sizeof out, err, sizeof err, rargs), 0);
    assert_null(strstr(err, "OPENBLAS_CORETYPE"));
    clear_env();
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(core_names_have_their_levels),
        cmocka_unit_test(an_older_core_is_replaced_unless_the_user_chose_it),
        cmocka_unit_test(the_fake_cpu_can_only_lower_the_level),
        cmocka_unit_test(a_planted_old_pick_is_replaced_said_once_and_recorded),
        cmocka_unit_test(a_user_choice_is_obeyed_and_warned_once),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
