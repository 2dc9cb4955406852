/*
 * harness/transcripts/template.h: chat templates: a request -> prompt text + span map.
 *
 * A template turns a transcript request (system blocks, tool definitions,
 * messages) into the text a server would tokenize, and the recorded response
 * into the text the server's cache would hold after generating it. Four
 * templates, each documented byte for byte in docs/transcripts.md:
 *   chatml  <|im_start|>ROLE\n...<|im_end|>\n, Qwen/Hermes-style tools
 *   llama2  [INST] <<SYS>>...<</SYS>> ... [/INST] answer </s><s>[INST] ...
 *   llama3  <|start_header_id|>ROLE<|end_header_id|>\n\n...<|eot_id|>
 *   raw     "System/User/Assistant: " plain text, no special tokens
 * A request that carries a raw `prompt` renders as that prompt verbatim under
 * every template (it is already rendered text); a pre-tokenized request has
 * no text (ENG_ERR_ARG). No template emits a BOS token: the caller adds the
 * model's BOS when its tokenizer says so, and tokenizes with parse_special.
 *
 * The span map: every rendered byte belongs to exactly one span; spans are
 * in order, non-empty and contiguous, so "the prompt first differs at byte X"
 * maps to "message 3, block 0" with hx_render_find + hx_span_describe.
 *
 * The prefix property (tested for every template): when request t+1's
 * messages are request t's messages + t's response + new messages (and the
 * system blocks and tools are equal),
 *     render_prompt(t) + render_response(t)  is a prefix of  render_prompt(t+1).
 * So a prefix cache that stored t's prompt and generated response can reuse
 * all of it. This is why thinking blocks stay in the history (templates that
 * drop earlier reasoning break this) and why a message's rendering never
 * depends on the messages after it.
 *
 * Usage:
 *     hx_render p, r;
 *     hx_render_prompt(HX_TEMPLATE_CHATML, req, &p, err, sizeof err);
 *     hx_render_response(HX_TEMPLATE_CHATML, req, &r, err, sizeof err);
 *     size_t x = hx_common_prefix(p.text, p.len, prev.text, prev.len);
 *     char where[128];
 *     hx_span_describe(hx_render_find(&p, x), req, where, sizeof where);
 *     hx_render_free(&p); hx_render_free(&r);
 */
#ifndef HX_TEMPLATE_H
#define HX_TEMPLATE_H

#include <stddef.h>
#include <stdint.h>

#include "transcript.h"

typedef enum hx_template {
    HX_TEMPLATE_CHATML = 0,
    HX_TEMPLATE_LLAMA2 = 1,
    HX_TEMPLATE_LLAMA3 = 2,
    HX_TEMPLATE_RAW    = 3,
} hx_template;
#define HX_TEMPLATE_COUNT 4

/* Which part of the request a span renders. */
typedef enum hx_part {
    HX_PART_SYSTEM     = 0,  /* index = system block i; -1 = the system turn's framing */
    HX_PART_TOOLS      = 1,  /* index = tool i; -1 = the tools section's framing text */
    HX_PART_MESSAGE    = 2,  /* index = message m; block = b, or -1 for the turn's framing
                                (role header, block separators, end-of-turn marker) */
    HX_PART_GEN_PROMPT = 3,  /* the generation prompt (e.g. "<|im_start|>assistant\n") */
    HX_PART_PROMPT     = 4,  /* a raw `prompt` line's text */
    HX_PART_RESPONSE   = 5,  /* block = response block b, or -1 for framing / raw response text */
} hx_part;

typedef struct hx_span {
    size_t  begin, end;  /* [begin, end) byte range in hx_render.text, begin < end */
    hx_part part;
    int32_t index;       /* system block, tool or message index; -1 when not applicable */
    int32_t block;       /* block index inside a message or the response; -1 for framing */
} hx_span;

typedef struct hx_render {
    char    *text;     /* NUL-terminated, len bytes (may contain any UTF-8) */
    size_t   len;
    hx_span *spans;    /* (n_spans) ordered, contiguous, covering [0, len) */
    int32_t  n_spans;
} hx_render;

/* "chatml", "llama2", "llama3", "raw" -> the template (>= 0), or
 * ENG_ERR_NOT_FOUND for another name or NULL. */
int         hx_template_from_name(const char *name);
/* The template's name; "?" when out of range. */
const char *hx_template_name(hx_template t);
/* Picks a template from a model's tokenizer.chat_template text (may be NULL):
 * "<|im_start|>" -> chatml, "<|start_header_id|>" -> llama3, "[INST]" ->
 * llama2; anything else (or NULL) -> chatml. arch (may be NULL) is only a
 * tie-breaker today and is not required. */
hx_template hx_template_guess(const char *arch, const char *chat_template);

/* Renders the prompt of r: system blocks and tools, the messages, then the
 * generation prompt. A `prompt` request renders verbatim. out is filled (the
 * caller frees it with hx_render_free) and is zeroed on failure. Returns
 * ENG_OK, ENG_ERR_ARG (a tokens request, or t out of range; message in err)
 * or ENG_ERR_NOMEM. */
int  hx_render_prompt(hx_template t, const hx_request *r, hx_render *out, char *err, size_t errlen);
/* Renders r's recorded response as the template continues after the
 * generation prompt, ending with the end-of-turn marker (e.g. "...<|im_end|>\n").
 * For a prompt or tokens request: response_text verbatim ("" when NULL), no
 * marker. Same return contract as hx_render_prompt (tokens requests render). */
int  hx_render_response(hx_template t, const hx_request *r, hx_render *out, char *err, size_t errlen);
void hx_render_free(hx_render *r);  /* accepts NULL and zeroed; leaves it zeroed */

/* The span holding byte offset pos, or NULL when pos >= r->len. */
const hx_span *hx_render_find(const hx_render *r, size_t pos);
/* Byte offset where the system turn (system blocks, tools and their framing)
 * ends: the end of the stable prefix a fresh session shares. 0 when none. */
size_t hx_render_system_end(const hx_render *r);
/* Writes a human description of s into buf (always NUL-terminated when
 * n > 0), e.g. "message 3 (user) block 0 (tool_result)", "system block 0",
 * "tool 2 (Edit)", "generation prompt", "end of text" when s is NULL.
 * req (may be NULL) adds roles, block types and tool names. Returns buf. */
const char *hx_span_describe(const hx_span *s, const hx_request *req, char *buf, size_t n);

/* Length of the longest common prefix of two byte strings. */
size_t hx_common_prefix(const char *a, size_t na, const char *b, size_t nb);

#endif /* HX_TEMPLATE_H */
