/*
 * harness/cli/cmd_logits.c: `kvreplay logits`: the logits the engine computes
 * for a prompt, so that anyone can hold it against another implementation.
 *
 * The prompt is -p TEXT (tokenized with the model's vocabulary, BOS first
 * when it adds one, unless --no-bos) or --tokens IDS (ids as given). It is
 * prefilled cold in grid-aligned chunks of C tokens; the logits are those of
 * the last prompt position, or with --all of every position (the output head
 * then runs on every chunk: eng_prefill's all_logits). Output, on stdout or
 * atomically into -o FILE:
 *   text (default): one line per position, its V logits as C99 hex floats
 *                   ("%a", exact) separated by single spaces;
 *   bin:            raw little-endian float32, V per position, nothing else.
 * Binary output is refused on a terminal. The numerics (kernel, precision,
 * threads, chunk) are the engine's options, as in replay.
 */
#include "cli.h"
#include "errors.h"

#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "model.h"
#include "status.h"
#include "util.h"

typedef struct logits_opts {
    const char  *model, *prompt, *tokens, *format, *out;
    bool         all, no_bos;
    eng_numerics num;
    int32_t      chunk;
} logits_opts;

static const hx_option table[] = {
    {"--model", "-m", "FILE", "GGUF model (required)", HX_OPT_STRING, offsetof(logits_opts, model), 0, 0, NULL},
    {"--prompt", "-p", "TEXT", "prompt text, tokenized with the model's vocabulary", HX_OPT_STRING,
     offsetof(logits_opts, prompt), 0, 0, NULL},
    {"--tokens", NULL, "IDS", "prompt token ids, separated by commas or spaces (as `kvreplay tokenize`\n"
     "prints them); exactly one of -p and --tokens", HX_OPT_STRING, offsetof(logits_opts, tokens), 0, 0, NULL},
    {"--no-bos", NULL, NULL, "with -p: no BOS even when the model adds one", HX_OPT_FLAG,
     offsetof(logits_opts, no_bos), 0, 0, NULL},
    {"--all", NULL, NULL, "the logits of every prompt position (default: the last one)", HX_OPT_FLAG,
     offsetof(logits_opts, all), 0, 0, NULL},
    {"--format", NULL, "text|bin", "text: one line per position, %a hex floats; bin: raw little-endian\n"
     "float32, V per position (default text)", HX_OPT_STRING, offsetof(logits_opts, format), 0, 0, NULL},
    {"--output", "-o", "FILE", "write there (atomically) instead of stdout", HX_OPT_STRING,
     offsetof(logits_opts, out), 0, 0, NULL},
    HX_OPTS_ENGINE(logits_opts),
    {0},
};

static const char usage_text[] =
    "usage: kvreplay logits -m MODEL.gguf (-p TEXT | --tokens IDS) [--all] [--format text|bin] [OPTIONS]\n"
    "\n"
    "Prints the logits of the last prompt position (every position with --all), computed by a\n"
    "cold prefill in grid-aligned chunks, as exact hex floats or raw float32.\n"
    "\n"
    "exit codes: 0 ok, 2 bad usage, model or token id, 3 I/O or internal error\n";

/* Ids separated by commas and/or whitespace, each in [0, V). Exits 2 naming the bad one. */
static int32_t *parse_ids(const char *s, int32_t V, int32_t *n) {
    size_t cap = 16;
    int32_t *ids = malloc(cap * sizeof *ids);
    *n = 0;
    for (const char *p = s; ids;) {
        while (*p == ',' || *p == ' ' || *p == '\t' || *p == '\n') p++;
        if (!*p) break;
        char *end = NULL;
        const long long v = strtoll(p, &end, 10);
        if (end == p || (*end && *end != ',' && *end != ' ' && *end != '\t' && *end != '\n'))
            hx_die(HX_EXIT_USAGE, "--tokens: '%.*s' is not an integer", (int)strcspn(p, ", \t\n"), p);
        if (v < 0 || v >= V)
            hx_die(HX_EXIT_USAGE, "--tokens: id %lld out of range [0, %d) of the model's vocabulary", v, V);
        if ((size_t)*n == cap && !(ids = realloc(ids, (cap *= 2) * sizeof *ids))) break;
        ids[(*n)++] = (int32_t)v;
        p = end;
    }
    if (!ids) hx_die(HX_EXIT_INTERNAL, "logits: out of memory");
    if (*n == 0) hx_die(HX_EXIT_USAGE, "--tokens: no token id");
    return ids;
}

int hx_cmd_logits(int argc, char **argv) {
    logits_opts o = {.format = "text", .num = eng_numerics_default(), .chunk = 64};
    if (hx_wants_help(argc, argv)) {
        hx_usage(stdout, usage_text, table);
        return HX_EXIT_OK;
    }
    for (int i = 1; i < argc; i++)
        if (!hx_options_parse(table, &o, argc, argv, &i)) hx_bad_arg("logits", argv[i]);
    if (!o.model) hx_die(HX_EXIT_USAGE, "logits: -m MODEL.gguf is required (see kvreplay logits --help)");
    if (!o.prompt == !o.tokens) hx_die(HX_EXIT_USAGE, "logits: give exactly one of -p TEXT and --tokens IDS");
    if (o.no_bos && !o.prompt) hx_die(HX_EXIT_USAGE, "--no-bos: applies to -p only");
    const bool bin = !strcmp(o.format, "bin");
    if (!bin && strcmp(o.format, "text") != 0)
        hx_die(HX_EXIT_USAGE, "--format: expected text or bin, got '%s'", o.format);
    if (bin && !o.out && isatty(STDOUT_FILENO))
        hx_die(HX_EXIT_USAGE, "logits: refusing to write binary to a terminal (redirect stdout or use -o FILE)");

    char err[512] = "";
    eng_model *m = NULL;
    int rc = eng_model_load(o.model, &o.num, &m, err, sizeof err);
    if (rc != ENG_OK) hx_die(hx_exit_for_input(rc), "%s", err);
    const int32_t V = eng_model_get_info(m)->n_vocab;
    int32_t n = 0, *toks;
    if (o.tokens) {
        toks = parse_ids(o.tokens, V, &n);
    } else {
        const eng_tokenizer *tok = eng_model_tokenizer(m);
        if (!tok) hx_die(HX_EXIT_USAGE, "%s: the model has no vocabulary: give --tokens", o.model);
        const bool bos = !o.no_bos && eng_tokenizer_add_bos(tok);
        toks = eng_tokenize_alloc(tok, o.prompt, strlen(o.prompt), bos, false, false, &n);
        if (!toks) hx_die(HX_EXIT_INTERNAL, "logits: tokenizing the prompt failed (out of memory)");
        if (n == 0) hx_die(HX_EXIT_USAGE, "logits: the prompt has no token (empty text and no BOS)");
    }
    const int64_t rows = o.all ? n : 1;
    float *lg = malloc(sizeof(float) * (size_t)(rows * V));
    eng_seq *s = eng_seq_new(m, n);
    if (!lg || !s) hx_die(HX_EXIT_INTERNAL, "logits: out of memory (%lld x %d logits)", (long long)rows, V);
    eng_prefill_params pp = eng_prefill_params_default();
    pp.chunk = o.chunk;
    pp.all_logits = o.all;
    if ((rc = eng_prefill(s, toks, n, &pp, lg)) != ENG_OK)
        hx_die(HX_EXIT_INTERNAL, "logits: prefill failed: %s", eng_status_str(rc));

    eng_buf b = {0};
    if (bin) {
        rc = eng_buf_append(&b, lg, sizeof(float) * (size_t)(rows * V));  /* the machine is little-endian */
    } else {
        for (int64_t r = 0; r < rows && rc == ENG_OK; r++)
            for (int32_t j = 0; j < V && rc == ENG_OK; j++)
                rc = eng_buf_printf(&b, j + 1 < V ? "%a " : "%a\n", (double)lg[r * V + j]);
    }
    if (rc != ENG_OK) hx_die(HX_EXIT_INTERNAL, "logits: out of memory");
    if (o.out) {
        if ((rc = eng_write_atomic(o.out, b.data, b.len, err, sizeof err)) != ENG_OK) hx_die(hx_exit_for_status(rc), "%s", err);
    } else if (fwrite(b.data, 1, b.len, stdout) != b.len || fflush(stdout) != 0) {
        hx_die(HX_EXIT_INTERNAL, "logits: stdout: write failed");
    }
    eng_buf_free(&b);
    eng_seq_free(s);
    free(lg);
    free(toks);
    eng_model_free(m);
    return HX_EXIT_OK;
}
