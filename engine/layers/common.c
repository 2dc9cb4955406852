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
    if ((rc = eng_ld_fused(ld, m, gu, gu_out, 2, D, &fw->w_gate_up)) != ENG_OK) return rc;
    return eng_ld_matrix(ld, m, nd, D, F, &fw->w_down);
}

void eng_ffn_free(eng_ffn_weights *fw) {
    free(fw->ffn_norm);
    eng_kmat_free(&fw->w_gate_up);
    eng_kmat_free(&fw->w_down);
    memset(fw, 0, sizeof *fw);
}

int64_t eng_ffn_params(const eng_ffn_weights *fw) {
    return (fw->ffn_norm ? fw->w_down.n_out : 0) + (int64_t)fw->w_gate_up.n_out * fw->w_gate_up.n_in +
           (int64_t)fw->w_down.n_out * fw->w_down.n_in;
}

double eng_ffn_flops(const eng_model *m) {
    const double D = m->info.n_embd, F = m->info.n_ff;
    return 2.0 * 3.0 * D * F;  /* gate, up, down */
}

void eng_ffn_apply(eng_fwd *f, const eng_ffn_weights *fw, const float *xn, float *out) {
    const int32_t D = f->m->info.n_embd, F = f->m->info.n_ff, T = f->T;
    eng_ws *w = f->w;
    eng_k_matmul(f->k, &fw->w_gate_up, T, xn, D, w->gu, 2 * F);  /* [T, F | F] */
    eng_k_swiglu(f->k, T, F, w->gu, 2 * F, w->hid, F);
    eng_k_matmul(f->k, &fw->w_down, T, w->hid, F, out, D);
}

void eng_ffn_residual(eng_fwd *f, const eng_ffn_weights *fw) {
    const int32_t D = f->m->info.n_embd;
    eng_ws *w = f->w;
    eng_norm_rows(f->m, f->T, w->x, D, fw->ffn_norm, NULL, w->xn, D);
    eng_ffn_apply(f, fw, w->xn, w->proj);
    eng_k_add(f->k, f->T, D, w->x, D, w->proj, D);
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
