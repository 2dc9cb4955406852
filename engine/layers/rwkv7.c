/*
 * engine/layers/rwkv7.c: the RWKV-7 layer kind (ENG_LAYER_RECURRENT), and
 * llama.cpp's `rwkv7` architecture built from it (token_embd_norm after the
 * embedding, RWKV-7 layers, layer-normed head) with its synthetic writer.
 * rwkv7.h states the semantics, the two scans and the state layout.
 *
 * This file is the worked example of docs/engine.md: everything RWKV-7 is
 * here, and the engine reaches it through eng_kind_rwkv7 (one line in
 * registry.c).
 *
 * Determinism: every output element is a fixed sequence of float
 * operations on its inputs. Element-wise work is split across tokens, the
 * scan across heads (eng_k_parallel_rows); the blas scan's products run
 * single-threaded inside each head's work, so no result depends on the
 * thread count. Sums over a row (norms, l2 norm, r.k) accumulate in double
 * over 8 lanes (lane i % 8, ascending i) combined pairwise, as eng_k_rmsnorm.
 */
#include "rwkv7.h"

#include <cblas.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "status.h"
#include "synth_int.h"

#define RWKV7_DECAY_SCALE (-0.606531f)  /* -exp(-0.5): w = exp(-e^-0.5 * sigmoid(.)) */
#define RWKV7_GN_EPS      64e-5f       /* the group norm of the wkv output */
#define RWKV7_L2_EPS      1e-12f       /* kk's l2 norm */

// ----------------------------------------------------------------------------
// Hyperparameters

typedef struct rwkv7_hp {
    int32_t D, S, H, F;
    int32_t rw, ra, rv, rg;  /* LoRA ranks: decay, in-context learning rate, value mix, gate */
} rwkv7_hp;

/* llama.cpp's rwkv7 keys (its converter writes them), checked, into *hp and m->info. */
static int read_hp(eng_loader *ld, eng_model *m, rwkv7_hp *hp) {
    eng_model_info *in = &m->info;
    const int32_t D = in->n_embd;
    int32_t shifts;
    int rc;
    if ((rc = eng_ld_float(ld, "attention.layer_norm_epsilon", -1, &in->norm_eps)) != ENG_OK) return rc;
    if ((rc = eng_ld_int(ld, "wkv.head_size", -1, 1, D, &hp->S)) != ENG_OK) return rc;
    if (D % hp->S != 0) {
        eng_errf(ld->err, ld->errlen, "%s: metadata: %s.wkv.head_size: %d does not divide embedding_length %d",
                 ld->path, ld->arch, hp->S, D);
        return ENG_ERR_FORMAT;
    }
    if ((rc = eng_ld_int(ld, "feed_forward_length", -1, 1, 1 << 22, &hp->F)) != ENG_OK) return rc;
    if ((rc = eng_ld_int(ld, "attention.decay_lora_rank", -1, 1, 1 << 16, &hp->rw)) != ENG_OK) return rc;
    if ((rc = eng_ld_int(ld, "attention.iclr_lora_rank", -1, 1, 1 << 16, &hp->ra)) != ENG_OK) return rc;
    if ((rc = eng_ld_int(ld, "attention.value_residual_mix_lora_rank", -1, 1, 1 << 16, &hp->rv)) != ENG_OK) return rc;
    if ((rc = eng_ld_int(ld, "attention.gate_lora_rank", -1, 1, 1 << 16, &hp->rg)) != ENG_OK) return rc;
    if ((rc = eng_ld_int(ld, "token_shift_count", 2, 0, 1 << 16, &shifts)) != ENG_OK) return rc;
    if (shifts != 2) {
        eng_errf(ld->err, ld->errlen, "%s: metadata: %s.token_shift_count: %d, RWKV-7 shifts 2 rows", ld->path,
                 ld->arch, shifts);
        return ENG_ERR_UNSUPPORTED;
    }
    hp->D = D;
    hp->H = D / hp->S;
    in->n_ff = hp->F;
    in->wkv_head_size = hp->S;
    return ENG_OK;
}

// ----------------------------------------------------------------------------
// Weights

typedef struct rwkv7_layer {
    rwkv7_hp hp;
    bool     first;                     /* layer 0: its v is v_first (its v0/v1/v2 are unused) */
    float   *ln1_w, *ln1_b;             /* [D] attn_norm */
    float   *ln2_w, *ln2_b;             /* [D] attn_norm_2 */
    float   *lerp;                      /* [6, D] time_mix_lerp_fused: r, w, k, v, a, g */
    float   *w0, *a0, *v0;              /* [D] */
    eng_kmat w1, w2;                    /* [Rw, D], [D, Rw] */
    eng_kmat a1, a2;                    /* [Ra, D], [D, Ra] */
    eng_kmat v1, v2;                    /* [Rv, D], [D, Rv] (layer 0: Ra, unused) */
    eng_kmat g1, g2;                    /* [Rg, D], [D, Rg] */
    float   *k_k, *k_a, *r_k;           /* [D] */
    eng_kmat wr, wk, wv, wo;            /* [D, D] receptance, key, value, output */
    float   *lnx_w, *lnx_b;             /* [D] time_mix_ln (per-head group norm affine) */
    float   *cm_lerp;                   /* [D] channel_mix_lerp_k */
    eng_kmat ck, cv;                    /* [F, D], [D, F] channel_mix_key, channel_mix_value */
} rwkv7_layer;

static void rwkv7_free(void *v) {
    rwkv7_layer *ly = v;
    if (!ly) return;
    float *vecs[] = {ly->ln1_w, ly->ln1_b, ly->ln2_w, ly->ln2_b, ly->lerp, ly->w0, ly->a0, ly->v0,
                     ly->k_k, ly->k_a, ly->r_k, ly->lnx_w, ly->lnx_b, ly->cm_lerp};
    for (size_t i = 0; i < sizeof vecs / sizeof vecs[0]; i++) free(vecs[i]);
    eng_kmat *mats[] = {&ly->w1, &ly->w2, &ly->a1, &ly->a2, &ly->v1, &ly->v2, &ly->g1, &ly->g2,
                        &ly->wr, &ly->wk, &ly->wv, &ly->wo, &ly->ck, &ly->cv};
    for (size_t i = 0; i < sizeof mats / sizeof mats[0]; i++) eng_kmat_free(mats[i]);
    free(ly);
}

static int rwkv7_load(eng_loader *ld, eng_model *m, int32_t il, void **out) {
    rwkv7_layer *ly = calloc(1, sizeof *ly);
    if (!ly) return ENG_ERR_NOMEM;
    *out = ly;
    int rc;
    if ((rc = read_hp(ld, m, &ly->hp)) != ENG_OK) return rc;
    const rwkv7_hp *hp = &ly->hp;
    const int64_t D = hp->D, F = hp->F;
    ly->first = il == 0;
    const int64_t rv = ly->first ? hp->ra : hp->rv;  /* llama.cpp's converter copies a0/a1/a2 into layer 0's v */
    char name[96];
#define TN(suffix) (snprintf(name, sizeof name, "blk.%d." suffix, il), name)
#define VEC(field, suffix) \
    if ((rc = eng_ld_plain(ld, m, TN(suffix), D, 1, &ly->field)) != ENG_OK) return rc
#define MAT(field, suffix, n_out, n_in) \
    if ((rc = eng_ld_matrix(ld, m, TN(suffix), n_out, n_in, &ly->field)) != ENG_OK) return rc
    VEC(ln1_w, "attn_norm.weight");
    VEC(ln1_b, "attn_norm.bias");
    VEC(ln2_w, "attn_norm_2.weight");
    VEC(ln2_b, "attn_norm_2.bias");
    {
        const int64_t ne[4] = {D, 1, 1, 6};
        if ((rc = eng_ld_tensor_nd(ld, TN("time_mix_lerp_fused.weight"), ne, false, &ly->lerp)) != ENG_OK) return rc;
        eng_k_round(&m->kctx, ly->lerp, 6 * D);
    }
    VEC(w0, "time_mix_w0.weight");
    MAT(w1, "time_mix_w1.weight", hp->rw, D);
    MAT(w2, "time_mix_w2.weight", D, hp->rw);
    VEC(a0, "time_mix_a0.weight");
    MAT(a1, "time_mix_a1.weight", hp->ra, D);
    MAT(a2, "time_mix_a2.weight", D, hp->ra);
    VEC(v0, "time_mix_v0.weight");
    MAT(v1, "time_mix_v1.weight", rv, D);
    MAT(v2, "time_mix_v2.weight", D, rv);
    MAT(g1, "time_mix_g1.weight", hp->rg, D);
    MAT(g2, "time_mix_g2.weight", D, hp->rg);
    VEC(k_k, "time_mix_k_k.weight");
    VEC(k_a, "time_mix_k_a.weight");
    VEC(r_k, "time_mix_r_k.weight");
    MAT(wk, "time_mix_key.weight", D, D);
    MAT(wv, "time_mix_value.weight", D, D);
    MAT(wr, "time_mix_receptance.weight", D, D);
    VEC(lnx_w, "time_mix_ln.weight");
    VEC(lnx_b, "time_mix_ln.bias");
    MAT(wo, "time_mix_output.weight", D, D);
    {
        const int64_t ne[4] = {D, 1, 1, 1};
        if ((rc = eng_ld_tensor_nd(ld, TN("channel_mix_lerp_k.weight"), ne, false, &ly->cm_lerp)) != ENG_OK) return rc;
        eng_k_round(&m->kctx, ly->cm_lerp, D);
    }
    MAT(ck, "channel_mix_key.weight", F, D);
    MAT(cv, "channel_mix_value.weight", D, F);
#undef MAT
#undef VEC
#undef TN
    m->info.rec_state_bytes += (int64_t)sizeof(float) * (2 * D + (int64_t)hp->H * hp->S * hp->S);
    return ENG_OK;
}

/* Every tensor of the layer in the file (layer 0's unused v0/v1/v2 included). */
static int64_t rwkv7_n_params(const eng_model *m, int32_t il) {
    const rwkv7_layer *ly = m->layers[il].w;
    const rwkv7_hp *hp = &ly->hp;
    const int64_t D = hp->D, F = hp->F, rv = ly->first ? hp->ra : hp->rv;
    return 4 * D + 6 * D + 3 * D + 2 * D * (hp->rw + hp->ra + rv + hp->rg) + 3 * D + 4 * D * D + 2 * D + D +
           2 * D * F;
}

/* Products r, k, v, o (4 D^2), the LoRAs, the channel mix (2 D F), and the
 * scan: 9 per state element (2 for S a, 5 for the update, 2 for S r). */
static double rwkv7_token_flops(const eng_model *m, int32_t il) {
    const rwkv7_layer *ly = m->layers[il].w;
    const rwkv7_hp *hp = &ly->hp;
    const double D = hp->D, F = hp->F, S = hp->S;
    const double lora = hp->rw + hp->ra + hp->rg + (ly->first ? 0 : hp->rv);
    return 2.0 * 4.0 * D * D + 2.0 * 2.0 * D * lora + 2.0 * 2.0 * D * F + 9.0 * D * S;
}

// ----------------------------------------------------------------------------
// The wkv7 scan

int64_t eng_rwkv7_scan_floats(int32_t S) {
    const int64_t Q = ENG_RWKV7_BLOCK;
    return 6 * Q * S + 2 * Q * Q;  /* a block: G, A~, B^, K^, R~, X [Q, S]; two [Q, Q] */
}

typedef struct scan_args {
    int32_t      T, H, S, D;
    int32_t      t0, Q;  /* the block [t0, t0 + Q) (blas) */
    const float *r, *w, *k, *v, *a, *b;
    float       *wkv, *o, *scratch;
} scan_args;

/* Heads [h0, h1), every token in order: the recurrence, vectorised over the
 * value index i (each lane its own sequential loop over the key index j). */
static void scan_rec_heads(void *vp, int32_t h0, int32_t h1) {
    const scan_args *p = vp;
    const int32_t S = p->S, D = p->D;
    for (int32_t h = h0; h < h1; h++) {
        float *ST = p->wkv + (int64_t)h * S * S;
        float *sa = p->scratch + (int64_t)h * eng_rwkv7_scan_floats(S), *acc = sa + S;
        for (int32_t t = 0; t < p->T; t++) {
            const int64_t off = (int64_t)t * D + (int64_t)h * S;
            const float *r = p->r + off, *w = p->w + off, *k = p->k + off, *v = p->v + off;
            const float *a = p->a + off, *b = p->b + off;
            for (int32_t i = 0; i < S; i++) sa[i] = 0.0f;
            for (int32_t j = 0; j < S; j++) {
                const float aj = a[j], *row = ST + (int64_t)j * S;
                #pragma omp simd
                for (int32_t i = 0; i < S; i++) sa[i] = sa[i] + aj * row[i];
            }
            for (int32_t i = 0; i < S; i++) acc[i] = 0.0f;
            for (int32_t j = 0; j < S; j++) {
                const float wj = w[j], kj = k[j], bj = b[j], rj = r[j];
                float *row = ST + (int64_t)j * S;
                #pragma omp simd
                for (int32_t i = 0; i < S; i++) {
                    const float s = (row[i] * wj + v[i] * kj) + sa[i] * bj;
                    row[i] = s;
                    acc[i] = acc[i] + s * rj;
                }
            }
            memcpy(p->o + off, acc, sizeof(float) * (size_t)S);
        }
    }
}

/* Heads [h0, h1) over the block [t0, t0 + Q): the chunked form (rwkv7.h). */
static void scan_blk_heads(void *vp, int32_t h0, int32_t h1) {
    const scan_args *p = vp;
    const int32_t S = p->S, D = p->D, Q = p->Q;
    for (int32_t h = h0; h < h1; h++) {
        float *ST = p->wkv + (int64_t)h * S * S;  /* [S_k, S_v] */
        float *G = p->scratch + (int64_t)h * eng_rwkv7_scan_floats(S);
        float *At = G + (int64_t)Q * S, *Bh = At + (int64_t)Q * S, *Kh = Bh + (int64_t)Q * S;
        float *Rt = Kh + (int64_t)Q * S, *X = Rt + (int64_t)Q * S, *M1 = X + (int64_t)Q * S, *M2 = M1 + (int64_t)Q * Q;
        const int64_t base = (int64_t)p->t0 * D + (int64_t)h * S;
        const float *V = p->v + base;
        float *O = p->o + base;
        for (int32_t t = 0; t < Q; t++) {
            const int64_t off = base + (int64_t)t * D;
            const float *w = p->w + off, *a = p->a + off, *b = p->b + off, *k = p->k + off, *r = p->r + off;
            const float *gp = t ? G + (int64_t)(t - 1) * S : NULL;
            float *g = G + (int64_t)t * S;
            for (int32_t j = 0; j < S; j++) {
                const float prev = gp ? gp[j] : 1.0f;
                g[j] = prev * w[j];
                At[(int64_t)t * S + j] = prev * a[j];
                Rt[(int64_t)t * S + j] = g[j] * r[j];
                Bh[(int64_t)t * S + j] = b[j] / g[j];
                Kh[(int64_t)t * S + j] = k[j] / g[j];
            }
        }
        /* X = A~ S_0^T + tril_strict(A~ K^^T) V, then (I - tril_strict(A~ B^^T)) X = that */
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, Q, Q, S, 1.0f, At, S, Kh, S, 0.0f, M1, Q);
        for (int32_t t = 0; t < Q; t++)
            for (int32_t s = t; s < Q; s++) M1[(int64_t)t * Q + s] = 0.0f;
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, Q, S, S, 1.0f, At, S, ST, S, 0.0f, X, S);
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, Q, S, Q, 1.0f, M1, Q, V, D, 1.0f, X, S);
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, Q, Q, S, -1.0f, At, S, Bh, S, 0.0f, M2, Q);
        cblas_strsm(CblasRowMajor, CblasLeft, CblasLower, CblasNoTrans, CblasUnit, Q, S, 1.0f, M2, Q, X, S);
        /* O = R~ S_0^T + tril(R~ B^^T) X + tril(R~ K^^T) V */
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, Q, Q, S, 1.0f, Rt, S, Bh, S, 0.0f, M1, Q);
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, Q, Q, S, 1.0f, Rt, S, Kh, S, 0.0f, M2, Q);
        for (int32_t t = 0; t < Q; t++)
            for (int32_t s = t + 1; s < Q; s++) M1[(int64_t)t * Q + s] = M2[(int64_t)t * Q + s] = 0.0f;
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, Q, S, S, 1.0f, Rt, S, ST, S, 0.0f, O, D);
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, Q, S, Q, 1.0f, M1, Q, X, S, 1.0f, O, D);
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, Q, S, Q, 1.0f, M2, Q, V, D, 1.0f, O, D);
        /* S^T <- diag(G_Q) S_0^T + B-^T X + K-^T V, with B-_s = b_s G_Q / G_s, K-_s = k_s G_Q / G_s */
        const float *gq = G + (int64_t)(Q - 1) * S;
        for (int32_t s = 0; s < Q; s++) {
            const int64_t off = base + (int64_t)s * D;
            const float *g = G + (int64_t)s * S;
            for (int32_t j = 0; j < S; j++) {
                const float ratio = gq[j] / g[j];
                Bh[(int64_t)s * S + j] = p->b[off + j] * ratio;
                Kh[(int64_t)s * S + j] = p->k[off + j] * ratio;
            }
        }
        for (int32_t j = 0; j < S; j++)
            for (int32_t i = 0; i < S; i++) ST[(int64_t)j * S + i] = ST[(int64_t)j * S + i] * gq[j];
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, S, S, Q, 1.0f, Bh, S, X, S, 1.0f, ST, S);
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, S, S, Q, 1.0f, Kh, S, V, D, 1.0f, ST, S);
    }
}

void eng_rwkv7_scan(const eng_kctx *ctx, int32_t T, int32_t H, int32_t S, const float *r, const float *w,
                    const float *k, const float *v, const float *a, const float *b, float *wkv, float *o,
                    float *scratch) {
    scan_args p = {.T = T, .H = H, .S = S, .D = H * S, .r = r, .w = w, .k = k, .v = v, .a = a, .b = b,
                   .wkv = wkv, .o = o, .scratch = scratch};
    if (ctx->kernel == ENG_KERNEL_BLAS && T > 1) {
        for (int32_t t0 = 0; t0 < T; t0 += ENG_RWKV7_BLOCK) {
            p.t0 = t0;
            p.Q = T - t0 < ENG_RWKV7_BLOCK ? T - t0 : ENG_RWKV7_BLOCK;
            eng_k_parallel_rows(ctx, H, scan_blk_heads, &p);
        }
    } else {
        eng_k_parallel_rows(ctx, H, scan_rec_heads, &p);
    }
    eng_k_round(ctx, o, (int64_t)T * H * S);
}

// ----------------------------------------------------------------------------
// Element-wise stages, one row (token) at a time

static inline float sigmoidf_(float x) { return 1.0f / (1.0f + eng_expf(-x)); }

/* Sum of n floats (or of x*y, or of x*y*z) in 8 double lanes, combined pairwise. */
static float sum8(const float *x, const float *y, const float *z, int32_t n) {
    double l8[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    for (int32_t i = 0; i < n; i++) {
        float t = x[i];
        if (y) t = t * y[i];
        if (z) t = t * z[i];
        l8[i & 7] += (double)t;
    }
    return (float)(((l8[0] + l8[1]) + (l8[2] + l8[3])) + ((l8[4] + l8[5]) + (l8[6] + l8[7])));
}

typedef struct rows_args {
    const eng_kctx    *ctx;
    const rwkv7_layer *ly;
    int32_t            D, S, H, n;   /* n: columns of a generic stage */
    int                stage;
    const float       *in, *shift;   /* token shift: rows of in, prev of row 0 */
    const float       *lerp;         /* [n_lerp, D] */
    int32_t            n_lerp, T;
    float             *out;          /* [n_lerp, T, D] */
    float *r, *w, *k, *v, *a, *g, *b, *z, *vfirst, *o;
} rows_args;

enum { ST_LERP, ST_TANH, ST_SIGMOID, ST_RELU2, ST_DECAY, ST_VMIX, ST_KAB, ST_OUT };

static void rows_fn(void *vp, int32_t t0, int32_t t1) {
    const rows_args *p = vp;
    const rwkv7_layer *ly = p->ly;
    const bool bf16 = p->ctx->bf16;
    const int32_t D = p->D, S = p->S;
    for (int32_t t = t0; t < t1; t++) {
        const int64_t row = (int64_t)t * D;
        switch (p->stage) {
        case ST_LERP: {  /* sx = prev - x; x_c = sx * lerp_c + x */
            const float *x = p->in + row, *prev = t ? x - D : p->shift;
            for (int32_t i = 0; i < D; i++) {
                float sx = prev[i] - x[i];
                if (bf16) sx = eng_bf16_round(sx);
                for (int32_t c = 0; c < p->n_lerp; c++) {
                    const float y = sx * p->lerp[(int64_t)c * D + i] + x[i];
                    p->out[(int64_t)c * p->T * D + row + i] = bf16 ? eng_bf16_round(y) : y;
                }
            }
            break;
        }
        case ST_TANH: case ST_SIGMOID: case ST_RELU2: {  /* in place on [T, n] */
            float *x = p->out + (int64_t)t * p->n;
            for (int32_t i = 0; i < p->n; i++) {
                float y = x[i];
                if (p->stage == ST_TANH) y = tanhf(y);
                else if (p->stage == ST_SIGMOID) y = sigmoidf_(y);
                else { y = y > 0.0f ? y : 0.0f; y = y * y; }
                x[i] = bf16 ? eng_bf16_round(y) : y;
            }
            break;
        }
        case ST_DECAY: {  /* w = exp(-0.606531 * sigmoid(z + w0)) */
            const float *z = p->z + row;
            float *w = p->w + row;
            #pragma omp simd
            for (int32_t i = 0; i < D; i++) w[i] = eng_expf(RWKV7_DECAY_SCALE * sigmoidf_(z[i] + ly->w0[i]));
            if (bf16) eng_k_round(p->ctx, w, D);
            break;
        }
        case ST_VMIX: {  /* v = v + (v_first - v) * sigmoid(z + v0) */
            const float *z = p->z + row, *vf = p->vfirst + row;
            float *v = p->v + row;
            #pragma omp simd
            for (int32_t i = 0; i < D; i++) v[i] = v[i] + (vf[i] - v[i]) * sigmoidf_(z[i] + ly->v0[i]);
            if (bf16) eng_k_round(p->ctx, v, D);
            break;
        }
        case ST_KAB: {  /* a = sigmoid(z + a0); kk = l2norm(k * k_k); k += a*ka - ka; b = kk * a; a <- -kk */
            const float *z = p->z + row;
            float *a = p->a + row, *k = p->k + row, *b = p->b + row;
            for (int32_t i = 0; i < D; i++) {
                a[i] = sigmoidf_(z[i] + ly->a0[i]);
                if (bf16) a[i] = eng_bf16_round(a[i]);
            }
            for (int32_t h = 0; h < p->H; h++) {  /* b holds kk = k * k_k until scaled */
                float *kk = b + (int64_t)h * S;
                const float *kh = k + (int64_t)h * S, *kkw = ly->k_k + (int64_t)h * S;
                for (int32_t i = 0; i < S; i++) kk[i] = kh[i] * kkw[i];
                const float scale = 1.0f / fmaxf(sqrtf(sum8(kk, kk, NULL, S)), RWKV7_L2_EPS);
                for (int32_t i = 0; i < S; i++) {
                    kk[i] = kk[i] * scale;
                    if (bf16) kk[i] = eng_bf16_round(kk[i]);
                }
            }
            for (int32_t i = 0; i < D; i++) {
                const float ka = k[i] * ly->k_a[i], kk = b[i];
                float kn = k[i] + (a[i] * ka - ka), bb = kk * a[i];
                if (bf16) { kn = eng_bf16_round(kn); bb = eng_bf16_round(bb); }
                k[i] = kn;
                b[i] = bb;
                a[i] = -kk;  /* the scan's a */
            }
            break;
        }
        case ST_OUT: {  /* o = o + v * sum_head(k * r * r_k); o = o * g (o already group-normed) */
            float *o = p->o + row;
            const float *v = p->v + row, *k = p->k + row, *r = p->r + row, *g = p->g + row;
            for (int32_t h = 0; h < p->H; h++) {
                const int64_t hs = (int64_t)h * S;
                const float rk = sum8(k + hs, r + hs, ly->r_k + hs, S);
                for (int32_t i = 0; i < S; i++) {
                    float y = o[hs + i] + v[hs + i] * rk;
                    if (bf16) y = eng_bf16_round(y);
                    y = y * g[hs + i];
                    o[hs + i] = bf16 ? eng_bf16_round(y) : y;
                }
            }
            break;
        }
        default: ENG_ASSERT(0);
        }
    }
}

static void run_rows(rows_args *p, int stage, int32_t T, int64_t cost) {
    p->stage = stage;
    eng_k_parallel_rows_cost(p->ctx, T, cost, rows_fn, p);
}

// ----------------------------------------------------------------------------
// Scratch

typedef struct rwkv7_ws {
    int32_t cap_T;
    int64_t cap;      /* floats in buf */
    float  *buf;      /* everything below, zeroed when (re)allocated */
    float  *xa;       /* [T, D] LN1 output; then LN2 output */
    float  *xc;       /* [6, T, D] lerped inputs r w k v a g; then the channel-mix input */
    float  *r, *k, *v, *w, *a, *g, *b, *z, *vfirst, *o;  /* [T, D] */
    float  *h;        /* [T, max(R, F)] LoRA hidden, channel-mix key */
    float  *scan;     /* [H, eng_rwkv7_scan_floats(S)] */
} rwkv7_ws;

static int rwkv7_prepare(const eng_model *m, int32_t il, void **vws, const eng_fwd *f) {
    if (!*vws && !(*vws = calloc(1, sizeof(rwkv7_ws)))) return ENG_ERR_NOMEM;
    rwkv7_ws *ws = *vws;
    const int32_t T = f->T;
    if (T <= ws->cap_T) return ENG_OK;
    const rwkv7_hp *hp = &((const rwkv7_layer *)m->layers[il].w)->hp;
    int64_t R = hp->F;
    const int32_t ranks[4] = {hp->rw, hp->ra, hp->rv, hp->rg};
    for (int i = 0; i < 4; i++) R = ranks[i] > R ? ranks[i] : R;
    const int64_t TD = (int64_t)T * hp->D, scan = (int64_t)hp->H * eng_rwkv7_scan_floats(hp->S);
    const int64_t n = TD + 6 * TD + 10 * TD + (int64_t)T * R + scan;
    float *buf = calloc((size_t)n, sizeof(float));
    if (!buf) return ENG_ERR_NOMEM;
    free(ws->buf);
    ws->buf = buf;
    ws->cap = n;
    float *q = buf;
    ws->xa = q; q += TD;
    ws->xc = q; q += 6 * TD;
    float **rows[] = {&ws->r, &ws->k, &ws->v, &ws->w, &ws->a, &ws->g, &ws->b, &ws->z, &ws->vfirst, &ws->o};
    for (int i = 0; i < 10; i++) { *rows[i] = q; q += TD; }
    ws->h = q; q += (int64_t)T * R;
    ws->scan = q;
    ws->cap_T = T;
    return ENG_OK;
}

static void rwkv7_ws_free(void *vws) {
    rwkv7_ws *ws = vws;
    if (!ws) return;
    free(ws->buf);
    free(ws);
}

// ----------------------------------------------------------------------------
// The layer

static void rwkv7_forward(eng_fwd *f, int32_t il, void *vws) {
    const eng_model *m = f->m;
    const eng_kctx *kc = f->k;
    const rwkv7_layer *ly = m->layers[il].w;
    const rwkv7_hp *hp = &ly->hp;
    rwkv7_ws *ws = vws;
    eng_ws *cw = f->w;
    const int32_t T = f->T, D = hp->D, S = hp->S, H = hp->H, F = hp->F;
    const int64_t TD = (int64_t)T * D;
    const float eps = m->info.norm_eps;
    rows_args p = {.ctx = kc, .ly = ly, .D = D, .S = S, .H = H, .T = T, .r = ws->r, .w = ws->w, .k = ws->k,
                   .v = ws->v, .a = ws->a, .g = ws->g, .b = ws->b, .z = ws->z, .vfirst = ws->vfirst, .o = ws->o};

    /* time mix: the six token-shifted inputs, each span shifted from its own state */
    eng_k_layernorm(kc, T, D, cw->x, D, ly->ln1_w, ly->ln1_b, eps, ws->xa, D);
    p.lerp = ly->lerp; p.n_lerp = 6;
    for (int32_t i = 0; i < f->n_span; i++) {
        const eng_fspan *sp = &f->span[i];
        eng_rwkv7_state *st = sp->s->mem[il].state;
        p.in = ws->xa + (int64_t)sp->r0 * D; p.shift = st->shift_att; p.out = ws->xc + (int64_t)sp->r0 * D;
        run_rows(&p, ST_LERP, sp->T, 12 * (int64_t)D);
        memcpy(st->shift_att, ws->xa + (int64_t)(sp->r0 + sp->T - 1) * D, sizeof(float) * (size_t)D);
    }
    const float *xr = ws->xc, *xw = xr + TD, *xk = xw + TD, *xv = xk + TD, *xa = xv + TD, *xg = xa + TD;
    eng_k_matmul(kc, &ly->wr, T, xr, D, ws->r, D);
    eng_k_matmul(kc, &ly->wk, T, xk, D, ws->k, D);
    eng_k_matmul(kc, &ly->wv, T, xv, D, ws->v, D);
    /* decay */
    eng_k_matmul(kc, &ly->w1, T, xw, D, ws->h, hp->rw);
    p.out = ws->h; p.n = hp->rw;
    run_rows(&p, ST_TANH, T, 8 * (int64_t)hp->rw);
    eng_k_matmul(kc, &ly->w2, T, ws->h, hp->rw, ws->z, D);
    run_rows(&p, ST_DECAY, T, 8 * (int64_t)D);
    /* value residual: layer 0 sets v_first, the others mix it in */
    if (ly->first) {
        memcpy(ws->vfirst, ws->v, sizeof(float) * (size_t)TD);
    } else {
        eng_k_matmul(kc, &ly->v1, T, xv, D, ws->h, hp->rv);
        eng_k_matmul(kc, &ly->v2, T, ws->h, hp->rv, ws->z, D);
        run_rows(&p, ST_VMIX, T, 8 * (int64_t)D);
    }
    /* gate */
    eng_k_matmul(kc, &ly->g1, T, xg, D, ws->h, hp->rg);
    p.out = ws->h; p.n = hp->rg;
    run_rows(&p, ST_SIGMOID, T, 8 * (int64_t)hp->rg);
    eng_k_matmul(kc, &ly->g2, T, ws->h, hp->rg, ws->g, D);
    /* in-context learning rate, kk, the new k, b */
    eng_k_matmul(kc, &ly->a1, T, xa, D, ws->h, hp->ra);
    eng_k_matmul(kc, &ly->a2, T, ws->h, hp->ra, ws->z, D);
    run_rows(&p, ST_KAB, T, 16 * (int64_t)D);
    /* wkv7, then group norm, the r.k bonus and the gate */
    for (int32_t i = 0; i < f->n_span; i++) {  /* each span from its own wkv state */
        const int64_t o = (int64_t)f->span[i].r0 * D;
        eng_rwkv7_state *st = f->span[i].s->mem[il].state;
        eng_rwkv7_scan(kc, f->span[i].T, H, S, ws->r + o, ws->w + o, ws->k + o, ws->v + o, ws->a + o, ws->b + o,
                       st->wkv, ws->o + o, ws->scan);
    }
    for (int32_t h = 0; h < H; h++)
        eng_k_layernorm(kc, T, S, ws->o + (int64_t)h * S, D, ly->lnx_w + (int64_t)h * S, ly->lnx_b + (int64_t)h * S,
                        RWKV7_GN_EPS, ws->o + (int64_t)h * S, D);
    run_rows(&p, ST_OUT, T, 8 * (int64_t)D);
    eng_k_matmul(kc, &ly->wo, T, ws->o, D, cw->proj, D);
    eng_k_add(kc, T, D, cw->x, D, cw->proj, D);

    /* channel mix */
    eng_k_layernorm(kc, T, D, cw->x, D, ly->ln2_w, ly->ln2_b, eps, ws->xa, D);
    p.lerp = ly->cm_lerp; p.n_lerp = 1;
    for (int32_t i = 0; i < f->n_span; i++) {
        const eng_fspan *sp = &f->span[i];
        eng_rwkv7_state *st = sp->s->mem[il].state;
        p.in = ws->xa + (int64_t)sp->r0 * D; p.shift = st->shift_ffn; p.out = ws->xc + (int64_t)sp->r0 * D;
        run_rows(&p, ST_LERP, sp->T, 2 * (int64_t)D);
        memcpy(st->shift_ffn, ws->xa + (int64_t)(sp->r0 + sp->T - 1) * D, sizeof(float) * (size_t)D);
    }
    eng_k_matmul(kc, &ly->ck, T, ws->xc, D, ws->h, F);
    p.out = ws->h; p.n = F;
    run_rows(&p, ST_RELU2, T, 2 * (int64_t)F);
    eng_k_matmul(kc, &ly->cv, T, ws->h, F, cw->proj, D);
    eng_k_add(kc, T, D, cw->x, D, cw->proj, D);
}

// ----------------------------------------------------------------------------
// Memory: the two shift rows and the wkv state, one contiguous block

static const rwkv7_hp *hp_of(const eng_model *m, int32_t il) { return &((const rwkv7_layer *)m->layers[il].w)->hp; }

static size_t state_bytes(const eng_model *m, int32_t il) {
    const rwkv7_hp *hp = hp_of(m, il);
    return sizeof(float) * (size_t)(2 * (int64_t)hp->D + (int64_t)hp->H * hp->S * hp->S);
}

static int rwkv7_mem_new(const eng_model *m, int32_t il, int32_t n_ctx, int32_t slack, void **out) {
    const rwkv7_hp *hp = hp_of(m, il);
    eng_rwkv7_state *st = calloc(1, sizeof *st);
    float *blk = calloc(state_bytes(m, il) / sizeof(float), sizeof(float));
    if (!st || !blk) {
        free(st);
        free(blk);
        return ENG_ERR_NOMEM;
    }
    st->shift_att = blk;
    st->shift_ffn = blk + hp->D;
    st->wkv = blk + 2 * hp->D;
    *out = st;
    return ENG_OK;
}

static void rwkv7_mem_free(void *v) {
    eng_rwkv7_state *st = v;
    if (!st) return;
    free(st->shift_att);  /* the block */
    free(st);
}

static void rwkv7_mem_clear(const eng_model *m, int32_t il, void *v, int32_t n_used) {
    memset(((eng_rwkv7_state *)v)->shift_att, 0, state_bytes(m, il));
}

static bool rwkv7_can_truncate(const eng_model *m, int32_t il, const void *v, int32_t n_tokens, int32_t n) {
    return false;  /* only its own length */
}

static void rwkv7_copy(const eng_model *m, int32_t il, void *dst, const void *src, int32_t n) {
    memcpy(((eng_rwkv7_state *)dst)->shift_att, ((const eng_rwkv7_state *)src)->shift_att, state_bytes(m, il));
}

/* The whole block as one STATE array, when both sequences are at the same length. */
static bool rwkv7_compare(const eng_model *m, int32_t il, const void *va, const void *vb, int32_t n_a, int32_t n_b,
                          eng_seq_diff *out) {
    if (n_a != n_b) return false;
    const int64_t i = eng_first_diff(((const eng_rwkv7_state *)va)->shift_att,
                                     ((const eng_rwkv7_state *)vb)->shift_att,
                                     (int64_t)(state_bytes(m, il) / sizeof(float)));
    return i >= 0 && eng_diff_found(out, ENG_SEQ_PART_STATE, -1, i);
}

static size_t rwkv7_state_size(const eng_model *m, int32_t il, const void *v, int32_t n) { return state_bytes(m, il); }

static void rwkv7_state_save(const eng_model *m, int32_t il, const void *v, int32_t n, void *dst) {
    memcpy(dst, ((const eng_rwkv7_state *)v)->shift_att, state_bytes(m, il));
}

static void rwkv7_state_load(const eng_model *m, int32_t il, void *v, int32_t n, const void *src) {
    memcpy(((eng_rwkv7_state *)v)->shift_att, src, state_bytes(m, il));
}

// ----------------------------------------------------------------------------
// The rwkv7 architecture

static int rwkv7_hparams(eng_loader *ld, eng_model *m) {
    rwkv7_hp hp;
    int rc = read_hp(ld, m, &hp);
    if (rc != ENG_OK) return rc;
    m->norm = ENG_NORM_LAYER;
    m->embd_norm = true;
    m->norm_bias = true;
    for (int32_t il = 0; il < m->info.n_layer; il++) m->layers[il].ops = &eng_kind_rwkv7;
    return ENG_OK;
}

// ----------------------------------------------------------------------------
// Synthetic RWKV-7 models (llama.cpp's rwkv7 keys and tensors)

static int rwkv7_synth_check(synth_ctx *c) {
    const eng_synth_params *p = &c->p;
    char msg[128];
    struct { const char *field; int32_t v, lo, hi; } lim[] = {
        {"wkv_head_size", p->wkv_head_size, 1, 4096}, {"n_ff", p->n_ff, 1, 1 << 20},
        {"lora_decay", p->lora_decay, 1, 4096}, {"lora_iclr", p->lora_iclr, 1, 4096},
        {"lora_mix", p->lora_mix, 1, 4096}, {"lora_gate", p->lora_gate, 1, 4096},
    };
    for (size_t i = 0; i < sizeof lim / sizeof lim[0]; i++)
        if (!sy_in_range(lim[i].v, lim[i].lo, lim[i].hi)) {
            snprintf(msg, sizeof msg, "%d, expected [%d, %d]", lim[i].v, lim[i].lo, lim[i].hi);
            return sy_fail_arg(c, lim[i].field, msg);
        }
    if (p->n_embd % p->wkv_head_size != 0) {
        snprintf(msg, sizeof msg, "%d does not divide n_embd %d", p->wkv_head_size, p->n_embd);
        return sy_fail_arg(c, "wkv_head_size", msg);
    }
    return ENG_OK;
}

/* As llama.cpp's converter writes them (head_count 0: "required by llama.cpp, unused"). */
static int rwkv7_synth_meta(synth_ctx *c) {
    const eng_synth_params *p = &c->p;
    eng_gguf_writer *w = c->w;
    int rc = ENG_OK;
    if (!rc) rc = eng_gguf_writer_set_u32(w, sy_key(c, "context_length"), (uint32_t)p->n_ctx);
    if (!rc) rc = eng_gguf_writer_set_u32(w, sy_key(c, "embedding_length"), (uint32_t)p->n_embd);
    if (!rc) rc = eng_gguf_writer_set_u32(w, sy_key(c, "block_count"), (uint32_t)p->n_layer);
    if (!rc) rc = eng_gguf_writer_set_f32(w, sy_key(c, "attention.layer_norm_epsilon"), p->rms_eps);
    if (!rc) rc = eng_gguf_writer_set_u32(w, sy_key(c, "wkv.head_size"), (uint32_t)p->wkv_head_size);
    if (!rc) rc = eng_gguf_writer_set_u32(w, sy_key(c, "attention.decay_lora_rank"), (uint32_t)p->lora_decay);
    if (!rc) rc = eng_gguf_writer_set_u32(w, sy_key(c, "attention.iclr_lora_rank"), (uint32_t)p->lora_iclr);
    if (!rc) rc = eng_gguf_writer_set_u32(w, sy_key(c, "attention.value_residual_mix_lora_rank"),
                                          (uint32_t)p->lora_mix);
    if (!rc) rc = eng_gguf_writer_set_u32(w, sy_key(c, "attention.gate_lora_rank"), (uint32_t)p->lora_gate);
    if (!rc) rc = eng_gguf_writer_set_u32(w, sy_key(c, "feed_forward_length"), (uint32_t)p->n_ff);
    if (!rc) rc = eng_gguf_writer_set_u32(w, sy_key(c, "attention.head_count"), 0);
    if (!rc) rc = eng_gguf_writer_set_u32(w, sy_key(c, "vocab_size"), (uint32_t)p->n_vocab);
    return rc ? sy_nomem(c, "metadata") : ENG_OK;
}

/* A uniform F32 tensor lo + (hi - lo) * U(0, 1) of shape ne (n_dims dims). */
static int add_uniform(synth_ctx *c, const char *name, int n_dims, const int64_t *ne, double lo, double hi) {
    size_t n = 1;
    for (int d = 0; d < n_dims; d++) n *= (size_t)ne[d];
    float *u;
    int rc = sy_draw_uniform(c, name, n, &u);
    if (rc) return rc;
    for (size_t i = 0; i < n; i++) u[i] = (float)(lo + (hi - lo) * u[i]);
    return sy_add_f32(c, name, n_dims, ne, u);
}

/* Init laws: lerps U(0, 1); w0 U(-4, 4) (decays from 0.55 to 0.99); a0 and v0
 * N(0, 1); k_k 0.85 + N(0, 0.02), k_a 1 + N(0, 0.02), r_k N(0, 0.1); LoRA
 * down-projections N(0, 1/sqrt(D)), up-projections N(0, 0.1/sqrt(R)) (the
 * gate's N(0, 1/sqrt(R))); projections N(0, 1/sqrt(fan_in)); norms 1 +
 * N(0, 0.02) with biases N(0, 0.02). Layer 0 carries llama.cpp's dummy
 * v0/v1/v2 (iclr rank). */
static int rwkv7_synth_layer(synth_ctx *c, int32_t il) {
    const eng_synth_params *p = &c->p;
    const int64_t D = p->n_embd, F = p->n_ff;
    const int64_t rv = il == 0 ? p->lora_iclr : p->lora_mix;
    char name[96];
    int rc;
#define TN(suffix) (snprintf(name, sizeof name, "blk.%d." suffix, il), name)
#define TRY(x) if ((rc = (x))) return rc
    TRY(sy_add_norm(c, TN("attn_norm.weight"), D));
    TRY(sy_add_gauss(c, TN("attn_norm.bias"), D, 0, 0.0, SYNTH_NORM_NOISE));
    TRY(sy_add_norm(c, TN("attn_norm_2.weight"), D));
    TRY(sy_add_gauss(c, TN("attn_norm_2.bias"), D, 0, 0.0, SYNTH_NORM_NOISE));
    {
        const int64_t ne[1] = {D};
        TRY(add_uniform(c, TN("time_mix_w0.weight"), 1, ne, -4.0, 4.0));
    }
    TRY(sy_add_proj(c, TN("time_mix_w1.weight"), D, p->lora_decay));
    TRY(sy_add_gauss(c, TN("time_mix_w2.weight"), p->lora_decay, D, 0.0, 0.1 / sqrt((double)p->lora_decay)));
    TRY(sy_add_gauss(c, TN("time_mix_a0.weight"), D, 0, 0.0, 1.0));
    TRY(sy_add_proj(c, TN("time_mix_a1.weight"), D, p->lora_iclr));
    TRY(sy_add_gauss(c, TN("time_mix_a2.weight"), p->lora_iclr, D, 0.0, 0.1 / sqrt((double)p->lora_iclr)));
    TRY(sy_add_gauss(c, TN("time_mix_v0.weight"), D, 0, 0.0, 1.0));
    TRY(sy_add_proj(c, TN("time_mix_v1.weight"), D, rv));
    TRY(sy_add_gauss(c, TN("time_mix_v2.weight"), rv, D, 0.0, 0.1 / sqrt((double)rv)));
    TRY(sy_add_proj(c, TN("time_mix_g1.weight"), D, p->lora_gate));
    TRY(sy_add_proj(c, TN("time_mix_g2.weight"), p->lora_gate, D));
    {
        const int64_t ne[4] = {D, 1, 1, 6};
        TRY(add_uniform(c, TN("time_mix_lerp_fused.weight"), 4, ne, 0.0, 1.0));
    }
    TRY(sy_add_gauss(c, TN("time_mix_k_k.weight"), D, 0, 0.85, SYNTH_NORM_NOISE));
    TRY(sy_add_gauss(c, TN("time_mix_k_a.weight"), D, 0, 1.0, SYNTH_NORM_NOISE));
    TRY(sy_add_gauss(c, TN("time_mix_r_k.weight"), D, 0, 0.0, 0.1));
    TRY(sy_add_proj(c, TN("time_mix_key.weight"), D, D));
    TRY(sy_add_proj(c, TN("time_mix_value.weight"), D, D));
    TRY(sy_add_proj(c, TN("time_mix_receptance.weight"), D, D));
    TRY(sy_add_norm(c, TN("time_mix_ln.weight"), D));
    TRY(sy_add_gauss(c, TN("time_mix_ln.bias"), D, 0, 0.0, SYNTH_NORM_NOISE));
    TRY(sy_add_proj(c, TN("time_mix_output.weight"), D, D));
    {
        const int64_t ne[3] = {D, 1, 1};
        TRY(add_uniform(c, TN("channel_mix_lerp_k.weight"), 3, ne, 0.0, 1.0));
    }
    TRY(sy_add_proj(c, TN("channel_mix_key.weight"), D, F));
    TRY(sy_add_proj(c, TN("channel_mix_value.weight"), F, D));
#undef TRY
#undef TN
    return ENG_OK;
}

/* Head size 64, as every RWKV-7 model (llama.cpp's CPU wkv7 steps over a head
 * in GGML_F32_STEP floats, 32 or 64, and computes garbage for other sizes);
 * LoRA ranks as llama.cpp's converter derives them from D when a config has none. */
static const eng_synth_arch rwkv7_synth = {
    .name = "rwkv7", .groups = SY_FF | SY_WKV, .ln_bias = true,
    .check = rwkv7_synth_check, .meta = rwkv7_synth_meta, .layer = rwkv7_synth_layer,
    .presets = {
        {.D = 128, .L = 2, .F = 512, .ctx = 4096, .S = 64, .rw = 32, .ra = 32, .rv = 32, .rg = 32},
        {.D = 256, .L = 4, .F = 1024, .ctx = 16384, .S = 64, .rw = 32, .ra = 32, .rv = 32, .rg = 64},
        {.D = 1024, .L = 12, .F = 4096, .ctx = 8192, .S = 64, .rw = 64, .ra = 64, .rv = 32, .rg = 160},
        {.D = 64, .L = 2, .F = 256, .ctx = 262144, .S = 64, .rw = 16, .ra = 16, .rv = 16, .rg = 16},
    },
};

static const eng_arch rwkv7_arch = {.name = "rwkv7", .hparams = rwkv7_hparams, .synth = &rwkv7_synth};
static const eng_arch *const rwkv7_archs[] = {&rwkv7_arch, NULL};

const eng_layer_ops eng_kind_rwkv7 = {
    .name = "rwkv7",
    .kind = ENG_LAYER_RECURRENT,
    .archs = rwkv7_archs,
    .load = rwkv7_load,
    .free = rwkv7_free,
    .n_params = rwkv7_n_params,
    .token_flops = rwkv7_token_flops,
    .pos_flops = NULL,
    .prepare = rwkv7_prepare,
    .ws_free = rwkv7_ws_free,
    .forward = rwkv7_forward,
    .mem_new = rwkv7_mem_new,
    .mem_free = rwkv7_mem_free,
    .mem_clear = rwkv7_mem_clear,
    .can_truncate = rwkv7_can_truncate,
    .truncate = NULL,
    .copy = rwkv7_copy,
    .compare = rwkv7_compare,
    .ser_bytes = rwkv7_state_size,
    .ser_save = rwkv7_state_save,
    .ser_load = rwkv7_state_load,
    .ckpt_bytes = rwkv7_state_size,
    .ckpt_save = rwkv7_state_save,
    .ckpt_load = rwkv7_state_load,
};
