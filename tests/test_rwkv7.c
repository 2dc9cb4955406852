/*
 * tests/test_rwkv7.c: the RWKV-7 layer kind and the rwkv.cpp converter.
 *
 *   - the real trained model (../shared/data/models/rwkv7/, skipped with a
 *     message when absent): converting the FP32 and FP16 rwkv.cpp files and
 *     running `"in` (34 105 110) gives rwkv.cpp's logits within 1e-4 (max
 *     abs), both kernels, prefill and token-by-token decode; greedy next 32;
 *   - the converted GGUF carries llama.cpp's rwkv7 keys, tensor names and
 *     shapes, and a 256-token RWKV byte vocabulary that tokenizes `"in` to
 *     34 105 110 and every byte to itself;
 *   - the converter refuses, naming the file, offset and field: a missing
 *     file, a bad magic, a truncated tensor, a quantized type, an RWKV v6
 *     file (no r_k), a tensor of the wrong shape;
 *   - the bit-exactness invariant with grid checkpoints on the real model
 *     and a synthetic one, both kernels and precisions, many split points;
 *     an off-grid checkpoint then shifted chunks diverges with blas (the
 *     chunked scan's blocks move) and not with ref;
 *   - the blas chunked scan agrees with the recurrence (tolerance: two
 *     algorithms), ref's results do not depend on the thread count;
 *   - state: truncation only to n_tokens or 0, checkpoint and blob sizes as
 *     documented, serialisation round trip, eng_seq_compare catches a
 *     one-ULP flip in the wkv state and in a shift row (the planted fault);
 *   - the cost model and the synthetic writer (llama.cpp's keys and shapes,
 *     same params -> same bytes).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "convert.h"
#include "gguf.h"
#include "internal.h"
#include "model.h"
#include "rwkv7.h"
#include "seqcheck.h"
#include "status.h"
#include "synth.h"
#include "util.h"

#define DATA "../shared/data/models/rwkv7/"
static const char *const g_bin[2] = {DATA "tiny-rwkv-7v0-834K-FP32.bin", DATA "tiny-rwkv-7v0-834K-FP16.bin"};
static const char *const g_expected = DATA "expected-logits-7v0-834K.bin";

static char g_dir[64], g_real[2][128], g_synth[128];
static bool g_have_real;
enum { NT = 300 };
static int32_t g_toks[NT];

static int setup(void **state) {
    (void)state;
    snprintf(g_dir, sizeof g_dir, "/tmp/kvr_rwkv7_XXXXXX");
    if (!mkdtemp(g_dir)) return -1;
    for (int i = 0; i < NT; i++) g_toks[i] = (i * 131 + 7) % 256;
    char err[256];
    eng_synth_params p = eng_synth_preset_arch("rwkv7", "tiny");
    p.seed = 1;
    snprintf(g_synth, sizeof g_synth, "%s/synth.gguf", g_dir);
    if (!p.ok || eng_synth_write(&p, g_synth, err, sizeof err) != ENG_OK) {
        fprintf(stderr, "synth: %s\n", err);
        return -1;
    }
    g_have_real = access(g_bin[0], R_OK) == 0 && access(g_bin[1], R_OK) == 0 && access(g_expected, R_OK) == 0;
    for (int i = 0; g_have_real && i < 2; i++) {
        snprintf(g_real[i], sizeof g_real[i], "%s/real%d.gguf", g_dir, i);
        if (eng_convert_rwkvcpp(g_bin[i], g_real[i], err, sizeof err) != ENG_OK) {
            fprintf(stderr, "convert: %s\n", err);
            return -1;
        }
    }
    return 0;
}

static int teardown(void **state) {
    (void)state;
    unlink(g_synth);
    for (int i = 0; i < 2; i++) unlink(g_real[i]);
    rmdir(g_dir);
    return 0;
}

#define NEED_REAL()                                                                                     \
    do {                                                                                                \
        if (!g_have_real) {                                                                             \
            print_message("skipped: %s (and the FP16 file, expected logits) absent\n", g_bin[0]);      \
            skip();                                                                                     \
        }                                                                                               \
    } while (0)

static eng_model *load_t(const char *path, eng_kernel k, eng_precision p, int32_t threads) {
    eng_numerics num = {.kernel = k, .precision = p, .n_threads = threads};
    eng_model *m = NULL;
    char err[256] = "";
    if (eng_model_load(path, &num, &m, err, sizeof err) != ENG_OK) fail_msg("load %s: %s", path, err);
    return m;
}

static eng_model *load(const char *path, eng_kernel k, eng_precision p) { return load_t(path, k, p, 1); }

static float max_abs_diff(const float *a, const float *b, int32_t n) {
    float m = 0.0f;
    for (int32_t i = 0; i < n; i++) m = fmaxf(m, fabsf(a[i] - b[i]));
    return m;
}

// ----------------------------------------------------------------------------
// The real model against rwkv.cpp

static void converted_model_gives_rwkvcpps_logits(void **state) {
    (void)state;
    NEED_REAL();
    char *raw;
    size_t n;
    char err[256];
    assert_int_equal(eng_read_file(g_expected, &raw, &n, err, sizeof err), ENG_OK);
    assert_int_equal(n, 256 * sizeof(float));
    float expected[256];
    memcpy(expected, raw, sizeof expected);
    free(raw);
    const int32_t toks[3] = {34, 105, 110};  /* "in with its quote */
    for (int f = 0; f < 2; f++)
        for (int k = 0; k < 2; k++) {
            eng_model *m = load(g_real[f], (eng_kernel)k, ENG_PRECISION_FP32);
            assert_int_equal(eng_model_get_info(m)->n_vocab, 256);
            eng_seq *s = eng_seq_new(m, 16);
            float lg[256];
            assert_int_equal(eng_prefill(s, toks, 3, NULL, lg), ENG_OK);
            const float dp = max_abs_diff(lg, expected, 256);
            assert_int_equal(eng_argmax(lg, 256), 32);  /* a space */
            eng_seq_reset(s);
            for (int i = 0; i < 3; i++) assert_int_equal(eng_decode(s, toks[i], lg), ENG_OK);
            const float dd = max_abs_diff(lg, expected, 256);
            print_message("%s, %s: max abs diff to rwkv.cpp %.3g (prefill), %.3g (decode)\n", f ? "FP16" : "FP32",
                          eng_kernel_name((eng_kernel)k), dp, dd);
            assert_true(dp <= 1e-4f);
            assert_true(dd <= 1e-4f);
            eng_seq_free(s);
            eng_model_free(m);
        }
}

static int64_t kv_int(const eng_gguf *g, const char *key) {
    int64_t v = -1;
    if (eng_gguf_get_int(g, key, &v) != ENG_OK) fail_msg("%s: missing", key);
    return v;
}

static void assert_shape4(const eng_gguf *g, const char *name, int64_t ne0, int64_t ne1, int64_t ne2, int64_t ne3) {
    const eng_gguf_tensor *t = eng_gguf_find_tensor(g, name);
    if (!t) fail_msg("%s: missing", name);
    if (t->ne[0] != ne0 || t->ne[1] != ne1 || t->ne[2] != ne2 || t->ne[3] != ne3)
        fail_msg("%s: [%lld, %lld, %lld, %lld], want [%lld, %lld, %lld, %lld]", name, (long long)t->ne[0],
                 (long long)t->ne[1], (long long)t->ne[2], (long long)t->ne[3], (long long)ne0, (long long)ne1,
                 (long long)ne2, (long long)ne3);
}

/* llama.cpp's rwkv7 names and shapes (llama_model_rwkv7::load_arch_tensors). */
static void assert_rwkv7_layout(const eng_gguf *g, int64_t D, int64_t V, int64_t L, int64_t F, int64_t rw,
                                int64_t ra, int64_t rv, int64_t rg) {
    assert_shape4(g, "token_embd.weight", D, V, 1, 1);
    assert_shape4(g, "token_embd_norm.weight", D, 1, 1, 1);
    assert_shape4(g, "token_embd_norm.bias", D, 1, 1, 1);
    assert_shape4(g, "output_norm.weight", D, 1, 1, 1);
    assert_shape4(g, "output_norm.bias", D, 1, 1, 1);
    assert_shape4(g, "output.weight", D, V, 1, 1);
    char name[96];
    for (int64_t il = 0; il < L; il++) {
        const int64_t r_v = il == 0 ? ra : rv;
        struct { const char *s; int64_t a, b, c, d; } t[] = {
            {"attn_norm.weight", D, 1, 1, 1}, {"attn_norm.bias", D, 1, 1, 1}, {"attn_norm_2.weight", D, 1, 1, 1},
            {"attn_norm_2.bias", D, 1, 1, 1}, {"time_mix_w0.weight", D, 1, 1, 1}, {"time_mix_w1.weight", D, rw, 1, 1},
            {"time_mix_w2.weight", rw, D, 1, 1}, {"time_mix_a0.weight", D, 1, 1, 1},
            {"time_mix_a1.weight", D, ra, 1, 1}, {"time_mix_a2.weight", ra, D, 1, 1},
            {"time_mix_v0.weight", D, 1, 1, 1}, {"time_mix_v1.weight", D, r_v, 1, 1},
            {"time_mix_v2.weight", r_v, D, 1, 1}, {"time_mix_g1.weight", D, rg, 1, 1},
            {"time_mix_g2.weight", rg, D, 1, 1}, {"time_mix_lerp_fused.weight", D, 1, 1, 6},
            {"time_mix_k_k.weight", D, 1, 1, 1}, {"time_mix_k_a.weight", D, 1, 1, 1},
            {"time_mix_r_k.weight", D, 1, 1, 1}, {"time_mix_key.weight", D, D, 1, 1},
            {"time_mix_value.weight", D, D, 1, 1}, {"time_mix_receptance.weight", D, D, 1, 1},
            {"time_mix_ln.weight", D, 1, 1, 1}, {"time_mix_ln.bias", D, 1, 1, 1},
            {"time_mix_output.weight", D, D, 1, 1}, {"channel_mix_lerp_k.weight", D, 1, 1, 1},
            {"channel_mix_key.weight", D, F, 1, 1}, {"channel_mix_value.weight", F, D, 1, 1},
        };
        for (size_t i = 0; i < sizeof t / sizeof t[0]; i++) {
            snprintf(name, sizeof name, "blk.%lld.%s", (long long)il, t[i].s);
            assert_shape4(g, name, t[i].a, t[i].b, t[i].c, t[i].d);
        }
    }
    assert_int_equal(eng_gguf_n_tensors(g), 6 + 28 * L);
}

static void converted_gguf_has_llamacpps_keys_tensors_and_byte_vocabulary(void **state) {
    (void)state;
    NEED_REAL();
    for (int f = 0; f < 2; f++) {
        eng_gguf *g;
        char err[256];
        assert_int_equal(eng_gguf_open(g_real[f], &g, err, sizeof err), ENG_OK);
        const char *s;
        size_t len;
        assert_int_equal(eng_gguf_get_str(g, "general.architecture", &s, &len), ENG_OK);
        assert_int_equal(len, 5);
        assert_memory_equal(s, "rwkv7", 5);
        assert_int_equal(kv_int(g, "rwkv7.embedding_length"), 64);
        assert_int_equal(kv_int(g, "rwkv7.block_count"), 12);
        assert_int_equal(kv_int(g, "rwkv7.wkv.head_size"), 64);
        assert_int_equal(kv_int(g, "rwkv7.feed_forward_length"), 256);
        assert_int_equal(kv_int(g, "rwkv7.attention.decay_lora_rank"), 32);
        assert_int_equal(kv_int(g, "rwkv7.attention.iclr_lora_rank"), 32);
        assert_int_equal(kv_int(g, "rwkv7.attention.value_residual_mix_lora_rank"), 32);
        assert_int_equal(kv_int(g, "rwkv7.attention.gate_lora_rank"), 32);
        assert_int_equal(kv_int(g, "rwkv7.attention.head_count"), 0);
        assert_int_equal(kv_int(g, "general.file_type"), f);  /* 0 ALL_F32, 1 MOSTLY_F16 */
        assert_rwkv7_layout(g, 64, 256, 12, 256, 32, 32, 32, 32);
        /* matrices keep their type, vectors are F32 */
        assert_int_equal(eng_gguf_find_tensor(g, "blk.3.time_mix_key.weight")->type,
                         f ? ENG_GGML_TYPE_F16 : ENG_GGML_TYPE_F32);
        assert_int_equal(eng_gguf_find_tensor(g, "blk.3.time_mix_lerp_fused.weight")->type, ENG_GGML_TYPE_F32);
        /* the RWKV byte vocabulary, escaped as llama.cpp stores it */
        assert_int_equal(eng_gguf_get_str(g, "tokenizer.ggml.model", &s, &len), ENG_OK);
        assert_memory_equal(s, "rwkv", 4);
        const int64_t ti = eng_gguf_find_key(g, "tokenizer.ggml.tokens");
        assert_int_equal(eng_gguf_arr_n(g, ti), 256);
        struct { int id; const char *text; } want[] = {
            {0, "\\x00"}, {9, "\\t"}, {10, "\\n"}, {13, "\\r"}, {34, "\""}, {39, "'"}, {65, "A"},
            {92, "\\\\"}, {127, "\\x7f"}, {200, "\\xc8"}, {255, "\\xff"},
        };
        for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
            assert_int_equal(eng_gguf_get_arr_str(g, ti, (uint64_t)want[i].id, &s, &len), ENG_OK);
            if (len != strlen(want[i].text) || memcmp(s, want[i].text, len))
                fail_msg("token %d: '%.*s', want '%s'", want[i].id, (int)len, s, want[i].text);
        }
        eng_gguf_close(g);
        /* the engine tokenizes every byte to itself */
        eng_model *m = load(g_real[f], ENG_KERNEL_REF, ENG_PRECISION_FP32);
        const eng_tokenizer *tok = eng_model_tokenizer(m);
        assert_non_null(tok);
        assert_string_equal(eng_tokenizer_type_name(tok), "rwkv");
        int32_t ids[256];
        assert_int_equal(eng_tokenize(tok, "\"in", 3, true, false, false, ids, 256, NULL), 3);
        assert_int_equal(ids[0], 34);
        assert_int_equal(ids[1], 105);
        assert_int_equal(ids[2], 110);
        char all[256], back[257];
        for (int b = 0; b < 256; b++) all[b] = (char)b;
        assert_int_equal(eng_tokenize(tok, all, 256, true, true, true, ids, 256, NULL), 256);
        for (int b = 0; b < 256; b++) assert_int_equal(ids[b], b);
        assert_int_equal(eng_detokenize(tok, ids, 256, true, back, sizeof back), 256);
        assert_memory_equal(back, all, 256);
        eng_model_free(m);
    }
}

// ----------------------------------------------------------------------------
// The converter refuses what it cannot read

static void write_bytes(const char *path, const void *b, size_t n) {
    char err[256];
    assert_int_equal(eng_write_atomic(path, b, n, err, sizeof err), ENG_OK);
}

static void expect_refusal(const char *path, int rc, const char *needle) {
    char err[512] = "";
    void *buf = NULL;
    size_t n = 0;
    assert_int_equal(eng_convert_rwkvcpp_to_buffer(path, &buf, &n, err, sizeof err), rc);
    assert_null(buf);
    if (!strstr(err, needle) || !strstr(err, path)) fail_msg("message '%s' lacks '%s' or the path", err, needle);
}

static void converter_refuses_malformed_and_unsupported_files(void **state) {
    (void)state;
    char path[160];
    snprintf(path, sizeof path, "%s/absent.bin", g_dir);
    expect_refusal(path, ENG_ERR_IO, "absent.bin");
    snprintf(path, sizeof path, "%s/bad.bin", g_dir);
    write_bytes(path, "GGUF\3\0\0\0", 8);
    expect_refusal(path, ENG_ERR_FORMAT, "header");
    NEED_REAL();
    char *b;
    size_t n;
    char err[256];
    assert_int_equal(eng_read_file(g_bin[0], &b, &n, err, sizeof err), ENG_OK);
    /* a bad magic */
    b[0] ^= 1;
    write_bytes(path, b, n);
    expect_refusal(path, ENG_ERR_FORMAT, "offset 0: magic");
    b[0] ^= 1;
    /* truncated inside the last tensor's data */
    write_bytes(path, b, n - 100);
    expect_refusal(path, ENG_ERR_FORMAT, "head.weight: data truncated");
    /* a quantized file type (Q5_1 = 8) */
    uint32_t q = 8;
    memcpy(b + 20, &q, 4);
    write_bytes(path, b, n);
    expect_refusal(path, ENG_ERR_UNSUPPORTED, "offset 20: data_type");
    q = 0;
    memcpy(b + 20, &q, 4);
    /* an RWKV v6 file: no att.r_k (renamed in place, same length) */
    char *rk = memmem(b, n, "blocks.0.att.r_k", 16);
    assert_non_null(rk);
    rk[13] = 'x';
    write_bytes(path, b, n);
    expect_refusal(path, ENG_ERR_UNSUPPORTED, "not an RWKV-7 model");
    rk[13] = 'r';
    /* a tensor of the wrong shape: blocks.2.att.w1 [64, 32] declared [32, 64] */
    char *w1 = memmem(b, n, "blocks.2.att.w1", 15);
    assert_non_null(w1);
    int32_t shape[2];
    memcpy(shape, w1 - 8, sizeof shape);  /* the two dims before the key */
    const int32_t swapped[2] = {shape[1], shape[0]};
    memcpy(w1 - 8, swapped, sizeof swapped);
    write_bytes(path, b, n);
    expect_refusal(path, ENG_ERR_FORMAT, "blocks.2.att.w1: shape [32, 64, 1], expected [64, 32, 1]");
    free(b);
    unlink(path);
}

// ----------------------------------------------------------------------------
// The bit-exactness invariant

static void grid_checkpoint_restore_is_bit_identical_to_cold(void **state) {
    (void)state;
    const int32_t chunks[] = {16, 64}, ns[] = {70, 200, 290};
    for (int model = 0; model < 2; model++) {
        if (model == 1 && !g_have_real) {
            print_message("real model skipped: %s absent\n", g_bin[0]);
            continue;
        }
        const char *path = model ? g_real[0] : g_synth;
        for (int k = 0; k < 2; k++)
            for (int p = 0; p < 2; p++) {
                eng_model *m = load(path, (eng_kernel)k, (eng_precision)p);
                const int cases = sc_invariant(m, g_toks, NT + 16, chunks, 2, ns, 3);
                print_message("%s %s/%s: %d splits bit-identical to cold\n", model ? "real" : "synthetic",
                              eng_kernel_name((eng_kernel)k), eng_precision_name((eng_precision)p), cases);
                assert_true(cases >= 50);
                eng_model_free(m);
            }
    }
}

static void grid_checkpoint_restore_is_bit_identical_with_threads(void **state) {
    (void)state;
    const int32_t chunks[] = {64}, ns[] = {200};
    for (int k = 0; k < 2; k++) {
        eng_model *m = load_t(g_synth, (eng_kernel)k, ENG_PRECISION_FP32, 3);
        assert_true(sc_invariant(m, g_toks, NT + 16, chunks, 1, ns, 1) >= 9);
        eng_model_free(m);
    }
}

/* blas: the scan's blocks start where the chunk starts, so a checkpoint off
 * the grid followed by shifted chunks gives other bits; ref: the same bits. */
static void off_grid_checkpoint_diverges_with_blas_only(void **state) {
    (void)state;
    const int32_t ks[] = {37, 70, 100, 150};
    for (int model = 0; model < 2; model++) {
        if (model == 1 && !g_have_real) continue;
        for (int k = 0; k < 2; k++) {
            eng_model *m = load(model ? g_real[0] : g_synth, (eng_kernel)k, ENG_PRECISION_FP32);
            const int differ = sc_off_grid_differences(m, g_toks, 200, ks, 4);
            print_message("%s %s: off-grid checkpoint + shifted chunks differ from cold on %d of 4 splits\n",
                          model ? "real" : "synthetic", eng_kernel_name((eng_kernel)k), differ);
            assert_int_equal(differ, k == ENG_KERNEL_BLAS ? 4 : 0);
            eng_model_free(m);
        }
    }
}

static void ref_results_do_not_depend_on_the_thread_count(void **state) {
    (void)state;
    eng_model *m1 = load_t(g_synth, ENG_KERNEL_REF, ENG_PRECISION_FP32, 1);
    eng_model *m3 = load_t(g_synth, ENG_KERNEL_REF, ENG_PRECISION_FP32, 3);
    const int32_t V = eng_model_get_info(m1)->n_vocab;
    eng_seq *a = eng_seq_new(m1, NT), *b = eng_seq_new(m3, NT);
    float *la = malloc(sizeof(float) * V), *lb = malloc(sizeof(float) * V);
    assert_int_equal(eng_prefill(a, g_toks, 200, NULL, la), ENG_OK);
    assert_int_equal(eng_prefill(b, g_toks, 200, NULL, lb), ENG_OK);
    assert_memory_equal(la, lb, sizeof(float) * V);
    sc_same_state(a, b, "1 vs 3 threads");
    free(la); free(lb);
    eng_seq_free(a); eng_seq_free(b);
    eng_model_free(m1); eng_model_free(m3);
}

/* The chunked form and the recurrence are two algorithms for one function:
 * equal within float rounding, over random heads and several block lengths. */
static void blas_chunked_scan_agrees_with_the_recurrence(void **state) {
    (void)state;
    const int32_t H = 2, S = 64, D = H * S;
    const int32_t Ts[] = {2, 17, 64, 65, 150};
    uint64_t x = 42;
#define RND() (x ^= x << 13, x ^= x >> 7, x ^= x << 17, (float)((double)(x >> 11) / 9007199254740992.0))
    for (int ti = 0; ti < 5; ti++) {
        const int32_t T = Ts[ti];
        float *in = malloc(sizeof(float) * 6 * (size_t)T * D);
        float *r = in, *w = r + T * D, *k = w + T * D, *v = k + T * D, *a = v + T * D, *b = a + T * D;
        for (int32_t t = 0; t < T; t++)
            for (int32_t h = 0; h < H; h++) {
                float nrm = 0;
                float *kk = a + (int64_t)t * D + h * S;
                for (int32_t j = 0; j < S; j++) { kk[j] = RND() - 0.5f; nrm += kk[j] * kk[j]; }
                for (int32_t j = 0; j < S; j++) {
                    const int64_t i = (int64_t)t * D + h * S + j;
                    const float kn = kk[j] / sqrtf(nrm), iclr = RND();
                    a[i] = -kn;
                    b[i] = kn * iclr;
                    r[i] = RND() - 0.5f;
                    w[i] = expf(-0.606531f * RND());  /* the decay's range */
                    k[i] = (RND() - 0.5f) * 0.5f;
                    v[i] = RND() - 0.5f;
                }
            }
        float *st[2], *o[2], *scratch = malloc(sizeof(float) * (size_t)H * eng_rwkv7_scan_floats(S));
        for (int q = 0; q < 2; q++) {
            st[q] = malloc(sizeof(float) * (size_t)H * S * S);
            o[q] = malloc(sizeof(float) * (size_t)T * D);
            for (int64_t i = 0; i < (int64_t)H * S * S; i++) st[q][i] = (float)((i * 37) % 101) / 101.0f - 0.5f;
            eng_kctx ctx = {.kernel = q ? ENG_KERNEL_REF : ENG_KERNEL_BLAS, .n_threads = 1};
            eng_rwkv7_scan(&ctx, T, H, S, r, w, k, v, a, b, st[q], o[q], scratch);
        }
        float eo = 0, es = 0, mo = 0, ms = 0;
        for (int64_t i = 0; i < (int64_t)T * D; i++) { eo = fmaxf(eo, fabsf(o[0][i] - o[1][i])); mo = fmaxf(mo, fabsf(o[1][i])); }
        for (int64_t i = 0; i < (int64_t)H * S * S; i++) { es = fmaxf(es, fabsf(st[0][i] - st[1][i])); ms = fmaxf(ms, fabsf(st[1][i])); }
        print_message("T %d: chunked vs recurrence: output %.3g (of %.3g), state %.3g (of %.3g)\n", T, eo, mo, es, ms);
        assert_true(eo <= 2e-5f * (1 + mo));
        assert_true(es <= 2e-5f * (1 + ms));
        for (int q = 0; q < 2; q++) { free(st[q]); free(o[q]); }
        free(scratch);
        free(in);
    }
#undef RND
}

// ----------------------------------------------------------------------------
// State

static void recurrent_state_truncates_only_to_its_length_or_zero(void **state) {
    (void)state;
    eng_model *m = load(g_synth, ENG_KERNEL_BLAS, ENG_PRECISION_FP32);
    assert_int_equal(eng_model_layer_kind(m, 0), ENG_LAYER_RECURRENT);
    assert_string_equal(eng_model_layer_kind_name(m, 1), "rwkv7");
    eng_seq *s = eng_seq_new(m, NT);
    assert_int_equal(eng_prefill(s, g_toks, 100, NULL, NULL), ENG_OK);
    assert_true(eng_seq_can_truncate(s, 100));
    assert_true(eng_seq_can_truncate(s, 0));
    assert_false(eng_seq_can_truncate(s, 64));
    assert_false(eng_seq_can_truncate(s, 99));
    assert_int_equal(eng_seq_truncate(s, 64), ENG_ERR_UNSUPPORTED);
    assert_int_equal(eng_seq_n_tokens(s), 100);
    assert_int_equal(eng_seq_truncate(s, 0), ENG_OK);
    eng_seq *fresh = eng_seq_new(m, NT);
    sc_same_state(s, fresh, "after a reset");
    eng_seq_free(s); eng_seq_free(fresh);
    eng_model_free(m);
}

static void checkpoint_and_blob_sizes_equal_the_documented_bytes(void **state) {
    (void)state;
    eng_model *m = load(g_synth, ENG_KERNEL_REF, ENG_PRECISION_FP32);
    const eng_model_info *in = eng_model_get_info(m);
    const int64_t D = in->n_embd, S = in->wkv_head_size, L = in->n_layer;
    const size_t per_layer = sizeof(float) * (size_t)(2 * D + (D / S) * S * S);
    assert_int_equal(in->rec_state_bytes, (int64_t)(per_layer * (size_t)L));
    eng_seq *s = eng_seq_new(m, NT);
    assert_int_equal(eng_prefill(s, g_toks, 37, NULL, NULL), ENG_OK);
    eng_ckpt *c = eng_seq_checkpoint(s);
    assert_int_equal(eng_ckpt_size(c), per_layer * (size_t)L);
    assert_int_equal(eng_seq_serialized_size(s), 24 + 16 * (size_t)L + 4 * 37 + per_layer * (size_t)L + 8);
    /* a round trip continues identically */
    size_t n;
    char *b = sc_blob(s, &n);
    eng_seq *t = eng_seq_new(m, NT);
    assert_int_equal(eng_seq_deserialize(t, b, n), ENG_OK);
    sc_same_state(s, t, "deserialised");
    assert_int_equal(eng_prefill(s, g_toks + 37, 50, NULL, NULL), ENG_OK);
    assert_int_equal(eng_prefill(t, g_toks + 37, 50, NULL, NULL), ENG_OK);
    sc_same_state(s, t, "continued");
    free(b);
    eng_ckpt_free(c);
    eng_seq_free(s); eng_seq_free(t);
    eng_model_free(m);
}

static void compare_catches_a_flip_in_the_wkv_state_and_a_shift_row(void **state) {
    (void)state;
    eng_model *m = load(g_synth, ENG_KERNEL_BLAS, ENG_PRECISION_FP32);
    const int64_t D = eng_model_get_info(m)->n_embd;
    eng_seq *a = eng_seq_new(m, NT), *b = eng_seq_new(m, NT);
    assert_int_equal(eng_prefill(a, g_toks, 70, NULL, NULL), ENG_OK);
    assert_int_equal(eng_seq_copy(b, a), ENG_OK);
    eng_seq_diff d;
    assert_int_equal(eng_seq_compare(a, b, &d), ENG_OK);
    assert_true(d.equal);
    eng_rwkv7_state *st = b->mem[1].state;
    uint32_t u;
    memcpy(&u, &st->wkv[123], 4);
    u ^= 1u;  /* one ULP */
    memcpy(&st->wkv[123], &u, 4);
    assert_int_equal(eng_seq_compare(a, b, &d), ENG_OK);
    assert_false(d.equal);
    assert_int_equal(d.part, ENG_SEQ_PART_STATE);
    assert_int_equal(d.layer, 1);
    assert_int_equal(d.index, 2 * D + 123);  /* after the two shift rows */
    assert_int_equal(eng_seq_copy(b, a), ENG_OK);
    ((eng_rwkv7_state *)b->mem[0].state)->shift_ffn[5] += 1.0f;
    assert_int_equal(eng_seq_compare(a, b, &d), ENG_OK);
    assert_int_equal(d.layer, 0);
    assert_int_equal(d.index, D + 5);
    eng_seq_free(a); eng_seq_free(b);
    eng_model_free(m);
}

// ----------------------------------------------------------------------------
// Cost model and synthetic models

static void prefill_flops_count_the_rwkv7_layer(void **state) {
    (void)state;
    eng_model *m = load(g_synth, ENG_KERNEL_BLAS, ENG_PRECISION_FP32);
    const eng_model_info *in = eng_model_get_info(m);
    eng_synth_params p = eng_synth_preset_arch("rwkv7", "tiny");
    const double D = in->n_embd, F = in->n_ff, S = in->wkv_head_size, V = in->n_vocab;
    const double base = 2 * 4 * D * D + 2 * 2 * D * F + 9 * D * S;
    const double l0 = base + 4 * D * (p.lora_decay + p.lora_iclr + p.lora_gate);
    const double l1 = l0 + 4 * D * p.lora_mix;
    const int32_t n = 100;
    const double want = n * (l0 + l1) + (n - 64) * 2 * D * V;
    const double got = eng_model_prefill_flops(m, 0, n);
    if (got != want) fail_msg("rwkv7 flops %.17g, want %.17g", got, want);
    eng_model_free(m);
}

static void synthetic_rwkv7_carries_llamacpps_keys_and_shapes(void **state) {
    (void)state;
    eng_synth_params p = eng_synth_preset_arch("rwkv7", "tiny");
    assert_true(p.ok);
    assert_int_equal(p.wkv_head_size, 64);
    p.seed = 9;
    void *b1, *b2;
    size_t n1, n2;
    char err[256];
    assert_int_equal(eng_synth_to_buffer(&p, &b1, &n1, err, sizeof err), ENG_OK);
    assert_int_equal(eng_synth_to_buffer(&p, &b2, &n2, err, sizeof err), ENG_OK);
    assert_int_equal(n1, n2);
    assert_memory_equal(b1, b2, n1);
    eng_gguf *g;
    assert_int_equal(eng_gguf_open_buffer(b1, n1, "synth", &g, err, sizeof err), ENG_OK);
    assert_int_equal(kv_int(g, "rwkv7.wkv.head_size"), 64);
    assert_int_equal(kv_int(g, "rwkv7.attention.head_count"), 0);
    assert_rwkv7_layout(g, p.n_embd, 259, p.n_layer, p.n_ff, p.lora_decay, p.lora_iclr, p.lora_mix, p.lora_gate);
    eng_gguf_close(g);
    free(b1);
    free(b2);
    /* a head size that does not divide D is refused naming the field */
    p.wkv_head_size = 48;
    assert_int_equal(eng_synth_to_buffer(&p, &b1, &n1, err, sizeof err), ENG_ERR_ARG);
    assert_non_null(strstr(err, "wkv_head_size"));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(converted_model_gives_rwkvcpps_logits),
        cmocka_unit_test(converted_gguf_has_llamacpps_keys_tensors_and_byte_vocabulary),
        cmocka_unit_test(converter_refuses_malformed_and_unsupported_files),
        cmocka_unit_test(grid_checkpoint_restore_is_bit_identical_to_cold),
        cmocka_unit_test(grid_checkpoint_restore_is_bit_identical_with_threads),
        cmocka_unit_test(off_grid_checkpoint_diverges_with_blas_only),
        cmocka_unit_test(ref_results_do_not_depend_on_the_thread_count),
        cmocka_unit_test(blas_chunked_scan_agrees_with_the_recurrence),
        cmocka_unit_test(recurrent_state_truncates_only_to_its_length_or_zero),
        cmocka_unit_test(checkpoint_and_blob_sizes_equal_the_documented_bytes),
        cmocka_unit_test(compare_catches_a_flip_in_the_wkv_state_and_a_shift_row),
        cmocka_unit_test(prefill_flops_count_the_rwkv7_layer),
        cmocka_unit_test(synthetic_rwkv7_carries_llamacpps_keys_and_shapes),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
