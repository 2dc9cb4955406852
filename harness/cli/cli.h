/*
 * harness/cli.h: the command-line conventions every `kvreplay` subcommand follows.
 *
 * Exit codes (DESIGN.md): 0 success, 1 divergence found (check), 2 bad input
 * or usage (message names the file, line and field), 3 internal or I/O error.
 *
 * Each subcommand is `int hx_cmd_NAME(int argc, char **argv)` with argv[0]
 * the subcommand's name; it returns an exit code (or calls hx_die). Options
 * take "--opt VALUE" or "--opt=VALUE". Every subcommand answers --help.
 */
#ifndef HX_CLI_H
#define HX_CLI_H

#include <stdbool.h>
#include <stdint.h>

#define HX_EXIT_OK       0
#define HX_EXIT_DIVERGED 1
#define HX_EXIT_USAGE    2
#define HX_EXIT_INTERNAL 3

#ifndef KVR_GIT_REV
#define KVR_GIT_REV "unknown"
#endif
#define KVR_VERSION "0.1.0"

/* Prints "kvreplay: MESSAGE" on stderr and exits with code. */
_Noreturn void hx_die(int code, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Option matching. If argv[*i] is "--name" takes argv[*i+1] (advancing *i),
 * if it is "--name=V" takes V; returns NULL when argv[*i] is another option.
 * A missing value is a usage error (exit 2). */
const char *hx_opt(int argc, char **argv, int *i, const char *name);
/* True when argv[i] is exactly the flag. */
bool hx_flag(char **argv, int i, const char *name);
/* True when argv contains --help or -h. */
bool hx_wants_help(int argc, char **argv);

/* Strict number parsing: the whole string, within [lo, hi]; otherwise exit 2
 * with "--flag: expected an integer in [lo, hi], got 'S'". */
int64_t hx_parse_int(const char *flag, const char *s, int64_t lo, int64_t hi);
/* A comma-separated list of at most cap integers in [lo, hi] into out;
 * returns how many. Exits 2 naming the flag on anything else. */
int     hx_parse_int_list(const char *flag, const char *s, int32_t *out, int cap, int32_t lo, int32_t hi);
double  hx_parse_double(const char *flag, const char *s, double lo, double hi);

/* Unknown option or stray argument: exit 2 naming it and the subcommand. */
_Noreturn void hx_bad_arg(const char *cmd, const char *arg);

/* The full command line, space-joined (for runs.argv). Static buffer. */
const char *hx_argv_joined(void);
void        hx_set_argv(int argc, char **argv);

/* Subcommands (harness/cmd_*.c). */
int hx_cmd_model(int argc, char **argv);             /* model synth | model info */
int hx_cmd_tokenize(int argc, char **argv);
int hx_cmd_generate(int argc, char **argv);
int hx_cmd_bench(int argc, char **argv);
int hx_cmd_synth_transcript(int argc, char **argv);
int hx_cmd_import(int argc, char **argv);
int hx_cmd_replay(int argc, char **argv);
int hx_cmd_check(int argc, char **argv);
int hx_cmd_experiment(int argc, char **argv);
int hx_cmd_report(int argc, char **argv);

#endif /* HX_CLI_H */
