/*
 * harness/cli/cmd_replay.c: `kvreplay replay`: one replay of a transcript, cold
 * against a cache policy, into a SQLite database.
 */
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "replay.h"

static void usage(FILE *f) {
    fprintf(f, "usage: kvreplay replay -m MODEL.gguf -t TRANSCRIPT.jsonl --db OUT.sqlite [OPTIONS]\n\n"
               "Replays every request twice, cold and through the cache policy under test, compares\n"
               "the logits byte for byte and the state left after the prompt by hash, and writes one\n"
               "row per request (and per decode step).\n\n"
               "options:\n");
    hx_replay_opts_help(f);
}

int hx_cmd_replay(int argc, char **argv) {
    if (hx_wants_help(argc, argv)) { usage(stdout); return HX_EXIT_OK; }
    hx_replay_opts o;
    hx_replay_opts_default(&o);
    char err[512];
    for (int i = 1; i < argc; i++)
        if (!hx_took(hx_replay_opts_take(&o, argc, argv, &i, err, sizeof err), err)) hx_bad_arg("replay", argv[i]);
    hx_coldcache *cold = hx_coldcache_new(0);
    hx_replay_summary sum;
    int code = hx_replay_run(&o, cold, &sum);
    hx_coldcache_free(cold);
    return code;
}
