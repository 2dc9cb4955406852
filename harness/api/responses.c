/*
 * harness/api/responses.c: OpenAI's Responses API (platform.openai.com: Responses, Streaming responses;
 * the shapes are those of the official `openai` npm SDK's resources/responses types):
 *
 *   POST /v1/responses (/responses)  input (a string, or items: message with input_text / output_text
 *        parts, function_call, function_call_output, custom_tool_call(_output), reasoning), instructions,
 *        tools (function tools with top-level name and parameters; custom tools), tool_choice,
 *        max_output_tokens, stream, temperature, top_logprobs with include
 *        ["message.output_text.logprobs"], store, previous_response_id, prompt_cache_key;
 *        -> a response object: output items (reasoning, message, function_call), status,
 *           incomplete_details, usage (input_tokens, input_tokens_details.cached_tokens, output_tokens)
 *
 * A stream is typed events, each with its sequence_number: response.created, response.in_progress, then
 * per output item response.output_item.added, its content (content_part.added, output_text.delta ...
 * output_text.done, content_part.done; function_call_arguments.delta / .done; reasoning_text.delta /
 * .done) and response.output_item.done, then response.completed (response.incomplete when
 * max_output_tokens ended it). A failure after it began is an "error" event {"type": "error", "code",
 * "message", "param", "sequence_number"}; errors over HTTP are OpenAI's {"error": {"message", "type",
 * "param", "code"}}. The reader checks the sequence: numbers consecutive, items opened before their
 * content and closed in order, each *.done equal to its deltas, the last event completed/incomplete.
 *
 * The prompt: instructions are the first system block; system and developer messages before the first
 * other item become system blocks after it, later ones system messages; consecutive assistant items
 * (reasoning, assistant messages, function calls) form one assistant message; a function_call_output is
 * a tool message. The writer emits the same items, so a body round-trips to the same hx_request, and
 * the items of Codex's rollouts read through the same functions (hx_api_responses_item).
 *
 * previous_response_id: a response created with store true (the default) is kept in a bounded store
 * (RESP_STORE_MAX responses, RESP_STORE_BYTES of text; the oldest leave first), as its conversation:
 * input messages and output. A request continuing it gets those messages before its own input (its
 * instructions are its own, as OpenAI's). An id not (or no longer) stored is a 400 naming the field.
 */
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api.h"
#include "errors.h"
#include "json.h"
#include "status.h"
#include "str.h"

extern const hx_api_dialect hx_api_responses;

#define FIELD_MAX 320
#define RESP_STORE_MAX 64
#define RESP_STORE_BYTES (32u << 20)
#define LOGPROBS_INCLUDE "message.output_text.logprobs"

static int oom(hx_api_error *e) { return hx_api_errf(e, HX_API_ERR_SERVER, NULL, "out of memory"); }


// ----------------------------------------------------------------------------
// Input items -> hx_request (shared with the Codex importer)


/* The message new blocks of role go to: the last one when it has that role (assistant items merge), else a
 * new one. NULL on OOM. */
static hx_message *message_for(hx_request *q, hx_role role, bool merge) {
    if (merge && q->n_messages > 0 && q->messages[q->n_messages - 1].role == role) return &q->messages[q->n_messages - 1];
    hx_message m = {.role = role};
    if (hx_request_push_message(q, &m)) return NULL;
    return &q->messages[q->n_messages - 1];
}

/* A content part -> a block (text, or the placeholder of an image, file or audio); *skip for a part that
 * carries nothing kvreplay renders. */
static int part_block(const json_t *p, const char *path, int64_t line, const char *field, hx_block_opts *opts,
                      hx_block *b, char *err, size_t errlen) {
    char f[FIELD_MAX];
    const char *type = json_is_object(p) ? json_string_value(json_object_get(p, "type")) : NULL;
    if (!type) return hx_api_fail_at(err, errlen, path, line, field, "expected a content part with a string \"type\"");
    const char *key = !strcmp(type, "input_text") || !strcmp(type, "output_text") || !strcmp(type, "text") ? "text"
                      : !strcmp(type, "refusal") ? "refusal" : NULL;
    if (key) {
        const json_t *t = json_object_get(p, key);
        hx_api_pathf(f, sizeof f, "%s.%s", field, key);
        if (!json_is_string(t)) return hx_api_fail_at(err, errlen, path, line, f, t ? "expected a string" : "missing");
        return hx_block_init(b, HX_BLOCK_TEXT, json_string_value(t), NULL, NULL, NULL, false) ? ENG_ERR_NOMEM : ENG_OK;
    }
    const char *ph = !strcmp(type, "input_image") ? "[image]" : !strcmp(type, "input_file") ? "[file]"
                     : !strcmp(type, "input_audio") ? "[audio]" : NULL;
    if (ph) return hx_block_init(b, HX_BLOCK_IMAGE, ph, NULL, NULL, NULL, false) ? ENG_ERR_NOMEM : ENG_OK;
    if (!opts || !opts->lenient) {
        hx_api_pathf(f, sizeof f, "%s.type", field);
        hx_errf_at(err, errlen, path, line, f, "unknown content part type \"%s\"", type);
        return ENG_ERR_FORMAT;
    }
    opts->n_unknown++;
    char *c = hx_json_canonical(p);
    int rc = c && !hx_block_init(b, HX_BLOCK_TEXT, c, NULL, NULL, NULL, false) ? ENG_OK : ENG_ERR_NOMEM;
    free(c);
    return rc;
}

/* content: a string or parts -> blocks appended to m. */
static int content_blocks(const json_t *c, const char *path, int64_t line, const char *field, hx_block_opts *opts,
                          hx_message *m, char *err, size_t errlen) {
    hx_block b;
    if (json_is_string(c)) {
        if (hx_block_init(&b, HX_BLOCK_TEXT, json_string_value(c), NULL, NULL, NULL, false)) return ENG_ERR_NOMEM;
        return hx_api_push_block(m, &b);
    }
    if (!json_is_array(c)) return hx_api_fail_at(err, errlen, path, line, field, c ? "expected a string or an array of parts" : "missing");
    char f[FIELD_MAX];
    for (size_t i = 0; i < json_array_size(c); i++) {
        hx_api_pathf(f, sizeof f, "%s[%zu]", field, i);
        int rc = part_block(json_array_get(c, i), path, line, f, opts, &b, err, errlen);
        if (rc || (rc = hx_api_push_block(m, &b))) return rc;
    }
    return ENG_OK;
}

/* An output: a string or parts, flattened into one string joined by "\n" (malloc'd). */
static int flat_output(const json_t *o, const char *path, int64_t line, const char *field, hx_block_opts *opts,
                       char **out, char *err, size_t errlen) {
    hx_message m = {0};
    *out = NULL;
    int rc = content_blocks(o, path, line, field, opts, &m, err, errlen);
    eng_buf b = {0};
    for (int32_t i = 0; !rc && i < m.n_blocks; i++)
        if ((i && eng_buf_append(&b, "\n", 1)) || eng_buf_append(&b, m.blocks[i].text, strlen(m.blocks[i].text)))
            rc = ENG_ERR_NOMEM;
    hx_message_free(&m);
    if (!rc && !b.data && eng_buf_append(&b, "", 0)) rc = ENG_ERR_NOMEM;
    if (rc) { eng_buf_free(&b); return rc; }
    *out = b.data;
    return ENG_OK;
}

/* Texts of a reasoning item's content (else its summary) joined by "\n"; "" when it holds only encrypted content. */
static int reasoning_text(const json_t *it, const char *path, int64_t line, const char *field, char **out, char *err,
                          size_t errlen) {
    const json_t *c = json_object_get(it, "content");
    if (!json_array_size(c)) c = json_object_get(it, "summary");
    char f[FIELD_MAX];
    eng_buf b = {0};
    for (size_t i = 0; i < json_array_size(c); i++) {
        const json_t *t = json_object_get(json_array_get(c, i), "text");
        if (!json_is_string(t)) {
            eng_buf_free(&b);
            hx_api_pathf(f, sizeof f, "%s.%s[%zu].text", field, c == json_object_get(it, "content") ? "content" : "summary", i);
            return hx_api_fail_at(err, errlen, path, line, f, t ? "expected a string" : "missing");
        }
        if ((i && eng_buf_append(&b, "\n", 1)) || eng_buf_append(&b, json_string_value(t), json_string_length(t))) {
            eng_buf_free(&b);
            return ENG_ERR_NOMEM;
        }
    }
    if (!b.data && eng_buf_append(&b, "", 0)) return ENG_ERR_NOMEM;
    *out = b.data;
    return ENG_OK;
}

static const char *need_string(const json_t *it, const char *key, const char *path, int64_t line, const char *field,
                               char *err, size_t errlen) {
    const json_t *v = json_object_get(it, key);
    if (json_is_string(v)) return json_string_value(v);
    char f[FIELD_MAX];
    hx_api_pathf(f, sizeof f, "%s.%s", field, key);
    hx_api_fail_at(err, errlen, path, line, f, v ? "expected a string" : "missing");
    return NULL;
}

/* A function call's arguments: a string holding a JSON object ("" and null: {}), or an object -> canonical JSON. */
static int arguments_json(const json_t *a, const char *path, int64_t line, const char *field, char **out, char *err,
                          size_t errlen) {
    json_t *own = NULL;
    if (json_is_string(a) && json_string_length(a)) {
        json_error_t je;
        own = json_loadb(json_string_value(a), json_string_length(a), JSON_REJECT_DUPLICATES, &je);
        if (!json_is_object(own)) {
            json_decref(own);
            return hx_api_fail_at(err, errlen, path, line, field, "not a JSON object");
        }
        a = own;
    }
    if (a && !json_is_null(a) && !json_is_object(a) && !json_is_string(a))
        return hx_api_fail_at(err, errlen, path, line, field, "expected a string holding a JSON object");
    *out = json_is_object(a) ? hx_json_canonical(a) : hx_strdup("{}");
    json_decref(own);
    return *out ? ENG_OK : ENG_ERR_NOMEM;
}

int hx_api_responses_item(const json_t *it, const char *path, int64_t line, const char *field, hx_block_opts *opts,
                          hx_request *q, char *err, size_t errlen) {
    char f[FIELD_MAX];
    if (!json_is_object(it)) return hx_api_fail_at(err, errlen, path, line, field, "expected an input item object");
    const char *type = json_string_value(json_object_get(it, "type"));
    if (!type && json_object_get(it, "role")) type = "message";  /* EasyInputMessage: type is optional */
    if (!type) {
        hx_api_pathf(f, sizeof f, "%s.type", field);
        return hx_api_fail_at(err, errlen, path, line, f, json_object_get(it, "type") ? "expected a string" : "missing");
    }
    hx_block b;
    int rc;
    if (!strcmp(type, "message")) {
        const char *role = need_string(it, "role", path, line, field, err, errlen);
        if (!role) return ENG_ERR_FORMAT;
        bool sys = !strcmp(role, "system") || !strcmp(role, "developer");
        hx_role r = sys ? HX_ROLE_SYSTEM : !strcmp(role, "user") ? HX_ROLE_USER
                    : !strcmp(role, "assistant") ? HX_ROLE_ASSISTANT : (hx_role)-1;
        if ((int)r < 0) {
            hx_api_pathf(f, sizeof f, "%s.role", field);
            hx_errf_at(err, errlen, path, line, f, "unknown role \"%s\" (expected user, assistant, system or developer)",
                       role);
            return ENG_ERR_FORMAT;
        }
        hx_api_pathf(f, sizeof f, "%s.content", field);
        if (sys && q->n_messages == 0) {  /* before the conversation: system blocks */
            hx_message m = {.role = HX_ROLE_SYSTEM};
            if ((rc = content_blocks(json_object_get(it, "content"), path, line, f, opts, &m, err, errlen))) {
                hx_message_free(&m);
                return rc;
            }
            hx_block *nb = realloc(q->system, sizeof *nb * (size_t)(q->n_system + m.n_blocks + 1));
            if (!nb) { hx_message_free(&m); return ENG_ERR_NOMEM; }
            q->system = nb;
            for (int32_t i = 0; i < m.n_blocks; i++) {
                m.blocks[i].type = HX_BLOCK_TEXT;  /* a placeholder keeps its text */
                q->system[q->n_system++] = m.blocks[i];
            }
            free(m.blocks);
            return ENG_OK;
        }
        hx_message *m = message_for(q, r, r == HX_ROLE_ASSISTANT);
        return m ? content_blocks(json_object_get(it, "content"), path, line, f, opts, m, err, errlen) : ENG_ERR_NOMEM;
    }
    if (!strcmp(type, "function_call") || !strcmp(type, "custom_tool_call")) {
        bool custom = type[0] == 'c';
        const char *id = need_string(it, "call_id", path, line, field, err, errlen);
        const char *name = id ? need_string(it, "name", path, line, field, err, errlen) : NULL;
        if (!name) return ENG_ERR_FORMAT;
        char *input = NULL;
        if (custom) {  /* a freeform tool's input: kept as {"input": text} */
            const char *in = need_string(it, "input", path, line, field, err, errlen);
            if (!in) return ENG_ERR_FORMAT;
            json_t *o = json_pack("{s:s}", "input", in);
            input = o ? hx_json_canonical(o) : NULL;
            json_decref(o);
            if (!input) return ENG_ERR_NOMEM;
        } else {
            hx_api_pathf(f, sizeof f, "%s.arguments", field);
            if ((rc = arguments_json(json_object_get(it, "arguments"), path, line, f, &input, err, errlen))) return rc;
        }
        hx_message *m = message_for(q, HX_ROLE_ASSISTANT, true);
        rc = !m || hx_block_init(&b, HX_BLOCK_TOOL_USE, "", id, name, input, false) ? ENG_ERR_NOMEM : hx_api_push_block(m, &b);
        free(input);
        return rc;
    }
    if (!strcmp(type, "function_call_output") || !strcmp(type, "custom_tool_call_output")) {
        const char *id = need_string(it, "call_id", path, line, field, err, errlen);
        if (!id) return ENG_ERR_FORMAT;
        char *text = NULL;
        hx_api_pathf(f, sizeof f, "%s.output", field);
        if ((rc = flat_output(json_object_get(it, "output"), path, line, f, opts, &text, err, errlen))) return rc;
        hx_message *m = message_for(q, HX_ROLE_TOOL, false);
        rc = !m || hx_block_init(&b, HX_BLOCK_TOOL_RESULT, text, id, NULL, NULL, false) ? ENG_ERR_NOMEM : hx_api_push_block(m, &b);
        free(text);
        return rc;
    }
    if (!strcmp(type, "reasoning")) {
        char *text = NULL;
        if ((rc = reasoning_text(it, path, line, field, &text, err, errlen))) return rc;
        if (!text[0]) {  /* encrypted content only: nothing kvreplay can render */
            free(text);
            if (opts) opts->n_empty_thinking++;
            return ENG_OK;
        }
        hx_message *m = message_for(q, HX_ROLE_ASSISTANT, true);
        rc = !m || hx_block_init(&b, HX_BLOCK_THINKING, text, NULL, NULL, NULL, false) ? ENG_ERR_NOMEM : hx_api_push_block(m, &b);
        free(text);
        return rc;
    }
    if (!opts || !opts->lenient) {
        hx_api_pathf(f, sizeof f, "%s.type", field);
        hx_errf_at(err, errlen, path, line, f, "unknown input item type \"%s\"", type);
        return ENG_ERR_FORMAT;
    }
    /* an item kvreplay does not know (web_search_call, item_reference, ...): its JSON, as a user message */
    opts->n_unknown++;
    size_t have = strlen(opts->unknown_types);
    if (!strstr(opts->unknown_types, type) && have + strlen(type) + 2 < sizeof opts->unknown_types)
        snprintf(opts->unknown_types + have, sizeof opts->unknown_types - have, "%s%s", have ? "," : "", type);
    char *c = hx_json_canonical(it);
    hx_message *m = c ? message_for(q, HX_ROLE_USER, false) : NULL;
    rc = !m || hx_block_init(&b, HX_BLOCK_TEXT, c, NULL, NULL, NULL, false) ? ENG_ERR_NOMEM : hx_api_push_block(m, &b);
    free(c);
    return rc;
}

/* tools: function tools (name, description, parameters at the top level), custom tools (their format as the
 * schema), and the built-in tools by their type. */
static int read_tools(const json_t *t, const char *path, int64_t line, hx_request *q, char *err, size_t errlen) {
    if (!t || json_is_null(t)) return ENG_OK;
    if (!json_is_array(t)) return hx_api_fail_at(err, errlen, path, line, "tools", "expected an array of tools");
    size_t n = json_array_size(t);
    if (n > INT32_MAX / 2) return hx_api_fail_at(err, errlen, path, line, "tools", "too many tools");
    if (!(q->tools = calloc(n ? n : 1, sizeof *q->tools))) return ENG_ERR_NOMEM;
    char f[FIELD_MAX];
    for (size_t i = 0; i < n; i++) {
        const json_t *x = json_array_get(t, i);
        hx_api_pathf(f, sizeof f, "tools[%zu]", i);
        const char *type = json_is_object(x) ? json_string_value(json_object_get(x, "type")) : NULL;
        if (!type) return hx_api_fail_at(err, errlen, path, line, f, "expected a tool object with a string \"type\"");
        const json_t *name = json_object_get(x, "name"), *d = json_object_get(x, "description");
        const json_t *schema = !strcmp(type, "custom") ? json_object_get(x, "format") : json_object_get(x, "parameters");
        bool named = !strcmp(type, "function") || !strcmp(type, "custom");
        if (named && !json_is_string(name)) {
            hx_api_pathf(f, sizeof f, "tools[%zu].name", i);
            return hx_api_fail_at(err, errlen, path, line, f, name ? "expected a string" : "missing");
        }
        if (d && !json_is_null(d) && !json_is_string(d)) {
            hx_api_pathf(f, sizeof f, "tools[%zu].description", i);
            return hx_api_fail_at(err, errlen, path, line, f, "expected a string");
        }
        if (schema && !json_is_null(schema) && !json_is_object(schema)) {
            hx_api_pathf(f, sizeof f, "tools[%zu].%s", i, !strcmp(type, "custom") ? "format" : "parameters");
            return hx_api_fail_at(err, errlen, path, line, f, "expected a JSON object");
        }
        hx_tool *tl = &q->tools[q->n_tools++];
        tl->name = hx_strdup(named ? json_string_value(name) : type);
        tl->description = hx_strdup(json_is_string(d) ? json_string_value(d) : "");
        tl->schema = json_is_object(schema) ? hx_json_canonical(schema) : hx_strdup("{}");
        if (!tl->name || !tl->description || !tl->schema) return ENG_ERR_NOMEM;
    }
    return ENG_OK;
}

int hx_api_responses_prompt(const json_t *body, const char *path, int64_t line, hx_block_opts *opts, hx_request *q,
                            char *err, size_t errlen) {
    int rc = ENG_OK;
    q->response.role = HX_ROLE_ASSISTANT;
    q->line = line;
    const json_t *ins = json_object_get(body, "instructions"), *in = json_object_get(body, "input");
    if (ins && !json_is_null(ins) && !json_is_string(ins))
        return hx_api_fail_at(err, errlen, path, line, "instructions", "expected a string");
    if (json_is_string(ins) && json_string_length(ins)) {
        hx_block *b = realloc(q->system, sizeof *b * (size_t)(q->n_system + 1));
        if (!b) return ENG_ERR_NOMEM;
        q->system = b;
        if (hx_block_init(&q->system[q->n_system], HX_BLOCK_TEXT, json_string_value(ins), NULL, NULL, NULL, false))
            return ENG_ERR_NOMEM;
        q->n_system++;
    }
    if ((rc = read_tools(json_object_get(body, "tools"), path, line, q, err, errlen))) return rc;
    if (json_is_string(in)) {
        hx_message *m = message_for(q, HX_ROLE_USER, false);
        hx_block b;
        if (!m || hx_block_init(&b, HX_BLOCK_TEXT, json_string_value(in), NULL, NULL, NULL, false)) return ENG_ERR_NOMEM;
        return hx_api_push_block(m, &b);
    }
    if (!json_is_array(in)) return hx_api_fail_at(err, errlen, path, line, "input", in ? "expected a string or an array of items" : "missing");
    char f[FIELD_MAX];
    for (size_t i = 0; i < json_array_size(in) && !rc; i++) {
        hx_api_pathf(f, sizeof f, "input[%zu]", i);
        rc = hx_api_responses_item(json_array_get(in, i), path, line, f, opts, q, err, errlen);
    }
    return rc;
}

// ----------------------------------------------------------------------------
// The store behind previous_response_id

typedef struct stored {
    char       id[64];
    hx_request conv;     /* its input messages and, last, its output as an assistant message */
    size_t     bytes;
} stored;

static pthread_mutex_t g_store_mu = PTHREAD_MUTEX_INITIALIZER;
static stored  g_store[RESP_STORE_MAX];
static int     g_store_n, g_store_first;
static size_t  g_store_bytes;

static size_t message_bytes(const hx_message *m) {
    size_t n = 64;
    for (int32_t i = 0; i < m->n_blocks; i++)
        n += strlen(m->blocks[i].text) + (m->blocks[i].input ? strlen(m->blocks[i].input) : 0) + 64;
    return n;
}

static void store_drop_first(void) {
    stored *s = &g_store[g_store_first];
    g_store_bytes -= s->bytes;
    hx_request_free(&s->conv);
    memset(s, 0, sizeof *s);
    g_store_first = (g_store_first + 1) % RESP_STORE_MAX;
    g_store_n--;
}

/* Keeps q's messages and r's output under r's id (store true). Best effort: out of memory keeps nothing. */
static void store_put(const hx_api_req *q, const hx_api_result *r) {
    if (q->params.no_store || !r->id || strlen(r->id) >= sizeof g_store[0].id) return;
    hx_request conv = {0};
    size_t bytes = 0;
    bool bad = false;
    for (int32_t i = 0; i < q->req.n_messages && !bad; i++) {
        hx_message m;
        bad = hx_message_copy(&m, &q->req.messages[i]) || hx_request_push_message(&conv, &m);
        bytes += message_bytes(&q->req.messages[i]);
    }
    if (!bad && r->content.n_blocks) {
        hx_message m;
        bad = hx_message_copy(&m, &r->content) || hx_request_push_message(&conv, &m);
        bytes += message_bytes(&r->content);
    }
    if (bad || bytes > RESP_STORE_BYTES) { hx_request_free(&conv); return; }
    pthread_mutex_lock(&g_store_mu);
    while (g_store_n && (g_store_n == RESP_STORE_MAX || g_store_bytes + bytes > RESP_STORE_BYTES)) store_drop_first();
    stored *s = &g_store[(g_store_first + g_store_n) % RESP_STORE_MAX];
    snprintf(s->id, sizeof s->id, "%s", r->id);
    s->conv = conv;
    s->bytes = bytes;
    g_store_bytes += bytes;
    g_store_n++;
    pthread_mutex_unlock(&g_store_mu);
}

/* Copies the stored conversation of id into q's messages. ENG_ERR_NOT_FOUND when it is not stored. */
static int store_get(const char *id, hx_request *q) {
    int rc = ENG_ERR_NOT_FOUND;
    pthread_mutex_lock(&g_store_mu);
    for (int k = 0; k < g_store_n && rc == ENG_ERR_NOT_FOUND; k++) {
        const stored *s = &g_store[(g_store_first + k) % RESP_STORE_MAX];
        if (strcmp(s->id, id)) continue;
        rc = ENG_OK;
        for (int32_t i = 0; i < s->conv.n_messages && !rc; i++) {
            hx_message m;
            if (hx_message_copy(&m, &s->conv.messages[i]) || hx_request_push_message(q, &m)) rc = ENG_ERR_NOMEM;
        }
    }
    pthread_mutex_unlock(&g_store_mu);
    return rc;
}

// ----------------------------------------------------------------------------
// Parsing requests (server side)

static const hx_api_shape k_part = {.tag = "type", .variants = (const hx_api_variant[]){
    HX_API_VARIANT("input_text", {"text", NULL}), HX_API_VARIANT("output_text", {"text", NULL}),
    HX_API_VARIANT("text", {"text", NULL}), HX_API_VARIANT("refusal", {"refusal", NULL}),
    HX_API_VARIANT("input_image", {"image_url", NULL}, {"file_id", NULL}, {"detail", NULL}),
    HX_API_VARIANT("input_file", {"file_id", NULL}, {"file_data", NULL}, {"file_url", NULL}, {"filename", NULL}),
    HX_API_VARIANT("input_audio", {"input_audio", NULL}), {0}}};
static const hx_api_shape k_texts = {.item = HX_API_OBJ({"type", NULL}, {"text", NULL})};
static const hx_api_variant k_item_variants[] = {
    HX_API_VARIANT("message", {"role", NULL}, {"content", HX_API_ARR(&k_part)}),
    HX_API_VARIANT("function_call", {"call_id", NULL}, {"name", NULL}, {"arguments", NULL}),
    HX_API_VARIANT("custom_tool_call", {"call_id", NULL}, {"name", NULL}, {"input", NULL}),
    HX_API_VARIANT("function_call_output", {"call_id", NULL}, {"output", HX_API_ARR(&k_part)}),
    HX_API_VARIANT("custom_tool_call_output", {"call_id", NULL}, {"output", HX_API_ARR(&k_part)}),
    HX_API_VARIANT("reasoning", {"summary", &k_texts}, {"content", &k_texts}), {0}};
/* an item without "type" is a message (EasyInputMessage) */
static const hx_api_shape k_input_item = {.tag = "type", .untagged = "message", .variants = k_item_variants};
const hx_api_shape hx_api_responses_body = {.members = HX_API_MEMBERS(
    {"model", NULL}, {"instructions", NULL}, {"input", HX_API_ARR(&k_input_item)}, {"stream", NULL},
    {"max_output_tokens", NULL}, {"top_logprobs", NULL}, {"include", NULL}, {"store", NULL},
    {"previous_response_id", NULL}, {"prompt_cache_key", NULL}, {"tool_choice", NULL},
    {"tools", HX_API_ARR(HX_API_OBJ({"type", NULL}, {"name", NULL}, {"description", NULL}, {"parameters", NULL},
                                    {"format", NULL}))})};
/* The item shapes the Codex importer walks (a rollout's response_item payload is an input item). */
const hx_api_shape hx_api_responses_item_shape = {.tag = "type", .variants = k_item_variants};

static int parse_responses(const hx_api_route *rt, const char *path, const char *query, const char *body, size_t n,
                           hx_api_req *q, hx_api_error *e) {
    json_t *j = hx_api_parse_begin(rt, body, n, q, e);
    if (!j) return ENG_ERR_FORMAT;
    hx_api_params *p = &q->params;
    int rc;
    bool store = true;
    int32_t top = -1;
    const json_t *inc = json_object_get(j, "include");
    if ((rc = hx_api_get_str(j, "model", &p->model, e)) ||
        (rc = hx_api_get_int(j, "max_output_tokens", 1, INT32_MAX, &p->max_tokens, e)) ||
        (rc = hx_api_get_bool(j, "stream", &p->stream, e)) || (rc = hx_api_get_bool(j, "store", &store, e)) ||
        (rc = hx_api_get_int(j, "top_logprobs", 0, 20, &top, e)) ||
        (rc = hx_api_get_str(j, "previous_response_id", &p->previous_response_id, e)) ||
        (rc = hx_api_get_str(j, "prompt_cache_key", &p->cache_key, e)) || (rc = hx_api_read_sampling(j, &p->sampling, e)))
        goto out;
    p->no_store = !store;
    if (inc && !json_is_null(inc) && !json_is_array(inc)) {
        rc = hx_api_errf(e, HX_API_ERR_INVALID, "include", "expected an array of strings");
        goto out;
    }
    for (size_t i = 0; i < json_array_size(inc); i++) {
        const char *s = json_string_value(json_array_get(inc, i));
        if (!s) {
            char f[32];
            hx_api_pathf(f, sizeof f, "include[%zu]", i);
            rc = hx_api_errf(e, HX_API_ERR_INVALID, f, "expected a string");
            goto out;
        }
        if (!strcmp(s, LOGPROBS_INCLUDE)) p->logprobs = true;
    }
    if (p->logprobs) p->n_probs = top > 0 ? top : 0;
    const char *unsupported = json_object_get(j, "conversation") && !json_is_null(json_object_get(j, "conversation"))
                                  ? "conversation" : json_object_get(j, "prompt") && !json_is_null(json_object_get(j, "prompt"))
                                  ? "prompt" : NULL;
    if (unsupported) {  /* server-side state that changes the prompt: not something kvreplay holds */
        rc = hx_api_errf(e, HX_API_ERR_NOT_SUPPORTED, unsupported, "stored conversations and prompts are not supported "
                         "by kvreplay (send the input items)");
        goto out;
    }
    if (p->previous_response_id && (rc = store_get(p->previous_response_id, &q->req))) {
        rc = rc == ENG_ERR_NOMEM ? oom(e)
                                 : hx_api_errf(e, HX_API_ERR_INVALID, "previous_response_id",
                                               "Previous response with id '%.80s' not found.", p->previous_response_id);
        goto out;
    }
    const json_t *tc = json_object_get(j, "tool_choice");
    if (tc && !json_is_null(tc) && !(p->tool_choice = hx_json_canonical(tc))) { rc = oom(e); goto out; }
    hx_block_opts opts = {.lenient = true};
    char err[768];
    if ((rc = hx_api_responses_prompt(j, "", 0, &opts, &q->req, err, sizeof err))) {
        hx_api_err_from_text(e, rc, err);
        goto out;
    }
    q->n_unknown_blocks = opts.n_unknown;
    snprintf(q->unknown_types, sizeof q->unknown_types, "%s", opts.unknown_types);
    if (hx_api_note_unknown(q, j, &hx_api_responses_body)) rc = oom(e);
out:
    json_decref(j);
    if (rc) hx_api_req_free(q);
    return rc;
}

// ----------------------------------------------------------------------------
// Responses (server side)

static json_t *usage_json(const hx_api_result *r) {
    int64_t p = r->usage.prompt_tokens > 0 ? r->usage.prompt_tokens : 0;
    int64_t c = r->usage.cached_tokens > 0 ? r->usage.cached_tokens : 0;
    int64_t o = r->usage.completion_tokens > 0 ? r->usage.completion_tokens : 0;
    return json_pack("{s:I, s:{s:I, s:I}, s:I, s:{s:I}, s:I}", "input_tokens", (json_int_t)p, "input_tokens_details",
                     "cached_tokens", (json_int_t)c, "cache_write_tokens", (json_int_t)0, "output_tokens", (json_int_t)o,
                     "output_tokens_details", "reasoning_tokens", (json_int_t)0, "total_tokens", (json_int_t)(p + o));
}

/* An output item's id: PREFIX_N_ plus the response id's tail (unique per response and item). */
static void item_id(char *out, size_t cap, const char *prefix, const hx_api_result *r, int32_t n) {
    const char *rid = r->id ? r->id : "resp_kvreplay";
    const char *tail = strchr(rid, '_');
    snprintf(out, cap, "%s_%d%s", prefix, n, tail ? tail : "_kvreplay");
}

static json_t *text_part(const char *text, json_t *logprobs /* stolen, NULL: [] */) {
    return json_pack("{s:s, s:s, s:[], s:o}", "type", "output_text", "text", text, "annotations", "logprobs",
                     logprobs ? logprobs : json_array());
}

/* Output item n for block b, its status given (the stream opens items "in_progress"). */
static json_t *block_item(const hx_api_result *r, const hx_block *b, int32_t n, const char *status, json_t *logprobs) {
    char id[96];
    if (b->type == HX_BLOCK_THINKING) {
        item_id(id, sizeof id, "rs", r, n);
        return json_pack("{s:s, s:s, s:[], s:[{s:s, s:s}], s:s}", "id", id, "type", "reasoning", "summary", "content",
                         "type", "reasoning_text", "text", b->text, "status", status);
    }
    if (b->type == HX_BLOCK_TOOL_USE) {
        item_id(id, sizeof id, "fc", r, n);
        return json_pack("{s:s, s:s, s:s, s:s, s:s, s:s}", "id", id, "type", "function_call", "status", status,
                         "call_id", b->id ? b->id : "", "name", b->name ? b->name : "", "arguments",
                         b->input ? b->input : "{}");
    }
    item_id(id, sizeof id, "msg", r, n);
    return json_pack("{s:s, s:s, s:s, s:s, s:[o]}", "id", id, "type", "message", "status", status, "role", "assistant",
                     "content", text_part(b->text, logprobs));
}

/* The response object; output stolen (NULL: []), usage only when finished. */
static json_t *response_json(const hx_api_req *q, const hx_api_result *r, const char *status, json_t *output,
                             bool finished) {
    const hx_api_params *p = &q->params;
    bool incomplete = finished && r->finish == HX_API_FINISH_LENGTH;
    const char *ins = q->req.n_system && !p->previous_response_id ? q->req.system[0].text : NULL;
    json_error_t je;
    json_t *tc = p->tool_choice ? json_loads(p->tool_choice, JSON_DECODE_ANY, &je) : json_string("auto");
    json_t *o = json_pack("{s:s, s:s, s:I, s:s, s:b, s:n, s:o, s:o, s:o, s:s, s:o, s:b, s:o, s:{s:n, s:n}, s:s, s:b, "
                          "s:o, s:{s:{s:s}, s:s}, s:o, s:[], s:i, s:n, s:s, s:o, s:n, s:{}}",
                          "id", r->id ? r->id : "resp_kvreplay", "object", "response", "created_at",
                          (json_int_t)r->created, "status", incomplete ? "incomplete" : status, "background", 0,
                          "error", "incomplete_details",
                          incomplete ? json_pack("{s:s}", "reason", "max_output_tokens") : json_null(), "instructions",
                          ins ? json_string(ins) : json_null(), "max_output_tokens",
                          p->max_tokens >= 0 ? json_integer(p->max_tokens) : json_null(), "model", hx_api_model_of(q, r),
                          "output", output ? output : json_array(), "parallel_tool_calls", 1, "previous_response_id",
                          p->previous_response_id ? json_string(p->previous_response_id) : json_null(), "reasoning",
                          "effort", "summary", "service_tier", "default", "store", !p->no_store, "temperature",
                          isnan(p->sampling.temperature) ? json_null() : json_real(p->sampling.temperature), "text",
                          "format", "type", "text", "verbosity", "medium", "tool_choice", tc ? tc : json_string("auto"),
                          "tools", "top_logprobs", p->n_probs, "top_p", "truncation", "disabled", "usage",
                          finished ? usage_json(r) : json_null(), "user", "metadata");
    if (o && p->cache_key) json_object_set_new(o, "prompt_cache_key", json_string(p->cache_key));
    return o;
}

static json_t *respond_responses(const hx_api_req *q, const hx_api_result *r) {
    json_t *out = json_array();
    int32_t n_text = 0;
    for (int32_t i = 0; out && i < r->content.n_blocks; i++) {
        const hx_block *b = &r->content.blocks[i];
        json_t *lp = NULL;
        if (b->type == HX_BLOCK_TEXT && q->params.logprobs && n_text++ == 0) lp = hx_api_probs_json(r->tokens, r->n_tokens);
        if (json_array_append_new(out, block_item(r, b, i, "completed", lp))) { json_decref(out); out = NULL; }
    }
    if (!out) return NULL;
    store_put(q, r);
    return response_json(q, r, "completed", out, true);
}

// ----------------------------------------------------------------------------
// Streaming (server side)

/* Writes event TYPE: o gets "type" and the next sequence_number. */
static int emit(hx_api_stream *s, const char *type, json_t *o) {
    if (!o) return ENG_ERR_NOMEM;
    if (json_object_set_new(o, "type", json_string(type)) ||
        json_object_set_new(o, "sequence_number", json_integer(s->seq++))) {
        json_decref(o);
        return ENG_ERR_NOMEM;
    }
    return hx_sse_write_json(&s->out, type, o);
}

static json_t *open_item(const hx_api_stream *s) { return json_array_get(s->items, json_array_size(s->items) - 1); }

/* Opens output item n for block type t (b: a whole block, or NULL for generated text). */
static int item_open(hx_api_stream *s, hx_block_type t, const hx_block *b) {
    if (!s->items && !(s->items = json_array())) return ENG_ERR_NOMEM;
    hx_block empty = {.type = t, .text = "", .id = b ? b->id : NULL, .name = b ? b->name : NULL, .input = ""};
    int32_t n = (int32_t)json_array_size(s->items);
    json_t *it = block_item(s->r, &empty, n, "in_progress", NULL);
    if (!it) return ENG_ERR_NOMEM;
    if (t == HX_BLOCK_THINKING) json_array_clear(json_object_get(it, "content"));
    if (t == HX_BLOCK_TEXT) json_array_clear(json_object_get(it, "content"));
    if (json_array_append_new(s->items, it)) return ENG_ERR_NOMEM;
    s->block = n;
    s->block_type = t;
    s->acc.len = 0;
    int rc = emit(s, "response.output_item.added", json_pack("{s:i, s:O}", "output_index", n, "item", it));
    if (!rc && t == HX_BLOCK_TEXT) {
        json_t *part = text_part("", NULL);
        if (!part || json_array_append_new(json_object_get(it, "content"), part)) return ENG_ERR_NOMEM;
        rc = emit(s, "response.content_part.added", json_pack("{s:s, s:i, s:i, s:O}", "item_id",
                                                              json_string_value(json_object_get(it, "id")),
                                                              "output_index", n, "content_index", 0, "part", part));
    }
    return rc;
}

/* A piece of the open item's content. */
static int item_delta(hx_api_stream *s, const char *text, size_t n, json_t *logprobs) {
    json_t *it = open_item(s);
    const char *id = json_string_value(json_object_get(it, "id"));
    if (eng_buf_append(&s->acc, text, n)) { json_decref(logprobs); return ENG_ERR_NOMEM; }
    if (s->block_type == HX_BLOCK_TOOL_USE)
        return emit(s, "response.function_call_arguments.delta",
                    json_pack("{s:s, s:i, s:s%}", "item_id", id, "output_index", s->block, "delta", text, n));
    if (s->block_type == HX_BLOCK_THINKING)
        return emit(s, "response.reasoning_text.delta", json_pack("{s:s, s:i, s:i, s:s%}", "item_id", id, "output_index",
                                                                  s->block, "content_index", 0, "delta", text, n));
    json_t *all = json_object_get(json_array_get(json_object_get(it, "content"), 0), "logprobs");
    for (size_t i = 0; logprobs && i < json_array_size(logprobs); i++) json_array_append(all, json_array_get(logprobs, i));
    return emit(s, "response.output_text.delta", json_pack("{s:s, s:i, s:i, s:s%, s:o}", "item_id", id, "output_index",
                                                           s->block, "content_index", 0, "delta", text, n, "logprobs",
                                                           logprobs ? logprobs : json_array()));
}

/* Closes the open item: its *.done events with the whole content, then output_item.done. */
static int item_close(hx_api_stream *s) {
    if (s->block < 0) return ENG_OK;
    json_t *it = open_item(s);
    const char *id = json_string_value(json_object_get(it, "id"));
    const char *text = s->acc.data ? s->acc.data : "";
    int rc = ENG_OK;
    if (eng_buf_append(&s->acc, "", 0)) return ENG_ERR_NOMEM;
    text = s->acc.data;
    s->acc.len--;  /* the NUL written is not content */
    if (s->block_type == HX_BLOCK_TOOL_USE) {
        json_object_set_new(it, "arguments", json_string(text));
        rc = emit(s, "response.function_call_arguments.done",
                  json_pack("{s:s, s:i, s:s, s:s}", "item_id", id, "output_index", s->block, "name",
                            json_string_value(json_object_get(it, "name")), "arguments", text));
    } else if (s->block_type == HX_BLOCK_THINKING) {
        json_array_append_new(json_object_get(it, "content"), json_pack("{s:s, s:s}", "type", "reasoning_text", "text", text));
        rc = emit(s, "response.reasoning_text.done", json_pack("{s:s, s:i, s:i, s:s}", "item_id", id, "output_index",
                                                               s->block, "content_index", 0, "text", text));
    } else {
        json_t *part = json_array_get(json_object_get(it, "content"), 0);
        json_object_set_new(part, "text", json_string(text));
        rc = emit(s, "response.output_text.done", json_pack("{s:s, s:i, s:i, s:s, s:O}", "item_id", id, "output_index",
                                                            s->block, "content_index", 0, "text", text, "logprobs",
                                                            json_object_get(part, "logprobs")));
        if (!rc) rc = emit(s, "response.content_part.done", json_pack("{s:s, s:i, s:i, s:O}", "item_id", id, "output_index",
                                                                      s->block, "content_index", 0, "part", part));
    }
    json_object_set_new(it, "status", json_string("completed"));
    if (!rc) rc = emit(s, "response.output_item.done", json_pack("{s:i, s:O}", "output_index", s->block, "item", it));
    s->block = -1;
    s->acc.len = 0;
    return rc;
}

static int stream_begin(hx_api_stream *s) {
    int rc = emit(s, "response.created", json_pack("{s:o}", "response", response_json(s->q, s->r, "in_progress", NULL, false)));
    return rc ? rc : emit(s, "response.in_progress",
                          json_pack("{s:o}", "response", response_json(s->q, s->r, "in_progress", NULL, false)));
}

static int stream_token(hx_api_stream *s, const hx_api_token *t, const char *text, size_t n) {
    bool lp = t->id >= 0 && s->q->params.logprobs;
    if (n == 0 && !lp) return ENG_OK;
    int rc = ENG_OK;
    if (s->block < 0 || s->block_type != HX_BLOCK_TEXT) {
        if ((rc = item_close(s)) || (rc = item_open(s, HX_BLOCK_TEXT, NULL))) return rc;
    }
    return item_delta(s, text, n, lp ? hx_api_probs_json(t, 1) : NULL);
}

static int stream_block(hx_api_stream *s, const hx_block *b) {
    hx_block_type t = b->type == HX_BLOCK_THINKING || b->type == HX_BLOCK_TOOL_USE ? b->type : HX_BLOCK_TEXT;
    const char *text = t == HX_BLOCK_TOOL_USE ? (b->input ? b->input : "{}") : b->text;
    int rc = item_close(s);
    if (!rc) rc = item_open(s, t, b);
    if (!rc && text[0]) rc = item_delta(s, text, strlen(text), NULL);
    return rc ? rc : item_close(s);
}

static int stream_end(hx_api_stream *s) {
    int rc = item_close(s);
    if (rc) return rc;
    const char *type = s->r->finish == HX_API_FINISH_LENGTH ? "response.incomplete" : "response.completed";
    rc = emit(s, type, json_pack("{s:o}", "response", response_json(s->q, s->r, "completed",
                                                                    s->items ? json_incref(s->items) : NULL, true)));
    if (!rc) store_put(s->q, s->r);
    return rc;
}

// ----------------------------------------------------------------------------
// The client side: requests

static json_t *parts_json(const hx_message *m, const char *text_type) {
    json_t *a = json_array();
    for (int32_t i = 0; a && i < m->n_blocks; i++) {
        const hx_block *b = &m->blocks[i];
        json_t *p = b->type == HX_BLOCK_IMAGE && !strcmp(b->text, "[file]") ? json_pack("{s:s}", "type", "input_file")
                    : b->type == HX_BLOCK_IMAGE && !strcmp(b->text, "[audio]") ? json_pack("{s:s}", "type", "input_audio")
                    : b->type == HX_BLOCK_IMAGE ? json_pack("{s:s, s:s}", "type", "input_image", "image_url", b->text)
                    : !strcmp(text_type, "output_text") ? text_part(b->text, NULL)
                    : json_pack("{s:s, s:s}", "type", text_type, "text", b->text);
        if (json_array_append_new(a, p)) { json_decref(a); return NULL; }
    }
    return a;
}

static int push_item(json_t *input, json_t *it) { return it ? json_array_append_new(input, it) : -1; }

/* q's prompt as instructions (the first system block), leading system messages (the others), input items and
 * tools. */
int hx_api_responses_prompt_json(const hx_request *q, json_t *body) {
    json_t *input = json_array();
    int bad = !input;
    int32_t first = q->n_system && q->system[0].text[0] ? 1 : 0;  /* "" instructions would be no instructions */
    if (!bad && first) bad = json_object_set_new(body, "instructions", json_string(q->system[0].text));
    for (int32_t i = first; !bad && i < q->n_system; i++) {
        hx_message one = {.role = HX_ROLE_SYSTEM, .blocks = &q->system[i], .n_blocks = 1};
        bad = push_item(input, json_pack("{s:s, s:s, s:o}", "type", "message", "role", "system", "content",
                                         parts_json(&one, "input_text")));
    }
    for (int32_t i = 0; !bad && i < q->n_messages; i++) {
        const hx_message *m = &q->messages[i];
        if (m->role == HX_ROLE_ASSISTANT && m->n_blocks == 0) {
            bad = push_item(input, json_pack("{s:s, s:s, s:[]}", "type", "message", "role", "assistant", "content"));
            continue;
        }
        if (m->role == HX_ROLE_ASSISTANT) {
            hx_message run = {.role = m->role};  /* consecutive text blocks make one message */
            for (int32_t k = 0; !bad && k <= m->n_blocks; k++) {
                const hx_block *b = k < m->n_blocks ? &m->blocks[k] : NULL;
                bool text = b && (b->type == HX_BLOCK_TEXT || b->type == HX_BLOCK_IMAGE);
                if (text) {
                    if (!run.n_blocks) run.blocks = (hx_block *)b;
                    run.n_blocks++;
                    continue;
                }
                if (run.n_blocks) {
                    bad = push_item(input, json_pack("{s:s, s:s, s:o}", "type", "message", "role", "assistant", "content",
                                                     parts_json(&run, "output_text")));
                    run.n_blocks = 0;
                }
                if (!b || bad) continue;
                if (b->type == HX_BLOCK_THINKING)
                    bad = push_item(input, json_pack("{s:s, s:[], s:[{s:s, s:s}]}", "type", "reasoning", "summary",
                                                     "content", "type", "reasoning_text", "text", b->text));
                else if (b->type == HX_BLOCK_TOOL_USE)
                    bad = push_item(input, json_pack("{s:s, s:s, s:s, s:s}", "type", "function_call", "call_id",
                                                     b->id ? b->id : "", "name", b->name ? b->name : "", "arguments",
                                                     b->input ? b->input : "{}"));
                else if (b->type == HX_BLOCK_TOOL_RESULT)
                    bad = push_item(input, json_pack("{s:s, s:s, s:s}", "type", "function_call_output", "call_id", b->id,
                                                     "output", b->text));
            }
            continue;
        }
        /* user, system and tool messages: tool results as function_call_output items, the rest one message */
        hx_message rest = {.role = m->role};
        hx_block *others = calloc((size_t)(m->n_blocks ? m->n_blocks : 1), sizeof *others);
        bad = !others;
        for (int32_t k = 0; !bad && k < m->n_blocks; k++) {
            const hx_block *b = &m->blocks[k];
            if (b->type == HX_BLOCK_TOOL_RESULT)
                bad = push_item(input, json_pack("{s:s, s:s, s:s}", "type", "function_call_output", "call_id", b->id,
                                                 "output", b->text));
            else others[rest.n_blocks++] = *b;
        }
        rest.blocks = others;
        if (!bad && (rest.n_blocks || m->n_blocks == 0))
            bad = push_item(input, json_pack("{s:s, s:s, s:o}", "type", "message", "role",
                                             m->role == HX_ROLE_SYSTEM ? "system" : "user", "content",
                                             parts_json(&rest, "input_text")));
        free(others);
    }
    if (!bad) bad = json_object_set_new(body, "input", input);
    else json_decref(input);
    if (!bad && q->n_tools) {
        json_t *tools = json_array();
        for (int32_t i = 0; !bad && tools && i < q->n_tools; i++) {
            json_error_t je;
            json_t *schema = json_loads(q->tools[i].schema, 0, &je);
            bad = !schema || json_array_append_new(tools, json_pack("{s:s, s:s, s:s, s:o, s:b}", "type", "function", "name",
                                                                    q->tools[i].name, "description",
                                                                    q->tools[i].description, "parameters", schema,
                                                                    "strict", 0));
        }
        bad = bad || !tools || json_object_set_new(body, "tools", tools);
    }
    return bad ? ENG_ERR_NOMEM : ENG_OK;
}

static json_t *request_responses(const hx_api_req *q) {
    const hx_api_params *p = &q->params;
    json_t *o = json_pack("{s:s}", "model", p->model ? p->model : "kvreplay");
    int bad = !o || hx_api_responses_prompt_json(&q->req, o);
    if (!bad && p->max_tokens >= 0) bad = json_object_set_new(o, "max_output_tokens", json_integer(p->max_tokens));
    if (!bad && p->stream) bad = json_object_set_new(o, "stream", json_true());
    if (!bad && !isnan(p->sampling.temperature)) bad = json_object_set_new(o, "temperature", json_real(p->sampling.temperature));
    if (!bad && p->logprobs)
        bad = json_object_set_new(o, "top_logprobs", json_integer(p->n_probs)) ||
              json_object_set_new(o, "include", json_pack("[s]", LOGPROBS_INCLUDE));
    if (!bad) bad = json_object_set_new(o, "store", json_boolean(!p->no_store));
    if (!bad && p->previous_response_id)
        bad = json_object_set_new(o, "previous_response_id", json_string(p->previous_response_id));
    if (!bad && (p->cache_key || p->cache_salt))
        bad = json_object_set_new(o, "prompt_cache_key", json_string(p->cache_key ? p->cache_key : p->cache_salt));
    if (!bad && p->tool_choice) {
        json_error_t je;
        bad = json_object_set_new(o, "tool_choice", json_loads(p->tool_choice, JSON_DECODE_ANY, &je));
    }
    if (bad) { json_decref(o); return NULL; }
    return o;
}

// ----------------------------------------------------------------------------
// The client side: responses and streams

static int read_usage(const json_t *u, hx_api_result *r, hx_api_error *e) {
    if (!u || json_is_null(u)) return ENG_OK;
    const json_t *in = json_object_get(u, "input_tokens"), *out = json_object_get(u, "output_tokens");
    if (!json_is_object(u)) return hx_api_errf(e, HX_API_ERR_INVALID, "usage", "expected an object");
    if (!json_is_integer(in)) return hx_api_errf(e, HX_API_ERR_INVALID, "usage.input_tokens", in ? "expected an integer" : "missing");
    r->usage.prompt_tokens = json_integer_value(in);
    if (json_is_integer(out)) r->usage.completion_tokens = json_integer_value(out);
    const json_t *ct = json_object_get(json_object_get(u, "input_tokens_details"), "cached_tokens");
    if (json_is_integer(ct)) r->usage.cached_tokens = json_integer_value(ct);
    return ENG_OK;
}

/* One output item -> blocks appended to r (and tokens from its logprobs). */
static int read_item(const json_t *it, const char *field, hx_api_result *r, hx_api_error *e) {
    hx_request q = {0};
    hx_block_opts opts = {.lenient = true};
    char err[768];
    const char *type = json_string_value(json_object_get(it, "type"));
    int rc = hx_api_responses_item(it, "", 0, field, &opts, &q, err, sizeof err);
    if (rc) { hx_request_free(&q); return hx_api_err_from_text(e, rc, err); }
    for (int32_t m = 0; m < q.n_messages && !rc; m++)
        for (int32_t k = 0; k < q.messages[m].n_blocks && !rc; k++) {
            hx_block b;
            if (hx_block_copy(&b, &q.messages[m].blocks[k]) || hx_api_push_block(&r->content, &b)) rc = oom(e);
        }
    hx_request_free(&q);
    if (!rc && type && !strcmp(type, "message")) {
        const json_t *c = json_object_get(it, "content");
        char f[FIELD_MAX];
        for (size_t i = 0; !rc && i < json_array_size(c); i++) {
            const json_t *lp = json_object_get(json_array_get(c, i), "logprobs");
            hx_api_pathf(f, sizeof f, "%s.content[%zu].logprobs", field, i);
            if (json_array_size(lp)) rc = hx_api_probs_read(lp, f, r, e);
        }
    }
    return rc;
}

static int read_head(const json_t *resp, hx_api_result *r, hx_api_error *e) {
    const char *id = json_string_value(json_object_get(resp, "id")), *model = json_string_value(json_object_get(resp, "model"));
    if ((id && !r->id && !(r->id = hx_strdup(id))) || (model && !r->model && !(r->model = hx_strdup(model)))) return oom(e);
    const json_t *c = json_object_get(resp, "created_at");
    if (json_is_integer(c)) r->created = json_integer_value(c);
    return ENG_OK;
}

/* status, incomplete_details and the output's function calls -> r->finish. */
static void read_finish(const json_t *resp, hx_api_result *r) {
    const char *st = json_string_value(json_object_get(resp, "status"));
    const char *why = json_string_value(json_object_get(json_object_get(resp, "incomplete_details"), "reason"));
    bool tools = false;
    for (int32_t i = 0; i < r->content.n_blocks; i++) tools |= r->content.blocks[i].type == HX_BLOCK_TOOL_USE;
    r->finish = st && !strcmp(st, "incomplete") && why && !strcmp(why, "max_output_tokens") ? HX_API_FINISH_LENGTH
                : st && !strcmp(st, "completed") ? (tools ? HX_API_FINISH_TOOL_USE : HX_API_FINISH_STOP)
                                                 : HX_API_FINISH_NONE;
}

static int read_responses(const hx_api_route *rt, const char *body, size_t n, hx_api_result *r, hx_api_error *e) {
    hx_api_result_init(r);
    json_t *j = hx_api_load_body(body, n, e);
    if (!j) return ENG_ERR_FORMAT;
    const char *obj = json_string_value(json_object_get(j, "object"));
    const json_t *out = json_object_get(j, "output");
    int rc = ENG_OK;
    if (!obj || strcmp(obj, "response")) rc = hx_api_errf(e, HX_API_ERR_INVALID, "object", "expected \"response\"");
    else if (!json_is_array(out)) rc = hx_api_errf(e, HX_API_ERR_INVALID, "output", out ? "expected an array" : "missing");
    if (!rc) rc = read_head(j, r, e);
    char f[48];
    for (size_t i = 0; !rc && i < json_array_size(out); i++) {
        hx_api_pathf(f, sizeof f, "output[%zu]", i);
        rc = read_item(json_array_get(out, i), f, r, e);
    }
    if (!rc) rc = read_usage(json_object_get(j, "usage"), r, e);
    if (!rc) read_finish(j, r);
    json_decref(j);
    if (rc) hx_api_result_free(r);
    return rc;
}

enum { PH_START = 0, PH_RUNNING, PH_ITEM, PH_PART };

static int seq_fail(hx_api_reader *rd, const char *type, const char *what) {
    return hx_api_errf(rd->e, HX_API_ERR_INVALID, NULL, "%s: %s", type, what);
}

/* Whether ev's item_id / output_index name the open item. */
static bool names_open_item(const hx_api_reader *rd, const json_t *j) {
    const json_t *oi = json_object_get(j, "output_index");
    const char *id = json_string_value(json_object_get(j, "item_id"));
    return json_is_integer(oi) && json_integer_value(oi) == rd->block && id && rd->block_id && !strcmp(id, rd->block_id);
}

static int stream_read(hx_api_reader *rd, const hx_sse_event *ev) {
    hx_api_result *r = rd->r;
    hx_api_error *e = rd->e;
    json_error_t je;
    json_t *j = json_loadb(ev->data, ev->n, JSON_ALLOW_NUL, &je);
    const char *type = json_string_value(json_object_get(j, "type"));
    int rc = ENG_OK;
    if (!json_is_object(j) || !type) {
        rc = hx_api_errf(e, HX_API_ERR_INVALID, NULL, "an event that is not a typed JSON object: %.80s", ev->data);
        goto out;
    }
    if (!strcmp(type, "error")) {
        if (!hx_api_read_error_json(&hx_api_responses, j, 0, e)) hx_api_errf(e, HX_API_ERR_SERVER, NULL, "an error event: %.120s", ev->data);
        rc = ENG_ERR_FORMAT;
        goto out;
    }
    const json_t *sn = json_object_get(j, "sequence_number");
    if (json_is_integer(sn)) {
        if (rd->seq >= 0 && json_integer_value(sn) != rd->seq) {
            rc = hx_api_errf(e, HX_API_ERR_INVALID, "sequence_number", "%s: %lld where %lld was due", type,
                             (long long)json_integer_value(sn), (long long)rd->seq);
            goto out;
        }
        rd->seq = json_integer_value(sn) + 1;
    }
    const json_t *resp = json_object_get(j, "response");
    if (rd->phase == PH_START) {
        if (strcmp(type, "response.created") || !json_is_object(resp)) { rc = seq_fail(rd, type, "before response.created"); goto out; }
        rd->phase = PH_RUNNING;
        rc = read_head(resp, r, e);
        goto out;
    }
    if (!strcmp(type, "response.failed")) {
        const json_t *err = json_object_get(resp, "error");
        if (!json_is_object(err) || !json_is_string(json_object_get(err, "message")))
            hx_api_errf(e, HX_API_ERR_SERVER, NULL, "response.failed: %.120s", ev->data);
        else hx_api_errf(e, HX_API_ERR_SERVER, NULL, "%s", json_string_value(json_object_get(err, "message")));
        rc = ENG_ERR_FORMAT;
        goto out;
    }
    if (!strcmp(type, "response.completed") || !strcmp(type, "response.incomplete")) {
        if (rd->phase != PH_RUNNING) { rc = seq_fail(rd, type, "an output item is still open"); goto out; }
        if (!json_is_object(resp)) { rc = seq_fail(rd, type, "no response object"); goto out; }
        size_t n_out = json_array_size(json_object_get(resp, "output"));
        if (n_out != (size_t)rd->n_items) {
            rc = hx_api_errf(e, HX_API_ERR_INVALID, "response.output", "%s holds %zu items, the stream %d", type, n_out,
                             rd->n_items);
            goto out;
        }
        rd->done = true;
        rc = read_usage(json_object_get(resp, "usage"), r, e);
        if (!rc) read_finish(resp, r);
        goto out;
    }
    if (!strcmp(type, "response.output_item.added")) {
        const json_t *it = json_object_get(j, "item"), *oi = json_object_get(j, "output_index");
        const char *it_type = json_string_value(json_object_get(it, "type"));
        if (rd->phase != PH_RUNNING) { rc = seq_fail(rd, type, "an item opened inside another"); goto out; }
        if (!json_is_integer(oi) || json_integer_value(oi) != rd->n_items || !it_type) {
            rc = seq_fail(rd, type, "output_index out of order, or an item without type");
            goto out;
        }
        rd->block = rd->n_items++;
        rd->block_type = !strcmp(it_type, "message") ? HX_BLOCK_TEXT : !strcmp(it_type, "reasoning") ? HX_BLOCK_THINKING
                         : !strcmp(it_type, "function_call") ? HX_BLOCK_TOOL_USE : -1;
        rd->phase = PH_ITEM;
        rd->text.len = 0;
        free(rd->block_id);
        free(rd->block_name);
        rd->block_name = NULL;
        if (!(rd->block_id = hx_strdup(json_string_value(json_object_get(it, "id"))))) {
            rc = seq_fail(rd, type, "an item without id");
            goto out;
        }
        goto out;
    }
    if (!strncmp(type, "response.output_item.", 21) || !strncmp(type, "response.content_part.", 22) ||
        !strncmp(type, "response.output_text.", 21) || !strncmp(type, "response.function_call_arguments.", 33) ||
        !strncmp(type, "response.reasoning_text.", 24)) {
        bool item_done = !strcmp(type, "response.output_item.done");
        if (rd->phase < PH_ITEM) { rc = seq_fail(rd, type, "outside an open output item"); goto out; }
        if (item_done ? !(json_is_integer(json_object_get(j, "output_index")) &&
                          json_integer_value(json_object_get(j, "output_index")) == rd->block)
                      : !names_open_item(rd, j)) {
            rc = seq_fail(rd, type, "names another item than the open one");
            goto out;
        }
        const char *delta = json_string_value(json_object_get(j, "delta"));
        if (!strcmp(type, "response.content_part.added")) {
            if (rd->phase != PH_ITEM || rd->block_type != HX_BLOCK_TEXT) { rc = seq_fail(rd, type, "out of place"); goto out; }
            rd->phase = PH_PART;
            rd->text.len = 0;
        } else if (!strcmp(type, "response.output_text.delta")) {
            if (rd->phase != PH_PART || !delta) { rc = seq_fail(rd, type, "outside a content part, or without delta"); goto out; }
            int32_t before = r->n_tokens;
            if (eng_buf_append(&rd->text, delta, strlen(delta))) { rc = oom(e); goto out; }
            const json_t *lp = json_object_get(j, "logprobs");
            if (json_array_size(lp) && (rc = hx_api_probs_read(lp, "logprobs", r, e))) goto out;
            if (*delta || r->n_tokens > before) rd->n_token_events++;
        } else if (!strcmp(type, "response.function_call_arguments.delta") || !strcmp(type, "response.reasoning_text.delta")) {
            if (!delta) { rc = seq_fail(rd, type, "without delta"); goto out; }
            if (eng_buf_append(&rd->text, delta, strlen(delta))) { rc = oom(e); goto out; }
        } else if (!strcmp(type, "response.output_text.done") || !strcmp(type, "response.function_call_arguments.done") ||
                   !strcmp(type, "response.reasoning_text.done")) {
            const char *whole = json_string_value(json_object_get(j, type[9] == 'f' ? "arguments" : "text"));
            size_t have = rd->text.len;
            if (!whole || strlen(whole) != have || (have && memcmp(whole, rd->text.data, have))) {
                rc = seq_fail(rd, type, "differs from its deltas");
                goto out;
            }
        } else if (!strcmp(type, "response.content_part.done")) {
            if (rd->phase != PH_PART) { rc = seq_fail(rd, type, "without content_part.added"); goto out; }
            rd->phase = PH_ITEM;
            hx_block b;
            if (rd->text.len && (hx_block_init(&b, HX_BLOCK_TEXT, rd->text.data ? rd->text.data : "", NULL, NULL, NULL, false) ||
                                 hx_api_push_block(&r->content, &b))) { rc = oom(e); goto out; }
            rd->text.len = 0;
        } else if (item_done) {
            if (rd->phase != PH_ITEM) { rc = seq_fail(rd, type, "a content part is still open"); goto out; }
            if (rd->block_type == HX_BLOCK_THINKING || rd->block_type == HX_BLOCK_TOOL_USE || (int)rd->block_type < 0) {
                char f[48];
                hx_api_pathf(f, sizeof f, "output[%d]", rd->block);
                if ((rc = read_item(json_object_get(j, "item"), f, r, e))) goto out;
            }
            rd->phase = PH_RUNNING;
            rd->block = -1;
        }
        goto out;
    }
    /* response.in_progress and events kvreplay does not read (annotations, summaries, ...) */
out:
    json_decref(j);
    if (rc) rd->failed = true;
    return rc;
}

// ----------------------------------------------------------------------------
// The dialect

static const hx_api_route responses_routes[] = {
    {"POST", "/v1/responses", HX_API_OP_GENERATE, &hx_api_responses, parse_responses, respond_responses,
     request_responses, read_responses, stream_begin, stream_token, stream_block, stream_end, stream_read, NULL},
    {"POST", "/responses", HX_API_OP_GENERATE, &hx_api_responses, parse_responses, respond_responses,
     request_responses, read_responses, stream_begin, stream_token, stream_block, stream_end, stream_read, NULL},
    {0},
};

/* {"error": {"message", "type", "param", "code"}} over HTTP; in a stream, a flat "error" event */
static const hx_api_error_shape responses_errors = {
    .type_key = "type",
    .types = hx_api_server_error_types,
    .code = true,
    .param = true,
    .context_counts = true,
    .stream_event = "error",
    .stream_flat = true,
};

const hx_api_dialect hx_api_responses = {
    .name = "responses",
    .routes = responses_routes,
    .errors = &responses_errors,
    .id_prefix = "resp_",
};
