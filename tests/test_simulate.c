/*
 * tests/test_simulate.c: `kvreplay simulate`'s caches against a brute-force
 * reference, hit for hit.
 *
 * The reference (tests/helpers/simref.c) is written from the rules of
 * docs/traces.md, with plain arrays, linear scans and whole prefixes compared
 * element by element: no hash, no map, no heap and no line of harness/cache/
 * (it shares nothing with the policies but the trace reader that feeds both). For every policy
 * (block-hash, radix, slot-lcp, disk-anchor), every eviction order (lru,
 * lfu, fifo, s3fifo) and capacities from a few blocks to unbounded, on
 * synthetic traces of both formats and on the head of the real Mooncake
 * trace, each request's hit, the blocks it evicted and what the cache holds
 * after it must be the reference's, and the structures' own invariant checks
 * must pass after every access. Then the faults the checks exist for are
 * planted (cache/evict.h's hx_cache_faults) and must be caught: a hit counted
 * after a missing block, a radix eviction that leaves a child reachable
 * without its parent, a capacity exceeded by one block.
 *
 * KVR_SIM_BENCH=1 runs instead the benchmark quoted in docs/traces.md: the
 * whole conversation trace through each policy at one capacity, simulate's
 * structures against this reference, requests per second side by side.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include "evict.h"
#include "policy.h"
#include "radixtree.h"
#include "sim.h"
#include "status.h"
#include "simref.h"
#include "trace.h"

#define MOONCAKE "../shared/data/traces/mooncake_conversation_trace.jsonl"

// ============================================================================
// Traces for the tests

typedef struct rng {
    uint64_t s;
} rng;

static uint64_t rnext(rng *r) {
    uint64_t x = (r->s += 0x9E3779B97F4A7C15ULL);
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ULL;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBULL;
    return x ^ (x >> 31);
}

static int32_t rint_(rng *r, int32_t lo, int32_t hi) { return lo + (int32_t)(rnext(r) % (uint64_t)(hi - lo + 1)); }

/* A Mooncake-style trace (prefix ids, 512-token blocks): conversations that
 * extend their context, a shared system prompt, repeated prompts. */
static void write_mooncake(const char *path, int32_t n_req, uint64_t seed) {
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    rng r = {seed};
    enum { SESS = 12, MAXB = 40 };
    int64_t ctx[SESS][MAXB];
    int32_t nctx[SESS] = {0}, last_n[SESS] = {0}, last_len[SESS] = {0};
    int64_t last[SESS][MAXB + 1];
    int64_t next_id = 3;
    for (int32_t s = 0; s < SESS; s++) {
        if (rint_(&r, 0, 9) < 7) { ctx[s][0] = 0; ctx[s][1] = 1; nctx[s] = 2; }  /* the shared system prompt */
    }
    for (int32_t i = 0; i < n_req; i++) {
        int32_t s = rint_(&r, 0, SESS - 1);
        int64_t ids[MAXB + 1];
        int32_t n, len;
        if (last_n[s] && rint_(&r, 0, 9) == 0) {  /* the same prompt again */
            n = last_n[s];
            memcpy(ids, last[s], sizeof ids[0] * (size_t)n);
            len = last_len[s];
        } else {
            if (nctx[s] > MAXB - 4 || rint_(&r, 0, 12) == 0) {  /* a new conversation in this session */
                nctx[s] = rint_(&r, 0, 1) ? 2 : 0;
                ctx[s][0] = 0;
                ctx[s][1] = 1;
            }
            int32_t grow = rint_(&r, 0, 3);
            for (int32_t k = 0; k < grow; k++) ctx[s][nctx[s]++] = next_id++;
            n = nctx[s] + 1;
            memcpy(ids, ctx[s], sizeof ids[0] * (size_t)nctx[s]);
            ids[n - 1] = next_id++;  /* the partial last block */
            len = (n - 1) * 512 + rint_(&r, 1, 512);
            memcpy(last[s], ids, sizeof ids[0] * (size_t)n);
            last_n[s] = n;
            last_len[s] = len;
            ctx[s][nctx[s]++] = next_id++;  /* the next turn: that block, full now, under its own id */
        }
        fprintf(f, "{\"timestamp\": %d, \"input_length\": %d, \"output_length\": %d, \"hash_ids\": [", i * 37, len,
                rint_(&r, 1, 400));
        for (int32_t k = 0; k < n; k++) fprintf(f, "%s%lld", k ? ", " : "", (long long)ids[k]);
        fprintf(f, "]}\n");
    }
    fclose(f);
}

/* A Bailian-style trace (16-token blocks, each id a hash of its block alone:
 * few distinct ids, repeated in other positions and other contexts). */
static void write_bailian(const char *path, int32_t n_req, uint64_t seed) {
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    rng r = {seed};
    int64_t prev[64];
    int32_t n_prev = 0;
    for (int32_t i = 0; i < n_req; i++) {
        int64_t ids[64];
        int32_t n = rint_(&r, 1, 24), parent = -1;
        bool follow = n_prev && rint_(&r, 0, 2) > 0;
        int32_t keep = follow ? rint_(&r, 0, n_prev) : 0;
        if (keep > n) keep = n;
        for (int32_t k = 0; k < n; k++) ids[k] = k < keep ? prev[k] : rint_(&r, 0, 11);
        if (follow && i > 0) parent = rint_(&r, 0, i - 1);
        int32_t len = (n - 1) * 16 + rint_(&r, 1, 16);
        fprintf(f, "{\"chat_id\": %d, \"parent_chat_id\": %d, \"timestamp\": %.3f, \"input_length\": %d, "
                "\"output_length\": %d, \"type\": \"%s\", \"turn\": %d, \"hash_ids\": [", i, parent, i * 0.25, len,
                rint_(&r, 0, 300), rint_(&r, 0, 3) ? "text" : "search", parent < 0 ? 1 : 2);
        for (int32_t k = 0; k < n; k++) fprintf(f, "%s%lld", k ? ", " : "", (long long)ids[k]);
        fprintf(f, "]}\n");
        memcpy(prev, ids, sizeof ids[0] * (size_t)n);
        n_prev = n;
    }
    fclose(f);
}

/* The head of the real conversation trace, or NULL when it is absent. */
static const char *mooncake_head(int32_t n) {
    static char path[64];
    FILE *in = fopen(MOONCAKE, "r");
    if (!in) return NULL;
    snprintf(path, sizeof path, "/tmp/kvr-sim-head-%d.jsonl", (int)getpid());
    FILE *out = fopen(path, "w");
    assert_non_null(out);
    char line[1 << 16];
    for (int32_t i = 0; i < n && fgets(line, sizeof line, in); i++) fputs(line, out);
    fclose(in);
    fclose(out);
    return path;
}

// ============================================================================
// The comparison

static hx_sim_policy *make_sim(const setup *s, int32_t block_tokens) {
    hx_policy_args args = {0};
    char slots[16], wp[16], an[16];
    snprintf(slots, sizeof slots, "%d", s->slots ? s->slots : 1);
    snprintf(wp, sizeof wp, "%d", s->waypoint);
    snprintf(an, sizeof an, "%d", s->anchor);
    if (!strcmp(s->policy, "slot-lcp")) assert_int_equal(hx_policy_args_set(&args, "--slots", slots), ENG_OK);
    if (!strcmp(s->policy, "disk-anchor")) {
        assert_int_equal(hx_policy_args_set(&args, "--waypoint-every", wp), ENG_OK);
        if (s->anchor) assert_int_equal(hx_policy_args_set(&args, "--anchor", an), ENG_OK);
    }
    hx_sim_config cfg = {.block_tokens = block_tokens, .block_size = (int64_t)block_tokens * s->g,
                         .capacity_tokens = s->cap_blocks * block_tokens * s->g, .evict = s->evict};
    hx_sim_policy *p = NULL;
    char err[512] = "";
    int rc = hx_sim_policy_create(s->policy, &cfg, &args, &p, err, sizeof err);
    if (rc != ENG_OK) fail_msg("%s: %s", s->policy, err);
    return p;
}

/* Runs the trace through simulate's policy and the reference. Returns the
 * index of the first request where they differ (or where an invariant check
 * fails), -1 when they agree all along; *why says what differed. */
static int64_t compare(const char *trace, const setup *s, int64_t *n_hits, char *why, size_t whylen) {
    hx_trace_opts to = {0};
    hx_trace *t = NULL;
    char err[512] = "";
    assert_int_equal(hx_trace_open(trace, &to, &t, err, sizeof err), ENG_OK);
    hx_trace_rec r;
    hx_sim_policy *p = NULL;
    ref *f = NULL;
    bool started = false;
    int64_t bad = -1, hits = 0;
    int rc;
    int64_t *sym = NULL;
    while ((rc = hx_trace_next(t, &r, err, sizeof err)) == 1 && bad < 0) {
        int32_t B = hx_trace_block_tokens(t);
        if (!started) {
            p = make_sim(s, B);
            f = ref_new(s, B);
            started = true;
        }
        int32_t m = r.n_blocks / s->g;
        sym = realloc(sym, sizeof *sym * (size_t)(r.n_blocks + 1));
        memcpy(sym, r.ids, sizeof *sym * (size_t)r.n_blocks);
        rreq q = {.sym = sym, .n = m, .g = s->g, .input_length = r.input_length, .block_tokens = B, .index = r.index};
        hx_sim_req sq = {.words = r.words, .n_blocks = r.n_blocks, .n_tokens = r.input_length, .index = r.index};
        int32_t peek_sim = p->sim->peek(p->state, &sq), peek_ref = ref_peek(f, &q) * s->g;
        hx_sim_access a;
        assert_int_equal(p->sim->access(p->state, &sq, &a), ENG_OK);
        rres e = ref_access(f, &q);
        hits += e.hit;
        char cerr[512] = "";
        if (peek_sim != peek_ref) {
            snprintf(why, whylen, "peek %d, reference %d", peek_sim, peek_ref);
            bad = r.index;
        } else if (a.hit_blocks != e.hit * s->g) {
            snprintf(why, whylen, "hit %d blocks (peek %d), reference %d", a.hit_blocks, peek_sim, e.hit * s->g);
            bad = r.index;
        } else if (a.evicted_blocks != e.evicted * s->g || a.held_blocks != e.held * s->g) {
            snprintf(why, whylen, "evicted %lld held %lld, reference %lld and %lld", (long long)a.evicted_blocks,
                     (long long)a.held_blocks, (long long)e.evicted * s->g, (long long)e.held * s->g);
            bad = r.index;
        } else if (p->sim->check(p->state, cerr, sizeof cerr) != ENG_OK) {
            snprintf(why, whylen, "invariant: %s", cerr);
            bad = r.index;
        }
    }
    if (rc < 0) fail_msg("%s", err);
    if (started) {
        hx_sim_policy_destroy(p);
        ref_free(f);
    }
    free(sym);
    hx_trace_close(t);
    if (n_hits) *n_hits = hits;
    return bad;
}

static const char *const k_policies[] = {"block-hash", "radix", "slot-lcp", "disk-anchor", "cold"};

static void agree_on(const char *trace, const int64_t *caps, int n_caps, int32_t waypoint, int32_t g) {
    int n_runs = 0;
    for (int pi = 0; pi < 5; pi++)
        for (int e = 0; e < HX_EVICT_N; e++)
            for (int c = 0; c < n_caps; c++) {
                setup s = {.policy = k_policies[pi], .evict = (hx_evict_kind)e, .cap_blocks = caps[c], .g = g,
                           .slots = 2, .waypoint = waypoint, .anchor = waypoint / 2};
                char why[512] = "";
                int64_t hits = 0, bad = compare(trace, &s, &hits, why, sizeof why);
                if (bad >= 0)
                    fail_msg("%s, %s, capacity %lld blocks (group %d), %s: request %lld: %s", s.policy,
                             hx_evict_name(s.evict), (long long)s.cap_blocks, g, trace, (long long)bad, why);
                n_runs++;
            }
    assert_int_equal(n_runs, 5 * HX_EVICT_N * n_caps);
}

static char g_moon[64], g_bail[64];

static int setup_traces(void **state) {
    (void)state;
    snprintf(g_moon, sizeof g_moon, "/tmp/kvr-sim-moon-%d.jsonl", (int)getpid());
    snprintf(g_bail, sizeof g_bail, "/tmp/kvr-sim-bail-%d.jsonl", (int)getpid());
    write_mooncake(g_moon, 400, 7);
    write_bailian(g_bail, 400, 11);
    return 0;
}

static int teardown_traces(void **state) {
    (void)state;
    remove(g_moon);
    remove(g_bail);
    return 0;
}

// ============================================================================
// Tests

static void every_policy_and_order_agrees_with_the_reference_on_a_mooncake_style_trace(void **state) {
    (void)state;
    const int64_t caps[] = {3, 8, 21, 60, 0};
    agree_on(g_moon, caps, 5, 1024, 1);
}

static void every_policy_and_order_agrees_with_the_reference_on_a_bailian_style_trace(void **state) {
    (void)state;
    const int64_t caps[] = {4, 15, 50, 0};
    agree_on(g_bail, caps, 4, 64, 1);
}

static void policy_blocks_of_two_trace_blocks_agree_with_the_reference(void **state) {
    (void)state;
    const int64_t caps[] = {5, 30, 0};
    agree_on(g_moon, caps, 3, 2048, 2);
}

static void every_policy_and_order_agrees_with_the_reference_on_the_real_trace_head(void **state) {
    (void)state;
    const char *head = mooncake_head(250);
    if (!head) { skip(); return; }
    const int64_t caps[] = {40, 400, 0};
    agree_on(head, caps, 3, 2048, 1);
    remove(head);
}

/* The comparison with the reference (and the invariant checks) must fail
 * under each planted fault, for the policies the fault applies to. */
static int64_t with_fault(unsigned fault, const setup *s, char *why, size_t whylen) {
    hx_cache_faults = fault;
    int64_t bad = compare(g_moon, s, NULL, why, whylen);
    hx_cache_faults = 0;
    return bad;
}

static void a_hit_counted_after_a_missing_block_is_caught(void **state) {
    (void)state;
    char why[512] = "";
    /* fifo evicts a sequence's first block first: later blocks stay cached behind a gap */
    setup s = {.policy = "block-hash", .evict = HX_EVICT_FIFO, .cap_blocks = 8, .g = 1};
    assert_int_equal(compare(g_moon, &s, NULL, why, sizeof why), -1);  /* agrees without the fault */
    int64_t bad = with_fault(HX_FAULT_HIT_AFTER_GAP, &s, why, sizeof why);
    assert_true(bad >= 0);
    assert_non_null(strstr(why, "hit"));
}

static void a_radix_eviction_that_leaves_a_child_reachable_is_caught(void **state) {
    (void)state;
    char why[512] = "";
    setup s = {.policy = "radix", .evict = HX_EVICT_LRU, .cap_blocks = 8, .g = 1};
    assert_int_equal(compare(g_moon, &s, NULL, why, sizeof why), -1);
    int64_t bad = with_fault(HX_FAULT_ORPHAN_EVICT, &s, why, sizeof why);
    assert_true(bad >= 0);
    /* the tree's own check names it, or the reference saw the wrong hit first */
    assert_true(strstr(why, "gap") || strstr(why, "candidate") || strstr(why, "hit") || strstr(why, "evicted"));
}

static void a_capacity_exceeded_by_one_block_is_caught(void **state) {
    (void)state;
    const char *pols[] = {"block-hash", "radix"};
    for (int i = 0; i < 2; i++) {
        char why[512] = "";
        setup s = {.policy = pols[i], .evict = HX_EVICT_LRU, .cap_blocks = 8, .g = 1};
        assert_int_equal(compare(g_moon, &s, NULL, why, sizeof why), -1);
        int64_t bad = with_fault(HX_FAULT_OVER_CAPACITY, &s, why, sizeof why);
        if (bad < 0) fail_msg("%s: a capacity exceeded by one block went unnoticed", pols[i]);
    }
}

/* The orphan check itself, on a tree built by hand: the tree's check names the gap. */
static void the_radix_check_names_a_child_left_without_its_parent(void **state) {
    (void)state;
    hx_radix *t = hx_radix_new_evict(2, HX_EVICT_LRU, 0, NULL, NULL, NULL);
    int32_t a[8] = {1, 0, 2, 0, 3, 0, 4, 0}, b[8] = {1, 0, 2, 0, 9, 0, 9, 0};
    hx_rnode *leaf;
    assert_true(hx_radix_insert(t, a, 8, &leaf) >= 0);
    assert_true(hx_radix_insert(t, b, 8, &leaf) >= 0);  /* [1,2] then {[3,4], [9,9]} */
    char err[256] = "";
    assert_int_equal(hx_radix_check(t, err, sizeof err), ENG_OK);
    hx_cache_faults = HX_FAULT_ORPHAN_EVICT;
    hx_rnode *shared = hx_radix_root(t)->kids[0];  /* [1,2], the parent of both leaves */
    hx_radix_lock(t, shared);  /* its candidacy is recomputed: under the fault, any unlocked node */
    hx_radix_unlock(t, shared);
    hx_radix_evict(t, 8);      /* a's leaf [3,4] (the oldest), then [1,2] with [9,9] still under it */
    hx_cache_faults = 0;
    int rc = hx_radix_check(t, err, sizeof err);
    hx_radix_free(t);
    assert_int_equal(rc, ENG_ERR_FORMAT);
    if (!strstr(err, "gap")) fail_msg("%s", err);
}

/* hx_sim_run on the whole conversation trace, unbounded: the ideal hit rate
 * trace info prints, exactly (block-hash and radix). */
static void the_unbounded_cache_gives_the_ideal_hit_rate_of_trace_info(void **state) {
    (void)state;
    FILE *f = fopen(MOONCAKE, "r");
    if (!f) { skip(); return; }
    fclose(f);
    hx_trace_opts to = {0};
    hx_trace_info in;
    char err[512] = "";
    assert_int_equal(hx_trace_info_read(MOONCAKE, &to, &in, err, sizeof err), ENG_OK);
    assert_int_equal(in.requests, 12031);
    const char *pols[] = {"block-hash", "radix"};
    for (int i = 0; i < 2; i++) {
        hx_sim_opts o;
        hx_sim_opts_default(&o);
        o.trace_path = MOONCAKE;
        o.policy = pols[i];
        hx_sim_summary sum;
        assert_int_equal(hx_sim_run(&o, &sum, err, sizeof err), ENG_OK);
        assert_int_equal(sum.hit_tokens, in.ideal_hit_tokens);
        assert_int_equal(sum.hit_blocks, in.ideal_hit_blocks);
        assert_int_equal(sum.evictions, 0);
    }
    assert_true(fabs(in.ideal_hit_rate_tokens - 0.3736) < 0.0001);
}

/* A hit rate never rises when the capacity falls (block-hash, lru, on the real trace's head). */
static void a_smaller_cache_never_hits_more_under_lru(void **state) {
    (void)state;
    const char *head = mooncake_head(2000);
    if (!head) { skip(); return; }
    int64_t prev = INT64_MAX;
    const int64_t caps[] = {0, 20000, 4000, 800, 160, 32};
    for (int i = 0; i < 6; i++) {
        hx_sim_opts o;
        hx_sim_opts_default(&o);
        o.trace_path = head;
        o.policy = "radix";
        o.capacity_tokens = caps[i] * 512;
        hx_sim_summary sum;
        char err[256];
        assert_int_equal(hx_sim_run(&o, &sum, err, sizeof err), ENG_OK);
        assert_true(sum.hit_tokens <= prev);
        prev = sum.hit_tokens;
    }
    remove(head);
}

// ============================================================================
// The benchmark (KVR_SIM_BENCH=1): simulate's structures against the reference

static double cpu_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

static void bench(void) {
    const int64_t cap_blocks = 1000000 / 512;
    double load[3] = {0};
    if (getloadavg(load, 3) < 0) load[0] = NAN;
    printf("# the conversation trace (12,031 requests) through each policy at %lld blocks (1e6 tokens), lru, one "
           "thread; CPU seconds (load average %.2f)\n", (long long)cap_blocks, load[0]);
    printf("%-12s %12s %12s %14s %14s %8s\n", "policy", "sim_s", "ref_s", "sim_req_s", "ref_req_s", "speedup");
    for (int pi = 0; pi < 4; pi++) {
        setup s = {.policy = k_policies[pi], .evict = HX_EVICT_LRU, .cap_blocks = cap_blocks, .g = 1, .slots = 1,
                   .waypoint = 2048};
        hx_trace_opts to = {0};
        hx_trace *t;
        char err[256];
        if (hx_trace_open(MOONCAKE, &to, &t, err, sizeof err) != ENG_OK) { printf("%s\n", err); return; }
        /* read the trace once: both sides are timed on the accesses alone */
        typedef struct rec { int64_t *ids; int32_t *words; int32_t n, len; } rec;
        rec *rs = NULL;
        int64_t n = 0;
        hx_trace_rec r;
        while (hx_trace_next(t, &r, err, sizeof err) == 1) {
            rs = realloc(rs, sizeof *rs * (size_t)(n + 1));
            rs[n].ids = malloc(sizeof(int64_t) * (size_t)r.n_blocks);
            rs[n].words = malloc(sizeof(int32_t) * 2 * (size_t)r.n_blocks);
            memcpy(rs[n].ids, r.ids, sizeof(int64_t) * (size_t)r.n_blocks);
            memcpy(rs[n].words, r.words, sizeof(int32_t) * 2 * (size_t)r.n_blocks);
            rs[n].n = r.n_blocks;
            rs[n].len = r.input_length;
            n++;
        }
        hx_trace_close(t);
        hx_sim_policy *p = make_sim(&s, 512);
        double t0 = cpu_s();
        int64_t hs = 0, hr = 0;
        for (int64_t i = 0; i < n; i++) {
            hx_sim_req q = {.words = rs[i].words, .n_blocks = rs[i].n, .n_tokens = rs[i].len, .index = i};
            hx_sim_access a;
            p->sim->access(p->state, &q, &a);
            hs += a.hit_blocks;
        }
        double ts = cpu_s() - t0;
        ref *f = ref_new(&s, 512);
        t0 = cpu_s();
        for (int64_t i = 0; i < n; i++) {
            rreq q = {.sym = rs[i].ids, .n = rs[i].n, .g = 1, .input_length = rs[i].len, .block_tokens = 512, .index = i};
            hr += ref_access(f, &q).hit;
        }
        double tr = cpu_s() - t0;
        printf("%-12s %12.4f %12.4f %14.0f %14.0f %8.1f%s\n", s.policy, ts, tr, n / ts, n / tr, tr / ts,
               hs == hr ? "" : "  (hits differ!)");
        ref_free(f);
        hx_sim_policy_destroy(p);
        for (int64_t i = 0; i < n; i++) { free(rs[i].ids); free(rs[i].words); }
        free(rs);
    }
}

int main(void) {
    if (getenv("KVR_SIM_BENCH")) {
        bench();
        return 0;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(every_policy_and_order_agrees_with_the_reference_on_a_mooncake_style_trace),
        cmocka_unit_test(every_policy_and_order_agrees_with_the_reference_on_a_bailian_style_trace),
        cmocka_unit_test(policy_blocks_of_two_trace_blocks_agree_with_the_reference),
        cmocka_unit_test(every_policy_and_order_agrees_with_the_reference_on_the_real_trace_head),
        cmocka_unit_test(a_hit_counted_after_a_missing_block_is_caught),
        cmocka_unit_test(a_radix_eviction_that_leaves_a_child_reachable_is_caught),
        cmocka_unit_test(a_capacity_exceeded_by_one_block_is_caught),
        cmocka_unit_test(the_radix_check_names_a_child_left_without_its_parent),
        cmocka_unit_test(the_unbounded_cache_gives_the_ideal_hit_rate_of_trace_info),
        cmocka_unit_test(a_smaller_cache_never_hits_more_under_lru),
    };
    return cmocka_run_group_tests(tests, setup_traces, teardown_traces);
}
