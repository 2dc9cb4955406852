/*
 * engine/model.c: model loading (GGUF -> weights in the kernel's layout and
 * the compute precision), model info, fingerprint, the FLOPs cost model, and
 * the numerics helpers of model.h.
 *
 * Invariants of a loaded eng_model: every weight is in its final precision
 * (bf16 values when precision is bf16) and in the layout of the chosen
 * kernel (kernels.h); info is complete; fingerprint = XXH3_64 of the 32-byte
 * SHA-256 of the file, then the kernel and the precision as two
 * little-endian uint32 (40 bytes); for blas, whose results change with the
 * thread count (measured: tests/test_engine.c), also the thread count
 * (a third uint32) and OpenBLAS's config string (seed of the hash). ref's
 * results do not depend on the thread count, so it is left out there. A
 * model is immutable after load and may be shared by sequences.
 *
 * Supported: general.architecture "llama", "mamba2" and "granitehybrid"
 * (llama.cpp's names and meaning; granitehybrid with a dense FFN, RoPE on
 * and no granite scaling) and "kvreplay-swa" (llama with sliding-window
 * layers, kvreplay's own: docs/gguf.md); tensor types f32, f16, bf16, q8_0
 * (dequantised at load).
 */
#include "internal.h"

#include <cblas.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "sha256.h"
#include "status.h"

// ----------------------------------------------------------------------------
// Numerics helpers

eng_numerics eng_numerics_default(void) {
    eng_numerics n = {.kernel = ENG_KERNEL_BLAS, .precision = ENG_PRECISION_FP32, .n_threads = 1};
    return n;
}

const char *eng_kernel_name(eng_kernel k) { return k == ENG_KERNEL_REF ? "ref" : "blas"; }
const char *eng_precision_name(eng_precision p) { return p == ENG_PRECISION_BF16 ? "bf16" : "fp32"; }
const char *eng_align_name(eng_align a) { return a == ENG_ALIGN_NONE ? "none" : "chunk"; }

int eng_kernel_parse(const char *s, eng_kernel *out) {
    if (!s) return ENG_ERR_ARG;
    if (!strcmp(s, "blas")) { *out = ENG_KERNEL_BLAS; return ENG_OK; }
    if (!strcmp(s, "ref")) { *out = ENG_KERNEL_REF; return ENG_OK; }
    return ENG_ERR_ARG;
}

int eng_precision_parse(const char *s, eng_precision *out) {
    if (!s) return ENG_ERR_ARG;
    if (!strcmp(s, "fp32")) { *out = ENG_PRECISION_FP32; return ENG_OK; }
    if (!strcmp(s, "bf16")) { *out = ENG_PRECISION_BF16; return ENG_OK; }
    return ENG_ERR_ARG;
}

int eng_align_parse(const char *s, eng_align *out) {
    if (!s) return ENG_ERR_ARG;
    if (!strcmp(s, "chunk")) { *out = ENG_ALIGN_CHUNK; return ENG_OK; }
    if (!strcmp(s, "none")) { *out = ENG_ALIGN_NONE; return ENG_OK; }
    return ENG_ERR_ARG;
}

const char *eng_blas_info(void) {
    const char *c = openblas_get_config();
    return c ? c : "OpenBLAS (unknown config)";
}

int32_t eng_argmax(const float *logits, int32_t n) {
    int32_t best = 0;
    for (int32_t i = 1; i < n; i++)
        if (logits[i] > logits[best]) best = i;
    return best;
}

// ----------------------------------------------------------------------------
// Loading helpers: hyperparameters and tensors, each failure naming the field

typedef struct loader {
    const char *path;
    eng_gguf   *g;
    char       *err;
    size_t      errlen;
    const char *arch;
    int         id;      /* ARCH_* */
    bool       *is_swa;  /* [L] kvreplay-swa: sliding-window layers */
    bool       *is_rec;  /* [L] granitehybrid: Mamba-2 layers (head_count_kv[il] == 0) */
} loader;

enum { ARCH_LLAMA, ARCH_SWA, ARCH_MAMBA2, ARCH_GRANITEHYBRID };

/* "{arch}.suffix" as an int; def when absent (def < 0: required). */
static int hp_int(loader *ld, const char *suffix, int64_t def, int64_t lo, int64_t hi, int32_t *out) {
    char key[128];
    snprintf(key, sizeof key, "%s.%s", ld->arch, suffix);
    int64_t v;
    int rc = eng_gguf_get_int(ld->g, key, &v);
    if (rc == ENG_ERR_NOT_FOUND) {
        if (def < 0) {
            eng_errf(ld->err, ld->errlen, "%s: metadata: %s: missing", ld->path, key);
            return ENG_ERR_FORMAT;
        }
        v = def;
    } else if (rc != ENG_OK) {
        eng_errf(ld->err, ld->errlen, "%s: metadata: %s: not an integer", ld->path, key);
        return ENG_ERR_FORMAT;
    }
    if (v < lo || v > hi) {
        eng_errf(ld->err, ld->errlen, "%s: metadata: %s: %lld out of range [%lld, %lld]", ld->path, key,
                 (long long)v, (long long)lo, (long long)hi);
        return ENG_ERR_FORMAT;
    }
    *out = (int32_t)v;
    return ENG_OK;
}

static int hp_float(loader *ld, const char *suffix, double def, float *out) {
    char key[128];
    snprintf(key, sizeof key, "%s.%s", ld->arch, suffix);
    double v;
    int rc = eng_gguf_get_float(ld->g, key, &v);
    if (rc == ENG_ERR_NOT_FOUND) {
        v = def;
    } else if (rc != ENG_OK || !(v > 0.0)) {
        eng_errf(ld->err, ld->errlen, "%s: metadata: %s: expected a positive float", ld->path, key);
        return ENG_ERR_FORMAT;
    }
    *out = (float)v;
    return ENG_OK;
}

/* Finds a tensor with ne = [ne0, ne1] (ne1 = 1 for vectors) and returns it as
 * a malloc'd f32 array in *out (caller frees). ENG_ERR_NOT_FOUND when absent
 * and optional, else ENG_ERR_FORMAT naming the tensor. */
static int get_tensor(loader *ld, const char *name, int64_t ne0, int64_t ne1, bool optional, float **out) {
    *out = NULL;
    const eng_gguf_tensor *t = eng_gguf_find_tensor(ld->g, name);
    if (!t) {
        if (optional) return ENG_ERR_NOT_FOUND;
        eng_errf(ld->err, ld->errlen, "%s: tensor %s: missing", ld->path, name);
        return ENG_ERR_FORMAT;
    }
    if (t->ne[0] != ne0 || t->ne[1] != ne1 || t->ne[2] != 1 || t->ne[3] != 1) {
        eng_errf(ld->err, ld->errlen, "%s: tensor %s: shape [%lld, %lld, %lld, %lld], expected [%lld, %lld]",
                 ld->path, name, (long long)t->ne[0], (long long)t->ne[1], (long long)t->ne[2],
                 (long long)t->ne[3], (long long)ne0, (long long)ne1);
        return ENG_ERR_FORMAT;
    }
    if (t->type != ENG_GGML_TYPE_F32 && t->type != ENG_GGML_TYPE_F16 && t->type != ENG_GGML_TYPE_BF16 &&
        t->type != ENG_GGML_TYPE_Q8_0) {
        eng_errf(ld->err, ld->errlen, "%s: tensor %s: type %s not supported", ld->path, name,
                 eng_ggml_type_name(t->type));
        return ENG_ERR_UNSUPPORTED;
    }
    float *f = malloc(sizeof(float) * (size_t)(ne0 * ne1));
    if (!f) return ENG_ERR_NOMEM;
    eng_ggml_to_f32(t->type, t->data, f, ne0 * ne1);
    *out = f;
    return ENG_OK;
}

/* A tensor in compute precision, kept row-major as is (norm weights, embeddings). */
static int get_plain(loader *ld, const char *name, int64_t ne0, int64_t ne1, bool bf16, float **out) {
    int rc = get_tensor(ld, name, ne0, ne1, false, out);
    if (rc == ENG_OK && bf16)
        for (int64_t i = 0; i < ne0 * ne1; i++) (*out)[i] = eng_bf16_round((*out)[i]);
    return rc;
}

/* Stacks the named [K, N_i] tensors (GGUF ne) into one [sum N_i, K] matrix
 * and builds its kernel layout. */
static int get_fused(loader *ld, const eng_model *m, const char *const *names, const int64_t *n_outs,
                     int n_parts, int64_t n_in, eng_kmat *out) {
    int64_t n_out = 0;
    for (int i = 0; i < n_parts; i++) n_out += n_outs[i];
    float *w = malloc(sizeof(float) * (size_t)(n_out * n_in));
    if (!w) return ENG_ERR_NOMEM;
    int rc = ENG_OK;
    int64_t row = 0;
    for (int i = 0; i < n_parts && rc == ENG_OK; i++) {
        float *part;
        rc = get_tensor(ld, names[i], n_in, n_outs[i], false, &part);
        if (rc != ENG_OK) break;
        memcpy(w + row * n_in, part, sizeof(float) * (size_t)(n_outs[i] * n_in));
        free(part);
        row += n_outs[i];
    }
    if (rc == ENG_OK)
        rc = eng_kmat_init_for(out, w, (int32_t)n_out, (int32_t)n_in, m->num.kernel, m->kctx.bf16);
    free(w);
    return rc;
}

// ----------------------------------------------------------------------------
// Layers: one loader per layer kind

static int load_attn(loader *ld, eng_model *m, int32_t il, eng_layer *L) {
    const eng_model_info *in = &m->info;
    const int64_t D = in->n_embd, GE = (int64_t)in->n_head_kv * in->head_dim;
    char nq[64], nk[64], nv[64], no[64], nn[64];
    snprintf(nq, sizeof nq, "blk.%d.attn_q.weight", il);
    snprintf(nk, sizeof nk, "blk.%d.attn_k.weight", il);
    snprintf(nv, sizeof nv, "blk.%d.attn_v.weight", il);
    snprintf(no, sizeof no, "blk.%d.attn_output.weight", il);
    snprintf(nn, sizeof nn, "blk.%d.attn_norm.weight", il);
    int rc = get_plain(ld, nn, D, 1, m->kctx.bf16, &L->attn.attn_norm);
    if (rc != ENG_OK) return rc;
    const char *qkv[3] = {nq, nk, nv};
    const int64_t n_outs[3] = {D, GE, GE};
    if ((rc = get_fused(ld, m, qkv, n_outs, 3, D, &L->attn.wqkv)) != ENG_OK) return rc;
    const char *o[1] = {no};
    const int64_t o_out[1] = {D};
    return get_fused(ld, m, o, o_out, 1, (int64_t)in->n_head * in->head_dim, &L->attn.wo);
}

static int load_ffn(loader *ld, eng_model *m, int32_t il, eng_layer *L) {
    const int64_t D = m->info.n_embd, F = m->info.n_ff;
    char ng[64], nu[64], nd[64], nn[64];
    snprintf(ng, sizeof ng, "blk.%d.ffn_gate.weight", il);
    snprintf(nu, sizeof nu, "blk.%d.ffn_up.weight", il);
    snprintf(nd, sizeof nd, "blk.%d.ffn_down.weight", il);
    snprintf(nn, sizeof nn, "blk.%d.ffn_norm.weight", il);
    int rc = get_plain(ld, nn, D, 1, m->kctx.bf16, &L->ffn.ffn_norm);
    if (rc != ENG_OK) return rc;
    const char *gu[2] = {ng, nu};
    const int64_t gu_out[2] = {F, F};
    if ((rc = get_fused(ld, m, gu, gu_out, 2, D, &L->ffn.w_gate_up)) != ENG_OK) return rc;
    const char *dn[1] = {nd};
    const int64_t d_out[1] = {D};
    return get_fused(ld, m, dn, d_out, 1, F, &L->ffn.w_down);
}

/* Mamba-2 mixer of layer il (llama.cpp's mamba2 tensors; docs/gguf.md). */
static int load_ssm(loader *ld, eng_model *m, int32_t il, eng_layer *L) {
    const eng_ssm_hparams *hp = &m->ssm_hp;
    const int64_t D = hp->n_embd, NI = hp->d_inner, NH = hp->n_head, NG = hp->n_group, K = hp->d_conv;
    const int64_t CD = hp->conv_dim;
    const bool bf16 = m->kctx.bf16;
    eng_ssm_weights *w = &L->ssm;
    char name[96];
    int rc;
#define TN(suffix) (snprintf(name, sizeof name, "blk.%d." suffix, il), name)
    if ((rc = get_plain(ld, TN("attn_norm.weight"), D, 1, bf16, &w->attn_norm)) != ENG_OK) return rc;
    {
        const char *n1[1] = {TN("ssm_in.weight")};
        const int64_t o1[1] = {hp->d_in_proj};
        if ((rc = get_fused(ld, m, n1, o1, 1, D, &w->in_proj)) != ENG_OK) return rc;
    }
    {   /* GGUF [K, CD] (each channel's K taps contiguous) -> [K, CD] tap-major */
        float *c;
        if ((rc = get_tensor(ld, TN("ssm_conv1d.weight"), K, CD, false, &c)) != ENG_OK) return rc;
        w->conv_w = malloc(sizeof(float) * (size_t)(K * CD));
        if (!w->conv_w) { free(c); return ENG_ERR_NOMEM; }
        for (int64_t ch = 0; ch < CD; ch++)
            for (int64_t k = 0; k < K; k++) {
                const float v = c[ch * K + k];
                w->conv_w[k * CD + ch] = bf16 ? eng_bf16_round(v) : v;
            }
        free(c);
    }
    rc = get_tensor(ld, TN("ssm_conv1d.bias"), CD, 1, ld->id == ARCH_GRANITEHYBRID, &w->conv_b);
    if (rc == ENG_ERR_NOT_FOUND) {  /* optional in granitehybrid, as llama.cpp loads it */
        if (!(w->conv_b = calloc((size_t)CD, sizeof(float)))) return ENG_ERR_NOMEM;
    } else if (rc != ENG_OK) {
        return rc;
    } else if (bf16) {
        for (int64_t i = 0; i < CD; i++) w->conv_b[i] = eng_bf16_round(w->conv_b[i]);
    }
    if ((rc = get_plain(ld, TN("ssm_dt.bias"), NH, 1, bf16, &w->dt_bias)) != ENG_OK) return rc;
    if ((rc = get_plain(ld, TN("ssm_a"), 1, NH, bf16, &w->A)) != ENG_OK) return rc;
    if ((rc = get_plain(ld, TN("ssm_d"), 1, NH, bf16, &w->D)) != ENG_OK) return rc;
    if ((rc = get_plain(ld, TN("ssm_norm.weight"), NI / NG, NG, bf16, &w->norm_w)) != ENG_OK) return rc;
    {
        const char *n1[1] = {TN("ssm_out.weight")};
        const int64_t o1[1] = {D};
        rc = get_fused(ld, m, n1, o1, 1, NI, &w->out_proj);
    }
#undef TN
    return rc;
}

/* The kind of layer il for this architecture. */
static eng_layer_kind layer_kind_of(loader *ld, int32_t il) {
    switch (ld->id) {
    case ARCH_SWA: return ld->is_swa[il] ? ENG_LAYER_ATTN_SWA : ENG_LAYER_ATTN;
    case ARCH_MAMBA2: return ENG_LAYER_RECURRENT;
    case ARCH_GRANITEHYBRID: return ld->is_rec[il] ? ENG_LAYER_RECURRENT : ENG_LAYER_ATTN;
    default: return ENG_LAYER_ATTN;
    }
}

static int load_layer(loader *ld, eng_model *m, int32_t il) {
    eng_layer *L = &m->layers[il];
    L->kind = layer_kind_of(ld, il);
    L->has_ffn = ld->id != ARCH_MAMBA2;
    int rc;
    switch (L->kind) {
    case ENG_LAYER_ATTN:
    case ENG_LAYER_ATTN_SWA: rc = load_attn(ld, m, il, L); break;
    case ENG_LAYER_RECURRENT: rc = load_ssm(ld, m, il, L); break;
    default:
        eng_errf(ld->err, ld->errlen, "%s: layer %d: kind %d not supported", ld->path, il, (int)L->kind);
        return ENG_ERR_UNSUPPORTED;
    }
    if (rc != ENG_OK) return rc;
    return L->has_ffn ? load_ffn(ld, m, il, L) : ENG_OK;
}

static void free_layer(eng_layer *L) {
    free(L->attn.attn_norm);
    eng_kmat_free(&L->attn.wqkv);
    eng_kmat_free(&L->attn.wo);
    eng_ssm_weights_free(&L->ssm);
    free(L->ffn.ffn_norm);
    eng_kmat_free(&L->ffn.w_gate_up);
    eng_kmat_free(&L->ffn.w_down);
}

// ----------------------------------------------------------------------------
// Hyperparameters and metadata

/* "{arch}.suffix" as a per-layer array of n integers (an array of n
 * numbers, or a scalar repeated), as llama.cpp's get_key_or_arr reads it.
 * ENG_ERR_NOT_FOUND when absent. */
static int hp_int_or_arr(loader *ld, const char *suffix, int32_t n, int64_t lo, int64_t hi, int32_t *out) {
    char key[128];
    snprintf(key, sizeof key, "%s.%s", ld->arch, suffix);
    const int64_t i = eng_gguf_find_key(ld->g, key);
    if (i < 0) return ENG_ERR_NOT_FOUND;
    if (eng_gguf_kv_type(ld->g, i) != ENG_GGUF_TYPE_ARRAY) {
        int32_t v;
        int rc = hp_int(ld, suffix, -1, lo, hi, &v);
        if (rc != ENG_OK) return rc;
        for (int32_t il = 0; il < n; il++) out[il] = v;
        return ENG_OK;
    }
    const uint32_t t = eng_gguf_arr_type(ld->g, i);
    if (t == ENG_GGUF_TYPE_STRING || t == ENG_GGUF_TYPE_ARRAY || t == ENG_GGUF_TYPE_FLOAT32 ||
        t == ENG_GGUF_TYPE_FLOAT64 || eng_gguf_arr_n(ld->g, i) != (uint64_t)n) {
        eng_errf(ld->err, ld->errlen, "%s: metadata: %s: expected an integer or an array of %d integers", ld->path,
                 key, n);
        return ENG_ERR_FORMAT;
    }
    for (int32_t il = 0; il < n; il++) {
        const double v = eng_gguf_get_arr_num(ld->g, i, (uint64_t)il);
        if (v < (double)lo || v > (double)hi) {
            eng_errf(ld->err, ld->errlen, "%s: metadata: %s[%d]: %g out of range [%lld, %lld]", ld->path, key, il, v,
                     (long long)lo, (long long)hi);
            return ENG_ERR_FORMAT;
        }
        out[il] = (int32_t)v;
    }
    return ENG_OK;
}

/* A granite scaling key must be absent or neutral (`neutral` or 0, which
 * llama.cpp also treats as "no scaling"). */
static int hp_neutral(loader *ld, const char *suffix, double neutral) {
    char key[128];
    snprintf(key, sizeof key, "%s.%s", ld->arch, suffix);
    double v;
    int rc = eng_gguf_get_float(ld->g, key, &v);
    if (rc == ENG_ERR_NOT_FOUND) return ENG_OK;
    if (rc != ENG_OK) {
        eng_errf(ld->err, ld->errlen, "%s: metadata: %s: expected a float", ld->path, key);
        return ENG_ERR_FORMAT;
    }
    if (v != 0.0 && (float)v != (float)neutral) {
        eng_errf(ld->err, ld->errlen, "%s: metadata: %s: %g: granite scaling is not supported", ld->path, key, v);
        return ENG_ERR_UNSUPPORTED;
    }
    return ENG_OK;
}

/* Attention hyperparameters: heads (granitehybrid: head_count_kv per layer,
 * 0 marking a Mamba-2 layer), FFN, RoPE. */
static int load_attn_hparams(loader *ld, eng_model *m) {
    eng_model_info *in = &m->info;
    int rc;
    if ((rc = hp_int(ld, "feed_forward_length", -1, 1, 1 << 22, &in->n_ff)) != ENG_OK) return rc;
    if ((rc = hp_int(ld, "attention.head_count", -1, 1, 4096, &in->n_head)) != ENG_OK) return rc;
    if (ld->id == ARCH_GRANITEHYBRID) {
        int32_t *hkv = malloc(sizeof(int32_t) * (size_t)in->n_layer);
        if (!hkv) return ENG_ERR_NOMEM;
        rc = hp_int_or_arr(ld, "attention.head_count_kv", in->n_layer, 0, in->n_head, hkv);
        if (rc == ENG_ERR_NOT_FOUND) {
            eng_errf(ld->err, ld->errlen, "%s: metadata: %s.attention.head_count_kv: missing", ld->path, ld->arch);
            rc = ENG_ERR_FORMAT;
        }
        in->n_head_kv = 0;
        for (int32_t il = 0; rc == ENG_OK && il < in->n_layer; il++) {
            ld->is_rec[il] = hkv[il] == 0;
            if (hkv[il] == 0) continue;
            if (in->n_head_kv != 0 && hkv[il] != in->n_head_kv) {
                eng_errf(ld->err, ld->errlen, "%s: metadata: %s.attention.head_count_kv[%d]: %d, other layers %d: "
                         "per-layer KV head counts are not supported", ld->path, ld->arch, il, hkv[il], in->n_head_kv);
                rc = ENG_ERR_UNSUPPORTED;
            }
            in->n_head_kv = hkv[il];
        }
        free(hkv);
        if (rc != ENG_OK) return rc;
        if (in->n_head_kv == 0) in->n_head_kv = in->n_head;  /* no attention layer: unused */
    } else if ((rc = hp_int(ld, "attention.head_count_kv", in->n_head, 1, in->n_head, &in->n_head_kv)) != ENG_OK) {
        return rc;
    }
    if (in->n_embd % in->n_head != 0) {
        eng_errf(ld->err, ld->errlen, "%s: metadata: %s.attention.head_count: %d does not divide embedding_length %d",
                 ld->path, ld->arch, in->n_head, in->n_embd);
        return ENG_ERR_FORMAT;
    }
    if (in->n_head % in->n_head_kv != 0) {
        eng_errf(ld->err, ld->errlen, "%s: metadata: %s.attention.head_count_kv: %d does not divide head_count %d",
                 ld->path, ld->arch, in->n_head_kv, in->n_head);
        return ENG_ERR_FORMAT;
    }
    in->head_dim = in->n_embd / in->n_head;
    int32_t key_len;
    if ((rc = hp_int(ld, "attention.key_length", in->head_dim, 1, 1 << 20, &key_len)) != ENG_OK) return rc;
    if (key_len != in->head_dim) {
        eng_errf(ld->err, ld->errlen, "%s: metadata: %s.attention.key_length: %d != embedding_length/head_count %d",
                 ld->path, ld->arch, key_len, in->head_dim);
        return ENG_ERR_UNSUPPORTED;
    }
    if ((rc = hp_int(ld, "rope.dimension_count", in->head_dim, 2, in->head_dim, &in->n_rot)) != ENG_OK) return rc;
    if (in->n_rot % 2 != 0) {
        eng_errf(ld->err, ld->errlen, "%s: metadata: %s.rope.dimension_count: %d is odd", ld->path, ld->arch, in->n_rot);
        return ENG_ERR_FORMAT;
    }
    if ((rc = hp_float(ld, "rope.freq_base", 10000.0, &in->rope_freq_base)) != ENG_OK) return rc;
    if (ld->id == ARCH_GRANITEHYBRID) {
        char key[128];
        bool rope = true;
        snprintf(key, sizeof key, "%s.rope.scaling.finetuned", ld->arch);
        if (eng_gguf_find_key(ld->g, key) >= 0 && eng_gguf_get_bool(ld->g, key, &rope) != ENG_OK) {
            eng_errf(ld->err, ld->errlen, "%s: metadata: %s: expected a bool", ld->path, key);
            return ENG_ERR_FORMAT;
        }
        if (!rope) {
            eng_errf(ld->err, ld->errlen, "%s: metadata: %s: false (attention without RoPE) is not supported",
                     ld->path, key);
            return ENG_ERR_UNSUPPORTED;
        }
        if ((rc = hp_neutral(ld, "logit_scale", 1.0)) != ENG_OK) return rc;
        if ((rc = hp_neutral(ld, "residual_scale", 1.0)) != ENG_OK) return rc;
        if ((rc = hp_neutral(ld, "embedding_scale", 1.0)) != ENG_OK) return rc;
        if ((rc = hp_neutral(ld, "attention.scale", 1.0 / sqrt((double)in->head_dim))) != ENG_OK) return rc;
        int32_t n_expert;
        if ((rc = hp_int(ld, "expert_count", 0, 0, INT32_MAX, &n_expert)) != ENG_OK) return rc;
        if (n_expert > 0) {
            eng_errf(ld->err, ld->errlen, "%s: metadata: %s.expert_count: %d: mixture of experts is not supported",
                     ld->path, ld->arch, n_expert);
            return ENG_ERR_UNSUPPORTED;
        }
    }
    return ENG_OK;
}

/* kvreplay-swa: the window and which layers slide: sliding_window_pattern
 * as llama.cpp's set_swa_pattern(P) (layer il slides iff P == 0 or
 * il % P < P - 1; absent: P = 0, every layer) or a bool array [L]. */
static int load_swa_hparams(loader *ld, eng_model *m) {
    eng_model_info *in = &m->info;
    int rc;
    if ((rc = hp_int(ld, "attention.sliding_window", -1, 1, INT32_MAX, &in->n_swa)) != ENG_OK) return rc;
    char key[128];
    snprintf(key, sizeof key, "%s.attention.sliding_window_pattern", ld->arch);
    const int64_t i = eng_gguf_find_key(ld->g, key);
    if (i >= 0 && eng_gguf_kv_type(ld->g, i) == ENG_GGUF_TYPE_ARRAY) {
        if (eng_gguf_arr_type(ld->g, i) != ENG_GGUF_TYPE_BOOL || eng_gguf_arr_n(ld->g, i) != (uint64_t)in->n_layer) {
            eng_errf(ld->err, ld->errlen, "%s: metadata: %s: expected an integer or an array of %d bools", ld->path,
                     key, in->n_layer);
            return ENG_ERR_FORMAT;
        }
        for (int32_t il = 0; il < in->n_layer; il++) ld->is_swa[il] = eng_gguf_get_arr_num(ld->g, i, (uint64_t)il) != 0;
        return ENG_OK;
    }
    int32_t P;
    if ((rc = hp_int(ld, "attention.sliding_window_pattern", 0, 0, INT32_MAX, &P)) != ENG_OK) return rc;
    for (int32_t il = 0; il < in->n_layer; il++) ld->is_swa[il] = P == 0 || il % P < P - 1;
    return ENG_OK;
}

/* Mamba-2: llama.cpp's ssm.* keys. */
static int load_ssm_hparams(loader *ld, eng_model *m) {
    eng_model_info *in = &m->info;
    int32_t d_conv, d_inner, d_state, n_head, n_group;
    int rc;
    if ((rc = hp_int(ld, "ssm.conv_kernel", -1, 1, 1024, &d_conv)) != ENG_OK) return rc;
    if ((rc = hp_int(ld, "ssm.inner_size", -1, 1, 1 << 22, &d_inner)) != ENG_OK) return rc;
    if ((rc = hp_int(ld, "ssm.state_size", -1, 1, 1 << 16, &d_state)) != ENG_OK) return rc;
    if ((rc = hp_int(ld, "ssm.time_step_rank", -1, 1, 1 << 16, &n_head)) != ENG_OK) return rc;
    if ((rc = hp_int(ld, "ssm.group_count", -1, 1, 1 << 16, &n_group)) != ENG_OK) return rc;
    char msg[192];
    if ((rc = eng_ssm_hparams_init(&m->ssm_hp, in->n_embd, d_inner, d_state, n_head, n_group, d_conv, in->rms_eps, msg,
                                   sizeof msg)) != ENG_OK) {
        eng_errf(ld->err, ld->errlen, "%s: metadata: %s.%s", ld->path, ld->arch, msg);
        return rc;
    }
    in->ssm_d_inner = d_inner;
    in->ssm_d_state = d_state;
    in->ssm_n_head = n_head;
    in->ssm_head_dim = m->ssm_hp.head_dim;
    in->ssm_n_group = n_group;
    in->ssm_d_conv = d_conv;
    return ENG_OK;
}

static int load_hparams(loader *ld, eng_model *m) {
    eng_model_info *in = &m->info;
    int rc;
    if ((rc = hp_int(ld, "block_count", -1, 1, 4096, &in->n_layer)) != ENG_OK) return rc;
    if ((rc = hp_int(ld, "embedding_length", -1, 1, 1 << 20, &in->n_embd)) != ENG_OK) return rc;
    if ((rc = hp_int(ld, "context_length", 2048, 1, INT32_MAX, &in->n_ctx_train)) != ENG_OK) return rc;
    if ((rc = hp_float(ld, "attention.layer_norm_rms_epsilon", 1e-5, &in->rms_eps)) != ENG_OK) return rc;
    ld->is_swa = calloc((size_t)in->n_layer, sizeof(bool));
    ld->is_rec = calloc((size_t)in->n_layer, sizeof(bool));
    if (!ld->is_swa || !ld->is_rec) return ENG_ERR_NOMEM;
    if (ld->id != ARCH_MAMBA2 && (rc = load_attn_hparams(ld, m)) != ENG_OK) return rc;
    if (ld->id == ARCH_SWA && (rc = load_swa_hparams(ld, m)) != ENG_OK) return rc;
    if ((ld->id == ARCH_MAMBA2 || ld->id == ARCH_GRANITEHYBRID) && (rc = load_ssm_hparams(ld, m)) != ENG_OK) return rc;
    return ENG_OK;
}

static void copy_str(char *dst, size_t cap, const char *s, size_t len) {
    if (len >= cap) len = cap - 1;
    memcpy(dst, s, len);
    dst[len] = '\0';
}

static void detect_chat_template(const eng_gguf *g, char out[16]) {
    const char *s;
    size_t len;
    out[0] = '\0';
    if (eng_gguf_get_str(g, "tokenizer.chat_template", &s, &len) != ENG_OK) return;
    if (memmem(s, len, "<|im_start|>", 12)) snprintf(out, 16, "chatml");
    else if (memmem(s, len, "<|start_header_id|>", 19)) snprintf(out, 16, "llama3");
    else if (memmem(s, len, "[INST]", 6)) snprintf(out, 16, "llama2");
}

static uint64_t fingerprint_of(const uint8_t sha[32], const eng_numerics *num) {
    uint8_t b[44];
    memcpy(b, sha, 32);
    uint32_t kv = (uint32_t)num->kernel, pv = (uint32_t)num->precision, tv = (uint32_t)num->n_threads;
    for (int i = 0; i < 4; i++) {
        b[32 + i] = (uint8_t)(kv >> (8 * i));
        b[36 + i] = (uint8_t)(pv >> (8 * i));
        b[40 + i] = (uint8_t)(tv >> (8 * i));
    }
    if (num->kernel != ENG_KERNEL_BLAS) return XXH3_64bits(b, 40);
    /* blas: OpenBLAS's per-row results depend on how it splits the sgemm
     * (thread count) and on its build and core kernel (config string) */
    return XXH3_64bits_withSeed(b, sizeof b, XXH3_64bits(eng_blas_info(), strlen(eng_blas_info())));
}

// ----------------------------------------------------------------------------
// Load and free

int eng_model_load(const char *path, const eng_numerics *num, eng_model **out, char *err, size_t errlen) {
    *out = NULL;
    if (!path || !num || num->n_threads < 1 || num->n_threads > 1024 ||
        (num->kernel != ENG_KERNEL_BLAS && num->kernel != ENG_KERNEL_REF) ||
        (num->precision != ENG_PRECISION_FP32 && num->precision != ENG_PRECISION_BF16)) {
        eng_errf(err, errlen, "%s: invalid numerics (kernel, precision or n_threads)", path ? path : "(null)");
        return ENG_ERR_ARG;
    }
    loader ld = {.path = path, .err = err, .errlen = errlen};
    eng_model *m = calloc(1, sizeof *m);
    if (!m) return ENG_ERR_NOMEM;
    m->num = *num;
    m->kctx.kernel = num->kernel;
    m->kctx.bf16 = num->precision == ENG_PRECISION_BF16;
    m->kctx.n_threads = num->n_threads;
    if (num->n_threads > 1 && !(m->kctx.pool = eng_pool_new(num->n_threads))) {
        eng_errf(err, errlen, "%s: cannot start %d threads", path, num->n_threads);
        free(m);
        return ENG_ERR_NOMEM;
    }
    openblas_set_num_threads(num->n_threads);

    int rc = eng_gguf_open(path, &ld.g, err, errlen);
    if (rc != ENG_OK) goto fail;
    eng_model_info *in = &m->info;

    const char *s;
    size_t len;
    if (eng_gguf_get_str(ld.g, "general.architecture", &s, &len) != ENG_OK) {
        eng_errf(err, errlen, "%s: metadata: general.architecture: missing or not a string", path);
        rc = ENG_ERR_FORMAT;
        goto fail;
    }
    copy_str(in->arch, sizeof in->arch, s, len);
    if (!strcmp(in->arch, "llama")) ld.id = ARCH_LLAMA;
    else if (!strcmp(in->arch, "kvreplay-swa")) ld.id = ARCH_SWA;
    else if (!strcmp(in->arch, "mamba2")) ld.id = ARCH_MAMBA2;
    else if (!strcmp(in->arch, "granitehybrid")) ld.id = ARCH_GRANITEHYBRID;
    else {
        eng_errf(err, errlen, "%s: metadata: general.architecture: '%s' not supported "
                 "(llama, kvreplay-swa, mamba2, granitehybrid are)", path, in->arch);
        rc = ENG_ERR_UNSUPPORTED;
        goto fail;
    }
    ld.arch = in->arch;
    if (eng_gguf_get_str(ld.g, "general.name", &s, &len) == ENG_OK && len > 0) {
        copy_str(in->name, sizeof in->name, s, len);
    } else {
        const char *base = strrchr(path, '/');
        base = base ? base + 1 : path;
        copy_str(in->name, sizeof in->name, base, strlen(base));
    }
    if ((rc = load_hparams(&ld, m)) != ENG_OK) goto fail;

    size_t nbytes;
    const void *bytes = eng_gguf_bytes(ld.g, &nbytes);
    eng_sha256(bytes, nbytes, m->sha256);
    eng_sha256_hex(m->sha256, in->sha256);
    m->fingerprint = fingerprint_of(m->sha256, num);
    detect_chat_template(ld.g, in->chat_template);

    const eng_gguf_tensor *te = eng_gguf_find_tensor(ld.g, "token_embd.weight");
    if (!te) {
        eng_errf(err, errlen, "%s: tensor token_embd.weight: missing", path);
        rc = ENG_ERR_FORMAT;
        goto fail;
    }
    if (te->ne[1] < 1 || te->ne[1] > INT32_MAX) {
        eng_errf(err, errlen, "%s: tensor token_embd.weight: vocabulary size %lld out of range", path,
                 (long long)te->ne[1]);
        rc = ENG_ERR_FORMAT;
        goto fail;
    }
    in->n_vocab = (int32_t)te->ne[1];
    const int64_t D = in->n_embd, V = in->n_vocab;
    if ((rc = get_plain(&ld, "token_embd.weight", D, V, m->kctx.bf16, &m->tok_embd)) != ENG_OK) goto fail;
    if ((rc = get_plain(&ld, "output_norm.weight", D, 1, m->kctx.bf16, &m->output_norm)) != ENG_OK) goto fail;
    float *ow = NULL;
    rc = get_tensor(&ld, "output.weight", D, V, true, &ow);
    if (rc == ENG_OK) {
        rc = eng_kmat_init_for(&m->output, ow, (int32_t)V, (int32_t)D, num->kernel, m->kctx.bf16);
        free(ow);
    } else if (rc == ENG_ERR_NOT_FOUND) {
        m->output_tied = true;
        if (num->kernel == ENG_KERNEL_BLAS) {
            eng_kmat_view(&m->output, m->tok_embd, (int32_t)V, (int32_t)D);
            rc = ENG_OK;
        } else {
            rc = eng_kmat_init_for(&m->output, m->tok_embd, (int32_t)V, (int32_t)D, num->kernel, false);
        }
    }
    if (rc != ENG_OK) goto fail;

    m->layers = calloc((size_t)in->n_layer, sizeof *m->layers);
    if (!m->layers) { rc = ENG_ERR_NOMEM; goto fail; }
    for (int32_t il = 0; il < in->n_layer; il++) {
        if ((rc = load_layer(&ld, m, il)) != ENG_OK) goto fail;
        switch (m->layers[il].kind) {
        case ENG_LAYER_ATTN: in->n_layer_attn++; break;
        case ENG_LAYER_ATTN_SWA: in->n_layer_swa++; break;
        case ENG_LAYER_RECURRENT: in->n_layer_rec++; break;
        }
    }

    /* Parameters: every weight element of the file's model (tied head counted once). */
    int64_t np = V * D + D;
    if (!m->output_tied) np += V * D;
    for (int32_t il = 0; il < in->n_layer; il++) {
        const eng_layer *L = &m->layers[il];
        const eng_ssm_hparams *hp = &m->ssm_hp;
        const int64_t GE = (int64_t)in->n_head_kv * in->head_dim;
        switch (L->kind) {
        case ENG_LAYER_ATTN:
        case ENG_LAYER_ATTN_SWA:
            np += D + (int64_t)L->attn.wqkv.n_out * L->attn.wqkv.n_in + (int64_t)L->attn.wo.n_out * L->attn.wo.n_in;
            if (L->kind == ENG_LAYER_ATTN) in->kv_bytes_per_token += 2 * (int64_t)sizeof(float) * GE;
            else in->swa_bytes_per_token += 2 * (int64_t)sizeof(float) * GE;
            break;
        case ENG_LAYER_RECURRENT:
            /* norm, in_proj, conv weight and bias, dt bias, A, D, grouped norm, out_proj */
            np += D + (int64_t)hp->d_in_proj * D + (int64_t)hp->d_conv * hp->conv_dim + hp->conv_dim +
                  3 * (int64_t)hp->n_head + hp->d_inner + (int64_t)hp->d_inner * D;
            in->rec_state_bytes += (int64_t)eng_ssm_state_bytes(hp);
            break;
        default: ENG_ASSERT(0);
        }
        if (L->has_ffn)
            np += D + (int64_t)L->ffn.w_gate_up.n_out * L->ffn.w_gate_up.n_in +
                  (int64_t)L->ffn.w_down.n_out * L->ffn.w_down.n_in;
    }
    in->n_params = np;

    if (eng_gguf_find_key(ld.g, "tokenizer.ggml.model") >= 0) {
        int trc = eng_tokenizer_load(ld.g, &m->tok, err, errlen);
        if (trc == ENG_ERR_NOT_FOUND || trc == ENG_ERR_UNSUPPORTED) {
            m->tok = NULL;  /* no usable vocabulary: ids only */
            if (err && errlen) err[0] = '\0';
        } else if (trc != ENG_OK) {
            rc = trc;
            goto fail;
        }
    }
    eng_gguf_close(ld.g);
    free(ld.is_swa);
    free(ld.is_rec);
    *out = m;
    return ENG_OK;

fail:
    eng_gguf_close(ld.g);
    free(ld.is_swa);
    free(ld.is_rec);
    eng_model_free(m);
    return rc;
}

void eng_model_free(eng_model *m) {
    if (!m) return;
    if (m->layers)
        for (int32_t il = 0; il < m->info.n_layer; il++) free_layer(&m->layers[il]);
    free(m->layers);
    eng_kmat_free(&m->output);
    free(m->tok_embd);
    free(m->output_norm);
    eng_tokenizer_free(m->tok);
    eng_pool_free(m->kctx.pool);
    free(m);
}

// ----------------------------------------------------------------------------
// Accessors

const eng_model_info *eng_model_get_info(const eng_model *m) { return &m->info; }
const eng_numerics *eng_model_get_numerics(const eng_model *m) { return &m->num; }
const eng_tokenizer *eng_model_tokenizer(const eng_model *m) { return m->tok; }
uint64_t eng_model_fingerprint(const eng_model *m) { return m->fingerprint; }

eng_layer_kind eng_model_layer_kind(const eng_model *m, int32_t il) {
    ENG_ASSERT(il >= 0 && il < m->info.n_layer);
    return m->layers[il].kind;
}

// ----------------------------------------------------------------------------
// The FLOPs cost model (docs/engine.md)

/* Matmul FLOPs of one token through one layer (2 per multiply-add); for a
 * Mamba-2 layer also its conv and scan (eng_ssm_token_flops). */
static double layer_token_flops(const eng_model *m, int32_t il) {
    const eng_layer *L = &m->layers[il];
    const double D = m->info.n_embd, F = m->info.n_ff;
    const double GE = (double)m->info.n_head_kv * m->info.head_dim;
    const double HE = (double)m->info.n_head * m->info.head_dim;
    double f = L->has_ffn ? 2.0 * 3.0 * D * F : 0.0;  /* gate, up, down */
    switch (L->kind) {
    case ENG_LAYER_ATTN:
    case ENG_LAYER_ATTN_SWA: f += 2.0 * D * (HE + 2.0 * GE) + 2.0 * HE * D; break;
    case ENG_LAYER_RECURRENT: f += eng_ssm_token_flops(&m->ssm_hp); break;
    default: ENG_ASSERT(0);
    }
    return f;
}

/* Attention FLOPs of queries at positions [p0, p1) of one layer: QK^T and PV,
 * 2*E FLOPs each per (query head, attended key); query p attends p + 1 keys,
 * min(p + 1, W) with a sliding window; a recurrent layer has none. */
static double layer_attn_flops(const eng_model *m, int32_t il, int64_t p0, int64_t p1) {
    const double EH = (double)m->info.head_dim * m->info.n_head;
    switch (m->layers[il].kind) {
    case ENG_LAYER_ATTN: {
        /* sum over p in [p0, p1) of (p + 1) */
        const double keys = (double)(p1 - p0) * (double)(p0 + p1 + 1) / 2.0;
        return 2.0 * 2.0 * EH * keys;
    }
    case ENG_LAYER_ATTN_SWA: return 2.0 * 2.0 * EH * eng_swa_keys(m->info.n_swa, p0, p1);
    case ENG_LAYER_RECURRENT: return 0.0;
    default: ENG_ASSERT(0);
    }
    return 0.0;
}

double eng_model_prefill_flops_params(const eng_model *m, int32_t n_past, int32_t n, const eng_prefill_params *p) {
    if (n <= 0) return 0.0;
    double f = 0.0;
    for (int32_t il = 0; il < m->info.n_layer; il++)
        f += (double)n * layer_token_flops(m, il) + layer_attn_flops(m, il, n_past, (int64_t)n_past + n);
    /* The output head runs on every row of each chunk that needs logits:
     * every chunk with all_logits (n rows), else only the last chunk. */
    int64_t rows;
    if (p->all_logits) {
        rows = n;
    } else {
        const int64_t end = (int64_t)n_past + n;
        int64_t start;
        if (p->align == ENG_ALIGN_CHUNK) {
            start = (end - 1) / p->chunk * p->chunk;
            if (start < n_past) start = n_past;
        } else {
            start = n_past + (int64_t)(n - 1) / p->ubatch * p->ubatch;
        }
        rows = end - start;
    }
    f += (double)rows * 2.0 * m->info.n_embd * m->info.n_vocab;
    return f;
}

double eng_model_prefill_flops(const eng_model *m, int32_t n_past, int32_t n) {
    eng_prefill_params p = eng_prefill_params_default();
    return eng_model_prefill_flops_params(m, n_past, n, &p);
}
