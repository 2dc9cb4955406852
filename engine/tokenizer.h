/*
 * engine/tokenizer.h: tokenizers loaded from GGUF vocabulary metadata.
 *
 * Three models, with llama.cpp's semantics:
 *   - "llama": SentencePiece BPE (dummy-prefix space, U+2581 for spaces,
 *     score-ordered merges, byte fallback to <0xNN>);
 *   - "gpt2" (and "gemma4"): BPE with merge ranks from tokenizer.ggml.merges
 *     after the pre-tokenizer tokenizer.ggml.pre names (every one llama.cpp
 *     knows; absent means llama.cpp's "default" rules), byte-level (GPT-2's
 *     byte-to-unicode map) or, for gemma4 and sarvam-moe, raw UTF-8;
 *   - "rwkv": RWKV's greedy longest match over escaped byte-string tokens
 *     (the World vocabulary, or one token per byte).
 * Special/control tokens (token_type CONTROL or USER_DEFINED, e.g.
 * <|im_start|>) are matched as whole tokens only when the caller asks
 * (parse_special), as chat templates need.
 *
 * A tokenizer is immutable after load and safe to share between threads.
 *
 * Usage:
 *     eng_tokenizer *tok;
 *     eng_tokenizer_load(g, &tok, err, sizeof err);
 *     int32_t ids[256];
 *     int32_t n = eng_tokenize(tok, "Once upon a time", 16, true, false, ids, 256, NULL);
 *     // n == 5: 1 403 407 261 378 for stories260K
 */
#ifndef ENG_TOKENIZER_H
#define ENG_TOKENIZER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "gguf.h"

typedef struct eng_tokenizer eng_tokenizer;

enum eng_vocab_type {
    ENG_VOCAB_SPM  = 1,   /* tokenizer.ggml.model == "llama" */
    ENG_VOCAB_BPE  = 2,   /* tokenizer.ggml.model == "gpt2" or "gemma4" */
    ENG_VOCAB_RWKV = 3,   /* tokenizer.ggml.model == "rwkv" */
};

/* Loads the vocabulary from g's tokenizer.ggml.* metadata (g may be closed afterwards:
 * everything is copied). Returns ENG_OK, ENG_ERR_NOT_FOUND (no tokenizer),
 * ENG_ERR_UNSUPPORTED (other tokenizer.ggml.model) or ENG_ERR_FORMAT. */
int  eng_tokenizer_load(const eng_gguf *g, eng_tokenizer **out, char *err, size_t errlen);
void eng_tokenizer_free(eng_tokenizer *t);  /* accepts NULL */

int     eng_tokenizer_type(const eng_tokenizer *t);
const char *eng_tokenizer_type_name(const eng_tokenizer *t);  /* tokenizer.ggml.model: "llama", "gpt2", "rwkv" */
int32_t eng_tokenizer_n_vocab(const eng_tokenizer *t);
int32_t eng_tokenizer_bos(const eng_tokenizer *t);   /* -1 when none */
int32_t eng_tokenizer_eos(const eng_tokenizer *t);   /* -1 when none */
int32_t eng_tokenizer_eot(const eng_tokenizer *t);   /* end-of-turn (e.g. <|im_end|>, <|eot_id|>); -1 when none */
bool    eng_tokenizer_add_bos(const eng_tokenizer *t);
bool    eng_tokenizer_add_eos(const eng_tokenizer *t);

/* Tokenizes len bytes of text (any bytes; invalid UTF-8 never crashes).
 * add_bos/add_eos prepend/append those tokens when the vocabulary has them.
 * parse_special matches control/user-defined token texts as whole tokens.
 * Writes at most cap ids into out and returns the token count; when the
 * count exceeds cap, returns -(count), out holding the first cap ids.
 * offsets (may be NULL, else cap entries) receives, for each token, the byte
 * offset in text where it starts (BOS/EOS get the offset of their position).
 * Returns INT32_MIN when memory runs out or len exceeds INT32_MAX / 4.
 * Scratch memory is that of the largest unit merges cannot cross (an SPM
 * segment, a BPE word: about 20 bytes per byte of it), plus 5 bytes per
 * code point of a BPE text. */
int32_t eng_tokenize(const eng_tokenizer *t, const char *text, size_t len, bool add_bos,
                     bool add_eos, bool parse_special, int32_t *out, int32_t cap, int32_t *offsets);

/* Tokenizes as eng_tokenize, but only as far as a budget of max_tokens
 * tokens (BOS and EOS included) allows, so that a text that cannot fit is
 * refused without tokenizing all of it. Writes at most max_tokens ids (and
 * offsets, when not NULL) and returns their count n, or INT32_MIN as
 * eng_tokenize; *more tells which:
 *   - false: out[0, n) is the whole tokenization (n <= max_tokens);
 *   - true: the whole tokenization has more than max_tokens tokens, and
 *     out[0, n) are exactly its first n tokens, n <= max_tokens.
 * Both are exact, never estimates. Merges never cross a unit (a special
 * token; an SPM segment: characters that no token joins; a BPE word of the
 * pre-tokenizer; an RWKV match), and each unit is merged whole before its
 * tokens are counted, so a cut never changes the tokens before it: what is
 * returned is the start of the full result wherever the budget runs out,
 * even inside a unit's tokens. The text itself is never cut (its prefix
 * would merge differently at the cut). A text whose size alone proves it
 * too long is refused before it is tokenized where eng_tokenizer_bytes_bound
 * holds (a text of len bytes has at least len / L tokens, L =
 * eng_tokenizer_max_token_bytes), and so is a unit, where every byte of a
 * fragment gives a token (all but vocabularies missing some byte's token);
 * n may then be below max_tokens. So the work and memory of a refusal are
 * bounded by the budget, not by the text. */
int32_t eng_tokenize_upto(const eng_tokenizer *t, const char *text, size_t len, bool add_bos, bool add_eos,
                          bool parse_special, int32_t max_tokens, int32_t *out, int32_t *offsets, bool *more);

/* L: the most bytes of input text one token stands for (SPM: the longest
 * token's text; BPE: 4 bytes for each code point of the longest token's
 * text, as the lenient decoder reads overlong forms; RWKV: the longest
 * token). */
int32_t eng_tokenizer_max_token_bytes(const eng_tokenizer *t);
/* Whether every input byte gives at least one token, so that a text of B
 * bytes has at least ceil(B / L) tokens besides BOS and EOS. False where
 * bytes can vanish: a special token that strips the whitespace beside it
 * (LSTRIP/RSTRIP, e.g. phi-3), or a symbol that is no token and has no byte
 * token to fall back to. */
bool    eng_tokenizer_bytes_bound(const eng_tokenizer *t);

/* eng_tokenize into a malloc'd array of the right size (caller frees): the
 * ids, their count in *n. NULL when memory runs out or tokenizing fails. */
int32_t *eng_tokenize_alloc(const eng_tokenizer *t, const char *text, size_t len, bool add_bos, bool add_eos,
                            bool parse_special, int32_t *n);

/* Decodes ids to text: the exact inverse of eng_tokenize without BOS/EOS
 * where one exists (SPM strips the dummy-prefix space of the first piece).
 * Control tokens are rendered as their text when render_special, else omitted.
 * Writes at most cap bytes (NUL-terminated when room) and returns the byte
 * count; returns -(count) when cap is too small. */
int64_t eng_detokenize(const eng_tokenizer *t, const int32_t *ids, int32_t n, bool render_special,
                       char *out, size_t cap);

/* The BPE pre-tokenizer in effect: the tokenizer.ggml.pre name ("gpt-2",
 * "default (absent)" when the key is missing); "" for SPM. */
const char *eng_tokenizer_pre(const eng_tokenizer *t);

/* llama.cpp's pre-tokenizer names, i = 0, 1, ... (NULL past the end): *type
 * gets the LLAMA_VOCAB_PRE_TYPE_ it maps to (without the prefix), *supported
 * whether kvreplay tokenizes with it. */
const char *eng_tokenizer_pre_name_at(int i, const char **type, bool *supported);

/* llama.cpp's LLAMA_VOCAB_PRE_TYPE_* (without the prefix), i = 0, 1, ... in
 * enum order (NULL past the end), with the regexes it splits by, in order
 * (*rx: up to 6, NULL-terminated); bit k of *hand is set when regex k runs as
 * a hand-written splitter (as in llama.cpp), clear when it runs through PCRE2. */
const char *eng_tokenizer_pre_type_at(int i, const char *const **rx, unsigned *hand);

/* The raw vocabulary piece of id (as stored, e.g. "▁time" or "<0x0A>"); NULL if out of range. */
const char *eng_token_piece(const eng_tokenizer *t, int32_t id, size_t *len);
/* The id whose piece is exactly text, or -1. */
int32_t eng_token_lookup(const eng_tokenizer *t, const char *text, size_t len);

#endif /* ENG_TOKENIZER_H */
