/*
 * tests/test_diskcache.c: checkpoint files on disk (harness/diskcache.h).
 *
 * Every test works in its own mkdtemp directory under /tmp with synthetic
 * token streams and payloads from an explicit seed. The fault-injection
 * tests plant a fault in every header field, random payload bit flips and
 * truncations at every offset, and require that no corrupt payload is ever
 * returned, that each bad file is quarantined, and that lookup falls back to
 * the next shorter valid entry.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <dirent.h>
#include <fcntl.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <xxhash.h>

#include "diskcache.h"
#include "status.h"

#define FP 0x1234abcd5678ef01ULL

// ----------------------------------------------------------------------------
// Helpers: temp dirs, seeded streams, file surgery

static uint64_t rng_next(uint64_t *s) {  /* splitmix64 */
    uint64_t z = (*s += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

static void fill_tokens(int32_t *t, int32_t n, uint64_t seed) {
    for (int32_t i = 0; i < n; i++) t[i] = (int32_t)(rng_next(&seed) % 32000);
}

static void fill_bytes(uint8_t *p, size_t n, uint64_t seed) {
    for (size_t i = 0; i < n; i++) p[i] = (uint8_t)rng_next(&seed);
}

static void make_dir(char *dir) {
    strcpy(dir, "/tmp/kvr_dc_XXXXXX");
    assert_non_null(mkdtemp(dir));
}

static int rm_one(const char *p, const struct stat *sb, int flag, struct FTW *f) {
    (void)sb; (void)flag; (void)f;
    return remove(p);
}
static void rm_rf(const char *dir) { nftw(dir, rm_one, 16, FTW_DEPTH | FTW_PHYS); }

static hx_diskcache *open_dc(const char *dir, int64_t budget) {
    hx_diskcache *dc = NULL;
    char err[256] = "";
    int rc = hx_diskcache_open(dir, budget, &dc, err, sizeof err);
    if (rc != ENG_OK) fail_msg("open %s: %s", dir, err);
    return dc;
}

static void store_ok(hx_diskcache *dc, uint64_t fp, const int32_t *t, int32_t n, const void *p,
                     size_t sz) {
    char err[256] = "";
    size_t w = 0;
    int rc = hx_diskcache_store(dc, fp, t, n, p, sz, &w, err, sizeof err);
    if (rc != HX_DISKCACHE_STORED) fail_msg("store n=%d: rc %d: %s", (int)n, rc, err);
    assert_int_equal(w, sz + HX_DISKCACHE_HEADER_SIZE);
}

static hx_diskcache_hit lookup(hx_diskcache *dc, uint64_t fp, const int32_t *t, int32_t n,
                               int32_t max) {
    hx_diskcache_hit hit;
    char err[256] = "";
    int rc = hx_diskcache_lookup(dc, fp, t, n, max, &hit, err, sizeof err);
    if (rc != ENG_OK) fail_msg("lookup: rc %d: %s", rc, err);
    return hit;
}

static void path_of(char *out, const char *dir, uint64_t fp, const int32_t *t, int32_t n) {
    char name[40];
    hx_diskcache_key(fp, t, n, NULL, NULL, name);
    sprintf(out, "%s/%s", dir, name);
}

static size_t read_whole(const char *path, uint8_t **out) {
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    *out = malloc((size_t)n + 1);
    assert_int_equal(fread(*out, 1, (size_t)n, f), (size_t)n);
    fclose(f);
    return (size_t)n;
}

static void write_whole(const char *path, const uint8_t *p, size_t n) {
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(p, 1, n, f), n);
    fclose(f);
}

/* Flips bit `bit` of byte `off`; with reseal, recomputes the header checksum
 * so that the field's own check (not the checksum) must catch the fault. */
static void flip_bit(const char *path, size_t off, int bit, int reseal) {
    uint8_t *b;
    size_t n = read_whole(path, &b);
    assert_true(off < n);
    b[off] ^= (uint8_t)(1u << bit);
    if (reseal) {
        uint64_t s = XXH3_64bits(b, HX_DISKCACHE_OFF_HEADER_SUM);
        for (int i = 0; i < 8; i++) b[HX_DISKCACHE_OFF_HEADER_SUM + i] = (uint8_t)(s >> (8 * i));
    }
    write_whole(path, b, n);
    free(b);
}

static int count_files(const char *dir) {
    DIR *d = opendir(dir);
    if (!d) return 0;
    int n = 0;
    struct dirent *de;
    while ((de = readdir(d)) != NULL)
        if (de->d_name[0] != '.') n++;
    closedir(d);
    return n;
}

// ----------------------------------------------------------------------------
// Store and lookup

static void store_then_lookup_returns_the_same_payload(void **state) {
    (void)state;
    char dir[64];
    make_dir(dir);
    hx_diskcache *dc = open_dc(dir, 1 << 20);
    int32_t t[300];
    fill_tokens(t, 300, 1);
    uint8_t p[5000];
    fill_bytes(p, sizeof p, 2);
    store_ok(dc, FP, t, 256, p, sizeof p);
    hx_diskcache_hit hit = lookup(dc, FP, t, 300, 300);
    assert_int_equal(hit.n_tokens, 256);
    assert_int_equal(hit.payload_size, sizeof p);
    assert_memory_equal(hit.payload, p, sizeof p);
    hx_diskcache_hit_free(&hit);
    hx_diskcache_stats s = hx_diskcache_get_stats(dc);
    assert_int_equal(s.hits, 1);
    assert_int_equal(s.misses, 0);
    assert_int_equal(s.bytes_written, sizeof p + HX_DISKCACHE_HEADER_SIZE);
    assert_int_equal(s.bytes_read, sizeof p + HX_DISKCACHE_HEADER_SIZE);
    hx_diskcache_close(dc);
    rm_rf(dir);
}

static void lookup_returns_the_longest_stored_prefix_within_max_tokens(void **state) {
    (void)state;
    char dir[64];
    make_dir(dir);
    hx_diskcache *dc = open_dc(dir, 1 << 22);
    int32_t t[2100], other[2100];
    fill_tokens(t, 2100, 3);
    fill_tokens(other, 2100, 4);
    for (int32_t n = 64; n <= 2048; n += 64) {
        uint8_t p[64];
        fill_bytes(p, sizeof p, (uint64_t)n);
        store_ok(dc, FP, t, n, p, sizeof p);
        store_ok(dc, FP, other, n + 32, p, sizeof p);  // foreign prompt, other lengths
    }
    for (int32_t max = 0; max <= 2100; max += 37) {
        hx_diskcache_hit hit = lookup(dc, FP, t, 2100, max);
        int32_t want = (max > 2048 ? 2048 : max) / 64 * 64;
        assert_int_equal(hit.n_tokens, want);
        if (want > 0) {
            uint8_t p[64];
            fill_bytes(p, sizeof p, (uint64_t)want);
            assert_memory_equal(hit.payload, p, sizeof p);
        } else {
            assert_null(hit.payload);
        }
        hx_diskcache_hit_free(&hit);
    }
    hx_diskcache_close(dc);
    rm_rf(dir);
}

static void a_different_fingerprint_misses(void **state) {
    (void)state;
    char dir[64];
    make_dir(dir);
    hx_diskcache *dc = open_dc(dir, 1 << 20);
    int32_t t[200];
    fill_tokens(t, 200, 5);
    store_ok(dc, FP, t, 128, "abc", 3);
    hx_diskcache_hit hit = lookup(dc, FP ^ 1, t, 200, 200);
    assert_int_equal(hit.n_tokens, 0);
    assert_null(hit.payload);
    assert_false(hx_diskcache_contains(dc, FP ^ 1, t, 128));
    assert_true(hx_diskcache_contains(dc, FP, t, 128));
    assert_int_equal(hx_diskcache_get_stats(dc).misses, 1);
    hx_diskcache_close(dc);
    rm_rf(dir);
}

static void a_prompt_differing_inside_a_prefix_hits_a_shorter_entry(void **state) {
    (void)state;
    char dir[64];
    make_dir(dir);
    hx_diskcache *dc = open_dc(dir, 1 << 20);
    int32_t t[400];
    fill_tokens(t, 400, 6);
    store_ok(dc, FP, t, 128, "short", 5);
    store_ok(dc, FP, t, 320, "long", 4);
    t[200] ^= 1;  // differs inside the long prefix only
    hx_diskcache_hit hit = lookup(dc, FP, t, 400, 400);
    assert_int_equal(hit.n_tokens, 128);
    assert_memory_equal(hit.payload, "short", 5);
    hx_diskcache_hit_free(&hit);
    t[0] ^= 1;  // now differs inside both
    hit = lookup(dc, FP, t, 400, 400);
    assert_int_equal(hit.n_tokens, 0);
    hx_diskcache_close(dc);
    rm_rf(dir);
}

static void storing_an_indexed_prefix_again_writes_nothing(void **state) {
    (void)state;
    char dir[64];
    make_dir(dir);
    hx_diskcache *dc = open_dc(dir, 1 << 20);
    int32_t t[64];
    fill_tokens(t, 64, 7);
    store_ok(dc, FP, t, 64, "x", 1);
    size_t w = 99;
    assert_int_equal(hx_diskcache_store(dc, FP, t, 64, "x", 1, &w, NULL, 0), HX_DISKCACHE_PRESENT);
    assert_int_equal(w, 0);
    hx_diskcache_stats s = hx_diskcache_get_stats(dc);
    assert_int_equal(s.stores, 1);
    assert_int_equal(s.stores_present, 1);
    hx_diskcache_close(dc);
    rm_rf(dir);
}

static void a_checkpoint_larger_than_the_budget_is_not_stored(void **state) {
    (void)state;
    char dir[64];
    make_dir(dir);
    hx_diskcache *dc = open_dc(dir, 1000);
    int32_t t[64];
    fill_tokens(t, 64, 8);
    uint8_t p[1000] = {0};
    store_ok(dc, FP, t, 32, p, 100);
    size_t w = 99;
    assert_int_equal(hx_diskcache_store(dc, FP, t, 64, p, sizeof p, &w, NULL, 0),
                     HX_DISKCACHE_OVER_BUDGET);
    assert_int_equal(w, 0);
    assert_false(hx_diskcache_contains(dc, FP, t, 64));
    assert_true(hx_diskcache_contains(dc, FP, t, 32));  // nothing evicted for it
    assert_int_equal(hx_diskcache_get_stats(dc).stores_too_large, 1);
    hx_diskcache_close(dc);
    rm_rf(dir);
}

static void invalid_arguments_are_rejected(void **state) {
    (void)state;
    hx_diskcache *dc = (hx_diskcache *)1;
    assert_int_equal(hx_diskcache_open("/tmp/x", 0, &dc, NULL, 0), ENG_ERR_ARG);
    assert_null(dc);
    char dir[64];
    make_dir(dir);
    dc = open_dc(dir, 1 << 20);
    int32_t t[4] = {1, 2, 3, 4};
    char err[256] = "";
    assert_int_equal(hx_diskcache_store(dc, FP, t, 0, "x", 1, NULL, err, sizeof err), ENG_ERR_ARG);
    assert_true(strlen(err) > 0);
    assert_int_equal(hx_diskcache_store(dc, FP, NULL, 4, "x", 1, NULL, NULL, 0), ENG_ERR_ARG);
    hx_diskcache_hit hit;
    assert_int_equal(hx_diskcache_lookup(dc, FP, NULL, 4, 4, &hit, NULL, 0), ENG_ERR_ARG);
    assert_int_equal(hx_diskcache_lookup(dc, FP, t, 0, 0, &hit, NULL, 0), ENG_OK);
    assert_int_equal(hit.n_tokens, 0);
    hx_diskcache_close(dc);
    hx_diskcache_close(NULL);
    hx_diskcache_hit_free(NULL);
    rm_rf(dir);
}

static void open_creates_missing_parent_directories_and_leaves_other_files_alone(void **state) {
    (void)state;
    char dir[64], sub[128], other[160];
    make_dir(dir);
    snprintf(sub, sizeof sub, "%s/a/b/c", dir);
    hx_diskcache *dc = open_dc(sub, 1 << 20);
    snprintf(other, sizeof other, "%s/README", sub);
    write_whole(other, (const uint8_t *)"hi", 2);
    hx_diskcache_close(dc);
    dc = open_dc(sub, 1 << 20);
    assert_int_equal(access(other, F_OK), 0);
    assert_int_equal(hx_diskcache_get_stats(dc).entries, 0);
    assert_int_equal(hx_diskcache_get_stats(dc).quarantined, 0);
    hx_diskcache_close(dc);
    rm_rf(dir);
}

// ----------------------------------------------------------------------------
// Corruption: every header field, random payload flips, truncations

#define LONG_N 256
#define SHORT_N 128
#define PAY 200

typedef struct fixture {
    char    dir[64];
    int32_t t[300];
    uint8_t long_p[PAY], short_p[PAY];
    char    long_path[160];
} fixture;

static void fixture_init(fixture *f, uint64_t seed) {
    make_dir(f->dir);
    fill_tokens(f->t, 300, seed);
    fill_bytes(f->long_p, PAY, seed + 1);
    fill_bytes(f->short_p, PAY, seed + 2);
    path_of(f->long_path, f->dir, FP, f->t, LONG_N);
}

/* After the long file was corrupted: a lookup must quarantine it and return
 * the short entry (with_short) or miss; never the long payload. */
static void expect_fallback(hx_diskcache *dc, fixture *f, int with_short, int64_t quarantined,
                            const char *what) {
    hx_diskcache_stats before = hx_diskcache_get_stats(dc);
    hx_diskcache_hit hit = lookup(dc, FP, f->t, 300, 300);
    hx_diskcache_stats s = hx_diskcache_get_stats(dc);
    if (with_short) {
        if (hit.n_tokens != SHORT_N) fail_msg("%s: got n_tokens %d", what, hit.n_tokens);
        assert_int_equal(hit.payload_size, PAY);
        assert_memory_equal(hit.payload, f->short_p, PAY);
        assert_int_equal(s.hits, before.hits + 1);
    } else {
        if (hit.n_tokens != 0) fail_msg("%s: got n_tokens %d", what, hit.n_tokens);
        assert_null(hit.payload);
        assert_int_equal(s.misses, before.misses + 1);
    }
    hx_diskcache_hit_free(&hit);
    if (s.quarantined != quarantined)
        fail_msg("%s: quarantined %lld, want %lld", what, (long long)s.quarantined,
                 (long long)quarantined);
    assert_int_not_equal(access(f->long_path, F_OK), 0);  // moved aside
    assert_false(hx_diskcache_contains(dc, FP, f->t, LONG_N));
}

static void a_bit_flip_in_every_header_field_is_quarantined_and_falls_back(void **state) {
    (void)state;
    static const struct { const char *name; size_t off, len; } fields[] = {
        {"magic", HX_DISKCACHE_OFF_MAGIC, 8},
        {"version", HX_DISKCACHE_OFF_VERSION, 4},
        {"header size", HX_DISKCACHE_OFF_HEADER_SIZE, 4},
        {"n_tokens", HX_DISKCACHE_OFF_N_TOKENS, 4},
        {"reserved", HX_DISKCACHE_OFF_RESERVED, 4},
        {"fingerprint", HX_DISKCACHE_OFF_FINGERPRINT, 8},
        {"prefix hash", HX_DISKCACHE_OFF_PREFIX_HASH, 16},
        {"payload size", HX_DISKCACHE_OFF_PAYLOAD_SIZE, 8},
        {"payload checksum", HX_DISKCACHE_OFF_PAYLOAD_SUM, 8},
        {"header checksum", HX_DISKCACHE_OFF_HEADER_SUM, 8},
    };
    int scenarios = 0;
    for (size_t fi = 0; fi < sizeof fields / sizeof fields[0]; fi++) {
        for (int reseal = 0; reseal <= 1; reseal++) {
            if (reseal && fields[fi].off == HX_DISKCACHE_OFF_HEADER_SUM) continue;
            for (int reopen = 0; reopen <= 1; reopen++) {
                for (int which = 0; which < 2; which++) {  // first byte bit 0, last byte bit 7
                    fixture f;
                    fixture_init(&f, 100 + fi);
                    hx_diskcache *dc = open_dc(f.dir, 1 << 20);
                    store_ok(dc, FP, f.t, SHORT_N, f.short_p, PAY);
                    store_ok(dc, FP, f.t, LONG_N, f.long_p, PAY);
                    size_t off = fields[fi].off + (which ? fields[fi].len - 1 : 0);
                    flip_bit(f.long_path, off, which ? 7 : 0, reseal);
                    if (reopen) {
                        hx_diskcache_close(dc);
                        dc = open_dc(f.dir, 1 << 20);
                    }
                    char what[128];
                    snprintf(what, sizeof what, "%s byte %zu%s%s", fields[fi].name, off,
                             reseal ? " resealed" : "", reopen ? " after reopen" : "");
                    expect_fallback(dc, &f, 1, 1, what);
                    char q[128];
                    snprintf(q, sizeof q, "%s/%s", f.dir, HX_DISKCACHE_QUARANTINE);
                    assert_int_equal(count_files(q), 1);
                    hx_diskcache_close(dc);
                    rm_rf(f.dir);
                    scenarios++;
                }
            }
        }
    }
    assert_int_equal(scenarios, 10 * 2 * 2 + 9 * 2 * 2);
}

static void random_payload_bit_flips_are_never_returned(void **state) {
    (void)state;
    fixture f;
    fixture_init(&f, 200);
    hx_diskcache *dc = open_dc(f.dir, 1 << 20);
    store_ok(dc, FP, f.t, SHORT_N, f.short_p, PAY);
    uint64_t rng = 42;
    for (int i = 0; i < 200; i++) {
        store_ok(dc, FP, f.t, LONG_N, f.long_p, PAY);
        size_t off = HX_DISKCACHE_HEADER_SIZE + (size_t)(rng_next(&rng) % PAY);
        flip_bit(f.long_path, off, (int)(rng_next(&rng) % 8), 0);
        char what[64];
        snprintf(what, sizeof what, "flip %d at byte %zu", i, off);
        expect_fallback(dc, &f, 1, i + 1, what);
    }
    hx_diskcache_stats s = hx_diskcache_get_stats(dc);
    assert_int_equal(s.fallbacks, 200);
    char q[128];
    snprintf(q, sizeof q, "%s/%s", f.dir, HX_DISKCACHE_QUARANTINE);
    assert_int_equal(count_files(q), 200);
    hx_diskcache_close(dc);
    rm_rf(f.dir);
}

static void truncation_at_every_offset_is_never_returned(void **state) {
    (void)state;
    fixture f;
    fixture_init(&f, 300);
    hx_diskcache *dc = open_dc(f.dir, 1 << 20);
    const size_t size = HX_DISKCACHE_HEADER_SIZE + PAY;
    int64_t q = 0;
    for (size_t cut = 0; cut < size; cut++) {
        store_ok(dc, FP, f.t, LONG_N, f.long_p, PAY);
        assert_int_equal(truncate(f.long_path, (off_t)cut), 0);
        char what[64];
        snprintf(what, sizeof what, "truncated to %zu", cut);
        expect_fallback(dc, &f, 0, ++q, what);  // no shorter entry: a miss
    }
    assert_int_equal(hx_diskcache_get_stats(dc).misses, (int64_t)size);
    hx_diskcache_close(dc);
    rm_rf(f.dir);
}

static void truncated_files_found_at_open_are_quarantined(void **state) {
    (void)state;
    fixture f;
    fixture_init(&f, 400);
    for (size_t cut = 0; cut < HX_DISKCACHE_HEADER_SIZE + PAY; cut += 13) {
        hx_diskcache *dc = open_dc(f.dir, 1 << 20);
        store_ok(dc, FP, f.t, LONG_N, f.long_p, PAY);
        hx_diskcache_close(dc);
        assert_int_equal(truncate(f.long_path, (off_t)cut), 0);
        dc = open_dc(f.dir, 1 << 20);
        char what[64];
        snprintf(what, sizeof what, "truncated to %zu before open", cut);
        expect_fallback(dc, &f, 0, 1, what);
        hx_diskcache_close(dc);
    }
    rm_rf(f.dir);
}

static void a_file_deleted_behind_the_cache_is_a_miss_not_an_error(void **state) {
    (void)state;
    fixture f;
    fixture_init(&f, 500);
    hx_diskcache *dc = open_dc(f.dir, 1 << 20);
    store_ok(dc, FP, f.t, LONG_N, f.long_p, PAY);
    assert_int_equal(unlink(f.long_path), 0);
    hx_diskcache_hit hit = lookup(dc, FP, f.t, 300, 300);
    assert_int_equal(hit.n_tokens, 0);
    assert_int_equal(hx_diskcache_get_stats(dc).quarantined, 0);
    assert_int_equal(hx_diskcache_get_stats(dc).entries, 0);
    hx_diskcache_close(dc);
    rm_rf(f.dir);
}

// ----------------------------------------------------------------------------
// Crash between the temp write and the rename

static void a_crash_before_rename_leaves_nothing_to_look_up_and_reopen_cleans_it(void **state) {
    (void)state;
    fixture f;
    fixture_init(&f, 600);
    hx_diskcache *dc = open_dc(f.dir, 1 << 20);
    store_ok(dc, FP, f.t, SHORT_N, f.short_p, PAY);
    char tmp1[256], tmp2[256], err[256] = "";
    // a complete temp file (crash after fsync, before rename) ...
    assert_int_equal(hx_diskcache_write_tmp_only(dc, FP, f.t, LONG_N, f.long_p, PAY, SIZE_MAX,
                                                 tmp1, sizeof tmp1, err, sizeof err), ENG_OK);
    // ... and a partial one (crash in the middle of the write)
    assert_int_equal(hx_diskcache_write_tmp_only(dc, FP, f.t, 192, f.long_p, PAY, 100,
                                                 tmp2, sizeof tmp2, err, sizeof err), ENG_OK);
    assert_int_equal(access(tmp1, F_OK), 0);
    assert_int_equal(access(tmp2, F_OK), 0);
    hx_diskcache_hit hit = lookup(dc, FP, f.t, 300, 300);
    assert_int_equal(hit.n_tokens, SHORT_N);
    assert_memory_equal(hit.payload, f.short_p, PAY);
    hx_diskcache_hit_free(&hit);
    hx_diskcache_close(dc);

    dc = open_dc(f.dir, 1 << 20);  // the "restart"
    assert_int_equal(hx_diskcache_get_stats(dc).temps_removed, 2);
    assert_int_not_equal(access(tmp1, F_OK), 0);
    assert_int_not_equal(access(tmp2, F_OK), 0);
    assert_int_equal(hx_diskcache_get_stats(dc).entries, 1);
    hit = lookup(dc, FP, f.t, 300, 300);
    assert_int_equal(hit.n_tokens, SHORT_N);
    hx_diskcache_hit_free(&hit);
    assert_int_equal(hx_diskcache_get_stats(dc).quarantined, 0);
    assert_int_equal(count_files(f.dir), 1);
    hx_diskcache_close(dc);
    rm_rf(f.dir);
}

// ----------------------------------------------------------------------------
// Budget and LRU

#define EP 1000  /* payload bytes per entry in the LRU tests */

static void lru_evicts_the_least_recently_used_entry(void **state) {
    (void)state;
    char dir[64];
    make_dir(dir);
    const int64_t budget = 3 * (EP + HX_DISKCACHE_HEADER_SIZE) + 100;  // room for 3
    hx_diskcache *dc = open_dc(dir, budget);
    int32_t a[64], b[64], c[64], d[64];
    fill_tokens(a, 64, 11); fill_tokens(b, 64, 12); fill_tokens(c, 64, 13); fill_tokens(d, 64, 14);
    uint8_t p[EP] = {0};
    store_ok(dc, FP, a, 64, p, EP);
    store_ok(dc, FP, b, 64, p, EP);
    store_ok(dc, FP, c, 64, p, EP);
    hx_diskcache_hit hit = lookup(dc, FP, a, 64, 64);  // a becomes most recent
    assert_int_equal(hit.n_tokens, 64);
    hx_diskcache_hit_free(&hit);
    store_ok(dc, FP, d, 64, p, EP);
    assert_true(hx_diskcache_contains(dc, FP, a, 64));
    assert_false(hx_diskcache_contains(dc, FP, b, 64));
    assert_true(hx_diskcache_contains(dc, FP, c, 64));
    assert_true(hx_diskcache_contains(dc, FP, d, 64));
    hx_diskcache_stats s = hx_diskcache_get_stats(dc);
    assert_int_equal(s.evictions, 1);
    assert_true(s.bytes_on_disk <= budget);
    assert_int_equal(s.entries, 3);
    char path[160];
    path_of(path, dir, FP, b, 64);
    assert_int_not_equal(access(path, F_OK), 0);
    hx_diskcache_close(dc);
    rm_rf(dir);
}

static void lru_order_survives_a_reopen(void **state) {
    (void)state;
    char dir[64];
    make_dir(dir);
    const int64_t budget = 3 * (EP + HX_DISKCACHE_HEADER_SIZE) + 100;
    hx_diskcache *dc = open_dc(dir, budget);
    int32_t a[64], b[64], c[64], d[64];
    fill_tokens(a, 64, 21); fill_tokens(b, 64, 22); fill_tokens(c, 64, 23); fill_tokens(d, 64, 24);
    uint8_t p[EP] = {0};
    store_ok(dc, FP, a, 64, p, EP);
    store_ok(dc, FP, b, 64, p, EP);
    store_ok(dc, FP, c, 64, p, EP);
    hx_diskcache_hit hit = lookup(dc, FP, a, 64, 64);  // order now b, c, a
    hx_diskcache_hit_free(&hit);
    hx_diskcache_close(dc);
    dc = open_dc(dir, budget);
    hx_diskcache_entry *e;
    size_t n;
    assert_int_equal(hx_diskcache_list(dc, &e, &n), ENG_OK);
    assert_int_equal(n, 3);
    char nb[40], nc[40], na[40];
    hx_diskcache_key(FP, b, 64, NULL, NULL, nb);
    hx_diskcache_key(FP, c, 64, NULL, NULL, nc);
    hx_diskcache_key(FP, a, 64, NULL, NULL, na);
    assert_string_equal(e[0].name, nb);
    assert_string_equal(e[1].name, nc);
    assert_string_equal(e[2].name, na);
    free(e);
    store_ok(dc, FP, d, 64, p, EP);  // evicts b
    assert_false(hx_diskcache_contains(dc, FP, b, 64));
    assert_true(hx_diskcache_contains(dc, FP, a, 64));
    hx_diskcache_close(dc);
    rm_rf(dir);
}

static void reopening_with_a_smaller_budget_evicts_down_to_it(void **state) {
    (void)state;
    char dir[64];
    make_dir(dir);
    hx_diskcache *dc = open_dc(dir, 1 << 20);
    int32_t t[640];
    fill_tokens(t, 640, 31);
    uint8_t p[EP] = {0};
    for (int32_t n = 64; n <= 640; n += 64) store_ok(dc, FP, t, n, p, EP);
    hx_diskcache_close(dc);
    const int64_t budget = 4 * (EP + HX_DISKCACHE_HEADER_SIZE);
    dc = open_dc(dir, budget);
    hx_diskcache_stats s = hx_diskcache_get_stats(dc);
    assert_int_equal(s.entries, 4);
    assert_int_equal(s.evictions, 6);
    assert_true(s.bytes_on_disk <= budget);
    // the four most recent (longest) survive
    for (int32_t n = 64; n <= 640; n += 64)
        assert_int_equal(hx_diskcache_contains(dc, FP, t, n), n > 384);
    hx_diskcache_close(dc);
    rm_rf(dir);
}

// ----------------------------------------------------------------------------
// Reopen

static void reopening_finds_the_existing_entries(void **state) {
    (void)state;
    char dir[64];
    make_dir(dir);
    hx_diskcache *dc = open_dc(dir, 1 << 20);
    int32_t t[300];
    fill_tokens(t, 300, 41);
    uint8_t p1[300], p2[700];
    fill_bytes(p1, sizeof p1, 1);
    fill_bytes(p2, sizeof p2, 2);
    store_ok(dc, FP, t, 64, p1, sizeof p1);
    store_ok(dc, FP, t, 192, p2, sizeof p2);
    store_ok(dc, FP ^ 7, t, 256, p2, sizeof p2);
    hx_diskcache_close(dc);
    dc = open_dc(dir, 1 << 20);
    hx_diskcache_stats s = hx_diskcache_get_stats(dc);
    assert_int_equal(s.entries, 3);
    assert_int_equal(s.bytes_on_disk, sizeof p1 + 2 * sizeof p2 + 3 * HX_DISKCACHE_HEADER_SIZE);
    assert_int_equal(s.quarantined, 0);
    hx_diskcache_entry *e;
    size_t n;
    assert_int_equal(hx_diskcache_list(dc, &e, &n), ENG_OK);
    assert_int_equal(n, 3);
    assert_int_equal(e[0].n_tokens, 64);
    assert_int_equal(e[1].n_tokens, 192);
    assert_int_equal(e[2].n_tokens, 256);
    assert_true(e[2].fingerprint == (FP ^ 7));
    free(e);
    hx_diskcache_hit hit = lookup(dc, FP, t, 300, 300);
    assert_int_equal(hit.n_tokens, 192);
    assert_memory_equal(hit.payload, p2, sizeof p2);
    hx_diskcache_hit_free(&hit);
    hx_diskcache_close(dc);
    rm_rf(dir);
}

// ----------------------------------------------------------------------------
// A sound file whose payload the caller cannot use (issue #14: a poisoned
// checkpoint whose outer checksums hold but whose state blob does not)

static const char *reject_long(void *ctx, const void *payload, size_t n, int32_t n_tokens) {
    (void)payload; (void)n;
    ++*(int *)ctx;
    return n_tokens == LONG_N ? "state blob: checksum" : NULL;
}

static void a_payload_the_check_rejects_is_quarantined_and_the_lookup_falls_back(void **state) {
    (void)state;
    fixture f;
    fixture_init(&f, 700);
    hx_diskcache *dc = open_dc(f.dir, 1 << 20);
    store_ok(dc, FP, f.t, SHORT_N, f.short_p, PAY);
    store_ok(dc, FP, f.t, LONG_N, f.long_p, PAY);
    int calls = 0;
    hx_diskcache_hit hit;
    char err[256] = "";
    assert_int_equal(hx_diskcache_lookup_checked(dc, FP, f.t, 300, 300, reject_long, &calls, &hit, err, sizeof err),
                     ENG_OK);
    assert_int_equal(calls, 2);
    assert_int_equal(hit.n_tokens, SHORT_N);
    assert_memory_equal(hit.payload, f.short_p, PAY);
    hx_diskcache_hit_free(&hit);
    hx_diskcache_stats s = hx_diskcache_get_stats(dc);
    assert_int_equal(s.quarantined, 1);
    assert_int_equal(s.fallbacks, 1);
    assert_non_null(hx_diskcache_last_quarantine(dc));
    assert_non_null(strstr(hx_diskcache_last_quarantine(dc), "state blob: checksum"));
    assert_int_not_equal(access(f.long_path, F_OK), 0);  /* moved to quarantine/ */
    /* its key is free again: the next store of that prefix writes it */
    assert_false(hx_diskcache_contains(dc, FP, f.t, LONG_N));
    store_ok(dc, FP, f.t, LONG_N, f.long_p, PAY);
    hit = lookup(dc, FP, f.t, 300, 300);
    assert_int_equal(hit.n_tokens, LONG_N);
    hx_diskcache_hit_free(&hit);
    hx_diskcache_close(dc);
    rm_rf(f.dir);
}

// ----------------------------------------------------------------------------
// Several processes on one directory (issue #14): each process's temp files
// are its own; open deletes only temp files no writer holds

/* A write in flight, as a store holds it: a temp file created and locked
 * (flock LOCK_EX) by its writer until the rename. */
static int hold_tmp(const char *dir, const char *name) {
    char path[256];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    int fd = open(path, O_WRONLY | O_CREAT | O_EXCL, 0644);
    assert_true(fd >= 0);
    assert_int_equal(flock(fd, LOCK_EX), 0);
    assert_int_equal(write(fd, "partial", 7), 7);
    return fd;
}

static void open_leaves_another_writers_temp_file_alone_and_removes_a_stale_one(void **state) {
    (void)state;
    char dir[64], busy[256], stale[256];
    make_dir(dir);
    char name[40];
    int32_t t[64];
    fill_tokens(t, 64, 3);
    hx_diskcache_key(FP, t, 64, NULL, NULL, name);
    int fd = hold_tmp(dir, "0123456789abcdef0123456789abcdef.kv.tmp.999999.0");
    snprintf(busy, sizeof busy, "%s/0123456789abcdef0123456789abcdef.kv.tmp.999999.0", dir);
    snprintf(stale, sizeof stale, "%s/%s.tmp.1.0", dir, name);
    FILE *f = fopen(stale, "w");
    assert_non_null(f);
    fputs("left by a crashed writer", f);
    fclose(f);
    hx_diskcache *dc = open_dc(dir, 1 << 20);  /* another process opening the directory */
    assert_int_equal(access(busy, F_OK), 0);   /* in flight: kept */
    assert_int_not_equal(access(stale, F_OK), 0);
    assert_int_equal(hx_diskcache_get_stats(dc).temps_removed, 1);
    hx_diskcache_close(dc);
    close(fd);                                 /* the writer died: its lock is gone */
    dc = open_dc(dir, 1 << 20);
    assert_int_not_equal(access(busy, F_OK), 0);
    hx_diskcache_close(dc);
    rm_rf(dir);
}

/* Child: stores n distinct checkpoints (tokens seeded by who), reopening its
 * handle before each store as a fresh process would; exits with the number
 * of stores that did not return STORED. */
static int store_many(const char *dir, int who, int n) {
    int lost = 0;
    uint8_t payload[4096];
    for (int i = 0; i < n; i++) {
        hx_diskcache *dc = NULL;
        char err[256];
        if (hx_diskcache_open(dir, 1 << 30, &dc, err, sizeof err) != ENG_OK) return 100;
        int32_t t[64];
        fill_tokens(t, 64, (uint64_t)(who * 100000 + i + 1));
        fill_bytes(payload, sizeof payload, (uint64_t)i);
        if (hx_diskcache_store(dc, FP, t, 64, payload, sizeof payload, NULL, err, sizeof err) != HX_DISKCACHE_STORED)
            lost++;
        hx_diskcache_close(dc);
    }
    return lost > 99 ? 99 : lost;
}

static void two_processes_storing_into_one_directory_lose_nothing(void **state) {
    (void)state;
    char dir[64];
    make_dir(dir);
    enum { N = 120 };
    pid_t pid[2];
    for (int w = 0; w < 2; w++) {
        fflush(NULL);
        pid[w] = fork();
        assert_true(pid[w] >= 0);
        if (pid[w] == 0) _exit(store_many(dir, w, N));
    }
    for (int w = 0; w < 2; w++) {
        int st;
        assert_int_equal(waitpid(pid[w], &st, 0), pid[w]);
        assert_true(WIFEXITED(st));
        if (WEXITSTATUS(st) != 0) fail_msg("writer %d: %d of %d stores lost", w, WEXITSTATUS(st), N);
    }
    hx_diskcache *dc = open_dc(dir, 1 << 30);
    assert_int_equal(hx_diskcache_get_stats(dc).entries, 2 * N);
    assert_int_equal(hx_diskcache_get_stats(dc).temps_removed, 0);
    hx_diskcache_close(dc);
    assert_int_equal(count_files(dir), 2 * N);
    rm_rf(dir);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(store_then_lookup_returns_the_same_payload),
        cmocka_unit_test(lookup_returns_the_longest_stored_prefix_within_max_tokens),
        cmocka_unit_test(a_different_fingerprint_misses),
        cmocka_unit_test(a_prompt_differing_inside_a_prefix_hits_a_shorter_entry),
        cmocka_unit_test(storing_an_indexed_prefix_again_writes_nothing),
        cmocka_unit_test(a_checkpoint_larger_than_the_budget_is_not_stored),
        cmocka_unit_test(invalid_arguments_are_rejected),
        cmocka_unit_test(open_creates_missing_parent_directories_and_leaves_other_files_alone),
        cmocka_unit_test(a_bit_flip_in_every_header_field_is_quarantined_and_falls_back),
        cmocka_unit_test(random_payload_bit_flips_are_never_returned),
        cmocka_unit_test(truncation_at_every_offset_is_never_returned),
        cmocka_unit_test(truncated_files_found_at_open_are_quarantined),
        cmocka_unit_test(a_file_deleted_behind_the_cache_is_a_miss_not_an_error),
        cmocka_unit_test(a_crash_before_rename_leaves_nothing_to_look_up_and_reopen_cleans_it),
        cmocka_unit_test(lru_evicts_the_least_recently_used_entry),
        cmocka_unit_test(lru_order_survives_a_reopen),
        cmocka_unit_test(reopening_with_a_smaller_budget_evicts_down_to_it),
        cmocka_unit_test(reopening_finds_the_existing_entries),
        cmocka_unit_test(a_payload_the_check_rejects_is_quarantined_and_the_lookup_falls_back),
        cmocka_unit_test(open_leaves_another_writers_temp_file_alone_and_removes_a_stale_one),
        cmocka_unit_test(two_processes_storing_into_one_directory_lose_nothing),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
