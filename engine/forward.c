/*
 * engine/forward.c: the forward pass of one step (the stacked rows of one
 * or more sequences' chunks through every layer), chunked prefill and
 * single-token decode. eng_prefill and eng_decode run steps of one
 * sequence on its own scratch; eng_batch_forward (batch.c) runs steps of
 * several on the batch's scratch, through the same code.
 *
 * A step is ONE forward of T rows: span i is the chunk of T_i tokens at
 * positions [pos0_i, pos0_i + T_i) of its own sequence, rows [r0_i,
 * r0_i + T_i) of the stack. Every weight product has M = T (the rows of
 * every span), and each layer's kind (engine/layers/) computes each span's
 * chunk from that sequence's memory at pos0_i (full attention over the keys
 * [0, pos0_i + T_i), a window, or a recurrent state). A step of one span
 * is the chunk of a single sequence: M = T_i, as before batches existed.
 *
 * The output head (final norm + [V, D] product) is applied to ALL the rows
 * of every span whose logits are needed (M = the sum of their T_i, their
 * rows in stack order), then the needed rows are copied out; spans whose
 * logits nobody needs skip it. So for a single sequence the last token's
 * logits come from a product of the same shape in a cold prefill and in a
 * prefill that resumes from a cached, grid-aligned prefix.
 *
 * Chunk boundaries (eng_prefill): align CHUNK cuts at absolute multiples of
 * C; align NONE cuts every ubatch tokens counted from where the prefill
 * starts. Decode is a chunk of one token, whatever the alignment.
 *
 * Per step:
 *   x = token_embd[tokens]           (then token_embd_norm when the arch has it: rwkv7)
 *   for each layer: x = layer(x)     the layer's kind: ops->forward
 *   logits = (norm(x) * output_norm [+ b]) . Wout^T   (times the arch's logit scale)
 * Every op rounds its output to bf16 in bf16 mode (kernels.h). Every kind's
 * scratch is prepared before the first layer runs, so a step fails
 * (ENG_ERR_NOMEM) before it changes any state.
 */
#include "internal.h"

#include <cblas.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "status.h"

// ----------------------------------------------------------------------------
// Workspace: zeroed at allocation, grown on demand

void eng_ws_free(eng_ws *ws) {
    free(ws->x); free(ws->xn); free(ws->proj); free(ws->gu); free(ws->hid); free(ws->logits); free(ws->xn_thr);
    for (int32_t i = 0; eng_layer_kinds[i]; i++)
        if (ws->kind[i]) eng_layer_kinds[i]->ws_free(ws->kind[i]);
    memset(ws, 0, sizeof *ws);
}

static float *zalloc(int64_t n) { return calloc((size_t)(n > 0 ? n : 1), sizeof(float)); }

/* Room for the step's T rows; logits [n_logits, V] when n_logits > 0; then
 * the scratch of every kind present in the model for this step (their
 * prepare). */
static int ws_reserve(eng_ws *w, const eng_fwd *f, int32_t n_logits) {
    const eng_model *m = f->m;
    const eng_model_info *in = &m->info;
    const int64_t T = f->T, D = in->n_embd, F = in->n_ff;
    const int64_t F32 = (F + ENG_REF_PANEL - 1) / ENG_REF_PANEL * ENG_REF_PANEL;
    if (T > w->cap_T) {
        free(w->x); free(w->xn); free(w->proj); free(w->gu); free(w->hid); free(w->xn_thr);
        w->x = zalloc(T * D);
        w->xn = zalloc(T * D);
        w->proj = zalloc(T * D);
        w->gu = zalloc(T * 2 * F32);  /* ref pads the gate part to a panel */
        w->hid = zalloc(T * F);
        w->xn_thr = zalloc((int64_t)m->num.n_threads * T * D);
        if (!w->x || !w->xn || !w->proj || !w->gu || !w->hid || !w->xn_thr) {
            free(w->x); free(w->xn); free(w->proj); free(w->gu); free(w->hid); free(w->xn_thr);
            w->x = w->xn = w->proj = w->gu = w->hid = w->xn_thr = NULL;
            w->cap_T = 0;
            return ENG_ERR_NOMEM;
        }
        w->cap_T = (int32_t)T;
    }
    if (n_logits > w->cap_logits) {
        free(w->logits);
        w->logits = zalloc((int64_t)n_logits * in->n_vocab);
        w->cap_logits = w->logits ? n_logits : 0;
        if (!w->logits) return ENG_ERR_NOMEM;
    }
    uint32_t seen = 0;
    for (int32_t il = 0; il < in->n_layer; il++) {
        const eng_layer *L = &m->layers[il];
        if (seen & (1u << L->kind_ix)) continue;
        seen |= 1u << L->kind_ix;
        int rc = L->ops->prepare(m, il, &w->kind[L->kind_ix], f);
        if (rc != ENG_OK) return rc;
    }
    return ENG_OK;
}

// ----------------------------------------------------------------------------
// One step

int eng_forward_step(eng_ws *w, const eng_model *m, const eng_fspan *sp, int32_t n_span,
                     const int32_t *const *tokens, const bool *want, float *out) {
    const eng_model_info *in = &m->info;
    const int32_t D = in->n_embd;
    int32_t T = 0, n_head = 0;
    for (int32_t i = 0; i < n_span; i++) {
        const eng_seq *s = sp[i].s;
        ENG_ASSERT(s->m == m && sp[i].T >= 1 && sp[i].r0 == T && sp[i].pos0 == s->n_tokens &&
                   sp[i].pos0 + sp[i].T <= s->n_ctx);
        T += sp[i].T;
        if (want && want[i]) n_head += sp[i].T;
    }
    eng_fwd f = {.m = m, .k = &m->kctx, .T = T, .n_span = n_span, .span = sp, .w = w};
    int rc = ws_reserve(w, &f, out ? 0 : n_head);
    if (rc != ENG_OK) return rc;
    openblas_set_num_threads(1);  /* the pool splits the products, each sgemm on one thread (kernels.h) */

    for (int32_t i = 0; i < n_span; i++) {
        eng_seq *s = sp[i].s;
        for (int32_t t = 0; t < sp[i].T; t++) {
            memcpy(w->x + (int64_t)(sp[i].r0 + t) * D, m->tok_embd + (int64_t)tokens[i][t] * D,
                   sizeof(float) * (size_t)D);
            s->tokens[sp[i].pos0 + t] = tokens[i][t];
        }
        if (s->n_used < sp[i].pos0 + sp[i].T) s->n_used = sp[i].pos0 + sp[i].T;
    }
    if (m->embd_norm) eng_norm_rows(m, T, w->x, D, m->embd_norm_w, m->embd_norm_b, w->x, D);  /* row by row: in place */
    for (int32_t il = 0; il < in->n_layer; il++) {
        const eng_layer *L = &m->layers[il];
        L->ops->forward(&f, il, w->kind[L->kind_ix]);
    }
    if (n_head > 0) {
        const int64_t V = in->n_vocab;
        float *lg = out ? out : w->logits;
        const float *X = w->x;
        if (n_head < T) {  /* the rows of the spans that want logits, in stack order */
            int32_t r = 0;
            for (int32_t i = 0; i < n_span; i++)
                if (want[i]) {
                    memcpy(w->xn + (int64_t)r * D, w->x + (int64_t)sp[i].r0 * D,
                           sizeof(float) * (size_t)sp[i].T * (size_t)D);
                    r += sp[i].T;
                }
            X = w->xn;
        }
        eng_kfuse head = {0};  /* the output norm fused into the head's product */
        eng_norm_fuse(&f, &head, m->output_norm, m->output_norm_b);
        eng_k_matmul_fused(&m->kctx, &m->output, n_head, X, D, lg, (int32_t)V, &head);
        if (m->logit_scale != 1.0f) {
            for (int64_t i = 0; i < (int64_t)n_head * V; i++) lg[i] = lg[i] * m->logit_scale;
            eng_k_round(&m->kctx, lg, (int64_t)n_head * V);
        }
    }
    return ENG_OK;
}

/* Runs T tokens of s at pos0 = s->n_tokens, a step of one span on s's own
 * scratch. want_logits: the output head on all T rows, into out_rows
 * [T, V] when not NULL, else into s->ws.logits. */
static int forward_chunk(eng_seq *s, const int32_t *tokens, int32_t T, bool want_logits, float *out_rows) {
    ENG_ASSERT(T >= 1 && s->n_tokens + T <= s->n_ctx);
    const eng_fspan sp = {.s = s, .r0 = 0, .T = T, .pos0 = s->n_tokens};
    return eng_forward_step(&s->ws, s->m, &sp, 1, &tokens, &want_logits, out_rows);
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
