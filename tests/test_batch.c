/*
 * tests/test_batch.c: steps over several sequences (engine/batch.c,
 * model.h "Batches").
 *
 *   - batch invariance under ref: for every synthetic architecture (llama,
 *     swa (cohere2), kvreplay-swa, recurrent (Mamba-2), hybrid, rwkv7: all
 *     the layer kinds), a target sequence's logits and its whole state
 *     (token ids, KV rows, window cells, recurrent and conv state,
 *     serialised bytes) after every step are memcmp-identical whether
 *     computed alone (eng_prefill / eng_decode, one thread, the fastest
 *     path) or inside steps with 1 to 7 other sequences at random chunk
 *     offsets (prefill chunks and decode tokens mixed, the target's row
 *     anywhere in the stack; seeded schedules, the seed printed), at 1 and
 *     2 threads, fp32 and bf16, on every vector path the CPU runs;
 *   - the checker catches a planted fault: ENG_BATCH_FAULT_SPLIT_K, one
 *     row's reduction order depending on the batch;
 *   - blas: a step of one span is the sequence's own step, bit for bit,
 *     and a step with other sequences changes the target's bits
 *     (OpenBLAS's sgemm over the stacked rows instead of its sgemv for one
 *     row): counted and asserted;
 *   - the contract: a span that leaves its grid cell, a sequence twice, a
 *     sequence of another model, a token outside the vocabulary, n_ctx
 *     exceeded are refused with a message naming the span, and no state
 *     changes; eng_batch_chunk_len cuts eng_prefill's chunks;
 *   - `kvreplay bench --batch` (skipped without $BUILD/kvreplay): its rows
 *     per kernel and size, bits identical under ref and for one span.
 *
 * Paths the CPU does not run are skipped with a message (the scalar path
 * always runs).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "internal.h"
#include "kernels.h"
#include "model.h"
#include "runcli.h"
#include "seqcheck.h"
#include "status.h"
#include "synth.h"

#define MAX_ARCH 16
#define NSEQ     8     /* the target (0) and 7 others */
#define CH       64    /* the grid */
#define TGT_CTX  320
#define OTH_CTX  512
#define STREAM   1024  /* token ids per sequence's stream */
#define MAX_STEP 24
#define N_TRIALS 3     /* seeded schedules per architecture and precision */

static char g_dir[64];
static int g_n_arch;
static const char *g_arch[MAX_ARCH];
static char g_path[MAX_ARCH][128];

// ----------------------------------------------------------------------------
// Models

static int setup(void **state) {
    (void)state;
    snprintf(g_dir, sizeof g_dir, "/tmp/kvr_batch_XXXXXX");
    if (!mkdtemp(g_dir)) return -1;
    for (const char *a; (a = eng_synth_arch_name(g_n_arch)) && g_n_arch < MAX_ARCH; g_n_arch++) {
        g_arch[g_n_arch] = a;
        snprintf(g_path[g_n_arch], sizeof g_path[0], "%s/%s.gguf", g_dir, a);
        eng_synth_params p = eng_synth_preset_arch(a, "tiny");
        p.seed = 36 + g_n_arch;
        char err[256];
        if (eng_synth_write(&p, g_path[g_n_arch], err, sizeof err) != ENG_OK) {
            fprintf(stderr, "synth %s: %s\n", a, err);
            return -1;
        }
    }
    return g_n_arch > 0 ? 0 : -1;
}

static int teardown(void **state) {
    (void)state;
    for (int a = 0; a < g_n_arch; a++) unlink(g_path[a]);
    rmdir(g_dir);
    return 0;
}

static eng_model *load(int a, eng_kernel k, eng_precision p, int32_t threads) {
    eng_numerics num = {.kernel = k, .precision = p, .n_threads = threads};
    eng_model *m = NULL;
    char err[256] = "";
    if (eng_model_load(g_path[a], &num, &m, err, sizeof err) != ENG_OK) fail_msg("load %s: %s", g_path[a], err);
    return m;
}

/* The paths this CPU runs: scalar, then avx2 and avx512 when available. */
static int paths(eng_kpath out[3]) {
    const eng_kpath best = eng_kpath_best();
    int n = 0;
    for (int p = ENG_KPATH_SCALAR; p <= (int)best; p++) out[n++] = (eng_kpath)p;
    return n;
}

// ----------------------------------------------------------------------------
// Schedules: which sequences join each step with which span, drawn from a
// seed before anything is computed (no choice depends on a result)

static uint64_t g_rng;
static uint32_t rnd(uint32_t n) {  /* splitmix64, uniform enough in [0, n) */
    uint64_t z = (g_rng += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return (uint32_t)((z ^ (z >> 31)) % n);
}

typedef struct tspan {
    int32_t seq, n, off;  /* sequence, tokens, their offset in its stream */
    int32_t want;         /* 0 no logits, 1 the last token's, 2 every token's */
} tspan;

typedef struct tstep {
    int32_t  n_span;
    uint32_t reset;       /* bit i: sequence i starts over (eng_seq_reset) before the step */
    tspan    sp[NSEQ];    /* in stack order */
} tstep;

typedef struct trial {
    uint64_t seed;
    int32_t  pre[NSEQ];            /* tokens each sequence prefills alone first (a cached prefix) */
    int32_t  tok[NSEQ][STREAM];    /* each sequence's token stream */
    int32_t  n_steps;
    tstep    step[MAX_STEP];
} trial;

/* The target: a prefix of pre[0] tokens, then a prompt of 1..150 tokens in
 * grid chunks and 1..8 decode tokens, one span per step. Each step 1 to 7
 * others (none when solo) join with their next span: a grid chunk while
 * they have prompt left, else a decode token; now and then a new prompt or
 * a fresh start. Spans are shuffled: the target's rows land anywhere. */
static void make_trial(trial *tr, uint64_t seed, int32_t V, bool solo) {
    memset(tr, 0, sizeof *tr);
    tr->seed = g_rng = seed;
    for (int i = 0; i < NSEQ; i++)
        for (int j = 0; j < STREAM; j++) tr->tok[i][j] = (int32_t)rnd((uint32_t)V);
    int32_t pos[NSEQ], cur[NSEQ], left[NSEQ];
    for (int i = 0; i < NSEQ; i++) {
        tr->pre[i] = (int32_t)rnd(i == 0 ? 101 : 131);
        pos[i] = cur[i] = tr->pre[i];
        left[i] = 1 + (int32_t)rnd(150);
    }
    int32_t decodes = 1 + (int32_t)rnd(8);
    while (left[0] > 0 || decodes > 0) {
        ENG_ASSERT(tr->n_steps < MAX_STEP);
        tstep *st = &tr->step[tr->n_steps++];
        int32_t who[NSEQ] = {0, 1, 2, 3, 4, 5, 6, 7};
        for (int i = NSEQ - 1; i > 1; i--) {  /* the others in random order */
            const int j = 1 + (int)rnd((uint32_t)i);
            const int32_t t = who[i]; who[i] = who[j]; who[j] = t;
        }
        const int k = solo ? 0 : 1 + (int)rnd(NSEQ - 1);
        for (int w = 0; w <= k; w++) {
            const int i = who[w];
            if (i != 0 && left[i] == 0 && rnd(8) == 0) left[i] = 1 + (int32_t)rnd(200);  /* a new turn */
            if (i != 0 && pos[i] + CH > OTH_CTX) {  /* no room: starts over */
                st->reset |= 1u << i;
                pos[i] = 0;
                left[i] = 1 + (int32_t)rnd(200);
            }
            int32_t n = 1;
            if (left[i] > 0) {
                n = CH - pos[i] % CH;
                if (n > left[i]) n = left[i];
                left[i] -= n;
            } else if (i == 0) {
                decodes--;
            }
            if (cur[i] + n > STREAM) cur[i] = 0;
            tspan *sp = &st->sp[st->n_span++];
            *sp = (tspan){.seq = i, .n = n, .off = cur[i], .want = i == 0 ? (n > 1 ? 2 : 1) : (int32_t)rnd(3)};
            pos[i] += n;
            cur[i] += n;
        }
        for (int j = st->n_span - 1; j > 0; j--) {  /* stack order */
            const int r = (int)rnd((uint32_t)j + 1);
            const tspan t = st->sp[j]; st->sp[j] = st->sp[r]; st->sp[r] = t;
        }
    }
}

static int target_index(const tstep *st) {
    for (int j = 0; j < st->n_span; j++)
        if (st->sp[j].seq == 0) return j;
    return -1;
}

// ----------------------------------------------------------------------------
// The target alone: eng_prefill / eng_decode, its logits and serialised
// state after the prefix and after every step

typedef struct ref {
    int32_t V, n_steps;
    float  *lg[MAX_STEP];      /* the step's logits: n * V (prefill chunk) or V */
    char   *blob[MAX_STEP + 1]; /* [0] after the prefix, [s + 1] after step s */
    size_t  n_blob[MAX_STEP + 1];
} ref;

static void ref_free(ref *r) {
    for (int s = 0; s < MAX_STEP; s++) free(r->lg[s]);
    for (int s = 0; s <= MAX_STEP; s++) free(r->blob[s]);
    memset(r, 0, sizeof *r);
}

static void ref_alone(const trial *tr, const eng_model *m, ref *r) {
    memset(r, 0, sizeof *r);
    r->V = eng_model_get_info(m)->n_vocab;
    r->n_steps = tr->n_steps;
    eng_seq *s = eng_seq_new(m, TGT_CTX);
    assert_non_null(s);
    eng_prefill_params pp = eng_prefill_params_default();
    if (tr->pre[0] > 0) assert_int_equal(eng_prefill(s, tr->tok[0], tr->pre[0], &pp, NULL), ENG_OK);
    r->blob[0] = sc_blob(s, &r->n_blob[0]);
    pp.all_logits = true;
    for (int i = 0; i < tr->n_steps; i++) {
        const tspan *sp = &tr->step[i].sp[target_index(&tr->step[i])];
        r->lg[i] = malloc(sizeof(float) * (size_t)sp->n * (size_t)r->V);
        if (sp->want == 2) assert_int_equal(eng_prefill(s, tr->tok[0] + sp->off, sp->n, &pp, r->lg[i]), ENG_OK);
        else assert_int_equal(eng_decode(s, tr->tok[0][sp->off], r->lg[i]), ENG_OK);
        r->blob[i + 1] = sc_blob(s, &r->n_blob[i + 1]);
    }
    eng_seq_free(s);
}

// ----------------------------------------------------------------------------
// The checker: the target inside the trial's steps against its reference

/* Describes how s differs from the reference state in blob (why). */
static void describe_state(const eng_seq *s, const char *blob, size_t n, char *why, size_t cap) {
    eng_seq *r = eng_seq_new(eng_seq_model(s), TGT_CTX);
    eng_seq_diff d = {0};
    if (r && eng_seq_deserialize(r, blob, n) == ENG_OK && eng_seq_compare(s, r, &d) == ENG_OK && !d.equal)
        snprintf(why, cap, "state differs: part %d, layer %d, position %d, element %lld", d.part, d.layer, d.pos,
                 (long long)d.index);
    else
        snprintf(why, cap, "serialised state differs (%zu bytes)", n);
    eng_seq_free(r);
}

/* Runs the trial on m (its kctx.path as set) with the fault f planted and
 * compares the target after the prefix and after every step with r.
 * Returns 0 when every byte is equal, else the step (1-based; -1: the
 * prefix) of the first difference, described in why. */
static int run_batched(const trial *tr, eng_model *m, eng_batch_fault f, const ref *r, char *why, size_t cap) {
    const int32_t V = r->V;
    eng_seq *s[NSEQ];
    for (int i = 0; i < NSEQ; i++) {
        s[i] = eng_seq_new(m, i == 0 ? TGT_CTX : OTH_CTX);
        assert_non_null(s[i]);
        if (tr->pre[i] > 0) assert_int_equal(eng_prefill(s[i], tr->tok[i], tr->pre[i], NULL, NULL), ENG_OK);
    }
    eng_batch *b = eng_batch_new(m);
    assert_non_null(b);
    eng_batch_set_fault(b, f);
    float *lg[NSEQ];
    for (int i = 0; i < NSEQ; i++) lg[i] = malloc(sizeof(float) * CH * (size_t)V);
    int bad = 0;
    size_t n;
    char *blob = sc_blob(s[0], &n);
    if (n != r->n_blob[0] || memcmp(blob, r->blob[0], n)) {
        describe_state(s[0], r->blob[0], r->n_blob[0], why, cap);
        bad = -1;
    }
    free(blob);
    for (int st = 0; st < tr->n_steps && !bad; st++) {
        const tstep *step = &tr->step[st];
        for (int i = 0; i < NSEQ; i++)
            if (step->reset & (1u << i)) eng_seq_reset(s[i]);
        eng_batch_span sp[NSEQ];
        int32_t rows = 0;
        for (int j = 0; j < step->n_span; j++) {
            const tspan *t = &step->sp[j];
            sp[j] = (eng_batch_span){.seq = s[t->seq], .tokens = tr->tok[t->seq] + t->off, .n = t->n,
                                     .logits = t->want ? lg[t->seq] : NULL, .all_logits = t->want == 2};
            rows += t->n;
        }
        char err[256] = "";
        const int rc = eng_batch_forward(b, sp, step->n_span, NULL, err, sizeof err);
        if (rc != ENG_OK) fail_msg("seed %llu, step %d: eng_batch_forward: %s (%s)", (unsigned long long)tr->seed,
                                   st + 1, eng_status_str(rc), err);
        const tspan *t = &step->sp[target_index(step)];
        const int64_t nl = (int64_t)(t->want == 2 ? t->n : 1) * V;
        const int64_t i = eng_first_diff(lg[0], r->lg[st], nl);
        if (i >= 0) {
            snprintf(why, cap, "logits of its token %lld (of %d at position %d), index %lld: %a alone, %a batched "
                     "(%d spans, %d rows)", (long long)(i / V), t->n, eng_seq_n_tokens(s[0]) - t->n,
                     (long long)(i % V), (double)r->lg[st][i], (double)lg[0][i], step->n_span, rows);
            bad = st + 1;
            break;
        }
        blob = sc_blob(s[0], &n);
        if (n != r->n_blob[st + 1] || memcmp(blob, r->blob[st + 1], n)) {
            describe_state(s[0], r->blob[st + 1], r->n_blob[st + 1], why, cap);
            bad = st + 1;
        }
        free(blob);
    }
    for (int i = 0; i < NSEQ; i++) {
        eng_seq_free(s[i]);
        free(lg[i]);
    }
    eng_batch_free(b);
    return bad;
}

/* Steps, others per step (min, max) and rows per step (max) of a trial. */
static void trial_shape(const trial *tr, int *k_min, int *k_max, int *rows_max) {
    *k_min = NSEQ;
    *k_max = 0;
    *rows_max = 0;
    for (int st = 0; st < tr->n_steps; st++) {
        const int k = tr->step[st].n_span - 1;
        int rows = 0;
        for (int j = 0; j < tr->step[st].n_span; j++) rows += tr->step[st].sp[j].n;
        if (k < *k_min) *k_min = k;
        if (k > *k_max) *k_max = k;
        if (rows > *rows_max) *rows_max = rows;
    }
}

// ----------------------------------------------------------------------------
// Batch invariance under ref

static void ref_rows_do_not_depend_on_the_other_sequences_of_a_step(void **state) {
    (void)state;
    static trial tr;
    eng_kpath ps[3];
    const int np = paths(ps);
    if (np < 3) print_message("this CPU runs %d of the 3 ref paths (best %s): the others are not checked\n", np,
                              eng_kpath_name(eng_kpath_best()));
    int checked = 0;
    for (int a = 0; a < g_n_arch; a++)
        for (int pr = 0; pr < 2; pr++) {
            const eng_precision prec = pr ? ENG_PRECISION_BF16 : ENG_PRECISION_FP32;
            eng_model *m1 = load(a, ENG_KERNEL_REF, prec, 1), *m2 = load(a, ENG_KERNEL_REF, prec, 2);
            const int32_t V = eng_model_get_info(m1)->n_vocab;
            for (int t = 0; t < N_TRIALS; t++) {
                const uint64_t seed = 36000 + 100 * (uint64_t)a + 10 * (uint64_t)pr + (uint64_t)t;
                make_trial(&tr, seed, V, false);
                ref r;
                m1->kctx.path = ps[np - 1];
                ref_alone(&tr, m1, &r);
                int k_min, k_max, rows_max;
                trial_shape(&tr, &k_min, &k_max, &rows_max);
                for (int th = 1; th <= 2; th++)
                    for (int pi = 0; pi < np; pi++) {
                        eng_model *m = th == 1 ? m1 : m2;
                        m->kctx.path = ps[pi];
                        char why[320] = "";
                        const int bad = run_batched(&tr, m, ENG_BATCH_FAULT_NONE, &r, why, sizeof why);
                        if (bad)
                            fail_msg("%s %s, seed %llu, %d thread(s), path %s: the target alone and batched differ "
                                     "at step %d: %s", g_arch[a], eng_precision_name(prec),
                                     (unsigned long long)seed, th, eng_kpath_name(ps[pi]), bad, why);
                        checked++;
                    }
                print_message("%s %s seed %llu: %d steps with %d to %d others (up to %d rows), prefix %d: "
                              "identical at 1 and 2 threads on %d path(s)\n", g_arch[a], eng_precision_name(prec),
                              (unsigned long long)seed, tr.n_steps, k_min, k_max, rows_max, tr.pre[0], np);
                ref_free(&r);
            }
            m1->kctx.path = m2->kctx.path = ps[np - 1];
            eng_model_free(m1);
            eng_model_free(m2);
        }
    print_message("%d batched runs identical to the target alone\n", checked);
}

/* The checker above, with one row's reduction order depending on the batch. */
static void a_row_reduced_in_another_order_when_batched_is_caught(void **state) {
    (void)state;
    static trial tr;
    for (int a = 0; a < g_n_arch; a++) {
        eng_model *m = load(a, ENG_KERNEL_REF, ENG_PRECISION_FP32, 2);
        const uint64_t seed = 36900 + (uint64_t)a;
        make_trial(&tr, seed, eng_model_get_info(m)->n_vocab, false);
        ref r;
        ref_alone(&tr, m, &r);
        char why[320] = "";
        assert_int_equal(run_batched(&tr, m, ENG_BATCH_FAULT_NONE, &r, why, sizeof why), 0);
        const int bad = run_batched(&tr, m, ENG_BATCH_FAULT_SPLIT_K, &r, why, sizeof why);
        if (!bad) fail_msg("%s seed %llu: the planted split-K fault was not caught", g_arch[a], (unsigned long long)seed);
        print_message("%s seed %llu: planted split-K fault caught at step %d: %s\n", g_arch[a],
                      (unsigned long long)seed, bad, why);
        /* a step of one span is untouched by the fault (it is the sequence's own step) */
        make_trial(&tr, seed, eng_model_get_info(m)->n_vocab, true);
        ref_free(&r);
        ref_alone(&tr, m, &r);
        assert_int_equal(run_batched(&tr, m, ENG_BATCH_FAULT_SPLIT_K, &r, why, sizeof why), 0);
        ref_free(&r);
        eng_model_free(m);
    }
}

// ----------------------------------------------------------------------------
// blas: a step of one span is the sequence's own; other spans change its bits

static void blas_rows_change_with_the_other_sequences_of_a_step(void **state) {
    (void)state;
    static trial tr;
    int differ = 0, runs = 0;
    for (int a = 0; a < g_n_arch; a++)
        for (int th = 1; th <= 2; th++) {
            eng_model *m = load(a, ENG_KERNEL_BLAS, ENG_PRECISION_FP32, th);
            const int32_t V = eng_model_get_info(m)->n_vocab;
            const uint64_t seed = 37000 + 10 * (uint64_t)a + (uint64_t)th;
            ref r;
            char why[320] = "";
            make_trial(&tr, seed, V, true);  /* alone, through eng_batch_forward */
            ref_alone(&tr, m, &r);
            const int solo = run_batched(&tr, m, ENG_BATCH_FAULT_NONE, &r, why, sizeof why);
            if (solo) fail_msg("%s blas, %d thread(s), seed %llu: a step of one span differs from eng_prefill/"
                               "eng_decode at step %d: %s", g_arch[a], th, (unsigned long long)seed, solo, why);
            ref_free(&r);
            make_trial(&tr, seed, V, false);
            ref_alone(&tr, m, &r);
            const int bad = run_batched(&tr, m, ENG_BATCH_FAULT_NONE, &r, why, sizeof why);
            print_message("%s blas %d thread(s) seed %llu: %s%s\n", g_arch[a], th, (unsigned long long)seed,
                          bad ? "batched differs from alone: " : "batched identical to alone", bad ? why : "");
            differ += bad != 0;
            runs++;
            ref_free(&r);
            eng_model_free(m);
        }
    print_message("blas: %d of %d batched runs differ from the target alone (OpenBLAS core %s)\n", differ, runs,
                  eng_blas_corename());
    assert_true(differ > 0);
}

// ----------------------------------------------------------------------------
// The contract

static void bad_spans_are_refused_and_change_no_state(void **state) {
    (void)state;
    eng_model *m = load(0, ENG_KERNEL_REF, ENG_PRECISION_FP32, 1), *m2 = load(0, ENG_KERNEL_REF, ENG_PRECISION_FP32, 1);
    const int32_t V = eng_model_get_info(m)->n_vocab;
    int32_t toks[80];
    for (int i = 0; i < 80; i++) toks[i] = (i * 37 + 5) % V;
    eng_seq *a = eng_seq_new(m, 128), *b = eng_seq_new(m, 128), *c = eng_seq_new(m2, 128), *small = eng_seq_new(m, 70);
    assert_int_equal(eng_prefill(a, toks, 40, NULL, NULL), ENG_OK);
    assert_int_equal(eng_prefill(small, toks, 69, NULL, NULL), ENG_OK);
    eng_seq *a0 = eng_seq_new(m, 128);
    assert_int_equal(eng_seq_copy(a0, a), ENG_OK);
    eng_batch *bt = eng_batch_new(m);
    float lg[1024];
    int32_t bad_tok = V;
    struct {
        eng_batch_span second;
        int rc;
        const char *msg;
    } cases[] = {
        {{.seq = b, .tokens = toks, .n = 65}, ENG_ERR_ARG, "span 1: n: positions [0, 65) leave the grid cell [0, 64)"},
        {{.seq = a, .tokens = toks, .n = 1}, ENG_ERR_ARG, "span 1: seq: the sequence of span 0 too"},
        {{.seq = c, .tokens = toks, .n = 1}, ENG_ERR_ARG, "span 1: seq: a sequence of another model"},
        {{.seq = b, .tokens = &bad_tok, .n = 1}, ENG_ERR_ARG, "span 1: tokens[0]: id 259 outside the vocabulary"},
        {{.seq = small, .tokens = toks, .n = 2}, ENG_ERR_RANGE, "span 1: n: 2 tokens after 69 exceed"},
        {{.seq = b, .tokens = NULL, .n = 1}, ENG_ERR_ARG, "span 1: tokens: NULL"},
        {{.seq = b, .tokens = toks, .n = 0}, ENG_ERR_ARG, "span 1: n: expected at least 1 token"},
        {{.seq = NULL, .tokens = toks, .n = 1}, ENG_ERR_ARG, "span 1: seq: NULL"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const eng_batch_span sp[2] = {{.seq = a, .tokens = toks + 40, .n = 24, .logits = lg}, cases[i].second};
        char err[256] = "";
        assert_int_equal(eng_batch_forward(bt, sp, 2, NULL, err, sizeof err), cases[i].rc);
        if (!strstr(err, cases[i].msg)) fail_msg("case %zu: message \"%s\", expected \"%s\"", i, err, cases[i].msg);
        sc_same_state(a, a0, "a refused step");
        assert_int_equal(eng_seq_n_tokens(b), 0);
        assert_int_equal(eng_seq_n_tokens(small), 69);
    }
    char err[256] = "";
    assert_int_equal(eng_batch_forward(bt, NULL, 1, NULL, err, sizeof err), ENG_ERR_ARG);
    assert_int_equal(eng_batch_forward(NULL, NULL, 1, NULL, err, sizeof err), ENG_ERR_ARG);
    const eng_batch_span one = {.seq = a, .tokens = toks + 40, .n = 24};
    assert_int_equal(eng_batch_forward(bt, &one, 0, NULL, err, sizeof err), ENG_ERR_ARG);
    eng_batch_params p = eng_batch_params_default();
    p.align = ENG_ALIGN_NONE;
    p.ubatch = 16;
    assert_int_equal(eng_batch_forward(bt, &one, 1, &p, err, sizeof err), ENG_ERR_ARG);
    assert_non_null(strstr(err, "span 0: n: 24 tokens exceed the ubatch 16"));
    p.ubatch = 24;  /* off the grid, as align none allows */
    assert_int_equal(eng_batch_forward(bt, &one, 1, &p, err, sizeof err), ENG_OK);
    assert_int_equal(eng_seq_n_tokens(a), 64);
    eng_batch_free(bt);
    eng_batch_free(NULL);
    eng_seq_free(a); eng_seq_free(a0); eng_seq_free(b); eng_seq_free(c); eng_seq_free(small);
    eng_model_free(m);
    eng_model_free(m2);
}

/* eng_batch_chunk_len cuts what eng_prefill cuts: with C = 64 and align
 * chunk, to the end of the grid cell; with align none, ubatch tokens. */
static void chunk_len_cuts_the_chunks_of_eng_prefill(void **state) {
    (void)state;
    eng_model *m = load(0, ENG_KERNEL_REF, ENG_PRECISION_FP32, 1);
    eng_seq *s = eng_seq_new(m, 512);
    int32_t toks[300];
    for (int i = 0; i < 300; i++) toks[i] = i % 200;
    assert_int_equal(eng_batch_chunk_len(s, 300, NULL), 64);
    assert_int_equal(eng_prefill(s, toks, 37, NULL, NULL), ENG_OK);
    assert_int_equal(eng_batch_chunk_len(s, 300, NULL), 27);
    assert_int_equal(eng_batch_chunk_len(s, 5, NULL), 5);
    assert_int_equal(eng_batch_chunk_len(s, 0, NULL), 0);
    eng_batch_params p = eng_batch_params_default();
    p.chunk = 16;
    assert_int_equal(eng_batch_chunk_len(s, 300, &p), 11);
    p.align = ENG_ALIGN_NONE;
    p.ubatch = 100;
    assert_int_equal(eng_batch_chunk_len(s, 300, &p), 100);
    p.ubatch = 0;
    assert_int_equal(eng_batch_chunk_len(s, 300, &p), 0);
    eng_seq_free(s);
    eng_model_free(m);
}

// ----------------------------------------------------------------------------
// `kvreplay bench --batch`

/* Runs cmd, parses its stdout as one JSON object (fails the test otherwise). */
static json_t *run_json(const char *cmd) {
    char *out = NULL;
    size_t n = 0;
    const int rc = kvr_run(cmd, &out, &n);
    if (rc != 0) fail_msg("%s: exit %d", cmd, rc);
    json_error_t e;
    json_t *o = json_loadb(out ? out : "", n, 0, &e);
    if (!o) fail_msg("%s: not JSON: %s", cmd, e.text);
    free(out);
    return o;
}

/* The sweep 1, 2, B for ref and blas: aggregate tokens/s, and every batched
 * logit row compared with the one-by-one run: identical under ref, and
 * under blas for b = 1 (a step of one span is the sequence's own). */
static void bench_batch_reports_throughput_and_bits_per_kernel_and_size(void **state) {
    (void)state;
    const char *bin = kvr_bin();
    if (!bin) skip();
    int a = 0;
    while (a < g_n_arch && strcmp(g_arch[a], "hybrid")) a++;
    assert_true(a < g_n_arch);
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "%s bench --batch 3 -m %s --tokens 70 --decode-steps 4 --prefill-tokens 70 --reps 1 "
             "--threads 2 --json", bin, g_path[a]);
    json_t *o = run_json(cmd);
    json_t *runs = json_object_get(o, "runs");
    assert_int_equal(json_array_size(runs), 6);
    assert_int_equal(json_array_size(json_object_get(o, "load_avg_before")), 3);
    const int want_b[6] = {1, 2, 3, 1, 2, 3};
    for (size_t i = 0; i < 6; i++) {
        json_t *r = json_array_get(runs, i);
        const char *k = json_string_value(json_object_get(r, "kernel"));
        const int b = (int)json_integer_value(json_object_get(r, "batch"));
        assert_string_equal(k, i < 3 ? "ref" : "blas");
        assert_int_equal(b, want_b[i]);
        assert_int_equal(json_integer_value(json_object_get(r, "decode_rows")), 4 * b);
        assert_int_equal(json_integer_value(json_object_get(r, "prefill_rows")), b);
        const char *tk[] = {"decode_single_tok_s", "decode_batched_tok_s", "prefill_single_tok_s",
                            "prefill_batched_tok_s"};
        for (int j = 0; j < 4; j++) assert_true(json_real_value(json_object_get(r, tk[j])) > 0);
        const int64_t dd = json_integer_value(json_object_get(r, "decode_rows_differ"));
        const int64_t pd = json_integer_value(json_object_get(r, "prefill_rows_differ"));
        if (i < 3 || b == 1) {
            assert_int_equal(dd, 0);
            assert_int_equal(pd, 0);
            assert_true(json_is_true(json_object_get(r, "bits_identical")));
        }
        print_message("bench --batch: %s b %d: decode rows differing %lld of %d, prefill %lld of %d\n", k, b,
                      (long long)dd, 4 * b, (long long)pd, b);
    }
    json_decref(o);
    snprintf(cmd, sizeof cmd, "%s bench --batch 2 -m %s --bogus >/dev/null 2>&1", bin, g_path[a]);
    assert_int_equal(kvr_run(cmd, NULL, NULL), 2);
    snprintf(cmd, sizeof cmd, "%s bench --batch 2 -m %s/missing.gguf >/dev/null 2>&1", bin, g_dir);
    assert_int_equal(kvr_run(cmd, NULL, NULL), 2);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(chunk_len_cuts_the_chunks_of_eng_prefill),
        cmocka_unit_test(bad_spans_are_refused_and_change_no_state),
        cmocka_unit_test(ref_rows_do_not_depend_on_the_other_sequences_of_a_step),
        cmocka_unit_test(a_row_reduced_in_another_order_when_batched_is_caught),
        cmocka_unit_test(blas_rows_change_with_the_other_sequences_of_a_step),
        cmocka_unit_test(bench_batch_reports_throughput_and_bits_per_kernel_and_size),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
