/*
 * harness/cli/cmd_bench.c: `kvreplay bench`: runs the benchmark its first
 * benchmark flag names (bench/bench.h; --serve is serve/serve.h's), engine
 * prefill when none does, and turns the status it returns into the exit
 * code (hx_check: 2 for usage and a bad input the user named, 3 when the
 * work failed).
 */
#include "cli.h"

#include <string.h>

#include "bench.h"
#include "serve.h"

static const struct {
    const char *flag;
    hx_bench_fn fn;
} k_benches[] = {
    {"--tokenizer", hx_bench_tokenizer},
    {"--disk-cache", hx_bench_disk_cache},
    {"--checkpoints", hx_bench_checkpoints},
    {"--serve", hx_serve_bench},
    {"--contention", hx_bench_contention},
    {"--depth", hx_bench_depth},
    {"--memory", hx_bench_memory},
    {"--memory-child", hx_bench_memory_child},
    {"--table", hx_bench_table},
    {"--batch", hx_bench_batch},
};

int hx_cmd_bench(int argc, char **argv) {
    hx_bench_fn fn = NULL;
    for (int i = 1; i < argc && !fn; i++)
        for (size_t k = 0; k < sizeof k_benches / sizeof *k_benches && !fn; k++)
            if (!strcmp(argv[i], k_benches[k].flag)) fn = k_benches[k].fn;
    char err[1200] = "";
    hx_check((fn ? fn : hx_bench_prefill)(argc, argv, err, sizeof err), err);
    return HX_EXIT_OK;
}
