/*
 * harness/cache/policies/disk_anchor.c: ds4-server-style disk KV checkpoints
 * (seeds/000_*), on top of cache/diskcache (files) and cache/anchor
 * (placement rules).
 *
 * Per request:
 *   1. live cache: the in-memory sequence of the previous request is reused
 *      when the new prompt extends that request's whole prompt (a "live hit")
 *      and the sequence can be truncated to the reuse point (a recurrent
 *      layer cannot: such a model goes to disk); any other overlap is a live
 *      miss (ds4: "live kv cache miss ... reason=token-mismatch");
 *   2. otherwise disk: the longest checkpoint file whose token prefix
 *      matches the prompt (at most n - 1 tokens, so one token is prefilled);
 *      its payload is an eng_seq_serialize blob, restored with
 *      eng_seq_deserialize; a file that fails (a corrupt file, or a sound
 *      file whose state blob the engine refuses) is quarantined and the
 *      next shorter checkpoint is tried;
 *   3. during the prefill of the rest, checkpoints are written at the
 *      positions hx_anchor_plan gives for (n, cached): continued waypoints
 *      every --waypoint-every tokens, and the anchor at the end of the stable
 *      prefix (system + tools, or --anchor N), floored to the grid. By
 *      default the anchor is written whenever the hit lies below it (the
 *      report's fix); with --quirk anchor-cold-only only when nothing was
 *      cached (the reported bug).
 * Every checkpoint lies on the grid: the policy requires --align chunk.
 * Requests in flight (serve --parallel N; ds4-server serves one at a time):
 * the live sequence serves one of them, the others a sequence of their own
 * from disk; the checkpoint files are shared, and a request's checkpoints
 * serve the others from the chunk end that wrote them. The request released
 * last leaves its sequence as the live one.
 * Quarantines, fallbacks and checkpoints that could not be stored (a full
 * disk) are counted per request and said once on stderr (policy.h).
 */
#include "options.h"
#include "policy.h"

#include <dirent.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "anchor.h"
#include "blockpool.h"
#include "diskcache.h"
#include "prefixset.h"
#include "status.h"
#include "store.h"
#include "util.h"

// ----------------------------------------------------------------------------
// Options and quirks (kvreplay replay --help lists them)

typedef struct da_opts {
    const char *cache_dir;       /* checkpoint directory */
    int64_t     cache_budget;    /* bytes, LRU eviction */
    int32_t     waypoint_every;  /* tokens (multiple of C) */
    int32_t     anchor_tokens;   /* fixed anchor position, or -1: end of system + tools (stable_end) */
    bool        fresh_cache;     /* delete cache_dir's checkpoint files first (not with resume) */
} da_opts;

static const da_opts da_defaults = {
    .cache_dir = "results/cache/kv", .cache_budget = (int64_t)4 << 30, .waypoint_every = 2048, .anchor_tokens = -1,
};

static int parse_anchor(const char *flag, const char *v, void *field, char *err, size_t errlen) {
    int64_t n = -1;
    int rc = strcmp(v, "auto") ? hx_parse_i64(flag, v, 0, 1 << 24, &n, err, errlen) : ENG_OK;
    if (!rc) *(int32_t *)field = (int32_t)n;
    return rc;
}

static const hx_option da_options[] = {
    {"--cache-dir", NULL, "DIR", "checkpoint directory (default results/cache/kv)", HX_OPT_STRING,
     offsetof(da_opts, cache_dir), 0, 0, NULL},
    {"--cache-budget", NULL, "MIB", "byte budget, LRU eviction (default 4096)", HX_OPT_MIB,
     offsetof(da_opts, cache_budget), 1, 1 << 24, NULL},
    {"--waypoint-every", NULL, "N", "tokens between waypoints (default 2048; ds4: 20480)", HX_OPT_INT,
     offsetof(da_opts, waypoint_every), 1, 1 << 24, NULL},
    {"--anchor", NULL, "N|auto", "anchor position (default auto: end of system + tools)", HX_OPT_CUSTOM,
     offsetof(da_opts, anchor_tokens), 0, 0, parse_anchor},
    {"--fresh-cache", NULL, NULL, "delete the checkpoint files in --cache-dir first\n"
     "(ignored with --resume, which needs them)", HX_OPT_FLAG, offsetof(da_opts, fresh_cache), 0, 0, NULL},
    {0},
};

/* Bit k of hx_policy_config.quirks is da_quirks[k]. */
enum { Q_ANCHOR_COLD_ONLY = 1u << 0 };
static const hx_quirk da_quirks[] = {
    {"anchor-cold-only", "the anchor is written only when nothing was cached", "seeds/000"},
    {0},
};

static void da_record(const void *opts, hx_run_meta *meta) {
    const da_opts *o = opts;
    meta->pol.waypoint_every = o->waypoint_every;
    meta->pol.anchor = o->anchor_tokens < 0 ? "auto" : "fixed";
    meta->pol.cache_dir = o->cache_dir;
    meta->pol.cache_budget = o->cache_budget;
}

/* Deletes dir's checkpoint files (*.kv) and everything in dir/quarantine. */
static void clear_cache_dir(const char *dir) {
    char path[4096];
    for (int pass = 0; pass < 2; pass++) {
        if (pass) snprintf(path, sizeof path, "%s/quarantine", dir);
        else snprintf(path, sizeof path, "%s", dir);
        DIR *d = opendir(path);
        if (!d) continue;
        struct dirent *e;
        while ((e = readdir(d))) {
            size_t n = strlen(e->d_name);
            if (e->d_name[0] == '.' || (!pass && (n < 3 || strcmp(e->d_name + n - 3, ".kv")))) continue;
            char f[4352];
            snprintf(f, sizeof f, "%s/%s", path, e->d_name);
            unlink(f);
        }
        closedir(d);
    }
}

// ----------------------------------------------------------------------------
// State

/* A request in flight (acquire .. release), or a spare sequence (busy false). */
typedef struct da_req {
    eng_seq         *seq;
    bool             busy;
    hx_anchor_ckpt  *plan;         /* positions to write during its prefill */
    int32_t          n_plan, next;
    int32_t          n_stored;
    int64_t          bytes_stored;
    double           store_ms;
    double           anchor_ms;
    int32_t          anchor_pos;   /* anchor written by it, or 0 */
    int32_t          n_store_failed;
} da_req;

typedef struct da_state {
    hx_policy_config cfg;
    bool             no_reuse;     /* the next request asked for no reuse (cache_prompt: false) */
    da_opts          o;
    hx_diskcache    *dc;
    da_req          *reqs;         /* (n_reqs): one per request in flight */
    int32_t          n_reqs;
    da_req          *live;         /* the live sequence's record */
    int32_t          live_prompt;  /* prompt length of the request the live sequence served */
    eng_seq         *check_seq;    /* where da_check restores a checkpoint (during a lookup) */
    hx_anchor_params ap;
    void            *blob;         /* serialization buffer */
    size_t           blob_cap;
    bool             said_quarantine, said_store_failed;  /* once per run on stderr */
} da_state;

static void da_destroy(void *state) {
    da_state *st = state;
    if (!st) return;
    hx_diskcache_close(st->dc);
    for (int32_t k = 0; st->reqs && k < st->n_reqs; k++) {
        eng_seq_free(st->reqs[k].seq);
        free(st->reqs[k].plan);
    }
    free(st->reqs);
    free(st->blob);
    free(st);
}

static da_req *req_of(da_state *st, const eng_seq *s) {
    for (int32_t k = 0; k < st->n_reqs; k++)
        if (st->reqs[k].seq == s && st->reqs[k].busy) return &st->reqs[k];
    return NULL;
}

static int da_create(const hx_policy_config *cfg, void **state, char *err, size_t errlen) {
    if (cfg->pp.align != ENG_ALIGN_CHUNK) {
        eng_errf(err, errlen, "--policy disk-anchor: checkpoints lie on the grid; it needs --align chunk");
        return ENG_ERR_ARG;
    }
    const da_opts *o = cfg->opts;
    if (!o->cache_dir || !*o->cache_dir) {
        eng_errf(err, errlen, "--policy disk-anchor: --cache-dir is required");
        return ENG_ERR_ARG;
    }
    da_state *st = calloc(1, sizeof *st);
    if (!st) return ENG_ERR_NOMEM;
    *state = st;
    st->cfg = *cfg;
    st->o = *o;
    st->ap = hx_anchor_params_default();
    st->ap.chunk = cfg->pp.chunk;
    st->ap.waypoint_every = o->waypoint_every;
    st->ap.quirk_anchor_cold_only = (cfg->quirks & Q_ANCHOR_COLD_ONLY) != 0;
    if (o->waypoint_every % cfg->pp.chunk != 0) {
        eng_errf(err, errlen, "--waypoint-every: %d is not a multiple of the chunk %d", o->waypoint_every,
                 cfg->pp.chunk);
        return ENG_ERR_ARG;
    }
    if (o->fresh_cache && !cfg->resume) clear_cache_dir(o->cache_dir);
    int rc = hx_diskcache_open(o->cache_dir, o->cache_budget, &st->dc, err, errlen);
    if (rc != ENG_OK) return rc;
    hx_diskcache_stats ds = hx_diskcache_get_stats(st->dc);
    if (ds.quarantined > 0)
        fprintf(stderr, "kvreplay: disk-anchor: %s: %lld invalid checkpoint file%s set aside in %s/ (the last: %s)\n",
                o->cache_dir, (long long)ds.quarantined, ds.quarantined > 1 ? "s" : "", HX_DISKCACHE_QUARANTINE,
                hx_diskcache_last_quarantine(st->dc));
    st->n_reqs = cfg->n_parallel > 1 ? cfg->n_parallel : 1;
    if (!(st->reqs = calloc((size_t)st->n_reqs, sizeof *st->reqs))) return ENG_ERR_NOMEM;
    for (int32_t k = 0; k < st->n_reqs; k++)
        if (!(st->reqs[k].seq = eng_seq_new(cfg->model, cfg->n_ctx))) return ENG_ERR_NOMEM;
    st->live = &st->reqs[0];
    return ENG_OK;
}

/* The check of a checkpoint whose file passed every checksum: its state blob
 * must deserialize into the live sequence with the checkpoint's length. */
static const char *da_check(void *ctx, const void *payload, size_t size, int32_t n_tokens) {
    da_state *st = ctx;
    int rc = eng_seq_deserialize(st->check_seq, payload, size);
    if (rc != ENG_OK) return rc == ENG_ERR_MISMATCH ? "state blob: another model or numerics" : "state blob: malformed";
    if (eng_seq_n_tokens(st->check_seq) != n_tokens) return "state blob: length differs from the file's";
    return NULL;
}

/* cache_prompt: false: neither the live sequence nor a checkpoint file is used; what the
 * request computes is stored as usual. */
static void da_hint(void *state, const hx_acquire_hint *h) { ((da_state *)state)->no_reuse = h->no_reuse; }

static int da_acquire(void *state, const int32_t *tokens, int32_t n, int32_t stable_end, hx_acquire *out) {
    da_state *st = state;
    memset(out, 0, sizeof *out);
    /* the live sequence when it is idle, else a spare: its tokens are no live hit (disk only) */
    da_req *rq = !st->live->busy ? st->live : NULL;
    for (int32_t k = 0; !rq && k < st->n_reqs; k++)
        if (!st->reqs[k].busy) rq = &st->reqs[k];
    if (!rq) return ENG_ERR_RANGE;  /* more requests in flight than n_parallel */
    const bool is_live = rq == st->live;
    rq->busy = true;
    out->seq = rq->seq;
    out->slot = -1;
    rq->n_stored = 0;
    rq->bytes_stored = 0;
    rq->store_ms = 0;
    rq->anchor_ms = 0;
    rq->anchor_pos = 0;
    rq->n_store_failed = 0;
    char err[256];

    int32_t nl = is_live ? eng_seq_n_tokens(rq->seq) : 0;
    int32_t lcp = hx_lcp(eng_seq_tokens(rq->seq), nl, tokens, n);
    out->lcp = lcp;
    out->best = nl ? eng_seq_tokens(rq->seq) : NULL;
    out->n_best = nl;
    int32_t cached = 0;
    bool no_reuse = st->no_reuse;
    st->no_reuse = false;
    int32_t live = !no_reuse && nl > 0 && lcp >= st->live_prompt ? hx_policy_reuse_len(&st->cfg, lcp, st->live_prompt, n) : -1;
    /* memory that cannot be truncated (recurrent layers) has no live hit below its end: disk then */
    if (live >= 0 && eng_seq_truncate(rq->seq, live) == ENG_OK) {  /* 1. live hit */
        cached = live;
        snprintf(out->note, sizeof out->note, "live kv cache hit: %d tokens", cached);
    } else if (no_reuse) {                                     /* cache_prompt: false */
        eng_seq_reset(rq->seq);
        snprintf(out->note, sizeof out->note, "cache_prompt false: nothing reused");
    } else {                                                   /* 2. disk */
        hx_diskcache_hit hit = {0};
        hx_diskcache_stats before = hx_diskcache_get_stats(st->dc);
        eng_seq_reset(rq->seq);
        st->check_seq = rq->seq;
        int rc = hx_diskcache_lookup_checked(st->dc, eng_model_fingerprint(st->cfg.model), tokens, n, n - 1,
                                             da_check, st, &hit, err, sizeof err);
        hx_diskcache_stats after = hx_diskcache_get_stats(st->dc);
        out->n_quarantined = (int32_t)(after.quarantined - before.quarantined);
        out->n_fallbacks = (int32_t)(after.fallbacks - before.fallbacks);
        if (out->n_quarantined > 0 && !st->said_quarantine) {
            st->said_quarantine = true;
            fprintf(stderr, "kvreplay: disk-anchor: %s: set aside %s/%s (%s); every quarantine and fallback is "
                    "counted in requests.extra\n", st->o.cache_dir, HX_DISKCACHE_QUARANTINE,
                    hx_diskcache_last_quarantine(st->dc), out->n_fallbacks ? "fell back to a shorter checkpoint"
                                                                           : "disk miss");
        }
        if (rc != ENG_OK && !st->said_quarantine) {
            st->said_quarantine = true;
            fprintf(stderr, "kvreplay: disk-anchor: lookup failed, counted as a miss: %s\n", err);
        }
        if (rc == ENG_OK && hit.n_tokens > 0 && eng_seq_n_tokens(rq->seq) == hit.n_tokens) {  /* da_check restored it */
            cached = hit.n_tokens;
            out->bytes_restored = (int64_t)hit.payload_size;
            snprintf(out->note, sizeof out->note, "live kv cache miss live=%d prompt=%d common=%d; "
                     "disk kv cache hit tokens=%d", nl, n, lcp, cached);
        } else {
            eng_seq_reset(rq->seq);
            snprintf(out->note, sizeof out->note, "live kv cache miss live=%d prompt=%d common=%d; disk miss",
                     nl, n, lcp);
        }
        hx_diskcache_hit_free(&hit);
    }
    out->n_reused = cached;

    int32_t anchor_at = st->o.anchor_tokens >= 0 ? st->o.anchor_tokens : (stable_end > 0 ? stable_end : 0);
    st->ap.anchor = hx_anchor_position(anchor_at, st->cfg.pp.chunk);
    if (st->ap.anchor < 0) st->ap.anchor = 0;
    int32_t cap = hx_anchor_plan_max(&st->ap, n);
    hx_anchor_ckpt *plan = realloc(rq->plan, sizeof *plan * (size_t)(cap > 0 ? cap : 1));
    if (!plan) { rq->busy = false; return ENG_ERR_NOMEM; }
    rq->plan = plan;
    rq->next = 0;
    if (hx_anchor_plan(&st->ap, n, cached, rq->plan, cap, &rq->n_plan, err, sizeof err) != ENG_OK) {
        eng_errf(out->note, sizeof out->note, "anchor plan: %s", err);
        rq->n_plan = 0;
    }
    return ENG_OK;
}

/* A checkpoint that could not be stored: counted, and the first one said. */
static void store_failed(da_state *st, da_req *rq, int32_t n_tokens, const char *why) {
    rq->n_store_failed++;
    if (st->said_store_failed) return;
    st->said_store_failed = true;
    fprintf(stderr, "kvreplay: disk-anchor: checkpoint of %d tokens not stored: %s; every lost checkpoint is counted "
            "in requests.extra and the run's summary\n", n_tokens, why);
}

static void da_on_chunk(void *state, eng_seq *s, int32_t n_tokens) {
    da_state *st = state;
    da_req *rq = req_of(st, s);
    if (!rq) return;
    while (rq->next < rq->n_plan && rq->plan[rq->next].pos < n_tokens) rq->next++;
    if (rq->next >= rq->n_plan || rq->plan[rq->next].pos != n_tokens) return;
    const hx_anchor_ckpt *ck = &rq->plan[rq->next++];
    double t0 = eng_now_s();
    size_t need = eng_seq_serialized_size(s), got = 0;
    if (need > st->blob_cap) {
        void *b = realloc(st->blob, need);
        if (!b) {
            store_failed(st, rq, n_tokens, "out of memory for the state blob");
            return;
        }
        st->blob = b;
        st->blob_cap = need;
    }
    int rc = eng_seq_serialize(s, st->blob, st->blob_cap, &got);
    if (rc != ENG_OK) {
        store_failed(st, rq, n_tokens, eng_status_str(rc));
        return;
    }
    size_t written = 0;
    char err[512] = "";
    rc = hx_diskcache_store(st->dc, eng_model_fingerprint(st->cfg.model), eng_seq_tokens(s), n_tokens, st->blob,
                            got, &written, err, sizeof err);
    double ms = 1e3 * (eng_now_s() - t0);
    if (rc < 0) store_failed(st, rq, n_tokens, err[0] ? err : eng_status_str(rc));
    if (rc == HX_DISKCACHE_STORED) {
        rq->n_stored++;
        rq->bytes_stored += (int64_t)written;
    }
    rq->store_ms += ms;
    if (ck->kind & HX_ANCHOR_KIND_ANCHOR) {
        rq->anchor_ms += ms;
        rq->anchor_pos = n_tokens;
    }
}

static int da_release(void *state, eng_seq *s, int32_t n_prompt, hx_release *out) {
    da_state *st = state;
    da_req *rq = req_of(st, s);
    ENG_ASSERT(rq);
    rq->busy = false;
    st->live = rq;  /* the live sequence: the one released last */
    st->live_prompt = n_prompt;
    out->n_stored = rq->n_stored;
    out->bytes_stored = rq->bytes_stored;
    out->store_ms = rq->store_ms;
    out->anchor_ms = rq->anchor_ms;
    out->anchor_pos = rq->anchor_pos;
    /* what it holds: the checkpoint files and the live sequence */
    hx_diskcache_stats ds = hx_diskcache_get_stats(st->dc);
    out->bytes_held = ds.bytes_on_disk + (int64_t)eng_seq_serialized_size(s);
    out->entries_held = ds.entries + 1;
    out->n_store_failed = rq->n_store_failed;
    return ENG_OK;
}

// ----------------------------------------------------------------------------
// Token-only mode (simulate): the live sequence and the checkpoint files'
// placement over trace block ids
//
// The grid is the policy block (the trace's block, or --block-size): every
// position below is a whole number of them. Per request:
//   1. live: the previous request's prompt is reused when the new one
//      extends its full blocks (a trace block cut by the prompt's end cannot
//      be told apart from the longer block that replaces it: its tokens are
//      recomputed, as a partial chunk is in replay);
//   2. otherwise disk: the longest checkpoint that is a prefix of the prompt
//      (hx_diskcache_lookup's rule; a checkpoint restores exactly its tokens);
//   3. the checkpoints hx_anchor_plan gives for (n, cached), the same plan as
//      replay (waypoints every --waypoint-every tokens, the anchor at
//      --anchor N; traces carry no system-prompt end, so `auto` places none),
//      are stored as entries of their length under --capacity (a checkpoint
//      file holds its whole prefix's state), evicted in --evict's order.
// Nothing is written to disk.

typedef struct da_sim {
    int32_t          group, W, bt;   /* trace blocks per policy block, words, tokens per policy block */
    hx_anchor_params ap;
    hx_prefixset    *files;
    int32_t         *live;           /* (cap_live * W) */
    int32_t          n_live, full_live, cap_live;
    int64_t          live_origin;
    uint64_t        *h;
    int32_t          cap_h;
    hx_anchor_ckpt  *plan;
    int32_t          cap_plan;
    uint64_t         clock;
} da_sim;

static void da_sim_destroy(void *state) {
    da_sim *st = state;
    if (!st) return;
    hx_prefixset_free(st->files);
    free(st->live);
    free(st->h);
    free(st->plan);
    free(st);
}

static int da_sim_create(const hx_sim_config *cfg, void **state, char *err, size_t errlen) {
    da_sim *st = calloc(1, sizeof *st);
    if (!st) return ENG_ERR_NOMEM;
    *state = st;
    const da_opts *o = cfg->opts;
    int64_t B = cfg->block_size ? cfg->block_size : cfg->block_tokens;
    st->group = (int32_t)(B / cfg->block_tokens);
    st->W = st->group * HX_SIM_WORDS;
    st->bt = (int32_t)B;
    st->ap = hx_anchor_params_default();
    st->ap.chunk = (int32_t)B;
    st->ap.waypoint_every = o->waypoint_every;
    st->ap.anchor = o->anchor_tokens > 0 ? o->anchor_tokens / (int32_t)B * (int32_t)B : 0;
    st->ap.quirk_anchor_cold_only = (cfg->quirks & Q_ANCHOR_COLD_ONLY) != 0;
    if (hx_anchor_params_check(&st->ap, err, errlen) != ENG_OK) {
        eng_errf(err, errlen, "disk-anchor: --waypoint-every %d is not a whole number of %lld-token blocks",
                 o->waypoint_every, (long long)B);
        return ENG_ERR_ARG;
    }
    int64_t budget = cfg->capacity_tokens / B;
    if (cfg->capacity_tokens > 0 && budget < 1) {
        eng_errf(err, errlen, "disk-anchor: --capacity %lld tokens holds no %lld-token block",
                 (long long)cfg->capacity_tokens, (long long)B);
        return ENG_ERR_ARG;
    }
    st->files = hx_prefixset_new(st->W, cfg->evict, budget);
    st->live_origin = -1;
    return st->files ? ENG_OK : ENG_ERR_NOMEM;
}

static int da_sim_reserve(da_sim *st, int32_t m) {
    if (m <= st->cap_h) return ENG_OK;
    int32_t cap = m > 2 * st->cap_h ? m : 2 * st->cap_h;
    uint64_t *h = realloc(st->h, sizeof *h * (size_t)cap);
    if (!h) return ENG_ERR_NOMEM;
    st->h = h;
    st->cap_h = cap;
    return ENG_OK;
}

/* Blocks reused from the live sequence (0: a live miss), and from disk (*disk, *file). */
static int32_t da_sim_lookup(da_sim *st, const int32_t *words, int32_t m, int32_t *disk, int32_t *file) {
    *disk = 0;
    *file = -1;
    int32_t lcp = hx_sim_lcp(st->live, st->n_live * st->group, words, m * st->group) / st->group;
    if (st->n_live > 0 && st->full_live > 0 && lcp >= st->full_live) return st->full_live;
    *disk = hx_prefixset_within(st->files, st->h, m, file);
    return 0;
}

static int32_t da_sim_peek(void *state, const hx_sim_req *r) {
    da_sim *st = state;
    int32_t m = r->n_blocks / st->group, disk, file;
    if (da_sim_reserve(st, m) != ENG_OK) return 0;
    hx_block_hashes(r->words, m * st->W, st->W, NULL, st->h);
    int32_t live = da_sim_lookup(st, r->words, m, &disk, &file);
    return (live ? live : disk) * st->group;
}

static int da_sim_access(void *state, const hx_sim_req *r, hx_sim_access *out) {
    da_sim *st = state;
    memset(out, 0, sizeof *out);
    out->origin = -1;
    int32_t m = r->n_blocks / st->group, disk, file;
    if (da_sim_reserve(st, m) != ENG_OK) return ENG_ERR_NOMEM;
    hx_block_hashes(r->words, m * st->W, st->W, NULL, st->h);
    int64_t ev0 = hx_prefixset_evicted(st->files), held0 = hx_prefixset_held(st->files);
    int32_t k = da_sim_lookup(st, r->words, m, &disk, &file);
    if (k > 0) {
        out->origin = st->live_origin;
    } else if (disk > 0) {
        k = disk;
        out->origin = hx_prefixset_origin(st->files, file);
        hx_prefixset_touch(st->files, file, ++st->clock);
    }
    /* the checkpoints this prefill writes: replay's plan, in tokens on the block grid */
    int32_t n_tok = m * st->bt, cap = hx_anchor_plan_max(&st->ap, n_tok), n_plan = 0;
    if (cap > st->cap_plan) {
        hx_anchor_ckpt *p = realloc(st->plan, sizeof *p * (size_t)cap);
        if (!p) return ENG_ERR_NOMEM;
        st->plan = p;
        st->cap_plan = cap;
    }
    char err[160];
    if (hx_anchor_plan(&st->ap, n_tok, k * st->bt, st->plan, cap, &n_plan, err, sizeof err) != ENG_OK) n_plan = 0;
    for (int32_t i = 0; i < n_plan; i++) {
        int32_t b = st->plan[i].pos / st->bt, id;
        if (hx_prefixset_find(st->files, st->h, b) >= 0) continue;  /* HX_DISKCACHE_PRESENT */
        if (hx_prefixset_add(st->files, r->words, st->h, b, r->index, ++st->clock, &id) != ENG_OK) return ENG_ERR_NOMEM;
    }
    /* the live sequence: this prompt */
    if (m > st->cap_live) {
        int32_t *w = realloc(st->live, sizeof *w * (size_t)m * (size_t)st->W);
        if (!w) return ENG_ERR_NOMEM;
        st->live = w;
        st->cap_live = m;
    }
    memcpy(st->live, r->words, sizeof(int32_t) * (size_t)m * (size_t)st->W);
    st->n_live = m;
    st->full_live = (int32_t)((int64_t)r->n_tokens / st->bt);  /* the blocks its prompt fills */
    if (st->full_live > m) st->full_live = m;
    st->live_origin = r->index;
    out->hit_blocks = k * st->group;
    out->stored_blocks = (int32_t)(hx_prefixset_held(st->files) - held0 + hx_prefixset_evicted(st->files) - ev0) *
                         st->group;
    out->evicted_blocks = (hx_prefixset_evicted(st->files) - ev0) * st->group;
    out->held_blocks = (hx_prefixset_held(st->files) + st->n_live) * st->group;
    return ENG_OK;
}

static int da_sim_check(void *state, char *err, size_t errlen) {
    return hx_prefixset_check(((da_sim *)state)->files, err, errlen);
}

static const hx_sim_ops da_sim_ops = {
    .check = da_sim_check,
    .create = da_sim_create,
    .peek = da_sim_peek,
    .access = da_sim_access,
    .destroy = da_sim_destroy,
};

const hx_policy_ops hx_policy_disk_anchor = {
    .name = "disk-anchor",
    .options = da_options,
    .defaults = &da_defaults,
    .opts_size = sizeof(da_opts),
    .quirks = da_quirks,
    .record = da_record,
    .create = da_create,
    .acquire = da_acquire,
    .on_chunk = da_on_chunk,
    .release = da_release,
    .destroy = da_destroy,
    .hint = da_hint,
    .sim = &da_sim_ops,
};
