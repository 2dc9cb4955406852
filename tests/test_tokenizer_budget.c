/*
 * tests/test_tokenizer_budget.c: tokenizing within a token budget
 * (eng_tokenize_upto) and the byte bound it rests on (L,
 * eng_tokenizer_max_token_bytes, eng_tokenizer_bytes_bound), on every
 * vocabulary in ../shared/data/vocab and stories260K:
 *   - for every budget around the text's length, the result is exactly the
 *     first n tokens of the whole tokenization, and `more` says exactly
 *     whether the whole has more than the budget;
 *   - the checker catches what a wrong implementation does: a text cut
 *     where the budget runs out (merges across the cut change the tokens),
 *     a prompt accepted that does not fit, a wrong id;
 *   - no token stands for more than L bytes, and a text has at least
 *     len / L tokens where the bound is said to hold; where it is said not
 *     to, bytes do vanish (phi-3's special tokens eat whitespace; a byte
 *     with no token of its own in falcon, mpt, starcoder);
 *   - a text too long for its budget is refused before it is tokenized, in
 *     no more memory than the budget's.
 * Skips when ../shared/data is absent.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "gguf.h"
#include "status.h"
#include "tokenizer.h"
#include "util.h"

static const char *const vocabs[] = {
    "../shared/data/vocab/ggml-vocab-llama-spm.gguf", "../shared/data/vocab/ggml-vocab-phi-3.gguf",
    "../shared/data/vocab/ggml-vocab-gpt-2.gguf",     "../shared/data/vocab/ggml-vocab-mpt.gguf",
    "../shared/data/vocab/ggml-vocab-deepseek-coder.gguf", "../shared/data/vocab/ggml-vocab-starcoder.gguf",
    "../shared/data/vocab/ggml-vocab-falcon.gguf",    "../shared/data/models/stories260K.gguf",
};
#define N_VOCABS ((int)(sizeof vocabs / sizeof vocabs[0]))

static eng_tokenizer *load_or_skip(const char *path) {
    if (access(path, R_OK) != 0) {
        fprintf(stderr, "skipping: %s is absent\n", path);
        skip();
    }
    char err[512] = "";
    eng_gguf *g = NULL;
    eng_tokenizer *t = NULL;
    assert_int_equal(eng_gguf_open(path, &g, err, sizeof err), ENG_OK);
    assert_int_equal(eng_tokenizer_load(g, &t, err, sizeof err), ENG_OK);
    eng_gguf_close(g);
    return t;
}

static uint64_t rng_state;
static uint32_t rnd(uint32_t n) {   /* splitmix64, seeded explicitly per test */
    uint64_t z = (rng_state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return (uint32_t)((z ^ (z >> 31)) % n);
}

/* Seeded texts that exercise every kind of unit: words, long runs (one
 * SPM segment, one BPE word), digits, special-token texts, CJK, invalid
 * UTF-8 and overlong forms. */
static char *make_text(int kind, size_t *n) {
    static const char *const parts[] = {
        "Hello world! ", "It's 12345678 o'clock. ", "<s> </s> <|endoftext|> ", "  \t\n\n  ", "\xc3\xbc" "ber ",
        "\xe6\x95\xb0\xe5\xad\x97 ", "def f(x):\n    return x**2\n", "\xf0\x9f\x98\x80 ", "\xff\xfe\x80 ",
        "\xc0\xa1\xe0\x80\xa1 ", "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa", "                      ",
    };
    const size_t cap = 6000;
    char *s = malloc(cap + 64);
    size_t k = 0;
    if (kind == 0) {   /* a mix */
        while (k < cap) {
            const char *p = parts[rnd(sizeof parts / sizeof parts[0])];
            memcpy(s + k, p, strlen(p));
            k += strlen(p);
        }
    } else if (kind == 1) {   /* one long run */
        memset(s, 'a', 3000);
        k = 3000;
    } else {   /* random bytes */
        for (; k < 2000; k++) s[k] = (char)rnd(256);
    }
    *n = k;
    return s;
}

/* The budget's contract for one call: NULL when (got, n, more) is what
 * eng_tokenize_upto may return for max tokens of a text whose whole
 * tokenization is full[0, n_full), else what is wrong. */
static const char *budget_check(const int32_t *full, int32_t n_full, const int32_t *got, int32_t n, bool more,
                                int32_t max) {
    if (n < 0 || n > max) return "more tokens than the budget";
    if (more != (n_full > max)) return more ? "refused a text that fits" : "accepted a text that does not fit";
    if (!more && n != n_full) return "fits, but not the whole tokenization";
    if (n && memcmp(got, full, (size_t)n * sizeof *got) != 0) return "not the first tokens of the whole";
    return NULL;
}

static int32_t *tokenize_all(const eng_tokenizer *t, const char *s, size_t n, bool bos, bool eos, bool special,
                             int32_t **offs, int32_t *count) {
    int32_t cap = (int32_t)(3 * n + 8);
    int32_t *ids = malloc((size_t)cap * sizeof *ids);
    *offs = malloc((size_t)cap * sizeof **offs);
    *count = eng_tokenize(t, s, n, bos, eos, special, ids, cap, *offs);
    assert_true(*count >= 0);
    return ids;
}

/* Every budget from 0 to a little past the whole, for every vocabulary, text
 * and flag: the exact prefix, and `more` exact; offsets too; and the
 * allocating call gives the whole. */
static void the_budgeted_result_is_the_exact_start_of_the_whole(void **state) {
    (void)state;
    int checked = 0;
    for (int v = 0; v < N_VOCABS; v++) {
        eng_tokenizer *t = load_or_skip(vocabs[v]);
        rng_state = 0x5eed0000u + (uint64_t)v;
        for (int kind = 0; kind < 3; kind++)
            for (int flags = 0; flags < 4; flags++) {
                const bool ends = flags & 1, special = flags & 2;
                size_t len;
                char *s = make_text(kind, &len);
                int32_t *offs, n_full;
                int32_t *full = tokenize_all(t, s, len, ends, ends, special, &offs, &n_full);
                int32_t n_alloc = -1;
                int32_t *alloc = eng_tokenize_alloc(t, s, len, ends, ends, special, &n_alloc);
                assert_non_null(alloc);
                assert_int_equal(n_alloc, n_full);
                assert_memory_equal(alloc, full, (size_t)n_full * sizeof *full);
                free(alloc);
                int32_t *got = malloc(((size_t)n_full + 8) * sizeof *got);
                int32_t *got_offs = malloc(((size_t)n_full + 8) * sizeof *got_offs);
                for (int32_t max = 0; max <= n_full + 2; max += max < 64 || max > n_full - 64 ? 1 : 7) {
                    bool more = false;
                    const int32_t n = eng_tokenize_upto(t, s, len, ends, ends, special, max, got, got_offs, &more);
                    const char *why = budget_check(full, n_full, got, n, more, max);
                    if (why) fprintf(stderr, "%s, text %d, flags %d, budget %d of %d: %s\n", vocabs[v], kind, flags,
                                     max, n_full, why);
                    assert_null(why);
                    if (n) assert_memory_equal(got_offs, offs, (size_t)n * sizeof *offs);
                    checked++;
                }
                free(got);
                free(got_offs);
                free(full);
                free(offs);
                free(s);
            }
        eng_tokenizer_free(t);
    }
    fprintf(stderr, "%d budgeted calls checked\n", checked);
}

/* Tokenizes the longest text prefix whose tokens fit the budget: what a
 * budget that cut the text would do (a planted fault). */
static int32_t cut_text_upto(const eng_tokenizer *t, const char *s, size_t len, int32_t max, int32_t *out, bool *more) {
    size_t lo = 0, hi = len;
    int32_t *tmp = malloc((3 * len + 8) * sizeof *tmp);
    while (lo < hi) {   /* the longest prefix with at most max tokens */
        size_t mid = (lo + hi + 1) / 2;
        if (eng_tokenize(t, s, mid, false, false, false, tmp, (int32_t)(3 * len + 8), NULL) <= max) lo = mid;
        else hi = mid - 1;
    }
    int32_t n = eng_tokenize(t, s, lo, false, false, false, tmp, (int32_t)(3 * len + 8), NULL);
    memcpy(out, tmp, (size_t)n * sizeof *out);
    *more = lo < len;
    free(tmp);
    return n;
}

static void the_budget_check_catches_a_cut_text_and_a_wrong_answer(void **state) {
    (void)state;
    for (int v = 0; v < 3; v += 2) {   /* llama-spm and gpt-2 */
        eng_tokenizer *t = load_or_skip(vocabs[v]);
        const char *s = "Once upon a time, unbelievably, a tokenizer merged thoroughly unmergeable words.";
        const size_t len = strlen(s);
        int32_t *offs, n_full;
        int32_t *full = tokenize_all(t, s, len, false, false, false, &offs, &n_full);
        int32_t got[256];
        int caught = 0;
        for (int32_t max = 1; max < n_full; max++) {   /* a cut text: some budget cuts inside a word */
            bool more;
            int32_t n = cut_text_upto(t, s, len, max, got, &more);
            caught += budget_check(full, n_full, got, n, more, max) != NULL;
        }
        fprintf(stderr, "%s: the cut text is caught at %d of %d budgets\n", vocabs[v], caught, n_full - 1);
        assert_true(caught > 0);
        bool more;
        const int32_t max = n_full - 1;
        int32_t n = eng_tokenize_upto(t, s, len, false, false, false, max, got, NULL, &more);
        assert_null(budget_check(full, n_full, got, n, more, max));
        assert_non_null(budget_check(full, n_full, got, n, false, max));   /* a prompt accepted that does not fit */
        got[n / 2]++;
        assert_non_null(budget_check(full, n_full, got, n, more, max));   /* a wrong id */
        n = eng_tokenize_upto(t, s, len, false, false, false, n_full, got, NULL, &more);
        assert_null(budget_check(full, n_full, got, n, more, n_full));
        assert_non_null(budget_check(full, n_full, got, n, true, n_full));   /* a prompt refused that fits */
        free(full);
        free(offs);
        eng_tokenizer_free(t);
    }
}

/* The bytes one token stands for, as decoded (its text as the input spells it). */
static int32_t token_bytes(const eng_tokenizer *t, int32_t id) {
    char buf[4096];
    int64_t m = eng_detokenize(t, &id, 1, true, buf, sizeof buf);
    assert_true(m >= 0);
    return (int32_t)m;
}

static void no_token_stands_for_more_than_l_bytes_and_texts_have_len_over_l_tokens(void **state) {
    (void)state;
    for (int v = 0; v < N_VOCABS; v++) {
        eng_tokenizer *t = load_or_skip(vocabs[v]);
        const int32_t L = eng_tokenizer_max_token_bytes(t);
        int32_t longest = 0;
        for (int32_t id = 0; id < eng_tokenizer_n_vocab(t); id++) {
            const int32_t b = token_bytes(t, id);
            if (b > longest) longest = b;
        }
        fprintf(stderr, "%s: L %d, the longest token decodes to %d bytes, bound %s\n", vocabs[v], L, longest,
                eng_tokenizer_bytes_bound(t) ? "holds" : "does not hold");
        assert_true(longest <= L);
        /* a byte alone that gives no token (a byte-level BPE missing some byte's character) */
        int vanish = 0;
        for (int b = 0; b < 256; b++) {
            const char c = (char)b;
            int32_t id[8];
            vanish += eng_tokenize(t, &c, 1, false, false, false, id, 8, NULL) == 0;
        }
        const bool phi3 = strstr(vocabs[v], "phi-3") != NULL;   /* its special tokens eat whitespace */
        if (eng_tokenizer_bytes_bound(t)) assert_int_equal(vanish, 0);
        else assert_true(vanish > 0 || phi3);
        if (vanish) fprintf(stderr, "  %d bytes alone give no token\n", vanish);
        rng_state = 0xb0b0u + (uint64_t)v;
        for (int kind = 0; kind < 3 && eng_tokenizer_bytes_bound(t); kind++)
            for (int special = 0; special < 2; special++) {
                size_t len;
                char *s = make_text(kind, &len);
                int32_t *offs, n;
                int32_t *ids = tokenize_all(t, s, len, false, false, special, &offs, &n);
                assert_true((size_t)n * (size_t)L >= len);
                free(ids);
                free(offs);
                free(s);
            }
        eng_tokenizer_free(t);
    }
}

/* Why phi-3 has no bound: after <|end|>, any whitespace is eaten whole. */
static void phi3_whitespace_after_a_special_token_gives_no_token(void **state) {
    (void)state;
    eng_tokenizer *t = load_or_skip(vocabs[1]);
    char s[4096] = "<|end|>";
    memset(s + 7, ' ', sizeof s - 8);
    s[sizeof s - 1] = '\0';
    int32_t ids[16];
    const int32_t n = eng_tokenize(t, s, strlen(s), false, false, true, ids, 16, NULL);
    assert_int_equal(n, 1);
    assert_true((size_t)n * (size_t)eng_tokenizer_max_token_bytes(t) < strlen(s));
    bool more;
    assert_int_equal(eng_tokenize_upto(t, s, strlen(s), false, false, true, 1, ids, NULL, &more), 1);
    assert_false(more);   /* accepted: no byte bound is used where it does not hold */
    eng_tokenizer_free(t);
}

static long max_rss_kb(void) {
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return ru.ru_maxrss;
}

/* A 64 MB run of one letter against a budget of 4,096 tokens: refused at
 * once (n = 0) where the byte bound holds, and the peak memory does not
 * move; phi-3 (no byte bound) stops its one segment once it is longer than
 * the budget's bytes. A text that passes the byte test but has too many
 * tokens stops inside the budget. */
static void a_text_too_long_for_its_budget_is_refused_before_it_is_tokenized(void **state) {
    (void)state;
    for (int v = 0; v < 3; v++) {   /* llama-spm, phi-3, gpt-2 */
        eng_tokenizer *t = load_or_skip(vocabs[v]);
        const size_t big = (size_t)64 << 20;
        char *s = malloc(big);
        memset(s, 'a', big);
        int32_t *out = malloc(4096 * sizeof *out);
        const long rss0 = max_rss_kb();
        bool more = false;
        const int32_t n0 = eng_tokenize_upto(t, s, big, true, false, false, 4096, out, NULL, &more);
        assert_true(more);
        if (eng_tokenizer_bytes_bound(t)) assert_int_equal(n0, 0);
        else assert_true(n0 >= 0 && n0 <= 4096);
        fprintf(stderr, "%s: peak RSS grew by %ld KB refusing 64 MB\n", vocabs[v], max_rss_kb() - rss0);
        assert_true(max_rss_kb() - rss0 < (eng_tokenizer_bytes_bound(t) ? 1024 : 16 * 1024));
        /* within L * budget bytes but far more tokens: stops with at most the budget */
        const size_t len = (size_t)eng_tokenizer_max_token_bytes(t) * 4000;
        for (size_t i = 0; i < len; i++) s[i] = "a b"[i % 3];
        const int32_t n = eng_tokenize_upto(t, s, len, true, false, false, 4096, out, NULL, &more);
        assert_true(more);
        assert_true(n >= 0 && n <= 4096);
        free(out);
        free(s);
        eng_tokenizer_free(t);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(the_budgeted_result_is_the_exact_start_of_the_whole),
        cmocka_unit_test(the_budget_check_catches_a_cut_text_and_a_wrong_answer),
        cmocka_unit_test(no_token_stands_for_more_than_l_bytes_and_texts_have_len_over_l_tokens),
        cmocka_unit_test(phi3_whitespace_after_a_special_token_gives_no_token),
        cmocka_unit_test(a_text_too_long_for_its_budget_is_refused_before_it_is_tokenized),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
