/*
 * engine/synth.h: seeded synthetic models written as GGUF files.
 *
 * A synthetic model has llama.cpp's tensor names, shapes and metadata keys,
 * random weights drawn from GSL's MT19937 (deterministic: the same params
 * give a byte-identical file on every machine), and a tokenizer: either
 * every tokenizer.* key copied from a vocabulary GGUF, or a built-in
 * 259-token SentencePiece byte vocabulary (<unk>, <s>, </s>, <0x00>..<0xFF>).
 * Architectures are registered by the layer kinds (engine/layers/); the
 * synth name (--arch) and the GGUF general.architecture it writes:
 *   llama        "llama"          full attention (llama.cpp's llama)
 *   swa          "cohere2"        layer norm, attention and FFN in parallel,
 *                                 sliding-window attention except every
 *                                 attn_every-th layer (llama.cpp's cohere2)
 *   kvreplay-swa "kvreplay-swa"   llama layers with the same window pattern
 *                                 (kvreplay's own; its files still load)
 *   recurrent    "mamba2"         Mamba-2 layers only, no FFN (llama.cpp's mamba2)
 *   hybrid       "granitehybrid"  Mamba-2 layers with a full-attention layer every
 *                                 attn_every-th, SwiGLU FFN in every layer
 *                                 (llama.cpp's granitehybrid, dense, no scaling)
 *   rwkv7        "rwkv7"          RWKV-7 layers (llama.cpp's rwkv7)
 * docs/gguf.md lists every key and tensor of each.
 *
 * Usage:
 *     eng_synth_params p = eng_synth_preset_arch("hybrid", "tiny");  // p.ok false when unknown
 *     p.seed = 42;
 *     char err[256];
 *     if (eng_synth_write(&p, "tiny.gguf", err, sizeof err) != ENG_OK) { puts(err); ... }
 */
#ifndef ENG_SYNTH_H
#define ENG_SYNTH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct eng_synth_params {
    bool        ok;             /* set by eng_synth_preset: false for an unknown preset name */
    char        arch[16];       /* synth architecture: "llama", "swa", "kvreplay-swa", "recurrent",
                                   "hybrid", "rwkv7" */
    char        preset[16];     /* recorded in kvreplay.synth.preset ("custom" when none) */
    int32_t     n_vocab;        /* V: 0 = the vocabulary's token count (259 built-in);
                                   non-zero must equal it */
    int32_t     n_embd;         /* D */
    int32_t     n_layer;        /* L */
    int32_t     n_head;         /* H; head dim E = D / H (attention archs) */
    int32_t     n_head_kv;      /* G; H must be a multiple of G (attention archs) */
    int32_t     n_ff;           /* F (not recurrent: mamba2 has no FFN) */
    int32_t     n_ctx;          /* llama.context_length */
    int32_t     n_rot;          /* rope dims, even, <= E; 0 = E */
    float       rope_freq_base; /* default 10000 */
    float       rms_eps;        /* default 1e-5 */
    int32_t     n_swa;          /* swa: window W >= 1 (a query at p sees keys (p - W, p]) */
    int32_t     attn_every;     /* swa, hybrid: layer il is full attention iff
                                   il % attn_every == attn_every - 1; 0 = none */
    int32_t     ssm_d_state;    /* recurrent, hybrid: N */
    int32_t     ssm_head_dim;   /* P; heads NH = d_inner / P, d_inner = 2D (llama.cpp's
                                   expansion factor, the only one it supports) */
    int32_t     ssm_n_group;    /* NG, divides NH */
    int32_t     ssm_d_conv;     /* K, the conv kernel */
    int32_t     wkv_head_size;  /* rwkv7: head size S (heads D / S) */
    int32_t     lora_decay;     /* rwkv7: LoRA ranks of the decay, the in-context learning rate, */
    int32_t     lora_iclr;      /*   the value residual mix and the gate */
    int32_t     lora_mix;
    int32_t     lora_gate;
    uint32_t    type;           /* enum eng_ggml_type of the matrices: F32 (default), F16,
                                   BF16, Q8_0 (a matrix whose ne[0] is not a multiple of 32
                                   falls back to F16, as llama.cpp's quantizer does);
                                   norms are always F32 */
    uint64_t    seed;           /* every weight derives from it */
    const char *vocab_path;     /* vocabulary GGUF, or NULL for the built-in byte vocabulary */
    const char *name;           /* general.name; NULL = "kvreplay-synth-PRESET" */
} eng_synth_params;

/* Defaults for a named preset of the llama architecture: "tiny" (D 64, L 2,
 * H 4, G 2, F 176, ctx 4096), "small" (256, 4, 8, 4, 704, 16384), "base"
 * (1024, 12, 16, 8, 2816, 8192) or "narrow" (64, 2, 2, 1, 176, 262144: the
 * full-scale experiments' long contexts); F32, rope base 10000, eps 1e-5, seed 0,
 * built-in vocabulary. An unknown (or NULL) name returns the tiny defaults
 * with ok = false. Same as eng_synth_preset_arch("llama", name). */
eng_synth_params eng_synth_preset(const char *name);

/* Defaults for a preset of any architecture (the tables in docs/gguf.md).
 * An unknown arch or preset (or NULL) returns llama's tiny defaults with
 * ok = false. */
eng_synth_params eng_synth_preset_arch(const char *arch, const char *name);

/* The GGUF general.architecture written for a synth architecture name, or
 * NULL when unknown ("hybrid" -> "granitehybrid"). */
const char *eng_synth_gguf_arch(const char *arch);

/* Names of the presets, NULL-terminated. */
extern const char *const eng_synth_preset_names[];
/* The i-th synth architecture name (registered by the layer kinds), NULL past the last. */
const char *eng_synth_arch_name(int32_t i);

/* Parameter groups of eng_synth_params an architecture uses; eng_synth_to_buffer
 * zeroes the others (and `model synth` refuses their flags). */
enum eng_synth_group {
    ENG_SYNTH_HEADS = 1 << 0,  /* n_head, n_head_kv, n_rot */
    ENG_SYNTH_FF    = 1 << 1,  /* n_ff */
    ENG_SYNTH_SWA   = 1 << 2,  /* n_swa */
    ENG_SYNTH_EVERY = 1 << 3,  /* attn_every */
    ENG_SYNTH_SSM   = 1 << 4,  /* ssm_* */
    ENG_SYNTH_WKV   = 1 << 5,  /* wkv_head_size, lora_* */
};
/* The groups of synth architecture arch (a mask of eng_synth_group), 0 when unknown. */
unsigned eng_synth_arch_groups(const char *arch);

/* Builds the model into a malloc'd buffer (caller frees *buf). Returns ENG_OK,
 * ENG_ERR_ARG (bad params: err names the field), ENG_ERR_UNSUPPORTED (arch),
 * ENG_ERR_IO / ENG_ERR_FORMAT / ENG_ERR_NOT_FOUND (the vocabulary file) or
 * ENG_ERR_NOMEM. *buf is NULL on failure. */
int eng_synth_to_buffer(const eng_synth_params *p, void **buf, size_t *n, char *err, size_t errlen);

/* Same, written atomically to path. */
int eng_synth_write(const eng_synth_params *p, const char *path, char *err, size_t errlen);

#endif /* ENG_SYNTH_H */
