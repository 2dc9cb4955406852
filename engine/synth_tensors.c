/*
 * engine/synth_tensors.c: the build context's helpers every architecture's
 * synthetic writer uses (synth_int.h): errors, keys, and tensors drawn from
 * the seed.
 *
 * Determinism: each tensor draws from its own gsl_rng_mt19937, seeded with
 * XXH3-64(name, seed) folded to 32 bits, so a tensor's values depend only on
 * (seed, name, shape, init law), never on the order tensors are generated
 * in or on which other tensors exist; gaussians come from
 * gsl_ran_gaussian_ziggurat and are converted to the tensor type with
 * eng_ggml_from_f32. Same params -> byte-identical file.
 */
#include "synth_int.h"

#include <gsl/gsl_randist.h>
#include <gsl/gsl_rng.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "status.h"

int sy_fail_arg(synth_ctx *c, const char *field, const char *what) {
    eng_errf(c->err, c->errlen, "synth: %s: %s", field, what);
    return ENG_ERR_ARG;
}

int sy_nomem(synth_ctx *c, const char *what) {
    eng_errf(c->err, c->errlen, "synth: %s: out of memory", what);
    return ENG_ERR_NOMEM;
}

bool sy_in_range(int32_t v, int32_t lo, int32_t hi) { return v >= lo && v <= hi; }

bool sy_layer_is_attn(const eng_synth_params *p, int32_t il) {
    return p->attn_every > 0 && il % p->attn_every == p->attn_every - 1;
}

const char *sy_key(synth_ctx *c, const char *suffix) {
    snprintf(c->key, sizeof c->key, "%s.%s", c->gguf_arch, suffix);
    return c->key;
}

void sy_seed(synth_ctx *c, const char *name) {
    uint64_t h = XXH3_64bits_withSeed(name, strlen(name), c->p.seed);
    gsl_rng_set(c->rng, (unsigned long)((h ^ (h >> 32)) & 0xffffffffu));
}

static int keep_buf(synth_ctx *c, void *b) {
    if (c->n_bufs == c->cap_bufs) {
        size_t cap = c->cap_bufs ? 2 * c->cap_bufs : 64;
        void **nb = realloc(c->bufs, cap * sizeof *nb);
        if (!nb) return ENG_ERR_NOMEM;
        c->bufs = nb;
        c->cap_bufs = cap;
    }
    c->bufs[c->n_bufs++] = b;
    return ENG_OK;
}

/* c->tmp with room for n floats. */
static float *staging(synth_ctx *c, size_t n) {
    if (c->tmp_n < n) {
        float *t = realloc(c->tmp, n * sizeof *t);
        if (!t) return NULL;
        c->tmp = t;
        c->tmp_n = n;
    }
    return c->tmp;
}

int sy_add_gauss(synth_ctx *c, const char *name, int64_t ne0, int64_t ne1, double mean, double std) {
    bool matrix = ne1 > 0;
    uint32_t type = matrix ? c->p.type : ENG_GGML_TYPE_F32;
    if (eng_ggml_row_size(type, ne0) == 0) type = ENG_GGML_TYPE_F16;
    int64_t ne[2] = {ne0, matrix ? ne1 : 1};
    size_t n = (size_t)ne[0] * (size_t)ne[1];
    size_t nbytes = eng_ggml_row_size(type, ne0) * (size_t)ne[1];
    void *data = malloc(nbytes ? nbytes : 1);
    if (!data || keep_buf(c, data) != ENG_OK) {
        free(data);
        return sy_nomem(c, name);
    }
    float *f = type == ENG_GGML_TYPE_F32 ? data : staging(c, n);
    if (!f) return sy_nomem(c, name);
    sy_seed(c, name);
    for (size_t i = 0; i < n; i++) f[i] = (float)(mean + gsl_ran_gaussian_ziggurat(c->rng, std));
    if (f != data) eng_ggml_from_f32(type, f, data, (int64_t)n);
    int rc = eng_gguf_writer_add_tensor(c->w, name, type, matrix ? 2 : 1, ne, data, nbytes);
    if (rc != ENG_OK) eng_errf(c->err, c->errlen, "synth: %s: cannot add tensor (%s)", name,
                               eng_status_str(rc));
    return rc;
}

int sy_add_proj(synth_ctx *c, const char *name, int64_t fan_in, int64_t fan_out) {
    return sy_add_gauss(c, name, fan_in, fan_out, 0.0, 1.0 / sqrt((double)fan_in));
}

int sy_add_norm(synth_ctx *c, const char *name, int64_t n) {
    return sy_add_gauss(c, name, n, 0, 1.0, SYNTH_NORM_NOISE);
}

int sy_add_f32(synth_ctx *c, const char *name, int n_dims, const int64_t *ne, const float *vals) {
    size_t n = 1;
    for (int d = 0; d < n_dims; d++) n *= (size_t)ne[d];
    float *data = malloc(sizeof(float) * (n ? n : 1));
    if (!data || keep_buf(c, data) != ENG_OK) {
        free(data);
        return sy_nomem(c, name);
    }
    memcpy(data, vals, sizeof(float) * n);
    int rc = eng_gguf_writer_add_tensor(c->w, name, ENG_GGML_TYPE_F32, n_dims, ne, data, sizeof(float) * n);
    if (rc != ENG_OK) eng_errf(c->err, c->errlen, "synth: %s: cannot add tensor (%s)", name, eng_status_str(rc));
    return rc;
}

double sy_gauss(synth_ctx *c, double std) { return gsl_ran_gaussian_ziggurat(c->rng, std); }

int sy_draw_uniform(synth_ctx *c, const char *name, size_t n, float **out) {
    if (!staging(c, n)) return sy_nomem(c, name);
    sy_seed(c, name);
    for (size_t i = 0; i < n; i++) c->tmp[i] = (float)gsl_rng_uniform_pos(c->rng);
    *out = c->tmp;
    return ENG_OK;
}
