/*
 * harness/bench/bench_peak.c: the machine's FMA peak (bench_peak.h).
 *
 * Each thread runs a loop of fused multiply-adds on FMA_ACC independent
 * register accumulators of the widest vector the CPU has (AVX-512: 16
 * floats, AVX2+FMA: 8, else scalar fmaf), nothing read from or written to
 * memory inside the loop: what the FMA units deliver, not what a kernel
 * feeds them. 12 chains cover the latency of two FMA pipes (4-5 cycles
 * each) on the x86 cores of this decade. The loop stops after `seconds`
 * (time read every 2^16 iterations); FLOPs = 2 per lane per FMA.
 */
#include "bench_peak.h"

#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define PEAK_X86 1
#else
#define PEAK_X86 0
#endif

#define FMA_ACC 12
#define BATCH   (1 << 16)

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* Each loop returns the number of FMAs per lane it ran; `sink` keeps the
 * accumulators alive. a = a * m + c converges (|m| < 1), so values stay
 * finite and normal. */
#if PEAK_X86
__attribute__((target("avx512f"))) static int64_t loop512(double seconds, float *sink) {
    __m512 a[FMA_ACC];
    const __m512 m = _mm512_set1_ps(0.999999f), c = _mm512_set1_ps(1e-6f);
    for (int i = 0; i < FMA_ACC; i++) a[i] = _mm512_set1_ps((float)i);
    int64_t n = 0;
    const double t0 = now_s();
    do {
        for (int k = 0; k < BATCH; k++)
            _Pragma("GCC unroll 12") for (int i = 0; i < FMA_ACC; i++) a[i] = _mm512_fmadd_ps(a[i], m, c);
        n += BATCH;
    } while (now_s() - t0 < seconds);
    __m512 s = a[0];
    for (int i = 1; i < FMA_ACC; i++) s = _mm512_add_ps(s, a[i]);
    *sink = _mm512_reduce_add_ps(s);
    return n * FMA_ACC;
}

__attribute__((target("avx2,fma"))) static int64_t loop256(double seconds, float *sink) {
    __m256 a[FMA_ACC];
    const __m256 m = _mm256_set1_ps(0.999999f), c = _mm256_set1_ps(1e-6f);
    for (int i = 0; i < FMA_ACC; i++) a[i] = _mm256_set1_ps((float)i);
    int64_t n = 0;
    const double t0 = now_s();
    do {
        for (int k = 0; k < BATCH; k++)
            _Pragma("GCC unroll 12") for (int i = 0; i < FMA_ACC; i++) a[i] = _mm256_fmadd_ps(a[i], m, c);
        n += BATCH;
    } while (now_s() - t0 < seconds);
    __m256 s = a[0];
    for (int i = 1; i < FMA_ACC; i++) s = _mm256_add_ps(s, a[i]);
    float v[8];
    _mm256_storeu_ps(v, s);
    *sink = v[0] + v[7];
    return n * FMA_ACC;
}
#endif

static int64_t loop_scalar(double seconds, float *sink) {
    float a[FMA_ACC];
    for (int i = 0; i < FMA_ACC; i++) a[i] = (float)i;
    int64_t n = 0;
    const double t0 = now_s();
    do {
        for (int k = 0; k < BATCH; k++)
            for (int i = 0; i < FMA_ACC; i++) a[i] = fmaf(a[i], 0.999999f, 1e-6f);
        n += BATCH;
    } while (now_s() - t0 < seconds);
    float s = 0;
    for (int i = 0; i < FMA_ACC; i++) s += a[i];
    *sink = s;
    return n * FMA_ACC;
}

/* The widest vector this CPU runs: lanes, and its name. */
static int widest(const char **name) {
#if PEAK_X86
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f")) { *name = "avx512"; return 16; }
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) { *name = "avx2+fma"; return 8; }
#endif
    *name = "scalar fma";
    return 1;
}

typedef struct peak_thread {
    double  seconds;
    int     lanes;
    int64_t fmas;
    float   sink;
} peak_thread;

static void *peak_run(void *v) {
    peak_thread *t = v;
#if PEAK_X86
    if (t->lanes == 16) { t->fmas = loop512(t->seconds, &t->sink); return NULL; }
    if (t->lanes == 8) { t->fmas = loop256(t->seconds, &t->sink); return NULL; }
#endif
    t->fmas = loop_scalar(t->seconds, &t->sink);
    return NULL;
}

double hx_fma_peak(int threads, double seconds, const char **vector) {
    const char *name;
    const int lanes = widest(&name);
    if (vector) *vector = name;
    if (threads < 1) threads = 1;
    peak_thread *t = calloc((size_t)threads, sizeof *t);
    pthread_t *th = calloc((size_t)threads, sizeof *th);
    if (!t || !th) { free(t); free(th); return NAN; }
    const double t0 = now_s();
    int started = 0;
    for (int i = 0; i < threads; i++) {
        t[i].seconds = seconds;
        t[i].lanes = lanes;
        if (i == 0 || pthread_create(&th[i], NULL, peak_run, &t[i]) == 0) started = i + 1;
        else break;
    }
    peak_run(&t[0]);
    for (int i = 1; i < started; i++) pthread_join(th[i], NULL);
    const double dt = now_s() - t0;
    double flops = 0;
    for (int i = 0; i < started; i++) flops += 2.0 * (double)lanes * (double)t[i].fmas;
    free(t);
    free(th);
    return started == threads ? flops / dt / 1e9 : NAN;
}
