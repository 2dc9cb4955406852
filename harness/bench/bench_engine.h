/*
 * harness/bench/bench_engine.h: what the engine benchmarks share: the
 * same-run ceilings (OpenBLAS's sgemm and the machine's FMA peak, sampled
 * between the timed runs so that both see the machine's load the same way),
 * timed prefills (cold, or at a depth) and decode steps, the machine's
 * description. Used by the prefill, contention, depth and memory
 * benchmarks (bench_prefill.c, bench_load.c, bench_depth.c). Nothing here
 * exits: a failure is a status with its message in err (bench_util.h).
 */
#ifndef KVR_BENCH_ENGINE_H
#define KVR_BENCH_ENGINE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "model.h"

/* The ceilings of one run: square sgemms (M = N = K = n, X . W^T like the
 * engine's products, OpenBLAS at `threads` threads, sustained GFLOP/s over
 * >= 0.25 s per sample) and the FMA peak (bench_peak.h, 0.1 s per sample),
 * one sample of each per hx_peak_sample. */
typedef struct hx_peak {
    int32_t     n, threads;
    float      *a, *b, *c;
    double     *sgemm, *fma, *tmp;  /* tmp: the medians' scratch */
    int         n_samples, cap;
    double      best;    /* fastest single sgemm call, GFLOP/s */
    const char *vector;  /* the FMA peak's vector ("avx512", "avx2+fma", ...) */
} hx_peak;

/* ENG_OK, or ENG_ERR_NOMEM (p holds nothing then). hx_peak_free takes a
 * zeroed p too. */
int    hx_peak_init(hx_peak *p, int32_t n, int cap, int threads, char *err, size_t errlen);
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
 * sample before each repetition when pk. GFLOP/s of the cost model.
 * ENG_OK, ENG_ERR_NOMEM, or the engine's failure (hx_bench_failed). */
int hx_measure_prefill(const eng_model *m, const int32_t *toks_depth, int32_t depth, const int32_t *toks, int32_t n,
                       int32_t chunk, int reps, hx_peak *pk, hx_run *out, char *err, size_t errlen);
/* Decode: S single-token steps after an n-token prompt, from the prompt's
 * state each repetition: the median as tokens/s. Statuses as above. */
int hx_measure_decode(const eng_model *m, const int32_t *toks, int32_t n, int32_t steps, int reps, hx_run *out,
                      char *err, size_t errlen);

/* A JSON object (a json_t *) opened with what every engine benchmark
 * records: model, threads, chunk, prompt tokens, repetitions. */
void *hx_bench_json_head(const char *model, int threads, int chunk, int n_tokens, int reps);

/* Loads the model the user named at path with numerics num into *out.
 * ENG_OK; ENG_ERR_NOMEM; any other failure is ENG_ERR_ARG (a path the user
 * named: exit 2), with the engine's message naming the file in err. */
int hx_bench_load(const char *path, const eng_numerics *num, eng_model **out, char *err, size_t errlen);

/* The machine: CPU model name (/proc/cpuinfo), cores this process may use
 * (sched_getaffinity), OpenBLAS's core. */
typedef struct hx_machine {
    char        cpu[128];
    int         cores;
    const char *blas_core;
} hx_machine;
void hx_machine_get(hx_machine *mc);

#endif
