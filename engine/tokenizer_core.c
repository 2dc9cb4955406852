/*
 * engine/tokenizer_core.c: tokenizing and detokenizing (contract:
 * tokenizer.h), with llama.cpp's semantics (src/llama-vocab.cpp,
 * src/unicode.cpp), so that prompts get the token ids a llama.cpp server
 * would give them. The tables come from tokenizer_load.c, the BPE words
 * from tokenizer_pre.c.
 *
 * The text is cut into units that merges never cross, each merged whole
 * before the next is read: special tokens (partition below), then in each
 * raw fragment
 *   - SPM ("llama"): segments. Spaces become U+2581, a dummy prefix goes
 *     first, and characters merge best score first (then leftmost). Two
 *     characters that never sit side by side in a token can never be joined
 *     by a merge, so the text is cut between them: the result is that of
 *     llama.cpp's one queue over the whole text, and each queue holds one
 *     segment. Invalid UTF-8 falls back to <0xNN> tokens, exact bytes kept.
 *   - BPE ("gpt2"): the pre-tokenizer's words, each merged lowest rank first
 *     (then leftmost) over GPT-2's byte map or raw UTF-8; invalid UTF-8
 *     decodes leniently (U+FFFD) first.
 *   - RWKV: one greedy longest match at a time.
 * So scratch memory is one unit's, plus 5 bytes per code point of a BPE
 * fragment (its code points and classes, which the pre-tokenizer needs), and
 * a budget (eng_tokenize_upto) is checked between units: a unit is either
 * merged whole or proven too long by its byte count alone.
 * Decoding is the exact inverse of tokenizing (no clean_spaces pass), except
 * where the input is not kept: SPM reads U+2581 as a space, GPT-2 replaces
 * invalid UTF-8.
 *
 * Each call allocates its own scratch, so one tokenizer serves many threads
 * at once. A call fails (TOK_FAIL) when memory runs out, PCRE2 fails (its
 * match or JIT-stack limits), len exceeds INT32_MAX / 4, or an RWKV text
 * has a byte no token starts with and the vocabulary has no unknown token.
 */
#include "tokenizer_int.h"

#include <stdlib.h>
#include <string.h>

#include "status.h"

// ----------------------------------------------------------------------------
// A call's state: its output, its budget and its scratch

/* A symbol of the unit being merged, at the index of its first unit (an SPM
 * character, a BPE byte or character); nc: the units it spans (0: merged
 * into a symbol before it), so the next symbol is at index + nc and the one
 * before it is the nearest index below with nc > 0. at: where its first
 * unit comes from (BPE: the input offset; SPM: the escaped-text position,
 * spm_pos). */
typedef struct { int32_t id, nc; uint32_t at; } symbol;
/* A queued merge of the symbol at `left` with the one after it. key: the
 * pair's rank (BPE; a rank names one pair) or merged symbol (SPM; its score
 * orders the queue). Symbols only grow, so the pair at `left` is the one
 * queued exactly when the table still gives it that key. */
typedef struct { int32_t key, left; } bigram;
typedef struct { int32_t off, len, tok; } frag;   /* tok >= 0: a special token */

typedef struct {
    const eng_tokenizer *t;
    bool      spm;
    bool      oom;                         /* out of memory, or PCRE2 failed: the call fails */
    bool      stop;                        /* over the budget: the call stops, not failing */
    int32_t  *ids, *offs;                  /* output: n tokens emitted, the first cap kept */
    size_t    n, cap;
    bool      grow;                        /* ids is ours and grows (eng_tokenize_alloc) */
    size_t    limit;                       /* the budget: stop once n exceeds it */
    int32_t   L;                           /* budget checks by size: max_token_units (0: none) */
    uint8_t  *buf;                         /* BPE: a word's encoded text */
    int32_t  *bstart;                      /* raw BPE: each character's offset in buf */
    size_t    buf_cap, bstart_cap;
    uint32_t *cps;                         /* BPE: code points of a fragment (cp_cap) */
    uint8_t  *cls;                         /* their classes */
    size_t    cp_cap;
    tok_split split;                       /* the pre-tokenizer's scratch */
    symbol   *syms;                        /* (syms_cap) */
    size_t    syms_cap;
    bigram   *heap;                        /* binary heap, best first */
    size_t    heap_n, heap_cap;
    frag     *frags, *frags2;              /* (frags_cap) */
    size_t    n_frags, frags_cap;
} session;

static void session_free(session *s) {
    if (s->grow) free(s->ids);
    free(s->buf); free(s->bstart); free(s->cps); free(s->cls);
    free(s->syms); free(s->heap); free(s->frags); free(s->frags2);
    eng_tok_split_free(&s->split);
}

static inline bool halted(const session *s) { return s->oom || s->stop; }

/* realloc *p to hold `need` elements; false (and *p untouched) on failure. */
static bool resize(void *pp, size_t need, size_t elem) {
    void **p = pp;
    void *q = realloc(*p, (need ? need : 1) * elem);
    if (!q) return false;
    *p = q;
    return true;
}

static inline size_t grown(size_t cap, size_t need) { return need > 2 * cap ? need : 2 * cap; }

/* Appends a token: kept while there is room, counted always; past the
 * budget the call stops. */
static void emit(session *s, int32_t id, int64_t off) {
    if (halted(s)) return;
    if (s->n == s->cap && s->grow) {
        size_t c = grown(s->cap, 256);
        if (!resize(&s->ids, c, sizeof *s->ids)) { s->oom = true; return; }
        s->cap = c;
    }
    if (s->n < s->cap) {
        s->ids[s->n] = id;
        if (s->offs) s->offs[s->n] = (int32_t)off;
    }
    if (++s->n > s->limit) s->stop = true;
}

/* Whether a unit of `units` units of text (SPM: escaped bytes; BPE: code
 * points; it has at least units / L tokens) is sure to overrun the budget;
 * stops the call when it is. */
static bool over_budget(session *s, size_t units) {
    if (s->L <= 0 || s->limit == SIZE_MAX) return false;
    if (s->n + (units + (size_t)s->L - 1) / (size_t)s->L <= s->limit) return false;
    s->stop = true;
    return true;
}

static bool reserve_syms(session *s, size_t need) {
    if (need <= s->syms_cap) return true;
    size_t c = grown(s->syms_cap, need);
    if (!resize(&s->syms, c, sizeof *s->syms)) return false;
    s->syms_cap = c;
    return true;
}

static bool reserve_buf(session *s, size_t need) {
    if (need <= s->buf_cap) return true;
    size_t c = grown(s->buf_cap, need);
    if (!resize(&s->buf, c, 1)) return false;
    s->buf_cap = c;
    return true;
}

// ----------------------------------------------------------------------------
// Merging (llama.cpp's work queue), shared by SPM and BPE

static inline bool bigram_before(const session *s, const bigram *a, const bigram *b) {
    if (s->spm) {
        const float sa = s->t->score[a->key], sb = s->t->score[b->key];
        if (sa != sb) return sa > sb;                   /* higher score first */
    } else if (a->key != b->key) {
        return a->key < b->key;                         /* lower rank first */
    }
    return a->left < b->left;                           /* then leftmost */
}

static void heap_push(session *s, const bigram *g) {
    if (s->heap_n == s->heap_cap) {
        size_t c = grown(s->heap_cap, 64);
        if (!resize(&s->heap, c, sizeof *s->heap)) { s->oom = true; return; }
        s->heap_cap = c;
    }
    size_t i = s->heap_n++;
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (!bigram_before(s, g, &s->heap[p])) break;
        s->heap[i] = s->heap[p];
        i = p;
    }
    s->heap[i] = *g;
}

static bigram heap_pop(session *s) {
    bigram top = s->heap[0], last = s->heap[--s->heap_n];
    size_t i = 0, n = s->heap_n;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= n) break;
        if (c + 1 < n && bigram_before(s, &s->heap[c + 1], &s->heap[c])) c++;
        if (!bigram_before(s, &s->heap[c], &last)) break;
        s->heap[i] = s->heap[c];
        i = c;
    }
    if (n) s->heap[i] = last;
    return top;
}

/* The merge of the symbol at l with the next one (ns symbols): its table
 * entry, or NULL when there is none (SPM: nor when the pair only says the
 * two characters sit side by side in some token). */
static const imap_slot *pair_at(const session *s, int32_t l, int32_t ns) {
    if (l < 0) return NULL;
    const int32_t r = l + s->syms[l].nc;
    if (r >= ns) return NULL;
    const int32_t a = s->syms[l].id, b = s->syms[r].id;
    if (a < 0 || b < 0) return NULL;
    const imap_slot *p = imap_find(&s->t->pairs, pair_key(a, b));
    return p && p->v0 >= 0 ? p : NULL;
}

static inline int32_t pair_key_of(const session *s, const imap_slot *p) { return s->spm ? p->v0 : p->v1; }

/* Queues the merge of the symbol at l with the next one when the pair is in the table. */
static void try_add(session *s, int32_t l, int32_t ns) {
    const imap_slot *p = pair_at(s, l, ns);
    if (!p) return;
    const bigram g = {pair_key_of(s, p), l};
    heap_push(s, &g);
}

/* The symbol before the one at l (-1: none): the nearest live index below
 * it, at most the longest merged symbol away. */
static inline int32_t sym_prev(const session *s, int32_t l) {
    int32_t j = l - 1;
    while (j >= 0 && s->syms[j].nc == 0) j--;
    return j;
}

/* Runs the queued merges of ns symbols to the end (llama.cpp's work
 * queue); an entry whose pair has changed since (bigram) is skipped. */
static void merge_all(session *s, int32_t ns) {
    while (s->heap_n && !s->oom) {
        const bigram g = heap_pop(s);
        symbol *l = &s->syms[g.left];
        if (l->nc == 0) continue;
        const imap_slot *p = pair_at(s, g.left, ns);
        if (!p || pair_key_of(s, p) != g.key) continue;
        symbol *r = &s->syms[g.left + l->nc];
        l->id = p->v0;
        l->nc += r->nc;
        r->nc = 0;
        try_add(s, sym_prev(s, g.left), ns);
        try_add(s, g.left, ns);
    }
}

// SPM ------------------------------------------------------------------------

/* The escaped text of a fragment: the dummy prefix (when asked), then each
 * byte, a space as the 3 bytes of U+2581. A position in it is (i, k): byte
 * k of what text byte i (-1: the dummy prefix) becomes. */
typedef struct { const uint8_t *text; int64_t off, len; } spm_text;

static inline bool spm_wide(const spm_text *e, int64_t i) { return i < 0 || e->text[e->off + i] == ' '; }
static inline uint8_t spm_byte(const spm_text *e, int64_t i, int k) {
    return spm_wide(e, i) ? (uint8_t)"\xE2\x96\x81"[k] : e->text[e->off + i];
}
static inline void spm_next(const spm_text *e, int64_t *i, int *k) {
    if (spm_wide(e, *i) && *k < 2) (*k)++;
    else { (*i)++; *k = 0; }
}
/* A position packed into a symbol's `at`, and back. */
static inline uint32_t spm_pos(int64_t i, int k) { return (uint32_t)((i + 1) << 2 | k); }
static inline void spm_unpos(uint32_t at, int64_t *i, int *k) { *i = (int64_t)(at >> 2) - 1; *k = (int)(at & 3); }

/* Emits the symbol at index y of a segment, whose units end at escaped
 * position `end`: its token, or one byte token per escaped byte. */
static void spm_emit(session *s, const spm_text *e, int32_t y, uint32_t end) {
    const eng_tokenizer *t = s->t;
    const symbol *sy = &s->syms[y];
    int64_t i;
    int k;
    spm_unpos(sy->at, &i, &k);
    if (sy->id >= 0 && sy->id < t->n_vocab) {
        emit(s, sy->id, e->off + (i < 0 ? 0 : i));
        return;
    }
    for (uint32_t p = sy->at; p != end; spm_next(e, &i, &k), p = spm_pos(i, k)) {   /* byte fallback */
        const int32_t b = t->byte_tok[spm_byte(e, i, k)];
        if (b >= 0) emit(s, b, e->off + (i < 0 ? 0 : i));
    }
}

/* Merges the ns symbols of a segment that ends at escaped position end,
 * and emits them. */
static void spm_segment(session *s, const spm_text *e, int32_t ns, uint32_t end) {
    merge_all(s, ns);
    for (int32_t y = 0; y < ns && !halted(s); y += s->syms[y].nc)
        spm_emit(s, e, y, y + s->syms[y].nc < ns ? s->syms[y + s->syms[y].nc].at : end);
}

/* One text fragment, segment by segment (see the file top): characters as
 * llama.cpp's SPM cuts the escaped text (a lead byte's length, cut short at
 * the end), each a symbol; a segment ends before a character its last one
 * never sits beside in a token. */
static void spm_fragment(session *s, const uint8_t *text, int64_t off, int64_t len, bool dummy) {
    const eng_tokenizer *t = s->t;
    const spm_text e = {text, off, len};
    int64_t i = dummy ? -1 : 0;
    int k = 0;
    int32_t ns = 0;
    size_t seg_bytes = 0;
    s->heap_n = 0;
    while (i < len && !halted(s)) {
        /* the character at (i, k) */
        const uint32_t at = spm_pos(i, k);
        uint8_t g[4];
        size_t gl = utf8_lead_len(spm_byte(&e, i, k)), n = 0;
        for (; n < gl && i < len; n++, spm_next(&e, &i, &k)) g[n] = spm_byte(&e, i, k);
        int32_t id;
        if (n == 1) {
            id = t->byte_sym[g[0]];
        } else {
            const imap_slot *gs = imap_find(&t->groups, group_key(g, n));
            id = gs ? gs->v0 : -1;
        }
        /* joinable to the segment's last character? */
        const imap_slot *pr = NULL;
        if (ns > 0 && s->syms[ns - 1].id >= 0 && id >= 0)
            pr = imap_find(&t->pairs, pair_key(s->syms[ns - 1].id, id));
        if (ns > 0 && !pr) {
            spm_segment(s, &e, ns, at);
            ns = 0;
            seg_bytes = 0;
            s->heap_n = 0;
            if (halted(s)) return;
        }
        seg_bytes += n;
        if (over_budget(s, seg_bytes)) return;
        if (!reserve_syms(s, (size_t)ns + 1)) { s->oom = true; return; }
        s->syms[ns] = (symbol){id, 1, at};
        if (pr && pr->v0 >= 0) {
            const bigram b = {pr->v0, ns - 1};
            heap_push(s, &b);
        }
        ns++;
    }
    if (ns > 0 && !halted(s)) spm_segment(s, &e, ns, spm_pos(len, 0));
}

// BPE ------------------------------------------------------------------------

/* Emits the symbol at index y of a word of ns symbols. */
static void bpe_emit(session *s, int32_t y, int32_t ns) {
    const eng_tokenizer *t = s->t;
    const symbol *sy = &s->syms[y];
    if (sy->id >= 0 && sy->id < t->n_vocab) {
        emit(s, sy->id, sy->at);
        return;
    }
    if (!t->byte_encode) {   /* raw UTF-8: each byte's <0xNN> token */
        const int32_t b0 = s->bstart[y], b1 = y + sy->nc < ns ? s->bstart[y + sy->nc] : s->bstart[ns];
        for (int32_t k = b0; k < b1; k++)
            if (t->byte_tok[s->buf[k]] >= 0) emit(s, t->byte_tok[s->buf[k]], sy->at);
        return;
    }
    /* not a token: llama.cpp looks each byte of the text up as a token */
    const char *txt = sym_text(t, sy->id);
    for (uint32_t k = 0; k < t->sym_len[sy->id]; k++) {
        int32_t id = smap_get(t, txt + k, 1);
        if (id >= 0 && id < t->n_vocab) emit(s, id, sy->at);
    }
}

/* Runs the merges of a word's ns symbols and emits the result. */
static void bpe_merge_emit(session *s, int32_t ns) {
    s->heap_n = 0;
    for (int32_t k = 0; k + 1 < ns; k++) try_add(s, k, ns);
    merge_all(s, ns);
    for (int32_t y = 0; y < ns && !halted(s); y += s->syms[y].nc) bpe_emit(s, y, ns);
}

/* One pre-tokenizer word, GPT-2 byte-level: code points [a, b) of a
 * fragment f[0, len) that starts at input offset off, the first at f + ip.
 * Symbols are the bytes of their UTF-8 forms (each a character of GPT-2's
 * byte map); a byte's `at` is its input offset (the last byte of a short
 * input sequence for the bytes past it: U+FFFD stands for one byte).
 * Returns the offset in f past the word. */
static size_t bpe_word(session *s, const uint8_t *f, size_t len, int64_t off, size_t ip, size_t a, size_t b) {
    const eng_tokenizer *t = s->t;
    size_t need = 0;
    for (size_t i = a; i < b; i++) need += s->cps[i] < 0x80 ? 1 : s->cps[i] < 0x800 ? 2 : s->cps[i] < 0x10000 ? 3 : 4;
    if (!reserve_syms(s, need)) { s->oom = true; return ip; }
    int32_t ns = 0;
    for (size_t i = a; i < b; i++) {
        size_t cl;
        utf8_decode(f, len, ip, &cl);
        uint8_t u[4];
        size_t l = utf8_encode(s->cps[i], u);
        for (size_t j = 0; j < l; j++, ns++)
            s->syms[ns] = (symbol){t->byte_sym[u[j]], 1, (uint32_t)(off + (int64_t)(ip + (j < cl ? j : cl - 1)))};
        ip += cl;
    }
    if (t->ignore_merges) {   /* a word that is itself a token is taken whole */
        if (!reserve_buf(s, 2 * (size_t)ns)) { s->oom = true; return ip; }
        size_t p = 0;
        for (int32_t k = 0; k < ns; k++) {
            int32_t id = s->syms[k].id;
            memcpy(s->buf + p, sym_text(t, id), t->sym_len[id]);
            p += t->sym_len[id];
        }
        int32_t id = smap_get(t, s->buf, p);
        if (id >= 0 && id < t->n_vocab) {
            emit(s, id, s->syms[0].at);
            return ip;
        }
    }
    bpe_merge_emit(s, ns);
    return ip;
}

/* One word of a raw-UTF-8 BPE (gemma4, sarvam-moe): symbols are the word's
 * characters; one that is no symbol (-1) never merges and falls back to
 * <0xNN> byte tokens. */
static size_t bpe_word_raw(session *s, const uint8_t *f, size_t len, int64_t off, size_t ip, size_t a, size_t b) {
    const eng_tokenizer *t = s->t;
    if (!reserve_syms(s, b - a) || !reserve_buf(s, 4 * (b - a))) { s->oom = true; return ip; }
    if (b - a + 1 > s->bstart_cap) {
        size_t c = grown(s->bstart_cap, b - a + 1);
        if (!resize(&s->bstart, c, sizeof *s->bstart)) { s->oom = true; return ip; }
        s->bstart_cap = c;
    }
    int32_t ns = 0;
    size_t p = 0;
    bool all_nl = true;
    for (size_t i = a; i < b; i++, ns++) {
        size_t cl;
        utf8_decode(f, len, ip, &cl);
        size_t l = utf8_encode(s->cps[i], s->buf + p);
        s->syms[ns] = (symbol){smap_get(t, s->buf + p, l), 1, (uint32_t)(off + (int64_t)ip)};
        s->bstart[ns] = (int32_t)p;
        all_nl = all_nl && s->cps[i] == '\n';
        p += l;
        ip += cl;
    }
    s->bstart[ns] = (int32_t)p;
    /* ignore_merges, and gemma4's rule for a word of newlines only */
    if (t->ignore_merges || (all_nl && t->nl_whole)) {
        int32_t id = smap_get(t, s->buf, p);
        if (id >= 0 && id < t->n_vocab) {
            emit(s, id, s->syms[0].at);
            return ip;
        }
    }
    bpe_merge_emit(s, ns);
    return ip;
}

/* One raw fragment, BPE: its code points split into words, each merged. */
static void bpe_fragment(session *s, const uint8_t *text, int64_t off, int64_t len) {
    const eng_tokenizer *t = s->t;
    if ((size_t)len > s->cp_cap) {
        size_t c = grown(s->cp_cap, (size_t)len);
        if (!resize(&s->cps, c, sizeof *s->cps) || !resize(&s->cls, c, 1) || !eng_tok_split_reserve(&s->split, c)) {
            s->oom = true;
            return;
        }
        s->cp_cap = c;
    }
    const uint8_t *f = text + off;
    size_t nc = 0;
    for (size_t i = 0; i < (size_t)len;) {
        size_t l;
        uint32_t c = utf8_decode(f, (size_t)len, i, &l);
        if (c == ' ' && t->escape_ws) c = 0x2581;   /* llama_escape_whitespace, before the split */
        s->cps[nc] = c;
        s->cls[nc] = c < 0x80 ? eng_uni_bmp[c] : eng_uni_class(c);
        nc++;
        i += l;
    }
    size_t nw = 0;
    const int32_t *ends = eng_tok_pre_split(t, &s->split, s->cps, s->cls, nc, &nw);
    if (!ends) {
        s->oom = true;
        return;
    }
    size_t a = 0, ip = 0;   /* the word's first code point and its offset in the fragment */
    for (size_t w = 0; w < nw && !halted(s); w++) {
        const size_t b = (size_t)ends[w];
        if (over_budget(s, b - a)) return;   /* b - a code points: at least as many bytes */
        ip = t->byte_encode ? bpe_word(s, f, (size_t)len, off, ip, a, b) : bpe_word_raw(s, f, (size_t)len, off, ip, a, b);
        a = b;
    }
}

// Special tokens ------------------------------------------------------------

static bool push_frag(session *s, frag **v, size_t *n, frag f) {
    if (*n == s->frags_cap) {
        size_t c = grown(s->frags_cap, 16);
        if (!resize(&s->frags, c, sizeof(frag)) || !resize(&s->frags2, c, sizeof(frag))) return false;
        s->frags_cap = c;   /* *v follows: it points at s->frags or s->frags2 */
    }
    (*v)[(*n)++] = f;
    return true;
}

/* isspace() in the C locale, as tokenizer_st_partition strips with it. */
static inline bool is_c_space(uint8_t c) { return c == ' ' || (c >= '\t' && c <= '\r'); }

/* RWKV: the longest token starting at each position, greedily (the text of
 * a token is unique: a duplicated text maps to its last id, as llama.cpp's
 * trie keeps the last insert). */
static void rwkv_fragment(session *s, const uint8_t *text, int64_t off, int64_t len) {
    const eng_tokenizer *t = s->t;
    for (int64_t pos = off, end = off + len; pos < end && !halted(s);) {
        int64_t l = end - pos < t->max_tok_len ? end - pos : t->max_tok_len;
        int32_t id = -1;
        for (; l > 0; l--)
            if ((id = smap_get(t, text + pos, (size_t)l)) >= 0 && id < t->n_vocab) break;
        if (l == 0) {   /* no token starts with this byte */
            if (t->unk < 0) { s->oom = true; return; }
            id = t->unk;
            l = 1;
        }
        emit(s, id, pos);
        pos += l;
    }
}

/* llama.cpp's tokenizer_st_partition: for each special token, longest first,
 * every raw fragment is cut at its leftmost non-overlapping occurrences; a
 * token with LSTRIP (RSTRIP) takes the whitespace before (after) it along.
 * CONTROL and UNKNOWN tokens take part only with parse_special; USER_DEFINED
 * ones always do. A trie pass first finds which special texts occur at all,
 * so only those are searched for. */
static void partition(session *s, const uint8_t *text, int64_t len, bool parse_special) {
    const eng_tokenizer *t = s->t;
    s->n_frags = 0;
    if (len == 0) return;   /* no fragment at all: "" gives no token, not a lone dummy prefix */
    if (!push_frag(s, &s->frags, &s->n_frags, (frag){0, (int32_t)len, -1})) { s->oom = true; return; }
    if (t->n_special == 0) return;
    uint8_t *present = calloc((size_t)t->n_special, 1);
    if (!present) { s->oom = true; return; }
    bool any = false;
    for (int64_t p = 0; p < len; p++) {
        uint8_t c = text[p];
        if (!(t->special_first[c >> 3] & (1u << (c & 7)))) continue;
        int32_t node = 0;
        for (int64_t q = p; q < len; q++) {
            const imap_slot *ch = imap_find(&t->trie, ((uint64_t)node << 8) | text[q]);
            if (!ch) break;
            node = ch->v0;
            int32_t k = t->trie_term[node];
            if (k >= 0 && (parse_special || !(t->attr[t->special[k]] & (A_CONTROL | A_UNKNOWN)))) present[k] = any = 1;
        }
    }
    for (int32_t k = 0; any && k < t->n_special; k++) {
        if (!present[k]) continue;
        int32_t id = t->special[k];
        const char *st = sym_text(t, id);
        size_t sl = t->sym_len[id];
        bool lstrip = t->attr[id] & A_LSTRIP, rstrip = t->attr[id] & A_RSTRIP;
        size_t n2 = 0;
        for (size_t i = 0; i < s->n_frags; i++) {
            frag f = s->frags[i];
            bool ok = true;
            if (f.tok >= 0) {
                ok = push_frag(s, &s->frags2, &n2, f);
            } else {
                int64_t pos = f.off, end = f.off + f.len;
                while (ok && pos < end) {
                    const uint8_t *hit = memmem(text + pos, (size_t)(end - pos), st, sl);
                    if (!hit) break;
                    int64_t h = hit - text, l = h;
                    while (lstrip && l > pos && is_c_space(text[l - 1])) l--;   /* LSTRIP: eat the spaces before */
                    if (l > pos) ok = push_frag(s, &s->frags2, &n2, (frag){(int32_t)pos, (int32_t)(l - pos), -1});
                    ok = ok && push_frag(s, &s->frags2, &n2, (frag){(int32_t)h, (int32_t)sl, id});
                    pos = h + (int64_t)sl;
                    while (rstrip && pos < end && is_c_space(text[pos])) pos++;   /* RSTRIP: and after */
                }
                if (ok && pos < end) ok = push_frag(s, &s->frags2, &n2, (frag){(int32_t)pos, (int32_t)(end - pos), -1});
            }
            if (!ok) { s->oom = true; free(present); return; }
        }
        frag *tmp = s->frags;
        s->frags = s->frags2;
        s->frags2 = tmp;
        s->n_frags = n2;
    }
    free(present);
}

// ----------------------------------------------------------------------------
// Public tokenize / detokenize

/* One call: BOS, the text's fragments in order, EOS, into s's output;
 * stops early when s->stop is set (the budget). */
static void run(session *s, const uint8_t *u, size_t len, bool add_bos, bool add_eos, bool parse_special) {
    const eng_tokenizer *t = s->t;
    if (add_bos && t->bos >= 0) emit(s, t->bos, 0);
    partition(s, u, (int64_t)len, parse_special);
    bool prev_special = true;   /* SPM: the dummy prefix starts the text and follows special tokens */
    for (size_t i = 0; i < s->n_frags && !halted(s); i++) {
        frag f = s->frags[i];
        if (f.tok >= 0) {
            emit(s, f.tok, f.off);
            prev_special = true;
            continue;
        }
        if (s->spm) spm_fragment(s, u, f.off, f.len, t->add_space_prefix && prev_special);
        else if (t->type == ENG_VOCAB_RWKV) rwkv_fragment(s, u, f.off, f.len);
        else bpe_fragment(s, u, f.off, f.len);
        prev_special = false;
    }
    if (add_eos && t->eos >= 0) emit(s, t->eos, (int64_t)len);
}

int32_t eng_tokenize(const eng_tokenizer *t, const char *text, size_t len, bool add_bos, bool add_eos,
                     bool parse_special, int32_t *out, int32_t cap, int32_t *offsets) {
    ENG_ASSERT(t);
    ENG_ASSERT(text || len == 0);
    ENG_ASSERT(out || cap <= 0);
    if (len > (size_t)INT32_MAX / 4) return TOK_FAIL;
    session s = {.t = t, .spm = t->type == ENG_VOCAB_SPM, .ids = out, .offs = offsets,
                 .cap = cap > 0 ? (size_t)cap : 0, .limit = SIZE_MAX};
    run(&s, text ? (const uint8_t *)text : (const uint8_t *)"", len, add_bos, add_eos, parse_special);
    const int32_t rc = s.oom ? TOK_FAIL : s.n > s.cap ? -(int32_t)s.n : (int32_t)s.n;
    session_free(&s);
    return rc;
}

int32_t eng_tokenize_upto(const eng_tokenizer *t, const char *text, size_t len, bool add_bos, bool add_eos,
                          bool parse_special, int32_t max_tokens, int32_t *out, int32_t *offsets, bool *more) {
    ENG_ASSERT(t && more);
    ENG_ASSERT(text || len == 0);
    ENG_ASSERT(out || max_tokens <= 0);
    *more = false;
    if (len > (size_t)INT32_MAX / 4) return TOK_FAIL;
    const size_t max = max_tokens > 0 ? (size_t)max_tokens : 0;
    /* the whole text first: BOS and EOS, and at least len / L tokens between */
    const size_t ends = (size_t)(add_bos && t->bos >= 0) + (size_t)(add_eos && t->eos >= 0);
    if (ends > max ||
        (t->bytes_bound && (len + (size_t)t->max_token_bytes - 1) / (size_t)t->max_token_bytes > max - ends)) {
        *more = true;
        return 0;
    }
    session s = {.t = t, .spm = t->type == ENG_VOCAB_SPM, .ids = out, .offs = offsets, .cap = max, .limit = max,
                 .L = t->units_bound ? t->max_token_units : 0};
    run(&s, text ? (const uint8_t *)text : (const uint8_t *)"", len, add_bos, add_eos, parse_special);
    const int32_t rc = s.oom ? TOK_FAIL : (int32_t)(s.n < max ? s.n : max);
    *more = !s.oom && s.stop;
    session_free(&s);
    return rc;
}

int32_t *eng_tokenize_alloc(const eng_tokenizer *t, const char *text, size_t len, bool add_bos, bool add_eos,
                            bool parse_special, int32_t *n) {
    ENG_ASSERT(t && n);
    ENG_ASSERT(text || len == 0);
    if (len > (size_t)INT32_MAX / 4) return NULL;
    session s = {.t = t, .spm = t->type == ENG_VOCAB_SPM, .grow = true, .limit = SIZE_MAX};
    run(&s, text ? (const uint8_t *)text : (const uint8_t *)"", len, add_bos, add_eos, parse_special);
    int32_t *ids = NULL;
    if (!s.oom) {
        ids = s.n ? realloc(s.ids, s.n * sizeof *ids) : malloc(sizeof *ids);   /* trimmed to the count */
        if (ids) {
            if (s.n) s.ids = NULL;
            *n = (int32_t)s.n;
        }
    }
    session_free(&s);
    return ids;
}

static int hexval(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
}

/* Appends txt[j..tl) to out (when it fits in cap; *total counts every byte), U+2581 as ' '. */
static void put_unescaped(char *out, size_t cap, size_t *total, const char *txt, size_t j, size_t tl) {
    while (j < tl) {
        const char *u = memmem(txt + j, tl - j, "\xE2\x96\x81", 3);
        size_t stop = u ? (size_t)(u - txt) : tl, k = stop - j + (u ? 1 : 0);
        if (*total + k <= cap) {
            memcpy(out + *total, txt + j, stop - j);
            if (u) out[*total + stop - j] = ' ';
        }
        *total += k;
        j = stop + (u ? 3 : 0);
    }
}

int64_t eng_detokenize(const eng_tokenizer *t, const int32_t *ids, int32_t n, bool render_special, char *out,
                       size_t cap) {
    ENG_ASSERT(t);
    ENG_ASSERT(ids || n <= 0);
    ENG_ASSERT(out || cap == 0);
    size_t total = 0;
#define PUT(p, k) do { size_t k_ = (k); if (k_ && total + k_ <= cap) memcpy(out + total, (p), k_); total += k_; } while (0)
    bool spm = t->type == ENG_VOCAB_SPM;
    bool strip = spm && t->add_space_prefix;   /* the next text piece starts with the dummy space */
    for (int32_t i = 0; i < n; i++) {
        int32_t id = ids[i];
        if (id < 0 || id >= t->n_vocab) continue;
        const char *txt = sym_text(t, id);
        size_t tl = t->sym_len[id];
        uint16_t at = t->attr[id];
        if (at & A_SPECIAL) {
            if (render_special || !(at & (A_CONTROL | A_UNKNOWN))) PUT(txt, tl);
            strip = spm && t->add_space_prefix;
            continue;
        }
        if (t->type == ENG_VOCAB_RWKV) {   /* the unescaped bytes */
            PUT(txt, tl);
            continue;
        }
        bool byte_tok = (at & A_BYTE) && tl == 6 && !memcmp(txt, "<0x", 3) && txt[5] == '>' &&
                        hexval(txt[3]) >= 0 && hexval(txt[4]) >= 0;
        if (!spm && !t->byte_encode) {   /* raw UTF-8 BPE: <0xNN> bytes, U+2581 back to spaces when escaped */
            if (byte_tok) {
                uint8_t b = (uint8_t)(hexval(txt[3]) * 16 + hexval(txt[4]));
                PUT(&b, 1);
                continue;
            }
            if (t->escape_ws) put_unescaped(out, cap, &total, txt, 0, tl);
            else PUT(txt, tl);
            continue;
        }
        if (!spm) {   /* GPT-2: undo the byte-to-unicode map */
            for (size_t j = 0; j < tl;) {
                size_t l;
                uint32_t c = utf8_decode((const uint8_t *)txt, tl, j, &l);
                if (c < 324 && t->gpt2_inv[c] >= 0) {
                    uint8_t b = (uint8_t)t->gpt2_inv[c];
                    PUT(&b, 1);
                } else {
                    PUT(txt + j, l);
                }
                j += l;
            }
            continue;
        }
        if (byte_tok) {
            uint8_t b = (uint8_t)(hexval(txt[3]) * 16 + hexval(txt[4]));
            PUT(&b, 1);
            strip = false;
            continue;
        }
        size_t j = 0;
        if (strip && tl >= 3 && !memcmp(txt, "\xE2\x96\x81", 3)) j = 3;
        strip = false;
        put_unescaped(out, cap, &total, txt, j, tl);
    }
#undef PUT
    if (total < cap) out[total] = '\0';
    return total <= cap ? (int64_t)total : -(int64_t)total;
}
