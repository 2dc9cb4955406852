/*
 * engine/pool.c: the engine's thread pool (pool.h).
 *
 * A job. The caller publishes (fn, arg, n_rows) and bumps the job
 * generation. The rows are cut into n home segments, one per thread of the
 * pool (the caller is thread 0): thread i's is [n_rows*i/n,
 * n_rows*(i+1)/n), the same rows of every job of the same size. Each
 * segment has a counter tagged with the generation (a worker that wakes
 * late finds the job's counters gone and claims nothing). A thread claims
 * contiguous sub-ranges from the front of its own segment, 3/4 of what is
 * left at a time, then from the other segments (stealing), half of what is
 * left there at a time, down to a single row; it runs each and counts its
 * rows done, and the caller returns when all rows are done. So on a quiet
 * machine each thread runs its own segment in a few long runs (the same
 * columns of x, the same weights' prefetch stream, job after job: 4-6%
 * faster at 2 threads than claims guided over one shared counter), and the
 * threads finish within one row of work of each other; a worker
 * descheduled on a loaded machine holds up at most the sub-range it is
 * running: the rest of its segment goes to whichever threads are on a core.
 * Which thread runs which rows changes no result (fn treats each row on its
 * own; scratch is per executing thread).
 *
 * Waiting. A worker that has no job, and a caller waiting for the last
 * sub-ranges, poll (pause instructions, never sched_yield: on a loaded
 * machine a yield gives the core away for a whole time slice) for at most
 * the pool's spin budget, then sleep on a condition variable (no lost
 * wake-ups: each side publishes, then checks the other's flag, seq_cst; the
 * predicates are re-checked under the mutex). The budget adapts to the
 * machine, so that threads spin only while spinning pays:
 *   - spinning pays when each of our threads has a core: a spinning worker
 *     picks the next job up within a microsecond instead of the tens of
 *     microseconds a futex wake-up takes, for a few hundred microseconds of
 *     a core nobody else wanted;
 *   - it costs when other runnable threads want our cores: the spin burns
 *     the time slices the kernel shares out fairly, and the spinning thread
 *     is later descheduled in the middle of real work.
 * The caller measures which case it is in, every POOL_SAMPLE_NS of wall
 * time: the run-queue wait of the pool's own threads (schedstat: time
 * spent runnable but not running) over the window. Above POOL_BUSY_WAIT
 * of the window (other threads are taking our cores) the budget drops to 0
 * at once: workers sleep as soon as they are idle and the caller runs the
 * sub-ranges they have not claimed; below POOL_QUIET_WAIT it returns to
 * POOL_SPIN_NS. libgomp (GOMP_SPINCOUNT) and llama.cpp's threadpool (its
 * `poll` level) spin a budget fixed in advance, whatever the other
 * processes do; a shared machine needs one that looks. Without schedstat the
 * signal is /proc/loadavg's runnable count against our cores; with more
 * threads than sched_getaffinity cores the pool never spins.
 *
 * KVREPLAY_POOL_SPIN_US (read when a pool is created): unset or -1
 * adaptive (the above), 0 never spin, N spin up to N microseconds whatever
 * the load (for measurements; `kvreplay bench --contention` compares).
 */
#include "pool.h"

#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define POOL_SPIN_NS    200000       /* spin budget while spinning pays: 200 us */
#define POOL_TAIL_NS    30000        /* the caller's spin for the last sub-ranges on a busy machine */
#define POOL_SAMPLE_NS  20000000     /* the load is measured every 20 ms */
#define POOL_BUSY_WAIT  0.05         /* run-queue wait share above which the pool stops spinning */
#define POOL_QUIET_WAIT 0.02         /* ... and below which it spins again */
#define CLAIM_CLOSED    0xffffffffu  /* low half of a segment counter once a job is over */
#define NO_PREV         UINT64_MAX   /* wait_prev: no reading yet */

static inline void cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
}

static int64_t now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (int64_t)t.tv_sec * 1000000000 + t.tv_nsec;
}

typedef struct pool_seg {
    _Atomic uint64_t c;
    char             pad[64 - sizeof(uint64_t)];  /* a cache line each */
} pool_seg;

struct eng_pool {
    int32_t          n;         /* threads, the caller included */
    pthread_t       *th;        /* [n - 1] workers */
    pthread_mutex_t  mu;
    pthread_cond_t   cv_start, cv_done;
    atomic_uint      gen;       /* job generation, bumped per job */
    pool_seg        *seg;       /* [n]: (generation << 32) | first unclaimed row of home segment i */
    atomic_int       done;      /* rows of the current job finished */
    atomic_int       sleepers;  /* workers in (or entering) the start wait */
    atomic_int       caller_waiting;
    atomic_llong     spin_ns;   /* current spin budget of idle workers (0: sleep at once) */
    int64_t          tail_ns;   /* the caller's, waiting for sub-ranges running on other threads */
    bool             quit;      /* under mu */
    void           (*fn)(void *, int32_t, int32_t);
    void           (*fn_ith)(void *, int32_t, int32_t, int32_t);
    void            *arg;
    atomic_int       n_rows;
    /* the load monitor (caller side) */
    int              mode;      /* -1 adaptive, else fixed budget in ns (KVREPLAY_POOL_SPIN_US) */
    bool             busy;      /* adaptive: the last window said "oversubscribed" */
    int32_t          n_cores;   /* sched_getaffinity at creation */
    int64_t          t_sample;  /* start of the current window */
    int             *stat_fd;   /* [n]: workers' /proc/self/task/TID/schedstat (-1: unknown); [0] unused */
    uint64_t        *wait_prev; /* [n]: run-queue wait (ns) at the window's start ([0]: the caller), or NO_PREV */
    pid_t            caller_tid;
    atomic_int       started;   /* workers that have recorded their schedstat file */
    /* counters (KVREPLAY_POOL_STATS=1 prints them when the pool is freed) */
    int64_t          n_jobs, n_windows, n_busy_windows;
    int64_t         *n_ran;     /* [n]: rows each thread ran (written by that thread only) */
};

typedef struct pool_worker_arg {
    eng_pool *p;
    int32_t   ith;
} pool_worker_arg;

// ----------------------------------------------------------------------------
// Jobs

/* Claims the next sub-range [*r0, *r1) of home segment sg of job g (*n:
 * the job's row count), 3/4 of what is left for its owner, half for
 * another thread; false when none is left, or when job g is over: the
 * counter is closed or carries another generation. A worker may read
 * n_rows while the caller writes the next job's (relaxed atomics); the
 * caller closes the old counters first, so a claim computed from them fails
 * its compare-exchange. After a successful claim the job cannot end before
 * the claimed rows are done, so fn and arg are the job's. */
static bool seg_next(eng_pool *p, unsigned g, int32_t sg, bool own, int32_t *r0, int32_t *r1, int32_t *n) {
    _Atomic uint64_t *cnt = &p->seg[sg].c;
    uint64_t c = atomic_load(cnt);
    for (;;) {
        const uint32_t i = (uint32_t)c;
        const int32_t n_rows = atomic_load_explicit(&p->n_rows, memory_order_relaxed);
        if ((unsigned)(c >> 32) != g || i == CLAIM_CLOSED) return false;
        const int32_t end = (int32_t)((int64_t)n_rows * (sg + 1) / p->n), left = end - (int32_t)i;
        if (left <= 0) return false;
        const int32_t size = own ? left - left / 4 : (left + 1) / 2;  /* >= 1 */
        if (atomic_compare_exchange_weak(cnt, &c, ((uint64_t)g << 32) | (uint32_t)((int32_t)i + size))) {
            *r0 = (int32_t)i;
            *r1 = (int32_t)i + size;
            *n = n_rows;
            return true;
        }
    }
}

/* The next sub-range of job g for thread ith: its own segment first, then
 * the others in turn. */
static bool pool_next(eng_pool *p, unsigned g, int32_t ith, int32_t *r0, int32_t *r1, int32_t *n) {
    for (int32_t k = 0; k < p->n; k++)
        if (seg_next(p, g, (ith + k) % p->n, k == 0, r0, r1, n)) return true;
    return false;
}

/* Claims and runs sub-ranges of job g until none is left; ith: the thread. */
static void pool_work(eng_pool *p, unsigned g, int32_t ith) {
    for (int32_t r0, r1, n; pool_next(p, g, ith, &r0, &r1, &n);) {
        if (p->fn_ith) p->fn_ith(p->arg, ith, r0, r1);
        else p->fn(p->arg, r0, r1);
        p->n_ran[ith] += r1 - r0;
        if (atomic_fetch_add(&p->done, r1 - r0) + (r1 - r0) == n && atomic_load(&p->caller_waiting)) {
            pthread_mutex_lock(&p->mu);
            pthread_cond_signal(&p->cv_done);
            pthread_mutex_unlock(&p->mu);
        }
    }
}

/* Polls until pred(p, v) holds or `budget` ns are spent; true if it holds. */
static bool spin_until(eng_pool *p, bool (*pred)(eng_pool *, unsigned), unsigned v, int64_t budget) {
    if (pred(p, v)) return true;
    if (budget <= 0) return false;
    const int64_t t0 = now_ns();
    for (unsigned s = 1;; s++) {
        cpu_relax();
        if (pred(p, v)) return true;
        if ((s & 63) == 0 && now_ns() - t0 > budget) return false;
    }
}

static bool new_job(eng_pool *p, unsigned seen) { return atomic_load(&p->gen) != seen; }
static bool job_done(eng_pool *p, unsigned n_rows) { return atomic_load(&p->done) >= (int)n_rows; }

static void *pool_worker(void *v) {
    pool_worker_arg *a = v;
    eng_pool *p = a->p;
    const int32_t ith = a->ith;
    free(a);
    char path[64];
    snprintf(path, sizeof path, "/proc/self/task/%ld/schedstat", (long)syscall(SYS_gettid));
    p->stat_fd[ith] = open(path, O_RDONLY | O_CLOEXEC);
    atomic_fetch_add(&p->started, 1);
    unsigned seen = 0;
    for (;;) {
        if (!spin_until(p, new_job, seen, atomic_load_explicit(&p->spin_ns, memory_order_relaxed))) {
            pthread_mutex_lock(&p->mu);
            atomic_fetch_add(&p->sleepers, 1);
            while (!new_job(p, seen) && !p->quit) pthread_cond_wait(&p->cv_start, &p->mu);
            atomic_fetch_sub(&p->sleepers, 1);
            const bool quit = p->quit;
            pthread_mutex_unlock(&p->mu);
            if (quit) return NULL;
        }
        seen = atomic_load(&p->gen);
        pool_work(p, seen, ith);
    }
}

// ----------------------------------------------------------------------------
// The load monitor: is spinning paying?

/* Run-queue wait (ns) from a schedstat line "run wait slices", or false. */
static bool parse_wait(const char *buf, uint64_t *wait) {
    unsigned long long run, w;
    if (sscanf(buf, "%llu %llu", &run, &w) != 2) return false;
    *wait = w;
    return true;
}

static bool read_wait_fd(int fd, uint64_t *wait) {
    char buf[128];
    if (fd < 0) return false;
    const ssize_t n = pread(fd, buf, sizeof buf - 1, 0);
    if (n <= 0) return false;
    buf[n] = '\0';
    return parse_wait(buf, wait);
}

static bool read_wait_self(uint64_t *wait) {
    const int fd = open("/proc/thread-self/schedstat", O_RDONLY | O_CLOEXEC);
    const bool ok = read_wait_fd(fd, wait);
    if (fd >= 0) close(fd);
    return ok;
}

/* Fallback: runnable tasks of the machine (/proc/loadavg's 4th field) other
 * than our awake threads, plus our threads, against our cores. */
static bool loadavg_busy(eng_pool *p) {
    FILE *f = fopen("/proc/loadavg", "r");
    if (!f) return false;
    double l1, l5, l15;
    int running = 0, total = 0;
    const bool ok = fscanf(f, "%lf %lf %lf %d/%d", &l1, &l5, &l15, &running, &total) == 5;
    fclose(f);
    if (!ok) return false;
    const int ours = 1 + (p->n - 1 - atomic_load(&p->sleepers));  /* the reader and awake workers */
    const int others = running - ours > 0 ? running - ours : 0;
    return others + p->n > p->n_cores;
}

/* Called by the caller before each job: every POOL_SAMPLE_NS, decides the
 * spin budget from the pool's run-queue wait over the window. */
static void pool_monitor(eng_pool *p) {
    if (p->mode >= 0) return;
    const int64_t t = now_ns();
    if (t - p->t_sample < POOL_SAMPLE_NS) return;
    const int64_t span = t - p->t_sample;
    p->t_sample = t;
    const pid_t tid = (pid_t)syscall(SYS_gettid);
    uint64_t sum = 0, w;
    int counted = 0;
    bool ok = atomic_load(&p->started) == p->n - 1;
    for (int32_t i = 1; ok && i < p->n; i++) {
        if (!read_wait_fd(p->stat_fd[i], &w)) { ok = false; break; }
        if (p->wait_prev[i] != NO_PREV && w >= p->wait_prev[i]) { sum += w - p->wait_prev[i]; counted++; }
        p->wait_prev[i] = w;
    }
    if (ok && read_wait_self(&w)) {
        if (tid == p->caller_tid && p->wait_prev[0] != NO_PREV && w >= p->wait_prev[0]) {
            sum += w - p->wait_prev[0];
            counted++;
        }
        p->wait_prev[0] = w;
        p->caller_tid = tid;
    } else {
        ok = false;
    }
    bool busy = p->busy;
    if (ok && counted > 0) {
        const double share = (double)sum / ((double)span * counted);
        busy = busy ? share > POOL_QUIET_WAIT : share > POOL_BUSY_WAIT;
    } else if (!ok) {
        busy = loadavg_busy(p);
    }
    if (p->n > p->n_cores) busy = true;  /* more threads than cores: spinning can only steal from ourselves */
    p->busy = busy;
    p->n_windows++;
    p->n_busy_windows += busy;
    atomic_store_explicit(&p->spin_ns, busy ? 0 : POOL_SPIN_NS, memory_order_relaxed);
    p->tail_ns = busy ? POOL_TAIL_NS : POOL_SPIN_NS;
}

// ----------------------------------------------------------------------------
// Create, run, free

eng_pool *eng_pool_new(int32_t n_threads) {
    if (n_threads < 2) return NULL;
    eng_pool *p = calloc(1, sizeof *p);
    if (!p) return NULL;
    p->n = n_threads;
    p->th = calloc((size_t)n_threads - 1, sizeof *p->th);
    p->stat_fd = malloc(sizeof(int) * (size_t)n_threads);
    p->wait_prev = calloc((size_t)n_threads, sizeof *p->wait_prev);
    p->n_ran = calloc((size_t)n_threads, sizeof *p->n_ran);
    p->seg = aligned_alloc(64, sizeof *p->seg * (size_t)n_threads);
    if (!p->th || !p->stat_fd || !p->wait_prev || !p->n_ran || !p->seg) {
        free(p->th); free(p->stat_fd); free(p->wait_prev); free(p->n_ran); free(p->seg); free(p);
        return NULL;
    }
    for (int32_t i = 0; i < n_threads; i++) {
        p->stat_fd[i] = -1;
        p->wait_prev[i] = NO_PREV;
    }
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->cv_start, NULL);
    pthread_cond_init(&p->cv_done, NULL);
    atomic_init(&p->gen, 0u);
    for (int32_t i = 0; i < n_threads; i++) atomic_init(&p->seg[i].c, 0u);
    atomic_init(&p->done, 0);
    atomic_init(&p->sleepers, 0);
    atomic_init(&p->caller_waiting, 0);
    atomic_init(&p->n_rows, 0);
    atomic_init(&p->started, 0);
    cpu_set_t set;
    p->n_cores = sched_getaffinity(0, sizeof set, &set) == 0 ? CPU_COUNT(&set) : (int32_t)sysconf(_SC_NPROCESSORS_ONLN);
    if (p->n_cores < 1) p->n_cores = 1;
    const char *env = getenv("KVREPLAY_POOL_SPIN_US");
    const long us = env && *env ? strtol(env, NULL, 10) : -1;
    p->mode = us < 0 ? -1 : us > 1000000 ? 1000000000 : (int)(us * 1000);
    const bool spin0 = p->mode >= 0 ? p->mode > 0 : p->n <= p->n_cores;
    atomic_init(&p->spin_ns, p->mode >= 0 ? p->mode : spin0 ? POOL_SPIN_NS : 0);
    p->tail_ns = p->mode >= 0 ? p->mode : spin0 ? POOL_SPIN_NS : POOL_TAIL_NS;
    p->busy = !spin0;
    p->t_sample = now_ns();
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
    const char *st = getenv("KVREPLAY_POOL_STATS");
    if (st && *st && *st != '0') {
        int64_t all = 0;
        for (int32_t i = 0; i < p->n; i++) all += p->n_ran[i];
        fprintf(stderr, "pool: %d threads, %lld jobs, %lld rows, %.1f%% run by workers; "
                "%lld load windows, %.1f%% busy (no spin)\n", p->n, (long long)p->n_jobs, (long long)all,
                all ? 100.0 * (double)(all - p->n_ran[0]) / (double)all : 0.0, (long long)p->n_windows,
                p->n_windows ? 100.0 * (double)p->n_busy_windows / (double)p->n_windows : 0.0);
    }
    for (int32_t i = 1; i < p->n; i++)
        if (p->stat_fd[i] >= 0) close(p->stat_fd[i]);
    pthread_mutex_destroy(&p->mu);
    pthread_cond_destroy(&p->cv_start);
    pthread_cond_destroy(&p->cv_done);
    free(p->stat_fd);
    free(p->wait_prev);
    free(p->n_ran);
    free(p->seg);
    free(p->th);
    free(p);
}

static void pool_run(eng_pool *p, int32_t n_rows, void (*fn)(void *, int32_t, int32_t),
                     void (*fn_ith)(void *, int32_t, int32_t, int32_t), void *arg) {
    pool_monitor(p);
    p->n_jobs++;
    const unsigned g = atomic_load(&p->gen) + 1u;
    for (int32_t i = 0; i < p->n; i++)  /* before the fields change */
        atomic_store(&p->seg[i].c, ((uint64_t)(g - 1u) << 32) | CLAIM_CLOSED);
    p->fn = fn;
    p->fn_ith = fn_ith;
    p->arg = arg;
    atomic_store_explicit(&p->n_rows, n_rows, memory_order_relaxed);
    atomic_store(&p->done, 0);
    for (int32_t i = 0; i < p->n; i++)
        atomic_store(&p->seg[i].c, ((uint64_t)g << 32) | (uint32_t)((int64_t)n_rows * i / p->n));
    atomic_store(&p->gen, g);  /* publishes the job (seq_cst) */
    if (atomic_load(&p->sleepers) > 0) {
        pthread_mutex_lock(&p->mu);
        pthread_cond_broadcast(&p->cv_start);
        pthread_mutex_unlock(&p->mu);
    }
    pool_work(p, g, 0);
    if (!spin_until(p, job_done, (unsigned)n_rows, p->tail_ns)) {
        pthread_mutex_lock(&p->mu);
        atomic_store(&p->caller_waiting, 1);
        while (!job_done(p, (unsigned)n_rows)) pthread_cond_wait(&p->cv_done, &p->mu);
        atomic_store(&p->caller_waiting, 0);
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
