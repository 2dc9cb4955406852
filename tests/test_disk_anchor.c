/*
 * tests/test_disk_anchor.c: the disk-anchor policy when its cache directory
 * does not behave (issue #14), end to end through `kvreplay replay`:
 *   - a poisoned checkpoint (its file's checksums hold, its state blob does
 *     not) is set aside, the lookup falls back to the next shorter one, and
 *     the prefix is stored again, so it is not a permanent miss;
 *   - quarantines and fallbacks are counted per request (requests.extra)
 *     and said once on stderr;
 *   - a full cache directory (RLIMIT_FSIZE below the checkpoint size) makes
 *     every store fail: each is counted, the first is said, and the run's
 *     summary says how many checkpoints were lost.
 * Fixtures (made here, no shared data): the tiny synthetic model with its
 * built-in byte vocabulary and a seeded "extend" transcript.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <xxhash.h>

#include "diskcache.h"
#include "fixtures.h"
#include "proc.h"
#include "sqlq.h"
#include "status.h"

static char g_dir[64], g_model[160], g_t1[160], g_t2[160];

static int setup(void **state) {
    (void)state;
    if (fx_dir(g_dir, "kvr_da")) return -1;
    snprintf(g_model, sizeof g_model, "%s/tiny.gguf", g_dir);
    snprintf(g_t1, sizeof g_t1, "%s/one.jsonl", g_dir);
    snprintf(g_t2, sizeof g_t2, "%s/two.jsonl", g_dir);
    return fx_tiny_model(g_model, 1) || fx_transcript(g_t1, HX_SYNTH_EXTEND, 1, 1, 1200) ||
           fx_transcript(g_t2, HX_SYNTH_EXTEND, 1, 2, 1200) ? -1 : 0;
}

static int teardown(void **state) {
    (void)state;
    return fx_rm(g_dir);
}

/* kvreplay with args; stderr into err; fsize > 0 caps every file it writes. */
static int kvr(char *err, size_t cap, rlim_t fsize, const char *const *args) {
    proc_opts o = {.fsize = fsize, .uid = -1};
    return proc_run(&o, NULL, 0, err, cap, args);
}

static int count(const char *hay, const char *needle) {
    int n = 0;
    for (const char *p = hay; (p = strstr(p, needle)); p += strlen(needle)) n++;
    return n;
}

/* Rewrites the payload byte at off of a checkpoint file, then reseals the
 * payload and header checksums: the file is sound, its state blob is not. */
static void poison(const char *path, size_t off) {
    FILE *f = fopen(path, "r+b");
    assert_non_null(f);
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    uint8_t *b = malloc((size_t)n);
    assert_non_null(b);
    fseek(f, 0, SEEK_SET);
    assert_int_equal(fread(b, 1, (size_t)n, f), (size_t)n);
    b[HX_DISKCACHE_HEADER_SIZE + off] ^= 0x40;
    uint64_t ps = XXH3_64bits(b + HX_DISKCACHE_HEADER_SIZE, (size_t)n - HX_DISKCACHE_HEADER_SIZE);
    for (int i = 0; i < 8; i++) b[HX_DISKCACHE_OFF_PAYLOAD_SUM + i] = (uint8_t)(ps >> (8 * i));
    uint64_t hs = XXH3_64bits(b, HX_DISKCACHE_OFF_HEADER_SUM);
    for (int i = 0; i < 8; i++) b[HX_DISKCACHE_OFF_HEADER_SUM + i] = (uint8_t)(hs >> (8 * i));
    fseek(f, 0, SEEK_SET);
    assert_int_equal(fwrite(b, 1, (size_t)n, f), (size_t)n);
    fclose(f);
    free(b);
}

static int files_in(const char *dir) {
    DIR *d = opendir(dir);
    if (!d) return 0;
    int n = 0;
    for (struct dirent *e; (e = readdir(d));) n += e->d_name[0] != '.';
    closedir(d);
    return n;
}

static void a_poisoned_checkpoint_is_set_aside_the_lookup_falls_back_and_it_is_written_again(void **state) {
    (void)state;
    char db[200], cache[200], err[8192];
    snprintf(db, sizeof db, "%s/poison.sqlite", g_dir);
    snprintf(cache, sizeof cache, "%s/kv-poison", g_dir);
    const char *args[] = {"replay", "-m", g_model, "-t", g_t1, "--db", db, "--policy", "disk-anchor", "--cache-dir",
                          cache, "--waypoint-every", "512", "--decode", "1", "--quiet", NULL};
    assert_int_equal(kvr(err, sizeof err, 0, args), 0);
    /* the two longest checkpoints below the prompt's length get a poisoned state blob */
    hx_diskcache *dc = NULL;
    char e2[256];
    assert_int_equal(hx_diskcache_open(cache, 1 << 30, &dc, e2, sizeof e2), ENG_OK);
    hx_diskcache_entry *ents = NULL;
    size_t n = 0;
    assert_int_equal(hx_diskcache_list(dc, &ents, &n), ENG_OK);
    hx_diskcache_close(dc);
    int64_t n_prompt = q_int(db, "select n_prompt from requests");
    int32_t lens[16];
    int nl = 0;
    for (size_t i = 0; i < n && nl < 16; i++)
        if (ents[i].n_tokens < n_prompt) lens[nl++] = ents[i].n_tokens;
    assert_true(nl >= 3);
    int32_t top = 0, second = 0, third = 0;
    for (int i = 0; i < nl; i++) if (lens[i] > top) top = lens[i];
    for (int i = 0; i < nl; i++) if (lens[i] > second && lens[i] < top) second = lens[i];
    for (int i = 0; i < nl; i++) if (lens[i] > third && lens[i] < second) third = lens[i];
    for (size_t i = 0; i < n; i++)
        if (ents[i].n_tokens == top || ents[i].n_tokens == second) {
            char path[300];
            snprintf(path, sizeof path, "%s/%s", cache, ents[i].name);
            poison(path, 100);
        }
    free(ents);

    assert_int_equal(kvr(err, sizeof err, 0, args), 0);  /* run 2 */
    char sql[200];
    snprintf(sql, sizeof sql, "select n_reused = %d from requests where run_id = 2", third);
    assert_int_equal(q_int(db, sql), 1);  /* fell back past both */
    assert_int_equal(q_int(db, "select json_extract(extra, '$.n_quarantined') from requests where run_id = 2"), 2);
    assert_int_equal(q_int(db, "select json_extract(extra, '$.n_fallbacks') from requests where run_id = 2"), 1);
    assert_int_equal(q_int(db, "select logits_equal from requests where run_id = 2"), 1);
    char qdir[220];
    snprintf(qdir, sizeof qdir, "%s/quarantine", cache);
    assert_int_equal(files_in(qdir), 2);
    assert_int_equal(count(err, "set aside quarantine/"), 1);  /* said once */
    assert_non_null(strstr(err, "state blob"));
    assert_non_null(strstr(err, "2 stored entries set aside as corrupt (1 fallback"));

    assert_int_equal(kvr(err, sizeof err, 0, args), 0);  /* run 3: the prefix was stored again */
    snprintf(sql, sizeof sql, "select n_reused = %d from requests where run_id = 3", top);
    assert_int_equal(q_int(db, sql), 1);
    assert_int_equal(q_int(db, "select json_extract(extra, '$.n_quarantined') from requests where run_id = 3"), 0);
    assert_null(strstr(err, "set aside"));
}

static void a_full_cache_directory_is_counted_said_once_and_summarized(void **state) {
    (void)state;
    char db[200], cache[200], err[8192];
    snprintf(db, sizeof db, "%s/full.sqlite", g_dir);
    snprintf(cache, sizeof cache, "%s/kv-full", g_dir);
    /* checkpoints at 1024 tokens and more are > 256 KB; the results database stays below 200 KB */
    const char *args[] = {"replay", "-m", g_model, "-t", g_t2, "--db", db, "--policy", "disk-anchor", "--cache-dir",
                          cache, "--waypoint-every", "1024", "--decode", "2", "--quiet", NULL};
    assert_int_equal(kvr(err, sizeof err, 200 << 10, args), 0);
    int64_t lost = q_int(db, "select sum(json_extract(extra, '$.n_store_failed')) from requests");
    assert_true(lost >= 3);
    assert_int_equal(count(err, "not stored:"), 1);
    assert_non_null(strstr(err, "File too large"));
    char want[96];
    snprintf(want, sizeof want, "%lld checkpoints lost (not stored)", (long long)lost);
    assert_non_null(strstr(err, want));
    assert_int_equal(q_int(db, "select sum(n_stored) from requests") + lost >= 3, 1);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(a_poisoned_checkpoint_is_set_aside_the_lookup_falls_back_and_it_is_written_again),
        cmocka_unit_test(a_full_cache_directory_is_counted_said_once_and_summarized),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
