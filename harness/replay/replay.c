/*
 * harness/replay/replay.c: the replay loop (see replay.h for the steps): its
 * options, the transcript read and prepared, the run begun or resumed in
 * the results store, then one session turn per request (session.h: the
 * per-request core that `serve` shares).
 *
 * Invariants:
 * - every request is compared with its cold run (session.c says how);
 * - with --resume, requests already stored are replayed through the policy
 *   only (no cold run, no comparison, nothing written) so the cache holds
 *   exactly what it would have held without the interruption.
 */
#include "replay.h"

#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "errors.h"
#include "options.h"
#include "policy.h"
#include "prepare.h"
#include "session.h"
#include "status.h"
#include "store.h"
#include "transcript.h"
#include "util.h"

// ----------------------------------------------------------------------------
// Options: the session's, and what a replay adds

void hx_replay_opts_default(hx_replay_opts *o) {
    memset(o, 0, sizeof *o);
    hx_session_params_default(&o->sp);
    o->sweep_value = NAN;
    o->seed = -1;
    o->unit = o->n_units = o->shard = o->n_shards = -1;
}

#define OPT(field) offsetof(hx_replay_opts, field)

static const hx_option k_inputs[] = {
    {"--transcript", "-t", "FILE", "transcript JSONL, v1 or v2 (required; see kvreplay import / synth-transcript)",
     HX_OPT_STRING, OPT(transcript_path), 0, 0, NULL},
    {"--db", NULL, "FILE.sqlite", "results database (created if absent)", HX_OPT_STRING, OPT(db_path), 0, 0, NULL},
    {0},
};
static const hx_option k_control[] = {
    {"--n-ctx", NULL, "N", "positions per sequence (default: sized from the transcript)", HX_OPT_INT, OPT(n_ctx), 1,
     1 << 24, NULL},
    {"--resume", NULL, NULL, "complete an interrupted run of the same configuration", HX_OPT_FLAG, OPT(resume), 0, 0,
     NULL},
    {"--skip-bad", NULL, NULL, "skip and count bad transcript lines instead of failing", HX_OPT_FLAG, OPT(skip_bad), 0,
     0, NULL},
    {"--limit", NULL, "N", "replay at most the first N requests (default 0: all of them)", HX_OPT_INT, OPT(limit),
     0, 1 << 30, NULL},
    {"--seed", NULL, "S", "record the seed that produced synthetic inputs", HX_OPT_INT64, OPT(seed), 0, INT64_MAX,
     NULL},
    {0},
};

int hx_replay_opts_take(hx_replay_opts *o, int argc, char **argv, int *i, char *err, size_t errlen) {
    int r = hx_options_take(k_inputs, o, argc, argv, i, err, errlen);
    if (!r) r = hx_options_take(k_control, o, argc, argv, i, err, errlen);
    if (!r) r = hx_session_params_take(&o->sp, argc, argv, i, err, errlen);
    return r;
}

void hx_replay_opts_help(FILE *f) {
    hx_options_help(k_inputs, NULL, f);
    hx_session_params_help_policy(f);
    hx_session_params_help_engine(f);
    hx_options_help(k_control, NULL, f);
    hx_session_params_help_faults(f);
}

// ----------------------------------------------------------------------------
// The replay: the transcript's requests, one session turn each (session.h)

static void progress(int32_t i, int32_t n, const hx_request *r, double t0) {
    if (!eng_stderr_is_tty()) return;
    fprintf(stderr, "\r[%d/%d] %s turn %d  %.1fs   ", i + 1, n, r->session, r->turn, eng_now_s() - t0);
    if (i + 1 == n) fputc('\n', stderr);
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
    hx_done_set *done = NULL;
    hx_session *x = NULL;
    hx_store *store = NULL;
    int64_t run_id = 0;
    int32_t n_req = 0;
    memset(sum, 0, sizeof *sum);
    double t_start = eng_now_s();

    const hx_session_params *sp = &o->sp;
    int rc = hx_session_params_check(sp, err, sizeof err);
    if (rc == ENG_OK && !o->transcript_path) snprintf(err, sizeof err, "-t/--transcript is required"), rc = ENG_ERR_ARG;
    if (rc == ENG_OK && !o->db_path) snprintf(err, sizeof err, "--db is required"), rc = ENG_ERR_ARG;
    if (rc != ENG_OK) {
        char e2[1024];
        snprintf(e2, sizeof e2, "replay: %.1000s", err);
        snprintf(err, sizeof err, "%s", e2);
        code = HX_EXIT_USAGE;
        goto fail;
    }

    rc = hx_session_open(sp, &sum->t, &x, err, sizeof err);
    if (rc != ENG_OK) { code = rc == ENG_ERR_NOMEM ? HX_EXIT_INTERNAL : HX_EXIT_USAGE; goto fail; }
    const int32_t V = eng_model_get_info(hx_session_model(x))->n_vocab;
    const int32_t n_rows = sp->decode_n > 1 ? sp->decode_n : 1;

    int64_t n_skipped_bad = 0;
    rc = hx_transcript_read(o->transcript_path, o->skip_bad, &t, &n_skipped_bad, err, sizeof err);
    if (rc != ENG_OK) { code = rc == ENG_ERR_NOMEM ? HX_EXIT_INTERNAL : HX_EXIT_USAGE; goto fail; }
    if (n_skipped_bad && !sp->quiet) fprintf(stderr, "kvreplay: skipped %lld bad lines\n", (long long)n_skipped_bad);
    n_req = t.n;
    if (o->limit > 0 && o->limit < n_req) n_req = o->limit;
    if (n_req == 0) {  /* a run of nothing would "pass" every check */
        snprintf(err, sizeof err, "%s: no requests to replay (%s)", o->transcript_path,
                 n_skipped_bad ? "every line was bad and skipped" : "the transcript is empty");
        code = HX_EXIT_USAGE;
        goto fail;
    }
    if (sp->fault && !strcmp(sp->fault, "report-cached")) {  /* nothing of replay's own reports it */
        snprintf(err, sizeof err, "--inject-fault report-cached is a fault of kvreplay serve's answers (for kvreplay "
                 "probe to catch); replay and check compare what they computed, not what a server said");
        code = HX_EXIT_USAGE;
        goto fail;
    }
    if (sp->fault && !strcmp(sp->fault, "batch-split-k") && sp->batch_check < 0) {
        snprintf(err, sizeof err, "--inject-fault batch-split-k plants its fault in --batch-check's steps: give "
                 "--batch-check K too");
        code = HX_EXIT_USAGE;
        goto fail;
    }
    if (sp->fault && sp->fault_request >= n_req) {
        snprintf(err, sizeof err, "--fault-request %d: the replay has %d requests (0-based: 0 to %d), so the fault "
                 "would never be planted", sp->fault_request, n_req, n_req - 1);
        code = HX_EXIT_USAGE;
        goto fail;
    }
    if (sp->fault && !strcmp(sp->fault, "ulp-flip") && sp->fault_index >= V) {
        snprintf(err, sizeof err, "--fault-index %d: the vocabulary has %d logits (0 to %d), so the fault would never "
                 "be planted", sp->fault_index, V, V - 1);
        code = HX_EXIT_USAGE;
        goto fail;
    }

    hx_prepare_ctx *pc = hx_session_prepare(x);
    hx_prepare_ctx_set_source(pc, o->transcript_path);
    prep = calloc((size_t)(n_req > 0 ? n_req : 1), sizeof *prep);
    if (!prep) { code = HX_EXIT_INTERNAL; snprintf(err, sizeof err, "out of memory"); goto fail; }
    int32_t n_ctx = o->n_ctx;
    for (int32_t i = 0; i < n_req; i++) {
        if ((rc = hx_prepare(pc, &t.reqs[i], &prep[i], err, sizeof err)) != ENG_OK) {
            code = rc == ENG_ERR_NOMEM ? HX_EXIT_INTERNAL : HX_EXIT_USAGE;
            goto fail;
        }
        int32_t need = prep[i].n + prep[i].n_resp + n_rows + 1;
        if (o->n_ctx == 0 && need > n_ctx) n_ctx = need;
        if (o->n_ctx > 0 && need > o->n_ctx) {
            snprintf(err, sizeof err, "%s:%lld: request needs %d positions, --n-ctx is %d", o->transcript_path,
                     (long long)t.reqs[i].line, need, o->n_ctx);
            code = HX_EXIT_USAGE;
            goto fail;
        }
    }
    if (n_ctx < 1) n_ctx = 1;

    if ((rc = hx_session_start(x, n_ctx, cold, o->resume, 1, err, sizeof err)) != ENG_OK) {
        code = rc == ENG_ERR_NOMEM ? HX_EXIT_INTERNAL : HX_EXIT_USAGE;
        goto fail;
    }
    if ((rc = hx_store_open(o->db_path, &store, err, sizeof err)) != ENG_OK) {
        code = rc == ENG_ERR_FORMAT || rc == ENG_ERR_UNSUPPORTED || rc == ENG_ERR_ARG ? HX_EXIT_USAGE
                                                                                       : HX_EXIT_INTERNAL;
        goto fail;
    }
    /* The calibration: measured now; the modeled TTFT is priced at it, or at
     * the reference file's figures for this configuration. */
    hx_run_meta meta;
    char extra[256], more[64], source[600];
    snprintf(more, sizeof more, "\"limit\":%d,\"n_resp_tokens\":\"teacher-forced\"", o->limit);
    hx_session_fill_meta(x, n_ctx, o->n_ctx, n_req, more, &meta, extra, sizeof extra);
    meta.exp.experiment = o->experiment;
    meta.exp.variant = o->variant;
    meta.exp.sweep_name = o->sweep_name;
    meta.exp.sweep_value = o->sweep_value;
    meta.transcript = o->transcript_path;
    meta.seed = o->seed;
    meta.exp.spec_sha256 = o->spec_sha256;
    meta.exp.scale = o->scale;
    meta.exp.unit = o->unit;
    meta.exp.n_units = o->n_units;
    meta.exp.shard = o->shard;
    meta.exp.n_shards = o->n_shards;
    meta.exp.plan_sha256 = o->plan_sha256;
    if ((rc = hx_session_calibrate(x, &meta, source, sizeof source, err, sizeof err)) != ENG_OK) {
        code = rc == ENG_ERR_FORMAT ? HX_EXIT_USAGE : HX_EXIT_INTERNAL;
        goto fail;
    }
    bool resumed = false;
    if (o->resume && (rc = already_done(store, &meta, sum, err, sizeof err)) != ENG_ERR_NOT_FOUND) {
        if (rc != ENG_OK) { code = HX_EXIT_INTERNAL; goto fail; }
        if (!sp->quiet)
            fprintf(stderr, "kvreplay: run %lld of this configuration is complete: nothing to resume -> %s\n",
                    (long long)sum->run_id, o->db_path);
        goto out;
    }
    if ((rc = hx_store_begin_or_resume(store, &meta, o->resume, &run_id, &done, &resumed, err, sizeof err))) {
        code = rc == ENG_ERR_UNSUPPORTED ? HX_EXIT_USAGE : HX_EXIT_INTERNAL;
        goto fail;
    }
    if (resumed) {  /* a resumed run keeps the price it began with */
        double g, b;
        if (hx_store_run_price(store, run_id, &g, &b, err, sizeof err) != ENG_OK) {
            code = HX_EXIT_INTERNAL;
            goto fail;
        }
        if (!isnan(g) && !isnan(b)) hx_session_set_price(x, g, b);
    }
    hx_session_set_store(x, store, run_id, o->transcript_path);
    sum->run_id = run_id;

    for (int32_t i = 0; i < n_req; i++) {
        hx_request *r = &t.reqs[i];
        progress(i, n_req, r, t_start);
        hx_turn turn = {.idx = i, .req = r, .p = &prep[i]};
        hx_request_served_hint(r, &turn.hint.id_slot, &turn.hint.no_reuse);  /* what a served request asked */
        hx_turn_result res;
        if (hx_done_set_has(done, r->session, r->turn)) {  /* resume: rebuild the cache only */
            turn.warm_only = true;
            if ((rc = hx_session_turn(x, &turn, &res, err, sizeof err)) != ENG_OK) {
                char e2[1024];
                snprintf(e2, sizeof e2, "resume warm-up: %.990s", err);
                snprintf(err, sizeof err, "%s", e2);
                code = HX_EXIT_INTERNAL;
                goto fail;
            }
            sum->n_skipped_done++;
            continue;
        }
        if ((rc = hx_session_turn(x, &turn, &res, err, sizeof err)) != ENG_OK) {
            if (rc == ENG_ERR_MISMATCH) {  /* a --repeat repetition gave other bits */
                char e2[1024];
                snprintf(e2, sizeof e2, "%s: session %s turn %d: %.*s", o->transcript_path, r->session, r->turn,
                         (int)(sizeof e2 / 2), err);
                snprintf(err, sizeof err, "%s", e2);
            }
            code = rc == ENG_ERR_ARG ? HX_EXIT_USAGE : HX_EXIT_INTERNAL;
            goto fail;
        }
    }
    if (sp->fault && !hx_session_fault_planted(x)) {  /* e.g. its request was already stored by an earlier run (--resume) */
        snprintf(err, sizeof err, "--inject-fault %s: request %d was not replayed by this run (already stored?), so "
                 "the fault was never planted", sp->fault, sp->fault_request);
        code = HX_EXIT_USAGE;
        goto fail;
    }
    if ((rc = hx_store_finish_run(store, run_id, HX_RUN_DONE, err, sizeof err)) != ENG_OK) {
        code = HX_EXIT_INTERNAL;
        goto fail;
    }
    sum->wall_s = eng_now_s() - t_start;
    sum->cold_saved_ms = hx_coldcache_get_stats(cold).saved_ms;
    if (!sp->quiet)
        fprintf(stderr, "kvreplay: run %lld: %d requests%s, reuse %.1f%% of prompt tokens, %d diverged, %d forked "
                "(%.1fs, engine %.1f%%) -> %s\n",
                (long long)run_id, sum->t.n_requests, resumed ? " (resumed)" : "",
                sum->t.n_prompt ? 100.0 * (double)sum->t.n_reused / (double)sum->t.n_prompt : 0.0, sum->t.n_diverged,
                sum->t.n_forked, sum->wall_s, sum->wall_s > 0 ? 100.0 * sum->t.engine_s / sum->wall_s : 0.0,
                o->db_path);
    if (sum->t.n_store_failed || sum->t.n_quarantined) {  /* said even when quiet: the cache did not work as asked */
        fprintf(stderr, "kvreplay: warning: run %lld (%s):", (long long)run_id, sp->policy);
        if (sum->t.n_store_failed)
            fprintf(stderr, " %lld checkpoint%s lost (not stored)%s", (long long)sum->t.n_store_failed,
                    sum->t.n_store_failed == 1 ? "" : "s", sum->t.n_quarantined ? "," : "");
        if (sum->t.n_quarantined)
            fprintf(stderr, " %lld stored entr%s set aside as corrupt (%lld fallback%s to a shorter one)",
                    (long long)sum->t.n_quarantined, sum->t.n_quarantined == 1 ? "y" : "ies", (long long)sum->t.n_fallbacks,
                    sum->t.n_fallbacks == 1 ? "" : "s");
        fprintf(stderr, "; per request in requests.extra\n");
    }
    goto out;
fail:
    fprintf(stderr, "kvreplay: %s\n", err[0] ? err : "replay failed");
    if (store && run_id > 0) hx_store_finish_run(store, run_id, HX_RUN_FAILED, NULL, 0);
out:
    hx_done_set_free(done);
    hx_store_close(store);
    hx_session_close(x);
    for (int32_t i = 0; prep && i < n_req; i++) hx_prepared_free(&prep[i]);
    free(prep);
    hx_transcript_free(&t);
    return code;
}
