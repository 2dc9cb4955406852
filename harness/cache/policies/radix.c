/*
 * harness/cache/policies/radix.c: SGLang's RadixAttention prefix cache
 * (python/sglang/srt/mem_cache/radix_cache.py, and mamba_radix_cache.py for
 * recurrent and hybrid models), over cache/radixtree and cache/carrier.
 *
 * Per request:
 *   1. match: the prompt's first n - 1 tokens (one token is always computed;
 *      Req.init_next_round_input) against the tree, rounded down to whole
 *      pages of --page-size tokens; the node where the match ends is split
 *      there; the path is touched and locked while the request runs;
 *   2. memory that cannot be truncated (MambaRadixCache): the hit ends at the
 *      deepest node on the path that holds a state (its end). States are
 *      taken at multiples of the state unit lcm(C, page) (SGLang's
 *      extra_buffer strategy tracks states at mamba_cache_chunk_size
 *      multiples; C plays that role here): at the prompt's last such point
 *      (mamba_last_track_seqlen) and at the branch point, the last such point
 *      of the match when the match reaches past the deepest state
 *      (mamba_branching_seqlen), so the next request through the branch hits;
 *   3. with --align chunk the reuse point is floored to the grid (SGLang's
 *      deterministic radix cache, PR #10721, aligned matches to the
 *      attention kernel's split size the same way); the rest of the prompt
 *      is prefilled;
 *   4. release (cache_finished_req): the request's committed tokens (prompt
 *      and response but the response's last token, whose KV a server never
 *      computes: (origin_input_ids + output_ids)[:kv_committed_len]), rounded
 *      down to the page, are inserted; nodes already present keep their rows
 *      (SGLang frees the duplicates); the rest becomes one new leaf. For a
 *      model with states the key ends at the last state taken (extra_buffer's
 *      cache_len), and the states are hung on the nodes ending at their
 *      positions (split there when needed). Over --max-total-tokens, least
 *      recently used unlocked leaves are evicted first.
 * With --cap-prompt on (the default) rows past their request's eligible end
 * (decode-written, or in a final partial chunk) stay in the tree but never
 * serve a hit, and a later request's eligible rows of the same tokens take
 * their place; SGLang reuses them (--cap-prompt off).
 *
 * Quirk (off by default): prompt-key (SGLang #16521): cache_finished_req
 * inserted req.fill_ids, the prompt only, set before decode: the generated
 * tokens never enter the tree, so the next turn reuses the prompt and
 * recomputes the previous answer (fixed by inserting (origin_input_ids +
 * output_ids)[:kv_committed_len]).
 *
 * Requests in flight (serve --parallel N): each has its own record (its
 * locked path, reuse point, origin, the carrier it restored from, which it
 * holds a reference on until its release, and its tracked states) found by
 * its sequence; the tree and the carriers are shared, and a request is
 * inserted at its release (SGLang inserts a chunked prefill's chunks as they
 * finish: a request beside it may hit them earlier there).
 *
 * SGLang #34683 (a radix hit flips greedy output while two cold runs agree:
 * the hit's extend pass computes the suffix in other shapes than the fresh
 * prefill) is no quirk here: it is --align none, whose reused suffix is
 * prefilled in --ubatch chunks from the reuse point while cold runs from 0
 * (docs/experiments.md).
 */
#include "options.h"
#include "policy.h"

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "carrier.h"
#include "radixtree.h"
#include "status.h"
#include "store.h"
#include "util.h"

// ----------------------------------------------------------------------------
// Options and quirks (kvreplay replay --help lists them)

typedef struct rx_opts {
    int32_t page_size;   /* --page-size: match granularity in tokens */
    int64_t max_tokens;  /* --max-total-tokens: the token pool, 0: unbounded */
    bool    debug;
} rx_opts;

static const rx_opts rx_defaults = {.page_size = 1};

static const hx_option rx_options[] = {
    {"--page-size", NULL, "N", "tokens per page; matches are rounded down to whole pages (default 1)",
     HX_OPT_INT, offsetof(rx_opts, page_size), 1, 1 << 16, NULL},
    {"--max-total-tokens", NULL, "N", "tokens the tree may hold, LRU eviction of leaves (default 0:\n"
     "unbounded)", HX_OPT_INT64, offsetof(rx_opts, max_tokens), 0, (double)(1LL << 40), NULL},
    {"--debug", NULL, NULL, "each request's matched nodes on stderr", HX_OPT_FLAG, offsetof(rx_opts, debug), 0, 0,
     NULL},
    {0},
};

/* Bit k of hx_policy_config.quirks is rx_quirks[k]. */
enum { Q_PROMPT_KEY = 1u << 0 };
static const hx_quirk rx_quirks[] = {
    {"prompt-key", "the finished request is inserted under its prompt only: generated tokens never hit",
     "SGLang #16521"},
    {0},
};

// ----------------------------------------------------------------------------
// State

/* A tree node's payload is an hx_rows (carrier.h): the carrier with its
 * rows, the request that computed them, the state at its end. */
typedef hx_rows rx_node;

#define MAX_TRACK 2

typedef struct rx_state {
    hx_policy_config cfg;
    rx_opts      o;
    bool         grid;         /* --align chunk */
    bool         needs_state;  /* recurrent or sliding-window layers */
    int32_t      unit;         /* state positions: multiples of lcm(C, page) */
    int64_t      tok_bytes;    /* KV bytes per token over the full-attention layers */
    hx_radix    *t;
    hx_carriers *cs;
    int64_t      state_bytes;
    char         opts_json[160];
    hx_rnode   **path;         /* (cap_path) */
    int32_t      cap_path;
    struct rx_req *reqs;       /* (n_reqs) the requests in flight */
    int32_t      n_reqs;
    bool         no_reuse;     /* the next request asked for no reuse (kvreplay serve's cache_prompt: false) */
} rx_state;

/* A request in flight (acquire .. release). */
typedef struct rx_req {
    eng_seq     *seq;          /* its sequence; NULL: the record is free */
    hx_rnode    *locked;
    int32_t      r, n_prompt;
    uint32_t     origin;
    hx_carrier  *src;          /* the carrier restored from (a reference held), or NULL */
    int32_t      track_target[MAX_TRACK];  /* where a state is wanted */
    int32_t      track_pos[MAX_TRACK];     /* where it was taken: the last pause at or below the target */
    eng_ckpt    *track_ckpt[MAX_TRACK];
    int32_t      n_track;
    double       store_ms;
} rx_req;

/* The record of the request whose sequence is s (NULL: a free record). */
static rx_req *req_of(rx_state *st, const eng_seq *s) {
    for (int32_t k = 0; k < st->n_reqs; k++)
        if (st->reqs[k].seq == s) return &st->reqs[k];
    return NULL;
}

static rx_node *node_data(const hx_rnode *n) { return n->data; }

static void rx_split(void *ud, hx_rnode *upper, hx_rnode *lower) {
    const rx_node *d = lower->data;
    rx_node *u = calloc(1, sizeof *u);
    if (u && d) {
        u->origin = d->origin;
        hx_rows_point(((rx_state *)ud)->cs, u, d->carrier);
    }
    upper->data = u;  /* NULL (OOM): the prefix's rows can no longer serve */
}

static void rx_drop(void *ud, hx_rnode *n) {
    rx_state *st = ud;
    st->state_bytes -= hx_rows_clear(st->cs, n->data);
    free(n->data);
    n->data = NULL;
}

static void clear_track(rx_req *rq) {
    for (int32_t i = 0; i < MAX_TRACK; i++) {
        eng_ckpt_free(rq->track_ckpt[i]);
        rq->track_ckpt[i] = NULL;
    }
    rq->n_track = 0;
}

static void rx_destroy(void *state) {
    rx_state *st = state;
    if (!st) return;
    for (int32_t k = 0; st->reqs && k < st->n_reqs; k++) clear_track(&st->reqs[k]);
    free(st->reqs);
    hx_radix_free(st->t);
    hx_carriers_free(st->cs);
    free(st->path);
    free(st);
}

static int64_t gcd64(int64_t a, int64_t b) { return b ? gcd64(b, a % b) : a; }

static int rx_create(const hx_policy_config *cfg, void **state, char *err, size_t errlen) {
    rx_state *st = calloc(1, sizeof *st);
    if (!st) return ENG_ERR_NOMEM;
    *state = st;
    st->cfg = *cfg;
    st->o = *(const rx_opts *)cfg->opts;
    const eng_model_info *mi = eng_model_get_info(cfg->model);
    int32_t C = cfg->pp.chunk, P = st->o.page_size;
    st->grid = cfg->pp.align == ENG_ALIGN_CHUNK;
    st->needs_state = mi->n_layer_rec > 0 || mi->n_layer_swa > 0;
    st->unit = (int32_t)(C / gcd64(C, P) * P);
    st->tok_bytes = mi->kv_bytes_per_token;
    st->t = hx_radix_new(P, rx_split, rx_drop, st);
    st->cs = hx_carriers_new(cfg->model, cfg->n_ctx);
    st->n_reqs = cfg->n_parallel > 1 ? cfg->n_parallel : 1;
    st->reqs = calloc((size_t)st->n_reqs, sizeof *st->reqs);
    if (!st->t || !st->cs || !st->reqs) return ENG_ERR_NOMEM;
    snprintf(st->opts_json, sizeof st->opts_json, "{\"page_size\":%d,\"max_total_tokens\":%lld,\"state_unit\":%d}", P,
             (long long)st->o.max_tokens, st->needs_state ? st->unit : 0);
    (void)err;
    (void)errlen;
    return ENG_OK;
}

static void rx_record_state(const void *state, hx_run_meta *meta) {
    const rx_state *st = state;
    meta->pol.block_size = st->o.page_size;
    meta->pol.policy_opts = st->opts_json;
}

/* The path from the root to node into st->path; its length, -1 on OOM. */
static int32_t get_path(rx_state *st, hx_rnode *node) {
    int32_t need = hx_radix_nodes(st->t) + 1;
    if (need > st->cap_path) {
        hx_rnode **p = realloc(st->path, sizeof *p * (size_t)need);
        if (!p) return -1;
        st->path = p;
        st->cap_path = need;
    }
    return hx_radix_path(node, st->path, st->cap_path);
}

static int32_t node_end(const hx_rnode *n) { return n->start + n->len; }

/* Whether node's rows may serve a hit: a carrier holds them (and, with
 * --cap-prompt, the part below its origin's eligible end): the usable end. */
static int32_t usable_end(const rx_state *st, const hx_rnode *n) {
    const rx_node *d = node_data(n);
    if (!d || !d->carrier || !hx_carrier_seq(d->carrier)) return n->start;
    if (!st->cfg.cap_prompt) return node_end(n);
    int32_t ge = hx_carriers_eligible_end(st->cs, d->origin);
    return ge < n->start ? n->start : ge < node_end(n) ? ge : node_end(n);
}

/* The reuse point at most e along path[0, np): the deepest state at or below
 * e for memory that cannot be truncated, then the grid. */
static int32_t reuse_point(const rx_state *st, int32_t np, int32_t e) {
    int32_t r = e;
    if (st->needs_state) {
        r = 0;
        for (int32_t i = 0; i < np; i++)
            if (node_data(st->path[i]) && node_data(st->path[i])->state && node_end(st->path[i]) <= e)
                r = node_end(st->path[i]);
    }
    if (st->grid) r = r / st->cfg.pp.chunk * st->cfg.pp.chunk;
    return r;
}

// ----------------------------------------------------------------------------
// Acquire

static void track(rx_req *rq, int32_t pos) {
    for (int32_t i = 0; i < rq->n_track; i++)
        if (rq->track_target[i] == pos) return;
    if (rq->n_track < MAX_TRACK) rq->track_target[rq->n_track++] = pos;
}

/* cache_prompt: false: nothing reused (the match still locks and touches the path, as a lookup
 * does); there is one tree, no slot to choose. */
static void rx_hint(void *state, const hx_acquire_hint *h) { ((rx_state *)state)->no_reuse = h->no_reuse; }

static int rx_acquire(void *state, const int32_t *tokens, int32_t n, int32_t stable_end, hx_acquire *out) {
    rx_state *st = state;
    memset(out, 0, sizeof *out);
    out->slot = -1;
    rx_req *rq = req_of(st, NULL);
    if (!rq) return ENG_ERR_RANGE;  /* more requests in flight than n_parallel */
    clear_track(rq);
    rq->n_prompt = n;
    rq->store_ms = 0;
    rq->src = NULL;
    int32_t C = st->cfg.pp.chunk;
    rq->origin = hx_carriers_origin(st->cs, st->grid ? n / C * C : n);
    if (!rq->origin) return ENG_ERR_NOMEM;

    /* 1. the match (one token is always computed) */
    hx_rnode *last = NULL;
    int32_t m = hx_radix_match(st->t, tokens, n - 1, &last);
    if (m < 0) return ENG_ERR_NOMEM;
    int32_t np = get_path(st, last);
    if (np < 0) return ENG_ERR_NOMEM;
    int32_t e = m;
    for (int32_t i = 0; i < np; i++) {
        int32_t u = usable_end(st, st->path[i]);
        if (u < node_end(st->path[i])) { e = u; break; }
    }
    /* 2-3. states, the grid, and a carrier that holds the whole prefix */
    int32_t r = st->no_reuse ? 0 : reuse_point(st, np, e), cut = -1;
    st->no_reuse = false;
    while (r > 0) {
        int32_t q = 0;
        while (node_end(st->path[q]) < r) q++;
        hx_carrier *x = node_data(st->path[q])->carrier;
        int32_t bad = -1;
        for (int32_t i = 0; i <= q && bad < 0; i++) {
            int32_t a = st->path[i]->start, b = node_end(st->path[i]) < r ? node_end(st->path[i]) : r;
            if (!hx_carrier_holds(st->cs, x, a, b, node_data(st->path[i])->origin, st->grid)) bad = a;
        }
        if (bad < 0) { rq->src = x; break; }
        cut = bad;
        r = reuse_point(st, np, bad);
    }
    rq->r = r;
    hx_radix_lock(st->t, last);
    rq->locked = last;

    eng_seq *s = NULL;
    if (r > 0) {
        /* in place only when every node naming the carrier lies below r (rows past r are overwritten) */
        int32_t refs_below = 0, q = 0;
        for (int32_t i = 0; i < np && st->path[i]->start < r; i++) {
            refs_below += node_data(st->path[i])->carrier == rq->src && node_end(st->path[i]) <= r;
            q = i;
        }
        const eng_ckpt *state_at = st->needs_state ? node_data(st->path[q])->state : NULL;
        ENG_ASSERT(!st->needs_state || (state_at && node_end(st->path[q]) == r));
        int rc = hx_carrier_restore_hit(st->cs, rq->src, r, state_at, refs_below, &s, &out->bytes_restored);
        if (rc != ENG_OK) return rc;
    } else if (!(s = hx_carriers_take_seq(st->cs))) {
        return ENG_ERR_NOMEM;
    }
    if (rq->src) hx_carrier_ref(rq->src);  /* its provenance is read at the release, whoever releases first */
    rq->seq = s;
    out->seq = s;
    out->n_reused = r;

    /* states to take during the prefill: the branch point and the prompt's last state point */
    int32_t state_end = 0;
    if (st->needs_state) {
        for (int32_t i = 0; i < np; i++)
            if (node_data(st->path[i]) && node_data(st->path[i])->state) state_end = node_end(st->path[i]);
        int32_t branch = m / st->unit * st->unit;
        if (m > state_end && branch > r) track(rq, branch);
        if (n / st->unit * st->unit > r) track(rq, n / st->unit * st->unit);
    }

    out->best = hx_carriers_last(st->cs, &out->n_best);
    out->lcp = hx_lcp(out->best, out->n_best, tokens, n);
    int off = snprintf(out->note, sizeof out->note, "matched %d tokens (page %d) in %d nodes, reused %d", m,
                       st->o.page_size, np, r);
    if (e < m && off < (int)sizeof out->note)
        off += snprintf(out->note + off, sizeof out->note - (size_t)off, "; rows past %d not eligible", e);
    if (st->needs_state && off < (int)sizeof out->note)
        off += snprintf(out->note + off, sizeof out->note - (size_t)off, "; deepest state at %d", state_end);
    if (cut >= 0 && off < (int)sizeof out->note)
        off += snprintf(out->note + off, sizeof out->note - (size_t)off, "; rows at %d held by no carrier", cut);
    if (rq->n_track && off < (int)sizeof out->note)
        snprintf(out->note + off, sizeof out->note - (size_t)off, "; states wanted at %d%s%.0d", rq->track_target[0],
                 rq->n_track > 1 ? ", " : "", rq->n_track > 1 ? rq->track_target[1] : 0);
    if (st->o.debug) {
        fprintf(stderr, "radix: request of %d tokens: %s\n", n, out->note);
        for (int32_t i = 0; i < np; i++) {
            const rx_node *d = node_data(st->path[i]);
            fprintf(stderr, "radix:   node [%d, %d) origin %u%s%s\n", st->path[i]->start, node_end(st->path[i]),
                    d ? d->origin : 0, d && d->state ? " state" : "", d && d->carrier ? "" : " (no rows)");
        }
    }
    return ENG_OK;
}

// ----------------------------------------------------------------------------
// Room in the tree (shared by replay and simulate)

/* SGLang's rule over --max-total-tokens (evict before the new tokens are
 * placed): evicts leaves in the tree's order until key[0, n)'s missing part
 * fits under cap, then cuts the key to the room left, in whole pages. The
 * path the request matched is locked. Returns the length to insert. */
static int32_t fit_key(hx_radix *t, const int32_t *key, int32_t n, int64_t cap) {
    int32_t P = hx_radix_page(t), present = hx_radix_peek(t, key, n), want = n;
    int64_t over = hx_radix_tokens(t) + (n - present) - cap;
    if (over > 0) hx_radix_evict(t, over);
    present = hx_radix_peek(t, key, n);  /* an unlocked part of it may have gone */
    int64_t room = cap - hx_radix_tokens(t);
    if (n - present > room) n = (int32_t)((present + (room > 0 ? room : 0)) / P * P);
    if ((hx_cache_faults & HX_FAULT_OVER_CAPACITY) && n < want) n += P;  /* planted: one page past the capacity */
    return n;
}

// ----------------------------------------------------------------------------
// States during the prefill, and release: insert the request

/* A state can only be taken where the prefill pauses: at every multiple of C
 * under --align chunk (so exactly at the target), at the --ubatch chunk ends
 * from the reuse point under --align none (so at the last such end at or
 * below the target on a page boundary). */
static void rx_on_chunk(void *state, eng_seq *s, int32_t n_tokens) {
    rx_state *st = state;
    rx_req *rq = req_of(st, s);
    if (!rq) return;
    for (int32_t i = 0; i < rq->n_track; i++) {
        int32_t t = rq->track_target[i];
        bool take = st->grid ? n_tokens == t : n_tokens <= t && n_tokens > rq->r && n_tokens % st->o.page_size == 0;
        if (!take) continue;
        double t0 = eng_now_s();
        eng_ckpt_free(rq->track_ckpt[i]);
        rq->track_ckpt[i] = eng_seq_checkpoint(s);
        rq->track_pos[i] = n_tokens;
        rq->store_ms += 1e3 * (eng_now_s() - t0);
    }
}

/* The node on the path to leaf that ends at pos (split there when needed), or NULL. */
static hx_rnode *node_ending_at(rx_state *st, hx_rnode *leaf, int32_t pos) {
    for (hx_rnode *x = leaf; x && x->parent; x = x->parent)
        if (x->start < pos && pos <= node_end(x)) return hx_radix_split_at(st->t, x, pos);
    return NULL;
}

/* After the request (its rows in carrier c), along the path to node:
 *   - a node whose rows c holds points to c (older carriers can go);
 *   - a node whose rows are not eligible (decode-written, a final partial
 *     chunk), where c has this request's eligible rows of the same tokens,
 *     takes c's rows. SGLang keeps the older rows and would serve a prefix
 *     mixing them with this request's later rows (computed over its own);
 *     a carrier holds one sequence's rows, so the node takes the newer rows
 *     instead: the hit lengths stay SGLang's. Older eligible rows are kept.
 * Splits (at the reuse point, at an eligible end) restart the walk. */
static void adopt(rx_state *st, const rx_req *rq, hx_rnode *node, hx_carrier *c) {
    int32_t ge = hx_carriers_eligible_end(st->cs, rq->origin), P = st->o.page_size;
    for (int32_t pass = 0; pass < 8; pass++) {
        int32_t np = get_path(st, node);
        bool again = false;
        for (int32_t i = 0; i < np && !again; i++) {
            hx_rnode *x = st->path[i];
            rx_node *d = node_data(x);
            int32_t a = x->start, b = node_end(x);
            if (!d || d->carrier == c) continue;
            if (d->carrier && hx_carrier_holds(st->cs, c, a, b, d->origin, st->grid)) {
                hx_rows_point(st->cs, d, c);
                continue;
            }
            int32_t old_ge = hx_carriers_eligible_end(st->cs, d->origin);
            if (d->carrier && old_ge >= b) continue;  /* older eligible rows: kept */
            int32_t cut = d->carrier && old_ge > a ? old_ge / P * P : a < rq->r ? rq->r : b > ge ? ge / P * P : b;
            if (cut > a && cut < b && cut % P == 0) {  /* split, then look again */
                again = hx_radix_split_at(st->t, x, cut) != NULL;
                continue;
            }
            if (a < rq->r || b > ge || d->state) continue;
            hx_rows_point(st->cs, d, c);  /* this request's eligible rows replace them */
            d->origin = rq->origin;
        }
        if (!again) return;
    }
}

static int rx_release(void *state, eng_seq *s, int32_t n_prompt, hx_release *out) {
    rx_state *st = state;
    rx_req *rq = req_of(st, s);
    ENG_ASSERT(rq);
    int32_t n_total = eng_seq_n_tokens(s), P = st->o.page_size;
    int32_t committed = n_total > n_prompt ? n_total - 1 : n_total;
    const int32_t *tokens = eng_seq_tokens(s);

    /* the key: the committed tokens (the prompt only, with the quirk), or up to the last state taken */
    int32_t key = (st->cfg.quirks & Q_PROMPT_KEY) ? n_prompt : committed;
    if (st->needs_state) {
        key = 0;
        for (int32_t i = 0; i < rq->n_track; i++)
            if (rq->track_ckpt[i] && rq->track_pos[i] > key && rq->track_pos[i] <= committed) key = rq->track_pos[i];
    }
    key = key / P * P;
    if (key > 0 && st->o.max_tokens > 0) key = fit_key(st->t, tokens, key, st->o.max_tokens);
    int64_t before = hx_radix_tokens(st->t), new_tokens = 0, new_state_bytes = 0;
    hx_carrier *c = hx_carrier_new(st->cs, s, rq->src, rq->r, rq->origin);
    if (!c) return ENG_ERR_NOMEM;
    hx_carrier_ref(c);  /* held while the tree is updated */
    if (key > 0) {
        hx_rnode *leaf = NULL;
        int32_t prefix = hx_radix_insert(st->t, tokens, key, &leaf);
        if (prefix < 0) { hx_carrier_unref(st->cs, c); return ENG_ERR_NOMEM; }
        new_tokens = hx_radix_tokens(st->t) - before;
        if (prefix < key) {  /* the new leaf: this request's rows */
            rx_node *d = calloc(1, sizeof *d);
            if (!d) { hx_carrier_unref(st->cs, c); return ENG_ERR_NOMEM; }
            d->origin = rq->origin;
            hx_rows_point(st->cs, d, c);
            leaf->data = d;
            int32_t ge = hx_carriers_eligible_end(st->cs, rq->origin) / P * P;
            if (st->cfg.cap_prompt && ge < key) {  /* its ineligible tail keeps no rows */
                /* split at ge: the upper part keeps the rows, leaf becomes [ge, key) */
                bool tail = ge <= leaf->start || hx_radix_split_at(st->t, leaf, ge) != NULL;
                if (tail && node_data(leaf)) hx_rows_point(st->cs, node_data(leaf), NULL);
            }
        }
        for (int32_t i = 0; i < rq->n_track; i++) {  /* states on the nodes ending at their positions */
            if (!rq->track_ckpt[i] || rq->track_pos[i] > key) continue;
            hx_rnode *x = node_ending_at(st, leaf, rq->track_pos[i]);
            rx_node *d = x ? node_data(x) : NULL;
            if (!d || d->state) continue;  /* SGLang keeps a state already there */
            d->state = rq->track_ckpt[i];
            rq->track_ckpt[i] = NULL;
            new_state_bytes += (int64_t)eng_ckpt_size(d->state);
        }
        st->state_bytes += new_state_bytes;
        adopt(st, rq, leaf, c);
    } else {
        adopt(st, rq, rq->locked, c);  /* the prefix's rows live on in this sequence */
    }
    hx_radix_unlock(st->t, rq->locked);
    rq->locked = NULL;
    clear_track(rq);
    hx_carrier_unref(st->cs, c);  /* freed here when no node needs it */
    hx_carrier_unref(st->cs, rq->src);
    rq->src = NULL;
    rq->seq = NULL;

    hx_carriers_remember(st->cs, tokens, n_total);

    out->n_stored = (int32_t)new_tokens;
    out->bytes_stored = new_tokens * st->tok_bytes + new_state_bytes;
    out->store_ms = rq->store_ms;
    out->bytes_held = hx_radix_tokens(st->t) * st->tok_bytes + st->state_bytes;
    out->entries_held = hx_radix_nodes(st->t);
    if (st->o.debug)
        fprintf(stderr, "radix: inserted %d tokens (%lld new), tree %lld tokens in %d nodes, %lld evicted, "
                "%d carriers\n", key, (long long)new_tokens, (long long)hx_radix_tokens(st->t),
                hx_radix_nodes(st->t), (long long)hx_radix_evicted(st->t), hx_carriers_live(st->cs));
    return ENG_OK;
}

// ----------------------------------------------------------------------------
// Token-only mode (simulate): the same tree over trace block ids
//
// Keys are the words of the request's block ids (HX_SIM_WORDS per trace
// block), pages are one policy block (--page-size in tokens, a whole number
// of trace blocks; the trace's block by default). Per request: the match
// (split at its end, touched and counted as a hit along the path, locked),
// room made under --capacity by evicting whole unlocked leaves in the
// tree's order (fit_key, as replay's release), the rest inserted as one new
// leaf whose payload is the request's trace index (its origin), the path
// unlocked. Unlike replay, the whole prompt is matched: the last token's
// recomputation is the time model's.

typedef struct rx_sim {
    hx_radix *t;
    int32_t   group;   /* trace blocks per page */
    int32_t   W;       /* words per page */
    int64_t   cap;     /* words, 0: unbounded */
} rx_sim;

static void rx_sim_split(void *ud, hx_rnode *upper, hx_rnode *lower) { upper->data = lower->data; }

static void rx_sim_destroy(void *state) {
    rx_sim *st = state;
    if (!st) return;
    hx_radix_free(st->t);
    free(st);
}

static int rx_sim_create(const hx_sim_config *cfg, void **state, char *err, size_t errlen) {
    rx_sim *st = calloc(1, sizeof *st);
    if (!st) return ENG_ERR_NOMEM;
    *state = st;
    const rx_opts *o = cfg->opts;
    int64_t P = cfg->block_size ? cfg->block_size : o->page_size > 1 ? o->page_size : cfg->block_tokens;
    if (P % cfg->block_tokens) {
        eng_errf(err, errlen, "radix: a page of %lld tokens is not a whole number of the trace's %d-token blocks",
                 (long long)P, cfg->block_tokens);
        return ENG_ERR_ARG;
    }
    st->group = (int32_t)(P / cfg->block_tokens);
    st->W = st->group * HX_SIM_WORDS;
    int64_t pages = cfg->capacity_tokens / P;
    if (cfg->capacity_tokens > 0 && pages < 1) {
        eng_errf(err, errlen, "radix: --capacity %lld tokens holds no page of %lld tokens",
                 (long long)cfg->capacity_tokens, (long long)P);
        return ENG_ERR_ARG;
    }
    st->cap = pages * st->W;
    st->t = hx_radix_new_evict(st->W, cfg->evict, st->cap, rx_sim_split, NULL, NULL);
    return st->t ? ENG_OK : ENG_ERR_NOMEM;
}

static int32_t rx_sim_peek(void *state, const hx_sim_req *r) {
    rx_sim *st = state;
    return hx_radix_peek(st->t, r->words, r->n_blocks / st->group * st->W) / st->W * st->group;
}

static int rx_sim_access(void *state, const hx_sim_req *r, hx_sim_access *out) {
    rx_sim *st = state;
    memset(out, 0, sizeof *out);
    out->origin = -1;
    int32_t n = r->n_blocks / st->group * st->W;
    hx_rnode *last = NULL;
    int32_t m = hx_radix_match(st->t, r->words, n, &last);
    if (m < 0) return ENG_ERR_NOMEM;
    if (m > 0 && last->data) out->origin = (int64_t)(intptr_t)last->data - 1;
    hx_radix_lock(st->t, last);
    int64_t ev0 = hx_radix_evicted(st->t), before;
    int32_t key = st->cap > 0 ? fit_key(st->t, r->words, n, st->cap) : n;
    before = hx_radix_tokens(st->t);
    if (key > m) {
        hx_rnode *leaf = NULL;
        int32_t present = hx_radix_insert(st->t, r->words, key, &leaf);
        if (present < 0) { hx_radix_unlock(st->t, last); return ENG_ERR_NOMEM; }
        if (present < key) leaf->data = (void *)(intptr_t)(r->index + 1);
    }
    hx_radix_unlock(st->t, last);
    out->hit_blocks = m / st->W * st->group;
    out->stored_blocks = (int32_t)((hx_radix_tokens(st->t) - before) / st->W * st->group);
    out->evicted_blocks = (hx_radix_evicted(st->t) - ev0) / st->W * st->group;
    out->held_blocks = hx_radix_tokens(st->t) / st->W * st->group;
    return ENG_OK;
}

static int rx_sim_check(void *state, char *err, size_t errlen) {
    rx_sim *st = state;
    int rc = hx_radix_check(st->t, err, errlen);
    if (rc == ENG_OK && st->cap > 0 && hx_radix_tokens(st->t) > st->cap) {
        eng_errf(err, errlen, "radix: the tree holds %lld words, capacity %lld", (long long)hx_radix_tokens(st->t),
                 (long long)st->cap);
        rc = ENG_ERR_FORMAT;
    }
    return rc;
}

static const hx_sim_ops rx_sim_ops = {
    .check = rx_sim_check,
    .create = rx_sim_create,
    .peek = rx_sim_peek,
    .access = rx_sim_access,
    .destroy = rx_sim_destroy,
};

const hx_policy_ops hx_policy_radix = {
    .name = "radix",
    .options = rx_options,
    .defaults = &rx_defaults,
    .opts_size = sizeof(rx_opts),
    .quirks = rx_quirks,
    .record_state = rx_record_state,
    .create = rx_create,
    .acquire = rx_acquire,
    .on_chunk = rx_on_chunk,
    .release = rx_release,
    .destroy = rx_destroy,
    .hint = rx_hint,
    .sim = &rx_sim_ops,
};
