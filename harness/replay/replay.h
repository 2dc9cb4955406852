/*
 * harness/replay/replay.h: the replay loop of DESIGN.md, shared by `replay`,
 * `check` and `experiment`.
 *
 * For every request of a transcript, in order:
 *   1. render (chat template), normalize, tokenize (hx_prepared);
 *   2. cold: a fresh state, prefill every token, the last prompt token's
 *      logits, greedy decode of decode_n tokens keeping every step's logits
 *      (or the same result from the shared cold cache);
 *   3. reused: the policy's state, prefill the rest, the same decoding;
 *      with --repeat N both prefills are timed N times (the same bits every
 *      time, checked with memcmp) and min, median and max are stored;
 *   4. compare bytes (memcmp), first differing index, max |diff|, ULP, KL,
 *      top-1, fork step;
 *   5. roll the decode back and teacher-force the recorded response through
 *      decode-shaped steps, then let the policy store what it keeps;
 *   6. one requests row and its steps rows in one SQLite transaction.
 *
 * Each request also gets a modeled TTFT: its FLOPs and restored bytes
 * priced at the run's calibration (calibrate.h), measured at the start of
 * the run or read from a reference file (--calibration).
 *
 * Progress goes to stderr only when it is a terminal.
 */
#ifndef HX_REPLAY_H
#define HX_REPLAY_H

#include <stdbool.h>
#include <stdint.h>

#include <stdio.h>

#include "coldcache.h"
#include "model.h"
#include "policy.h"

typedef struct hx_replay_opts {
    const char   *model_path;
    const char   *transcript_path;
    const char   *db_path;
    const char   *policy;          /* default "slot-lcp" */
    const char   *quirks;          /* default "" */
    const char   *normalize;       /* default "" */
    const char   *template_name;   /* NULL: from the model's metadata */
    eng_numerics  num;             /* default blas, fp32, 1 thread */
    eng_prefill_params pp;         /* chunk 64, align chunk, ubatch 512 */
    int32_t       decode_n;        /* default 40 */
    bool          cap_prompt;      /* default true */
    int32_t       repeat;          /* prefills timed per request, cold and reused (default 1) */
    const char   *calibration;     /* reference calibration file pricing the modeled TTFT; NULL: this run's own */
    int32_t       n_ctx;           /* 0: sized from the transcript */
    /* the policies' own options (--slots, --cache-dir, ...), by name: each
     * policy declares its own (cache/policies/) and takes those it declares */
    hx_policy_args policy_args;
    /* Fault injection, to prove the comparator catches what it must (tests):
     * "ulp-flip": the reused run's last-prompt logit at index fault_index moves one ULP;
     * "kv-row": the restored KV row at position n_reused - 1 is recomputed from a
     * different token (a corrupted cache row). Applied to request fault_request only. */
    const char   *fault;           /* NULL, "ulp-flip" or "kv-row" */
    int32_t       fault_request;   /* 0-based request index (default 1) */
    int32_t       fault_index;     /* logit index for ulp-flip (default 0) */
    /* run control */
    bool          resume;          /* complete the interrupted (or failed) run of this configuration; when
                                      its run is complete, replay nothing (summary.already_done) */
    bool          skip_bad;
    int32_t       limit;           /* at most this many requests (0: all) */
    const char   *experiment;      /* set by `experiment` */
    const char   *variant;
    const char   *sweep_name;
    double        sweep_value;     /* NaN when none */
    int64_t       seed;            /* recorded (synthetic inputs' seed), -1 when none */
    /* set by `experiment` (runs.spec_sha256 ... plan_sha256; docs/scale.md): the spec, the unit
     * this run is and the shard that runs it; NULL / -1 for a plain replay */
    const char   *spec_sha256;
    const char   *scale;
    int32_t       unit, n_units;
    int32_t       shard, n_shards;
    const char   *plan_sha256;
    bool          quiet;           /* no summary on stderr */
} hx_replay_opts;

void hx_replay_opts_default(hx_replay_opts *o);
/* Consumes the option at argv[*i] if it is a replay option (advancing *i
 * past its value) and returns true; false when it is not one. Bad values
 * exit 2 naming the flag. */
bool hx_replay_opts_parse(int argc, char **argv, int *i, hx_replay_opts *o);
/* Prints the replay options' --help lines (the policies' options and quirks
 * among them, from the policy registry) to f. */
void hx_replay_opts_help(FILE *f);

typedef struct hx_replay_summary {
    int64_t run_id;
    int32_t n_requests;       /* replayed now (excludes resumed ones already stored) */
    int32_t n_skipped_done;   /* already in the database (--resume) */
    int32_t n_diverged;       /* logits or any decode step not bit-identical */
    int32_t n_forked;
    int64_t n_prompt, n_reused;
    double  wall_s;           /* whole replay */
    double  engine_s;         /* time inside eng_prefill/eng_decode/restore */
    double  cold_saved_ms;    /* cold compute skipped thanks to the shared cold cache */
    /* what the policy could not do (hx_acquire, hx_release), resumed requests included */
    int64_t n_quarantined;    /* stored entries set aside as corrupt */
    int64_t n_fallbacks;      /* hits on a shorter entry after a longer one failed */
    int64_t n_store_failed;   /* checkpoints lost: the store failed (disk full, I/O, memory) */
    bool    already_done;     /* --resume found this configuration's run complete: nothing replayed */
} hx_replay_summary;

/* Runs one replay into o->db_path. cold may be NULL (no sharing). Returns
 * an exit code: HX_EXIT_OK, HX_EXIT_USAGE (bad input; message on stderr
 * naming file, line and field; an empty transcript; a fault that cannot be
 * planted; a run another process is writing) or HX_EXIT_INTERNAL. */
int hx_replay_run(const hx_replay_opts *o, hx_coldcache *cold, hx_replay_summary *sum);

#endif /* HX_REPLAY_H */
