/*
 * harness/bench/bench_util.h: how a benchmark prints its result.
 * (Medians and seeded inputs are base/stats.h.)
 */
#ifndef KVR_BENCH_UTIL_H
#define KVR_BENCH_UTIL_H

#include "stats.h"

/* Prints o (a json_t *) on stdout as indented JSON (reals with 6
 * significant digits) and releases it. ENG_OK, or ENG_ERR_NOMEM when it
 * cannot be encoded. */
int hx_bench_print_json(void *o);

#endif
