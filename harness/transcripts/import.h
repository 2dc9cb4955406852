/*
 * harness/transcripts/import.h: converting recorded agent logs into transcript v1
 * (`kvreplay import`). Formats (shared/FORMATS.md, rules in docs/transcripts.md):
 *
 *   anthropic    JSONL of Messages API request bodies, one model call per line.
 *   openai       JSONL of chat-completions request bodies, one call per line.
 *   claude-code  Claude Code session logs (~/.claude/projects/<p>/<session>.jsonl):
 *                conversation lines chained by parentUuid, one call per requestId.
 *   swe-agent    a SWE-agent *.traj JSON file: one call per assistant message
 *                of history[].
 *
 * Sessions and responses (anthropic, openai): requests with the same session
 * key, i.e. the same system prompt (compared after anthropic-cch
 * normalization, so the billing checksum does not split a conversation) and
 * the same first non-system message, form one session, in file order. A
 * request's recorded response is the assistant message that the session's
 * NEXT request appends right after this request's messages (when that next
 * request extends this one: same messages, then an assistant message);
 * otherwise the response is empty.
 *
 * Claude Code logs carry no system prompt or tools: the importer supplies
 * the built-in stand-in of hx_synth_agent_prefix(seed 0, 24000 bytes), whose
 * billing header checksum is the first 5 hex digits of XXH3-64(requestId),
 * unless system_file / tools_file are given.
 *
 * Errors name "FILE:LINE: FIELD: what is wrong" (swe-agent: "FILE: FIELD: ...").
 * With skip_bad a bad line (or history entry, or Claude Code request whose
 * chain is broken) is skipped and counted instead.
 */
#ifndef HX_IMPORT_H
#define HX_IMPORT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "transcript.h"

/* The index of an importer in the registry (transcripts/import.c); these
 * four are named, an importer added later is found by its name. */
typedef enum hx_import_format {
    HX_IMPORT_ANTHROPIC   = 0,
    HX_IMPORT_OPENAI      = 1,
    HX_IMPORT_CLAUDE_CODE = 2,
    HX_IMPORT_SWE_AGENT   = 3,
} hx_import_format;

typedef struct hx_import_opts {
    hx_import_format format;
    bool        skip_bad;     /* skip and count bad lines instead of failing */
    const char *session;      /* session name (claude-code: replaces the sessionId;
                                 anthropic/openai: prefix of "NAME-K"); NULL: derived
                                 from the input (file name without extension / sessionId) */
    const char *system_file;  /* NULL, or a file whose text replaces every request's system
                                 prompt: a JSON string or array of text blocks, else the whole
                                 file as one text block */
    const char *tools_file;   /* NULL, or a JSON array of tools (Anthropic or OpenAI shape)
                                 that replaces every request's tools */
    const void *format_opts;  /* the importer's own options struct, or NULL: its defaults */
} hx_import_opts;

/* An importer's --from name ("anthropic", "openai", "claude-code", "swe-agent", ...)
 * -> format (>= 0), or ENG_ERR_NOT_FOUND. */
int         hx_import_format_from_name(const char *name);
const char *hx_import_format_name(hx_import_format f);  /* "?" when out of range */

/* Converts n bytes of data (the content of `path`, which is used in messages
 * and to derive session names; data need not be NUL-terminated) into *out
 * (zeroed first; free with hx_transcript_free; out->path = path). Returns
 * ENG_OK, ENG_ERR_FORMAT (message in err), ENG_ERR_IO (an override file) or
 * ENG_ERR_NOMEM; *out is zeroed on failure. n_skipped may be NULL. */
int hx_import_buffer(const hx_import_opts *opts, const char *path, const char *data, size_t n,
                     hx_transcript *out, int64_t *n_skipped, char *err, size_t errlen);
/* Reads path and calls hx_import_buffer. ENG_ERR_IO when it cannot be read. */
int hx_import_file(const hx_import_opts *opts, const char *path, hx_transcript *out, int64_t *n_skipped,
                   char *err, size_t errlen);

#endif /* HX_IMPORT_H */
