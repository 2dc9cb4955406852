/*
 * tests/helpers/proc.h: running the `kvreplay` binary (runcli.h's kvr_bin)
 * from a test as a user would, with an argv (no shell), its exit code and
 * what it printed on stdout and stderr, under a file-size limit or another
 * user when asked; and polling a database that another process writes.
 */
#ifndef KVR_TESTS_PROC_H
#define KVR_TESTS_PROC_H

#include <stddef.h>
#include <stdint.h>
#include <sys/resource.h>
#include <sys/types.h>

typedef struct proc_opts {
    rlim_t      fsize;  /* > 0: RLIMIT_FSIZE in bytes (SIGXFSZ ignored: writes fail with EFBIG) */
    int         uid;    /* >= 0 and running as root: run as this user (and group) */
    const char *input;  /* NULL: stdin is /dev/null; else these bytes are written to stdin */
} proc_opts;

/* Runs kvreplay with args (NULL-terminated, without argv[0]); stdout goes to
 * out and stderr to err (each may be NULL: discarded; NUL-terminated,
 * truncated to its cap). Returns the exit code (128 + signal when killed).
 * o may be NULL. */
int proc_run(const proc_opts *o, char *out, size_t out_cap, char *err, size_t err_cap, const char *const *args);

/* Starts kvreplay with args in the background (stdout and stderr to
 * /dev/null); returns its pid. proc_wait returns its exit code as proc_run. */
pid_t proc_spawn(const char *const *args);
int   proc_wait(pid_t pid);

/* The integer the last statement of sql returns on db, or dflt when the
 * file, table or row is not there yet (never fails the test). */
int64_t db_int_or(const char *db, const char *sql, int64_t dflt);
/* Polls sql on db (every 5 ms, 60 s at most) until it returns at least n;
 * returns the last value (-1 while the file, table or row is not there). */
int64_t db_wait_at_least(const char *db, const char *sql, int64_t n);

#endif
