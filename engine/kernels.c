/*
 * engine/kernels.c: matrix products (blas and ref) and the shared row-wise
 * ops of the forward pass. See kernels.h for the numerical contract.
 *
 * Determinism: every function writes each output element from a fixed
 * sequence of float operations that depends only on that element's inputs,
 * never on how rows or columns are split between threads, and never reads
 * memory it has not written or been given. Parallel loops run on the
 * model's pool with exactly the context's thread count (the `omp simd`
 * pragmas only let GCC vectorise element-wise loops; no OpenMP threads are
 * used); OpenBLAS's own thread count is set by the caller (forward.c)
 * before each forward pass.
 *
 * The pool: the caller publishes (fn, arg, n_rows), bumps a generation
 * counter and wakes the workers; each runs its static range and decrements
 * `pending`; the caller runs range 0 and waits for pending == 0. Waits poll
 * briefly, then sleep on condition variables (no lost wake-ups: the
 * predicates are re-checked under the mutex).
 */
#include "kernels.h"

#include <cblas.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>

#include "status.h"

/* ref kernel blocking: REF_RB activation rows x REF_CB output columns per
 * register block (6 x 16: 12 accumulators of 8 floats). W^T is padded to a
 * multiple of REF_CB columns. */
#define REF_RB 6
#define REF_CB 16

/* 8 floats as one value (GCC/Clang vector extension): element-wise IEEE
 * arithmetic, the same operations as a scalar loop over the 8 lanes, but
 * kept in registers. */
typedef float v8f __attribute__((vector_size(32)));

static inline v8f v8_splat(float x) {
    const v8f v = {x, x, x, x, x, x, x, x};
    return v;
}

static inline v8f v8_load(const float *p) {
    v8f v;
    memcpy(&v, p, sizeof v);
    return v;
}

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
// The row-parallel dispatcher and the blas kernel's pool

#define POOL_SPIN 100  /* polls (with a pause) before a thread sleeps: a few microseconds */

/* Below this many element operations a row-parallel op runs on the caller
 * alone: waking threads would cost more than the work. */
#define PAR_MIN_WORK 32768

static inline void cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
}

struct eng_pool {
    int32_t         n;        /* threads, the caller included */
    pthread_t      *th;       /* [n - 1] workers */
    pthread_mutex_t mu;
    pthread_cond_t  cv_start, cv_done;
    atomic_uint     gen;      /* job generation, bumped per job */
    atomic_int      pending;  /* workers still running the current job */
    bool            quit;     /* under mu */
    void          (*fn)(void *, int32_t, int32_t);
    void           *arg;
    int32_t         n_rows;
};

typedef struct pool_worker_arg {
    eng_pool *p;
    int32_t   ith;
} pool_worker_arg;

static void pool_range(int32_t n_rows, int32_t ith, int32_t nth, int32_t *r0, int32_t *r1) {
    *r0 = (int32_t)((int64_t)n_rows * ith / nth);
    *r1 = (int32_t)((int64_t)n_rows * (ith + 1) / nth);
}

static void *pool_worker(void *v) {
    pool_worker_arg *a = v;
    eng_pool *p = a->p;
    const int32_t ith = a->ith;
    free(a);
    unsigned seen = 0;
    for (;;) {
        unsigned g = atomic_load(&p->gen);
        for (int s = 0; g == seen && s < POOL_SPIN; s++) {
            cpu_relax();
            g = atomic_load(&p->gen);
        }
        if (g == seen) {
            pthread_mutex_lock(&p->mu);
            while ((g = atomic_load(&p->gen)) == seen && !p->quit) pthread_cond_wait(&p->cv_start, &p->mu);
            const bool quit = p->quit;
            pthread_mutex_unlock(&p->mu);
            if (quit) return NULL;
        }
        seen = g;
        int32_t r0, r1;
        pool_range(p->n_rows, ith, p->n, &r0, &r1);
        if (r1 > r0) p->fn(p->arg, r0, r1);
        if (atomic_fetch_sub(&p->pending, 1) == 1) {
            pthread_mutex_lock(&p->mu);
            pthread_cond_signal(&p->cv_done);
            pthread_mutex_unlock(&p->mu);
        }
    }
}

eng_pool *eng_pool_new(int32_t n_threads) {
    if (n_threads < 2) return NULL;
    eng_pool *p = calloc(1, sizeof *p);
    if (!p) return NULL;
    p->n = n_threads;
    p->th = calloc((size_t)n_threads - 1, sizeof *p->th);
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->cv_start, NULL);
    pthread_cond_init(&p->cv_done, NULL);
    atomic_init(&p->gen, 0u);
    atomic_init(&p->pending, 0);
    if (!p->th) { free(p); return NULL; }
    for (int32_t i = 1; i < n_threads; i++) {
        pool_worker_arg *a = malloc(sizeof *a);
        if (a) { a->p = p; a->ith = i; }
        if (!a || pthread_create(&p->th[i - 1], NULL, pool_worker, a) != 0) {
            free(a);
            p->n = i;  /* join the ones started */
            eng_pool_free(p);
            return NULL;
        }
    }
    return p;
}

void eng_pool_free(eng_pool *p) {
    if (!p) return;
    pthread_mutex_lock(&p->mu);
    p->quit = true;
    pthread_cond_broadcast(&p->cv_start);
    pthread_mutex_unlock(&p->mu);
    for (int32_t i = 1; i < p->n; i++) pthread_join(p->th[i - 1], NULL);
    pthread_mutex_destroy(&p->mu);
    pthread_cond_destroy(&p->cv_start);
    pthread_cond_destroy(&p->cv_done);
    free(p->th);
    free(p);
}

static void pool_run(eng_pool *p, int32_t n_rows, void (*fn)(void *, int32_t, int32_t), void *arg) {
    p->fn = fn;
    p->arg = arg;
    p->n_rows = n_rows;
    atomic_store(&p->pending, p->n - 1);
    pthread_mutex_lock(&p->mu);
    atomic_fetch_add(&p->gen, 1u);  /* publishes fn, arg, n_rows (seq_cst) */
    pthread_cond_broadcast(&p->cv_start);
    pthread_mutex_unlock(&p->mu);
    int32_t r0, r1;
    pool_range(n_rows, 0, p->n, &r0, &r1);
    if (r1 > r0) fn(arg, r0, r1);
    for (int s = 0; atomic_load(&p->pending) > 0 && s < POOL_SPIN; s++) cpu_relax();
    if (atomic_load(&p->pending) > 0) {
        pthread_mutex_lock(&p->mu);
        while (atomic_load(&p->pending) > 0) pthread_cond_wait(&p->cv_done, &p->mu);
        pthread_mutex_unlock(&p->mu);
    }
}

void eng_k_parallel_rows(const eng_kctx *ctx, int32_t n_rows, void (*fn)(void *arg, int32_t r0, int32_t r1),
                         void *arg) {
    if (n_rows <= 0) return;
    if (ctx->n_threads <= 1 || n_rows == 1 || !ctx->pool) {
        fn(arg, 0, n_rows);
        return;
    }
    pool_run(ctx->pool, n_rows, fn, arg);
}

void eng_k_parallel_rows_cost(const eng_kctx *ctx, int32_t n_rows, int64_t row_cost,
                              void (*fn)(void *arg, int32_t r0, int32_t r1), void *arg) {
    if ((int64_t)n_rows * row_cost < PAR_MIN_WORK) {
        if (n_rows > 0) fn(arg, 0, n_rows);
        return;
    }
    eng_k_parallel_rows(ctx, n_rows, fn, arg);
}

// ----------------------------------------------------------------------------
// Weight layouts

static int kmat_build(eng_kmat *m, const float *w, int32_t n_out, int32_t n_in, bool panels, bool bf16) {
    memset(m, 0, sizeof *m);
    const int32_t npad = (n_out + REF_CB - 1) / REF_CB * REF_CB;
    m->n_out = n_out;
    m->n_in = n_in;
    m->ld = npad;
    m->kn = true;
    m->panels = panels;
    m->data = calloc((size_t)n_in * (size_t)npad, sizeof(float));
    if (!m->data) return ENG_ERR_NOMEM;
    /* W^T element (k, j) lives at k*npad + j (kn) or at panel j/16, row k, column j%16 */
    for (int32_t j0 = 0; j0 < n_out; j0 += 64)
        for (int32_t k0 = 0; k0 < n_in; k0 += 64)
            for (int32_t j = j0; j < n_out && j < j0 + 64; j++)
                for (int32_t k = k0; k < n_in && k < k0 + 64; k++) {
                    const float v = w[(int64_t)j * n_in + k];
                    const int64_t at = panels ? ((int64_t)(j / REF_CB) * n_in + k) * REF_CB + j % REF_CB
                                              : (int64_t)k * npad + j;
                    m->data[at] = bf16 ? eng_bf16_round(v) : v;
                }
    m->owned = true;
    return ENG_OK;
}

int eng_kmat_init(eng_kmat *m, const float *w, int32_t n_out, int32_t n_in, bool bf16) {
    return kmat_build(m, w, n_out, n_in, false, bf16);
}

int eng_kmat_init_for(eng_kmat *m, const float *w, int32_t n_out, int32_t n_in, eng_kernel kernel, bool bf16) {
    return kmat_build(m, w, n_out, n_in, kernel == ENG_KERNEL_REF, bf16);
}

void eng_kmat_view(eng_kmat *m, float *w, int32_t n_out, int32_t n_in) {
    m->n_out = n_out;
    m->n_in = n_in;
    m->ld = n_in;
    m->kn = false;
    m->panels = false;
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

/* REF_RB rows x REF_CB columns: acc[r][c] = sum over k ascending of x[r][k] * w[k][c],
 * one accumulator per element starting at +0 (multiply, then add). */
static void ref_block_full(int32_t K, const float *X, int32_t ldx, const float *Wt, int32_t ldw,
                           float out[REF_RB][REF_CB]) {
    v8f a00 = {0}, a01 = {0}, a10 = {0}, a11 = {0}, a20 = {0}, a21 = {0};
    v8f a30 = {0}, a31 = {0}, a40 = {0}, a41 = {0}, a50 = {0}, a51 = {0};
    const float *x0 = X, *x1 = X + ldx, *x2 = X + 2 * (int64_t)ldx;
    const float *x3 = X + 3 * (int64_t)ldx, *x4 = X + 4 * (int64_t)ldx, *x5 = X + 5 * (int64_t)ldx;
    for (int32_t k = 0; k < K; k++) {
        const float *w = Wt + (int64_t)k * ldw;
        const v8f w0 = v8_load(w), w1 = v8_load(w + 8);
        v8f b;
        b = v8_splat(x0[k]); a00 = a00 + b * w0; a01 = a01 + b * w1;
        b = v8_splat(x1[k]); a10 = a10 + b * w0; a11 = a11 + b * w1;
        b = v8_splat(x2[k]); a20 = a20 + b * w0; a21 = a21 + b * w1;
        b = v8_splat(x3[k]); a30 = a30 + b * w0; a31 = a31 + b * w1;
        b = v8_splat(x4[k]); a40 = a40 + b * w0; a41 = a41 + b * w1;
        b = v8_splat(x5[k]); a50 = a50 + b * w0; a51 = a51 + b * w1;
    }
    const v8f acc[REF_RB][2] = {{a00, a01}, {a10, a11}, {a20, a21}, {a30, a31}, {a40, a41}, {a50, a51}};
    memcpy(out, acc, sizeof acc);
}

/* One row x REF_CB columns: the same sequence of operations per element. */
static void ref_block_row(int32_t K, const float *x, const float *Wt, int32_t ldw, float out[REF_CB]) {
    v8f a0 = {0}, a1 = {0};
    for (int32_t k = 0; k < K; k++) {
        const float *w = Wt + (int64_t)k * ldw;
        const v8f b = v8_splat(x[k]);
        a0 = a0 + b * v8_load(w);
        a1 = a1 + b * v8_load(w + 8);
    }
    memcpy(out, &a0, sizeof a0);
    memcpy(out + 8, &a1, sizeof a1);
}

typedef struct ref_matmul_args {
    const eng_kmat *W;
    int32_t M, ldx, ldy;
    const float *X;
    float *Y;
} ref_matmul_args;

/* Column blocks [cb0, cb1) of the product, every row. */
static void ref_matmul_cols(void *v, int32_t cb0, int32_t cb1) {
    const ref_matmul_args *a = v;
    const int32_t N = a->W->n_out, K = a->W->n_in, M = a->M;
    for (int32_t cb = cb0; cb < cb1; cb++) {
        const int32_t j0 = cb * REF_CB;
        const int32_t nc = N - j0 < REF_CB ? N - j0 : REF_CB;
        const float *Wt = a->W->panels ? a->W->data + (int64_t)cb * K * REF_CB : a->W->data + j0;
        const int32_t ldw = a->W->panels ? REF_CB : a->W->ld;
        int32_t i = 0;
        for (; i + REF_RB <= M; i += REF_RB) {
            float acc[REF_RB][REF_CB];
            ref_block_full(K, a->X + (int64_t)i * a->ldx, a->ldx, Wt, ldw, acc);
            for (int r = 0; r < REF_RB; r++)
                memcpy(a->Y + (int64_t)(i + r) * a->ldy + j0, acc[r], sizeof(float) * (size_t)nc);
        }
        for (; i < M; i++) {
            float acc[REF_CB];
            ref_block_row(K, a->X + (int64_t)i * a->ldx, Wt, ldw, acc);
            memcpy(a->Y + (int64_t)i * a->ldy + j0, acc, sizeof(float) * (size_t)nc);
        }
    }
}

static void ref_matmul(const eng_kctx *ctx, const eng_kmat *W, int32_t M, const float *X, int32_t ldx,
                       float *Y, int32_t ldy) {
    ref_matmul_args a = {.W = W, .M = M, .ldx = ldx, .ldy = ldy, .X = X, .Y = Y};
    const int32_t n_cb = (W->n_out + REF_CB - 1) / REF_CB;
    eng_k_parallel_rows_cost(ctx, n_cb, (int64_t)M * REF_CB * W->n_in, ref_matmul_cols, &a);
}

void eng_k_matmul(const eng_kctx *ctx, const eng_kmat *W, int32_t M, const float *X, int32_t ldx,
                  float *Y, int32_t ldy) {
    ENG_ASSERT(M >= 1 && ldy >= W->n_out && ldx >= W->n_in);
    if (ctx->kernel == ENG_KERNEL_BLAS) {
        ENG_ASSERT(!W->panels);
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

typedef struct ref_attn_args {
    int32_t T, pos0, E, ldq, ldk, lds, ldo;
    const float *Q, *K, *Pr;
    float *S, *O;
} ref_attn_args;

/* Scores of rows [r0, r1), vectorised across 8 keys at a time: a block of
 * 8 key rows is transposed to kt[E][8], then each query row accumulates
 * q[e] * kt[e][0..7] for e ascending, one lane per key: the same operations
 * per score as dot_fixed. Keys past a row's causal end are never computed. */
#define REF_KT_MAX_E 512
static void ref_scores_rows(void *v, int32_t r0, int32_t r1) {
    const ref_attn_args *a = v;
    const int32_t E = a->E, T = a->T;
    int32_t n_max = 0;
    for (int32_t r = r0; r < r1; r++) {
        const int32_t n = a->pos0 + r % T + 1;
        if (n > n_max) n_max = n;
    }
    float kt[REF_KT_MAX_E * 8];
    for (int32_t j0 = 0; j0 < n_max; j0 += 8) {
        const bool full = j0 + 8 <= n_max && E <= REF_KT_MAX_E;
        if (full)
            for (int32_t c = 0; c < 8; c++) {
                const float *k = a->K + (int64_t)(j0 + c) * a->ldk;
                for (int32_t e = 0; e < E; e++) kt[e * 8 + c] = k[e];
            }
        for (int32_t r = r0; r < r1; r++) {
            const float *q = a->Q + (int64_t)r * a->ldq;
            float *s = a->S + (int64_t)r * a->lds;
            const int32_t n = a->pos0 + r % T + 1;
            if (full && j0 + 8 <= n) {
                v8f acc = {0};
                for (int32_t e = 0; e < E; e++) acc = acc + v8_splat(q[e]) * v8_load(kt + e * 8);
                memcpy(s + j0, &acc, sizeof acc);
            } else {
                for (int32_t j = j0; j < n && j < j0 + 8; j++) s[j] = dot_fixed(q, a->K + (int64_t)j * a->ldk, E);
            }
        }
    }
}

/* Outputs of rows [r0, r1), vectorised across 8 output dims: o[e] = sum
 * over j ascending of p[j] * v[j][e], one accumulator per element. */
static void ref_values_rows(void *v, int32_t r0, int32_t r1) {
    const ref_attn_args *a = v;
    const int32_t E = a->E, E8 = E / 8 * 8;
    for (int32_t r = r0; r < r1; r++) {
        const float *p = a->Pr + (int64_t)r * a->lds;
        float *o = a->O + (int64_t)r * a->ldo;
        const int32_t n = a->pos0 + r % a->T + 1;
        for (int32_t e0 = 0; e0 < E8; e0 += 8) {
            v8f acc = {0};
            for (int32_t j = 0; j < n; j++) acc = acc + v8_splat(p[j]) * v8_load(a->K + (int64_t)j * a->ldk + e0);
            memcpy(o + e0, &acc, sizeof acc);
        }
        for (int32_t e = E8; e < E; e++) {
            float acc = 0.0f;
            for (int32_t j = 0; j < n; j++) acc += p[j] * a->K[(int64_t)j * a->ldk + e];
            o[e] = acc;
        }
    }
}

void eng_k_attn_scores(const eng_kctx *ctx, int32_t R, int32_t T, int32_t pos0, int32_t E, const float *Q,
                       int32_t ldq, const float *K, int32_t ldk, float *S, int32_t lds) {
    const int32_t P = pos0 + T;
    if (ctx->kernel == ENG_KERNEL_BLAS) {
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, R, P, E, 1.0f, Q, ldq, K, ldk, 0.0f, S, lds);
        return;
    }
    ref_attn_args a = {.T = T, .pos0 = pos0, .E = E, .ldq = ldq, .ldk = ldk, .lds = lds, .Q = Q, .K = K, .S = S};
    eng_k_parallel_rows_cost(ctx, R, (int64_t)P * E, ref_scores_rows, &a);
}

void eng_k_attn_values(const eng_kctx *ctx, int32_t R, int32_t T, int32_t pos0, int32_t E, const float *Pr,
                       int32_t lds, const float *V, int32_t ldv, float *O, int32_t ldo) {
    const int32_t P = pos0 + T;
    if (ctx->kernel == ENG_KERNEL_BLAS) {
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, R, E, P, 1.0f, Pr, lds, V, ldv, 0.0f, O, ldo);
    } else {
        ref_attn_args a = {.T = T, .pos0 = pos0, .E = E, .ldk = ldv, .lds = lds, .ldo = ldo, .K = V, .Pr = Pr, .O = O};
        eng_k_parallel_rows_cost(ctx, R, (int64_t)P * E, ref_values_rows, &a);
    }
    round_rows(ctx, O, R, E, ldo);
}

// ----------------------------------------------------------------------------
// Attention of one chunk

void eng_k_attention(const eng_kctx *ctx, int32_t T, int32_t pos0, int32_t H, int32_t G, int32_t E, const float *Q,
                     int32_t ldq, const float *K, const float *V, int32_t ldkv, float *O, int32_t ldo, float *wq,
                     float *wo, float *ws, int64_t ws_cap) {
    const int32_t GR = H / G, R = GR * T, P = pos0 + T;
    ENG_ASSERT(GR * G == H && ws_cap >= (int64_t)R * P);
    const float scale = 1.0f / sqrtf((float)E);
    /* queries regrouped: head h's T rows at wq + h*T*E, so KV head g's query heads are rows [g*R, (g+1)*R) */
    for (int32_t h = 0; h < H; h++)
        for (int32_t t = 0; t < T; t++)
            memcpy(wq + ((int64_t)h * T + t) * E, Q + (int64_t)t * ldq + (int64_t)h * E, sizeof(float) * (size_t)E);
    int64_t nb = ws_cap / ((int64_t)R * P);  /* KV heads per batch */
    if (nb > G) nb = G;
    for (int32_t g0 = 0; g0 < G; g0 += (int32_t)nb) {
        const int32_t g1 = g0 + (int32_t)nb < G ? g0 + (int32_t)nb : G;
        for (int32_t g = g0; g < g1; g++)
            eng_k_attn_scores(ctx, R, T, pos0, E, wq + (int64_t)g * R * E, E, K + (int64_t)g * E, ldkv,
                              ws + (int64_t)(g - g0) * R * P, P);
        eng_k_softmax_causal(ctx, (g1 - g0) * R, T, pos0, scale, ws, P);  /* one pass over the batch */
        for (int32_t g = g0; g < g1; g++) {
            float *og = wo + (int64_t)g * R * E;
            eng_k_attn_values(ctx, R, T, pos0, E, ws + (int64_t)(g - g0) * R * P, P, V + (int64_t)g * E, ldkv, og, E);
            for (int32_t hh = 0; hh < GR; hh++)  /* back to [T, H*E] */
                for (int32_t t = 0; t < T; t++)
                    memcpy(O + (int64_t)t * ldo + (int64_t)(g * GR + hh) * E, og + ((int64_t)hh * T + t) * E,
                           sizeof(float) * (size_t)E);
        }
    }
}

// ----------------------------------------------------------------------------
// Shared row-wise ops

typedef struct rmsnorm_args {
    const eng_kctx *ctx;
    int32_t D, ldx, ldy;
    const float *X, *w;
    float eps;
    float *Y;
} rmsnorm_args;

static void rmsnorm_rows(void *v, int32_t t0, int32_t t1) {
    const rmsnorm_args *a = v;
    const int32_t D = a->D;
    for (int32_t t = t0; t < t1; t++) {
        const float *x = a->X + (int64_t)t * a->ldx, *w = a->w;
        float *y = a->Y + (int64_t)t * a->ldy;
        /* sum of squares in 8 double lanes (lane i % 8, ascending i), combined pairwise */
        double l8[8] = {0, 0, 0, 0, 0, 0, 0, 0};
        const int32_t d8 = D / 8 * 8;
        for (int32_t i = 0; i < d8; i += 8)
            for (int c = 0; c < 8; c++) l8[c] += (double)(x[i + c] * x[i + c]);
        for (int32_t i = d8; i < D; i++) l8[i & 7] += (double)(x[i] * x[i]);
        const double sum = ((l8[0] + l8[1]) + (l8[2] + l8[3])) + ((l8[4] + l8[5]) + (l8[6] + l8[7]));
        const float mean = (float)(sum / D);
        const float scale = 1.0f / sqrtf(mean + a->eps);
        #pragma omp simd
        for (int32_t i = 0; i < D; i++) y[i] = (x[i] * scale) * w[i];
        if (a->ctx->bf16) round_vec(y, D);
    }
}

void eng_k_rmsnorm(const eng_kctx *ctx, int32_t T, int32_t D, const float *X, int32_t ldx,
                   const float *w, float eps, float *Y, int32_t ldy) {
    rmsnorm_args a = {.ctx = ctx, .D = D, .ldx = ldx, .ldy = ldy, .X = X, .w = w, .eps = eps, .Y = Y};
    eng_k_parallel_rows_cost(ctx, T, D, rmsnorm_rows, &a);
}

typedef struct layernorm_args {
    const eng_kctx *ctx;
    int32_t D, ldx, ldy;
    const float *X, *w, *b;
    float eps;
    float *Y;
} layernorm_args;

/* Sum of the squared deviations (x[i] - mean)^2 of n floats in 8 double lanes
 * (lane i % 8, ascending i), combined pairwise. */
static double sum8_sq_dev(const float *x, int32_t n, float mean) {
    double l8[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    const int32_t n8 = n / 8 * 8;
    for (int32_t i = 0; i < n8; i += 8)
        for (int c = 0; c < 8; c++) {
            const float d = x[i + c] - mean;
            l8[c] += (double)(d * d);
        }
    for (int32_t i = n8; i < n; i++) {
        const float d = x[i] - mean;
        l8[i & 7] += (double)(d * d);
    }
    return ((l8[0] + l8[1]) + (l8[2] + l8[3])) + ((l8[4] + l8[5]) + (l8[6] + l8[7]));
}

static void layernorm_rows(void *v, int32_t t0, int32_t t1) {
    const layernorm_args *a = v;
    const int32_t D = a->D;
    for (int32_t t = t0; t < t1; t++) {
        const float *x = a->X + (int64_t)t * a->ldx;
        float *y = a->Y + (int64_t)t * a->ldy;
        double l8[8] = {0, 0, 0, 0, 0, 0, 0, 0};
        const int32_t d8 = D / 8 * 8;
        for (int32_t i = 0; i < d8; i += 8)
            for (int c = 0; c < 8; c++) l8[c] += (double)x[i + c];
        for (int32_t i = d8; i < D; i++) l8[i & 7] += (double)x[i];
        const double sum = ((l8[0] + l8[1]) + (l8[2] + l8[3])) + ((l8[4] + l8[5]) + (l8[6] + l8[7]));
        const float mean = (float)(sum / D);
        const float var = (float)(sum8_sq_dev(x, D, mean) / D);
        const float scale = 1.0f / sqrtf(var + a->eps);
        #pragma omp simd
        for (int32_t i = 0; i < D; i++) y[i] = (x[i] - mean) * scale;
        if (a->w) {
            #pragma omp simd
            for (int32_t i = 0; i < D; i++) y[i] = y[i] * a->w[i];
        }
        if (a->b) {
            #pragma omp simd
            for (int32_t i = 0; i < D; i++) y[i] = y[i] + a->b[i];
        }
        if (a->ctx->bf16) round_vec(y, D);
    }
}

void eng_k_layernorm(const eng_kctx *ctx, int32_t T, int32_t D, const float *X, int32_t ldx, const float *w,
                     const float *b, float eps, float *Y, int32_t ldy) {
    layernorm_args a = {.ctx = ctx, .D = D, .ldx = ldx, .ldy = ldy, .X = X, .w = w, .b = b, .eps = eps, .Y = Y};
    eng_k_parallel_rows_cost(ctx, T, 2 * (int64_t)D, layernorm_rows, &a);
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

typedef struct rope_args {
    const eng_kctx *ctx;
    int32_t n_head, E, n_rot, ldx;
    const float *cs, *sn;
    float *X;
} rope_args;

static void rope_rows(void *v, int32_t t0, int32_t t1) {
    const rope_args *a = v;
    const int32_t half = a->n_rot / 2;
    const bool bf16 = a->ctx->bf16;
    for (int32_t t = t0; t < t1; t++) {
        const float *c = a->cs + (int64_t)t * half, *s = a->sn + (int64_t)t * half;
        for (int32_t h = 0; h < a->n_head; h++) {
            float *x = a->X + (int64_t)t * a->ldx + (int64_t)h * a->E;
            for (int32_t i = 0; i < half; i++) {
                const float x0 = x[2 * i], x1 = x[2 * i + 1];
                const float y0 = x0 * c[i] - x1 * s[i];
                const float y1 = x0 * s[i] + x1 * c[i];
                x[2 * i] = y0;
                x[2 * i + 1] = y1;
            }
            if (bf16) round_vec(x, a->n_rot);
        }
    }
}

void eng_k_rope(const eng_kctx *ctx, int32_t T, int32_t n_head, int32_t E, int32_t n_rot,
                const float *cs, const float *sn, float *X, int32_t ldx) {
    rope_args a = {.ctx = ctx, .n_head = n_head, .E = E, .n_rot = n_rot, .ldx = ldx, .cs = cs, .sn = sn, .X = X};
    eng_k_parallel_rows_cost(ctx, T, (int64_t)n_head * n_rot, rope_rows, &a);
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

typedef struct softmax_args {
    const eng_kctx *ctx;
    int32_t T, pos0, lds;
    float scale;
    float *S;
} softmax_args;

static void softmax_rows(void *v, int32_t r0, int32_t r1) {
    const softmax_args *a = v;
    const int32_t P = a->pos0 + a->T;
    for (int32_t r = r0; r < r1; r++) {
        float *s = a->S + (int64_t)r * a->lds;
        const int32_t n = a->pos0 + r % a->T + 1;  /* keys attended */
        softmax_row(s, n, a->scale, a->ctx->bf16);
        for (int32_t j = n; j < P; j++) s[j] = 0.0f;
    }
}

void eng_k_softmax_causal(const eng_kctx *ctx, int32_t R, int32_t T, int32_t pos0, float scale, float *S,
                          int32_t lds) {
    softmax_args a = {.ctx = ctx, .T = T, .pos0 = pos0, .lds = lds, .scale = scale, .S = S};
    eng_k_parallel_rows_cost(ctx, R, pos0 + T, softmax_rows, &a);
}

typedef struct swiglu_args {
    const eng_kctx *ctx;
    int32_t F, ldgu, ldh;
    const float *GU;
    float *H;
} swiglu_args;

static void swiglu_rows(void *v, int32_t t0, int32_t t1) {
    const swiglu_args *a = v;
    const int32_t F = a->F;
    for (int32_t t = t0; t < t1; t++) {
        const float *g = a->GU + (int64_t)t * a->ldgu, *u = g + F;
        float *h = a->H + (int64_t)t * a->ldh;
        #pragma omp simd
        for (int32_t f = 0; f < F; f++) h[f] = (g[f] / (1.0f + eng_expf(-g[f]))) * u[f];
        if (a->ctx->bf16) round_vec(h, F);
    }
}

void eng_k_swiglu(const eng_kctx *ctx, int32_t T, int32_t F, const float *GU, int32_t ldgu, float *H,
                  int32_t ldh) {
    swiglu_args a = {.ctx = ctx, .F = F, .ldgu = ldgu, .ldh = ldh, .GU = GU, .H = H};
    eng_k_parallel_rows_cost(ctx, T, 8 * (int64_t)F, swiglu_rows, &a);
}

typedef struct add_args {
    const eng_kctx *ctx;
    int32_t D, ldx, ldy;
    float *X;
    const float *Y;
} add_args;

static void add_rows(void *v, int32_t t0, int32_t t1) {
    const add_args *a = v;
    for (int32_t t = t0; t < t1; t++) {
        float *x = a->X + (int64_t)t * a->ldx;
        const float *y = a->Y + (int64_t)t * a->ldy;
        #pragma omp simd
        for (int32_t i = 0; i < a->D; i++) x[i] = x[i] + y[i];
        if (a->ctx->bf16) round_vec(x, a->D);
    }
}

void eng_k_add(const eng_kctx *ctx, int32_t T, int32_t D, float *X, int32_t ldx, const float *Y, int32_t ldy) {
    add_args a = {.ctx = ctx, .D = D, .ldx = ldx, .ldy = ldy, .X = X, .Y = Y};
    eng_k_parallel_rows_cost(ctx, T, D, add_rows, &a);
}
