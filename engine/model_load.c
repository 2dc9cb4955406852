/*
 * engine/model_load.c: model loading (GGUF -> weights in the kernel's layout
 * and the compute precision), model info, fingerprint, and the FLOPs cost
 * model. The numerics helpers of model.h are model.c; the loading helpers
 * the layer kinds use, layers/load.c.
 *
 * Invariants of a loaded eng_model: every weight is in its final precision
 * (bf16 values when precision is bf16) and in the layout of the chosen
 * kernel (kernels.h); info is complete; fingerprint = XXH3_64 of the 32-byte
 * SHA-256 of the file, then the kernel and the precision as two
 * little-endian uint32 (40 bytes); for blas, whose results change with the
 * thread count (tests/test_engine.c), also the thread count
 * (a third uint32) and OpenBLAS's config string (seed of the hash). ref's
 * results do not depend on the thread count, so it is left out there. A
 * model is immutable after load and may be shared by sequences.
 *
 * Architectures come from the layer kinds (engine/layers/registry.c): the
 * architecture's hparams function picks each layer's kind and flags, this
 * file loads what every architecture has (embedding, output norm, head) and
 * asks each layer's kind for the rest. Tensor types f32, f16, bf16, q8_0
 * (dequantised at load).
 */
#include "internal.h"

#include <cblas.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "sha256.h"
#include "status.h"

// ----------------------------------------------------------------------------
// Metadata

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

/* The blas split with more than one thread (kernels.h, eng_k_matmul_fused
 * and eng_k_attention); change the string when the split changes. */
#define BLAS_SPLIT_SCHEME                                                                                  \
    "blas: column units of >= 64 (x16), 4 per thread; attention KV head x query block; weights as W [N, K] " \
    "(rows); v2"
/* The blas routine by shape, at every thread count (kernels.c,
 * blas_product); change the string when the choice changes. */
#define BLAS_SHAPE_SCHEME "blas: a product of one row is one sgemv per column unit, one unit per thread; v1"
/* The blas attention's form, at every thread count (kernels.c,
 * blas_attn_items); change the string when it changes. */
#define BLAS_ATTN_SCHEME "blas: attention online over key blocks of kb(rows) positions, one sgemm pair per block; v1"

/* The ref attention's operations (kernels_ref_attn.c, attn_super: the
 * softmax online over key blocks of absolute positions), hashed into ref's
 * fingerprint so that checkpoints of other operations miss; change the
 * string when the ref kernel's operations change. */
#define REF_SCHEME "ref: attention softmax online over blocks of 256 absolute positions; v1"

static uint64_t fingerprint_of(const uint8_t sha[32], const eng_numerics *num) {
    uint8_t b[44];
    memcpy(b, sha, 32);
    uint32_t kv = (uint32_t)num->kernel, pv = (uint32_t)num->precision, tv = (uint32_t)num->n_threads;
    for (int i = 0; i < 4; i++) {
        b[32 + i] = (uint8_t)(kv >> (8 * i));
        b[36 + i] = (uint8_t)(pv >> (8 * i));
        b[40 + i] = (uint8_t)(tv >> (8 * i));
    }
    if (num->kernel != ENG_KERNEL_BLAS)  /* ref: its scheme hashed in, so other schemes' checkpoints miss */
        return XXH3_64bits_withSeed(b, 40, XXH3_64bits(REF_SCHEME, strlen(REF_SCHEME)));
    /* blas: OpenBLAS's per-row results depend on how the product is split
     * (thread count) and on its build and core kernel (config string). With
     * more than one thread the split is the engine's (column units on the
     * pool, one single-threaded sgemm each: kernels.h), not OpenBLAS's own:
     * that scheme is hashed in, so checkpoints of another split miss instead
     * of mixing; so are the choice of routine by shape (one row: sgemv) and
     * the attention's form (online over key blocks). */
    uint64_t seed = XXH3_64bits(eng_blas_info(), strlen(eng_blas_info()));
    if (num->n_threads > 1) seed = XXH3_64bits_withSeed(BLAS_SPLIT_SCHEME, strlen(BLAS_SPLIT_SCHEME), seed);
    seed = XXH3_64bits_withSeed(BLAS_SHAPE_SCHEME, strlen(BLAS_SHAPE_SCHEME), seed);
    seed = XXH3_64bits_withSeed(BLAS_ATTN_SCHEME, strlen(BLAS_ATTN_SCHEME), seed);
    return XXH3_64bits_withSeed(b, sizeof b, seed);
}

/* "llama, kvreplay-swa, ..." : every registered architecture. */
static void arch_list(char *out, size_t cap) {
    size_t n = 0;
    out[0] = '\0';
    for (int32_t i = 0; eng_layer_kinds[i]; i++)
        for (const eng_arch *const *a = eng_layer_kinds[i]->archs; a && *a; a++) {
            const int w = snprintf(out + n, cap - n, "%s%s", n ? ", " : "", (*a)->name);
            if (w < 0 || (size_t)w >= cap - n) return;
            n += (size_t)w;
        }
}

// ----------------------------------------------------------------------------
// The model-level tensors: embedding (and its norm), output norm, head

static int load_embd_and_head(eng_loader *ld, eng_model *m) {
    eng_model_info *in = &m->info;
    const eng_gguf_tensor *te = eng_gguf_find_tensor(ld->g, "token_embd.weight");
    if (!te) {
        eng_errf(ld->err, ld->errlen, "%s: tensor token_embd.weight: missing", ld->path);
        return ENG_ERR_FORMAT;
    }
    if (te->ne[1] < 1 || te->ne[1] > INT32_MAX) {
        eng_errf(ld->err, ld->errlen, "%s: tensor token_embd.weight: vocabulary size %lld out of range", ld->path,
                 (long long)te->ne[1]);
        return ENG_ERR_FORMAT;
    }
    in->n_vocab = (int32_t)te->ne[1];
    const int64_t D = in->n_embd, V = in->n_vocab;
    int rc;
    if ((rc = eng_ld_plain(ld, m, "token_embd.weight", D, V, &m->tok_embd)) != ENG_OK) return rc;
    if (m->embd_norm) {
        if ((rc = eng_ld_plain(ld, m, "token_embd_norm.weight", D, 1, &m->embd_norm_w)) != ENG_OK) return rc;
        if (m->norm_bias && (rc = eng_ld_plain(ld, m, "token_embd_norm.bias", D, 1, &m->embd_norm_b)) != ENG_OK)
            return rc;
    }
    if ((rc = eng_ld_plain(ld, m, "output_norm.weight", D, 1, &m->output_norm)) != ENG_OK) return rc;
    if (m->norm_bias && (rc = eng_ld_plain(ld, m, "output_norm.bias", D, 1, &m->output_norm_b)) != ENG_OK) return rc;
    if (m->tie_output && eng_gguf_find_tensor(ld->g, "output.weight")) {
        eng_errf(ld->err, ld->errlen, "%s: tensor output.weight: %s ties its head to token_embd.weight "
                 "(llama.cpp refuses the extra tensor)", ld->path, ld->arch);
        return ENG_ERR_UNSUPPORTED;
    }
    float *ow = NULL;
    rc = m->tie_output ? ENG_ERR_NOT_FOUND : eng_ld_tensor(ld, "output.weight", D, V, true, &ow);
    if (rc == ENG_OK) {
        rc = eng_kmat_init_for(&m->output, ow, (int32_t)V, (int32_t)D, m->num.kernel, m->num.n_threads,
                               m->kctx.bf16);
        free(ow);
    } else if (rc == ENG_ERR_NOT_FOUND) {
        m->output_tied = true;
        if (m->num.kernel == ENG_KERNEL_BLAS) {
            eng_kmat_view(&m->output, m->tok_embd, (int32_t)V, (int32_t)D);
            rc = ENG_OK;
        } else {
            rc = eng_kmat_init_for(&m->output, m->tok_embd, (int32_t)V, (int32_t)D, m->num.kernel,
                                   m->num.n_threads, false);
        }
    }
    return rc;
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
    eng_loader ld = {.path = path, .err = err, .errlen = errlen};
    eng_model *m = calloc(1, sizeof *m);
    if (!m) return ENG_ERR_NOMEM;
    m->num = *num;
    m->kctx.kernel = num->kernel;
    m->kctx.bf16 = num->precision == ENG_PRECISION_BF16;
    m->kctx.n_threads = num->n_threads;
    m->kctx.path = eng_kpath_best();  /* ref's code path: the same bits on every path */
    m->logit_scale = 1.0f;
    if (num->n_threads > 1 && !(m->kctx.pool = eng_pool_new(num->n_threads))) {
        eng_errf(err, errlen, "%s: cannot start %d threads", path, num->n_threads);
        free(m);
        return ENG_ERR_NOMEM;
    }
    openblas_set_num_threads(1);  /* every sgemm runs on one thread: the engine's pool splits the work */

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
    if (!(m->arch = eng_arch_find(in->arch))) {
        char known[256];
        arch_list(known, sizeof known);
        eng_errf(err, errlen, "%s: metadata: general.architecture: '%s' not supported (%s are)", path, in->arch,
                 known);
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
    if ((rc = eng_ld_int(&ld, "block_count", -1, 1, 4096, &in->n_layer)) != ENG_OK) goto fail;
    if ((rc = eng_ld_int(&ld, "embedding_length", -1, 1, 1 << 20, &in->n_embd)) != ENG_OK) goto fail;
    if ((rc = eng_ld_int(&ld, "context_length", 2048, 1, INT32_MAX, &in->n_ctx_train)) != ENG_OK) goto fail;
    if (!(m->layers = calloc((size_t)in->n_layer, sizeof *m->layers))) { rc = ENG_ERR_NOMEM; goto fail; }
    if ((rc = m->arch->hparams(&ld, m)) != ENG_OK) goto fail;

    size_t nbytes;
    const void *bytes = eng_gguf_bytes(ld.g, &nbytes);
    eng_sha256(bytes, nbytes, m->sha256);
    eng_sha256_hex(m->sha256, in->sha256);
    m->fingerprint = fingerprint_of(m->sha256, num);
    detect_chat_template(ld.g, in->chat_template);

    if ((rc = load_embd_and_head(&ld, m)) != ENG_OK) goto fail;
    const int64_t D = in->n_embd, V = in->n_vocab;
    for (int32_t il = 0; il < in->n_layer; il++) {
        eng_layer *L = &m->layers[il];
        ENG_ASSERT(L->ops);  /* set by the architecture's hparams */
        L->kind_ix = eng_layer_kind_index(L->ops);
        if ((rc = L->ops->load(&ld, m, il, &L->w)) != ENG_OK) goto fail;
        switch (L->ops->kind) {
        case ENG_LAYER_ATTN: in->n_layer_attn++; break;
        case ENG_LAYER_ATTN_SWA: in->n_layer_swa++; break;
        case ENG_LAYER_RECURRENT: in->n_layer_rec++; break;
        }
    }

    /* Parameters: every weight element of the file's model (tied head counted once). */
    int64_t np = V * D + D;
    if (!m->output_tied) np += V * D;
    if (m->output_norm_b) np += D;
    if (m->embd_norm_w) np += D;
    if (m->embd_norm_b) np += D;
    for (int32_t il = 0; il < in->n_layer; il++) np += m->layers[il].ops->n_params(m, il);
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
    *out = m;
    return ENG_OK;

fail:
    eng_gguf_close(ld.g);
    eng_model_free(m);
    return rc;
}

void eng_model_free(eng_model *m) {
    if (!m) return;
    if (m->layers)
        for (int32_t il = 0; il < m->info.n_layer; il++)
            if (m->layers[il].ops) m->layers[il].ops->free(m->layers[il].w);
    free(m->layers);
    eng_kmat_free(&m->output);
    free(m->tok_embd);
    free(m->embd_norm_w);
    free(m->embd_norm_b);
    free(m->output_norm);
    free(m->output_norm_b);
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
const char *eng_model_ref_path(const eng_model *m) { return eng_kpath_name(m->kctx.path); }

eng_layer_kind eng_model_layer_kind(const eng_model *m, int32_t il) {
    ENG_ASSERT(il >= 0 && il < m->info.n_layer);
    return m->layers[il].ops->kind;
}

const char *eng_model_layer_kind_name(const eng_model *m, int32_t il) {
    ENG_ASSERT(il >= 0 && il < m->info.n_layer);
    return m->layers[il].ops->name;
}

// ----------------------------------------------------------------------------
// The FLOPs cost model (docs/engine.md): each layer's kind counts its own

double eng_model_prefill_flops_params(const eng_model *m, int32_t n_past, int32_t n, const eng_prefill_params *p) {
    if (n <= 0) return 0.0;
    double f = 0.0;
    for (int32_t il = 0; il < m->info.n_layer; il++) {
        const eng_layer_ops *ops = m->layers[il].ops;
        f += (double)n * ops->token_flops(m, il) +
             (ops->pos_flops ? ops->pos_flops(m, il, n_past, (int64_t)n_past + n) : 0.0);
    }
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

