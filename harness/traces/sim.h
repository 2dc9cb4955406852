/*
 * harness/traces/sim.h: `kvreplay simulate`: a production trace through a
 * cache policy in token-only mode, on a modeled cluster, in modeled time
 * (docs/traces.md).
 *
 * Requests are taken in arrival order, one at a time. Each is routed to one
 * of N instances (--route: round-robin; least-loaded, the instance free
 * first; cache-aware, the least estimated TTFT: queue wait plus
 * --route-weight x (restore + prefill of what that instance's cache lacks),
 * as Mooncake's Conductor and Dynamo's KV router weigh prefix overlap against
 * load), then accesses its cache: the instance's own (--pool local, each of
 * --capacity) or one shared by all (--pool global, N x --capacity). The
 * cache is looked up and updated at routing time, in arrival order: a
 * request's blocks count as cached for every later arrival, whatever the
 * queues; time moves TTFT, and (cache-aware routing) the choice of instance,
 * never the hit of a given access.
 *
 * Time: each instance serves prefills one at a time, first come first
 * served. A request arrives at timestamp / --speedup, waits for its
 * instance, restores its reused tokens (min(hit tokens, input - 1): the
 * last token is always computed) at the local tier's bandwidth, or the
 * pool's transfer bandwidth under --pool global, and prefills the rest at
 * the time model's rate; TTFT = wait + restore + prefill. Decoding
 * output_length tokens adds output_length x tpot to its end-to-end time and
 * does not hold the prefill queue (Mooncake's disaggregated decode).
 *
 * Figures per request (hx_sim_row, handed to a callback) and in total
 * (hx_sim_summary, with fixed-size log histograms: percentiles within 0.6%,
 * memory independent of the trace's length), and per window of --window
 * seconds of arrival time.
 */
#ifndef HX_SIM_H
#define HX_SIM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "policy.h"
#include "timemodel.h"
#include "trace.h"

typedef enum hx_route {
    HX_ROUTE_ROUND_ROBIN = 0,
    HX_ROUTE_LEAST_LOADED,
    HX_ROUTE_CACHE_AWARE,
} hx_route;

typedef enum hx_pool_kind {
    HX_POOL_LOCAL = 0,
    HX_POOL_GLOBAL,
} hx_pool_kind;

const char *hx_route_name(hx_route r);
int         hx_route_parse(const char *s, hx_route *out);        /* ENG_OK or ENG_ERR_ARG */
const char *hx_pool_name(hx_pool_kind p);
int         hx_pool_parse(const char *s, hx_pool_kind *out);

/* One request's figures. */
typedef struct hx_sim_row {
    const hx_trace_rec *rec;
    int32_t  instance;
    int32_t  hit_blocks;
    int64_t  hit_tokens;     /* min(hit_blocks * B, input_length) */
    int64_t  origin;         /* the request that computed the deepest block hit, -1 */
    int64_t  reused;         /* tokens restored: min(hit_tokens, input_length - 1) */
    double   arrival_ms, queue_ms, restore_ms, prefill_ms, ttft_ms, e2e_ms;
    int32_t  stored_blocks;
    int64_t  evicted_blocks, held_blocks;
} hx_sim_row;

/* One window of arrival time. */
typedef struct hx_sim_window {
    int64_t index;
    double  t_start_ms;
    int64_t requests, input_tokens, hit_tokens, blocks, hit_blocks, evicted_blocks, held_blocks;
    double  ttft_mean_ms, ttft_p50_ms, ttft_p99_ms, queue_mean_ms;
} hx_sim_window;

typedef struct hx_sim_opts {
    const char     *trace_path;
    hx_trace_opts   trace;
    const char     *policy;          /* block-hash, radix, slot-lcp, disk-anchor */
    const hx_policy_args *policy_args;  /* the policy's own options, or NULL */
    unsigned        quirks;
    const eng_model_info *model;     /* for quirks that need the model's shape, or NULL */
    int64_t         capacity_tokens; /* per instance, 0: unbounded */
    int64_t         block_size;      /* the policy's block in tokens, 0: the trace's */
    hx_evict_kind   evict;
    int32_t         instances;       /* >= 1 */
    hx_route        route;
    double          route_weight;    /* cache-aware: weight of the prefill estimate (default 1) */
    hx_pool_kind    pool;
    double          speedup;         /* > 0 */
    double          window_s;        /* > 0 */
    hx_time_model   tm;
    void          (*on_request)(void *ud, const hx_sim_row *row);  /* or NULL; may set *abort_rc */
    void          (*on_window)(void *ud, const hx_sim_window *w);   /* or NULL */
    void           *ud;
    int            *abort_rc;        /* when set nonzero by a callback, the run stops with it */
} hx_sim_opts;

void hx_sim_opts_default(hx_sim_opts *o);

typedef struct hx_sim_summary {
    hx_trace_format format;
    int32_t  block_tokens;
    int64_t  requests, input_tokens, hit_tokens, blocks, hit_blocks;
    double   hit_rate_tokens, hit_rate_blocks;
    int64_t  evictions;              /* blocks evicted */
    int64_t  stored_blocks;
    int64_t  held_blocks_end, held_blocks_max;   /* over all caches */
    double   held_bytes_end, held_bytes_max;     /* x block tokens x the time model's bytes per token */
    double   ttft_mean_ms, ttft_p50_ms, ttft_p90_ms, ttft_p99_ms;
    double   queue_mean_ms, queue_p50_ms, queue_p99_ms;
    double   prefill_mean_ms, restore_mean_ms, e2e_mean_ms;
    double   span_ms;                /* last arrival (after --speedup) */
    int64_t  windows;
    double   seconds;                /* wall time of the run */
    double   cpu_seconds;            /* the process's CPU time over the run (what a loaded machine does not inflate) */
} hx_sim_summary;

/* Runs o. ENG_OK; a trace error (ENG_ERR_FORMAT with "FILE:LINE: FIELD:
 * what", ENG_ERR_IO); ENG_ERR_ARG for a bad setting; ENG_ERR_NOMEM; or what
 * a callback put in *abort_rc. */
int hx_sim_run(const hx_sim_opts *o, hx_sim_summary *out, char *err, size_t errlen);

#endif /* HX_SIM_H */
