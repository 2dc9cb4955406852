/*
 * engine/batch.c: steps over several sequences (model.h, "Batches"): the
 * checks of a step's spans, the stacking of their rows into one step of
 * forward.c (eng_forward_step: the weight products over every row, memory
 * per span), the logits handed back to each span, and the planted fault
 * of the tests.
 *
 * Invariants: a step either fails before any state changes (bad spans,
 * out of memory) or advances every span's sequence by its tokens; the
 * batch keeps scratch only (its eng_ws and the step's arrays), never a
 * sequence or a caller's buffer. Rows are stacked in the caller's span
 * order; the head's rows are the rows of the spans that want logits, in
 * that order (forward.c).
 */
#include "internal.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "status.h"

struct eng_batch {
    const eng_model *m;
    eng_ws           ws;      /* the stacked rows' scratch (forward.c) */
    eng_batch_fault  fault;
    int32_t          cap;     /* spans the arrays below hold */
    eng_fspan       *sp;      /* [cap] the step's spans as forward.c takes them */
    const int32_t  **tok;     /* [cap] their tokens */
    bool            *want;    /* [cap] whether the head runs on their rows */
    float           *xrow;    /* [D] the fault's normed row */
};

eng_batch_params eng_batch_params_default(void) {
    eng_batch_params p = {.chunk = 64, .align = ENG_ALIGN_CHUNK, .ubatch = 512};
    return p;
}

eng_batch *eng_batch_new(const eng_model *m) {
    if (!m) return NULL;
    eng_batch *b = calloc(1, sizeof *b);
    if (!b) return NULL;
    b->m = m;
    if (!(b->xrow = calloc((size_t)m->info.n_embd, sizeof(float)))) {
        free(b);
        return NULL;
    }
    return b;
}

void eng_batch_free(eng_batch *b) {
    if (!b) return;
    eng_ws_free(&b->ws);
    free(b->sp);
    free(b->tok);
    free(b->want);
    free(b->xrow);
    free(b);
}

void eng_batch_set_fault(eng_batch *b, eng_batch_fault f) {
    if (b) b->fault = f;
}

static bool params_ok(const eng_batch_params *p) {
    return p->chunk >= 1 && p->ubatch >= 1 && (p->align == ENG_ALIGN_CHUNK || p->align == ENG_ALIGN_NONE);
}

int32_t eng_batch_chunk_len(const eng_seq *s, int32_t n_left, const eng_batch_params *p) {
    const eng_batch_params def = eng_batch_params_default();
    if (!p) p = &def;
    if (!s || n_left < 1 || !params_ok(p)) return 0;
    const int32_t room = p->align == ENG_ALIGN_CHUNK ? p->chunk - s->n_tokens % p->chunk : p->ubatch;
    return n_left < room ? n_left : room;
}

// ----------------------------------------------------------------------------
// The checks of a step: every one before any state changes

/* Grows the step's arrays to n spans. */
static int reserve_spans(eng_batch *b, int32_t n) {
    if (n <= b->cap) return ENG_OK;
    eng_fspan *sp = realloc(b->sp, sizeof *sp * (size_t)n);
    if (sp) b->sp = sp;
    const int32_t **tok = realloc(b->tok, sizeof *tok * (size_t)n);
    if (tok) b->tok = tok;
    bool *want = realloc(b->want, sizeof *want * (size_t)n);
    if (want) b->want = want;
    if (!sp || !tok || !want) return ENG_ERR_NOMEM;
    b->cap = n;
    return ENG_OK;
}

/* Span i against the rules of eng_batch_forward (the duplicate check is the caller's). */
static int check_span(const eng_batch *b, const eng_batch_span *x, int32_t i, const eng_batch_params *p, char *err,
                      size_t errlen) {
    const eng_seq *s = x->seq;
    if (!s) {
        eng_errf(err, errlen, "span %d: seq: NULL", i);
        return ENG_ERR_ARG;
    }
    if (s->m != b->m) {
        eng_errf(err, errlen, "span %d: seq: a sequence of another model than the batch's", i);
        return ENG_ERR_ARG;
    }
    if (x->n < 1 || !x->tokens) {
        eng_errf(err, errlen, "span %d: %s", i, x->n < 1 ? "n: expected at least 1 token" : "tokens: NULL");
        return ENG_ERR_ARG;
    }
    const int32_t V = b->m->info.n_vocab;
    for (int32_t t = 0; t < x->n; t++)
        if (x->tokens[t] < 0 || x->tokens[t] >= V) {
            eng_errf(err, errlen, "span %d: tokens[%d]: id %d outside the vocabulary [0, %d)", i, t, x->tokens[t], V);
            return ENG_ERR_ARG;
        }
    if ((int64_t)s->n_tokens + x->n > s->n_ctx) {
        eng_errf(err, errlen, "span %d: n: %d tokens after %d exceed the sequence's n_ctx %d", i, x->n, s->n_tokens,
                 s->n_ctx);
        return ENG_ERR_RANGE;
    }
    if (p->align == ENG_ALIGN_CHUNK) {
        const int64_t cell = (int64_t)s->n_tokens / p->chunk;
        if (((int64_t)s->n_tokens + x->n - 1) / p->chunk != cell) {
            eng_errf(err, errlen, "span %d: n: positions [%d, %lld) leave the grid cell [%lld, %lld) (C = %d)", i,
                     s->n_tokens, (long long)s->n_tokens + x->n, (long long)(cell * p->chunk),
                     (long long)((cell + 1) * p->chunk), p->chunk);
            return ENG_ERR_ARG;
        }
    } else if (x->n > p->ubatch) {
        eng_errf(err, errlen, "span %d: n: %d tokens exceed the ubatch %d", i, x->n, p->ubatch);
        return ENG_ERR_ARG;
    }
    return ENG_OK;
}

// ----------------------------------------------------------------------------
// The planted fault: a row's head reduced in two halves (tests only)

/* W[j, k] of any layout (kbase.h). */
static float kmat_at(const eng_kmat *W, int32_t j, int32_t k) {
    if (!W->kn) return W->data[(int64_t)j * W->ld + k];
    if (W->panels) return W->data[((int64_t)(j / ENG_REF_PANEL) * W->n_in + k) * ENG_REF_PANEL + j % ENG_REF_PANEL];
    return W->data[(int64_t)k * W->ld + j];
}

/* lg [V] = the head of the residual row x [D], each logit as two fmaf
 * chains (k in [0, D/2) and [D/2, D), each from +0) summed: another
 * reduction order than every kernel's, then rounded and scaled as the head. */
static void fault_split_k(const eng_batch *b, const float *x, float *lg) {
    const eng_model *m = b->m;
    const int32_t D = m->info.n_embd, V = m->info.n_vocab, h = D / 2;
    eng_norm_rows(m, 1, x, D, m->output_norm, m->output_norm_b, b->xrow, D);
    for (int32_t j = 0; j < V; j++) {
        float a0 = 0.0f, a1 = 0.0f;
        for (int32_t k = 0; k < h; k++) a0 = fmaf(b->xrow[k], kmat_at(&m->output, j, k), a0);
        for (int32_t k = h; k < D; k++) a1 = fmaf(b->xrow[k], kmat_at(&m->output, j, k), a1);
        lg[j] = a0 + a1;
    }
    eng_k_round(&m->kctx, lg, V);
    if (m->logit_scale != 1.0f) {
        for (int32_t j = 0; j < V; j++) lg[j] = lg[j] * m->logit_scale;
        eng_k_round(&m->kctx, lg, V);
    }
}

// ----------------------------------------------------------------------------
// A step

int eng_batch_forward(eng_batch *b, const eng_batch_span *spans, int32_t n, const eng_batch_params *p, char *err,
                      size_t errlen) {
    const eng_batch_params def = eng_batch_params_default();
    if (!p) p = &def;
    if (!b || !spans || n < 1) {
        eng_errf(err, errlen, "%s", !b ? "batch: NULL" : "spans: expected at least one span");
        return ENG_ERR_ARG;
    }
    if (!params_ok(p)) {
        eng_errf(err, errlen, "params: chunk %d, ubatch %d, align %d: expected chunk >= 1, ubatch >= 1, chunk|none",
                 p->chunk, p->ubatch, (int)p->align);
        return ENG_ERR_ARG;
    }
    int rc;
    for (int32_t i = 0; i < n; i++) {
        if ((rc = check_span(b, &spans[i], i, p, err, errlen)) != ENG_OK) return rc;
        for (int32_t j = 0; j < i; j++)
            if (spans[j].seq == spans[i].seq) {
                eng_errf(err, errlen, "span %d: seq: the sequence of span %d too (one span per sequence and step)", i,
                         j);
                return ENG_ERR_ARG;
            }
    }
    if ((rc = reserve_spans(b, n)) != ENG_OK) {
        eng_errf(err, errlen, "batch: out of memory for %d spans", n);
        return rc;
    }
    int32_t r0 = 0;
    for (int32_t i = 0; i < n; i++) {
        b->sp[i] = (eng_fspan){.s = spans[i].seq, .r0 = r0, .T = spans[i].n, .pos0 = spans[i].seq->n_tokens};
        b->tok[i] = spans[i].tokens;
        b->want[i] = spans[i].logits != NULL;
        r0 += spans[i].n;
    }
    if ((rc = eng_forward_step(&b->ws, b->m, b->sp, n, b->tok, b->want, NULL)) != ENG_OK) {
        eng_errf(err, errlen, "batch: out of memory for a step of %d rows", r0);
        return rc;
    }
    /* the head's rows: every row of the spans that want logits, in span order */
    const int64_t V = b->m->info.n_vocab, D = b->m->info.n_embd;
    int64_t row = 0;
    for (int32_t i = 0; i < n; i++) {
        const eng_batch_span *x = &spans[i];
        x->seq->n_tokens += x->n;
        if (!x->logits) continue;
        if (b->fault == ENG_BATCH_FAULT_SPLIT_K && n > 1)
            for (int32_t t = x->all_logits ? 0 : x->n - 1; t < x->n; t++)
                fault_split_k(b, b->ws.x + (b->sp[i].r0 + t) * D, b->ws.logits + (row + t) * V);
        if (x->all_logits)
            memcpy(x->logits, b->ws.logits + row * V, sizeof(float) * (size_t)(x->n * V));
        else
            memcpy(x->logits, b->ws.logits + (row + x->n - 1) * V, sizeof(float) * (size_t)V);
        row += x->n;
    }
    return ENG_OK;
}
