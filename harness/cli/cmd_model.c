/*
 * harness/cli/cmd_model.c: `kvreplay model synth|info`, dispatching to
 * cmd_model_synth.c and cmd_model_info.c.
 */
#include "cli.h"

#include <stdio.h>
#include <string.h>

int hx_cmd_model_synth(int argc, char **argv);
int hx_cmd_model_info(int argc, char **argv);

int hx_cmd_model(int argc, char **argv) {
    if (argc >= 2 && !strcmp(argv[1], "synth")) return hx_cmd_model_synth(argc - 1, argv + 1);
    if (argc >= 2 && !strcmp(argv[1], "info")) return hx_cmd_model_info(argc - 1, argv + 1);
    FILE *f = (argc >= 2 && (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h"))) ? stdout : stderr;
    fprintf(f, "usage: kvreplay model synth [OPTIONS] -o FILE.gguf   (kvreplay model synth --help)\n"
               "       kvreplay model info [--json] FILE.gguf        (kvreplay model info --help)\n");
    return f == stdout ? HX_EXIT_OK : HX_EXIT_USAGE;
}
