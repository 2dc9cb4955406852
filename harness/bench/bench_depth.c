/*
 * harness/bench/bench_depth.c: long context and memory.
 *
 * `kvreplay bench --depth LIST -m M`: the prefill of N tokens (default
 * 512) on top of a context of each depth in LIST, as llama-bench's
 * `-p 512 -d DEPTH` measures it. The context is prefilled once per kernel,
 * in ascending depths (untimed, its time printed), and restored (a
 * truncation for attention, plus any recurrent state) before each timed
 * repetition. Also the same prefill at depth 0, so that attention's own
 * throughput at a depth is the marginal one: the cost model's extra FLOPs
 * over the extra time, (F(d) - F(0)) / (t(d) - t(0)), against the same
 * run's sgemm and FMA peaks.
 *
 * `kvreplay bench --memory -m M --tokens N`: the KV and recurrent-state
 * bytes of an N-token prompt, computed from the model (KV bytes per token
 * times N, plus the constant recurrent state) for N and for --full
 * (default 258,000: seed 004 at its report's scale), and the peak RSS of
 * one such prefill measured in a child process (`--memory-child`: loads
 * the model, prefills N tokens, reports VmRSS after the load and VmHWM at
 * the end), so that nothing of this process counts.
 */
#include <jansson.h>
#include <math.h>
#include <spawn.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bench.h"
#include "bench_engine.h"
#include "bench_util.h"
#include "options.h"
#include "stats.h"
#include "status.h"
#include "util.h"

extern char **environ;

// ----------------------------------------------------------------------------
// --depth

typedef struct depth_args {
    const char  *model;
    eng_numerics num;
    int32_t      chunk, n_tok, reps, peak_n;
    hx_int_list  depths;
    bool         compare, json;
} depth_args;

#define OPT(field) offsetof(depth_args, field)
static const hx_option k_depth_options[] = {
    {"--depth", NULL, "LIST", "context depths, comma-separated (e.g. 32768,131072)", HX_OPT_LIST, OPT(depths), 1,
     1 << 24, NULL},
    {"--model", "-m", "FILE", "GGUF model (required)", HX_OPT_STRING, OPT(model), 0, 0, NULL},
    HX_OPTS_ENGINE(depth_args),
    {"--tokens", NULL, "N", "tokens prefilled at each depth (default 512)", HX_OPT_INT, OPT(n_tok), 1, 1 << 22, NULL},
    {"--reps", NULL, "R", "timed repetitions, medians reported (default 3)", HX_OPT_INT, OPT(reps), 1, 1000, NULL},
    {"--peak-size", NULL, "S", "square sgemm size for the peak (default 1024)", HX_OPT_INT, OPT(peak_n), 16, 8192,
     NULL},
    {"--compare-kernels", NULL, NULL, "measure ref and blas side by side", HX_OPT_FLAG, OPT(compare), 0, 0, NULL},
    {"--json", NULL, NULL, "one JSON object on stdout", HX_OPT_FLAG, OPT(json), 0, 0, NULL},
    {0},
};
#undef OPT

static const char k_depth_usage[] =
    "usage: kvreplay bench --depth LIST -m MODEL.gguf [--threads T] [--tokens N] [OPTIONS]\n"
    "\n"
    "Prefill of N tokens on top of a context of each depth (llama-bench's -p N -d DEPTH), and\n"
    "attention's marginal GFLOP/s against the same run's sgemm and FMA peaks.\n"
    "\n";

typedef struct depth_run {
    hx_run  r;
    double  fill_s;       /* time to prefill the context (untimed part) */
    double  attn_gflops;  /* marginal, against depth 0 */
} depth_run;

/* The context fill's progress on a terminal (a 128K fill takes minutes),
 * at most once a second: eng_prefill calls it after each chunk. */
typedef struct fill_progress {
    const char *kernel;
    int32_t     to;
    double      t0, last;
} fill_progress;

static void fill_on_chunk(void *ud, eng_seq *s, int32_t n_tokens) {
    fill_progress *f = ud;
    const double now = eng_now_s();
    if (now - f->last < 1.0) return;
    f->last = now;
    fprintf(stderr, "\rbench --depth: %s context %d/%d tokens, %.0f s   ", f->kernel, n_tokens, f->to, now - f->t0);
}

/* A failed engine call rc while measuring: "bench --depth: WHAT: <rc>" in err. */
static int depth_failed(int rc, const char *what, char *err, size_t errlen) {
    if (rc == ENG_ERR_NOMEM || rc == ENG_OK) return eng_errf(err, errlen, "bench --depth: out of memory"), ENG_ERR_NOMEM;
    eng_errf(err, errlen, "bench --depth: %s: %s", what, eng_status_str(rc));
    return hx_bench_failed(rc);
}

/* One kernel: depth 0, then each depth ascending, in one sequence. */
static int depth_kernel(const eng_model *m, const depth_args *a, const int32_t *ctx_toks, const int32_t *toks,
                        hx_peak *pk, depth_run *out, char *err, size_t errlen) {
    const int32_t n = a->n_tok, nd = a->depths.n;
    const int32_t maxd = a->depths.v[nd - 1];
    eng_seq *s = eng_seq_new(m, maxd + n);
    float *logits = malloc(sizeof(float) * (size_t)eng_model_get_info(m)->n_vocab);
    double *t = malloc(sizeof(double) * (size_t)a->reps);
    eng_ckpt *ck = NULL;
    int rc = ENG_OK;
    if (!s || !logits || !t) {
        rc = (eng_errf(err, errlen, "bench --depth: out of memory (%d positions)", maxd + n), ENG_ERR_NOMEM);
        goto out;
    }
    eng_prefill_params pp = eng_prefill_params_default();
    pp.chunk = a->chunk;
    const eng_numerics *num = eng_model_get_numerics(m);
    if (!(ck = eng_seq_checkpoint(s))) {  /* the context so far (none yet) */
        rc = depth_failed(ENG_ERR_NOMEM, NULL, err, errlen);
        goto out;
    }
    for (int32_t di = -1; di < nd; di++) {
        const int32_t d = di < 0 ? 0 : a->depths.v[di];
        /* the context: continued from the previous depth (untimed) */
        rc = eng_seq_restore(s, ck);
        const int32_t at = eng_seq_n_tokens(s);
        double t0 = eng_now_s();
        if (rc == ENG_OK && d > at) {
            eng_prefill_params fp = pp;
            fill_progress fpr = {.kernel = eng_kernel_name(num->kernel), .to = d, .t0 = t0, .last = t0};
            if (eng_stderr_is_tty()) { fp.on_chunk = fill_on_chunk; fp.ud = &fpr; }
            rc = eng_prefill(s, ctx_toks + at, d - at, &fp, NULL);
            if (fpr.last > t0) fprintf(stderr, "\r%70s\r", "");  /* the rep lines are shorter */
        }
        if (rc != ENG_OK) { rc = depth_failed(rc, "context prefill failed", err, errlen); goto out; }
        depth_run *o = &out[di + 1];
        o->fill_s = eng_now_s() - t0;
        eng_ckpt_free(ck);
        if (!(ck = eng_seq_checkpoint(s))) { rc = depth_failed(ENG_ERR_NOMEM, NULL, err, errlen); goto out; }
        for (int r = -1; r < a->reps; r++) {
            if (r >= 0 && pk) hx_peak_sample(pk);
            if ((rc = eng_seq_restore(s, ck)) != ENG_OK) { rc = depth_failed(rc, "restore failed", err, errlen); goto out; }
            t0 = eng_now_s();
            rc = eng_prefill(s, toks, n, &pp, logits);
            const double dt = eng_now_s() - t0;
            if (rc != ENG_OK) { rc = depth_failed(rc, "prefill failed", err, errlen); goto out; }
            if (r >= 0) t[r] = dt;
            if (eng_stderr_is_tty())
                fprintf(stderr, "\rbench --depth: %s depth %d rep %d/%d: %.3f s   ", eng_kernel_name(num->kernel), d,
                        r + 1, a->reps, dt);
        }
        memset(&o->r, 0, sizeof o->r);
        o->r.kernel = num->kernel;
        o->r.threads = num->n_threads;
        o->r.chunk = a->chunk;
        o->r.depth = d;
        o->r.seconds = hx_median(t, a->reps);
        o->r.tok_s = n / o->r.seconds;
        o->r.gflops = eng_model_prefill_flops_params(m, d, n, &pp) / o->r.seconds / 1e9;
        o->attn_gflops = NAN;
        if (di >= 0 && o->r.seconds > out[0].r.seconds)
            o->attn_gflops = (eng_model_prefill_flops_params(m, d, n, &pp) - eng_model_prefill_flops_params(m, 0, n, &pp)) /
                             (o->r.seconds - out[0].r.seconds) / 1e9;
    }
    if (eng_stderr_is_tty()) fprintf(stderr, "\r%70s\r", "");
out:
    eng_ckpt_free(ck);
    free(t);
    free(logits);
    eng_seq_free(s);
    return rc;
}

static int print_depth(const depth_args *a, const depth_run *runs, int nk, const hx_peak *pk, double peak,
                       double fma, const hx_machine *mc, const char *ref_path, char *err, size_t errlen) {
    const int per = a->depths.n + 1;
    if (a->json) {
        json_t *o = hx_bench_json_head(a->model, a->num.n_threads, a->chunk, a->n_tok, a->reps), *arr = json_array();
        json_object_set_new(o, "peak_gflops", json_real(peak));
        json_object_set_new(o, "fma_peak_gflops", json_real(fma));
        json_object_set_new(o, "blas_core", json_string(mc->blas_core));
        json_object_set_new(o, "ref_path", json_string(ref_path));
        for (int i = 0; i < nk * per; i++) {
            const depth_run *r = &runs[i];
            json_t *e = json_object();
            json_object_set_new(e, "kernel", json_string(eng_kernel_name(r->r.kernel)));
            json_object_set_new(e, "depth", json_integer(r->r.depth));
            json_object_set_new(e, "prefill_s", json_real(r->r.seconds));
            json_object_set_new(e, "prefill_tok_s", json_real(r->r.tok_s));
            json_object_set_new(e, "gflops", json_real(r->r.gflops));
            json_object_set_new(e, "context_fill_s", json_real(r->fill_s));
            json_object_set_new(e, "attn_gflops", json_real(r->attn_gflops));
            json_object_set_new(e, "attn_ratio", json_real(r->attn_gflops / peak));
            json_object_set_new(e, "attn_ratio_fma", json_real(r->attn_gflops / fma));
            json_array_append_new(arr, e);
        }
        json_object_set_new(o, "runs", arr);
        if (hx_bench_print_json(o)) return eng_errf(err, errlen, "bench --depth: out of memory"), ENG_ERR_NOMEM;
        return ENG_OK;
    }
    printf("model %s: %d tokens at each depth, C = %d, %d threads, median of %d; sgemm peak %.1f GFLOP/s, FMA peak "
           "%.1f (%s); OpenBLAS core %s; ref path %s\n", a->model, a->n_tok, a->chunk, a->num.n_threads, a->reps, peak,
           fma, pk->vector ? pk->vector : "?", mc->blas_core, ref_path);
    printf("%-6s %8s %10s %10s %10s %12s %12s %9s %9s\n", "kernel", "depth", "fill_s", "prefill_s", "tok/s",
           "GFLOP/s", "attn GFLOP/s", "attn/sgemm", "attn/fma");
    for (int i = 0; i < nk * per; i++) {
        const depth_run *r = &runs[i];
        printf("%-6s %8d %10.1f %10.4f %10.1f %12.2f %12.2f %9.3f %9.3f\n", eng_kernel_name(r->r.kernel), r->r.depth,
               r->fill_s, r->r.seconds, r->r.tok_s, r->r.gflops, r->attn_gflops, r->attn_gflops / peak,
               r->attn_gflops / fma);
    }
    return ENG_OK;
}

int hx_bench_depth(int argc, char **argv, char *err, size_t errlen) {
    if (hx_wants_help(argc, argv)) { hx_usage(stdout, k_depth_usage, k_depth_options); return ENG_OK; }
    depth_args a = {.num = eng_numerics_default(), .chunk = 64, .n_tok = 512, .reps = 3, .peak_n = 1024};
    int rc = hx_bench_args(k_depth_options, &a, argc, argv, "bench --depth", err, errlen);
    if (rc) return rc;
    if (!a.model) return eng_errf(err, errlen, "bench --depth: -m MODEL.gguf is required (see --help)"), ENG_ERR_ARG;
    if (a.depths.n < 1) return eng_errf(err, errlen, "bench --depth: a list of depths is required"), ENG_ERR_ARG;
    for (int i = 1; i < a.depths.n; i++)
        if (a.depths.v[i] <= a.depths.v[i - 1])
            return eng_errf(err, errlen, "bench --depth: depths must ascend"), ENG_ERR_ARG;
    eng_kernel kernels[2] = {a.num.kernel, a.num.kernel};
    const int nk = a.compare ? 2 : 1;
    if (a.compare) { kernels[0] = ENG_KERNEL_REF; kernels[1] = ENG_KERNEL_BLAS; }
    hx_machine mc;
    hx_machine_get(&mc);
    const int32_t maxd = a.depths.v[a.depths.n - 1];
    hx_peak pk = {0};
    depth_run *runs = NULL;
    int32_t *ctx_toks = NULL, *toks = NULL;
    eng_model *m = NULL;
    if ((rc = hx_peak_init(&pk, a.peak_n, nk * (a.depths.n + 1) * a.reps, a.num.n_threads, err, errlen))) goto out;
    runs = calloc((size_t)nk * (a.depths.n + 1), sizeof *runs);
    ctx_toks = malloc(sizeof(int32_t) * (size_t)maxd);
    toks = malloc(sizeof(int32_t) * (size_t)a.n_tok);
    if (!runs || !ctx_toks || !toks) {
        rc = (eng_errf(err, errlen, "bench: out of memory"), ENG_ERR_NOMEM);
        goto out;
    }
    const char *ref_path = "";
    for (int k = 0; k < nk; k++) {
        eng_numerics n = a.num;
        n.kernel = kernels[k];
        if ((rc = hx_bench_load(a.model, &n, &m, err, errlen))) goto out;
        const int32_t V = eng_model_get_info(m)->n_vocab;
        if (hx_random_tokens(1, ctx_toks, maxd, V) || hx_random_tokens(0, toks, a.n_tok, V)) {
            rc = (eng_errf(err, errlen, "bench: out of memory"), ENG_ERR_NOMEM);
            goto out;
        }
        ref_path = eng_model_ref_path(m);
        if ((rc = depth_kernel(m, &a, ctx_toks, toks, &pk, runs + (int64_t)k * (a.depths.n + 1), err, errlen))) goto out;
        eng_model_free(m);
        m = NULL;
    }
    const double peak = hx_peak_sgemm(&pk), fma = hx_peak_fma(&pk);
    hx_peak_warn("bench --depth", peak, fma);
    if (!(rc = print_depth(&a, runs, nk, &pk, peak, fma, &mc, ref_path, err, errlen)))
        rc = hx_bench_flush("bench --depth", err, errlen);
out:
    eng_model_free(m);
    hx_peak_free(&pk);
    free(runs);
    free(ctx_toks);
    free(toks);
    return rc;
}

// ----------------------------------------------------------------------------
// --memory

typedef struct mem_args {
    const char  *model;
    eng_numerics num;
    int32_t      chunk, n_tok, full;
    bool         json, memory;
} mem_args;

#define OPT(field) offsetof(mem_args, field)
static const hx_option k_mem_options[] = {
    {"--memory", NULL, NULL, "this benchmark", HX_OPT_FLAG, OPT(memory), 0, 0, NULL},
    {"--memory-child", NULL, NULL, NULL, HX_OPT_FLAG, OPT(memory), 0, 0, NULL},
    {"--model", "-m", "FILE", "GGUF model (required)", HX_OPT_STRING, OPT(model), 0, 0, NULL},
    HX_OPTS_ENGINE(mem_args),
    {"--tokens", NULL, "N", "prompt tokens of the measured prefill (default 32768)", HX_OPT_INT, OPT(n_tok), 1,
     1 << 24, NULL},
    {"--full", NULL, "N", "prompt tokens of the computed figure too (default 258000: seed 004's scale)", HX_OPT_INT,
     OPT(full), 1, 1 << 24, NULL},
    {"--json", NULL, NULL, "one JSON object on stdout", HX_OPT_FLAG, OPT(json), 0, 0, NULL},
    {0},
};
#undef OPT

static const char k_mem_usage[] =
    "usage: kvreplay bench --memory -m MODEL.gguf [--tokens N] [--full N] [--threads T]\n"
    "\n"
    "KV and recurrent-state bytes of an N-token prompt (computed), and the peak RSS of one such\n"
    "prefill measured in a child process.\n"
    "\n";

/* "VmRSS:" or "VmHWM:" of /proc/self/status, bytes (0 when unknown). */
static int64_t proc_status_kb(const char *key) {
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    long long kb = 0;
    const size_t n = strlen(key);
    while (f && fgets(line, sizeof line, f))
        if (!strncmp(line, key, n)) { kb = atoll(line + n); break; }
    if (f) fclose(f);
    return (int64_t)kb * 1024;
}

int hx_bench_memory_child(int argc, char **argv, char *err, size_t errlen) {
    mem_args a = {.num = eng_numerics_default(), .chunk = 64, .n_tok = 32768};
    int rc = hx_bench_args(k_mem_options, &a, argc, argv, "bench --memory-child", err, errlen);
    if (rc) return rc;
    if (!a.model) return eng_errf(err, errlen, "bench --memory-child: -m MODEL.gguf is required"), ENG_ERR_ARG;
    eng_model *m = NULL;
    int32_t *toks = NULL;
    eng_seq *s = NULL;
    eng_ckpt *ck = NULL;
    if ((rc = hx_bench_load(a.model, &a.num, &m, err, errlen))) goto out;
    const int64_t rss_load = proc_status_kb("VmRSS:");
    toks = malloc(sizeof(int32_t) * (size_t)a.n_tok);
    s = eng_seq_new(m, a.n_tok);
    if (!toks || !s || hx_random_tokens(0, toks, a.n_tok, eng_model_get_info(m)->n_vocab)) {
        eng_errf(err, errlen, "bench --memory-child: out of memory (%d positions)", a.n_tok);
        rc = ENG_ERR_NOMEM;
        goto out;
    }
    eng_prefill_params pp = eng_prefill_params_default();
    pp.chunk = a.chunk;
    const double t0 = eng_now_s();
    rc = eng_prefill(s, toks, a.n_tok, &pp, NULL);
    const double dt = eng_now_s() - t0;
    if (rc != ENG_OK) {
        eng_errf(err, errlen, "bench --memory-child: prefill failed: %s", eng_status_str(rc));
        rc = hx_bench_failed(rc);
        goto out;
    }
    ck = eng_seq_checkpoint(s);
    printf("{\"rss_after_load\": %lld, \"rss_peak\": %lld, \"state_bytes\": %zu, \"ckpt_bytes\": %zu, "
           "\"prefill_s\": %.3f}\n", (long long)rss_load, (long long)proc_status_kb("VmHWM:"),
           eng_seq_serialized_size(s), ck ? eng_ckpt_size(ck) : (size_t)0, dt);
    rc = hx_bench_flush("bench --memory-child", err, errlen);
out:
    eng_ckpt_free(ck);
    eng_seq_free(s);
    eng_model_free(m);
    free(toks);
    return rc;
}

/* Runs the child and parses its one JSON line into *out. */
static int run_child(const mem_args *a, json_t **out, char *err, size_t errlen) {
    char tok[32], th[32], ch[32];
    snprintf(tok, sizeof tok, "%d", a->n_tok);
    snprintf(th, sizeof th, "%d", a->num.n_threads);
    snprintf(ch, sizeof ch, "%d", a->chunk);
    char *const args[] = {"kvreplay", "bench", "--memory-child", "-m", (char *)a->model, "--tokens", tok,
                          "--threads", th, "--chunk", ch, "--kernel", (char *)eng_kernel_name(a->num.kernel),
                          "--precision", (char *)eng_precision_name(a->num.precision), NULL};
    int fds[2];
    *out = NULL;
    if (pipe(fds) != 0) return eng_errf(err, errlen, "bench --memory: pipe failed"), ENG_ERR_IO;
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, fds[1], 1);
    posix_spawn_file_actions_addclose(&fa, fds[0]);
    pid_t pid;
    const int rc = posix_spawn(&pid, "/proc/self/exe", &fa, NULL, args, environ);
    posix_spawn_file_actions_destroy(&fa);
    close(fds[1]);
    if (rc != 0) {
        close(fds[0]);
        return eng_errf(err, errlen, "bench --memory: cannot start the child: %s", strerror(rc)), ENG_ERR_IO;
    }
    FILE *f = fdopen(fds[0], "r");
    char line[1024] = "";
    if (!f || !fgets(line, sizeof line, f)) line[0] = '\0';
    if (f) fclose(f);
    else close(fds[0]);
    int st = 0;
    waitpid(pid, &st, 0);
    json_error_t jerr;
    json_t *o = line[0] ? json_loads(line, 0, &jerr) : NULL;
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0 || !o) {
        json_decref(o);
        eng_errf(err, errlen, "bench --memory: the child failed (status %d)", WIFEXITED(st) ? WEXITSTATUS(st) : -1);
        return ENG_ERR_IO;
    }
    *out = o;
    return ENG_OK;
}

static double jnum(const json_t *o, const char *k) { return json_number_value(json_object_get(o, k)); }

int hx_bench_memory(int argc, char **argv, char *err, size_t errlen) {
    if (hx_wants_help(argc, argv)) { hx_usage(stdout, k_mem_usage, k_mem_options); return ENG_OK; }
    mem_args a = {.num = eng_numerics_default(), .chunk = 64, .n_tok = 32768, .full = 258000};
    int rc = hx_bench_args(k_mem_options, &a, argc, argv, "bench --memory", err, errlen);
    if (rc) return rc;
    if (!a.model) return eng_errf(err, errlen, "bench --memory: -m MODEL.gguf is required (see --help)"), ENG_ERR_ARG;
    /* computed: KV per token times N, plus the recurrent state (a checkpoint of an empty sequence) */
    eng_model *m = NULL;
    if ((rc = hx_bench_load(a.model, &a.num, &m, err, errlen))) return rc;
    const eng_model_info *in = eng_model_get_info(m);
    eng_seq *s = eng_seq_new(m, 1);
    eng_ckpt *ck = s ? eng_seq_checkpoint(s) : NULL;
    const bool have_ck = ck != NULL;
    const int64_t rec = ck ? (int64_t)eng_ckpt_size(ck) : 0, kvt = in->kv_bytes_per_token;
    eng_ckpt_free(ck);
    eng_seq_free(s);
    eng_model_free(m);
    if (!have_ck) return eng_errf(err, errlen, "bench --memory: out of memory"), ENG_ERR_NOMEM;
    const int64_t kv_n = kvt * a.n_tok, kv_full = kvt * a.full;
    json_t *c = NULL;
    if ((rc = run_child(&a, &c, err, errlen))) return rc;
    const double rss_load = jnum(c, "rss_after_load"), rss_peak = jnum(c, "rss_peak");
    if (a.json) {
        json_t *o = json_object();
        json_object_set_new(o, "model", json_string(a.model));
        json_object_set_new(o, "threads", json_integer(a.num.n_threads));
        json_object_set_new(o, "kernel", json_string(eng_kernel_name(a.num.kernel)));
        json_object_set_new(o, "kv_bytes_per_token", json_integer(kvt));
        json_object_set_new(o, "recurrent_bytes", json_integer(rec));
        json_object_set_new(o, "n_tokens", json_integer(a.n_tok));
        json_object_set_new(o, "kv_state_bytes", json_integer(kv_n + rec));
        json_object_set_new(o, "full_tokens", json_integer(a.full));
        json_object_set_new(o, "full_kv_state_bytes", json_integer(kv_full + rec));
        json_object_set_new(o, "rss_after_load", json_real(rss_load));
        json_object_set_new(o, "rss_peak", json_real(rss_peak));
        json_object_set_new(o, "prefill_s", json_real(jnum(c, "prefill_s")));
        /* the full prompt's peak RSS, computed: the measured one with the KV of the extra tokens */
        json_object_set_new(o, "full_rss_peak_computed", json_real(rss_peak + (double)(kv_full - kv_n)));
        if (hx_bench_print_json(o)) rc = (eng_errf(err, errlen, "bench --memory: out of memory"), ENG_ERR_NOMEM);
    } else {
        const double MiB = 1024.0 * 1024.0;
        printf("model %s: KV %lld bytes per token (attention layers), recurrent state %lld bytes (constant); %s, "
               "%d threads\n", a.model, (long long)kvt, (long long)rec, eng_kernel_name(a.num.kernel), a.num.n_threads);
        printf("%-34s %12s %12s\n", "", "KV + state", "peak RSS");
        printf("%-34s %9.1f MiB %9.1f MiB  (measured; %.1f MiB after loading the model; prefill %.1f s)\n",
               "measured prefill", (double)(kv_n + rec) / MiB, rss_peak / MiB, rss_load / MiB, jnum(c, "prefill_s"));
        printf("%-34s %9.1f MiB %9.1f MiB  (computed: the measured peak plus the extra tokens' KV)\n", "full prompt",
               (double)(kv_full + rec) / MiB, (rss_peak + (double)(kv_full - kv_n)) / MiB);
        printf("(measured prefill: %d tokens; full prompt: %d tokens)\n", a.n_tok, a.full);
    }
    json_decref(c);
    return rc ? rc : hx_bench_flush("bench --memory", err, errlen);
}
