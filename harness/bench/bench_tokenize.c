/*
 * harness/bench/bench_tokenize.c: `kvreplay bench --tokenizer`: tokenizer
 * throughput on agent-style text, for one or more vocabularies.
 *
 * The text is generated in code from an explicit seed, so every run of the
 * same seed and size measures the same bytes: JSON tool schemas, C and
 * Python code, git diffs and git status blocks, shell and test output,
 * English prose, non-Latin scripts and emoji, and volatile spans (billing
 * checksums, UUIDs, timestamps, base64 blobs with no spaces). It is valid
 * UTF-8 without U+2581, so detokenize(tokenize(text)) must give it back
 * byte for byte; the benchmark checks that too.
 *
 * Each vocabulary is timed on the whole text in one call (a prompt is
 * tokenized whole on every request), with special-token parsing on as a
 * server does; R repetitions, the best one reported. MB means 10^6 bytes.
 */

#include <jansson.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"
#include "bench_util.h"
#include "gguf.h"
#include "options.h"
#include "status.h"
#include "tokenizer.h"
#include "util.h"

#define MAX_VOCABS HX_STR_LIST_MAX

// ----------------------------------------------------------------------------
// The agent-style text generator (seeded, deterministic)

typedef struct { uint64_t s; } rng;

static uint64_t rng_next(rng *r) {   /* splitmix64 */
    uint64_t z = (r->s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static uint32_t rng_below(rng *r, uint32_t n) { return (uint32_t)(rng_next(r) % n); }

#define PICK(r, arr) (arr[rng_below(r, sizeof arr / sizeof arr[0])])

static const char *words[] = {
    "the", "file", "function", "returns", "error", "when", "request", "cache", "prefix", "token", "model",
    "server", "agent", "tool", "call", "result", "should", "because", "changed", "test", "fails", "with",
    "output", "config", "update", "path", "value", "missing", "handler", "between", "response", "first",
    "after", "before", "issue", "fix", "branch", "commit", "review", "latency", "memory", "context",
    "window", "reused", "checksum", "billing", "header", "stable", "volatile", "invalidates", "slot",
    "I", "we", "it's", "don't", "you're", "they've", "we'll", "isn't", "a", "an", "of", "to", "in", "is",
};
static const char *idents[] = {
    "kv_cache", "n_tokens", "prefill_chunk", "slot_id", "prompt_len", "ctx", "buf", "offset", "seq",
    "logits", "handle_request", "parse_args", "tokenize", "load_model", "cfg", "state", "hash", "i", "j",
};
static const char *tools[] = {"read_file", "write_file", "bash", "grep", "edit", "list_dir", "web_fetch", "run_tests"};
static const char *types[] = {"string", "integer", "boolean", "array", "object", "number"};
static const char *unicode[] = {
    "Привет, как дела?", "日本語のテキストを処理します。", "中文字符和标点，测试。", "한국어 문장입니다.",
    "Ελληνικά γράμματα", "עברית מימין לשמאל", "العربية نص", "हिन्दी पाठ", "Ünïcödé àccents naïve café",
    "🚀 deploy ✅ passed ❌ failed 🔥", "→ ← ↑ ↓ ≤ ≥ ≠ ∞ ∑ √", "emoji: 😀😶‍🌫️👍🏽", "½ ¾ ° € £ ¥ ©",
};

static void w_word(eng_buf *b, rng *r) { eng_buf_printf(b, "%s", PICK(r, words)); }

static void w_hex(eng_buf *b, rng *r, int n) {
    for (int i = 0; i < n; i++) eng_buf_printf(b, "%x", rng_below(r, 16));
}

static void w_prose(eng_buf *b, rng *r) {
    int sentences = 2 + (int)rng_below(r, 4);
    for (int s = 0; s < sentences; s++) {
        int n = 6 + (int)rng_below(r, 12);
        for (int i = 0; i < n; i++) {
            if (i) eng_buf_append(b, " ", 1);
            w_word(b, r);
            if (rng_below(r, 12) == 0) eng_buf_append(b, ",", 1);
        }
        eng_buf_printf(b, "%s", rng_below(r, 5) ? ". " : "? ");
    }
    eng_buf_append(b, "\n\n", 2);
}

static void w_schema(eng_buf *b, rng *r) {
    eng_buf_printf(b, "{\"name\": \"%s\", \"description\": \"", PICK(r, tools));
    for (int i = 0; i < 8; i++) { w_word(b, r); eng_buf_append(b, " ", 1); }
    eng_buf_printf(b, "\", \"input_schema\": {\"type\": \"object\", \"properties\": {");
    int np = 1 + (int)rng_below(r, 4);
    for (int i = 0; i < np; i++)
        eng_buf_printf(b, "%s\"%s\": {\"type\": \"%s\", \"description\": \"the %s\"}", i ? ", " : "",
                       PICK(r, idents), PICK(r, types), PICK(r, words));
    eng_buf_printf(b, "}, \"required\": [\"%s\"]}}\n", PICK(r, idents));
}

static void w_code(eng_buf *b, rng *r) {
    if (rng_below(r, 2)) {
        eng_buf_printf(b, "static int %s(const struct %s *%s, size_t %s) {\n", PICK(r, idents), PICK(r, idents),
                       PICK(r, idents), PICK(r, idents));
        int n = 3 + (int)rng_below(r, 6);
        for (int i = 0; i < n; i++)
            eng_buf_printf(b, "    if (%s->%s[%u] >= 0x%x) return -%u;  // %s %s\n", PICK(r, idents),
                           PICK(r, idents), rng_below(r, 64), rng_below(r, 65536), rng_below(r, 9), PICK(r, words),
                           PICK(r, words));
        eng_buf_printf(b, "    return 0;\n}\n\n");
    } else {
        eng_buf_printf(b, "def %s(%s, %s=None):\n", PICK(r, idents), PICK(r, idents), PICK(r, idents));
        int n = 2 + (int)rng_below(r, 5);
        for (int i = 0; i < n; i++)
            eng_buf_printf(b, "    %s = [x * %u for x in %s if x != '%s']\n", PICK(r, idents), rng_below(r, 100),
                           PICK(r, idents), PICK(r, words));
        eng_buf_printf(b, "    return {\"%s\": %s, 'ok': True}\n\n", PICK(r, idents), PICK(r, idents));
    }
}

static void w_diff(eng_buf *b, rng *r) {
    const char *f = PICK(r, idents);
    eng_buf_printf(b, "diff --git a/src/%s.c b/src/%s.c\nindex ", f, f);
    w_hex(b, r, 7);
    eng_buf_append(b, "..", 2);
    w_hex(b, r, 7);
    eng_buf_printf(b, " 100644\n--- a/src/%s.c\n+++ b/src/%s.c\n@@ -%u,7 +%u,8 @@ int %s(void)\n", f, f,
                   rng_below(r, 900), rng_below(r, 900), PICK(r, idents));
    int n = 4 + (int)rng_below(r, 6);
    for (int i = 0; i < n; i++) {
        static const char *marks[] = {" ", " ", "-", "+"};
        eng_buf_printf(b, "%s    %s = %s + %u;\n", PICK(r, marks), PICK(r, idents), PICK(r, idents),
                       rng_below(r, 1000));
    }
}

static void w_shell(eng_buf *b, rng *r) {
    switch (rng_below(r, 3)) {
    case 0:
        eng_buf_printf(b, "$ git status\nOn branch %s\nChanges not staged for commit:\n", PICK(r, idents));
        for (int i = 0; i < 3; i++) eng_buf_printf(b, "\tmodified:   src/%s.c\n", PICK(r, idents));
        eng_buf_printf(b, "\nUntracked files:\n\t%s.log\n\n", PICK(r, idents));
        break;
    case 1:
        eng_buf_printf(b, "$ ls -la\n");
        for (int i = 0; i < 4; i++)
            eng_buf_printf(b, "-rw-r--r--  1 user  staff  %6u Nov %2u 12:%02u %s.py\n", rng_below(r, 100000),
                           1 + rng_below(r, 28), rng_below(r, 60), PICK(r, idents));
        break;
    default:
        eng_buf_printf(b, "$ pytest -q\n");
        for (int i = 0; i < 3; i++)
            eng_buf_printf(b, "tests/test_%s.py::test_%s_%s %s\n", PICK(r, idents), PICK(r, words), PICK(r, words),
                           rng_below(r, 4) ? "PASSED" : "FAILED");
        eng_buf_printf(b, "==== %u passed, %u failed in %u.%02us ====\n", rng_below(r, 300), rng_below(r, 5),
                       rng_below(r, 60), rng_below(r, 100));
    }
}

static void w_volatile(eng_buf *b, rng *r) {
    eng_buf_printf(b, "x-anthropic-billing-header: cc_version=1.0.%u; cch=", rng_below(r, 90));
    w_hex(b, r, 5);
    eng_buf_printf(b, ";\nrequest_id: ");
    w_hex(b, r, 8);
    eng_buf_append(b, "-", 1);
    w_hex(b, r, 4);
    eng_buf_append(b, "-", 1);
    w_hex(b, r, 4);
    eng_buf_printf(b, " at 2025-%02u-%02uT%02u:%02u:%02uZ\n", 1 + rng_below(r, 12), 1 + rng_below(r, 28),
                   rng_below(r, 24), rng_below(r, 60), rng_below(r, 60));
    if (rng_below(r, 4) == 0) {
        static const char b64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
        int n = 200 + (int)rng_below(r, 800);
        eng_buf_printf(b, "data:image/png;base64,");
        for (int i = 0; i < n; i++) eng_buf_append(b, &b64[rng_below(r, 64)], 1);
        eng_buf_append(b, "==\n", 3);
    }
}

/* Appends agent-style text to b until it holds at least `bytes`, then cuts it
 * back to exactly `bytes` at a UTF-8 character boundary (or just below). */
static int make_agent_text(eng_buf *b, size_t bytes, uint64_t seed) {
    rng r = {seed};
    while (b->len < bytes) {
        switch (rng_below(&r, 8)) {
        case 0: w_schema(b, &r); break;
        case 1: case 2: w_code(b, &r); break;
        case 3: w_diff(b, &r); break;
        case 4: w_shell(b, &r); break;
        case 5: w_volatile(b, &r); break;
        case 6: eng_buf_printf(b, "%s\n", PICK(&r, unicode)); break;
        default: w_prose(b, &r); break;
        }
        if (!b->data) return ENG_ERR_NOMEM;
    }
    size_t n = bytes;
    while (n > 0 && ((unsigned char)b->data[n] & 0xC0) == 0x80) n--;   /* n is a boundary */
    b->len = n;
    b->data[n] = '\0';
    return ENG_OK;
}

// ----------------------------------------------------------------------------
// The benchmark

static const char k_usage[] =
    "usage: kvreplay bench --tokenizer -m VOCAB.gguf [-m VOCAB2.gguf ...] [OPTIONS]\n"
    "\n"
    "Tokenizer throughput on seeded agent-style text (JSON tool schemas, code, git diffs,\n"
    "shell output, prose, unicode, checksums, base64), the whole text in one call with\n"
    "special-token parsing on; also checks that detokenize gives the text back exactly.\n"
    "\n";

typedef struct tok_args {
    hx_str_list vocabs;
    double     mb;
    int64_t    seed;
    int32_t    reps;
    bool       json, self;
} tok_args;

#define OPT(field) offsetof(tok_args, field)
static const hx_option k_options[] = {
    {"--tokenizer", NULL, NULL, NULL, HX_OPT_FLAG, OPT(self), 0, 0, NULL},
    {"--model", "-m", "FILE", "a GGUF file with tokenizer.ggml.* metadata (repeatable)", HX_OPT_STRINGS, OPT(vocabs), 0,
     0, NULL},
    {"--mb", NULL, "N", "text size in MB of 10^6 bytes (default 1)", HX_OPT_DOUBLE, OPT(mb), 0.001, 1024, NULL},
    {"--seed", NULL, "S", "text seed (default 1)", HX_OPT_INT64, OPT(seed), 0, INT64_MAX, NULL},
    {"--reps", NULL, "R", "timed repetitions, the best reported (default 3)", HX_OPT_INT, OPT(reps), 1, 1000, NULL},
    {"--json", NULL, NULL, "print one JSON object instead of text", HX_OPT_FLAG, OPT(json), 0, 0, NULL},
    {0},
};

/* One vocabulary on the text: its line (or JSON entry into jv); *exact false
 * when detokenize did not give the text back. */
static int bench_vocab(const char *path, const eng_buf *text, int reps, bool json, json_t *jv, bool *exact,
                       char *err, size_t errlen) {
    eng_gguf *g = NULL;
    eng_tokenizer *t = NULL;
    int32_t *ids = NULL;
    char *back = NULL;
    int rc = eng_gguf_open(path, &g, err, errlen);
    if (rc == ENG_OK) rc = eng_tokenizer_load(g, &t, err, errlen);
    eng_gguf_close(g);
    if (rc != ENG_OK) {  /* the file the user named */
        rc = rc == ENG_ERR_NOMEM ? rc : ENG_ERR_ARG;
        goto out;
    }
    int32_t cap = (int32_t)text->len + 16;
    ids = malloc((size_t)cap * sizeof *ids);
    back = malloc(text->len + 1);
    if (!ids || !back) {
        rc = (eng_errf(err, errlen, "out of memory"), ENG_ERR_NOMEM);
        goto out;
    }
    double best_tok = 1e30, best_detok = 1e30;
    int32_t n = 0;
    int64_t nb = 0;
    for (int r = 0; r < reps; r++) {
        double t0 = eng_now_s();
        n = eng_tokenize(t, text->data, text->len, false, false, true, ids, cap, NULL);
        double t1 = eng_now_s();
        if (n < 0) {  /* more tokens than cap */
            rc = (eng_errf(err, errlen, "%s: tokenize failed (%d)", path, n), ENG_ERR_RANGE);
            goto out;
        }
        nb = eng_detokenize(t, ids, n, true, back, text->len + 1);
        double t2 = eng_now_s();
        if (t1 - t0 < best_tok) best_tok = t1 - t0;
        if (t2 - t1 < best_detok) best_detok = t2 - t1;
    }
    *exact = nb == (int64_t)text->len && memcmp(back, text->data, text->len) == 0;
    double mbs = (double)text->len / 1e6 / best_tok, tps = n / best_tok;
    double dmbs = (double)text->len / 1e6 / best_detok;
    const char *type = eng_tokenizer_type_name(t);
    const char *pre = eng_tokenizer_pre(t);
    if (json) {
        json_array_append_new(jv, json_pack("{s:s, s:s, s:s, s:i, s:I, s:f, s:f, s:f, s:f, s:b}", "path", path,
                                            "type", type, "pre", pre, "n_vocab", (int)eng_tokenizer_n_vocab(t), "tokens",
                                            (json_int_t)n, "tokenize_s", best_tok, "tokenize_mb_s", mbs,
                                            "tokens_s", tps, "detokenize_mb_s", dmbs, "roundtrip_exact", *exact));
    } else {
        printf("%-40s %-5s %-16s %8d tokens  tokenize %7.2f MB/s  %9.0f tokens/s  detokenize %7.1f MB/s  round trip %s\n",
               path, type, pre[0] ? pre : "-", n, mbs, tps, dmbs, *exact ? "exact" : "DIFFERS");
    }
out:
    free(ids);
    free(back);
    eng_tokenizer_free(t);
    return rc;
}

int hx_bench_tokenizer(int argc, char **argv, char *err, size_t errlen) {
    if (hx_wants_help(argc, argv)) { hx_usage(stdout, k_usage, k_options); return ENG_OK; }
    tok_args a = {.mb = 1.0, .seed = 1, .reps = 3};
    int rc = hx_bench_args(k_options, &a, argc, argv, "bench --tokenizer", err, errlen);
    if (rc) return rc;
    const uint64_t seed = (uint64_t)a.seed;
    if (a.vocabs.n == 0) return eng_errf(err, errlen, "bench --tokenizer: -m VOCAB.gguf is required"), ENG_ERR_ARG;

    eng_buf text = {0};
    json_t *jv = NULL;
    bool all_exact = true;
    if ((rc = make_agent_text(&text, (size_t)(a.mb * 1e6), seed)) != ENG_OK || !(jv = json_array())) {
        rc = (eng_errf(err, errlen, "out of memory"), ENG_ERR_NOMEM);
        goto out;
    }
    if (!a.json)
        printf("tokenizer bench: %zu bytes of agent-style text (seed %llu), best of %d, 1 thread\n", text.len,
               (unsigned long long)seed, a.reps);
    for (int k = 0; k < a.vocabs.n && !rc; k++) {
        bool exact = false;
        rc = bench_vocab(a.vocabs.v[k], &text, a.reps, a.json, jv, &exact, err, errlen);
        all_exact = all_exact && exact;
    }
    if (rc) goto out;
    if (a.json) {
        json_t *o = json_pack("{s:I, s:I, s:i, s:i, s:O}", "bytes", (json_int_t)text.len, "seed", (json_int_t)seed,
                              "reps", a.reps, "threads", 1, "vocabs", jv);
        char *s = o ? json_dumps(o, JSON_COMPACT) : NULL;
        json_decref(o);
        if (!s) {
            rc = (eng_errf(err, errlen, "out of memory"), ENG_ERR_NOMEM);
            goto out;
        }
        printf("%s\n", s);
        free(s);
    }
    if (!all_exact) rc = (eng_errf(err, errlen, "bench --tokenizer: a round trip differed"), ENG_ERR_MISMATCH);
    else rc = hx_bench_flush("bench --tokenizer", err, errlen);
out:
    json_decref(jv);
    eng_buf_free(&text);
    return rc;
}
