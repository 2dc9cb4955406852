/*
 * harness/base/cli.c: option parsing (single options and option tables) and
 * error exits shared by the subcommands, the policies and the importers.
 */
#include "cli.h"

#include "model.h"
#include "status.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

void hx_die(int code, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fputs("kvreplay: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    exit(code);
}

int hx_exit_for_input(int status) {
    return status == ENG_OK ? HX_EXIT_OK : status == ENG_ERR_NOMEM ? HX_EXIT_INTERNAL : HX_EXIT_USAGE;
}

const char *hx_opt(int argc, char **argv, int *i, const char *name) {
    const char *a = argv[*i];
    size_t n = strlen(name);
    if (strncmp(a, name, n) != 0) return NULL;
    if (a[n] == '=') return a + n + 1;
    if (a[n] != '\0') return NULL;
    if (*i + 1 >= argc) hx_die(HX_EXIT_USAGE, "%s: missing value", name);
    *i += 1;
    return argv[*i];
}

bool hx_flag(char **argv, int i, const char *name) { return strcmp(argv[i], name) == 0; }

bool hx_wants_help(int argc, char **argv) {
    for (int i = 1; i < argc; i++)
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) return true;
    return false;
}

int64_t hx_parse_int(const char *flag, const char *s, int64_t lo, int64_t hi) {
    char *end = NULL;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno || end == s || *end != '\0' || v < lo || v > hi)
        hx_die(HX_EXIT_USAGE, "%s: expected an integer in [%lld, %lld], got '%s'", flag,
               (long long)lo, (long long)hi, s);
    return v;
}

int hx_parse_int_list(const char *flag, const char *s, int32_t *out, int cap, int32_t lo, int32_t hi) {
    int n = 0;
    for (const char *p = s; *p;) {
        char *end = NULL;
        errno = 0;
        long long v = strtoll(p, &end, 10);
        if (errno || end == p || v < lo || v > hi || (*end != ',' && *end != '\0') || n == cap)
            hx_die(HX_EXIT_USAGE, "%s: expected at most %d comma-separated integers in [%d, %d], got '%s'", flag,
                   cap, lo, hi, s);
        out[n++] = (int32_t)v;
        p = *end ? end + 1 : end;
    }
    if (n == 0) hx_die(HX_EXIT_USAGE, "%s: empty list", flag);
    return n;
}

double hx_parse_double(const char *flag, const char *s, double lo, double hi) {
    char *end = NULL;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || *end != '\0' || !isfinite(v) || v < lo || v > hi)
        hx_die(HX_EXIT_USAGE, "%s: expected a number in [%g, %g], got '%s'", flag, lo, hi, s);
    return v;
}

// ----------------------------------------------------------------------------
// Option tables

const hx_option *hx_option_find(const hx_option *table, const char *name) {
    for (const hx_option *o = table; o && o->name; o++)
        if (!strcmp(name, o->name) || (o->alias && !strcmp(name, o->alias))) return o;
    return NULL;
}

void hx_option_set(const hx_option *opt, const char *v, void *field) {
    const char *f = opt->name;
    switch (opt->type) {
    case HX_OPT_FLAG:   *(bool *)field = true; break;
    case HX_OPT_INT:    *(int32_t *)field = (int32_t)hx_parse_int(f, v, (int64_t)opt->lo, (int64_t)opt->hi); break;
    case HX_OPT_INT64:  *(int64_t *)field = hx_parse_int(f, v, (int64_t)opt->lo, (int64_t)opt->hi); break;
    case HX_OPT_MIB:    *(int64_t *)field = hx_parse_int(f, v, (int64_t)opt->lo, (int64_t)opt->hi) << 20; break;
    case HX_OPT_DOUBLE: *(double *)field = hx_parse_double(f, v, opt->lo, opt->hi); break;
    case HX_OPT_STRING:
        *(const char **)field = v;
        break;
    case HX_OPT_LIST: {
        hx_int_list *l = field;
        l->n = hx_parse_int_list(f, v, l->v, HX_INT_LIST_MAX, (int32_t)opt->lo, (int32_t)opt->hi);
        break;
    }
    case HX_OPT_STRINGS: {
        hx_str_list *l = field;
        if (l->n == HX_STR_LIST_MAX) hx_die(HX_EXIT_USAGE, "%s: at most %d times", f, HX_STR_LIST_MAX);
        l->v[l->n++] = v;
        break;
    }
    case HX_OPT_CUSTOM: opt->parse(f, v, field); break;
    }
}

bool hx_options_parse(const hx_option *table, void *opts, int argc, char **argv, int *i) {
    for (const hx_option *o = table; o && o->name; o++) {
        void *field = (char *)opts + o->offset;
        if (o->type == HX_OPT_FLAG) {
            if (!hx_flag(argv, *i, o->name) && !(o->alias && hx_flag(argv, *i, o->alias))) continue;
            hx_option_set(o, NULL, field);
            return true;
        }
        const char *v = hx_opt(argc, argv, i, o->name);
        if (!v && o->alias) v = hx_opt(argc, argv, i, o->alias);
        if (!v) continue;
        hx_option_set(o, v, field);
        return true;
    }
    return false;
}

void hx_parse_align(const char *flag, const char *v, void *field) {
    if (eng_align_parse(v, field)) hx_die(HX_EXIT_USAGE, "%s: expected chunk or none, got '%s'", flag, v);
}

void hx_parse_kernel(const char *flag, const char *v, void *field) {
    if (eng_kernel_parse(v, field)) hx_die(HX_EXIT_USAGE, "%s: expected blas or ref, got '%s'", flag, v);
}

void hx_parse_precision(const char *flag, const char *v, void *field) {
    if (eng_precision_parse(v, field)) hx_die(HX_EXIT_USAGE, "%s: expected fp32 or bf16, got '%s'", flag, v);
}

void hx_fput_piece(FILE *f, const char *p, size_t n) {
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)p[i];
        if (c <= 0x20 || c == 0x7F || c == '\\') fprintf(f, "\\x%02X", c);
        else fputc(c, f);
    }
}

void hx_usage(FILE *f, const char *text, const hx_option *table) {
    fputs(text, f);
    hx_options_help(table, NULL, f);
}

void hx_options_help(const hx_option *table, const char *prefix, FILE *f) {
    for (const hx_option *o = table; o && o->name; o++) {
        if (!o->help) continue;
        char left[96];
        snprintf(left, sizeof left, "%s%s%s%s%s", o->alias ? o->alias : "", o->alias ? ", " : "", o->name,
                 o->metavar ? " " : "", o->metavar ? o->metavar : "");
        fprintf(f, "  %-25s %s", left, prefix ? prefix : "");
        for (const char *p = o->help; *p; p++) {
            fputc(*p, f);
            if (*p == '\n') fprintf(f, "%28s", "");
        }
        fputc('\n', f);
    }
}

const hx_command *hx_command_find(const hx_command *table, size_t n, const char *name) {
    for (size_t i = 0; name && i < n; i++)
        if (!strcmp(table[i].name, name)) return &table[i];
    return NULL;
}

void hx_bad_arg(const char *cmd, const char *arg) {
    if (arg[0] == '-')
        hx_die(HX_EXIT_USAGE, "%s: unknown option '%s' (see kvreplay %s --help)", cmd, arg, cmd);
    hx_die(HX_EXIT_USAGE, "%s: unexpected argument '%s' (see kvreplay %s --help)", cmd, arg, cmd);
}

static char g_argv[8192];

void hx_set_argv(int argc, char **argv) {
    size_t off = 0;
    g_argv[0] = '\0';
    for (int i = 0; i < argc && off < sizeof g_argv - 1; i++) {
        int k = snprintf(g_argv + off, sizeof g_argv - off, "%s%s", i ? " " : "", argv[i]);
        if (k < 0) break;
        off += (size_t)k;
    }
}

const char *hx_argv_joined(void) { return g_argv; }
