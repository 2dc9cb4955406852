/*
 * engine/gguf.c: GGUF v2/v3 reader (mmap, validated at open), and the ggml
 * element types and their conversions.
 *
 * Reader invariants, established once by eng_gguf_open and relied on by every
 * accessor afterwards:
 *   - every KV value and tensor info lies inside the buffer; counts were
 *     checked against the bytes left before anything was allocated, and all
 *     size arithmetic is overflow-checked;
 *   - keys and tensor names are unique and contain no NUL byte;
 *   - every tensor has a supported type, 1..4 dims with ne >= 1, an offset
 *     that is a multiple of the alignment, and [data, data + nbytes) inside
 *     the buffer;
 *   - string arrays carry an index (offset of each element's length field),
 *     so element j is found in O(1) (tokenizers read 32k-150k strings).
 * Scalars in the file may be unaligned: they are always read with memcpy.
 * Tensor data is aligned relative to the start of the file, so in memory
 * for a mapping (page-aligned) and for eng_gguf_open_buffer only when the
 * caller's buffer is aligned to general.alignment.
 * Lookups by key and by tensor name are binary searches over sorted indices.
 * The format is little-endian; this file assumes a little-endian host.
 * The writer is gguf_write.c.
 */
#include "gguf.h"
#include "status.h"
#include "util.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define GG_MAX_NEST 16           /* arrays of arrays deeper than this are rejected */
#define GG_QK8_0 32

// ----------------------------------------------------------------------------
// Type tables

static const char *const gguf_type_names[ENG_GGUF_TYPE_COUNT] = {
    "uint8", "int8", "uint16", "int16", "uint32", "int32", "float32",
    "bool", "string", "array", "uint64", "int64", "float64",
};

size_t eng_gguf_type_size(uint32_t t) {
    switch (t) {
    case ENG_GGUF_TYPE_UINT8: case ENG_GGUF_TYPE_INT8: case ENG_GGUF_TYPE_BOOL: return 1;
    case ENG_GGUF_TYPE_UINT16: case ENG_GGUF_TYPE_INT16: return 2;
    case ENG_GGUF_TYPE_UINT32: case ENG_GGUF_TYPE_INT32: case ENG_GGUF_TYPE_FLOAT32: return 4;
    case ENG_GGUF_TYPE_UINT64: case ENG_GGUF_TYPE_INT64: case ENG_GGUF_TYPE_FLOAT64: return 8;
    default: return 0;
    }
}

const char *eng_gguf_type_name(uint32_t type) {
    return type < ENG_GGUF_TYPE_COUNT ? gguf_type_names[type] : "?";
}

const char *eng_ggml_type_name(uint32_t type) {
    switch (type) {
    case ENG_GGML_TYPE_F32:  return "f32";
    case ENG_GGML_TYPE_F16:  return "f16";
    case ENG_GGML_TYPE_Q8_0: return "q8_0";
    case ENG_GGML_TYPE_BF16: return "bf16";
    default:                 return "?";
    }
}

bool eng_ggml_type_known(uint32_t type) {
    return type == ENG_GGML_TYPE_F32 || type == ENG_GGML_TYPE_F16 ||
           type == ENG_GGML_TYPE_Q8_0 || type == ENG_GGML_TYPE_BF16;
}

/* Elements per block and bytes per block. */
static void ggml_block(uint32_t type, int64_t *blk, size_t *bytes) {
    switch (type) {
    case ENG_GGML_TYPE_F32:  *blk = 1;        *bytes = 4; break;
    case ENG_GGML_TYPE_F16:  *blk = 1;        *bytes = 2; break;
    case ENG_GGML_TYPE_BF16: *blk = 1;        *bytes = 2; break;
    case ENG_GGML_TYPE_Q8_0: *blk = GG_QK8_0; *bytes = 2 + GG_QK8_0; break;
    default:                 *blk = 0;        *bytes = 0; break;
    }
}

size_t eng_ggml_row_size(uint32_t type, int64_t ne0) {
    int64_t blk;
    size_t bb;
    ggml_block(type, &blk, &bb);
    if (blk == 0 || ne0 < 0 || ne0 % blk != 0) return 0;
    size_t r;
    if (__builtin_mul_overflow((uint64_t)(ne0 / blk), (uint64_t)bb, &r)) return 0;
    return r;
}

// ----------------------------------------------------------------------------
// Conversions: fp16, bf16, Q8_0

static uint32_t f32_bits(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }
static float bits_f32(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }

float eng_fp16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000) << 16;
    uint32_t exp = (h >> 10) & 0x1f;
    uint32_t man = h & 0x3ff;
    if (exp == 0x1f)                       /* inf or NaN: keep the payload */
        return bits_f32(sign | 0x7f800000u | (man << 13));
    if (exp == 0) {
        if (man == 0) return bits_f32(sign);
        /* subnormal: man * 2^-24, exact in f32 */
        float v = (float)man * 0x1p-24f;
        return sign ? -v : v;
    }
    return bits_f32(sign | ((exp + 112) << 23) | (man << 13));
}

uint16_t eng_f32_to_fp16(float f) {
    uint32_t u = f32_bits(f);
    uint16_t sign = (uint16_t)((u >> 16) & 0x8000);
    uint32_t exp = (u >> 23) & 0xff;
    uint32_t man = u & 0x7fffff;
    if (exp == 0xff) {
        if (man == 0) return sign | 0x7c00;               /* inf */
        uint32_t m = man >> 13;
        if (m == 0) m = 0x200;                            /* keep it a NaN */
        return (uint16_t)(sign | 0x7c00 | m);
    }
    int32_t e = (int32_t)exp - 127;                       /* unbiased */
    if (e > 15) return sign | 0x7c00;                     /* overflow */
    if (e >= -14) {
        /* normal range: 10 mantissa bits kept, 13 rounded off (nearest even) */
        uint32_t v = ((uint32_t)(e + 15) << 10) | (man >> 13);
        uint32_t rem = man & 0x1fff;
        if (rem > 0x1000 || (rem == 0x1000 && (v & 1))) v++;  /* may carry into inf: correct */
        return (uint16_t)(sign | v);
    }
    if (e < -25) return sign;                              /* below half the smallest subnormal */
    /* subnormal result: value = (1.man) * 2^e, in units of 2^-24 */
    uint32_t full = man | 0x800000;                        /* 24-bit significand, scale 2^(e-23) */
    int shift = -e - 1;                                    /* to units of 2^-24: shift by (-24 - (e-23)) = -e-1 */
    uint32_t v = full >> shift;
    uint32_t rem = full & ((1u << shift) - 1);
    uint32_t half = 1u << (shift - 1);
    if (rem > half || (rem == half && (v & 1))) v++;
    return (uint16_t)(sign | v);
}

float eng_bf16_to_f32(uint16_t h) { return bits_f32((uint32_t)h << 16); }

uint16_t eng_f32_to_bf16(float f) {
    uint32_t u = f32_bits(f);
    if ((u & 0x7fffffff) > 0x7f800000) return (uint16_t)((u >> 16) | 0x40);  /* quiet NaN */
    u += 0x7fff + ((u >> 16) & 1);
    return (uint16_t)(u >> 16);
}

static uint16_t rd16(const uint8_t *p) { uint16_t v; memcpy(&v, p, 2); return v; }

void eng_ggml_to_f32(uint32_t type, const void *src, float *dst, int64_t n) {
    const uint8_t *s = src;
    switch (type) {
    case ENG_GGML_TYPE_F32:
        memcpy(dst, src, (size_t)n * 4);
        break;
    case ENG_GGML_TYPE_F16:
        for (int64_t i = 0; i < n; i++) dst[i] = eng_fp16_to_f32(rd16(s + 2 * i));
        break;
    case ENG_GGML_TYPE_BF16:
        for (int64_t i = 0; i < n; i++) dst[i] = eng_bf16_to_f32(rd16(s + 2 * i));
        break;
    case ENG_GGML_TYPE_Q8_0:
        ENG_ASSERT(n % GG_QK8_0 == 0);
        for (int64_t b = 0; b < n / GG_QK8_0; b++) {
            const uint8_t *blk = s + b * (2 + GG_QK8_0);
            float d = eng_fp16_to_f32(rd16(blk));
            const int8_t *q = (const int8_t *)(blk + 2);
            for (int j = 0; j < GG_QK8_0; j++) dst[b * GG_QK8_0 + j] = d * (float)q[j];
        }
        break;
    default:
        ENG_ASSERT(!"eng_ggml_to_f32: unsupported type");
    }
}

void eng_ggml_from_f32(uint32_t type, const float *src, void *dst, int64_t n) {
    uint8_t *d8 = dst;
    switch (type) {
    case ENG_GGML_TYPE_F32:
        memcpy(dst, src, (size_t)n * 4);
        break;
    case ENG_GGML_TYPE_F16:
        for (int64_t i = 0; i < n; i++) {
            uint16_t h = eng_f32_to_fp16(src[i]);
            memcpy(d8 + 2 * i, &h, 2);
        }
        break;
    case ENG_GGML_TYPE_BF16:
        for (int64_t i = 0; i < n; i++) {
            uint16_t h = eng_f32_to_bf16(src[i]);
            memcpy(d8 + 2 * i, &h, 2);
        }
        break;
    case ENG_GGML_TYPE_Q8_0:
        /* llama.cpp's reference: d = amax/127, q = round(x/d) (half away from zero) */
        ENG_ASSERT(n % GG_QK8_0 == 0);
        for (int64_t b = 0; b < n / GG_QK8_0; b++) {
            const float *x = src + b * GG_QK8_0;
            uint8_t *blk = d8 + b * (2 + GG_QK8_0);
            float amax = 0.0f;
            for (int j = 0; j < GG_QK8_0; j++) {
                float a = fabsf(x[j]);
                if (a > amax) amax = a;
            }
            float d = amax / 127.0f;
            float id = d != 0.0f ? 1.0f / d : 0.0f;
            uint16_t hd = eng_f32_to_fp16(d);
            memcpy(blk, &hd, 2);
            for (int j = 0; j < GG_QK8_0; j++) {
                float q = roundf(x[j] * id);
                blk[2 + j] = (uint8_t)(int8_t)q;
            }
        }
        break;
    default:
        ENG_ASSERT(!"eng_ggml_from_f32: unsupported type");
    }
}

// ----------------------------------------------------------------------------
// Reader: data structures

typedef struct gg_kv {
    char    *key;        /* NUL-terminated copy */
    uint32_t type;
    uint32_t arr_type;   /* element type when type == ARRAY */
    uint64_t arr_n;      /* element count when type == ARRAY, else 0 */
    size_t   val_off;    /* first byte of the value (after the type field) */
    size_t   val_end;    /* one past the value */
    size_t   data_off;   /* arrays: first element; scalars: == val_off */
    size_t  *str_idx;    /* string arrays: offset of each element's length field */
} gg_kv;

struct eng_gguf {
    char            *path;
    const uint8_t   *buf;
    size_t           n;
    bool             mapped;
    uint32_t         version;
    size_t           alignment;
    int64_t          n_kv;
    gg_kv           *kv;
    int64_t         *kv_sorted;    /* kv indices sorted by key */
    int64_t          n_tensors;
    eng_gguf_tensor *t;
    int64_t         *t_sorted;     /* tensor indices sorted by name */
    size_t           data_off;     /* start of the data section */
};

/* A bounds-checked cursor over the buffer; every failure writes err. */
typedef struct rd {
    const uint8_t *p;
    size_t         n;
    size_t         pos;
    const char    *name;
    char          *err;
    size_t         errlen;
} rd;

static int rd_fail(rd *r, size_t off, int code, const char *field, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));

static int rd_fail(rd *r, size_t off, int code, const char *field, const char *fmt, ...) {
    char msg[200];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    eng_errf(r->err, r->errlen, "%s: offset %zu: %s: %s", r->name, off, field, msg);
    return code;
}

static size_t rd_left(const rd *r) { return r->n - r->pos; }

static int rd_need(rd *r, size_t k, const char *field) {
    if (rd_left(r) < k)
        return rd_fail(r, r->pos, ENG_ERR_FORMAT, field,
                       "truncated: needs %zu bytes, %zu left in the file", k, rd_left(r));
    return ENG_OK;
}

static int rd_u32(rd *r, uint32_t *v, const char *field) {
    int rc = rd_need(r, 4, field);
    if (rc) return rc;
    memcpy(v, r->p + r->pos, 4);
    r->pos += 4;
    return ENG_OK;
}

static int rd_u64(rd *r, uint64_t *v, const char *field) {
    int rc = rd_need(r, 8, field);
    if (rc) return rc;
    memcpy(v, r->p + r->pos, 8);
    r->pos += 8;
    return ENG_OK;
}

/* A length-prefixed string; *s points into the buffer. */
static int rd_str(rd *r, const char *field, const uint8_t **s, uint64_t *len) {
    size_t at = r->pos;
    int rc = rd_u64(r, len, field);
    if (rc) return rc;
    if (*len > rd_left(r))
        return rd_fail(r, at, ENG_ERR_FORMAT, field,
                       "string length %llu exceeds the %zu bytes left in the file",
                       (unsigned long long)*len, rd_left(r));
    *s = r->p + r->pos;
    r->pos += (size_t)*len;
    return ENG_OK;
}

/* Skips the body of an array (element type, count, elements) at r->pos.
 * depth counts enclosing arrays. */
static int rd_skip_array(rd *r, int depth, const char *field) {
    size_t at = r->pos;
    if (depth >= GG_MAX_NEST)
        return rd_fail(r, at, ENG_ERR_FORMAT, field, "arrays nested deeper than %d", GG_MAX_NEST);
    uint32_t et;
    uint64_t n;
    int rc = rd_u32(r, &et, field);
    if (!rc) rc = rd_u64(r, &n, field);
    if (rc) return rc;
    if (et >= ENG_GGUF_TYPE_COUNT)
        return rd_fail(r, at, ENG_ERR_FORMAT, field, "unknown array element type %u", et);
    size_t es = eng_gguf_type_size(et);
    if (es) {
        if (n > rd_left(r) / es)
            return rd_fail(r, at + 4, ENG_ERR_FORMAT, field,
                           "array of %llu %s elements exceeds the %zu bytes left",
                           (unsigned long long)n, gguf_type_names[et], rd_left(r));
        r->pos += (size_t)n * es;
        return ENG_OK;
    }
    size_t min = et == ENG_GGUF_TYPE_STRING ? 8 : 12;
    if (n > rd_left(r) / min)
        return rd_fail(r, at + 4, ENG_ERR_FORMAT, field,
                       "array of %llu %s elements cannot fit the %zu bytes left",
                       (unsigned long long)n, gguf_type_names[et], rd_left(r));
    for (uint64_t j = 0; j < n; j++) {
        if (et == ENG_GGUF_TYPE_STRING) {
            const uint8_t *s;
            uint64_t len;
            rc = rd_str(r, field, &s, &len);
        } else {
            rc = rd_skip_array(r, depth + 1, field);
        }
        if (rc) return rc;
    }
    return ENG_OK;
}

static char *dup_n(const uint8_t *s, size_t n) {
    char *d = malloc(n + 1);
    if (!d) return NULL;
    memcpy(d, s, n);
    d[n] = '\0';
    return d;
}

static int cmp_kv_idx(const void *a, const void *b, void *ctx) {
    const gg_kv *kv = ctx;
    return strcmp(kv[*(const int64_t *)a].key, kv[*(const int64_t *)b].key);
}

static int cmp_t_idx(const void *a, const void *b, void *ctx) {
    const eng_gguf_tensor *t = ctx;
    return strcmp(t[*(const int64_t *)a].name, t[*(const int64_t *)b].name);
}

// ----------------------------------------------------------------------------
// Reader: parsing and validation

/* Parses one KV pair at r->pos into *kv. */
static int parse_kv(rd *r, int64_t i, gg_kv *kv) {
    char field[96];
    size_t at = r->pos;
    const uint8_t *ks;
    uint64_t klen;
    snprintf(field, sizeof field, "kv[%lld] key", (long long)i);
    int rc = rd_str(r, field, &ks, &klen);
    if (rc) return rc;
    if (memchr(ks, 0, (size_t)klen))
        return rd_fail(r, at, ENG_ERR_FORMAT, field, "key contains a NUL byte");
    kv->key = dup_n(ks, (size_t)klen);
    if (!kv->key) return rd_fail(r, at, ENG_ERR_NOMEM, field, "out of memory");

    snprintf(field, sizeof field, "kv '%.60s' type", kv->key);
    size_t tat = r->pos;
    rc = rd_u32(r, &kv->type, field);
    if (rc) return rc;
    if (kv->type >= ENG_GGUF_TYPE_COUNT)
        return rd_fail(r, tat, ENG_ERR_FORMAT, field, "unknown value type %u", kv->type);

    snprintf(field, sizeof field, "kv '%.60s' value", kv->key);
    kv->val_off = kv->data_off = r->pos;
    size_t es = eng_gguf_type_size(kv->type);
    if (es) {
        rc = rd_need(r, es, field);
        if (rc) return rc;
        r->pos += es;
    } else if (kv->type == ENG_GGUF_TYPE_STRING) {
        const uint8_t *s;
        uint64_t len;
        rc = rd_str(r, field, &s, &len);
        if (rc) return rc;
    } else {
        /* array: record element type, count and (for strings) an index */
        size_t aat = r->pos;
        rc = rd_u32(r, &kv->arr_type, field);
        if (!rc) rc = rd_u64(r, &kv->arr_n, field);
        if (rc) return rc;
        if (kv->arr_type >= ENG_GGUF_TYPE_COUNT)
            return rd_fail(r, aat, ENG_ERR_FORMAT, field, "unknown array element type %u",
                           kv->arr_type);
        kv->data_off = r->pos;
        if (kv->arr_type == ENG_GGUF_TYPE_STRING) {
            if (kv->arr_n > rd_left(r) / 8)
                return rd_fail(r, aat + 4, ENG_ERR_FORMAT, field,
                               "array of %llu strings cannot fit the %zu bytes left",
                               (unsigned long long)kv->arr_n, rd_left(r));
            kv->str_idx = malloc((kv->arr_n ? (size_t)kv->arr_n : 1) * sizeof *kv->str_idx);
            if (!kv->str_idx) return rd_fail(r, aat, ENG_ERR_NOMEM, field, "out of memory");
            for (uint64_t j = 0; j < kv->arr_n; j++) {
                const uint8_t *s;
                uint64_t len;
                kv->str_idx[j] = r->pos;
                rc = rd_str(r, field, &s, &len);
                if (rc) return rc;
            }
        } else {
            r->pos = aat;
            rc = rd_skip_array(r, 0, field);
            if (rc) return rc;
        }
    }
    kv->val_end = r->pos;
    return ENG_OK;
}

/* Parses one tensor info at r->pos; offsets and bounds are checked later. */
static int parse_tensor_info(rd *r, int64_t i, eng_gguf_tensor *t, size_t *off_pos) {
    char field[112];
    size_t at = r->pos;
    const uint8_t *ns;
    uint64_t nlen;
    snprintf(field, sizeof field, "tensor[%lld] name", (long long)i);
    int rc = rd_str(r, field, &ns, &nlen);
    if (rc) return rc;
    if (memchr(ns, 0, (size_t)nlen))
        return rd_fail(r, at, ENG_ERR_FORMAT, field, "name contains a NUL byte");
    char *name = dup_n(ns, (size_t)nlen);
    if (!name) return rd_fail(r, at, ENG_ERR_NOMEM, field, "out of memory");
    t->name = name;

    snprintf(field, sizeof field, "tensor '%.60s' n_dims", name);
    size_t dat = r->pos;
    rc = rd_u32(r, &t->n_dims, field);
    if (rc) return rc;
    if (t->n_dims < 1 || t->n_dims > ENG_GGUF_MAX_DIMS)
        return rd_fail(r, dat, ENG_ERR_FORMAT, field, "%u dimensions, expected 1..%d",
                       t->n_dims, ENG_GGUF_MAX_DIMS);
    snprintf(field, sizeof field, "tensor '%.60s' ne", name);
    for (int d = 0; d < ENG_GGUF_MAX_DIMS; d++) t->ne[d] = 1;
    for (uint32_t d = 0; d < t->n_dims; d++) {
        size_t nat = r->pos;
        uint64_t v;
        rc = rd_u64(r, &v, field);
        if (rc) return rc;
        if (v < 1 || v > (uint64_t)INT64_MAX)
            return rd_fail(r, nat, ENG_ERR_FORMAT, field, "ne[%u] = %lld, expected >= 1", d,
                           (long long)v);
        t->ne[d] = (int64_t)v;
    }
    snprintf(field, sizeof field, "tensor '%.60s' type", name);
    size_t tat = r->pos;
    rc = rd_u32(r, &t->type, field);
    if (rc) return rc;
    if (!eng_ggml_type_known(t->type))
        return rd_fail(r, tat, ENG_ERR_UNSUPPORTED, field,
                       "ggml type %u is not supported (f32, f16, bf16, q8_0 are)", t->type);
    /* element count and byte size, overflow-checked */
    int64_t nel = 1;
    for (int d = 0; d < ENG_GGUF_MAX_DIMS; d++)
        if (__builtin_mul_overflow(nel, t->ne[d], &nel))
            return rd_fail(r, dat, ENG_ERR_FORMAT, field, "element count overflows int64");
    size_t row = eng_ggml_row_size(t->type, t->ne[0]);
    if (row == 0)
        return rd_fail(r, dat + 4, ENG_ERR_FORMAT, field,
                       "ne[0] = %lld is not a multiple of the %s block size",
                       (long long)t->ne[0], eng_ggml_type_name(t->type));
    size_t nb = row;
    for (int d = 1; d < ENG_GGUF_MAX_DIMS; d++)
        if (__builtin_mul_overflow(nb, (uint64_t)t->ne[d], &nb))
            return rd_fail(r, dat, ENG_ERR_FORMAT, field, "byte size overflows");
    t->nbytes = nb;

    snprintf(field, sizeof field, "tensor '%.60s' offset", name);
    *off_pos = r->pos;
    return rd_u64(r, &t->offset, field);
}

/* Validates the header of buf[0..n); fills g. */
static int parse(eng_gguf *g, char *err, size_t errlen) {
    rd r = {.p = g->buf, .n = g->n, .pos = 0, .name = g->path, .err = err, .errlen = errlen};
    size_t *off_pos = NULL;
    int rc;

    rc = rd_need(&r, 4, "magic");
    if (rc) goto out;
    if (memcmp(g->buf, ENG_GGUF_MAGIC, 4) != 0) {
        rc = rd_fail(&r, 0, ENG_ERR_FORMAT, "magic", "not a GGUF file (bad magic)");
        goto out;
    }
    r.pos = 4;
    rc = rd_u32(&r, &g->version, "version");
    if (rc) goto out;
    if (g->version == 1) {
        rc = rd_fail(&r, 4, ENG_ERR_UNSUPPORTED, "version", "GGUF v1 is not supported (v2, v3 are)");
        goto out;
    }
    if (g->version != 2 && g->version != 3) {
        if ((g->version & 0xffff) == 0 && g->version != 0)
            rc = rd_fail(&r, 4, ENG_ERR_UNSUPPORTED, "version",
                         "big-endian GGUF is not supported");
        else if (g->version == 0)
            rc = rd_fail(&r, 4, ENG_ERR_FORMAT, "version", "version 0 is invalid");
        else
            rc = rd_fail(&r, 4, ENG_ERR_UNSUPPORTED, "version",
                         "version %u is not supported (v2, v3 are)", g->version);
        goto out;
    }
    uint64_t n_tensors, n_kv;
    rc = rd_u64(&r, &n_tensors, "n_tensors");
    if (!rc) rc = rd_u64(&r, &n_kv, "n_kv");
    if (rc) goto out;
    /* minimum sizes: a KV pair 8+4+1 bytes, a tensor info 8+4+8+4+8 */
    if (n_kv > rd_left(&r) / 13) {
        rc = rd_fail(&r, 16, ENG_ERR_FORMAT, "n_kv", "%llu pairs cannot fit the %zu bytes left",
                     (unsigned long long)n_kv, rd_left(&r));
        goto out;
    }
    if (n_tensors > rd_left(&r) / 32) {
        rc = rd_fail(&r, 8, ENG_ERR_FORMAT, "n_tensors",
                     "%llu tensor infos cannot fit the %zu bytes left",
                     (unsigned long long)n_tensors, rd_left(&r));
        goto out;
    }

    g->kv = calloc(n_kv ? n_kv : 1, sizeof *g->kv);
    g->kv_sorted = malloc((n_kv ? n_kv : 1) * sizeof *g->kv_sorted);
    if (!g->kv || !g->kv_sorted) {
        rc = rd_fail(&r, 16, ENG_ERR_NOMEM, "n_kv", "out of memory");
        goto out;
    }
    for (uint64_t i = 0; i < n_kv; i++) {
        g->n_kv = (int64_t)i + 1;   /* so close frees what parse_kv allocated */
        rc = parse_kv(&r, (int64_t)i, &g->kv[i]);
        if (rc) goto out;
        g->kv_sorted[i] = (int64_t)i;
    }
    g->n_kv = (int64_t)n_kv;
    qsort_r(g->kv_sorted, n_kv, sizeof *g->kv_sorted, cmp_kv_idx, g->kv);
    for (uint64_t i = 1; i < n_kv; i++) {
        const gg_kv *a = &g->kv[g->kv_sorted[i - 1]], *b = &g->kv[g->kv_sorted[i]];
        if (strcmp(a->key, b->key) == 0) {
            const gg_kv *later = a->val_off > b->val_off ? a : b;
            rc = rd_fail(&r, later->val_off - 4 - strlen(later->key) - 8, ENG_ERR_FORMAT, "key",
                         "duplicate key '%.80s'", later->key);
            goto out;
        }
    }

    /* alignment */
    g->alignment = ENG_GGUF_DEFAULT_ALIGNMENT;
    int64_t ai = eng_gguf_find_key(g, "general.alignment");
    if (ai >= 0) {
        const gg_kv *kv = &g->kv[ai];
        if (kv->type != ENG_GGUF_TYPE_UINT32) {
            rc = rd_fail(&r, kv->val_off - 4, ENG_ERR_FORMAT, "general.alignment",
                         "type %s, expected uint32", eng_gguf_type_name(kv->type));
            goto out;
        }
        uint32_t a;
        memcpy(&a, g->buf + kv->val_off, 4);
        if (a == 0 || (a & (a - 1)) != 0) {
            rc = rd_fail(&r, kv->val_off, ENG_ERR_FORMAT, "general.alignment",
                         "%u is not a power of two", a);
            goto out;
        }
        g->alignment = a;
    }

    g->t = calloc(n_tensors ? n_tensors : 1, sizeof *g->t);
    g->t_sorted = malloc((n_tensors ? n_tensors : 1) * sizeof *g->t_sorted);
    off_pos = malloc((n_tensors ? n_tensors : 1) * sizeof *off_pos);
    if (!g->t || !g->t_sorted || !off_pos) {
        rc = rd_fail(&r, 8, ENG_ERR_NOMEM, "n_tensors", "out of memory");
        goto out;
    }
    for (uint64_t i = 0; i < n_tensors; i++) {
        g->n_tensors = (int64_t)i + 1;
        rc = parse_tensor_info(&r, (int64_t)i, &g->t[i], &off_pos[i]);
        if (rc) goto out;
        g->t_sorted[i] = (int64_t)i;
    }
    g->n_tensors = (int64_t)n_tensors;
    qsort_r(g->t_sorted, n_tensors, sizeof *g->t_sorted, cmp_t_idx, g->t);
    for (uint64_t i = 1; i < n_tensors; i++) {
        int64_t a = g->t_sorted[i - 1], b = g->t_sorted[i];
        if (strcmp(g->t[a].name, g->t[b].name) == 0) {
            int64_t later = a > b ? a : b;
            rc = rd_fail(&r, off_pos[later], ENG_ERR_FORMAT, "tensor name",
                         "duplicate tensor name '%.80s'", g->t[later].name);
            goto out;
        }
    }

    /* data section: align_up(end of tensor infos) */
    uint64_t end = r.pos, data_off;
    if (__builtin_add_overflow(end, (uint64_t)g->alignment - 1, &data_off)) {
        rc = rd_fail(&r, r.pos, ENG_ERR_FORMAT, "data section", "offset overflows");
        goto out;
    }
    data_off &= ~((uint64_t)g->alignment - 1);
    if (n_tensors > 0 && data_off > g->n) {
        rc = rd_fail(&r, r.pos, ENG_ERR_FORMAT, "data section",
                     "starts at %llu, past the end of the file (%zu bytes)",
                     (unsigned long long)data_off, g->n);
        goto out;
    }
    g->data_off = data_off > g->n ? g->n : (size_t)data_off;
    for (uint64_t i = 0; i < n_tensors; i++) {
        eng_gguf_tensor *t = &g->t[i];
        char field[96];
        snprintf(field, sizeof field, "tensor '%.60s' offset", t->name);
        if (t->offset % g->alignment != 0) {
            rc = rd_fail(&r, off_pos[i], ENG_ERR_FORMAT, field,
                         "%llu is not a multiple of the alignment %zu",
                         (unsigned long long)t->offset, g->alignment);
            goto out;
        }
        size_t room = g->n - g->data_off;
        if (t->offset > room || t->nbytes > room - t->offset) {
            rc = rd_fail(&r, off_pos[i], ENG_ERR_FORMAT, field,
                         "data [%llu, +%zu) runs past the end of the data section (%zu bytes)",
                         (unsigned long long)t->offset, t->nbytes, room);
            goto out;
        }
        t->data = g->buf + g->data_off + t->offset;
    }
    rc = ENG_OK;
out:
    free(off_pos);
    return rc;
}

static int open_common(eng_gguf *g, eng_gguf **out, char *err, size_t errlen) {
    int rc = parse(g, err, errlen);
    if (rc != ENG_OK) {
        eng_gguf_close(g);
        return rc;
    }
    *out = g;
    return ENG_OK;
}

int eng_gguf_open(const char *path, eng_gguf **out, char *err, size_t errlen) {
    *out = NULL;
    eng_gguf *g = calloc(1, sizeof *g);
    if (!g || !(g->path = strdup(path))) {
        free(g);
        eng_errf(err, errlen, "%s: out of memory", path);
        return ENG_ERR_NOMEM;
    }
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        eng_errf(err, errlen, "%s: cannot open: %s", path, strerror(errno));
        eng_gguf_close(g);
        return ENG_ERR_IO;
    }
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        eng_errf(err, errlen, "%s: not a regular file", path);
        close(fd);
        eng_gguf_close(g);
        return ENG_ERR_IO;
    }
    g->n = (size_t)st.st_size;
    if (g->n > 0) {
        void *m = mmap(NULL, g->n, PROT_READ, MAP_PRIVATE, fd, 0);
        if (m == MAP_FAILED) {
            eng_errf(err, errlen, "%s: mmap failed: %s", path, strerror(errno));
            close(fd);
            g->n = 0;
            eng_gguf_close(g);
            return ENG_ERR_IO;
        }
        g->buf = m;
        g->mapped = true;
    } else {
        g->buf = (const uint8_t *)"";
    }
    close(fd);
    return open_common(g, out, err, errlen);
}

int eng_gguf_open_buffer(const void *buf, size_t n, const char *name, eng_gguf **out,
                         char *err, size_t errlen) {
    *out = NULL;
    if (!name) name = "<buffer>";
    eng_gguf *g = calloc(1, sizeof *g);
    if (!g || !(g->path = strdup(name))) {
        free(g);
        eng_errf(err, errlen, "%s: out of memory", name);
        return ENG_ERR_NOMEM;
    }
    g->buf = buf ? buf : (const void *)"";
    g->n = buf ? n : 0;
    return open_common(g, out, err, errlen);
}

void eng_gguf_close(eng_gguf *g) {
    if (!g) return;
    for (int64_t i = 0; g->kv && i < g->n_kv; i++) {
        free(g->kv[i].key);
        free(g->kv[i].str_idx);
    }
    for (int64_t i = 0; g->t && i < g->n_tensors; i++) free((char *)g->t[i].name);
    free(g->kv);
    free(g->kv_sorted);
    free(g->t);
    free(g->t_sorted);
    if (g->mapped) munmap((void *)g->buf, g->n);
    free(g->path);
    free(g);
}

// ----------------------------------------------------------------------------
// Reader: accessors

uint32_t eng_gguf_version(const eng_gguf *g) { return g->version; }
size_t eng_gguf_alignment(const eng_gguf *g) { return g->alignment; }
const char *eng_gguf_path(const eng_gguf *g) { return g->path; }

const void *eng_gguf_bytes(const eng_gguf *g, size_t *n) {
    if (n) *n = g->n;
    return g->buf;
}

int64_t eng_gguf_n_kv(const eng_gguf *g) { return g->n_kv; }

int64_t eng_gguf_find_key(const eng_gguf *g, const char *key) {
    int64_t lo = 0, hi = g->n_kv;   /* binary search over kv_sorted */
    while (lo < hi) {
        int64_t mid = lo + (hi - lo) / 2;
        int c = strcmp(g->kv[g->kv_sorted[mid]].key, key);
        if (c == 0) return g->kv_sorted[mid];
        if (c < 0) lo = mid + 1; else hi = mid;
    }
    return -1;
}

const char *eng_gguf_key(const eng_gguf *g, int64_t i) {
    ENG_ASSERT(i >= 0 && i < g->n_kv);
    return g->kv[i].key;
}

uint32_t eng_gguf_kv_type(const eng_gguf *g, int64_t i) {
    ENG_ASSERT(i >= 0 && i < g->n_kv);
    return g->kv[i].type;
}

uint32_t eng_gguf_arr_type(const eng_gguf *g, int64_t i) {
    ENG_ASSERT(i >= 0 && i < g->n_kv);
    return g->kv[i].arr_type;
}

uint64_t eng_gguf_arr_n(const eng_gguf *g, int64_t i) {
    ENG_ASSERT(i >= 0 && i < g->n_kv);
    return g->kv[i].arr_n;
}

const void *eng_gguf_kv_value(const eng_gguf *g, int64_t i, size_t *n) {
    ENG_ASSERT(g && i >= 0 && i < g->n_kv && n);
    *n = g->kv[i].val_end - g->kv[i].val_off;
    return g->buf + g->kv[i].val_off;
}

/* Reads a numeric value of type t at p as int64 (ok) or reports it does not fit. */
static bool num_as_i64(uint32_t t, const uint8_t *p, int64_t *out) {
    switch (t) {
    case ENG_GGUF_TYPE_UINT8:  { uint8_t v;  memcpy(&v, p, 1); *out = v; return true; }
    case ENG_GGUF_TYPE_INT8:   { int8_t v;   memcpy(&v, p, 1); *out = v; return true; }
    case ENG_GGUF_TYPE_BOOL:   { uint8_t v;  memcpy(&v, p, 1); *out = v != 0; return true; }
    case ENG_GGUF_TYPE_UINT16: { uint16_t v; memcpy(&v, p, 2); *out = v; return true; }
    case ENG_GGUF_TYPE_INT16:  { int16_t v;  memcpy(&v, p, 2); *out = v; return true; }
    case ENG_GGUF_TYPE_UINT32: { uint32_t v; memcpy(&v, p, 4); *out = v; return true; }
    case ENG_GGUF_TYPE_INT32:  { int32_t v;  memcpy(&v, p, 4); *out = v; return true; }
    case ENG_GGUF_TYPE_INT64:  { int64_t v;  memcpy(&v, p, 8); *out = v; return true; }
    case ENG_GGUF_TYPE_UINT64: {
        uint64_t v;
        memcpy(&v, p, 8);
        if (v > (uint64_t)INT64_MAX) return false;
        *out = (int64_t)v;
        return true;
    }
    default: return false;
    }
}

static bool is_int_type(uint32_t t) {
    return t == ENG_GGUF_TYPE_UINT8 || t == ENG_GGUF_TYPE_INT8 || t == ENG_GGUF_TYPE_UINT16 ||
           t == ENG_GGUF_TYPE_INT16 || t == ENG_GGUF_TYPE_UINT32 || t == ENG_GGUF_TYPE_INT32 ||
           t == ENG_GGUF_TYPE_UINT64 || t == ENG_GGUF_TYPE_INT64 || t == ENG_GGUF_TYPE_BOOL;
}

static const gg_kv *kv_by_key(const eng_gguf *g, const char *key) {
    int64_t i = eng_gguf_find_key(g, key);
    return i < 0 ? NULL : &g->kv[i];
}

int eng_gguf_get_int(const eng_gguf *g, const char *key, int64_t *out) {
    const gg_kv *kv = kv_by_key(g, key);
    if (!kv) return ENG_ERR_NOT_FOUND;
    if (!is_int_type(kv->type)) return ENG_ERR_TYPE;
    if (!num_as_i64(kv->type, g->buf + kv->val_off, out)) return ENG_ERR_RANGE;
    return ENG_OK;
}

int eng_gguf_get_uint64(const eng_gguf *g, const char *key, uint64_t *out) {
    const gg_kv *kv = kv_by_key(g, key);
    if (!kv) return ENG_ERR_NOT_FOUND;
    if (!is_int_type(kv->type)) return ENG_ERR_TYPE;
    if (kv->type == ENG_GGUF_TYPE_UINT64) {
        memcpy(out, g->buf + kv->val_off, 8);
        return ENG_OK;
    }
    int64_t v;
    num_as_i64(kv->type, g->buf + kv->val_off, &v);
    if (v < 0) return ENG_ERR_RANGE;
    *out = (uint64_t)v;
    return ENG_OK;
}

int eng_gguf_get_float(const eng_gguf *g, const char *key, double *out) {
    const gg_kv *kv = kv_by_key(g, key);
    if (!kv) return ENG_ERR_NOT_FOUND;
    if (kv->type == ENG_GGUF_TYPE_FLOAT32) {
        float f;
        memcpy(&f, g->buf + kv->val_off, 4);
        *out = f;
    } else if (kv->type == ENG_GGUF_TYPE_FLOAT64) {
        memcpy(out, g->buf + kv->val_off, 8);
    } else {
        return ENG_ERR_TYPE;
    }
    return ENG_OK;
}

int eng_gguf_get_bool(const eng_gguf *g, const char *key, bool *out) {
    const gg_kv *kv = kv_by_key(g, key);
    if (!kv) return ENG_ERR_NOT_FOUND;
    if (kv->type != ENG_GGUF_TYPE_BOOL) return ENG_ERR_TYPE;
    *out = g->buf[kv->val_off] != 0;
    return ENG_OK;
}

int eng_gguf_get_str(const eng_gguf *g, const char *key, const char **s, size_t *len) {
    const gg_kv *kv = kv_by_key(g, key);
    if (!kv) return ENG_ERR_NOT_FOUND;
    if (kv->type != ENG_GGUF_TYPE_STRING) return ENG_ERR_TYPE;
    uint64_t n;
    memcpy(&n, g->buf + kv->val_off, 8);
    *s = (const char *)g->buf + kv->val_off + 8;
    *len = (size_t)n;
    return ENG_OK;
}

int eng_gguf_get_arr_str(const eng_gguf *g, int64_t i, uint64_t j, const char **s, size_t *len) {
    ENG_ASSERT(i >= 0 && i < g->n_kv);
    const gg_kv *kv = &g->kv[i];
    if (kv->type != ENG_GGUF_TYPE_ARRAY || kv->arr_type != ENG_GGUF_TYPE_STRING)
        return ENG_ERR_TYPE;
    if (j >= kv->arr_n) return ENG_ERR_RANGE;
    uint64_t n;
    memcpy(&n, g->buf + kv->str_idx[j], 8);
    *s = (const char *)g->buf + kv->str_idx[j] + 8;
    *len = (size_t)n;
    return ENG_OK;
}

double eng_gguf_get_arr_num(const eng_gguf *g, int64_t i, uint64_t j) {
    ENG_ASSERT(i >= 0 && i < g->n_kv);
    const gg_kv *kv = &g->kv[i];
    ENG_ASSERT(kv->type == ENG_GGUF_TYPE_ARRAY);
    size_t es = eng_gguf_type_size(kv->arr_type);
    ENG_ASSERT(es != 0);
    ENG_ASSERT(j < kv->arr_n);
    const uint8_t *p = g->buf + kv->data_off + (size_t)j * es;
    if (kv->arr_type == ENG_GGUF_TYPE_FLOAT32) {
        float f;
        memcpy(&f, p, 4);
        return f;
    }
    if (kv->arr_type == ENG_GGUF_TYPE_FLOAT64) {
        double d;
        memcpy(&d, p, 8);
        return d;
    }
    if (kv->arr_type == ENG_GGUF_TYPE_UINT64) {
        uint64_t u;
        memcpy(&u, p, 8);
        return (double)u;
    }
    int64_t v;
    num_as_i64(kv->arr_type, p, &v);
    return (double)v;
}

const void *eng_gguf_get_arr_data(const eng_gguf *g, int64_t i) {
    ENG_ASSERT(i >= 0 && i < g->n_kv);
    const gg_kv *kv = &g->kv[i];
    if (kv->type != ENG_GGUF_TYPE_ARRAY || eng_gguf_type_size(kv->arr_type) == 0) return NULL;
    return g->buf + kv->data_off;
}

int64_t eng_gguf_n_tensors(const eng_gguf *g) { return g->n_tensors; }

const eng_gguf_tensor *eng_gguf_tensor_at(const eng_gguf *g, int64_t i) {
    ENG_ASSERT(i >= 0 && i < g->n_tensors);
    return &g->t[i];
}

const eng_gguf_tensor *eng_gguf_find_tensor(const eng_gguf *g, const char *name) {
    int64_t lo = 0, hi = g->n_tensors;
    while (lo < hi) {
        int64_t mid = lo + (hi - lo) / 2;
        int c = strcmp(g->t[g->t_sorted[mid]].name, name);
        if (c == 0) return &g->t[g->t_sorted[mid]];
        if (c < 0) lo = mid + 1; else hi = mid;
    }
    return NULL;
}
