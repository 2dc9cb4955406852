/* harness/base/stats.c: medians and seeded inputs (see stats.h). */
#include "stats.h"

#include <gsl/gsl_rng.h>
#include <gsl/gsl_sort.h>
#include <gsl/gsl_statistics_double.h>

#include "status.h"

double hx_median(double *v, int n) {
    gsl_sort(v, 1, (size_t)n);
    return gsl_stats_median_from_sorted_data(v, 1, (size_t)n);
}

static gsl_rng *rng(uint64_t seed) {
    gsl_rng *r = gsl_rng_alloc(gsl_rng_mt19937);
    if (r) gsl_rng_set(r, (unsigned long)seed);
    return r;
}

int hx_random_tokens(uint64_t seed, int32_t *out, int64_t n, int32_t n_vocab) {
    gsl_rng *r = rng(seed);
    if (!r) return ENG_ERR_NOMEM;
    for (int64_t i = 0; i < n; i++) out[i] = (int32_t)gsl_rng_uniform_int(r, (unsigned long)n_vocab);
    gsl_rng_free(r);
    return ENG_OK;
}

int hx_random_floats(uint64_t seed, float *out, int64_t n) {
    gsl_rng *r = rng(seed);
    if (!r) return ENG_ERR_NOMEM;
    for (int64_t i = 0; i < n; i++) out[i] = (float)gsl_rng_uniform(r) - 0.5f;
    gsl_rng_free(r);
    return ENG_OK;
}
