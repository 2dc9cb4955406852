/*
 * harness/probe/probe.c: `kvreplay probe`'s options and its run (probe.h
 * tells the steps of a request, docs/probe.md is the guide). The server
 * kinds it knows are one table (k_apis below): the dialect and routes each
 * --api speaks, its cold methods; whose cache rule applies comes from the
 * server's identity (reuse.h). A request's steps are request.c's, the
 * exchanges with the server exchange.c's.
 *
 * The run: its setup (the transcript and the local rendering; the results
 * database, before the server is asked anything; the server's identity and
 * cache rule; the route; the cold method; an emptied cache; the run's row),
 * the requests in order (a refused connection stops there), its end (the
 * run's status, the verdict). Nothing here exits: an error is said on
 * stderr and becomes the exit code returned.
 */
#include "probe.h"
#include "probe_int.h"

#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "errors.h"
#include "json.h"
#include "options.h"
#include "status.h"
#include "transcript.h"

// ----------------------------------------------------------------------------
// The APIs probe speaks: one line each (a new server kind is one line here;
// docs/where-does-my-change-go.md)

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
    {"responses", "responses", NULL, "/v1/responses", "erase", HX_ENGINE_UNKNOWN, "OpenAI's Responses API (kvreplay serve)"},
    {"gemini", "gemini", NULL, "/v1beta/models/*:streamGenerateContent", "erase", HX_ENGINE_UNKNOWN,
     "the Gemini API (kvreplay serve)"},
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
    o->concurrency = 1;
    o->load_repeat = 1;
    o->load_seed = 1;
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
     OPT(sp.repeat), 1, PROBE_MAX_RUNS, NULL},
    {"--slot", NULL, "ID", "llama-server slot to pin (id_slot; -1: none; default 0)", HX_OPT_INT, OPT(id_slot), -1,
     1 << 20, NULL},
    {"--timeout", NULL, "S", "seconds for one exchange (default 600)", HX_OPT_DOUBLE, OPT(timeout_s), 0.1, 1e6, NULL},
    {"--idle-timeout", NULL, "S", "seconds without a byte from the server (default 60)", HX_OPT_DOUBLE, OPT(idle_s),
     0.1, 1e6, NULL},
    {"--limit", NULL, "N", "probe at most the first N requests (default 0: all)", HX_OPT_INT, OPT(limit), 0, 1 << 30,
     NULL},
    {"--concurrency", NULL, "K", "each request also sent (cold) while K-1 filler generations run on the server:\n"
     "its probabilities alone and under load compared bit for bit (default 1: off)", HX_OPT_INT, OPT(concurrency), 1,
     256, NULL},
    {"--load-repeat", NULL, "N", "with --concurrency K: sent N times under load, each time beside a seeded number\n"
     "(0 to K-1) of fillers: the distinct outputs and probabilities counted (default 1)", HX_OPT_INT, OPT(load_repeat),
     1, 1 << 20, NULL},
    {"--load-seed", NULL, "S", "the seed of the fillers' numbers and prompts (default 1; recorded)", HX_OPT_INT64,
     OPT(load_seed), 0, 9.2e18, NULL},
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
    else if (o->sp.repeat < 1 || o->sp.repeat > PROBE_MAX_RUNS || o->sp.decode_n < 1)
        eng_errf(err, errlen, "--repeat %d, --decode %d: expected --repeat in [1, %d] and --decode >= 1",
                 o->sp.repeat, o->sp.decode_n, PROBE_MAX_RUNS);
    else return ENG_OK;
    return ENG_ERR_ARG;
}

// ----------------------------------------------------------------------------
// The run: setup

/* The run's state beyond what a request reads (probe_ctx). */
typedef struct probe_run {
    probe_ctx            x;          /* what the requests share */
    const hx_probe_opts *o;
    hx_probe_summary    *sum;
    hx_transcript        t;
    int32_t              n_req;      /* requests probed: the transcript's, at most --limit */
    char                 tmpdb[64];  /* the temporary results database ("": -o given) */
    double               t0;
} probe_run;

/* -m: the prompts rendered and tokenized as replay does, plainly and after the --normalize rules. */
static int local_rendering(probe_run *run) {
    probe_ctx *x = &run->x;
    const hx_probe_opts *o = run->o;
    char err[1024];
    int rc;
    if ((rc = hx_vocab_load(o->sp.model_path, &x->tok, &x->tmpl_meta, err, sizeof err)) != ENG_OK) {
        fprintf(stderr, "kvreplay: %s\n", err);
        return hx_exit_for_input(rc);
    }
    x->n_vocab = eng_tokenizer_n_vocab(x->tok);
    bool normalizing = o->sp.normalize && o->sp.normalize[0];
    if ((rc = hx_prepare_ctx_new(x->tok, o->sp.template_name, x->tmpl_meta, "", &x->pc, err, sizeof err)) ||
        (normalizing && (rc = hx_prepare_ctx_new(x->tok, o->sp.template_name, x->tmpl_meta, o->sp.normalize,
                                                 &x->pc_norm, err, sizeof err)))) {
        fprintf(stderr, "kvreplay: %s\n", err);
        return rc == ENG_ERR_NOMEM ? HX_EXIT_INTERNAL : HX_EXIT_USAGE;
    }
    hx_prepare_ctx_set_source(x->pc, o->transcript_path);
    if (x->pc_norm) hx_prepare_ctx_set_source(x->pc_norm, o->transcript_path);
    return HX_EXIT_OK;
}

/* The transcript (at least one request), the local rendering, and the results database, before the
 * server is asked anything (a bad path is a usage error). */
static int open_inputs(probe_run *run) {
    probe_ctx *x = &run->x;
    const hx_probe_opts *o = run->o;
    char err[1024];
    int64_t n_bad = 0;
    int rc;
    if ((rc = hx_transcript_read(o->transcript_path, false, &run->t, &n_bad, err, sizeof err)) != ENG_OK) {
        fprintf(stderr, "kvreplay: %s\n", err);
        return hx_exit_for_input(rc);
    }
    run->n_req = run->t.n;
    if (o->limit > 0 && o->limit < run->n_req) run->n_req = o->limit;
    if (run->n_req == 0) {
        fprintf(stderr, "kvreplay: %s: no requests to probe (the transcript is empty)\n", o->transcript_path);
        return HX_EXIT_USAGE;
    }
    if (o->sp.model_path && (rc = local_rendering(run)) != HX_EXIT_OK) return rc;
    if (!o->db_path) snprintf(run->tmpdb, sizeof run->tmpdb, "/tmp/kvreplay-probe-%ld.sqlite", (long)getpid());
    if ((rc = hx_store_open(o->db_path ? o->db_path : run->tmpdb, &x->store, err, sizeof err)) != ENG_OK) {
        fprintf(stderr, "kvreplay: %s\n", err);
        return rc == ENG_ERR_FORMAT || rc == ENG_ERR_UNSUPPORTED || rc == ENG_ERR_ARG ? HX_EXIT_USAGE
                                                                                      : HX_EXIT_INTERNAL;
    }
    return HX_EXIT_OK;
}

/* The server: an HTTP client, its identity, and the cache rule the expected reuse follows (--engine,
 * --grid, --cap-prompt, --reports-reuse over what the identity says). */
static int meet_server(probe_run *run) {
    probe_ctx *x = &run->x;
    const hx_probe_opts *o = run->o;
    hx_http_opts ho;
    hx_http_opts_default(&ho);
    ho.timeout_s = o->timeout_s;
    ho.idle_s = o->idle_s;
    ho.api_key = o->api_key;
    const char *anth_hdr[] = {"anthropic-version: 2023-06-01", NULL};
    if (!strcmp(x->api->name, "anthropic")) ho.headers = anth_hdr;
    x->http_opts = ho;
    x->concurrency = o->concurrency;
    x->load_repeat = o->load_repeat;
    x->load_seed = (uint64_t)o->load_seed;
    if (!(x->http = hx_http_new(o->server, &ho))) {
        fprintf(stderr, "kvreplay: --server %s: cannot start an HTTP client (libcurl)\n", o->server);
        return HX_EXIT_INTERNAL;
    }
    probe_identify(x);
    hx_engine e = !strcmp(o->engine, "auto") ? (x->api->engine != HX_ENGINE_UNKNOWN ? x->api->engine : x->id.engine)
                                             : (hx_engine)hx_engine_from_name(o->engine);
    hx_reuse_rule_default(&x->rule, e);
    if (o->grid > 0) x->rule.grid = o->grid;
    else if (x->id.grid > 0) x->rule.grid = x->id.grid;
    if (o->cap_prompt >= 0) x->rule.cap_prompt = o->cap_prompt;
    else if (x->id.cap_prompt >= 0) x->rule.cap_prompt = x->id.cap_prompt;
    if (!x->n_vocab) x->n_vocab = x->id.n_vocab;
    x->n_probs = o->n_probs < 0 ? x->n_vocab : o->n_probs;
    if (o->reports_reuse >= 0) x->id.absent_is_zero = o->reports_reuse == 1;
    if (o->n_probs < 0 && x->n_vocab <= 0) {
        fprintf(stderr, "kvreplay: --n-probs all: the vocabulary size is unknown (give -m, or a server whose "
                "/v1/models says n_vocab)\n");
        return HX_EXIT_USAGE;
    }
    x->model_send = o->model_name ? o->model_name : x->id.n_models ? x->id.models[0] : "kvreplay";
    return HX_EXIT_OK;
}

/* The route (token ids where the API and -m allow, or as --route says; else the messages, which
 * every request must then be) and the cold method (--cold, or the API's default). */
static int choose_route(probe_run *run) {
    probe_ctx *x = &run->x;
    const hx_probe_opts *o = run->o;
    const hx_request *reqs = run->t.reqs;
    bool tokens = x->api->path_tokens && !strcmp(o->route, "tokens");
    if (!strcmp(o->route, "auto"))
        tokens = x->api->path_tokens && (!x->api->path_chat || x->tok || hx_request_kind_of(&reqs[0]) != HX_REQUEST_MESSAGES);
    x->route = tokens ? PROBE_ROUTE_TOKENS : PROBE_ROUTE_CHAT;
    const char *path = tokens ? x->api->path_tokens : x->api->path_chat;
    for (const hx_api_route *r = x->dialect->routes; r->path; r++)
        if (!strcmp(r->path, path)) x->rt = r;
    for (int32_t i = 0; i < run->n_req && x->route == PROBE_ROUTE_CHAT; i++)
        if (hx_request_kind_of(&reqs[i]) != HX_REQUEST_MESSAGES) {
            fprintf(stderr, "kvreplay: %s:%lld: a %s request cannot be sent through %s (messages only)\n",
                    o->transcript_path, (long long)reqs[i].line,
                    hx_request_kind_of(&reqs[i]) == HX_REQUEST_PROMPT ? "raw prompt" : "tokenized", path);
            return HX_EXIT_USAGE;
        }
    if (strcmp(o->cold, "auto")) {
        x->cold = o->cold;
    } else if (!strcmp(x->api->name, "openai")) {
        x->cold = x->rule.engine == HX_ENGINE_VLLM || x->rule.engine == HX_ENGINE_SGLANG ? "salt" : "cache-prompt";
    } else {
        snprintf(x->cold_first, sizeof x->cold_first, "%.*s", (int)strcspn(x->api->colds, ","), x->api->colds);
        x->cold = x->cold_first;
    }
    return HX_EXIT_OK;
}

/* An empty warm cache to start from: a fresh warm salt, or the cache control the cold method
 * allows; when none works, the first request's reuse is not checked. */
static void start_empty(probe_ctx *x) {
    char msg[400] = "";
    if (!strcmp(x->cold, "salt")) {
        probe_fresh_salt(x, x->salt_warm, sizeof x->salt_warm, "warm");
        x->held_known = true;
        return;
    }
    const char *clear = !strcmp(x->cold, "cache-prompt") ? "erase" : x->cold;
    x->held_known = probe_cache_control(x, clear, msg, sizeof msg) == ENG_OK;
    if (!x->held_known)
        probe_say(x, "the server's cache could not be emptied first (%s): the first request's reuse is not checked", msg);
}

/* The flags as given and as resolved, for runs.probe_opts. */
static json_t *opts_json(const probe_run *run) {
    const probe_ctx *x = &run->x;
    const hx_probe_opts *o = run->o;
    return json_pack("{s:s, s:s, s:s, s:s, s:s, s:s?, s:s?, s:i, s:i, s:i, s:i, s:i, s:b, s:b, s:f, s:f, s:i, s:i, "
                     "s:i, s:I}",
                     "api",
                     o->api, "route", x->route == PROBE_ROUTE_TOKENS ? "tokens" : "chat", "path", x->rt->path, "cold",
                     x->cold, "engine", hx_engine_name(x->rule.engine), "model", x->model_send, "normalize",
                     o->sp.normalize && o->sp.normalize[0] ? o->sp.normalize : NULL, "n_probs", o->n_probs, "decode",
                     o->sp.decode_n, "repeat", o->sp.repeat, "slot", o->id_slot, "grid", x->rule.grid, "cap_prompt",
                     x->rule.cap_prompt, "absent_reuse_is_zero", x->id.absent_is_zero, "timeout", o->timeout_s,
                     "idle_timeout", o->idle_s, "limit", o->limit, "concurrency", o->concurrency, "load_repeat",
                     o->load_repeat, "load_seed", (json_int_t)o->load_seed);
}

/* The `probe` run's row: the server's URL, identity and engine, the flags. */
static int begin_run(probe_run *run) {
    probe_ctx *x = &run->x;
    const hx_probe_opts *o = run->o;
    char err[1024] = "";
    json_object_set_new(x->id.info, "engine", json_string(hx_engine_name(x->id.engine)));
    char *info_s = hx_json_canonical(x->id.info);
    json_t *oj = opts_json(run);
    char *opts_s = oj ? hx_json_canonical(oj) : NULL;
    const char *mpath = json_string_value(json_object_get(json_object_get(x->id.info, "props"), "model_path"));
    hx_run_meta m;
    hx_run_meta_init(&m);
    m.exp.experiment = o->experiment;
    m.exp.variant = o->variant;
    m.n_requests = run->n_req;
    m.model_path = mpath ? mpath : x->model_send;
    m.model_name = x->model_send;
    m.transcript = o->transcript_path;
    m.template_name = x->pc ? hx_prepare_template_name(x->pc) : NULL;
    m.policy = "probe";
    m.quirks = "";
    m.normalize = o->sp.normalize;
    m.align = "server";
    m.chunk = x->rule.grid;
    m.kernel = "server";
    m.precision = "server";
    m.threads = 1;
    m.decode_n = o->sp.decode_n;
    m.cap_prompt = x->rule.cap_prompt;
    m.price.n_repeat = o->sp.repeat;
    m.pol.block_size = x->rule.grid;
    m.probe.server_url = o->server;
    m.probe.server_api = o->api;
    m.probe.server_engine = hx_engine_name(x->rule.engine);
    m.probe.server_info = info_s;
    m.probe.probe_opts = opts_s;
    int code = HX_EXIT_OK;
    if (!info_s || !opts_s || hx_store_begin_run(x->store, &m, &x->run_id, err, sizeof err) != ENG_OK) {
        fprintf(stderr, "kvreplay: %s\n", err[0] ? err : "out of memory");
        code = HX_EXIT_INTERNAL;
    }
    json_decref(oj);
    free(info_s);
    free(opts_s);
    return code;
}

static int run_setup(probe_run *run) {
    probe_ctx *x = &run->x;
    int code;
    if ((code = open_inputs(run)) || (code = meet_server(run)) || (code = choose_route(run))) return code;
    start_empty(x);
    if ((code = begin_run(run))) return code;
    run->sum->run_id = x->run_id;
    probe_say(x, "%s (%s, %s rule: %s%s, grid %d%s), %s, cold by %s, %d requests", run->o->server, run->o->api,
              hx_engine_name(x->rule.engine), x->rule.tree ? "every sequence kept" : "one slot",
              x->rule.cap_prompt ? ", capped at the cached prompt" : "", x->rule.grid, "", x->rt->path, x->cold,
              run->n_req);
    return HX_EXIT_OK;
}

// ----------------------------------------------------------------------------
// The run: the requests, the end

/* A request's outcome, added to the summary. */
static void count(hx_probe_summary *sum, const probe_outcome *out) {
    sum->n_requests += out->written;
    sum->n_failed += out->failed;
    if (!out->compared) return;
    sum->n_compared++;
    if (out->identical) sum->n_identical++;
    else sum->n_diverged++;
    if (out->reuse == PROBE_REUSE_UNKNOWN) sum->n_reuse_unknown++;
    else sum->n_reuse_checked++;
    sum->n_reuse_less += out->reuse == PROBE_REUSE_LESS;
    sum->n_reuse_more += out->reuse == PROBE_REUSE_MORE;
    sum->n_batch_checked += out->batch_checked;
    sum->n_batch_differ += out->batch_checked && !out->batch_identical;
}

/* Every request in order; a refused connection stops there (the run then fails). An error that is
 * not the server's fails the run and is the exit code. */
static int run_requests(probe_run *run) {
    probe_ctx *x = &run->x;
    const hx_probe_opts *o = run->o;
    run->t0 = eng_now_s();
    for (int32_t i = 0; i < run->n_req; i++) {
        const hx_request *req = &run->t.reqs[i];
        if (eng_stderr_is_tty() && !o->sp.quiet)
            fprintf(stderr, "\r[%d/%d] %s turn %d  %.1fs   ", i + 1, run->n_req, req->session, req->turn,
                    eng_now_s() - run->t0);
        probe_outcome out;
        int rc = probe_request(x, i, &run->t.reqs[i], &out);
        count(run->sum, &out);
        if (rc != ENG_OK) {
            hx_store_finish_run(x->store, x->run_id, HX_RUN_FAILED, NULL, 0);
            return rc == ENG_ERR_ARG ? HX_EXIT_USAGE : HX_EXIT_INTERNAL;
        }
        if (out.stop) {
            run->sum->stopped = true;
            fprintf(stderr, "kvreplay probe: the server at %s cannot be reached: stopped after request %d of %d\n",
                    o->server, i + 1, run->n_req);
            break;
        }
    }
    if (eng_stderr_is_tty() && !o->sp.quiet) fputc('\n', stderr);
    return HX_EXIT_OK;
}

/* The run's status, and the verdict: 1 when a request differed, reused other than expected or
 * failed, else 0. */
static int run_end(probe_run *run) {
    probe_ctx *x = &run->x;
    const hx_probe_opts *o = run->o;
    const hx_probe_summary *sum = run->sum;
    char err[1024];
    if (hx_store_finish_run(x->store, x->run_id, sum->stopped ? HX_RUN_FAILED : HX_RUN_DONE, err, sizeof err)) {
        fprintf(stderr, "kvreplay: %s\n", err);
        return HX_EXIT_INTERNAL;
    }
    bool bad = sum->n_diverged || sum->n_reuse_less || sum->n_reuse_more || sum->n_failed || sum->n_batch_differ;
    if (o->concurrency > 1)
        probe_say(x, "under load (%d at once): %d of %d requests bit-identical to the same request alone", o->concurrency,
                  sum->n_batch_checked - sum->n_batch_differ, sum->n_batch_checked);
    probe_say(x, "run %lld: %d requests, %d compared, %d identical (%.1f%%), reuse as expected in %d of %d checked "
              "(%d less, %d more, %d not checked), %d failed by the server (%.1fs) -> %s", (long long)x->run_id,
              sum->n_requests, sum->n_compared, sum->n_identical,
              sum->n_compared ? 100.0 * sum->n_identical / sum->n_compared : 0.0,
              sum->n_reuse_checked - sum->n_reuse_less - sum->n_reuse_more, sum->n_reuse_checked, sum->n_reuse_less,
              sum->n_reuse_more, sum->n_reuse_unknown, sum->n_failed, eng_now_s() - run->t0,
              o->db_path ? o->db_path : "(not kept)");
    return bad ? HX_EXIT_DIVERGED : HX_EXIT_OK;
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

static void run_free(probe_run *run) {
    probe_ctx *x = &run->x;
    hx_store_close(x->store);
    if (run->tmpdb[0]) remove_db(run->tmpdb);
    probe_ident_free(&x->id);
    hx_http_free(x->http);
    hx_held_free(&x->held);
    hx_api_req_free(&x->prev);
    free(x->prev_ids);
    hx_prepare_ctx_free(x->pc);
    hx_prepare_ctx_free(x->pc_norm);
    free(x->tmpl_meta);
    eng_tokenizer_free(x->tok);
    hx_transcript_free(&run->t);
}

int hx_probe_run(const hx_probe_opts *o, hx_probe_summary *sum) {
    memset(sum, 0, sizeof *sum);
    char err[1024];
    if (hx_probe_opts_check(o, err, sizeof err) != ENG_OK) {
        fprintf(stderr, "kvreplay: %s\n", err);
        return HX_EXIT_USAGE;
    }
    probe_run run;
    memset(&run, 0, sizeof run);
    probe_ctx *x = &run.x;
    run.o = o;
    run.sum = sum;
    x->sp = &o->sp;
    x->transcript = o->transcript_path;
    x->id_slot = o->id_slot;
    x->api = find_api(o->api);
    x->dialect = hx_api_dialect_find(x->api->dialect);
    hx_api_req_init(&x->prev);
    hx_normalize_parse(o->sp.normalize, &x->nz);
    int code = run_setup(&run);
    if (code == HX_EXIT_OK) code = run_requests(&run);
    if (code == HX_EXIT_OK) code = run_end(&run);
    run_free(&run);
    return code;
}
