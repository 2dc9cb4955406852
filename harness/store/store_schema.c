/*
 * harness/store/store_schema.c: the results schema (docs/sqlite.md) and how
 * a file reaches it (see store_schema.h).
 *
 * The schema lives in `migrations`: entry v turns a version-v database into
 * version v+1, and PRAGMA user_version records how far a file has come. Each
 * migration runs inside BEGIN IMMEDIATE; all DDL uses IF NOT EXISTS. A
 * read-only store cannot migrate: an older file is shown in the current
 * schema through temp views. INSERT statements are generated from the
 * column lists here, so a column cannot be bound to the wrong placeholder.
 */
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "status.h"
#include "store_schema.h"
#include "util.h"

int hx_sql_map_rc(int rc) {
    switch (rc & 0xff) {
    case SQLITE_CONSTRAINT: return ENG_ERR_ARG;
    case SQLITE_MISMATCH:   return ENG_ERR_ARG;
    case SQLITE_NOTADB:     return ENG_ERR_FORMAT;
    case SQLITE_NOMEM:      return ENG_ERR_NOMEM;
    default:                return ENG_ERR_IO;
    }
}

int hx_sql_fail(const hx_sqldb *s, int rc, char *err, size_t errlen, const char *fmt, ...) {
    char what[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    const char *msg = s && s->db ? sqlite3_errmsg(s->db) : sqlite3_errstr(rc);
    eng_errf(err, errlen, "%s: %s: %s", s && s->path ? s->path : "?", what, msg);
    return hx_sql_map_rc(rc);
}

// ----------------------------------------------------------------------------
// The schema and its migrations

static const char *const runs_columns[] = {
    "started_at", "version", "git_rev", "argv", "experiment", "variant", "sweep_name",
    "sweep_value", "n_requests", "model_path", "model_sha256", "model_name", "n_params",
    "transcript", "transcript_sha256", "template", "policy", "quirks", "normalize",
    "threshold", "n_slots", "ctx_checkpoints", "checkpoint_every", "waypoint_every",
    "anchor", "cache_dir", "cache_ram", "cache_budget", "align", "chunk", "ubatch", "kernel", "precision", "threads",
    "decode_n", "cap_prompt", "n_ctx", "seed", "blas", "cpu", "n_cpus", "hostname",
    "os_release", "config_key", "extra", "policy_opts", "block_size",
    "n_repeat", "calib_gflops", "calib_restore_gbs", "price_gflops", "price_restore_gbs", "price_source",
    "spec_sha256", "scale", "unit", "n_units", "shard", "n_shards", "plan_sha256",
    "server_url", "server_api", "server_engine", "server_info", "probe_opts",
};

static const char *const requests_columns[] = {
    "run_id", "req_index", "transcript", "session", "turn", "n_prompt", "n_reused",
    "n_prefilled", "ttft_cold_ms", "ttft_reuse_ms", "logits_equal", "first_diff_index",
    "a_first", "b_first", "ulp_first", "max_abs_diff", "max_ulp", "kl", "top1_equal",
    "fork_step", "decode_equal", "n_decode", "flops_cold", "flops_reuse", "bytes_restored",
    "sim", "f_keep", "slot", "lcp", "miss_pos", "miss_byte", "miss_text", "miss_where",
    "n_checkpoints", "ckpt_bytes", "n_stored", "bytes_stored", "stable_end", "anchor_pos",
    "cold_shared", "restore_ms", "store_ms", "anchor_ms", "note", "extra",
    "state_equal", "state_hash_cold", "state_hash_reuse", "cache_bytes", "cache_entries",
    "ttft_cold_min_ms", "ttft_cold_max_ms", "ttft_reuse_min_ms", "ttft_reuse_max_ms",
    "model_cold_ms", "model_reuse_ms", "verified",
    "reuse_expected", "reuse_reported", "reuse_basis", "n_prompt_local", "prompt_diff", "json_equal", "n_probs",
    "error", "error_message", "http_status",
    "batch_k", "batch_equal", "batch_first_diff", "batch_ulp_first", "batch_max_ulp",
};

static const char *const steps_columns[] = {
    "run_id", "session", "turn", "step", "token_cold", "token_reuse", "logits_equal",
    "max_abs_diff", "max_ulp", "first_diff_index", "a_first", "b_first", "ulp_first", "kl",
};

#define N_OF(a) (sizeof(a) / sizeof((a)[0]))

/* migrations[v]: SQL taking user_version v to v + 1. */
static const char *const migrations[HX_STORE_SCHEMA_VERSION] = {
    /* 0 -> 1: the first schema */
    "CREATE TABLE IF NOT EXISTS runs(\n"
    "  run_id            INTEGER PRIMARY KEY,\n"
    "  started_at        TEXT NOT NULL,\n"
    "  finished_at       TEXT,\n"
    "  status            TEXT NOT NULL DEFAULT 'running'\n"
    "                    CHECK(status IN ('running','done','failed')),\n"
    "  resumes           INTEGER NOT NULL DEFAULT 0,\n"
    "  resumed_at        TEXT,\n"
    "  version           TEXT NOT NULL,\n"
    "  git_rev           TEXT NOT NULL,\n"
    "  argv              TEXT NOT NULL,\n"
    "  experiment        TEXT,\n"
    "  variant           TEXT,\n"
    "  sweep_name        TEXT,\n"
    "  sweep_value       REAL,\n"
    "  n_requests        INTEGER,\n"
    "  model_path        TEXT NOT NULL,\n"
    "  model_sha256      TEXT,\n"
    "  model_name        TEXT,\n"
    "  n_params          INTEGER,\n"
    "  transcript        TEXT,\n"
    "  transcript_sha256 TEXT,\n"
    "  template          TEXT,\n"
    "  policy            TEXT NOT NULL,\n"
    "  quirks            TEXT NOT NULL DEFAULT '',\n"
    "  normalize         TEXT NOT NULL DEFAULT '',\n"
    "  threshold         REAL,\n"
    "  n_slots           INTEGER,\n"
    "  ctx_checkpoints   INTEGER,\n"
    "  checkpoint_every  INTEGER,\n"
    "  waypoint_every    INTEGER,\n"
    "  anchor            TEXT,\n"
    "  cache_dir         TEXT,\n"
    "  cache_ram         INTEGER,\n"
    "  cache_budget      INTEGER,\n"
    "  align             TEXT NOT NULL,\n"
    "  chunk             INTEGER NOT NULL,\n"
    "  ubatch            INTEGER,\n"
    "  kernel            TEXT NOT NULL,\n"
    "  precision         TEXT NOT NULL,\n"
    "  threads           INTEGER NOT NULL,\n"
    "  decode_n          INTEGER,\n"
    "  cap_prompt        INTEGER,\n"
    "  n_ctx             INTEGER,\n"
    "  seed              INTEGER,\n"
    "  blas              TEXT,\n"
    "  cpu               TEXT,\n"
    "  n_cpus            INTEGER,\n"
    "  hostname          TEXT,\n"
    "  os_release        TEXT,\n"
    "  config_key        TEXT NOT NULL,\n"
    "  extra             TEXT\n"
    ");\n"
    "CREATE INDEX IF NOT EXISTS runs_by_config ON runs(config_key, status);\n"
    "CREATE INDEX IF NOT EXISTS runs_by_experiment ON runs(experiment, variant);\n"
    "CREATE TABLE IF NOT EXISTS requests(\n"
    "  run_id           INTEGER NOT NULL REFERENCES runs(run_id) ON DELETE CASCADE,\n"
    "  req_index        INTEGER NOT NULL CHECK(req_index >= 0),\n"
    "  transcript       TEXT,\n"
    "  session          TEXT NOT NULL,\n"
    "  turn             INTEGER NOT NULL,\n"
    "  n_prompt         INTEGER NOT NULL,\n"
    "  n_reused         INTEGER NOT NULL,\n"
    "  n_prefilled      INTEGER NOT NULL,\n"
    "  ttft_cold_ms     REAL,\n"
    "  ttft_reuse_ms    REAL,\n"
    "  logits_equal     INTEGER NOT NULL CHECK(logits_equal IN (0,1)),\n"
    "  first_diff_index INTEGER,\n"
    "  a_first          TEXT,\n"
    "  b_first          TEXT,\n"
    "  ulp_first        INTEGER,\n"
    "  max_abs_diff     REAL,\n"
    "  max_ulp          INTEGER,\n"
    "  kl               REAL,\n"
    "  top1_equal       INTEGER NOT NULL CHECK(top1_equal IN (0,1)),\n"
    "  fork_step        INTEGER,\n"
    "  decode_equal     INTEGER NOT NULL CHECK(decode_equal IN (0,1)),\n"
    "  n_decode         INTEGER NOT NULL,\n"
    "  flops_cold       REAL,\n"
    "  flops_reuse      REAL,\n"
    "  bytes_restored   INTEGER,\n"
    "  sim              REAL,\n"
    "  f_keep           REAL,\n"
    "  slot             INTEGER,\n"
    "  lcp              INTEGER,\n"
    "  miss_pos         INTEGER,\n"
    "  miss_byte        INTEGER,\n"
    "  miss_text        TEXT,\n"
    "  miss_where       TEXT,\n"
    "  n_checkpoints    INTEGER,\n"
    "  ckpt_bytes       INTEGER,\n"
    "  n_stored         INTEGER,\n"
    "  bytes_stored     INTEGER,\n"
    "  stable_end       INTEGER,\n"
    "  anchor_pos       INTEGER,\n"
    "  cold_shared      INTEGER NOT NULL DEFAULT 0 CHECK(cold_shared IN (0,1)),\n"
    "  restore_ms       REAL,\n"
    "  store_ms         REAL,\n"
    "  anchor_ms        REAL,\n"
    "  note             TEXT,\n"
    "  extra            TEXT,\n"
    "  PRIMARY KEY(run_id, session, turn)\n"
    ");\n"
    "CREATE INDEX IF NOT EXISTS requests_by_order ON requests(run_id, req_index);\n"
    "CREATE TABLE IF NOT EXISTS steps(\n"
    "  run_id           INTEGER NOT NULL,\n"
    "  session          TEXT NOT NULL,\n"
    "  turn             INTEGER NOT NULL,\n"
    "  step             INTEGER NOT NULL CHECK(step >= 0),\n"
    "  token_cold       INTEGER,\n"
    "  token_reuse      INTEGER,\n"
    "  logits_equal     INTEGER NOT NULL CHECK(logits_equal IN (0,1)),\n"
    "  max_abs_diff     REAL,\n"
    "  max_ulp          INTEGER,\n"
    "  first_diff_index INTEGER,\n"
    "  a_first          TEXT,\n"
    "  b_first          TEXT,\n"
    "  ulp_first        INTEGER,\n"
    "  kl               REAL,\n"
    "  PRIMARY KEY(run_id, session, turn, step),\n"
    "  FOREIGN KEY(run_id, session, turn) REFERENCES requests(run_id, session, turn)\n"
    "    ON DELETE CASCADE\n"
    ");\n"
    "CREATE VIEW IF NOT EXISTS results AS\n"
    "  SELECT ru.experiment, ru.variant, ru.sweep_name, ru.sweep_value, ru.model_name,\n"
    "         ru.policy, ru.quirks, ru.normalize, ru.align, ru.chunk, ru.ubatch, ru.kernel,\n"
    "         ru.precision, ru.threads, ru.decode_n, ru.n_ctx, ru.status, rq.*\n"
    "  FROM requests rq JOIN runs ru USING(run_id);\n",
    /* 1 -> 2: the sequence state after the prompt, compared by hash */
    "ALTER TABLE requests ADD COLUMN state_equal INTEGER CHECK(state_equal IN (0,1));\n"
    "ALTER TABLE requests ADD COLUMN state_hash_cold TEXT;\n"
    "ALTER TABLE requests ADD COLUMN state_hash_reuse TEXT;\n",
    /* 2 -> 3: the paged policies' settings, and what the cache holds after each request */
    "ALTER TABLE runs ADD COLUMN policy_opts TEXT;\n"
    "ALTER TABLE runs ADD COLUMN block_size INTEGER;\n"
    "ALTER TABLE requests ADD COLUMN cache_bytes INTEGER;\n"
    "ALTER TABLE requests ADD COLUMN cache_entries INTEGER;\n",
    /* 3 -> 4: repeated timing (--repeat) and the modeled TTFT with its calibration */
    "ALTER TABLE runs ADD COLUMN n_repeat INTEGER;\n"
    "ALTER TABLE runs ADD COLUMN calib_gflops REAL;\n"
    "ALTER TABLE runs ADD COLUMN calib_restore_gbs REAL;\n"
    "ALTER TABLE runs ADD COLUMN price_gflops REAL;\n"
    "ALTER TABLE runs ADD COLUMN price_restore_gbs REAL;\n"
    "ALTER TABLE runs ADD COLUMN price_source TEXT;\n"
    "ALTER TABLE requests ADD COLUMN ttft_cold_min_ms REAL;\n"
    "ALTER TABLE requests ADD COLUMN ttft_cold_max_ms REAL;\n"
    "ALTER TABLE requests ADD COLUMN ttft_reuse_min_ms REAL;\n"
    "ALTER TABLE requests ADD COLUMN ttft_reuse_max_ms REAL;\n"
    "ALTER TABLE requests ADD COLUMN model_cold_ms REAL;\n"
    "ALTER TABLE requests ADD COLUMN model_reuse_ms REAL;\n",
    /* 4 -> 5: whether a request was compared with its cold run (kvreplay serve without --verify: not) */
    "ALTER TABLE requests ADD COLUMN verified INTEGER CHECK(verified IN (0,1));\n",
    /* 5 -> 6: experiments in shards (issue #22): which spec, scale, unit and shard made each run */
    "ALTER TABLE runs ADD COLUMN spec_sha256 TEXT;\n"
    "ALTER TABLE runs ADD COLUMN scale TEXT;\n"
    "ALTER TABLE runs ADD COLUMN unit INTEGER;\n"
    "ALTER TABLE runs ADD COLUMN n_units INTEGER;\n"
    "ALTER TABLE runs ADD COLUMN shard INTEGER;\n"
    "ALTER TABLE runs ADD COLUMN n_shards INTEGER;\n"
    "ALTER TABLE runs ADD COLUMN plan_sha256 TEXT;\n"
    "CREATE TABLE IF NOT EXISTS shards(\n"
    "  plan_sha256 TEXT NOT NULL,\n"
    "  shard       INTEGER NOT NULL CHECK(shard >= 1),\n"
    "  n_shards    INTEGER NOT NULL CHECK(n_shards >= shard),\n"
    "  experiment  TEXT NOT NULL,\n"
    "  spec_sha256 TEXT NOT NULL,\n"
    "  scale       TEXT NOT NULL,\n"
    "  n_units     INTEGER NOT NULL,\n"
    "  plan        TEXT NOT NULL,\n"
    "  git_rev     TEXT NOT NULL,\n"
    "  version     TEXT NOT NULL,\n"
    "  blas        TEXT,\n"
    "  started_at  TEXT NOT NULL,\n"
    "  argv        TEXT NOT NULL,\n"
    "  hostname    TEXT,\n"
    "  PRIMARY KEY(plan_sha256, shard, git_rev)\n"
    ");\n",
    /* 6 -> 7: kvreplay probe: the live server of a probe run, and per request the reuse it reported
     * against the reuse expected, how the prompt's tokens were known, the bits' JSON text, errors */
    "ALTER TABLE runs ADD COLUMN server_url TEXT;\n"
    "ALTER TABLE runs ADD COLUMN server_api TEXT;\n"
    "ALTER TABLE runs ADD COLUMN server_engine TEXT;\n"
    "ALTER TABLE runs ADD COLUMN server_info TEXT;\n"
    "ALTER TABLE runs ADD COLUMN probe_opts TEXT;\n"
    "ALTER TABLE requests ADD COLUMN reuse_expected INTEGER;\n"
    "ALTER TABLE requests ADD COLUMN reuse_reported INTEGER;\n"
    "ALTER TABLE requests ADD COLUMN reuse_basis TEXT;\n"
    "ALTER TABLE requests ADD COLUMN n_prompt_local INTEGER;\n"
    "ALTER TABLE requests ADD COLUMN prompt_diff TEXT;\n"
    "ALTER TABLE requests ADD COLUMN json_equal INTEGER CHECK(json_equal IN (0,1));\n"
    "ALTER TABLE requests ADD COLUMN n_probs INTEGER;\n"
    "ALTER TABLE requests ADD COLUMN error TEXT;\n"
    "ALTER TABLE requests ADD COLUMN error_message TEXT;\n"
    "ALTER TABLE requests ADD COLUMN http_status INTEGER;\n",
    /* 7 -> 8: replay --batch-check K: the request computed inside a batch with K other sequences,
     * against its cold run alone */
    "ALTER TABLE requests ADD COLUMN batch_k INTEGER;\n"
    "ALTER TABLE requests ADD COLUMN batch_equal INTEGER CHECK(batch_equal IN (0,1));\n"
    "ALTER TABLE requests ADD COLUMN batch_first_diff INTEGER;\n"
    "ALTER TABLE requests ADD COLUMN batch_ulp_first INTEGER;\n"
    "ALTER TABLE requests ADD COLUMN batch_max_ulp INTEGER;\n",
};

/* compat_views[v]: temp views that present a version-v file (opened read-only,
 * so not migrated) with the current schema's columns, NULL where v had none.
 * plots/compat-vN.sql are the same views for the sqlite3 shell. */
#define COMPAT_RUNS_3 " NULL AS policy_opts, NULL AS block_size,"
#define COMPAT_RUNS_4                                                                                   \
    " NULL AS n_repeat, NULL AS calib_gflops, NULL AS calib_restore_gbs, NULL AS price_gflops,"        \
    " NULL AS price_restore_gbs, NULL AS price_source,"
#define COMPAT_RUNS_6                                                                                   \
    " NULL AS spec_sha256, NULL AS scale, NULL AS unit, NULL AS n_units, NULL AS shard,"               \
    " NULL AS n_shards, NULL AS plan_sha256,"
#define COMPAT_RUNS_7                                                                                   \
    " NULL AS server_url, NULL AS server_api, NULL AS server_engine, NULL AS server_info,"             \
    " NULL AS probe_opts FROM main.runs;"
#define COMPAT_REQUESTS_2 " NULL AS state_equal, NULL AS state_hash_cold, NULL AS state_hash_reuse,"
#define COMPAT_REQUESTS_3 " NULL AS cache_bytes, NULL AS cache_entries,"
#define COMPAT_REQUESTS_4                                                                               \
    " NULL AS ttft_cold_min_ms, NULL AS ttft_cold_max_ms, NULL AS ttft_reuse_min_ms,"                  \
    " NULL AS ttft_reuse_max_ms, NULL AS model_cold_ms, NULL AS model_reuse_ms,"
#define COMPAT_REQUESTS_5 " NULL AS verified,"
#define COMPAT_REQUESTS_7                                                                               \
    " NULL AS reuse_expected, NULL AS reuse_reported, NULL AS reuse_basis, NULL AS n_prompt_local,"    \
    " NULL AS prompt_diff, NULL AS json_equal, NULL AS n_probs, NULL AS error, NULL AS error_message,"  \
    " NULL AS http_status,"
#define COMPAT_REQUESTS_8                                                                               \
    " NULL AS batch_k, NULL AS batch_equal, NULL AS batch_first_diff, NULL AS batch_ulp_first,"        \
    " NULL AS batch_max_ulp FROM main.requests;"
#define COMPAT_RUNS_NONE "CREATE TEMP VIEW runs AS SELECT * FROM main.runs;"
#define COMPAT_RUNS "CREATE TEMP VIEW runs AS SELECT *,"
#define COMPAT_REQUESTS "CREATE TEMP VIEW requests AS SELECT *,"
static const char *const compat_views[HX_STORE_SCHEMA_VERSION] = {
    "",
    COMPAT_RUNS COMPAT_RUNS_3 COMPAT_RUNS_4 COMPAT_RUNS_6 COMPAT_RUNS_7 COMPAT_REQUESTS COMPAT_REQUESTS_2
        COMPAT_REQUESTS_3 COMPAT_REQUESTS_4 COMPAT_REQUESTS_5 COMPAT_REQUESTS_7 COMPAT_REQUESTS_8,
    COMPAT_RUNS COMPAT_RUNS_3 COMPAT_RUNS_4 COMPAT_RUNS_6 COMPAT_RUNS_7 COMPAT_REQUESTS COMPAT_REQUESTS_3
        COMPAT_REQUESTS_4 COMPAT_REQUESTS_5 COMPAT_REQUESTS_7 COMPAT_REQUESTS_8,
    COMPAT_RUNS COMPAT_RUNS_4 COMPAT_RUNS_6 COMPAT_RUNS_7 COMPAT_REQUESTS COMPAT_REQUESTS_4 COMPAT_REQUESTS_5
        COMPAT_REQUESTS_7 COMPAT_REQUESTS_8,
    COMPAT_RUNS COMPAT_RUNS_6 COMPAT_RUNS_7 COMPAT_REQUESTS COMPAT_REQUESTS_5 COMPAT_REQUESTS_7 COMPAT_REQUESTS_8,
    COMPAT_RUNS COMPAT_RUNS_6 COMPAT_RUNS_7 COMPAT_REQUESTS COMPAT_REQUESTS_7 COMPAT_REQUESTS_8,
    COMPAT_RUNS COMPAT_RUNS_7 COMPAT_REQUESTS COMPAT_REQUESTS_7 COMPAT_REQUESTS_8,
    COMPAT_RUNS_NONE COMPAT_REQUESTS COMPAT_REQUESTS_8,
};

// ----------------------------------------------------------------------------
// Opening: pragmas, schema version, migrations

int hx_sql_pragma_int(hx_sqldb *s, const char *sql, int64_t *out, char *err, size_t errlen) {
    sqlite3_stmt *st = NULL;
    int rc = sqlite3_prepare_v2(s->db, sql, -1, &st, NULL);
    if (rc == SQLITE_OK) {
        rc = sqlite3_step(st);
        if (rc == SQLITE_ROW) {
            *out = sqlite3_column_int64(st, 0);
            rc = SQLITE_OK;
        } else if (rc == SQLITE_DONE) {
            *out = 0;
            rc = SQLITE_OK;
        }
    }
    int status = rc == SQLITE_OK ? ENG_OK : hx_sql_fail(s, rc, err, errlen, "%s", sql);
    sqlite3_finalize(st);
    return status;
}

int hx_schema_check_version(hx_sqldb *s, int64_t v, char *err, size_t errlen) {
    if (v > HX_STORE_SCHEMA_VERSION) {
        eng_errf(err, errlen,
                 "%s: schema version %lld is newer than this kvreplay supports (%d): "
                 "use a newer kvreplay or another --db", s->path, (long long)v,
                 HX_STORE_SCHEMA_VERSION);
        return ENG_ERR_UNSUPPORTED;
    }
    if (v < 0) {
        eng_errf(err, errlen, "%s: user_version %lld: not a kvreplay results database",
                 s->path, (long long)v);
        return ENG_ERR_FORMAT;
    }
    return ENG_OK;
}

// ----------------------------------------------------------------------------
// Files with a hole in their schema
//
// Some files of versions 6 and 7 claim their version yet lack a column or a table of migration 4 -> 5
// or 5 -> 6 (both only add columns and a table). Those two migrations are re-applied statement by
// statement, skipping what the file has; a read-only file gets NULL columns through views instead.

#define HOLE_FIRST 4  /* migrations[4] (4 -> 5) and [5] (5 -> 6) */
#define HOLE_LAST  5

static bool has_column(sqlite3 *db, const char *table, const char *column) {
    sqlite3_stmt *st = NULL;
    bool found = false;
    if (sqlite3_prepare_v2(db, "SELECT 1 FROM pragma_table_info(?1, 'main') WHERE name = ?2", -1, &st,
                           NULL) == SQLITE_OK) {
        sqlite3_bind_text(st, 1, table, -1, SQLITE_STATIC);
        sqlite3_bind_text(st, 2, column, -1, SQLITE_STATIC);
        found = sqlite3_step(st) == SQLITE_ROW;
    }
    sqlite3_finalize(st);
    return found;
}

static bool has_table(sqlite3 *db, const char *table) {
    sqlite3_stmt *st = NULL;
    bool found = false;
    if (sqlite3_prepare_v2(db, "SELECT 1 FROM main.sqlite_master WHERE type = 'table' AND name = ?1", -1, &st,
                           NULL) == SQLITE_OK) {
        sqlite3_bind_text(st, 1, table, -1, SQLITE_STATIC);
        found = sqlite3_step(st) == SQLITE_ROW;
    }
    sqlite3_finalize(st);
    return found;
}

/* Counts the statements of the hole migrations a version-v file lacks (v > HOLE_FIRST: those
 * migrations should have run); with apply, runs them. Returns ENG_OK or an error. */
static int fill_holes(hx_sqldb *s, int64_t v, bool apply, int *n_missing, char *err, size_t errlen) {
    *n_missing = 0;
    for (int m = HOLE_FIRST; m <= HOLE_LAST && m < v; m++) {
        const char *p = migrations[m];
        while (*p) {
            const char *end = strstr(p, ";\n");
            size_t n = end ? (size_t)(end - p) + 1 : strlen(p);
            char stmt[1024], table[64], column[64];
            if (n >= sizeof stmt) {
                eng_errf(err, errlen, "%s: schema repair: statement too long", s->path);
                return ENG_ERR_UNSUPPORTED;
            }
            memcpy(stmt, p, n);
            stmt[n] = '\0';
            p += end ? n + 1 : n;
            bool missing;
            if (sscanf(stmt, "ALTER TABLE %63s ADD COLUMN %63s", table, column) == 2)
                missing = !has_column(s->db, table, column);
            else if (sscanf(stmt, "CREATE TABLE IF NOT EXISTS %63[a-z_]", table) == 1)
                missing = !has_table(s->db, table);
            else {
                eng_errf(err, errlen, "%s: schema repair: unexpected statement in migration %d", s->path, m);
                return ENG_ERR_UNSUPPORTED;
            }
            if (!missing) continue;
            (*n_missing)++;
            if (apply) {
                int rc = sqlite3_exec(s->db, stmt, NULL, NULL, NULL);
                if (rc != SQLITE_OK)
                    return hx_sql_fail(s, rc, err, errlen, "schema repair (migration %d -> %d)", m, m + 1);
            }
        }
    }
    return ENG_OK;
}

/* A read-only file with a hole: temp views give it every current column (NULL where it has none),
 * appended after its own. */
static int hole_views(hx_sqldb *s, char *err, size_t errlen) {
    static const struct { const char *table; const char *const *cols; size_t n; } t[] = {
        {"runs", runs_columns, N_OF(runs_columns)},
        {"requests", requests_columns, N_OF(requests_columns)},
    };
    for (size_t i = 0; i < N_OF(t); i++) {
        char *sql = sqlite3_mprintf("DROP VIEW IF EXISTS temp.%s; CREATE TEMP VIEW %s AS SELECT *", t[i].table,
                                    t[i].table);
        for (size_t c = 0; sql && c < t[i].n; c++)
            if (!has_column(s->db, t[i].table, t[i].cols[c])) {
                char *more = sqlite3_mprintf("%s, NULL AS %s", sql, t[i].cols[c]);
                sqlite3_free(sql);
                sql = more;
            }
        char *all = sql ? sqlite3_mprintf("%s FROM main.%s;", sql, t[i].table) : NULL;
        sqlite3_free(sql);
        int rc = all ? sqlite3_exec(s->db, all, NULL, NULL, NULL) : SQLITE_NOMEM;
        sqlite3_free(all);
        if (rc != SQLITE_OK) return hx_sql_fail(s, rc, err, errlen, "schema compatibility views (%s)", t[i].table);
    }
    return ENG_OK;
}

/* Inside BEGIN IMMEDIATE: re-reads the version (another process may have
 * migrated meanwhile) and applies the missing migrations. */
static int migrate(hx_sqldb *s, char *err, size_t errlen) {
    int rc = sqlite3_exec(s->db, "BEGIN IMMEDIATE", NULL, NULL, NULL);
    if (rc != SQLITE_OK) return hx_sql_fail(s, rc, err, errlen, "creating the schema: BEGIN");
    int64_t v = 0, n_objects = 0;
    int status = hx_sql_pragma_int(s, "PRAGMA user_version", &v, err, errlen);
    if (status == ENG_OK) status = hx_schema_check_version(s, v, err, errlen);
    if (status == ENG_OK && v == 0)
        status = hx_sql_pragma_int(s, "SELECT count(*) FROM sqlite_master", &n_objects, err, errlen);
    if (status == ENG_OK && v == 0 && n_objects > 0) {
        eng_errf(err, errlen, "%s: has tables but user_version 0: not a kvreplay results "
                 "database (refusing to add tables to it)", s->path);
        status = ENG_ERR_FORMAT;
    }
    int n_holes = 0;
    if (status == ENG_OK) status = fill_holes(s, v, true, &n_holes, err, errlen);
    for (; status == ENG_OK && v < HX_STORE_SCHEMA_VERSION; v++) {
        rc = sqlite3_exec(s->db, migrations[v], NULL, NULL, NULL);
        if (rc == SQLITE_OK) {
            char sql[64];
            snprintf(sql, sizeof sql, "PRAGMA user_version = %lld", (long long)v + 1);
            rc = sqlite3_exec(s->db, sql, NULL, NULL, NULL);
        }
        if (rc != SQLITE_OK)
            status = hx_sql_fail(s, rc, err, errlen, "schema migration %lld -> %lld",
                              (long long)v, (long long)v + 1);
    }
    if (status == ENG_OK) {
        rc = sqlite3_exec(s->db, "COMMIT", NULL, NULL, NULL);
        if (rc != SQLITE_OK) status = hx_sql_fail(s, rc, err, errlen, "creating the schema: COMMIT");
    }
    if (status != ENG_OK && !sqlite3_get_autocommit(s->db))
        sqlite3_exec(s->db, "ROLLBACK", NULL, NULL, NULL);
    return status;
}


/* "INSERT INTO t(a, b) VALUES(:a, :b)" (malloc'd). */
static char *make_insert(const char *table, const char *const *cols, size_t n) {
    eng_buf b = {0};
    int rc = eng_buf_printf(&b, "INSERT INTO %s(", table);
    for (size_t i = 0; i < n && rc == ENG_OK; i++)
        rc = eng_buf_printf(&b, "%s%s", i ? ", " : "", cols[i]);
    if (rc == ENG_OK) rc = eng_buf_printf(&b, ") VALUES(");
    for (size_t i = 0; i < n && rc == ENG_OK; i++)
        rc = eng_buf_printf(&b, "%s:%s", i ? ", " : "", cols[i]);
    if (rc == ENG_OK) rc = eng_buf_printf(&b, ")");
    if (rc != ENG_OK) {
        eng_buf_free(&b);
        return NULL;
    }
    return b.data;
}


char *hx_schema_insert_sql(int table) {
    switch (table) {
    case 0:  return make_insert("runs", runs_columns, N_OF(runs_columns));
    case 1:  return make_insert("requests", requests_columns, N_OF(requests_columns));
    default: return make_insert("steps", steps_columns, N_OF(steps_columns));
    }
}

int hx_schema_views(hx_sqldb *s, int64_t v, char *err, size_t errlen) {
    /* A read-only store cannot migrate: an older file is shown in the current
     * schema through temp views (temp names shadow main's). */
    if (v < HX_STORE_SCHEMA_VERSION && sqlite3_exec(s->db, compat_views[v], NULL, NULL, NULL) != SQLITE_OK)
        return hx_sql_fail(s, sqlite3_errcode(s->db), err, errlen, "schema compatibility views");
    int n_holes = 0, status = fill_holes(s, v, false, &n_holes, err, errlen);
    if (status == ENG_OK && n_holes > 0) status = hole_views(s, err, errlen);
    return status;
}

int hx_schema_update(hx_sqldb *s, int64_t v, char *err, size_t errlen) {
    int n_holes = 0, status = fill_holes(s, v, false, &n_holes, err, errlen);
    if (status == ENG_OK && (v < HX_STORE_SCHEMA_VERSION || n_holes > 0)) status = migrate(s, err, errlen);
    return status;
}
