/*
 * harness/session/turn.c: a turn as a state machine of engine steps (see
 * session.h, "A turn in steps"), and hx_session_turn, its loop with one
 * span per step.
 *
 *   begin ──> PREFILL ──(last chunk)──> prompt done ──> DECODE ──> DONE ──> end
 *               │ one grid chunk a step   │ TTFT, cold     │ one token a step
 *               │ policy on_chunk at      │ shadow,        │ on_token: go, stop
 *               │ each chunk's end        │ on_prompt      │ or cancel
 *               └──────── cancel (at a chunk boundary) ──────────────> end
 *
 * Invariants:
 * - a prompt's spans are its grid cells (eng_batch_chunk_len with the
 *   session's C, align, ubatch): the chunks eng_prefill cuts, whatever else
 *   shares the steps;
 * - the policy's request is open from begin to end (or abort): end and
 *   abort always release it, with the sequence holding only valid tokens
 *   (the prompt so far, the prompt and its teacher-forced response);
 * - after end the sequence holds the prompt and the response, whatever was
 *   decoded: decoded rows are kept only where the decode fed the response's
 *   own tokens (the same token, position and prior state as a teacher-forced
 *   step: the same bytes when the step's kernels are batch-invariant, as
 *   ref's are and as any step of one span is), the rest rolled back and
 *   teacher-forced;
 * - equality is decided by memcmp only (hx_compare_logits), and a turn's
 *   rows are written in one transaction (hx_store_put_request).
 * A turn's buffers (its logits rows, its cold scratch) are its own, so
 * several turns can be in flight; session.c keeps finished turns' buffers
 * for the next.
 */
#include "session_int.h"
#include "session.h"

#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "compare.h"
#include "status.h"
#include "util.h"

typedef enum turn_phase { PH_PREFILL, PH_DECODE, PH_DONE } turn_phase;

struct hx_turn_run {
    hx_session     *x;
    hx_turn         t;             /* the caller's turn (its pointers borrowed until end) */
    bool            compare;
    turn_phase      phase;
    bool            prompt_done, cancelled;
    hx_acquire      acq;
    eng_seq        *s;
    int32_t         pos;           /* prompt tokens in s */
    int32_t         span_n;        /* tokens of the span handed out, 0: none */
    double          t0, t1;        /* begin; the acquire done */
    double          t_span;        /* when the span was handed out */
    double          chunk_s;       /* the policy's on_chunk, timed */
    double          engine_s;
    eng_ckpt       *at_reuse;      /* --repeat: the acquired state */
    double          med_ms, min_ms, max_ms, restore_ms;
    uint64_t        reuse_hash;
    /* the cold shadow */
    const hx_cold_result *cold;
    bool            shared;
    hx_cmp          c0;
    int             state_equal;
    /* the decode */
    eng_ckpt       *ck;            /* the state after the prompt, to roll the decode back */
    int32_t         n_cmp, want_gen, k, next_id, n_rows_done;
    bool            generating;
    double          t_dec;
    hx_turn_result  res;
    session_bufs   *b;             /* its buffers (session.c's, given back at the end) */
    float          *reuse_logits, *gen_logits;  /* b's */
    int32_t        *greedy;
    hx_step_row    *steps;
};

// ----------------------------------------------------------------------------
// A turn's record and its buffers

static hx_turn_run *run_take(hx_session *x) {
    hx_turn_run *r = calloc(1, sizeof *r);
    session_bufs *b = r ? session_bufs_take(x) : NULL;
    if (!b) {
        free(r);
        return NULL;
    }
    r->x = x;
    r->b = b;
    r->reuse_logits = b->reuse_logits;
    r->gen_logits = b->gen_logits;
    r->greedy = b->greedy;
    r->steps = b->steps;
    return r;
}

static void run_give(hx_turn_run *r) {
    eng_ckpt_free(r->ck);
    eng_ckpt_free(r->at_reuse);
    session_bufs_give(r->x, r->b);
    free(r);
}

// ----------------------------------------------------------------------------
// Begin: the response (a scripted turn), the policy's acquire, the cursor

int hx_turn_begin(hx_session *x, const hx_turn *t, hx_turn_run **out, char *err, size_t errlen) {
    const hx_session_params *o = x->sp;
    hx_prepared *p = t->p;
    *out = NULL;
    /* a response set after the prompt was prepared (a scripted turn): rendered and tokenized, and it must fit */
    if (t->new_response) {
        int rc = hx_prepare_response(x->pc, t->req, p, err, errlen);
        if (rc != ENG_OK) return rc;
        if (p->n + p->n_resp + x->n_rows + 1 > x->n_ctx) {
            eng_errf(err, errlen, "request (%d tokens) and its response (%d tokens) exceed the available context size "
                     "(%d tokens), try increasing it", p->n, p->n_resp, x->n_ctx);
            return ENG_ERR_RANGE;
        }
    }
    hx_turn_run *r = run_take(x);
    if (!r) return ENG_ERR_NOMEM;
    r->t = *t;
    r->compare = o->verify && !t->warm_only;
    r->res.fork_step = -1;
    r->res.first_step_diff = -1;
    r->res.state_equal = -1;
    r->res.batch_equal = -1;
    r->res.n_prompt = p->n;
    r->res.slot = -1;
    r->state_equal = -1;
    r->t0 = eng_now_s();
    int rc = hx_policy_acquire(x->pol, p->tokens, p->n, p->stable_end, &t->hint, &r->acq);
    r->t1 = eng_now_s();
    r->engine_s += r->t1 - r->t0;
    if (rc != ENG_OK) {
        eng_errf(err, errlen, "reused prefill (policy %s): %s", o->policy, eng_status_str(rc));
        run_give(r);
        return rc;
    }
    x->sum->n_quarantined += r->acq.n_quarantined;
    x->sum->n_fallbacks += r->acq.n_fallbacks;
    r->s = r->acq.seq;
    ENG_ASSERT(eng_seq_n_tokens(r->s) == r->acq.n_reused);
    if (r->compare && o->fault && !strcmp(o->fault, "kv-row") && t->idx == o->fault_request) {
        if (r->acq.n_reused == 0) {
            eng_errf(err, errlen, "--inject-fault kv-row: request %d (session %s turn %d) reused nothing, so there is "
                     "no restored KV row to corrupt: choose a --fault-request whose prompt reuses a prefix", t->idx,
                     t->req->session, t->req->turn);
            r->pos = 0;
            hx_turn_abort(r);
            return ENG_ERR_ARG;
        }
        int32_t k = r->acq.n_reused - 1;  /* rewrite the last restored row from another token */
        if ((rc = eng_seq_truncate(r->s, k)) == ENG_OK) rc = eng_decode(r->s, (p->tokens[k] + 1) % x->V, NULL);
        if (rc != ENG_OK) {
            eng_errf(err, errlen, "reused prefill (policy %s): %s", o->policy, eng_status_str(rc));
            hx_turn_abort(r);
            return rc;
        }
        x->fault_planted = true;
    }
    if (r->compare && o->repeat > 1 && !(r->at_reuse = eng_seq_checkpoint(r->s))) {
        hx_turn_abort(r);
        return ENG_ERR_NOMEM;
    }
    r->pos = r->acq.n_reused;
    r->phase = PH_PREFILL;
    r->res.n_reused = r->acq.n_reused;
    r->res.slot = r->acq.slot;
    *out = r;
    return ENG_OK;
}

int32_t hx_turn_n_tokens(const hx_turn_run *r) { return r->s ? eng_seq_n_tokens(r->s) : 0; }
bool    hx_turn_prefilling(const hx_turn_run *r) { return r->phase == PH_PREFILL; }
bool    hx_turn_done(const hx_turn_run *r) { return r->phase == PH_DONE; }
int32_t hx_turn_slot(const hx_turn_run *r) { return r->acq.slot; }

// ----------------------------------------------------------------------------
// The spans

bool hx_turn_span(hx_turn_run *r, eng_batch_span *sp) {
    r->span_n = 0;
    const hx_prepared *p = r->t.p;
    if (r->phase == PH_PREFILL) {
        const eng_batch_params bp = hx_session_batch_params(r->x);
        int32_t n = eng_batch_chunk_len(r->s, p->n - r->pos, &bp);
        *sp = (eng_batch_span){.seq = r->s, .tokens = p->tokens + r->pos, .n = n,
                               .logits = r->pos + n == p->n ? r->reuse_logits : NULL};
    } else if (r->phase == PH_DECODE) {
        int32_t k1 = r->k + 1;
        float *row = k1 < r->x->n_rows ? r->reuse_logits + (size_t)k1 * r->x->V : r->gen_logits;
        *sp = (eng_batch_span){.seq = r->s, .tokens = &r->next_id, .n = 1, .logits = row};
    } else {
        return false;
    }
    r->span_n = sp->n;
    r->t_span = eng_now_s();
    return true;
}

// ----------------------------------------------------------------------------
// After a step

/* The end of the decode: its time. */
static void decode_over(hx_turn_run *r) {
    double now = eng_now_s();
    r->res.decode_ms = 1e3 * (now - r->t_dec);
    r->phase = PH_DONE;
}

/* Row k of the reused run's decode is there: its greedy token, given to the client; on or done. */
static void take_row(hx_turn_run *r) {
    const hx_turn_gen *gen = r->t.gen;
    const int32_t V = r->x->V, k = r->k;
    const float *row = k < r->x->n_rows ? r->reuse_logits + (size_t)k * V : r->gen_logits;
    int32_t id = eng_argmax(row, V);
    if (k < r->n_cmp) {
        r->greedy[k] = id;
        r->n_rows_done = k + 1;
    }
    if (r->generating) {
        r->res.n_generated = k + 1;
        int g = gen->on_token(gen->ud, k, id, row);
        if (g == HX_TURN_CANCEL) {
            r->res.cancelled = r->cancelled = true;
            decode_over(r);
            return;
        }
        if (g == HX_TURN_STOP || k + 1 >= r->want_gen) r->generating = false;
    }
    if (!(k + 1 < r->n_cmp || r->generating)) {
        decode_over(r);
        return;
    }
    r->next_id = id;
}

/* The prompt's last chunk ran: the TTFT, the --repeat repetitions, the cold shadow, the client's first word. */
static int prompt_done(hx_turn_run *r, char *err, size_t errlen) {
    hx_session *x = r->x;
    const hx_session_params *o = x->sp;
    const hx_prepared *p = r->t.p;
    const int32_t V = x->V, repeat = r->compare ? o->repeat : 1;
    const hx_turn_gen *gen = r->t.gen;
    r->prompt_done = true;
    double t2 = eng_now_s(), times[64];
    times[0] = t2 - r->t0;
    int rc = ENG_OK;
    if (r->compare) rc = session_state_hash(x, r->s, &r->reuse_hash);
    for (int32_t k = 1; k < repeat && rc == ENG_OK; k++) {  /* the bare prefill again, from the acquired state */
        if ((rc = eng_seq_restore(r->s, r->at_reuse)) != ENG_OK) break;
        const double r0 = eng_now_s();
        rc = eng_prefill(r->s, p->tokens + r->acq.n_reused, p->n - r->acq.n_reused, &o->pp, x->rep_logits);
        const double r1 = eng_now_s();
        r->engine_s += r1 - r0;
        if (rc != ENG_OK) break;
        times[k] = (r->t1 - r->t0) + (r1 - r0) + r->chunk_s;
        uint64_t h = 0;
        rc = session_state_hash(x, r->s, &h);
        if (rc == ENG_OK && (memcmp(x->rep_logits, r->reuse_logits, sizeof(float) * (size_t)V) || h != r->reuse_hash))
            rc = session_repeat_differs(err, errlen, "reused", k, r->reuse_logits, x->rep_logits, V,
                                        h != r->reuse_hash);
    }
    eng_ckpt_free(r->at_reuse);
    r->at_reuse = NULL;
    if (rc != ENG_OK) {
        if (rc != ENG_ERR_MISMATCH) eng_errf(err, errlen, "reused prefill (policy %s): %s", o->policy, eng_status_str(rc));
        return rc;
    }
    if (r->compare && o->fault && !strcmp(o->fault, "ulp-flip") && r->t.idx == o->fault_request && o->fault_index < V) {
        r->reuse_logits[o->fault_index] = hx_next_ulp(r->reuse_logits[o->fault_index]);
        x->fault_planted = true;
    }
    session_timing_stats(times, repeat, &r->med_ms, &r->min_ms, &r->max_ms);
    r->med_ms *= 1e3, r->min_ms *= 1e3, r->max_ms *= 1e3;
    r->restore_ms = 1e3 * (r->t1 - r->t0);
    r->res.ttft_ms = r->med_ms;

    /* the cold shadow, compared */
    if (r->compare) {
        if ((rc = session_cold_result(x, r->t.idx, p, &r->b->scratch, &r->cold, &r->shared, err, errlen)) != ENG_OK)
            return rc;
        hx_compare_logits(r->cold->logits, r->reuse_logits, V, &r->c0);
        r->state_equal = r->cold->state_hash && r->reuse_hash ? r->cold->state_hash == r->reuse_hash : -1;
    }

    /* the first token's time */
    hx_turn_status st = {.n_prompt = p->n, .n_reused = r->acq.n_reused, .ttft_ms = r->med_ms, .compared = r->compare,
                         .logits_equal = r->compare && r->c0.equal, .state_equal = r->state_equal, .acq = &r->acq};
    if (!r->t.warm_only && gen && gen->on_prompt && gen->on_prompt(gen->ud, &st) == HX_TURN_CANCEL)
        r->res.cancelled = r->cancelled = true;
    if (r->t.warm_only || r->cancelled) {
        r->phase = PH_DONE;
        return ENG_OK;
    }

    /* the decode: the compared steps and the generated tokens */
    r->n_cmp = r->compare ? x->n_rows : 0;
    r->want_gen = gen ? gen->max_tokens : 0;
    r->generating = r->want_gen > 0;
    r->t_dec = eng_now_s();
    r->k = 0;
    if (r->n_cmp <= 1 && r->want_gen <= 1) {  /* the prompt's own logits suffice: no decode, nothing to roll back */
        if (r->n_cmp >= 1) r->greedy[0] = eng_argmax(r->reuse_logits, V), r->n_rows_done = 1;
        if (r->generating) {
            int32_t id = eng_argmax(r->reuse_logits, V);
            r->res.n_generated = 1;
            if (gen->on_token(gen->ud, 0, id, r->reuse_logits) == HX_TURN_CANCEL) r->res.cancelled = r->cancelled = true;
        }
        r->res.decode_ms = 0;
        r->phase = PH_DONE;
        return ENG_OK;
    }
    if (!(r->ck = eng_seq_checkpoint(r->s))) return ENG_ERR_NOMEM;
    r->phase = PH_DECODE;
    take_row(r);
    return ENG_OK;
}

int hx_turn_after_step(hx_turn_run *r, char *err, size_t errlen) {
    ENG_ASSERT(r->span_n > 0);
    const double now = eng_now_s();
    r->engine_s += now - r->t_span;
    const int32_t n = r->span_n;
    r->span_n = 0;
    if (r->phase == PH_DECODE) {
        r->k++;
        take_row(r);
        return ENG_OK;
    }
    ENG_ASSERT(r->phase == PH_PREFILL);
    r->pos += n;
    const hx_policy *pol = r->x->pol;
    pol->ops->on_chunk(pol->state, r->s, eng_seq_n_tokens(r->s));  /* the policy's checkpoints, timed as the TTFT's */
    r->chunk_s += eng_now_s() - now;
    if (r->pos < r->t.p->n) return ENG_OK;
    return prompt_done(r, err, errlen);
}

void hx_turn_cancel(hx_turn_run *r) {
    r->res.cancelled = r->cancelled = true;
    if (r->phase == PH_DECODE) decode_over(r);
    else r->phase = PH_DONE;
}

// ----------------------------------------------------------------------------
// End: the response teacher-forced, the release, the row

/* The sequence back at the prompt, then its response: decoded rows that fed the response's own tokens are kept
 * (where the memory can be cut there), the rest recomputed in decode-shaped steps. */
static int teacher_force(hx_turn_run *r) {
    const hx_prepared *p = r->t.p;
    eng_seq *s = r->s;
    int32_t keep = 0;
    if (r->ck) {
        const int32_t fed = eng_seq_n_tokens(s) - p->n;
        keep = hx_lcp(eng_seq_tokens(s) + p->n, fed, p->resp, p->n_resp);
        int rc = keep > 0 && eng_seq_can_truncate(s, p->n + keep) ? eng_seq_truncate(s, p->n + keep)
                                                                   : (keep = 0, eng_seq_restore(s, r->ck));
        if (rc != ENG_OK) return rc;
    }
    for (int32_t k = keep; k < p->n_resp; k++) {
        int rc = eng_decode(s, p->resp[k], NULL);
        if (rc != ENG_OK) return rc;
    }
    return ENG_OK;
}

void hx_turn_abort(hx_turn_run *r) {
    if (r->s) {
        if (r->ck && eng_seq_restore(r->s, r->ck) != ENG_OK) eng_seq_reset(r->s);
        hx_release rel;
        memset(&rel, 0, sizeof rel);
        r->x->pol->ops->release(r->x->pol->state, r->s, eng_seq_n_tokens(r->s), &rel);
    }
    run_give(r);
}

/* The row's miss explanation: where the prompt leaves the best cached prefix. */
static void explain_miss(const hx_prepared *p, const hx_acquire *acq, hx_request_row *row, char *text,
                         size_t text_cap, char *where, size_t where_cap) {
    if (!acq->best || acq->n_best == 0) {
        row->lcp = 0;
        snprintf(where, where_cap, "empty cache");
        row->miss_where = where;
        return;
    }
    int32_t lcp = acq->lcp;
    row->lcp = lcp;
    if (lcp >= p->n || lcp >= acq->n_best) return;  /* the prompt extends the cached entry: no miss */
    row->miss_pos = lcp;
    int64_t byte = p->offsets[lcp];
    row->miss_byte = byte;
    int64_t a = byte - 48 > 0 ? byte - 48 : 0;
    int64_t b = byte + 48 < (int64_t)p->text_len ? byte + 48 : (int64_t)p->text_len;
    snprintf(text, text_cap, "%.*s|%.*s", (int)(byte - a), p->text + a, (int)(b - byte), p->text + byte);
    row->miss_text = text;
    hx_prepared_where(p, byte, where, where_cap);
    row->miss_where = where;
}

/* The requests row and its steps rows, in one transaction; the totals. bv: the batch verdict, or NULL. */
static int write_row(hx_turn_run *r, const hx_release *rel, const hx_batch_verdict *bv, char *err, size_t errlen) {
    hx_session *x = r->x;
    const hx_session_params *o = x->sp;
    const hx_prepared *p = r->t.p;
    const hx_request *req = r->t.req;
    const hx_acquire *acq = &r->acq;
    const hx_cold_result *cold = r->cold;
    const int32_t V = x->V;
    const bool compare = r->compare && r->prompt_done;
    hx_request_row row;
    hx_request_row_init(&row);
    bool all_equal = r->c0.equal;
    int64_t fork = -1;
    int32_t n_steps = 0;
    if (compare) {
        hx_request_row_set_cmp(&row, &r->c0);
        n_steps = r->n_rows_done;
        for (int32_t k = 0; k < n_steps; k++) {
            hx_cmp ck;
            if (k == 0) ck = r->c0;
            else hx_compare_logits(cold->logits + (size_t)k * V, r->reuse_logits + (size_t)k * V, V, &ck);
            hx_step_row_init(&r->steps[k]);
            hx_step_row_set_cmp(&r->steps[k], &ck);
            r->steps[k].step = k;
            r->steps[k].token_cold = cold->greedy[k];
            r->steps[k].token_reuse = r->greedy[k];
            if (!ck.equal) all_equal = false;
            if (fork < 0 && cold->greedy[k] != r->greedy[k]) fork = k;
        }
    }
    char miss_text[256], where[128];
    explain_miss(p, acq, &row, miss_text, sizeof miss_text, where, sizeof where);

    row.req_index = r->t.idx;
    row.transcript = x->transcript;
    row.session = req->session;
    row.turn = req->turn;
    row.n_prompt = p->n;
    row.n_reused = acq->n_reused;
    row.n_prefilled = (r->prompt_done ? p->n : r->pos) - acq->n_reused;
    if (r->prompt_done) row.ttft_reuse_ms = r->med_ms;
    if (o->repeat > 1 && compare) {
        row.ttft_reuse_min_ms = r->min_ms;
        row.ttft_reuse_max_ms = r->max_ms;
    }
    row.flops_reuse = eng_model_prefill_flops_params(x->m, acq->n_reused, p->n - acq->n_reused, &o->pp);
    row.model_reuse_ms =
        hx_calibration_price_ms(&x->price, row.flops_reuse, acq->bytes_restored > 0 ? (double)acq->bytes_restored : 0);
    if (compare) {
        row.ttft_cold_ms = cold->ttft_ms;
        if (o->repeat > 1) {
            row.ttft_cold_min_ms = cold->ttft_min_ms;
            row.ttft_cold_max_ms = cold->ttft_max_ms;
        }
        row.fork_step = fork;
        row.decode_equal = all_equal;
        if (r->state_equal >= 0) {
            row.state_equal = r->state_equal;
            row.state_hash_cold = cold->state_hash;
            row.state_hash_reuse = r->reuse_hash;
        }
        row.flops_cold = cold->flops;
        row.model_cold_ms = hx_calibration_price_ms(&x->price, row.flops_cold, 0);
    }
    row.n_decode = r->res.cancelled && compare ? n_steps : o->decode_n;
    row.bytes_restored = acq->bytes_restored;
    row.slot = acq->slot;
    if (acq->slot >= 0) { row.sim = acq->sim; row.f_keep = acq->f_keep; }
    row.n_checkpoints = acq->n_checkpoints;
    row.ckpt_bytes = rel->bytes_stored;
    row.cold_shared = r->shared;
    row.restore_ms = r->restore_ms;
    row.store_ms = rel->store_ms;
    row.n_stored = rel->n_stored;
    row.bytes_stored = rel->bytes_stored;
    row.stable_end = p->stable_end;
    row.anchor_pos = rel->anchor_pos;
    row.anchor_ms = rel->anchor_ms;
    char note[640], cut[96] = "";
    if (!r->prompt_done) snprintf(cut, sizeof cut, "cancelled after %d of %d prompt tokens", r->pos, p->n);
    const char *parts[3] = {acq->note, r->t.note, cut};
    size_t off = 0;
    note[0] = '\0';
    for (int i = 0; i < 3; i++)
        if (parts[i] && parts[i][0] && off < sizeof note)
            off += (size_t)snprintf(note + off, sizeof note - off, "%s%s", off ? "; " : "", parts[i]);
    row.note = note;
    row.cache_bytes = rel->bytes_held;
    row.cache_entries = rel->entries_held;
    char extra[1024], batch[96] = "";
    if (bv) snprintf(batch, sizeof batch, ",\"batch_ms\":%.3f,\"batch_rows\":%lld", bv->ms, (long long)bv->rows);
    snprintf(extra, sizeof extra, "{\"n_normalized\":%d,\"n_resp\":%d,\"ckpts_held\":%d,\"n_quarantined\":%d,"
             "\"n_fallbacks\":%d,\"n_store_failed\":%d%s%s%s}", p->n_normalized, p->n_resp, acq->n_checkpoints,
             acq->n_quarantined, acq->n_fallbacks, rel->n_store_failed, batch, r->t.extra && r->t.extra[0] ? "," : "",
             r->t.extra ? r->t.extra : "");
    row.extra = extra;
    row.verified = compare;
    if (bv) {
        row.batch_k = bv->k;
        row.batch_equal = bv->equal;
        row.batch_first_diff = bv->first_diff;
        row.batch_ulp_first = bv->equal ? -1 : bv->ulp_first > INT64_MAX ? INT64_MAX : (int64_t)bv->ulp_first;
        row.batch_max_ulp = bv->max_ulp > INT64_MAX ? INT64_MAX : (int64_t)bv->max_ulp;
    }
    int rc;
    if (x->store &&
        (rc = hx_store_put_request(x->store, x->run_id, &row, r->steps, compare && o->decode_n > 0 ? n_steps : 0, err,
                                   errlen)) != ENG_OK)
        return rc;

    hx_turn_result *res = &r->res;
    res->compared = compare;
    res->identical = compare && all_equal && r->state_equal != 0;
    res->fork_step = fork;
    res->cmp = r->c0;
    res->state_equal = r->state_equal;
    res->logits_equal = compare && r->c0.equal;
    res->batch_equal = bv ? bv->equal : -1;
    for (int32_t k = 1; k < n_steps && res->first_step_diff < 0; k++)
        if (!r->steps[k].logits_equal) res->first_step_diff = k;
    x->sum->n_requests++;
    x->sum->n_prompt += p->n;
    x->sum->n_reused += acq->n_reused;
    if (compare && (!all_equal || r->state_equal == 0 || (bv && !bv->equal))) x->sum->n_diverged++;
    if (fork >= 0) x->sum->n_forked++;
    return ENG_OK;
}

/* The turn's end in stages, each only when the one before went through: the response (rendered once),
 * teacher-forced; the release (always: after a failure with the tokens still valid, and no row); the
 * batch verdict; the row. One exit frees the turn. */
int hx_turn_end(hx_turn_run *r, hx_turn_result *res, char *err, size_t errlen) {
    hx_session *x = r->x;
    const hx_session_params *o = x->sp;
    const hx_prepared *p = r->t.p;
    const hx_turn_gen *gen = r->t.gen;
    ENG_ASSERT(r->phase == PH_DONE || r->cancelled);
    int rc = ENG_OK;
    /* the response (a prompt cut short has none: the cache keeps what it computed) */
    if (r->prompt_done && !r->t.warm_only && gen && gen->on_response &&
        ((rc = gen->on_response(gen->ud, r->t.req)) != ENG_OK ||
         (rc = hx_prepare_response(x->pc, r->t.req, r->t.p, err, errlen)) != ENG_OK) && !err[0])
        eng_errf(err, errlen, "the generated turn: %s", eng_status_str(rc));
    const double t3 = eng_now_s();
    if (rc == ENG_OK && r->prompt_done && (rc = teacher_force(r)) != ENG_OK)
        eng_errf(err, errlen, "the prompt (%d tokens) and its response (%d tokens), teacher-forced in a context of %d: "
                 "%s", p->n, p->n_resp, x->n_ctx, rc == ENG_ERR_RANGE ? "they do not fit" : eng_status_str(rc));
    /* the release: the prompt and its response, the prompt so far, or after a failure what is still valid */
    if (rc != ENG_OK && r->ck && eng_seq_restore(r->s, r->ck) != ENG_OK) eng_seq_reset(r->s);
    hx_release rel;
    memset(&rel, 0, sizeof rel);
    rel.bytes_held = rel.entries_held = -1;  /* not reported unless the policy says */
    const int32_t n_valid = rc != ENG_OK ? eng_seq_n_tokens(r->s) : r->prompt_done ? p->n : r->pos;
    const int rr = x->pol->ops->release(x->pol->state, r->s, n_valid, &rel);
    r->engine_s += eng_now_s() - t3;
    x->sum->engine_s += r->engine_s;
    x->sum->n_store_failed += rel.n_store_failed;
    if (rc == ENG_OK && (rc = rr) != ENG_OK) eng_errf(err, errlen, "release (policy %s): %s", o->policy, eng_status_str(rr));
    /* --batch-check: the request again inside a batch; then the row */
    hx_batch_verdict bv, *pbv = NULL;
    if (rc == ENG_OK && !r->t.warm_only && r->compare && r->prompt_done && !r->cancelled && o->batch_check >= 0 &&
        (rc = session_batch_check(x, r->t.idx, p, r->cold, &bv, err, errlen)) == ENG_OK)
        pbv = &bv;
    if (rc == ENG_OK && !r->t.warm_only) rc = write_row(r, &rel, pbv, err, errlen);
    *res = r->res;
    run_give(r);
    return rc;
}

// ----------------------------------------------------------------------------
// The loop: one span per step

int hx_session_turn(hx_session *x, const hx_turn *t, hx_turn_result *res, char *err, size_t errlen) {
    memset(res, 0, sizeof *res);
    hx_turn_run *r = NULL;
    int rc = hx_turn_begin(x, t, &r, err, errlen);
    if (rc != ENG_OK) return rc;
    const eng_batch_params bp = hx_session_batch_params(x);
    eng_batch_span sp;
    while (hx_turn_span(r, &sp)) {
        char why[256];
        if ((rc = eng_batch_forward(x->batch, &sp, 1, &bp, why, sizeof why)) != ENG_OK) {
            eng_errf(err, errlen, "%s (policy %s): %s", hx_turn_prefilling(r) ? "reused prefill" : "decode",
                     x->sp->policy, eng_status_str(rc));
            hx_turn_abort(r);
            return rc;
        }
        if ((rc = hx_turn_after_step(r, err, errlen)) != ENG_OK) {
            hx_turn_abort(r);
            return rc;
        }
    }
    return hx_turn_end(r, res, err, errlen);
}
