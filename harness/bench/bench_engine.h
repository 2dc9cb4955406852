/*
 * harness/bench/bench_engine.h: what the engine benchmarks share: the
 * same-run ceilings (OpenBLAS's sgemm and the machine's FMA peak, sampled
 * between the timed runs so that both see the machine's load the same way),
 * timed prefills (cold, or at a depth) and decode steps, the machine's
 * description. Used by `kvreplay bench` (cmd_bench.c) and the contention,
 * depth and memory benchmarks (bench_load.c, bench_depth.c).
 */
#ifndef KVR_BENCH_ENGINE_H
#define KVR_BENCH_ENGINE_H

#include <stdbool.h>
#include <stdint.h>

#include "model.h"

/* The ceilings of one run: square sgemms (M = N = K = n, X . W^T like the
 * engine's products, OpenBLAS at `threads` threads, sustained GFLOP/s over
 * >= 0.25 s per sample) and the FMA peak (bench_peak.h, 0.1 s per sample),
 * one sample of each per hx_peak_sample. */
typedef struct hx_peak {
    int32_t     n, threads;
    float      *a, *b, *c;
    double     *sgemm, *fma;
    int         n_samples, cap;
    double      best;    /* fastest single sgemm call, GFLOP/s */
    const char *vector;  /* the FMA peak's vector ("avx512", "avx2+fma", ...) */
} hx_peak;

void   hx_peak_init(hx_peak *p, int32_t n, int cap, int threads);
void   hx_peak_free(hx_peak *p);
void   hx_peak_sample(hx_peak *p);
double hx_peak_sgemm(hx_peak *p);  /* median of the samples */
double hx_peak_fma(hx_peak *p);
/* False when the FMA peak is below the sustained sgemm: the machine's
 * limit cannot be, so its samples were disturbed (NAN: nothing to say,
 * true). hx_peak_warn says so on stderr, prefixed `what`. */
bool   hx_peak_plausible(double sgemm, double fma);
void   hx_peak_warn(const char *what, double sgemm, double fma);

/* One measurement: medians of timed repetitions. */
typedef struct hx_run {
    eng_kernel kernel;
    int32_t    chunk, threads, depth;
    double     seconds, tok_s, gflops;
    double     ratio, ratio_fma;  /* gflops over the sgemm and FMA peaks (set by the caller) */
} hx_run;

/* R timed prefills (after one untimed warm-up) of toks[0, n) at chunk C, on
 * top of `depth` tokens toks_depth[0, depth) prefilled once before
 * (untimed; the state is restored to them before each repetition), a peak
 * sample before each repetition when pk. GFLOP/s of the cost model. */
void hx_measure_prefill(const eng_model *m, const int32_t *toks_depth, int32_t depth, const int32_t *toks, int32_t n,
                        int32_t chunk, int reps, hx_peak *pk, hx_run *out);
/* Decode: S single-token steps after an n-token prompt, from the prompt's
 * state each repetition: the median as tokens/s. */
void hx_measure_decode(const eng_model *m, const int32_t *toks, int32_t n, int32_t steps, int reps, hx_run *out);

/* A JSON object (a json_t *) opened with what every engine benchmark
 * records: model, threads, chunk, prompt tokens, repetitions. */
void *hx_bench_json_head(const char *model, int threads, int chunk, int n_tokens, int reps);

/* Loads `path` with numerics num (exits 2/3 on failure, naming the file). */
eng_model *hx_bench_load(const char *path, const eng_numerics *num);

/* The machine: CPU model name (/proc/cpuinfo), cores this process may use
 * (sched_getaffinity), OpenBLAS's core. */
typedef struct hx_machine {
    char        cpu[128];
    int         cores;
    const char *blas_core;
} hx_machine;
void hx_machine_get(hx_machine *mc);

#endif
