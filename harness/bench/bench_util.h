/*
 * harness/bench/bench_util.h: what every benchmark needs: medians (GSL) and
 * seeded random inputs (GSL's MT19937), so that two runs with the same
 * seed time the same work.
 */
#ifndef KVR_BENCH_UTIL_H
#define KVR_BENCH_UTIL_H

#include <stdint.h>

/* The median of v[0..n) (n >= 1); sorts v in place. */
double hx_median(double *v, int n);

/* n token ids uniform in [0, n_vocab), from seed. */
void hx_random_tokens(uint64_t seed, int32_t *out, int64_t n, int32_t n_vocab);

/* n floats uniform in [-0.5, 0.5), from seed. */
void hx_random_floats(uint64_t seed, float *out, int64_t n);

/* Prints o (a json_t *) on stdout as indented JSON (reals with 6
 * significant digits) and releases it; exits 3 when it cannot be encoded. */
void hx_bench_print_json(void *o);

#endif
