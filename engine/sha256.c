/*
 * engine/sha256.c: SHA-256 per FIPS 180-4. Big-endian word loads and length
 * encoding are done byte by byte, so the code is independent of the host's
 * endianness and alignment. Throughput is a few hundred MB/s, enough to hash
 * a model file once at load.
 */
#include "sha256.h"

#include <string.h>

static const uint32_t K[64] = {
    0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
    0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
    0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
    0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
    0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
    0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
    0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
    0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2,
};

static uint32_t rotr(uint32_t x, int n) { return (x >> n) | (x << (32 - n)); }

// ----------------------------------------------------------------------------
// The compression function: one 64-byte block into the state

static void compress(uint32_t h[8], const uint8_t *p) {
    uint32_t w[64];
    for (int i = 0; i < 16; i++)
        w[i] = (uint32_t)p[4 * i] << 24 | (uint32_t)p[4 * i + 1] << 16 |
               (uint32_t)p[4 * i + 2] << 8 | (uint32_t)p[4 * i + 3];
    for (int i = 16; i < 64; i++) {
        uint32_t s0 = rotr(w[i - 15], 7) ^ rotr(w[i - 15], 18) ^ (w[i - 15] >> 3);
        uint32_t s1 = rotr(w[i - 2], 17) ^ rotr(w[i - 2], 19) ^ (w[i - 2] >> 10);
        w[i] = w[i - 16] + s0 + w[i - 7] + s1;
    }
    uint32_t a = h[0], b = h[1], c = h[2], d = h[3], e = h[4], f = h[5], g = h[6], hh = h[7];
    for (int i = 0; i < 64; i++) {
        uint32_t S1 = rotr(e, 6) ^ rotr(e, 11) ^ rotr(e, 25);
        uint32_t ch = (e & f) ^ (~e & g);
        uint32_t t1 = hh + S1 + ch + K[i] + w[i];
        uint32_t S0 = rotr(a, 2) ^ rotr(a, 13) ^ rotr(a, 22);
        uint32_t maj = (a & b) ^ (a & c) ^ (b & c);
        uint32_t t2 = S0 + maj;
        hh = g; g = f; f = e; e = d + t1;
        d = c; c = b; b = a; a = t1 + t2;
    }
    h[0] += a; h[1] += b; h[2] += c; h[3] += d;
    h[4] += e; h[5] += f; h[6] += g; h[7] += hh;
}

// ----------------------------------------------------------------------------
// Streaming interface

void eng_sha256_init(eng_sha256_ctx *c) {
    static const uint32_t iv[8] = {0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a,
                                   0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19};
    memcpy(c->h, iv, sizeof iv);
    c->n_bytes = 0;
    c->n_block = 0;
    memset(c->block, 0, sizeof c->block);
}

void eng_sha256_update(eng_sha256_ctx *c, const void *data, size_t n) {
    const uint8_t *p = data;
    c->n_bytes += n;
    if (c->n_block > 0) {
        size_t take = 64 - c->n_block < n ? 64 - c->n_block : n;
        memcpy(c->block + c->n_block, p, take);
        c->n_block += take;
        p += take;
        n -= take;
        if (c->n_block < 64) return;
        compress(c->h, c->block);
        c->n_block = 0;
    }
    for (; n >= 64; p += 64, n -= 64) compress(c->h, p);
    if (n > 0) {
        memcpy(c->block, p, n);
        c->n_block = n;
    }
}

void eng_sha256_final(eng_sha256_ctx *c, uint8_t out[32]) {
    uint64_t bits = c->n_bytes * 8;
    uint8_t pad[72] = {0x80};
    size_t npad = (c->n_block < 56 ? 56 : 120) - c->n_block;
    for (int i = 0; i < 8; i++) pad[npad + (size_t)i] = (uint8_t)(bits >> (56 - 8 * i));
    eng_sha256_update(c, pad, npad + 8);
    for (int i = 0; i < 8; i++) {
        out[4 * i] = (uint8_t)(c->h[i] >> 24);
        out[4 * i + 1] = (uint8_t)(c->h[i] >> 16);
        out[4 * i + 2] = (uint8_t)(c->h[i] >> 8);
        out[4 * i + 3] = (uint8_t)c->h[i];
    }
}

void eng_sha256(const void *data, size_t n, uint8_t out[32]) {
    eng_sha256_ctx c;
    eng_sha256_init(&c);
    eng_sha256_update(&c, data, n);
    eng_sha256_final(&c, out);
}

void eng_sha256_hex(const uint8_t digest[32], char hex[65]) {
    static const char dig[] = "0123456789abcdef";
    for (int i = 0; i < 32; i++) {
        hex[2 * i] = dig[digest[i] >> 4];
        hex[2 * i + 1] = dig[digest[i] & 15];
    }
    hex[64] = '\0';
}
