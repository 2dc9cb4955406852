/*
 * harness/probe/probe_int.h: what probe's files share, for them alone
 * (probe.h tells the story): the line of an --api, one generation exchange,
 * the server's identity, and the run's state every request reads and
 * updates.
 *
 * Who calls whom, top to bottom: probe.c (the options, the run) ->
 * request.c (one request, a function per step of probe.h) -> exchange.c
 * (what is said to the server and read back) -> reuse.c, bits.c, api/,
 * base/http. Nothing calls back up.
 *
 * Ownership: a probe_ctx owns its identity, held sequences, previous request
 * and local rendering (freed by the run); a probe_gen owns its result, texts
 * and ids (probe_gen_free).
 */
#ifndef HX_PROBE_INT_H
#define HX_PROBE_INT_H

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include <jansson.h>

#include "api.h"
#include "http.h"
#include "normalize.h"
#include "prepare.h"
#include "reuse.h"
#include "session.h"
#include "store.h"
#include "util.h"

/* One --api: a line of k_apis (probe.c). */
typedef struct probe_api {
    const char *name;         /* --api */
    const char *dialect;      /* harness/api/ dialect */
    const char *path_tokens;  /* route taking token ids (NULL: none) */
    const char *path_chat;    /* route taking messages */
    const char *colds;        /* its cold methods, the first one the default */
    hx_engine   engine;       /* implied engine (UNKNOWN: from the identity) */
    const char *help;
} probe_api;

/* The most runs of each kind (cold, warm) per request: --repeat's bound. */
#define PROBE_MAX_RUNS 64

/* How prompts are sent: token ids, or the messages. */
enum { PROBE_ROUTE_TOKENS = 0, PROBE_ROUTE_CHAT = 1 };

/* One generation exchange (a warm or a cold run). */
typedef struct probe_gen {
    hx_api_result r;
    const char   *fail;          /* NULL: it came back whole and checked; else the error kind */
    char          msg[768];
    long          status;
    double        t_first;       /* first token-bearing event, ms from the request (-1: none) */
    double        ttft_ms;       /* t_first - the connection's setup */
    char         *first_json;    /* the first generated position's probabilities, as the server wrote them */
    size_t        first_json_n;
    eng_buf       texts;         /* per token-bearing event: its text, NUL-separated */
    int32_t       n_texts;
    int32_t      *ids;           /* (n_gen) the generated ids, -1 where unknown */
    int32_t       n_gen;
} probe_gen;

/* What the server says it is. */
typedef struct probe_ident {
    json_t   *info;          /* {"props": ..., "models": ..., ...} */
    hx_engine engine;
    char     *models[8];     /* the model names the server lists */
    int       n_models;
    bool      llama_like;    /* /tokenize, /apply-template, /slots (llama-server, kvreplay serve) */
    int32_t   grid;          /* from the identity (0: unknown) */
    int       cap_prompt;    /* -1: unknown */
    bool      absent_is_zero;/* SGLang with --enable-cache-report leaves cached_tokens out when 0 */
    int32_t   n_vocab;       /* from /v1/models meta (0: unknown) */
} probe_ident;

/* The run's state: set up by probe.c, read by every request, the cache's
 * contents and the previous request updated by each. */
typedef struct probe_ctx {
    /* what a request needs of the options (hx_probe_opts), resolved by the run */
    const hx_session_params *sp;     /* decode_n, repeat, normalize, quiet */
    const char           *transcript; /* the rows name it */
    int32_t               n_probs;   /* candidates asked for per position (--n-probs all: the vocabulary) */
    int32_t               id_slot;   /* llama-server slot to pin (-1: none) */
    const probe_api      *api;
    const hx_api_dialect *dialect;
    const hx_api_route   *rt;        /* the generation route used */
    int                   route;     /* PROBE_ROUTE_TOKENS | PROBE_ROUTE_CHAT */
    hx_http              *http;
    hx_http_opts          http_opts; /* its options (a filler's connection takes them too) */
    int32_t               concurrency; /* --concurrency K: each request also sent while K - 1 fillers run */
    int32_t               load_repeat; /* --load-repeat N: sent N times under load, 0..K-1 fillers each (seeded) */
    uint64_t              load_seed;
    probe_ident           id;
    hx_reuse_rule         rule;
    const char           *cold;      /* the cold method */
    char                  cold_first[32];  /* the API's first cold method, when cold is its default */
    const char           *model_send;
    hx_normalize          nz;        /* o->sp.normalize, parsed */
    /* local rendering (-m) */
    eng_tokenizer        *tok;
    char                 *tmpl_meta;
    hx_prepare_ctx       *pc, *pc_norm;
    /* what the server's cache holds (the warm namespace) */
    hx_held               held;
    bool                  held_known;
    char                  salt_warm[96];
    char                  no_probs[200];  /* why the server gets no request for probabilities ("": it does) */
    int64_t               salt_seq;
    /* the previous request as sent (rewarm for --repeat) */
    hx_api_req            prev;
    bool                  has_prev;
    int32_t              *prev_ids;   /* its server-side prompt ids (for held), n_prev */
    int32_t               n_prev;
    /* results */
    hx_store             *store;
    int64_t               run_id;
    int32_t               n_vocab;    /* the server's vocabulary (0: unknown) */
} probe_ctx;

/* What came of one request, for the run's summary. */
enum { PROBE_REUSE_UNKNOWN = 0, PROBE_REUSE_AS_EXPECTED, PROBE_REUSE_LESS, PROBE_REUSE_MORE };
typedef struct probe_outcome {
    bool written;    /* its row was written */
    bool failed;     /* the server failed it (the row says how) */
    bool compared;   /* both runs came back: bits compared */
    bool identical;  /* compared, and warm bit-identical to cold */
    int  reuse;      /* PROBE_REUSE_*: against the expected (compared requests; UNKNOWN: not judged) */
    bool stop;       /* the server cannot be reached any more: the run stops */
    bool batch_checked;   /* --concurrency: sent alone and under load, both came back */
    bool batch_identical; /* and bit-identical */
} probe_outcome;

/* "kvreplay probe: ..." on stderr, unless --quiet. */
static inline void probe_say(const probe_ctx *x, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static inline void probe_say(const probe_ctx *x, const char *fmt, ...) {
    if (x->sp->quiet) return;
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "kvreplay probe: ");
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
}

// ----------------------------------------------------------------------------
// request.c: one request of the transcript

/* Probes req (the idx-th request): its row written, *out what came of it
 * (also when an error returns). ENG_OK (also when the server failed the
 * request: its row says so); ENG_ERR_NOMEM; ENG_ERR_ARG or the store's
 * status when the prompt cannot be prepared or the row written (said on
 * stderr). */
int probe_request(probe_ctx *x, int32_t idx, hx_request *req, probe_outcome *out);

// ----------------------------------------------------------------------------
// exchange.c: what is said to the server, and read back

/* The server's identity into x->id: whatever of /props, /v1/models,
 * /version, /server_info, /get_server_info answers. */
void probe_identify(probe_ctx *x);
void probe_ident_free(probe_ident *id);

/* POST /tokenize {content, add_special, parse_special} -> *ids (malloc'd,
 * *n of them). ENG_OK; ENG_ERR_IO or ENG_ERR_FORMAT with msg; ENG_ERR_NOMEM. */
int probe_tokenize(probe_ctx *x, const char *text, bool add_special, int32_t **ids, int32_t *n, char *msg,
                   size_t cap);
/* The server's own rendering of req's messages: /apply-template of the chat
 * body its generation route renders, then /tokenize of that text (with BOS
 * and special tokens, as the generation tokenizes it). As probe_tokenize. */
int probe_render_ids(probe_ctx *x, const hx_request *req, int32_t **ids, int32_t *n, char *msg, size_t cap);
/* POST a cache control: erase (the slot), reset, flush. ENG_OK when it
 * answered 200, else ENG_ERR_IO with msg. */
int probe_cache_control(probe_ctx *x, const char *what, char *msg, size_t cap);

/* Sends q streamed on x->rt; fills g. ENG_OK (g->fail says whether the
 * server did its part) or ENG_ERR_NOMEM. */
int  probe_generate(probe_ctx *x, hx_api_req *q, probe_gen *g);
void probe_gen_free(probe_gen *g);
/* Marks g failed: kind ("http", "cut", "field", "model", "render", ...) and a message. */
void probe_gen_fail(probe_gen *g, const char *kind, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* The prompt tokens the server counted (-1: none reported). */
int64_t probe_gen_n_prompt(const probe_gen *g);
/* The reuse the server reported (-1: unknown). */
int64_t probe_gen_reused(const probe_ctx *x, const probe_gen *g);
/* The text of generated position k (per event), or the token's own. */
const char *probe_gen_text(const probe_gen *g, int32_t k, size_t *len);

/* Sends q (set for a cold run) while k filler generations run on the same
 * server, each on its own connection, started first and streaming (their
 * prompt is in) when q goes; closed when q is done; their prompts seeded by
 * seed. *n_overlap: fillers still generating when q was done. As
 * probe_generate. */
int  probe_generate_loaded(probe_ctx *x, hx_api_req *q, int32_t k, uint64_t seed, probe_gen *g, int32_t *n_overlap);

/* A cache_salt no earlier run used, into out. */
void probe_fresh_salt(probe_ctx *x, char *out, size_t cap, const char *what);
/* The generation request of a transcript request into q (initialized here):
 * the prompt (ids, n_ids of them, on the token route; else the messages),
 * greedy, streamed, decode_n tokens, K probabilities. ENG_OK or ENG_ERR_NOMEM. */
int probe_build_req(probe_ctx *x, const hx_request *req, const int32_t *ids, int32_t n_ids, hx_api_req *q);
/* Sets q for a warm run (through the warm namespace). */
int probe_set_warm(probe_ctx *x, hx_api_req *q);
/* Forces the next run cold. ENG_OK, or ENG_ERR_IO with msg (the cache
 * control failed), or ENG_ERR_NOMEM. */
int probe_set_cold(probe_ctx *x, hx_api_req *q, char *msg, size_t cap);

#endif /* HX_PROBE_INT_H */
