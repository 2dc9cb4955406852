/*
 * tests/test_pool.c: the engine's thread pool (engine/pool.c).
 *
 *   - every row of a job runs exactly once, over many jobs of every size
 *     (1 row to more rows than sub-ranges), at 2, 3 and 4 threads and with
 *     each wait policy (adaptive, never spin, always spin:
 *     KVREPLAY_POOL_SPIN_US), so a sub-range lost or run twice by a late
 *     worker, or a job that returns before its rows are done, fails;
 *   - the thread index given to fn is in [0, n) and never held by two
 *     threads at once (per-thread scratch);
 *   - small jobs (n_rows * row_cost under ENG_POOL_MIN_WORK) and jobs
 *     without a pool run on the caller as one range;
 *   - a thread held up in its home segment does not hold the job: the others
 *     take the rest of that segment;
 *   - the checker itself catches a planted fault: a row counted twice.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "pool.h"

#define MAXR 5000

typedef struct job {
    atomic_int  count[MAXR];
    atomic_int  busy[8];   /* per ith: 1 while a thread runs as it */
    atomic_int  bad_ith;   /* an ith out of range or held twice */
    pthread_t   caller;
    atomic_int  on_caller; /* ranges run by the calling thread */
    int32_t     calls;     /* fn calls with r0 == 0 && r1 == n (one range) */
} job;

static void rows_fn(void *v, int32_t r0, int32_t r1) {
    job *j = v;
    for (int32_t r = r0; r < r1; r++) atomic_fetch_add(&j->count[r], 1);
    if (pthread_equal(pthread_self(), j->caller)) atomic_fetch_add(&j->on_caller, 1);
}

static void ith_fn(void *v, int32_t ith, int32_t r0, int32_t r1) {
    job *j = v;
    if (ith < 0 || ith >= 8 || atomic_exchange(&j->busy[ith], 1) != 0) {
        atomic_store(&j->bad_ith, 1);
        return;
    }
    for (int32_t r = r0; r < r1; r++) atomic_fetch_add(&j->count[r], 1);
    for (volatile int k = 0; k < 200; k++) {}  /* hold the index a little */
    atomic_store(&j->busy[ith], 0);
}

/* The rows [0, n) were each run exactly once: the index of the first row that
 * was not, or -1. */
static int32_t first_bad_row(job *j, int32_t n) {
    for (int32_t r = 0; r < n; r++)
        if (atomic_load(&j->count[r]) != 1) return r;
    return -1;
}

static void reset(job *j) {
    memset(j, 0, sizeof *j);
    j->caller = pthread_self();
}

static void every_row_runs_once(const char *spin_env) {
    if (spin_env) setenv("KVREPLAY_POOL_SPIN_US", spin_env, 1);
    else unsetenv("KVREPLAY_POOL_SPIN_US");
    static const int32_t sizes[] = {2, 3, 7, 8, 16, 31, 64, 100, 257, 1000, MAXR};
    job *j = malloc(sizeof *j);
    int jobs = 0;
    for (int32_t nt = 2; nt <= 4; nt++) {
        eng_pool *p = eng_pool_new(nt);
        assert_non_null(p);
        for (int rep = 0; rep < 300; rep++)
            for (size_t si = 0; si < sizeof sizes / sizeof sizes[0]; si++) {
                const int32_t n = sizes[si];
                reset(j);
                if (rep % 2) eng_pool_rows(p, n, 0, rows_fn, j);
                else eng_pool_ith(p, n, 0, ith_fn, j);
                const int32_t bad = first_bad_row(j, n);
                if (bad >= 0)
                    fail_msg("spin %s, %d threads, %d rows, job %d: row %d ran %d times", spin_env ? spin_env : "adaptive",
                             nt, n, rep, bad, atomic_load(&j->count[bad]));
                assert_int_equal(atomic_load(&j->bad_ith), 0);
                jobs++;
            }
        eng_pool_free(p);
    }
    free(j);
    unsetenv("KVREPLAY_POOL_SPIN_US");
    print_message("spin %s: %d jobs, every row once\n", spin_env ? spin_env : "adaptive", jobs);
}

static void every_row_runs_once_adaptive(void **state) { (void)state; every_row_runs_once(NULL); }
static void every_row_runs_once_never_spinning(void **state) { (void)state; every_row_runs_once("0"); }
static void every_row_runs_once_always_spinning(void **state) { (void)state; every_row_runs_once("100"); }

static void small_jobs_and_no_pool_run_on_the_caller_as_one_range(void **state) {
    (void)state;
    job *j = malloc(sizeof *j);
    eng_pool *p = eng_pool_new(2);
    /* 100 rows of cost 100: under ENG_POOL_MIN_WORK */
    reset(j);
    eng_pool_rows(p, 100, 100, rows_fn, j);
    assert_int_equal(first_bad_row(j, 100), -1);
    assert_int_equal(atomic_load(&j->on_caller), 1);
    reset(j);
    eng_pool_rows(NULL, 1000, 0, rows_fn, j);
    assert_int_equal(first_bad_row(j, 1000), -1);
    assert_int_equal(atomic_load(&j->on_caller), 1);
    /* no pool for one thread */
    assert_null(eng_pool_new(1));
    eng_pool_free(p);
    free(j);
}

/* The checker catches a row run twice and a row never run. */
/* Thread 1 sleeps 30 ms in its first sub-range of each job: the caller, done
 * with its own segment [0, n/2), must take the rest of thread 1's. */
typedef struct slow_job {
    job         j;
    atomic_int  ran_by[1000];  /* ith + 1 of the thread that ran the row */
    atomic_int  slept;
} slow_job;

static void slow_fn(void *v, int32_t ith, int32_t r0, int32_t r1) {
    slow_job *s = v;
    if (ith == 1 && atomic_exchange(&s->slept, 1) == 0) {
        struct timespec t = {0, 30 * 1000000L};
        nanosleep(&t, NULL);
    }
    for (int32_t r = r0; r < r1; r++) {
        atomic_fetch_add(&s->j.count[r], 1);
        atomic_store(&s->ran_by[r], ith + 1);
    }
}

static void a_held_up_thread_leaves_its_segment_to_the_others(void **state) {
    (void)state;
    setenv("KVREPLAY_POOL_SPIN_US", "100000", 1);  /* the worker is awake: it claims its segment's first part */
    eng_pool *p = eng_pool_new(2);
    assert_non_null(p);
    slow_job *s = calloc(1, sizeof *s);
    const int32_t n = 1000;
    int stolen = 0;
    for (int rep = 0; rep < 5; rep++) {
        memset(s, 0, sizeof *s);
        s->j.caller = pthread_self();
        eng_pool_ith(p, n, 0, slow_fn, s);
        const int32_t bad = first_bad_row(&s->j, n);
        if (bad >= 0) fail_msg("job %d: row %d ran %d times", rep, bad, atomic_load(&s->j.count[bad]));
        int caller_in_seg1 = 0;
        for (int32_t r = n / 2; r < n; r++) caller_in_seg1 += atomic_load(&s->ran_by[r]) == 1;
        stolen += caller_in_seg1 > 0;
    }
    print_message("the caller took rows of the held-up thread's segment in %d of 5 jobs\n", stolen);
    assert_int_equal(stolen, 5);
    free(s);
    eng_pool_free(p);
    unsetenv("KVREPLAY_POOL_SPIN_US");
}

static void the_row_check_catches_a_planted_fault(void **state) {
    (void)state;
    job *j = malloc(sizeof *j);
    eng_pool *p = eng_pool_new(2);
    reset(j);
    eng_pool_rows(p, 64, 0, rows_fn, j);
    atomic_fetch_add(&j->count[17], 1);  /* planted: row 17 twice */
    assert_int_equal(first_bad_row(j, 64), 17);
    atomic_fetch_sub(&j->count[17], 2);  /* planted: row 17 never */
    assert_int_equal(first_bad_row(j, 64), 17);
    eng_pool_free(p);
    free(j);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(every_row_runs_once_adaptive),
        cmocka_unit_test(every_row_runs_once_never_spinning),
        cmocka_unit_test(every_row_runs_once_always_spinning),
        cmocka_unit_test(small_jobs_and_no_pool_run_on_the_caller_as_one_range),
        cmocka_unit_test(a_held_up_thread_leaves_its_segment_to_the_others),
        cmocka_unit_test(the_row_check_catches_a_planted_fault),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
