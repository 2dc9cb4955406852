/*
 * tests/fuzz/targets.c: the fuzz targets (see targets.h for what each one
 * feeds and checks). Shared fixtures are made once by kvr_fuzz_init: the
 * tiny synthetic model of every architecture (written to a scratch
 * directory, since eng_model_load takes a path), the real vocabularies for
 * the tokenizer targets (../shared/data, or $KVR_SHARED_DATA), and a
 * scratch cache directory. A broken promise calls fuzz_fail, which prints
 * what broke and aborts (libFuzzer keeps the input as a crash).
 */
#include "targets.h"

#include <dirent.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include "api.h"
#include "diskcache.h"
#include "gguf.h"
#include "import.h"
#include "importer.h"
#include "model.h"
#include "policy.h"
#include "prepare.h"
#include "status.h"
#include "synth.h"
#include "tokenizer.h"
#include "trace.h"
#include "transcript.h"
#include "util.h"

// ----------------------------------------------------------------------------
// Shared fixtures

/* One fixture per synthetic architecture (engine/synth.h's registry, so a new
 * layer kind is fuzzed too), at most MAX_ARCH. */
#define MAX_ARCH 8

/* Vocabularies for the tokenizer targets, by kind; absent files are skipped. */
static const char *const k_spm_files[] = {"vocab/ggml-vocab-llama-spm.gguf", "vocab/ggml-vocab-phi-3.gguf", NULL};
static const char *const k_bpe_files[] = {"vocab/ggml-vocab-gpt-2.gguf", "vocab/ggml-vocab-mpt.gguf", NULL};

#define CTX 1024           /* positions of every sequence here */
#define CKPT_TOKENS 1100   /* the prompt the checkpoint target looks up */

static struct {
    bool           ready;
    char           dir[64];             /* scratch: models, the cache directory */
    eng_model     *model[MAX_ARCH];     /* tiny preset of each architecture, blas fp32 1 thread */
    eng_seq       *seq[MAX_ARCH];
    int            n_arch;
    eng_tokenizer *spm[4], *bpe[4];
    int            n_spm, n_bpe;
    const eng_tokenizer *byte_tok;      /* the built-in byte vocabulary (model[0]'s) */
    char           cache_dir[96];
    int32_t        ckpt_tokens[CKPT_TOKENS];
} F;

static void fuzz_fail(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));
static void fuzz_fail(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fputs("kvr-fuzz: broken promise: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    abort();
}

static const char *shared_dir(void) {
    const char *d = getenv("KVR_SHARED_DATA");
    return d && *d ? d : "../shared/data";
}

static int load_vocab(const char *rel, eng_tokenizer **out) {
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", shared_dir(), rel);
    if (access(path, R_OK) != 0) return -1;
    eng_gguf *g = NULL;
    char err[512];
    int rc = eng_gguf_open(path, &g, err, sizeof err);
    if (rc == ENG_OK) rc = eng_tokenizer_load(g, out, err, sizeof err);
    eng_gguf_close(g);
    return rc == ENG_OK ? 0 : -1;
}

static void remove_tree(const char *dir) {
    DIR *d = opendir(dir);
    if (!d) return;
    for (struct dirent *e; (e = readdir(d));) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
        char p[512];
        snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
        struct stat sb;
        if (lstat(p, &sb) == 0 && S_ISDIR(sb.st_mode)) remove_tree(p);
        else unlink(p);
    }
    closedir(d);
    rmdir(dir);
}

static void fixtures_free(void) {
    for (int a = 0; a < F.n_arch; a++) {
        eng_seq_free(F.seq[a]);
        eng_model_free(F.model[a]);
    }
    for (int i = 0; i < F.n_spm; i++) eng_tokenizer_free(F.spm[i]);
    for (int i = 0; i < F.n_bpe; i++) eng_tokenizer_free(F.bpe[i]);
    if (F.dir[0]) remove_tree(F.dir);
    memset(&F, 0, sizeof F);
}

void kvr_fuzz_init(void) {
    if (F.ready) return;
    snprintf(F.dir, sizeof F.dir, "/tmp/kvr_fuzz_XXXXXX");
    if (!mkdtemp(F.dir)) fuzz_fail("cannot create a scratch directory under /tmp");
    char err[512];
    for (int a = 0; eng_synth_arch_name(a) && a < MAX_ARCH; a++, F.n_arch++) {
        const char *arch = eng_synth_arch_name(a);
        eng_synth_params p = eng_synth_preset_arch(arch, "tiny");
        p.seed = 14;
        char path[160];
        snprintf(path, sizeof path, "%s/%s.gguf", F.dir, arch);
        eng_numerics num = eng_numerics_default();
        if (eng_synth_write(&p, path, err, sizeof err) != ENG_OK ||
            eng_model_load(path, &num, &F.model[a], err, sizeof err) != ENG_OK ||
            !(F.seq[a] = eng_seq_new(F.model[a], CTX)))
            fuzz_fail("fixture model %s: %s", arch, err);
    }
    F.byte_tok = eng_model_tokenizer(F.model[0]);
    for (int i = 0; k_spm_files[i] && F.n_spm < 4; i++)
        if (load_vocab(k_spm_files[i], &F.spm[F.n_spm]) == 0) F.n_spm++;
    for (int i = 0; k_bpe_files[i] && F.n_bpe < 4; i++)
        if (load_vocab(k_bpe_files[i], &F.bpe[F.n_bpe]) == 0) F.n_bpe++;
    snprintf(F.cache_dir, sizeof F.cache_dir, "%s/kv", F.dir);
    int32_t V = eng_model_get_info(F.model[0])->n_vocab;
    uint64_t s = 14;
    for (int i = 0; i < CKPT_TOKENS; i++) {
        s = s * 6364136223846793005ULL + 1442695040888963407ULL;
        F.ckpt_tokens[i] = (int32_t)((s >> 33) % (uint64_t)V);
    }
    F.ready = true;
    atexit(fixtures_free);
}

// ----------------------------------------------------------------------------
// gguf: the reader, every getter, and the tokenizer loader

static void run_gguf(const uint8_t *data, size_t size, int arg) {
    (void)arg;
    eng_gguf *g = NULL;
    char err[512];
    if (eng_gguf_open_buffer(data, size, "fuzz.gguf", &g, err, sizeof err) != ENG_OK) {
        if (g) fuzz_fail("gguf: a failed open returned a handle");
        if (!err[0]) fuzz_fail("gguf: a failed open said nothing");
        return;
    }
    for (int64_t i = 0; i < eng_gguf_n_kv(g); i++) {
        const char *key = eng_gguf_key(g, i);
        if (!key || eng_gguf_find_key(g, key) < 0) fuzz_fail("gguf: key %lld not found by its name", (long long)i);
        int64_t iv;
        uint64_t uv;
        double dv;
        bool bv;
        const char *sv;
        size_t sl;
        eng_gguf_get_int(g, key, &iv);
        eng_gguf_get_uint64(g, key, &uv);
        eng_gguf_get_float(g, key, &dv);
        eng_gguf_get_bool(g, key, &bv);
        eng_gguf_get_str(g, key, &sv, &sl);
        if (eng_gguf_kv_type(g, i) != ENG_GGUF_TYPE_ARRAY) continue;
        uint64_t n = eng_gguf_arr_n(g, i);
        uint32_t t = eng_gguf_arr_type(g, i);
        for (uint64_t j = 0; j < n && j < 64; j++) {
            if (t == ENG_GGUF_TYPE_STRING) eng_gguf_get_arr_str(g, i, j, &sv, &sl);
            else if (t != ENG_GGUF_TYPE_ARRAY) eng_gguf_get_arr_num(g, i, j);
        }
    }
    for (int64_t i = 0; i < eng_gguf_n_tensors(g); i++) {
        const eng_gguf_tensor *t = eng_gguf_tensor_at(g, i);
        if (!t || eng_gguf_find_tensor(g, t->name) == NULL) fuzz_fail("gguf: tensor %lld not found by name", (long long)i);
        const uint8_t *p = t->data;
        if (t->nbytes && (p < data || p + t->nbytes > data + size)) fuzz_fail("gguf: tensor %s outside the file", t->name);
        if (t->nbytes && eng_ggml_type_known(t->type) && t->ne[0] > 0) {
            int64_t n = t->ne[0] < 256 ? t->ne[0] : 0;  /* a first row, when it is whole blocks */
            if (n && eng_ggml_row_size(t->type, n) && eng_ggml_row_size(t->type, n) <= t->nbytes) {
                float row[256];
                eng_ggml_to_f32(t->type, t->data, row, n);
            }
        }
    }
    eng_tokenizer *tok = NULL;
    if (eng_tokenizer_load(g, &tok, err, sizeof err) == ENG_OK) {
        static const char text[] = "Hello world! <s> 12 \xe2\x96\x81x\n\tdone";
        int32_t ids[128];
        int32_t n = eng_tokenize(tok, text, sizeof text - 1, true, false, true, ids, 128, NULL);
        int32_t V = eng_tokenizer_n_vocab(tok);
        for (int32_t i = 0; i < n; i++)
            if (ids[i] < 0 || ids[i] >= V) fuzz_fail("gguf: token id %d outside the vocabulary (%d)", ids[i], V);
        if (n > 0) {
            char out[512];
            eng_detokenize(tok, ids, n, true, out, sizeof out);
        }
        eng_tokenizer_free(tok);
    }
    eng_gguf_close(g);
}

// ----------------------------------------------------------------------------
// model: the loader on the bytes as a file, then a little compute

static void run_model(const uint8_t *data, size_t size, int arg) {
    (void)arg;
    int fd = memfd_create("kvr-fuzz-model", MFD_CLOEXEC);
    if (fd < 0) fuzz_fail("memfd_create failed");
    if (size && eng_write_all(fd, data, size) != 0) fuzz_fail("memfd write failed");
    char path[64];
    snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
    eng_numerics num = eng_numerics_default();
    eng_model *m = NULL;
    char err[512];
    if (eng_model_load(path, &num, &m, err, sizeof err) == ENG_OK) {
        const eng_model_info *in = eng_model_get_info(m);
        if (in->n_vocab < 1 || in->n_layer < 1 || in->n_embd < 1) fuzz_fail("model: accepted an empty shape");
        eng_seq *s = eng_seq_new(m, 8);
        float *logits = malloc(sizeof(float) * (size_t)in->n_vocab);
        if (s && logits) {
            int32_t toks[3] = {0, 1 % in->n_vocab, 2 % in->n_vocab};
            eng_prefill_params pp = eng_prefill_params_default();
            if (eng_prefill(s, toks, 3, &pp, logits) != ENG_OK) fuzz_fail("model: prefill of a loaded model failed");
            if (eng_decode(s, eng_argmax(logits, in->n_vocab), logits) != ENG_OK) fuzz_fail("model: decode failed");
        }
        free(logits);
        eng_seq_free(s);
        eng_model_free(m);
    } else if (m) {
        fuzz_fail("model: a failed load returned a model");
    }
    close(fd);
}

// ----------------------------------------------------------------------------
// tokenize-spm, tokenize-bpe: byte 0 = flags (bit 0 BOS, bit 1 EOS, bit 2
// special) and the vocabulary (bits 4..7), the rest is the text

static bool valid_utf8(const uint8_t *s, size_t n) {
    for (size_t i = 0; i < n;) {
        uint8_t c = s[i];
        size_t k = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
        if (!k || i + k > n || c == 0) return false;
        uint32_t cp = k == 1 ? c : k == 2 ? c & 0x1f : k == 3 ? c & 0x0f : c & 0x07;
        for (size_t j = 1; j < k; j++) {
            if ((s[i + j] & 0xc0) != 0x80) return false;
            cp = (cp << 6) | (s[i + j] & 0x3f);
        }
        if ((k == 2 && cp < 0x80) || (k == 3 && cp < 0x800) || (k == 4 && (cp < 0x10000 || cp > 0x10ffff)) ||
            (cp >= 0xd800 && cp <= 0xdfff))
            return false;
        i += k;
    }
    return true;
}

static void run_tokenize(const uint8_t *data, size_t size, int kind) {
    eng_tokenizer *const *toks = kind == ENG_VOCAB_SPM ? F.spm : F.bpe;
    int n_toks = kind == ENG_VOCAB_SPM ? F.n_spm : F.n_bpe;
    if (size < 1 || n_toks == 0) return;
    const eng_tokenizer *t = toks[(data[0] >> 4) % n_toks];
    bool bos = data[0] & 1, eos = data[0] & 2, special = data[0] & 4;
    const char *text = (const char *)data + 1;
    size_t len = size - 1;
    int32_t cap = (int32_t)len + 8;
    int32_t *ids = malloc(sizeof(int32_t) * (size_t)cap), *off = malloc(sizeof(int32_t) * (size_t)cap);
    if (!ids || !off) fuzz_fail("out of memory");
    int32_t n = eng_tokenize(t, text, len, bos, eos, special, ids, cap, off);
    if (n < 0) {  /* more tokens than bytes (a space with no piece of its own falls back to 3 byte tokens) */
        int32_t need = -n;
        cap = need;
        int32_t *ids2 = realloc(ids, sizeof(int32_t) * (size_t)cap), *off2 = realloc(off, sizeof(int32_t) * (size_t)cap);
        if (!ids2 || !off2) fuzz_fail("out of memory");
        ids = ids2;
        off = off2;
        n = eng_tokenize(t, text, len, bos, eos, special, ids, cap, off);
        if (n != need) fuzz_fail("tokenize: asked for %d tokens' room, then gave %d", need, n);
    }
    int32_t V = eng_tokenizer_n_vocab(t);
    for (int32_t i = 0; i < n; i++) {
        if (ids[i] < 0 || ids[i] >= V) fuzz_fail("tokenize: id %d outside the vocabulary (%d)", ids[i], V);
        if (off[i] < 0 || (size_t)off[i] > len || (i && off[i] < off[i - 1]))
            fuzz_fail("tokenize: offset %d of token %d out of order or range", off[i], i);
    }
    /* the exact inverse without BOS/EOS, for valid UTF-8 without special-token parsing; SentencePiece
     * writes a space as U+2581, so a U+2581 of the text comes back as a space (as in llama.cpp) */
    bool lower_one_eighth = kind == ENG_VOCAB_SPM && memmem(text, len, "\xe2\x96\x81", 3);
    if (!bos && !eos && !special && !lower_one_eighth && valid_utf8((const uint8_t *)text, len)) {
        size_t ocap = len * 4 + 16;
        char *back = malloc(ocap);
        if (!back) fuzz_fail("out of memory");
        int64_t m = eng_detokenize(t, ids, n, false, back, ocap);
        if (m < 0 || (size_t)m != len || memcmp(back, text, len) != 0)
            fuzz_fail("detokenize(tokenize(x)) != x for %zu bytes of valid UTF-8 (got %lld bytes)", len, (long long)m);
        free(back);
    }
    free(ids);
    free(off);
}

// ----------------------------------------------------------------------------
// transcript: parse, serialize, parse back, render and tokenize

static void check_round_trip(const hx_transcript *t, const char *what) {
    char *text = NULL;
    size_t n = 0;
    char err[512];
    if (hx_transcript_serialize(t, &text, &n, err, sizeof err) != ENG_OK)
        fuzz_fail("%s: an accepted transcript does not serialize: %s", what, err);
    hx_transcript u;
    if (hx_transcript_parse(text, n, "round-trip.jsonl", false, &u, NULL, err, sizeof err) != ENG_OK)
        fuzz_fail("%s: a serialized transcript does not parse back: %s", what, err);
    if (u.n != t->n) fuzz_fail("%s: %d requests, %d after a round trip", what, t->n, u.n);
    for (int32_t i = 0; i < t->n; i++)
        if (!hx_request_equal(&t->reqs[i], &u.reqs[i])) fuzz_fail("%s: request %d differs after a round trip", what, i);
    hx_transcript_free(&u);
    free(text);
}

static void render_all(hx_transcript *t) {
    hx_prepare_ctx *pc = NULL;
    char err[512];
    if (hx_prepare_ctx_new(F.byte_tok, "chatml", NULL, "anthropic-cch", &pc, err, sizeof err) != ENG_OK)
        fuzz_fail("prepare context: %s", err);
    for (int32_t i = 0; i < t->n; i++) {
        hx_prepared p;
        if (hx_prepare(pc, &t->reqs[i], &p, err, sizeof err) == ENG_OK) {
            if (p.n < 0 || (p.n && !p.tokens)) fuzz_fail("prepare: %d tokens", p.n);
            if (p.stable_end > p.n) fuzz_fail("prepare: stable_end %d past %d tokens", p.stable_end, p.n);
            if (p.n) {
                char where[128];
                hx_prepared_where(&p, p.offsets[p.n - 1], where, sizeof where);
            }
            hx_prepared_free(&p);
        }
    }
    hx_prepare_ctx_free(pc);
}

static void run_transcript(const uint8_t *data, size_t size, int arg) {
    (void)arg;
    for (int skip = 0; skip < 2; skip++) {
        hx_transcript t;
        int64_t skipped = 0;
        char err[512] = "";
        int rc = hx_transcript_parse((const char *)data, size, "fuzz.jsonl", skip, &t, &skipped, err, sizeof err);
        if (rc != ENG_OK) {
            if (!err[0]) fuzz_fail("transcript: a failed parse said nothing");
            continue;
        }
        check_round_trip(&t, "transcript");
        if (!skip && size <= 65536) render_all(&t);
        hx_transcript_free(&t);
    }
}

// ----------------------------------------------------------------------------
// import-NAME: one registered importer, both --skip-bad modes

static void run_import(const uint8_t *data, size_t size, int f) {
    for (int skip = 0; skip < 2; skip++) {
        hx_import_opts o = {0};
        o.format = (hx_import_format)f;
        o.skip_bad = skip;
        hx_transcript t;
        int64_t skipped = 0;
        char err[512] = "";
        int rc = hx_import_buffer(&o, "fuzz.jsonl", (const char *)data, size, &t, &skipped, err, sizeof err);
        if (rc != ENG_OK) {
            if (rc != ENG_ERR_NOMEM && !err[0]) fuzz_fail("import %s: a failed import said nothing", hx_importers[f]->name);
            continue;
        }
        check_round_trip(&t, hx_importers[f]->name);
        hx_transcript_free(&t);
    }
}

// ----------------------------------------------------------------------------
// api-NAME: every route of one dialect of the API layer, both directions:
// the bytes as a request body (server side: an accepted request sends and
// parses back equal), as a response body and as an SSE stream fed in two
// pieces (client side), and as an error body

static void run_api(const uint8_t *data, size_t size, int d) {
    const hx_api_dialect *dl = hx_api_dialects[d];
    const char *body = (const char *)data;
    for (const hx_api_route *rt = dl->routes; rt->path; rt++) {
        char path[128];
        snprintf(path, sizeof path, "%s", rt->path);
        size_t L = strlen(path);
        if (L && path[L - 1] == '*') snprintf(path + L - 1, sizeof path - (L - 1), "%u", size ? data[0] % 4u : 0u);
        else if (strchr(path, '*') && hx_api_route_target(rt, "m", path, sizeof path) == ENG_OK)
            path[strcspn(path, "?")] = '\0';  /* the model in the path; its query goes as the query */
        hx_api_error e;
        if (rt->parse) {
            hx_api_req q;
            memset(&e, 0, sizeof e);
            const char *query = rt->query ? rt->query : size > 1 && data[1] & 1 ? "action=erase" : "action=save";
            int rc = rt->parse(rt, path, query, body, size, &q, &e);
            if (rc != ENG_OK) {
                if (rc != ENG_ERR_NOMEM && (!e.message[0] || e.status < 400)) fuzz_fail("%s %s: a refusal said nothing", rt->method, rt->path);
            } else {
                if (rt->request) {  /* the request sends and parses back equal */
                    json_t *j = rt->request(&q);
                    char *again = j ? json_dumps(j, JSON_COMPACT) : NULL;
                    json_decref(j);
                    if (!again) fuzz_fail("%s: the request did not serialize", rt->path);
                    hx_api_req b;
                    if (rt->parse(rt, path, rt->query ? rt->query : "action=erase", again, strlen(again), &b, &e) != ENG_OK)
                        fuzz_fail("%s: the request it sends does not parse: %s\n%s", rt->path, e.message, again);
                    if (!hx_request_equal(&q.req, &b.req)) fuzz_fail("%s: the request changed on its round trip\n%s", rt->path, again);
                    hx_api_req_free(&b);
                    free(again);
                }
                hx_api_req_free(&q);
            }
        }
        if (rt->read) {
            hx_api_result r;
            if (rt->read(rt, body, size, &r, &e) == ENG_OK) hx_api_result_free(&r);
        }
        if (rt->stream_read) {
            hx_api_reader rd;
            hx_api_reader_init(&rd, rt);
            hx_api_result r;
            hx_api_result_init(&r);
            size_t half = size / 2;
            if (hx_api_reader_feed(&rd, body, half, &r, &e) >= 0 && hx_api_reader_feed(&rd, body + half, size - half, &r, &e) >= 0)
                hx_api_reader_finish(&rd, &r, &e);
            hx_api_reader_free(&rd);
            hx_api_result_free(&r);
        }
    }
    hx_api_error e;
    hx_api_read_error(dl, body, size, 400, &e);
}

// ----------------------------------------------------------------------------
// checkpoint: the bytes as a checkpoint file in a cache directory

static void put_u64(uint8_t *p, uint64_t v) {
    for (int i = 0; i < 8; i++) p[i] = (uint8_t)(v >> (8 * i));
}
static uint64_t get_u64(const uint8_t *p) {
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--) v = (v << 8) | p[i];
    return v;
}
static uint32_t get_u32(const uint8_t *p) { return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24; }

static const char *check_state(void *ctx, const void *payload, size_t n, int32_t n_tokens) {
    eng_seq *s = ctx;
    if (eng_seq_deserialize(s, payload, n) != ENG_OK) return "state blob";
    return eng_seq_n_tokens(s) == n_tokens ? NULL : "state length";
}

static void run_checkpoint(const uint8_t *data, size_t size, int arg) {
    (void)arg;
    if (size < 1) return;
    bool reseal = data[0] & 0x80;
    size_t n = size - 1;
    uint8_t *file = malloc(n ? n : 1);
    if (!file) fuzz_fail("out of memory");
    memcpy(file, data + 1, n);
    uint64_t fp = eng_model_fingerprint(F.model[0]);
    int32_t nt = 64;
    if (n >= HX_DISKCACHE_HEADER_SIZE) {
        int32_t h = (int32_t)get_u32(file + HX_DISKCACHE_OFF_N_TOKENS);
        if (reseal) {
            nt = h >= 1 && h < CKPT_TOKENS ? h : 1 + (int32_t)((uint32_t)h % (CKPT_TOKENS - 1));
            uint64_t ph[2];
            hx_diskcache_key(fp, F.ckpt_tokens, nt, ph, NULL, NULL);
            for (int i = 0; i < 4; i++) file[HX_DISKCACHE_OFF_N_TOKENS + i] = (uint8_t)((uint32_t)nt >> (8 * i));
            put_u64(file + HX_DISKCACHE_OFF_FINGERPRINT, fp);
            put_u64(file + HX_DISKCACHE_OFF_PREFIX_HASH, ph[0]);
            put_u64(file + HX_DISKCACHE_OFF_PREFIX_HASH + 8, ph[1]);
            put_u64(file + HX_DISKCACHE_OFF_PAYLOAD_SIZE, n - HX_DISKCACHE_HEADER_SIZE);
            put_u64(file + HX_DISKCACHE_OFF_PAYLOAD_SUM,
                    XXH3_64bits(file + HX_DISKCACHE_HEADER_SIZE, n - HX_DISKCACHE_HEADER_SIZE));
            put_u64(file + HX_DISKCACHE_OFF_HEADER_SUM, XXH3_64bits(file, HX_DISKCACHE_OFF_HEADER_SUM));
        } else {
            nt = h;
            fp = get_u64(file + HX_DISKCACHE_OFF_FINGERPRINT);
        }
    }
    /* the file name its header claims (for valid tokens), so the header checks run */
    char name[40];
    hx_diskcache_key(fp, F.ckpt_tokens, nt >= 1 && nt < CKPT_TOKENS ? nt : 64, NULL, NULL, name);
    remove_tree(F.cache_dir);
    if (mkdir(F.cache_dir, 0755) != 0) fuzz_fail("cannot create %s", F.cache_dir);
    char path[256];
    snprintf(path, sizeof path, "%s/%s", F.cache_dir, name);
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0 || (n && eng_write_all(fd, file, n) != 0)) fuzz_fail("cannot write %s", path);
    close(fd);
    free(file);
    hx_diskcache *dc = NULL;
    char err[512];
    if (hx_diskcache_open(F.cache_dir, 1 << 30, &dc, err, sizeof err) != ENG_OK)
        fuzz_fail("checkpoint: open of a directory with one file failed: %s", err);
    for (int round = 0; round < 2; round++) {
        hx_diskcache_hit hit;
        eng_seq_reset(F.seq[0]);
        int rc = hx_diskcache_lookup_checked(dc, eng_model_fingerprint(F.model[0]), F.ckpt_tokens, CKPT_TOKENS,
                                             CTX, check_state, F.seq[0], &hit, err, sizeof err);
        if (rc != ENG_OK) fuzz_fail("checkpoint: lookup failed: %s", err);
        if (hit.n_tokens > 0 && (eng_seq_n_tokens(F.seq[0]) != hit.n_tokens || !hit.payload))
            fuzz_fail("checkpoint: a hit of %d tokens without its state", hit.n_tokens);
        hx_diskcache_hit_free(&hit);
    }
    hx_diskcache_stats st = hx_diskcache_get_stats(dc);
    if (st.hits + st.misses != 2) fuzz_fail("checkpoint: two lookups counted as %lld", (long long)(st.hits + st.misses));
    hx_diskcache_close(dc);
}

// ----------------------------------------------------------------------------
// state: byte 0 picks the model (bits 0..2, modulo the architectures) and
// asks for a reseal (bit 7)

static void run_state(const uint8_t *data, size_t size, int arg) {
    (void)arg;
    if (size < 1) return;
    int a = (data[0] & 7) % F.n_arch;
    size_t n = size - 1;
    uint8_t *blob = malloc(n ? n : 1);
    if (!blob) fuzz_fail("out of memory");
    memcpy(blob, data + 1, n);
    if ((data[0] & 0x80) && n >= 32) {
        put_u64(blob + 8, eng_model_fingerprint(F.model[a]));
        put_u64(blob + n - 8, XXH3_64bits(blob, n - 8));
    }
    eng_seq *s = F.seq[a];
    eng_seq_reset(s);
    if (eng_seq_deserialize(s, blob, n) == ENG_OK) {
        size_t cap = eng_seq_serialized_size(s), w = 0;
        uint8_t *again = malloc(cap ? cap : 1);
        if (!again) fuzz_fail("out of memory");
        if (eng_seq_serialize(s, again, cap, &w) != ENG_OK) fuzz_fail("state: an accepted blob does not serialize");
        if (w != n || memcmp(again, blob, n) != 0)
            fuzz_fail("state: an accepted blob of %zu bytes serializes back to %zu other bytes", n, w);
        free(again);
        int32_t nt = eng_seq_n_tokens(s);
        int32_t V = eng_model_get_info(F.model[a])->n_vocab;
        if (nt < CTX && eng_decode(s, nt % V, NULL) != ENG_OK) fuzz_fail("state: decode after a restore failed");
    }
    free(blob);
}

// ----------------------------------------------------------------------------
// trace-mooncake, trace-bailian: the bytes as a trace file of that format,
// read with --repeat 2; every record accepted must keep the reader's promises,
// and goes through block-hash and radix caches of 8 blocks whose invariants
// are checked

static void run_trace(const uint8_t *data, size_t size, int arg) {
    FILE *f = fmemopen((void *)data, size ? size : 1, "r");
    if (!f) fuzz_fail("fmemopen failed");
    if (!size) {  /* fmemopen of 0 bytes is not portable: an empty file instead */
        fclose(f);
        f = fopen("/dev/null", "r");
    }
    hx_trace_opts o = {.format = (hx_trace_format)arg, .repeat = 2};
    hx_trace *t = NULL;
    char err[512] = "";
    if (hx_trace_open_file(f, "fuzz.jsonl", &o, &t, err, sizeof err) != ENG_OK) fuzz_fail("trace: open: %s", err);
    hx_sim_policy *p[2] = {NULL, NULL};
    const char *names[2] = {"block-hash", "radix"};
    hx_trace_rec r;
    int rc;
    double last = 0;
    int64_t n = 0;
    while ((rc = hx_trace_next(t, &r, err, sizeof err)) == 1) {
        int32_t B = hx_trace_block_tokens(t);
        if (r.n_blocks < 1 || (int64_t)(r.n_blocks - 1) * B >= r.input_length || r.input_length > (int64_t)r.n_blocks * B)
            fuzz_fail("trace: accepted %d blocks for %d tokens", r.n_blocks, r.input_length);
        if (r.t_ms < last || r.output_length < 0) fuzz_fail("trace: accepted a timestamp back in time");
        for (int32_t i = 0; i < r.n_blocks; i++)
            if (r.ids[i] < 0 || r.words[2 * i] != (int32_t)(uint32_t)r.ids[i]) fuzz_fail("trace: ids and words differ");
        if (r.index != n++) fuzz_fail("trace: index %lld, expected %lld", (long long)r.index, (long long)(n - 1));
        last = r.t_ms;
        for (int k = 0; k < 2; k++) {
            if (!p[k]) {
                hx_sim_config cfg = {.block_tokens = B, .capacity_tokens = 8LL * B, .evict = (hx_evict_kind)(n % 4)};
                if (hx_sim_policy_create(names[k], &cfg, NULL, &p[k], err, sizeof err) != ENG_OK)
                    fuzz_fail("trace: %s: %s", names[k], err);
            }
            hx_sim_req q = {.words = r.words, .n_blocks = r.n_blocks, .n_tokens = r.input_length, .index = r.index};
            hx_sim_access a;
            if (p[k]->sim->access(p[k]->state, &q, &a) != ENG_OK) fuzz_fail("trace: %s: access failed", names[k]);
            if (a.hit_blocks < 0 || a.hit_blocks > r.n_blocks || a.held_blocks > 8)
                fuzz_fail("trace: %s: hit %d of %d blocks, %lld held", names[k], a.hit_blocks, r.n_blocks,
                          (long long)a.held_blocks);
            if (p[k]->sim->check(p[k]->state, err, sizeof err) != ENG_OK) fuzz_fail("trace: %s: %s", names[k], err);
        }
    }
    if (rc < 0 && (!err[0] || !strstr(err, "fuzz.jsonl"))) fuzz_fail("trace: an error without the file's name: '%s'", err);
    for (int k = 0; k < 2; k++) hx_sim_policy_destroy(p[k]);
    hx_trace_close(t);
    fclose(f);
}

// ----------------------------------------------------------------------------
// The registry

static void run_tokenize_spm(const uint8_t *d, size_t n, int a) { (void)a; run_tokenize(d, n, ENG_VOCAB_SPM); }
static void run_tokenize_bpe(const uint8_t *d, size_t n, int a) { (void)a; run_tokenize(d, n, ENG_VOCAB_BPE); }

static const kvr_fuzz_target k_static[] = {
    {"gguf", run_gguf, 0},
    {"model", run_model, 0},
    {"tokenize-spm", run_tokenize_spm, 0},
    {"tokenize-bpe", run_tokenize_bpe, 0},
    {"transcript", run_transcript, 0},
    {"checkpoint", run_checkpoint, 0},
    {"state", run_state, 0},
    {"trace-mooncake", run_trace, HX_TRACE_MOONCAKE},
    {"trace-bailian", run_trace, HX_TRACE_BAILIAN},
};
#define N_STATIC (int)(sizeof k_static / sizeof k_static[0])

int kvr_fuzz_targets(kvr_fuzz_target *out, int cap) {
    int n = 0;
    for (int i = 0; i < N_STATIC; i++, n++)
        if (n < cap) out[n] = k_static[i];
    for (int f = 0; hx_importers[f]; f++, n++)
        if (n < cap) {
            kvr_fuzz_target t = {"", run_import, f};
            snprintf(t.name, sizeof t.name, "import-%s", hx_importers[f]->name);
            out[n] = t;
        }
    for (int d = 0; hx_api_dialects[d]; d++, n++)
        if (n < cap) {
            kvr_fuzz_target t = {"", run_api, d};
            snprintf(t.name, sizeof t.name, "api-%s", hx_api_dialects[d]->name);
            out[n] = t;
        }
    return n;
}

const kvr_fuzz_target *kvr_fuzz_find(const char *name) {
    static kvr_fuzz_target all[64];
    int n = kvr_fuzz_targets(all, 64);
    for (int i = 0; i < n && i < 64; i++)
        if (!strcmp(all[i].name, name)) return &all[i];
    return NULL;
}

const eng_model *kvr_fuzz_fixture_model(int a) { return a >= 0 && a < F.n_arch ? F.model[a] : NULL; }

const int32_t *kvr_fuzz_fixture_tokens(int *n) {
    *n = CKPT_TOKENS;
    return F.ckpt_tokens;
}

int kvr_fuzz_available(const kvr_fuzz_target *t, char *why, size_t cap) {
    kvr_fuzz_init();
    if ((t->run == run_tokenize_spm && F.n_spm == 0) || (t->run == run_tokenize_bpe && F.n_bpe == 0)) {
        snprintf(why, cap, "%s needs the vocabularies of %s/vocab (absent)", t->name, shared_dir());
        return -1;
    }
    return 0;
}
