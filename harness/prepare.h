/*
 * harness/prepare.h: a transcript request turned into what the engine eats:
 * normalization rules applied, the chat template rendered (with a span map
 * of which system block / message / block each byte came from), the prompt
 * tokenized with byte offsets, and the recorded response tokenized for
 * teacher forcing.
 */
#ifndef HX_PREPARE_H
#define HX_PREPARE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "tokenizer.h"
#include "transcript.h"

typedef struct hx_prepared {
    char    *text;        /* rendered prompt after normalization */
    size_t   text_len;
    int32_t *tokens;      /* (n) prompt tokens, BOS first when the vocabulary adds it */
    int32_t *offsets;     /* (n) byte offset in text where each token starts */
    int32_t  n;
    int32_t *resp;        /* (n_resp) recorded response tokens (template's continuation) */
    int32_t  n_resp;
    int32_t  stable_end;  /* token position where system + tools end; -1 when unknown */
    int32_t  n_normalized;/* substitutions made by the normalization rules */
    void    *spans;       /* template span map (opaque) */
    int32_t  n_spans;
} hx_prepared;

typedef struct hx_prepare_ctx hx_prepare_ctx;

/* template_name: "chatml", "llama2", "llama3", "raw", or NULL to pick from
 * the model's metadata (arch, tokenizer.chat_template). normalize: a
 * comma-separated rule list ("" for none). Errors (unknown template or rule)
 * are ENG_ERR_ARG with a message. */
int  hx_prepare_ctx_new(const eng_tokenizer *tok, const char *template_name, const char *chat_template_meta,
                        const char *normalize, hx_prepare_ctx **out, char *err, size_t errlen);
void hx_prepare_ctx_free(hx_prepare_ctx *c);
const char *hx_prepare_template_name(const hx_prepare_ctx *c);

/* Prepares r (r is not modified: normalization works on a copy). */
int  hx_prepare(hx_prepare_ctx *c, const hx_request *r, hx_prepared *out, char *err, size_t errlen);
void hx_prepared_free(hx_prepared *p);

/* Describes where byte lies in p's rendered prompt: "system[0]",
 * "tools", "message 3 block 0 (tool_result)", "generation prompt". */
void hx_prepared_where(const hx_prepared *p, int64_t byte, char *buf, size_t cap);

#endif /* HX_PREPARE_H */
