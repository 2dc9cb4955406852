/*
 * tests/test_gguf.c: the GGUF reader, writer and element conversions.
 *
 * Real files (../shared/data) must open with their documented contents; a
 * sample file built by the writer must read back identically for v2/v3 and
 * alignments 32/64; every truncation and planted fault must be rejected with
 * the right status, and seeded random byte flips must never yield a tensor
 * or string outside the buffer. Buffers handed to the reader are malloc'd to
 * their exact size so that AddressSanitizer catches any over-read.
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

#include <gsl/gsl_randist.h>
#include <gsl/gsl_rng.h>

#include "gguf.h"
#include "status.h"
#include "util.h"

#define STORIES "../shared/data/models/stories260K.gguf"
#define VOCAB_SPM "../shared/data/vocab/ggml-vocab-llama-spm.gguf"
#define VOCAB_GPT2 "../shared/data/vocab/ggml-vocab-gpt-2.gguf"

static bool have_file(const char *path) {
    if (access(path, R_OK) == 0) return true;
    fprintf(stderr, "skipping: %s is absent\n", path);
    return false;
}

static uint32_t f2u(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }
static float u2f(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }

/* A copy of buf[0..n) in its own allocation of exactly n bytes (ASan sees over-reads). */
static void *exact_copy(const void *buf, size_t n) {
    void *p = malloc(n ? n : 1);
    assert_non_null(p);
    if (n) memcpy(p, buf, n);
    return p;
}

/* Opens a private exact-size copy; returns the status and (on success) *g, *copy. */
static int open_copy(const void *buf, size_t n, eng_gguf **g, void **copy, char *err, size_t errlen) {
    *copy = exact_copy(buf, n);
    return eng_gguf_open_buffer(*copy, n, "sample.gguf", g, err, errlen);
}

static int64_t key_index(const eng_gguf *g, const char *key) {
    int64_t i = eng_gguf_find_key(g, key);
    assert_true(i >= 0);
    return i;
}

// ----------------------------------------------------------------------------
// The sample file: every value type, odd-shaped tensors of every type

enum { F32_N = 21, F16_N = 30, BF16_N = 3, Q8_N = 192, Q84_N = 192, LAST_N = 5 };

typedef struct sample_data {
    float    f32[F32_N];
    uint16_t f16[F16_N];
    uint16_t bf16[BF16_N];
    uint8_t  q8[Q8_N / 32 * 34];
    uint8_t  q84[Q84_N / 32 * 34];
    float    last[LAST_N];
} sample_data;

static const uint8_t  A_U8[]  = {0, 1, 255};
static const int8_t   A_I8[]  = {-128, 0, 127, 5};
static const uint16_t A_U16[] = {0, 65535};
static const int16_t  A_I16[] = {-32768, 32767, 1};
static const uint32_t A_U32[] = {1, 2, 3, 4000000000u, 5};
static const int32_t  A_I32[] = {-2147483647 - 1, 2147483647};
static const float    A_F32[] = {1.5f, -0.0f, 3.25e-7f};
static const uint8_t  A_BOOL[] = {1, 0, 1};
static const uint64_t A_U64[] = {UINT64_MAX, 0};
static const int64_t  A_I64[] = {INT64_MIN, -1, INT64_MAX};
static const double   A_F64[] = {0.1, -1e300};
static const char *const A_STR[] = {"", "a", "bc\0d", "\xe6\x97\xa5\xe6\x9c\xac"};
static const size_t   A_STR_LEN[] = {0, 1, 4, 6};

static void fill_sample_data(sample_data *d) {
    for (int i = 0; i < F32_N; i++) d->f32[i] = (float)i * 0.37f - 2.0f;
    for (int i = 0; i < F16_N; i++) d->f16[i] = eng_f32_to_fp16((float)i / 7.0f - 1.0f);
    for (int i = 0; i < BF16_N; i++) d->bf16[i] = eng_f32_to_bf16((float)i * 1.1f);
    float x[Q8_N];
    for (int i = 0; i < Q8_N; i++) x[i] = sinf((float)i * 0.3f) * 2.0f;
    eng_ggml_from_f32(ENG_GGML_TYPE_Q8_0, x, d->q8, Q8_N);
    for (int i = 0; i < Q84_N; i++) x[i] = cosf((float)i * 0.7f);
    eng_ggml_from_f32(ENG_GGML_TYPE_Q8_0, x, d->q84, Q84_N);
    for (int i = 0; i < LAST_N; i++) d->last[i] = (float)(i + 1);
}

/* Builds the sample with the writer into a malloc'd buffer. */
static void build_sample(uint32_t version, size_t align, const sample_data *d, void **buf, size_t *n) {
    eng_gguf_writer *w = eng_gguf_writer_new(version, align);
    assert_non_null(w);
    assert_int_equal(eng_gguf_writer_set_str(w, "general.architecture", "test"), ENG_OK);
    uint8_t u8 = 200; int8_t i8 = -100; uint16_t u16 = 60000; int16_t i16 = -30000;
    int64_t i64 = -(INT64_C(1) << 50); double f64 = 0.1;
    assert_int_equal(eng_gguf_writer_set_scalar(w, "s.u8", ENG_GGUF_TYPE_UINT8, &u8), ENG_OK);
    assert_int_equal(eng_gguf_writer_set_scalar(w, "s.i8", ENG_GGUF_TYPE_INT8, &i8), ENG_OK);
    assert_int_equal(eng_gguf_writer_set_scalar(w, "s.u16", ENG_GGUF_TYPE_UINT16, &u16), ENG_OK);
    assert_int_equal(eng_gguf_writer_set_scalar(w, "s.i16", ENG_GGUF_TYPE_INT16, &i16), ENG_OK);
    assert_int_equal(eng_gguf_writer_set_u32(w, "s.u32", 4000000000u), ENG_OK);
    assert_int_equal(eng_gguf_writer_set_i32(w, "s.i32", -2000000000), ENG_OK);
    assert_int_equal(eng_gguf_writer_set_f32(w, "s.f32", 1.5f), ENG_OK);
    assert_int_equal(eng_gguf_writer_set_bool(w, "s.bool", true), ENG_OK);
    assert_int_equal(eng_gguf_writer_set_str(w, "s.str", "h\xc3\xa9llo"), ENG_OK);
    assert_int_equal(eng_gguf_writer_set_u64(w, "s.u64", (UINT64_C(1) << 60) | 5), ENG_OK);
    assert_int_equal(eng_gguf_writer_set_scalar(w, "s.i64", ENG_GGUF_TYPE_INT64, &i64), ENG_OK);
    assert_int_equal(eng_gguf_writer_set_scalar(w, "s.f64", ENG_GGUF_TYPE_FLOAT64, &f64), ENG_OK);
    assert_int_equal(eng_gguf_writer_set_str(w, "s.empty", ""), ENG_OK);
    assert_int_equal(eng_gguf_writer_set_arr(w, "a.u8", ENG_GGUF_TYPE_UINT8, 3, A_U8), ENG_OK);
    assert_int_equal(eng_gguf_writer_set_arr(w, "a.i8", ENG_GGUF_TYPE_INT8, 4, A_I8), ENG_OK);
    assert_int_equal(eng_gguf_writer_set_arr(w, "a.u16", ENG_GGUF_TYPE_UINT16, 2, A_U16), ENG_OK);
    assert_int_equal(eng_gguf_writer_set_arr(w, "a.i16", ENG_GGUF_TYPE_INT16, 3, A_I16), ENG_OK);
    assert_int_equal(eng_gguf_writer_set_arr(w, "a.u32", ENG_GGUF_TYPE_UINT32, 5, A_U32), ENG_OK);
    assert_int_equal(eng_gguf_writer_set_arr(w, "a.i32", ENG_GGUF_TYPE_INT32, 2, A_I32), ENG_OK);
    assert_int_equal(eng_gguf_writer_set_arr(w, "a.f32", ENG_GGUF_TYPE_FLOAT32, 3, A_F32), ENG_OK);
    assert_int_equal(eng_gguf_writer_set_arr(w, "a.bool", ENG_GGUF_TYPE_BOOL, 3, A_BOOL), ENG_OK);
    assert_int_equal(eng_gguf_writer_set_arr(w, "a.u64", ENG_GGUF_TYPE_UINT64, 2, A_U64), ENG_OK);
    assert_int_equal(eng_gguf_writer_set_arr(w, "a.i64", ENG_GGUF_TYPE_INT64, 3, A_I64), ENG_OK);
    assert_int_equal(eng_gguf_writer_set_arr(w, "a.f64", ENG_GGUF_TYPE_FLOAT64, 2, A_F64), ENG_OK);
    assert_int_equal(eng_gguf_writer_set_arr(w, "a.empty", ENG_GGUF_TYPE_UINT32, 0, NULL), ENG_OK);
    assert_int_equal(eng_gguf_writer_set_arr_str(w, "a.str", 4, A_STR, A_STR_LEN), ENG_OK);
    assert_int_equal(eng_gguf_writer_set_arr_str(w, "a.str_empty", 0, NULL, NULL), ENG_OK);

    const int64_t ne_f32[] = {7, 3}, ne_f16[] = {5, 2, 3}, ne_bf16[] = {3}, ne_q8[] = {64, 3},
                  ne_q84[] = {32, 1, 2, 3}, ne_last[] = {5};
    assert_int_equal(eng_gguf_writer_add_tensor(w, "t.f32", ENG_GGML_TYPE_F32, 2, ne_f32, d->f32,
                                                sizeof d->f32), ENG_OK);
    assert_int_equal(eng_gguf_writer_add_tensor(w, "t.f16", ENG_GGML_TYPE_F16, 3, ne_f16, d->f16,
                                                sizeof d->f16), ENG_OK);
    assert_int_equal(eng_gguf_writer_add_tensor(w, "t.bf16", ENG_GGML_TYPE_BF16, 1, ne_bf16, d->bf16,
                                                sizeof d->bf16), ENG_OK);
    assert_int_equal(eng_gguf_writer_add_tensor(w, "t.q8", ENG_GGML_TYPE_Q8_0, 2, ne_q8, d->q8,
                                                sizeof d->q8), ENG_OK);
    assert_int_equal(eng_gguf_writer_add_tensor(w, "t.q8_4d", ENG_GGML_TYPE_Q8_0, 4, ne_q84, d->q84,
                                                sizeof d->q84), ENG_OK);
    assert_int_equal(eng_gguf_writer_add_tensor(w, "t.last", ENG_GGML_TYPE_F32, 1, ne_last, d->last,
                                                sizeof d->last), ENG_OK);
    assert_int_equal(eng_gguf_writer_to_buffer(w, buf, n), ENG_OK);
    eng_gguf_writer_free(w);
}

static void check_tensor(const eng_gguf *g, const char *name, uint32_t type, uint32_t n_dims,
                         const int64_t *ne, const void *data, size_t nbytes) {
    const eng_gguf_tensor *t = eng_gguf_find_tensor(g, name);
    assert_non_null(t);
    assert_string_equal(t->name, name);
    assert_int_equal(t->type, type);
    assert_int_equal(t->n_dims, n_dims);
    for (uint32_t d = 0; d < ENG_GGUF_MAX_DIMS; d++) assert_int_equal(t->ne[d], d < n_dims ? ne[d] : 1);
    assert_int_equal(t->nbytes, nbytes);
    assert_memory_equal(t->data, data, nbytes);
    assert_int_equal(t->offset % eng_gguf_alignment(g), 0);
    size_t n;
    const uint8_t *base = eng_gguf_bytes(g, &n);
    assert_int_equal(((const uint8_t *)t->data - base) % eng_gguf_alignment(g), 0);
}

/* Reads the sample back and checks every value. */
static void check_sample(const eng_gguf *g, uint32_t version, size_t align, const sample_data *d) {
    int64_t v;
    uint64_t u;
    double f;
    bool b;
    const char *s;
    size_t len;
    assert_int_equal(eng_gguf_version(g), version);
    assert_int_equal(eng_gguf_alignment(g), align);
    assert_int_equal(eng_gguf_get_str(g, "general.architecture", &s, &len), ENG_OK);
    assert_int_equal(len, 4);
    assert_memory_equal(s, "test", 4);
    assert_int_equal(eng_gguf_get_int(g, "s.u8", &v), ENG_OK);   assert_int_equal(v, 200);
    assert_int_equal(eng_gguf_get_int(g, "s.i8", &v), ENG_OK);   assert_int_equal(v, -100);
    assert_int_equal(eng_gguf_get_int(g, "s.u16", &v), ENG_OK);  assert_int_equal(v, 60000);
    assert_int_equal(eng_gguf_get_int(g, "s.i16", &v), ENG_OK);  assert_int_equal(v, -30000);
    assert_int_equal(eng_gguf_get_int(g, "s.u32", &v), ENG_OK);  assert_int_equal(v, 4000000000);
    assert_int_equal(eng_gguf_get_int(g, "s.i32", &v), ENG_OK);  assert_int_equal(v, -2000000000);
    assert_int_equal(eng_gguf_get_int(g, "s.i64", &v), ENG_OK);
    assert_true(v == -(INT64_C(1) << 50));
    assert_int_equal(eng_gguf_get_uint64(g, "s.u64", &u), ENG_OK);
    assert_true(u == ((UINT64_C(1) << 60) | 5));
    assert_int_equal(eng_gguf_get_float(g, "s.f32", &f), ENG_OK); assert_true(f == 1.5);
    assert_int_equal(eng_gguf_get_float(g, "s.f64", &f), ENG_OK); assert_true(f == 0.1);
    assert_int_equal(eng_gguf_get_bool(g, "s.bool", &b), ENG_OK);  assert_true(b);
    assert_int_equal(eng_gguf_get_str(g, "s.str", &s, &len), ENG_OK);
    assert_int_equal(len, 6);
    assert_memory_equal(s, "h\xc3\xa9llo", 6);
    assert_int_equal(eng_gguf_get_str(g, "s.empty", &s, &len), ENG_OK);
    assert_int_equal(len, 0);

    struct { const char *key; uint32_t type; uint64_t n; const void *data; size_t es; } arrs[] = {
        {"a.u8", ENG_GGUF_TYPE_UINT8, 3, A_U8, 1},       {"a.i8", ENG_GGUF_TYPE_INT8, 4, A_I8, 1},
        {"a.u16", ENG_GGUF_TYPE_UINT16, 2, A_U16, 2},    {"a.i16", ENG_GGUF_TYPE_INT16, 3, A_I16, 2},
        {"a.u32", ENG_GGUF_TYPE_UINT32, 5, A_U32, 4},    {"a.i32", ENG_GGUF_TYPE_INT32, 2, A_I32, 4},
        {"a.f32", ENG_GGUF_TYPE_FLOAT32, 3, A_F32, 4},   {"a.bool", ENG_GGUF_TYPE_BOOL, 3, A_BOOL, 1},
        {"a.u64", ENG_GGUF_TYPE_UINT64, 2, A_U64, 8},    {"a.i64", ENG_GGUF_TYPE_INT64, 3, A_I64, 8},
        {"a.f64", ENG_GGUF_TYPE_FLOAT64, 2, A_F64, 8},   {"a.empty", ENG_GGUF_TYPE_UINT32, 0, NULL, 4},
    };
    for (size_t k = 0; k < sizeof arrs / sizeof arrs[0]; k++) {
        int64_t i = key_index(g, arrs[k].key);
        assert_int_equal(eng_gguf_kv_type(g, i), ENG_GGUF_TYPE_ARRAY);
        assert_int_equal(eng_gguf_arr_type(g, i), arrs[k].type);
        assert_int_equal(eng_gguf_arr_n(g, i), arrs[k].n);
        if (arrs[k].n) assert_memory_equal(eng_gguf_get_arr_data(g, i), arrs[k].data, arrs[k].n * arrs[k].es);
    }
    assert_true(eng_gguf_get_arr_num(g, key_index(g, "a.i8"), 0) == -128.0);
    assert_true(eng_gguf_get_arr_num(g, key_index(g, "a.u32"), 3) == 4000000000.0);
    assert_true(eng_gguf_get_arr_num(g, key_index(g, "a.f32"), 2) == (double)3.25e-7f);
    assert_true(eng_gguf_get_arr_num(g, key_index(g, "a.f64"), 1) == -1e300);
    assert_true(eng_gguf_get_arr_num(g, key_index(g, "a.i64"), 1) == -1.0);
    assert_true(eng_gguf_get_arr_num(g, key_index(g, "a.bool"), 2) == 1.0);

    int64_t si = key_index(g, "a.str");
    assert_int_equal(eng_gguf_arr_type(g, si), ENG_GGUF_TYPE_STRING);
    assert_int_equal(eng_gguf_arr_n(g, si), 4);
    assert_null(eng_gguf_get_arr_data(g, si));
    for (uint64_t j = 0; j < 4; j++) {
        assert_int_equal(eng_gguf_get_arr_str(g, si, j, &s, &len), ENG_OK);
        assert_int_equal(len, A_STR_LEN[j]);
        if (len) assert_memory_equal(s, A_STR[j], len);
    }
    assert_int_equal(eng_gguf_get_arr_str(g, si, 4, &s, &len), ENG_ERR_RANGE);
    assert_int_equal(eng_gguf_arr_n(g, key_index(g, "a.str_empty")), 0);

    assert_int_equal(eng_gguf_n_tensors(g), 6);
    const int64_t ne_f32[] = {7, 3}, ne_f16[] = {5, 2, 3}, ne_bf16[] = {3}, ne_q8[] = {64, 3},
                  ne_q84[] = {32, 1, 2, 3}, ne_last[] = {5};
    check_tensor(g, "t.f32", ENG_GGML_TYPE_F32, 2, ne_f32, d->f32, sizeof d->f32);
    check_tensor(g, "t.f16", ENG_GGML_TYPE_F16, 3, ne_f16, d->f16, sizeof d->f16);
    check_tensor(g, "t.bf16", ENG_GGML_TYPE_BF16, 1, ne_bf16, d->bf16, sizeof d->bf16);
    check_tensor(g, "t.q8", ENG_GGML_TYPE_Q8_0, 2, ne_q8, d->q8, sizeof d->q8);
    check_tensor(g, "t.q8_4d", ENG_GGML_TYPE_Q8_0, 4, ne_q84, d->q84, sizeof d->q84);
    check_tensor(g, "t.last", ENG_GGML_TYPE_F32, 1, ne_last, d->last, sizeof d->last);
    assert_string_equal(eng_gguf_tensor_at(g, 0)->name, "t.f32");
    assert_string_equal(eng_gguf_tensor_at(g, 5)->name, "t.last");
    assert_null(eng_gguf_find_tensor(g, "t.missing"));
}

static void round_trip(uint32_t version, size_t align) {
    sample_data d;
    fill_sample_data(&d);
    void *buf;
    size_t n;
    build_sample(version, align, &d, &buf, &n);
    assert_int_equal(n % align, 0);
    eng_gguf *g;
    char err[256];
    void *copy = aligned_alloc(64, (n + 63) / 64 * 64);
    assert_non_null(copy);
    memcpy(copy, buf, n);
    assert_int_equal(eng_gguf_open_buffer(copy, n, "sample", &g, err, sizeof err), ENG_OK);
    check_sample(g, version, align, &d);
    eng_gguf_close(g);
    free(copy);
    free(buf);
}

// ----------------------------------------------------------------------------
// Real files

static void stories260k_opens_with_its_documented_hyperparameters(void **state) {
    (void)state;
    if (!have_file(STORIES)) skip();
    eng_gguf *g;
    char err[256];
    assert_int_equal(eng_gguf_open(STORIES, &g, err, sizeof err), ENG_OK);
    assert_int_equal(eng_gguf_version(g), 3);
    assert_int_equal(eng_gguf_alignment(g), 32);
    const char *s;
    size_t len;
    assert_int_equal(eng_gguf_get_str(g, "general.architecture", &s, &len), ENG_OK);
    assert_int_equal(len, 5);
    assert_memory_equal(s, "llama", 5);
    struct { const char *key; int64_t want; } ints[] = {
        {"llama.block_count", 5}, {"llama.embedding_length", 64},
        {"llama.attention.head_count", 8}, {"llama.attention.head_count_kv", 4},
        {"llama.rope.dimension_count", 8}, {"llama.feed_forward_length", 172},
        {"llama.context_length", 2048},
    };
    for (size_t k = 0; k < sizeof ints / sizeof ints[0]; k++) {
        int64_t v = -1;
        assert_int_equal(eng_gguf_get_int(g, ints[k].key, &v), ENG_OK);
        assert_int_equal(v, ints[k].want);
    }
    double eps;
    assert_int_equal(eng_gguf_get_float(g, "llama.attention.layer_norm_rms_epsilon", &eps), ENG_OK);
    assert_true(eps == (double)1e-5f);
    int64_t ti = key_index(g, "tokenizer.ggml.tokens");
    assert_int_equal(eng_gguf_arr_type(g, ti), ENG_GGUF_TYPE_STRING);
    assert_int_equal(eng_gguf_arr_n(g, ti), 512);
    assert_int_equal(eng_gguf_get_arr_str(g, ti, 0, &s, &len), ENG_OK);
    assert_int_equal(len, 5);
    assert_memory_equal(s, "<unk>", 5);
    const eng_gguf_tensor *t = eng_gguf_find_tensor(g, "token_embd.weight");
    assert_non_null(t);
    assert_int_equal(t->type, ENG_GGML_TYPE_F32);
    assert_int_equal(t->n_dims, 2);
    assert_int_equal(t->ne[0], 64);
    assert_int_equal(t->ne[1], 512);
    assert_int_equal(t->nbytes, 64 * 512 * 4);
    assert_int_equal(eng_gguf_n_tensors(g), 3 + 5 * 9);
    eng_gguf_close(g);
}

static void vocabulary_files_open_with_their_token_counts(void **state) {
    (void)state;
    if (!have_file(VOCAB_SPM) || !have_file(VOCAB_GPT2)) skip();
    struct { const char *path; uint64_t n; } v[] = {{VOCAB_SPM, 32000}, {VOCAB_GPT2, 50257}};
    for (int k = 0; k < 2; k++) {
        eng_gguf *g;
        char err[256];
        assert_int_equal(eng_gguf_open(v[k].path, &g, err, sizeof err), ENG_OK);
        int64_t ti = key_index(g, "tokenizer.ggml.tokens");
        assert_int_equal(eng_gguf_arr_n(g, ti), v[k].n);
        const char *s;
        size_t len;
        assert_int_equal(eng_gguf_get_arr_str(g, ti, v[k].n - 1, &s, &len), ENG_OK);
        assert_true(len > 0);
        assert_int_equal(eng_gguf_n_tensors(g), 0);
        eng_gguf_close(g);
    }
}

static void rewriting_stories260k_reproduces_its_bytes_exactly(void **state) {
    (void)state;
    if (!have_file(STORIES)) skip();
    eng_gguf *g;
    char err[256];
    assert_int_equal(eng_gguf_open(STORIES, &g, err, sizeof err), ENG_OK);
    eng_gguf_writer *w = eng_gguf_writer_new(eng_gguf_version(g), eng_gguf_alignment(g));
    assert_int_equal(eng_gguf_writer_copy_kv(w, g, ""), ENG_OK);
    for (int64_t i = 0; i < eng_gguf_n_tensors(g); i++) {
        const eng_gguf_tensor *t = eng_gguf_tensor_at(g, i);
        assert_int_equal(eng_gguf_writer_add_tensor(w, t->name, t->type, t->n_dims, t->ne, t->data,
                                                    t->nbytes), ENG_OK);
    }
    void *buf;
    size_t n, n0;
    assert_int_equal(eng_gguf_writer_to_buffer(w, &buf, &n), ENG_OK);
    const void *orig = eng_gguf_bytes(g, &n0);
    assert_int_equal(n, n0);
    assert_memory_equal(buf, orig, n);
    free(buf);
    eng_gguf_writer_free(w);
    eng_gguf_close(g);
}

static void opening_a_missing_file_is_an_io_error_naming_it(void **state) {
    (void)state;
    eng_gguf *g = (eng_gguf *)1;
    char err[256] = "";
    assert_int_equal(eng_gguf_open("/nonexistent/x.gguf", &g, err, sizeof err), ENG_ERR_IO);
    assert_null(g);
    assert_non_null(strstr(err, "/nonexistent/x.gguf"));
}

// ----------------------------------------------------------------------------
// Round trips and the writer

static void sample_round_trips_as_v3_with_alignment_32(void **state) { (void)state; round_trip(3, 32); }
static void sample_round_trips_as_v2_with_alignment_32(void **state) { (void)state; round_trip(2, 32); }
static void sample_round_trips_as_v3_with_alignment_64(void **state) { (void)state; round_trip(3, 64); }
static void sample_round_trips_as_v2_with_alignment_64(void **state) { (void)state; round_trip(2, 64); }

static void written_file_opens_from_disk_and_matches_the_buffer(void **state) {
    (void)state;
    sample_data d;
    fill_sample_data(&d);
    char dir[] = "/tmp/kvr_gguf_XXXXXX";
    assert_non_null(mkdtemp(dir));
    char path[256];
    snprintf(path, sizeof path, "%s/s.gguf", dir);
    void *buf;
    size_t n;
    build_sample(3, 32, &d, &buf, &n);
    /* rebuild through the file writer: same bytes */
    eng_gguf *g0;
    char err[256];
    assert_int_equal(eng_gguf_open_buffer(buf, n, "b", &g0, err, sizeof err), ENG_OK);
    eng_gguf_writer *w = eng_gguf_writer_new(3, 32);
    assert_int_equal(eng_gguf_writer_copy_kv(w, g0, ""), ENG_OK);
    for (int64_t i = 0; i < eng_gguf_n_tensors(g0); i++) {
        const eng_gguf_tensor *t = eng_gguf_tensor_at(g0, i);
        assert_int_equal(eng_gguf_writer_add_tensor(w, t->name, t->type, t->n_dims, t->ne, t->data,
                                                    t->nbytes), ENG_OK);
    }
    assert_int_equal(eng_gguf_writer_write(w, path, err, sizeof err), ENG_OK);
    eng_gguf_writer_free(w);
    eng_gguf *g;
    assert_int_equal(eng_gguf_open(path, &g, err, sizeof err), ENG_OK);
    size_t n2;
    const void *b2 = eng_gguf_bytes(g, &n2);
    assert_int_equal(n2, n);
    assert_memory_equal(b2, buf, n);
    check_sample(g, 3, 32, &d);
    eng_gguf_close(g);
    eng_gguf_close(g0);
    free(buf);
    unlink(path);
    rmdir(dir);
}

static void setting_an_existing_key_replaces_it_in_place(void **state) {
    (void)state;
    eng_gguf_writer *w = eng_gguf_writer_new(3, 0);
    assert_int_equal(eng_gguf_writer_set_u32(w, "a", 1), ENG_OK);
    assert_int_equal(eng_gguf_writer_set_str(w, "b", "x"), ENG_OK);
    assert_int_equal(eng_gguf_writer_set_str(w, "a", "now a string"), ENG_OK);
    void *buf;
    size_t n;
    assert_int_equal(eng_gguf_writer_to_buffer(w, &buf, &n), ENG_OK);
    eng_gguf *g;
    char err[256];
    assert_int_equal(eng_gguf_open_buffer(buf, n, "b", &g, err, sizeof err), ENG_OK);
    assert_int_equal(eng_gguf_n_kv(g), 2);
    assert_string_equal(eng_gguf_key(g, 0), "a");
    const char *s;
    size_t len;
    assert_int_equal(eng_gguf_get_str(g, "a", &s, &len), ENG_OK);
    assert_int_equal(len, 12);
    int64_t v;
    assert_int_equal(eng_gguf_get_int(g, "a", &v), ENG_ERR_TYPE);
    assert_int_equal(eng_gguf_get_int(g, "zzz", &v), ENG_ERR_NOT_FOUND);
    eng_gguf_close(g);
    free(buf);
    eng_gguf_writer_free(w);
}

static void writer_rejects_bad_tensors_and_bad_alignment(void **state) {
    (void)state;
    eng_gguf_writer *w = eng_gguf_writer_new(3, 32);
    float x[64] = {0};
    const int64_t ne[] = {8, 2}, ne_q[] = {33};
    assert_int_equal(eng_gguf_writer_add_tensor(w, "t", ENG_GGML_TYPE_F32, 2, ne, x, 60), ENG_ERR_ARG);
    assert_int_equal(eng_gguf_writer_add_tensor(w, "t", ENG_GGML_TYPE_F32, 2, ne, x, 64), ENG_OK);
    assert_int_equal(eng_gguf_writer_add_tensor(w, "t", ENG_GGML_TYPE_F32, 2, ne, x, 64), ENG_ERR_ARG);
    assert_int_equal(eng_gguf_writer_add_tensor(w, "q", ENG_GGML_TYPE_Q8_0, 1, ne_q, x, 34), ENG_ERR_ARG);
    assert_int_equal(eng_gguf_writer_add_tensor(w, "u", 2, 1, ne, x, 16), ENG_ERR_ARG);
    assert_int_equal(eng_gguf_writer_add_tensor(w, "d", ENG_GGML_TYPE_F32, 5, ne, x, 64), ENG_ERR_ARG);
    assert_int_equal(eng_gguf_writer_set_u32(w, "general.alignment", 48), ENG_ERR_ARG);
    assert_int_equal(eng_gguf_writer_set_u64(w, "general.alignment", 64), ENG_ERR_TYPE);
    assert_int_equal(eng_gguf_writer_set_u32(w, "general.alignment", 128), ENG_OK);
    void *buf;
    size_t n;
    assert_int_equal(eng_gguf_writer_to_buffer(w, &buf, &n), ENG_OK);
    eng_gguf *g;
    char err[256];
    assert_int_equal(eng_gguf_open_buffer(buf, n, "b", &g, err, sizeof err), ENG_OK);
    assert_int_equal(eng_gguf_alignment(g), 128);
    eng_gguf_close(g);
    free(buf);
    eng_gguf_writer_free(w);
}

// ----------------------------------------------------------------------------
// Nested arrays (built by hand: the writer only makes them by copying)

static void put_u32(eng_buf *b, uint32_t v) { assert_int_equal(eng_buf_append(b, &v, 4), ENG_OK); }
static void put_u64(eng_buf *b, uint64_t v) { assert_int_equal(eng_buf_append(b, &v, 8), ENG_OK); }
static void put_str(eng_buf *b, const char *s) {
    put_u64(b, strlen(s));
    assert_int_equal(eng_buf_append(b, s, strlen(s)), ENG_OK);
}

/* n.before u32, n.nested [[u32 1,2], [str "x"]], n.deep nested `depth` levels, n.after "ok". */
static void build_nested(eng_buf *b, int depth) {
    assert_int_equal(eng_buf_append(b, "GGUF", 4), ENG_OK);
    put_u32(b, 3);
    put_u64(b, 0);
    put_u64(b, 4);
    put_str(b, "n.before");
    put_u32(b, ENG_GGUF_TYPE_UINT32);
    put_u32(b, 7);
    put_str(b, "n.nested");
    put_u32(b, ENG_GGUF_TYPE_ARRAY);
    put_u32(b, ENG_GGUF_TYPE_ARRAY);
    put_u64(b, 2);
    put_u32(b, ENG_GGUF_TYPE_UINT32);
    put_u64(b, 2);
    put_u32(b, 1);
    put_u32(b, 2);
    put_u32(b, ENG_GGUF_TYPE_STRING);
    put_u64(b, 1);
    put_str(b, "x");
    put_str(b, "n.deep");
    put_u32(b, ENG_GGUF_TYPE_ARRAY);
    for (int k = 1; k < depth; k++) {   /* depth-1 levels of single-element arrays */
        put_u32(b, ENG_GGUF_TYPE_ARRAY);
        put_u64(b, 1);
    }
    put_u32(b, ENG_GGUF_TYPE_UINT8);
    put_u64(b, 1);
    assert_int_equal(eng_buf_append(b, "\x2a", 1), ENG_OK);
    put_str(b, "n.after");
    put_u32(b, ENG_GGUF_TYPE_STRING);
    put_str(b, "ok");
}

static void nested_arrays_are_parsed_skipped_and_copied_verbatim(void **state) {
    (void)state;
    eng_buf b = {0};
    build_nested(&b, 5);
    eng_gguf *g;
    void *copy;
    char err[256];
    assert_int_equal(open_copy(b.data, b.len, &g, &copy, err, sizeof err), ENG_OK);
    int64_t i = key_index(g, "n.nested");
    assert_int_equal(eng_gguf_arr_type(g, i), ENG_GGUF_TYPE_ARRAY);
    assert_int_equal(eng_gguf_arr_n(g, i), 2);
    assert_null(eng_gguf_get_arr_data(g, i));
    const char *s;
    size_t len;
    assert_int_equal(eng_gguf_get_arr_str(g, i, 0, &s, &len), ENG_ERR_TYPE);
    assert_int_equal(eng_gguf_get_str(g, "n.after", &s, &len), ENG_OK);
    assert_int_equal(len, 2);
    assert_memory_equal(s, "ok", 2);
    int64_t v;
    assert_int_equal(eng_gguf_get_int(g, "n.before", &v), ENG_OK);
    assert_int_equal(v, 7);
    /* copying every KV reproduces the header bytes (plus the writer's alignment padding) */
    eng_gguf_writer *w = eng_gguf_writer_new(3, 32);
    assert_int_equal(eng_gguf_writer_copy_kv(w, g, ""), ENG_OK);
    void *out;
    size_t n;
    assert_int_equal(eng_gguf_writer_to_buffer(w, &out, &n), ENG_OK);
    assert_true(n >= b.len);
    assert_memory_equal(out, b.data, b.len);
    free(out);
    eng_gguf_writer_free(w);
    eng_gguf_close(g);
    free(copy);
    eng_buf_free(&b);
}

static void arrays_nested_too_deep_are_rejected(void **state) {
    (void)state;
    eng_buf b = {0};
    build_nested(&b, 40);
    eng_gguf *g;
    void *copy;
    char err[256] = "";
    assert_int_equal(open_copy(b.data, b.len, &g, &copy, err, sizeof err), ENG_ERR_FORMAT);
    assert_non_null(strstr(err, "nested"));
    free(copy);
    eng_buf_free(&b);
}

// ----------------------------------------------------------------------------
// Corruption: truncation, random flips, planted faults

/* End of the last tensor's data (excluding the trailing padding). */
static size_t data_end(const void *buf, size_t n) {
    eng_gguf *g;
    char err[256];
    assert_int_equal(eng_gguf_open_buffer(buf, n, "s", &g, err, sizeof err), ENG_OK);
    size_t end = 0;
    for (int64_t i = 0; i < eng_gguf_n_tensors(g); i++) {
        const eng_gguf_tensor *t = eng_gguf_tensor_at(g, i);
        size_t e = (size_t)((const uint8_t *)t->data - (const uint8_t *)buf) + t->nbytes;
        if (e > end) end = e;
    }
    eng_gguf_close(g);
    return end;
}

static void truncated_file_is_rejected_at_every_offset(void **state) {
    (void)state;
    sample_data d;
    fill_sample_data(&d);
    void *buf;
    size_t n;
    build_sample(3, 32, &d, &buf, &n);
    size_t end = data_end(buf, n);
    int tried = 0;
    for (size_t cut = 0; cut < end; cut++) {
        eng_gguf *g = NULL;
        void *copy;
        char err[256] = "";
        int rc = open_copy(buf, cut, &g, &copy, err, sizeof err);
        if (rc != ENG_ERR_FORMAT) fprintf(stderr, "cut at %zu: status %d (%s)\n", cut, rc, err);
        assert_int_equal(rc, ENG_ERR_FORMAT);
        assert_null(g);
        assert_true(strncmp(err, "sample.gguf: offset ", 20) == 0);
        free(copy);
        tried++;
    }
    assert_true(tried > 1000);
    free(buf);
}

/* Every tensor and every string the reader hands out lies inside [buf, buf+n). */
static void check_in_bounds(const eng_gguf *g, const void *buf, size_t n) {
    const uint8_t *lo = buf, *hi = lo + n;
    for (int64_t i = 0; i < eng_gguf_n_tensors(g); i++) {
        const eng_gguf_tensor *t = eng_gguf_tensor_at(g, i);
        const uint8_t *p = t->data;
        assert_true(p >= lo && p <= hi && t->nbytes <= (size_t)(hi - p));
        assert_int_equal(t->nbytes, eng_ggml_row_size(t->type, t->ne[0]) * t->ne[1] * t->ne[2] * t->ne[3]);
    }
    for (int64_t i = 0; i < eng_gguf_n_kv(g); i++) {
        const char *s;
        size_t len;
        const char *key = eng_gguf_key(g, i);
        if (eng_gguf_kv_type(g, i) == ENG_GGUF_TYPE_STRING) {
            assert_int_equal(eng_gguf_get_str(g, key, &s, &len), ENG_OK);
            assert_true((const uint8_t *)s >= lo && len <= (size_t)(hi - (const uint8_t *)s));
        }
        if (eng_gguf_kv_type(g, i) == ENG_GGUF_TYPE_ARRAY && eng_gguf_arr_type(g, i) == ENG_GGUF_TYPE_STRING) {
            for (uint64_t j = 0; j < eng_gguf_arr_n(g, i); j++) {
                assert_int_equal(eng_gguf_get_arr_str(g, i, j, &s, &len), ENG_OK);
                assert_true((const uint8_t *)s >= lo && len <= (size_t)(hi - (const uint8_t *)s));
            }
        }
        if (eng_gguf_kv_type(g, i) == ENG_GGUF_TYPE_ARRAY && eng_gguf_get_arr_data(g, i)) {
            uint64_t an = eng_gguf_arr_n(g, i);
            if (an) (void)eng_gguf_get_arr_num(g, i, an - 1);
        }
    }
}

static void random_byte_flips_fail_cleanly_or_stay_in_bounds(void **state) {
    (void)state;
    sample_data d;
    fill_sample_data(&d);
    void *buf;
    size_t n;
    build_sample(3, 32, &d, &buf, &n);
    gsl_rng *rng = gsl_rng_alloc(gsl_rng_mt19937);
    gsl_rng_set(rng, 20240601);
    int ok = 0, failed = 0;
    for (int it = 0; it < 2000; it++) {
        uint8_t *copy = exact_copy(buf, n);
        int flips = 1 + (int)gsl_rng_uniform_int(rng, 4);
        for (int k = 0; k < flips; k++) {
            /* mostly in the header region, where the structure lives */
            size_t pos = gsl_rng_uniform(rng) < 0.9 ? gsl_rng_uniform_int(rng, 1024)
                                                    : gsl_rng_uniform_int(rng, n);
            copy[pos] ^= (uint8_t)(1 + gsl_rng_uniform_int(rng, 255));
        }
        eng_gguf *g = NULL;
        char err[256] = "";
        int rc = eng_gguf_open_buffer(copy, n, "flip", &g, err, sizeof err);
        if (rc == ENG_OK) {
            check_in_bounds(g, copy, n);
            eng_gguf_close(g);
            ok++;
        } else {
            assert_true(rc == ENG_ERR_FORMAT || rc == ENG_ERR_UNSUPPORTED);
            assert_null(g);
            assert_true(strncmp(err, "flip: offset ", 13) == 0);
            failed++;
        }
        free(copy);
    }
    fprintf(stderr, "random flips: %d opened, %d rejected\n", ok, failed);
    assert_true(ok > 0 && failed > 0);
    gsl_rng_free(rng);
    free(buf);
}

/* A small file for planted faults: known keys and two tensors. */
static void build_small(void **buf, size_t *n) {
    static float data[64];
    for (int i = 0; i < 64; i++) data[i] = (float)i;
    eng_gguf_writer *w = eng_gguf_writer_new(3, 32);
    assert_int_equal(eng_gguf_writer_set_u32(w, "general.alignment", 32), ENG_OK);
    assert_int_equal(eng_gguf_writer_set_str(w, "k.a", "first"), ENG_OK);
    assert_int_equal(eng_gguf_writer_set_str(w, "k.b", "second"), ENG_OK);
    const char *strs[] = {"x", "y"};
    assert_int_equal(eng_gguf_writer_set_arr_str(w, "k.strs", 2, strs, NULL), ENG_OK);
    const int64_t ne[] = {8, 4};
    assert_int_equal(eng_gguf_writer_add_tensor(w, "t.a", ENG_GGML_TYPE_F32, 2, ne, data, 128), ENG_OK);
    assert_int_equal(eng_gguf_writer_add_tensor(w, "t.b", ENG_GGML_TYPE_F32, 2, ne, data + 32, 128), ENG_OK);
    assert_int_equal(eng_gguf_writer_to_buffer(w, buf, n), ENG_OK);
    eng_gguf_writer_free(w);
}

/* Offset of the first occurrence of the length-prefixed string s in buf. */
static size_t find_str(const void *buf, size_t n, const char *s) {
    const uint8_t *p = memmem(buf, n, s, strlen(s));
    assert_non_null(p);
    return (size_t)(p - (const uint8_t *)buf) - 8;
}

typedef void (*planter)(uint8_t *buf, size_t n);

/* Plants a fault into the small file and expects status and text in the message. */
static void expect_fault(planter plant, int status, const char *text) {
    void *buf;
    size_t n;
    build_small(&buf, &n);
    plant(buf, n);
    eng_gguf *g = NULL;
    void *copy;
    char err[256] = "";
    int rc = open_copy(buf, n, &g, &copy, err, sizeof err);
    if (rc != status || !strstr(err, text))
        fprintf(stderr, "got %d (%s), want %d with '%s'\n", rc, err, status, text);
    assert_int_equal(rc, status);
    assert_null(g);
    assert_non_null(strstr(err, text));
    assert_true(strncmp(err, "sample.gguf: offset ", 20) == 0);
    free(copy);
    free(buf);
}

static void w32(uint8_t *p, uint32_t v) { memcpy(p, &v, 4); }
static void w64(uint8_t *p, uint64_t v) { memcpy(p, &v, 8); }

/* Tensor info fields of t.b: after its name come n_dims, ne[n_dims], type, offset. */
static uint8_t *tinfo(uint8_t *buf, size_t n) { return buf + find_str(buf, n, "t.b") + 8 + 3; }

static void p_magic(uint8_t *b, size_t n) { (void)n; b[0] = 'X'; }
static void p_v1(uint8_t *b, size_t n) { (void)n; w32(b + 4, 1); }
static void p_v4(uint8_t *b, size_t n) { (void)n; w32(b + 4, 4); }
static void p_kv_count(uint8_t *b, size_t n) { (void)n; w64(b + 16, UINT64_C(1) << 40); }
static void p_t_count(uint8_t *b, size_t n) { (void)n; w64(b + 8, UINT64_MAX); }
static void p_key_len(uint8_t *b, size_t n) { (void)n; w64(b + 24, UINT64_C(1) << 40); }
static void p_str_len(uint8_t *b, size_t n) {
    w64(b + find_str(b, n, "k.a") + 8 + 3 + 4, UINT64_MAX - 3);
}
static void p_arr_len(uint8_t *b, size_t n) {
    w64(b + find_str(b, n, "k.strs") + 8 + 6 + 4 + 4, UINT64_C(1) << 61);
}
static void p_value_type(uint8_t *b, size_t n) { w32(b + find_str(b, n, "k.a") + 8 + 3, 13); }
static void p_tensor_type(uint8_t *b, size_t n) { w32(tinfo(b, n) + 4 + 16, 2); }
static void p_ndims0(uint8_t *b, size_t n) { w32(tinfo(b, n), 0); }
static void p_ndims5(uint8_t *b, size_t n) { w32(tinfo(b, n), 5); }
static void p_ne0(uint8_t *b, size_t n) { w64(tinfo(b, n) + 4 + 8, 0); }
static void p_ne_overflow(uint8_t *b, size_t n) {
    w64(tinfo(b, n) + 4, UINT64_C(1) << 40);
    w64(tinfo(b, n) + 4 + 8, UINT64_C(1) << 40);
}
static void p_unaligned(uint8_t *b, size_t n) { w64(tinfo(b, n) + 4 + 16 + 4, 129); }
static void p_past_end(uint8_t *b, size_t n) { w64(tinfo(b, n) + 4 + 16 + 4, 4096); }
static void p_dup_key(uint8_t *b, size_t n) { b[find_str(b, n, "k.b") + 8 + 2] = 'a'; }
static void p_dup_tensor(uint8_t *b, size_t n) { b[find_str(b, n, "t.b") + 8 + 2] = 'a'; }
static void p_align_48(uint8_t *b, size_t n) { w32(b + find_str(b, n, "general.alignment") + 8 + 17 + 4, 48); }
static void p_align_0(uint8_t *b, size_t n) { w32(b + find_str(b, n, "general.alignment") + 8 + 17 + 4, 0); }
static void p_align_type(uint8_t *b, size_t n) { w32(b + find_str(b, n, "general.alignment") + 8 + 17, ENG_GGUF_TYPE_INT32); }
static void p_key_nul(uint8_t *b, size_t n) { b[find_str(b, n, "k.b") + 8 + 1] = 0; }

static void bad_magic_is_rejected(void **s) { (void)s; expect_fault(p_magic, ENG_ERR_FORMAT, "magic"); }
static void version_1_is_unsupported(void **s) { (void)s; expect_fault(p_v1, ENG_ERR_UNSUPPORTED, "version"); }
static void version_4_is_unsupported(void **s) { (void)s; expect_fault(p_v4, ENG_ERR_UNSUPPORTED, "version"); }
static void huge_kv_count_is_rejected_before_allocating(void **s) { (void)s; expect_fault(p_kv_count, ENG_ERR_FORMAT, "n_kv"); }
static void huge_tensor_count_is_rejected_before_allocating(void **s) { (void)s; expect_fault(p_t_count, ENG_ERR_FORMAT, "n_tensors"); }
static void huge_key_length_is_rejected(void **s) { (void)s; expect_fault(p_key_len, ENG_ERR_FORMAT, "kv[0] key"); }
static void huge_string_length_is_rejected(void **s) { (void)s; expect_fault(p_str_len, ENG_ERR_FORMAT, "kv 'k.a' value"); }
static void huge_array_length_is_rejected(void **s) { (void)s; expect_fault(p_arr_len, ENG_ERR_FORMAT, "kv 'k.strs' value"); }
static void unknown_value_type_is_rejected(void **s) { (void)s; expect_fault(p_value_type, ENG_ERR_FORMAT, "unknown value type 13"); }
static void unknown_tensor_type_is_unsupported_naming_the_tensor(void **s) { (void)s; expect_fault(p_tensor_type, ENG_ERR_UNSUPPORTED, "tensor 't.b' type"); }
static void zero_dimensions_are_rejected(void **s) { (void)s; expect_fault(p_ndims0, ENG_ERR_FORMAT, "n_dims"); }
static void five_dimensions_are_rejected(void **s) { (void)s; expect_fault(p_ndims5, ENG_ERR_FORMAT, "n_dims"); }
static void zero_extent_is_rejected(void **s) { (void)s; expect_fault(p_ne0, ENG_ERR_FORMAT, "ne[1] = 0"); }
static void overflowing_tensor_size_is_rejected(void **s) { (void)s; expect_fault(p_ne_overflow, ENG_ERR_FORMAT, "overflow"); }
static void unaligned_tensor_offset_is_rejected(void **s) { (void)s; expect_fault(p_unaligned, ENG_ERR_FORMAT, "not a multiple of the alignment"); }
static void tensor_offset_past_the_end_is_rejected(void **s) { (void)s; expect_fault(p_past_end, ENG_ERR_FORMAT, "past the end"); }
static void duplicate_key_is_rejected(void **s) { (void)s; expect_fault(p_dup_key, ENG_ERR_FORMAT, "duplicate key 'k.a'"); }
static void duplicate_tensor_name_is_rejected(void **s) { (void)s; expect_fault(p_dup_tensor, ENG_ERR_FORMAT, "duplicate tensor name 't.a'"); }
static void alignment_not_a_power_of_two_is_rejected(void **s) { (void)s; expect_fault(p_align_48, ENG_ERR_FORMAT, "general.alignment: 48 is not a power of two"); }
static void alignment_zero_is_rejected(void **s) { (void)s; expect_fault(p_align_0, ENG_ERR_FORMAT, "general.alignment: 0 is not a power of two"); }
static void alignment_of_the_wrong_type_is_rejected(void **s) { (void)s; expect_fault(p_align_type, ENG_ERR_FORMAT, "expected uint32"); }
static void key_with_a_nul_byte_is_rejected(void **s) { (void)s; expect_fault(p_key_nul, ENG_ERR_FORMAT, "NUL"); }

static void unplanted_small_file_opens(void **state) {
    (void)state;
    void *buf;
    size_t n;
    build_small(&buf, &n);
    eng_gguf *g;
    void *copy;
    char err[256];
    assert_int_equal(open_copy(buf, n, &g, &copy, err, sizeof err), ENG_OK);
    assert_int_equal(eng_gguf_n_tensors(g), 2);
    eng_gguf_close(g);
    free(copy);
    free(buf);
}

// ----------------------------------------------------------------------------
// Conversions

static void bf16_rounds_ties_to_even(void **state) {
    (void)state;
    assert_int_equal(eng_f32_to_bf16(u2f(0x3f808000)), 0x3f80);   /* tie, even below */
    assert_int_equal(eng_f32_to_bf16(u2f(0x3f818000)), 0x3f82);   /* tie, odd below: up */
    assert_int_equal(eng_f32_to_bf16(u2f(0x3f808001)), 0x3f81);   /* above the tie */
    assert_int_equal(eng_f32_to_bf16(u2f(0x3f807fff)), 0x3f80);   /* below the tie */
    assert_int_equal(eng_f32_to_bf16(u2f(0xbf818000)), 0xbf82);   /* negative tie */
    assert_int_equal(eng_f32_to_bf16(u2f(0x7f7fffff)), 0x7f80);   /* FLT_MAX rounds to inf */
    assert_int_equal(eng_f32_to_bf16(INFINITY), 0x7f80);
    assert_int_equal(eng_f32_to_bf16(-0.0f), 0x8000);
    uint16_t nan = eng_f32_to_bf16(u2f(0x7f800001));              /* low-payload NaN stays NaN */
    assert_true(isnan(eng_bf16_to_f32(nan)));
    for (uint32_t h = 0; h < 65536; h++) {
        float f = eng_bf16_to_f32((uint16_t)h);
        if (!isnan(f)) assert_int_equal(eng_f32_to_bf16(f), h);
    }
}

static void fp16_round_trips_all_65536_values(void **state) {
    (void)state;
    for (uint32_t h = 0; h < 65536; h++) {
        float f = eng_fp16_to_f32((uint16_t)h);
        bool is_nan = ((h >> 10) & 0x1f) == 0x1f && (h & 0x3ff) != 0;
        assert_int_equal(isnan(f) != 0, is_nan);
        assert_int_equal(eng_f32_to_fp16(f), h);   /* NaN payloads survive too */
    }
    assert_true(isnan(eng_fp16_to_f32(eng_f32_to_fp16(u2f(0x7f800001)))));
    assert_true(eng_fp16_to_f32(0x3c00) == 1.0f);
    assert_true(eng_fp16_to_f32(0x0001) == 0x1p-24f);
    assert_true(eng_fp16_to_f32(0x7bff) == 65504.0f);
}

static void fp16_rounds_to_nearest_even_between_every_pair(void **state) {
    (void)state;
    for (uint32_t a = 0; a < 0x7bff; a++) {
        float lo = eng_fp16_to_f32((uint16_t)a), hi = eng_fp16_to_f32((uint16_t)(a + 1));
        float mid = lo + (hi - lo) * 0.5f;   /* exact: fp16 has 11 significant bits */
        uint16_t even = (a & 1) ? (uint16_t)(a + 1) : (uint16_t)a;
        assert_int_equal(eng_f32_to_fp16(mid), even);
        assert_int_equal(eng_f32_to_fp16(nextafterf(mid, 0.0f)), a);
        assert_int_equal(eng_f32_to_fp16(nextafterf(mid, INFINITY)), a + 1);
        assert_int_equal(eng_f32_to_fp16(-mid), 0x8000 | even);
    }
    assert_int_equal(eng_f32_to_fp16(65520.0f), 0x7c00);           /* overflow tie goes to inf */
    assert_int_equal(eng_f32_to_fp16(nextafterf(65520.0f, 0.0f)), 0x7bff);
    assert_int_equal(eng_f32_to_fp16(1e-9f), 0);
    assert_int_equal(eng_f32_to_fp16(0x1p-25f), 0);                  /* tie with 0: even */
    assert_int_equal(eng_f32_to_fp16(nextafterf(0x1p-25f, 1.0f)), 1);
}

static void q8_0_round_trip_error_is_within_half_a_step(void **state) {
    (void)state;
    enum { N = 32 * 256 };
    float *x = malloc(N * sizeof *x), *y = malloc(N * sizeof *y);
    uint8_t *q = malloc(N / 32 * 34);
    gsl_rng *rng = gsl_rng_alloc(gsl_rng_mt19937);
    gsl_rng_set(rng, 7);
    for (int i = 0; i < N; i++) x[i] = (float)gsl_ran_gaussian_ziggurat(rng, 1.0 + (i / 32) % 5);
    for (int i = 0; i < 32; i++) x[i] = 0.0f;          /* an all-zero block */
    eng_ggml_from_f32(ENG_GGML_TYPE_Q8_0, x, q, N);
    eng_ggml_to_f32(ENG_GGML_TYPE_Q8_0, q, y, N);
    for (int b = 0; b < N / 32; b++) {
        float amax = 0;
        for (int j = 0; j < 32; j++) amax = fmaxf(amax, fabsf(x[b * 32 + j]));
        float d = amax / 127.0f;
        /* |x - fp16(d) q| <= d/2 + |d - fp16(d)| * 127, with |d - fp16(d)| <= d 2^-11 */
        float bound = d * (0.5f + 127.0f / 2048.0f) * 1.0001f;
        for (int j = 0; j < 32; j++) assert_true(fabsf(x[b * 32 + j] - y[b * 32 + j]) <= bound);
    }
    for (int j = 0; j < 32; j++) assert_true(y[j] == 0.0f);
    /* integers -127..127 with amax 127 are exact */
    float ints[32], back[32];
    uint8_t blk[34];
    for (int j = 0; j < 32; j++) ints[j] = (float)(j * 8 - 127);
    ints[31] = 127.0f;
    eng_ggml_from_f32(ENG_GGML_TYPE_Q8_0, ints, blk, 32);
    eng_ggml_to_f32(ENG_GGML_TYPE_Q8_0, blk, back, 32);
    assert_memory_equal(ints, back, sizeof ints);
    gsl_rng_free(rng);
    free(x);
    free(y);
    free(q);
}

static void row_sizes_follow_the_block_sizes(void **state) {
    (void)state;
    assert_int_equal(eng_ggml_row_size(ENG_GGML_TYPE_F32, 3), 12);
    assert_int_equal(eng_ggml_row_size(ENG_GGML_TYPE_F16, 3), 6);
    assert_int_equal(eng_ggml_row_size(ENG_GGML_TYPE_BF16, 5), 10);
    assert_int_equal(eng_ggml_row_size(ENG_GGML_TYPE_Q8_0, 64), 68);
    assert_int_equal(eng_ggml_row_size(ENG_GGML_TYPE_Q8_0, 33), 0);
    assert_int_equal(eng_ggml_row_size(2, 32), 0);
    assert_string_equal(eng_ggml_type_name(ENG_GGML_TYPE_Q8_0), "q8_0");
    assert_string_equal(eng_gguf_type_name(ENG_GGUF_TYPE_FLOAT64), "float64");
    assert_string_equal(eng_gguf_type_name(99), "?");
}

static void array_conversions_match_the_scalar_ones(void **state) {
    (void)state;
    float x[8] = {1.0f, -2.5f, 3.14159f, 1e-6f, 65504.0f, 7e4f, -0.0f, 0.333f};
    uint16_t h[8], b[8];
    float y[8];
    eng_ggml_from_f32(ENG_GGML_TYPE_F16, x, h, 8);
    eng_ggml_from_f32(ENG_GGML_TYPE_BF16, x, b, 8);
    for (int i = 0; i < 8; i++) {
        assert_int_equal(h[i], eng_f32_to_fp16(x[i]));
        assert_int_equal(b[i], eng_f32_to_bf16(x[i]));
    }
    eng_ggml_to_f32(ENG_GGML_TYPE_F16, h, y, 8);
    for (int i = 0; i < 8; i++) assert_int_equal(f2u(y[i]), f2u(eng_fp16_to_f32(h[i])));
    eng_ggml_to_f32(ENG_GGML_TYPE_BF16, b, y, 8);
    for (int i = 0; i < 8; i++) assert_int_equal(f2u(y[i]), f2u(eng_bf16_to_f32(b[i])));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(stories260k_opens_with_its_documented_hyperparameters),
        cmocka_unit_test(vocabulary_files_open_with_their_token_counts),
        cmocka_unit_test(rewriting_stories260k_reproduces_its_bytes_exactly),
        cmocka_unit_test(opening_a_missing_file_is_an_io_error_naming_it),
        cmocka_unit_test(sample_round_trips_as_v3_with_alignment_32),
        cmocka_unit_test(sample_round_trips_as_v2_with_alignment_32),
        cmocka_unit_test(sample_round_trips_as_v3_with_alignment_64),
        cmocka_unit_test(sample_round_trips_as_v2_with_alignment_64),
        cmocka_unit_test(written_file_opens_from_disk_and_matches_the_buffer),
        cmocka_unit_test(setting_an_existing_key_replaces_it_in_place),
        cmocka_unit_test(writer_rejects_bad_tensors_and_bad_alignment),
        cmocka_unit_test(nested_arrays_are_parsed_skipped_and_copied_verbatim),
        cmocka_unit_test(arrays_nested_too_deep_are_rejected),
        cmocka_unit_test(truncated_file_is_rejected_at_every_offset),
        cmocka_unit_test(random_byte_flips_fail_cleanly_or_stay_in_bounds),
        cmocka_unit_test(unplanted_small_file_opens),
        cmocka_unit_test(bad_magic_is_rejected),
        cmocka_unit_test(version_1_is_unsupported),
        cmocka_unit_test(version_4_is_unsupported),
        cmocka_unit_test(huge_kv_count_is_rejected_before_allocating),
        cmocka_unit_test(huge_tensor_count_is_rejected_before_allocating),
        cmocka_unit_test(huge_key_length_is_rejected),
        cmocka_unit_test(huge_string_length_is_rejected),
        cmocka_unit_test(huge_array_length_is_rejected),
        cmocka_unit_test(unknown_value_type_is_rejected),
        cmocka_unit_test(unknown_tensor_type_is_unsupported_naming_the_tensor),
        cmocka_unit_test(zero_dimensions_are_rejected),
        cmocka_unit_test(five_dimensions_are_rejected),
        cmocka_unit_test(zero_extent_is_rejected),
        cmocka_unit_test(overflowing_tensor_size_is_rejected),
        cmocka_unit_test(unaligned_tensor_offset_is_rejected),
        cmocka_unit_test(tensor_offset_past_the_end_is_rejected),
        cmocka_unit_test(duplicate_key_is_rejected),
        cmocka_unit_test(duplicate_tensor_name_is_rejected),
        cmocka_unit_test(alignment_not_a_power_of_two_is_rejected),
        cmocka_unit_test(alignment_zero_is_rejected),
        cmocka_unit_test(alignment_of_the_wrong_type_is_rejected),
        cmocka_unit_test(key_with_a_nul_byte_is_rejected),
        cmocka_unit_test(bf16_rounds_ties_to_even),
        cmocka_unit_test(fp16_round_trips_all_65536_values),
        cmocka_unit_test(fp16_rounds_to_nearest_even_between_every_pair),
        cmocka_unit_test(q8_0_round_trip_error_is_within_half_a_step),
        cmocka_unit_test(row_sizes_follow_the_block_sizes),
        cmocka_unit_test(array_conversions_match_the_scalar_ones),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
