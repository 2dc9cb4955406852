/*
 * harness/transcripts/transcript_read.c: transcripts v1 and v2 read and
 * validated (docs/transcripts.md), and the JSON -> structure rules the
 * importers share.
 *
 * Each line is parsed with jansson (duplicate keys rejected), every field
 * checked against the v1 rules, and built into an hx_request that owns all
 * its strings; a v2 compact line is rebuilt from its session's previous
 * request, so every request in memory is whole, whichever version was read.
 * Invariants:
 *   - every error names "FILE:LINE: FIELD: what is wrong";
 *   - after a successful read, block texts are never NULL, tool_use inputs
 *     and tool schemas are canonical JSON, and turns increase per session.
 * Workload: files of thousands of lines, each up to a few MB (the whole
 * prompt of one call); the file is read whole, then parsed line by line.
 */
#include "transcript.h"

#include <jansson.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "errors.h"
#include "json.h"
#include "jsonl.h"
#include "status.h"
#include "str.h"
#include "util.h"

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
