/*
 * engine/layers/mamba2.c: the Mamba-2 layer kind (ENG_LAYER_RECURRENT): the
 * mixer of one chunk (see mamba2.h for the semantics and the numerical
 * contract of each kernel), the kind's table, and the architectures built
 * from it, llama.cpp's `mamba2` (Mamba-2 layers only, no FFN) and
 * `granitehybrid` (Mamba-2 or full-attention layers, SwiGLU FFN in every
 * layer), with their synthetic writers.
 *
 * Determinism: every output element is a fixed sequence of float
 * operations on its inputs. Work is split across heads (scan) or tokens
 * (conv, gate) with eng_k_parallel_rows; no element's operations depend on
 * the split. The blas scan's products run single-threaded inside each
 * head's work, so their results do not depend on the thread count either.
 * The ref scan vectorises across the head dimension P: each lane is one
 * (h, p) with its own sequential loop over the state index n.
 */
#include "mamba2.h"

#include "attn.h"
#include "synth_int.h"

#include <cblas.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "status.h"

// ----------------------------------------------------------------------------
// Hyperparameters, weights, state

int eng_ssm_hparams_init(eng_ssm_hparams *hp, int32_t n_embd, int32_t d_inner, int32_t d_state, int32_t n_head,
                         int32_t n_group, int32_t d_conv, float eps, char *err, size_t errlen) {
    memset(hp, 0, sizeof *hp);
    struct { const char *field; int32_t v, hi; } lim[] = {
        {"embedding_length", n_embd, 1 << 20}, {"ssm.inner_size", d_inner, 1 << 22},
        {"ssm.state_size", d_state, 1 << 16},  {"ssm.time_step_rank", n_head, 1 << 16},
        {"ssm.group_count", n_group, 1 << 16}, {"ssm.conv_kernel", d_conv, 1024},
    };
    for (size_t i = 0; i < sizeof lim / sizeof lim[0]; i++)
        if (lim[i].v < 1 || lim[i].v > lim[i].hi) {
            eng_errf(err, errlen, "%s: %d out of range [1, %d]", lim[i].field, lim[i].v, lim[i].hi);
            return ENG_ERR_FORMAT;
        }
    if (d_inner % n_head != 0) {
        eng_errf(err, errlen, "ssm.time_step_rank: %d heads do not divide ssm.inner_size %d", n_head, d_inner);
        return ENG_ERR_FORMAT;
    }
    if (n_head % n_group != 0 || d_inner % n_group != 0) {
        eng_errf(err, errlen, "ssm.group_count: %d groups do not divide %d heads and inner size %d", n_group, n_head,
                 d_inner);
        return ENG_ERR_FORMAT;
    }
    if (!(eps > 0.0f)) {
        eng_errf(err, errlen, "attention.layer_norm_rms_epsilon: expected a positive number");
        return ENG_ERR_FORMAT;
    }
    hp->n_embd = n_embd;
    hp->d_inner = d_inner;
    hp->d_state = d_state;
    hp->n_head = n_head;
    hp->head_dim = d_inner / n_head;
    hp->n_group = n_group;
    hp->d_conv = d_conv;
    hp->conv_dim = d_inner + 2 * n_group * d_state;
    hp->d_in_proj = 2 * d_inner + 2 * n_group * d_state + n_head;
    hp->eps = eps;
    return ENG_OK;
}

void eng_ssm_weights_free(eng_ssm_weights *w) {
    if (!w) return;
    free(w->attn_norm);
    eng_kmat_free(&w->in_proj);
    free(w->conv_w);
    free(w->conv_b);
    free(w->dt_bias);
    free(w->A);
    free(w->D);
    free(w->norm_w);
    eng_kmat_free(&w->out_proj);
    memset(w, 0, sizeof *w);
}

int64_t eng_ssm_state_floats_ssm(const eng_ssm_hparams *hp) {
    return (int64_t)hp->n_head * hp->d_state * hp->head_dim;
}

int64_t eng_ssm_state_floats_conv(const eng_ssm_hparams *hp) {
    return (int64_t)(hp->d_conv - 1) * hp->conv_dim;
}

size_t eng_ssm_state_bytes(const eng_ssm_hparams *hp) {
    return sizeof(float) * (size_t)(eng_ssm_state_floats_ssm(hp) + eng_ssm_state_floats_conv(hp));
}

int eng_ssm_state_alloc(eng_ssm_state *st, const eng_ssm_hparams *hp) {
    const int64_t ns = eng_ssm_state_floats_ssm(hp), nc = eng_ssm_state_floats_conv(hp);
    st->ssm = calloc((size_t)ns, sizeof(float));
    st->conv = calloc((size_t)(nc > 0 ? nc : 1), sizeof(float));
    if (!st->ssm || !st->conv) {
        eng_ssm_state_free(st);
        return ENG_ERR_NOMEM;
    }
    return ENG_OK;
}

void eng_ssm_state_free(eng_ssm_state *st) {
    if (!st) return;
    free(st->ssm);
    free(st->conv);
    st->ssm = st->conv = NULL;
}

void eng_ssm_state_clear(eng_ssm_state *st, const eng_ssm_hparams *hp) {
    memset(st->ssm, 0, sizeof(float) * (size_t)eng_ssm_state_floats_ssm(hp));
    memset(st->conv, 0, sizeof(float) * (size_t)eng_ssm_state_floats_conv(hp));
}

void eng_ssm_state_copy(eng_ssm_state *dst, const eng_ssm_state *src, const eng_ssm_hparams *hp) {
    if (dst == src) return;
    memcpy(dst->ssm, src->ssm, sizeof(float) * (size_t)eng_ssm_state_floats_ssm(hp));
    memcpy(dst->conv, src->conv, sizeof(float) * (size_t)eng_ssm_state_floats_conv(hp));
}

void eng_ssm_state_save(const eng_ssm_state *st, const eng_ssm_hparams *hp, void *dst) {
    const size_t bs = sizeof(float) * (size_t)eng_ssm_state_floats_ssm(hp);
    memcpy(dst, st->ssm, bs);
    memcpy((char *)dst + bs, st->conv, sizeof(float) * (size_t)eng_ssm_state_floats_conv(hp));
}

void eng_ssm_state_load(eng_ssm_state *st, const eng_ssm_hparams *hp, const void *src) {
    const size_t bs = sizeof(float) * (size_t)eng_ssm_state_floats_ssm(hp);
    memcpy(st->ssm, src, bs);
    memcpy(st->conv, (const char *)src + bs, sizeof(float) * (size_t)eng_ssm_state_floats_conv(hp));
}

double eng_ssm_token_flops(const eng_ssm_hparams *hp) {
    const double D = hp->n_embd, NI = hp->d_inner, N = hp->d_state;
    return 2.0 * D * hp->d_in_proj + 2.0 * NI * D + 2.0 * hp->d_conv * hp->conv_dim + 5.0 * NI * N;
}

// ----------------------------------------------------------------------------
// Workspace

void eng_ssm_ws_free(eng_ssm_ws *ws) {
    if (!ws) return;
    free(ws->zxbcdt); free(ws->xpad); free(ws->xbc); free(ws->dt);
    free(ws->y); free(ws->yn); free(ws->gcb); free(ws->blk);
    memset(ws, 0, sizeof *ws);
}

static float *zalloc(int64_t n) { return calloc((size_t)(n > 0 ? n : 1), sizeof(float)); }

/* Per-head scratch floats: an SSD block (M [Q,Q], wB or Cs [Q,N], cum and
 * its exponentials [2Q]) or the recurrence's two [P] vectors. */
static int64_t head_scratch(const eng_ssm_hparams *hp) {
    const int64_t Q = ENG_SSM_BLOCK;
    return Q * Q + Q * hp->d_state + 2 * Q + 2 * (int64_t)hp->head_dim;
}

int eng_ssm_ws_reserve(eng_ssm_ws *ws, const eng_ssm_hparams *hp, int32_t T) {
    const int64_t blk = (int64_t)hp->n_head * head_scratch(hp);
    if (T <= ws->cap_T && ws->cap_dp == hp->d_in_proj && ws->cap_cd == hp->conv_dim && ws->cap_i == hp->d_inner &&
        ws->cap_blk == blk)
        return ENG_OK;
    const int32_t cap = T > ws->cap_T ? T : ws->cap_T;
    eng_ssm_ws_free(ws);
    const int64_t Q = ENG_SSM_BLOCK;
    ws->zxbcdt = zalloc((int64_t)cap * hp->d_in_proj);
    ws->xpad = zalloc((int64_t)(cap + hp->d_conv - 1) * hp->conv_dim);
    ws->xbc = zalloc((int64_t)cap * hp->conv_dim);
    ws->dt = zalloc((int64_t)cap * hp->n_head);
    ws->y = zalloc((int64_t)cap * hp->d_inner);
    ws->yn = zalloc((int64_t)cap * hp->d_inner);
    ws->gcb = zalloc((int64_t)hp->n_group * Q * Q);
    ws->blk = zalloc(blk);
    if (!ws->zxbcdt || !ws->xpad || !ws->xbc || !ws->dt || !ws->y || !ws->yn || !ws->gcb || !ws->blk) {
        eng_ssm_ws_free(ws);
        return ENG_ERR_NOMEM;
    }
    ws->cap_T = cap;
    ws->cap_dp = hp->d_in_proj;
    ws->cap_cd = hp->conv_dim;
    ws->cap_i = hp->d_inner;
    ws->cap_blk = (int32_t)blk;
    return ENG_OK;
}

// ----------------------------------------------------------------------------
// Element-wise pieces

static inline float silu(float v) { return v / (1.0f + eng_expf(-v)); }

/* ggml_compute_softplus_f32: the identity above 20 (where log1p(e^v) == v in float). */
static inline float softplus(float v) { return v > 20.0f ? v : log1pf(expf(v)); }

typedef struct conv_args {
    const eng_ssm_hparams *hp;
    const eng_ssm_weights *w;
    bool bf16;
    const float *xpad;
    float *xbc;
    const float *zxbcdt;
    float *dt;
} conv_args;

/* Tokens [t0, t1): xbc[t] = round(silu(sum_k xpad[t+k] * conv_w[k] + conv_b)),
 * k ascending from a +0 accumulator, vectorised across channels; and
 * dt[t] = softplus(dt_raw[t] + dt_bias) in fp32 (scan-internal). */
static void conv_rows(void *v, int32_t t0, int32_t t1) {
    const conv_args *a = v;
    const int32_t CD = a->hp->conv_dim, K = a->hp->d_conv, NH = a->hp->n_head;
    const int64_t dt_off = (int64_t)a->hp->d_inner + CD;
    for (int32_t t = t0; t < t1; t++) {
        float *o = a->xbc + (int64_t)t * CD;
        #pragma omp simd
        for (int32_t c = 0; c < CD; c++) o[c] = 0.0f;
        for (int32_t k = 0; k < K; k++) {
            const float *x = a->xpad + (int64_t)(t + k) * CD, *wk = a->w->conv_w + (int64_t)k * CD;
            #pragma omp simd
            for (int32_t c = 0; c < CD; c++) o[c] = o[c] + x[c] * wk[c];
        }
        const float *b = a->w->conv_b;
        #pragma omp simd
        for (int32_t c = 0; c < CD; c++) o[c] = silu(o[c] + b[c]);
        if (a->bf16)
            for (int32_t c = 0; c < CD; c++) o[c] = eng_bf16_round(o[c]);
        const float *dr = a->zxbcdt + (int64_t)t * a->hp->d_in_proj + dt_off;
        float *dt = a->dt + (int64_t)t * NH;
        for (int32_t h = 0; h < NH; h++) dt[h] = softplus(dr[h] + a->w->dt_bias[h]);
    }
}

typedef struct gate_args {
    const eng_kctx *ctx;
    const eng_ssm_hparams *hp;
    const eng_ssm_weights *w;
    bool bf16;
    const float *xbc, *zxbcdt;
    float *y, *yn;
} gate_args;

/* Tokens [t0, t1): y = round(round(y + x*D_h) * silu(z)) (ggml: add, mul,
 * swiglu_split), then yn = the row's grouped RMSNorm of y. */
static void gate_rows(void *v, int32_t t0, int32_t t1) {
    const gate_args *a = v;
    const int32_t NI = a->hp->d_inner, P = a->hp->head_dim, NH = a->hp->n_head, CD = a->hp->conv_dim;
    for (int32_t t = t0; t < t1; t++) {
        float *y = a->y + (int64_t)t * NI;
        const float *x = a->xbc + (int64_t)t * CD, *z = a->zxbcdt + (int64_t)t * a->hp->d_in_proj;
        for (int32_t h = 0; h < NH; h++) {
            const float Dh = a->w->D[h];
            float *yh = y + (int64_t)h * P;
            const float *xh = x + (int64_t)h * P;
            #pragma omp simd
            for (int32_t p = 0; p < P; p++) yh[p] = yh[p] + xh[p] * Dh;
        }
        if (a->bf16)
            for (int32_t i = 0; i < NI; i++) y[i] = eng_bf16_round(y[i]);
        #pragma omp simd
        for (int32_t i = 0; i < NI; i++) y[i] = silu(z[i]) * y[i];
        if (a->bf16)
            for (int32_t i = 0; i < NI; i++) y[i] = eng_bf16_round(y[i]);
        const int32_t gs = NI / a->hp->n_group;  /* yn: each group's RMSNorm (ggml: rms_norm over groups) */
        for (int32_t g = 0; g < a->hp->n_group; g++)
            eng_k_rmsnorm_rows(a->ctx, gs, a->y + (int64_t)g * gs, NI, a->w->norm_w + (int64_t)g * gs, a->hp->eps,
                               a->yn + (int64_t)g * gs, NI, t, t + 1);
    }
}

// ----------------------------------------------------------------------------
// The scan: the recurrence (ref, and any chunk of one token)

typedef struct scan_args {
    const eng_ssm_hparams *hp;
    const eng_ssm_weights *w;
    int32_t T, t0, Q;     /* all tokens (recurrence); SSD block [t0, t0 + Q) */
    const float *xbc, *dt;
    float *y, *S, *blk, *gcb;
} scan_args;

/* Heads [h0, h1), every token of the chunk in order. For each (n, p):
 * s = S[n,p]*dA + B[n]*(x[p]*dt); acc[p] += s*C[n]; n ascending. */
static void scan_seq_heads(void *v, int32_t h0, int32_t h1) {
    const scan_args *a = v;
    const eng_ssm_hparams *hp = a->hp;
    const int32_t P = hp->head_dim, N = hp->d_state, NI = hp->d_inner, CD = hp->conv_dim;
    const int32_t hpg = hp->n_head / hp->n_group;
    for (int32_t h = h0; h < h1; h++) {
        const int32_t g = h / hpg;
        float *S = a->S + (int64_t)h * N * P;
        float *acc = a->blk + (int64_t)h * head_scratch(hp), *xdt = acc + P;
        const float Ah = a->w->A[h];
        for (int32_t t = 0; t < a->T; t++) {
            const float dth = a->dt[(int64_t)t * hp->n_head + h];
            const float dA = eng_expf(dth * Ah);
            const float *row = a->xbc + (int64_t)t * CD;
            const float *x = row + (int64_t)h * P, *B = row + NI + (int64_t)g * N,
                        *C = row + NI + (int64_t)hp->n_group * N + (int64_t)g * N;
            #pragma omp simd
            for (int32_t p = 0; p < P; p++) { xdt[p] = x[p] * dth; acc[p] = 0.0f; }
            for (int32_t n = 0; n < N; n++) {
                float *Sn = S + (int64_t)n * P;
                const float bn = B[n], cn = C[n];
                #pragma omp simd
                for (int32_t p = 0; p < P; p++) {
                    const float s = Sn[p] * dA + bn * xdt[p];
                    acc[p] = acc[p] + s * cn;
                    Sn[p] = s;
                }
            }
            float *y = a->y + (int64_t)t * NI + (int64_t)h * P;
            memcpy(y, acc, sizeof(float) * (size_t)P);
        }
    }
}

// ----------------------------------------------------------------------------
// The scan: the SSD block form (blas)

/* Heads [h0, h1) over the block [t0, t0 + Q), given gcb[g] = C_g B_g^T. */
static void scan_ssd_heads(void *v, int32_t h0, int32_t h1) {
    const scan_args *a = v;
    const eng_ssm_hparams *hp = a->hp;
    const int32_t P = hp->head_dim, N = hp->d_state, NI = hp->d_inner, CD = hp->conv_dim, NH = hp->n_head;
    const int32_t Q = a->Q, t0 = a->t0, hpg = NH / hp->n_group;
    for (int32_t h = h0; h < h1; h++) {
        const int32_t g = h / hpg;
        float *S = a->S + (int64_t)h * N * P;  /* [N, P] */
        float *M = a->blk + (int64_t)h * head_scratch(hp);  /* [Q, Q] */
        float *W = M + (int64_t)Q * Q;                      /* [Q, N]: Cs, then wB */
        float *cum = W + (int64_t)Q * N, *ecum = cum + Q;   /* [Q] each */
        const float *G = a->gcb + (int64_t)g * Q * Q;
        const float *dt = a->dt + (int64_t)t0 * NH + h;     /* stride NH */
        const float *X = a->xbc + (int64_t)t0 * CD + (int64_t)h * P;
        const float *B = a->xbc + (int64_t)t0 * CD + NI + (int64_t)g * N;
        const float *C = a->xbc + (int64_t)t0 * CD + NI + (int64_t)hp->n_group * N + (int64_t)g * N;
        float *Y = a->y + (int64_t)t0 * NI + (int64_t)h * P;
        const float Ah = a->w->A[h];
        float c = 0.0f;
        for (int32_t t = 0; t < Q; t++) {
            c = c + dt[(int64_t)t * NH] * Ah;
            cum[t] = c;
            ecum[t] = eng_expf(c);
        }
        /* intra-block: M = (C B^T) o L, Y = M X */
        for (int32_t t = 0; t < Q; t++) {
            float *m = M + (int64_t)t * Q;
            const float *gr = G + (int64_t)t * Q;
            for (int32_t s = 0; s <= t; s++) m[s] = gr[s] * (eng_expf(cum[t] - cum[s]) * dt[(int64_t)s * NH]);
            for (int32_t s = t + 1; s < Q; s++) m[s] = 0.0f;
        }
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, Q, P, Q, 1.0f, M, Q, X, CD, 0.0f, Y, NI);
        /* inter-block: Y += diag(e^cum) C S */
        for (int32_t t = 0; t < Q; t++)
            for (int32_t n = 0; n < N; n++) W[(int64_t)t * N + n] = ecum[t] * C[(int64_t)t * CD + n];
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, Q, P, N, 1.0f, W, N, S, P, 1.0f, Y, NI);
        /* state: S = e^cum_end S + (diag(w) B)^T X, w_s = e^(cum_end - cum_s) dt_s */
        const float cend = cum[Q - 1], eend = ecum[Q - 1];
        for (int64_t i = 0; i < (int64_t)N * P; i++) S[i] = S[i] * eend;
        for (int32_t s = 0; s < Q; s++) {
            const float ws = eng_expf(cend - cum[s]) * dt[(int64_t)s * NH];
            for (int32_t n = 0; n < N; n++) W[(int64_t)s * N + n] = ws * B[(int64_t)s * CD + n];
        }
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, N, P, Q, 1.0f, W, N, X, CD, 1.0f, S, P);
    }
}

static void scan_ssd(const eng_kctx *ctx, scan_args *a) {
    const eng_ssm_hparams *hp = a->hp;
    const int32_t N = hp->d_state, NI = hp->d_inner, CD = hp->conv_dim;
    for (int32_t t0 = 0; t0 < a->T; t0 += ENG_SSM_BLOCK) {
        const int32_t Q = a->T - t0 < ENG_SSM_BLOCK ? a->T - t0 : ENG_SSM_BLOCK;
        for (int32_t g = 0; g < hp->n_group; g++) {
            const float *B = a->xbc + (int64_t)t0 * CD + NI + (int64_t)g * N;
            const float *C = a->xbc + (int64_t)t0 * CD + NI + (int64_t)hp->n_group * N + (int64_t)g * N;
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, Q, Q, N, 1.0f, C, CD, B, CD, 0.0f,
                        a->gcb + (int64_t)g * Q * Q, Q);
        }
        a->t0 = t0;
        a->Q = Q;
        eng_k_parallel_rows(ctx, hp->n_head, scan_ssd_heads, a);
    }
}

// ----------------------------------------------------------------------------
// The mixer of one chunk

int eng_ssm_forward_spans(const eng_kctx *ctx, const eng_ssm_hparams *hp, const eng_ssm_weights *w,
                          const eng_ssm_span *sp, int32_t n_span, int32_t T, const float *xn, int32_t ldx, float *out,
                          int32_t ldo, eng_ssm_ws *ws, const eng_kfuse *in_fu, const eng_kfuse *out_fu) {
    ENG_ASSERT(T >= 1 && n_span >= 1);
    int rc = eng_ssm_ws_reserve(ws, hp, T);
    if (rc != ENG_OK) return rc;
    const int32_t NI = hp->d_inner, CD = hp->conv_dim, K = hp->d_conv, DP = hp->d_in_proj, NH = hp->n_head;

    eng_k_matmul_fused(ctx, &w->in_proj, T, xn, ldx, ws->zxbcdt, DP, in_fu);  /* [T, z | xBC | dt] */

    const int64_t nc = eng_ssm_state_floats_conv(hp);
    for (int32_t i = 0; i < n_span; i++) {  /* each span: its conv and scan from its own state */
        eng_ssm_state *st = sp[i].st;
        const int32_t r0 = sp[i].r0, Ti = sp[i].T;
        ENG_ASSERT(Ti >= 1 && r0 >= 0 && r0 + Ti <= T);
        const float *zx = ws->zxbcdt + (int64_t)r0 * DP;
        /* conv input: the state's K-1 rows, then the span's xBC rows */
        if (nc > 0) memcpy(ws->xpad, st->conv, sizeof(float) * (size_t)nc);
        for (int32_t t = 0; t < Ti; t++)
            memcpy(ws->xpad + (int64_t)(K - 1 + t) * CD, zx + (int64_t)t * DP + NI, sizeof(float) * (size_t)CD);
        conv_args ca = {.hp = hp, .w = w, .bf16 = ctx->bf16, .xpad = ws->xpad, .xbc = ws->xbc + (int64_t)r0 * CD,
                        .zxbcdt = zx, .dt = ws->dt + (int64_t)r0 * NH};
        eng_k_parallel_rows(ctx, Ti, conv_rows, &ca);
        if (nc > 0) memcpy(st->conv, ws->xpad + (int64_t)Ti * CD, sizeof(float) * (size_t)nc);

        scan_args sa = {.hp = hp, .w = w, .T = Ti, .xbc = ws->xbc + (int64_t)r0 * CD, .dt = ws->dt + (int64_t)r0 * NH,
                        .y = ws->y + (int64_t)r0 * NI, .S = st->ssm, .blk = ws->blk, .gcb = ws->gcb};
        if (ctx->kernel == ENG_KERNEL_BLAS && Ti > 1) scan_ssd(ctx, &sa);
        else eng_k_parallel_rows(ctx, hp->n_head, scan_seq_heads, &sa);
    }

    gate_args ga = {.ctx = ctx, .hp = hp, .w = w, .bf16 = ctx->bf16, .xbc = ws->xbc, .zxbcdt = ws->zxbcdt,
                    .y = ws->y, .yn = ws->yn};
    eng_k_parallel_rows(ctx, T, gate_rows, &ga);  /* the gate, then each group's RMSNorm of the row */
    eng_k_matmul_fused(ctx, &w->out_proj, T, ws->yn, NI, out, ldo, out_fu);
    return ENG_OK;
}

int eng_ssm_forward(const eng_kctx *ctx, const eng_ssm_hparams *hp, const eng_ssm_weights *w, eng_ssm_state *st,
                    int32_t T, const float *xn, int32_t ldx, float *out, int32_t ldo, eng_ssm_ws *ws,
                    const eng_kfuse *in_fu, const eng_kfuse *out_fu) {
    const eng_ssm_span sp = {.st = st, .r0 = 0, .T = T};
    return eng_ssm_forward_spans(ctx, hp, w, &sp, 1, T, xn, ldx, out, ldo, ws, in_fu, out_fu);
}

// ----------------------------------------------------------------------------
// The kind: x += mixer(rmsnorm(x) * attn_norm), then the FFN half when the
// architecture has one (granitehybrid)

typedef struct mamba2_layer {
    eng_ssm_hparams hp;
    eng_ssm_weights ssm;
    eng_ffn_weights ffn;  /* when has_ffn */
} mamba2_layer;

/* The kind's scratch: the mixer's, and the step's spans as the mixer takes them. */
typedef struct mamba2_ws {
    eng_ssm_ws    ssm;
    eng_ssm_span *span;  /* [cap_span] */
    int32_t       cap_span;
} mamba2_ws;

static const eng_arch granitehybrid_arch;

const eng_ssm_hparams *eng_mamba2_hparams(const eng_model *m, int32_t il) {
    return &((const mamba2_layer *)m->layers[il].w)->hp;
}

/* llama.cpp's ssm.* keys, checked, into *hp and m->info. */
static int read_hparams(eng_loader *ld, eng_model *m, eng_ssm_hparams *hp) {
    eng_model_info *in = &m->info;
    int32_t d_conv, d_inner, d_state, n_head, n_group;
    int rc;
    if ((rc = eng_ld_int(ld, "ssm.conv_kernel", -1, 1, 1024, &d_conv)) != ENG_OK) return rc;
    if ((rc = eng_ld_int(ld, "ssm.inner_size", -1, 1, 1 << 22, &d_inner)) != ENG_OK) return rc;
    if ((rc = eng_ld_int(ld, "ssm.state_size", -1, 1, 1 << 16, &d_state)) != ENG_OK) return rc;
    if ((rc = eng_ld_int(ld, "ssm.time_step_rank", -1, 1, 1 << 16, &n_head)) != ENG_OK) return rc;
    if ((rc = eng_ld_int(ld, "ssm.group_count", -1, 1, 1 << 16, &n_group)) != ENG_OK) return rc;
    char msg[192];
    if ((rc = eng_ssm_hparams_init(hp, in->n_embd, d_inner, d_state, n_head, n_group, d_conv, in->rms_eps, msg,
                                   sizeof msg)) != ENG_OK) {
        eng_errf(ld->err, ld->errlen, "%s: metadata: %s.%s", ld->path, ld->arch, msg);
        return rc;
    }
    in->ssm_d_inner = d_inner;
    in->ssm_d_state = d_state;
    in->ssm_n_head = n_head;
    in->ssm_head_dim = hp->head_dim;
    in->ssm_n_group = n_group;
    in->ssm_d_conv = d_conv;
    return ENG_OK;
}

/* The mixer of layer il (llama.cpp's mamba2 tensors; docs/gguf.md). */
static int mamba2_load(eng_loader *ld, eng_model *m, int32_t il, void **out) {
    mamba2_layer *ly = calloc(1, sizeof *ly);
    if (!ly) return ENG_ERR_NOMEM;
    *out = ly;
    int rc;
    if ((rc = read_hparams(ld, m, &ly->hp)) != ENG_OK) return rc;
    const eng_ssm_hparams *hp = &ly->hp;
    const int64_t D = hp->n_embd, NI = hp->d_inner, NH = hp->n_head, NG = hp->n_group, K = hp->d_conv;
    const int64_t CD = hp->conv_dim;
    const bool bf16 = m->kctx.bf16;
    eng_ssm_weights *w = &ly->ssm;
    char name[96];
#define TN(suffix) (snprintf(name, sizeof name, "blk.%d." suffix, il), name)
    if ((rc = eng_ld_plain(ld, m, TN("attn_norm.weight"), D, 1, &w->attn_norm)) != ENG_OK) return rc;
    if ((rc = eng_ld_matrix(ld, m, TN("ssm_in.weight"), hp->d_in_proj, D, &w->in_proj)) != ENG_OK) return rc;
    {   /* GGUF [K, CD] (each channel's K taps contiguous) -> [K, CD] tap-major */
        float *c;
        if ((rc = eng_ld_tensor(ld, TN("ssm_conv1d.weight"), K, CD, false, &c)) != ENG_OK) return rc;
        w->conv_w = malloc(sizeof(float) * (size_t)(K * CD));
        if (!w->conv_w) { free(c); return ENG_ERR_NOMEM; }
        for (int64_t ch = 0; ch < CD; ch++)
            for (int64_t k = 0; k < K; k++) {
                const float v = c[ch * K + k];
                w->conv_w[k * CD + ch] = bf16 ? eng_bf16_round(v) : v;
            }
        free(c);
    }
    rc = eng_ld_tensor(ld, TN("ssm_conv1d.bias"), CD, 1, m->arch == &granitehybrid_arch, &w->conv_b);
    if (rc == ENG_ERR_NOT_FOUND) {  /* optional in granitehybrid, as llama.cpp loads it */
        if (!(w->conv_b = calloc((size_t)CD, sizeof(float)))) return ENG_ERR_NOMEM;
    } else if (rc != ENG_OK) {
        return rc;
    } else if (bf16) {
        for (int64_t i = 0; i < CD; i++) w->conv_b[i] = eng_bf16_round(w->conv_b[i]);
    }
    if ((rc = eng_ld_plain(ld, m, TN("ssm_dt.bias"), NH, 1, &w->dt_bias)) != ENG_OK) return rc;
    if ((rc = eng_ld_plain(ld, m, TN("ssm_a"), 1, NH, &w->A)) != ENG_OK) return rc;
    if ((rc = eng_ld_plain(ld, m, TN("ssm_d"), 1, NH, &w->D)) != ENG_OK) return rc;
    if ((rc = eng_ld_plain(ld, m, TN("ssm_norm.weight"), NI / NG, NG, &w->norm_w)) != ENG_OK) return rc;
    if ((rc = eng_ld_matrix(ld, m, TN("ssm_out.weight"), D, NI, &w->out_proj)) != ENG_OK) return rc;
#undef TN
    m->info.rec_state_bytes += (int64_t)eng_ssm_state_bytes(hp);
    return m->layers[il].has_ffn ? eng_ffn_load(ld, m, il, true, &ly->ffn) : ENG_OK;
}

static void mamba2_free(void *v) {
    mamba2_layer *ly = v;
    if (!ly) return;
    eng_ssm_weights_free(&ly->ssm);
    eng_ffn_free(&ly->ffn);
    free(ly);
}

/* norm, in_proj, conv weight and bias, dt bias, A, D, grouped norm, out_proj (and the FFN) */
static int64_t mamba2_n_params(const eng_model *m, int32_t il) {
    const mamba2_layer *ly = m->layers[il].w;
    const eng_ssm_hparams *hp = &ly->hp;
    const int64_t D = hp->n_embd;
    const int64_t np = D + (int64_t)hp->d_in_proj * D + (int64_t)hp->d_conv * hp->conv_dim + hp->conv_dim +
                       3 * (int64_t)hp->n_head + hp->d_inner + (int64_t)hp->d_inner * D;
    return np + (m->layers[il].has_ffn ? eng_ffn_params(&ly->ffn) : 0);
}

static double mamba2_token_flops(const eng_model *m, int32_t il) {
    double f = m->layers[il].has_ffn ? eng_ffn_flops(m) : 0.0;
    return f + eng_ssm_token_flops(&((const mamba2_layer *)m->layers[il].w)->hp);
}

static int mamba2_prepare(const eng_model *m, int32_t il, void **v, const eng_fwd *f) {
    if (!*v && !(*v = calloc(1, sizeof(mamba2_ws)))) return ENG_ERR_NOMEM;
    mamba2_ws *ws = *v;
    if (f->n_span > ws->cap_span) {
        eng_ssm_span *sp = realloc(ws->span, sizeof(eng_ssm_span) * (size_t)f->n_span);
        if (!sp) return ENG_ERR_NOMEM;
        ws->span = sp;
        ws->cap_span = f->n_span;
    }
    return eng_ssm_ws_reserve(&ws->ssm, eng_mamba2_hparams(m, il), f->T);
}

static void mamba2_ws_free(void *v) {
    mamba2_ws *ws = v;
    if (!ws) return;
    eng_ssm_ws_free(&ws->ssm);
    free(ws->span);
    free(ws);
}

static void mamba2_forward(eng_fwd *f, int32_t il, void *v) {
    const eng_model *m = f->m;
    const mamba2_layer *ly = m->layers[il].w;
    mamba2_ws *ws = v;
    eng_ws *w = f->w;
    const int32_t D = m->info.n_embd;
    for (int32_t i = 0; i < f->n_span; i++)
        ws->span[i] = (eng_ssm_span){.st = f->span[i].s->mem[il].state, .r0 = f->span[i].r0, .T = f->span[i].T};
    eng_kfuse in = {0}, out = {.res = w->x, .ldres = D};  /* x += mixer(norm(x)): fused into the projections */
    eng_norm_fuse(f, &in, ly->ssm.attn_norm, NULL);
    const int rc = eng_ssm_forward_spans(f->k, &ly->hp, &ly->ssm, ws->span, f->n_span, f->T, w->x, D, w->proj, D,
                                         &ws->ssm, &in, &out);
    ENG_ASSERT(rc == ENG_OK);  /* scratch reserved by mamba2_prepare */
    if (m->layers[il].has_ffn) eng_ffn_residual(f, &ly->ffn);
}

static int mamba2_mem_new(const eng_model *m, int32_t il, int32_t n_ctx, int32_t slack, void **out) {
    eng_ssm_state *st = calloc(1, sizeof *st);
    if (!st) return ENG_ERR_NOMEM;
    if (eng_ssm_state_alloc(st, eng_mamba2_hparams(m, il)) != ENG_OK) {
        free(st);
        return ENG_ERR_NOMEM;
    }
    *out = st;
    return ENG_OK;
}

static void mamba2_mem_free(void *st) {
    eng_ssm_state_free(st);
    free(st);
}

static void mamba2_mem_clear(const eng_model *m, int32_t il, void *st, int32_t n_used) {
    eng_ssm_state_clear(st, eng_mamba2_hparams(m, il));
}

static bool mamba2_can_truncate(const eng_model *m, int32_t il, const void *st, int32_t n_tokens, int32_t n) {
    return false;  /* only its own length */
}

static void mamba2_copy(const eng_model *m, int32_t il, void *dst, const void *src, int32_t n) {
    eng_ssm_state_copy(dst, src, eng_mamba2_hparams(m, il));
}

/* The recurrent state then the conv state, as one STATE array, when both
 * sequences are at the same length (else the states are not comparable). */
static bool mamba2_compare(const eng_model *m, int32_t il, const void *va, const void *vb, int32_t n_a, int32_t n_b,
                           eng_seq_diff *out) {
    if (n_a != n_b) return false;
    const eng_ssm_state *a = va, *b = vb;
    const eng_ssm_hparams *hp = eng_mamba2_hparams(m, il);
    const int64_t ns = eng_ssm_state_floats_ssm(hp), nc = eng_ssm_state_floats_conv(hp);
    int64_t i = eng_first_diff(a->ssm, b->ssm, ns);
    if (i < 0 && (i = eng_first_diff(a->conv, b->conv, nc)) >= 0) i += ns;
    return i >= 0 && eng_diff_found(out, ENG_SEQ_PART_STATE, -1, i);
}

/* Serialised and checkpointed alike: the recurrent state, then the conv state. */
static size_t mamba2_state_bytes(const eng_model *m, int32_t il, const void *st, int32_t n) {
    return eng_ssm_state_bytes(eng_mamba2_hparams(m, il));
}

static void mamba2_state_save(const eng_model *m, int32_t il, const void *st, int32_t n, void *dst) {
    eng_ssm_state_save(st, eng_mamba2_hparams(m, il), dst);
}

static void mamba2_state_load(const eng_model *m, int32_t il, void *st, int32_t n, const void *src) {
    eng_ssm_state_load(st, eng_mamba2_hparams(m, il), src);
}

// ----------------------------------------------------------------------------
// Architectures: mamba2, granitehybrid

static int mamba2_hparams(eng_loader *ld, eng_model *m) {
    eng_model_info *in = &m->info;
    eng_ssm_hparams hp;
    int rc;
    if ((rc = eng_ld_float(ld, "attention.layer_norm_rms_epsilon", 1e-5, &in->rms_eps)) != ENG_OK) return rc;
    if ((rc = read_hparams(ld, m, &hp)) != ENG_OK) return rc;
    for (int32_t il = 0; il < in->n_layer; il++) m->layers[il].ops = &eng_kind_mamba2;  /* no FFN */
    return ENG_OK;
}

/* A granite scaling key must be absent or neutral (`neutral` or 0, which
 * llama.cpp also treats as "no scaling"). */
static int hp_neutral(eng_loader *ld, const char *suffix, double neutral) {
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

/* granitehybrid with a dense FFN, RoPE on and no granite scaling: anything
 * else is refused (ENG_ERR_UNSUPPORTED). */
static int granitehybrid_hparams(eng_loader *ld, eng_model *m) {
    eng_model_info *in = &m->info;
    int rc;
    if ((rc = eng_ld_float(ld, "attention.layer_norm_rms_epsilon", 1e-5, &in->rms_eps)) != ENG_OK) return rc;
    bool *is_rec = calloc((size_t)in->n_layer, sizeof(bool));
    if (!is_rec) return ENG_ERR_NOMEM;
    rc = eng_attn_hparams(ld, m, is_rec);
    if (rc == ENG_OK) {
        char key[128];
        bool rope = true;
        snprintf(key, sizeof key, "%s.rope.scaling.finetuned", ld->arch);
        if (eng_gguf_find_key(ld->g, key) >= 0 && eng_gguf_get_bool(ld->g, key, &rope) != ENG_OK) {
            eng_errf(ld->err, ld->errlen, "%s: metadata: %s: expected a bool", ld->path, key);
            rc = ENG_ERR_FORMAT;
        } else if (!rope) {
            eng_errf(ld->err, ld->errlen, "%s: metadata: %s: false (attention without RoPE) is not supported",
                     ld->path, key);
            rc = ENG_ERR_UNSUPPORTED;
        }
    }
    if (rc == ENG_OK) rc = hp_neutral(ld, "logit_scale", 1.0);
    if (rc == ENG_OK) rc = hp_neutral(ld, "residual_scale", 1.0);
    if (rc == ENG_OK) rc = hp_neutral(ld, "embedding_scale", 1.0);
    if (rc == ENG_OK) rc = hp_neutral(ld, "attention.scale", 1.0 / sqrt((double)in->head_dim));
    if (rc == ENG_OK) {
        int32_t n_expert;
        if ((rc = eng_ld_int(ld, "expert_count", 0, 0, INT32_MAX, &n_expert)) == ENG_OK && n_expert > 0) {
            eng_errf(ld->err, ld->errlen, "%s: metadata: %s.expert_count: %d: mixture of experts is not supported",
                     ld->path, ld->arch, n_expert);
            rc = ENG_ERR_UNSUPPORTED;
        }
    }
    eng_ssm_hparams hp;
    if (rc == ENG_OK) rc = read_hparams(ld, m, &hp);
    for (int32_t il = 0; rc == ENG_OK && il < in->n_layer; il++) {
        eng_layer *L = &m->layers[il];
        L->ops = is_rec[il] ? &eng_kind_mamba2 : &eng_kind_attn;
        L->has_ffn = true;
        L->rope = true;
    }
    free(is_rec);
    return rc;
}

// ----------------------------------------------------------------------------
// Synthetic Mamba-2 models: checks, keys and tensors (recurrent, hybrid)

/* An F32 tensor [ne0, ne1], 2-D when two_d (else 1-D). */
static int add_f32_2(synth_ctx *c, const char *name, int64_t ne0, int64_t ne1, bool two_d, const float *vals) {
    const int64_t ne[2] = {ne0, ne1};
    return sy_add_f32(c, name, two_d ? 2 : 1, ne, vals);
}

static int ssm_check(synth_ctx *c) {
    const eng_synth_params *p = &c->p;
    char msg[160];
    const int32_t NI = 2 * p->n_embd;
    struct { const char *field; int32_t v, lo, hi; } lim[] = {
        {"ssm_d_state", p->ssm_d_state, 1, 4096}, {"ssm_head_dim", p->ssm_head_dim, 1, 4096},
        {"ssm_n_group", p->ssm_n_group, 1, 4096}, {"ssm_d_conv", p->ssm_d_conv, 1, 64},
    };
    for (size_t i = 0; i < sizeof lim / sizeof lim[0]; i++)
        if (!sy_in_range(lim[i].v, lim[i].lo, lim[i].hi)) {
            snprintf(msg, sizeof msg, "%d, expected [%d, %d]", lim[i].v, lim[i].lo, lim[i].hi);
            return sy_fail_arg(c, lim[i].field, msg);
        }
    if (NI % p->ssm_head_dim != 0) {
        snprintf(msg, sizeof msg, "%d does not divide the inner size 2*n_embd = %d", p->ssm_head_dim, NI);
        return sy_fail_arg(c, "ssm_head_dim", msg);
    }
    if ((NI / p->ssm_head_dim) % p->ssm_n_group != 0) {
        snprintf(msg, sizeof msg, "%d groups do not divide %d heads", p->ssm_n_group, NI / p->ssm_head_dim);
        return sy_fail_arg(c, "ssm_n_group", msg);
    }
    return ENG_OK;
}

static int ssm_meta(synth_ctx *c) {
    const eng_synth_params *p = &c->p;
    eng_gguf_writer *w = c->w;
    const int32_t NI = 2 * p->n_embd;
    int rc = ENG_OK;
    if (!rc) rc = eng_gguf_writer_set_u32(w, sy_key(c, "ssm.conv_kernel"), (uint32_t)p->ssm_d_conv);
    if (!rc) rc = eng_gguf_writer_set_u32(w, sy_key(c, "ssm.inner_size"), (uint32_t)NI);
    if (!rc) rc = eng_gguf_writer_set_u32(w, sy_key(c, "ssm.state_size"), (uint32_t)p->ssm_d_state);
    if (!rc) rc = eng_gguf_writer_set_u32(w, sy_key(c, "ssm.time_step_rank"), (uint32_t)(NI / p->ssm_head_dim));
    if (!rc) rc = eng_gguf_writer_set_u32(w, sy_key(c, "ssm.group_count"), (uint32_t)p->ssm_n_group);
    return rc ? sy_nomem(c, "metadata") : ENG_OK;
}

/* blk.N: attn_norm [D], ssm_in [D, DP], ssm_conv1d.weight [K, CD] and .bias
 * [CD], ssm_dt.bias [NH], ssm_a and ssm_d [1, NH], ssm_norm.weight [NI/NG, NG],
 * ssm_out [NI, D] (llama.cpp's mamba2 names; ssm_a and ssm_d without ".weight"). */
#define TN(suffix) (snprintf(name, sizeof name, "blk.%d." suffix, il), name)

static int ssm_tensors(synth_ctx *c, int32_t il) {
    const eng_synth_params *p = &c->p;
    const int64_t D = p->n_embd, NI = 2 * D, N = p->ssm_d_state, NG = p->ssm_n_group, K = p->ssm_d_conv;
    const int64_t NH = NI / p->ssm_head_dim, CD = NI + 2 * NG * N, DP = 2 * NI + 2 * NG * N + NH;
    char name[64];
    int rc;
    if ((rc = sy_add_norm(c, TN("attn_norm.weight"), D))) return rc;
    if ((rc = sy_add_proj(c, TN("ssm_in.weight"), D, DP))) return rc;
    {
        /* F32 always, as llama.cpp keeps the conv unquantised */
        uint32_t keep = c->p.type;
        c->p.type = ENG_GGML_TYPE_F32;
        rc = sy_add_gauss(c, TN("ssm_conv1d.weight"), K, CD, 0.0, 1.0 / sqrt((double)K));
        c->p.type = keep;
        if (rc) return rc;
    }
    if ((rc = sy_add_gauss(c, TN("ssm_conv1d.bias"), CD, 0, 0.0, 0.1))) return rc;
    float *u, v[4096];
    if (NH > (int64_t)(sizeof v / sizeof v[0])) return sy_fail_arg(c, "ssm_head_dim", "too many SSM heads");
    /* dt log-uniform in [1e-3, 1e-1], bias = softplus^-1(dt) = dt + log(-expm1(-dt)) */
    if ((rc = sy_draw_uniform(c, TN("ssm_dt.bias"), (size_t)NH, &u))) return rc;
    for (int64_t h = 0; h < NH; h++) {
        const double dt = exp(log(1e-3) + u[h] * (log(1e-1) - log(1e-3)));
        v[h] = (float)(dt + log(-expm1(-dt)));
    }
    if ((rc = add_f32_2(c, name, NH, 1, false, v))) return rc;
    if ((rc = sy_draw_uniform(c, TN("ssm_a"), (size_t)NH, &u))) return rc;
    for (int64_t h = 0; h < NH; h++) v[h] = (float)-(1.0 + 15.0 * u[h]);
    if ((rc = add_f32_2(c, name, 1, NH, true, v))) return rc;
    {
        /* gaussians drawn as add_gauss does, written [1, NH] */
        TN("ssm_d");
        sy_seed(c, name);
        for (int64_t h = 0; h < NH; h++) v[h] = (float)(1.0 + sy_gauss(c, SYNTH_NORM_NOISE));
        if ((rc = add_f32_2(c, name, 1, NH, true, v))) return rc;
    }
    {
        float *nw = malloc(sizeof(float) * (size_t)NI);
        if (!nw) return sy_nomem(c, "ssm_norm");
        TN("ssm_norm.weight");
        sy_seed(c, name);
        for (int64_t i = 0; i < NI; i++) nw[i] = (float)(1.0 + sy_gauss(c, SYNTH_NORM_NOISE));
        rc = add_f32_2(c, name, NI / NG, NG, true, nw);
        free(nw);
        if (rc) return rc;
    }
    return sy_add_proj(c, TN("ssm_out.weight"), NI, D);
}


#undef TN

static int rec_check(synth_ctx *c) { return ssm_check(c); }

/* llama.cpp's mamba2 keys: no attention and no FFN (both counts 0, as its
 * converter writes them). */
static int rec_meta(synth_ctx *c) {
    const eng_synth_params *p = &c->p;
    eng_gguf_writer *w = c->w;
    int rc = ENG_OK;
    if (!rc) rc = eng_gguf_writer_set_u32(w, sy_key(c, "context_length"), (uint32_t)p->n_ctx);
    if (!rc) rc = eng_gguf_writer_set_u32(w, sy_key(c, "embedding_length"), (uint32_t)p->n_embd);
    if (!rc) rc = eng_gguf_writer_set_u32(w, sy_key(c, "block_count"), (uint32_t)p->n_layer);
    if (!rc) rc = eng_gguf_writer_set_u32(w, sy_key(c, "feed_forward_length"), 0);
    if (!rc) rc = eng_gguf_writer_set_u32(w, sy_key(c, "attention.head_count"), 0);
    if (!rc) rc = eng_gguf_writer_set_f32(w, sy_key(c, "attention.layer_norm_rms_epsilon"), p->rms_eps);
    if (!rc) rc = eng_gguf_writer_set_u32(w, sy_key(c, "vocab_size"), (uint32_t)p->n_vocab);
    if (rc) return sy_nomem(c, "metadata");
    return ssm_meta(c);
}

static int rec_layer(synth_ctx *c, int32_t il) { return ssm_tensors(c, il); }

static int hybrid_check(synth_ctx *c) {
    int rc = eng_synth_attn_check(c);
    if (!rc) rc = ssm_check(c);
    if (rc) return rc;
    if (!sy_in_range(c->p.attn_every, 0, 1 << 20)) {
        char msg[96];
        snprintf(msg, sizeof msg, "%d, expected >= 0 (0: no attention layer)", c->p.attn_every);
        return sy_fail_arg(c, "attn_every", msg);
    }
    return ENG_OK;
}

/* granitehybrid: llama's keys, head_count_kv an int32 array (0 = a Mamba-2
 * layer, as llama.cpp reads it), rope on (rope.scaling.finetuned true), the
 * ssm.* keys; no granite scaling keys (llama.cpp then scales nothing). */
static int hybrid_meta(synth_ctx *c) {
    int rc = eng_synth_attn_meta(c, false, true);
    if (rc) return rc;
    const eng_synth_params *p = &c->p;
    int32_t *hkv = malloc(sizeof(int32_t) * (size_t)p->n_layer);
    if (!hkv) return sy_nomem(c, "metadata");
    for (int32_t il = 0; il < p->n_layer; il++) hkv[il] = sy_layer_is_attn(p, il) ? p->n_head_kv : 0;
    rc = eng_gguf_writer_set_arr(c->w, sy_key(c, "attention.head_count_kv"), ENG_GGUF_TYPE_INT32, (uint64_t)p->n_layer,
                                 hkv);
    free(hkv);
    if (!rc) rc = eng_gguf_writer_set_bool(c->w, sy_key(c, "rope.scaling.finetuned"), true);
    if (rc) return sy_nomem(c, "metadata");
    return ssm_meta(c);
}

static int hybrid_layer(synth_ctx *c, int32_t il) {
    int rc = sy_layer_is_attn(&c->p, il) ? eng_synth_attn_tensors(c, il) : ssm_tensors(c, il);
    return rc ? rc : eng_synth_ffn_tensors(c, il, true);
}

static const eng_synth_arch recurrent_synth = {
    .name = "recurrent", .groups = SY_SSM,
    .check = rec_check, .meta = rec_meta, .layer = rec_layer,
    .presets = {
        {.D = 64, .L = 2, .ctx = 4096, .N = 16, .P = 32, .NG = 1, .K = 4},
        {.D = 256, .L = 8, .ctx = 16384, .N = 64, .P = 64, .NG = 1, .K = 4},
        {.D = 1024, .L = 24, .ctx = 8192, .N = 64, .P = 64, .NG = 1, .K = 4},
        {.D = 64, .L = 2, .ctx = 262144, .N = 16, .P = 32, .NG = 1, .K = 4},
    },
};

static const eng_synth_arch hybrid_synth = {
    .name = "hybrid", .groups = SY_HEADS | SY_FF | SY_EVERY | SY_SSM,
    .check = hybrid_check, .meta = hybrid_meta, .layer = hybrid_layer,
    .presets = {
        {.D = 64, .L = 4, .H = 4, .G = 2, .F = 176, .ctx = 4096, .every = 2, .N = 16, .P = 32, .NG = 1, .K = 4},
        {.D = 256, .L = 8, .H = 8, .G = 4, .F = 704, .ctx = 16384, .every = 4, .N = 64, .P = 64, .NG = 1, .K = 4},
        {.D = 1024, .L = 12, .H = 16, .G = 8, .F = 2816, .ctx = 8192, .every = 4, .N = 64, .P = 64, .NG = 1, .K = 4},
        {.D = 64, .L = 2, .H = 2, .G = 1, .F = 176, .ctx = 262144, .every = 2, .N = 16, .P = 32, .NG = 1, .K = 4},
    },
};

static const eng_arch mamba2_arch = {.name = "mamba2", .hparams = mamba2_hparams, .synth = &recurrent_synth};
static const eng_arch granitehybrid_arch = {
    .name = "granitehybrid", .hparams = granitehybrid_hparams, .synth = &hybrid_synth,
};
static const eng_arch *const mamba2_archs[] = {&mamba2_arch, &granitehybrid_arch, NULL};

const eng_layer_ops eng_kind_mamba2 = {
    .name = "mamba2",
    .kind = ENG_LAYER_RECURRENT,
    .archs = mamba2_archs,
    .load = mamba2_load,
    .free = mamba2_free,
    .n_params = mamba2_n_params,
    .token_flops = mamba2_token_flops,
    .pos_flops = NULL,
    .prepare = mamba2_prepare,
    .ws_free = mamba2_ws_free,
    .forward = mamba2_forward,
    .mem_new = mamba2_mem_new,
    .mem_free = mamba2_mem_free,
    .mem_clear = mamba2_mem_clear,
    .can_truncate = mamba2_can_truncate,
    .truncate = NULL,
    .copy = mamba2_copy,
    .compare = mamba2_compare,
    .ser_bytes = mamba2_state_bytes,
    .ser_save = mamba2_state_save,
    .ser_load = mamba2_state_load,
    .ckpt_bytes = mamba2_state_bytes,
    .ckpt_save = mamba2_state_save,
    .ckpt_load = mamba2_state_load,
};
