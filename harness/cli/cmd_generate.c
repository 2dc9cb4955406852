/*
 * harness/cli/cmd_generate.c: `kvreplay generate`: greedy generation from a
 * prompt, BOS first when the model's vocabulary adds one. The prompt is
 * prefilled in grid-aligned chunks of C tokens, then each generated token is
 * a decode step (a chunk of one). Stops after N tokens or at EOS (the EOS
 * token is not printed). Prints the generated text (decoded), or its ids
 * with --ids, on stdout; nothing else goes to stdout.
 */
#include "cli.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model.h"
#include "status.h"

static void usage(FILE *f) {
    fprintf(f,
            "usage: kvreplay generate -m MODEL.gguf [-p PROMPT] -n N [OPTIONS]\n"
            "\n"
            "Greedy generation (argmax, lowest id wins ties). BOS first when the model adds one.\n"
            "\n"
            "  -m, --model FILE      GGUF model (required)\n"
            "  -p, --prompt TEXT     prompt text (default: empty, BOS only)\n"
            "  -n, --n-predict N     tokens to generate, >= 0 (required)\n"
            "  --kernel blas|ref     matrix kernels (default blas)\n"
            "  --precision fp32|bf16 compute precision (default fp32)\n"
            "  --threads T           threads (default 1)\n"
            "  --chunk C             prefill chunk size (default 64)\n"
            "  --no-bos              do not prepend BOS\n"
            "  --ids                 print the generated token ids (space-separated) instead of text\n"
            "  -h, --help            this help\n");
}


int hx_cmd_generate(int argc, char **argv) {
    if (hx_wants_help(argc, argv)) { usage(stdout); return HX_EXIT_OK; }
    const char *model = NULL, *prompt = NULL, *v;
    int64_t n_predict = -1, chunk = 64;
    bool no_bos = false, ids = false;
    eng_numerics num = eng_numerics_default();
    for (int i = 1; i < argc; i++) {
        if ((v = hx_opt(argc, argv, &i, "-m")) || (v = hx_opt(argc, argv, &i, "--model"))) model = v;
        else if ((v = hx_opt(argc, argv, &i, "-p")) || (v = hx_opt(argc, argv, &i, "--prompt"))) prompt = v;
        else if ((v = hx_opt(argc, argv, &i, "-n")) || (v = hx_opt(argc, argv, &i, "--n-predict")))
            n_predict = hx_parse_int("-n", v, 0, 1 << 20);
        else if ((v = hx_opt(argc, argv, &i, "--kernel"))) {
            if (eng_kernel_parse(v, &num.kernel)) hx_die(HX_EXIT_USAGE, "--kernel: expected blas or ref, got '%s'", v);
        } else if ((v = hx_opt(argc, argv, &i, "--precision"))) {
            if (eng_precision_parse(v, &num.precision))
                hx_die(HX_EXIT_USAGE, "--precision: expected fp32 or bf16, got '%s'", v);
        } else if ((v = hx_opt(argc, argv, &i, "--threads"))) num.n_threads = (int32_t)hx_parse_int("--threads", v, 1, HX_THREADS_MAX);
        else if ((v = hx_opt(argc, argv, &i, "--chunk"))) chunk = hx_parse_int("--chunk", v, 1, 1 << 20);
        else if (hx_flag(argv, i, "--no-bos")) no_bos = true;
        else if (hx_flag(argv, i, "--ids")) ids = true;
        else hx_bad_arg("generate", argv[i]);
    }
    if (!model) hx_die(HX_EXIT_USAGE, "generate: -m MODEL.gguf is required (see --help)");
    if (n_predict < 0) hx_die(HX_EXIT_USAGE, "generate: -n N is required (see --help)");

    char err[512] = "";
    eng_model *m = NULL;
    int rc = eng_model_load(model, &num, &m, err, sizeof err);
    if (rc != ENG_OK) hx_die(hx_exit_for_input(rc), "%s", err[0] ? err : eng_status_str(rc));
    const eng_model_info *info = eng_model_get_info(m);
    const eng_tokenizer *tok = eng_model_tokenizer(m);
    if (!tok && ((prompt && prompt[0]) || !ids))
        hx_die(HX_EXIT_USAGE, "%s: tokenizer: the model has no vocabulary (use --ids and no prompt)", model);

    /* The prompt: [BOS] + tokens of the text. */
    int32_t n_prompt = 0;
    int32_t *toks = NULL;
    const char *text = prompt ? prompt : "";
    const bool add_bos = !no_bos && tok && eng_tokenizer_add_bos(tok) && eng_tokenizer_bos(tok) >= 0;
    if (tok && !(toks = eng_tokenize_alloc(tok, text, strlen(text), add_bos, false, false, &n_prompt)))
        hx_die(HX_EXIT_INTERNAL, "generate: out of memory");
    if (n_prompt == 0)
        hx_die(HX_EXIT_USAGE, "generate: empty prompt and no BOS token: nothing to condition on");

    const int64_t n_ctx = (int64_t)n_prompt + n_predict + 1;
    if (n_ctx > INT32_MAX) hx_die(HX_EXIT_USAGE, "-n: prompt + N too long");
    eng_seq *s = eng_seq_new(m, (int32_t)n_ctx);
    float *logits = malloc(sizeof(float) * (size_t)info->n_vocab);
    int32_t *out = malloc(sizeof *out * (size_t)(n_predict + 1));
    if (!s || !logits || !out) hx_die(HX_EXIT_INTERNAL, "generate: out of memory");
    eng_prefill_params pp = eng_prefill_params_default();
    pp.chunk = (int32_t)chunk;
    rc = eng_prefill(s, toks, n_prompt, &pp, logits);
    if (rc != ENG_OK) hx_die(HX_EXIT_INTERNAL, "generate: prefill failed: %s", eng_status_str(rc));
    const int32_t eos = tok ? eng_tokenizer_eos(tok) : -1;
    int32_t n_out = 0;
    for (int64_t i = 0; i < n_predict; i++) {
        const int32_t t = eng_argmax(logits, info->n_vocab);
        if (t == eos) break;
        out[n_out++] = t;
        if (i + 1 == n_predict) break;
        rc = eng_decode(s, t, logits);
        if (rc != ENG_OK) hx_die(HX_EXIT_INTERNAL, "generate: decode failed: %s", eng_status_str(rc));
    }

    if (ids) {
        for (int32_t i = 0; i < n_out; i++) printf(i ? " %d" : "%d", out[i]);
        printf("\n");
    } else {
        int64_t need = eng_detokenize(tok, out, n_out, false, NULL, 0);
        size_t tcap = (size_t)(need < 0 ? -need : need) + 1;
        char *txt = malloc(tcap);
        if (!txt) hx_die(HX_EXIT_INTERNAL, "generate: out of memory");
        int64_t got = eng_detokenize(tok, out, n_out, false, txt, tcap);
        if (got < 0) hx_die(HX_EXIT_INTERNAL, "generate: detokenize failed");
        fwrite(txt, 1, (size_t)got, stdout);
        fputc('\n', stdout);
        free(txt);
    }
    int code = fflush(stdout) == 0 ? HX_EXIT_OK : HX_EXIT_INTERNAL;
    free(out);
    free(logits);
    free(toks);
    eng_seq_free(s);
    eng_model_free(m);
    return code;
}
