/*
 * harness/cli/cmd_model_synth.c: `kvreplay model synth`: writes a seeded
 * synthetic GGUF model (engine/synth.h) atomically and prints one summary
 * line on stderr. The architecture and preset give the defaults; explicit
 * flags override them, in any order. --seed and -o are required (exit 2
 * without them); a flag that does not apply to the architecture is an
 * error (exit 2).
 */
#include "cli.h"
#include "gguf.h"
#include "jsonl.h"
#include "status.h"
#include "synth.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char usage[] =
    "usage: kvreplay model synth [--arch llama|swa|kvreplay-swa|recurrent|hybrid|rwkv7]\n"
    "           [--preset tiny|small|base|narrow] [--layers N] [--dim D] [--heads H] [--kv-heads G]\n"
    "           [--ff F] [--ctx N] [--rot R] [--window W] [--attn-every K]\n"
    "           [--ssm-state N] [--ssm-head-dim P] [--ssm-groups G] [--ssm-conv K]\n"
    "           [--wkv-head-size S] [--lora R]\n"
    "           [--vocab VOCAB.gguf] [--type f32|f16|bf16|q8_0] [--name NAME]\n"
    "           --seed S -o model.gguf\n"
    "\n"
    "Writes a GGUF model with random weights drawn from the seed (the same options\n"
    "give a byte-identical file). Every architecture but kvreplay-swa is llama.cpp's\n"
    "own, key for key and tensor for tensor (docs/gguf.md).\n"
    "\n"
    "  --arch A         llama (default): full attention (GGUF arch llama);\n"
    "                   swa: sliding-window attention with a full-attention layer every\n"
    "                     K-th layer (GGUF arch cohere2: layer norm, attention and FFN in\n"
    "                     parallel, RoPE on the sliding layers only, tied head);\n"
    "                   kvreplay-swa: llama layers with the same window pattern (GGUF arch\n"
    "                     kvreplay-swa, kvreplay's own: the swa of earlier versions);\n"
    "                   recurrent: Mamba-2 layers only, no FFN (GGUF arch mamba2);\n"
    "                   hybrid: Mamba-2 layers with a full-attention layer every K-th,\n"
    "                     SwiGLU FFN in every layer (GGUF arch granitehybrid);\n"
    "                   rwkv7: RWKV-7 layers (GGUF arch rwkv7)\n"
    "  --preset P       tiny (default), small, base, narrow; per arch (D, L, H, G, F, ctx):\n"
    "                   llama      tiny 64,2,4,2,176,4096  small 256,4,8,4,704,16384\n"
    "                              base 1024,12,16,8,2816,8192\n"
    "                   swa        llama's shapes; window 40 / 512 / 1024,\n"
    "                              attention every 2 / 4 / 6 layers (kvreplay-swa: the same)\n"
    "                   recurrent  tiny D 64 L 2, small 256 8, base 1024 24; SSM state\n"
    "                              16 / 64 / 64, head dim 32 / 64 / 64, 1 group, conv 4\n"
    "                   hybrid     tiny 64,4,4,2,176  small 256,8,8,4,704  base 1024,12,16,8,2816;\n"
    "                              attention every 2 / 4 / 4; SSM as recurrent\n"
    "                   rwkv7      tiny D 128 L 2 F 512, small 256 4 1024, base 1024 12 4096;\n"
    "                              head size 64; LoRA ranks 32 / 32,32,32,64 / 64,64,32,160\n"
    "                   narrow     every arch: D 64, L 2, ctx 262144; attention 2 heads of 32,\n"
    "                              1 KV head, F 176 (hybrid: one Mamba-2 layer, then one\n"
    "                              attention layer; SSM and swa as tiny; rwkv7 F 256, LoRA 16):\n"
    "                              long contexts at the reports' token counts (docs/experiments.md)\n"
    "  --layers N       block count L\n"
    "  --dim D          embedding length D (attention head dim = D / heads; SSM inner size 2D)\n"
    "  --heads H        query heads (llama, swa, hybrid)\n"
    "  --kv-heads G     key/value heads (H must be a multiple of G)\n"
    "  --ff F           feed-forward length (llama, swa, hybrid; rwkv7's channel mix)\n"
    "  --ctx N          context length recorded in the metadata\n"
    "  --rot R          rope dimensions (even, <= head dim; default the head dim)\n"
    "  --window W       sliding window (swa): a query at p sees keys p-W+1 .. p\n"
    "  --attn-every K   layer il is full attention iff il % K == K-1 (swa, hybrid; 0: none)\n"
    "  --ssm-state N    SSM state size (recurrent, hybrid)\n"
    "  --ssm-head-dim P SSM head dim; heads = 2D / P\n"
    "  --ssm-groups G   B/C groups (divides the SSM heads)\n"
    "  --ssm-conv K     causal conv kernel length\n"
    "  --wkv-head-size S  rwkv7 head size (divides D; llama.cpp's CPU kernel needs 64)\n"
    "  --lora R         rwkv7: every LoRA rank (decay, learning rate, value mix, gate)\n"
    "  --vocab FILE     copy every tokenizer.* key from this GGUF; the vocabulary size\n"
    "                   follows it (default: a built-in 259-token SentencePiece byte vocabulary)\n"
    "  --type T         matrix type: f32 (default), f16, bf16, q8_0 (norms, SSM vectors and\n"
    "                   the conv stay f32)\n"
    "  --name NAME      general.name (default kvreplay-synth-PRESET, kvreplay-synth-ARCH-PRESET)\n"
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

/* Dies unless flag applies to arch. */
static void need(const char *flag, const char *arch, bool ok) {
    if (!ok) hx_die(HX_EXIT_USAGE, "%s: does not apply to --arch %s (see kvreplay model synth --help)", flag, arch);
}

int hx_cmd_model_synth(int argc, char **argv) {
    if (hx_wants_help(argc, argv)) {
        fputs(usage, stdout);
        return HX_EXIT_OK;
    }
    /* first pass: arch and preset, so that the other flags override them in any order */
    const char *preset = "tiny", *arch = "llama";
    for (int i = 1; i < argc; i++) {
        const char *v;
        if ((v = hx_opt(argc, argv, &i, "--preset"))) preset = v;
        else if ((v = hx_opt(argc, argv, &i, "--arch"))) arch = v;
    }
    if (!eng_synth_gguf_arch(arch)) {
        char known[160] = "";
        for (int32_t k = 0, n = 0; eng_synth_arch_name(k); k++)
            n += snprintf(known + n, sizeof known - (size_t)n, "%s%s", k ? ", " : "", eng_synth_arch_name(k));
        hx_die(HX_EXIT_USAGE, "--arch: expected one of %s, got '%s'", known, arch);
    }
    eng_synth_params p = eng_synth_preset_arch(arch, preset);
    if (!p.ok) hx_die(HX_EXIT_USAGE, "--preset: expected tiny, small, base or narrow, got '%s'", preset);
    const unsigned groups = eng_synth_arch_groups(arch);
    const bool attn = groups & ENG_SYNTH_HEADS, ssm = groups & ENG_SYNTH_SSM, wkv = groups & ENG_SYNTH_WKV;

    const char *out = NULL, *v;
    bool have_seed = false;
    for (int i = 1; i < argc; i++) {
        if ((v = hx_opt(argc, argv, &i, "--preset")) || (v = hx_opt(argc, argv, &i, "--arch"))) continue;
        else if ((v = hx_opt(argc, argv, &i, "--layers"))) p.n_layer = (int32_t)hx_parse_int("--layers", v, 1, 1024);
        else if ((v = hx_opt(argc, argv, &i, "--dim"))) p.n_embd = (int32_t)hx_parse_int("--dim", v, 2, 65536);
        else if ((v = hx_opt(argc, argv, &i, "--heads"))) {
            need("--heads", arch, attn);
            p.n_head = (int32_t)hx_parse_int("--heads", v, 1, 4096);
        } else if ((v = hx_opt(argc, argv, &i, "--kv-heads"))) {
            need("--kv-heads", arch, attn);
            p.n_head_kv = (int32_t)hx_parse_int("--kv-heads", v, 1, 4096);
        } else if ((v = hx_opt(argc, argv, &i, "--ff"))) {
            need("--ff", arch, groups & ENG_SYNTH_FF);
            p.n_ff = (int32_t)hx_parse_int("--ff", v, 1, 1 << 20);
        } else if ((v = hx_opt(argc, argv, &i, "--ctx"))) p.n_ctx = (int32_t)hx_parse_int("--ctx", v, 1, INT32_MAX);
        else if ((v = hx_opt(argc, argv, &i, "--rot"))) {
            need("--rot", arch, attn);
            p.n_rot = (int32_t)hx_parse_int("--rot", v, 2, 65536);
        } else if ((v = hx_opt(argc, argv, &i, "--window"))) {
            need("--window", arch, groups & ENG_SYNTH_SWA);
            p.n_swa = (int32_t)hx_parse_int("--window", v, 1, INT32_MAX);
        } else if ((v = hx_opt(argc, argv, &i, "--attn-every"))) {
            need("--attn-every", arch, groups & ENG_SYNTH_EVERY);
            p.attn_every = (int32_t)hx_parse_int("--attn-every", v, 0, 1 << 20);
        } else if ((v = hx_opt(argc, argv, &i, "--ssm-state"))) {
            need("--ssm-state", arch, ssm);
            p.ssm_d_state = (int32_t)hx_parse_int("--ssm-state", v, 1, 4096);
        } else if ((v = hx_opt(argc, argv, &i, "--ssm-head-dim"))) {
            need("--ssm-head-dim", arch, ssm);
            p.ssm_head_dim = (int32_t)hx_parse_int("--ssm-head-dim", v, 1, 4096);
        } else if ((v = hx_opt(argc, argv, &i, "--ssm-groups"))) {
            need("--ssm-groups", arch, ssm);
            p.ssm_n_group = (int32_t)hx_parse_int("--ssm-groups", v, 1, 4096);
        } else if ((v = hx_opt(argc, argv, &i, "--ssm-conv"))) {
            need("--ssm-conv", arch, ssm);
            p.ssm_d_conv = (int32_t)hx_parse_int("--ssm-conv", v, 1, 64);
        } else if ((v = hx_opt(argc, argv, &i, "--wkv-head-size"))) {
            need("--wkv-head-size", arch, wkv);
            p.wkv_head_size = (int32_t)hx_parse_int("--wkv-head-size", v, 1, 4096);
        } else if ((v = hx_opt(argc, argv, &i, "--lora"))) {
            need("--lora", arch, wkv);
            p.lora_decay = p.lora_iclr = p.lora_mix = p.lora_gate = (int32_t)hx_parse_int("--lora", v, 1, 4096);
        } else if ((v = hx_opt(argc, argv, &i, "--vocab"))) p.vocab_path = v;
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
    char oerr[1024];
    if (hx_output_check(out, oerr, sizeof oerr) != ENG_OK) hx_die(HX_EXIT_USAGE, "model synth: -o %s", oerr);

    char err[512] = "";
    if (p.vocab_path) {  /* the vocabulary is an input: whatever is wrong with it is exit 2 */
        eng_gguf *vg = NULL;
        int vrc = eng_gguf_open(p.vocab_path, &vg, err, sizeof err);
        eng_gguf_close(vg);
        if (vrc != ENG_OK) hx_die(hx_exit_for_input(vrc), "%s", err);
    }
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
    const char *garch = eng_synth_gguf_arch(arch);
    char key[96];
    snprintf(key, sizeof key, "%s.vocab_size", garch);
    eng_gguf_get_int(g, key, &n_vocab);
    snprintf(key, sizeof key, "%s.rope.dimension_count", garch);
    eng_gguf_get_int(g, key, &n_rot);
    const char *label = "";
    size_t label_len = 0;
    eng_gguf_get_str(g, "kvreplay.synth.preset", &label, &label_len);
    size_t bytes;
    eng_gguf_bytes(g, &bytes);
    char shape[160] = "", extra[200] = "";
    if (attn)
        snprintf(shape, sizeof shape, ", H %d, G %d, F %d, rot %lld", p.n_head, p.n_head_kv, p.n_ff, (long long)n_rot);
    else if (wkv)
        snprintf(shape, sizeof shape, ", heads %d x %d, F %d, LoRA %d/%d/%d/%d", p.n_embd / p.wkv_head_size,
                 p.wkv_head_size, p.n_ff, p.lora_decay, p.lora_iclr, p.lora_mix, p.lora_gate);
    int k = 0;
    if (groups & ENG_SYNTH_SWA) k = snprintf(extra, sizeof extra, ", window %d", p.n_swa);
    if (groups & ENG_SYNTH_EVERY)
        k += snprintf(extra + k, sizeof extra - (size_t)k, ", attention every %d", p.attn_every);
    if (ssm)
        snprintf(extra + k, sizeof extra - (size_t)k, ", SSM inner %d, state %d, heads %d x %d, groups %d, conv %d",
                 2 * p.n_embd, p.ssm_d_state, p.ssm_head_dim > 0 ? 2 * p.n_embd / p.ssm_head_dim : 0,
                 p.ssm_head_dim, p.ssm_n_group, p.ssm_d_conv);
    fprintf(stderr,
            "model synth: wrote %s: arch %s (%s), preset %.*s, seed %llu, V %lld, D %d, L %d%s, ctx %d%s, "
            "type %s, vocab %s, %lld tensors, %lld params, %zu bytes\n",
            out, arch, garch, (int)label_len, label, (unsigned long long)p.seed, (long long)n_vocab, p.n_embd,
            p.n_layer, shape, p.n_ctx, extra, eng_ggml_type_name(p.type), p.vocab_path ? p.vocab_path : "built-in",
            (long long)eng_gguf_n_tensors(g), (long long)n_params, bytes);
    eng_gguf_close(g);
    return HX_EXIT_OK;
}
