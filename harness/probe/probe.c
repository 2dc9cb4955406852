/*
 * harness/probe/probe.c: `kvreplay probe` (see probe.h for the steps,
 * docs/probe.md for the guide). The server kinds it knows are one table
 * (k_apis below): the dialect and routes each --api speaks, its cold
 * methods; whose cache rule applies comes from the server's identity
 * (reuse.h).
 *
 * Nothing here exits: hx_probe_opts_check says what cannot work, and the
 * run says its errors on stderr and returns the exit code.
 *
 * Invariants:
 * - nothing sent is rewritten: --normalize only changes what is expected;
 * - equality is memcmp of float bits and of the JSON text, never a tolerance;
 * - every request gets exactly one row, in one transaction, also when the
 *   server failed it (error, error_message, http_status; verified 0);
 * - the expected reuse is counted only on token ids the server is known to
 *   have seen (sent, or read back and checked against the count the server
 *   reported); otherwise the row says so (reuse_basis NULL) and the request
 *   is not judged on reuse.
 */
#include "probe.h"

#include <jansson.h>
#include <limits.h>
#include <stdarg.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "api.h"
#include "bits.h"
#include "errors.h"
#include "http.h"
#include "json.h"
#include "normalize.h"
#include "options.h"
#include "policy.h"
#include "prepare.h"
#include "reuse.h"
#include "stats.h"
#include "status.h"
#include "store.h"
#include "str.h"
#include "transcript.h"
#include "util.h"

/* The most runs of each kind (cold, warm) per request: --repeat's bound. */
#define MAX_RUNS 64

// ----------------------------------------------------------------------------
// The APIs probe speaks: one line each (a new server kind is one line here;
// docs/where-does-my-change-go.md)

typedef struct probe_api {
    const char *name;         /* --api */
    const char *dialect;      /* harness/api/ dialect */
    const char *path_tokens;  /* route taking token ids (NULL: none) */
    const char *path_chat;    /* route taking messages */
    const char *colds;        /* its cold methods, the first one the default */
    hx_engine   engine;       /* implied engine (UNKNOWN: from the identity) */
    const char *help;
} probe_api;

static const probe_api k_apis[] = {
    {"llama", "llama", "/completion", NULL, "cache-prompt,erase", HX_ENGINE_UNKNOWN,
     "llama-server's /completion (token ids; kvreplay serve speaks it too)"},
    {"openai", "openai", "/v1/completions", "/v1/chat/completions", "cache-prompt,erase,salt,reset,flush",
     HX_ENGINE_UNKNOWN, "any OpenAI-compatible server"},
    {"vllm", "openai", "/v1/completions", "/v1/chat/completions", "salt,reset", HX_ENGINE_VLLM,
     "vLLM's OpenAI API (cache_salt, /reset_prefix_cache)"},
    {"sglang", "openai", "/v1/completions", "/v1/chat/completions", "salt,flush", HX_ENGINE_SGLANG,
     "SGLang's OpenAI API (cache_salt, /flush_cache)"},
    {"anthropic", "anthropic", NULL, "/v1/messages", "erase", HX_ENGINE_UNKNOWN,
     "Anthropic's /v1/messages (llama-server, kvreplay serve)"},
    {0},
};

static const probe_api *find_api(const char *name) {
    for (const probe_api *a = k_apis; name && a->name; a++)
        if (!strcmp(a->name, name)) return a;
    return NULL;
}

static bool has_cold(const probe_api *a, const char *m) {
    size_t k = strlen(m);
    for (const char *p = a->colds; *p;) {
        size_t n = strcspn(p, ",");
        if (n == k && !strncmp(p, m, k)) return true;
        p += n + (p[n] == ',');
    }
    return false;
}

/* The --api names into out: "llama" sep "openai" ... last "anthropic". */
static void api_names(char *out, size_t cap, const char *sep, const char *last) {
    size_t n = 0;
    out[0] = '\0';
    for (const probe_api *a = k_apis; a->name && n < cap; a++)
        n += (size_t)snprintf(out + n, cap - n, "%s%s", a == k_apis ? "" : a[1].name ? sep : last, a->name);
}

// ----------------------------------------------------------------------------
// Options

void hx_probe_opts_default(hx_probe_opts *o) {
    memset(o, 0, sizeof *o);
    hx_session_params_default(&o->sp);
    o->sp.decode_n = 16;
    o->route = "auto";
    o->cold = "auto";
    o->engine = "auto";
    o->n_probs = 20;
    o->id_slot = 0;
    o->cap_prompt = -1;
    o->reports_reuse = -1;
    o->timeout_s = 600;
    o->idle_s = 60;
}

static int parse_n_probs(const char *flag, const char *v, void *field, char *err, size_t errlen) {
    int64_t n = -1;
    int rc = strcmp(v, "all") ? hx_parse_i64(flag, v, 0, 1 << 24, &n, err, errlen) : ENG_OK;
    if (!rc) *(int32_t *)field = (int32_t)n;
    return rc;
}

static int parse_cap(const char *flag, const char *v, void *field, char *err, size_t errlen) {
    bool on = false;
    int rc = hx_parse_on_off(flag, v, &on, err, errlen);
    if (!rc) *(int32_t *)field = on;
    return rc;
}

static int parse_reports(const char *flag, const char *v, void *field, char *err, size_t errlen) {
    if (strcmp(v, "yes") && strcmp(v, "no") && strcmp(v, "auto")) {
        eng_errf(err, errlen, "%s: expected yes, no or auto, got '%s'", flag, v);
        return ENG_ERR_ARG;
    }
    *(int32_t *)field = !strcmp(v, "yes") ? 1 : !strcmp(v, "no") ? 0 : -1;
    return ENG_OK;
}

/* The session's fields probe uses (sp.*) with probe's own texts, then probe's own; --api's help
 * line is k_apis' names (hx_probe_opts_help). */
#define OPT(f) offsetof(hx_probe_opts, f)
static const hx_option k_options[] = {
    {"--server", NULL, "URL", "the live server's base URL, e.g. http://127.0.0.1:8080 (required)", HX_OPT_STRING,
     OPT(server), 0, 0, NULL},
    {"--api", NULL, "A", NULL, HX_OPT_STRING, OPT(api), 0, 0, NULL},
    {"--transcript", "-t", "FILE", "transcript JSONL, v1 or v2 (required)", HX_OPT_STRING, OPT(transcript_path), 0, 0,
     NULL},
    {"--output", "-o", "FILE.sqlite", "results database (default: a temporary one, removed afterwards)",
     HX_OPT_STRING, OPT(db_path), 0, 0, NULL},
    {"--db", NULL, "FILE.sqlite", NULL, HX_OPT_STRING, OPT(db_path), 0, 0, NULL},
    {"--model", "-m", "FILE.gguf", "the server's model (or a GGUF with its vocabulary): prompts are rendered and\n"
     "tokenized as replay does, and sent as token ids where the API takes them", HX_OPT_STRING, OPT(sp.model_path),
     0, 0, NULL},
    {"--template", NULL, "T", "chat template for -m (default: from its metadata)", HX_OPT_STRING,
     OPT(sp.template_name), 0, 0, NULL},
    {"--normalize", NULL, "R", "rules the server is expected to apply (anthropic-cch): expected reuse is counted\n"
     "after them; the requests are sent as the transcript has them", HX_OPT_STRING, OPT(sp.normalize), 0, 0, NULL},
    {"--route", NULL, "R", "auto | tokens | chat: send token ids or the messages (default auto: ids when\n"
     "the API takes them)", HX_OPT_STRING, OPT(route), 0, 0, NULL},
    {"--cold", NULL, "M", "how the cold run is forced: cache-prompt (cache_prompt: false), erase (POST\n"
     "/slots/ID?action=erase), salt (a fresh cache_salt), reset (POST /reset_prefix_cache),\n"
     "flush (POST /flush_cache) (default: the API's first)", HX_OPT_STRING, OPT(cold), 0, 0, NULL},
    {"--engine", NULL, "E", "llama.cpp | vllm | sglang | kvreplay: whose cache rule the expected reuse\n"
     "follows (default: from the server's identity)", HX_OPT_STRING, OPT(engine), 0, 0, NULL},
    {"--grid", NULL, "N", "the server floors reuse to multiples of N (vLLM block, SGLang page, kvreplay\n"
     "chunk; default: from its identity, else the engine's default)", HX_OPT_INT, OPT(grid), 0, 1 << 20, NULL},
    {"--cap-prompt", NULL, "on|off", "the server caps reuse at the cached prompt's length (default: kvreplay on)",
     HX_OPT_CUSTOM, OPT(cap_prompt), 0, 0, parse_cap},
    {"--reports-reuse", NULL, "yes|no|auto", "yes: a response without a cached-token count reused nothing (vLLM with\n"
     "--enable-prompt-tokens-details, SGLang with --enable-cache-report leave it out at 0); no:\n"
     "its reuse is unknown; auto (default): as the server's identity says (SGLang's)", HX_OPT_CUSTOM,
     OPT(reports_reuse), 0, 0, parse_reports},
    {"--model-name", NULL, "NAME", "\"model\" in every body (default: the first model the server lists)",
     HX_OPT_STRING, OPT(model_name), 0, 0, NULL},
    {"--api-key", NULL, "KEY", "sent as Authorization: Bearer and x-api-key", HX_OPT_STRING, OPT(api_key), 0, 0, NULL},
    {"--n-probs", NULL, "K|all", "candidates compared at each generated position (default 20; all: the whole\n"
     "vocabulary, where the server allows it)", HX_OPT_CUSTOM, OPT(n_probs), 0, 0, parse_n_probs},
    {"--decode", NULL, "N", "tokens generated greedily per run, compared position by position (default 16)",
     HX_OPT_INT, OPT(sp.decode_n), 1, 1 << 16, NULL},
    {"--repeat", NULL, "N", "cold and warm runs timed per request: median, min, max (default 1)", HX_OPT_INT,
     OPT(sp.repeat), 1, MAX_RUNS, NULL},
    {"--slot", NULL, "ID", "llama-server slot to pin (id_slot; -1: none; default 0)", HX_OPT_INT, OPT(id_slot), -1,
     1 << 20, NULL},
    {"--timeout", NULL, "S", "seconds for one exchange (default 600)", HX_OPT_DOUBLE, OPT(timeout_s), 0.1, 1e6, NULL},
    {"--idle-timeout", NULL, "S", "seconds without a byte from the server (default 60)", HX_OPT_DOUBLE, OPT(idle_s),
     0.1, 1e6, NULL},
    {"--limit", NULL, "N", "probe at most the first N requests (default 0: all)", HX_OPT_INT, OPT(limit), 0, 1 << 30,
     NULL},
    {"--quiet", NULL, NULL, NULL, HX_OPT_FLAG, OPT(sp.quiet), 0, 0, NULL},
    {0},
};

int hx_probe_opts_take(hx_probe_opts *o, int argc, char **argv, int *i, char *err, size_t errlen) {
    return hx_options_take(k_options, o, argc, argv, i, err, errlen);
}

void hx_probe_opts_help(FILE *f) {
    char api_help[256];
    api_names(api_help, sizeof api_help - 16, " | ", " | ");
    strcat(api_help, " (required)");
    for (const hx_option *op = k_options; op->name; op++) {
        hx_option one[2] = {*op, {0}};
        if (!strcmp(op->name, "--api")) one[0].help = api_help;
        hx_options_help(one, NULL, f);
    }
}

int hx_probe_opts_check(const hx_probe_opts *o, char *err, size_t errlen) {
    const probe_api *a = find_api(o->api);
    char names[256];
    hx_normalize nz;
    api_names(names, sizeof names, ", ", " or ");
    if (!o->server) eng_errf(err, errlen, "probe: --server is required");
    else if (!o->transcript_path) eng_errf(err, errlen, "probe: -t/--transcript is required");
    else if (!a) eng_errf(err, errlen, "--api: expected %s, got '%s'", names, o->api ? o->api : "");
    else if (strcmp(o->route, "auto") && strcmp(o->route, "tokens") && strcmp(o->route, "chat"))
        eng_errf(err, errlen, "--route: expected auto, tokens or chat, got '%s'", o->route);
    else if (strcmp(o->engine, "auto") && hx_engine_from_name(o->engine) <= 0)
        eng_errf(err, errlen, "--engine: expected llama.cpp, vllm, sglang or kvreplay, got '%s'", o->engine);
    else if (hx_normalize_parse(o->sp.normalize, &nz) != ENG_OK) eng_errf(err, errlen, "%s", nz.err);
    else if (!strcmp(o->route, "tokens") && !a->path_tokens)
        eng_errf(err, errlen, "--route tokens: --api %s takes no token ids", a->name);
    else if (strcmp(o->cold, "auto") && !has_cold(a, o->cold))
        eng_errf(err, errlen, "--cold %s: --api %s forces a cold run by %s", o->cold, a->name, a->colds);
    else if (o->sp.repeat < 1 || o->sp.repeat > MAX_RUNS || o->sp.decode_n < 1)
        eng_errf(err, errlen, "--repeat %d, --decode %d: expected --repeat in [1, %d] and --decode >= 1",
                 o->sp.repeat, o->sp.decode_n, MAX_RUNS);
    else return ENG_OK;
    return ENG_ERR_ARG;
}

// ----------------------------------------------------------------------------
// The run's state

enum { ROUTE_TOKENS = 0, ROUTE_CHAT = 1 };

/* One generation exchange (a warm or a cold run). */
typedef struct gen_run {
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
} gen_run;

typedef struct ident {
    json_t   *info;          /* {"props": ..., "models": ..., ...} */
    hx_engine engine;
    char     *models[8];     /* the model names the server lists */
    int       n_models;
    bool      llama_like;    /* /tokenize, /apply-template, /slots (llama-server, kvreplay serve) */
    int32_t   grid;          /* from the identity (0: unknown) */
    int       cap_prompt;    /* -1: unknown */
    bool      absent_is_zero;/* SGLang with --enable-cache-report leaves cached_tokens out when 0 */
    int32_t   n_vocab;       /* from /v1/models meta (0: unknown) */
} ident;

typedef struct probe_ctx {
    const hx_probe_opts *o;
    const probe_api     *api;
    const hx_api_dialect *dialect;
    const hx_api_route  *rt;        /* the generation route used */
    int                  route;     /* ROUTE_TOKENS | ROUTE_CHAT */
    hx_http             *http;
    ident                id;
    hx_reuse_rule        rule;
    const char          *cold;      /* the cold method */
    const char          *model_send;
    /* local rendering (-m) */
    eng_tokenizer       *tok;
    char                *tmpl_meta;
    hx_prepare_ctx      *pc, *pc_norm;
    /* what the server's cache holds (the warm namespace) */
    hx_held              held;
    bool                 held_known;
    char                 salt_warm[96];
    char                 no_probs[200];  /* why the server gets no request for probabilities ("": it does) */
    int64_t              salt_seq;
    /* the previous request as sent (rewarm for --repeat) */
    hx_api_req           prev;
    bool                 has_prev;
    int32_t             *prev_ids;   /* its server-side prompt ids (for held), n_prev */
    int32_t              n_prev;
    /* results */
    hx_store            *store;
    int64_t              run_id;
    hx_probe_summary    *sum;
    int32_t              n_vocab;    /* for --n-probs all */
} probe_ctx;

static void gen_run_free(gen_run *g) {
    hx_api_result_free(&g->r);
    free(g->first_json);
    eng_buf_free(&g->texts);
    free(g->ids);
    memset(g, 0, sizeof *g);
}

static void say(const probe_ctx *x, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void say(const probe_ctx *x, const char *fmt, ...) {
    if (x->o->sp.quiet) return;
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "kvreplay probe: ");
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
}

// ----------------------------------------------------------------------------
// Plain exchanges: identity endpoints, read-backs, cache controls

/* GET or POST path; on 200 with a JSON body, *out (may be NULL) gets it. Returns the status (0: no
 * response; then msg says why). */
static long exchange_json(probe_ctx *x, const char *method, const char *path, const char *body, json_t **out,
                          char *msg, size_t cap) {
    hx_http_resp r;
    if (out) *out = NULL;
    int rc = hx_http_do(x->http, method, path, body, body ? strlen(body) : 0, NULL, NULL, &r);
    long st = rc == ENG_OK ? r.status : 0;
    if (rc != ENG_OK && msg) snprintf(msg, cap, "%s: %s", hx_http_fail_name(r.fail), r.message);
    else if (st != 200 && msg) snprintf(msg, cap, "HTTP %ld: %.200s", st, r.body.data ? r.body.data : "");
    if (st == 200 && out) {
        json_error_t je;
        *out = json_loadb(r.body.data ? r.body.data : "", r.body.len, 0, &je);
        if (!*out && msg) snprintf(msg, cap, "not JSON: %s", je.text);
    }
    hx_http_resp_free(&r);
    return st;
}

static void add_model(ident *id, const char *name) {
    if (!name || !*name || id->n_models == (int)(sizeof id->models / sizeof id->models[0])) return;
    for (int i = 0; i < id->n_models; i++)
        if (!strcmp(id->models[i], name)) return;
    id->models[id->n_models++] = hx_strdup(name);
}

/* The server's identity: whatever of /props, /v1/models, /version, /server_info, /get_server_info answers. */
static void identify(probe_ctx *x) {
    ident *id = &x->id;
    id->info = json_object();
    id->cap_prompt = -1;
    json_t *j;
    char msg[256];
    if (exchange_json(x, "GET", "/props", NULL, &j, msg, sizeof msg) == 200 && json_is_object(j)) {
        json_object_set(id->info, "props", j);
        id->llama_like = json_object_get(j, "default_generation_settings") != NULL;
        const char *bi = json_string_value(json_object_get(j, "build_info"));
        if (bi && !strncmp(bi, "kvreplay", 8)) id->engine = HX_ENGINE_KVREPLAY;
        else if (id->llama_like) id->engine = HX_ENGINE_LLAMA;
        add_model(id, json_string_value(json_object_get(j, "model_alias")));
        const char *mp = json_string_value(json_object_get(j, "model_path"));
        if (mp) add_model(id, strrchr(mp, '/') ? strrchr(mp, '/') + 1 : mp);
        const json_t *kv = json_object_get(j, "kvreplay");  /* kvreplay serve: its cache rule */
        if (json_is_object(kv)) {
            const char *align = json_string_value(json_object_get(kv, "align"));
            const json_t *ch = json_object_get(kv, "chunk"), *cp = json_object_get(kv, "cap_prompt");
            if (align && !strcmp(align, "none")) id->grid = 1;
            else if (json_is_integer(ch)) id->grid = (int32_t)json_integer_value(ch);
            if (json_is_boolean(cp)) id->cap_prompt = json_is_true(cp);
        }
    }
    json_decref(j);
    if (exchange_json(x, "GET", "/v1/models", NULL, &j, msg, sizeof msg) == 200 && json_is_object(j)) {
        json_object_set(id->info, "models", j);
        const json_t *d = json_object_get(j, "data");
        for (size_t i = 0; i < json_array_size(d); i++) {
            const json_t *m = json_array_get(d, i);
            add_model(id, json_string_value(json_object_get(m, "id")));
            const char *owner = json_string_value(json_object_get(m, "owned_by"));
            if (id->engine == HX_ENGINE_UNKNOWN && owner && !strcmp(owner, "vllm")) id->engine = HX_ENGINE_VLLM;
            if (id->engine == HX_ENGINE_UNKNOWN && owner && !strcmp(owner, "sglang")) id->engine = HX_ENGINE_SGLANG;
            const json_t *nv = json_object_get(json_object_get(m, "meta"), "n_vocab");
            if (json_is_integer(nv) && !id->n_vocab) id->n_vocab = (int32_t)json_integer_value(nv);
        }
    }
    json_decref(j);
    hx_engine e = x->api->engine != HX_ENGINE_UNKNOWN ? x->api->engine : id->engine;
    if (e == HX_ENGINE_VLLM) {
        if (exchange_json(x, "GET", "/version", NULL, &j, msg, sizeof msg) == 200) json_object_set(id->info, "version", j);
        json_decref(j);
        /* dev mode (VLLM_SERVER_DEV_MODE=1): the whole config, with the block size */
        if (exchange_json(x, "GET", "/server_info?config_format=json", NULL, &j, msg, sizeof msg) == 200) {
            json_object_set(id->info, "server_info", j);
            const json_t *cfg = json_object_get(j, "vllm_config");  /* an object, or (older) its text */
            const json_t *bs = json_object_get(json_object_get(cfg, "cache_config"), "block_size");
            const char *txt = json_string_value(cfg), *at = txt ? strstr(txt, "block_size=") : NULL;
            if (json_is_integer(bs) && json_integer_value(bs) > 0) id->grid = (int32_t)json_integer_value(bs);
            else if (at && atoi(at + 11) > 0) id->grid = atoi(at + 11);
        }
        json_decref(j);
    }
    if (e == HX_ENGINE_SGLANG) {
        if (exchange_json(x, "GET", "/get_server_info", NULL, &j, msg, sizeof msg) == 200 && json_is_object(j)) {
            json_object_set(id->info, "server_info", j);
            const json_t *ps = json_object_get(j, "page_size"), *cr = json_object_get(j, "enable_cache_report");
            if (json_is_integer(ps) && json_integer_value(ps) > 0) id->grid = (int32_t)json_integer_value(ps);
            id->absent_is_zero = json_is_true(cr);
        }
        json_decref(j);
    }
}

/* POST /tokenize {content, add_special, parse_special} -> ids (malloc'd). */
static int server_tokenize(probe_ctx *x, const char *text, bool add_special, int32_t **ids, int32_t *n, char *msg,
                           size_t cap) {
    const hx_api_route *rt = hx_api_route_of(hx_api_dialect_find("llama"), HX_API_OP_TOKENIZE);
    hx_api_req q;
    hx_api_req_init(&q);
    q.route = rt;
    q.req.prompt = (char *)text;
    q.params.add_special = add_special;
    q.params.parse_special = true;
    json_t *b = rt->request(&q);
    q.req.prompt = NULL;
    hx_api_req_free(&q);
    char *body = b ? json_dumps(b, JSON_COMPACT) : NULL;
    json_decref(b);
    if (!body) return ENG_ERR_NOMEM;
    hx_http_resp hr;
    int rc = hx_http_do(x->http, "POST", "/tokenize", body, strlen(body), NULL, NULL, &hr);
    free(body);
    if (rc != ENG_OK || hr.status != 200) {
        snprintf(msg, cap, "/tokenize: %s", rc ? hr.message : "not 200");
        hx_http_resp_free(&hr);
        return ENG_ERR_IO;
    }
    hx_api_result r;
    hx_api_error e;
    rc = rt->read(rt, hr.body.data ? hr.body.data : "", hr.body.len, &r, &e);
    hx_http_resp_free(&hr);
    if (rc) {
        snprintf(msg, cap, "/tokenize: %.300s", e.message);
        return ENG_ERR_FORMAT;
    }
    *ids = r.ids;
    *n = r.n_ids;
    r.ids = NULL;
    hx_api_result_free(&r);
    return ENG_OK;
}

/* The OpenAI chat body llama-server's /v1/messages renders (server-chat.cpp,
 * server_chat_convert_anthropic_to_oai at 0949beb5a3fc): the system blocks' texts
 * concatenated into one system message; text blocks kept as content parts;
 * thinking as reasoning_content; tool_use as tool_calls; each tool_result as a
 * tool message after its message; the tools as functions. So /apply-template
 * gives the text its /v1/messages renders. */
static json_t *anthropic_as_llama_renders(const hx_request *q) {
    json_t *msgs = json_array(), *o = json_object();
    eng_buf sys = {0};
    for (int32_t i = 0; i < q->n_system; i++) eng_buf_append(&sys, q->system[i].text, strlen(q->system[i].text));
    if (q->n_system) json_array_append_new(msgs, json_pack("{s:s, s:s}", "role", "system", "content", sys.data ? sys.data : ""));
    eng_buf_free(&sys);
    for (int32_t i = 0; i < q->n_messages; i++) {
        const hx_message *m = &q->messages[i];
        const char *role = m->role == HX_ROLE_ASSISTANT ? "assistant" : m->role == HX_ROLE_SYSTEM ? "system" : "user";
        json_t *parts = json_array(), *calls = json_array(), *results = json_array();
        eng_buf think = {0};
        for (int32_t b = 0; b < m->n_blocks; b++) {
            const hx_block *bl = &m->blocks[b];
            if (bl->type == HX_BLOCK_TEXT) json_array_append_new(parts, json_pack("{s:s, s:s}", "type", "text", "text", bl->text));
            else if (bl->type == HX_BLOCK_THINKING) eng_buf_append(&think, bl->text, strlen(bl->text));
            else if (bl->type == HX_BLOCK_TOOL_USE)
                json_array_append_new(calls, json_pack("{s:s, s:s, s:{s:s, s:s}}", "id", bl->id ? bl->id : "", "type",
                                                       "function", "function", "name", bl->name ? bl->name : "",
                                                       "arguments", bl->input ? bl->input : "{}"));
            else if (bl->type == HX_BLOCK_TOOL_RESULT)
                json_array_append_new(results, json_pack("{s:s, s:s, s:s}", "role", "tool", "tool_call_id",
                                                         bl->id ? bl->id : "", "content", bl->text));
        }
        if (json_array_size(parts) || json_array_size(calls) || think.len) {
            json_t *nm = json_pack("{s:s}", "role", role);
            if (json_array_size(parts)) json_object_set(nm, "content", parts);
            else json_object_set_new(nm, "content", json_string(""));
            if (json_array_size(calls)) json_object_set(nm, "tool_calls", calls);
            if (think.len) json_object_set_new(nm, "reasoning_content", json_string(think.data));
            json_array_append_new(msgs, nm);
        }
        for (size_t k = 0; k < json_array_size(results); k++) json_array_append(msgs, json_array_get(results, k));
        json_decref(parts);
        json_decref(calls);
        json_decref(results);
        eng_buf_free(&think);
    }
    json_object_set_new(o, "messages", msgs);
    if (q->n_tools) {
        json_t *tools = json_array();
        for (int32_t i = 0; i < q->n_tools; i++) {
            json_error_t je;
            json_t *schema = json_loads(q->tools[i].schema, 0, &je);
            json_array_append_new(tools, json_pack("{s:s, s:{s:s, s:s, s:o}}", "type", "function", "function", "name",
                                                   q->tools[i].name, "description", q->tools[i].description,
                                                   "parameters", schema ? schema : json_object()));
        }
        json_object_set_new(o, "tools", tools);
    }
    return o;
}

/* The server's own rendering of a request's messages: /apply-template of the
 * chat body its generation route renders, then /tokenize of that text (with
 * BOS and special tokens, as the generation tokenizes it). */
static int server_render_ids(probe_ctx *x, const hx_request *req, bool anthropic, int32_t **ids, int32_t *n,
                             char *msg, size_t cap) {
    json_t *b = json_object();
    if (anthropic) {
        json_decref(b);
        b = anthropic_as_llama_renders(req);
    } else if (b && hx_api_openai_prompt_json(req, b)) {
        json_decref(b);
        b = NULL;
    }
    char *body = b ? json_dumps(b, JSON_COMPACT) : NULL;
    json_decref(b);
    if (!body) return ENG_ERR_NOMEM;
    json_t *j = NULL;
    long st = exchange_json(x, "POST", "/apply-template", body, &j, msg, cap);
    free(body);
    const char *text = json_string_value(json_object_get(j, "prompt"));
    if (st != 200 || !text) {
        if (st == 200) snprintf(msg, cap, "/apply-template: no \"prompt\" in its answer");
        json_decref(j);
        return ENG_ERR_IO;
    }
    int rc = server_tokenize(x, text, true, ids, n, msg, cap);
    json_decref(j);
    return rc;
}

/* POST a cache control (erase, reset, flush). ENG_OK when it answered 200. */
static int cache_control(probe_ctx *x, const char *what, char *msg, size_t cap) {
    char path[96];
    if (!strcmp(what, "erase")) snprintf(path, sizeof path, "/slots/%d?action=erase", x->o->id_slot >= 0 ? x->o->id_slot : 0);
    else if (!strcmp(what, "reset")) snprintf(path, sizeof path, "/reset_prefix_cache");
    else snprintf(path, sizeof path, "/flush_cache");
    long st = exchange_json(x, "POST", path, NULL, NULL, msg, cap);
    if (st == 200) return ENG_OK;
    char m2[320];
    snprintf(m2, sizeof m2, "POST %s: %s", path, msg);
    snprintf(msg, cap, "%s", m2);
    return ENG_ERR_IO;
}

// ----------------------------------------------------------------------------
// One generation exchange, streamed

typedef struct stream_ctx {
    gen_run            *g;
    hx_api_reader       rd;
    hx_api_error        e;
    double              t_now;
    const hx_api_route *rt;
} stream_ctx;

/* The JSON paths where each dialect's token event carries that token's probabilities. */
static const char *const k_prob_paths[] = {"completion_probabilities.0", "choices.0.logprobs.content.0",
                                           "choices.0.logprobs", NULL};

static void on_event(void *ud, const hx_sse_event *ev, bool token_bearing) {
    stream_ctx *s = ud;
    gen_run *g = s->g;
    if (!token_bearing) return;
    if (g->t_first < 0) g->t_first = s->t_now;
    if (!g->first_json) {
        size_t off, len;
        for (int k = 0; k_prob_paths[k]; k++)
            if (hx_json_span(ev->data, ev->n, k_prob_paths[k], &off, &len) && ev->data[off] != 'n') {
                if ((g->first_json = malloc(len + 1))) {
                    memcpy(g->first_json, ev->data + off, len);
                    g->first_json[len] = '\0';
                    g->first_json_n = len;
                }
                break;
            }
    }
    /* the event's text: one generated token per event in llama-server, vLLM, SGLang and kvreplay serve */
    json_error_t je;
    json_t *j = json_loadb(ev->data, ev->n, 0, &je);
    const json_t *c0 = json_array_get(json_object_get(j, "choices"), 0), *d = json_object_get(j, "delta");
    const char *t = json_string_value(json_object_get(j, "content"));
    if (!t) t = json_string_value(json_object_get(json_object_get(c0, "delta"), "content"));
    if (!t) t = json_string_value(json_object_get(c0, "text"));
    if (!t) t = json_string_value(json_object_get(d, "text"));
    if (!t) t = json_string_value(json_object_get(d, "thinking"));
    if (!t) t = json_string_value(json_object_get(d, "partial_json"));
    if (!t) t = "";
    eng_buf_append(&g->texts, t, strlen(t) + 1);
    g->n_texts++;
    json_decref(j);
}

static int on_bytes(void *ud, const char *bytes, size_t n, double t_ms) {
    stream_ctx *s = ud;
    s->t_now = t_ms;
    int rc = hx_api_reader_feed(&s->rd, bytes, n, &s->g->r, &s->e);
    return rc < 0 ? 1 : 0;  /* a malformed event ends the exchange: said below */
}

/* The kind of a reader's error: the JSON itself, or a field. */
static const char *read_fail_kind(const hx_api_error *e) {
    if (strstr(e->message, "stream ended before")) return "cut";
    if (strstr(e->message, "invalid JSON") || strstr(e->message, "not JSON") || strstr(e->message, "not a JSON") ||
        strstr(e->message, "not a typed JSON"))
        return "malformed";
    if (e->field[0]) return "field";
    return "malformed";
}

static void failf(gen_run *g, const char *kind, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void failf(gen_run *g, const char *kind, const char *fmt, ...) {
    g->fail = kind;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(g->msg, sizeof g->msg, fmt, ap);
    va_end(ap);
}

/* Sends q streamed; fills g. Returns ENG_OK (g->fail says whether the server did its part) or
 * ENG_ERR_NOMEM. */
static int generate(probe_ctx *x, hx_api_req *q, gen_run *g) {
    memset(g, 0, sizeof *g);
    g->t_first = g->ttft_ms = -1;
    hx_api_result_init(&g->r);
    json_t *b = x->rt->request(q);
    char *body = b ? json_dumps(b, JSON_COMPACT) : NULL;
    json_decref(b);
    if (!body) return ENG_ERR_NOMEM;
    stream_ctx s = {.g = g, .rt = x->rt};
    hx_api_reader_init(&s.rd, x->rt);
    s.rd.on_event = on_event;
    s.rd.event_ud = &s;
    hx_http_resp hr;
    int rc = hx_http_do(x->http, "POST", x->rt->path, body, strlen(body), on_bytes, &s, &hr);
    free(body);
    if (rc == ENG_ERR_NOMEM) {
        hx_api_reader_free(&s.rd);
        return rc;
    }
    g->status = hr.status;
    bool http_error = hr.status >= 400 || (rc == ENG_OK && hr.status != 200);
    if (http_error) {
        hx_api_error e;
        memset(&e, 0, sizeof e);
        if (x->dialect->read_error(hr.body.data ? hr.body.data : "", hr.body.len, (int)hr.status, &e))
            failf(g, "http", "HTTP %ld: %s", hr.status, e.message);
        else
            failf(g, "http", "HTTP %ld with a body that is not %s's error shape: %.160s", hr.status, x->dialect->name,
                  hr.body.data ? hr.body.data : "(empty)");
    } else if (rc != ENG_OK && hr.fail == HX_HTTP_ABORTED) {
        failf(g, read_fail_kind(&s.e), "%s", s.e.message);
    } else if (rc != ENG_OK) {
        failf(g, hx_http_fail_name(hr.fail), "%s", hr.message);
    } else if (hx_api_reader_finish(&s.rd, &g->r, &s.e) != ENG_OK) {
        failf(g, read_fail_kind(&s.e), "%s", s.e.message);
    }
    if (g->t_first >= 0) g->ttft_ms = g->t_first - hr.pretransfer_ms;
    hx_http_resp_free(&hr);
    hx_api_reader_free(&s.rd);
    if (g->fail) return ENG_OK;
    /* what the response must carry */
    const hx_api_result *r = &g->r;
    if (r->usage.prompt_tokens < 0 && r->timings.prompt_n < 0)
        failf(g, "field", "the response gives no prompt token count (usage.prompt_tokens, tokens_evaluated, "
              "input_tokens)");
    else if (r->model && x->id.n_models) {  /* a server that lies about its model */
        bool ok = q->params.model && !strcmp(r->model, q->params.model);
        for (int i = 0; !ok && i < x->id.n_models; i++) ok = !strcmp(r->model, x->id.models[i]);
        if (!ok)
            failf(g, "model", "the response names model \"%s\", but the server lists \"%s\"%s and the request "
                  "asked for \"%s\"", r->model, x->id.models[0], x->id.n_models > 1 ? " (and others)" : "",
                  q->params.model ? q->params.model : "");
    }
    /* the generated positions: ids and texts from the tokens when the API gives them, else the events */
    int32_t n = r->n_tokens > 0 ? r->n_tokens : g->n_texts;
    g->ids = malloc(sizeof(int32_t) * (size_t)(n > 0 ? n : 1));
    if (!g->ids) return ENG_ERR_NOMEM;
    for (int32_t k = 0; k < n; k++) g->ids[k] = r->n_tokens > 0 ? r->tokens[k].id : -1;
    g->n_gen = n;
    return ENG_OK;
}

static int64_t prompt_count(const gen_run *g) {
    return g->r.usage.prompt_tokens >= 0 ? g->r.usage.prompt_tokens : g->r.timings.prompt_n;
}

static int64_t reported_reuse(const probe_ctx *x, const gen_run *g) {
    if (g->r.usage.cached_tokens >= 0) return g->r.usage.cached_tokens;
    if (g->r.timings.cache_n >= 0) return g->r.timings.cache_n;
    return x->id.absent_is_zero ? 0 : -1;
}

/* The text of generated position k (per event), or the token's own. */
static const char *gen_text(const gen_run *g, int32_t k, size_t *len) {
    if (g->r.n_tokens > 0 && k < g->r.n_tokens) {
        *len = g->r.tokens[k].len;
        return g->r.tokens[k].text ? g->r.tokens[k].text : "";
    }
    const char *p = g->texts.data ? g->texts.data : "";
    for (int32_t i = 0; i < k && i < g->n_texts; i++) p += strlen(p) + 1;
    *len = k < g->n_texts ? strlen(p) : 0;
    return k < g->n_texts ? p : "";
}

// ----------------------------------------------------------------------------
// Requests as sent

/* A cache_salt no earlier run used: the process, the wall clock in ns, and a counter over every run
 * of this process (two runs in one second must not share one). */
static void fresh_salt(probe_ctx *x, char *out, size_t cap, const char *what) {
    static int64_t n_salts;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    snprintf(out, cap, "kvreplay-probe-%ld-%lld%09ld-%s%lld", (long)getpid(), (long long)ts.tv_sec, ts.tv_nsec, what,
             (long long)n_salts++);
    x->salt_seq++;
}

/* Builds the generation request of a transcript request: the prompt (ids, or the messages), greedy,
 * streamed, decode_n tokens, K probabilities. */
static int build_req(probe_ctx *x, const hx_request *req, const int32_t *ids, int32_t n_ids, hx_api_req *q) {
    hx_api_req_init(q);
    q->route = x->rt;
    int rc;
    if (x->route == ROUTE_TOKENS) {
        q->req.tokens = malloc(sizeof(int32_t) * (size_t)(n_ids > 0 ? n_ids : 1));
        if (!q->req.tokens) return ENG_ERR_NOMEM;
        memcpy(q->req.tokens, ids, sizeof(int32_t) * (size_t)n_ids);
        q->req.n_tokens = n_ids;
        if (!(q->req.session = hx_strdup(""))) return ENG_ERR_NOMEM;
    } else if ((rc = hx_request_copy(&q->req, req)) != ENG_OK) {
        return rc;
    }
    hx_api_params *p = &q->params;
    p->max_tokens = x->o->sp.decode_n;
    p->stream = true;
    p->include_usage = true;
    int32_t k = x->no_probs[0] ? 0 : x->o->n_probs < 0 ? x->n_vocab : x->o->n_probs;
    p->n_probs = k > 0 ? k : 0;
    p->logprobs = p->n_probs > 0;
    p->return_tokens = true;  /* llama-server: the generated ids also without probabilities */
    p->return_token_ids = x->api->engine == HX_ENGINE_VLLM || x->api->engine == HX_ENGINE_SGLANG;
    p->sampling.temperature = 0;
    p->id_slot = x->o->id_slot;
    if (x->model_send && !(p->model = hx_strdup(x->model_send))) return ENG_ERR_NOMEM;
    return ENG_OK;
}

/* Sets q for a warm run (through the warm namespace) or a cold one (after forcing it cold). */
static int set_warm(probe_ctx *x, hx_api_req *q) {
    q->params.cache_prompt = true;
    free(q->params.cache_salt);
    q->params.cache_salt = NULL;
    if (!strcmp(x->cold, "salt") && !(q->params.cache_salt = hx_strdup(x->salt_warm))) return ENG_ERR_NOMEM;
    return ENG_OK;
}

/* Forces the next run cold. ENG_OK, or ENG_ERR_IO with msg (the cache control failed). */
static int set_cold(probe_ctx *x, hx_api_req *q, char *msg, size_t cap) {
    q->params.cache_prompt = true;
    free(q->params.cache_salt);
    q->params.cache_salt = NULL;
    if (!strcmp(x->cold, "cache-prompt")) q->params.cache_prompt = false;
    else if (!strcmp(x->cold, "salt")) {
        char s[96];
        fresh_salt(x, s, sizeof s, "cold");
        if (!(q->params.cache_salt = hx_strdup(s))) return ENG_ERR_NOMEM;
    } else {
        return cache_control(x, x->cold, msg, cap);
    }
    return ENG_OK;
}

/* What the warm namespace holds after a run: the slot's or tree's new sequence. A cold run by
 * cache_prompt: false or erase runs in the slot too; a salted one elsewhere; reset and flush emptied
 * it first. */
static int note_run(probe_ctx *x, const int32_t *prompt, int32_t n_prompt, const gen_run *g, bool cold) {
    if (cold && !strcmp(x->cold, "salt")) return ENG_OK;
    if (cold && (!strcmp(x->cold, "reset") || !strcmp(x->cold, "flush") || !strcmp(x->cold, "erase")))
        hx_held_clear(&x->held);
    if (!prompt || g->fail) {  /* the cache holds something we cannot name */
        hx_held_clear(&x->held);
        x->held_known = false;
        return ENG_OK;
    }
    bool ids = g->n_gen > 0;
    for (int32_t k = 0; k < g->n_gen; k++) ids = ids && g->ids[k] >= 0;
    if (cold && !x->held_known) x->held_known = !strcmp(x->cold, "reset") || !strcmp(x->cold, "flush") ||
                                                !strcmp(x->cold, "erase") || !x->rule.tree;
    return hx_held_add(&x->held, &x->rule, prompt, n_prompt, ids ? g->ids : NULL, ids ? g->n_gen : 0);
}

// ----------------------------------------------------------------------------
// One request

typedef struct req_ids {
    int32_t    *ids;       /* the prompt as the server tokenized it (or kvreplay, see basis) */
    int32_t     n;
    const char *basis;     /* "sent ids", "server tokenization", "kvreplay rendering", or NULL */
} req_ids;

/* The prompt's ids for what the server saw, checked against the count it reported (n_server, -1:
 * unknown): the ids sent; else the server's read-back; else kvreplay's rendering. */
static int prompt_ids(probe_ctx *x, const hx_request *req, const hx_prepared *loc, const int32_t *sent,
                      int32_t n_sent, int64_t n_server, req_ids *out, char *why, size_t cap) {
    memset(out, 0, sizeof *out);
    why[0] = '\0';
    if (sent) {
        out->ids = malloc(sizeof(int32_t) * (size_t)(n_sent > 0 ? n_sent : 1));
        if (!out->ids) return ENG_ERR_NOMEM;
        memcpy(out->ids, sent, sizeof(int32_t) * (size_t)n_sent);
        out->n = n_sent;
        out->basis = n_server < 0 || n_server == n_sent ? "sent ids" : NULL;
        if (!out->basis) snprintf(why, cap, "the server counted %lld prompt tokens, %d were sent", (long long)n_server, n_sent);
        return ENG_OK;
    }
    int32_t *ids = NULL, n = 0;
    char msg[400] = "";
    if (x->id.llama_like && hx_request_kind_of(req) == HX_REQUEST_MESSAGES &&
        server_render_ids(x, req, x->api->dialect[0] == 'a', &ids, &n, msg, sizeof msg) == ENG_OK) {
        if (n_server < 0 || n == n_server) {
            out->ids = ids, out->n = n, out->basis = "server tokenization";
            return ENG_OK;
        }
        snprintf(why, cap, "the server's /apply-template + /tokenize give %d tokens, its response counted %lld", n,
                 (long long)n_server);
        free(ids);
    } else if (msg[0]) {
        snprintf(why, cap, "no read-back of the server's tokens (%s)", msg);
    }
    if (loc) {
        if (!(out->ids = malloc(sizeof(int32_t) * (size_t)(loc->n > 0 ? loc->n : 1)))) return ENG_ERR_NOMEM;
        memcpy(out->ids, loc->tokens, sizeof(int32_t) * (size_t)loc->n);
        out->n = loc->n;
        if (n_server < 0 || loc->n == n_server) {
            out->basis = "kvreplay rendering";
            why[0] = '\0';
        } else {
            size_t k = strlen(why);
            snprintf(why + k, cap - k, "%skvreplay's rendering gives %d tokens, the server counted %lld",
                     k ? "; " : "", loc->n, (long long)n_server);
        }
        return ENG_OK;
    }
    if (!why[0]) snprintf(why, cap, "no token read-back and no local rendering (-m)");
    return ENG_OK;
}

typedef struct cmp_out {
    hx_cmp   first;           /* position 0 */
    int      json_equal;      /* -1: no JSON text */
    int32_t  fork;            /* -1: none */
    bool     decode_equal;
    int32_t  n_steps;
    hx_step_row *steps;
} cmp_out;

/* Compares a cold run with a warm one, position by position. */
static int compare_runs(const probe_ctx *x, const gen_run *c, const gen_run *w, cmp_out *o) {
    memset(o, 0, sizeof *o);
    o->fork = -1;
    o->json_equal = c->first_json && w->first_json
                        ? c->first_json_n == w->first_json_n && !memcmp(c->first_json, w->first_json, c->first_json_n)
                        : -1;
    int32_t n = c->n_gen < w->n_gen ? c->n_gen : w->n_gen;
    o->steps = calloc((size_t)(n > 0 ? n : 1), sizeof *o->steps);
    if (!o->steps) return ENG_ERR_NOMEM;
    o->decode_equal = c->n_gen == w->n_gen;
    bool probs = c->r.n_tokens > 0 && w->r.n_tokens > 0;
    for (int32_t k = 0; k < n; k++) {
        size_t la, lb;
        const char *ta = gen_text(c, k, &la), *tb = gen_text(w, k, &lb);
        bool same = hx_token_same(c->ids[k], ta, la, w->ids[k], tb, lb);
        hx_cmp ck;
        if (probs && k < c->r.n_tokens && k < w->r.n_tokens) hx_probs_compare(&c->r.tokens[k], &w->r.tokens[k], x->n_vocab, &ck);
        else {
            memset(&ck, 0, sizeof ck);
            ck.equal = ck.top1_equal = same;
            ck.first_diff = same ? -1 : 0;
            ck.kl = NAN;
        }
        if (k == 0) o->first = ck;
        hx_step_row *s = &o->steps[k];
        hx_step_row_init(s);
        hx_step_row_set_cmp(s, &ck);
        s->step = k;
        s->token_cold = c->ids[k];
        s->token_reuse = w->ids[k];
        if (!ck.equal || !same) o->decode_equal = false;
        if (o->fork < 0 && !same) o->fork = k;
    }
    if (o->fork < 0 && c->n_gen != w->n_gen) o->fork = n;
    if (n == 0) {
        memset(&o->first, 0, sizeof o->first);
        o->first.equal = o->first.top1_equal = c->n_gen == w->n_gen;
        o->first.first_diff = -1;
        o->first.kl = NAN;
    }
    o->n_steps = n;
    if (o->json_equal == 0) o->decode_equal = false;
    return ENG_OK;
}

typedef struct timing { double med, mn, mx; int n; } timing;

static timing timing_of(const double *t, int n) {
    timing r = {NAN, NAN, NAN, 0};
    double v[64];
    for (int i = 0; i < n; i++)
        if (t[i] >= 0) v[r.n++] = t[i];
    if (!r.n) return r;
    r.mn = r.mx = v[0];
    for (int i = 1; i < r.n; i++) {
        if (v[i] < r.mn) r.mn = v[i];
        if (v[i] > r.mx) r.mx = v[i];
    }
    r.med = hx_median(v, r.n);
    return r;
}

/* Where two id lists first differ, said: "token 12: kvreplay 345, server 678" (or NULL when equal). */
static void diff_ids(const int32_t *a, int32_t na, const int32_t *b, int32_t nb, char *out, size_t cap) {
    int32_t k = hx_lcp(a, na, b, nb);
    if (k == na && k == nb) { out[0] = '\0'; return; }
    if (k < na && k < nb) snprintf(out, cap, "token %d: kvreplay %d, server %d (kvreplay %d tokens, server %d)", k, a[k], b[k], na, nb);
    else snprintf(out, cap, "kvreplay %d tokens, server %d (the same up to token %d)", na, nb, k);
}

static int write_row(probe_ctx *x, int32_t idx, const hx_request *req, hx_request_row *row, const hx_step_row *steps,
                     int32_t n_steps) {
    char err[1024];
    row->req_index = idx;
    row->transcript = x->o->transcript_path;
    row->session = req->session;
    row->turn = req->turn;
    row->n_decode = x->o->sp.decode_n;
    if (row->n_prefilled < 0) row->n_prefilled = 0;
    int rc = hx_store_put_request(x->store, x->run_id, row, steps, n_steps, err, sizeof err);
    if (rc) fprintf(stderr, "kvreplay probe: %s\n", err);
    x->sum->n_requests += rc == ENG_OK;
    return rc;
}

/* A request the server failed: its row, and a line on stderr. */
static int fail_row(probe_ctx *x, int32_t idx, const hx_request *req, const gen_run *g, const char *which,
                    int64_t n_prompt_local, hx_request_row *row) {
    char msg[1024];
    snprintf(msg, sizeof msg, "%s run: %s", which, g->msg);
    fprintf(stderr, "kvreplay probe: %s turn %d: %s: %s\n", req->session, req->turn, g->fail, msg);
    row->verified = false;
    row->error = g->fail;
    row->error_message = msg;
    row->http_status = g->status > 0 ? g->status : -1;
    row->n_prompt_local = n_prompt_local;
    if (row->n_prompt <= 0) row->n_prompt = n_prompt_local > 0 ? n_prompt_local : 0;
    row->n_prefilled = row->n_prompt - row->n_reused;
    x->sum->n_failed++;
    return write_row(x, idx, req, row, NULL, 0);
}

static int copy_ids(req_ids *out, const int32_t *ids, int32_t n, const char *basis) {
    if (!(out->ids = malloc(sizeof(int32_t) * (size_t)(n > 0 ? n : 1)))) return ENG_ERR_NOMEM;
    if (n) memcpy(out->ids, ids, sizeof(int32_t) * (size_t)n);
    out->n = n;
    out->basis = basis;
    return ENG_OK;
}

/* The ids the server renders a request to without -m: its /apply-template and /tokenize for messages,
 * /tokenize for a raw prompt, the ids themselves for a tokenized one. */
static int server_ids_of(probe_ctx *x, const hx_request *req, req_ids *out, char *msg, size_t cap) {
    memset(out, 0, sizeof *out);
    switch (hx_request_kind_of(req)) {
    case HX_REQUEST_TOKENS: return copy_ids(out, req->tokens, req->n_tokens, "server tokenization");
    case HX_REQUEST_PROMPT:
        if (!x->id.llama_like) break;
        out->basis = "server tokenization";
        return server_tokenize(x, req->prompt, true, &out->ids, &out->n, msg, cap);
    default:
        if (!x->id.llama_like) break;
        out->basis = "server tokenization";
        return server_render_ids(x, req, x->api->dialect[0] == 'a', &out->ids, &out->n, msg, cap);
    }
    snprintf(msg, cap, "the server offers no /tokenize and no -m was given: the prompt cannot be sent as token ids");
    return ENG_ERR_IO;
}

static int probe_one(probe_ctx *x, int32_t idx, hx_request *req, bool *stop) {
    const hx_probe_opts *o = x->o;
    char err[1024] = "", why[600] = "", msg[600] = "";
    int rc = ENG_OK;
    hx_prepared loc = {0}, loc_norm = {0};
    hx_request norm_req = {0};
    bool have_loc = false, have_norm = false, normalizing = o->sp.normalize && o->sp.normalize[0];
    hx_api_req q;
    hx_api_req_init(&q);
    gen_run warm[MAX_RUNS], cold[MAX_RUNS];
    int n_warm = 0, n_cold = 0;
    req_ids sent = {0}, srv = {0}, srv_norm = {0};
    cmp_out cmp = {0};
    eng_buf rep = {0};
    hx_request_row row;
    hx_request_row_init(&row);
    char diffbuf[256] = "", extra[1024], note[800] = "";
    /* 1. the prompt as replay renders it (-m), and the same after the rules the server is expected to apply */
    if (x->pc) {
        if ((rc = hx_prepare(x->pc, req, &loc, err, sizeof err))) {
            fprintf(stderr, "kvreplay probe: %s\n", err);
            goto out;
        }
        have_loc = true;
    }
    if (normalizing) {
        hx_normalize nz;
        if ((rc = hx_request_copy(&norm_req, req))) goto out;
        hx_normalize_parse(o->sp.normalize, &nz);
        if (hx_normalize_apply(&nz, &norm_req) < 0) { rc = ENG_ERR_NOMEM; goto out; }
        if (x->pc_norm) {
            if ((rc = hx_prepare(x->pc_norm, &norm_req, &loc_norm, err, sizeof err))) goto out;
            have_norm = true;
        }
    }
    int64_t n_prompt_local = have_loc ? loc.n : -1;
    if (x->route == ROUTE_TOKENS) {
        if (have_loc) rc = copy_ids(&sent, loc.tokens, loc.n, "sent ids");
        else if (!(rc = server_ids_of(x, req, &sent, msg, sizeof msg))) sent.basis = "sent ids";
        if (rc == ENG_ERR_NOMEM) goto out;
        if (rc) {  /* the server could not render it: that request's row says so */
            gen_run g;
            memset(&g, 0, sizeof g);
            failf(&g, "render", "%s", msg);
            rc = fail_row(x, idx, req, &g, "render", n_prompt_local, &row);
            goto out;
        }
    }
    if ((rc = build_req(x, req, sent.ids, sent.n, &q))) goto out;
    /* 2. the warm run, through the cache as the previous requests left it */
    if ((rc = set_warm(x, &q)) || (rc = generate(x, &q, &warm[n_warm++]))) goto out;
    gen_run *w = &warm[0];
    if (w->fail && !strcmp(w->fail, "http") && w->status == 400 && q.params.n_probs > 0 && strstr(w->msg, "logprobs")) {
        /* llama-server: "logprobs is not supported with tools + stream": the generated tokens only, from now on */
        snprintf(x->no_probs, sizeof x->no_probs, "the server refuses probabilities here (%.120s)", w->msg);
        say(x, "%s: comparing the generated tokens only", x->no_probs);
        hx_api_req_free(&q);
        gen_run_free(w);
        n_warm = 0;
        if ((rc = build_req(x, req, sent.ids, sent.n, &q)) || (rc = set_warm(x, &q)) ||
            (rc = generate(x, &q, &warm[n_warm++])))
            goto out;
    }
    if (w->fail) {
        row.n_prompt = prompt_count(w) > 0 ? prompt_count(w) : 0;
        note_run(x, NULL, 0, w, false);
        rc = fail_row(x, idx, req, w, "warm", n_prompt_local, &row);
        *stop = !strcmp(w->fail, "refused");
        goto out;
    }
    int64_t n_server = prompt_count(w);
    /* 3. the ids the server saw, and what it should have reused of them */
    if ((rc = prompt_ids(x, req, have_loc ? &loc : NULL, sent.ids, sent.n, n_server, &srv, why, sizeof why)))
        goto out;
    const req_ids *basis = &srv;
    if (normalizing) {  /* the same prompt after the rules, counted the same way; when the server applies
                           them itself, only the normalized prompt matches the count it reported */
        req_ids tmp = {0};
        const int32_t *ns = NULL;
        int32_t nns = 0;
        char why2[600];
        if (x->route == ROUTE_TOKENS) {
            if (have_norm) ns = loc_norm.tokens, nns = loc_norm.n;
            else if (server_ids_of(x, &norm_req, &tmp, msg, sizeof msg) == ENG_OK) ns = tmp.ids, nns = tmp.n;
        }
        rc = prompt_ids(x, &norm_req, have_norm ? &loc_norm : NULL, ns, nns, srv.basis ? -1 : n_server, &srv_norm,
                        why2, sizeof why2);
        free(tmp.ids);
        if (rc) goto out;
        if (srv.basis && srv_norm.basis) srv_norm.basis = srv.basis;
        else if (!srv_norm.basis && why2[0]) snprintf(why, sizeof why, "%s", why2);
        else if (srv_norm.basis) why[0] = '\0';
        basis = &srv_norm;
    }
    int32_t lcp = 0;
    bool exact = basis->basis && basis->ids && x->held_known;
    int64_t expected = basis->ids ? hx_reuse_expected(&x->rule, &x->held, basis->ids, basis->n, &lcp) : -1;
    if (!x->held_known && !why[0]) snprintf(why, sizeof why, "what the server's cache held before this request is unknown");
    int64_t reported = reported_reuse(x, w);
    if (have_loc && srv.ids && srv.basis && strcmp(srv.basis, "kvreplay rendering"))
        diff_ids(loc.tokens, loc.n, srv.ids, srv.n, diffbuf, sizeof diffbuf);
    if ((rc = note_run(x, basis->ids, basis->ids ? basis->n : 0, w, false))) goto out;
    /* 4. the cold run(s); then the other warm runs, each from the first one's cache state */
    for (int k = 0; k < o->sp.repeat; k++) {
        gen_run *c = &cold[n_cold++];
        memset(c, 0, sizeof *c);
        hx_api_result_init(&c->r);
        if ((rc = set_cold(x, &q, msg, sizeof msg)) == ENG_ERR_NOMEM) goto out;
        if (rc) {
            failf(c, "cold", "%s", msg);
            rc = ENG_OK;
            break;
        }
        hx_api_result_free(&c->r);
        if ((rc = generate(x, &q, c))) goto out;
        if ((rc = note_run(x, basis->ids, basis->ids ? basis->n : 0, c, true))) goto out;
        if (c->fail) break;
    }
    int64_t cold_reused = reported_reuse(x, &cold[0]);
    for (int k = 1; k < o->sp.repeat && !cold[n_cold - 1].fail; k++) {
        if (!strcmp(x->cold, "salt")) fresh_salt(x, x->salt_warm, sizeof x->salt_warm, "warm");  /* an empty namespace */
        else if (!strcmp(x->cold, "reset") || !strcmp(x->cold, "flush")) cache_control(x, x->cold, msg, sizeof msg);
        else if (!x->has_prev) cache_control(x, "erase", msg, sizeof msg);  /* a slot: the first request found it empty */
        if (!strcmp(x->cold, "salt") || !strcmp(x->cold, "reset") || !strcmp(x->cold, "flush") || !x->has_prev)
            hx_held_clear(&x->held);
        if (x->has_prev) {  /* the previous request again: the cache as the first warm run found it */
            gen_run pg;
            if ((rc = set_warm(x, &x->prev)) || (rc = generate(x, &x->prev, &pg))) goto out;
            note_run(x, x->prev_ids, x->n_prev, &pg, false);
            gen_run_free(&pg);
        }
        if ((rc = set_warm(x, &q))) goto out;
        gen_run *w2 = &warm[n_warm++];
        if ((rc = generate(x, &q, w2))) goto out;
        if ((rc = note_run(x, basis->ids, basis->ids ? basis->n : 0, w2, false))) goto out;
        if (w2->fail) break;
        eng_buf_printf(&rep, "%s%lld", rep.len ? "," : "", (long long)reported_reuse(x, w2));
    }
    /* 5. the row */
    gen_run *c0 = &cold[0];
    row.n_prompt = n_server;
    row.n_prompt_local = n_prompt_local;
    row.reuse_expected = expected;
    row.reuse_reported = reported;
    row.reuse_basis = exact ? basis->basis : NULL;
    row.n_reused = reported >= 0 ? reported : expected >= 0 ? expected : 0;
    row.n_prefilled = n_server - row.n_reused;
    row.lcp = basis->ids ? lcp : -1;
    row.prompt_diff = diffbuf[0] ? diffbuf : NULL;
    row.n_probs = q.params.n_probs;
    gen_run *bad = c0->fail ? c0 : warm[n_warm - 1].fail ? &warm[n_warm - 1] : NULL;
    if (bad) {
        rc = fail_row(x, idx, req, bad, bad == c0 ? "cold" : "warm (repeat)", n_prompt_local, &row);
        *stop = !strcmp(bad->fail, "refused");
        goto out;
    }
    if ((rc = compare_runs(x, c0, w, &cmp))) goto out;
    hx_request_row_set_cmp(&row, &cmp.first);
    row.json_equal = cmp.json_equal;
    row.fork_step = cmp.fork;
    row.decode_equal = cmp.decode_equal;
    double tw[64], tc[64];
    for (int k = 0; k < n_warm; k++) tw[k] = warm[k].ttft_ms;
    for (int k = 0; k < n_cold; k++) tc[k] = cold[k].ttft_ms;
    timing tmw = timing_of(tw, n_warm), tmc = timing_of(tc, n_cold);
    row.ttft_reuse_ms = tmw.med;
    row.ttft_cold_ms = tmc.med;
    if (o->sp.repeat > 1) {
        row.ttft_reuse_min_ms = tmw.mn, row.ttft_reuse_max_ms = tmw.mx;
        row.ttft_cold_min_ms = tmc.mn, row.ttft_cold_max_ms = tmc.mx;
    }
    /* the cold runs must agree with each other, and a cold run must reuse nothing */
    int cold_agree = 1;
    for (int k = 1; k < n_cold; k++) {
        cmp_out c2;
        if ((rc = compare_runs(x, c0, &cold[k], &c2))) goto out;
        if (!c2.decode_equal || c2.fork >= 0 || !c2.first.equal) cold_agree = 0;
        free(c2.steps);
    }
    if (cold_reused > 0)
        snprintf(note, sizeof note, "the cold run reported %lld reused tokens: the server did not honour --cold %s, "
                 "so warm was compared with warm", (long long)cold_reused, x->cold);
    else if (!exact) snprintf(note, sizeof note, "reuse not checked: %s", why[0] ? why : "no exact token ids");
    else if (x->no_probs[0]) snprintf(note, sizeof note, "%s: the generated tokens compared only", x->no_probs);
    else if (!cold_agree) snprintf(note, sizeof note, "the %d cold runs differ from each other: the server is not "
                                   "deterministic at this request", n_cold);
    row.note = note[0] ? note : NULL;
    snprintf(extra, sizeof extra, "{\"cold\":\"%s\",\"cold_reused\":%lld,\"cold_runs_agree\":%d,\"warm_reused\":[%lld%s%s],"
             "\"n_gen_cold\":%d,\"n_gen_warm\":%d}", x->cold, (long long)cold_reused, cold_agree, (long long)reported,
             rep.len ? "," : "", rep.len ? rep.data : "", c0->n_gen, w->n_gen);
    row.extra = extra;
    /* 6. the verdict */
    bool identical = cmp.first.equal && cmp.decode_equal && cmp.fork < 0 && cmp.json_equal != 0 && cold_reused <= 0;
    x->sum->n_compared++;
    if (identical) x->sum->n_identical++;
    else x->sum->n_diverged++;
    if (exact && reported >= 0) {
        x->sum->n_reuse_checked++;
        if (reported < expected) x->sum->n_reuse_less++;
        if (reported > expected) x->sum->n_reuse_more++;
    } else {
        x->sum->n_reuse_unknown++;
    }
    if (!identical) {
        char what[300];
        if (cold_reused > 0) snprintf(what, sizeof what, "the cold run reused %lld tokens", (long long)cold_reused);
        else if (!cmp.first.equal)
            snprintf(what, sizeof what, "first position, candidate %lld: cold %a, warm %a (%llu ULP)%s",
                     (long long)cmp.first.first_diff, (double)cmp.first.a_first, (double)cmp.first.b_first,
                     (unsigned long long)cmp.first.ulp_first, cmp.json_equal == 0 ? ", JSON text differs" : "");
        else if (cmp.json_equal == 0) snprintf(what, sizeof what, "first position: the JSON text differs, not the bits");
        else snprintf(what, sizeof what, "the first position is identical");
        char fork[96] = "";
        if (cmp.fork >= 0) snprintf(fork, sizeof fork, "; the greedy continuations fork at step %d", cmp.fork);
        else if (!cmp.decode_equal) snprintf(fork, sizeof fork, "; a later position's probabilities differ");
        fprintf(stderr, "kvreplay probe: %s turn %d: warm DIFFERS from cold: %s%s\n", req->session, req->turn, what,
                fork);
    }
    if (exact && reported >= 0 && reported != expected)
        fprintf(stderr, "kvreplay probe: %s turn %d: reused %lld tokens, %s than the %lld expected (%s, %s)\n",
                req->session, req->turn, (long long)reported, reported < expected ? "LESS" : "MORE",
                (long long)expected, hx_engine_name(x->rule.engine), basis->basis);
    rc = write_row(x, idx, req, &row, cmp.steps, cmp.n_steps);
    /* the request as sent, for the next one's rewarm */
    hx_api_req_free(&x->prev);
    x->prev = q;
    hx_api_req_init(&q);
    x->has_prev = true;
    free(x->prev_ids);
    x->prev_ids = basis->ids, x->n_prev = basis->n;
    if (basis == &srv) srv.ids = NULL;
    else srv_norm.ids = NULL;
out:
    eng_buf_free(&rep);
    free(cmp.steps);
    for (int k = 0; k < n_warm; k++) gen_run_free(&warm[k]);
    for (int k = 0; k < n_cold; k++) gen_run_free(&cold[k]);
    free(sent.ids);
    free(srv.ids);
    free(srv_norm.ids);
    hx_api_req_free(&q);
    if (have_loc) hx_prepared_free(&loc);
    if (have_norm) hx_prepared_free(&loc_norm);
    hx_request_free(&norm_req);
    return rc;
}

// ----------------------------------------------------------------------------
// The run

static json_t *opts_json(const probe_ctx *x) {
    const hx_probe_opts *o = x->o;
    return json_pack("{s:s, s:s, s:s, s:s, s:s, s:s?, s:s?, s:i, s:i, s:i, s:i, s:i, s:b, s:b, s:f, s:f, s:i}", "api",
                     o->api, "route", x->route == ROUTE_TOKENS ? "tokens" : "chat", "path", x->rt->path, "cold",
                     x->cold, "engine", hx_engine_name(x->rule.engine), "model", x->model_send, "normalize",
                     o->sp.normalize && o->sp.normalize[0] ? o->sp.normalize : NULL, "n_probs", o->n_probs, "decode",
                     o->sp.decode_n, "repeat", o->sp.repeat, "slot", o->id_slot, "grid", x->rule.grid, "cap_prompt",
                     x->rule.cap_prompt, "absent_reuse_is_zero", x->id.absent_is_zero, "timeout", o->timeout_s, "idle_timeout", o->idle_s, "limit", o->limit);
}

static void remove_db(const char *path) {
    char side[PATH_MAX + 8];
    unlink(path);
    const char *ext[] = {"-wal", "-shm", ".lock"};
    for (int i = 0; i < 3; i++) {
        snprintf(side, sizeof side, "%s%s", path, ext[i]);
        unlink(side);
    }
}

int hx_probe_run(const hx_probe_opts *o, hx_probe_summary *sum) {
    memset(sum, 0, sizeof *sum);
    probe_ctx x = {.o = o, .sum = sum};
    hx_api_req_init(&x.prev);
    char err[1024] = "", tmpdb[64] = "";
    int code = HX_EXIT_OK, rc;
    hx_transcript t = {0};
    json_t *oj = NULL;
    char *info_s = NULL, *opts_s = NULL;
    if (hx_probe_opts_check(o, err, sizeof err) != ENG_OK) {
        fprintf(stderr, "kvreplay: %s\n", err);
        return HX_EXIT_USAGE;
    }
    x.api = find_api(o->api);
    x.dialect = hx_api_dialect_find(x.api->dialect);

    /* the transcript, and the local rendering */
    int64_t n_bad = 0;
    if ((rc = hx_transcript_read(o->transcript_path, false, &t, &n_bad, err, sizeof err)) != ENG_OK) {
        fprintf(stderr, "kvreplay: %s\n", err);
        return hx_exit_for_input(rc);
    }
    int32_t n_req = t.n;
    if (o->limit > 0 && o->limit < n_req) n_req = o->limit;
    if (n_req == 0) {
        fprintf(stderr, "kvreplay: %s: no requests to probe (the transcript is empty)\n", o->transcript_path);
        code = HX_EXIT_USAGE;
        goto done;
    }
    if (o->sp.model_path) {
        if ((rc = hx_vocab_load(o->sp.model_path, &x.tok, &x.tmpl_meta, err, sizeof err)) != ENG_OK) {
            fprintf(stderr, "kvreplay: %s\n", err);
            code = hx_exit_for_input(rc);
            goto done;
        }
        x.n_vocab = eng_tokenizer_n_vocab(x.tok);
        if ((rc = hx_prepare_ctx_new(x.tok, o->sp.template_name, x.tmpl_meta, "", &x.pc, err, sizeof err)) ||
            (o->sp.normalize[0] &&
             (rc = hx_prepare_ctx_new(x.tok, o->sp.template_name, x.tmpl_meta, o->sp.normalize, &x.pc_norm, err, sizeof err)))) {
            fprintf(stderr, "kvreplay: %s\n", err);
            code = rc == ENG_ERR_NOMEM ? HX_EXIT_INTERNAL : HX_EXIT_USAGE;
            goto done;
        }
        hx_prepare_ctx_set_source(x.pc, o->transcript_path);
        if (x.pc_norm) hx_prepare_ctx_set_source(x.pc_norm, o->transcript_path);
    }

    /* the results database, before the server is asked anything (a bad path is a usage error) */
    if (!o->db_path) snprintf(tmpdb, sizeof tmpdb, "/tmp/kvreplay-probe-%ld.sqlite", (long)getpid());
    const char *db = o->db_path ? o->db_path : tmpdb;
    if ((rc = hx_store_open(db, &x.store, err, sizeof err)) != ENG_OK) {
        fprintf(stderr, "kvreplay: %s\n", err);
        code = rc == ENG_ERR_FORMAT || rc == ENG_ERR_UNSUPPORTED || rc == ENG_ERR_ARG ? HX_EXIT_USAGE : HX_EXIT_INTERNAL;
        goto done;
    }
    /* the server: its identity, its rule, the route and the cold method */
    hx_http_opts ho;
    hx_http_opts_default(&ho);
    ho.timeout_s = o->timeout_s;
    ho.idle_s = o->idle_s;
    ho.api_key = o->api_key;
    const char *anth_hdr[] = {"anthropic-version: 2023-06-01", NULL};
    if (!strcmp(x.api->name, "anthropic")) ho.headers = anth_hdr;
    if (!(x.http = hx_http_new(o->server, &ho))) {
        fprintf(stderr, "kvreplay: --server %s: cannot start an HTTP client (libcurl)\n", o->server);
        code = HX_EXIT_INTERNAL;
        goto done;
    }
    identify(&x);
    hx_engine e = !strcmp(o->engine, "auto") ? (x.api->engine != HX_ENGINE_UNKNOWN ? x.api->engine : x.id.engine)
                                              : (hx_engine)hx_engine_from_name(o->engine);
    hx_reuse_rule_default(&x.rule, e);
    if (o->grid > 0) x.rule.grid = o->grid;
    else if (x.id.grid > 0) x.rule.grid = x.id.grid;
    if (o->cap_prompt >= 0) x.rule.cap_prompt = o->cap_prompt;
    else if (x.id.cap_prompt >= 0) x.rule.cap_prompt = x.id.cap_prompt;
    if (!x.n_vocab) x.n_vocab = x.id.n_vocab;
    if (o->reports_reuse >= 0) x.id.absent_is_zero = o->reports_reuse == 1;
    if (o->n_probs < 0 && x.n_vocab <= 0) {
        fprintf(stderr, "kvreplay: --n-probs all: the vocabulary size is unknown (give -m, or a server whose "
                "/v1/models says n_vocab)\n");
        code = HX_EXIT_USAGE;
        goto done;
    }
    bool tokens = x.api->path_tokens && !strcmp(o->route, "tokens");
    if (!strcmp(o->route, "auto"))
        tokens = x.api->path_tokens && (!x.api->path_chat || x.tok || hx_request_kind_of(&t.reqs[0]) != HX_REQUEST_MESSAGES);
    x.route = tokens ? ROUTE_TOKENS : ROUTE_CHAT;
    const char *path = tokens ? x.api->path_tokens : x.api->path_chat;
    for (const hx_api_route *r = x.dialect->routes; r->path; r++)
        if (!strcmp(r->path, path)) x.rt = r;
    for (int32_t i = 0; i < n_req && x.route == ROUTE_CHAT; i++)
        if (hx_request_kind_of(&t.reqs[i]) != HX_REQUEST_MESSAGES) {
            fprintf(stderr, "kvreplay: %s:%lld: a %s request cannot be sent through %s (messages only)\n",
                    o->transcript_path, (long long)t.reqs[i].line,
                    hx_request_kind_of(&t.reqs[i]) == HX_REQUEST_PROMPT ? "raw prompt" : "tokenized", path);
            code = HX_EXIT_USAGE;
            goto done;
        }
    if (!strcmp(o->cold, "auto")) {
        if (!strcmp(x.api->name, "openai"))
            x.cold = e == HX_ENGINE_VLLM || e == HX_ENGINE_SGLANG ? "salt" : "cache-prompt";
        else {
            static char first[32];
            snprintf(first, sizeof first, "%.*s", (int)strcspn(x.api->colds, ","), x.api->colds);
            x.cold = first;
        }
    } else {
        x.cold = o->cold;
    }
    x.model_send = o->model_name ? o->model_name : x.id.n_models ? x.id.models[0] : "kvreplay";
    /* an empty warm cache to start from */
    char msg[400] = "";
    if (!strcmp(x.cold, "salt")) {
        fresh_salt(&x, x.salt_warm, sizeof x.salt_warm, "warm");
        x.held_known = true;
    } else {
        const char *clear = !strcmp(x.cold, "cache-prompt") ? "erase" : x.cold;
        x.held_known = cache_control(&x, clear, msg, sizeof msg) == ENG_OK;
        if (!x.held_known)
            say(&x, "the server's cache could not be emptied first (%s): the first request's reuse is not checked", msg);
    }

    /* the run */
    json_object_set_new(x.id.info, "engine", json_string(hx_engine_name(x.id.engine)));
    info_s = hx_json_canonical(x.id.info);
    oj = opts_json(&x);
    opts_s = oj ? hx_json_canonical(oj) : NULL;
    const json_t *props = json_object_get(x.id.info, "props");
    const char *mpath = json_string_value(json_object_get(props, "model_path"));
    hx_run_meta m;
    hx_run_meta_init(&m);
    m.experiment = o->experiment;
    m.variant = o->variant;
    m.n_requests = n_req;
    m.model_path = mpath ? mpath : x.model_send;
    m.model_name = x.model_send;
    m.transcript = o->transcript_path;
    m.template_name = x.pc ? hx_prepare_template_name(x.pc) : NULL;
    m.policy = "probe";
    m.quirks = "";
    m.normalize = o->sp.normalize;
    m.align = "server";
    m.chunk = x.rule.grid;
    m.kernel = "server";
    m.precision = "server";
    m.threads = 1;
    m.decode_n = o->sp.decode_n;
    m.cap_prompt = x.rule.cap_prompt;
    m.n_repeat = o->sp.repeat;
    m.block_size = x.rule.grid;
    m.server_url = o->server;
    m.server_api = o->api;
    m.server_engine = hx_engine_name(x.rule.engine);
    m.server_info = info_s;
    m.probe_opts = opts_s;
    if (!info_s || !opts_s || (rc = hx_store_begin_run(x.store, &m, &x.run_id, err, sizeof err)) != ENG_OK) {
        fprintf(stderr, "kvreplay: %s\n", err[0] ? err : "out of memory");
        code = HX_EXIT_INTERNAL;
        goto done;
    }
    sum->run_id = x.run_id;
    say(&x, "%s (%s, %s rule: %s%s, grid %d%s), %s, cold by %s, %d requests", o->server, o->api,
        hx_engine_name(x.rule.engine), x.rule.tree ? "every sequence kept" : "one slot",
        x.rule.cap_prompt ? ", capped at the cached prompt" : "", x.rule.grid, "", x.rt->path, x.cold, n_req);
    double t0 = eng_now_s();
    for (int32_t i = 0; i < n_req; i++) {
        bool stop = false;
        if (eng_stderr_is_tty() && !o->sp.quiet)
            fprintf(stderr, "\r[%d/%d] %s turn %d  %.1fs   ", i + 1, n_req, t.reqs[i].session, t.reqs[i].turn,
                    eng_now_s() - t0);
        if ((rc = probe_one(&x, i, &t.reqs[i], &stop)) != ENG_OK) {
            code = rc == ENG_ERR_ARG ? HX_EXIT_USAGE : HX_EXIT_INTERNAL;
            hx_store_finish_run(x.store, x.run_id, HX_RUN_FAILED, NULL, 0);
            goto done;
        }
        if (stop) {
            sum->stopped = true;
            fprintf(stderr, "kvreplay probe: the server at %s cannot be reached: stopped after request %d of %d\n",
                    o->server, i + 1, n_req);
            break;
        }
    }
    if (eng_stderr_is_tty() && !o->sp.quiet) fputc('\n', stderr);
    if ((rc = hx_store_finish_run(x.store, x.run_id, sum->stopped ? HX_RUN_FAILED : HX_RUN_DONE, err, sizeof err))) {
        fprintf(stderr, "kvreplay: %s\n", err);
        code = HX_EXIT_INTERNAL;
        goto done;
    }
    bool bad = sum->n_diverged || sum->n_reuse_less || sum->n_reuse_more || sum->n_failed;
    code = bad ? HX_EXIT_DIVERGED : HX_EXIT_OK;
    say(&x, "run %lld: %d requests, %d compared, %d identical (%.1f%%), reuse as expected in %d of %d checked "
        "(%d less, %d more, %d not checked), %d failed by the server (%.1fs) -> %s", (long long)x.run_id,
        sum->n_requests, sum->n_compared, sum->n_identical,
        sum->n_compared ? 100.0 * sum->n_identical / sum->n_compared : 0.0,
        sum->n_reuse_checked - sum->n_reuse_less - sum->n_reuse_more, sum->n_reuse_checked, sum->n_reuse_less,
        sum->n_reuse_more, sum->n_reuse_unknown, sum->n_failed, eng_now_s() - t0, o->db_path ? o->db_path : "(not kept)");
done:
    hx_store_close(x.store);
    if (tmpdb[0]) remove_db(tmpdb);
    json_decref(oj);
    free(info_s);
    free(opts_s);
    json_decref(x.id.info);
    for (int i = 0; i < x.id.n_models; i++) free(x.id.models[i]);
    hx_http_free(x.http);
    hx_held_free(&x.held);
    hx_api_req_free(&x.prev);
    free(x.prev_ids);
    hx_prepare_ctx_free(x.pc);
    hx_prepare_ctx_free(x.pc_norm);
    free(x.tmpl_meta);
    eng_tokenizer_free(x.tok);
    hx_transcript_free(&t);
    return code;
}
