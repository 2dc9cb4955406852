/*
 * harness/session/batchcheck.c: replay's batch verdict (--batch-check K):
 * a request computed again from an empty state inside engine steps shared
 * with K other sequences, its logit rows compared with its cold run alone.
 *
 * The other sequences are seeded fillers: each has been prefilled alone to
 * a seeded offset that is not a multiple of C, then, step after step,
 * either reads its seeded stream in chunks of its own grid (so its cells
 * lie across the target's) or decodes one token a step; the target's row
 * sits at a seeded place among them. The target runs the same spans as its
 * cold run (its grid chunks, then greedy decode steps feeding its own
 * tokens), so under a batch-invariant kernel (ref) its rows are the cold
 * run's bit for bit, and under blas they are not (the products' M changes
 * with the step). Seeds: --batch-seed S and the request's index. With K 0
 * the target runs alone through the same steps (batch size 1). The steps'
 * wall time and rows (every span's tokens, the fillers' too) are kept: the
 * engine's tokens/s at batch size K + 1.
 * --inject-fault batch-split-k plants a batch-dependent reduction in the
 * steps of request --fault-request (eng_batch_set_fault), which the
 * verdict must catch.
 */
#include "session_int.h"
#include "session.h"

#include <stdlib.h>
#include <string.h>

#include "compare.h"
#include "status.h"
#include "util.h"

static uint64_t splitmix(uint64_t *s) {
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* The check's sequences and buffers, made at its first use (session.c frees them). */
static int batch_start(hx_session *x, char *err, size_t errlen) {
    const int32_t K = x->sp->batch_check;
    if (x->bc_seq) return ENG_OK;
    const int32_t C = x->sp->pp.chunk, U = x->sp->pp.ubatch;
    x->bc_len = 2 * C + 1 > U ? 2 * C + 1 : U;  /* a filler's offset (< 2C) or one chunk of it */
    x->bc_batch = eng_batch_new(x->m);
    x->bc_seq = calloc((size_t)K + 1, sizeof *x->bc_seq);
    x->bc_tok = calloc((size_t)(K + 1) * (size_t)x->bc_len, sizeof *x->bc_tok);
    x->bc_logits = calloc((size_t)x->n_rows * (size_t)x->V, sizeof(float));
    x->bc_spans = calloc((size_t)K + 1, sizeof *x->bc_spans);
    bool ok = x->bc_batch && x->bc_seq && x->bc_tok && x->bc_logits && x->bc_spans;
    for (int32_t i = 0; ok && i <= K; i++) ok = (x->bc_seq[i] = eng_seq_new(x->m, x->n_ctx)) != NULL;
    if (!ok) {
        eng_errf(err, errlen, "--batch-check %d: out of memory for %d sequences of %d positions", K, K + 1, x->n_ctx);
        return ENG_ERR_NOMEM;
    }
    return ENG_OK;
}

/* Filler i's token at position pos: a seeded stream over the vocabulary. */
static int32_t filler_token(uint64_t seed, int32_t i, int32_t pos, int32_t V) {
    uint64_t s = seed ^ ((uint64_t)(i + 1) << 40) ^ (uint64_t)pos * 0x2545F4914F6CDD1Dull;
    return (int32_t)(splitmix(&s) % (uint64_t)V);
}

int session_batch_check(hx_session *x, int32_t idx, const hx_prepared *p, const hx_cold_result *cold,
                        hx_batch_verdict *v, char *err, size_t errlen) {
    const hx_session_params *o = x->sp;
    const int32_t K = o->batch_check, R = x->n_rows, V = x->V, C = o->pp.chunk;
    const eng_batch_params bp = hx_session_batch_params(x);
    int rc = batch_start(x, err, errlen);
    if (rc != ENG_OK) return rc;
    uint64_t rng = o->batch_seed * 0x9E3779B97F4A7C15ull ^ (uint64_t)idx;
    const uint64_t stream_seed = splitmix(&rng);
    eng_prefill_params alone = o->pp;
    alone.on_chunk = NULL;
    alone.all_logits = false;
    bool decoder[64];
    int32_t budget[64];
    for (int32_t i = 1; i <= K; i++) {  /* each filler alone to an offset off the grid, then its mode */
        eng_seq *f = x->bc_seq[i];
        eng_seq_reset(f);
        int32_t off = 1 + (int32_t)(splitmix(&rng) % (uint64_t)(2 * C));
        if (off % C == 0) off++;
        budget[i] = x->n_ctx - 1;
        if (off > budget[i]) off = budget[i];
        int32_t *ids = x->bc_tok + (size_t)i * (size_t)x->bc_len;
        for (int32_t t = 0; t < off; t++) ids[t] = filler_token(stream_seed, i, t, V);
        if ((rc = eng_prefill(f, ids, off, &alone, NULL)) != ENG_OK) {
            eng_errf(err, errlen, "--batch-check: filler %d: %s", i, eng_status_str(rc));
            return rc;
        }
        decoder[i] = splitmix(&rng) & 1;
    }
    if (o->fault && !strcmp(o->fault, "batch-split-k") && idx == o->fault_request) {
        eng_batch_set_fault(x->bc_batch, ENG_BATCH_FAULT_SPLIT_K);
        x->fault_planted = true;
    }
    eng_seq *tgt = x->bc_seq[0];
    eng_seq_reset(tgt);
    int32_t pos = 0, k = 0, next = 0;  /* the target: prompt tokens done, rows done, the token it feeds */
    int32_t ftok[64];
    int64_t rows = 0;
    const double t0 = eng_now_s();
    while (k < R && rc == ENG_OK) {
        int32_t n = 0;
        for (int32_t i = 1; i <= K; i++) {
            eng_seq *f = x->bc_seq[i];
            int32_t at = eng_seq_n_tokens(f), len = decoder[i] ? 1 : eng_batch_chunk_len(f, budget[i] - at, &bp);
            if (len < 1 || at + len > budget[i]) continue;  /* out of room: it leaves the steps */
            if (decoder[i]) {
                ftok[i] = filler_token(stream_seed, i, at, V);
                x->bc_spans[n++] = (eng_batch_span){.seq = f, .tokens = &ftok[i], .n = 1};
            } else {
                int32_t *ids = x->bc_tok + (size_t)i * (size_t)x->bc_len;  /* this filler's chunk */
                for (int32_t t = 0; t < len; t++) ids[t] = filler_token(stream_seed, i, at + t, V);
                x->bc_spans[n++] = (eng_batch_span){.seq = f, .tokens = ids, .n = len};
            }
        }
        eng_batch_span ts;
        if (pos < p->n) {
            int32_t len = eng_batch_chunk_len(tgt, p->n - pos, &bp);
            ts = (eng_batch_span){.seq = tgt, .tokens = p->tokens + pos, .n = len,
                                  .logits = pos + len == p->n ? x->bc_logits : NULL};
        } else {
            ts = (eng_batch_span){.seq = tgt, .tokens = &next, .n = 1, .logits = x->bc_logits + (size_t)k * V};
        }
        int32_t at = (int32_t)(splitmix(&rng) % (uint64_t)(n + 1));  /* the target's place in the stack */
        memmove(x->bc_spans + at + 1, x->bc_spans + at, sizeof *x->bc_spans * (size_t)(n - at));
        x->bc_spans[at] = ts;
        char why[256];
        if ((rc = eng_batch_forward(x->bc_batch, x->bc_spans, n + 1, &bp, why, sizeof why)) != ENG_OK) {
            eng_errf(err, errlen, "--batch-check: %s", why);
            break;
        }
        for (int32_t i = 0; i <= n; i++) rows += x->bc_spans[i].n;
        if (pos < p->n) {
            pos += ts.n;
            if (pos < p->n) continue;
        }
        next = eng_argmax(x->bc_logits + (size_t)k * V, V);  /* row k done: its greedy token feeds the next */
        k++;
    }
    v->ms = 1e3 * (eng_now_s() - t0);
    v->rows = rows;
    eng_batch_set_fault(x->bc_batch, ENG_BATCH_FAULT_NONE);
    if (rc != ENG_OK) return rc;
    hx_cmp c;
    hx_compare_logits(cold->logits, x->bc_logits, (int64_t)R * V, &c);
    v->k = K;
    v->equal = c.equal;
    v->first_diff = c.first_diff;
    v->ulp_first = c.ulp_first;
    v->max_ulp = c.max_ulp;
    return ENG_OK;
}
