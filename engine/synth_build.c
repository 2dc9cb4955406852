/*
 * engine/synth_build.c: seeded synthetic GGUF models (synth.h): presets,
 * the architectures the layer kinds register, and the build of a file.
 *
 * The file is built in one pass through eng_gguf_writer: general.* keys, the
 * architecture's keys, kvreplay.synth.* provenance keys, the tokenizer, then
 * tensors (token_embd, each layer's, output_norm, output). Tensor data lives
 * in buffers owned by the build context until the writer has serialised.
 *
 * Determinism: each tensor draws from its own seeded generator
 * (synth_tensors.c). Same params -> byte-identical file.
 *
 * Init laws (so that logits are neither flat nor saturated):
 *   token_embd      N(0, 1)                 rows of the residual stream
 *   matrices        N(0, 1/sqrt(fan_in))    keeps activations O(1)
 *   norms           1 + N(0, 0.02)          F32 always
 *   output          N(0, K/sqrt(D)), K = 2  after the final RMS norm the
 *                   logits are iid N(0, ~K^2) given the hidden state, so the
 *                   median top-2 gap is about 0.3-0.45 (V = 32000..259).
 *   Mamba-2 mixer (Mamba-2's own init where it has one):
 *   ssm_conv1d      N(0, 1/sqrt(K)), F32 always; its bias N(0, 0.1)
 *   ssm_dt.bias     softplus^-1(dt), dt log-uniform in [1e-3, 1e-1]
 *   ssm_a           A = -exp(A_log) = -U[1, 16] (stored negated, as llama.cpp's
 *                   converter stores it), F32 [1, NH]
 *   ssm_d           1 + N(0, 0.02), F32 [1, NH]; ssm_norm 1 + N(0, 0.02), F32 [I/NG, NG]
 *   uniform draws come from the tensor's own generator (gsl_rng_uniform_pos).
 *
 * Architectures are registered by the layer kinds (engine/layers/): each
 * eng_arch may carry an eng_synth_arch (synth_int.h) with the synth name,
 * the parameter groups it uses, a check of the params, its metadata, the
 * tensors of one layer and its presets; this file is the driver, and
 * synth_tensors.c the tensor helpers they share.
 */
#include "synth.h"
#include "gguf.h"
#include "internal.h"
#include "status.h"
#include "synth_int.h"
#include "util.h"

#include <gsl/gsl_randist.h>
#include <gsl/gsl_rng.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#define SYNTH_VERSION      1       /* kvreplay.synth.version: bump when init laws change */
#define SYNTH_BUILTIN_VOCAB 259

const char *const eng_synth_preset_names[] = {"tiny", "small", "base", "narrow", NULL};

// ----------------------------------------------------------------------------
// Architectures and presets (registered by the layer kinds)

const eng_synth_arch *eng_synth_arch_find(const char *name, const char **gguf_arch) {
    for (int32_t i = 0; name && eng_layer_kinds[i]; i++)
        for (const eng_arch *const *a = eng_layer_kinds[i]->archs; a && *a; a++)
            if ((*a)->synth && !strcmp((*a)->synth->name, name)) {
                if (gguf_arch) *gguf_arch = (*a)->name;
                return (*a)->synth;
            }
    return NULL;
}

const char *eng_synth_arch_name(int32_t i) {
    int32_t n = 0;
    for (int32_t k = 0; eng_layer_kinds[k]; k++)
        for (const eng_arch *const *a = eng_layer_kinds[k]->archs; a && *a; a++)
            if ((*a)->synth && n++ == i) return (*a)->synth->name;
    return NULL;
}

unsigned eng_synth_arch_groups(const char *arch) {
    const eng_synth_arch *a = eng_synth_arch_find(arch, NULL);
    return a ? a->groups : 0;
}

const char *eng_synth_gguf_arch(const char *arch) {
    const char *g = NULL;
    return eng_synth_arch_find(arch, &g) ? g : NULL;
}

eng_synth_params eng_synth_preset_arch(const char *arch, const char *name) {
    eng_synth_params p = {0};
    p.rope_freq_base = 10000.0f;
    p.rms_eps = 1e-5f;
    p.type = ENG_GGML_TYPE_F32;
    const eng_synth_arch *sa = eng_synth_arch_find(arch, NULL);
    int pi = -1;
    for (int i = 0; sa && name && eng_synth_preset_names[i]; i++)
        if (!strcmp(eng_synth_preset_names[i], name)) pi = i;
    p.ok = sa && pi >= 0;
    if (!p.ok) {  /* llama tiny unless found */
        sa = eng_synth_arch_find("llama", NULL);
        pi = 0;
    }
    const eng_synth_shape *r = &sa->presets[pi];
    snprintf(p.arch, sizeof p.arch, "%s", sa->name);
    p.n_embd = r->D; p.n_layer = r->L; p.n_head = r->H; p.n_head_kv = r->G; p.n_ff = r->F; p.n_ctx = r->ctx;
    p.n_swa = r->W; p.attn_every = r->every;
    p.ssm_d_state = r->N; p.ssm_head_dim = r->P; p.ssm_n_group = r->NG; p.ssm_d_conv = r->K;
    p.wkv_head_size = r->S; p.lora_decay = r->rw; p.lora_iclr = r->ra; p.lora_mix = r->rv; p.lora_gate = r->rg;
    snprintf(p.preset, sizeof p.preset, "%s", p.ok ? name : "custom");
    return p;
}

eng_synth_params eng_synth_preset(const char *name) { return eng_synth_preset_arch("llama", name); }

// ----------------------------------------------------------------------------
// Vocabulary

/* The built-in SentencePiece byte vocabulary: <unk>, <s>, </s>, <0x00>..<0xFF>. */
static int builtin_vocab(synth_ctx *c) {
    enum { N = SYNTH_BUILTIN_VOCAB };
    char bytes[256][8];
    const char *toks[N];
    float scores[N];
    int32_t types[N];
    toks[0] = "<unk>"; types[0] = 2;   /* UNKNOWN */
    toks[1] = "<s>";   types[1] = 3;   /* CONTROL */
    toks[2] = "</s>";  types[2] = 3;
    for (int b = 0; b < 256; b++) {
        snprintf(bytes[b], sizeof bytes[b], "<0x%02X>", b);
        toks[3 + b] = bytes[b];
        types[3 + b] = 6;              /* BYTE */
    }
    for (int i = 0; i < N; i++) scores[i] = 0.0f;
    eng_gguf_writer *w = c->w;
    int rc = eng_gguf_writer_set_str(w, "tokenizer.ggml.model", "llama");
    if (!rc) rc = eng_gguf_writer_set_arr_str(w, "tokenizer.ggml.tokens", N, toks, NULL);
    if (!rc) rc = eng_gguf_writer_set_arr(w, "tokenizer.ggml.scores", ENG_GGUF_TYPE_FLOAT32, N, scores);
    if (!rc) rc = eng_gguf_writer_set_arr(w, "tokenizer.ggml.token_type", ENG_GGUF_TYPE_INT32, N, types);
    if (!rc) rc = eng_gguf_writer_set_u32(w, "tokenizer.ggml.bos_token_id", 1);
    if (!rc) rc = eng_gguf_writer_set_u32(w, "tokenizer.ggml.eos_token_id", 2);
    if (!rc) rc = eng_gguf_writer_set_u32(w, "tokenizer.ggml.unknown_token_id", 0);
    if (!rc) rc = eng_gguf_writer_set_bool(w, "tokenizer.ggml.add_bos_token", true);
    if (!rc) rc = eng_gguf_writer_set_bool(w, "tokenizer.ggml.add_eos_token", false);
    return rc ? sy_nomem(c, "tokenizer") : ENG_OK;
}

/* Token count of the vocabulary: opened to count, or the built-in 259. */
static int vocab_size(synth_ctx *c, const char *path, int32_t *n) {
    if (!path) {
        *n = SYNTH_BUILTIN_VOCAB;
        return ENG_OK;
    }
    eng_gguf *g;
    int rc = eng_gguf_open(path, &g, c->err, c->errlen);
    if (rc) return rc;
    int64_t i = eng_gguf_find_key(g, "tokenizer.ggml.tokens");
    if (i < 0 || eng_gguf_kv_type(g, i) != ENG_GGUF_TYPE_ARRAY ||
        eng_gguf_arr_type(g, i) != ENG_GGUF_TYPE_STRING || eng_gguf_arr_n(g, i) < 1 ||
        eng_gguf_arr_n(g, i) > INT32_MAX) {
        eng_errf(c->err, c->errlen, "%s: tokenizer.ggml.tokens: %s", path,
                 i < 0 ? "absent (not a vocabulary file)" : "not a non-empty array of strings");
        rc = i < 0 ? ENG_ERR_NOT_FOUND : ENG_ERR_FORMAT;
    } else {
        *n = (int32_t)eng_gguf_arr_n(g, i);
    }
    eng_gguf_close(g);
    return rc;
}

static int copy_vocab(synth_ctx *c, const char *path) {
    eng_gguf *g;
    int rc = eng_gguf_open(path, &g, c->err, c->errlen);
    if (rc) return rc;
    rc = eng_gguf_writer_copy_kv(c->w, g, "tokenizer.");
    eng_gguf_close(g);
    return rc ? sy_nomem(c, "tokenizer") : ENG_OK;
}

// ----------------------------------------------------------------------------
// Driver

static uint32_t file_type(uint32_t t) {   /* llama.cpp's LLAMA_FTYPE_* */
    switch (t) {
    case ENG_GGML_TYPE_F16:  return 1;   /* MOSTLY_F16 */
    case ENG_GGML_TYPE_Q8_0: return 7;   /* MOSTLY_Q8_0 */
    case ENG_GGML_TYPE_BF16: return 32;  /* MOSTLY_BF16 */
    default:                 return 0;   /* ALL_F32 */
    }
}

/* Generic param checks and resolution of the derived fields. */
static int resolve(synth_ctx *c, const eng_synth_params *in, const eng_synth_arch **arch) {
    c->p = *in;
    eng_synth_params *p = &c->p;
    char msg[128];
    *arch = eng_synth_arch_find(p->arch, &c->gguf_arch);
    if (!*arch) {
        char known[128] = "";
        size_t k = 0;
        for (int32_t i = 0; eng_synth_arch_name(i); i++) {
            const int w = snprintf(known + k, sizeof known - k, "%s%s", i ? ", " : "", eng_synth_arch_name(i));
            if (w > 0 && (size_t)w < sizeof known - k) k += (size_t)w;
        }
        eng_errf(c->err, c->errlen, "synth: arch: '%s' is not supported (%s are)", p->arch, known);
        return ENG_ERR_UNSUPPORTED;
    }
    struct { const char *field; int32_t v, lo, hi; } lim[] = {
        {"n_embd", p->n_embd, 2, 65536}, {"n_layer", p->n_layer, 1, 1024}, {"n_ctx", p->n_ctx, 1, INT32_MAX},
    };
    for (size_t i = 0; i < sizeof lim / sizeof lim[0]; i++) {
        if (!sy_in_range(lim[i].v, lim[i].lo, lim[i].hi)) {
            snprintf(msg, sizeof msg, "%d, expected [%d, %d]", lim[i].v, lim[i].lo, lim[i].hi);
            return sy_fail_arg(c, lim[i].field, msg);
        }
    }
    if (!(p->rope_freq_base > 0.0f) || !isfinite(p->rope_freq_base))
        return sy_fail_arg(c, "rope_freq_base", "expected a positive number");
    if (!(p->rms_eps > 0.0f) || !isfinite(p->rms_eps))
        return sy_fail_arg(c, "rms_eps", "expected a positive number");
    if (!eng_ggml_type_known(p->type)) return sy_fail_arg(c, "type", "expected f32, f16, bf16 or q8_0");
    const unsigned g = (*arch)->groups;  /* groups the arch does not use are zeroed */
    if (!(g & SY_HEADS)) p->n_head = p->n_head_kv = p->n_rot = 0;
    if (!(g & SY_FF)) p->n_ff = 0;
    if (!(g & SY_SSM)) p->ssm_d_state = p->ssm_head_dim = p->ssm_n_group = p->ssm_d_conv = 0;
    if (!(g & SY_SWA)) p->n_swa = 0;
    if (!(g & SY_EVERY)) p->attn_every = 0;
    if (!(g & SY_WKV)) p->wkv_head_size = p->lora_decay = p->lora_iclr = p->lora_mix = p->lora_gate = 0;
    if (p->n_rot == 0 && p->n_head > 0) p->n_rot = p->n_embd / p->n_head;
    int32_t nv;
    int rc = vocab_size(c, p->vocab_path, &nv);
    if (rc) return rc;
    if (p->n_vocab != 0 && p->n_vocab != nv) {
        snprintf(msg, sizeof msg, "%d, but the vocabulary has %d tokens", p->n_vocab, nv);
        return sy_fail_arg(c, "n_vocab", msg);
    }
    p->n_vocab = nv;
    return (*arch)->check(c);
}

/* "tiny" when the shape is the preset's, "tiny+custom" when flags changed it. */
static void preset_label(const eng_synth_params *p, char *out, size_t n) {
    eng_synth_params ref = eng_synth_preset_arch(p->arch, p->preset);
    int32_t rot = p->n_head > 0 && p->n_rot != p->n_embd / p->n_head ? p->n_rot : 0;
    bool same = ref.ok && !strcmp(ref.arch, p->arch) && ref.n_embd == p->n_embd &&
                ref.n_layer == p->n_layer && ref.n_head == p->n_head &&
                ref.n_head_kv == p->n_head_kv && ref.n_ff == p->n_ff && ref.n_ctx == p->n_ctx &&
                rot == 0 && ref.rope_freq_base == p->rope_freq_base && ref.rms_eps == p->rms_eps &&
                ref.n_swa == p->n_swa && ref.attn_every == p->attn_every && ref.ssm_d_state == p->ssm_d_state &&
                ref.ssm_head_dim == p->ssm_head_dim && ref.ssm_n_group == p->ssm_n_group &&
                ref.ssm_d_conv == p->ssm_d_conv && ref.wkv_head_size == p->wkv_head_size &&
                ref.lora_decay == p->lora_decay && ref.lora_iclr == p->lora_iclr && ref.lora_mix == p->lora_mix &&
                ref.lora_gate == p->lora_gate;
    if (same || !ref.ok) snprintf(out, n, "%s", p->preset[0] ? p->preset : "custom");
    else snprintf(out, n, "%s+custom", p->preset);
}

int eng_synth_to_buffer(const eng_synth_params *in, void **buf, size_t *n, char *err, size_t errlen) {
    synth_ctx c = {.err = err, .errlen = errlen};
    const eng_synth_arch *arch;
    *buf = NULL;
    *n = 0;
    int rc = resolve(&c, in, &arch);
    if (rc) goto out;
    const eng_synth_params *p = &c.p;
    c.w = eng_gguf_writer_new(3, ENG_GGUF_DEFAULT_ALIGNMENT);
    c.rng = gsl_rng_alloc(gsl_rng_mt19937);
    if (!c.w || !c.rng) {
        rc = sy_nomem(&c, "writer");
        goto out;
    }
    char label[48], name[96];
    preset_label(p, label, sizeof label);
    if (p->name) snprintf(name, sizeof name, "%s", p->name);
    else if (!strcmp(arch->name, "llama")) snprintf(name, sizeof name, "kvreplay-synth-%s", label);
    else snprintf(name, sizeof name, "kvreplay-synth-%s-%s", arch->label ? arch->label : arch->name, label);
    eng_gguf_writer *w = c.w;
    rc = eng_gguf_writer_set_str(w, "general.architecture", c.gguf_arch);
    if (!rc) rc = eng_gguf_writer_set_str(w, "general.name", name);
    if (!rc) rc = eng_gguf_writer_set_u32(w, "general.alignment", ENG_GGUF_DEFAULT_ALIGNMENT);
    if (!rc) rc = eng_gguf_writer_set_u32(w, "general.file_type", file_type(p->type));
    if (rc) { rc = sy_nomem(&c, "metadata"); goto out; }
    if ((rc = arch->meta(&c))) goto out;
    rc = eng_gguf_writer_set_u64(w, "kvreplay.synth.seed", p->seed);
    if (!rc) rc = eng_gguf_writer_set_str(w, "kvreplay.synth.preset", label);
    if (!rc) rc = eng_gguf_writer_set_u32(w, "kvreplay.synth.version", SYNTH_VERSION);
    if (rc) { rc = sy_nomem(&c, "metadata"); goto out; }
    rc = p->vocab_path ? copy_vocab(&c, p->vocab_path) : builtin_vocab(&c);
    if (rc) goto out;

    if ((rc = sy_add_gauss(&c, "token_embd.weight", p->n_embd, p->n_vocab, 0.0, 1.0))) goto out;
    if (arch->ln_bias) {  /* layer-norm archs with a norm after the embedding (rwkv7) */
        if ((rc = sy_add_norm(&c, "token_embd_norm.weight", p->n_embd))) goto out;
        if ((rc = sy_add_gauss(&c, "token_embd_norm.bias", p->n_embd, 0, 0.0, SYNTH_NORM_NOISE))) goto out;
    }
    for (int32_t il = 0; il < p->n_layer; il++)
        if ((rc = arch->layer(&c, il))) goto out;
    if ((rc = sy_add_norm(&c, "output_norm.weight", p->n_embd))) goto out;
    if (arch->ln_bias && (rc = sy_add_gauss(&c, "output_norm.bias", p->n_embd, 0, 0.0, SYNTH_NORM_NOISE))) goto out;
    if (!arch->tied && (rc = sy_add_gauss(&c, "output.weight", p->n_embd, p->n_vocab, 0.0,
                                          SYNTH_OUTPUT_K / sqrt((double)p->n_embd)))) goto out;
    rc = eng_gguf_writer_to_buffer(w, buf, n);
    if (rc) sy_nomem(&c, "serialising");
out:
    for (size_t i = 0; i < c.n_bufs; i++) free(c.bufs[i]);
    free(c.bufs);
    free(c.tmp);
    if (c.rng) gsl_rng_free(c.rng);
    eng_gguf_writer_free(c.w);
    return rc;
}

int eng_synth_write(const eng_synth_params *p, const char *path, char *err, size_t errlen) {
    void *buf;
    size_t n;
    int rc = eng_synth_to_buffer(p, &buf, &n, err, errlen);
    if (rc) return rc;
    rc = eng_write_atomic(path, buf, n, err, errlen);
    free(buf);
    return rc;
}

