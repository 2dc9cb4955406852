/*
 * harness/api/api.h: the request/response layer of the three HTTP APIs real
 * inference servers speak, shared by what answers them (`kvreplay serve`),
 * what sends them (`kvreplay probe`) and what reads their request logs (the
 * importers of harness/import/).
 *
 * A dialect is one file: llama.c (llama-server's native API: /completion,
 * /tokenize, /detokenize, /apply-template, /health, /props, /slots),
 * openai.c (/v1/completions, /v1/chat/completions, /v1/models),
 * anthropic.c (/v1/messages, /v1/messages/count_tokens), responses.c
 * (OpenAI's /v1/responses) and gemini.c (/v1beta/models/M:generateContent,
 * :streamGenerateContent, :countTokens). Each speaks both
 * directions of each of its routes:
 *   server side  body -> hx_api_req (errors name the field, in the dialect's
 *                own error shape and status; a field it does not know, at
 *                any depth, is accepted and listed: hx_api_note_unknown);
 *                hx_api_result -> response
 *                body, or -> SSE events (hx_api_stream_*);
 *   client side  hx_api_req -> request body; response body or SSE stream ->
 *                hx_api_result (tolerant of what real servers add, strict
 *                about what is missing).
 * Field names, shapes and semantics are the real servers' own (docs/serve.md
 * cites the sources). sse.c frames and parses server-sent events, api.c
 * holds the dialect registry and what every dialect shares.
 *
 * The prompt of every request is an hx_request (transcripts/transcript.h):
 * messages with system blocks and tools, a raw prompt string, or token ids,
 * so a served request renders through the same chat templates as a replayed
 * one (replay/prepare.h). Everything else a body carries is hx_api_params.
 *
 * Ownership: hx_api_req and hx_api_result own every string and array they
 * point to (hx_api_req_free, hx_api_result_free accept zeroed values).
 * Strings in results are byte strings with explicit lengths where a token
 * piece may be invalid UTF-8 (hx_api_token.text); JSON output writes such
 * bytes as llama-server does (the valid UTF-8 prefix in "token", every byte
 * in "bytes").
 *
 * Usage (server side):
 *     const hx_api_route *rt = hx_api_route_find("POST", "/v1/messages", NULL);
 *     hx_api_req q; hx_api_error e;
 *     if (rt->parse(rt, path, query, body, n, &q, &e) != ENG_OK) send(e.status, hx_api_error_body(rt->dialect, &e));
 *     ... render q.req, generate into hx_api_result r ...
 *     json_t *out = rt->respond(&q, &r);                       // not streamed
 *     hx_api_stream st; hx_api_stream_init(&st, &q, &r);        // streamed:
 *     hx_api_stream_begin(&st); hx_api_stream_token(&st, &tok); ... hx_api_stream_end(&st);
 *     (st.out holds the SSE bytes to send after each call)
 * Usage (client side):
 *     json_t *body = rt->request(&q);
 *     rt->read(rt, response, n, &r, &e);                         // or, streamed:
 *     hx_api_reader rd; hx_api_reader_init(&rd, rt);
 *     hx_api_reader_feed(&rd, bytes, n, &r, &e);  ... hx_api_reader_finish(&rd, &r, &e);
 */
#ifndef HX_API_H
#define HX_API_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "sse.h"
#include "transcript.h"
#include "util.h"

// ----------------------------------------------------------------------------
// Errors: one kind per HTTP status a dialect gives it

typedef enum hx_api_err_kind {
    HX_API_ERR_NONE = 0,
    HX_API_ERR_INVALID,        /* 400: malformed JSON, a missing or wrongly typed field */
    HX_API_ERR_CONTEXT,        /* 400: the prompt does not fit the context (names both lengths) */
    HX_API_ERR_AUTH,           /* 401: no or a wrong API key */
    HX_API_ERR_NOT_FOUND,      /* 404: no such route, slot or model */
    HX_API_ERR_METHOD,         /* 405: the route exists for another method */
    HX_API_ERR_TOO_LARGE,      /* 413: the body is over --max-body */
    HX_API_ERR_SERVER,         /* 500: kvreplay failed while working */
    HX_API_ERR_NOT_SUPPORTED,  /* 501: valid, but not something kvreplay does */
    HX_API_ERR_UNAVAILABLE,    /* 503: the queue is full (retry_after set) or the server stops */
    HX_API_ERR_KINDS
} hx_api_err_kind;

/* llama-server's error types per kind, which its OpenAI routes share (llama.c, openai.c, responses.c) */
extern const char *const hx_api_server_error_types[HX_API_ERR_KINDS];

typedef struct hx_api_error {
    hx_api_err_kind kind;
    int             status;           /* the HTTP status (kind's, or what a server sent) */
    char            type[48];         /* the dialect's error type, e.g. "invalid_request_error" */
    char            field[128];       /* the JSON path of the field at fault, "" when none */
    char            message[768];     /* one line, naming the field when there is one */
    int64_t         n_prompt_tokens;  /* HX_API_ERR_CONTEXT: the prompt's tokens (else -1) */
    int64_t         n_ctx;            /* HX_API_ERR_CONTEXT: the context (else -1) */
    int             retry_after;      /* HX_API_ERR_UNAVAILABLE: seconds (0: none) */
} hx_api_error;

/* Fills e: kind, its status, field (NULL: none) and a message "FIELD: what"
 * (or just what). Returns the ENG_ status the parsers return for it:
 * ENG_ERR_FORMAT for client errors, ENG_ERR_NOMEM/ENG_ERR_IO as given. */
int  hx_api_errf(hx_api_error *e, hx_api_err_kind kind, const char *field, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
int  hx_api_err_status(hx_api_err_kind kind);        /* 400, 401, ... */
const char *hx_api_err_kind_name(hx_api_err_kind kind);  /* "invalid", "context", ... */

// ----------------------------------------------------------------------------
// What a request asks for besides its prompt

typedef enum hx_api_op {
    HX_API_OP_GENERATE = 0,    /* a completion: prompt -> generated turn */
    HX_API_OP_COUNT_TOKENS,    /* Anthropic count_tokens */
    HX_API_OP_TOKENIZE,        /* llama /tokenize */
    HX_API_OP_DETOKENIZE,      /* llama /detokenize */
    HX_API_OP_APPLY_TEMPLATE,  /* llama /apply-template */
    HX_API_OP_HEALTH,
    HX_API_OP_PROPS,
    HX_API_OP_MODELS,
    HX_API_OP_SLOTS,           /* GET /slots */
    HX_API_OP_SLOT_ACTION,     /* POST /slots/ID?action=erase */
    HX_API_OP_METRICS,         /* GET /metrics (Prometheus text) */
} hx_api_op;

/* Sampling fields, as the body gave them (NaN / INT32_MIN: absent). kvreplay
 * generates greedily; hx_api_sampling_honoured says whether greedy honours them. */
typedef struct hx_api_sampling {
    double  temperature, top_p, min_p, typical_p;
    double  repeat_penalty, presence_penalty, frequency_penalty;
    int32_t top_k;
    int64_t seed;             /* INT64_MIN: absent */
    char   *other;            /* canonical JSON object of the other sampling fields given
                                 (mirostat, dry_*, xtc_*, logit_bias, n > 1, ...), or NULL */
} hx_api_sampling;

typedef struct hx_api_params {
    char    *model;           /* "model" as given, or NULL */
    int32_t  max_tokens;      /* n_predict / max_tokens / max_completion_tokens; -1: not given */
    bool     stream;
    bool     include_usage;   /* OpenAI stream_options.include_usage */
    bool     logprobs;        /* probabilities were asked for (OpenAI "logprobs", llama n_probs > 0) */
    int32_t  n_probs;         /* top candidates per generated token (llama n_probs, OpenAI
                                 top_logprobs / completions logprobs); 0: none */
    bool     cache_prompt;    /* llama; default true (false: reuse nothing for this request) */
    int32_t  id_slot;         /* llama; -1: any slot */
    bool     return_tokens;   /* llama: the generated ids in "tokens" (default false) */
    hx_api_sampling sampling;
    char   **stop;            /* stop strings (stop, stop_sequences) */
    int32_t  n_stop;
    char    *tool_choice;     /* canonical JSON as given, or NULL */
    char    *ignored;         /* comma list of the body's fields kvreplay accepts but does not act on, at any
                                 depth, as normalized JSON paths ("metadata", "messages[].output_config"), or
                                 NULL (hx_api_note_unknown; the same paths as hx_api_req.ignored_paths) */
    /* /tokenize */
    bool     add_special;     /* default false (llama-server's) */
    bool     parse_special;   /* default true */
    bool     with_pieces;     /* default false */
    /* /slots/ID?action=... */
    int32_t  slot_id;         /* -1 when absent */
    char     action[16];      /* "erase", ... */
    /* the Responses API */
    bool     no_store;        /* "store": false (the response is not kept for previous_response_id) */
    char    *previous_response_id; /* the stored response this one continues, or NULL */
    char    *cache_key;       /* "prompt_cache_key" (a routing hint; kvreplay's one engine needs none), or NULL */
    /* client only (kvreplay probe): vendor extensions of the OpenAI API */
    char    *cache_salt;      /* vLLM and SGLang "cache_salt": reuse only between requests of the same salt;
                                 NULL: none */
    bool     return_token_ids;/* ask for the generated ids: vLLM "return_tokens_as_token_ids" (logprob tokens
                                 read back as "token_id:N"), SGLang "return_token_ids" (choices[].token_ids) */
} hx_api_params;

struct hx_api_route;
struct hx_api_dialect;

typedef struct hx_api_req {
    const struct hx_api_route *route;  /* the route it was parsed for (or will be sent to) */
    hx_request     req;       /* the prompt: messages (+ system, tools), or prompt text, or tokens;
                                 session "", turn 0 (the caller assigns them) */
    hx_api_params  params;
    char         **ignored_paths;      /* (n_ignored) the distinct paths of params.ignored, in body order, at
                                          most HX_API_MAX_IGNORED (serve counts them by path) */
    int32_t        n_ignored;
    int64_t        n_unknown_blocks;   /* content blocks of unknown types kept as their JSON text */
    char           unknown_types[160]; /* their types, comma-separated */
} hx_api_req;

void hx_api_req_init(hx_api_req *q);   /* defaults: max_tokens -1, cache_prompt true, id_slot -1, ... */
void hx_api_req_free(hx_api_req *q);   /* accepts NULL and zeroed; leaves it initialized */

// ----------------------------------------------------------------------------
// What a generation returns

typedef struct hx_api_prob {
    int32_t id;
    char   *text;     /* the token's bytes (len), any bytes */
    size_t  len;
    float   logprob;  /* log of its probability under softmax of the raw logits */
} hx_api_prob;

typedef struct hx_api_token {
    int32_t      id;
    char        *text;    /* its piece as bytes (len) */
    size_t       len;
    float        logprob; /* NaN when not computed */
    hx_api_prob *top;     /* (n_top) the most probable candidates, most probable first */
    int32_t      n_top;
} hx_api_token;

typedef enum hx_api_finish {
    HX_API_FINISH_NONE = 0,   /* not finished (a stream cut short) */
    HX_API_FINISH_STOP,       /* end of turn / EOS: "stop", "end_turn", stop_type "eos" */
    HX_API_FINISH_LENGTH,     /* max_tokens reached: "length", "max_tokens", "limit" */
    HX_API_FINISH_TOOL_USE,   /* the turn ends in tool calls: "tool_calls", "tool_use" */
    HX_API_FINISH_STOP_WORD,  /* a stop string: "stop", "stop_sequence", "word" */
} hx_api_finish;

typedef struct hx_api_usage {
    int64_t prompt_tokens;         /* -1: unknown */
    int64_t cached_tokens;         /* prompt tokens whose state came from the cache; -1: not reported */
    int64_t cache_creation_tokens; /* Anthropic cache_creation_input_tokens; -1: not reported */
    int64_t completion_tokens;     /* -1: unknown */
} hx_api_usage;

typedef struct hx_api_timings {   /* llama-server's "timings"; present when prompt_n >= 0 */
    int64_t cache_n, prompt_n, predicted_n;
    double  prompt_ms, predicted_ms;
} hx_api_timings;

/* What the information endpoints report (/props, /v1/models, /slots), filled
 * by the server; borrowed by hx_api_result.info. */
typedef struct hx_api_slot {
    int32_t id;
    int32_t n_ctx;
    bool    is_processing;
    int64_t n_tokens;        /* tokens its sequence holds */
    int64_t id_task;         /* the last request it served, -1: none */
} hx_api_slot;

typedef struct hx_api_info {
    const char        *model_name;    /* the alias every response echoes when the body names none */
    const char        *model_path;
    const char        *template_name; /* the chat template in use ("chatml", ...) */
    const char        *bos_token, *eos_token;
    const char        *build_info;    /* "kvreplay 0.1.0 (REV)" */
    const char        *vocab_type;    /* "llama", "gpt2", "rwkv" */
    int32_t            n_ctx, n_vocab, n_ctx_train, n_embd, total_slots;
    int64_t            n_params, size;
    const hx_api_slot *slots;         /* (n_slots) GET /slots */
    int32_t            n_slots;
    int64_t            n_erased;      /* POST /slots/ID?action=erase: tokens erased */
    const char        *cache_json;    /* kvreplay serve: its cache rule as a JSON object ({"policy", "quirks",
                                         "normalize", "align", "chunk", "cap_prompt"}), /props' "kvreplay"; NULL */
} hx_api_info;

typedef struct hx_api_result {
    char          *id;          /* response id ("chatcmpl-...", "msg_...") or NULL */
    char          *model;       /* echoed model name or NULL */
    int64_t        created;     /* unix seconds, 0 when none */
    hx_message     content;     /* the assistant turn: text, thinking and tool_use blocks */
    hx_api_token  *tokens;      /* (n_tokens) per generated token, when known */
    int32_t        n_tokens;
    hx_api_finish  finish;
    char          *stop_word;   /* the stop string that ended it, or NULL */
    hx_api_usage   usage;
    hx_api_timings timings;
    int32_t        id_slot;     /* llama: the slot that served it; -1: unknown */
    /* the endpoints that are not generations */
    int64_t        n_input_tokens;   /* count_tokens; -1 when absent */
    char          *text;             /* /detokenize content, /apply-template prompt (NUL-terminated) */
    int32_t       *ids;              /* /tokenize ids (n_ids) */
    int32_t        n_ids;
    const hx_api_info *info;         /* server: what /props, /v1/models, /slots report (borrowed) */
    char          *json;             /* client: an information endpoint's whole body, canonical JSON */
} hx_api_result;

void hx_api_result_init(hx_api_result *r);
void hx_api_result_free(hx_api_result *r);  /* accepts NULL and zeroed; leaves it initialized */
/* Appends a token (copies text and top). ENG_OK or ENG_ERR_NOMEM. */
int  hx_api_result_push_token(hx_api_result *r, const hx_api_token *t);
/* The concatenated text blocks of r->content (malloc'd, NUL-terminated), or NULL on OOM. */
char *hx_api_result_text(const hx_api_result *r);
/* Deep equality of two results' content, tokens (ids, bytes, logprob bits,
 * top candidates), finish, usage, timings counts and id_slot (tests). */
bool hx_api_result_equal(const hx_api_result *a, const hx_api_result *b);

// ----------------------------------------------------------------------------
// Server-side streaming: a result written as the dialect's SSE events

typedef struct hx_api_stream {
    const struct hx_api_route *route;
    const hx_api_req *q;
    const hx_api_result *r;   /* id, model, created, usage (prompt, cached) known when it begins */
    eng_buf   out;            /* the SSE bytes produced by the last calls, to send (caller empties it) */
    /* state */
    int32_t   block;          /* index of the open content block, -1: none */
    int       block_type;     /* its hx_block_type */
    int32_t   n_blocks;       /* blocks started so far */
    int32_t   n_tools;        /* tool calls started (OpenAI tool_calls index) */
    int64_t   n_tokens;       /* token deltas sent */
    int64_t   seq;            /* the next event's sequence number (dialects that number their events) */
    json_t   *items;          /* the output items so far, for dialects whose last event repeats them (Responses) */
    eng_buf   acc;            /* the open item's text so far (Responses' *.done events carry it whole) */
    char      pending[4];     /* the incomplete UTF-8 tail of the text so far */
    int       n_pending;
    bool      began, ended;
    int       err;            /* ENG_ERR_NOMEM once an append failed */
} hx_api_stream;

void hx_api_stream_init(hx_api_stream *s, const hx_api_req *q, const hx_api_result *r);
void hx_api_stream_free(hx_api_stream *s);
/* The opening events (Anthropic message_start + ping, OpenAI's role delta;
 * llama-server sends none). */
int  hx_api_stream_begin(hx_api_stream *s);
/* One generated token: its text (UTF-8 completed across tokens) and, when
 * asked, its probabilities. */
int  hx_api_stream_token(hx_api_stream *s, const hx_api_token *t);
/* One whole content block (a scripted turn's text, thinking or tool_use). */
int  hx_api_stream_block(hx_api_stream *s, const hx_block *b);
/* The closing events: finish reason, usage, timings (from s->r), [DONE]. */
int  hx_api_stream_end(hx_api_stream *s);
/* An error after the stream began (Anthropic "error" event, OpenAI
 * {"error":...} data line); the stream ends. */
int  hx_api_stream_error(hx_api_stream *s, const hx_api_error *e);

// ----------------------------------------------------------------------------
// Client-side streaming: SSE bytes as received -> a result

typedef struct hx_api_reader {
    const struct hx_api_route *route;
    hx_sse_parser sse;
    hx_api_result *r;         /* set by each feed */
    hx_api_error  *e;
    int64_t   n_token_events; /* events that carried generated text or a token so far */
    bool      done;           /* the stream's own end was seen ([DONE], message_stop, stop:true) */
    bool      failed;         /* an error event or a malformed one */
    int32_t   block;          /* Anthropic: the open block's index, -1: none */
    int       block_type;     /* its hx_block_type */
    char     *block_id;       /* a tool_use block's id and name */
    char     *block_name;
    eng_buf   text;           /* the open block's text or input JSON (OpenAI chat: the content) */
    eng_buf   thinking;       /* OpenAI chat: reasoning_content, accumulated */
    json_t   *calls;          /* OpenAI chat: the tool calls by index, [{"id", "name", "arguments"}] */
    int64_t   seq;            /* the next sequence number the stream must carry (Responses), -1: unchecked */
    int       phase;          /* the dialect's place in its event sequence (Responses, Gemini) */
    int32_t   n_items;        /* output items opened so far (Responses) */
    /* optional (kvreplay probe): called after each event was read, with whether it carried a token
     * (n_token_events grew): the raw event, e.g. the exact JSON text of a token's probabilities */
    void    (*on_event)(void *ud, const hx_sse_event *ev, bool token_bearing);
    void     *event_ud;
} hx_api_reader;

void hx_api_reader_init(hx_api_reader *rd, const struct hx_api_route *route);
void hx_api_reader_free(hx_api_reader *rd);
/* Feeds n bytes of the response body; updates r (initialized by the
 * caller). Returns the number of token-bearing events they completed (>= 0),
 * or ENG_ERR_FORMAT with e filled (an error event, malformed JSON, an event
 * out of order). */
int  hx_api_reader_feed(hx_api_reader *rd, const char *bytes, size_t n, hx_api_result *r, hx_api_error *e);
/* At the end of the body: ENG_OK when the stream ended as its dialect ends
 * one, else ENG_ERR_FORMAT ("the stream ended before message_stop"). */
int  hx_api_reader_finish(hx_api_reader *rd, hx_api_result *r, hx_api_error *e);

// ----------------------------------------------------------------------------
// Routes and dialects

typedef struct hx_api_route {
    const char *method;       /* "GET" | "POST" */
    const char *path;         /* "/v1/messages"; a trailing "*" matches the rest of a path ("/slots/ *"), a "*"
                                 inside one name ("/v1beta/models/ *:generateContent") */
    hx_api_op   op;
    const struct hx_api_dialect *dialect;
    /* server: a request (its path without the query string, the query string or NULL, the body of
     * n bytes) -> *q (initialized here). ENG_OK, ENG_ERR_FORMAT (e: 400 naming the field) or
     * ENG_ERR_NOMEM. NULL for routes that read nothing (GET /health, /props, ...). */
    int     (*parse)(const struct hx_api_route *rt, const char *path, const char *query, const char *body,
                     size_t n, hx_api_req *q, hx_api_error *e);
    /* server: the response body of a finished request (NULL on OOM) */
    json_t *(*respond)(const hx_api_req *q, const hx_api_result *r);
    /* client: the request body of q (NULL on OOM) */
    json_t *(*request)(const hx_api_req *q);
    /* client: a response body -> *r (initialized here; freed again on failure). ENG_OK or
     * ENG_ERR_FORMAT (e names the field). */
    int     (*read)(const struct hx_api_route *rt, const char *body, size_t n, hx_api_result *r, hx_api_error *e);
    /* streaming (GENERATE routes): server-side events, client-side reading of one event */
    int     (*stream_begin)(hx_api_stream *s);
    int     (*stream_token)(hx_api_stream *s, const hx_api_token *t, const char *text, size_t n);
    int     (*stream_block)(hx_api_stream *s, const hx_block *b);
    int     (*stream_end)(hx_api_stream *s);
    int     (*stream_read)(hx_api_reader *rd, const hx_sse_event *ev);
    /* client: the query string its requests carry ("alt=sse"), or NULL */
    const char *query;
} hx_api_route;

/* A dialect's error shape, as data: api.c writes and reads every dialect's
 * errors from it (hx_api_error_body, hx_api_read_error, hx_api_stream_error).
 * The body is {"error": {...}}, or {"type": "error", "error": {...}} with
 * `envelope`; the inner object holds "message", the kind's name under
 * type_key, and what the flags add. */
typedef struct hx_api_error_shape {
    const char *type_key;          /* "type" (most), "status" (Gemini's google.rpc code name) */
    const char *const *types;      /* [HX_API_ERR_KINDS] the name per kind; NULL: types[HX_API_ERR_INVALID] */
    bool        envelope;          /* {"type": "error", "error": {...}} (Anthropic) */
    bool        code;              /* "code": the HTTP status */
    bool        param;             /* "param": the field at fault, or null (OpenAI) */
    bool        context_counts;    /* "n_prompt_tokens" and "n_ctx" on a context error (llama-server) */
    const char *context_message;   /* a context error's message, printf of (prompt tokens, context), read
                                      back with sscanf (Anthropic's wording); NULL: the message as it is */
    const char *stream_event;      /* the SSE event name of an error in a stream; NULL: a data line */
    bool        stream_flat;       /* a stream error is {"type": "error", "code", "message", "param",
                                      "sequence_number"} (the Responses API) instead of the body */
} hx_api_error_shape;

typedef struct hx_api_dialect {
    const char          *name;     /* "llama", "openai", "anthropic", "responses", "gemini" */
    const hx_api_route  *routes;   /* {0}-terminated */
    const hx_api_error_shape *errors;
    const char          *id_prefix;/* response ids ("resp_"); NULL: the route's own (msg_, chatcmpl-, cmpl-) */
    bool                 sse_data_only; /* its clients read data lines only: no SSE comments (Gemini's SDK) */
} hx_api_dialect;

/* The error body of e in dialect d's shape (NULL on OOM). */
json_t *hx_api_error_body(const hx_api_dialect *d, const hx_api_error *e);
/* client: an error body (any status) -> *e; false when it is not d's shape. */
bool    hx_api_read_error(const hx_api_dialect *d, const char *body, size_t n, int status, hx_api_error *e);
/* The same for a parsed object (a stream's error event); false when it is not d's shape. */
bool    hx_api_read_error_json(const hx_api_dialect *d, const json_t *j, int status, hx_api_error *e);
/* The error event of a stream that already began, in d's shape, appended to out; seq is the
 * event's sequence number where the shape numbers events. */
int     hx_api_write_stream_error(const hx_api_dialect *d, eng_buf *out, int64_t seq, const hx_api_error *e);

/* The registered dialects, NULL-terminated (api.c: one line each). */
extern const hx_api_dialect *const hx_api_dialects[];
const hx_api_dialect *hx_api_dialect_find(const char *name);  /* NULL when unknown */
/* The route for method and path (the query string already cut off). When
 * path exists for another method, *other_method is set (405) and NULL is
 * returned; NULL with it false: no such route (404). other_method may be NULL. */
const hx_api_route *hx_api_route_find(const char *method, const char *path, bool *other_method);
/* client: the request target of route rt: its path with a '*' inside replaced by model (the Gemini API's
 * /v1beta/models/{model}:verb), and its query. ENG_OK, or ENG_ERR_RANGE when it does not fit cap. */
int hx_api_route_target(const hx_api_route *rt, const char *model, char *out, size_t cap);
/* The route of dialect d for op (the first one), or NULL. */
const hx_api_route *hx_api_route_of(const hx_api_dialect *d, hx_api_op op);

// ----------------------------------------------------------------------------
// What a request body may hold: the fields kvreplay reads, as data
//
// A field kvreplay does not know, at any depth, is accepted and listed, never
// refused (clients add fields with every release): each dialect describes the
// bodies it reads as a tree of hx_api_shape, and hx_api_note_unknown walks a
// body against it. Types are the parsers' business (a wrongly typed known
// field is a 400 there); the walk only lists members the shape does not name.

typedef struct hx_api_member {
    const char                *key;
    const struct hx_api_shape *shape;  /* NULL: a leaf (or a value kvreplay keeps whole, e.g. a JSON schema) */
} hx_api_member;

typedef struct hx_api_variant {
    const char                *tag;    /* the tag member's value ("text", "function_call", ...) */
    const hx_api_member       *members;/* this variant's own members, {0}-terminated */
} hx_api_variant;

typedef struct hx_api_shape {
    const hx_api_member       *members;  /* an object's members (every variant's, when tagged), {0}-terminated */
    const struct hx_api_shape *item;     /* an array's items (a value that is not an array is not walked) */
    const char                *tag;      /* tagged objects: the member naming the variant ("type"); an object
                                            whose tag names no variant is not walked (the parser decides) */
    const char                *untagged; /* tagged objects: the variant of an object without the tag, or NULL */
    const hx_api_variant      *variants; /* {0}-terminated */
    bool                       open;     /* any member is fine (e.g. a function's arguments) */
} hx_api_shape;

/* Shapes written as data: an object of members, an array of items, a tagged object's variant. */
#define HX_API_MEMBERS(...) ((const hx_api_member[]){__VA_ARGS__, {0}})
#define HX_API_OBJ(...)     (&(const hx_api_shape){.members = HX_API_MEMBERS(__VA_ARGS__)})
#define HX_API_ARR(shape)   (&(const hx_api_shape){.item = (shape)})
#define HX_API_VARIANT(tag, ...) {tag, HX_API_MEMBERS(__VA_ARGS__)}

#define HX_API_MAX_IGNORED 32  /* distinct ignored paths kept per request (the rest are counted as "...") */

/* Lists the members of body that shape does not name, at any depth, as
 * normalized paths ("messages[].output_config": array indexes as "[]"), into
 * q->ignored_paths and q->params.ignored (replacing them). The top level also
 * knows the sampling fields hx_api_read_sampling reads. ENG_OK or ENG_ERR_NOMEM. */
int  hx_api_note_unknown(hx_api_req *q, const json_t *body, const hx_api_shape *shape);
/* The same walk for the importers: each unknown path (normalized) is passed to
 * cb once per call; cb may be NULL (then only the count is returned). Returns
 * the number of unknown members found (>= 0). */
int64_t hx_api_walk_unknown(const json_t *v, const hx_api_shape *shape, const char *prefix,
                            void (*cb)(void *ud, const char *path), void *ud);

// ----------------------------------------------------------------------------
// What the dialects share (and their callers)

/* Parses a request body: a JSON object, duplicate keys refused. NULL with e
 * filled (400: "invalid JSON at line L column C: ..." or "the body must be a
 * JSON object"). */
json_t *hx_api_load_body(const char *body, size_t n, hx_api_error *e);
/* How every route's parse begins: *q initialized for rt, then the body
 * loaded as hx_api_load_body loads it (NULL with e filled). */
json_t *hx_api_parse_begin(const hx_api_route *rt, const char *body, size_t n, hx_api_req *q, hx_api_error *e);
/* Whether greedy decoding honours what the body asked: a temperature <= 0 or
 * top_k == 1 (or neither given) with neutral penalties and nothing in
 * `other`. When not, why (e.g. "temperature 0.7") goes into why. */
bool hx_api_sampling_honoured(const hx_api_sampling *s, char *why, size_t cap);
/* Reads the sampling fields of a body (the names every dialect shares) into s.
 * ENG_ERR_FORMAT (e names the field) when one has the wrong type. */
int  hx_api_read_sampling(const json_t *body, hx_api_sampling *s, hx_api_error *e);
/* The JSON of a token's text as llama-server writes it: the longest valid
 * UTF-8 prefix (a string); and its bytes (an array of integers). */
json_t *hx_api_text_json(const char *text, size_t len);
json_t *hx_api_bytes_json(const char *text, size_t len);
/* llama-server's "timings" object (cache_n, prompt_n, prompt_ms, their per-token
 * and per-second figures, the same for predicted), for its native and OpenAI routes. */
json_t *hx_api_timings_json(const hx_api_timings *t);
/* Sanitized UTF-8 copy of n bytes: every byte that is not part of a valid
 * sequence becomes U+FFFD. malloc'd, NUL-terminated; *n_bad counts them. */
char *hx_api_utf8_sanitize(const char *s, size_t n, int64_t *n_bad);
/* The length of the longest prefix of s (n bytes) that ends on a UTF-8
 * character boundary and is valid, leaving an incomplete tail out. */
size_t hx_api_utf8_complete(const char *s, size_t n);
/* The model a response names: the result's, else the request's, else the server's alias, else "kvreplay". */
const char *hx_api_model_of(const hx_api_req *q, const hx_api_result *r);
/* client: a token count body {KEY: N} -> r->n_input_tokens (r initialized here). ENG_OK or ENG_ERR_FORMAT. */
int  hx_api_read_count(const char *body, size_t n, const char *key, hx_api_result *r, hx_api_error *e);
/* A response id: PREFIX followed by 24 characters derived from seq (deterministic). */
void hx_api_make_id(char *buf, size_t cap, const char *prefix, uint64_t seq);
/* Typed fields of a body for the dialect files: an absent or null key leaves
 * *out untouched; a value of another type (or out of [lo, hi]) is
 * ENG_ERR_FORMAT with e naming the key. get_str copies (malloc'd). */
int  hx_api_get_bool(const json_t *o, const char *key, bool *out, hx_api_error *e);
int  hx_api_get_int(const json_t *o, const char *key, int64_t lo, int64_t hi, int32_t *out, hx_api_error *e);
int  hx_api_get_str(const json_t *o, const char *key, char **out, hx_api_error *e);
/* key: a string or an array of strings -> p->stop. */
int  hx_api_get_stop(const json_t *o, const char *key, hx_api_params *p, hx_api_error *e);
/* An error object {"message", "type", ["code"], ["n_prompt_tokens", "n_ctx"]}
 * (llama-server's and OpenAI's "error", Anthropic's inner "error") -> e, its
 * kind from the type, else from status. false when o has no "message". */
bool hx_api_read_error_object(const json_t *o, int status, hx_api_error *e);
/* snprintf of a JSON path for a message (a path too long is cut, never an error). */
void hx_api_pathf(char *out, size_t cap, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* The prompt parsers' small steps: "PATH:LINE: FIELD: what" into err, returning ENG_ERR_FORMAT; b pushed
 * onto m (freed when that fails, ENG_ERR_NOMEM). */
int  hx_api_fail_at(char *err, size_t errlen, const char *path, int64_t line, const char *field, const char *what);
int  hx_api_push_block(hx_message *m, hx_block *b);
/* e from an importer-style message "FIELD: what" (a 400 naming FIELD). */
int  hx_api_err_from_text(hx_api_error *e, int rc, const char *text);

/* Token probabilities as llama-server writes them (completion_probabilities,
 * and OpenAI chat's logprobs.content): one object per token, {"id", "token",
 * "bytes", "logprob", "top_logprobs": [{"id", "token", "bytes", "logprob"}]}. */
json_t *hx_api_probs_json(const hx_api_token *t, int32_t n);
/* The reverse: the list arr (at JSON path field) -> tokens appended to r.
 * "bytes" gives a token's exact bytes when present, else "token"; "id" may be
 * absent (OpenAI: -1). ENG_ERR_FORMAT naming the field. */
int  hx_api_probs_read(const json_t *arr, const char *field, hx_api_result *r, hx_api_error *e);

// ----------------------------------------------------------------------------
// The dialects' prompt parsers, shared with the importers (harness/import/):
// the prompt part of a request body -> hx_request. Errors are the importers'
// "PATH:LINE: FIELD: what" ("FIELD: what" when path is ""); ENG_OK,
// ENG_ERR_FORMAT or ENG_ERR_NOMEM; q is freed and zeroed on failure.

/* anthropic.c: a Messages body's system (string or text blocks), tools and
 * messages (roles user, assistant and system; content a string or blocks).
 * opts NULL: a block of an unknown type is an error; otherwise it is kept as
 * a text block holding its JSON, counted in opts (hx_blocks_from_json_opts). */
int hx_api_anthropic_prompt(const json_t *body, const char *path, int64_t line, hx_block_opts *opts, hx_request *q,
                            char *err, size_t errlen);
/* The body shapes the importers walk too (hx_api_walk_unknown): anthropic.c's Messages body, openai.c's
 * chat body and its tools (both shapes). */
extern const hx_api_shape hx_api_anthropic_body;
extern const hx_api_shape hx_api_openai_chat_body;
extern const hx_api_shape hx_api_openai_tools;
/* responses.c: a Responses body's instructions, input (a string or items) and tools appended to q
 * (opts NULL: an item or part of an unknown type is an error; otherwise kept as its JSON, counted). */
int hx_api_responses_prompt(const json_t *body, const char *path, int64_t line, hx_block_opts *opts, hx_request *q,
                            char *err, size_t errlen);
/* responses.c: one input item (message, function_call, function_call_output, custom_tool_call(_output),
 * reasoning) appended to q: the items of Codex's rollouts too. */
int hx_api_responses_item(const json_t *item, const char *path, int64_t line, const char *field, hx_block_opts *opts,
                          hx_request *q, char *err, size_t errlen);
/* responses.c: q's system blocks, messages and tools as a Responses body's instructions, input and tools. */
int hx_api_responses_prompt_json(const hx_request *q, json_t *body);
extern const hx_api_shape hx_api_responses_body;
/* gemini.c: a generateContent body's systemInstruction, tools and contents appended to q (opts as above). */
int hx_api_gemini_prompt(const json_t *body, const char *path, int64_t line, hx_block_opts *opts, hx_request *q,
                         char *err, size_t errlen);
/* gemini.c: one content {"role", "parts"} appended to q as a message (Gemini CLI's chat logs too). */
int hx_api_gemini_content(const json_t *c, const char *path, int64_t line, const char *field, hx_block_opts *opts,
                          hx_request *q, char *err, size_t errlen);
/* gemini.c: q as a generateContent body's systemInstruction, contents and tools. */
int hx_api_gemini_prompt_json(const hx_request *q, json_t *body);
extern const hx_api_shape hx_api_gemini_body;
extern const hx_api_shape hx_api_responses_item_shape;
/* openai.c: a chat body's messages (system and developer messages before the
 * first other one become system blocks) and tools. */
int hx_api_openai_prompt(const json_t *body, const char *path, int64_t line, hx_request *q, char *err,
                         size_t errlen);
/* openai.c: one chat message -> *m; *is_system for system and developer
 * messages. Also SWE-agent's history entries (tool_call_ids). */
int hx_api_openai_message(const json_t *j, const char *path, int64_t line, const char *field, hx_message *m,
                          bool *is_system, char *err, size_t errlen);
/* openai.c: m's blocks appended to q's system blocks (m is emptied). */
int hx_api_openai_system_to_blocks(hx_request *q, hx_message *m);
/* openai.c: q's system blocks, messages and tools as a chat body's "messages"
 * and "tools" (set into body). ENG_OK or ENG_ERR_NOMEM. */
int hx_api_openai_prompt_json(const hx_request *q, json_t *body);

#endif /* HX_API_H */
