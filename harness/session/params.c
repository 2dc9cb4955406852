/*
 * harness/session/params.c: hx_session_params: their defaults, their
 * command-line options and --help (see session.h). Replay, check, experiment,
 * serve and probe take these options through hx_session_params_take and add
 * their own.
 */
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "options.h"
#include "params.h"
#include "status.h"

void hx_session_params_default(hx_session_params *p) {
    memset(p, 0, sizeof *p);
    p->policy = "slot-lcp";
    p->quirks = "";
    p->normalize = "";
    p->num = eng_numerics_default();
    p->pp = eng_prefill_params_default();
    p->decode_n = 40;
    p->cap_prompt = true;
    p->repeat = 1;
    p->batch_seed = 1;
    p->batch_check = -1;
    p->verify = true;
    p->fault_request = 1;
}

static char g_quirks[256];

/* --quirk is repeatable: the names accumulate, comma-separated. The first
 * --quirk of an option set (an experiment parses one per run) starts afresh. */
static int parse_quirk(const char *flag, const char *v, void *field, char *err, size_t errlen) {
    if (*(const char **)field != g_quirks) g_quirks[0] = '\0';
    size_t n = strlen(g_quirks);
    if (n + strlen(v) + 2 > sizeof g_quirks) {
        eng_errf(err, errlen, "%s: too many quirks", flag);
        return ENG_ERR_ARG;
    }
    snprintf(g_quirks + n, sizeof g_quirks - n, "%s%s", n ? "," : "", v);
    *(const char **)field = g_quirks;
    return ENG_OK;
}

static int parse_fault(const char *flag, const char *v, void *field, char *err, size_t errlen) {
    if (strcmp(v, "ulp-flip") && strcmp(v, "kv-row") && strcmp(v, "repeat-flip") && strcmp(v, "report-cached") &&
        strcmp(v, "batch-split-k")) {
        eng_errf(err, errlen, "%s: expected ulp-flip, kv-row, repeat-flip, report-cached or batch-split-k, got '%s'",
                 flag, v);
        return ENG_ERR_ARG;
    }
    *(const char **)field = v;
    return ENG_OK;
}

#define OPT(field) offsetof(hx_session_params, field)

static const hx_option k_policy[] = {
    {"--model", "-m", "FILE.gguf", "model (required)", HX_OPT_STRING, OPT(model_path), 0, 0, NULL},
    {"--policy", NULL, "P", NULL, HX_OPT_STRING, OPT(policy), 0, 0, NULL},
    {"--quirk", NULL, "Q", NULL, HX_OPT_CUSTOM, OPT(quirks), 0, 0, parse_quirk},
    {0},
};
static const hx_option k_engine[] = {
    {"--normalize", NULL, "R", "prompt normalization rules, comma-separated: anthropic-cch", HX_OPT_STRING,
     OPT(normalize), 0, 0, NULL},
    {"--template", NULL, "T", "chatml | llama2 | llama3 | raw (default: from the model's metadata)", HX_OPT_STRING,
     OPT(template_name), 0, 0, NULL},
    {"--align", NULL, "chunk|none", "chunk: absolute grid of C (bit-exact); none: ubatch chunks from the\n"
     "reuse point, as llama.cpp (default chunk)", HX_OPT_CUSTOM, OPT(pp.align), 0, 0, hx_parse_align},
    {"--chunk", NULL, "C", "prefill grid (default 64)", HX_OPT_INT, OPT(pp.chunk), 1, 1 << 20, NULL},
    {"--ubatch", NULL, "U", "chunk length under --align none (default 512)", HX_OPT_INT, OPT(pp.ubatch), 1, 1 << 20,
     NULL},
    {"--kernel", NULL, "blas|ref", "OpenBLAS sgemm, or fixed-order batch-invariant kernels (default blas)",
     HX_OPT_CUSTOM, OPT(num.kernel), 0, 0, hx_parse_kernel},
    {"--precision", NULL, "fp32|bf16", "(default fp32)", HX_OPT_CUSTOM, OPT(num.precision), 0, 0, hx_parse_precision},
    {"--threads", NULL, "T", "thread count, recorded in the run (default 1)", HX_OPT_INT, OPT(num.n_threads), 1,
     HX_THREADS_MAX, NULL},
    {"--decode", NULL, "N", "greedy decode steps compared per request (default 40)", HX_OPT_INT, OPT(decode_n), 0,
     1 << 16, NULL},
    {"--cap-prompt", NULL, "on|off", "cap reuse at the cached prompt's length (default on; off reuses\n"
     "decode-written KV)", HX_OPT_CUSTOM, OPT(cap_prompt), 0, 0, hx_parse_on_off},
    {"--repeat", NULL, "N", "time the cold and the reused prefill N times each (the same bits every\n"
     "time, checked); TTFT columns store the median, min and max (default 1)", HX_OPT_INT, OPT(repeat), 1, 64,
     NULL},
    {"--batch-check", NULL, "K", "compute each compared request again inside engine steps shared with K\n"
     "seeded other sequences (off the request's grid) and compare it with its cold run:\n"
     "the requests' batch_* columns (with the steps' time: extra.batch_ms, batch_rows);\n"
     "check fails on a difference (K 0: alone through the same steps; default: off)", HX_OPT_INT,
     OPT(batch_check), 0, 31, NULL},
    {"--batch-seed", NULL, "S", "the seed of --batch-check's other sequences (default 1; recorded)", HX_OPT_INT64,
     OPT(batch_seed), 0, 9.2e18, NULL},
    {"--calibration", NULL, "FILE", "price the modeled TTFT at FILE's reference calibration for this\n"
     "configuration (measured and added when missing); default: this run's own", HX_OPT_STRING, OPT(calibration),
     0, 0, NULL},
    {0},
};
static const hx_option k_faults[] = {
    {"--inject-fault", NULL, "F", "test the checker: ulp-flip (one reused logit moves one ULP), kv-row\n"
     "(the last restored KV row is recomputed from another token) or repeat-flip\n"
     "(with --repeat: the second cold repetition's logit moves one ULP), on\n"
     "request --fault-request K (default 1), logit --fault-index I (default 0);\n"
     "exit 2 when the fault cannot be planted (no such request or logit, no\n"
     "reuse to corrupt, a request already stored by --resume); kvreplay serve also\n"
     "takes report-cached (every answer that reused tokens reports one more: a\n"
     "planted fault for kvreplay probe); batch-split-k: the head of --batch-check's\n"
     "steps (serve: of every step of several spans) reduced in two halves", HX_OPT_CUSTOM, OPT(fault), 0, 0, parse_fault},
    {"--fault-request", NULL, "K", NULL, HX_OPT_INT, OPT(fault_request), 0, 1 << 30, NULL},
    {"--fault-index", NULL, "I", NULL, HX_OPT_INT, OPT(fault_index), 0, 1 << 30, NULL},
    {"--quiet", NULL, NULL, NULL, HX_OPT_FLAG, OPT(quiet), 0, 0, NULL},
    {0},
};

int hx_session_params_take(hx_session_params *p, int argc, char **argv, int *i, char *err, size_t errlen) {
    const hx_option *tables[] = {k_policy, k_engine, k_faults};
    for (size_t k = 0; k < sizeof tables / sizeof tables[0]; k++) {
        int r = hx_options_take(tables[k], p, argc, argv, i, err, errlen);
        if (r) return r;
    }
    return hx_policy_args_take(&p->policy_args, argc, argv, i, err, errlen);
}

void hx_session_params_help_policy(FILE *f) {
    hx_options_help(k_policy, NULL, f);
    fprintf(f, "  %-25s ", "--policy P");
    for (size_t i = 0; hx_policies[i]; i++) fprintf(f, "%s%s", i ? " | " : "", hx_policies[i]->name);
    fprintf(f, " (default slot-lcp)\n");
    hx_policy_quirks_help(f);
}

void hx_session_params_help_engine(FILE *f) {
    hx_options_help(k_engine, NULL, f);
    hx_policy_help(f);
}

void hx_session_params_help_faults(FILE *f) { hx_options_help(k_faults, NULL, f); }

int hx_session_params_check(const hx_session_params *p, char *err, size_t errlen) {
    if (!p->model_path) {
        eng_errf(err, errlen, "-m/--model is required");
        return ENG_ERR_ARG;
    }
    unsigned quirks = 0;
    return hx_quirks_parse(p->policy, p->quirks, &quirks, err, errlen);
}
