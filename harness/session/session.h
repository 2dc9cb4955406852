/*
 * harness/session/session.h: the request core. One request through the
 * engine and the cache policy under test, the way replay, check, experiment,
 * serve and probe's local rendering all see it: a request served and the
 * same request replayed are the same tokens and write the same rows.
 *
 * A session holds the model, the prompt preparation (template, --normalize),
 * the policy, the cold sequence and where its rows go. Its configuration is
 * hx_session_params: what a request needs, and nothing of the command that
 * runs it (replay's transcript and resume, serve's listen address, probe's
 * server embed it and add their own).
 *
 * A turn (hx_session_turn):
 *   1. reused: hint and acquire through the policy, prefill the rest on the
 *      grid (timed, --repeat N times when asked), the state after the prompt
 *      hashed;
 *   2. when comparing: the cold shadow (fresh state, the whole prompt, or the
 *      shared cold cache) and its logits and state compared byte for byte;
 *   3. gen->on_prompt: the time to first token is known, and with comparing
 *      whether the prompt came out bit-identical;
 *   4. greedy decode: the compared steps (decode_n) and, for a client
 *      (gen->max_tokens), the generated tokens, each given to gen->on_token,
 *      which can stop or cancel;
 *   5. the response teacher-forced: the request's own (a replayed or scripted
 *      turn) or the one gen->on_response makes of the generated tokens,
 *      rendered and tokenized here (the one place a turn's response enters
 *      the prompt pipeline); decoded rows that fed the response's own tokens
 *      are kept, the rest rolled back and recomputed; then the policy keeps
 *      what it keeps;
 *   6. one requests row and its steps rows, in one transaction.
 * The cold shadow runs after the reused prefill, so a client's first byte
 * does not wait for a cold run (the bits do not depend on the order:
 * separate sequences).
 *
 * A turn in steps (hx_turn_begin .. hx_turn_end, turn.c): the same turn as
 * a state machine whose engine work is handed out one span at a time (a
 * grid chunk of the prompt, or one decode token), so that a scheduler can
 * put the spans of several turns into one eng_batch_forward step (serve
 * --parallel N); hx_session_turn is its loop with one span per step. Steps
 * 1 and 2-4's bookkeeping run in hx_turn_after_step (the policy's on_chunk
 * at each chunk end, the TTFT and the cold shadow after the last chunk,
 * on_prompt, on_token per decoded row), 5 and 6 in hx_turn_end.
 *
 * Threads: a session is used by one thread at a time.
 */
#ifndef HX_SESSION_H
#define HX_SESSION_H

#include <stdbool.h>
#include <stdint.h>

#include <stdio.h>

#include "coldcache.h"
#include "compare.h"
#include "model.h"
#include "params.h"
#include "policy.h"
#include "prepare.h"
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
    hx_prepared       *p;         /* hx_prepare of req (the prompt; the response when known) */
    bool               new_response; /* req's response was set after hx_prepare (a scripted turn):
                                        the turn renders and tokenizes it first */
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
    int     batch_equal;          /* --batch-check: the rows in a batch equal the cold ones: 1, 0, -1 not checked */
    int32_t n_generated;
    bool    cancelled;
    int32_t slot;                 /* the slot the policy chose, -1: none */
} hx_turn_result;

/* Loads p's model and its prompt preparation (template, normalize) and checks
 * p's quirks. ENG_OK, or an ENG_ status with a message in err (the model's
 * loader, ENG_ERR_ARG for a bad template, rule or quirk). tot (may be NULL)
 * receives the totals of every turn. p and tot must outlive the session. */
int  hx_session_open(const hx_session_params *p, hx_session_totals *tot, hx_session **out, char *err, size_t errlen);
void hx_session_close(hx_session *s);  /* accepts NULL; does not close a store it was given */

const eng_model *hx_session_model(const hx_session *s);
hx_prepare_ctx  *hx_session_prepare(hx_session *s);
hx_policy       *hx_session_policy(hx_session *s);   /* NULL before hx_session_start */
int32_t          hx_session_n_ctx(const hx_session *s);
bool             hx_session_fault_planted(const hx_session *s);

/* Creates the policy (p's policy, quirks and policy options) and the cold
 * sequence for n_ctx positions; cold (may be NULL) is the shared cold cache;
 * resume: the run completes an interrupted one (a policy keeps stored state);
 * n_parallel: turns in flight at once at most (serve --parallel; 1 for a
 * replay). A shared cold cache serves one turn at a time. */
int  hx_session_start(hx_session *s, int32_t n_ctx, hx_coldcache *cold, bool resume, int32_t n_parallel, char *err,
                      size_t errlen);
/* The run's calibration: measured now, and the modeled TTFT priced at it or
 * at p->calibration's reference entry; fills meta's calib and price fields
 * (source: a buffer the meta points to, at least 600 bytes). */
int  hx_session_calibrate(hx_session *s, hx_run_meta *meta, char *source, size_t source_cap, char *err,
                          size_t errlen);
/* Initializes meta and fills its configuration columns from p and the loaded
 * model; extra (a buffer of extra_cap bytes meta->extra points to) gets the
 * JSON members anchor_tokens and n_ctx_arg, then more (a JSON object's
 * members, or NULL). The caller adds the run's identity (transcript,
 * experiment, shard). */
void hx_session_fill_meta(hx_session *s, int32_t n_ctx, int32_t n_ctx_arg, int64_t n_requests, const char *more,
                          hx_run_meta *meta, char *extra, size_t extra_cap);
/* Where turns write their rows (NULL: nowhere), and the transcript the rows
 * name (borrowed); the price a resumed run keeps. */
void hx_session_set_store(hx_session *s, hx_store *store, int64_t run_id, const char *transcript);
void hx_session_set_price(hx_session *s, double gflops, double restore_gbs);

/* One request (see the file comment); compared when p->verify. ENG_OK;
 * ENG_ERR_MISMATCH (a --repeat repetition gave other bits); ENG_ERR_RANGE
 * (a new response that does not fit the context, before anything ran);
 * ENG_ERR_ARG (a fault that cannot be planted, a row the store refuses: err
 * says); or the engine's status. */
int  hx_session_turn(hx_session *s, const hx_turn *t, hx_turn_result *r, char *err, size_t errlen);

/* A turn in steps (see the file comment). Several may be in flight on one
 * session, up to the policy's n_parallel (hx_session_start); the caller runs
 * their spans with eng_batch_forward under hx_session_batch_params and one
 * thread drives them all. t's pointers (req, p, gen, note, extra) must stay
 * valid until hx_turn_end or hx_turn_abort. */
typedef struct hx_turn_run hx_turn_run;

/* The step parameters of every turn's spans: the session's C, align, ubatch. */
eng_batch_params hx_session_batch_params(const hx_session *s);
/* Renders a new response (t->new_response) and acquires through the policy:
 * ENG_OK with *out; ENG_ERR_RANGE for a response that does not fit, or when
 * the policy has no room (a slot a request in flight holds: wait for it);
 * else hx_session_turn's errors. Nothing to release on error. */
int  hx_turn_begin(hx_session *s, const hx_turn *t, hx_turn_run **out, char *err, size_t errlen);
/* The turn's span for the next step into *span (a grid chunk of the prompt,
 * or one decode token, with the turn's own logits buffer); false when it
 * needs no more steps (call hx_turn_end). */
bool hx_turn_span(hx_turn_run *r, eng_batch_span *span);
/* After the step that ran the span: the policy's on_chunk, and at the
 * prompt's end the TTFT, the cold shadow and on_prompt; a decoded row's
 * token to on_token. ENG_OK, or an error (then hx_turn_abort). */
int  hx_turn_after_step(hx_turn_run *r, char *err, size_t errlen);
/* The client went away (between steps: a chunk boundary): no more spans;
 * hx_turn_end then keeps what is valid (the prompt so far, or the prompt and
 * what was generated) and writes the row. */
void hx_turn_cancel(hx_turn_run *r);
/* Teacher-forces the response, releases, writes the row; frees r whatever
 * it returns. ENG_OK, or the release's, the response's or the store's error. */
int  hx_turn_end(hx_turn_run *r, hx_turn_result *res, char *err, size_t errlen);
/* After an error: releases what is valid, no row; frees r. */
void hx_turn_abort(hx_turn_run *r);
/* Where it stands: tokens its sequence holds; in its prompt still; no more
 * steps wanted (call hx_turn_end); its policy slot (-1: none). */
int32_t hx_turn_n_tokens(const hx_turn_run *r);
bool    hx_turn_prefilling(const hx_turn_run *r);
bool    hx_turn_done(const hx_turn_run *r);
int32_t hx_turn_slot(const hx_turn_run *r);

#endif /* HX_SESSION_H */
