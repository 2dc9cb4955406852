/*
 * harness/replay/replay.c: the replay loop (see replay.h for the steps).
 *
 * Invariants:
 * - the cold and the reused run use the same eng_prefill_params (grid C,
 *   align, ubatch), so with align chunk they are comparable bit for bit;
 * - equality is decided by memcmp only (hx_compare_logits);
 * - a request's rows are written in one transaction (hx_store_put_request);
 *   with --resume, requests already stored are replayed through the policy
 *   only (no cold run, no comparison, nothing written) so the cache holds
 *   exactly what it would have held without the interruption.
 */
#include "replay.h"

#include <math.h>
#include <stddef.h>
#include <unistd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "bench_util.h"
#include "calibrate.h"
#include "cli.h"
#include "compare.h"
#include "policy.h"
#include "prepare.h"
#include "status.h"
#include "store.h"
#include "transcript.h"
#include "util.h"

// ----------------------------------------------------------------------------
// Options

void hx_replay_opts_default(hx_replay_opts *o) {
    memset(o, 0, sizeof *o);
    o->policy = "slot-lcp";
    o->quirks = "";
    o->normalize = "";
    o->num = eng_numerics_default();
    o->pp = eng_prefill_params_default();
    o->decode_n = 40;
    o->cap_prompt = true;
    o->repeat = 1;
    o->sweep_value = NAN;
    o->seed = -1;
    o->fault_request = 1;
    o->unit = o->n_units = o->shard = o->n_shards = -1;
}

static char g_quirks[256];

/* --quirk is repeatable: the names accumulate, comma-separated. The first
 * --quirk of an option set (an experiment parses one per run) starts afresh. */
static void parse_quirk(const char *flag, const char *v, void *field) {
    if (*(const char **)field != g_quirks) g_quirks[0] = '\0';
    size_t n = strlen(g_quirks);
    snprintf(g_quirks + n, sizeof g_quirks - n, "%s%s", n ? "," : "", v);
    *(const char **)field = g_quirks;
}

static void parse_on_off(const char *flag, const char *v, void *field) {
    if (strcmp(v, "on") && strcmp(v, "off")) hx_die(HX_EXIT_USAGE, "%s: expected on or off, got '%s'", flag, v);
    *(bool *)field = !strcmp(v, "on");
}

static void parse_fault(const char *flag, const char *v, void *field) {
    if (strcmp(v, "ulp-flip") && strcmp(v, "kv-row") && strcmp(v, "repeat-flip"))
        hx_die(HX_EXIT_USAGE, "%s: expected ulp-flip, kv-row or repeat-flip, got '%s'", flag, v);
    *(const char **)field = v;
}

#define OPT(field) offsetof(hx_replay_opts, field)

/* The options every policy shares, in --help's order: what to replay, then
 * (after --policy and --quirk) the engine settings, then (after the
 * policies' own options) run control. */
static const hx_option k_inputs[] = {
    {"--model", "-m", "FILE.gguf", "model (required)", HX_OPT_STRING, OPT(model_path), 0, 0, NULL},
    {"--transcript", "-t", "FILE", "transcript JSONL, v1 or v2 (required; see kvreplay import / synth-transcript)",
     HX_OPT_STRING, OPT(transcript_path), 0, 0, NULL},
    {"--db", NULL, "FILE.sqlite", "results database (created if absent)", HX_OPT_STRING, OPT(db_path), 0, 0, NULL},
    {"--policy", NULL, "P", NULL, HX_OPT_STRING, OPT(policy), 0, 0, NULL},
    {"--quirk", NULL, "Q", NULL, HX_OPT_CUSTOM, OPT(quirks), 0, 0, parse_quirk},
    {0},
};
static const hx_option k_engine[] = {
    {"--normalize", NULL, "R", "prompt normalization rules, comma-separated: anthropic-cch", HX_OPT_STRING,
     OPT(normalize), 0, 0, NULL},
    {"--template", NULL, "T", "chatml | llama2 | llama3 | raw (default: from the model's metadata)", HX_OPT_STRING,
     OPT(template_name), 0, 0, NULL},
    {"--align", NULL, "chunk|none", "chunk: absolute grid of C (bit-exact); none: ubatch chunks from the\n"
     "reuse point, as llama.cpp (default chunk)", HX_OPT_CUSTOM, OPT(pp.align), 0, 0, hx_parse_align},
    {"--chunk", NULL, "C", "prefill grid (default 64)", HX_OPT_INT, OPT(pp.chunk), 1, 1 << 20, NULL},
    {"--ubatch", NULL, "U", "chunk length under --align none (default 512)", HX_OPT_INT, OPT(pp.ubatch), 1, 1 << 20,
     NULL},
    {"--kernel", NULL, "blas|ref", "OpenBLAS sgemm, or fixed-order batch-invariant kernels (default blas)",
     HX_OPT_CUSTOM, OPT(num.kernel), 0, 0, hx_parse_kernel},
    {"--precision", NULL, "fp32|bf16", "(default fp32)", HX_OPT_CUSTOM, OPT(num.precision), 0, 0, hx_parse_precision},
    {"--threads", NULL, "T", "thread count, recorded in the run (default 1)", HX_OPT_INT, OPT(num.n_threads), 1, 256,
     NULL},
    {"--decode", NULL, "N", "greedy decode steps compared per request (default 40)", HX_OPT_INT, OPT(decode_n), 0,
     1 << 16, NULL},
    {"--cap-prompt", NULL, "on|off", "cap reuse at the cached prompt's length (default on; off reuses\n"
     "decode-written KV)", HX_OPT_CUSTOM, OPT(cap_prompt), 0, 0, parse_on_off},
    {"--n-ctx", NULL, "N", "positions per sequence (default: sized from the transcript)", HX_OPT_INT, OPT(n_ctx), 1,
     1 << 24, NULL},
    {"--repeat", NULL, "N", "time the cold and the reused prefill N times each (the same bits every\n"
     "time, checked); TTFT columns store the median, min and max (default 1)", HX_OPT_INT, OPT(repeat), 1, 64,
     NULL},
    {"--calibration", NULL, "FILE", "price the modeled TTFT at FILE's reference calibration for this\n"
     "configuration (measured and added when missing); default: this run's own", HX_OPT_STRING, OPT(calibration),
     0, 0, NULL},
    {0},
};
static const hx_option k_control[] = {
    {"--resume", NULL, NULL, "complete an interrupted run of the same configuration", HX_OPT_FLAG, OPT(resume), 0, 0,
     NULL},
    {"--skip-bad", NULL, NULL, "skip and count bad transcript lines instead of failing", HX_OPT_FLAG, OPT(skip_bad), 0,
     0, NULL},
    {"--limit", NULL, "N", "replay at most the first N requests (default 0: all of them)", HX_OPT_INT, OPT(limit),
     0, 1 << 30, NULL},
    {"--seed", NULL, "S", "record the seed that produced synthetic inputs", HX_OPT_INT64, OPT(seed), 0, INT64_MAX,
     NULL},
    {"--inject-fault", NULL, "F", "test the checker: ulp-flip (one reused logit moves one ULP), kv-row\n"
     "(the last restored KV row is recomputed from another token) or repeat-flip\n"
     "(with --repeat: the second cold repetition's logit moves one ULP), on\n"
     "request --fault-request K (default 1), logit --fault-index I (default 0);\n"
     "exit 2 when the fault cannot be planted (no such request or logit, no\n"
     "reuse to corrupt, a request already stored by --resume)", HX_OPT_CUSTOM, OPT(fault), 0, 0, parse_fault},
    {"--fault-request", NULL, "K", NULL, HX_OPT_INT, OPT(fault_request), 0, 1 << 30, NULL},
    {"--fault-index", NULL, "I", NULL, HX_OPT_INT, OPT(fault_index), 0, 1 << 30, NULL},
    {"--quiet", NULL, NULL, NULL, HX_OPT_FLAG, OPT(quiet), 0, 0, NULL},
    {0},
};

bool hx_replay_opts_parse(int argc, char **argv, int *i, hx_replay_opts *o) {
    return hx_options_parse(k_inputs, o, argc, argv, i) || hx_options_parse(k_engine, o, argc, argv, i) ||
           hx_options_parse(k_control, o, argc, argv, i) || hx_policy_args_parse(&o->policy_args, argc, argv, i);
}

void hx_replay_opts_help(FILE *f) {
    hx_options_help(k_inputs, NULL, f);
    fprintf(f, "  %-25s ", "--policy P");
    for (size_t i = 0; hx_policies[i]; i++) fprintf(f, "%s%s", i ? " | " : "", hx_policies[i]->name);
    fprintf(f, " (default slot-lcp)\n");
    hx_policy_quirks_help(f);
    hx_options_help(k_engine, NULL, f);
    hx_policy_help(f);
    hx_options_help(k_control, NULL, f);
}

// ----------------------------------------------------------------------------
// Helpers

static void fill_meta(const hx_replay_opts *o, const hx_policy *pol, const eng_model *m, const char *tmpl, const char *norm, unsigned quirks,
                      int32_t n_ctx, int64_t n_requests, hx_run_meta *meta, char *extra, size_t extra_cap) {
    const eng_model_info *mi = eng_model_get_info(m);
    hx_run_meta_init(meta);
    meta->experiment = o->experiment;
    meta->variant = o->variant;
    meta->sweep_name = o->sweep_name;
    meta->sweep_value = o->sweep_value;
    meta->n_requests = n_requests;
    meta->model_path = o->model_path;
    meta->model_sha256 = mi->sha256;
    meta->model_name = mi->name;
    meta->n_params = mi->n_params;
    meta->transcript = o->transcript_path;
    meta->template_name = tmpl;
    meta->policy = o->policy;
    meta->quirks = hx_quirks_str(o->policy, quirks);
    meta->normalize = norm;
    hx_policy_record(pol, meta);
    meta->align = eng_align_name(o->pp.align);
    meta->chunk = o->pp.chunk;
    meta->ubatch = o->pp.ubatch;
    meta->kernel = eng_kernel_name(o->num.kernel);
    meta->precision = eng_precision_name(o->num.precision);
    meta->threads = o->num.n_threads;
    meta->decode_n = o->decode_n;
    meta->cap_prompt = o->cap_prompt ? 1 : 0;
    meta->n_ctx = n_ctx;
    meta->seed = o->seed;
    meta->spec_sha256 = o->spec_sha256;
    meta->scale = o->scale;
    meta->unit = o->unit;
    meta->n_units = o->n_units;
    meta->shard = o->shard;
    meta->n_shards = o->n_shards;
    meta->plan_sha256 = o->plan_sha256;
    meta->blas = eng_blas_info();
    /* runs.extra has always recorded --anchor as given (-1: auto or absent), whatever the policy */
    int32_t anchor_tokens = -1;
    hx_policy_args_read(&o->policy_args, "--anchor", &anchor_tokens);
    snprintf(extra, extra_cap, "{\"anchor_tokens\":%d,\"n_ctx_arg\":%d,\"limit\":%d,\"n_resp_tokens\":\"teacher-forced\"}",
             anchor_tokens, o->n_ctx, o->limit);
    meta->extra = extra;
}

/* Fills the miss explanation: where the prompt leaves the best cached prefix. */
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

static void progress(int32_t i, int32_t n, const hx_request *r, double t0) {
    if (!eng_stderr_is_tty()) return;
    fprintf(stderr, "\r[%d/%d] %s turn %d  %.1fs   ", i + 1, n, r->session, r->turn, eng_now_s() - t0);
    if (i + 1 == n) fputc('\n', stderr);
}

// ----------------------------------------------------------------------------
// The state after the prompt, compared by hash: a reuse that leaves the
// logits identical can still leave different KV or recurrent state behind
// (a tiny recurrent model forgets shifted rounding within two chunks), and
// that difference surfaces later. XXH3-64 over eng_seq_serialize's bytes.

typedef struct state_buf { void *p; size_t cap; } state_buf;

static int state_hash(state_buf *b, const eng_seq *s, uint64_t *out) {
    size_t need = eng_seq_serialized_size(s), n = 0;
    if (need > b->cap) {
        void *q = realloc(b->p, need);
        if (!q) return ENG_ERR_NOMEM;
        b->p = q;
        b->cap = need;
    }
    int rc = eng_seq_serialize(s, b->p, b->cap, &n);
    if (rc != ENG_OK) return rc;
    uint64_t h = XXH3_64bits(b->p, n);
    *out = h ? h : 1;  /* 0 means "not taken" */
    return ENG_OK;
}

// ----------------------------------------------------------------------------
// The cold run: fresh state, prefill everything, greedy decode

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

/* flip_at >= 0 (fault injection, repeat-flip): the second repetition's logit
 * flip_at moves one ULP, which the repetition check must catch. */
static int run_cold(eng_seq *s, const hx_prepared *p, const eng_prefill_params *pp, int32_t n_rows, int32_t repeat,
                    int32_t flip_at, float *rep_logits, hx_cold_result *r, state_buf *sb, double *engine_s, char *err,
                    size_t errlen) {
    int32_t V = r->n_vocab;
    eng_prefill_params cpp = *pp;
    cpp.on_chunk = NULL;
    cpp.all_logits = false;
    double t[64], t0 = 0, t1 = 0;
    int rc = ENG_OK;
    for (int32_t k = 0; k < repeat; k++) {
        eng_seq_reset(s);
        t0 = eng_now_s();
        rc = eng_prefill(s, p->tokens, p->n, &cpp, k ? rep_logits : r->logits);
        t1 = eng_now_s();
        if (rc != ENG_OK) return rc;
        if (k == 1 && flip_at >= 0 && flip_at < V) rep_logits[flip_at] = hx_next_ulp(rep_logits[flip_at]);
        t[k] = t1 - t0;
        *engine_s += t1 - t0;
        uint64_t h = 0;
        if ((rc = state_hash(sb, s, k ? &h : &r->state_hash)) != ENG_OK) return rc;
        if (k && (memcmp(rep_logits, r->logits, sizeof(float) * (size_t)V) || h != r->state_hash))
            return repeat_differs(err, errlen, "cold", k, r->logits, rep_logits, V, h != r->state_hash);
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
    *engine_s += t2 - t1h;
    return ENG_OK;
}

// ----------------------------------------------------------------------------
// The replay

typedef struct replay_ctx {
    const hx_replay_opts *o;
    eng_model      *m;
    hx_policy      *pol;
    eng_seq        *cold_seq;
    hx_coldcache   *cold;
    hx_store       *store;
    int64_t         run_id;
    int32_t         V;
    int32_t         n_rows;      /* logit rows compared: max(1, decode_n) */
    float          *reuse_logits;/* (n_rows, V) */
    hx_cold_result  scratch;     /* cold result when not cached */
    state_buf       sbuf;        /* serialized state, for state_hash */
    uint64_t        reuse_hash;  /* state_hash after the reused prefill */
    bool            fault_planted; /* --inject-fault was applied (a self-test must test something) */
    float          *rep_logits;  /* (V) a repetition's logits (--repeat) */
    hx_calibration  price;       /* what the modeled TTFT is priced at */
    hx_replay_summary *sum;
} replay_ctx;

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

/* The reused path: acquire, prefill the rest, decode, roll back, teacher-force, release.
 * compare=false (resume warm-up) skips the decode. With --repeat N (compare
 * only) the prefill runs N times from a checkpoint of the acquired state: the
 * first with the policy's callbacks (its restore and its chunk callback are
 * timed once: they have side effects), the others bare, their timing plus
 * those two; every repetition must leave the same logits and state. */
static int run_reused(replay_ctx *x, const hx_prepared *p, bool compare, int32_t idx, hx_acquire *acq,
                      hx_release *rel, reuse_times *tm, int32_t *greedy_out, char *err, size_t errlen) {
    int32_t V = x->V;
    const int32_t repeat = compare ? x->o->repeat : 1;
    timed_chunk tc = {.fn = x->pol->ops->on_chunk, .ud = x->pol->state};
    eng_prefill_params pp = x->o->pp;
    pp.on_chunk = timed_on_chunk;
    pp.ud = &tc;
    pp.all_logits = false;
    memset(acq, 0, sizeof *acq);
    memset(rel, 0, sizeof *rel);
    double t0 = eng_now_s();
    int rc = x->pol->ops->acquire(x->pol->state, p->tokens, p->n, p->stable_end, acq);
    double t1 = eng_now_s();
    if (rc != ENG_OK) return rc;
    x->sum->n_quarantined += acq->n_quarantined;
    x->sum->n_fallbacks += acq->n_fallbacks;
    eng_seq *s = acq->seq;
    ENG_ASSERT(eng_seq_n_tokens(s) == acq->n_reused);
    bool fault_here = compare && x->o->fault && idx == x->o->fault_request;
    if (fault_here && !strcmp(x->o->fault, "kv-row")) {
        if (acq->n_reused == 0) return ENG_ERR_RANGE;  /* nothing restored: nothing to corrupt (said by the caller) */
        int32_t k = acq->n_reused - 1;  /* rewrite the last restored row from another token */
        if ((rc = eng_seq_truncate(s, k)) == ENG_OK)
            rc = eng_decode(s, (p->tokens[k] + 1) % x->V, NULL);
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
    x->reuse_hash = 0;
    if (rc == ENG_OK && compare) {
        rc = state_hash(&x->sbuf, s, &x->reuse_hash);
        hash_s += eng_now_s() - t2;
    }
    for (int32_t k = 1; k < repeat && rc == ENG_OK; k++) {
        if ((rc = eng_seq_restore(s, at_reuse)) != ENG_OK) break;
        const double r0 = eng_now_s();
        rc = eng_prefill(s, p->tokens + acq->n_reused, p->n - acq->n_reused, &x->o->pp, x->rep_logits);
        const double r1 = eng_now_s();
        if (rc != ENG_OK) break;
        times[k] = (t1 - t0) + (r1 - r0) + tc.s;
        uint64_t h = 0;
        rc = state_hash(&x->sbuf, s, &h);
        hash_s += eng_now_s() - r1;
        if (rc == ENG_OK && (memcmp(x->rep_logits, x->reuse_logits, sizeof(float) * (size_t)V) || h != x->reuse_hash))
            rc = repeat_differs(err, errlen, "reused", k, x->reuse_logits, x->rep_logits, V, h != x->reuse_hash);
    }
    eng_ckpt_free(at_reuse);
    if (rc != ENG_OK) return rc;
    if (fault_here && !strcmp(x->o->fault, "ulp-flip") && x->o->fault_index < x->V) {
        x->reuse_logits[x->o->fault_index] = hx_next_ulp(x->reuse_logits[x->o->fault_index]);
        x->fault_planted = true;
    }
    double med, mn, mx;
    timing_stats(times, repeat, &med, &mn, &mx);
    tm->med_ms = 1e3 * med;
    tm->min_ms = 1e3 * mn;
    tm->max_ms = 1e3 * mx;
    tm->restore_ms = 1e3 * (t1 - t0);
    if (compare && x->n_rows > 1) {
        eng_ckpt *ck = eng_seq_checkpoint(s);  /* the state after the prompt, to roll the decode back */
        if (!ck) return ENG_ERR_NOMEM;
        for (int32_t k = 0; k < x->n_rows; k++) {
            greedy_out[k] = eng_argmax(x->reuse_logits + (size_t)k * V, V);
            if (k + 1 < x->n_rows &&
                (rc = eng_decode(s, greedy_out[k], x->reuse_logits + (size_t)(k + 1) * V)) != ENG_OK) break;
        }
        if (rc == ENG_OK) rc = eng_seq_restore(s, ck);
        eng_ckpt_free(ck);
        if (rc != ENG_OK) return rc;
    } else if (compare) {
        greedy_out[0] = eng_argmax(x->reuse_logits, V);
    }
    for (int32_t k = 0; k < p->n_resp && rc == ENG_OK; k++) rc = eng_decode(s, p->resp[k], NULL);
    double t3 = eng_now_s();
    x->sum->engine_s += t3 - t0 - hash_s;
    if (rc != ENG_OK) return rc;
    memset(rel, 0, sizeof *rel);
    rel->bytes_held = rel->entries_held = -1;  /* not reported unless the policy says */
    rc = x->pol->ops->release(x->pol->state, s, p->n, rel);
    x->sum->n_store_failed += rel->n_store_failed;
    return rc;
}

static int replay_one(replay_ctx *x, int32_t idx, const hx_request *req, const hx_prepared *p,
                      char *err, size_t errlen) {
    int32_t V = x->V, R = x->n_rows;
    const hx_replay_opts *o = x->o;
    bool shared = false;
    const hx_cold_result *cold = hx_coldcache_get(x->cold, x->m, &o->pp, R, p->tokens, p->n);
    if (cold && cold->n_repeat < o->repeat) cold = NULL;  /* timed fewer times than this run wants */
    if (cold) shared = true;
    else {
        const bool flip = o->fault && !strcmp(o->fault, "repeat-flip") && idx == o->fault_request;
        int rc = run_cold(x->cold_seq, p, &o->pp, R, o->repeat, flip ? o->fault_index : -1, x->rep_logits,
                          &x->scratch, &x->sbuf, &x->sum->engine_s, err, errlen);
        if (rc == ENG_ERR_MISMATCH) return rc;
        if (rc != ENG_OK) { eng_errf(err, errlen, "cold prefill: %s", eng_status_str(rc)); return rc; }
        x->scratch.flops = eng_model_prefill_flops_params(x->m, 0, p->n, &o->pp);
        const hx_cold_result *c = hx_coldcache_put(x->cold, x->m, &o->pp, p->tokens, p->n, &x->scratch);
        cold = c ? c : &x->scratch;
    }

    hx_acquire acq;
    hx_release rel;
    reuse_times tm;
    int32_t *greedy = calloc((size_t)R, sizeof(int32_t));
    hx_step_row *steps = calloc((size_t)R, sizeof(hx_step_row));
    if (!greedy || !steps) { free(greedy); free(steps); return ENG_ERR_NOMEM; }
    int rc = run_reused(x, p, true, idx, &acq, &rel, &tm, greedy, err, errlen);
    if (rc == ENG_ERR_RANGE && o->fault && !strcmp(o->fault, "kv-row") && idx == o->fault_request && !x->fault_planted) {
        eng_errf(err, errlen, "--inject-fault kv-row: request %d (session %s turn %d) reused nothing, so there is no "
                 "restored KV row to corrupt: choose a --fault-request whose prompt reuses a prefix", idx, req->session,
                 req->turn);
        free(greedy);
        free(steps);
        return ENG_ERR_ARG;
    }
    if (rc != ENG_OK) {
        if (rc != ENG_ERR_MISMATCH)
            eng_errf(err, errlen, "reused prefill (policy %s): %s", o->policy, eng_status_str(rc));
        free(greedy);
        free(steps);
        return rc;
    }

    hx_request_row row;
    hx_request_row_init(&row);
    hx_cmp c0;
    hx_compare_logits(cold->logits, x->reuse_logits, V, &c0);
    hx_request_row_set_cmp(&row, &c0);
    bool all_equal = c0.equal;
    int64_t fork = -1;
    for (int32_t k = 0; k < R; k++) {
        hx_cmp ck;
        if (k == 0) ck = c0;
        else hx_compare_logits(cold->logits + (size_t)k * V, x->reuse_logits + (size_t)k * V, V, &ck);
        hx_step_row_init(&steps[k]);
        hx_step_row_set_cmp(&steps[k], &ck);
        steps[k].step = k;
        steps[k].token_cold = cold->greedy[k];
        steps[k].token_reuse = greedy[k];
        if (!ck.equal) all_equal = false;
        if (fork < 0 && cold->greedy[k] != greedy[k]) fork = k;
    }
    char miss_text[256], where[128];
    explain_miss(p, &acq, &row, miss_text, sizeof miss_text, where, sizeof where);

    row.req_index = idx;
    row.transcript = o->transcript_path;
    row.session = req->session;
    row.turn = req->turn;
    row.n_prompt = p->n;
    row.n_reused = acq.n_reused;
    row.n_prefilled = p->n - acq.n_reused;
    row.ttft_cold_ms = cold->ttft_ms;
    row.ttft_reuse_ms = tm.med_ms;
    if (o->repeat > 1) {
        row.ttft_cold_min_ms = cold->ttft_min_ms;
        row.ttft_cold_max_ms = cold->ttft_max_ms;
        row.ttft_reuse_min_ms = tm.min_ms;
        row.ttft_reuse_max_ms = tm.max_ms;
    }
    row.fork_step = fork;
    row.decode_equal = all_equal;
    if (cold->state_hash && x->reuse_hash) {
        row.state_equal = cold->state_hash == x->reuse_hash;
        row.state_hash_cold = cold->state_hash;
        row.state_hash_reuse = x->reuse_hash;
    }
    row.n_decode = o->decode_n;
    row.flops_cold = cold->flops;
    row.flops_reuse = eng_model_prefill_flops_params(x->m, acq.n_reused, p->n - acq.n_reused, &o->pp);
    row.bytes_restored = acq.bytes_restored;
    row.model_cold_ms = hx_calibration_price_ms(&x->price, row.flops_cold, 0);
    row.model_reuse_ms =
        hx_calibration_price_ms(&x->price, row.flops_reuse, acq.bytes_restored > 0 ? (double)acq.bytes_restored : 0);
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
    row.note = acq.note;
    row.cache_bytes = rel.bytes_held;
    row.cache_entries = rel.entries_held;
    char extra[256];
    snprintf(extra, sizeof extra, "{\"n_normalized\":%d,\"n_resp\":%d,\"ckpts_held\":%d,\"n_quarantined\":%d,"
             "\"n_fallbacks\":%d,\"n_store_failed\":%d}", p->n_normalized, p->n_resp, acq.n_checkpoints,
             acq.n_quarantined, acq.n_fallbacks, rel.n_store_failed);
    row.extra = extra;
    rc = hx_store_put_request(x->store, x->run_id, &row, steps, o->decode_n > 0 ? R : 0, err, errlen);

    x->sum->n_requests++;
    x->sum->n_prompt += p->n;
    x->sum->n_reused += acq.n_reused;
    if (!all_equal || row.state_equal == 0) x->sum->n_diverged++;
    if (fork >= 0) x->sum->n_forked++;
    free(greedy);
    free(steps);
    return rc;
}

/* --resume of a configuration whose run is already complete (and none is
 * interrupted): ENG_OK with sum->run_id and sum->already_done set, so the
 * run is not replayed a second time; ENG_ERR_NOT_FOUND otherwise. */
static int already_done(hx_store *st, const hx_run_meta *meta, hx_replay_summary *sum, char *err, size_t errlen) {
    char *key = hx_run_meta_config_key(meta);
    if (!key) return ENG_ERR_NOMEM;
    int64_t id = -1;
    int rc = hx_store_find_resumable(st, key, &id, err, errlen);
    if (rc == ENG_OK) rc = ENG_ERR_NOT_FOUND;  /* an interrupted run: resume it */
    else if (rc == ENG_ERR_NOT_FOUND) rc = hx_store_find_done(st, key, &id, err, errlen);
    free(key);
    if (rc == ENG_OK) {
        sum->run_id = id;
        sum->already_done = true;
    }
    return rc;
}

int hx_replay_run(const hx_replay_opts *o, hx_coldcache *cold, hx_replay_summary *sum) {
    char err[1024] = "";
    int code = HX_EXIT_OK;
    hx_transcript t = {0};
    hx_prepared *prep = NULL;
    hx_prepare_ctx *pc = NULL;
    hx_done_set *done = NULL;
    replay_ctx x = {0};
    memset(sum, 0, sizeof *sum);
    x.o = o;
    x.sum = sum;
    x.cold = cold;
    double t_start = eng_now_s();

    if (!o->model_path) hx_die(HX_EXIT_USAGE, "replay: -m/--model is required");
    if (!o->transcript_path) hx_die(HX_EXIT_USAGE, "replay: -t/--transcript is required");
    if (!o->db_path) hx_die(HX_EXIT_USAGE, "replay: --db is required");
    unsigned quirks = 0;
    if (hx_quirks_parse(o->policy, o->quirks, &quirks, err, sizeof err) != ENG_OK) hx_die(HX_EXIT_USAGE, "%s", err);

    int rc = eng_model_load(o->model_path, &o->num, &x.m, err, sizeof err);
    if (rc != ENG_OK) { code = rc == ENG_ERR_NOMEM ? HX_EXIT_INTERNAL : HX_EXIT_USAGE; goto fail; }
    const eng_tokenizer *tok = eng_model_tokenizer(x.m);
    if (!tok) { snprintf(err, sizeof err, "%s: model has no vocabulary (tokenizer.ggml.*)", o->model_path); code = HX_EXIT_USAGE; goto fail; }
    x.V = eng_model_get_info(x.m)->n_vocab;
    x.n_rows = o->decode_n > 1 ? o->decode_n : 1;

    int64_t n_skipped_bad = 0;
    rc = hx_transcript_read(o->transcript_path, o->skip_bad, &t, &n_skipped_bad, err, sizeof err);
    if (rc != ENG_OK) { code = rc == ENG_ERR_NOMEM ? HX_EXIT_INTERNAL : HX_EXIT_USAGE; goto fail; }
    if (n_skipped_bad && !o->quiet) fprintf(stderr, "kvreplay: skipped %lld bad lines\n", (long long)n_skipped_bad);
    int32_t n_req = t.n;
    if (o->limit > 0 && o->limit < n_req) n_req = o->limit;
    if (n_req == 0) {  /* a run of nothing would "pass" every check */
        snprintf(err, sizeof err, "%s: no requests to replay (%s)", o->transcript_path,
                 n_skipped_bad ? "every line was bad and skipped" : "the transcript is empty");
        code = HX_EXIT_USAGE;
        goto fail;
    }
    if (o->fault && o->fault_request >= n_req) {
        snprintf(err, sizeof err, "--fault-request %d: the replay has %d requests (0-based: 0 to %d), so the fault "
                 "would never be planted", o->fault_request, n_req, n_req - 1);
        code = HX_EXIT_USAGE;
        goto fail;
    }
    if (o->fault && !strcmp(o->fault, "ulp-flip") && o->fault_index >= x.V) {
        snprintf(err, sizeof err, "--fault-index %d: the vocabulary has %d logits (0 to %d), so the fault would never "
                 "be planted", o->fault_index, x.V, x.V - 1);
        code = HX_EXIT_USAGE;
        goto fail;
    }

    rc = hx_prepare_ctx_new(tok, o->template_name, eng_model_get_info(x.m)->chat_template, o->normalize, &pc,
                            err, sizeof err);
    if (rc != ENG_OK) { code = HX_EXIT_USAGE; goto fail; }
    hx_prepare_ctx_set_source(pc, o->transcript_path);
    prep = calloc((size_t)(n_req > 0 ? n_req : 1), sizeof *prep);
    if (!prep) { code = HX_EXIT_INTERNAL; snprintf(err, sizeof err, "out of memory"); goto fail; }
    int32_t n_ctx = o->n_ctx;
    for (int32_t i = 0; i < n_req; i++) {
        if ((rc = hx_prepare(pc, &t.reqs[i], &prep[i], err, sizeof err)) != ENG_OK) {
            code = rc == ENG_ERR_NOMEM ? HX_EXIT_INTERNAL : HX_EXIT_USAGE;
            goto fail;
        }
        int32_t need = prep[i].n + prep[i].n_resp + x.n_rows + 1;
        if (o->n_ctx == 0 && need > n_ctx) n_ctx = need;
        if (o->n_ctx > 0 && need > o->n_ctx) {
            snprintf(err, sizeof err, "%s:%lld: request needs %d positions, --n-ctx is %d", o->transcript_path,
                     (long long)t.reqs[i].line, need, o->n_ctx);
            code = HX_EXIT_USAGE;
            goto fail;
        }
    }
    if (n_ctx < 1) n_ctx = 1;

    hx_policy_config cfg = {0};
    cfg.model = x.m;
    cfg.pp = o->pp;
    cfg.cap_prompt = o->cap_prompt;
    cfg.n_ctx = n_ctx;
    cfg.quirks = quirks;
    cfg.resume = o->resume;
    rc = hx_policy_create(o->policy, &cfg, &o->policy_args, &x.pol, err, sizeof err);
    if (rc != ENG_OK) { code = rc == ENG_ERR_NOMEM ? HX_EXIT_INTERNAL : HX_EXIT_USAGE; goto fail; }
    x.cold_seq = eng_seq_new(x.m, n_ctx);
    x.reuse_logits = calloc((size_t)x.n_rows * (size_t)x.V, sizeof(float));
    x.rep_logits = calloc((size_t)x.V, sizeof(float));
    if (!x.cold_seq || !x.reuse_logits || !x.rep_logits || hx_cold_result_alloc(&x.scratch, x.n_rows, x.V) != ENG_OK) {
        snprintf(err, sizeof err, "out of memory for %d positions", n_ctx);
        code = HX_EXIT_INTERNAL;
        goto fail;
    }

    if ((rc = hx_store_open(o->db_path, &x.store, err, sizeof err)) != ENG_OK) {
        code = rc == ENG_ERR_FORMAT || rc == ENG_ERR_UNSUPPORTED || rc == ENG_ERR_ARG ? HX_EXIT_USAGE
                                                                                       : HX_EXIT_INTERNAL;
        goto fail;
    }
    /* The calibration: measured now; the modeled TTFT is priced at it, or at
     * the reference file's figures for this configuration. */
    hx_calibration measured;
    if ((rc = hx_calibrate_measure(x.m, &o->pp, 1024, &measured)) != ENG_OK) {
        snprintf(err, sizeof err, "calibration: %s", eng_status_str(rc));
        code = HX_EXIT_INTERNAL;
        goto fail;
    }
    x.price = measured;
    char source[600] = "measured";
    if (o->calibration) {
        bool added = false;
        if ((rc = hx_calibration_reference(o->calibration, x.m, &o->pp, &measured, &x.price, &added, err,
                                           sizeof err)) != ENG_OK) {
            code = rc == ENG_ERR_FORMAT ? HX_EXIT_USAGE : HX_EXIT_INTERNAL;
            goto fail;
        }
        snprintf(source, sizeof source, "reference %s", o->calibration);
        if (added && !o->quiet)
            fprintf(stderr, "kvreplay: %s: no calibration for this model and configuration yet: measured "
                    "(%.4g GFLOP/s, restore %.4g GB/s) and added\n", o->calibration, measured.gflops,
                    measured.restore_gbs);
    }
    hx_run_meta meta;
    char extra[256];
    fill_meta(o, x.pol, x.m, hx_prepare_template_name(pc), hx_prepare_normalize_names(pc), quirks, n_ctx, n_req, &meta, extra, sizeof extra);
    meta.n_repeat = o->repeat;
    meta.calib_gflops = measured.gflops;
    meta.calib_restore_gbs = measured.restore_gbs;
    meta.price_gflops = x.price.gflops;
    meta.price_restore_gbs = x.price.restore_gbs;
    meta.price_source = source;
    bool resumed = false;
    if (o->resume && (rc = already_done(x.store, &meta, sum, err, sizeof err)) != ENG_ERR_NOT_FOUND) {
        if (rc != ENG_OK) { code = HX_EXIT_INTERNAL; goto fail; }
        if (!o->quiet)
            fprintf(stderr, "kvreplay: run %lld of this configuration is complete: nothing to resume -> %s\n",
                    (long long)sum->run_id, o->db_path);
        goto out;
    }
    if ((rc = hx_store_begin_or_resume(x.store, &meta, o->resume, &x.run_id, &done, &resumed, err, sizeof err))) {
        code = rc == ENG_ERR_UNSUPPORTED ? HX_EXIT_USAGE : HX_EXIT_INTERNAL;
        goto fail;
    }
    if (resumed) {  /* a resumed run keeps the price it began with */
        double g, b;
        if (hx_store_run_price(x.store, x.run_id, &g, &b, err, sizeof err) != ENG_OK) {
            code = HX_EXIT_INTERNAL;
            goto fail;
        }
        if (!isnan(g) && !isnan(b)) {
            x.price.gflops = g;
            x.price.restore_gbs = b;
        }
    }
    sum->run_id = x.run_id;

    for (int32_t i = 0; i < n_req; i++) {
        const hx_request *r = &t.reqs[i];
        progress(i, n_req, r, t_start);
        if (hx_done_set_has(done, r->session, r->turn)) {  /* resume: rebuild the cache only */
            hx_acquire acq;
            hx_release rel;
            reuse_times tm;
            if ((rc = run_reused(&x, &prep[i], false, i, &acq, &rel, &tm, NULL, err, sizeof err)) != ENG_OK) {
                snprintf(err, sizeof err, "resume warm-up: %s", eng_status_str(rc));
                code = HX_EXIT_INTERNAL;
                goto fail;
            }
            sum->n_skipped_done++;
            continue;
        }
        if ((rc = replay_one(&x, i, r, &prep[i], err, sizeof err)) != ENG_OK) {
            if (rc == ENG_ERR_MISMATCH) {  /* a --repeat repetition gave other bits */
                char e2[1024];
                snprintf(e2, sizeof e2, "%s: session %s turn %d: %s", o->transcript_path, r->session, r->turn, err);
                snprintf(err, sizeof err, "%s", e2);
            }
            code = rc == ENG_ERR_ARG ? HX_EXIT_USAGE : HX_EXIT_INTERNAL;
            goto fail;
        }
    }
    if (o->fault && !x.fault_planted) {  /* e.g. its request was already stored by an earlier run (--resume) */
        snprintf(err, sizeof err, "--inject-fault %s: request %d was not replayed by this run (already stored?), so "
                 "the fault was never planted", o->fault, o->fault_request);
        code = HX_EXIT_USAGE;
        goto fail;
    }
    if ((rc = hx_store_finish_run(x.store, x.run_id, HX_RUN_DONE, err, sizeof err)) != ENG_OK) {
        code = HX_EXIT_INTERNAL;
        goto fail;
    }
    sum->wall_s = eng_now_s() - t_start;
    sum->cold_saved_ms = hx_coldcache_get_stats(cold).saved_ms;
    if (!o->quiet)
        fprintf(stderr, "kvreplay: run %lld: %d requests%s, reuse %.1f%% of prompt tokens, %d diverged, %d forked "
                "(%.1fs, engine %.1f%%) -> %s\n",
                (long long)x.run_id, sum->n_requests, resumed ? " (resumed)" : "",
                sum->n_prompt ? 100.0 * (double)sum->n_reused / (double)sum->n_prompt : 0.0, sum->n_diverged,
                sum->n_forked, sum->wall_s, sum->wall_s > 0 ? 100.0 * sum->engine_s / sum->wall_s : 0.0,
                o->db_path);
    if (sum->n_store_failed || sum->n_quarantined) {  /* said even when quiet: the cache did not work as asked */
        fprintf(stderr, "kvreplay: warning: run %lld (%s):", (long long)x.run_id, o->policy);
        if (sum->n_store_failed)
            fprintf(stderr, " %lld checkpoint%s lost (not stored)%s", (long long)sum->n_store_failed,
                    sum->n_store_failed == 1 ? "" : "s", sum->n_quarantined ? "," : "");
        if (sum->n_quarantined)
            fprintf(stderr, " %lld stored entr%s set aside as corrupt (%lld fallback%s to a shorter one)",
                    (long long)sum->n_quarantined, sum->n_quarantined == 1 ? "y" : "ies", (long long)sum->n_fallbacks,
                    sum->n_fallbacks == 1 ? "" : "s");
        fprintf(stderr, "; per request in requests.extra\n");
    }
    goto out;
fail:
    fprintf(stderr, "kvreplay: %s\n", err[0] ? err : "replay failed");
    if (x.store && x.run_id > 0) hx_store_finish_run(x.store, x.run_id, HX_RUN_FAILED, NULL, 0);
out:
    hx_done_set_free(done);
    hx_store_close(x.store);
    hx_cold_result_free(&x.scratch);
    free(x.sbuf.p);
    free(x.reuse_logits);
    free(x.rep_logits);
    eng_seq_free(x.cold_seq);
    hx_policy_destroy(x.pol);
    for (int32_t i = 0; prep && i < n_req; i++) hx_prepared_free(&prep[i]);
    free(prep);
    hx_prepare_ctx_free(pc);
    hx_transcript_free(&t);
    eng_model_free(x.m);
    return code;
}
