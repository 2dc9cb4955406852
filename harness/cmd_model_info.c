/* harness/cmd_model_info.c: placeholder until the subcommand lands. */
#include "cli.h"

int hx_cmd_model_info(int argc, char **argv) {
    (void)argc;
    hx_die(HX_EXIT_INTERNAL, "%s: not built yet", argv[0]);
}
