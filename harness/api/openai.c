/*
 * harness/api/openai.c: the OpenAI API as OpenAI defines it and llama-server,
 * vLLM and SGLang serve it:
 *
 *   POST /v1/chat/completions (/chat/completions)  messages, tools, tool_choice, max_tokens |
 *        max_completion_tokens, stream, stream_options.include_usage, logprobs + top_logprobs, stop;
 *        -> choices[0].message (content, reasoning_content, tool_calls), logprobs.content,
 *           usage (prompt_tokens_details.cached_tokens), timings
 *   POST /v1/completions                           prompt (a string or token ids), logprobs
 *   GET  /v1/models (/models)
 *
 * The chat message rules (system and developer messages before the first
 * other message become system blocks; content a string, null or parts;
 * reasoning_content; tool_calls with arguments as a JSON object or a string
 * holding one; tool messages) are also the importers' (`import --from
 * openai`, `--from swe-agent`): one parser. Streams are chat.completion.chunk
 * (or text_completion) objects, a usage chunk with empty choices when
 * stream_options.include_usage, and "data: [DONE]". Token probabilities
 * (logprobs.content) are llama-server's list (id, token, bytes, logprob,
 * top_logprobs), for /v1/completions too; the reader also takes OpenAI's
 * legacy completions shape (tokens, token_logprobs, top_logprobs). llama-
 * server's own fields (cache_prompt, id_slot, n_probs) are accepted here as
 * llama-server accepts them.
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

extern const hx_api_dialect hx_api_openai;

#define FIELD_MAX 320

// ----------------------------------------------------------------------------
// Chat messages -> hx_request (shared with the importers)

static void fieldf(char *out, const char *fmt, const char *a, size_t i) { hx_api_pathf(out, FIELD_MAX, fmt, a, i); }

static int push_block(hx_message *m, hx_block *b) {
    if (hx_message_push_block(m, b)) {
        hx_block_free(b);
        return ENG_ERR_NOMEM;
    }
    return ENG_OK;
}

/* content: a string, null or an array of parts -> blocks appended to m. */
static int oa_content(const json_t *c, const char *path, int64_t line, const char *field, hx_message *m,
                      bool skip_empty, char *err, size_t errlen) {
    char f[FIELD_MAX], g[FIELD_MAX];
    hx_block b;
    if (!c || json_is_null(c)) return ENG_OK;
    if (json_is_string(c)) {
        if (skip_empty && json_string_length(c) == 0) return ENG_OK;
        if (hx_block_init(&b, HX_BLOCK_TEXT, json_string_value(c), NULL, NULL, NULL, false)) return ENG_ERR_NOMEM;
        return push_block(m, &b);
    }
    if (!json_is_array(c)) {
        hx_errf_at(err, errlen, path, line, field, "expected a string, null or an array of parts");
        return ENG_ERR_FORMAT;
    }
    for (size_t i = 0; i < json_array_size(c); i++) {
        const json_t *p = json_array_get(c, i);
        fieldf(f, "%s[%zu]", field, i);
        const char *type = json_is_object(p) ? json_string_value(json_object_get(p, "type")) : NULL;
        if (!type) {
            hx_errf_at(err, errlen, path, line, f, "expected a content part with a string \"type\"");
            return ENG_ERR_FORMAT;
        }
        const char *ph = NULL;
        if (!strcmp(type, "text") || !strcmp(type, "refusal")) {
            const json_t *t = json_object_get(p, type);
            if (!json_is_string(t)) {
                hx_api_pathf(g, sizeof g, "%s.%s", f, type);
                hx_errf_at(err, errlen, path, line, g, t ? "expected a string" : "missing");
                return ENG_ERR_FORMAT;
            }
            if (hx_block_init(&b, HX_BLOCK_TEXT, json_string_value(t), NULL, NULL, NULL, false)) return ENG_ERR_NOMEM;
        } else {
            if (!strcmp(type, "image_url") || !strcmp(type, "image")) ph = "[image]";
            else if (!strcmp(type, "input_audio")) ph = "[audio]";
            else if (!strcmp(type, "file")) ph = "[file]";
            else {
                hx_api_pathf(g, sizeof g, "%s.type", f);
                hx_errf_at(err, errlen, path, line, g, "unknown content part type \"%s\"", type);
                return ENG_ERR_FORMAT;
            }
            if (hx_block_init(&b, HX_BLOCK_IMAGE, ph, NULL, NULL, NULL, false)) return ENG_ERR_NOMEM;
        }
        if (push_block(m, &b)) return ENG_ERR_NOMEM;
    }
    return ENG_OK;
}

/* Flattens content (string, null, parts) into one string joined by "\n". */
static int oa_flat(const json_t *c, const char *path, int64_t line, const char *field, char **out, char *err,
                   size_t errlen) {
    hx_message m = {0};
    *out = NULL;
    int rc = oa_content(c, path, line, field, &m, false, err, errlen);
    if (rc) {
        hx_message_free(&m);
        return rc;
    }
    eng_buf b = {0};
    for (int32_t i = 0; i < m.n_blocks && !rc; i++)
        if ((i && eng_buf_append(&b, "\n", 1)) || eng_buf_append(&b, m.blocks[i].text, strlen(m.blocks[i].text)))
            rc = ENG_ERR_NOMEM;
    hx_message_free(&m);
    if (!rc && !b.data && eng_buf_append(&b, "", 0)) rc = ENG_ERR_NOMEM;
    if (rc) {
        eng_buf_free(&b);
        return rc;
    }
    *out = b.data;
    return ENG_OK;
}

/* arguments: a JSON object, a string holding one, "" or null -> canonical JSON (malloc'd). */
static int tool_arguments(const json_t *args, const char *path, int64_t line, const char *field, char **out,
                          char *err, size_t errlen) {
    char g[FIELD_MAX];
    *out = NULL;
    if (json_is_object(args)) *out = hx_json_canonical(args);
    else if (!args || json_is_null(args) || (json_is_string(args) && json_string_length(args) == 0))
        *out = hx_strdup("{}");
    else if (json_is_string(args)) {
        json_error_t je;
        json_t *a = json_loadb(json_string_value(args), json_string_length(args), JSON_REJECT_DUPLICATES, &je);
        bool obj = json_is_object(a);
        if (obj) *out = hx_json_canonical(a);
        json_decref(a);
        if (!obj) {
            hx_api_pathf(g, sizeof g, "%s.function.arguments", field);
            hx_errf_at(err, errlen, path, line, g, "not a JSON object");
            return ENG_ERR_FORMAT;
        }
    } else {
        hx_api_pathf(g, sizeof g, "%s.function.arguments", field);
        hx_errf_at(err, errlen, path, line, g, "expected a JSON object or a string holding one");
        return ENG_ERR_FORMAT;
    }
    return *out ? ENG_OK : ENG_ERR_NOMEM;
}

static int oa_tool_calls(const json_t *calls, const char *path, int64_t line, const char *field, hx_message *m,
                         char *err, size_t errlen) {
    char f[FIELD_MAX], g[FIELD_MAX];
    if (!calls || json_is_null(calls)) return ENG_OK;
    if (!json_is_array(calls)) {
        hx_api_pathf(f, sizeof f, "%s.tool_calls", field);
        hx_errf_at(err, errlen, path, line, f, "expected an array");
        return ENG_ERR_FORMAT;
    }
    for (size_t i = 0; i < json_array_size(calls); i++) {
        const json_t *c = json_array_get(calls, i);
        const json_t *fn = json_is_object(c) ? json_object_get(c, "function") : NULL;
        const char *id = json_is_object(c) ? json_string_value(json_object_get(c, "id")) : NULL;
        const char *name = json_is_object(fn) ? json_string_value(json_object_get(fn, "name")) : NULL;
        hx_api_pathf(f, sizeof f, "%s.tool_calls[%zu]", field, i);
        if (!id || !name) {
            if (!json_is_object(c)) hx_api_pathf(g, sizeof g, "%s", f);
            else hx_api_pathf(g, sizeof g, "%s.%s", f, !id ? "id" : "function.name");
            hx_errf_at(err, errlen, path, line, g, !json_is_object(c) ? "expected a tool call object" : "missing or not a string");
            return ENG_ERR_FORMAT;
        }
        char *input = NULL;
        int rc = tool_arguments(json_is_object(fn) ? json_object_get(fn, "arguments") : NULL, path, line, f, &input,
                                err, errlen);
        if (rc) return rc;
        hx_block b;
        rc = hx_block_init(&b, HX_BLOCK_TOOL_USE, "", id, name, input, false) ? ENG_ERR_NOMEM : push_block(m, &b);
        free(input);
        if (rc) return rc;
    }
    return ENG_OK;
}

int hx_api_openai_message(const json_t *j, const char *path, int64_t line, const char *field, hx_message *m,
                          bool *is_system, char *err, size_t errlen) {
    memset(m, 0, sizeof *m);
    *is_system = false;
    char f[FIELD_MAX];
    int rc;
    if (!json_is_object(j)) {
        hx_errf_at(err, errlen, path, line, field, "expected a message object");
        return ENG_ERR_FORMAT;
    }
    const json_t *jr = json_object_get(j, "role");
    const char *role = json_string_value(jr);
    hx_api_pathf(f, sizeof f, "%s.content", field);
    const json_t *content = json_object_get(j, "content");
    if (!role) {
        hx_api_pathf(f, sizeof f, "%s.role", field);
        hx_errf_at(err, errlen, path, line, f, jr ? "expected a string" : "missing");
        return ENG_ERR_FORMAT;
    }
    if (!strcmp(role, "system") || !strcmp(role, "developer")) {
        *is_system = true;
        m->role = HX_ROLE_SYSTEM;
        rc = oa_content(content, path, line, f, m, false, err, errlen);
    } else if (!strcmp(role, "user")) {
        m->role = HX_ROLE_USER;
        rc = oa_content(content, path, line, f, m, false, err, errlen);
    } else if (!strcmp(role, "assistant")) {
        m->role = HX_ROLE_ASSISTANT;
        const json_t *rsn = json_object_get(j, "reasoning_content");
        rc = ENG_OK;
        if (json_is_string(rsn) && json_string_length(rsn) > 0) {
            hx_block b;
            if (hx_block_init(&b, HX_BLOCK_THINKING, json_string_value(rsn), NULL, NULL, NULL, false)) return ENG_ERR_NOMEM;
            if (push_block(m, &b)) return ENG_ERR_NOMEM;
        }
        const json_t *calls = json_object_get(j, "tool_calls");
        rc = oa_content(content, path, line, f, m, json_array_size(calls) > 0, err, errlen);
        if (!rc) rc = oa_tool_calls(calls, path, line, field, m, err, errlen);
    } else if (!strcmp(role, "tool")) {
        m->role = HX_ROLE_TOOL;
        const char *id = json_string_value(json_object_get(j, "tool_call_id"));
        const json_t *ids = json_object_get(j, "tool_call_ids"); /* SWE-agent */
        if (!id && json_is_array(ids)) id = json_string_value(json_array_get(ids, 0));
        if (!id) {
            hx_api_pathf(f, sizeof f, "%s.tool_call_id", field);
            hx_errf_at(err, errlen, path, line, f, "missing or not a string");
            return ENG_ERR_FORMAT;
        }
        char *text = NULL;
        if ((rc = oa_flat(content, path, line, f, &text, err, errlen))) return rc;
        hx_block b;
        rc = hx_block_init(&b, HX_BLOCK_TOOL_RESULT, text, id, NULL, NULL, false) ? ENG_ERR_NOMEM : push_block(m, &b);
        free(text);
    } else {
        hx_api_pathf(f, sizeof f, "%s.role", field);
        hx_errf_at(err, errlen, path, line, f, "unknown role \"%s\" (expected system, developer, user, assistant or tool)", role);
        return ENG_ERR_FORMAT;
    }
    if (rc) hx_message_free(m);
    return rc;
}

int hx_api_openai_system_to_blocks(hx_request *q, hx_message *m) {
    hx_block *nb = realloc(q->system, (size_t)(q->n_system + m->n_blocks + 1) * sizeof *nb);
    if (!nb) return ENG_ERR_NOMEM;
    q->system = nb;
    for (int32_t i = 0; i < m->n_blocks; i++) {
        m->blocks[i].type = HX_BLOCK_TEXT; /* images in a system prompt keep their placeholder text */
        q->system[q->n_system++] = m->blocks[i];
    }
    free(m->blocks);
    memset(m, 0, sizeof *m);
    return ENG_OK;
}

int hx_api_openai_prompt(const json_t *body, const char *path, int64_t line, hx_request *q, char *err,
                         size_t errlen) {
    memset(q, 0, sizeof *q);
    q->response.role = HX_ROLE_ASSISTANT;
    q->line = line;
    char f[FIELD_MAX];
    int rc;
    json_t *msgs = json_object_get(body, "messages");
    if (!json_is_array(msgs)) {
        hx_errf_at(err, errlen, path, line, "messages", msgs ? "expected an array" : "missing");
        return ENG_ERR_FORMAT;
    }
    if ((rc = hx_tools_from_json(json_object_get(body, "tools"), path, line, "tools", &q->tools, &q->n_tools, err,
                                 errlen)))
        goto fail;
    for (size_t i = 0; i < json_array_size(msgs); i++) {
        hx_message m;
        bool sys;
        fieldf(f, "%s[%zu]", "messages", i);
        if ((rc = hx_api_openai_message(json_array_get(msgs, i), path, line, f, &m, &sys, err, errlen))) goto fail;
        rc = (sys && q->n_messages == 0) ? hx_api_openai_system_to_blocks(q, &m) : hx_request_push_message(q, &m);
        if (rc) {
            hx_message_free(&m);
            goto fail;
        }
    }
    return ENG_OK;
fail:
    hx_request_free(q);
    memset(q, 0, sizeof *q);
    return rc;
}

// ----------------------------------------------------------------------------
// hx_request -> chat messages and tools (the client side)

/* A content part for block b: text, or the part a placeholder stands for. */
static json_t *part_json(const hx_block *b) {
    if (b->type != HX_BLOCK_IMAGE) return json_pack("{s:s, s:s}", "type", "text", "text", b->text);
    if (!strcmp(b->text, "[audio]")) return json_pack("{s:s, s:{}}", "type", "input_audio", "input_audio");
    if (!strcmp(b->text, "[file]")) return json_pack("{s:s, s:{}}", "type", "file", "file");
    return json_pack("{s:s, s:{s:s}}", "type", "image_url", "image_url", "url", b->text);
}

static json_t *parts_or_string(const hx_block *bs, int32_t n) {
    if (n == 1 && bs[0].type == HX_BLOCK_TEXT) return json_string(bs[0].text);
    json_t *a = json_array();
    for (int32_t i = 0; a && i < n; i++)
        if (json_array_append_new(a, part_json(&bs[i]))) { json_decref(a); return NULL; }
    return a;
}

static json_t *assistant_json(const hx_message *m) {
    json_t *o = json_pack("{s:s}", "role", "assistant");
    eng_buf think = {0};
    json_t *calls = NULL, *parts = json_array();
    int bad = !o || !parts;
    for (int32_t i = 0; !bad && i < m->n_blocks; i++) {
        const hx_block *b = &m->blocks[i];
        if (b->type == HX_BLOCK_THINKING) bad = eng_buf_append(&think, b->text, strlen(b->text));
        else if (b->type == HX_BLOCK_TOOL_USE) {
            if (!calls) calls = json_array();
            bad = !calls || json_array_append_new(calls, json_pack("{s:s, s:s, s:{s:s, s:s}}", "id", b->id, "type",
                                                                   "function", "function", "name", b->name,
                                                                   "arguments", b->input ? b->input : "{}"));
        } else {
            bad = json_array_append_new(parts, part_json(b));
        }
    }
    if (!bad && think.len) bad = json_object_set_new(o, "reasoning_content", json_string(think.data));
    if (!bad) {
        size_t np = json_array_size(parts);
        const json_t *p0 = json_array_get(parts, 0);
        bool one_text = np == 1 && !strcmp(json_string_value(json_object_get(p0, "type")), "text");
        json_t *c = np == 0 ? json_null()
                    : one_text ? json_incref(json_object_get(p0, "text")) : json_incref(parts);
        bad = json_object_set_new(o, "content", c);
    }
    if (!bad && calls) bad = json_object_set(o, "tool_calls", calls);
    json_decref(calls);
    json_decref(parts);
    eng_buf_free(&think);
    if (bad) { json_decref(o); return NULL; }
    return o;
}

int hx_api_openai_prompt_json(const hx_request *q, json_t *body) {
    json_t *msgs = json_array();
    int bad = !msgs;
    if (!bad && q->n_system > 0)
        bad = json_array_append_new(msgs, json_pack("{s:s, s:o}", "role", "system",
                                                    "content", parts_or_string(q->system, q->n_system)));
    for (int32_t i = 0; !bad && i < q->n_messages; i++) {
        const hx_message *m = &q->messages[i];
        if (m->role == HX_ROLE_ASSISTANT) {
            bad = json_array_append_new(msgs, assistant_json(m));
            continue;
        }
        /* tool results become tool messages (one per block); the other blocks one message */
        int32_t n_other = 0;
        for (int32_t b = 0; b < m->n_blocks; b++) n_other += m->blocks[b].type != HX_BLOCK_TOOL_RESULT;
        for (int32_t b = 0; !bad && b < m->n_blocks; b++) {
            const hx_block *x = &m->blocks[b];
            if (x->type == HX_BLOCK_TOOL_RESULT)
                bad = json_array_append_new(msgs, json_pack("{s:s, s:s, s:s}", "role", "tool", "tool_call_id", x->id,
                                                            "content", x->text));
        }
        if (!bad && (n_other > 0 || m->n_blocks == 0)) {
            hx_block *others = calloc((size_t)(n_other ? n_other : 1), sizeof *others);
            int32_t k = 0;
            for (int32_t b = 0; others && b < m->n_blocks; b++)
                if (m->blocks[b].type != HX_BLOCK_TOOL_RESULT) others[k++] = m->blocks[b];  /* shallow */
            bad = !others || json_array_append_new(msgs, json_pack("{s:s, s:o}", "role",
                                                                   m->role == HX_ROLE_SYSTEM ? "system" : "user",
                                                                   "content", parts_or_string(others, k)));
            free(others);
        }
    }
    if (!bad) bad = json_object_set_new(body, "messages", msgs);
    else json_decref(msgs);
    if (!bad && q->n_tools > 0) {
        json_t *tools = json_array();
        for (int32_t i = 0; !bad && tools && i < q->n_tools; i++) {
            json_error_t je;
            json_t *schema = json_loads(q->tools[i].schema, 0, &je);
            bad = !schema || json_array_append_new(tools, json_pack("{s:s, s:{s:s, s:s, s:o}}", "type", "function",
                                                                    "function", "name", q->tools[i].name,
                                                                    "description", q->tools[i].description,
                                                                    "parameters", schema));
        }
        bad = bad || !tools || json_object_set_new(body, "tools", tools);
    }
    return bad ? ENG_ERR_NOMEM : ENG_OK;
}

// ----------------------------------------------------------------------------
// Parsing requests (server side)

/* The bodies as far as kvreplay reads them (hx_api_note_unknown lists the rest). */
#define OA_COMMON {"model", NULL}, {"max_tokens", NULL}, {"stream", NULL}, {"stop", NULL}, \
    {"stream_options", HX_API_OBJ({"include_usage", NULL})}, {"cache_prompt", NULL}, {"id_slot", NULL}, \
    {"n_probs", NULL}, {"n_predict", NULL}, {"return_tokens", NULL}
static const hx_api_shape k_part = {.tag = "type", .variants = (const hx_api_variant[]){
    HX_API_VARIANT("text", {"text", NULL}), HX_API_VARIANT("refusal", {"refusal", NULL}),
    HX_API_VARIANT("image_url", {"image_url", NULL}), HX_API_VARIANT("image", {"image", NULL}),
    HX_API_VARIANT("input_audio", {"input_audio", NULL}), HX_API_VARIANT("file", {"file", NULL}), {0}}};
static const hx_api_shape k_message = {.members = HX_API_MEMBERS(
    {"role", NULL}, {"content", HX_API_ARR(&k_part)}, {"reasoning_content", NULL}, {"tool_call_id", NULL},
    {"tool_call_ids", NULL},
    {"tool_calls", HX_API_ARR(HX_API_OBJ({"id", NULL}, {"type", NULL}, {"index", NULL},
                                         {"function", HX_API_OBJ({"name", NULL}, {"arguments", NULL})}))})};
/* tools: the OpenAI shape, and the Anthropic one hx_tools_from_json also reads */
const hx_api_shape hx_api_openai_tools = {.item = HX_API_OBJ(
    {"type", NULL}, {"name", NULL}, {"description", NULL}, {"input_schema", NULL},
    {"function", HX_API_OBJ({"name", NULL}, {"description", NULL}, {"parameters", NULL})})};
const hx_api_shape hx_api_openai_chat_body = {.members = HX_API_MEMBERS(
    OA_COMMON, {"messages", HX_API_ARR(&k_message)}, {"max_completion_tokens", NULL}, {"logprobs", NULL},
    {"top_logprobs", NULL}, {"tools", &hx_api_openai_tools}, {"tool_choice", NULL})};
static const hx_api_shape k_cmpl = {.members = HX_API_MEMBERS(OA_COMMON, {"prompt", NULL}, {"logprobs", NULL},
                                                              {"echo", NULL})};

/* The fields chat and completions share. */
static int common_params(const json_t *j, hx_api_params *p, hx_api_error *e) {
    int rc;
    const json_t *so = json_object_get(j, "stream_options");
    if (so && !json_is_null(so) && !json_is_object(so))
        return hx_api_errf(e, HX_API_ERR_INVALID, "stream_options", "expected an object");
    const json_t *iu = json_object_get(so, "include_usage");
    if (iu && !json_is_null(iu) && !json_is_boolean(iu))
        return hx_api_errf(e, HX_API_ERR_INVALID, "stream_options.include_usage", "expected true or false");
    p->include_usage = json_is_true(iu);
    if ((rc = hx_api_get_str(j, "model", &p->model, e)) ||
        (rc = hx_api_get_int(j, "max_tokens", 0, INT32_MAX, &p->max_tokens, e)) ||
        (rc = hx_api_get_int(j, "n_predict", -1, INT32_MAX, &p->max_tokens, e)) ||
        (rc = hx_api_get_bool(j, "stream", &p->stream, e)) || (rc = hx_api_get_stop(j, "stop", p, e)) ||
        (rc = hx_api_get_bool(j, "cache_prompt", &p->cache_prompt, e)) ||
        (rc = hx_api_get_int(j, "id_slot", -1, INT32_MAX, &p->id_slot, e)) ||
        (rc = hx_api_get_int(j, "n_probs", 0, INT32_MAX, &p->n_probs, e)) ||
        (rc = hx_api_get_bool(j, "return_tokens", &p->return_tokens, e)) ||
        (rc = hx_api_read_sampling(j, &p->sampling, e)))
        return rc;
    if (p->n_probs > 0) p->logprobs = true;
    return ENG_OK;
}

static int parse_chat(const hx_api_route *rt, const char *path, const char *query, const char *body, size_t n,
                      hx_api_req *q, hx_api_error *e) {
    json_t *j = hx_api_parse_begin(rt, body, n, q, e);
    if (!j) return ENG_ERR_FORMAT;
    hx_api_params *p = &q->params;
    char err[768];
    int rc = hx_api_openai_prompt(j, "", 0, &q->req, err, sizeof err);
    if (rc) {
        hx_api_err_from_text(e, rc, err);
        goto out;
    }
    if ((rc = common_params(j, p, e)) || (rc = hx_api_get_int(j, "max_completion_tokens", 0, INT32_MAX, &p->max_tokens, e)))
        goto out;
    bool lp = false;
    int32_t top = -1;
    if ((rc = hx_api_get_bool(j, "logprobs", &lp, e)) || (rc = hx_api_get_int(j, "top_logprobs", 0, INT32_MAX, &top, e)))
        goto out;
    if (top >= 0 && !lp) {  /* as llama-server says it */
        rc = hx_api_errf(e, HX_API_ERR_INVALID, "top_logprobs", "top_logprobs requires logprobs to be set to true");
        goto out;
    }
    if (lp) {
        p->logprobs = true;
        if (p->n_probs == 0) p->n_probs = top >= 0 ? top : 0;
    }
    const json_t *tc = json_object_get(j, "tool_choice");
    if (tc && !json_is_null(tc) && !(p->tool_choice = hx_json_canonical(tc))) {
        rc = hx_api_errf(e, HX_API_ERR_SERVER, NULL, "out of memory");
        goto out;
    }
    if (hx_api_note_unknown(q, j, &hx_api_openai_chat_body)) rc = hx_api_errf(e, HX_API_ERR_SERVER, NULL, "out of memory");
out:
    json_decref(j);
    if (rc) hx_api_req_free(q);
    return rc;
}

static int parse_completions(const hx_api_route *rt, const char *path, const char *query, const char *body, size_t n,
                             hx_api_req *q, hx_api_error *e) {
    json_t *j = hx_api_parse_begin(rt, body, n, q, e);
    if (!j) return ENG_ERR_FORMAT;
    hx_api_params *p = &q->params;
    int rc = ENG_OK;
    const json_t *pr = json_object_get(j, "prompt"), *echo = json_object_get(j, "echo");
    if (json_is_true(echo)) {  /* as llama-server */
        rc = hx_api_errf(e, HX_API_ERR_INVALID, "echo", "Only no echo is supported");
        goto out;
    }
    if (!pr) { rc = hx_api_errf(e, HX_API_ERR_INVALID, "prompt", "missing"); goto out; }
    if (json_is_array(pr) && json_array_size(pr) == 1 && (json_is_string(json_array_get(pr, 0)) ||
                                                          json_is_array(json_array_get(pr, 0))))
        pr = json_array_get(pr, 0);  /* a batch of one prompt */
    if (json_is_string(pr)) {
        if (json_string_length(pr) == 0) { rc = hx_api_errf(e, HX_API_ERR_INVALID, "prompt", "must not be empty"); goto out; }
        if (!(q->req.prompt = hx_strdup(json_string_value(pr)))) { rc = hx_api_errf(e, HX_API_ERR_SERVER, NULL, "out of memory"); goto out; }
    } else if (json_is_array(pr) && json_array_size(pr) > 0 && json_is_integer(json_array_get(pr, 0))) {
        size_t k = json_array_size(pr);
        if (!(q->req.tokens = malloc(sizeof(int32_t) * k))) { rc = hx_api_errf(e, HX_API_ERR_SERVER, NULL, "out of memory"); goto out; }
        for (size_t i = 0; i < k; i++) {
            const json_t *x = json_array_get(pr, i);
            if (!json_is_integer(x) || json_integer_value(x) < 0 || json_integer_value(x) > INT32_MAX) {
                char f[48];
                hx_api_pathf(f, sizeof f, "prompt[%zu]", i);
                rc = hx_api_errf(e, HX_API_ERR_INVALID, f, "expected a token id (a non-negative integer)");
                goto out;
            }
            q->req.tokens[q->req.n_tokens++] = (int32_t)json_integer_value(x);
        }
    } else if (json_is_array(pr) && json_array_size(pr) > 1) {
        rc = hx_api_errf(e, HX_API_ERR_NOT_SUPPORTED, "prompt", "several prompts in one request are not supported by kvreplay");
        goto out;
    } else {
        rc = hx_api_errf(e, HX_API_ERR_INVALID, "prompt", "expected a string or a non-empty array of token ids");
        goto out;
    }
    if ((rc = common_params(j, p, e))) goto out;
    int32_t lp = -1;
    if ((rc = hx_api_get_int(j, "logprobs", 0, INT32_MAX, &lp, e))) goto out;
    if (lp >= 0) {
        p->logprobs = true;
        if (p->n_probs == 0) p->n_probs = lp;
    }
    if (hx_api_note_unknown(q, j, &k_cmpl)) rc = hx_api_errf(e, HX_API_ERR_SERVER, NULL, "out of memory");
out:
    json_decref(j);
    if (rc) hx_api_req_free(q);
    return rc;
}

// ----------------------------------------------------------------------------
// Responses (server side)

static const char *finish_name(const hx_api_result *r) {
    switch (r->finish) {
    case HX_API_FINISH_LENGTH:   return "length";
    case HX_API_FINISH_TOOL_USE: return "tool_calls";
    case HX_API_FINISH_NONE:     return NULL;
    default:                     return "stop";
    }
}

static json_t *usage_json(const hx_api_result *r) {
    int64_t p = r->usage.prompt_tokens > 0 ? r->usage.prompt_tokens : 0;
    int64_t c = r->usage.completion_tokens > 0 ? r->usage.completion_tokens : 0;
    return json_pack("{s:I, s:I, s:I, s:{s:I}}", "completion_tokens", (json_int_t)c, "prompt_tokens", (json_int_t)p,
                     "total_tokens", (json_int_t)(p + c), "prompt_tokens_details", "cached_tokens",
                     (json_int_t)(r->usage.cached_tokens > 0 ? r->usage.cached_tokens : 0));
}

static const char *fingerprint(const hx_api_result *r) {
    return r->info && r->info->build_info ? r->info->build_info : "kvreplay";
}

/* The assistant message of a chat response. */
static json_t *message_json(const hx_api_result *r) {
    json_t *m = assistant_json(&r->content);
    if (m && r->content.n_blocks == 0) json_object_set_new(m, "content", json_string(""));
    return m;
}

static json_t *respond_chat(const hx_api_req *q, const hx_api_result *r) {
    const char *fin = finish_name(r);
    json_t *choice = json_pack("{s:i, s:o, s:o}", "index", 0, "message", message_json(r), "finish_reason",
                               fin ? json_string(fin) : json_null());
    if (choice && q->params.logprobs)
        json_object_set_new(choice, "logprobs", json_pack("{s:o}", "content", hx_api_probs_json(r->tokens, r->n_tokens)));
    json_t *o = json_pack("{s:s, s:s, s:I, s:s, s:s, s:[o], s:o}", "id", r->id ? r->id : "chatcmpl-kvreplay", "object",
                          "chat.completion", "created", (json_int_t)r->created, "model", hx_api_model_of(q, r),
                          "system_fingerprint", fingerprint(r), "choices", choice, "usage", usage_json(r));
    if (o && r->timings.prompt_n >= 0) json_object_set_new(o, "timings", hx_api_timings_json(&r->timings));
    return o;
}

static json_t *respond_completions(const hx_api_req *q, const hx_api_result *r) {
    char *text = hx_api_result_text(r);
    const char *fin = finish_name(r);
    json_t *lp = q->params.logprobs ? json_pack("{s:o}", "content", hx_api_probs_json(r->tokens, r->n_tokens)) : json_null();
    json_t *o = text ? json_pack("{s:s, s:s, s:I, s:s, s:s, s:[{s:s, s:i, s:o, s:o}], s:o}", "id",
                                 r->id ? r->id : "cmpl-kvreplay", "object", "text_completion", "created",
                                 (json_int_t)r->created, "model", hx_api_model_of(q, r), "system_fingerprint", fingerprint(r),
                                 "choices", "text", text, "index", 0, "logprobs", lp, "finish_reason",
                                 fin ? json_string(fin) : json_null(), "usage", usage_json(r))
                     : NULL;
    free(text);
    if (o && r->timings.prompt_n >= 0) json_object_set_new(o, "timings", hx_api_timings_json(&r->timings));
    return o;
}

/* llama.cpp's enum llama_vocab_type, which llama-server's meta.vocab_type gives */
static int vocab_type_number(const char *name) {
    if (!name) return 0;
    return !strcmp(name, "llama") ? 1 : !strcmp(name, "gpt2") ? 2 : !strcmp(name, "rwkv") ? 5 : 0;
}

static json_t *respond_models(const hx_api_req *q, const hx_api_result *r) {
    const hx_api_info *in = r->info;
    const char *name = in && in->model_name ? in->model_name : "kvreplay";
    return json_pack("{s:s, s:[{s:s, s:[], s:[], s:s, s:I, s:s, s:{s:i, s:i, s:i, s:i, s:I, s:I}}]}", "object", "list",
                     "data", "id", name, "aliases", "tags", "object", "model", "created", (json_int_t)r->created,
                     "owned_by", "kvreplay", "meta", "vocab_type", vocab_type_number(in ? in->vocab_type : NULL),
                     "n_vocab", in ? in->n_vocab : 0,
                     "n_ctx_train", in ? in->n_ctx_train : 0, "n_embd", in ? in->n_embd : 0, "n_params",
                     (json_int_t)(in ? in->n_params : 0), "size", (json_int_t)(in ? in->size : 0));
}

// ----------------------------------------------------------------------------
// Streaming (server side)

static int emit(hx_api_stream *s, json_t *o) { return hx_sse_write_json(&s->out, NULL, o); }

static bool is_chat(const hx_api_stream *s) { return s->route->op == HX_API_OP_GENERATE && strstr(s->route->path, "chat"); }

/* A chunk with one choice: delta (chat) or text (completions). */
static json_t *chunk(hx_api_stream *s, json_t *delta_or_text, const char *finish) {
    const hx_api_result *r = s->r;
    bool chat = is_chat(s);
    json_t *choice = json_pack("{s:i, s:o, s:o}", "index", 0, chat ? "delta" : "text", delta_or_text, "finish_reason",
                               finish ? json_string(finish) : json_null());
    return json_pack("{s:s, s:s, s:I, s:s, s:s, s:[o]}", "id", r->id ? r->id : (chat ? "chatcmpl-kvreplay" : "cmpl-kvreplay"),
                     "object", chat ? "chat.completion.chunk" : "text_completion", "created", (json_int_t)r->created,
                     "model", hx_api_model_of(s->q, r), "system_fingerprint", fingerprint(r), "choices", choice);
}

static int stream_begin(hx_api_stream *s) {
    if (!is_chat(s)) return ENG_OK;
    return emit(s, chunk(s, json_pack("{s:s, s:n}", "role", "assistant", "content"), NULL));
}

static int stream_token(hx_api_stream *s, const hx_api_token *t, const char *text, size_t n) {
    json_t *c = chunk(s, is_chat(s) ? json_pack("{s:s%}", "content", text, n) : json_stringn(text, n), NULL);
    if (c && t->id >= 0 && s->q->params.logprobs)
        json_object_set_new(json_array_get(json_object_get(c, "choices"), 0), "logprobs",
                            json_pack("{s:o}", "content", hx_api_probs_json(t, 1)));
    return emit(s, c);
}

static int stream_block(hx_api_stream *s, const hx_block *b) {
    if (!is_chat(s)) {
        if (b->type != HX_BLOCK_TEXT) return ENG_OK;
        return emit(s, chunk(s, json_string(b->text), NULL));
    }
    json_t *delta = NULL;
    if (b->type == HX_BLOCK_THINKING) delta = json_pack("{s:s}", "reasoning_content", b->text);
    else if (b->type == HX_BLOCK_TOOL_USE)
        delta = json_pack("{s:[{s:i, s:s, s:s, s:{s:s, s:s}}]}", "tool_calls", "index", s->n_tools++, "id", b->id,
                          "type", "function", "function", "name", b->name, "arguments", b->input ? b->input : "{}");
    else delta = json_pack("{s:s}", "content", b->text);
    return emit(s, chunk(s, delta, NULL));
}

static int stream_end(hx_api_stream *s) {
    const hx_api_result *r = s->r;
    const char *fin = finish_name(r);
    json_t *last = chunk(s, is_chat(s) ? json_object() : json_string(""), fin ? fin : "stop");
    int rc;
    if (!s->q->params.include_usage && r->timings.prompt_n >= 0 && last)
        json_object_set_new(last, "timings", hx_api_timings_json(&r->timings));
    if (!is_chat(s) && !s->q->params.include_usage && last) {  /* llama-server's last text_completion chunk */
        json_object_set_new(json_array_get(json_object_get(last, "choices"), 0), "logprobs", json_null());
        json_object_set_new(last, "usage", usage_json(r));
    }
    if ((rc = emit(s, last))) return rc;
    if (s->q->params.include_usage) {  /* the usage chunk: no choices */
        json_t *u = json_pack("{s:s, s:s, s:I, s:s, s:s, s:[], s:o}", "id", r->id ? r->id : "chatcmpl-kvreplay",
                              "object", is_chat(s) ? "chat.completion.chunk" : "text_completion", "created",
                              (json_int_t)r->created, "model", hx_api_model_of(s->q, r), "system_fingerprint",
                              fingerprint(r), "choices", "usage", usage_json(r));
        if (u && r->timings.prompt_n >= 0) json_object_set_new(u, "timings", hx_api_timings_json(&r->timings));
        if ((rc = emit(s, u))) return rc;
    }
    return hx_sse_write(&s->out, NULL, "[DONE]", 6);
}

// ----------------------------------------------------------------------------
// The client side: requests, responses, streams

static json_t *request_common(const hx_api_req *q, json_t *o) {
    const hx_api_params *p = &q->params;
    int bad = !o;
    if (!bad) bad = json_object_set_new(o, "model", json_string(p->model ? p->model : "kvreplay"));
    if (!bad && p->max_tokens >= 0) bad = json_object_set_new(o, "max_tokens", json_integer(p->max_tokens));
    if (!bad && p->stream) {
        bad = json_object_set_new(o, "stream", json_true());
        if (!bad && p->include_usage) bad = json_object_set_new(o, "stream_options", json_pack("{s:b}", "include_usage", 1));
    }
    if (!bad && !isnan(p->sampling.temperature)) bad = json_object_set_new(o, "temperature", json_real(p->sampling.temperature));
    if (!bad && !p->cache_prompt) bad = json_object_set_new(o, "cache_prompt", json_false());
    if (!bad && p->id_slot >= 0) bad = json_object_set_new(o, "id_slot", json_integer(p->id_slot));
    if (!bad && p->cache_salt) bad = json_object_set_new(o, "cache_salt", json_string(p->cache_salt));
    if (!bad && p->return_token_ids)  /* vLLM's name, then SGLang's; each server ignores the other's */
        bad = json_object_set_new(o, "return_tokens_as_token_ids", json_true()) ||
              json_object_set_new(o, "return_token_ids", json_true());
    if (!bad && p->n_stop) {
        json_t *st = json_array();
        for (int32_t i = 0; st && i < p->n_stop; i++) json_array_append_new(st, json_string(p->stop[i]));
        bad = json_object_set_new(o, "stop", st);
    }
    if (bad) { json_decref(o); return NULL; }
    return o;
}

static json_t *request_chat(const hx_api_req *q) {
    json_t *o = json_object();
    if (!o || hx_api_openai_prompt_json(&q->req, o)) { json_decref(o); return NULL; }
    if (q->params.logprobs && (json_object_set_new(o, "logprobs", json_true()) ||
                               json_object_set_new(o, "top_logprobs", json_integer(q->params.n_probs)))) {
        json_decref(o);
        return NULL;
    }
    if (q->params.tool_choice) {
        json_error_t je;
        json_object_set_new(o, "tool_choice", json_loads(q->params.tool_choice, JSON_DECODE_ANY, &je));
    }
    return request_common(q, o);
}

static json_t *request_completions(const hx_api_req *q) {
    json_t *o = json_object(), *prompt;
    if (!o) return NULL;
    if (q->req.tokens) {
        prompt = json_array();
        for (int32_t i = 0; prompt && i < q->req.n_tokens; i++) json_array_append_new(prompt, json_integer(q->req.tokens[i]));
    } else {
        prompt = json_string(q->req.prompt ? q->req.prompt : "");
    }
    if (json_object_set_new(o, "prompt", prompt) ||
        (q->params.logprobs && json_object_set_new(o, "logprobs", json_integer(q->params.n_probs)))) {
        json_decref(o);
        return NULL;
    }
    return request_common(q, o);
}

static hx_api_finish finish_of(const char *f) {
    if (!f) return HX_API_FINISH_NONE;
    if (!strcmp(f, "stop")) return HX_API_FINISH_STOP;
    if (!strcmp(f, "length")) return HX_API_FINISH_LENGTH;
    if (!strcmp(f, "tool_calls") || !strcmp(f, "function_call")) return HX_API_FINISH_TOOL_USE;
    return HX_API_FINISH_NONE;
}

static int oom(hx_api_error *e) { return hx_api_errf(e, HX_API_ERR_SERVER, NULL, "out of memory"); }

/* usage: prompt_tokens, completion_tokens, and cached_tokens where the server reports it
 * (prompt_tokens_details.cached_tokens: OpenAI, llama-server, vLLM; else a cached_tokens in
 * usage itself). */
static int read_usage(const json_t *u, hx_api_result *r, hx_api_error *e) {
    if (!u || json_is_null(u)) return ENG_OK;
    if (!json_is_object(u)) return hx_api_errf(e, HX_API_ERR_INVALID, "usage", "expected an object");
    const json_t *p = json_object_get(u, "prompt_tokens"), *c = json_object_get(u, "completion_tokens");
    if (!json_is_integer(p)) return hx_api_errf(e, HX_API_ERR_INVALID, "usage.prompt_tokens", p ? "expected an integer" : "missing");
    r->usage.prompt_tokens = json_integer_value(p);
    if (json_is_integer(c)) r->usage.completion_tokens = json_integer_value(c);
    const json_t *ct = json_object_get(json_object_get(u, "prompt_tokens_details"), "cached_tokens");
    if (!json_is_integer(ct)) ct = json_object_get(u, "cached_tokens");
    if (json_is_integer(ct)) r->usage.cached_tokens = json_integer_value(ct);
    return ENG_OK;
}

static int read_timings(const json_t *t, hx_api_result *r) {
    if (!json_is_object(t)) return ENG_OK;
    const json_t *c = json_object_get(t, "cache_n"), *p = json_object_get(t, "prompt_n"),
                 *d = json_object_get(t, "predicted_n");
    if (json_is_integer(c)) r->timings.cache_n = json_integer_value(c);
    if (json_is_integer(p)) r->timings.prompt_n = json_integer_value(p);
    if (json_is_integer(d)) r->timings.predicted_n = json_integer_value(d);
    if (json_is_number(json_object_get(t, "prompt_ms"))) r->timings.prompt_ms = json_number_value(json_object_get(t, "prompt_ms"));
    if (json_is_number(json_object_get(t, "predicted_ms")))
        r->timings.predicted_ms = json_number_value(json_object_get(t, "predicted_ms"));
    return ENG_OK;
}

/* vLLM's return_tokens_as_token_ids writes each token as "token_id:N": the id, and no text. */
static void legacy_token_id(int32_t *id, char **text, size_t *len) {
    char *end = NULL;
    if (*len <= 9 || strncmp(*text, "token_id:", 9)) return;
    long v = strtol(*text + 9, &end, 10);
    if (end != *text + *len || v < 0 || v > INT32_MAX) return;
    *id = (int32_t)v;
    *text = "";
    *len = 0;
}

/* SGLang's return_token_ids: choices[0].token_ids, the ids of the tokens this object carried (the last
 * ones read into r, from index `from`), given to those whose id is unknown. */
static void take_token_ids(const json_t *c0, hx_api_result *r, int32_t from) {
    const json_t *ids = json_object_get(c0, "token_ids");
    size_t n = json_array_size(ids);
    if (!n || (size_t)(r->n_tokens - from) != n) return;
    for (size_t i = 0; i < n; i++) {
        const json_t *x = json_array_get(ids, i);
        hx_api_token *t = &r->tokens[from + (int32_t)i];
        if (t->id < 0 && json_is_integer(x)) t->id = (int32_t)json_integer_value(x);
    }
}

/* OpenAI's legacy completions logprobs: tokens, token_logprobs, top_logprobs (a list of {token: logprob}). */
static int read_legacy_logprobs(const json_t *lp, hx_api_result *r, hx_api_error *e) {
    const json_t *toks = json_object_get(lp, "tokens"), *lps = json_object_get(lp, "token_logprobs"),
                 *tops = json_object_get(lp, "top_logprobs");
    if (!json_is_array(toks) || !json_is_array(lps) || json_array_size(toks) != json_array_size(lps))
        return hx_api_errf(e, HX_API_ERR_INVALID, "choices[0].logprobs", "expected content, or tokens and token_logprobs");
    for (size_t i = 0; i < json_array_size(toks); i++) {
        const json_t *t = json_array_get(toks, i), *l = json_array_get(lps, i), *top = json_array_get(tops, i);
        if (!json_is_string(t) || !json_is_number(l))
            return hx_api_errf(e, HX_API_ERR_INVALID, "choices[0].logprobs.tokens", "expected strings and numbers");
        hx_api_token x = {.id = -1, .text = (char *)json_string_value(t), .len = json_string_length(t),
                          .logprob = (float)json_number_value(l)};
        legacy_token_id(&x.id, &x.text, &x.len);
        size_t nt = json_is_object(top) ? json_object_size(top) : 0;
        hx_api_prob *pr = nt ? calloc(nt, sizeof *pr) : NULL;
        if (nt && !pr) return oom(e);
        const char *key;
        json_t *v;
        json_object_foreach((json_t *)top, key, v) {
            pr[x.n_top].id = -1;
            pr[x.n_top].text = (char *)key;
            pr[x.n_top].len = strlen(key);
            legacy_token_id(&pr[x.n_top].id, &pr[x.n_top].text, &pr[x.n_top].len);
            pr[x.n_top].logprob = json_is_number(v) ? (float)json_number_value(v) : NAN;
            x.n_top++;
        }
        x.top = pr;
        int rc = hx_api_result_push_token(r, &x);
        free(pr);
        if (rc) return oom(e);
    }
    return ENG_OK;
}

static int read_logprobs(const json_t *lp, hx_api_result *r, hx_api_error *e) {
    if (!lp || json_is_null(lp)) return ENG_OK;
    const json_t *content = json_object_get(lp, "content");
    if (content && !json_is_null(content)) return hx_api_probs_read(content, "choices[0].logprobs.content", r, e);
    return read_legacy_logprobs(lp, r, e);
}

/* A chat message (or a delta) -> blocks appended to r in the order thinking, text, tool_use. */
static int read_message(const json_t *m, hx_api_result *r, hx_api_error *e) {
    if (!json_is_object(m)) return hx_api_errf(e, HX_API_ERR_INVALID, "choices[0].message", m ? "expected an object" : "missing");
    json_t *copy = json_deep_copy(m);
    if (!copy) return oom(e);
    json_object_set_new(copy, "role", json_string("assistant"));
    hx_message msg;
    bool sys;
    char err[768];
    int rc = hx_api_openai_message(copy, "", 0, "choices[0].message", &msg, &sys, err, sizeof err);
    json_decref(copy);
    if (rc) return hx_api_err_from_text(e, rc, err);
    hx_message_free(&r->content);
    r->content = msg;
    r->content.role = HX_ROLE_ASSISTANT;
    return ENG_OK;
}

static int read_head(const json_t *j, hx_api_result *r, hx_api_error *e) {
    const char *id = json_string_value(json_object_get(j, "id")), *model = json_string_value(json_object_get(j, "model"));
    if (id && !r->id && !(r->id = hx_strdup(id))) return oom(e);
    if (model && !r->model && !(r->model = hx_strdup(model))) return oom(e);
    const json_t *c = json_object_get(j, "created");
    if (json_is_integer(c)) r->created = json_integer_value(c);
    return ENG_OK;
}

static int read_response(const hx_api_route *rt, const char *body, size_t n, hx_api_result *r, hx_api_error *e) {
    hx_api_result_init(r);
    json_t *j = hx_api_load_body(body, n, e);
    if (!j) return ENG_ERR_FORMAT;
    bool chat = strstr(rt->path, "chat") != NULL;
    const json_t *choices = json_object_get(j, "choices"), *c0 = json_array_get(choices, 0);
    int rc = read_head(j, r, e);
    if (!rc && !json_is_object(c0))
        rc = hx_api_errf(e, HX_API_ERR_INVALID, "choices", choices ? "expected a non-empty array of choices" : "missing");
    if (!rc) {
        if (chat) rc = read_message(json_object_get(c0, "message"), r, e);
        else {
            const json_t *t = json_object_get(c0, "text");
            if (!json_is_string(t)) rc = hx_api_errf(e, HX_API_ERR_INVALID, "choices[0].text", t ? "expected a string" : "missing");
            else if (json_string_length(t)) {
                hx_block b;
                rc = hx_block_init(&b, HX_BLOCK_TEXT, json_string_value(t), NULL, NULL, NULL, false) ||
                             hx_message_push_block(&r->content, &b) ? oom(e) : ENG_OK;
            }
        }
    }
    if (!rc) rc = read_logprobs(json_object_get(c0, "logprobs"), r, e);
    if (!rc) take_token_ids(c0, r, 0);
    if (!rc) {
        const json_t *fr = json_object_get(c0, "finish_reason");
        if (!json_is_string(fr))
            rc = hx_api_errf(e, HX_API_ERR_INVALID, "choices[0].finish_reason", fr ? "expected a string" : "missing");
        else r->finish = finish_of(json_string_value(fr));
    }
    if (!rc) rc = read_usage(json_object_get(j, "usage"), r, e);
    if (!rc) rc = read_timings(json_object_get(j, "timings"), r);
    json_decref(j);
    if (rc) hx_api_result_free(r);
    return rc;
}

static int read_models(const hx_api_route *rt, const char *body, size_t n, hx_api_result *r, hx_api_error *e) {
    hx_api_result_init(r);
    json_t *j = hx_api_load_body(body, n, e);
    if (!j) return ENG_ERR_FORMAT;
    const json_t *d = json_object_get(j, "data");
    int rc = ENG_OK;
    if (!json_is_array(d)) rc = hx_api_errf(e, HX_API_ERR_INVALID, "data", d ? "expected an array" : "missing");
    const char *id = json_string_value(json_object_get(json_array_get(d, 0), "id"));
    if (!rc && id && !(r->model = hx_strdup(id))) rc = oom(e);
    if (!rc && !(r->json = hx_json_canonical(j))) rc = oom(e);
    json_decref(j);
    if (rc) hx_api_result_free(r);
    return rc;
}

/* The chat stream's pieces are kept in the reader until [DONE]: thinking (rd->thinking), text
 * (rd->text) and tool calls (rd->calls: [{"id","name","arguments"}] by index). */
static int flush_chat(hx_api_reader *rd) {
    hx_api_result *r = rd->r;
    hx_block b;
    if (rd->thinking.len && (hx_block_init(&b, HX_BLOCK_THINKING, rd->thinking.data, NULL, NULL, NULL, false) ||
                             hx_message_push_block(&r->content, &b)))
        return oom(rd->e);
    if (rd->text.len && (hx_block_init(&b, HX_BLOCK_TEXT, rd->text.data, NULL, NULL, NULL, false) ||
                         hx_message_push_block(&r->content, &b)))
        return oom(rd->e);
    for (size_t i = 0; i < json_array_size(rd->calls); i++) {
        const json_t *c = json_array_get(rd->calls, i);
        char *input = NULL, err[768];
        int rc = tool_arguments(json_object_get(c, "arguments"), "", 0, "tool_calls", &input, err, sizeof err);
        if (rc) return hx_api_err_from_text(rd->e, rc, err);
        rc = hx_block_init(&b, HX_BLOCK_TOOL_USE, "", json_string_value(json_object_get(c, "id")),
                           json_string_value(json_object_get(c, "name")), input, false) ||
             hx_message_push_block(&r->content, &b);
        free(input);
        if (rc) return oom(rd->e);
    }
    return ENG_OK;
}

/* One delta.tool_calls entry: a call starts with its id and name; arguments come in pieces. */
static int take_tool_delta(hx_api_reader *rd, const json_t *tc) {
    const json_t *idx = json_object_get(tc, "index"), *fn = json_object_get(tc, "function");
    size_t k = json_is_integer(idx) ? (size_t)json_integer_value(idx) : json_array_size(rd->calls);
    if (!rd->calls && !(rd->calls = json_array())) return oom(rd->e);
    if (k > json_array_size(rd->calls) || k > 4096)
        return hx_api_errf(rd->e, HX_API_ERR_INVALID, "choices[0].delta.tool_calls", "index %zu out of order", k);
    if (k == json_array_size(rd->calls) &&
        json_array_append_new(rd->calls, json_pack("{s:s, s:s, s:s}", "id", "", "name", "", "arguments", "")))
        return oom(rd->e);
    json_t *c = json_array_get(rd->calls, k);
    const char *id = json_string_value(json_object_get(tc, "id")), *name = json_string_value(json_object_get(fn, "name"));
    const char *args = json_string_value(json_object_get(fn, "arguments"));
    if (id) json_object_set_new(c, "id", json_string(id));
    if (name) json_object_set_new(c, "name", json_string(name));
    if (args) {
        const char *have = json_string_value(json_object_get(c, "arguments"));
        size_t a = strlen(have), b = strlen(args);
        char *cat = malloc(a + b + 1);
        if (!cat) return oom(rd->e);
        memcpy(cat, have, a);
        memcpy(cat + a, args, b + 1);
        json_object_set_new(c, "arguments", json_string(cat));
        free(cat);
    }
    return ENG_OK;
}

static int stream_read(hx_api_reader *rd, const hx_sse_event *ev) {
    hx_api_result *r = rd->r;
    hx_api_error *e = rd->e;
    bool chat = strstr(rd->route->path, "chat") != NULL;
    if (ev->n == 6 && !memcmp(ev->data, "[DONE]", 6)) {
        rd->done = true;
        return chat ? flush_chat(rd) : ENG_OK;
    }
    json_error_t je;
    json_t *j = json_loadb(ev->data, ev->n, JSON_ALLOW_NUL, &je);  /* a token may be "\u0000" */
    if (!json_is_object(j)) {
        json_decref(j);
        rd->failed = true;
        return hx_api_errf(e, HX_API_ERR_INVALID, NULL, "a data line that is not a JSON object: %.80s", ev->data);
    }
    int rc = ENG_OK;
    if (json_object_get(j, "error")) {
        rd->failed = true;
        if (!hx_api_read_error_json(&hx_api_openai, j, 0, e))
            hx_api_errf(e, HX_API_ERR_SERVER, NULL, "an error event: %.120s", ev->data);
        json_decref(j);
        return ENG_ERR_FORMAT;
    }
    rc = read_head(j, r, e);
    const json_t *c0 = json_array_get(json_object_get(j, "choices"), 0);
    if (!rc && c0) {
        bool got = false;
        if (chat) {
            const json_t *d = json_object_get(c0, "delta");
            const char *t = json_string_value(json_object_get(d, "content"));
            const char *th = json_string_value(json_object_get(d, "reasoning_content"));
            const json_t *tcs = json_object_get(d, "tool_calls");
            if (t && *t) { got = true; if (eng_buf_append(&rd->text, t, strlen(t))) rc = oom(e); }
            if (!rc && th && *th) { got = true; if (eng_buf_append(&rd->thinking, th, strlen(th))) rc = oom(e); }
            for (size_t i = 0; !rc && i < json_array_size(tcs); i++) {
                got = true;
                rc = take_tool_delta(rd, json_array_get(tcs, i));
            }
        } else {
            const char *t = json_string_value(json_object_get(c0, "text"));
            if (t && *t) {
                got = true;
                hx_block b;
                hx_message *m = &r->content;
                if (m->n_blocks == 0 && (hx_block_init(&b, HX_BLOCK_TEXT, "", NULL, NULL, NULL, false) ||
                                         hx_message_push_block(m, &b)))
                    rc = oom(e);
                if (!rc) {
                    size_t have = strlen(m->blocks[0].text), add = strlen(t);
                    char *x = realloc(m->blocks[0].text, have + add + 1);
                    if (!x) rc = oom(e);
                    else memcpy(x + have, t, add + 1), m->blocks[0].text = x;
                }
            }
        }
        int32_t before = r->n_tokens;
        if (!rc) rc = read_logprobs(json_object_get(c0, "logprobs"), r, e);
        if (!rc) take_token_ids(c0, r, before);
        if (r->n_tokens > before) got = true;
        const json_t *fr = json_object_get(c0, "finish_reason");
        if (!rc && json_is_string(fr)) r->finish = finish_of(json_string_value(fr));
        if (got) rd->n_token_events++;
    }
    if (!rc) rc = read_usage(json_object_get(j, "usage"), r, e);
    if (!rc) rc = read_timings(json_object_get(j, "timings"), r);
    json_decref(j);
    if (rc) rd->failed = true;
    return rc;
}

// ----------------------------------------------------------------------------
// The dialect

static const hx_api_route openai_routes[] = {
    {"POST", "/v1/chat/completions", HX_API_OP_GENERATE, &hx_api_openai, parse_chat, respond_chat, request_chat,
     read_response, stream_begin, stream_token, stream_block, stream_end, stream_read, NULL},
    {"POST", "/chat/completions", HX_API_OP_GENERATE, &hx_api_openai, parse_chat, respond_chat, request_chat,
     read_response, stream_begin, stream_token, stream_block, stream_end, stream_read, NULL},
    {"POST", "/v1/completions", HX_API_OP_GENERATE, &hx_api_openai, parse_completions, respond_completions,
     request_completions, read_response, stream_begin, stream_token, stream_block, stream_end, stream_read, NULL},
    {"GET", "/v1/models", HX_API_OP_MODELS, &hx_api_openai, NULL, respond_models, NULL, read_models, NULL, NULL,
     NULL, NULL, NULL, NULL},
    {"GET", "/models", HX_API_OP_MODELS, &hx_api_openai, NULL, respond_models, NULL, read_models, NULL, NULL, NULL,
     NULL, NULL, NULL},
    {0},
};

/* {"error": {"message", "type", "param", "code"}}, code the HTTP status and the context error with both
 * lengths, as llama-server writes them (OpenAI's own code is a string or null; readers take both) */
static const hx_api_error_shape openai_errors = {
    .type_key = "type",
    .types = hx_api_server_error_types,
    .code = true,
    .param = true,
    .context_counts = true,
};

const hx_api_dialect hx_api_openai = {
    .name = "openai",
    .routes = openai_routes,
    .errors = &openai_errors,
};
