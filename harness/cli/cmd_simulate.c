/*
 * harness/cli/cmd_simulate.c: `kvreplay simulate -t TRACE --policy P ...`: a
 * production trace through a cache policy in token-only mode, on a modeled
 * cluster and clock (traces/sim.h), its figures on stdout (--json: one
 * object), each request and window in SQLite (--db), and with
 * --verify-sample N, N of its hits run through the engine cold and reused and
 * compared bit for bit (traces/verify.h). docs/traces.md is the manual.
 *
 * Exit: 0; 1 when a verified request's logits differ from cold; 2 for a bad
 * trace (FILE:LINE: FIELD), option or model; 3 for an internal or I/O error.
 * Nothing is written to the database unless the run completes.
 */
#include "cli.h"

#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include "policy.h"
#include "sha256.h"
#include "sim.h"
#include "sim_store.h"
#include "status.h"
#include "store.h"
#include "timemodel.h"
#include "trace.h"
#include "util.h"
#include "verify.h"

static const char k_usage[] =
    "usage: kvreplay simulate -t TRACE --policy P [--capacity TOKENS] [--evict E] [OPTIONS] [--json]\n\n"
    "Runs a production trace (Mooncake or Bailian JSONL: block ids, lengths, arrival\n"
    "times) through a cache policy in token-only mode: the policy's own structures\n"
    "over block ids, with a capacity, an eviction order, a modeled cluster and clock.\n"
    "Prints hit rates by tokens and by blocks, evictions, what the cache holds, TTFT,\n"
    "queueing and prefill times; --db writes the run (one row per request and per\n"
    "window); --verify-sample N checks N hits bit for bit on a model (-m).\n"
    "docs/traces.md describes the formats, the model and the profiles.\n\n"
    "options:\n";

typedef struct sim_args {
    const char  *trace, *format, *policy, *evict, *route, *pool, *profile, *model, *calibration, *db;
    const char  *capacity, *capacity_bytes, *experiment, *variant, *sweep_name, *materialize;
    const char  *plan_sha, *spec_sha, *scale;   /* set by kvreplay experiment */
    int64_t      unit, n_units, shard, n_shards;
    hx_str_list  quirks;
    int32_t      block_tokens, instances, chunk, ubatch;
    int64_t      repeat, limit, request_rows, verify_n, verify_seed, verify_max_tokens, block_size;
    double       speedup, window, route_weight, gflops, restore_gbs, transfer_gbs, tpot_ms, sweep_value;
    eng_numerics num;
    eng_align    align;
    bool         json, quiet;
} sim_args;

#define OPT(field) offsetof(sim_args, field)
static const hx_option k_options[] = {
    {"--trace", "-t", "FILE", "the trace (required)", HX_OPT_STRING, OPT(trace), 0, 0, NULL},
    {"--format", NULL, "F", "mooncake, bailian or auto (default: told by the first record)", HX_OPT_STRING,
     OPT(format), 0, 0, NULL},
    {"--block-tokens", NULL, "B", "tokens per trace block (default: the format's, 512 or 16)", HX_OPT_INT,
     OPT(block_tokens), 1, 1 << 20, NULL},
    {"--repeat", NULL, "K", "K copies of the trace, time-shifted, ids remapped (default 1)", HX_OPT_INT64,
     OPT(repeat), 1, 1 << 20, NULL},
    {"--limit", NULL, "N", "the first N requests only", HX_OPT_INT64, OPT(limit), 1, (double)(1LL << 62), NULL},
    {"--policy", NULL, "P", "block-hash (default), radix, slot-lcp, disk-anchor or cold", HX_OPT_STRING, OPT(policy), 0, 0,
     NULL},
    {"--capacity", NULL, "TOKENS", "tokens each instance's cache holds, e.g. 3e6 or 3M (default: unbounded)",
     HX_OPT_STRING, OPT(capacity), 0, 0, NULL},
    {"--capacity-bytes", NULL, "BYTES", "the same in bytes at the profile's (or model's) bytes per token,\n"
     "e.g. 1T, 960GiB", HX_OPT_STRING, OPT(capacity_bytes), 0, 0, NULL},
    {"--block-size", NULL, "TOKENS", "the policy's block (page): a multiple of the trace's block (default: it)",
     HX_OPT_INT64, OPT(block_size), 1, 1 << 30, NULL},
    {"--evict", NULL, "E", "lru (default), lfu, fifo or s3fifo", HX_OPT_STRING, OPT(evict), 0, 0, NULL},
    {"--quirk", NULL, "Q", "a quirk of the policy (repeatable; `replay --help` lists them)", HX_OPT_STRINGS,
     OPT(quirks), 0, 0, NULL},
    {"--instances", NULL, "N", "instances (default 1)", HX_OPT_INT, OPT(instances), 1, 4096, NULL},
    {"--route", NULL, "R", "round-robin (default), least-loaded or cache-aware", HX_OPT_STRING, OPT(route), 0, 0,
     NULL},
    {"--route-weight", NULL, "W", "cache-aware: weight of the prefill estimate against the queue (default 1)",
     HX_OPT_DOUBLE, OPT(route_weight), 0, 1e6, NULL},
    {"--pool", NULL, "local|global", "one cache per instance (default) or one shared by all (N x --capacity)",
     HX_OPT_STRING, OPT(pool), 0, 0, NULL},
    {"--speedup", NULL, "X", "arrivals X times faster (default 1)", HX_OPT_DOUBLE, OPT(speedup), 1e-6, 1e9, NULL},
    {"--window", NULL, "S", "seconds of arrival time per sim_windows row (default 60)", HX_OPT_DOUBLE, OPT(window),
     1e-3, 1e9, NULL},
    {"--profile", NULL, "NAME", "the time model: llama3-70b-a800x8 (default), llama3-8b-h100", HX_OPT_STRING,
     OPT(profile), 0, 0, NULL},
    {"--model", "-m", "FILE", "a kvreplay model: its cost model and calibration price the time (unless\n"
     "--profile), and --verify-sample runs it", HX_OPT_STRING, OPT(model), 0, 0, NULL},
    {"--calibration", NULL, "FILE", "with -m: the reference calibration (default results/calibration.json)",
     HX_OPT_STRING, OPT(calibration), 0, 0, NULL},
    {"--gflops", NULL, "G", "override the time model's prefill GFLOP/s", HX_OPT_DOUBLE, OPT(gflops), 1e-9, 1e12,
     NULL},
    {"--restore-gbs", NULL, "G", "override the local restore GB/s", HX_OPT_DOUBLE, OPT(restore_gbs), 1e-9, 1e9, NULL},
    {"--transfer-gbs", NULL, "G", "override the global pool's transfer GB/s", HX_OPT_DOUBLE, OPT(transfer_gbs),
     1e-9, 1e9, NULL},
    {"--tpot-ms", NULL, "MS", "override the decode step", HX_OPT_DOUBLE, OPT(tpot_ms), 0, 1e9, NULL},
    {"--db", NULL, "FILE", "write the run to this results database", HX_OPT_STRING, OPT(db), 0, 0, NULL},
    {"--request-rows", NULL, "N", "keep the first N requests' rows (default: all)", HX_OPT_INT64, OPT(request_rows),
     0, (double)(1LL << 62), NULL},
    {"--experiment", NULL, "NAME", "runs.experiment (set by kvreplay experiment)", HX_OPT_STRING, OPT(experiment), 0,
     0, NULL},
    {"--variant", NULL, "NAME", "runs.variant", HX_OPT_STRING, OPT(variant), 0, 0, NULL},
    {"--sweep-name", NULL, "NAME", "runs.sweep_name", HX_OPT_STRING, OPT(sweep_name), 0, 0, NULL},
    {"--sweep-value", NULL, "X", "runs.sweep_value", HX_OPT_DOUBLE, OPT(sweep_value), -1e300, 1e300, NULL},
    {"--verify-sample", NULL, "N", "check N hits (seeded) cold and reused on -m's engine, memcmp", HX_OPT_INT64,
     OPT(verify_n), 0, 1 << 20, NULL},
    {"--verify-seed", NULL, "S", "the sample's seed (default 0)", HX_OPT_INT64, OPT(verify_seed), 0, (double)(1LL << 62), NULL},
    {"--verify-max-tokens", NULL, "N", "sample only requests of at most N tokens", HX_OPT_INT64,
     OPT(verify_max_tokens), 1, INT32_MAX, NULL},
    {"--materialize", NULL, "FILE", "write each request's tokens (materialized block ids) to FILE, one JSON\n"
     "line each ({\"index\", \"tokens\"}); needs -m for the vocabulary", HX_OPT_STRING, OPT(materialize), 0, 0, NULL},
    HX_OPTS_ENGINE(sim_args),
    {"--align", NULL, "chunk|none", "the verify runs' grid (default chunk)", HX_OPT_CUSTOM, OPT(align), 0, 0,
     hx_parse_align},
    {"--ubatch", NULL, "U", "chunk under --align none (default 512)", HX_OPT_INT, OPT(ubatch), 1, 1 << 20, NULL},
    {"--json", NULL, NULL, "one JSON object on stdout", HX_OPT_FLAG, OPT(json), 0, 0, NULL},
    {"--quiet", NULL, NULL, "print nothing (but --json's object and errors)", HX_OPT_FLAG, OPT(quiet), 0, 0, NULL},
    /* set by kvreplay experiment (cmd_experiment_sim.c): the run's place in the experiment's plan */
    {"--unit", NULL, "U", NULL, HX_OPT_INT64, OPT(unit), 0, INT32_MAX, NULL},
    {"--n-units", NULL, "N", NULL, HX_OPT_INT64, OPT(n_units), 0, INT32_MAX, NULL},
    {"--shard-index", NULL, "K", NULL, HX_OPT_INT64, OPT(shard), 1, 4096, NULL},
    {"--n-shards", NULL, "N", NULL, HX_OPT_INT64, OPT(n_shards), 1, 4096, NULL},
    {"--plan-sha256", NULL, "HEX", NULL, HX_OPT_STRING, OPT(plan_sha), 0, 0, NULL},
    {"--spec-sha256", NULL, "HEX", NULL, HX_OPT_STRING, OPT(spec_sha), 0, 0, NULL},
    {"--scale", NULL, "S", NULL, HX_OPT_STRING, OPT(scale), 0, 0, NULL},
    {0},
};

/* "3e6", "3M", "1.5G", "960GiB", "12KB": a count with a decimal (K, M, G, T)
 * or binary (Ki, Mi, Gi, Ti) suffix, an optional B. -1 when malformed. */
static double parse_amount(const char *s) {
    char *end = NULL;
    errno = 0;
    double v = strtod(s, &end);
    if (end == s || errno || !(v >= 0)) return -1;
    double mul = 1;
    const char *u = "KMGT";
    const char *p = *end ? strchr(u, *end) : NULL;
    if (p) {
        int k = (int)(p - u) + 1;
        end++;
        bool bin = *end == 'i';
        if (bin) end++;
        for (int i = 0; i < k; i++) mul *= bin ? 1024.0 : 1000.0;
    }
    if (*end == 'B') end++;
    return *end ? -1 : v * mul;
}

// ----------------------------------------------------------------------------
// What the run keeps: database rows, and per request what verify needs

typedef struct run_ctx {
    hx_sim_store *db;
    int64_t       rows_left;     /* -1: all */
    int           rc;
    char          err[512];
    /* verify */
    bool          keep;
    int64_t       n, cap;
    int32_t      *hit, *len;     /* hit blocks, input tokens */
    int64_t      *origin;
    FILE         *mat;
    int32_t       n_vocab, block_tokens;
    int32_t      *mat_buf;
    int64_t       mat_cap;
} run_ctx;

static void on_request(void *ud, const hx_sim_row *row) {
    run_ctx *c = ud;
    if (c->rc) return;
    if (c->db && c->rows_left != 0) {
        if (hx_sim_store_request(c->db, row, c->err, sizeof c->err) != ENG_OK) { c->rc = ENG_ERR_IO; return; }
        if (c->rows_left > 0) c->rows_left--;
    }
    if (c->keep) {
        if (c->n == c->cap) {
            int64_t cap = c->cap ? 2 * c->cap : 16384;
            int32_t *h = realloc(c->hit, sizeof *h * (size_t)cap), *l = h ? realloc(c->len, sizeof *l * (size_t)cap) : NULL;
            if (h) c->hit = h;
            if (l) c->len = l;
            int64_t *o = l ? realloc(c->origin, sizeof *o * (size_t)cap) : NULL;
            if (o) c->origin = o;
            if (!h || !l || !o) { c->rc = ENG_ERR_NOMEM; snprintf(c->err, sizeof c->err, "simulate: out of memory"); return; }
            c->cap = cap;
        }
        c->hit[c->n] = row->hit_blocks;
        c->len[c->n] = row->rec->input_length;
        c->origin[c->n] = row->origin;
        c->n++;
    }
    if (c->mat) {
        const hx_trace_rec *r = row->rec;
        if (r->input_length > c->mat_cap) {
            int32_t *b = realloc(c->mat_buf, sizeof *b * (size_t)r->input_length);
            if (!b) { c->rc = ENG_ERR_NOMEM; snprintf(c->err, sizeof c->err, "simulate: out of memory"); return; }
            c->mat_buf = b;
            c->mat_cap = r->input_length;
        }
        hx_materialize_prompt(r->ids, r->n_blocks, r->input_length, c->block_tokens, c->n_vocab, c->mat_buf);
        fprintf(c->mat, "{\"index\": %lld, \"tokens\": [", (long long)r->index);
        for (int32_t i = 0; i < r->input_length; i++) fprintf(c->mat, i ? ",%d" : "%d", c->mat_buf[i]);
        if (fputs("]}\n", c->mat) < 0) { c->rc = ENG_ERR_IO; snprintf(c->err, sizeof c->err, "--materialize: write failed"); }
    }
}

static void on_window(void *ud, const hx_sim_window *w) {
    run_ctx *c = ud;
    if (c->rc || !c->db) return;
    if (hx_sim_store_window(c->db, w, c->err, sizeof c->err) != ENG_OK) c->rc = ENG_ERR_IO;
}

static uint64_t splitmix(uint64_t *s) {
    uint64_t x = (*s += 0x9E3779B97F4A7C15ULL);
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ULL;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBULL;
    return x ^ (x >> 31);
}

static int cmp_i64(const void *a, const void *b) {
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return x < y ? -1 : x > y;
}

/* The reuse points of request i's chain (verify.h), ascending, into b (cap entries). */
static int32_t chain_bounds(const run_ctx *c, int64_t i, const eng_prefill_params *pp, int64_t *b, int32_t cap) {
    int32_t n = 0;
    int64_t limit = hx_verify_reuse_point((int64_t)c->hit[i] * c->block_tokens, c->len[i], pp);
    if (limit <= 0) return 0;
    b[n++] = limit;
    for (int64_t q = c->origin[i], steps = 0; q >= 0 && q < c->n && n < cap && steps < c->n; steps++) {
        int64_t h = hx_verify_reuse_point((int64_t)c->hit[q] * c->block_tokens, c->len[q], pp);
        if (h > 0 && h < limit) {
            b[n++] = h;
            limit = h;
        }
        if (h == 0) break;
        q = c->origin[q];
    }
    for (int32_t k = 0; k < n / 2; k++) {  /* ascending */
        int64_t t = b[k];
        b[k] = b[n - 1 - k];
        b[n - 1 - k] = t;
    }
    return n;
}

/* Checks n sampled hits; their results in the database and in arr (JSON). */
static int verify(const sim_args *a, const hx_trace_opts *to, run_ctx *c, const eng_model *m,
                  const eng_prefill_params *pp, int64_t *n_done, int64_t *n_same, json_t *arr, char *err,
                  size_t errlen) {
    *n_done = *n_same = 0;
    int64_t *cand = malloc(sizeof *cand * (size_t)(c->n ? c->n : 1)), n_cand = 0;
    if (!cand) return ENG_ERR_NOMEM;
    for (int64_t i = 0; i < c->n; i++)
        if (hx_verify_reuse_point((int64_t)c->hit[i] * c->block_tokens, c->len[i], pp) > 0 &&
            (!a->verify_max_tokens || c->len[i] <= a->verify_max_tokens))
            cand[n_cand++] = i;
    int64_t take = a->verify_n < n_cand ? a->verify_n : n_cand;
    uint64_t seed = (uint64_t)a->verify_seed;
    for (int64_t k = 0; k < take; k++) {  /* a partial Fisher-Yates shuffle */
        int64_t j = k + (int64_t)(splitmix(&seed) % (uint64_t)(n_cand - k));
        int64_t t = cand[k];
        cand[k] = cand[j];
        cand[j] = t;
    }
    qsort(cand, (size_t)take, sizeof *cand, cmp_i64);
    if (!a->quiet && eng_stderr_is_tty())
        fprintf(stderr, "kvreplay: verifying %lld of %lld hits\n", (long long)take, (long long)n_cand);
    hx_trace *t = NULL;
    int rc = hx_trace_open(a->trace, to, &t, err, errlen);
    hx_trace_rec r;
    int32_t *tok = NULL;
    int64_t cap_tok = 0, bounds[4096];
    for (int64_t k = 0; rc == ENG_OK && k < take;) {
        int nr = hx_trace_next(t, &r, err, errlen);
        if (nr <= 0) { rc = nr < 0 ? nr : ENG_ERR_FORMAT; if (!nr) eng_errf(err, errlen, "%s: shorter on the second pass", a->trace); break; }
        if (r.index != cand[k]) continue;
        k++;
        if (r.input_length > cap_tok) {
            int32_t *g = realloc(tok, sizeof *g * (size_t)r.input_length);
            if (!g) { rc = ENG_ERR_NOMEM; break; }
            tok = g;
            cap_tok = r.input_length;
        }
        hx_materialize_prompt(r.ids, r.n_blocks, r.input_length, c->block_tokens, c->n_vocab, tok);
        int32_t nb = chain_bounds(c, r.index, pp, bounds, 4096);
        hx_verify_result v;
        if ((rc = hx_verify_one(m, pp, tok, r.input_length, bounds, nb, &v, err, errlen)) != ENG_OK) break;
        (*n_done)++;
        *n_same += v.equal;
        if (c->db && (rc = hx_sim_store_verify(c->db, r.index, r.input_length, bounds[nb - 1], nb, v.equal,
                                               v.first_diff, v.max_ulp, v.max_abs, err, errlen)) != ENG_OK)
            break;
        json_t *o = json_pack("{s:I, s:i, s:I, s:i, s:b, s:I, s:I, s:f}", "index", (json_int_t)r.index, "n_tokens",
                              r.input_length, "reused", (json_int_t)bounds[nb - 1], "segments", nb, "identical",
                              v.equal, "first_diff", (json_int_t)v.first_diff, "max_ulp",
                              (json_int_t)(v.max_ulp > (uint64_t)INT64_MAX ? INT64_MAX : (int64_t)v.max_ulp),
                              "max_abs_diff", v.max_abs);
        if (o) json_array_append_new(arr, o);
        if (!v.equal && !a->json && !a->quiet)
            printf("verify: request %lld (%d tokens, %d segments, reused %lld): logits differ from cold at %lld, "
                   "max ULP %llu\n", (long long)r.index, r.input_length, nb, (long long)bounds[nb - 1],
                   (long long)v.first_diff, (unsigned long long)v.max_ulp);
    }
    free(tok);
    free(cand);
    hx_trace_close(t);
    return rc;
}

// ----------------------------------------------------------------------------

int hx_cmd_simulate(int argc, char **argv) {
    if (hx_wants_help(argc, argv)) {
        hx_usage(stdout, k_usage, k_options);
        printf("\npolicy options (each policy takes its own; `kvreplay replay --help` says what they do):\n");
        hx_policy_help(stdout);
        return HX_EXIT_OK;
    }
    sim_args a = {.policy = "block-hash", .evict = "lru", .route = "round-robin", .pool = "local", .instances = 1,
                  .speedup = 1, .window = 60, .route_weight = 1, .calibration = "results/calibration.json",
                  .request_rows = -1, .chunk = 64, .ubatch = 512, .align = ENG_ALIGN_CHUNK, .sweep_value = NAN,
                  .unit = -1, .n_units = -1, .shard = -1, .n_shards = -1};
    a.num = eng_numerics_default();
    hx_policy_args pargs = {0};
    char err[1024] = "";
    for (int i = 1; i < argc; i++) {
        if (hx_options_parse(k_options, &a, argc, argv, &i)) continue;
        if (hx_took(hx_policy_args_take(&pargs, argc, argv, &i, err, sizeof err), err)) continue;
        hx_bad_arg("simulate", argv[i]);
    }
    if (!a.trace) hx_die(HX_EXIT_USAGE, "simulate: -t/--trace is required");
    hx_sim_opts o;
    hx_sim_opts_default(&o);
    o.trace_path = a.trace;
    o.trace.block_tokens = a.block_tokens;
    o.trace.repeat = a.repeat;
    o.trace.limit = a.limit;
    if (a.format && hx_trace_format_parse(a.format, &o.trace.format))
        hx_die(HX_EXIT_USAGE, "--format: expected mooncake, bailian or auto, got '%s'", a.format);
    if (hx_evict_parse(a.evict, &o.evict)) hx_die(HX_EXIT_USAGE, "--evict: expected %s, got '%s'", hx_evict_names(), a.evict);
    if (hx_route_parse(a.route, &o.route))
        hx_die(HX_EXIT_USAGE, "--route: expected round-robin, least-loaded or cache-aware, got '%s'", a.route);
    if (hx_pool_parse(a.pool, &o.pool)) hx_die(HX_EXIT_USAGE, "--pool: expected local or global, got '%s'", a.pool);
    char quirk_list[512] = "";
    for (int32_t k = 0, off = 0; k < a.quirks.n && off < (int)sizeof quirk_list; k++)
        off += snprintf(quirk_list + off, sizeof quirk_list - (size_t)off, "%s%s", k ? "," : "", a.quirks.v[k]);
    if (hx_quirks_parse(a.policy, quirk_list, &o.quirks, err, sizeof err) != ENG_OK) hx_die(HX_EXIT_USAGE, "%s", err);
    o.policy = a.policy;
    o.policy_args = &pargs;
    o.block_size = a.block_size;
    o.instances = a.instances;
    o.route_weight = a.route_weight;
    o.speedup = a.speedup;
    o.window_s = a.window;

    /* the model (time, verify, materialize) and the time model */
    eng_model *m = NULL;
    eng_prefill_params pp = eng_prefill_params_default();
    pp.chunk = a.chunk;
    pp.align = a.align;
    pp.ubatch = a.ubatch;
    if (a.model) {
        int rc = eng_model_load(a.model, &a.num, &m, err, sizeof err);
        if (rc != ENG_OK) hx_die(hx_exit_for_input(rc), "%s", err);
        o.model = eng_model_get_info(m);
    }
    if ((a.verify_n || a.materialize) && !m) hx_die(HX_EXIT_USAGE, "simulate: --verify-sample and --materialize need -m MODEL");
    if (a.profile || !m) {
        if (hx_time_profile_get(a.profile ? a.profile : "llama3-70b-a800x8", &o.tm, err, sizeof err))
            hx_die(HX_EXIT_USAGE, "%s", err);
    } else {
        int rc = hx_time_from_model(m, a.model, &pp, a.calibration, &o.tm, err, sizeof err);
        if (rc != ENG_OK) hx_die(hx_exit_for_input(rc), "%s", err);
    }
    if (a.gflops) o.tm.gflops = a.gflops;
    if (a.restore_gbs) o.tm.restore_gbs = a.restore_gbs;
    if (a.transfer_gbs) o.tm.transfer_gbs = a.transfer_gbs;
    if (a.tpot_ms) o.tm.tpot_ms = a.tpot_ms;
    double cap_bytes = NAN;
    if (a.capacity && a.capacity_bytes) hx_die(HX_EXIT_USAGE, "simulate: give --capacity or --capacity-bytes, not both");
    if (a.capacity) {
        double v = parse_amount(a.capacity);
        if (v < 0 || v > 1e18) hx_die(HX_EXIT_USAGE, "--capacity: expected a token count such as 3e6 or 3M, got '%s'", a.capacity);
        o.capacity_tokens = (int64_t)v;
        if (o.capacity_tokens == 0) hx_die(HX_EXIT_USAGE, "--capacity: 0 tokens (leave it out for an unbounded cache)");
    } else if (a.capacity_bytes) {
        cap_bytes = parse_amount(a.capacity_bytes);
        if (cap_bytes < 0 || cap_bytes > 1e21)
            hx_die(HX_EXIT_USAGE, "--capacity-bytes: expected a byte count such as 1T or 960GiB, got '%s'", a.capacity_bytes);
        if (!(o.tm.kv_bytes_token > 0)) hx_die(HX_EXIT_USAGE, "--capacity-bytes: the time model has no bytes per token");
        o.capacity_tokens = (int64_t)(cap_bytes / o.tm.kv_bytes_token);
        if (o.capacity_tokens == 0) hx_die(HX_EXIT_USAGE, "--capacity-bytes: %s holds no token", a.capacity_bytes);
    }

    /* the database */
    run_ctx c = {.rows_left = a.request_rows, .keep = a.verify_n > 0, .block_tokens = 0};
    c.n_vocab = m ? eng_model_get_info(m)->n_vocab : 0;
    uint8_t dg[32];
    char trace_sha[65] = "";
    if (a.db) {  /* the trace's digest, for the run's row */
        char *text = NULL;
        size_t len = 0;
        int rc = eng_read_file(a.trace, &text, &len, err, sizeof err);
        if (rc != ENG_OK) hx_die(rc == ENG_ERR_NOMEM ? HX_EXIT_INTERNAL : HX_EXIT_USAGE, "%s", err);
        eng_sha256(text, len, dg);
        eng_sha256_hex(dg, trace_sha);
        free(text);
    }
    if (a.materialize) {
        if (!(c.mat = fopen(a.materialize, "w"))) hx_die(HX_EXIT_USAGE, "--materialize: %s: %s", a.materialize, strerror(errno));
    }
    if (a.db) {
        hx_run_meta meta;
        hx_run_meta_init(&meta);
        meta.model_path = a.model ? a.model : o.tm.name;
        if (m) meta.model_sha256 = eng_model_get_info(m)->sha256;
        meta.transcript = a.trace;
        meta.transcript_sha256 = trace_sha;
        meta.policy = a.policy;
        meta.quirks = hx_quirks_str(a.policy, o.quirks);
        meta.align = eng_align_name(pp.align);
        meta.chunk = pp.chunk;
        meta.ubatch = pp.ubatch;
        meta.kernel = eng_kernel_name(a.num.kernel);
        meta.precision = eng_precision_name(a.num.precision);
        meta.threads = a.num.n_threads;
        meta.machine.blas = eng_blas_info();  /* as the shards row's: the kernels' fingerprint */
        meta.exp.experiment = a.experiment;
        meta.exp.variant = a.variant;
        meta.exp.sweep_name = a.sweep_name;
        meta.exp.sweep_value = a.sweep_value;
        meta.pol.block_size = a.block_size;
        meta.seed = a.verify_seed;
        meta.exp.unit = a.unit;
        meta.exp.n_units = a.n_units;
        meta.exp.shard = a.shard;
        meta.exp.n_shards = a.n_shards;
        meta.exp.plan_sha256 = a.plan_sha;
        meta.exp.spec_sha256 = a.spec_sha;
        meta.exp.scale = a.scale;
        char extra[256];
        snprintf(extra, sizeof extra, "{\"simulate\":true,\"evict\":\"%s\",\"capacity_tokens\":%lld,\"instances\":%d,"
                 "\"route\":\"%s\",\"pool\":\"%s\"}", a.evict, (long long)o.capacity_tokens, a.instances, a.route, a.pool);
        meta.extra = extra;
        int rc = hx_sim_store_begin(a.db, &meta, &c.db, err, sizeof err);
        if (rc != ENG_OK) hx_die(hx_exit_for_input(rc), "%s", err);
    }
    o.on_request = (c.db || c.keep || c.mat) ? on_request : NULL;
    o.on_window = c.db ? on_window : NULL;
    o.ud = &c;
    o.abort_rc = &c.rc;
    c.block_tokens = a.block_tokens ? a.block_tokens : 0;

    /* the block size is the trace's: known after its first record; on_request needs it for materialize */
    if (!c.block_tokens) {
        hx_trace *t = NULL;
        hx_trace_rec r;
        int rc = hx_trace_open(a.trace, &o.trace, &t, err, sizeof err);
        if (rc == ENG_OK && hx_trace_next(t, &r, err, sizeof err) >= 0) c.block_tokens = hx_trace_block_tokens(t);
        hx_trace_close(t);
        if (!c.block_tokens) c.block_tokens = 512;
    }
    hx_sim_summary sum;
    int rc = hx_sim_run(&o, &sum, err, sizeof err);
    /* the exit code: the trace, an option or the model is the user's (2, 3 when out of memory); a write
     * that fails once the outputs exist (the database, --materialize) is the machine's (3) */
    bool writing = c.rc != 0;
    if (rc != ENG_OK && c.rc) snprintf(err, sizeof err, "%s", c.err);
    if (c.mat && fclose(c.mat) != 0 && rc == ENG_OK) {
        rc = ENG_ERR_IO;
        writing = true;
        snprintf(err, sizeof err, "--materialize: write failed");
    }
    json_t *vjs = json_array();
    int64_t n_ver = -1, n_same = -1;
    if (rc == ENG_OK && a.verify_n > 0)
        rc = verify(&a, &o.trace, &c, m, &pp, &n_ver, &n_same, vjs, err, sizeof err);
    if (rc == ENG_OK && c.db) {
        hx_sim_meta sm = {.trace = a.trace, .trace_sha256 = trace_sha, .policy = a.policy,
                          .quirks = hx_quirks_str(a.policy, o.quirks), .evict = a.evict, .route = a.route,
                          .pool = a.pool, .profile = o.tm.name, .profile_source = o.tm.source,
                          .format = hx_trace_format_name(sum.format), .block_tokens = sum.block_tokens,
                          .block_size = a.block_size ? a.block_size : sum.block_tokens,
                          .capacity_tokens = o.capacity_tokens,
                          .capacity_bytes = (double)o.capacity_tokens * o.tm.kv_bytes_token,
                          .bytes_per_token = o.tm.kv_bytes_token, .repeat = a.repeat ? a.repeat : 1,
                          .instances = a.instances, .route_weight = a.route_weight, .speedup = a.speedup,
                          .window_s = a.window, .gflops = o.tm.gflops, .restore_gbs = o.tm.restore_gbs,
                          .transfer_gbs = o.tm.transfer_gbs, .tpot_ms = o.tm.tpot_ms,
                          .request_rows = a.request_rows};
        rc = hx_sim_store_finish(c.db, &sm, &sum, n_ver, n_same, err, sizeof err);
        writing = rc != ENG_OK;
    }
    int64_t run_id = c.db ? hx_sim_store_run_id(c.db) : -1;
    if (rc != ENG_OK) {
        hx_sim_store_abort(c.db);
        if (a.materialize) remove(a.materialize);
        free(c.hit); free(c.len); free(c.origin); free(c.mat_buf);
        json_decref(vjs);
        eng_model_free(m);
        hx_die(writing ? HX_EXIT_INTERNAL : hx_exit_for_input(rc), "%s", err);
    }
    hx_sim_store_close(c.db);
    double rps = sum.seconds > 0 ? (double)sum.requests / sum.seconds : 0;
    if (a.json) {
        json_t *j = json_pack("{s:I, s:f, s:f, s:I, s:f, s:f, s:I, s:I, s:I, s:I, s:I, s:I, s:f, s:f}",
                              "requests", (json_int_t)sum.requests, "hit_rate_tokens", sum.hit_rate_tokens,
                              "hit_rate_blocks", sum.hit_rate_blocks, "evictions", (json_int_t)sum.evictions,
                              "seconds", sum.seconds, "requests_per_s", rps, "input_tokens", (json_int_t)sum.input_tokens,
                              "hit_tokens", (json_int_t)sum.hit_tokens, "blocks", (json_int_t)sum.blocks,
                              "hit_blocks", (json_int_t)sum.hit_blocks, "held_blocks_end", (json_int_t)sum.held_blocks_end,
                              "held_blocks_max", (json_int_t)sum.held_blocks_max, "held_bytes_end", sum.held_bytes_end,
                              "held_bytes_max", sum.held_bytes_max);
        json_object_set_new(j, "policy", json_string(a.policy));
        json_object_set_new(j, "evict", json_string(a.evict));
        json_object_set_new(j, "capacity_tokens", json_integer(o.capacity_tokens));
        json_object_set_new(j, "instances", json_integer(a.instances));
        json_object_set_new(j, "route", json_string(a.route));
        json_object_set_new(j, "pool", json_string(a.pool));
        json_object_set_new(j, "format", json_string(hx_trace_format_name(sum.format)));
        json_object_set_new(j, "block_tokens", json_integer(sum.block_tokens));
        json_object_set_new(j, "profile", json_string(o.tm.name));
        json_object_set_new(j, "ttft_mean_ms", json_real(sum.ttft_mean_ms));
        json_object_set_new(j, "ttft_p50_ms", json_real(sum.ttft_p50_ms));
        json_object_set_new(j, "ttft_p90_ms", json_real(sum.ttft_p90_ms));
        json_object_set_new(j, "ttft_p99_ms", json_real(sum.ttft_p99_ms));
        json_object_set_new(j, "queue_mean_ms", json_real(sum.queue_mean_ms));
        json_object_set_new(j, "queue_p99_ms", json_real(sum.queue_p99_ms));
        json_object_set_new(j, "prefill_mean_ms", json_real(sum.prefill_mean_ms));
        json_object_set_new(j, "restore_mean_ms", json_real(sum.restore_mean_ms));
        json_object_set_new(j, "stored_blocks", json_integer(sum.stored_blocks));
        json_object_set_new(j, "cpu_seconds", json_real(sum.cpu_seconds));
        struct rusage ru;
        if (getrusage(RUSAGE_SELF, &ru) == 0) json_object_set_new(j, "peak_rss_kb", json_integer(ru.ru_maxrss));
        if (run_id >= 0) json_object_set_new(j, "run_id", json_integer(run_id));
        if (n_ver >= 0) {
            json_object_set_new(j, "verified", json_integer(n_ver));
            json_object_set_new(j, "verified_identical", json_integer(n_same));
            json_object_set_new(j, "verify", json_incref(vjs));
        }
        char *s = json_dumps(j, JSON_COMPACT | JSON_REAL_PRECISION(10));
        printf("%s\n", s ? s : "{}");
        free(s);
        json_decref(j);
    } else if (!a.quiet) {
        printf("simulate: %s (%s, %lld requests, %d-token blocks) through %s, %s, capacity %s, %d instance%s (%s, %s pool)\n",
               a.trace, hx_trace_format_name(sum.format), (long long)sum.requests, sum.block_tokens, a.policy, a.evict,
               o.capacity_tokens ? a.capacity ? a.capacity : a.capacity_bytes : "unbounded", a.instances,
               a.instances > 1 ? "s" : "", a.route, a.pool);
        printf("hit rate      %.4f of tokens (%lld of %lld), %.4f of blocks (%lld of %lld)\n", sum.hit_rate_tokens,
               (long long)sum.hit_tokens, (long long)sum.input_tokens, sum.hit_rate_blocks, (long long)sum.hit_blocks,
               (long long)sum.blocks);
        printf("cache         %lld blocks evicted; %lld held at the end (%.3g GB), %lld at most (%.3g GB)\n",
               (long long)sum.evictions, (long long)sum.held_blocks_end, sum.held_bytes_end / 1e9,
               (long long)sum.held_blocks_max, sum.held_bytes_max / 1e9);
        printf("TTFT ms       mean %.1f, p50 %.1f, p90 %.1f, p99 %.1f; queue mean %.1f, p99 %.1f; prefill mean %.1f "
               "(time model %s)\n", sum.ttft_mean_ms, sum.ttft_p50_ms, sum.ttft_p90_ms, sum.ttft_p99_ms,
               sum.queue_mean_ms, sum.queue_p99_ms, sum.prefill_mean_ms, o.tm.name);
        if (n_ver >= 0) printf("verify        %lld of %lld checked hits bit-identical to cold\n", (long long)n_same, (long long)n_ver);
        printf("run           %.3f s (%.3f s of CPU), %.0f requests/s%s%s\n", sum.seconds, sum.cpu_seconds, rps,
               run_id >= 0 ? "; run " : "",
               run_id >= 0 ? a.db : "");
    }
    json_decref(vjs);
    free(c.hit);
    free(c.len);
    free(c.origin);
    free(c.mat_buf);
    eng_model_free(m);
    return n_ver > 0 && n_same < n_ver ? HX_EXIT_DIVERGED : HX_EXIT_OK;
}
