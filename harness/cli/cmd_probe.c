/*
 * harness/cli/cmd_probe.c: `kvreplay probe --server URL --api A -t TRANSCRIPT [-o OUT.sqlite]`:
 * black-box cache correctness of a live server (probe/probe.h, docs/probe.md).
 * Like `check`, the exit code is the verdict: 0 when every warm run is
 * bit-identical to its cold run and reused what was expected, 1 when one is
 * not (or the server failed a request), 2 bad input, 3 internal error.
 */
#include <stdio.h>

#include "cli.h"
#include "probe.h"

static void usage(FILE *f) {
    fprintf(f, "usage: kvreplay probe --server URL --api llama|openai|vllm|sglang|anthropic -t TRANSCRIPT.jsonl\n"
               "                      [-o OUT.sqlite] [-m MODEL.gguf] [OPTIONS]\n\n"
               "Replays a transcript against a live server: every request warm (through its prefix cache)\n"
               "and cold (forced), their top-K log-probabilities compared bit for bit, the reuse the server\n"
               "reports against the reuse it should give, TTFT cold and warm; one row per request in a\n"
               "`probe` run. Exit 1 when a warm run differs from its cold run, reuses less or more than\n"
               "expected, or the server fails a request; 0 when all hold (docs/probe.md).\n\n"
               "options:\n");
    hx_probe_opts_help(f);
}

int hx_cmd_probe(int argc, char **argv) {
    if (hx_wants_help(argc, argv)) { usage(stdout); return HX_EXIT_OK; }
    hx_probe_opts o;
    hx_probe_opts_default(&o);
    char err[512];
    for (int i = 1; i < argc; i++)
        if (!hx_took(hx_probe_opts_take(&o, argc, argv, &i, err, sizeof err), err)) hx_bad_arg("probe", argv[i]);
    hx_check(hx_probe_opts_check(&o, err, sizeof err), err);
    hx_probe_summary sum;
    return hx_probe_run(&o, &sum);
}
