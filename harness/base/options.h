/*
 * harness/base/options.h: option tables: how every subcommand, policy,
 * importer and benchmark declares its options, so that one parser and one
 * --help printer serve them all.
 *
 * A table is an array of hx_option ending with {0}; each entry names a field
 * of an options struct (offset) and its type. Parsing never exits: a bad
 * value is an error with a message naming the flag, and the caller decides
 * (harness/cli/ exits 2):
 *
 *     typedef struct { int32_t reps; bool json; } my_opts;
 *     static const hx_option my_table[] = {
 *         {"--reps", NULL, "R", "timed repetitions (default 3)", HX_OPT_INT, offsetof(my_opts, reps), 1, 1000},
 *         {"--json", NULL, NULL, "one JSON object on stdout", HX_OPT_FLAG, offsetof(my_opts, json)},
 *         {0},
 *     };
 *     my_opts o = {.reps = 3};           (the defaults are the struct's initial values)
 *     int r = hx_options_take(my_table, &o, argc, argv, &i, err, sizeof err);
 *     (1: taken, 0: not one of these options, < 0: a bad value, err says)
 */
#ifndef HX_OPTIONS_H
#define HX_OPTIONS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/* The most threads any command accepts (OpenBLAS allocates per-thread
 * buffers: a thousand threads can block under a memory limit). */
#define HX_THREADS_MAX 256

typedef enum hx_opt_type {
    HX_OPT_FLAG,    /* bool: true when present; takes no value */
    HX_OPT_INT,     /* int32_t in [lo, hi] */
    HX_OPT_INT64,   /* int64_t in [lo, hi] */
    HX_OPT_MIB,     /* int64_t bytes: a whole number of MiB in [lo, hi] on the command line */
    HX_OPT_DOUBLE,  /* double in [lo, hi] */
    HX_OPT_STRING,  /* const char *, pointing into argv */
    HX_OPT_LIST,    /* hx_int_list: comma-separated integers in [lo, hi] */
    HX_OPT_STRINGS, /* hx_str_list: repeatable, each occurrence adds one string */
    HX_OPT_CUSTOM,  /* parse(value, field): writes the field, or returns an error naming the flag */
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

/* A custom value parser: ENG_OK, or ENG_ERR_ARG with "FLAG: expected ..., got 'V'" in err. */
typedef int (*hx_opt_parser)(const char *flag, const char *value, void *field, char *err, size_t errlen);

typedef struct hx_option {
    const char *name;     /* "--reps" */
    const char *alias;    /* "-m" for "--model", or NULL */
    const char *metavar;  /* "N" in the help; NULL for a flag */
    const char *help;     /* one line, or several separated by '\n' (continuation lines);
                             NULL: accepted but not listed in --help */
    hx_opt_type type;
    size_t      offset;   /* offsetof(the options struct, the field) */
    double      lo, hi;   /* range of a number (HX_OPT_INT .. HX_OPT_DOUBLE) */
    hx_opt_parser parse;  /* HX_OPT_CUSTOM */
} hx_option;

/* Tries argv[*i] against table: "--name V", "--name=V" or a flag. 1 when it
 * is one of table's options (its value stored into the field of opts, *i
 * advanced past the value); 0 when it is none of them; ENG_ERR_ARG with err
 * naming the flag for a bad or missing value. */
int  hx_options_take(const hx_option *table, void *opts, int argc, char **argv, int *i, char *err, size_t errlen);
/* The entry of table named name (or by its alias), or NULL. */
const hx_option *hx_option_find(const hx_option *table, const char *name);
/* Parses value as opt's type into field (the field itself, not the struct):
 * the one place where option values are checked. ENG_OK or ENG_ERR_ARG. */
int  hx_option_set(const hx_option *opt, const char *value, void *field, char *err, size_t errlen);
/* The value of option name at argv[*i] ("--name V" advancing *i, or
 * "--name=V"); NULL when argv[*i] is another option. A missing value is
 * ENG_ERR_ARG in *rc (else ENG_OK) with err naming the option. */
const char *hx_option_value(int argc, char **argv, int *i, const char *name, int *rc, char *err, size_t errlen);

/* Strict number parsing: the whole string, within [lo, hi], else ENG_ERR_ARG
 * with "FLAG: expected an integer in [lo, hi], got 'S'". */
int hx_parse_i64(const char *flag, const char *s, int64_t lo, int64_t hi, int64_t *out, char *err, size_t errlen);
int hx_parse_f64(const char *flag, const char *s, double lo, double hi, double *out, char *err, size_t errlen);
/* A comma-separated list of at most cap integers in [lo, hi] into out, *n their count. */
int hx_parse_i32_list(const char *flag, const char *s, int32_t *out, int cap, int32_t lo, int32_t hi, int *n,
                      char *err, size_t errlen);

/* HX_OPT_CUSTOM parsers for the engine's settings: an eng_align (chunk|none),
 * eng_kernel (blas|ref), eng_precision (fp32|bf16) field, and a bool given
 * as on|off. */
int hx_parse_align(const char *flag, const char *value, void *field, char *err, size_t errlen);
int hx_parse_kernel(const char *flag, const char *value, void *field, char *err, size_t errlen);
int hx_parse_precision(const char *flag, const char *value, void *field, char *err, size_t errlen);
int hx_parse_on_off(const char *flag, const char *value, void *field, char *err, size_t errlen);

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

/* --help of a command: text (usage line and description), then table's lines. */
void hx_usage(FILE *f, const char *text, const hx_option *table);
/* Prints table's help lines, "  --name METAVAR   help", to f; prefix (or
 * NULL) starts each entry's help text, e.g. "slot-lcp: ". */
void hx_options_help(const hx_option *table, const char *prefix, FILE *f);
/* True when argv contains --help or -h. */
bool hx_wants_help(int argc, char **argv);

#endif /* HX_OPTIONS_H */
