/*
 * harness/cache/coldcache.c: an LRU map from prompt keys to cold results.
 * A linear array of entries is enough: an experiment holds at most a few
 * hundred prompts, and each lookup costs far less than one forward pass.
 */
#include "coldcache.h"

#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "status.h"

typedef struct entry {
    XXH128_hash_t  key;
    int32_t       *tokens;   /* (n) */
    int32_t        n;
    hx_cold_result r;
    int64_t        bytes;
    uint64_t       last_used;
} entry;

struct hx_coldcache {
    entry   *e;
    int32_t  n, cap;
    int64_t  budget;
    uint64_t clock;
    hx_coldcache_stats st;
};

int hx_cold_result_alloc(hx_cold_result *r, int32_t n_decode, int32_t n_vocab) {
    memset(r, 0, sizeof *r);
    r->logits = calloc((size_t)(1 + n_decode) * (size_t)n_vocab, sizeof(float));
    r->greedy = calloc((size_t)(n_decode > 0 ? n_decode : 1), sizeof(int32_t));
    r->n_decode = n_decode;
    r->n_vocab = n_vocab;
    if (!r->logits || !r->greedy) { hx_cold_result_free(r); return ENG_ERR_NOMEM; }
    return ENG_OK;
}

void hx_cold_result_free(hx_cold_result *r) {
    if (!r) return;
    free(r->logits);
    free(r->greedy);
    r->logits = NULL;
    r->greedy = NULL;
}

hx_coldcache *hx_coldcache_new(int64_t budget_bytes) {
    hx_coldcache *c = calloc(1, sizeof *c);
    if (c) c->budget = budget_bytes;
    return c;
}

void hx_coldcache_free(hx_coldcache *c) {
    if (!c) return;
    for (int32_t i = 0; i < c->n; i++) {
        free(c->e[i].tokens);
        hx_cold_result_free(&c->e[i].r);
    }
    free(c->e);
    free(c);
}

static XXH128_hash_t make_key(const eng_model *m, const eng_prefill_params *pp, int32_t n_decode,
                              const int32_t *tokens, int32_t n) {
    /* packed explicitly: a struct would hash its padding bytes. A cold
     * prefill starts at position 0, so align chunk with C and align none with
     * ubatch C cut it into the same chunks: the key holds that length only. */
    int64_t hdr[4] = {(int64_t)eng_model_fingerprint(m), pp->align == ENG_ALIGN_NONE ? pp->ubatch : pp->chunk,
                      n_decode, n};
    XXH3_state_t *s = XXH3_createState();
    ENG_ASSERT(s);
    XXH3_128bits_reset(s);
    XXH3_128bits_update(s, &hdr, sizeof hdr);
    XXH3_128bits_update(s, tokens, sizeof(int32_t) * (size_t)n);
    XXH128_hash_t h = XXH3_128bits_digest(s);
    XXH3_freeState(s);
    return h;
}

static entry *find(hx_coldcache *c, XXH128_hash_t k, const int32_t *tokens, int32_t n) {
    for (int32_t i = 0; i < c->n; i++) {
        entry *e = &c->e[i];
        if (XXH128_isEqual(e->key, k) && e->n == n && !memcmp(e->tokens, tokens, sizeof(int32_t) * (size_t)n))
            return e;
    }
    return NULL;
}

const hx_cold_result *hx_coldcache_get(hx_coldcache *c, const eng_model *m, const eng_prefill_params *pp,
                                       int32_t n_decode, const int32_t *tokens, int32_t n) {
    if (!c) return NULL;
    entry *e = find(c, make_key(m, pp, n_decode, tokens, n), tokens, n);
    if (!e) { c->st.misses++; return NULL; }
    e->last_used = ++c->clock;
    c->st.hits++;
    c->st.saved_ms += e->r.ttft_ms + e->r.decode_ms;
    return &e->r;
}

static void evict_lru(hx_coldcache *c) {
    int32_t lru = 0;
    for (int32_t i = 1; i < c->n; i++) if (c->e[i].last_used < c->e[lru].last_used) lru = i;
    c->st.bytes -= c->e[lru].bytes;
    c->st.evictions++;
    free(c->e[lru].tokens);
    hx_cold_result_free(&c->e[lru].r);
    c->e[lru] = c->e[--c->n];
}

const hx_cold_result *hx_coldcache_put(hx_coldcache *c, const eng_model *m, const eng_prefill_params *pp,
                                       const int32_t *tokens, int32_t n, const hx_cold_result *r) {
    if (!c) return NULL;
    int64_t bytes = (int64_t)sizeof(float) * (1 + r->n_decode) * r->n_vocab +
                    (int64_t)sizeof(int32_t) * (r->n_decode + n);
    if (bytes > c->budget) return NULL;
    while (c->n > 0 && c->st.bytes + bytes > c->budget) evict_lru(c);
    if (c->n == c->cap) {
        int32_t cap = c->cap ? 2 * c->cap : 64;
        entry *g = realloc(c->e, sizeof *g * (size_t)cap);
        if (!g) return NULL;
        c->e = g;
        c->cap = cap;
    }
    entry e = {0};
    e.key = make_key(m, pp, r->n_decode, tokens, n);
    e.tokens = malloc(sizeof(int32_t) * (size_t)(n > 0 ? n : 1));
    if (!e.tokens || hx_cold_result_alloc(&e.r, r->n_decode, r->n_vocab) != ENG_OK) {
        free(e.tokens);
        return NULL;
    }
    memcpy(e.tokens, tokens, sizeof(int32_t) * (size_t)n);
    e.n = n;
    memcpy(e.r.logits, r->logits, sizeof(float) * (size_t)(1 + r->n_decode) * (size_t)r->n_vocab);
    memcpy(e.r.greedy, r->greedy, sizeof(int32_t) * (size_t)(r->n_decode > 0 ? r->n_decode : 0));
    e.r.ttft_ms = r->ttft_ms;
    e.r.ttft_min_ms = r->ttft_min_ms;
    e.r.ttft_max_ms = r->ttft_max_ms;
    e.r.n_repeat = r->n_repeat;
    e.r.decode_ms = r->decode_ms;
    e.r.flops = r->flops;
    e.r.state_hash = r->state_hash;
    e.bytes = bytes;
    e.last_used = ++c->clock;
    c->e[c->n++] = e;
    c->st.bytes += bytes;
    return &c->e[c->n - 1].r;
}

hx_coldcache_stats hx_coldcache_get_stats(const hx_coldcache *c) {
    hx_coldcache_stats z = {0};
    return c ? c->st : z;
}
