/*
 * harness/api/gemini.c: Google's Gemini API (ai.google.dev: generateContent, streamGenerateContent,
 * countTokens; the shapes are those of the official @google/genai npm SDK's types):
 *
 *   POST /v1beta/models/{model}:generateContent        contents (roles user and model; parts text, thought
 *        text, functionCall, functionResponse, inlineData, fileData), systemInstruction,
 *        tools[].functionDeclarations, toolConfig, generationConfig (temperature, topP, topK,
 *        maxOutputTokens, stopSequences, responseLogprobs, logprobs, candidateCount, seed, penalties);
 *        -> candidates[0] (content.parts, finishReason, logprobsResult), usageMetadata
 *           (promptTokenCount, cachedContentTokenCount, candidatesTokenCount, totalTokenCount),
 *           modelVersion, responseId
 *   POST /v1beta/models/{model}:streamGenerateContent?alt=sse   the same, as SSE data lines of partial
 *        responses; the last one carries finishReason and the usage (no end marker: the body ends)
 *   POST /v1beta/models/{model}:countTokens            contents (or generateContentRequest) -> totalTokens
 * (and /v1/models/...). The model is the path's; the route matcher's '*' takes it.
 *
 * The prompt: systemInstruction's parts are the system blocks; a functionCall part is a tool_use block
 * (its id, or its name when it has none: Gemini pairs calls and responses by name), a functionResponse a
 * tool_result block in its (user) message holding the response object's canonical JSON; thought parts
 * are thinking blocks. The writer emits the same parts, so a body round-trips to the same hx_request.
 * Token probabilities are logprobsResult's chosen and top candidates (tokenId, token, logProbability)
 * with each token's exact bytes in "bytes" (a kvreplay addition, as llama-server adds them to OpenAI's).
 * Errors are {"error": {"code", "message", "status"}} with the google.rpc status names.
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

extern const hx_api_dialect hx_api_gemini;

#define FIELD_MAX 320

static int oom(hx_api_error *e) { return hx_api_errf(e, HX_API_ERR_SERVER, NULL, "out of memory"); }



// ----------------------------------------------------------------------------
// Contents -> hx_request (shared with the Gemini CLI importer)

/* One part -> a block appended to m. */
static int part_block(const json_t *p, const char *path, int64_t line, const char *field, hx_block_opts *opts,
                      hx_message *m, char *err, size_t errlen) {
    char f[FIELD_MAX];
    hx_block b;
    if (!json_is_object(p)) return hx_api_fail_at(err, errlen, path, line, field, "expected a part object");
    const json_t *text = json_object_get(p, "text"), *fc = json_object_get(p, "functionCall"),
                 *fr = json_object_get(p, "functionResponse"), *th = json_object_get(p, "thought");
    if (th && !json_is_boolean(th)) {
        hx_api_pathf(f, sizeof f, "%s.thought", field);
        return hx_api_fail_at(err, errlen, path, line, f, "expected true or false");
    }
    if (text) {
        hx_api_pathf(f, sizeof f, "%s.text", field);
        if (!json_is_string(text)) return hx_api_fail_at(err, errlen, path, line, f, "expected a string");
        if (hx_block_init(&b, json_is_true(th) ? HX_BLOCK_THINKING : HX_BLOCK_TEXT, json_string_value(text), NULL, NULL,
                          NULL, false))
            return ENG_ERR_NOMEM;
        return hx_api_push_block(m, &b);
    }
    if (fc || fr) {
        const json_t *o = fc ? fc : fr;
        hx_api_pathf(f, sizeof f, "%s.%s", field, fc ? "functionCall" : "functionResponse");
        if (!json_is_object(o)) return hx_api_fail_at(err, errlen, path, line, f, "expected an object");
        const json_t *name = json_object_get(o, "name"), *id = json_object_get(o, "id");
        const json_t *v = json_object_get(o, fc ? "args" : "response");
        char g[FIELD_MAX];
        hx_api_pathf(g, sizeof g, "%s.name", f);
        if (!json_is_string(name)) return hx_api_fail_at(err, errlen, path, line, g, name ? "expected a string" : "missing");
        hx_api_pathf(g, sizeof g, "%s.id", f);
        if (id && !json_is_null(id) && !json_is_string(id)) return hx_api_fail_at(err, errlen, path, line, g, "expected a string");
        hx_api_pathf(g, sizeof g, "%s.%s", f, fc ? "args" : "response");
        if (v && !json_is_null(v) && !json_is_object(v)) return hx_api_fail_at(err, errlen, path, line, g, "expected a JSON object");
        char *c = json_is_object(v) ? hx_json_canonical(v) : hx_strdup("{}");
        const char *cid = json_is_string(id) ? json_string_value(id) : json_string_value(name);
        int rc = !c ? ENG_ERR_NOMEM
                 : fc ? hx_block_init(&b, HX_BLOCK_TOOL_USE, "", cid, json_string_value(name), c, false)
                      : hx_block_init(&b, HX_BLOCK_TOOL_RESULT, c, cid, NULL, NULL, false);
        free(c);
        return rc ? ENG_ERR_NOMEM : hx_api_push_block(m, &b);
    }
    const char *ph = json_object_get(p, "inlineData") ? "[image]" : json_object_get(p, "fileData") ? "[file]" : NULL;
    if (ph) return hx_block_init(&b, HX_BLOCK_IMAGE, ph, NULL, NULL, NULL, false) ? ENG_ERR_NOMEM : hx_api_push_block(m, &b);
    if (!opts || !opts->lenient)
        return hx_api_fail_at(err, errlen, path, line, field, "a part with none of text, functionCall, functionResponse, "
                       "inlineData, fileData");
    opts->n_unknown++;  /* executableCode, codeExecutionResult, ...: kept as their JSON */
    char *c = hx_json_canonical(p);
    int rc = c && !hx_block_init(&b, HX_BLOCK_TEXT, c, NULL, NULL, NULL, false) ? hx_api_push_block(m, &b) : ENG_ERR_NOMEM;
    free(c);
    return rc;
}

static int parts_blocks(const json_t *parts, const char *path, int64_t line, const char *field, hx_block_opts *opts,
                        hx_message *m, char *err, size_t errlen) {
    if (!json_is_array(parts)) return hx_api_fail_at(err, errlen, path, line, field, parts ? "expected an array of parts" : "missing");
    char f[FIELD_MAX];
    for (size_t i = 0; i < json_array_size(parts); i++) {
        hx_api_pathf(f, sizeof f, "%s[%zu]", field, i);
        int rc = part_block(json_array_get(parts, i), path, line, f, opts, m, err, errlen);
        if (rc) return rc;
    }
    return ENG_OK;
}

int hx_api_gemini_content(const json_t *c, const char *path, int64_t line, const char *field, hx_block_opts *opts,
                          hx_request *q, char *err, size_t errlen) {
    char f[FIELD_MAX];
    if (!json_is_object(c)) return hx_api_fail_at(err, errlen, path, line, field, "expected a content object");
    const json_t *jr = json_object_get(c, "role");
    const char *role = jr ? json_string_value(jr) : "user";
    hx_api_pathf(f, sizeof f, "%s.role", field);
    if (!role) return hx_api_fail_at(err, errlen, path, line, f, "expected a string");
    hx_role r = !strcmp(role, "user") || !strcmp(role, "function") ? HX_ROLE_USER
                : !strcmp(role, "model") ? HX_ROLE_ASSISTANT : (hx_role)-1;
    if ((int)r < 0) {
        hx_errf_at(err, errlen, path, line, f, "unknown role \"%s\" (expected user or model)", role);
        return ENG_ERR_FORMAT;
    }
    hx_message m = {.role = r};
    hx_api_pathf(f, sizeof f, "%s.parts", field);
    int rc = parts_blocks(json_object_get(c, "parts"), path, line, f, opts, &m, err, errlen);
    if (!rc) rc = hx_request_push_message(q, &m);
    if (rc) hx_message_free(&m);
    return rc;
}

static int read_tools(const json_t *t, const char *path, int64_t line, hx_request *q, char *err, size_t errlen) {
    if (!t || json_is_null(t)) return ENG_OK;
    if (!json_is_array(t)) return hx_api_fail_at(err, errlen, path, line, "tools", "expected an array of tools");
    char f[FIELD_MAX], g[FIELD_MAX];
    for (size_t i = 0; i < json_array_size(t); i++) {
        const json_t *x = json_array_get(t, i);
        hx_api_pathf(f, sizeof f, "tools[%zu]", i);
        if (!json_is_object(x)) return hx_api_fail_at(err, errlen, path, line, f, "expected a tool object");
        const json_t *fd = json_object_get(x, "functionDeclarations");
        size_t n = json_array_size(fd);
        bool builtin = !fd;  /* googleSearch, codeExecution, ...: a tool named by its key */
        if (fd && !json_is_array(fd)) {
            hx_api_pathf(g, sizeof g, "%s.functionDeclarations", f);
            return hx_api_fail_at(err, errlen, path, line, g, "expected an array");
        }
        size_t add = builtin ? json_object_size(x) : n;
        hx_tool *nt = realloc(q->tools, sizeof *nt * (size_t)(q->n_tools + (int32_t)add + 1));
        if (!nt) return ENG_ERR_NOMEM;
        q->tools = nt;
        if (builtin) {
            const char *key;
            json_t *v;
            json_object_foreach((json_t *)x, key, v) {
                hx_tool *tl = &q->tools[q->n_tools++];
                tl->name = hx_strdup(key);
                tl->description = hx_strdup("");
                tl->schema = hx_strdup("{}");
                if (!tl->name || !tl->description || !tl->schema) return ENG_ERR_NOMEM;
            }
            continue;
        }
        for (size_t k = 0; k < n; k++) {
            const json_t *d = json_array_get(fd, k);
            hx_api_pathf(g, sizeof g, "%s.functionDeclarations[%zu]", f, k);
            const json_t *name = json_object_get(d, "name"), *desc = json_object_get(d, "description");
            const json_t *schema = json_object_get(d, "parametersJsonSchema");
            if (!schema) schema = json_object_get(d, "parameters");
            if (!json_is_string(name)) {
                char h[FIELD_MAX];
                hx_api_pathf(h, sizeof h, "%s.name", g);
                return hx_api_fail_at(err, errlen, path, line, h, json_object_get(d, "name") ? "expected a string" : "missing");
            }
            if ((desc && !json_is_null(desc) && !json_is_string(desc)) || (schema && !json_is_null(schema) && !json_is_object(schema)))
                return hx_api_fail_at(err, errlen, path, line, g, "description must be a string, parameters an object");
            hx_tool *tl = &q->tools[q->n_tools++];
            tl->name = hx_strdup(json_string_value(name));
            tl->description = hx_strdup(json_is_string(desc) ? json_string_value(desc) : "");
            tl->schema = json_is_object(schema) ? hx_json_canonical(schema) : hx_strdup("{}");
            if (!tl->name || !tl->description || !tl->schema) return ENG_ERR_NOMEM;
        }
    }
    return ENG_OK;
}

int hx_api_gemini_prompt(const json_t *body, const char *path, int64_t line, hx_block_opts *opts, hx_request *q,
                         char *err, size_t errlen) {
    q->response.role = HX_ROLE_ASSISTANT;
    q->line = line;
    int rc;
    const json_t *si = json_object_get(body, "systemInstruction"), *contents = json_object_get(body, "contents");
    if (si && !json_is_null(si)) {
        hx_message m = {.role = HX_ROLE_SYSTEM};
        if (json_is_string(si)) {
            hx_block b;
            rc = hx_block_init(&b, HX_BLOCK_TEXT, json_string_value(si), NULL, NULL, NULL, false) ? ENG_ERR_NOMEM : hx_api_push_block(&m, &b);
        } else if (json_is_object(si)) {
            rc = parts_blocks(json_object_get(si, "parts"), path, line, "systemInstruction.parts", opts, &m, err, errlen);
        } else {
            rc = hx_api_fail_at(err, errlen, path, line, "systemInstruction", "expected a content object or a string");
        }
        for (int32_t i = 0; !rc && i < m.n_blocks; i++)
            if (m.blocks[i].type != HX_BLOCK_TEXT && m.blocks[i].type != HX_BLOCK_IMAGE) {
                char f[FIELD_MAX];
                hx_api_pathf(f, sizeof f, "systemInstruction.parts[%d]", i);
                rc = hx_api_fail_at(err, errlen, path, line, f, "a system instruction holds text parts only");
            }
        if (!rc) {
            q->system = m.blocks;
            q->n_system = m.n_blocks;
            for (int32_t i = 0; i < m.n_blocks; i++) m.blocks[i].type = HX_BLOCK_TEXT;
        } else {
            hx_message_free(&m);
            return rc;
        }
    }
    if ((rc = read_tools(json_object_get(body, "tools"), path, line, q, err, errlen))) return rc;
    if (!json_is_array(contents)) return hx_api_fail_at(err, errlen, path, line, "contents", contents ? "expected an array" : "missing");
    char f[FIELD_MAX];
    for (size_t i = 0; i < json_array_size(contents) && !rc; i++) {
        hx_api_pathf(f, sizeof f, "contents[%zu]", i);
        rc = hx_api_gemini_content(json_array_get(contents, i), path, line, f, opts, q, err, errlen);
    }
    return rc;
}

// ----------------------------------------------------------------------------
// Parsing requests (server side)

static const hx_api_shape k_part = {.members = HX_API_MEMBERS(
    {"text", NULL}, {"thought", NULL}, {"inlineData", NULL}, {"fileData", NULL},
    {"functionCall", HX_API_OBJ({"id", NULL}, {"name", NULL}, {"args", NULL})},
    {"functionResponse", HX_API_OBJ({"id", NULL}, {"name", NULL}, {"response", NULL})})};
static const hx_api_shape k_content = {.members = HX_API_MEMBERS({"role", NULL}, {"parts", HX_API_ARR(&k_part)})};
static const hx_api_shape k_config = {.members = HX_API_MEMBERS(
    {"temperature", NULL}, {"topP", NULL}, {"topK", NULL}, {"maxOutputTokens", NULL}, {"stopSequences", NULL},
    {"responseLogprobs", NULL}, {"logprobs", NULL}, {"candidateCount", NULL}, {"seed", NULL},
    {"presencePenalty", NULL}, {"frequencyPenalty", NULL})};
#define GEMINI_PROMPT_MEMBERS                                                                                 \
    {"contents", HX_API_ARR(&k_content)}, {"systemInstruction", &k_content}, {"toolConfig", NULL},            \
    {"tools", HX_API_ARR(HX_API_OBJ({"functionDeclarations", HX_API_ARR(HX_API_OBJ(                        \
                                        {"name", NULL}, {"description", NULL}, {"parameters", NULL},            \
                                        {"parametersJsonSchema", NULL}))}))},                                     \
    {"generationConfig", &k_config}, {"model", NULL}
const hx_api_shape hx_api_gemini_body = {.members = HX_API_MEMBERS(GEMINI_PROMPT_MEMBERS)};
static const hx_api_shape k_count = {.members = HX_API_MEMBERS(
    GEMINI_PROMPT_MEMBERS, {"generateContentRequest", &hx_api_gemini_body})};

/* The model named in the path: /v1beta/models/{model}:verb. */
static int model_from_path(const char *path, hx_api_params *p) {
    const char *m = strstr(path ? path : "", "/models/"), *colon = m ? strrchr(m, ':') : NULL;
    if (!m || !colon || colon < m + 8) return ENG_OK;
    free(p->model);
    if (!(p->model = malloc((size_t)(colon - m - 8) + 1))) return ENG_ERR_NOMEM;
    memcpy(p->model, m + 8, (size_t)(colon - m - 8));
    p->model[colon - m - 8] = '\0';
    return ENG_OK;
}

static int read_real(const json_t *o, const char *key, const char *field, double *out, hx_api_error *e) {
    const json_t *v = json_object_get(o, key);
    if (!v || json_is_null(v)) return ENG_OK;
    if (!json_is_number(v)) return hx_api_errf(e, HX_API_ERR_INVALID, field, "expected a number");
    *out = json_number_value(v);
    return ENG_OK;
}

/* generationConfig -> params (camelCase names; the neutral values greedy decoding honours). */
static int read_config(const json_t *g, hx_api_params *p, hx_api_error *e) {
    if (!g || json_is_null(g)) return ENG_OK;
    if (!json_is_object(g)) return hx_api_errf(e, HX_API_ERR_INVALID, "generationConfig", "expected an object");
    hx_api_sampling *s = &p->sampling;
    int rc;
    int32_t n_cand = 1, top_k = INT32_MIN, n_lp = -1;
    bool lp = false;
    if ((rc = read_real(g, "temperature", "generationConfig.temperature", &s->temperature, e)) ||
        (rc = read_real(g, "topP", "generationConfig.topP", &s->top_p, e)) ||
        (rc = read_real(g, "presencePenalty", "generationConfig.presencePenalty", &s->presence_penalty, e)) ||
        (rc = read_real(g, "frequencyPenalty", "generationConfig.frequencyPenalty", &s->frequency_penalty, e)))
        return rc;
    static const char *const ints[] = {"maxOutputTokens", "candidateCount", "topK", "logprobs"};
    int32_t *outs[] = {&p->max_tokens, &n_cand, &top_k, &n_lp};
    for (int i = 0; i < 4; i++) {
        char f[64];
        hx_api_pathf(f, sizeof f, "generationConfig.%s", ints[i]);
        const json_t *v = json_object_get(g, ints[i]);
        if (!v || json_is_null(v)) continue;
        if (!json_is_integer(v) || json_integer_value(v) < (i == 2 ? 1 : 0) || json_integer_value(v) > INT32_MAX)
            return hx_api_errf(e, HX_API_ERR_INVALID, f, "expected a non-negative integer");
        *outs[i] = (int32_t)json_integer_value(v);
    }
    const json_t *rl = json_object_get(g, "responseLogprobs"), *seed = json_object_get(g, "seed");
    if (rl && !json_is_null(rl) && !json_is_boolean(rl))
        return hx_api_errf(e, HX_API_ERR_INVALID, "generationConfig.responseLogprobs", "expected true or false");
    lp = json_is_true(rl);
    if (seed && !json_is_null(seed)) {
        if (!json_is_integer(seed)) return hx_api_errf(e, HX_API_ERR_INVALID, "generationConfig.seed", "expected an integer");
        s->seed = json_integer_value(seed);
    }
    if (top_k != INT32_MIN) s->top_k = top_k;
    if (n_cand != 1 && !(s->other = hx_json_canonical(json_object_get(g, "candidateCount")))) return oom(e);
    if (lp) {
        p->logprobs = true;
        p->n_probs = n_lp > 0 ? n_lp : 0;
    }
    const json_t *stop = json_object_get(g, "stopSequences");
    if (stop && !json_is_null(stop)) {
        json_t *wrap = json_pack("{s:O}", "generationConfig.stopSequences", stop);
        rc = wrap ? hx_api_get_stop(wrap, "generationConfig.stopSequences", p, e) : oom(e);
        json_decref(wrap);
        if (rc) return rc;
    }
    return ENG_OK;
}

static int parse_generate(const hx_api_route *rt, const char *path, const char *query, const char *body, size_t n,
                          hx_api_req *q, hx_api_error *e) {
    json_t *j = hx_api_parse_begin(rt, body, n, q, e);
    if (!j) return ENG_ERR_FORMAT;
    hx_api_params *p = &q->params;
    bool count = rt->op == HX_API_OP_COUNT_TOKENS;
    const json_t *src = j;
    int rc = ENG_OK;
    if (count && json_is_object(json_object_get(j, "generateContentRequest")))
        src = json_object_get(j, "generateContentRequest");
    if (model_from_path(path, p)) { rc = oom(e); goto out; }
    p->stream = strstr(rt->path, ":streamGenerateContent") != NULL;
    if (p->stream && !(query && strstr(query, "alt=sse"))) {
        rc = hx_api_errf(e, HX_API_ERR_NOT_SUPPORTED, NULL, "streamGenerateContent without alt=sse (a streamed JSON "
                         "array) is not supported by kvreplay: add ?alt=sse");
        goto out;
    }
    const json_t *cc = json_object_get(src, "cachedContent");
    if (cc && !json_is_null(cc)) {  /* content cached on Google's side: part of the prompt kvreplay does not hold */
        rc = hx_api_errf(e, HX_API_ERR_NOT_SUPPORTED, "cachedContent", "cached contents are not supported by kvreplay "
                         "(send the contents)");
        goto out;
    }
    if (!count && (rc = read_config(json_object_get(src, "generationConfig"), p, e))) goto out;
    const json_t *tc = json_object_get(src, "toolConfig");
    if (tc && !json_is_null(tc) && !(p->tool_choice = hx_json_canonical(tc))) { rc = oom(e); goto out; }
    hx_block_opts opts = {.lenient = true};
    char err[768];
    if ((rc = hx_api_gemini_prompt(src, "", 0, &opts, &q->req, err, sizeof err))) {
        hx_api_err_from_text(e, rc, err);
        goto out;
    }
    q->n_unknown_blocks = opts.n_unknown;
    if (hx_api_note_unknown(q, j, count ? &k_count : &hx_api_gemini_body)) rc = oom(e);
out:
    json_decref(j);
    if (rc) hx_api_req_free(q);
    return rc;
}

// ----------------------------------------------------------------------------
// Responses (server side)

static json_t *usage_json(const hx_api_result *r, bool finished) {
    int64_t p = r->usage.prompt_tokens > 0 ? r->usage.prompt_tokens : 0;
    int64_t c = r->usage.cached_tokens > 0 ? r->usage.cached_tokens : 0;
    int64_t o = finished && r->usage.completion_tokens > 0 ? r->usage.completion_tokens : 0;
    return json_pack("{s:I, s:I, s:I, s:I, s:[{s:s, s:I}]}", "promptTokenCount", (json_int_t)p, "candidatesTokenCount",
                     (json_int_t)o, "totalTokenCount", (json_int_t)(p + o), "cachedContentTokenCount", (json_int_t)c,
                     "promptTokensDetails", "modality", "TEXT", "tokenCount", (json_int_t)p);
}

static json_t *cand_json(int32_t id, const char *text, size_t len, float lp) {
    return json_pack("{s:o, s:i, s:f, s:o}", "token", hx_api_text_json(text, len), "tokenId", id, "logProbability",
                     isnan(lp) ? 0.0 : (double)lp, "bytes", hx_api_bytes_json(text, len));
}

/* logprobsResult of tokens t[0, n). */
static json_t *logprobs_json(const hx_api_token *t, int32_t n) {
    json_t *chosen = json_array(), *top = json_array();
    for (int32_t i = 0; chosen && top && i < n; i++) {
        json_t *c = json_array();
        for (int32_t k = 0; c && k < t[i].n_top; k++)
            json_array_append_new(c, cand_json(t[i].top[k].id, t[i].top[k].text, t[i].top[k].len, t[i].top[k].logprob));
        if (json_array_append_new(chosen, cand_json(t[i].id, t[i].text, t[i].len, t[i].logprob)) ||
            json_array_append_new(top, json_pack("{s:o}", "candidates", c ? c : json_array()))) {
            json_decref(chosen);
            chosen = NULL;
        }
    }
    if (!chosen || !top) { json_decref(chosen); json_decref(top); return NULL; }
    return json_pack("{s:o, s:o}", "topCandidates", top, "chosenCandidates", chosen);
}

/* The name of the function whose call has id (a functionResponse names its function), or id itself. */
static const char *call_name(const hx_request *q, const char *id) {
    for (int32_t m = q ? q->n_messages - 1 : -1; id && m >= 0; m--)
        for (int32_t k = 0; k < q->messages[m].n_blocks; k++) {
            const hx_block *b = &q->messages[m].blocks[k];
            if (b->type == HX_BLOCK_TOOL_USE && b->id && !strcmp(b->id, id)) return b->name;
        }
    return id ? id : "";
}

/* A block as a part; q (may be NULL) names the functions of tool results. */
static json_t *block_part(const hx_block *b, const hx_request *q) {
    json_error_t je;
    switch (b->type) {
    case HX_BLOCK_THINKING: return json_pack("{s:s, s:b}", "text", b->text, "thought", 1);
    case HX_BLOCK_TOOL_USE: {
        json_t *fc = json_pack("{s:s, s:o}", "name", b->name ? b->name : "", "args",
                               json_loads(b->input ? b->input : "{}", 0, &je));
        if (fc && b->id) json_object_set_new(fc, "id", json_string(b->id));  /* clients echo it back */
        return fc ? json_pack("{s:o}", "functionCall", fc) : NULL;
    }
    case HX_BLOCK_TOOL_RESULT: {
        json_t *resp = json_loads(b->text, 0, &je);
        if (!json_is_object(resp)) { json_decref(resp); resp = json_pack("{s:s}", "output", b->text); }
        return json_pack("{s:{s:s, s:s, s:o}}", "functionResponse", "id", b->id ? b->id : "", "name",
                         call_name(q, b->id), "response", resp);
    }
    case HX_BLOCK_IMAGE:
        return !strcmp(b->text, "[file]") ? json_pack("{s:{s:s, s:s}}", "fileData", "mimeType", "application/octet-stream",
                                                      "fileUri", "")
                                          : json_pack("{s:{s:s, s:s}}", "inlineData", "mimeType", "image/png", "data", "");
    default: return json_pack("{s:s}", "text", b->text);
    }
}

static const char *finish_reason(const hx_api_result *r) {
    return r->finish == HX_API_FINISH_LENGTH ? "MAX_TOKENS" : r->finish == HX_API_FINISH_NONE ? NULL : "STOP";
}

/* A response (or a stream's chunk): one candidate of parts; finish and usage when finished. */
static json_t *chunk_json(const hx_api_req *q, const hx_api_result *r, json_t *parts, json_t *logprobs, bool finished) {
    json_t *cand = json_pack("{s:{s:o, s:s}, s:i}", "content", "parts", parts ? parts : json_array(), "role", "model",
                             "index", 0);
    const char *fin = finish_reason(r);
    if (cand && finished) json_object_set_new(cand, "finishReason", json_string(fin ? fin : "STOP"));
    if (cand && logprobs) json_object_set_new(cand, "logprobsResult", logprobs);
    else json_decref(logprobs);
    return json_pack("{s:[o], s:o, s:s, s:s}", "candidates", cand, "usageMetadata", usage_json(r, finished),
                     "modelVersion", hx_api_model_of(q, r), "responseId", r->id ? r->id : "kvreplay");
}

static json_t *respond_generate(const hx_api_req *q, const hx_api_result *r) {
    json_t *parts = json_array();
    for (int32_t i = 0; parts && i < r->content.n_blocks; i++)
        if (json_array_append_new(parts, block_part(&r->content.blocks[i], NULL))) { json_decref(parts); parts = NULL; }
    if (!parts) return NULL;
    return chunk_json(q, r, parts, q->params.logprobs ? logprobs_json(r->tokens, r->n_tokens) : NULL, true);
}

static json_t *respond_count(const hx_api_req *q, const hx_api_result *r) {
    int64_t n = r->n_input_tokens >= 0 ? r->n_input_tokens : r->usage.prompt_tokens;
    return json_pack("{s:I, s:[{s:s, s:I}]}", "totalTokens", (json_int_t)(n > 0 ? n : 0), "promptTokensDetails",
                     "modality", "TEXT", "tokenCount", (json_int_t)(n > 0 ? n : 0));
}

// ----------------------------------------------------------------------------
// Streaming (server side): each piece a partial response; the last one finishes

static int emit(hx_api_stream *s, json_t *o) { return hx_sse_write_json(&s->out, NULL, o); }

static int stream_token(hx_api_stream *s, const hx_api_token *t, const char *text, size_t n) {
    bool lp = t->id >= 0 && s->q->params.logprobs;
    if (n == 0 && !lp) return ENG_OK;
    return emit(s, chunk_json(s->q, s->r, json_pack("[{s:s%}]", "text", text, n), lp ? logprobs_json(t, 1) : NULL, false));
}

static int stream_block(hx_api_stream *s, const hx_block *b) {
    return emit(s, chunk_json(s->q, s->r, json_pack("[o]", block_part(b, NULL)), NULL, false));
}

static int stream_end(hx_api_stream *s) {
    return emit(s, chunk_json(s->q, s->r, json_pack("[{s:s}]", "text", ""), NULL, true));
}

// ----------------------------------------------------------------------------
// The client side

int hx_api_gemini_prompt_json(const hx_request *q, json_t *body) {
    json_t *contents = json_array();
    int bad = !contents;
    if (!bad && q->n_system) {
        json_t *parts = json_array();
        for (int32_t i = 0; parts && i < q->n_system; i++) json_array_append_new(parts, json_pack("{s:s}", "text", q->system[i].text));
        bad = !parts || json_object_set_new(body, "systemInstruction", json_pack("{s:o}", "parts", parts));
    }
    for (int32_t i = 0; !bad && i < q->n_messages; i++) {
        const hx_message *m = &q->messages[i];
        json_t *parts = json_array();
        for (int32_t k = 0; parts && k < m->n_blocks; k++)
            if (json_array_append_new(parts, block_part(&m->blocks[k], q))) { json_decref(parts); parts = NULL; }
        bad = !parts || json_array_append_new(contents, json_pack("{s:s, s:o}", "role", m->role == HX_ROLE_ASSISTANT
                                                                  ? "model" : "user", "parts", parts));
    }
    if (!bad) bad = json_object_set_new(body, "contents", contents);
    else json_decref(contents);
    if (!bad && q->n_tools) {
        json_t *decl = json_array();
        for (int32_t i = 0; !bad && decl && i < q->n_tools; i++) {
            json_error_t je;
            json_t *schema = json_loads(q->tools[i].schema, 0, &je);
            bad = !schema || json_array_append_new(decl, json_pack("{s:s, s:s, s:o}", "name", q->tools[i].name,
                                                                   "description", q->tools[i].description,
                                                                   "parametersJsonSchema", schema));
        }
        bad = bad || !decl || json_object_set_new(body, "tools", json_pack("[{s:o}]", "functionDeclarations", decl));
    }
    return bad ? ENG_ERR_NOMEM : ENG_OK;
}

static json_t *request_generate(const hx_api_req *q) {
    const hx_api_params *p = &q->params;
    json_t *o = json_object(), *g = json_object();
    int bad = !o || !g || hx_api_gemini_prompt_json(&q->req, o);
    if (!bad && p->max_tokens >= 0) bad = json_object_set_new(g, "maxOutputTokens", json_integer(p->max_tokens));
    if (!bad && !isnan(p->sampling.temperature)) bad = json_object_set_new(g, "temperature", json_real(p->sampling.temperature));
    if (!bad && p->logprobs)
        bad = json_object_set_new(g, "responseLogprobs", json_true()) ||
              json_object_set_new(g, "logprobs", json_integer(p->n_probs));
    if (!bad && p->n_stop) {
        json_t *st = json_array();
        for (int32_t i = 0; st && i < p->n_stop; i++) json_array_append_new(st, json_string(p->stop[i]));
        bad = json_object_set_new(g, "stopSequences", st);
    }
    if (!bad && p->tool_choice) {
        json_error_t je;
        bad = json_object_set_new(o, "toolConfig", json_loads(p->tool_choice, JSON_DECODE_ANY, &je));
    }
    if (!bad) bad = json_object_set(o, "generationConfig", g);
    json_decref(g);
    if (bad) { json_decref(o); return NULL; }
    return o;
}

static json_t *request_count(const hx_api_req *q) {
    json_t *o = json_object();
    if (!o || hx_api_gemini_prompt_json(&q->req, o)) { json_decref(o); return NULL; }
    return o;
}

static int read_cand(const json_t *c, const char *field, int32_t *id, char **text, size_t *len, float *lp, hx_api_error *e) {
    char f[160];
    const json_t *tok = json_object_get(c, "token"), *tid = json_object_get(c, "tokenId"), *l = json_object_get(c, "logProbability"),
                 *bytes = json_object_get(c, "bytes");
    hx_api_pathf(f, sizeof f, "%s.logProbability", field);
    if (!json_is_number(l)) return hx_api_errf(e, HX_API_ERR_INVALID, f, l ? "expected a number" : "missing");
    *lp = (float)json_number_value(l);
    *id = json_is_integer(tid) ? (int32_t)json_integer_value(tid) : -1;
    json_t *wrap = json_pack("{s:f}", "logprob", (double)*lp);
    if (!wrap || json_object_set_new(wrap, "token", tok ? json_incref((json_t *)tok) : json_string("")) ||
        (bytes && json_object_set(wrap, "bytes", (json_t *)bytes))) {
        json_decref(wrap);
        return oom(e);
    }
    hx_api_result tmp;
    hx_api_result_init(&tmp);
    json_t *arr = json_pack("[O]", wrap);
    int rc = arr ? hx_api_probs_read(arr, field, &tmp, e) : oom(e);
    json_decref(arr);
    json_decref(wrap);
    if (!rc) {
        *text = tmp.tokens[0].text;
        *len = tmp.tokens[0].len;
        tmp.tokens[0].text = NULL;
    }
    hx_api_result_free(&tmp);
    return rc;
}

/* logprobsResult -> tokens appended to r. */
static int read_logprobs(const json_t *lr, hx_api_result *r, hx_api_error *e) {
    if (!lr || json_is_null(lr)) return ENG_OK;
    const json_t *chosen = json_object_get(lr, "chosenCandidates"), *top = json_object_get(lr, "topCandidates");
    if (!json_is_array(chosen)) return hx_api_errf(e, HX_API_ERR_INVALID, "logprobsResult.chosenCandidates", "expected an array");
    char f[96];
    for (size_t i = 0; i < json_array_size(chosen); i++) {
        hx_api_token t = {0};
        hx_api_pathf(f, sizeof f, "logprobsResult.chosenCandidates[%zu]", i);
        int rc = read_cand(json_array_get(chosen, i), f, &t.id, &t.text, &t.len, &t.logprob, e);
        const json_t *tc = json_object_get(json_array_get(top, i), "candidates");
        size_t nt = json_array_size(tc);
        if (!rc && nt && !(t.top = calloc(nt, sizeof *t.top))) rc = oom(e);
        for (size_t k = 0; !rc && k < nt; k++, t.n_top++) {
            hx_api_pathf(f, sizeof f, "logprobsResult.topCandidates[%zu].candidates[%zu]", i, k);
            rc = read_cand(json_array_get(tc, k), f, &t.top[k].id, &t.top[k].text, &t.top[k].len, &t.top[k].logprob, e);
        }
        if (!rc && hx_api_result_push_token(r, &t)) rc = oom(e);
        free(t.text);
        for (int32_t k = 0; k < t.n_top; k++) free(t.top[k].text);
        free(t.top);
        if (rc) return rc;
    }
    return ENG_OK;
}

static int read_usage(const json_t *u, hx_api_result *r, hx_api_error *e) {
    if (!u || json_is_null(u)) return ENG_OK;
    if (!json_is_object(u)) return hx_api_errf(e, HX_API_ERR_INVALID, "usageMetadata", "expected an object");
    const json_t *p = json_object_get(u, "promptTokenCount"), *c = json_object_get(u, "cachedContentTokenCount"),
                 *o = json_object_get(u, "candidatesTokenCount");
    if (p && !json_is_integer(p)) return hx_api_errf(e, HX_API_ERR_INVALID, "usageMetadata.promptTokenCount", "expected an integer");
    if (json_is_integer(p)) r->usage.prompt_tokens = json_integer_value(p);
    if (json_is_integer(c)) r->usage.cached_tokens = json_integer_value(c);
    if (json_is_integer(o)) r->usage.completion_tokens = json_integer_value(o);
    return ENG_OK;
}

/* Appends part p to r's content: consecutive text (or thought) pieces grow the last block. */
static int take_part(const json_t *p, hx_api_result *r, bool merge, hx_api_error *e) {
    hx_message m = {0};
    hx_block_opts opts = {.lenient = true};
    char err[768];
    int rc = part_block(p, "", 0, "candidates[0].content.parts", &opts, &m, err, sizeof err);
    if (rc) { hx_message_free(&m); return hx_api_err_from_text(e, rc, err); }
    hx_message *c = &r->content;
    for (int32_t i = 0; i < m.n_blocks && !rc; i++) {
        hx_block *b = &m.blocks[i], *last = c->n_blocks ? &c->blocks[c->n_blocks - 1] : NULL;
        if (merge && last && last->type == b->type && (b->type == HX_BLOCK_TEXT || b->type == HX_BLOCK_THINKING)) {
            size_t a = strlen(last->text), n = strlen(b->text);
            char *x = realloc(last->text, a + n + 1);
            if (!x) { rc = oom(e); break; }
            memcpy(x + a, b->text, n + 1);
            last->text = x;
            continue;
        }
        if (!b->text[0] && b->type == HX_BLOCK_TEXT) continue;  /* the last chunk's empty text */
        hx_block cp;
        if (hx_block_copy(&cp, b) || hx_api_push_block(c, &cp)) rc = oom(e);
    }
    hx_message_free(&m);
    return rc;
}

/* One response (or chunk) object -> r. *finished when it carried a finishReason. */
static int read_object(const json_t *j, hx_api_result *r, bool stream, bool *finished, hx_api_error *e) {
    const json_t *cands = json_object_get(j, "candidates"), *c0 = json_array_get(cands, 0);
    const char *id = json_string_value(json_object_get(j, "responseId")), *model = json_string_value(json_object_get(j, "modelVersion"));
    if ((id && !r->id && !(r->id = hx_strdup(id))) || (model && !r->model && !(r->model = hx_strdup(model)))) return oom(e);
    if (stream && id && r->id && strcmp(id, r->id))
        return hx_api_errf(e, HX_API_ERR_INVALID, "responseId", "a chunk of another response (%.60s)", id);
    int rc = read_usage(json_object_get(j, "usageMetadata"), r, e);
    if (rc) return rc;
    if (!c0) {
        if (!stream) return hx_api_errf(e, HX_API_ERR_INVALID, "candidates", cands ? "expected a non-empty array" : "missing");
        return ENG_OK;
    }
    const json_t *parts = json_object_get(json_object_get(c0, "content"), "parts");
    if (parts && !json_is_array(parts)) return hx_api_errf(e, HX_API_ERR_INVALID, "candidates[0].content.parts", "expected an array");
    for (size_t i = 0; i < json_array_size(parts) && !rc; i++) rc = take_part(json_array_get(parts, i), r, stream, e);
    if (!rc) rc = read_logprobs(json_object_get(c0, "logprobsResult"), r, e);
    const json_t *fr = json_object_get(c0, "finishReason");
    if (!rc && fr) {
        if (!json_is_string(fr)) return hx_api_errf(e, HX_API_ERR_INVALID, "candidates[0].finishReason", "expected a string");
        bool tools = false;
        for (int32_t i = 0; i < r->content.n_blocks; i++) tools |= r->content.blocks[i].type == HX_BLOCK_TOOL_USE;
        const char *f = json_string_value(fr);
        r->finish = !strcmp(f, "MAX_TOKENS") ? HX_API_FINISH_LENGTH : !strcmp(f, "STOP") ? (tools ? HX_API_FINISH_TOOL_USE : HX_API_FINISH_STOP)
                    : HX_API_FINISH_NONE;
        *finished = true;
    }
    return rc;
}

static int read_generate(const hx_api_route *rt, const char *body, size_t n, hx_api_result *r, hx_api_error *e) {
    hx_api_result_init(r);
    json_t *j = hx_api_load_body(body, n, e);
    if (!j) return ENG_ERR_FORMAT;
    bool fin = false;
    int rc = read_object(j, r, false, &fin, e);
    if (!rc && !fin) rc = hx_api_errf(e, HX_API_ERR_INVALID, "candidates[0].finishReason", "missing");
    json_decref(j);
    if (rc) hx_api_result_free(r);
    return rc;
}

static int read_count(const hx_api_route *rt, const char *body, size_t n, hx_api_result *r, hx_api_error *e) {
    return hx_api_read_count(body, n, "totalTokens", r, e);
}

static int stream_read(hx_api_reader *rd, const hx_sse_event *ev) {
    json_error_t je;
    json_t *j = json_loadb(ev->data, ev->n, JSON_ALLOW_NUL, &je);
    int rc;
    if (!json_is_object(j)) {
        rc = hx_api_errf(rd->e, HX_API_ERR_INVALID, NULL, "a data line that is not a JSON object: %.80s", ev->data);
    } else if (json_object_get(j, "error")) {
        if (!hx_api_read_error_json(&hx_api_gemini, j, 0, rd->e))
            hx_api_errf(rd->e, HX_API_ERR_SERVER, NULL, "an error event: %.120s", ev->data);
        rc = ENG_ERR_FORMAT;
    } else {
        bool fin = false;
        int32_t before_tokens = rd->r->n_tokens;
        size_t before = 0;
        for (int32_t i = 0; i < rd->r->content.n_blocks; i++) before += strlen(rd->r->content.blocks[i].text) + 1;
        rc = read_object(j, rd->r, true, &fin, rd->e);
        size_t after = 0;
        for (int32_t i = 0; i < rd->r->content.n_blocks; i++) after += strlen(rd->r->content.blocks[i].text) + 1;
        if (!rc && (rd->r->n_tokens > before_tokens || after > before)) rd->n_token_events++;
        if (fin) rd->done = true;
    }
    json_decref(j);
    if (rc) rd->failed = true;
    return rc;
}

// ----------------------------------------------------------------------------
// The dialect

#define GEN(path, query)                                                                                      \
    {"POST", path, HX_API_OP_GENERATE, &hx_api_gemini, parse_generate, respond_generate, request_generate,   \
     read_generate, NULL, stream_token, stream_block, stream_end, stream_read, query}
#define COUNT(path)                                                                                           \
    {"POST", path, HX_API_OP_COUNT_TOKENS, &hx_api_gemini, parse_generate, respond_count, request_count,     \
     read_count, NULL, NULL, NULL, NULL, NULL, NULL}

static const hx_api_route gemini_routes[] = {
    GEN("/v1beta/models/*:generateContent", NULL),
    GEN("/v1beta/models/*:streamGenerateContent", "alt=sse"),
    COUNT("/v1beta/models/*:countTokens"),
    GEN("/v1/models/*:generateContent", NULL),
    GEN("/v1/models/*:streamGenerateContent", "alt=sse"),
    COUNT("/v1/models/*:countTokens"),
    {0},
};

static const char *const gemini_status[HX_API_ERR_KINDS] = {
    [HX_API_ERR_INVALID] = "INVALID_ARGUMENT",   [HX_API_ERR_CONTEXT] = "INVALID_ARGUMENT",
    [HX_API_ERR_AUTH] = "UNAUTHENTICATED",       [HX_API_ERR_NOT_FOUND] = "NOT_FOUND",
    [HX_API_ERR_METHOD] = "NOT_FOUND",           [HX_API_ERR_TOO_LARGE] = "INVALID_ARGUMENT",
    [HX_API_ERR_SERVER] = "INTERNAL",            [HX_API_ERR_NOT_SUPPORTED] = "UNIMPLEMENTED",
    [HX_API_ERR_UNAVAILABLE] = "UNAVAILABLE",
};

/* {"error": {"code", "message", "status"}}; the context error in Google's wording */
static const hx_api_error_shape gemini_errors = {
    .type_key = "status",
    .types = gemini_status,
    .code = true,
    .context_message = "The input token count (%lld) exceeds the maximum number of tokens allowed (%lld).",
};

const hx_api_dialect hx_api_gemini = {
    .name = "gemini",
    .routes = gemini_routes,
    .errors = &gemini_errors,
    .id_prefix = "",  /* responseId: no prefix */
    .sse_data_only = true,  /* @google/genai reads "data: " blocks only; a comment line breaks its parser */
};
