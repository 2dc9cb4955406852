/*
 * tests/test_anchor.c: placement rules of the `disk-anchor` policy
 * (harness/anchor.h), alone and driving a real harness/diskcache.h cache.
 *
 * The simulation mimics seeds/000_* (ds4-server #393) at a small scale:
 * chunk C = 64, waypoints every W = 256, a stable prefix (system prompt,
 * a git-status block at g = 550 that changes on every commit, tool
 * definitions) ending at S = 700, so the anchor is A = 640 and the waypoint
 * below the git block is 512 (in the report: 20,480 < 26,850 < 27,005).
 * Each fresh session appends its own user message. Payloads are fake: the
 * XXH3-64 of the token prefix they cover, so a hit also proves it restored
 * the state of this prompt's prefix.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <xxhash.h>

#include "anchor.h"
#include "diskcache.h"
#include "status.h"

static hx_anchor_params params(int32_t C, int32_t A, int32_t W, bool quirk) {
    return (hx_anchor_params){.chunk = C, .anchor = A, .waypoint_every = W,
                              .quirk_anchor_cold_only = quirk};
}

/* Plans into a fixed array and checks the call succeeded. */
static int32_t plan(const hx_anchor_params *p, int32_t n, int32_t cached, hx_anchor_ckpt *out) {
    int32_t n_out = -1;
    char err[256] = "";
    int rc = hx_anchor_plan(p, n, cached, out, 256, &n_out, err, sizeof err);
    if (rc != ENG_OK) fail_msg("plan(n=%d, cached=%d): %s", (int)n, (int)cached, err);
    return n_out;
}

// ----------------------------------------------------------------------------
// The pure rules

static void anchor_position_floors_the_stable_end_to_the_grid(void **state) {
    (void)state;
    assert_int_equal(hx_anchor_position(700, 64), 640);
    assert_int_equal(hx_anchor_position(640, 64), 640);
    assert_int_equal(hx_anchor_position(27005, 64), 26944);
    assert_int_equal(hx_anchor_position(63, 64), 0);
    assert_int_equal(hx_anchor_position(0, 64), 0);
    assert_int_equal(hx_anchor_position(100, 0), ENG_ERR_ARG);
    assert_int_equal(hx_anchor_position(-1, 64), ENG_ERR_ARG);
}

static void waypoint_spacing_not_a_multiple_of_the_chunk_is_rejected(void **state) {
    (void)state;
    char err[256] = "";
    hx_anchor_params p = params(64, 640, 200, false);
    assert_int_equal(hx_anchor_params_check(&p, err, sizeof err), ENG_ERR_ARG);
    assert_non_null(strstr(err, "waypoint_every"));
    int32_t n_out = 7;
    hx_anchor_ckpt out[8];
    assert_int_equal(hx_anchor_plan(&p, 900, 0, out, 8, &n_out, NULL, 0), ENG_ERR_ARG);
    assert_int_equal(n_out, 0);
    p = params(64, 640, 20480, false);  // full scale is on the grid
    assert_int_equal(hx_anchor_params_check(&p, NULL, 0), ENG_OK);
    p = params(64, 640, -64, false);
    assert_int_equal(hx_anchor_params_check(&p, NULL, 0), ENG_ERR_ARG);
}

static void anchor_off_the_grid_or_a_bad_chunk_is_rejected(void **state) {
    (void)state;
    char err[256] = "";
    hx_anchor_params p = params(64, 700, 256, false);
    assert_int_equal(hx_anchor_params_check(&p, err, sizeof err), ENG_ERR_ARG);
    assert_non_null(strstr(err, "anchor: anchor"));
    p = params(0, 0, 0, false);
    assert_int_equal(hx_anchor_params_check(&p, NULL, 0), ENG_ERR_ARG);
    assert_int_equal(hx_anchor_params_check(NULL, NULL, 0), ENG_ERR_ARG);
    p = hx_anchor_params_default();
    assert_int_equal(hx_anchor_params_check(&p, NULL, 0), ENG_OK);
    assert_int_equal(p.waypoint_every, HX_ANCHOR_DEFAULT_WAYPOINT_EVERY);
}

static void cached_outside_the_prompt_is_rejected(void **state) {
    (void)state;
    hx_anchor_params p = params(64, 640, 256, false);
    hx_anchor_ckpt out[8];
    int32_t n_out;
    assert_int_equal(hx_anchor_plan(&p, 900, 901, out, 8, &n_out, NULL, 0), ENG_ERR_ARG);
    assert_int_equal(hx_anchor_plan(&p, 900, -1, out, 8, &n_out, NULL, 0), ENG_ERR_ARG);
    assert_int_equal(hx_anchor_plan(&p, -1, 0, out, 8, &n_out, NULL, 0), ENG_ERR_ARG);
}

static void a_cold_prefill_writes_every_waypoint_and_the_anchor(void **state) {
    (void)state;
    for (int quirk = 0; quirk <= 1; quirk++) {
        hx_anchor_params p = params(64, 640, 256, quirk);
        hx_anchor_ckpt o[256];
        assert_int_equal(plan(&p, 900, 0, o), 4);
        assert_int_equal(o[0].pos, 256); assert_int_equal(o[0].kind, HX_ANCHOR_KIND_WAYPOINT);
        assert_int_equal(o[1].pos, 512); assert_int_equal(o[1].kind, HX_ANCHOR_KIND_WAYPOINT);
        assert_int_equal(o[2].pos, 640); assert_int_equal(o[2].kind, HX_ANCHOR_KIND_ANCHOR);
        assert_int_equal(o[3].pos, 768); assert_int_equal(o[3].kind, HX_ANCHOR_KIND_WAYPOINT);
    }
}

static void an_anchor_on_a_waypoint_is_one_write(void **state) {
    (void)state;
    hx_anchor_params p = params(64, 512, 256, false);
    hx_anchor_ckpt o[256];
    assert_int_equal(plan(&p, 900, 0, o), 3);
    assert_int_equal(o[1].pos, 512);
    assert_int_equal(o[1].kind, HX_ANCHOR_KIND_WAYPOINT | HX_ANCHOR_KIND_ANCHOR);
    assert_int_equal(o[2].pos, 768);
}

static void a_hit_exactly_at_the_anchor_writes_nothing(void **state) {
    (void)state;
    for (int quirk = 0; quirk <= 1; quirk++) {
        hx_anchor_params p = params(64, 640, 256, quirk);
        hx_anchor_ckpt o[256];
        assert_int_equal(plan(&p, 760, 640, o), 0);  // next waypoint 768 is past the prompt
        assert_int_equal(plan(&p, 900, 640, o), 1);  // only the waypoint the prefill crosses
        assert_int_equal(o[0].pos, 768);
        assert_int_equal(o[0].kind, HX_ANCHOR_KIND_WAYPOINT);
        assert_int_equal(plan(&p, 900, 700, o), 1);  // past the anchor: same
        assert_int_equal(o[0].pos, 768);
    }
}

static void an_anchor_at_zero_is_never_written(void **state) {
    (void)state;
    hx_anchor_params p = params(64, 0, 256, false);
    hx_anchor_ckpt o[256];
    int32_t n = plan(&p, 900, 0, o);
    assert_int_equal(n, 3);
    for (int32_t i = 0; i < n; i++) assert_int_equal(o[i].kind, HX_ANCHOR_KIND_WAYPOINT);
    p.waypoint_every = 0;
    assert_int_equal(plan(&p, 900, 0, o), 0);
}

static void an_anchor_beyond_the_prompt_is_never_written(void **state) {
    (void)state;
    for (int quirk = 0; quirk <= 1; quirk++) {
        hx_anchor_params p = params(64, 1024, 256, quirk);
        hx_anchor_ckpt o[256];
        int32_t n = plan(&p, 900, 0, o);
        assert_int_equal(n, 3);
        for (int32_t i = 0; i < n; i++) assert_int_equal(o[i].kind, HX_ANCHOR_KIND_WAYPOINT);
        assert_int_equal(plan(&p, 1024, 0, o), 4);  // A == n: written, and a waypoint too
        assert_int_equal(o[3].pos, 1024);
        assert_int_equal(o[3].kind, HX_ANCHOR_KIND_ANCHOR | HX_ANCHOR_KIND_WAYPOINT);
    }
}

static void a_partial_hit_below_the_anchor_writes_it_unless_the_quirk_is_on(void **state) {
    (void)state;
    hx_anchor_ckpt o[256];
    hx_anchor_params fix = params(64, 640, 256, false);
    assert_int_equal(plan(&fix, 900, 512, o), 2);
    assert_int_equal(o[0].pos, 640);
    assert_int_equal(o[0].kind, HX_ANCHOR_KIND_ANCHOR);
    assert_int_equal(o[1].pos, 768);
    hx_anchor_params bug = params(64, 640, 256, true);
    assert_int_equal(plan(&bug, 900, 512, o), 1);
    assert_int_equal(o[0].pos, 768);
    assert_int_equal(o[0].kind, HX_ANCHOR_KIND_WAYPOINT);
}

static void a_too_small_array_reports_the_plan_size(void **state) {
    (void)state;
    hx_anchor_params p = params(64, 640, 64, false);
    hx_anchor_ckpt o[4];
    int32_t n_out = 0;
    assert_int_equal(hx_anchor_plan(&p, 1000, 0, o, 4, &n_out, NULL, 0), ENG_ERR_RANGE);
    assert_int_equal(n_out, 15);
    assert_int_equal(o[3].pos, 256);
    assert_true(n_out <= hx_anchor_plan_max(&p, 1000));
    assert_int_equal(hx_anchor_plan(&p, 1000, 0, NULL, 0, &n_out, NULL, 0), ENG_ERR_RANGE);
    assert_int_equal(n_out, 15);
}

/* A shadow model: walk every position p in (cached, n] and apply the rule
 * literally; the plan must equal it on random parameters. */
static void the_plan_matches_a_position_by_position_oracle(void **state) {
    (void)state;
    uint64_t s = 7;
    for (int it = 0; it < 3000; it++) {
        s = s * 6364136223846793005ULL + 1442695040888963407ULL;
        uint32_t r = (uint32_t)(s >> 33);
        int32_t C = (int32_t[]){1, 16, 64, 128}[r % 4];
        int32_t W = C * (int32_t)((r >> 2) % 9);              // 0 = no waypoints
        int32_t A = C * (int32_t)((r >> 6) % 40);             // 0 = no anchor
        int32_t n = (int32_t)((r >> 12) % 3000);
        int32_t cached = n ? (int32_t)((s >> 13) % (uint64_t)(n + 1)) : 0;
        if ((r >> 28) & 1) cached = cached / C * C;
        bool quirk = (r >> 29) & 1;
        hx_anchor_params p = params(C, A, W, quirk);
        int32_t cap = hx_anchor_plan_max(&p, n) + 1;
        hx_anchor_ckpt *o = malloc((size_t)cap * sizeof *o);
        int32_t m;
        assert_int_equal(hx_anchor_plan(&p, n, cached, o, cap, &m, NULL, 0), ENG_OK);
        assert_true(m <= cap);
        int32_t k = 0;
        for (int32_t pos = cached + 1; pos <= n; pos++) {
            int32_t kind = 0;
            if (W > 0 && pos % W == 0) kind |= HX_ANCHOR_KIND_WAYPOINT;
            if (pos == A && A > 0 && (quirk ? cached == 0 : cached < A)) kind |= HX_ANCHOR_KIND_ANCHOR;
            if (!kind) continue;
            assert_true(k < m);
            assert_int_equal(o[k].pos, pos);
            assert_int_equal(o[k].kind, kind);
            assert_int_equal(o[k].pos % C, 0);
            k++;
        }
        assert_int_equal(k, m);
        free(o);
    }
}

// ----------------------------------------------------------------------------
// Replaying fresh sessions through a real disk cache

enum { C = 64, W = 256, S = 700, G = 550, G_LEN = 16, COMMITS = 6, SESSIONS = 3 };
#define FP 0xfeedface12345678ULL

static int rm_one(const char *p, const struct stat *sb, int flag, struct FTW *f) {
    (void)sb; (void)flag; (void)f;
    return remove(p);
}

static uint64_t mix(uint64_t x) {
    x ^= x >> 33; x *= 0xff51afd7ed558ccdULL; x ^= x >> 33; x *= 0xc4ceb9fe1a85ec53ULL;
    return x ^ (x >> 33);
}

/* A fresh session's prompt: stable prefix with the git block of `commit`,
 * then a user message of its own. Returns n. */
static int32_t make_prompt(int32_t *t, int commit, int session) {
    for (int32_t i = 0; i < S; i++) t[i] = (int32_t)(mix((uint64_t)i + 1) % 32000);
    for (int32_t i = G; i < G + G_LEN; i++)
        t[i] = (int32_t)(mix(((uint64_t)commit << 32) + (uint64_t)i + 7) % 32000);
    int32_t u = 150 + (session % 5) * 10;
    uint64_t id = (uint64_t)commit * 100 + (uint64_t)session + 1;
    for (int32_t i = 0; i < u; i++)
        t[S + i] = (int32_t)(mix((id << 40) + (uint64_t)i) % 32000);
    return S + u;
}

typedef struct sim {
    int32_t cached[COMMITS][SESSIONS];
    int32_t n[COMMITS][SESSIONS];
    int     anchor_writes, anchor_duplicates;
} sim;

/* Replays COMMITS x SESSIONS fresh sessions: lookup (keeping one token to
 * prefill), restore, then write the plan's checkpoints. */
static void run_sim(bool quirk, sim *out) {
    char dir[] = "/tmp/kvr_anchor_XXXXXX";
    assert_non_null(mkdtemp(dir));
    hx_diskcache *dc = NULL;
    char err[256] = "";
    assert_int_equal(hx_diskcache_open(dir, 1 << 20, &dc, err, sizeof err), ENG_OK);
    hx_anchor_params p = params(C, hx_anchor_position(S, C), W, quirk);
    memset(out, 0, sizeof *out);
    int32_t t[S + 256];
    for (int commit = 0; commit < COMMITS; commit++) {
        for (int session = 0; session < SESSIONS; session++) {
            int32_t n = make_prompt(t, commit, session);
            hx_diskcache_hit hit;
            assert_int_equal(hx_diskcache_lookup(dc, FP, t, n, n - 1, &hit, err, sizeof err), ENG_OK);
            if (hit.n_tokens > 0) {  // the "restored state" is this prompt's prefix
                uint64_t want = XXH3_64bits(t, (size_t)hit.n_tokens * sizeof t[0]);
                assert_int_equal(hit.payload_size, sizeof want);
                assert_memory_equal(hit.payload, &want, sizeof want);
            }
            out->cached[commit][session] = hit.n_tokens;
            out->n[commit][session] = n;
            hx_anchor_ckpt o[256];
            int32_t m = plan(&p, n, hit.n_tokens, o);
            for (int32_t i = 0; i < m; i++) {
                uint64_t payload = XXH3_64bits(t, (size_t)o[i].pos * sizeof t[0]);
                int rc = hx_diskcache_store(dc, FP, t, o[i].pos, &payload, sizeof payload, NULL,
                                            err, sizeof err);
                assert_true(rc == HX_DISKCACHE_STORED || rc == HX_DISKCACHE_PRESENT);
                if (o[i].kind & HX_ANCHOR_KIND_ANCHOR) {
                    out->anchor_writes++;
                    if (rc == HX_DISKCACHE_PRESENT) out->anchor_duplicates++;
                }
            }
            hx_diskcache_hit_free(&hit);
        }
    }
    hx_diskcache_close(dc);
    nftw(dir, rm_one, 16, FTW_DEPTH | FTW_PHYS);
}

static void with_the_quirk_fresh_sessions_stay_on_the_waypoint_below_the_change(void **state) {
    (void)state;
    sim s;
    run_sim(true, &s);
    const int32_t A = hx_anchor_position(S, C), wp = G / W * W;
    assert_int_equal(A, 640);
    assert_int_equal(wp, 512);
    assert_int_equal(s.cached[0][0], 0);  // the very first session is cold
    for (int j = 1; j < SESSIONS; j++) assert_int_equal(s.cached[0][j], A);
    for (int c = 1; c < COMMITS; c++)
        for (int j = 0; j < SESSIONS; j++) {  // forever after the first change
            assert_int_equal(s.cached[c][j], wp);
            assert_int_equal(s.n[c][j] - s.cached[c][j], s.n[c][j] - wp);
        }
    assert_int_equal(s.anchor_writes, 1);  // only the cold one
}

static void without_the_quirk_one_session_after_a_change_restores_the_anchor(void **state) {
    (void)state;
    sim s;
    run_sim(false, &s);
    const int32_t A = hx_anchor_position(S, C), wp = G / W * W;
    assert_int_equal(s.cached[0][0], 0);
    for (int j = 1; j < SESSIONS; j++) assert_int_equal(s.cached[0][j], A);
    for (int c = 1; c < COMMITS; c++) {
        assert_int_equal(s.cached[c][0], wp);  // the first session after a commit pays once
        for (int j = 1; j < SESSIONS; j++) {
            assert_int_equal(s.cached[c][j], A);
            assert_int_equal(s.n[c][j] - s.cached[c][j], s.n[c][j] - A);
        }
    }
    assert_int_equal(s.anchor_writes, COMMITS);  // one per stable prefix
    assert_int_equal(s.anchor_duplicates, 0);    // a hit below A proves no anchor file exists
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(anchor_position_floors_the_stable_end_to_the_grid),
        cmocka_unit_test(waypoint_spacing_not_a_multiple_of_the_chunk_is_rejected),
        cmocka_unit_test(anchor_off_the_grid_or_a_bad_chunk_is_rejected),
        cmocka_unit_test(cached_outside_the_prompt_is_rejected),
        cmocka_unit_test(a_cold_prefill_writes_every_waypoint_and_the_anchor),
        cmocka_unit_test(an_anchor_on_a_waypoint_is_one_write),
        cmocka_unit_test(a_hit_exactly_at_the_anchor_writes_nothing),
        cmocka_unit_test(an_anchor_at_zero_is_never_written),
        cmocka_unit_test(an_anchor_beyond_the_prompt_is_never_written),
        cmocka_unit_test(a_partial_hit_below_the_anchor_writes_it_unless_the_quirk_is_on),
        cmocka_unit_test(a_too_small_array_reports_the_plan_size),
        cmocka_unit_test(the_plan_matches_a_position_by_position_oracle),
        cmocka_unit_test(with_the_quirk_fresh_sessions_stay_on_the_waypoint_below_the_change),
        cmocka_unit_test(without_the_quirk_one_session_after_a_change_restores_the_anchor),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
