/*
 * harness/cli/cmd_model_info.c: `kvreplay model info`: what a GGUF model is
 * (architecture, shape, parameters, layer kinds, sliding window, Mamba-2
 * and RWKV-7 dims, memory sizes: full-attention KV bytes per token, window bytes,
 * recurrent state bytes per sequence and the checkpoint size, vocabulary,
 * SHA-256, fingerprint under the chosen numerics) and how close its decisions are:
 * the median gap between the top two logits of the last prompt token over
 * seeded random prompts (a small gap means greedy decoding is fragile, so
 * bit-level differences flip tokens more often).
 *
 * Prompts: n_prompts prompts of prompt_len token ids drawn uniformly from
 * [0, V) by GSL's MT19937 seeded with --seed + prompt index; each is prefilled cold in chunks
 * of 64 (BOS first when the vocabulary adds one).
 */
#include "cli.h"
#include "stats.h"

#include <inttypes.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_util.h"
#include "model.h"
#include "status.h"

static void usage(FILE *f) {
    fprintf(f,
            "usage: kvreplay model info [OPTIONS] MODEL.gguf\n"
            "\n"
            "Describes a model: shape, parameters, layer kinds (memory: attn, attn_swa, recurrent;\n"
            "kind: attn, swa, mamba2, rwkv7), the sliding window, Mamba-2 and RWKV-7 dims, memory\n"
            "sizes (KV bytes per token, window and recurrent\n"
            "state bytes per sequence, checkpoint bytes), vocabulary, sha256, fingerprint, and the\n"
            "median top-1/top-2 logit gap over seeded random prompts.\n"
            "\n"
            "  --json                one JSON object on stdout\n"
            "  --kernel blas|ref     numerics for the fingerprint and the gap (default blas)\n"
            "  --precision fp32|bf16 (default fp32)\n"
            "  --threads T           threads (default 1)\n"
            "  --seed S              prompt sampling seed (default 0)\n"
            "  --prompts N           number of prompts (default 16, 0 skips the gap)\n"
            "  --prompt-len N        tokens per prompt (default 32)\n"
            "  -h, --help            this help\n");
}


/* A float hyperparameter as JSON, at float precision (1e-05, not 9.99999975e-06). */
static json_t *json_float(float f) {
    char buf[32];
    snprintf(buf, sizeof buf, "%.7g", (double)f);
    return json_real(strtod(buf, NULL));
}

static const char *kind_name(eng_layer_kind k) {
    switch (k) {
    case ENG_LAYER_ATTN: return "attn";
    case ENG_LAYER_ATTN_SWA: return "attn_swa";
    case ENG_LAYER_RECURRENT: return "recurrent";
    }
    return "?";
}

/* Median top-1 minus top-2 logit over the sampled prompts; NAN when n == 0. */
static double median_top2_gap(const eng_model *m, uint64_t seed, int32_t n_prompts, int32_t len) {
    if (n_prompts <= 0) return NAN;
    const eng_model_info *in = eng_model_get_info(m);
    const eng_tokenizer *tok = eng_model_tokenizer(m);
    const int32_t bos = tok && eng_tokenizer_add_bos(tok) ? eng_tokenizer_bos(tok) : -1;
    eng_seq *s = eng_seq_new(m, len + 1);
    float *logits = malloc(sizeof(float) * (size_t)in->n_vocab);
    int32_t *ids = malloc(sizeof(int32_t) * (size_t)(len + 1));
    double *gaps = malloc(sizeof(double) * (size_t)n_prompts);
    if (!s || !logits || !ids || !gaps) hx_die(HX_EXIT_INTERNAL, "model info: out of memory");
    eng_prefill_params pp = eng_prefill_params_default();
    for (int32_t p = 0; p < n_prompts; p++) {
        int32_t n = 0;
        if (bos >= 0) ids[n++] = bos;
        hx_random_tokens((uint64_t)seed + (uint64_t)p, ids + n, len, in->n_vocab);
        n += len;
        eng_seq_reset(s);
        int rc = eng_prefill(s, ids, n, &pp, logits);
        if (rc != ENG_OK) hx_die(HX_EXIT_INTERNAL, "model info: prefill failed: %s", eng_status_str(rc));
        float t1 = -INFINITY, t2 = -INFINITY;
        for (int32_t v = 0; v < in->n_vocab; v++) {
            if (logits[v] > t1) { t2 = t1; t1 = logits[v]; }
            else if (logits[v] > t2) t2 = logits[v];
        }
        gaps[p] = in->n_vocab > 1 ? (double)t1 - (double)t2 : 0.0;
    }
    double med = hx_median(gaps, n_prompts);
    free(gaps);
    free(ids);
    free(logits);
    eng_seq_free(s);
    return med;
}

int hx_cmd_model_info(int argc, char **argv) {
    if (hx_wants_help(argc, argv)) { usage(stdout); return HX_EXIT_OK; }
    const char *path = NULL, *v;
    bool json = false;
    int64_t seed = 0, n_prompts = 16, len = 32;
    eng_numerics num = eng_numerics_default();
    for (int i = 1; i < argc; i++) {
        if (hx_flag(argv, i, "--json")) json = true;
        else if ((v = hx_opt(argc, argv, &i, "--kernel"))) {
            if (eng_kernel_parse(v, &num.kernel)) hx_die(HX_EXIT_USAGE, "--kernel: expected blas or ref, got '%s'", v);
        } else if ((v = hx_opt(argc, argv, &i, "--precision"))) {
            if (eng_precision_parse(v, &num.precision))
                hx_die(HX_EXIT_USAGE, "--precision: expected fp32 or bf16, got '%s'", v);
        } else if ((v = hx_opt(argc, argv, &i, "--threads"))) num.n_threads = (int32_t)hx_parse_int("--threads", v, 1, HX_THREADS_MAX);
        else if ((v = hx_opt(argc, argv, &i, "--seed"))) seed = hx_parse_int("--seed", v, 0, INT64_MAX);
        else if ((v = hx_opt(argc, argv, &i, "--prompts"))) n_prompts = hx_parse_int("--prompts", v, 0, 100000);
        else if ((v = hx_opt(argc, argv, &i, "--prompt-len"))) len = hx_parse_int("--prompt-len", v, 1, 1 << 20);
        else if (argv[i][0] != '-' && !path) path = argv[i];
        else hx_bad_arg("model info", argv[i]);
    }
    if (!path) hx_die(HX_EXIT_USAGE, "model info: MODEL.gguf is required (see --help)");

    char err[512] = "";
    eng_model *m = NULL;
    int rc = eng_model_load(path, &num, &m, err, sizeof err);
    if (rc != ENG_OK) hx_die(hx_exit_for_input(rc), "%s", err[0] ? err : eng_status_str(rc));
    const eng_model_info *in = eng_model_get_info(m);
    const eng_tokenizer *tok = eng_model_tokenizer(m);
    const double gap = median_top2_gap(m, (uint64_t)seed, (int32_t)n_prompts, (int32_t)len);
    char fp[17];
    snprintf(fp, sizeof fp, "%016" PRIx64, eng_model_fingerprint(m));
    /* a checkpoint at n >= n_swa: the full window and every recurrent state */
    const int64_t ckpt_bytes = in->swa_bytes_per_token * in->n_swa + in->rec_state_bytes;

    if (json) {
        json_t *o = json_object();
        json_t *kinds = json_array(), *types = json_array();
        for (int32_t il = 0; il < in->n_layer; il++) {
            json_array_append_new(kinds, json_string(kind_name(eng_model_layer_kind(m, il))));
            json_array_append_new(types, json_string(eng_model_layer_kind_name(m, il)));
        }
        json_object_set_new(o, "path", json_string(path));
        json_object_set_new(o, "arch", json_string(in->arch));
        json_object_set_new(o, "name", json_string(in->name));
        json_object_set_new(o, "n_vocab", json_integer(in->n_vocab));
        json_object_set_new(o, "n_embd", json_integer(in->n_embd));
        json_object_set_new(o, "n_layer", json_integer(in->n_layer));
        json_object_set_new(o, "n_head", json_integer(in->n_head));
        json_object_set_new(o, "n_head_kv", json_integer(in->n_head_kv));
        json_object_set_new(o, "head_dim", json_integer(in->head_dim));
        json_object_set_new(o, "n_ff", json_integer(in->n_ff));
        json_object_set_new(o, "n_ctx_train", json_integer(in->n_ctx_train));
        json_object_set_new(o, "n_rot", json_integer(in->n_rot));
        json_object_set_new(o, "rope_freq_base", json_float(in->rope_freq_base));
        json_object_set_new(o, "rms_eps", json_float(in->rms_eps));
        json_object_set_new(o, "norm_eps", json_float(in->norm_eps));
        json_object_set_new(o, "n_swa", json_integer(in->n_swa));
        json_object_set_new(o, "layer_kinds", kinds);
        json_object_set_new(o, "layer_types", types);
        json_object_set_new(o, "n_layer_attn", json_integer(in->n_layer_attn));
        json_object_set_new(o, "n_layer_swa", json_integer(in->n_layer_swa));
        json_object_set_new(o, "n_layer_rec", json_integer(in->n_layer_rec));
        if (in->ssm_d_inner > 0) {
            json_t *ssm = json_object();
            json_object_set_new(ssm, "d_inner", json_integer(in->ssm_d_inner));
            json_object_set_new(ssm, "d_state", json_integer(in->ssm_d_state));
            json_object_set_new(ssm, "n_head", json_integer(in->ssm_n_head));
            json_object_set_new(ssm, "head_dim", json_integer(in->ssm_head_dim));
            json_object_set_new(ssm, "n_group", json_integer(in->ssm_n_group));
            json_object_set_new(ssm, "d_conv", json_integer(in->ssm_d_conv));
            json_object_set_new(o, "ssm", ssm);
        } else {
            json_object_set_new(o, "ssm", json_null());
        }
        if (in->wkv_head_size > 0) {
            json_t *r = json_object();
            json_object_set_new(r, "head_size", json_integer(in->wkv_head_size));
            json_object_set_new(r, "n_head", json_integer(in->n_embd / in->wkv_head_size));
            json_object_set_new(o, "rwkv7", r);
        } else {
            json_object_set_new(o, "rwkv7", json_null());
        }
        json_object_set_new(o, "kv_bytes_per_token", json_integer(in->kv_bytes_per_token));
        json_object_set_new(o, "swa_bytes_per_token", json_integer(in->swa_bytes_per_token));
        json_object_set_new(o, "swa_window_bytes", json_integer(in->swa_bytes_per_token * in->n_swa));
        json_object_set_new(o, "rec_state_bytes", json_integer(in->rec_state_bytes));
        json_object_set_new(o, "checkpoint_bytes", json_integer(ckpt_bytes));
        json_object_set_new(o, "n_params", json_integer(in->n_params));
        json_object_set_new(o, "sha256", json_string(in->sha256));
        json_object_set_new(o, "fingerprint", json_string(fp));
        json_object_set_new(o, "kernel", json_string(eng_kernel_name(num.kernel)));
        json_object_set_new(o, "precision", json_string(eng_precision_name(num.precision)));
        json_object_set_new(o, "threads", json_integer(num.n_threads));
        json_object_set_new(o, "chat_template", json_string(in->chat_template));
        if (tok) {
            json_t *t = json_object();
            json_object_set_new(t, "type", json_string(eng_tokenizer_type_name(tok)));
            json_object_set_new(t, "n_vocab", json_integer(eng_tokenizer_n_vocab(tok)));
            json_object_set_new(t, "bos", json_integer(eng_tokenizer_bos(tok)));
            json_object_set_new(t, "eos", json_integer(eng_tokenizer_eos(tok)));
            json_object_set_new(t, "add_bos", json_boolean(eng_tokenizer_add_bos(tok)));
            json_object_set_new(o, "tokenizer", t);
        } else {
            json_object_set_new(o, "tokenizer", json_null());
        }
        json_t *g = json_object();
        json_object_set_new(g, "median", n_prompts > 0 ? json_real(gap) : json_null());
        json_object_set_new(g, "prompts", json_integer(n_prompts));
        json_object_set_new(g, "prompt_len", json_integer(len));
        json_object_set_new(g, "seed", json_integer(seed));
        json_object_set_new(o, "top2_gap", g);
        char *txt = json_dumps(o, JSON_INDENT(2) | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(9));
        if (!txt) hx_die(HX_EXIT_INTERNAL, "model info: JSON encoding failed");
        puts(txt);
        free(txt);
        json_decref(o);
    } else {
        printf("model        %s\n", path);
        printf("arch         %s (%s)\n", in->arch, in->name);
        printf("shape        V %d, D %d, L %d, H %d, G %d, E %d, F %d, rope %d/%g, %s eps %g, ctx %d\n",
               in->n_vocab, in->n_embd, in->n_layer, in->n_head, in->n_head_kv, in->head_dim, in->n_ff,
               in->n_rot, in->rope_freq_base, in->norm_eps > 0 ? "layer-norm" : "rms",
               in->norm_eps > 0 ? in->norm_eps : in->rms_eps, in->n_ctx_train);
        printf("params       %lld\n", (long long)in->n_params);
        printf("layers       %d attn, %d attn_swa (window %d), %d recurrent:", in->n_layer_attn, in->n_layer_swa,
               in->n_swa, in->n_layer_rec);
        for (int32_t il = 0; il < in->n_layer; il++) printf(" %s", eng_model_layer_kind_name(m, il));
        printf("\n");
        if (in->wkv_head_size > 0)
            printf("rwkv7        heads %d x %d, channel mix %d\n", in->n_embd / in->wkv_head_size, in->wkv_head_size,
                   in->n_ff);
        if (in->ssm_d_inner > 0)
            printf("ssm          Mamba-2: inner %d, state %d, heads %d x %d, groups %d, conv %d\n", in->ssm_d_inner,
                   in->ssm_d_state, in->ssm_n_head, in->ssm_head_dim, in->ssm_n_group, in->ssm_d_conv);
        printf("memory       KV %lld bytes/token (full attention); window %lld bytes/token x %d (sliding: %lld "
               "bytes/sequence); recurrent state %lld bytes/sequence; checkpoint %lld bytes\n",
               (long long)in->kv_bytes_per_token, (long long)in->swa_bytes_per_token, in->n_swa,
               (long long)(in->swa_bytes_per_token * in->n_swa), (long long)in->rec_state_bytes,
               (long long)ckpt_bytes);
        if (tok)
            printf("vocabulary   %s, %d tokens, bos %d, eos %d%s\n",
                   eng_tokenizer_type_name(tok), eng_tokenizer_n_vocab(tok),
                   eng_tokenizer_bos(tok), eng_tokenizer_eos(tok), eng_tokenizer_add_bos(tok) ? ", adds BOS" : "");
        else
            printf("vocabulary   none\n");
        printf("chat         %s\n", in->chat_template[0] ? in->chat_template : "(unknown)");
        printf("sha256       %s\n", in->sha256);
        printf("fingerprint  %s (%s, %s)\n", fp, eng_kernel_name(num.kernel), eng_precision_name(num.precision));
        if (n_prompts > 0)
            printf("top-2 gap    median %.6g over %lld prompts of %lld tokens (seed %lld, %d threads)\n", gap,
                   (long long)n_prompts, (long long)len, (long long)seed, num.n_threads);
    }
    eng_model_free(m);
    return fflush(stdout) == 0 ? HX_EXIT_OK : HX_EXIT_INTERNAL;
}
