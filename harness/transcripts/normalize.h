/*
 * harness/transcripts/normalize.h: prompt normalization rules (`--normalize NAME,...`).
 *
 * A rule rewrites a volatile part of a request before it is rendered and
 * tokenized, so that requests a real server should treat as sharing a prefix
 * do share it. Rules run on the request (system blocks, messages, raw prompt
 * text), in a fixed order, and are idempotent: applying a rule twice changes
 * nothing the second time.
 *
 * Rules (docs/transcripts.md):
 *   anthropic-cch  In a system block that starts with
 *                  "x-anthropic-billing-header:" (and, defensively, the first
 *                  text block of a leading user message, and any line of a raw
 *                  prompt that starts with it), the value of every `cch=` field
 *                  of that header line, i.e. everything after "cch=" up to the
 *                  next ';' (or the end of the line), whatever its length or
 *                  alphabet, becomes the canonical value "fffff" (the value
 *                  llama.cpp's fix uses). A block that does not start with the
 *                  header is never touched, even when it contains "cch=".
 *                  Seed report: seeds/001_* (llama.cpp PR #21793).
 *
 * Usage:
 *     hx_normalize n;
 *     if (hx_normalize_parse("anthropic-cch", &n) != ENG_OK) die("%s", n.err);
 *     int k = hx_normalize_apply(&n, &req);  // k substitutions made
 */
#ifndef HX_NORMALIZE_H
#define HX_NORMALIZE_H

#include <stddef.h>
#include <stdint.h>

#include "template.h"
#include "transcript.h"

#define HX_NORMALIZE_ANTHROPIC_CCH (1u << 0)

/* The canonical cch value every checksum is replaced with. */
#define HX_NORMALIZE_CCH_VALUE "fffff"

typedef struct hx_normalize {
    uint32_t rules;     /* HX_NORMALIZE_* bits; 0 = no rule */
    char     err[160];  /* set by hx_normalize_parse on failure */
} hx_normalize;

/* Parses a comma-separated list of rule names ("anthropic-cch"); NULL, ""
 * and "none" mean no rule; spaces around names are ignored. On an unknown
 * name returns ENG_ERR_NOT_FOUND with out->err = "--normalize: unknown rule
 * 'NAME' (known: anthropic-cch)", and out->rules = 0. out must not be NULL. */
int hx_normalize_parse(const char *names, hx_normalize *out);

/* Writes the canonical comma list of n's rules into buf ("" when none; for
 * the runs.normalize column). Returns buf. */
const char *hx_normalize_names(const hx_normalize *n, char *buf, size_t len);

/* Applies n's rules to r in place. Returns the number of substitutions that
 * changed text (>= 0; 0 when n is NULL or has no rule), or ENG_ERR_NOMEM
 * (r is then still valid, possibly partly normalized). */
int hx_normalize_apply(const hx_normalize *n, hx_request *r);

/* Where a rule's values lie in a request: text offset and length inside a
 * system block (part HX_PART_SYSTEM, index i), a message block (part
 * HX_PART_MESSAGE, index m, block b) or the raw prompt (HX_PART_PROMPT). */
typedef struct hx_norm_span {
    hx_part part;
    int32_t index, block;
    size_t  off, len;
} hx_norm_span;

/* The spans of r (normalized or not) that n's rules rewrite: for
 * anthropic-cch, the value of every cch= field of a billing header line.
 * Writes at most cap into out and returns how many there are (0 without a
 * rule). Used to mark normalized text (kvreplay render). */
int hx_normalize_spans(const hx_normalize *n, const hx_request *r, hx_norm_span *out, int cap);

/* The anthropic-cch rule on one malloc'd text: when *text starts with
 * "x-anthropic-billing-header:" (or, with every_line, for each line that
 * does), rewrites the cch values, reallocating *text. Returns the number of
 * values changed, or ENG_ERR_NOMEM (*text untouched). */
int hx_normalize_cch_text(char **text, int every_line);

/* The key under which kvreplay groups requests into sessions (import --from
 * anthropic|openai, serve): the system blocks with every billing header's
 * cch normalized (anthropic-cch), then the first non-system message, so a
 * per-request checksum does not split a conversation. malloc'd; NULL on OOM. */
char *hx_request_session_key(const hx_request *q);

#endif /* HX_NORMALIZE_H */
