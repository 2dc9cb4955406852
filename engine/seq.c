/*
 * engine/seq.c: sequence state: token ids and each layer's memory (the
 * layer kind's: full-attention K/V rows, a sliding-window ring, a recurrent
 * state; engine/layers/), truncation, copy, byte-exact comparison,
 * serialisation and checkpoints. Every per-layer operation calls the
 * layer's kind table; nothing here knows a kind's memory.
 *
 * Invariants: positions [0, n_tokens) hold valid tokens and memory;
 * positions at [n_tokens, n_used) may hold stale values from before a
 * truncation and are never read, serialised or compared; memory of
 * positions >= n_used is zero. A kind keeps what truncation to any
 * reachable length needs (its can_truncate rule); a recurrent state is the
 * state after exactly n_tokens tokens.
 *
 * Serialised blob (version 1, little-endian, no padding):
 *   0   "KVRS"                       magic
 *   4   u32 version (1)
 *   8   u64 model fingerprint       (model file SHA-256 and numerics: eng_model_fingerprint)
 *   16  i32 n_tokens
 *   20  i32 n_layer
 *   24  n_layer x { u32 kind, u32 zero (checked), u64 nbytes }   the layer table
 *   ..  i32 tokens[n_tokens]
 *   ..  each layer's memory, nbytes each, as its kind serialises it (full
 *       attention: K rows [0, n_tokens) then V rows; sliding window: K rows
 *       then V rows of the window [n - w, n), w = min(n, n_swa); Mamba-2:
 *       the recurrent state [NH, N, P] then the conv state [K-1, CD];
 *       RWKV-7: the two token-shift rows then the wkv state; floats)
 *   end u64 XXH3_64 of every byte before it
 * A checkpoint's payload is the concatenation of the per-layer sections of
 * the non-truncatable memory, in the same per-kind layout (full attention
 * contributes 0 bytes).
 */
#include "internal.h"

#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "status.h"

#define SEQ_MAGIC   "KVRS"
#define SEQ_VERSION 1u
#define SEQ_HDR     24
#define SEQ_LAYER   16

// ----------------------------------------------------------------------------
// Lifecycle

eng_seq *eng_seq_new(const eng_model *m, int32_t n_ctx) { return eng_seq_new_ext(m, n_ctx, ENG_SWA_SLACK_DEFAULT); }

eng_seq *eng_seq_new_ext(const eng_model *m, int32_t n_ctx, int32_t swa_slack) {
    if (!m || n_ctx < 1 || swa_slack < 0) return NULL;
    eng_seq *s = calloc(1, sizeof *s);
    if (!s) return NULL;
    s->m = m;
    s->n_ctx = n_ctx;
    s->swa_slack = swa_slack;
    s->tokens = calloc((size_t)n_ctx, sizeof *s->tokens);
    s->mem = calloc((size_t)m->info.n_layer, sizeof *s->mem);
    if (!s->tokens || !s->mem) goto fail;
    for (int32_t il = 0; il < m->info.n_layer; il++) {
        const eng_layer_ops *ops = m->layers[il].ops;
        if (ops->mem_new(m, il, n_ctx, swa_slack, &s->mem[il].state) != ENG_OK) goto fail;
        s->mem[il].ops = ops;
    }
    return s;
fail:
    eng_seq_free(s);
    return NULL;
}

void eng_seq_free(eng_seq *s) {
    if (!s) return;
    if (s->mem)
        for (int32_t il = 0; il < s->m->info.n_layer; il++)
            if (s->mem[il].ops) s->mem[il].ops->mem_free(s->mem[il].state);
    free(s->mem);
    free(s->tokens);
    eng_ws_free(&s->ws);
    free(s);
}

void eng_seq_reset(eng_seq *s) {
    for (int32_t il = 0; il < s->m->info.n_layer; il++)
        s->mem[il].ops->mem_clear(s->m, il, s->mem[il].state, s->n_used);
    memset(s->tokens, 0, sizeof *s->tokens * (size_t)s->n_used);
    s->n_tokens = 0;
    s->n_used = 0;
}

const eng_model *eng_seq_model(const eng_seq *s) { return s->m; }
int32_t eng_seq_n_ctx(const eng_seq *s) { return s->n_ctx; }
int32_t eng_seq_n_tokens(const eng_seq *s) { return s->n_tokens; }
const int32_t *eng_seq_tokens(const eng_seq *s) { return s->tokens; }

// ----------------------------------------------------------------------------
// Truncation

bool eng_seq_can_truncate(const eng_seq *s, int32_t n) {
    if (n < 0 || n > s->n_tokens) return false;
    if (n == s->n_tokens || n == 0) return true;  /* nothing to do, or a reset */
    for (int32_t il = 0; il < s->m->info.n_layer; il++) {
        const eng_layer_mem *mem = &s->mem[il];
        if (!mem->ops->can_truncate(s->m, il, mem->state, s->n_tokens, n)) return false;
    }
    return true;
}

int eng_seq_truncate(eng_seq *s, int32_t n) {
    if (n < 0) return ENG_ERR_ARG;
    if (n > s->n_tokens) return ENG_ERR_RANGE;
    if (n == 0) {
        eng_seq_reset(s);
        return ENG_OK;
    }
    if (n == s->n_tokens) return ENG_OK;
    if (!eng_seq_can_truncate(s, n)) return ENG_ERR_UNSUPPORTED;
    for (int32_t il = 0; il < s->m->info.n_layer; il++)
        if (s->mem[il].ops->truncate) s->mem[il].ops->truncate(s->m, il, s->mem[il].state, s->n_tokens, n);
    s->n_tokens = n;
    return ENG_OK;
}

// ----------------------------------------------------------------------------
// Copy and comparison

static bool same_model(const eng_model *a, const eng_model *b) {
    return a == b || (a->fingerprint == b->fingerprint && a->info.n_layer == b->info.n_layer);
}

int eng_seq_copy(eng_seq *dst, const eng_seq *src) {
    if (!dst || !src) return ENG_ERR_ARG;
    if (dst == src) return ENG_OK;
    if (!same_model(dst->m, src->m)) return ENG_ERR_MISMATCH;
    const int32_t n = src->n_tokens;
    if (dst->n_ctx < n) return ENG_ERR_RANGE;
    memcpy(dst->tokens, src->tokens, sizeof *dst->tokens * (size_t)n);
    for (int32_t il = 0; il < src->m->info.n_layer; il++)
        src->mem[il].ops->copy(src->m, il, dst->mem[il].state, src->mem[il].state, n);
    dst->n_tokens = n;
    if (dst->n_used < n) dst->n_used = n;
    return ENG_OK;
}

int eng_seq_compare(const eng_seq *a, const eng_seq *b, eng_seq_diff *out) {
    memset(out, 0, sizeof *out);
    out->layer = -1;
    out->pos = -1;
    out->index = -1;
    if (!same_model(a->m, b->m)) return ENG_ERR_MISMATCH;
    const int32_t n = a->n_tokens < b->n_tokens ? a->n_tokens : b->n_tokens;
    for (int32_t p = 0; p < n; p++)
        if (a->tokens[p] != b->tokens[p]) {
            out->part = ENG_SEQ_PART_TOKENS;
            out->pos = p;
            return ENG_OK;
        }
    for (int32_t il = 0; il < a->m->info.n_layer; il++) {
        const eng_layer_mem *ma = &a->mem[il], *mb = &b->mem[il];
        if (ma->ops->compare(a->m, il, ma->state, mb->state, a->n_tokens, b->n_tokens, out)) {
            out->layer = il;
            return ENG_OK;
        }
    }
    if (a->n_tokens != b->n_tokens) {
        out->part = ENG_SEQ_PART_N_TOKENS;
        out->pos = n;
        return ENG_OK;
    }
    out->equal = true;
    out->part = ENG_SEQ_PART_NONE;
    return ENG_OK;
}

// ----------------------------------------------------------------------------
// Serialisation

static void put_u32(uint8_t *p, uint32_t v) { for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (8 * i)); }
static void put_u64(uint8_t *p, uint64_t v) { for (int i = 0; i < 8; i++) p[i] = (uint8_t)(v >> (8 * i)); }
static uint32_t get_u32(const uint8_t *p) {
    uint32_t v = 0;
    for (int i = 0; i < 4; i++) v |= (uint32_t)p[i] << (8 * i);
    return v;
}
static uint64_t get_u64(const uint8_t *p) {
    uint64_t v = 0;
    for (int i = 0; i < 8; i++) v |= (uint64_t)p[i] << (8 * i);
    return v;
}

size_t eng_seq_serialized_size(const eng_seq *s) {
    const int32_t L = s->m->info.n_layer;
    size_t n = SEQ_HDR + (size_t)L * SEQ_LAYER + sizeof(int32_t) * (size_t)s->n_tokens + 8;
    for (int32_t il = 0; il < L; il++) n += s->mem[il].ops->ser_bytes(s->m, il, s->mem[il].state, s->n_tokens);
    return n;
}

int eng_seq_serialize(const eng_seq *s, void *buf, size_t cap, size_t *n_written) {
    if (n_written) *n_written = 0;
    const size_t total = eng_seq_serialized_size(s);
    if (!buf || cap < total) return ENG_ERR_RANGE;
    const int32_t L = s->m->info.n_layer, n = s->n_tokens;
    uint8_t *p = buf;
    memcpy(p, SEQ_MAGIC, 4);
    put_u32(p + 4, SEQ_VERSION);
    put_u64(p + 8, s->m->fingerprint);
    put_u32(p + 16, (uint32_t)n);
    put_u32(p + 20, (uint32_t)L);
    uint8_t *q = p + SEQ_HDR;
    for (int32_t il = 0; il < L; il++, q += SEQ_LAYER) {
        put_u32(q, (uint32_t)s->mem[il].ops->kind);
        put_u32(q + 4, 0);
        put_u64(q + 8, s->mem[il].ops->ser_bytes(s->m, il, s->mem[il].state, n));
    }
    for (int32_t i = 0; i < n; i++, q += 4) put_u32(q, (uint32_t)s->tokens[i]);
    for (int32_t il = 0; il < L; il++) {
        const eng_layer_mem *mem = &s->mem[il];
        mem->ops->ser_save(s->m, il, mem->state, n, q);
        q += mem->ops->ser_bytes(s->m, il, mem->state, n);
    }
    put_u64(q, XXH3_64bits(p, (size_t)(q - p)));
    q += 8;
    ENG_ASSERT((size_t)(q - p) == total);
    if (n_written) *n_written = total;
    return ENG_OK;
}

int eng_seq_deserialize(eng_seq *s, const void *buf, size_t n) {
    const uint8_t *p = buf;
    const eng_model *m = s->m;
    if (!buf || n < SEQ_HDR + 8) return ENG_ERR_FORMAT;
    if (memcmp(p, SEQ_MAGIC, 4) != 0 || get_u32(p + 4) != SEQ_VERSION) return ENG_ERR_FORMAT;
    const int64_t n_tok = (int32_t)get_u32(p + 16), L = (int32_t)get_u32(p + 20);
    if (n_tok < 0 || L < 0 || L > 65536) return ENG_ERR_FORMAT;
    /* Sizes: the layer table must fit before its byte counts are trusted. */
    uint64_t need = SEQ_HDR + (uint64_t)L * SEQ_LAYER + 4u * (uint64_t)n_tok + 8u;
    if (need > n) return ENG_ERR_FORMAT;
    for (int64_t il = 0; il < L; il++) {
        const uint64_t b = get_u64(p + SEQ_HDR + il * SEQ_LAYER + 8);
        if (b > n || need + b > n) return ENG_ERR_FORMAT;
        if (get_u32(p + SEQ_HDR + il * SEQ_LAYER + 4) != 0) return ENG_ERR_FORMAT;  /* one encoding per state */
        need += b;
    }
    if (need != n) return ENG_ERR_FORMAT;
    if (get_u64(p + n - 8) != XXH3_64bits(p, n - 8)) return ENG_ERR_FORMAT;
    /* A well-formed blob: is it ours? */
    if (get_u64(p + 8) != m->fingerprint || L != m->info.n_layer) return ENG_ERR_MISMATCH;
    for (int32_t il = 0; il < (int32_t)L; il++) {
        const uint8_t *e = p + SEQ_HDR + (size_t)il * SEQ_LAYER;
        if (get_u32(e) != (uint32_t)s->mem[il].ops->kind) return ENG_ERR_MISMATCH;
        if (get_u64(e + 8) != s->mem[il].ops->ser_bytes(m, il, s->mem[il].state, (int32_t)n_tok)) return ENG_ERR_FORMAT;
    }
    if (n_tok > s->n_ctx) return ENG_ERR_RANGE;
    const uint8_t *q = p + SEQ_HDR + (size_t)L * SEQ_LAYER;
    for (int64_t i = 0; i < n_tok; i++) {
        const int32_t t = (int32_t)get_u32(q + 4 * i);
        if (t < 0 || t >= m->info.n_vocab) return ENG_ERR_FORMAT;
    }
    /* Validated: apply. */
    for (int64_t i = 0; i < n_tok; i++, q += 4) s->tokens[i] = (int32_t)get_u32(q);
    for (int32_t il = 0; il < (int32_t)L; il++) {
        eng_layer_mem *mem = &s->mem[il];
        mem->ops->ser_load(m, il, mem->state, (int32_t)n_tok, q);
        q += mem->ops->ser_bytes(m, il, mem->state, (int32_t)n_tok);
    }
    s->n_tokens = (int32_t)n_tok;
    if (s->n_used < s->n_tokens) s->n_used = s->n_tokens;
    return ENG_OK;
}

// ----------------------------------------------------------------------------
// Checkpoints

eng_ckpt *eng_seq_checkpoint(const eng_seq *s) {
    const int32_t L = s->m->info.n_layer;
    eng_ckpt *c = calloc(1, sizeof *c);
    if (!c) return NULL;
    c->fingerprint = s->m->fingerprint;
    c->n_tokens = s->n_tokens;
    c->n_layer = L;
    c->layer_off = calloc((size_t)L + 1, sizeof *c->layer_off);
    if (!c->layer_off) goto fail;
    for (int32_t il = 0; il < L; il++)
        c->layer_off[il + 1] =
            c->layer_off[il] + s->mem[il].ops->ckpt_bytes(s->m, il, s->mem[il].state, s->n_tokens);
    c->size = c->layer_off[L];
    if (c->size > 0 && !(c->payload = malloc(c->size))) goto fail;
    for (int32_t il = 0; il < L; il++)
        if (c->layer_off[il + 1] > c->layer_off[il])
            s->mem[il].ops->ckpt_save(s->m, il, s->mem[il].state, s->n_tokens, c->payload + c->layer_off[il]);
    return c;
fail:
    eng_ckpt_free(c);
    return NULL;
}

void eng_ckpt_free(eng_ckpt *c) {
    if (!c) return;
    free(c->layer_off);
    free(c->payload);
    free(c);
}

int32_t eng_ckpt_n_tokens(const eng_ckpt *c) { return c->n_tokens; }
size_t eng_ckpt_size(const eng_ckpt *c) { return c->size; }

int eng_seq_restore(eng_seq *s, const eng_ckpt *c) {
    if (!s || !c) return ENG_ERR_ARG;
    if (c->fingerprint != s->m->fingerprint || c->n_layer != s->m->info.n_layer) return ENG_ERR_MISMATCH;
    if (c->n_tokens > s->n_tokens) return ENG_ERR_RANGE;
    for (int32_t il = 0; il < c->n_layer; il++) {
        const size_t nb = c->layer_off[il + 1] - c->layer_off[il];
        s->mem[il].ops->ckpt_load(s->m, il, s->mem[il].state, c->n_tokens, nb ? c->payload + c->layer_off[il] : NULL);
    }
    s->n_tokens = c->n_tokens;
    return ENG_OK;
}
