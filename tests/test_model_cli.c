/*
 * tests/test_model_cli.c: the model commands of the CLI, through the
 * binary ($BUILD/kvreplay; skipped when absent):
 *
 *   - `kvreplay logits` on stories260K (../shared/data, skipped when absent)
 *     after "Once upon a time" (ids 1 403 407 261 378): the values llama.cpp
 *     computes for that prompt, stated below (flash attention off, F32 KV
 *     cache, measured August 2026), within 1e-4 (two implementations); the
 *     text output is V exact hex floats per line, the binary output the same
 *     bits; --all gives one line per position, the last one the default
 *     output; -p and --tokens agree; bad usage exits 2 naming the flag;
 *   - `kvreplay model convert --from rwkv.cpp` writes the GGUF the engine
 *     loads (the converter's checks are in test_rwkv7.c) and exits 2 on a bad
 *     input, 2 on a bad --from;
 *   - `kvreplay model synth --arch rwkv7` and its flags; a flag of another
 *     architecture exits 2.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "model.h"
#include "runcli.h"
#include "status.h"

#define STORIES "../shared/data/models/stories260K.gguf"
#define RWKV_FP32 "../shared/data/models/rwkv7/tiny-rwkv-7v0-834K-FP32.bin"

static char g_dir[64];

static int setup(void **state) {
    (void)state;
    snprintf(g_dir, sizeof g_dir, "/tmp/kvr_modelcli_XXXXXX");
    return mkdtemp(g_dir) ? 0 : -1;
}

static int teardown(void **state) {
    (void)state;
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", g_dir);
    return system(cmd) == 0 ? 0 : -1;
}

static const char *need_bin(void) {
    const char *bin = kvr_bin();
    if (!bin) {
        print_message("skipped: no kvreplay binary (build it first)\n");
        skip();
    }
    return bin;
}

static void need_file(const char *path) {
    if (access(path, R_OK) != 0) {
        print_message("skipped: %s absent\n", path);
        skip();
    }
}

/* The floats of one line of %a values; returns how many. */
static int parse_line(const char *s, float *out, int cap, const char **next) {
    int n = 0;
    while (*s && *s != '\n' && n < cap) {
        char *end;
        out[n++] = strtof(s, &end);
        assert_true(end != s);
        s = end;
        if (*s == ' ') s++;
    }
    if (next) *next = *s == '\n' ? s + 1 : s;
    return n;
}

// ----------------------------------------------------------------------------
// kvreplay logits

/* llama.cpp's logits for stories260K after 1 403 407 261 378: the five
 * largest and logit 0 (llama-simple's library, -fa off, F32 KV cache). */
static const struct { int id; float v; } g_llamacpp[] = {
    {432, 17.799398f}, {383, 14.281260f}, {322, 9.709651f}, {353, 9.587290f}, {323, 9.134245f}, {0, -10.136577f},
};

static void logits_of_stories260k_match_llamacpps_values(void **state) {
    (void)state;
    const char *bin = need_bin();
    need_file(STORIES);
    char cmd[512], *out = NULL;
    size_t n;
    snprintf(cmd, sizeof cmd, "%s logits -m %s -p 'Once upon a time'", bin, STORIES);
    assert_int_equal(kvr_run(cmd, &out, &n), 0);
    float lg[600];
    const char *rest;
    assert_int_equal(parse_line(out, lg, 600, &rest), 512);
    assert_string_equal(rest, "");  /* one line */
    float worst = 0.0f;
    for (size_t i = 0; i < sizeof g_llamacpp / sizeof g_llamacpp[0]; i++)
        worst = fmaxf(worst, fabsf(lg[g_llamacpp[i].id] - g_llamacpp[i].v));
    print_message("stories260K, 'Once upon a time': max abs diff to llama.cpp's stated logits %.3g\n", worst);
    assert_true(worst <= 1e-4f);
    assert_int_equal(eng_argmax(lg, 512), 432);
    /* the same bits in binary, and through --tokens */
    char path[128], *raw;
    snprintf(path, sizeof path, "%s/l.bin", g_dir);
    snprintf(cmd, sizeof cmd, "%s logits -m %s --tokens 1,403,407,261,378 --format bin -o %s", bin, STORIES, path);
    assert_int_equal(kvr_run(cmd, NULL, NULL), 0);
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    float lb[513];
    assert_int_equal(fread(lb, sizeof(float), 513, f), 512);
    fclose(f);
    assert_memory_equal(lb, lg, sizeof(float) * 512);
    /* --all: one line per position, the last one the default output */
    snprintf(cmd, sizeof cmd, "%s logits -m %s --tokens '1 403 407 261 378' --all", bin, STORIES);
    assert_int_equal(kvr_run(cmd, &raw, &n), 0);
    rest = raw;
    float row[600];
    for (int r = 0; r < 5; r++) assert_int_equal(parse_line(rest, row, 600, &rest), 512);
    assert_string_equal(rest, "");
    assert_memory_equal(row, lg, sizeof(float) * 512);
    free(raw);
    free(out);
}

static void logits_refuses_bad_usage_naming_the_flag(void **state) {
    (void)state;
    const char *bin = need_bin();
    need_file(STORIES);
    struct { const char *args, *why; } bad[] = {
        {"-p x --tokens 1", "both prompts"},
        {"", "no prompt"},
        {"--tokens 1,512", "an id out of range"},
        {"--tokens 1,x", "not an integer"},
        {"-p x --format csv", "a bad format"},
        {"--tokens 1 --no-bos", "--no-bos without -p"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char cmd[512];
        snprintf(cmd, sizeof cmd, "%s logits -m %s %s 2>/dev/null", bin, STORIES, bad[i].args);
        if (kvr_run(cmd, NULL, NULL) != 2) fail_msg("%s (%s): expected exit 2", bad[i].args, bad[i].why);
    }
}

// ----------------------------------------------------------------------------
// kvreplay model convert, model synth --arch rwkv7

static void model_convert_writes_a_model_the_engine_loads(void **state) {
    (void)state;
    const char *bin = need_bin();
    char cmd[512], path[128];
    snprintf(path, sizeof path, "%s/x.gguf", g_dir);
    snprintf(cmd, sizeof cmd, "%s model convert --from gguf %s -o %s 2>/dev/null", bin, RWKV_FP32, path);
    assert_int_equal(kvr_run(cmd, NULL, NULL), 2);
    snprintf(cmd, sizeof cmd, "%s model convert --from rwkv.cpp %s/absent.bin -o %s 2>/dev/null", bin, g_dir, path);
    assert_int_equal(kvr_run(cmd, NULL, NULL), 2);
    assert_int_not_equal(access(path, F_OK), 0);  /* nothing half-written */
    need_file(RWKV_FP32);
    snprintf(cmd, sizeof cmd, "%s model convert --from rwkv.cpp %s -o %s 2>/dev/null", bin, RWKV_FP32, path);
    assert_int_equal(kvr_run(cmd, NULL, NULL), 0);
    /* the converted model greedily continues "in with a space, as rwkv.cpp does */
    char *out = NULL;
    snprintf(cmd, sizeof cmd, "%s logits -m %s -p '\"in'", bin, path);
    assert_int_equal(kvr_run(cmd, &out, NULL), 0);
    float lg[300];
    assert_int_equal(parse_line(out, lg, 300, NULL), 256);
    assert_int_equal(eng_argmax(lg, 256), 32);
    free(out);
}

static void model_synth_writes_rwkv7_and_refuses_foreign_flags(void **state) {
    (void)state;
    const char *bin = need_bin();
    char cmd[512], path[128];
    snprintf(path, sizeof path, "%s/r.gguf", g_dir);
    snprintf(cmd, sizeof cmd, "%s model synth --arch rwkv7 --dim 128 --wkv-head-size 32 --lora 16 --ff 256 "
             "--layers 3 --seed 5 -o %s 2>/dev/null", bin, path);
    assert_int_equal(kvr_run(cmd, NULL, NULL), 0);
    eng_numerics num = eng_numerics_default();
    eng_model *m = NULL;
    char err[256];
    assert_int_equal(eng_model_load(path, &num, &m, err, sizeof err), ENG_OK);
    const eng_model_info *in = eng_model_get_info(m);
    assert_string_equal(in->arch, "rwkv7");
    assert_int_equal(in->n_layer, 3);
    assert_int_equal(in->wkv_head_size, 32);
    assert_int_equal(in->n_ff, 256);
    assert_string_equal(eng_model_layer_kind_name(m, 2), "rwkv7");
    eng_model_free(m);
    const char *foreign[] = {"--window 8", "--heads 2", "--ssm-state 4"};
    for (int i = 0; i < 3; i++) {
        snprintf(cmd, sizeof cmd, "%s model synth --arch rwkv7 %s --seed 5 -o %s 2>/dev/null", bin, foreign[i], path);
        if (kvr_run(cmd, NULL, NULL) != 2) fail_msg("--arch rwkv7 %s: expected exit 2", foreign[i]);
    }
    snprintf(cmd, sizeof cmd, "%s model synth --arch llama --lora 8 --seed 5 -o %s 2>/dev/null", bin, path);
    assert_int_equal(kvr_run(cmd, NULL, NULL), 2);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(logits_of_stories260k_match_llamacpps_values),
        cmocka_unit_test(logits_refuses_bad_usage_naming_the_flag),
        cmocka_unit_test(model_convert_writes_a_model_the_engine_loads),
        cmocka_unit_test(model_synth_writes_rwkv7_and_refuses_foreign_flags),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
