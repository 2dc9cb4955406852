/*
 * harness/store/store.c: the store object (see store.h for the contract):
 * opening a file read-write or read-only, the statement cache, binding by
 * parameter name. The schema is store_schema.c, runs store_runs.c, rows
 * store_rows.c.
 *
 * Prepared statements are cached in the store object (prepared on first use
 * with SQLITE_PREPARE_PERSISTENT) and always reset after use, so no
 * statement holds a read transaction open between calls.
 */
#include "store.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "status.h"
#include "store_int.h"

// ----------------------------------------------------------------------------
// The store object and its statement cache

sqlite3    *hx_store_db(hx_store *s) { return s->db; }
const char *hx_store_path(const hx_store *s) { return s->path; }

int hx_store_fail(hx_store *s, int rc, char *err, size_t errlen, const char *fmt, ...) {
    char what[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    hx_sqldb d = {s ? s->db : NULL, s ? s->path : NULL};
    return hx_sql_fail(&d, rc, err, errlen, "%s", what);
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
sqlite3_stmt *hx_store_stmt(hx_store *s, enum stmt_id id, int *status, char *err, size_t errlen) {
    if (s->st[id]) return s->st[id];
    const char *sql = stmt_sql(s, id);
    ENG_ASSERT(sql != NULL);
    int rc = sqlite3_prepare_v3(s->db, sql, -1, SQLITE_PREPARE_PERSISTENT, &s->st[id], NULL);
    if (rc != SQLITE_OK) {
        /* A prepare failing on a table or column means the file is not ours. */
        *status = hx_store_fail(s, rc, err, errlen, "preparing \"%.60s\"", sql);
        if (*status == ENG_ERR_IO && (rc & 0xff) == SQLITE_ERROR) *status = ENG_ERR_FORMAT;
        s->st[id] = NULL;
        return NULL;
    }
    return s->st[id];
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

int hx_bind_text(sqlite3_stmt *st, const char *name, const char *v) {
    int i = param(st, name);
    return v ? sqlite3_bind_text(st, i, v, -1, SQLITE_TRANSIENT) : sqlite3_bind_null(st, i);
}
int hx_bind_int(sqlite3_stmt *st, const char *name, int64_t v) {
    return sqlite3_bind_int64(st, param(st, name), v);
}
int hx_bind_int_opt(sqlite3_stmt *st, const char *name, int64_t v) {
    int i = param(st, name);
    return v >= 0 ? sqlite3_bind_int64(st, i, v) : sqlite3_bind_null(st, i);
}
int hx_bind_u64(sqlite3_stmt *st, const char *name, uint64_t v) {
    return sqlite3_bind_int64(st, param(st, name), v > (uint64_t)INT64_MAX ? INT64_MAX : (int64_t)v);
}
int hx_bind_real(sqlite3_stmt *st, const char *name, double v) {
    int i = param(st, name);
    return isnan(v) ? sqlite3_bind_null(st, i) : sqlite3_bind_double(st, i, v);
}
int hx_bind_hexfloat(sqlite3_stmt *st, const char *name, float v) {
    char buf[64];
    snprintf(buf, sizeof buf, "%a", (double)v);
    return hx_bind_text(st, name, buf);
}
/* a_first, b_first (as %a text) and ulp_first where the logits differ, NULL otherwise. */
void hx_bind_first_diff(sqlite3_stmt *st, bool diff, float a, float b, uint64_t ulp) {
    if (diff) {
        hx_bind_hexfloat(st, "a_first", a);
        hx_bind_hexfloat(st, "b_first", b);
        hx_bind_u64(st, "ulp_first", ulp);
    } else {
        hx_bind_text(st, "a_first", NULL);
        hx_bind_text(st, "b_first", NULL);
        hx_bind_int_opt(st, "ulp_first", -1);
    }
}

/* Runs a statement that returns no rows (or ignores them) and resets it. */
int hx_store_step_done(sqlite3_stmt *st) {
    int rc = sqlite3_step(st);
    while (rc == SQLITE_ROW) rc = sqlite3_step(st);
    return rc == SQLITE_DONE ? SQLITE_OK : rc;
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
    for (int t = 0; t < 3; t++) s->insert_sql[t] = hx_schema_insert_sql(t);
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
        status = hx_store_fail(s, rc, err, errlen, "cannot open results database");
        if ((rc & 0xff) == SQLITE_CANTOPEN || (rc & 0xff) == SQLITE_PERM) status = ENG_ERR_ARG;  /* e.g. no such directory */
        goto out;
    }
    sqlite3_extended_result_codes(s->db, 1);
    sqlite3_busy_timeout(s->db, 10000);

    /* The first read tells a non-database file apart (SQLITE_NOTADB). */
    int64_t v = 0;
    hx_sqldb d = {s->db, s->path};
    status = hx_sql_pragma_int(&d, "PRAGMA user_version", &v, err, errlen);
    if (status != ENG_OK && readonly && reopen_immutable(s, sqlite3_extended_errcode(s->db))) {
        d.db = s->db;
        status = hx_sql_pragma_int(&d, "PRAGMA user_version", &v, err, errlen);
    }
    if (status != ENG_OK) goto out;
    if ((status = hx_schema_check_version(&d, v, err, errlen)) != ENG_OK) goto out;

    if (readonly) {
        if (v == 0) {
            eng_errf(err, errlen, "%s: user_version 0: not a kvreplay results database", path);
            status = ENG_ERR_FORMAT;
            goto out;
        }
        if ((status = hx_schema_views(&d, v, err, errlen)) != ENG_OK) goto out;
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
    if (rc != SQLITE_OK) status = hx_store_fail(s, rc, err, errlen, "PRAGMA journal_mode = WAL");
    sqlite3_finalize(st);
    if (status != ENG_OK) goto out;
    rc = sqlite3_exec(s->db, "PRAGMA synchronous = NORMAL; PRAGMA foreign_keys = ON", NULL, NULL,
                      NULL);
    if (rc != SQLITE_OK) {
        status = hx_store_fail(s, rc, err, errlen, "setting pragmas");
        goto out;
    }
    status = hx_schema_update(&d, v, err, errlen);

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
