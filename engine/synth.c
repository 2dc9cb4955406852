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
 *
 * Architectures are rows of `archs[]`: a check of the params, the
 * architecture's metadata, and the tensors of one layer. New architectures
 * ("swa", "recurrent", "hybrid") add a row and their three functions here.
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
const char *const eng_synth_arch_names[] = {"llama", NULL};

// ----------------------------------------------------------------------------
// Presets

eng_synth_params eng_synth_preset(const char *name) {
    eng_synth_params p = {0};
    p.ok = true;
    snprintf(p.arch, sizeof p.arch, "llama");
    p.rope_freq_base = 10000.0f;
    p.rms_eps = 1e-5f;
    p.type = ENG_GGML_TYPE_F32;
    /* tiny unless told otherwise */
    p.n_embd = 64; p.n_layer = 2; p.n_head = 4; p.n_head_kv = 2; p.n_ff = 176; p.n_ctx = 4096;
    if (name && !strcmp(name, "tiny")) {
        /* defaults above */
    } else if (name && !strcmp(name, "small")) {
        p.n_embd = 256; p.n_layer = 4; p.n_head = 8; p.n_head_kv = 4; p.n_ff = 704; p.n_ctx = 16384;
    } else if (name && !strcmp(name, "base")) {
        p.n_embd = 1024; p.n_layer = 12; p.n_head = 16; p.n_head_kv = 8; p.n_ff = 2816; p.n_ctx = 8192;
    } else {
        p.ok = false;
    }
    snprintf(p.preset, sizeof p.preset, "%s", p.ok ? name : "custom");
    return p;
}

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

// ----------------------------------------------------------------------------
// Architecture: llama

static int llama_check(synth_ctx *c) {
    const eng_synth_params *p = &c->p;
    char msg[128];
    if (p->n_embd % p->n_head != 0) {
        snprintf(msg, sizeof msg, "%d heads do not divide n_embd %d", p->n_head, p->n_embd);
        return fail_arg(c, "n_head", msg);
    }
    if (p->n_head % p->n_head_kv != 0) {
        snprintf(msg, sizeof msg, "%d kv heads do not divide %d heads", p->n_head_kv, p->n_head);
        return fail_arg(c, "n_head_kv", msg);
    }
    int32_t e = p->n_embd / p->n_head;
    if (p->n_rot < 2 || p->n_rot > e || p->n_rot % 2 != 0) {
        snprintf(msg, sizeof msg, "%d, expected an even number in [2, head dim %d]", p->n_rot, e);
        return fail_arg(c, "n_rot", msg);
    }
    return ENG_OK;
}

static int llama_meta(synth_ctx *c) {
    const eng_synth_params *p = &c->p;
    eng_gguf_writer *w = c->w;
    int rc = ENG_OK;
    if (!rc) rc = eng_gguf_writer_set_u32(w, "llama.context_length", (uint32_t)p->n_ctx);
    if (!rc) rc = eng_gguf_writer_set_u32(w, "llama.embedding_length", (uint32_t)p->n_embd);
    if (!rc) rc = eng_gguf_writer_set_u32(w, "llama.block_count", (uint32_t)p->n_layer);
    if (!rc) rc = eng_gguf_writer_set_u32(w, "llama.feed_forward_length", (uint32_t)p->n_ff);
    if (!rc) rc = eng_gguf_writer_set_u32(w, "llama.attention.head_count", (uint32_t)p->n_head);
    if (!rc) rc = eng_gguf_writer_set_u32(w, "llama.attention.head_count_kv", (uint32_t)p->n_head_kv);
    if (!rc) rc = eng_gguf_writer_set_u32(w, "llama.rope.dimension_count", (uint32_t)p->n_rot);
    if (!rc) rc = eng_gguf_writer_set_f32(w, "llama.rope.freq_base", p->rope_freq_base);
    if (!rc) rc = eng_gguf_writer_set_f32(w, "llama.attention.layer_norm_rms_epsilon", p->rms_eps);
    if (!rc) rc = eng_gguf_writer_set_u32(w, "llama.vocab_size", (uint32_t)p->n_vocab);
    return rc ? nomem(c, "llama metadata") : ENG_OK;
}

/* blk.N: attn_norm [D], attn_q [D, D], attn_k/v [D, G*E], attn_output [D, D],
 * ffn_norm [D], ffn_gate/up [D, F], ffn_down [F, D]. */
static int llama_layer(synth_ctx *c, int32_t il) {
    const eng_synth_params *p = &c->p;
    int64_t D = p->n_embd, F = p->n_ff, GE = (int64_t)p->n_head_kv * (p->n_embd / p->n_head);
    char name[64];
    int rc;
#define T(suffix) (snprintf(name, sizeof name, "blk.%d." suffix ".weight", il), name)
    if ((rc = add_norm(c, T("attn_norm"), D))) return rc;
    if ((rc = add_proj(c, T("attn_q"), D, D))) return rc;
    if ((rc = add_proj(c, T("attn_k"), D, GE))) return rc;
    if ((rc = add_proj(c, T("attn_v"), D, GE))) return rc;
    if ((rc = add_proj(c, T("attn_output"), D, D))) return rc;
    if ((rc = add_norm(c, T("ffn_norm"), D))) return rc;
    if ((rc = add_proj(c, T("ffn_gate"), D, F))) return rc;
    if ((rc = add_proj(c, T("ffn_up"), D, F))) return rc;
    if ((rc = add_proj(c, T("ffn_down"), F, D))) return rc;
#undef T
    return ENG_OK;
}

typedef struct synth_arch {
    const char *name;
    int (*check)(synth_ctx *c);              /* arch-specific param checks */
    int (*meta)(synth_ctx *c);               /* ARCH.* metadata keys */
    int (*layer)(synth_ctx *c, int32_t il);  /* tensors of layer il */
} synth_arch;

static const synth_arch archs[] = {
    {"llama", llama_check, llama_meta, llama_layer},
};

static const synth_arch *find_arch(const char *name) {
    for (size_t i = 0; i < sizeof archs / sizeof archs[0]; i++)
        if (!strcmp(archs[i].name, name)) return &archs[i];
    return NULL;
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

static bool in_range(int32_t v, int32_t lo, int32_t hi) { return v >= lo && v <= hi; }

/* Generic param checks and resolution of the derived fields. */
static int resolve(synth_ctx *c, const eng_synth_params *in, const synth_arch **arch) {
    c->p = *in;
    eng_synth_params *p = &c->p;
    char msg[128];
    *arch = find_arch(p->arch);
    if (!*arch) {
        eng_errf(c->err, c->errlen, "synth: arch: '%s' is not supported (llama is)", p->arch);
        return ENG_ERR_UNSUPPORTED;
    }
    struct { const char *field; int32_t v, lo, hi; } lim[] = {
        {"n_embd", p->n_embd, 2, 65536},    {"n_layer", p->n_layer, 1, 1024},
        {"n_head", p->n_head, 1, 4096},     {"n_head_kv", p->n_head_kv, 1, 4096},
        {"n_ff", p->n_ff, 1, 1 << 20},      {"n_ctx", p->n_ctx, 1, INT32_MAX},
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
    eng_synth_params ref = eng_synth_preset(p->preset);
    int32_t rot = p->n_rot == p->n_embd / p->n_head ? 0 : p->n_rot;
    bool same = ref.ok && !strcmp(ref.arch, p->arch) && ref.n_embd == p->n_embd &&
                ref.n_layer == p->n_layer && ref.n_head == p->n_head &&
                ref.n_head_kv == p->n_head_kv && ref.n_ff == p->n_ff && ref.n_ctx == p->n_ctx &&
                rot == 0 && ref.rope_freq_base == p->rope_freq_base && ref.rms_eps == p->rms_eps;
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
    else snprintf(name, sizeof name, "kvreplay-synth-%s", label);
    eng_gguf_writer *w = c.w;
    rc = eng_gguf_writer_set_str(w, "general.architecture", arch->name);
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
