/*
 * engine/layers/swa.h: sliding-window attention (internal; never included by
 * the harness): the bounded ring of K/V cells of one SWA layer, the rules that
 * say which positions it can still give back (truncation, checkpoints),
 * and the banded attention of one chunk.
 *
 * Window semantics (llama.cpp's LLAMA_SWA_TYPE_STANDARD): with window W, a
 * query at position p attends the keys j with p - j < W, i.e. the W
 * positions (p - W, p], itself included (fewer at the start of a sequence).
 *
 * The ring: R cells of G*E floats for K (after RoPE) and V; position p lives
 * in row p % R. After writing positions up to n_tokens - 1 the ring holds
 * positions [n_tokens - R, n_tokens); a position below `lo` is never valid
 * even when its row has not been overwritten (restore, deserialisation and
 * truncation raise lo). The valid positions are therefore
 * [valid_lo, n_tokens) with valid_lo = max(lo, n_tokens - R, 0).
 * R = min(n_ctx, W + slack): the slack is the distance truncation can go
 * back (llama.cpp keeps n_swa + n_ubatch cells; kvreplay's default slack is
 * the default chunk, 64). The ring never limits the chunk length: a chunk's
 * keys are gathered into scratch before its own cells are written.
 *
 * Truncation rule (model.h): the state at n tokens can be had by
 * truncation iff the cells of [n - W, n) (clipped at 0) are all valid:
 * max(n - W, 0) >= valid_lo. (Strictly a query at n needs only
 * [n - W + 1, n); the contract keeps W cells, and so do checkpoints.)
 *
 * The attention (eng_swa_attention) has the shape of eng_k_attention: per
 * KV head its H/G query heads are stacked into R = (H/G)*T rows, scores,
 * a softmax over each row's band, values. blas: both products are one
 * sgemm over the rectangle of gathered keys (masked probabilities exactly
 * 0), so a row's result depends on the chunk's shape like full attention;
 * ref: eng_k_attention_ref with the window (kernels_ref_attn.c): one fixed-order
 * FMA chain per (row, attended key) over e and one per (row, e) over the
 * band in ascending position, so a row's result depends only on its
 * position and the window's keys (batch-invariant), and a window covering
 * the sequence is bit-identical to full attention. The softmax: s_j = round(S*scale), e_j = eng_expf(s_j - max), sum in 8
 * lanes by (j - first attended key) % 8 combined pairwise, p_j =
 * round(e_j * (1/sum)). KV heads are spread over the threads with
 * single-threaded products, so no result depends on the thread count.
 *
 * Dimension letters: T chunk tokens, H query heads, G KV heads, E head dim,
 * GE = G*E, W window, R ring cells, P' = gathered key rows.
 */
#ifndef ENG_SWA_H
#define ENG_SWA_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kernels.h"
#include "layer.h"

/* ENG_SWA_SLACK_DEFAULT (model.h): the default slack of the ring, the default chunk. */

typedef struct eng_swa_mem {
    int32_t n_embd_kv;  /* GE floats per cell */
    int32_t n_cells;    /* R */
    int32_t lo;         /* positions below lo are invalid */
    float  *k;          /* [R, GE]: position p in row p % R */
    float  *v;          /* [R, GE] */
} eng_swa_mem;

/* A zeroed ring of n_cells >= 1 cells (lo = 0). ENG_OK or ENG_ERR_NOMEM (freed then). */
int  eng_swa_mem_alloc(eng_swa_mem *m, int32_t n_cells, int32_t n_embd_kv);
void eng_swa_mem_free(eng_swa_mem *m);   /* accepts a zeroed struct */
void eng_swa_mem_clear(eng_swa_mem *m);  /* zeroes every cell, lo = 0 */

/* Ring capacity for a sequence of n_ctx positions: min(n_ctx, W + slack). */
int32_t eng_swa_ring_cells(int32_t n_ctx, int32_t W, int32_t slack);

/* Lowest valid position when the sequence holds n_tokens tokens. */
int32_t eng_swa_valid_lo(const eng_swa_mem *m, int32_t n_tokens);
/* Whether the cells of [n - W, n) are valid (0 <= n <= n_tokens). */
bool    eng_swa_can_truncate(const eng_swa_mem *m, int32_t W, int32_t n_tokens, int32_t n);
/* Records a truncation from n_tokens to n <= n_tokens: positions >= n are
 * dropped, and lo rises to the valid_lo of n_tokens (rows of positions
 * below it may be overwritten by later writes). */
void    eng_swa_truncate(eng_swa_mem *m, int32_t n_tokens, int32_t n);

/* Cell rows of position p (valid or not: the caller checks). */
const float *eng_swa_k(const eng_swa_mem *m, int32_t p);
const float *eng_swa_v(const eng_swa_mem *m, int32_t p);

/* The window a sequence at n tokens keeps: positions [n - w, n), w = min(n, W). */
int32_t eng_swa_window_cells(int32_t W, int32_t n);
/* Bytes of that window: K rows then V rows, 2 * w * GE floats. */
size_t  eng_swa_window_bytes(const eng_swa_mem *m, int32_t W, int32_t n);
/* Writes the window of a sequence at n tokens (whose cells must be valid)
 * to dst: K rows of [n - w, n) in position order, then the V rows. */
void    eng_swa_save_window(const eng_swa_mem *m, int32_t W, int32_t n, void *dst);
/* Puts a window saved at n tokens back: its cells become valid and
 * everything below n - w invalid (lo = n - w). */
void    eng_swa_load_window(eng_swa_mem *m, int32_t W, int32_t n, const void *src);
/* dst's ring takes src's valid cells of a sequence at n_tokens (position by
 * position, so the two rings may differ in size); dst->lo is set so that
 * exactly the copied positions are valid. */
void    eng_swa_copy(eng_swa_mem *dst, const eng_swa_mem *src, int32_t n_tokens);

/* Scratch of the attention, grown on demand. */
typedef struct eng_swa_ws {
    int64_t cap_k, cap_v, cap_q, cap_o, cap_s;  /* floats in kg, vg, qg, og, scores */
    float  *kg, *vg;   /* [P', GE] keys and values of positions [kpos0, pos0 + T) */
    float  *qg, *og;   /* [H*T, E] queries regrouped by KV head, and outputs */
    float  *scores;    /* blas: [nb * R, P'] a batch of nb KV heads; ref: the kernel's per-thread scratch */
} eng_swa_ws;

void eng_swa_ws_free(eng_swa_ws *ws);  /* accepts a zeroed struct */
/* Grows ws for a chunk of T tokens at pos0 (window W, H, G, E), so that
 * eng_swa_attend for it cannot fail. ENG_OK or ENG_ERR_NOMEM. */
int  eng_swa_ws_reserve(const eng_kctx *ctx, eng_swa_ws *ws, int32_t T, int32_t pos0, int32_t W, int32_t H, int32_t G,
                        int32_t E);

/* Banded attention of a chunk of T tokens at positions [pos0, pos0 + T):
 * Q [T, H*E] (row stride ldq), K and V [P', G*E] (row stride ldkv) holding
 * positions [kpos0, pos0 + T) with kpos0 <= max(0, pos0 - W + 1), scale
 * 1/sqrt(E) -> O [T, H*E] (row stride ldo), rounded when bf16. Uses ws's
 * qg, og and scores (grown here). ENG_OK or ENG_ERR_NOMEM. */
int eng_swa_attention(const eng_kctx *ctx, int32_t T, int32_t pos0, int32_t W, int32_t kpos0, int32_t H,
                      int32_t G, int32_t E, const float *Q, int32_t ldq, const float *K, const float *V,
                      int32_t ldkv, float *O, int32_t ldo, eng_swa_ws *ws);

/* The memory side of a SWA layer for one chunk at pos0 == the sequence's
 * n_tokens: qkv [T, H*E | G*E | G*E] after RoPE (row stride ldqkv) holds the
 * chunk's queries, keys and values. Gathers the window's earlier cells
 * [max(0, pos0 - W + 1), pos0) (which must be valid: an invariant, asserted)
 * and the chunk's own K/V into ws, writes the chunk's cells into the ring,
 * and runs eng_swa_attention into O. ENG_OK or ENG_ERR_NOMEM (ring
 * untouched then). */
int eng_swa_attend(const eng_kctx *ctx, eng_swa_mem *m, int32_t W, int32_t T, int32_t pos0, int32_t H, int32_t G,
                   int32_t E, const float *qkv, int32_t ldqkv, float *O, int32_t ldo, eng_swa_ws *ws);

/* Cost model: keys attended by the queries at positions [p0, p1) with
 * window W: sum over p of min(p + 1, W). */
double eng_swa_keys(int32_t W, int64_t p0, int64_t p1);

/* The sliding-window layer kind (swa.c). */
extern const eng_layer_ops eng_kind_swa;

#endif /* ENG_SWA_H */
