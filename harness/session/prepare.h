/*
 * harness/session/prepare.h: a transcript request turned into what the engine eats:
 * normalization rules applied, the chat template rendered (with the span map
 * of which system block / tool / message / block each byte came from), the
 * prompt tokenized with byte offsets, and the recorded response tokenized
 * for teacher forcing.
 *
 * Tokenization: the model's BOS when its vocabulary adds one, special tokens
 * parsed (chat templates emit them as text). The response is tokenized on
 * its own, so at the prompt/response seam the tokens can differ from those
 * of the next request's prompt, as they do in real servers.
 */
#ifndef HX_PREPARE_H
#define HX_PREPARE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "template.h"
#include "tokenizer.h"
#include "transcript.h"

typedef struct hx_prepared {
    hx_render          prompt;       /* rendered prompt after normalization (text + span map) */
    const hx_request  *req;          /* the request it came from (borrowed, for span names) */
    const char        *text;         /* == prompt.text ("" for a pre-tokenized request) */
    size_t             text_len;
    int32_t           *tokens;       /* (n) prompt tokens */
    int32_t           *offsets;      /* (n) byte offset in text where each token starts */
    int32_t            n;
    int32_t           *resp;         /* (n_resp) recorded response tokens (the template's continuation) */
    int32_t            n_resp;
    int32_t            stable_end;   /* token position where system + tools end; -1 when none */
    int32_t            n_normalized; /* substitutions made by the normalization rules */
} hx_prepared;

typedef struct hx_prepare_ctx hx_prepare_ctx;

/* template_name: "chatml", "llama2", "llama3", "raw", or NULL to pick from
 * the model's tokenizer.chat_template text (chat_template_meta, may be NULL
 * or ""). normalize: a comma-separated rule list ("" for none). Unknown
 * names are ENG_ERR_ARG with a message naming the flag. tok is borrowed. */
int  hx_prepare_ctx_new(const eng_tokenizer *tok, const char *template_name, const char *chat_template_meta,
                        const char *normalize, hx_prepare_ctx **out, char *err, size_t errlen);
void hx_prepare_ctx_free(hx_prepare_ctx *c);  /* accepts NULL */
/* The transcript's path, named in error messages ("PATH:LINE: ..."); borrowed. */
void hx_prepare_ctx_set_source(hx_prepare_ctx *c, const char *path);
/* Loads the vocabulary of a GGUF file (a model or a vocabulary-only file)
 * and, when chat_template is not NULL, a malloc'd copy of its
 * tokenizer.chat_template (NULL when absent). ENG_OK or the error of the
 * GGUF/tokenizer loader with a message naming the file. */
int  hx_vocab_load(const char *path, eng_tokenizer **tok, char **chat_template, char *err, size_t errlen);
const char *hx_prepare_template_name(const hx_prepare_ctx *c);
const char *hx_prepare_normalize_names(const hx_prepare_ctx *c);

/* Prepares r: applies the normalization rules to r IN PLACE (the stored
 * miss text then shows what the server saw), renders and tokenizes. r must
 * outlive out. Returns ENG_OK, ENG_ERR_ARG (message names the transcript
 * line) or ENG_ERR_NOMEM; out is zeroed on failure. */
int  hx_prepare(hx_prepare_ctx *c, hx_request *r, hx_prepared *out, char *err, size_t errlen);
void hx_prepared_free(hx_prepared *p);  /* accepts NULL and zeroed */

/* What hx_prepare renders, without tokenizing: r normalized in place, then
 * rendered into out (caller frees with hx_render_free). ENG_OK, ENG_ERR_ARG
 * (a pre-tokenized request has no text) or ENG_ERR_NOMEM. */
int  hx_prepare_render(hx_prepare_ctx *c, hx_request *r, hx_render *out, char *err, size_t errlen);

/* A token budget for hx_prepare_upto. */
typedef struct hx_prepare_budget {
    int32_t     max_tokens;  /* in: the prompt's tokens at most, BOS included */
    hx_request *received;    /* in: NULL, or where a copy of r as it came (before normalization) goes */
    int64_t     at_least;    /* out: the prompt's tokens (counted), or a lower bound on them (ENG_ERR_RANGE) */
    bool        counted;     /* out: at_least is the exact count */
} hx_prepare_budget;

/* How many tokens a text over a budget of max_tokens has: counted exactly
 * (*counted) when it is at most HX_PREPARE_EXACT_BYTES bytes per token of
 * the budget (and 4 KiB), so a prompt a few times the context is told its real length
 * (clients read it to cut their history); else a lower bound above
 * max_tokens (ceil(len / L) + BOS where eng_tokenizer_bytes_bound holds).
 * The work is bounded by the budget, never by the text. */
#define HX_PREPARE_EXACT_BYTES 16
int64_t hx_tokens_over(const eng_tokenizer *tok, const char *text, size_t len, bool bos, bool parse_special,
                       int32_t max_tokens, bool *counted);

/* hx_prepare for a request that may not fit (serve): normalizes r in place and
 * renders it as hx_prepare does, then tokenizes only as far as b->max_tokens
 * (eng_tokenize_upto), so a prompt too long costs its rendering and at most
 * the budget's tokens, never a tokenization of the whole text; a text whose
 * size alone proves it too long (eng_tokenizer_bytes_bound) is not tokenized
 * at all. A prompt that fits gets exactly hx_prepare's tokens, offsets and
 * response tokens. b->received (when not NULL) gets a copy of r as it was
 * before normalization: taken first when a rule will rewrite r, else only
 * once r fits, so a refused request is never copied. Returns ENG_OK;
 * ENG_ERR_RANGE when the prompt has more than b->max_tokens tokens
 * (b->at_least > max_tokens from hx_tokens_over, b->counted when exact,
 * nothing kept, err says so); or hx_prepare's errors. out and *b->received are zeroed on failure. */
int  hx_prepare_upto(hx_prepare_ctx *c, hx_request *r, hx_prepare_budget *b, hx_prepared *out, char *err,
                     size_t errlen);
/* (Re)computes p->resp from r's response as hx_prepare does (the rendered
 * response, tokenized after the prompt): for a response known only after
 * the prompt, such as a generated turn. ENG_OK, ENG_ERR_ARG or ENG_ERR_NOMEM. */
int  hx_prepare_response(hx_prepare_ctx *c, const hx_request *r, hx_prepared *p, char *err, size_t errlen);

/* Describes where byte lies in p's rendered prompt: "system block 0",
 * "tool 2 (Edit)", "message 3 (user) block 0 (tool_result)", ... */
void hx_prepared_where(const hx_prepared *p, int64_t byte, char *buf, size_t cap);

#endif /* HX_PREPARE_H */
