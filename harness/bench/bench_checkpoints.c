/*
 * harness/bench/bench_checkpoints.c: `kvreplay bench --checkpoints`: what a
 * context checkpoint costs, against the machine's memcpy measured in the
 * same run, and prefill throughput at the scaled context lengths.
 *
 * For each length L (default 2048, 8192, 32768): one sequence is prefilled
 * cold with L seeded random tokens (median of --reps timed prefills after
 * one untimed warm-up at the smallest length; tokens/s and GFLOP/s of the
 * cost model), then, at L:
 *   save:      eng_seq_checkpoint (allocates and copies the SWA window and
 *              the recurrent + conv state) and eng_ckpt_free, per call;
 *   restore:   eng_seq_restore of that checkpoint (copies it back and
 *              truncates full-attention KV, here to L itself);
 *   serialize: eng_seq_serialize of the whole state into a preallocated
 *              buffer (full-attention KV included), for scale;
 *   memcpy:    memcpy of the checkpoint's byte count between two
 *              preallocated buffers (warm), and malloc + memcpy + free of a
 *              fresh buffer (what save also pays).
 * Each of these is timed in batches of calls lasting at least 20 ms, five
 * batches, the median batch reported as bytes/s; ratios are save and
 * restore over warm memcpy.
 */

#include <jansson.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"
#include "cli.h"
#include "bench_util.h"
#include "errors.h"
#include "model.h"
#include "options.h"
#include "stats.h"
#include "status.h"
#include "util.h"

#define BATCHES     5
#define BATCH_S     0.02

static const char k_usage[] =
    "usage: kvreplay bench --checkpoints -m MODEL.gguf [OPTIONS]\n"
    "\n"
    "Checkpoint save/restore throughput (bytes/s) against memcpy measured in the same run,\n"
    "and cold prefill tokens/s at each context length.\n"
    "\n";

typedef struct ckpt_args {
    const char  *model;
    eng_numerics num;
    int32_t      chunk, reps;
    int64_t      seed;
    hx_int_list  lengths;
    bool         json, self;
} ckpt_args;

#define OPT(field) offsetof(ckpt_args, field)
static const hx_option k_options[] = {
    {"--checkpoints", NULL, NULL, NULL, HX_OPT_FLAG, OPT(self), 0, 0, NULL},
    {"--model", "-m", "FILE", "GGUF model (required); a hybrid or SWA model has a non-empty\n"
     "checkpoint, a llama model an empty one", HX_OPT_STRING, OPT(model), 0, 0, NULL},
    {"--lengths", NULL, "LIST", "comma-separated context lengths (default 2048,8192,32768)", HX_OPT_LIST,
     OPT(lengths), 1, 1 << 22, NULL},
    HX_OPTS_ENGINE(ckpt_args),
    {"--reps", NULL, "R", "timed prefills per length, median reported (default 1)", HX_OPT_INT, OPT(reps), 1, 1000,
     NULL},
    {"--seed", NULL, "S", "prompt token seed (default 0)", HX_OPT_INT64, OPT(seed), 0, INT64_MAX, NULL},
    {"--json", NULL, NULL, "one JSON object on stdout", HX_OPT_FLAG, OPT(json), 0, 0, NULL},
    {0},
};

// ----------------------------------------------------------------------------
// Timing of one operation: seconds per call, the median of BATCHES batches

typedef struct op_ctx {
    eng_seq        *s;
    const eng_ckpt *c;
    void           *a, *b;  /* memcpy buffers, or the serialize buffer in a */
    size_t          n;      /* bytes */
} op_ctx;

typedef void (*op_fn)(op_ctx *x);

static void op_save(op_ctx *x) {
    eng_ckpt *c = eng_seq_checkpoint(x->s);
    if (!c) hx_die(HX_EXIT_INTERNAL, "bench: checkpoint: out of memory");
    eng_ckpt_free(c);
}

static void op_restore(op_ctx *x) {
    int rc = eng_seq_restore(x->s, x->c);
    if (rc != ENG_OK) hx_die(HX_EXIT_INTERNAL, "bench: restore failed: %s", eng_status_str(rc));
}

static void op_serialize(op_ctx *x) {
    int rc = eng_seq_serialize(x->s, x->a, x->n, NULL);
    if (rc != ENG_OK) hx_die(HX_EXIT_INTERNAL, "bench: serialize failed: %s", eng_status_str(rc));
}

static void op_memcpy(op_ctx *x) {
    memcpy(x->b, x->a, x->n);
    __asm__ __volatile__("" : : "r"(x->b) : "memory");  /* keep the copy */
}

static void op_memcpy_fresh(op_ctx *x) {
    void *d = malloc(x->n ? x->n : 1);
    if (!d) hx_die(HX_EXIT_INTERNAL, "bench: out of memory");
    memcpy(d, x->a, x->n);
    __asm__ __volatile__("" : : "r"(d) : "memory");
    free(d);
}

static double time_op(op_fn f, op_ctx *x) {
    int64_t k = 1;
    for (;;) {  /* calls per batch: enough for BATCH_S */
        double t0 = eng_now_s();
        for (int64_t i = 0; i < k; i++) f(x);
        double dt = eng_now_s() - t0;
        if (dt >= BATCH_S || k >= ((int64_t)1 << 30)) break;
        k = dt > 0 ? (int64_t)(k * (BATCH_S / dt) * 1.2) + 1 : k * 10;
    }
    double t[BATCHES];
    for (int b = 0; b < BATCHES; b++) {
        double t0 = eng_now_s();
        for (int64_t i = 0; i < k; i++) f(x);
        t[b] = (eng_now_s() - t0) / (double)k;
    }
    return hx_median(t, BATCHES);
}

// ----------------------------------------------------------------------------

typedef struct row {
    int32_t tokens;
    double  prefill_s, tok_s, gflops;
    size_t  ckpt_bytes, ser_bytes;
    double  save_s, restore_s, ser_s, memcpy_s, memcpy_fresh_s;
} row;

static double rate(size_t bytes, double s) { return s > 0 ? (double)bytes / s : 0.0; }

int hx_bench_checkpoints(int argc, char **argv) {
    if (hx_wants_help(argc, argv)) { hx_usage(stdout, k_usage, k_options); return HX_EXIT_OK; }
    ckpt_args a = {.num = eng_numerics_default(), .chunk = 64, .reps = 1, .lengths = {{2048, 8192, 32768}, 3}};
    for (int i = 1; i < argc; i++)
        if (!hx_options_parse(k_options, &a, argc, argv, &i)) hx_bad_arg("bench --checkpoints", argv[i]);
    const char *model = a.model;
    eng_numerics num = a.num;
    int64_t chunk = a.chunk, reps = a.reps, seed = a.seed;
    const int32_t *lengths = a.lengths.v;
    int n_len = a.lengths.n;
    bool json = a.json;
    if (!model) hx_die(HX_EXIT_USAGE, "bench --checkpoints: -m MODEL.gguf is required (see --help)");

    char err[512] = "";
    eng_model *m = NULL;
    int rc = eng_model_load(model, &num, &m, err, sizeof err);
    if (rc != ENG_OK)
        hx_die(hx_exit_for_input(rc), "%s", err[0] ? err : eng_status_str(rc));
    const eng_model_info *in = eng_model_get_info(m);
    int32_t max_len = 0;
    for (int i = 0; i < n_len; i++) max_len = lengths[i] > max_len ? lengths[i] : max_len;
    int32_t *toks = malloc(sizeof(int32_t) * (size_t)max_len);
    float *logits = malloc(sizeof(float) * (size_t)in->n_vocab);
    eng_seq *s = eng_seq_new(m, max_len);
    double *t = malloc(sizeof(double) * (size_t)reps);
    row *rows = calloc((size_t)n_len, sizeof *rows);
    if (!toks || !logits || !s || !t || !rows) hx_die(HX_EXIT_INTERNAL, "bench: out of memory");
    hx_random_tokens((uint64_t)seed, toks, max_len, in->n_vocab);
    eng_prefill_params pp = eng_prefill_params_default();
    pp.chunk = (int32_t)chunk;

    {   /* warm-up: the smallest length, untimed */
        int32_t w = lengths[0];
        for (int i = 1; i < n_len; i++) w = lengths[i] < w ? lengths[i] : w;
        if ((rc = eng_prefill(s, toks, w, &pp, logits)) != ENG_OK)
            hx_die(HX_EXIT_INTERNAL, "bench: prefill failed: %s", eng_status_str(rc));
    }
    for (int li = 0; li < n_len; li++) {
        row *r = &rows[li];
        const int32_t L = lengths[li];
        r->tokens = L;
        for (int k = 0; k < reps; k++) {
            eng_seq_reset(s);
            double t0 = eng_now_s();
            if ((rc = eng_prefill(s, toks, L, &pp, logits)) != ENG_OK)
                hx_die(HX_EXIT_INTERNAL, "bench: prefill failed: %s", eng_status_str(rc));
            t[k] = eng_now_s() - t0;
            if (eng_stderr_is_tty())
                fprintf(stderr, "\rbench: %d tokens, rep %d/%lld: %.2f s   ", L, k + 1, (long long)reps, t[k]);
        }
        if (eng_stderr_is_tty()) fprintf(stderr, "\r%60s\r", "");
        r->prefill_s = hx_median(t, (int)reps);
        r->tok_s = L / r->prefill_s;
        r->gflops = eng_model_prefill_flops_params(m, 0, L, &pp) / r->prefill_s / 1e9;

        eng_ckpt *c = eng_seq_checkpoint(s);
        if (!c) hx_die(HX_EXIT_INTERNAL, "bench: checkpoint: out of memory");
        r->ckpt_bytes = eng_ckpt_size(c);
        r->ser_bytes = eng_seq_serialized_size(s);
        op_ctx x = {.s = s, .c = c};
        r->save_s = time_op(op_save, &x);
        r->restore_s = time_op(op_restore, &x);
        x.n = r->ser_bytes;
        x.a = malloc(x.n);
        if (!x.a) hx_die(HX_EXIT_INTERNAL, "bench: out of memory");
        r->ser_s = time_op(op_serialize, &x);
        free(x.a);
        x.n = r->ckpt_bytes;
        x.a = calloc(x.n ? x.n : 1, 1);
        x.b = calloc(x.n ? x.n : 1, 1);
        if (!x.a || !x.b) hx_die(HX_EXIT_INTERNAL, "bench: out of memory");
        r->memcpy_s = time_op(op_memcpy, &x);
        r->memcpy_fresh_s = time_op(op_memcpy_fresh, &x);
        free(x.a);
        free(x.b);
        eng_ckpt_free(c);
    }

    if (json) {
        json_t *o = json_object();
        json_object_set_new(o, "model", json_string(model));
        json_object_set_new(o, "arch", json_string(in->arch));
        json_object_set_new(o, "model_sha256", json_string(in->sha256));
        json_object_set_new(o, "n_layer_attn", json_integer(in->n_layer_attn));
        json_object_set_new(o, "n_layer_swa", json_integer(in->n_layer_swa));
        json_object_set_new(o, "n_layer_rec", json_integer(in->n_layer_rec));
        json_object_set_new(o, "kernel", json_string(eng_kernel_name(num.kernel)));
        json_object_set_new(o, "precision", json_string(eng_precision_name(num.precision)));
        json_object_set_new(o, "threads", json_integer(num.n_threads));
        json_object_set_new(o, "chunk", json_integer(chunk));
        json_object_set_new(o, "reps", json_integer(reps));
        json_object_set_new(o, "seed", json_integer(seed));
        json_t *arr = json_array();
        for (int li = 0; li < n_len; li++) {
            const row *r = &rows[li];
            json_t *e = json_object();
            json_object_set_new(e, "tokens", json_integer(r->tokens));
            json_object_set_new(e, "prefill_s", json_real(r->prefill_s));
            json_object_set_new(e, "prefill_tok_s", json_real(r->tok_s));
            json_object_set_new(e, "gflops", json_real(r->gflops));
            json_object_set_new(e, "ckpt_bytes", json_integer((json_int_t)r->ckpt_bytes));
            json_object_set_new(e, "save_bytes_s", json_real(rate(r->ckpt_bytes, r->save_s)));
            json_object_set_new(e, "restore_bytes_s", json_real(rate(r->ckpt_bytes, r->restore_s)));
            json_object_set_new(e, "memcpy_bytes_s", json_real(rate(r->ckpt_bytes, r->memcpy_s)));
            json_object_set_new(e, "memcpy_fresh_bytes_s", json_real(rate(r->ckpt_bytes, r->memcpy_fresh_s)));
            /* ratios only mean something for a non-empty checkpoint */
            json_object_set_new(e, "save_ratio", r->ckpt_bytes ? json_real(r->memcpy_s / r->save_s) : json_null());
            json_object_set_new(e, "restore_ratio",
                                r->ckpt_bytes ? json_real(r->memcpy_s / r->restore_s) : json_null());
            json_object_set_new(e, "save_us", json_real(1e6 * r->save_s));
            json_object_set_new(e, "restore_us", json_real(1e6 * r->restore_s));
            json_object_set_new(e, "serialize_bytes", json_integer((json_int_t)r->ser_bytes));
            json_object_set_new(e, "serialize_bytes_s", json_real(rate(r->ser_bytes, r->ser_s)));
            json_array_append_new(arr, e);
        }
        json_object_set_new(o, "lengths", arr);
        hx_bench_print_json(o);
    } else {
        printf("model %s (%s): %d layers: %d attn, %d attn_swa (window %d), %d recurrent; %s/%s, %d threads, "
               "chunk %lld, median of %lld prefills\n",
               model, in->arch, in->n_layer, in->n_layer_attn, in->n_layer_swa, in->n_swa, in->n_layer_rec,
               eng_kernel_name(num.kernel), eng_precision_name(num.precision), num.n_threads, (long long)chunk,
               (long long)reps);
        printf("%8s %10s %9s %8s %11s %10s %10s %10s %10s %8s %8s %11s %9s\n", "tokens", "prefill_s", "tok/s",
               "GFLOP/s", "ckpt_bytes", "save_GB/s", "rest_GB/s", "mcpy_GB/s", "fresh_GB/s", "save/mc", "rest/mc",
               "ser_bytes", "ser_GB/s");
        for (int li = 0; li < n_len; li++) {
            const row *r = &rows[li];
            printf("%8d %10.3f %9.1f %8.2f %11zu ", r->tokens, r->prefill_s, r->tok_s, r->gflops, r->ckpt_bytes);
            if (r->ckpt_bytes)
                printf("%10.2f %10.2f %10.2f %10.2f %8.2f %8.2f ", rate(r->ckpt_bytes, r->save_s) / 1e9,
                       rate(r->ckpt_bytes, r->restore_s) / 1e9, rate(r->ckpt_bytes, r->memcpy_s) / 1e9,
                       rate(r->ckpt_bytes, r->memcpy_fresh_s) / 1e9, r->memcpy_s / r->save_s,
                       r->memcpy_s / r->restore_s);
            else  /* an empty checkpoint (full attention only): nothing to compare */
                printf("%10s %10s %10s %10s %8s %8s ", "-", "-", "-", "-", "-", "-");
            printf("%11zu %9.2f\n", r->ser_bytes, rate(r->ser_bytes, r->ser_s) / 1e9);
        }
        printf("save/mc, rest/mc: save and restore throughput as a fraction of the warm memcpy of the same bytes;\n"
               "fresh: malloc + memcpy + free of a new buffer, as a save also allocates\n");
    }
    free(rows);
    free(t);
    eng_seq_free(s);
    free(logits);
    free(toks);
    eng_model_free(m);
    return fflush(stdout) == 0 ? HX_EXIT_OK : HX_EXIT_INTERNAL;
}
