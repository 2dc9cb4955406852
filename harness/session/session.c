/*
 * harness/session/session.c: the session (see session.h): the model, the
 * prompt preparation and the policy a run's turns share, the run's meta and
 * calibration, and the cold shadow a turn is compared with (turn.c runs
 * the turns).
 *
 * Invariants:
 * - the cold and the reused run use the same eng_prefill_params (grid C,
 *   align, ubatch), so with align chunk they are comparable bit for bit;
 * - the state after the prompt is compared by the XXH3-64 of its serialized
 *   bytes;
 * - a cold result comes from the shared cold cache or is computed whole on
 *   the session's cold sequence, one at a time (a turn's own scratch holds it).
 */
#include "session_int.h"
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

static void bufs_free(session_bufs *b) {
    if (!b) return;
    free(b->reuse_logits);
    free(b->gen_logits);
    free(b->greedy);
    free(b->steps);
    hx_cold_result_free(&b->scratch);
    free(b);
}

session_bufs *session_bufs_take(hx_session *x) {
    session_bufs *b = x->spare;
    if (b) {
        x->spare = b->next;
        b->next = NULL;
        return b;
    }
    size_t V = (size_t)x->V, R = (size_t)x->n_rows;
    if (!(b = calloc(1, sizeof *b))) return NULL;
    b->reuse_logits = calloc(R * V, sizeof(float));
    b->gen_logits = calloc(V, sizeof(float));
    b->greedy = calloc(R, sizeof(int32_t));
    b->steps = calloc(R, sizeof(hx_step_row));
    if (!b->reuse_logits || !b->gen_logits || !b->greedy || !b->steps ||
        hx_cold_result_alloc(&b->scratch, x->n_rows, x->V) != ENG_OK) {
        bufs_free(b);
        return NULL;
    }
    return b;
}

void session_bufs_give(hx_session *x, session_bufs *b) {
    if (!b) return;
    b->next = x->spare;
    x->spare = b;
}

eng_batch_params hx_session_batch_params(const hx_session *x) {
    eng_batch_params bp = eng_batch_params_default();
    bp.chunk = x->sp->pp.chunk;
    bp.align = x->sp->pp.align;
    bp.ubatch = x->sp->pp.ubatch;
    return bp;
}

void hx_session_close(hx_session *s) {
    if (!s) return;
    while (s->spare) {
        session_bufs *b = s->spare;
        s->spare = b->next;
        bufs_free(b);
    }
    for (int32_t i = 0; s->bc_seq && i <= s->sp->batch_check; i++) eng_seq_free(s->bc_seq[i]);
    free(s->bc_seq);
    free(s->bc_tok);
    free(s->bc_logits);
    free(s->bc_spans);
    eng_batch_free(s->bc_batch);
    free(s->sbuf.p);
    free(s->rep_logits);
    eng_batch_free(s->batch);
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

int hx_session_start(hx_session *s, int32_t n_ctx, hx_coldcache *cold, bool resume, int32_t n_parallel, char *err,
                     size_t errlen) {
    const hx_session_params *o = s->sp;
    hx_policy_config cfg = {0};
    cfg.model = s->m;
    cfg.pp = o->pp;
    cfg.cap_prompt = o->cap_prompt;
    cfg.n_ctx = n_ctx;
    cfg.quirks = s->quirks;
    cfg.resume = resume;
    cfg.n_parallel = n_parallel;
    int rc = hx_policy_create(o->policy, &cfg, &o->policy_args, &s->pol, err, errlen);
    if (rc != ENG_OK) return rc;
    s->n_ctx = n_ctx;
    s->cold = cold;
    s->cold_seq = eng_seq_new(s->m, n_ctx);
    s->rep_logits = calloc((size_t)s->V, sizeof(float));
    s->batch = eng_batch_new(s->m);
    if (!s->cold_seq || !s->rep_logits || !s->batch) {
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
    char batch[96] = "";  /* --batch-check's K and seed, when given */
    if (o->batch_check >= 0)
        snprintf(batch, sizeof batch, ",\"batch_check\":%d,\"batch_seed\":%llu,\"n_vocab\":%d", o->batch_check,
                 (unsigned long long)o->batch_seed, s->V);
    snprintf(extra, extra_cap, "{\"anchor_tokens\":%d,\"n_ctx_arg\":%d%s%s%s}", anchor_tokens, n_ctx_arg, batch,
             more && more[0] ? "," : "", more ? more : "");
    meta->extra = extra;
}

// ----------------------------------------------------------------------------
// The state after the prompt, compared by hash: a reuse that leaves the
// logits identical can still leave different KV or recurrent state behind
// (a tiny recurrent model forgets shifted rounding within two chunks), and
// that difference surfaces later. XXH3-64 over eng_seq_serialize's bytes.

int session_state_hash(hx_session *x, const eng_seq *s, uint64_t *out) {
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
void session_timing_stats(const double *t, int n, double *med, double *mn, double *mx) {
    *mn = *mx = t[0];
    for (int i = 1; i < n; i++) {
        if (t[i] < *mn) *mn = t[i];
        if (t[i] > *mx) *mx = t[i];
    }
    double tmp[64];
    memcpy(tmp, t, sizeof(double) * (size_t)n);
    *med = hx_median(tmp, n);
}

/* A repetition of a prefill gave other bits than the first: the engine is
 * not deterministic here, and no comparison of this run can be trusted. */
int session_repeat_differs(char *err, size_t errlen, const char *what, int rep, const float *a, const float *b,
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
        if ((rc = session_state_hash(x, s, k ? &h : &r->state_hash)) != ENG_OK) return rc;
        if (k && (memcmp(x->rep_logits, r->logits, sizeof(float) * (size_t)V) || h != r->state_hash))
            return session_repeat_differs(err, errlen, "cold", k, r->logits, x->rep_logits, V, h != r->state_hash);
    }
    double med, mn, mx;
    session_timing_stats(t, repeat, &med, &mn, &mx);
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

int session_cold_result(hx_session *x, int32_t idx, const hx_prepared *p, hx_cold_result *scratch,
                        const hx_cold_result **out, bool *shared, char *err, size_t errlen) {
    const hx_session_params *o = x->sp;
    const hx_cold_result *cold = hx_coldcache_get(x->cold, x->m, &o->pp, x->n_rows, p->tokens, p->n);
    if (cold && cold->n_repeat < o->repeat) cold = NULL;  /* timed fewer times than this run wants */
    *shared = cold != NULL;
    if (!cold) {
        const bool flip = o->fault && !strcmp(o->fault, "repeat-flip") && idx == o->fault_request;
        int rc = run_cold(x, p, flip ? o->fault_index : -1, scratch, err, errlen);
        if (rc == ENG_ERR_MISMATCH) return rc;
        if (rc != ENG_OK) {
            eng_errf(err, errlen, "cold prefill: %s", eng_status_str(rc));
            return rc;
        }
        scratch->flops = eng_model_prefill_flops_params(x->m, 0, p->n, &o->pp);
        const hx_cold_result *c = hx_coldcache_put(x->cold, x->m, &o->pp, p->tokens, p->n, scratch);
        cold = c ? c : scratch;
    }
    *out = cold;
    return ENG_OK;
}

