/*
 * tests/test_store.c: the SQLite results store: schema and versioning,
 * atomic request writes (with planted failures), crash and resume, and the
 * machine description (sysinfo).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <sqlite3.h>

#include "cli.h"
#include "report.h"
#include "status.h"
#include "store.h"
#include "sysinfo.h"
#include "version.h"

// ----------------------------------------------------------------------------
// Fixtures: a fresh temporary directory per test, a filled run meta, rows

typedef struct fixture {
    char dir[64];
    char db[128];
} fixture;

static int setup(void **state) {
    fixture *f = calloc(1, sizeof *f);
    snprintf(f->dir, sizeof f->dir, "/tmp/kvr_store_XXXXXX");
    if (!mkdtemp(f->dir)) return -1;
    snprintf(f->db, sizeof f->db, "%s/out.sqlite", f->dir);
    *state = f;
    return 0;
}

static int teardown(void **state) {
    fixture *f = *state;
    char cmd[160];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", f->dir);
    if (system(cmd) != 0) return -1;
    free(f);
    return 0;
}

static void meta_fill(hx_run_meta *m) {
    hx_run_meta_init(m);
    m->model_path = "models/tiny.gguf";
    m->model_sha256 = "ab12";
    m->model_name = "tiny";
    m->transcript = "t.jsonl";
    m->policy = "slot-lcp";
    m->align = "chunk";
    m->chunk = 64;
    m->kernel = "blas";
    m->precision = "fp32";
    m->threads = 2;
    m->decode_n = 4;
    m->seed = 7;
    m->argv = "kvreplay replay --test";
}

static void row_fill(hx_request_row *r, const char *session, int32_t turn, int64_t index) {
    hx_request_row_init(r);
    r->req_index = index;
    r->transcript = "t.jsonl";
    r->session = session;
    r->turn = turn;
    r->n_prompt = 100;
    r->n_reused = 64;
    r->n_prefilled = 36;
    r->ttft_cold_ms = 10.0;
    r->ttft_reuse_ms = 4.0;
    r->logits_equal = true;
    r->top1_equal = true;
    r->decode_equal = true;
    r->n_decode = 2;
}

static void steps_fill(hx_step_row *s, int n) {
    for (int k = 0; k < n; k++) {
        hx_step_row_init(&s[k]);
        s[k].step = k;
        s[k].token_cold = s[k].token_reuse = 100 + k;
        s[k].logits_equal = true;
    }
}

/* One integer from a query on a raw connection to path (-999 on failure). */
static int64_t query_i64(const char *path, const char *sql) {
    sqlite3 *db = NULL;
    sqlite3_stmt *st = NULL;
    int64_t v = -999;
    if (sqlite3_open_v2(path, &db, SQLITE_OPEN_READONLY, NULL) == SQLITE_OK &&
        sqlite3_prepare_v2(db, sql, -1, &st, NULL) == SQLITE_OK && sqlite3_step(st) == SQLITE_ROW)
        v = sqlite3_column_int64(st, 0);
    sqlite3_finalize(st);
    sqlite3_close(db);
    return v;
}

/* One text value of a query on s's own connection, copied into buf. */
static const char *query_text(hx_store *s, const char *sql, char *buf, size_t cap) {
    sqlite3_stmt *st = NULL;
    buf[0] = '\0';
    const char *ret = NULL;
    if (sqlite3_prepare_v2(hx_store_db(s), sql, -1, &st, NULL) == SQLITE_OK &&
        sqlite3_step(st) == SQLITE_ROW && sqlite3_column_type(st, 0) != SQLITE_NULL) {
        snprintf(buf, cap, "%s", (const char *)sqlite3_column_text(st, 0));
        ret = buf;
    }
    sqlite3_finalize(st);
    return ret;
}

static hx_store *open_ok(const char *path) {
    char err[512] = "";
    hx_store *s = NULL;
    int rc = hx_store_open(path, &s, err, sizeof err);
    if (rc != ENG_OK) fail_msg("open %s: %s", path, err);
    return s;
}

static int64_t begin_ok(hx_store *s, const hx_run_meta *m) {
    char err[512] = "";
    int64_t id = -1;
    int rc = hx_store_begin_run(s, m, &id, err, sizeof err);
    if (rc != ENG_OK) fail_msg("begin_run: %s", err);
    return id;
}

static void put_ok(hx_store *s, int64_t run, const hx_request_row *r, const hx_step_row *st, int n) {
    char err[512] = "";
    int rc = hx_store_put_request(s, run, r, st, n, err, sizeof err);
    if (rc != ENG_OK) fail_msg("put_request: %s", err);
}

// ----------------------------------------------------------------------------
// Schema and versioning

static void opening_a_new_file_creates_the_schema_in_wal_mode(void **state) {
    fixture *f = *state;
    hx_store *s = open_ok(f->db);
    char buf[64];
    assert_string_equal(query_text(s, "PRAGMA journal_mode", buf, sizeof buf), "wal");
    assert_string_equal(query_text(s, "PRAGMA foreign_keys", buf, sizeof buf), "1");
    assert_string_equal(query_text(s, "PRAGMA synchronous", buf, sizeof buf), "1"); /* NORMAL */
    hx_store_close(s);
    assert_int_equal(query_i64(f->db, "PRAGMA user_version"), HX_STORE_SCHEMA_VERSION);
    assert_int_equal(query_i64(f->db, "SELECT count(*) FROM sqlite_master WHERE type = 'table'"
                                      " AND name IN ('runs', 'requests', 'steps')"), 3);
    assert_int_equal(query_i64(f->db, "SELECT count(*) FROM sqlite_master WHERE type = 'view'"
                                      " AND name = 'results'"), 1);
}

static void reopening_an_existing_database_keeps_its_runs(void **state) {
    fixture *f = *state;
    hx_run_meta m;
    meta_fill(&m);
    hx_store *s = open_ok(f->db);
    int64_t id = begin_ok(s, &m);
    hx_store_close(s);
    s = open_ok(f->db);
    int64_t last = -1;
    assert_int_equal(hx_store_last_run(s, &last, NULL, 0), ENG_OK);
    assert_int_equal(last, id);
    assert_int_equal(begin_ok(s, &m), id + 1);
    hx_store_close(s);
    assert_int_equal(query_i64(f->db, "PRAGMA user_version"), HX_STORE_SCHEMA_VERSION);
}

/* What migration 7 -> 8 added (replay --batch-check's verdict). */
#define DROP_V8                                                                                             \
    "ALTER TABLE requests DROP COLUMN batch_k; ALTER TABLE requests DROP COLUMN batch_equal;"              \
    "ALTER TABLE requests DROP COLUMN batch_first_diff; ALTER TABLE requests DROP COLUMN batch_ulp_first;" \
    "ALTER TABLE requests DROP COLUMN batch_max_ulp;"

/* What migration 6 -> 7 added (kvreplay probe's server, reuse reported and expected, errors). */
#define DROP_V7                                                                                             \
    DROP_V8                                                                                                 \
    "ALTER TABLE runs DROP COLUMN server_url; ALTER TABLE runs DROP COLUMN server_api;"                    \
    "ALTER TABLE runs DROP COLUMN server_engine; ALTER TABLE runs DROP COLUMN server_info;"               \
    "ALTER TABLE runs DROP COLUMN probe_opts;"                                                             \
    "ALTER TABLE requests DROP COLUMN reuse_expected; ALTER TABLE requests DROP COLUMN reuse_reported;"    \
    "ALTER TABLE requests DROP COLUMN reuse_basis; ALTER TABLE requests DROP COLUMN n_prompt_local;"      \
    "ALTER TABLE requests DROP COLUMN prompt_diff; ALTER TABLE requests DROP COLUMN json_equal;"          \
    "ALTER TABLE requests DROP COLUMN n_probs; ALTER TABLE requests DROP COLUMN error;"                   \
    "ALTER TABLE requests DROP COLUMN error_message; ALTER TABLE requests DROP COLUMN http_status;"

/* What migration 5 -> 6 added (experiments in shards: runs' spec, unit and shard, the shards table). */
#define DROP_6_ONLY                                                                                         \
    "ALTER TABLE runs DROP COLUMN spec_sha256; ALTER TABLE runs DROP COLUMN scale;"                        \
    "ALTER TABLE runs DROP COLUMN unit; ALTER TABLE runs DROP COLUMN n_units;"                             \
    "ALTER TABLE runs DROP COLUMN shard; ALTER TABLE runs DROP COLUMN n_shards;"                           \
    "ALTER TABLE runs DROP COLUMN plan_sha256; DROP TABLE shards;"
#define DROP_V6 DROP_V7 DROP_6_ONLY

/* What migration 4 -> 5 added (serve's rows not compared with their cold run). */
#define DROP_5_ONLY "ALTER TABLE requests DROP COLUMN verified;"
#define DROP_V5 DROP_V6 DROP_5_ONLY

/* What migration 3 -> 4 added (--repeat's timings, the modeled TTFT and its price). */
#define DROP_V4                                                                                             \
    DROP_V5                                                                                                 \
    "ALTER TABLE runs DROP COLUMN n_repeat; ALTER TABLE runs DROP COLUMN calib_gflops;"                    \
    "ALTER TABLE runs DROP COLUMN calib_restore_gbs; ALTER TABLE runs DROP COLUMN price_gflops;"          \
    "ALTER TABLE runs DROP COLUMN price_restore_gbs; ALTER TABLE runs DROP COLUMN price_source;"          \
    "ALTER TABLE requests DROP COLUMN ttft_cold_min_ms; ALTER TABLE requests DROP COLUMN ttft_cold_max_ms;" \
    "ALTER TABLE requests DROP COLUMN ttft_reuse_min_ms; ALTER TABLE requests DROP COLUMN ttft_reuse_max_ms;" \
    "ALTER TABLE requests DROP COLUMN model_cold_ms; ALTER TABLE requests DROP COLUMN model_reuse_ms;"

/* A schema-3 file (before --repeat and the modeled TTFT) is shown read-only
 * with the new columns as NULL, then migrated on open, keeping its rows. */
/* The SQL that takes a current file back to schema 2 (before runs.policy_opts). */
#define DOWNGRADE_TO_V2                                     \
    DROP_V4                                                 \
    "ALTER TABLE runs DROP COLUMN policy_opts;"             \
    "ALTER TABLE runs DROP COLUMN block_size;"              \
    "ALTER TABLE requests DROP COLUMN cache_bytes;"         \
    "ALTER TABLE requests DROP COLUMN cache_entries;"

/* ... and back to schema 1 (before requests.state_equal). */
#define DOWNGRADE_TO_V1                                     \
    DOWNGRADE_TO_V2                                         \
    "ALTER TABLE requests DROP COLUMN state_equal;"         \
    "ALTER TABLE requests DROP COLUMN state_hash_cold;"     \
    "ALTER TABLE requests DROP COLUMN state_hash_reuse;"

/* Makes f->db an older file holding one run (its id returned): a current
 * file with one run, taken back by downgrade (SQL that ends by setting
 * PRAGMA user_version). Then checks that a read-only open, which does not
 * migrate, shows it with the current columns: sql runs. */
static int64_t older_file(fixture *f, hx_run_meta *m, const char *downgrade, const char *sql) {
    meta_fill(m);
    hx_store *s = open_ok(f->db);
    int64_t id = begin_ok(s, m);
    hx_store_close(s);
    sqlite3 *db = NULL;
    assert_int_equal(sqlite3_open(f->db, &db), SQLITE_OK);
    assert_int_equal(sqlite3_exec(db, downgrade, NULL, NULL, NULL), SQLITE_OK);
    sqlite3_close(db);
    char err[256] = "";
    hx_store *ro = NULL;
    assert_int_equal(hx_store_open_readonly(f->db, &ro, err, sizeof err), ENG_OK);
    sqlite3_stmt *st = NULL;
    assert_int_equal(sqlite3_prepare_v2(hx_store_db(ro), sql, -1, &st, NULL), SQLITE_OK);
    assert_int_equal(sqlite3_step(st), SQLITE_ROW);
    sqlite3_finalize(st);
    hx_store_close(ro);
    return id;
}

/* A schema-3 file (before --repeat and the modeled TTFT) is shown read-only
 * with the new columns as NULL, then migrated on open, keeping its rows. */
static void a_version_3_file_is_migrated_on_open(void **state) {
    fixture *f = *state;
    hx_run_meta m;
    int64_t id = older_file(f, &m, DROP_V4 "PRAGMA user_version = 3",
                            "SELECT count(model_cold_ms) + count(ttft_cold_min_ms)"
                            " FROM requests JOIN runs USING(run_id) WHERE price_source IS NULL");
    assert_int_equal(query_i64(f->db, "PRAGMA user_version"), 3);
    hx_store *s = open_ok(f->db);
    hx_request_row r;
    hx_request_row_init(&r);
    r.session = "s";
    r.transcript = "t";
    r.model_cold_ms = 12.5;
    r.ttft_cold_min_ms = 3;
    put_ok(s, id, &r, NULL, 0);
    hx_store_close(s);
    assert_int_equal(query_i64(f->db, "PRAGMA user_version"), HX_STORE_SCHEMA_VERSION);
    assert_int_equal(query_i64(f->db, "SELECT model_cold_ms * 2 + ttft_cold_min_ms FROM results WHERE session = 's'"),
                     28);
    assert_int_equal(query_i64(f->db, "SELECT count(*) FROM runs WHERE n_repeat IS NULL"), 1);
}

/* A schema-5 file (before experiments in shards) is shown read-only with the
 * new runs columns as NULL, then migrated on open: its runs keep their rows,
 * and the shards table exists. */
static void a_version_5_file_is_migrated_on_open(void **state) {
    fixture *f = *state;
    hx_run_meta m;
    int64_t id = older_file(f, &m, DROP_V6 "PRAGMA user_version = 5",
                            "SELECT count(plan_sha256) + count(unit) FROM runs");
    assert_int_equal(query_i64(f->db, "PRAGMA user_version"), 5);
    hx_store *s = open_ok(f->db);
    m.exp.spec_sha256 = "ab12";
    m.exp.unit = 3;
    m.exp.n_units = 4;
    m.exp.shard = 2;
    m.exp.n_shards = 2;
    m.exp.plan_sha256 = "cd34";
    int64_t id2 = begin_ok(s, &m);
    hx_shard_meta sm = {.experiment = "x", .spec_sha256 = "ab12", .scale = "demo", .shard = 2, .n_shards = 2,
                        .n_units = 4, .plan_sha256 = "cd34", .plan = "[]"};
    char err[256] = "";
    assert_int_equal(hx_store_put_shard(s, &sm, err, sizeof err), ENG_OK);
    assert_int_equal(hx_store_put_shard(s, &sm, err, sizeof err), ENG_OK);  /* a resume keeps the first row */
    hx_store_close(s);
    assert_int_equal(query_i64(f->db, "PRAGMA user_version"), HX_STORE_SCHEMA_VERSION);
    char sql[160];
    snprintf(sql, sizeof sql, "SELECT unit * 10 + shard FROM runs WHERE run_id = %lld", (long long)id2);
    assert_int_equal(query_i64(f->db, sql), 32);
    snprintf(sql, sizeof sql, "SELECT count(*) FROM runs WHERE run_id = %lld AND unit IS NULL", (long long)id);
    assert_int_equal(query_i64(f->db, sql), 1);
    assert_int_equal(query_i64(f->db, "SELECT count(*) FROM shards WHERE shard = 2 AND n_units = 4"), 1);
    /* the shard columns are not part of the configuration: a shard's run of a unit resumes as the unsharded one */
    hx_run_meta m2 = m;
    m2.exp.shard = 1;
    m2.exp.n_shards = 4;
    m2.exp.plan_sha256 = "ef56";
    char *k1 = hx_run_meta_config_key(&m), *k2 = hx_run_meta_config_key(&m2);
    assert_string_equal(k1, k2);
    free(k1);
    free(k2);
}

/* Versions 5 and 6 were made on parallel branches. A schema-7 file without version 6's shard
 * columns and table (kvreplay before experiments in shards), and a version-6 file without
 * version 5's requests.verified (the shards branch), are shown read-only with the missing
 * columns as NULL and repaired on open: the columns and the table added, rows kept. */
static void a_file_with_a_hole_in_its_schema_is_repaired_on_open(void **state) {
    fixture *f = *state;
    static const struct { const char *downgrade; const char *ro_sql; } c[] = {
        {DROP_V8 DROP_6_ONLY "PRAGMA user_version = 7", "SELECT count(spec_sha256) + count(n_shards) FROM runs"},
        {DROP_V7 DROP_5_ONLY "PRAGMA user_version = 6",
         "SELECT count(verified) + count(http_status) FROM requests JOIN runs USING(run_id)"},
    };
    for (size_t i = 0; i < sizeof c / sizeof c[0]; i++) {
        unlink(f->db);
        hx_run_meta m;
        int64_t id = older_file(f, &m, c[i].downgrade, c[i].ro_sql);
        hx_store *s = open_ok(f->db);
        hx_request_row r;
        hx_request_row_init(&r);
        r.session = "s";
        r.transcript = "t";
        r.verified = 1;
        put_ok(s, id, &r, NULL, 0);
        m.exp.shard = 1;
        m.exp.n_shards = 1;
        m.exp.plan_sha256 = "cd34";
        begin_ok(s, &m);
        hx_shard_meta sm = {.experiment = "x", .spec_sha256 = "ab12", .scale = "demo", .shard = 1, .n_shards = 1,
                            .n_units = 1, .plan_sha256 = "cd34", .plan = "[]"};
        char err[256] = "";
        assert_int_equal(hx_store_put_shard(s, &sm, err, sizeof err), ENG_OK);
        hx_store_close(s);
        assert_int_equal(query_i64(f->db, "PRAGMA user_version"), HX_STORE_SCHEMA_VERSION);
        assert_int_equal(query_i64(f->db, "SELECT count(*) FROM requests WHERE verified = 1"), 1);
        assert_int_equal(query_i64(f->db, "SELECT count(*) FROM runs WHERE plan_sha256 = 'cd34'"), 1);
        assert_int_equal(query_i64(f->db, "SELECT count(*) FROM shards"), 1);
        assert_int_equal(query_i64(f->db, "SELECT count(*) FROM runs WHERE shard IS NULL"), 1);
    }
}

/* A schema-2 file (before requests.cache_bytes) is shown read-only with the
 * new columns as NULL, then migrated on open, keeping its rows. */
static void a_version_2_file_is_migrated_on_open(void **state) {
    fixture *f = *state;
    hx_run_meta m;
    int64_t id = older_file(f, &m, DOWNGRADE_TO_V2 "PRAGMA user_version = 2",
                            "SELECT count(cache_bytes) + count(ru.block_size) FROM requests JOIN runs ru USING(run_id)");
    assert_int_equal(query_i64(f->db, "PRAGMA user_version"), 2);
    hx_store *s = open_ok(f->db);
    hx_request_row r;
    hx_request_row_init(&r);
    r.session = "s";
    r.cache_bytes = 4096;
    r.cache_entries = 2;
    put_ok(s, id, &r, NULL, 0);
    m.policy = "block-hash";
    m.pol.block_size = 64;
    m.pol.policy_opts = "{\"block_size\":64}";
    int64_t id2 = begin_ok(s, &m);
    hx_store_close(s);
    assert_int_equal(query_i64(f->db, "PRAGMA user_version"), HX_STORE_SCHEMA_VERSION);
    assert_int_equal(query_i64(f->db, "SELECT cache_bytes FROM requests WHERE session = 's'"), 4096);
    char sql[128];
    snprintf(sql, sizeof sql, "SELECT block_size FROM runs WHERE run_id = %lld", (long long)id2);
    assert_int_equal(query_i64(f->db, sql), 64);
    /* a different block size is a different configuration (resume never mixes them) */
    hx_run_meta m2 = m;
    m2.pol.block_size = 128;
    char *k1 = hx_run_meta_config_key(&m), *k2 = hx_run_meta_config_key(&m2);
    assert_string_not_equal(k1, k2);
    free(k1);
    free(k2);
}

/* plots/fake-schema.sql (the synthetic databases the figures are tested on)
 * has every table and column the store creates, at the same user_version: a
 * schema change that forgets the fake databases fails here. */
static void the_fake_schema_of_the_plots_matches_the_store(void **state) {
    fixture *f = *state;
    hx_store_close(open_ok(f->db));
    char fake[160], cmd[400];
    snprintf(fake, sizeof fake, "%s/fake.sqlite", f->dir);
    snprintf(cmd, sizeof cmd, "sqlite3 -bail '%s' < plots/fake-schema.sql > /dev/null", fake);
    assert_int_equal(system(cmd), 0);
    assert_int_equal(query_i64(fake, "PRAGMA user_version"), HX_STORE_SCHEMA_VERSION);
    sqlite3 *db = NULL;
    assert_int_equal(sqlite3_open_v2(f->db, &db, SQLITE_OPEN_READWRITE, NULL), SQLITE_OK);
    char sql[600];
    snprintf(sql, sizeof sql, "ATTACH '%s' AS fk", fake);
    assert_int_equal(sqlite3_exec(db, sql, NULL, NULL, NULL), SQLITE_OK);
    static const char *const tables[] = {"runs", "requests", "steps", "shards"};
    static const char *const side[][2] = {{"main", "fk"}, {"fk", "main"}};
    for (int i = 0; i < 4; i++)
        for (int d = 0; d < 2; d++) {  /* columns of one side's table missing from the other's */
            snprintf(sql, sizeof sql, "SELECT count(*), group_concat(name) FROM (SELECT name FROM "
                     "pragma_table_info('%s', '%s') EXCEPT SELECT name FROM pragma_table_info('%s', '%s'))",
                     tables[i], side[d][0], tables[i], side[d][1]);
            sqlite3_stmt *st = NULL;
            assert_int_equal(sqlite3_prepare_v2(db, sql, -1, &st, NULL), SQLITE_OK);
            assert_int_equal(sqlite3_step(st), SQLITE_ROW);
            if (sqlite3_column_int(st, 0))
                print_error("%s: only in %s: %s\n", tables[i], d ? "plots/fake-schema.sql" : "the store",
                            (const char *)sqlite3_column_text(st, 1));
            assert_int_equal(sqlite3_column_int(st, 0), 0);
            sqlite3_finalize(st);
        }
    sqlite3_close(db);
}

/* The column names of schema.table in order, comma-separated (malloc'd). */
static char *column_list(sqlite3 *db, const char *schema, const char *table) {
    char sql[200];
    snprintf(sql, sizeof sql, "SELECT group_concat(name, ',') FROM (SELECT name FROM pragma_table_info('%s', '%s') "
             "ORDER BY cid)", table, schema);
    sqlite3_stmt *st = NULL;
    assert_int_equal(sqlite3_prepare_v2(db, sql, -1, &st, NULL), SQLITE_OK);
    assert_int_equal(sqlite3_step(st), SQLITE_ROW);
    char *v = strdup(sqlite3_column_text(st, 0) ? (const char *)sqlite3_column_text(st, 0) : "");
    sqlite3_finalize(st);
    return v;
}

/* An older file read through plots/compat-vN.sql (the sqlite3 shell's copy of
 * store.c's compat_views) and through the store's read-only open shows runs
 * and requests with the current schema's columns, in the current order. */
static void the_compat_views_of_the_store_and_the_plots_give_the_current_columns(void **state) {
    fixture *f = *state;
    static const char *const downgrade[] = {
        NULL,
        DOWNGRADE_TO_V1,
        DOWNGRADE_TO_V2,
        DROP_V4,
        DROP_V5,
        DROP_V6,
        DROP_V7,
        DROP_V8,
    };
    hx_store_close(open_ok(f->db));
    sqlite3 *cur = NULL;
    assert_int_equal(sqlite3_open_v2(f->db, &cur, SQLITE_OPEN_READONLY, NULL), SQLITE_OK);
    char *want[2] = {column_list(cur, "main", "runs"), column_list(cur, "main", "requests")};
    sqlite3_close(cur);
    static const char *const tables[] = {"runs", "requests"};
    for (int v = 1; v < HX_STORE_SCHEMA_VERSION; v++) {
        char path[160], sql[4096], file[64];
        snprintf(path, sizeof path, "%s/v%d.sqlite", f->dir, v);
        hx_store_close(open_ok(path));
        sqlite3 *db = NULL;
        assert_int_equal(sqlite3_open(path, &db), SQLITE_OK);
        snprintf(sql, sizeof sql, "%sPRAGMA user_version = %d", downgrade[v], v);
        assert_int_equal(sqlite3_exec(db, sql, NULL, NULL, NULL), SQLITE_OK);
        snprintf(file, sizeof file, "plots/compat-v%d.sql", v);
        FILE *fp = fopen(file, "r");
        assert_non_null(fp);
        size_t n = fread(sql, 1, sizeof sql - 1, fp);
        fclose(fp);
        sql[n] = '\0';
        assert_int_equal(sqlite3_exec(db, sql, NULL, NULL, NULL), SQLITE_OK);
        char err[256] = "";
        hx_store *ro = NULL;
        assert_int_equal(hx_store_open_readonly(path, &ro, err, sizeof err), ENG_OK);
        for (int i = 0; i < 2; i++) {
            char *shell = column_list(db, "temp", tables[i]), *store = column_list(hx_store_db(ro), "temp", tables[i]);
            if (strcmp(shell, want[i])) print_error("%s %s:\n  %s\nwant\n  %s\n", file, tables[i], shell, want[i]);
            assert_string_equal(shell, want[i]);
            assert_string_equal(store, want[i]);
            free(shell);
            free(store);
        }
        hx_store_close(ro);
        sqlite3_close(db);
    }
    free(want[0]);
    free(want[1]);
}

/* A schema-1 file (before requests.state_equal) with a run in it migrates to
 * the current version on open, keeps its rows, and takes new rows. */
static void a_version_1_file_is_migrated_on_open(void **state) {
    fixture *f = *state;
    hx_run_meta m;
    int64_t id = older_file(f, &m, DOWNGRADE_TO_V1 "PRAGMA user_version = 1",
                            "SELECT count(state_equal) + count(cache_bytes) FROM requests");
    assert_int_equal(query_i64(f->db, "PRAGMA user_version"), 1);
    hx_store *s = open_ok(f->db);
    hx_request_row r;
    hx_request_row_init(&r);
    r.session = "s";
    r.transcript = "t";
    r.state_equal = 1;
    put_ok(s, id, &r, NULL, 0);
    hx_store_close(s);
    assert_int_equal(query_i64(f->db, "PRAGMA user_version"), HX_STORE_SCHEMA_VERSION);
    assert_int_equal(query_i64(f->db, "SELECT count(*) FROM runs"), 1);
    assert_int_equal(query_i64(f->db, "SELECT state_equal FROM results WHERE session = 's'"), 1);
}

static void a_newer_schema_version_is_refused_with_a_clear_error(void **state) {
    fixture *f = *state;
    hx_store_close(open_ok(f->db));
    sqlite3 *db = NULL;
    assert_int_equal(sqlite3_open(f->db, &db), SQLITE_OK);
    assert_int_equal(sqlite3_exec(db, "PRAGMA user_version = 99", NULL, NULL, NULL), SQLITE_OK);
    sqlite3_close(db);
    char err[512] = "";
    hx_store *s = (hx_store *)0x1;
    assert_int_equal(hx_store_open(f->db, &s, err, sizeof err), ENG_ERR_UNSUPPORTED);
    assert_null(s);
    assert_non_null(strstr(err, f->db));
    assert_non_null(strstr(err, "schema version 99 is newer"));
    err[0] = '\0';
    assert_int_equal(hx_store_open_readonly(f->db, &s, err, sizeof err), ENG_ERR_UNSUPPORTED);
    assert_non_null(strstr(err, "newer"));
}

static void a_file_that_is_not_a_database_is_a_format_error(void **state) {
    fixture *f = *state;
    FILE *fp = fopen(f->db, "w");
    assert_non_null(fp);
    for (int i = 0; i < 200; i++) fputs("this is not a database, just text\n", fp);
    fclose(fp);
    char err[512] = "";
    hx_store *s = NULL;
    assert_int_equal(hx_store_open(f->db, &s, err, sizeof err), ENG_ERR_FORMAT);
    assert_non_null(strstr(err, f->db));
    assert_int_equal(hx_store_open_readonly(f->db, &s, err, sizeof err), ENG_ERR_FORMAT);
    assert_null(s);
}

static void a_foreign_sqlite_database_is_not_adopted(void **state) {
    fixture *f = *state;
    sqlite3 *db = NULL;
    assert_int_equal(sqlite3_open(f->db, &db), SQLITE_OK);
    assert_int_equal(sqlite3_exec(db, "CREATE TABLE t(x)", NULL, NULL, NULL), SQLITE_OK);
    sqlite3_close(db);
    char err[512] = "";
    hx_store *s = NULL;
    assert_int_equal(hx_store_open(f->db, &s, err, sizeof err), ENG_ERR_FORMAT);
    assert_non_null(strstr(err, "not a kvreplay results database"));
    assert_int_equal(query_i64(f->db, "SELECT count(*) FROM sqlite_master"), 1);
}

static void readonly_open_of_a_missing_file_names_the_file(void **state) {
    fixture *f = *state;
    char err[512] = "";
    hx_store *s = NULL;
    assert_int_equal(hx_store_open_readonly(f->db, &s, err, sizeof err), ENG_ERR_IO);
    assert_non_null(strstr(err, f->db));
    assert_int_not_equal(access(f->db, F_OK), 0); /* and did not create it */
}

static void a_readonly_store_refuses_to_write(void **state) {
    fixture *f = *state;
    hx_store_close(open_ok(f->db));
    hx_store *s = NULL;
    char err[512] = "";
    assert_int_equal(hx_store_open_readonly(f->db, &s, err, sizeof err), ENG_OK);
    hx_run_meta m;
    meta_fill(&m);
    int64_t id;
    assert_true(hx_store_begin_run(s, &m, &id, err, sizeof err) < 0);
    hx_store_close(s);
    assert_int_equal(query_i64(f->db, "SELECT count(*) FROM runs"), 0);
}

// ----------------------------------------------------------------------------
// Runs

static void begin_run_records_the_meta_and_fills_the_defaults(void **state) {
    fixture *f = *state;
    hx_store *s = open_ok(f->db);
    hx_run_meta m;
    meta_fill(&m);
    m.exp.experiment = "exp1";
    m.exp.variant = "fixed";
    m.exp.sweep_name = "chunk";
    m.exp.sweep_value = 64;
    int64_t id = begin_ok(s, &m);
    char buf[512], sql[256];
#define COL(c) (snprintf(sql, sizeof sql, "SELECT " c " FROM runs WHERE run_id = %lld", \
                         (long long)id), query_text(s, sql, buf, sizeof buf))
    assert_string_equal(COL("status"), "running");
    assert_null(COL("finished_at"));
    assert_string_equal(COL("quirks"), "");
    assert_string_equal(COL("normalize"), "");
    assert_string_equal(COL("policy"), "slot-lcp");
    assert_string_equal(COL("experiment"), "exp1");
    assert_string_equal(COL("sweep_value"), "64.0");
    assert_string_equal(COL("chunk"), "64");
    assert_string_equal(COL("argv"), "kvreplay replay --test");
    assert_string_equal(COL("version"), KVR_VERSION);
    assert_null(COL("n_slots"));      /* -1 sentinel */
    assert_null(COL("threshold"));    /* NaN sentinel */
    assert_non_null(COL("cpu"));
    assert_non_null(COL("hostname"));
    assert_non_null(COL("blas"));
    assert_non_null(COL("config_key"));
    assert_non_null(COL("started_at"));
    /* ISO-8601 UTC: 2025-01-31T12:00:00.000Z */
    assert_int_equal(strlen(buf), 24);
    assert_int_equal(buf[10], 'T');
    assert_int_equal(buf[23], 'Z');
#undef COL
    hx_store_close(s);
}

static void begin_run_without_a_required_field_fails(void **state) {
    fixture *f = *state;
    hx_store *s = open_ok(f->db);
    hx_run_meta m;
    meta_fill(&m);
    m.policy = NULL;
    char err[512] = "";
    int64_t id = 0;
    assert_int_equal(hx_store_begin_run(s, &m, &id, err, sizeof err), ENG_ERR_ARG);
    assert_non_null(strstr(err, "policy"));
    assert_int_equal(id, -1);
    hx_store_close(s);
    assert_int_equal(query_i64(f->db, "SELECT count(*) FROM runs"), 0);
}

static void config_key_is_canonical_and_follows_the_config(void **state) {
    (void)state;
    hx_run_meta a, b;
    meta_fill(&a);
    meta_fill(&b);
    b.argv = "a different command line";
    b.started_at = "2020-01-01T00:00:00.000Z";
    b.machine.hostname = "elsewhere";
    char *ka = hx_run_meta_config_key(&a), *kb = hx_run_meta_config_key(&b);
    assert_non_null(ka);
    assert_string_equal(ka, kb);
    assert_non_null(strstr(ka, "\"chunk\":64"));
    free(kb);
    b.chunk = 128;
    kb = hx_run_meta_config_key(&b);
    assert_string_not_equal(ka, kb);
    free(kb);
    meta_fill(&b);
    b.quirks = "cch-drift";
    kb = hx_run_meta_config_key(&b);
    assert_string_not_equal(ka, kb);
    free(kb);
    free(ka);
}

static void finish_run_sets_status_and_time(void **state) {
    fixture *f = *state;
    hx_store *s = open_ok(f->db);
    hx_run_meta m;
    meta_fill(&m);
    int64_t id = begin_ok(s, &m);
    assert_int_equal(hx_store_finish_run(s, id, HX_RUN_DONE, NULL, 0), ENG_OK);
    char buf[64];
    assert_string_equal(query_text(s, "SELECT status FROM runs", buf, sizeof buf), "done");
    assert_non_null(query_text(s, "SELECT finished_at FROM runs", buf, sizeof buf));
    char err[256] = "";
    assert_int_equal(hx_store_finish_run(s, id + 10, HX_RUN_FAILED, err, sizeof err),
                     ENG_ERR_NOT_FOUND);
    assert_non_null(strstr(err, "no run"));
    hx_store_close(s);
}

// ----------------------------------------------------------------------------
// Requests: values, NULLs, atomicity

static void put_request_writes_the_row_and_its_steps(void **state) {
    fixture *f = *state;
    hx_store *s = open_ok(f->db);
    hx_run_meta m;
    meta_fill(&m);
    int64_t id = begin_ok(s, &m);
    hx_request_row r;
    row_fill(&r, "s1", 3, 0);
    hx_cmp c = {0};
    c.equal = false;
    c.first_diff = 17;
    c.a_first = 1.0f;
    c.b_first = nextafterf(1.0f, 2.0f);
    c.ulp_first = 1;
    c.max_abs = 1.1920928955078125e-07;
    c.max_ulp = 3;
    c.kl = 1e-9;
    c.top1_equal = true;
    hx_request_row_set_cmp(&r, &c);
    r.fork_step = 1;
    r.miss_where = "message 3 block 0 (tool_result)";
    r.note = "quirk cch-drift: system block changed";
    r.stable_end = 128;
    r.anchor_ms = 1.5;
    hx_step_row st[3];
    steps_fill(st, 3);
    put_ok(s, id, &r, st, 3);
    char buf[256];
    assert_string_equal(query_text(s, "SELECT a_first FROM requests", buf, sizeof buf), "0x1p+0");
    assert_string_equal(query_text(s, "SELECT b_first FROM requests", buf, sizeof buf),
                        "0x1.000002p+0");
    assert_string_equal(query_text(s, "SELECT first_diff_index || ',' || ulp_first || ',' ||"
                                      " max_ulp || ',' || fork_step || ',' || logits_equal"
                                      " FROM requests", buf, sizeof buf), "17,1,3,1,0");
    assert_string_equal(query_text(s, "SELECT miss_where FROM requests", buf, sizeof buf),
                        "message 3 block 0 (tool_result)");
    assert_string_equal(query_text(s, "SELECT note || '|' || stable_end || '|' || anchor_ms"
                                      " FROM requests", buf, sizeof buf),
                        "quirk cch-drift: system block changed|128|1.5");
    /* sentinels became NULL */
    assert_null(query_text(s, "SELECT slot FROM requests", buf, sizeof buf));
    assert_null(query_text(s, "SELECT sim FROM requests", buf, sizeof buf));
    assert_null(query_text(s, "SELECT miss_pos FROM requests", buf, sizeof buf));
    assert_null(query_text(s, "SELECT n_stored FROM requests", buf, sizeof buf));
    assert_null(query_text(s, "SELECT restore_ms FROM requests", buf, sizeof buf));
    assert_null(query_text(s, "SELECT a_first FROM steps WHERE step = 0", buf, sizeof buf));
    hx_store_close(s);
    assert_int_equal(query_i64(f->db, "SELECT count(*) FROM requests"), 1);
    assert_int_equal(query_i64(f->db, "SELECT count(*) FROM steps WHERE session = 's1'"
                                      " AND turn = 3"), 3);
    assert_int_equal(query_i64(f->db, "SELECT count(*) FROM results"), 1);
}

static void an_equal_request_stores_null_divergence_fields(void **state) {
    fixture *f = *state;
    hx_store *s = open_ok(f->db);
    hx_run_meta m;
    meta_fill(&m);
    int64_t id = begin_ok(s, &m);
    hx_request_row r;
    row_fill(&r, "s1", 0, 0);
    put_ok(s, id, &r, NULL, 0);
    hx_store_close(s);
    assert_int_equal(query_i64(f->db, "SELECT count(*) FROM requests WHERE first_diff_index IS NULL"
                                      " AND a_first IS NULL AND ulp_first IS NULL"
                                      " AND fork_step IS NULL"), 1);
}

/* A row served without --verify (schema 5) says so, and the report's and
 * check's identity figures count only the rows that were compared. */
static void an_unverified_row_is_stored_and_left_out_of_the_verdict(void **state) {
    fixture *f = *state;
    hx_store *s = open_ok(f->db);
    hx_run_meta m;
    meta_fill(&m);
    int64_t id = begin_ok(s, &m);
    hx_request_row r;
    row_fill(&r, "s1", 0, 0);
    r.logits_equal = r.decode_equal = true;
    put_ok(s, id, &r, NULL, 0);
    row_fill(&r, "s1", 1, 1);
    r.verified = false;       /* not compared: its logits_equal (0) says nothing */
    r.logits_equal = r.decode_equal = false;
    put_ok(s, id, &r, NULL, 0);
    hx_run_summary sum;
    char err[256];
    assert_int_equal(hx_report_summarize(s, id, &sum, err, sizeof err), ENG_OK);
    assert_int_equal(sum.n_requests, 2);
    assert_int_equal(sum.n_verified, 1);
    assert_int_equal(sum.n_identical, 1);
    assert_true(sum.pct_identical == 100.0);
    FILE *out = tmpfile();
    assert_int_equal(hx_report_first_divergence(s, id, out, err, sizeof err), 0);  /* OK, not DIVERGED */
    rewind(out);
    char line[256] = "";
    assert_non_null(fgets(line, sizeof line, out));
    fclose(out);
    assert_non_null(strstr(line, "OK: 1 requests"));
    assert_non_null(strstr(line, "1 more not compared"));
    hx_store_close(s);
    assert_int_equal(query_i64(f->db, "SELECT count(*) FROM requests WHERE verified = 0"), 1);
    assert_int_equal(query_i64(f->db, "SELECT count(*) FROM requests WHERE verified = 1"), 1);
}

static void a_failing_step_rolls_back_the_whole_request(void **state) {
    fixture *f = *state;
    hx_store *s = open_ok(f->db);
    hx_run_meta m;
    meta_fill(&m);
    int64_t id = begin_ok(s, &m);
    hx_request_row r;
    row_fill(&r, "s1", 0, 0);
    put_ok(s, id, &r, NULL, 0);
    /* Planted fault: steps 0, 1, 2, 1 -- the fourth insert violates the key
     * after the request row and three steps are already written. */
    hx_step_row st[4];
    steps_fill(st, 4);
    st[3].step = 1;
    row_fill(&r, "s1", 1, 1);
    char err[512] = "";
    assert_int_equal(hx_store_put_request(s, id, &r, st, 4, err, sizeof err), ENG_ERR_ARG);
    assert_non_null(strstr(err, f->db));
    assert_non_null(strstr(err, "step 1"));
    assert_non_null(strstr(err, "UNIQUE"));
    /* The store stays usable: the next request goes in. */
    row_fill(&r, "s1", 2, 2);
    put_ok(s, id, &r, st, 3);
    hx_store_close(s);
    assert_int_equal(query_i64(f->db, "SELECT count(*) FROM requests WHERE turn = 1"), 0);
    assert_int_equal(query_i64(f->db, "SELECT count(*) FROM steps WHERE turn = 1"), 0);
    assert_int_equal(query_i64(f->db, "SELECT count(*) FROM requests"), 2);
    assert_int_equal(query_i64(f->db, "SELECT count(*) FROM steps"), 3);
}

static void a_null_session_is_rejected_and_writes_nothing(void **state) {
    fixture *f = *state;
    hx_store *s = open_ok(f->db);
    hx_run_meta m;
    meta_fill(&m);
    int64_t id = begin_ok(s, &m);
    hx_request_row r;
    row_fill(&r, NULL, 0, 0);
    hx_step_row st[2];
    steps_fill(st, 2);
    char err[512] = "";
    assert_int_equal(hx_store_put_request(s, id, &r, st, 2, err, sizeof err), ENG_ERR_ARG);
    assert_non_null(strstr(err, "session"));
    hx_store_close(s);
    assert_int_equal(query_i64(f->db, "SELECT count(*) FROM requests"), 0);
    assert_int_equal(query_i64(f->db, "SELECT count(*) FROM steps"), 0);
}

static void a_request_of_an_unknown_run_is_rejected(void **state) {
    fixture *f = *state;
    hx_store *s = open_ok(f->db);
    hx_request_row r;
    row_fill(&r, "s1", 0, 0);
    char err[512] = "";
    assert_int_equal(hx_store_put_request(s, 42, &r, NULL, 0, err, sizeof err), ENG_ERR_ARG);
    assert_non_null(strstr(err, "FOREIGN KEY"));
    hx_store_close(s);
    assert_int_equal(query_i64(f->db, "SELECT count(*) FROM requests"), 0);
}

static void putting_a_request_twice_is_an_error_not_a_second_row(void **state) {
    fixture *f = *state;
    hx_store *s = open_ok(f->db);
    hx_run_meta m;
    meta_fill(&m);
    int64_t id = begin_ok(s, &m);
    hx_request_row r;
    row_fill(&r, "s1", 0, 0);
    put_ok(s, id, &r, NULL, 0);
    char err[512] = "";
    assert_int_equal(hx_store_put_request(s, id, &r, NULL, 0, err, sizeof err), ENG_ERR_ARG);
    assert_non_null(strstr(err, "UNIQUE"));
    assert_int_equal(hx_store_request_done(s, id, "s1", 0, NULL, 0), 1);
    assert_int_equal(hx_store_request_done(s, id, "s1", 1, NULL, 0), 0);
    hx_store_close(s);
    assert_int_equal(query_i64(f->db, "SELECT count(*) FROM requests"), 1);
}

// ----------------------------------------------------------------------------
// Crash and resume

#define N_REQ 10

static void put_numbered(hx_store *s, int64_t run, int i) {
    char sess[16];
    snprintf(sess, sizeof sess, "sess%d", i % 3);
    hx_request_row r;
    row_fill(&r, sess, i, i);
    hx_step_row st[2];
    steps_fill(st, 2);
    put_ok(s, run, &r, st, 2);
}

/* The child: commits requests 0..4, then starts request 5 by hand inside
 * BEGIN IMMEDIATE (the request row and 400 steps of 2 KB each, with a tiny
 * page cache so the uncommitted pages spill into the WAL file on disk), and
 * SIGKILLs itself before COMMIT. */
static void crashing_writer(const char *path) {
    hx_store *s = NULL;
    char err[512];
    if (hx_store_open(path, &s, err, sizeof err) != ENG_OK) _exit(2);
    hx_run_meta m;
    meta_fill(&m);
    int64_t run = -1;
    if (hx_store_begin_run(s, &m, &run, err, sizeof err) != ENG_OK) _exit(3);
    for (int i = 0; i < 5; i++) put_numbered(s, run, i);
    sqlite3 *db = hx_store_db(s);
    char sql[1024];
    snprintf(sql, sizeof sql,
             "PRAGMA cache_size = 8;"
             "BEGIN IMMEDIATE;"
             "INSERT INTO requests(run_id, req_index, session, turn, n_prompt, n_reused,"
             " n_prefilled, logits_equal, top1_equal, decode_equal, n_decode)"
             " VALUES(%lld, 5, 'sess2', 5, 1, 0, 1, 1, 1, 1, 1);"
             "WITH RECURSIVE k(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM k WHERE i < 399)"
             " INSERT INTO steps(run_id, session, turn, step, logits_equal, a_first)"
             " SELECT %lld, 'sess2', 5, i, 1, hex(randomblob(1024)) FROM k;",
             (long long)run, (long long)run);
    if (sqlite3_exec(db, sql, NULL, NULL, NULL) != SQLITE_OK) _exit(5);
    char wal[256];
    snprintf(wal, sizeof wal, "%s-wal", path);
    struct stat sb;
    if (stat(wal, &sb) != 0 || sb.st_size < 256 * 1024) _exit(7); /* nothing spilled */
    kill(getpid(), SIGKILL);
    _exit(6);
}

static void a_killed_writer_leaves_exactly_the_committed_requests(void **state) {
    fixture *f = *state;
    fflush(NULL);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) crashing_writer(f->db);
    int wst = 0;
    assert_int_equal(waitpid(pid, &wst, 0), pid);
    if (!WIFSIGNALED(wst)) fail_msg("the writer exited with %d instead of dying", WEXITSTATUS(wst));
    assert_int_equal(WTERMSIG(wst), SIGKILL);

    /* A reader (report) sees exactly the committed requests. */
    hx_store *ro = NULL;
    char err[512] = "";
    if (hx_store_open_readonly(f->db, &ro, err, sizeof err) != ENG_OK) fail_msg("%s", err);
    int64_t n_ro = -1;
    assert_int_equal(hx_store_count_requests(ro, 1, &n_ro, NULL, 0), ENG_OK);
    assert_int_equal(n_ro, 5);
    hx_store_close(ro);

    hx_store *s = open_ok(f->db);
    char buf[64];
    assert_string_equal(query_text(s, "PRAGMA integrity_check", buf, sizeof buf), "ok");
    hx_run_meta m;
    meta_fill(&m);
    char *key = hx_run_meta_config_key(&m);
    int64_t run = -1;
    assert_int_equal(hx_store_find_resumable(s, key, &run, NULL, 0), ENG_OK);
    free(key);
    assert_int_equal(run, 1);
    hx_done_set *done = NULL;
    assert_int_equal(hx_store_load_done(s, run, &done, NULL, 0), ENG_OK);
    assert_int_equal(hx_done_set_count(done), 5);
    assert_false(hx_done_set_has(done, "sess2", 5)); /* the killed transaction */
    for (int i = 0; i < N_REQ; i++) {
        char sess[16];
        snprintf(sess, sizeof sess, "sess%d", i % 3);
        if (hx_done_set_has(done, sess, i)) continue;
        put_numbered(s, run, i);
    }
    hx_done_set_free(done);
    hx_store_close(s);
    assert_int_equal(query_i64(f->db, "SELECT count(*) FROM requests"), N_REQ);
    assert_int_equal(query_i64(f->db, "SELECT count(DISTINCT session || '/' || turn)"
                                      " FROM requests"), N_REQ);
    assert_int_equal(query_i64(f->db, "SELECT count(*) FROM steps"), 2 * N_REQ);
    assert_int_equal(query_i64(f->db, "SELECT count(*) FROM runs"), 1);
}

static void begin_or_resume_continues_an_unfinished_run(void **state) {
    fixture *f = *state;
    hx_run_meta m;
    meta_fill(&m);
    hx_store *s = open_ok(f->db);
    int64_t run = -1;
    hx_done_set *done = NULL;
    bool resumed = true;
    assert_int_equal(hx_store_begin_or_resume(s, &m, true, &run, &done, &resumed, NULL, 0), ENG_OK);
    assert_false(resumed);
    assert_int_equal(hx_done_set_count(done), 0);
    hx_done_set_free(done);
    for (int i = 0; i < 5; i++) put_numbered(s, run, i);
    hx_store_close(s); /* "crash": closed without finish_run */

    s = open_ok(f->db);
    int64_t run2 = -1;
    assert_int_equal(hx_store_begin_or_resume(s, &m, true, &run2, &done, &resumed, NULL, 0), ENG_OK);
    assert_true(resumed);
    assert_int_equal(run2, run);
    assert_int_equal(hx_done_set_count(done), 5);
    for (int i = 0; i < N_REQ; i++) {
        char sess[16];
        snprintf(sess, sizeof sess, "sess%d", i % 3);
        if (!hx_done_set_has(done, sess, i)) put_numbered(s, run2, i);
    }
    hx_done_set_free(done);
    assert_int_equal(hx_store_finish_run(s, run2, HX_RUN_DONE, NULL, 0), ENG_OK);
    hx_store_close(s);
    assert_int_equal(query_i64(f->db, "SELECT count(*) FROM requests"), N_REQ);
    assert_int_equal(query_i64(f->db, "SELECT resumes FROM runs"), 1);
}

static void a_finished_run_is_not_resumed(void **state) {
    fixture *f = *state;
    hx_run_meta m;
    meta_fill(&m);
    hx_store *s = open_ok(f->db);
    int64_t run = begin_ok(s, &m);
    assert_int_equal(hx_store_finish_run(s, run, HX_RUN_DONE, NULL, 0), ENG_OK);
    char *key = hx_run_meta_config_key(&m);
    int64_t found = 0;
    assert_int_equal(hx_store_find_resumable(s, key, &found, NULL, 0), ENG_ERR_NOT_FOUND);
    assert_int_equal(found, -1);
    free(key);
    hx_done_set *done = NULL;
    bool resumed = true;
    int64_t run2 = -1;
    assert_int_equal(hx_store_begin_or_resume(s, &m, true, &run2, &done, &resumed, NULL, 0), ENG_OK);
    assert_false(resumed);
    assert_int_not_equal(run2, run);
    hx_done_set_free(done);
    hx_store_close(s);
}

static void resume_picks_the_latest_running_run_with_the_same_config(void **state) {
    fixture *f = *state;
    hx_run_meta a, b;
    meta_fill(&a);
    meta_fill(&b);
    b.chunk = 32;
    hx_store *s = open_ok(f->db);
    begin_ok(s, &a);
    int64_t a2 = begin_ok(s, &a);
    begin_ok(s, &b);
    char *key = hx_run_meta_config_key(&a);
    int64_t found = -1;
    assert_int_equal(hx_store_find_resumable(s, key, &found, NULL, 0), ENG_OK);
    assert_int_equal(found, a2);
    free(key);
    hx_store_close(s);
}

static void the_done_set_answers_membership(void **state) {
    fixture *f = *state;
    hx_run_meta m;
    meta_fill(&m);
    hx_store *s = open_ok(f->db);
    int64_t run = begin_ok(s, &m);
    for (int i = 0; i < 7; i++) put_numbered(s, run, i);
    hx_done_set *d = NULL;
    assert_int_equal(hx_store_load_done(s, run, &d, NULL, 0), ENG_OK);
    assert_int_equal(hx_done_set_count(d), 7);
    assert_true(hx_done_set_has(d, "sess0", 0));
    assert_true(hx_done_set_has(d, "sess0", 6));
    assert_true(hx_done_set_has(d, "sess2", 5));
    assert_false(hx_done_set_has(d, "sess1", 0));
    assert_false(hx_done_set_has(d, "sess0", 7));
    assert_false(hx_done_set_has(d, "nope", 1));
    assert_false(hx_done_set_has(d, NULL, 1));
    assert_false(hx_done_set_has(NULL, "sess0", 0));
    hx_done_set_free(d);
    hx_done_set_free(NULL);
    hx_store_close(s);
}

// ----------------------------------------------------------------------------
// sysinfo

static void sysinfo_parses_the_cpu_model_and_fills_every_field(void **state) {
    (void)state;
    char buf[128];
    assert_int_equal(hx_sysinfo_parse_cpuinfo("processor\t: 0\nvendor_id\t: X\n"
                                              "model name\t:  AMD   EPYC 7B13 \nflags : a\n",
                                              buf, sizeof buf), 1);
    assert_string_equal(buf, "AMD EPYC 7B13");
    assert_int_equal(hx_sysinfo_parse_cpuinfo("processor : 0\nHardware : BCM2835\n", buf,
                                              sizeof buf), 1);
    assert_string_equal(buf, "BCM2835");
    assert_int_equal(hx_sysinfo_parse_cpuinfo("nothing here\n", buf, sizeof buf), 0);
    assert_string_equal(buf, "");
    hx_sysinfo si;
    hx_sysinfo_get(&si);
    assert_true(si.cpu[0] && si.hostname[0] && si.os_release[0] && si.blas[0]);
    assert_true(si.n_cpus >= 1);
}

// ----------------------------------------------------------------------------
// Issue #14: one writer per run; a reader on a read-only directory

static void a_run_being_written_cannot_be_resumed_by_another_store(void **state) {
    fixture *f = *state;
    hx_run_meta m;
    meta_fill(&m);
    hx_store *a = open_ok(f->db), *b = open_ok(f->db);
    int64_t run = -1, run_b = -1;
    hx_done_set *done = NULL;
    bool resumed = true;
    assert_int_equal(hx_store_begin_or_resume(a, &m, true, &run, &done, &resumed, NULL, 0), ENG_OK);
    hx_done_set_free(done);
    for (int i = 0; i < 3; i++) put_numbered(a, run, i);
    /* a still writes it: b may not take it over */
    char err[512] = "";
    assert_int_equal(hx_store_begin_or_resume(b, &m, true, &run_b, &done, &resumed, err, sizeof err),
                     ENG_ERR_UNSUPPORTED);
    assert_null(done);
    assert_non_null(strstr(err, "run 1 is being written by another kvreplay process"));
    hx_store_close(a);  /* the writer is gone (closed or killed): b resumes it */
    assert_int_equal(hx_store_begin_or_resume(b, &m, true, &run_b, &done, &resumed, NULL, 0), ENG_OK);
    assert_true(resumed);
    assert_int_equal(run_b, run);
    assert_int_equal(hx_done_set_count(done), 3);
    hx_done_set_free(done);
    hx_store_close(b);
}

static void a_failed_run_is_resumed_and_a_finished_one_is_found(void **state) {
    fixture *f = *state;
    hx_run_meta m;
    meta_fill(&m);
    hx_store *s = open_ok(f->db);
    int64_t run = begin_ok(s, &m);
    put_numbered(s, run, 0);
    assert_int_equal(hx_store_finish_run(s, run, HX_RUN_FAILED, NULL, 0), ENG_OK);
    hx_store_close(s);
    s = open_ok(f->db);
    char *key = hx_run_meta_config_key(&m);
    int64_t found = -1;
    assert_int_equal(hx_store_find_resumable(s, key, &found, NULL, 0), ENG_OK);
    assert_int_equal(found, run);
    assert_int_equal(hx_store_find_done(s, key, &found, NULL, 0), ENG_ERR_NOT_FOUND);
    assert_int_equal(hx_store_finish_run(s, run, HX_RUN_DONE, NULL, 0), ENG_OK);
    assert_int_equal(hx_store_find_done(s, key, &found, NULL, 0), ENG_OK);
    assert_int_equal(found, run);
    free(key);
    hx_store_close(s);
}

/* In a child (as nobody when root, since root ignores directory modes):
 * opens db read-only and counts its runs; exits 0 when it read 1. */
static int read_as_nobody(const char *db) {
    fflush(NULL);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        if (geteuid() == 0 && (setgid(65534) != 0 || setuid(65534) != 0)) _exit(3);
        hx_store *s = NULL;
        char err[512] = "";
        if (hx_store_open_readonly(db, &s, err, sizeof err) != ENG_OK) {
            fprintf(stderr, "%s\n", err);
            _exit(1);
        }
        int64_t run = -1;
        int rc = hx_store_last_run(s, &run, err, sizeof err);
        hx_store_close(s);
        _exit(rc == ENG_OK && run == 1 ? 0 : 2);
    }
    int st;
    assert_int_equal(waitpid(pid, &st, 0), pid);
    return WIFEXITED(st) ? WEXITSTATUS(st) : 99;
}

static void a_reader_opens_a_database_in_a_read_only_directory(void **state) {
    fixture *f = *state;
    hx_run_meta m;
    meta_fill(&m);
    hx_store *s = open_ok(f->db);
    int64_t run = begin_ok(s, &m);
    put_numbered(s, run, 0);
    hx_store_close(s);  /* a clean close: the WAL is checkpointed and removed */
    char wal[200];
    snprintf(wal, sizeof wal, "%s-wal", f->db);
    assert_int_not_equal(access(wal, F_OK), 0);
    assert_int_equal(chmod(f->db, 0644), 0);
    assert_int_equal(chmod(f->dir, 0555), 0);  /* nobody can create out.sqlite-shm here */
    int rc = read_as_nobody(f->db);
    assert_int_equal(chmod(f->dir, 0755), 0);
    if (rc == 3) skip();  /* cannot drop privileges here */
    assert_int_equal(rc, 0);
}

int main(void) {
    const struct CMUnitTest tests[] = {
#define T(name) cmocka_unit_test_setup_teardown(name, setup, teardown)
        T(opening_a_new_file_creates_the_schema_in_wal_mode),
        T(reopening_an_existing_database_keeps_its_runs),
        T(a_version_2_file_is_migrated_on_open),
        T(the_fake_schema_of_the_plots_matches_the_store),
        T(the_compat_views_of_the_store_and_the_plots_give_the_current_columns),
        T(a_version_1_file_is_migrated_on_open),
        T(a_version_5_file_is_migrated_on_open),
        T(a_file_with_a_hole_in_its_schema_is_repaired_on_open),
        T(a_version_3_file_is_migrated_on_open),
        T(a_newer_schema_version_is_refused_with_a_clear_error),
        T(a_file_that_is_not_a_database_is_a_format_error),
        T(a_foreign_sqlite_database_is_not_adopted),
        T(readonly_open_of_a_missing_file_names_the_file),
        T(a_readonly_store_refuses_to_write),
        T(begin_run_records_the_meta_and_fills_the_defaults),
        T(begin_run_without_a_required_field_fails),
        T(config_key_is_canonical_and_follows_the_config),
        T(finish_run_sets_status_and_time),
        T(put_request_writes_the_row_and_its_steps),
        T(an_equal_request_stores_null_divergence_fields),
        T(an_unverified_row_is_stored_and_left_out_of_the_verdict),
        T(a_failing_step_rolls_back_the_whole_request),
        T(a_null_session_is_rejected_and_writes_nothing),
        T(a_request_of_an_unknown_run_is_rejected),
        T(putting_a_request_twice_is_an_error_not_a_second_row),
        T(a_killed_writer_leaves_exactly_the_committed_requests),
        T(begin_or_resume_continues_an_unfinished_run),
        T(a_finished_run_is_not_resumed),
        T(resume_picks_the_latest_running_run_with_the_same_config),
        T(the_done_set_answers_membership),
        T(sysinfo_parses_the_cpu_model_and_fills_every_field),
        T(a_run_being_written_cannot_be_resumed_by_another_store),
        T(a_failed_run_is_resumed_and_a_finished_one_is_found),
        T(a_reader_opens_a_database_in_a_read_only_directory),
#undef T
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

