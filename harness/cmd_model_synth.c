/*
 * harness/cmd_model_synth.c: `kvreplay model synth`: writes a seeded
 * synthetic GGUF model (engine/synth.h) atomically and prints one summary
 * line on stderr. A preset gives the defaults; explicit flags override it.
 * --seed and -o are required (exit 2 without them).
 */
#include "cli.h"
#include "gguf.h"
#include "status.h"
#include "synth.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char usage[] =
    "usage: kvreplay model synth [--preset tiny|small|base] [--arch llama]\n"
    "           [--layers N] [--dim D] [--heads H] [--kv-heads G] [--ff F] [--ctx N] [--rot R]\n"
    "           [--vocab VOCAB.gguf] [--type f32|f16|bf16|q8_0] [--name NAME]\n"
    "           --seed S -o model.gguf\n"
    "\n"
    "Writes a llama-architecture GGUF model with random weights drawn from the seed\n"
    "(the same options give a byte-identical file).\n"
    "\n"
    "  --preset P       tiny (D 64, L 2, H 4, G 2, F 176, ctx 4096; default),\n"
    "                   small (256, 4, 8, 4, 704, 16384), base (1024, 12, 16, 8, 2816, 8192)\n"
    "  --arch A         architecture (llama)\n"
    "  --layers N       block count L\n"
    "  --dim D          embedding length D (head dim = D / heads)\n"
    "  --heads H        query heads\n"
    "  --kv-heads G     key/value heads (H must be a multiple of G)\n"
    "  --ff F           feed-forward length\n"
    "  --ctx N          context length recorded in the metadata\n"
    "  --rot R          rope dimensions (even, <= head dim; default the head dim)\n"
    "  --vocab FILE     copy every tokenizer.* key from this GGUF; the vocabulary size\n"
    "                   follows it (default: a built-in 259-token SentencePiece byte vocabulary)\n"
    "  --type T         matrix type: f32 (default), f16, bf16, q8_0 (norms stay f32)\n"
    "  --name NAME      general.name (default kvreplay-synth-PRESET)\n"
    "  --seed S         unsigned 64-bit seed (required)\n"
    "  -o, --output F   output file (required; written atomically)\n";

static uint64_t parse_u64(const char *flag, const char *s) {
    char *end = NULL;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || end == s || *end != '\0' || s[0] == '-' || s[0] == '+')
        hx_die(HX_EXIT_USAGE, "%s: expected an unsigned 64-bit integer, got '%s'", flag, s);
    return (uint64_t)v;
}

static uint32_t parse_type(const char *s) {
    if (!strcmp(s, "f32")) return ENG_GGML_TYPE_F32;
    if (!strcmp(s, "f16")) return ENG_GGML_TYPE_F16;
    if (!strcmp(s, "bf16")) return ENG_GGML_TYPE_BF16;
    if (!strcmp(s, "q8_0")) return ENG_GGML_TYPE_Q8_0;
    hx_die(HX_EXIT_USAGE, "--type: expected f32, f16, bf16 or q8_0, got '%s'", s);
}

int hx_cmd_model_synth(int argc, char **argv) {
    if (hx_wants_help(argc, argv)) {
        fputs(usage, stdout);
        return HX_EXIT_OK;
    }
    /* first pass: the preset, so that the other flags override it in any order */
    const char *preset = "tiny";
    for (int i = 1; i < argc; i++) {
        const char *v = hx_opt(argc, argv, &i, "--preset");
        if (v) preset = v;
    }
    eng_synth_params p = eng_synth_preset(preset);
    if (!p.ok) hx_die(HX_EXIT_USAGE, "--preset: expected tiny, small or base, got '%s'", preset);

    const char *out = NULL, *v;
    bool have_seed = false;
    for (int i = 1; i < argc; i++) {
        if ((v = hx_opt(argc, argv, &i, "--preset"))) continue;
        else if ((v = hx_opt(argc, argv, &i, "--arch"))) {
            if (strlen(v) >= sizeof p.arch) hx_die(HX_EXIT_USAGE, "--arch: '%s' is too long", v);
            snprintf(p.arch, sizeof p.arch, "%s", v);
        }
        else if ((v = hx_opt(argc, argv, &i, "--layers"))) p.n_layer = (int32_t)hx_parse_int("--layers", v, 1, 1024);
        else if ((v = hx_opt(argc, argv, &i, "--dim"))) p.n_embd = (int32_t)hx_parse_int("--dim", v, 2, 65536);
        else if ((v = hx_opt(argc, argv, &i, "--heads"))) p.n_head = (int32_t)hx_parse_int("--heads", v, 1, 4096);
        else if ((v = hx_opt(argc, argv, &i, "--kv-heads"))) p.n_head_kv = (int32_t)hx_parse_int("--kv-heads", v, 1, 4096);
        else if ((v = hx_opt(argc, argv, &i, "--ff"))) p.n_ff = (int32_t)hx_parse_int("--ff", v, 1, 1 << 20);
        else if ((v = hx_opt(argc, argv, &i, "--ctx"))) p.n_ctx = (int32_t)hx_parse_int("--ctx", v, 1, INT32_MAX);
        else if ((v = hx_opt(argc, argv, &i, "--rot"))) p.n_rot = (int32_t)hx_parse_int("--rot", v, 2, 65536);
        else if ((v = hx_opt(argc, argv, &i, "--vocab"))) p.vocab_path = v;
        else if ((v = hx_opt(argc, argv, &i, "--type"))) p.type = parse_type(v);
        else if ((v = hx_opt(argc, argv, &i, "--name"))) p.name = v;
        else if ((v = hx_opt(argc, argv, &i, "--seed"))) { p.seed = parse_u64("--seed", v); have_seed = true; }
        else if ((v = hx_opt(argc, argv, &i, "-o")) || (v = hx_opt(argc, argv, &i, "--output"))) out = v;
        else hx_bad_arg("model synth", argv[i]);
    }
    if (!have_seed) hx_die(HX_EXIT_USAGE, "model synth: --seed is required (see kvreplay model synth --help)");
    if (!out) hx_die(HX_EXIT_USAGE, "model synth: -o FILE is required (see kvreplay model synth --help)");
    if (p.vocab_path && access(p.vocab_path, R_OK) != 0)
        hx_die(HX_EXIT_USAGE, "%s: --vocab: cannot read: %s", p.vocab_path, strerror(errno));

    char err[512] = "";
    int rc = eng_synth_write(&p, out, err, sizeof err);
    if (rc != ENG_OK)
        hx_die(rc == ENG_ERR_IO || rc == ENG_ERR_NOMEM ? HX_EXIT_INTERNAL : HX_EXIT_USAGE, "%s", err);

    /* summary from the file as written */
    eng_gguf *g;
    rc = eng_gguf_open(out, &g, err, sizeof err);
    if (rc != ENG_OK) hx_die(HX_EXIT_INTERNAL, "%s", err);
    int64_t n_params = 0, n_vocab = 0, n_rot = 0;
    for (int64_t i = 0; i < eng_gguf_n_tensors(g); i++) {
        const eng_gguf_tensor *t = eng_gguf_tensor_at(g, i);
        n_params += t->ne[0] * t->ne[1] * t->ne[2] * t->ne[3];
    }
    eng_gguf_get_int(g, "llama.vocab_size", &n_vocab);
    eng_gguf_get_int(g, "llama.rope.dimension_count", &n_rot);
    const char *label = "";
    size_t label_len = 0;
    eng_gguf_get_str(g, "kvreplay.synth.preset", &label, &label_len);
    size_t bytes;
    eng_gguf_bytes(g, &bytes);
    fprintf(stderr,
            "model synth: wrote %s: arch %s, preset %.*s, seed %llu, V %lld, D %d, L %d, H %d, G %d, "
            "F %d, ctx %d, rot %lld, type %s, vocab %s, %lld tensors, %lld params, %zu bytes\n",
            out, p.arch, (int)label_len, label, (unsigned long long)p.seed, (long long)n_vocab,
            p.n_embd, p.n_layer, p.n_head, p.n_head_kv, p.n_ff, p.n_ctx, (long long)n_rot,
            eng_ggml_type_name(p.type), p.vocab_path ? p.vocab_path : "built-in",
            (long long)eng_gguf_n_tensors(g), (long long)n_params, bytes);
    eng_gguf_close(g);
    return HX_EXIT_OK;
}
