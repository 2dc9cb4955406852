/*
 * harness/probe/exchange.c: what `kvreplay probe` says to a server and reads
 * back (probe_int.h): its identity endpoints, the read-backs of its own
 * tokens (/apply-template, /tokenize), its cache controls (erase, reset,
 * flush), one streamed generation and what its answer must carry, the
 * generation requests as sent (greedy, streamed, the cold method's fields),
 * and a generation under load: sent while K filler generations stream on
 * their own connections (one thread each, closed when it is done).
 *
 * Contracts: nothing sent is rewritten from the transcript (the token route
 * sends the ids given); a generation's failure is data (probe_gen.fail and
 * its message: the row says it), only the lack of memory is an error;
 * probabilities are kept as the exact JSON text the server wrote.
 */
#include "probe_int.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "bits.h"
#include "status.h"
#include "str.h"
#include "transcript.h"

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

static void add_model(probe_ident *id, const char *name) {
    if (!name || !*name || id->n_models == (int)(sizeof id->models / sizeof id->models[0])) return;
    for (int i = 0; i < id->n_models; i++)
        if (!strcmp(id->models[i], name)) return;
    id->models[id->n_models++] = hx_strdup(name);
}

/* GET path: its JSON when it answers 200 with JSON, else NULL. */
static json_t *get_json(probe_ctx *x, const char *path) {
    json_t *j;
    char msg[256];
    return exchange_json(x, "GET", path, NULL, &j, msg, sizeof msg) == 200 ? j : NULL;
}

/* /props (llama-server, kvreplay serve): the engine, the model, kvreplay serve's cache rule. */
static void identify_props(probe_ctx *x, const json_t *j) {
    probe_ident *id = &x->id;
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

/* /v1/models (everyone): the model names, vLLM's and SGLang's owned_by, a vocabulary size. */
static void identify_models(probe_ctx *x, const json_t *j) {
    probe_ident *id = &x->id;
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

/* vLLM's /version, and in dev mode (VLLM_SERVER_DEV_MODE=1) the whole config with the block size. */
static void identify_vllm(probe_ctx *x) {
    json_t *j = get_json(x, "/version");
    if (j) json_object_set(x->id.info, "version", j);
    json_decref(j);
    if (!(j = get_json(x, "/server_info?config_format=json"))) return;
    json_object_set(x->id.info, "server_info", j);
    const json_t *cfg = json_object_get(j, "vllm_config");  /* an object, or (older) its text */
    const json_t *bs = json_object_get(json_object_get(cfg, "cache_config"), "block_size");
    const char *txt = json_string_value(cfg), *at = txt ? strstr(txt, "block_size=") : NULL;
    if (json_is_integer(bs) && json_integer_value(bs) > 0) x->id.grid = (int32_t)json_integer_value(bs);
    else if (at && atoi(at + 11) > 0) x->id.grid = atoi(at + 11);
    json_decref(j);
}

/* SGLang's /get_server_info: the page size, and whether it reports a cached count of 0. */
static void identify_sglang(probe_ctx *x) {
    json_t *j = get_json(x, "/get_server_info");
    if (json_is_object(j)) {
        json_object_set(x->id.info, "server_info", j);
        const json_t *ps = json_object_get(j, "page_size"), *cr = json_object_get(j, "enable_cache_report");
        if (json_is_integer(ps) && json_integer_value(ps) > 0) x->id.grid = (int32_t)json_integer_value(ps);
        x->id.absent_is_zero = json_is_true(cr);
    }
    json_decref(j);
}

void probe_identify(probe_ctx *x) {
    probe_ident *id = &x->id;
    id->info = json_object();
    id->cap_prompt = -1;
    json_t *j = get_json(x, "/props");
    if (json_is_object(j)) {
        json_object_set(id->info, "props", j);
        identify_props(x, j);
    }
    json_decref(j);
    j = get_json(x, "/v1/models");
    if (json_is_object(j)) {
        json_object_set(id->info, "models", j);
        identify_models(x, j);
    }
    json_decref(j);
    hx_engine e = x->api->engine != HX_ENGINE_UNKNOWN ? x->api->engine : id->engine;
    if (e == HX_ENGINE_VLLM) identify_vllm(x);
    if (e == HX_ENGINE_SGLANG) identify_sglang(x);
}

void probe_ident_free(probe_ident *id) {
    json_decref(id->info);
    for (int i = 0; i < id->n_models; i++) free(id->models[i]);
    memset(id, 0, sizeof *id);
}

int probe_tokenize(probe_ctx *x, const char *text, bool add_special, int32_t **ids, int32_t *n, char *msg,
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
static void append_as_llama_renders(json_t *msgs, const hx_message *m) {
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

static json_t *anthropic_as_llama_renders(const hx_request *q) {
    json_t *msgs = json_array(), *o = json_object();
    eng_buf sys = {0};
    for (int32_t i = 0; i < q->n_system; i++) eng_buf_append(&sys, q->system[i].text, strlen(q->system[i].text));
    if (q->n_system) json_array_append_new(msgs, json_pack("{s:s, s:s}", "role", "system", "content", sys.data ? sys.data : ""));
    eng_buf_free(&sys);
    for (int32_t i = 0; i < q->n_messages; i++) append_as_llama_renders(msgs, &q->messages[i]);
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

int probe_render_ids(probe_ctx *x, const hx_request *req, int32_t **ids, int32_t *n, char *msg, size_t cap) {
    json_t *b = json_object();
    if (!strcmp(x->api->dialect, "anthropic")) {
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
    int rc = probe_tokenize(x, text, true, ids, n, msg, cap);
    json_decref(j);
    return rc;
}

int probe_cache_control(probe_ctx *x, const char *what, char *msg, size_t cap) {
    char path[96];
    if (!strcmp(what, "erase")) snprintf(path, sizeof path, "/slots/%d?action=erase", x->id_slot >= 0 ? x->id_slot : 0);
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
    probe_gen          *g;
    hx_api_reader       rd;
    hx_api_error        e;
    double              t_now;
    const hx_api_route *rt;
} stream_ctx;

/* The JSON paths where each dialect's token event carries that token's probabilities. */
static const char *const k_prob_paths[] = {"completion_probabilities.0", "choices.0.logprobs.content.0",
                                           "choices.0.logprobs", "logprobs.0", "candidates.0.logprobsResult", NULL};

/* The text an event of any dialect carries ("" when none). */
static const char *event_text(const json_t *j) {
    const json_t *c0 = json_array_get(json_object_get(j, "choices"), 0), *d = json_object_get(j, "delta");
    const char *t = json_string_value(json_object_get(j, "content"));
    if (!t) t = json_string_value(json_object_get(json_object_get(c0, "delta"), "content"));
    if (!t) t = json_string_value(json_object_get(c0, "text"));
    if (!t) t = json_string_value(json_object_get(d, "text"));
    if (!t) t = json_string_value(json_object_get(d, "thinking"));
    if (!t) t = json_string_value(json_object_get(d, "partial_json"));
    if (!t) t = json_string_value(d);  /* Responses: output_text.delta */
    if (!t) t = json_string_value(json_object_get(json_array_get(json_object_get(json_object_get(
                    json_array_get(json_object_get(j, "candidates"), 0), "content"), "parts"), 0), "text"));  /* Gemini */
    return t ? t : "";
}

/* A parsed event: the time of the first token-bearing one, position 0's probabilities as the server
 * wrote them, and each event's text. */
static void on_event(void *ud, const hx_sse_event *ev, bool token_bearing) {
    stream_ctx *s = ud;
    probe_gen *g = s->g;
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
    const char *t = event_text(j);
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

void probe_gen_fail(probe_gen *g, const char *kind, const char *fmt, ...) {
    g->fail = kind;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(g->msg, sizeof g->msg, fmt, ap);
    va_end(ap);
}

/* What went wrong with an exchange that came back with rc and hr, if anything: into g->fail. */
static void classify(const probe_ctx *x, int rc, const hx_http_resp *hr, stream_ctx *s, probe_gen *g) {
    bool http_error = hr->status >= 400 || (rc == ENG_OK && hr->status != 200);
    if (http_error) {
        hx_api_error e;
        memset(&e, 0, sizeof e);
        if (hx_api_read_error(x->dialect, hr->body.data ? hr->body.data : "", hr->body.len, (int)hr->status, &e))
            probe_gen_fail(g, "http", "HTTP %ld: %s", hr->status, e.message);
        else
            probe_gen_fail(g, "http", "HTTP %ld with a body that is not %s's error shape: %.160s", hr->status,
                           x->dialect->name, hr->body.data ? hr->body.data : "(empty)");
    } else if (rc != ENG_OK && hr->fail == HX_HTTP_ABORTED) {
        probe_gen_fail(g, read_fail_kind(&s->e), "%s", s->e.message);
    } else if (rc != ENG_OK) {
        probe_gen_fail(g, hx_http_fail_name(hr->fail), "%s", hr->message);
    } else if (hx_api_reader_finish(&s->rd, &g->r, &s->e) != ENG_OK) {
        probe_gen_fail(g, read_fail_kind(&s->e), "%s", s->e.message);
    }
}

/* What a whole response must carry: a prompt token count, and a model the server lists or was asked for. */
static void check_answer(const probe_ctx *x, const hx_api_req *q, probe_gen *g) {
    const hx_api_result *r = &g->r;
    if (r->usage.prompt_tokens < 0 && r->timings.prompt_n < 0)
        probe_gen_fail(g, "field", "the response gives no prompt token count (usage.prompt_tokens, tokens_evaluated, "
                       "input_tokens)");
    else if (r->model && x->id.n_models) {  /* a server that lies about its model */
        bool ok = q->params.model && !strcmp(r->model, q->params.model);
        for (int i = 0; !ok && i < x->id.n_models; i++) ok = !strcmp(r->model, x->id.models[i]);
        if (!ok)
            probe_gen_fail(g, "model", "the response names model \"%s\", but the server lists \"%s\"%s and the "
                           "request asked for \"%s\"", r->model, x->id.models[0],
                           x->id.n_models > 1 ? " (and others)" : "", q->params.model ? q->params.model : "");
    }
}

/* The generated positions: ids and texts from the tokens when the API gives them, else the events. */
static int positions(probe_gen *g) {
    const hx_api_result *r = &g->r;
    int32_t n = r->n_tokens > 0 ? r->n_tokens : g->n_texts;
    g->ids = malloc(sizeof(int32_t) * (size_t)(n > 0 ? n : 1));
    if (!g->ids) return ENG_ERR_NOMEM;
    for (int32_t k = 0; k < n; k++) g->ids[k] = r->n_tokens > 0 ? r->tokens[k].id : -1;
    g->n_gen = n;
    return ENG_OK;
}

int probe_generate(probe_ctx *x, hx_api_req *q, probe_gen *g) {
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
    char target[320];
    int rc = hx_api_route_target(x->rt, x->model_send, target, sizeof target);
    if (!rc) rc = hx_http_do(x->http, "POST", target, body, strlen(body), on_bytes, &s, &hr);
    free(body);
    if (rc == ENG_ERR_NOMEM) {
        hx_api_reader_free(&s.rd);
        return rc;
    }
    g->status = hr.status;
    classify(x, rc, &hr, &s, g);
    if (g->t_first >= 0) g->ttft_ms = g->t_first - hr.pretransfer_ms;
    hx_http_resp_free(&hr);
    hx_api_reader_free(&s.rd);
    if (g->fail) return ENG_OK;
    check_answer(x, q, g);
    return positions(g);
}

void probe_gen_free(probe_gen *g) {
    hx_api_result_free(&g->r);
    free(g->first_json);
    eng_buf_free(&g->texts);
    free(g->ids);
    memset(g, 0, sizeof *g);
}

int64_t probe_gen_n_prompt(const probe_gen *g) {
    return g->r.usage.prompt_tokens >= 0 ? g->r.usage.prompt_tokens : g->r.timings.prompt_n;
}

int64_t probe_gen_reused(const probe_ctx *x, const probe_gen *g) {
    if (g->r.usage.cached_tokens >= 0) return g->r.usage.cached_tokens;
    if (g->r.timings.cache_n >= 0) return g->r.timings.cache_n;
    return x->id.absent_is_zero ? 0 : -1;
}

const char *probe_gen_text(const probe_gen *g, int32_t k, size_t *len) {
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
void probe_fresh_salt(probe_ctx *x, char *out, size_t cap, const char *what) {
    static int64_t n_salts;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    snprintf(out, cap, "kvreplay-probe-%ld-%lld%09ld-%s%lld", (long)getpid(), (long long)ts.tv_sec, ts.tv_nsec, what,
             (long long)n_salts++);
    x->salt_seq++;
}

/* Builds the generation request of a transcript request: the prompt (ids, or the messages), greedy,
 * streamed, decode_n tokens, K probabilities. */
int probe_build_req(probe_ctx *x, const hx_request *req, const int32_t *ids, int32_t n_ids, hx_api_req *q) {
    hx_api_req_init(q);
    q->route = x->rt;
    int rc;
    if (x->route == PROBE_ROUTE_TOKENS) {
        q->req.tokens = malloc(sizeof(int32_t) * (size_t)(n_ids > 0 ? n_ids : 1));
        if (!q->req.tokens) return ENG_ERR_NOMEM;
        memcpy(q->req.tokens, ids, sizeof(int32_t) * (size_t)n_ids);
        q->req.n_tokens = n_ids;
        if (!(q->req.session = hx_strdup(""))) return ENG_ERR_NOMEM;
    } else if ((rc = hx_request_copy(&q->req, req)) != ENG_OK) {
        return rc;
    }
    hx_api_params *p = &q->params;
    p->max_tokens = x->sp->decode_n;
    p->stream = true;
    p->include_usage = true;
    int32_t k = x->no_probs[0] ? 0 : x->n_probs;
    p->n_probs = k > 0 ? k : 0;
    p->logprobs = p->n_probs > 0;
    p->return_tokens = true;  /* llama-server: the generated ids also without probabilities */
    p->return_token_ids = x->api->engine == HX_ENGINE_VLLM || x->api->engine == HX_ENGINE_SGLANG;
    p->sampling.temperature = 0;
    p->id_slot = x->id_slot;
    if (x->model_send && !(p->model = hx_strdup(x->model_send))) return ENG_ERR_NOMEM;
    return ENG_OK;
}

int probe_set_warm(probe_ctx *x, hx_api_req *q) {
    q->params.cache_prompt = true;
    free(q->params.cache_salt);
    q->params.cache_salt = NULL;
    if (!strcmp(x->cold, "salt") && !(q->params.cache_salt = hx_strdup(x->salt_warm))) return ENG_ERR_NOMEM;
    return ENG_OK;
}

int probe_set_cold(probe_ctx *x, hx_api_req *q, char *msg, size_t cap) {
    q->params.cache_prompt = true;
    free(q->params.cache_salt);
    q->params.cache_salt = NULL;
    if (!strcmp(x->cold, "cache-prompt")) q->params.cache_prompt = false;
    else if (!strcmp(x->cold, "salt")) {
        char s[96];
        probe_fresh_salt(x, s, sizeof s, "cold");
        if (!(q->params.cache_salt = hx_strdup(s))) return ENG_ERR_NOMEM;
    } else {
        return probe_cache_control(x, x->cold, msg, cap);
    }
    return ENG_OK;
}


// ----------------------------------------------------------------------------
// A generation under load (--concurrency K)

/* A filler: its own connection, streaming a long generation until the probe's run is over. */
typedef struct filler {
    probe_ctx      *x;
    char           *body;
    char            target[320];
    atomic_bool     started, stop, ended;  /* a byte of its stream came; the probe's run is over; it ended by itself */
    pthread_t       th;
    bool            running;
} filler;

static int filler_bytes(void *ud, const char *bytes, size_t n, double t_ms) {
    filler *f = ud;
    atomic_store(&f->started, true);
    return atomic_load(&f->stop);  /* nonzero: the connection closes, the server drops the request */
}

static void *filler_main(void *arg) {
    filler *f = arg;
    hx_http *h = hx_http_new(hx_http_base(f->x->http), &f->x->http_opts);
    hx_http_resp hr;
    if (h) {
        hx_http_do(h, "POST", f->target, f->body, strlen(f->body), filler_bytes, f, &hr);
        hx_http_resp_free(&hr);
    }
    if (!atomic_load(&f->stop)) atomic_store(&f->ended, true);  /* over before the probe's run was */
    atomic_store(&f->started, true);
    hx_http_free(h);
    return NULL;
}

/* Filler i's request: on the token route the target's ids rotated by a seeded amount and cut to a seeded
 * length, a quarter to a half of the target's (other tokens, another length, room left in a slot of the
 * target's size to go on generating); else the target's own messages; a long greedy generation, never
 * from the cache. */
static int filler_req(probe_ctx *x, const hx_api_req *q, int32_t i, uint64_t seed, hx_api_req *out) {
    const int32_t *ids = q->req.tokens;
    int32_t n = q->req.n_tokens, m = 0, *rot = NULL;
    if (x->route == PROBE_ROUTE_TOKENS && n > 1) {
        uint32_t s = 0x9E3779B9u * (uint32_t)(i + 1) ^ (uint32_t)(seed * 0x85EBCA6Bu) ^ (uint32_t)(seed >> 32);
        m = n / 4 + 1 + (int32_t)(s % (uint32_t)(n / 4 + 1));  /* a quarter to a half of it: room to generate */
        if (!(rot = malloc(sizeof(int32_t) * (size_t)m))) return ENG_ERR_NOMEM;
        for (int32_t k = 0; k < m; k++) rot[k] = ids[(k + (int32_t)(s >> 8) % n) % n];
    }
    int rc = probe_build_req(x, &q->req, rot ? rot : ids, rot ? m : n, out);
    free(rot);
    if (rc) return rc;
    out->params.max_tokens = 64 * x->sp->decode_n + 256;
    out->params.n_probs = 0;
    out->params.logprobs = false;
    out->params.cache_prompt = false;
    out->params.id_slot = x->id_slot >= 0 ? x->id_slot + 1 + i : -1;  /* never the target's pinned slot */
    char salt[96];
    probe_fresh_salt(x, salt, sizeof salt, "filler");
    if (!strcmp(x->cold, "salt") && !(out->params.cache_salt = hx_strdup(salt))) return ENG_ERR_NOMEM;
    return ENG_OK;
}

int probe_generate_loaded(probe_ctx *x, hx_api_req *q, int32_t k, uint64_t seed, probe_gen *g, int32_t *n_overlap) {
    *n_overlap = 0;
    filler *fs = calloc((size_t)(k > 0 ? k : 1), sizeof *fs);
    if (!fs) return ENG_ERR_NOMEM;
    int rc = ENG_OK;
    for (int32_t i = 0; i < k && rc == ENG_OK; i++) {
        filler *f = &fs[i];
        f->x = x;
        hx_api_req fq;
        if ((rc = filler_req(x, q, i, seed, &fq)) == ENG_OK) {
            json_t *b = x->rt->request(&fq);
            f->body = b ? json_dumps(b, JSON_COMPACT) : NULL;
            json_decref(b);
            if (!f->body) rc = ENG_ERR_NOMEM;
        }
        hx_api_req_free(&fq);
        if (rc == ENG_OK) rc = hx_api_route_target(x->rt, x->model_send, f->target, sizeof f->target);
        if (rc == ENG_OK) f->running = pthread_create(&f->th, NULL, filler_main, f) == 0;
    }
    /* every filler's stream has begun (its prompt is in: it is decoding), or ended, or the exchange timed out */
    for (double t0 = eng_now_s(); rc == ENG_OK && eng_now_s() - t0 < x->http_opts.timeout_s;) {
        bool all = true;
        for (int32_t i = 0; i < k; i++) all = all && (!fs[i].running || atomic_load(&fs[i].started));
        if (all) break;
        usleep(2000);
    }
    if (rc == ENG_OK) rc = probe_generate(x, q, g);
    for (int32_t i = 0; i < k; i++) {
        filler *f = &fs[i];
        *n_overlap += f->running && !atomic_load(&f->ended);  /* still generating when the target was done */
        atomic_store(&f->stop, true);
    }
    for (int32_t i = 0; i < k; i++) {
        if (fs[i].running) pthread_join(fs[i].th, NULL);
        free(fs[i].body);
    }
    free(fs);
    return rc;
}
