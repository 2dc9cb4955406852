/* tests/helpers/sqlq.c: see sqlq.h. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <sqlite3.h>

#include "sqlq.h"

int64_t q_int(const char *db, const char *sql) {
    sqlite3 *h = NULL;
    assert_int_equal(sqlite3_open_v2(db, &h, SQLITE_OPEN_READWRITE, NULL), SQLITE_OK);
    sqlite3_stmt *st = NULL;
    const char *tail = sql;
    for (;;) {
        if (sqlite3_prepare_v2(h, tail, -1, &st, &tail) != SQLITE_OK) fail_msg("%s: %s", sql, sqlite3_errmsg(h));
        while (*tail == ' ' || *tail == ';') tail++;
        if (!*tail) break;
        sqlite3_step(st);
        sqlite3_finalize(st);
    }
    int rc = sqlite3_step(st);
    if (rc != SQLITE_ROW) fail_msg("%s: %s: no row (%d: %s)", db, sql, rc, sqlite3_errmsg(h));
    int64_t v = sqlite3_column_int64(st, 0);
    sqlite3_finalize(st);
    sqlite3_close(h);
    return v;
}
