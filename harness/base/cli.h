/*
 * harness/base/cli.h: the command-line conventions every `kvreplay` subcommand follows.
 *
 * Exit codes (DESIGN.md; the rule in full is docs/exit-codes.md): 0 success,
 * 1 divergence found (check), 2 the command as given cannot work (usage, or
 * a path the user named that is missing, a directory, unreadable, not what
 * the command expects, or an output path that cannot be created; the
 * message names the path, and the line and field for content), 3 the
 * machine or kvreplay failed while working (out of memory, a write failing
 * after the output was created, a thread that cannot start, a bug).
 *
 * Each subcommand is `int hx_cmd_NAME(int argc, char **argv)` with argv[0]
 * the subcommand's name; it returns an exit code (or calls hx_die). Options
 * take "--opt VALUE" or "--opt=VALUE". Every subcommand answers --help.
 */
#ifndef HX_CLI_H
#define HX_CLI_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#define HX_EXIT_OK       0
#define HX_EXIT_DIVERGED 1
#define HX_EXIT_USAGE    2
#define HX_EXIT_INTERNAL 3

/* The most threads any command accepts (OpenBLAS allocates per-thread
 * buffers: a thousand threads can block under a memory limit). */
#define HX_THREADS_MAX 256

/* The exit code for the status of loading an input the user named (a model,
 * a vocabulary, a transcript, a spec): 0 for ENG_OK, 3 for ENG_ERR_NOMEM,
 * 2 for anything else (missing, a directory, unreadable, malformed). */
int hx_exit_for_input(int status);

#define KVR_VERSION "0.1.0"

/* The git revision this binary was built from (12 hex digits, "unknown"
 * outside a checkout). Only harness/base/version.c holds it, rebuilt by the
 * Makefile whenever HEAD moves, so runs.git_rev never goes stale. */
const char *hx_git_rev(void);

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

// ----------------------------------------------------------------------------
// Option tables: how every subcommand, policy and importer declares its options
//
// A table is an array of hx_option ending with {0}; each entry names a field
// of an options struct (offset) and its type, so one parser and one --help
// printer serve every command:
//
//     typedef struct { int32_t reps; bool json; } my_opts;
//     static const hx_option my_table[] = {
//         {"--reps", NULL, "R", "timed repetitions (default 3)", HX_OPT_INT, offsetof(my_opts, reps), 1, 1000},
//         {"--json", NULL, NULL, "one JSON object on stdout", HX_OPT_FLAG, offsetof(my_opts, json)},
//         {0},
//     };
//     my_opts o = {.reps = 3};           (the defaults are the struct's initial values)
//     for (int i = 1; i < argc; i++)
//         if (!hx_options_parse(my_table, &o, argc, argv, &i)) hx_bad_arg("mycmd", argv[i]);

typedef enum hx_opt_type {
    HX_OPT_FLAG,    /* bool: true when present; takes no value */
    HX_OPT_INT,     /* int32_t in [lo, hi] */
    HX_OPT_INT64,   /* int64_t in [lo, hi] */
    HX_OPT_MIB,     /* int64_t bytes: a whole number of MiB in [lo, hi] on the command line */
    HX_OPT_DOUBLE,  /* double in [lo, hi] */
    HX_OPT_STRING,  /* const char *, pointing into argv */
    HX_OPT_LIST,    /* hx_int_list: comma-separated integers in [lo, hi] */
    HX_OPT_STRINGS, /* hx_str_list: repeatable, each occurrence adds one string */
    HX_OPT_CUSTOM,  /* parse(value, field): writes the field, exits 2 naming the flag on a bad value */
} hx_opt_type;

#define HX_INT_LIST_MAX 32
typedef struct hx_int_list {
    int32_t v[HX_INT_LIST_MAX];
    int32_t n;
} hx_int_list;

#define HX_STR_LIST_MAX 64
typedef struct hx_str_list {
    const char *v[HX_STR_LIST_MAX];
    int32_t     n;
} hx_str_list;

typedef struct hx_option {
    const char *name;     /* "--reps" */
    const char *alias;    /* "-m" for "--model", or NULL */
    const char *metavar;  /* "N" in the help; NULL for a flag */
    const char *help;     /* one line, or several separated by '\n' (continuation lines);
                             NULL: accepted but not listed in --help */
    hx_opt_type type;
    size_t      offset;   /* offsetof(the options struct, the field) */
    double      lo, hi;   /* range of a number (HX_OPT_INT .. HX_OPT_DOUBLE) */
    void      (*parse)(const char *flag, const char *value, void *field);  /* HX_OPT_CUSTOM */
} hx_option;

/* If argv[*i] is one of table's options ("--name V", "--name=V", or a flag),
 * stores its value into the field of opts, advances *i past the value and
 * returns true; false when argv[*i] is none of them. A bad value exits 2
 * naming the flag. */
bool hx_options_parse(const hx_option *table, void *opts, int argc, char **argv, int *i);
/* The entry of table named name (or by its alias), or NULL. */
const hx_option *hx_option_find(const hx_option *table, const char *name);
/* Parses value as opt's type into field (the field itself, not the struct):
 * the one place where option values are checked. Exits 2 naming the flag. */
void hx_option_set(const hx_option *opt, const char *value, void *field);
/* HX_OPT_CUSTOM parsers for the engine's settings: an eng_align
 * (chunk|none), eng_kernel (blas|ref), eng_precision (fp32|bf16) field. */
void hx_parse_align(const char *flag, const char *value, void *field);
void hx_parse_kernel(const char *flag, const char *value, void *field);
void hx_parse_precision(const char *flag, const char *value, void *field);
/* The engine settings of a command that loads a model, as rows of its option
 * table over a struct type with an eng_numerics field num and an int32_t
 * field chunk (thread count up to HX_THREADS_MAX). */
#define HX_OPTS_ENGINE(type)                                                                                         \
    {"--threads", NULL, "T", "threads for sgemm, kernels and OpenBLAS (default 1)", HX_OPT_INT,                      \
     offsetof(type, num.n_threads), 1, HX_THREADS_MAX, NULL},                                                        \
    {"--chunk", NULL, "C", "prefill chunk size (default 64)", HX_OPT_INT, offsetof(type, chunk), 1, 1 << 20, NULL},   \
    {"--kernel", NULL, "blas|ref", "(default blas)", HX_OPT_CUSTOM, offsetof(type, num.kernel), 0, 0,                \
     hx_parse_kernel},                                                                                               \
    {"--precision", NULL, "fp32|bf16", "(default fp32)", HX_OPT_CUSTOM, offsetof(type, num.precision), 0, 0,         \
     hx_parse_precision}
/* Writes a token piece to f with whitespace, control bytes, DEL and '\\'
 * as \xNN, so one piece never spans or hides a separator. */
void hx_fput_piece(FILE *f, const char *p, size_t n);
/* --help of a command: text (usage line and description), then table's lines. */
void hx_usage(FILE *f, const char *text, const hx_option *table);
/* Prints table's help lines, "  --name METAVAR   help", to f; prefix (or
 * NULL) starts each entry's help text, e.g. "slot-lcp: ". */
void hx_options_help(const hx_option *table, const char *prefix, FILE *f);

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

/* Unknown option or stray argument: exit 2 naming it and the subcommand. */
_Noreturn void hx_bad_arg(const char *cmd, const char *arg);

/* The full command line, space-joined (for runs.argv). Static buffer. */
const char *hx_argv_joined(void);
void        hx_set_argv(int argc, char **argv);

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
