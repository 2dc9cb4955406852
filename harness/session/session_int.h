/*
 * harness/session/session_int.h: what the files of the session core share:
 * the session itself (session.c: opening, the policy, the cold shadow, the
 * state hash), and what a turn in progress needs of it (turn.c: the turn's
 * state machine and its row). Internal to harness/session/.
 */
#ifndef HX_SESSION_INT_H
#define HX_SESSION_INT_H

#include <stdbool.h>
#include <stdint.h>

#include "calibrate.h"
#include "coldcache.h"
#include "model.h"
#include "params.h"
#include "policy.h"
#include "prepare.h"
#include "store.h"

typedef struct hx_session hx_session;

/* A turn's buffers, sized for the session (kept for the next turn when it ends). */
typedef struct session_bufs {
    struct session_bufs *next;    /* the list of spares */
    float          *reuse_logits; /* (n_rows, V) the reused run's rows */
    float          *gen_logits;   /* (V) a generated step past the compared rows */
    int32_t        *greedy;       /* (n_rows) the reused run's greedy tokens */
    hx_step_row    *steps;        /* (n_rows) */
    hx_cold_result  scratch;      /* the cold result when not shared */
} session_bufs;

struct hx_session {
    const hx_session_params *sp;
    hx_session_totals    *sum;
    hx_session_totals     own_sum;    /* when the caller keeps none */
    const char     *transcript;   /* the rows' transcript column (borrowed) */
    unsigned        quirks;
    eng_model      *m;
    hx_prepare_ctx *pc;
    hx_policy      *pol;
    eng_seq        *cold_seq;
    hx_coldcache   *cold;
    hx_store       *store;
    int64_t         run_id;
    int32_t         n_ctx;
    int32_t         V;
    int32_t         n_rows;       /* logit rows compared: max(1, decode_n) */
    float          *rep_logits;   /* (V) a repetition's logits (--repeat) */
    eng_batch      *batch;        /* hx_session_turn's steps (one span each) */
    session_bufs   *spare;        /* finished turns' buffers, kept for the next (a list) */
    struct { void *p; size_t cap; } sbuf;  /* serialized state, for state_hash */
    /* --batch-check K (batchcheck.c makes them at its first check; session.c frees them): the target
     * and K fillers, their tokens, the target's rows */
    eng_batch      *bc_batch;
    eng_seq       **bc_seq;       /* (K + 1): [0] the target */
    int32_t        *bc_tok;       /* (K + 1, bc_len): filler i's ids of the step */
    int32_t         bc_len;
    float          *bc_logits;    /* (n_rows, V) */
    eng_batch_span *bc_spans;     /* (K + 1) */
    bool            fault_planted;
    hx_calibration  price;        /* what the modeled TTFT is priced at */
};

/* A turn's buffers: a spare one, or new (NULL on OOM); given back when the turn ends. */
session_bufs *session_bufs_take(hx_session *x);
void          session_bufs_give(hx_session *x, session_bufs *b);
/* XXH3-64 of s's serialized state into *out (never 0: 0 is "not taken"). */
int  session_state_hash(hx_session *x, const eng_seq *s, uint64_t *out);
/* Median, min and max of t[0, n) (seconds). */
void session_timing_stats(const double *t, int n, double *med, double *mn, double *mx);
/* ENG_ERR_MISMATCH with err saying which repetition of --repeat gave other bits. */
int  session_repeat_differs(char *err, size_t errlen, const char *what, int rep, const float *a, const float *b,
                            int32_t V, bool state);
/* The cold result of p: from the shared cold cache (*shared), or computed
 * into scratch (and shared when a cache is set); idx: the turn's req_index
 * (the repeat-flip fault). */
int  session_cold_result(hx_session *x, int32_t idx, const hx_prepared *p, hx_cold_result *scratch,
                         const hx_cold_result **out, bool *shared, char *err, size_t errlen);

/* The batch verdict of one request (--batch-check K). */
typedef struct hx_batch_verdict {
    int32_t  k;
    bool     equal;
    int64_t  first_diff;   /* index into the rows (step * V + token), -1: equal */
    uint64_t ulp_first, max_ulp;
    double   ms;           /* the steps' wall time */
    int64_t  rows;         /* the rows they computed (every span's tokens) */
} hx_batch_verdict;

/* p computed again inside steps with K seeded fillers, its rows against cold's (see batchcheck.c). */
int  session_batch_check(hx_session *x, int32_t idx, const hx_prepared *p, const hx_cold_result *cold,
                         hx_batch_verdict *v, char *err, size_t errlen);

#endif /* HX_SESSION_INT_H */
