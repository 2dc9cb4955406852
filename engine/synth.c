/*
 * engine/synth.c: seeded synthetic GGUF models.
 *
 * The file is built in one pass through eng_gguf_writer: general.* keys, the
 * architecture's keys, kvreplay.synth.* provenance keys, the tokenizer, then
 * tensors (token_embd, each layer's, output_norm, output). Tensor data lives
 * in buffers owned by the build context until the writer has serialised.
 *
 * Determinism: each tensor draws from its own gsl_rng_mt19937, seeded with
 * XXH3-64(name, seed) folded to 32 bits, so a tensor's values depend only on
 * (seed, name, shape, init law), never on the order tensors are generated
 * in or on which other tensors exist; gaussians come from
 * gsl_ran_gaussian_ziggurat and are converted to the tensor type with
 * eng_ggml_from_f32. Same params -> byte-identical file.
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
 * Architectures are rows of `archs[]`: the synth name, the GGUF
 * architecture, a check of the params, the architecture's metadata, and the
 * tensors of one layer.
 */
#include "synth.h"
#include "gguf.h"
#include "status.h"
#include "util.h"

#include <gsl/gsl_randist.h>
#include <gsl/gsl_rng.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#define SYNTH_VERSION      1       /* kvreplay.synth.version: bump when init laws change */
#define SYNTH_OUTPUT_K     2.0     /* output.weight std = K / sqrt(D) */
#define SYNTH_NORM_NOISE   0.02
#define SYNTH_BUILTIN_VOCAB 259

const char *const eng_synth_preset_names[] = {"tiny", "small", "base", NULL};
const char *const eng_synth_arch_names[] = {"llama", "swa", "recurrent", "hybrid", NULL};

// ----------------------------------------------------------------------------
// Presets

/* The shape of a preset per architecture: D, L, H, G, F, ctx, then the
 * window and attention period (swa, hybrid) and the SSM dims N, P, NG, K. */
typedef struct preset_row {
    const char *arch, *name;
    int32_t D, L, H, G, F, ctx, W, every, N, P, NG, K;
} preset_row;

static const preset_row presets[] = {
    {"llama", "tiny", 64, 2, 4, 2, 176, 4096, 0, 0, 0, 0, 0, 0},
    {"llama", "small", 256, 4, 8, 4, 704, 16384, 0, 0, 0, 0, 0, 0},
    {"llama", "base", 1024, 12, 16, 8, 2816, 8192, 0, 0, 0, 0, 0, 0},
    {"swa", "tiny", 64, 2, 4, 2, 176, 4096, 40, 2, 0, 0, 0, 0},
    {"swa", "small", 256, 4, 8, 4, 704, 16384, 512, 4, 0, 0, 0, 0},
    {"swa", "base", 1024, 12, 16, 8, 2816, 8192, 1024, 6, 0, 0, 0, 0},
    {"recurrent", "tiny", 64, 2, 0, 0, 0, 4096, 0, 0, 16, 32, 1, 4},
    {"recurrent", "small", 256, 8, 0, 0, 0, 16384, 0, 0, 64, 64, 1, 4},
    {"recurrent", "base", 1024, 24, 0, 0, 0, 8192, 0, 0, 64, 64, 1, 4},
    {"hybrid", "tiny", 64, 4, 4, 2, 176, 4096, 0, 2, 16, 32, 1, 4},
    {"hybrid", "small", 256, 8, 8, 4, 704, 16384, 0, 4, 64, 64, 1, 4},
    {"hybrid", "base", 1024, 12, 16, 8, 2816, 8192, 0, 4, 64, 64, 1, 4},
};

eng_synth_params eng_synth_preset_arch(const char *arch, const char *name) {
    eng_synth_params p = {0};
    p.rope_freq_base = 10000.0f;
    p.rms_eps = 1e-5f;
    p.type = ENG_GGML_TYPE_F32;
    const preset_row *r = &presets[0];  /* llama tiny unless found */
    p.ok = false;
    for (size_t i = 0; arch && name && i < sizeof presets / sizeof presets[0]; i++)
        if (!strcmp(presets[i].arch, arch) && !strcmp(presets[i].name, name)) {
            r = &presets[i];
            p.ok = true;
            break;
        }
    snprintf(p.arch, sizeof p.arch, "%s", r->arch);
    p.n_embd = r->D; p.n_layer = r->L; p.n_head = r->H; p.n_head_kv = r->G; p.n_ff = r->F; p.n_ctx = r->ctx;
    p.n_swa = r->W; p.attn_every = r->every;
    p.ssm_d_state = r->N; p.ssm_head_dim = r->P; p.ssm_n_group = r->NG; p.ssm_d_conv = r->K;
    snprintf(p.preset, sizeof p.preset, "%s", p.ok ? name : "custom");
    return p;
}

eng_synth_params eng_synth_preset(const char *name) { return eng_synth_preset_arch("llama", name); }

// ----------------------------------------------------------------------------
// Build context

typedef struct synth_ctx {
    eng_synth_params p;       /* resolved: n_rot and n_vocab filled in */
    eng_gguf_writer *w;
    gsl_rng         *rng;
    void           **bufs;    /* tensor data, freed after serialisation */
    size_t           n_bufs, cap_bufs;
    float           *tmp;     /* f32 staging for converted types */
    size_t           tmp_n;
    char            *err;
    size_t           errlen;
    const char      *gguf_arch;  /* general.architecture: prefix of the arch's keys */
    char             key[128];   /* scratch for key() */
} synth_ctx;

static int fail_arg(synth_ctx *c, const char *field, const char *what) {
    eng_errf(c->err, c->errlen, "synth: %s: %s", field, what);
    return ENG_ERR_ARG;
}

static int nomem(synth_ctx *c, const char *what) {
    eng_errf(c->err, c->errlen, "synth: %s: out of memory", what);
    return ENG_ERR_NOMEM;
}

static int keep_buf(synth_ctx *c, void *b) {
    if (c->n_bufs == c->cap_bufs) {
        size_t cap = c->cap_bufs ? 2 * c->cap_bufs : 64;
        void **nb = realloc(c->bufs, cap * sizeof *nb);
        if (!nb) return ENG_ERR_NOMEM;
        c->bufs = nb;
        c->cap_bufs = cap;
    }
    c->bufs[c->n_bufs++] = b;
    return ENG_OK;
}

/* Adds tensor `name` [ne0, ne1] (ne1 == 0: 1-D) of values mean + N(0, std).
 * Matrices take the params' type (Q8_0 falls back to F16 when ne0 % 32 != 0);
 * vectors are F32. */
static int add_gauss(synth_ctx *c, const char *name, int64_t ne0, int64_t ne1, double mean, double std) {
    bool matrix = ne1 > 0;
    uint32_t type = matrix ? c->p.type : ENG_GGML_TYPE_F32;
    if (eng_ggml_row_size(type, ne0) == 0) type = ENG_GGML_TYPE_F16;
    int64_t ne[2] = {ne0, matrix ? ne1 : 1};
    size_t n = (size_t)ne[0] * (size_t)ne[1];
    size_t nbytes = eng_ggml_row_size(type, ne0) * (size_t)ne[1];
    void *data = malloc(nbytes ? nbytes : 1);
    if (!data || keep_buf(c, data) != ENG_OK) {
        free(data);
        return nomem(c, name);
    }
    float *f = type == ENG_GGML_TYPE_F32 ? data : NULL;
    if (!f) {
        if (c->tmp_n < n) {
            float *t = realloc(c->tmp, n * sizeof *t);
            if (!t) return nomem(c, name);
            c->tmp = t;
            c->tmp_n = n;
        }
        f = c->tmp;
    }
    uint64_t h = XXH3_64bits_withSeed(name, strlen(name), c->p.seed);
    gsl_rng_set(c->rng, (unsigned long)((h ^ (h >> 32)) & 0xffffffffu));
    for (size_t i = 0; i < n; i++) f[i] = (float)(mean + gsl_ran_gaussian_ziggurat(c->rng, std));
    if (f != data) eng_ggml_from_f32(type, f, data, (int64_t)n);
    int rc = eng_gguf_writer_add_tensor(c->w, name, type, matrix ? 2 : 1, ne, data, nbytes);
    if (rc != ENG_OK) eng_errf(c->err, c->errlen, "synth: %s: cannot add tensor (%s)", name,
                               eng_status_str(rc));
    return rc;
}

/* A projection [fan_in, fan_out] with std 1/sqrt(fan_in). */
static int add_proj(synth_ctx *c, const char *name, int64_t fan_in, int64_t fan_out) {
    return add_gauss(c, name, fan_in, fan_out, 0.0, 1.0 / sqrt((double)fan_in));
}

static int add_norm(synth_ctx *c, const char *name, int64_t n) {
    return add_gauss(c, name, n, 0, 1.0, SYNTH_NORM_NOISE);
}

static bool in_range(int32_t v, int32_t lo, int32_t hi) { return v >= lo && v <= hi; }

/* Adds an F32 tensor [ne0, ne1] (n_dims 2 when two_d, else 1) of the given
 * values (copied). */
static int add_f32(synth_ctx *c, const char *name, int64_t ne0, int64_t ne1, bool two_d, const float *vals) {
    const size_t n = (size_t)ne0 * (size_t)ne1;
    float *data = malloc(sizeof(float) * (n ? n : 1));
    if (!data || keep_buf(c, data) != ENG_OK) {
        free(data);
        return nomem(c, name);
    }
    memcpy(data, vals, sizeof(float) * n);
    int64_t ne[2] = {ne0, ne1};
    int rc = eng_gguf_writer_add_tensor(c->w, name, ENG_GGML_TYPE_F32, two_d ? 2 : 1, ne, data, sizeof(float) * n);
    if (rc != ENG_OK) eng_errf(c->err, c->errlen, "synth: %s: cannot add tensor (%s)", name, eng_status_str(rc));
    return rc;
}

/* n uniform draws in (0, 1) from the tensor's own generator (seeded as add_gauss). */
static int draw_uniform(synth_ctx *c, const char *name, size_t n, float **out) {
    if (c->tmp_n < n) {
        float *t = realloc(c->tmp, n * sizeof *t);
        if (!t) return nomem(c, name);
        c->tmp = t;
        c->tmp_n = n;
    }
    uint64_t h = XXH3_64bits_withSeed(name, strlen(name), c->p.seed);
    gsl_rng_set(c->rng, (unsigned long)((h ^ (h >> 32)) & 0xffffffffu));
    for (size_t i = 0; i < n; i++) c->tmp[i] = (float)gsl_rng_uniform_pos(c->rng);
    *out = c->tmp;
    return ENG_OK;
}

/* Metadata key "ARCH.suffix" for the architecture being written. */
static const char *key(synth_ctx *c, const char *suffix) {
    snprintf(c->key, sizeof c->key, "%s.%s", c->gguf_arch, suffix);
    return c->key;
}

static bool layer_is_attn(const eng_synth_params *p, int32_t il) {
    return p->attn_every > 0 && il % p->attn_every == p->attn_every - 1;
}

// ----------------------------------------------------------------------------
// Attention: shared checks, keys and tensors (llama, swa, hybrid)

static int attn_check(synth_ctx *c) {
    const eng_synth_params *p = &c->p;
    char msg[128];
    struct { const char *field; int32_t v, lo, hi; } lim[] = {
        {"n_head", p->n_head, 1, 4096}, {"n_head_kv", p->n_head_kv, 1, 4096}, {"n_ff", p->n_ff, 1, 1 << 20},
    };
    for (size_t i = 0; i < sizeof lim / sizeof lim[0]; i++)
        if (!in_range(lim[i].v, lim[i].lo, lim[i].hi)) {
            snprintf(msg, sizeof msg, "%d, expected [%d, %d]", lim[i].v, lim[i].lo, lim[i].hi);
            return fail_arg(c, lim[i].field, msg);
        }
    if (p->n_embd % p->n_head != 0) {
        snprintf(msg, sizeof msg, "%d heads do not divide n_embd %d", p->n_head, p->n_embd);
        return fail_arg(c, "n_head", msg);
    }
    if (p->n_head % p->n_head_kv != 0) {
        snprintf(msg, sizeof msg, "%d kv heads do not divide %d heads", p->n_head_kv, p->n_head);
        return fail_arg(c, "n_head_kv", msg);
    }
    if (p->n_rot == 0) c->p.n_rot = p->n_embd / p->n_head;
    int32_t e = p->n_embd / p->n_head;
    if (p->n_rot < 2 || p->n_rot > e || p->n_rot % 2 != 0) {
        snprintf(msg, sizeof msg, "%d, expected an even number in [2, head dim %d]", p->n_rot, e);
        return fail_arg(c, "n_rot", msg);
    }
    return ENG_OK;
}

/* context, embedding, blocks, FFN, heads, rope, eps, vocab: llama's keys under
 * the architecture's prefix; head_count_kv is written by the caller when
 * hkv_scalar is false. */
static int attn_meta(synth_ctx *c, bool hkv_scalar) {
    const eng_synth_params *p = &c->p;
    eng_gguf_writer *w = c->w;
    int rc = ENG_OK;
    if (!rc) rc = eng_gguf_writer_set_u32(w, key(c, "context_length"), (uint32_t)p->n_ctx);
    if (!rc) rc = eng_gguf_writer_set_u32(w, key(c, "embedding_length"), (uint32_t)p->n_embd);
    if (!rc) rc = eng_gguf_writer_set_u32(w, key(c, "block_count"), (uint32_t)p->n_layer);
    if (!rc) rc = eng_gguf_writer_set_u32(w, key(c, "feed_forward_length"), (uint32_t)p->n_ff);
    if (!rc) rc = eng_gguf_writer_set_u32(w, key(c, "attention.head_count"), (uint32_t)p->n_head);
    if (!rc && hkv_scalar) rc = eng_gguf_writer_set_u32(w, key(c, "attention.head_count_kv"), (uint32_t)p->n_head_kv);
    if (!rc) rc = eng_gguf_writer_set_u32(w, key(c, "rope.dimension_count"), (uint32_t)p->n_rot);
    if (!rc) rc = eng_gguf_writer_set_f32(w, key(c, "rope.freq_base"), p->rope_freq_base);
    if (!rc) rc = eng_gguf_writer_set_f32(w, key(c, "attention.layer_norm_rms_epsilon"), p->rms_eps);
    if (!rc) rc = eng_gguf_writer_set_u32(w, key(c, "vocab_size"), (uint32_t)p->n_vocab);
    return rc ? nomem(c, "metadata") : ENG_OK;
}

#define TN(suffix) (snprintf(name, sizeof name, "blk.%d." suffix, il), name)

/* blk.N: attn_norm [D], attn_q [D, D], attn_k/v [D, G*E], attn_output [D, D]. */
static int attn_tensors(synth_ctx *c, int32_t il) {
    const eng_synth_params *p = &c->p;
    int64_t D = p->n_embd, GE = (int64_t)p->n_head_kv * (p->n_embd / p->n_head);
    char name[64];
    int rc;
    if ((rc = add_norm(c, TN("attn_norm.weight"), D))) return rc;
    if ((rc = add_proj(c, TN("attn_q.weight"), D, D))) return rc;
    if ((rc = add_proj(c, TN("attn_k.weight"), D, GE))) return rc;
    if ((rc = add_proj(c, TN("attn_v.weight"), D, GE))) return rc;
    return add_proj(c, TN("attn_output.weight"), D, D);
}

/* blk.N: ffn_norm [D], ffn_gate/up [D, F], ffn_down [F, D]. */
static int ffn_tensors(synth_ctx *c, int32_t il) {
    const eng_synth_params *p = &c->p;
    int64_t D = p->n_embd, F = p->n_ff;
    char name[64];
    int rc;
    if ((rc = add_norm(c, TN("ffn_norm.weight"), D))) return rc;
    if ((rc = add_proj(c, TN("ffn_gate.weight"), D, F))) return rc;
    if ((rc = add_proj(c, TN("ffn_up.weight"), D, F))) return rc;
    return add_proj(c, TN("ffn_down.weight"), F, D);
}

// ----------------------------------------------------------------------------
// Mamba-2: checks, keys and tensors (recurrent, hybrid)

static int ssm_check(synth_ctx *c) {
    const eng_synth_params *p = &c->p;
    char msg[160];
    const int32_t I = 2 * p->n_embd;
    struct { const char *field; int32_t v, lo, hi; } lim[] = {
        {"ssm_d_state", p->ssm_d_state, 1, 4096}, {"ssm_head_dim", p->ssm_head_dim, 1, 4096},
        {"ssm_n_group", p->ssm_n_group, 1, 4096}, {"ssm_d_conv", p->ssm_d_conv, 1, 64},
    };
    for (size_t i = 0; i < sizeof lim / sizeof lim[0]; i++)
        if (!in_range(lim[i].v, lim[i].lo, lim[i].hi)) {
            snprintf(msg, sizeof msg, "%d, expected [%d, %d]", lim[i].v, lim[i].lo, lim[i].hi);
            return fail_arg(c, lim[i].field, msg);
        }
    if (I % p->ssm_head_dim != 0) {
        snprintf(msg, sizeof msg, "%d does not divide the inner size 2*n_embd = %d", p->ssm_head_dim, I);
        return fail_arg(c, "ssm_head_dim", msg);
    }
    if ((I / p->ssm_head_dim) % p->ssm_n_group != 0) {
        snprintf(msg, sizeof msg, "%d groups do not divide %d heads", p->ssm_n_group, I / p->ssm_head_dim);
        return fail_arg(c, "ssm_n_group", msg);
    }
    return ENG_OK;
}

static int ssm_meta(synth_ctx *c) {
    const eng_synth_params *p = &c->p;
    eng_gguf_writer *w = c->w;
    const int32_t I = 2 * p->n_embd;
    int rc = ENG_OK;
    if (!rc) rc = eng_gguf_writer_set_u32(w, key(c, "ssm.conv_kernel"), (uint32_t)p->ssm_d_conv);
    if (!rc) rc = eng_gguf_writer_set_u32(w, key(c, "ssm.inner_size"), (uint32_t)I);
    if (!rc) rc = eng_gguf_writer_set_u32(w, key(c, "ssm.state_size"), (uint32_t)p->ssm_d_state);
    if (!rc) rc = eng_gguf_writer_set_u32(w, key(c, "ssm.time_step_rank"), (uint32_t)(I / p->ssm_head_dim));
    if (!rc) rc = eng_gguf_writer_set_u32(w, key(c, "ssm.group_count"), (uint32_t)p->ssm_n_group);
    return rc ? nomem(c, "metadata") : ENG_OK;
}

/* blk.N: attn_norm [D], ssm_in [D, DP], ssm_conv1d.weight [K, CD] and .bias
 * [CD], ssm_dt.bias [NH], ssm_a and ssm_d [1, NH], ssm_norm.weight [I/NG, NG],
 * ssm_out [I, D] (llama.cpp's mamba2 names; ssm_a and ssm_d without ".weight"). */
static int ssm_tensors(synth_ctx *c, int32_t il) {
    const eng_synth_params *p = &c->p;
    const int64_t D = p->n_embd, I = 2 * D, N = p->ssm_d_state, NG = p->ssm_n_group, K = p->ssm_d_conv;
    const int64_t NH = I / p->ssm_head_dim, CD = I + 2 * NG * N, DP = 2 * I + 2 * NG * N + NH;
    char name[64];
    int rc;
    if ((rc = add_norm(c, TN("attn_norm.weight"), D))) return rc;
    if ((rc = add_proj(c, TN("ssm_in.weight"), D, DP))) return rc;
    {
        /* F32 always, as llama.cpp keeps the conv unquantised */
        uint32_t keep = c->p.type;
        c->p.type = ENG_GGML_TYPE_F32;
        rc = add_gauss(c, TN("ssm_conv1d.weight"), K, CD, 0.0, 1.0 / sqrt((double)K));
        c->p.type = keep;
        if (rc) return rc;
    }
    if ((rc = add_gauss(c, TN("ssm_conv1d.bias"), CD, 0, 0.0, 0.1))) return rc;
    float *u, v[4096];
    if (NH > (int64_t)(sizeof v / sizeof v[0])) return fail_arg(c, "ssm_head_dim", "too many SSM heads");
    /* dt log-uniform in [1e-3, 1e-1], bias = softplus^-1(dt) = dt + log(-expm1(-dt)) */
    if ((rc = draw_uniform(c, TN("ssm_dt.bias"), (size_t)NH, &u))) return rc;
    for (int64_t h = 0; h < NH; h++) {
        const double dt = exp(log(1e-3) + u[h] * (log(1e-1) - log(1e-3)));
        v[h] = (float)(dt + log(-expm1(-dt)));
    }
    if ((rc = add_f32(c, name, NH, 1, false, v))) return rc;
    if ((rc = draw_uniform(c, TN("ssm_a"), (size_t)NH, &u))) return rc;
    for (int64_t h = 0; h < NH; h++) v[h] = (float)-(1.0 + 15.0 * u[h]);
    if ((rc = add_f32(c, name, 1, NH, true, v))) return rc;
    {
        /* gaussians drawn as add_gauss does, written [1, NH] */
        TN("ssm_d");
        uint64_t hs = XXH3_64bits_withSeed(name, strlen(name), c->p.seed);
        gsl_rng_set(c->rng, (unsigned long)((hs ^ (hs >> 32)) & 0xffffffffu));
        for (int64_t h = 0; h < NH; h++) v[h] = (float)(1.0 + gsl_ran_gaussian_ziggurat(c->rng, SYNTH_NORM_NOISE));
        if ((rc = add_f32(c, name, 1, NH, true, v))) return rc;
    }
    {
        float *nw = malloc(sizeof(float) * (size_t)I);
        if (!nw) return nomem(c, "ssm_norm");
        TN("ssm_norm.weight");
        uint64_t hs = XXH3_64bits_withSeed(name, strlen(name), c->p.seed);
        gsl_rng_set(c->rng, (unsigned long)((hs ^ (hs >> 32)) & 0xffffffffu));
        for (int64_t i = 0; i < I; i++) nw[i] = (float)(1.0 + gsl_ran_gaussian_ziggurat(c->rng, SYNTH_NORM_NOISE));
        rc = add_f32(c, name, I / NG, NG, true, nw);
        free(nw);
        if (rc) return rc;
    }
    return add_proj(c, TN("ssm_out.weight"), I, D);
}

#undef TN

// ----------------------------------------------------------------------------
// The architectures

static int llama_check(synth_ctx *c) { return attn_check(c); }
static int llama_meta(synth_ctx *c) { return attn_meta(c, true); }

static int llama_layer(synth_ctx *c, int32_t il) {
    int rc = attn_tensors(c, il);
    return rc ? rc : ffn_tensors(c, il);
}

static int swa_check(synth_ctx *c) {
    int rc = attn_check(c);
    if (rc) return rc;
    char msg[96];
    if (!in_range(c->p.n_swa, 1, INT32_MAX)) {
        snprintf(msg, sizeof msg, "%d, expected a window of at least 1 position", c->p.n_swa);
        return fail_arg(c, "n_swa", msg);
    }
    if (!in_range(c->p.attn_every, 0, 1 << 20)) {
        snprintf(msg, sizeof msg, "%d, expected >= 0 (0: every layer sliding-window)", c->p.attn_every);
        return fail_arg(c, "attn_every", msg);
    }
    return ENG_OK;
}

/* llama's keys, plus the window and llama.cpp's set_swa_pattern(P) period:
 * layer il slides iff P == 0 or il % P < P - 1. */
static int swa_meta(synth_ctx *c) {
    int rc = attn_meta(c, true);
    if (rc) return rc;
    rc = eng_gguf_writer_set_u32(c->w, key(c, "attention.sliding_window"), (uint32_t)c->p.n_swa);
    if (!rc) rc = eng_gguf_writer_set_u32(c->w, key(c, "attention.sliding_window_pattern"), (uint32_t)c->p.attn_every);
    return rc ? nomem(c, "metadata") : ENG_OK;
}

static int rec_check(synth_ctx *c) { return ssm_check(c); }

/* llama.cpp's mamba2 keys: no attention and no FFN (both counts 0, as its
 * converter writes them). */
static int rec_meta(synth_ctx *c) {
    const eng_synth_params *p = &c->p;
    eng_gguf_writer *w = c->w;
    int rc = ENG_OK;
    if (!rc) rc = eng_gguf_writer_set_u32(w, key(c, "context_length"), (uint32_t)p->n_ctx);
    if (!rc) rc = eng_gguf_writer_set_u32(w, key(c, "embedding_length"), (uint32_t)p->n_embd);
    if (!rc) rc = eng_gguf_writer_set_u32(w, key(c, "block_count"), (uint32_t)p->n_layer);
    if (!rc) rc = eng_gguf_writer_set_u32(w, key(c, "feed_forward_length"), 0);
    if (!rc) rc = eng_gguf_writer_set_u32(w, key(c, "attention.head_count"), 0);
    if (!rc) rc = eng_gguf_writer_set_f32(w, key(c, "attention.layer_norm_rms_epsilon"), p->rms_eps);
    if (!rc) rc = eng_gguf_writer_set_u32(w, key(c, "vocab_size"), (uint32_t)p->n_vocab);
    if (rc) return nomem(c, "metadata");
    return ssm_meta(c);
}

static int rec_layer(synth_ctx *c, int32_t il) { return ssm_tensors(c, il); }

static int hybrid_check(synth_ctx *c) {
    int rc = attn_check(c);
    if (!rc) rc = ssm_check(c);
    if (rc) return rc;
    if (!in_range(c->p.attn_every, 0, 1 << 20)) {
        char msg[96];
        snprintf(msg, sizeof msg, "%d, expected >= 0 (0: no attention layer)", c->p.attn_every);
        return fail_arg(c, "attn_every", msg);
    }
    return ENG_OK;
}

/* granitehybrid: llama's keys, head_count_kv an int32 array (0 = a Mamba-2
 * layer, as llama.cpp reads it), rope on (rope.scaling.finetuned true), the
 * ssm.* keys; no granite scaling keys (llama.cpp then scales nothing). */
static int hybrid_meta(synth_ctx *c) {
    int rc = attn_meta(c, false);
    if (rc) return rc;
    const eng_synth_params *p = &c->p;
    int32_t *hkv = malloc(sizeof(int32_t) * (size_t)p->n_layer);
    if (!hkv) return nomem(c, "metadata");
    for (int32_t il = 0; il < p->n_layer; il++) hkv[il] = layer_is_attn(p, il) ? p->n_head_kv : 0;
    rc = eng_gguf_writer_set_arr(c->w, key(c, "attention.head_count_kv"), ENG_GGUF_TYPE_INT32, (uint64_t)p->n_layer,
                                 hkv);
    free(hkv);
    if (!rc) rc = eng_gguf_writer_set_bool(c->w, key(c, "rope.scaling.finetuned"), true);
    if (rc) return nomem(c, "metadata");
    return ssm_meta(c);
}

static int hybrid_layer(synth_ctx *c, int32_t il) {
    int rc = layer_is_attn(&c->p, il) ? attn_tensors(c, il) : ssm_tensors(c, il);
    return rc ? rc : ffn_tensors(c, il);
}

typedef struct synth_arch {
    const char *name;                        /* --arch */
    const char *gguf;                        /* general.architecture */
    bool attn, ssm;                          /* which parameter groups apply */
    int (*check)(synth_ctx *c);              /* arch-specific param checks */
    int (*meta)(synth_ctx *c);               /* ARCH.* metadata keys */
    int (*layer)(synth_ctx *c, int32_t il);  /* tensors of layer il */
} synth_arch;

static const synth_arch archs[] = {
    {"llama", "llama", true, false, llama_check, llama_meta, llama_layer},
    {"swa", "kvreplay-swa", true, false, swa_check, swa_meta, llama_layer},
    {"recurrent", "mamba2", false, true, rec_check, rec_meta, rec_layer},
    {"hybrid", "granitehybrid", true, true, hybrid_check, hybrid_meta, hybrid_layer},
};

static const synth_arch *find_arch(const char *name) {
    for (size_t i = 0; i < sizeof archs / sizeof archs[0]; i++)
        if (!strcmp(archs[i].name, name)) return &archs[i];
    return NULL;
}

const char *eng_synth_gguf_arch(const char *arch) {
    const synth_arch *a = arch ? find_arch(arch) : NULL;
    return a ? a->gguf : NULL;
}

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
    return rc ? nomem(c, "tokenizer") : ENG_OK;
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
    return rc ? nomem(c, "tokenizer") : ENG_OK;
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
static int resolve(synth_ctx *c, const eng_synth_params *in, const synth_arch **arch) {
    c->p = *in;
    eng_synth_params *p = &c->p;
    char msg[128];
    *arch = find_arch(p->arch);
    if (!*arch) {
        eng_errf(c->err, c->errlen, "synth: arch: '%s' is not supported (llama, swa, recurrent, hybrid are)",
                 p->arch);
        return ENG_ERR_UNSUPPORTED;
    }
    c->gguf_arch = (*arch)->gguf;
    struct { const char *field; int32_t v, lo, hi; } lim[] = {
        {"n_embd", p->n_embd, 2, 65536}, {"n_layer", p->n_layer, 1, 1024}, {"n_ctx", p->n_ctx, 1, INT32_MAX},
    };
    for (size_t i = 0; i < sizeof lim / sizeof lim[0]; i++) {
        if (!in_range(lim[i].v, lim[i].lo, lim[i].hi)) {
            snprintf(msg, sizeof msg, "%d, expected [%d, %d]", lim[i].v, lim[i].lo, lim[i].hi);
            return fail_arg(c, lim[i].field, msg);
        }
    }
    if (!(p->rope_freq_base > 0.0f) || !isfinite(p->rope_freq_base))
        return fail_arg(c, "rope_freq_base", "expected a positive number");
    if (!(p->rms_eps > 0.0f) || !isfinite(p->rms_eps))
        return fail_arg(c, "rms_eps", "expected a positive number");
    if (!eng_ggml_type_known(p->type)) return fail_arg(c, "type", "expected f32, f16, bf16 or q8_0");
    if (!(*arch)->attn) p->n_head = p->n_head_kv = p->n_ff = p->n_rot = 0;  /* unused */
    if (!(*arch)->ssm) p->ssm_d_state = p->ssm_head_dim = p->ssm_n_group = p->ssm_d_conv = 0;
    if (strcmp((*arch)->name, "swa") != 0) p->n_swa = 0;
    if (strcmp((*arch)->name, "swa") != 0 && strcmp((*arch)->name, "hybrid") != 0) p->attn_every = 0;
    if (p->n_rot == 0 && p->n_head > 0) p->n_rot = p->n_embd / p->n_head;
    int32_t nv;
    int rc = vocab_size(c, p->vocab_path, &nv);
    if (rc) return rc;
    if (p->n_vocab != 0 && p->n_vocab != nv) {
        snprintf(msg, sizeof msg, "%d, but the vocabulary has %d tokens", p->n_vocab, nv);
        return fail_arg(c, "n_vocab", msg);
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
                ref.ssm_d_conv == p->ssm_d_conv;
    if (same || !ref.ok) snprintf(out, n, "%s", p->preset[0] ? p->preset : "custom");
    else snprintf(out, n, "%s+custom", p->preset);
}

int eng_synth_to_buffer(const eng_synth_params *in, void **buf, size_t *n, char *err, size_t errlen) {
    synth_ctx c = {.err = err, .errlen = errlen};
    const synth_arch *arch;
    *buf = NULL;
    *n = 0;
    int rc = resolve(&c, in, &arch);
    if (rc) goto out;
    const eng_synth_params *p = &c.p;
    c.w = eng_gguf_writer_new(3, ENG_GGUF_DEFAULT_ALIGNMENT);
    c.rng = gsl_rng_alloc(gsl_rng_mt19937);
    if (!c.w || !c.rng) {
        rc = nomem(&c, "writer");
        goto out;
    }
    char label[48], name[96];
    preset_label(p, label, sizeof label);
    if (p->name) snprintf(name, sizeof name, "%s", p->name);
    else if (!strcmp(arch->name, "llama")) snprintf(name, sizeof name, "kvreplay-synth-%s", label);
    else snprintf(name, sizeof name, "kvreplay-synth-%s-%s", arch->name, label);
    eng_gguf_writer *w = c.w;
    rc = eng_gguf_writer_set_str(w, "general.architecture", arch->gguf);
    if (!rc) rc = eng_gguf_writer_set_str(w, "general.name", name);
    if (!rc) rc = eng_gguf_writer_set_u32(w, "general.alignment", ENG_GGUF_DEFAULT_ALIGNMENT);
    if (!rc) rc = eng_gguf_writer_set_u32(w, "general.file_type", file_type(p->type));
    if (rc) { rc = nomem(&c, "metadata"); goto out; }
    if ((rc = arch->meta(&c))) goto out;
    rc = eng_gguf_writer_set_u64(w, "kvreplay.synth.seed", p->seed);
    if (!rc) rc = eng_gguf_writer_set_str(w, "kvreplay.synth.preset", label);
    if (!rc) rc = eng_gguf_writer_set_u32(w, "kvreplay.synth.version", SYNTH_VERSION);
    if (rc) { rc = nomem(&c, "metadata"); goto out; }
    rc = p->vocab_path ? copy_vocab(&c, p->vocab_path) : builtin_vocab(&c);
    if (rc) goto out;

    if ((rc = add_gauss(&c, "token_embd.weight", p->n_embd, p->n_vocab, 0.0, 1.0))) goto out;
    for (int32_t il = 0; il < p->n_layer; il++)
        if ((rc = arch->layer(&c, il))) goto out;
    if ((rc = add_norm(&c, "output_norm.weight", p->n_embd))) goto out;
    if ((rc = add_gauss(&c, "output.weight", p->n_embd, p->n_vocab, 0.0,
                        SYNTH_OUTPUT_K / sqrt((double)p->n_embd)))) goto out;
    rc = eng_gguf_writer_to_buffer(w, buf, n);
    if (rc) nomem(&c, "serialising");
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
