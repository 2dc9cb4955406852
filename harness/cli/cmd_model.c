/*
 * harness/cli/cmd_model.c: `kvreplay model synth|info|convert`, dispatching
 * to cmd_model_synth.c, cmd_model_info.c and cmd_model_convert.c through the
 * table below.
 */
#include "cli.h"

#include <stdio.h>
#include <string.h>

/* One line per `model` subcommand: X(NAME, hx_cmd_model_<id>, ARGS) dispatches
 * NAME to int hx_cmd_model_<id>(int argc, char **argv) (cli/cmd_model_<id>.c). */
#define HX_MODEL_COMMAND_LIST(X)                                \
    X("synth", hx_cmd_model_synth, "[OPTIONS] -o FILE.gguf")    \
    X("info",  hx_cmd_model_info,  "[--json] FILE.gguf")        \
    X("convert", hx_cmd_model_convert, "--from rwkv.cpp FILE -o FILE.gguf") \
    /* one line per subcommand, above this one */

HX_MODEL_COMMAND_LIST(HX_COMMAND_DECLARE)
static const hx_command cmds[] = {HX_MODEL_COMMAND_LIST(HX_COMMAND_ENTRY)};

int hx_cmd_model(int argc, char **argv) {
    const hx_command *c = argc >= 2 ? hx_command_find(cmds, sizeof cmds / sizeof cmds[0], argv[1]) : NULL;
    if (c) return c->fn(argc - 1, argv + 1);
    FILE *f = (argc >= 2 && (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h"))) ? stdout : stderr;
    int width = 0;  /* the longest "NAME ARGS", so the help hints line up */
    for (size_t i = 0; i < sizeof cmds / sizeof cmds[0]; i++) {
        const int w = (int)(strlen(cmds[i].name) + 1 + strlen(cmds[i].help));
        width = w > width ? w : width;
    }
    for (size_t i = 0; i < sizeof cmds / sizeof cmds[0]; i++) {
        char line[128];
        snprintf(line, sizeof line, "%s %s", cmds[i].name, cmds[i].help);
        fprintf(f, "%s kvreplay model %-*s   (kvreplay model %s --help)\n", i ? "      " : "usage:", width, line,
                cmds[i].name);
    }
    return f == stdout ? HX_EXIT_OK : HX_EXIT_USAGE;
}
