/*
 * harness/traces/timemodel.c: the named profiles and the prices (see
 * timemodel.h). The profiles' figures, and what is assumed rather than
 * published, are in each source string and docs/traces.md.
 */
#include "timemodel.h"

#include <stdio.h>
#include <string.h>

#include "calibrate.h"
#include "status.h"

/* LLaMA3-70B: 80 layers, d_model 8192, 64 query heads and 8 KV heads of
 * 128 (Meta's config.json), 70.6e9 parameters. KV per token: 2 (K, V) x 80
 * x 8 x 128 x 2 bytes (bf16) = 327,680 B = 320 KiB, the Mooncake paper's
 * figure. Attention per (query, key) pair: QK^T and PV, 2 x 2 x 8192 FLOPs
 * per layer. */
#define L70_FLOPS_TOKEN (2.0 * 70.6e9)
#define L70_FLOPS_PAIR  (4.0 * 80 * 8192)
#define L70_KV          327680.0
/* LLaMA3-8B: 32 layers, d_model 4096, 32 heads, 8 KV heads of 128, 8.03e9
 * parameters; KV 2 x 32 x 8 x 128 x 2 = 131,072 B. */
#define L8_FLOPS_TOKEN  (2.0 * 8.03e9)
#define L8_FLOPS_PAIR   (4.0 * 32 * 4096)
#define L8_KV           131072.0

static const hx_time_profile k_profiles[] = {
    {"llama3-70b-a800x8", "LLaMA3-70B on 8 x A800 SXM4 (the Mooncake paper's setting), MFU 0.4",
     {.name = "llama3-70b-a800x8", .gflops = 8 * 312e3 * 0.4, .flops_token = L70_FLOPS_TOKEN,
      .flops_pair = L70_FLOPS_PAIR, .kv_bytes_token = L70_KV, .restore_gbs = 8 * 25.0, .transfer_gbs = 100.0,
      .tpot_ms = 25.0,
      .source = "LLaMA3-70B shape from Meta's config (80 layers, d 8192, 8 KV heads of 128: 320 KiB/token, the "
                "Mooncake paper's figure); 8 x A800 SXM4 at 312 TFLOP/s bf16 dense each (NVIDIA's A800/A100 "
                "datasheet) at an assumed 0.4 model-FLOPs utilisation; local restore over 8 PCIe 4.0 x16 links "
                "at 25 GB/s each; a global pool's transfer at 100 GB/s (assumed: 800 Gbit/s of RDMA per "
                "node); 25 ms per decode step (assumed)"}},
    {"llama3-8b-h100", "LLaMA3-8B on one H100 SXM, MFU 0.4",
     {.name = "llama3-8b-h100", .gflops = 989e3 * 0.4, .flops_token = L8_FLOPS_TOKEN, .flops_pair = L8_FLOPS_PAIR,
      .kv_bytes_token = L8_KV, .restore_gbs = 50.0, .transfer_gbs = 50.0, .tpot_ms = 8.0,
      .source = "LLaMA3-8B shape from Meta's config (32 layers, d 4096, 8 KV heads of 128: 128 KiB/token); one "
                "H100 SXM at 989 TFLOP/s bf16 dense (NVIDIA's datasheet) at an assumed 0.4 utilisation; restore "
                "over PCIe 5.0 x16 (50 GB/s), pool over one 400 Gbit/s NIC (50 GB/s); 8 ms per decode step "
                "(assumed)"}},
    {0},
};

const hx_time_profile *hx_time_profile_list(void) { return k_profiles; }

const char *hx_time_profile_names(void) {
    static char buf[256];
    if (buf[0]) return buf;
    for (size_t i = 0, off = 0; k_profiles[i].name && off < sizeof buf; i++)
        off += (size_t)snprintf(buf + off, sizeof buf - off, "%s%s", i ? ", " : "", k_profiles[i].name);
    return buf;
}

int hx_time_profile_get(const char *name, hx_time_model *out, char *err, size_t errlen) {
    for (size_t i = 0; k_profiles[i].name; i++)
        if (!strcmp(k_profiles[i].name, name)) {
            *out = k_profiles[i].m;
            return ENG_OK;
        }
    eng_errf(err, errlen, "--profile: unknown profile '%s' (known: %s)", name, hx_time_profile_names());
    return ENG_ERR_ARG;
}

int hx_time_from_model(const eng_model *m, const char *model_path, const eng_prefill_params *pp,
                       const char *calibration, hx_time_model *out, char *err, size_t errlen) {
    memset(out, 0, sizeof *out);
    hx_calibration c;
    bool added = false;
    int rc = hx_calibration_reference(calibration, m, pp, NULL, &c, &added, err, errlen);
    if (rc != ENG_OK) return rc;
    const eng_model_info *mi = eng_model_get_info(m);
    snprintf(out->name, sizeof out->name, "model:%.56s", model_path);
    out->model = m;
    out->pp = *pp;
    out->gflops = c.gflops;
    out->kv_bytes_token = (double)mi->kv_bytes_per_token;
    out->restore_gbs = out->transfer_gbs = c.restore_gbs;
    out->tpot_ms = eng_model_prefill_flops_params(m, 0, 1, pp) / (c.gflops * 1e6);
    snprintf(out->source, sizeof out->source, "%s: the engine's cost model priced at %.2f GFLOP/s and %.2f GB/s "
             "restore (%s %s); a decode step priced as a one-token prefill", model_path, c.gflops, c.restore_gbs,
             calibration, added ? "entry measured now" : "reference entry");
    return ENG_OK;
}

double hx_time_prefill_ms(const hx_time_model *t, int64_t n_past, int64_t n) {
    if (n <= 0) return 0.0;
    double f;
    if (t->model) {
        f = eng_model_prefill_flops_params(t->model, (int32_t)n_past, (int32_t)n, &t->pp);
    } else {
        double pairs = (double)n * (double)n_past + (double)n * ((double)n + 1.0) / 2.0;
        f = t->flops_token * (double)n + t->flops_pair * pairs;
    }
    return f / (t->gflops * 1e6);
}

double hx_time_restore_ms(const hx_time_model *t, int64_t tokens, bool remote) {
    double gbs = remote ? t->transfer_gbs : t->restore_gbs;
    return tokens > 0 && gbs > 0 ? (double)tokens * t->kv_bytes_token / (gbs * 1e6) : 0.0;
}
