/*
 * tests/test_fuzz_corpus.c: every input the fuzzers keep, replayed with the
 * normal build (no clang): tests/fuzz/corpus/NAME/ (the seeds) and
 * tests/fuzz/crashes/NAME/ (each crash, leak or timeout `make fuzz` ever
 * found, kept as a regression input) through the same entry point as the
 * fuzzer (tests/fuzz/targets.c). A broken promise aborts this test; under
 * `make asan` the sanitizers check the same inputs. A directory that names
 * no target is an error (a renamed target must take its inputs along).
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
#include <sys/stat.h>

#include "fuzz/targets.h"

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

/* Replays every file of dir through t; returns how many. */
static int replay_dir(const kvr_fuzz_target *t, const char *dir) {
    DIR *d = opendir(dir);
    if (!d) return 0;
    char *names[4096];
    int n = 0;
    for (struct dirent *e; (e = readdir(d)) && n < 4096;)
        if (e->d_name[0] != '.') names[n++] = strdup(e->d_name);
    closedir(d);
    qsort(names, (size_t)n, sizeof *names, cmp_str);
    for (int i = 0; i < n; i++) {
        char path[1024];
        snprintf(path, sizeof path, "%s/%s", dir, names[i]);
        FILE *f = fopen(path, "rb");
        assert_non_null(f);
        fseek(f, 0, SEEK_END);
        long len = ftell(f);
        fseek(f, 0, SEEK_SET);
        unsigned char *buf = malloc((size_t)len + 1);
        assert_non_null(buf);
        assert_int_equal(fread(buf, 1, (size_t)len, f), (size_t)len);
        fclose(f);
        if (getenv("KVR_VERBOSE")) fprintf(stderr, "replay %s %s\n", t->name, path);
        t->run(buf, (size_t)len, t->arg);
        free(buf);
        free(names[i]);
    }
    return n;
}

static void every_kept_fuzz_input_runs_clean_through_its_target(void **state) {
    (void)state;
    kvr_fuzz_target all[64];
    int n = kvr_fuzz_targets(all, 64);
    assert_true(n >= 11 && n <= 64);
    int seeds = 0, crashes = 0, skipped = 0;
    for (int i = 0; i < n; i++) {
        char why[512], dir[512];
        if (kvr_fuzz_available(&all[i], why, sizeof why) != 0) {
            print_message("skipped: %s\n", why);
            skipped++;
            continue;
        }
        snprintf(dir, sizeof dir, "tests/fuzz/corpus/%.48s", all[i].name);
        int s = replay_dir(&all[i], dir);
        if (s == 0) fail_msg("target %s has no seed corpus in %s", all[i].name, dir);
        seeds += s;
        snprintf(dir, sizeof dir, "tests/fuzz/crashes/%.48s", all[i].name);
        crashes += replay_dir(&all[i], dir);
    }
    print_message("%d targets: %d seeds and %d kept crash inputs replayed clean (%d targets skipped)\n", n, seeds,
                  crashes, skipped);
}

static void every_corpus_directory_names_a_target(void **state) {
    (void)state;
    const char *roots[] = {"tests/fuzz/corpus", "tests/fuzz/crashes"};
    for (int r = 0; r < 2; r++) {
        DIR *d = opendir(roots[r]);
        if (!d) continue;
        for (struct dirent *e; (e = readdir(d));) {
            if (e->d_name[0] == '.') continue;
            if (!kvr_fuzz_find(e->d_name)) fail_msg("%s/%s: no fuzz target of that name", roots[r], e->d_name);
        }
        closedir(d);
    }
}

static int setup(void **state) {
    (void)state;
    kvr_fuzz_init();
    return 0;
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(every_kept_fuzz_input_runs_clean_through_its_target),
        cmocka_unit_test(every_corpus_directory_names_a_target),
    };
    return cmocka_run_group_tests(tests, setup, NULL);
}
