/*
 * harness/main.c: `kvreplay`, the command-line entry point. Dispatches to
 * the subcommands of DESIGN.md's CLI contract (harness/cmd_*.c).
 */
#include "cli.h"

#include <stdio.h>
#include <string.h>

static const struct {
    const char *name;
    int (*fn)(int, char **);
    const char *help;
} cmds[] = {
    {"model",            hx_cmd_model,            "model synth | model info: write or describe a GGUF model"},
    {"tokenize",         hx_cmd_tokenize,         "tokenize text with a model's vocabulary"},
    {"generate",         hx_cmd_generate,         "greedy generation from a prompt"},
    {"bench",            hx_cmd_bench,            "prefill tok/s and GFLOP/s against the sgemm peak"},
    {"synth-transcript", hx_cmd_synth_transcript, "write a seeded synthetic agent transcript"},
    {"import",           hx_cmd_import,           "convert anthropic/openai/claude-code/swe-agent logs to transcript v1"},
    {"replay",           hx_cmd_replay,           "replay a transcript cold and through a cache policy, log to SQLite"},
    {"check",            hx_cmd_check,            "like replay; exit 1 on any divergence from cold"},
    {"experiment",       hx_cmd_experiment,       "run an experiment spec into a SQLite database"},
    {"report",           hx_cmd_report,           "markdown summary of a results database"},
};

static void usage(FILE *f) {
    fprintf(f, "kvreplay %s (%s): bit-exact prompt-prefix KV reuse harness\n\n", KVR_VERSION, KVR_GIT_REV);
    fprintf(f, "usage: kvreplay COMMAND [OPTIONS]   (kvreplay COMMAND --help for each)\n\n");
    for (size_t i = 0; i < sizeof cmds / sizeof cmds[0]; i++)
        fprintf(f, "  %-17s %s\n", cmds[i].name, cmds[i].help);
    fprintf(f, "\nexit codes: 0 ok, 1 divergence (check), 2 bad input or usage, 3 internal or I/O error\n");
}

int main(int argc, char **argv) {
    hx_set_argv(argc, argv);
    if (argc < 2) { usage(stderr); return HX_EXIT_USAGE; }
    if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") || !strcmp(argv[1], "help")) {
        usage(stdout);
        return HX_EXIT_OK;
    }
    if (!strcmp(argv[1], "--version")) { printf("kvreplay %s %s\n", KVR_VERSION, KVR_GIT_REV); return 0; }
    for (size_t i = 0; i < sizeof cmds / sizeof cmds[0]; i++)
        if (!strcmp(argv[1], cmds[i].name)) return cmds[i].fn(argc - 1, argv + 1);
    fprintf(stderr, "kvreplay: unknown command '%s'\n\n", argv[1]);
    usage(stderr);
    return HX_EXIT_USAGE;
}
