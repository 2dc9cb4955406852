/*
 * engine/kernels.c: weight layouts, the blas products and attention, the
 * dispatch to the ref kernel (kernels_ref_*.c), and the shared row-wise ops
 * of the forward pass. See kernels.h for the numerical contract.
 *
 * Determinism: every function writes each output element from a fixed
 * sequence of float operations that depends only on that element's inputs,
 * never on how rows or columns are split between threads, and never reads
 * memory it has not written or been given. Parallel loops run on the
 * model's pool with exactly the context's thread count (the `omp simd`
 * pragmas only let GCC vectorise element-wise loops; no OpenMP threads are
 * used); OpenBLAS's own thread count is set by the caller (forward.c)
 * before each forward pass. The pool is engine/pool.c.
 */
#include "kernels.h"

#include <cblas.h>
#include <math.h>
#include <stdlib.h>
#include <sys/mman.h>

#include "status.h"

/* Columns the blas kn layout is padded to (its ld), kept from before the ref
 * panels widened to 32 so that blas's sgemm arguments do not change. */
#define KN_PAD 16

static void round_vec(float *x, int64_t n) { eng_bf16_round_vec(x, n); }

void eng_k_round(const eng_kctx *ctx, float *x, int64_t n) {
    if (ctx->bf16) round_vec(x, n);
}

// ----------------------------------------------------------------------------
// Weight layouts

/* Memory for n weights (zeroed when zero), freed with free(). From 2 MiB
 * up it starts on a 2 MiB boundary and its whole 2 MiB pages are advised
 * as huge pages (MADV_HUGEPAGE; a hint: where transparent huge pages are
 * off, nothing changes): the products stream their weights from memory,
 * and a 4 KiB page per 4 KiB of a panel costs a TLB miss each time. */
static float *weights_alloc(int64_t n, bool zero) {
    const size_t bytes = sizeof(float) * (size_t)n, huge = (size_t)2 << 20;
    if (bytes < huge) return zero ? calloc(n, sizeof(float)) : malloc(bytes);
    void *p = NULL;
    if (posix_memalign(&p, huge, bytes)) return NULL;
    (void)madvise(p, bytes / huge * huge, MADV_HUGEPAGE);
    if (zero) memset(p, 0, bytes);
    return p;
}

static int kmat_build(eng_kmat *m, const float *w, int32_t n_out, int32_t n_in, bool panels, bool bf16) {
    memset(m, 0, sizeof *m);
    const int32_t pad = panels ? ENG_REF_PANEL : KN_PAD;
    const int32_t npad = (n_out + pad - 1) / pad * pad;
    m->n_out = n_out;
    m->n_in = n_in;
    m->ld = npad;
    m->kn = true;
    m->panels = panels;
    m->data = weights_alloc((int64_t)n_in * npad, true);
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

void eng_kmat_view(eng_kmat *m, float *w, int32_t n_out, int32_t n_in) {
    m->n_out = n_out;
    m->n_in = n_in;
    m->ld = n_in;
    m->kn = false;
    m->panels = false;
    m->owned = false;
    m->data = w;
}

/* W itself, row-major [N, ld = K], copied (and rounded when bf16): the
 * view's layout over an owned copy. */
static int kmat_rows(eng_kmat *m, const float *w, int32_t n_out, int32_t n_in, bool bf16) {
    const int64_t n = (int64_t)n_out * n_in;
    float *d = weights_alloc(n, false);
    if (!d) return ENG_ERR_NOMEM;
    memcpy(d, w, sizeof(float) * (size_t)n);
    if (bf16) round_vec(d, n);
    eng_kmat_view(m, d, n_out, n_in);
    m->owned = true;
    return ENG_OK;
}

int eng_kmat_init_for(eng_kmat *m, const float *w, int32_t n_out, int32_t n_in, eng_kernel kernel, int32_t n_threads,
                      bool bf16) {
    if (kernel == ENG_KERNEL_BLAS && n_threads > 1) return kmat_rows(m, w, n_out, n_in, bf16);
    return kmat_build(m, w, n_out, n_in, kernel == ENG_KERNEL_REF, bf16);
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
    eng_k_matmul_fused(ctx, W, M, X, ldx, Y, ldy, NULL);
}

// ----------------------------------------------------------------------------
// Attention of one chunk

/* blas: items = KV head x query block, on the pool; each item's products are
 * single-threaded sgemms whose shapes depend on T, P and the thread count
 * only (the query blocks: qb per head, one with one thread), so the bits do
 * not depend on which thread runs an item. An item goes through the keys in
 * blocks of kb positions ([0, kb), [kb, 2 kb), ...) with an online softmax:
 * per block the scores S = Q K^T (one sgemm), each row's step
 * (eng_k_softmax_step_path: running max and sum, its outputs so far
 * rescaled when the max grows), and O += S V (one sgemm); at the end
 * O = O / sum. kb is fixed by the query block's rows: the block of scores
 * stays within 128 Ki floats (512 KiB, an L2), where the whole rectangle
 * of keys (8 MiB for 64 rows at 32K) went through memory three times. */
#define BLAS_ATTN_S_MAX (128 * 1024)
#define BLAS_ATTN_KB_MIN 256
#define BLAS_ATTN_KB_MAX 2048

typedef struct blas_attn_args {
    const eng_kctx *ctx;
    int32_t         T, pos0, E, P, R, qb, rb_max, kb, ldkv, ldo, GR;
    float           scale;
    const float    *wq, *K, *V;
    float          *O, *wo, *ws;
} blas_attn_args;

/* Keys per block for query blocks of at most rb rows: a multiple of 256. */
static int32_t blas_attn_kb(int32_t rb) {
    int32_t kb = BLAS_ATTN_S_MAX / rb / BLAS_ATTN_KB_MIN * BLAS_ATTN_KB_MIN;
    return kb < BLAS_ATTN_KB_MIN ? BLAS_ATTN_KB_MIN : kb > BLAS_ATTN_KB_MAX ? BLAS_ATTN_KB_MAX : kb;
}

/* Floats of one thread's scratch when a KV head has R query rows: a block of
 * scores and each row's running max and sum, for query blocks of any
 * rb <= R rows (rb kb <= max(BLAS_ATTN_S_MAX, rb BLAS_ATTN_KB_MIN)); a bound
 * that grows with R, since the query blocks' rows do not (blas_attn_qb). */
static int64_t blas_attn_thread_floats(int32_t R) {
    const int64_t s = (int64_t)R * BLAS_ATTN_KB_MIN > BLAS_ATTN_S_MAX ? (int64_t)R * BLAS_ATTN_KB_MIN : BLAS_ATTN_S_MAX;
    return s + 2 * (int64_t)R;
}

static void blas_attn_items(void *v, int32_t ith, int32_t it0, int32_t it1) {
    const blas_attn_args *a = v;
    const int32_t T = a->T, E = a->E, P = a->P, R = a->R, KB = a->kb;
    const eng_kpath path = a->ctx->path;
    const bool bf16 = a->ctx->bf16;
    float *S = a->ws + (int64_t)ith * blas_attn_thread_floats(R);
    float *mx = S + (int64_t)a->rb_max * KB, *l = mx + a->rb_max;
    for (int32_t it = it0; it < it1; it++) {
        const int32_t g = it / a->qb, b = it % a->qb;
        const int32_t r0 = (int32_t)((int64_t)R * b / a->qb), r1 = (int32_t)((int64_t)R * (b + 1) / a->qb), n = r1 - r0;
        const float *q = a->wq + ((int64_t)g * R + r0) * E;
        float *og = a->wo + ((int64_t)g * R + r0) * E;
        for (int32_t i = 0; i < n; i++) {
            mx[i] = -INFINITY;
            l[i] = 0.0f;
        }
        for (int32_t j0 = 0; j0 < P; j0 += KB) {
            const int32_t kb = P - j0 < KB ? P - j0 : KB;
            /* scores of the block, not scaled, not rounded */
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, n, kb, E, 1.0f, q, E,
                        a->K + (int64_t)j0 * a->ldkv + (int64_t)g * E, a->ldkv, 0.0f, S, KB);
            for (int32_t i = 0; i < n; i++) {
                float *s = S + (int64_t)i * KB;
                int32_t na = a->pos0 + (r0 + i) % T + 1 - j0;  /* keys of the block the row attends */
                if (na > kb) na = kb;
                if (na < 0) na = 0;
                if (na > 0)  /* the outputs exist from the first block's P V on */
                    eng_k_softmax_step_path(path, s, na, a->scale, bf16, &mx[i], &l[i], og + (int64_t)i * E,
                                            j0 > 0 ? E : 0);
                for (int32_t j = na; j < kb; j++) s[j] = 0.0f;  /* masked: exactly 0 */
            }
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, E, kb, 1.0f, S, KB,
                        a->V + (int64_t)j0 * a->ldkv + (int64_t)g * E, a->ldkv, j0 > 0 ? 1.0f : 0.0f, og, E);
        }
        for (int32_t i = 0; i < n; i++) {  /* back to [T, H*E]: row r is query head g*GR + r/T, token r%T */
            const int32_t r = r0 + i, h = g * a->GR + r / T, t = r % T;
            const float inv = 1.0f / l[i];
            float *o = a->O + (int64_t)t * a->ldo + (int64_t)h * E;
            for (int32_t e = 0; e < E; e++) o[e] = og[(int64_t)i * E + e] * inv;
            if (bf16) round_vec(o, E);
        }
    }
}

/* Query blocks per KV head under blas: one with one thread; else enough
 * items for the threads (2 per thread), blocks of at least 16 rows. */
static int32_t blas_attn_qb(const eng_kctx *ctx, int32_t R, int32_t G) {
    const int32_t nth = ctx->n_threads;
    if (nth <= 1) return 1;
    int32_t qb = (2 * nth + G - 1) / G;
    if (qb > R / 16) qb = R / 16;
    return qb > 1 ? qb : 1;
}

int64_t eng_k_attention_ws(const eng_kctx *ctx, int32_t T, int32_t P, int32_t H, int32_t G, int32_t E) {
    if (ctx->kernel == ENG_KERNEL_REF) return eng_k_attention_ref_ws(ctx->n_threads, P, E);
    const int32_t R = (H / G) * T;
    return (int64_t)(ctx->n_threads > 1 ? ctx->n_threads : 1) * blas_attn_thread_floats(R);
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
    blas_attn_args a = {.ctx = ctx, .T = T, .pos0 = pos0, .E = E, .P = P, .R = R, .ldkv = ldkv, .ldo = ldo, .GR = GR,
                        .scale = 1.0f / sqrtf((float)E), .wq = wq, .K = K, .V = V, .O = O, .wo = wo, .ws = ws};
    a.qb = blas_attn_qb(ctx, R, G);
    a.rb_max = (R + a.qb - 1) / a.qb;
    a.kb = blas_attn_kb(a.rb_max);
    eng_k_parallel_ith(ctx, G * a.qb, (int64_t)a.rb_max * P * E * 4, blas_attn_items, &a);
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

void eng_k_rmsnorm_rows(const eng_kctx *ctx, int32_t D, const float *X, int32_t ldx, const float *w, float eps,
                        float *Y, int32_t ldy, int32_t t0, int32_t t1) {
    rmsnorm_args a = {.ctx = ctx, .D = D, .ldx = ldx, .ldy = ldy, .X = X, .w = w, .eps = eps, .Y = Y};
    rmsnorm_rows(&a, t0, t1);
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

// ----------------------------------------------------------------------------
// Fused products: a norm before and row-wise ops after, in one parallel region

typedef struct fused_args {
    const eng_kctx  *ctx;
    const eng_kmat  *W;
    const eng_kfuse *fu;
    int32_t          M, K, ldx, ldy, ncols, unit, n_units;
    const float     *X;
    float           *Y;
    uint8_t          normed[ENG_MAX_THREADS];  /* thread ith has its normed rows */
    float           *xp[ENG_MAX_THREADS];      /* ref: thread ith's packed rows (freed after the region) */
    bool             xp_done[ENG_MAX_THREADS]; /* ... packed (or tried) */
} fused_args;

/* The rows the product reads: X, or thread ith's normed copy of X. */
static const float *fused_x(fused_args *a, int32_t ith, int32_t *ldx) {
    const eng_kfuse *fu = a->fu;
    if (fu->norm == ENG_KNORM_NONE) {
        *ldx = a->ldx;
        return a->X;
    }
    float *xn = fu->ws + (int64_t)ith * a->M * a->K;
    if (!a->normed[ith]) {
        if (fu->norm == ENG_KNORM_RMS) {
            rmsnorm_args r = {.ctx = a->ctx, .D = a->K, .ldx = a->ldx, .ldy = a->K, .X = a->X, .w = fu->norm_w,
                              .eps = fu->eps, .Y = xn};
            rmsnorm_rows(&r, 0, a->M);
        } else {
            layernorm_args l = {.ctx = a->ctx, .D = a->K, .ldx = a->ldx, .ldy = a->K, .X = a->X, .w = fu->norm_w,
                                .b = fu->norm_b, .eps = fu->eps, .Y = xn};
            layernorm_rows(&l, 0, a->M);
        }
        a->normed[ith] = 1;
    }
    *ldx = a->K;
    return xn;
}

/* The blas product of columns [c0, c1) for rows [r0, r1) of X: one sgemm,
 * or for a single row one sgemv (y = W x), which reads the weights once
 * where OpenBLAS's sgemm would first pack them into a copy (its 0.3.21 does
 * not forward M = 1 to gemv): decode is bound by reading the weights, so
 * that copy halved it. Another shape, other bits: blas is the kernel whose
 * results depend on the shape (kernels.h). */
static void blas_product(const eng_kmat *W, const float *X, int32_t ldx, int32_t r0, int32_t r1, int32_t c0,
                         int32_t c1, float *Y, int32_t ldy) {
    const float *b = W->kn ? W->data + c0 : W->data + (int64_t)c0 * W->ld;
    const float *x = X + (int64_t)r0 * ldx;
    float *y = Y + (int64_t)r0 * ldy + c0;
    if (r1 - r0 == 1) {
        if (W->kn) cblas_sgemv(CblasRowMajor, CblasTrans, W->n_in, c1 - c0, 1.0f, b, W->ld, x, 1, 0.0f, y, 1);
        else cblas_sgemv(CblasRowMajor, CblasNoTrans, c1 - c0, W->n_in, 1.0f, b, W->ld, x, 1, 0.0f, y, 1);
        return;
    }
    cblas_sgemm(CblasRowMajor, CblasNoTrans, W->kn ? CblasNoTrans : CblasTrans, r1 - r0, c1 - c0, W->n_in, 1.0f, x,
                ldx, b, W->ld, 0.0f, y, ldy);
}

/* ref: the M rows of X packed for thread ith's blocks, once per thread
 * (every thread reads every row); NULL when the path reads them in place
 * or memory is short (the same bits either way). */
static const float *fused_packed(fused_args *a, int32_t ith, const float *X, int32_t ldx) {
    const int64_t n = eng_k_ref_pack_floats(a->ctx, a->M, a->K);
    if (n == 0) return NULL;
    if (!a->xp_done[ith]) {
        a->xp_done[ith] = true;
        a->xp[ith] = malloc(sizeof(float) * (size_t)n);
        if (a->xp[ith]) eng_k_ref_pack(a->ctx, a->M, a->K, X, ldx, a->xp[ith]);
    }
    return a->xp[ith];
}

/* Columns [c0, c1) of the product for rows [r0, r1), on this thread: one
 * ref block (xp: those rows packed, or NULL), or one blas product per unit
 * (a unit's shape is fixed by N and the thread count, so its bits do not
 * depend on which thread runs it). */
static void fused_block(const fused_args *a, const float *X, int32_t ldx, const float *xp, int32_t r0, int32_t r1,
                        int32_t c0, int32_t c1) {
    const eng_kmat *W = a->W;
    if (a->ctx->kernel == ENG_KERNEL_REF) {
        eng_k_matmul_ref_block(a->ctx, W, r0, r1, c0, c1, X, ldx, xp, a->Y, a->ldy);
    } else {
        for (int32_t u0 = c0; u0 < c1; u0 += a->unit)
            blas_product(W, X, ldx, r0, r1, u0, u0 + a->unit < c1 ? u0 + a->unit : c1, a->Y, a->ldy);
    }
    if (a->ctx->bf16)
        for (int32_t r = r0; r < r1; r++) round_vec(a->Y + (int64_t)r * a->ldy + c0, c1 - c0);
}

/* The epilogue over rows [r0, r1) and product columns [c0, c1): each op
 * element for element as its row-wise function (rope_rows, add_rows; the
 * SwiGLU exists only here), so the bits are those of the separate ops. */
static void fused_epilogue(const fused_args *a, int32_t r0, int32_t r1, int32_t c0, int32_t c1) {
    const eng_kfuse *fu = a->fu;
    const bool bf16 = a->ctx->bf16;
    for (int32_t r = r0; r < r1; r++) {
        float *y = a->Y + (int64_t)r * a->ldy;
        if (fu->rope_cols > 0) {  /* per head in [c0, ce): its rotated pairs i < half */
            const int32_t E = fu->rope_E, half = fu->rope_n_rot / 2, ce = c1 < fu->rope_cols ? c1 : fu->rope_cols;
            const float *cs = fu->rope_cs + (int64_t)r * half, *sn = fu->rope_sn + (int64_t)r * half;
            for (int32_t hs = c0 / E * E; hs < ce; hs += E) {
                const int32_t i0 = c0 > hs ? (c0 - hs) / 2 : 0, i1 = (ce - hs) / 2 < half ? (ce - hs) / 2 : half;
                float *yh = y + hs;
                #pragma omp simd
                for (int32_t i = i0; i < i1; i++) {
                    const float x0 = yh[2 * i], x1 = yh[2 * i + 1];
                    yh[2 * i] = x0 * cs[i] - x1 * sn[i];
                    yh[2 * i + 1] = x0 * sn[i] + x1 * cs[i];
                }
                if (bf16 && i1 > i0) round_vec(yh + 2 * i0, 2 * (i1 - i0));
            }
        }
        if (fu->res) {
            float *x = fu->res + (int64_t)r * fu->ldres;
            #pragma omp simd
            for (int32_t c = c0; c < c1; c++) x[c] = x[c] + y[c];
            if (bf16) round_vec(x + c0, c1 - c0);
            if (fu->add2) {
                const float *z = fu->add2 + (int64_t)r * fu->ld_add2;
                #pragma omp simd
                for (int32_t c = c0; c < c1; c++) x[c] = x[c] + z[c];
                if (bf16) round_vec(x + c0, c1 - c0);
            }
        }
        if (fu->glu_cols > 0 && c0 < fu->glu_cols) {
            const int32_t ce = c1 < fu->glu_cols ? c1 : fu->glu_cols;
            const float *u = y + fu->glu_off;
            float *h = fu->H + (int64_t)r * fu->ldh;
            eng_k_silu_mul_path(a->ctx->path, y + c0, u + c0, h + c0, ce - c0);
            if (bf16) round_vec(h + c0, ce - c0);
        }
    }
}

/* Units [u0, u1) of columns on thread ith, all the rows. */
static void fused_items(void *v, int32_t ith, int32_t u0, int32_t u1) {
    fused_args *a = v;
    const eng_kfuse *fu = a->fu;
    int32_t ldx;
    const float *X = fused_x(a, ith, &ldx);
    const int32_t c0 = u0 * a->unit, c1 = u1 * a->unit < a->ncols ? u1 * a->unit : a->ncols;
    const float *xp = a->ctx->kernel == ENG_KERNEL_REF ? fused_packed(a, ith, X, ldx) : NULL;
    fused_block(a, X, ldx, xp, 0, a->M, c0, c1);
    if (fu->glu_cols > 0)  /* the up columns of the same units */
        fused_block(a, X, ldx, xp, 0, a->M, c0 + fu->glu_off, c1 + fu->glu_off);
    fused_epilogue(a, 0, a->M, c0, c1);
}

/* Rounding and the epilogue over whole rows [r0, r1) (the blas product
 * computed as one sgemm). */
static void fused_rows(void *v, int32_t r0, int32_t r1) {
    const fused_args *a = v;
    const int32_t N = a->W->n_out;
    if (a->ctx->bf16)
        for (int32_t r = r0; r < r1; r++) round_vec(a->Y + (int64_t)r * a->ldy, N);
    fused_epilogue(a, r0, r1, 0, N);
}


void eng_k_matmul_fused(const eng_kctx *ctx, const eng_kmat *W, int32_t M, const float *X, int32_t ldx, float *Y,
                        int32_t ldy, const eng_kfuse *fu) {
    static const eng_kfuse none = {0};
    if (!fu) fu = &none;
    const int32_t N = W->n_out, K = W->n_in, nth = ctx->n_threads;
    ENG_ASSERT(M >= 1 && ldy >= N && ldx >= K && nth <= ENG_MAX_THREADS);
    ENG_ASSERT(fu->rope_cols == 0 || (fu->rope_E % 2 == 0 && fu->rope_cols <= N));
    ENG_ASSERT(fu->glu_cols == 0 || fu->glu_off + fu->glu_cols <= N);
    fused_args a = {.ctx = ctx, .W = W, .fu = fu, .M = M, .K = K, .ldx = ldx, .ldy = ldy, .X = X, .Y = Y};
    if (ctx->kernel == ENG_KERNEL_BLAS && nth == 1) {
        /* one thread: one sgemm, then the epilogue (no pool) */
        if (fu->norm != ENG_KNORM_NONE) {
            if (fu->norm == ENG_KNORM_RMS) eng_k_rmsnorm(ctx, M, K, X, ldx, fu->norm_w, fu->eps, fu->ws, K);
            else eng_k_layernorm(ctx, M, K, X, ldx, fu->norm_w, fu->norm_b, fu->eps, fu->ws, K);
            X = fu->ws;
            ldx = K;
        }
        blas_product(W, X, ldx, 0, M, 0, N, Y, ldy);
        const bool epi = fu->rope_cols > 0 || fu->res || fu->glu_cols > 0;
        if (epi) eng_k_parallel_rows_cost(ctx, M, (int64_t)N * 4, fused_rows, &a);
        else if (ctx->bf16) fused_rows(&a, 0, M);
        return;
    }
    /* the columns split: the gate columns when gate and up go together */
    const bool glu_pairs = fu->glu_cols > 0;
    a.ncols = glu_pairs ? fu->glu_cols : N;
    if (ctx->kernel == ENG_KERNEL_REF) {
        ENG_ASSERT(W->kn && (!glu_pairs || fu->glu_off % ENG_REF_PANEL == 0));
        a.unit = ENG_REF_PANEL;
        a.n_units = (a.ncols + ENG_REF_PANEL - 1) / ENG_REF_PANEL;
    } else {
        /* blas: units of at least 64 columns (a multiple of 16), up to 4 per
         * thread; one per thread for a single row (sgemv streams the weights,
         * and longer contiguous runs read faster; with more than one thread
         * the weights are W itself, so a unit is a block of whole rows,
         * kbase.h) */
        int32_t nb = (M == 1 ? 1 : 4) * nth;
        if (nb > a.ncols / 64) nb = a.ncols / 64 > 1 ? a.ncols / 64 : 1;
        a.unit = ((a.ncols + nb - 1) / nb + 15) / 16 * 16;
        a.n_units = (a.ncols + a.unit - 1) / a.unit;
    }
    const int64_t cost = (int64_t)(M + 1) * a.unit * K * (glu_pairs ? 2 : 1);
    eng_k_parallel_ith(ctx, a.n_units, cost, fused_items, &a);
    for (int32_t i = 0; i < nth; i++) free(a.xp[i]);
}
