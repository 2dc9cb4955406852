/*
 * harness/cli/cmd_model.c: `kvreplay model synth|info`, dispatching to
 * cmd_model_synth.c and cmd_model_info.c through the table below.
 */
#include "cli.h"

#include <stdio.h>
#include <string.h>

/* One line per `model` subcommand: X(NAME, id, ARGS) dispatches NAME to
 * int hx_cmd_model_<id>(int argc, char **argv) (cli/cmd_model_<id>.c). */
#define HX_MODEL_COMMAND_LIST(X)                  \
    X("synth", synth, "[OPTIONS] -o FILE.gguf")   \
    X("info",  info,  "[--json] FILE.gguf")       \
    /* one line per subcommand, above this one */

#define DECLARE(name, id, args) int hx_cmd_model_##id(int argc, char **argv);
#define ENTRY(name, id, args) {name, hx_cmd_model_##id, args},
HX_MODEL_COMMAND_LIST(DECLARE)

static const struct {
    const char *name;
    int (*fn)(int, char **);
    const char *args;
} cmds[] = {HX_MODEL_COMMAND_LIST(ENTRY)};

int hx_cmd_model(int argc, char **argv) {
    for (size_t i = 0; argc >= 2 && i < sizeof cmds / sizeof cmds[0]; i++)
        if (!strcmp(argv[1], cmds[i].name)) return cmds[i].fn(argc - 1, argv + 1);
    FILE *f = (argc >= 2 && (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h"))) ? stdout : stderr;
    for (size_t i = 0; i < sizeof cmds / sizeof cmds[0]; i++) {
        char line[128];
        snprintf(line, sizeof line, "%s %s", cmds[i].name, cmds[i].args);
        fprintf(f, "%s kvreplay model %-31s(kvreplay model %s --help)\n", i ? "      " : "usage:", line, cmds[i].name);
    }
    return f == stdout ? HX_EXIT_OK : HX_EXIT_USAGE;
}
