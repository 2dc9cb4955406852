/*
 * engine/gguf_write.c: the GGUF writer (contract: gguf.h). It collects KV
 * pairs (stored pre-serialised, so copying a KV from a reader is a byte
 * copy that also covers nested arrays) and tensor descriptors (data
 * borrowed, not copied), then lays the file out as llama.cpp's gguf writer
 * does: header, KV pairs, tensor infos (offsets relative to the data
 * section, each tensor padded to the alignment), zero padding to the
 * alignment, tensor data each zero-padded. Little-endian host assumed.
 */
#include "gguf.h"
#include "status.h"
#include "util.h"

#include <stdlib.h>
#include <string.h>

typedef struct wkv {
    char    *key;
    uint32_t type;
    eng_buf  val;      /* serialised value bytes, exactly as they follow the type field */
} wkv;

typedef struct wtensor {
    char       *name;
    uint32_t    type;
    uint32_t    n_dims;
    int64_t     ne[ENG_GGUF_MAX_DIMS];
    const void *data;  /* borrowed */
    size_t      nbytes;
} wtensor;

struct eng_gguf_writer {
    uint32_t version;
    size_t   alignment;
    wkv     *kv;
    size_t   n_kv, cap_kv;
    wtensor *t;
    size_t   n_t, cap_t;
};

static bool pow2(uint64_t a) { return a != 0 && (a & (a - 1)) == 0; }

eng_gguf_writer *eng_gguf_writer_new(uint32_t version, size_t alignment) {
    if (alignment == 0) alignment = ENG_GGUF_DEFAULT_ALIGNMENT;
    ENG_ASSERT(version == 2 || version == 3);
    ENG_ASSERT(pow2(alignment) && alignment <= UINT32_MAX);
    eng_gguf_writer *w = calloc(1, sizeof *w);
    if (!w) return NULL;
    w->version = version;
    w->alignment = alignment;
    if (alignment != ENG_GGUF_DEFAULT_ALIGNMENT &&
        eng_gguf_writer_set_u32(w, "general.alignment", (uint32_t)alignment) != ENG_OK) {
        eng_gguf_writer_free(w);
        return NULL;
    }
    return w;
}

void eng_gguf_writer_free(eng_gguf_writer *w) {
    if (!w) return;
    for (size_t i = 0; i < w->n_kv; i++) {
        free(w->kv[i].key);
        eng_buf_free(&w->kv[i].val);
    }
    for (size_t i = 0; i < w->n_t; i++) free(w->t[i].name);
    free(w->kv);
    free(w->t);
    free(w);
}

/* Sets key to a pre-serialised value (bytes after the type field), replacing
 * an existing key in place. general.alignment must be a power-of-two uint32
 * and updates the writer's alignment. */
static int w_set_raw(eng_gguf_writer *w, const char *key, uint32_t type, const void *val, size_t n) {
    if (!w || !key || type >= ENG_GGUF_TYPE_COUNT) return ENG_ERR_ARG;
    if (strcmp(key, "general.alignment") == 0) {
        if (type != ENG_GGUF_TYPE_UINT32 || n != 4) return ENG_ERR_TYPE;
        uint32_t a;
        memcpy(&a, val, 4);
        if (!pow2(a)) return ENG_ERR_ARG;
        w->alignment = a;
    }
    eng_buf nb = {0};
    if (eng_buf_append(&nb, val, n) != ENG_OK) return ENG_ERR_NOMEM;
    for (size_t i = 0; i < w->n_kv; i++) {
        if (strcmp(w->kv[i].key, key) == 0) {
            eng_buf_free(&w->kv[i].val);
            w->kv[i].val = nb;
            w->kv[i].type = type;
            return ENG_OK;
        }
    }
    if (w->n_kv == w->cap_kv) {
        size_t cap = w->cap_kv ? 2 * w->cap_kv : 32;
        wkv *kv = realloc(w->kv, cap * sizeof *kv);
        if (!kv) { eng_buf_free(&nb); return ENG_ERR_NOMEM; }
        w->kv = kv;
        w->cap_kv = cap;
    }
    char *k = strdup(key);
    if (!k) { eng_buf_free(&nb); return ENG_ERR_NOMEM; }
    w->kv[w->n_kv++] = (wkv){.key = k, .type = type, .val = nb};
    return ENG_OK;
}

int eng_gguf_writer_set_scalar(eng_gguf_writer *w, const char *key, uint32_t type, const void *val) {
    if (!val) return ENG_ERR_ARG;
    if (type == ENG_GGUF_TYPE_STRING) {
        const char *s = *(const char *const *)val;
        if (!s) return ENG_ERR_ARG;
        uint64_t len = strlen(s);
        eng_buf b = {0};
        int rc = eng_buf_append(&b, &len, 8);
        if (!rc) rc = eng_buf_append(&b, s, (size_t)len);
        if (!rc) rc = w_set_raw(w, key, type, b.data ? b.data : "", b.len);
        eng_buf_free(&b);
        return rc;
    }
    size_t es = eng_gguf_type_size(type);
    if (es == 0) return ENG_ERR_ARG;
    return w_set_raw(w, key, type, val, es);
}

int eng_gguf_writer_set_u32(eng_gguf_writer *w, const char *key, uint32_t v) {
    return eng_gguf_writer_set_scalar(w, key, ENG_GGUF_TYPE_UINT32, &v);
}
int eng_gguf_writer_set_i32(eng_gguf_writer *w, const char *key, int32_t v) {
    return eng_gguf_writer_set_scalar(w, key, ENG_GGUF_TYPE_INT32, &v);
}
int eng_gguf_writer_set_u64(eng_gguf_writer *w, const char *key, uint64_t v) {
    return eng_gguf_writer_set_scalar(w, key, ENG_GGUF_TYPE_UINT64, &v);
}
int eng_gguf_writer_set_f32(eng_gguf_writer *w, const char *key, float v) {
    return eng_gguf_writer_set_scalar(w, key, ENG_GGUF_TYPE_FLOAT32, &v);
}
int eng_gguf_writer_set_bool(eng_gguf_writer *w, const char *key, bool v) {
    uint8_t b = v ? 1 : 0;
    return eng_gguf_writer_set_scalar(w, key, ENG_GGUF_TYPE_BOOL, &b);
}
int eng_gguf_writer_set_str(eng_gguf_writer *w, const char *key, const char *s) {
    return eng_gguf_writer_set_scalar(w, key, ENG_GGUF_TYPE_STRING, &s);
}

int eng_gguf_writer_set_arr(eng_gguf_writer *w, const char *key, uint32_t elem_type,
                            uint64_t n, const void *data) {
    size_t es = eng_gguf_type_size(elem_type);
    size_t bytes;
    if (es == 0 || (n > 0 && !data) || __builtin_mul_overflow((size_t)n, es, &bytes))
        return ENG_ERR_ARG;
    eng_buf b = {0};
    int rc = eng_buf_append(&b, &elem_type, 4);
    if (!rc) rc = eng_buf_append(&b, &n, 8);
    if (!rc && bytes) rc = eng_buf_append(&b, data, bytes);
    if (!rc) rc = w_set_raw(w, key, ENG_GGUF_TYPE_ARRAY, b.data, b.len);
    eng_buf_free(&b);
    return rc;
}

int eng_gguf_writer_set_arr_str(eng_gguf_writer *w, const char *key, uint64_t n,
                                const char *const *strs, const size_t *lens) {
    if (n > 0 && !strs) return ENG_ERR_ARG;
    uint32_t et = ENG_GGUF_TYPE_STRING;
    eng_buf b = {0};
    int rc = eng_buf_append(&b, &et, 4);
    if (!rc) rc = eng_buf_append(&b, &n, 8);
    for (uint64_t j = 0; !rc && j < n; j++) {
        if (!strs[j]) { rc = ENG_ERR_ARG; break; }
        uint64_t len = lens ? lens[j] : strlen(strs[j]);
        rc = eng_buf_append(&b, &len, 8);
        if (!rc && len) rc = eng_buf_append(&b, strs[j], (size_t)len);
    }
    if (!rc) rc = w_set_raw(w, key, ENG_GGUF_TYPE_ARRAY, b.data, b.len);
    eng_buf_free(&b);
    return rc;
}

int eng_gguf_writer_copy_kv(eng_gguf_writer *w, const eng_gguf *g, const char *prefix) {
    if (!w || !g) return ENG_ERR_ARG;
    size_t pl = prefix ? strlen(prefix) : 0;
    for (int64_t i = 0; i < eng_gguf_n_kv(g); i++) {
        const char *key = eng_gguf_key(g, i);
        if (pl && strncmp(key, prefix, pl) != 0) continue;
        size_t n;
        const void *val = eng_gguf_kv_value(g, i, &n);
        int rc = w_set_raw(w, key, eng_gguf_kv_type(g, i), val, n);
        if (rc) return rc;
    }
    return ENG_OK;
}

int eng_gguf_writer_add_tensor(eng_gguf_writer *w, const char *name, uint32_t type,
                               uint32_t n_dims, const int64_t *ne, const void *data, size_t nbytes) {
    if (!w || !name || !ne || !eng_ggml_type_known(type) || n_dims < 1 ||
        n_dims > ENG_GGUF_MAX_DIMS || (nbytes > 0 && !data))
        return ENG_ERR_ARG;
    size_t want = eng_ggml_row_size(type, ne[0]);
    if (want == 0) return ENG_ERR_ARG;
    for (uint32_t d = 0; d < n_dims; d++)
        if (ne[d] < 1) return ENG_ERR_ARG;
    for (uint32_t d = 1; d < n_dims; d++)
        if (__builtin_mul_overflow(want, (uint64_t)ne[d], &want)) return ENG_ERR_ARG;
    if (want != nbytes) return ENG_ERR_ARG;
    for (size_t i = 0; i < w->n_t; i++)
        if (strcmp(w->t[i].name, name) == 0) return ENG_ERR_ARG;
    if (w->n_t == w->cap_t) {
        size_t cap = w->cap_t ? 2 * w->cap_t : 64;
        wtensor *t = realloc(w->t, cap * sizeof *t);
        if (!t) return ENG_ERR_NOMEM;
        w->t = t;
        w->cap_t = cap;
    }
    wtensor *t = &w->t[w->n_t];
    *t = (wtensor){.type = type, .n_dims = n_dims, .data = data, .nbytes = nbytes};
    for (int d = 0; d < ENG_GGUF_MAX_DIMS; d++) t->ne[d] = d < (int)n_dims ? ne[d] : 1;
    if (!(t->name = strdup(name))) return ENG_ERR_NOMEM;
    w->n_t++;
    return ENG_OK;
}

static size_t align_up(size_t x, size_t a) { return (x + a - 1) & ~(a - 1); }

static void put(uint8_t *buf, size_t *pos, const void *src, size_t n) {
    if (n) memcpy(buf + *pos, src, n);
    *pos += n;
}

int eng_gguf_writer_to_buffer(const eng_gguf_writer *w, void **out, size_t *n_out) {
    if (!w || !out || !n_out) return ENG_ERR_ARG;
    *out = NULL;
    *n_out = 0;
    size_t a = w->alignment;
    size_t meta = 4 + 4 + 8 + 8;
    for (size_t i = 0; i < w->n_kv; i++) meta += 8 + strlen(w->kv[i].key) + 4 + w->kv[i].val.len;
    for (size_t i = 0; i < w->n_t; i++) meta += 8 + strlen(w->t[i].name) + 4 + 8 * w->t[i].n_dims + 4 + 8;
    size_t data_off = align_up(meta, a), total = data_off;
    for (size_t i = 0; i < w->n_t; i++) {
        size_t padded = align_up(w->t[i].nbytes, a);
        if (padded < w->t[i].nbytes || __builtin_add_overflow(total, padded, &total))
            return ENG_ERR_NOMEM;
    }
    uint8_t *buf = calloc(1, total ? total : 1);
    if (!buf) return ENG_ERR_NOMEM;
    size_t pos = 0;
    uint64_t n_t = w->n_t, n_kv = w->n_kv;
    put(buf, &pos, ENG_GGUF_MAGIC, 4);
    put(buf, &pos, &w->version, 4);
    put(buf, &pos, &n_t, 8);
    put(buf, &pos, &n_kv, 8);
    for (size_t i = 0; i < w->n_kv; i++) {
        uint64_t kl = strlen(w->kv[i].key);
        put(buf, &pos, &kl, 8);
        put(buf, &pos, w->kv[i].key, (size_t)kl);
        put(buf, &pos, &w->kv[i].type, 4);
        put(buf, &pos, w->kv[i].val.data, w->kv[i].val.len);
    }
    uint64_t off = 0;
    for (size_t i = 0; i < w->n_t; i++) {
        const wtensor *t = &w->t[i];
        uint64_t nl = strlen(t->name);
        put(buf, &pos, &nl, 8);
        put(buf, &pos, t->name, (size_t)nl);
        put(buf, &pos, &t->n_dims, 4);
        for (uint32_t d = 0; d < t->n_dims; d++) put(buf, &pos, &t->ne[d], 8);
        put(buf, &pos, &t->type, 4);
        put(buf, &pos, &off, 8);
        off += align_up(t->nbytes, a);
    }
    ENG_ASSERT(pos == meta);
    for (size_t i = 0; i < w->n_t; i++) {
        pos = align_up(pos, a);
        put(buf, &pos, w->t[i].data, w->t[i].nbytes);
    }
    *out = buf;
    *n_out = total;
    return ENG_OK;
}

int eng_gguf_writer_write(const eng_gguf_writer *w, const char *path, char *err, size_t errlen) {
    void *buf = NULL;
    size_t n = 0;
    int rc = eng_gguf_writer_to_buffer(w, &buf, &n);
    if (rc != ENG_OK) {
        eng_errf(err, errlen, "%s: cannot serialise GGUF: %s", path, eng_status_str(rc));
        return rc;
    }
    rc = eng_write_atomic(path, buf, n, err, errlen);
    free(buf);
    return rc;
}

