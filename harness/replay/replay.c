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

#include "cli.h"
#include "policy.h"
#include "prepare.h"
#include "session.h"
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
    if (strcmp(v, "ulp-flip") && strcmp(v, "kv-row") && strcmp(v, "repeat-flip") && strcmp(v, "report-cached"))
        hx_die(HX_EXIT_USAGE, "%s: expected ulp-flip, kv-row, repeat-flip or report-cached, got '%s'", flag, v);
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
     "reuse to corrupt, a request already stored by --resume); kvreplay serve also\n"
     "takes report-cached (every answer that reused tokens reports one more: a\n"
     "planted fault for kvreplay probe)", HX_OPT_CUSTOM, OPT(fault), 0, 0, parse_fault},
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

    if (!o->model_path) hx_die(HX_EXIT_USAGE, "replay: -m/--model is required");
    if (!o->transcript_path) hx_die(HX_EXIT_USAGE, "replay: -t/--transcript is required");
    if (!o->db_path) hx_die(HX_EXIT_USAGE, "replay: --db is required");
    unsigned quirks = 0;
    if (hx_quirks_parse(o->policy, o->quirks, &quirks, err, sizeof err) != ENG_OK) hx_die(HX_EXIT_USAGE, "%s", err);

    int rc = hx_session_open(o, sum, &x, err, sizeof err);
    if (rc != ENG_OK) { code = rc == ENG_ERR_NOMEM ? HX_EXIT_INTERNAL : HX_EXIT_USAGE; goto fail; }
    const int32_t V = eng_model_get_info(hx_session_model(x))->n_vocab;
    const int32_t n_rows = o->decode_n > 1 ? o->decode_n : 1;

    int64_t n_skipped_bad = 0;
    rc = hx_transcript_read(o->transcript_path, o->skip_bad, &t, &n_skipped_bad, err, sizeof err);
    if (rc != ENG_OK) { code = rc == ENG_ERR_NOMEM ? HX_EXIT_INTERNAL : HX_EXIT_USAGE; goto fail; }
    if (n_skipped_bad && !o->quiet) fprintf(stderr, "kvreplay: skipped %lld bad lines\n", (long long)n_skipped_bad);
    n_req = t.n;
    if (o->limit > 0 && o->limit < n_req) n_req = o->limit;
    if (n_req == 0) {  /* a run of nothing would "pass" every check */
        snprintf(err, sizeof err, "%s: no requests to replay (%s)", o->transcript_path,
                 n_skipped_bad ? "every line was bad and skipped" : "the transcript is empty");
        code = HX_EXIT_USAGE;
        goto fail;
    }
    if (o->fault && !strcmp(o->fault, "report-cached")) {  /* nothing of replay's own reports it */
        snprintf(err, sizeof err, "--inject-fault report-cached is a fault of kvreplay serve's answers (for kvreplay "
                 "probe to catch); replay and check compare what they computed, not what a server said");
        code = HX_EXIT_USAGE;
        goto fail;
    }
    if (o->fault && o->fault_request >= n_req) {
        snprintf(err, sizeof err, "--fault-request %d: the replay has %d requests (0-based: 0 to %d), so the fault "
                 "would never be planted", o->fault_request, n_req, n_req - 1);
        code = HX_EXIT_USAGE;
        goto fail;
    }
    if (o->fault && !strcmp(o->fault, "ulp-flip") && o->fault_index >= V) {
        snprintf(err, sizeof err, "--fault-index %d: the vocabulary has %d logits (0 to %d), so the fault would never "
                 "be planted", o->fault_index, V, V - 1);
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

    if ((rc = hx_session_start(x, n_ctx, cold, err, sizeof err)) != ENG_OK) {
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
    char extra[256], source[600];
    hx_session_fill_meta(x, n_ctx, n_req, &meta, extra, sizeof extra);
    if ((rc = hx_session_calibrate(x, &meta, source, sizeof source, err, sizeof err)) != ENG_OK) {
        code = rc == ENG_ERR_FORMAT ? HX_EXIT_USAGE : HX_EXIT_INTERNAL;
        goto fail;
    }
    bool resumed = false;
    if (o->resume && (rc = already_done(store, &meta, sum, err, sizeof err)) != ENG_ERR_NOT_FOUND) {
        if (rc != ENG_OK) { code = HX_EXIT_INTERNAL; goto fail; }
        if (!o->quiet)
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
    hx_session_set_store(x, store, run_id);
    sum->run_id = run_id;

    for (int32_t i = 0; i < n_req; i++) {
        hx_request *r = &t.reqs[i];
        progress(i, n_req, r, t_start);
        hx_turn turn = {.idx = i, .req = r, .p = &prep[i], .compare = true};
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
    if (o->fault && !hx_session_fault_planted(x)) {  /* e.g. its request was already stored by an earlier run (--resume) */
        snprintf(err, sizeof err, "--inject-fault %s: request %d was not replayed by this run (already stored?), so "
                 "the fault was never planted", o->fault, o->fault_request);
        code = HX_EXIT_USAGE;
        goto fail;
    }
    if ((rc = hx_store_finish_run(store, run_id, HX_RUN_DONE, err, sizeof err)) != ENG_OK) {
        code = HX_EXIT_INTERNAL;
        goto fail;
    }
    sum->wall_s = eng_now_s() - t_start;
    sum->cold_saved_ms = hx_coldcache_get_stats(cold).saved_ms;
    if (!o->quiet)
        fprintf(stderr, "kvreplay: run %lld: %d requests%s, reuse %.1f%% of prompt tokens, %d diverged, %d forked "
                "(%.1fs, engine %.1f%%) -> %s\n",
                (long long)run_id, sum->n_requests, resumed ? " (resumed)" : "",
                sum->n_prompt ? 100.0 * (double)sum->n_reused / (double)sum->n_prompt : 0.0, sum->n_diverged,
                sum->n_forked, sum->wall_s, sum->wall_s > 0 ? 100.0 * sum->engine_s / sum->wall_s : 0.0,
                o->db_path);
    if (sum->n_store_failed || sum->n_quarantined) {  /* said even when quiet: the cache did not work as asked */
        fprintf(stderr, "kvreplay: warning: run %lld (%s):", (long long)run_id, o->policy);
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
