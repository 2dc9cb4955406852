/*
 * engine/kernels.c: the thread pool, weight layouts, the blas products and
 * attention, the dispatch to the ref kernel (kernels_ref.c), and the shared
 * row-wise ops of the forward pass. See kernels.h for the numerical
 * contract.
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

/* Columns the blas kn layout is padded to (its ld), kept from before the ref
 * panels widened to 32 so that blas's sgemm arguments do not change. */
#define KN_PAD 16

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
    int32_t         n;          /* threads, the caller included */
    pthread_t      *th;         /* [n - 1] workers */
    pthread_mutex_t mu;
    pthread_cond_t  cv_start, cv_done;
    atomic_uint     gen;        /* job generation, bumped per job */
    atomic_uint    *claimed;    /* [n]: the generation whose range i was last claimed */
    atomic_int      remaining;  /* ranges of the current job not finished */
    bool            quit;       /* under mu */
    void          (*fn)(void *, int32_t, int32_t);
    void          (*fn_ith)(void *, int32_t, int32_t, int32_t);  /* instead of fn: told its range */
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

/* Claims range i of job generation g: true for exactly one caller. */
static bool pool_claim(eng_pool *p, int32_t i, unsigned g) {
    unsigned old = atomic_load(&p->claimed[i]);
    while ((int)(old - g) < 0)
        if (atomic_compare_exchange_weak(&p->claimed[i], &old, g)) return true;
    return false;
}

/* Runs range i of the current job (claimed by the caller) and counts it done. */
static void pool_do(eng_pool *p, int32_t i) {
    int32_t r0, r1;
    pool_range(p->n_rows, i, p->n, &r0, &r1);
    if (r1 > r0) {
        if (p->fn_ith) p->fn_ith(p->arg, i, r0, r1);
        else p->fn(p->arg, r0, r1);
    }
    if (atomic_fetch_sub(&p->remaining, 1) == 1) {
        pthread_mutex_lock(&p->mu);
        pthread_cond_signal(&p->cv_done);
        pthread_mutex_unlock(&p->mu);
    }
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
        /* A claimed range means job g is still running (the caller waits for
         * it), so fn, arg and n_rows are g's. A worker that wakes late finds
         * its range taken by the caller and skips it. */
        if (pool_claim(p, ith, g)) pool_do(p, ith);
    }
}

eng_pool *eng_pool_new(int32_t n_threads) {
    if (n_threads < 2) return NULL;
    eng_pool *p = calloc(1, sizeof *p);
    if (!p) return NULL;
    p->n = n_threads;
    p->th = calloc((size_t)n_threads - 1, sizeof *p->th);
    p->claimed = calloc((size_t)n_threads, sizeof *p->claimed);
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->cv_start, NULL);
    pthread_cond_init(&p->cv_done, NULL);
    atomic_init(&p->gen, 0u);
    atomic_init(&p->remaining, 0);
    if (!p->th || !p->claimed) { free(p->th); free(p->claimed); free(p); return NULL; }
    for (int32_t i = 0; i < n_threads; i++) atomic_init(&p->claimed[i], 0u);
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
    free(p->claimed);
    free(p->th);
    free(p);
}

/* The caller runs range 0, then every range no worker has claimed yet (a
 * worker that is asleep or descheduled, on a loaded machine, would
 * otherwise hold the whole job up), then waits for the ranges workers are
 * running. Which thread runs a range changes no result: fn treats each row
 * on its own (per-thread scratch is indexed by the range, not the thread). */
static void pool_run(eng_pool *p, int32_t n_rows, void (*fn)(void *, int32_t, int32_t),
                     void (*fn_ith)(void *, int32_t, int32_t, int32_t), void *arg) {
    p->fn = fn;
    p->fn_ith = fn_ith;
    p->arg = arg;
    p->n_rows = n_rows;
    atomic_store(&p->remaining, p->n);
    pthread_mutex_lock(&p->mu);
    const unsigned g = atomic_fetch_add(&p->gen, 1u) + 1u;  /* publishes fn, arg, n_rows (seq_cst) */
    pthread_cond_broadcast(&p->cv_start);
    pthread_mutex_unlock(&p->mu);
    if (pool_claim(p, 0, g)) pool_do(p, 0);
    for (int32_t i = 1; i < p->n; i++)
        if (pool_claim(p, i, g)) pool_do(p, i);
    for (int s = 0; atomic_load(&p->remaining) > 0 && s < POOL_SPIN; s++) cpu_relax();
    if (atomic_load(&p->remaining) > 0) {
        pthread_mutex_lock(&p->mu);
        while (atomic_load(&p->remaining) > 0) pthread_cond_wait(&p->cv_done, &p->mu);
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
    pool_run(ctx->pool, n_rows, fn, NULL, arg);
}

void eng_k_parallel_rows_cost(const eng_kctx *ctx, int32_t n_rows, int64_t row_cost,
                              void (*fn)(void *arg, int32_t r0, int32_t r1), void *arg) {
    if ((int64_t)n_rows * row_cost < PAR_MIN_WORK) {
        if (n_rows > 0) fn(arg, 0, n_rows);
        return;
    }
    eng_k_parallel_rows(ctx, n_rows, fn, arg);
}

void eng_k_parallel_ith(const eng_kctx *ctx, int32_t n_rows, int64_t row_cost,
                        void (*fn)(void *arg, int32_t ith, int32_t r0, int32_t r1), void *arg) {
    if (n_rows <= 0) return;
    if (ctx->n_threads <= 1 || n_rows == 1 || !ctx->pool || (int64_t)n_rows * row_cost < PAR_MIN_WORK) {
        fn(arg, 0, 0, n_rows);
        return;
    }
    pool_run(ctx->pool, n_rows, NULL, fn, arg);
}

// ----------------------------------------------------------------------------
// Weight layouts

static int kmat_build(eng_kmat *m, const float *w, int32_t n_out, int32_t n_in, bool panels, bool bf16) {
    memset(m, 0, sizeof *m);
    const int32_t pad = panels ? ENG_REF_PANEL : KN_PAD;
    const int32_t npad = (n_out + pad - 1) / pad * pad;
    m->n_out = n_out;
    m->n_in = n_in;
    m->ld = npad;
    m->kn = true;
    m->panels = panels;
    m->data = calloc((size_t)n_in * (size_t)npad, sizeof(float));
    if (!m->data) return ENG_ERR_NOMEM;
    /* W^T element (k, j) lives at k*npad + j (kn) or at panel j/32, row k, column j%32 */
    for (int32_t j0 = 0; j0 < n_out; j0 += 64)
        for (int32_t k0 = 0; k0 < n_in; k0 += 64)
            for (int32_t j = j0; j < n_out && j < j0 + 64; j++)
                for (int32_t k = k0; k < n_in && k < k0 + 64; k++) {
                    const float v = w[(int64_t)j * n_in + k];
                    const int64_t at = panels ? ((int64_t)(j / ENG_REF_PANEL) * n_in + k) * ENG_REF_PANEL +
                                                    j % ENG_REF_PANEL
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
// Products

void eng_k_matmul(const eng_kctx *ctx, const eng_kmat *W, int32_t M, const float *X, int32_t ldx,
                  float *Y, int32_t ldy) {
    ENG_ASSERT(M >= 1 && ldy >= W->n_out && ldx >= W->n_in);
    if (ctx->kernel == ENG_KERNEL_BLAS) {
        ENG_ASSERT(!W->panels);
        cblas_sgemm(CblasRowMajor, CblasNoTrans, W->kn ? CblasNoTrans : CblasTrans, M, W->n_out, W->n_in, 1.0f,
                    X, ldx, W->data, W->ld, 0.0f, Y, ldy);
    } else {
        ENG_ASSERT(W->kn);
        eng_k_matmul_ref(ctx, W, M, X, ldx, Y, ldy);
    }
    round_rows(ctx, Y, M, W->n_out, ldy);
}

// ----------------------------------------------------------------------------
// blas attention products of one KV head

/* Scores S[r, j] = Q[r, :] . K[j, :] for R query rows over the full rectangle
 * of keys j < P = pos0 + T, not scaled, not rounded: one sgemm. */
static void blas_attn_scores(int32_t R, int32_t T, int32_t pos0, int32_t E, const float *Q, int32_t ldq,
                             const float *K, int32_t ldk, float *S, int32_t lds) {
    const int32_t P = pos0 + T;
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, R, P, E, 1.0f, Q, ldq, K, ldk, 0.0f, S, lds);
}

/* Outputs O[r, e] = sum over j < P of Pr[r, j] * V[j, e] (masked
 * probabilities are exactly 0): one sgemm, rounded when bf16. */
static void blas_attn_values(const eng_kctx *ctx, int32_t R, int32_t T, int32_t pos0, int32_t E, const float *Pr,
                             int32_t lds, const float *V, int32_t ldv, float *O, int32_t ldo) {
    const int32_t P = pos0 + T;
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, R, E, P, 1.0f, Pr, lds, V, ldv, 0.0f, O, ldo);
    round_rows(ctx, O, R, E, ldo);
}

// ----------------------------------------------------------------------------
// Attention of one chunk

int64_t eng_k_attention_ws(const eng_kctx *ctx, int32_t T, int32_t P, int32_t H, int32_t G, int32_t E) {
    if (ctx->kernel == ENG_KERNEL_REF) return eng_k_attention_ref_ws(ctx->n_threads, P, E);
    return (int64_t)(H / G) * T * P;
}

void eng_k_attention(const eng_kctx *ctx, int32_t T, int32_t pos0, int32_t H, int32_t G, int32_t E, const float *Q,
                     int32_t ldq, const float *K, const float *V, int32_t ldkv, float *O, int32_t ldo, float *wq,
                     float *wo, float *ws, int64_t ws_cap) {
    const int32_t GR = H / G, R = GR * T, P = pos0 + T;
    ENG_ASSERT(GR * G == H && ws_cap >= eng_k_attention_ws(ctx, T, P, H, G, E));
    /* queries regrouped: head h's T rows at wq + h*T*E, so KV head g's query heads are rows [g*R, (g+1)*R) */
    for (int32_t h = 0; h < H; h++)
        for (int32_t t = 0; t < T; t++)
            memcpy(wq + ((int64_t)h * T + t) * E, Q + (int64_t)t * ldq + (int64_t)h * E, sizeof(float) * (size_t)E);
    if (ctx->kernel == ENG_KERNEL_REF) {
        eng_k_attention_ref(ctx, T, pos0, 0, 0, H, G, E, wq, K, V, ldkv, O, ldo, ws, ws_cap);
        return;
    }
    const float scale = 1.0f / sqrtf((float)E);
    int64_t nb = ws_cap / ((int64_t)R * P);  /* KV heads per batch */
    if (nb > G) nb = G;
    for (int32_t g0 = 0; g0 < G; g0 += (int32_t)nb) {
        const int32_t g1 = g0 + (int32_t)nb < G ? g0 + (int32_t)nb : G;
        for (int32_t g = g0; g < g1; g++)
            blas_attn_scores(R, T, pos0, E, wq + (int64_t)g * R * E, E, K + (int64_t)g * E, ldkv,
                             ws + (int64_t)(g - g0) * R * P, P);
        eng_k_softmax_causal(ctx, (g1 - g0) * R, T, pos0, scale, ws, P);  /* one pass over the batch */
        for (int32_t g = g0; g < g1; g++) {
            float *og = wo + (int64_t)g * R * E;
            blas_attn_values(ctx, R, T, pos0, E, ws + (int64_t)(g - g0) * R * P, P, V + (int64_t)g * E, ldkv, og, E);
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
void eng_k_softmax_row(float *s, int32_t n, float scale, bool bf16) {
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
        eng_k_softmax_path(a->ctx->path, s, n, a->scale, a->ctx->bf16);  /* eng_k_softmax_row's bits, vectorised */
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
