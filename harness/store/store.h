/*
 * harness/store/store.h: the SQLite results store (docs/sqlite.md describes every
 * table and column).
 *
 * One database holds many runs. A run is one replay of a transcript under one
 * configuration (model, policy, quirks, chunk, kernel, ...): one `runs` row.
 * Every request of the replay is one `requests` row, and every greedy decode
 * step of that request one `steps` row.
 *
 * Invariants:
 * - the database is in WAL mode with synchronous=NORMAL and foreign keys on;
 *   its schema version is PRAGMA user_version == HX_STORE_SCHEMA_VERSION
 *   (an older one is migrated on open, a newer one is refused);
 * - a request and all its steps are written in one BEGIN IMMEDIATE ...
 *   COMMIT: after any failure, even SIGKILL in the middle, the database holds
 *   either the whole request or nothing of it, so the requests present are
 *   exactly those fully committed;
 * - (run_id, session, turn) is unique: a resumed run writes only the
 *   requests that are missing, and writing one twice is an error, never a
 *   second row;
 * - one writer per run: the store that begins or resumes a run holds an
 *   OFD lock on byte run_id of PATH.lock (created beside the database) until
 *   it is closed (or its process dies), and another store cannot resume it
 *   meanwhile.
 *
 * Workload: one writer per run appending a few rows per second at most, and
 * readers (report, plots) at any time; several processes may share a file
 * (the busy timeout absorbs short lock waits).
 *
 * Errors: functions return ENG_OK or a negative eng_status and write a
 * one-line message "DB: TABLE: what: sqlite's message" into err:
 *   ENG_ERR_IO          sqlite failed (disk, locks, corruption), or the file is missing
 *   ENG_ERR_FORMAT      the file is not a SQLite database, or not a kvreplay one
 *   ENG_ERR_UNSUPPORTED the schema version is newer than this build's, or the run
 *                       to resume is being written by another process
 *   ENG_ERR_ARG         the caller's values break the schema (duplicate request
 *                       or step, a NULL required field, an unknown run_id), or
 *                       the path cannot be opened (no permission, its directory
 *                       missing); a path that is not a regular file is ENG_ERR_FORMAT
 *   ENG_ERR_NOT_FOUND   no such run (find_resumable, finish_run)
 *   ENG_ERR_NOMEM       allocation failed
 * Text values are copied by sqlite (SQLITE_TRANSIENT): the caller's strings
 * need to live only for the duration of the call.
 *
 * Usage (the replay loop):
 *     hx_store *st; hx_run_meta m; int64_t run; hx_done_set *done;
 *     if (hx_store_open("out.sqlite", &st, err, sizeof err)) fail;
 *     hx_run_meta_init(&m);
 *     m.model_path = ...; m.policy = "slot-lcp"; m.align = "chunk"; m.chunk = 64; ...
 *     if (hx_store_begin_or_resume(st, &m, resume, &run, &done, NULL, err, sizeof err)) fail;
 *     for each request r (index i):
 *         if (hx_done_set_has(done, r.session, r.turn)) continue;
 *         hx_request_row row; hx_request_row_init(&row);
 *         row.req_index = i; row.session = ...; hx_request_row_set_cmp(&row, &cmp); ...
 *         hx_step_row steps[N]; for each k: hx_step_row_init(&steps[k]); ...
 *         if (hx_store_put_request(st, run, &row, steps, N, err, sizeof err)) fail;
 *     hx_store_finish_run(st, run, HX_RUN_DONE, err, sizeof err);
 *     hx_done_set_free(done); hx_store_close(st);
 */
#ifndef HX_STORE_H
#define HX_STORE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <sqlite3.h>

#include "compare.h"
#include "store_schema.h"  /* HX_STORE_SCHEMA_VERSION */

typedef struct hx_store hx_store;  /* opaque: connection + cached statements */

// ----------------------------------------------------------------------------
// Opening and closing

/* Opens path read-write, creating the file and the schema when absent (WAL,
 * synchronous=NORMAL, foreign keys, busy timeout 10 s), migrating an older
 * schema. On success *out owns the connection (hx_store_close frees it); on
 * failure *out is NULL. path, out must not be NULL. */
int hx_store_open(const char *path, hx_store **out, char *err, size_t errlen);

/* Opens an existing database for reading only (report, check, plots): never
 * creates or migrates. A missing file is ENG_ERR_IO ("PATH: no such file"),
 * a file that is not a kvreplay database ENG_ERR_FORMAT, a newer schema
 * ENG_ERR_UNSUPPORTED. Works on a read-only directory or filesystem when the
 * database has no pending WAL (its writer closed it): it is then opened as
 * immutable, since sqlite cannot create the -shm file a WAL reader needs.
 * The write functions below fail on such a store. */
int hx_store_open_readonly(const char *path, hx_store **out, char *err, size_t errlen);

/* Finalizes the cached statements and closes the connection. Accepts NULL. */
void hx_store_close(hx_store *s);

/* The underlying connection (owned by s) for ad-hoc queries; the path s was
 * opened with. s must not be NULL. */
sqlite3    *hx_store_db(hx_store *s);
const char *hx_store_path(const hx_store *s);

// ----------------------------------------------------------------------------
// Runs

typedef enum hx_run_status {
    HX_RUN_RUNNING = 0,  /* "running": begun, not finished (or crashed: resumable) */
    HX_RUN_DONE    = 1,  /* "done" */
    HX_RUN_FAILED  = 2,  /* "failed" */
} hx_run_status;

/* "running", "done", "failed" (static). */
const char *hx_run_status_str(hx_run_status st);

/* Every column of `runs` the caller provides. Sentinels (set by
 * hx_run_meta_init): a NULL string, a negative integer and a NaN real are
 * stored as SQL NULL, except where "default" says what is stored instead.
 * "required": NULL/negative makes hx_store_begin_run fail with ENG_ERR_ARG. */
/* Experiments and their shards (docs/scale.md); none of these but the experiment, variant and
 * sweep is in config_key, so a shard's run of a unit has the configuration the unsharded run of that
 * unit has. NULL / NaN / -1 for a plain replay. */
typedef struct hx_run_experiment {
    const char *experiment;        /* experiment spec name */
    const char *variant;           /* variant within the experiment */
    const char *sweep_name;        /* the swept knob ("chunk", "n_ctx", ...), NULL if none */
    double      sweep_value;       /* its value in this run (NaN -> NULL) */
    const char *spec_sha256;       /* SHA-256 of the experiment spec file (hex) */
    const char *scale;             /* "demo" | "full" */
    int64_t     unit;              /* this run's unit: its 0-based place in the experiment's plan */
    int64_t     n_units;           /* units in the plan */
    int64_t     shard;             /* the shard that ran it, 1..n_shards (1 of 1: unsharded) */
    int64_t     n_shards;
    const char *plan_sha256;       /* digest of the plan: every unit and its shard */
} hx_run_experiment;

/* A policy's own settings (its record and record_state functions write them). */
typedef struct hx_run_policy_settings {
    double      threshold;         /* slot similarity threshold (slot-lcp) */
    int64_t     n_slots;           /* slot count (slot-lcp) */
    int64_t     ctx_checkpoints;   /* checkpoints kept per slot */
    int64_t     checkpoint_every;  /* tokens between context checkpoints */
    int64_t     waypoint_every;    /* tokens between disk waypoints (disk-anchor) */
    const char *anchor;            /* anchor rule (disk-anchor) */
    const char *cache_dir;         /* disk cache directory */
    int64_t     cache_ram;         /* host prompt-cache budget, bytes (slot-lcp --cache-ram) */
    int64_t     cache_budget;      /* disk cache budget, bytes (disk-anchor) */
    const char *policy_opts;       /* JSON object: the options as it runs them (block-hash, radix), or NULL */
    int64_t     block_size;        /* tokens per block (block-hash, effective) or page (radix), <0 -> NULL */
} hx_run_policy_settings;

/* Timing: --repeat and the modeled TTFT's calibration and price (docs/sqlite.md). */
typedef struct hx_run_price {
    int64_t     n_repeat;          /* prefills timed per request (cold and reused); in config_key when > 1 */
    double      calib_gflops;      /* measured at the run's start: prefill GFLOP/s at its chunk shape */
    double      calib_restore_gbs; /* measured at the run's start: state restore GB/s */
    double      price_gflops;      /* the figures the modeled TTFT is priced at */
    double      price_restore_gbs;
    const char *price_source;      /* "measured", or "reference FILE" */
} hx_run_price;

/* The machine; default: hx_sysinfo_get(). */
typedef struct hx_run_machine {
    const char *blas;              /* BLAS build, e.g. "OpenBLAS 0.3.21 ... (Haswell)" */
    const char *cpu;               /* CPU model name */
    int64_t     n_cpus;            /* online CPUs (<=0: default) */
    const char *hostname;
    const char *os_release;        /* "Linux 6.1.0-18-amd64" */
} hx_run_machine;

/* kvreplay probe (docs/probe.md): the live server under test; NULL for every other run. */
typedef struct hx_run_probe {
    const char *server_url;        /* its base URL */
    const char *server_api;        /* llama | openai | vllm | sglang | anthropic | responses | gemini */
    const char *server_engine;     /* llama.cpp | vllm | sglang | kvreplay | unknown: whose cache rule applied */
    const char *server_info;       /* JSON object: what its identity endpoints answered (/props, /v1/models, ...) */
    const char *probe_opts;        /* JSON object: the probe's flags as it ran them */
} hx_run_probe;

/* Every column of `runs` the caller provides, by part. Sentinels (set by
 * hx_run_meta_init): a NULL string, a negative integer and a NaN real are
 * stored as SQL NULL, except where "default" says what is stored instead.
 * "required": NULL/negative makes hx_store_begin_run fail with ENG_ERR_ARG. */
typedef struct hx_run_meta {
    /* provenance */
    const char *started_at;        /* ISO-8601 UTC; default: now, "2025-01-31T12:00:00.000Z" */
    const char *version;           /* default KVR_VERSION */
    const char *git_rev;           /* default hx_git_rev() */
    const char *argv;              /* the command line; default hx_argv_joined() */
    int64_t     n_requests;        /* requests in the transcript (planned), <0 -> NULL */
    hx_run_experiment exp;
    /* model */
    const char *model_path;        /* required */
    const char *model_sha256;      /* hex digest of the GGUF file */
    const char *model_name;        /* general.name or preset, e.g. "tiny" */
    int64_t     n_params;          /* parameter count */
    /* transcript */
    const char *transcript;        /* path of the transcript file */
    const char *transcript_sha256; /* hex digest of it */
    const char *template_name;     /* chat template (column "template") */
    /* cache policy */
    const char *policy;            /* required: "cold", "slot-lcp", "disk-anchor", ... */
    const char *quirks;            /* comma-separated quirk names; default "" (none) */
    const char *normalize;         /* comma-separated normalization rules; default "" */
    hx_run_policy_settings pol;
    /* engine */
    const char *align;             /* required: "chunk" | "none" */
    int64_t     chunk;             /* required: C, the prefill grid */
    int64_t     ubatch;            /* suffix chunk under --align none */
    const char *kernel;            /* required: "blas" | "ref" */
    const char *precision;         /* required: "fp32" | "bf16" */
    int64_t     threads;           /* required: thread count */
    int64_t     decode_n;          /* greedy decode steps per request */
    int64_t     cap_prompt;        /* prompt token cap */
    int64_t     n_ctx;             /* context length */
    int64_t     seed;              /* the run's seed, in [0, 2^63) */
    hx_run_machine machine;
    hx_run_price   price;
    hx_run_probe   probe;
    /* resume and extras */
    const char *config_key;        /* default hx_run_meta_config_key(this) */
    const char *extra;             /* JSON object with policy-specific settings, or NULL */
} hx_run_meta;

/* Sets every field to its sentinel: NULL strings, -1 integers, NaN reals. */
void hx_run_meta_init(hx_run_meta *m);

/* The canonical configuration string of m: compact JSON with sorted keys of
 * every field that can change a result (model and transcript digests, or
 * their paths when the digest is NULL; template, policy and its settings,
 * quirks, normalize, engine settings, seed, experiment/variant/sweep, extra,
 * version, git_rev, cpu), applying the same defaults as hx_store_begin_run,
 * so it can be computed before a run exists. Excludes started_at, argv,
 * hostname, n_requests and m->config_key itself. Returns a malloc'd string
 * the caller frees, or NULL when out of memory. m must not be NULL. */
char *hx_run_meta_config_key(const hx_run_meta *m);

/* Inserts a `runs` row with status 'running' and finished_at NULL, applying
 * the defaults above, and claims it (this store is its writer until closed);
 * *run_id receives its id. ENG_ERR_ARG when a required field is missing. */
int hx_store_begin_run(hx_store *s, const hx_run_meta *m, int64_t *run_id, char *err,
                       size_t errlen);

/* The most recent run (largest run_id) with this config_key and status
 * 'running' (interrupted) or 'failed' (stopped by an error). ENG_OK with
 * *run_id, ENG_ERR_NOT_FOUND when there is none (*run_id = -1, err
 * untouched), or another error. */
int hx_store_find_resumable(hx_store *s, const char *config_key, int64_t *run_id, char *err,
                            size_t errlen);

/* The most recent run with this config_key and status 'done': ENG_OK with
 * *run_id, ENG_ERR_NOT_FOUND (*run_id = -1), or another error. */
int hx_store_find_done(hx_store *s, const char *config_key, int64_t *run_id, char *err, size_t errlen);

/* The most recent 'done' run of an experiment's variant written by the build
 * git_rev (a probe run, whose config key names a server that may listen on
 * another port each time): ENG_OK with *run_id, ENG_ERR_NOT_FOUND (*run_id
 * = -1), or another error. */
int hx_store_find_done_variant(hx_store *s, const char *experiment, const char *variant, const char *git_rev,
                               int64_t *run_id, char *err, size_t errlen);

/* Records that run_id was resumed: increments runs.resumes, sets
 * runs.resumed_at = now, status 'running' and finished_at NULL (argv keeps
 * the first start's command line). ENG_ERR_NOT_FOUND for an unknown run. */
int hx_store_note_resume(hx_store *s, int64_t run_id, char *err, size_t errlen);

/* Sets status (DONE or FAILED; RUNNING reopens) and finished_at = now (NULL
 * for RUNNING). ENG_ERR_NOT_FOUND for an unknown run. */
int hx_store_finish_run(hx_store *s, int64_t run_id, hx_run_status status, char *err,
                        size_t errlen);

/* The latest run_id in the database (ENG_ERR_NOT_FOUND when it has no runs). */
int hx_store_last_run(hx_store *s, int64_t *run_id, char *err, size_t errlen);

/* The price_gflops and price_restore_gbs of run_id (a resumed run keeps
 * pricing its requests as it began); NaN when NULL. ENG_ERR_NOT_FOUND for an
 * unknown run. */
int hx_store_run_price(hx_store *s, int64_t run_id, double *gflops, double *restore_gbs, char *err, size_t errlen);

/* Number of `requests` rows of run_id in *n (0 for an unknown run). */
int hx_store_count_requests(hx_store *s, int64_t run_id, int64_t *n, char *err, size_t errlen);

// ----------------------------------------------------------------------------
// The set of requests already committed for a run (for --resume)

typedef struct hx_done_set hx_done_set;  /* opaque, immutable after loading */

/* Loads the (session, turn) pairs of every request of run_id. *out is owned
 * by the caller (hx_done_set_free). An unknown run gives an empty set. */
int  hx_store_load_done(hx_store *s, int64_t run_id, hx_done_set **out, char *err, size_t errlen);
/* True when (session, turn) is in d. d NULL (or session NULL) -> false. O(log n). */
bool hx_done_set_has(const hx_done_set *d, const char *session, int32_t turn);
/* Number of pairs in d (0 for NULL). */
int64_t hx_done_set_count(const hx_done_set *d);
/* Accepts NULL. */
void hx_done_set_free(hx_done_set *d);

/* Single lookup: 1 when the request is stored, 0 when not, <0 on error. */
int hx_store_request_done(hx_store *s, int64_t run_id, const char *session, int32_t turn,
                          char *err, size_t errlen);

/* The whole start of a run: with resume and a run whose config_key matches
 * (hx_store_find_resumable), claims it (ENG_ERR_UNSUPPORTED when another
 * store holds it), reuses it (hx_store_note_resume) and loads its done set;
 * otherwise begins a new run with an empty done set. *resumed (may be NULL)
 * tells which. *done is owned by the caller. */
int hx_store_begin_or_resume(hx_store *s, const hx_run_meta *m, bool resume, int64_t *run_id,
                             hx_done_set **done, bool *resumed, char *err, size_t errlen);

// ----------------------------------------------------------------------------
// Shards (docs/scale.md)

/* What an experiment process records about the part of the plan it runs. */
typedef struct hx_shard_meta {
    const char *experiment;   /* the spec's name */
    const char *spec_sha256;  /* SHA-256 of the spec file */
    const char *scale;        /* "demo" | "full" */
    int64_t     shard;        /* 1..n_shards */
    int64_t     n_shards;
    int64_t     n_units;
    const char *plan_sha256;  /* the plan's digest (runs.plan_sha256) */
    const char *plan;         /* the whole plan, JSON: [[unit, shard, "label"], ...] */
} hx_shard_meta;

/* Records one `shards` row: the plan, this shard, and the build and machine
 * that run it (git_rev, version, blas, hostname, now, argv). One row per plan,
 * shard and git revision: a resume of the same shard keeps the first. */
int hx_store_put_shard(hx_store *s, const hx_shard_meta *m, char *err, size_t errlen);

// ----------------------------------------------------------------------------
// Requests and steps

/* One `requests` row. hx_request_row_init sets every field to 0/false except
 * the NULL-able ones, which get their sentinel: NULL strings, -1 integers
 * and NaN reals are stored as SQL NULL. NULL-able: transcript, first_diff_index
 * (-1: logits equal; a_first, b_first and ulp_first are then NULL too), kl,
 * fork_step (-1: never forks), flops_*, sim, f_keep, slot, lcp, miss_*,
 * n_checkpoints, ckpt_bytes, n_stored, bytes_stored, stable_end,
 * anchor_pos, bytes_restored, restore_ms, store_ms, anchor_ms, ttft_*_ms, model_*_ms,
 * note, extra, cache_bytes, cache_entries. Required: session (non-NULL), turn, req_index, n_prompt,
 * n_reused, n_prefilled, n_decode (>= 0). Unsigned ULP figures above
 * INT64_MAX (NaN pairs) are stored as INT64_MAX. */
typedef struct hx_request_row {
    int64_t     req_index;        /* 0-based position in the replay order */
    const char *transcript;       /* transcript path or name */
    const char *session;          /* transcript session id */
    int32_t     turn;             /* turn within the session */
    int64_t     n_prompt;         /* prompt tokens */
    int64_t     n_reused;         /* tokens whose state came from the cache */
    int64_t     n_prefilled;      /* tokens prefilled in the reused run */
    double      ttft_cold_ms;     /* cold prefill to first-token logits, ms */
    double      ttft_reuse_ms;    /* lookup + restore + prefill, ms */
                                  /* (with --repeat N > 1: the median of N timings of each) */
    double      ttft_cold_min_ms, ttft_cold_max_ms;    /* the fastest and slowest of the N */
    double      ttft_reuse_min_ms, ttft_reuse_max_ms;
    double      model_cold_ms;    /* modeled TTFT: flops_cold priced at the run's price_gflops */
    double      model_reuse_ms;   /* flops_reuse and bytes_restored priced at price_gflops, price_restore_gbs */
    bool        logits_equal;     /* last prompt token's logits memcmp-equal */
    int64_t     first_diff_index; /* first differing logit index, -1 when equal */
    float       a_first, b_first; /* cold and reused logit there (stored as %a text) */
    uint64_t    ulp_first;        /* ULP distance there */
    double      max_abs_diff;     /* max |cold - reused| over the vocabulary */
    uint64_t    max_ulp;          /* max ULP distance over the vocabulary */
    double      kl;               /* KL(cold || reused), nats */
    bool        top1_equal;       /* argmax agrees */
    int64_t     fork_step;        /* first decode step whose greedy tokens differ, -1: none */
    bool        decode_equal;     /* every decode step's logits memcmp-equal */
    int64_t     state_equal;      /* sequence state after the prompt byte-identical (XXH3-64 of
                                     the serialized state): 1, 0, or -1 (not compared: NULL) */
    uint64_t    state_hash_cold;  /* those hashes, stored as 16 hex digits when compared */
    uint64_t    state_hash_reuse;
    int64_t     n_decode;         /* decode steps compared */
    double      flops_cold;       /* cost model: FLOPs of the cold prefill */
    double      flops_reuse;      /* cost model: FLOPs of the reused prefill */
    int64_t     bytes_restored;   /* bytes of state copied from the cache */
    double      sim;              /* slot similarity of the chosen slot */
    double      f_keep;           /* fraction of the cached prefix kept */
    int64_t     slot;             /* chosen slot */
    int64_t     lcp;              /* tokens in common with the best cached prefix */
    int64_t     miss_pos;         /* token position where the prompt leaves that prefix */
    int64_t     miss_byte;        /* byte offset of it in the rendered prompt */
    const char *miss_text;        /* text around the miss */
    const char *miss_where;       /* e.g. "system[0]", "message 3 block 0 (tool_result)" */
    int64_t     n_checkpoints;    /* checkpoints held after the request */
    int64_t     ckpt_bytes;       /* their bytes */
    int64_t     n_stored;         /* checkpoints/files written after this request */
    int64_t     bytes_stored;     /* their bytes */
    int64_t     stable_end;       /* token position where system + tools end */
    int64_t     anchor_pos;       /* disk-anchor: position of the anchor written */
    bool        cold_shared;      /* cold result taken from the shared cold cache */
    double      restore_ms;       /* time to restore cached state, ms */
    double      store_ms;         /* time to store checkpoints/anchors, ms */
    double      anchor_ms;        /* disk-anchor: time writing the anchor, ms */
    const char *note;             /* the policy's note on the reuse decision */
    const char *extra;            /* JSON with policy-specific figures, or NULL */
    int64_t     cache_bytes;      /* bytes the cache holds after the request (-1: not reported) */
    int64_t     cache_entries;    /* its entries then: blocks, nodes, checkpoints, files (-1: not reported) */
    bool        verified;         /* compared with its cold run (default); false: kvreplay serve without
                                     --verify, whose cold columns are NULL and whose logits_equal,
                                     top1_equal and decode_equal (0) say nothing */
    /* kvreplay probe (NULL-able; -1 / NULL in every other row) */
    int64_t     reuse_expected;   /* tokens the server should have reused (its cap rule on the common prefix) */
    int64_t     reuse_reported;   /* tokens it says it reused; -1: it reports nothing (NULL, never 0) */
    const char *reuse_basis;      /* how the prompt's tokens were known: "sent ids", "server tokenization",
                                     "kvreplay rendering"; NULL: not exactly (reuse not checked) */
    int64_t     n_prompt_local;   /* tokens of kvreplay's own rendering (with -m) */
    const char *prompt_diff;      /* where the server's tokens and kvreplay's differ, or NULL */
    int64_t     json_equal;       /* first position's probabilities: the JSON text byte-identical (1/0) */
    int64_t     n_probs;          /* candidates compared per position (0: the API gives none) */
    const char *error;            /* what the server did wrong: refused, timeout, cut, http, malformed, field,
                                     model, ...; NULL when nothing */
    const char *error_message;    /* its one-line message */
    int64_t     http_status;      /* the HTTP status of the failed exchange (-1: none) */
    /* replay --batch-check K (NULL-able; -1 in every other row): the request computed again from an
     * empty state inside steps with K other sequences, its logit rows (the prompt's last token's, then
     * each greedy decode step's) against the cold run's, alone */
    int64_t     batch_k;          /* the other sequences, K */
    int64_t     batch_equal;      /* every row memcmp-equal: 1, 0 */
    int64_t     batch_first_diff; /* first differing index into the rows compared (step * V + token), -1: equal */
    int64_t     batch_ulp_first;  /* the ULP distance there */
    int64_t     batch_max_ulp;    /* the largest over every row compared */
} hx_request_row;

/* One `steps` row (session and turn come from the request). */
typedef struct hx_step_row {
    int32_t  step;             /* 0-based decode step */
    int32_t  token_cold;       /* greedy token of the cold run */
    int32_t  token_reuse;      /* greedy token of the reused run */
    bool     logits_equal;     /* memcmp-equal */
    double   max_abs_diff;
    uint64_t max_ulp;
    int64_t  first_diff_index; /* -1 when equal (a_first, b_first, ulp_first -> NULL) */
    float    a_first, b_first; /* stored as %a text */
    uint64_t ulp_first;
    double   kl;               /* NaN -> NULL */
} hx_step_row;

void hx_request_row_init(hx_request_row *r);
void hx_step_row_init(hx_step_row *r);
/* Copy a comparison's figures: logits_equal, first_diff_index, a_first,
 * b_first, ulp_first, max_abs_diff, max_ulp, kl, top1_equal (request only). */
void hx_request_row_set_cmp(hx_request_row *r, const hx_cmp *c);
void hx_step_row_set_cmp(hx_step_row *r, const hx_cmp *c);

/* Writes row and its n_steps steps (steps may be NULL when n_steps == 0) in
 * one transaction: all rows or none. A request already stored, a duplicate
 * step number, a missing required field or an unknown run_id is ENG_ERR_ARG
 * (and nothing of this request is written). */
int hx_store_put_request(hx_store *s, int64_t run_id, const hx_request_row *row,
                         const hx_step_row *steps, int32_t n_steps, char *err, size_t errlen);

// ----------------------------------------------------------------------------
// Small helpers shared with the report

/* Current UTC time as "YYYY-MM-DDTHH:MM:SS.mmmZ" into buf (>= 25 bytes). */
void hx_store_utc_now(char *buf, size_t cap);

#endif /* HX_STORE_H */
