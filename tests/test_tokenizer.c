/*
 * tests/test_tokenizer.c: the SPM and GPT-2 tokenizers against llama.cpp's
 * own test vectors (every line of both .inp/.out pairs), stories260K's
 * vocabulary, round trips on seeded random text, hostile bytes, special
 * tokens, buffer contracts, offsets, loading from synthetic GGUF files, and
 * the `kvreplay tokenize` command line.
 *
 * Needs ../shared/data/vocab/ and ../shared/data/models/stories260K.gguf
 * (tests skip when they are absent) and, for the CLI tests, $BUILD/kvreplay
 * (BUILD defaults to build).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "gguf.h"
#include "status.h"
#include "tokenizer.h"
#include "util.h"

#define VOCAB_SPM  "../shared/data/vocab/ggml-vocab-llama-spm.gguf"
#define VOCAB_GPT2 "../shared/data/vocab/ggml-vocab-gpt-2.gguf"
#define STORIES    "../shared/data/models/stories260K.gguf"

// ----------------------------------------------------------------------------
// Helpers

/* Loads the tokenizer of path; skips the test when the file is absent. */
static eng_tokenizer *load_or_skip(const char *path) {
    if (access(path, R_OK) != 0) {
        fprintf(stderr, "skipping: %s is absent\n", path);
        skip();
    }
    char err[512] = "";
    eng_gguf *g = NULL;
    eng_tokenizer *t = NULL;
    assert_int_equal(eng_gguf_open(path, &g, err, sizeof err), ENG_OK);
    int rc = eng_tokenizer_load(g, &t, err, sizeof err);
    if (rc != ENG_OK) fprintf(stderr, "%s\n", err);
    assert_int_equal(rc, ENG_OK);
    eng_gguf_close(g);
    return t;
}

/* Tokenizes into a malloc'd array (and offsets when offs != NULL); returns the count. */
static int32_t tok_all(const eng_tokenizer *t, const char *s, size_t n, bool bos, bool special, int32_t **ids,
                       int32_t **offs) {
    int32_t cap = (int32_t)(3 * n + 8);
    *ids = malloc((size_t)cap * sizeof **ids);
    if (offs) *offs = malloc((size_t)cap * sizeof **offs);
    assert_non_null(*ids);
    int32_t k = eng_tokenize(t, s, n, bos, false, special, *ids, cap, offs ? *offs : NULL);
    assert_true(k >= 0);
    return k;
}

/* decode(encode(s)) == s, byte for byte. */
static bool round_trips(const eng_tokenizer *t, const char *s, size_t n) {
    int32_t *ids;
    int32_t k = tok_all(t, s, n, false, false, &ids, NULL);
    char *back = malloc(n + 1);
    int64_t m = eng_detokenize(t, ids, k, true, back, n + 1);
    bool ok = m == (int64_t)n && memcmp(back, s, n) == 0;
    if (!ok) fprintf(stderr, "round trip of '%.*s' gave '%.*s'\n", (int)n, s, (int)(m > 0 ? m : 0), back);
    free(back);
    free(ids);
    return ok;
}

typedef struct { char *inp, *out; size_t n_inp, n_out; } vectors;

/* Reads PATH.inp / PATH.out; skips when absent. */
static vectors read_vectors(const char *vocab) {
    vectors v = {0};
    char p[512];
    snprintf(p, sizeof p, "%s.inp", vocab);
    if (access(p, R_OK) != 0) { fprintf(stderr, "skipping: %s is absent\n", p); skip(); }
    assert_int_equal(eng_read_file(p, &v.inp, &v.n_inp, NULL, 0), ENG_OK);
    snprintf(p, sizeof p, "%s.out", vocab);
    assert_int_equal(eng_read_file(p, &v.out, &v.n_out, NULL, 0), ENG_OK);
    return v;
}

/* The test strings, split as llama.cpp's test-tokenizer-0 does: each string
 * ends at "\n__ggml_vocab_test__\n". Returns the count; strs/lens malloc'd. */
static int split_inputs(const vectors *v, const char ***strs, size_t **lens) {
    static const char sep[] = "\n__ggml_vocab_test__\n";
    int n = 0, cap = 64;
    *strs = malloc((size_t)cap * sizeof **strs);
    *lens = malloc((size_t)cap * sizeof **lens);
    const char *p = v->inp, *end = v->inp + v->n_inp;
    for (;;) {
        const char *q = memmem(p, (size_t)(end - p), sep, sizeof sep - 1);
        if (!q) break;
        assert_true(n < cap);
        (*strs)[n] = p;
        (*lens)[n] = (size_t)(q - p);
        n++;
        p = q + sizeof sep - 1;
    }
    return n;
}

/* Compares every string's ids with its .out line; `plant` >= 0 adds 1 to the
 * first expected id of that line (a planted fault). Returns the mismatches. */
static int check_vectors(const eng_tokenizer *t, const vectors *v, int plant, int *n_lines) {
    const char **strs;
    size_t *lens;
    int n = split_inputs(v, &strs, &lens), bad = 0;
    char *out = strndup(v->out, v->n_out), *save = NULL;
    char *line = out;
    for (int i = 0; i < n; i++) {
        char *nl = strchr(line, '\n');
        assert_non_null(nl);
        *nl = '\0';
        int32_t want[4096], nw = 0;
        for (char *tok = strtok_r(line, " ", &save); tok; tok = strtok_r(NULL, " ", &save))
            want[nw++] = (int32_t)strtol(tok, NULL, 10);
        if (i == plant && nw > 0) want[0]++;
        int32_t *ids;
        int32_t k = tok_all(t, strs[i], lens[i], false, false, &ids, NULL);
        if (k != nw || memcmp(ids, want, (size_t)k * sizeof *ids) != 0) {
            if (plant < 0) fprintf(stderr, "vector %d ('%.*s'): %d ids, want %d\n", i, (int)lens[i], strs[i], k, nw);
            bad++;
        }
        free(ids);
        line = nl + 1;
    }
    assert_true(*line == '\0');   /* no .out line left over */
    *n_lines = n;
    free(out);
    free(strs);
    free(lens);
    return bad;
}

static uint64_t rng_state;
static uint32_t rnd(uint32_t n) {   /* splitmix64, seeded explicitly per test */
    uint64_t z = (rng_state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return (uint32_t)((z ^ (z >> 31)) % n);
}

static size_t put_utf8(uint32_t c, char *o) {
    if (c < 0x80) { o[0] = (char)c; return 1; }
    if (c < 0x800) { o[0] = (char)(0xC0 | (c >> 6)); o[1] = (char)(0x80 | (c & 0x3F)); return 2; }
    if (c < 0x10000) {
        o[0] = (char)(0xE0 | (c >> 12)); o[1] = (char)(0x80 | ((c >> 6) & 0x3F)); o[2] = (char)(0x80 | (c & 0x3F));
        return 3;
    }
    o[0] = (char)(0xF0 | (c >> 18)); o[1] = (char)(0x80 | ((c >> 12) & 0x3F));
    o[2] = (char)(0x80 | ((c >> 6) & 0x3F)); o[3] = (char)(0x80 | (c & 0x3F));
    return 4;
}

/* A random valid UTF-8 string of up to 60 code points (never U+2581, which SPM
 * reads as a space): ASCII, whitespace runs, Latin, Cyrillic, CJK, emoji, other BMP. */
static size_t random_utf8(char *o) {
    size_t n = 0, m = rnd(61);
    for (size_t i = 0; i < m; i++) {
        uint32_t c, k = rnd(100);
        if (k < 40) c = 0x20 + rnd(0x5F);
        else if (k < 55) c = " \n\t  \r"[rnd(6)];
        else if (k < 65) c = 0xA0 + rnd(0x250);
        else if (k < 75) c = 0x370 + rnd(0x200);
        else if (k < 85) c = 0x4E00 + rnd(0x5200);
        else if (k < 93) c = 0x1F300 + rnd(0x300);
        else do c = 1 + rnd(0xFFFD); while ((c >= 0xD800 && c <= 0xDFFF) || c == 0x2581);
        n += put_utf8(c, o + n);
    }
    return n;
}

// ----------------------------------------------------------------------------
// llama.cpp's test vectors

static void llama_spm_vocabulary_matches_every_llama_cpp_test_vector(void **state) {
    (void)state;
    eng_tokenizer *t = load_or_skip(VOCAB_SPM);
    vectors v = read_vectors(VOCAB_SPM);
    int n;
    assert_int_equal(check_vectors(t, &v, -1, &n), 0);
    assert_int_equal(n, 46);
    free(v.inp); free(v.out);
    eng_tokenizer_free(t);
}

static void gpt2_vocabulary_matches_every_llama_cpp_test_vector(void **state) {
    (void)state;
    eng_tokenizer *t = load_or_skip(VOCAB_GPT2);
    vectors v = read_vectors(VOCAB_GPT2);
    int n;
    assert_int_equal(check_vectors(t, &v, -1, &n), 0);
    assert_int_equal(n, 46);
    free(v.inp); free(v.out);
    eng_tokenizer_free(t);
}

static void vector_check_catches_a_planted_wrong_id(void **state) {
    (void)state;
    eng_tokenizer *t = load_or_skip(VOCAB_GPT2);
    vectors v = read_vectors(VOCAB_GPT2);
    int n;
    assert_int_equal(check_vectors(t, &v, 10, &n), 1);
    free(v.inp); free(v.out);
    eng_tokenizer_free(t);
}

static void test_vectors_round_trip_through_detokenize(void **state) {
    (void)state;
    const char *paths[] = {VOCAB_SPM, VOCAB_GPT2};
    for (int p = 0; p < 2; p++) {
        eng_tokenizer *t = load_or_skip(paths[p]);
        vectors v = read_vectors(paths[p]);
        const char **strs;
        size_t *lens;
        int n = split_inputs(&v, &strs, &lens);
        for (int i = 0; i < n; i++) assert_true(round_trips(t, strs[i], lens[i]));
        free(strs); free(lens); free(v.inp); free(v.out);
        eng_tokenizer_free(t);
    }
}

// ----------------------------------------------------------------------------
// stories260K, flags and ids

static void stories260k_tokenizes_once_upon_a_time_with_bos_first(void **state) {
    (void)state;
    eng_tokenizer *t = load_or_skip(STORIES);
    assert_int_equal(eng_tokenizer_type(t), ENG_VOCAB_SPM);
    assert_int_equal(eng_tokenizer_n_vocab(t), 512);
    assert_true(eng_tokenizer_add_bos(t));
    int32_t ids[16];
    int32_t n = eng_tokenize(t, "Once upon a time", 16, eng_tokenizer_add_bos(t), false, false, ids, 16, NULL);
    const int32_t want[] = {1, 403, 407, 261, 378};
    assert_int_equal(n, 5);
    assert_memory_equal(ids, want, sizeof want);
    size_t pl;
    assert_string_equal(eng_token_piece(t, 378, &pl), "\xE2\x96\x81time");
    assert_int_equal(eng_token_lookup(t, "\xE2\x96\x81time", pl), 378);
    assert_null(eng_token_piece(t, 512, &pl));
    assert_int_equal(eng_token_lookup(t, "no such piece", 13), -1);
    eng_tokenizer_free(t);
}

static void vocabularies_report_their_special_ids_and_flags(void **state) {
    (void)state;
    eng_tokenizer *t = load_or_skip(VOCAB_SPM);
    assert_int_equal(eng_tokenizer_bos(t), 1);
    assert_int_equal(eng_tokenizer_eos(t), 2);
    assert_true(eng_tokenizer_add_bos(t));
    assert_false(eng_tokenizer_add_eos(t));
    eng_tokenizer_free(t);
    t = load_or_skip(VOCAB_GPT2);
    assert_int_equal(eng_tokenizer_type(t), ENG_VOCAB_BPE);
    assert_int_equal(eng_tokenizer_bos(t), 50256);
    assert_int_equal(eng_tokenizer_eos(t), 50256);
    assert_int_equal(eng_tokenizer_eot(t), 50256);   /* <|endoftext|>, found by its text */
    assert_false(eng_tokenizer_add_bos(t));
    eng_tokenizer_free(t);
}

// ----------------------------------------------------------------------------
// Round trips and hostile input

static void random_valid_utf8_round_trips_for_both_vocabularies(void **state) {
    (void)state;
    const char *paths[] = {VOCAB_SPM, VOCAB_GPT2};
    char buf[256];
    for (int p = 0; p < 2; p++) {
        eng_tokenizer *t = load_or_skip(paths[p]);
        rng_state = 1234;
        for (int i = 0; i < 1000; i++) {
            size_t n = random_utf8(buf);
            assert_true(round_trips(t, buf, n));
        }
        eng_tokenizer_free(t);
    }
}

static void random_bytes_and_invalid_utf8_never_crash(void **state) {
    (void)state;
    const char *paths[] = {VOCAB_SPM, VOCAB_GPT2};
    static const char *nasty[] = {"\x80", "\xBF\xBF", "\xC0\x80", "\xC1\xBF", "\xE0\x80\x80", "\xED\xA0\x80",
                                  "\xF4\x90\x80\x80", "\xF5\x80\x80\x80", "\xF8\x88\x80\x80\x80", "\xFF\xFE",
                                  "a\xE2 b", "\xE2\x96", " \xF0\x9F\x98", "\xF0\x9F\x98 x\xC3"};
    char buf[128];
    for (int p = 0; p < 2; p++) {
        eng_tokenizer *t = load_or_skip(paths[p]);
        rng_state = 99;
        for (int i = 0; i < 2000 + (int)(sizeof nasty / sizeof nasty[0]); i++) {
            size_t n;
            if (i < 2000) {
                n = rnd(100);
                for (size_t j = 0; j < n; j++) buf[j] = (char)(rnd(4) ? rnd(256) : (uint8_t)" \xE2\x96\x81<s>"[rnd(8)]);
            } else {
                n = strlen(nasty[i - 2000]);
                memcpy(buf, nasty[i - 2000], n);
            }
            int32_t *ids, *offs;
            int32_t k = tok_all(t, buf, n, true, i % 2 == 0, &ids, &offs);
            for (int32_t j = 0; j < k; j++) {
                assert_true(ids[j] >= 0 && ids[j] < eng_tokenizer_n_vocab(t));
                assert_true(offs[j] >= 0 && offs[j] <= (int32_t)n);
            }
            char back[1024];
            assert_true(eng_detokenize(t, ids, k, i % 3 == 0, back, sizeof back) >= 0);
            free(ids);
            free(offs);
        }
        eng_tokenizer_free(t);
    }
}

static void long_runs_without_spaces_tokenize_and_round_trip(void **state) {
    (void)state;
    const char *paths[] = {VOCAB_SPM, VOCAB_GPT2};
    size_t n = 200000;
    char *s = malloc(n);
    static const char b64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    for (int p = 0; p < 2; p++) {
        eng_tokenizer *t = load_or_skip(paths[p]);
        memset(s, 'a', n);
        assert_true(round_trips(t, s, n));
        rng_state = 7;
        for (size_t i = 0; i < n; i++) s[i] = b64[rnd(64)];
        assert_true(round_trips(t, s, n));
        eng_tokenizer_free(t);
    }
    free(s);
}

// ----------------------------------------------------------------------------
// Naive references: llama.cpp's algorithms written the slow, obvious way
// (string lookups, a full scan for the best pair at every step), as oracles
// for the pair tables, segmentation and heaps of the real implementation.

/* SPM on text without special tokens: dummy prefix, spaces to U+2581, characters
 * by lead byte, then repeatedly merge the adjacent pair whose concatenation is
 * the highest-scoring token (leftmost on ties), then byte fallback. */
static int32_t naive_spm(const eng_tokenizer *t, const float *score, const char *text, size_t len, int32_t *out) {
    char *e = malloc(3 * len + 4);
    size_t n = 0;
    memcpy(e, "\xE2\x96\x81", 3);
    n = 3;
    for (size_t i = 0; i < len; i++) {
        if (text[i] == ' ') { memcpy(e + n, "\xE2\x96\x81", 3); n += 3; }
        else e[n++] = text[i];
    }
    size_t *st = malloc((n + 1) * sizeof *st), *ln = malloc((n + 1) * sizeof *ln), ns = 0;
    for (size_t q = 0; q < n;) {
        unsigned char b = (unsigned char)e[q];
        size_t g = b < 0xC0 ? 1 : b < 0xE0 ? 2 : b < 0xF0 ? 3 : 4;
        if (g > n - q) g = n - q;
        st[ns] = q; ln[ns++] = g; q += g;
    }
    for (;;) {
        size_t best = SIZE_MAX;
        float bs = 0;
        for (size_t i = 0; i + 1 < ns; i++) {
            int32_t id = eng_token_lookup(t, e + st[i], ln[i] + ln[i + 1]);
            if (id >= 0 && (best == SIZE_MAX || score[id] > bs)) { best = i; bs = score[id]; }
        }
        if (best == SIZE_MAX) break;
        ln[best] += ln[best + 1];
        memmove(st + best + 1, st + best + 2, (ns - best - 2) * sizeof *st);
        memmove(ln + best + 1, ln + best + 2, (ns - best - 2) * sizeof *ln);
        ns--;
    }
    int32_t k = 0;
    for (size_t i = 0; i < ns; i++) {
        int32_t id = eng_token_lookup(t, e + st[i], ln[i]);
        if (id >= 0) { out[k++] = id; continue; }
        for (size_t j = 0; j < ln[i]; j++) {
            char hex[8];
            snprintf(hex, sizeof hex, "<0x%02X>", (unsigned char)e[st[i] + j]);
            out[k++] = eng_token_lookup(t, hex, 6);
        }
    }
    free(e); free(st); free(ln);
    return len ? k : 0;
}

static float *read_scores(const char *path) {
    eng_gguf *g;
    assert_int_equal(eng_gguf_open(path, &g, NULL, 0), ENG_OK);
    int64_t i = eng_gguf_find_key(g, "tokenizer.ggml.scores");
    uint64_t n = eng_gguf_arr_n(g, i);
    float *s = malloc(n * sizeof *s);
    for (uint64_t j = 0; j < n; j++) s[j] = (float)eng_gguf_get_arr_num(g, i, j);
    eng_gguf_close(g);
    return s;
}

static void spm_matches_the_naive_reference_on_random_text(void **state) {
    (void)state;
    const char *paths[] = {VOCAB_SPM, STORIES};
    char buf[256];
    int32_t a[1024], b[1024];
    for (int p = 0; p < 2; p++) {
        eng_tokenizer *t = load_or_skip(paths[p]);
        float *score = read_scores(paths[p]);
        rng_state = 2024;
        for (int i = 0; i < 1500; i++) {
            size_t n = random_utf8(buf);
            int32_t ka = eng_tokenize(t, buf, n, false, false, false, a, 1024, NULL);
            int32_t kb = naive_spm(t, score, buf, n, b);
            if (ka != kb || memcmp(a, b, (size_t)ka * sizeof *a))
                fprintf(stderr, "%s: '%.*s': %d ids, naive %d\n", paths[p], (int)n, buf, ka, kb);
            assert_int_equal(ka, kb);
            assert_memory_equal(a, b, (size_t)ka * sizeof *a);
        }
        free(score);
        eng_tokenizer_free(t);
    }
}

typedef struct { char **s; size_t n; } merge_list;   /* "A B" strings in rank order, and sorted copies */

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

/* GPT-2 BPE of one pre-tokenizer word: map bytes to unicode, then repeatedly
 * merge the adjacent pair with the lowest rank (leftmost on ties). */
static int32_t naive_bpe_word(const eng_tokenizer *t, char **sorted, size_t nm, const int32_t *rank_of_sorted,
                              const char *w, size_t wl, int32_t *out) {
    char (*sym)[1024] = malloc(wl * 4 * sizeof *sym);   /* merged symbols are tokens: short */
    size_t ns = 0;
    for (size_t i = 0; i < wl; i++) {
        unsigned b = (unsigned char)w[i], c = b, m = 0;
        if (!((b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE)) {
            for (unsigned x = 0; x < b; x++)
                if (!((x >= 0x21 && x <= 0x7E) || (x >= 0xA1 && x <= 0xAC) || x >= 0xAE)) m++;
            c = 256 + m;
        }
        size_t l = put_utf8(c, sym[ns]);
        sym[ns++][l] = '\0';
    }
    for (;;) {
        size_t best = SIZE_MAX;
        int32_t br = 0;
        for (size_t i = 0; i + 1 < ns; i++) {
            char key[520], *kp = key;
            snprintf(key, sizeof key, "%s %s", sym[i], sym[i + 1]);
            char **hit = bsearch(&kp, sorted, nm, sizeof *sorted, cmp_str);
            if (hit && (best == SIZE_MAX || rank_of_sorted[hit - sorted] < br)) { best = i; br = rank_of_sorted[hit - sorted]; }
        }
        if (best == SIZE_MAX) break;
        size_t l0 = strlen(sym[best]), l1 = strlen(sym[best + 1]);
        memcpy(sym[best] + l0, sym[best + 1], l1 + 1);
        memmove(sym + best + 1, sym + best + 2, (ns - best - 2) * sizeof *sym);
        ns--;
    }
    int32_t k = 0;
    for (size_t i = 0; i < ns; i++) out[k++] = eng_token_lookup(t, sym[i], strlen(sym[i]));
    free(sym);
    return k;
}

static void bpe_matches_the_naive_reference_on_random_words(void **state) {
    (void)state;
    eng_tokenizer *t = load_or_skip(VOCAB_GPT2);
    eng_gguf *g;
    assert_int_equal(eng_gguf_open(VOCAB_GPT2, &g, NULL, 0), ENG_OK);
    int64_t mi = eng_gguf_find_key(g, "tokenizer.ggml.merges");
    size_t nm = (size_t)eng_gguf_arr_n(g, mi);
    char **sorted = malloc(nm * sizeof *sorted);
    for (size_t i = 0; i < nm; i++) {
        const char *s;
        size_t l;
        assert_int_equal(eng_gguf_get_arr_str(g, mi, i, &s, &l), ENG_OK);
        sorted[i] = malloc(l + 12);
        memcpy(sorted[i], s, l);
        sorted[i][l] = '\0';
        memcpy(sorted[i] + l + 1, &i, sizeof(int32_t));   /* the rank rides behind the NUL */
    }
    eng_gguf_close(g);
    qsort(sorted, nm, sizeof *sorted, cmp_str);
    int32_t *rank = malloc(nm * sizeof *rank);
    for (size_t i = 0; i < nm; i++) memcpy(&rank[i], sorted[i] + strlen(sorted[i]) + 1, sizeof(int32_t));
    /* letters only (one " ?\p{L}+" word): ASCII, Latin-1, Cyrillic, CJK */
    char buf[512];
    int32_t a[2048], b[2048];
    rng_state = 77;
    for (int it = 0; it < 1500; it++) {
        size_t n = 0, m = 1 + rnd(it % 50 == 0 ? 120 : 16);
        if (rnd(2)) buf[n++] = ' ';
        for (size_t i = 0; i < m; i++) {
            uint32_t c, k = rnd(10);
            if (k < 6) c = (rnd(5) ? 'a' : 'A') + rnd(26);
            else if (k < 7) do c = 0xC0 + rnd(0x40); while (c == 0xD7 || c == 0xF7);
            else if (k < 9) c = 0x430 + rnd(0x20);
            else c = 0x4E00 + rnd(0x5000);
            n += put_utf8(c, buf + n);
        }
        int32_t ka = eng_tokenize(t, buf, n, false, false, false, a, 2048, NULL);
        int32_t kb = naive_bpe_word(t, sorted, nm, rank, buf, n, b);
        if (ka != kb || memcmp(a, b, (size_t)ka * sizeof *a)) fprintf(stderr, "'%.*s': %d ids, naive %d\n", (int)n, buf, ka, kb);
        assert_int_equal(ka, kb);
        assert_memory_equal(a, b, (size_t)ka * sizeof *a);
    }
    for (size_t i = 0; i < nm; i++) free(sorted[i]);
    free(sorted);
    free(rank);
    eng_tokenizer_free(t);
}

// ----------------------------------------------------------------------------
// Special tokens

static void special_token_text_is_one_token_only_with_parse_special(void **state) {
    (void)state;
    eng_tokenizer *t = load_or_skip(VOCAB_SPM);
    int32_t ids[32];
    assert_int_equal(eng_tokenize(t, "<s>", 3, false, false, true, ids, 32, NULL), 1);
    assert_int_equal(ids[0], 1);
    int32_t n = eng_tokenize(t, "<s>", 3, false, false, false, ids, 32, NULL);
    assert_true(n > 1);
    for (int32_t i = 0; i < n; i++) assert_int_not_equal(ids[i], 1);
    eng_tokenizer_free(t);

    t = load_or_skip(VOCAB_GPT2);
    const char *s = "Hi<|endoftext|>yo";
    n = eng_tokenize(t, s, strlen(s), false, false, true, ids, 32, NULL);
    assert_int_equal(n, 3);
    assert_int_equal(ids[1], 50256);
    n = eng_tokenize(t, s, strlen(s), false, false, false, ids, 32, NULL);
    assert_true(n > 3);
    for (int32_t i = 0; i < n; i++) assert_int_not_equal(ids[i], 50256);
    char back[64];
    assert_int_equal(eng_detokenize(t, ids, n, false, back, sizeof back), (int64_t)strlen(s));
    assert_string_equal(back, s);
    eng_tokenizer_free(t);
}

static void spm_dummy_prefix_follows_special_tokens_and_decodes_back(void **state) {
    (void)state;
    eng_tokenizer *t = load_or_skip(VOCAB_SPM);
    int32_t ids[32];
    const char *s = "Hello<s>Hello";
    int32_t n = eng_tokenize(t, s, strlen(s), true, false, true, ids, 32, NULL);
    const int32_t want[] = {1, 15043, 1, 15043};   /* BOS, ▁Hello, <s>, ▁Hello */
    assert_int_equal(n, 4);
    assert_memory_equal(ids, want, sizeof want);
    char back[64];
    assert_int_equal(eng_detokenize(t, ids + 1, 3, true, back, sizeof back), (int64_t)strlen(s));
    assert_string_equal(back, s);
    assert_int_equal(eng_detokenize(t, ids + 1, 3, false, back, sizeof back), 10);
    assert_string_equal(back, "HelloHello");
    eng_tokenizer_free(t);
}

/* A copy of a vocabulary's tokenizer.* keys in memory, with `edit` applied. */
static void *vocab_copy(const char *path, void (*edit)(eng_gguf_writer *, const eng_gguf *), size_t *n) {
    if (access(path, R_OK) != 0) { fprintf(stderr, "skipping: %s is absent\n", path); skip(); }
    eng_gguf *g;
    assert_int_equal(eng_gguf_open(path, &g, NULL, 0), ENG_OK);
    eng_gguf_writer *w = eng_gguf_writer_new(3, 0);
    assert_int_equal(eng_gguf_writer_copy_kv(w, g, "tokenizer."), ENG_OK);
    if (edit) edit(w, g);
    void *buf;
    assert_int_equal(eng_gguf_writer_to_buffer(w, &buf, n), ENG_OK);
    eng_gguf_writer_free(w);
    eng_gguf_close(g);
    return buf;
}

static int load_buffer(const void *buf, size_t n, eng_tokenizer **t, char *err, size_t errlen) {
    eng_gguf *g;
    assert_int_equal(eng_gguf_open_buffer(buf, n, "synthetic.gguf", &g, NULL, 0), ENG_OK);
    int rc = eng_tokenizer_load(g, t, err, errlen);
    eng_gguf_close(g);
    return rc;
}

static void make_newline_byte_user_defined(eng_gguf_writer *w, const eng_gguf *g) {
    int64_t i = eng_gguf_find_key(g, "tokenizer.ggml.token_type");
    uint64_t n = eng_gguf_arr_n(g, i);
    int32_t *ty = malloc(n * sizeof *ty);
    memcpy(ty, eng_gguf_get_arr_data(g, i), n * sizeof *ty);
    ty[13] = 4;   /* <0x0A> becomes USER_DEFINED: its text "<0x0A>" is now matched whole */
    assert_int_equal(eng_gguf_writer_set_arr(w, "tokenizer.ggml.token_type", ENG_GGUF_TYPE_INT32, n, ty), ENG_OK);
    free(ty);
}

static bool contains(const int32_t *ids, int32_t n, int32_t id) {
    for (int32_t i = 0; i < n; i++)
        if (ids[i] == id) return true;
    return false;
}

static void user_defined_tokens_match_even_without_parse_special(void **state) {
    (void)state;
    const char *s = "a<0x0A>b";
    int32_t ids[16], k;
    eng_tokenizer *t = load_or_skip(VOCAB_SPM);
    k = eng_tokenize(t, s, strlen(s), false, false, false, ids, 16, NULL);
    assert_false(contains(ids, k, 13));   /* a BYTE token's text is plain text */
    eng_tokenizer_free(t);
    size_t n;
    void *buf = vocab_copy(VOCAB_SPM, make_newline_byte_user_defined, &n);
    assert_int_equal(load_buffer(buf, n, &t, NULL, 0), ENG_OK);
    k = eng_tokenize(t, s, strlen(s), false, false, false, ids, 16, NULL);   /* llama.cpp: USER_DEFINED always */
    assert_true(contains(ids, k, 13));
    char back[32];
    assert_int_equal(eng_detokenize(t, ids, k, false, back, sizeof back), (int64_t)strlen(s));
    assert_string_equal(back, s);
    eng_tokenizer_free(t);
    free(buf);
}

/* A tiny SPM vocabulary: <unk> <s> </s>, the 256 byte tokens, then `extra`. */
static void *tiny_spm(const char *const *extra, int n_extra, size_t *n) {
    int nt = 3 + 256 + n_extra;
    char **tok = malloc((size_t)nt * sizeof *tok);
    float *score = calloc((size_t)nt, sizeof *score);
    int32_t *ty = malloc((size_t)nt * sizeof *ty);
    const char *head[] = {"<unk>", "<s>", "</s>"};
    for (int i = 0; i < nt; i++) {
        tok[i] = malloc(16);
        if (i < 3) { strcpy(tok[i], head[i]); ty[i] = i ? 3 : 2; }
        else if (i < 259) { snprintf(tok[i], 16, "<0x%02X>", i - 3); ty[i] = 6; }
        else { snprintf(tok[i], 16, "%s", extra[i - 259]); ty[i] = 1; score[i] = (float)-i; }
    }
    eng_gguf_writer *w = eng_gguf_writer_new(3, 0);
    assert_int_equal(eng_gguf_writer_set_str(w, "tokenizer.ggml.model", "llama"), ENG_OK);
    assert_int_equal(eng_gguf_writer_set_arr_str(w, "tokenizer.ggml.tokens", (uint64_t)nt, (const char *const *)tok, NULL), ENG_OK);
    assert_int_equal(eng_gguf_writer_set_arr(w, "tokenizer.ggml.scores", ENG_GGUF_TYPE_FLOAT32, (uint64_t)nt, score), ENG_OK);
    assert_int_equal(eng_gguf_writer_set_arr(w, "tokenizer.ggml.token_type", ENG_GGUF_TYPE_INT32, (uint64_t)nt, ty), ENG_OK);
    void *buf;
    assert_int_equal(eng_gguf_writer_to_buffer(w, &buf, n), ENG_OK);
    eng_gguf_writer_free(w);
    for (int i = 0; i < nt; i++) free(tok[i]);
    free(tok); free(score); free(ty);
    return buf;
}

/* llama.cpp merges any two symbols whose text is a token, even when one of
 * them ('a' here) is not a token on its own; "\xE2\x96\x81" (no token) falls back to bytes. */
static void spm_merges_through_characters_that_are_not_tokens(void **state) {
    (void)state;
    const char *extra[] = {"b", "ab", "c", "abc"};
    size_t n;
    void *buf = tiny_spm(extra, 4, &n);
    eng_tokenizer *t;
    assert_int_equal(load_buffer(buf, n, &t, NULL, 0), ENG_OK);
    int32_t ids[16];
    int32_t k = eng_tokenize(t, "abc", 3, false, false, false, ids, 16, NULL);
    const int32_t want[] = {3 + 0xE2, 3 + 0x96, 3 + 0x81, 262};   /* <0xE2><0x96><0x81> abc */
    assert_int_equal(k, 4);
    assert_memory_equal(ids, want, sizeof want);
    k = eng_tokenize(t, "ba", 2, false, false, false, ids, 16, NULL);
    assert_int_equal(k, 5);   /* 'a' alone is no token: byte fallback */
    assert_int_equal(ids[3], 259);
    assert_int_equal(ids[4], 3 + 'a');
    eng_tokenizer_free(t);
    free(buf);
}

// ----------------------------------------------------------------------------
// Buffer contracts and offsets

static void too_small_output_buffer_returns_minus_the_count(void **state) {
    (void)state;
    eng_tokenizer *t = load_or_skip(VOCAB_GPT2);
    int32_t ids[4];
    const char *s = "Hello world, this is a test";
    int32_t n = eng_tokenize(t, s, strlen(s), false, false, false, ids, 2, NULL);
    assert_int_equal(n, -7);
    assert_int_equal(eng_tokenize(t, s, strlen(s), false, false, false, NULL, 0, NULL), -7);
    assert_int_equal(eng_tokenize(t, "", 0, false, false, false, NULL, 0, NULL), 0);
    assert_int_equal(eng_tokenize(t, NULL, 0, false, false, false, ids, 4, NULL), 0);
    eng_tokenizer_free(t);
}

static void detokenize_reports_minus_the_count_when_the_buffer_is_too_small(void **state) {
    (void)state;
    eng_tokenizer *t = load_or_skip(VOCAB_SPM);
    int32_t ids[16];
    int32_t n = eng_tokenize(t, "Hello world", 11, false, false, false, ids, 16, NULL);
    char out[16];
    assert_int_equal(eng_detokenize(t, ids, n, false, out, 5), -11);
    assert_int_equal(eng_detokenize(t, ids, n, false, NULL, 0), -11);
    assert_int_equal(eng_detokenize(t, ids, n, false, out, 11), 11);   /* fits exactly, no NUL */
    memset(out, 'x', sizeof out);
    assert_int_equal(eng_detokenize(t, ids, n, false, out, sizeof out), 11);
    assert_string_equal(out, "Hello world");
    eng_tokenizer_free(t);
}

/* Offsets never decrease, and each token's text sits at its offset (SPM: after
 * a dummy-prefix space that has no input byte). */
static void offsets_are_monotone_and_point_at_each_token_text(void **state) {
    (void)state;
    const char *paths[] = {VOCAB_SPM, VOCAB_GPT2};
    char buf[256];
    for (int p = 0; p < 2; p++) {
        eng_tokenizer *t = load_or_skip(paths[p]);
        rng_state = 42;
        for (int i = 0; i < 300; i++) {
            size_t n = random_utf8(buf);
            int32_t *ids, *offs;
            int32_t k = tok_all(t, buf, n, false, false, &ids, &offs);
            for (int32_t j = 0; j < k; j++) {
                if (j) assert_true(offs[j] >= offs[j - 1]);
                char piece[64];   /* SPM: the leading dummy space is dropped here */
                int64_t m = eng_detokenize(t, ids + j, 1, true, piece, sizeof piece);
                assert_true(m >= 0);
                size_t pl;
                const char *raw = eng_token_piece(t, ids[j], &pl);
                int64_t o = offs[j];
                bool at = o + m <= (int64_t)n && memcmp(buf + o, piece, (size_t)m) == 0;
                if (!at && p == 0 && pl >= 3 && !memcmp(raw, "\xE2\x96\x81", 3))   /* a real space, not the dummy */
                    at = buf[o] == ' ' && o + 1 + m <= (int64_t)n && memcmp(buf + o + 1, piece, (size_t)m) == 0;
                if (!at) fprintf(stderr, "token %d (id %d) at %d of '%.*s'\n", j, ids[j], offs[j], (int)n, buf);
                assert_true(at);
            }
            if (p == 1 && k) assert_int_equal(offs[0], 0);
            free(ids);
            free(offs);
        }
        eng_tokenizer_free(t);
    }
}

// ----------------------------------------------------------------------------
// Loading from any GGUF with tokenizer.* keys

static void tokenizer_loads_from_a_copy_of_the_tokenizer_keys(void **state) {
    (void)state;
    size_t n;
    void *buf = vocab_copy(VOCAB_GPT2, NULL, &n);
    eng_tokenizer *a, *b = load_or_skip(VOCAB_GPT2);
    assert_int_equal(load_buffer(buf, n, &a, NULL, 0), ENG_OK);
    const char *s = "kvreplay: agents' prompts (with \xF0\x9F\xA6\x99 emoji) and 12345 numbers\n\n";
    int32_t ia[64], ib[64];
    int32_t na = eng_tokenize(a, s, strlen(s), false, false, true, ia, 64, NULL);
    int32_t nb = eng_tokenize(b, s, strlen(s), false, false, true, ib, 64, NULL);
    assert_int_equal(na, nb);
    assert_memory_equal(ia, ib, (size_t)na * sizeof *ia);
    eng_tokenizer_free(a);
    eng_tokenizer_free(b);
    free(buf);
}

static void set_model_bert(eng_gguf_writer *w, const eng_gguf *g) {
    (void)g;
    assert_int_equal(eng_gguf_writer_set_str(w, "tokenizer.ggml.model", "bert"), ENG_OK);
}

static void set_tokens_not_strings(eng_gguf_writer *w, const eng_gguf *g) {
    (void)g;
    int32_t v[3] = {1, 2, 3};
    assert_int_equal(eng_gguf_writer_set_arr(w, "tokenizer.ggml.tokens", ENG_GGUF_TYPE_INT32, 3, v), ENG_OK);
}

static void set_pre_unknown(eng_gguf_writer *w, const eng_gguf *g) {
    (void)g;
    assert_int_equal(eng_gguf_writer_set_str(w, "tokenizer.ggml.pre", "no-such-pre"), ENG_OK);
}

static void bad_tokenizer_metadata_is_rejected_with_the_field_named(void **state) {
    (void)state;
    char err[512];
    eng_tokenizer *t = NULL;
    size_t n;
    void *buf = vocab_copy(VOCAB_SPM, set_model_bert, &n);
    assert_int_equal(load_buffer(buf, n, &t, err, sizeof err), ENG_ERR_UNSUPPORTED);
    assert_non_null(strstr(err, "tokenizer.ggml.model"));
    assert_null(t);
    free(buf);
    buf = vocab_copy(VOCAB_SPM, set_tokens_not_strings, &n);
    assert_int_equal(load_buffer(buf, n, &t, err, sizeof err), ENG_ERR_FORMAT);
    assert_non_null(strstr(err, "tokenizer.ggml.tokens"));
    free(buf);
    buf = vocab_copy(VOCAB_GPT2, set_pre_unknown, &n);
    assert_int_equal(load_buffer(buf, n, &t, err, sizeof err), ENG_ERR_UNSUPPORTED);
    assert_non_null(strstr(err, "tokenizer.ggml.pre"));
    free(buf);
}

static void file_without_tokenizer_keys_is_not_found(void **state) {
    (void)state;
    eng_gguf_writer *w = eng_gguf_writer_new(3, 0);
    assert_int_equal(eng_gguf_writer_set_str(w, "general.architecture", "llama"), ENG_OK);
    void *buf;
    size_t n;
    assert_int_equal(eng_gguf_writer_to_buffer(w, &buf, &n), ENG_OK);
    eng_gguf_writer_free(w);
    char err[256];
    eng_tokenizer *t = NULL;
    assert_int_equal(load_buffer(buf, n, &t, err, sizeof err), ENG_ERR_NOT_FOUND);
    assert_non_null(strstr(err, "tokenizer.ggml.model"));
    free(buf);
}

// ----------------------------------------------------------------------------
// The command line

/* Runs cmd through sh; returns the exit status and the first output line in out. */
static int run_cli(const char *cmd, char *out, size_t cap) {
    const char *build = getenv("BUILD") ? getenv("BUILD") : "build";
    char exe[256], full[2048];
    snprintf(exe, sizeof exe, "./%s/kvreplay", build);
    if (access(exe, X_OK) != 0 || access(STORIES, R_OK) != 0) {
        fprintf(stderr, "skipping: %s or %s is absent\n", exe, STORIES);
        skip();
    }
    snprintf(full, sizeof full, cmd, exe, STORIES);
    FILE *f = popen(full, "r");
    assert_non_null(f);
    out[0] = '\0';
    if (!fgets(out, (int)cap, f)) out[0] = '\0';
    char sink[256];
    while (fgets(sink, sizeof sink, f)) {}
    int st = pclose(f);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static void cli_prints_stories_ids_with_bos_on_one_line(void **state) {
    (void)state;
    char out[256];
    assert_int_equal(run_cli("%s tokenize -m %s 'Once upon a time'", out, sizeof out), 0);
    assert_string_equal(out, "1 403 407 261 378\n");
}

static void cli_no_bos_leaves_bos_out(void **state) {
    (void)state;
    char out[256];
    assert_int_equal(run_cli("%s tokenize -m %s --no-bos 'Once upon a time'", out, sizeof out), 0);
    assert_string_equal(out, "403 407 261 378\n");
}

static void cli_reads_text_from_stdin_for_dash(void **state) {
    (void)state;
    char out[256];
    assert_int_equal(run_cli("printf 'Once upon a time' | %s tokenize -m %s -", out, sizeof out), 0);
    assert_string_equal(out, "1 403 407 261 378\n");
}

static void cli_pieces_prints_the_vocabulary_pieces(void **state) {
    (void)state;
    char out[256];
    assert_int_equal(run_cli("%s tokenize -m %s --pieces 'Once upon a time'", out, sizeof out), 0);
    assert_string_equal(out, "<s> \xE2\x96\x81Once \xE2\x96\x81upon \xE2\x96\x81" "a \xE2\x96\x81time\n");
}

static void cli_missing_model_file_exits_2(void **state) {
    (void)state;
    char out[256];
    assert_int_equal(run_cli("%s tokenize -m /nonexistent/model.gguf x 2>/dev/null # %s", out, sizeof out), 2);
    assert_int_equal(run_cli("%s tokenize -m %s 2>/dev/null", out, sizeof out), 2);   /* no TEXT */
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(llama_spm_vocabulary_matches_every_llama_cpp_test_vector),
        cmocka_unit_test(gpt2_vocabulary_matches_every_llama_cpp_test_vector),
        cmocka_unit_test(vector_check_catches_a_planted_wrong_id),
        cmocka_unit_test(test_vectors_round_trip_through_detokenize),
        cmocka_unit_test(stories260k_tokenizes_once_upon_a_time_with_bos_first),
        cmocka_unit_test(vocabularies_report_their_special_ids_and_flags),
        cmocka_unit_test(random_valid_utf8_round_trips_for_both_vocabularies),
        cmocka_unit_test(random_bytes_and_invalid_utf8_never_crash),
        cmocka_unit_test(long_runs_without_spaces_tokenize_and_round_trip),
        cmocka_unit_test(spm_matches_the_naive_reference_on_random_text),
        cmocka_unit_test(bpe_matches_the_naive_reference_on_random_words),
        cmocka_unit_test(special_token_text_is_one_token_only_with_parse_special),
        cmocka_unit_test(spm_dummy_prefix_follows_special_tokens_and_decodes_back),
        cmocka_unit_test(user_defined_tokens_match_even_without_parse_special),
        cmocka_unit_test(spm_merges_through_characters_that_are_not_tokens),
        cmocka_unit_test(too_small_output_buffer_returns_minus_the_count),
        cmocka_unit_test(detokenize_reports_minus_the_count_when_the_buffer_is_too_small),
        cmocka_unit_test(offsets_are_monotone_and_point_at_each_token_text),
        cmocka_unit_test(tokenizer_loads_from_a_copy_of_the_tokenizer_keys),
        cmocka_unit_test(bad_tokenizer_metadata_is_rejected_with_the_field_named),
        cmocka_unit_test(file_without_tokenizer_keys_is_not_found),
        cmocka_unit_test(cli_prints_stories_ids_with_bos_on_one_line),
        cmocka_unit_test(cli_no_bos_leaves_bos_out),
        cmocka_unit_test(cli_reads_text_from_stdin_for_dash),
        cmocka_unit_test(cli_pieces_prints_the_vocabulary_pieces),
        cmocka_unit_test(cli_missing_model_file_exits_2),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
