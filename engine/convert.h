/*
 * engine/convert.h: converters from other model formats to the GGUF files
 * llama.cpp writes for the same models.
 *
 * rwkv.cpp (RWKV-7 only): rwkv.cpp's binary format (docs/FILE_FORMAT.md of
 * rwkv.cpp: a 24-byte header `magic 0x67676d66, version 100|101, n_vocab,
 * n_embed, n_layer, data_type`, then tensors `n_dims, key length, data type,
 * shape (ggml order), key, data` until end of file), FP32 or FP16 tensors,
 * to llama.cpp's `rwkv7` architecture: the keys and tensor names of its
 * converter (convert_hf_to_gguf.py's Rwkv7Model), layer 0's unused
 * v0/v1/v2 copied from a0/a1/a2 as that converter does, matrices kept in
 * their type, vectors F32. A byte-level vocabulary (n_vocab 256) is written
 * as llama.cpp's RWKV tokenizer (tokenizer.ggml.model "rwkv") with one
 * token per byte, token i being byte i in that tokenizer's escaped form
 * (docs/gguf.md). Every check failure names the file, the byte offset and
 * the field; quantized rwkv.cpp files and RWKV v4/v5/v6 are refused.
 *
 * Usage:
 *     char err[256];
 *     if (eng_convert_rwkvcpp("tiny-rwkv-7v0-834K-FP32.bin", "tiny.gguf", err, sizeof err)) puts(err);
 */
#ifndef ENG_CONVERT_H
#define ENG_CONVERT_H

#include <stddef.h>

/* Converts to a malloc'd GGUF buffer (caller frees *buf). Returns ENG_OK,
 * ENG_ERR_IO, ENG_ERR_FORMAT (malformed), ENG_ERR_UNSUPPORTED (another
 * RWKV version, a quantized type, another vocabulary size) or ENG_ERR_NOMEM. */
int eng_convert_rwkvcpp_to_buffer(const char *in_path, void **buf, size_t *n, char *err, size_t errlen);
/* The same, written atomically to out_path. */
int eng_convert_rwkvcpp(const char *in_path, const char *out_path, char *err, size_t errlen);

#endif /* ENG_CONVERT_H */
