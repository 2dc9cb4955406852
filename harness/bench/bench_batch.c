/*
 * harness/bench/bench_batch.c: `kvreplay bench --batch B -m M`: what a
 * batched step buys, and whether it changes bits.
 *
 * For each kernel (ref and blas, or --kernel's alone) and each batch size b
 * of the sweep (1, 2, 4, 8, 16 up to B, and B; or --sizes), side by side in
 * one run, repetitions interleaved:
 *   decode:  b sequences, each after its own seeded prompt of --tokens
 *            tokens (prefilled once, untimed, restored before each
 *            repetition), each take --decode-steps tokens. Single: one
 *            sequence after the other, eng_decode (a server serving one
 *            request at a time). Batched: one eng_batch_forward step per
 *            token with b decode spans. Tokens/s of all b sequences
 *            (aggregate), the median of --reps.
 *   prefill: b sequences each prefill --prefill-tokens seeded tokens from
 *            empty. Single: eng_prefill one after the other. Batched: steps
 *            of one grid chunk of every sequence (eng_batch_chunk_len).
 *   bits:    every logit row of the batched runs against the single runs,
 *            memcmp: with ref they must be identical (batch invariance);
 *            with blas they may not be (OpenBLAS's sgemm over b rows
 *            against its sgemv for one).
 * The load average is printed before and after: figures taken on a busy
 * machine are not the machine's.
 *
 * Errors are returned as exit codes (2 usage or model, 3 internal), with a
 * message on stderr; nothing here exits.
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

#define MAX_B 64

typedef struct batch_args {
    const char  *model;
    eng_numerics num;
    int32_t      batch, chunk, n_tok, n_prefill, steps, reps;
    int64_t      seed;
    hx_int_list  sizes;
    bool         json;
} batch_args;

#define OPT(field) offsetof(batch_args, field)
static const hx_option k_options[] = {
    {"--batch", NULL, "B", "largest batch: sizes 1, 2, 4, 8, 16 up to B, and B", HX_OPT_INT, OPT(batch), 1, MAX_B,
     NULL},
    {"--model", "-m", "FILE", "GGUF model (required)", HX_OPT_STRING, OPT(model), 0, 0, NULL},
    {"--threads", NULL, "T", "threads of the engine (default 1)", HX_OPT_INT, OPT(num.n_threads), 1, HX_THREADS_MAX,
     NULL},
    {"--chunk", NULL, "C", "the grid of the prefill chunks (default 64)", HX_OPT_INT, OPT(chunk), 1, 1 << 20, NULL},
    {"--kernel", NULL, "blas|ref", "measure this kernel only (default: ref and blas)", HX_OPT_CUSTOM, OPT(num.kernel),
     0, 0, hx_parse_kernel},
    {"--precision", NULL, "fp32|bf16", "(default fp32)", HX_OPT_CUSTOM, OPT(num.precision), 0, 0, hx_parse_precision},
    {"--sizes", NULL, "LIST", "batch sizes instead of the default sweep, e.g. 1,2,3,4,5,6,7,8", HX_OPT_LIST,
     OPT(sizes), 1, MAX_B, NULL},
    {"--tokens", NULL, "N", "prompt tokens before decoding (default 128)", HX_OPT_INT, OPT(n_tok), 1, 1 << 20, NULL},
    {"--decode-steps", NULL, "S", "decode tokens per sequence and repetition (default 16)", HX_OPT_INT, OPT(steps), 1,
     1 << 16, NULL},
    {"--prefill-tokens", NULL, "N", "tokens each sequence prefills (default 64; 0: no prefill runs)", HX_OPT_INT,
     OPT(n_prefill), 0, 1 << 20, NULL},
    {"--reps", NULL, "R", "timed repetitions, medians reported (default 3)", HX_OPT_INT, OPT(reps), 1, 1000, NULL},
    {"--seed", NULL, "S", "token seed (default 0)", HX_OPT_INT64, OPT(seed), 0, INT64_MAX, NULL},
    {"--json", NULL, NULL, "one JSON object on stdout", HX_OPT_FLAG, OPT(json), 0, 0, NULL},
    {0},
};

static const char k_usage[] =
    "usage: kvreplay bench --batch B -m MODEL.gguf [OPTIONS]\n"
    "\n"
    "Decode and prefill tokens/s of b sequences computed one after another (single) and together in batched\n"
    "steps (eng_batch_forward), for ref and blas (or --kernel's), at each batch size b; and whether the\n"
    "batched logits are bit-identical to the single ones. Prints the load average before and after.\n"
    "\n";

/* One kernel's sequences and buffers for the largest batch. */
typedef struct bench_set {
    const eng_model *m;
    eng_batch       *bt;
    int32_t          n, V;
    eng_seq         *s[MAX_B], *prompt[MAX_B];  /* working sequences, and each after its prompt */
    int32_t         *tok[MAX_B];                /* prompt, then decode tokens; prefill tokens after */
    float           *lg1, *lgb;                 /* [n, S, V] single and batched logits */
} bench_set;

typedef struct batch_row {
    eng_kernel kernel;
    int32_t    b;
    double     dec1, decb, pre1, preb;   /* tokens/s: single, batched */
    int64_t    dec_rows, dec_diff;       /* logit rows compared, rows that differ */
    int64_t    pre_rows, pre_diff;
} batch_row;

static void set_free(bench_set *st) {
    for (int i = 0; i < MAX_B; i++) {
        eng_seq_free(st->s[i]);
        eng_seq_free(st->prompt[i]);
        free(st->tok[i]);
    }
    eng_batch_free(st->bt);
    free(st->lg1);
    free(st->lgb);
}

static int set_init(bench_set *st, const eng_model *m, const batch_args *a, int32_t n) {
    memset(st, 0, sizeof *st);
    st->m = m;
    st->n = n;
    st->V = eng_model_get_info(m)->n_vocab;
    const int32_t per = a->n_tok + a->steps + a->n_prefill, ctx = a->n_tok + a->steps > a->n_prefill
                                                                     ? a->n_tok + a->steps : a->n_prefill;
    const size_t nl = (size_t)n * (size_t)(a->steps > 1 ? a->steps : 1) * (size_t)st->V;
    st->bt = eng_batch_new(m);
    st->lg1 = malloc(sizeof(float) * nl);
    st->lgb = malloc(sizeof(float) * nl);
    if (!st->bt || !st->lg1 || !st->lgb) return ENG_ERR_NOMEM;
    for (int32_t i = 0; i < n; i++) {
        st->s[i] = eng_seq_new(m, ctx);
        st->prompt[i] = eng_seq_new(m, ctx);
        st->tok[i] = malloc(sizeof(int32_t) * (size_t)per);
        if (!st->s[i] || !st->prompt[i] || !st->tok[i]) return ENG_ERR_NOMEM;
        hx_random_tokens((uint64_t)a->seed + 1000003u * (uint64_t)i, st->tok[i], per, st->V);
        const int rc = eng_prefill(st->prompt[i], st->tok[i], a->n_tok, NULL, NULL);
        if (rc != ENG_OK) return rc;
    }
    return ENG_OK;
}

/* Rows of V floats that differ between a and b (memcmp), over n rows. */
static int64_t rows_differ(const float *a, const float *b, int64_t n, int32_t V) {
    int64_t d = 0;
    for (int64_t r = 0; r < n; r++)
        d += memcmp(a + r * V, b + r * V, sizeof(float) * (size_t)V) != 0;
    return d;
}

/* b sequences restored to their prompts (untimed). */
static int restore(bench_set *st, int32_t b) {
    for (int32_t i = 0; i < b; i++) {
        const int rc = eng_seq_copy(st->s[i], st->prompt[i]);
        if (rc != ENG_OK) return rc;
    }
    return ENG_OK;
}

/* One decode repetition of b sequences, single or batched: seconds, or < 0 on error. */
static double decode_rep(bench_set *st, const batch_args *a, int32_t b, bool batched, char *err, size_t errlen) {
    const int32_t S = a->steps, V = st->V;
    int rc = restore(st, b);
    const double t0 = eng_now_s();
    if (!batched) {
        for (int32_t i = 0; i < b && rc == ENG_OK; i++)
            for (int32_t k = 0; k < S && rc == ENG_OK; k++)
                rc = eng_decode(st->s[i], st->tok[i][a->n_tok + k], st->lg1 + ((int64_t)i * S + k) * V);
    } else {
        eng_batch_span sp[MAX_B];
        for (int32_t k = 0; k < S && rc == ENG_OK; k++) {
            for (int32_t i = 0; i < b; i++)
                sp[i] = (eng_batch_span){.seq = st->s[i], .tokens = st->tok[i] + a->n_tok + k, .n = 1,
                                         .logits = st->lgb + ((int64_t)i * S + k) * V};
            rc = eng_batch_forward(st->bt, sp, b, NULL, err, errlen);
        }
    }
    const double dt = eng_now_s() - t0;
    if (rc != ENG_OK && !err[0]) snprintf(err, errlen, "decode: %s", eng_status_str(rc));
    return rc == ENG_OK ? dt : -1.0;
}

/* One prefill repetition: b sequences from empty, last-token logits. */
static double prefill_rep(bench_set *st, const batch_args *a, int32_t b, bool batched, char *err, size_t errlen) {
    const int32_t P = a->n_prefill, V = st->V, off = a->n_tok + a->steps;
    eng_prefill_params pp = eng_prefill_params_default();
    pp.chunk = a->chunk;
    eng_batch_params bp = eng_batch_params_default();
    bp.chunk = a->chunk;
    for (int32_t i = 0; i < b; i++) eng_seq_reset(st->s[i]);
    int rc = ENG_OK;
    const double t0 = eng_now_s();
    if (!batched) {
        for (int32_t i = 0; i < b && rc == ENG_OK; i++)
            rc = eng_prefill(st->s[i], st->tok[i] + off, P, &pp, st->lg1 + (int64_t)i * V);
    } else {
        eng_batch_span sp[MAX_B];
        for (int32_t done = 0; done < P && rc == ENG_OK;) {  /* every sequence at the same position */
            const int32_t n = eng_batch_chunk_len(st->s[0], P - done, &bp);
            for (int32_t i = 0; i < b; i++)
                sp[i] = (eng_batch_span){.seq = st->s[i], .tokens = st->tok[i] + off + done, .n = n,
                                         .logits = done + n == P ? st->lgb + (int64_t)i * V : NULL};
            rc = eng_batch_forward(st->bt, sp, b, &bp, err, errlen);
            done += n;
        }
    }
    const double dt = eng_now_s() - t0;
    if (rc != ENG_OK && !err[0]) snprintf(err, errlen, "prefill: %s", eng_status_str(rc));
    return rc == ENG_OK ? dt : -1.0;
}

/* The measurements of one batch size: reps interleaved (single, batched),
 * after one untimed pair; bits from the last repetition. */
static int measure(bench_set *st, const batch_args *a, int32_t b, batch_row *row, char *err, size_t errlen) {
    double t1[1000], tb[1000];
    memset(row, 0, sizeof *row);
    row->b = b;
    row->kernel = eng_model_get_numerics(st->m)->kernel;
    for (int r = -1; r < a->reps; r++) {
        const double x = decode_rep(st, a, b, false, err, errlen), y = decode_rep(st, a, b, true, err, errlen);
        if (x < 0 || y < 0) return ENG_ERR_IO;
        if (r >= 0) { t1[r] = x; tb[r] = y; }
    }
    row->dec1 = (double)b * a->steps / hx_median(t1, a->reps);
    row->decb = (double)b * a->steps / hx_median(tb, a->reps);
    row->dec_rows = (int64_t)b * a->steps;
    row->dec_diff = rows_differ(st->lg1, st->lgb, row->dec_rows, st->V);
    if (a->n_prefill == 0) return ENG_OK;
    for (int r = -1; r < a->reps; r++) {
        const double x = prefill_rep(st, a, b, false, err, errlen), y = prefill_rep(st, a, b, true, err, errlen);
        if (x < 0 || y < 0) return ENG_ERR_IO;
        if (r >= 0) { t1[r] = x; tb[r] = y; }
    }
    row->pre1 = (double)b * a->n_prefill / hx_median(t1, a->reps);
    row->preb = (double)b * a->n_prefill / hx_median(tb, a->reps);
    row->pre_rows = b;
    row->pre_diff = rows_differ(st->lg1, st->lgb, b, st->V);
    return ENG_OK;
}

static void load_avg(double la[3]) {
    if (getloadavg(la, 3) != 3) la[0] = la[1] = la[2] = NAN;
}

static void print_rows(const batch_args *a, const batch_row *rows, int n_rows, const double la0[3],
                       const double la1[3], const eng_model_info *in, const char *ref_path) {
    hx_machine mc;
    hx_machine_get(&mc);
    printf("model %s: D %d, L %d, V %d; %d threads, %s, C = %d; decode %d tokens per sequence after a %d-token "
           "prompt, prefill %d tokens; median of %d\n", a->model, in->n_embd, in->n_layer, in->n_vocab,
           a->num.n_threads, eng_precision_name(a->num.precision), a->chunk, a->steps, a->n_tok, a->n_prefill,
           a->reps);
    printf("machine: %s, %d cores; OpenBLAS core %s; ref kernel path %s; load average %.2f %.2f %.2f before, "
           "%.2f %.2f %.2f after\n", mc.cpu, mc.cores, mc.blas_core, ref_path, la0[0], la0[1], la0[2], la1[0], la1[1],
           la1[2]);
    printf("%-6s %3s | %12s %12s %7s %-14s | %12s %12s %7s %-10s\n", "kernel", "b", "decode 1by1", "batched", "ratio",
           "bits", "prefill 1by1", "batched", "ratio", "bits");
    for (int r = 0; r < n_rows; r++) {
        const batch_row *x = &rows[r];
        char db[32], pb[32];
        snprintf(db, sizeof db, x->dec_diff ? "%lld/%lld differ" : "identical", (long long)x->dec_diff,
                 (long long)x->dec_rows);
        if (a->n_prefill == 0) snprintf(pb, sizeof pb, "-");
        else snprintf(pb, sizeof pb, x->pre_diff ? "%lld/%lld differ" : "identical", (long long)x->pre_diff,
                      (long long)x->pre_rows);
        printf("%-6s %3d | %12.1f %12.1f %7.2f %-14s | ", eng_kernel_name(x->kernel), x->b, x->dec1, x->decb,
               x->decb / x->dec1, db);
        if (a->n_prefill == 0) printf("%12s %12s %7s %-10s\n", "-", "-", "-", pb);
        else printf("%12.1f %12.1f %7.2f %-10s\n", x->pre1, x->preb, x->preb / x->pre1, pb);
    }
    printf("(tokens/s of all b sequences; 1by1: one sequence after another; ratio: batched / 1by1)\n");
}

static int print_json(const batch_args *a, const batch_row *rows, int n_rows, const double la0[3],
                       const double la1[3], const eng_model_info *in, const char *ref_path) {
    hx_machine mc;
    hx_machine_get(&mc);
    json_t *o = json_object(), *arr = json_array();
    json_object_set_new(o, "model", json_string(a->model));
    json_object_set_new(o, "model_sha256", json_string(in->sha256));
    json_object_set_new(o, "threads", json_integer(a->num.n_threads));
    json_object_set_new(o, "precision", json_string(eng_precision_name(a->num.precision)));
    json_object_set_new(o, "chunk", json_integer(a->chunk));
    json_object_set_new(o, "n_prompt", json_integer(a->n_tok));
    json_object_set_new(o, "decode_steps", json_integer(a->steps));
    json_object_set_new(o, "prefill_tokens", json_integer(a->n_prefill));
    json_object_set_new(o, "reps", json_integer(a->reps));
    json_object_set_new(o, "cpu", json_string(mc.cpu));
    json_object_set_new(o, "blas_core", json_string(mc.blas_core));
    json_object_set_new(o, "ref_path", json_string(ref_path));
    json_t *l0 = json_array(), *l1 = json_array();
    for (int i = 0; i < 3; i++) {
        json_array_append_new(l0, json_real(la0[i]));
        json_array_append_new(l1, json_real(la1[i]));
    }
    json_object_set_new(o, "load_avg_before", l0);
    json_object_set_new(o, "load_avg_after", l1);
    for (int r = 0; r < n_rows; r++) {
        const batch_row *x = &rows[r];
        json_t *e = json_object();
        json_object_set_new(e, "kernel", json_string(eng_kernel_name(x->kernel)));
        json_object_set_new(e, "batch", json_integer(x->b));
        json_object_set_new(e, "decode_single_tok_s", json_real(x->dec1));
        json_object_set_new(e, "decode_batched_tok_s", json_real(x->decb));
        json_object_set_new(e, "decode_ratio", json_real(x->decb / x->dec1));
        json_object_set_new(e, "decode_rows", json_integer(x->dec_rows));
        json_object_set_new(e, "decode_rows_differ", json_integer(x->dec_diff));
        if (a->n_prefill > 0) {
            json_object_set_new(e, "prefill_single_tok_s", json_real(x->pre1));
            json_object_set_new(e, "prefill_batched_tok_s", json_real(x->preb));
            json_object_set_new(e, "prefill_ratio", json_real(x->preb / x->pre1));
            json_object_set_new(e, "prefill_rows", json_integer(x->pre_rows));
            json_object_set_new(e, "prefill_rows_differ", json_integer(x->pre_diff));
        }
        json_object_set_new(e, "bits_identical", json_boolean(x->dec_diff == 0 && x->pre_diff == 0));
        json_array_append_new(arr, e);
    }
    json_object_set_new(o, "runs", arr);
    return hx_bench_print_json(o);
}

int hx_bench_batch(int argc, char **argv, char *err, size_t errlen) {
    if (hx_wants_help(argc, argv)) { hx_usage(stdout, k_usage, k_options); return ENG_OK; }
    batch_args a = {.num = eng_numerics_default(), .chunk = 64, .n_tok = 128, .n_prefill = 64, .steps = 16,
                    .reps = 3};
    a.num.kernel = (eng_kernel)-1;  /* unset: both kernels */
    int rc = hx_bench_args(k_options, &a, argc, argv, "bench --batch", err, errlen);
    if (rc) return rc;
    if (!a.model || a.batch < 1) {
        eng_errf(err, errlen, "bench --batch: %s is required (see --help)", !a.model ? "-m MODEL.gguf" : "--batch B");
        return ENG_ERR_ARG;
    }
    int32_t sizes[HX_INT_LIST_MAX + 6], n_sizes = 0, bmax = 0;
    if (a.sizes.n > 0) {
        for (int i = 0; i < a.sizes.n; i++) sizes[n_sizes++] = a.sizes.v[i];
    } else {
        for (int32_t b = 1; b < a.batch; b *= 2) sizes[n_sizes++] = b;
        sizes[n_sizes++] = a.batch;
    }
    for (int i = 0; i < n_sizes; i++) bmax = sizes[i] > bmax ? sizes[i] : bmax;
    eng_kernel kernels[2] = {ENG_KERNEL_REF, ENG_KERNEL_BLAS};
    int n_kernels = 2;
    if ((int)a.num.kernel >= 0) { kernels[0] = a.num.kernel; n_kernels = 1; }

    double la0[3], la1[3];
    load_avg(la0);
    batch_row rows[2 * (HX_INT_LIST_MAX + 6)];
    int n_rows = 0;
    eng_model_info info;
    char ref_path[16] = "";
    for (int k = 0; k < n_kernels && rc == ENG_OK; k++) {
        eng_numerics num = a.num;
        num.kernel = kernels[k];
        eng_model *m = NULL;
        char e2[512] = "";
        int st = eng_model_load(a.model, &num, &m, e2, sizeof e2);
        if (st != ENG_OK) {  /* the model the user named: usage (exit 2), out of memory exit 3 */
            eng_errf(err, errlen, "bench --batch: %s", e2[0] ? e2 : eng_status_str(st));
            return st == ENG_ERR_NOMEM ? st : ENG_ERR_ARG;
        }
        info = *eng_model_get_info(m);
        snprintf(ref_path, sizeof ref_path, "%s", eng_model_ref_path(m));
        bench_set set;
        if ((st = set_init(&set, m, &a, bmax)) != ENG_OK) {
            eng_errf(err, errlen, "bench --batch: %s: setting up %d sequences: %s", eng_kernel_name(num.kernel), bmax,
                     eng_status_str(st));
            rc = hx_bench_failed(st);
        }
        for (int i = 0; i < n_sizes && rc == ENG_OK; i++) {
            if (eng_stderr_is_tty())
                fprintf(stderr, "\rbench --batch: %s b = %d ...   ", eng_kernel_name(num.kernel), sizes[i]);
            if ((st = measure(&set, &a, sizes[i], &rows[n_rows], e2, sizeof e2)) != ENG_OK) {
                eng_errf(err, errlen, "bench --batch: %s b = %d: %s", eng_kernel_name(num.kernel), sizes[i], e2);
                rc = hx_bench_failed(st);
            } else n_rows++;
        }
        if (eng_stderr_is_tty()) fprintf(stderr, "\r%60s\r", "");
        set_free(&set);
        eng_model_free(m);
    }
    if (rc != ENG_OK) return rc;
    load_avg(la1);
    if (a.json) rc = print_json(&a, rows, n_rows, la0, la1, &info, ref_path);
    else print_rows(&a, rows, n_rows, la0, la1, &info, ref_path);
    if (rc) return eng_errf(err, errlen, "bench --batch: out of memory"), rc;
    return hx_bench_flush("bench --batch", err, errlen);
}
