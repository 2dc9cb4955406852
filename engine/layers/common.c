/*
 * engine/layers/common.c: pieces shared by layer kinds: the architecture's
 * norm, the SwiGLU feed-forward half (llama.cpp's build_ffn with SILU and
 * PAR gating), scratch growth and the byte-exact float search of compare.
 *
 * The FFN half is not a kind of its own: attention and Mamba-2 layers carry
 * one when their architecture has it (eng_layer.has_ffn), RWKV-7 layers
 * have their own channel mix.
 */
#include "internal.h"

#include <stdlib.h>
#include <string.h>

#include "status.h"

// ----------------------------------------------------------------------------
// Norms

void eng_norm_rows(const eng_model *m, int32_t T, const float *X, int32_t ldx, const float *w, const float *b,
                   float *Y, int32_t ldy) {
    const int32_t D = m->info.n_embd;
    if (m->norm == ENG_NORM_LAYER) eng_k_layernorm(&m->kctx, T, D, X, ldx, w, b, m->info.norm_eps, Y, ldy);
    else eng_k_rmsnorm(&m->kctx, T, D, X, ldx, w, m->info.rms_eps, Y, ldy);
}

void eng_norm_fuse(const eng_fwd *f, eng_kfuse *fu, const float *w, const float *b) {
    const eng_model *m = f->m;
    const bool layer = m->norm == ENG_NORM_LAYER;
    fu->norm = layer ? ENG_KNORM_LAYER : ENG_KNORM_RMS;
    fu->norm_w = w;
    fu->norm_b = layer ? b : NULL;
    fu->eps = layer ? m->info.norm_eps : m->info.rms_eps;
    fu->ws = f->w->xn_thr;
}

// ----------------------------------------------------------------------------
// The SwiGLU feed-forward half

int eng_ffn_load(eng_loader *ld, const eng_model *m, int32_t il, bool with_norm, eng_ffn_weights *fw) {
    const int64_t D = m->info.n_embd, F = m->info.n_ff;
    char ng[64], nu[64], nd[64], nn[64];
    snprintf(ng, sizeof ng, "blk.%d.ffn_gate.weight", il);
    snprintf(nu, sizeof nu, "blk.%d.ffn_up.weight", il);
    snprintf(nd, sizeof nd, "blk.%d.ffn_down.weight", il);
    snprintf(nn, sizeof nn, "blk.%d.ffn_norm.weight", il);
    int rc;
    if (with_norm && (rc = eng_ld_plain(ld, m, nn, D, 1, &fw->ffn_norm)) != ENG_OK) return rc;
    const char *gu[2] = {ng, nu};
    const int64_t gu_out[2] = {F, F};
    /* ref: the up rows start on a panel, so a thread computes a gate panel and its up panel together */
    const int32_t pad = m->num.kernel == ENG_KERNEL_REF ? ENG_REF_PANEL : 1;
    fw->n_ff = (int32_t)F;
    fw->up_off = (int32_t)((F + pad - 1) / pad * pad);
    if ((rc = eng_ld_fused_pad(ld, m, gu, gu_out, 2, D, pad, &fw->w_gate_up)) != ENG_OK) return rc;
    return eng_ld_matrix(ld, m, nd, D, F, &fw->w_down);
}

void eng_ffn_free(eng_ffn_weights *fw) {
    free(fw->ffn_norm);
    eng_kmat_free(&fw->w_gate_up);
    eng_kmat_free(&fw->w_down);
    memset(fw, 0, sizeof *fw);
}

int64_t eng_ffn_params(const eng_ffn_weights *fw) {
    return (fw->ffn_norm ? fw->w_down.n_out : 0) + 2 * (int64_t)fw->n_ff * fw->w_gate_up.n_in +
           (int64_t)fw->w_down.n_out * fw->w_down.n_in;
}

double eng_ffn_flops(const eng_model *m) {
    const double D = m->info.n_embd, F = m->info.n_ff;
    return 2.0 * 3.0 * D * F;  /* gate, up, down */
}

void eng_ffn_residual_from(eng_fwd *f, const eng_ffn_weights *fw, const float *xin, bool norm, float *out,
                           const float *add2) {
    const int32_t D = f->m->info.n_embd, F = fw->n_ff, T = f->T;
    eng_ws *w = f->w;
    eng_kfuse gu = {.glu_cols = F, .glu_off = fw->up_off, .H = w->hid, .ldh = F};
    if (norm) eng_norm_fuse(f, &gu, fw->ffn_norm, NULL);
    eng_k_matmul_fused(f->k, &fw->w_gate_up, T, xin, D, w->gu, fw->w_gate_up.n_out, &gu);  /* [T, F | F] and H */
    eng_kfuse dn = {.res = w->x, .ldres = D, .add2 = add2, .ld_add2 = D};
    eng_k_matmul_fused(f->k, &fw->w_down, T, w->hid, F, out, D, &dn);
}

void eng_ffn_residual(eng_fwd *f, const eng_ffn_weights *fw) {
    eng_ffn_residual_from(f, fw, f->w->x, true, f->w->proj, NULL);
}

// ----------------------------------------------------------------------------
// The spans of a step

int32_t eng_fwd_max_P(const eng_fwd *f) {
    int32_t P = 0;
    for (int32_t i = 0; i < f->n_span; i++)
        if (f->span[i].pos0 + f->span[i].T > P) P = f->span[i].pos0 + f->span[i].T;
    return P;
}

int32_t eng_fwd_max_T(const eng_fwd *f) {
    int32_t T = 0;
    for (int32_t i = 0; i < f->n_span; i++)
        if (f->span[i].T > T) T = f->span[i].T;
    return T;
}

int32_t eng_fwd_max_ctx(const eng_fwd *f) {
    int32_t n = 0;
    for (int32_t i = 0; i < f->n_span; i++)
        if (f->span[i].s->n_ctx > n) n = f->span[i].s->n_ctx;
    return n;
}

// ----------------------------------------------------------------------------
// Small helpers

int eng_grow(float **buf, int64_t *cap, int64_t n) {
    if (n <= *cap) return ENG_OK;
    float *b = calloc((size_t)n, sizeof(float));
    if (!b) return ENG_ERR_NOMEM;
    free(*buf);
    *buf = b;
    *cap = n;
    return ENG_OK;
}

int64_t eng_first_diff(const float *a, const float *b, int64_t n) {
    if (memcmp(a, b, sizeof(float) * (size_t)n) == 0) return -1;
    for (int64_t i = 0; i < n; i++)
        if (memcmp(a + i, b + i, sizeof(float)) != 0) return i;
    return -1;
}
