/*
 * harness/traces/sim.c: the simulation loop, its cluster and its figures
 * (see sim.h).
 */
#include "sim.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "status.h"
#include "util.h"

const char *hx_route_name(hx_route r) {
    return r == HX_ROUTE_LEAST_LOADED ? "least-loaded" : r == HX_ROUTE_CACHE_AWARE ? "cache-aware" : "round-robin";
}

int hx_route_parse(const char *s, hx_route *out) {
    if (!s) return ENG_ERR_ARG;
    if (!strcmp(s, "round-robin")) *out = HX_ROUTE_ROUND_ROBIN;
    else if (!strcmp(s, "least-loaded")) *out = HX_ROUTE_LEAST_LOADED;
    else if (!strcmp(s, "cache-aware")) *out = HX_ROUTE_CACHE_AWARE;
    else return ENG_ERR_ARG;
    return ENG_OK;
}

const char *hx_pool_name(hx_pool_kind p) { return p == HX_POOL_GLOBAL ? "global" : "local"; }

int hx_pool_parse(const char *s, hx_pool_kind *out) {
    if (!s) return ENG_ERR_ARG;
    if (!strcmp(s, "local")) *out = HX_POOL_LOCAL;
    else if (!strcmp(s, "global")) *out = HX_POOL_GLOBAL;
    else return ENG_ERR_ARG;
    return ENG_OK;
}

void hx_sim_opts_default(hx_sim_opts *o) {
    memset(o, 0, sizeof *o);
    o->policy = "block-hash";
    o->evict = HX_EVICT_LRU;
    o->instances = 1;
    o->route = HX_ROUTE_ROUND_ROBIN;
    o->route_weight = 1.0;
    o->pool = HX_POOL_LOCAL;
    o->speedup = 1.0;
    o->window_s = 60.0;
    hx_time_profile_get("llama3-70b-a800x8", &o->tm, NULL, 0);
}

// ----------------------------------------------------------------------------
// Percentiles: a log histogram of 128 buckets per power of two from 2^-10 ms
// (values below land in bucket 0): each bucket is 0.54% wide.

#define H_PER_OCT 128
#define H_LO      (-10)
#define H_OCT     44
#define H_N       (H_PER_OCT * H_OCT + 1)

typedef struct hist {
    uint32_t c[H_N];
    int64_t  n;
} hist;

static void hist_add(hist *h, double v) {
    int32_t b = 0;
    if (v > 0) {
        double x = (log2(v) - H_LO) * H_PER_OCT;
        b = x < 0 ? 0 : x >= H_N - 1 ? H_N - 1 : 1 + (int32_t)x;
    }
    h->c[b]++;
    h->n++;
}

/* The q-quantile (0..1): the geometric middle of its bucket, 0 for bucket 0. */
static double hist_quantile(const hist *h, double q) {
    if (!h->n) return NAN;
    int64_t want = (int64_t)ceil(q * (double)h->n), seen = 0;
    if (want < 1) want = 1;
    for (int32_t b = 0; b < H_N; b++) {
        seen += h->c[b];
        if (seen >= want) return b == 0 ? 0.0 : exp2(H_LO + (b - 0.5) / H_PER_OCT);
    }
    return NAN;
}

// ----------------------------------------------------------------------------
// The run

typedef struct window_acc {
    hx_sim_window w;
    double        ttft_sum, queue_sum;
    hist          h;
} window_acc;

static void window_flush(const hx_sim_opts *o, window_acc *a, int64_t held) {
    if (!a->w.requests) return;
    a->w.ttft_mean_ms = a->ttft_sum / (double)a->w.requests;
    a->w.queue_mean_ms = a->queue_sum / (double)a->w.requests;
    a->w.ttft_p50_ms = hist_quantile(&a->h, 0.5);
    a->w.ttft_p99_ms = hist_quantile(&a->h, 0.99);
    a->w.held_blocks = held;
    if (o->on_window) o->on_window(o->ud, &a->w);
}

static double cpu_now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

int hx_sim_run(const hx_sim_opts *o, hx_sim_summary *out, char *err, size_t errlen) {
    memset(out, 0, sizeof *out);
    if (o->instances < 1 || o->instances > 4096 || !(o->speedup > 0) || !(o->window_s > 0) || !o->policy ||
        !(o->tm.gflops > 0) || o->capacity_tokens < 0) {
        eng_errf(err, errlen, "simulate: bad settings (instances %d, speedup %g, window %g s, capacity %lld)",
                 o->instances, o->speedup, o->window_s, (long long)o->capacity_tokens);
        return ENG_ERR_ARG;
    }
    double t0 = eng_now_s(), c0 = cpu_now_s();
    hx_trace *t = NULL;
    int rc = hx_trace_open(o->trace_path, &o->trace, &t, err, errlen);
    if (rc != ENG_OK) return rc;
    int32_t n_caches = o->pool == HX_POOL_GLOBAL ? 1 : o->instances;
    hx_sim_policy **caches = calloc((size_t)n_caches, sizeof *caches);
    double *free_at = calloc((size_t)o->instances, sizeof *free_at);
    int64_t *held = calloc((size_t)n_caches, sizeof *held);
    hist *h_ttft = calloc(1, sizeof *h_ttft), *h_queue = calloc(1, sizeof *h_queue);
    window_acc *win = calloc(1, sizeof *win);
    hx_trace_rec r;
    int64_t rr = 0, held_total = 0;
    double ttft_sum = 0, queue_sum = 0, prefill_sum = 0, restore_sum = 0, e2e_sum = 0;
    bool first = true;
    if (!caches || !free_at || !held || !h_ttft || !h_queue || !win) { rc = ENG_ERR_NOMEM; goto out; }
    win->w.index = -1;

    while ((rc = hx_trace_next(t, &r, err, errlen)) == 1) {
        if (first) {  /* the caches, once the trace's block size is known */
            first = false;
            hx_sim_config cfg = {.block_tokens = hx_trace_block_tokens(t), .block_size = o->block_size,
                                 .capacity_tokens = o->capacity_tokens * (o->pool == HX_POOL_GLOBAL ? o->instances : 1),
                                 .evict = o->evict, .quirks = o->quirks, .model = o->model};
            for (int32_t i = 0; i < n_caches; i++)
                if ((rc = hx_sim_policy_create(o->policy, &cfg, o->policy_args, &caches[i], err, errlen)) != ENG_OK)
                    goto out;
            out->format = hx_trace_format_of(t);
            out->block_tokens = cfg.block_tokens;
        }
        int32_t B = out->block_tokens;
        hx_sim_req q = {.words = r.words, .n_blocks = r.n_blocks, .n_tokens = r.input_length, .index = r.index};
        double arrival = r.t_ms / o->speedup;
        int64_t wi = (int64_t)floor(arrival / (o->window_s * 1e3));
        if (wi != win->w.index) {  /* a new window: the last one's figures, held as it ended */
            window_flush(o, win, held_total);
            memset(win, 0, sizeof *win);
            win->w.index = wi;
            win->w.t_start_ms = (double)wi * o->window_s * 1e3;
            out->windows++;
        }

        /* route */
        int32_t inst = 0;
        if (o->route == HX_ROUTE_ROUND_ROBIN) {
            inst = (int32_t)(rr++ % o->instances);
        } else {
            double best = INFINITY;
            for (int32_t i = 0; i < o->instances; i++) {
                double wait = free_at[i] > arrival ? free_at[i] - arrival : 0.0, est = wait;
                if (o->route == HX_ROUTE_CACHE_AWARE) {
                    hx_sim_policy *c = caches[o->pool == HX_POOL_GLOBAL ? 0 : i];
                    int64_t hit = (int64_t)c->sim->peek(c->state, &q) * B;
                    int64_t reuse = hit < r.input_length - 1 ? hit : r.input_length - 1;
                    est += o->route_weight * (hx_time_restore_ms(&o->tm, reuse, o->pool == HX_POOL_GLOBAL) +
                                              hx_time_prefill_ms(&o->tm, reuse, r.input_length - reuse));
                }
                if (est < best) { best = est; inst = i; }
            }
        }
        /* the cache */
        int32_t ci = o->pool == HX_POOL_GLOBAL ? 0 : inst;
        hx_sim_policy *c = caches[ci];
        hx_sim_access a;
        if ((rc = c->sim->access(c->state, &q, &a)) != ENG_OK) {
            eng_errf(err, errlen, "simulate: %s: request %lld: out of memory", o->policy, (long long)r.index);
            goto out;
        }
        held_total += a.held_blocks - held[ci];
        held[ci] = a.held_blocks;
        if (held_total > out->held_blocks_max) out->held_blocks_max = held_total;

        /* time */
        hx_sim_row row = {.rec = &r, .instance = inst, .hit_blocks = a.hit_blocks, .origin = a.origin,
                          .stored_blocks = a.stored_blocks, .evicted_blocks = a.evicted_blocks,
                          .held_blocks = held_total, .arrival_ms = arrival};
        row.hit_tokens = (int64_t)a.hit_blocks * B < r.input_length ? (int64_t)a.hit_blocks * B : r.input_length;
        row.reused = row.hit_tokens < r.input_length - 1 ? row.hit_tokens : r.input_length - 1;
        double start = free_at[inst] > arrival ? free_at[inst] : arrival;
        row.queue_ms = start - arrival;
        row.restore_ms = hx_time_restore_ms(&o->tm, row.reused, o->pool == HX_POOL_GLOBAL);
        row.prefill_ms = hx_time_prefill_ms(&o->tm, row.reused, r.input_length - row.reused);
        row.ttft_ms = row.queue_ms + row.restore_ms + row.prefill_ms;
        row.e2e_ms = row.ttft_ms + r.output_length * o->tm.tpot_ms;
        free_at[inst] = start + row.restore_ms + row.prefill_ms;

        /* figures */
        out->requests++;
        out->input_tokens += r.input_length;
        out->hit_tokens += row.hit_tokens;
        out->blocks += r.n_blocks;
        out->hit_blocks += a.hit_blocks;
        out->evictions += a.evicted_blocks;
        out->stored_blocks += a.stored_blocks;
        ttft_sum += row.ttft_ms;
        queue_sum += row.queue_ms;
        prefill_sum += row.prefill_ms;
        restore_sum += row.restore_ms;
        e2e_sum += row.e2e_ms;
        hist_add(h_ttft, row.ttft_ms);
        hist_add(h_queue, row.queue_ms);
        out->span_ms = arrival;
        win->w.requests++;
        win->w.input_tokens += r.input_length;
        win->w.hit_tokens += row.hit_tokens;
        win->w.blocks += r.n_blocks;
        win->w.hit_blocks += a.hit_blocks;
        win->w.evicted_blocks += a.evicted_blocks;
        win->ttft_sum += row.ttft_ms;
        win->queue_sum += row.queue_ms;
        hist_add(&win->h, row.ttft_ms);
        if (o->on_request) {
            o->on_request(o->ud, &row);
            if (o->abort_rc && *o->abort_rc) { rc = *o->abort_rc; goto out; }
        }
    }
    if (rc < 0) goto out;
    window_flush(o, win, held_total);
    rc = ENG_OK;
    out->held_blocks_end = held_total;
    double bpb = (double)out->block_tokens * o->tm.kv_bytes_token;
    out->held_bytes_end = (double)held_total * bpb;
    out->held_bytes_max = (double)out->held_blocks_max * bpb;
    if (out->requests) {
        double n = (double)out->requests;
        out->hit_rate_tokens = (double)out->hit_tokens / (double)out->input_tokens;
        out->hit_rate_blocks = (double)out->hit_blocks / (double)out->blocks;
        out->ttft_mean_ms = ttft_sum / n;
        out->queue_mean_ms = queue_sum / n;
        out->prefill_mean_ms = prefill_sum / n;
        out->restore_mean_ms = restore_sum / n;
        out->e2e_mean_ms = e2e_sum / n;
        out->ttft_p50_ms = hist_quantile(h_ttft, 0.5);
        out->ttft_p90_ms = hist_quantile(h_ttft, 0.9);
        out->ttft_p99_ms = hist_quantile(h_ttft, 0.99);
        out->queue_p50_ms = hist_quantile(h_queue, 0.5);
        out->queue_p99_ms = hist_quantile(h_queue, 0.99);
    }
out:
    out->seconds = eng_now_s() - t0;
    out->cpu_seconds = cpu_now_s() - c0;
    if (rc == ENG_ERR_NOMEM && (!err || !err[0])) eng_errf(err, errlen, "simulate: out of memory");
    for (int32_t i = 0; caches && i < n_caches; i++) hx_sim_policy_destroy(caches[i]);
    free(caches);
    free(free_at);
    free(held);
    free(h_ttft);
    free(h_queue);
    free(win);
    hx_trace_close(t);
    return rc;
}
