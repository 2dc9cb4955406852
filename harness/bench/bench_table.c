/*
 * harness/bench/bench_table.c: `kvreplay bench --table DIR`: the targets of
 * issue 23 in one table, from the JSON files a `make bench` run wrote into
 * DIR (experiments/bench.sh names them), and llama.cpp's side from
 * DIR/llama-*.json (llama-bench -o json) when `make bench LLAMA_BENCH=...`
 * ran it (and llama-serve-clients.json, bench --serve --clients against a
 * llama-server, with LLAMA_SERVER=...). A figure whose file is absent is "-"; nothing is guessed.
 *
 * Each row: what is measured, the goal, this run's figure, whether it
 * meets the goal, the figure beside busy competitors where one was
 * measured, and the command that produced it (bench.sh's).
 */
#include <jansson.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "bench.h"
#include "bench_engine.h"
#include "bench_util.h"
#include "status.h"

typedef struct tab {
    const char *dir;
    int         met, missed, absent, untrusted;
    bool        distrust;  /* the rows being printed divide by an FMA peak found implausible */
} tab;

static json_t *load(const tab *t, const char *name) {
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", t->dir, name);
    json_error_t err;
    json_t *o = json_load_file(path, 0, &err);
    if (!o) {
        FILE *f = fopen(path, "r");
        if (f) {  /* present but not JSON: say so (a failed run), never guess */
            fclose(f);
            fprintf(stderr, "bench --table: %s: line %d: %s\n", path, err.line, err.text);
        }
    }
    return o;
}

static double num(const json_t *o, const char *k) {
    const json_t *v = o ? json_object_get(o, k) : NULL;
    return v && json_is_number(v) ? json_number_value(v) : NAN;
}

static const char *str(const json_t *o, const char *k) {
    const json_t *v = o ? json_object_get(o, k) : NULL;
    return v && json_is_string(v) ? json_string_value(v) : NULL;
}

/* The entry of o's "runs" whose string field `k` equals v (and, when k2,
 * whose integer field k2 equals v2). */
static const json_t *run_of(const json_t *o, const char *k, const char *v, const char *k2, long v2) {
    const json_t *arr = o ? json_object_get(o, "runs") : NULL;
    size_t i;
    const json_t *e;
    json_array_foreach(arr, i, e) {
        const char *s = str(e, k);
        if (!s || strcmp(s, v)) continue;
        if (k2 && (long)num(e, k2) != v2) continue;
        return e;
    }
    return NULL;
}

/* llama-bench's JSON: an array of tests; the tok/s of the one matching. */
static double llama_ts(const json_t *arr, int n_prompt, int n_gen, int n_depth, int threads, int fa) {
    size_t i;
    const json_t *e;
    json_array_foreach(arr, i, e) {
        if ((int)num(e, "n_prompt") != n_prompt || (int)num(e, "n_gen") != n_gen) continue;
        if ((int)num(e, "n_threads") != threads) continue;
        const json_t *d = json_object_get(e, "n_depth");
        if ((d ? (int)json_number_value(d) : 0) != n_depth) continue;
        if (fa >= 0) {
            const json_t *f = json_object_get(e, "flash_attn");
            const int fv = !f ? 0 : json_is_boolean(f) ? json_is_true(f) : (int)json_number_value(f);
            if ((fa != 0) != (fv > 0)) continue;
        }
        return num(e, "avg_ts");
    }
    return NAN;
}

/* A file's FMA peak is the machine's limit: a sustained sgemm above it
 * means the FMA samples were disturbed (another process, or OpenBLAS's
 * threads still polling), and its /FMA ratios are not judged. */
static bool fma_plausible(tab *t, const json_t *o, const char *name) {
    const double fma = num(o, "fma_peak_gflops"), sgemm = num(o, "peak_gflops");
    if (hx_peak_plausible(sgemm, fma)) return true;
    fprintf(stderr, "bench --table: %s/%s: FMA peak %.1f GFLOP/s below the sustained sgemm %.1f: its samples were "
            "disturbed; its ratios to the FMA peak are not judged\n", t->dir, name, fma, sgemm);
    return false;
}

/* A count of thousands for a row's label: "?" when its file is absent. */
static void thousands(char *buf, size_t n, double v) {
    if (isnan(v)) snprintf(buf, n, "?");
    else snprintf(buf, n, "%.0f", v);
}

static void cell(char *buf, size_t n, double v, const char *fmt) {
    if (isnan(v)) snprintf(buf, n, "-");
    else snprintf(buf, n, fmt, v);
}

/* One row: value against goal (>= goal when up, <= when !up); loaded and
 * llama are figures shown beside it (NAN: "-"). */
static void row(tab *t, const char *what, double goal, bool up, double value, const char *vfmt, double loaded,
                double llama, const char *cmd) {
    char g[32], v[32], l[32], ll[32];
    snprintf(g, sizeof g, "%s %.2f", up ? ">=" : "<=", goal);
    if (isnan(goal)) snprintf(g, sizeof g, "printed");
    cell(v, sizeof v, value, vfmt);
    cell(l, sizeof l, loaded, "%.1f");
    cell(ll, sizeof ll, llama, "%.1f");
    const char *met = "-";
    if (t->distrust && !isnan(value)) {
        met = "untrusted";
        t->untrusted++;
    } else if (!isnan(value) && !isnan(goal)) {
        const bool ok = up ? value >= goal : value <= goal;
        met = ok ? "yes" : "**no**";
        ok ? t->met++ : t->missed++;
    } else if (isnan(value)) {
        t->absent++;
    }
    printf("| %s | %s | %s | %s | %s | %s | `%s` |\n", what, g, v, met, l, ll, cmd);
}

int hx_bench_table(int argc, char **argv, char *err, size_t errlen) {
    tab t = {0};
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--table") && i + 1 < argc) t.dir = argv[++i];
        else if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            printf("usage: kvreplay bench --table DIR\n\nThe targets of issue 23 in one markdown table, from the JSON "
                   "files of a make bench run in DIR\n(and DIR/llama-*.json from llama-bench -o json). A ratio to an FMA peak "
                   "below the same file's\nsustained sgemm is \"untrusted\" (its samples were disturbed), not judged.\n");
            return ENG_OK;
        } else return hx_bench_bad_arg("bench --table", argv[i], err, errlen);
    }
    if (!t.dir) return eng_errf(err, errlen, "bench --table: a directory is required"), ENG_ERR_ARG;
    struct stat st;
    if (stat(t.dir, &st) != 0 || !S_ISDIR(st.st_mode))  /* a table of "-" for a mistyped DIR would say nothing */
        return eng_errf(err, errlen, "bench --table: %s: not a directory", t.dir), ENG_ERR_ARG;
    json_t *p2 = load(&t, "prefill-t2.json"), *p1 = load(&t, "prefill-t1.json"), *ct = load(&t, "contention.json");
    json_t *d1 = load(&t, "depth-t1.json"), *d2 = load(&t, "depth-t2.json"), *mem = load(&t, "memory.json");
    json_t *seed = load(&t, "seed003-contention.json");
    json_t *dec[2][2] = {{load(&t, "decode-base-t1.json"), load(&t, "decode-base-t2.json")},
                         {load(&t, "decode-stories-t1.json"), load(&t, "decode-stories-t2.json")}};
    json_t *lpp = load(&t, "llama-pp.json"), *ltg = load(&t, "llama-tg.json"), *ldp = load(&t, "llama-depth.json");
    json_t *sc = load(&t, "serve-clients.json"), *scl = load(&t, "llama-serve-clients.json");
    hx_machine mc;
    hx_machine_get(&mc);
    printf("machine: %s; %d cores; OpenBLAS core %s; FMA peak vector %s; ref path %s\n\n",
           str(p2, "cpu") ? str(p2, "cpu") : mc.cpu, p2 ? (int)num(p2, "cores") : mc.cores,
           str(p2, "blas_core") ? str(p2, "blas_core") : mc.blas_core, str(p2, "fma_vector") ? str(p2, "fma_vector") : "?",
           str(p2, "ref_path") ? str(p2, "ref_path") : "?");
    printf("| target | goal | this run | met | loaded | llama.cpp tok/s | command |\n");
    printf("| --- | --- | --- | --- | --- | --- | --- |\n");

    /* quiet prefill, base preset, C = 64 */
    const json_t *ref2 = run_of(p2, "kernel", "ref", NULL, 0), *blas2 = run_of(p2, "kernel", "blas", NULL, 0);
    const json_t *ref1 = run_of(p1, "kernel", "ref", NULL, 0), *blas1 = run_of(p1, "kernel", "blas", NULL, 0);
    const char *cp2 = "kvreplay bench -m base.gguf --threads 2 --tokens 512 --compare-kernels";
    const char *cp1 = "kvreplay bench -m base.gguf --threads 1 --tokens 512 --compare-kernels";
    const bool fma2 = fma_plausible(&t, p2, "prefill-t2.json"), fma1 = fma_plausible(&t, p1, "prefill-t1.json");
    t.distrust = !fma2;
    row(&t, "ref / FMA peak, base, C = 64, 2 threads", 0.80, true, num(ref2, "ratio_fma"), "%.3f", NAN, NAN, cp2);
    t.distrust = false;
    row(&t, "ref / sgemm peak, base, C = 64, 2 threads", 0.85, true, num(ref2, "ratio"), "%.3f", NAN, NAN, cp2);
    t.distrust = !fma1;
    row(&t, "ref / FMA peak, base, C = 64, 1 thread", 0.80, true, num(ref1, "ratio_fma"), "%.3f", NAN, NAN, cp1);
    t.distrust = !fma2;
    row(&t, "blas / FMA peak, base, C = 64, 2 threads (no goal)", NAN, true, num(blas2, "ratio_fma"), "%.3f", NAN, NAN,
        cp2);
    t.distrust = false;
    const json_t *cref = run_of(ct, "variant", "ref", NULL, 0), *cblas = run_of(ct, "variant", "blas", NULL, 0);
    for (int th = 2; th >= 1; th--) {
        const json_t *rr = th == 2 ? ref2 : ref1, *bb = th == 2 ? blas2 : blas1;
        const double lp = llama_ts(lpp, 512, 0, 0, th, -1);
        char what[96];
        snprintf(what, sizeof what, "ref prefill / llama.cpp pp512, base, %d thread%s", th, th > 1 ? "s" : "");
        row(&t, what, 2.0, true, num(rr, "prefill_tok_s") / lp, "%.2f", NAN, lp, th == 2 ? cp2 : cp1);
        snprintf(what, sizeof what, "blas prefill / llama.cpp pp512, base, %d thread%s (no goal)", th, th > 1 ? "s" : "");
        row(&t, what, NAN, true, num(bb, "prefill_tok_s") / lp, "%.2f", NAN, lp, th == 2 ? cp2 : cp1);
    }
    /* under load */
    const char *cc = "kvreplay bench --contention -m base.gguf --threads 2 --tokens 512";
    row(&t, "ref prefill loaded / quiet, 2 busy competitors, 2 threads", 2.5, false, num(cref, "slowdown"), "%.2f",
        num(cref, "loaded_tok_s"), NAN, cc);
    row(&t, "blas prefill loaded / quiet, 2 busy competitors, 2 threads", 2.5, false, num(cblas, "slowdown"), "%.2f",
        num(cblas, "loaded_tok_s"), NAN, cc);
    row(&t, "seed003 at demo scale loaded / quiet (BENCH_SEED003=1)", 2.5, false,
        num(run_of(seed, "variant", "command", NULL, 0), "slowdown"), "%.2f", NAN, NAN,
        "kvreplay bench --contention --exec 'kvreplay experiment experiments/seed003.json ...'");
    /* long context */
    for (int di = 0; di < 2; di++) {
        const int depth = di == 0 ? 32768 : 131072;
        for (int th = 1; th <= 2; th++) {
            json_t *d = th == 1 ? d1 : d2;
            const char *cd = th == 1 ? "kvreplay bench --depth 32768[,131072] -m small.gguf --threads 1 --compare-kernels"
                                     : "kvreplay bench --depth 32768[,131072] -m small.gguf --threads 2 --compare-kernels";
            for (int k = 0; k < 2; k++) {
                const char *kn = k ? "blas" : "ref";
                const json_t *e = run_of(d, "kernel", kn, "depth", depth);
                for (int fa = 1; fa >= 0; fa--) {
                    const double l = llama_ts(ldp, 512, 0, depth, th, fa);
                    char what[128];
                    snprintf(what, sizeof what, "%s p512 at depth %dK / llama.cpp -fa %s, small, %d thread%s", kn,
                             depth / 1024, fa ? "on" : "off", th, th > 1 ? "s" : "");
                    row(&t, what, 1.5, true, num(e, "prefill_tok_s") / l, "%.2f", NAN, l, cd);
                }
            }
        }
        const json_t *ar = run_of(d2, "kernel", "ref", "depth", depth), *ab = run_of(d2, "kernel", "blas", "depth", depth);
        char what[96];
        snprintf(what, sizeof what, "ref attention / sgemm peak at %dK, 2 threads", depth / 1024);
        row(&t, what, 0.5, true, num(ar, "attn_ratio"), "%.3f", NAN, NAN,
            "kvreplay bench --depth ... --threads 2 (marginal attention GFLOP/s)");
        snprintf(what, sizeof what, "blas attention / sgemm peak at %dK, 2 threads", depth / 1024);
        row(&t, what, 0.5, true, num(ab, "attn_ratio"), "%.3f", NAN, NAN,
            "kvreplay bench --depth ... --threads 2 (marginal attention GFLOP/s)");
    }
    /* decode */
    for (int mi = 0; mi < 2; mi++)
        for (int th = 1; th <= 2; th++) {
            json_t *d = dec[mi][th - 1];
            double lt = NAN;  /* llama-tg.json holds both models: tell them apart by file name */
            size_t i;
            const json_t *e;
            json_array_foreach(ltg, i, e) {
                const char *fn = str(e, "model_filename");
                if (!fn || (int)num(e, "n_gen") != 128 || (int)num(e, "n_threads") != th) continue;
                if ((mi == 0) != (strstr(fn, "base") != NULL)) continue;
                lt = num(e, "avg_ts");
            }
            for (int k = 0; k < 2; k++) {
                const char *kn = k ? "blas" : "ref";
                char what[96], cmd[160];
                snprintf(what, sizeof what, "%s decode / llama.cpp tg128, %s, %d thread%s", kn,
                         mi == 0 ? "base" : "stories260K", th, th > 1 ? "s" : "");
                snprintf(cmd, sizeof cmd, "kvreplay bench -m %s --threads %d --decode --compare-kernels --tokens 1 "
                         "--decode-steps 128", mi == 0 ? "base.gguf" : "stories260K.gguf", th);
                row(&t, what, 1.0, true, num(run_of(d, "kernel", kn, NULL, 0), "decode_tok_s") / lt, "%.2f", NAN, lt, cmd);
            }
        }
    /* serve under 8 concurrent clients, against llama-server -np 8 on the same GGUF (issue 36) */
    {
        const double kt = num(sc, "tokens_per_s"), lt = num(scl, "tokens_per_s");
        const double kp = num(sc, "ttft_p50_ms"), lp = num(scl, "ttft_p50_ms");
        row(&t, "serve --parallel 8, 8 clients: aggregate tok/s / llama-server -np 8", 1.0, true, kt / lt, "%.2f", NAN,
            lt, "kvreplay bench --serve --clients 8 -m small-spm.gguf (and --url the llama-server)");
        row(&t, "serve --parallel 8, 8 clients: TTFT p50 / llama-server -np 8's", 1.0, false, kp / lp, "%.2f", NAN, lp,
            "kvreplay bench --serve --clients 8 -m small-spm.gguf (and --url the llama-server)");
    }
    /* memory */
    const double MiB = 1024.0 * 1024.0;
    char what[128];
    char full_k[16], meas_k[16];  /* "258", "32"; "?" without memory.json */
    thousands(full_k, sizeof full_k, num(mem, "full_tokens") / 1000);
    thousands(meas_k, sizeof meas_k, num(mem, "n_tokens") / 1024);
    snprintf(what, sizeof what, "KV + state of a %sK-token hybrid small prompt, MiB (computed)", full_k);
    row(&t, what, NAN, true, num(mem, "full_kv_state_bytes") / MiB, "%.1f", NAN, NAN,
        "kvreplay bench --memory -m hybrid-small.gguf --threads 2");
    snprintf(what, sizeof what, "peak RSS of one %sK-token prefill, MiB (measured)", meas_k);
    row(&t, what, NAN, true, num(mem, "rss_peak") / MiB, "%.1f", NAN, NAN,
        "kvreplay bench --memory -m hybrid-small.gguf --threads 2");
    snprintf(what, sizeof what, "peak RSS of one %sK-token prefill, MiB (computed from it)", full_k);
    row(&t, what, NAN, true, num(mem, "full_rss_peak_computed") / MiB, "%.1f", NAN, NAN,
        "kvreplay bench --memory -m hybrid-small.gguf --threads 2");
    printf("\n%d met, %d missed, %d not measured in this run (\"-\": a file of DIR absent, or no llama.cpp run)\n",
           t.met, t.missed, t.absent);
    if (t.untrusted)
        printf("%d untrusted: a ratio to an FMA peak below the same run's sgemm (its samples were disturbed; "
               "stderr names the file)\n", t.untrusted);
    json_t *all[] = {p2, p1, ct, d1, d2, mem, seed, dec[0][0], dec[0][1], dec[1][0], dec[1][1], lpp, ltg, ldp, sc, scl};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) json_decref(all[i]);
    return hx_bench_flush("bench --table", err, errlen);
}
