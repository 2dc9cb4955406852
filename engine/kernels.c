/*
 * engine/kernels.c: matrix products (blas and ref) and the shared row-wise
 * ops of the forward pass. See kernels.h for the numerical contract.
 *
 * Determinism: every function writes each output element from a fixed
 * sequence of float operations that depends only on that element's inputs,
 * never on how rows or columns are split between threads, and never reads
 * memory it has not written or been given. OpenMP regions use exactly the
 * thread count of the context (num_threads clause); OpenBLAS's own thread
 * count is set by the caller (forward.c) before each forward pass.
 */
#include "kernels.h"

#include <cblas.h>
#include <math.h>
#include <stdlib.h>

#include "status.h"

/* ref kernel blocking: RB activation rows x CB output columns per register
 * block. CB is a multiple of the SIMD width; W^T is padded to a multiple of CB. */
#define REF_RB 4
#define REF_CB 16

/* Rounds n floats to bf16 in place. */
static void round_vec(float *x, int64_t n) {
    #pragma omp simd
    for (int64_t i = 0; i < n; i++) x[i] = eng_bf16_round(x[i]);
}

void eng_k_round(const eng_kctx *ctx, float *x, int64_t n) {
    if (ctx->bf16) round_vec(x, n);
}

static void round_rows(const eng_kctx *ctx, float *Y, int32_t M, int32_t N, int32_t ldy) {
    if (!ctx->bf16) return;
    for (int32_t i = 0; i < M; i++) round_vec(Y + (int64_t)i * ldy, N);
}

// ----------------------------------------------------------------------------
// Weight layouts

int eng_kmat_init(eng_kmat *m, const float *w, int32_t n_out, int32_t n_in, bool bf16) {
    memset(m, 0, sizeof *m);
    const int32_t npad = (n_out + REF_CB - 1) / REF_CB * REF_CB;
    m->n_out = n_out;
    m->n_in = n_in;
    m->ld = npad;
    m->kn = true;
    m->data = calloc((size_t)n_in * (size_t)npad, sizeof(float));
    if (!m->data) return ENG_ERR_NOMEM;
    /* Transpose in tiles so that both sides stay in cache. */
    for (int32_t j0 = 0; j0 < n_out; j0 += 64)
        for (int32_t k0 = 0; k0 < n_in; k0 += 64)
            for (int32_t j = j0; j < n_out && j < j0 + 64; j++)
                for (int32_t k = k0; k < n_in && k < k0 + 64; k++) {
                    const float v = w[(int64_t)j * n_in + k];
                    m->data[(int64_t)k * npad + j] = bf16 ? eng_bf16_round(v) : v;
                }
    m->owned = true;
    return ENG_OK;
}

void eng_kmat_view(eng_kmat *m, float *w, int32_t n_out, int32_t n_in) {
    m->n_out = n_out;
    m->n_in = n_in;
    m->ld = n_in;
    m->kn = false;
    m->owned = false;
    m->data = w;
}

void eng_kmat_free(eng_kmat *m) {
    if (!m) return;
    if (m->owned) free(m->data);
    memset(m, 0, sizeof *m);
}

// ----------------------------------------------------------------------------
// The ref product: one accumulator per output, k ascending, vectorised
// across the CB outputs of a block

/* REF_RB rows x REF_CB columns. */
static void ref_block_full(int32_t K, const float *X, int32_t ldx, const float *Wt, int32_t ldw,
                           float acc[REF_RB][REF_CB]) {
    for (int r = 0; r < REF_RB; r++)
        for (int c = 0; c < REF_CB; c++) acc[r][c] = 0.0f;
    for (int32_t k = 0; k < K; k++) {
        const float *w = Wt + (int64_t)k * ldw;
        for (int r = 0; r < REF_RB; r++) {
            const float xv = X[(int64_t)r * ldx + k];
            for (int c = 0; c < REF_CB; c++) acc[r][c] += xv * w[c];
        }
    }
}

/* One row x REF_CB columns: the same sequence of operations per element. */
static void ref_block_row(int32_t K, const float *x, const float *Wt, int32_t ldw, float acc[REF_CB]) {
    for (int c = 0; c < REF_CB; c++) acc[c] = 0.0f;
    for (int32_t k = 0; k < K; k++) {
        const float *w = Wt + (int64_t)k * ldw;
        const float xv = x[k];
        for (int c = 0; c < REF_CB; c++) acc[c] += xv * w[c];
    }
}

static void ref_matmul(const eng_kctx *ctx, const eng_kmat *W, int32_t M, const float *X, int32_t ldx,
                       float *Y, int32_t ldy) {
    const int32_t N = W->n_out, K = W->n_in;
    const int32_t n_cb = (N + REF_CB - 1) / REF_CB;
    #pragma omp parallel for num_threads(ctx->n_threads) schedule(static)
    for (int32_t cb = 0; cb < n_cb; cb++) {
        const int32_t j0 = cb * REF_CB;
        const int32_t nc = N - j0 < REF_CB ? N - j0 : REF_CB;
        const float *Wt = W->data + j0;
        int32_t i = 0;
        for (; i + REF_RB <= M; i += REF_RB) {
            float acc[REF_RB][REF_CB];
            ref_block_full(K, X + (int64_t)i * ldx, ldx, Wt, W->ld, acc);
            for (int r = 0; r < REF_RB; r++) memcpy(Y + (int64_t)(i + r) * ldy + j0, acc[r], sizeof(float) * (size_t)nc);
        }
        for (; i < M; i++) {
            float acc[REF_CB];
            ref_block_row(K, X + (int64_t)i * ldx, Wt, W->ld, acc);
            memcpy(Y + (int64_t)i * ldy + j0, acc, sizeof(float) * (size_t)nc);
        }
    }
}

void eng_k_matmul(const eng_kctx *ctx, const eng_kmat *W, int32_t M, const float *X, int32_t ldx,
                  float *Y, int32_t ldy) {
    ENG_ASSERT(M >= 1 && ldy >= W->n_out && ldx >= W->n_in);
    if (ctx->kernel == ENG_KERNEL_BLAS) {
        cblas_sgemm(CblasRowMajor, CblasNoTrans, W->kn ? CblasNoTrans : CblasTrans, M, W->n_out, W->n_in, 1.0f,
                    X, ldx, W->data, W->ld, 0.0f, Y, ldy);
    } else {
        ENG_ASSERT(W->kn);
        ref_matmul(ctx, W, M, X, ldx, Y, ldy);
    }
    round_rows(ctx, Y, M, W->n_out, ldy);
}

// ----------------------------------------------------------------------------
// Attention products of one head

/* Fixed-order dot product: s = 0; s += a[e]*b[e], e ascending. */
static float dot_fixed(const float *a, const float *b, int32_t n) {
    float s = 0.0f;
    for (int32_t e = 0; e < n; e++) s += a[e] * b[e];
    return s;
}

void eng_k_attn_scores(const eng_kctx *ctx, int32_t R, int32_t T, int32_t pos0, int32_t E, const float *Q,
                       int32_t ldq, const float *K, int32_t ldk, float *S, int32_t lds) {
    const int32_t P = pos0 + T;
    if (ctx->kernel == ENG_KERNEL_BLAS) {
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, R, P, E, 1.0f, Q, ldq, K, ldk, 0.0f, S, lds);
        return;
    }
    #pragma omp parallel for num_threads(ctx->n_threads) schedule(static)
    for (int32_t r = 0; r < R; r++) {
        const float *q = Q + (int64_t)r * ldq;
        float *s = S + (int64_t)r * lds;
        const int32_t n = pos0 + r % T + 1;
        for (int32_t j = 0; j < n; j++) s[j] = dot_fixed(q, K + (int64_t)j * ldk, E);
    }
}

void eng_k_attn_values(const eng_kctx *ctx, int32_t R, int32_t T, int32_t pos0, int32_t E, const float *Pr,
                       int32_t lds, const float *V, int32_t ldv, float *O, int32_t ldo) {
    const int32_t P = pos0 + T;
    if (ctx->kernel == ENG_KERNEL_BLAS) {
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, R, E, P, 1.0f, Pr, lds, V, ldv, 0.0f, O, ldo);
    } else {
        #pragma omp parallel for num_threads(ctx->n_threads) schedule(static)
        for (int32_t r = 0; r < R; r++) {
            const float *p = Pr + (int64_t)r * lds;
            float *o = O + (int64_t)r * ldo;
            const int32_t n = pos0 + r % T + 1;
            for (int32_t e = 0; e < E; e++) o[e] = 0.0f;
            for (int32_t j = 0; j < n; j++) {
                const float pj = p[j];
                const float *v = V + (int64_t)j * ldv;
                for (int32_t e = 0; e < E; e++) o[e] += pj * v[e];  /* per e: j ascending */
            }
        }
    }
    round_rows(ctx, O, R, E, ldo);
}

// ----------------------------------------------------------------------------
// Shared row-wise ops

void eng_k_rmsnorm(const eng_kctx *ctx, int32_t T, int32_t D, const float *X, int32_t ldx,
                   const float *w, float eps, float *Y, int32_t ldy) {
    #pragma omp parallel for num_threads(ctx->n_threads_ew) schedule(static) if (ctx->n_threads_ew > 1)
    for (int32_t t = 0; t < T; t++) {
        const float *x = X + (int64_t)t * ldx;
        float *y = Y + (int64_t)t * ldy;
        double sum = 0.0;
        for (int32_t i = 0; i < D; i++) sum += (double)(x[i] * x[i]);
        const float mean = (float)(sum / D);
        const float scale = 1.0f / sqrtf(mean + eps);
        for (int32_t i = 0; i < D; i++) {
            float v = (x[i] * scale) * w[i];
            y[i] = ctx->bf16 ? eng_bf16_round(v) : v;
        }
    }
}

void eng_k_rope_table(int32_t T, int32_t pos0, int32_t n_rot, float base, float *cs, float *sn) {
    const int32_t half = n_rot / 2;
    const float theta_scale = powf(base, -2.0f / (float)n_rot);
    for (int32_t t = 0; t < T; t++) {
        float theta = (float)(pos0 + t);
        for (int32_t i = 0; i < half; i++) {
            cs[(int64_t)t * half + i] = cosf(theta);
            sn[(int64_t)t * half + i] = sinf(theta);
            theta *= theta_scale;
        }
    }
}

void eng_k_rope(const eng_kctx *ctx, int32_t T, int32_t n_head, int32_t E, int32_t n_rot,
                const float *cs, const float *sn, float *X, int32_t ldx) {
    const int32_t half = n_rot / 2;
    #pragma omp parallel for num_threads(ctx->n_threads_ew) schedule(static) if (ctx->n_threads_ew > 1)
    for (int32_t t = 0; t < T; t++) {
        const float *c = cs + (int64_t)t * half, *s = sn + (int64_t)t * half;
        for (int32_t h = 0; h < n_head; h++) {
            float *x = X + (int64_t)t * ldx + (int64_t)h * E;
            for (int32_t i = 0; i < half; i++) {
                const float x0 = x[2 * i], x1 = x[2 * i + 1];
                float y0 = x0 * c[i] - x1 * s[i];
                float y1 = x0 * s[i] + x1 * c[i];
                x[2 * i] = ctx->bf16 ? eng_bf16_round(y0) : y0;
                x[2 * i + 1] = ctx->bf16 ? eng_bf16_round(y1) : y1;
            }
        }
    }
}

/* Softmax of one row's n attended scores, in place (see kernels.h). The
 * `omp simd` loops are element-wise (no reduction clause): they let GCC
 * vectorise eng_expf without changing any element's operations. The max
 * and the sum use 8 explicit lanes (lane j % 8, ascending j). */
static void softmax_row(float *s, int32_t n, float scale, bool bf16) {
    #pragma omp simd
    for (int32_t j = 0; j < n; j++) s[j] = s[j] * scale;
    if (bf16) round_vec(s, n);
    float m8[8], a8[8];
    for (int c = 0; c < 8; c++) { m8[c] = -INFINITY; a8[c] = 0.0f; }
    const int32_t n8 = n / 8 * 8;
    for (int32_t j = 0; j < n8; j += 8)
        for (int c = 0; c < 8; c++) m8[c] = s[j + c] > m8[c] ? s[j + c] : m8[c];
    for (int32_t j = n8; j < n; j++) m8[j & 7] = s[j] > m8[j & 7] ? s[j] : m8[j & 7];
    float mx = m8[0];
    for (int c = 1; c < 8; c++) mx = m8[c] > mx ? m8[c] : mx;
    #pragma omp simd
    for (int32_t j = 0; j < n; j++) s[j] = eng_expf(s[j] - mx);
    for (int32_t j = 0; j < n8; j += 8)
        for (int c = 0; c < 8; c++) a8[c] += s[j + c];
    for (int32_t j = n8; j < n; j++) a8[j & 7] += s[j];
    const float sum = ((a8[0] + a8[1]) + (a8[2] + a8[3])) + ((a8[4] + a8[5]) + (a8[6] + a8[7]));
    const float inv = 1.0f / sum;
    #pragma omp simd
    for (int32_t j = 0; j < n; j++) s[j] = s[j] * inv;
    if (bf16) round_vec(s, n);
}

void eng_k_softmax_causal(const eng_kctx *ctx, int32_t R, int32_t T, int32_t pos0, float scale, float *S,
                          int32_t lds) {
    const int32_t P = pos0 + T;
    #pragma omp parallel for num_threads(ctx->n_threads_ew) schedule(static) if (ctx->n_threads_ew > 1)
    for (int32_t r = 0; r < R; r++) {
        float *s = S + (int64_t)r * lds;
        const int32_t n = pos0 + r % T + 1;  /* keys attended */
        softmax_row(s, n, scale, ctx->bf16);
        for (int32_t j = n; j < P; j++) s[j] = 0.0f;
    }
}

void eng_k_swiglu(const eng_kctx *ctx, int32_t T, int32_t F, const float *GU, int32_t ldgu, float *H,
                  int32_t ldh) {
    #pragma omp parallel for num_threads(ctx->n_threads_ew) schedule(static) if (ctx->n_threads_ew > 1)
    for (int32_t t = 0; t < T; t++) {
        const float *g = GU + (int64_t)t * ldgu, *u = g + F;
        float *h = H + (int64_t)t * ldh;
        #pragma omp simd
        for (int32_t f = 0; f < F; f++) h[f] = (g[f] / (1.0f + eng_expf(-g[f]))) * u[f];
        if (ctx->bf16) round_vec(h, F);
    }
}

void eng_k_add(const eng_kctx *ctx, int32_t T, int32_t D, float *X, int32_t ldx, const float *Y, int32_t ldy) {
    for (int32_t t = 0; t < T; t++) {
        float *x = X + (int64_t)t * ldx;
        const float *y = Y + (int64_t)t * ldy;
        for (int32_t i = 0; i < D; i++) {
            const float v = x[i] + y[i];
            x[i] = ctx->bf16 ? eng_bf16_round(v) : v;
        }
    }
}
