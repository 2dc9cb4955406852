/*
 * engine/tokenizer_core.c: tokenizing and detokenizing (contract: tokenizer.h),
 * with llama.cpp's semantics (src/llama-vocab.cpp, src/unicode.cpp), so
 * that prompts get the token ids a llama.cpp server would give them. The
 * tables come from tokenizer_load.c, the BPE words from tokenizer_pre.c.
 *
 * SPM ("llama"): spaces become U+2581, a dummy prefix goes first, and the
 * characters merge best score first (then leftmost). A text boundary
 * between two characters that never sit side by side in a token can never
 * be crossed by a merge, so the text is cut there into independent segments
 * merged one by one: the result is that of llama.cpp's one queue over the
 * whole text, and each queue stays small. Invalid UTF-8 falls back to
 * <0xNN> tokens, exact bytes kept.
 * BPE ("gpt2"): each pre-tokenizer word merges lowest rank first (then
 * leftmost), over GPT-2's byte map or raw UTF-8; invalid UTF-8 decodes
 * leniently (U+FFFD) before the byte map.
 * RWKV: greedy longest match from each position.
 * Special tokens follow llama.cpp's tokenizer_st_partition (partition
 * below). Decoding is the exact inverse of tokenizing (no clean_spaces
 * pass), except where the input is not kept: SPM reads U+2581 as a space,
 * GPT-2 replaces invalid UTF-8.
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
// Tokenizing: a session holds one call's scratch buffers

typedef struct { int32_t id, start, n, prev, next; } symbol;   /* n == 0: merged away */
typedef struct { float score; int32_t rank, left, right, id_right, merged; } bigram;
typedef struct { int64_t off, len; int32_t tok; } frag;           /* tok >= 0: a special token */

typedef struct {
    const eng_tokenizer *t;
    bool      spm, oom;                    /* oom: out of memory, or PCRE2 failed: the call fails */
    int32_t  *ids, *offs;                  /* output (n, cap) */
    size_t    n, cap;
    uint8_t  *buf;                         /* SPM: escaped text; BPE: a word's encoded text */
    int32_t  *orig;                        /* SPM: input offset of each buf byte */
    size_t    buf_cap;
    uint32_t *cps;                         /* BPE: code points of a fragment (cp_cap) */
    uint8_t  *cls, *clen;                  /* their classes and input lengths */
    int32_t  *corig;                       /* their input offsets */
    int32_t  *bstart;                      /* raw BPE: each symbol's offset in buf */
    size_t    cp_cap, bstart_cap;
    tok_split split;                       /* the pre-tokenizer's scratch */
    symbol   *syms;                        /* (syms_cap) */
    size_t    syms_cap;
    bigram   *heap;                        /* binary heap, best first */
    size_t    heap_n, heap_cap;
    frag     *frags, *frags2;              /* (frags_cap) */
    size_t    n_frags, frags_cap;
} session;

static void session_free(session *s) {
    free(s->ids); free(s->offs); free(s->buf); free(s->orig);
    free(s->cps); free(s->cls); free(s->clen); free(s->corig); free(s->bstart);
    free(s->syms); free(s->heap); free(s->frags); free(s->frags2);
    eng_tok_split_free(&s->split);
}

/* realloc *p to hold `need` elements; false (and *p untouched) on failure. */
static bool resize(void *pp, size_t need, size_t elem) {
    void **p = pp;
    void *q = realloc(*p, (need ? need : 1) * elem);
    if (!q) return false;
    *p = q;
    return true;
}

static inline size_t grown(size_t cap, size_t need) { return need > 2 * cap ? need : 2 * cap; }

static void emit(session *s, int32_t id, int64_t off) {
    if (s->n == s->cap) {
        size_t c = grown(s->cap, 256);
        if (!resize(&s->ids, c, sizeof *s->ids) || !resize(&s->offs, c, sizeof *s->offs)) { s->oom = true; return; }
        s->cap = c;
    }
    s->ids[s->n] = id;
    s->offs[s->n] = (int32_t)off;
    s->n++;
}

static bool reserve_syms(session *s, size_t need) {
    if (need <= s->syms_cap) return true;
    size_t c = grown(s->syms_cap, need);
    if (!resize(&s->syms, c, sizeof *s->syms)) return false;
    s->syms_cap = c;
    return true;
}

static inline bool bigram_before(const bigram *a, const bigram *b, bool spm) {
    if (spm) {
        if (a->score != b->score) return a->score > b->score;   /* higher score first */
    } else if (a->rank != b->rank) {
        return a->rank < b->rank;                               /* lower rank first */
    }
    return a->left < b->left;                                   /* then leftmost */
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
        if (!bigram_before(g, &s->heap[p], s->spm)) break;
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
        if (c + 1 < n && bigram_before(&s->heap[c + 1], &s->heap[c], s->spm)) c++;
        if (!bigram_before(&s->heap[c], &last, s->spm)) break;
        s->heap[i] = s->heap[c];
        i = c;
    }
    if (n) s->heap[i] = last;
    return top;
}

/* Queues the merge of symbols l and r when the pair is in the table. */
static void try_add(session *s, int32_t l, int32_t r) {
    if (l < 0 || r < 0) return;
    int32_t a = s->syms[l].id, b = s->syms[r].id;
    if (a < 0 || b < 0) return;
    const imap_slot *p = imap_find(&s->t->pairs, pair_key(a, b));
    if (!p || p->v0 < 0) return;
    bigram g = {s->spm ? s->t->score[p->v0] : 0.0f, p->v1, l, r, b, p->v0};
    heap_push(s, &g);
}

/* Runs the queued merges to the end (llama.cpp's work_queue loop). A stale entry
 * (either side merged away, or the right side grown since) is skipped. */
static void merge_all(session *s) {
    while (s->heap_n) {
        bigram g = heap_pop(s);
        symbol *l = &s->syms[g.left], *r = &s->syms[g.right];
        if (l->n == 0 || r->n == 0 || l->next != g.right || r->id != g.id_right) continue;
        l->id = g.merged;
        l->n += r->n;
        r->n = 0;
        l->next = r->next;
        if (l->next >= 0) s->syms[l->next].prev = g.left;
        try_add(s, l->prev, g.left);
        try_add(s, g.left, s->syms[g.left].next);
    }
}

// SPM ------------------------------------------------------------------------

static void spm_emit(session *s, const symbol *y) {
    const eng_tokenizer *t = s->t;
    if (y->id >= 0 && y->id < t->n_vocab) {
        emit(s, y->id, s->orig[y->start]);
        return;
    }
    for (int32_t k = y->start; k < y->start + y->n; k++)   /* byte fallback */
        if (t->byte_tok[s->buf[k]] >= 0) emit(s, t->byte_tok[s->buf[k]], s->orig[k]);
}

/* One text fragment: spaces become U+2581, the dummy prefix goes first when
 * asked, then characters are merged segment by segment (see the file top). */
static void spm_fragment(session *s, const uint8_t *text, int64_t off, int64_t len, bool dummy) {
    const eng_tokenizer *t = s->t;
    size_t need = (size_t)len * 3 + 3;
    if (need > s->buf_cap) {
        size_t c = grown(s->buf_cap, need);
        if (!resize(&s->buf, c, 1) || !resize(&s->orig, c, sizeof *s->orig)) { s->oom = true; return; }
        s->buf_cap = c;
    }
    size_t p = 0;
    for (int64_t i = dummy ? -1 : 0; i < len; i++) {
        if (i < 0 || text[off + i] == ' ') {
            memcpy(s->buf + p, "\xE2\x96\x81", 3);
            s->orig[p] = s->orig[p + 1] = s->orig[p + 2] = (int32_t)(off + (i < 0 ? 0 : i));
            p += 3;
        } else {
            s->buf[p] = text[off + i];
            s->orig[p++] = (int32_t)(off + i);
        }
    }
    if (!reserve_syms(s, p)) { s->oom = true; return; }
    int32_t ns = 0;
    for (size_t q = 0; q < p;) {
        size_t gl = group_len(s->buf + q, p - q);
        int32_t id;
        if (gl == 1) {
            id = t->byte_sym[s->buf[q]];
        } else {
            const imap_slot *g = imap_find(&t->groups, group_key(s->buf + q, gl));
            id = g ? g->v0 : -1;
        }
        s->syms[ns++] = (symbol){id, (int32_t)q, (int32_t)gl, -1, -1};
        q += gl;
    }
    int32_t a = 0;
    s->heap_n = 0;
    for (int32_t k = 0; k < ns; k++) {
        symbol *y = &s->syms[k];
        y->prev = k > a ? k - 1 : -1;
        y->next = -1;
        if (k + 1 < ns && y->id >= 0 && s->syms[k + 1].id >= 0) {
            int32_t b = s->syms[k + 1].id;
            const imap_slot *pr = imap_find(&t->pairs, pair_key(y->id, b));
            if (pr) {   /* joinable: the segment goes on */
                y->next = k + 1;
                if (pr->v0 >= 0) {
                    bigram g = {t->score[pr->v0], 0, k, k + 1, b, pr->v0};
                    heap_push(s, &g);
                }
                continue;
            }
        }
        merge_all(s);
        for (int32_t i = a; i >= 0; i = s->syms[i].next) spm_emit(s, &s->syms[i]);
        a = k + 1;
    }
}

// BPE ------------------------------------------------------------------------

static void bpe_emit(session *s, const symbol *y) {
    const eng_tokenizer *t = s->t;
    if (y->id >= 0 && y->id < t->n_vocab) {
        emit(s, y->id, y->start);
        return;
    }
    if (!t->byte_encode) {   /* raw UTF-8: each byte's <0xNN> token */
        const uint8_t *b = s->buf + s->bstart[y - s->syms];
        for (int32_t k = 0; k < y->n; k++)
            if (t->byte_tok[b[k]] >= 0) emit(s, t->byte_tok[b[k]], y->start);
        return;
    }
    /* not a token: llama.cpp looks each byte of the text up as a token */
    const char *txt = sym_text(t, y->id);
    for (uint32_t k = 0; k < t->sym_len[y->id]; k++) {
        int32_t id = smap_get(t, txt + k, 1);
        if (id >= 0 && id < t->n_vocab) emit(s, id, y->start);
    }
}

/* Runs the merges of a word's ns symbols and emits the result. */
static void bpe_merge_emit(session *s, int32_t ns) {
    s->syms[ns - 1].next = -1;
    s->heap_n = 0;
    for (int32_t k = 0; k + 1 < ns; k++) try_add(s, k, k + 1);
    merge_all(s);
    for (int32_t i = 0; i >= 0; i = s->syms[i].next) bpe_emit(s, &s->syms[i]);
}

static bool reserve_buf(session *s, size_t need) {
    if (need <= s->buf_cap) return true;
    size_t c = grown(s->buf_cap, need);
    if (!resize(&s->buf, c, 1)) return false;
    s->buf_cap = c;   /* orig is unused for BPE */
    return true;
}

/* One pre-tokenizer word, GPT-2 byte-level: code points [a, b) of the
 * fragment. Symbols are the bytes of their UTF-8 forms (each a character of
 * GPT-2's byte map); symbol.start holds the input offset. */
static void bpe_word(session *s, size_t a, size_t b) {
    const eng_tokenizer *t = s->t;
    if (!reserve_syms(s, 4 * (b - a))) { s->oom = true; return; }
    int32_t ns = 0;
    for (size_t i = a; i < b; i++) {
        uint8_t u[4];
        size_t l = utf8_encode(s->cps[i], u);
        for (size_t j = 0; j < l; j++) {
            int32_t at = s->corig[i] + (int32_t)(j < s->clen[i] ? j : s->clen[i] - 1u);
            s->syms[ns] = (symbol){t->byte_sym[u[j]], at, 1, ns - 1, ns + 1};
            ns++;
        }
    }
    if (t->ignore_merges) {   /* a word that is itself a token is taken whole */
        if (!reserve_buf(s, 2 * (size_t)ns)) { s->oom = true; return; }
        size_t p = 0;
        for (int32_t k = 0; k < ns; k++) {
            int32_t id = s->syms[k].id;
            memcpy(s->buf + p, sym_text(t, id), t->sym_len[id]);
            p += t->sym_len[id];
        }
        int32_t id = smap_get(t, s->buf, p);
        if (id >= 0 && id < t->n_vocab) {
            emit(s, id, s->syms[0].start);
            return;
        }
    }
    bpe_merge_emit(s, ns);
}

/* One word of a raw-UTF-8 BPE (gemma4, sarvam-moe, whitespace): symbols are
 * the word's characters; one that is no symbol (-1) never merges and falls
 * back to <0xNN> byte tokens. */
static void bpe_word_raw(session *s, size_t a, size_t b) {
    const eng_tokenizer *t = s->t;
    size_t nb = 4 * (b - a);
    if (!reserve_syms(s, b - a) || !reserve_buf(s, nb)) { s->oom = true; return; }
    if (b - a > s->bstart_cap) {
        size_t c = grown(s->bstart_cap, b - a);
        if (!resize(&s->bstart, c, sizeof *s->bstart)) { s->oom = true; return; }
        s->bstart_cap = c;
    }
    int32_t ns = 0;
    size_t p = 0;
    bool all_nl = true;
    for (size_t i = a; i < b; i++) {
        size_t l = utf8_encode(s->cps[i], s->buf + p);
        s->syms[ns] = (symbol){smap_get(t, s->buf + p, l), s->corig[i], (int32_t)l, ns - 1, ns + 1};
        s->bstart[ns++] = (int32_t)p;
        all_nl = all_nl && s->cps[i] == '\n';
        p += l;
    }
    /* ignore_merges, and gemma4's rule for a word of newlines only */
    if (t->ignore_merges || (all_nl && t->nl_whole)) {
        int32_t id = smap_get(t, s->buf, p);
        if (id >= 0 && id < t->n_vocab) {
            emit(s, id, s->syms[0].start);
            return;
        }
    }
    bpe_merge_emit(s, ns);
}

/* One raw fragment, BPE: its code points split into words, each word merged. */
static void bpe_fragment(session *s, const uint8_t *text, int64_t off, int64_t len) {
    const eng_tokenizer *t = s->t;
    if ((size_t)len > s->cp_cap) {
        size_t c = grown(s->cp_cap, (size_t)len);
        if (!resize(&s->cps, c, sizeof *s->cps) || !resize(&s->cls, c, 1) || !resize(&s->clen, c, 1) ||
            !resize(&s->corig, c, sizeof *s->corig) || !eng_tok_split_reserve(&s->split, c)) {
            s->oom = true;
            return;
        }
        s->cp_cap = c;
    }
    size_t nc = 0;
    for (size_t i = 0; i < (size_t)len;) {
        size_t l;
        uint32_t c = utf8_decode(text + off, (size_t)len, i, &l);
        if (c == ' ' && t->escape_ws) c = 0x2581;   /* llama_escape_whitespace, before the split */
        s->cps[nc] = c;
        s->cls[nc] = c < 0x80 ? eng_uni_bmp[c] : eng_uni_class(c);
        s->clen[nc] = (uint8_t)l;
        s->corig[nc] = (int32_t)(off + (int64_t)i);
        nc++;
        i += l;
    }
    size_t nw = 0;
    const int32_t *ends = eng_tok_pre_split(t, &s->split, s->cps, s->cls, nc, &nw);
    if (!ends) {
        s->oom = true;
        return;
    }
    size_t a = 0;
    for (size_t w = 0; w < nw && !s->oom; w++) {
        if (t->byte_encode) bpe_word(s, a, (size_t)ends[w]);
        else bpe_word_raw(s, a, (size_t)ends[w]);
        a = (size_t)ends[w];
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
    for (int64_t pos = off, end = off + len; pos < end && !s->oom;) {
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
    if (!push_frag(s, &s->frags, &s->n_frags, (frag){0, len, -1})) { s->oom = true; return; }
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
                    if (l > pos) ok = push_frag(s, &s->frags2, &n2, (frag){pos, l - pos, -1});
                    ok = ok && push_frag(s, &s->frags2, &n2, (frag){h, (int64_t)sl, id});
                    pos = h + (int64_t)sl;
                    while (rstrip && pos < end && is_c_space(text[pos])) pos++;   /* RSTRIP: and after */
                }
                if (ok && pos < end) ok = push_frag(s, &s->frags2, &n2, (frag){pos, end - pos, -1});
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

int32_t eng_tokenize(const eng_tokenizer *t, const char *text, size_t len, bool add_bos, bool add_eos,
                     bool parse_special, int32_t *out, int32_t cap, int32_t *offsets) {
    ENG_ASSERT(t);
    ENG_ASSERT(text || len == 0);
    if (len > (size_t)INT32_MAX / 4) return TOK_FAIL;
    const uint8_t *u = text ? (const uint8_t *)text : (const uint8_t *)"";
    session s = {.t = t, .spm = t->type == ENG_VOCAB_SPM};
    if (add_bos && t->bos >= 0) emit(&s, t->bos, 0);
    partition(&s, u, (int64_t)len, parse_special);
    bool prev_special = true;   /* SPM: the dummy prefix starts the text and follows special tokens */
    for (size_t i = 0; i < s.n_frags && !s.oom; i++) {
        frag f = s.frags[i];
        if (f.tok >= 0) {
            emit(&s, f.tok, f.off);
            prev_special = true;
            continue;
        }
        if (s.spm) spm_fragment(&s, u, f.off, f.len, t->add_space_prefix && prev_special);
        else if (t->type == ENG_VOCAB_RWKV) rwkv_fragment(&s, u, f.off, f.len);
        else bpe_fragment(&s, u, f.off, f.len);
        prev_special = false;
    }
    if (add_eos && t->eos >= 0) emit(&s, t->eos, (int64_t)len);
    int32_t rc;
    if (s.oom) {
        rc = TOK_FAIL;
    } else if (s.n > (size_t)(cap > 0 ? cap : 0)) {
        rc = -(int32_t)s.n;
    } else {
        if (s.n) memcpy(out, s.ids, s.n * sizeof *out);
        if (s.n && offsets) memcpy(offsets, s.offs, s.n * sizeof *offsets);
        rc = (int32_t)s.n;
    }
    session_free(&s);
    return rc;
}

int32_t *eng_tokenize_alloc(const eng_tokenizer *t, const char *text, size_t len, bool add_bos, bool add_eos,
                            bool parse_special, int32_t *n) {
    int32_t cap = len < (size_t)INT32_MAX / 8 ? (int32_t)len + 16 : INT32_MAX / 2;
    for (;;) {
        int32_t *ids = malloc((size_t)cap * sizeof *ids);
        if (!ids) return NULL;
        const int32_t k = eng_tokenize(t, text, len, add_bos, add_eos, parse_special, ids, cap, NULL);
        if (k >= 0) {
            *n = k;
            return ids;
        }
        free(ids);
        if (k == TOK_FAIL) return NULL;
        cap = -k;
    }
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
