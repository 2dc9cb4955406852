/*
 * harness/traces/sim_store.h: a simulate run in the results database
 * (docs/sqlite.md, "simulate").
 *
 * A run is one `runs` row (begun and finished through store.h, policy the
 * simulated policy, transcript the trace) and, in tables of its own:
 *   sim_runs      one row per run: the settings and the totals;
 *   sim_requests  one row per request (up to --request-rows of them);
 *   sim_windows   one row per window of arrival time;
 *   sim_verify    one row per request checked bit for bit (--verify-sample).
 * Everything after the `runs` row is written in one transaction that the
 * run commits only when it completes: a trace error, a failed write or a
 * kill leaves no row of these tables, and the `runs` row is then deleted
 * (or, after a kill, left 'running' with nothing under it).
 */
#ifndef HX_SIM_STORE_H
#define HX_SIM_STORE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "sim.h"
#include "store.h"

typedef struct hx_sim_store hx_sim_store;

/* What sim_runs records besides the summary. */
typedef struct hx_sim_meta {
    const char *trace, *trace_sha256, *policy, *quirks, *evict, *route, *pool, *profile, *profile_source;
    const char *format;
    int32_t     block_tokens;
    int64_t     block_size, capacity_tokens, repeat, instances;
    double      capacity_bytes, bytes_per_token, route_weight, speedup, window_s;
    double      gflops, restore_gbs, transfer_gbs, tpot_ms;
    int64_t     request_rows;    /* rows kept in sim_requests (-1: all) */
} hx_sim_meta;

/* Creates simulate's tables in db when absent (kvreplay merge's output). ENG_OK or ENG_ERR_IO. */
int  hx_sim_store_schema(sqlite3 *db, char *err, size_t errlen);
/* Opens the database (store.h), begins the run (meta: the runs columns) and
 * its transaction, creating the tables when absent. */
int  hx_sim_store_begin(const char *db_path, const hx_run_meta *meta, hx_sim_store **out, char *err, size_t errlen);
int64_t hx_sim_store_run_id(const hx_sim_store *s);
int  hx_sim_store_request(hx_sim_store *s, const hx_sim_row *row, char *err, size_t errlen);
int  hx_sim_store_window(hx_sim_store *s, const hx_sim_window *w, char *err, size_t errlen);
/* One verified request: its index, tokens, reuse segments, and the comparison. */
int  hx_sim_store_verify(hx_sim_store *s, int64_t index, int64_t n_tokens, int64_t reused, int32_t segments,
                         bool logits_equal, int64_t first_diff, uint64_t max_ulp, double max_abs, char *err,
                         size_t errlen);
/* Writes sim_runs, finishes the run 'done' and commits. */
int  hx_sim_store_finish(hx_sim_store *s, const hx_sim_meta *m, const hx_sim_summary *sum, int64_t verified,
                         int64_t identical, char *err, size_t errlen);
/* Rolls back, deletes the run's `runs` row and closes (after an error). Accepts NULL. */
void hx_sim_store_abort(hx_sim_store *s);
void hx_sim_store_close(hx_sim_store *s);  /* after finish; accepts NULL */

#endif /* HX_SIM_STORE_H */
