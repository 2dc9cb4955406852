/*
 * engine/ssm.c: the Mamba-2 mixer of one chunk (see ssm.h for the
 * semantics and the numerical contract of each kernel).
 *
 * Determinism: every output element is a fixed sequence of float
 * operations on its inputs. Work is split across heads (scan) or tokens
 * (conv, gate) with eng_k_parallel_rows; no element's operations depend on
 * the split. The blas scan's products run single-threaded inside each
 * head's work, so their results do not depend on the thread count either.
 * The ref scan vectorises across the head dimension P: each lane is one
 * (h, p) with its own sequential loop over the state index n.
 */
#include "ssm.h"

#include <cblas.h>
#include <math.h>
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
    const eng_ssm_hparams *hp;
    const eng_ssm_weights *w;
    bool bf16;
    const float *xbc, *zxbcdt;
    float *y;
} gate_args;

/* Tokens [t0, t1): y = round(round(y + x*D_h) * silu(z)) (ggml: add, mul, swiglu_split). */
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
    openblas_set_num_threads(1);
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
    openblas_set_num_threads(ctx->n_threads);
}

// ----------------------------------------------------------------------------
// The mixer of one chunk

int eng_ssm_forward(const eng_kctx *ctx, const eng_ssm_hparams *hp, const eng_ssm_weights *w, eng_ssm_state *st,
                    int32_t T, const float *xn, int32_t ldx, float *out, int32_t ldo, eng_ssm_ws *ws) {
    ENG_ASSERT(T >= 1);
    int rc = eng_ssm_ws_reserve(ws, hp, T);
    if (rc != ENG_OK) return rc;
    const int32_t NI = hp->d_inner, CD = hp->conv_dim, K = hp->d_conv, DP = hp->d_in_proj;

    eng_k_matmul(ctx, &w->in_proj, T, xn, ldx, ws->zxbcdt, DP);  /* [T, z | xBC | dt] */

    /* conv input: the state's K-1 rows, then this chunk's xBC rows */
    const int64_t nc = eng_ssm_state_floats_conv(hp);
    if (nc > 0) memcpy(ws->xpad, st->conv, sizeof(float) * (size_t)nc);
    for (int32_t t = 0; t < T; t++)
        memcpy(ws->xpad + (int64_t)(K - 1 + t) * CD, ws->zxbcdt + (int64_t)t * DP + NI, sizeof(float) * (size_t)CD);
    conv_args ca = {.hp = hp, .w = w, .bf16 = ctx->bf16, .xpad = ws->xpad, .xbc = ws->xbc,
                    .zxbcdt = ws->zxbcdt, .dt = ws->dt};
    eng_k_parallel_rows(ctx, T, conv_rows, &ca);
    if (nc > 0) memcpy(st->conv, ws->xpad + (int64_t)T * CD, sizeof(float) * (size_t)nc);

    scan_args sa = {.hp = hp, .w = w, .T = T, .xbc = ws->xbc, .dt = ws->dt, .y = ws->y, .S = st->ssm,
                    .blk = ws->blk, .gcb = ws->gcb};
    if (ctx->kernel == ENG_KERNEL_BLAS && T > 1) scan_ssd(ctx, &sa);
    else eng_k_parallel_rows(ctx, hp->n_head, scan_seq_heads, &sa);

    gate_args ga = {.hp = hp, .w = w, .bf16 = ctx->bf16, .xbc = ws->xbc, .zxbcdt = ws->zxbcdt, .y = ws->y};
    eng_k_parallel_rows(ctx, T, gate_rows, &ga);
    const int32_t gs = NI / hp->n_group;
    for (int32_t g = 0; g < hp->n_group; g++)
        eng_k_rmsnorm(ctx, T, gs, ws->y + (int64_t)g * gs, NI, w->norm_w + (int64_t)g * gs, hp->eps,
                      ws->yn + (int64_t)g * gs, NI);
    eng_k_matmul(ctx, &w->out_proj, T, ws->yn, NI, out, ldo);
    return ENG_OK;
}
