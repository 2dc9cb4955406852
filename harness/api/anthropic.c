/*
 * harness/api/anthropic.c: Anthropic's Messages API (docs.anthropic.com:
 * Messages, Streaming Messages, Errors, Token counting):
 *
 *   POST /v1/messages (with or without ?beta=true)  system (a string or text blocks), messages
 *        (user, assistant and system roles; text, thinking, redacted_thinking, tool_use, tool_result,
 *        image and document blocks), tools, tool_choice, max_tokens, stream, stop_sequences;
 *        -> a message: content blocks, stop_reason, usage (input_tokens, cache_read_input_tokens,
 *           cache_creation_input_tokens, output_tokens)
 *   POST /v1/messages/count_tokens                  -> {"input_tokens"}
 *
 * A stream is message_start, ping, then per content block content_block_start,
 * content_block_delta (text_delta, thinking_delta and signature_delta,
 * input_json_delta) and content_block_stop, then message_delta (stop_reason,
 * usage) and message_stop; a failure after it began is an "error" event.
 * Errors are {"type": "error", "error": {"type", "message"}}; a prompt over
 * the context says "prompt is too long: N tokens > M maximum", the wording
 * Anthropic's API uses (and Claude Code looks for).
 *
 * usage: input_tokens is the prompt's tokens that did not come from the
 * cache and cache_read_input_tokens those that did, as llama-server fills
 * them; kvreplay writes cache_creation_input_tokens 0 (llama-server leaves
 * it out), so the three always sum to the prompt's tokens.
 *
 * The prompt rules are also `import --from anthropic`'s: one parser.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api.h"
#include "errors.h"
#include "json.h"
#include "status.h"
#include "str.h"

extern const hx_api_dialect hx_api_anthropic;

static int oom(hx_api_error *e) { return hx_api_errf(e, HX_API_ERR_SERVER, NULL, "out of memory"); }

// ----------------------------------------------------------------------------
// The prompt: system, tools, messages (shared with the importer)

static int message_from_json(const json_t *j, const char *path, int64_t line, const char *field, hx_block_opts *opts,
                             hx_message *out, char *err, size_t errlen) {
    memset(out, 0, sizeof *out);
    char f[320];
    if (!json_is_object(j)) {
        hx_errf_at(err, errlen, path, line, field, "expected a message object");
        return ENG_ERR_FORMAT;
    }
    /* other members (Claude Code 2.1.328's output_config, ...) are accepted: hx_api_note_unknown lists them */
    const json_t *jr = json_object_get(j, "role");
    const char *role = json_string_value(jr);
    hx_api_pathf(f, sizeof f, "%s.role", field);
    if (!role) {
        hx_errf_at(err, errlen, path, line, f, jr ? "expected a string" : "missing");
        return ENG_ERR_FORMAT;
    }
    if (!strcmp(role, "user")) out->role = HX_ROLE_USER;
    else if (!strcmp(role, "assistant")) out->role = HX_ROLE_ASSISTANT;
    else if (!strcmp(role, "system")) out->role = HX_ROLE_SYSTEM;  /* Claude Code 2.1.328 sends these */
    else {
        hx_errf_at(err, errlen, path, line, f, "unknown role \"%s\" (expected user, assistant or system)", role);
        return ENG_ERR_FORMAT;
    }
    hx_api_pathf(f, sizeof f, "%s.content", field);
    return hx_blocks_from_json_opts(json_object_get(j, "content"), path, line, f, opts, &out->blocks, &out->n_blocks,
                                    err, errlen);
}

int hx_api_anthropic_prompt(const json_t *body, const char *path, int64_t line, hx_block_opts *opts, hx_request *q,
                            char *err, size_t errlen) {
    memset(q, 0, sizeof *q);
    q->response.role = HX_ROLE_ASSISTANT;
    q->line = line;
    char f[320];
    int rc;
    const json_t *msgs = json_object_get(body, "messages");
    if (!json_is_array(msgs)) {
        hx_errf_at(err, errlen, path, line, "messages", msgs ? "expected an array" : "missing");
        return ENG_ERR_FORMAT;
    }
    if ((rc = hx_system_from_json(json_object_get(body, "system"), path, line, "system", &q->system, &q->n_system,
                                  err, errlen)) ||
        (rc = hx_tools_from_json(json_object_get(body, "tools"), path, line, "tools", &q->tools, &q->n_tools, err,
                                 errlen)))
        goto fail;
    size_t m = json_array_size(msgs);
    if (m > INT32_MAX / 2) {
        hx_errf_at(err, errlen, path, line, "messages", "too many messages");
        rc = ENG_ERR_FORMAT;
        goto fail;
    }
    if (m && !(q->messages = calloc(m, sizeof *q->messages))) {
        rc = ENG_ERR_NOMEM;
        goto fail;
    }
    for (size_t i = 0; i < m; i++) {
        hx_api_pathf(f, sizeof f, "messages[%zu]", i);
        if ((rc = message_from_json(json_array_get(msgs, i), path, line, f, opts, &q->messages[i], err, errlen)))
            goto fail;
        q->n_messages++;
    }
    return ENG_OK;
fail:
    hx_request_free(q);
    memset(q, 0, sizeof *q);
    return rc;
}

/* Blocks as Anthropic writes them. */
static json_t *block_json(const hx_block *b) {
    json_error_t je;
    switch (b->type) {
    case HX_BLOCK_TEXT:     return json_pack("{s:s, s:s}", "type", "text", "text", b->text);
    case HX_BLOCK_THINKING: return json_pack("{s:s, s:s, s:s}", "type", "thinking", "thinking", b->text, "signature", "");
    case HX_BLOCK_TOOL_USE:
        return json_pack("{s:s, s:s, s:s, s:o}", "type", "tool_use", "id", b->id, "name", b->name, "input",
                         json_loads(b->input ? b->input : "{}", 0, &je));
    case HX_BLOCK_TOOL_RESULT: {
        json_t *o = json_pack("{s:s, s:s, s:s}", "type", "tool_result", "tool_use_id", b->id, "content", b->text);
        if (o && b->is_error) json_object_set_new(o, "is_error", json_true());
        return o;
    }
    case HX_BLOCK_IMAGE:    return json_pack("{s:s, s:s}", "type", "image", "placeholder", b->text);
    }
    return NULL;
}

static json_t *blocks_json(const hx_block *bs, int32_t n) {
    json_t *a = json_array();
    for (int32_t i = 0; a && i < n; i++)
        if (json_array_append_new(a, block_json(&bs[i]))) { json_decref(a); return NULL; }
    return a;
}

/* The prompt part of a body (client side): system, messages (a tool message becomes a user
 * message of tool_result blocks), tools. */
static int prompt_json(const hx_request *q, json_t *o) {
    int bad = 0;
    if (q->n_system) bad = json_object_set_new(o, "system", blocks_json(q->system, q->n_system));
    json_t *msgs = json_array();
    for (int32_t i = 0; !bad && msgs && i < q->n_messages; i++) {
        const hx_message *m = &q->messages[i];
        const char *role = m->role == HX_ROLE_ASSISTANT ? "assistant" : m->role == HX_ROLE_SYSTEM ? "system" : "user";
        bad = json_array_append_new(msgs, json_pack("{s:s, s:o}", "role", role, "content",
                                                    blocks_json(m->blocks, m->n_blocks)));
    }
    bad = bad || !msgs || json_object_set_new(o, "messages", msgs);
    if (!bad && q->n_tools) {
        json_t *tools = json_array();
        for (int32_t i = 0; !bad && tools && i < q->n_tools; i++) {
            json_error_t je;
            bad = json_array_append_new(tools, json_pack("{s:s, s:s, s:o}", "name", q->tools[i].name, "description",
                                                         q->tools[i].description, "input_schema",
                                                         json_loads(q->tools[i].schema, 0, &je)));
        }
        bad = bad || !tools || json_object_set_new(o, "tools", tools);
    }
    return bad ? ENG_ERR_NOMEM : ENG_OK;
}

// ----------------------------------------------------------------------------
// Parsing requests (server side)

/* The body as far as kvreplay reads it (hx_api_note_unknown lists the rest; the importer walks it too). */
static const hx_api_shape k_result_block = {.tag = "type", .variants = (const hx_api_variant[]){
    HX_API_VARIANT("text", {"text", NULL}), HX_API_VARIANT("image", {"source", NULL}, {"placeholder", NULL}),
    HX_API_VARIANT("document", {"source", NULL}, {"placeholder", NULL}, {"title", NULL}),
    HX_API_VARIANT("tool_reference", {"tool_name", NULL}), {0}}};
static const hx_api_shape k_block = {.tag = "type", .variants = (const hx_api_variant[]){
    HX_API_VARIANT("text", {"text", NULL}), HX_API_VARIANT("thinking", {"thinking", NULL}),
    HX_API_VARIANT("redacted_thinking", {"data", NULL}),
    HX_API_VARIANT("tool_use", {"id", NULL}, {"name", NULL}, {"input", NULL}),
    HX_API_VARIANT("tool_result", {"tool_use_id", NULL}, {"is_error", NULL}, {"content", HX_API_ARR(&k_result_block)}),
    HX_API_VARIANT("image", {"source", NULL}, {"placeholder", NULL}),
    HX_API_VARIANT("document", {"source", NULL}, {"placeholder", NULL}, {"title", NULL}), {0}}};
const hx_api_shape hx_api_anthropic_body = {.members = HX_API_MEMBERS(
    {"model", NULL}, {"max_tokens", NULL}, {"stream", NULL}, {"stop_sequences", NULL}, {"tool_choice", NULL},
    {"system", HX_API_ARR(&k_block)},
    {"tools", HX_API_ARR(HX_API_OBJ({"name", NULL}, {"description", NULL}, {"input_schema", NULL}))},
    {"messages", HX_API_ARR(HX_API_OBJ({"role", NULL}, {"content", HX_API_ARR(&k_block)}))})};

static int parse_body(const hx_api_route *rt, const char *body, size_t n, bool need_max, hx_api_req *q,
                      hx_api_error *e) {
    json_t *j = hx_api_parse_begin(rt, body, n, q, e);
    if (!j) return ENG_ERR_FORMAT;
    hx_api_params *p = &q->params;
    hx_block_opts opts = {.lenient = true};
    char err[768];
    int rc = hx_api_anthropic_prompt(j, "", 0, &opts, &q->req, err, sizeof err);
    if (rc) {
        hx_api_err_from_text(e, rc, err);
        goto out;
    }
    q->n_unknown_blocks = opts.n_unknown;
    snprintf(q->unknown_types, sizeof q->unknown_types, "%s", opts.unknown_types);
    if ((rc = hx_api_get_str(j, "model", &p->model, e)) ||
        (rc = hx_api_get_int(j, "max_tokens", 1, INT32_MAX, &p->max_tokens, e)) ||
        (rc = hx_api_get_bool(j, "stream", &p->stream, e)) || (rc = hx_api_get_stop(j, "stop_sequences", p, e)) ||
        (rc = hx_api_read_sampling(j, &p->sampling, e)))
        goto out;
    if (need_max && p->max_tokens < 0) {
        rc = hx_api_errf(e, HX_API_ERR_INVALID, "max_tokens", "field required");
        goto out;
    }
    const json_t *tc = json_object_get(j, "tool_choice");
    if (tc && !json_is_null(tc)) {
        if (!json_is_object(tc)) {
            rc = hx_api_errf(e, HX_API_ERR_INVALID, "tool_choice", "expected an object");
            goto out;
        }
        if (!(p->tool_choice = hx_json_canonical(tc))) { rc = oom(e); goto out; }
    }
    if (hx_api_note_unknown(q, j, &hx_api_anthropic_body)) rc = oom(e);
out:
    json_decref(j);
    if (rc) hx_api_req_free(q);
    return rc;
}

static int parse_messages(const hx_api_route *rt, const char *path, const char *query, const char *body, size_t n,
                          hx_api_req *q, hx_api_error *e) {
    return parse_body(rt, body, n, true, q, e);
}

static int parse_count(const hx_api_route *rt, const char *path, const char *query, const char *body, size_t n,
                       hx_api_req *q, hx_api_error *e) {
    return parse_body(rt, body, n, false, q, e);
}

// ----------------------------------------------------------------------------
// Responses (server side)

static const char *stop_reason(const hx_api_result *r) {
    switch (r->finish) {
    case HX_API_FINISH_LENGTH:    return "max_tokens";
    case HX_API_FINISH_TOOL_USE:  return "tool_use";
    case HX_API_FINISH_STOP_WORD: return "stop_sequence";
    case HX_API_FINISH_NONE:      return NULL;
    default:                      return "end_turn";
    }
}

static json_t *usage_json(const hx_api_result *r, bool with_output) {
    int64_t p = r->usage.prompt_tokens > 0 ? r->usage.prompt_tokens : 0;
    int64_t c = r->usage.cached_tokens > 0 ? r->usage.cached_tokens : 0;
    int64_t w = r->usage.cache_creation_tokens > 0 ? r->usage.cache_creation_tokens : 0;
    int64_t o = with_output && r->usage.completion_tokens > 0 ? r->usage.completion_tokens : 0;
    return json_pack("{s:I, s:I, s:I, s:I}", "input_tokens", (json_int_t)(p - c - w), "cache_creation_input_tokens",
                     (json_int_t)w, "cache_read_input_tokens", (json_int_t)c, "output_tokens", (json_int_t)o);
}

static json_t *respond_message(const hx_api_req *q, const hx_api_result *r) {
    const char *sr = stop_reason(r);
    return json_pack("{s:s, s:s, s:s, s:s, s:o, s:o, s:o, s:o}", "id", r->id ? r->id : "msg_kvreplay", "type", "message",
                     "role", "assistant", "model", hx_api_model_of(q, r), "content",
                     blocks_json(r->content.blocks, r->content.n_blocks), "stop_reason",
                     sr ? json_string(sr) : json_null(), "stop_sequence",
                     r->stop_word ? json_string(r->stop_word) : json_null(), "usage", usage_json(r, true));
}

static json_t *respond_count(const hx_api_req *q, const hx_api_result *r) {
    return json_pack("{s:I}", "input_tokens", (json_int_t)(r->n_input_tokens >= 0 ? r->n_input_tokens : 0));
}

// ----------------------------------------------------------------------------
// Streaming (server side)

static int emit(hx_api_stream *s, const char *name, json_t *o) { return hx_sse_write_json(&s->out, name, o); }

static int close_block(hx_api_stream *s) {
    if (s->block < 0) return ENG_OK;
    int rc = ENG_OK;
    if (s->block_type == HX_BLOCK_THINKING)  /* a thinking block ends with its signature */
        rc = emit(s, "content_block_delta", json_pack("{s:s, s:i, s:{s:s, s:s}}", "type", "content_block_delta", "index",
                                                      s->block, "delta", "type", "signature_delta", "signature", ""));
    if (!rc) rc = emit(s, "content_block_stop", json_pack("{s:s, s:i}", "type", "content_block_stop", "index", s->block));
    s->block = -1;
    return rc;
}

static int open_block(hx_api_stream *s, hx_block_type type, const hx_block *b) {
    int rc = close_block(s);
    if (rc) return rc;
    json_t *cb = type == HX_BLOCK_THINKING ? json_pack("{s:s, s:s}", "type", "thinking", "thinking", "")
                 : type == HX_BLOCK_TOOL_USE ? json_pack("{s:s, s:s, s:s, s:{}}", "type", "tool_use", "id", b->id, "name",
                                                         b->name, "input")
                                             : json_pack("{s:s, s:s}", "type", "text", "text", "");
    s->block = s->n_blocks++;
    s->block_type = type;
    return emit(s, "content_block_start", json_pack("{s:s, s:i, s:o}", "type", "content_block_start", "index", s->block,
                                                    "content_block", cb));
}

static int delta(hx_api_stream *s, const char *dtype, const char *key, const char *text, size_t n) {
    return emit(s, "content_block_delta", json_pack("{s:s, s:i, s:{s:s, s:s%}}", "type", "content_block_delta", "index",
                                                    s->block, "delta", "type", dtype, key, text, n));
}

static int stream_begin(hx_api_stream *s) {
    const hx_api_result *r = s->r;
    int rc = emit(s, "message_start",
                  json_pack("{s:s, s:{s:s, s:s, s:s, s:s, s:[], s:n, s:n, s:o}}", "type", "message_start", "message",
                            "id", r->id ? r->id : "msg_kvreplay", "type", "message", "role", "assistant", "model",
                            hx_api_model_of(s->q, r), "content", "stop_reason", "stop_sequence", "usage",
                            usage_json(r, false)));
    return rc ? rc : emit(s, "ping", json_pack("{s:s}", "type", "ping"));
}

static int stream_token(hx_api_stream *s, const hx_api_token *t, const char *text, size_t n) {
    if (n == 0) return ENG_OK;  /* an incomplete character: it comes with the next token */
    int rc = ENG_OK;
    if (s->block < 0 || s->block_type != HX_BLOCK_TEXT) rc = open_block(s, HX_BLOCK_TEXT, NULL);
    return rc ? rc : delta(s, "text_delta", "text", text, n);
}

static int stream_block(hx_api_stream *s, const hx_block *b) {
    hx_block_type type = b->type == HX_BLOCK_THINKING || b->type == HX_BLOCK_TOOL_USE ? b->type : HX_BLOCK_TEXT;
    int rc = open_block(s, type, b);
    if (rc) return rc;
    if (type == HX_BLOCK_THINKING) rc = delta(s, "thinking_delta", "thinking", b->text, strlen(b->text));
    else if (type == HX_BLOCK_TOOL_USE) {
        const char *in = b->input ? b->input : "{}";
        rc = delta(s, "input_json_delta", "partial_json", in, strlen(in));
    } else if (b->text[0]) rc = delta(s, "text_delta", "text", b->text, strlen(b->text));
    return rc ? rc : close_block(s);
}

static int stream_end(hx_api_stream *s) {
    const hx_api_result *r = s->r;
    int rc = close_block(s);
    const char *sr = stop_reason(r);
    if (!rc)
        rc = emit(s, "message_delta", json_pack("{s:s, s:{s:o, s:o}, s:o}", "type", "message_delta", "delta",
                                                "stop_reason", sr ? json_string(sr) : json_string("end_turn"),
                                                "stop_sequence", r->stop_word ? json_string(r->stop_word) : json_null(),
                                                "usage", usage_json(r, true)));
    return rc ? rc : emit(s, "message_stop", json_pack("{s:s}", "type", "message_stop"));
}

// ----------------------------------------------------------------------------
// The client side

static json_t *request_message(const hx_api_req *q) {
    const hx_api_params *p = &q->params;
    json_t *o = json_pack("{s:s, s:i}", "model", p->model ? p->model : "kvreplay", "max_tokens",
                          p->max_tokens >= 0 ? p->max_tokens : 4096);
    if (!o || prompt_json(&q->req, o)) { json_decref(o); return NULL; }
    int bad = 0;
    if (p->stream) bad |= json_object_set_new(o, "stream", json_true());
    if (!isnan(p->sampling.temperature)) bad |= json_object_set_new(o, "temperature", json_real(p->sampling.temperature));
    if (p->sampling.top_k != INT32_MIN) bad |= json_object_set_new(o, "top_k", json_integer(p->sampling.top_k));
    if (p->n_stop) {
        json_t *st = json_array();
        for (int32_t i = 0; st && i < p->n_stop; i++) json_array_append_new(st, json_string(p->stop[i]));
        bad |= json_object_set_new(o, "stop_sequences", st);
    }
    if (p->tool_choice) {
        json_error_t je;
        bad |= json_object_set_new(o, "tool_choice", json_loads(p->tool_choice, 0, &je));
    }
    if (bad) { json_decref(o); return NULL; }
    return o;
}

static json_t *request_count(const hx_api_req *q) {
    json_t *o = json_pack("{s:s}", "model", q->params.model ? q->params.model : "kvreplay");
    if (!o || prompt_json(&q->req, o)) { json_decref(o); return NULL; }
    return o;
}

static hx_api_finish finish_of(const char *s) {
    if (!s) return HX_API_FINISH_NONE;
    if (!strcmp(s, "end_turn") || !strcmp(s, "pause_turn") || !strcmp(s, "refusal")) return HX_API_FINISH_STOP;
    if (!strcmp(s, "max_tokens") || !strcmp(s, "model_context_window_exceeded")) return HX_API_FINISH_LENGTH;
    if (!strcmp(s, "tool_use")) return HX_API_FINISH_TOOL_USE;
    if (!strcmp(s, "stop_sequence")) return HX_API_FINISH_STOP_WORD;
    return HX_API_FINISH_NONE;
}

/* usage -> r: prompt = input + cache_read + cache_creation. Fields absent keep r's values. */
static int read_usage(const json_t *u, const char *field, bool need_input, hx_api_result *r, hx_api_error *e) {
    if (!u) return need_input ? hx_api_errf(e, HX_API_ERR_INVALID, field, "missing") : ENG_OK;
    if (!json_is_object(u)) return hx_api_errf(e, HX_API_ERR_INVALID, field, "expected an object");
    const json_t *in = json_object_get(u, "input_tokens"), *cr = json_object_get(u, "cache_read_input_tokens"),
                 *cw = json_object_get(u, "cache_creation_input_tokens"), *out = json_object_get(u, "output_tokens");
    char f[96];
    if (in && !json_is_integer(in)) {
        hx_api_pathf(f, sizeof f, "%s.input_tokens", field);
        return hx_api_errf(e, HX_API_ERR_INVALID, f, "expected an integer");
    }
    if (!in && need_input) {
        hx_api_pathf(f, sizeof f, "%s.input_tokens", field);
        return hx_api_errf(e, HX_API_ERR_INVALID, f, "missing");
    }
    if (json_is_integer(cr)) r->usage.cached_tokens = json_integer_value(cr);
    if (json_is_integer(cw)) r->usage.cache_creation_tokens = json_integer_value(cw);
    if (in)
        r->usage.prompt_tokens = json_integer_value(in) + (r->usage.cached_tokens > 0 ? r->usage.cached_tokens : 0) +
                                 (r->usage.cache_creation_tokens > 0 ? r->usage.cache_creation_tokens : 0);
    if (json_is_integer(out)) r->usage.completion_tokens = json_integer_value(out);
    return ENG_OK;
}

static int read_message(const hx_api_route *rt, const char *body, size_t n, hx_api_result *r, hx_api_error *e) {
    hx_api_result_init(r);
    json_t *j = hx_api_load_body(body, n, e);
    if (!j) return ENG_ERR_FORMAT;
    int rc = ENG_OK;
    const char *type = json_string_value(json_object_get(j, "type"));
    const json_t *content = json_object_get(j, "content");
    if (!type || strcmp(type, "message")) rc = hx_api_errf(e, HX_API_ERR_INVALID, "type", "expected \"message\"");
    else if (!json_is_array(content)) rc = hx_api_errf(e, HX_API_ERR_INVALID, "content", content ? "expected an array" : "missing");
    if (!rc) {
        char err[768];
        rc = hx_blocks_from_json(content, "", 0, "content", &r->content.blocks, &r->content.n_blocks, err, sizeof err);
        if (rc) hx_api_err_from_text(e, rc, err);
    }
    const char *id = json_string_value(json_object_get(j, "id")), *model = json_string_value(json_object_get(j, "model"));
    if (!rc && ((id && !(r->id = hx_strdup(id))) || (model && !(r->model = hx_strdup(model))))) rc = oom(e);
    if (!rc) {
        const json_t *sr = json_object_get(j, "stop_reason"), *ss = json_object_get(j, "stop_sequence");
        if (!json_is_string(sr)) rc = hx_api_errf(e, HX_API_ERR_INVALID, "stop_reason", sr ? "expected a string" : "missing");
        else r->finish = finish_of(json_string_value(sr));
        if (!rc && json_is_string(ss) && !(r->stop_word = hx_strdup(json_string_value(ss)))) rc = oom(e);
    }
    if (!rc) rc = read_usage(json_object_get(j, "usage"), "usage", true, r, e);
    json_decref(j);
    if (rc) hx_api_result_free(r);
    return rc;
}

static int read_count(const hx_api_route *rt, const char *body, size_t n, hx_api_result *r, hx_api_error *e) {
    return hx_api_read_count(body, n, "input_tokens", r, e);
}

/* Closes the reader's open block into r->content. */
static int reader_close(hx_api_reader *rd) {
    if (rd->block < 0) return ENG_OK;
    hx_block b;
    int rc;
    const char *text = rd->text.data ? rd->text.data : "";
    if (rd->block_type == HX_BLOCK_TOOL_USE) {
        char *in = rd->text.len ? hx_json_canonical_text(text, rd->text.len) : hx_strdup("{}");
        if (!in) return hx_api_errf(rd->e, HX_API_ERR_INVALID, "input_json_delta", "the tool input is not JSON: %.80s", text);
        rc = hx_block_init(&b, HX_BLOCK_TOOL_USE, "", rd->block_id ? rd->block_id : "", rd->block_name ? rd->block_name : "",
                           in, false);
        free(in);
        if (rc == ENG_ERR_FORMAT) return hx_api_errf(rd->e, HX_API_ERR_INVALID, "input_json_delta", "the tool input is not a JSON object");
    } else {
        rc = hx_block_init(&b, (hx_block_type)rd->block_type, text, NULL, NULL, NULL, false);
    }
    if (rc || hx_message_push_block(&rd->r->content, &b)) return oom(rd->e);
    rd->block = -1;
    rd->text.len = 0;
    free(rd->block_id);
    free(rd->block_name);
    rd->block_id = rd->block_name = NULL;
    return ENG_OK;
}

static int stream_read(hx_api_reader *rd, const hx_sse_event *ev) {
    hx_api_result *r = rd->r;
    hx_api_error *e = rd->e;
    json_error_t je;
    json_t *j = json_loadb(ev->data, ev->n, JSON_ALLOW_NUL, &je);  /* a token may be "\u0000" */
    const char *type = json_string_value(json_object_get(j, "type"));
    int rc = ENG_OK;
    if (!json_is_object(j) || !type) {
        rc = hx_api_errf(e, HX_API_ERR_INVALID, NULL, "an event that is not a typed JSON object: %.80s", ev->data);
        goto out;
    }
    if (!strcmp(type, "ping")) goto out;
    if (!strcmp(type, "error")) {
        if (!hx_api_read_error_json(&hx_api_anthropic, j, 0, e)) hx_api_errf(e, HX_API_ERR_SERVER, NULL, "an error event: %.120s", ev->data);
        rc = ENG_ERR_FORMAT;
        goto out;
    }
    if (!strcmp(type, "message_start")) {
        const json_t *m = json_object_get(j, "message");
        const char *id = json_string_value(json_object_get(m, "id")), *model = json_string_value(json_object_get(m, "model"));
        if (!json_is_object(m)) rc = hx_api_errf(e, HX_API_ERR_INVALID, "message", "missing in message_start");
        else if ((id && !r->id && !(r->id = hx_strdup(id))) || (model && !r->model && !(r->model = hx_strdup(model)))) rc = oom(e);
        else rc = read_usage(json_object_get(m, "usage"), "message.usage", true, r, e);
    } else if (!strcmp(type, "content_block_start")) {
        const json_t *cb = json_object_get(j, "content_block"), *idx = json_object_get(j, "index");
        const char *bt = json_string_value(json_object_get(cb, "type"));
        if ((rc = reader_close(rd))) goto out;
        if (!json_is_integer(idx) || !bt) {
            rc = hx_api_errf(e, HX_API_ERR_INVALID, "content_block", "a content_block_start without index or type");
            goto out;
        }
        rd->block = (int32_t)json_integer_value(idx);
        rd->block_type = !strcmp(bt, "thinking") || !strcmp(bt, "redacted_thinking") ? HX_BLOCK_THINKING
                         : !strcmp(bt, "tool_use") || !strcmp(bt, "server_tool_use") ? HX_BLOCK_TOOL_USE
                                                                                     : HX_BLOCK_TEXT;
        if (rd->block_type == HX_BLOCK_TOOL_USE &&
            (!(rd->block_id = hx_strdup(json_string_value(json_object_get(cb, "id")))) ||
             !(rd->block_name = hx_strdup(json_string_value(json_object_get(cb, "name"))))))
            rc = hx_api_errf(e, HX_API_ERR_INVALID, "content_block", "a tool_use block without id or name");
        const char *t0 = json_string_value(json_object_get(cb, rd->block_type == HX_BLOCK_THINKING ? "thinking" : "text"));
        if (!rc && t0 && *t0 && eng_buf_append(&rd->text, t0, strlen(t0))) rc = oom(e);
    } else if (!strcmp(type, "content_block_delta")) {
        const json_t *d = json_object_get(j, "delta");
        const char *dt = json_string_value(json_object_get(d, "type"));
        if (rd->block < 0 || !dt) {
            rc = hx_api_errf(e, HX_API_ERR_INVALID, "delta", "a content_block_delta outside a block");
            goto out;
        }
        const char *key = !strcmp(dt, "text_delta") ? "text" : !strcmp(dt, "thinking_delta") ? "thinking"
                          : !strcmp(dt, "input_json_delta") ? "partial_json" : NULL;
        const char *t = key ? json_string_value(json_object_get(d, key)) : NULL;
        if (t && *t) {
            rd->n_token_events++;
            if (eng_buf_append(&rd->text, t, strlen(t))) rc = oom(e);
        }
    } else if (!strcmp(type, "content_block_stop")) {
        rc = reader_close(rd);
    } else if (!strcmp(type, "message_delta")) {
        const json_t *d = json_object_get(j, "delta");
        const char *sr = json_string_value(json_object_get(d, "stop_reason"));
        const char *ss = json_string_value(json_object_get(d, "stop_sequence"));
        if (sr) r->finish = finish_of(sr);
        if (ss && !r->stop_word && !(r->stop_word = hx_strdup(ss))) rc = oom(e);
        if (!rc) rc = read_usage(json_object_get(j, "usage"), "usage", false, r, e);
    } else if (!strcmp(type, "message_stop")) {
        rc = reader_close(rd);
        rd->done = true;
    }  /* other event types are ignored, as the API's versioning policy asks */
out:
    json_decref(j);
    if (rc) rd->failed = true;
    return rc;
}

// ----------------------------------------------------------------------------
// The dialect

static const hx_api_route anthropic_routes[] = {
    {"POST", "/v1/messages", HX_API_OP_GENERATE, &hx_api_anthropic, parse_messages, respond_message, request_message,
     read_message, stream_begin, stream_token, stream_block, stream_end, stream_read, NULL},
    {"POST", "/v1/messages/count_tokens", HX_API_OP_COUNT_TOKENS, &hx_api_anthropic, parse_count, respond_count,
     request_count, read_count, NULL, NULL, NULL, NULL, NULL, NULL},
    {0},
};

/* {"type": "error", "error": {"type", "message"}}; in a stream, an "error" event */
static const char *const anthropic_error_types[HX_API_ERR_KINDS] = {
    [HX_API_ERR_INVALID] = "invalid_request_error", [HX_API_ERR_AUTH] = "authentication_error",
    [HX_API_ERR_NOT_FOUND] = "not_found_error",     [HX_API_ERR_TOO_LARGE] = "request_too_large",
    [HX_API_ERR_SERVER] = "api_error",              [HX_API_ERR_UNAVAILABLE] = "overloaded_error",
};

static const hx_api_error_shape anthropic_errors = {
    .type_key = "type",
    .types = anthropic_error_types,
    .envelope = true,
    .context_message = "prompt is too long: %lld tokens > %lld maximum",
    .stream_event = "error",
};

const hx_api_dialect hx_api_anthropic = {
    .name = "anthropic",
    .routes = anthropic_routes,
    .errors = &anthropic_errors,
};
