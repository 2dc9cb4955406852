/*
 * engine/pool.c: the engine's thread pool (pool.h).
 *
 * The caller publishes (fn, arg, n_rows), bumps a generation counter and
 * wakes the workers; each claims its own range of that generation, runs it
 * and decrements `remaining`; the caller runs range 0, then every range no
 * worker has claimed yet, and waits for remaining == 0. Waits poll briefly
 * (pause instructions, never sched_yield: on a loaded machine a yield gives
 * the core away for a whole time slice), then sleep on condition variables
 * (no lost wake-ups: the predicates are re-checked under the mutex).
 */
#include "pool.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>

#define POOL_SPIN 100  /* polls (with a pause) before a thread sleeps: a few microseconds */

static inline void cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
}

struct eng_pool {
    int32_t         n;          /* threads, the caller included */
    pthread_t      *th;         /* [n - 1] workers */
    pthread_mutex_t mu;
    pthread_cond_t  cv_start, cv_done;
    atomic_uint     gen;        /* job generation, bumped per job */
    atomic_uint    *claimed;    /* [n]: the generation whose range i was last claimed */
    atomic_int      remaining;  /* ranges of the current job not finished */
    bool            quit;       /* under mu */
    void          (*fn)(void *, int32_t, int32_t);
    void          (*fn_ith)(void *, int32_t, int32_t, int32_t);  /* instead of fn: told its range */
    void           *arg;
    int32_t         n_rows;
};

typedef struct pool_worker_arg {
    eng_pool *p;
    int32_t   ith;
} pool_worker_arg;

static void pool_range(int32_t n_rows, int32_t ith, int32_t nth, int32_t *r0, int32_t *r1) {
    *r0 = (int32_t)((int64_t)n_rows * ith / nth);
    *r1 = (int32_t)((int64_t)n_rows * (ith + 1) / nth);
}

/* Claims range i of job generation g: true for exactly one caller. */
static bool pool_claim(eng_pool *p, int32_t i, unsigned g) {
    unsigned old = atomic_load(&p->claimed[i]);
    while ((int)(old - g) < 0)
        if (atomic_compare_exchange_weak(&p->claimed[i], &old, g)) return true;
    return false;
}

/* Runs range i of the current job (claimed by the caller) and counts it done. */
static void pool_do(eng_pool *p, int32_t i) {
    int32_t r0, r1;
    pool_range(p->n_rows, i, p->n, &r0, &r1);
    if (r1 > r0) {
        if (p->fn_ith) p->fn_ith(p->arg, i, r0, r1);
        else p->fn(p->arg, r0, r1);
    }
    if (atomic_fetch_sub(&p->remaining, 1) == 1) {
        pthread_mutex_lock(&p->mu);
        pthread_cond_signal(&p->cv_done);
        pthread_mutex_unlock(&p->mu);
    }
}

static void *pool_worker(void *v) {
    pool_worker_arg *a = v;
    eng_pool *p = a->p;
    const int32_t ith = a->ith;
    free(a);
    unsigned seen = 0;
    for (;;) {
        unsigned g = atomic_load(&p->gen);
        for (int s = 0; g == seen && s < POOL_SPIN; s++) {
            cpu_relax();
            g = atomic_load(&p->gen);
        }
        if (g == seen) {
            pthread_mutex_lock(&p->mu);
            while ((g = atomic_load(&p->gen)) == seen && !p->quit) pthread_cond_wait(&p->cv_start, &p->mu);
            const bool quit = p->quit;
            pthread_mutex_unlock(&p->mu);
            if (quit) return NULL;
        }
        seen = g;
        /* A claimed range means job g is still running (the caller waits for
         * it), so fn, arg and n_rows are g's. A worker that wakes late finds
         * its range taken by the caller and skips it. */
        if (pool_claim(p, ith, g)) pool_do(p, ith);
    }
}

eng_pool *eng_pool_new(int32_t n_threads) {
    if (n_threads < 2) return NULL;
    eng_pool *p = calloc(1, sizeof *p);
    if (!p) return NULL;
    p->n = n_threads;
    p->th = calloc((size_t)n_threads - 1, sizeof *p->th);
    p->claimed = calloc((size_t)n_threads, sizeof *p->claimed);
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->cv_start, NULL);
    pthread_cond_init(&p->cv_done, NULL);
    atomic_init(&p->gen, 0u);
    atomic_init(&p->remaining, 0);
    if (!p->th || !p->claimed) { free(p->th); free(p->claimed); free(p); return NULL; }
    for (int32_t i = 0; i < n_threads; i++) atomic_init(&p->claimed[i], 0u);
    for (int32_t i = 1; i < n_threads; i++) {
        pool_worker_arg *a = malloc(sizeof *a);
        if (a) { a->p = p; a->ith = i; }
        if (!a || pthread_create(&p->th[i - 1], NULL, pool_worker, a) != 0) {
            free(a);
            p->n = i;  /* join the ones started */
            eng_pool_free(p);
            return NULL;
        }
    }
    return p;
}

void eng_pool_free(eng_pool *p) {
    if (!p) return;
    pthread_mutex_lock(&p->mu);
    p->quit = true;
    pthread_cond_broadcast(&p->cv_start);
    pthread_mutex_unlock(&p->mu);
    for (int32_t i = 1; i < p->n; i++) pthread_join(p->th[i - 1], NULL);
    pthread_mutex_destroy(&p->mu);
    pthread_cond_destroy(&p->cv_start);
    pthread_cond_destroy(&p->cv_done);
    free(p->claimed);
    free(p->th);
    free(p);
}

/* The caller runs range 0, then every range no worker has claimed yet (a
 * worker that is asleep or descheduled, on a loaded machine, would
 * otherwise hold the whole job up), then waits for the ranges workers are
 * running. Which thread runs a range changes no result: fn treats each row
 * on its own (per-thread scratch is indexed by the range, not the thread). */
static void pool_run(eng_pool *p, int32_t n_rows, void (*fn)(void *, int32_t, int32_t),
                     void (*fn_ith)(void *, int32_t, int32_t, int32_t), void *arg) {
    p->fn = fn;
    p->fn_ith = fn_ith;
    p->arg = arg;
    p->n_rows = n_rows;
    atomic_store(&p->remaining, p->n);
    pthread_mutex_lock(&p->mu);
    const unsigned g = atomic_fetch_add(&p->gen, 1u) + 1u;  /* publishes fn, arg, n_rows (seq_cst) */
    pthread_cond_broadcast(&p->cv_start);
    pthread_mutex_unlock(&p->mu);
    if (pool_claim(p, 0, g)) pool_do(p, 0);
    for (int32_t i = 1; i < p->n; i++)
        if (pool_claim(p, i, g)) pool_do(p, i);
    for (int s = 0; atomic_load(&p->remaining) > 0 && s < POOL_SPIN; s++) cpu_relax();
    if (atomic_load(&p->remaining) > 0) {
        pthread_mutex_lock(&p->mu);
        while (atomic_load(&p->remaining) > 0) pthread_cond_wait(&p->cv_done, &p->mu);
        pthread_mutex_unlock(&p->mu);
    }
}

void eng_pool_rows(eng_pool *p, int32_t n_rows, int64_t row_cost, void (*fn)(void *arg, int32_t r0, int32_t r1),
                   void *arg) {
    if (n_rows <= 0) return;
    if (!p || n_rows == 1 || (row_cost > 0 && (int64_t)n_rows * row_cost < ENG_POOL_MIN_WORK)) {
        fn(arg, 0, n_rows);
        return;
    }
    pool_run(p, n_rows, fn, NULL, arg);
}

void eng_pool_ith(eng_pool *p, int32_t n_rows, int64_t row_cost,
                  void (*fn)(void *arg, int32_t ith, int32_t r0, int32_t r1), void *arg) {
    if (n_rows <= 0) return;
    if (!p || n_rows == 1 || (row_cost > 0 && (int64_t)n_rows * row_cost < ENG_POOL_MIN_WORK)) {
        fn(arg, 0, 0, n_rows);
        return;
    }
    pool_run(p, n_rows, NULL, fn, arg);
}
