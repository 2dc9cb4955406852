/*
 * harness/policies/disk_anchor.c: ds4-server-style disk KV checkpoints
 * (seeds/000_*), on top of harness/diskcache (files) and harness/anchor
 * (placement rules).
 *
 * Per request:
 *   1. live cache: the in-memory sequence of the previous request is reused
 *      when the new prompt extends that request's whole prompt (a "live hit");
 *      any other overlap is a live miss (ds4: "live kv cache miss ...
 *      reason=token-mismatch");
 *   2. otherwise disk: the longest checkpoint file whose token prefix
 *      matches the prompt (at most n - 1 tokens, so one token is prefilled);
 *      its payload is an eng_seq_serialize blob, restored with
 *      eng_seq_deserialize (a corrupt file is quarantined and is a miss);
 *   3. during the prefill of the rest, checkpoints are written at the
 *      positions hx_anchor_plan gives for (n, cached): continued waypoints
 *      every --waypoint-every tokens, and the anchor at the end of the stable
 *      prefix (system + tools, or --anchor N), floored to the grid. By
 *      default the anchor is written whenever the hit lies below it (the
 *      report's fix); with --quirk anchor-cold-only only when nothing was
 *      cached (the reported bug).
 * Every checkpoint lies on the grid: the policy requires --align chunk.
 */
#include "policy.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "anchor.h"
#include "diskcache.h"
#include "status.h"
#include "util.h"

typedef struct da_state {
    hx_policy_config cfg;
    hx_diskcache    *dc;
    eng_seq         *seq;          /* the live sequence */
    int32_t          live_prompt;  /* prompt length of the request the live sequence served */
    hx_anchor_params ap;
    hx_anchor_ckpt  *plan;         /* positions to write during the current prefill */
    int32_t          n_plan, next;
    const int32_t   *tokens;       /* the current prompt (valid during the request) */
    void            *blob;         /* serialization buffer */
    size_t           blob_cap;
    int32_t          n_stored;
    int64_t          bytes_stored;
    double           store_ms;
    double           anchor_ms;
    int32_t          anchor_pos;   /* anchor written this request, or 0 */
} da_state;

static void da_destroy(void *state) {
    da_state *st = state;
    if (!st) return;
    hx_diskcache_close(st->dc);
    eng_seq_free(st->seq);
    free(st->plan);
    free(st->blob);
    free(st);
}

static int da_create(const hx_policy_config *cfg, void **state, char *err, size_t errlen) {
    if (cfg->pp.align != ENG_ALIGN_CHUNK) {
        eng_errf(err, errlen, "--policy disk-anchor: checkpoints lie on the grid; it needs --align chunk");
        return ENG_ERR_ARG;
    }
    if (!cfg->cache_dir || !*cfg->cache_dir) {
        eng_errf(err, errlen, "--policy disk-anchor: --cache-dir is required");
        return ENG_ERR_ARG;
    }
    da_state *st = calloc(1, sizeof *st);
    if (!st) return ENG_ERR_NOMEM;
    *state = st;
    st->cfg = *cfg;
    st->ap = hx_anchor_params_default();
    st->ap.chunk = cfg->pp.chunk;
    st->ap.waypoint_every = cfg->waypoint_every;
    st->ap.quirk_anchor_cold_only = (cfg->quirks & HX_QUIRK_ANCHOR_COLD_ONLY) != 0;
    if (cfg->waypoint_every % cfg->pp.chunk != 0) {
        eng_errf(err, errlen, "--waypoint-every: %d is not a multiple of the chunk %d", cfg->waypoint_every,
                 cfg->pp.chunk);
        return ENG_ERR_ARG;
    }
    int rc = hx_diskcache_open(cfg->cache_dir, cfg->cache_budget, &st->dc, err, errlen);
    if (rc != ENG_OK) return rc;
    st->seq = eng_seq_new(cfg->model, cfg->n_ctx);
    if (!st->seq) return ENG_ERR_NOMEM;
    return ENG_OK;
}

static int da_acquire(void *state, const int32_t *tokens, int32_t n, int32_t stable_end, hx_acquire *out) {
    da_state *st = state;
    memset(out, 0, sizeof *out);
    out->seq = st->seq;
    out->slot = -1;
    st->tokens = tokens;
    st->n_stored = 0;
    st->bytes_stored = 0;
    st->store_ms = 0;
    st->anchor_ms = 0;
    st->anchor_pos = 0;
    char err[256];

    int32_t nl = eng_seq_n_tokens(st->seq);
    int32_t lcp = hx_lcp(eng_seq_tokens(st->seq), nl, tokens, n);
    out->lcp = lcp;
    out->best = eng_seq_tokens(st->seq);
    out->n_best = nl;
    int32_t cached = 0;
    if (nl > 0 && lcp >= st->live_prompt) {                     /* 1. live hit */
        cached = hx_policy_reuse_len(&st->cfg, lcp, st->live_prompt, n);
        eng_seq_truncate(st->seq, cached);
        snprintf(out->note, sizeof out->note, "live kv cache hit: %d tokens", cached);
    } else {                                                   /* 2. disk */
        hx_diskcache_hit hit = {0};
        int rc = hx_diskcache_lookup(st->dc, eng_model_fingerprint(st->cfg.model), tokens, n, n - 1, &hit, err,
                                     sizeof err);
        eng_seq_reset(st->seq);
        if (rc == ENG_OK && hit.n_tokens > 0 &&
            eng_seq_deserialize(st->seq, hit.payload, hit.payload_size) == ENG_OK &&
            eng_seq_n_tokens(st->seq) == hit.n_tokens) {
            cached = hit.n_tokens;
            out->bytes_restored = (int64_t)hit.payload_size;
            snprintf(out->note, sizeof out->note, "live kv cache miss live=%d prompt=%d common=%d; "
                     "disk kv cache hit tokens=%d", nl, n, lcp, cached);
        } else {
            eng_seq_reset(st->seq);
            snprintf(out->note, sizeof out->note, "live kv cache miss live=%d prompt=%d common=%d; disk miss",
                     nl, n, lcp);
        }
        hx_diskcache_hit_free(&hit);
    }
    out->n_reused = cached;

    int32_t anchor_at = st->cfg.anchor_tokens >= 0 ? st->cfg.anchor_tokens : (stable_end > 0 ? stable_end : 0);
    st->ap.anchor = hx_anchor_position(anchor_at, st->cfg.pp.chunk);
    if (st->ap.anchor < 0) st->ap.anchor = 0;
    int32_t cap = hx_anchor_plan_max(&st->ap, n);
    hx_anchor_ckpt *plan = realloc(st->plan, sizeof *plan * (size_t)(cap > 0 ? cap : 1));
    if (!plan) return ENG_ERR_NOMEM;
    st->plan = plan;
    st->next = 0;
    if (hx_anchor_plan(&st->ap, n, cached, st->plan, cap, &st->n_plan, err, sizeof err) != ENG_OK) {
        eng_errf(out->note, sizeof out->note, "anchor plan: %s", err);
        st->n_plan = 0;
    }
    return ENG_OK;
}

static void da_on_chunk(void *state, eng_seq *s, int32_t n_tokens) {
    da_state *st = state;
    while (st->next < st->n_plan && st->plan[st->next].pos < n_tokens) st->next++;
    if (st->next >= st->n_plan || st->plan[st->next].pos != n_tokens) return;
    const hx_anchor_ckpt *ck = &st->plan[st->next++];
    double t0 = eng_now_s();
    size_t need = eng_seq_serialized_size(s), got = 0;
    if (need > st->blob_cap) {
        void *b = realloc(st->blob, need);
        if (!b) return;
        st->blob = b;
        st->blob_cap = need;
    }
    if (eng_seq_serialize(s, st->blob, st->blob_cap, &got) != ENG_OK) return;
    size_t written = 0;
    int rc = hx_diskcache_store(st->dc, eng_model_fingerprint(st->cfg.model), eng_seq_tokens(s), n_tokens, st->blob,
                                got, &written, NULL, 0);
    double ms = 1e3 * (eng_now_s() - t0);
    if (rc == HX_DISKCACHE_STORED) {
        st->n_stored++;
        st->bytes_stored += (int64_t)written;
    }
    st->store_ms += ms;
    if (ck->kind & HX_ANCHOR_KIND_ANCHOR) {
        st->anchor_ms += ms;
        st->anchor_pos = n_tokens;
    }
}

static int da_release(void *state, eng_seq *s, int32_t n_prompt, hx_release *out) {
    da_state *st = state;
    st->live_prompt = n_prompt;
    out->n_stored = st->n_stored;
    out->bytes_stored = st->bytes_stored;
    out->store_ms = st->store_ms;
    out->anchor_ms = st->anchor_ms;
    out->anchor_pos = st->anchor_pos;
    st->tokens = NULL;
    return ENG_OK;
}

const hx_policy_ops hx_policy_disk_anchor = {
    .name = "disk-anchor",
    .create = da_create,
    .acquire = da_acquire,
    .on_chunk = da_on_chunk,
    .release = da_release,
    .destroy = da_destroy,
};
