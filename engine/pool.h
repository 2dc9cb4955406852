/*
 * engine/pool.h: the engine's thread pool (internal). Every parallel loop of
 * both kernels (ref products split by output columns and rows, attention
 * blocks, row-wise ops) runs on a model's own pool, with exactly n_threads
 * threads (the caller is thread 0) and a static split of [0, n_rows) into
 * contiguous ranges, one per thread: range i is
 * [n_rows * i / n, n_rows * (i + 1) / n).
 *
 * Any thread may run any range: a range no worker has claimed by the time
 * the caller finished its own is run by the caller, so a worker asleep or
 * descheduled on a loaded machine cannot hold a job up. The ranges, and so
 * the results, never depend on which thread ran them (fn must treat each
 * row on its own; per-range scratch is indexed by the range).
 *
 * Waiting: see pool.c (how long a worker polls before it sleeps, and how
 * that adapts to the machine).
 */
#ifndef ENG_POOL_H
#define ENG_POOL_H

#include <stdint.h>

typedef struct eng_pool eng_pool;

/* A pool of n_threads (the caller counts as thread 0; n_threads >= 2).
 * NULL on failure or for n_threads < 2. */
eng_pool *eng_pool_new(int32_t n_threads);
void      eng_pool_free(eng_pool *p);  /* accepts NULL; joins the workers */

/* Below this many element operations (n_rows * row_cost) a loop runs on
 * the caller alone: waking threads would cost more than the work. */
#define ENG_POOL_MIN_WORK 32768

/* Runs fn(arg, r0, r1) over [0, n_rows) split into the pool's ranges; on
 * the caller alone without a pool, with one row, or when n_rows * row_cost
 * < ENG_POOL_MIN_WORK (row_cost 0: always split). Not reentrant: fn must
 * not run a job on the same pool. */
void eng_pool_rows(eng_pool *p, int32_t n_rows, int64_t row_cost, void (*fn)(void *arg, int32_t r0, int32_t r1),
                   void *arg);
/* Same, and fn learns which range it runs (ith in [0, n_threads): the
 * range's index, not the thread's), for per-range scratch; on the caller
 * alone it runs as range 0 over [0, n_rows). */
void eng_pool_ith(eng_pool *p, int32_t n_rows, int64_t row_cost,
                  void (*fn)(void *arg, int32_t ith, int32_t r0, int32_t r1), void *arg);

#endif /* ENG_POOL_H */
