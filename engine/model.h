/*
 * engine/model.h: the inference engine's public API: models, numerics,
 * sequence state (KV cache, recurrent state, checkpoints), chunked prefill,
 * single-token decode, and batched steps over several sequences.
 *
 * Dimension letters used in this file and in the engine's .c files:
 *   V vocabulary, D model dim (n_embd), L layers, H query heads, G kv heads,
 *   E head dim, F feed-forward dim, T tokens in a chunk, P positions in a sequence.
 *
 * Batches (the end of this file): one step computes a span of tokens of
 * each of several sequences together, the weight products over the stacked
 * rows, attention and recurrent state per sequence.
 *
 * The bit-exactness invariant (docs/design.md): with align CHUNK, a prompt token
 * at absolute position p is computed inside the chunk [floor(p/C)*C,
 * floor(p/C)*C + C) clipped to the prompt's end, with the same kernels and
 * the same prior state whether or not its prefix came from a cache. So
 * eng_prefill splits its input at absolute multiples of C: cold prefill of
 * n tokens and "prefill k, truncate to floor(k/C)*C, prefill the rest" give
 * memcmp-identical logits, KV and recurrent state. With align NONE it cuts
 * chunks of `ubatch` tokens counted from where this prefill starts, as
 * llama.cpp does, which breaks the invariant on purpose.
 *
 * Numerics are fixed at load: kernel (blas: OpenBLAS sgemm, shape-dependent
 * per-row results; ref: fixed reduction order over k whatever the shape),
 * precision (fp32, or bf16: weights and every op's output rounded to
 * bfloat16, round to nearest even, fp32 accumulation) and thread count.
 *
 * Usage:
 *     eng_numerics num = eng_numerics_default();      // blas, fp32, 1 thread
 *     eng_model *m; char err[256];
 *     if (eng_model_load("m.gguf", &num, &m, err, sizeof err)) { ... }
 *     eng_seq *s = eng_seq_new(m, 4096);
 *     eng_prefill_params pp = eng_prefill_params_default(); // C = 64, align chunk
 *     float *logits = malloc(sizeof(float) * eng_model_get_info(m)->n_vocab);
 *     eng_prefill(s, tokens, n, &pp, logits);          // logits of the last token
 *     eng_decode(s, next, logits);                      // one more token
 *     eng_seq_free(s); eng_model_free(m);
 */
#ifndef ENG_MODEL_H
#define ENG_MODEL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "gguf.h"
#include "tokenizer.h"

// ----------------------------------------------------------------------------
// Numerics

typedef enum eng_kernel { ENG_KERNEL_BLAS = 0, ENG_KERNEL_REF = 1 } eng_kernel;
typedef enum eng_precision { ENG_PRECISION_FP32 = 0, ENG_PRECISION_BF16 = 1 } eng_precision;
typedef enum eng_align { ENG_ALIGN_CHUNK = 0, ENG_ALIGN_NONE = 1 } eng_align;

typedef struct eng_numerics {
    eng_kernel    kernel;     /* default ENG_KERNEL_BLAS */
    eng_precision precision;  /* default ENG_PRECISION_FP32 */
    int32_t       n_threads;  /* >= 1, default 1; also sets OpenBLAS's thread count */
} eng_numerics;

eng_numerics eng_numerics_default(void);
const char  *eng_kernel_name(eng_kernel k);        /* "blas" | "ref" */
const char  *eng_precision_name(eng_precision p);  /* "fp32" | "bf16" */
const char  *eng_align_name(eng_align a);          /* "chunk" | "none" */
/* Parse "blas"/"ref", "fp32"/"bf16", "chunk"/"none". Return ENG_OK or ENG_ERR_ARG. */
int eng_kernel_parse(const char *s, eng_kernel *out);
int eng_precision_parse(const char *s, eng_precision *out);
int eng_align_parse(const char *s, eng_align *out);
/* "OpenBLAS 0.3.21 ..." from openblas_get_config(), for run metadata. */
const char *eng_blas_info(void);
/* The core OpenBLAS picked at run time ("Haswell", "SkylakeX", "Zen", ...:
 * openblas_get_corename()); "unknown" when it says nothing. */
const char *eng_blas_corename(void);

// ----------------------------------------------------------------------------
// Models

typedef struct eng_model eng_model;

typedef enum eng_layer_kind {
    ENG_LAYER_ATTN      = 0,  /* full causal attention: KV truncatable to any length */
    ENG_LAYER_ATTN_SWA  = 1,  /* sliding-window attention (window n_swa) */
    ENG_LAYER_RECURRENT = 2,  /* recurrent state (Mamba-2, RWKV-7): not truncatable */
} eng_layer_kind;

typedef struct eng_model_info {
    char    arch[32];        /* general.architecture: "llama", ... */
    char    name[64];        /* general.name or the file's base name */
    int32_t n_vocab;         /* V */
    int32_t n_embd;          /* D */
    int32_t n_layer;         /* L */
    int32_t n_head;          /* H */
    int32_t n_head_kv;       /* G */
    int32_t head_dim;        /* E = D / H */
    int32_t n_ff;            /* F */
    int32_t n_ctx_train;
    int32_t n_rot;           /* rope dimension count (<= E) */
    float   rope_freq_base;
    float   rms_eps;
    int32_t n_swa;           /* sliding window, 0 when none */
    int32_t n_layer_attn;    /* layers of kind ATTN */
    int32_t n_layer_swa;     /* layers of kind ATTN_SWA */
    int32_t n_layer_rec;     /* layers of kind RECURRENT */
    int64_t n_params;
    char    sha256[65];      /* of the whole GGUF file, lower-case hex */
    char    chat_template[16]; /* "chatml", "llama2", "llama3" when known from metadata, else "" */
    /* Added for sliding-window and recurrent layers (0 when the model has none): */
    int32_t ssm_d_inner;     /* I: Mamba-2 inner size (ssm.inner_size) */
    int32_t ssm_d_state;     /* N: state size per head dim (ssm.state_size) */
    int32_t ssm_n_head;      /* NH: heads (ssm.time_step_rank) */
    int32_t ssm_head_dim;    /* P = I / NH */
    int32_t ssm_n_group;     /* NG: B/C groups (ssm.group_count) */
    int32_t ssm_d_conv;      /* K: causal conv kernel (ssm.conv_kernel) */
    int64_t kv_bytes_per_token;  /* K+V bytes per position over the full-attention layers */
    int64_t swa_bytes_per_token; /* K+V bytes per window cell over the sliding-window layers */
    int64_t rec_state_bytes;     /* recurrent + conv state bytes per sequence over the recurrent layers */
    /* Added for layer-norm and RWKV-7 architectures (0 when the model has none): */
    float   norm_eps;            /* layer-norm epsilon (attention.layer_norm_epsilon: cohere2, rwkv7) */
    int32_t wkv_head_size;       /* S: RWKV-7 head size (wkv.head_size); heads D / S */
} eng_model_info;

/* Loads a GGUF model: general.architecture "llama", "cohere2", "mamba2",
 * "granitehybrid", "rwkv7" (llama.cpp's) or "kvreplay-swa" (kvreplay's
 * own): the architectures of the registered layer kinds (docs/engine.md,
 * the subset of each). Tensors are converted to the compute precision at load.
 * Returns ENG_OK, ENG_ERR_IO,
 * ENG_ERR_FORMAT (missing/misshaped tensor: message names it),
 * ENG_ERR_UNSUPPORTED, ENG_ERR_ARG or ENG_ERR_NOMEM. */
int  eng_model_load(const char *path, const eng_numerics *num, eng_model **out, char *err, size_t errlen);
void eng_model_free(eng_model *m);  /* accepts NULL */

const eng_model_info *eng_model_get_info(const eng_model *m);
const eng_numerics   *eng_model_get_numerics(const eng_model *m);
eng_layer_kind        eng_model_layer_kind(const eng_model *m, int32_t il);
/* The name of layer il's kind: "attn", "swa", "mamba2", "rwkv7" (engine/layers/). */
const char           *eng_model_layer_kind_name(const eng_model *m, int32_t il);
/* The model's tokenizer, or NULL when the GGUF has no vocabulary. Owned by the model. */
const eng_tokenizer  *eng_model_tokenizer(const eng_model *m);
/* 64-bit fingerprint of the model file hash and the numerics: kernel and
 * precision, and for blas also the thread count and the OpenBLAS build
 * (ref's results do not depend on the thread count): equal fingerprints
 * mean interchangeable state. */
uint64_t              eng_model_fingerprint(const eng_model *m);
/* The ref kernel's code path m runs: "avx512", "avx2" or "scalar" (the
 * fastest this CPU has; KVREPLAY_REF_PATH can lower it). Every path gives
 * the same bits: it changes speed only. */
const char           *eng_model_ref_path(const eng_model *m);
/* Deterministic cost model: FLOPs of prefilling n tokens after n_past cached
 * ones (matmuls + attention), independent of the machine. */
double                eng_model_prefill_flops(const eng_model *m, int32_t n_past, int32_t n);

// ----------------------------------------------------------------------------
// Sequence state: the KV cache of attention layers (with positions), the
// recurrent and convolution state of recurrent layers, and the token ids.

typedef struct eng_seq eng_seq;

/* A fresh, empty sequence with room for n_ctx positions. NULL on OOM or n_ctx < 1.
 * Each sliding-window layer keeps a ring of min(n_ctx, n_swa + ENG_SWA_SLACK_DEFAULT)
 * K/V cells, so truncation can go back ENG_SWA_SLACK_DEFAULT tokens (llama.cpp
 * keeps n_swa + n_ubatch). */
eng_seq       *eng_seq_new(const eng_model *m, int32_t n_ctx);
/* Added by the engine: the same with an explicit ring slack >= 0 (cells kept
 * beyond the window). NULL on OOM, n_ctx < 1 or swa_slack < 0. */
#define ENG_SWA_SLACK_DEFAULT 64
eng_seq       *eng_seq_new_ext(const eng_model *m, int32_t n_ctx, int32_t swa_slack);
/* Added by the engine: cells of each sliding-window layer's ring (0 when the model has none). */
int32_t        eng_seq_swa_cells(const eng_seq *s);
void           eng_seq_free(eng_seq *s);  /* accepts NULL */
void           eng_seq_reset(eng_seq *s); /* back to empty: all memory cleared */
const eng_model *eng_seq_model(const eng_seq *s);
int32_t        eng_seq_n_ctx(const eng_seq *s);
int32_t        eng_seq_n_tokens(const eng_seq *s);
const int32_t *eng_seq_tokens(const eng_seq *s);  /* n_tokens ids */

/* Whether the state at n tokens (0 <= n <= n_tokens) can be had by truncation:
 * true for n == n_tokens; for full attention always; for sliding-window
 * layers only while the window's cells for positions [n - n_swa, n) still
 * exist; for recurrent layers only n == n_tokens (n == 0 is a reset, which
 * eng_seq_truncate also allows: true for every kind). */
bool eng_seq_can_truncate(const eng_seq *s, int32_t n);
/* Truncates to n tokens. ENG_ERR_UNSUPPORTED when !can_truncate(n) (and n != 0),
 * ENG_ERR_RANGE when n > n_tokens. */
int  eng_seq_truncate(eng_seq *s, int32_t n);
/* dst becomes a copy of src (same model; dst's n_ctx must be >= src's n_tokens). */
int  eng_seq_copy(eng_seq *dst, const eng_seq *src);

/* Serialisation of the whole state (tokens, every layer's memory) to bytes:
 * header with magic, version, model fingerprint and n_tokens, then payload.
 * A sliding-window layer contributes its window (the cells of [n - n_swa, n)),
 * a recurrent layer its recurrent and conv state; so a deserialised
 * sequence can truncate sliding-window memory only to its own length.
 * eng_seq_deserialize refuses a blob from another model or numerics with
 * ENG_ERR_MISMATCH and a malformed one with ENG_ERR_FORMAT. */
size_t eng_seq_serialized_size(const eng_seq *s);
int    eng_seq_serialize(const eng_seq *s, void *buf, size_t cap, size_t *n_written);
int    eng_seq_deserialize(eng_seq *s, const void *buf, size_t n);

/* Added by the engine: a byte-exact comparison of two sequences' state, for
 * tests and checkers. Compares, over the common prefix of positions
 * [0, min(n_a, n_b)), the token ids, then each layer's memory in layer
 * order (for attention: the K rows, then the V rows, by position; for
 * sliding-window attention the same over the positions whose cells both
 * sequences still hold; for recurrent layers, when n_a == n_b, the recurrent
 * state then the conv state as one STATE array), then the token counts.
 * `out` describes the first difference found in that order. */
typedef enum eng_seq_part {
    ENG_SEQ_PART_NONE     = 0,  /* equal */
    ENG_SEQ_PART_TOKENS   = 1,  /* token id at pos */
    ENG_SEQ_PART_K        = 2,  /* K row pos of layer, element index */
    ENG_SEQ_PART_V        = 3,  /* V row pos of layer, element index */
    ENG_SEQ_PART_STATE    = 4,  /* non-positional state of layer (recurrent, window) */
    ENG_SEQ_PART_N_TOKENS = 5,  /* equal over the common prefix, different lengths (pos = the shorter) */
} eng_seq_part;

typedef struct eng_seq_diff {
    bool         equal;  /* every compared byte equal and same n_tokens */
    eng_seq_part part;
    int32_t      layer;  /* -1 unless part is K, V or STATE */
    int32_t      pos;    /* position, -1 for STATE */
    int64_t      index;  /* element within the row or state, -1 for TOKENS and N_TOKENS */
} eng_seq_diff;

/* Fills *out. Returns ENG_OK, or ENG_ERR_MISMATCH when the two sequences'
 * models have different fingerprints (nothing compared). */
int eng_seq_compare(const eng_seq *a, const eng_seq *b, eng_seq_diff *out);

// Checkpoints: the non-truncatable part of the state (recurrent + conv state,
// sliding-window cells) at the sequence's current n_tokens, which should be a
// grid position. Restoring one = copying it back + truncating full-attention
// KV to its n_tokens. For a pure full-attention model a checkpoint holds
// nothing but n_tokens (size 0 payload): truncation alone restores it.
// Payload bytes (eng_ckpt_size), summed over layers: full attention 0;
// sliding window 2 * min(n, n_swa) * G*E * 4 (K then V rows of the window);
// Mamba-2 4 * (NH*N*P + (K-1)*(I + 2*NG*N)) (recurrent state, conv state);
// RWKV-7 4 * (2*D + H*S*S) (the two token-shift rows, the wkv state).

typedef struct eng_ckpt eng_ckpt;

eng_ckpt *eng_seq_checkpoint(const eng_seq *s);          /* NULL on OOM */
void      eng_ckpt_free(eng_ckpt *c);                     /* accepts NULL */
int32_t   eng_ckpt_n_tokens(const eng_ckpt *c);
size_t    eng_ckpt_size(const eng_ckpt *c);               /* payload bytes */
/* s must hold at least the checkpoint's n_tokens tokens with full-attention KV
 * for them (the caller checks that the token prefix matches). Returns ENG_OK,
 * ENG_ERR_MISMATCH (other model) or ENG_ERR_RANGE. */
int       eng_seq_restore(eng_seq *s, const eng_ckpt *c);

// ----------------------------------------------------------------------------
// Prefill and decode

typedef struct eng_prefill_params {
    int32_t   chunk;       /* C >= 1, default 64 */
    eng_align align;       /* default ENG_ALIGN_CHUNK */
    int32_t   ubatch;      /* chunk length for ENG_ALIGN_NONE, default 512 */
    bool      all_logits;  /* logits of every prompt token (n * V) instead of the last (V) */
    /* Called after each chunk with the state at its end (n_tokens so far);
     * policies take checkpoints here. May be NULL. */
    void    (*on_chunk)(void *ud, eng_seq *s, int32_t n_tokens);
    void     *ud;
} eng_prefill_params;

eng_prefill_params eng_prefill_params_default(void);

/* Added by the engine: the cost model with explicit chunking: FLOPs of
 * eng_prefill(n tokens after n_past, p, logits != NULL). The output head
 * counts the rows it is applied to: every row with all_logits, else the
 * rows of the last chunk (docs/engine.md). eng_model_prefill_flops is this
 * with eng_prefill_params_default(). */
double eng_model_prefill_flops_params(const eng_model *m, int32_t n_past, int32_t n,
                                      const eng_prefill_params *p);

/* Appends n >= 1 tokens at positions [n_tokens, n_tokens + n), in chunks as
 * above, and writes logits (V floats, or n * V with all_logits) unless
 * logits is NULL. Returns ENG_OK, ENG_ERR_RANGE (n_ctx exceeded) or ENG_ERR_ARG. */
int eng_prefill(eng_seq *s, const int32_t *tokens, int32_t n, const eng_prefill_params *p, float *logits);
/* One token at position n_tokens (a chunk of one, as a server's decode step). */
int eng_decode(eng_seq *s, int32_t token, float *logits);

/* Greedy argmax (lowest index wins ties). */
int32_t eng_argmax(const float *logits, int32_t n);

// ----------------------------------------------------------------------------
// Batches: one step over several sequences (continuous batching)
//
// A step computes one span of tokens of each of several sequences together:
// the weight products (QKV, output projection, FFN, the recurrent kinds'
// projections, the logits head) run ONCE over the stacked rows of every
// span, so each weight is read once per step for all of them; attention,
// sliding windows and recurrent state (Mamba-2, RWKV-7) are computed per
// sequence, each span exactly as a step of that sequence alone would
// (docs/engine.md, "Batches").
//
// A span is either one decode token or one chunk of a prefill: with align
// CHUNK its tokens lie in one cell [kC, (k+1)C) of the sequence's absolute
// grid (eng_batch_chunk_len gives the span eng_prefill would cut next), so
// a sequence prefilled through batch steps gets eng_prefill's chunks.
// Batch invariance: with kernel ref a span's logits, KV rows and recurrent
// state are memcmp-identical whatever the other spans of the step
// (tests/test_batch.c); with blas they may differ, as in real servers
// (OpenBLAS's per-row results depend on M: sgemv for one row, sgemm blocks
// for more).
//
// Threads: the model's (eng_numerics.n_threads), as for eng_prefill. A
// model runs one step at a time: eng_batch_forward, eng_prefill and
// eng_decode on the same model must not run concurrently.
//
// Usage (a prefill and a decode in one step):
//     eng_batch *b = eng_batch_new(m);
//     eng_batch_span sp[2] = {
//         {.seq = s1, .tokens = prompt + done, .n = eng_batch_chunk_len(s1, n_prompt - done, NULL)},
//         {.seq = s2, .tokens = &next, .n = 1, .logits = lg2},   // lg2: V floats
//     };
//     if (eng_batch_forward(b, sp, 2, NULL, err, sizeof err) != ENG_OK) { ... }  // no state changed
//     done += sp[0].n;                   // s1 and s2 advanced by their spans
//     eng_batch_free(b);

/* A batch: the scratch of steps over sequences of one model (the stacked
 * rows, the logits of the head), grown on demand and kept between steps.
 * It holds no sequence: any sequence of its model may join any step. */
typedef struct eng_batch eng_batch;

/* One sequence's tokens in a step. The caller owns every pointer; the step
 * reads tokens and writes logits before it returns, keeping neither. */
typedef struct eng_batch_span {
    eng_seq       *seq;        /* the sequence the tokens extend; at most one span per sequence in a step */
    const int32_t *tokens;     /* n ids in [0, V), at positions [n_tokens, n_tokens + n) of seq */
    int32_t        n;          /* >= 1: one decode token, or a prefill chunk (see eng_batch_params) */
    float         *logits;     /* NULL: not wanted; else V floats, the logits of the span's last token,
                                  or n * V (one row per token) with all_logits */
    bool           all_logits;
} eng_batch_span;

typedef struct eng_batch_params {
    int32_t   chunk;   /* C >= 1, default 64 */
    eng_align align;   /* default ENG_ALIGN_CHUNK: a span's tokens lie in one cell [kC, (k+1)C) of its
                          sequence's absolute grid; ENG_ALIGN_NONE: any n <= ubatch (llama.cpp's ubatch) */
    int32_t   ubatch;  /* >= 1, default 512 */
} eng_batch_params;

eng_batch_params eng_batch_params_default(void);

/* A batch for sequences of m (which must outlive it). NULL on OOM or m NULL. */
eng_batch *eng_batch_new(const eng_model *m);
void       eng_batch_free(eng_batch *b);  /* accepts NULL */

/* The length of the next span of a prefill of s with n_left >= 1 prompt
 * tokens still to compute: min(n_left, C - n_tokens % C) with align CHUNK
 * (the end of the grid cell), min(n_left, ubatch) with NONE: the chunks
 * eng_prefill cuts. p NULL: the defaults. 0 when n_left < 1 or p is invalid. */
int32_t eng_batch_chunk_len(const eng_seq *s, int32_t n_left, const eng_batch_params *p);

/* One step over spans[0, n), n >= 1, stacked in that order: every span's
 * tokens are appended to its sequence (n_tokens advances by span.n), and
 * the logits asked for are written. p NULL: the defaults. Returns ENG_OK;
 * ENG_ERR_ARG (NULL or empty spans, a NULL sequence or tokens, n < 1, a
 * token outside the vocabulary, a sequence of another model or twice in
 * the step, a span that leaves its grid cell or exceeds ubatch), or
 * ENG_ERR_RANGE (a sequence's n_ctx exceeded), with a message naming the
 * span's index and field in err (may be NULL); ENG_ERR_NOMEM. On any error
 * no sequence has changed and no logits are written. */
int eng_batch_forward(eng_batch *b, const eng_batch_span *spans, int32_t n, const eng_batch_params *p, char *err,
                      size_t errlen);

/* For tests and checkers only: a known batch-variance bug to plant, so
 * that a checker of batch invariance can show it catches one. */
typedef enum eng_batch_fault {
    ENG_BATCH_FAULT_NONE    = 0,
    /* In a step of more than one span, every row the head computes logits
     * for reduces over k in two halves (split-K, two chains summed), as a
     * server whose kernel choice depends on the batch size: the row's bits
     * then depend on the batch. Steps of one span are untouched. */
    ENG_BATCH_FAULT_SPLIT_K = 1,
} eng_batch_fault;

void eng_batch_set_fault(eng_batch *b, eng_batch_fault f);

#endif /* ENG_MODEL_H */
