/*
 * harness/session/session.c: one request through the engine and the policy
 * under test (see session.h), shared by replay, check, experiment and serve.
 *
 * Invariants:
 * - the cold and the reused run use the same eng_prefill_params (grid C,
 *   align, ubatch), so with align chunk they are comparable bit for bit;
 * - equality is decided by memcmp only (hx_compare_logits), and the state
 *   after the prompt by the XXH3-64 of its serialized bytes;
 * - a request's rows are written in one transaction (hx_store_put_request);
 * - the cache holds after a turn exactly the prompt and the teacher-forced
 *   response, whatever was decoded in between (decode is rolled back).
 */
#include "session.h"

#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "calibrate.h"
#include "compare.h"
#include "stats.h"
#include "status.h"
#include "util.h"

struct hx_session {
    const hx_session_params *sp;
    hx_session_totals    *sum;
    hx_session_totals     own_sum;    /* when the caller keeps none */
    const char     *transcript;   /* the rows' transcript column (borrowed) */
    unsigned        quirks;
    eng_model      *m;
    hx_prepare_ctx *pc;
    hx_policy      *pol;
    eng_seq        *cold_seq;
    hx_coldcache   *cold;
    hx_store       *store;
    int64_t         run_id;
    int32_t         n_ctx;
    int32_t         V;
    int32_t         n_rows;       /* logit rows compared: max(1, decode_n) */
    float          *reuse_logits; /* (n_rows, V) */
    float          *gen_logits;   /* (V) a generated step past the compared rows */
    float          *rep_logits;   /* (V) a repetition's logits (--repeat) */
    int32_t        *greedy;       /* (n_rows) the reused run's greedy tokens */
    hx_step_row    *steps;        /* (n_rows) */
    hx_cold_result  scratch;      /* cold result when not cached */
    struct { void *p; size_t cap; } sbuf;  /* serialized state, for state_hash */
    bool            fault_planted;
    hx_calibration  price;        /* what the modeled TTFT is priced at */
};

// ----------------------------------------------------------------------------
// Opening and closing

int hx_session_open(const hx_session_params *o, hx_session_totals *sum, hx_session **out, char *err, size_t errlen) {
    *out = NULL;
    hx_session *s = calloc(1, sizeof *s);
    if (!s) return ENG_ERR_NOMEM;
    s->sp = o;
    s->sum = sum ? sum : &s->own_sum;
    int rc = hx_quirks_parse(o->policy, o->quirks, &s->quirks, err, errlen);
    if (rc == ENG_OK) rc = eng_model_load(o->model_path, &o->num, &s->m, err, errlen);
    const eng_tokenizer *tok = rc == ENG_OK ? eng_model_tokenizer(s->m) : NULL;
    if (rc == ENG_OK && !tok) {
        eng_errf(err, errlen, "%s: model has no vocabulary (tokenizer.ggml.*)", o->model_path);
        rc = ENG_ERR_FORMAT;
    }
    if (rc == ENG_OK)
        rc = hx_prepare_ctx_new(tok, o->template_name, eng_model_get_info(s->m)->chat_template, o->normalize, &s->pc,
                                err, errlen);
    if (rc != ENG_OK) {
        hx_session_close(s);
        return rc;
    }
    s->V = eng_model_get_info(s->m)->n_vocab;
    s->n_rows = o->decode_n > 1 ? o->decode_n : 1;
    *out = s;
    return ENG_OK;
}

void hx_session_close(hx_session *s) {
    if (!s) return;
    hx_cold_result_free(&s->scratch);
    free(s->sbuf.p);
    free(s->reuse_logits);
    free(s->gen_logits);
    free(s->rep_logits);
    free(s->greedy);
    free(s->steps);
    eng_seq_free(s->cold_seq);
    hx_policy_destroy(s->pol);
    hx_prepare_ctx_free(s->pc);
    eng_model_free(s->m);
    free(s);
}

const eng_model *hx_session_model(const hx_session *s) { return s->m; }
hx_prepare_ctx *hx_session_prepare(hx_session *s) { return s->pc; }
hx_policy *hx_session_policy(hx_session *s) { return s->pol; }
int32_t hx_session_n_ctx(const hx_session *s) { return s->n_ctx; }
bool hx_session_fault_planted(const hx_session *s) { return s->fault_planted; }

int hx_session_start(hx_session *s, int32_t n_ctx, hx_coldcache *cold, bool resume, char *err, size_t errlen) {
    const hx_session_params *o = s->sp;
    hx_policy_config cfg = {0};
    cfg.model = s->m;
    cfg.pp = o->pp;
    cfg.cap_prompt = o->cap_prompt;
    cfg.n_ctx = n_ctx;
    cfg.quirks = s->quirks;
    cfg.resume = resume;
    int rc = hx_policy_create(o->policy, &cfg, &o->policy_args, &s->pol, err, errlen);
    if (rc != ENG_OK) return rc;
    s->n_ctx = n_ctx;
    s->cold = cold;
    s->cold_seq = eng_seq_new(s->m, n_ctx);
    size_t V = (size_t)s->V, R = (size_t)s->n_rows;
    s->reuse_logits = calloc(R * V, sizeof(float));
    s->gen_logits = calloc(V, sizeof(float));
    s->rep_logits = calloc(V, sizeof(float));
    s->greedy = calloc(R, sizeof(int32_t));
    s->steps = calloc(R, sizeof(hx_step_row));
    if (!s->cold_seq || !s->reuse_logits || !s->gen_logits || !s->rep_logits || !s->greedy || !s->steps ||
        hx_cold_result_alloc(&s->scratch, s->n_rows, s->V) != ENG_OK) {
        eng_errf(err, errlen, "out of memory for %d positions", n_ctx);
        return ENG_ERR_NOMEM;
    }
    return ENG_OK;
}

void hx_session_set_store(hx_session *s, hx_store *store, int64_t run_id, const char *transcript) {
    s->store = store;
    s->run_id = run_id;
    s->transcript = transcript;
}

void hx_session_set_price(hx_session *s, double gflops, double restore_gbs) {
    s->price.gflops = gflops;
    s->price.restore_gbs = restore_gbs;
}

int hx_session_calibrate(hx_session *s, hx_run_meta *meta, char *source, size_t source_cap, char *err,
                         size_t errlen) {
    const hx_session_params *o = s->sp;
    hx_calibration measured;
    int rc = hx_calibrate_measure(s->m, &o->pp, 1024, &measured);
    if (rc != ENG_OK) {
        eng_errf(err, errlen, "calibration: %s", eng_status_str(rc));
        return rc;
    }
    s->price = measured;
    snprintf(source, source_cap, "measured");
    if (o->calibration) {
        bool added = false;
        if ((rc = hx_calibration_reference(o->calibration, s->m, &o->pp, &measured, &s->price, &added, err,
                                           errlen)) != ENG_OK)
            return rc;
        snprintf(source, source_cap, "reference %s", o->calibration);
        if (added && !o->quiet)
            fprintf(stderr, "kvreplay: %s: no calibration for this model and configuration yet: measured "
                    "(%.4g GFLOP/s, restore %.4g GB/s) and added\n", o->calibration, measured.gflops,
                    measured.restore_gbs);
    }
    meta->price.calib_gflops = measured.gflops;
    meta->price.calib_restore_gbs = measured.restore_gbs;
    meta->price.price_gflops = s->price.gflops;
    meta->price.price_restore_gbs = s->price.restore_gbs;
    meta->price.price_source = source;
    return ENG_OK;
}

void hx_session_fill_meta(hx_session *s, int32_t n_ctx, int32_t n_ctx_arg, int64_t n_requests, const char *more,
                          hx_run_meta *meta, char *extra, size_t extra_cap) {
    const hx_session_params *o = s->sp;
    const eng_model_info *mi = eng_model_get_info(s->m);
    hx_run_meta_init(meta);
    meta->n_requests = n_requests;
    meta->model_path = o->model_path;
    meta->model_sha256 = mi->sha256;
    meta->model_name = mi->name;
    meta->n_params = mi->n_params;
    meta->template_name = hx_prepare_template_name(s->pc);
    meta->policy = o->policy;
    meta->quirks = hx_quirks_str(o->policy, s->quirks);
    meta->normalize = hx_prepare_normalize_names(s->pc);
    hx_policy_record(s->pol, meta);
    meta->align = eng_align_name(o->pp.align);
    meta->chunk = o->pp.chunk;
    meta->ubatch = o->pp.ubatch;
    meta->kernel = eng_kernel_name(o->num.kernel);
    meta->precision = eng_precision_name(o->num.precision);
    meta->threads = o->num.n_threads;
    meta->decode_n = o->decode_n;
    meta->cap_prompt = o->cap_prompt ? 1 : 0;
    meta->n_ctx = n_ctx;
    meta->machine.blas = eng_blas_info();
    meta->price.n_repeat = o->repeat;
    /* runs.extra has always recorded --anchor as given (-1: auto or absent), whatever the policy */
    int32_t anchor_tokens = -1;
    hx_policy_args_read(&o->policy_args, "--anchor", &anchor_tokens);
    snprintf(extra, extra_cap, "{\"anchor_tokens\":%d,\"n_ctx_arg\":%d%s%s}", anchor_tokens, n_ctx_arg,
             more && more[0] ? "," : "", more ? more : "");
    meta->extra = extra;
}

// ----------------------------------------------------------------------------
// The state after the prompt, compared by hash: a reuse that leaves the
// logits identical can still leave different KV or recurrent state behind
// (a tiny recurrent model forgets shifted rounding within two chunks), and
// that difference surfaces later. XXH3-64 over eng_seq_serialize's bytes.

static int state_hash(hx_session *x, const eng_seq *s, uint64_t *out) {
    size_t need = eng_seq_serialized_size(s), n = 0;
    if (need > x->sbuf.cap) {
        void *q = realloc(x->sbuf.p, need);
        if (!q) return ENG_ERR_NOMEM;
        x->sbuf.p = q;
        x->sbuf.cap = need;
    }
    int rc = eng_seq_serialize(s, x->sbuf.p, x->sbuf.cap, &n);
    if (rc != ENG_OK) return rc;
    uint64_t h = XXH3_64bits(x->sbuf.p, n);
    *out = h ? h : 1;  /* 0 means "not taken" */
    return ENG_OK;
}

/* Timings of a repeated prefill: median, min, max (ms) of t[0..n). */
static void timing_stats(double *t, int n, double *med, double *mn, double *mx) {
    *mn = *mx = t[0];
    for (int i = 1; i < n; i++) {
        if (t[i] < *mn) *mn = t[i];
        if (t[i] > *mx) *mx = t[i];
    }
    *med = hx_median(t, n);
}

/* A repetition of a prefill gave other bits than the first: the engine is
 * not deterministic here, and no comparison of this run can be trusted. */
static int repeat_differs(char *err, size_t errlen, const char *what, int rep, const float *a, const float *b,
                          int32_t V, bool state) {
    int32_t i = 0;
    while (i < V && !memcmp(a + i, b + i, sizeof(float))) i++;
    if (state || i == V)
        eng_errf(err, errlen, "%s prefill, repetition %d of --repeat: the state after the prompt differs from the "
                 "first repetition's (the engine is not deterministic)", what, rep + 1);
    else
        eng_errf(err, errlen, "%s prefill, repetition %d of --repeat: logit %d is %a, the first repetition's %a "
                 "(the engine is not deterministic)", what, rep + 1, i, (double)b[i], (double)a[i]);
    return ENG_ERR_MISMATCH;
}

// ----------------------------------------------------------------------------
// The cold run: fresh state, prefill everything, greedy decode

/* flip_at >= 0 (fault injection, repeat-flip): the second repetition's logit
 * flip_at moves one ULP, which the repetition check must catch. */
static int run_cold(hx_session *x, const hx_prepared *p, int32_t flip_at, hx_cold_result *r, char *err,
                    size_t errlen) {
    int32_t V = r->n_vocab, repeat = x->sp->repeat, n_rows = x->n_rows;
    eng_seq *s = x->cold_seq;
    eng_prefill_params cpp = x->sp->pp;
    cpp.on_chunk = NULL;
    cpp.all_logits = false;
    double t[64], t0 = 0, t1 = 0;
    int rc = ENG_OK;
    for (int32_t k = 0; k < repeat; k++) {
        eng_seq_reset(s);
        t0 = eng_now_s();
        rc = eng_prefill(s, p->tokens, p->n, &cpp, k ? x->rep_logits : r->logits);
        t1 = eng_now_s();
        if (rc != ENG_OK) return rc;
        if (k == 1 && flip_at >= 0 && flip_at < V) x->rep_logits[flip_at] = hx_next_ulp(x->rep_logits[flip_at]);
        t[k] = t1 - t0;
        x->sum->engine_s += t1 - t0;
        uint64_t h = 0;
        if ((rc = state_hash(x, s, k ? &h : &r->state_hash)) != ENG_OK) return rc;
        if (k && (memcmp(x->rep_logits, r->logits, sizeof(float) * (size_t)V) || h != r->state_hash))
            return repeat_differs(err, errlen, "cold", k, r->logits, x->rep_logits, V, h != r->state_hash);
    }
    double med, mn, mx;
    timing_stats(t, repeat, &med, &mn, &mx);
    r->ttft_ms = 1e3 * med;
    r->ttft_min_ms = 1e3 * mn;
    r->ttft_max_ms = 1e3 * mx;
    r->n_repeat = repeat;
    double t1h = eng_now_s();  /* the hash is harness time, not engine time */
    for (int32_t k = 0; k < n_rows; k++) {
        r->greedy[k] = eng_argmax(r->logits + (size_t)k * V, V);
        if (k + 1 < n_rows && (rc = eng_decode(s, r->greedy[k], r->logits + (size_t)(k + 1) * V)) != ENG_OK) return rc;
    }
    double t2 = eng_now_s();
    r->decode_ms = 1e3 * (t2 - t1h);
    x->sum->engine_s += t2 - t1h;
    return ENG_OK;
}

/* The cold result of p: from the shared cold cache, or computed (and shared). */
static int cold_result(hx_session *x, const hx_turn *t, const hx_cold_result **out, bool *shared, char *err,
                       size_t errlen) {
    const hx_session_params *o = x->sp;
    const hx_prepared *p = t->p;
    const hx_cold_result *cold = hx_coldcache_get(x->cold, x->m, &o->pp, x->n_rows, p->tokens, p->n);
    if (cold && cold->n_repeat < o->repeat) cold = NULL;  /* timed fewer times than this run wants */
    *shared = cold != NULL;
    if (!cold) {
        const bool flip = o->fault && !strcmp(o->fault, "repeat-flip") && t->idx == o->fault_request;
        int rc = run_cold(x, p, flip ? o->fault_index : -1, &x->scratch, err, errlen);
        if (rc == ENG_ERR_MISMATCH) return rc;
        if (rc != ENG_OK) {
            eng_errf(err, errlen, "cold prefill: %s", eng_status_str(rc));
            return rc;
        }
        x->scratch.flops = eng_model_prefill_flops_params(x->m, 0, p->n, &o->pp);
        const hx_cold_result *c = hx_coldcache_put(x->cold, x->m, &o->pp, p->tokens, p->n, &x->scratch);
        cold = c ? c : &x->scratch;
    }
    *out = cold;
    return ENG_OK;
}

// ----------------------------------------------------------------------------
// The reused run

/* The policy's chunk callback, timed: its checkpoint saving is part of the
 * reused TTFT, measured once, added to every repetition's timing. */
typedef struct timed_chunk {
    void  (*fn)(void *ud, eng_seq *s, int32_t n_tokens);
    void   *ud;
    double  s;
} timed_chunk;

static void timed_on_chunk(void *v, eng_seq *s, int32_t n_tokens) {
    timed_chunk *tc = v;
    const double t0 = eng_now_s();
    tc->fn(tc->ud, s, n_tokens);
    tc->s += eng_now_s() - t0;
}

/* Reused-TTFT timings of one request: the median, min and max of its
 * --repeat timings (all equal to the one timing without it). */
typedef struct reuse_times {
    double med_ms, min_ms, max_ms, restore_ms;
} reuse_times;

/* Acquire and prefill the rest, with --repeat N (compare only) timed N times
 * from a checkpoint of the acquired state: the first with the policy's
 * callbacks (its restore and its chunk callback are timed once: they have
 * side effects), the others bare, their timing plus those two; every
 * repetition must leave the same logits and state. Leaves acq->seq after the
 * prompt, reuse_logits row 0 and (compare) the state's hash in *hash. */
static int reused_prefill(hx_session *x, const hx_turn *t, bool compare, hx_acquire *acq, reuse_times *tm,
                          uint64_t *hash, double *engine_s, char *err, size_t errlen) {
    const hx_session_params *o = x->sp;
    const hx_prepared *p = t->p;
    int32_t V = x->V;
    const int32_t repeat = compare ? o->repeat : 1;
    timed_chunk tc = {.fn = x->pol->ops->on_chunk, .ud = x->pol->state};
    eng_prefill_params pp = o->pp;
    pp.on_chunk = timed_on_chunk;
    pp.ud = &tc;
    pp.all_logits = false;
    memset(acq, 0, sizeof *acq);
    double t0 = eng_now_s();
    int rc = hx_policy_acquire(x->pol, p->tokens, p->n, p->stable_end, &t->hint, acq);
    double t1 = eng_now_s();
    if (rc != ENG_OK) return rc;
    x->sum->n_quarantined += acq->n_quarantined;
    x->sum->n_fallbacks += acq->n_fallbacks;
    eng_seq *s = acq->seq;
    ENG_ASSERT(eng_seq_n_tokens(s) == acq->n_reused);
    bool fault_here = compare && o->fault && t->idx == o->fault_request;
    if (fault_here && !strcmp(o->fault, "kv-row")) {
        if (acq->n_reused == 0) return ENG_ERR_RANGE;  /* nothing restored: nothing to corrupt (said by the caller) */
        int32_t k = acq->n_reused - 1;  /* rewrite the last restored row from another token */
        if ((rc = eng_seq_truncate(s, k)) == ENG_OK) rc = eng_decode(s, (p->tokens[k] + 1) % V, NULL);
        if (rc != ENG_OK) return rc;
        x->fault_planted = true;
    }
    eng_ckpt *at_reuse = NULL;  /* the acquired state, for the repetitions */
    if (repeat > 1 && !(at_reuse = eng_seq_checkpoint(s))) return ENG_ERR_NOMEM;
    rc = eng_prefill(s, p->tokens + acq->n_reused, p->n - acq->n_reused, &pp, x->reuse_logits);
    double t2 = eng_now_s();
    double hash_s = 0;  /* harness time (hashing states), not engine time */
    double times[64];
    times[0] = t2 - t0;
    *hash = 0;
    if (rc == ENG_OK && compare) {
        rc = state_hash(x, s, hash);
        hash_s += eng_now_s() - t2;
    }
    for (int32_t k = 1; k < repeat && rc == ENG_OK; k++) {
        if ((rc = eng_seq_restore(s, at_reuse)) != ENG_OK) break;
        const double r0 = eng_now_s();
        rc = eng_prefill(s, p->tokens + acq->n_reused, p->n - acq->n_reused, &o->pp, x->rep_logits);
        const double r1 = eng_now_s();
        if (rc != ENG_OK) break;
        times[k] = (t1 - t0) + (r1 - r0) + tc.s;
        uint64_t h = 0;
        rc = state_hash(x, s, &h);
        hash_s += eng_now_s() - r1;
        if (rc == ENG_OK && (memcmp(x->rep_logits, x->reuse_logits, sizeof(float) * (size_t)V) || h != *hash))
            rc = repeat_differs(err, errlen, "reused", k, x->reuse_logits, x->rep_logits, V, h != *hash);
    }
    eng_ckpt_free(at_reuse);
    *engine_s += eng_now_s() - t0 - hash_s;
    if (rc != ENG_OK) return rc;
    if (fault_here && !strcmp(o->fault, "ulp-flip") && o->fault_index < V) {
        x->reuse_logits[o->fault_index] = hx_next_ulp(x->reuse_logits[o->fault_index]);
        x->fault_planted = true;
    }
    double med, mn, mx;
    timing_stats(times, repeat, &med, &mn, &mx);
    tm->med_ms = 1e3 * med;
    tm->min_ms = 1e3 * mn;
    tm->max_ms = 1e3 * mx;
    tm->restore_ms = 1e3 * (t1 - t0);
    return ENG_OK;
}

/* Greedy decoding after the prompt: the compared rows (n_cmp, filling
 * reuse_logits and greedy) and the generated tokens (gen), rolled back after.
 * *n_rows_done: rows of reuse_logits computed; *cancelled when the client left. */
static int decode_steps(hx_session *x, eng_seq *s, int32_t n_cmp, const hx_turn_gen *gen, hx_turn_result *res,
                        int32_t *n_rows_done, double *engine_s) {
    int32_t V = x->V;
    int32_t want_gen = gen ? gen->max_tokens : 0;
    bool generating = want_gen > 0;
    *n_rows_done = 0;
    if (n_cmp <= 1 && want_gen <= 1) {  /* the prompt's own logits suffice: no decode, nothing to roll back */
        if (n_cmp >= 1) x->greedy[0] = eng_argmax(x->reuse_logits, V), *n_rows_done = 1;
        if (generating) {
            int32_t id = eng_argmax(x->reuse_logits, V);
            res->n_generated = 1;
            int g = gen->on_token(gen->ud, 0, id, x->reuse_logits);
            if (g == HX_TURN_CANCEL) res->cancelled = true;
        }
        return ENG_OK;
    }
    eng_ckpt *ck = eng_seq_checkpoint(s);  /* the state after the prompt, to roll the decode back */
    if (!ck) return ENG_ERR_NOMEM;
    double t0 = eng_now_s();
    int rc = ENG_OK;
    for (int32_t k = 0;; k++) {
        const float *row = k < x->n_rows ? x->reuse_logits + (size_t)k * V : x->gen_logits;
        int32_t id = eng_argmax(row, V);
        if (k < n_cmp) {
            x->greedy[k] = id;
            *n_rows_done = k + 1;
        }
        if (generating) {
            res->n_generated = k + 1;
            int g = gen->on_token(gen->ud, k, id, row);
            if (g == HX_TURN_CANCEL) { res->cancelled = true; break; }
            if (g == HX_TURN_STOP || k + 1 >= want_gen) generating = false;
        }
        if (!(k + 1 < n_cmp || generating)) break;
        float *next = k + 1 < x->n_rows ? x->reuse_logits + (size_t)(k + 1) * V : x->gen_logits;
        if ((rc = eng_decode(s, id, next)) != ENG_OK) break;
    }
    *engine_s += eng_now_s() - t0;
    res->decode_ms = 1e3 * (eng_now_s() - t0);
    if (rc == ENG_OK) rc = eng_seq_restore(s, ck);
    eng_ckpt_free(ck);
    return rc;
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

// ----------------------------------------------------------------------------
// The turn

int hx_session_turn(hx_session *x, const hx_turn *t, hx_turn_result *res, char *err, size_t errlen) {
    const hx_session_params *o = x->sp;
    hx_prepared *p = t->p;
    const hx_request *req = t->req;
    const int32_t V = x->V, R = x->n_rows;
    const bool compare = o->verify && !t->warm_only;
    memset(res, 0, sizeof *res);
    res->fork_step = -1;
    res->first_step_diff = -1;
    res->state_equal = -1;
    res->n_prompt = p->n;
    double engine_s = 0;

    /* 0. a response set after the prompt was prepared (a scripted turn): rendered and tokenized, and it must fit */
    if (t->new_response) {
        int rc = hx_prepare_response(x->pc, req, p, err, errlen);
        if (rc != ENG_OK) return rc;
        if (p->n + p->n_resp + R + 1 > x->n_ctx) {
            eng_errf(err, errlen, "request (%d tokens) and its response (%d tokens) exceed the available context size "
                     "(%d tokens), try increasing it", p->n, p->n_resp, x->n_ctx);
            return ENG_ERR_RANGE;
        }
    }

    /* 1. reused: acquire, prefill the rest */
    hx_acquire acq;
    reuse_times tm;
    uint64_t reuse_hash = 0;
    int rc = reused_prefill(x, t, compare, &acq, &tm, &reuse_hash, &engine_s, err, errlen);
    if (rc == ENG_ERR_RANGE && o->fault && !strcmp(o->fault, "kv-row") && t->idx == o->fault_request &&
        !x->fault_planted) {
        eng_errf(err, errlen, "--inject-fault kv-row: request %d (session %s turn %d) reused nothing, so there is no "
                 "restored KV row to corrupt: choose a --fault-request whose prompt reuses a prefix", t->idx,
                 req->session, req->turn);
        return ENG_ERR_ARG;
    }
    if (rc != ENG_OK) {
        if (rc != ENG_ERR_MISMATCH) eng_errf(err, errlen, "reused prefill (policy %s): %s", o->policy, eng_status_str(rc));
        return rc;
    }
    eng_seq *s = acq.seq;
    res->n_reused = acq.n_reused;
    res->ttft_ms = tm.med_ms;
    res->slot = acq.slot;

    /* 2. the cold shadow, compared */
    const hx_cold_result *cold = NULL;
    bool shared = false;
    hx_cmp c0;
    memset(&c0, 0, sizeof c0);
    if (compare) {
        if ((rc = cold_result(x, t, &cold, &shared, err, errlen)) != ENG_OK) return rc;
        hx_compare_logits(cold->logits, x->reuse_logits, V, &c0);
    }
    int state_equal = compare && cold->state_hash && reuse_hash ? cold->state_hash == reuse_hash : -1;

    /* 3. the first token's time */
    hx_turn_status st = {.n_prompt = p->n, .n_reused = acq.n_reused, .ttft_ms = tm.med_ms, .compared = compare,
                         .logits_equal = compare && c0.equal, .state_equal = state_equal, .acq = &acq};
    if (!t->warm_only && t->gen && t->gen->on_prompt && t->gen->on_prompt(t->gen->ud, &st) == HX_TURN_CANCEL)
        res->cancelled = true;

    /* 4. greedy decode: the compared steps and the generated tokens, rolled back */
    int32_t n_rows_done = 0;
    if (!t->warm_only && !res->cancelled)
        rc = decode_steps(x, s, compare ? R : 0, t->gen, res, &n_rows_done, &engine_s);
    if (rc != ENG_OK) {
        eng_errf(err, errlen, "decode (policy %s): %s", o->policy, eng_status_str(rc));
        return rc;
    }

    /* 5. the response, teacher-forced; the policy keeps what it keeps */
    if (!t->warm_only && t->gen && t->gen->on_response) {
        if ((rc = t->gen->on_response(t->gen->ud, t->req)) != ENG_OK ||
            (rc = hx_prepare_response(x->pc, t->req, p, err, errlen)) != ENG_OK) {
            if (!err[0]) eng_errf(err, errlen, "the generated turn: %s", eng_status_str(rc));
            return rc;
        }
    }
    double t3 = eng_now_s();
    for (int32_t k = 0; k < p->n_resp && rc == ENG_OK; k++) rc = eng_decode(s, p->resp[k], NULL);
    if (rc == ENG_ERR_RANGE) {
        eng_errf(err, errlen, "the prompt (%d tokens) and its response (%d tokens) do not fit the context (%d)", p->n,
                 p->n_resp, x->n_ctx);
        return rc;
    }
    if (rc != ENG_OK) {
        eng_errf(err, errlen, "teacher-forced response: %s", eng_status_str(rc));
        return rc;
    }
    hx_release rel;
    memset(&rel, 0, sizeof rel);
    rel.bytes_held = rel.entries_held = -1;  /* not reported unless the policy says */
    rc = x->pol->ops->release(x->pol->state, s, p->n, &rel);
    engine_s += eng_now_s() - t3;
    x->sum->engine_s += engine_s;
    x->sum->n_store_failed += rel.n_store_failed;
    if (rc != ENG_OK) {
        eng_errf(err, errlen, "release (policy %s): %s", o->policy, eng_status_str(rc));
        return rc;
    }
    if (t->warm_only) return ENG_OK;

    /* 6. the row and its steps */
    hx_request_row row;
    hx_request_row_init(&row);
    bool all_equal = c0.equal;
    int64_t fork = -1;
    int32_t n_steps = 0;
    if (compare) {
        hx_request_row_set_cmp(&row, &c0);
        n_steps = n_rows_done;
        for (int32_t k = 0; k < n_steps; k++) {
            hx_cmp ck;
            if (k == 0) ck = c0;
            else hx_compare_logits(cold->logits + (size_t)k * V, x->reuse_logits + (size_t)k * V, V, &ck);
            hx_step_row_init(&x->steps[k]);
            hx_step_row_set_cmp(&x->steps[k], &ck);
            x->steps[k].step = k;
            x->steps[k].token_cold = cold->greedy[k];
            x->steps[k].token_reuse = x->greedy[k];
            if (!ck.equal) all_equal = false;
            if (fork < 0 && cold->greedy[k] != x->greedy[k]) fork = k;
        }
    }
    char miss_text[256], where[128];
    explain_miss(p, &acq, &row, miss_text, sizeof miss_text, where, sizeof where);

    row.req_index = t->idx;
    row.transcript = x->transcript;
    row.session = req->session;
    row.turn = req->turn;
    row.n_prompt = p->n;
    row.n_reused = acq.n_reused;
    row.n_prefilled = p->n - acq.n_reused;
    row.ttft_reuse_ms = tm.med_ms;
    if (o->repeat > 1 && compare) {
        row.ttft_reuse_min_ms = tm.min_ms;
        row.ttft_reuse_max_ms = tm.max_ms;
    }
    row.flops_reuse = eng_model_prefill_flops_params(x->m, acq.n_reused, p->n - acq.n_reused, &o->pp);
    row.model_reuse_ms =
        hx_calibration_price_ms(&x->price, row.flops_reuse, acq.bytes_restored > 0 ? (double)acq.bytes_restored : 0);
    if (compare) {
        row.ttft_cold_ms = cold->ttft_ms;
        if (o->repeat > 1) {
            row.ttft_cold_min_ms = cold->ttft_min_ms;
            row.ttft_cold_max_ms = cold->ttft_max_ms;
        }
        row.fork_step = fork;
        row.decode_equal = all_equal;
        if (state_equal >= 0) {
            row.state_equal = state_equal;
            row.state_hash_cold = cold->state_hash;
            row.state_hash_reuse = reuse_hash;
        }
        row.flops_cold = cold->flops;
        row.model_cold_ms = hx_calibration_price_ms(&x->price, row.flops_cold, 0);
    }
    row.n_decode = res->cancelled && compare ? n_steps : o->decode_n;
    row.bytes_restored = acq.bytes_restored;
    row.slot = acq.slot;
    if (acq.slot >= 0) { row.sim = acq.sim; row.f_keep = acq.f_keep; }
    row.n_checkpoints = acq.n_checkpoints;
    row.ckpt_bytes = rel.bytes_stored;
    row.cold_shared = shared;
    row.restore_ms = tm.restore_ms;
    row.store_ms = rel.store_ms;
    row.n_stored = rel.n_stored;
    row.bytes_stored = rel.bytes_stored;
    row.stable_end = p->stable_end;
    row.anchor_pos = rel.anchor_pos;
    row.anchor_ms = rel.anchor_ms;
    char note[512];
    if (t->note && t->note[0]) {
        snprintf(note, sizeof note, "%s%s%s", acq.note, acq.note[0] ? "; " : "", t->note);
        row.note = note;
    } else {
        row.note = acq.note;
    }
    row.cache_bytes = rel.bytes_held;
    row.cache_entries = rel.entries_held;
    char extra[1024];
    snprintf(extra, sizeof extra, "{\"n_normalized\":%d,\"n_resp\":%d,\"ckpts_held\":%d,\"n_quarantined\":%d,"
             "\"n_fallbacks\":%d,\"n_store_failed\":%d%s%s}", p->n_normalized, p->n_resp, acq.n_checkpoints,
             acq.n_quarantined, acq.n_fallbacks, rel.n_store_failed, t->extra && t->extra[0] ? "," : "",
             t->extra ? t->extra : "");
    row.extra = extra;
    row.verified = compare;
    if (x->store &&
        (rc = hx_store_put_request(x->store, x->run_id, &row, x->steps, compare && o->decode_n > 0 ? n_steps : 0, err,
                                   errlen)) != ENG_OK)
        return rc;

    res->compared = compare;
    res->identical = compare && all_equal && state_equal != 0;
    res->fork_step = fork;
    res->cmp = c0;
    res->state_equal = state_equal;
    res->logits_equal = compare && c0.equal;
    for (int32_t k = 1; k < n_steps && res->first_step_diff < 0; k++)
        if (!x->steps[k].logits_equal) res->first_step_diff = k;
    x->sum->n_requests++;
    x->sum->n_prompt += p->n;
    x->sum->n_reused += acq.n_reused;
    if (compare && (!all_equal || state_equal == 0)) x->sum->n_diverged++;
    if (fork >= 0) x->sum->n_forked++;
    return ENG_OK;
}
