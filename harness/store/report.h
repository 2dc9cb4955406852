/*
 * harness/store/report.h: summaries of a results database (harness/store/store.h):
 * the markdown and JSON of `kvreplay report`, the verdict of `kvreplay
 * check`, and per-experiment tables for REPORT.md.
 *
 * Figures of one run (hx_run_summary), all over its `requests` rows:
 *   reuse fraction   sum(n_reused) / sum(n_prompt)
 *   TTFT p50, p95    GSL quantiles (gsl_stats_quantile_from_sorted_data, i.e.
 *                    linear interpolation between order statistics) of the
 *                    non-NULL ttft_cold_ms and ttft_reuse_ms, in ms
 *   speedup p50      TTFT p50 cold / TTFT p50 reused
 *   bit-identical    logits_equal = 1 AND decode_equal = 1 AND state_equal is not 0,
 *                    % of requests
 *   forked           fork_step IS NOT NULL, % of requests
 *   max ULP          max ULP distance over the last prompt token's logits and
 *                    the decode steps up to and including fork_step (all of
 *                    them when it never forks): the logits computed from the
 *                    same context in both runs (a steps row holds the logits
 *                    that chose that step's tokens)
 *   cost             sum(flops_cold), sum(flops_reuse) / 1e9, GFLOP
 *   modeled p50      p50 of model_cold_ms and model_reuse_ms (the modeled
 *                    TTFT: FLOPs and restored bytes priced at the run's
 *                    calibration; identical from run to run when priced at a
 *                    reference calibration)
 * A figure with nothing to measure (no requests, all NULL) is NaN (-1 for
 * max ULP): "-" in markdown, null in JSON.
 *
 * Every function reads only; none changes the database. Errors: negative
 * eng_status with a message naming the database in err (ENG_ERR_NOT_FOUND
 * for an unknown run or experiment, ENG_ERR_IO for sqlite failures).
 *
 * Usage:
 *     hx_store *st;  hx_store_open_readonly("out.sqlite", &st, err, sizeof err);
 *     hx_report_markdown(st, 0, stdout, err, sizeof err);     // every run
 *     int d = hx_report_first_divergence(st, run, stdout, err, sizeof err);
 *     // d == 1: "DIVERGED: ..." printed; d == 0: "OK: ..." printed; d < 0: error
 */
#ifndef HX_REPORT_H
#define HX_REPORT_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include <jansson.h>

#include "store.h"

typedef struct hx_run_summary {
    int64_t run_id;
    int64_t n_requests;          /* requests rows */
    int64_t n_prompt_tokens;     /* sum(n_prompt) */
    int64_t n_reused_tokens;     /* sum(n_reused) */
    int64_t n_prefilled_tokens;  /* sum(n_prefilled) */
    double  reuse_fraction;      /* n_reused_tokens / n_prompt_tokens */
    double  ttft_cold_p50_ms, ttft_cold_p95_ms;
    double  ttft_reuse_p50_ms, ttft_reuse_p95_ms;
    double  speedup_p50;         /* ttft_cold_p50_ms / ttft_reuse_p50_ms */
    double  model_cold_p50_ms;   /* p50 of model_cold_ms: the modeled TTFT (deterministic; NaN when none) */
    double  model_reuse_p50_ms;  /* p50 of model_reuse_ms */
    int64_t n_verified;          /* rows compared with their cold run (all but serve's without --verify) */
    int64_t n_identical;         /* of those: logits_equal AND decode_equal (and the state) */
    int64_t n_logits_equal;      /* of those: logits_equal */
    int64_t n_forked;            /* fork_step IS NOT NULL */
    double  pct_identical;       /* 100 * n_identical / n_verified (NaN when none was compared) */
    double  pct_forked;          /* 100 * n_forked / n_requests */
    int64_t max_ulp;             /* see above; -1 when nothing was compared */
    double  gflop_cold, gflop_reuse;
} hx_run_summary;

/* Computes the figures of run_id (which must exist: ENG_ERR_NOT_FOUND). */
int hx_report_summarize(hx_store *s, int64_t run_id, hx_run_summary *out, char *err,
                        size_t errlen);

/* Markdown: a title, then per run (run_id <= 0: every run, in run_id order)
 * a "### Run N ..." header line with its configuration and a one-row table
 * of the figures above. */
int hx_report_markdown(hx_store *s, int64_t run_id, FILE *out, char *err, size_t errlen);

/* {"db": PATH, "runs": [{run_id, experiment, variant, ..., figures}]} for
 * run_id (<= 0: every run) and, when experiment is not NULL, only that
 * experiment's runs. *out is a new reference the caller json_decref()s. */
int hx_report_json(hx_store *s, int64_t run_id, const char *experiment, json_t **out,
                   char *err, size_t errlen);

/* Markdown for one experiment: "## Experiment NAME" and one table with a
 * row per run, grouped by variant (ordered by variant, sweep_value, run_id).
 * ENG_ERR_NOT_FOUND when no run has that experiment. */
int hx_report_experiment(hx_store *s, const char *experiment, FILE *out, char *err,
                         size_t errlen);

/* The verdict of `kvreplay check` for run_id (<= 0: the latest run).
 * When some request is not bit-identical (logits_equal AND decode_equal),
 * prints the first one in replay order (req_index) as
 *   DIVERGED: session S turn T (request i): logits differ at index I:
 *   cold=%a reused=%a (ULP distance U, max |diff| M); greedy fork at step K
 * (one line; "decode step K logits differ ..." when only a decode step
 * differs; "greedy tokens never fork" when fork_step is NULL) and returns 1.
 * Otherwise prints "OK: N requests, all bit-identical to cold" and returns 0.
 * Negative on error (nothing printed). */
int hx_report_first_divergence(hx_store *s, int64_t run_id, FILE *out, char *err,
                               size_t errlen);

/* The same verdict as JSON: {"db", "run_id", "ok", "n_requests",
 * "n_diverged", "message" (the line above), "first_divergence": null or
 * {"session", "turn", "req_index", "where": "logits"|"decode", "step",
 * "index", "cold", "reused", "ulp", "max_abs_diff", "max_ulp", "fork_step"}}.
 * Returns 1, 0 or negative like hx_report_first_divergence; *out (new
 * reference) is set only on success. */
int hx_report_check_json(hx_store *s, int64_t run_id, json_t **out, char *err, size_t errlen);

/* hx_report_check_json printed to out (indented, one object, newline). */
int hx_report_first_divergence_json(hx_store *s, int64_t run_id, FILE *out, char *err,
                                    size_t errlen);

#endif /* HX_REPORT_H */
