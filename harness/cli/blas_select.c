/*
 * harness/cli/blas_select.c: OPENBLAS_CORETYPE set and the process
 * re-executed when OpenBLAS picked an older core than the CPU supports
 * (blas_select.h). The environment carries the one bit of state across the
 * exec: KVREPLAY_BLAS_CORE_SELECTED="PICKED>CHOSEN", removed by the new
 * process before anything else reads the environment.
 */
#include "blas_select.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "blas_core.h"
#include "model.h"

#define MARK   "KVREPLAY_BLAS_CORE_SELECTED"
#define WARNED "KVREPLAY_BLAS_CORE_WARNED"
#define PLANT  "KVREPLAY_TEST_BLAS_PICKED"

/* The subcommands that run the engine's kernels. */
static int computes(const char *cmd) {
    static const char *const c[] = {"logits", "generate", "bench", "replay", "check", "experiment", "serve"};
    for (size_t i = 0; cmd && i < sizeof c / sizeof c[0]; i++)
        if (!strcmp(cmd, c[i])) return 1;
    return 0;
}

/* After the exec: say what was done, once, and check that it took. */
static void selected(const char *mark) {
    char picked[64] = "", chosen[64] = "";
    const char *gt = strchr(mark, '>');
    if (gt) {
        snprintf(picked, sizeof picked, "%.*s", (int)(gt - mark), mark);
        snprintf(chosen, sizeof chosen, "%s", gt + 1);
    }
    unsetenv(MARK);
    const char *now = eng_blas_corename();
    if (!*chosen || strcasecmp(now, chosen)) {
        fprintf(stderr, "kvreplay: OPENBLAS_CORETYPE=%s did not take: OpenBLAS runs its %s kernels\n", chosen, now);
        return;
    }
    eng_blas_plan p = eng_blas_core_decide(eng_cpu_isa_detect(), picked, NULL);
    if (p.action == ENG_BLAS_SELECT) fprintf(stderr, "kvreplay: %s\n", p.why);
    else fprintf(stderr, "kvreplay: OpenBLAS picked its %s kernels: running with OPENBLAS_CORETYPE=%s\n", picked, chosen);
}

void hx_blas_core_select(int argc, char **argv) {
    const char *mark = getenv(MARK);
    if (mark) {
        selected(mark);
        return;
    }
    if (argc < 2 || !computes(argv[1])) return;
    const char *user = getenv("OPENBLAS_CORETYPE");
    const char *picked = eng_blas_corename(), *plant = getenv(PLANT);
    if (plant && *plant && !(user && *user)) picked = plant;
    eng_blas_plan p = eng_blas_core_decide(eng_cpu_isa_detect(), picked, user);
    if (p.action == ENG_BLAS_WARN) {
        if (!getenv(WARNED)) fprintf(stderr, "kvreplay: %s\n", p.why);
        setenv(WARNED, "1", 1);  /* the processes this one starts stay quiet */
        return;
    }
    if (p.action != ENG_BLAS_SELECT) return;
    char v[160];
    snprintf(v, sizeof v, "%s>%s", picked, p.core);
    setenv("OPENBLAS_CORETYPE", p.core, 1);
    setenv(MARK, v, 1);
    unsetenv(PLANT);
    fflush(NULL);
    execv("/proc/self/exe", argv);
    const int e = errno;
    unsetenv("OPENBLAS_CORETYPE");
    unsetenv(MARK);
    fprintf(stderr, "kvreplay: %s; but re-executing /proc/self/exe failed (%s): OpenBLAS runs its %s kernels "
            "(set OPENBLAS_CORETYPE=%s yourself)\n", p.why, strerror(e), picked, p.core);
}
