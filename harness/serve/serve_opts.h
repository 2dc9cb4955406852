/*
 * harness/serve/serve_opts.h: the options of `kvreplay serve` (cli/cmd_serve.c
 * fills them; serve.c, worker.c and record.c read them).
 */
#ifndef HX_SERVE_OPTS_H
#define HX_SERVE_OPTS_H

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
    int64_t     max_prep;      /* bytes requests in preparation may hold, server-wide (503 beyond) */
    int32_t     queue;         /* requests waiting for the engine at most (503 beyond) */
    int32_t     parallel;      /* slots: requests in flight at once, batched (llama-server's -np; default 1) */
    int32_t     batch_size;    /* rows per engine step at most (0: no cap); prefill chunks stay whole */
    int32_t     partial_prefills;  /* prompts that advance a chunk in one step, oldest first (0: every one;
                                      default 1, vLLM's --max-num-partial-prefills) */
    int32_t     timeout_s;     /* an idle connection (a stalled body) is closed after this */
    int32_t     max_connections;
} hx_serve_opts;

#endif /* HX_SERVE_OPTS_H */
