/*
 * harness/probe/reuse.c: the expected reuse of a live server's prefix cache
 * (see reuse.h for each engine's rule and where it comes from).
 */
#include "reuse.h"

#include <stdlib.h>
#include <string.h>

#include "policy.h"
#include "status.h"

const char *hx_engine_name(hx_engine e) {
    switch (e) {
    case HX_ENGINE_LLAMA:    return "llama.cpp";
    case HX_ENGINE_VLLM:     return "vllm";
    case HX_ENGINE_SGLANG:   return "sglang";
    case HX_ENGINE_KVREPLAY: return "kvreplay";
    default:                 return "unknown";
    }
}

int hx_engine_from_name(const char *name) {
    for (int e = HX_ENGINE_UNKNOWN; e <= HX_ENGINE_KVREPLAY; e++)
        if (name && !strcmp(name, hx_engine_name((hx_engine)e))) return e;
    return -1;
}

void hx_reuse_rule_default(hx_reuse_rule *r, hx_engine e) {
    memset(r, 0, sizeof *r);
    r->engine = e;
    r->grid = 1;
    switch (e) {
    case HX_ENGINE_LLAMA:    break;
    case HX_ENGINE_VLLM:     r->tree = true, r->grid = 16; break;
    case HX_ENGINE_SGLANG:   r->tree = true; break;
    case HX_ENGINE_KVREPLAY: r->grid = 64, r->cap_prompt = true; break;
    default:                 r->tree = true; break;
    }
}

void hx_held_clear(hx_held *h) {
    for (int32_t i = 0; i < h->n; i++) free(h->v[i].ids);
    h->n = 0;
}

void hx_held_free(hx_held *h) {
    hx_held_clear(h);
    free(h->v);
    memset(h, 0, sizeof *h);
}

int hx_held_add(hx_held *h, const hx_reuse_rule *rule, const int32_t *prompt, int32_t n_prompt, const int32_t *gen,
                int32_t n_gen) {
    int32_t g = n_gen > 0 ? n_gen - 1 : 0;  /* the last generated token was sampled, never evaluated */
    int32_t *ids = malloc(sizeof(int32_t) * (size_t)(n_prompt + g + 1));
    if (!ids) return ENG_ERR_NOMEM;
    if (n_prompt) memcpy(ids, prompt, sizeof(int32_t) * (size_t)n_prompt);
    if (g) memcpy(ids + n_prompt, gen, sizeof(int32_t) * (size_t)g);
    if (!rule->tree) hx_held_clear(h);
    if (h->n == h->cap) {
        int32_t cap = h->cap ? 2 * h->cap : 8;
        hx_held_seq *v = realloc(h->v, sizeof *v * (size_t)cap);
        if (!v) {
            free(ids);
            return ENG_ERR_NOMEM;
        }
        h->v = v;
        h->cap = cap;
    }
    h->v[h->n++] = (hx_held_seq){ids, n_prompt + g, n_prompt};
    return ENG_OK;
}

int32_t hx_reuse_cap(const hx_reuse_rule *rule, int32_t lcp, int32_t n_cached_prompt, int32_t n) {
    int32_t r = lcp;
    if (rule->cap_prompt && r > n_cached_prompt) r = n_cached_prompt;
    if (r > n - 1) r = n - 1;
    if (r < 0) r = 0;
    if (rule->grid > 1) r = r / rule->grid * rule->grid;
    return r;
}

int32_t hx_reuse_expected(const hx_reuse_rule *rule, const hx_held *h, const int32_t *ids, int32_t n, int32_t *lcp) {
    int32_t best = 0, best_lcp = 0;
    for (int32_t i = 0; i < h->n; i++) {
        int32_t l = hx_lcp(ids, n, h->v[i].ids, h->v[i].n);
        int32_t r = hx_reuse_cap(rule, l, h->v[i].n_prompt, n);
        if (l > best_lcp) best_lcp = l;
        if (r > best) best = r;
    }
    if (lcp) *lcp = best_lcp;
    return best;
}
