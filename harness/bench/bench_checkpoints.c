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
#include "bench_engine.h"
#include "bench_util.h"
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
    char           *err;
    size_t          errlen;
} op_ctx;

/* One call of the operation: ENG_OK, or its failure with x->err set. */
typedef int (*op_fn)(op_ctx *x);

static int op_save(op_ctx *x) {
    eng_ckpt *c = eng_seq_checkpoint(x->s);
    if (!c) return eng_errf(x->err, x->errlen, "bench: checkpoint: out of memory"), ENG_ERR_NOMEM;
    eng_ckpt_free(c);
    return ENG_OK;
}

static int op_restore(op_ctx *x) {
    int rc = eng_seq_restore(x->s, x->c);
    if (rc != ENG_OK) eng_errf(x->err, x->errlen, "bench: restore failed: %s", eng_status_str(rc));
    return hx_bench_failed(rc);
}

static int op_serialize(op_ctx *x) {
    int rc = eng_seq_serialize(x->s, x->a, x->n, NULL);
    if (rc != ENG_OK) eng_errf(x->err, x->errlen, "bench: serialize failed: %s", eng_status_str(rc));
    return hx_bench_failed(rc);
}

static int op_memcpy(op_ctx *x) {
    memcpy(x->b, x->a, x->n);
    __asm__ __volatile__("" : : "r"(x->b) : "memory");  /* keep the copy */
    return ENG_OK;
}

static int op_memcpy_fresh(op_ctx *x) {
    void *d = malloc(x->n ? x->n : 1);
    if (!d) return eng_errf(x->err, x->errlen, "bench: out of memory"), ENG_ERR_NOMEM;
    memcpy(d, x->a, x->n);
    __asm__ __volatile__("" : : "r"(d) : "memory");
    free(d);
    return ENG_OK;
}

/* Seconds per call into *sec; the first failing call's status. */
static int time_op(op_fn f, op_ctx *x, double *sec) {
    int64_t k = 1;
    int rc = ENG_OK;
    for (;;) {  /* calls per batch: enough for BATCH_S */
        double t0 = eng_now_s();
        for (int64_t i = 0; i < k && !rc; i++) rc = f(x);
        double dt = eng_now_s() - t0;
        if (rc) return rc;
        if (dt >= BATCH_S || k >= ((int64_t)1 << 30)) break;
        k = dt > 0 ? (int64_t)(k * (BATCH_S / dt) * 1.2) + 1 : k * 10;
    }
    double t[BATCHES];
    for (int b = 0; b < BATCHES; b++) {
        double t0 = eng_now_s();
        for (int64_t i = 0; i < k && !rc; i++) rc = f(x);
        t[b] = (eng_now_s() - t0) / (double)k;
        if (rc) return rc;
    }
    *sec = hx_median(t, BATCHES);
    return ENG_OK;
}

// ----------------------------------------------------------------------------

typedef struct row {
    int32_t tokens;
    double  prefill_s, tok_s, gflops;
    size_t  ckpt_bytes, ser_bytes;
    double  save_s, restore_s, ser_s, memcpy_s, memcpy_fresh_s;
} row;

static double rate(size_t bytes, double s) { return s > 0 ? (double)bytes / s : 0.0; }

/* Times the operations on the checkpoint of s at r->tokens into r. */
static int measure_ckpt(eng_seq *s, row *r, char *err, size_t errlen) {
    op_ctx x = {.s = s, .err = err, .errlen = errlen};
    eng_ckpt *c = eng_seq_checkpoint(s);
    int rc = ENG_OK;
    if (!c) {
        rc = (eng_errf(err, errlen, "bench: checkpoint: out of memory"), ENG_ERR_NOMEM);
        goto out;
    }
    x.c = c;
    r->ckpt_bytes = eng_ckpt_size(c);
    r->ser_bytes = eng_seq_serialized_size(s);
    if ((rc = time_op(op_save, &x, &r->save_s)) || (rc = time_op(op_restore, &x, &r->restore_s))) goto out;
    x.n = r->ser_bytes;
    if (!(x.a = malloc(x.n))) {
        rc = (eng_errf(err, errlen, "bench: out of memory"), ENG_ERR_NOMEM);
        goto out;
    }
    if ((rc = time_op(op_serialize, &x, &r->ser_s))) goto out;
    free(x.a);
    x.n = r->ckpt_bytes;
    x.a = calloc(x.n ? x.n : 1, 1);
    x.b = calloc(x.n ? x.n : 1, 1);
    if (!x.a || !x.b) {
        rc = (eng_errf(err, errlen, "bench: out of memory"), ENG_ERR_NOMEM);
        goto out;
    }
    if ((rc = time_op(op_memcpy, &x, &r->memcpy_s))) goto out;
    rc = time_op(op_memcpy_fresh, &x, &r->memcpy_fresh_s);
out:
    free(x.a);
    free(x.b);
    eng_ckpt_free(c);
    return rc;
}

static int prefill_failed(int rc, char *err, size_t errlen) {
    eng_errf(err, errlen, "bench: prefill failed: %s", eng_status_str(rc));
    return hx_bench_failed(rc);
}

int hx_bench_checkpoints(int argc, char **argv, char *err, size_t errlen) {
    if (hx_wants_help(argc, argv)) { hx_usage(stdout, k_usage, k_options); return ENG_OK; }
    ckpt_args a = {.num = eng_numerics_default(), .chunk = 64, .reps = 1, .lengths = {{2048, 8192, 32768}, 3}};
    int rc = hx_bench_args(k_options, &a, argc, argv, "bench --checkpoints", err, errlen);
    if (rc) return rc;
    const char *model = a.model;
    eng_numerics num = a.num;
    int64_t chunk = a.chunk, reps = a.reps, seed = a.seed;
    const int32_t *lengths = a.lengths.v;
    int n_len = a.lengths.n;
    bool json = a.json;
    if (!model)
        return eng_errf(err, errlen, "bench --checkpoints: -m MODEL.gguf is required (see --help)"), ENG_ERR_ARG;

    eng_model *m = NULL;
    int32_t *toks = NULL;
    float *logits = NULL;
    eng_seq *s = NULL;
    double *t = NULL;
    row *rows = NULL;
    if ((rc = hx_bench_load(model, &num, &m, err, errlen))) goto out;
    const eng_model_info *in = eng_model_get_info(m);
    int32_t max_len = 0;
    for (int i = 0; i < n_len; i++) max_len = lengths[i] > max_len ? lengths[i] : max_len;
    toks = malloc(sizeof(int32_t) * (size_t)max_len);
    logits = malloc(sizeof(float) * (size_t)in->n_vocab);
    s = eng_seq_new(m, max_len);
    t = malloc(sizeof(double) * (size_t)reps);
    rows = calloc((size_t)n_len, sizeof *rows);
    if (!toks || !logits || !s || !t || !rows || hx_random_tokens((uint64_t)seed, toks, max_len, in->n_vocab)) {
        rc = (eng_errf(err, errlen, "bench: out of memory"), ENG_ERR_NOMEM);
        goto out;
    }
    eng_prefill_params pp = eng_prefill_params_default();
    pp.chunk = (int32_t)chunk;

    {   /* warm-up: the smallest length, untimed */
        int32_t w = lengths[0];
        for (int i = 1; i < n_len; i++) w = lengths[i] < w ? lengths[i] : w;
        if ((rc = eng_prefill(s, toks, w, &pp, logits)) != ENG_OK) {
            rc = prefill_failed(rc, err, errlen);
            goto out;
        }
    }
    for (int li = 0; li < n_len; li++) {
        row *r = &rows[li];
        const int32_t L = lengths[li];
        r->tokens = L;
        for (int k = 0; k < reps; k++) {
            eng_seq_reset(s);
            double t0 = eng_now_s();
            if ((rc = eng_prefill(s, toks, L, &pp, logits)) != ENG_OK) {
                rc = prefill_failed(rc, err, errlen);
                goto out;
            }
            t[k] = eng_now_s() - t0;
            if (eng_stderr_is_tty())
                fprintf(stderr, "\rbench: %d tokens, rep %d/%lld: %.2f s   ", L, k + 1, (long long)reps, t[k]);
        }
        if (eng_stderr_is_tty()) fprintf(stderr, "\r%60s\r", "");
        r->prefill_s = hx_median(t, (int)reps);
        r->tok_s = L / r->prefill_s;
        r->gflops = eng_model_prefill_flops_params(m, 0, L, &pp) / r->prefill_s / 1e9;
        if ((rc = measure_ckpt(s, r, err, errlen))) goto out;
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
        if (hx_bench_print_json(o)) {
            rc = (eng_errf(err, errlen, "bench: out of memory"), ENG_ERR_NOMEM);
            goto out;
        }
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
    rc = hx_bench_flush("bench --checkpoints", err, errlen);
out:
    free(rows);
    free(t);
    eng_seq_free(s);
    free(logits);
    free(toks);
    eng_model_free(m);
    return rc;
}
