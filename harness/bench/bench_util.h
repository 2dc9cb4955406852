/*
 * harness/bench/bench_util.h: what every benchmark shares: reading its
 * arguments, the status it returns, printing its result. (Medians and
 * seeded inputs are base/stats.h.)
 *
 * A benchmark never exits: it returns an ENG_ status with a message in the
 * caller's err, and cli/cmd_bench.c turns it into the exit code through
 * hx_exit_for_status. So the status carries the exit class: ENG_ERR_ARG
 * for usage and for an input the user named (exit 2), ENG_ERR_NOMEM and
 * the failures of work under way (hx_bench_failed) exit 3.
 */
#ifndef KVR_BENCH_UTIL_H
#define KVR_BENCH_UTIL_H

#include <stddef.h>

#include "options.h"
#include "stats.h"

/* Reads argv[1..argc) into opts through table: ENG_OK, or ENG_ERR_ARG with
 * err naming the flag of a bad value, or hx_bench_bad_arg's message for an
 * argument that is none of table's options. */
int hx_bench_args(const hx_option *table, void *opts, int argc, char **argv, const char *cmd, char *err,
                  size_t errlen);
/* ENG_ERR_ARG with "CMD: unknown option '--x' (see kvreplay CMD --help)"
 * in err ("unexpected argument 'x'" when arg is no option). */
int hx_bench_bad_arg(const char *cmd, const char *arg, char *err, size_t errlen);

/* The status for work that failed under way (an engine call, a file the
 * benchmark wrote itself, a child process): the machine's or kvreplay's
 * failure, exit 3, never the user's. rc itself, or ENG_ERR_IO where rc
 * would read as bad input (ENG_ERR_ARG, ENG_ERR_FORMAT, ENG_ERR_UNSUPPORTED);
 * the caller writes the message, naming the step and rc itself. */
int hx_bench_failed(int rc);

/* Prints o (a json_t *) on stdout as indented JSON (reals with 6
 * significant digits) and releases it. ENG_OK, or ENG_ERR_NOMEM when it
 * cannot be encoded. */
int hx_bench_print_json(void *o);
/* The end of a benchmark's output: fflush(stdout). ENG_OK, or ENG_ERR_IO
 * with "CMD: cannot write stdout: <why>" in err. */
int hx_bench_flush(const char *cmd, char *err, size_t errlen);

#endif
