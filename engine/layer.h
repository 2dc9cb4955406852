/*
 * engine/layer.h: the layer-kind interface (internal; never included
 * by the harness).
 *
 * A layer kind is one file under engine/layers/ that fills one
 * eng_layer_ops table: its hyperparameters and tensors from GGUF, its
 * forward pass over a step of stacked rows (eng_fwd: one chunk of each of
 * one or more sequences; a chunk of one token is a decode step),
 * the size and rules of its per-sequence memory (truncate, copy, compare,
 * serialise, checkpoint), its parameter count and its FLOPs. The rest of the
 * engine (model_load.c, forward.c, seq.c, synth_build.c) never names a kind: it calls
 * the table of each layer. A kind may also bring the GGUF architectures
 * built from it (eng_arch: how general.architecture maps layers to kinds,
 * plus the synthetic writer of the architecture), listed in its table.
 *
 * Adding a kind: write engine/layers/NAME.c defining
 * `const eng_layer_ops eng_kind_NAME`, and add `&eng_kind_NAME` to
 * eng_layer_kinds[] in engine/layers/registry.c. docs/engine.md walks
 * through engine/layers/rwkv7.c as the example.
 *
 * Contracts every kind keeps (the bit-exactness invariant, docs/design.md):
 *   - forward(f, il) computes layer il for every span of the step: span i
 *     is the chunk [pos0, pos0 + T) of its own sequence, rows [r0, r0 + T)
 *     of the residual stream f->w->x [f->T, D], computed from the layer's
 *     memory of that sequence at pos0; it updates both. A token's result
 *     may depend on where its chunk starts and ends (blas) but on nothing
 *     else (no thread count, no earlier chunking of the sequence);
 *   - the batch (eng_batch_forward): weight products run once over the
 *     stacked rows of every span (M = f->T), row-wise ops row by row, and
 *     everything that reads or writes a sequence's memory (attention, a
 *     window, a scan, a convolution, a token shift) per span, on that
 *     span's rows alone, exactly as for a step of that span alone. Under
 *     ref a row's bits then do not depend on the other spans (the products
 *     are batch-invariant, kernels.h); under blas they may (the shapes);
 *   - prepare() is called for every kind present, before the chunk's first
 *     layer runs: after it succeeds forward cannot fail, so a chunk that
 *     runs out of memory changes no state;
 *   - memory not written is zero; nothing reads memory it did not write.
 *
 * Dimension letters as in model.h.
 */
#ifndef ENG_LAYER_H
#define ENG_LAYER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "gguf.h"
#include "kernels.h"
#include "model.h"

typedef struct eng_ws eng_ws;
typedef struct synth_ctx synth_ctx;  /* the synthetic writer's build context (synth_int.h) */

// ----------------------------------------------------------------------------
// Loading: hyperparameters and tensors, each failure naming the file and field

typedef struct eng_loader {
    const char *path;
    eng_gguf   *g;
    char       *err;
    size_t      errlen;
    const char *arch;  /* general.architecture: the prefix of hyperparameter keys */
} eng_loader;

/* "{arch}.suffix" as an integer in [lo, hi]; def when absent (def < 0: required).
 * ENG_OK or ENG_ERR_FORMAT (message names the key). */
int eng_ld_int(eng_loader *ld, const char *suffix, int64_t def, int64_t lo, int64_t hi, int32_t *out);
/* A positive float; def when absent (def < 0: required). */
int eng_ld_float(eng_loader *ld, const char *suffix, double def, float *out);
/* "{arch}.suffix" as a per-layer array of n integers (an array, or a scalar
 * repeated), as llama.cpp's get_key_or_arr. ENG_ERR_NOT_FOUND when absent. */
int eng_ld_int_or_arr(eng_loader *ld, const char *suffix, int32_t n, int64_t lo, int64_t hi, int32_t *out);
/* Tensor `name` with ne = [ne0, ne1] (ne1 = 1 for vectors) as a malloc'd f32
 * array (caller frees). ENG_ERR_NOT_FOUND when absent and optional, else
 * ENG_ERR_FORMAT naming the tensor. */
int eng_ld_tensor(eng_loader *ld, const char *name, int64_t ne0, int64_t ne1, bool optional, float **out);
/* The same with a full shape ne[4] (dims past the file's are 1, as ggml's ne). */
int eng_ld_tensor_nd(eng_loader *ld, const char *name, const int64_t ne[4], bool optional, float **out);
/* The same, rounded to the model's compute precision (norms, vectors, embeddings). */
int eng_ld_plain(eng_loader *ld, const eng_model *m, const char *name, int64_t ne0, int64_t ne1, float **out);
/* The named [K, N_i] tensors stacked into one [sum N_i, K] matrix in the kernel's layout. */
int eng_ld_fused(eng_loader *ld, const eng_model *m, const char *const *names, const int64_t *n_outs, int n_parts,
                 int64_t n_in, eng_kmat *out);
/* The same with each part's rows padded with zero rows to a multiple of pad
 * (part i starts at output column sum of the padded N_j, j < i). */
int eng_ld_fused_pad(eng_loader *ld, const eng_model *m, const char *const *names, const int64_t *n_outs, int n_parts,
                     int64_t n_in, int32_t pad, eng_kmat *out);
/* One matrix W [n_out, n_in] (GGUF ne = [n_in, n_out]) in the kernel's layout. */
int eng_ld_matrix(eng_loader *ld, const eng_model *m, const char *name, int64_t n_out, int64_t n_in, eng_kmat *out);

// ----------------------------------------------------------------------------
// The forward pass of one chunk, as a kind sees it

/* Core scratch of a step (forward.c): a sequence's own (eng_prefill,
 * eng_decode) or a batch's (eng_batch), zeroed when (re)allocated. T: the
 * step's rows. */
struct eng_ws {
    int32_t cap_T;
    int32_t cap_logits;  /* rows of logits */
    float  *x;       /* [T, D] residual stream */
    float  *xn;      /* [T, D] normed input of a sublayer */
    float  *proj;    /* [T, D] sublayer output before the residual add */
    float  *gu;      /* [T, 2F] FFN gate and up projections (F = info.n_ff > 0) */
    float  *hid;     /* [T, F] FFN activations */
    float  *xn_thr;  /* [n_threads][T, D]: each thread's normed rows in a fused product (eng_kfuse.ws) */
    float  *logits;  /* [cap_logits, V] output head of the rows whose logits a step needs */
    void   *kind[16];  /* each kind's own scratch, indexed like eng_layer_kinds[] */
};

/* One sequence's chunk in a step: its tokens at positions [pos0, pos0 + T)
 * are the rows [r0, r0 + T) of the step's stacked rows. */
typedef struct eng_fspan {
    eng_seq *s;     /* the sequence (s->mem[il].state: the layer's memory) */
    int32_t  r0;    /* its first row in the stack */
    int32_t  T;     /* its rows, >= 1 */
    int32_t  pos0;  /* its first position (== the sequence's n_tokens) */
} eng_fspan;

/* One step: the spans of one or more sequences, stacked. A single
 * sequence's chunk (eng_prefill, eng_decode) is a step of one span. */
typedef struct eng_fwd {
    const eng_model *m;
    const eng_kctx  *k;
    int32_t          T;       /* rows of the step: every span's, stacked */
    int32_t          n_span;  /* >= 1 */
    const eng_fspan *span;    /* [n_span], span i's rows follow span i-1's (span[0].r0 == 0) */
    eng_ws          *w;       /* core scratch over the T rows: x, xn, proj, gu, hid */
} eng_fwd;

/* Positions a span reads keys of: pos0 + T (its last position + 1). The
 * largest over the step's spans, and their largest T and n_ctx. */
int32_t eng_fwd_max_P(const eng_fwd *f);
int32_t eng_fwd_max_T(const eng_fwd *f);
int32_t eng_fwd_max_ctx(const eng_fwd *f);

// ----------------------------------------------------------------------------
// Architectures

/* A GGUF architecture: general.architecture, how its hyperparameters pick
 * each layer's kind and flags, and its synthetic writer. */
typedef struct eng_synth_arch eng_synth_arch;
typedef struct eng_arch {
    const char *name;  /* general.architecture */
    /* Reads the architecture's hyperparameters (block_count,
     * embedding_length and context_length are read already) into m->info
     * and m's model-level fields, and sets every m->layers[il]'s ops and
     * flags. ENG_OK or an error with a message naming the key. */
    int (*hparams)(eng_loader *ld, eng_model *m);
    const eng_synth_arch *synth;  /* NULL when `model synth` cannot write it */
} eng_arch;

// ----------------------------------------------------------------------------
// The table of a layer kind

typedef struct eng_layer_ops {
    const char    *name;  /* "attn", "swa", "mamba2", "rwkv7" */
    eng_layer_kind kind;  /* memory class reported by eng_model_layer_kind and in state blobs */
    const eng_arch *const *archs;  /* architectures this kind defines (NULL-terminated), or NULL */

    /* Weights of layer il (hyperparameters read as needed, m->info completed:
     * the kind's byte counts and shape fields). *w is the kind's struct. */
    int     (*load)(eng_loader *ld, eng_model *m, int32_t il, void **w);
    void    (*free)(void *w);  /* accepts NULL */
    int64_t (*n_params)(const eng_model *m, int32_t il);
    /* FLOPs of one token through layer il that do not depend on its position
     * (weight products, per-token scans), and those of the queries at
     * positions [p0, p1) that do (attention; NULL: none). 2 per multiply-add. */
    double  (*token_flops)(const eng_model *m, int32_t il);
    double  (*pos_flops)(const eng_model *m, int32_t il, int64_t p0, int64_t p1);

    /* Scratch (and per-step tables) for the step f (its spans: rows,
     * positions, sequences), shared by every layer of the kind (il: the
     * first one; *ws NULL the first time). Called before the step's first
     * layer; ENG_OK or ENG_ERR_NOMEM. */
    int     (*prepare)(const eng_model *m, int32_t il, void **ws, const eng_fwd *f);
    void    (*ws_free)(void *ws);  /* accepts NULL */
    /* Layer il over the step: x [f->T, D] (f->w->x) updated in place, each
     * span's sequence's memory advanced from its pos0 to pos0 + T. Cannot
     * fail. A span of one token is a decode step: a kind whose chunk
     * kernel differs from its step kernel (the blas scans of Mamba-2 and
     * RWKV-7) switches on the span's T == 1 here. */
    void    (*forward)(eng_fwd *f, int32_t il, void *ws);

    /* Per-sequence memory of layer il: zeroed, for n_ctx positions, swa_slack
     * cells kept beyond a window. ENG_OK or ENG_ERR_NOMEM (nothing allocated). */
    int     (*mem_new)(const eng_model *m, int32_t il, int32_t n_ctx, int32_t swa_slack, void **mem);
    void    (*mem_free)(void *mem);  /* accepts NULL */
    /* Back to the empty state (n_used: positions ever written). */
    void    (*mem_clear)(const eng_model *m, int32_t il, void *mem, int32_t n_used);
    /* Whether the memory at n_tokens can give the state at n (0 < n < n_tokens). */
    bool    (*can_truncate)(const eng_model *m, int32_t il, const void *mem, int32_t n_tokens, int32_t n);
    /* Records a truncation from n_tokens to n (can_truncate was true). NULL: nothing to do. */
    void    (*truncate)(const eng_model *m, int32_t il, void *mem, int32_t n_tokens, int32_t n);
    /* dst takes src's memory of a sequence at n_tokens. */
    void    (*copy)(const eng_model *m, int32_t il, void *dst, const void *src, int32_t n_tokens);
    /* Compares the memories of sequences at n_a and n_b tokens over the
     * positions [0, n), n = min(n_a, n_b), in the kind's order. Returns true
     * and fills out->part, pos and index at the first difference. */
    bool    (*compare)(const eng_model *m, int32_t il, const void *a, const void *b, int32_t n_a, int32_t n_b,
                       eng_seq_diff *out);
    /* Serialised memory of a sequence at n tokens (eng_seq_serialize). */
    size_t  (*ser_bytes)(const eng_model *m, int32_t il, const void *mem, int32_t n);
    void    (*ser_save)(const eng_model *m, int32_t il, const void *mem, int32_t n, void *dst);
    void    (*ser_load)(const eng_model *m, int32_t il, void *mem, int32_t n, const void *src);
    /* Checkpoint section: the part of the memory truncation cannot give
     * back (0 bytes for full attention). ckpt_load gets src NULL when the
     * section is empty. */
    size_t  (*ckpt_bytes)(const eng_model *m, int32_t il, const void *mem, int32_t n);
    void    (*ckpt_save)(const eng_model *m, int32_t il, const void *mem, int32_t n, void *dst);
    void    (*ckpt_load)(const eng_model *m, int32_t il, void *mem, int32_t n, const void *src);
} eng_layer_ops;

/* The registry (registry.c): every kind, NULL-terminated, at most 16 (eng_ws.kind). */
extern const eng_layer_ops *const eng_layer_kinds[];
/* Index of a kind in eng_layer_kinds[] (asserts it is registered). */
int32_t eng_layer_kind_index(const eng_layer_ops *ops);
/* The architecture named `name` among the registered kinds', or NULL. */
const eng_arch *eng_arch_find(const char *name);

// ----------------------------------------------------------------------------
// Pieces shared by kinds (common.c)

/* The architecture's norm of T rows: RMSNorm (x * (1/sqrtf(mean(x^2) + eps))) * w
 * or layer norm ((x - mean) * (1/sqrtf(var + eps))) * w + b, by m->norm. */
void eng_norm_rows(const eng_model *m, int32_t T, const float *X, int32_t ldx, const float *w, const float *b,
                   float *Y, int32_t ldy);
/* The same norm as the prologue of a fused product (eng_kfuse): each
 * thread norms the rows into its slice of f->w->xn_thr. */
void eng_norm_fuse(const eng_fwd *f, eng_kfuse *fu, const float *w, const float *b);

/* The SwiGLU feed-forward half of a layer (llama.cpp's build_ffn, SILU, PAR). */
typedef struct eng_ffn_weights {
    float   *ffn_norm;   /* [D], NULL when the layer's FFN reads the attention norm (cohere2) */
    eng_kmat w_gate_up;  /* gate rows [0, F), up rows [up_off, up_off + F) (fused; ref: up_off is F
                            rounded up to a panel, the rows between zero) */
    eng_kmat w_down;     /* [D, F] */
    int32_t  n_ff, up_off;
} eng_ffn_weights;

/* blk.il.ffn_gate/up/down (and ffn_norm when with_norm). */
int     eng_ffn_load(eng_loader *ld, const eng_model *m, int32_t il, bool with_norm, eng_ffn_weights *fw);
void    eng_ffn_free(eng_ffn_weights *fw);
int64_t eng_ffn_params(const eng_ffn_weights *fw);
double  eng_ffn_flops(const eng_model *m);  /* 2*3*D*F per token */
/* out [T, D] = Wdown . (silu(Wgate . n) * (Wup . n)) with n = xin, or
 * norm(xin) with ffn_norm when norm; then in the down product's epilogue
 * x = round(x + out) and, when add2, x = round(x + add2) (cohere2's
 * x + ffn(n) + attn(n)). Two parallel regions: gate and up with the norm
 * before and SwiGLU after, down with the residual adds after (via
 * f->w->gu, hid, xn_thr). */
void    eng_ffn_residual_from(eng_fwd *f, const eng_ffn_weights *fw, const float *xin, bool norm, float *out,
                              const float *add2);
/* x += ffn(norm(x)), the sequential FFN half (out: proj). */
void    eng_ffn_residual(eng_fwd *f, const eng_ffn_weights *fw);

/* Grows *buf to n floats, zeroed when reallocated (contents lost). */
int eng_grow(float **buf, int64_t *cap, int64_t n);

/* First differing float (by bytes) of two arrays of n floats, or -1. */
int64_t eng_first_diff(const float *a, const float *b, int64_t n);

/* A compare op's finding: fills out (part, pos, index) and returns true. */
static inline bool eng_diff_found(eng_seq_diff *out, eng_seq_part part, int32_t pos, int64_t index) {
    out->part = part;
    out->pos = pos;
    out->index = index;
    return true;
}

#endif /* ENG_LAYER_H */
