/*
 * harness/cache/policies/block_hash.c: vLLM's automatic prefix caching
 * (docs/design/prefix_caching.md; vllm/v1/core/kv_cache_utils.py,
 * block_pool.py, kv_cache_manager.py, single_type_kv_cache_manager.py),
 * over cache/blockpool (hashes, map, free queue) and cache/carrier (the
 * sequences that hold the blocks' rows).
 *
 * Per request:
 *   1. lookup: the prompt's full blocks are hashed in a chain (parent hash,
 *      token ids, the cache salt for block 0); blocks are looked up from
 *      block 0 and the hit stops at the first hash not cached (vLLM's
 *      FullAttentionManager.find_longest_cache_hit). At most n - 1 tokens
 *      can hit: a prompt that is all cached still recomputes its last token,
 *      and since hits are whole blocks, the whole last block
 *      (kv_cache_manager.get_computed_blocks);
 *   2. memory that cannot be truncated (recurrent or sliding-window layers):
 *      the hit ends at the last hit block that holds a state (vLLM's
 *      MambaManager searches right to left; the hybrid coordinator takes the
 *      longest prefix both kinds of layer can serve). States are kept at
 *      block boundaries of the prompt's prefill, where --mamba-cache-mode
 *      says: `all`, every block boundary; `align`, only where a scheduler
 *      step ends on a block boundary (Scheduler._mamba_block_aligned_split:
 *      steps of --max-num-batched-tokens rounded down to whole blocks, and
 *      a stop at the prompt's last block boundary). A state can only be
 *      taken where the prefill pauses: under --align chunk at every multiple
 *      of C, so at those step ends; under --align none the engine's steps are
 *      its --ubatch chunks from the reuse point (llama.cpp's split, not
 *      vLLM's), and a state is kept wherever one of them ends on a block
 *      boundary. States of decode-written blocks are not kept;
 *   3. the hit blocks are touched (out of the free queue); the rest of the
 *      prompt is prefilled; at release every full block of the request's
 *      computed tokens (prompt and response but the response's last token,
 *      whose KV a server never computes) is allocated and cached, the partial
 *      block is allocated and not cached, and all are freed in reverse order
 *      (the pool's free queue: LRU eviction under --cache-blocks, the tail
 *      of a sequence first).
 * With --cap-prompt on (the default) a block whose rows lie past its
 * request's eligible end (decode-written, or in a final partial chunk) is
 * cached, counted and evicted like any other, but never serves a hit: the
 * lookup takes the oldest acceptable block with that hash. vLLM reuses such
 * blocks (--cap-prompt off).
 *
 * The block size and the grid (docs/experiments.md): with --align chunk the
 * block size must be a multiple of C. Hits are whole blocks, so every reuse
 * boundary then lies on the grid, exactly where vLLM's would; and the states
 * of the prompt's block boundaries are taken where the prefill pauses, at
 * chunk ends. With C a multiple of the block size a hit would have to be
 * floored to the grid, dropping up to C/B - 1 cached blocks, and states at
 * block boundaries inside a chunk could not be taken without a chunk of
 * another shape (other bits). The default is C under --align chunk and 16
 * (vLLM's) under --align none.
 *
 * Rows: hit blocks may have been computed by several requests; the rows
 * restored are those of one carrier, the one of the deepest hit block. It
 * holds every hit block's rows (the same origin, or on the grid both
 * eligible, hence the same bytes), or another cached block of the same hash
 * whose rows it holds stands in (vLLM would serve the oldest one, whose rows
 * a carrier cannot splice in); otherwise the hit stops before that block.
 *
 * Requests in flight (serve --parallel N): each has its own record (its
 * hashes, blocks, pending states, origin and the carrier it restored from,
 * which it holds a reference on until its release) found by its sequence;
 * the pool and the carriers are shared, and a request's blocks are cached at
 * its release, so a request running beside it hits them from then on (vLLM
 * caches a block as soon as it is full: a request admitted in the same steps
 * may share it earlier there).
 *
 * Quirk (off by default): hybrid-block-size (vLLM #40696): for a hybrid
 * model vLLM raises the attention block size until one block's KV is at
 * least one layer's Mamba state page (platforms/interface.py, "Setting
 * attention block size to 528 tokens ..."): the formula unit *
 * ceil(state page / (unit * KV bytes per token per layer)) with unit 16, or
 * lcm(16, C) under --align chunk. Only full blocks are cached, so a prompt
 * shorter than that block never hits.
 */
#include "options.h"
#include "policy.h"

#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "blockpool.h"
#include "carrier.h"
#include "status.h"
#include "store.h"
#include "util.h"

// ----------------------------------------------------------------------------
// Options and quirks (kvreplay replay --help lists them)

enum { MAMBA_ALIGN = 0, MAMBA_ALL = 1 };

typedef struct bh_opts {
    int32_t     block_size;   /* tokens per block, 0: C under --align chunk, 16 under --align none */
    int32_t     cache_blocks; /* pool size in blocks (vLLM's num_gpu_blocks), 0: unbounded */
    int32_t     mamba_mode;   /* MAMBA_ALIGN | MAMBA_ALL */
    int32_t     max_batched;  /* --max-num-batched-tokens: the scheduler step in align mode */
    const char *salt;         /* --cache-salt: an extra key of block 0, or NULL */
    bool        debug;        /* every block's hash and fate on stderr */
} bh_opts;

static const bh_opts bh_defaults = {.mamba_mode = MAMBA_ALIGN, .max_batched = 8192};

static int parse_mamba_mode(const char *flag, const char *v, void *field, char *err, size_t errlen) {
    if (strcmp(v, "align") && strcmp(v, "all")) {
        eng_errf(err, errlen, "%s: expected align or all, got '%s'", flag, v);
        return ENG_ERR_ARG;
    }
    *(int32_t *)field = strcmp(v, "all") ? MAMBA_ALIGN : MAMBA_ALL;
    return ENG_OK;
}

static const hx_option bh_options[] = {
    {"--block-size", NULL, "N", "tokens per block (default: C under --align chunk, where it must be a\n"
     "multiple of C; 16 under --align none)", HX_OPT_INT, offsetof(bh_opts, block_size), 1, 1 << 20, NULL},
    {"--cache-blocks", NULL, "N", "blocks in the pool, LRU eviction of free blocks (default 0: unbounded)",
     HX_OPT_INT, offsetof(bh_opts, cache_blocks), 0, 1 << 28, NULL},
    {"--mamba-cache-mode", NULL, "align|all", "recurrent state kept at every block boundary (all) or where a\n"
     "scheduler step ends on one (align, default)", HX_OPT_CUSTOM, offsetof(bh_opts, mamba_mode), 0, 0,
     parse_mamba_mode},
    {"--max-num-batched-tokens", NULL, "N", "scheduler step in align mode (default 8192)", HX_OPT_INT,
     offsetof(bh_opts, max_batched), 1, 1 << 24, NULL},
    {"--cache-salt", NULL, "S", "extra key hashed into block 0 (vLLM's cache_salt)", HX_OPT_STRING,
     offsetof(bh_opts, salt), 0, 0, NULL},
    {"--debug", NULL, NULL, "each request's blocks and their hashes on stderr", HX_OPT_FLAG,
     offsetof(bh_opts, debug), 0, 0, NULL},
    {0},
};

/* Bit k of hx_policy_config.quirks is bh_quirks[k]. */
enum { Q_HYBRID_BLOCK_SIZE = 1u << 0 };
static const hx_quirk bh_quirks[] = {
    {"hybrid-block-size", "hybrid models: the block is raised to cover a Mamba state page; shorter prompts never hit",
     "vLLM #40696"},
    {0},
};

// ----------------------------------------------------------------------------
// State

/* A cached block's payload is an hx_rows (carrier.h): the carrier with its
 * rows, the request that computed them, the state at its end. */
typedef hx_rows bh_block;

/* A request in flight (acquire .. release). */
typedef struct bh_req {
    eng_seq      *seq;           /* its sequence; NULL: the record is free */
    uint64_t     *hashes;        /* (cap) chained block hashes */
    int32_t      *ids;           /* (cap) its blocks, hit ones first */
    eng_ckpt    **pending;       /* (cap) states taken during the prefill, by block index */
    uint8_t      *save_at;       /* (cap + 1) save a state at block boundary b */
    int32_t       cap;
    int32_t       n_hit;         /* hit blocks */
    int32_t       n_prompt;
    uint32_t      origin;
    hx_carrier   *src;           /* the carrier restored from (a reference held), or NULL */
    double        store_ms;
} bh_req;

typedef struct bh_state {
    hx_policy_config cfg;
    bool          no_reuse;      /* the next request asked for no reuse (cache_prompt: false) */
    bh_opts       o;
    int32_t       B;             /* effective block size */
    bool          grid;          /* --align chunk */
    bool          needs_state;   /* recurrent or sliding-window layers */
    int64_t       block_bytes;   /* KV bytes of one block over the full-attention layers */
    hx_blockpool *pool;
    hx_carriers  *cs;
    int64_t       state_bytes;   /* states held by cached blocks */
    char          opts_json[320];
    bh_req       *reqs;          /* (n_parallel) the requests in flight */
    int32_t       n_reqs;
    hx_carrier   *holder;        /* the carrier a substitute block must be held by (acquire) */
} bh_state;

static bh_block *data_of(bh_state *st, int32_t id) { return hx_blockpool_get(st->pool, id)->data; }

static void bh_evict(void *ud, hx_block *b) {
    bh_state *st = ud;
    bh_block *d = b->data;
    st->state_bytes -= hx_rows_clear(st->cs, d);
    free(d);
}

static void clear_pending(bh_req *rq) {
    for (int32_t i = 0; i < rq->cap; i++) {
        eng_ckpt_free(rq->pending[i]);
        rq->pending[i] = NULL;
    }
}

static void bh_destroy(void *state) {
    bh_state *st = state;
    if (!st) return;
    for (int32_t k = 0; st->reqs && k < st->n_reqs; k++) {
        bh_req *rq = &st->reqs[k];
        if (rq->pending) clear_pending(rq);
        free(rq->hashes);
        free(rq->ids);
        free(rq->pending);
        free(rq->save_at);
    }
    free(st->reqs);
    hx_blockpool_free(st->pool);
    hx_carriers_free(st->cs);
    free(st);
}

/* The record of the request whose sequence is s (NULL: a free record). */
static bh_req *req_of(bh_state *st, const eng_seq *s) {
    for (int32_t k = 0; k < st->n_reqs; k++)
        if (st->reqs[k].seq == s) return &st->reqs[k];
    return NULL;
}

static int64_t gcd64(int64_t a, int64_t b) { return b ? gcd64(b, a % b) : a; }

/* vLLM's attention block size for a hybrid model (#40696): the smallest
 * multiple of unit whose KV over one attention layer covers one layer's
 * recurrent state. 0 when the model is not hybrid. */
static int32_t hybrid_block_size(const eng_model_info *mi, int32_t unit) {
    if (mi->n_layer_rec == 0 || mi->n_layer_attn == 0) return 0;
    int64_t page = mi->rec_state_bytes / mi->n_layer_rec;
    int64_t per_token = mi->kv_bytes_per_token / mi->n_layer_attn;
    int64_t blocks = (page + unit * per_token - 1) / (unit * per_token);
    return (int32_t)(unit * blocks);
}

static int bh_create(const hx_policy_config *cfg, void **state, char *err, size_t errlen) {
    bh_state *st = calloc(1, sizeof *st);
    if (!st) return ENG_ERR_NOMEM;
    *state = st;
    st->cfg = *cfg;
    st->o = *(const bh_opts *)cfg->opts;
    const eng_model_info *mi = eng_model_get_info(cfg->model);
    int32_t C = cfg->pp.chunk;
    st->grid = cfg->pp.align == ENG_ALIGN_CHUNK;
    st->needs_state = mi->n_layer_rec > 0 || mi->n_layer_swa > 0;
    st->B = st->o.block_size ? st->o.block_size : st->grid ? C : 16;
    if (cfg->quirks & Q_HYBRID_BLOCK_SIZE) {
        int32_t unit = st->grid ? (int32_t)(16 / gcd64(16, C) * C) : 16;
        int32_t hb = hybrid_block_size(mi, unit);
        if (st->B < hb) st->B = hb;  /* vLLM raises a block size left unset or set too small */
    }
    if (st->grid && st->B % C != 0) {
        eng_errf(err, errlen, "--block-size %d is not a multiple of the chunk %d: with --align chunk every block "
                 "boundary must lie on the grid (docs/experiments.md)", st->B, C);
        return ENG_ERR_ARG;
    }
    if (st->needs_state && st->o.mamba_mode == MAMBA_ALIGN && st->o.max_batched < st->B) {
        eng_errf(err, errlen, "--max-num-batched-tokens %d is smaller than the block size %d: in align mode no "
                 "block-aligned step could be scheduled", st->o.max_batched, st->B);
        return ENG_ERR_ARG;
    }
    st->block_bytes = (int64_t)st->B * mi->kv_bytes_per_token;
    st->pool = hx_blockpool_new(st->B, st->o.cache_blocks, bh_evict, st);
    st->cs = hx_carriers_new(cfg->model, cfg->n_ctx);
    st->n_reqs = cfg->n_parallel > 1 ? cfg->n_parallel : 1;
    st->reqs = calloc((size_t)st->n_reqs, sizeof *st->reqs);
    if (!st->pool || !st->cs || !st->reqs) return ENG_ERR_NOMEM;
    snprintf(st->opts_json, sizeof st->opts_json,
             "{\"block_size\":%d,\"block_size_arg\":%d,\"cache_blocks\":%d,\"mamba_cache_mode\":\"%s\","
             "\"max_num_batched_tokens\":%d,\"cache_salt\":%s%s%s}",
             st->B, st->o.block_size, st->o.cache_blocks, st->o.mamba_mode == MAMBA_ALL ? "all" : "align",
             st->o.max_batched, st->o.salt ? "\"" : "", st->o.salt ? st->o.salt : "null", st->o.salt ? "\"" : "");
    return ENG_OK;
}

static void bh_record_state(const void *state, hx_run_meta *meta) {
    const bh_state *st = state;
    meta->pol.block_size = st->B;
    meta->pol.policy_opts = st->opts_json;
}

/* Room for the blocks of n tokens. */
static int reserve(bh_state *st, bh_req *rq, int32_t n) {
    int32_t need = n / st->B + 2;
    if (need <= rq->cap) return ENG_OK;
    int32_t cap = need > 2 * rq->cap ? need : 2 * rq->cap;
    uint64_t *h = realloc(rq->hashes, sizeof *h * (size_t)cap);
    if (h) rq->hashes = h;
    int32_t *ids = realloc(rq->ids, sizeof *ids * (size_t)cap);
    if (ids) rq->ids = ids;
    eng_ckpt **p = realloc(rq->pending, sizeof *p * (size_t)cap);
    if (p) rq->pending = p;
    uint8_t *s = realloc(rq->save_at, (size_t)cap + 1);
    if (s) rq->save_at = s;
    if (!h || !ids || !p || !s) return ENG_ERR_NOMEM;
    for (int32_t i = rq->cap; i < cap; i++) rq->pending[i] = NULL;
    rq->cap = cap;
    return ENG_OK;
}

// ----------------------------------------------------------------------------
// Acquire: the longest cached chain of blocks

/* A cached block may serve a hit when a carrier holds its rows and, with
 * --cap-prompt, those rows are eligible (see the file comment). */
static bool accept_block(void *ud, const hx_block *b) {
    bh_state *st = ud;
    const bh_block *d = b->data;
    if (!d || !d->carrier || !hx_carrier_seq(d->carrier)) return false;
    return !st->cfg.cap_prompt || (b->index + 1) * st->B <= hx_carriers_eligible_end(st->cs, d->origin);
}

/* accept_block, for a block whose rows st->holder holds. */
static bool accept_held(void *ud, const hx_block *b) {
    bh_state *st = ud;
    return accept_block(ud, b) && hx_carrier_holds(st->cs, st->holder, b->index * st->B, (b->index + 1) * st->B,
                                                   ((const bh_block *)b->data)->origin, st->grid);
}

/* Where align mode keeps states (Scheduler._mamba_block_aligned_split): the
 * ends of scheduler steps that fall on block boundaries, prefilling n tokens
 * from hit. all: every block boundary. */
static void plan_states(bh_state *st, bh_req *rq, int32_t hit, int32_t n) {
    int32_t B = st->B, nb = n / B;
    memset(rq->save_at, 0, (size_t)nb + 1);
    if (!st->needs_state) return;
    if (st->o.mamba_mode == MAMBA_ALL) {
        for (int32_t b = hit / B + 1; b <= nb; b++) rq->save_at[b] = 1;
        return;
    }
    int32_t last = n - n % B;
    for (int32_t pos = hit; pos < n;) {
        int32_t step = st->o.max_batched < n - pos ? st->o.max_batched : n - pos;
        if (pos + step < last) step = step / B * B;                     /* whole blocks */
        else if (pos < last && last < pos + step) step = last - pos;   /* stop at the last boundary */
        pos += step;
        if (pos % B == 0 && pos > hit) rq->save_at[pos / B] = 1;
    }
}

/* cache_prompt: false: no block is looked up; the request's blocks are cached as usual. */
static void bh_hint(void *state, const hx_acquire_hint *h) { ((bh_state *)state)->no_reuse = h->no_reuse; }

static int bh_acquire(void *state, const int32_t *tokens, int32_t n, int32_t stable_end, hx_acquire *out) {
    bh_state *st = state;
    memset(out, 0, sizeof *out);
    out->slot = -1;
    int32_t B = st->B;
    bh_req *rq = req_of(st, NULL);
    if (!rq) return ENG_ERR_RANGE;  /* more requests in flight than n_parallel */
    if (reserve(st, rq, n) != ENG_OK) return ENG_ERR_NOMEM;
    clear_pending(rq);
    rq->n_prompt = n;
    rq->store_ms = 0;
    rq->src = NULL;
    rq->origin = hx_carriers_origin(st->cs, st->grid ? n / st->cfg.pp.chunk * st->cfg.pp.chunk : n);
    if (!rq->origin) return ENG_ERR_NOMEM;

    /* 1. the attention chain: from block 0 to the first miss, at most n - 1 tokens */
    int32_t nb = hx_block_hashes(tokens, n, B, st->o.salt, rq->hashes);
    int32_t max_blocks = st->no_reuse ? 0 : (n - 1) / B, k = 0;
    st->no_reuse = false;
    while (k < max_blocks) {
        int32_t id = hx_blockpool_find(st->pool, rq->hashes[k], k ? rq->hashes[k - 1] : 0, tokens + (size_t)k * B,
                                       accept_block, st);
        if (id < 0) break;
        rq->ids[k++] = id;
    }
    /* 2. states (right to left), and the carrier that holds the whole prefix */
    int32_t j = k, cut = -1;
    while (j > 0) {
        if (st->needs_state)
            while (j > 0 && !data_of(st, rq->ids[j - 1])->state) j--;
        if (j == 0) break;
        hx_carrier *x = data_of(st, rq->ids[j - 1])->carrier;
        int32_t bad = -1;
        st->holder = x;
        for (int32_t i = 0; i < j && bad < 0; i++) {
            if (hx_carrier_holds(st->cs, x, i * B, (i + 1) * B, data_of(st, rq->ids[i])->origin, st->grid)) continue;
            /* another cached block with this hash whose rows x holds (see the file comment) */
            int32_t id = hx_blockpool_find(st->pool, rq->hashes[i], i ? rq->hashes[i - 1] : 0, tokens + (size_t)i * B,
                                           accept_held, st);
            if (id >= 0) rq->ids[i] = id;
            else bad = i;
        }
        if (bad < 0) { rq->src = x; break; }
        j = cut = bad;
    }
    rq->n_hit = j;
    for (int32_t i = 0; i < j; i++) hx_blockpool_touch(st->pool, rq->ids[i]);

    /* 3. the sequence: the carrier's rows (its own sequence when nothing else needs it) */
    eng_seq *s = NULL;
    if (j > 0) {
        int32_t refs_below = 0;
        for (int32_t i = 0; i < j; i++) refs_below += data_of(st, rq->ids[i])->carrier == rq->src;
        const eng_ckpt *state_at = st->needs_state ? data_of(st, rq->ids[j - 1])->state : NULL;
        int rc = hx_carrier_restore_hit(st->cs, rq->src, j * B, state_at, refs_below, &s, &out->bytes_restored);
        if (rc != ENG_OK) return rc;
    } else if (!(s = hx_carriers_take_seq(st->cs))) {
        return ENG_ERR_NOMEM;
    }
    if (rq->src) hx_carrier_ref(rq->src);  /* its provenance is read at the release, whoever releases first */
    rq->seq = s;
    out->seq = s;
    out->n_reused = j * B;
    plan_states(st, rq, j * B, n);

    out->best = hx_carriers_last(st->cs, &out->n_best);
    out->lcp = hx_lcp(out->best, out->n_best, tokens, n);
    int off = snprintf(out->note, sizeof out->note, "hit %d of %d full blocks (B=%d, %d tokens)", j, nb, B, j * B);
    if (k < max_blocks && off < (int)sizeof out->note)
        off += snprintf(out->note + off, sizeof out->note - (size_t)off, "; block %d: hash %016llx not cached", k,
                        (unsigned long long)rq->hashes[k]);
    else if (k == max_blocks && max_blocks < nb && off < (int)sizeof out->note)
        off += snprintf(out->note + off, sizeof out->note - (size_t)off, "; last block recomputed (last token)");
    if (j < k && cut < 0 && off < (int)sizeof out->note)
        off += snprintf(out->note + off, sizeof out->note - (size_t)off, "; no state at blocks %d..%d", j, k - 1);
    if (cut >= 0 && off < (int)sizeof out->note)
        snprintf(out->note + off, sizeof out->note - (size_t)off, "; rows of block %d held by no carrier", cut);
    if (st->o.debug) {
        fprintf(stderr, "block-hash: request of %d tokens: %s\n", n, out->note);
        for (int32_t i = 0; i < nb; i++)
            fprintf(stderr, "block-hash:   block %4d tokens [%d, %d) hash %016llx %s\n", i, i * B, (i + 1) * B,
                    (unsigned long long)rq->hashes[i], i < j ? "hit" : i < k ? "cached, not used" : "miss");
    }
    return ENG_OK;
}

// ----------------------------------------------------------------------------
// States during the prefill, and release: cache the request's full blocks

static void bh_on_chunk(void *state, eng_seq *s, int32_t n_tokens) {
    bh_state *st = state;
    bh_req *rq = req_of(st, s);
    if (!rq || !st->needs_state || n_tokens % st->B) return;
    int32_t b = n_tokens / st->B;
    /* under --align none the steps are the engine's --ubatch chunks: every pause on a block boundary */
    if (b <= rq->n_hit || b > rq->n_prompt / st->B || (st->grid && !rq->save_at[b]) || rq->pending[b - 1]) return;
    double t0 = eng_now_s();
    rq->pending[b - 1] = eng_seq_checkpoint(s);
    rq->store_ms += 1e3 * (eng_now_s() - t0);
}

static int bh_release(void *state, eng_seq *s, int32_t n_prompt, hx_release *out) {
    bh_state *st = state;
    bh_req *rq = req_of(st, s);
    ENG_ASSERT(rq);
    int32_t B = st->B, n_total = eng_seq_n_tokens(s);
    int32_t committed = n_total > n_prompt ? n_total - 1 : n_total;  /* the last sampled token has no KV */
    const int32_t *tokens = eng_seq_tokens(s);
    if (reserve(st, rq, n_total) != ENG_OK) return ENG_ERR_NOMEM;
    int32_t nb = hx_block_hashes(tokens, committed, B, st->o.salt, rq->hashes);

    hx_carrier *c = hx_carrier_new(st->cs, s, rq->src, rq->n_hit * B, rq->origin);
    if (!c) return ENG_ERR_NOMEM;
    hx_carrier_ref(c);  /* held while the blocks are set up */
    for (int32_t i = 0; i < rq->n_hit; i++) {  /* the hit blocks' rows are in this sequence too */
        bh_block *d = data_of(st, rq->ids[i]);
        if (hx_carrier_holds(st->cs, c, i * B, (i + 1) * B, d->origin, st->grid)) hx_rows_point(st->cs, d, c);
    }
    int32_t n_ids = rq->n_hit, n_new = 0, not_cached = 0;
    int64_t new_state_bytes = 0;
    int32_t eligible = hx_carriers_eligible_end(st->cs, rq->origin);
    for (int32_t i = rq->n_hit; i < nb; i++) {
        int32_t id = hx_blockpool_alloc(st->pool);
        if (id < 0) { not_cached = nb - i; break; }
        rq->ids[n_ids++] = id;
        bh_block *d = calloc(1, sizeof *d);
        if (!d) return ENG_ERR_NOMEM;
        d->origin = rq->origin;
        d->state = rq->pending[i];
        rq->pending[i] = NULL;
        if (!st->cfg.cap_prompt || (i + 1) * B <= eligible) hx_rows_point(st->cs, d, c);
        if (d->state) new_state_bytes += (int64_t)eng_ckpt_size(d->state);
        if (hx_blockpool_cache(st->pool, id, rq->hashes[i], i ? rq->hashes[i - 1] : 0, i, tokens + (size_t)i * B, d) !=
            ENG_OK) {
            hx_rows_clear(st->cs, d);
            free(d);
            return ENG_ERR_NOMEM;
        }
        n_new++;
    }
    st->state_bytes += new_state_bytes;
    if (committed % B && !not_cached) {  /* the partial block: in use, never cached */
        int32_t id = hx_blockpool_alloc(st->pool);
        if (id >= 0) rq->ids[n_ids++] = id;
    }
    hx_blockpool_release(st->pool, rq->ids, n_ids);
    clear_pending(rq);
    hx_carrier_unref(st->cs, c);  /* freed here when no block needs it */
    hx_carrier_unref(st->cs, rq->src);
    rq->src = NULL;
    rq->seq = NULL;

    hx_carriers_remember(st->cs, tokens, n_total);

    out->n_stored = n_new;
    out->bytes_stored = n_new * st->block_bytes + new_state_bytes;
    out->store_ms = rq->store_ms;
    out->bytes_held = hx_blockpool_cached(st->pool) * st->block_bytes + st->state_bytes;
    out->entries_held = hx_blockpool_cached(st->pool);
    if (st->o.debug)
        fprintf(stderr, "block-hash: cached %d new blocks (%d not cached: pool full), %d cached, %lld evicted, "
                "%d carriers\n", n_new, not_cached, hx_blockpool_cached(st->pool),
                (long long)hx_blockpool_evictions(st->pool), hx_carriers_live(st->cs));
    return ENG_OK;
}

// ----------------------------------------------------------------------------
// Token-only mode (simulate): the same pool over trace block ids
//
// A policy block is `group` trace blocks (the trace's block unless
// --block-size, or the quirk, makes it larger); its "tokens" in the pool are
// the words of those ids (HX_SIM_WORDS each), chained by hx_block_hashes as
// token ids are, so block i is found only when blocks 0..i-1 were. Per
// request: the leading cached blocks are hit (stopping at the first miss,
// vLLM's find_longest_cache_hit), touched out of the free blocks, the rest
// allocated and cached (evicting free blocks in the pool's order; a request
// larger than the pool caches what fits), then all released, last block
// first. Every trace block, the partial last one included, is a block here:
// an id stands for exactly its tokens. vLLM's at-most-n-1-tokens rule is the
// time model's (one token is always prefilled), not the hit's.

typedef struct bh_sim {
    hx_blockpool *pool;
    int32_t       group;      /* trace blocks per policy block */
    int32_t       W;          /* pool "tokens" per block: group * HX_SIM_WORDS */
    uint64_t     *hashes;     /* (cap) */
    int32_t      *ids;        /* (cap) */
    int32_t       cap;
    int64_t      *origin;     /* (cap_origin) by pool block id: the request that cached it */
    int32_t       cap_origin;
    const char   *salt;
} bh_sim;

static void bh_sim_destroy(void *state) {
    bh_sim *st = state;
    if (!st) return;
    hx_blockpool_free(st->pool);
    free(st->hashes);
    free(st->ids);
    free(st->origin);
    free(st);
}

static int bh_sim_create(const hx_sim_config *cfg, void **state, char *err, size_t errlen) {
    bh_sim *st = calloc(1, sizeof *st);
    if (!st) return ENG_ERR_NOMEM;
    *state = st;
    const bh_opts *o = cfg->opts;
    int64_t B = cfg->block_size ? cfg->block_size : o->block_size ? o->block_size : cfg->block_tokens;
    if (B % cfg->block_tokens) {
        eng_errf(err, errlen, "block-hash: --block-size %lld is not a whole number of the trace's %d-token blocks",
                 (long long)B, cfg->block_tokens);
        return ENG_ERR_ARG;
    }
    if ((cfg->quirks & Q_HYBRID_BLOCK_SIZE) && cfg->model) {  /* vLLM #40696, unit 16 as vLLM's */
        int32_t hb = hybrid_block_size(cfg->model, 16);
        if (B < hb) B = (hb + cfg->block_tokens - 1) / cfg->block_tokens * cfg->block_tokens;
    }
    st->group = (int32_t)(B / cfg->block_tokens);
    st->W = st->group * HX_SIM_WORDS;
    st->salt = o->salt;
    int64_t cap = cfg->capacity_tokens / B;
    if (cfg->capacity_tokens > 0 && cap < 1) {
        eng_errf(err, errlen, "block-hash: --capacity %lld tokens holds no %lld-token block",
                 (long long)cfg->capacity_tokens, (long long)B);
        return ENG_ERR_ARG;
    }
    if (cap > (1 << 30)) {
        eng_errf(err, errlen, "block-hash: --capacity %lld tokens is more than 2^30 blocks of %lld tokens",
                 (long long)cfg->capacity_tokens, (long long)B);
        return ENG_ERR_ARG;
    }
    st->pool = hx_blockpool_new_evict(st->W, (int32_t)cap, cfg->evict, NULL, NULL);
    return st->pool ? ENG_OK : ENG_ERR_NOMEM;
}

static int bh_sim_reserve(bh_sim *st, int32_t m) {
    if (m <= st->cap) return ENG_OK;
    int32_t cap = m > 2 * st->cap ? m : 2 * st->cap;
    uint64_t *h = realloc(st->hashes, sizeof *h * (size_t)cap);
    if (h) st->hashes = h;
    int32_t *ids = realloc(st->ids, sizeof *ids * (size_t)cap);
    if (ids) st->ids = ids;
    if (!h || !ids) return ENG_ERR_NOMEM;
    st->cap = cap;
    return ENG_OK;
}

/* The leading cached blocks of the request's m policy blocks (hashes in
 * st->hashes, hits' ids in st->ids). */
static int32_t bh_sim_lookup(bh_sim *st, const int32_t *words, int32_t m) {
    int32_t k = 0;
    while (k < m) {
        int32_t id = hx_blockpool_find(st->pool, st->hashes[k], k ? st->hashes[k - 1] : 0, words + (size_t)k * st->W,
                                       NULL, NULL);
        if (id < 0) break;
        st->ids[k++] = id;
    }
    return k;
}

static int32_t bh_sim_peek(void *state, const hx_sim_req *r) {
    bh_sim *st = state;
    int32_t m = r->n_blocks / st->group;
    if (bh_sim_reserve(st, m) != ENG_OK) return 0;
    hx_block_hashes(r->words, m * st->W, st->W, st->salt, st->hashes);
    return bh_sim_lookup(st, r->words, m) * st->group;
}

static int bh_sim_access(void *state, const hx_sim_req *r, hx_sim_access *out) {
    bh_sim *st = state;
    memset(out, 0, sizeof *out);
    out->origin = -1;
    int32_t m = r->n_blocks / st->group;
    if (bh_sim_reserve(st, m) != ENG_OK) return ENG_ERR_NOMEM;
    hx_block_hashes(r->words, m * st->W, st->W, st->salt, st->hashes);
    int64_t ev0 = hx_blockpool_evictions(st->pool);
    int32_t k = bh_sim_lookup(st, r->words, m), counted = k;
    if (hx_cache_faults & HX_FAULT_HIT_AFTER_GAP)  /* planted: blocks past the first miss counted too */
        for (int32_t i = k + 1; i < m; i++)
            counted += hx_blockpool_find(st->pool, st->hashes[i], st->hashes[i - 1], r->words + (size_t)i * st->W,
                                         NULL, NULL) >= 0;
    if (k > 0) out->origin = st->origin[st->ids[k - 1]];
    for (int32_t i = 0; i < k; i++) hx_blockpool_touch(st->pool, st->ids[i]);
    int32_t n_ids = k;
    for (int32_t i = k; i < m; i++) {
        int32_t id = hx_blockpool_alloc(st->pool);
        if (id < 0) break;  /* every block is in use: the rest is not cached */
        st->ids[n_ids++] = id;
        if (id >= st->cap_origin) {
            int32_t cap = st->cap_origin ? 2 * st->cap_origin : 1024;
            while (cap <= id) cap *= 2;
            int64_t *g = realloc(st->origin, sizeof *g * (size_t)cap);
            if (!g) { hx_blockpool_release(st->pool, st->ids, n_ids); return ENG_ERR_NOMEM; }
            st->origin = g;
            st->cap_origin = cap;
        }
        st->origin[id] = r->index;
        if (hx_blockpool_cache(st->pool, id, st->hashes[i], i ? st->hashes[i - 1] : 0, i, r->words + (size_t)i * st->W,
                               NULL) != ENG_OK) {
            hx_blockpool_release(st->pool, st->ids, n_ids);
            return ENG_ERR_NOMEM;
        }
    }
    hx_blockpool_release(st->pool, st->ids, n_ids);
    out->hit_blocks = counted * st->group;
    out->stored_blocks = (n_ids - k) * st->group;
    out->evicted_blocks = (hx_blockpool_evictions(st->pool) - ev0) * st->group;
    out->held_blocks = (int64_t)hx_blockpool_cached(st->pool) * st->group;
    return ENG_OK;
}

static int bh_sim_check(void *state, char *err, size_t errlen) {
    bh_sim *st = state;
    return hx_blockpool_check(st->pool, err, errlen);
}

static const hx_sim_ops bh_sim_ops = {
    .check = bh_sim_check,
    .create = bh_sim_create,
    .peek = bh_sim_peek,
    .access = bh_sim_access,
    .destroy = bh_sim_destroy,
};

const hx_policy_ops hx_policy_block_hash = {
    .name = "block-hash",
    .options = bh_options,
    .defaults = &bh_defaults,
    .opts_size = sizeof(bh_opts),
    .quirks = bh_quirks,
    .record_state = bh_record_state,
    .create = bh_create,
    .acquire = bh_acquire,
    .on_chunk = bh_on_chunk,
    .release = bh_release,
    .destroy = bh_destroy,
    .hint = bh_hint,
    .sim = &bh_sim_ops,
};
