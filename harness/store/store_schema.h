/*
 * harness/store/store_schema.h: the results schema (docs/sqlite.md): its
 * version, how a file is brought to it (or shown in it, read-only), the
 * generated INSERTs, and sqlite errors as ENG_ statuses with a message
 * naming the file. Works on a bare connection; the store object
 * (store.h) stands on it.
 */
#ifndef HX_STORE_SCHEMA_H
#define HX_STORE_SCHEMA_H

#include <stddef.h>
#include <stdint.h>

#include <sqlite3.h>

/* The schema this build writes (PRAGMA user_version). */
#define HX_STORE_SCHEMA_VERSION 8

/* A connection and the path it was opened with (for messages). */
typedef struct hx_sqldb {
    sqlite3    *db;
    const char *path;
} hx_sqldb;

/* Maps a sqlite result code onto an eng_status. */
int  hx_sql_map_rc(int rc);
/* Formats "PATH: WHAT: sqlite's message" (WHAT from fmt) into err and returns
 * the mapped status of rc. Call before anything else touches the connection. */
int  hx_sql_fail(const hx_sqldb *s, int rc, char *err, size_t errlen, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
/* The single integer a statement returns (0 when it returns no row). */
int  hx_sql_pragma_int(hx_sqldb *s, const char *sql, int64_t *out, char *err, size_t errlen);

/* Whether this build can use a file of schema version v: ENG_OK,
 * ENG_ERR_UNSUPPORTED (newer) or ENG_ERR_FORMAT (negative). */
int   hx_schema_check_version(hx_sqldb *s, int64_t v, char *err, size_t errlen);
/* The INSERT of table 0 (runs), 1 (requests) or 2 (steps), bound by column
 * name (":col"); malloc'd, NULL on OOM. */
char *hx_schema_insert_sql(int table);
/* A read-only file of version v shown in the current schema (temp views). */
int   hx_schema_views(hx_sqldb *s, int64_t v, char *err, size_t errlen);
/* A read-write file of version v brought to the current schema, in one
 * BEGIN IMMEDIATE (another process may have migrated it meanwhile). */
int   hx_schema_update(hx_sqldb *s, int64_t v, char *err, size_t errlen);

#endif /* HX_STORE_SCHEMA_H */
