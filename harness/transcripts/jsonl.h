/*
 * harness/transcripts/jsonl.h: the hygiene of JSONL that users bring (logs,
 * transcripts) and of the files kvreplay writes.
 *
 * Input: a UTF-8 byte-order mark is accepted (skipped); a UTF-16/UTF-32 file
 * is refused with a message that says how to convert it; a line that fails
 * to parse gets a message that says when the file is one pretty-printed
 * JSON document rather than JSONL; integers beyond 2^63-1 (which jansson
 * cannot hold) are read as reals and counted, so a line with one in a field
 * nobody reads still loads, and a reader that needs the field can refuse it
 * (hx_json_find_big).
 *
 * Output: hx_output_check refuses an empty path, a path in a directory that
 * does not exist, and any existing path that is not a regular file (a
 * device such as /dev/full, a FIFO, a directory, a socket, or a symbolic
 * link: writing atomically would replace the link or the device by a
 * regular file); hx_write_atomic writes a temporary file
 * beside the target, fsyncs and renames it, and removes the temporary file
 * when SIGINT or SIGTERM arrives while it exists, then dies of the signal.
 *
 * Usage:
 *     int64_t at = hx_jsonl_start(data, n, path, err, sizeof err);  // -1: refused
 *     size_t big = 0;
 *     json_t *j = hx_jsonl_load(line, len, &big, &je);
 *     if (!j) hx_jsonl_explain(data, n, path, lineno, je.column, je.text, err, sizeof err);
 *     if (hx_output_check(out, err, sizeof err) == ENG_OK) hx_write_atomic(out, bytes, nb, err, sizeof err);
 */
#ifndef HX_JSONL_H
#define HX_JSONL_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Where the content of a JSONL buffer starts: 3 after a UTF-8 byte-order
 * mark, 0 otherwise. A UTF-16 or UTF-32 file (by its byte-order mark, or NUL
 * bytes among the first bytes) returns -1 with err "PATH: the file is UTF-16
 * encoded; ..." (a conversion hint included). */
int64_t hx_jsonl_start(const char *data, size_t n, const char *path, char *err, size_t errlen);

/* Parses one line (len bytes) as a JSON value of any type, rejecting
 * duplicate keys. An integer literal outside [-2^63, 2^63-1] is read as a
 * real (its digits followed by ".0") and counted in *n_big (may be NULL).
 * Returns NULL with *je filled on failure. */
json_t *hx_jsonl_load(const char *s, size_t len, size_t *n_big, json_error_t *je);

/* The error for a line of a JSONL buffer that does not parse (column and
 * text from jansson): "PATH:LINE: invalid JSON at column C: TEXT", followed,
 * when the whole buffer is one pretty-printed JSON document, by what it is
 * and how to convert it ("jq -c . PATH" for an object, "jq -c '.[]' PATH"
 * for an array). */
void hx_jsonl_explain(const char *data, size_t n, const char *path, int64_t line, int column, const char *text,
                      char *err, size_t errlen);

/* The first JSON path below j (e.g. "message.content[0].input.n") holding a
 * real whose value is an integer of magnitude >= 2^63, i.e. an integer that
 * hx_jsonl_load could only read as a real; written into buf (n bytes),
 * prefixed with prefix. Returns false when there is none. */
bool hx_json_find_big(const json_t *j, const char *prefix, char *buf, size_t n);

/* ENG_OK when path may be written by hx_write_atomic: not empty, and either
 * absent or a regular file (not a symbolic link). Otherwise ENG_ERR_ARG with
 * "PATH: ..." in err. */
int hx_output_check(const char *path, char *err, size_t errlen);

/* Writes n bytes to path atomically: PATH.tmp.PID, fsync, rename, fsync of
 * the directory. While the temporary file exists, SIGINT and SIGTERM remove
 * it and then terminate the process by the signal (previous handlers are
 * restored afterwards). Checks hx_output_check first. Returns ENG_OK,
 * ENG_ERR_ARG (see hx_output_check) or ENG_ERR_IO, with a message in err. */
int hx_write_atomic(const char *path, const void *data, size_t n, char *err, size_t errlen);

/* Test hook: when set, called by hx_write_atomic after each 1 MiB chunk is
 * written to the temporary file (with the temporary path). NULL by default. */
extern void (*hx_write_atomic_chunk_hook)(const char *tmp_path);

#endif /* HX_JSONL_H */
