/*
 * tests/helpers/kvr.h: running the `kvreplay` binary from a test, as a user
 * would ($BUILD/kvreplay, default build/kvreplay), with its exit code and
 * what it printed; and polling a database that another process writes.
 */
#ifndef KVR_TESTS_KVR_H
#define KVR_TESTS_KVR_H

#include <stddef.h>
#include <stdint.h>
#include <sys/resource.h>
#include <sys/types.h>

/* The binary under test. */
const char *kvr_bin(void);

typedef struct kvr_opts {
    rlim_t      fsize;  /* > 0: RLIMIT_FSIZE in bytes (SIGXFSZ ignored: writes fail with EFBIG) */
    int         uid;    /* >= 0 and running as root: run as this user (and group) */
    const char *input;  /* NULL: stdin is /dev/null; else these bytes are written to stdin */
} kvr_opts;

/* Runs kvreplay with args (NULL-terminated, without argv[0]); stdout goes to
 * out and stderr to err (each may be NULL: discarded; NUL-terminated,
 * truncated to its cap). Returns the exit code (128 + signal when killed).
 * o may be NULL. */
int kvr_run(const kvr_opts *o, char *out, size_t out_cap, char *err, size_t err_cap, const char *const *args);

/* Starts kvreplay with args in the background (stdout and stderr to
 * /dev/null); returns its pid. kvr_wait returns its exit code as kvr_run. */
pid_t kvr_spawn(const char *const *args);
int   kvr_wait(pid_t pid);

/* The integer the last statement of sql returns on db, or dflt when the
 * file, table or row is not there yet (never fails the test). */
int64_t kvr_q_int_or(const char *db, const char *sql, int64_t dflt);

#endif
