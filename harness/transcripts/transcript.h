/*
 * harness/transcripts/transcript.h: kvreplay transcript formats v1 and v2 (docs/transcripts.md):
 * the model (transcript.c), its reader (transcript_read.c) and its writer
 * (transcript_write.c).
 *
 * A transcript is JSONL, one request (one model call) per line, in replay
 * order. A v1 line is self-contained: the whole prompt of that call (system
 * blocks, tool definitions, messages) plus the recorded response. A v2 file
 * may start with a header line (import metadata), and a v2 line may be
 * compact: it names the previous request of its session (`prev`) and holds
 * only the messages it appends, so a session is stored once; reading
 * expands every line into a whole request, so the rest of kvreplay sees the
 * same structures from either version. A line either has structured
 * `messages` (rendered through a chat template), or a raw `prompt` string,
 * or pre-tokenized `tokens`.
 *
 * Invariant after hx_transcript_read: every string field is non-NULL where
 * documented below, block types are valid, tool_use inputs and tool schemas
 * are canonical JSON (compact, keys sorted) so rendering is deterministic.
 * All memory is owned by the hx_transcript and released by hx_transcript_free.
 */
#ifndef HX_TRANSCRIPT_H
#define HX_TRANSCRIPT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef enum hx_block_type {
    HX_BLOCK_TEXT        = 0,  /* text */
    HX_BLOCK_THINKING    = 1,  /* text = the thinking */
    HX_BLOCK_TOOL_USE    = 2,  /* id, name, input (canonical JSON object) */
    HX_BLOCK_TOOL_RESULT = 3,  /* id = tool_use_id, text = flattened content, is_error */
    HX_BLOCK_IMAGE       = 4,  /* text = a placeholder such as "[image]" */
} hx_block_type;

typedef enum hx_role {
    HX_ROLE_SYSTEM    = 0,
    HX_ROLE_USER      = 1,
    HX_ROLE_ASSISTANT = 2,
    HX_ROLE_TOOL      = 3,  /* OpenAI-style tool message: one TOOL_RESULT block */
} hx_role;

typedef struct hx_block {
    hx_block_type type;
    char *text;      /* never NULL ("" when the type has none) */
    char *id;        /* tool_use id / tool_result tool_use_id; NULL otherwise */
    char *name;      /* tool_use name; NULL otherwise */
    char *input;     /* tool_use input as canonical JSON; NULL otherwise */
    bool  is_error;  /* tool_result only */
} hx_block;

typedef struct hx_message {
    hx_role   role;
    hx_block *blocks;
    int32_t   n_blocks;
} hx_message;

typedef struct hx_tool {
    char *name;         /* never NULL */
    char *description;  /* never NULL ("" when absent) */
    char *schema;       /* input schema as canonical JSON ("{}" when absent) */
} hx_tool;

/* What the recorded call's own log said about its prompt size (Anthropic
 * message.usage), and what the imported prompt came to (import -m). */
typedef struct hx_call_usage {
    bool    present;         /* the log recorded usage for this call */
    int64_t input;           /* input_tokens (>= 0) */
    int64_t cache_read;      /* cache_read_input_tokens (>= 0) */
    int64_t cache_creation;  /* cache_creation_input_tokens (>= 0) */
    int64_t prompt_tokens;   /* the imported prompt's tokens (import -m), or -1: not counted */
    char   *counted_with;    /* "VOCAB-FILE TEMPLATE" the tokens were counted with; NULL when not counted */
} hx_call_usage;

typedef struct hx_request {
    char      *session;      /* never NULL */
    int32_t    turn;         /* >= 0, increasing within a session */
    int64_t    line;         /* 1-based line in the source file (for messages) */
    hx_block  *system;       /* system prompt blocks in order (TEXT), may be 0 */
    int32_t    n_system;
    hx_tool   *tools;
    int32_t    n_tools;
    hx_message *messages;    /* the conversation before the call */
    int32_t    n_messages;
    hx_message response;     /* the recorded assistant turn (role ASSISTANT); n_blocks may be 0 */
    char      *prompt;       /* raw prompt text, or NULL */
    int32_t   *tokens;       /* pre-tokenized prompt, or NULL */
    int32_t    n_tokens;
    char      *response_text; /* raw response text (with prompt/tokens), or NULL */
    hx_call_usage   usage;        /* v2 `usage`; usage.present false when absent */
    char      *notes;        /* v2 `notes`: canonical JSON array of strings (what the importer did), or NULL */
    char      *served;       /* v2 `served`: how a server received this call (kvreplay serve --record: the
                                API, method, path, the headers kept, the body as received, id_slot,
                                cache_prompt), canonical JSON object, or NULL */
} hx_request;

typedef struct hx_transcript {
    char       *path;
    hx_request *reqs;
    int32_t     n;
    char       *header;  /* v2 header line's object as canonical JSON (import metadata), or NULL */
} hx_transcript;

/* Reads a transcript file (v1 or v2 lines; a UTF-8 byte-order mark is
 * skipped). A bad line is ENG_ERR_FORMAT with err "FILE:LINE: FIELD: what
 * is wrong" unless skip_bad, in which case it is skipped and counted in
 * *n_skipped (may be NULL); a compact line whose previous request was
 * skipped cannot be rebuilt and is skipped (and counted) too. Returns
 * ENG_OK, ENG_ERR_IO, ENG_ERR_FORMAT or ENG_ERR_NOMEM. *out is zeroed on
 * failure. */
int  hx_transcript_read(const char *path, bool skip_bad, hx_transcript *out, int64_t *n_skipped,
                        char *err, size_t errlen);
/* Parses one self-contained line (v1, or v2 without `prev`; len bytes, no
 * newline needed); same error contract, with path and line used in the
 * message. */
int  hx_request_parse(const char *json, size_t len, const char *path, int64_t line,
                      hx_request *out, char *err, size_t errlen);
/* Writes t as transcript v2 (compact lines, header when t->header), through
 * hx_write_atomic (jsonl.h: temp file, fsync, rename; a non-regular target
 * is refused with ENG_ERR_ARG). */
int  hx_transcript_write(const char *path, const hx_transcript *t, char *err, size_t errlen);
/* The same with the format version chosen: 2, or 1 (self-contained lines;
 * usage, notes and the header are not kept). */
int  hx_transcript_write_version(const char *path, const hx_transcript *t, int version, char *err, size_t errlen);
void hx_transcript_free(hx_transcript *t);  /* accepts NULL and zeroed */
void hx_request_free(hx_request *r);        /* accepts NULL */

/* Appends r to t (takes ownership of r's contents; r is zeroed). */
int  hx_transcript_push(hx_transcript *t, hx_request *r);

/* What a served request asked of the cache (its `served` id_slot and
 * cache_prompt): *id_slot -1 and *no_reuse false when it asked nothing. */
void hx_request_served_hint(const hx_request *r, int32_t *id_slot, bool *no_reuse);
/* One request as the v2 line hx_transcript_serialize writes for it after
 * prev (the previous request of its session in the file, or NULL): compact
 * when r extends prev. *out is malloc'd, with no newline. The header line of
 * a v2 file ({"v":2,"header":HEADER}) when r is NULL and header is given.
 * ENG_OK, ENG_ERR_FORMAT (not encodable: invalid UTF-8) or ENG_ERR_NOMEM. */
int  hx_request_serialize_line(const hx_request *r, const hx_request *prev, const char *header, char **out,
                               size_t *n, char *err, size_t errlen);

// ----------------------------------------------------------------------------
// What the importers (harness/import/), the synthetic generator and the
// templates share with the reader and the writer

struct json_t;  /* jansson's json_t */

/* What a request carries: structured messages (rendered by a chat template),
 * a raw prompt string, or pre-tokenized ids. */
typedef enum hx_request_kind {
    HX_REQUEST_MESSAGES = 0,
    HX_REQUEST_PROMPT   = 1,
    HX_REQUEST_TOKENS   = 2,
} hx_request_kind;

hx_request_kind hx_request_kind_of(const hx_request *r);  /* r must not be NULL */

/* Parses a whole transcript held in memory (data need not be NUL-terminated);
 * same contract as hx_transcript_read, with path used in messages and copied
 * into out->path (may be NULL: "-" is used). Blank lines are skipped. */
int  hx_transcript_parse(const char *data, size_t n, const char *path, bool skip_bad,
                         hx_transcript *out, int64_t *n_skipped, char *err, size_t errlen);
/* Serializes t exactly as hx_transcript_write writes it: one canonical line
 * per request, each ending in '\n' (v2: compact lines after an optional
 * header line). *out is malloc'd (caller frees), *n its length. Returns
 * ENG_OK, ENG_ERR_FORMAT (a string is not valid UTF-8; err names the
 * request) or ENG_ERR_NOMEM. */
int  hx_transcript_serialize(const hx_transcript *t, char **out, size_t *n, char *err, size_t errlen);
int  hx_transcript_serialize_version(const hx_transcript *t, int version, char **out, size_t *n, char *err,
                                     size_t errlen);

/* JSON -> structures, with the v1 rules (docs/transcripts.md), shared with
 * the importers. `field` is the JSON path of j used in error messages
 * (e.g. "messages[3].content[0]"). On failure *out is left zeroed/freed and
 * ENG_ERR_FORMAT or ENG_ERR_NOMEM is returned with a message in err. */
int  hx_block_from_json(const struct json_t *j, const char *path, int64_t line, const char *field,
                        hx_block *out, char *err, size_t errlen);
/* content: a string (one TEXT block) or an array of blocks. */
int  hx_blocks_from_json(const struct json_t *content, const char *path, int64_t line,
                         const char *field, hx_block **out, int32_t *n, char *err, size_t errlen);

/* How an importer reads the blocks of a log it does not control. */
typedef struct hx_block_opts {
    bool    lenient;           /* a block of an unknown type (also inside a tool_result) becomes a TEXT block
                                  holding the block's canonical JSON, counted, instead of an error */
    bool    drop_empty_thinking; /* a thinking block with empty text is dropped (counted) */
    int64_t n_unknown;         /* out: blocks kept as JSON text */
    int64_t n_empty_thinking;  /* out: empty thinking blocks dropped */
    int64_t n_tool_reference;  /* out: tool_reference blocks read (inside tool_result content) */
    char    unknown_types[160];/* out: the distinct unknown types, comma-separated (truncated) */
} hx_block_opts;
/* hx_blocks_from_json with opts (NULL: the strict v1 rules). */
int  hx_blocks_from_json_opts(const struct json_t *content, const char *path, int64_t line, const char *field,
                              hx_block_opts *opts, hx_block **out, int32_t *n, char *err, size_t errlen);
/* A message object {"role","content"} (role tool: see docs). */
int  hx_message_from_json(const struct json_t *j, const char *path, int64_t line, const char *field,
                          hx_message *out, char *err, size_t errlen);
/* system: a string (one TEXT block), an array of text blocks, or null (none). */
int  hx_system_from_json(const struct json_t *j, const char *path, int64_t line, const char *field,
                         hx_block **out, int32_t *n, char *err, size_t errlen);
/* tools: an array of {"name","description","input_schema"}; also accepts the
 * OpenAI shape {"type":"function","function":{"name","description","parameters"}}. */
int  hx_tools_from_json(const struct json_t *j, const char *path, int64_t line, const char *field,
                        hx_tool **out, int32_t *n, char *err, size_t errlen);

/* Structure helpers. Copies are deep; *_free accept NULL and zeroed values
 * and leave the object zeroed. All return ENG_OK or ENG_ERR_NOMEM unless noted. */
/* Fills b with copies of the strings (NULL id/name/input allowed; text NULL
 * means ""). For TOOL_USE, input is canonicalized (NULL means "{}"), and an
 * input that is not a JSON object gives ENG_ERR_FORMAT. */
int  hx_block_init(hx_block *b, hx_block_type type, const char *text, const char *id,
                   const char *name, const char *input, bool is_error);
int  hx_block_copy(hx_block *dst, const hx_block *src);
void hx_block_free(hx_block *b);
int  hx_message_copy(hx_message *dst, const hx_message *src);
void hx_message_free(hx_message *m);
/* Appends *b to m, taking ownership of its strings (b is zeroed). */
int  hx_message_push_block(hx_message *m, hx_block *b);
/* Appends *m to q's messages, taking ownership of its blocks (m is zeroed). */
int  hx_request_push_message(hx_request *q, hx_message *m);
bool hx_block_equal(const hx_block *a, const hx_block *b);
bool hx_message_equal(const hx_message *a, const hx_message *b);
int  hx_tool_copy(hx_tool *dst, const hx_tool *src);
bool hx_tool_equal(const hx_tool *a, const hx_tool *b);
void hx_tool_free(hx_tool *t);
int  hx_request_copy(hx_request *dst, const hx_request *src);
void hx_call_usage_free(hx_call_usage *u);  /* accepts NULL; leaves it zeroed */
int  hx_call_usage_copy(hx_call_usage *dst, const hx_call_usage *src);
int64_t hx_call_usage_total(const hx_call_usage *u);  /* input + cache_read + cache_creation; -1 when absent */
/* Deep equality of everything a request renders from plus session and turn
 * (the source line is ignored). */
bool hx_request_equal(const hx_request *a, const hx_request *b);
const char *hx_role_name(hx_role r);              /* "user", ...; "?" when out of range */
const char *hx_block_type_name(hx_block_type t);  /* "text", ...; "?" when out of range */

#endif /* HX_TRANSCRIPT_H */
