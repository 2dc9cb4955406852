/*
 * harness/bench/bench_prefill.c: `kvreplay bench -m M`, the benchmark run
 * when no other is named: engine prefill throughput against the machine's
 * sgemm peak, measured in the same run at the same thread count.
 *
 *   peak:    square sgemms (M = N = K = --peak-size, default 1024, X . W^T
 *            like the engine's products), sampled before every timed
 *            prefill (sustained GFLOP/s over >= 0.25 s per sample): the
 *            median sample.
 *   prefill: median time of R cold prefills of N seeded random tokens at
 *            chunk C (after one untimed warm-up), as tokens/s and as GFLOP/s
 *            of the engine's cost model (eng_model_prefill_flops_params).
 *   ratio:   prefill GFLOP/s / peak GFLOP/s.
 * --sweep-chunks measures several C in one run; --compare-kernels measures
 * ref and blas side by side, interleaved, and prints per C the ref/blas
 * ratio and each kernel's ratio to the peak.
 *   decode:  with --decode, instead of prefill: after a prompt of N tokens,
 *            S single-token decode steps (eng_decode, M = 1: what the
 *            teacher-forced responses and greedy decoding run), restored
 *            to the prompt before each of R timed repetitions (after a
 *            warm-up): the median, as tokens/s.
 *   ceilings: beside the sgemm peak, the machine's FMA peak (a
 *            register-only FMA loop of the widest vector, bench_peak.h),
 *            sampled at the same times; every ratio is given to both.
 * Its --help is `kvreplay bench --help`: every benchmark's usage line, then
 * its own options.
 */
#include <jansson.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"
#include "bench_engine.h"
#include "bench_util.h"
#include "model.h"
#include "options.h"
#include "stats.h"
#include "status.h"
#include "util.h"

#define MAX_CHUNKS HX_INT_LIST_MAX

static const char k_usage[] =
    "usage: kvreplay bench -m MODEL.gguf [OPTIONS]\n"
    "       kvreplay bench --tokenizer ...    (tokenizer throughput; see --tokenizer --help)\n"
    "       kvreplay bench --disk-cache ...   (disk checkpoint files; see --disk-cache --help)\n"
    "       kvreplay bench --checkpoints ...  (context checkpoints vs memcpy; see --checkpoints --help)\n"
    "       kvreplay bench --serve ...        (serve's TTFT over the in-process TTFT; see --serve --help)\n"
    "       kvreplay bench --contention ...   (prefill quiet and beside busy competitors; --contention --help)\n"
    "       kvreplay bench --depth LIST ...   (prefill at a depth of context; --depth 1 --help)\n"
    "       kvreplay bench --memory ...       (KV, state and peak RSS of a prefill; --memory --help)\n"
    "       kvreplay bench --batch B ...      (B sequences batched against one by one; --batch 1 --help)\n"
    "       kvreplay bench --serve --clients K ...  (K concurrent clients; see --serve --help)\n"
    "       kvreplay bench --table DIR        (the issue targets' table from a make bench run)\n"
    "\n"
    "Prefill tokens/s and GFLOP/s (cost model) against the sgemm peak measured in the same run;\n"
    "with --decode, single-token decode tokens/s after a prompt of --tokens.\n"
    "\n";

typedef struct bench_args {
    const char  *model;
    eng_numerics num;
    int32_t      chunk, n_tok, reps, peak_n, decode_steps;
    int64_t      seed;
    hx_int_list  chunks;
    bool         compare, json, decode;
} bench_args;

#define OPT(field) offsetof(bench_args, field)
static const hx_option k_options[] = {
    {"--model", "-m", "FILE", "GGUF model (required)", HX_OPT_STRING, OPT(model), 0, 0, NULL},
    HX_OPTS_ENGINE(bench_args),
    {"--tokens", NULL, "N", "prompt tokens per prefill (default 1024)", HX_OPT_INT, OPT(n_tok), 1, 1 << 22, NULL},
    {"--reps", NULL, "R", "timed repetitions, medians reported (default 3)", HX_OPT_INT, OPT(reps), 1, 1000, NULL},
    {"--peak-size", NULL, "S", "square sgemm size for the peak (default 1024)", HX_OPT_INT, OPT(peak_n), 16, 8192,
     NULL},
    {"--seed", NULL, "S", "prompt token seed (default 0)", HX_OPT_INT64, OPT(seed), 0, INT64_MAX, NULL},
    {"--sweep-chunks", NULL, "LIST", "comma-separated chunk sizes, e.g. 16,32,64,128,256", HX_OPT_LIST, OPT(chunks),
     1, 1 << 20, NULL},
    {"--compare-kernels", NULL, NULL, "measure ref and blas side by side", HX_OPT_FLAG, OPT(compare), 0, 0, NULL},
    {"--decode", NULL, NULL, "measure single-token decode after a prompt of --tokens instead of prefill",
     HX_OPT_FLAG, OPT(decode), 0, 0, NULL},
    {"--decode-steps", NULL, "S", "decode steps per timed repetition (default 64)", HX_OPT_INT, OPT(decode_steps), 1,
     1 << 20, NULL},
    {"--json", NULL, NULL, "one JSON object on stdout", HX_OPT_FLAG, OPT(json), 0, 0, NULL},
    {0},
};

typedef struct bench_ctx {
    const bench_args *a;
    eng_model        *models[2];  /* ref first with --compare-kernels */
    int               n_kernels;
    const int32_t    *toks;
    hx_machine        mc;
} bench_ctx;

static int run_decode(const bench_ctx *c, char *err, size_t errlen) {
    const bench_args *a = c->a;
    const eng_model_info *in = eng_model_get_info(c->models[0]);
    hx_run dr[2];
    for (int k = 0; k < c->n_kernels; k++) {
        int rc = hx_measure_decode(c->models[k], c->toks, a->n_tok, a->decode_steps, a->reps, &dr[k], err, errlen);
        if (rc) return rc;
    }
    if (a->json) {
        json_t *o = json_object(), *arr = json_array();
        json_object_set_new(o, "model", json_string(a->model));
        json_object_set_new(o, "model_sha256", json_string(in->sha256));
        json_object_set_new(o, "threads", json_integer(a->num.n_threads));
        json_object_set_new(o, "precision", json_string(eng_precision_name(a->num.precision)));
        json_object_set_new(o, "n_prompt", json_integer(a->n_tok));
        json_object_set_new(o, "decode_steps", json_integer(a->decode_steps));
        json_object_set_new(o, "reps", json_integer(a->reps));
        json_object_set_new(o, "blas_core", json_string(c->mc.blas_core));
        json_object_set_new(o, "kernel", json_string(eng_kernel_name(dr[0].kernel)));
        json_object_set_new(o, "decode_tok_s", json_real(dr[0].tok_s));
        for (int k = 0; k < c->n_kernels; k++) {
            json_t *e = json_object();
            json_object_set_new(e, "kernel", json_string(eng_kernel_name(dr[k].kernel)));
            json_object_set_new(e, "decode_s", json_real(dr[k].seconds));
            json_object_set_new(e, "decode_tok_s", json_real(dr[k].tok_s));
            json_array_append_new(arr, e);
        }
        json_object_set_new(o, "runs", arr);
        if (hx_bench_print_json(o)) return eng_errf(err, errlen, "bench: out of memory"), ENG_ERR_NOMEM;
    } else {
        printf("model %s: D %d, L %d, V %d; decode %d steps after a %d-token prompt, %d threads, %s, median of "
               "%d; ref kernel path %s; OpenBLAS core %s\n", a->model, in->n_embd, in->n_layer, in->n_vocab,
               a->decode_steps, a->n_tok, a->num.n_threads, eng_precision_name(a->num.precision), a->reps,
               eng_model_ref_path(c->models[0]), c->mc.blas_core);
        printf("%-6s %10s %12s\n", "kernel", "decode_s", "tok/s");
        for (int k = 0; k < c->n_kernels; k++)
            printf("%-6s %10.4f %12.1f\n", eng_kernel_name(dr[k].kernel), dr[k].seconds, dr[k].tok_s);
        if (c->n_kernels == 2) printf("ref/blas: %.3f\n", dr[0].tok_s / dr[1].tok_s);
    }
    return ENG_OK;
}

static int print_prefill(const bench_ctx *c, const hx_peak *pk, double peak, double fma, const hx_run *runs,
                         int n_runs, char *err, size_t errlen) {
    const bench_args *a = c->a;
    const eng_model_info *in = eng_model_get_info(c->models[0]);
    if (a->json) {
        json_t *o = json_object();
        json_object_set_new(o, "model", json_string(a->model));
        json_object_set_new(o, "model_sha256", json_string(in->sha256));
        json_object_set_new(o, "threads", json_integer(a->num.n_threads));
        json_object_set_new(o, "precision", json_string(eng_precision_name(a->num.precision)));
        json_object_set_new(o, "n_tokens", json_integer(a->n_tok));
        json_object_set_new(o, "reps", json_integer(a->reps));
        json_object_set_new(o, "peak_size", json_integer(a->peak_n));
        json_object_set_new(o, "peak_gflops", json_real(peak));
        json_object_set_new(o, "peak_samples", json_integer(pk->n_samples));
        json_object_set_new(o, "peak_best_gflops", json_real(pk->best));
        json_object_set_new(o, "fma_peak_gflops", json_real(fma));
        json_object_set_new(o, "fma_vector", json_string(pk->vector ? pk->vector : ""));
        json_object_set_new(o, "blas", json_string(eng_blas_info()));
        json_object_set_new(o, "blas_core", json_string(c->mc.blas_core));
        json_object_set_new(o, "cpu", json_string(c->mc.cpu));
        json_object_set_new(o, "cores", json_integer(c->mc.cores));
        json_object_set_new(o, "ref_path", json_string(eng_model_ref_path(c->models[0])));
        /* Top level: the first run (the only one without a sweep or comparison). */
        json_object_set_new(o, "chunk", json_integer(runs[0].chunk));
        json_object_set_new(o, "kernel", json_string(eng_kernel_name(runs[0].kernel)));
        json_object_set_new(o, "prefill_s", json_real(runs[0].seconds));
        json_object_set_new(o, "prefill_tok_s", json_real(runs[0].tok_s));
        json_object_set_new(o, "gflops", json_real(runs[0].gflops));
        json_object_set_new(o, "ratio", json_real(runs[0].ratio));
        json_object_set_new(o, "ratio_fma", json_real(runs[0].ratio_fma));
        json_t *arr = json_array();
        for (int r = 0; r < n_runs; r++) {
            json_t *e = json_object();
            json_object_set_new(e, "chunk", json_integer(runs[r].chunk));
            json_object_set_new(e, "kernel", json_string(eng_kernel_name(runs[r].kernel)));
            json_object_set_new(e, "prefill_s", json_real(runs[r].seconds));
            json_object_set_new(e, "prefill_tok_s", json_real(runs[r].tok_s));
            json_object_set_new(e, "gflops", json_real(runs[r].gflops));
            json_object_set_new(e, "ratio", json_real(runs[r].ratio));
            json_object_set_new(e, "ratio_fma", json_real(runs[r].ratio_fma));
            if (a->compare && runs[r].kernel == ENG_KERNEL_REF && r + 1 < n_runs)
                json_object_set_new(e, "ref_over_blas", json_real(runs[r].gflops / runs[r + 1].gflops));
            json_array_append_new(arr, e);
        }
        json_object_set_new(o, "runs", arr);
        if (hx_bench_print_json(o)) return eng_errf(err, errlen, "bench: out of memory"), ENG_ERR_NOMEM;
        return ENG_OK;
    }
    printf("model %s: D %d, L %d, H %d, G %d, F %d, V %d; %d tokens, %d threads, %s, median of %d\n", a->model,
           in->n_embd, in->n_layer, in->n_head, in->n_head_kv, in->n_ff, in->n_vocab, a->n_tok, a->num.n_threads,
           eng_precision_name(a->num.precision), a->reps);
    printf("machine: %s, %d cores; OpenBLAS core %s; ref kernel path %s\n", c->mc.cpu, c->mc.cores, c->mc.blas_core,
           eng_model_ref_path(c->models[0]));
    printf("sgemm peak (%d^3, sustained, median of %d samples taken between the prefills): %.1f GFLOP/s "
           "(fastest call %.1f)\n", a->peak_n, pk->n_samples, peak, pk->best);
    printf("FMA peak (register-only %s FMA loop, %d threads, median of %d samples, same times): %.1f GFLOP/s\n",
           pk->vector ? pk->vector : "?", a->num.n_threads, pk->n_samples, fma);
    printf("%-6s %6s %10s %12s %10s %7s %7s\n", "kernel", "chunk", "prefill_s", "tok/s", "GFLOP/s", "/sgemm", "/fma");
    for (int r = 0; r < n_runs; r++)
        printf("%-6s %6d %10.4f %12.1f %10.2f %7.3f %7.3f\n", eng_kernel_name(runs[r].kernel), runs[r].chunk,
               runs[r].seconds, runs[r].tok_s, runs[r].gflops, runs[r].ratio, runs[r].ratio_fma);
    if (a->compare) {
        printf("\nside by side (ratios of medians from this run):\n");
        printf("%6s %12s %12s %9s %11s %11s %9s %9s\n", "chunk", "blas GFLOP/s", "ref GFLOP/s", "ref/blas",
               "blas/sgemm", "ref/sgemm", "blas/fma", "ref/fma");
        for (int r = 0; r + 1 < n_runs; r += 2)  /* ref, then blas, per chunk */
            printf("%6d %12.2f %12.2f %9.3f %11.3f %11.3f %9.3f %9.3f\n", runs[r].chunk, runs[r + 1].gflops,
                   runs[r].gflops, runs[r].gflops / runs[r + 1].gflops, runs[r + 1].ratio, runs[r].ratio,
                   runs[r + 1].ratio_fma, runs[r].ratio_fma);
    }
    return ENG_OK;
}

static int run_prefill(const bench_ctx *c, char *err, size_t errlen) {
    const bench_args *a = c->a;
    hx_peak pk;
    int rc = hx_peak_init(&pk, a->peak_n, a->chunks.n * c->n_kernels * a->reps, a->num.n_threads, err, errlen);
    if (rc) return rc;
    hx_run runs[2 * MAX_CHUNKS];
    int n_runs = 0;
    for (int ci = 0; ci < a->chunks.n && !rc; ci++)
        for (int k = 0; k < c->n_kernels && !rc; k++)
            rc = hx_measure_prefill(c->models[k], NULL, 0, c->toks, a->n_tok, a->chunks.v[ci], a->reps, &pk,
                                    &runs[n_runs++], err, errlen);
    if (!rc) {
        const double peak = hx_peak_sgemm(&pk), fma = hx_peak_fma(&pk);
        hx_peak_warn("bench", peak, fma);
        for (int r = 0; r < n_runs; r++) {
            runs[r].ratio = runs[r].gflops / peak;
            runs[r].ratio_fma = runs[r].gflops / fma;
        }
        rc = print_prefill(c, &pk, peak, fma, runs, n_runs, err, errlen);
    }
    hx_peak_free(&pk);
    return rc;
}

int hx_bench_prefill(int argc, char **argv, char *err, size_t errlen) {
    if (hx_wants_help(argc, argv)) { hx_usage(stdout, k_usage, k_options); return ENG_OK; }
    bench_args a = {.num = eng_numerics_default(), .chunk = 64, .n_tok = 1024, .reps = 3, .peak_n = 1024,
                    .decode_steps = 64};
    int rc = hx_bench_args(k_options, &a, argc, argv, "bench", err, errlen);
    if (rc) return rc;
    if (!a.model) return eng_errf(err, errlen, "bench: -m MODEL.gguf is required (see --help)"), ENG_ERR_ARG;
    if (a.chunks.n == 0) a.chunks.v[a.chunks.n++] = a.chunk;

    /* Models: the requested kernel, or both (ref first) with --compare-kernels. */
    eng_kernel kernels[2] = {a.num.kernel, a.num.kernel};
    bench_ctx c = {.a = &a, .n_kernels = 1};
    if (a.compare) { kernels[0] = ENG_KERNEL_REF; kernels[1] = ENG_KERNEL_BLAS; c.n_kernels = 2; }
    int32_t *toks = NULL;
    for (int k = 0; k < c.n_kernels; k++) {
        eng_numerics nk = a.num;
        nk.kernel = kernels[k];
        if ((rc = hx_bench_load(a.model, &nk, &c.models[k], err, errlen))) goto out;
    }
    hx_machine_get(&c.mc);
    const int64_t n_toks = (int64_t)a.n_tok + a.decode_steps;
    if (!(toks = malloc(sizeof(int32_t) * (size_t)n_toks)) ||
        hx_random_tokens((uint64_t)a.seed, toks, n_toks, eng_model_get_info(c.models[0])->n_vocab)) {
        rc = (eng_errf(err, errlen, "bench: out of memory"), ENG_ERR_NOMEM);
        goto out;
    }
    c.toks = toks;
    rc = a.decode ? run_decode(&c, err, errlen) : run_prefill(&c, err, errlen);
    if (!rc) rc = hx_bench_flush("bench", err, errlen);
out:
    free(toks);
    for (int k = 0; k < c.n_kernels; k++) eng_model_free(c.models[k]);
    return rc;
}
