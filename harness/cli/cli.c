/*
 * harness/cli/cli.c: exits, and base/options.h's parsers with their errors
 * turned into exit 2 (see cli.h).
 */
#include "cli.h"

#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "status.h"

void hx_die(int code, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fputs("kvreplay: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    exit(code);
}

void hx_check(int rc, const char *err) {
    if (rc != ENG_OK) hx_die(hx_exit_for_status(rc), "%s", err && err[0] ? err : eng_status_str(rc));
}

void hx_bad_arg(const char *cmd, const char *arg) {
    if (arg[0] == '-')
        hx_die(HX_EXIT_USAGE, "%s: unknown option '%s' (see kvreplay %s --help)", cmd, arg, cmd);
    hx_die(HX_EXIT_USAGE, "%s: unexpected argument '%s' (see kvreplay %s --help)", cmd, arg, cmd);
}

const char *hx_opt(int argc, char **argv, int *i, const char *name) {
    char err[256];
    int rc = ENG_OK;
    const char *v = hx_option_value(argc, argv, i, name, &rc, err, sizeof err);
    hx_check(rc, err);
    return v;
}

bool hx_flag(char **argv, int i, const char *name) { return strcmp(argv[i], name) == 0; }

int64_t hx_parse_int(const char *flag, const char *s, int64_t lo, int64_t hi) {
    char err[512];
    int64_t v = 0;
    hx_check(hx_parse_i64(flag, s, lo, hi, &v, err, sizeof err), err);
    return v;
}

int hx_parse_int_list(const char *flag, const char *s, int32_t *out, int cap, int32_t lo, int32_t hi) {
    char err[512];
    int n = 0;
    hx_check(hx_parse_i32_list(flag, s, out, cap, lo, hi, &n, err, sizeof err), err);
    return n;
}

double hx_parse_double(const char *flag, const char *s, double lo, double hi) {
    char err[512];
    double v = 0;
    hx_check(hx_parse_f64(flag, s, lo, hi, &v, err, sizeof err), err);
    return v;
}

bool hx_took(int r, const char *err) {
    if (r < 0) hx_check(r, err);
    return r == 1;
}

bool hx_options_parse(const hx_option *table, void *opts, int argc, char **argv, int *i) {
    char err[512];
    int r = hx_options_take(table, opts, argc, argv, i, err, sizeof err);
    if (r < 0) hx_check(r, err);
    return r == 1;
}

void hx_fput_piece(FILE *f, const char *p, size_t n) {
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)p[i];
        if (c <= 0x20 || c == 0x7F || c == '\\') fprintf(f, "\\x%02X", c);
        else fputc(c, f);
    }
}

const hx_command *hx_command_find(const hx_command *table, size_t n, const char *name) {
    for (size_t i = 0; name && i < n; i++)
        if (!strcmp(table[i].name, name)) return &table[i];
    return NULL;
}
