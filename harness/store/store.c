/*
 * harness/store/store.c: the SQLite results store (see store.h for the contract,
 * docs/sqlite.md for the schema).
 *
 * The schema lives in `migrations`: entry v turns a version-v database into
 * version v+1, and PRAGMA user_version records how far a file has come. All
 * DDL uses IF NOT EXISTS, so a half-migrated file (impossible anyway: each
 * migration runs inside BEGIN IMMEDIATE) would be completed, not broken.
 *
 * Prepared statements are cached in the store object (prepared on first use
 * with SQLITE_PREPARE_PERSISTENT) and always reset after use, so no
 * statement holds a read transaction open between calls. INSERT statements
 * are generated from one column list and bound by parameter name, so a
 * column can never be bound to the wrong placeholder.
 */
#include "store.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>

#include "model.h"
#include "status.h"
#include "sysinfo.h"
#include "util.h"
#include "version.h"

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
    " NULL AS http_status FROM main.requests;"
#define COMPAT_RUNS "CREATE TEMP VIEW runs AS SELECT *,"
#define COMPAT_REQUESTS "CREATE TEMP VIEW requests AS SELECT *,"
static const char *const compat_views[HX_STORE_SCHEMA_VERSION] = {
    "",
    COMPAT_RUNS COMPAT_RUNS_3 COMPAT_RUNS_4 COMPAT_RUNS_6 COMPAT_RUNS_7 COMPAT_REQUESTS COMPAT_REQUESTS_2
        COMPAT_REQUESTS_3 COMPAT_REQUESTS_4 COMPAT_REQUESTS_5 COMPAT_REQUESTS_7,
    COMPAT_RUNS COMPAT_RUNS_3 COMPAT_RUNS_4 COMPAT_RUNS_6 COMPAT_RUNS_7 COMPAT_REQUESTS COMPAT_REQUESTS_3
        COMPAT_REQUESTS_4 COMPAT_REQUESTS_5 COMPAT_REQUESTS_7,
    COMPAT_RUNS COMPAT_RUNS_4 COMPAT_RUNS_6 COMPAT_RUNS_7 COMPAT_REQUESTS COMPAT_REQUESTS_4 COMPAT_REQUESTS_5
        COMPAT_REQUESTS_7,
    COMPAT_RUNS COMPAT_RUNS_6 COMPAT_RUNS_7 COMPAT_REQUESTS COMPAT_REQUESTS_5 COMPAT_REQUESTS_7,
    COMPAT_RUNS COMPAT_RUNS_6 COMPAT_RUNS_7 COMPAT_REQUESTS COMPAT_REQUESTS_7,
    COMPAT_RUNS COMPAT_RUNS_7 COMPAT_REQUESTS COMPAT_REQUESTS_7,
};

// ----------------------------------------------------------------------------
// The store object and its statement cache

enum stmt_id {
    ST_BEGIN, ST_COMMIT, ST_ROLLBACK,
    ST_INSERT_RUN, ST_INSERT_REQUEST, ST_INSERT_STEP,
    ST_FIND_RESUMABLE, ST_FIND_DONE, ST_NOTE_RESUME, ST_FINISH_RUN, ST_LAST_RUN, ST_COUNT_REQUESTS,
    ST_LOAD_DONE, ST_REQUEST_DONE,
    ST_COUNT
};

struct hx_store {
    sqlite3      *db;
    char         *path;
    bool          readonly;
    sqlite3_stmt *st[ST_COUNT];
    char         *insert_sql[3];  /* generated INSERT text for runs, requests, steps */
    int           lockfd;         /* PATH.lock, for the runs this store writes (-1: not open) */
};

sqlite3    *hx_store_db(hx_store *s) { return s->db; }
const char *hx_store_path(const hx_store *s) { return s->path; }

/* Maps a sqlite result code onto an eng_status. */
static int map_rc(int rc) {
    switch (rc & 0xff) {
    case SQLITE_CONSTRAINT: return ENG_ERR_ARG;
    case SQLITE_MISMATCH:   return ENG_ERR_ARG;
    case SQLITE_NOTADB:     return ENG_ERR_FORMAT;
    case SQLITE_NOMEM:      return ENG_ERR_NOMEM;
    default:                return ENG_ERR_IO;
    }
}

/* Formats "PATH: WHAT: sqlite's message" (WHAT from fmt) and returns the
 * mapped status of rc. Call before anything else touches the connection. */
static int fail_sql(hx_store *s, int rc, char *err, size_t errlen, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
static int fail_sql(hx_store *s, int rc, char *err, size_t errlen, const char *fmt, ...) {
    char what[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    const char *msg = s && s->db ? sqlite3_errmsg(s->db) : sqlite3_errstr(rc);
    eng_errf(err, errlen, "%s: %s: %s", s ? s->path : "?", what, msg);
    return map_rc(rc);
}

static const char *stmt_sql(hx_store *s, enum stmt_id id) {
    switch (id) {
    case ST_BEGIN:          return "BEGIN IMMEDIATE";
    case ST_COMMIT:         return "COMMIT";
    case ST_ROLLBACK:       return "ROLLBACK";
    case ST_INSERT_RUN:     return s->insert_sql[0];
    case ST_INSERT_REQUEST: return s->insert_sql[1];
    case ST_INSERT_STEP:    return s->insert_sql[2];
    case ST_FIND_RESUMABLE:
        return "SELECT run_id FROM runs WHERE config_key = ?1 AND status IN ('running', 'failed')"
               " ORDER BY run_id DESC LIMIT 1";
    case ST_FIND_DONE:
        return "SELECT run_id FROM runs WHERE config_key = ?1 AND status = 'done'"
               " ORDER BY run_id DESC LIMIT 1";
    case ST_NOTE_RESUME:
        return "UPDATE runs SET resumes = resumes + 1, resumed_at = ?2, status = 'running',"
               " finished_at = NULL WHERE run_id = ?1";
    case ST_FINISH_RUN:
        return "UPDATE runs SET status = ?2, finished_at = ?3 WHERE run_id = ?1";
    case ST_LAST_RUN:       return "SELECT max(run_id) FROM runs";
    case ST_COUNT_REQUESTS: return "SELECT count(*) FROM requests WHERE run_id = ?1";
    case ST_LOAD_DONE:      return "SELECT session, turn FROM requests WHERE run_id = ?1";
    case ST_REQUEST_DONE:
        return "SELECT 1 FROM requests WHERE run_id = ?1 AND session = ?2 AND turn = ?3";
    case ST_COUNT:          break;
    }
    return NULL;
}

/* The cached statement id, prepared on first use. NULL on failure (message in err). */
static sqlite3_stmt *stmt(hx_store *s, enum stmt_id id, int *status, char *err, size_t errlen) {
    if (s->st[id]) return s->st[id];
    const char *sql = stmt_sql(s, id);
    ENG_ASSERT(sql != NULL);
    int rc = sqlite3_prepare_v3(s->db, sql, -1, SQLITE_PREPARE_PERSISTENT, &s->st[id], NULL);
    if (rc != SQLITE_OK) {
        /* A prepare failing on a table or column means the file is not ours. */
        *status = fail_sql(s, rc, err, errlen, "preparing \"%.60s\"", sql);
        if (*status == ENG_ERR_IO && (rc & 0xff) == SQLITE_ERROR) *status = ENG_ERR_FORMAT;
        s->st[id] = NULL;
        return NULL;
    }
    return s->st[id];
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

// ----------------------------------------------------------------------------
// Binding by parameter name: a NULL string, a negative integer (in the
// _opt variants) and a NaN real become SQL NULL.

static int param(sqlite3_stmt *st, const char *name) {
    char key[64];
    snprintf(key, sizeof key, ":%s", name);
    int i = sqlite3_bind_parameter_index(st, key);
    ENG_ASSERT(i > 0);  /* a column missing from the generated INSERT is a bug */
    return i;
}

static int bind_text(sqlite3_stmt *st, const char *name, const char *v) {
    int i = param(st, name);
    return v ? sqlite3_bind_text(st, i, v, -1, SQLITE_TRANSIENT) : sqlite3_bind_null(st, i);
}
static int bind_int(sqlite3_stmt *st, const char *name, int64_t v) {
    return sqlite3_bind_int64(st, param(st, name), v);
}
static int bind_int_opt(sqlite3_stmt *st, const char *name, int64_t v) {
    int i = param(st, name);
    return v >= 0 ? sqlite3_bind_int64(st, i, v) : sqlite3_bind_null(st, i);
}
static int bind_u64(sqlite3_stmt *st, const char *name, uint64_t v) {
    return sqlite3_bind_int64(st, param(st, name), v > (uint64_t)INT64_MAX ? INT64_MAX : (int64_t)v);
}
static int bind_real(sqlite3_stmt *st, const char *name, double v) {
    int i = param(st, name);
    return isnan(v) ? sqlite3_bind_null(st, i) : sqlite3_bind_double(st, i, v);
}
static int bind_hexfloat(sqlite3_stmt *st, const char *name, float v) {
    char buf[64];
    snprintf(buf, sizeof buf, "%a", (double)v);
    return bind_text(st, name, buf);
}
/* a_first, b_first (as %a text) and ulp_first where the logits differ, NULL otherwise. */
static void bind_first_diff(sqlite3_stmt *st, bool diff, float a, float b, uint64_t ulp) {
    if (diff) {
        bind_hexfloat(st, "a_first", a);
        bind_hexfloat(st, "b_first", b);
        bind_u64(st, "ulp_first", ulp);
    } else {
        bind_text(st, "a_first", NULL);
        bind_text(st, "b_first", NULL);
        bind_int_opt(st, "ulp_first", -1);
    }
}

/* Runs a statement that returns no rows (or ignores them) and resets it. */
static int step_done(sqlite3_stmt *st) {
    int rc = sqlite3_step(st);
    while (rc == SQLITE_ROW) rc = sqlite3_step(st);
    return rc == SQLITE_DONE ? SQLITE_OK : rc;
}

// ----------------------------------------------------------------------------
// Opening: pragmas, schema version, migrations

static int pragma_int(hx_store *s, const char *sql, int64_t *out, char *err, size_t errlen) {
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
    int status = rc == SQLITE_OK ? ENG_OK : fail_sql(s, rc, err, errlen, "%s", sql);
    sqlite3_finalize(st);
    return status;
}

static int check_version(hx_store *s, int64_t v, char *err, size_t errlen) {
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
// Versions 5 and 6 were written on three branches at once (serve, scale and probe), each leaving
// the others' migration empty. So a file can claim a version and still lack what another branch's
// migration adds: kvreplay's schema-7 files written before the merge have no shard columns (5 -> 6),
// the scale branch's version-6 files have no requests.verified (4 -> 5). Those two migrations only
// add columns and a table, so they are re-applied statement by statement, skipping what the file has.

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
static int fill_holes(hx_store *s, int64_t v, bool apply, int *n_missing, char *err, size_t errlen) {
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
                    return fail_sql(s, rc, err, errlen, "schema repair (migration %d -> %d)", m, m + 1);
            }
        }
    }
    return ENG_OK;
}

/* A read-only file with a hole: temp views give it every current column (NULL where it has none),
 * appended after its own. */
static int hole_views(hx_store *s, char *err, size_t errlen) {
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
        if (rc != SQLITE_OK) return fail_sql(s, rc, err, errlen, "schema compatibility views (%s)", t[i].table);
    }
    return ENG_OK;
}

/* Inside BEGIN IMMEDIATE: re-reads the version (another process may have
 * migrated meanwhile) and applies the missing migrations. */
static int migrate(hx_store *s, char *err, size_t errlen) {
    int rc = sqlite3_exec(s->db, "BEGIN IMMEDIATE", NULL, NULL, NULL);
    if (rc != SQLITE_OK) return fail_sql(s, rc, err, errlen, "creating the schema: BEGIN");
    int64_t v = 0, n_objects = 0;
    int status = pragma_int(s, "PRAGMA user_version", &v, err, errlen);
    if (status == ENG_OK) status = check_version(s, v, err, errlen);
    if (status == ENG_OK && v == 0)
        status = pragma_int(s, "SELECT count(*) FROM sqlite_master", &n_objects, err, errlen);
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
            status = fail_sql(s, rc, err, errlen, "schema migration %lld -> %lld",
                              (long long)v, (long long)v + 1);
    }
    if (status == ENG_OK) {
        rc = sqlite3_exec(s->db, "COMMIT", NULL, NULL, NULL);
        if (rc != SQLITE_OK) status = fail_sql(s, rc, err, errlen, "creating the schema: COMMIT");
    }
    if (status != ENG_OK && !sqlite3_get_autocommit(s->db))
        sqlite3_exec(s->db, "ROLLBACK", NULL, NULL, NULL);
    return status;
}

/* "file:PATH?immutable=1" with PATH percent-encoded where a URI needs it. */
static char *immutable_uri(const char *path) {
    size_t n = strlen(path);
    char *u = malloc(3 * n + 32);
    if (!u) return NULL;
    char *o = u + sprintf(u, "file:");
    for (const unsigned char *p = (const unsigned char *)path; *p; p++) {
        if (*p == '%' || *p == '?' || *p == '#' || *p < 0x21 || *p >= 0x7f) o += sprintf(o, "%%%02X", *p);
        else *o++ = (char)*p;
    }
    sprintf(o, "?immutable=1");
    return u;
}

/* A reader of a WAL database must create PATH-shm beside it; on a read-only
 * directory or filesystem that fails (SQLITE_READONLY / SQLITE_CANTOPEN)
 * although nothing needs writing. When PATH-wal is absent or empty (the
 * last writer closed cleanly: every commit is in PATH), the file is opened
 * again as immutable, which needs no -shm. Returns true when it did. */
static bool reopen_immutable(hx_store *s, int rc) {
    int base = rc & 0xff;
    if (base != SQLITE_READONLY && base != SQLITE_CANTOPEN) return false;
    char wal[PATH_MAX];
    struct stat sb;
    if (snprintf(wal, sizeof wal, "%s-wal", s->path) >= (int)sizeof wal) return false;
    if (stat(wal, &sb) == 0 && sb.st_size > 0) return false;  /* commits only the WAL holds: not safe */
    char *uri = immutable_uri(s->path);
    if (!uri) return false;
    sqlite3_close(s->db);
    s->db = NULL;
    rc = sqlite3_open_v2(uri, &s->db, SQLITE_OPEN_READONLY | SQLITE_OPEN_URI, NULL);
    free(uri);
    if (rc != SQLITE_OK) return false;
    sqlite3_extended_result_codes(s->db, 1);
    return true;
}

static int open_common(const char *path, bool readonly, hx_store **out, char *err,
                       size_t errlen) {
    ENG_ASSERT(path != NULL && out != NULL);
    *out = NULL;
    int status = ENG_OK, rc;
    hx_store *s = calloc(1, sizeof *s);
    if (!s || !(s->path = strdup(path))) {
        free(s);
        eng_errf(err, errlen, "%s: out of memory", path);
        return ENG_ERR_NOMEM;
    }
    s->readonly = readonly;
    s->lockfd = -1;
    s->insert_sql[0] = make_insert("runs", runs_columns, N_OF(runs_columns));
    s->insert_sql[1] = make_insert("requests", requests_columns, N_OF(requests_columns));
    s->insert_sql[2] = make_insert("steps", steps_columns, N_OF(steps_columns));
    if (!s->insert_sql[0] || !s->insert_sql[1] || !s->insert_sql[2]) {
        eng_errf(err, errlen, "%s: out of memory", path);
        status = ENG_ERR_NOMEM;
        goto out;
    }

    /* A path that cannot be a database is the caller's input to fix (exit 2):
     * a directory, a file it may not open; sqlite would only say "unable to
     * open database file". */
    struct stat sb;
    bool exists = stat(path, &sb) == 0, memory = !strcmp(path, ":memory:") || !path[0];
    if (readonly && !exists) {
        eng_errf(err, errlen, "%s: cannot open results database: %s", path, strerror(errno));
        status = ENG_ERR_IO;
        goto out;
    }
    if (exists && !memory && !S_ISREG(sb.st_mode)) {
        eng_errf(err, errlen, "%s: not a regular file", path);
        status = ENG_ERR_FORMAT;
        goto out;
    }
    if (exists && !memory && access(path, readonly ? R_OK : R_OK | W_OK) != 0) {
        eng_errf(err, errlen, "%s: cannot open results database%s: %s", path, readonly ? "" : " for writing",
                 strerror(errno));
        status = ENG_ERR_ARG;
        goto out;
    }
    int flags = readonly ? SQLITE_OPEN_READONLY : SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE;
    rc = sqlite3_open_v2(path, &s->db, flags, NULL);
    if (rc != SQLITE_OK) {
        status = fail_sql(s, rc, err, errlen, "cannot open results database");
        if ((rc & 0xff) == SQLITE_CANTOPEN || (rc & 0xff) == SQLITE_PERM) status = ENG_ERR_ARG;  /* e.g. no such directory */
        goto out;
    }
    sqlite3_extended_result_codes(s->db, 1);
    sqlite3_busy_timeout(s->db, 10000);

    /* The first read tells a non-database file apart (SQLITE_NOTADB). */
    int64_t v = 0;
    status = pragma_int(s, "PRAGMA user_version", &v, err, errlen);
    if (status != ENG_OK && readonly && reopen_immutable(s, sqlite3_extended_errcode(s->db)))
        status = pragma_int(s, "PRAGMA user_version", &v, err, errlen);
    if (status != ENG_OK) goto out;
    if ((status = check_version(s, v, err, errlen)) != ENG_OK) goto out;

    if (readonly) {
        if (v == 0) {
            eng_errf(err, errlen, "%s: user_version 0: not a kvreplay results database", path);
            status = ENG_ERR_FORMAT;
            goto out;
        }
        /* A read-only store cannot migrate: an older file is shown in the
         * current schema through temp views (temp names shadow main's). */
        if (v < HX_STORE_SCHEMA_VERSION && sqlite3_exec(s->db, compat_views[v], NULL, NULL, NULL) != SQLITE_OK) {
            status = fail_sql(s, sqlite3_errcode(s->db), err, errlen, "schema compatibility views");
            goto out;
        }
        int n_holes = 0;
        if ((status = fill_holes(s, v, false, &n_holes, err, errlen)) != ENG_OK) goto out;
        if (n_holes > 0 && (status = hole_views(s, err, errlen)) != ENG_OK) goto out;
        sqlite3_exec(s->db, "PRAGMA query_only = 1", NULL, NULL, NULL);
        goto out;
    }

    /* WAL survives in the file; synchronous and foreign_keys are per connection. */
    sqlite3_stmt *st = NULL;
    rc = sqlite3_prepare_v2(s->db, "PRAGMA journal_mode = WAL", -1, &st, NULL);
    if (rc == SQLITE_OK && (rc = sqlite3_step(st)) == SQLITE_ROW) {
        const char *mode = (const char *)sqlite3_column_text(st, 0);
        bool in_memory = !strcmp(path, ":memory:") || path[0] == '\0';
        if (!mode || (strcmp(mode, "wal") != 0 && !in_memory)) {
            eng_errf(err, errlen, "%s: cannot switch to WAL journal mode (got '%s')", path,
                     mode ? mode : "?");
            status = ENG_ERR_IO;
        }
        rc = SQLITE_OK;
    }
    if (rc != SQLITE_OK) status = fail_sql(s, rc, err, errlen, "PRAGMA journal_mode = WAL");
    sqlite3_finalize(st);
    if (status != ENG_OK) goto out;
    rc = sqlite3_exec(s->db, "PRAGMA synchronous = NORMAL; PRAGMA foreign_keys = ON", NULL, NULL,
                      NULL);
    if (rc != SQLITE_OK) {
        status = fail_sql(s, rc, err, errlen, "setting pragmas");
        goto out;
    }
    int n_holes = 0;
    status = fill_holes(s, v, false, &n_holes, err, errlen);
    if (status == ENG_OK && (v < HX_STORE_SCHEMA_VERSION || n_holes > 0)) status = migrate(s, err, errlen);

out:
    if (status != ENG_OK) {
        hx_store_close(s);
        return status;
    }
    *out = s;
    return ENG_OK;
}

int hx_store_open(const char *path, hx_store **out, char *err, size_t errlen) {
    return open_common(path, false, out, err, errlen);
}

int hx_store_open_readonly(const char *path, hx_store **out, char *err, size_t errlen) {
    return open_common(path, true, out, err, errlen);
}

void hx_store_close(hx_store *s) {
    if (!s) return;
    for (int i = 0; i < ST_COUNT; i++) sqlite3_finalize(s->st[i]);
    if (s->db) sqlite3_close(s->db);
    if (s->lockfd >= 0) close(s->lockfd);  /* releases the runs this store claimed */
    for (int i = 0; i < 3; i++) free(s->insert_sql[i]);
    free(s->path);
    free(s);
}

// ----------------------------------------------------------------------------
// Time

void hx_store_utc_now(char *buf, size_t cap) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    struct tm tm;
    gmtime_r(&ts.tv_sec, &tm);
    snprintf(buf, cap, "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", tm.tm_year + 1900, tm.tm_mon + 1,
             tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, (int)(ts.tv_nsec / 1000000));
}

// ----------------------------------------------------------------------------
// Runs

const char *hx_run_status_str(hx_run_status st) {
    switch (st) {
    case HX_RUN_RUNNING: return "running";
    case HX_RUN_DONE:    return "done";
    case HX_RUN_FAILED:  return "failed";
    }
    return "failed";
}

void hx_run_meta_init(hx_run_meta *m) {
    ENG_ASSERT(m != NULL);
    memset(m, 0, sizeof *m);  /* every string NULL */
    m->sweep_value = NAN;
    m->threshold = NAN;
    m->n_requests = m->n_params = -1;
    m->n_slots = m->ctx_checkpoints = m->checkpoint_every = m->waypoint_every = -1;
    m->cache_ram = m->cache_budget = m->block_size = -1;
    m->chunk = m->ubatch = m->threads = m->decode_n = m->cap_prompt = m->n_ctx = m->seed = -1;
    m->n_cpus = -1;
    m->n_repeat = -1;
    m->calib_gflops = m->calib_restore_gbs = m->price_gflops = m->price_restore_gbs = NAN;
    m->unit = m->n_units = m->shard = m->n_shards = -1;
}

/* m with the defaults of hx_store_begin_run applied; strings may point into si. */
static hx_run_meta resolve(const hx_run_meta *m, hx_sysinfo *si) {
    hx_run_meta r = *m;
    hx_sysinfo_get(si);
    if (!r.version) r.version = KVR_VERSION;
    if (!r.git_rev) r.git_rev = hx_git_rev();
    if (!r.argv) r.argv = hx_argv_joined();
    if (!r.quirks) r.quirks = "";
    if (!r.normalize) r.normalize = "";
    if (!r.blas) r.blas = si->blas;
    if (!r.cpu) r.cpu = si->cpu;
    if (r.n_cpus <= 0) r.n_cpus = si->n_cpus;
    if (!r.hostname) r.hostname = si->hostname;
    if (!r.os_release) r.os_release = si->os_release;
    return r;
}

static int jset(json_t *o, const char *k, json_t *v) { return v ? json_object_set_new(o, k, v) : -1; }
static json_t *jstr(const char *s) { return s ? json_string(s) : json_null(); }
static json_t *jint(int64_t v) { return v >= 0 ? json_integer(v) : json_null(); }
static json_t *jreal(double v) { return isfinite(v) ? json_real(v) : json_null(); }

char *hx_run_meta_config_key(const hx_run_meta *m) {
    ENG_ASSERT(m != NULL);
    hx_sysinfo si;
    hx_run_meta r = resolve(m, &si);
    json_t *o = json_object();
    if (!o) return NULL;
    int bad = 0;
    bad |= jset(o, "version", jstr(r.version));
    bad |= jset(o, "git_rev", jstr(r.git_rev));
    bad |= jset(o, "experiment", jstr(r.experiment));
    bad |= jset(o, "variant", jstr(r.variant));
    bad |= jset(o, "sweep_name", jstr(r.sweep_name));
    bad |= jset(o, "sweep_value", jreal(r.sweep_value));
    bad |= jset(o, "model", jstr(r.model_sha256 ? r.model_sha256 : r.model_path));
    /* a probe run's server (only when set, so the keys of every other run stay as they were) */
    if (r.server_url) bad |= jset(o, "server_url", jstr(r.server_url));
    if (r.server_api) bad |= jset(o, "server_api", jstr(r.server_api));
    if (r.probe_opts) bad |= jset(o, "probe_opts", jstr(r.probe_opts));
    bad |= jset(o, "transcript", jstr(r.transcript_sha256 ? r.transcript_sha256 : r.transcript));
    bad |= jset(o, "template", jstr(r.template_name));
    bad |= jset(o, "policy", jstr(r.policy));
    bad |= jset(o, "quirks", jstr(r.quirks));
    bad |= jset(o, "normalize", jstr(r.normalize));
    bad |= jset(o, "threshold", jreal(r.threshold));
    bad |= jset(o, "n_slots", jint(r.n_slots));
    bad |= jset(o, "ctx_checkpoints", jint(r.ctx_checkpoints));
    bad |= jset(o, "checkpoint_every", jint(r.checkpoint_every));
    bad |= jset(o, "waypoint_every", jint(r.waypoint_every));
    bad |= jset(o, "anchor", jstr(r.anchor));
    bad |= jset(o, "cache_dir", jstr(r.cache_dir));
    bad |= jset(o, "cache_ram", jint(r.cache_ram));
    bad |= jset(o, "cache_budget", jint(r.cache_budget));
    bad |= jset(o, "align", jstr(r.align));
    bad |= jset(o, "chunk", jint(r.chunk));
    bad |= jset(o, "ubatch", jint(r.ubatch));
    bad |= jset(o, "kernel", jstr(r.kernel));
    bad |= jset(o, "precision", jstr(r.precision));
    bad |= jset(o, "threads", jint(r.threads));
    bad |= jset(o, "decode_n", jint(r.decode_n));
    bad |= jset(o, "cap_prompt", jint(r.cap_prompt));
    bad |= jset(o, "n_ctx", jint(r.n_ctx));
    bad |= jset(o, "seed", jint(r.seed));
    bad |= jset(o, "cpu", jstr(r.cpu));
    bad |= jset(o, "extra", jstr(r.extra));
    bad |= jset(o, "policy_opts", jstr(r.policy_opts));
    bad |= jset(o, "block_size", jint(r.block_size));
    if (r.n_repeat > 1) bad |= jset(o, "n_repeat", jint(r.n_repeat));  /* absent at 1: keys of older runs still match */
    char *key = bad ? NULL : json_dumps(o, JSON_COMPACT | JSON_SORT_KEYS | JSON_ENSURE_ASCII);
    json_decref(o);
    if (!key) return NULL;
    /* json_dumps allocates with jansson's allocator (malloc by default);
     * copy so the caller's free() is always the right one. */
    char *copy = strdup(key);
    free(key);
    return copy;
}

static int require(const char *path, const char *field, bool ok, char *err, size_t errlen) {
    if (ok) return ENG_OK;
    eng_errf(err, errlen, "%s: runs: %s: required field is missing", path, field);
    return ENG_ERR_ARG;
}

// ----------------------------------------------------------------------------
// Claiming a run: one writer per run at a time. An OFD lock (F_OFD_SETLK) on
// byte run_id of PATH.lock, held by the store that began or resumed the run
// until it is closed; the kernel drops it when the process dies, so a killed
// run can be resumed at once. A separate file, not the database itself:
// closing another descriptor of the database would drop SQLite's own POSIX
// locks.

static int claim_run(hx_store *s, int64_t run_id, char *err, size_t errlen) {
    if (!strcmp(s->path, ":memory:") || !s->path[0]) return ENG_OK;  /* private to this connection */
    if (s->lockfd < 0) {
        char lp[PATH_MAX];
        if (snprintf(lp, sizeof lp, "%s.lock", s->path) >= (int)sizeof lp ||
            (s->lockfd = open(lp, O_RDWR | O_CREAT | O_CLOEXEC, 0644)) < 0) {
            eng_errf(err, errlen, "%s.lock: cannot open the run lock file: %s", s->path, strerror(errno));
            return ENG_ERR_IO;
        }
    }
    struct flock fl = {.l_type = F_WRLCK, .l_whence = SEEK_SET, .l_start = (off_t)run_id, .l_len = 1};
    if (fcntl(s->lockfd, F_OFD_SETLK, &fl) == 0) return ENG_OK;
    if (errno == EAGAIN || errno == EACCES) {
        eng_errf(err, errlen, "%s: run %lld is being written by another kvreplay process right now (a second "
                 "--resume of the same run?): wait for it to finish, or use another --db", s->path,
                 (long long)run_id);
        return ENG_ERR_UNSUPPORTED;
    }
    eng_errf(err, errlen, "%s.lock: cannot lock run %lld: %s", s->path, (long long)run_id, strerror(errno));
    return ENG_ERR_IO;
}

int hx_store_begin_run(hx_store *s, const hx_run_meta *m, int64_t *run_id, char *err,
                       size_t errlen) {
    ENG_ASSERT(s != NULL && m != NULL && run_id != NULL);
    *run_id = -1;
    hx_sysinfo si;
    hx_run_meta r = resolve(m, &si);
    char now[40];
    char *key = NULL;
    int status = ENG_OK;
    if (!r.started_at) {
        hx_store_utc_now(now, sizeof now);
        r.started_at = now;
    }
    if (!r.config_key) {
        if (!(key = hx_run_meta_config_key(m))) {
            eng_errf(err, errlen, "%s: runs: config_key: out of memory", s->path);
            return ENG_ERR_NOMEM;
        }
        r.config_key = key;
    }
    const char *p = s->path;
    if ((status = require(p, "model_path", r.model_path, err, errlen)) ||
        (status = require(p, "policy", r.policy, err, errlen)) ||
        (status = require(p, "align", r.align, err, errlen)) ||
        (status = require(p, "chunk", r.chunk > 0, err, errlen)) ||
        (status = require(p, "kernel", r.kernel, err, errlen)) ||
        (status = require(p, "precision", r.precision, err, errlen)) ||
        (status = require(p, "threads", r.threads > 0, err, errlen)))
        goto out;

    sqlite3_stmt *st = stmt(s, ST_INSERT_RUN, &status, err, errlen);
    if (!st) goto out;
    /* insert and claim in one transaction: no resumer can see the run unclaimed */
    int brc = sqlite3_exec(s->db, "BEGIN IMMEDIATE", NULL, NULL, NULL);
    if (brc != SQLITE_OK) {
        status = fail_sql(s, brc, err, errlen, "runs: inserting a run: BEGIN IMMEDIATE");
        goto out;
    }
    bind_text(st, "started_at", r.started_at);
    bind_text(st, "version", r.version);
    bind_text(st, "git_rev", r.git_rev);
    bind_text(st, "argv", r.argv);
    bind_text(st, "experiment", r.experiment);
    bind_text(st, "variant", r.variant);
    bind_text(st, "sweep_name", r.sweep_name);
    bind_real(st, "sweep_value", r.sweep_value);
    bind_int_opt(st, "n_requests", r.n_requests);
    bind_text(st, "model_path", r.model_path);
    bind_text(st, "model_sha256", r.model_sha256);
    bind_text(st, "model_name", r.model_name);
    bind_int_opt(st, "n_params", r.n_params);
    bind_text(st, "transcript", r.transcript);
    bind_text(st, "transcript_sha256", r.transcript_sha256);
    bind_text(st, "template", r.template_name);
    bind_text(st, "policy", r.policy);
    bind_text(st, "quirks", r.quirks);
    bind_text(st, "normalize", r.normalize);
    bind_real(st, "threshold", r.threshold);
    bind_int_opt(st, "n_slots", r.n_slots);
    bind_int_opt(st, "ctx_checkpoints", r.ctx_checkpoints);
    bind_int_opt(st, "checkpoint_every", r.checkpoint_every);
    bind_int_opt(st, "waypoint_every", r.waypoint_every);
    bind_text(st, "anchor", r.anchor);
    bind_text(st, "cache_dir", r.cache_dir);
    bind_int_opt(st, "cache_ram", r.cache_ram);
    bind_int_opt(st, "cache_budget", r.cache_budget);
    bind_text(st, "align", r.align);
    bind_int(st, "chunk", r.chunk);
    bind_int_opt(st, "ubatch", r.ubatch);
    bind_text(st, "kernel", r.kernel);
    bind_text(st, "precision", r.precision);
    bind_int(st, "threads", r.threads);
    bind_int_opt(st, "decode_n", r.decode_n);
    bind_int_opt(st, "cap_prompt", r.cap_prompt);
    bind_int_opt(st, "n_ctx", r.n_ctx);
    bind_int_opt(st, "seed", r.seed);
    bind_text(st, "blas", r.blas);
    bind_text(st, "cpu", r.cpu);
    bind_int_opt(st, "n_cpus", r.n_cpus > 0 ? r.n_cpus : -1);
    bind_text(st, "hostname", r.hostname);
    bind_text(st, "os_release", r.os_release);
    bind_text(st, "config_key", r.config_key);
    bind_text(st, "extra", r.extra);
    bind_text(st, "policy_opts", r.policy_opts);
    bind_int_opt(st, "block_size", r.block_size);
    bind_int_opt(st, "n_repeat", r.n_repeat);
    bind_real(st, "calib_gflops", r.calib_gflops);
    bind_real(st, "calib_restore_gbs", r.calib_restore_gbs);
    bind_real(st, "price_gflops", r.price_gflops);
    bind_real(st, "price_restore_gbs", r.price_restore_gbs);
    bind_text(st, "price_source", r.price_source);
    bind_text(st, "spec_sha256", r.spec_sha256);
    bind_text(st, "scale", r.scale);
    bind_int_opt(st, "unit", r.unit);
    bind_int_opt(st, "n_units", r.n_units);
    bind_int_opt(st, "shard", r.shard);
    bind_int_opt(st, "n_shards", r.n_shards);
    bind_text(st, "plan_sha256", r.plan_sha256);
    bind_text(st, "server_url", r.server_url);
    bind_text(st, "server_api", r.server_api);
    bind_text(st, "server_engine", r.server_engine);
    bind_text(st, "server_info", r.server_info);
    bind_text(st, "probe_opts", r.probe_opts);
    int rc = step_done(st);
    if (rc != SQLITE_OK) status = fail_sql(s, rc, err, errlen, "runs: inserting a run");
    int64_t id = sqlite3_last_insert_rowid(s->db);
    sqlite3_reset(st);
    sqlite3_clear_bindings(st);
    if (status == ENG_OK) status = claim_run(s, id, err, errlen);
    if (status == ENG_OK && (rc = sqlite3_exec(s->db, "COMMIT", NULL, NULL, NULL)) != SQLITE_OK)
        status = fail_sql(s, rc, err, errlen, "runs: inserting a run: COMMIT");
    if (status == ENG_OK) *run_id = id;
    else if (!sqlite3_get_autocommit(s->db)) sqlite3_exec(s->db, "ROLLBACK", NULL, NULL, NULL);
out:
    free(key);
    return status;
}

int hx_store_run_price(hx_store *s, int64_t run_id, double *gflops, double *restore_gbs, char *err,
                       size_t errlen) {
    ENG_ASSERT(s != NULL && gflops != NULL && restore_gbs != NULL);
    *gflops = *restore_gbs = NAN;
    sqlite3_stmt *st = NULL;
    int rc = sqlite3_prepare_v2(s->db, "SELECT price_gflops, price_restore_gbs FROM runs WHERE run_id = ?1", -1, &st,
                                NULL);
    if (rc != SQLITE_OK) return fail_sql(s, rc, err, errlen, "runs: reading a run's price");
    sqlite3_bind_int64(st, 1, run_id);
    int status = ENG_OK;
    rc = sqlite3_step(st);
    if (rc == SQLITE_ROW) {
        if (sqlite3_column_type(st, 0) != SQLITE_NULL) *gflops = sqlite3_column_double(st, 0);
        if (sqlite3_column_type(st, 1) != SQLITE_NULL) *restore_gbs = sqlite3_column_double(st, 1);
    } else if (rc == SQLITE_DONE) {
        eng_errf(err, errlen, "%s: runs: no run %lld", s->path, (long long)run_id);
        status = ENG_ERR_NOT_FOUND;
    } else {
        status = fail_sql(s, rc, err, errlen, "runs: reading a run's price");
    }
    sqlite3_finalize(st);
    return status;
}

/* Runs a one-row, one-integer query; *found tells whether a non-NULL row came back. */
static int query_int(hx_store *s, enum stmt_id id, int64_t a1, const char *a2, int64_t a3,
                     int64_t *out, bool *found, const char *what, char *err, size_t errlen) {
    int status = ENG_OK;
    sqlite3_stmt *st = stmt(s, id, &status, err, errlen);
    if (!st) return status;
    int np = sqlite3_bind_parameter_count(st);
    if (np >= 1) sqlite3_bind_int64(st, 1, a1);
    if (np >= 2) sqlite3_bind_text(st, 2, a2, -1, SQLITE_TRANSIENT);
    if (np >= 3) sqlite3_bind_int64(st, 3, a3);
    *found = false;
    int rc = sqlite3_step(st);
    if (rc == SQLITE_ROW) {
        if (sqlite3_column_type(st, 0) != SQLITE_NULL) {
            *out = sqlite3_column_int64(st, 0);
            *found = true;
        }
        rc = SQLITE_DONE;
    }
    if (rc != SQLITE_DONE) status = fail_sql(s, rc, err, errlen, "%s", what);
    sqlite3_reset(st);
    sqlite3_clear_bindings(st);
    return status;
}

int hx_store_find_resumable(hx_store *s, const char *config_key, int64_t *run_id, char *err,
                            size_t errlen) {
    ENG_ASSERT(s != NULL && config_key != NULL && run_id != NULL);
    *run_id = -1;
    int status = ENG_OK;
    sqlite3_stmt *st = stmt(s, ST_FIND_RESUMABLE, &status, err, errlen);
    if (!st) return status;
    sqlite3_bind_text(st, 1, config_key, -1, SQLITE_TRANSIENT);
    int rc = sqlite3_step(st);
    if (rc == SQLITE_ROW) {
        *run_id = sqlite3_column_int64(st, 0);
        rc = SQLITE_DONE;
    } else if (rc == SQLITE_DONE) {
        status = ENG_ERR_NOT_FOUND;
    }
    if (rc != SQLITE_DONE) status = fail_sql(s, rc, err, errlen, "runs: looking up a resumable run");
    sqlite3_reset(st);
    sqlite3_clear_bindings(st);
    return status;
}

int hx_store_find_done(hx_store *s, const char *config_key, int64_t *run_id, char *err, size_t errlen) {
    ENG_ASSERT(s != NULL && config_key != NULL && run_id != NULL);
    bool found = false;
    *run_id = -1;
    int status = ENG_OK;
    sqlite3_stmt *st = stmt(s, ST_FIND_DONE, &status, err, errlen);
    if (!st) return status;
    sqlite3_bind_text(st, 1, config_key, -1, SQLITE_TRANSIENT);
    int rc = sqlite3_step(st);
    if (rc == SQLITE_ROW) {
        *run_id = sqlite3_column_int64(st, 0);
        found = true;
        rc = SQLITE_DONE;
    }
    if (rc != SQLITE_DONE) status = fail_sql(s, rc, err, errlen, "runs: looking up a finished run");
    sqlite3_reset(st);
    sqlite3_clear_bindings(st);
    return status != ENG_OK ? status : found ? ENG_OK : ENG_ERR_NOT_FOUND;
}

/* Runs an UPDATE of one run; ENG_ERR_NOT_FOUND when no row changed. */
static int update_run(hx_store *s, sqlite3_stmt *st, int64_t run_id, const char *what, char *err,
                      size_t errlen) {
    int status = ENG_OK;
    int rc = step_done(st);
    if (rc != SQLITE_OK) {
        status = fail_sql(s, rc, err, errlen, "runs: %s run %lld", what, (long long)run_id);
    } else if (sqlite3_changes(s->db) == 0) {
        eng_errf(err, errlen, "%s: runs: %s: no run with run_id %lld", s->path, what,
                 (long long)run_id);
        status = ENG_ERR_NOT_FOUND;
    }
    sqlite3_reset(st);
    sqlite3_clear_bindings(st);
    return status;
}

int hx_store_note_resume(hx_store *s, int64_t run_id, char *err, size_t errlen) {
    ENG_ASSERT(s != NULL);
    int status = ENG_OK;
    sqlite3_stmt *st = stmt(s, ST_NOTE_RESUME, &status, err, errlen);
    if (!st) return status;
    char now[40];
    hx_store_utc_now(now, sizeof now);
    sqlite3_bind_int64(st, 1, run_id);
    sqlite3_bind_text(st, 2, now, -1, SQLITE_TRANSIENT);
    return update_run(s, st, run_id, "resuming", err, errlen);
}

int hx_store_finish_run(hx_store *s, int64_t run_id, hx_run_status to, char *err,
                        size_t errlen) {
    ENG_ASSERT(s != NULL);
    int status = ENG_OK;
    sqlite3_stmt *st = stmt(s, ST_FINISH_RUN, &status, err, errlen);
    if (!st) return status;
    char now[40];
    hx_store_utc_now(now, sizeof now);
    sqlite3_bind_int64(st, 1, run_id);
    sqlite3_bind_text(st, 2, hx_run_status_str(to), -1, SQLITE_STATIC);
    if (to == HX_RUN_RUNNING) sqlite3_bind_null(st, 3);
    else sqlite3_bind_text(st, 3, now, -1, SQLITE_TRANSIENT);
    return update_run(s, st, run_id, "finishing", err, errlen);
}

int hx_store_last_run(hx_store *s, int64_t *run_id, char *err, size_t errlen) {
    ENG_ASSERT(s != NULL && run_id != NULL);
    bool found = false;
    *run_id = -1;
    int status = query_int(s, ST_LAST_RUN, 0, NULL, 0, run_id, &found, "runs: latest run", err,
                           errlen);
    if (status == ENG_OK && !found) {
        eng_errf(err, errlen, "%s: runs: the database has no runs", s->path);
        status = ENG_ERR_NOT_FOUND;
    }
    return status;
}

int hx_store_count_requests(hx_store *s, int64_t run_id, int64_t *n, char *err, size_t errlen) {
    ENG_ASSERT(s != NULL && n != NULL);
    bool found = false;
    *n = 0;
    return query_int(s, ST_COUNT_REQUESTS, run_id, NULL, 0, n, &found, "requests: counting",
                     err, errlen);
}

// ----------------------------------------------------------------------------
// The done set: sorted (session, turn) pairs, searched by bisection

typedef struct done_pair {
    char   *session;
    int32_t turn;
} done_pair;

struct hx_done_set {
    done_pair *pairs;
    int64_t    n;
};

static int pair_cmp(const void *a, const void *b) {
    const done_pair *x = a, *y = b;
    int c = strcmp(x->session, y->session);
    if (c) return c;
    return (x->turn > y->turn) - (x->turn < y->turn);
}

void hx_done_set_free(hx_done_set *d) {
    if (!d) return;
    for (int64_t i = 0; i < d->n; i++) free(d->pairs[i].session);
    free(d->pairs);
    free(d);
}

int64_t hx_done_set_count(const hx_done_set *d) { return d ? d->n : 0; }

bool hx_done_set_has(const hx_done_set *d, const char *session, int32_t turn) {
    if (!d || !session || d->n == 0) return false;
    done_pair key = {(char *)session, turn};
    return bsearch(&key, d->pairs, (size_t)d->n, sizeof key, pair_cmp) != NULL;
}

int hx_store_load_done(hx_store *s, int64_t run_id, hx_done_set **out, char *err, size_t errlen) {
    ENG_ASSERT(s != NULL && out != NULL);
    *out = NULL;
    int status = ENG_OK;
    hx_done_set *d = calloc(1, sizeof *d);
    if (!d) goto nomem;
    sqlite3_stmt *st = stmt(s, ST_LOAD_DONE, &status, err, errlen);
    if (!st) goto out;
    sqlite3_bind_int64(st, 1, run_id);
    int64_t cap = 0;
    int rc;
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        if (d->n == cap) {
            int64_t nc = cap ? cap * 2 : 64;
            done_pair *np = realloc(d->pairs, (size_t)nc * sizeof *np);
            if (!np) { sqlite3_reset(st); goto nomem; }
            d->pairs = np;
            cap = nc;
        }
        const char *sess = (const char *)sqlite3_column_text(st, 0);
        char *copy = strdup(sess ? sess : "");
        if (!copy) { sqlite3_reset(st); goto nomem; }
        d->pairs[d->n].session = copy;
        d->pairs[d->n].turn = (int32_t)sqlite3_column_int64(st, 1);
        d->n++;
    }
    if (rc != SQLITE_DONE) status = fail_sql(s, rc, err, errlen, "requests: loading done requests");
    sqlite3_reset(st);
    sqlite3_clear_bindings(st);
    if (d->n > 1) qsort(d->pairs, (size_t)d->n, sizeof *d->pairs, pair_cmp);
    goto out;
nomem:
    eng_errf(err, errlen, "%s: requests: loading done requests: out of memory", s->path);
    status = ENG_ERR_NOMEM;
out:
    if (status != ENG_OK) {
        hx_done_set_free(d);
        return status;
    }
    *out = d;
    return ENG_OK;
}

int hx_store_request_done(hx_store *s, int64_t run_id, const char *session, int32_t turn,
                          char *err, size_t errlen) {
    ENG_ASSERT(s != NULL && session != NULL);
    bool found = false;
    int64_t one = 0;
    int status = query_int(s, ST_REQUEST_DONE, run_id, session, turn, &one, &found,
                           "requests: looking up a request", err, errlen);
    return status != ENG_OK ? status : found ? 1 : 0;
}

int hx_store_begin_or_resume(hx_store *s, const hx_run_meta *m, bool resume, int64_t *run_id,
                             hx_done_set **done, bool *resumed, char *err, size_t errlen) {
    ENG_ASSERT(s != NULL && m != NULL && run_id != NULL && done != NULL);
    *done = NULL;
    *run_id = -1;
    if (resumed) *resumed = false;
    char *key = m->config_key ? strdup(m->config_key) : hx_run_meta_config_key(m);
    if (!key) {
        eng_errf(err, errlen, "%s: runs: config_key: out of memory", s->path);
        return ENG_ERR_NOMEM;
    }
    int status = ENG_ERR_NOT_FOUND;
    int64_t id = -1;
    if (resume) status = hx_store_find_resumable(s, key, &id, err, errlen);
    if (status == ENG_OK) {
        status = claim_run(s, id, err, errlen);
        if (status == ENG_OK) status = hx_store_note_resume(s, id, err, errlen);
        if (status == ENG_OK) status = hx_store_load_done(s, id, done, err, errlen);
        if (status == ENG_OK && resumed) *resumed = true;
    } else if (status == ENG_ERR_NOT_FOUND) {
        hx_run_meta copy = *m;
        copy.config_key = key;
        status = hx_store_begin_run(s, &copy, &id, err, errlen);
        if (status == ENG_OK) status = hx_store_load_done(s, id, done, err, errlen);
    }
    free(key);
    if (status == ENG_OK) *run_id = id;
    return status;
}

// ----------------------------------------------------------------------------
// Requests and steps, one transaction each

int hx_store_put_shard(hx_store *s, const hx_shard_meta *m, char *err, size_t errlen) {
    ENG_ASSERT(s != NULL && m != NULL);
    hx_sysinfo si;
    hx_sysinfo_get(&si);
    char now[40];
    hx_store_utc_now(now, sizeof now);
    sqlite3_stmt *st = NULL;
    int rc = sqlite3_prepare_v2(s->db,
                                "INSERT OR IGNORE INTO shards(plan_sha256, shard, n_shards, experiment, spec_sha256, scale,"
                                " n_units, plan, git_rev, version, blas, started_at, argv, hostname)"
                                " VALUES(:plan_sha256, :shard, :n_shards, :experiment, :spec_sha256, :scale, :n_units,"
                                " :plan, :git_rev, :version, :blas, :started_at, :argv, :hostname)",
                                -1, &st, NULL);
    if (rc != SQLITE_OK) return fail_sql(s, rc, err, errlen, "shards: preparing the insert");
    bind_text(st, "plan_sha256", m->plan_sha256);
    bind_int(st, "shard", m->shard);
    bind_int(st, "n_shards", m->n_shards);
    bind_text(st, "experiment", m->experiment);
    bind_text(st, "spec_sha256", m->spec_sha256);
    bind_text(st, "scale", m->scale);
    bind_int(st, "n_units", m->n_units);
    bind_text(st, "plan", m->plan);
    bind_text(st, "git_rev", hx_git_rev());
    bind_text(st, "version", KVR_VERSION);
    bind_text(st, "blas", eng_blas_info());  /* as runs.blas: the kernels' fingerprint */
    bind_text(st, "started_at", now);
    bind_text(st, "argv", hx_argv_joined());
    bind_text(st, "hostname", si.hostname);
    rc = step_done(st);
    int status = rc == SQLITE_OK ? ENG_OK : fail_sql(s, rc, err, errlen, "shards: recording shard %lld/%lld",
                                                      (long long)m->shard, (long long)m->n_shards);
    sqlite3_finalize(st);
    return status;
}

void hx_request_row_init(hx_request_row *r) {
    ENG_ASSERT(r != NULL);
    memset(r, 0, sizeof *r);
    r->first_diff_index = -1;
    r->fork_step = -1;
    r->kl = NAN;
    r->ttft_cold_ms = r->ttft_reuse_ms = NAN;
    r->ttft_cold_min_ms = r->ttft_cold_max_ms = r->ttft_reuse_min_ms = r->ttft_reuse_max_ms = NAN;
    r->model_cold_ms = r->model_reuse_ms = NAN;
    r->flops_cold = r->flops_reuse = NAN;
    r->sim = r->f_keep = NAN;
    r->restore_ms = r->store_ms = r->anchor_ms = NAN;
    r->bytes_restored = r->slot = r->lcp = r->miss_pos = r->miss_byte = -1;
    r->n_checkpoints = r->ckpt_bytes = r->n_stored = r->bytes_stored = -1;
    r->stable_end = r->anchor_pos = -1;
    r->state_equal = -1;
    r->cache_bytes = r->cache_entries = -1;
    r->verified = 1;
    r->reuse_expected = r->reuse_reported = r->n_prompt_local = r->json_equal = r->n_probs = r->http_status = -1;
}

void hx_step_row_init(hx_step_row *r) {
    ENG_ASSERT(r != NULL);
    memset(r, 0, sizeof *r);
    r->first_diff_index = -1;
    r->kl = NAN;
}

void hx_request_row_set_cmp(hx_request_row *r, const hx_cmp *c) {
    ENG_ASSERT(r != NULL && c != NULL);
    r->logits_equal = c->equal;
    r->first_diff_index = c->equal ? -1 : c->first_diff;
    r->a_first = c->a_first;
    r->b_first = c->b_first;
    r->ulp_first = c->ulp_first;
    r->max_abs_diff = c->max_abs;
    r->max_ulp = c->max_ulp;
    r->kl = c->kl;
    r->top1_equal = c->top1_equal;
}

void hx_step_row_set_cmp(hx_step_row *r, const hx_cmp *c) {
    ENG_ASSERT(r != NULL && c != NULL);
    r->logits_equal = c->equal;
    r->first_diff_index = c->equal ? -1 : c->first_diff;
    r->a_first = c->a_first;
    r->b_first = c->b_first;
    r->ulp_first = c->ulp_first;
    r->max_abs_diff = c->max_abs;
    r->max_ulp = c->max_ulp;
    r->kl = c->kl;
}

static void bind_request(sqlite3_stmt *st, int64_t run_id, const hx_request_row *r) {
    bool diff = r->first_diff_index >= 0;
    bind_int(st, "run_id", run_id);
    bind_int(st, "req_index", r->req_index);
    bind_text(st, "transcript", r->transcript);
    bind_text(st, "session", r->session);
    bind_int(st, "turn", r->turn);
    bind_int(st, "n_prompt", r->n_prompt);
    bind_int(st, "n_reused", r->n_reused);
    bind_int(st, "n_prefilled", r->n_prefilled);
    bind_real(st, "ttft_cold_ms", r->ttft_cold_ms);
    bind_real(st, "ttft_reuse_ms", r->ttft_reuse_ms);
    bind_real(st, "ttft_cold_min_ms", r->ttft_cold_min_ms);
    bind_real(st, "ttft_cold_max_ms", r->ttft_cold_max_ms);
    bind_real(st, "ttft_reuse_min_ms", r->ttft_reuse_min_ms);
    bind_real(st, "ttft_reuse_max_ms", r->ttft_reuse_max_ms);
    bind_real(st, "model_cold_ms", r->model_cold_ms);
    bind_real(st, "model_reuse_ms", r->model_reuse_ms);
    bind_int(st, "logits_equal", r->logits_equal);
    bind_int_opt(st, "first_diff_index", r->first_diff_index);
    bind_first_diff(st, diff, r->a_first, r->b_first, r->ulp_first);
    bind_real(st, "max_abs_diff", r->max_abs_diff);
    bind_u64(st, "max_ulp", r->max_ulp);
    bind_real(st, "kl", r->kl);
    bind_int(st, "top1_equal", r->top1_equal);
    bind_int_opt(st, "fork_step", r->fork_step);
    bind_int(st, "decode_equal", r->decode_equal);
    bind_int_opt(st, "state_equal", r->state_equal);
    char hc[17], hr[17];
    snprintf(hc, sizeof hc, "%016llx", (unsigned long long)r->state_hash_cold);
    snprintf(hr, sizeof hr, "%016llx", (unsigned long long)r->state_hash_reuse);
    bind_text(st, "state_hash_cold", r->state_equal >= 0 ? hc : NULL);
    bind_text(st, "state_hash_reuse", r->state_equal >= 0 ? hr : NULL);
    bind_int(st, "n_decode", r->n_decode);
    bind_real(st, "flops_cold", r->flops_cold);
    bind_real(st, "flops_reuse", r->flops_reuse);
    bind_int_opt(st, "bytes_restored", r->bytes_restored);
    bind_real(st, "sim", r->sim);
    bind_real(st, "f_keep", r->f_keep);
    bind_int_opt(st, "slot", r->slot);
    bind_int_opt(st, "lcp", r->lcp);
    bind_int_opt(st, "miss_pos", r->miss_pos);
    bind_int_opt(st, "miss_byte", r->miss_byte);
    bind_text(st, "miss_text", r->miss_text);
    bind_text(st, "miss_where", r->miss_where);
    bind_int_opt(st, "n_checkpoints", r->n_checkpoints);
    bind_int_opt(st, "ckpt_bytes", r->ckpt_bytes);
    bind_int_opt(st, "n_stored", r->n_stored);
    bind_int_opt(st, "bytes_stored", r->bytes_stored);
    bind_int_opt(st, "stable_end", r->stable_end);
    bind_int_opt(st, "anchor_pos", r->anchor_pos);
    bind_int(st, "cold_shared", r->cold_shared);
    bind_real(st, "restore_ms", r->restore_ms);
    bind_real(st, "store_ms", r->store_ms);
    bind_real(st, "anchor_ms", r->anchor_ms);
    bind_text(st, "note", r->note);
    bind_text(st, "extra", r->extra);
    bind_int_opt(st, "cache_bytes", r->cache_bytes);
    bind_int_opt(st, "cache_entries", r->cache_entries);
    bind_int(st, "verified", r->verified ? 1 : 0);
    bind_int_opt(st, "reuse_expected", r->reuse_expected);
    bind_int_opt(st, "reuse_reported", r->reuse_reported);
    bind_text(st, "reuse_basis", r->reuse_basis);
    bind_int_opt(st, "n_prompt_local", r->n_prompt_local);
    bind_text(st, "prompt_diff", r->prompt_diff);
    bind_int_opt(st, "json_equal", r->json_equal);
    bind_int_opt(st, "n_probs", r->n_probs);
    bind_text(st, "error", r->error);
    bind_text(st, "error_message", r->error_message);
    bind_int_opt(st, "http_status", r->http_status);
}

static void bind_step(sqlite3_stmt *st, int64_t run_id, const char *session, int32_t turn,
                      const hx_step_row *r) {
    bool diff = r->first_diff_index >= 0;
    bind_int(st, "run_id", run_id);
    bind_text(st, "session", session);
    bind_int(st, "turn", turn);
    bind_int(st, "step", r->step);
    bind_int(st, "token_cold", r->token_cold);
    bind_int(st, "token_reuse", r->token_reuse);
    bind_int(st, "logits_equal", r->logits_equal);
    bind_real(st, "max_abs_diff", r->max_abs_diff);
    bind_u64(st, "max_ulp", r->max_ulp);
    bind_int_opt(st, "first_diff_index", r->first_diff_index);
    bind_first_diff(st, diff, r->a_first, r->b_first, r->ulp_first);
    bind_real(st, "kl", r->kl);
}

static int check_request(const hx_store *s, const hx_request_row *r, const hx_step_row *steps,
                         int32_t n_steps, char *err, size_t errlen) {
    const char *bad = NULL;
    if (!r->session) bad = "session is NULL";
    else if (r->req_index < 0) bad = "req_index is negative";
    else if (r->turn < 0) bad = "turn is negative";
    else if (r->n_prompt < 0 || r->n_reused < 0 || r->n_prefilled < 0) bad = "a token count is negative";
    else if (r->n_decode < 0) bad = "n_decode is negative";
    else if (n_steps < 0 || (n_steps > 0 && !steps)) bad = "steps: bad array";
    if (!bad) return ENG_OK;
    eng_errf(err, errlen, "%s: requests: session %s turn %d: %s", s->path,
             r->session ? r->session : "(null)", (int)r->turn, bad);
    return ENG_ERR_ARG;
}

int hx_store_put_request(hx_store *s, int64_t run_id, const hx_request_row *row,
                         const hx_step_row *steps, int32_t n_steps, char *err, size_t errlen) {
    ENG_ASSERT(s != NULL && row != NULL);
    int status = check_request(s, row, steps, n_steps, err, errlen);
    if (status != ENG_OK) return status;
    sqlite3_stmt *begin = stmt(s, ST_BEGIN, &status, err, errlen);
    sqlite3_stmt *commit = begin ? stmt(s, ST_COMMIT, &status, err, errlen) : NULL;
    sqlite3_stmt *ins_req = commit ? stmt(s, ST_INSERT_REQUEST, &status, err, errlen) : NULL;
    sqlite3_stmt *ins_step = ins_req ? stmt(s, ST_INSERT_STEP, &status, err, errlen) : NULL;
    sqlite3_stmt *rollback = ins_step ? stmt(s, ST_ROLLBACK, &status, err, errlen) : NULL;
    if (!rollback) return status;

    const char *sess = row->session;
    int rc = step_done(begin);
    sqlite3_reset(begin);
    if (rc != SQLITE_OK)
        return fail_sql(s, rc, err, errlen, "requests: session %s turn %d: BEGIN IMMEDIATE", sess,
                        (int)row->turn);

    bind_request(ins_req, run_id, row);
    rc = step_done(ins_req);
    if (rc != SQLITE_OK) {
        status = fail_sql(s, rc, err, errlen, "requests: run %lld session %s turn %d: insert",
                          (long long)run_id, sess, (int)row->turn);
        goto out;
    }
    for (int32_t k = 0; k < n_steps; k++) {
        sqlite3_reset(ins_step);
        bind_step(ins_step, run_id, sess, row->turn, &steps[k]);
        rc = step_done(ins_step);
        if (rc != SQLITE_OK) {
            status = fail_sql(s, rc, err, errlen,
                              "steps: run %lld session %s turn %d: step %d (entry %d): insert",
                              (long long)run_id, sess, (int)row->turn, (int)steps[k].step,
                              (int)k);
            goto out;
        }
    }
    rc = step_done(commit);
    sqlite3_reset(commit);
    if (rc != SQLITE_OK)
        status = fail_sql(s, rc, err, errlen, "requests: session %s turn %d: COMMIT", sess,
                          (int)row->turn);
out:
    sqlite3_reset(ins_req);
    sqlite3_clear_bindings(ins_req);
    sqlite3_reset(ins_step);
    sqlite3_clear_bindings(ins_step);
    if (status != ENG_OK && !sqlite3_get_autocommit(s->db)) {
        step_done(rollback);
        sqlite3_reset(rollback);
    }
    return status;
}
