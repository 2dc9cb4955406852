/*
 * harness/serve/bench_clients.c: `kvreplay bench --serve --clients K`: a
 * server's throughput and time to first token under K concurrent clients.
 *
 * The server: `kvreplay serve --parallel N` (N defaults to K) started here
 * in a child process on the model and engine options given, or any server
 * of llama-server's native API at --url (a llama-server -np N on the same
 * GGUF file, for the comparison). The load: K client threads, each with its
 * own keep-alive connection, sending --requests requests one after another:
 * POST /completion, a prompt of --tokens seeded random token ids (client c,
 * request r: seed + 1000 c + r, so no prompt is another's prefix), greedy
 * (temperature 0), streamed, n_predict --gen. Per request: the TTFT (the
 * first token-bearing event; none when the model ends its turn at once)
 * and the tokens it generated (the usage the stream's end reports, at
 * least its token events; a stream whose last event does not parse but
 * whose tokens came is counted answered, and said). Reported: aggregate tokens/s (every generated token over the
 * wall time from the first request sent to the last answer read), requests
 * per second, TTFT p50 and p95, with the load average before and after (a
 * shared machine's figures are ratios, measured side by side).
 */
#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <pthread.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "api.h"
#include "bench_util.h"
#include "child.h"
#include "http.h"
#include "model.h"
#include "options.h"
#include "serve.h"
#include "stats.h"
#include "status.h"
#include "util.h"
#include "sysinfo.h"

static const char k_usage[] =
    "usage: kvreplay bench --serve --clients K (-m MODEL.gguf | --url URL) [OPTIONS]\n"
    "\n"
    "Throughput and TTFT under K concurrent clients: kvreplay serve --parallel N started here on\n"
    "MODEL, or the llama-server (or any server of its native API) at URL.\n"
    "\n";

typedef struct clients_args {
    const char  *model, *url;
    eng_numerics num;
    int32_t      chunk, clients, parallel, requests, n_prompt, n_gen, n_vocab, batch_size, partial;
    int64_t      seed;
    bool         json, self;
} clients_args;

#define OPT(field) offsetof(clients_args, field)
static const hx_option k_options[] = {
    {"--serve", NULL, NULL, NULL, HX_OPT_FLAG, OPT(self), 0, 0, NULL},
    {"--clients", NULL, "K", "concurrent clients (required)", HX_OPT_INT, OPT(clients), 1, 1024, NULL},
    {"--model", "-m", "FILE", "GGUF model: kvreplay serve runs it (required without --url; with --url, its\n"
     "vocabulary size bounds the prompts' ids)", HX_OPT_STRING, OPT(model), 0, 0, NULL},
    {"--url", NULL, "URL", "a running server of llama-server's API instead (e.g. llama-server -np 8)", HX_OPT_STRING,
     OPT(url), 0, 0, NULL},
    HX_OPTS_ENGINE(clients_args),
    {"--parallel", NULL, "N", "kvreplay serve's slots (default: K)", HX_OPT_INT, OPT(parallel), 1, 64, NULL},
    {"--batch-size", NULL, "N", "kvreplay serve's rows per step at most (default 0: no cap)", HX_OPT_INT,
     OPT(batch_size), 0, 1 << 20, NULL},
    {"--max-partial-prefills", NULL, "K", "kvreplay serve's prompts advanced per step (default 1; 0: all)", HX_OPT_INT,
     OPT(partial), 0, 64, NULL},
    {"--requests", NULL, "R", "requests per client (default 8)", HX_OPT_INT, OPT(requests), 1, 1 << 20, NULL},
    {"--tokens", NULL, "P", "prompt tokens per request (default 128)", HX_OPT_INT, OPT(n_prompt), 1, 1 << 20, NULL},
    {"--gen", NULL, "G", "tokens generated per request at most (default 64)", HX_OPT_INT, OPT(n_gen), 1, 1 << 20, NULL},
    {"--vocab", NULL, "V", "prompt ids drawn from [3, V) (default: the model's vocabulary)", HX_OPT_INT, OPT(n_vocab), 4,
     1 << 24, NULL},
    {"--seed", NULL, "S", "prompt token seed (default 0)", HX_OPT_INT64, OPT(seed), 0, 9.2e18, NULL},
    {"--json", NULL, NULL, "one JSON object on stdout", HX_OPT_FLAG, OPT(json), 0, 0, NULL},
    {0},
};

// ----------------------------------------------------------------------------
// A client

typedef struct client {
    const clients_args *a;
    const char         *url;
    const hx_api_route *rt;
    int32_t             id;
    double             *ttft;      /* (requests) ms; -1: no token */
    int64_t             n_tokens;  /* generated, every request */
    int32_t             n_ok, n_failed, n_malformed;
    char                err[256];
} client;

typedef struct stream_count {
    hx_api_reader rd;
    hx_api_result r;
    hx_api_error  e;
    double        t_first;
    int64_t       n_events;
    bool          bad;
} stream_count;

static int on_bytes(void *ud, const char *p, size_t n, double t_ms) {
    stream_count *s = ud;
    int k = hx_api_reader_feed(&s->rd, p, n, &s->r, &s->e);
    if (k < 0) s->bad = true;
    if (k > 0) {
        if (s->n_events == 0) s->t_first = t_ms;
        s->n_events += k;
    }
    return 0;
}

static char *request_body(const client *c, int32_t r, int32_t n_vocab) {
    const clients_args *a = c->a;
    hx_api_req q;
    hx_api_req_init(&q);
    q.route = c->rt;
    if (!(q.req.tokens = malloc(sizeof *q.req.tokens * (size_t)a->n_prompt))) return NULL;
    hx_random_tokens((uint64_t)a->seed + 1000u * (uint64_t)c->id + (uint64_t)r, q.req.tokens, a->n_prompt, n_vocab);
    for (int32_t i = 0; i < a->n_prompt; i++)  /* no control tokens (BOS, EOS, UNK) inside a prompt */
        if (q.req.tokens[i] < 3) q.req.tokens[i] += 3;
    q.req.n_tokens = a->n_prompt;
    q.params.max_tokens = a->n_gen;
    q.params.stream = true;
    q.params.sampling.temperature = 0;
    json_t *o = c->rt->request(&q);
    char *s = o ? json_dumps(o, JSON_COMPACT) : NULL;
    json_decref(o);
    hx_api_req_free(&q);
    return s;
}

static void *client_main(void *arg) {
    client *c = arg;
    const clients_args *a = c->a;
    hx_http_opts ho;
    hx_http_opts_default(&ho);
    hx_http *h = hx_http_new(c->url, &ho);
    if (!h) {
        snprintf(c->err, sizeof c->err, "cannot start libcurl");
        c->n_failed = a->requests;
        return NULL;
    }
    for (int32_t r = 0; r < a->requests; r++) {
        c->ttft[r] = -1;
        char *body = request_body(c, r, a->n_vocab);
        if (!body) { c->n_failed++; continue; }
        stream_count s = {0};
        hx_api_reader_init(&s.rd, c->rt);
        hx_api_result_init(&s.r);
        hx_http_resp resp;
        int rc = hx_http_do(h, "POST", c->rt->path, body, strlen(body), on_bytes, &s, &resp);
        bool whole = rc == ENG_OK && resp.status == 200 && !s.bad && hx_api_reader_finish(&s.rd, &s.r, &s.e) == ENG_OK;
        if (whole || (rc == ENG_OK && resp.status == 200 && s.n_events > 0)) {
            if (s.n_events > 0) c->ttft[r] = s.t_first - resp.pretransfer_ms;  /* none: EOS came first */
            c->n_tokens += whole && s.r.usage.completion_tokens > s.n_events ? s.r.usage.completion_tokens : s.n_events;
            c->n_ok++;
            c->n_malformed += !whole;  /* its tokens came, its last event would not parse (llama-server writes a
                                          byte vocabulary's invalid UTF-8 into its JSON) */
        } else {
            c->n_failed++;
            if (!c->err[0])
                snprintf(c->err, sizeof c->err, "%.200s", rc ? resp.message : resp.status != 200 ? "HTTP status not 200"
                                                                            : "the stream did not end as it should");
        }
        hx_http_resp_free(&resp);
        hx_api_result_free(&s.r);
        hx_api_reader_free(&s.rd);
        free(body);
    }
    hx_http_free(h);
    return NULL;
}

static int cmp_double(const void *x, const void *y) {
    double a = *(const double *)x, b = *(const double *)y;
    return (a > b) - (a < b);
}

/* The q-quantile of sorted v[0, n) (nearest rank). */
static double quantile(const double *v, int64_t n, double q) {
    if (n <= 0) return NAN;
    int64_t k = (int64_t)(q * (double)n + 0.999999) - 1;
    if (k < 0) k = 0;
    if (k >= n) k = n - 1;
    return v[k];
}

// ----------------------------------------------------------------------------

int hx_serve_bench_clients(int argc, char **argv, char *err, size_t errlen) {
    if (hx_wants_help(argc, argv)) { hx_usage(stdout, k_usage, k_options); return ENG_OK; }
    clients_args a = {.num = eng_numerics_default(), .chunk = 64, .requests = 8, .n_prompt = 128, .n_gen = 64, .partial = 1};
    for (int i = 1; i < argc; i++) {
        int r = hx_options_take(k_options, &a, argc, argv, &i, err, errlen);
        if (r < 0) return r;
        if (!r) return eng_errf(err, errlen, "bench --serve --clients: unknown option '%s' (see --help)", argv[i]), ENG_ERR_ARG;
    }
    if (a.clients < 1) return eng_errf(err, errlen, "bench --serve --clients: K >= 1 is required"), ENG_ERR_ARG;
    if (!a.model && !a.url) return eng_errf(err, errlen, "bench --serve --clients: -m MODEL.gguf or --url URL"), ENG_ERR_ARG;
    if (a.model && !a.n_vocab) {  /* the prompts' ids within the model's vocabulary */
        eng_model *m = NULL;
        if (eng_model_load(a.model, &a.num, &m, err, errlen) != ENG_OK) return ENG_ERR_ARG;
        a.n_vocab = eng_model_get_info(m)->n_vocab;
        eng_model_free(m);
    }
    if (!a.n_vocab) return eng_errf(err, errlen, "bench --serve --clients: --vocab V (or -m) bounds the prompt ids"), ENG_ERR_ARG;
    if (!a.parallel) a.parallel = a.clients;
    char load0[64], load1[64];
    hx_sysinfo_load(load0, sizeof load0);

    hx_serve_child ch = {0};
    char url[128], dir[64] = "/tmp/kvreplay-bench-clients-XXXXXX", log[128] = "";
    bool started = false;
    int rc = ENG_OK;
    if (a.url) {
        snprintf(url, sizeof url, "%s", a.url);
    } else {
        if (!mkdtemp(dir)) return eng_errf(err, errlen, "mkdtemp: %s", strerror(errno)), ENG_ERR_IO;
        char ctx[16], threads[16], chunk[16], par[16], bs[16], pp[16];
        snprintf(log, sizeof log, "%s/serve.log", dir);
        snprintf(ctx, sizeof ctx, "%d", a.n_prompt + a.n_gen + 64);
        snprintf(threads, sizeof threads, "%d", a.num.n_threads);
        snprintf(chunk, sizeof chunk, "%d", a.chunk);
        snprintf(par, sizeof par, "%d", a.parallel);
        snprintf(bs, sizeof bs, "%d", a.batch_size);
        snprintf(pp, sizeof pp, "%d", a.partial);
        const char *args[] = {"-m", a.model, "-c", ctx, "--threads", threads, "--chunk", chunk, "--parallel", par,
                              "--batch-size", bs, "--max-partial-prefills", pp, "--kernel", eng_kernel_name(a.num.kernel), "--precision",
                              eng_precision_name(a.num.precision), "-n", "1048576", "--queue", "1024", "--quiet", NULL};
        rc = hx_serve_child_start(NULL, args, log, 600, &ch, err, errlen);
        started = rc == ENG_OK;
        snprintf(url, sizeof url, "http://127.0.0.1:%d", ch.port);
    }
    const hx_api_route *rt = hx_api_route_find("POST", "/completion", NULL);
    client *cl = calloc((size_t)a.clients, sizeof *cl);
    pthread_t *th = calloc((size_t)a.clients, sizeof *th);
    double *all = calloc((size_t)a.clients * (size_t)a.requests, sizeof *all);
    if (!rc && (!cl || !th || !all)) rc = (eng_errf(err, errlen, "out of memory"), ENG_ERR_NOMEM);
    double t0 = eng_now_s(), wall = 0;
    int32_t n_started = 0;
    for (int32_t i = 0; !rc && i < a.clients; i++) {
        cl[i] = (client){.a = &a, .url = url, .rt = rt, .id = i, .ttft = all + (size_t)i * (size_t)a.requests};
        if (pthread_create(&th[i], NULL, client_main, &cl[i]) != 0) rc = (eng_errf(err, errlen, "pthread_create"), ENG_ERR_IO);
        else n_started++;
    }
    for (int32_t i = 0; i < n_started; i++) pthread_join(th[i], NULL);
    wall = eng_now_s() - t0;
    if (started && hx_serve_child_stop(&ch, 60) != 0 && !rc)
        rc = (eng_errf(err, errlen, "kvreplay serve did not stop cleanly (its log: %s)", log), ENG_ERR_IO);
    hx_sysinfo_load(load1, sizeof load1);
    int64_t n_tok = 0, n_ok = 0, n_failed = 0, n_t = 0, n_bad = 0;
    for (int32_t i = 0; i < n_started; i++) {
        n_tok += cl[i].n_tokens, n_ok += cl[i].n_ok, n_failed += cl[i].n_failed, n_bad += cl[i].n_malformed;
        if (cl[i].err[0] && !rc) rc = (eng_errf(err, errlen, "client %d: %s", i, cl[i].err), ENG_ERR_IO);
    }
    for (int64_t k = 0; all && k < (int64_t)a.clients * a.requests; k++)
        if (all[k] >= 0) all[n_t++] = all[k];
    if (n_t) qsort(all, (size_t)n_t, sizeof *all, cmp_double);
    double p50 = quantile(all, n_t, 0.5), p95 = quantile(all, n_t, 0.95);
    if (!rc) {
        const char *server = a.url ? a.url : "kvreplay serve";
        if (a.json) {
            json_t *o = json_pack("{s:s, s:s?, s:s?, s:i, s:i, s:i, s:i, s:i, s:i, s:i, s:s, s:i, s:I, s:I, s:I, s:I, "
                                  "s:f, s:f, s:f, s:f, s:f, s:s, s:s}",
                                  "server", server, "model", a.model, "kernel", a.url ? NULL : eng_kernel_name(a.num.kernel),
                                  "threads", a.num.n_threads, "clients", a.clients, "parallel", a.url ? 0 : a.parallel,
                                  "max_partial_prefills", a.url ? -1 : a.partial,
                                  "requests_per_client", a.requests, "prompt_tokens", a.n_prompt, "gen_tokens", a.n_gen,
                                  "align", "chunk", "chunk", a.chunk, "answered", (json_int_t)n_ok,
                                  "failed", (json_int_t)n_failed, "malformed_end", (json_int_t)n_bad,
                                  "tokens", (json_int_t)n_tok, "wall_s", wall,
                                  "tokens_per_s", n_tok / wall, "requests_per_s", n_ok / wall, "ttft_p50_ms", p50,
                                  "ttft_p95_ms", p95, "load_before", load0, "load_after", load1);
            rc = o ? hx_bench_print_json(o) : ENG_ERR_NOMEM;
        } else {
            printf("%s under %d clients x %d requests (prompt %d tokens, up to %d generated%s%s; load %s -> %s)\n",
                   server, a.clients, a.requests, a.n_prompt, a.n_gen, a.url ? "" : ", ",
                   a.url ? "" : eng_kernel_name(a.num.kernel), load0, load1);
            printf("  answered %lld (%lld with a last event that would not parse), failed %lld; %lld tokens in %.2f s: "
                   "%.1f tokens/s, %.2f requests/s; TTFT p50 %.1f ms, p95 %.1f ms\n", (long long)n_ok, (long long)n_bad,
                   (long long)n_failed, (long long)n_tok, wall, n_tok / wall, n_ok / wall, p50, p95);
        }
    }
    if (started) {  /* the scratch directory of the child's log */
        if (rc) fprintf(stderr, "bench --serve --clients: serve's log kept in %s\n", log);
        else {
            char p[160];
            snprintf(p, sizeof p, "%s/serve.log.port", dir);
            unlink(p);
            unlink(log);
            rmdir(dir);
        }
    }
    free(cl);
    free(th);
    free(all);
    return rc;
}
