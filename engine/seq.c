/*
 * engine/seq.c: sequence state: token ids and each layer's memory (full
 * attention: K and V rows indexed by position; sliding-window attention:
 * a ring of the window's cells (swa.h); recurrent: the Mamba-2 state and
 * conv state (ssm.h)), truncation rules, copy, byte-exact comparison,
 * serialisation and checkpoints.
 *
 * Invariants: positions [0, n_tokens) hold valid tokens and full-attention
 * memory; rows at [n_tokens, n_used) may hold stale values from before a
 * truncation and are never read, serialised or compared; rows >= n_used are
 * zero. A sliding-window ring holds valid cells for [valid_lo, n_tokens)
 * (swa.h), which always covers the window of n_tokens; a recurrent state is
 * the state after exactly n_tokens tokens. Every per-layer operation is one
 * switch on the layer kind over a per-kind memory struct (internal.h), so a
 * new kind adds one case per function.
 *
 * Serialised blob (version 1, little-endian, no padding):
 *   0   "KVRS"                       magic
 *   4   u32 version (1)
 *   8   u64 model fingerprint       (model file SHA-256 and numerics: eng_model_fingerprint)
 *   16  i32 n_tokens
 *   20  i32 n_layer
 *   24  n_layer x { u32 kind, u32 zero (checked), u64 nbytes }   the layer table
 *   ..  i32 tokens[n_tokens]
 *   ..  each layer's memory, nbytes each (ATTN: K rows [0, n_tokens) then
 *       V rows [0, n_tokens), G*E floats per row; ATTN_SWA: the window, K
 *       rows then V rows of [n - w, n), w = min(n, n_swa); RECURRENT: the
 *       recurrent state [NH, N, P] then the conv state [K-1, CD], floats)
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
// Per-kind memory: allocation, clearing, sizes

static int mem_alloc(eng_layer_mem *mem, const eng_model *m, int32_t il, int32_t n_ctx, int32_t slack) {
    mem->kind = m->layers[il].kind;
    const int64_t ge = (int64_t)m->info.n_head_kv * m->info.head_dim;
    switch (mem->kind) {
    case ENG_LAYER_ATTN:
        mem->attn.n_embd_kv = (int32_t)ge;
        mem->attn.k = calloc((size_t)n_ctx * (size_t)ge, sizeof(float));
        mem->attn.v = calloc((size_t)n_ctx * (size_t)ge, sizeof(float));
        return mem->attn.k && mem->attn.v ? ENG_OK : ENG_ERR_NOMEM;
    case ENG_LAYER_ATTN_SWA:
        return eng_swa_mem_alloc(&mem->swa, eng_swa_ring_cells(n_ctx, m->info.n_swa, slack), (int32_t)ge);
    case ENG_LAYER_RECURRENT: return eng_ssm_state_alloc(&mem->ssm, &m->ssm_hp);
    default: ENG_ASSERT(0);
    }
    return ENG_ERR_UNSUPPORTED;
}

static void mem_free(eng_layer_mem *mem) {
    switch (mem->kind) {
    case ENG_LAYER_ATTN:
        free(mem->attn.k);
        free(mem->attn.v);
        break;
    case ENG_LAYER_ATTN_SWA: eng_swa_mem_free(&mem->swa); break;
    case ENG_LAYER_RECURRENT: eng_ssm_state_free(&mem->ssm); break;
    default: ENG_ASSERT(0);
    }
}

/* Back to the empty state: full attention zeroes rows [0, n_used); the
 * ring and the recurrent state are zeroed whole. */
static void mem_clear(const eng_model *m, eng_layer_mem *mem, int32_t n_used) {
    switch (mem->kind) {
    case ENG_LAYER_ATTN: {
        const size_t b = sizeof(float) * (size_t)n_used * (size_t)mem->attn.n_embd_kv;
        memset(mem->attn.k, 0, b);
        memset(mem->attn.v, 0, b);
        break;
    }
    case ENG_LAYER_ATTN_SWA: eng_swa_mem_clear(&mem->swa); break;
    case ENG_LAYER_RECURRENT: eng_ssm_state_clear(&mem->ssm, &m->ssm_hp); break;
    default: ENG_ASSERT(0);
    }
}

/* Bytes of a layer's serialised memory at n tokens. */
static uint64_t mem_ser_bytes(const eng_model *m, const eng_layer_mem *mem, int32_t n) {
    switch (mem->kind) {
    case ENG_LAYER_ATTN: return 2u * sizeof(float) * (uint64_t)n * (uint64_t)mem->attn.n_embd_kv;
    case ENG_LAYER_ATTN_SWA: return eng_swa_window_bytes(&mem->swa, m->info.n_swa, n);
    case ENG_LAYER_RECURRENT: return eng_ssm_state_bytes(&m->ssm_hp);
    default: ENG_ASSERT(0);
    }
    return 0;
}

/* Bytes of a layer's checkpoint section at n tokens (its non-truncatable memory). */
static size_t mem_ckpt_bytes(const eng_model *m, const eng_layer_mem *mem, int32_t n) {
    switch (mem->kind) {
    case ENG_LAYER_ATTN: return 0;  /* truncation alone restores full attention */
    case ENG_LAYER_ATTN_SWA: return eng_swa_window_bytes(&mem->swa, m->info.n_swa, n);
    case ENG_LAYER_RECURRENT: return eng_ssm_state_bytes(&m->ssm_hp);
    default: ENG_ASSERT(0);
    }
    return 0;
}

/* Writes a layer's window or state at n tokens to dst (mem_ckpt_bytes of it). */
static void mem_save(const eng_model *m, const eng_layer_mem *mem, int32_t n, void *dst) {
    switch (mem->kind) {
    case ENG_LAYER_ATTN: break;
    case ENG_LAYER_ATTN_SWA: eng_swa_save_window(&mem->swa, m->info.n_swa, n, dst); break;
    case ENG_LAYER_RECURRENT: eng_ssm_state_save(&mem->ssm, &m->ssm_hp, dst); break;
    default: ENG_ASSERT(0);
    }
}

/* The inverse of mem_save for a sequence that will hold n tokens. */
static void mem_load(const eng_model *m, eng_layer_mem *mem, int32_t n, const void *src) {
    switch (mem->kind) {
    case ENG_LAYER_ATTN: break;
    case ENG_LAYER_ATTN_SWA: eng_swa_load_window(&mem->swa, m->info.n_swa, n, src); break;
    case ENG_LAYER_RECURRENT: eng_ssm_state_load(&mem->ssm, &m->ssm_hp, src); break;
    default: ENG_ASSERT(0);
    }
}

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
    for (int32_t il = 0; il < m->info.n_layer; il++)
        if (mem_alloc(&s->mem[il], m, il, n_ctx, swa_slack) != ENG_OK) goto fail;
    return s;
fail:
    eng_seq_free(s);
    return NULL;
}

void eng_seq_free(eng_seq *s) {
    if (!s) return;
    if (s->mem)
        for (int32_t il = 0; il < s->m->info.n_layer; il++) mem_free(&s->mem[il]);
    free(s->mem);
    free(s->tokens);
    eng_ws_free(&s->ws);
    free(s);
}

void eng_seq_reset(eng_seq *s) {
    for (int32_t il = 0; il < s->m->info.n_layer; il++) mem_clear(s->m, &s->mem[il], s->n_used);
    memset(s->tokens, 0, sizeof *s->tokens * (size_t)s->n_used);
    s->n_tokens = 0;
    s->n_used = 0;
}

const eng_model *eng_seq_model(const eng_seq *s) { return s->m; }
int32_t eng_seq_n_ctx(const eng_seq *s) { return s->n_ctx; }
int32_t eng_seq_n_tokens(const eng_seq *s) { return s->n_tokens; }
const int32_t *eng_seq_tokens(const eng_seq *s) { return s->tokens; }

int32_t eng_seq_swa_cells(const eng_seq *s) {
    for (int32_t il = 0; il < s->m->info.n_layer; il++)
        if (s->mem[il].kind == ENG_LAYER_ATTN_SWA) return s->mem[il].swa.n_cells;
    return 0;
}

// ----------------------------------------------------------------------------
// Truncation

bool eng_seq_can_truncate(const eng_seq *s, int32_t n) {
    if (n < 0 || n > s->n_tokens) return false;
    if (n == s->n_tokens || n == 0) return true;  /* nothing to do, or a reset */
    for (int32_t il = 0; il < s->m->info.n_layer; il++) {
        const eng_layer_mem *mem = &s->mem[il];
        switch (mem->kind) {
        case ENG_LAYER_ATTN: break;  /* any length */
        case ENG_LAYER_ATTN_SWA:
            if (!eng_swa_can_truncate(&mem->swa, s->m->info.n_swa, s->n_tokens, n)) return false;
            break;
        case ENG_LAYER_RECURRENT: return false;  /* only its own length */
        default: ENG_ASSERT(0);
        }
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
    /* Full attention: rows >= n become stale and are never read again;
     * windows: cells >= n are dropped and overwritten rows stay invalid. */
    for (int32_t il = 0; il < s->m->info.n_layer; il++)
        if (s->mem[il].kind == ENG_LAYER_ATTN_SWA) eng_swa_truncate(&s->mem[il].swa, s->n_tokens, n);
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
    for (int32_t il = 0; il < src->m->info.n_layer; il++) {
        const eng_layer_mem *a = &src->mem[il];
        eng_layer_mem *b = &dst->mem[il];
        switch (a->kind) {
        case ENG_LAYER_ATTN: {
            const size_t bytes = sizeof(float) * (size_t)n * (size_t)a->attn.n_embd_kv;
            memcpy(b->attn.k, a->attn.k, bytes);
            memcpy(b->attn.v, a->attn.v, bytes);
            break;
        }
        case ENG_LAYER_ATTN_SWA: eng_swa_copy(&b->swa, &a->swa, n); break;
        case ENG_LAYER_RECURRENT: eng_ssm_state_copy(&b->ssm, &a->ssm, &src->m->ssm_hp); break;
        default: ENG_ASSERT(0);
        }
    }
    dst->n_tokens = n;
    if (dst->n_used < n) dst->n_used = n;
    return ENG_OK;
}

/* First differing float (by bytes) of two rows of n floats, or -1. */
static int64_t first_diff(const float *a, const float *b, int64_t n) {
    if (memcmp(a, b, sizeof(float) * (size_t)n) == 0) return -1;
    for (int64_t i = 0; i < n; i++)
        if (memcmp(a + i, b + i, sizeof(float)) != 0) return i;
    return -1;
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
        switch (ma->kind) {
        case ENG_LAYER_ATTN: {
            const int64_t ge = ma->attn.n_embd_kv;
            for (int part = 0; part < 2; part++) {
                const float *ra = part ? ma->attn.v : ma->attn.k;
                const float *rb = part ? mb->attn.v : mb->attn.k;
                for (int32_t p = 0; p < n; p++) {
                    int64_t i = first_diff(ra + p * ge, rb + p * ge, ge);
                    if (i >= 0) {
                        out->part = part ? ENG_SEQ_PART_V : ENG_SEQ_PART_K;
                        out->layer = il;
                        out->pos = p;
                        out->index = i;
                        return ENG_OK;
                    }
                }
            }
            break;
        }
        case ENG_LAYER_ATTN_SWA: {
            /* the positions whose cells both sequences still hold */
            const eng_swa_mem *wa = &ma->swa, *wb = &mb->swa;
            const int32_t la = eng_swa_valid_lo(wa, a->n_tokens), lb = eng_swa_valid_lo(wb, b->n_tokens);
            const int32_t lo = la > lb ? la : lb;
            const int64_t ge = wa->n_embd_kv;
            for (int part = 0; part < 2; part++)
                for (int32_t p = lo; p < n; p++) {
                    const float *ra = part ? eng_swa_v(wa, p) : eng_swa_k(wa, p);
                    const float *rb = part ? eng_swa_v(wb, p) : eng_swa_k(wb, p);
                    int64_t i = first_diff(ra, rb, ge);
                    if (i >= 0) {
                        out->part = part ? ENG_SEQ_PART_V : ENG_SEQ_PART_K;
                        out->layer = il;
                        out->pos = p;
                        out->index = i;
                        return ENG_OK;
                    }
                }
            break;
        }
        case ENG_LAYER_RECURRENT: {
            if (a->n_tokens != b->n_tokens) break;  /* states at different positions */
            const eng_ssm_hparams *hp = &a->m->ssm_hp;
            const int64_t ns = eng_ssm_state_floats_ssm(hp), nc = eng_ssm_state_floats_conv(hp);
            int64_t i = first_diff(ma->ssm.ssm, mb->ssm.ssm, ns);
            if (i < 0 && (i = first_diff(ma->ssm.conv, mb->ssm.conv, nc)) >= 0) i += ns;
            if (i >= 0) {
                out->part = ENG_SEQ_PART_STATE;
                out->layer = il;
                out->index = i;
                return ENG_OK;
            }
            break;
        }
        default: ENG_ASSERT(0);
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
    for (int32_t il = 0; il < L; il++) n += (size_t)mem_ser_bytes(s->m, &s->mem[il], s->n_tokens);
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
        put_u32(q, (uint32_t)s->mem[il].kind);
        put_u32(q + 4, 0);
        put_u64(q + 8, mem_ser_bytes(s->m, &s->mem[il], n));
    }
    for (int32_t i = 0; i < n; i++, q += 4) put_u32(q, (uint32_t)s->tokens[i]);
    for (int32_t il = 0; il < L; il++) {
        const eng_layer_mem *mem = &s->mem[il];
        switch (mem->kind) {
        case ENG_LAYER_ATTN: {
            const size_t b = sizeof(float) * (size_t)n * (size_t)mem->attn.n_embd_kv;
            memcpy(q, mem->attn.k, b);
            memcpy(q + b, mem->attn.v, b);
            q += 2 * b;
            break;
        }
        case ENG_LAYER_ATTN_SWA:
        case ENG_LAYER_RECURRENT:
            mem_save(s->m, mem, n, q);
            q += mem_ser_bytes(s->m, mem, n);
            break;
        default: ENG_ASSERT(0);
        }
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
        if (get_u32(e) != (uint32_t)s->mem[il].kind) return ENG_ERR_MISMATCH;
        if (get_u64(e + 8) != mem_ser_bytes(m, &s->mem[il], (int32_t)n_tok)) return ENG_ERR_FORMAT;
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
        switch (mem->kind) {
        case ENG_LAYER_ATTN: {
            const size_t b = sizeof(float) * (size_t)n_tok * (size_t)mem->attn.n_embd_kv;
            memcpy(mem->attn.k, q, b);
            memcpy(mem->attn.v, q + b, b);
            q += 2 * b;
            break;
        }
        case ENG_LAYER_ATTN_SWA:
        case ENG_LAYER_RECURRENT:
            mem_load(m, mem, (int32_t)n_tok, q);
            q += mem_ser_bytes(m, mem, (int32_t)n_tok);
            break;
        default: ENG_ASSERT(0);
        }
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
        c->layer_off[il + 1] = c->layer_off[il] + mem_ckpt_bytes(s->m, &s->mem[il], s->n_tokens);
    c->size = c->layer_off[L];
    if (c->size > 0 && !(c->payload = malloc(c->size))) goto fail;
    for (int32_t il = 0; il < L; il++) {
        switch (s->mem[il].kind) {
        case ENG_LAYER_ATTN: break;  /* nothing: KV is truncatable */
        case ENG_LAYER_ATTN_SWA:
        case ENG_LAYER_RECURRENT:
            if (c->layer_off[il + 1] > c->layer_off[il])
                mem_save(s->m, &s->mem[il], s->n_tokens, c->payload + c->layer_off[il]);
            break;
        default: ENG_ASSERT(0);
        }
    }
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
        switch (s->mem[il].kind) {
        case ENG_LAYER_ATTN: break;  /* full attention: truncation below */
        case ENG_LAYER_ATTN_SWA:
        case ENG_LAYER_RECURRENT:
            if (c->layer_off[il + 1] > c->layer_off[il])
                mem_load(s->m, &s->mem[il], c->n_tokens, c->payload + c->layer_off[il]);
            else
                mem_load(s->m, &s->mem[il], c->n_tokens, NULL);  /* an empty window: lo = n */
            break;
        default: ENG_ASSERT(0);
        }
    }
    s->n_tokens = c->n_tokens;
    return ENG_OK;
}
