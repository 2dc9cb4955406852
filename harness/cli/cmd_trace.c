/*
 * harness/cli/cmd_trace.c: `kvreplay trace info TRACE [--json]`: a
 * production trace's summary (requests, span, mean lengths, unique blocks)
 * and the ideal hit rate of an unbounded cache (traces/trace.h), the figure
 * `simulate` reaches with block-hash or radix and no --capacity.
 */
#include "cli.h"

#include <jansson.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "status.h"
#include "trace.h"

static const char k_usage[] =
    "usage: kvreplay trace info TRACE [--format F] [--block-tokens B] [--repeat K] [--json]\n\n"
    "Reads a Mooncake or Bailian trace (every record checked: exit 2 naming the line\n"
    "and field of the first bad one) and prints its requests, span, mean input and\n"
    "output lengths, unique blocks, and the ideal hit rate of an unbounded cache: each\n"
    "request counts min(k x block, input_length) tokens, k its leading blocks whose\n"
    "prefix an earlier request had (docs/traces.md).\n\n"
    "options:\n";

typedef struct trace_args {
    const char *format;
    int32_t     block_tokens;
    int64_t     repeat;
    bool        json;
} trace_args;

#define OPT(field) offsetof(trace_args, field)
static const hx_option k_options[] = {
    {"--format", NULL, "F", "mooncake, bailian or auto (default)", HX_OPT_STRING, OPT(format), 0, 0, NULL},
    {"--block-tokens", NULL, "B", "tokens per block (default: the format's, 512 or 16)", HX_OPT_INT,
     OPT(block_tokens), 1, 1 << 20, NULL},
    {"--repeat", NULL, "K", "K time-shifted copies with remapped ids (as simulate --repeat)", HX_OPT_INT64,
     OPT(repeat), 1, 1 << 20, NULL},
    {"--json", NULL, NULL, "one JSON object on stdout", HX_OPT_FLAG, OPT(json), 0, 0, NULL},
    {0},
};

int hx_cmd_trace(int argc, char **argv) {
    if (argc < 2 || strcmp(argv[1], "info")) {
        if (hx_wants_help(argc, argv)) { hx_usage(stdout, k_usage, k_options); return HX_EXIT_OK; }
        hx_die(HX_EXIT_USAGE, "trace: expected `trace info TRACE` (see trace info --help)");
    }
    argc--;
    argv++;
    if (hx_wants_help(argc, argv)) { hx_usage(stdout, k_usage, k_options); return HX_EXIT_OK; }
    trace_args a = {0};
    const char *path = NULL;
    for (int i = 1; i < argc; i++) {
        if (hx_options_parse(k_options, &a, argc, argv, &i)) continue;
        if (argv[i][0] != '-' && !path) path = argv[i];
        else hx_bad_arg("trace info", argv[i]);
    }
    if (!path) hx_die(HX_EXIT_USAGE, "trace info: the trace file is required");
    hx_trace_opts o = {.block_tokens = a.block_tokens, .repeat = a.repeat};
    if (a.format && hx_trace_format_parse(a.format, &o.format))
        hx_die(HX_EXIT_USAGE, "--format: expected mooncake, bailian or auto, got '%s'", a.format);
    hx_trace_info in;
    char err[1024] = "";
    int rc = hx_trace_info_read(path, &o, &in, err, sizeof err);
    if (rc != ENG_OK) hx_die(hx_exit_for_input(rc), "%s", err);
    if (a.json) {
        json_t *j = json_pack("{s:s, s:s, s:i, s:I, s:f, s:f, s:f, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:f, s:f}",
                              "trace", path, "format", hx_trace_format_name(in.format), "block_tokens", in.block_tokens,
                              "requests", (json_int_t)in.requests, "span_s", in.span_s, "mean_input", in.mean_input,
                              "mean_output", in.mean_output, "max_input", (json_int_t)in.max_input, "input_tokens",
                              (json_int_t)in.input_tokens, "blocks", (json_int_t)in.blocks, "unique_ids",
                              (json_int_t)in.unique_ids, "unique_prefixes", (json_int_t)in.unique_prefixes,
                              "ideal_hit_tokens", (json_int_t)in.ideal_hit_tokens, "ideal_hit_blocks",
                              (json_int_t)in.ideal_hit_blocks, "ideal_hit_rate_tokens", in.ideal_hit_rate_tokens,
                              "ideal_hit_rate_blocks", in.ideal_hit_rate_blocks);
        if (in.format == HX_TRACE_BAILIAN) {
            json_object_set_new(j, "roots", json_integer(in.roots));
            json_object_set_new(j, "max_turn", json_integer(in.max_turn));
        }
        char *s = json_dumps(j, JSON_COMPACT | JSON_REAL_PRECISION(10));
        printf("%s\n", s ? s : "{}");
        free(s);
        json_decref(j);
        return HX_EXIT_OK;
    }
    printf("trace          %s (%s, %d-token blocks)\n", path, hx_trace_format_name(in.format), in.block_tokens);
    printf("requests       %lld over %.1f s\n", (long long)in.requests, in.span_s);
    printf("input          mean %.1f tokens, max %lld, %lld in all; output mean %.1f tokens\n", in.mean_input,
           (long long)in.max_input, (long long)in.input_tokens, in.mean_output);
    printf("blocks         %lld in all, %lld unique ids, %lld unique prefixes\n", (long long)in.blocks,
           (long long)in.unique_ids, (long long)in.unique_prefixes);
    if (in.format == HX_TRACE_BAILIAN)
        printf("sessions       %lld roots, turns up to %lld\n", (long long)in.roots, (long long)in.max_turn);
    printf("ideal hit rate %.4f of tokens (%lld), %.4f of blocks (%lld): an unbounded cache\n",
           in.ideal_hit_rate_tokens, (long long)in.ideal_hit_tokens, in.ideal_hit_rate_blocks,
           (long long)in.ideal_hit_blocks);
    return HX_EXIT_OK;
}
