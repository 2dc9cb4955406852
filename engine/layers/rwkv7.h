/*
 * engine/layers/rwkv7.h: the RWKV-7 layer kind (internal): its state, the
 * wkv7 scan over one chunk (both kernels), and the kind's table.
 *
 * Semantics (llama.cpp's llm_build_rwkv7: build_rwkv7_time_mix,
 * build_rwkv7_channel_mix and ggml_rwkv_wkv7; rwkv.cpp's rwkv_att_v7 and
 * rwkv_ffn_v7 compute the same): per layer, with x [T, D] the residual,
 * LN a layer norm with weight and bias (eps = attention.layer_norm_epsilon),
 * and prev(y)[t] = y[t-1], prev(y)[0] = the layer's shift state:
 *
 *   time mix   xa = LN1(x);  sx = prev(xa) - xa
 *              x_c = sx * lerp_c + xa              c = r, w, k, v, a, g
 *              r = Wr x_r;  k = Wk x_k;  v = Wv x_v
 *              w = exp(-0.606531 * sigmoid(W2 tanh(W1 x_w) + w0))     decay in (0.545, 1)
 *              v = v + (v_first - v) * sigmoid(V2 V1 x_v + v0)         layers > 0; layer 0 sets v_first
 *              g = G2 sigmoid(G1 x_g)
 *              a = sigmoid(A2 A1 x_a + a0)                             in-context learning rate
 *              kk = l2norm_head(k * k_k)                               eps 1e-12
 *              k = k + (a * (k * k_a) - k * k_a)
 *              o = wkv7(r, w, k, v, -kk, kk * a)                       per head, state S [S, S]
 *              o = groupnorm_head(o) * ln_x_w + ln_x_b                 eps 64e-5
 *              o = o + v * sum_head(k * r * r_k)
 *              x = x + Wo (o * g)
 *   chan. mix  xf = LN2(x);  xk = (prev(xf) - xf) * lerp_k + xf
 *              x = x + Cv relu(Ck xk)^2
 *
 * wkv7, per head with a = -kk, b = kk * a, for each token:
 *   S = S diag(w) + (S a) b^T + v k^T         S [S_v, S_k]: S[i][j], i value, j key
 *   o = S r
 * (ggml: state[i][j] = state[i][j]*w[j] + v[i]*k[j] + sa_i*b[j], sa_i = sum_j a[j]*state[i][j];
 *  o[i] = sum_j state[i][j]*r[j].)
 *
 * The scan by kernel:
 *   - ref: the recurrence token by token in ggml's per-element order:
 *     sa_i = sum_j a[j] S[i][j] (j ascending), S[i][j] = (S[i][j]*w[j] +
 *     v[i]*k[j]) + sa_i*b[j], o_i = sum_j S[i][j] r[j] (j ascending). A
 *     token's result depends only on the state before it: batch-invariant.
 *   - blas: a chunked form of the generalized delta rule, in blocks of
 *     ENG_RWKV7_BLOCK tokens counted from the chunk's first token, as the
 *     GPU kernels (fla's chunk_rwkv7) do. With G_t = prod_{u<=t} w_u in the
 *     block, a~_t = G_{t-1} a_t, r~_t = G_t r_t, b^_s = b_s / G_s, k^_s =
 *     k_s / G_s and S_0 the state at the block start:
 *       x_t = S a_t before token t  = S_0 a~_t + sum_{s<t} x_s (b^_s.a~_t) + v_s (k^_s.a~_t)
 *             (a unit lower-triangular system: one strsm)
 *       o_t = S_0 r~_t + sum_{s<=t} x_s (b^_s.r~_t) + v_s (k^_s.r~_t)
 *       S  <- S_0 diag(G_Q) + sum_s (x_s b_s^T + v_s k_s^T) diag(G_Q / G_s)
 *     every product one single-threaded cblas_sgemm, heads spread over the
 *     threads. A token's result depends on where its block starts; a chunk
 *     of one token (decode) uses the recurrence.
 *
 * bf16: every op rounds its output (the fused element-wise groups above
 * round once each: sx, each lerp, w, a, the mixed v, kk, the new k, b, the
 * wkv output, the group norm with its affine, o + v*rk, o * g, the squared
 * relu); the state stays fp32.
 *
 * State per layer and sequence: the two shift rows [D] (time mix, channel
 * mix) and the wkv state [H][S_k][S_v] (S^T per head, so the recurrence
 * vectorises over the value index). Serialised and checkpointed as the
 * time-mix shift, the channel-mix shift, then the wkv state, floats.
 *
 * A step of several sequences (layer.h): the norms, products, LoRAs and
 * element-wise stages run over the stacked rows; each span's token shift
 * (its first row's prev is its own sequence's shift row) and its scan
 * (from its own wkv state, the blas recurrence for a span of one token)
 * run per span.
 *
 * Dimension letters: T tokens, D model dim, H = D / S heads, S head size
 * (wkv.head_size), F channel-mix size, R* LoRA ranks.
 */
#ifndef ENG_LAYERS_RWKV7_H
#define ENG_LAYERS_RWKV7_H

#include "internal.h"

#define ENG_RWKV7_BLOCK 64  /* tokens per block of the blas scan (counted from the chunk start) */

typedef struct eng_rwkv7_state {
    float *shift_att;  /* [D] the last time-mix input row (LN1 output) */
    float *shift_ffn;  /* [D] the last channel-mix input row (LN2 output) */
    float *wkv;        /* [H, S, S]: per head S^T, wkv[h][j][i] = S_h[i][j] */
} eng_rwkv7_state;

/* The wkv7 scan of T tokens of every head (see above), state st updated.
 * r, w, k, v, a, b are [T, D] (row stride D, head h at columns [hS, hS+S));
 * o [T, D]. scratch holds eng_rwkv7_scan_floats(S) floats per head. */
void eng_rwkv7_scan(const eng_kctx *ctx, int32_t T, int32_t H, int32_t S, const float *r, const float *w,
                    const float *k, const float *v, const float *a, const float *b, float *wkv, float *o,
                    float *scratch);
int64_t eng_rwkv7_scan_floats(int32_t S);

extern const eng_layer_ops eng_kind_rwkv7;

#endif /* ENG_LAYERS_RWKV7_H */
