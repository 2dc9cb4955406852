/*
 * harness/store/store_int.h: what the files of the store share: the store
 * object and its statement cache, binding by parameter name, the schema's
 * entry points. Internal to harness/store/.
 */
#ifndef HX_STORE_INT_H
#define HX_STORE_INT_H

#include <stdbool.h>
#include <stdint.h>

#include "store_schema.h"

typedef struct hx_store hx_store;  /* as store.h declares it */

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

/* Formats "PATH: WHAT: sqlite's message" (WHAT from fmt) into err and returns
 * the mapped status of rc. Call before anything else touches the connection. */
int  hx_store_fail(hx_store *s, int rc, char *err, size_t errlen, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
/* The cached statement id, prepared on first use; NULL on failure (*status and err set). */
sqlite3_stmt *hx_store_stmt(hx_store *s, enum stmt_id id, int *status, char *err, size_t errlen);
/* Runs a statement that returns no rows (or ignores them) and resets it: SQLITE_OK or sqlite's code. */
int  hx_store_step_done(sqlite3_stmt *st);

/* Binding by parameter name (":name"): a NULL string, a negative integer
 * (the _opt variant) and a NaN real become SQL NULL; an unsigned value above
 * INT64_MAX is stored as INT64_MAX; a float as its %a text. */
int  hx_bind_text(sqlite3_stmt *st, const char *name, const char *v);
int  hx_bind_int(sqlite3_stmt *st, const char *name, int64_t v);
int  hx_bind_int_opt(sqlite3_stmt *st, const char *name, int64_t v);
int  hx_bind_u64(sqlite3_stmt *st, const char *name, uint64_t v);
int  hx_bind_real(sqlite3_stmt *st, const char *name, double v);
int  hx_bind_hexfloat(sqlite3_stmt *st, const char *name, float v);
/* a_first, b_first (as %a text) and ulp_first where the logits differ, NULL otherwise. */
void hx_bind_first_diff(sqlite3_stmt *st, bool diff, float a, float b, uint64_t ulp);

#endif /* HX_STORE_INT_H */
