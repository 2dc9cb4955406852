/*
 * harness/base/errors.h: the harness's two tiers of errors.
 *
 * Library code returns an ENG_ status (engine/status.h) with a message in a
 * caller's buffer (err, errlen), the ggml/SQLite tier; only harness/cli/
 * and main turn a status into an exit. A bug is an ENG_ASSERT.
 *
 * Exit codes (docs/exit-codes.md): 0 success, 1 divergence found (check),
 * 2 the command as given cannot work (usage, or a path the user named that
 * is missing, a directory, unreadable, not what the command expects; the
 * message names the path, and the line and field for content), 3 the
 * machine or kvreplay failed while working (out of memory, a write failing,
 * a thread that cannot start, a bug). Some entry points (hx_replay_run,
 * hx_serve_run) return one of these codes: a status in the exit vocabulary,
 * never an exit.
 */
#ifndef HX_ERRORS_H
#define HX_ERRORS_H

#include <stddef.h>
#include <stdint.h>

#define HX_EXIT_OK       0
#define HX_EXIT_DIVERGED 1
#define HX_EXIT_USAGE    2
#define HX_EXIT_INTERNAL 3

/* The exit code for the status of loading an input the user named: 0 for
 * ENG_OK, 3 for ENG_ERR_NOMEM, 2 for anything else. */
int hx_exit_for_input(int status);
/* The exit code for the status of work under way: 0 for ENG_OK, 2 for a bad
 * input or argument (ENG_ERR_ARG, ENG_ERR_FORMAT, ENG_ERR_UNSUPPORTED), 3
 * for anything else. */
int hx_exit_for_status(int status);

/* An error message "PATH:LINE: FIELD: <fmt>" ("PATH: FIELD: ..." when
 * line <= 0, "FIELD: ..." when path is "" (an HTTP body), no "FIELD: " when
 * field is NULL or empty) into err (may be NULL). */
void hx_errf_at(char *err, size_t errlen, const char *path, int64_t line, const char *field, const char *fmt, ...)
    __attribute__((format(printf, 6, 7)));

#endif /* HX_ERRORS_H */
