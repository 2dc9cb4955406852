/*
 * harness/bench/bench_load.c: `kvreplay bench --contention`: how much a busy
 * machine slows a prefill.
 *
 * It starts the competitors itself: K processes (default one per core this
 * process may use), each a busy loop pinned to one core, the way two other
 * jobs hold a shared machine's cores. Per round and kernel it times a
 * quiet prefill, starts the competitors, times the same prefill beside
 * them, and stops them (SIGKILL; they also die with this process). Each
 * measurement is one timed prefill after an untimed one under the same
 * condition (so the pool's load monitor has seen it). It prints per kernel
 * the medians and the loaded/quiet ratio of the prefill times: 1.0 is no
 * slowdown, 2.0 what a fair share of 2 competitors + our threads on 2
 * cores would cost.
 *
 * With --exec CMD it times a shell command instead (quiet, then beside the
 * competitors, per round): a whole experiment, e.g. seed003 at demo scale.
 *
 * With --policies the ref kernel is measured with each pool wait policy
 * (adaptive, never spin, always spin 200 us: KVREPLAY_POOL_SPIN_US), so the
 * adaptive wait can be compared with both fixed ones in the same run.
 */
#include <jansson.h>
#include <math.h>
#include <sched.h>
#include <signal.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bench.h"
#include "bench_engine.h"
#include "bench_util.h"
#include "options.h"
#include "stats.h"
#include "status.h"
#include "util.h"

typedef struct load_args {
    const char  *model, *exec;
    eng_numerics num;
    int32_t      chunk, n_tok, reps, competitors;
    int64_t      seed;
    bool         json, policies, contention;
} load_args;

#define OPT(field) offsetof(load_args, field)
static const hx_option k_options[] = {
    {"--contention", NULL, NULL, "this benchmark", HX_OPT_FLAG, OPT(contention), 0, 0, NULL},
    {"--model", "-m", "FILE", "GGUF model (required)", HX_OPT_STRING, OPT(model), 0, 0, NULL},
    HX_OPTS_ENGINE(load_args),
    {"--tokens", NULL, "N", "prompt tokens per prefill (default 512)", HX_OPT_INT, OPT(n_tok), 1, 1 << 22, NULL},
    {"--reps", NULL, "R", "rounds, medians reported (default 3)", HX_OPT_INT, OPT(reps), 1, 1000, NULL},
    {"--competitors", NULL, "K", "busy processes started (default: one per core)", HX_OPT_INT, OPT(competitors), 1,
     256, NULL},
    {"--policies", NULL, NULL, "ref also with the pool never spinning and always spinning", HX_OPT_FLAG,
     OPT(policies), 0, 0, NULL},
    {"--seed", NULL, "S", "prompt token seed (default 0)", HX_OPT_INT64, OPT(seed), 0, INT64_MAX, NULL},
    {"--exec", NULL, "CMD", "time this shell command instead of prefills (no -m)", HX_OPT_STRING, OPT(exec), 0, 0,
     NULL},
    {"--json", NULL, NULL, "one JSON object on stdout", HX_OPT_FLAG, OPT(json), 0, 0, NULL},
    {0},
};

static const char k_usage[] =
    "usage: kvreplay bench --contention -m MODEL.gguf [--threads T] [--tokens N] [--reps R] [OPTIONS]\n"
    "       kvreplay bench --contention --exec CMD [--reps R] [--competitors K] [--json]\n"
    "\n"
    "Times the same prefill quiet and beside K busy processes it starts itself (one per core by\n"
    "default, each pinned to a core), for both kernels, interleaved, and prints the loaded/quiet\n"
    "ratio of the median prefill times.\n"
    "\n";

/* The competitors: busy loops pinned to cores 0, 1, ... of our affinity set. */
static int start_competitors(pid_t *pids, int k) {
    cpu_set_t set;
    int cores[CPU_SETSIZE], n_cores = 0;
    if (sched_getaffinity(0, sizeof set, &set) == 0)
        for (int c = 0; c < CPU_SETSIZE; c++)
            if (CPU_ISSET(c, &set)) cores[n_cores++] = c;
    fflush(stdout);
    fflush(stderr);
    for (int i = 0; i < k; i++) {
        pid_t p = fork();
        if (p < 0) return i;
        if (p == 0) {  /* a busy loop: nothing else runs in the child */
            prctl(PR_SET_PDEATHSIG, SIGKILL);
            if (n_cores > 0) {
                cpu_set_t one;
                CPU_ZERO(&one);
                CPU_SET(cores[i % n_cores], &one);
                sched_setaffinity(0, sizeof one, &one);
            }
            volatile unsigned long x = 0;
            for (;;) x++;
        }
        pids[i] = p;
    }
    usleep(50000);  /* let them take their cores */
    return k;
}

static void stop_competitors(pid_t *pids, int k) {
    for (int i = 0; i < k; i++) kill(pids[i], SIGKILL);
    for (int i = 0; i < k; i++) waitpid(pids[i], NULL, 0);
}

typedef struct variant {
    const char *name;    /* "ref", "blas", "ref spin 0", ... */
    eng_kernel  kernel;
    const char *spin;    /* KVREPLAY_POOL_SPIN_US at load, or NULL (adaptive) */
    eng_model  *m;
    double     *quiet, *loaded;
} variant;

/* Wall seconds of `sh -c cmd` into *sec; ENG_ERR_IO when it fails. */
static int time_command(const char *cmd, double *sec, char *err, size_t errlen) {
    fflush(stdout);
    const double t0 = eng_now_s();
    const int st = system(cmd);
    if (st == -1 || !WIFEXITED(st) || WEXITSTATUS(st) != 0) {
        eng_errf(err, errlen, "bench --contention: the command failed (status %d): %s",
                 st != -1 && WIFEXITED(st) ? WEXITSTATUS(st) : -1, cmd);
        return ENG_ERR_IO;
    }
    *sec = eng_now_s() - t0;
    return ENG_OK;
}

/* All k competitors started, or none left running and ENG_ERR_IO. */
static int competitors(pid_t *pids, int k, char *err, size_t errlen) {
    const int started = start_competitors(pids, k);
    if (started == k) return ENG_OK;
    stop_competitors(pids, started);
    eng_errf(err, errlen, "bench --contention: cannot start %d competitors", k);
    return ENG_ERR_IO;
}

static int contention_exec(const load_args *a, int k, const hx_machine *mc, char *err, size_t errlen) {
    double *q = calloc((size_t)a->reps, sizeof(double)), *l = calloc((size_t)a->reps, sizeof(double));
    pid_t *pids = malloc(sizeof(pid_t) * (size_t)k);
    int rc = ENG_OK;
    if (!q || !l || !pids) {
        rc = (eng_errf(err, errlen, "bench: out of memory"), ENG_ERR_NOMEM);
        goto out;
    }
    double load0[3] = {0, 0, 0};
    getloadavg(load0, 3);
    for (int r = 0; r < a->reps; r++) {
        if ((rc = time_command(a->exec, &q[r], err, errlen)) || (rc = competitors(pids, k, err, errlen))) goto out;
        rc = time_command(a->exec, &l[r], err, errlen);
        stop_competitors(pids, k);
        if (rc) goto out;
    }
    const double mq = hx_median(q, a->reps), ml = hx_median(l, a->reps);
    if (a->json) {
        json_t *o = json_object(), *arr = json_array(), *e = json_object();
        json_object_set_new(o, "command", json_string(a->exec));
        json_object_set_new(o, "reps", json_integer(a->reps));
        json_object_set_new(o, "competitors", json_integer(k));
        json_object_set_new(o, "cores", json_integer(mc->cores));
        json_object_set_new(o, "loadavg_at_start", json_real(load0[0]));
        json_object_set_new(e, "variant", json_string("command"));
        json_object_set_new(e, "quiet_s", json_real(mq));
        json_object_set_new(e, "loaded_s", json_real(ml));
        json_object_set_new(e, "slowdown", json_real(ml / mq));
        json_array_append_new(arr, e);
        json_object_set_new(o, "runs", arr);
        if (hx_bench_print_json(o)) {
            rc = (eng_errf(err, errlen, "bench: out of memory"), ENG_ERR_NOMEM);
            goto out;
        }
    } else {
        printf("command: %s\n%d rounds; %d busy competitors pinned one per core (%d cores); load average at start "
               "%.2f\nquiet %.1f s, loaded %.1f s (medians): loaded/quiet %.2f\n", a->exec, a->reps, k, mc->cores,
               load0[0], mq, ml, ml / mq);
    }
    rc = hx_bench_flush("bench --contention", err, errlen);
out:
    free(q);
    free(l);
    free(pids);
    return rc;
}

/* Loads each variant's model, KVREPLAY_POOL_SPIN_US set as it asks while
 * its pool starts, and the caller's value put back after. */
static int load_variants(variant *v, int nv, const load_args *a, char *err, size_t errlen) {
    const char *env0 = getenv("KVREPLAY_POOL_SPIN_US");
    char *saved = env0 ? strdup(env0) : NULL;
    int rc = env0 && !saved ? (eng_errf(err, errlen, "bench: out of memory"), ENG_ERR_NOMEM) : ENG_OK;
    for (int i = 0; i < nv && !rc; i++) {
        eng_numerics n = a->num;
        n.kernel = v[i].kernel;
        if (v[i].spin) setenv("KVREPLAY_POOL_SPIN_US", v[i].spin, 1);
        else if (saved) setenv("KVREPLAY_POOL_SPIN_US", saved, 1);
        else unsetenv("KVREPLAY_POOL_SPIN_US");
        if ((rc = hx_bench_load(a->model, &n, &v[i].m, err, errlen))) break;
        v[i].quiet = calloc((size_t)a->reps, sizeof(double));
        v[i].loaded = calloc((size_t)a->reps, sizeof(double));
        if (!v[i].quiet || !v[i].loaded) rc = (eng_errf(err, errlen, "bench: out of memory"), ENG_ERR_NOMEM);
    }
    if (saved) setenv("KVREPLAY_POOL_SPIN_US", saved, 1);
    else if (!env0) unsetenv("KVREPLAY_POOL_SPIN_US");
    free(saved);
    return rc;
}

static int print_contention(const load_args *a, const variant *v, int nv, int k, const hx_machine *mc,
                            double load0, char *err, size_t errlen) {
    double q[4], l[4];
    for (int i = 0; i < nv; i++) {
        q[i] = hx_median(v[i].quiet, a->reps);
        l[i] = hx_median(v[i].loaded, a->reps);
    }
    if (a->json) {
        json_t *o = hx_bench_json_head(a->model, a->num.n_threads, a->chunk, a->n_tok, a->reps), *arr = json_array();
        json_object_set_new(o, "competitors", json_integer(k));
        json_object_set_new(o, "cores", json_integer(mc->cores));
        json_object_set_new(o, "loadavg_at_start", json_real(load0));
        for (int i = 0; i < nv; i++) {
            json_t *e = json_object();
            json_object_set_new(e, "variant", json_string(v[i].name));
            json_object_set_new(e, "kernel", json_string(eng_kernel_name(v[i].kernel)));
            json_object_set_new(e, "quiet_tok_s", json_real(a->n_tok / q[i]));
            json_object_set_new(e, "loaded_tok_s", json_real(a->n_tok / l[i]));
            json_object_set_new(e, "slowdown", json_real(l[i] / q[i]));
            json_array_append_new(arr, e);
        }
        json_object_set_new(o, "runs", arr);
        if (hx_bench_print_json(o)) return eng_errf(err, errlen, "bench: out of memory"), ENG_ERR_NOMEM;
        return ENG_OK;
    }
    printf("model %s: %d tokens, C = %d, %d threads, %d rounds; %d busy competitors pinned one per core "
           "(%d cores); load average at start %.2f\n", a->model, a->n_tok, a->chunk, a->num.n_threads, a->reps, k,
           mc->cores, load0);
    printf("%-20s %12s %12s %15s\n", "variant", "quiet tok/s", "loaded tok/s", "loaded/quiet");
    for (int i = 0; i < nv; i++)
        printf("%-20s %12.1f %12.1f %15.2f\n", v[i].name, a->n_tok / q[i], a->n_tok / l[i], l[i] / q[i]);
    return ENG_OK;
}

int hx_bench_contention(int argc, char **argv, char *err, size_t errlen) {
    if (hx_wants_help(argc, argv)) { hx_usage(stdout, k_usage, k_options); return ENG_OK; }
    load_args a = {.num = eng_numerics_default(), .chunk = 64, .n_tok = 512, .reps = 3};
    int rc = hx_bench_args(k_options, &a, argc, argv, "bench --contention", err, errlen);
    if (rc) return rc;
    hx_machine mc;
    hx_machine_get(&mc);
    const int k = a.competitors > 0 ? a.competitors : (mc.cores > 0 ? mc.cores : 1);
    if (a.exec) return contention_exec(&a, k, &mc, err, errlen);
    if (!a.model)
        return eng_errf(err, errlen, "bench --contention: -m MODEL.gguf is required (see --help)"), ENG_ERR_ARG;
    variant v[4] = {
        {.name = "ref", .kernel = ENG_KERNEL_REF},
        {.name = "blas", .kernel = ENG_KERNEL_BLAS},
        {.name = "ref never spinning", .kernel = ENG_KERNEL_REF, .spin = "0"},
        {.name = "ref spinning 200us", .kernel = ENG_KERNEL_REF, .spin = "200"},
    };
    const int nv = a.policies ? 4 : 2;
    int32_t *toks = NULL;
    pid_t *pids = NULL;
    if ((rc = load_variants(v, nv, &a, err, errlen))) goto out;
    const eng_model_info *in = eng_model_get_info(v[0].m);
    toks = malloc(sizeof(int32_t) * (size_t)a.n_tok);
    pids = malloc(sizeof(pid_t) * (size_t)k);
    if (!toks || !pids || hx_random_tokens((uint64_t)a.seed, toks, a.n_tok, in->n_vocab)) {
        rc = (eng_errf(err, errlen, "bench: out of memory"), ENG_ERR_NOMEM);
        goto out;
    }
    double load0[3] = {0, 0, 0};
    getloadavg(load0, 3);
    for (int r = 0; r < a.reps; r++) {
        hx_run run;
        for (int i = 0; i < nv; i++) {
            if ((rc = hx_measure_prefill(v[i].m, NULL, 0, toks, a.n_tok, a.chunk, 1, NULL, &run, err, errlen)))
                goto out;
            v[i].quiet[r] = run.seconds;
        }
        if ((rc = competitors(pids, k, err, errlen))) goto out;
        for (int i = 0; i < nv && !rc; i++)
            if (!(rc = hx_measure_prefill(v[i].m, NULL, 0, toks, a.n_tok, a.chunk, 1, NULL, &run, err, errlen)))
                v[i].loaded[r] = run.seconds;
        stop_competitors(pids, k);
        if (rc) goto out;
        if (eng_stderr_is_tty()) fprintf(stderr, "\rbench --contention: round %d/%d   ", r + 1, a.reps);
    }
    if (eng_stderr_is_tty()) fprintf(stderr, "\r%50s\r", "");
    if (!(rc = print_contention(&a, v, nv, k, &mc, load0[0], err, errlen)))
        rc = hx_bench_flush("bench --contention", err, errlen);
out:
    for (int i = 0; i < nv; i++) {
        eng_model_free(v[i].m);
        free(v[i].quiet);
        free(v[i].loaded);
    }
    free(toks);
    free(pids);
    return rc;
}
