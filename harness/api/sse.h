/*
 * harness/api/sse.h: server-sent events (the WHATWG HTML "event stream"
 * format), written and parsed in one place for every dialect.
 *
 * Writing: an event is an optional "event: NAME" line, one "data: ..." line
 * per line of the payload, and a blank line. The dialects' payloads are
 * compact JSON (one line); "data: [DONE]" ends an OpenAI stream.
 *
 * Parsing is incremental: bytes arrive as the network delivers them, cut
 * anywhere (inside a line, inside a CRLF pair, inside a UTF-8 character).
 * Lines end in LF, CRLF or CR; "data:" lines accumulate, joined by LF; a
 * field's value drops one leading space; lines starting with ':' are
 * comments; "id" and "retry" are kept; a blank line dispatches the event
 * (one with no data line is not dispatched, as the standard says). A line
 * longer than max_line (default 64 MiB) is an error, so a peer that never
 * ends a line cannot grow memory without bound.
 */
#ifndef HX_SSE_H
#define HX_SSE_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "util.h"

/* Appends one event to b: "event: NAME\n" when name is not NULL, the data
 * (n bytes; each of its lines as a "data: " line), then "\n". ENG_OK or
 * ENG_ERR_NOMEM. */
int hx_sse_write(eng_buf *b, const char *name, const char *data, size_t n);
/* The same with o written as compact JSON; takes o's reference (NULL: out of
 * memory already, ENG_ERR_NOMEM). */
int hx_sse_write_json(eng_buf *b, const char *name, json_t *o);

typedef struct hx_sse_event {
    const char *name;   /* the "event" field, "" when absent (the default type "message") */
    const char *data;   /* NUL-terminated, n bytes (data lines joined by '\n') */
    size_t      n;
    const char *id;     /* the last "id" field seen, "" when none */
} hx_sse_event;

/* Called for each complete event; a nonzero return stops the parser and is
 * returned by hx_sse_feed. */
typedef int (*hx_sse_fn)(void *ud, const hx_sse_event *ev);

typedef struct hx_sse_parser {
    eng_buf  line;       /* the line being read */
    eng_buf  data;       /* data lines of the event being read */
    char     name[64];
    char     id[128];
    bool     has_data;
    bool     after_cr;   /* the previous byte was CR (a following LF belongs to it) */
    size_t   max_line;
    int64_t  n_events;   /* events dispatched */
    int      err;        /* ENG_ERR_RANGE (a line too long) or ENG_ERR_NOMEM once failed */
} hx_sse_parser;

void hx_sse_parser_init(hx_sse_parser *p);
void hx_sse_parser_free(hx_sse_parser *p);
/* Feeds n bytes; calls fn for each event they complete. Returns 0, fn's
 * nonzero value, or p->err. */
int  hx_sse_feed(hx_sse_parser *p, const char *bytes, size_t n, hx_sse_fn fn, void *ud);
/* At the end of the stream: bytes after the last blank line form no event
 * (the standard drops an unterminated event). True when nothing is pending. */
bool hx_sse_at_boundary(const hx_sse_parser *p);

#endif /* HX_SSE_H */
