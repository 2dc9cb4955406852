/*
 * engine/synth_int.h: the synthetic-model writer as an architecture sees it
 * (internal): the build context, the tensor helpers every architecture's
 * writer uses, and the row an architecture registers (eng_synth_arch,
 * reached through its eng_arch in engine/layers/).
 *
 * Determinism (synth_tensors.c): every tensor draws from its own MT19937 seeded
 * with XXH3-64(name, seed) folded to 32 bits, so its values depend only on
 * (seed, name, shape, law). Same params -> byte-identical file.
 */
#ifndef ENG_SYNTH_INT_H
#define ENG_SYNTH_INT_H

#include <gsl/gsl_rng.h>
#include <stdbool.h>
#include <stdint.h>

#include "gguf.h"
#include "synth.h"

#define SYNTH_OUTPUT_K   2.0   /* output.weight std = K / sqrt(D): logits ~ N(0, K^2) */
#define SYNTH_NORM_NOISE 0.02

struct synth_ctx {
    eng_synth_params p;         /* resolved: n_rot and n_vocab filled in */
    eng_gguf_writer *w;
    gsl_rng         *rng;
    void           **bufs;      /* tensor data, freed after serialisation */
    size_t           n_bufs, cap_bufs;
    float           *tmp;       /* f32 staging for converted types */
    size_t           tmp_n;
    char            *err;
    size_t           errlen;
    const char      *gguf_arch; /* general.architecture: prefix of the arch's keys */
    char             key[128];  /* scratch for sy_key() */
};
typedef struct synth_ctx synth_ctx;

/* Parameter groups an architecture uses (synth.h's eng_synth_group). */
enum {
    SY_HEADS = ENG_SYNTH_HEADS,
    SY_FF    = ENG_SYNTH_FF,
    SY_SWA   = ENG_SYNTH_SWA,
    SY_EVERY = ENG_SYNTH_EVERY,
    SY_SSM   = ENG_SYNTH_SSM,
    SY_WKV   = ENG_SYNTH_WKV,
};

/* The shape of one preset of an architecture. */
typedef struct eng_synth_shape {
    int32_t D, L, H, G, F, ctx;
    int32_t W, every;           /* window, full-attention period */
    int32_t N, P, NG, K;        /* SSM state, head dim, groups, conv */
    int32_t S, rw, ra, rv, rg;  /* RWKV-7 head size, LoRA ranks (decay, iclr, value mix, gate) */
} eng_synth_shape;

typedef struct eng_synth_arch eng_synth_arch;
struct eng_synth_arch {
    const char *name;      /* --arch */
    const char *label;     /* the arch in general.name when not name (NULL: name) */
    unsigned    groups;    /* SY_* */
    bool        tied;      /* no output.weight: the head is token_embd */
    bool        ln_bias;   /* output_norm.bias, token_embd_norm.weight/.bias (layer-norm archs) */
    int (*check)(synth_ctx *c);              /* arch-specific param checks */
    int (*meta)(synth_ctx *c);               /* ARCH.* metadata keys */
    int (*layer)(synth_ctx *c, int32_t il);  /* tensors of layer il */
    eng_synth_shape presets[4];              /* tiny, small, base, narrow */
};

/* Helpers (synth_tensors.c). Each returns ENG_OK or an error with err filled. */
int  sy_fail_arg(synth_ctx *c, const char *field, const char *what);  /* ENG_ERR_ARG */
int  sy_nomem(synth_ctx *c, const char *what);                          /* ENG_ERR_NOMEM */
bool sy_in_range(int32_t v, int32_t lo, int32_t hi);
/* Metadata key "ARCH.suffix" (a buffer inside c, valid until the next call). */
const char *sy_key(synth_ctx *c, const char *suffix);
/* Seeds c->rng for tensor `name` (as every helper does). */
void sy_seed(synth_ctx *c, const char *name);
/* Tensor [ne0, ne1] (ne1 == 0: 1-D) of values mean + N(0, std); matrices
 * take the params' type (Q8_0 falls back to F16 when ne0 % 32 != 0),
 * vectors are F32. */
int  sy_add_gauss(synth_ctx *c, const char *name, int64_t ne0, int64_t ne1, double mean, double std);
int  sy_add_proj(synth_ctx *c, const char *name, int64_t fan_in, int64_t fan_out);  /* std 1/sqrt(fan_in) */
int  sy_add_norm(synth_ctx *c, const char *name, int64_t n);                        /* 1 + N(0, 0.02) */
/* F32 tensor of the given values (copied), n_dims 1..4 with shape ne. */
int  sy_add_f32(synth_ctx *c, const char *name, int n_dims, const int64_t *ne, const float *vals);
/* One N(0, std) draw from c->rng (gsl_ran_gaussian_ziggurat). */
double sy_gauss(synth_ctx *c, double std);
/* n uniform draws in (0, 1) from the tensor's own generator; *out is c's staging. */
int  sy_draw_uniform(synth_ctx *c, const char *name, size_t n, float **out);
/* Layer il is full attention: attn_every > 0 and il % attn_every == attn_every - 1. */
bool sy_layer_is_attn(const eng_synth_params *p, int32_t il);

/* The registered writer of synth architecture `name`, or NULL (synth_build.c). */
const eng_synth_arch *eng_synth_arch_find(const char *name, const char **gguf_arch);

#endif /* ENG_SYNTH_INT_H */
