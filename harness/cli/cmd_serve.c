/*
 * harness/cli/cmd_serve.c: `kvreplay serve`: the engine and a cache policy
 * behind llama-server's, OpenAI's and Anthropic's HTTP APIs (serve/serve.h),
 * with replay's policy, quirk, normalize, align, kernel and thread options.
 */
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "serve.h"

#define OPT(field) offsetof(hx_serve_opts, field)
static const hx_option k_serve[] = {
    {"--listen", NULL, "HOST:PORT", "where to listen (default 127.0.0.1:8080; port 0: any free port)", HX_OPT_STRING,
     OPT(listen), 0, 0, NULL},
    {"--api-key", NULL, "KEY", "require Authorization: Bearer KEY or x-api-key: KEY (needed to listen\n"
     "beyond the loopback; /health and /v1/models stay open, as llama-server's)", HX_OPT_STRING, OPT(api_key), 0, 0,
     NULL},
    {"--alias", "-a", "NAME", "the model name responses echo when a body names none (default: the model file's name)",
     HX_OPT_STRING, OPT(alias), 0, 0, NULL},
    {"--verify", NULL, NULL, "compute every request cold too and compare (logits, decode steps, state)", HX_OPT_FLAG,
     OPT(sp.verify), 0, 0, NULL},
    {"--db", NULL, "FILE.sqlite", "one row per request, as replay's (default: none)", HX_OPT_STRING, OPT(db_path), 0, 0,
     NULL},
    {"--record", NULL, "FILE", "append every served request to this transcript (v2; replay reads it)",
     HX_OPT_STRING, OPT(record), 0, 0, NULL},
    {"--script", NULL, "FILE", "answer the scripted conversation with this transcript's recorded turns",
     HX_OPT_STRING, OPT(script), 0, 0, NULL},
    {"--ctx-size", "-c", "N", "positions per sequence (default: the model's training context)", HX_OPT_INT, OPT(n_ctx),
     1, 1 << 24, NULL},
    {"--n-ctx", NULL, "N", NULL, HX_OPT_INT, OPT(n_ctx), 1, 1 << 24, NULL},
    {"--n-predict", "-n", "N", "tokens generated per request at most (default 256; a request's own\n"
     "max_tokens below it wins)", HX_OPT_INT, OPT(n_predict), 1, 1 << 24, NULL},
    {"--max-body", NULL, "BYTES", "413 for a body over this (default 33554432)", HX_OPT_INT64, OPT(max_body), 1,
     (double)((int64_t)1 << 40), NULL},
    {"--max-prep-memory", NULL, "BYTES", "memory the requests being received and prepared may hold, server-wide\n"
     "(default 1073741824; 503 beyond; at least 8/7 of what a --max-body body needs)", HX_OPT_INT64, OPT(max_prep),
     1, (double)((int64_t)1 << 50), NULL},
    {"--queue", NULL, "N", "requests that may wait for the engine (default 64; 503 beyond)", HX_OPT_INT, OPT(queue), 1,
     1 << 20, NULL},
    {"--parallel", "-np", "N", "slots: requests computed at once, batched in each engine step (llama-server's\n"
     "-np; default 1); slot-lcp gets N slots unless --slots says more", HX_OPT_INT, OPT(parallel), 1, 64, NULL},
    {"--batch-size", "-b", "N", "rows per engine step at most (default 0: no cap); a prompt's chunk is never\n"
     "cut: one that does not fit waits for a later step", HX_OPT_INT, OPT(batch_size), 0, 1 << 20, NULL},
    {"--max-partial-prefills", NULL, "K", "prompts that advance one grid chunk in the same step, the oldest first\n"
     "(default 1, as vLLM's --max-num-partial-prefills; 0: every prompt being read); decode rows always join",
     HX_OPT_INT, OPT(partial_prefills), 0, 64, NULL},
    {"--timeout", NULL, "S", "close a connection silent for S seconds (default 30)", HX_OPT_INT, OPT(timeout_s), 1,
     86400, NULL},
    {"--max-connections", NULL, "N", "concurrent connections at most (default 256)", HX_OPT_INT, OPT(max_connections), 1,
     1 << 16, NULL},
    {"--port-file", NULL, "FILE", "write the bound port here once listening", HX_OPT_STRING, OPT(port_file), 0, 0,
     NULL},
    {0},
};

static void usage(FILE *f) {
    hx_usage(f, "usage: kvreplay serve -m MODEL.gguf [--listen 127.0.0.1:8080] [--verify] [--record FILE]\n"
                "                      [--script FILE] [--db OUT.sqlite] [replay's policy and engine options]\n\n"
                "Serves llama-server's API (/completion, /tokenize, /detokenize, /apply-template, /health,\n"
                "/props, /slots, /metrics), OpenAI's (/v1/completions, /v1/chat/completions, /v1/responses,\n"
                "/v1/models), Anthropic's (/v1/messages, /v1/messages/count_tokens) and Gemini's\n"
                "(/v1beta/models/M:generateContent, :streamGenerateContent, :countTokens). Every request goes through the\n"
                "cache policy as a replay's does; generation is greedy. SIGINT or SIGTERM finish the\n"
                "request in progress and stop (exit 0). See docs/serve.md.\n\n"
                "options:\n", k_serve);
    fprintf(f, "\nthe session's options, as replay's (--decode N is the decode steps --verify compares):\n");
    hx_session_params_help_policy(f);
    hx_session_params_help_engine(f);
    hx_session_params_help_faults(f);
}

int hx_cmd_serve(int argc, char **argv) {
    if (hx_wants_help(argc, argv)) { usage(stdout); return HX_EXIT_OK; }
    hx_serve_opts o;
    hx_serve_opts_default(&o);
    char err[512];
    for (int i = 1; i < argc; i++) {
        if (hx_options_parse(k_serve, &o, argc, argv, &i)) continue;
        if (!strcmp(argv[i], "-t") || !strcmp(argv[i], "--transcript"))
            hx_die(HX_EXIT_USAGE, "serve: -t/--transcript does not apply (--script plays one)");
        if (!hx_took(hx_session_params_take(&o.sp, argc, argv, &i, err, sizeof err), err)) hx_bad_arg("serve", argv[i]);
    }
    return hx_serve_run(&o);
}
