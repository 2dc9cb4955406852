/*
 * engine/tokenizer_int.h: what the tokenizer's files share (internal to
 * tokenizer_load.c, tokenizer_pre.c and tokenizer_core.c): the tokenizer object
 * and its symbol table, the hash maps, UTF-8 as llama.cpp reads it, and the
 * pre-tokenizer steps.
 *
 * Symbols: every vocabulary token (ids 0..n_vocab-1) plus pseudo symbols
 * (ids n_vocab..n_sym-1) for texts that occur while merging but are not
 * tokens. Symbol texts are unique (a duplicated token text maps to its last
 * id, as llama.cpp's token_to_id does), so comparing ids compares texts and
 * a merge is one integer-keyed lookup: pairs[(left, right)] = (merged, rank).
 */
#ifndef ENG_TOKENIZER_INT_H
#define ENG_TOKENIZER_INT_H

#define XXH_INLINE_ALL
#define PCRE2_CODE_UNIT_WIDTH 32   /* regexes run over code points (or collapsed units), one unit each */
#include <pcre2.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>
#include <xxhash.h>

#include "tokenizer.h"
#include "tokenizer_unicode.h"

/* GGUF token_type values (llama.cpp's llama_token_type). */
enum { TT_UNDEFINED = 0, TT_NORMAL = 1, TT_UNKNOWN = 2, TT_CONTROL = 3,
       TT_USER_DEFINED = 4, TT_UNUSED = 5, TT_BYTE = 6 };

/* Token attributes, llama.cpp's llama_token_attr bits: the token type, plus
 * what llama.cpp adds at load (CONTROL for end-of-generation and FIM texts,
 * LSTRIP/RSTRIP for some models' special tokens). */
enum { A_UNKNOWN = 1 << 0, A_UNUSED = 1 << 1, A_NORMAL = 1 << 2, A_CONTROL = 1 << 3, A_USER_DEFINED = 1 << 4,
       A_BYTE = 1 << 5, A_LSTRIP = 1 << 7, A_RSTRIP = 1 << 8 };
#define A_SPECIAL (A_CONTROL | A_USER_DEFINED | A_UNKNOWN)   /* matched whole by the special-token pass */

/* Returned by eng_tokenize when scratch memory cannot be had or len is absurd. */
#define TOK_FAIL INT32_MIN

// ----------------------------------------------------------------------------
// UTF-8, as llama.cpp reads it

/* Bytes in the UTF-8 sequence a lead byte announces (llama.cpp's unicode_len_utf8;
 * continuation and invalid bytes count 1). */
static inline size_t utf8_lead_len(uint8_t b) {
    static const uint8_t lut[16] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4};
    return lut[b >> 4];
}

/* Decodes the code point at s[i] (i < n) leniently, as llama.cpp's
 * unicode_cpt_from_utf8: continuation bytes are checked, overlong forms and
 * surrogates are accepted; an invalid sequence, or one above U+10FFFF, gives
 * U+FFFD with length 1. */
static inline uint32_t utf8_decode(const uint8_t *s, size_t n, size_t i, size_t *len) {
    uint8_t b = s[i];
    *len = 1;
    if (b < 0x80) return b;
    if (!(b & 0x40)) return 0xFFFD;
#define CONT(k) (i + (k) < n && (s[i + (k)] & 0xC0) == 0x80)
    if (!(b & 0x20)) {
        if (!CONT(1)) return 0xFFFD;
        *len = 2;
        return ((uint32_t)(b & 0x1F) << 6) | (s[i + 1] & 0x3F);
    }
    if (!(b & 0x10)) {
        if (!CONT(1) || !CONT(2)) return 0xFFFD;
        *len = 3;
        return ((uint32_t)(b & 0x0F) << 12) | ((uint32_t)(s[i + 1] & 0x3F) << 6) | (s[i + 2] & 0x3F);
    }
    if (!(b & 0x08)) {
        if (!CONT(1) || !CONT(2) || !CONT(3)) return 0xFFFD;
        uint32_t c = ((uint32_t)(b & 0x07) << 18) | ((uint32_t)(s[i + 1] & 0x3F) << 12) |
                     ((uint32_t)(s[i + 2] & 0x3F) << 6) | (s[i + 3] & 0x3F);
        if (c > 0x10FFFF) return 0xFFFD;
        *len = 4;
        return c;
    }
#undef CONT
    return 0xFFFD;
}

/* Writes the UTF-8 form of c (<= 0x10FFFF) into out[4]; returns its length. */
static inline size_t utf8_encode(uint32_t c, uint8_t *out) {
    if (c < 0x80) { out[0] = (uint8_t)c; return 1; }
    if (c < 0x800) { out[0] = (uint8_t)(0xC0 | (c >> 6)); out[1] = (uint8_t)(0x80 | (c & 0x3F)); return 2; }
    if (c < 0x10000) {
        out[0] = (uint8_t)(0xE0 | (c >> 12));
        out[1] = (uint8_t)(0x80 | ((c >> 6) & 0x3F));
        out[2] = (uint8_t)(0x80 | (c & 0x3F));
        return 3;
    }
    out[0] = (uint8_t)(0xF0 | (c >> 18));
    out[1] = (uint8_t)(0x80 | ((c >> 12) & 0x3F));
    out[2] = (uint8_t)(0x80 | ((c >> 6) & 0x3F));
    out[3] = (uint8_t)(0x80 | (c & 0x3F));
    return 4;
}

// ----------------------------------------------------------------------------
// Hash maps: open addressing with linear probing, hashed with XXH3.
// imap: 64-bit integer keys (UINT64_MAX marks an empty slot) -> two int32.

typedef struct { uint64_t key; int32_t v0, v1; } imap_slot;
typedef struct { imap_slot *slots; size_t mask, n; } imap;

#define IMAP_EMPTY UINT64_MAX

static inline uint64_t hash_u64(uint64_t k) { return XXH3_64bits(&k, sizeof k); }

static inline const imap_slot *imap_find(const imap *m, uint64_t key) {
    size_t i = (size_t)hash_u64(key) & m->mask;
    for (;;) {
        const imap_slot *s = &m->slots[i];
        if (s->key == key) return s;
        if (s->key == IMAP_EMPTY) return NULL;
        i = (i + 1) & m->mask;
    }
}

static inline uint64_t pair_key(int32_t a, int32_t b) { return ((uint64_t)(uint32_t)a << 32) | (uint32_t)b; }

// ----------------------------------------------------------------------------
// Pre-tokenizer steps (tokenizer_pre.c)

#define MAX_STEPS 6

enum { K_GPT2, K_LLAMA3, K_QWEN35, K_KIMI_K2, K_AFMOE_DIGITS, K_NEWLINES, K_DIGITS3_FROM_RIGHT, K_REGEX };

typedef struct {
    uint8_t     kind;      /* K_* */
    uint8_t     digits;    /* K_LLAMA3: \p{N}{1,digits} (3 llama3, 1 qwen2) */
    bool        collapsed; /* K_REGEX: matched against the collapsed text (else code points) */
    pcre2_code *re;        /* K_REGEX */
} split_step;

typedef struct {
    const char *type;                /* LLAMA_VOCAB_PRE_TYPE_<type> */
    bool        byte_encode;         /* false: words stay raw UTF-8 (GPT-2's byte map is not applied) */
    const char *rx[MAX_STEPS + 1];   /* NULL-terminated */
} pre_def;

/* tokenizer.ggml.pre names, as llama_vocab::impl::load maps them, with the
 * settings that come with the name. */
enum { PF_IGNORE_MERGES = 1, PF_ADD_BOS = 2, PF_NO_BOS = 4, PF_ESCAPE_WS = 8, PF_UNSUPPORTED = 16 };

typedef struct { const char *name, *type; int flags; } pre_name;

// ----------------------------------------------------------------------------
// The tokenizer object and its symbol table

typedef struct { uint64_t h; int32_t id; } smap_slot;   /* id == -1: empty */

struct eng_tokenizer {
    int      type;               /* ENG_VOCAB_SPM, ENG_VOCAB_BPE or ENG_VOCAB_RWKV */
    int32_t  max_tok_len;        /* RWKV: the longest token text (bytes) */
    const pre_def *pre;          /* BPE pre-tokenizer (NULL for SPM) */
    char     pre_name[64];       /* tokenizer.ggml.pre as read ("" when absent) */
    split_step steps[MAX_STEPS]; /* the pre-tokenizer's splits, applied in order */
    int      n_steps;
    bool     ignore_merges;      /* a word that is itself a token is taken whole (llama3 and others) */
    bool     byte_encode;        /* GPT-2 byte-to-unicode map (false: raw UTF-8, <0xNN> fallback) */
    bool     escape_ws;          /* spaces become U+2581 before splitting (gemma4, sarvam-moe) */
    bool     nl_whole;           /* gemma4: a word of newlines that is a token is taken whole */
    bool     add_bos, add_eos, add_space_prefix;
    int32_t  bos, eos, eot, unk; /* -1 when none */
    int32_t  n_vocab;            /* tokens: symbol ids 0..n_vocab-1 */
    int32_t  n_sym, sym_cap;     /* tokens + pseudo symbols */
    char    *blob;               /* symbol texts, each NUL-terminated */
    size_t   blob_len, blob_cap;
    size_t  *sym_off;            /* (n_sym) offset of the text in blob */
    uint32_t *sym_len;           /* (n_sym) */
    float   *score;              /* (n_vocab) SPM merge priority */
    uint16_t *attr;              /* (n_vocab) A_* */
    smap_slot *smap;             /* symbol text -> id */
    size_t   smap_mask, smap_n;
    imap     pairs;              /* (left, right) -> (merged or -1, rank) */
    imap     groups;             /* SPM: multi-byte character bytes -> symbol */
    int32_t  byte_sym[256];      /* SPM: one-byte character -> symbol (-1 none); BPE: byte -> symbol */
    int32_t  byte_tok[256];      /* SPM byte fallback token (-1 none) */
    int16_t  gpt2_inv[324];      /* BPE decode: code point -> byte (-1 none) */
    /* special tokens (CONTROL, USER_DEFINED, UNKNOWN) in llama.cpp's matching order:
     * longer texts first, equal lengths by id */
    int32_t  n_special;
    int32_t *special;            /* (n_special) token ids */
    imap     trie;               /* (node << 8 | byte) -> child node */
    int32_t *trie_term;          /* (n_nodes) index into special[] or -1 */
    int32_t  n_nodes, nodes_cap;
    uint8_t  special_first[32];  /* bitmap of the first bytes of special texts */
    /* token budgets (tokenizer.h, eng_tokenize_upto): no token stands for more than max_token_units units of
     * the text the merges see (SPM: escaped bytes; BPE: code points; RWKV: bytes), nor for more than
     * max_token_bytes bytes of input; units_bound: every unit of a raw fragment gives a token; bytes_bound:
     * every input byte does (units_bound, and no special token strips whitespace) */
    int32_t  max_token_units, max_token_bytes;
    bool     units_bound, bytes_bound;
};

static inline const char *sym_text(const eng_tokenizer *t, int32_t id) { return t->blob + t->sym_off[id]; }

static inline uint64_t text_hash(const void *s, size_t n) { return XXH3_64bits(s, n); }

/* The symbol whose text is s[0..n), or -1. */
static inline int32_t smap_get(const eng_tokenizer *t, const void *s, size_t n) {
    uint64_t h = text_hash(s, n);
    size_t i = (size_t)h & t->smap_mask;
    for (;;) {
        const smap_slot *sl = &t->smap[i];
        if (sl->id < 0) return -1;
        if (sl->h == h && t->sym_len[sl->id] == n && memcmp(sym_text(t, sl->id), s, n) == 0) return sl->id;
        i = (i + 1) & t->smap_mask;
    }
}

/* Length of the first character of s[0..n) as llama.cpp's SPM splits text. */
static inline size_t group_len(const uint8_t *s, size_t n) {
    size_t g = utf8_lead_len(s[0]);
    return g < n ? g : n;
}

static inline uint64_t group_key(const uint8_t *s, size_t n) {
    uint64_t k = (uint64_t)n << 32;
    for (size_t i = 0; i < n; i++) k |= (uint64_t)s[i] << (8 * i);
    return k;
}

// ----------------------------------------------------------------------------
// Pre-tokenizers (tokenizer_pre.c)

/* The entry of tokenizer.ggml.pre name s[0..n), or NULL. */
const pre_name *eng_tok_pre_name(const char *s, size_t n);
/* The pre-tokenizer LLAMA_VOCAB_PRE_TYPE_<type>, or NULL. */
const pre_def  *eng_tok_pre_def(const char *type);
/* Compiles t->pre's steps into t->steps (K_REGEX ones with PCRE2, JIT when it can). */
int  eng_tok_pre_compile(eng_tokenizer *t, const char *path, char *err, size_t errlen);

/* One call's splitting scratch: piece ends of two generations (cap), the
 * code units a K_REGEX step sees of one piece (sub_cap), PCRE2's match data
 * (made on first use). */
typedef struct tok_split {
    int32_t  *ends, *ends2;
    uint32_t *sub;
    size_t    cap, sub_cap;
    pcre2_match_data *md;
    pcre2_match_context *mc;
    pcre2_jit_stack *jit;
} tok_split;

/* Room for a fragment of nc code points; false when memory runs out. */
bool eng_tok_split_reserve(tok_split *sc, size_t nc);
void eng_tok_split_free(tok_split *sc);
/* Splits code points cps[0..nc) (classes cls) by every step of t's
 * pre-tokenizer: returns the piece ends (in sc) and their count in *np;
 * NULL when PCRE2 fails. */
const int32_t *eng_tok_pre_split(const eng_tokenizer *t, tok_split *sc, const uint32_t *cps, const uint8_t *cls,
                                 size_t nc, size_t *np);

#endif /* ENG_TOKENIZER_INT_H */
