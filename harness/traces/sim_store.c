/*
 * harness/traces/sim_store.c: simulate's tables and writes (see
 * sim_store.h). The tables are created here (IF NOT EXISTS), beside the
 * schema store.c migrates: they belong to simulate alone.
 */
#include "sim_store.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "status.h"

static const char k_schema[] =
    "CREATE TABLE IF NOT EXISTS sim_runs(\n"
    "  run_id INTEGER PRIMARY KEY REFERENCES runs(run_id) ON DELETE CASCADE,\n"
    "  trace TEXT, trace_sha256 TEXT, format TEXT, block_tokens INTEGER, block_size INTEGER,\n"
    "  policy TEXT, quirks TEXT, evict TEXT, capacity_tokens INTEGER, capacity_bytes REAL, bytes_per_token REAL,\n"
    "  repeat INTEGER, instances INTEGER, route TEXT, route_weight REAL, pool TEXT, speedup REAL, window_s REAL,\n"
    "  profile TEXT, profile_source TEXT, gflops REAL, restore_gbs REAL, transfer_gbs REAL, tpot_ms REAL,\n"
    "  requests INTEGER, input_tokens INTEGER, hit_tokens INTEGER, blocks INTEGER, hit_blocks INTEGER,\n"
    "  hit_rate_tokens REAL, hit_rate_blocks REAL, evictions INTEGER, stored_blocks INTEGER,\n"
    "  held_blocks_end INTEGER, held_blocks_max INTEGER, held_bytes_end REAL, held_bytes_max REAL,\n"
    "  ttft_mean_ms REAL, ttft_p50_ms REAL, ttft_p90_ms REAL, ttft_p99_ms REAL,\n"
    "  queue_mean_ms REAL, queue_p50_ms REAL, queue_p99_ms REAL, prefill_mean_ms REAL, restore_mean_ms REAL,\n"
    "  e2e_mean_ms REAL, span_s REAL, windows INTEGER, request_rows INTEGER, seconds REAL, cpu_seconds REAL,\n"
    "  verified INTEGER, verified_identical INTEGER);\n"
    "CREATE TABLE IF NOT EXISTS sim_requests(\n"
    "  run_id INTEGER NOT NULL REFERENCES runs(run_id) ON DELETE CASCADE, idx INTEGER NOT NULL,\n"
    "  line INTEGER, copy INTEGER, chat_id INTEGER, parent_chat_id INTEGER, turn INTEGER, type TEXT,\n"
    "  instance INTEGER, arrival_ms REAL, n_tokens INTEGER, n_blocks INTEGER, output_length INTEGER,\n"
    "  hit_blocks INTEGER, hit_tokens INTEGER, reused INTEGER, origin INTEGER,\n"
    "  queue_ms REAL, restore_ms REAL, prefill_ms REAL, ttft_ms REAL, e2e_ms REAL,\n"
    "  stored_blocks INTEGER, evicted_blocks INTEGER, held_blocks INTEGER,\n"
    "  PRIMARY KEY(run_id, idx));\n"
    "CREATE TABLE IF NOT EXISTS sim_windows(\n"
    "  run_id INTEGER NOT NULL REFERENCES runs(run_id) ON DELETE CASCADE, window INTEGER NOT NULL,\n"
    "  t_start_ms REAL, requests INTEGER, input_tokens INTEGER, hit_tokens INTEGER, blocks INTEGER,\n"
    "  hit_blocks INTEGER, evicted_blocks INTEGER, held_blocks INTEGER, ttft_mean_ms REAL, ttft_p50_ms REAL,\n"
    "  ttft_p99_ms REAL, queue_mean_ms REAL, PRIMARY KEY(run_id, window));\n"
    "CREATE TABLE IF NOT EXISTS sim_verify(\n"
    "  run_id INTEGER NOT NULL REFERENCES runs(run_id) ON DELETE CASCADE, idx INTEGER NOT NULL,\n"
    "  n_tokens INTEGER, reused INTEGER, segments INTEGER, logits_equal INTEGER, first_diff_index INTEGER,\n"
    "  max_ulp INTEGER, max_abs_diff REAL, PRIMARY KEY(run_id, idx));\n";

struct hx_sim_store {
    hx_store     *st;
    sqlite3      *db;
    int64_t       run_id;
    bool          in_tx;
    sqlite3_stmt *req, *win, *ver;
};

static int sql_fail(hx_sim_store *s, const char *what, char *err, size_t errlen) {
    eng_errf(err, errlen, "%s: %s: %s", hx_store_path(s->st), what, sqlite3_errmsg(s->db));
    return ENG_ERR_IO;
}

int hx_sim_store_schema(sqlite3 *db, char *err, size_t errlen) {
    if (sqlite3_exec(db, k_schema, NULL, NULL, NULL) == SQLITE_OK) return ENG_OK;
    eng_errf(err, errlen, "creating simulate's tables: %s", sqlite3_errmsg(db));
    return ENG_ERR_IO;
}

int hx_sim_store_begin(const char *db_path, const hx_run_meta *meta, hx_sim_store **out, char *err, size_t errlen) {
    *out = NULL;
    hx_sim_store *s = calloc(1, sizeof *s);
    if (!s) return ENG_ERR_NOMEM;
    s->run_id = -1;
    int rc = hx_store_open(db_path, &s->st, err, errlen);
    if (rc != ENG_OK) { free(s); return rc; }
    s->db = hx_store_db(s->st);
    if (sqlite3_exec(s->db, k_schema, NULL, NULL, NULL) != SQLITE_OK) {
        rc = sql_fail(s, "creating simulate's tables", err, errlen);
        goto fail;
    }
    if ((rc = hx_store_begin_run(s->st, meta, &s->run_id, err, errlen)) != ENG_OK) goto fail;
    if (sqlite3_exec(s->db, "BEGIN IMMEDIATE", NULL, NULL, NULL) != SQLITE_OK) {
        rc = sql_fail(s, "BEGIN", err, errlen);
        goto fail;
    }
    s->in_tx = true;
    if (sqlite3_prepare_v2(s->db,
                           "INSERT INTO sim_requests VALUES(?1,?2,?3,?4,?5,?6,?7,?8,?9,?10,?11,?12,?13,?14,?15,?16,"
                           "?17,?18,?19,?20,?21,?22,?23,?24,?25)", -1, &s->req, NULL) != SQLITE_OK ||
        sqlite3_prepare_v2(s->db, "INSERT INTO sim_windows VALUES(?1,?2,?3,?4,?5,?6,?7,?8,?9,?10,?11,?12,?13,?14)",
                           -1, &s->win, NULL) != SQLITE_OK ||
        sqlite3_prepare_v2(s->db, "INSERT INTO sim_verify VALUES(?1,?2,?3,?4,?5,?6,?7,?8,?9)", -1, &s->ver,
                           NULL) != SQLITE_OK) {
        rc = sql_fail(s, "preparing simulate's inserts", err, errlen);
        goto fail;
    }
    *out = s;
    return ENG_OK;
fail:
    hx_sim_store_abort(s);
    return rc;
}

int64_t hx_sim_store_run_id(const hx_sim_store *s) { return s->run_id; }

static void bind_real(sqlite3_stmt *st, int i, double v) {
    if (isfinite(v)) sqlite3_bind_double(st, i, v);
    else sqlite3_bind_null(st, i);
}

static int step(hx_sim_store *s, sqlite3_stmt *st, const char *what, char *err, size_t errlen) {
    int rc = sqlite3_step(st);
    sqlite3_reset(st);
    sqlite3_clear_bindings(st);
    return rc == SQLITE_DONE ? ENG_OK : sql_fail(s, what, err, errlen);
}

int hx_sim_store_request(hx_sim_store *s, const hx_sim_row *w, char *err, size_t errlen) {
    sqlite3_stmt *st = s->req;
    const hx_trace_rec *r = w->rec;
    sqlite3_bind_int64(st, 1, s->run_id);
    sqlite3_bind_int64(st, 2, r->index);
    sqlite3_bind_int64(st, 3, r->line);
    sqlite3_bind_int64(st, 4, r->copy);
    if (r->chat_id >= 0) sqlite3_bind_int64(st, 5, r->chat_id);
    if (r->chat_id >= 0) sqlite3_bind_int64(st, 6, r->parent_chat_id);
    if (r->chat_id >= 0) sqlite3_bind_int64(st, 7, r->turn);
    if (r->type && r->type[0]) sqlite3_bind_text(st, 8, r->type, -1, SQLITE_TRANSIENT);
    sqlite3_bind_int64(st, 9, w->instance);
    bind_real(st, 10, w->arrival_ms);
    sqlite3_bind_int64(st, 11, r->input_length);
    sqlite3_bind_int64(st, 12, r->n_blocks);
    sqlite3_bind_int64(st, 13, r->output_length);
    sqlite3_bind_int64(st, 14, w->hit_blocks);
    sqlite3_bind_int64(st, 15, w->hit_tokens);
    sqlite3_bind_int64(st, 16, w->reused);
    if (w->origin >= 0) sqlite3_bind_int64(st, 17, w->origin);
    bind_real(st, 18, w->queue_ms);
    bind_real(st, 19, w->restore_ms);
    bind_real(st, 20, w->prefill_ms);
    bind_real(st, 21, w->ttft_ms);
    bind_real(st, 22, w->e2e_ms);
    sqlite3_bind_int64(st, 23, w->stored_blocks);
    sqlite3_bind_int64(st, 24, w->evicted_blocks);
    sqlite3_bind_int64(st, 25, w->held_blocks);
    return step(s, st, "sim_requests: inserting a request", err, errlen);
}

int hx_sim_store_window(hx_sim_store *s, const hx_sim_window *w, char *err, size_t errlen) {
    sqlite3_stmt *st = s->win;
    sqlite3_bind_int64(st, 1, s->run_id);
    sqlite3_bind_int64(st, 2, w->index);
    bind_real(st, 3, w->t_start_ms);
    sqlite3_bind_int64(st, 4, w->requests);
    sqlite3_bind_int64(st, 5, w->input_tokens);
    sqlite3_bind_int64(st, 6, w->hit_tokens);
    sqlite3_bind_int64(st, 7, w->blocks);
    sqlite3_bind_int64(st, 8, w->hit_blocks);
    sqlite3_bind_int64(st, 9, w->evicted_blocks);
    sqlite3_bind_int64(st, 10, w->held_blocks);
    bind_real(st, 11, w->ttft_mean_ms);
    bind_real(st, 12, w->ttft_p50_ms);
    bind_real(st, 13, w->ttft_p99_ms);
    bind_real(st, 14, w->queue_mean_ms);
    return step(s, st, "sim_windows: inserting a window", err, errlen);
}

int hx_sim_store_verify(hx_sim_store *s, int64_t index, int64_t n_tokens, int64_t reused, int32_t segments,
                        bool logits_equal, int64_t first_diff, uint64_t max_ulp, double max_abs, char *err,
                        size_t errlen) {
    sqlite3_stmt *st = s->ver;
    sqlite3_bind_int64(st, 1, s->run_id);
    sqlite3_bind_int64(st, 2, index);
    sqlite3_bind_int64(st, 3, n_tokens);
    sqlite3_bind_int64(st, 4, reused);
    sqlite3_bind_int64(st, 5, segments);
    sqlite3_bind_int64(st, 6, logits_equal);
    if (first_diff >= 0) sqlite3_bind_int64(st, 7, first_diff);
    sqlite3_bind_int64(st, 8, max_ulp > (uint64_t)INT64_MAX ? INT64_MAX : (int64_t)max_ulp);
    bind_real(st, 9, max_abs);
    return step(s, st, "sim_verify: inserting a checked request", err, errlen);
}

int hx_sim_store_finish(hx_sim_store *s, const hx_sim_meta *m, const hx_sim_summary *u, int64_t verified,
                        int64_t identical, char *err, size_t errlen) {
    sqlite3_stmt *st = NULL;
    if (sqlite3_prepare_v2(s->db,
                           "INSERT INTO sim_runs VALUES(?1,?2,?3,?4,?5,?6,?7,?8,?9,?10,?11,?12,?13,?14,?15,?16,?17,"
                           "?18,?19,?20,?21,?22,?23,?24,?25,?26,?27,?28,?29,?30,?31,?32,?33,?34,?35,?36,?37,?38,?39,"
                           "?40,?41,?42,?43,?44,?45,?46,?47,?48,?49,?50,?51,?52,?53,?54,?55)",
                           -1, &st, NULL) != SQLITE_OK)
        return sql_fail(s, "sim_runs: preparing", err, errlen);
    int i = 1;
    sqlite3_bind_int64(st, i++, s->run_id);
    sqlite3_bind_text(st, i++, m->trace, -1, SQLITE_TRANSIENT);
    sqlite3_bind_text(st, i++, m->trace_sha256, -1, SQLITE_TRANSIENT);
    sqlite3_bind_text(st, i++, m->format, -1, SQLITE_TRANSIENT);
    sqlite3_bind_int64(st, i++, m->block_tokens);
    sqlite3_bind_int64(st, i++, m->block_size);
    sqlite3_bind_text(st, i++, m->policy, -1, SQLITE_TRANSIENT);
    sqlite3_bind_text(st, i++, m->quirks ? m->quirks : "", -1, SQLITE_TRANSIENT);
    sqlite3_bind_text(st, i++, m->evict, -1, SQLITE_TRANSIENT);
    sqlite3_bind_int64(st, i++, m->capacity_tokens);
    bind_real(st, i++, m->capacity_bytes);
    bind_real(st, i++, m->bytes_per_token);
    sqlite3_bind_int64(st, i++, m->repeat);
    sqlite3_bind_int64(st, i++, m->instances);
    sqlite3_bind_text(st, i++, m->route, -1, SQLITE_TRANSIENT);
    bind_real(st, i++, m->route_weight);
    sqlite3_bind_text(st, i++, m->pool, -1, SQLITE_TRANSIENT);
    bind_real(st, i++, m->speedup);
    bind_real(st, i++, m->window_s);
    sqlite3_bind_text(st, i++, m->profile, -1, SQLITE_TRANSIENT);
    sqlite3_bind_text(st, i++, m->profile_source, -1, SQLITE_TRANSIENT);
    bind_real(st, i++, m->gflops);
    bind_real(st, i++, m->restore_gbs);
    bind_real(st, i++, m->transfer_gbs);
    bind_real(st, i++, m->tpot_ms);
    sqlite3_bind_int64(st, i++, u->requests);
    sqlite3_bind_int64(st, i++, u->input_tokens);
    sqlite3_bind_int64(st, i++, u->hit_tokens);
    sqlite3_bind_int64(st, i++, u->blocks);
    sqlite3_bind_int64(st, i++, u->hit_blocks);
    bind_real(st, i++, u->hit_rate_tokens);
    bind_real(st, i++, u->hit_rate_blocks);
    sqlite3_bind_int64(st, i++, u->evictions);
    sqlite3_bind_int64(st, i++, u->stored_blocks);
    sqlite3_bind_int64(st, i++, u->held_blocks_end);
    sqlite3_bind_int64(st, i++, u->held_blocks_max);
    bind_real(st, i++, u->held_bytes_end);
    bind_real(st, i++, u->held_bytes_max);
    bind_real(st, i++, u->ttft_mean_ms);
    bind_real(st, i++, u->ttft_p50_ms);
    bind_real(st, i++, u->ttft_p90_ms);
    bind_real(st, i++, u->ttft_p99_ms);
    bind_real(st, i++, u->queue_mean_ms);
    bind_real(st, i++, u->queue_p50_ms);
    bind_real(st, i++, u->queue_p99_ms);
    bind_real(st, i++, u->prefill_mean_ms);
    bind_real(st, i++, u->restore_mean_ms);
    bind_real(st, i++, u->e2e_mean_ms);
    bind_real(st, i++, u->span_ms / 1e3);
    sqlite3_bind_int64(st, i++, u->windows);
    sqlite3_bind_int64(st, i++, m->request_rows);
    bind_real(st, i++, u->seconds);
    bind_real(st, i++, u->cpu_seconds);
    if (verified >= 0) sqlite3_bind_int64(st, i, verified);
    i++;
    if (verified >= 0) sqlite3_bind_int64(st, i, identical);
    int rc = sqlite3_step(st);
    sqlite3_finalize(st);
    if (rc != SQLITE_DONE) return sql_fail(s, "sim_runs: inserting the run", err, errlen);
    if ((rc = hx_store_finish_run(s->st, s->run_id, HX_RUN_DONE, err, errlen)) != ENG_OK) return rc;
    if (sqlite3_exec(s->db, "COMMIT", NULL, NULL, NULL) != SQLITE_OK) return sql_fail(s, "COMMIT", err, errlen);
    s->in_tx = false;
    return ENG_OK;
}

static void finalize(hx_sim_store *s) {
    sqlite3_finalize(s->req);
    sqlite3_finalize(s->win);
    sqlite3_finalize(s->ver);
    s->req = s->win = s->ver = NULL;
}

void hx_sim_store_abort(hx_sim_store *s) {
    if (!s) return;
    finalize(s);
    if (s->in_tx) sqlite3_exec(s->db, "ROLLBACK", NULL, NULL, NULL);
    if (s->run_id >= 0) {
        char sql[96];
        snprintf(sql, sizeof sql, "DELETE FROM runs WHERE run_id = %lld", (long long)s->run_id);
        sqlite3_exec(s->db, sql, NULL, NULL, NULL);
    }
    hx_store_close(s->st);
    free(s);
}

void hx_sim_store_close(hx_sim_store *s) {
    if (!s) return;
    if (s->in_tx) {
        hx_sim_store_abort(s);
        return;
    }
    finalize(s);
    hx_store_close(s->st);
    free(s);
}
