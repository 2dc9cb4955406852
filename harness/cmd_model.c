/* harness/cmd_model.c: placeholder until the subcommand lands. */
#include "cli.h"

int hx_cmd_model(int argc, char **argv) {
    (void)argc;
    hx_die(HX_EXIT_INTERNAL, "%s: not built yet", argv[0]);
}
