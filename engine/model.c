/*
 * engine/model.c: the numerics helpers of model.h (defaults, names, parsing,
 * OpenBLAS's identity, argmax). Loading a model is model_load.c.
 */
#include "model.h"

#include <cblas.h>
#include <string.h>

#include "status.h"

eng_numerics eng_numerics_default(void) {
    eng_numerics n = {.kernel = ENG_KERNEL_BLAS, .precision = ENG_PRECISION_FP32, .n_threads = 1};
    return n;
}

eng_prefill_params eng_prefill_params_default(void) {
    eng_prefill_params p = {
        .chunk = 64, .align = ENG_ALIGN_CHUNK, .ubatch = 512, .all_logits = false, .on_chunk = NULL, .ud = NULL,
    };
    return p;
}

const char *eng_kernel_name(eng_kernel k) { return k == ENG_KERNEL_REF ? "ref" : "blas"; }
const char *eng_precision_name(eng_precision p) { return p == ENG_PRECISION_BF16 ? "bf16" : "fp32"; }
const char *eng_align_name(eng_align a) { return a == ENG_ALIGN_NONE ? "none" : "chunk"; }

int eng_kernel_parse(const char *s, eng_kernel *out) {
    if (!s) return ENG_ERR_ARG;
    if (!strcmp(s, "blas")) { *out = ENG_KERNEL_BLAS; return ENG_OK; }
    if (!strcmp(s, "ref")) { *out = ENG_KERNEL_REF; return ENG_OK; }
    return ENG_ERR_ARG;
}

int eng_precision_parse(const char *s, eng_precision *out) {
    if (!s) return ENG_ERR_ARG;
    if (!strcmp(s, "fp32")) { *out = ENG_PRECISION_FP32; return ENG_OK; }
    if (!strcmp(s, "bf16")) { *out = ENG_PRECISION_BF16; return ENG_OK; }
    return ENG_ERR_ARG;
}

int eng_align_parse(const char *s, eng_align *out) {
    if (!s) return ENG_ERR_ARG;
    if (!strcmp(s, "chunk")) { *out = ENG_ALIGN_CHUNK; return ENG_OK; }
    if (!strcmp(s, "none")) { *out = ENG_ALIGN_NONE; return ENG_OK; }
    return ENG_ERR_ARG;
}

const char *eng_blas_info(void) {
    const char *c = openblas_get_config();
    return c ? c : "OpenBLAS (unknown config)";
}

const char *eng_blas_corename(void) {
    const char *c = openblas_get_corename();
    return c && *c ? c : "unknown";
}

int32_t eng_argmax(const float *logits, int32_t n) {
    int32_t best = 0;
    for (int32_t i = 1; i < n; i++)
        if (logits[i] > logits[best]) best = i;
    return best;
}
