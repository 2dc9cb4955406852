/*
 * engine/sha256.h: SHA-256 (FIPS 180-4), streaming and one-shot.
 *
 * Used to name model files (eng_model_info.sha256) and to derive the model
 * fingerprint. Plain portable C, no crypto library; checked against the
 * FIPS "abc" vector and the known hash of stories260K.gguf in the tests.
 *
 * Usage:
 *     uint8_t d[32]; char hex[65];
 *     eng_sha256(data, n, d);
 *     eng_sha256_hex(d, hex);
 */
#ifndef ENG_SHA256_H
#define ENG_SHA256_H

#include <stddef.h>
#include <stdint.h>

typedef struct eng_sha256_ctx {
    uint32_t h[8];       /* chaining state */
    uint64_t n_bytes;    /* total bytes absorbed */
    uint8_t  block[64];  /* pending partial block */
    size_t   n_block;    /* bytes used in block, < 64 */
} eng_sha256_ctx;

void eng_sha256_init(eng_sha256_ctx *c);
/* Absorbs n bytes (data may be NULL when n == 0). */
void eng_sha256_update(eng_sha256_ctx *c, const void *data, size_t n);
/* Writes the 32-byte digest; the context must be re-initialised before reuse. */
void eng_sha256_final(eng_sha256_ctx *c, uint8_t out[32]);
/* One shot. */
void eng_sha256(const void *data, size_t n, uint8_t out[32]);
/* 64 lower-case hex digits and a NUL into hex[65]. */
void eng_sha256_hex(const uint8_t digest[32], char hex[65]);

#endif /* ENG_SHA256_H */
