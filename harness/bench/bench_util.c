/* harness/bench/bench_util.c: see bench_util.h. */
#include "bench_util.h"

#include <gsl/gsl_rng.h>
#include <gsl/gsl_sort.h>
#include <gsl/gsl_statistics_double.h>

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>

#include "cli.h"

double hx_median(double *v, int n) {
    gsl_sort(v, 1, (size_t)n);
    return gsl_stats_median_from_sorted_data(v, 1, (size_t)n);
}

static gsl_rng *rng(uint64_t seed) {
    gsl_rng *r = gsl_rng_alloc(gsl_rng_mt19937);
    if (!r) hx_die(HX_EXIT_INTERNAL, "bench: out of memory");
    gsl_rng_set(r, (unsigned long)seed);
    return r;
}

void hx_random_tokens(uint64_t seed, int32_t *out, int64_t n, int32_t n_vocab) {
    gsl_rng *r = rng(seed);
    for (int64_t i = 0; i < n; i++) out[i] = (int32_t)gsl_rng_uniform_int(r, (unsigned long)n_vocab);
    gsl_rng_free(r);
}

void hx_random_floats(uint64_t seed, float *out, int64_t n) {
    gsl_rng *r = rng(seed);
    for (int64_t i = 0; i < n; i++) out[i] = (float)gsl_rng_uniform(r) - 0.5f;
    gsl_rng_free(r);
}

void hx_bench_print_json(void *v) {
    json_t *o = v;
    char *txt = json_dumps(o, JSON_INDENT(2) | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(6));
    if (!txt) hx_die(HX_EXIT_INTERNAL, "bench: JSON encoding failed");
    puts(txt);
    free(txt);
    json_decref(o);
}
