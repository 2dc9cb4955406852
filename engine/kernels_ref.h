/*
 * engine/kernels_ref.h: the ref kernel (internal): batch-invariant products
 * and attention, fixed-order fused multiply-add chains on three code paths
 * with the same bits (the contract is in kernels.h), and the softmax row and
 * the online-softmax step both kernels use. Products: kernels_ref_gemm.c;
 * softmax: kernels_ref_softmax.c; attention: kernels_ref_attn.c.
 */
#ifndef ENG_KERNELS_REF_H
#define ENG_KERNELS_REF_H

#include "kbase.h"

/* The fastest path this CPU runs; the environment variable
 * KVREPLAY_REF_PATH=scalar|avx2|avx512 can lower it (never raise it). */
eng_kpath   eng_kpath_best(void);
const char *eng_kpath_name(eng_kpath p);  /* "scalar", "avx2", "avx512" */

/* Y[r, c] for rows [r0, r1) and columns [c0, c1) of X . W^T (c0 on a panel
 * boundary), on the calling thread, not rounded. xp: NULL, or the rows
 * [r0, r1) of X packed by eng_k_ref_pack (M = r1 - r0): same bits, read
 * faster (the register blocks broadcast one contiguous stream instead of
 * 4 to 6 rows, which a row stride of a multiple of 4 KiB puts in one set
 * of the L1 cache). */
void eng_k_matmul_ref_block(const eng_kctx *ctx, const eng_kmat *W, int32_t r0, int32_t r1, int32_t c0, int32_t c1,
                            const float *X, int32_t ldx, const float *xp, float *Y, int32_t ldy);
/* Floats eng_k_ref_pack needs for M rows of K; 0: on this path the
 * product reads M rows in place (pass xp NULL). */
int64_t eng_k_ref_pack_floats(const eng_kctx *ctx, int32_t M, int32_t K);
/* X [M, K] (row stride ldx) into xp, as eng_k_matmul_ref_block reads it. */
void    eng_k_ref_pack(const eng_kctx *ctx, int32_t M, int32_t K, const float *X, int32_t ldx, float *xp);
/* Keys per block of the ref attention's online softmax: blocks start at the
 * absolute positions that are multiples of it, whatever the chunk. */
#define ENG_REF_ATTN_KB 256

/* The ref attention of one chunk (kernels_ref_attn.c), full causal (W == 0) or
 * with a window of W keys (a query at p attends the positions (p - W, p]):
 * qg [H*T, E] the queries regrouped by KV head (query head h's T rows at
 * qg + h*T*E), K and V [P, G*E] (row stride ldkv) holding the positions
 * [kpos0, pos0 + T), P = pos0 + T - kpos0 -> O [T, H*E] (row stride ldo),
 * scale 1/sqrt(E), rounded when bf16. Scores are chains over e; the
 * softmax is online over key blocks of ENG_REF_ATTN_KB absolute positions
 * (a running max and sum per row, the outputs rescaled when the max grows);
 * outputs are chains over the attended keys in ascending position,
 * multiplied by 1 / sum at the end (kernels_ref_attn.c: attn_super and
 * block_rows have every step, attn_group the same steps for prefill).
 * ws: at least eng_k_attention_ref_ws(ctx->n_threads, P, E) floats. */
void eng_k_attention_ref(const eng_kctx *ctx, int32_t T, int32_t pos0, int32_t W, int32_t kpos0, int32_t H, int32_t G,
                         int32_t E, const float *qg, const float *K, const float *V, int32_t ldkv, float *O,
                         int32_t ldo, float *ws, int64_t ws_cap);
int64_t eng_k_attention_ref_ws(int32_t n_threads, int32_t P, int32_t E);

/* Softmax of n scores in place: s_j = round(s_j * scale),
 * e_j = eng_expf(s_j - max_j s_j), p_j = round(e_j * (1 / sum_j e_j)). The
 * max and the sum are a fixed order that depends only on n: 8 float
 * partial sums (lane j % 8, ascending j), combined as
 * ((l0 + l1) + (l2 + l3)) + ((l4 + l5) + (l6 + l7)). Rounded when bf16. */
void eng_k_softmax_row(float *s, int32_t n, float scale, bool bf16);
/* The same on one of the ref kernel's paths (blas's attention softmax;
 * identical bits on every path, which the tests check through this). */
void eng_k_softmax_path(eng_kpath path, float *s, int32_t n, float scale, bool bf16);
/* y[i] = eng_expf(x[i]) through path's vector exponential (the one the
 * softmax steps use; the tests check its bits over every float). */
void eng_k_exp_path(eng_kpath path, const float *x, float *y, int64_t n);
/* h = (g / (1 + exp(-g))) * u (the SwiGLU), the same bits on every path. */
void eng_k_silu_mul_path(eng_kpath path, const float *g, const float *u, float *h, int64_t n);
/* One key block of a row's online softmax, on a path (the ref attention's
 * steps, kernels_ref_softmax.c; blas's blocked attention uses them too): s[0, n)
 * scaled, rounded and exponentiated against the running max *mx, *l the
 * running sum; when the max grows, the row's outputs so far o[0, no) and
 * *l are multiplied by exp(old max - new max) first. Start a row with
 * *mx = -inf and *l = 0: its first block multiplies o by 0, so o must hold
 * zeros then, or pass no = 0. */
void eng_k_softmax_step_path(eng_kpath path, float *s, int32_t n, float scale, bool bf16, float *mx, float *l,
                             float *o, int32_t no);

#endif /* ENG_KERNELS_REF_H */
