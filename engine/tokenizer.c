/*
 * engine/tokenizer.c: SentencePiece-BPE ("llama") and GPT-2 byte-level BPE
 * ("gpt2") tokenizers loaded from GGUF tokenizer.ggml.* metadata, with
 * llama.cpp's semantics (src/llama-vocab.cpp, src/unicode.cpp), so that
 * prompts get the token ids a llama.cpp server would give them.
 *
 * Both models are run over "symbols": every vocabulary token (ids
 * 0..n_vocab-1) plus "pseudo" symbols (ids n_vocab..n_sym-1) for texts that
 * can occur during merging but are not tokens (a character that appears
 * inside tokens but not alone, a merge part or result missing from the
 * vocabulary). Symbol texts are unique (a duplicated token text maps to its
 * last id, as llama.cpp's token_to_id map does), so comparing symbol ids is
 * comparing texts, and a merge is one integer-keyed hash lookup:
 *   pairs[(left, right)] = (merged symbol, rank)
 * SPM: left+right is a token (its score orders the merges); a pair stored
 * with merged == -1 only says that the two characters occur side by side
 * inside some token. A text boundary between two characters that never sit
 * side by side in a token can never be crossed by a merge, so the text is
 * cut there into independent segments and merged segment by segment: the
 * result is the same as llama.cpp's one priority queue over the whole text,
 * and each queue stays small (O(n log n) overall, even on 1 MB without spaces).
 * BPE: merges come from tokenizer.ggml.merges, ranked by their order
 * (first occurrence wins); words come from the pre-tokenizer that
 * tokenizer.ggml.pre names (every one of llama.cpp's; see "Pre-tokenizers"
 * below): llama.cpp's hand-written splitters are hand-written here, over
 * the Unicode 15.1 classes of engine/tokenizer_unicode.c; its std::regex
 * ones run through PCRE2 on the same collapsed text and regex.
 *
 * Invalid UTF-8 is tokenized as llama.cpp does: SPM groups bytes by their
 * lead byte and falls back to <0xNN> tokens (exact bytes kept); GPT-2
 * decodes leniently, turning each invalid byte into U+FFFD (and overlong
 * forms into their code point) before the byte-level encoding.
 *
 * Special tokens follow llama.cpp's tokenizer_st_partition: CONTROL and
 * UNKNOWN texts are matched only with parse_special, USER_DEFINED ones
 * always, with the attributes llama.cpp adds at load (end-of-generation and
 * FIM texts become CONTROL; LSTRIP/RSTRIP for phi-3 and a few others); SPM
 * puts the dummy-prefix space again after every special token.
 * Decoding is the exact inverse of tokenizing (no clean_spaces pass), except
 * where the input is not kept: SPM reads U+2581 as a space, GPT-2 replaces
 * invalid UTF-8. eng_tokenize returns INT32_MIN (TOK_FAIL) when memory runs
 * out, PCRE2 fails (its match or JIT-stack limits) or len exceeds INT32_MAX / 4.
 *
 * RWKV (llama.cpp's llm_tokenizer_rwkv): token texts are stored escaped
 * (\t \n \r \xHH, \ before any other character) and unescaped at load
 * (llama_unescape_rwkv_token, quirks included); a raw fragment is cut
 * greedily into the longest token that starts each remaining position. A
 * position no token starts with gives the unknown token, or fails the call
 * (INT32_MIN) when the vocabulary has none (llama.cpp would emit an invalid
 * id there). Decoding concatenates the unescaped texts.
 *
 * A tokenizer is immutable after load; every call allocates its own scratch,
 * so one tokenizer can serve many threads at once.
 */
#define XXH_INLINE_ALL
#include "tokenizer.h"

#include <math.h>
#define PCRE2_CODE_UNIT_WIDTH 32   /* regexes run over code points (or collapsed units), one unit each */
#include <pcre2.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "status.h"
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
// Unicode classes (engine/tokenizer_unicode.c): one UC_* class per code point.

static uint8_t         bmp_cls[0x10000];   /* class of every BMP code point */
static pthread_once_t  bmp_once = PTHREAD_ONCE_INIT;

static void bmp_build(void) {
    for (size_t i = 0; i < eng_uni_n_ranges; i++) {
        uint32_t lo = eng_uni_ranges[i].start;
        uint32_t hi = i + 1 < eng_uni_n_ranges ? eng_uni_ranges[i + 1].start : 0x110000;
        for (uint32_t c = lo; c < hi && c < 0x10000; c++) bmp_cls[c] = eng_uni_ranges[i].cls;
    }
}

/* Class of a code point <= 0x10FFFF (bmp_once must have run). */
static uint8_t uni_class(uint32_t c) {
    if (c < 0x10000) return bmp_cls[c];
    size_t lo = 0, hi = eng_uni_n_ranges;   /* the last range starting at or before c */
    while (hi - lo > 1) {
        size_t mid = (lo + hi) / 2;
        if (eng_uni_ranges[mid].start <= c) lo = mid;
        else hi = mid;
    }
    return eng_uni_ranges[lo].cls;
}

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
static uint32_t utf8_decode(const uint8_t *s, size_t n, size_t i, size_t *len) {
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
static size_t utf8_encode(uint32_t c, uint8_t *out) {
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
// Hash maps: open addressing with linear probing, hashed with XXH3.
// imap: 64-bit integer keys (UINT64_MAX marks an empty slot) -> two int32.

typedef struct { uint64_t key; int32_t v0, v1; } imap_slot;
typedef struct { imap_slot *slots; size_t mask, n; } imap;

#define IMAP_EMPTY UINT64_MAX

static inline uint64_t hash_u64(uint64_t k) { return XXH3_64bits(&k, sizeof k); }

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

static inline const imap_slot *imap_find(const imap *m, uint64_t key) {
    size_t i = (size_t)hash_u64(key) & m->mask;
    for (;;) {
        const imap_slot *s = &m->slots[i];
        if (s->key == key) return s;
        if (s->key == IMAP_EMPTY) return NULL;
        i = (i + 1) & m->mask;
    }
}

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

static inline uint64_t pair_key(int32_t a, int32_t b) { return ((uint64_t)(uint32_t)a << 32) | (uint32_t)b; }

// ----------------------------------------------------------------------------
// Pre-tokenizers: llama.cpp's LLAMA_VOCAB_PRE_TYPE_* (src/llama-vocab.cpp),
// each a list of regexes applied in turn, every one splitting the pieces the
// previous ones left (src/unicode.cpp, unicode_regex_split). The regexes are
// the models' own (from their tokenizer.json), as llama.cpp writes them.
// Those llama.cpp runs with a hand-written splitter are run here with one
// too (the K_* kinds below, chosen by the regex text as llama.cpp does);
// the rest go through PCRE2 on the text and regex llama.cpp gives std::regex
// (Unicode categories collapsed to one code unit each, see collapse_regex).

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

static const char RX00[] = "[\\p{P}\\$\\+<=>\\^~\\|]+";
static const char RX_GPT2[] = "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)";
static const char RX01[] = "\\p{N}+";
static const char RX02[] = "[0-9][0-9][0-9]";
static const char RX_LLAMA3[] = "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
static const char RX03[] = "[\r\n]";
static const char RX04[] = "\\s?[A-Za-zµÀ-ÖØ-öø-ƺƼ-ƿǄ-ʓʕ-ʯͰ-ͳͶͷͻ-ͽͿΆΈ-ΊΌΎ-ΡΣ-ϵϷ-ҁҊ-ԯԱ-ՖႠ-ჅᎠ-Ᏽᏸ-ᏽᲐ-ᲺᲽ-Ჿᴀ-ᴫᵫ-ᵷᵹ-ᶚḀ-ἕἘ-Ἕἠ-ὅὈ-Ὅὐ-ὗὙὛὝὟ-ώᾀ-ᾴᾶ-ᾼιῂ-ῄῆ-ῌῐ-ΐῖ-Ίῠ-Ῥῲ-ῴῶ-ῼℂℇℊ-ℓℕℙ-ℝℤΩℨK-ℭℯ-ℴℹℼ-ℿⅅ-ⅉⅎↃↄⰀ-ⱻⱾ-ⳤⳫ-ⳮⳲⳳꙀ-ꙭꚀ-ꚛꜢ-ꝯꝱ-ꞇꞋ-ꞎꭰ-ꮿﬀ-ﬆﬓ-ﬗＡ-Ｚａ-ｚ𐐀-𐑏𐒰-𐓓𐓘-𐓻𐲀-𐲲𐳀-𐳲𑢠-𑣟𞤀-𞥃]+";
static const char RX05[] = "\\s?[!-/:-~！-／：-～‘-‟　-。]+";
static const char RX06[] = "\\s+$";
static const char RX07[] = "[一-龥ࠀ-一가-퟿]+";
static const char RX08[] = "\\s?\\p{L}+";
static const char RX09[] = "\\s?\\p{P}+";
static const char RX10[] = "\\p{N}";
static const char RX11[] = "[\\p{P}\\$\\+<=>\\^~\\|`]+";
static const char RX_QWEN2[] = "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
static const char RX12[] = " ?[^(\\s|.,!?…。，、।۔،)]+";
static const char RX13[] = "[^\\r\\n\\p{L}\\p{N}]?((?=[\\p{L}])([^a-z]))*((?=[\\p{L}])([^A-Z]))+|[^\\r\\n\\p{L}\\p{N}]?((?=[\\p{L}])([^a-z]))+((?=[\\p{L}])([^A-Z]))*|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
static const char RX14[] = "<sentinel:[0-9]+>";
static const char RX15[] = "(IMGIMG)((A|B|C|D|E|F|G|H|I){1,4})Z";
static const char RX16[] = "([\\t\\n]|    |  )";
static const char RX17[] = "[\\p{P}!-/:-@\\[-`{-~]";
static const char RX18[] = "\\p{N}{1,3}";
static const char RX19[] = "[一-龥぀-ゟ゠-ヿ]+";
static const char RX20[] = "[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\r\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+| ?[\\p{P}\\p{S}]+[\r\n]*|\\s*[\r\n]+|\\s+(?!\\S)|\\s+";
static const char RX21[] = "[^\\r\\n\\p{L}\\p{N}]?((?=[\\p{L}])([^a-z]))*((?=[\\p{L}])([^A-Z]))+(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|[^\\r\\n\\p{L}\\p{N}]?((?=[\\p{L}])([^a-z]))+((?=[\\p{L}])([^A-Z]))*(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
static const char RX22[] = "(?=(\\d{3})+(?!\\d))";
static const char RX23[] = "'(?:[sSdDmMtT]|[lL][lL]|[vV][eE]|[rR][eE])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]|\\s+(?!\\S)|\\s+";
static const char RX24[] = "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1}| ?[^\\s\\p{L}\\p{N}\\r\\n]+|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
static const char RX_KIMI_K2[] = "\\p{Han}+";
static const char RX_AFMOE_DIGITS[] = "\\p{AFMoE_digits}";
static const char RX25[] = "[一-鿿㐀-䶿豈-﫿぀-ゟ゠-ヿ･-ﾟ⼀-⿟เ-๿຀-໿ក-៿က-႟ꩠ-ꩿꧠ-꧿가-힯ᄀ-ᇿ]+";
static const char RX26[] = "[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\\r\\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+| ?[\\p{P}\\p{S}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
static const char RX27[] = "[가-힣ㄱ-ㆎ]+|[！…“”‘’—：；，、-〿︰-﹏]+|[ㄅ-ㄯ]+|[一-龥぀-ゟ゠-ヿ]+";
static const char RX28[] = "[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]*[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]+(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]+[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]*(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
static const char RX29[] = "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?(?:\\p{L}\\p{M}*(?: \\p{L}\\p{M}*)*)+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]?|\\s*[\\r\\n]|\\s+(?!\\S)|\\s+";
static const char RX_QWEN35[] = "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?[\\p{L}\\p{M}]+|\\p{N}| ?[^\\s\\p{L}\\p{M}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
static const char RX_TINY_AYA_DIGITS[] = "\\d{1,3}(?=(?:\\d{3})*\\b)";
static const char RX30[] = "[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]*[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]+(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]+[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]*(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
static const char RX31[] = "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s{512}(?!\\S)|\\s{256}(?!\\S)|\\s{128}(?!\\S)|\\s{64}(?!\\S)|\\s{32}(?!\\S)|\\s{16}(?!\\S)|\\s{8}(?!\\S)|\\s{4}(?!\\S)|\\s{1,2}(?!\\S)|\\s{1}";
static const char RX_NEWLINES[] = "[^\\n]+|[\\n]+";
static const char RX32[] = "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}+| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
static const char RX33[] = "\\S+";
static const char RX34[] = "[^\\r\\n\\p{L}\\p{N}]?((?=[\\p{L}\\p{M}])([^a-z]))*((?=[\\p{L}\\p{M}])([^A-Z]))+(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|[^\\r\\n\\p{L}\\p{N}]?((?=[\\p{L}\\p{M}])([^a-z]))+((?=[\\p{L}\\p{M}])([^A-Z]))*(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

static const pre_def pre_defs[] = {
    {"DEFAULT", true, {RX00, RX_GPT2, RX01, RX02}},
    {"LLAMA3", true, {RX_LLAMA3}},
    {"DEEPSEEK_LLM", true, {RX03, RX04, RX05, RX06, RX07, RX01}},
    {"DEEPSEEK_CODER", true, {RX03, RX08, RX09, RX07, RX10}},
    {"FALCON", true, {RX11, RX_GPT2, RX02}},
    {"MPT", true, {RX_GPT2}},
    {"STARCODER", true, {RX10, RX_GPT2}},
    {"GPT2", true, {RX_GPT2}},
    {"REFACT", true, {RX10, RX_GPT2}},
    {"COMMAND_R", true, {RX10, RX_GPT2}},
    {"STABLELM2", true, {RX_QWEN2}},
    {"QWEN2", true, {RX_QWEN2}},
    {"OLMO", true, {RX_GPT2}},
    {"DBRX", true, {RX_LLAMA3}},
    {"SMAUG", true, {RX_LLAMA3}},
    {"PORO", true, {RX12}},
    {"CHATGLM3", true, {RX00, RX_GPT2, RX01, RX02}},
    {"CHATGLM4", true, {RX_LLAMA3}},
    {"VIKING", true, {RX12, RX10}},
    {"JAIS", true, {RX_GPT2}},
    {"TEKKEN", true, {RX13}},
    {"SMOLLM", true, {RX10, RX_GPT2}},
    {"CODESHELL", true, {RX10, RX_GPT2}},
    {"BLOOM", true, {RX12}},
    {"GPT3_FINNISH", true, {RX12}},
    {"EXAONE", true, {RX10, RX_GPT2}},
    {"CHAMELEON", true, {RX14, RX15, RX16, RX10, RX17, RX_GPT2}},
    {"MINERVA", true, {RX10, RX_GPT2}},
    {"DEEPSEEK3_LLM", true, {RX18, RX19, RX20}},
    {"GPT4O", true, {RX21}},
    {"SUPERBPE", true, {RX01, RX22}},
    {"TRILLION", true, {RX_GPT2}},
    {"BAILINGMOE", true, {RX23}},
    {"LLAMA4", true, {RX00, RX_GPT2, RX01, RX02}},
    {"PIXTRAL", true, {RX00, RX_GPT2, RX01, RX02}},
    {"SEED_CODER", true, {RX24}},
    {"HUNYUAN", true, {RX_QWEN2}},
    {"KIMI_K2", true, {RX_KIMI_K2}},
    {"HUNYUAN_DENSE", true, {RX18, RX19, RX20}},
    {"GROK_2", true, {RX_QWEN2}},
    {"GRANITE_DOCLING", true, {RX_GPT2}},
    {"MINIMAX_M2", true, {RX21}},
    {"AFMOE", true, {RX_AFMOE_DIGITS, RX25, RX26}},
    {"SOLAR_OPEN", true, {RX_QWEN2}},
    {"YOUTU", true, {RX27, RX28}},
    {"EXAONE_MOE", true, {RX29}},
    {"QWEN35", true, {RX_QWEN35}},
    {"TINY_AYA", true, {RX_TINY_AYA_DIGITS, RX30}},
    {"JOYAI_LLM", true, {RX18, RX19, RX20}},
    {"JAIS2", true, {RX31}},
    {"GEMMA4", false, {RX_NEWLINES}},
    {"SARVAM_MOE", false, {RX_NEWLINES}},
    {"MINICPM5", true, {RX18, RX32}},
    {"WHITESPACE", false, {RX33}},
    {"GRANITE_EMB_MULTI", true, {RX34}},
    {"MELLUM2", true, {RX10, RX_GPT2}},
    {"LAGUNA", true, {RX_NEWLINES, RX_QWEN2}},
};

/* tokenizer.ggml.pre names, as llama_vocab::impl::load maps them, with the
 * settings that come with the name. */
enum { PF_IGNORE_MERGES = 1, PF_ADD_BOS = 2, PF_NO_BOS = 4, PF_ESCAPE_WS = 8, PF_UNSUPPORTED = 16 };

typedef struct { const char *name, *type; int flags; } pre_name;

static const pre_name pre_names[] = {
    {"default", "DEFAULT", 0},
    {"minicpm5", "MINICPM5", PF_IGNORE_MERGES},
    {"llama3", "LLAMA3", PF_IGNORE_MERGES | PF_ADD_BOS},
    {"llama-v3", "LLAMA3", PF_IGNORE_MERGES | PF_ADD_BOS},
    {"llama-bpe", "LLAMA3", PF_IGNORE_MERGES | PF_ADD_BOS},
    {"falcon3", "LLAMA3", PF_IGNORE_MERGES | PF_ADD_BOS},
    {"falcon-h1", "LLAMA3", PF_IGNORE_MERGES | PF_ADD_BOS},
    {"pixtral", "LLAMA3", PF_IGNORE_MERGES | PF_ADD_BOS},
    {"midm-2.0", "LLAMA3", PF_IGNORE_MERGES | PF_ADD_BOS},
    {"lfm2", "LLAMA3", PF_IGNORE_MERGES | PF_ADD_BOS},
    {"jina-v5-nano", "LLAMA3", PF_IGNORE_MERGES | PF_ADD_BOS},
    {"deepseek-llm", "DEEPSEEK_LLM", 0},
    {"deepseek-coder", "DEEPSEEK_CODER", 0},
    {"deepseek-v3", "DEEPSEEK3_LLM", 0},
    {"youtu", "YOUTU", PF_IGNORE_MERGES},
    {"falcon", "FALCON", 0},
    {"mpt", "MPT", 0},
    {"starcoder", "STARCODER", 0},
    {"gpt-2", "GPT2", 0},
    {"phi-2", "GPT2", 0},
    {"jina-es", "GPT2", 0},
    {"jina-de", "GPT2", 0},
    {"gigachat", "GPT2", 0},
    {"jina-v2-es", "GPT2", 0},
    {"jina-v2-de", "GPT2", 0},
    {"a.x-4.0", "GPT2", 0},
    {"mellum", "GPT2", 0},
    {"modern-bert", "GPT2", 0},
    {"jais-2", "JAIS2", 0},
    {"gemma4", "GEMMA4", PF_ESCAPE_WS},
    {"granite-embed-multi-311m", "GEMMA4", PF_ESCAPE_WS},
    {"sarvam-moe", "SARVAM_MOE", PF_ESCAPE_WS},
    {"jina-v1-en", "GPT2", 0},
    {"jina-v2-code", "GPT2", 0},
    {"roberta-bpe", "GPT2", 0},
    /* goes with tokenizer.ggml.model "whitespace" (jina-embeddings-v2-base-zh), which drops the spaces
     * first; with "gpt2" llama.cpp aborts on any space (a merge part with a space), so it is refused */
    {"whitespace", "WHITESPACE", PF_UNSUPPORTED},
    {"refact", "REFACT", 0},
    {"command-r", "COMMAND_R", 0},
    {"qwen2", "QWEN2", 0},
    {"deepseek-r1-qwen", "QWEN2", 0},
    {"kormo", "QWEN2", 0},
    {"f2llmv2", "QWEN2", 0},
    {"qwen35", "QWEN35", 0},
    {"stablelm2", "STABLELM2", 0},
    {"olmo", "OLMO", 0},
    {"dbrx", "DBRX", 0},
    {"smaug-bpe", "SMAUG", 0},
    {"poro-chat", "PORO", 0},
    {"glm4", "CHATGLM4", PF_NO_BOS},
    {"chatglm-bpe", "CHATGLM4", PF_NO_BOS},
    {"viking", "VIKING", 0},
    {"jais", "JAIS", 0},
    {"tekken", "TEKKEN", PF_IGNORE_MERGES | PF_ADD_BOS},
    {"smollm", "SMOLLM", 0},
    {"codeshell", "CODESHELL", 0},
    {"bloom", "BLOOM", 0},
    {"gpt3-finnish", "GPT3_FINNISH", 0},
    {"exaone", "EXAONE", 0},
    {"exaone4", "GPT2", 0},
    {"exaone-moe", "EXAONE_MOE", 0},
    {"chameleon", "CHAMELEON", PF_ADD_BOS},
    {"minerva-7b", "MINERVA", 0},
    {"megrez", "QWEN2", 0},
    {"gpt-4o", "GPT4O", 0},
    {"llama4", "GPT4O", 0},
    {"kanana2", "GPT4O", 0},
    {"talkie", "GPT4O", 0},
    {"granite-embed-multi-97m", "GRANITE_EMB_MULTI", PF_IGNORE_MERGES},
    {"tiny_aya", "TINY_AYA", 0},
    {"cohere2moe", "TINY_AYA", 0},
    {"superbpe", "SUPERBPE", 0},
    {"trillion", "TRILLION", 0},
    {"granite-docling", "GRANITE_DOCLING", 0},
    {"bailingmoe", "BAILINGMOE", 0},
    {"bailingmoe2", "BAILINGMOE", 0},
    {"llada-moe", "BAILINGMOE", 0},
    {"seed-coder", "SEED_CODER", 0},
    {"hunyuan", "HUNYUAN", 0},
    {"hunyuan-dense", "HUNYUAN_DENSE", 0},
    {"joyai-llm", "JOYAI_LLM", 0},
    {"kimi-k2", "KIMI_K2", 0},
    {"grok-2", "GROK_2", 0},
    {"afmoe", "AFMOE", 0},
    {"laguna", "LAGUNA", 0},
    {"minimax-m2", "MINIMAX_M2", 0},
    {"solar-open", "SOLAR_OPEN", 0},
    {"mellum2", "MELLUM2", 0},
};

#define N_PRE_NAMES ((int)(sizeof pre_names / sizeof pre_names[0]))
#define N_PRE_DEFS  ((int)(sizeof pre_defs / sizeof pre_defs[0]))

static const pre_def *find_pre_def(const char *type) {
    for (int i = 0; i < N_PRE_DEFS; i++)
        if (!strcmp(pre_defs[i].type, type)) return &pre_defs[i];
    return NULL;
}

/* llama.cpp's unicode_regex_split_custom: the regexes it splits by hand. */
static int custom_kind(const char *rx, uint8_t *digits) {
    *digits = 0;
    if (rx == RX_GPT2) return K_GPT2;
    if (rx == RX_LLAMA3) { *digits = 3; return K_LLAMA3; }
    if (rx == RX_QWEN2) { *digits = 1; return K_LLAMA3; }
    if (rx == RX_QWEN35) return K_QWEN35;
    if (rx == RX_KIMI_K2) return K_KIMI_K2;
    if (rx == RX_AFMOE_DIGITS || rx == RX_TINY_AYA_DIGITS) return K_AFMOE_DIGITS;
    if (rx == RX_NEWLINES) return K_NEWLINES;
    /* superbpe's (?=(\d{3})+(?!\d)): llama.cpp runs it through std::regex, where each
     * position scans the digit run ahead (quadratic on long runs); split_digits3
     * gives the same cuts in one pass */
    if (!strcmp(rx, "(?=(\\d{3})+(?!\\d))")) return K_DIGITS3_FROM_RIGHT;
    return K_REGEX;
}

/* The regex llama.cpp hands to std::regex when rx uses a Unicode category
 * (unicode_regex_split): each \p{..} becomes a bracket of one stand-in code
 * unit (the text's non-ASCII code points of that category become it, see
 * collapse_cp) plus the category's ASCII members; other characters are kept.
 * \p{Lu} and the other letter subcategories all mean \p{L}, and \p{S}'s ASCII
 * members leave '~' out, exactly as there. Returns the unit count. */
static size_t collapse_regex(const char *rx, uint32_t *out) {
    static const struct { const char *pat; uint32_t unit; const char *ascii; } cats[] = {
        {"\\p{N}", 0xD1, "0-9"},
        {"\\p{L}", 0xD2, "A-Za-z"},   {"\\p{Lu}", 0xD2, "A-Za-z"}, {"\\p{Ll}", 0xD2, "A-Za-z"},
        {"\\p{Lt}", 0xD2, "A-Za-z"},  {"\\p{Lm}", 0xD2, "A-Za-z"}, {"\\p{Lo}", 0xD2, "A-Za-z"},
        {"\\p{P}", 0xD3, "!-#%-*,-/:-;?-@\\[-\\]_\\{\\}"},
        {"\\p{M}", 0xD4, ""},
        {"\\p{S}", 0xD5, "\\$\\+<->^`\\|"},
    };
    size_t n = 0, len = strlen(rx);
    bool inside = false;
    for (size_t i = 0; i < len; i++) {
        if (rx[i] == '[' && (i == 0 || rx[i - 1] != '\\')) { out[n++] = '['; inside = true; continue; }
        if (inside && rx[i] == ']' && rx[i - 1] != '\\') { out[n++] = ']'; inside = false; continue; }
        if (rx[i] == '\\' && i + 3 < len && rx[i + 1] == 'p' && rx[i + 2] == '{') {
            const char *close = strchr(rx + i + 3, '}');
            bool done = false;
            for (size_t k = 0; close && close <= rx + i + 10 && k < sizeof cats / sizeof cats[0]; k++) {
                size_t pl = (size_t)(close - (rx + i)) + 1;
                if (strlen(cats[k].pat) != pl || memcmp(cats[k].pat, rx + i, pl)) continue;
                if (!inside) out[n++] = '[';
                out[n++] = cats[k].unit;
                for (const char *a = cats[k].ascii; *a; a++) out[n++] = (uint8_t)*a;
                if (!inside) out[n++] = ']';
                i += pl - 1;
                done = true;
                break;
            }
            if (done) continue;
        }
        out[n++] = (uint8_t)rx[i];
    }
    return n;
}

static bool uses_category(const char *rx) {
    static const char *cats[] = {"\\p{N}", "\\p{L}", "\\p{P}", "\\p{M}", "\\p{S}", "\\p{Lu}", "\\p{Ll}", "\\p{Lt}",
                                 "\\p{Lm}", "\\p{Lo}"};
    for (size_t k = 0; k < sizeof cats / sizeof cats[0]; k++)
        if (strstr(rx, cats[k])) return true;
    return false;
}

/* The collapsed code unit of a code point (unicode_regex_split's text_collapsed). */
static inline uint32_t collapse_cp(uint32_t c, uint8_t cls) {
    static const uint32_t unit[] = {0xD0, 0xD2, 0xD1, 0x0B, 0xD4, 0xD3, 0xD5, 0xD0, 0xD0, 0xD0};
    return c < 128 ? c : unit[cls];
}

/* The code unit std::wregex sees (non-ASCII whitespace becomes U+000B). */
static inline uint32_t wide_cp(uint32_t c, uint8_t cls) { return c >= 0x80 && cls == UC_W ? 0x0B : c; }


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
};

static inline const char *sym_text(const eng_tokenizer *t, int32_t id) { return t->blob + t->sym_off[id]; }

static inline uint64_t text_hash(const void *s, size_t n) { return XXH3_64bits(s, n); }

/* The symbol whose text is s[0..n), or -1. */
static int32_t smap_get(const eng_tokenizer *t, const void *s, size_t n) {
    uint64_t h = text_hash(s, n);
    size_t i = (size_t)h & t->smap_mask;
    for (;;) {
        const smap_slot *sl = &t->smap[i];
        if (sl->id < 0) return -1;
        if (sl->h == h && t->sym_len[sl->id] == n && memcmp(sym_text(t, sl->id), s, n) == 0) return sl->id;
        i = (i + 1) & t->smap_mask;
    }
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
    if (mi < 0 && t->pre == find_pre_def("KIMI_K2")) {   /* llama.cpp: kimi-k2 needs no merges */
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

/* Compiles the pre-tokenizer's steps (K_REGEX ones with PCRE2, JIT when it can). */
static int build_steps(eng_tokenizer *t, const char *path, char *err, size_t errlen) {
    for (int k = 0; k < MAX_STEPS && t->pre->rx[k]; k++) {
        const char *rx = t->pre->rx[k];
        split_step *st = &t->steps[t->n_steps++];
        st->kind = (uint8_t)custom_kind(rx, &st->digits);
        if (st->kind != K_REGEX) continue;
        size_t n = 0, len = strlen(rx), l;
        uint32_t *pat = malloc((8 * len + 16) * sizeof *pat);   /* a 5-byte \p{..} becomes at most 29 units */
        if (!pat) return ENG_ERR_NOMEM;
        st->collapsed = uses_category(rx);
        if (st->collapsed) n = collapse_regex(rx, pat);
        else
            for (size_t i = 0; i < len; i += l) pat[n++] = utf8_decode((const uint8_t *)rx, len, i, &l);
        int ec;
        PCRE2_SIZE eo;
        st->re = pcre2_compile((PCRE2_SPTR)pat, n, PCRE2_DOLLAR_ENDONLY, &ec, &eo, NULL);
        free(pat);
        if (!st->re) {   /* the regexes are ours: a failure here is a bug, but say which */
            eng_errf(err, errlen, "%s: pre-tokenizer %s: regex %d does not compile (PCRE2 error %d at %zu)", path,
                     t->pre->type, k, ec, (size_t)eo);
            return ENG_ERR_UNSUPPORTED;
        }
        pcre2_jit_compile(st->re, PCRE2_JIT_COMPLETE);   /* without JIT, pcre2_match interprets */
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
    pthread_once(&bmp_once, bmp_build);
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
        const pre_name *pn = NULL;
        for (int i = 0; i < N_PRE_NAMES && !pn; i++)
            if (strlen(pre_names[i].name) == pre_n && !memcmp(pre_names[i].name, pre, pre_n)) pn = &pre_names[i];
        if (!pn || (pn->flags & PF_UNSUPPORTED)) {
            eng_errf(err, errlen, "%s: " KEY_PREFIX "pre: unsupported pre-tokenizer '%.*s'%s", path,
                     (int)(pre_n > 64 ? 64 : pre_n), pre,
                     pn ? " (it goes with tokenizer model 'whitespace', which kvreplay does not read)" : "");
            rc = ENG_ERR_UNSUPPORTED;
            goto fail;
        }
        snprintf(t->pre_name, sizeof t->pre_name, "%s%s", pn->name, prc == ENG_OK ? "" : " (absent)");
        t->pre = find_pre_def(pn->type);
        ENG_ASSERT(t->pre);
        t->byte_encode = t->pre->byte_encode;
        t->ignore_merges = pn->flags & PF_IGNORE_MERGES;
        t->escape_ws = pn->flags & PF_ESCAPE_WS;
        t->nl_whole = t->pre == find_pre_def("GEMMA4");
        if (pn->flags & PF_ADD_BOS) t->add_bos = true;
        if (pn->flags & PF_NO_BOS) t->bos = -1;
        if ((rc = build_steps(t, path, err, errlen)) != ENG_OK) goto fail;
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

const char *eng_tokenizer_pre_name_at(int i, const char **type, bool *supported) {
    if (i < 0 || i >= N_PRE_NAMES) return NULL;
    if (type) *type = pre_names[i].type;
    if (supported) *supported = !(pre_names[i].flags & PF_UNSUPPORTED);
    return pre_names[i].name;
}

const char *eng_tokenizer_pre_type_at(int i, const char *const **rx, unsigned *hand) {
    if (i < 0 || i >= N_PRE_DEFS) return NULL;
    if (rx) *rx = pre_defs[i].rx;
    if (hand) {
        *hand = 0;
        uint8_t d;
        for (int k = 0; k < MAX_STEPS && pre_defs[i].rx[k]; k++)
            if (custom_kind(pre_defs[i].rx[k], &d) != K_REGEX) *hand |= 1u << k;
    }
    return pre_defs[i].type;
}

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

// ----------------------------------------------------------------------------
// The hand-written splitters: llama.cpp's versions of those regexes, over code
// points cp[0..n) with classes cls[0..n). Each writes the end index of every
// piece into ends[] and returns the piece count (pieces tile [0, n)).

#define CLS(p) ((p) < n ? cls[p] : UC_NONE)
#define CPT(p) ((p) < n ? cp[p] : 0xFFFFFFFFu)
#define ADD(e) do { if ((e) > prev) { ends[nw++] = (int32_t)(e); prev = (e); } } while (0)
#define IS_OTHER(c) ((c) >= UC_M)   /* [^\s\p{L}\p{N}], and not past the end */

static inline uint32_t ascii_lower(uint32_t c) { return (c >= 'A' && c <= 'Z') ? c + 32 : c; }

/* 's|'t|'re|'ve|'m|'ll|'d (case-insensitive when `fold`: no other code point
 * lowercases to one of these letters): the length matched at pos, or 0. */
static size_t contraction(const uint32_t *cp, size_t n, size_t pos, bool fold) {
    if (pos >= n || cp[pos] != '\'' || pos + 1 >= n) return 0;
    uint32_t c1 = fold ? ascii_lower(cp[pos + 1]) : cp[pos + 1];
    if (c1 == 's' || c1 == 't' || c1 == 'm' || c1 == 'd') return 2;
    if (pos + 2 >= n) return 0;
    uint32_t c2 = fold ? ascii_lower(cp[pos + 2]) : cp[pos + 2];
    if ((c1 == 'r' && c2 == 'e') || (c1 == 'v' && c2 == 'e') || (c1 == 'l' && c2 == 'l')) return 3;
    return 0;
}

/* The whitespace tail shared by the llama3-style splitters: \s*[\r\n]+ (when
 * `rn`) | \s+(?!\S) | \s+ | one code point. Returns the new position. */
static inline size_t ws_tail(const uint32_t *cp, const uint8_t *cls, size_t n, size_t pos, bool rn) {
    size_t w = 0, last_rn = 0;
    while (CLS(pos + w) == UC_W) {
        if (rn && (cp[pos + w] == '\r' || cp[pos + w] == '\n')) last_rn = pos + w + 1;
        w++;
    }
    if (last_rn > 0) return last_rn;                 /* \s*[\r\n]+ */
    if (w > 1 && pos + w < n) return pos + w - 1;    /* \s+(?!\S) */
    if (w > 0) return pos + w;                       /* \s+ */
    return pos + 1;
}

/* GPT-2: 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+ */
static size_t split_gpt2(const uint32_t *cp, const uint8_t *cls, size_t n, int32_t *ends) {
    size_t nw = 0, prev = 0, pos = 0;
    while (pos < n) {
        size_t k = contraction(cp, n, pos, false);
        if (k) { pos += k; ADD(pos); continue; }
        uint8_t c2 = cp[pos] == ' ' ? CLS(pos + 1) : cls[pos];
        if (c2 == UC_L || c2 == UC_N) {   /* ' ?' then a run of one class */
            pos += cp[pos] == ' ';
            while (CLS(pos) == c2) pos++;
            ADD(pos);
            continue;
        }
        if (IS_OTHER(c2)) {
            pos += cp[pos] == ' ';
            while (IS_OTHER(CLS(pos))) pos++;
            ADD(pos);
            continue;
        }
        pos = ws_tail(cp, cls, n, pos, false);
        ADD(pos);
    }
    return nw;
}

/* Llama 3 (digits 3): (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|
 *   ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+   and Qwen 2 (digits 1: \p{N});
 * Qwen 3.5 (marks): letters runs also take \p{M}, which leaves the third class. */
static size_t split_llama3(const uint32_t *cp, const uint8_t *cls, size_t n, int32_t *ends, size_t max_digits,
                           bool marks) {
    size_t nw = 0, prev = 0, pos = 0;
#define WORDCH(c) ((c) == UC_L || (marks && (c) == UC_M))
    while (pos < n) {
        uint32_t c = cp[pos];
        uint8_t f = cls[pos];
        size_t k = contraction(cp, n, pos, true);
        if (k) { pos += k; ADD(pos); continue; }
        if (!(c == '\r' || c == '\n' || f == UC_N) && (WORDCH(f) || WORDCH(CLS(pos + 1)))) {
            pos++;
            while (WORDCH(CLS(pos))) pos++;
            ADD(pos);
            continue;
        }
        if (f == UC_N) {
            size_t ini = pos;
            while (CLS(pos) == UC_N) {
                if (++pos - ini >= max_digits) { ADD(pos); ini = pos; }
            }
            ADD(pos);
            continue;
        }
        uint8_t f2 = c == ' ' ? CLS(pos + 1) : f;
        if (IS_OTHER(f2) && !(marks && f2 == UC_M)) {
            pos += c == ' ';
            while (IS_OTHER(CLS(pos)) && !(marks && CLS(pos) == UC_M)) pos++;
            while (CPT(pos) == '\r' || CPT(pos) == '\n') pos++;
            ADD(pos);
            continue;
        }
        pos = ws_tail(cp, cls, n, pos, true);
        ADD(pos);
    }
#undef WORDCH
    return nw;
}

/* Han ideographs as llama.cpp's unicode_cpt_is_han sees them. */
static inline bool is_han(uint32_t c) {
    return (c >= 0x4E00 && c <= 0x9FFF) || (c >= 0x3400 && c <= 0x4DBF) || (c >= 0x20000 && c <= 0x2A6DF) ||
           (c >= 0x2A700 && c <= 0x2B73F) || (c >= 0x2B740 && c <= 0x2B81F) || (c >= 0x2B820 && c <= 0x2CEAF) ||
           (c >= 0x2CEB0 && c <= 0x2EBEF) || (c >= 0xF900 && c <= 0xFAFF) || (c >= 0x2F800 && c <= 0x2FA1F);
}

/* Kimi K2: [\p{Han}]+ | letter words without Han (an optional leading
 * [^\r\n\p{L}\p{N}], then an optional contraction) | \p{N}{1,3} |
 *  ?[^\s\p{L}\p{N}]+[\r\n]* | \s*[\r\n]+ | \s+(?!\S) | \s+   (llama.cpp's version). */
static size_t split_kimi_k2(const uint32_t *cp, const uint8_t *cls, size_t n, int32_t *ends) {
    size_t nw = 0, prev = 0, pos = 0;
#define LNH(p) (CLS(p) == UC_L && !is_han(CPT(p)))
    while (pos < n) {
        uint32_t c = cp[pos];
        uint8_t f = cls[pos];
        if (is_han(c)) {
            while (pos < n && is_han(cp[pos])) pos++;
            ADD(pos);
            continue;
        }
        bool lead_ok = !(c == '\r' || c == '\n' || f == UC_L || f == UC_N);
        if (LNH(pos) || (lead_ok && LNH(pos + 1))) {
            if (lead_ok) pos++;
            while (LNH(pos)) pos++;
            if (CPT(pos) == '\'' && pos + 1 < n) {
                uint32_t c1 = ascii_lower(cp[pos + 1]);
                if (c1 == 's' || c1 == 't' || c1 == 'm' || c1 == 'd') {
                    pos += 2;
                } else if (pos + 2 < n) {
                    uint32_t c2 = ascii_lower(cp[pos + 2]);
                    if ((c1 == 'r' && c2 == 'e') || (c1 == 'v' && c2 == 'e') || (c1 == 'l' && c2 == 'l')) pos += 3;
                }
            }
            ADD(pos);
            continue;
        }
        if (f == UC_N) {
            size_t ini = pos;
            while (CLS(pos) == UC_N) {
                if (++pos - ini >= 3) { ADD(pos); ini = pos; }
            }
            ADD(pos);
            continue;
        }
        uint8_t f2 = c == ' ' ? CLS(pos + 1) : f;
        if (IS_OTHER(f2)) {
            pos += c == ' ';
            while (IS_OTHER(CLS(pos))) pos++;
            while (CPT(pos) == '\r' || CPT(pos) == '\n') pos++;
            ADD(pos);
            continue;
        }
        pos = ws_tail(cp, cls, n, pos, true);
        ADD(pos);
    }
#undef LNH
    return nw;
}

/* AFMoE (and tiny_aya) digits: a run of \p{N} splits as its length mod 3
 * leading digits, then threes. As in llama.cpp, the text before a run is not
 * a piece of its own: it goes with the run's first group. */
static size_t split_afmoe_digits(const uint32_t *cp, const uint8_t *cls, size_t n, int32_t *ends) {
    (void)cp;
    size_t nw = 0, prev = 0, pos = 0;
    while (pos < n) {
        if (cls[pos] != UC_N) { pos++; continue; }
        size_t a = pos;
        while (pos < n && cls[pos] == UC_N) pos++;
        size_t cur = a + (pos - a) % 3;
        if (cur > a) ADD(cur);
        for (; cur < pos; cur += 3) ADD(cur + 3);
    }
    ADD(n);
    return nw;
}

/* (?=(\d{3})+(?!\d)) as std::regex_iterator uses it: an empty match (a cut)
 * wherever an ASCII digit run reaching to its end has a length that is a
 * multiple of 3 (\d is ASCII only there, as here). */
static size_t split_digits3(const uint32_t *cp, const uint8_t *cls, size_t n, int32_t *ends) {
    (void)cls;
    size_t nw = 0, prev = 0, pos = 0;
    while (pos < n) {
        if (cp[pos] < '0' || cp[pos] > '9') { pos++; continue; }
        size_t a = pos;
        while (pos < n && cp[pos] >= '0' && cp[pos] <= '9') pos++;
        for (size_t c = a + (pos - a) % 3; c + 3 <= pos; c += 3) ADD(c);
    }
    ADD(n);
    return nw;
}

/* [^\n]+|[\n]+ */
static size_t split_newlines(const uint32_t *cp, const uint8_t *cls, size_t n, int32_t *ends) {
    (void)cls;
    size_t nw = 0, prev = 0, pos = 0;
    while (pos < n) {
        bool nl = cp[pos] == '\n';
        while (pos < n && (cp[pos] == '\n') == nl) pos++;
        ADD(pos);
    }
    return nw;
}

#undef CLS
#undef CPT
#undef ADD
#undef IS_OTHER


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
    int32_t  *corig, *ends, *ends2;        /* their input offsets; piece ends (two generations) */
    uint32_t *sub;                         /* K_REGEX: the code units the regex sees */
    int32_t  *bstart;                      /* raw BPE: each symbol's offset in buf */
    size_t    cp_cap, bstart_cap;
    pcre2_match_data *md;                  /* K_REGEX scratch, made on first use */
    pcre2_match_context *mc;
    pcre2_jit_stack *jit;
    symbol   *syms;                        /* (syms_cap) */
    size_t    syms_cap;
    bigram   *heap;                        /* binary heap, best first */
    size_t    heap_n, heap_cap;
    frag     *frags, *frags2;              /* (frags_cap) */
    size_t    n_frags, frags_cap;
} session;

static void session_free(session *s) {
    free(s->ids); free(s->offs); free(s->buf); free(s->orig);
    free(s->cps); free(s->cls); free(s->clen); free(s->corig); free(s->ends); free(s->ends2);
    free(s->sub); free(s->bstart);
    free(s->syms); free(s->heap); free(s->frags); free(s->frags2);
    pcre2_match_data_free(s->md);
    pcre2_match_context_free(s->mc);
    pcre2_jit_stack_free(s->jit);
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

/* The pieces one K_REGEX step makes of units sub[0..n): llama.cpp's
 * std::regex_iterator loop (unmatched stretches are pieces too; after an
 * empty match, a non-empty one is tried at the same place, else the search
 * moves on by one), run with PCRE2. false when PCRE2 fails. */
static bool split_regex(session *s, const split_step *st, const uint32_t *sub, size_t n, int32_t *ends,
                        size_t *count) {
    if (!s->md) {
        s->md = pcre2_match_data_create(1, NULL);
        s->mc = pcre2_match_context_create(NULL);
        s->jit = pcre2_jit_stack_create(64 * 1024, 64 * 1024 * 1024, NULL);
        if (!s->md || !s->mc || !s->jit) return false;
        pcre2_jit_stack_assign(s->mc, NULL, s->jit);
    }
    size_t nw = 0, prev = 0, pos = 0;
    uint32_t opts = 0;
#define ADD(e) do { if ((e) > prev) { ends[nw++] = (int32_t)(e); prev = (e); } } while (0)
    while (pos <= n) {
        int rc = pcre2_match(st->re, (PCRE2_SPTR)sub, n, pos, opts, s->md, s->mc);
        if (rc == PCRE2_ERROR_NOMATCH) {
            if (!opts) break;
            opts = 0;
            pos++;
            continue;
        }
        if (rc < 0) return false;
        const PCRE2_SIZE *ov = pcre2_get_ovector_pointer(s->md);
        size_t ms = ov[0], me = ov[1];
        ADD(ms);
        ADD(me);
        if (me == ms) {
            if (ms == n) break;
            opts = PCRE2_NOTEMPTY_ATSTART | PCRE2_ANCHORED;
        } else {
            opts = 0;
        }
        pos = me;
    }
    ADD(n);
#undef ADD
    *count = nw;
    return true;
}

/* Splits the fragment's nc code points by every step of the pre-tokenizer;
 * returns the piece ends (s->ends or s->ends2) and their count in *np. */
static const int32_t *pre_split(session *s, size_t nc, size_t *np) {
    const eng_tokenizer *t = s->t;
    int32_t *cur = s->ends, *nxt = s->ends2;
    size_t n_cur = 1;
    cur[0] = (int32_t)nc;
    for (int k = 0; k < t->n_steps; k++) {
        const split_step *st = &t->steps[k];
        if (st->kind == K_REGEX)
            for (size_t i = 0; i < nc; i++)
                s->sub[i] = st->collapsed ? collapse_cp(s->cps[i], s->cls[i]) : wide_cp(s->cps[i], s->cls[i]);
        size_t n_nxt = 0, a = 0;
        for (size_t w = 0; w < n_cur; w++) {
            size_t b = (size_t)cur[w], m = 0;
            const uint32_t *cp = s->cps + a;
            const uint8_t *cl = s->cls + a;
            int32_t *out = nxt + n_nxt;
            switch (st->kind) {
            case K_GPT2:         m = split_gpt2(cp, cl, b - a, out); break;
            case K_LLAMA3:       m = split_llama3(cp, cl, b - a, out, st->digits, false); break;
            case K_QWEN35:       m = split_llama3(cp, cl, b - a, out, 1, true); break;
            case K_KIMI_K2:      m = split_kimi_k2(cp, cl, b - a, out); break;
            case K_AFMOE_DIGITS: m = split_afmoe_digits(cp, cl, b - a, out); break;
            case K_NEWLINES:     m = split_newlines(cp, cl, b - a, out); break;
            case K_DIGITS3_FROM_RIGHT: m = split_digits3(cp, cl, b - a, out); break;
            default:
                if (!split_regex(s, st, s->sub + a, b - a, out, &m)) { s->oom = true; return NULL; }
            }
            for (size_t j = 0; j < m; j++) out[j] += (int32_t)a;
            n_nxt += m;
            a = b;
        }
        int32_t *tmp = cur;
        cur = nxt;
        nxt = tmp;
        n_cur = n_nxt;
    }
    *np = n_cur;
    return cur;
}

static void bpe_fragment(session *s, const uint8_t *text, int64_t off, int64_t len) {
    const eng_tokenizer *t = s->t;
    if ((size_t)len > s->cp_cap) {
        size_t c = grown(s->cp_cap, (size_t)len);
        if (!resize(&s->cps, c, sizeof *s->cps) || !resize(&s->cls, c, 1) || !resize(&s->clen, c, 1) ||
            !resize(&s->corig, c, sizeof *s->corig) || !resize(&s->ends, c, sizeof *s->ends) ||
            !resize(&s->ends2, c, sizeof *s->ends2) || !resize(&s->sub, c, sizeof *s->sub)) {
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
        s->cls[nc] = c < 0x80 ? bmp_cls[c] : uni_class(c);
        s->clen[nc] = (uint8_t)l;
        s->corig[nc] = (int32_t)(off + (int64_t)i);
        nc++;
        i += l;
    }
    size_t nw = 0;
    const int32_t *ends = pre_split(s, nc, &nw);
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
