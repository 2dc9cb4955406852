/*
 * harness/api/llama.c: llama-server's native API (tools/server of llama.cpp,
 * server-context.cpp and server-task.cpp read at upstream 0949beb5a3fc):
 *
 *   POST /completion, /completions   prompt (a string or token ids), n_predict, n_probs,
 *                                    cache_prompt, id_slot, stream, return_tokens, stop;
 *                                    -> content, tokens, completion_probabilities, timings
 *   POST /tokenize, /detokenize      {"content"} -> {"tokens"}; {"tokens"} -> {"content"}
 *   POST /apply-template             a chat body -> {"prompt"}
 *   GET  /health, /v1/health, /props, /slots, /metrics; POST /slots/ID?action=erase
 *
 * Errors are {"error": {"code", "message", "type"}} with llama-server's type
 * names; the context error adds n_prompt_tokens and n_ctx. A stream is one
 * "data:" event per token and a last one with "stop": true (no [DONE]).
 * Where kvreplay is stricter than llama-server: a field of the wrong type is
 * a 400 naming it (llama-server logs a warning and uses its default).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api.h"
#include "json.h"
#include "status.h"
#include "str.h"

extern const hx_api_dialect hx_api_llama;

// ----------------------------------------------------------------------------
// POST /completion: the server side

static const hx_api_shape k_completion = {.members = HX_API_MEMBERS(
    {"prompt", NULL}, {"n_predict", NULL}, {"max_tokens", NULL}, {"n_probs", NULL}, {"cache_prompt", NULL},
    {"id_slot", NULL}, {"stream", NULL}, {"return_tokens", NULL}, {"stop", NULL}, {"model", NULL})};

/* prompt: a string, or a non-empty array of token ids. */
static int read_prompt(const json_t *p, hx_request *q, hx_api_error *e) {
    if (!p) return hx_api_errf(e, HX_API_ERR_INVALID, "prompt", "missing");
    if (json_is_string(p)) {
        if (json_string_length(p) == 0) return hx_api_errf(e, HX_API_ERR_INVALID, "prompt", "must not be empty");
        if (!(q->prompt = hx_strdup(json_string_value(p)))) return hx_api_errf(e, HX_API_ERR_SERVER, NULL, "out of memory");
        return ENG_OK;
    }
    if (!json_is_array(p) || json_array_size(p) == 0)
        return hx_api_errf(e, HX_API_ERR_INVALID, "prompt", "expected a string or a non-empty array of token ids");
    size_t n = json_array_size(p);
    if (json_is_string(json_array_get(p, 0)) || json_is_array(json_array_get(p, 0)))
        return hx_api_errf(e, HX_API_ERR_NOT_SUPPORTED, "prompt",
                           "several prompts in one request (or mixed token/text prompts) are not supported by kvreplay");
    if (n > INT32_MAX / 2) return hx_api_errf(e, HX_API_ERR_INVALID, "prompt", "too many tokens");
    if (!(q->tokens = malloc(sizeof(int32_t) * n))) return hx_api_errf(e, HX_API_ERR_SERVER, NULL, "out of memory");
    for (size_t i = 0; i < n; i++) {
        const json_t *x = json_array_get(p, i);
        if (!json_is_integer(x) || json_integer_value(x) < 0 || json_integer_value(x) > INT32_MAX) {
            char f[48];
            hx_api_pathf(f, sizeof f, "prompt[%zu]", i);
            return hx_api_errf(e, HX_API_ERR_INVALID, f, "expected a token id (a non-negative integer)");
        }
        q->tokens[i] = (int32_t)json_integer_value(x);
    }
    q->n_tokens = (int32_t)n;
    return ENG_OK;
}

static int parse_completion(const hx_api_route *rt, const char *path, const char *query, const char *body, size_t n,
                            hx_api_req *q, hx_api_error *e) {
    json_t *j = hx_api_parse_begin(rt, body, n, q, e);
    if (!j) return ENG_ERR_FORMAT;
    hx_api_params *p = &q->params;
    int32_t max_tokens = -1;
    int rc;
    if ((rc = read_prompt(json_object_get(j, "prompt"), &q->req, e)) ||
        (rc = hx_api_get_int(j, "max_tokens", -1, INT32_MAX, &max_tokens, e)) ||
        (rc = hx_api_get_int(j, "n_predict", -1, INT32_MAX, &max_tokens, e)) ||
        (rc = hx_api_get_int(j, "n_probs", 0, INT32_MAX, &p->n_probs, e)) ||
        (rc = hx_api_get_bool(j, "cache_prompt", &p->cache_prompt, e)) ||
        (rc = hx_api_get_int(j, "id_slot", -1, INT32_MAX, &p->id_slot, e)) ||
        (rc = hx_api_get_bool(j, "stream", &p->stream, e)) ||
        (rc = hx_api_get_bool(j, "return_tokens", &p->return_tokens, e)) ||
        (rc = hx_api_get_stop(j, "stop", p, e)) || (rc = hx_api_get_str(j, "model", &p->model, e)) ||
        (rc = hx_api_read_sampling(j, &p->sampling, e)))
        goto out;
    p->max_tokens = max_tokens;  /* -1: until the end of the turn or the context (llama-server's default) */
    p->logprobs = p->n_probs > 0;
    if (hx_api_note_unknown(q, j, &k_completion)) rc = hx_api_errf(e, HX_API_ERR_SERVER, NULL, "out of memory");
out:
    json_decref(j);
    if (rc) hx_api_req_free(q);
    return rc;
}

static const char *stop_type(hx_api_finish f) {
    switch (f) {
    case HX_API_FINISH_STOP:      return "eos";
    case HX_API_FINISH_TOOL_USE:  return "eos";
    case HX_API_FINISH_LENGTH:    return "limit";
    case HX_API_FINISH_STOP_WORD: return "word";
    default:                      return "none";
    }
}

static json_t *ids_json(const hx_api_token *t, int32_t n) {
    json_t *a = json_array();
    for (int32_t i = 0; a && i < n; i++)
        if (json_array_append_new(a, json_integer(t[i].id))) { json_decref(a); return NULL; }
    return a;
}

/* The final object of a completion (streamed: content and tokens already sent, so empty). */
static json_t *final_json(const hx_api_req *q, const hx_api_result *r, bool streamed) {
    char *text = streamed ? hx_strdup("") : hx_api_result_text(r);
    if (!text) return NULL;
    int64_t n_prompt = r->usage.prompt_tokens, n_gen = r->usage.completion_tokens;
    json_t *o = json_pack("{s:i, s:s, s:o, s:i, s:b, s:s, s:I, s:I, s:b, s:b, s:s, s:s, s:I}", "index", 0, "content",
                          text, "tokens",
                          !streamed && q->params.return_tokens ? ids_json(r->tokens, r->n_tokens) : json_array(),
                          "id_slot", r->id_slot, "stop", 1, "model", hx_api_model_of(q, r), "tokens_predicted",
                          (json_int_t)(n_gen >= 0 ? n_gen : r->n_tokens), "tokens_evaluated",
                          (json_int_t)(n_prompt >= 0 ? n_prompt : 0), "has_new_line", strchr(text, '\n') != NULL,
                          "truncated", 0, "stop_type", stop_type(r->finish), "stopping_word",
                          r->stop_word ? r->stop_word : "", "tokens_cached",
                          (json_int_t)((n_prompt >= 0 ? n_prompt : 0) + (n_gen >= 0 ? n_gen : 0)));
    free(text);
    if (o && r->timings.prompt_n >= 0 && json_object_set_new(o, "timings", hx_api_timings_json(&r->timings))) {
        json_decref(o);
        return NULL;
    }
    if (o && !streamed && q->params.n_probs > 0 &&
        json_object_set_new(o, "completion_probabilities", hx_api_probs_json(r->tokens, r->n_tokens))) {
        json_decref(o);
        return NULL;
    }
    return o;
}

static json_t *respond_completion(const hx_api_req *q, const hx_api_result *r) { return final_json(q, r, false); }

static int emit(hx_api_stream *s, const char *name, json_t *o) { return hx_sse_write_json(&s->out, name, o); }

/* A token's event as llama-server sends it: its id in "tokens" whatever return_tokens says (that
 * governs the final object), and "id_slot" -1 (a partial result's slot is never set there). */
static int stream_token_completion(hx_api_stream *s, const hx_api_token *t, const char *text, size_t n) {
    const hx_api_req *q = s->q;
    json_t *o = json_pack("{s:i, s:s%, s:o, s:b, s:i, s:I, s:I}", "index", 0, "content", text, n, "tokens",
                          t->id >= 0 ? ids_json(t, 1) : json_array(), "stop", 0, "id_slot", -1,
                          "tokens_predicted", (json_int_t)(s->n_tokens + 1), "tokens_evaluated",
                          (json_int_t)(s->r->usage.prompt_tokens >= 0 ? s->r->usage.prompt_tokens : 0));
    if (o && t->id >= 0 && q->params.n_probs > 0 &&
        json_object_set_new(o, "completion_probabilities", hx_api_probs_json(t, 1))) {
        json_decref(o);
        o = NULL;
    }
    return emit(s, NULL, o);
}

static int stream_block_completion(hx_api_stream *s, const hx_block *b) {
    /* a raw completion has no blocks: a scripted turn's text is its content */
    hx_api_token none = {.id = -1, .logprob = NAN};
    return stream_token_completion(s, &none, b->type == HX_BLOCK_TEXT ? b->text : "",
                                   b->type == HX_BLOCK_TEXT ? strlen(b->text) : 0);
}

static int stream_end_completion(hx_api_stream *s) { return emit(s, NULL, final_json(s->q, s->r, true)); }

// ----------------------------------------------------------------------------
// POST /completion: the client side

static json_t *request_completion(const hx_api_req *q) {
    const hx_api_params *p = &q->params;
    json_t *o = json_object();
    if (!o) return NULL;
    json_t *prompt;
    if (q->req.tokens) {
        prompt = json_array();
        for (int32_t i = 0; prompt && i < q->req.n_tokens; i++)
            if (json_array_append_new(prompt, json_integer(q->req.tokens[i]))) { json_decref(prompt); prompt = NULL; }
    } else {
        prompt = json_string(q->req.prompt ? q->req.prompt : "");
    }
    int bad = json_object_set_new(o, "prompt", prompt);
    if (p->max_tokens >= 0) bad |= json_object_set_new(o, "n_predict", json_integer(p->max_tokens));
    if (p->n_probs > 0) bad |= json_object_set_new(o, "n_probs", json_integer(p->n_probs));
    if (!p->cache_prompt) bad |= json_object_set_new(o, "cache_prompt", json_false());
    if (p->id_slot >= 0) bad |= json_object_set_new(o, "id_slot", json_integer(p->id_slot));
    if (p->stream) bad |= json_object_set_new(o, "stream", json_true());
    if (p->return_tokens) bad |= json_object_set_new(o, "return_tokens", json_true());
    if (!isnan(p->sampling.temperature)) bad |= json_object_set_new(o, "temperature", json_real(p->sampling.temperature));
    if (p->sampling.top_k != INT32_MIN) bad |= json_object_set_new(o, "top_k", json_integer(p->sampling.top_k));
    if (p->model) bad |= json_object_set_new(o, "model", json_string(p->model));
    if (p->n_stop) {
        json_t *st = json_array();
        for (int32_t i = 0; st && i < p->n_stop; i++) json_array_append_new(st, json_string(p->stop[i]));
        bad |= json_object_set_new(o, "stop", st);
    }
    if (bad) { json_decref(o); return NULL; }
    return o;
}

static hx_api_finish finish_of(const char *st) {
    if (!st) return HX_API_FINISH_NONE;
    if (!strcmp(st, "eos")) return HX_API_FINISH_STOP;
    if (!strcmp(st, "limit")) return HX_API_FINISH_LENGTH;
    if (!strcmp(st, "word")) return HX_API_FINISH_STOP_WORD;
    return HX_API_FINISH_NONE;
}

static int read_timings(const json_t *t, hx_api_result *r, hx_api_error *e) {
    if (!t) return ENG_OK;
    if (!json_is_object(t)) return hx_api_errf(e, HX_API_ERR_INVALID, "timings", "expected an object");
    static const char *const keys[] = {"cache_n", "prompt_n", "predicted_n"};
    int64_t *dst[] = {&r->timings.cache_n, &r->timings.prompt_n, &r->timings.predicted_n};
    for (int k = 0; k < 3; k++) {
        const json_t *v = json_object_get(t, keys[k]);
        char f[48];
        hx_api_pathf(f, sizeof f, "timings.%s", keys[k]);
        if (!json_is_integer(v)) return hx_api_errf(e, HX_API_ERR_INVALID, f, v ? "expected an integer" : "missing");
        *dst[k] = json_integer_value(v);
    }
    const json_t *pm = json_object_get(t, "prompt_ms"), *dm = json_object_get(t, "predicted_ms");
    if (json_is_number(pm)) r->timings.prompt_ms = json_number_value(pm);
    if (json_is_number(dm)) r->timings.predicted_ms = json_number_value(dm);
    return ENG_OK;
}

/* The fields every /completion object carries (partial or final) -> r. */
static int read_common(const json_t *j, hx_api_result *r, hx_api_error *e) {
    const json_t *slot = json_object_get(j, "id_slot"), *model = json_object_get(j, "model");
    if (slot && !json_is_integer(slot)) return hx_api_errf(e, HX_API_ERR_INVALID, "id_slot", "expected an integer");
    if (slot) r->id_slot = (int32_t)json_integer_value(slot);
    if (json_is_string(model) && !r->model && !(r->model = hx_strdup(json_string_value(model))))
        return hx_api_errf(e, HX_API_ERR_SERVER, NULL, "out of memory");
    const json_t *ev = json_object_get(j, "tokens_evaluated");
    if (json_is_integer(ev)) r->usage.prompt_tokens = json_integer_value(ev);
    return ENG_OK;
}

static int append_text(hx_api_result *r, const char *s, size_t n) {
    hx_message *m = &r->content;
    if (m->n_blocks == 0 || m->blocks[m->n_blocks - 1].type != HX_BLOCK_TEXT) {
        hx_block b;
        if (hx_block_init(&b, HX_BLOCK_TEXT, "", NULL, NULL, NULL, false)) return ENG_ERR_NOMEM;
        if (hx_message_push_block(m, &b)) { hx_block_free(&b); return ENG_ERR_NOMEM; }
    }
    hx_block *b = &m->blocks[m->n_blocks - 1];
    size_t have = strlen(b->text);
    char *t = realloc(b->text, have + n + 1);
    if (!t) return ENG_ERR_NOMEM;
    memcpy(t + have, s, n);
    t[have + n] = '\0';
    b->text = t;
    return ENG_OK;
}

/* The generated ids of a "tokens" array, when there are no probabilities to carry them. */
static int read_ids(const json_t *ids, hx_api_result *r, hx_api_error *e) {
    if (!ids) return ENG_OK;
    if (!json_is_array(ids)) return hx_api_errf(e, HX_API_ERR_INVALID, "tokens", "expected an array of token ids");
    for (size_t i = 0; i < json_array_size(ids); i++) {
        const json_t *x = json_array_get(ids, i);
        if (!json_is_integer(x)) return hx_api_errf(e, HX_API_ERR_INVALID, "tokens", "expected an array of token ids");
        hx_api_token t = {.id = (int32_t)json_integer_value(x), .logprob = NAN};
        if (hx_api_result_push_token(r, &t)) return hx_api_errf(e, HX_API_ERR_SERVER, NULL, "out of memory");
    }
    return ENG_OK;
}

/* One object of /completion (the whole response, or one streamed event). */
static int read_completion_object(const json_t *j, hx_api_result *r, hx_api_error *e, bool *stop) {
    if (!json_is_object(j)) return hx_api_errf(e, HX_API_ERR_INVALID, NULL, "expected a JSON object");
    const json_t *content = json_object_get(j, "content"), *st = json_object_get(j, "stop");
    if (!json_is_string(content)) return hx_api_errf(e, HX_API_ERR_INVALID, "content", content ? "expected a string" : "missing");
    if (!json_is_boolean(st)) return hx_api_errf(e, HX_API_ERR_INVALID, "stop", st ? "expected true or false" : "missing");
    *stop = json_is_true(st);
    int rc;
    if ((rc = read_common(j, r, e))) return rc;
    if (json_string_length(content) && append_text(r, json_string_value(content), json_string_length(content)))
        return hx_api_errf(e, HX_API_ERR_SERVER, NULL, "out of memory");
    const json_t *probs = json_object_get(j, "completion_probabilities");
    if (probs) rc = hx_api_probs_read(probs, "completion_probabilities", r, e);
    else rc = read_ids(json_object_get(j, "tokens"), r, e);
    if (rc) return rc;
    if (*stop) {
        const json_t *pred = json_object_get(j, "tokens_predicted");
        if (!json_is_integer(pred))
            return hx_api_errf(e, HX_API_ERR_INVALID, "tokens_predicted", pred ? "expected an integer" : "missing");
        r->usage.completion_tokens = json_integer_value(pred);
        r->finish = finish_of(json_string_value(json_object_get(j, "stop_type")));
        const char *sw = json_string_value(json_object_get(j, "stopping_word"));
        if (sw && sw[0] && !(r->stop_word = hx_strdup(sw))) return hx_api_errf(e, HX_API_ERR_SERVER, NULL, "out of memory");
        if ((rc = read_timings(json_object_get(j, "timings"), r, e))) return rc;
        if (r->timings.cache_n >= 0) r->usage.cached_tokens = r->timings.cache_n;
    }
    return ENG_OK;
}

static int read_completion(const hx_api_route *rt, const char *body, size_t n, hx_api_result *r, hx_api_error *e) {
    hx_api_result_init(r);
    json_t *j = hx_api_load_body(body, n, e);
    if (!j) return ENG_ERR_FORMAT;
    bool stop = false;
    int rc = read_completion_object(j, r, e, &stop);
    if (!rc && !stop) rc = hx_api_errf(e, HX_API_ERR_INVALID, "stop", "false in a response that is not streamed");
    json_decref(j);
    if (rc) hx_api_result_free(r);
    return rc;
}

static int stream_read_completion(hx_api_reader *rd, const hx_sse_event *ev) {
    json_error_t je;
    json_t *j = json_loadb(ev->data, ev->n, JSON_ALLOW_NUL, &je);  /* a token may be "\u0000" */
    if (!j) {
        rd->failed = true;
        return hx_api_errf(rd->e, HX_API_ERR_INVALID, NULL, "an event that is not JSON: %.80s", ev->data);
    }
    int rc;
    if (json_object_get(j, "error")) {
        rd->failed = true;
        if (!hx_api_read_error_json(&hx_api_llama, j, 0, rd->e))
            hx_api_errf(rd->e, HX_API_ERR_SERVER, NULL, "an error event: %.120s", ev->data);
        rc = ENG_ERR_FORMAT;
    } else {
        bool stop = false;
        int32_t before = rd->r->n_tokens;
        rc = read_completion_object(j, rd->r, rd->e, &stop);
        if (!rc && !stop && (rd->r->n_tokens > before || json_string_length(json_object_get(j, "content"))))
            rd->n_token_events++;
        if (!rc && stop) rd->done = true;
        if (rc) rd->failed = true;
    }
    json_decref(j);
    return rc;
}

// ----------------------------------------------------------------------------
// /tokenize, /detokenize, /apply-template

static int parse_tokenize(const hx_api_route *rt, const char *path, const char *query, const char *body, size_t n,
                          hx_api_req *q, hx_api_error *e) {
    json_t *j = hx_api_parse_begin(rt, body, n, q, e);
    if (!j) return ENG_ERR_FORMAT;
    hx_api_params *p = &q->params;
    const json_t *c = json_object_get(j, "content");
    int rc;
    if (c && !json_is_string(c)) rc = hx_api_errf(e, HX_API_ERR_INVALID, "content", "expected a string");
    else if (!(q->req.prompt = hx_strdup(c ? json_string_value(c) : ""))) rc = hx_api_errf(e, HX_API_ERR_SERVER, NULL, "out of memory");
    else if (!(rc = hx_api_get_bool(j, "add_special", &p->add_special, e)) &&
             !(rc = hx_api_get_bool(j, "parse_special", &p->parse_special, e)))
        rc = hx_api_get_bool(j, "with_pieces", &p->with_pieces, e);
    json_decref(j);
    if (rc) hx_api_req_free(q);
    return rc;
}

static json_t *respond_tokenize(const hx_api_req *q, const hx_api_result *r) {
    json_t *a = json_array();
    for (int32_t i = 0; a && i < r->n_tokens; i++) {
        const hx_api_token *t = &r->tokens[i];
        json_t *x;
        if (!q->params.with_pieces) x = json_integer(t->id);
        else {
            /* llama-server: the piece as a string when it is valid UTF-8, else its byte values */
            bool valid = hx_api_utf8_complete(t->text, t->len) == t->len;
            char *clean = valid ? hx_api_utf8_sanitize(t->text, t->len, NULL) : NULL;
            valid = valid && clean && strlen(clean) == t->len && !memcmp(clean, t->text, t->len);
            free(clean);
            x = json_pack("{s:i, s:o}", "id", t->id, "piece",
                          valid ? json_stringn(t->text, t->len) : hx_api_bytes_json(t->text, t->len));
        }
        if (json_array_append_new(a, x)) { json_decref(a); return NULL; }
    }
    return a ? json_pack("{s:o}", "tokens", a) : NULL;
}

static json_t *request_tokenize(const hx_api_req *q) {
    return json_pack("{s:s, s:b, s:b, s:b}", "content", q->req.prompt ? q->req.prompt : "", "add_special",
                     q->params.add_special, "parse_special", q->params.parse_special, "with_pieces",
                     q->params.with_pieces);
}

static int read_tokenize(const hx_api_route *rt, const char *body, size_t n, hx_api_result *r, hx_api_error *e) {
    hx_api_result_init(r);
    json_t *j = hx_api_load_body(body, n, e);
    if (!j) return ENG_ERR_FORMAT;
    const json_t *a = json_object_get(j, "tokens");
    int rc = ENG_OK;
    if (!json_is_array(a)) rc = hx_api_errf(e, HX_API_ERR_INVALID, "tokens", a ? "expected an array" : "missing");
    for (size_t i = 0; !rc && i < json_array_size(a); i++) {
        const json_t *x = json_array_get(a, i);
        hx_api_token t = {.id = -1, .logprob = NAN};
        char f[48], *bytes = NULL;
        hx_api_pathf(f, sizeof f, "tokens[%zu]", i);
        if (json_is_integer(x)) t.id = (int32_t)json_integer_value(x);
        else if (json_is_object(x) && json_is_integer(json_object_get(x, "id"))) {
            t.id = (int32_t)json_integer_value(json_object_get(x, "id"));
            const json_t *pc = json_object_get(x, "piece");
            if (json_is_string(pc)) t.text = (char *)json_string_value(pc), t.len = json_string_length(pc);
            else if (json_is_array(pc)) {
                t.len = json_array_size(pc);
                if (!(bytes = malloc(t.len + 1))) { rc = hx_api_errf(e, HX_API_ERR_SERVER, NULL, "out of memory"); break; }
                for (size_t k = 0; k < t.len; k++) bytes[k] = (char)json_integer_value(json_array_get(pc, k));
                t.text = bytes;
            }
        } else {
            rc = hx_api_errf(e, HX_API_ERR_INVALID, f, "expected a token id or {\"id\", \"piece\"}");
            break;
        }
        if (hx_api_result_push_token(r, &t)) rc = hx_api_errf(e, HX_API_ERR_SERVER, NULL, "out of memory");
        free(bytes);
    }
    if (!rc && r->n_tokens) {  /* the ids alone, too */
        if (!(r->ids = malloc(sizeof(int32_t) * (size_t)r->n_tokens))) rc = hx_api_errf(e, HX_API_ERR_SERVER, NULL, "out of memory");
        for (int32_t i = 0; !rc && i < r->n_tokens; i++) r->ids[i] = r->tokens[i].id;
        r->n_ids = r->n_tokens;
    }
    json_decref(j);
    if (rc) hx_api_result_free(r);
    return rc;
}

static int parse_detokenize(const hx_api_route *rt, const char *path, const char *query, const char *body, size_t n,
                            hx_api_req *q, hx_api_error *e) {
    json_t *j = hx_api_parse_begin(rt, body, n, q, e);
    if (!j) return ENG_ERR_FORMAT;
    const json_t *a = json_object_get(j, "tokens");
    int rc = ENG_OK;
    if (a && !json_is_array(a)) rc = hx_api_errf(e, HX_API_ERR_INVALID, "tokens", "expected an array of token ids");
    size_t n_ids = json_array_size(a);
    if (!rc && !(q->req.tokens = malloc(sizeof(int32_t) * (n_ids ? n_ids : 1))))
        rc = hx_api_errf(e, HX_API_ERR_SERVER, NULL, "out of memory");
    for (size_t i = 0; !rc && i < n_ids; i++) {
        const json_t *x = json_array_get(a, i);
        char f[48];
        hx_api_pathf(f, sizeof f, "tokens[%zu]", i);
        if (!json_is_integer(x) || json_integer_value(x) < 0 || json_integer_value(x) > INT32_MAX)
            rc = hx_api_errf(e, HX_API_ERR_INVALID, f, "expected a token id (a non-negative integer)");
        else q->req.tokens[q->req.n_tokens++] = (int32_t)json_integer_value(x);
    }
    json_decref(j);
    if (rc) hx_api_req_free(q);
    return rc;
}

static json_t *respond_text(const char *key, const hx_api_result *r) {
    return json_pack("{s:s}", key, r->text ? r->text : "");
}
static json_t *respond_detokenize(const hx_api_req *q, const hx_api_result *r) { return respond_text("content", r); }
static json_t *respond_apply_template(const hx_api_req *q, const hx_api_result *r) { return respond_text("prompt", r); }

static json_t *request_detokenize(const hx_api_req *q) {
    json_t *a = json_array();
    for (int32_t i = 0; a && i < q->req.n_tokens; i++)
        if (json_array_append_new(a, json_integer(q->req.tokens[i]))) { json_decref(a); return NULL; }
    return a ? json_pack("{s:o}", "tokens", a) : NULL;
}

static int read_text(const char *key, const char *body, size_t n, hx_api_result *r, hx_api_error *e) {
    hx_api_result_init(r);
    json_t *j = hx_api_load_body(body, n, e);
    if (!j) return ENG_ERR_FORMAT;
    const json_t *c = json_object_get(j, key);
    int rc = ENG_OK;
    if (!json_is_string(c)) rc = hx_api_errf(e, HX_API_ERR_INVALID, key, c ? "expected a string" : "missing");
    else if (!(r->text = hx_strdup(json_string_value(c)))) rc = hx_api_errf(e, HX_API_ERR_SERVER, NULL, "out of memory");
    json_decref(j);
    return rc;
}
static int read_detokenize(const hx_api_route *rt, const char *body, size_t n, hx_api_result *r, hx_api_error *e) {
    return read_text("content", body, n, r, e);
}
static int read_apply_template(const hx_api_route *rt, const char *body, size_t n, hx_api_result *r, hx_api_error *e) {
    return read_text("prompt", body, n, r, e);
}

static int parse_apply_template(const hx_api_route *rt, const char *path, const char *query, const char *body,
                                size_t n, hx_api_req *q, hx_api_error *e) {
    json_t *j = hx_api_parse_begin(rt, body, n, q, e);
    if (!j) return ENG_ERR_FORMAT;
    char err[768];
    int rc = hx_api_openai_prompt(j, "", 0, &q->req, err, sizeof err);
    if (rc) hx_api_err_from_text(e, rc, err);
    else q->req.response.role = HX_ROLE_ASSISTANT;
    json_decref(j);
    if (rc) hx_api_req_free(q);
    return rc;
}

static json_t *request_apply_template(const hx_api_req *q) {
    json_t *o = json_object();
    if (o && hx_api_openai_prompt_json(&q->req, o)) { json_decref(o); return NULL; }
    return o;
}

// ----------------------------------------------------------------------------
// /health, /props, /slots

static json_t *respond_health(const hx_api_req *q, const hx_api_result *r) { return json_pack("{s:s}", "status", "ok"); }

static json_t *respond_props(const hx_api_req *q, const hx_api_result *r) {
    const hx_api_info *in = r->info;
    if (!in) return NULL;
    json_error_t je;
    json_t *kv = in->cache_json ? json_loads(in->cache_json, 0, &je) : NULL;
    json_t *o = json_pack("{s:{s:{s:i, s:[s]}, s:i}, s:i, s:s, s:s, s:{s:b, s:b}, s:b, s:b, s:b, s:s, s:s, s:s, s:s, s:b}",
                     "default_generation_settings", "params", "n_probs", 0, "samplers", "greedy", "n_ctx", in->n_ctx,
                     "total_slots", in->total_slots, "model_alias", in->model_name ? in->model_name : "",
                     "model_path", in->model_path ? in->model_path : "", "modalities", "vision", 0, "audio", 0,
                     "endpoint_slots", 1, "endpoint_props", 0, "endpoint_metrics", 1, "chat_template",
                     in->template_name ? in->template_name : "", "bos_token", in->bos_token ? in->bos_token : "",
                     "eos_token", in->eos_token ? in->eos_token : "", "build_info",
                     in->build_info ? in->build_info : "", "is_sleeping", 0);
    if (o && kv) json_object_set(o, "kvreplay", kv);  /* what a client (kvreplay probe) expects of its cache */
    json_decref(kv);
    return o;
}

static json_t *respond_slots(const hx_api_req *q, const hx_api_result *r) {
    const hx_api_info *in = r->info;
    json_t *a = json_array();
    for (int32_t i = 0; a && in && i < in->n_slots; i++) {
        const hx_api_slot *s = &in->slots[i];
        json_t *o = json_pack("{s:i, s:i, s:b, s:b, s:I, s:I}", "id", s->id, "n_ctx", s->n_ctx, "speculative", 0,
                              "is_processing", s->is_processing, "n_tokens", (json_int_t)s->n_tokens, "id_task",
                              (json_int_t)s->id_task);
        if (json_array_append_new(a, o)) { json_decref(a); return NULL; }
    }
    return a;
}

/* POST /slots/ID?action=erase (llama-server's /slots/:id_slot). */
static int parse_slot_action(const hx_api_route *rt, const char *path, const char *query, const char *body, size_t n,
                             hx_api_req *q, hx_api_error *e) {
    hx_api_req_init(q);
    q->route = rt;
    const char *id = strrchr(path, '/');
    char *end = NULL;
    long v = id ? strtol(id + 1, &end, 10) : -1;
    if (!id || !id[1] || *end || v < 0 || v > INT32_MAX) return hx_api_errf(e, HX_API_ERR_INVALID, "id_slot", "Invalid slot ID");
    q->params.slot_id = (int32_t)v;
    const char *a = query ? strstr(query, "action=") : NULL;
    if (a && a != query && a[-1] != '&') a = NULL;
    size_t k = a ? strcspn(a + 7, "&") : 0;
    if (!a || k == 0 || k >= sizeof q->params.action) return hx_api_errf(e, HX_API_ERR_INVALID, "action", "Invalid action");
    memcpy(q->params.action, a + 7, k);
    q->params.action[k] = '\0';
    if (!strcmp(q->params.action, "save") || !strcmp(q->params.action, "restore"))
        return hx_api_errf(e, HX_API_ERR_NOT_SUPPORTED, "action",
                           "slot %s is not supported by kvreplay (a policy's state is not a llama.cpp slot file)",
                           q->params.action);
    if (strcmp(q->params.action, "erase")) return hx_api_errf(e, HX_API_ERR_INVALID, "action", "Invalid action");
    return ENG_OK;
}

static json_t *respond_slot_action(const hx_api_req *q, const hx_api_result *r) {
    return json_pack("{s:i, s:I}", "id_slot", q->params.slot_id, "n_erased", (json_int_t)(r->info ? r->info->n_erased : 0));
}

/* Information endpoints, client side: the whole body kept as canonical JSON. */
static int read_info(const hx_api_route *rt, const char *body, size_t n, hx_api_result *r, hx_api_error *e) {
    hx_api_result_init(r);
    json_error_t je;
    json_t *j = json_loadb(body, n, JSON_REJECT_DUPLICATES, &je);
    if (!j) return hx_api_errf(e, HX_API_ERR_INVALID, NULL, "invalid JSON at line %d column %d: %s", je.line, je.column, je.text);
    const char *alias = json_string_value(json_object_get(j, "model_alias"));
    if (alias && !(r->model = hx_strdup(alias))) { json_decref(j); return hx_api_errf(e, HX_API_ERR_SERVER, NULL, "out of memory"); }
    r->json = hx_json_canonical(j);
    json_decref(j);
    if (r->json) return ENG_OK;
    hx_api_result_free(r);
    return hx_api_errf(e, HX_API_ERR_SERVER, NULL, "out of memory");
}

// ----------------------------------------------------------------------------
// The dialect

static const hx_api_route llama_routes[] = {
    {"POST", "/completion", HX_API_OP_GENERATE, &hx_api_llama, parse_completion, respond_completion,
     request_completion, read_completion, NULL, stream_token_completion, stream_block_completion,
     stream_end_completion, stream_read_completion, NULL},
    {"POST", "/completions", HX_API_OP_GENERATE, &hx_api_llama, parse_completion, respond_completion,
     request_completion, read_completion, NULL, stream_token_completion, stream_block_completion,
     stream_end_completion, stream_read_completion, NULL},
    {"POST", "/tokenize", HX_API_OP_TOKENIZE, &hx_api_llama, parse_tokenize, respond_tokenize, request_tokenize,
     read_tokenize, NULL, NULL, NULL, NULL, NULL, NULL},
    {"POST", "/detokenize", HX_API_OP_DETOKENIZE, &hx_api_llama, parse_detokenize, respond_detokenize,
     request_detokenize, read_detokenize, NULL, NULL, NULL, NULL, NULL, NULL},
    {"POST", "/apply-template", HX_API_OP_APPLY_TEMPLATE, &hx_api_llama, parse_apply_template,
     respond_apply_template, request_apply_template, read_apply_template, NULL, NULL, NULL, NULL, NULL, NULL},
    {"GET", "/health", HX_API_OP_HEALTH, &hx_api_llama, NULL, respond_health, NULL, read_info, NULL, NULL, NULL,
     NULL, NULL, NULL},
    {"GET", "/v1/health", HX_API_OP_HEALTH, &hx_api_llama, NULL, respond_health, NULL, read_info, NULL, NULL, NULL,
     NULL, NULL, NULL},
    {"GET", "/props", HX_API_OP_PROPS, &hx_api_llama, NULL, respond_props, NULL, read_info, NULL, NULL, NULL, NULL,
     NULL, NULL},
    {"GET", "/slots", HX_API_OP_SLOTS, &hx_api_llama, NULL, respond_slots, NULL, read_info, NULL, NULL, NULL, NULL,
     NULL, NULL},
    {"POST", "/slots/*", HX_API_OP_SLOT_ACTION, &hx_api_llama, parse_slot_action, respond_slot_action, NULL,
     read_info, NULL, NULL, NULL, NULL, NULL, NULL},
    {"GET", "/metrics", HX_API_OP_METRICS, &hx_api_llama, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL},
    {0},
};

/* {"error": {"code", "message", "type"}}, the context error with both lengths */
static const hx_api_error_shape llama_errors = {
    .type_key = "type",
    .types = hx_api_server_error_types,
    .code = true,
    .context_counts = true,
};

const hx_api_dialect hx_api_llama = {
    .name = "llama",
    .routes = llama_routes,
    .errors = &llama_errors,
};
