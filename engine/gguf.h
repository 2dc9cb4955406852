/*
 * engine/gguf.h: GGUF v2/v3 reader (memory-mapped, bounds-checked; gguf.c) and
 * writer (gguf_write.c).
 *
 * The reader validates the whole header at open time: every length, count,
 * offset and type is checked against the mapping before anything is handed
 * out, so a malformed file yields ENG_ERR_FORMAT (or ENG_ERR_UNSUPPORTED for
 * an unknown tensor type) and a message naming the file, the byte offset and
 * the field, never an out-of-bounds read. Strings in the file are not
 * NUL-terminated; the reader hands out (pointer, length) pairs into the
 * mapping. Scalar values may be unaligned in the file and are returned by
 * value. Tensor data pointers are aligned to general.alignment (default 32).
 *
 * Usage:
 *     eng_gguf *g; char err[256];
 *     if (eng_gguf_open("m.gguf", &g, err, sizeof err) != ENG_OK) { puts(err); ... }
 *     int64_t n_layer;
 *     eng_gguf_get_int(g, "llama.block_count", &n_layer);
 *     const eng_gguf_tensor *t = eng_gguf_find_tensor(g, "token_embd.weight");
 *     eng_gguf_close(g);
 *
 * The writer collects metadata and tensors, then writes a v3 file atomically
 * (temp file, fsync, rename) with llama.cpp's layout: header, KV pairs,
 * tensor infos, padding to the alignment, tensor data each padded to it.
 */
#ifndef ENG_GGUF_H
#define ENG_GGUF_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

// ----------------------------------------------------------------------------
// Types (values are the on-disk enum values of the GGUF spec)

enum eng_gguf_type {
    ENG_GGUF_TYPE_UINT8   = 0,
    ENG_GGUF_TYPE_INT8    = 1,
    ENG_GGUF_TYPE_UINT16  = 2,
    ENG_GGUF_TYPE_INT16   = 3,
    ENG_GGUF_TYPE_UINT32  = 4,
    ENG_GGUF_TYPE_INT32   = 5,
    ENG_GGUF_TYPE_FLOAT32 = 6,
    ENG_GGUF_TYPE_BOOL    = 7,
    ENG_GGUF_TYPE_STRING  = 8,
    ENG_GGUF_TYPE_ARRAY   = 9,
    ENG_GGUF_TYPE_UINT64  = 10,
    ENG_GGUF_TYPE_INT64   = 11,
    ENG_GGUF_TYPE_FLOAT64 = 12,
    ENG_GGUF_TYPE_COUNT
};

/* Tensor element types supported (ggml's enum values). */
enum eng_ggml_type {
    ENG_GGML_TYPE_F32  = 0,
    ENG_GGML_TYPE_F16  = 1,
    ENG_GGML_TYPE_Q8_0 = 8,   /* blocks of 32: fp16 scale + 32 int8 (34 bytes) */
    ENG_GGML_TYPE_BF16 = 30,
};

#define ENG_GGUF_MAGIC "GGUF"
#define ENG_GGUF_DEFAULT_ALIGNMENT 32
#define ENG_GGUF_MAX_DIMS 4

const char *eng_gguf_type_name(uint32_t type);     /* "uint8", ..., "?" */
size_t      eng_gguf_type_size(uint32_t type);     /* bytes of a fixed-size value type; 0 for string, array, unknown */
const char *eng_ggml_type_name(uint32_t type);     /* "f32", "f16", "q8_0", "bf16", "?" */
bool        eng_ggml_type_known(uint32_t type);
/* Bytes of a row of ne0 elements (ne0 must be a multiple of the block size); 0 if invalid. */
size_t      eng_ggml_row_size(uint32_t type, int64_t ne0);
/* Dequantise/convert n elements (a multiple of the block size) to f32. */
void        eng_ggml_to_f32(uint32_t type, const void *src, float *dst, int64_t n);
/* Quantise/convert n f32 elements into type (f16 and bf16 round to nearest even). */
void        eng_ggml_from_f32(uint32_t type, const float *src, void *dst, int64_t n);
float       eng_fp16_to_f32(uint16_t h);
uint16_t    eng_f32_to_fp16(float f);
float       eng_bf16_to_f32(uint16_t h);
uint16_t    eng_f32_to_bf16(float f);   /* round to nearest even, NaN stays NaN */

// ----------------------------------------------------------------------------
// Reader

typedef struct eng_gguf eng_gguf;

typedef struct eng_gguf_tensor {
    const char *name;      /* NUL-terminated copy owned by the eng_gguf */
    uint32_t    n_dims;
    int64_t     ne[ENG_GGUF_MAX_DIMS];  /* ne[0] is the contiguous (row) dimension; unused dims are 1 */
    uint32_t    type;      /* enum eng_ggml_type */
    uint64_t    offset;    /* relative to the start of the data section */
    const void *data;      /* into the mapping, aligned */
    size_t      nbytes;
} eng_gguf_tensor;

/* Maps and validates path. On success *out owns the mapping; close with eng_gguf_close.
 * Returns ENG_OK, ENG_ERR_IO, ENG_ERR_FORMAT, ENG_ERR_UNSUPPORTED or ENG_ERR_NOMEM;
 * err gets "PATH: offset N: field: what is wrong". */
int  eng_gguf_open(const char *path, eng_gguf **out, char *err, size_t errlen);
/* Same over a caller-owned buffer (not copied: it must outlive the eng_gguf). */
int  eng_gguf_open_buffer(const void *buf, size_t n, const char *name, eng_gguf **out,
                          char *err, size_t errlen);
void eng_gguf_close(eng_gguf *g);  /* accepts NULL */

uint32_t    eng_gguf_version(const eng_gguf *g);
size_t      eng_gguf_alignment(const eng_gguf *g);
const char *eng_gguf_path(const eng_gguf *g);
/* The whole file as mapped (for hashing). */
const void *eng_gguf_bytes(const eng_gguf *g, size_t *n);

/* Metadata: keys are indexed 0..n_kv-1 in file order. */
int64_t     eng_gguf_n_kv(const eng_gguf *g);
int64_t     eng_gguf_find_key(const eng_gguf *g, const char *key);   /* -1 when absent */
const char *eng_gguf_key(const eng_gguf *g, int64_t i);              /* NUL-terminated */
uint32_t    eng_gguf_kv_type(const eng_gguf *g, int64_t i);
uint32_t    eng_gguf_arr_type(const eng_gguf *g, int64_t i);         /* element type of an array */
uint64_t    eng_gguf_arr_n(const eng_gguf *g, int64_t i);            /* 0 for non-arrays */
/* The value of KV i as the file holds it: the n bytes after its type field. */
const void *eng_gguf_kv_value(const eng_gguf *g, int64_t i, size_t *n);

/* Typed getters by key. Return ENG_OK, ENG_ERR_NOT_FOUND or ENG_ERR_TYPE.
 * get_int accepts any integer type (and bool) whose value fits int64;
 * get_float accepts float32/float64; get_str returns a pointer into the
 * mapping and its length (not NUL-terminated). */
int eng_gguf_get_int(const eng_gguf *g, const char *key, int64_t *out);
int eng_gguf_get_uint64(const eng_gguf *g, const char *key, uint64_t *out);
int eng_gguf_get_float(const eng_gguf *g, const char *key, double *out);
int eng_gguf_get_bool(const eng_gguf *g, const char *key, bool *out);
int eng_gguf_get_str(const eng_gguf *g, const char *key, const char **s, size_t *len);

/* Array elements by kv index i and element j (bounds-checked; asserts on misuse).
 * get_arr_str: pointer into the mapping + length. get_arr_num: any numeric
 * element type converted to double. get_arr_data: raw pointer to a numeric
 * array's packed elements (possibly unaligned: memcpy before use). */
int         eng_gguf_get_arr_str(const eng_gguf *g, int64_t i, uint64_t j, const char **s, size_t *len);
double      eng_gguf_get_arr_num(const eng_gguf *g, int64_t i, uint64_t j);
const void *eng_gguf_get_arr_data(const eng_gguf *g, int64_t i);

/* Tensors, in file order. */
int64_t                 eng_gguf_n_tensors(const eng_gguf *g);
const eng_gguf_tensor  *eng_gguf_tensor_at(const eng_gguf *g, int64_t i);
const eng_gguf_tensor  *eng_gguf_find_tensor(const eng_gguf *g, const char *name);  /* NULL when absent */

// ----------------------------------------------------------------------------
// Writer

typedef struct eng_gguf_writer eng_gguf_writer;

/* version is 2 or 3; alignment a power of two (0 means 32). NULL on OOM. */
eng_gguf_writer *eng_gguf_writer_new(uint32_t version, size_t alignment);
void             eng_gguf_writer_free(eng_gguf_writer *w);  /* accepts NULL */

/* Scalars. Setting an existing key replaces it. All copy their inputs. */
int eng_gguf_writer_set_u32 (eng_gguf_writer *w, const char *key, uint32_t v);
int eng_gguf_writer_set_i32 (eng_gguf_writer *w, const char *key, int32_t v);
int eng_gguf_writer_set_u64 (eng_gguf_writer *w, const char *key, uint64_t v);
int eng_gguf_writer_set_f32 (eng_gguf_writer *w, const char *key, float v);
int eng_gguf_writer_set_bool(eng_gguf_writer *w, const char *key, bool v);
int eng_gguf_writer_set_str (eng_gguf_writer *w, const char *key, const char *s);
/* Any scalar type: val points to a value of that type (STRING: a NUL-terminated char*). */
int eng_gguf_writer_set_scalar(eng_gguf_writer *w, const char *key, uint32_t type, const void *val);
/* Numeric array: n packed elements of elem_type (copied). */
int eng_gguf_writer_set_arr (eng_gguf_writer *w, const char *key, uint32_t elem_type,
                             uint64_t n, const void *data);
/* String array: n strings with explicit lengths (lens may be NULL for NUL-terminated). */
int eng_gguf_writer_set_arr_str(eng_gguf_writer *w, const char *key, uint64_t n,
                                const char *const *strs, const size_t *lens);
/* Copies every KV pair of g whose key starts with prefix ("" for all). */
int eng_gguf_writer_copy_kv(eng_gguf_writer *w, const eng_gguf *g, const char *prefix);

/* Adds a tensor. data is NOT copied (SQLITE_STATIC-style): it must stay valid
 * until eng_gguf_writer_write returns. nbytes must equal the size implied by
 * type and ne. */
int eng_gguf_writer_add_tensor(eng_gguf_writer *w, const char *name, uint32_t type,
                               uint32_t n_dims, const int64_t *ne, const void *data, size_t nbytes);

/* Serialises to a malloc'd buffer (caller frees). */
int eng_gguf_writer_to_buffer(const eng_gguf_writer *w, void **buf, size_t *n);
/* Writes path atomically. */
int eng_gguf_writer_write(const eng_gguf_writer *w, const char *path, char *err, size_t errlen);

#endif /* ENG_GGUF_H */
