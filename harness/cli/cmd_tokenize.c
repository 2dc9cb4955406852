/*
 * harness/cli/cmd_tokenize.c: `kvreplay tokenize`: prints the token ids a
 * model's vocabulary gives a text, on one line separated by single spaces.
 *
 * BOS (and EOS) follow the model's add_bos_token / add_eos_token, as
 * llama.cpp's llama-tokenize does; --no-bos leaves both out (the form of
 * llama.cpp's tokenizer test vectors). TEXT is taken byte for byte (no
 * escape processing); "-" reads it from stdin, trailing newline included.
 * Special-token texts (<s>, <|im_start|>) are matched as tokens only with
 * --special. --pieces prints the vocabulary pieces instead of the ids, one
 * per id, with whitespace, control bytes and backslashes escaped as \xNN.
 */
#include "cli.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gguf.h"
#include "status.h"
#include "tokenizer.h"

static void usage(FILE *f) {
    fprintf(f,
            "usage: kvreplay tokenize -m MODEL.gguf [--no-bos] [--pieces] [--special] [--] TEXT|-\n"
            "\n"
            "Prints the token ids of TEXT (\"-\": read stdin) on one line, separated by single spaces.\n"
            "\n"
            "  -m, --model FILE   GGUF file with tokenizer.ggml.* metadata (a model or a vocabulary)\n"
            "  --no-bos           leave out BOS (and EOS) even when the model adds them\n"
            "  --pieces           print the vocabulary pieces (e.g. \xE2\x96\x81time, <0x0A>) instead of ids;\n"
            "                     whitespace, control bytes and '\\' inside a piece print as \\xNN\n"
            "  --special          match special-token texts such as <s> or <|im_start|> as single tokens\n"
            "\n"
            "exit codes: 0 ok, 2 bad usage or model file, 3 I/O or internal error\n");
}

/* Reads all of stdin into a malloc'd buffer; NULL on failure. */
static char *read_stdin(size_t *n) {
    size_t cap = 1 << 16, len = 0;
    char *b = malloc(cap);
    if (!b) return NULL;
    for (;;) {
        if (len == cap) {
            char *nb = realloc(b, cap *= 2);
            if (!nb) { free(b); return NULL; }
            b = nb;
        }
        size_t k = fread(b + len, 1, cap - len, stdin);
        len += k;
        if (k == 0) break;
    }
    if (ferror(stdin)) { free(b); return NULL; }
    *n = len;
    return b;
}

int hx_cmd_tokenize(int argc, char **argv) {
    if (hx_wants_help(argc, argv)) { usage(stdout); return HX_EXIT_OK; }
    const char *model = NULL, *text_arg = NULL;
    bool no_bos = false, pieces = false, special = false;
    for (int i = 1; i < argc; i++) {
        const char *v;
        if (hx_flag(argv, i, "--")) {
            if (i + 1 >= argc || text_arg) hx_die(HX_EXIT_USAGE, "tokenize: expected exactly one TEXT after --");
            text_arg = argv[++i];
            if (i + 1 < argc) hx_bad_arg("tokenize", argv[i + 1]);
        }
        else if (hx_flag(argv, i, "--no-bos")) no_bos = true;
        else if (hx_flag(argv, i, "--pieces")) pieces = true;
        else if (hx_flag(argv, i, "--special")) special = true;
        else if ((v = hx_opt(argc, argv, &i, "-m")) || (v = hx_opt(argc, argv, &i, "--model"))) model = v;
        else if ((argv[i][0] != '-' || !strcmp(argv[i], "-")) && !text_arg) text_arg = argv[i];
        else hx_bad_arg("tokenize", argv[i]);
    }
    if (!model) hx_die(HX_EXIT_USAGE, "tokenize: -m MODEL.gguf is required (see kvreplay tokenize --help)");
    if (!text_arg) hx_die(HX_EXIT_USAGE, "tokenize: TEXT is required (\"-\" reads stdin)");

    char err[512];
    eng_gguf *g = NULL;
    int rc = eng_gguf_open(model, &g, err, sizeof err);
    if (rc != ENG_OK) hx_die(rc == ENG_ERR_NOMEM ? HX_EXIT_INTERNAL : HX_EXIT_USAGE, "%s", err);
    eng_tokenizer *t = NULL;
    rc = eng_tokenizer_load(g, &t, err, sizeof err);
    eng_gguf_close(g);
    if (rc != ENG_OK) hx_die(rc == ENG_ERR_NOMEM ? HX_EXIT_INTERNAL : HX_EXIT_USAGE, "%s", err);

    char *owned = NULL;
    const char *text = text_arg;
    size_t len = strlen(text_arg);
    if (!strcmp(text_arg, "-")) {
        owned = read_stdin(&len);
        if (!owned) hx_die(HX_EXIT_INTERNAL, "tokenize: stdin: read failed");
        text = owned;
    }
    bool add_bos = !no_bos && eng_tokenizer_add_bos(t), add_eos = !no_bos && eng_tokenizer_add_eos(t);
    int32_t n = 0;
    int32_t *ids = eng_tokenize_alloc(t, text, len, add_bos, add_eos, special, &n);
    if (!ids) hx_die(HX_EXIT_INTERNAL, "tokenize: out of memory (%zu bytes of text)", len);
    for (int32_t i = 0; i < n; i++) {
        if (i) putchar(' ');
        if (pieces) {
            size_t pl;
            const char *p = eng_token_piece(t, ids[i], &pl);
            hx_fput_piece(stdout, p, pl);
        } else {
            printf("%d", ids[i]);
        }
    }
    putchar('\n');
    free(ids);
    free(owned);
    eng_tokenizer_free(t);
    if (fflush(stdout) != 0 || ferror(stdout)) hx_die(HX_EXIT_INTERNAL, "tokenize: stdout: write failed");
    return HX_EXIT_OK;
}
