/*
 * harness/base/options.c: option tables and strict value parsing (see
 * options.h). Every bad value is an ENG_ERR_ARG with a message naming the
 * flag; nothing here exits.
 */
#include "options.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "model.h"
#include "status.h"

// ----------------------------------------------------------------------------
// Values

int hx_parse_i64(const char *flag, const char *s, int64_t lo, int64_t hi, int64_t *out, char *err, size_t errlen) {
    char *end = NULL;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno || end == s || *end != '\0' || v < lo || v > hi) {
        eng_errf(err, errlen, "%s: expected an integer in [%lld, %lld], got '%s'", flag, (long long)lo, (long long)hi,
                 s);
        return ENG_ERR_ARG;
    }
    *out = v;
    return ENG_OK;
}

int hx_parse_f64(const char *flag, const char *s, double lo, double hi, double *out, char *err, size_t errlen) {
    char *end = NULL;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || *end != '\0' || !isfinite(v) || v < lo || v > hi) {
        eng_errf(err, errlen, "%s: expected a number in [%g, %g], got '%s'", flag, lo, hi, s);
        return ENG_ERR_ARG;
    }
    *out = v;
    return ENG_OK;
}

int hx_parse_i32_list(const char *flag, const char *s, int32_t *out, int cap, int32_t lo, int32_t hi, int *n,
                      char *err, size_t errlen) {
    int k = 0;
    for (const char *p = s; *p;) {
        char *end = NULL;
        errno = 0;
        long long v = strtoll(p, &end, 10);
        if (errno || end == p || v < lo || v > hi || (*end != ',' && *end != '\0') || k == cap) {
            eng_errf(err, errlen, "%s: expected at most %d comma-separated integers in [%d, %d], got '%s'", flag, cap,
                     lo, hi, s);
            return ENG_ERR_ARG;
        }
        out[k++] = (int32_t)v;
        p = *end ? end + 1 : end;
    }
    if (k == 0) {
        eng_errf(err, errlen, "%s: empty list", flag);
        return ENG_ERR_ARG;
    }
    *n = k;
    return ENG_OK;
}

int hx_parse_align(const char *flag, const char *v, void *field, char *err, size_t errlen) {
    if (!eng_align_parse(v, field)) return ENG_OK;
    eng_errf(err, errlen, "%s: expected chunk or none, got '%s'", flag, v);
    return ENG_ERR_ARG;
}

int hx_parse_kernel(const char *flag, const char *v, void *field, char *err, size_t errlen) {
    if (!eng_kernel_parse(v, field)) return ENG_OK;
    eng_errf(err, errlen, "%s: expected blas or ref, got '%s'", flag, v);
    return ENG_ERR_ARG;
}

int hx_parse_precision(const char *flag, const char *v, void *field, char *err, size_t errlen) {
    if (!eng_precision_parse(v, field)) return ENG_OK;
    eng_errf(err, errlen, "%s: expected fp32 or bf16, got '%s'", flag, v);
    return ENG_ERR_ARG;
}

int hx_parse_on_off(const char *flag, const char *v, void *field, char *err, size_t errlen) {
    if (strcmp(v, "on") && strcmp(v, "off")) {
        eng_errf(err, errlen, "%s: expected on or off, got '%s'", flag, v);
        return ENG_ERR_ARG;
    }
    *(bool *)field = !strcmp(v, "on");
    return ENG_OK;
}

// ----------------------------------------------------------------------------
// Option tables

const hx_option *hx_option_find(const hx_option *table, const char *name) {
    for (const hx_option *o = table; o && o->name; o++)
        if (!strcmp(name, o->name) || (o->alias && !strcmp(name, o->alias))) return o;
    return NULL;
}

/* A range bound given as a double (INT64_MAX is not exactly representable: (double)INT64_MAX is
 * 2^63, whose conversion back to int64_t would overflow), clamped to int64_t. */
static int64_t bound(double d) {
    if (d >= 9223372036854775807.0) return INT64_MAX;
    if (d <= -9223372036854775808.0) return INT64_MIN;
    return (int64_t)d;
}

int hx_option_set(const hx_option *opt, const char *v, void *field, char *err, size_t errlen) {
    const char *f = opt->name;
    int64_t i = 0;
    int rc = ENG_OK;
    switch (opt->type) {
    case HX_OPT_FLAG:   *(bool *)field = true; break;
    case HX_OPT_INT:
        if (!(rc = hx_parse_i64(f, v, bound(opt->lo), bound(opt->hi), &i, err, errlen))) *(int32_t *)field = (int32_t)i;
        break;
    case HX_OPT_INT64:
        if (!(rc = hx_parse_i64(f, v, bound(opt->lo), bound(opt->hi), &i, err, errlen))) *(int64_t *)field = i;
        break;
    case HX_OPT_MIB:
        if (!(rc = hx_parse_i64(f, v, bound(opt->lo), bound(opt->hi), &i, err, errlen))) *(int64_t *)field = i << 20;
        break;
    case HX_OPT_DOUBLE: rc = hx_parse_f64(f, v, opt->lo, opt->hi, field, err, errlen); break;
    case HX_OPT_STRING: *(const char **)field = v; break;
    case HX_OPT_LIST: {
        hx_int_list *l = field;
        int n = 0;
        if (!(rc = hx_parse_i32_list(f, v, l->v, HX_INT_LIST_MAX, (int32_t)opt->lo, (int32_t)opt->hi, &n, err, errlen)))
            l->n = n;
        break;
    }
    case HX_OPT_STRINGS: {
        hx_str_list *l = field;
        if (l->n == HX_STR_LIST_MAX) {
            eng_errf(err, errlen, "%s: at most %d times", f, HX_STR_LIST_MAX);
            return ENG_ERR_ARG;
        }
        l->v[l->n++] = v;
        break;
    }
    case HX_OPT_CUSTOM: rc = opt->parse(f, v, field, err, errlen); break;
    }
    return rc;
}

const char *hx_option_value(int argc, char **argv, int *i, const char *name, int *rc, char *err, size_t errlen) {
    const char *a = argv[*i];
    size_t n = strlen(name);
    *rc = ENG_OK;
    if (strncmp(a, name, n) != 0) return NULL;
    if (a[n] == '=') return a + n + 1;
    if (a[n] != '\0') return NULL;
    if (*i + 1 >= argc) {
        eng_errf(err, errlen, "%s: missing value", name);
        *rc = ENG_ERR_ARG;
        return NULL;
    }
    *i += 1;
    return argv[*i];
}

int hx_options_take(const hx_option *table, void *opts, int argc, char **argv, int *i, char *err, size_t errlen) {
    for (const hx_option *o = table; o && o->name; o++) {
        void *field = (char *)opts + o->offset;
        if (o->type == HX_OPT_FLAG) {
            if (strcmp(argv[*i], o->name) && !(o->alias && !strcmp(argv[*i], o->alias))) continue;
            return hx_option_set(o, NULL, field, err, errlen) == ENG_OK ? 1 : ENG_ERR_ARG;
        }
        int rc = ENG_OK;
        const char *v = hx_option_value(argc, argv, i, o->name, &rc, err, errlen);
        if (!v && !rc && o->alias) v = hx_option_value(argc, argv, i, o->alias, &rc, err, errlen);
        if (rc) return rc;
        if (!v) continue;
        return hx_option_set(o, v, field, err, errlen) == ENG_OK ? 1 : ENG_ERR_ARG;
    }
    return 0;
}

// ----------------------------------------------------------------------------
// Help

bool hx_wants_help(int argc, char **argv) {
    for (int i = 1; i < argc; i++)
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) return true;
    return false;
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
