/*
 * harness/serve/serve.h: `kvreplay serve`: the engine and a cache policy
 * behind the HTTP APIs real agents and clients speak (harness/api/: llama-
 * server's native API, OpenAI's, Anthropic's), every request through the
 * same session turn as a replay (session/session.h), so a request served and
 * the same request replayed are the same tokens and the same rows.
 *
 * Files: serve.c is the HTTP front (libmicrohttpd, one thread per
 * connection: a slow client holds only its own thread), routing by the API
 * layer's endpoint registry, authentication, body limits, the answers that
 * need no engine (tokenize, count_tokens, props, slots, metrics); worker.c
 * is the bounded queue and the one engine worker that runs every request's
 * turn, generating greedily or playing a script, streaming as it goes;
 * record.c appends every served request to a transcript v2 file; script.c
 * matches requests to a scripted session; metrics.c counts and writes
 * Prometheus text.
 *
 * Life: hx_serve_run binds (127.0.0.1 unless --api-key), serves until
 * SIGINT or SIGTERM, then stops accepting, answers queued requests 503,
 * finishes the request in progress, closes the run in SQLite and returns 0.
 */
#ifndef HX_SERVE_H
#define HX_SERVE_H

#include <stdbool.h>
#include <stdint.h>

#include "session.h"

typedef struct hx_serve_opts {
    hx_session_params sp;      /* model, policy and its options, quirks, normalize, template, align, chunk,
                                  kernel, precision, threads, decode (compared steps), verify, faults */
    const char *db_path;       /* one row per request (NULL: none) */
    const char *listen;        /* "HOST:PORT" (default 127.0.0.1:8080; port 0: any free port) */
    const char *api_key;       /* Bearer or x-api-key; required to listen beyond the loopback */
    const char *alias;         /* the model name responses echo when a body names none */
    const char *record;        /* append every served request to this transcript (v2) */
    const char *script;        /* answer with this transcript's recorded assistant turns */
    const char *port_file;     /* write the bound port here once listening */
    int32_t     n_ctx;         /* -c: positions per sequence (0: the model's training context) */
    int32_t     n_predict;     /* -n: generated tokens at most per request (llama-server's -n cap) */
    int64_t     max_body;      /* bytes (413 beyond) */
    int32_t     queue;         /* requests waiting for the engine at most (503 beyond) */
    int32_t     timeout_s;     /* an idle connection (a stalled body) is closed after this */
    int32_t     max_connections;
} hx_serve_opts;

void hx_serve_opts_default(hx_serve_opts *o);
/* Runs the server until SIGINT/SIGTERM; returns an exit code (0 after a
 * clean stop; 2 bad options or inputs; 3 the machine failed), the message
 * on stderr. */
int  hx_serve_run(const hx_serve_opts *o);

/* `kvreplay bench --serve` (bench_serve.c): serve's time to first token over
 * the in-process one for the same request; argv as `bench` gives it. ENG_OK
 * (the figures printed, or --help), ENG_ERR_ARG for bad options, or what
 * failed, with err. */
int  hx_serve_bench(int argc, char **argv, char *err, size_t errlen);

#endif /* HX_SERVE_H */
