/*
 * engine/forward.c: the forward pass (one chunk of T tokens through every
 * layer), chunked prefill and single-token decode.
 *
 * A chunk is ONE forward of T tokens at positions [pos0, pos0 + T): every
 * weight product has M = T, and the attention of each KV head (its H/G query
 * heads stacked) is one product over the keys [0, pos0 + T) with the causal
 * mask (eng_k_attention). The chunk's own K/V rows are
 * written to the cache before attention reads them; nothing reads a row at
 * or beyond pos0 + T, so stale rows of a truncated sequence are never used.
 *
 * The output head (final RMSNorm + [V, D] product) is applied to ALL T rows
 * of a chunk whose logits are needed (M = T), then the needed rows are
 * copied out; chunks whose logits nobody needs skip it. So the last token's
 * logits come from a product of the same shape in a cold prefill and in a
 * prefill that resumes from a cached, grid-aligned prefix.
 *
 * Chunk boundaries (eng_prefill): align CHUNK cuts at absolute multiples of
 * C; align NONE cuts every ubatch tokens counted from where the prefill
 * starts. Decode is a chunk of one token, whatever the alignment.
 *
 * Per layer (llama.cpp's llama graph):
 *   x += Wo . attn(rope(Wq . n1(x)), rope(Wk . n1(x)), Wv . n1(x))
 *   x += Wdown . (silu(Wgate . n2(x)) * Wup . n2(x))
 * then logits = Wout . n3(x). Every op rounds its output to bf16 in bf16
 * mode (kernels.h). Layer kinds dispatch in one switch (forward_layer):
 * ATTN_SWA is the same layer with the banded attention of swa.h over its
 * ring of window cells; RECURRENT replaces attention by the Mamba-2 mixer
 * (ssm.h) on its recurrent and conv state, x += mixer(n1(x)); mamba2 layers
 * have no FFN half. The scratch of both is reserved before the first layer
 * runs, so a chunk fails (ENG_ERR_NOMEM) before it changes any state.
 */
#include "internal.h"

#include <cblas.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "status.h"

eng_prefill_params eng_prefill_params_default(void) {
    eng_prefill_params p = {
        .chunk = 64, .align = ENG_ALIGN_CHUNK, .ubatch = 512, .all_logits = false, .on_chunk = NULL, .ud = NULL,
    };
    return p;
}

// ----------------------------------------------------------------------------
// Workspace: zeroed at allocation, grown on demand

void eng_ws_free(eng_ws *ws) {
    free(ws->x); free(ws->xn); free(ws->qkv); free(ws->att); free(ws->proj);
    free(ws->gu); free(ws->hid); free(ws->qg); free(ws->og); free(ws->scores); free(ws->logits);
    free(ws->rope_c); free(ws->rope_s);
    eng_swa_ws_free(&ws->swa);
    eng_ssm_ws_free(&ws->ssm);
    memset(ws, 0, sizeof *ws);
}

static float *zalloc(int64_t n) { return calloc((size_t)(n > 0 ? n : 1), sizeof(float)); }

/* eng_k_attention works on batches of KV heads whose scores fit in the
 * scores buffer; this caps that buffer (floats). Batching changes no result:
 * every head is computed on its own. */
#define ATTN_BATCH_FLOATS ((int64_t)4 << 20)

/* Room for T rows attending P keys; logits [T, V] only when want_logits;
 * the scratch of sliding-window and Mamba-2 layers for this chunk. */
static int ws_reserve(eng_seq *s, int32_t T, int32_t P, bool want_logits) {
    eng_ws *w = &s->ws;
    const eng_model_info *in = &s->m->info;
    const int64_t D = in->n_embd, F = in->n_ff, HE = (int64_t)in->n_head * in->head_dim;
    const int64_t QKV = HE + 2 * (int64_t)in->n_head_kv * in->head_dim;
    const int64_t GR = in->n_head_kv > 0 ? in->n_head / in->n_head_kv : 1;  /* query heads per KV head */
    if (in->n_layer_attn == 0) P = 0;  /* no full-attention scores */
    if (in->n_layer_swa > 0 &&
        eng_swa_ws_reserve(&w->swa, T, s->n_tokens, in->n_swa, in->n_head, in->n_head_kv,
                           in->head_dim) != ENG_OK)
        return ENG_ERR_NOMEM;
    if (in->n_layer_rec > 0 && eng_ssm_ws_reserve(&w->ssm, &s->m->ssm_hp, T) != ENG_OK) return ENG_ERR_NOMEM;
    if (T > w->cap_T) {
        float *lg = w->logits;
        w->logits = NULL;
        free(lg);
        free(w->x); free(w->xn); free(w->qkv); free(w->att); free(w->proj);
        free(w->gu); free(w->hid); free(w->rope_c); free(w->rope_s); free(w->scores);
        free(w->qg); free(w->og);
        w->scores = NULL;
        w->scores_cap = 0;
        w->cap_P = 0;
        w->x = zalloc(T * D);
        w->xn = zalloc(T * D);
        w->qkv = zalloc(T * QKV);
        w->att = zalloc(T * HE);
        w->proj = zalloc(T * D);
        w->gu = zalloc(T * 2 * F);
        w->hid = zalloc(T * F);
        w->qg = zalloc(HE * T);
        w->og = zalloc(HE * T);
        w->rope_c = zalloc((int64_t)T * (in->n_rot / 2));
        w->rope_s = zalloc((int64_t)T * (in->n_rot / 2));
        if (!w->x || !w->xn || !w->qkv || !w->att || !w->proj || !w->gu || !w->hid || !w->rope_c || !w->rope_s ||
            !w->qg || !w->og) {
            eng_ws_free(w);
            return ENG_ERR_NOMEM;
        }
        w->cap_T = T;
    }
    if (P > w->cap_P) {
        int32_t cap = w->cap_P * 2 > P ? w->cap_P * 2 : P;
        if (cap > s->n_ctx) cap = s->n_ctx;
        const int64_t one = GR * w->cap_T * cap;  /* one group */
        const int64_t all = (int64_t)in->n_head_kv * one;
        const int64_t n = all <= ATTN_BATCH_FLOATS ? all : (one > ATTN_BATCH_FLOATS ? one : ATTN_BATCH_FLOATS);
        free(w->scores);
        w->scores = zalloc(n);
        if (!w->scores) { w->cap_P = 0; w->scores_cap = 0; return ENG_ERR_NOMEM; }
        w->cap_P = cap;
        w->scores_cap = n;
    }
    if (want_logits && !w->logits) {
        w->logits = zalloc((int64_t)w->cap_T * in->n_vocab);
        if (!w->logits) return ENG_ERR_NOMEM;
    }
    return ENG_OK;
}

// ----------------------------------------------------------------------------
// Token mixers, one per layer kind

static void attn_layer(eng_seq *s, int32_t il, int32_t T, int32_t pos0) {
    const eng_model *m = s->m;
    const eng_model_info *in = &m->info;
    const eng_kctx *k = &m->kctx;
    const eng_attn_weights *aw = &m->layers[il].attn;
    eng_attn_mem *mem = &s->mem[il].attn;
    eng_ws *w = &s->ws;
    const int32_t D = in->n_embd, H = in->n_head, G = in->n_head_kv, E = in->head_dim;
    const int32_t HE = H * E, GE = G * E, QKV = HE + 2 * GE;

    eng_k_rmsnorm(k, T, D, w->x, D, aw->attn_norm, in->rms_eps, w->xn, D);
    eng_k_matmul(k, &aw->wqkv, T, w->xn, D, w->qkv, QKV);             /* [T, HE | GE | GE] */
    eng_k_rope(k, T, H + G, E, in->n_rot, w->rope_c, w->rope_s, w->qkv, QKV);  /* Q and K heads, side by side */
    for (int32_t t = 0; t < T; t++) {
        const float *row = w->qkv + (int64_t)t * QKV;
        memcpy(mem->k + (int64_t)(pos0 + t) * GE, row + HE, sizeof(float) * (size_t)GE);
        memcpy(mem->v + (int64_t)(pos0 + t) * GE, row + HE + GE, sizeof(float) * (size_t)GE);
    }
    eng_k_attention(k, T, pos0, H, G, E, w->qkv, QKV, mem->k, mem->v, GE, w->att, HE, w->qg, w->og, w->scores,
                    w->scores_cap);
    eng_k_matmul(k, &aw->wo, T, w->att, HE, w->proj, D);
    eng_k_add(k, T, D, w->x, D, w->proj, D);
}

/* Sliding-window attention: llama's layer, the window's cells in a ring. */
static void swa_layer(eng_seq *s, int32_t il, int32_t T, int32_t pos0) {
    const eng_model *m = s->m;
    const eng_model_info *in = &m->info;
    const eng_kctx *k = &m->kctx;
    const eng_attn_weights *aw = &m->layers[il].attn;
    eng_ws *w = &s->ws;
    const int32_t D = in->n_embd, H = in->n_head, G = in->n_head_kv, E = in->head_dim;
    const int32_t HE = H * E, QKV = HE + 2 * G * E;

    eng_k_rmsnorm(k, T, D, w->x, D, aw->attn_norm, in->rms_eps, w->xn, D);
    eng_k_matmul(k, &aw->wqkv, T, w->xn, D, w->qkv, QKV);             /* [T, HE | GE | GE] */
    eng_k_rope(k, T, H + G, E, in->n_rot, w->rope_c, w->rope_s, w->qkv, QKV);
    const int rc = eng_swa_attend(k, &s->mem[il].swa, in->n_swa, T, pos0, H, G, E, w->qkv, QKV, w->att, HE, &w->swa);
    ENG_ASSERT(rc == ENG_OK);  /* scratch reserved by ws_reserve */
    eng_k_matmul(k, &aw->wo, T, w->att, HE, w->proj, D);
    eng_k_add(k, T, D, w->x, D, w->proj, D);
}

/* Mamba-2: x += mixer(rmsnorm(x) * attn_norm). */
static void ssm_layer(eng_seq *s, int32_t il, int32_t T) {
    const eng_model *m = s->m;
    const eng_model_info *in = &m->info;
    const eng_kctx *k = &m->kctx;
    const eng_ssm_weights *sw = &m->layers[il].ssm;
    eng_ws *w = &s->ws;
    const int32_t D = in->n_embd;

    eng_k_rmsnorm(k, T, D, w->x, D, sw->attn_norm, in->rms_eps, w->xn, D);
    const int rc = eng_ssm_forward(k, &m->ssm_hp, sw, &s->mem[il].ssm, T, w->xn, D, w->proj, D, &w->ssm);
    ENG_ASSERT(rc == ENG_OK);  /* scratch reserved by ws_reserve */
    eng_k_add(k, T, D, w->x, D, w->proj, D);
}

static void ffn_layer(eng_seq *s, int32_t il, int32_t T) {
    const eng_model *m = s->m;
    const eng_model_info *in = &m->info;
    const eng_kctx *k = &m->kctx;
    const eng_ffn_weights *fw = &m->layers[il].ffn;
    eng_ws *w = &s->ws;
    const int32_t D = in->n_embd, F = in->n_ff;

    eng_k_rmsnorm(k, T, D, w->x, D, fw->ffn_norm, in->rms_eps, w->xn, D);
    eng_k_matmul(k, &fw->w_gate_up, T, w->xn, D, w->gu, 2 * F);  /* [T, F | F] */
    eng_k_swiglu(k, T, F, w->gu, 2 * F, w->hid, F);
    eng_k_matmul(k, &fw->w_down, T, w->hid, F, w->proj, D);
    eng_k_add(k, T, D, w->x, D, w->proj, D);
}

static void forward_layer(eng_seq *s, int32_t il, int32_t T, int32_t pos0) {
    switch (s->m->layers[il].kind) {
    case ENG_LAYER_ATTN: attn_layer(s, il, T, pos0); break;
    case ENG_LAYER_ATTN_SWA: swa_layer(s, il, T, pos0); break;
    case ENG_LAYER_RECURRENT: ssm_layer(s, il, T); break;
    default: ENG_ASSERT(0);
    }
    if (s->m->layers[il].has_ffn) ffn_layer(s, il, T);
}

// ----------------------------------------------------------------------------
// One chunk

/* Runs T tokens at pos0 = s->n_tokens. want_logits: the output head on all T
 * rows, into out_rows [T, V] when not NULL, else into s->ws.logits. */
static int forward_chunk(eng_seq *s, const int32_t *tokens, int32_t T, bool want_logits, float *out_rows) {
    const eng_model *m = s->m;
    const eng_model_info *in = &m->info;
    const int32_t pos0 = s->n_tokens, D = in->n_embd;
    ENG_ASSERT(T >= 1 && pos0 + T <= s->n_ctx);
    int rc = ws_reserve(s, T, pos0 + T, want_logits && !out_rows);
    if (rc != ENG_OK) return rc;
    eng_ws *w = &s->ws;
    openblas_set_num_threads(m->num.n_threads);  /* numerics are per model */

    for (int32_t t = 0; t < T; t++) {
        memcpy(w->x + (int64_t)t * D, m->tok_embd + (int64_t)tokens[t] * D, sizeof(float) * (size_t)D);
        s->tokens[pos0 + t] = tokens[t];
    }
    if (s->n_used < pos0 + T) s->n_used = pos0 + T;
    eng_k_rope_table(T, pos0, in->n_rot, in->rope_freq_base, w->rope_c, w->rope_s);
    for (int32_t il = 0; il < in->n_layer; il++) forward_layer(s, il, T, pos0);
    if (want_logits) {
        eng_k_rmsnorm(&m->kctx, T, D, w->x, D, m->output_norm, in->rms_eps, w->xn, D);
        eng_k_matmul(&m->kctx, &m->output, T, w->xn, D, out_rows ? out_rows : w->logits, in->n_vocab);
    }
    return ENG_OK;
}

int eng_forward_chunk(eng_seq *s, const int32_t *tokens, int32_t T, float *logits_rows) {
    return forward_chunk(s, tokens, T, logits_rows != NULL, logits_rows);
}

// ----------------------------------------------------------------------------
// Prefill and decode

static int check_tokens(const eng_seq *s, const int32_t *tokens, int32_t n) {
    for (int32_t i = 0; i < n; i++)
        if (tokens[i] < 0 || tokens[i] >= s->m->info.n_vocab) return ENG_ERR_ARG;
    return ENG_OK;
}

int eng_prefill(eng_seq *s, const int32_t *tokens, int32_t n, const eng_prefill_params *p, float *logits) {
    const eng_prefill_params def = eng_prefill_params_default();
    if (!p) p = &def;
    if (!s || !tokens || n < 1 || p->chunk < 1 || (p->align != ENG_ALIGN_CHUNK && p->align != ENG_ALIGN_NONE) ||
        (p->align == ENG_ALIGN_NONE && p->ubatch < 1))
        return ENG_ERR_ARG;
    if (check_tokens(s, tokens, n) != ENG_OK) return ENG_ERR_ARG;
    if ((int64_t)s->n_tokens + n > s->n_ctx) return ENG_ERR_RANGE;
    const int64_t V = s->m->info.n_vocab;
    const int32_t start = s->n_tokens, end = start + n;
    for (int32_t pos = start; pos < end;) {
        int64_t cend = p->align == ENG_ALIGN_CHUNK ? ((int64_t)pos / p->chunk + 1) * p->chunk
                                                   : (int64_t)pos + p->ubatch;
        if (cend > end) cend = end;
        const int32_t T = (int32_t)cend - pos;
        const bool last = cend == end;
        const bool want = logits && (p->all_logits || last);
        float *rows = want && p->all_logits ? logits + (int64_t)(pos - start) * V : NULL;
        int rc = forward_chunk(s, tokens + (pos - start), T, want, rows);
        if (rc != ENG_OK) return rc;
        s->n_tokens = (int32_t)cend;
        if (want && !p->all_logits)
            memcpy(logits, s->ws.logits + (int64_t)(T - 1) * V, sizeof(float) * (size_t)V);
        if (p->on_chunk) p->on_chunk(p->ud, s, s->n_tokens);
        pos = (int32_t)cend;
    }
    return ENG_OK;
}

int eng_decode(eng_seq *s, int32_t token, float *logits) {
    if (!s) return ENG_ERR_ARG;
    if (check_tokens(s, &token, 1) != ENG_OK) return ENG_ERR_ARG;
    if (s->n_tokens + 1 > s->n_ctx) return ENG_ERR_RANGE;
    int rc = forward_chunk(s, &token, 1, logits != NULL, logits);
    if (rc != ENG_OK) return rc;
    s->n_tokens += 1;
    return ENG_OK;
}
