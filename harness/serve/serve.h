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

#include "serve_opts.h"

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
/* `kvreplay bench --serve --clients K` (bench_clients.c): throughput and
 * TTFT under K concurrent clients, of kvreplay serve --parallel N or of a
 * server at --url; as hx_serve_bench. */
int  hx_serve_bench_clients(int argc, char **argv, char *err, size_t errlen);

#endif /* HX_SERVE_H */
