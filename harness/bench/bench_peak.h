/*
 * harness/bench/bench_peak.h: the machine's physical FMA peak, measured: a
 * register-only loop of fused multiply-adds of the widest vector the CPU
 * has (AVX-512, AVX2+FMA, or scalar), per core, run on `threads` threads at
 * once for `seconds`. `kvreplay bench` reports every kernel's ratio to it
 * beside the ratio to the same run's sgemm: OpenBLAS may not know the core
 * (then its sgemm is no ceiling at all), the FMA units are.
 */
#ifndef KVR_BENCH_PEAK_H
#define KVR_BENCH_PEAK_H

/* Sustained GFLOP/s (2 per lane per FMA) of `threads` threads; *vector (may
 * be NULL) names the vector used. NAN if a thread could not start. */
double hx_fma_peak(int threads, double seconds, const char **vector);

#endif
