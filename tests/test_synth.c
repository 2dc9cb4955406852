/*
 * tests/test_synth.c: seeded synthetic models (engine/synth.h) and the
 * `model synth` subcommand.
 *
 * Same params must give memcmp-identical bytes; the file must carry every
 * tensor and key llama.cpp's llama loader expects, with the documented
 * shapes; a vocabulary GGUF's tokenizer.* keys must be copied verbatim and
 * set V. Models are built in memory except where the file path matters.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cli.h"
#include "errors.h"
#include "gguf.h"
#include "status.h"
#include "synth.h"
#include "util.h"

#define VOCAB_SPM "../shared/data/vocab/ggml-vocab-llama-spm.gguf"

int hx_cmd_model_synth(int argc, char **argv);

/* Builds p into memory and opens it; *buf must be freed after closing. */
static eng_gguf *build(const eng_synth_params *p, void **buf, size_t *n) {
    char err[256] = "";
    int rc = eng_synth_to_buffer(p, buf, n, err, sizeof err);
    if (rc != ENG_OK) fprintf(stderr, "synth failed: %s\n", err);
    assert_int_equal(rc, ENG_OK);
    eng_gguf *g;
    rc = eng_gguf_open_buffer(*buf, *n, "synth", &g, err, sizeof err);
    if (rc != ENG_OK) fprintf(stderr, "open failed: %s\n", err);
    assert_int_equal(rc, ENG_OK);
    return g;
}

static eng_synth_params tiny(uint64_t seed) {
    eng_synth_params p = eng_synth_preset("tiny");
    assert_true(p.ok);
    p.seed = seed;
    return p;
}

static int64_t get_int(const eng_gguf *g, const char *key) {
    int64_t v = -1;
    assert_int_equal(eng_gguf_get_int(g, key, &v), ENG_OK);
    return v;
}

static void assert_str(const eng_gguf *g, const char *key, const char *want) {
    const char *s;
    size_t len;
    assert_int_equal(eng_gguf_get_str(g, key, &s, &len), ENG_OK);
    assert_int_equal(len, strlen(want));
    assert_memory_equal(s, want, len);
}

static void assert_tensor(const eng_gguf *g, const char *name, int64_t ne0, int64_t ne1) {
    const eng_gguf_tensor *t = eng_gguf_find_tensor(g, name);
    if (!t) fprintf(stderr, "missing tensor %s\n", name);
    assert_non_null(t);
    assert_int_equal(t->n_dims, ne1 ? 2 : 1);
    assert_int_equal(t->ne[0], ne0);
    assert_int_equal(t->ne[1], ne1 ? ne1 : 1);
}

/* Every tensor and hyperparameter llama.cpp's llama loader reads. */
static void assert_llama_model(const eng_gguf *g, int64_t V, int64_t D, int64_t L, int64_t H,
                               int64_t G, int64_t F, int64_t ctx) {
    int64_t E = D / H;
    assert_str(g, "general.architecture", "llama");
    assert_int_equal(get_int(g, "general.alignment"), 32);
    assert_int_equal(get_int(g, "llama.context_length"), ctx);
    assert_int_equal(get_int(g, "llama.embedding_length"), D);
    assert_int_equal(get_int(g, "llama.block_count"), L);
    assert_int_equal(get_int(g, "llama.feed_forward_length"), F);
    assert_int_equal(get_int(g, "llama.attention.head_count"), H);
    assert_int_equal(get_int(g, "llama.attention.head_count_kv"), G);
    assert_int_equal(get_int(g, "llama.rope.dimension_count"), E);
    assert_int_equal(get_int(g, "llama.vocab_size"), V);
    double f;
    assert_int_equal(eng_gguf_get_float(g, "llama.rope.freq_base", &f), ENG_OK);
    assert_true(f == 10000.0);
    assert_int_equal(eng_gguf_get_float(g, "llama.attention.layer_norm_rms_epsilon", &f), ENG_OK);
    assert_true(f == (double)1e-5f);
    assert_int_equal(eng_gguf_find_key(g, "general.name") >= 0, 1);
    assert_int_equal(eng_gguf_arr_n(g, eng_gguf_find_key(g, "tokenizer.ggml.tokens")), V);

    assert_tensor(g, "token_embd.weight", D, V);
    assert_tensor(g, "output_norm.weight", D, 0);
    assert_tensor(g, "output.weight", D, V);
    for (int64_t il = 0; il < L; il++) {
        char name[64];
#define N(s) (snprintf(name, sizeof name, "blk.%lld." s ".weight", (long long)il), name)
        assert_tensor(g, N("attn_norm"), D, 0);
        assert_tensor(g, N("attn_q"), D, D);
        assert_tensor(g, N("attn_k"), D, G * E);
        assert_tensor(g, N("attn_v"), D, G * E);
        assert_tensor(g, N("attn_output"), D, D);
        assert_tensor(g, N("ffn_norm"), D, 0);
        assert_tensor(g, N("ffn_gate"), D, F);
        assert_tensor(g, N("ffn_up"), D, F);
        assert_tensor(g, N("ffn_down"), F, D);
#undef N
    }
    assert_int_equal(eng_gguf_n_tensors(g), 3 + 9 * L);
}

/* Mean and standard deviation of a tensor's values (dequantised). */
static void tensor_stats(const eng_gguf_tensor *t, double *mean, double *sd) {
    int64_t n = t->ne[0] * t->ne[1];
    float *x = malloc((size_t)n * sizeof *x);
    assert_non_null(x);
    eng_ggml_to_f32(t->type, t->data, x, n);
    double s = 0, s2 = 0;
    for (int64_t i = 0; i < n; i++) { s += x[i]; s2 += (double)x[i] * x[i]; }
    *mean = s / (double)n;
    *sd = sqrt(s2 / (double)n - *mean * *mean);
    free(x);
}

// ----------------------------------------------------------------------------
// Determinism

static void same_seed_gives_byte_identical_models(void **state) {
    (void)state;
    uint32_t types[] = {ENG_GGML_TYPE_F32, ENG_GGML_TYPE_F16, ENG_GGML_TYPE_BF16, ENG_GGML_TYPE_Q8_0};
    for (int k = 0; k < 4; k++) {
        eng_synth_params p = tiny(42);
        p.type = types[k];
        void *a, *b;
        size_t na, nb;
        char err[256];
        assert_int_equal(eng_synth_to_buffer(&p, &a, &na, err, sizeof err), ENG_OK);
        assert_int_equal(eng_synth_to_buffer(&p, &b, &nb, err, sizeof err), ENG_OK);
        assert_int_equal(na, nb);
        assert_memory_equal(a, b, na);
        free(a);
        free(b);
    }
}

static void different_seeds_give_different_weights_and_the_same_layout(void **state) {
    (void)state;
    eng_synth_params p1 = tiny(1), p2 = tiny(2);
    void *b1, *b2;
    size_t n1, n2;
    eng_gguf *g1 = build(&p1, &b1, &n1), *g2 = build(&p2, &b2, &n2);
    assert_int_equal(n1, n2);
    assert_memory_not_equal(b1, b2, n1);
    for (int64_t i = 0; i < eng_gguf_n_tensors(g1); i++) {
        const eng_gguf_tensor *t1 = eng_gguf_tensor_at(g1, i), *t2 = eng_gguf_tensor_at(g2, i);
        assert_string_equal(t1->name, t2->name);
        assert_int_equal(t1->offset, t2->offset);
        assert_memory_not_equal(t1->data, t2->data, t1->nbytes);
    }
    uint64_t s;
    assert_int_equal(eng_gguf_get_uint64(g2, "kvreplay.synth.seed", &s), ENG_OK);
    assert_int_equal(s, 2);
    eng_gguf_close(g1);
    eng_gguf_close(g2);
    free(b1);
    free(b2);
}

static void seeds_use_all_64_bits(void **state) {
    (void)state;
    eng_synth_params p1 = tiny(5), p2 = tiny(5 | (UINT64_C(1) << 40));
    void *b1, *b2;
    size_t n1, n2;
    eng_gguf *g1 = build(&p1, &b1, &n1), *g2 = build(&p2, &b2, &n2);
    const eng_gguf_tensor *t1 = eng_gguf_find_tensor(g1, "token_embd.weight");
    const eng_gguf_tensor *t2 = eng_gguf_find_tensor(g2, "token_embd.weight");
    assert_memory_not_equal(t1->data, t2->data, t1->nbytes);
    eng_gguf_close(g1);
    eng_gguf_close(g2);
    free(b1);
    free(b2);
}

static void written_file_equals_the_buffer(void **state) {
    (void)state;
    char dir[] = "/tmp/kvr_synth_XXXXXX";
    assert_non_null(mkdtemp(dir));
    char path[256];
    snprintf(path, sizeof path, "%s/m.gguf", dir);
    eng_synth_params p = tiny(9);
    char err[256];
    assert_int_equal(eng_synth_write(&p, path, err, sizeof err), ENG_OK);
    void *buf, *file;
    size_t n, nf;
    assert_int_equal(eng_synth_to_buffer(&p, &buf, &n, err, sizeof err), ENG_OK);
    assert_int_equal(eng_read_file(path, (char **)&file, &nf, err, sizeof err), ENG_OK);
    assert_int_equal(n, nf);
    assert_memory_equal(buf, file, n);
    free(buf);
    free(file);
    unlink(path);
    rmdir(dir);
}

// ----------------------------------------------------------------------------
// Shapes, metadata, vocabulary

static void presets_have_the_documented_shapes(void **state) {
    (void)state;
    struct { const char *name; int32_t D, L, H, G, F, ctx; } want[] = {
        {"tiny", 64, 2, 4, 2, 176, 4096},
        {"small", 256, 4, 8, 4, 704, 16384},
        {"base", 1024, 12, 16, 8, 2816, 8192},
        {"narrow", 64, 2, 2, 1, 176, 262144},
    };
    for (int k = 0; k < 4; k++) {
        eng_synth_params p = eng_synth_preset(want[k].name);
        assert_true(p.ok);
        assert_string_equal(p.preset, want[k].name);
        assert_string_equal(p.arch, "llama");
        assert_int_equal(p.n_embd, want[k].D);
        assert_int_equal(p.n_layer, want[k].L);
        assert_int_equal(p.n_head, want[k].H);
        assert_int_equal(p.n_head_kv, want[k].G);
        assert_int_equal(p.n_ff, want[k].F);
        assert_int_equal(p.n_ctx, want[k].ctx);
        assert_int_equal(p.n_rot, 0);            /* resolved to the head dim */
        assert_int_equal(p.type, ENG_GGML_TYPE_F32);
        assert_true(p.rope_freq_base == 10000.0f);
        assert_true(p.rms_eps == 1e-5f);
        assert_null(p.vocab_path);
    }
    assert_false(eng_synth_preset("huge").ok);
    assert_false(eng_synth_preset(NULL).ok);
}

static void tiny_and_small_models_carry_every_llama_tensor_and_key(void **state) {
    (void)state;
    void *buf;
    size_t n;
    eng_synth_params p = tiny(3);
    eng_gguf *g = build(&p, &buf, &n);
    assert_llama_model(g, 259, 64, 2, 4, 2, 176, 4096);
    assert_str(g, "kvreplay.synth.preset", "tiny");
    assert_str(g, "general.name", "kvreplay-synth-tiny");
    assert_int_equal(get_int(g, "general.file_type"), 0);
    assert_int_equal(get_int(g, "kvreplay.synth.version"), 1);
    eng_gguf_close(g);
    free(buf);
    p = eng_synth_preset("small");
    p.seed = 3;
    g = build(&p, &buf, &n);
    assert_llama_model(g, 259, 256, 4, 8, 4, 704, 16384);
    assert_str(g, "kvreplay.synth.preset", "small");
    eng_gguf_close(g);
    free(buf);
}

static void overridden_shape_is_recorded_as_custom(void **state) {
    (void)state;
    eng_synth_params p = tiny(3);
    p.n_layer = 3;
    p.n_embd = 96;
    p.n_head = 6;
    p.n_head_kv = 3;
    p.n_rot = 8;
    p.name = "mine";
    void *buf;
    size_t n;
    eng_gguf *g = build(&p, &buf, &n);
    assert_str(g, "kvreplay.synth.preset", "tiny+custom");
    assert_str(g, "general.name", "mine");
    assert_int_equal(get_int(g, "llama.rope.dimension_count"), 8);
    assert_tensor(g, "blk.2.attn_k.weight", 96, 48);
    eng_gguf_close(g);
    free(buf);
}

static void builtin_vocabulary_is_a_259_token_spm_byte_vocabulary(void **state) {
    (void)state;
    eng_synth_params p = tiny(4);
    void *buf;
    size_t n;
    eng_gguf *g = build(&p, &buf, &n);
    assert_str(g, "tokenizer.ggml.model", "llama");
    int64_t ti = eng_gguf_find_key(g, "tokenizer.ggml.tokens");
    int64_t ty = eng_gguf_find_key(g, "tokenizer.ggml.token_type");
    int64_t sc = eng_gguf_find_key(g, "tokenizer.ggml.scores");
    assert_true(ti >= 0 && ty >= 0 && sc >= 0);
    assert_int_equal(eng_gguf_arr_n(g, ti), 259);
    assert_int_equal(eng_gguf_arr_n(g, ty), 259);
    assert_int_equal(eng_gguf_arr_type(g, ty), ENG_GGUF_TYPE_INT32);
    assert_int_equal(eng_gguf_arr_n(g, sc), 259);
    assert_int_equal(eng_gguf_arr_type(g, sc), ENG_GGUF_TYPE_FLOAT32);
    const char *want[] = {"<unk>", "<s>", "</s>", "<0x00>", "<0x0A>", "<0xFF>"};
    uint64_t at[] = {0, 1, 2, 3, 13, 258};
    double types[] = {2, 3, 3, 6, 6, 6};
    for (int k = 0; k < 6; k++) {
        const char *s;
        size_t len;
        assert_int_equal(eng_gguf_get_arr_str(g, ti, at[k], &s, &len), ENG_OK);
        assert_int_equal(len, strlen(want[k]));
        assert_memory_equal(s, want[k], len);
        assert_true(eng_gguf_get_arr_num(g, ty, at[k]) == types[k]);
        assert_true(eng_gguf_get_arr_num(g, sc, at[k]) == 0.0);
    }
    assert_int_equal(get_int(g, "tokenizer.ggml.bos_token_id"), 1);
    assert_int_equal(get_int(g, "tokenizer.ggml.eos_token_id"), 2);
    assert_int_equal(get_int(g, "tokenizer.ggml.unknown_token_id"), 0);
    bool b;
    assert_int_equal(eng_gguf_get_bool(g, "tokenizer.ggml.add_bos_token", &b), ENG_OK);
    assert_true(b);
    eng_gguf_close(g);
    free(buf);
}

static void vocab_file_is_copied_and_sets_the_vocabulary_size(void **state) {
    (void)state;
    if (access(VOCAB_SPM, R_OK) != 0) {
        fprintf(stderr, "skipping: %s is absent\n", VOCAB_SPM);
        skip();
    }
    eng_synth_params p = tiny(5);
    p.vocab_path = VOCAB_SPM;
    void *buf;
    size_t n;
    eng_gguf *g = build(&p, &buf, &n);
    assert_llama_model(g, 32000, 64, 2, 4, 2, 176, 4096);   /* the vocab's llama.* did not leak */
    assert_str(g, "general.name", "kvreplay-synth-tiny");
    eng_gguf *v;
    char err[256];
    assert_int_equal(eng_gguf_open(VOCAB_SPM, &v, err, sizeof err), ENG_OK);
    int copied = 0;
    for (int64_t i = 0; i < eng_gguf_n_kv(v); i++) {
        const char *key = eng_gguf_key(v, i);
        int64_t j = eng_gguf_find_key(g, key);
        if (strncmp(key, "tokenizer.", 10) != 0) continue;   /* only tokenizer.* is copied */
        assert_true(j >= 0);
        uint32_t t = eng_gguf_kv_type(v, i);
        assert_int_equal(eng_gguf_kv_type(g, j), t);
        copied++;
        if (t == ENG_GGUF_TYPE_ARRAY) {
            uint64_t an = eng_gguf_arr_n(v, i);
            assert_int_equal(eng_gguf_arr_type(g, j), eng_gguf_arr_type(v, i));
            assert_int_equal(eng_gguf_arr_n(g, j), an);
            if (eng_gguf_arr_type(v, i) == ENG_GGUF_TYPE_STRING) {
                for (uint64_t e = 0; e < an; e++) {
                    const char *s1, *s2;
                    size_t l1, l2;
                    assert_int_equal(eng_gguf_get_arr_str(v, i, e, &s1, &l1), ENG_OK);
                    assert_int_equal(eng_gguf_get_arr_str(g, j, e, &s2, &l2), ENG_OK);
                    assert_int_equal(l1, l2);
                    assert_memory_equal(s1, s2, l1);
                }
            } else {
                for (uint64_t e = 0; e < an; e++)
                    assert_true(eng_gguf_get_arr_num(v, i, e) == eng_gguf_get_arr_num(g, j, e));
            }
        } else if (t == ENG_GGUF_TYPE_STRING) {
            const char *s1, *s2;
            size_t l1, l2;
            assert_int_equal(eng_gguf_get_str(v, key, &s1, &l1), ENG_OK);
            assert_int_equal(eng_gguf_get_str(g, key, &s2, &l2), ENG_OK);
            assert_int_equal(l1, l2);
            assert_memory_equal(s1, s2, l1);
        } else if (t == ENG_GGUF_TYPE_BOOL) {
            bool b1, b2;
            assert_int_equal(eng_gguf_get_bool(v, key, &b1), ENG_OK);
            assert_int_equal(eng_gguf_get_bool(g, key, &b2), ENG_OK);
            assert_int_equal(b1, b2);
        } else {
            assert_int_equal(get_int(v, key), get_int(g, key));
        }
    }
    assert_true(copied >= 9);
    eng_gguf_close(v);
    eng_gguf_close(g);
    free(buf);
}

static void explicit_vocab_size_must_match_the_vocabulary(void **state) {
    (void)state;
    eng_synth_params p = tiny(5);
    p.n_vocab = 300;
    void *buf = (void *)1;
    size_t n;
    char err[256] = "";
    assert_int_equal(eng_synth_to_buffer(&p, &buf, &n, err, sizeof err), ENG_ERR_ARG);
    assert_null(buf);
    assert_non_null(strstr(err, "n_vocab"));
    p.n_vocab = 259;
    assert_int_equal(eng_synth_to_buffer(&p, &buf, &n, err, sizeof err), ENG_OK);
    free(buf);
}

static void bad_params_are_rejected_naming_the_field(void **state) {
    (void)state;
    struct { const char *field; int status; } cases[] = {
        {"n_head", ENG_ERR_ARG}, {"n_head_kv", ENG_ERR_ARG}, {"n_rot", ENG_ERR_ARG},
        {"n_layer", ENG_ERR_ARG}, {"arch", ENG_ERR_UNSUPPORTED}, {"type", ENG_ERR_ARG},
        {"rms_eps", ENG_ERR_ARG}, {"--vocab", ENG_ERR_IO},
    };
    for (int k = 0; k < (int)(sizeof cases / sizeof cases[0]); k++) {
        eng_synth_params p = tiny(1);
        switch (k) {
        case 0: p.n_head = 5; break;
        case 1: p.n_head_kv = 3; break;
        case 2: p.n_rot = 3; break;
        case 3: p.n_layer = 0; break;
        case 4: snprintf(p.arch, sizeof p.arch, "mamba"); break;
        case 5: p.type = 2; break;
        case 6: p.rms_eps = 0.0f; break;
        case 7: p.vocab_path = "/nonexistent/vocab.gguf"; break;
        }
        void *buf;
        size_t n;
        char err[256] = "";
        int rc = eng_synth_to_buffer(&p, &buf, &n, err, sizeof err);
        assert_int_equal(rc, cases[k].status);
        if (k < 7) assert_non_null(strstr(err, cases[k].field));
        else assert_non_null(strstr(err, "/nonexistent/vocab.gguf"));
    }
}

// ----------------------------------------------------------------------------
// Weights: types and scales

static void matrix_types_are_honoured_and_norms_stay_f32(void **state) {
    (void)state;
    uint32_t types[] = {ENG_GGML_TYPE_F16, ENG_GGML_TYPE_BF16, ENG_GGML_TYPE_Q8_0};
    uint32_t ftype[] = {1, 32, 7};
    eng_synth_params p32 = tiny(8);
    void *b32;
    size_t n32;
    eng_gguf *g32 = build(&p32, &b32, &n32);
    for (int k = 0; k < 3; k++) {
        eng_synth_params p = tiny(8);
        p.type = types[k];
        void *buf;
        size_t n;
        eng_gguf *g = build(&p, &buf, &n);
        assert_int_equal(get_int(g, "general.file_type"), ftype[k]);
        assert_int_equal(eng_gguf_find_tensor(g, "blk.0.attn_q.weight")->type, types[k]);
        assert_int_equal(eng_gguf_find_tensor(g, "output.weight")->type, types[k]);
        assert_int_equal(eng_gguf_find_tensor(g, "blk.1.ffn_norm.weight")->type, ENG_GGML_TYPE_F32);
        /* ffn_down's rows (F = 176) are not a multiple of 32: Q8_0 falls back to F16 */
        assert_int_equal(eng_gguf_find_tensor(g, "blk.0.ffn_down.weight")->type,
                         types[k] == ENG_GGML_TYPE_Q8_0 ? ENG_GGML_TYPE_F16 : types[k]);
        /* the same gaussians underlie every type: converted values stay close to f32 */
        const eng_gguf_tensor *a = eng_gguf_find_tensor(g32, "blk.0.attn_q.weight");
        const eng_gguf_tensor *b = eng_gguf_find_tensor(g, "blk.0.attn_q.weight");
        int64_t ne = a->ne[0] * a->ne[1];
        float *x = malloc((size_t)ne * 4);
        eng_ggml_to_f32(b->type, b->data, x, ne);
        const float *ref = a->data;
        for (int64_t i = 0; i < ne; i++) assert_true(fabsf(x[i] - ref[i]) <= 0.02f);
        free(x);
        eng_gguf_close(g);
        free(buf);
    }
    eng_gguf_close(g32);
    free(b32);
}

static void weights_have_the_intended_scales(void **state) {
    (void)state;
    eng_synth_params p = eng_synth_preset("small");
    p.seed = 11;
    void *buf;
    size_t n;
    eng_gguf *g = build(&p, &buf, &n);
    struct { const char *name; double mean, sd; } want[] = {
        {"token_embd.weight", 0.0, 1.0},
        {"blk.0.attn_q.weight", 0.0, 1.0 / 16.0},               /* 1/sqrt(256) */
        {"blk.3.ffn_down.weight", 0.0, 1.0 / sqrt(704.0)},
        {"blk.2.attn_norm.weight", 1.0, 0.02},
        {"output.weight", 0.0, 2.0 / 16.0},                     /* 2/sqrt(D) */
    };
    for (int k = 0; k < 5; k++) {
        double mean, sd;
        tensor_stats(eng_gguf_find_tensor(g, want[k].name), &mean, &sd);
        assert_true(fabs(mean - want[k].mean) < 0.25 * want[k].sd + 1e-9);
        assert_true(fabs(sd / want[k].sd - 1.0) < 0.25);
    }
    eng_gguf_close(g);
    free(buf);
}

// ----------------------------------------------------------------------------
// The subcommand (run in a child: usage errors exit)

static int run_cli(const char *const *args, int n) {
    fflush(NULL);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        int fd = open("/dev/null", O_WRONLY);
        dup2(fd, 1);
        dup2(fd, 2);
        char *argv[32];
        for (int i = 0; i < n; i++) argv[i] = (char *)args[i];
        argv[n] = NULL;
        _exit(hx_cmd_model_synth(n, argv));
    }
    int st;
    assert_int_equal(waitpid(pid, &st, 0), pid);
    assert_true(WIFEXITED(st));
    return WEXITSTATUS(st);
}

static void cli_without_a_seed_exits_2(void **state) {
    (void)state;
    const char *args[] = {"synth", "-o", "/tmp/kvr_synth_never.gguf"};
    assert_int_equal(run_cli(args, 3), HX_EXIT_USAGE);
    assert_int_not_equal(access("/tmp/kvr_synth_never.gguf", F_OK), 0);
}

static void cli_answers_help_and_rejects_bad_options(void **state) {
    (void)state;
    const char *help[] = {"synth", "--help"};
    assert_int_equal(run_cli(help, 2), HX_EXIT_OK);
    const char *bad[] = {"synth", "--seed", "1", "--bogus", "-o", "/tmp/x.gguf"};
    assert_int_equal(run_cli(bad, 6), HX_EXIT_USAGE);
    const char *preset[] = {"synth", "--preset", "huge", "--seed", "1", "-o", "/tmp/x.gguf"};
    assert_int_equal(run_cli(preset, 7), HX_EXIT_USAGE);
    const char *heads[] = {"synth", "--heads", "5", "--seed", "1", "-o", "/tmp/x.gguf"};
    assert_int_equal(run_cli(heads, 7), HX_EXIT_USAGE);
}

static void cli_flags_override_the_preset_and_match_the_library(void **state) {
    (void)state;
    char dir[] = "/tmp/kvr_synth_XXXXXX";
    assert_non_null(mkdtemp(dir));
    char path[256];
    snprintf(path, sizeof path, "%s/m.gguf", dir);
    const char *args[] = {"synth", "--layers", "3", "--preset", "tiny", "--type=bf16",
                          "--seed", "18446744073709551615", "-o", path};
    assert_int_equal(run_cli(args, 10), HX_EXIT_OK);
    eng_synth_params p = tiny(UINT64_MAX);
    p.n_layer = 3;
    p.type = ENG_GGML_TYPE_BF16;
    void *buf, *file;
    size_t n, nf;
    char err[256];
    assert_int_equal(eng_synth_to_buffer(&p, &buf, &n, err, sizeof err), ENG_OK);
    assert_int_equal(eng_read_file(path, (char **)&file, &nf, err, sizeof err), ENG_OK);
    assert_int_equal(n, nf);
    assert_memory_equal(buf, file, n);
    free(buf);
    free(file);
    unlink(path);
    rmdir(dir);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(same_seed_gives_byte_identical_models),
        cmocka_unit_test(different_seeds_give_different_weights_and_the_same_layout),
        cmocka_unit_test(seeds_use_all_64_bits),
        cmocka_unit_test(written_file_equals_the_buffer),
        cmocka_unit_test(presets_have_the_documented_shapes),
        cmocka_unit_test(tiny_and_small_models_carry_every_llama_tensor_and_key),
        cmocka_unit_test(overridden_shape_is_recorded_as_custom),
        cmocka_unit_test(builtin_vocabulary_is_a_259_token_spm_byte_vocabulary),
        cmocka_unit_test(vocab_file_is_copied_and_sets_the_vocabulary_size),
        cmocka_unit_test(explicit_vocab_size_must_match_the_vocabulary),
        cmocka_unit_test(bad_params_are_rejected_naming_the_field),
        cmocka_unit_test(matrix_types_are_honoured_and_norms_stay_f32),
        cmocka_unit_test(weights_have_the_intended_scales),
        cmocka_unit_test(cli_without_a_seed_exits_2),
        cmocka_unit_test(cli_answers_help_and_rejects_bad_options),
        cmocka_unit_test(cli_flags_override_the_preset_and_match_the_library),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
