/*
 * engine/pool.h: the engine's thread pool (internal). Every parallel loop of
 * both kernels (ref products split by output columns and rows, attention
 * blocks, row-wise ops) runs on a model's own pool, with exactly n_threads
 * threads (the caller is thread 0). A job over [0, n_rows) is cut into
 * contiguous sub-ranges (a few per thread), which the threads claim one at
 * a time: whichever threads are on a core run them, so a worker asleep or
 * descheduled on a loaded machine holds up at most the one it is running.
 * Results never depend on which thread ran what (fn must treat each row on
 * its own; scratch is per executing thread).
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

/* Runs fn(arg, r0, r1) over [0, n_rows) cut into sub-ranges; on
 * the caller alone without a pool, with one row, or when n_rows * row_cost
 * < ENG_POOL_MIN_WORK (row_cost 0: always split). Not reentrant: fn must
 * not run a job on the same pool. */
void eng_pool_rows(eng_pool *p, int32_t n_rows, int64_t row_cost, void (*fn)(void *arg, int32_t r0, int32_t r1),
                   void *arg);
/* Same, and fn learns which thread runs it (ith in [0, n_threads), the
 * caller 0), for per-thread scratch: a thread runs its sub-ranges one after
 * the other, two threads never share an ith. On the caller alone it runs
 * as ith 0 over [0, n_rows). */
void eng_pool_ith(eng_pool *p, int32_t n_rows, int64_t row_cost,
                  void (*fn)(void *arg, int32_t ith, int32_t r0, int32_t r1), void *arg);

#endif /* ENG_POOL_H */
