/*
 * tests/test_render.c: `kvreplay render`: the exact prompt text of a request
 * (--raw: byte for byte what the template renders after normalization), the
 * marks (stable-prefix end, normalized spans, a literal mark character
 * doubled), request selection, the token listing (the replay's ids: BOS
 * first, the stable-prefix line at the replay's stable_end) and the errors
 * (out of range, an id outside the vocabulary named with file and line).
 * Skipped when build/kvreplay has not been built.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "normalize.h"
#include "prepare.h"
#include "status.h"
#include "template.h"
#include "tokenizer.h"
#include "transcript.h"
#include "util.h"

#define VOCAB "../shared/data/vocab/ggml-vocab-llama-spm.gguf"

static const char k_transcript[] =
    "{\"v\":2,\"session\":\"s\",\"turn\":0,\"system\":[{\"type\":\"text\",\"text\":\"x-anthropic-billing-header: "
    "cc_version=2.1.121.abc; cc_entrypoint=cli; cch=1a2b3;\"},{\"type\":\"text\",\"text\":\"You are a test.\"}],"
    "\"messages\":[{\"role\":\"user\",\"content\":\"Show \\u27e6 as is.\"}],\"response\":{\"content\":[{\"type\":\"text\","
    "\"text\":\"Done.\"}]}}\n"
    "{\"v\":2,\"session\":\"s\",\"turn\":1,\"prev\":0,\"system\":[{\"type\":\"text\",\"text\":\"x-anthropic-billing-header: "
    "cc_version=2.1.121.abc; cc_entrypoint=cli; cch=9f8e7;\"},null],\"append\":[{\"role\":\"user\",\"content\":\"Again.\"}]}\n"
    "{\"v\":1,\"session\":\"t\",\"turn\":0,\"tokens\":[1,99999]}\n";

static char g_dir[64], g_t[128];

static int setup(void **state) {
    (void)state;
    snprintf(g_dir, sizeof g_dir, "/tmp/kvr_render_XXXXXX");
    if (!mkdtemp(g_dir)) return -1;
    snprintf(g_t, sizeof g_t, "%s/t.jsonl", g_dir);
    char err[256];
    return eng_write_atomic(g_t, k_transcript, strlen(k_transcript), err, sizeof err) ? -1 : 0;
}

static int teardown(void **state) {
    (void)state;
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", g_dir);
    return system(cmd) == 0 ? 0 : -1;
}

static const char *bin(void) {
    static char b[256];
    snprintf(b, sizeof b, "%s/kvreplay", getenv("BUILD") ? getenv("BUILD") : "build");
    return b;
}

/* Runs `kvreplay render ARGS` with stdout to a file; returns the exit code and the output (malloc'd). */
static int render(const char *args, char **out, char **errout) {
    char cmd[1024], o[160], e[160];
    snprintf(o, sizeof o, "%s/out.txt", g_dir);
    snprintf(e, sizeof e, "%s/err.txt", g_dir);
    snprintf(cmd, sizeof cmd, "%s render -t %s %s >%s 2>%s", bin(), g_t, args, o, e);
    int st = system(cmd);
    char err[256];
    size_t n;
    if (eng_read_file(o, out, &n, err, sizeof err)) *out = NULL;
    if (errout && eng_read_file(e, errout, &n, err, sizeof err)) *errout = NULL;
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static void the_marked_prompt_shows_the_stable_prefix_and_normalized_spans(void **state) {
    (void)state;
    if (access(bin(), X_OK) != 0) skip();
    char *out, *err;
    assert_int_equal(render("--request 1 --normalize anthropic-cch --color never", &out, &err), 0);
    assert_string_equal(out,
                        "<|im_start|>system\nx-anthropic-billing-header: cc_version=2.1.121.abc; cc_entrypoint=cli; "
                        "cch=\xE2\x9F\xA6normalized:anthropic-cch\xE2\x9F\xA7" "fffff\xE2\x9F\xA6/normalized\xE2\x9F\xA7;"
                        "You are a test.<|im_end|>\n\xE2\x9F\xA6stable-prefix-end\xE2\x9F\xA7<|im_start|>user\n"
                        "Show \xE2\x9F\xA6\xE2\x9F\xA6 as is.<|im_end|>\n<|im_start|>assistant\nDone.<|im_end|>\n"
                        "<|im_start|>user\nAgain.<|im_end|>\n<|im_start|>assistant\n");
    assert_non_null(strstr(err, "request 1: session \"s\" turn 1 (line 2); template chatml; normalize anthropic-cch: "
                                "1 values changed, 1 spans marked"));
    assert_non_null(strstr(err, "the stable prefix ends at byte 126"));
    free(out);
    free(err);
    /* in colour: the same text, the marks as escape sequences, no doubled character */
    assert_int_equal(render("--session s --turn 1 --normalize anthropic-cch --color always -q", &out, NULL), 0);
    assert_non_null(strstr(out, "cch=\x1b[30;43m" "fffff\x1b[0m;"));
    assert_non_null(strstr(out, "Show \xE2\x9F\xA6 as is."));
    free(out);
}

static void raw_is_exactly_the_text_the_replay_renders(void **state) {
    (void)state;
    if (access(bin(), X_OK) != 0) skip();
    hx_transcript t;
    char e[256];
    assert_int_equal(hx_transcript_read(g_t, false, &t, NULL, e, sizeof e), ENG_OK);
    hx_normalize nz;
    assert_int_equal(hx_normalize_parse("anthropic-cch", &nz), ENG_OK);
    assert_int_equal(hx_normalize_apply(&nz, &t.reqs[1]), 1);
    hx_render p, r;
    assert_int_equal(hx_render_prompt(HX_TEMPLATE_LLAMA3, &t.reqs[1], &p, e, sizeof e), ENG_OK);
    assert_int_equal(hx_render_response(HX_TEMPLATE_LLAMA3, &t.reqs[0], &r, e, sizeof e), ENG_OK);
    char *out;
    assert_int_equal(render("--request 1 --template llama3 --normalize anthropic-cch --raw", &out, NULL), 0);
    assert_string_equal(out, p.text);
    free(out);
    /* without the rule the checksum stays; --response appends the continuation replay feeds */
    assert_int_equal(render("--request 0 --template llama3 --raw --response", &out, NULL), 0);
    assert_non_null(strstr(out, "cch=1a2b3;"));
    size_t n = strlen(out);
    assert_true(n > r.len);
    assert_string_equal(out + n - r.len, r.text);
    free(out);
    hx_render_free(&p);
    hx_render_free(&r);
    hx_transcript_free(&t);
}

static void tokens_are_the_replays_with_the_stable_prefix_line(void **state) {
    (void)state;
    if (access(bin(), X_OK) != 0 || access(VOCAB, R_OK) != 0) skip();
    char e[256], arg[256];
    eng_tokenizer *tok;
    assert_int_equal(hx_vocab_load(VOCAB, &tok, NULL, e, sizeof e), ENG_OK);
    hx_transcript t;
    assert_int_equal(hx_transcript_read(g_t, false, &t, NULL, e, sizeof e), ENG_OK);
    hx_prepare_ctx *pc;
    assert_int_equal(hx_prepare_ctx_new(tok, "chatml", NULL, "anthropic-cch", &pc, e, sizeof e), ENG_OK);
    hx_prepared p;
    assert_int_equal(hx_prepare(pc, &t.reqs[1], &p, e, sizeof e), ENG_OK);
    char *out;
    snprintf(arg, sizeof arg, "--request 1 -m %s --normalize anthropic-cch --tokens --raw", VOCAB);
    assert_int_equal(render(arg, &out, NULL), 0);
    eng_buf want = {0};
    for (int32_t i = 0; i < p.n; i++) eng_buf_printf(&want, i ? " %d" : "%d", p.tokens[i]);
    eng_buf_printf(&want, "\n");
    assert_string_equal(out, want.data);
    free(out);
    snprintf(arg, sizeof arg, "--request 1 -m %s --normalize anthropic-cch --tokens", VOCAB);
    assert_int_equal(render(arg, &out, NULL), 0);
    /* line k is token k, the marker line sits before token stable_end */
    char marker[64];
    snprintf(marker, sizeof marker, "\n-- stable prefix ends --\n%d %d ", p.stable_end, p.tokens[p.stable_end]);
    assert_non_null(strstr(out, marker));
    assert_true(strncmp(out, "0 1 <s>\n", 8) == 0);
    assert_non_null(strstr(out, " *\n")); /* a token of the normalized checksum */
    free(out);
    eng_buf_free(&want);
    hx_prepared_free(&p);
    hx_prepare_ctx_free(pc);
    hx_transcript_free(&t);
    eng_tokenizer_free(tok);
    /* an id outside the vocabulary: the file and line are named */
    char *err;
    snprintf(arg, sizeof arg, "--request 2 -m %s --tokens", VOCAB);
    assert_int_equal(render(arg, &out, &err), 2);
    char w[256];
    snprintf(w, sizeof w, "%s:3: tokens[1]: id 99999 is outside the vocabulary [0, 32000)", g_t);
    assert_non_null(strstr(err, w));
    free(out);
    free(err);
}

static void bad_selections_exit_2_with_a_message(void **state) {
    (void)state;
    if (access(bin(), X_OK) != 0) skip();
    char *out, *err;
    assert_int_equal(render("--request 3", &out, &err), 2);
    assert_non_null(strstr(err, "render: --request 3: "));
    assert_non_null(strstr(err, " holds 3 requests (0 to 2)"));
    free(out), free(err);
    assert_int_equal(render("--session s --turn 7", &out, &err), 2);
    assert_non_null(strstr(err, "has no request of session \"s\" at turn 7"));
    free(out), free(err);
    assert_int_equal(render("--request 2", &out, &err), 2);
    assert_non_null(strstr(err, "is pre-tokenized"));
    free(out), free(err);
    assert_int_equal(render("--tokens", &out, &err), 2);
    free(out), free(err);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(the_marked_prompt_shows_the_stable_prefix_and_normalized_spans),
        cmocka_unit_test(raw_is_exactly_the_text_the_replay_renders),
        cmocka_unit_test(tokens_are_the_replays_with_the_stable_prefix_line),
        cmocka_unit_test(bad_selections_exit_2_with_a_message),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
