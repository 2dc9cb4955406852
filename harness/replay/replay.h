/*
 * harness/replay/replay.h: the replay loop (docs/design.md), shared by
 * `replay`, `check` and `experiment`: a transcript's requests, each one
 * session turn (session/session.h).
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
#include "session.h"

typedef struct hx_replay_opts {
    hx_session_params sp;          /* the model, policy, engine settings and faults of every request */
    const char   *transcript_path;
    const char   *db_path;
    int32_t       n_ctx;           /* 0: sized from the transcript */
    /* run control */
    bool          resume;          /* complete the interrupted (or failed) run of this configuration; when
                                      its run is complete, replay nothing (summary.already_done) */
    bool          skip_bad;
    int32_t       limit;           /* at most this many requests (0: all) */
    int64_t       seed;            /* recorded (synthetic inputs' seed), -1 when none */
    /* set by `experiment` (runs.experiment ... plan_sha256; docs/scale.md): the spec, the variant, the
     * swept value, the unit this run is and the shard that runs it; NULL / NaN / -1 for a plain replay */
    const char   *experiment;
    const char   *variant;
    const char   *sweep_name;
    double        sweep_value;
    const char   *spec_sha256;
    const char   *scale;
    int32_t       unit, n_units;
    int32_t       shard, n_shards;
    const char   *plan_sha256;
} hx_replay_opts;

void hx_replay_opts_default(hx_replay_opts *o);
/* Takes the replay option (a session option among them) at argv[*i],
 * advancing *i past its value: 1; 0 when it is not one; ENG_ERR_ARG with err
 * naming the flag for a bad value. */
int  hx_replay_opts_take(hx_replay_opts *o, int argc, char **argv, int *i, char *err, size_t errlen);
/* Prints the replay options' --help lines (the policies' options and quirks
 * among them, from the policy registry) to f. */
void hx_replay_opts_help(FILE *f);

typedef struct hx_replay_summary {
    int64_t run_id;
    hx_session_totals t;      /* the turns replayed now (resumed ones already stored excluded) */
    int32_t n_skipped_done;   /* already in the database (--resume) */
    double  wall_s;           /* whole replay */
    double  cold_saved_ms;    /* cold compute skipped thanks to the shared cold cache */
    bool    already_done;     /* --resume found this configuration's run complete: nothing replayed */
} hx_replay_summary;

/* Runs one replay into o->db_path. cold may be NULL (no sharing). Returns
 * an exit code (base/errors.h): HX_EXIT_OK, HX_EXIT_USAGE (bad input: a
 * missing -m, -t or --db, a quirk of another policy, a bad transcript line
 * (file, line and field), an empty transcript, a fault that cannot be
 * planted, a run another process is writing) or HX_EXIT_INTERNAL; the
 * message is on stderr. */
int hx_replay_run(const hx_replay_opts *o, hx_coldcache *cold, hx_replay_summary *sum);

#endif /* HX_REPLAY_H */
