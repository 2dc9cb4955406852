/*
 * harness/cli/cli.h: the command line's conventions, the one place that
 * exits the process (base/errors.h gives the codes).
 *
 * Each subcommand is `int hx_cmd_NAME(int argc, char **argv)` with argv[0]
 * the subcommand's name; it returns an exit code or exits through hx_die.
 * Options take "--opt VALUE" or "--opt=VALUE"; every subcommand answers
 * --help. The helpers below are base/options.h's parsers with the error
 * turned into exit 2 naming the flag.
 */
#ifndef HX_CLI_H
#define HX_CLI_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "errors.h"
#include "options.h"
#include "version.h"

/* Prints "kvreplay: MESSAGE" on stderr and exits with code. */
_Noreturn void hx_die(int code, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Unknown option or stray argument: exit 2 naming it and the subcommand. */
_Noreturn void hx_bad_arg(const char *cmd, const char *arg);

/* Option matching. If argv[*i] is "--name" takes argv[*i+1] (advancing *i),
 * if it is "--name=V" takes V; NULL when argv[*i] is another option. A
 * missing value exits 2. */
const char *hx_opt(int argc, char **argv, int *i, const char *name);
/* True when argv[i] is exactly the flag. */
bool hx_flag(char **argv, int i, const char *name);

/* Strict number parsing (base/options.h), exiting 2 naming the flag. */
int64_t hx_parse_int(const char *flag, const char *s, int64_t lo, int64_t hi);
int     hx_parse_int_list(const char *flag, const char *s, int32_t *out, int cap, int32_t lo, int32_t hi);
double  hx_parse_double(const char *flag, const char *s, double lo, double hi);
/* hx_options_take, exiting 2 on a bad value: true when argv[*i] was taken. */
bool    hx_options_parse(const hx_option *table, void *opts, int argc, char **argv, int *i);
/* A parse that returned a status: exits with hx_exit_for_status(rc) and err unless rc is ENG_OK. */
void    hx_check(int rc, const char *err);
/* The result r of a *_take function (1 taken, 0 not its option, < 0 a bad
 * value): exits 2 with err when r < 0, else returns r == 1. */
bool    hx_took(int r, const char *err);

/* Writes a token piece to f with whitespace, control bytes, DEL and '\\'
 * as \xNN, so one piece never spans or hides a separator. */
void hx_fput_piece(FILE *f, const char *p, size_t n);

/* A subcommand: name, entry point (argv[0] is the name), one-line help or arguments. */
typedef struct hx_command {
    const char *name;
    int       (*fn)(int argc, char **argv);
    const char *help;
} hx_command;
/* For a table written as an X-macro list of X(NAME, function, HELP) lines:
 * LIST(HX_COMMAND_DECLARE) declares the functions, {LIST(HX_COMMAND_ENTRY)}
 * initializes the hx_command array (cli/main.c, cli/cmd_model.c). */
#define HX_COMMAND_DECLARE(name, fn, help) int fn(int argc, char **argv);
#define HX_COMMAND_ENTRY(name, fn, help) {name, fn, help},
/* The entry of table (n entries) named name, or NULL. */
const hx_command *hx_command_find(const hx_command *table, size_t n, const char *name);

/* Subcommands (cli/cmd_*.c), listed in main.c's table (which declares its own;
 * these are for the commands and tests that call one directly). */
int hx_cmd_model(int argc, char **argv);             /* model synth | model info */
int hx_cmd_tokenize(int argc, char **argv);
int hx_cmd_logits(int argc, char **argv);
int hx_cmd_generate(int argc, char **argv);
int hx_cmd_bench(int argc, char **argv);
int hx_cmd_synth_transcript(int argc, char **argv);
int hx_cmd_import(int argc, char **argv);
int hx_cmd_replay(int argc, char **argv);
int hx_cmd_check(int argc, char **argv);
int hx_cmd_experiment(int argc, char **argv);
int hx_cmd_report(int argc, char **argv);
int hx_cmd_serve(int argc, char **argv);

#endif /* HX_CLI_H */
