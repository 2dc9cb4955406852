/*
 * harness/store/report.c: summaries of a results database: `kvreplay report`
 * (markdown and JSON), the verdict of `kvreplay check`, and per-experiment
 * tables. See report.h for the figures and their definitions.
 *
 * Reads only. Queries are prepared per call (a report runs a handful), and
 * every statement is finalized on the one exit path of its function.
 * Sums and counts come from SQL; percentiles from GSL on the sorted values.
 */
#include "report.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <gsl/gsl_sort.h>
#include <gsl/gsl_statistics_double.h>

#include "status.h"

// ----------------------------------------------------------------------------
// Small sqlite helpers

/* A request is bit-identical when its prompt logits, every decode step's
 * logits and (where compared) its state after the prompt are byte-equal. */
#define IDENTICAL                                                                                     \
    "(logits_equal = 1 AND decode_equal = 1 AND coalesce(state_equal, 1) = 1 AND coalesce(batch_equal, 1) = 1)"
/* A row compared with its cold run (every row but those of kvreplay serve without --verify). */
#define VERIFIED "coalesce(verified, 1) = 1"

static int sql_fail(hx_store *s, const char *what, char *err, size_t errlen) {
    eng_errf(err, errlen, "%s: %s: %s", hx_store_path(s), what, sqlite3_errmsg(hx_store_db(s)));
    return ENG_ERR_IO;
}

static int prepare(hx_store *s, const char *sql, sqlite3_stmt **st, const char *what, char *err,
                   size_t errlen) {
    if (sqlite3_prepare_v2(hx_store_db(s), sql, -1, st, NULL) != SQLITE_OK) {
        sqlite3_finalize(*st);
        *st = NULL;
        return sql_fail(s, what, err, errlen);
    }
    return ENG_OK;
}

/* Column accessors: NULL text -> NULL, NULL numbers -> NaN / -1. */
static const char *col_text(sqlite3_stmt *st, int i) {
    return (const char *)sqlite3_column_text(st, i);
}
static double col_real(sqlite3_stmt *st, int i) {
    return sqlite3_column_type(st, i) == SQLITE_NULL ? NAN : sqlite3_column_double(st, i);
}
static int64_t col_int(sqlite3_stmt *st, int i) {
    return sqlite3_column_type(st, i) == SQLITE_NULL ? -1 : sqlite3_column_int64(st, i);
}

/* A JSON string (NULL -> null; bytes that are not UTF-8 -> a marker). */
static json_t *jstr(const char *s) {
    if (!s) return json_null();
    json_t *v = json_string(s);
    return v ? v : json_string("(invalid UTF-8)");
}
static json_t *jreal(double v) { return isfinite(v) ? json_real(v) : json_null(); }
static json_t *jint(int64_t v) { return v >= 0 ? json_integer(v) : json_null(); }

// ----------------------------------------------------------------------------
// One run's figures

/* The p50 and p95 of a column's non-NULL values (NaN, NaN when none). */
static int percentiles(hx_store *s, int64_t run_id, const char *column, double *p50,
                       double *p95, char *err, size_t errlen) {
    char sql[256];
    snprintf(sql, sizeof sql, "SELECT %s FROM requests WHERE run_id = ?1 AND %s IS NOT NULL",
             column, column);
    sqlite3_stmt *st = NULL;
    double *v = NULL;
    size_t n = 0, cap = 0;
    int rc, status = prepare(s, sql, &st, "requests: reading TTFT", err, errlen);
    *p50 = *p95 = NAN;
    if (status != ENG_OK) return status;
    sqlite3_bind_int64(st, 1, run_id);
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        if (n == cap) {
            size_t nc = cap ? cap * 2 : 256;
            double *nv = realloc(v, nc * sizeof *nv);
            if (!nv) {
                eng_errf(err, errlen, "%s: requests: reading TTFT: out of memory", hx_store_path(s));
                status = ENG_ERR_NOMEM;
                goto out;
            }
            v = nv;
            cap = nc;
        }
        v[n++] = sqlite3_column_double(st, 0);
    }
    if (rc != SQLITE_DONE) {
        status = sql_fail(s, "requests: reading TTFT", err, errlen);
        goto out;
    }
    if (n > 0) {
        gsl_sort(v, 1, n);
        *p50 = gsl_stats_quantile_from_sorted_data(v, 1, n, 0.50);
        *p95 = gsl_stats_quantile_from_sorted_data(v, 1, n, 0.95);
    }
out:
    free(v);
    sqlite3_finalize(st);
    return status;
}

int hx_report_summarize(hx_store *s, int64_t run_id, hx_run_summary *out, char *err,
                        size_t errlen) {
    ENG_ASSERT(s != NULL && out != NULL);
    memset(out, 0, sizeof *out);
    out->run_id = run_id;
    sqlite3_stmt *st = NULL;
    int status = prepare(s,
        "SELECT (SELECT count(*) FROM runs WHERE run_id = ?1), count(*),"
        " total(n_prompt), total(n_reused), total(n_prefilled),"
        " total(" VERIFIED " AND " IDENTICAL "), total(" VERIFIED " AND logits_equal = 1),"
        " total(fork_step IS NOT NULL), total(" VERIFIED "),"
        " (SELECT max(m) FROM (SELECT max_ulp AS m FROM requests WHERE run_id = ?1"
        "   UNION ALL SELECT st.max_ulp FROM steps st JOIN requests rq USING(run_id, session, turn)"
        "   WHERE st.run_id = ?1 AND (rq.fork_step IS NULL OR st.step <= rq.fork_step))),"
        " sum(flops_cold), sum(flops_reuse)"
        " FROM requests WHERE run_id = ?1", &st, "requests: summarizing", err, errlen);
    if (status != ENG_OK) return status;
    sqlite3_bind_int64(st, 1, run_id);
    int rc = sqlite3_step(st);
    if (rc != SQLITE_ROW) {
        status = sql_fail(s, "requests: summarizing", err, errlen);
        goto out;
    }
    if (sqlite3_column_int64(st, 0) == 0) {
        eng_errf(err, errlen, "%s: runs: no run with run_id %lld", hx_store_path(s),
                 (long long)run_id);
        status = ENG_ERR_NOT_FOUND;
        goto out;
    }
    out->n_requests = sqlite3_column_int64(st, 1);
    out->n_prompt_tokens = (int64_t)sqlite3_column_double(st, 2);
    out->n_reused_tokens = (int64_t)sqlite3_column_double(st, 3);
    out->n_prefilled_tokens = (int64_t)sqlite3_column_double(st, 4);
    out->n_identical = (int64_t)sqlite3_column_double(st, 5);
    out->n_logits_equal = (int64_t)sqlite3_column_double(st, 6);
    out->n_forked = (int64_t)sqlite3_column_double(st, 7);
    out->n_verified = (int64_t)sqlite3_column_double(st, 8);
    out->max_ulp = col_int(st, 9);
    out->gflop_cold = col_real(st, 10) / 1e9;
    out->gflop_reuse = col_real(st, 11) / 1e9;
    out->reuse_fraction = out->n_prompt_tokens > 0
        ? (double)out->n_reused_tokens / (double)out->n_prompt_tokens : NAN;
    out->pct_identical = out->n_verified > 0
        ? 100.0 * (double)out->n_identical / (double)out->n_verified : NAN;
    out->pct_forked = out->n_requests > 0
        ? 100.0 * (double)out->n_forked / (double)out->n_requests : NAN;
    status = percentiles(s, run_id, "ttft_cold_ms", &out->ttft_cold_p50_ms,
                         &out->ttft_cold_p95_ms, err, errlen);
    if (status == ENG_OK)
        status = percentiles(s, run_id, "ttft_reuse_ms", &out->ttft_reuse_p50_ms,
                             &out->ttft_reuse_p95_ms, err, errlen);
    out->speedup_p50 = out->ttft_reuse_p50_ms > 0
        ? out->ttft_cold_p50_ms / out->ttft_reuse_p50_ms : NAN;
    double p95;
    if (status == ENG_OK)
        status = percentiles(s, run_id, "model_cold_ms", &out->model_cold_p50_ms, &p95, err, errlen);
    if (status == ENG_OK)
        status = percentiles(s, run_id, "model_reuse_ms", &out->model_reuse_p50_ms, &p95, err, errlen);
out:
    sqlite3_finalize(st);
    return status;
}

// ----------------------------------------------------------------------------
// The runs to report, with their configuration

/* Column order of RUNS_SELECT, read by the printers below. */
enum {
    RC_RUN_ID, RC_EXPERIMENT, RC_VARIANT, RC_MODEL_NAME, RC_MODEL_PATH, RC_POLICY, RC_QUIRKS,
    RC_NORMALIZE, RC_ALIGN, RC_CHUNK, RC_UBATCH, RC_KERNEL, RC_PRECISION, RC_THREADS,
    RC_DECODE_N, RC_STATUS, RC_STARTED_AT, RC_FINISHED_AT, RC_SWEEP_NAME, RC_SWEEP_VALUE,
    RC_TRANSCRIPT, RC_N_CTX, RC_CPU, RC_GIT_REV,
};

/* "NAME = VALUE" of a run's sweep; a value that is not a number (a sweep over
 * policy names) is stored as NULL and named by the variant instead. */
static void put_sweep(FILE *out, sqlite3_stmt *r) {
    if (isnan(col_real(r, RC_SWEEP_VALUE))) fprintf(out, "%s (see the variant)", col_text(r, RC_SWEEP_NAME));
    else fprintf(out, "%s = %g", col_text(r, RC_SWEEP_NAME), col_real(r, RC_SWEEP_VALUE));
}

#define RUNS_SELECT                                                                        \
    "SELECT run_id, experiment, variant, model_name, model_path, policy, quirks, normalize," \
    " align, chunk, ubatch, kernel, precision, threads, decode_n, status, started_at,"     \
    " finished_at, sweep_name, sweep_value, transcript, n_ctx, cpu, git_rev FROM runs"

/* Prepares the run selection: run_id > 0 picks one, experiment non-NULL one
 * experiment; by_variant orders by variant and sweep value. */
static int select_runs(hx_store *s, int64_t run_id, const char *experiment, bool by_variant,
                       sqlite3_stmt **st, char *err, size_t errlen) {
    char sql[1024];
    snprintf(sql, sizeof sql,
             RUNS_SELECT " WHERE (?1 <= 0 OR run_id = ?1) AND (?2 IS NULL OR experiment = ?2)"
             " ORDER BY %s", by_variant ? "variant, sweep_value, run_id" : "run_id");
    int status = prepare(s, sql, st, "runs: selecting runs", err, errlen);
    if (status != ENG_OK) return status;
    sqlite3_bind_int64(*st, 1, run_id);
    if (experiment) sqlite3_bind_text(*st, 2, experiment, -1, SQLITE_TRANSIENT);
    return ENG_OK;
}

/* Writes s into a markdown table cell ('|' escaped, newlines as spaces). */
static void md_cell(FILE *out, const char *s) {
    if (!s || !*s) {
        fputs("-", out);
        return;
    }
    for (; *s; s++) {
        if (*s == '|') fputs("\\|", out);
        else if (*s == '\n' || *s == '\r') fputc(' ', out);
        else fputc(*s, out);
    }
}

static void md_num(FILE *out, const char *fmt, double v) {
    if (isfinite(v)) fprintf(out, fmt, v);
    else fputs("-", out);
}

static const char *or_none(const char *s) { return s && *s ? s : "none"; }

/* "### Run N (exp / variant): model M, policy P, ..." */
static void md_run_header(FILE *out, sqlite3_stmt *r) {
    const char *exp = col_text(r, RC_EXPERIMENT), *var = col_text(r, RC_VARIANT);
    const char *model = col_text(r, RC_MODEL_NAME);
    if (!model) model = col_text(r, RC_MODEL_PATH);
    fprintf(out, "### Run %lld", (long long)col_int(r, RC_RUN_ID));
    if (exp || var) fprintf(out, " (%s / %s)", exp ? exp : "-", var ? var : "-");
    fprintf(out, ": model %s, policy %s, quirks %s, normalize %s, align %s, chunk %lld",
            model ? model : "?", col_text(r, RC_POLICY), or_none(col_text(r, RC_QUIRKS)),
            or_none(col_text(r, RC_NORMALIZE)), col_text(r, RC_ALIGN),
            (long long)col_int(r, RC_CHUNK));
    if (col_int(r, RC_UBATCH) >= 0) fprintf(out, ", ubatch %lld", (long long)col_int(r, RC_UBATCH));
    fprintf(out, ", kernel %s, precision %s, threads %lld", col_text(r, RC_KERNEL),
            col_text(r, RC_PRECISION), (long long)col_int(r, RC_THREADS));
    if (col_int(r, RC_DECODE_N) >= 0)
        fprintf(out, ", decode_n %lld", (long long)col_int(r, RC_DECODE_N));
    if (col_text(r, RC_SWEEP_NAME)) {
        fputs(", sweep ", out);
        put_sweep(out, r);
    }
    const char *status = col_text(r, RC_STATUS);
    if (status && strcmp(status, "done") != 0) fprintf(out, ", status %s", status);
    fputc('\n', out);
}

static const char md_figures_head[] =
    "requests | reuse | prefilled tok | TTFT p50 cold ms | TTFT p50 reused ms | speedup p50 |"
    " TTFT p95 cold ms | TTFT p95 reused ms | bit-identical | forked | max ULP |"
    " GFLOP cold | GFLOP reused | modeled p50 cold ms | modeled p50 reused ms |";
static const char md_figures_rule[] =
    "---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|";

static void md_figures(FILE *out, const hx_run_summary *f) {
    fprintf(out, "%lld | ", (long long)f->n_requests);
    md_num(out, "%.3f", f->reuse_fraction);
    fprintf(out, " | %lld | ", (long long)f->n_prefilled_tokens);
    md_num(out, "%.2f", f->ttft_cold_p50_ms);
    fputs(" | ", out);
    md_num(out, "%.2f", f->ttft_reuse_p50_ms);
    fputs(" | ", out);
    md_num(out, "%.2fx", f->speedup_p50);
    fputs(" | ", out);
    md_num(out, "%.2f", f->ttft_cold_p95_ms);
    fputs(" | ", out);
    md_num(out, "%.2f", f->ttft_reuse_p95_ms);
    fputs(" | ", out);
    md_num(out, "%.1f%%", f->pct_identical);
    fputs(" | ", out);
    md_num(out, "%.1f%%", f->pct_forked);
    fputs(" | ", out);
    if (f->max_ulp >= 0) fprintf(out, "%lld", (long long)f->max_ulp);
    else fputs("-", out);
    fputs(" | ", out);
    md_num(out, "%.3f", f->gflop_cold);
    fputs(" | ", out);
    md_num(out, "%.3f", f->gflop_reuse);
    fputs(" | ", out);
    md_num(out, "%.2f", f->model_cold_p50_ms);
    fputs(" | ", out);
    md_num(out, "%.2f", f->model_reuse_p50_ms);
    fputs(" |\n", out);
}

// ---- simulate runs (harness/traces/sim_store.c writes sim_runs; docs/traces.md) ----
/* Prints run_id's sim_runs figures as a table and returns 1, or 0 when the
 * run has none (no such table: a database without simulate runs). */
static int md_sim_run(hx_store *s, int64_t run_id, FILE *out) {
    sqlite3_stmt *st = NULL;
    if (sqlite3_prepare_v2(hx_store_db(s),
                           "SELECT requests, hit_rate_tokens, hit_rate_blocks, evictions, capacity_tokens, evict,"
                           " instances, route, pool, held_bytes_max, ttft_p50_ms, ttft_p99_ms, prefill_mean_ms,"
                           " profile, verified, verified_identical FROM sim_runs WHERE run_id = ?1",
                           -1, &st, NULL) != SQLITE_OK)
        return 0;
    sqlite3_bind_int64(st, 1, run_id);
    int printed = 0;
    if (sqlite3_step(st) == SQLITE_ROW) {
        fputs("\n| simulate: requests | hit rate tokens | hit rate blocks | evictions (blocks) | capacity tokens |"
              " evict | instances | route | pool | held GB (max) | TTFT p50 ms | TTFT p99 ms | prefill mean ms |"
              " time model | verified identical |\n|---:|---:|---:|---:|---:|---|---:|---|---|---:|---:|---:|---:|---|---:|\n",
              out);
        fprintf(out, "| %lld | %.4f | %.4f | %lld | %s | %s | %lld | %s | %s | %.3g | %.1f | %.1f | %.1f | %s | ",
                (long long)sqlite3_column_int64(st, 0), sqlite3_column_double(st, 1), sqlite3_column_double(st, 2),
                (long long)sqlite3_column_int64(st, 3),
                sqlite3_column_int64(st, 4) ? (const char *)sqlite3_column_text(st, 4) : "unbounded",
                (const char *)sqlite3_column_text(st, 5), (long long)sqlite3_column_int64(st, 6),
                (const char *)sqlite3_column_text(st, 7), (const char *)sqlite3_column_text(st, 8),
                sqlite3_column_double(st, 9) / 1e9, sqlite3_column_double(st, 10), sqlite3_column_double(st, 11),
                sqlite3_column_double(st, 12), (const char *)sqlite3_column_text(st, 13));
        if (sqlite3_column_type(st, 14) == SQLITE_NULL) fputs("- |\n", out);
        else fprintf(out, "%lld of %lld |\n", (long long)sqlite3_column_int64(st, 15), (long long)sqlite3_column_int64(st, 14));
        printed = 1;
    }
    sqlite3_finalize(st);
    return printed;
}
// ---- end of simulate runs ----

int hx_report_markdown(hx_store *s, int64_t run_id, FILE *out, char *err, size_t errlen) {
    ENG_ASSERT(s != NULL && out != NULL);
    sqlite3_stmt *r = NULL;
    int status = select_runs(s, run_id, NULL, false, &r, err, errlen);
    if (status != ENG_OK) return status;
    int64_t n_runs = 0;
    int rc;
    fprintf(out, "# kvreplay report: %s\n", hx_store_path(s));
    while ((rc = sqlite3_step(r)) == SQLITE_ROW) {
        hx_run_summary f;
        status = hx_report_summarize(s, col_int(r, RC_RUN_ID), &f, err, errlen);
        if (status != ENG_OK) goto out;
        fputc('\n', out);
        md_run_header(out, r);
        if (f.n_requests == 0 && md_sim_run(s, col_int(r, RC_RUN_ID), out)) {  /* a simulate run */
            n_runs++;
            continue;
        }
        fprintf(out, "\n| %s\n|%s\n| ", md_figures_head, md_figures_rule);
        md_figures(out, &f);
        n_runs++;
    }
    if (rc != SQLITE_DONE) {
        status = sql_fail(s, "runs: reading runs", err, errlen);
        goto out;
    }
    if (n_runs == 0 && run_id > 0) {
        eng_errf(err, errlen, "%s: runs: no run with run_id %lld", hx_store_path(s),
                 (long long)run_id);
        status = ENG_ERR_NOT_FOUND;
        goto out;
    }
    if (n_runs == 0) fputs("\n(no runs)\n", out);
out:
    sqlite3_finalize(r);
    return status;
}

int hx_report_experiment(hx_store *s, const char *experiment, FILE *out, char *err,
                         size_t errlen) {
    ENG_ASSERT(s != NULL && experiment != NULL && out != NULL);
    sqlite3_stmt *r = NULL;
    int status = select_runs(s, 0, experiment, true, &r, err, errlen);
    if (status != ENG_OK) return status;
    int64_t n_runs = 0;
    int rc;
    while ((rc = sqlite3_step(r)) == SQLITE_ROW) {
        hx_run_summary f;
        status = hx_report_summarize(s, col_int(r, RC_RUN_ID), &f, err, errlen);
        if (status != ENG_OK) goto out;
        if (n_runs == 0) {
            fputs("## Experiment ", out);
            md_cell(out, experiment);
            fputs("\n\n| variant | run | sweep | policy | quirks | align | chunk | kernel |"
                  " precision | ", out);
            fprintf(out, "%s\n|---|---:|---|---|---|---|---:|---|---|%s\n", md_figures_head,
                    md_figures_rule);
        }
        fputs("| ", out);
        md_cell(out, col_text(r, RC_VARIANT));
        fprintf(out, " | %lld | ", (long long)col_int(r, RC_RUN_ID));
        if (col_text(r, RC_SWEEP_NAME)) put_sweep(out, r);
        else fputs("-", out);
        fputs(" | ", out);
        md_cell(out, col_text(r, RC_POLICY));
        fputs(" | ", out);
        md_cell(out, or_none(col_text(r, RC_QUIRKS)));
        fputs(" | ", out);
        md_cell(out, col_text(r, RC_ALIGN));
        fprintf(out, " | %lld | ", (long long)col_int(r, RC_CHUNK));
        md_cell(out, col_text(r, RC_KERNEL));
        fputs(" | ", out);
        md_cell(out, col_text(r, RC_PRECISION));
        fputs(" | ", out);
        md_figures(out, &f);
        n_runs++;
    }
    if (rc != SQLITE_DONE) {
        status = sql_fail(s, "runs: reading runs", err, errlen);
        goto out;
    }
    if (n_runs == 0) {
        eng_errf(err, errlen, "%s: runs: no run of experiment '%s'", hx_store_path(s), experiment);
        status = ENG_ERR_NOT_FOUND;
    }
out:
    sqlite3_finalize(r);
    return status;
}

// ----------------------------------------------------------------------------
// JSON

static json_t *run_json(sqlite3_stmt *r, const hx_run_summary *f) {
    json_t *o = json_object();
    if (!o) return NULL;
    int bad = 0;
    bad |= json_object_set_new(o, "run_id", json_integer(col_int(r, RC_RUN_ID)));
    bad |= json_object_set_new(o, "experiment", jstr(col_text(r, RC_EXPERIMENT)));
    bad |= json_object_set_new(o, "variant", jstr(col_text(r, RC_VARIANT)));
    bad |= json_object_set_new(o, "status", jstr(col_text(r, RC_STATUS)));
    bad |= json_object_set_new(o, "started_at", jstr(col_text(r, RC_STARTED_AT)));
    bad |= json_object_set_new(o, "finished_at", jstr(col_text(r, RC_FINISHED_AT)));
    bad |= json_object_set_new(o, "git_rev", jstr(col_text(r, RC_GIT_REV)));
    bad |= json_object_set_new(o, "model_name", jstr(col_text(r, RC_MODEL_NAME)));
    bad |= json_object_set_new(o, "model_path", jstr(col_text(r, RC_MODEL_PATH)));
    bad |= json_object_set_new(o, "transcript", jstr(col_text(r, RC_TRANSCRIPT)));
    bad |= json_object_set_new(o, "policy", jstr(col_text(r, RC_POLICY)));
    bad |= json_object_set_new(o, "quirks", jstr(col_text(r, RC_QUIRKS)));
    bad |= json_object_set_new(o, "normalize", jstr(col_text(r, RC_NORMALIZE)));
    bad |= json_object_set_new(o, "align", jstr(col_text(r, RC_ALIGN)));
    bad |= json_object_set_new(o, "chunk", jint(col_int(r, RC_CHUNK)));
    bad |= json_object_set_new(o, "ubatch", jint(col_int(r, RC_UBATCH)));
    bad |= json_object_set_new(o, "kernel", jstr(col_text(r, RC_KERNEL)));
    bad |= json_object_set_new(o, "precision", jstr(col_text(r, RC_PRECISION)));
    bad |= json_object_set_new(o, "threads", jint(col_int(r, RC_THREADS)));
    bad |= json_object_set_new(o, "decode_n", jint(col_int(r, RC_DECODE_N)));
    bad |= json_object_set_new(o, "n_ctx", jint(col_int(r, RC_N_CTX)));
    bad |= json_object_set_new(o, "cpu", jstr(col_text(r, RC_CPU)));
    bad |= json_object_set_new(o, "sweep_name", jstr(col_text(r, RC_SWEEP_NAME)));
    bad |= json_object_set_new(o, "sweep_value", jreal(col_real(r, RC_SWEEP_VALUE)));
    bad |= json_object_set_new(o, "requests", json_integer(f->n_requests));
    bad |= json_object_set_new(o, "prompt_tokens", json_integer(f->n_prompt_tokens));
    bad |= json_object_set_new(o, "reused_tokens", json_integer(f->n_reused_tokens));
    bad |= json_object_set_new(o, "prefilled_tokens", json_integer(f->n_prefilled_tokens));
    bad |= json_object_set_new(o, "reuse_fraction", jreal(f->reuse_fraction));
    bad |= json_object_set_new(o, "ttft_cold_p50_ms", jreal(f->ttft_cold_p50_ms));
    bad |= json_object_set_new(o, "ttft_cold_p95_ms", jreal(f->ttft_cold_p95_ms));
    bad |= json_object_set_new(o, "ttft_reuse_p50_ms", jreal(f->ttft_reuse_p50_ms));
    bad |= json_object_set_new(o, "ttft_reuse_p95_ms", jreal(f->ttft_reuse_p95_ms));
    bad |= json_object_set_new(o, "model_cold_p50_ms", jreal(f->model_cold_p50_ms));
    bad |= json_object_set_new(o, "model_reuse_p50_ms", jreal(f->model_reuse_p50_ms));
    bad |= json_object_set_new(o, "speedup_p50", jreal(f->speedup_p50));
    bad |= json_object_set_new(o, "n_bit_identical", json_integer(f->n_identical));
    bad |= json_object_set_new(o, "n_logits_equal", json_integer(f->n_logits_equal));
    bad |= json_object_set_new(o, "n_forked", json_integer(f->n_forked));
    bad |= json_object_set_new(o, "pct_bit_identical", jreal(f->pct_identical));
    bad |= json_object_set_new(o, "n_verified", json_integer(f->n_verified));
    bad |= json_object_set_new(o, "pct_forked", jreal(f->pct_forked));
    bad |= json_object_set_new(o, "max_ulp", jint(f->max_ulp));
    bad |= json_object_set_new(o, "gflop_cold", jreal(f->gflop_cold));
    bad |= json_object_set_new(o, "gflop_reuse", jreal(f->gflop_reuse));
    if (bad) {
        json_decref(o);
        return NULL;
    }
    return o;
}

int hx_report_json(hx_store *s, int64_t run_id, const char *experiment, json_t **out,
                   char *err, size_t errlen) {
    ENG_ASSERT(s != NULL && out != NULL);
    *out = NULL;
    sqlite3_stmt *r = NULL;
    json_t *root = json_object(), *runs = json_array();
    int status = ENG_OK, rc;
    if (!root || !runs || json_object_set_new(root, "db", jstr(hx_store_path(s))) ||
        json_object_set(root, "runs", runs))
        goto nomem;
    if ((status = select_runs(s, run_id, experiment, experiment != NULL, &r, err, errlen)))
        goto out;
    while ((rc = sqlite3_step(r)) == SQLITE_ROW) {
        hx_run_summary f;
        status = hx_report_summarize(s, col_int(r, RC_RUN_ID), &f, err, errlen);
        if (status != ENG_OK) goto out;
        json_t *o = run_json(r, &f);
        if (!o || json_array_append_new(runs, o)) goto nomem;
    }
    if (rc != SQLITE_DONE) {
        status = sql_fail(s, "runs: reading runs", err, errlen);
        goto out;
    }
    if (json_array_size(runs) == 0 && (run_id > 0 || experiment)) {
        if (run_id > 0)
            eng_errf(err, errlen, "%s: runs: no run with run_id %lld", hx_store_path(s),
                     (long long)run_id);
        else
            eng_errf(err, errlen, "%s: runs: no run of experiment '%s'", hx_store_path(s),
                     experiment);
        status = ENG_ERR_NOT_FOUND;
    }
    goto out;
nomem:
    eng_errf(err, errlen, "%s: report: out of memory", hx_store_path(s));
    status = ENG_ERR_NOMEM;
out:
    sqlite3_finalize(r);
    json_decref(runs);
    if (status != ENG_OK) {
        json_decref(root);
        return status;
    }
    *out = root;
    return ENG_OK;
}

// ----------------------------------------------------------------------------
// The verdict of `kvreplay check`: the first request that is not bit-identical

typedef struct divergence {
    int64_t n_requests, n_diverged;  /* of the requests compared with their cold run */
    int64_t n_unverified;            /* rows not compared (kvreplay serve without --verify) */
    bool    found;
    char    session[512];
    int64_t turn, req_index;
    bool    in_decode;      /* the prompt logits are equal; a decode step differs */
    bool    in_state;       /* every logit is equal; the state after the prompt differs */
    bool    in_batch;       /* cold and reused agree; the request computed in a batch (--batch-check) does not */
    int64_t batch_k, batch_index, batch_ulp, batch_max_ulp, n_vocab;
    char    hash_cold[24], hash_reused[24];
    int64_t step;           /* that step, -1 when unknown or in_decode is false */
    int64_t index;          /* first differing logit index, -1 when unknown */
    char    cold[64], reused[64];
    int64_t ulp, max_ulp;   /* -1 when unknown */
    double  max_abs;
    int64_t fork_step;      /* -1 when the greedy tokens never fork */
    char    message[1024];
} divergence;

static void copy_text(char *dst, size_t cap, const char *src) {
    snprintf(dst, cap, "%s", src ? src : "");
}

/* The first difference from columns c..c+5 of a row: first_diff_index,
 * a_first, b_first, ulp_first, max_abs_diff, max_ulp. */
static void read_first_diff(sqlite3_stmt *st, int c, divergence *d) {
    d->index = col_int(st, c);
    copy_text(d->cold, sizeof d->cold, col_text(st, c + 1));
    copy_text(d->reused, sizeof d->reused, col_text(st, c + 2));
    d->ulp = col_int(st, c + 3);
    d->max_abs = col_real(st, c + 4);
    d->max_ulp = col_int(st, c + 5);
}

/* Fills the step details of a decode-only divergence. */
static int find_step(hx_store *s, int64_t run_id, divergence *d, char *err, size_t errlen) {
    sqlite3_stmt *st = NULL;
    int status = prepare(s,
        "SELECT step, first_diff_index, a_first, b_first, ulp_first, max_abs_diff, max_ulp"
        " FROM steps WHERE run_id = ?1 AND session = ?2 AND turn = ?3 AND logits_equal = 0"
        " ORDER BY step LIMIT 1", &st, "steps: finding the first divergent step", err, errlen);
    if (status != ENG_OK) return status;
    sqlite3_bind_int64(st, 1, run_id);
    sqlite3_bind_text(st, 2, d->session, -1, SQLITE_TRANSIENT);
    sqlite3_bind_int64(st, 3, d->turn);
    int rc = sqlite3_step(st);
    if (rc == SQLITE_ROW) {
        d->step = col_int(st, 0);
        read_first_diff(st, 1, d);
    } else if (rc != SQLITE_DONE) {
        status = sql_fail(s, "steps: finding the first divergent step", err, errlen);
    }
    sqlite3_finalize(st);
    return status;
}

static void format_message(divergence *d) {
    char *m = d->message;
    size_t cap = sizeof d->message, o = 0;
#define ADD(...) do { int k_ = snprintf(m + o, cap - o, __VA_ARGS__); \
                      if (k_ > 0) o = o + (size_t)k_ < cap ? o + (size_t)k_ : cap - 1; } while (0)
    if (!d->found) {
        ADD("OK: %lld requests, all bit-identical to cold", (long long)d->n_requests);
        if (d->n_unverified > 0)
            ADD(" (%lld more not compared: served without --verify)", (long long)d->n_unverified);
        return;
    }
    ADD("DIVERGED: session %s turn %lld (request %lld): ", d->session, (long long)d->turn,
        (long long)d->req_index);
    if (d->in_state) {
        ADD("logits identical, but the sequence state after the prompt differs (XXH3-64 of the "
            "serialized state: cold %s, reused %s)", d->hash_cold, d->hash_reused);
        return;
    }
    if (d->in_batch) {
        ADD("cold and reused identical, but computed inside a batch with %lld other sequences the logits differ "
            "from cold at index %lld of its rows (step %lld, token %lld; ULP distance %lld, max %lld)",
            (long long)d->batch_k, (long long)d->batch_index, (long long)(d->batch_index / (d->n_vocab > 0 ? d->n_vocab : 1)),
            (long long)(d->batch_index % (d->n_vocab > 0 ? d->n_vocab : 1)), (long long)d->batch_ulp,
            (long long)d->batch_max_ulp);
        return;
    }
    if (d->in_decode) {
        if (d->step >= 0) ADD("decode step %lld logits differ", (long long)d->step);
        else ADD("decode logits differ (no steps rows)");
    } else {
        ADD("logits differ");
    }
    if (d->index >= 0)
        ADD(" at index %lld: cold=%s reused=%s (ULP distance %lld, max |diff| %g)",
            (long long)d->index, d->cold, d->reused, (long long)d->ulp, d->max_abs);
    else if (d->max_ulp >= 0 || isfinite(d->max_abs))
        ADD(" (max ULP distance %lld, max |diff| %g)", (long long)d->max_ulp, d->max_abs);
    if (d->fork_step >= 0) ADD("; greedy fork at step %lld", (long long)d->fork_step);
    else ADD("; greedy tokens never fork");
#undef ADD
}

/* Resolves run_id <= 0 to the latest run and checks that it exists. */
static int resolve_run(hx_store *s, int64_t *run_id, char *err, size_t errlen) {
    if (*run_id <= 0) return hx_store_last_run(s, run_id, err, errlen);
    hx_run_summary f;
    return hx_report_summarize(s, *run_id, &f, err, errlen);
}

static int find_divergence(hx_store *s, int64_t *run_id, divergence *d, char *err,
                           size_t errlen) {
    memset(d, 0, sizeof *d);
    d->step = d->index = d->ulp = d->max_ulp = d->fork_step = -1;
    d->max_abs = NAN;
    int status = resolve_run(s, run_id, err, errlen);
    if (status != ENG_OK) return status;
    sqlite3_stmt *st = NULL;
    status = prepare(s,
        "SELECT session, turn, req_index, logits_equal, first_diff_index, a_first, b_first,"
        " ulp_first, max_abs_diff, max_ulp, fork_step,"
        " (SELECT count(*) FROM requests WHERE run_id = ?1 AND " VERIFIED "),"
        " (SELECT count(*) FROM requests WHERE run_id = ?1 AND " VERIFIED " AND NOT " IDENTICAL "),"
        " decode_equal, state_hash_cold, state_hash_reuse,"
        " batch_equal, batch_k, batch_first_diff, batch_ulp_first, batch_max_ulp, coalesce(state_equal, 1),"
        " (SELECT json_extract(extra, '$.n_vocab') FROM runs WHERE run_id = ?1)"
        " FROM requests WHERE run_id = ?1 AND " VERIFIED " AND NOT " IDENTICAL
        " ORDER BY req_index, rowid LIMIT 1", &st, "requests: finding the first divergence",
        err, errlen);
    if (status != ENG_OK) return status;
    sqlite3_bind_int64(st, 1, *run_id);
    int rc = sqlite3_step(st);
    if (rc == SQLITE_ROW) {
        d->found = true;
        copy_text(d->session, sizeof d->session, col_text(st, 0));
        d->turn = col_int(st, 1);
        d->req_index = col_int(st, 2);
        d->in_decode = col_int(st, 3) == 1 && col_int(st, 13) == 0;
        d->in_state = col_int(st, 3) == 1 && col_int(st, 13) == 1 && col_int(st, 21) == 0;
        d->in_batch = col_int(st, 3) == 1 && col_int(st, 13) == 1 && col_int(st, 21) == 1 && col_int(st, 16) == 0;
        d->batch_k = col_int(st, 17);
        d->batch_index = col_int(st, 18);
        d->batch_ulp = col_int(st, 19);
        d->batch_max_ulp = col_int(st, 20);
        d->n_vocab = col_int(st, 22);
        copy_text(d->hash_cold, sizeof d->hash_cold, col_text(st, 14));
        copy_text(d->hash_reused, sizeof d->hash_reused, col_text(st, 15));
        d->fork_step = col_int(st, 10);
        d->n_requests = col_int(st, 11);
        d->n_diverged = col_int(st, 12);
        if (!d->in_decode && !d->in_state) {
            read_first_diff(st, 4, d);
        }
    } else if (rc != SQLITE_DONE) {
        status = sql_fail(s, "requests: finding the first divergence", err, errlen);
    }
    sqlite3_finalize(st);
    if (status == ENG_OK && d->found && d->in_decode)
        status = find_step(s, *run_id, d, err, errlen);
    if (status == ENG_OK && !d->found) {  /* the requests compared with their cold run */
        hx_run_summary f;
        status = hx_report_summarize(s, *run_id, &f, err, errlen);
        d->n_requests = f.n_verified;
        d->n_unverified = f.n_requests - f.n_verified;
    }
    if (status == ENG_OK) format_message(d);
    return status;
}

int hx_report_first_divergence(hx_store *s, int64_t run_id, FILE *out, char *err,
                               size_t errlen) {
    ENG_ASSERT(s != NULL && out != NULL);
    divergence d;
    int status = find_divergence(s, &run_id, &d, err, errlen);
    if (status != ENG_OK) return status;
    fprintf(out, "%s\n", d.message);
    return d.found ? 1 : 0;
}

int hx_report_check_json(hx_store *s, int64_t run_id, json_t **out, char *err, size_t errlen) {
    ENG_ASSERT(s != NULL && out != NULL);
    *out = NULL;
    divergence d;
    int status = find_divergence(s, &run_id, &d, err, errlen);
    if (status != ENG_OK) return status;
    json_t *first = json_null();
    if (d.found) {
        first = json_pack("{s:o, s:I, s:I, s:s, s:o, s:o, s:o, s:o, s:o, s:o, s:o, s:o}",
                          "session", jstr(d.session), "turn", (json_int_t)d.turn,
                          "req_index", (json_int_t)d.req_index,
                          "where", d.in_state ? "state" : d.in_batch ? "batch" : d.in_decode ? "decode" : "logits",
                          "step", jint(d.in_decode ? d.step : -1),
                          "index", jint(d.index),
                          "cold", d.cold[0] ? json_string(d.cold) : json_null(),
                          "reused", d.reused[0] ? json_string(d.reused) : json_null(),
                          "ulp", jint(d.ulp), "max_abs_diff", jreal(d.max_abs),
                          "max_ulp", jint(d.max_ulp), "fork_step", jint(d.fork_step));
    }
    json_t *o = first ? json_pack("{s:o, s:I, s:b, s:I, s:I, s:o, s:o}",
                                  "db", jstr(hx_store_path(s)), "run_id", (json_int_t)run_id,
                                  "ok", !d.found, "n_requests", (json_int_t)d.n_requests,
                                  "n_diverged", (json_int_t)d.n_diverged,
                                  "message", jstr(d.message), "first_divergence", first)
                      : NULL;
    if (!o) {
        eng_errf(err, errlen, "%s: check: out of memory", hx_store_path(s));
        return ENG_ERR_NOMEM;
    }
    *out = o;
    return d.found ? 1 : 0;
}

int hx_report_first_divergence_json(hx_store *s, int64_t run_id, FILE *out, char *err,
                                    size_t errlen) {
    ENG_ASSERT(s != NULL && out != NULL);
    json_t *o = NULL;
    int verdict = hx_report_check_json(s, run_id, &o, err, errlen);
    if (verdict < 0) return verdict;
    int rc = json_dumpf(o, out, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
    json_decref(o);
    fputc('\n', out);
    if (rc != 0) {
        eng_errf(err, errlen, "%s: check: writing JSON failed", hx_store_path(s));
        return ENG_ERR_IO;
    }
    return verdict;
}
