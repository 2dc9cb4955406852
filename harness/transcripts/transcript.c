/*
 * harness/transcripts/transcript.c: transcript format v1: reading, validating, writing.
 *
 * A transcript is JSONL, one request per line (docs/transcripts.md). Reading
 * parses each line with jansson (duplicate keys rejected), checks every field
 * against the v1 rules and builds an hx_request that owns all its strings.
 * Writing emits one canonical line per request: compact JSON, keys in a
 * fixed documented order, tool inputs and schemas as canonical JSON (sorted
 * keys). Invariants:
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
    if (line > 0)
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
    memset(r, 0, sizeof *r);
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

/* Flattens a tool_result's content (string, null, or array of text/image
 * blocks) into one string joined by "\n". */
static int flatten_result(const json_t *c, const char *path, int64_t line, const char *field,
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
        rc = hx_block_from_json(json_array_get(c, i), path, line, f, &blk, err, errlen);
        if (rc != ENG_OK) break;
        if (blk.type != HX_BLOCK_TEXT && blk.type != HX_BLOCK_IMAGE) {
            hx_errf_at(err, errlen, path, line, f, "a tool_result may hold only text and image blocks, not %s",
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

int hx_block_from_json(const struct json_t *jc, const char *path, int64_t line, const char *field,
                       hx_block *out, char *err, size_t errlen) {
    const json_t *j = (const json_t *)jc;
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
        if ((rc = flatten_result(json_object_get(j, "content"), path, line, f, &text, err, errlen)))
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
    fieldf(f, "%s.type", field);
    hx_errf_at(err, errlen, path, line, f, "unknown block type \"%s\"", type);
    return ENG_ERR_FORMAT;
}

int hx_blocks_from_json(const struct json_t *jc, const char *path, int64_t line, const char *field,
                        hx_block **out, int32_t *n, char *err, size_t errlen) {
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
    size_t i;
    for (i = 0; i < m; i++) {
        fieldf(f, "%s[%zu]", field, i);
        if ((rc = hx_block_from_json(json_array_get(c, i), path, line, f, &bs[i], err, errlen))) break;
    }
    if (rc) {
        for (size_t k = 0; k < i; k++) hx_block_free(&bs[k]);
        free(bs);
        return rc;
    }
    *out = bs;
    *n = (int32_t)m;
    return ENG_OK;
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
// One v1 line -> hx_request

static const char *const k_top_keys[] = {"v", "session", "turn", "system", "tools", "messages",
                                         "response", "prompt", "tokens", "meta"};

int hx_request_parse(const char *json, size_t len, const char *path, int64_t line, hx_request *out,
                     char *err, size_t errlen) {
    memset(out, 0, sizeof *out);
    out->response.role = HX_ROLE_ASSISTANT;
    json_error_t je;
    json_t *j = json_loadb(json, len, JSON_REJECT_DUPLICATES, &je);
    if (!j) {
        hx_errf_at(err, errlen, path, line, NULL, "invalid JSON at column %d: %s", je.column, je.text);
        return ENG_ERR_FORMAT;
    }
    int rc = ENG_ERR_FORMAT;
    char f[FIELD_MAX];
    const char *key;
    json_t *v;
    if (!json_is_object(j)) {
        hx_errf_at(err, errlen, path, line, NULL, "a line must be a JSON object");
        goto out;
    }
    json_object_foreach(j, key, v) {
        bool known = false;
        for (size_t k = 0; k < sizeof k_top_keys / sizeof k_top_keys[0]; k++)
            if (!strcmp(key, k_top_keys[k])) known = true;
        if (!known) {
            hx_errf_at(err, errlen, path, line, key, "unknown field");
            goto out;
        }
    }
    v = json_object_get(j, "v");
    if (!json_is_integer(v) || json_integer_value(v) != 1) {
        if (!v) hx_errf_at(err, errlen, path, line, "v", "missing (expected 1)");
        else if (!json_is_integer(v)) hx_errf_at(err, errlen, path, line, "v", "expected the integer 1");
        else hx_errf_at(err, errlen, path, line, "v", "unsupported version %lld (expected 1)",
                        (long long)json_integer_value(v));
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
    out->line = line;

    json_t *jm = json_object_get(j, "messages");
    json_t *jp = json_object_get(j, "prompt");
    json_t *jt = json_object_get(j, "tokens");
    int kinds = (jm != NULL) + (jp != NULL) + (jt != NULL);
    if (kinds != 1) {
        hx_errf_at(err, errlen, path, line, "messages/prompt/tokens",
                   "a line needs exactly one of them (found %s)", kinds ? "more than one" : "none");
        goto out;
    }
    json_t *jr = json_object_get(j, "response");
    if (jm) {
        if (!json_is_array(jm)) {
            hx_errf_at(err, errlen, path, line, "messages", "expected an array of messages");
            goto out;
        }
        if ((rc = hx_system_from_json(json_object_get(j, "system"), path, line, "system", &out->system,
                                      &out->n_system, err, errlen)))
            goto out;
        if ((rc = hx_tools_from_json(json_object_get(j, "tools"), path, line, "tools", &out->tools,
                                     &out->n_tools, err, errlen)))
            goto out;
        rc = ENG_ERR_FORMAT;
        size_t m = json_array_size(jm);
        if (m > INT32_MAX / 2) {
            hx_errf_at(err, errlen, path, line, "messages", "too many messages");
            goto out;
        }
        if (m && !(out->messages = calloc(m, sizeof *out->messages))) { rc = ENG_ERR_NOMEM; goto out; }
        for (size_t i = 0; i < m; i++) {
            fieldf(f, "messages[%zu]", i);
            if ((rc = hx_message_from_json(json_array_get(jm, i), path, line, f, &out->messages[i], err, errlen)))
                goto out;
            out->n_messages = (int32_t)i + 1;
        }
        if (jr && !json_is_null(jr)) {
            const json_t *content = jr;
            if (json_is_object(jr)) {
                json_object_foreach(jr, key, v) {
                    if (strcmp(key, "content")) {
                        fieldf(f, "response.%s", key);
                        hx_errf_at(err, errlen, path, line, f, "unknown field");
                        rc = ENG_ERR_FORMAT;
                        goto out;
                    }
                }
                content = json_object_get(jr, "content");
            } else if (!json_is_string(jr)) {
                hx_errf_at(err, errlen, path, line, "response", "expected {\"content\": ...} or a string");
                rc = ENG_ERR_FORMAT;
                goto out;
            }
            if ((rc = hx_blocks_from_json(content, path, line, json_is_object(jr) ? "response.content" : "response",
                                          &out->response.blocks, &out->response.n_blocks, err, errlen)))
                goto out;
        }
    } else {
        if (json_object_get(j, "system") || json_object_get(j, "tools")) {
            hx_errf_at(err, errlen, path, line, json_object_get(j, "system") ? "system" : "tools",
                       "not allowed on a prompt or tokens line");
            goto out;
        }
        if (jr && !json_is_null(jr)) {
            if (!json_is_string(jr)) {
                hx_errf_at(err, errlen, path, line, "response", "a prompt or tokens line takes a string response");
                goto out;
            }
            if (!(out->response_text = hx_strdup(json_string_value(jr)))) { rc = ENG_ERR_NOMEM; goto out; }
        }
        if (jp) {
            if (!json_is_string(jp) || json_string_length(jp) == 0) {
                hx_errf_at(err, errlen, path, line, "prompt", json_is_string(jp) ? "empty" : "expected a string");
                goto out;
            }
            if (!(out->prompt = hx_strdup(json_string_value(jp)))) { rc = ENG_ERR_NOMEM; goto out; }
        } else {
            if (!json_is_array(jt) || json_array_size(jt) == 0 || json_array_size(jt) > INT32_MAX / 8) {
                hx_errf_at(err, errlen, path, line, "tokens",
                           json_is_array(jt) ? "expected a non-empty array of token ids" : "expected an array of token ids");
                goto out;
            }
            size_t m = json_array_size(jt);
            if (!(out->tokens = malloc(m * sizeof(int32_t)))) { rc = ENG_ERR_NOMEM; goto out; }
            for (size_t i = 0; i < m; i++) {
                json_t *t = json_array_get(jt, i);
                if (!json_is_integer(t) || json_integer_value(t) < 0 || json_integer_value(t) > INT32_MAX) {
                    fieldf(f, "tokens[%zu]", i);
                    hx_errf_at(err, errlen, path, line, f, "expected a token id in [0, 2147483647]");
                    goto out;
                }
                out->tokens[i] = (int32_t)json_integer_value(t);
            }
            out->n_tokens = (int32_t)m;
        }
    }
    rc = ENG_OK;
out:
    json_decref(j);
    if (rc != ENG_OK) hx_request_free(out);
    return rc;
}

// ----------------------------------------------------------------------------
// Whole files

int hx_transcript_parse(const char *data, size_t n, const char *path, bool skip_bad, hx_transcript *out,
                        int64_t *n_skipped, char *err, size_t errlen) {
    memset(out, 0, sizeof *out);
    if (n_skipped) *n_skipped = 0;
    hx_strmap last_turn = {0};
    int rc = ENG_OK;
    if (!(out->path = hx_strdup(path ? path : "-"))) return ENG_ERR_NOMEM;
    int64_t lineno = 0;
    size_t pos = 0;
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
        hx_request r;
        rc = hx_request_parse(s, l, out->path, lineno, &r, err, errlen);
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
        if (rc == ENG_ERR_FORMAT && skip_bad) {
            if (n_skipped) (*n_skipped)++;
            rc = ENG_OK;
            continue;
        }
        if (rc != ENG_OK) break;
        if ((rc = hx_strmap_put(&last_turn, r.session, r.turn)) || (rc = hx_transcript_push(out, &r))) {
            hx_request_free(&r);
            break;
        }
    }
    hx_strmap_free(&last_turn);
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

static json_t *request_to_json(const hx_request *r) {
    json_t *o = json_object();
    if (!o) return NULL;
    int bad = json_object_set_new(o, "v", json_integer(1));
    bad |= json_object_set_new(o, "session", json_string(r->session ? r->session : ""));
    bad |= json_object_set_new(o, "turn", json_integer(r->turn));
    hx_request_kind kind = hx_request_kind_of(r);
    if (kind == HX_REQUEST_MESSAGES) {
        if (r->n_system) bad |= json_object_set_new(o, "system", blocks_to_json(r->system, r->n_system));
        if (r->n_tools) {
            json_t *ta = json_array();
            for (int32_t i = 0; ta && i < r->n_tools; i++) {
                const hx_tool *t = &r->tools[i];
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
            bad |= json_object_set_new(o, "tools", ta);
        }
        json_t *ma = json_array();
        for (int32_t i = 0; ma && i < r->n_messages; i++) {
            json_t *mo = json_object();
            int b2 = !mo;
            if (mo) {
                b2 |= json_object_set_new(mo, "role", json_string(hx_role_name(r->messages[i].role)));
                b2 |= json_object_set_new(mo, "content", blocks_to_json(r->messages[i].blocks, r->messages[i].n_blocks));
            }
            if (b2 || json_array_append_new(ma, mo)) {
                if (!b2) mo = NULL;
                json_decref(mo);
                json_decref(ma);
                ma = NULL;
            }
        }
        bad |= json_object_set_new(o, "messages", ma);
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
    if (bad) {
        json_decref(o);
        return NULL;
    }
    return o;
}

int hx_transcript_serialize(const hx_transcript *t, char **out, size_t *n, char *err, size_t errlen) {
    *out = NULL;
    *n = 0;
    eng_buf b = {0};
    for (int32_t i = 0; i < t->n; i++) {
        json_t *o = request_to_json(&t->reqs[i]);
        char *s = o ? json_dumps(o, JSON_COMPACT) : NULL;
        json_decref(o);
        if (!s) {
            eng_errf(err, errlen, "request %d (session \"%s\", turn %d): cannot encode as JSON "
                     "(invalid UTF-8 or out of memory)", i, t->reqs[i].session ? t->reqs[i].session : "",
                     t->reqs[i].turn);
            eng_buf_free(&b);
            return ENG_ERR_FORMAT;
        }
        int rc = eng_buf_append(&b, s, strlen(s));
        free(s);
        if (rc || eng_buf_append(&b, "\n", 1)) {
            eng_buf_free(&b);
            return ENG_ERR_NOMEM;
        }
    }
    if (!b.data && !(b.data = hx_strdup(""))) return ENG_ERR_NOMEM;
    *out = b.data;
    *n = b.len;
    return ENG_OK;
}

int hx_transcript_write(const char *path, const hx_transcript *t, char *err, size_t errlen) {
    char *data;
    size_t n;
    int rc = hx_transcript_serialize(t, &data, &n, err, errlen);
    if (rc) return rc;
    rc = eng_write_atomic(path, data, n, err, errlen);
    free(data);
    return rc;
}
