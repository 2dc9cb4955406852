/*
 * harness/transcripts/transcript.c: transcript formats v1 and v2: reading, validating, writing.
 *
 * A transcript is JSONL, one request per line (docs/transcripts.md). Reading
 * parses each line with jansson (duplicate keys rejected), checks every field
 * against the v1 rules and builds an hx_request that owns all its strings; a
 * v2 compact line is rebuilt from its session's previous request (so every
 * request in memory is whole, whichever version was read). Writing emits one
 * canonical line per request: compact JSON, keys in a fixed documented order,
 * tool inputs and schemas as canonical JSON (sorted keys); v2 writes a
 * request that extends its session's previous one as a compact line.
 * Invariants:
 *   - every error names "FILE:LINE: FIELD: what is wrong";
 *   - read(write(t)) has the same structures as t, and write(read(write(t)))
 *     is byte-identical to write(t);
 *   - after a successful read, block texts are never NULL, tool_use inputs
 *     and tool schemas are canonical JSON, and turns increase per session.
 * Workload: files of thousands of lines, each up to a few MB (the whole prompt
 * of one call); the file is read whole, then parsed line by line.
 */
#include "transcript.h"

#include <jansson.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "jsonl.h"
#include "status.h"
#include "util.h"

// ----------------------------------------------------------------------------
// Small helpers: strings, errors, names

char *hx_strdup(const char *s) {
    if (!s) return NULL;
    size_t n = strlen(s);
    char *d = malloc(n + 1);
    if (d) memcpy(d, s, n + 1);
    return d;
}

void hx_errf_at(char *err, size_t errlen, const char *path, int64_t line, const char *field,
                const char *fmt, ...) {
    if (!err || errlen == 0) return;
    char msg[768];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    const char *p = path ? path : "-";
    bool has_field = field && field[0];
    if (path && !path[0])  /* no file (an HTTP body): "FIELD: what" */
        snprintf(err, errlen, "%s%s%s", has_field ? field : "", has_field ? ": " : "", msg);
    else if (line > 0)
        snprintf(err, errlen, "%s:%lld: %s%s%s", p, (long long)line, has_field ? field : "",
                 has_field ? ": " : "", msg);
    else
        snprintf(err, errlen, "%s: %s%s%s", p, has_field ? field : "", has_field ? ": " : "", msg);
}

const char *hx_role_name(hx_role r) {
    switch (r) {
    case HX_ROLE_SYSTEM:    return "system";
    case HX_ROLE_USER:      return "user";
    case HX_ROLE_ASSISTANT: return "assistant";
    case HX_ROLE_TOOL:      return "tool";
    }
    return "?";
}

const char *hx_block_type_name(hx_block_type t) {
    switch (t) {
    case HX_BLOCK_TEXT:        return "text";
    case HX_BLOCK_THINKING:    return "thinking";
    case HX_BLOCK_TOOL_USE:    return "tool_use";
    case HX_BLOCK_TOOL_RESULT: return "tool_result";
    case HX_BLOCK_IMAGE:       return "image";
    }
    return "?";
}

hx_request_kind hx_request_kind_of(const hx_request *r) {
    if (r->tokens) return HX_REQUEST_TOKENS;
    if (r->prompt) return HX_REQUEST_PROMPT;
    return HX_REQUEST_MESSAGES;
}

// ----------------------------------------------------------------------------
// Canonical JSON

char *hx_json_canonical(const struct json_t *j) {
    return json_dumps((const json_t *)j, JSON_COMPACT | JSON_SORT_KEYS | JSON_ENCODE_ANY);
}

char *hx_json_canonical_text(const char *json, size_t len) {
    json_error_t je;
    json_t *j = json_loadb(json, len, JSON_DECODE_ANY | JSON_REJECT_DUPLICATES, &je);
    if (!j) return NULL;
    char *s = hx_json_canonical(j);
    json_decref(j);
    return s;
}

// ----------------------------------------------------------------------------
// Structure helpers: init, copy, free, compare

int hx_block_init(hx_block *b, hx_block_type type, const char *text, const char *id,
                  const char *name, const char *input, bool is_error) {
    memset(b, 0, sizeof *b);
    b->type = type;
    b->is_error = is_error;
    b->text = hx_strdup(text ? text : "");
    if (!b->text) goto nomem;
    if (id && !(b->id = hx_strdup(id))) goto nomem;
    if (name && !(b->name = hx_strdup(name))) goto nomem;
    if (type == HX_BLOCK_TOOL_USE) {
        const char *in = input ? input : "{}";
        json_error_t je;
        json_t *j = json_loadb(in, strlen(in), JSON_REJECT_DUPLICATES, &je);
        if (!j || !json_is_object(j)) {
            json_decref(j);
            hx_block_free(b);
            return ENG_ERR_FORMAT;
        }
        b->input = hx_json_canonical(j);
        json_decref(j);
        if (!b->input) goto nomem;
    } else if (input && !(b->input = hx_strdup(input))) {
        goto nomem;
    }
    return ENG_OK;
nomem:
    hx_block_free(b);
    return ENG_ERR_NOMEM;
}

void hx_block_free(hx_block *b) {
    if (!b) return;
    free(b->text);
    free(b->id);
    free(b->name);
    free(b->input);
    memset(b, 0, sizeof *b);
}

int hx_block_copy(hx_block *dst, const hx_block *src) {
    memset(dst, 0, sizeof *dst);
    dst->type = src->type;
    dst->is_error = src->is_error;
    if (!(dst->text = hx_strdup(src->text ? src->text : ""))) goto nomem;
    if (src->id && !(dst->id = hx_strdup(src->id))) goto nomem;
    if (src->name && !(dst->name = hx_strdup(src->name))) goto nomem;
    if (src->input && !(dst->input = hx_strdup(src->input))) goto nomem;
    return ENG_OK;
nomem:
    hx_block_free(dst);
    return ENG_ERR_NOMEM;
}

void hx_message_free(hx_message *m) {
    if (!m) return;
    for (int32_t i = 0; i < m->n_blocks; i++) hx_block_free(&m->blocks[i]);
    free(m->blocks);
    memset(m, 0, sizeof *m);
}

int hx_message_copy(hx_message *dst, const hx_message *src) {
    memset(dst, 0, sizeof *dst);
    dst->role = src->role;
    if (src->n_blocks == 0) return ENG_OK;
    dst->blocks = calloc((size_t)src->n_blocks, sizeof *dst->blocks);
    if (!dst->blocks) return ENG_ERR_NOMEM;
    for (int32_t i = 0; i < src->n_blocks; i++) {
        if (hx_block_copy(&dst->blocks[i], &src->blocks[i]) != ENG_OK) {
            hx_message_free(dst);
            return ENG_ERR_NOMEM;
        }
        dst->n_blocks = i + 1;
    }
    return ENG_OK;
}

int hx_message_push_block(hx_message *m, hx_block *b) {
    hx_block *nb = realloc(m->blocks, (size_t)(m->n_blocks + 1) * sizeof *nb);
    if (!nb) return ENG_ERR_NOMEM;
    m->blocks = nb;
    m->blocks[m->n_blocks++] = *b;
    memset(b, 0, sizeof *b);
    return ENG_OK;
}

int hx_request_push_message(hx_request *q, hx_message *m) {
    hx_message *nm = realloc(q->messages, (size_t)(q->n_messages + 1) * sizeof *nm);
    if (!nm) return ENG_ERR_NOMEM;
    q->messages = nm;
    nm[q->n_messages++] = *m;
    memset(m, 0, sizeof *m);
    return ENG_OK;
}

static bool str_eq(const char *a, const char *b) {
    if (!a || !b) return a == b;
    return strcmp(a, b) == 0;
}

bool hx_block_equal(const hx_block *a, const hx_block *b) {
    return a->type == b->type && a->is_error == b->is_error && str_eq(a->text, b->text) &&
           str_eq(a->id, b->id) && str_eq(a->name, b->name) && str_eq(a->input, b->input);
}

bool hx_message_equal(const hx_message *a, const hx_message *b) {
    if (a->role != b->role || a->n_blocks != b->n_blocks) return false;
    for (int32_t i = 0; i < a->n_blocks; i++)
        if (!hx_block_equal(&a->blocks[i], &b->blocks[i])) return false;
    return true;
}

void hx_tool_free(hx_tool *t) {
    if (!t) return;
    free(t->name);
    free(t->description);
    free(t->schema);
    memset(t, 0, sizeof *t);
}

int hx_tool_copy(hx_tool *dst, const hx_tool *src) {
    memset(dst, 0, sizeof *dst);
    dst->name = hx_strdup(src->name ? src->name : "");
    dst->description = hx_strdup(src->description ? src->description : "");
    dst->schema = hx_strdup(src->schema ? src->schema : "{}");
    if (!dst->name || !dst->description || !dst->schema) {
        hx_tool_free(dst);
        return ENG_ERR_NOMEM;
    }
    return ENG_OK;
}

void hx_request_free(hx_request *r) {
    if (!r) return;
    free(r->session);
    for (int32_t i = 0; i < r->n_system; i++) hx_block_free(&r->system[i]);
    free(r->system);
    for (int32_t i = 0; i < r->n_tools; i++) hx_tool_free(&r->tools[i]);
    free(r->tools);
    for (int32_t i = 0; i < r->n_messages; i++) hx_message_free(&r->messages[i]);
    free(r->messages);
    hx_message_free(&r->response);
    free(r->prompt);
    free(r->tokens);
    free(r->response_text);
    hx_call_usage_free(&r->usage);
    free(r->notes);
    free(r->served);
    memset(r, 0, sizeof *r);
}

void hx_call_usage_free(hx_call_usage *u) {
    if (!u) return;
    free(u->counted_with);
    memset(u, 0, sizeof *u);
}

int hx_call_usage_copy(hx_call_usage *dst, const hx_call_usage *src) {
    *dst = *src;
    dst->counted_with = NULL;
    if (src->counted_with && !(dst->counted_with = hx_strdup(src->counted_with))) return ENG_ERR_NOMEM;
    return ENG_OK;
}

int64_t hx_call_usage_total(const hx_call_usage *u) {
    return u && u->present ? u->input + u->cache_read + u->cache_creation : -1;
}

int hx_request_copy(hx_request *dst, const hx_request *src) {
    memset(dst, 0, sizeof *dst);
    dst->turn = src->turn;
    dst->line = src->line;
    dst->response.role = src->response.role;
    if (!(dst->session = hx_strdup(src->session ? src->session : ""))) goto nomem;
    if (src->n_system) {
        if (!(dst->system = calloc((size_t)src->n_system, sizeof *dst->system))) goto nomem;
        for (int32_t i = 0; i < src->n_system; i++, dst->n_system++)
            if (hx_block_copy(&dst->system[i], &src->system[i])) goto nomem;
    }
    if (src->n_tools) {
        if (!(dst->tools = calloc((size_t)src->n_tools, sizeof *dst->tools))) goto nomem;
        for (int32_t i = 0; i < src->n_tools; i++, dst->n_tools++)
            if (hx_tool_copy(&dst->tools[i], &src->tools[i])) goto nomem;
    }
    if (src->n_messages) {
        if (!(dst->messages = calloc((size_t)src->n_messages, sizeof *dst->messages))) goto nomem;
        for (int32_t i = 0; i < src->n_messages; i++, dst->n_messages++)
            if (hx_message_copy(&dst->messages[i], &src->messages[i])) goto nomem;
    }
    if (hx_message_copy(&dst->response, &src->response)) goto nomem;
    if (src->prompt && !(dst->prompt = hx_strdup(src->prompt))) goto nomem;
    if (src->response_text && !(dst->response_text = hx_strdup(src->response_text))) goto nomem;
    if (src->tokens) {
        size_t nb = (size_t)(src->n_tokens > 0 ? src->n_tokens : 1) * sizeof(int32_t);
        if (!(dst->tokens = malloc(nb))) goto nomem;
        memcpy(dst->tokens, src->tokens, (size_t)src->n_tokens * sizeof(int32_t));
        dst->n_tokens = src->n_tokens;
    }
    if (hx_call_usage_copy(&dst->usage, &src->usage)) goto nomem;
    if (src->notes && !(dst->notes = hx_strdup(src->notes))) goto nomem;
    if (src->served && !(dst->served = hx_strdup(src->served))) goto nomem;
    return ENG_OK;
nomem:
    hx_request_free(dst);
    return ENG_ERR_NOMEM;
}

bool hx_request_equal(const hx_request *a, const hx_request *b) {
    if (!str_eq(a->session, b->session) || a->turn != b->turn || a->n_system != b->n_system ||
        a->n_tools != b->n_tools || a->n_messages != b->n_messages || a->n_tokens != b->n_tokens ||
        !str_eq(a->prompt, b->prompt) || !str_eq(a->response_text, b->response_text) ||
        (a->tokens == NULL) != (b->tokens == NULL) || !hx_message_equal(&a->response, &b->response))
        return false;
    for (int32_t i = 0; i < a->n_system; i++)
        if (!hx_block_equal(&a->system[i], &b->system[i])) return false;
    for (int32_t i = 0; i < a->n_tools; i++)
        if (!str_eq(a->tools[i].name, b->tools[i].name) || !str_eq(a->tools[i].description, b->tools[i].description) ||
            !str_eq(a->tools[i].schema, b->tools[i].schema))
            return false;
    for (int32_t i = 0; i < a->n_messages; i++)
        if (!hx_message_equal(&a->messages[i], &b->messages[i])) return false;
    if (a->n_tokens && memcmp(a->tokens, b->tokens, (size_t)a->n_tokens * sizeof(int32_t)) != 0) return false;
    return true;
}

void hx_transcript_free(hx_transcript *t) {
    if (!t) return;
    for (int32_t i = 0; i < t->n; i++) hx_request_free(&t->reqs[i]);
    free(t->reqs);
    free(t->path);
    free(t->header);
    memset(t, 0, sizeof *t);
}

int hx_transcript_push(hx_transcript *t, hx_request *r) {
    if (t->n == INT32_MAX) return ENG_ERR_RANGE;
    /* capacity: the power of two >= n + 1; realloc to an unchanged size is
     * cheap, and this stays correct for any malloc'd reqs array */
    size_t cap = 1;
    while (cap < (size_t)t->n + 1) cap *= 2;
    hx_request *nr = realloc(t->reqs, cap * sizeof *nr);
    if (!nr) return ENG_ERR_NOMEM;
    t->reqs = nr;
    t->reqs[t->n++] = *r;
    memset(r, 0, sizeof *r);
    return ENG_OK;
}

// ----------------------------------------------------------------------------
// String map (open addressing on XXH3)

static size_t strmap_slot(const hx_strmap *m, const char *key) {
    size_t mask = m->cap - 1;
    size_t i = (size_t)XXH3_64bits(key, strlen(key)) & mask;
    while (m->keys[i] && strcmp(m->keys[i], key) != 0) i = (i + 1) & mask;
    return i;
}

int hx_strmap_put(hx_strmap *m, const char *key, int64_t val) {
    if ((m->n + 1) * 2 > m->cap) {
        size_t ncap = m->cap ? m->cap * 2 : 16;
        hx_strmap nm = {calloc(ncap, sizeof(char *)), calloc(ncap, sizeof(int64_t)), ncap, m->n};
        if (!nm.keys || !nm.vals) {
            free(nm.keys);
            free(nm.vals);
            return ENG_ERR_NOMEM;
        }
        for (size_t i = 0; i < m->cap; i++) {
            if (!m->keys[i]) continue;
            size_t s = strmap_slot(&nm, m->keys[i]);
            nm.keys[s] = m->keys[i];
            nm.vals[s] = m->vals[i];
        }
        free(m->keys);
        free(m->vals);
        *m = nm;
    }
    size_t s = strmap_slot(m, key);
    if (!m->keys[s]) {
        if (!(m->keys[s] = hx_strdup(key))) return ENG_ERR_NOMEM;
        m->n++;
    }
    m->vals[s] = val;
    return ENG_OK;
}

bool hx_strmap_get(const hx_strmap *m, const char *key, int64_t *val) {
    if (m->cap == 0) return false;
    size_t s = strmap_slot(m, key);
    if (!m->keys[s]) return false;
    if (val) *val = m->vals[s];
    return true;
}

void hx_strmap_free(hx_strmap *m) {
    if (!m) return;
    for (size_t i = 0; i < m->cap; i++) free(m->keys[i]);
    free(m->keys);
    free(m->vals);
    memset(m, 0, sizeof *m);
}

// ----------------------------------------------------------------------------
// JSON -> structures (the v1 rules, shared with the importers)

#define FIELD_MAX 320

/* Formats a JSON field path (e.g. "messages[3].content") into out (FIELD_MAX bytes). */
static void fieldf(char *out, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void fieldf(char *out, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(out, FIELD_MAX, fmt, ap);
    va_end(ap);
}

/* Returns the string member `key` of object j, or NULL (absent or not a string). */
static const char *get_str(const json_t *j, const char *key) {
    const json_t *v = json_object_get(j, key);
    return json_is_string(v) ? json_string_value(v) : NULL;
}

static int block_from_json(const json_t *j, const char *path, int64_t line, const char *field, hx_block_opts *opts,
                           bool in_result, hx_block *out, char *err, size_t errlen);

/* Notes an unknown block type in opts (count and the distinct type list). */
static void note_unknown(hx_block_opts *opts, const char *type) {
    opts->n_unknown++;
    size_t tl = strlen(type), have = strlen(opts->unknown_types);
    for (const char *p = opts->unknown_types; (p = strstr(p, type)) != NULL; p += tl)
        if ((p == opts->unknown_types || p[-1] == ',') && (p[tl] == ',' || p[tl] == '\0')) return;
    if (have + tl + 2 < sizeof opts->unknown_types)
        snprintf(opts->unknown_types + have, sizeof opts->unknown_types - have, "%s%s", have ? "," : "", type);
}

/* A block kept as its canonical JSON text (lenient importers; tool_reference). */
static int block_as_json_text(const json_t *j, hx_block *out) {
    char *c = hx_json_canonical(j);
    if (!c) return ENG_ERR_NOMEM;
    int rc = hx_block_init(out, HX_BLOCK_TEXT, c, NULL, NULL, NULL, false);
    free(c);
    return rc;
}

/* Flattens a tool_result's content (string, null, or array of text, image,
 * document and tool_reference blocks) into one string joined by "\n". */
static int flatten_result(const json_t *c, const char *path, int64_t line, const char *field, hx_block_opts *opts,
                          char **out, char *err, size_t errlen) {
    *out = NULL;
    if (!c || json_is_null(c)) return (*out = hx_strdup("")) ? ENG_OK : ENG_ERR_NOMEM;
    if (json_is_string(c)) return (*out = hx_strdup(json_string_value(c))) ? ENG_OK : ENG_ERR_NOMEM;
    if (!json_is_array(c)) {
        hx_errf_at(err, errlen, path, line, field, "expected a string or an array of blocks");
        return ENG_ERR_FORMAT;
    }
    eng_buf b = {0};
    int rc = ENG_OK;
    char f[FIELD_MAX];
    for (size_t i = 0; i < json_array_size(c); i++) {
        hx_block blk;
        fieldf(f, "%s[%zu]", field, i);
        rc = block_from_json(json_array_get(c, i), path, line, f, opts, true, &blk, err, errlen);
        if (rc != ENG_OK) break;
        if (blk.type != HX_BLOCK_TEXT && blk.type != HX_BLOCK_IMAGE && opts && opts->lenient) {
            note_unknown(opts, hx_block_type_name(blk.type));
            hx_block_free(&blk);
            if ((rc = block_as_json_text(json_array_get(c, i), &blk))) break;
        }
        if (blk.type != HX_BLOCK_TEXT && blk.type != HX_BLOCK_IMAGE) {
            hx_errf_at(err, errlen, path, line, f,
                       "a tool_result may hold only text, image, document and tool_reference blocks, not %s",
                       hx_block_type_name(blk.type));
            hx_block_free(&blk);
            rc = ENG_ERR_FORMAT;
            break;
        }
        if ((i > 0 && eng_buf_append(&b, "\n", 1)) || eng_buf_append(&b, blk.text, strlen(blk.text)))
            rc = ENG_ERR_NOMEM;
        hx_block_free(&blk);
        if (rc) break;
    }
    if (rc == ENG_OK) {
        *out = b.data ? b.data : hx_strdup("");
        if (!*out) rc = ENG_ERR_NOMEM;
    } else {
        eng_buf_free(&b);
    }
    return rc;
}

static int need_str(const json_t *j, const char *key, const char *path, int64_t line,
                    const char *field, const char **out, char *err, size_t errlen) {
    const json_t *v = json_object_get(j, key);
    if (!json_is_string(v)) {
        char f[FIELD_MAX];
        fieldf(f, "%s.%s", field, key);
        hx_errf_at(err, errlen, path, line, f, v ? "expected a string" : "missing");
        return ENG_ERR_FORMAT;
    }
    *out = json_string_value(v);
    return ENG_OK;
}

static int block_from_json(const json_t *j, const char *path, int64_t line, const char *field, hx_block_opts *opts,
                           bool in_result, hx_block *out, char *err, size_t errlen) {
    memset(out, 0, sizeof *out);
    char f[FIELD_MAX];
    if (!json_is_object(j)) {
        hx_errf_at(err, errlen, path, line, field, "expected a block object");
        return ENG_ERR_FORMAT;
    }
    const char *type = get_str(j, "type");
    if (!type) {
        fieldf(f, "%s.type", field);
        hx_errf_at(err, errlen, path, line, f, json_object_get(j, "type") ? "expected a string" : "missing");
        return ENG_ERR_FORMAT;
    }
    const char *s = NULL, *id = NULL, *name = NULL;
    int rc;
    if (!strcmp(type, "text")) {
        if ((rc = need_str(j, "text", path, line, field, &s, err, errlen))) return rc;
        return hx_block_init(out, HX_BLOCK_TEXT, s, NULL, NULL, NULL, false);
    }
    if (!strcmp(type, "thinking")) {
        if ((rc = need_str(j, "thinking", path, line, field, &s, err, errlen))) return rc;
        return hx_block_init(out, HX_BLOCK_THINKING, s, NULL, NULL, NULL, false);
    }
    if (!strcmp(type, "redacted_thinking"))
        return hx_block_init(out, HX_BLOCK_THINKING, "[redacted thinking]", NULL, NULL, NULL, false);
    if (!strcmp(type, "tool_use")) {
        if ((rc = need_str(j, "id", path, line, field, &id, err, errlen))) return rc;
        if ((rc = need_str(j, "name", path, line, field, &name, err, errlen))) return rc;
        const json_t *in = json_object_get(j, "input");
        if (in && !json_is_object(in)) {
            fieldf(f, "%s.input", field);
            hx_errf_at(err, errlen, path, line, f, "expected a JSON object");
            return ENG_ERR_FORMAT;
        }
        if ((rc = hx_block_init(out, HX_BLOCK_TOOL_USE, "", id, name, NULL, false))) return rc;
        if (in) {
            char *c = hx_json_canonical(in);
            if (!c) {
                hx_block_free(out);
                return ENG_ERR_NOMEM;
            }
            free(out->input);
            out->input = c;
        }
        return ENG_OK;
    }
    if (!strcmp(type, "tool_result")) {
        if ((rc = need_str(j, "tool_use_id", path, line, field, &id, err, errlen))) return rc;
        const json_t *e = json_object_get(j, "is_error");
        if (e && !json_is_boolean(e) && !json_is_null(e)) {
            fieldf(f, "%s.is_error", field);
            hx_errf_at(err, errlen, path, line, f, "expected true or false");
            return ENG_ERR_FORMAT;
        }
        char *text = NULL;
        fieldf(f, "%s.content", field);
        if ((rc = flatten_result(json_object_get(j, "content"), path, line, f, opts, &text, err, errlen)))
            return rc;
        rc = hx_block_init(out, HX_BLOCK_TOOL_RESULT, text, id, NULL, NULL, json_is_true(e));
        free(text);
        return rc;
    }
    if (!strcmp(type, "image") || !strcmp(type, "document")) {
        const json_t *p = json_object_get(j, "placeholder");
        if (p && !json_is_string(p)) {
            fieldf(f, "%s.placeholder", field);
            hx_errf_at(err, errlen, path, line, f, "expected a string");
            return ENG_ERR_FORMAT;
        }
        const char *ph = p ? json_string_value(p) : (type[0] == 'i' ? "[image]" : "[document]");
        return hx_block_init(out, HX_BLOCK_IMAGE, ph, NULL, NULL, NULL, false);
    }
    if (in_result && !strcmp(type, "tool_reference")) {
        /* a deferred tool loaded by a tool search: kept as the block's own JSON */
        if ((rc = need_str(j, "tool_name", path, line, field, &name, err, errlen))) return rc;
        if (opts) opts->n_tool_reference++;
        return block_as_json_text(j, out);
    }
    if (opts && opts->lenient) {
        note_unknown(opts, type);
        return block_as_json_text(j, out);
    }
    fieldf(f, "%s.type", field);
    hx_errf_at(err, errlen, path, line, f, "unknown block type \"%s\"", type);
    return ENG_ERR_FORMAT;
}

int hx_block_from_json(const struct json_t *jc, const char *path, int64_t line, const char *field,
                       hx_block *out, char *err, size_t errlen) {
    return block_from_json((const json_t *)jc, path, line, field, NULL, false, out, err, errlen);
}

int hx_blocks_from_json_opts(const struct json_t *jc, const char *path, int64_t line, const char *field,
                             hx_block_opts *opts, hx_block **out, int32_t *n, char *err, size_t errlen) {
    const json_t *c = (const json_t *)jc;
    *out = NULL;
    *n = 0;
    if (json_is_string(c)) {
        hx_block *b = calloc(1, sizeof *b);
        if (!b) return ENG_ERR_NOMEM;
        if (hx_block_init(b, HX_BLOCK_TEXT, json_string_value(c), NULL, NULL, NULL, false)) {
            free(b);
            return ENG_ERR_NOMEM;
        }
        *out = b;
        *n = 1;
        return ENG_OK;
    }
    if (!json_is_array(c)) {
        hx_errf_at(err, errlen, path, line, field, c ? "expected a string or an array of blocks" : "missing");
        return ENG_ERR_FORMAT;
    }
    size_t m = json_array_size(c);
    if (m > INT32_MAX / 2) {
        hx_errf_at(err, errlen, path, line, field, "too many blocks");
        return ENG_ERR_FORMAT;
    }
    hx_block *bs = calloc(m ? m : 1, sizeof *bs);
    if (!bs) return ENG_ERR_NOMEM;
    char f[FIELD_MAX];
    int rc = ENG_OK;
    size_t k = 0;
    for (size_t i = 0; i < m; i++) {
        fieldf(f, "%s[%zu]", field, i);
        if ((rc = block_from_json(json_array_get(c, i), path, line, f, opts, false, &bs[k], err, errlen))) break;
        if (opts && opts->drop_empty_thinking && bs[k].type == HX_BLOCK_THINKING && !bs[k].text[0]) {
            hx_block_free(&bs[k]);
            opts->n_empty_thinking++;
            continue;
        }
        k++;
    }
    if (rc) {
        for (size_t q = 0; q < k; q++) hx_block_free(&bs[q]);
        free(bs);
        return rc;
    }
    *out = bs;
    *n = (int32_t)k;
    return ENG_OK;
}

int hx_blocks_from_json(const struct json_t *jc, const char *path, int64_t line, const char *field,
                        hx_block **out, int32_t *n, char *err, size_t errlen) {
    return hx_blocks_from_json_opts(jc, path, line, field, NULL, out, n, err, errlen);
}

int hx_message_from_json(const struct json_t *jc, const char *path, int64_t line, const char *field,
                         hx_message *out, char *err, size_t errlen) {
    const json_t *j = (const json_t *)jc;
    memset(out, 0, sizeof *out);
    char f[FIELD_MAX];
    if (!json_is_object(j)) {
        hx_errf_at(err, errlen, path, line, field, "expected a message object");
        return ENG_ERR_FORMAT;
    }
    const char *key;
    const json_t *v;
    json_object_foreach((json_t *)j, key, v) {
        if (strcmp(key, "role") && strcmp(key, "content") && strcmp(key, "tool_call_id")) {
            fieldf(f, "%s.%s", field, key);
            hx_errf_at(err, errlen, path, line, f, "unknown field");
            return ENG_ERR_FORMAT;
        }
    }
    const char *role;
    int rc;
    if ((rc = need_str(j, "role", path, line, field, &role, err, errlen))) return rc;
    if (!strcmp(role, "user")) out->role = HX_ROLE_USER;
    else if (!strcmp(role, "assistant")) out->role = HX_ROLE_ASSISTANT;
    else if (!strcmp(role, "system")) out->role = HX_ROLE_SYSTEM;
    else if (!strcmp(role, "tool")) out->role = HX_ROLE_TOOL;
    else {
        fieldf(f, "%s.role", field);
        hx_errf_at(err, errlen, path, line, f, "unknown role \"%s\" (expected user, assistant, system or tool)", role);
        return ENG_ERR_FORMAT;
    }
    const json_t *content = json_object_get(j, "content");
    const json_t *tcid = json_object_get(j, "tool_call_id");
    fieldf(f, "%s.tool_call_id", field);
    if (tcid && (out->role != HX_ROLE_TOOL || !json_is_string(content))) {
        hx_errf_at(err, errlen, path, line, f, "allowed only on a tool message with string content");
        return ENG_ERR_FORMAT;
    }
    if (out->role == HX_ROLE_TOOL && json_is_string(content)) {
        if (!json_is_string(tcid)) {
            hx_errf_at(err, errlen, path, line, f, tcid ? "expected a string" : "missing (a tool message with string content needs it)");
            return ENG_ERR_FORMAT;
        }
        hx_block b;
        if (hx_block_init(&b, HX_BLOCK_TOOL_RESULT, json_string_value(content), json_string_value(tcid),
                          NULL, NULL, false))
            return ENG_ERR_NOMEM;
        if (hx_message_push_block(out, &b)) {
            hx_block_free(&b);
            return ENG_ERR_NOMEM;
        }
        return ENG_OK;
    }
    fieldf(f, "%s.content", field);
    if ((rc = hx_blocks_from_json(content, path, line, f, &out->blocks, &out->n_blocks, err, errlen)))
        return rc;
    if (out->role == HX_ROLE_TOOL && (out->n_blocks != 1 || out->blocks[0].type != HX_BLOCK_TOOL_RESULT)) {
        hx_errf_at(err, errlen, path, line, f, "a tool message holds exactly one tool_result block");
        hx_message_free(out);
        return ENG_ERR_FORMAT;
    }
    return ENG_OK;
}

int hx_system_from_json(const struct json_t *jc, const char *path, int64_t line, const char *field,
                        hx_block **out, int32_t *n, char *err, size_t errlen) {
    const json_t *j = (const json_t *)jc;
    *out = NULL;
    *n = 0;
    if (!j || json_is_null(j)) return ENG_OK;
    if (!json_is_string(j) && !json_is_array(j)) {
        hx_errf_at(err, errlen, path, line, field, "expected a string or an array of text blocks");
        return ENG_ERR_FORMAT;
    }
    int rc = hx_blocks_from_json(j, path, line, field, out, n, err, errlen);
    if (rc) return rc;
    for (int32_t i = 0; i < *n; i++) {
        if ((*out)[i].type != HX_BLOCK_TEXT) {
            char f[FIELD_MAX];
            fieldf(f, "%s[%d].type", field, i);
            hx_errf_at(err, errlen, path, line, f, "a system block must be \"text\", not \"%s\"",
                       hx_block_type_name((*out)[i].type));
            for (int32_t k = 0; k < *n; k++) hx_block_free(&(*out)[k]);
            free(*out);
            *out = NULL;
            *n = 0;
            return ENG_ERR_FORMAT;
        }
    }
    return ENG_OK;
}

int hx_tools_from_json(const struct json_t *jc, const char *path, int64_t line, const char *field,
                       hx_tool **out, int32_t *n, char *err, size_t errlen) {
    const json_t *j = (const json_t *)jc;
    *out = NULL;
    *n = 0;
    if (!j || json_is_null(j)) return ENG_OK;
    if (!json_is_array(j)) {
        hx_errf_at(err, errlen, path, line, field, "expected an array of tools");
        return ENG_ERR_FORMAT;
    }
    size_t m = json_array_size(j);
    if (m > INT32_MAX / 2) {
        hx_errf_at(err, errlen, path, line, field, "too many tools");
        return ENG_ERR_FORMAT;
    }
    hx_tool *ts = calloc(m ? m : 1, sizeof *ts);
    if (!ts) return ENG_ERR_NOMEM;
    char f[FIELD_MAX], g[FIELD_MAX];
    int rc = ENG_OK;
    size_t i;
    for (i = 0; i < m; i++) {
        const json_t *t = json_array_get(j, i);
        fieldf(f, "%s[%zu]", field, i);
        if (!json_is_object(t)) {
            hx_errf_at(err, errlen, path, line, f, "expected a tool object");
            rc = ENG_ERR_FORMAT;
            break;
        }
        const json_t *fn = json_object_get(t, "function");
        const char *schema_key = "input_schema";
        if (json_is_object(fn)) { /* OpenAI shape */
            t = fn;
            schema_key = "parameters";
            fieldf(f, "%s[%zu].function", field, i);
        }
        const char *name;
        if ((rc = need_str(t, "name", path, line, f, &name, err, errlen))) break;
        const json_t *d = json_object_get(t, "description");
        const json_t *s = json_object_get(t, schema_key);
        if (d && !json_is_string(d) && !json_is_null(d)) {
            fieldf(g, "%s.description", f);
            hx_errf_at(err, errlen, path, line, g, "expected a string");
            rc = ENG_ERR_FORMAT;
            break;
        }
        if (s && !json_is_object(s) && !json_is_null(s)) {
            fieldf(g, "%s.%s", f, schema_key);
            hx_errf_at(err, errlen, path, line, g, "expected a JSON object");
            rc = ENG_ERR_FORMAT;
            break;
        }
        ts[i].name = hx_strdup(name);
        ts[i].description = hx_strdup(json_is_string(d) ? json_string_value(d) : "");
        ts[i].schema = json_is_object(s) ? hx_json_canonical(s) : hx_strdup("{}");
        if (!ts[i].name || !ts[i].description || !ts[i].schema) {
            rc = ENG_ERR_NOMEM;
            i++;
            break;
        }
    }
    if (rc) {
        for (size_t k = 0; k <= i && k < m; k++) hx_tool_free(&ts[k]);
        free(ts);
        return rc;
    }
    *out = ts;
    *n = (int32_t)m;
    return ENG_OK;
}

// ----------------------------------------------------------------------------
// One line -> hx_request (v1; v2 self-contained or compact)

static const char *const k_v1_keys[] = {"v", "session", "turn", "system", "tools", "messages",
                                        "response", "prompt", "tokens", "meta"};
static const char *const k_v2_keys[] = {"prev", "prev_response", "append", "usage", "notes", "served"};

/* What a compact line is rebuilt from: the requests read so far and, per
 * session, the index of its latest request and the line of a skipped line
 * since then (-1: none). NULL for a line read on its own. */
typedef struct line_ctx {
    const hx_transcript *sofar;
    const hx_strmap     *last;     /* session -> index in sofar->reqs */
    const hx_strmap     *skipped;  /* session -> line of a skipped line after its latest request, or -1 */
} line_ctx;

static bool key_in(const char *key, const char *const *keys, size_t n) {
    for (size_t k = 0; k < n; k++)
        if (!strcmp(key, keys[k])) return true;
    return false;
}

static int get_count(const json_t *o, const char *key, bool required, const char *path, int64_t line,
                     int64_t *out, char *err, size_t errlen) {
    const json_t *v = json_object_get(o, key);
    char f[FIELD_MAX];
    fieldf(f, "usage.%s", key);
    if (!v && !required) return ENG_OK;
    if (!json_is_integer(v) || json_integer_value(v) < 0) {
        hx_errf_at(err, errlen, path, line, f, v ? "expected a non-negative integer" : "missing");
        return ENG_ERR_FORMAT;
    }
    *out = json_integer_value(v);
    return ENG_OK;
}

/* v2 `usage`: {"input_tokens", "cache_read_input_tokens",
 * "cache_creation_input_tokens", ["total"], ["prompt_tokens", "counted_with",
 * ["ratio"]]}; total (when given) must be the sum; ratio is derived. */
static int parse_usage(const json_t *u, const char *path, int64_t line, hx_call_usage *out, char *err, size_t errlen) {
    static const char *const keys[] = {"input_tokens", "cache_read_input_tokens", "cache_creation_input_tokens",
                                       "total", "prompt_tokens", "counted_with", "ratio"};
    memset(out, 0, sizeof *out);
    out->prompt_tokens = -1;
    if (!json_is_object(u)) {
        hx_errf_at(err, errlen, path, line, "usage", "expected an object");
        return ENG_ERR_FORMAT;
    }
    const char *key;
    json_t *v;
    char f[FIELD_MAX];
    json_object_foreach((json_t *)u, key, v) {
        if (!key_in(key, keys, sizeof keys / sizeof keys[0])) {
            fieldf(f, "usage.%s", key);
            hx_errf_at(err, errlen, path, line, f, "unknown field");
            return ENG_ERR_FORMAT;
        }
    }
    int64_t total = -1;
    int rc;
    if ((rc = get_count(u, "input_tokens", true, path, line, &out->input, err, errlen)) ||
        (rc = get_count(u, "cache_read_input_tokens", true, path, line, &out->cache_read, err, errlen)) ||
        (rc = get_count(u, "cache_creation_input_tokens", true, path, line, &out->cache_creation, err, errlen)) ||
        (rc = get_count(u, "total", false, path, line, &total, err, errlen)) ||
        (rc = get_count(u, "prompt_tokens", false, path, line, &out->prompt_tokens, err, errlen)))
        return rc;
    if (out->input > INT64_MAX / 4 || out->cache_read > INT64_MAX / 4 || out->cache_creation > INT64_MAX / 4) {
        hx_errf_at(err, errlen, path, line, "usage", "token counts out of range");
        return ENG_ERR_FORMAT;
    }
    out->present = true;
    if (total >= 0 && total != hx_call_usage_total(out)) {
        hx_errf_at(err, errlen, path, line, "usage.total", "%lld is not the sum of the three counts (%lld)",
                   (long long)total, (long long)hx_call_usage_total(out));
        return ENG_ERR_FORMAT;
    }
    const json_t *cw = json_object_get(u, "counted_with"), *ratio = json_object_get(u, "ratio");
    if ((out->prompt_tokens >= 0) != (cw != NULL)) {
        hx_errf_at(err, errlen, path, line, cw ? "usage.prompt_tokens" : "usage.counted_with",
                   "missing (prompt_tokens and counted_with go together)");
        return ENG_ERR_FORMAT;
    }
    if (cw && !json_is_string(cw)) {
        hx_errf_at(err, errlen, path, line, "usage.counted_with", "expected a string");
        return ENG_ERR_FORMAT;
    }
    if (ratio && !json_is_number(ratio)) {
        hx_errf_at(err, errlen, path, line, "usage.ratio", "expected a number");
        return ENG_ERR_FORMAT;
    }
    if (cw && !(out->counted_with = hx_strdup(json_string_value(cw)))) return ENG_ERR_NOMEM;
    return ENG_OK;
}

/* v2 `notes`: an array of strings, kept as canonical JSON. */
static int parse_notes(const json_t *n, const char *path, int64_t line, char **out, char *err, size_t errlen) {
    if (!json_is_array(n)) {
        hx_errf_at(err, errlen, path, line, "notes", "expected an array of strings");
        return ENG_ERR_FORMAT;
    }
    for (size_t i = 0; i < json_array_size(n); i++) {
        if (!json_is_string(json_array_get(n, i))) {
            char f[FIELD_MAX];
            fieldf(f, "notes[%zu]", i);
            hx_errf_at(err, errlen, path, line, f, "expected a string");
            return ENG_ERR_FORMAT;
        }
    }
    return (*out = hx_json_canonical(n)) ? ENG_OK : ENG_ERR_NOMEM;
}

/* v2 `served`: an object, kept as canonical JSON; the fields replay acts on
 * are checked: id_slot an integer >= -1, cache_prompt true or false. */
static int parse_served(const json_t *v, const char *path, int64_t line, char **out, char *err, size_t errlen) {
    if (!json_is_object(v)) {
        hx_errf_at(err, errlen, path, line, "served", "expected an object");
        return ENG_ERR_FORMAT;
    }
    const json_t *slot = json_object_get(v, "id_slot"), *cp = json_object_get(v, "cache_prompt");
    if (slot && (!json_is_integer(slot) || json_integer_value(slot) < -1 || json_integer_value(slot) > INT32_MAX)) {
        hx_errf_at(err, errlen, path, line, "served.id_slot", "expected an integer >= -1");
        return ENG_ERR_FORMAT;
    }
    if (cp && !json_is_boolean(cp)) {
        hx_errf_at(err, errlen, path, line, "served.cache_prompt", "expected true or false");
        return ENG_ERR_FORMAT;
    }
    return (*out = hx_json_canonical(v)) ? ENG_OK : ENG_ERR_NOMEM;
}

void hx_request_served_hint(const hx_request *r, int32_t *id_slot, bool *no_reuse) {
    *id_slot = -1;
    *no_reuse = false;
    if (!r->served) return;
    json_error_t je;
    json_t *j = json_loads(r->served, 0, &je);
    const json_t *slot = json_object_get(j, "id_slot"), *cp = json_object_get(j, "cache_prompt");
    if (json_is_integer(slot)) *id_slot = (int32_t)json_integer_value(slot);
    if (json_is_false(cp)) *no_reuse = true;
    json_decref(j);
}

/* A messages line's `response`: {"content": ...}, a string, or null. */
static int parse_response(const json_t *jr, const char *path, int64_t line, hx_message *out, char *err,
                          size_t errlen) {
    if (!jr || json_is_null(jr)) return ENG_OK;
    const json_t *content = jr;
    if (json_is_object(jr)) {
        const char *key;
        json_t *v;
        json_object_foreach((json_t *)jr, key, v) {
            if (strcmp(key, "content")) {
                char f[FIELD_MAX];
                fieldf(f, "response.%s", key);
                hx_errf_at(err, errlen, path, line, f, "unknown field");
                return ENG_ERR_FORMAT;
            }
        }
        content = json_object_get(jr, "content");
    } else if (!json_is_string(jr)) {
        hx_errf_at(err, errlen, path, line, "response", "expected {\"content\": ...} or a string");
        return ENG_ERR_FORMAT;
    }
    return hx_blocks_from_json(content, path, line, json_is_object(jr) ? "response.content" : "response",
                               &out->blocks, &out->n_blocks, err, errlen);
}

/* Appends the messages of the JSON array jm (field name `field`) to out. */
static int parse_messages(const json_t *jm, const char *path, int64_t line, const char *field, hx_request *out,
                          char *err, size_t errlen) {
    if (!json_is_array(jm)) {
        hx_errf_at(err, errlen, path, line, field, "expected an array of messages");
        return ENG_ERR_FORMAT;
    }
    size_t m = json_array_size(jm);
    if (m > INT32_MAX / 2 - (size_t)out->n_messages) {
        hx_errf_at(err, errlen, path, line, field, "too many messages");
        return ENG_ERR_FORMAT;
    }
    if (m == 0) return ENG_OK;
    hx_message *nm = realloc(out->messages, ((size_t)out->n_messages + m) * sizeof *nm);
    if (!nm) return ENG_ERR_NOMEM;
    out->messages = nm;
    char f[FIELD_MAX];
    for (size_t i = 0; i < m; i++) {
        fieldf(f, "%s[%zu]", field, i);
        int rc = hx_message_from_json(json_array_get(jm, i), path, line, f, &out->messages[out->n_messages], err,
                                      errlen);
        if (rc) return rc;
        out->n_messages++;
    }
    return ENG_OK;
}

/* Copies the previous request's messages (and response) into out, for a compact line. */
static int inherit_messages(const hx_request *prev, bool with_response, hx_request *out) {
    int32_t m = prev->n_messages + (with_response && prev->response.n_blocks > 0 ? 1 : 0);
    if (m == 0) return ENG_OK;
    if (!(out->messages = calloc((size_t)m, sizeof *out->messages))) return ENG_ERR_NOMEM;
    for (int32_t i = 0; i < prev->n_messages; i++, out->n_messages++)
        if (hx_message_copy(&out->messages[i], &prev->messages[i])) return ENG_ERR_NOMEM;
    if (m > prev->n_messages) {
        if (hx_message_copy(&out->messages[out->n_messages], &prev->response)) return ENG_ERR_NOMEM;
        out->messages[out->n_messages++].role = HX_ROLE_ASSISTANT;
    }
    return ENG_OK;
}

/* A compact line's `system`: absent (the previous request's blocks), or an
 * array whose null entries stand for the previous request's block at the
 * same index. */
static int compact_system(const json_t *js, const hx_request *prev, const char *path, int64_t line,
                          hx_request *out, char *err, size_t errlen) {
    if (!js) {
        if (prev->n_system == 0) return ENG_OK;
        if (!(out->system = calloc((size_t)prev->n_system, sizeof *out->system))) return ENG_ERR_NOMEM;
        for (int32_t i = 0; i < prev->n_system; i++, out->n_system++)
            if (hx_block_copy(&out->system[i], &prev->system[i])) return ENG_ERR_NOMEM;
        return ENG_OK;
    }
    if (!json_is_array(js)) return hx_system_from_json(js, path, line, "system", &out->system, &out->n_system, err, errlen);
    size_t m = json_array_size(js);
    if (m > INT32_MAX / 2) {
        hx_errf_at(err, errlen, path, line, "system", "too many blocks");
        return ENG_ERR_FORMAT;
    }
    if (m == 0) return ENG_OK;
    if (!(out->system = calloc(m, sizeof *out->system))) return ENG_ERR_NOMEM;
    char f[FIELD_MAX];
    for (size_t i = 0; i < m; i++) {
        const json_t *b = json_array_get(js, i);
        fieldf(f, "system[%zu]", i);
        int rc;
        if (json_is_null(b)) {
            if ((int64_t)i >= prev->n_system) {
                hx_errf_at(err, errlen, path, line, f, "null (the previous request's block) but the previous request "
                           "has %d system blocks", prev->n_system);
                return ENG_ERR_FORMAT;
            }
            rc = hx_block_copy(&out->system[i], &prev->system[i]);
        } else {
            rc = hx_block_from_json(b, path, line, f, &out->system[i], err, errlen);
            if (!rc && out->system[i].type != HX_BLOCK_TEXT) {
                hx_errf_at(err, errlen, path, line, f, "a system block must be \"text\", not \"%s\"",
                           hx_block_type_name(out->system[i].type));
                hx_block_free(&out->system[i]);
                rc = ENG_ERR_FORMAT;
            }
        }
        if (rc) return rc;
        out->n_system = (int32_t)i + 1;
    }
    return ENG_OK;
}

static int copy_tools(const hx_request *prev, hx_request *out) {
    if (prev->n_tools == 0) return ENG_OK;
    if (!(out->tools = calloc((size_t)prev->n_tools, sizeof *out->tools))) return ENG_ERR_NOMEM;
    for (int32_t i = 0; i < prev->n_tools; i++, out->n_tools++)
        if (hx_tool_copy(&out->tools[i], &prev->tools[i])) return ENG_ERR_NOMEM;
    return ENG_OK;
}

/* A compact line: rebuilt from the session's previous request. */
static int parse_compact(json_t *j, const char *path, int64_t line, const line_ctx *cx, hx_request *out, char *err,
                         size_t errlen) {
    const json_t *jp = json_object_get(j, "prev");
    if (!json_is_integer(jp) || json_integer_value(jp) < 0 || json_integer_value(jp) > INT32_MAX) {
        hx_errf_at(err, errlen, path, line, "prev", "expected the turn of the previous request of the session");
        return ENG_ERR_FORMAT;
    }
    const char *kinds[] = {"messages", "prompt", "tokens"};
    for (int k = 0; k < 3; k++) {
        if (json_object_get(j, kinds[k])) {
            hx_errf_at(err, errlen, path, line, kinds[k], "not allowed on a compact line (one with prev)");
            return ENG_ERR_FORMAT;
        }
    }
    int64_t idx = -1, skipped = -1;
    if (!cx) {
        hx_errf_at(err, errlen, path, line, "prev", "a compact line can only be read with the lines before it");
        return ENG_ERR_FORMAT;
    }
    if (hx_strmap_get(cx->skipped, out->session, &skipped) && skipped > 0) {
        hx_errf_at(err, errlen, path, line, "prev",
                   "the request it extends cannot be rebuilt: line %lld of session \"%s\" was skipped",
                   (long long)skipped, out->session);
        return ENG_ERR_FORMAT;
    }
    if (!hx_strmap_get(cx->last, out->session, &idx)) {
        hx_errf_at(err, errlen, path, line, "prev", "session \"%s\" has no earlier request in this file", out->session);
        return ENG_ERR_FORMAT;
    }
    const hx_request *prev = &cx->sofar->reqs[idx];
    if (json_integer_value(jp) != prev->turn) {
        hx_errf_at(err, errlen, path, line, "prev", "%lld is not the turn of the previous request of session \"%s\" (%d)",
                   (long long)json_integer_value(jp), out->session, prev->turn);
        return ENG_ERR_FORMAT;
    }
    if (hx_request_kind_of(prev) != HX_REQUEST_MESSAGES) {
        hx_errf_at(err, errlen, path, line, "prev", "the previous request (line %lld) is a prompt or tokens line; "
                   "only messages lines are extended", (long long)prev->line);
        return ENG_ERR_FORMAT;
    }
    const json_t *pr = json_object_get(j, "prev_response");
    if (pr && !json_is_boolean(pr)) {
        hx_errf_at(err, errlen, path, line, "prev_response", "expected true or false");
        return ENG_ERR_FORMAT;
    }
    const json_t *ja = json_object_get(j, "append");
    if (!ja) {
        hx_errf_at(err, errlen, path, line, "append", "missing (a compact line holds the messages it appends)");
        return ENG_ERR_FORMAT;
    }
    int rc;
    if ((rc = inherit_messages(prev, !pr || json_is_true(pr), out)) ||
        (rc = parse_messages(ja, path, line, "append", out, err, errlen)) ||
        (rc = compact_system(json_object_get(j, "system"), prev, path, line, out, err, errlen)))
        return rc;
    const json_t *jt = json_object_get(j, "tools");
    return jt ? hx_tools_from_json(jt, path, line, "tools", &out->tools, &out->n_tools, err, errlen)
              : copy_tools(prev, out);
}

/* A self-contained line: exactly one of messages, prompt, tokens. */
static int parse_whole(json_t *j, const char *path, int64_t line, hx_request *out, char *err, size_t errlen) {
    json_t *jm = json_object_get(j, "messages");
    json_t *jp = json_object_get(j, "prompt");
    json_t *jt = json_object_get(j, "tokens");
    json_t *jr = json_object_get(j, "response");
    char f[FIELD_MAX];
    int kinds = (jm != NULL) + (jp != NULL) + (jt != NULL);
    if (kinds != 1) {
        hx_errf_at(err, errlen, path, line, "messages/prompt/tokens",
                   "a line needs exactly one of them (found %s)", kinds ? "more than one" : "none");
        return ENG_ERR_FORMAT;
    }
    const char *v2only[] = {"prev_response", "append"};
    for (int k = 0; k < 2; k++) {
        if (json_object_get(j, v2only[k])) {
            hx_errf_at(err, errlen, path, line, v2only[k], "allowed only on a compact line (one with prev)");
            return ENG_ERR_FORMAT;
        }
    }
    int rc;
    if (jm) {
        if ((rc = hx_system_from_json(json_object_get(j, "system"), path, line, "system", &out->system,
                                      &out->n_system, err, errlen)) ||
            (rc = hx_tools_from_json(json_object_get(j, "tools"), path, line, "tools", &out->tools, &out->n_tools,
                                     err, errlen)))
            return rc;
        return parse_messages(jm, path, line, "messages", out, err, errlen);
    }
    if (json_object_get(j, "system") || json_object_get(j, "tools")) {
        hx_errf_at(err, errlen, path, line, json_object_get(j, "system") ? "system" : "tools",
                   "not allowed on a prompt or tokens line");
        return ENG_ERR_FORMAT;
    }
    if (jr && !json_is_null(jr)) {
        if (!json_is_string(jr)) {
            hx_errf_at(err, errlen, path, line, "response", "a prompt or tokens line takes a string response");
            return ENG_ERR_FORMAT;
        }
        if (!(out->response_text = hx_strdup(json_string_value(jr)))) return ENG_ERR_NOMEM;
    }
    if (jp) {
        if (!json_is_string(jp) || json_string_length(jp) == 0) {
            hx_errf_at(err, errlen, path, line, "prompt", json_is_string(jp) ? "empty" : "expected a string");
            return ENG_ERR_FORMAT;
        }
        return (out->prompt = hx_strdup(json_string_value(jp))) ? ENG_OK : ENG_ERR_NOMEM;
    }
    if (!json_is_array(jt) || json_array_size(jt) == 0 || json_array_size(jt) > INT32_MAX / 8) {
        hx_errf_at(err, errlen, path, line, "tokens",
                   json_is_array(jt) ? "expected a non-empty array of token ids" : "expected an array of token ids");
        return ENG_ERR_FORMAT;
    }
    size_t m = json_array_size(jt);
    if (!(out->tokens = malloc(m * sizeof(int32_t)))) return ENG_ERR_NOMEM;
    for (size_t i = 0; i < m; i++) {
        json_t *t = json_array_get(jt, i);
        if (!json_is_integer(t) || json_integer_value(t) < 0 || json_integer_value(t) > INT32_MAX) {
            fieldf(f, "tokens[%zu]", i);
            hx_errf_at(err, errlen, path, line, f, "expected a token id in [0, 2147483647]");
            return ENG_ERR_FORMAT;
        }
        out->tokens[i] = (int32_t)json_integer_value(t);
    }
    out->n_tokens = (int32_t)m;
    return ENG_OK;
}

/* One request line (a JSON object) -> *out. cx is NULL for a line read on its own. */
static int parse_object(json_t *j, const char *path, int64_t line, const line_ctx *cx, hx_request *out, char *err,
                        size_t errlen) {
    memset(out, 0, sizeof *out);
    out->response.role = HX_ROLE_ASSISTANT;
    out->usage.prompt_tokens = -1;
    out->line = line;
    int rc = ENG_ERR_FORMAT;
    const char *key;
    json_t *v;
    if (!json_is_object(j)) {
        hx_errf_at(err, errlen, path, line, NULL, "a line must be a JSON object");
        goto out;
    }
    v = json_object_get(j, "v");
    if (!json_is_integer(v) || (json_integer_value(v) != 1 && json_integer_value(v) != 2)) {
        if (!v) hx_errf_at(err, errlen, path, line, "v", "missing (expected 1 or 2)");
        else if (!json_is_integer(v)) hx_errf_at(err, errlen, path, line, "v", "expected the integer 1 or 2");
        else hx_errf_at(err, errlen, path, line, "v", "unsupported version %lld (expected 1 or 2)",
                        (long long)json_integer_value(v));
        goto out;
    }
    int version = (int)json_integer_value(v);
    json_object_foreach(j, key, v) {
        if (key_in(key, k_v1_keys, sizeof k_v1_keys / sizeof k_v1_keys[0])) continue;
        bool v2 = key_in(key, k_v2_keys, sizeof k_v2_keys / sizeof k_v2_keys[0]);
        if (v2 && version == 2) continue;
        if (!strcmp(key, "header")) hx_errf_at(err, errlen, path, line, key, "allowed only on the first line of a v2 file");
        else if (v2) hx_errf_at(err, errlen, path, line, key, "unknown field in a version 1 line (a version 2 field)");
        else hx_errf_at(err, errlen, path, line, key, "unknown field");
        goto out;
    }
    v = json_object_get(j, "session");
    if (!json_is_string(v)) {
        hx_errf_at(err, errlen, path, line, "session", v ? "expected a string" : "missing");
        goto out;
    }
    if (!(out->session = hx_strdup(json_string_value(v)))) { rc = ENG_ERR_NOMEM; goto out; }
    v = json_object_get(j, "turn");
    if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) > INT32_MAX) {
        hx_errf_at(err, errlen, path, line, "turn", v ? "expected an integer in [0, 2147483647]" : "missing");
        goto out;
    }
    out->turn = (int32_t)json_integer_value(v);
    rc = json_object_get(j, "prev") ? parse_compact(j, path, line, cx, out, err, errlen)
                                    : parse_whole(j, path, line, out, err, errlen);
    if (rc) goto out;
    if (hx_request_kind_of(out) == HX_REQUEST_MESSAGES &&
        (rc = parse_response(json_object_get(j, "response"), path, line, &out->response, err, errlen)))
        goto out;
    if ((v = json_object_get(j, "usage")) && (rc = parse_usage(v, path, line, &out->usage, err, errlen))) goto out;
    if ((v = json_object_get(j, "notes")) && (rc = parse_notes(v, path, line, &out->notes, err, errlen))) goto out;
    if ((v = json_object_get(j, "served")) && (rc = parse_served(v, path, line, &out->served, err, errlen))) goto out;
    rc = ENG_OK;
out:
    if (rc != ENG_OK) hx_request_free(out);
    return rc;
}

int hx_request_parse(const char *json, size_t len, const char *path, int64_t line, hx_request *out,
                     char *err, size_t errlen) {
    memset(out, 0, sizeof *out);
    json_error_t je;
    json_t *j = hx_jsonl_load(json, len, NULL, &je);
    if (!j) {
        hx_errf_at(err, errlen, path, line, NULL, "invalid JSON at column %d: %s", je.column, je.text);
        return ENG_ERR_FORMAT;
    }
    int rc = parse_object(j, path, line, NULL, out, err, errlen);
    json_decref(j);
    return rc;
}

// ----------------------------------------------------------------------------
// Whole files

/* The v2 header line {"v":2,"header":{...}} -> canonical JSON of the object. */
static int parse_header(json_t *j, const char *path, int64_t line, char **out, char *err, size_t errlen) {
    const char *key;
    json_t *v;
    json_object_foreach(j, key, v) {
        if (strcmp(key, "v") && strcmp(key, "header")) {
            hx_errf_at(err, errlen, path, line, key, "unknown field on the header line");
            return ENG_ERR_FORMAT;
        }
    }
    v = json_object_get(j, "v");
    if (!json_is_integer(v) || json_integer_value(v) != 2) {
        hx_errf_at(err, errlen, path, line, "v", "a header line needs version 2");
        return ENG_ERR_FORMAT;
    }
    if (!json_is_object(json_object_get(j, "header"))) {
        hx_errf_at(err, errlen, path, line, "header", "expected an object");
        return ENG_ERR_FORMAT;
    }
    return (*out = hx_json_canonical(json_object_get(j, "header"))) ? ENG_OK : ENG_ERR_NOMEM;
}

int hx_transcript_parse(const char *data, size_t n, const char *path, bool skip_bad, hx_transcript *out,
                        int64_t *n_skipped, char *err, size_t errlen) {
    memset(out, 0, sizeof *out);
    if (n_skipped) *n_skipped = 0;
    hx_strmap last_turn = {0}, last = {0}, skipped = {0};
    int rc = ENG_OK;
    if (!(out->path = hx_strdup(path ? path : "-"))) return ENG_ERR_NOMEM;
    int64_t start = hx_jsonl_start(data, n, out->path, err, errlen);
    if (start < 0) {
        hx_transcript_free(out);
        return ENG_ERR_FORMAT;
    }
    line_ctx cx = {out, &last, &skipped};
    int64_t lineno = 0;
    size_t pos = (size_t)start;
    bool first = true;
    while (pos < n) {
        const char *s = data + pos;
        const char *nl = memchr(s, '\n', n - pos);
        size_t len = nl ? (size_t)(nl - s) : n - pos;
        pos += len + (nl ? 1 : 0);
        lineno++;
        size_t l = len;
        if (l > 0 && s[l - 1] == '\r') l--;
        bool blank = true;
        for (size_t i = 0; i < l && blank; i++)
            if (s[i] != ' ' && s[i] != '\t') blank = false;
        if (blank) continue;
        bool was_first = first;
        first = false;
        hx_request r;
        json_error_t je;
        json_t *j = hx_jsonl_load(s, l, NULL, &je);
        if (!j) {
            hx_jsonl_explain(data + start, n - (size_t)start, out->path, lineno, je.column, je.text, err, errlen);
            rc = ENG_ERR_FORMAT;
        } else if (json_is_object(j) && json_object_get(j, "header")) {
            rc = was_first ? parse_header(j, out->path, lineno, &out->header, err, errlen) : ENG_ERR_FORMAT;
            if (!was_first) hx_errf_at(err, errlen, out->path, lineno, "header", "allowed only on the first line");
            json_decref(j);
            if (rc == ENG_OK) continue;
            j = NULL;
        } else {
            rc = parse_object(j, out->path, lineno, &cx, &r, err, errlen);
            if (rc == ENG_OK) {
                int64_t prev;
                if (hx_strmap_get(&last_turn, r.session, &prev) && r.turn <= prev) {
                    hx_errf_at(err, errlen, out->path, lineno, "turn",
                               "%d is not greater than the previous turn %lld of session \"%s\"", r.turn,
                               (long long)prev, r.session);
                    hx_request_free(&r);
                    rc = ENG_ERR_FORMAT;
                }
            }
        }
        if (rc == ENG_ERR_FORMAT && skip_bad) {
            if (n_skipped) (*n_skipped)++;
            /* a later compact line of this session cannot be rebuilt */
            const char *sess = j && json_is_object(j) ? json_string_value(json_object_get(j, "session")) : NULL;
            if (sess && (rc = hx_strmap_put(&skipped, sess, lineno))) { json_decref(j); break; }
            json_decref(j);
            rc = ENG_OK;
            continue;
        }
        json_decref(j);
        if (rc != ENG_OK) break;
        if ((rc = hx_strmap_put(&last_turn, r.session, r.turn)) || (rc = hx_strmap_put(&last, r.session, out->n)) ||
            (rc = hx_strmap_put(&skipped, r.session, -1)) || (rc = hx_transcript_push(out, &r))) {
            hx_request_free(&r);
            break;
        }
    }
    hx_strmap_free(&last_turn);
    hx_strmap_free(&last);
    hx_strmap_free(&skipped);
    if (rc != ENG_OK) hx_transcript_free(out);
    return rc;
}

int hx_transcript_read(const char *path, bool skip_bad, hx_transcript *out, int64_t *n_skipped, char *err,
                       size_t errlen) {
    memset(out, 0, sizeof *out);
    if (n_skipped) *n_skipped = 0;
    char *data = NULL;
    size_t n = 0;
    int rc = eng_read_file(path, &data, &n, err, errlen);
    if (rc != ENG_OK) return rc;
    rc = hx_transcript_parse(data, n, path, skip_bad, out, n_skipped, err, errlen);
    free(data);
    return rc;
}

// ----------------------------------------------------------------------------
// Writing: canonical lines (fixed key order, compact, canonical nested JSON)

/* json_string fails on invalid UTF-8: every builder below returns NULL then. */
static json_t *block_to_json(const hx_block *b) {
    json_t *o = json_object();
    if (!o) return NULL;
    int bad = json_object_set_new(o, "type", json_string(hx_block_type_name(b->type)));
    switch (b->type) {
    case HX_BLOCK_TEXT:
        bad |= json_object_set_new(o, "text", json_string(b->text));
        break;
    case HX_BLOCK_THINKING:
        bad |= json_object_set_new(o, "thinking", json_string(b->text));
        break;
    case HX_BLOCK_TOOL_USE: {
        json_error_t je;
        const char *in = b->input ? b->input : "{}";
        bad |= json_object_set_new(o, "id", json_string(b->id ? b->id : ""));
        bad |= json_object_set_new(o, "name", json_string(b->name ? b->name : ""));
        bad |= json_object_set_new(o, "input", json_loadb(in, strlen(in), 0, &je));
        break;
    }
    case HX_BLOCK_TOOL_RESULT:
        bad |= json_object_set_new(o, "tool_use_id", json_string(b->id ? b->id : ""));
        bad |= json_object_set_new(o, "content", json_string(b->text));
        if (b->is_error) bad |= json_object_set_new(o, "is_error", json_true());
        break;
    case HX_BLOCK_IMAGE:
        bad |= json_object_set_new(o, "placeholder", json_string(b->text));
        break;
    }
    if (bad) {
        json_decref(o);
        return NULL;
    }
    return o;
}

static json_t *blocks_to_json(const hx_block *bs, int32_t n) {
    json_t *a = json_array();
    if (!a) return NULL;
    for (int32_t i = 0; i < n; i++) {
        if (json_array_append_new(a, block_to_json(&bs[i]))) {
            json_decref(a);
            return NULL;
        }
    }
    return a;
}

static json_t *tools_to_json(const hx_tool *tools, int32_t n) {
    json_t *ta = json_array();
    for (int32_t i = 0; ta && i < n; i++) {
        const hx_tool *t = &tools[i];
        json_t *to = json_object();
        json_error_t je;
        const char *sc = t->schema ? t->schema : "{}";
        int b2 = !to;
        if (to) {
            b2 |= json_object_set_new(to, "name", json_string(t->name ? t->name : ""));
            b2 |= json_object_set_new(to, "description", json_string(t->description ? t->description : ""));
            b2 |= json_object_set_new(to, "input_schema", json_loadb(sc, strlen(sc), 0, &je));
        }
        if (b2 || json_array_append_new(ta, to)) {
            if (!b2) to = NULL;
            json_decref(to);
            json_decref(ta);
            ta = NULL;
        }
    }
    return ta;
}

static json_t *messages_to_json(const hx_message *ms, int32_t from, int32_t to) {
    json_t *ma = json_array();
    for (int32_t i = from; ma && i < to; i++) {
        json_t *mo = json_object();
        int b2 = !mo;
        if (mo) {
            b2 |= json_object_set_new(mo, "role", json_string(hx_role_name(ms[i].role)));
            b2 |= json_object_set_new(mo, "content", blocks_to_json(ms[i].blocks, ms[i].n_blocks));
        }
        if (b2 || json_array_append_new(ma, mo)) {
            if (!b2) mo = NULL;
            json_decref(mo);
            json_decref(ma);
            ma = NULL;
        }
    }
    return ma;
}

static bool tools_equal(const hx_request *a, const hx_request *b) {
    if (a->n_tools != b->n_tools) return false;
    for (int32_t i = 0; i < a->n_tools; i++)
        if (!str_eq(a->tools[i].name, b->tools[i].name) || !str_eq(a->tools[i].description, b->tools[i].description) ||
            !str_eq(a->tools[i].schema, b->tools[i].schema))
            return false;
    return true;
}

/* How r extends prev (both messages requests): the number of r's messages
 * rebuilt from prev (its messages, plus its response when *with_response),
 * or -1 when r does not start with prev's messages. */
static int32_t extends_prev(const hx_request *prev, const hx_request *r, bool *with_response) {
    *with_response = false;
    if (r->n_messages < prev->n_messages) return -1;
    for (int32_t i = 0; i < prev->n_messages; i++)
        if (!hx_message_equal(&prev->messages[i], &r->messages[i])) return -1;
    int32_t k = prev->n_messages;
    if (prev->response.n_blocks > 0 && r->n_messages > k && r->messages[k].role == HX_ROLE_ASSISTANT) {
        hx_message resp = prev->response;
        resp.role = HX_ROLE_ASSISTANT;
        if (hx_message_equal(&resp, &r->messages[k])) {
            *with_response = true;
            return k + 1;
        }
    }
    return k;
}

/* The JSON object of one line. version 1: self-contained; version 2:
 * compact when prev (the session's previous request, or NULL) allows it. */
static json_t *request_to_json(const hx_request *r, const hx_request *prev, int version) {
    json_t *o = json_object();
    if (!o) return NULL;
    int bad = json_object_set_new(o, "v", json_integer(version));
    bad |= json_object_set_new(o, "session", json_string(r->session ? r->session : ""));
    bad |= json_object_set_new(o, "turn", json_integer(r->turn));
    hx_request_kind kind = hx_request_kind_of(r);
    if (kind == HX_REQUEST_MESSAGES) {
        bool with_resp = false;
        int32_t from = version == 2 && prev && hx_request_kind_of(prev) == HX_REQUEST_MESSAGES
                           ? extends_prev(prev, r, &with_resp) : -1;
        if (from >= 0) {
            bad |= json_object_set_new(o, "prev", json_integer(prev->turn));
            if (!with_resp && prev->response.n_blocks > 0) bad |= json_object_set_new(o, "prev_response", json_false());
            bool same_sys = r->n_system == prev->n_system;
            for (int32_t i = 0; same_sys && i < r->n_system; i++) same_sys = hx_block_equal(&r->system[i], &prev->system[i]);
            if (!same_sys && r->n_system == prev->n_system) {
                json_t *sa = json_array();
                for (int32_t i = 0; sa && i < r->n_system; i++) {
                    json_t *e = hx_block_equal(&r->system[i], &prev->system[i]) ? json_null() : block_to_json(&r->system[i]);
                    if (json_array_append_new(sa, e)) {
                        json_decref(sa);
                        sa = NULL;
                    }
                }
                bad |= json_object_set_new(o, "system", sa);
            } else if (!same_sys) {
                bad |= json_object_set_new(o, "system", blocks_to_json(r->system, r->n_system));
            }
            if (!tools_equal(r, prev)) bad |= json_object_set_new(o, "tools", tools_to_json(r->tools, r->n_tools));
            bad |= json_object_set_new(o, "append", messages_to_json(r->messages, from, r->n_messages));
        } else {
            if (r->n_system) bad |= json_object_set_new(o, "system", blocks_to_json(r->system, r->n_system));
            if (r->n_tools) bad |= json_object_set_new(o, "tools", tools_to_json(r->tools, r->n_tools));
            bad |= json_object_set_new(o, "messages", messages_to_json(r->messages, 0, r->n_messages));
        }
        json_t *ro = json_object();
        if (ro) bad |= json_object_set_new(ro, "content", blocks_to_json(r->response.blocks, r->response.n_blocks));
        bad |= json_object_set_new(o, "response", ro);
    } else {
        if (kind == HX_REQUEST_PROMPT) {
            bad |= json_object_set_new(o, "prompt", json_string(r->prompt));
        } else {
            json_t *ta = json_array();
            for (int32_t i = 0; ta && i < r->n_tokens; i++)
                if (json_array_append_new(ta, json_integer(r->tokens[i]))) {
                    json_decref(ta);
                    ta = NULL;
                }
            bad |= json_object_set_new(o, "tokens", ta);
        }
        if (r->response_text) bad |= json_object_set_new(o, "response", json_string(r->response_text));
    }
    if (version == 2 && r->usage.present) {
        const hx_call_usage *u = &r->usage;
        json_t *uo = json_object();
        bad |= !uo;
        if (uo) {
            bad |= json_object_set_new(uo, "input_tokens", json_integer(u->input));
            bad |= json_object_set_new(uo, "cache_read_input_tokens", json_integer(u->cache_read));
            bad |= json_object_set_new(uo, "cache_creation_input_tokens", json_integer(u->cache_creation));
            bad |= json_object_set_new(uo, "total", json_integer(hx_call_usage_total(u)));
            if (u->prompt_tokens >= 0 && u->counted_with) {
                bad |= json_object_set_new(uo, "prompt_tokens", json_integer(u->prompt_tokens));
                bad |= json_object_set_new(uo, "counted_with", json_string(u->counted_with));
                int64_t tot = hx_call_usage_total(u);
                /* three decimals (the line is dumped with JSON_REAL_PRECISION) */
                if (tot > 0) bad |= json_object_set_new(uo, "ratio", json_real((double)u->prompt_tokens / (double)tot));
            }
            bad |= json_object_set_new(o, "usage", uo);
        }
    }
    if (version == 2 && r->notes) {
        json_error_t je;
        bad |= json_object_set_new(o, "notes", json_loadb(r->notes, strlen(r->notes), 0, &je));
    }
    if (version == 2 && r->served) {
        json_error_t je;
        bad |= json_object_set_new(o, "served", json_loadb(r->served, strlen(r->served), 0, &je));
    }
    if (bad) {
        json_decref(o);
        return NULL;
    }
    return o;
}

/* A line's text: compact JSON; a usage ratio with 3 significant decimals.
 * Reals elsewhere (tool inputs, schemas) keep jansson's full precision. */
static char *line_text(json_t *o) {
    json_t *u = json_object_get(o, "usage");
    json_t *ratio = u ? json_object_get(u, "ratio") : NULL;
    if (!ratio) return json_dumps(o, JSON_COMPACT);
    char num[32];
    snprintf(num, sizeof num, "%.3f", json_real_value(ratio));
    json_object_del(u, "ratio");
    char *s = json_dumps(o, JSON_COMPACT);
    if (!s) return NULL;
    /* the usage object is the last-but-notes member: re-insert "ratio" before its closing brace */
    char *uat = strstr(s, ",\"usage\":{");
    char *close = uat ? strchr(uat, '}') : NULL;
    if (!close) return s;
    size_t n = strlen(s), add = strlen(",\"ratio\":") + strlen(num);
    char *t = malloc(n + add + 1);
    if (!t) {
        free(s);
        return NULL;
    }
    size_t head = (size_t)(close - s);
    memcpy(t, s, head);
    snprintf(t + head, add + 1, ",\"ratio\":%s", num);
    memcpy(t + head + add, close, n - head + 1);
    free(s);
    return t;
}

/* {"v":2,"header":HEADER} (malloc'd), or NULL when header is not a JSON object (or out of memory). */
static char *header_line(const char *header) {
    json_error_t je;
    json_t *h = json_loadb(header, strlen(header), 0, &je);
    json_t *o = json_is_object(h) ? json_pack("{s:i,s:o}", "v", 2, "header", h) : (json_decref(h), NULL);
    char *s = o ? json_dumps(o, JSON_COMPACT) : NULL;
    json_decref(o);
    return s;
}

int hx_request_serialize_line(const hx_request *r, const hx_request *prev, const char *header, char **out,
                              size_t *n, char *err, size_t errlen) {
    *out = NULL;
    *n = 0;
    if (!r) {
        if (!header || !(*out = header_line(header))) {
            eng_errf(err, errlen, "the transcript header is not a JSON object");
            return ENG_ERR_FORMAT;
        }
        *n = strlen(*out);
        return ENG_OK;
    }
    json_t *o = request_to_json(r, prev, 2);
    char *s = o ? line_text(o) : NULL;
    json_decref(o);
    if (!s) {
        eng_errf(err, errlen, "request (session \"%s\", turn %d): cannot encode as JSON (invalid UTF-8 or out of "
                 "memory)", r->session ? r->session : "", r->turn);
        return ENG_ERR_FORMAT;
    }
    *out = s;
    *n = strlen(s);
    return ENG_OK;
}

int hx_transcript_serialize_version(const hx_transcript *t, int version, char **out, size_t *n, char *err,
                                    size_t errlen) {
    *out = NULL;
    *n = 0;
    if (version != 1 && version != 2) {
        eng_errf(err, errlen, "transcript format version %d is not 1 or 2", version);
        return ENG_ERR_ARG;
    }
    eng_buf b = {0};
    hx_strmap last = {0};
    int rc = ENG_OK;
    if (version == 2 && t->header) {
        char *s = header_line(t->header);
        if (!s) {
            eng_errf(err, errlen, "the transcript header is not a JSON object");
            return ENG_ERR_FORMAT;
        }
        rc = eng_buf_append(&b, s, strlen(s));
        free(s);
        if (rc || eng_buf_append(&b, "\n", 1)) {
            eng_buf_free(&b);
            return ENG_ERR_NOMEM;
        }
    }
    for (int32_t i = 0; i < t->n && !rc; i++) {
        const hx_request *r = &t->reqs[i];
        int64_t p = -1;
        if (!hx_strmap_get(&last, r->session ? r->session : "", &p)) p = -1;
        json_t *o = request_to_json(r, p >= 0 ? &t->reqs[p] : NULL, version);
        char *s = o ? line_text(o) : NULL;
        json_decref(o);
        if (!s) {
            eng_errf(err, errlen, "request %d (session \"%s\", turn %d): cannot encode as JSON "
                     "(invalid UTF-8 or out of memory)", i, r->session ? r->session : "", r->turn);
            rc = ENG_ERR_FORMAT;
            break;
        }
        rc = eng_buf_append(&b, s, strlen(s));
        free(s);
        if (rc || (rc = eng_buf_append(&b, "\n", 1)) || (rc = hx_strmap_put(&last, r->session ? r->session : "", i)))
            break;
    }
    hx_strmap_free(&last);
    if (rc) {
        eng_buf_free(&b);
        return rc;
    }
    if (!b.data && !(b.data = hx_strdup(""))) return ENG_ERR_NOMEM;
    *out = b.data;
    *n = b.len;
    return ENG_OK;
}

int hx_transcript_serialize(const hx_transcript *t, char **out, size_t *n, char *err, size_t errlen) {
    return hx_transcript_serialize_version(t, 2, out, n, err, errlen);
}

int hx_transcript_write_version(const char *path, const hx_transcript *t, int version, char *err, size_t errlen) {
    int rc = hx_output_check(path, err, errlen);
    if (rc) return rc;
    char *data;
    size_t n;
    if ((rc = hx_transcript_serialize_version(t, version, &data, &n, err, errlen))) return rc;
    rc = hx_write_atomic(path, data, n, err, errlen);
    free(data);
    return rc;
}

int hx_transcript_write(const char *path, const hx_transcript *t, char *err, size_t errlen) {
    return hx_transcript_write_version(path, t, 2, err, errlen);
}
