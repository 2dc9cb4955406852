/*
 * harness/cli/main.c: `kvreplay`, the command-line entry point. Dispatches to
 * the subcommands of the CLI contract (docs/design.md) (cli/cmd_*.c) through the
 * table below.
 */
#include "blas_select.h"
#include "cli.h"

#include <stdio.h>
#include <string.h>

// ----------------------------------------------------------------------------
// The subcommands: one line each. X(NAME, hx_cmd_<id>, HELP) dispatches NAME
// to int hx_cmd_<id>(int argc, char **argv), defined in cli/cmd_<id>.c; the
// order is --help's.

#define HX_COMMAND_LIST(X) \
    X("model",            hx_cmd_model,             "model synth | info | convert: write, describe or convert a GGUF model") \
    X("tokenize",         hx_cmd_tokenize,          "tokenize text with a model's vocabulary") \
    X("logits",           hx_cmd_logits,            "the logits of a prompt's last (or every) position, exact") \
    X("generate",         hx_cmd_generate,          "greedy generation from a prompt") \
    X("bench",            hx_cmd_bench,             "prefill tok/s and GFLOP/s against the sgemm peak") \
    X("synth-transcript", hx_cmd_synth_transcript,  "write a seeded synthetic agent transcript") \
    X("import",           hx_cmd_import,            "convert agent logs (anthropic, openai, claude-code, codex, gemini-cli, swe-agent) to a transcript") \
    X("render",           hx_cmd_render,            "print the exact prompt text (or tokens) replay feeds for one request") \
    X("replay",           hx_cmd_replay,            "replay a transcript cold and through a cache policy, log to SQLite") \
    X("check",            hx_cmd_check,             "like replay; exit 1 on any divergence from cold") \
    X("probe",            hx_cmd_probe,             "replay a transcript against a live server: warm vs cold bits, reuse, TTFT") \
    X("experiment",       hx_cmd_experiment,        "run an experiment spec into a SQLite database") \
    X("merge",            hx_cmd_merge,             "join the databases of an experiment's shards into one") \
    X("report",           hx_cmd_report,            "markdown summary of a results database") \
    X("serve",            hx_cmd_serve,             "serve the engine and a cache policy over llama-server, OpenAI, Anthropic and Gemini APIs") \
    X("simulate",         hx_cmd_simulate,          "a production trace (Mooncake, Bailian) through a cache policy, token-only") \
    X("trace",            hx_cmd_trace,             "trace info: a production trace's summary and ideal hit rate") \
    /* one line per subcommand, above this one */

HX_COMMAND_LIST(HX_COMMAND_DECLARE)
static const hx_command cmds[] = {HX_COMMAND_LIST(HX_COMMAND_ENTRY)};
#define N_CMDS (sizeof cmds / sizeof cmds[0])

static void usage(FILE *f) {
    fprintf(f, "kvreplay %s (%s): bit-exact prompt-prefix KV reuse harness\n\n", KVR_VERSION, hx_git_rev());
    fprintf(f, "usage: kvreplay COMMAND [OPTIONS]   (kvreplay COMMAND --help for each)\n\n");
    for (size_t i = 0; i < N_CMDS; i++)
        fprintf(f, "  %-17s %s\n", cmds[i].name, cmds[i].help);
    fprintf(f, "\nexit codes: 0 ok, 1 divergence (check), 2 bad input or usage, 3 internal or I/O error\n");
}

int main(int argc, char **argv) {
    hx_blas_core_select(argc, argv);  /* may re-execute: before anything else */
    hx_set_argv(argc, argv);
    if (argc < 2) { usage(stderr); return HX_EXIT_USAGE; }
    if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") || !strcmp(argv[1], "help")) {
        usage(stdout);
        return HX_EXIT_OK;
    }
    if (!strcmp(argv[1], "--version")) { printf("kvreplay %s %s\n", KVR_VERSION, hx_git_rev()); return 0; }
    const hx_command *c = hx_command_find(cmds, N_CMDS, argv[1]);
    if (c) return c->fn(argc - 1, argv + 1);
    fprintf(stderr, "kvreplay: unknown command '%s'\n\n", argv[1]);
    usage(stderr);
    return HX_EXIT_USAGE;
}
