/*
 * harness/traces/trace.h: production prefix-cache traces without text,
 * read as a stream (docs/traces.md).
 *
 * Two formats, one JSON object per line, in arrival order:
 *   mooncake  {"timestamp": ms, "input_length": N, "output_length": N,
 *              "hash_ids": [ids]}: the FAST'25 release (kvcache-ai/Mooncake,
 *              FAST25-release/traces). Blocks of 512 tokens; an id is a
 *              remapped prefix hash (equal id: equal prefix to that block's end).
 *   bailian   {"chat_id": N, "parent_chat_id": N|-1, "timestamp": s,
 *              "input_length": N, "output_length": N, "type": S, "turn": N,
 *              "hash_ids": [ids]}: alibaba-edu/qwen-bailian-usagetraces-anon
 *              (ATC'25 "KVCache Cache in the Wild"). Blocks of 16 tokens; an
 *              id is a remapped salted SipHash of that block alone, so a block
 *              counts only while every block before it matched (the caches
 *              chain ids, hx_block_hashes).
 * The format is told by the first record (chat_id present: bailian) unless
 * given. Every record is checked; the first bad one is an error naming
 * FILE:LINE: FIELD (ENG_ERR_FORMAT): a line that is not a JSON object
 * (truncated, empty object), a missing field or one of the wrong type, a
 * negative id or length, an input_length that contradicts the block count
 * ((n - 1) * B < input_length <= n * B must hold), a timestamp before the
 * previous line's (both formats claim arrival order), a bailian
 * parent_chat_id that no earlier line had as its chat_id. Blank lines are
 * skipped.
 *
 * Streaming: one line in memory at a time. The bailian parent check keeps
 * one bit per chat id seen (ids are sequential integers in the release;
 * ids from 2^31 up are refused). With repeat K > 1 the file is read once
 * and its records kept, compactly, for the K - 1 copies that follow: copy
 * c is shifted by c * (T + T / (N - 1)) ms (T the last timestamp, N the
 * records: the copies continue at the trace's mean rate) and its block and
 * chat ids by c * (max id + 1), so copies share nothing. Memory is then one
 * copy of the trace, whatever K.
 *
 * Usage:
 *     hx_trace *t; hx_trace_rec r;
 *     if (hx_trace_open(path, &opts, &t, err, sizeof err)) fail(err);
 *     while ((rc = hx_trace_next(t, &r, err, sizeof err)) == 1) use(&r);
 *     if (rc < 0) fail(err);
 *     hx_trace_close(t);
 */
#ifndef HX_TRACE_H
#define HX_TRACE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

typedef enum hx_trace_format {
    HX_TRACE_AUTO = 0,
    HX_TRACE_MOONCAKE,
    HX_TRACE_BAILIAN,
} hx_trace_format;

/* "mooncake", "bailian", "auto" (static). */
const char *hx_trace_format_name(hx_trace_format f);
int         hx_trace_format_parse(const char *s, hx_trace_format *out);  /* ENG_OK or ENG_ERR_ARG */

typedef struct hx_trace_opts {
    hx_trace_format format;        /* default auto */
    int32_t         block_tokens;  /* tokens per block; 0: the format's (512, 16) */
    int64_t         repeat;        /* copies (>= 1; 0 means 1) */
    int64_t         limit;         /* stop after this many records (0: all) */
} hx_trace_opts;

/* One record. Pointers stay valid until the next hx_trace_next. */
typedef struct hx_trace_rec {
    int64_t        index;          /* 0-based, over every copy */
    int64_t        line;           /* 1-based line in the file */
    int32_t        copy;           /* 0 .. repeat - 1 */
    double         t_ms;           /* arrival, ms from the trace's start */
    int32_t        input_length;
    int32_t        output_length;
    int32_t        n_blocks;
    const int64_t *ids;            /* (n_blocks) */
    const int32_t *words;          /* (2 n_blocks) the ids as (low, high) int32 words: hx_sim_req.words */
    int64_t        chat_id;        /* bailian: its chat, -1 for mooncake */
    int64_t        parent_chat_id; /* bailian: -1 for a root */
    int32_t        turn;           /* bailian, 0 for mooncake */
    const char    *type;           /* bailian: text, search, image, file; "" for mooncake */
} hx_trace_rec;

typedef struct hx_trace hx_trace;

/* Opens path. ENG_ERR_IO (cannot open: "PATH: why"), ENG_ERR_ARG (bad
 * options), ENG_ERR_NOMEM. No record is read yet. */
int  hx_trace_open(const char *path, const hx_trace_opts *o, hx_trace **out, char *err, size_t errlen);
/* The same over an open stream (name for messages; f is not closed). */
int  hx_trace_open_file(FILE *f, const char *name, const hx_trace_opts *o, hx_trace **out, char *err, size_t errlen);
/* The next record: 1 with *r set, 0 at the end, or an error: ENG_ERR_FORMAT
 * ("FILE:LINE: FIELD: what"), ENG_ERR_IO, ENG_ERR_NOMEM. After an error every
 * later call returns it again. */
int  hx_trace_next(hx_trace *t, hx_trace_rec *r, char *err, size_t errlen);
void hx_trace_close(hx_trace *t);  /* accepts NULL */

/* The format (known after the first record) and tokens per block. */
hx_trace_format hx_trace_format_of(const hx_trace *t);
int32_t         hx_trace_block_tokens(const hx_trace *t);

/* What `kvreplay trace info` prints: a whole pass over the trace (every
 * copy), and the ideal hit rate of an unbounded cache: each request counts
 * min(k * B, input_length) tokens, k its leading blocks whose prefix an
 * earlier request had (the chained identity: hx_block_hashes). Memory: one
 * 64-bit hash per distinct prefix and per distinct id (what an unbounded
 * cache would hold). */
typedef struct hx_trace_info {
    hx_trace_format format;
    int32_t  block_tokens;
    int64_t  requests;
    double   span_s;                 /* last arrival - first, s */
    double   mean_input, mean_output;
    int64_t  max_input;
    int64_t  input_tokens, blocks;   /* sums */
    int64_t  unique_ids;             /* distinct block ids */
    int64_t  unique_prefixes;        /* distinct prefixes (chained ids) */
    int64_t  ideal_hit_tokens, ideal_hit_blocks;
    double   ideal_hit_rate_tokens;  /* ideal_hit_tokens / input_tokens */
    double   ideal_hit_rate_blocks;  /* ideal_hit_blocks / blocks */
    int64_t  roots, max_turn;        /* bailian: requests without a parent, the deepest turn */
} hx_trace_info;

/* Reads the whole trace at path into *info. Errors as hx_trace_next. */
int hx_trace_info_read(const char *path, const hx_trace_opts *o, hx_trace_info *info, char *err, size_t errlen);

#endif /* HX_TRACE_H */
