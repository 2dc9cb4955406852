/*
 * harness/serve/bench_serve.c: `kvreplay bench --serve`: what answering
 * over HTTP costs on top of the engine, as serve's time to first token over
 * the in-process time to first token of the same request, same model, same
 * policy, same engine options, measured side by side in one run.
 *
 *   HTTP:       `kvreplay serve` in a child process on a loopback port; one
 *               libcurl connection kept alive; the request streamed (llama-
 *               server's POST /completion, the prompt as token ids, n_predict
 *               1); TTFT = from the call until the first token-bearing SSE
 *               event is parsed (the API layer's reader).
 *   in-process: the same body parsed by the same route, prepared and run as
 *               one session turn (session/session.h) in this process; TTFT =
 *               from parsing the body until the first generated token.
 * Two requests: "cached", a prompt of --cached-tokens tokens sent before
 * (so all but its last token come from the cache: a fully cached 1-token
 * request), and "cold", --tokens tokens with cache_prompt false (no reuse,
 * a full prefill). Each is timed --reps times after one untimed warm-up,
 * HTTP and in-process alternating (which goes first alternates too, and
 * each waits 250 ms for the other process's spinning threads to sleep);
 * medians and their ratio are reported,
 * with the machine's load average before and after (the figures of a
 * shared machine are ratios, never absolute).
 */

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <signal.h>
#include <spawn.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "api.h"
#include "child.h"
#include "http.h"
#include "bench_util.h"
#include "errors.h"
#include "model.h"
#include "options.h"
#include "serve.h"
#include "session.h"
#include "stats.h"
#include "status.h"
#include "util.h"
#include "sysinfo.h"

static const char k_usage[] =
    "usage: kvreplay bench --serve -m MODEL.gguf [OPTIONS]\n"
    "\n"
    "serve's time to first token over the in-process one for the same request: a fully cached\n"
    "1-token request and a cold one of --tokens tokens, medians of --reps, side by side.\n"
    "(With --clients K: throughput and TTFT under K concurrent clients; bench --serve --clients 1 --help.)\n"
    "\n";

typedef struct serve_args {
    const char  *model;
    eng_numerics num;
    eng_align    align;
    int32_t      chunk, reps, n_cold, n_cached;
    int64_t      seed;
    bool         json, self;
} serve_args;

#define OPT(field) offsetof(serve_args, field)
static const hx_option k_options[] = {
    {"--serve", NULL, NULL, NULL, HX_OPT_FLAG, OPT(self), 0, 0, NULL},
    {"--model", "-m", "FILE", "GGUF model (required)", HX_OPT_STRING, OPT(model), 0, 0, NULL},
    HX_OPTS_ENGINE(serve_args),
    {"--align", NULL, "chunk|none", "replay's --align (default chunk: the cached request recomputes its last\n"
     "chunk; none: its last token only)", HX_OPT_CUSTOM, OPT(align), 0, 0, hx_parse_align},
    {"--tokens", NULL, "N", "the cold request's prompt tokens (default 2048)", HX_OPT_INT, OPT(n_cold), 2, 1 << 20,
     NULL},
    {"--cached-tokens", NULL, "N", "the cached request's prompt tokens (default 512)", HX_OPT_INT, OPT(n_cached), 2,
     1 << 20, NULL},
    {"--reps", NULL, "R", "timed requests per case, medians reported (default 7)", HX_OPT_INT, OPT(reps), 1, 1000,
     NULL},
    {"--seed", NULL, "S", "prompt token seed (default 0)", HX_OPT_INT64, OPT(seed), 0, 9.2e18, NULL},
    {"--json", NULL, NULL, "one JSON object on stdout", HX_OPT_FLAG, OPT(json), 0, 0, NULL},
    {0},
};

// ----------------------------------------------------------------------------
// One request over HTTP, streamed

typedef struct http_call {
    hx_api_reader rd;
    hx_api_result r;
    hx_api_error  e;
    double        t_first;  /* ms from the start of the exchange, 0 until a token arrives */
    bool          bad;
} http_call;

static int on_bytes(void *ud, const char *p, size_t n, double t_ms) {
    http_call *h = ud;
    int k = hx_api_reader_feed(&h->rd, p, n, &h->r, &h->e);
    if (k < 0) h->bad = true;
    else if (k > 0 && h->t_first == 0) h->t_first = t_ms;
    return 0;
}

/* ms to the first token; n_reused from the stream's timings (cache_n). */
static int http_ttft(hx_http *http, const hx_api_route *rt, const char *body, double *ms, int64_t *n_reused,
                     char *err, size_t errlen) {
    http_call h = {0};
    hx_api_reader_init(&h.rd, rt);
    hx_api_result_init(&h.r);
    hx_http_resp resp;
    int rc = hx_http_do(http, "POST", rt->path, body, strlen(body), on_bytes, &h, &resp);
    if (rc == ENG_ERR_NOMEM) eng_errf(err, errlen, "out of memory");
    else if (rc) eng_errf(err, errlen, "HTTP: %s", resp.message);
    else if (resp.status != 200) rc = (eng_errf(err, errlen, "HTTP status %ld", resp.status), ENG_ERR_IO);
    else if (h.bad || hx_api_reader_finish(&h.rd, &h.r, &h.e) != ENG_OK)
        rc = (eng_errf(err, errlen, "the stream: %s", h.e.message), ENG_ERR_FORMAT);
    else if (h.t_first == 0) rc = (eng_errf(err, errlen, "the stream carried no token"), ENG_ERR_FORMAT);
    *ms = h.t_first;
    *n_reused = h.r.timings.cache_n;
    hx_http_resp_free(&resp);
    hx_api_result_free(&h.r);
    hx_api_reader_free(&h.rd);
    return rc;
}

// ----------------------------------------------------------------------------
// The same request in this process

typedef struct local_gen { double t_first; } local_gen;

static int on_first(void *ud, int32_t k, int32_t id, const float *logits) {
    (void)id, (void)logits;
    local_gen *g = ud;
    if (k == 0) g->t_first = eng_now_s();
    return HX_TURN_STOP;
}

static int local_ttft(hx_session *s, int32_t idx, const hx_api_route *rt, const char *body, double *ms,
                      double *engine_ms, int64_t *n_reused, char *err, size_t errlen) {
    hx_api_req q;
    hx_api_error e;
    hx_prepared p = {0};
    local_gen g = {0};
    double t0 = eng_now_s();
    int rc = rt->parse(rt, rt->path, NULL, body, strlen(body), &q, &e);
    if (rc) { eng_errf(err, errlen, "the body: %s", e.message); hx_api_req_free(&q); return rc; }
    if ((rc = hx_prepare(hx_session_prepare(s), &q.req, &p, err, errlen))) { hx_api_req_free(&q); return rc; }
    hx_turn_gen gen = {.max_tokens = q.params.max_tokens > 0 ? q.params.max_tokens : 1, .on_token = on_first,
                       .ud = &g};
    hx_turn t = {.idx = idx, .req = &q.req, .p = &p,
                 .hint = {.id_slot = q.params.id_slot, .no_reuse = !q.params.cache_prompt}, .gen = &gen};
    hx_turn_result r;
    rc = hx_session_turn(s, &t, &r, err, errlen);
    if (!rc && g.t_first == 0) rc = (eng_errf(err, errlen, "the turn generated no token"), ENG_ERR_FORMAT);
    *ms = (g.t_first - t0) * 1e3;
    *engine_ms = r.ttft_ms;
    *n_reused = r.n_reused;
    hx_prepared_free(&p);
    hx_api_req_free(&q);
    return rc;
}

/* A pause before each timed request: the other process's BLAS and pool threads spin for a
 * while after their last work, and would take the cores from the one being timed. */
static void settle(void) { usleep(250 * 1000); }

// ----------------------------------------------------------------------------

typedef struct bench_case {
    const char *name;
    char       *body;
    int32_t     n_prompt;
    double     *http, *local, *engine;   /* (reps) ms */
    int64_t     reused_http, reused_local;
    double      m_http, m_local, m_engine;
} bench_case;

/* {"prompt": [ids], "n_predict": 1, "stream": true, "cache_prompt": ...} through the route's client side */
static char *make_body(const hx_api_route *rt, uint64_t seed, int32_t n, int32_t n_vocab, bool cache_prompt) {
    hx_api_req q;
    hx_api_req_init(&q);
    q.route = rt;
    if (!(q.req.tokens = malloc(sizeof *q.req.tokens * (size_t)n))) return NULL;
    hx_random_tokens(seed, q.req.tokens, n, n_vocab);
    q.req.n_tokens = n;
    q.params.max_tokens = 1;
    q.params.stream = true;
    q.params.cache_prompt = cache_prompt;
    json_t *o = rt->request(&q);
    char *s = o ? json_dumps(o, JSON_COMPACT) : NULL;
    json_decref(o);
    hx_api_req_free(&q);
    return s;
}

/* The server: `kvreplay serve` in a child process, on the same model and engine options, its
 * log and rows in a scratch directory (removed unless it failed). */
static int start_child(hx_serve_child *c, char *dir, bool *made, const serve_args *a, int32_t n_ctx, char *err,
                       size_t errlen) {
    if (!(*made = mkdtemp(dir) != NULL)) return eng_errf(err, errlen, "mkdtemp: %s", strerror(errno)), ENG_ERR_IO;
    char log[128], db[128], ctx[16], threads[16], chunk[16];
    snprintf(log, sizeof log, "%s/serve.log", dir);
    snprintf(db, sizeof db, "%s/serve.sqlite", dir);
    snprintf(ctx, sizeof ctx, "%d", n_ctx);
    snprintf(threads, sizeof threads, "%d", a->num.n_threads);
    snprintf(chunk, sizeof chunk, "%d", a->chunk);
    const char *args[] = {"-m", a->model, "--db", db, "-c", ctx, "--threads", threads, "--chunk", chunk,
                          "--kernel", eng_kernel_name(a->num.kernel), "--precision", eng_precision_name(a->num.precision),
                          "--align", eng_align_name(a->align), NULL};
    return hx_serve_child_start(NULL, args, log, 600, c, err, errlen);  /* loading and calibrating, loaded machine */
}

static void stop_child(hx_serve_child *c, const char *dir, bool keep) {
    if (hx_serve_child_stop(c, 60) > 0) keep = true;
    if (keep) { fprintf(stderr, "bench --serve: serve's log and rows kept in %s\n", dir); return; }
    const char *names[] = {"serve.log", "serve.log.port", "serve.sqlite", "serve.sqlite-wal", "serve.sqlite-shm",
                           "serve.sqlite.lock"};
    for (size_t i = 0; i < sizeof names / sizeof *names; i++) {
        char p[160];
        snprintf(p, sizeof p, "%s/%s", dir, names[i]);
        unlink(p);
    }
    rmdir(dir);
}

static void cases_free(bench_case *cases, int n) {
    for (int c = 0; c < n; c++) free(cases[c].body), free(cases[c].http), free(cases[c].local), free(cases[c].engine);
}

int hx_serve_bench(int argc, char **argv, char *err, size_t errlen) {
    for (int i = 1; i < argc; i++)  /* under K concurrent clients: bench_clients.c */
        if (!strcmp(argv[i], "--clients") || !strncmp(argv[i], "--clients=", 10))
            return hx_serve_bench_clients(argc, argv, err, errlen);
    if (hx_wants_help(argc, argv)) { hx_usage(stdout, k_usage, k_options); return ENG_OK; }
    serve_args a = {.num = eng_numerics_default(), .align = ENG_ALIGN_CHUNK, .chunk = 64, .reps = 7, .n_cold = 2048, .n_cached = 512};
    for (int i = 1; i < argc; i++) {
        int r = hx_options_take(k_options, &a, argc, argv, &i, err, errlen);
        if (r < 0) return r;
        if (!r) return eng_errf(err, errlen, "bench --serve: unknown option '%s' (see --help)", argv[i]), ENG_ERR_ARG;
    }
    if (!a.model) return eng_errf(err, errlen, "bench --serve: -m MODEL.gguf is required"), ENG_ERR_ARG;
    char load0[64], load1[64];
    hx_sysinfo_load(load0, sizeof load0);

    /* this process's session: serve's defaults (slot-lcp, the model's template), the same engine options */
    hx_session_params sp;
    hx_session_params_default(&sp);
    sp.model_path = a.model;
    sp.num = a.num;
    sp.pp.chunk = a.chunk;
    sp.pp.align = a.align;
    sp.verify = false;
    sp.quiet = true;
    hx_session *s = NULL;
    int32_t n_ctx = (a.n_cold > a.n_cached ? a.n_cold : a.n_cached) + 64;
    int rc = hx_session_open(&sp, NULL, &s, err, errlen);
    if (!rc) rc = hx_session_start(s, n_ctx, NULL, false, 1, err, errlen);
    if (rc) { hx_session_close(s); return rc == ENG_ERR_NOMEM ? rc : ENG_ERR_ARG; }  /* the model named: usage */
    hx_session_set_price(s, 1.0, 1.0);  /* no rows are written: the modeled TTFT is not used */
    const eng_model_info *mi = eng_model_get_info(hx_session_model(s));

    const hx_api_route *rt = hx_api_route_find("POST", "/completion", NULL);
    bench_case cases[2] = {
        {.name = "cached", .n_prompt = a.n_cached,
         .body = make_body(rt, (uint64_t)a.seed, a.n_cached, mi->n_vocab, true)},
        {.name = "cold", .n_prompt = a.n_cold,
         .body = make_body(rt, (uint64_t)a.seed + 1, a.n_cold, mi->n_vocab, false)},
    };
    for (int c = 0; c < 2; c++) {
        cases[c].http = calloc((size_t)a.reps, sizeof(double));
        cases[c].local = calloc((size_t)a.reps, sizeof(double));
        cases[c].engine = calloc((size_t)a.reps, sizeof(double));
        if (!cases[c].body || !cases[c].http || !cases[c].local || !cases[c].engine) rc = ENG_ERR_NOMEM;
    }
    if (rc) {
        cases_free(cases, 2);
        hx_session_close(s);
        return eng_errf(err, errlen, "bench --serve: out of memory"), rc;
    }

    hx_serve_child ch = {0};
    char dir[64] = "/tmp/kvreplay-bench-serve-XXXXXX";
    hx_http *http = NULL;
    bool made = false;
    if ((rc = start_child(&ch, dir, &made, &a, n_ctx, err, errlen)) == ENG_OK) {
        char url[64];
        snprintf(url, sizeof url, "http://127.0.0.1:%d", ch.port);
        hx_http_opts ho;
        hx_http_opts_default(&ho);
        if (!(http = hx_http_new(url, &ho))) rc = (eng_errf(err, errlen, "bench --serve: cannot start libcurl"), ENG_ERR_NOMEM);
    }

    /* each case: one untimed warm-up (it also caches the cached case's prompt), then HTTP and in-process
     * alternating; the cached case first, as the cold one's prompt replaces what the slot holds */
    int32_t idx = 0;
    for (int c = 0; c < 2 && !rc; c++) {
        bench_case *bc = &cases[c];
        double ms, ems;
        int64_t nr;
        if ((rc = http_ttft(http, rt, bc->body, &ms, &nr, err, errlen)) ||
            (rc = local_ttft(s, idx++, rt, bc->body, &ms, &ems, &nr, err, errlen)))
            break;
        for (int i = 0; i < a.reps && !rc; i++) {  /* the order alternates, so neither always goes first */
            for (int k = 0; k < 2 && !rc; k++) {
                settle();
                if ((k == 0) == (i % 2 == 0))
                    rc = http_ttft(http, rt, bc->body, &bc->http[i], &bc->reused_http, err, errlen);
                else
                    rc = local_ttft(s, idx++, rt, bc->body, &bc->local[i], &bc->engine[i], &bc->reused_local, err,
                                    errlen);
            }
        }
        if (rc) break;
        bc->m_http = hx_median(bc->http, a.reps);
        bc->m_local = hx_median(bc->local, a.reps);
        bc->m_engine = hx_median(bc->engine, a.reps);
    }
    hx_http_free(http);
    if (made) stop_child(&ch, dir, rc != ENG_OK);
    hx_session_close(s);
    hx_sysinfo_load(load1, sizeof load1);
    if (rc) {
        cases_free(cases, 2);
        char e2[1100];
        snprintf(e2, sizeof e2, "bench --serve: %s", err);
        snprintf(err, errlen, "%s", e2);
        return rc == ENG_ERR_ARG || rc == ENG_ERR_FORMAT ? ENG_ERR_IO : rc;
    }

    if (a.json) {
        json_t *o = json_object(), *arr = json_array();
        json_object_set_new(o, "model", json_string(a.model));
        json_object_set_new(o, "threads", json_integer(a.num.n_threads));
        json_object_set_new(o, "kernel", json_string(eng_kernel_name(a.num.kernel)));
        json_object_set_new(o, "align", json_string(eng_align_name(a.align)));
        json_object_set_new(o, "reps", json_integer(a.reps));
        json_object_set_new(o, "load_before", json_string(load0));
        json_object_set_new(o, "load_after", json_string(load1));
        for (int c = 0; c < 2; c++) {
            bench_case *bc = &cases[c];
            json_t *x = json_object();
            json_object_set_new(x, "case", json_string(bc->name));
            json_object_set_new(x, "prompt_tokens", json_integer(bc->n_prompt));
            json_object_set_new(x, "reused_http", json_integer(bc->reused_http));
            json_object_set_new(x, "reused_in_process", json_integer(bc->reused_local));
            json_object_set_new(x, "ttft_http_ms", json_real(bc->m_http));
            json_object_set_new(x, "ttft_in_process_ms", json_real(bc->m_local));
            json_object_set_new(x, "engine_prefill_ms", json_real(bc->m_engine));
            json_object_set_new(x, "overhead_ms", json_real(bc->m_http - bc->m_local));
            json_object_set_new(x, "ratio", json_real(bc->m_http / bc->m_local));
            json_array_append_new(arr, x);
        }
        json_object_set_new(o, "cases", arr);
        rc = hx_bench_print_json(o);
    } else {
        printf("kvreplay serve vs in-process, TTFT medians of %d (model %s, %d threads, %s, align %s; load %s -> %s)\n",
               a.reps, a.model, a.num.n_threads, eng_kernel_name(a.num.kernel), eng_align_name(a.align), load0, load1);
        printf("%-7s %7s %7s %10s %14s %12s %10s %7s\n", "case", "prompt", "reused", "HTTP ms", "in-process ms",
               "prefill ms", "extra ms", "ratio");
        for (int c = 0; c < 2; c++) {
            bench_case *bc = &cases[c];
            printf("%-7s %7d %7lld %10.2f %14.2f %12.2f %10.2f %7.3f\n", bc->name, bc->n_prompt,
                   (long long)bc->reused_http, bc->m_http, bc->m_local, bc->m_engine, bc->m_http - bc->m_local,
                   bc->m_http / bc->m_local);
            if (bc->reused_http != bc->reused_local)
                printf("  note: reused %lld over HTTP, %lld in process\n", (long long)bc->reused_http,
                       (long long)bc->reused_local);
        }
    }
    cases_free(cases, 2);
    if (rc == ENG_OK && fflush(stdout) != 0) rc = (eng_errf(err, errlen, "bench --serve: stdout: write failed"), ENG_ERR_IO);
    return rc;
}
