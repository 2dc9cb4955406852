/*
 * harness/api/api.c: the dialect registry and what every dialect shares:
 * errors, requests and results, sampling fields, UTF-8 of token pieces, and
 * the dialect-neutral halves of streaming (see api.h).
 */
#include "api.h"

#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "errors.h"
#include "json.h"
#include "status.h"
#include "str.h"

// ----------------------------------------------------------------------------
// The registry: one line per dialect (a dialect is one file, harness/api/NAME.c,
// defining `const hx_api_dialect hx_api_NAME`).

#define HX_API_DIALECT_LIST(X) \
    X(llama)                   \
    X(openai)                  \
    X(anthropic)               \
    X(responses)               \
    X(gemini)                  \
    /* one line per dialect, above this one */

#define HX_API_DECLARE(id) extern const hx_api_dialect hx_api_##id;
#define HX_API_ENTRY(id) &hx_api_##id,
HX_API_DIALECT_LIST(HX_API_DECLARE)
const hx_api_dialect *const hx_api_dialects[] = {HX_API_DIALECT_LIST(HX_API_ENTRY) NULL};

const hx_api_dialect *hx_api_dialect_find(const char *name) {
    for (size_t i = 0; name && hx_api_dialects[i]; i++)
        if (!strcmp(hx_api_dialects[i]->name, name)) return hx_api_dialects[i];
    return NULL;
}

/* A route's path pattern: '*' at the end matches the rest of the path (at least one character); '*'
 * inside matches one name without '/' or ':' (the model of /v1beta/models/{model}:generateContent). */
static bool path_matches(const char *pattern, const char *path) {
    const char *star = strchr(pattern, '*');
    if (!star) return !strcmp(pattern, path);
    size_t pre = (size_t)(star - pattern);
    if (strncmp(pattern, path, pre)) return false;
    if (!star[1]) return path[pre] != '\0';
    size_t k = strcspn(path + pre, "/:");
    return k > 0 && path_matches(star + 1, path + pre + k);
}

const hx_api_route *hx_api_route_find(const char *method, const char *path, bool *other_method) {
    if (other_method) *other_method = false;
    for (size_t d = 0; hx_api_dialects[d]; d++)
        for (const hx_api_route *r = hx_api_dialects[d]->routes; r->path; r++) {
            if (!path_matches(r->path, path)) continue;
            if (!strcmp(r->method, method)) return r;
            if (other_method) *other_method = true;
        }
    return NULL;
}

int hx_api_route_target(const hx_api_route *rt, const char *model, char *out, size_t cap) {
    const char *star = strchr(rt->path, '*');
    int n = star && star[1] ? snprintf(out, cap, "%.*s%s%s", (int)(star - rt->path), rt->path, model ? model : "kvreplay",
                                       star + 1)
                            : snprintf(out, cap, "%s", rt->path);
    if (n >= 0 && (size_t)n < cap && rt->query) n += snprintf(out + n, cap - (size_t)n, "?%s", rt->query);
    return n < 0 || (size_t)n >= cap ? ENG_ERR_RANGE : ENG_OK;
}

const hx_api_route *hx_api_route_of(const hx_api_dialect *d, hx_api_op op) {
    for (const hx_api_route *r = d->routes; r->path; r++)
        if (r->op == op) return r;
    return NULL;
}

// ----------------------------------------------------------------------------
// Errors

int hx_api_err_status(hx_api_err_kind kind) {
    switch (kind) {
    case HX_API_ERR_NONE:          return 200;
    case HX_API_ERR_INVALID:       return 400;
    case HX_API_ERR_CONTEXT:       return 400;
    case HX_API_ERR_AUTH:          return 401;
    case HX_API_ERR_NOT_FOUND:     return 404;
    case HX_API_ERR_METHOD:        return 405;
    case HX_API_ERR_TOO_LARGE:     return 413;
    case HX_API_ERR_SERVER:        return 500;
    case HX_API_ERR_NOT_SUPPORTED: return 501;
    case HX_API_ERR_UNAVAILABLE:   return 503;
    case HX_API_ERR_KINDS:         break;
    }
    return 500;
}

const char *hx_api_err_kind_name(hx_api_err_kind kind) {
    static const char *const names[] = {"none", "invalid", "context", "auth", "not_found", "method",
                                        "too_large", "server", "not_supported", "unavailable"};
    return (unsigned)kind < sizeof names / sizeof names[0] ? names[kind] : "?";
}

int hx_api_errf(hx_api_error *e, hx_api_err_kind kind, const char *field, const char *fmt, ...) {
    char msg[640];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (e) {
        memset(e, 0, sizeof *e);
        e->kind = kind;
        e->status = hx_api_err_status(kind);
        e->n_prompt_tokens = e->n_ctx = -1;
        snprintf(e->field, sizeof e->field, "%s", field ? field : "");
        if (field && field[0]) snprintf(e->message, sizeof e->message, "%s: %s", field, msg);
        else snprintf(e->message, sizeof e->message, "%s", msg);
    }
    return kind == HX_API_ERR_SERVER ? ENG_ERR_NOMEM : ENG_ERR_FORMAT;
}

// ----------------------------------------------------------------------------
// Requests and results

void hx_api_req_init(hx_api_req *q) {
    memset(q, 0, sizeof *q);
    q->req.response.role = HX_ROLE_ASSISTANT;
    hx_api_params *p = &q->params;
    p->max_tokens = -1;
    p->cache_prompt = true;
    p->id_slot = -1;
    p->parse_special = true;
    p->slot_id = -1;
    hx_api_sampling *s = &p->sampling;
    s->temperature = s->top_p = s->min_p = s->typical_p = NAN;
    s->repeat_penalty = s->presence_penalty = s->frequency_penalty = NAN;
    s->top_k = INT32_MIN;
    s->seed = INT64_MIN;
}

void hx_api_req_free(hx_api_req *q) {
    if (!q) return;
    const hx_api_route *rt = q->route;
    hx_request_free(&q->req);
    free(q->params.model);
    free(q->params.sampling.other);
    for (int32_t i = 0; i < q->params.n_stop; i++) free(q->params.stop[i]);
    free(q->params.stop);
    free(q->params.tool_choice);
    free(q->params.ignored);
    for (int32_t i = 0; i < q->n_ignored; i++) free(q->ignored_paths[i]);
    free(q->ignored_paths);
    free(q->params.cache_salt);
    free(q->params.previous_response_id);
    free(q->params.cache_key);
    hx_api_req_init(q);
    q->route = rt;
}

void hx_api_result_init(hx_api_result *r) {
    memset(r, 0, sizeof *r);
    r->content.role = HX_ROLE_ASSISTANT;
    r->usage.prompt_tokens = r->usage.cached_tokens = r->usage.cache_creation_tokens = -1;
    r->usage.completion_tokens = -1;
    r->timings.cache_n = r->timings.prompt_n = r->timings.predicted_n = -1;
    r->id_slot = -1;
    r->n_input_tokens = -1;
}

static void token_free(hx_api_token *t) {
    free(t->text);
    for (int32_t k = 0; k < t->n_top; k++) free(t->top[k].text);
    free(t->top);
}

void hx_api_result_free(hx_api_result *r) {
    if (!r) return;
    free(r->id);
    free(r->model);
    hx_message_free(&r->content);
    for (int32_t i = 0; i < r->n_tokens; i++) token_free(&r->tokens[i]);
    free(r->tokens);
    free(r->stop_word);
    free(r->text);
    free(r->ids);
    free(r->json);
    hx_api_result_init(r);
}

static char *dup_bytes(const char *s, size_t n) {
    char *d = malloc(n + 1);
    if (!d) return NULL;
    if (n) memcpy(d, s, n);
    d[n] = '\0';
    return d;
}

int hx_api_result_push_token(hx_api_result *r, const hx_api_token *t) {
    hx_api_token *nt = realloc(r->tokens, sizeof *nt * (size_t)(r->n_tokens + 1));
    if (!nt) return ENG_ERR_NOMEM;
    r->tokens = nt;
    hx_api_token c = *t;
    c.text = dup_bytes(t->text ? t->text : "", t->text ? t->len : 0);
    c.len = t->text ? t->len : 0;
    c.top = NULL;
    c.n_top = 0;
    if (!c.text) return ENG_ERR_NOMEM;
    if (t->n_top > 0) {
        if (!(c.top = calloc((size_t)t->n_top, sizeof *c.top))) { free(c.text); return ENG_ERR_NOMEM; }
        for (int32_t k = 0; k < t->n_top; k++, c.n_top++) {
            c.top[k] = t->top[k];
            if (!(c.top[k].text = dup_bytes(t->top[k].text ? t->top[k].text : "", t->top[k].len))) {
                token_free(&c);
                return ENG_ERR_NOMEM;
            }
        }
    }
    r->tokens[r->n_tokens++] = c;
    return ENG_OK;
}

char *hx_api_result_text(const hx_api_result *r) {
    eng_buf b = {0};
    for (int32_t i = 0; i < r->content.n_blocks; i++)
        if (r->content.blocks[i].type == HX_BLOCK_TEXT &&
            eng_buf_append(&b, r->content.blocks[i].text, strlen(r->content.blocks[i].text))) {
            eng_buf_free(&b);
            return NULL;
        }
    if (!b.data && eng_buf_append(&b, "", 0)) return NULL;
    return b.data;
}

static bool bytes_eq(const char *a, size_t na, const char *b, size_t nb) {
    return na == nb && (na == 0 || !memcmp(a, b, na));
}

static bool float_bits_eq(float a, float b) { return !memcmp(&a, &b, sizeof a); }

bool hx_api_result_equal(const hx_api_result *a, const hx_api_result *b) {
    if (!hx_message_equal(&a->content, &b->content) || a->n_tokens != b->n_tokens || a->finish != b->finish)
        return false;
    if ((a->stop_word == NULL) != (b->stop_word == NULL) || (a->stop_word && strcmp(a->stop_word, b->stop_word)))
        return false;
    for (int32_t i = 0; i < a->n_tokens; i++) {
        const hx_api_token *x = &a->tokens[i], *y = &b->tokens[i];
        if (x->id != y->id || !bytes_eq(x->text, x->len, y->text, y->len) || x->n_top != y->n_top) return false;
        if (!(isnan(x->logprob) && isnan(y->logprob)) && !float_bits_eq(x->logprob, y->logprob)) return false;
        for (int32_t k = 0; k < x->n_top; k++)
            if (x->top[k].id != y->top[k].id || !float_bits_eq(x->top[k].logprob, y->top[k].logprob) ||
                !bytes_eq(x->top[k].text, x->top[k].len, y->top[k].text, y->top[k].len))
                return false;
    }
    const hx_api_usage *u = &a->usage, *v = &b->usage;
    if (u->prompt_tokens != v->prompt_tokens || u->cached_tokens != v->cached_tokens ||
        u->cache_creation_tokens != v->cache_creation_tokens || u->completion_tokens != v->completion_tokens)
        return false;
    const hx_api_timings *t = &a->timings, *w = &b->timings;
    return t->cache_n == w->cache_n && t->prompt_n == w->prompt_n && t->predicted_n == w->predicted_n &&
           a->id_slot == b->id_slot;
}

// ----------------------------------------------------------------------------
// Bodies and sampling fields

json_t *hx_api_load_body(const char *body, size_t n, hx_api_error *e) {
    json_error_t je;
    json_t *j = json_loadb(body ? body : "", n, JSON_REJECT_DUPLICATES, &je);
    if (!j) {
        hx_api_errf(e, HX_API_ERR_INVALID, NULL, "invalid JSON at line %d column %d: %s", je.line, je.column,
                    je.text);
        return NULL;
    }
    if (!json_is_object(j)) {
        json_decref(j);
        hx_api_errf(e, HX_API_ERR_INVALID, NULL, "the body must be a JSON object");
        return NULL;
    }
    return j;
}

json_t *hx_api_parse_begin(const hx_api_route *rt, const char *body, size_t n, hx_api_req *q, hx_api_error *e) {
    hx_api_req_init(q);
    q->route = rt;
    return hx_api_load_body(body, n, e);
}

bool hx_api_sampling_honoured(const hx_api_sampling *s, char *why, size_t cap) {
    if (why && cap) why[0] = '\0';
    bool greedy_k = s->top_k == 1;
    if (!isnan(s->temperature) && s->temperature > 0 && !greedy_k) {
        if (why) snprintf(why, cap, "temperature %g", s->temperature);
        return false;
    }
    if (!isnan(s->repeat_penalty) && s->repeat_penalty != 1.0) {
        if (why) snprintf(why, cap, "repeat_penalty %g", s->repeat_penalty);
        return false;
    }
    if (!isnan(s->presence_penalty) && s->presence_penalty != 0.0) {
        if (why) snprintf(why, cap, "presence_penalty %g", s->presence_penalty);
        return false;
    }
    if (!isnan(s->frequency_penalty) && s->frequency_penalty != 0.0) {
        if (why) snprintf(why, cap, "frequency_penalty %g", s->frequency_penalty);
        return false;
    }
    if (s->other) {
        if (why) snprintf(why, cap, "%s", s->other);
        return false;
    }
    return true;  /* greedy: top_p, min_p, typical_p and the seed cannot change the argmax */
}

/* Reads number field key of body into *out (a real); false with e when it has another type. */
static int read_real(const json_t *body, const char *key, double *out, hx_api_error *e) {
    const json_t *v = json_object_get(body, key);
    if (!v || json_is_null(v)) return ENG_OK;
    if (!json_is_number(v)) return hx_api_errf(e, HX_API_ERR_INVALID, key, "expected a number");
    *out = json_number_value(v);
    return ENG_OK;
}

/* The sampling fields kvreplay reads by name; any other of these counts as "other". */
static const char *const k_other_sampling[] = {
    "mirostat", "mirostat_tau", "mirostat_eta", "dry_multiplier", "dry_base", "dry_allowed_length",
    "dry_penalty_last_n", "xtc_probability", "xtc_threshold", "logit_bias", "dynatemp_range",
    "dynatemp_exponent", "top_n_sigma", "grammar", "json_schema", "response_format", "n", "n_cmpl",
    "best_of", "ignore_eos", "samplers", "repeat_last_n", "penalty_last_n"};

/* Whether a value of an "other" sampling field is the neutral one (what greedy decoding does anyway). */
static bool neutral_other(const char *key, const json_t *v) {
    if (json_is_null(v)) return true;
    if (!strcmp(key, "n") || !strcmp(key, "n_cmpl") || !strcmp(key, "best_of"))
        return json_is_integer(v) && json_integer_value(v) == 1;
    if (!strcmp(key, "mirostat") || !strcmp(key, "dry_multiplier") || !strcmp(key, "xtc_probability") ||
        !strcmp(key, "dynatemp_range"))
        return json_is_number(v) && json_number_value(v) == 0;
    if (!strcmp(key, "ignore_eos")) return json_is_false(v);
    if (!strcmp(key, "logit_bias")) return (json_is_object(v) && json_object_size(v) == 0) ||
                                           (json_is_array(v) && json_array_size(v) == 0);
    if (!strcmp(key, "response_format")) {
        const char *t = json_string_value(json_object_get(v, "type"));
        return t && !strcmp(t, "text");
    }
    /* the rest only tune samplers that greedy decoding does not run */
    return strcmp(key, "grammar") && strcmp(key, "json_schema");
}

int hx_api_read_sampling(const json_t *body, hx_api_sampling *s, hx_api_error *e) {
    int rc;
    if ((rc = read_real(body, "temperature", &s->temperature, e)) || (rc = read_real(body, "top_p", &s->top_p, e)) ||
        (rc = read_real(body, "min_p", &s->min_p, e)) || (rc = read_real(body, "typical_p", &s->typical_p, e)) ||
        (rc = read_real(body, "repeat_penalty", &s->repeat_penalty, e)) ||
        (rc = read_real(body, "presence_penalty", &s->presence_penalty, e)) ||
        (rc = read_real(body, "frequency_penalty", &s->frequency_penalty, e)))
        return rc;
    const json_t *k = json_object_get(body, "top_k");
    if (k && !json_is_null(k)) {
        if (!json_is_integer(k) || json_integer_value(k) < INT32_MIN + 1 || json_integer_value(k) > INT32_MAX)
            return hx_api_errf(e, HX_API_ERR_INVALID, "top_k", "expected an integer");
        s->top_k = (int32_t)json_integer_value(k);
    }
    const json_t *seed = json_object_get(body, "seed");
    if (seed && !json_is_null(seed)) {
        if (!json_is_integer(seed)) return hx_api_errf(e, HX_API_ERR_INVALID, "seed", "expected an integer");
        s->seed = json_integer_value(seed);
    }
    json_t *other = NULL;
    for (size_t i = 0; i < sizeof k_other_sampling / sizeof k_other_sampling[0]; i++) {
        const json_t *v = json_object_get(body, k_other_sampling[i]);
        if (!v || neutral_other(k_other_sampling[i], v)) continue;
        if (!other && !(other = json_object())) return hx_api_errf(e, HX_API_ERR_SERVER, NULL, "out of memory");
        json_object_set(other, k_other_sampling[i], (json_t *)v);
    }
    if (other) {
        s->other = hx_json_canonical(other);
        json_decref(other);
        if (!s->other) return hx_api_errf(e, HX_API_ERR_SERVER, NULL, "out of memory");
    }
    return ENG_OK;
}

// ----------------------------------------------------------------------------
// UTF-8 of token pieces

/* Length of the valid UTF-8 sequence starting at s (n bytes left), 0 when invalid or incomplete. */
static size_t utf8_seq(const unsigned char *s, size_t n) {
    unsigned c = s[0];
    if (c < 0x80) return 1;
    size_t L;
    unsigned lo = 0x80, hi = 0xBF;
    if (c >= 0xC2 && c <= 0xDF) L = 2;
    else if (c == 0xE0) L = 3, lo = 0xA0;
    else if (c >= 0xE1 && c <= 0xEC) L = 3;
    else if (c == 0xED) L = 3, hi = 0x9F;           /* no surrogates */
    else if (c >= 0xEE && c <= 0xEF) L = 3;
    else if (c == 0xF0) L = 4, lo = 0x90;
    else if (c >= 0xF1 && c <= 0xF3) L = 4;
    else if (c == 0xF4) L = 4, hi = 0x8F;           /* at most U+10FFFF */
    else return 0;
    if (n < L) return 0;
    if (s[1] < lo || s[1] > hi) return 0;
    for (size_t k = 2; k < L; k++)
        if (s[k] < 0x80 || s[k] > 0xBF) return 0;
    return L;
}

/* Whether the n bytes at s (n < the sequence's length) could still begin a valid sequence. */
static bool utf8_could_continue(const unsigned char *s, size_t n) {
    unsigned char buf[4] = {s[0], 0x80, 0x80, 0x80};
    for (size_t k = 1; k < n; k++) buf[k] = s[k];
    /* complete it with the smallest continuation allowed after each lead */
    if (n == 1 && s[0] == 0xE0) buf[1] = 0xA0;
    if (n == 1 && s[0] == 0xF0) buf[1] = 0x90;
    return utf8_seq(buf, 4) > n;
}

size_t hx_api_utf8_complete(const char *str, size_t n) {
    const unsigned char *s = (const unsigned char *)str;
    size_t i = 0, keep = 0;
    while (i < n) {
        size_t L = utf8_seq(s + i, n - i);
        if (L) { i += L; keep = i; continue; }
        if (n - i < 4 && utf8_could_continue(s + i, n - i)) return keep;  /* an incomplete tail */
        i++;          /* an invalid byte: it stays invalid whatever follows */
        keep = i;
    }
    return keep;
}

json_t *hx_api_timings_json(const hx_api_timings *t) {
    double pt = t->prompt_n > 0 ? t->prompt_ms / (double)t->prompt_n : 0;
    double dt = t->predicted_n > 0 ? t->predicted_ms / (double)t->predicted_n : 0;
    return json_pack("{s:I, s:I, s:f, s:f, s:f, s:I, s:f, s:f, s:f}", "cache_n", (json_int_t)t->cache_n, "prompt_n",
                     (json_int_t)t->prompt_n, "prompt_ms", t->prompt_ms, "prompt_per_token_ms", pt,
                     "prompt_per_second", t->prompt_ms > 0 ? 1e3 * (double)t->prompt_n / t->prompt_ms : 0.0,
                     "predicted_n", (json_int_t)t->predicted_n, "predicted_ms", t->predicted_ms,
                     "predicted_per_token_ms", dt, "predicted_per_second",
                     t->predicted_ms > 0 ? 1e3 * (double)t->predicted_n / t->predicted_ms : 0.0);
}

char *hx_api_utf8_sanitize(const char *str, size_t n, int64_t *n_bad) {
    const unsigned char *s = (const unsigned char *)str;
    eng_buf b = {0};
    int64_t bad = 0;
    size_t i = 0;
    while (i < n) {
        size_t L = utf8_seq(s + i, n - i);
        if (L) {
            size_t j = i + L;  /* copy the longest run of valid sequences at once */
            while (j < n && (L = utf8_seq(s + j, n - j)) > 0) j += L;
            if (eng_buf_append(&b, s + i, j - i)) goto oom;
            i = j;
        } else {
            if (eng_buf_append(&b, "\xEF\xBF\xBD", 3)) goto oom;
            bad++;
            i++;
        }
    }
    if (!b.data && eng_buf_append(&b, "", 0)) goto oom;
    if (n_bad) *n_bad = bad;
    return b.data;
oom:
    eng_buf_free(&b);
    return NULL;
}

json_t *hx_api_text_json(const char *text, size_t len) {
    /* the longest prefix made of valid sequences, as llama-server's validate_utf8 keeps */
    const unsigned char *s = (const unsigned char *)text;
    size_t i = 0, L;
    while (i < len && (L = utf8_seq(s + i, len - i)) > 0) i += L;
    return json_stringn(text ? text : "", i);
}

json_t *hx_api_bytes_json(const char *text, size_t len) {
    json_t *a = json_array();
    for (size_t i = 0; a && i < len; i++)
        if (json_array_append_new(a, json_integer((unsigned char)text[i]))) {
            json_decref(a);
            return NULL;
        }
    return a;
}

const char *hx_api_model_of(const hx_api_req *q, const hx_api_result *r) {
    if (r->model) return r->model;
    if (q->params.model) return q->params.model;
    return r->info && r->info->model_name ? r->info->model_name : "kvreplay";
}

int hx_api_read_count(const char *body, size_t n, const char *key, hx_api_result *r, hx_api_error *e) {
    hx_api_result_init(r);
    json_t *j = hx_api_load_body(body, n, e);
    if (!j) return ENG_ERR_FORMAT;
    const json_t *t = json_object_get(j, key);
    int rc = ENG_OK;
    if (!json_is_integer(t)) rc = hx_api_errf(e, HX_API_ERR_INVALID, key, t ? "expected an integer" : "missing");
    else r->n_input_tokens = json_integer_value(t);
    json_decref(j);
    return rc;
}

void hx_api_make_id(char *buf, size_t cap, const char *prefix, uint64_t seq) {
    static const char alphabet[] = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";
    char tail[25];
    uint64_t x = seq * 0x9E3779B97F4A7C15ull + 0x632BE59BD9B4E019ull;
    for (int i = 0; i < 24; i++) {
        x ^= x >> 31;
        x *= 0xBF58476D1CE4E5B9ull;
        x ^= x >> 27;
        tail[i] = alphabet[x % 62];
    }
    tail[24] = '\0';
    snprintf(buf, cap, "%s%s", prefix, tail);
}

// ----------------------------------------------------------------------------
// Streaming, server side: the dialect-neutral half (UTF-8 across tokens)

void hx_api_stream_init(hx_api_stream *s, const hx_api_req *q, const hx_api_result *r) {
    memset(s, 0, sizeof *s);
    s->route = q->route;
    s->q = q;
    s->r = r;
    s->block = -1;
}

void hx_api_stream_free(hx_api_stream *s) {
    eng_buf_free(&s->out);
    eng_buf_free(&s->acc);
    json_decref(s->items);
    memset(s, 0, sizeof *s);
}

static int stream_rc(hx_api_stream *s, int rc) {
    if (rc && !s->err) s->err = rc;
    return s->err;
}

int hx_api_stream_begin(hx_api_stream *s) {
    if (s->began) return s->err;
    s->began = true;
    return stream_rc(s, s->route->stream_begin ? s->route->stream_begin(s) : ENG_OK);
}

int hx_api_stream_token(hx_api_stream *s, const hx_api_token *t) {
    if (!s->began && hx_api_stream_begin(s)) return s->err;
    /* the token's bytes after the pending tail; send what ends on a character boundary */
    size_t n = (size_t)s->n_pending + t->len;
    char stackbuf[256];
    char *all = n <= sizeof stackbuf ? stackbuf : malloc(n);
    if (!all) return stream_rc(s, ENG_ERR_NOMEM);
    memcpy(all, s->pending, (size_t)s->n_pending);
    if (t->len) memcpy(all + s->n_pending, t->text, t->len);
    size_t ok = hx_api_utf8_complete(all, n);
    char *text = hx_api_utf8_sanitize(all, ok, NULL);
    s->n_pending = (int)(n - ok);
    if (s->n_pending > 0) memcpy(s->pending, all + ok, (size_t)s->n_pending);
    if (all != stackbuf) free(all);
    if (!text) return stream_rc(s, ENG_ERR_NOMEM);
    int rc = s->route->stream_token(s, t, text, strlen(text));
    free(text);
    s->n_tokens++;
    return stream_rc(s, rc);
}

/* The incomplete character left when the tokens end: its bytes are invalid. */
static int flush_pending(hx_api_stream *s) {
    if (s->n_pending == 0) return s->err;
    char *text = hx_api_utf8_sanitize(s->pending, (size_t)s->n_pending, NULL);
    hx_api_token none = {.id = -1, .logprob = NAN};
    s->n_pending = 0;
    if (!text) return stream_rc(s, ENG_ERR_NOMEM);
    int rc = s->route->stream_token(s, &none, text, strlen(text));
    free(text);
    return stream_rc(s, rc);
}

int hx_api_stream_block(hx_api_stream *s, const hx_block *b) {
    if (!s->began && hx_api_stream_begin(s)) return s->err;
    if (flush_pending(s)) return s->err;
    return stream_rc(s, s->route->stream_block(s, b));
}

int hx_api_stream_end(hx_api_stream *s) {
    if (!s->began && hx_api_stream_begin(s)) return s->err;
    if (s->ended) return s->err;
    if (flush_pending(s)) return s->err;
    s->ended = true;
    return stream_rc(s, s->route->stream_end(s));
}

int hx_api_stream_error(hx_api_stream *s, const hx_api_error *e) {
    s->ended = true;
    return stream_rc(s, hx_api_write_stream_error(s->route->dialect, &s->out, s->seq++, e));
}

// ----------------------------------------------------------------------------
// Streaming, client side: SSE events through the route's reader

void hx_api_reader_init(hx_api_reader *rd, const hx_api_route *route) {
    memset(rd, 0, sizeof *rd);
    rd->route = route;
    rd->block = -1;
    rd->seq = -1;
    hx_sse_parser_init(&rd->sse);
}

void hx_api_reader_free(hx_api_reader *rd) {
    hx_sse_parser_free(&rd->sse);
    free(rd->block_id);
    free(rd->block_name);
    eng_buf_free(&rd->text);
    eng_buf_free(&rd->thinking);
    json_decref(rd->calls);
    memset(rd, 0, sizeof *rd);
}

static int reader_event(void *ud, const hx_sse_event *ev) {
    hx_api_reader *rd = ud;
    if (rd->done && !rd->failed) {
        if (!strcmp(ev->name, "ping")) return 0;
        return hx_api_errf(rd->e, HX_API_ERR_INVALID, NULL, "an event after the end of the stream: %.60s", ev->data);
    }
    int64_t before = rd->n_token_events;
    int rc = rd->route->stream_read(rd, ev);
    if (!rc && rd->on_event) rd->on_event(rd->event_ud, ev, rd->n_token_events > before);
    return rc;
}

int hx_api_reader_feed(hx_api_reader *rd, const char *bytes, size_t n, hx_api_result *r, hx_api_error *e) {
    rd->r = r;
    rd->e = e;
    int64_t before = rd->n_token_events;
    if (rd->failed) return ENG_ERR_FORMAT;
    int rc = hx_sse_feed(&rd->sse, bytes, n, reader_event, rd);
    if (rc == ENG_ERR_RANGE) hx_api_errf(e, HX_API_ERR_INVALID, NULL, "an SSE line longer than %zu bytes", rd->sse.max_line);
    else if (rc == ENG_ERR_NOMEM) hx_api_errf(e, HX_API_ERR_SERVER, NULL, "out of memory");
    if (rc) {
        rd->failed = true;
        return rc == ENG_ERR_NOMEM ? rc : ENG_ERR_FORMAT;
    }
    return (int)(rd->n_token_events - before);
}

int hx_api_reader_finish(hx_api_reader *rd, hx_api_result *r, hx_api_error *e) {
    (void)r;
    if (rd->failed) return ENG_ERR_FORMAT;
    if (!rd->done)
        return hx_api_errf(e, HX_API_ERR_INVALID, NULL, "the stream ended before its last event (%s)",
                           !hx_sse_at_boundary(&rd->sse) ? "cut inside an event" : "no end event");
    return ENG_OK;
}

// ----------------------------------------------------------------------------
// Shared by the dialects: token probabilities, importer-style errors

int hx_api_get_bool(const json_t *o, const char *key, bool *out, hx_api_error *e) {
    const json_t *v = json_object_get(o, key);
    if (!v || json_is_null(v)) return ENG_OK;
    if (!json_is_boolean(v)) return hx_api_errf(e, HX_API_ERR_INVALID, key, "expected true or false");
    *out = json_is_true(v);
    return ENG_OK;
}

int hx_api_get_int(const json_t *o, const char *key, int64_t lo, int64_t hi, int32_t *out, hx_api_error *e) {
    const json_t *v = json_object_get(o, key);
    if (!v || json_is_null(v)) return ENG_OK;
    if (!json_is_integer(v) || json_integer_value(v) < lo || json_integer_value(v) > hi)
        return hx_api_errf(e, HX_API_ERR_INVALID, key, "expected an integer in [%lld, %lld]", (long long)lo,
                           (long long)hi);
    *out = (int32_t)json_integer_value(v);
    return ENG_OK;
}

int hx_api_get_str(const json_t *o, const char *key, char **out, hx_api_error *e) {
    const json_t *v = json_object_get(o, key);
    if (!v || json_is_null(v)) return ENG_OK;
    if (!json_is_string(v)) return hx_api_errf(e, HX_API_ERR_INVALID, key, "expected a string");
    free(*out);
    if (!(*out = dup_bytes(json_string_value(v), json_string_length(v))))
        return hx_api_errf(e, HX_API_ERR_SERVER, NULL, "out of memory");
    return ENG_OK;
}

int hx_api_get_stop(const json_t *o, const char *key, hx_api_params *p, hx_api_error *e) {
    const json_t *v = json_object_get(o, key);
    if (!v || json_is_null(v)) return ENG_OK;
    size_t n = json_is_string(v) ? 1 : json_array_size(v);
    if (!json_is_string(v) && !json_is_array(v))
        return hx_api_errf(e, HX_API_ERR_INVALID, key, "expected a string or an array of strings");
    char **s = calloc(n ? n : 1, sizeof *s);
    if (!s) return hx_api_errf(e, HX_API_ERR_SERVER, NULL, "out of memory");
    for (size_t i = 0; i < n; i++) {
        const json_t *x = json_is_string(v) ? v : json_array_get(v, i);
        char f[64];
        hx_api_pathf(f, sizeof f, "%s[%zu]", key, i);
        if (!json_is_string(x) || json_string_length(x) == 0) {
            for (size_t k = 0; k < i; k++) free(s[k]);
            free(s);
            return hx_api_errf(e, HX_API_ERR_INVALID, json_is_string(v) ? key : f, "expected a non-empty string");
        }
        if (!(s[i] = dup_bytes(json_string_value(x), json_string_length(x)))) {
            for (size_t k = 0; k < i; k++) free(s[k]);
            free(s);
            return hx_api_errf(e, HX_API_ERR_SERVER, NULL, "out of memory");
        }
    }
    for (int32_t i = 0; i < p->n_stop; i++) free(p->stop[i]);
    free(p->stop);
    p->stop = s;
    p->n_stop = (int32_t)n;
    return ENG_OK;
}

static const char *const k_sampling_named[] = {"temperature", "top_p", "min_p", "typical_p", "repeat_penalty",
                                               "presence_penalty", "frequency_penalty", "top_k", "seed"};

static bool in_list(const char *key, const char *const *list, size_t n) {
    for (size_t i = 0; list && i < n; i++)
        if (!strcmp(key, list[i])) return true;
    return false;
}

// ----------------------------------------------------------------------------
// Fields kvreplay does not know: listed at any depth, never refused

typedef struct walk_ctx {
    void  (*cb)(void *ud, const char *path);
    void   *ud;
    int64_t n;
    char    path[256];
} walk_ctx;

static const hx_api_member *member_of(const hx_api_member *ms, const char *key) {
    for (; ms && ms->key; ms++)
        if (!strcmp(ms->key, key)) return ms;
    return NULL;
}

static void walk(walk_ctx *w, const json_t *v, const hx_api_shape *sh, bool top);

/* Walks member key's value v with shape sh (NULL: a leaf) at path + ".key". */
static void walk_member(walk_ctx *w, const char *key, const json_t *v, const hx_api_shape *sh, bool unknown) {
    size_t at = strlen(w->path);
    snprintf(w->path + at, sizeof w->path - at, "%s%s", at ? "." : "", key);
    if (unknown) {
        w->n++;
        if (w->cb) w->cb(w->ud, w->path);
    } else if (sh) {
        walk(w, v, sh, false);
    }
    w->path[at] = '\0';
}

static void walk(walk_ctx *w, const json_t *v, const hx_api_shape *sh, bool top) {
    if (json_is_array(v) && sh->item) {
        size_t at = strlen(w->path);
        snprintf(w->path + at, sizeof w->path - at, "[]");
        for (size_t i = 0; i < json_array_size(v); i++) walk(w, json_array_get(v, i), sh->item, false);
        w->path[at] = '\0';
        return;
    }
    if (!json_is_object(v) || sh->open || !(sh->members || sh->variants)) return;
    const hx_api_member *own = NULL;
    if (sh->tag) {
        const json_t *jt = json_object_get(v, sh->tag);
        const char *tag = jt ? json_string_value(jt) : sh->untagged;
        const hx_api_variant *x = sh->variants;
        while (tag && x && x->tag && strcmp(x->tag, tag)) x++;
        if (!tag || !x || !x->tag) return;  /* not a variant kvreplay knows: the parser keeps or refuses it */
        own = x->members;
    }
    const char *key;
    json_t *m;
    json_object_foreach((json_t *)v, key, m) {
        if (sh->tag && !strcmp(key, sh->tag)) continue;
        const hx_api_member *k = member_of(sh->members, key);
        if (!k) k = member_of(own, key);
        bool sampling = top && (in_list(key, k_sampling_named, sizeof k_sampling_named / sizeof k_sampling_named[0]) ||
                                in_list(key, k_other_sampling, sizeof k_other_sampling / sizeof k_other_sampling[0]));
        walk_member(w, key, m, k ? k->shape : NULL, !k && !sampling);
    }
}

int64_t hx_api_walk_unknown(const json_t *v, const hx_api_shape *shape, const char *prefix,
                            void (*cb)(void *ud, const char *path), void *ud) {
    walk_ctx w = {.cb = cb, .ud = ud};
    snprintf(w.path, sizeof w.path, "%s", prefix ? prefix : "");
    if (shape) walk(&w, v, shape, false);
    return w.n;
}

typedef struct note_ctx {
    hx_api_req *q;
    int64_t     dropped;
    int         rc;
} note_ctx;

static void note_path(void *ud, const char *path) {
    note_ctx *c = ud;
    hx_api_req *q = c->q;
    for (int32_t i = 0; i < q->n_ignored; i++)
        if (!strcmp(q->ignored_paths[i], path)) return;
    if (q->n_ignored >= HX_API_MAX_IGNORED) { c->dropped++; return; }
    char *d = hx_strdup(path);
    if (!d) { c->rc = ENG_ERR_NOMEM; return; }
    q->ignored_paths[q->n_ignored++] = d;
}

static void free_ignored(hx_api_req *q) {
    for (int32_t i = 0; i < q->n_ignored; i++) free(q->ignored_paths[i]);
    free(q->ignored_paths);
    q->ignored_paths = NULL;
    q->n_ignored = 0;
    free(q->params.ignored);
    q->params.ignored = NULL;
}

int hx_api_note_unknown(hx_api_req *q, const json_t *body, const hx_api_shape *shape) {
    free_ignored(q);
    if (!(q->ignored_paths = calloc(HX_API_MAX_IGNORED, sizeof *q->ignored_paths))) return ENG_ERR_NOMEM;
    note_ctx c = {.q = q};
    walk_ctx w = {.cb = note_path, .ud = &c};
    walk(&w, body, shape, true);
    eng_buf b = {0};
    for (int32_t i = 0; !c.rc && i < q->n_ignored; i++)
        if ((i && eng_buf_append(&b, ",", 1)) || eng_buf_append(&b, q->ignored_paths[i], strlen(q->ignored_paths[i])))
            c.rc = ENG_ERR_NOMEM;
    if (!c.rc && c.dropped && eng_buf_append(&b, ",...", 4)) c.rc = ENG_ERR_NOMEM;
    if (c.rc) { eng_buf_free(&b); free_ignored(q); return c.rc; }
    q->params.ignored = b.data;
    return ENG_OK;
}

void hx_api_pathf(char *out, size_t cap, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(out, cap, fmt, ap);
    va_end(ap);
}

int hx_api_fail_at(char *err, size_t errlen, const char *path, int64_t line, const char *field, const char *what) {
    hx_errf_at(err, errlen, path, line, field, "%s", what);
    return ENG_ERR_FORMAT;
}

int hx_api_push_block(hx_message *m, hx_block *b) {
    if (hx_message_push_block(m, b)) {
        hx_block_free(b);
        return ENG_ERR_NOMEM;
    }
    return ENG_OK;
}

int hx_api_err_from_text(hx_api_error *e, int rc, const char *text) {
    if (rc == ENG_ERR_NOMEM) return hx_api_errf(e, HX_API_ERR_SERVER, NULL, "out of memory");
    /* "FIELD: what", FIELD a JSON path */
    size_t k = strspn(text, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.[]-");
    if (k > 0 && text[k] == ':' && text[k + 1] == ' ') {
        char field[128];
        hx_api_pathf(field, sizeof field, "%.*s", (int)(k < sizeof field - 1 ? k : sizeof field - 1), text);
        hx_api_errf(e, HX_API_ERR_INVALID, field, "%s", text + k + 2);
    } else {
        hx_api_errf(e, HX_API_ERR_INVALID, NULL, "%s", text);
    }
    return ENG_ERR_FORMAT;
}

static json_t *prob_json(int32_t id, const char *text, size_t len, float logprob) {
    json_t *o = json_object();
    if (!o) return NULL;
    if (json_object_set_new(o, "id", json_integer(id)) || json_object_set_new(o, "token", hx_api_text_json(text, len)) ||
        json_object_set_new(o, "bytes", hx_api_bytes_json(text, len)) ||
        json_object_set_new(o, "logprob", json_real(isnan(logprob) ? 0.0 : (double)logprob))) {
        json_decref(o);
        return NULL;
    }
    return o;
}

json_t *hx_api_probs_json(const hx_api_token *t, int32_t n) {
    json_t *a = json_array();
    for (int32_t i = 0; a && i < n; i++) {
        json_t *o = prob_json(t[i].id, t[i].text, t[i].len, t[i].logprob);
        json_t *top = json_array();
        for (int32_t k = 0; o && top && k < t[i].n_top; k++)
            if (json_array_append_new(top, prob_json(t[i].top[k].id, t[i].top[k].text, t[i].top[k].len,
                                                     t[i].top[k].logprob))) {
                json_decref(top);
                top = NULL;
            }
        if (!o || !top || json_object_set_new(o, "top_logprobs", top) || json_array_append_new(a, o)) {
            json_decref(a);
            return NULL;
        }
    }
    return a;
}

/* One {"id","token","bytes","logprob"} object -> id, bytes (malloc'd), logprob. */
static int read_prob(const json_t *o, const char *field, int32_t *id, char **text, size_t *len, float *lp,
                     hx_api_error *e) {
    char f[160];
    if (!json_is_object(o)) return hx_api_errf(e, HX_API_ERR_INVALID, field, "expected an object");
    const json_t *jid = json_object_get(o, "id"), *tok = json_object_get(o, "token"),
                 *bytes = json_object_get(o, "bytes"), *l = json_object_get(o, "logprob");
    *id = -1;
    if (jid) {
        hx_api_pathf(f, sizeof f, "%s.id", field);
        if (!json_is_integer(jid)) return hx_api_errf(e, HX_API_ERR_INVALID, f, "expected an integer");
        *id = (int32_t)json_integer_value(jid);
    }
    hx_api_pathf(f, sizeof f, "%s.logprob", field);
    if (!json_is_number(l)) return hx_api_errf(e, HX_API_ERR_INVALID, f, l ? "expected a number" : "missing");
    *lp = (float)json_number_value(l);
    if (json_is_array(bytes)) {
        size_t n = json_array_size(bytes);
        char *b = malloc(n + 1);
        if (!b) return hx_api_errf(e, HX_API_ERR_SERVER, NULL, "out of memory");
        for (size_t i = 0; i < n; i++) {
            const json_t *x = json_array_get(bytes, i);
            if (!json_is_integer(x) || json_integer_value(x) < 0 || json_integer_value(x) > 255) {
                free(b);
                hx_api_pathf(f, sizeof f, "%s.bytes[%zu]", field, i);
                return hx_api_errf(e, HX_API_ERR_INVALID, f, "expected a byte value");
            }
            b[i] = (char)json_integer_value(x);
        }
        b[n] = '\0';
        *text = b;
        *len = n;
        return ENG_OK;
    }
    hx_api_pathf(f, sizeof f, "%s.token", field);
    if (!json_is_string(tok)) return hx_api_errf(e, HX_API_ERR_INVALID, f, tok ? "expected a string" : "missing");
    *len = json_string_length(tok);
    if (!(*text = dup_bytes(json_string_value(tok), *len))) return hx_api_errf(e, HX_API_ERR_SERVER, NULL, "out of memory");
    return ENG_OK;
}

int hx_api_probs_read(const json_t *arr, const char *field, hx_api_result *r, hx_api_error *e) {
    char f[160], g[192];
    if (!json_is_array(arr)) return hx_api_errf(e, HX_API_ERR_INVALID, field, "expected an array");
    for (size_t i = 0; i < json_array_size(arr); i++) {
        const json_t *o = json_array_get(arr, i);
        hx_api_pathf(f, sizeof f, "%s[%zu]", field, i);
        hx_api_token t = {0};
        int rc = read_prob(o, f, &t.id, &t.text, &t.len, &t.logprob, e);
        if (rc) return rc;
        const json_t *top = json_object_get(o, "top_logprobs");
        if (top && !json_is_array(top)) {
            free(t.text);
            hx_api_pathf(g, sizeof g, "%s.top_logprobs", f);
            return hx_api_errf(e, HX_API_ERR_INVALID, g, "expected an array");
        }
        size_t nt = json_array_size(top);
        if (nt && !(t.top = calloc(nt, sizeof *t.top))) {
            free(t.text);
            return hx_api_errf(e, HX_API_ERR_SERVER, NULL, "out of memory");
        }
        for (size_t k = 0; k < nt && !rc; k++, t.n_top++) {
            hx_api_pathf(g, sizeof g, "%s.top_logprobs[%zu]", f, k);
            rc = read_prob(json_array_get(top, k), g, &t.top[k].id, &t.top[k].text, &t.top[k].len,
                           &t.top[k].logprob, e);
            if (rc) break;
        }
        if (!rc && hx_api_result_push_token(r, &t)) rc = hx_api_errf(e, HX_API_ERR_SERVER, NULL, "out of memory");
        token_free(&t);
        if (rc) return rc;
    }
    return ENG_OK;
}

static hx_api_err_kind kind_of_type(const char *t, int status) {
    static const struct { const char *type; hx_api_err_kind kind; } k[] = {
        {"exceed_context_size_error", HX_API_ERR_CONTEXT}, {"authentication_error", HX_API_ERR_AUTH},
        {"not_found_error", HX_API_ERR_NOT_FOUND},         {"server_error", HX_API_ERR_SERVER},
        {"not_supported_error", HX_API_ERR_NOT_SUPPORTED}, {"unavailable_error", HX_API_ERR_UNAVAILABLE},
        {"invalid_request_error", HX_API_ERR_INVALID},     {"api_error", HX_API_ERR_SERVER},
        {"overloaded_error", HX_API_ERR_UNAVAILABLE},      {"request_too_large", HX_API_ERR_TOO_LARGE},
        {"permission_error", HX_API_ERR_AUTH},
    };
    for (size_t i = 0; t && i < sizeof k / sizeof k[0]; i++)
        if (!strcmp(t, k[i].type)) return k[i].kind;
    switch (status) {
    case 401: return HX_API_ERR_AUTH;
    case 404: return HX_API_ERR_NOT_FOUND;
    case 405: return HX_API_ERR_METHOD;
    case 413: return HX_API_ERR_TOO_LARGE;
    case 501: return HX_API_ERR_NOT_SUPPORTED;
    case 503: return HX_API_ERR_UNAVAILABLE;
    default:  return status >= 500 ? HX_API_ERR_SERVER : HX_API_ERR_INVALID;
    }
}

bool hx_api_read_error_object(const json_t *o, int status, hx_api_error *e) {
    if (!json_is_object(o)) return false;
    const char *msg = json_string_value(json_object_get(o, "message"));
    if (!msg) return false;
    const char *type = json_string_value(json_object_get(o, "type"));
    hx_api_errf(e, kind_of_type(type, status), NULL, "%s", msg);
    if (status > 0) e->status = status;
    snprintf(e->type, sizeof e->type, "%s", type ? type : "");
    const json_t *np = json_object_get(o, "n_prompt_tokens"), *nc = json_object_get(o, "n_ctx");
    if (json_is_integer(np)) e->n_prompt_tokens = json_integer_value(np);
    if (json_is_integer(nc)) e->n_ctx = json_integer_value(nc);
    return true;
}


// ----------------------------------------------------------------------------
// Errors in a dialect's shape (hx_api_error_shape: the dialect table's data)

const char *const hx_api_server_error_types[HX_API_ERR_KINDS] = {
    [HX_API_ERR_INVALID] = "invalid_request_error", [HX_API_ERR_CONTEXT] = "exceed_context_size_error",
    [HX_API_ERR_AUTH] = "authentication_error",     [HX_API_ERR_NOT_FOUND] = "not_found_error",
    [HX_API_ERR_SERVER] = "server_error",           [HX_API_ERR_NOT_SUPPORTED] = "not_supported_error",
    [HX_API_ERR_UNAVAILABLE] = "unavailable_error",
};

static const char *shape_type(const hx_api_error_shape *sh, hx_api_err_kind k) {
    const char *t = (unsigned)k < HX_API_ERR_KINDS ? sh->types[k] : NULL;
    return t ? t : sh->types[HX_API_ERR_INVALID];
}

/* The message e carries, in the shape's wording for a context error. */
static void shape_message(const hx_api_error_shape *sh, const hx_api_error *e, char *msg, size_t cap) {
    if (e->kind == HX_API_ERR_CONTEXT && sh->context_message)
        snprintf(msg, cap, sh->context_message, (long long)e->n_prompt_tokens, (long long)e->n_ctx);
    else snprintf(msg, cap, "%s", e->message);
}

/* The inner error object: "message", type_key, and what the shape's flags add. */
static json_t *error_object(const hx_api_error_shape *sh, const hx_api_error *e) {
    char msg[sizeof e->message];
    shape_message(sh, e, msg, sizeof msg);
    int status = e->status ? e->status : hx_api_err_status(e->kind);
    json_t *o = json_object();
    int bad = !o;
    if (!bad && sh->code) bad = json_object_set_new(o, "code", json_integer(status));
    const char *type = e->type[0] ? e->type : shape_type(sh, e->kind);
    if (!bad && sh->envelope) bad = json_object_set_new(o, sh->type_key, json_string(type));  /* Anthropic's order */
    if (!bad) bad = json_object_set_new(o, "message", json_string(msg));
    if (!bad && !sh->envelope) bad = json_object_set_new(o, sh->type_key, json_string(type));
    if (!bad && sh->param) bad = json_object_set_new(o, "param", e->field[0] ? json_string(e->field) : json_null());
    if (!bad && sh->context_counts && e->kind == HX_API_ERR_CONTEXT)
        bad = json_object_set_new(o, "n_prompt_tokens", json_integer(e->n_prompt_tokens)) ||
              json_object_set_new(o, "n_ctx", json_integer(e->n_ctx));
    if (bad) { json_decref(o); return NULL; }
    return o;
}

json_t *hx_api_error_body(const hx_api_dialect *d, const hx_api_error *e) {
    const hx_api_error_shape *sh = d->errors;
    json_t *o = error_object(sh, e);
    if (!o) return NULL;
    return sh->envelope ? json_pack("{s:s, s:o}", "type", "error", "error", o) : json_pack("{s:o}", "error", o);
}

bool hx_api_read_error_json(const hx_api_dialect *d, const json_t *j, int status, hx_api_error *e) {
    const hx_api_error_shape *sh = d->errors;
    const json_t *o = sh->stream_flat && json_is_string(json_object_get(j, "message")) ? j : json_object_get(j, "error");
    if (!json_is_object(o) || !json_is_string(json_object_get(o, "message"))) return false;
    const char *name = json_string_value(json_object_get(o, sh->type_key));
    if (o == j && sh->stream_flat) name = json_string_value(json_object_get(o, "code"));  /* the flat event's code */
    hx_api_err_kind kind = HX_API_ERR_NONE;
    for (int k = HX_API_ERR_INVALID; name && k < HX_API_ERR_KINDS && !kind; k++)
        if (sh->types[k] && !strcmp(sh->types[k], name)) kind = (hx_api_err_kind)k;
    const json_t *code = json_object_get(o, "code");
    if (status <= 0 && json_is_integer(code)) status = (int)json_integer_value(code);
    hx_api_errf(e, kind ? kind : kind_of_type(name, status), NULL, "%s", json_string_value(json_object_get(o, "message")));
    if (status > 0) e->status = status;
    snprintf(e->type, sizeof e->type, "%s", name ? name : "");
    const char *param = json_string_value(json_object_get(o, "param"));
    if (param) snprintf(e->field, sizeof e->field, "%s", param);
    const json_t *np = json_object_get(o, "n_prompt_tokens"), *nc = json_object_get(o, "n_ctx");
    if (json_is_integer(np) && json_is_integer(nc)) {
        e->kind = HX_API_ERR_CONTEXT;
        e->n_prompt_tokens = json_integer_value(np);
        e->n_ctx = json_integer_value(nc);
    }
    long long p, c;  /* the context error's wording carries both lengths */
    if (sh->context_message && sscanf(e->message, sh->context_message, &p, &c) == 2) {
        e->kind = HX_API_ERR_CONTEXT;
        e->n_prompt_tokens = p;
        e->n_ctx = c;
    }
    return true;
}

bool hx_api_read_error(const hx_api_dialect *d, const char *body, size_t n, int status, hx_api_error *e) {
    json_error_t je;
    json_t *j = json_loadb(body ? body : "", n, 0, &je);
    bool ok = j && hx_api_read_error_json(d, j, status, e);
    json_decref(j);
    return ok;
}

int hx_api_write_stream_error(const hx_api_dialect *d, eng_buf *out, int64_t seq, const hx_api_error *e) {
    const hx_api_error_shape *sh = d->errors;
    if (!sh->stream_flat) return hx_sse_write_json(out, sh->stream_event, hx_api_error_body(d, e));
    char msg[sizeof e->message];
    shape_message(sh, e, msg, sizeof msg);
    json_t *o = json_pack("{s:s, s:s, s:s, s:o, s:I}", "type", "error", "code",
                          e->type[0] ? e->type : shape_type(sh, e->kind), "message", msg, "param",
                          e->field[0] ? json_string(e->field) : json_null(), "sequence_number", (json_int_t)seq);
    return hx_sse_write_json(out, sh->stream_event, o);
}
