/*
 * engine/layers/attn.c: the full-attention layer kind (ENG_LAYER_ATTN), the
 * attention layer it shares with the sliding-window kind, and the `llama`
 * architecture (llama.cpp's LLM_ARCH_LLAMA: every layer full attention and
 * a SwiGLU FFN) with its synthetic writer.
 *
 * Memory: K and V rows [n_ctx, G*E], row p = position p (K after RoPE).
 * Truncation to any n moves n_tokens only; rows beyond it are stale and
 * never read, serialised or compared. A checkpoint holds nothing (0 bytes):
 * truncation alone restores full attention. Serialised: K rows [0, n), then
 * V rows [0, n).
 *
 * Attention (eng_k_attention): one chunk attends the keys [0, pos0 + T)
 * with the causal mask; the chunk's own K/V rows are written before it
 * reads them; nothing reads a row at or beyond pos0 + T. In a step of
 * several sequences each span is one such chunk over its own sequence's
 * rows (the projections before and after run over the stacked rows).
 */
#include "attn.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "status.h"
#include "synth_int.h"

// ----------------------------------------------------------------------------
// Hyperparameters and weights

int eng_attn_hparams(eng_loader *ld, eng_model *m, bool *is_rec) {
    eng_model_info *in = &m->info;
    int rc;
    if ((rc = eng_ld_int(ld, "feed_forward_length", -1, 1, 1 << 22, &in->n_ff)) != ENG_OK) return rc;
    if ((rc = eng_ld_int(ld, "attention.head_count", -1, 1, 4096, &in->n_head)) != ENG_OK) return rc;
    if (is_rec) {
        int32_t *hkv = malloc(sizeof(int32_t) * (size_t)in->n_layer);
        if (!hkv) return ENG_ERR_NOMEM;
        rc = eng_ld_int_or_arr(ld, "attention.head_count_kv", in->n_layer, 0, in->n_head, hkv);
        if (rc == ENG_ERR_NOT_FOUND) {
            eng_errf(ld->err, ld->errlen, "%s: metadata: %s.attention.head_count_kv: missing", ld->path, ld->arch);
            rc = ENG_ERR_FORMAT;
        }
        in->n_head_kv = 0;
        for (int32_t il = 0; rc == ENG_OK && il < in->n_layer; il++) {
            is_rec[il] = hkv[il] == 0;
            if (hkv[il] == 0) continue;
            if (in->n_head_kv != 0 && hkv[il] != in->n_head_kv) {
                eng_errf(ld->err, ld->errlen, "%s: metadata: %s.attention.head_count_kv[%d]: %d, other layers %d: "
                         "per-layer KV head counts are not supported", ld->path, ld->arch, il, hkv[il], in->n_head_kv);
                rc = ENG_ERR_UNSUPPORTED;
            }
            in->n_head_kv = hkv[il];
        }
        free(hkv);
        if (rc != ENG_OK) return rc;
        if (in->n_head_kv == 0) in->n_head_kv = in->n_head;  /* no attention layer: unused */
    } else if ((rc = eng_ld_int(ld, "attention.head_count_kv", in->n_head, 1, in->n_head, &in->n_head_kv)) != ENG_OK) {
        return rc;
    }
    if (in->n_embd % in->n_head != 0) {
        eng_errf(ld->err, ld->errlen, "%s: metadata: %s.attention.head_count: %d does not divide embedding_length %d",
                 ld->path, ld->arch, in->n_head, in->n_embd);
        return ENG_ERR_FORMAT;
    }
    if (in->n_head % in->n_head_kv != 0) {
        eng_errf(ld->err, ld->errlen, "%s: metadata: %s.attention.head_count_kv: %d does not divide head_count %d",
                 ld->path, ld->arch, in->n_head_kv, in->n_head);
        return ENG_ERR_FORMAT;
    }
    in->head_dim = in->n_embd / in->n_head;
    int32_t key_len;
    if ((rc = eng_ld_int(ld, "attention.key_length", in->head_dim, 1, 1 << 20, &key_len)) != ENG_OK) return rc;
    if (key_len != in->head_dim) {
        eng_errf(ld->err, ld->errlen, "%s: metadata: %s.attention.key_length: %d != embedding_length/head_count %d",
                 ld->path, ld->arch, key_len, in->head_dim);
        return ENG_ERR_UNSUPPORTED;
    }
    if ((rc = eng_ld_int(ld, "rope.dimension_count", in->head_dim, 2, in->head_dim, &in->n_rot)) != ENG_OK) return rc;
    if (in->n_rot % 2 != 0) {
        eng_errf(ld->err, ld->errlen, "%s: metadata: %s.rope.dimension_count: %d is odd", ld->path, ld->arch, in->n_rot);
        return ENG_ERR_FORMAT;
    }
    return eng_ld_float(ld, "rope.freq_base", 10000.0, &in->rope_freq_base);
}

int eng_attn_load(eng_loader *ld, eng_model *m, int32_t il, eng_attn_weights *w) {
    const eng_model_info *in = &m->info;
    const int64_t D = in->n_embd, GE = (int64_t)in->n_head_kv * in->head_dim;
    char nq[64], nk[64], nv[64], no[64], nn[64];
    snprintf(nq, sizeof nq, "blk.%d.attn_q.weight", il);
    snprintf(nk, sizeof nk, "blk.%d.attn_k.weight", il);
    snprintf(nv, sizeof nv, "blk.%d.attn_v.weight", il);
    snprintf(no, sizeof no, "blk.%d.attn_output.weight", il);
    snprintf(nn, sizeof nn, "blk.%d.attn_norm.weight", il);
    int rc = eng_ld_plain(ld, m, nn, D, 1, &w->attn_norm);
    if (rc != ENG_OK) return rc;
    const char *qkv[3] = {nq, nk, nv};
    const int64_t n_outs[3] = {D, GE, GE};
    if ((rc = eng_ld_fused(ld, m, qkv, n_outs, 3, D, &w->wqkv)) != ENG_OK) return rc;
    if ((rc = eng_ld_matrix(ld, m, no, D, (int64_t)in->n_head * in->head_dim, &w->wo)) != ENG_OK) return rc;
    const eng_layer *L = &m->layers[il];
    return L->has_ffn ? eng_ffn_load(ld, m, il, !L->parallel, &w->ffn) : ENG_OK;
}

void eng_attn_free(eng_attn_weights *w) {
    if (!w) return;
    free(w->attn_norm);
    eng_kmat_free(&w->wqkv);
    eng_kmat_free(&w->wo);
    eng_ffn_free(&w->ffn);
}

int64_t eng_attn_params(const eng_model *m, int32_t il) {
    const eng_attn_weights *w = m->layers[il].w;
    int64_t np = m->info.n_embd + (int64_t)w->wqkv.n_out * w->wqkv.n_in + (int64_t)w->wo.n_out * w->wo.n_in;
    return np + (m->layers[il].has_ffn ? eng_ffn_params(&w->ffn) : 0);
}

double eng_attn_token_flops(const eng_model *m, int32_t il) {
    const double D = m->info.n_embd;
    const double GE = (double)m->info.n_head_kv * m->info.head_dim;
    const double HE = (double)m->info.n_head * m->info.head_dim;
    double f = m->layers[il].has_ffn ? eng_ffn_flops(m) : 0.0;
    return f + 2.0 * D * (HE + 2.0 * GE) + 2.0 * HE * D;
}

// ----------------------------------------------------------------------------
// Scratch

static float *zalloc(int64_t n) { return calloc((size_t)(n > 0 ? n : 1), sizeof(float)); }

void eng_attn_ws_free(eng_attn_ws *ws) {
    if (!ws) return;
    free(ws->qkv); free(ws->att); free(ws->ffo); free(ws->qg); free(ws->og); free(ws->scores);
    free(ws->rope_c); free(ws->rope_s);
    memset(ws, 0, sizeof *ws);
}

int eng_attn_ws_prepare(const eng_model *m, eng_attn_ws *w, const eng_fwd *f, bool full) {
    const eng_model_info *in = &m->info;
    const int32_t T = f->T, P = full ? eng_fwd_max_P(f) : 0, n_ctx = eng_fwd_max_ctx(f);
    const int64_t D = in->n_embd, HE = (int64_t)in->n_head * in->head_dim;
    const int64_t QKV = HE + 2 * (int64_t)in->n_head_kv * in->head_dim;
    if (T > w->cap_T) {
        free(w->qkv); free(w->att); free(w->ffo); free(w->qg); free(w->og);
        free(w->rope_c); free(w->rope_s); free(w->scores);
        w->scores = NULL;
        w->scores_cap = 0;
        w->cap_P = 0;
        w->qkv = zalloc(T * QKV);
        w->att = zalloc(T * HE);
        w->ffo = zalloc(T * D);
        w->qg = zalloc(HE * T);
        w->og = zalloc(HE * T);
        w->rope_c = zalloc((int64_t)T * (in->n_rot / 2));
        w->rope_s = zalloc((int64_t)T * (in->n_rot / 2));
        if (!w->qkv || !w->att || !w->ffo || !w->qg || !w->og || !w->rope_c || !w->rope_s) {
            eng_attn_ws_free(w);
            return ENG_ERR_NOMEM;
        }
        w->cap_T = T;
    }
    if (P > w->cap_P) {
        int32_t cap = w->cap_P * 2 > P ? w->cap_P * 2 : P;
        if (cap > n_ctx) cap = n_ctx;
        const int64_t n = eng_k_attention_ws(&m->kctx, w->cap_T, cap, in->n_head, in->n_head_kv, in->head_dim);
        free(w->scores);
        w->scores = zalloc(n);
        if (!w->scores) { w->cap_P = 0; w->scores_cap = 0; return ENG_ERR_NOMEM; }
        w->cap_P = cap;
        w->scores_cap = n;
    }
    const int64_t half = in->n_rot / 2;  /* each span's rows: the table of its own positions */
    for (int32_t i = 0; i < f->n_span; i++)
        eng_k_rope_table(f->span[i].T, f->span[i].pos0, in->n_rot, in->rope_freq_base, w->rope_c + f->span[i].r0 * half,
                         w->rope_s + f->span[i].r0 * half);
    return ENG_OK;
}

// ----------------------------------------------------------------------------
// The attention layer

void eng_attn_layer(eng_fwd *f, int32_t il, const eng_attn_weights *aw, eng_attn_ws *ws, eng_attn_core core) {
    const eng_model *m = f->m;
    const eng_model_info *in = &m->info;
    const eng_kctx *k = f->k;
    const eng_layer *L = &m->layers[il];
    eng_ws *w = f->w;
    const int32_t T = f->T, D = in->n_embd, H = in->n_head, G = in->n_head_kv, E = in->head_dim;
    const int32_t HE = H * E, QKV = HE + 2 * G * E;

    /* n = norm(x); q|k|v = n . Wqkv^T; RoPE on Q and K: one region (the norm
     * and RoPE fused into the product) */
    eng_kfuse qkv = {0};
    if (L->parallel) eng_norm_rows(m, T, w->x, D, aw->attn_norm, NULL, w->xn, D);  /* the FFN reads it too */
    else eng_norm_fuse(f, &qkv, aw->attn_norm, NULL);
    const bool rope_fused = L->rope && E % 2 == 0;
    if (rope_fused) {
        qkv.rope_cols = (H + G) * E;  /* Q and K heads */
        qkv.rope_E = E;
        qkv.rope_n_rot = in->n_rot;
        qkv.rope_cs = ws->rope_c;
        qkv.rope_sn = ws->rope_s;
    }
    eng_k_matmul_fused(k, &aw->wqkv, T, L->parallel ? w->xn : w->x, D, ws->qkv, QKV, &qkv);  /* [T, HE | GE | GE] */
    if (L->rope && !rope_fused) eng_k_rope(k, T, H + G, E, in->n_rot, ws->rope_c, ws->rope_s, ws->qkv, QKV);
    core(f, il, ws);
    if (L->parallel) {  /* cohere2: x = (x + ffn(n)) + attn(n) */
        eng_k_matmul(k, &aw->wo, T, ws->att, HE, w->proj, D);
        eng_ffn_residual_from(f, &aw->ffn, w->xn, false, ws->ffo, w->proj);
        return;
    }
    eng_kfuse o = {.res = w->x, .ldres = D};  /* x += attn . Wo^T */
    eng_k_matmul_fused(k, &aw->wo, T, ws->att, HE, w->proj, D, &o);
    if (L->has_ffn) eng_ffn_residual(f, &aw->ffn);
}

// ----------------------------------------------------------------------------
// The kind: full attention over the KV rows

/* Per span: its K/V rows into its sequence's memory, then its queries over
 * the keys [0, pos0 + T) of that memory. */
static void full_core(eng_fwd *f, int32_t il, eng_attn_ws *ws) {
    const eng_model_info *in = &f->m->info;
    const int32_t H = in->n_head, G = in->n_head_kv, E = in->head_dim;
    const int32_t HE = H * E, GE = G * E, QKV = HE + 2 * GE;
    for (int32_t i = 0; i < f->n_span; i++) {
        const eng_fspan *sp = &f->span[i];
        eng_attn_mem *mem = sp->s->mem[il].state;
        const float *qkv = ws->qkv + (int64_t)sp->r0 * QKV;
        for (int32_t t = 0; t < sp->T; t++) {
            const float *row = qkv + (int64_t)t * QKV;
            memcpy(mem->k + (int64_t)(sp->pos0 + t) * GE, row + HE, sizeof(float) * (size_t)GE);
            memcpy(mem->v + (int64_t)(sp->pos0 + t) * GE, row + HE + GE, sizeof(float) * (size_t)GE);
        }
        eng_k_attention(f->k, sp->T, sp->pos0, H, G, E, qkv, QKV, mem->k, mem->v, GE, ws->att + (int64_t)sp->r0 * HE,
                        HE, ws->qg, ws->og, ws->scores, ws->scores_cap);
    }
}

static int attn_load(eng_loader *ld, eng_model *m, int32_t il, void **w) {
    eng_attn_weights *aw = calloc(1, sizeof *aw);
    if (!aw) return ENG_ERR_NOMEM;
    *w = aw;
    m->info.kv_bytes_per_token += 2 * (int64_t)sizeof(float) * m->info.n_head_kv * m->info.head_dim;  /* K + V */
    return eng_attn_load(ld, m, il, aw);
}

static void attn_free(void *w) {
    eng_attn_free(w);
    free(w);
}

/* QK^T and PV: 2*E FLOPs each per (query head, attended key); query p attends p + 1 keys. */
static double attn_pos_flops(const eng_model *m, int32_t il, int64_t p0, int64_t p1) {
    const double EH = (double)m->info.head_dim * m->info.n_head;
    const double keys = (double)(p1 - p0) * (double)(p0 + p1 + 1) / 2.0;  /* sum of (p + 1) */
    return 2.0 * 2.0 * EH * keys;
}

static int attn_prepare(const eng_model *m, int32_t il, void **ws, const eng_fwd *f) {
    if (!*ws && !(*ws = calloc(1, sizeof(eng_attn_ws)))) return ENG_ERR_NOMEM;
    return eng_attn_ws_prepare(m, *ws, f, true);
}

static void attn_ws_free(void *ws) {
    eng_attn_ws_free(ws);
    free(ws);
}

static void attn_forward(eng_fwd *f, int32_t il, void *ws) {
    eng_attn_layer(f, il, f->m->layers[il].w, ws, full_core);
}

static int attn_mem_new(const eng_model *m, int32_t il, int32_t n_ctx, int32_t slack, void **out) {
    const int64_t ge = (int64_t)m->info.n_head_kv * m->info.head_dim;
    eng_attn_mem *mem = calloc(1, sizeof *mem);
    if (!mem) return ENG_ERR_NOMEM;
    mem->n_embd_kv = (int32_t)ge;
    mem->k = calloc((size_t)n_ctx * (size_t)ge, sizeof(float));
    mem->v = calloc((size_t)n_ctx * (size_t)ge, sizeof(float));
    if (!mem->k || !mem->v) {
        free(mem->k); free(mem->v); free(mem);
        return ENG_ERR_NOMEM;
    }
    *out = mem;
    return ENG_OK;
}

static void attn_mem_free(void *v) {
    eng_attn_mem *mem = v;
    if (!mem) return;
    free(mem->k);
    free(mem->v);
    free(mem);
}

/* Rows [0, n_used) are zeroed: nothing beyond was ever written. */
static void attn_mem_clear(const eng_model *m, int32_t il, void *v, int32_t n_used) {
    eng_attn_mem *mem = v;
    const size_t b = sizeof(float) * (size_t)n_used * (size_t)mem->n_embd_kv;
    memset(mem->k, 0, b);
    memset(mem->v, 0, b);
}

static bool attn_can_truncate(const eng_model *m, int32_t il, const void *mem, int32_t n_tokens, int32_t n) {
    return true;  /* any length */
}

static void attn_copy(const eng_model *m, int32_t il, void *dst, const void *src, int32_t n) {
    const eng_attn_mem *a = src;
    eng_attn_mem *b = dst;
    const size_t bytes = sizeof(float) * (size_t)n * (size_t)a->n_embd_kv;
    memcpy(b->k, a->k, bytes);
    memcpy(b->v, a->v, bytes);
}

/* K rows then V rows, by position. */
static bool attn_compare(const eng_model *m, int32_t il, const void *va, const void *vb, int32_t n_a, int32_t n_b,
                         eng_seq_diff *out) {
    const eng_attn_mem *ma = va, *mb = vb;
    const int32_t n = n_a < n_b ? n_a : n_b;
    const int64_t ge = ma->n_embd_kv;
    for (int part = 0; part < 2; part++) {
        const float *ra = part ? ma->v : ma->k;
        const float *rb = part ? mb->v : mb->k;
        for (int32_t p = 0; p < n; p++) {
            const int64_t i = eng_first_diff(ra + p * ge, rb + p * ge, ge);
            if (i >= 0) return eng_diff_found(out, part ? ENG_SEQ_PART_V : ENG_SEQ_PART_K, p, i);
        }
    }
    return false;
}

static size_t attn_ser_bytes(const eng_model *m, int32_t il, const void *v, int32_t n) {
    const eng_attn_mem *mem = v;
    return 2u * sizeof(float) * (size_t)n * (size_t)mem->n_embd_kv;
}

static void attn_ser_save(const eng_model *m, int32_t il, const void *v, int32_t n, void *dst) {
    const eng_attn_mem *mem = v;
    const size_t b = sizeof(float) * (size_t)n * (size_t)mem->n_embd_kv;
    memcpy(dst, mem->k, b);
    memcpy((char *)dst + b, mem->v, b);
}

static void attn_ser_load(const eng_model *m, int32_t il, void *v, int32_t n, const void *src) {
    eng_attn_mem *mem = v;
    const size_t b = sizeof(float) * (size_t)n * (size_t)mem->n_embd_kv;
    memcpy(mem->k, src, b);
    memcpy(mem->v, (const char *)src + b, b);
}

/* A checkpoint holds nothing: truncation restores full attention. */
static size_t attn_ckpt_bytes(const eng_model *m, int32_t il, const void *mem, int32_t n) { return 0; }
static void attn_ckpt_save(const eng_model *m, int32_t il, const void *mem, int32_t n, void *dst) {}
static void attn_ckpt_load(const eng_model *m, int32_t il, void *mem, int32_t n, const void *src) {}

// ----------------------------------------------------------------------------
// The llama architecture

static int llama_hparams(eng_loader *ld, eng_model *m) {
    eng_model_info *in = &m->info;
    int rc;
    if ((rc = eng_ld_float(ld, "attention.layer_norm_rms_epsilon", 1e-5, &in->rms_eps)) != ENG_OK) return rc;
    if ((rc = eng_attn_hparams(ld, m, NULL)) != ENG_OK) return rc;
    for (int32_t il = 0; il < in->n_layer; il++) {
        eng_layer *L = &m->layers[il];
        L->ops = &eng_kind_attn;
        L->has_ffn = true;
        L->rope = true;
    }
    return ENG_OK;
}

// ----------------------------------------------------------------------------
// Synthetic llama models: the attention checks, keys and tensors (shared
// with the sliding-window and hybrid writers through attn.h's siblings)

int eng_synth_attn_check(synth_ctx *c) {
    const eng_synth_params *p = &c->p;
    char msg[128];
    struct { const char *field; int32_t v, lo, hi; } lim[] = {
        {"n_head", p->n_head, 1, 4096}, {"n_head_kv", p->n_head_kv, 1, 4096}, {"n_ff", p->n_ff, 1, 1 << 20},
    };
    for (size_t i = 0; i < sizeof lim / sizeof lim[0]; i++)
        if (!sy_in_range(lim[i].v, lim[i].lo, lim[i].hi)) {
            snprintf(msg, sizeof msg, "%d, expected [%d, %d]", lim[i].v, lim[i].lo, lim[i].hi);
            return sy_fail_arg(c, lim[i].field, msg);
        }
    if (p->n_embd % p->n_head != 0) {
        snprintf(msg, sizeof msg, "%d heads do not divide n_embd %d", p->n_head, p->n_embd);
        return sy_fail_arg(c, "n_head", msg);
    }
    if (p->n_head % p->n_head_kv != 0) {
        snprintf(msg, sizeof msg, "%d kv heads do not divide %d heads", p->n_head_kv, p->n_head);
        return sy_fail_arg(c, "n_head_kv", msg);
    }
    if (p->n_rot == 0) c->p.n_rot = p->n_embd / p->n_head;
    int32_t e = p->n_embd / p->n_head;
    if (p->n_rot < 2 || p->n_rot > e || p->n_rot % 2 != 0) {
        snprintf(msg, sizeof msg, "%d, expected an even number in [2, head dim %d]", p->n_rot, e);
        return sy_fail_arg(c, "n_rot", msg);
    }
    return ENG_OK;
}

/* context, embedding, blocks, FFN, heads, rope, vocab: llama's keys under
 * the architecture's prefix; head_count_kv is written by the caller when
 * hkv_scalar is false; the RMS eps when rms_eps. */
int eng_synth_attn_meta(synth_ctx *c, bool hkv_scalar, bool rms_eps) {
    const eng_synth_params *p = &c->p;
    eng_gguf_writer *w = c->w;
    int rc = ENG_OK;
    if (!rc) rc = eng_gguf_writer_set_u32(w, sy_key(c, "context_length"), (uint32_t)p->n_ctx);
    if (!rc) rc = eng_gguf_writer_set_u32(w, sy_key(c, "embedding_length"), (uint32_t)p->n_embd);
    if (!rc) rc = eng_gguf_writer_set_u32(w, sy_key(c, "block_count"), (uint32_t)p->n_layer);
    if (!rc) rc = eng_gguf_writer_set_u32(w, sy_key(c, "feed_forward_length"), (uint32_t)p->n_ff);
    if (!rc) rc = eng_gguf_writer_set_u32(w, sy_key(c, "attention.head_count"), (uint32_t)p->n_head);
    if (!rc && hkv_scalar) rc = eng_gguf_writer_set_u32(w, sy_key(c, "attention.head_count_kv"), (uint32_t)p->n_head_kv);
    if (!rc) rc = eng_gguf_writer_set_u32(w, sy_key(c, "rope.dimension_count"), (uint32_t)p->n_rot);
    if (!rc) rc = eng_gguf_writer_set_f32(w, sy_key(c, "rope.freq_base"), p->rope_freq_base);
    if (!rc && rms_eps) rc = eng_gguf_writer_set_f32(w, sy_key(c, "attention.layer_norm_rms_epsilon"), p->rms_eps);
    if (!rc) rc = eng_gguf_writer_set_u32(w, sy_key(c, "vocab_size"), (uint32_t)p->n_vocab);
    return rc ? sy_nomem(c, "metadata") : ENG_OK;
}

#define TN(suffix) (snprintf(name, sizeof name, "blk.%d." suffix, il), name)

/* blk.N: attn_norm [D], attn_q [D, D], attn_k/v [D, G*E], attn_output [D, D]. */
int eng_synth_attn_tensors(synth_ctx *c, int32_t il) {
    const eng_synth_params *p = &c->p;
    int64_t D = p->n_embd, GE = (int64_t)p->n_head_kv * (p->n_embd / p->n_head);
    char name[64];
    int rc;
    if ((rc = sy_add_norm(c, TN("attn_norm.weight"), D))) return rc;
    if ((rc = sy_add_proj(c, TN("attn_q.weight"), D, D))) return rc;
    if ((rc = sy_add_proj(c, TN("attn_k.weight"), D, GE))) return rc;
    if ((rc = sy_add_proj(c, TN("attn_v.weight"), D, GE))) return rc;
    return sy_add_proj(c, TN("attn_output.weight"), D, D);
}

/* blk.N: ffn_norm [D] (when with_norm), ffn_gate/up [D, F], ffn_down [F, D]. */
int eng_synth_ffn_tensors(synth_ctx *c, int32_t il, bool with_norm) {
    const eng_synth_params *p = &c->p;
    int64_t D = p->n_embd, F = p->n_ff;
    char name[64];
    int rc;
    if (with_norm && (rc = sy_add_norm(c, TN("ffn_norm.weight"), D))) return rc;
    if ((rc = sy_add_proj(c, TN("ffn_gate.weight"), D, F))) return rc;
    if ((rc = sy_add_proj(c, TN("ffn_up.weight"), D, F))) return rc;
    return sy_add_proj(c, TN("ffn_down.weight"), F, D);
}

#undef TN

static int llama_synth_meta(synth_ctx *c) { return eng_synth_attn_meta(c, true, true); }

static int llama_synth_layer(synth_ctx *c, int32_t il) {
    int rc = eng_synth_attn_tensors(c, il);
    return rc ? rc : eng_synth_ffn_tensors(c, il, true);
}

static const eng_synth_arch llama_synth = {
    .name = "llama", .groups = SY_HEADS | SY_FF,
    .check = eng_synth_attn_check, .meta = llama_synth_meta, .layer = llama_synth_layer,
    .presets = {
        {.D = 64, .L = 2, .H = 4, .G = 2, .F = 176, .ctx = 4096},
        {.D = 256, .L = 4, .H = 8, .G = 4, .F = 704, .ctx = 16384},
        {.D = 1024, .L = 12, .H = 16, .G = 8, .F = 2816, .ctx = 8192},
        {.D = 64, .L = 2, .H = 2, .G = 1, .F = 176, .ctx = 262144},
    },
};

static const eng_arch llama_arch = {.name = "llama", .hparams = llama_hparams, .synth = &llama_synth};
static const eng_arch *const attn_archs[] = {&llama_arch, NULL};

const eng_layer_ops eng_kind_attn = {
    .name = "attn",
    .kind = ENG_LAYER_ATTN,
    .archs = attn_archs,
    .load = attn_load,
    .free = attn_free,
    .n_params = eng_attn_params,
    .token_flops = eng_attn_token_flops,
    .pos_flops = attn_pos_flops,
    .prepare = attn_prepare,
    .ws_free = attn_ws_free,
    .forward = attn_forward,
    .mem_new = attn_mem_new,
    .mem_free = attn_mem_free,
    .mem_clear = attn_mem_clear,
    .can_truncate = attn_can_truncate,
    .truncate = NULL,
    .copy = attn_copy,
    .compare = attn_compare,
    .ser_bytes = attn_ser_bytes,
    .ser_save = attn_ser_save,
    .ser_load = attn_ser_load,
    .ckpt_bytes = attn_ckpt_bytes,
    .ckpt_save = attn_ckpt_save,
    .ckpt_load = attn_ckpt_load,
};
