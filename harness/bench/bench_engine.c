/* harness/bench/bench_engine.c: see bench_engine.h. */
#include "bench_engine.h"

#include <cblas.h>
#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench_peak.h"
#include "bench_util.h"
#include "stats.h"
#include "status.h"
#include "util.h"

#define PEAK_SAMPLE_S 0.25
#define FMA_SAMPLE_S  0.1
#define OPENBLAS_PARK_S 0.3

static void sleep_s(double s) {
    struct timespec t = {.tv_sec = (time_t)s, .tv_nsec = (long)((s - (double)(time_t)s) * 1e9)};
    while (nanosleep(&t, &t) != 0 && errno == EINTR) {}
}

int hx_peak_init(hx_peak *p, int32_t n, int cap, int threads, char *err, size_t errlen) {
    memset(p, 0, sizeof *p);
    p->n = n;
    p->threads = threads;
    p->cap = cap;
    p->a = malloc(sizeof(float) * (size_t)n * (size_t)n);
    p->b = malloc(sizeof(float) * (size_t)n * (size_t)n);
    p->c = calloc((size_t)n * (size_t)n, sizeof(float));
    p->sgemm = malloc(sizeof(double) * (size_t)cap);
    p->fma = malloc(sizeof(double) * (size_t)cap);
    p->tmp = malloc(sizeof(double) * (size_t)cap);
    if (!p->a || !p->b || !p->c || !p->sgemm || !p->fma || !p->tmp || hx_random_floats(1, p->a, (int64_t)n * n) ||
        hx_random_floats(2, p->b, (int64_t)n * n)) {
        hx_peak_free(p);
        eng_errf(err, errlen, "bench: out of memory");
        return ENG_ERR_NOMEM;
    }
    return ENG_OK;
}

void hx_peak_free(hx_peak *p) {
    free(p->a); free(p->b); free(p->c); free(p->sgemm); free(p->fma); free(p->tmp);
    memset(p, 0, sizeof *p);
}

/* One sample of each: sustained GFLOP/s of back-to-back square sgemms over
 * at least PEAK_SAMPLE_S and 3 calls (sustained, not best-of: a prefill
 * lasts seconds, so both see the machine's load the same way; the fastest
 * single call is kept too), then the FMA peak over FMA_SAMPLE_S. OpenBLAS
 * runs its own threads here; the engine sets it back to one per call. */
void hx_peak_sample(hx_peak *p) {
    const int32_t n = p->n;
    const double flops = 2.0 * n * (double)n * n;
    openblas_set_num_threads(p->threads);
    double t_start = eng_now_s(), t_end = t_start;
    int calls = 0;
    while (calls < 3 || t_end - t_start < PEAK_SAMPLE_S) {
        double t0 = eng_now_s();
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, n, n, n, 1.0f, p->a, n, p->b, n, 0.0f, p->c, n);
        t_end = eng_now_s();
        if (flops / (t_end - t0) / 1e9 > p->best) p->best = flops / (t_end - t0) / 1e9;
        calls++;
    }
    openblas_set_num_threads(1);
    /* OpenBLAS's worker threads poll for more work for about 2^28 cycles
     * (its THREAD_TIMEOUT, 0.1 s at 2.5 GHz) after a threaded call before
     * they sleep: one of them on a core would halve the FMA sample and slow
     * the prefill measured next (measured on a 2-core Zen 3: the 2-thread
     * FMA peak read 129 GFLOP/s against 2 x 99.6 at one thread). So wait
     * until they sleep. */
    if (p->threads > 1) sleep_s(OPENBLAS_PARK_S);
    if (p->n_samples < p->cap) {
        p->sgemm[p->n_samples] = flops * calls / (t_end - t_start) / 1e9;
        p->fma[p->n_samples] = hx_fma_peak(p->threads, FMA_SAMPLE_S, &p->vector);
        p->n_samples++;
    }
}

/* The median of v (a copy: the samples keep their order). */
static double median_copy(const double *v, int n, double *tmp) {
    if (n <= 0) return NAN;
    memcpy(tmp, v, sizeof(double) * (size_t)n);
    return hx_median(tmp, n);
}

double hx_peak_sgemm(hx_peak *p) { return median_copy(p->sgemm, p->n_samples, p->tmp); }
double hx_peak_fma(hx_peak *p) { return median_copy(p->fma, p->n_samples, p->tmp); }

bool hx_peak_plausible(double sgemm, double fma) { return !(fma < sgemm); }

void hx_peak_warn(const char *what, double sgemm, double fma) {
    if (hx_peak_plausible(sgemm, fma)) return;
    fprintf(stderr, "%s: warning: FMA peak %.1f GFLOP/s below the sustained sgemm %.1f: the FMA samples were "
            "disturbed (another process on the cores?); ratios to it are not to be trusted\n", what, fma, sgemm);
}

void *hx_bench_json_head(const char *model, int threads, int chunk, int n_tokens, int reps) {
    json_t *o = json_object();
    json_object_set_new(o, "model", json_string(model));
    json_object_set_new(o, "threads", json_integer(threads));
    json_object_set_new(o, "chunk", json_integer(chunk));
    json_object_set_new(o, "n_tokens", json_integer(n_tokens));
    json_object_set_new(o, "reps", json_integer(reps));
    return o;
}

int hx_bench_load(const char *path, const eng_numerics *num, eng_model **out, char *err, size_t errlen) {
    *out = NULL;
    int rc = eng_model_load(path, num, out, err, errlen);
    if (rc == ENG_OK) return ENG_OK;
    if (err && errlen && !err[0]) eng_errf(err, errlen, "%s", eng_status_str(rc));
    return rc == ENG_ERR_NOMEM ? rc : ENG_ERR_ARG;
}

/* A failed engine call rc: "bench: WHAT: <rc>" (or out of memory) in err, and its status. */
static int engine_failed(int rc, const char *what, char *err, size_t errlen) {
    if (rc == ENG_ERR_NOMEM || rc == ENG_OK) {
        eng_errf(err, errlen, "bench: out of memory");
        return ENG_ERR_NOMEM;
    }
    eng_errf(err, errlen, "bench: %s: %s", what, eng_status_str(rc));
    return hx_bench_failed(rc);
}

int hx_measure_prefill(const eng_model *m, const int32_t *toks_depth, int32_t depth, const int32_t *toks, int32_t n,
                       int32_t chunk, int reps, hx_peak *pk, hx_run *out, char *err, size_t errlen) {
    eng_seq *s = eng_seq_new(m, depth + n);
    float *logits = malloc(sizeof(float) * (size_t)eng_model_get_info(m)->n_vocab);
    double *t = malloc(sizeof(double) * (size_t)reps);
    eng_ckpt *ck = NULL;
    int rc = ENG_OK;
    if (!s || !logits || !t) { rc = engine_failed(ENG_ERR_NOMEM, NULL, err, errlen); goto out; }
    eng_prefill_params pp = eng_prefill_params_default();
    pp.chunk = chunk;
    const eng_numerics *num = eng_model_get_numerics(m);
    if (depth > 0) {  /* the context, once: restored (a truncation, plus any recurrent state) before each rep */
        double t0 = eng_now_s();
        if ((rc = eng_prefill(s, toks_depth, depth, &pp, NULL)) != ENG_OK || !(ck = eng_seq_checkpoint(s))) {
            rc = engine_failed(rc, "depth prefill failed", err, errlen);
            goto out;
        }
        if (eng_stderr_is_tty())
            fprintf(stderr, "\rbench: %s depth %d prefilled in %.1f s   ", eng_kernel_name(num->kernel), depth,
                    eng_now_s() - t0);
    }
    for (int r = -1; r < reps; r++) {  /* r == -1: warm-up */
        if (r >= 0 && pk) hx_peak_sample(pk);
        if ((rc = ck ? eng_seq_restore(s, ck) : (eng_seq_reset(s), ENG_OK)) != ENG_OK) {
            rc = engine_failed(rc, "restore", err, errlen);
            goto out;
        }
        double t0 = eng_now_s();
        rc = eng_prefill(s, toks, n, &pp, logits);
        double dt = eng_now_s() - t0;
        if (rc != ENG_OK) { rc = engine_failed(rc, "prefill failed", err, errlen); goto out; }
        if (r >= 0) t[r] = dt;
        if (eng_stderr_is_tty())
            fprintf(stderr, "\rbench: %s C=%d depth %d rep %d/%d: %.3f s   ", eng_kernel_name(num->kernel), chunk, depth,
                    r + 1, reps, dt);
    }
    if (eng_stderr_is_tty()) fprintf(stderr, "\r%70s\r", "");
    memset(out, 0, sizeof *out);
    out->kernel = num->kernel;
    out->threads = num->n_threads;
    out->chunk = chunk;
    out->depth = depth;
    out->seconds = hx_median(t, reps);
    out->tok_s = n / out->seconds;
    out->gflops = eng_model_prefill_flops_params(m, depth, n, &pp) / out->seconds / 1e9;
    out->ratio = out->ratio_fma = NAN;
out:
    eng_ckpt_free(ck);
    free(t);
    free(logits);
    eng_seq_free(s);
    return rc;
}

int hx_measure_decode(const eng_model *m, const int32_t *toks, int32_t n, int32_t steps, int reps, hx_run *out,
                      char *err, size_t errlen) {
    eng_seq *s = eng_seq_new(m, n + steps);
    float *logits = malloc(sizeof(float) * (size_t)eng_model_get_info(m)->n_vocab);
    double *t = malloc(sizeof(double) * (size_t)reps);
    eng_ckpt *ck = NULL;
    int rc = ENG_OK;
    if (!s || !logits || !t) { rc = engine_failed(ENG_ERR_NOMEM, NULL, err, errlen); goto out; }
    if ((rc = eng_prefill(s, toks, n, NULL, logits)) != ENG_OK || !(ck = eng_seq_checkpoint(s))) {
        rc = engine_failed(rc, "prompt prefill failed", err, errlen);
        goto out;
    }
    const eng_numerics *num = eng_model_get_numerics(m);
    for (int r = -1; r < reps; r++) {  /* r == -1: warm-up */
        if ((rc = eng_seq_restore(s, ck)) != ENG_OK) { rc = engine_failed(rc, "restore", err, errlen); goto out; }
        double t0 = eng_now_s();
        for (int32_t k = 0; k < steps && rc == ENG_OK; k++) rc = eng_decode(s, toks[n + k], logits);
        double dt = eng_now_s() - t0;
        if (rc != ENG_OK) { rc = engine_failed(rc, "decode failed", err, errlen); goto out; }
        if (r >= 0) t[r] = dt;
        if (eng_stderr_is_tty())
            fprintf(stderr, "\rbench: %s decode rep %d/%d: %.3f s   ", eng_kernel_name(num->kernel), r + 1, reps, dt);
    }
    if (eng_stderr_is_tty()) fprintf(stderr, "\r%60s\r", "");
    memset(out, 0, sizeof *out);
    out->kernel = num->kernel;
    out->threads = num->n_threads;
    out->chunk = 1;
    out->depth = n;
    out->seconds = hx_median(t, reps);
    out->tok_s = steps / out->seconds;
    out->gflops = out->ratio = out->ratio_fma = NAN;
out:
    eng_ckpt_free(ck);
    free(t);
    free(logits);
    eng_seq_free(s);
    return rc;
}

void hx_machine_get(hx_machine *mc) {
    memset(mc, 0, sizeof *mc);
    snprintf(mc->cpu, sizeof mc->cpu, "unknown CPU");
    FILE *f = fopen("/proc/cpuinfo", "r");
    char line[256];
    while (f && fgets(line, sizeof line, f)) {
        if (strncmp(line, "model name", 10)) continue;
        const char *c = strchr(line, ':');
        if (!c) continue;
        c++;
        while (*c == ' ' || *c == '\t') c++;
        snprintf(mc->cpu, sizeof mc->cpu, "%s", c);
        mc->cpu[strcspn(mc->cpu, "\n")] = '\0';
        break;
    }
    if (f) fclose(f);
    cpu_set_t set;
    mc->cores = sched_getaffinity(0, sizeof set, &set) == 0 ? CPU_COUNT(&set) : 0;
    mc->blas_core = eng_blas_corename();
}
