/*
 * engine/tokenizer_load.c: a tokenizer from GGUF tokenizer.ggml.* metadata
 * (contract: tokenizer.h), with llama.cpp's semantics (src/llama-vocab.cpp):
 * the symbol table (tokenizer_int.h), the merge tables of each model (SPM:
 * every split of every token into two symbols, plus which characters sit
 * side by side inside tokens; BPE: merge ranks from tokenizer.ggml.merges),
 * the token attributes llama.cpp adds at load, and the special-token trie.
 * Everything is copied: the GGUF may be closed once this returns.
 */
#include "tokenizer_int.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "status.h"

// ----------------------------------------------------------------------------
// Hash maps and the symbol table

static int imap_init(imap *m, size_t expect) {
    size_t cap = 16;
    while (cap < expect * 2) cap *= 2;
    m->slots = malloc(cap * sizeof *m->slots);
    if (!m->slots) return ENG_ERR_NOMEM;
    for (size_t i = 0; i < cap; i++) m->slots[i].key = IMAP_EMPTY;
    m->mask = cap - 1;
    m->n = 0;
    return ENG_OK;
}

static void imap_free(imap *m) { free(m->slots); m->slots = NULL; }

/* Inserts key -> (v0, v1); an existing key is overwritten only when `replace`. */
static int imap_put(imap *m, uint64_t key, int32_t v0, int32_t v1, bool replace) {
    if ((m->n + 1) * 2 > m->mask + 1) {
        imap big;
        if (imap_init(&big, m->mask + 1) != ENG_OK) return ENG_ERR_NOMEM;
        for (size_t i = 0; i <= m->mask; i++) {
            const imap_slot *s = &m->slots[i];
            if (s->key == IMAP_EMPTY) continue;
            size_t j = (size_t)hash_u64(s->key) & big.mask;
            while (big.slots[j].key != IMAP_EMPTY) j = (j + 1) & big.mask;
            big.slots[j] = *s;
        }
        big.n = m->n;
        imap_free(m);
        *m = big;
    }
    size_t i = (size_t)hash_u64(key) & m->mask;
    while (m->slots[i].key != IMAP_EMPTY && m->slots[i].key != key) i = (i + 1) & m->mask;
    imap_slot *s = &m->slots[i];
    if (s->key == key && !replace) return ENG_OK;
    if (s->key != key) m->n++;
    s->key = key;
    s->v0 = v0;
    s->v1 = v1;
    return ENG_OK;
}

static int smap_grow(eng_tokenizer *t) {
    size_t cap = (t->smap_mask + 1) * 2;
    smap_slot *s = malloc(cap * sizeof *s);
    if (!s) return ENG_ERR_NOMEM;
    for (size_t i = 0; i < cap; i++) s[i].id = -1;
    for (size_t i = 0; i <= t->smap_mask; i++) {
        if (t->smap[i].id < 0) continue;
        size_t j = (size_t)t->smap[i].h & (cap - 1);
        while (s[j].id >= 0) j = (j + 1) & (cap - 1);
        s[j] = t->smap[i];
    }
    free(t->smap);
    t->smap = s;
    t->smap_mask = cap - 1;
    return ENG_OK;
}

/* Maps the text of symbol id to id, replacing an earlier symbol with the same text
 * (llama.cpp: token_to_id[word] = i, the last duplicate wins). */
static int smap_set(eng_tokenizer *t, int32_t id) {
    if ((t->smap_n + 1) * 2 > t->smap_mask + 1 && smap_grow(t) != ENG_OK) return ENG_ERR_NOMEM;
    const char *s = sym_text(t, id);
    size_t n = t->sym_len[id];
    uint64_t h = text_hash(s, n);
    size_t i = (size_t)h & t->smap_mask;
    for (;;) {
        smap_slot *sl = &t->smap[i];
        if (sl->id < 0) { sl->h = h; sl->id = id; t->smap_n++; return ENG_OK; }
        if (sl->h == h && t->sym_len[sl->id] == n && memcmp(sym_text(t, sl->id), s, n) == 0) {
            sl->id = id;
            return ENG_OK;
        }
        i = (i + 1) & t->smap_mask;
    }
}

/* Appends a symbol with text s[0..n) (no map update); returns its id or -1 on OOM. */
static int32_t sym_append(eng_tokenizer *t, const void *s, size_t n) {
    if (t->n_sym == t->sym_cap) {
        int32_t cap = t->sym_cap ? t->sym_cap * 2 : 1024;
        size_t *o = realloc(t->sym_off, (size_t)cap * sizeof *o);
        if (!o) return -1;
        t->sym_off = o;
        uint32_t *l = realloc(t->sym_len, (size_t)cap * sizeof *l);
        if (!l) return -1;
        t->sym_len = l;
        t->sym_cap = cap;
    }
    if (t->blob_len + n + 1 > t->blob_cap) {
        /* s may point into the blob itself (a part of a token's text) */
        uintptr_t u = (uintptr_t)s, b0 = (uintptr_t)t->blob;
        bool inside = t->blob && u >= b0 && u < b0 + t->blob_cap;
        size_t cap = t->blob_cap ? t->blob_cap : 1 << 16;
        while (cap < t->blob_len + n + 1) cap *= 2;
        char *b = realloc(t->blob, cap);
        if (!b) return -1;
        t->blob = b;
        t->blob_cap = cap;
        if (inside) s = b + (u - b0);
    }
    memcpy(t->blob + t->blob_len, s, n);
    t->blob[t->blob_len + n] = '\0';
    t->sym_off[t->n_sym] = t->blob_len;
    t->sym_len[t->n_sym] = (uint32_t)n;
    t->blob_len += n + 1;
    return t->n_sym++;
}

/* The symbol with text s[0..n), created as a pseudo symbol when absent; -1 on OOM. */
static int32_t sym_intern(eng_tokenizer *t, const void *s, size_t n) {
    int32_t id = smap_get(t, s, n);
    if (id >= 0) return id;
    id = sym_append(t, s, n);
    if (id < 0 || smap_set(t, id) != ENG_OK) return -1;
    return id;
}

/* GPT-2's byte-to-unicode map: printable Latin-1 bytes stand for themselves,
 * the other 68 bytes (controls, space, 0x7F-0xA0, 0xAD) become U+0100.. in order. */
static uint32_t gpt2_byte_cp(uint8_t b) {
    if ((b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE) return b;
    uint32_t n = 0;
    for (uint32_t c = 0; c < b; c++)
        if (!((c >= 0x21 && c <= 0x7E) || (c >= 0xA1 && c <= 0xAC) || c >= 0xAE)) n++;
    return 256 + n;
}

// ----------------------------------------------------------------------------
// Loading

#define KEY_PREFIX "tokenizer.ggml."

static bool is_numeric_type(uint32_t ty) {
    return ty <= ENG_GGUF_TYPE_BOOL || ty == ENG_GGUF_TYPE_UINT64 || ty == ENG_GGUF_TYPE_INT64 ||
           ty == ENG_GGUF_TYPE_FLOAT64;
}

/* Reads an optional token-id key into *id when it is a valid id; bad types are errors. */
static int read_id_key(const eng_gguf *g, const char *path, const char *key, int32_t n, int32_t *id,
                       char *err, size_t errlen) {
    int64_t v;
    int rc = eng_gguf_get_int(g, key, &v);
    if (rc == ENG_ERR_NOT_FOUND) return ENG_OK;
    if (rc != ENG_OK) {
        eng_errf(err, errlen, "%s: %s: expected an integer token id", path, key);
        return ENG_ERR_FORMAT;
    }
    if (v < 0 || v >= n) {  /* llama.cpp warns and keeps its default: a guess (0xFFFFFFFF often means "none") */
        eng_errf(err, errlen, "%s: %s: %lld is not a token id of this vocabulary (0 to %d); llama.cpp would use "
                 "%d instead, the writer may have meant none: refusing to guess", path, key, (long long)v, n - 1, *id);
        return ENG_ERR_FORMAT;
    }
    *id = (int32_t)v;
    return ENG_OK;
}

static int read_bool_key(const eng_gguf *g, const char *path, const char *key, bool *b, char *err,
                         size_t errlen) {
    int rc = eng_gguf_get_bool(g, key, b);
    if (rc == ENG_ERR_NOT_FOUND || rc == ENG_OK) return ENG_OK;
    eng_errf(err, errlen, "%s: %s: expected a bool", path, key);
    return ENG_ERR_FORMAT;
}

/* The index of an array key holding n numbers, -1 when absent, -2 when malformed. */
static int64_t numeric_array(const eng_gguf *g, const char *key, int32_t n) {
    int64_t i = eng_gguf_find_key(g, key);
    if (i < 0) return -1;
    if (eng_gguf_kv_type(g, i) != ENG_GGUF_TYPE_ARRAY || !is_numeric_type(eng_gguf_arr_type(g, i)) ||
        eng_gguf_arr_n(g, i) != (uint64_t)n)
        return -2;
    return i;
}

static int put_if_join_only(imap *m, uint64_t key, int32_t merged) {
    const imap_slot *s = imap_find(m, key);
    if (s && s->v0 >= 0) return ENG_OK;
    return imap_put(m, key, merged, 0, true);
}

/* SPM: the pair table (every split of every token into two symbols, plus the
 * side-by-side characters inside tokens), the character map and byte fallback. */
static int build_spm(eng_tokenizer *t) {
    int rc = ENG_ERR_NOMEM;
    size_t *b = NULL, bcap = 0;
    if (imap_init(&t->pairs, (size_t)t->n_vocab * 6) != ENG_OK) goto out;
    if (imap_init(&t->groups, 4096) != ENG_OK) goto out;
    for (int32_t id = 0; id < t->n_vocab; id++) {
        size_t tl = t->sym_len[id];
        if (smap_get(t, sym_text(t, id), tl) != id) continue;   /* shadowed duplicate */
        if (tl + 1 > bcap) {
            bcap = 2 * (tl + 1);
            size_t *nb = realloc(b, bcap * sizeof *nb);
            if (!nb) goto out;
            b = nb;
        }
        size_t m = 0;
        b[0] = 0;
        for (size_t pos = 0; pos < tl;) {
            pos += group_len((const uint8_t *)sym_text(t, id) + pos, tl - pos);
            b[++m] = pos;
        }
        if (m < 2) continue;
        /* sym_intern may move the blob: texts are re-read after each call. */
        int32_t first = sym_intern(t, sym_text(t, id), b[1]);
        if (first < 0) goto out;
        int32_t prev = first;
        for (size_t k = 1; k < m; k++) {
            int32_t gk = sym_intern(t, sym_text(t, id) + b[k], b[k + 1] - b[k]);
            if (gk < 0) goto out;
            if (put_if_join_only(&t->pairs, pair_key(prev, gk), -1) != ENG_OK) goto out;
            prev = gk;
            int32_t sa = k == 1 ? first : smap_get(t, sym_text(t, id), b[k]);
            int32_t sb = k == m - 1 ? gk : smap_get(t, sym_text(t, id) + b[k], tl - b[k]);
            if (sa >= 0 && sb >= 0 && put_if_join_only(&t->pairs, pair_key(sa, sb), id) != ENG_OK) goto out;
        }
    }
    for (int i = 0; i < 256; i++) t->byte_sym[i] = -1;
    for (int32_t id = 0; id < t->n_sym; id++) {
        const uint8_t *s = (const uint8_t *)sym_text(t, id);
        size_t n = t->sym_len[id];
        if (n == 0 || group_len(s, n) != n || smap_get(t, s, n) != id) continue;
        if (n == 1) t->byte_sym[s[0]] = id;
        else if (imap_put(&t->groups, group_key(s, n), id, 0, true) != ENG_OK) goto out;
    }
    for (int i = 0; i < 256; i++) {
        char hex[8];
        snprintf(hex, sizeof hex, "<0x%02X>", i);
        int32_t id = smap_get(t, hex, 6);
        if (id < 0 || id >= t->n_vocab) {
            uint8_t c = (uint8_t)i;
            id = smap_get(t, &c, 1);
        }
        t->byte_tok[i] = (id >= 0 && id < t->n_vocab) ? id : t->unk;
    }
    rc = ENG_OK;
out:
    free(b);
    return rc;
}

/* GPT-2: byte symbols, the decode map and the merge ranks. */
static int build_bpe(eng_tokenizer *t, const eng_gguf *g, const char *path, char *err, size_t errlen) {
    int rc = ENG_ERR_NOMEM;
    char *cat = NULL;
    size_t ccap = 0;
    for (int i = 0; i < 324; i++) t->gpt2_inv[i] = -1;
    for (int b = 0; b < 256; b++) {
        uint8_t u[4];
        uint32_t cp = gpt2_byte_cp((uint8_t)b);
        t->gpt2_inv[cp] = (int16_t)b;
        t->byte_sym[b] = sym_intern(t, u, utf8_encode(cp, u));
        if (t->byte_sym[b] < 0) return ENG_ERR_NOMEM;
    }
    for (int i = 0; i < 256; i++) {   /* raw-UTF-8 BPE byte fallback */
        char hex[8];
        snprintf(hex, sizeof hex, "<0x%02X>", i);
        int32_t id = smap_get(t, hex, 6);
        t->byte_tok[i] = id >= 0 && id < t->n_vocab ? id : -1;
    }
    int64_t mi = eng_gguf_find_key(g, KEY_PREFIX "merges");
    if (mi < 0 && t->pre == eng_tok_pre_def("KIMI_K2")) {   /* llama.cpp: kimi-k2 needs no merges */
        rc = imap_init(&t->pairs, 16);
        goto out;
    }
    if (mi < 0 || eng_gguf_kv_type(g, mi) != ENG_GGUF_TYPE_ARRAY ||
        eng_gguf_arr_type(g, mi) != ENG_GGUF_TYPE_STRING || eng_gguf_arr_n(g, mi) > INT32_MAX) {
        eng_errf(err, errlen, "%s: " KEY_PREFIX "merges: %s", path,
                 mi < 0 ? "missing (a BPE tokenizer needs its merges)" : "expected an array of strings");
        return ENG_ERR_FORMAT;
    }
    uint64_t nm = eng_gguf_arr_n(g, mi);
    if (imap_init(&t->pairs, (size_t)nm) != ENG_OK) goto out;
    for (uint64_t i = 0; i < nm; i++) {
        const char *s;
        size_t n;
        if (eng_gguf_get_arr_str(g, mi, i, &s, &n) != ENG_OK) {
            eng_errf(err, errlen, "%s: " KEY_PREFIX "merges[%llu]: unreadable", path, (unsigned long long)i);
            rc = ENG_ERR_FORMAT;
            goto out;
        }
        const char *sp = n > 1 ? memchr(s + 1, ' ', n - 1) : NULL;   /* llama.cpp: find(' ', 1) */
        if (!sp) continue;
        size_t na = (size_t)(sp - s), nb = n - na - 1;
        if (n > ccap) {
            ccap = 2 * n;
            char *c = realloc(cat, ccap);
            if (!c) goto out;
            cat = c;
        }
        memcpy(cat, s, na);
        memcpy(cat + na, sp + 1, nb);
        int32_t a = sym_intern(t, s, na), bb = sym_intern(t, sp + 1, nb), r = sym_intern(t, cat, na + nb);
        if (a < 0 || bb < 0 || r < 0) goto out;
        if (imap_put(&t->pairs, pair_key(a, bb), r, (int32_t)i, false) != ENG_OK) goto out;  /* first rank wins */
    }
    rc = ENG_OK;
out:
    free(cat);
    return rc;
}

static int special_cmp(const void *pa, const void *pb, void *ctx) {
    const eng_tokenizer *t = ctx;
    int32_t a = *(const int32_t *)pa, b = *(const int32_t *)pb;
    if (t->sym_len[a] != t->sym_len[b]) return t->sym_len[a] > t->sym_len[b] ? -1 : 1;
    return (a > b) - (a < b);
}

/* The list of special tokens in matching order, and a byte trie over their texts. */
static int build_specials(eng_tokenizer *t) {
    int32_t n = 0;
    for (int32_t id = 0; id < t->n_vocab; id++)
        if (t->attr[id] & A_SPECIAL) n++;
    t->special = malloc(((size_t)n + 1) * sizeof *t->special);
    if (!t->special) return ENG_ERR_NOMEM;
    n = 0;
    for (int32_t id = 0; id < t->n_vocab; id++)
        if (t->attr[id] & A_SPECIAL)
            t->special[n++] = id;
    t->n_special = n;
    qsort_r(t->special, (size_t)n, sizeof *t->special, special_cmp, t);
    if (imap_init(&t->trie, 64) != ENG_OK) return ENG_ERR_NOMEM;
    t->nodes_cap = 64;
    t->trie_term = malloc((size_t)t->nodes_cap * sizeof *t->trie_term);
    if (!t->trie_term) return ENG_ERR_NOMEM;
    t->trie_term[0] = -1;
    t->n_nodes = 1;
    for (int32_t k = 0; k < n; k++) {
        const uint8_t *s = (const uint8_t *)sym_text(t, t->special[k]);
        size_t len = t->sym_len[t->special[k]];
        int32_t node = 0;
        for (size_t i = 0; i < len; i++) {
            uint64_t key = ((uint64_t)node << 8) | s[i];
            const imap_slot *c = imap_find(&t->trie, key);
            if (c) { node = c->v0; continue; }
            if (t->n_nodes == t->nodes_cap) {
                int32_t *nt = realloc(t->trie_term, (size_t)t->nodes_cap * 2 * sizeof *nt);
                if (!nt) return ENG_ERR_NOMEM;
                t->trie_term = nt;
                t->nodes_cap *= 2;
            }
            t->trie_term[t->n_nodes] = -1;
            if (imap_put(&t->trie, key, t->n_nodes, 0, true) != ENG_OK) return ENG_ERR_NOMEM;
            node = t->n_nodes++;
        }
        if (t->trie_term[node] < 0) t->trie_term[node] = k;   /* equal texts: the first in order */
        t->special_first[s[0] >> 3] |= (uint8_t)(1u << (s[0] & 7));
    }
    return ENG_OK;
}

/* The id of the token whose text is s, or -1. */
static int32_t token_id(const eng_tokenizer *t, const char *s) {
    int32_t id = smap_get(t, s, strlen(s));
    return id < t->n_vocab ? id : -1;
}

/* Sets attribute bits of the token with text s (when there is one); returns its id or -1. */
static int32_t set_attr(eng_tokenizer *t, const char *s, uint16_t set, uint16_t clear) {
    int32_t id = token_id(t, s);
    if (id >= 0) t->attr[id] = (uint16_t)((t->attr[id] & ~clear) | set);
    return id;
}

/* What llama_vocab::impl::load adds to the token types from the token texts
 * and the model's name: end-of-generation and fill-in-the-middle texts become
 * CONTROL (matched only with parse_special), gpt-oss and harmony fixes, and
 * the per-model LSTRIP/RSTRIP rules (phi-3: special tokens eat the whitespace
 * after them). Sets t->eot when no key named it. */
static void auto_attrs(eng_tokenizer *t, const eng_gguf *g) {
#define FULLWIDTH_BAR "\xef\xbd\x9c"
#define LOWER_BLOCK   "\xe2\x96\x81"
    if (t->eot < 0) {   /* the first of these texts is the end-of-turn token */
        static const char *eot[] = {"<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>", "<|endoftext|>",
                                    "<|end_of_text|>", "<EOT>", "_<EOT>", "[EOT]",
                                    "<" FULLWIDTH_BAR "end" LOWER_BLOCK "of" LOWER_BLOCK "sentence" FULLWIDTH_BAR ">",
                                    "<end_of_utterance>", NULL};
        for (int i = 0; eot[i] && t->eot < 0; i++) t->eot = set_attr(t, eot[i], A_CONTROL, 0);
    }
    /* fill-in-the-middle and end-of-message tokens: when no key names one, its text makes it CONTROL */
    static const struct { const char *key, *key2; const char *texts[9]; } fim[] = {
        {"eom_token_id", NULL, {"<|eom_id|>"}},
        {"fim_pre_token_id", "prefix_token_id", {"<|fim_prefix|>", "<fim-prefix>", "<fim_prefix>",
            "<" FULLWIDTH_BAR "fim" LOWER_BLOCK "begin" FULLWIDTH_BAR ">", "<PRE>", LOWER_BLOCK "<PRE>",
            "<|code_prefix|>", "<|prefix|>"}},
        {"fim_suf_token_id", "suffix_token_id", {"<|fim_suffix|>", "<fim-suffix>", "<fim_suffix>",
            "<" FULLWIDTH_BAR "fim" LOWER_BLOCK "hole" FULLWIDTH_BAR ">", "<SUF>", LOWER_BLOCK "<SUF>",
            "<|code_suffix|>", "<|suffix|>"}},
        {"fim_mid_token_id", "middle_token_id", {"<|fim_middle|>", "<fim-middle>", "<fim_middle>",
            "<" FULLWIDTH_BAR "fim" LOWER_BLOCK "end" FULLWIDTH_BAR ">", "<MID>", LOWER_BLOCK "<MID>",
            "<|code_middle|>", "<|middle|>"}},
        {"fim_pad_token_id", NULL, {"<|fim_pad|>", "<fim-pad>", "<fim_pad>", "<PAD>", "[PAD]"}},
        {"fim_rep_token_id", NULL, {"<|fim_repo|>", "<|repo_name|>", "<fim-repo>", "<REPO>", "<reponame>"}},
        {"fim_sep_token_id", NULL, {"<|file_sep|>"}},
    };
    for (size_t k = 0; k < sizeof fim / sizeof fim[0]; k++) {
        char key[96], key2[96];
        int64_t v;
        snprintf(key, sizeof key, KEY_PREFIX "%s", fim[k].key);
        snprintf(key2, sizeof key2, KEY_PREFIX "%s", fim[k].key2 ? fim[k].key2 : fim[k].key);
        bool named = (eng_gguf_get_int(g, key, &v) == ENG_OK && v >= 0 && v < t->n_vocab) ||
                     (eng_gguf_get_int(g, key2, &v) == ENG_OK && v >= 0 && v < t->n_vocab);
        for (int i = 0; !named && i < 9 && fim[k].texts[i]; i++) named = set_attr(t, fim[k].texts[i], A_CONTROL, 0) >= 0;
    }
    /* end-of-generation texts */
    static const char *eog[] = {"<|eot_id|>", "<|im_end|>", "<|end|>", "<|return|>", "<|call|>", "<|flush|>",
                                "<|calls|>", "<end_of_turn>", "<|endoftext|>", "</s>", "<|eom_id|>", "<EOT>",
                                "_<EOT>", "[EOT]", "[EOS]", "<|end_of_text|>", "<end_of_utterance>", "<eos>",
                                "<turn|>", "<|tool_response>",
                                "<" FULLWIDTH_BAR "end" LOWER_BLOCK "of" LOWER_BLOCK "sentence" FULLWIDTH_BAR ">",
                                "[e~[", NULL};
    for (int i = 0; eog[i]; i++) set_attr(t, eog[i], A_CONTROL, 0);
    static const char *gpt_oss[] = {"<|channel|>", "<|message|>", "<|start|>", "<|constrain|>", NULL};
    for (int i = 0; gpt_oss[i]; i++) set_attr(t, gpt_oss[i], A_USER_DEFINED, 0xFFFF);
    /* harmony / solar-open: <|end|> is not end-of-generation, and becomes USER_DEFINED */
    if (token_id(t, "<|end|>") >= 0 &&
        ((token_id(t, "<|return|>") >= 0 && token_id(t, "<|call|>") >= 0) ||
         (token_id(t, "<|calls|>") >= 0 && token_id(t, "<|flush|>") >= 0)))
        set_attr(t, "<|end|>", A_USER_DEFINED, 0xFFFF);
    if (token_id(t, "<|tool_response>") >= 0) set_attr(t, "</s>", A_NORMAL, 0xFFFF);   /* gemma4, paddleocr */
#undef FULLWIDTH_BAR
#undef LOWER_BLOCK

    /* per-model attributes, by tokenizer.ggml.pre, general.architecture and the lowercased general.name */
    const char *pre = "", *arch = "", *name = "";
    size_t n;
    char lname[256];
    if (eng_gguf_get_str(g, KEY_PREFIX "pre", &pre, &n) != ENG_OK) pre = "";
    if (eng_gguf_get_str(g, "general.architecture", &arch, &n) != ENG_OK) arch = "";
    if (eng_gguf_get_str(g, "general.name", &name, &n) != ENG_OK) n = 0;
    if (n >= sizeof lname) n = sizeof lname - 1;
    for (size_t i = 0; i < n; i++) lname[i] = (char)(name[i] >= 'A' && name[i] <= 'Z' ? name[i] + 32 : name[i]);
    lname[n] = '\0';
    if (strstr(pre, "jina-v2-de") || strstr(pre, "jina-v2-es") || strstr(pre, "jina-v2-code") ||
        strstr(arch, "nomic-bert-moe") || strstr(arch, "jina-bert-v3")) {
        set_attr(t, "<mask>", A_LSTRIP, 0);
    } else if (strstr(lname, "phi-3") || strstr(lname, "phi3")) {
        for (int32_t id = 0; id < t->n_vocab; id++)
            if (t->attr[id] & A_SPECIAL) t->attr[id] |= A_RSTRIP;
        set_attr(t, "</s>", A_RSTRIP, 0);
        set_attr(t, "<unk>", 0, A_RSTRIP);
        set_attr(t, "<s>", 0, A_RSTRIP);
        set_attr(t, "<|endoftext|>", 0, A_RSTRIP);
    } else if (strstr(lname, "modern-bert")) {
        set_attr(t, "[MASK]", A_LSTRIP, 0);
    }
}

/* Code points of s[0..n) as the tokenizer decodes text (utf8_decode). */
static int32_t count_cps(const uint8_t *s, size_t n) {
    int32_t k = 0;
    for (size_t i = 0, l; i < n; i += l, k++) utf8_decode(s, n, i, &l);
    return k;
}

/* What a token budget may rely on (eng_tokenize_upto): how much text one
 * token stands for at most, in the units the merges see and in input
 * bytes, and whether every input byte gives a token. SPM: a token is its
 * escaped text, an input byte one escaped byte or more. BPE: a token stands
 * for at most as many input code points as its text has (a code point
 * becomes one character or more, each its own symbol; a special token is
 * matched as written), and a code point for at most 4 bytes (the lenient
 * decoder takes overlong forms). RWKV: a token is its bytes. Bytes can
 * vanish where a special token strips the whitespace beside it, and where
 * a symbol that is no token has no byte token to fall back to. */
static void budget_bounds(eng_tokenizer *t) {
    int32_t units = 0;
    bool bound = true, strip = false;
    for (int32_t id = 0; id < t->n_vocab; id++) {
        const uint8_t *txt = (const uint8_t *)sym_text(t, id);
        const uint32_t n = t->sym_len[id];
        int32_t u = (int32_t)n;
        if (t->type == ENG_VOCAB_BPE) u = count_cps(txt, n);
        if (u > units) units = u;
        strip = strip || ((t->attr[id] & A_SPECIAL) && (t->attr[id] & (A_LSTRIP | A_RSTRIP)));
    }
    if (t->type == ENG_VOCAB_RWKV) units = t->max_tok_len;
    if (t->type == ENG_VOCAB_SPM || (t->type == ENG_VOCAB_BPE && !t->byte_encode))
        for (int b = 0; b < 256; b++) bound = bound && t->byte_tok[b] >= 0;
    if (t->type == ENG_VOCAB_BPE && t->byte_encode) {   /* every code point of a word gives a token */
        /* ASCII and continuation bytes: every code point's UTF-8 has one, so each code point gives a token */
        for (int b = 0; b < 0xC0 && bound; b++) {
            const int32_t y = t->byte_sym[b];
            if (y >= 0 && y < t->n_vocab) continue;
            bool any = false;   /* the byte's character is no token: one of its bytes must be (bpe_emit) */
            for (uint32_t k = 0; y >= 0 && k < t->sym_len[y] && !any; k++) {
                const int32_t id = smap_get(t, sym_text(t, y) + k, 1);
                any = id >= 0 && id < t->n_vocab;
            }
            bound = any;
        }
        for (size_t i = 0; bound && i <= t->pairs.mask; i++) {
            const imap_slot *sl = &t->pairs.slots[i];
            if (sl->key != IMAP_EMPTY && sl->v0 >= t->n_vocab) bound = false;
        }
    }
    t->max_token_units = units > 0 ? units : 1;
    t->max_token_bytes = t->type == ENG_VOCAB_BPE ? 4 * t->max_token_units : t->max_token_units;
    t->units_bound = bound && units > 0;
    t->bytes_bound = t->units_bound && !strip;
}

/* llama.cpp's llama_unescape_rwkv_token: "\\t" "\\n" "\\r" map to their bytes,
 * "\\xHH" to byte HH (digits read as c >= 'a' ? c - 'a' + 10 : c - '0', as
 * llama.cpp does), a backslash before anything else to that character.
 * Writes at most n bytes to out and returns their count. */
static size_t rwkv_unescape(const char *s, size_t n, char *out) {
    size_t o = 0;
    bool escaping = false;
    int hex_left = 0;
    uint8_t acc = 0;
    for (size_t i = 0; i < n; i++) {
        const char c = s[i];
        if (hex_left) {
            acc = (uint8_t)((acc << 4) + (c >= 'a' ? c - 'a' + 10 : c - '0'));
            if (--hex_left == 0) { out[o++] = (char)acc; acc = 0; }
            continue;
        }
        if (escaping) {
            escaping = false;
            if (c == 't') out[o++] = '\t';
            else if (c == 'n') out[o++] = '\n';
            else if (c == 'r') out[o++] = '\r';
            else if (c == 'x') hex_left = 2;
            else out[o++] = c;
            continue;
        }
        if (c == '\\') { escaping = true; continue; }
        out[o++] = c;
    }
    return o;
}

int eng_tokenizer_load(const eng_gguf *g, eng_tokenizer **out, char *err, size_t errlen) {
    ENG_ASSERT(g && out);
    *out = NULL;
    eng_uni_init();
    const char *path = eng_gguf_path(g) ? eng_gguf_path(g) : "(gguf)";
    const char *model, *s;
    size_t model_n, n;
    int rc = eng_gguf_get_str(g, KEY_PREFIX "model", &model, &model_n);
    if (rc == ENG_ERR_NOT_FOUND) {
        eng_errf(err, errlen, "%s: " KEY_PREFIX "model: missing (the file has no tokenizer)", path);
        return ENG_ERR_NOT_FOUND;
    }
    if (rc != ENG_OK) {
        eng_errf(err, errlen, "%s: " KEY_PREFIX "model: expected a string", path);
        return ENG_ERR_FORMAT;
    }
    int type;
    bool gemma4 = model_n == 6 && !memcmp(model, "gemma4", 6);   /* BPE whose pre-tokenizer is always gemma4 */
    if (model_n == 5 && !memcmp(model, "llama", 5)) type = ENG_VOCAB_SPM;
    else if ((model_n == 4 && !memcmp(model, "gpt2", 4)) || gemma4) type = ENG_VOCAB_BPE;
    else if (model_n == 4 && !memcmp(model, "rwkv", 4)) type = ENG_VOCAB_RWKV;
    else {
        eng_errf(err, errlen, "%s: " KEY_PREFIX "model: unsupported tokenizer '%.*s' (supported: llama, gpt2, gemma4, rwkv)",
                 path, (int)(model_n > 64 ? 64 : model_n), model);
        return ENG_ERR_UNSUPPORTED;
    }
    int64_t ti = eng_gguf_find_key(g, KEY_PREFIX "tokens");
    if (ti < 0 || eng_gguf_kv_type(g, ti) != ENG_GGUF_TYPE_ARRAY || eng_gguf_arr_type(g, ti) != ENG_GGUF_TYPE_STRING ||
        eng_gguf_arr_n(g, ti) == 0 || eng_gguf_arr_n(g, ti) > (uint64_t)INT32_MAX / 4) {
        eng_errf(err, errlen, "%s: " KEY_PREFIX "tokens: %s", path,
                 ti < 0 ? "missing" : "expected a non-empty array of strings");
        return ENG_ERR_FORMAT;
    }
    eng_tokenizer *t = calloc(1, sizeof *t);
    if (!t) return ENG_ERR_NOMEM;
    rc = ENG_ERR_NOMEM;
    t->type = type;
    t->n_vocab = (int32_t)eng_gguf_arr_n(g, ti);
    size_t cap = 1024;
    while (cap < 2 * ((size_t)t->n_vocab + 1024)) cap *= 2;
    t->smap = malloc(cap * sizeof *t->smap);
    t->score = calloc((size_t)t->n_vocab, sizeof *t->score);
    t->attr = malloc((size_t)t->n_vocab * sizeof *t->attr);
    if (!t->smap || !t->score || !t->attr) goto fail;
    for (size_t i = 0; i < cap; i++) t->smap[i].id = -1;
    t->smap_mask = cap - 1;
    for (int32_t i = 0; i < t->n_vocab; i++) {
        if (eng_gguf_get_arr_str(g, ti, (uint64_t)i, &s, &n) != ENG_OK) {
            eng_errf(err, errlen, "%s: " KEY_PREFIX "tokens[%d]: unreadable", path, i);
            rc = ENG_ERR_FORMAT;
            goto fail;
        }
        char empty[32];
        if (n == 0) {   /* llama.cpp renames empty tokens */
            n = (size_t)snprintf(empty, sizeof empty, "[EMPTY_%d]", i);
            s = empty;
        }
        if (type == ENG_VOCAB_RWKV) {   /* stored escaped: keep the bytes it stands for */
            char *raw = malloc(n ? n : 1);
            if (!raw) goto fail;
            const size_t rn = rwkv_unescape(s, n, raw);
            const int32_t id = sym_append(t, raw, rn);
            free(raw);
            if (id != i) goto fail;
            if ((int32_t)rn > t->max_tok_len) t->max_tok_len = (int32_t)rn;
            continue;
        }
        if (sym_append(t, s, n) != i) goto fail;
    }
    for (int32_t i = 0; i < t->n_vocab; i++)
        if (smap_set(t, i) != ENG_OK) goto fail;

    int64_t si = numeric_array(g, KEY_PREFIX "scores", t->n_vocab);
    int64_t yi = numeric_array(g, KEY_PREFIX "token_type", t->n_vocab);
    if (si == -2 || yi == -2) {
        eng_errf(err, errlen, "%s: %s: expected an array of %d numbers", path,
                 si == -2 ? KEY_PREFIX "scores" : KEY_PREFIX "token_type", t->n_vocab);
        rc = ENG_ERR_FORMAT;
        goto fail;
    }
    for (int32_t i = 0; i < t->n_vocab; i++) {
        double v = si >= 0 ? eng_gguf_get_arr_num(g, si, (uint64_t)i) : 0.0;
        t->score[i] = isnan(v) ? -INFINITY : (float)v;
        double y = yi >= 0 ? eng_gguf_get_arr_num(g, yi, (uint64_t)i) : TT_NORMAL;
        static const uint16_t attr_of_type[] = {0, A_NORMAL, A_UNKNOWN, A_CONTROL, A_USER_DEFINED, A_UNUSED, A_BYTE};
        t->attr[i] = (y >= TT_NORMAL && y <= TT_BYTE && y == floor(y)) ? attr_of_type[(int)y] : 0;
    }

    /* Special ids and flags: llama.cpp's defaults, then the keys. */
    bool spm = type == ENG_VOCAB_SPM;
    t->bos = spm && t->n_vocab > 1 ? 1 : -1;
    t->eos = spm && t->n_vocab > 2 ? 2 : -1;
    t->unk = spm ? 0 : -1;
    t->eot = -1;
    t->add_bos = spm;
    t->add_eos = false;
    t->add_space_prefix = spm;
    if (type == ENG_VOCAB_BPE) {   /* the pre-tokenizer (SPM and RWKV have none: llama.cpp ignores the key there) */
        const char *pre = NULL;
        size_t pre_n = 0;
        int prc = eng_gguf_get_str(g, KEY_PREFIX "pre", &pre, &pre_n);
        if (prc == ENG_ERR_TYPE) {
            eng_errf(err, errlen, "%s: " KEY_PREFIX "pre: expected a string", path);
            rc = ENG_ERR_FORMAT;
            goto fail;
        }
        if (gemma4) { pre = "gemma4"; pre_n = 6; prc = ENG_OK; }
        if (prc != ENG_OK) { pre = "default"; pre_n = 7; }   /* absent: llama.cpp's default rules */
        const pre_name *pn = eng_tok_pre_name(pre, pre_n);
        if (!pn || (pn->flags & PF_UNSUPPORTED)) {
            eng_errf(err, errlen, "%s: " KEY_PREFIX "pre: unsupported pre-tokenizer '%.*s'%s", path,
                     (int)(pre_n > 64 ? 64 : pre_n), pre,
                     pn ? " (it goes with tokenizer model 'whitespace', which kvreplay does not read)" : "");
            rc = ENG_ERR_UNSUPPORTED;
            goto fail;
        }
        snprintf(t->pre_name, sizeof t->pre_name, "%s%s", pn->name, prc == ENG_OK ? "" : " (absent)");
        t->pre = eng_tok_pre_def(pn->type);
        ENG_ASSERT(t->pre);
        t->byte_encode = t->pre->byte_encode;
        t->ignore_merges = pn->flags & PF_IGNORE_MERGES;
        t->escape_ws = pn->flags & PF_ESCAPE_WS;
        t->nl_whole = t->pre == eng_tok_pre_def("GEMMA4");
        if (pn->flags & PF_ADD_BOS) t->add_bos = true;
        if (pn->flags & PF_NO_BOS) t->bos = -1;
        if ((rc = eng_tok_pre_compile(t, path, err, errlen)) != ENG_OK) goto fail;
    }
    if ((rc = read_id_key(g, path, KEY_PREFIX "bos_token_id", t->n_vocab, &t->bos, err, errlen)) ||
        (rc = read_id_key(g, path, KEY_PREFIX "eos_token_id", t->n_vocab, &t->eos, err, errlen)) ||
        (rc = read_id_key(g, path, KEY_PREFIX "unknown_token_id", t->n_vocab, &t->unk, err, errlen)) ||
        (rc = read_id_key(g, path, KEY_PREFIX "eot_token_id", t->n_vocab, &t->eot, err, errlen)) ||
        (rc = read_bool_key(g, path, KEY_PREFIX "add_bos_token", &t->add_bos, err, errlen)) ||
        (rc = read_bool_key(g, path, KEY_PREFIX "add_eos_token", &t->add_eos, err, errlen)) ||
        (rc = read_bool_key(g, path, KEY_PREFIX "add_space_prefix", &t->add_space_prefix, err, errlen)))
        goto fail;
    if (t->unk >= t->n_vocab) t->unk = -1;
    if (t->nl_whole) t->add_bos = true;   /* llama.cpp overrides add_bos_token for gemma4 */
    auto_attrs(t, g);
    if (type == ENG_VOCAB_RWKV) rc = ENG_OK;   /* greedy matching needs nothing more */
    else rc = spm ? build_spm(t) : build_bpe(t, g, path, err, errlen);
    if (rc != ENG_OK) goto fail;
    if ((rc = build_specials(t)) != ENG_OK) goto fail;
    budget_bounds(t);
    *out = t;
    return ENG_OK;
fail:
    if (rc == ENG_ERR_NOMEM) eng_errf(err, errlen, "%s: tokenizer: out of memory", path);
    eng_tokenizer_free(t);
    return rc;
}

void eng_tokenizer_free(eng_tokenizer *t) {
    if (!t) return;
    free(t->blob);
    free(t->sym_off);
    free(t->sym_len);
    free(t->score);
    free(t->attr);
    for (int k = 0; k < t->n_steps; k++) pcre2_code_free(t->steps[k].re);
    free(t->smap);
    imap_free(&t->pairs);
    imap_free(&t->groups);
    free(t->special);
    imap_free(&t->trie);
    free(t->trie_term);
    free(t);
}

int     eng_tokenizer_type(const eng_tokenizer *t) { ENG_ASSERT(t); return t->type; }
const char *eng_tokenizer_type_name(const eng_tokenizer *t) {
    ENG_ASSERT(t);
    return t->type == ENG_VOCAB_SPM ? "llama" : t->type == ENG_VOCAB_BPE ? "gpt2" : "rwkv";
}
int32_t eng_tokenizer_n_vocab(const eng_tokenizer *t) { ENG_ASSERT(t); return t->n_vocab; }
int32_t eng_tokenizer_bos(const eng_tokenizer *t) { ENG_ASSERT(t); return t->bos; }
int32_t eng_tokenizer_eos(const eng_tokenizer *t) { ENG_ASSERT(t); return t->eos; }
int32_t eng_tokenizer_eot(const eng_tokenizer *t) { ENG_ASSERT(t); return t->eot; }
bool    eng_tokenizer_add_bos(const eng_tokenizer *t) { ENG_ASSERT(t); return t->add_bos && t->bos >= 0; }
bool    eng_tokenizer_add_eos(const eng_tokenizer *t) { ENG_ASSERT(t); return t->add_eos && t->eos >= 0; }

const char *eng_tokenizer_pre(const eng_tokenizer *t) { ENG_ASSERT(t); return t->pre_name; }
int32_t eng_tokenizer_max_token_bytes(const eng_tokenizer *t) { ENG_ASSERT(t); return t->max_token_bytes; }
bool    eng_tokenizer_bytes_bound(const eng_tokenizer *t) { ENG_ASSERT(t); return t->bytes_bound; }

const char *eng_token_piece(const eng_tokenizer *t, int32_t id, size_t *len) {
    ENG_ASSERT(t);
    if (id < 0 || id >= t->n_vocab) return NULL;
    if (len) *len = t->sym_len[id];
    return sym_text(t, id);
}

int32_t eng_token_lookup(const eng_tokenizer *t, const char *text, size_t len) {
    ENG_ASSERT(t);
    int32_t id = smap_get(t, text ? text : "", text ? len : 0);
    return id < t->n_vocab ? id : -1;
}
