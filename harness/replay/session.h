/*
 * harness/replay/session.h: one request through the engine and the cache
 * policy under test, the way `replay` runs it and `serve` answers it: one
 * engine path, so a request served and the same request replayed are the
 * same tokens and write the same rows.
 *
 * A session holds the model, the prompt preparation (template, --normalize),
 * the policy, the cold sequence and the results store of one run. Its turn
 * (hx_session_turn) is the replay loop's per-request core:
 *   1. reused: hint and acquire through the policy, prefill the rest (timed,
 *      --repeat N times when asked), the state after the prompt hashed;
 *   2. when comparing: the cold shadow (fresh state, the whole prompt, or the
 *      shared cold cache) and its logits and state compared byte for byte;
 *   3. gen->on_prompt: the time to first token is known, and with comparing
 *      whether the prompt came out bit-identical;
 *   4. greedy decode: the compared steps (decode_n) and, for a client
 *      (gen->max_tokens), the generated tokens, each given to gen->on_token,
 *      which can stop or cancel; then rolled back to the prompt;
 *   5. the response teacher-forced (the transcript's recorded turn, or the
 *      turn gen->on_response makes of the generated tokens, rendered by the
 *      chat template and tokenized after the prompt), then the policy keeps
 *      what it keeps;
 *   6. one requests row and its steps rows, in one transaction.
 * Steps 2 to 6 are what replay.h describes; the cold shadow runs after the
 * reused prefill, so a client's first byte does not wait for a cold run
 * that will not be compared (the bits do not depend on the order: separate
 * sequences).
 *
 * Threads: a session is used by one thread at a time.
 */
#ifndef HX_SESSION_H
#define HX_SESSION_H

#include <stdbool.h>
#include <stdint.h>

#include "coldcache.h"
#include "compare.h"
#include "model.h"
#include "policy.h"
#include "prepare.h"
#include "replay.h"
#include "store.h"

typedef struct hx_session hx_session;

/* What the turn knows once the prompt is done (gen->on_prompt). */
typedef struct hx_turn_status {
    int32_t n_prompt, n_reused;
    double  ttft_ms;          /* the reused prefill: lookup, restore and prefill of the rest */
    bool    compared;         /* a cold shadow ran */
    bool    logits_equal;     /* the last prompt token's logits memcmp-equal cold vs reused */
    int     state_equal;      /* the state after the prompt equal by hash: 1, 0, or -1 (not compared) */
    const hx_acquire *acq;    /* the policy's decision (slot, note, ...) */
} hx_turn_status;

enum { HX_TURN_GO = 0, HX_TURN_STOP = 1, HX_TURN_CANCEL = 2 };

/* A client's generation (kvreplay serve); NULL for a replay. */
typedef struct hx_turn_gen {
    int32_t max_tokens;       /* tokens to generate greedily (0: none) */
    /* after the prompt (and the comparison of its logits): HX_TURN_CANCEL stops the turn */
    int   (*on_prompt)(void *ud, const hx_turn_status *st);
    /* generated token k (id, its logits row of V floats): HX_TURN_GO, HX_TURN_STOP (the turn
     * ends: EOS, a stop string; the compared steps are still decoded) or HX_TURN_CANCEL (the
     * client went away: nothing more is decoded) */
    int   (*on_token)(void *ud, int32_t k, int32_t id, const float *logits);
    /* after decoding: sets req's response to the turn the client got (then teacher-forced);
     * NULL: the request's response stands (a scripted turn) */
    int   (*on_response)(void *ud, hx_request *req);
    void   *ud;
} hx_turn_gen;

typedef struct hx_turn {
    int32_t            idx;       /* req_index; --inject-fault plants on idx == fault_request */
    hx_request        *req;       /* session, turn; its response may be set by gen->on_response */
    hx_prepared       *p;         /* hx_prepare of req */
    bool               compare;   /* run the cold shadow and compare (replay: always) */
    bool               warm_only; /* --resume: through the policy only: no decode, no cold, no row */
    hx_acquire_hint    hint;      /* id_slot -1 and no_reuse false for a replayed request */
    const hx_turn_gen *gen;
    const char        *note;      /* appended to the row's note (e.g. serve's sampling note), or NULL */
    const char        *extra;     /* a JSON object's members appended to the row's extra, or NULL */
} hx_turn;

typedef struct hx_turn_result {
    int32_t n_prompt, n_reused;
    double  ttft_ms, decode_ms;   /* reused prefill; decoding the generated tokens */
    bool    compared;
    bool    identical;            /* compared and bit-identical (logits, decode steps, state) */
    int64_t fork_step;            /* -1: the greedy tokens never forked */
    bool    logits_equal;         /* the prompt's last logits memcmp-equal (compared only) */
    hx_cmp  cmp;                  /* their comparison: first differing index, values, ULP */
    int     state_equal;          /* the state after the prompt: 1, 0, -1 not compared */
    int32_t first_step_diff;      /* the first decode step whose logits differ, -1: none */
    int32_t n_generated;
    bool    cancelled;
    int32_t slot;                 /* the slot the policy chose, -1: none */
} hx_turn_result;

/* Loads o's model and its prompt preparation (template, normalize) and checks
 * o's quirks. ENG_OK, or an ENG_ status with a message in err (the model's
 * loader, ENG_ERR_ARG for a bad template, rule or quirk). sum (may be NULL)
 * receives the totals of every turn. o and sum must outlive the session. */
int  hx_session_open(const hx_replay_opts *o, hx_replay_summary *sum, hx_session **out, char *err, size_t errlen);
void hx_session_close(hx_session *s);  /* accepts NULL; does not close a store it was given */

const eng_model *hx_session_model(const hx_session *s);
hx_prepare_ctx  *hx_session_prepare(hx_session *s);
hx_policy       *hx_session_policy(hx_session *s);   /* NULL before hx_session_start */
int32_t          hx_session_n_ctx(const hx_session *s);
bool             hx_session_fault_planted(const hx_session *s);

/* Creates the policy (o's policy, quirks and policy options) and the cold
 * sequence for n_ctx positions; cold (may be NULL) is the shared cold cache. */
int  hx_session_start(hx_session *s, int32_t n_ctx, hx_coldcache *cold, char *err, size_t errlen);
/* The run's calibration: measured now, and the modeled TTFT priced at it or
 * at o->calibration's reference entry; fills meta's calib and price fields
 * (source: a buffer the meta points to, at least 600 bytes). */
int  hx_session_calibrate(hx_session *s, hx_run_meta *meta, char *source, size_t source_cap, char *err,
                          size_t errlen);
/* Fills meta's configuration columns from o and the loaded model (extra: a
 * buffer of extra_cap bytes meta->extra points to). */
void hx_session_fill_meta(hx_session *s, int32_t n_ctx, int64_t n_requests, hx_run_meta *meta, char *extra,
                          size_t extra_cap);
/* Where turns write their rows (NULL: nowhere); the price a resumed run keeps. */
void hx_session_set_store(hx_session *s, hx_store *store, int64_t run_id);
void hx_session_set_price(hx_session *s, double gflops, double restore_gbs);

/* One request (see the file comment). ENG_OK; ENG_ERR_MISMATCH (a --repeat
 * repetition gave other bits); ENG_ERR_ARG (a fault that cannot be planted,
 * a row the store refuses: err says); or the engine's status. */
int  hx_session_turn(hx_session *s, const hx_turn *t, hx_turn_result *r, char *err, size_t errlen);

#endif /* HX_SESSION_H */
