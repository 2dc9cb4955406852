/*
 * harness/cli/cmd_bench.c: `kvreplay bench`: runs the benchmark its first
 * benchmark flag names (bench/bench.h; --serve is serve/serve.h's), engine
 * prefill when none does.
 */
#include "cli.h"

#include <string.h>

#include "bench.h"
#include "serve.h"

int hx_cmd_bench(int argc, char **argv) {
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--tokenizer")) return hx_bench_tokenizer(argc, argv);
        if (!strcmp(argv[i], "--disk-cache")) return hx_bench_disk_cache(argc, argv);
        if (!strcmp(argv[i], "--checkpoints")) return hx_bench_checkpoints(argc, argv);
        if (!strcmp(argv[i], "--serve")) {
            char err[1200] = "";
            hx_check(hx_serve_bench(argc, argv, err, sizeof err), err);
            return HX_EXIT_OK;
        }
        if (!strcmp(argv[i], "--contention")) return hx_bench_contention(argc, argv);
        if (!strcmp(argv[i], "--depth")) return hx_bench_depth(argc, argv);
        if (!strcmp(argv[i], "--memory")) return hx_bench_memory(argc, argv);
        if (!strcmp(argv[i], "--memory-child")) return hx_bench_memory_child(argc, argv);
        if (!strcmp(argv[i], "--table")) return hx_bench_table(argc, argv);
    }
    return hx_bench_prefill(argc, argv);
}
