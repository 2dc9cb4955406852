/*
 * harness/probe/probe.h: `kvreplay probe`, black-box cache correctness of a
 * live server (llama-server, vLLM, SGLang, kvreplay serve, anything that
 * speaks one of their APIs). docs/probe.md is the user's guide.
 *
 * For every request of a transcript, in replay order:
 *   1. the prompt, rendered exactly as replay renders it (session/prepare.h,
 *      with -m a local copy of the model or its vocabulary): token ids where
 *      the route takes them (llama-server's /completion, /v1/completions),
 *      else the messages (/v1/chat/completions, /v1/messages), and the
 *      server's own tokenization read back where it offers one (/tokenize
 *      of /apply-template's text, the prompt counts of the response): both
 *      recorded, and where they differ said;
 *   2. the warm run: the request through the server's cache as it stands
 *      after the previous requests (streamed: the time to the first event
 *      that carries a token);
 *   3. the cold run, forced the way the server allows (cache_prompt: false,
 *      a slot erased, /reset_prefix_cache, a fresh cache_salt, /flush_cache),
 *      --repeat N times; with N > 1 the warm run is repeated too, from the
 *      same cache state (the previous request sent again first);
 *   4. reuse: what the server reports (timings.cache_n,
 *      usage.prompt_tokens_details.cached_tokens, cache_read_input_tokens;
 *      "unknown", never 0, when it reports nothing) against what it should
 *      have reused: the longest common prefix with what the server holds
 *      (its earlier prompts and generated tokens), capped as that server
 *      caps it (reuse.h);
 *   5. bits: the top-K log-probabilities at the first generated position,
 *      warm against cold, as the exact JSON text the server sent and as
 *      float bits (memcmp); each later position of the greedy continuation
 *      (decode_n tokens) likewise, and the fork step where the two
 *      continuations first differ;
 *   5b. with --concurrency K: the cold run sent again while K-1 filler
 *      generations stream on the same server (batched with it, on a server
 *      that batches), its top-K log-probabilities against the cold run
 *      alone, bit for bit: the row's batch verdict (batch_* columns);
 *   6. one `requests` row (and one `steps` row per generated position) in
 *      one transaction, in a `probe` run recording the server's URL, its
 *      identity (/props, /v1/models, ...) and the flags given.
 * A server that misbehaves (refuses, times out, answers 4xx/5xx, malformed
 * JSON, a field missing, a stream cut mid-event, another model than the one
 * it says it serves) gives that request a row with the error (verified 0)
 * and a clear line on stderr; a refused connection ends the run there.
 *
 * The files: probe.c (the options and the run), request.c (the steps above,
 * one function each), exchange.c (what is said to the server: identity,
 * read-backs, cache controls, one streamed generation, requests as sent),
 * reuse.c (each engine's cache rule), bits.c (the comparison); probe_int.h
 * is what they share.
 */
#ifndef HX_PROBE_H
#define HX_PROBE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "session.h"

typedef struct hx_probe_opts {
    /* what a request needs, as replay's and serve's options have it; probe uses model_path (-m: the
     * server's model, or a GGUF with its vocabulary, for rendering and tokenizing locally; NULL: the
     * server's own rendering only), template_name, normalize (rules the server is expected to apply,
     * anthropic-cch: expected reuse is counted on the prompts after them; what is sent is never
     * rewritten), decode_n (tokens generated greedily per run, >= 1; probe's default 16), repeat (cold
     * and warm runs timed per request) and quiet; the rest is the server's business */
    hx_session_params sp;
    const char *server;          /* base URL, required ("http://127.0.0.1:8080") */
    const char *api;             /* an --api of probe's table (llama, openai, ...), required */
    const char *transcript_path; /* required */
    const char *db_path;         /* -o; NULL: a temporary database, removed afterwards */
    const char *route;           /* auto | tokens | chat: how prompts are sent (auto: token ids when the API
                                    and -m allow, else the messages) */
    const char *cold;            /* auto | cache-prompt | erase | reset | salt | flush */
    const char *engine;          /* auto | llama.cpp | vllm | sglang | kvreplay: whose cache rule is expected */
    const char *model_name;      /* "model" in every body; NULL: the first model the server lists */
    const char *api_key;
    int32_t     n_probs;         /* K candidates compared at each generated position; -1: the whole vocabulary */
    int32_t     id_slot;         /* llama-server slot to pin (-1: none) */
    int32_t     grid;            /* reuse floored to multiples of this (vLLM block, SGLang page, kvreplay
                                    chunk); 0: from the server's identity */
    int32_t     cap_prompt;      /* reuse capped at the cached entry's prompt length (kvreplay): 1, 0, or -1
                                    from the server's identity (not sp.cap_prompt, which is serve's own) */
    int32_t     reports_reuse;   /* 1: an absent cached-token count means 0 (vLLM --enable-prompt-tokens-details
                                    and SGLang --enable-cache-report leave it out at 0); 0: absent is unknown;
                                    -1 (default): from the server's identity (SGLang's enable_cache_report) */
    double      timeout_s;       /* one exchange */
    double      idle_s;          /* no byte for this long: a timeout */
    int32_t     limit;           /* at most this many requests (0: all) */
    int32_t     concurrency;     /* K > 1: each request's cold run sent again while K-1 fillers run (1: off) */
    int32_t     load_repeat;     /* N > 1: sent N times under load, each with a seeded number of fillers
                                    (0 to K-1) of seeded prompts (default 1) */
    int64_t     load_seed;       /* the seed of those (default 1) */
    const char *experiment, *variant;  /* set by `experiment` */
} hx_probe_opts;

void hx_probe_opts_default(hx_probe_opts *o);
/* Takes the probe option at argv[*i] (and its value): 1; 0 when it is not
 * one; ENG_ERR_ARG with err naming the flag for a bad value. */
int  hx_probe_opts_take(hx_probe_opts *o, int argc, char **argv, int *i, char *err, size_t errlen);
void hx_probe_opts_help(FILE *f);
/* ENG_OK, or ENG_ERR_ARG with err saying what is missing or does not fit
 * (--server, -t, an --api, --route, --engine or --cold not known or not
 * that API's, a --normalize rule). What only the server can tell (the
 * vocabulary --n-probs all needs) is checked by hx_probe_run. */
int  hx_probe_opts_check(const hx_probe_opts *o, char *err, size_t errlen);

typedef struct hx_probe_summary {
    int64_t run_id;
    int32_t n_requests;      /* rows written */
    int32_t n_compared;      /* both runs came back: bits compared */
    int32_t n_identical;     /* warm bit-identical to cold at every compared position, no fork */
    int32_t n_diverged;      /* compared and not identical */
    int32_t n_reuse_checked; /* expected reuse known exactly and the server reported its reuse */
    int32_t n_reuse_less;    /* reported < expected */
    int32_t n_reuse_more;    /* reported > expected */
    int32_t n_reuse_unknown; /* the server reported no reuse (or the expected could not be counted exactly) */
    int32_t n_failed;        /* rows of a request the server failed (error column set) */
    int32_t n_batch_checked; /* --concurrency: requests compared alone and under load */
    int32_t n_batch_differ;  /* of them, not bit-identical under load */
    bool    stopped;         /* the run stopped early (the server went away) */
} hx_probe_summary;

/* Runs the probe (the options checked first: hx_probe_opts_check). Returns
 * the exit code, never exits: 0 every request compared identical and reused
 * as expected; 1 a warm run differed from its cold run, reused less or more
 * than expected, or the server failed a request; 2 bad input or usage (also:
 * the server cannot be reached at all); 3 internal or I/O error (the
 * database). Errors are said on stderr. */
int hx_probe_run(const hx_probe_opts *o, hx_probe_summary *sum);

#endif /* HX_PROBE_H */
