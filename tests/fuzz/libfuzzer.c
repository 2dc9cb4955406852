/*
 * tests/fuzz/libfuzzer.c: the libFuzzer entry points (`make fuzz`, built with
 * clang -fsanitize=fuzzer,address,undefined). One binary serves every target
 * of targets.h: KVR_FUZZ_TARGET=NAME picks it, KVR_FUZZ_LIST=1 prints the
 * names (the runner, tests/fuzz/run.sh, takes the list from here, so a new
 * importer is fuzzed without a change here).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "targets.h"

static const kvr_fuzz_target *g_target;

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc;
    (void)argv;
    if (getenv("KVR_FUZZ_LIST")) {
        kvr_fuzz_target all[64];
        int n = kvr_fuzz_targets(all, 64);
        for (int i = 0; i < n && i < 64; i++) {
            char why[512];
            printf("%s%s%s\n", all[i].name, kvr_fuzz_available(&all[i], why, sizeof why) ? "\tskip: " : "",
                   kvr_fuzz_available(&all[i], why, sizeof why) ? why : "");
        }
        exit(0);
    }
    const char *name = getenv("KVR_FUZZ_TARGET");
    if (!name || !(g_target = kvr_fuzz_find(name))) {
        fprintf(stderr, "kvr-fuzz: set KVR_FUZZ_TARGET to a target (KVR_FUZZ_LIST=1 lists them)\n");
        exit(2);
    }
    char why[512];
    if (kvr_fuzz_available(g_target, why, sizeof why) != 0) {
        fprintf(stderr, "kvr-fuzz: %s\n", why);
        exit(3);
    }
    kvr_fuzz_init();
    return 0;
}

int LLVMFuzzerTestOneInput(const unsigned char *data, size_t size) {
    g_target->run(data, size, g_target->arg);
    return 0;
}
