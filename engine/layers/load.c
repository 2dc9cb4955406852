/*
 * engine/layers/load.c: the loading helpers every layer kind uses (layer.h):
 * hyperparameters and tensors from the GGUF file into the model's precision
 * and the kernel's layout, each failure naming the key or tensor.
 */
#include "internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "status.h"

int eng_ld_int(eng_loader *ld, const char *suffix, int64_t def, int64_t lo, int64_t hi, int32_t *out) {
    char key[128];
    snprintf(key, sizeof key, "%s.%s", ld->arch, suffix);
    int64_t v;
    int rc = eng_gguf_get_int(ld->g, key, &v);
    if (rc == ENG_ERR_NOT_FOUND) {
        if (def < 0) {
            eng_errf(ld->err, ld->errlen, "%s: metadata: %s: missing", ld->path, key);
            return ENG_ERR_FORMAT;
        }
        v = def;
    } else if (rc != ENG_OK) {
        eng_errf(ld->err, ld->errlen, "%s: metadata: %s: not an integer", ld->path, key);
        return ENG_ERR_FORMAT;
    }
    if (v < lo || v > hi) {
        eng_errf(ld->err, ld->errlen, "%s: metadata: %s: %lld out of range [%lld, %lld]", ld->path, key,
                 (long long)v, (long long)lo, (long long)hi);
        return ENG_ERR_FORMAT;
    }
    *out = (int32_t)v;
    return ENG_OK;
}

int eng_ld_float(eng_loader *ld, const char *suffix, double def, float *out) {
    char key[128];
    snprintf(key, sizeof key, "%s.%s", ld->arch, suffix);
    double v;
    int rc = eng_gguf_get_float(ld->g, key, &v);
    if (rc == ENG_ERR_NOT_FOUND) {
        if (def < 0) {
            eng_errf(ld->err, ld->errlen, "%s: metadata: %s: missing", ld->path, key);
            return ENG_ERR_FORMAT;
        }
        v = def;
    } else if (rc != ENG_OK || !(v > 0.0)) {
        eng_errf(ld->err, ld->errlen, "%s: metadata: %s: expected a positive float", ld->path, key);
        return ENG_ERR_FORMAT;
    }
    *out = (float)v;
    return ENG_OK;
}

int eng_ld_int_or_arr(eng_loader *ld, const char *suffix, int32_t n, int64_t lo, int64_t hi, int32_t *out) {
    char key[128];
    snprintf(key, sizeof key, "%s.%s", ld->arch, suffix);
    const int64_t i = eng_gguf_find_key(ld->g, key);
    if (i < 0) return ENG_ERR_NOT_FOUND;
    if (eng_gguf_kv_type(ld->g, i) != ENG_GGUF_TYPE_ARRAY) {
        int32_t v;
        int rc = eng_ld_int(ld, suffix, -1, lo, hi, &v);
        if (rc != ENG_OK) return rc;
        for (int32_t il = 0; il < n; il++) out[il] = v;
        return ENG_OK;
    }
    const uint32_t t = eng_gguf_arr_type(ld->g, i);
    if (t == ENG_GGUF_TYPE_STRING || t == ENG_GGUF_TYPE_ARRAY || t == ENG_GGUF_TYPE_FLOAT32 ||
        t == ENG_GGUF_TYPE_FLOAT64 || eng_gguf_arr_n(ld->g, i) != (uint64_t)n) {
        eng_errf(ld->err, ld->errlen, "%s: metadata: %s: expected an integer or an array of %d integers", ld->path,
                 key, n);
        return ENG_ERR_FORMAT;
    }
    for (int32_t il = 0; il < n; il++) {
        const double v = eng_gguf_get_arr_num(ld->g, i, (uint64_t)il);
        if (v < (double)lo || v > (double)hi) {
            eng_errf(ld->err, ld->errlen, "%s: metadata: %s[%d]: %g out of range [%lld, %lld]", ld->path, key, il, v,
                     (long long)lo, (long long)hi);
            return ENG_ERR_FORMAT;
        }
        out[il] = (int32_t)v;
    }
    return ENG_OK;
}

int eng_ld_tensor_nd(eng_loader *ld, const char *name, const int64_t ne[4], bool optional, float **out) {
    *out = NULL;
    const eng_gguf_tensor *t = eng_gguf_find_tensor(ld->g, name);
    if (!t) {
        if (optional) return ENG_ERR_NOT_FOUND;
        eng_errf(ld->err, ld->errlen, "%s: tensor %s: missing", ld->path, name);
        return ENG_ERR_FORMAT;
    }
    if (t->ne[0] != ne[0] || t->ne[1] != ne[1] || t->ne[2] != ne[2] || t->ne[3] != ne[3]) {
        if (ne[2] == 1 && ne[3] == 1)
            eng_errf(ld->err, ld->errlen, "%s: tensor %s: shape [%lld, %lld, %lld, %lld], expected [%lld, %lld]",
                     ld->path, name, (long long)t->ne[0], (long long)t->ne[1], (long long)t->ne[2],
                     (long long)t->ne[3], (long long)ne[0], (long long)ne[1]);
        else
            eng_errf(ld->err, ld->errlen,
                     "%s: tensor %s: shape [%lld, %lld, %lld, %lld], expected [%lld, %lld, %lld, %lld]", ld->path,
                     name, (long long)t->ne[0], (long long)t->ne[1], (long long)t->ne[2], (long long)t->ne[3],
                     (long long)ne[0], (long long)ne[1], (long long)ne[2], (long long)ne[3]);
        return ENG_ERR_FORMAT;
    }
    if (t->type != ENG_GGML_TYPE_F32 && t->type != ENG_GGML_TYPE_F16 && t->type != ENG_GGML_TYPE_BF16 &&
        t->type != ENG_GGML_TYPE_Q8_0) {
        eng_errf(ld->err, ld->errlen, "%s: tensor %s: type %s not supported", ld->path, name,
                 eng_ggml_type_name(t->type));
        return ENG_ERR_UNSUPPORTED;
    }
    const int64_t n = ne[0] * ne[1] * ne[2] * ne[3];
    float *f = malloc(sizeof(float) * (size_t)n);
    if (!f) return ENG_ERR_NOMEM;
    eng_ggml_to_f32(t->type, t->data, f, n);
    *out = f;
    return ENG_OK;
}

int eng_ld_tensor(eng_loader *ld, const char *name, int64_t ne0, int64_t ne1, bool optional, float **out) {
    const int64_t ne[4] = {ne0, ne1, 1, 1};
    return eng_ld_tensor_nd(ld, name, ne, optional, out);
}

int eng_ld_plain(eng_loader *ld, const eng_model *m, const char *name, int64_t ne0, int64_t ne1, float **out) {
    int rc = eng_ld_tensor(ld, name, ne0, ne1, false, out);
    if (rc == ENG_OK && m->kctx.bf16)
        for (int64_t i = 0; i < ne0 * ne1; i++) (*out)[i] = eng_bf16_round((*out)[i]);
    return rc;
}

int eng_ld_fused_pad(eng_loader *ld, const eng_model *m, const char *const *names, const int64_t *n_outs, int n_parts,
                     int64_t n_in, int32_t pad, eng_kmat *out) {
    int64_t n_out = 0;
    for (int i = 0; i < n_parts; i++) n_out += (n_outs[i] + pad - 1) / pad * pad;
    float *w = calloc((size_t)(n_out * n_in), sizeof(float));
    if (!w) return ENG_ERR_NOMEM;
    int rc = ENG_OK;
    int64_t row = 0;
    for (int i = 0; i < n_parts && rc == ENG_OK; i++) {
        float *part;
        rc = eng_ld_tensor(ld, names[i], n_in, n_outs[i], false, &part);
        if (rc != ENG_OK) break;
        memcpy(w + row * n_in, part, sizeof(float) * (size_t)(n_outs[i] * n_in));
        free(part);
        row += (n_outs[i] + pad - 1) / pad * pad;
    }
    if (rc == ENG_OK)
        rc = eng_kmat_init_for(out, w, (int32_t)n_out, (int32_t)n_in, m->num.kernel, m->num.n_threads,
                               m->kctx.bf16);
    free(w);
    return rc;
}

int eng_ld_fused(eng_loader *ld, const eng_model *m, const char *const *names, const int64_t *n_outs, int n_parts,
                 int64_t n_in, eng_kmat *out) {
    return eng_ld_fused_pad(ld, m, names, n_outs, n_parts, n_in, 1, out);
}

int eng_ld_matrix(eng_loader *ld, const eng_model *m, const char *name, int64_t n_out, int64_t n_in, eng_kmat *out) {
    const char *names[1] = {name};
    const int64_t n_outs[1] = {n_out};
    return eng_ld_fused(ld, m, names, n_outs, 1, n_in, out);
}
