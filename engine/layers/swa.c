/*
 * engine/layers/swa.c: the sliding-window attention layer kind
 * (ENG_LAYER_ATTN_SWA): the ring of window cells, its truncation and window
 * rules, the banded attention kernel (see swa.h for their contract), the
 * kind's table, and the architectures with sliding-window layers:
 * `cohere2` (llama.cpp's Command R7B architecture, what `model synth --arch
 * swa` writes) and `kvreplay-swa` (llama layers with a window, kvreplay's
 * own, read and written so that its files load), with their synthetic
 * writers.
 *
 * Determinism: as kernels.c. Every output element is a fixed sequence of
 * float operations on its inputs; KV heads are split across threads with
 * eng_k_parallel_rows and every product inside runs single-threaded.
 */
#include "swa.h"

#include "attn.h"

#include <cblas.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "status.h"
#include "synth_int.h"

// ----------------------------------------------------------------------------
// The ring

int eng_swa_mem_alloc(eng_swa_mem *m, int32_t n_cells, int32_t n_embd_kv) {
    memset(m, 0, sizeof *m);
    ENG_ASSERT(n_cells >= 1 && n_embd_kv >= 1);
    m->n_cells = n_cells;
    m->n_embd_kv = n_embd_kv;
    m->k = calloc((size_t)n_cells * (size_t)n_embd_kv, sizeof(float));
    m->v = calloc((size_t)n_cells * (size_t)n_embd_kv, sizeof(float));
    if (!m->k || !m->v) {
        eng_swa_mem_free(m);
        return ENG_ERR_NOMEM;
    }
    return ENG_OK;
}

void eng_swa_mem_free(eng_swa_mem *m) {
    if (!m) return;
    free(m->k);
    free(m->v);
    memset(m, 0, sizeof *m);
}

void eng_swa_mem_clear(eng_swa_mem *m) {
    const size_t b = sizeof(float) * (size_t)m->n_cells * (size_t)m->n_embd_kv;
    memset(m->k, 0, b);
    memset(m->v, 0, b);
    m->lo = 0;
}

int32_t eng_swa_ring_cells(int32_t n_ctx, int32_t W, int32_t slack) {
    const int64_t r = (int64_t)W + (slack > 0 ? slack : 0);
    return (int32_t)(r < n_ctx ? r : n_ctx);
}

int32_t eng_swa_valid_lo(const eng_swa_mem *m, int32_t n_tokens) {
    int32_t lo = n_tokens - m->n_cells;
    if (lo < m->lo) lo = m->lo;
    return lo > 0 ? lo : 0;
}

int32_t eng_swa_window_cells(int32_t W, int32_t n) { return n < W ? n : W; }

bool eng_swa_can_truncate(const eng_swa_mem *m, int32_t W, int32_t n_tokens, int32_t n) {
    if (n < 0 || n > n_tokens) return false;
    return n - eng_swa_window_cells(W, n) >= eng_swa_valid_lo(m, n_tokens);
}

void eng_swa_truncate(eng_swa_mem *m, int32_t n_tokens, int32_t n) {
    ENG_ASSERT(n >= 0 && n <= n_tokens);
    m->lo = eng_swa_valid_lo(m, n_tokens);
    if (m->lo > n) m->lo = n;
}

const float *eng_swa_k(const eng_swa_mem *m, int32_t p) {
    return m->k + (int64_t)(p % m->n_cells) * m->n_embd_kv;
}

const float *eng_swa_v(const eng_swa_mem *m, int32_t p) {
    return m->v + (int64_t)(p % m->n_cells) * m->n_embd_kv;
}

/* Writes rows of positions [p0, p0 + n) from K/V (row stride ld); only the
 * last R can survive, so only those are written. */
static void ring_write(eng_swa_mem *m, int32_t p0, int32_t n, const float *K, const float *V, int64_t ld) {
    const size_t row = sizeof(float) * (size_t)m->n_embd_kv;
    const int32_t skip = n > m->n_cells ? n - m->n_cells : 0;
    for (int32_t i = skip; i < n; i++) {
        const int64_t r = (int64_t)((p0 + i) % m->n_cells) * m->n_embd_kv;
        memcpy(m->k + r, K + (int64_t)i * ld, row);
        memcpy(m->v + r, V + (int64_t)i * ld, row);
    }
}

size_t eng_swa_window_bytes(const eng_swa_mem *m, int32_t W, int32_t n) {
    return 2u * sizeof(float) * (size_t)eng_swa_window_cells(W, n) * (size_t)m->n_embd_kv;
}

void eng_swa_save_window(const eng_swa_mem *m, int32_t W, int32_t n, void *dst) {
    const int32_t w = eng_swa_window_cells(W, n);
    if (w == 0) return;
    const size_t row = sizeof(float) * (size_t)m->n_embd_kv;
    char *k = dst, *v = (char *)dst + (size_t)w * row;
    for (int32_t i = 0; i < w; i++) {
        memcpy(k + (size_t)i * row, eng_swa_k(m, n - w + i), row);
        memcpy(v + (size_t)i * row, eng_swa_v(m, n - w + i), row);
    }
}

void eng_swa_load_window(eng_swa_mem *m, int32_t W, int32_t n, const void *src) {
    const int32_t w = eng_swa_window_cells(W, n);
    ENG_ASSERT(w <= m->n_cells);
    if (w > 0) {
        const float *k = src, *v = (const float *)src + (int64_t)w * m->n_embd_kv;
        ring_write(m, n - w, w, k, v, m->n_embd_kv);
    }
    m->lo = n - w;
}

void eng_swa_copy(eng_swa_mem *dst, const eng_swa_mem *src, int32_t n_tokens) {
    ENG_ASSERT(dst->n_embd_kv == src->n_embd_kv);
    if (dst == src) return;
    int32_t lo = eng_swa_valid_lo(src, n_tokens);
    if (n_tokens - lo > dst->n_cells) lo = n_tokens - dst->n_cells;
    const size_t row = sizeof(float) * (size_t)src->n_embd_kv;
    for (int32_t p = lo; p < n_tokens; p++) {
        const int64_t r = (int64_t)(p % dst->n_cells) * dst->n_embd_kv;
        memcpy(dst->k + r, eng_swa_k(src, p), row);
        memcpy(dst->v + r, eng_swa_v(src, p), row);
    }
    dst->lo = lo;
}

double eng_swa_keys(int32_t W, int64_t p0, int64_t p1) {
    if (p1 <= p0) return 0.0;
    /* p + 1 keys for p < W, W keys from there: split at m = clamp(W, p0, p1) */
    const int64_t m = W < p0 ? p0 : (W > p1 ? p1 : W);
    return (double)(m - p0) * (double)(p0 + m + 1) / 2.0 + (double)(p1 - m) * W;
}

// ----------------------------------------------------------------------------
// Scratch

/* Caps the scores buffer (floats); KV heads are batched to fit. Batching
 * changes no result: every head is computed on its own. */
#define SWA_BATCH_FLOATS ((int64_t)4 << 20)

void eng_swa_ws_free(eng_swa_ws *ws) {
    if (!ws) return;
    free(ws->kg); free(ws->vg); free(ws->qg); free(ws->og); free(ws->scores);
    memset(ws, 0, sizeof *ws);
}

/* Floats of the scores buffer for a chunk: a batch of KV heads' score
 * rectangles (blas), the ref kernel's per-thread scratch (ref). */
static int64_t scores_floats(const eng_kctx *ctx, int32_t R, int32_t P, int32_t G, int32_t E) {
    if (ctx->kernel == ENG_KERNEL_REF) return eng_k_attention_ref_ws(ctx->n_threads, P, E);
    const int64_t one = (int64_t)R * P;
    int64_t nb = SWA_BATCH_FLOATS / one;
    if (nb < 1) nb = 1;
    if (nb > G) nb = G;
    return nb * one;
}

int eng_swa_ws_reserve(const eng_kctx *ctx, eng_swa_ws *ws, int32_t T, int32_t pos0, int32_t W, int32_t H, int32_t G,
                       int32_t E) {
    const int32_t kpos0 = pos0 - W + 1 > 0 ? pos0 - W + 1 : 0, P = pos0 + T - kpos0, R = (H / G) * T;
    const int64_t GE = (int64_t)G * E;
    const int64_t HTE = (int64_t)H * T * E;
    if (eng_grow(&ws->kg, &ws->cap_k, P * GE) != ENG_OK || eng_grow(&ws->vg, &ws->cap_v, P * GE) != ENG_OK ||
        eng_grow(&ws->qg, &ws->cap_q, HTE) != ENG_OK || eng_grow(&ws->og, &ws->cap_o, HTE) != ENG_OK ||
        eng_grow(&ws->scores, &ws->cap_s, scores_floats(ctx, R, P, G, E)) != ENG_OK)
        return ENG_ERR_NOMEM;
    return ENG_OK;
}

// ----------------------------------------------------------------------------
// Banded attention

typedef struct band_args {
    bool         bf16;
    eng_kpath    path;
    int32_t      T, pos0, W, kpos0, E, GR, R, P, ldkv, ldo, g0;
    float        scale;
    const float *qg, *K, *V;
    float       *og, *ws, *O;
} band_args;

/* First and last gathered key row attended by query row r. */
static inline void band_of(const band_args *a, int32_t r, int32_t *j0, int32_t *j1) {
    const int32_t p = a->pos0 + r % a->T;
    int32_t lo = p - a->W + 1;
    if (lo < a->kpos0) lo = a->kpos0;
    *j0 = lo - a->kpos0;
    *j1 = p - a->kpos0;
}

/* Softmax of s[j0..j1] in place (eng_k_softmax_row's bits, lanes counted
 * from the band's first key), zeroing [0, j0) and (j1, P). */
static void band_softmax(eng_kpath path, float *s, int32_t j0, int32_t j1, int32_t P, float scale, bool bf16) {
    for (int32_t j = 0; j < j0; j++) s[j] = 0.0f;
    for (int32_t j = j1 + 1; j < P; j++) s[j] = 0.0f;
    eng_k_softmax_path(path, s + j0, j1 - j0 + 1, scale, bf16);
}

/* KV heads [g0 + r0, g0 + r1): scores, banded softmax, values, scatter. */
static void band_heads(void *v, int32_t r0, int32_t r1) {
    const band_args *a = v;
    const int32_t T = a->T, E = a->E, R = a->R, P = a->P;
    for (int32_t g = a->g0 + r0; g < a->g0 + r1; g++) {
        float *S = a->ws + (int64_t)(g - a->g0) * R * P;
        const float *q = a->qg + (int64_t)g * R * E;
        float *o = a->og + (int64_t)g * R * E;
        const float *K = a->K + (int64_t)g * E, *V = a->V + (int64_t)g * E;
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, R, P, E, 1.0f, q, E, K, a->ldkv, 0.0f, S, P);
        for (int32_t r = 0; r < R; r++) {
            int32_t j0, j1;
            band_of(a, r, &j0, &j1);
            band_softmax(a->path, S + (int64_t)r * P, j0, j1, P, a->scale, a->bf16);
        }
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, R, E, P, 1.0f, S, P, V, a->ldkv, 0.0f, o, E);
        if (a->bf16)
            for (int64_t i = 0; i < (int64_t)R * E; i++) o[i] = eng_bf16_round(o[i]);
        for (int32_t hh = 0; hh < a->GR; hh++)  /* back to [T, H*E] */
            for (int32_t t = 0; t < T; t++)
                memcpy(a->O + (int64_t)t * a->ldo + (int64_t)(g * a->GR + hh) * E, o + ((int64_t)hh * T + t) * E,
                       sizeof(float) * (size_t)E);
    }
}

int eng_swa_attention(const eng_kctx *ctx, int32_t T, int32_t pos0, int32_t W, int32_t kpos0, int32_t H,
                      int32_t G, int32_t E, const float *Q, int32_t ldq, const float *K, const float *V,
                      int32_t ldkv, float *O, int32_t ldo, eng_swa_ws *ws) {
    const int32_t GR = H / G, R = GR * T, P = pos0 + T - kpos0;
    const int32_t first = pos0 - W + 1 > 0 ? pos0 - W + 1 : 0;
    ENG_ASSERT(GR * G == H && T >= 1 && W >= 1 && kpos0 >= 0 && kpos0 <= first);
    const int64_t HTE = (int64_t)H * T * E;
    if (eng_grow(&ws->qg, &ws->cap_q, HTE) != ENG_OK || eng_grow(&ws->og, &ws->cap_o, HTE) != ENG_OK ||
        eng_grow(&ws->scores, &ws->cap_s, scores_floats(ctx, R, P, G, E)) != ENG_OK)
        return ENG_ERR_NOMEM;
    for (int32_t h = 0; h < H; h++)
        for (int32_t t = 0; t < T; t++)
            memcpy(ws->qg + ((int64_t)h * T + t) * E, Q + (int64_t)t * ldq + (int64_t)h * E,
                   sizeof(float) * (size_t)E);
    if (ctx->kernel == ENG_KERNEL_REF) {
        eng_k_attention_ref(ctx, T, pos0, W, kpos0, H, G, E, ws->qg, K, V, ldkv, O, ldo, ws->scores, ws->cap_s);
        return ENG_OK;
    }
    const int64_t one = (int64_t)R * P;  /* scores of one KV head */
    int64_t nb = SWA_BATCH_FLOATS / one;  /* KV heads per batch */
    if (nb < 1) nb = 1;
    if (nb > G) nb = G;
    band_args a = {
        .bf16 = ctx->bf16, .path = ctx->path, .T = T, .pos0 = pos0, .W = W, .kpos0 = kpos0, .E = E,
        .GR = GR, .R = R, .P = P, .ldkv = ldkv, .ldo = ldo, .scale = 1.0f / sqrtf((float)E),
        .qg = ws->qg, .K = K, .V = V, .og = ws->og, .ws = ws->scores, .O = O,
    };
    for (int32_t g0 = 0; g0 < G; g0 += (int32_t)nb) {  /* heads spread over the pool, each sgemm on one thread */
        a.g0 = g0;
        eng_k_parallel_rows(ctx, (int32_t)(g0 + nb < G ? nb : G - g0), band_heads, &a);
    }
    return ENG_OK;
}

int eng_swa_attend(const eng_kctx *ctx, eng_swa_mem *m, int32_t W, int32_t T, int32_t pos0, int32_t H, int32_t G,
                   int32_t E, const float *qkv, int32_t ldqkv, float *O, int32_t ldo, eng_swa_ws *ws) {
    const int32_t GE = G * E, HE = H * E;
    const int32_t kpos0 = pos0 - W + 1 > 0 ? pos0 - W + 1 : 0;
    const int32_t old = pos0 - kpos0, P = old + T;
    ENG_ASSERT(GE == m->n_embd_kv);
    ENG_ASSERT(old == 0 || eng_swa_valid_lo(m, pos0) <= kpos0);
    if (eng_grow(&ws->kg, &ws->cap_k, (int64_t)P * GE) != ENG_OK || eng_grow(&ws->vg, &ws->cap_v, (int64_t)P * GE) != ENG_OK)
        return ENG_ERR_NOMEM;
    const size_t row = sizeof(float) * (size_t)GE;
    for (int32_t i = 0; i < old; i++) {
        memcpy(ws->kg + (int64_t)i * GE, eng_swa_k(m, kpos0 + i), row);
        memcpy(ws->vg + (int64_t)i * GE, eng_swa_v(m, kpos0 + i), row);
    }
    for (int32_t t = 0; t < T; t++) {
        const float *r = qkv + (int64_t)t * ldqkv;
        memcpy(ws->kg + (int64_t)(old + t) * GE, r + HE, row);
        memcpy(ws->vg + (int64_t)(old + t) * GE, r + HE + GE, row);
    }
    int rc = eng_swa_attention(ctx, T, pos0, W, kpos0, H, G, E, qkv, ldqkv, ws->kg, ws->vg, GE, O, ldo, ws);
    if (rc != ENG_OK) return rc;
    ring_write(m, pos0, T, ws->kg + (int64_t)old * GE, ws->vg + (int64_t)old * GE, GE);
    return ENG_OK;
}

// ----------------------------------------------------------------------------
// The kind: the attention layer with the banded attention over the ring

typedef struct swa_kind_ws {
    eng_attn_ws attn;  /* projections, RoPE table, parallel FFN output */
    eng_swa_ws  swa;   /* gathered keys, scores */
} swa_kind_ws;

static void swa_core(eng_fwd *f, int32_t il, eng_attn_ws *aws) {
    const eng_model_info *in = &f->m->info;
    swa_kind_ws *ws = (swa_kind_ws *)aws;
    const int32_t H = in->n_head, G = in->n_head_kv, E = in->head_dim, HE = H * E, QKV = HE + 2 * G * E;
    for (int32_t i = 0; i < f->n_span; i++) {  /* per span, over its own sequence's ring */
        const eng_fspan *sp = &f->span[i];
        const int rc = eng_swa_attend(f->k, sp->s->mem[il].state, in->n_swa, sp->T, sp->pos0, H, G, E,
                                      aws->qkv + (int64_t)sp->r0 * QKV, QKV, aws->att + (int64_t)sp->r0 * HE, HE,
                                      &ws->swa);
        ENG_ASSERT(rc == ENG_OK);  /* scratch reserved by swa_prepare */
    }
}

static int swa_load(eng_loader *ld, eng_model *m, int32_t il, void **w) {
    eng_attn_weights *aw = calloc(1, sizeof *aw);
    if (!aw) return ENG_ERR_NOMEM;
    *w = aw;
    m->info.swa_bytes_per_token += 2 * (int64_t)sizeof(float) * m->info.n_head_kv * m->info.head_dim;  /* a cell */
    return eng_attn_load(ld, m, il, aw);
}

static void swa_free(void *w) {
    eng_attn_free(w);
    free(w);
}

/* 2*2*E*H per attended key; query p attends min(p + 1, W) keys. */
static double swa_pos_flops(const eng_model *m, int32_t il, int64_t p0, int64_t p1) {
    const double EH = (double)m->info.head_dim * m->info.n_head;
    return 2.0 * 2.0 * EH * eng_swa_keys(m->info.n_swa, p0, p1);
}

static int swa_prepare(const eng_model *m, int32_t il, void **v, const eng_fwd *f) {
    const eng_model_info *in = &m->info;
    if (!*v && !(*v = calloc(1, sizeof(swa_kind_ws)))) return ENG_ERR_NOMEM;
    swa_kind_ws *ws = *v;
    for (int32_t i = 0; i < f->n_span; i++)  /* grown to the largest span's needs */
        if (eng_swa_ws_reserve(&m->kctx, &ws->swa, f->span[i].T, f->span[i].pos0, in->n_swa, in->n_head,
                               in->n_head_kv, in->head_dim) != ENG_OK)
            return ENG_ERR_NOMEM;
    return eng_attn_ws_prepare(m, &ws->attn, f, false);
}

static void swa_ws_free(void *v) {
    swa_kind_ws *ws = v;
    if (!ws) return;
    eng_attn_ws_free(&ws->attn);
    eng_swa_ws_free(&ws->swa);
    free(ws);
}

static void swa_forward(eng_fwd *f, int32_t il, void *ws) {
    eng_attn_layer(f, il, f->m->layers[il].w, &((swa_kind_ws *)ws)->attn, swa_core);
}

static int swa_mem_new(const eng_model *m, int32_t il, int32_t n_ctx, int32_t slack, void **out) {
    eng_swa_mem *mem = calloc(1, sizeof *mem);
    if (!mem) return ENG_ERR_NOMEM;
    const int32_t ge = m->info.n_head_kv * m->info.head_dim;
    if (eng_swa_mem_alloc(mem, eng_swa_ring_cells(n_ctx, m->info.n_swa, slack), ge) != ENG_OK) {
        free(mem);
        return ENG_ERR_NOMEM;
    }
    *out = mem;
    return ENG_OK;
}

static void swa_mem_free(void *mem) {
    eng_swa_mem_free(mem);
    free(mem);
}

static void swa_mem_clear(const eng_model *m, int32_t il, void *mem, int32_t n_used) { eng_swa_mem_clear(mem); }

static bool swa_can_truncate(const eng_model *m, int32_t il, const void *mem, int32_t n_tokens, int32_t n) {
    return eng_swa_can_truncate(mem, m->info.n_swa, n_tokens, n);
}

static void swa_truncate(const eng_model *m, int32_t il, void *mem, int32_t n_tokens, int32_t n) {
    eng_swa_truncate(mem, n_tokens, n);
}

static void swa_copy(const eng_model *m, int32_t il, void *dst, const void *src, int32_t n) {
    eng_swa_copy(dst, src, n);
}

/* K rows, then V rows, over the positions whose cells both sequences still hold. */
static bool swa_compare(const eng_model *m, int32_t il, const void *va, const void *vb, int32_t n_a, int32_t n_b,
                        eng_seq_diff *out) {
    const eng_swa_mem *wa = va, *wb = vb;
    const int32_t n = n_a < n_b ? n_a : n_b;
    const int32_t la = eng_swa_valid_lo(wa, n_a), lb = eng_swa_valid_lo(wb, n_b);
    const int32_t lo = la > lb ? la : lb;
    const int64_t ge = wa->n_embd_kv;
    for (int part = 0; part < 2; part++)
        for (int32_t p = lo; p < n; p++) {
            const float *ra = part ? eng_swa_v(wa, p) : eng_swa_k(wa, p);
            const float *rb = part ? eng_swa_v(wb, p) : eng_swa_k(wb, p);
            const int64_t i = eng_first_diff(ra, rb, ge);
            if (i >= 0) return eng_diff_found(out, part ? ENG_SEQ_PART_V : ENG_SEQ_PART_K, p, i);
        }
    return false;
}

/* Serialised and checkpointed alike: the window of the sequence at n. */
static size_t swa_window_bytes(const eng_model *m, int32_t il, const void *mem, int32_t n) {
    return eng_swa_window_bytes(mem, m->info.n_swa, n);
}

static void swa_window_save(const eng_model *m, int32_t il, const void *mem, int32_t n, void *dst) {
    eng_swa_save_window(mem, m->info.n_swa, n, dst);
}

static void swa_window_load(const eng_model *m, int32_t il, void *mem, int32_t n, const void *src) {
    eng_swa_load_window(mem, m->info.n_swa, n, src);  /* src NULL only for an empty window: lo = n */
}

int32_t eng_seq_swa_cells(const eng_seq *s) {
    for (int32_t il = 0; il < s->m->info.n_layer; il++)
        if (s->mem[il].ops == &eng_kind_swa) return ((const eng_swa_mem *)s->mem[il].state)->n_cells;
    return 0;
}

// ----------------------------------------------------------------------------
// kvreplay-swa: llama layers, sliding-window except every P-th (kvreplay's own)

/* The window and which layers slide: sliding_window_pattern as llama.cpp's
 * set_swa_pattern(P) (layer il slides iff P == 0 or il % P < P - 1; absent:
 * def) or a bool array [L]. */
static int swa_pattern(eng_loader *ld, eng_model *m, int32_t def, bool *is_swa) {
    eng_model_info *in = &m->info;
    int rc;
    if ((rc = eng_ld_int(ld, "attention.sliding_window", -1, 1, INT32_MAX, &in->n_swa)) != ENG_OK) return rc;
    char key[128];
    snprintf(key, sizeof key, "%s.attention.sliding_window_pattern", ld->arch);
    const int64_t i = eng_gguf_find_key(ld->g, key);
    if (i >= 0 && eng_gguf_kv_type(ld->g, i) == ENG_GGUF_TYPE_ARRAY) {
        if (eng_gguf_arr_type(ld->g, i) != ENG_GGUF_TYPE_BOOL || eng_gguf_arr_n(ld->g, i) != (uint64_t)in->n_layer) {
            eng_errf(ld->err, ld->errlen, "%s: metadata: %s: expected an integer or an array of %d bools", ld->path,
                     key, in->n_layer);
            return ENG_ERR_FORMAT;
        }
        for (int32_t il = 0; il < in->n_layer; il++) is_swa[il] = eng_gguf_get_arr_num(ld->g, i, (uint64_t)il) != 0;
        return ENG_OK;
    }
    int32_t P;
    if ((rc = eng_ld_int(ld, "attention.sliding_window_pattern", def, 0, INT32_MAX, &P)) != ENG_OK) return rc;
    for (int32_t il = 0; il < in->n_layer; il++) is_swa[il] = P == 0 || il % P < P - 1;
    return ENG_OK;
}

static int kvreplay_swa_hparams(eng_loader *ld, eng_model *m) {
    eng_model_info *in = &m->info;
    int rc;
    if ((rc = eng_ld_float(ld, "attention.layer_norm_rms_epsilon", 1e-5, &in->rms_eps)) != ENG_OK) return rc;
    if ((rc = eng_attn_hparams(ld, m, NULL)) != ENG_OK) return rc;
    bool *is_swa = calloc((size_t)in->n_layer, sizeof(bool));
    if (!is_swa) return ENG_ERR_NOMEM;
    rc = swa_pattern(ld, m, 0, is_swa);
    for (int32_t il = 0; rc == ENG_OK && il < in->n_layer; il++) {
        eng_layer *L = &m->layers[il];
        L->ops = is_swa[il] ? &eng_kind_swa : &eng_kind_attn;
        L->has_ffn = true;
        L->rope = true;
    }
    free(is_swa);
    return rc;
}

// ----------------------------------------------------------------------------
// cohere2: llama.cpp's LLM_ARCH_COHERE2 (Command R7B), the sliding-window
// architecture llama.cpp reads: layer norm without bias, attention and FFN
// in parallel from one norm (x = (x + ffn(n)) + attn(n)), sliding-window
// layers with RoPE and full-attention layers without (NoPE), the head tied
// to token_embd, logits times logit_scale.

static int cohere2_hparams(eng_loader *ld, eng_model *m) {
    eng_model_info *in = &m->info;
    int rc;
    if ((rc = eng_ld_float(ld, "attention.layer_norm_epsilon", -1, &in->norm_eps)) != ENG_OK) return rc;
    if ((rc = eng_attn_hparams(ld, m, NULL)) != ENG_OK) return rc;
    char key[128];
    snprintf(key, sizeof key, "%s.logit_scale", ld->arch);
    double scale;
    rc = eng_gguf_get_float(ld->g, key, &scale);
    if (rc != ENG_OK || !isfinite(scale)) {
        eng_errf(ld->err, ld->errlen, "%s: metadata: %s: %s", ld->path, key,
                 rc == ENG_ERR_NOT_FOUND ? "missing" : "expected a finite float");
        return ENG_ERR_FORMAT;
    }
    m->logit_scale = scale != 0.0 ? (float)scale : 1.0f;  /* llama.cpp scales only when non-zero */
    m->norm = ENG_NORM_LAYER;
    m->tie_output = true;
    bool *is_swa = calloc((size_t)in->n_layer, sizeof(bool));
    if (!is_swa) return ENG_ERR_NOMEM;
    rc = swa_pattern(ld, m, 4, is_swa);  /* llama.cpp's default period for cohere2 */
    for (int32_t il = 0; rc == ENG_OK && il < in->n_layer; il++) {
        eng_layer *L = &m->layers[il];
        L->ops = is_swa[il] ? &eng_kind_swa : &eng_kind_attn;
        L->has_ffn = true;
        L->parallel = true;
        L->rope = is_swa[il];  /* cohere2 ropes only its sliding-window layers */
    }
    free(is_swa);
    return rc;
}

// ----------------------------------------------------------------------------
// Synthetic sliding-window models

static int swa_synth_check(synth_ctx *c) {
    int rc = eng_synth_attn_check(c);
    if (rc) return rc;
    char msg[96];
    if (!sy_in_range(c->p.n_swa, 1, INT32_MAX)) {
        snprintf(msg, sizeof msg, "%d, expected a window of at least 1 position", c->p.n_swa);
        return sy_fail_arg(c, "n_swa", msg);
    }
    if (!sy_in_range(c->p.attn_every, 0, 1 << 20)) {
        snprintf(msg, sizeof msg, "%d, expected >= 0 (0: every layer sliding-window)", c->p.attn_every);
        return sy_fail_arg(c, "attn_every", msg);
    }
    return ENG_OK;
}

/* The window and llama.cpp's set_swa_pattern(P) period: layer il slides iff
 * P == 0 or il % P < P - 1. */
static int swa_synth_window_keys(synth_ctx *c) {
    int rc = eng_gguf_writer_set_u32(c->w, sy_key(c, "attention.sliding_window"), (uint32_t)c->p.n_swa);
    if (!rc) rc = eng_gguf_writer_set_u32(c->w, sy_key(c, "attention.sliding_window_pattern"), (uint32_t)c->p.attn_every);
    return rc ? sy_nomem(c, "metadata") : ENG_OK;
}

/* kvreplay-swa: llama's keys plus the window keys. */
static int kvreplay_swa_synth_meta(synth_ctx *c) {
    int rc = eng_synth_attn_meta(c, true, true);
    return rc ? rc : swa_synth_window_keys(c);
}

static int kvreplay_swa_synth_layer(synth_ctx *c, int32_t il) {
    int rc = eng_synth_attn_tensors(c, il);
    return rc ? rc : eng_synth_ffn_tensors(c, il, true);
}

/* cohere2: llama's keys with the layer-norm epsilon instead of the RMS one,
 * the window keys, and logit_scale = K / sqrt(D): the head is token_embd
 * (N(0, 1) rows), so the scaled logits have the N(0, K^2) law of the other
 * archs' output.weight. */
static int cohere2_synth_meta(synth_ctx *c) {
    int rc = eng_synth_attn_meta(c, true, false);
    if (!rc) rc = swa_synth_window_keys(c);
    if (rc) return rc;
    rc = eng_gguf_writer_set_f32(c->w, sy_key(c, "attention.layer_norm_epsilon"), c->p.rms_eps);
    if (!rc) rc = eng_gguf_writer_set_f32(c->w, sy_key(c, "logit_scale"),
                                          (float)(SYNTH_OUTPUT_K / sqrt((double)c->p.n_embd)));
    return rc ? sy_nomem(c, "metadata") : ENG_OK;
}

/* attn_norm (a layer-norm weight), attn_q/k/v/output, ffn_gate/up/down (no ffn_norm). */
static int cohere2_synth_layer(synth_ctx *c, int32_t il) {
    int rc = eng_synth_attn_tensors(c, il);
    return rc ? rc : eng_synth_ffn_tensors(c, il, false);
}

static const eng_synth_arch cohere2_synth = {
    .name = "swa", .groups = SY_HEADS | SY_FF | SY_SWA | SY_EVERY, .tied = true,
    .check = swa_synth_check, .meta = cohere2_synth_meta, .layer = cohere2_synth_layer,
    .presets = {
        {.D = 64, .L = 2, .H = 4, .G = 2, .F = 176, .ctx = 4096, .W = 40, .every = 2},
        {.D = 256, .L = 4, .H = 8, .G = 4, .F = 704, .ctx = 16384, .W = 512, .every = 4},
        {.D = 1024, .L = 12, .H = 16, .G = 8, .F = 2816, .ctx = 8192, .W = 1024, .every = 6},
        {.D = 64, .L = 2, .H = 2, .G = 1, .F = 176, .ctx = 262144, .W = 40, .every = 2},
    },
};

/* kvreplay-swa, the pre-cohere2 synthetic SWA architecture: kept so that
 * old files and results can be made again, byte for byte (`--arch
 * kvreplay-swa`; general.name keeps "swa" as those files have it). */
static const eng_synth_arch kvreplay_swa_synth = {
    .name = "kvreplay-swa", .label = "swa", .groups = SY_HEADS | SY_FF | SY_SWA | SY_EVERY,
    .check = swa_synth_check, .meta = kvreplay_swa_synth_meta, .layer = kvreplay_swa_synth_layer,
    .presets = {
        {.D = 64, .L = 2, .H = 4, .G = 2, .F = 176, .ctx = 4096, .W = 40, .every = 2},
        {.D = 256, .L = 4, .H = 8, .G = 4, .F = 704, .ctx = 16384, .W = 512, .every = 4},
        {.D = 1024, .L = 12, .H = 16, .G = 8, .F = 2816, .ctx = 8192, .W = 1024, .every = 6},
        {.D = 64, .L = 2, .H = 2, .G = 1, .F = 176, .ctx = 262144, .W = 40, .every = 2},
    },
};

static const eng_arch kvreplay_swa_arch = {
    .name = "kvreplay-swa", .hparams = kvreplay_swa_hparams, .synth = &kvreplay_swa_synth,
};
static const eng_arch cohere2_arch = {.name = "cohere2", .hparams = cohere2_hparams, .synth = &cohere2_synth};
static const eng_arch *const swa_archs[] = {&cohere2_arch, &kvreplay_swa_arch, NULL};

const eng_layer_ops eng_kind_swa = {
    .name = "swa",
    .kind = ENG_LAYER_ATTN_SWA,
    .archs = swa_archs,
    .load = swa_load,
    .free = swa_free,
    .n_params = eng_attn_params,
    .token_flops = eng_attn_token_flops,
    .pos_flops = swa_pos_flops,
    .prepare = swa_prepare,
    .ws_free = swa_ws_free,
    .forward = swa_forward,
    .mem_new = swa_mem_new,
    .mem_free = swa_mem_free,
    .mem_clear = swa_mem_clear,
    .can_truncate = swa_can_truncate,
    .truncate = swa_truncate,
    .copy = swa_copy,
    .compare = swa_compare,
    .ser_bytes = swa_window_bytes,
    .ser_save = swa_window_save,
    .ser_load = swa_window_load,
    .ckpt_bytes = swa_window_bytes,
    .ckpt_save = swa_window_save,
    .ckpt_load = swa_window_load,
};
