/*
 * harness/traces/timemodel.h: what simulate's modeled time costs: a prefill
 * of n tokens after n_past reused ones, a restore of reused state from a
 * local cache or a global pool, a decode step (docs/traces.md, "Time").
 *
 *   prefill_ms(n_past, n) = (flops_token * n + flops_pair * pairs) / gflops
 *       pairs = n * n_past + n (n + 1) / 2, the causal (query, key) pairs
 *   restore_ms(tokens)    = tokens * kv_bytes_token / GB/s of the tier
 * Two sources of figures:
 *   a named profile: a published model shape on a published device, at an
 *     assumed model-FLOPs utilisation, every figure with its source in
 *     hx_time_profile_list (below) and docs/traces.md;
 *   a kvreplay model (-m): the engine's own cost model
 *     (eng_model_prefill_flops_params) priced at the model's calibration in
 *     results/calibration.json (calibrate.h: measured once, then reused), its
 *     restore GB/s for both tiers unless given.
 * Everything is deterministic: the same trace and figures give the same times.
 */
#ifndef HX_TIMEMODEL_H
#define HX_TIMEMODEL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "model.h"

typedef struct hx_time_model {
    char    name[64];          /* profile name, or "model:PATH" */
    double  gflops;            /* effective prefill rate, GFLOP/s */
    double  flops_token;       /* FLOPs per prompt token, context-free part */
    double  flops_pair;        /* FLOPs per (query, key) pair over all layers */
    double  kv_bytes_token;    /* KV and state bytes per token: capacity in bytes, restores */
    double  restore_gbs;       /* local cache -> accelerator, GB/s */
    double  transfer_gbs;      /* global pool -> accelerator, GB/s */
    double  tpot_ms;           /* one decode step */
    const eng_model   *model;  /* priced with the engine's cost model when not NULL */
    eng_prefill_params pp;
    char    source[640];       /* where the figures come from, in words */
} hx_time_model;

/* The named profiles, NULL-terminated (for --help and the docs). */
typedef struct hx_time_profile {
    const char *name;
    const char *what;     /* one line */
    hx_time_model m;
} hx_time_profile;
const hx_time_profile *hx_time_profile_list(void);
const char *hx_time_profile_names(void);  /* "a, b" (static) */

/* The profile named name into *out: ENG_OK or ENG_ERR_ARG (message in err). */
int hx_time_profile_get(const char *name, hx_time_model *out, char *err, size_t errlen);
/* Figures from a kvreplay model m under pp (its align, chunk, ubatch) and
 * numerics num, priced at calibration (a reference file; the entry is
 * measured and added when missing: calibrate.h). ENG_OK or the calibration's
 * error. */
int hx_time_from_model(const eng_model *m, const char *model_path, const eng_prefill_params *pp,
                       const char *calibration, hx_time_model *out, char *err, size_t errlen);

double hx_time_prefill_ms(const hx_time_model *t, int64_t n_past, int64_t n);
/* Restoring tokens of state: from the global pool (remote) or a local cache. */
double hx_time_restore_ms(const hx_time_model *t, int64_t tokens, bool remote);

#endif /* HX_TIMEMODEL_H */
