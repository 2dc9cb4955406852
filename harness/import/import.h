/*
 * harness/import/import.h: converting recorded agent logs into transcripts
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
 * a stand-in per session (cc_standin.h), whose billing header checksum is
 * the first 5 hex digits of XXH3-64(requestId), unless system_file /
 * tools_file are given.
 *
 * Errors name "FILE:LINE: FIELD: what is wrong" (swe-agent: "FILE: FIELD: ...").
 * With skip_bad a bad line (or history entry) is skipped and counted
 * instead, and a Claude Code request whose history lost a skipped line is
 * dropped whole (counted in stats). A UTF-8 byte-order mark is skipped; a
 * UTF-16 file or a pretty-printed JSON document gets a message saying so.
 * The result carries a header (out->header): format, source and the counts.
 */
#ifndef HX_IMPORT_H
#define HX_IMPORT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "transcript.h"

/* The index of an importer in the registry (import/import.c); these
 * four are named, an importer added later is found by its name. */
typedef enum hx_import_format {
    HX_IMPORT_ANTHROPIC   = 0,
    HX_IMPORT_OPENAI      = 1,
    HX_IMPORT_CLAUDE_CODE = 2,
    HX_IMPORT_SWE_AGENT   = 3,
} hx_import_format;

/* What an import did besides converting: counts of what the input held
 * that did not map one to one (filled by the importer when
 * hx_import_opts.stats is set; zero otherwise). */
typedef struct hx_import_stats {
    int64_t skipped_lines;        /* bad lines skipped (--skip-bad) */
    int64_t dropped_requests;     /* requests dropped whole: their history lost a skipped line */
    int64_t relinked;             /* chain links re-made (late api_error lines) */
    int64_t unknown_blocks;       /* content blocks of unknown types, kept as their JSON text */
    char    unknown_types[160];   /* their types, comma-separated */
    int64_t tool_references;      /* tool_reference blocks (deferred tools loaded by tool search) */
    int64_t empty_thinking;       /* thinking blocks with empty text (signature only), dropped */
    int64_t synthetic;            /* client-made assistant messages (model "<synthetic>"): not model calls */
    int64_t api_error_messages;   /* of those, API error messages: left out of later prompts */
    int64_t attachments;          /* attachment lines sent as text */
    int64_t attachments_unsent;   /* attachment lines the client does not send (documented types) */
    int64_t unknown_attachments;  /* attachment lines of unknown types, sent as their JSON text */
    char    unknown_attachment_types[160];
    int64_t unknown_fields;       /* members the importer does not know (newer clients' fields), accepted */
    char    unknown_field_paths[256]; /* their distinct normalized paths, comma-separated (truncated) */
    int64_t skipped_line_types;   /* lines of types the importer does not know, skipped */
    char    skipped_types[160];   /* those types, comma-separated (truncated) */
    int64_t big_integers;         /* integers beyond 2^63-1 in fields not read, read as reals */
    int64_t sidechain_sessions;   /* subagent sessions */
    FILE   *report;               /* where the importer says what it did per request (e.g. stderr), or NULL */
} hx_import_stats;

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
    hx_import_stats *stats;   /* out (may be NULL): what the import did */
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
/* The --normalize rules that change the requests of t: a comma list such as
 * "anthropic-cch" (the per-request billing checksum of Claude Code) written
 * into buf ("" when none), and *n_requests the number of requests a rule
 * changes. Works on copies; t is not modified. ENG_OK or ENG_ERR_NOMEM. */
int hx_import_volatile(const hx_transcript *t, char *buf, size_t len, int32_t *n_requests);

/* Reads path and calls hx_import_buffer. ENG_ERR_IO when it cannot be read. */
int hx_import_file(const hx_import_opts *opts, const char *path, hx_transcript *out, int64_t *n_skipped,
                   char *err, size_t errlen);

#endif /* HX_IMPORT_H */
