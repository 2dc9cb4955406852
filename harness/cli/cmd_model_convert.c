/*
 * harness/cli/cmd_model_convert.c: `kvreplay model convert --from rwkv.cpp
 * FILE -o model.gguf`: turns a model file of another implementation into the
 * GGUF llama.cpp's converter writes for it (engine/convert.h), atomically,
 * and prints one summary line on stderr. One source format so far: rwkv.cpp
 * (RWKV-7, FP32 or FP16, byte vocabulary).
 *
 * Exit codes: 0 written; 2 bad usage or an input that cannot be converted
 * (the message names the file, offset and field); 3 a write or memory failure.
 */
#include "cli.h"
#include "errors.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "convert.h"
#include "jsonl.h"
#include "model.h"
#include "status.h"
#include "util.h"

static const char usage[] =
    "usage: kvreplay model convert --from rwkv.cpp FILE.bin -o model.gguf\n"
    "\n"
    "Converts a model file of another implementation to the GGUF llama.cpp's own converter\n"
    "writes for the same model (docs/gguf.md, \"Converting rwkv.cpp models\").\n"
    "\n"
    "  --from FORMAT    rwkv.cpp: an RWKV-7 model in rwkv.cpp's format (FP32 or FP16; a\n"
    "                   256-token byte vocabulary becomes llama.cpp's RWKV tokenizer)\n"
    "  -o, --output F   output GGUF (required; written atomically)\n"
    "\n"
    "exit codes: 0 ok, 2 bad usage or input file, 3 write or internal error\n";

int hx_cmd_model_convert(int argc, char **argv) {
    if (hx_wants_help(argc, argv)) {
        fputs(usage, stdout);
        return HX_EXIT_OK;
    }
    const char *from = NULL, *in = NULL, *out = NULL, *v;
    for (int i = 1; i < argc; i++) {
        if ((v = hx_opt(argc, argv, &i, "--from"))) from = v;
        else if ((v = hx_opt(argc, argv, &i, "-o")) || (v = hx_opt(argc, argv, &i, "--output"))) out = v;
        else if (argv[i][0] != '-' && !in) in = argv[i];
        else hx_bad_arg("model convert", argv[i]);
    }
    if (!from) hx_die(HX_EXIT_USAGE, "model convert: --from FORMAT is required (rwkv.cpp)");
    if (strcmp(from, "rwkv.cpp") != 0) hx_die(HX_EXIT_USAGE, "--from: expected rwkv.cpp, got '%s'", from);
    if (!in) hx_die(HX_EXIT_USAGE, "model convert: FILE is required (see kvreplay model convert --help)");
    if (!out) hx_die(HX_EXIT_USAGE, "model convert: -o FILE is required (see kvreplay model convert --help)");

    char err[512] = "";
    if (hx_output_check(out, err, sizeof err) != ENG_OK) hx_die(HX_EXIT_USAGE, "model convert: -o %s", err);
    void *buf = NULL;
    size_t n = 0;
    int rc = eng_convert_rwkvcpp_to_buffer(in, &buf, &n, err, sizeof err);
    if (rc != ENG_OK) hx_die(rc == ENG_ERR_NOMEM ? HX_EXIT_INTERNAL : HX_EXIT_USAGE, "%s", err);
    rc = eng_write_atomic(out, buf, n, err, sizeof err);
    free(buf);
    if (rc != ENG_OK) hx_die(hx_exit_for_status(rc), "%s", err);

    /* summary from the model as the engine loads it */
    eng_numerics num = eng_numerics_default();
    eng_model *m = NULL;
    if ((rc = eng_model_load(out, &num, &m, err, sizeof err)) != ENG_OK)
        hx_die(HX_EXIT_INTERNAL, "%s: written but does not load: %s", out, err);
    const eng_model_info *mi = eng_model_get_info(m);
    fprintf(stderr, "model convert: wrote %s: arch %s from rwkv.cpp %s, V %d, D %d, L %d, heads %d x %d, F %d, "
            "%lld params, %zu bytes\n", out, mi->arch, in, mi->n_vocab, mi->n_embd, mi->n_layer,
            mi->n_embd / mi->wkv_head_size, mi->wkv_head_size, mi->n_ff, (long long)mi->n_params, n);
    eng_model_free(m);
    return HX_EXIT_OK;
}
