/*
 * harness/cache/policies/slot_lcp.c: llama.cpp-style server slots.
 *
 * Each slot holds a live sequence (prompt + teacher-forced response of the
 * last request it served), the length of that prompt, and up to
 * ctx_checkpoints context checkpoints taken on the grid during prefill.
 * Optionally a host prompt cache (cache_ram bytes, like llama.cpp's
 * --cache-ram) keeps full-state snapshots at checkpoint positions.
 *
 * Slot selection (llama.cpp's get_available_slot): the slot with the best
 * similarity sim = lcp / n_prompt above sim_threshold; otherwise the least
 * recently used slot. f_keep = lcp / n_cached is logged as llama.cpp does.
 *
 * Restoring the reuse target r (hx_policy_reuse_len):
 *   1. the live memory can be truncated to r (full attention, or sliding
 *      window cells still present): truncate;
 *   2. otherwise the host prompt cache: the longest snapshot of at most r
 *      tokens whose tokens match the prompt (the "similarity fallback"),
 *      unless a context checkpoint reaches as far. A prompt whose full state
 *      (at its last grid point) exceeds cache_ram is not cached at all;
 *   3. otherwise the context checkpoints: the newest one whose n_tokens does
 *      not exceed r (seed 002's proposed fix), restored plus truncation of
 *      the full-attention KV; checkpoints past the reuse point are erased;
 *   4. otherwise full re-processing from an empty state.
 * Quirks (off by default) reproduce the issue reports:
 *   full-reprocess (seed 002): memory that cannot be truncated forces full
 *     re-processing, checkpoints never consulted;
 *   swa-threshold (seed 004): step 3 applies the sliding-window threshold
 *     to recurrent memory: pos_min_thold = max(0, n_past - max(1, n_swa))
 *     compared against the live memory's pos_min, which for recurrent state
 *     is the whole sequence: no checkpoint qualifies, n_past is reset to 0
 *     and every checkpoint past it is erased. Only the prompt cache (step 2)
 *     still works, while its snapshots fit cache_ram: so reuse survives at
 *     short context and fails at long context;
 *   offgrid-checkpoint: the checkpoint is taken at the prompt's end rather
 *     than its last grid point, and restores from it are not floored to the
 *     grid, so the suffix is prefilled in shifted chunks (diverges with blas).
 *
 * Requests in flight (serve --parallel N, llama-server's -np N): a slot is
 * busy from acquire to release and never chosen meanwhile; selection runs
 * over the idle slots only, so --slots must be at least N. The prompt cache
 * is shared by every slot, as llama-server's is.
 */
#include "options.h"
#include "policy.h"

#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "blockpool.h"
#include "prefixset.h"
#include "status.h"
#include "store.h"
#include "util.h"

// ----------------------------------------------------------------------------
// Options and quirks (kvreplay replay --help lists them)

typedef struct slot_opts {
    int32_t n_slots;           /* slots (llama.cpp --parallel) */
    double  sim_threshold;     /* llama.cpp --slot-prompt-similarity */
    int32_t ctx_checkpoints;   /* max context checkpoints per slot (llama.cpp --ctx-checkpoints) */
    int32_t checkpoint_every;  /* tokens between prefill checkpoints (multiple of C), 0 = only the last grid point */
    int64_t cache_ram;         /* host prompt-cache budget in bytes (llama.cpp --cache-ram), 0 = off */
} slot_opts;

static const slot_opts slot_defaults = {.n_slots = 1, .sim_threshold = 0.1, .ctx_checkpoints = 8};

static const hx_option slot_options[] = {
    {"--slots", NULL, "N", "slots (default 1)", HX_OPT_INT, offsetof(slot_opts, n_slots), 1, 64, NULL},
    {"--sim-threshold", NULL, "X", "LCP similarity threshold (default 0.1)", HX_OPT_DOUBLE,
     offsetof(slot_opts, sim_threshold), 0, 1, NULL},
    {"--ctx-checkpoints", NULL, "N", "checkpoints kept per slot (default 8)", HX_OPT_INT,
     offsetof(slot_opts, ctx_checkpoints), 0, 4096, NULL},
    {"--checkpoint-every", NULL, "N", "checkpoint every N prefill tokens (multiple of C; default 0:\n"
     "only the last grid point of each prompt)", HX_OPT_INT, offsetof(slot_opts, checkpoint_every), 0, 1 << 24, NULL},
    {"--cache-ram", NULL, "MIB", "host prompt-cache budget in MiB (default 0: off); a\n"
     "prompt whose full state exceeds it is not cached at all", HX_OPT_MIB, offsetof(slot_opts, cache_ram), 0,
     1 << 20, NULL},
    {0},
};

/* Bit k of hx_policy_config.quirks is slot_quirks[k]. */
enum { Q_FULL_REPROCESS = 1u << 0, Q_SWA_THRESHOLD = 1u << 1, Q_OFFGRID_CHECKPOINT = 1u << 2, Q_SYSTEM_BLIND = 1u << 3 };
static const hx_quirk slot_quirks[] = {
    {"full-reprocess", "memory that cannot be truncated forces full re-processing", "seeds/002"},
    {"swa-threshold", "the SWA pos_min threshold applied to recurrent memory: no checkpoint qualifies",
     "seeds/004"},
    {"offgrid-checkpoint", "the checkpoint at the prompt's end, off the grid (diverges with blas)",
     "llama.cpp's context checkpoints"},
    {"system-blind", "a planted fault (no report): prompts matched from the system prompt's end, its stale KV reused",
     "kvreplay probe's tests"},
    {0},
};

static void slot_record(const void *opts, hx_run_meta *meta) {
    const slot_opts *o = opts;
    meta->pol.threshold = o->sim_threshold;
    meta->pol.n_slots = o->n_slots;
    meta->pol.ctx_checkpoints = o->ctx_checkpoints;
    meta->pol.checkpoint_every = o->checkpoint_every;
    meta->pol.cache_ram = o->cache_ram;
}

// ----------------------------------------------------------------------------
// State

typedef struct snapshot {      /* host prompt-cache entry */
    int32_t *tokens;           /* (n_tokens) */
    int32_t  n_tokens;
    void    *blob;             /* eng_seq_serialize at n_tokens */
    size_t   size;
    uint64_t last_used;
    uint64_t request;          /* the request during which it was stored */
} snapshot;

typedef struct slot {
    eng_seq   *seq;
    int32_t    n_prompt;       /* prompt length of the request it last served */
    uint64_t   last_used;
    eng_ckpt **ckpts;          /* ascending n_tokens, at most ctx_checkpoints */
    int32_t    n_ckpts;
    /* the request it serves, between acquire and release */
    bool       busy;
    uint64_t   request;        /* its number (acquires so far) */
    int32_t    prompt_end;     /* its n_prompt (offgrid-checkpoint quirk) */
    double     store_ms;       /* time spent storing during it */
    int32_t    n_stored;
    int64_t    bytes_stored;
} slot;

typedef struct slot_state {
    hx_policy_config cfg;
    slot_opts o;
    slot     *slots;
    int32_t   n_slots;
    snapshot *snaps;
    int32_t   n_snaps;
    int64_t   snap_bytes;
    uint64_t  clock;
    uint64_t  request;         /* counts acquires */
    hx_acquire_hint hint;      /* the next request's id_slot and cache_prompt (kvreplay serve) */
} slot_state;

static void slot_clear_ckpts(slot *sl, int32_t keep_upto) {
    int32_t w = 0;
    for (int32_t i = 0; i < sl->n_ckpts; i++) {
        if (eng_ckpt_n_tokens(sl->ckpts[i]) <= keep_upto) sl->ckpts[w++] = sl->ckpts[i];
        else eng_ckpt_free(sl->ckpts[i]);
    }
    sl->n_ckpts = w;
}

static int slot_create(const hx_policy_config *cfg, void **state, char *err, size_t errlen) {
    slot_state *st = calloc(1, sizeof *st);
    if (!st) return ENG_ERR_NOMEM;
    st->cfg = *cfg;
    st->o = *(const slot_opts *)cfg->opts;
    if (st->o.n_slots < 1) st->o.n_slots = 1;
    if (st->o.ctx_checkpoints < 0) st->o.ctx_checkpoints = 0;
    if (st->o.checkpoint_every < 0 ||
        (st->o.checkpoint_every > 0 && st->o.checkpoint_every % st->cfg.pp.chunk != 0)) {
        eng_errf(err, errlen, "--checkpoint-every: %d is not a multiple of the chunk %d",
                 st->o.checkpoint_every, st->cfg.pp.chunk);
        free(st);
        return ENG_ERR_ARG;
    }
    if (st->o.n_slots < cfg->n_parallel) {
        eng_errf(err, errlen, "slot-lcp: --slots %d is fewer than the %d requests in flight at once (--parallel): "
                 "every request needs a slot of its own", st->o.n_slots, cfg->n_parallel);
        free(st);
        return ENG_ERR_ARG;
    }
    st->n_slots = st->o.n_slots;
    st->hint.id_slot = -1;
    st->slots = calloc((size_t)st->n_slots, sizeof *st->slots);
    if (!st->slots) { free(st); return ENG_ERR_NOMEM; }
    for (int32_t i = 0; i < st->n_slots; i++) {
        st->slots[i].seq = eng_seq_new(cfg->model, cfg->n_ctx);
        st->slots[i].ckpts = calloc((size_t)st->o.ctx_checkpoints + 1, sizeof(eng_ckpt *));
        if (!st->slots[i].seq || !st->slots[i].ckpts) {
            eng_errf(err, errlen, "slot-lcp: cannot allocate slot %d (%d positions)", i, cfg->n_ctx);
            *state = st;
            return ENG_ERR_NOMEM;  /* caller destroys */
        }
    }
    *state = st;
    return ENG_OK;
}

static void snap_free(snapshot *s) {
    free(s->tokens);
    free(s->blob);
}

static void slot_destroy(void *state) {
    slot_state *st = state;
    if (!st) return;
    for (int32_t i = 0; st->slots && i < st->n_slots; i++) {
        eng_seq_free(st->slots[i].seq);
        if (st->slots[i].ckpts) slot_clear_ckpts(&st->slots[i], -1);
        free(st->slots[i].ckpts);
    }
    for (int32_t i = 0; i < st->n_snaps; i++) snap_free(&st->snaps[i]);
    free(st->snaps);
    free(st->slots);
    free(st);
}

// ----------------------------------------------------------------------------
// Host prompt cache: full-state snapshots under a byte budget, LRU eviction

static void snap_evict_until(slot_state *st, int64_t need) {
    while (st->n_snaps > 0 && st->snap_bytes + need > st->o.cache_ram) {
        int32_t lru = 0;
        for (int32_t i = 1; i < st->n_snaps; i++)
            if (st->snaps[i].last_used < st->snaps[lru].last_used) lru = i;
        st->snap_bytes -= (int64_t)st->snaps[lru].size;
        snap_free(&st->snaps[lru]);
        st->snaps[lru] = st->snaps[--st->n_snaps];
    }
}

static void snap_store(slot_state *st, slot *sl, const eng_seq *s) {
    size_t size = eng_seq_serialized_size(s);
    if (st->o.cache_ram <= 0 || (int64_t)size > st->o.cache_ram) return;
    int32_t n = eng_seq_n_tokens(s);
    for (int32_t i = 0; i < st->n_snaps; i++)  /* already cached: touch */
        if (st->snaps[i].n_tokens == n && !memcmp(st->snaps[i].tokens, eng_seq_tokens(s), sizeof(int32_t) * (size_t)n)) {
            st->snaps[i].last_used = ++st->clock;
            return;
        }
    snap_evict_until(st, (int64_t)size);
    snapshot sn = {0};
    sn.tokens = malloc(sizeof(int32_t) * (size_t)(n > 0 ? n : 1));
    sn.blob = malloc(size);
    snapshot *grown = realloc(st->snaps, sizeof *st->snaps * (size_t)(st->n_snaps + 1));
    if (!sn.tokens || !sn.blob || !grown) { snap_free(&sn); if (grown) st->snaps = grown; return; }
    st->snaps = grown;
    memcpy(sn.tokens, eng_seq_tokens(s), sizeof(int32_t) * (size_t)n);
    sn.n_tokens = n;
    size_t written = 0;
    if (eng_seq_serialize(s, sn.blob, size, &written) != ENG_OK) { snap_free(&sn); return; }
    sn.size = written;
    sn.last_used = ++st->clock;
    sn.request = sl->request;
    st->snaps[st->n_snaps++] = sn;
    st->snap_bytes += (int64_t)written;
    sl->n_stored++;
    sl->bytes_stored += (int64_t)written;
}

/* A prompt whose full state exceeds cache_ram is not cached at all, as
 * llama.cpp's prompt cache skips a prompt larger than its limit: the
 * snapshots stored while prefilling it are dropped again. */
static void snap_drop_request(slot_state *st, slot *sl) {
    for (int32_t i = 0; i < st->n_snaps;) {
        if (st->snaps[i].request != sl->request) { i++; continue; }
        st->snap_bytes -= (int64_t)st->snaps[i].size;
        sl->n_stored--;
        sl->bytes_stored -= (int64_t)st->snaps[i].size;
        snap_free(&st->snaps[i]);
        st->snaps[i] = st->snaps[--st->n_snaps];
    }
}

/* The longest snapshot of at most r tokens that is a prefix of the prompt. */
static snapshot *snap_find(slot_state *st, const int32_t *tokens, int32_t n, int32_t r) {
    snapshot *best = NULL;
    for (int32_t i = 0; i < st->n_snaps; i++) {
        snapshot *sn = &st->snaps[i];
        if (sn->n_tokens > r || sn->n_tokens > n || (best && sn->n_tokens <= best->n_tokens)) continue;
        if (!memcmp(sn->tokens, tokens, sizeof(int32_t) * (size_t)sn->n_tokens)) best = sn;
    }
    return best;
}

// ----------------------------------------------------------------------------
// Acquire: pick a slot, restore the reusable prefix

/* The newest context checkpoint whose n_tokens does not exceed r. */
static eng_ckpt *newest_ckpt_upto(const slot *sl, int32_t r) {
    for (int32_t i = sl->n_ckpts - 1; i >= 0; i--)
        if (eng_ckpt_n_tokens(sl->ckpts[i]) <= r) return sl->ckpts[i];
    return NULL;
}

/* llama.cpp's get_available_slot, on each slot's common prefix with the
 * prompt (lcp[i], 0 for an empty slot) and its last use, among the idle
 * slots (busy NULL: all are): the slot of best similarity lcp / n above the
 * threshold, else the least recently used (an empty slot, last used 0,
 * first); -1 when every slot is busy. Shared by replay and simulate. */
static int32_t pick_slot(int32_t n_slots, const int32_t *lcp, const uint64_t *last_used, const bool *busy, int32_t n,
                         double threshold, double *sim_out) {
    int32_t best = -1;
    double sim_best = 0.0;
    for (int32_t i = 0; i < n_slots; i++) {
        double sim = n > 0 ? (double)lcp[i] / (double)n : 0.0;
        if ((!busy || !busy[i]) && lcp[i] > 0 && sim > sim_best && sim > threshold) { best = i; sim_best = sim; }
    }
    *sim_out = sim_best;
    if (best >= 0) return best;
    int32_t lru = -1;
    for (int32_t i = 0; i < n_slots; i++)
        if ((!busy || !busy[i]) && (lru < 0 || last_used[i] < last_used[lru])) lru = i;
    return lru;
}

/* The idle slot for a prompt, or NULL when every slot serves a request. */
static slot *select_slot(slot_state *st, const int32_t *tokens, int32_t n, double *sim_out) {
    int32_t lcp[64];
    uint64_t last[64];
    bool busy[64];
    for (int32_t i = 0; i < st->n_slots; i++) {
        const slot *sl = &st->slots[i];
        lcp[i] = hx_lcp(eng_seq_tokens(sl->seq), eng_seq_n_tokens(sl->seq), tokens, n);
        last[i] = sl->last_used;
        busy[i] = sl->busy;
    }
    int32_t k = pick_slot(st->n_slots, lcp, last, busy, n, st->o.sim_threshold, sim_out);
    return k >= 0 ? &st->slots[k] : NULL;
}

/* llama-server's id_slot (the request names its slot) and cache_prompt: false
 * (n_past = 0: nothing reused; the slot then holds the new prompt). */
static void slot_hint(void *state, const hx_acquire_hint *h) { ((slot_state *)state)->hint = *h; }

static int32_t slot_count(const void *state) { return ((const slot_state *)state)->n_slots; }

static int64_t slot_tokens(const void *state, int32_t i) {
    return eng_seq_n_tokens(((const slot_state *)state)->slots[i].seq);
}

/* POST /slots/ID?action=erase: the slot's memory and its checkpoints (llama-server:
 * llama_memory_seq_rm of the slot and its prompt cleared); the prompt cache stays. */
static int64_t slot_erase(void *state, int32_t i) {
    slot *sl = &((slot_state *)state)->slots[i];
    if (sl->busy) return ENG_ERR_RANGE;  /* it serves a request: llama-server's "Slot is busy" */
    int64_t n = eng_seq_n_tokens(sl->seq);
    eng_seq_reset(sl->seq);
    slot_clear_ckpts(sl, -1);
    sl->n_prompt = 0;
    return n;
}

static int slot_acquire(void *state, const int32_t *tokens, int32_t n, int32_t stable_end, hx_acquire *out) {
    slot_state *st = state;
    memset(out, 0, sizeof *out);
    hx_acquire_hint h = st->hint;
    st->hint = (hx_acquire_hint){.id_slot = -1};
    double sim = 0.0;
    slot *sl = h.id_slot >= 0 && h.id_slot < st->n_slots ? &st->slots[h.id_slot] : select_slot(st, tokens, n, &sim);
    if (!sl || sl->busy) return ENG_ERR_RANGE;  /* the slot asked for serves another request (the caller waits) */
    sl->busy = true;
    sl->request = ++st->request;
    sl->prompt_end = n;
    sl->store_ms = 0.0;
    sl->n_stored = 0;
    sl->bytes_stored = 0;
    sl->last_used = ++st->clock;

    eng_seq *s = sl->seq;
    int32_t nc = eng_seq_n_tokens(s);
    int32_t lcp = hx_lcp(eng_seq_tokens(s), nc, tokens, n);
    if ((st->cfg.quirks & Q_SYSTEM_BLIND) && stable_end > lcp && stable_end <= nc && sl->n_prompt >= stable_end)
        lcp = stable_end + hx_lcp(eng_seq_tokens(s) + stable_end, nc - stable_end, tokens + stable_end, n - stable_end);
    out->seq = s;
    out->slot = (int32_t)(sl - st->slots);
    out->lcp = lcp;
    out->best = eng_seq_tokens(s);
    out->n_best = nc;
    out->sim = (double)lcp / (double)n;
    out->f_keep = nc > 0 ? (double)lcp / (double)nc : 0.0;
    out->n_checkpoints = sl->n_ckpts;

    hx_policy_config cfg = st->cfg;
    if (st->cfg.quirks & Q_OFFGRID_CHECKPOINT) cfg.pp.align = ENG_ALIGN_NONE; /* restores not floored */
    int32_t r = h.no_reuse ? 0 : hx_policy_reuse_len(&cfg, lcp, sl->n_prompt, n);
    if (h.no_reuse) snprintf(out->note, sizeof out->note, "cache_prompt false: n_past = 0");

    if (r > 0 && eng_seq_can_truncate(s, r)) {           /* 1. live memory */
        eng_seq_truncate(s, r);
        slot_clear_ckpts(sl, r);
        out->n_reused = r;
        snprintf(out->note, sizeof out->note, "live: n_past = %d", r);
        return ENG_OK;
    }
    if (r > 0 && (st->cfg.quirks & Q_FULL_REPROCESS)) {
        snprintf(out->note, sizeof out->note, "memory only supports full sequence removal: "
                 "forcing full prompt re-processing");
        goto reset;
    }
    /* 2. host prompt cache, unless a context checkpoint reaches as far
     * (restoring a checkpoint moves less: the attention KV is truncated) */
    snapshot *sn = r > 0 ? snap_find(st, tokens, n, r) : NULL;
    if (sn && !(st->cfg.quirks & Q_SWA_THRESHOLD)) {
        const eng_ckpt *c = newest_ckpt_upto(sl, r);
        if (c && eng_ckpt_n_tokens(c) >= sn->n_tokens) sn = NULL;
    }
    if (sn && eng_seq_deserialize(s, sn->blob, sn->size) == ENG_OK) {
        sn->last_used = ++st->clock;
        slot_clear_ckpts(sl, sn->n_tokens);
        out->n_reused = sn->n_tokens;
        out->bytes_restored = (int64_t)sn->size;
        snprintf(out->note, sizeof out->note, "prompt cache: restored %d tokens (%zu bytes)", sn->n_tokens,
                 sn->size);
        return ENG_OK;
    }
    if (r > 0 && (st->cfg.quirks & Q_SWA_THRESHOLD)) {  /* 3 with the quirk */
        const eng_model_info *mi = eng_model_get_info(st->cfg.model);
        int32_t n_swa = mi->n_swa > 1 ? mi->n_swa : 1;
        int32_t pos_min = nc - 1;  /* recurrent memory reports the whole sequence */
        int32_t thold = r - n_swa > 0 ? r - n_swa : 0;
        snprintf(out->note, sizeof out->note, "n_past = %d, pos_min = %d, n_swa = %d: no checkpoint "
                 "with pos_min < %d; erased %d checkpoints; forcing full prompt re-processing",
                 r, pos_min, n_swa, thold, sl->n_ckpts);
        goto reset;
    }
    if (r > 0) {                                         /* 3. context checkpoints */
        eng_ckpt *c = newest_ckpt_upto(sl, r);
        if (c && eng_seq_restore(s, c) == ENG_OK) {
            int32_t got = eng_ckpt_n_tokens(c);
            slot_clear_ckpts(sl, got);
            out->n_reused = got;
            out->bytes_restored = (int64_t)eng_ckpt_size(c);
            snprintf(out->note, sizeof out->note, "restored context checkpoint at %d tokens (%zu bytes)",
                     got, eng_ckpt_size(c));
            return ENG_OK;
        }
        snprintf(out->note, sizeof out->note, "no checkpoint at or below n_past = %d: full re-processing", r);
    }
reset:                                                   /* 4. full re-processing */
    eng_seq_reset(s);
    slot_clear_ckpts(sl, -1);
    out->n_reused = 0;
    return ENG_OK;
}

// ----------------------------------------------------------------------------
// Checkpoints during prefill, and release

static void push_ckpt(slot_state *st, slot *sl, eng_seq *s) {
    int32_t n = eng_seq_n_tokens(s);
    if (st->o.ctx_checkpoints <= 0) return;
    if (sl->n_ckpts > 0 && eng_ckpt_n_tokens(sl->ckpts[sl->n_ckpts - 1]) >= n) return;
    double t0 = eng_now_s();
    eng_ckpt *c = eng_seq_checkpoint(s);
    if (!c) return;
    if (sl->n_ckpts == st->o.ctx_checkpoints) {  /* keep the newest N */
        eng_ckpt_free(sl->ckpts[0]);
        memmove(sl->ckpts, sl->ckpts + 1, sizeof(eng_ckpt *) * (size_t)(sl->n_ckpts - 1));
        sl->n_ckpts--;
    }
    sl->ckpts[sl->n_ckpts++] = c;
    sl->n_stored++;
    sl->bytes_stored += (int64_t)eng_ckpt_size(c);
    snap_store(st, sl, s);
    sl->store_ms += 1e3 * (eng_now_s() - t0);
}

/* The busy slot serving the request whose sequence is s, or NULL. */
static slot *slot_of(slot_state *st, const eng_seq *s) {
    for (int32_t i = 0; i < st->n_slots; i++)
        if (st->slots[i].seq == s && st->slots[i].busy) return &st->slots[i];
    return NULL;
}

static void slot_on_chunk(void *state, eng_seq *s, int32_t n_tokens) {
    slot_state *st = state;
    slot *sl = slot_of(st, s);
    if (!sl) return;
    int32_t C = st->cfg.pp.chunk, end = sl->prompt_end;
    bool offgrid = (st->cfg.quirks & Q_OFFGRID_CHECKPOINT) != 0;
    bool at_last_grid = offgrid ? n_tokens == end : n_tokens == (end / C) * C;
    bool periodic = st->o.checkpoint_every > 0 && n_tokens % st->o.checkpoint_every == 0 && n_tokens % C == 0;
    if (at_last_grid || periodic) push_ckpt(st, sl, s);
    if (at_last_grid && st->o.cache_ram > 0 && (int64_t)eng_seq_serialized_size(s) > st->o.cache_ram)
        snap_drop_request(st, sl);
}

static int slot_release(void *state, eng_seq *s, int32_t n_prompt, hx_release *out) {
    slot_state *st = state;
    slot *sl = slot_of(st, s);
    if (sl) {
        sl->n_prompt = n_prompt;
        sl->busy = false;
        out->n_stored = sl->n_stored;
        out->bytes_stored = sl->bytes_stored;
        out->store_ms = sl->store_ms;
    }
    /* what it holds: the slots' live state, their context checkpoints, the prompt cache */
    out->bytes_held = st->snap_bytes;
    out->entries_held = st->n_snaps;
    for (int32_t i = 0; i < st->n_slots; i++) {
        const slot *x = &st->slots[i];
        if (eng_seq_n_tokens(x->seq) > 0) {
            out->bytes_held += (int64_t)eng_seq_serialized_size(x->seq);
            out->entries_held++;
        }
        for (int32_t k = 0; k < x->n_ckpts; k++) out->bytes_held += (int64_t)eng_ckpt_size(x->ckpts[k]);
        out->entries_held += x->n_ckpts;
    }
    return ENG_OK;
}

// ----------------------------------------------------------------------------
// Token-only mode (simulate): slots and llama.cpp's host prompt cache over
// trace block ids
//
// Each slot holds the block ids of the last prompt it served. A request takes
// a slot by pick_slot (the same rule as replay) on the slots' common prefix
// in blocks. The host prompt cache (llama.cpp's --cache-ram, on by default
// since b6700-ish: server_prompt_cache) holds whole prompts under --capacity:
// the slot's prompt is saved to it before the slot serves another one
// (prompt_save), and the cached prompt with the longest common prefix is
// loaded into the slot when it beats the slot's own (prompt_load, which takes
// it out of the cache). The memory is attention KV, which truncates: a cached
// prompt serves its common prefix (in replay, the cache serves memory that
// cannot be truncated, at its snapshots' lengths: seed 004). The hit is the
// common prefix of the state the slot ends up with, in whole policy blocks
// (a multiple of the trace's block, --block-size); slots hold --slots prompts
// besides the budget.

typedef struct sim_slot {
    int32_t *words;      /* (cap * W) the blocks it holds */
    int32_t  n, cap;     /* blocks */
    int64_t  origin;     /* the request whose prompt it holds */
    uint64_t last_used;
} sim_slot;

typedef struct slot_sim {
    int32_t       n_slots, group, W;
    double        threshold;
    sim_slot     *slots;
    hx_prefixset *cache;
    uint64_t      clock;
    uint64_t     *h, *hs;    /* (cap_h) the request's and a slot's chained block hashes */
    int32_t       cap_h;
} slot_sim;

static void slot_sim_destroy(void *state) {
    slot_sim *st = state;
    if (!st) return;
    for (int32_t i = 0; st->slots && i < st->n_slots; i++) free(st->slots[i].words);
    free(st->slots);
    hx_prefixset_free(st->cache);
    free(st->h);
    free(st->hs);
    free(st);
}

static int slot_sim_create(const hx_sim_config *cfg, void **state, char *err, size_t errlen) {
    slot_sim *st = calloc(1, sizeof *st);
    if (!st) return ENG_ERR_NOMEM;
    *state = st;
    const slot_opts *o = cfg->opts;
    int64_t B = cfg->block_size ? cfg->block_size : cfg->block_tokens;
    st->group = (int32_t)(B / cfg->block_tokens);
    st->W = st->group * HX_SIM_WORDS;
    st->n_slots = o->n_slots < 1 ? 1 : o->n_slots > 64 ? 64 : o->n_slots;
    st->threshold = o->sim_threshold;
    int64_t budget = cfg->capacity_tokens / B;
    if (cfg->capacity_tokens > 0 && budget < 1) {
        eng_errf(err, errlen, "slot-lcp: --capacity %lld tokens holds no %lld-token block",
                 (long long)cfg->capacity_tokens, (long long)B);
        return ENG_ERR_ARG;
    }
    st->slots = calloc((size_t)st->n_slots, sizeof *st->slots);
    st->cache = hx_prefixset_new(st->W, cfg->evict, budget);
    return st->slots && st->cache ? ENG_OK : ENG_ERR_NOMEM;
}

static int slot_sim_reserve(slot_sim *st, int32_t m) {
    if (m <= st->cap_h) return ENG_OK;
    int32_t cap = m > 2 * st->cap_h ? m : 2 * st->cap_h;
    uint64_t *h = realloc(st->h, sizeof *h * (size_t)cap);
    if (h) st->h = h;
    uint64_t *hs = realloc(st->hs, sizeof *hs * (size_t)cap);
    if (hs) st->hs = hs;
    if (!h || !hs) return ENG_ERR_NOMEM;
    st->cap_h = cap;
    return ENG_OK;
}

/* Common prefix of a slot and the request, in policy blocks. */
static int32_t slot_sim_lcp(const slot_sim *st, const sim_slot *sl, const int32_t *words, int32_t m) {
    return hx_sim_lcp(sl->words, sl->n * st->group, words, m * st->group) / st->group;
}

/* The slot pick_slot gives the request, and each slot's common prefix in lcp. */
static int32_t slot_sim_pick(const slot_sim *st, const int32_t *words, int32_t m, int32_t *lcp) {
    uint64_t last[64];
    double sim;
    for (int32_t i = 0; i < st->n_slots; i++) {
        lcp[i] = slot_sim_lcp(st, &st->slots[i], words, m);
        last[i] = st->slots[i].last_used;
    }
    return pick_slot(st->n_slots, lcp, last, NULL, m, st->threshold, &sim);
}

static int32_t slot_sim_peek(void *state, const hx_sim_req *r) {
    slot_sim *st = state;
    int32_t m = r->n_blocks / st->group, lcp[64], id;
    if (slot_sim_reserve(st, m) != ENG_OK) return 0;
    int32_t k = lcp[slot_sim_pick(st, r->words, m, lcp)];
    hx_block_hashes(r->words, m * st->W, st->W, NULL, st->h);
    int32_t c = hx_prefixset_common(st->cache, st->h, m, &id);
    return (c > k ? c : k) * st->group;
}

static int slot_sim_access(void *state, const hx_sim_req *r, hx_sim_access *out) {
    slot_sim *st = state;
    memset(out, 0, sizeof *out);
    out->origin = -1;
    int32_t m = r->n_blocks / st->group, lcp[64], id;
    if (slot_sim_reserve(st, m) != ENG_OK) return ENG_ERR_NOMEM;
    int64_t ev0 = hx_prefixset_evicted(st->cache);
    sim_slot *sl = &st->slots[slot_sim_pick(st, r->words, m, lcp)];
    int32_t k = lcp[sl - st->slots];
    if (k > 0) out->origin = sl->origin;
    if (sl->n > 0) {  /* prompt_save: the slot's prompt into the cache (touched when there) */
        if (slot_sim_reserve(st, sl->n) != ENG_OK) return ENG_ERR_NOMEM;
        hx_block_hashes(sl->words, sl->n * st->W, st->W, NULL, st->hs);
        if (hx_prefixset_add(st->cache, sl->words, st->hs, sl->n, sl->origin, ++st->clock, &id) != ENG_OK)
            return ENG_ERR_NOMEM;
    }
    hx_block_hashes(r->words, m * st->W, st->W, NULL, st->h);
    int32_t c = hx_prefixset_common(st->cache, st->h, m, &id);
    if (c > k) {  /* prompt_load: the cached prompt moves into the slot */
        k = c;
        out->origin = hx_prefixset_origin(st->cache, id);
        hx_prefixset_remove(st->cache, id);
    }
    if (m > sl->cap) {  /* the slot now holds this prompt */
        int32_t *w = realloc(sl->words, sizeof *w * (size_t)m * (size_t)st->W);
        if (!w) return ENG_ERR_NOMEM;
        sl->words = w;
        sl->cap = m;
    }
    memcpy(sl->words, r->words, sizeof(int32_t) * (size_t)m * (size_t)st->W);
    sl->n = m;
    sl->origin = r->index;
    sl->last_used = ++st->clock;
    int64_t held = hx_prefixset_held(st->cache);
    for (int32_t i = 0; i < st->n_slots; i++) held += st->slots[i].n;
    out->hit_blocks = k * st->group;
    out->stored_blocks = (m - k) * st->group;
    out->evicted_blocks = (hx_prefixset_evicted(st->cache) - ev0) * st->group;
    out->held_blocks = held * st->group;
    return ENG_OK;
}

static int slot_sim_check(void *state, char *err, size_t errlen) {
    return hx_prefixset_check(((slot_sim *)state)->cache, err, errlen);
}

static const hx_sim_ops slot_sim_ops = {
    .check = slot_sim_check,
    .create = slot_sim_create,
    .peek = slot_sim_peek,
    .access = slot_sim_access,
    .destroy = slot_sim_destroy,
};

const hx_policy_ops hx_policy_slot_lcp = {
    .name = "slot-lcp",
    .options = slot_options,
    .defaults = &slot_defaults,
    .opts_size = sizeof(slot_opts),
    .quirks = slot_quirks,
    .record = slot_record,
    .create = slot_create,
    .acquire = slot_acquire,
    .on_chunk = slot_on_chunk,
    .release = slot_release,
    .destroy = slot_destroy,
    .hint = slot_hint,
    .n_slots = slot_count,
    .slot_tokens = slot_tokens,
    .erase = slot_erase,
    .sim = &slot_sim_ops,
};
