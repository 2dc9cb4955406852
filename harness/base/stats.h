/*
 * harness/base/stats.h: medians (GSL) and seeded random inputs (GSL's
 * MT19937), so that two runs with the same seed time the same work and
 * report the same statistic.
 */
#ifndef HX_STATS_H
#define HX_STATS_H

#include <stdint.h>

/* The median of v[0..n) (n >= 1); sorts v in place. */
double hx_median(double *v, int n);

/* n token ids uniform in [0, n_vocab), from seed. ENG_OK or ENG_ERR_NOMEM. */
int hx_random_tokens(uint64_t seed, int32_t *out, int64_t n, int32_t n_vocab);
/* n floats uniform in [-0.5, 0.5), from seed. ENG_OK or ENG_ERR_NOMEM. */
int hx_random_floats(uint64_t seed, float *out, int64_t n);

#endif /* HX_STATS_H */
