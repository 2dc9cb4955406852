/*
 * harness/session/params.h: hx_session_params, what a request needs (the
 * model, its prompt preparation, the policy and its options, the engine's
 * numerics and grid, what a turn compares), which replay's, serve's and
 * probe's options embed; their defaults, options (params.c) and check; and
 * hx_session_totals, what a run's turns come to (session.h).
 */
#ifndef HX_PARAMS_H
#define HX_PARAMS_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "model.h"
#include "policy.h"

/* What a request needs: the model, its prompt preparation, the policy and
 * its options, the engine's numerics and grid, what a turn compares. */
typedef struct hx_session_params {
    const char   *model_path;      /* required */
    const char   *policy;          /* default "slot-lcp" */
    const char   *quirks;          /* comma-separated, default "" */
    const char   *normalize;       /* default "" */
    const char   *template_name;   /* NULL: from the model's metadata */
    eng_numerics  num;             /* default blas, fp32, 1 thread */
    eng_prefill_params pp;         /* chunk 64, align chunk, ubatch 512 */
    int32_t       decode_n;        /* greedy steps compared per turn (default 40) */
    bool          cap_prompt;      /* default true */
    int32_t       repeat;          /* prefills timed per compared turn, cold and reused (default 1) */
    bool          verify;          /* every turn compared with its cold shadow (default true; serve: --verify) */
    int32_t       batch_check;     /* K >= 0: each compared turn also computed inside steps with K other
                                      sequences and compared with its cold run (replay's --batch-check K;
                                      K 0: alone, through the same steps); -1 (default): not */
    uint64_t      batch_seed;      /* the fillers' offsets, modes, tokens and places (--batch-seed, default 1) */
    const char   *calibration;     /* reference calibration file pricing the modeled TTFT; NULL: the run's own */
    /* the policies' own options (--slots, --cache-dir, ...), by name: each
     * policy declares its own (cache/policies/) and takes those it declares */
    hx_policy_args policy_args;
    /* Fault injection, to prove the checkers catch what they must (tests):
     * "ulp-flip": the reused run's last-prompt logit at fault_index moves one ULP;
     * "kv-row": the restored KV row at n_reused - 1 is recomputed from another token;
     * "repeat-flip": with repeat > 1 the second cold repetition's logit moves one ULP;
     * "report-cached": serve reports one more cached token than it reused (for probe);
     * "batch-split-k": the steps of --batch-check (serve: every step of more than one span) reduce
     * the head's rows in two halves (eng_batch_set_fault), a batch-dependent fault.
     * Applied to turn idx == fault_request only. */
    const char   *fault;
    int32_t       fault_request;   /* default 1 */
    int32_t       fault_index;     /* default 0 */
    bool          quiet;           /* nothing on stderr but warnings */
} hx_session_params;

void hx_session_params_default(hx_session_params *p);
/* Takes the session option at argv[*i] (and its value): 1, 0 when it is not
 * one, ENG_ERR_ARG with err naming the flag for a bad value. */
int  hx_session_params_take(hx_session_params *p, int argc, char **argv, int *i, char *err, size_t errlen);
/* The session options' --help lines: what a request is and its policy (the
 * policies' quirks among them), then the engine's settings and the
 * policies' own options, then fault injection. */
void hx_session_params_help_policy(FILE *f);
void hx_session_params_help_engine(FILE *f);
void hx_session_params_help_faults(FILE *f);
/* ENG_OK, or ENG_ERR_ARG naming what is missing or inconsistent (no model,
 * unknown quirks for the policy). */
int  hx_session_params_check(const hx_session_params *p, char *err, size_t errlen);

/* What a session's turns came to, summed (a run's summary). */
typedef struct hx_session_totals {
    int32_t n_requests;       /* turns that wrote a row */
    int32_t n_diverged;       /* logits, a decode step or the state not bit-identical */
    int32_t n_forked;
    int64_t n_prompt, n_reused;
    double  engine_s;         /* time inside eng_prefill/eng_decode/restore */
    /* what the policy could not do (hx_acquire, hx_release), warm-up turns included */
    int64_t n_quarantined;    /* stored entries set aside as corrupt */
    int64_t n_fallbacks;      /* hits on a shorter entry after a longer one failed */
    int64_t n_store_failed;   /* checkpoints lost: the store failed (disk full, I/O, memory) */
} hx_session_totals;

#endif /* HX_PARAMS_H */
