/*
 * harness/import.c: anthropic, openai, claude-code and swe-agent logs ->
 * transcript v1 (rules in import.h and docs/transcripts.md).
 *
 * Each importer turns its input into hx_requests with the shared JSON rules
 * of transcript.c (blocks, messages, tools), then:
 *   - anthropic/openai group requests into sessions by a key (system prompt
 *     after anthropic-cch normalization + first non-system message) and take
 *     each request's response from the session's next request;
 *   - claude-code rebuilds each call's prompt by walking the parentUuid chain
 *     back from the call's first line (bookkeeping lines are transparent),
 *     merging the assistant lines of one requestId into one message;
 *   - swe-agent makes one request per assistant message of history[].
 * Invariants: output requests are in input order; turns count from 0 per
 * session; nothing in the input can make an importer crash or loop (chains
 * are walked at most n_lines steps).
 */
#include "import.h"

#include <jansson.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "normalize.h"
#include "status.h"
#include "synth_transcript.h"
#include "util.h"

#define FIELD_MAX 320

/* Formats a JSON field path (e.g. "messages[3].content") into out (FIELD_MAX bytes). */
static void fieldf(char *out, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void fieldf(char *out, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(out, FIELD_MAX, fmt, ap);
    va_end(ap);
}

static const char *const k_format_names[] = {"anthropic", "openai", "claude-code", "swe-agent"};

int hx_import_format_from_name(const char *name) {
    for (int i = 0; name && i < 4; i++)
        if (!strcmp(name, k_format_names[i])) return i;
    return ENG_ERR_NOT_FOUND;
}

const char *hx_import_format_name(hx_import_format f) {
    return ((int)f >= 0 && (int)f < 4) ? k_format_names[f] : "?";
}

// ----------------------------------------------------------------------------
// Small helpers: lines, JSON, session names

/* Next non-blank line of data: [*s, *s + *len) without "\r\n"; false at the end. */
static bool next_line(const char *data, size_t n, size_t *pos, int64_t *lineno, const char **s, size_t *len) {
    while (*pos < n) {
        const char *p = data + *pos;
        const char *nl = memchr(p, '\n', n - *pos);
        size_t l = nl ? (size_t)(nl - p) : n - *pos;
        *pos += l + (nl ? 1 : 0);
        (*lineno)++;
        if (l > 0 && p[l - 1] == '\r') l--;
        bool blank = true;
        for (size_t i = 0; i < l && blank; i++)
            if (p[i] != ' ' && p[i] != '\t') blank = false;
        if (blank) continue;
        *s = p;
        *len = l;
        return true;
    }
    return false;
}

static json_t *load_line(const char *s, size_t len, const char *path, int64_t line, char *err, size_t errlen) {
    json_error_t je;
    json_t *j = json_loadb(s, len, JSON_REJECT_DUPLICATES, &je);
    if (!j) {
        hx_errf_at(err, errlen, path, line, NULL, "invalid JSON at column %d: %s", je.column, je.text);
        return NULL;
    }
    if (!json_is_object(j)) {
        hx_errf_at(err, errlen, path, line, NULL, "expected a JSON object");
        json_decref(j);
        return NULL;
    }
    return j;
}

/* The file name of path without directories and without its last extension. */
static void base_name(const char *path, char *out, size_t n) {
    const char *b = strrchr(path ? path : "", '/');
    b = b ? b + 1 : (path ? path : "");
    snprintf(out, n, "%s", *b ? b : "import");
    char *dot = strrchr(out, '.');
    if (dot && dot != out) *dot = '\0';
}

static void free_blocks(hx_block *b, int32_t n) {
    for (int32_t i = 0; i < n; i++) hx_block_free(&b[i]);
    free(b);
}

static void free_tools(hx_tool *t, int32_t n) {
    for (int32_t i = 0; i < n; i++) hx_tool_free(&t[i]);
    free(t);
}

static int push_msg(hx_request *q, hx_message *m) {
    hx_message *nm = realloc(q->messages, (size_t)(q->n_messages + 1) * sizeof *nm);
    if (!nm) return ENG_ERR_NOMEM;
    q->messages = nm;
    nm[q->n_messages++] = *m;
    memset(m, 0, sizeof *m);
    return ENG_OK;
}

/* Appends copies of src's blocks to dst. */
static int append_blocks(hx_message *dst, const hx_message *src) {
    for (int32_t i = 0; i < src->n_blocks; i++) {
        hx_block b;
        if (hx_block_copy(&b, &src->blocks[i])) return ENG_ERR_NOMEM;
        if (hx_message_push_block(dst, &b)) {
            hx_block_free(&b);
            return ENG_ERR_NOMEM;
        }
    }
    return ENG_OK;
}

// ----------------------------------------------------------------------------
// Sessions by key, responses from the next request (anthropic, openai)

static void key_block(eng_buf *k, const hx_block *b, int *rc) {
    char *t = hx_strdup(b->text);
    if (!t) { *rc = ENG_ERR_NOMEM; return; }
    if (hx_normalize_cch_text(&t, 0) < 0) *rc = ENG_ERR_NOMEM;
    if (eng_buf_printf(k, "%d\x1f%s\x1f%s\x1f%s\x1f%s\x1f%d\x1e", (int)b->type, t, b->id ? b->id : "",
                       b->name ? b->name : "", b->input ? b->input : "", (int)b->is_error))
        *rc = ENG_ERR_NOMEM;
    free(t);
}

/* The session key of q: normalized system blocks + the first non-system message. */
static char *session_key(const hx_request *q) {
    eng_buf k = {0};
    int rc = ENG_OK;
    for (int32_t i = 0; i < q->n_system; i++) key_block(&k, &q->system[i], &rc);
    if (eng_buf_append(&k, "\x1d", 1)) rc = ENG_ERR_NOMEM;
    for (int32_t m = 0; m < q->n_messages; m++) {
        if (q->messages[m].role == HX_ROLE_SYSTEM) continue;
        if (eng_buf_printf(&k, "%d\x1d", (int)q->messages[m].role)) rc = ENG_ERR_NOMEM;
        for (int32_t b = 0; b < q->messages[m].n_blocks; b++) key_block(&k, &q->messages[m].blocks[b], &rc);
        break;
    }
    if (rc) {
        eng_buf_free(&k);
        return NULL;
    }
    return k.data;
}

typedef struct linker {
    hx_strmap keys;      /* session key -> session index */
    int32_t  *last;      /* (n) index in out->reqs of each session's latest request */
    int32_t  *turns;     /* (n) next turn of each session */
    int32_t   n;
} linker;

static void linker_free(linker *L) {
    hx_strmap_free(&L->keys);
    free(L->last);
    free(L->turns);
    memset(L, 0, sizeof *L);
}

static bool extends(const hx_request *prev, const hx_request *next) {
    if (next->n_messages <= prev->n_messages) return false;
    for (int32_t i = 0; i < prev->n_messages; i++)
        if (!hx_message_equal(&prev->messages[i], &next->messages[i])) return false;
    return next->messages[prev->n_messages].role == HX_ROLE_ASSISTANT;
}

/* Assigns q a session and turn, links the previous request's response, and
 * pushes q onto out (taking it). */
static int link_push(linker *L, hx_transcript *out, hx_request *q, const char *prefix) {
    char *key = session_key(q);
    if (!key) return ENG_ERR_NOMEM;
    int64_t s;
    int rc = ENG_OK;
    if (!hx_strmap_get(&L->keys, key, &s)) {
        int32_t *nl = realloc(L->last, (size_t)(L->n + 1) * sizeof *nl);
        if (nl) L->last = nl;
        int32_t *nt = realloc(L->turns, (size_t)(L->n + 1) * sizeof *nt);
        if (nt) L->turns = nt;
        if (!nl || !nt || hx_strmap_put(&L->keys, key, L->n)) {
            free(key);
            return ENG_ERR_NOMEM;
        }
        s = L->n++;
        L->last[s] = -1;
        L->turns[s] = 0;
    }
    free(key);
    char name[512];
    snprintf(name, sizeof name, "%s-%lld", prefix, (long long)s);
    free(q->session);
    if (!(q->session = hx_strdup(name))) return ENG_ERR_NOMEM;
    q->turn = L->turns[s]++;
    if (L->last[s] >= 0) {
        hx_request *prev = &out->reqs[L->last[s]];
        if (extends(prev, q)) {
            hx_message_free(&prev->response);
            if ((rc = hx_message_copy(&prev->response, &q->messages[prev->n_messages]))) return rc;
        }
    }
    if ((rc = hx_transcript_push(out, q))) return rc;
    L->last[s] = out->n - 1;
    return ENG_OK;
}

// ----------------------------------------------------------------------------
// anthropic: Messages API request bodies

static int anthropic_request(json_t *j, const char *path, int64_t line, hx_request *q, char *err, size_t errlen) {
    memset(q, 0, sizeof *q);
    q->response.role = HX_ROLE_ASSISTANT;
    q->line = line;
    char f[FIELD_MAX];
    int rc;
    json_t *msgs = json_object_get(j, "messages");
    if (!json_is_array(msgs)) {
        hx_errf_at(err, errlen, path, line, "messages", msgs ? "expected an array" : "missing");
        return ENG_ERR_FORMAT;
    }
    if ((rc = hx_system_from_json(json_object_get(j, "system"), path, line, "system", &q->system, &q->n_system, err, errlen)) ||
        (rc = hx_tools_from_json(json_object_get(j, "tools"), path, line, "tools", &q->tools, &q->n_tools, err, errlen)))
        goto fail;
    for (size_t i = 0; i < json_array_size(msgs); i++) {
        hx_message m;
        fieldf(f, "messages[%zu]", i);
        if ((rc = hx_message_from_json(json_array_get(msgs, i), path, line, f, &m, err, errlen))) goto fail;
        if ((rc = push_msg(q, &m))) {
            hx_message_free(&m);
            goto fail;
        }
    }
    return ENG_OK;
fail:
    hx_request_free(q);
    return rc;
}

// ----------------------------------------------------------------------------
// openai: chat-completions request bodies (and SWE-agent history entries)

/* content: string, null or an array of parts -> blocks appended to m. */
static int oa_content(const json_t *c, const char *path, int64_t line, const char *field, hx_message *m,
                      bool skip_empty, char *err, size_t errlen) {
    char f[FIELD_MAX];
    hx_block b;
    if (!c || json_is_null(c)) return ENG_OK;
    if (json_is_string(c)) {
        if (skip_empty && json_string_length(c) == 0) return ENG_OK;
        if (hx_block_init(&b, HX_BLOCK_TEXT, json_string_value(c), NULL, NULL, NULL, false)) return ENG_ERR_NOMEM;
        goto push;
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
                char g[FIELD_MAX];
                fieldf(g, "%s.%s", f, type);
                hx_errf_at(err, errlen, path, line, g, t ? "expected a string" : "missing");
                return ENG_ERR_FORMAT;
            }
            if (hx_block_init(&b, HX_BLOCK_TEXT, json_string_value(t), NULL, NULL, NULL, false)) return ENG_ERR_NOMEM;
        } else {
            if (!strcmp(type, "image_url") || !strcmp(type, "image")) ph = "[image]";
            else if (!strcmp(type, "input_audio")) ph = "[audio]";
            else if (!strcmp(type, "file")) ph = "[file]";
            else {
                char g[FIELD_MAX];
                fieldf(g, "%s.type", f);
                hx_errf_at(err, errlen, path, line, g, "unknown content part type \"%s\"", type);
                return ENG_ERR_FORMAT;
            }
            if (hx_block_init(&b, HX_BLOCK_IMAGE, ph, NULL, NULL, NULL, false)) return ENG_ERR_NOMEM;
        }
        if (hx_message_push_block(m, &b)) {
            hx_block_free(&b);
            return ENG_ERR_NOMEM;
        }
    }
    return ENG_OK;
push:
    if (hx_message_push_block(m, &b)) {
        hx_block_free(&b);
        return ENG_ERR_NOMEM;
    }
    return ENG_OK;
}

/* Flattens content (string, null, parts) into one string. */
static int oa_flat(const json_t *c, const char *path, int64_t line, const char *field, char **out, char *err, size_t errlen) {
    hx_message m = {0};
    *out = NULL;
    int rc = oa_content(c, path, line, field, &m, false, err, errlen);
    if (rc) return rc;
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

/* One OpenAI-style message -> *m. *is_system is set for system/developer. */
static int oa_message(const json_t *j, const char *path, int64_t line, const char *field, hx_message *m,
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
    fieldf(f, "%s.content", field);
    const json_t *content = json_object_get(j, "content");
    if (!role) {
        fieldf(f, "%s.role", field);
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
            if (hx_message_push_block(m, &b)) {
                hx_block_free(&b);
                return ENG_ERR_NOMEM;
            }
        }
        const json_t *calls = json_object_get(j, "tool_calls");
        if (!rc) rc = oa_content(content, path, line, f, m, json_array_size(calls) > 0, err, errlen);
        if (!rc && calls && !json_is_null(calls)) {
            if (!json_is_array(calls)) {
                fieldf(f, "%s.tool_calls", field);
                hx_errf_at(err, errlen, path, line, f, "expected an array");
                rc = ENG_ERR_FORMAT;
            }
            for (size_t i = 0; !rc && i < json_array_size(calls); i++) {
                const json_t *c = json_array_get(calls, i);
                const json_t *fn = json_is_object(c) ? json_object_get(c, "function") : NULL;
                const char *id = json_is_object(c) ? json_string_value(json_object_get(c, "id")) : NULL;
                const char *name = json_is_object(fn) ? json_string_value(json_object_get(fn, "name")) : NULL;
                const json_t *args = json_is_object(fn) ? json_object_get(fn, "arguments") : NULL;
                fieldf(f, "%s.tool_calls[%zu]", field, i);
                if (!id || !name) {
                    char g[FIELD_MAX];
                    fieldf(g, "%s.%s", f, !json_is_object(c) ? "" : !id ? "id" : "function.name");
                    if (!json_is_object(c)) fieldf(g, "%s", f);
                    hx_errf_at(err, errlen, path, line, g, !json_is_object(c) ? "expected a tool call object" : "missing or not a string");
                    rc = ENG_ERR_FORMAT;
                    break;
                }
                char *input = NULL;
                if (json_is_object(args)) input = hx_json_canonical(args);
                else if (!args || json_is_null(args) || (json_is_string(args) && json_string_length(args) == 0)) input = hx_strdup("{}");
                else if (json_is_string(args)) {
                    json_error_t je;
                    json_t *a = json_loadb(json_string_value(args), json_string_length(args), JSON_REJECT_DUPLICATES, &je);
                    if (json_is_object(a)) input = hx_json_canonical(a);
                    json_decref(a);
                    if (!input) {
                        char g[FIELD_MAX];
                        fieldf(g, "%s.function.arguments", f);
                        hx_errf_at(err, errlen, path, line, g, "not a JSON object");
                        rc = ENG_ERR_FORMAT;
                        break;
                    }
                } else {
                    char g[FIELD_MAX];
                    fieldf(g, "%s.function.arguments", f);
                    hx_errf_at(err, errlen, path, line, g, "expected a JSON object or a string holding one");
                    rc = ENG_ERR_FORMAT;
                    break;
                }
                hx_block b;
                if (!input || hx_block_init(&b, HX_BLOCK_TOOL_USE, "", id, name, input, false)) rc = ENG_ERR_NOMEM;
                else if (hx_message_push_block(m, &b)) {
                    hx_block_free(&b);
                    rc = ENG_ERR_NOMEM;
                }
                free(input);
            }
        }
    } else if (!strcmp(role, "tool")) {
        m->role = HX_ROLE_TOOL;
        const char *id = json_string_value(json_object_get(j, "tool_call_id"));
        const json_t *ids = json_object_get(j, "tool_call_ids"); /* SWE-agent */
        if (!id && json_is_array(ids)) id = json_string_value(json_array_get(ids, 0));
        if (!id) {
            fieldf(f, "%s.tool_call_id", field);
            hx_errf_at(err, errlen, path, line, f, "missing or not a string");
            return ENG_ERR_FORMAT;
        }
        char *text = NULL;
        fieldf(f, "%s.content", field);
        if ((rc = oa_flat(content, path, line, f, &text, err, errlen))) return rc;
        hx_block b;
        rc = hx_block_init(&b, HX_BLOCK_TOOL_RESULT, text, id, NULL, NULL, false);
        free(text);
        if (!rc && (rc = hx_message_push_block(m, &b))) hx_block_free(&b);
    } else {
        fieldf(f, "%s.role", field);
        hx_errf_at(err, errlen, path, line, f, "unknown role \"%s\" (expected system, developer, user, assistant or tool)", role);
        return ENG_ERR_FORMAT;
    }
    if (rc) hx_message_free(m);
    return rc;
}

/* Leading system messages become system blocks (appended to q->system). */
static int system_to_blocks(hx_request *q, hx_message *m) {
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

static int openai_request(json_t *j, const char *path, int64_t line, hx_request *q, char *err, size_t errlen) {
    memset(q, 0, sizeof *q);
    q->response.role = HX_ROLE_ASSISTANT;
    q->line = line;
    char f[FIELD_MAX];
    int rc;
    json_t *msgs = json_object_get(j, "messages");
    if (!json_is_array(msgs)) {
        hx_errf_at(err, errlen, path, line, "messages", msgs ? "expected an array" : "missing");
        return ENG_ERR_FORMAT;
    }
    if ((rc = hx_tools_from_json(json_object_get(j, "tools"), path, line, "tools", &q->tools, &q->n_tools, err, errlen)))
        goto fail;
    for (size_t i = 0; i < json_array_size(msgs); i++) {
        hx_message m;
        bool sys;
        fieldf(f, "messages[%zu]", i);
        if ((rc = oa_message(json_array_get(msgs, i), path, line, f, &m, &sys, err, errlen))) goto fail;
        rc = (sys && q->n_messages == 0) ? system_to_blocks(q, &m) : push_msg(q, &m);
        if (rc) {
            hx_message_free(&m);
            goto fail;
        }
    }
    return ENG_OK;
fail:
    hx_request_free(q);
    return rc;
}

/* anthropic and openai: one request per line, then sessions and responses. */
static int import_bodies(const hx_import_opts *o, const char *path, const char *data, size_t n, hx_transcript *out,
                         int64_t *n_skipped, char *err, size_t errlen) {
    char prefix[256];
    if (o->session) snprintf(prefix, sizeof prefix, "%s", o->session);
    else base_name(path, prefix, sizeof prefix);
    linker L = {0};
    size_t pos = 0;
    int64_t lineno = 0;
    const char *s;
    size_t len;
    int rc = ENG_OK;
    while (next_line(data, n, &pos, &lineno, &s, &len)) {
        json_t *j = load_line(s, len, path, lineno, err, errlen);
        hx_request q;
        rc = ENG_ERR_FORMAT;
        if (j) {
            rc = o->format == HX_IMPORT_ANTHROPIC ? anthropic_request(j, path, lineno, &q, err, errlen)
                                                   : openai_request(j, path, lineno, &q, err, errlen);
            json_decref(j);
        }
        if (rc == ENG_ERR_FORMAT && o->skip_bad) {
            (*n_skipped)++;
            rc = ENG_OK;
            continue;
        }
        if (rc) break;
        if ((rc = link_push(&L, out, &q, prefix))) {
            hx_request_free(&q);
            break;
        }
    }
    linker_free(&L);
    return rc;
}

// ----------------------------------------------------------------------------
// swe-agent: *.traj, history[] of OpenAI-style messages

static int import_swe(const hx_import_opts *o, const char *path, const char *data, size_t n, hx_transcript *out,
                      int64_t *n_skipped, char *err, size_t errlen) {
    json_error_t je;
    json_t *root = json_loadb(data, n, JSON_REJECT_DUPLICATES, &je);
    if (!root) {
        hx_errf_at(err, errlen, path, je.line, NULL, "invalid JSON at column %d: %s", je.column, je.text);
        return ENG_ERR_FORMAT;
    }
    char name[256];
    if (o->session) snprintf(name, sizeof name, "%s", o->session);
    else base_name(path, name, sizeof name);
    json_t *hist = json_object_get(root, "history");
    int rc = ENG_ERR_FORMAT;
    hx_request conv = {0};  /* the conversation so far (system blocks + messages) */
    conv.response.role = HX_ROLE_ASSISTANT;
    if (!json_is_object(root) || !json_is_array(hist)) {
        hx_errf_at(err, errlen, path, 0, "history", !json_is_object(root) ? "the file must be a JSON object" :
                   hist ? "expected an array" : "missing");
        goto out;
    }
    int32_t turn = 0;
    char f[FIELD_MAX];
    for (size_t i = 0; i < json_array_size(hist); i++) {
        hx_message m;
        bool sys;
        fieldf(f, "history[%zu]", i);
        rc = oa_message(json_array_get(hist, i), path, 0, f, &m, &sys, err, errlen);
        if (rc == ENG_ERR_FORMAT && o->skip_bad) {
            (*n_skipped)++;
            continue;
        }
        if (rc) goto out;
        if (m.role == HX_ROLE_ASSISTANT) { /* one model call: the history before it is the prompt */
            hx_request q;
            if ((rc = hx_request_copy(&q, &conv))) {
                hx_message_free(&m);
                goto out;
            }
            free(q.session);
            q.session = hx_strdup(name);
            q.turn = turn++;
            q.line = 0;
            if (!q.session || (rc = hx_message_copy(&q.response, &m)) || (rc = hx_transcript_push(out, &q))) {
                hx_request_free(&q);
                hx_message_free(&m);
                rc = rc ? rc : ENG_ERR_NOMEM;
                goto out;
            }
        }
        rc = (sys && conv.n_messages == 0) ? system_to_blocks(&conv, &m) : push_msg(&conv, &m);
        if (rc) {
            hx_message_free(&m);
            goto out;
        }
    }
    rc = ENG_OK;
out:
    hx_request_free(&conv);
    json_decref(root);
    return rc;
}

// ----------------------------------------------------------------------------
// claude-code: session logs chained by parentUuid

enum { CC_OTHER = 0, CC_USER = 1, CC_ASSISTANT = 2 };

typedef struct cc_line {
    int64_t    lineno;
    int        kind;
    bool       sidechain;
    bool       dup;         /* a later line with an already seen uuid: ignored */
    char      *uuid;        /* NULL when absent */
    char      *parent;      /* NULL for a chain root */
    char      *session_id;  /* conversation lines */
    char      *req;         /* assistant lines: requestId, else message.id, else "line-N" */
    hx_message msg;
} cc_line;

static void cc_line_free(cc_line *l) {
    free(l->uuid);
    free(l->parent);
    free(l->session_id);
    free(l->req);
    hx_message_free(&l->msg);
}

static int cc_parse_line(json_t *j, const char *path, int64_t line, cc_line *l, char *err, size_t errlen) {
    memset(l, 0, sizeof *l);
    l->lineno = line;
    const char *type = json_string_value(json_object_get(j, "type"));
    const json_t *ju = json_object_get(j, "uuid"), *jp = json_object_get(j, "parentUuid");
    if (!type || (strcmp(type, "user") && strcmp(type, "assistant"))) {
        /* bookkeeping: kept only as a transparent link of the chain */
        if (json_is_string(ju) && !(l->uuid = hx_strdup(json_string_value(ju)))) return ENG_ERR_NOMEM;
        if (json_is_string(jp) && !(l->parent = hx_strdup(json_string_value(jp)))) return ENG_ERR_NOMEM;
        return ENG_OK;
    }
    l->kind = type[0] == 'u' ? CC_USER : CC_ASSISTANT;
    int rc = ENG_ERR_FORMAT;
    if (!json_is_string(ju)) {
        hx_errf_at(err, errlen, path, line, "uuid", ju ? "expected a string" : "missing");
        goto fail;
    }
    if (jp && !json_is_null(jp) && !json_is_string(jp)) {
        hx_errf_at(err, errlen, path, line, "parentUuid", "expected a string or null");
        goto fail;
    }
    const json_t *sc = json_object_get(j, "isSidechain");
    if (sc && !json_is_boolean(sc)) {
        hx_errf_at(err, errlen, path, line, "isSidechain", "expected true or false");
        goto fail;
    }
    l->sidechain = json_is_true(sc);
    const json_t *sid = json_object_get(j, "sessionId");
    if (sid && !json_is_string(sid)) {
        hx_errf_at(err, errlen, path, line, "sessionId", "expected a string");
        goto fail;
    }
    const json_t *msg = json_object_get(j, "message");
    if (!json_is_object(msg)) {
        hx_errf_at(err, errlen, path, line, "message", msg ? "expected an object" : "missing");
        goto fail;
    }
    const char *role = json_string_value(json_object_get(msg, "role"));
    if (!role || strcmp(role, type)) {
        hx_errf_at(err, errlen, path, line, "message.role", "expected \"%s\" (the line's type)", type);
        goto fail;
    }
    l->msg.role = l->kind == CC_USER ? HX_ROLE_USER : HX_ROLE_ASSISTANT;
    if ((rc = hx_blocks_from_json(json_object_get(msg, "content"), path, line, "message.content", &l->msg.blocks,
                                  &l->msg.n_blocks, err, errlen)))
        goto fail;
    rc = ENG_ERR_NOMEM;
    if (!(l->uuid = hx_strdup(json_string_value(ju)))) goto fail;
    if (json_is_string(jp) && !(l->parent = hx_strdup(json_string_value(jp)))) goto fail;
    if (!(l->session_id = hx_strdup(sid ? json_string_value(sid) : "claude-code"))) goto fail;
    if (l->kind == CC_ASSISTANT) {
        const char *rid = json_string_value(json_object_get(j, "requestId"));
        const char *mid = json_string_value(json_object_get(msg, "id"));
        char tmp[40];
        snprintf(tmp, sizeof tmp, "line-%lld", (long long)line);
        if (!(l->req = hx_strdup(rid ? rid : mid ? mid : tmp))) goto fail;
    }
    return ENG_OK;
fail:
    cc_line_free(l);
    memset(l, 0, sizeof *l);
    return rc;
}

typedef struct cc_group {
    int32_t *lines;  /* (n) indices of the assistant lines, in file order */
    int32_t  n;
} cc_group;

/* The stand-in (or override) system prompt and tools for one request. */
typedef struct standin {
    hx_block *system;
    int32_t   n_system;
    hx_tool  *tools;
    int32_t   n_tools;
    bool      billing;  /* system[0] is the stand-in billing header (per-request cch) */
} standin;

static void standin_free(standin *s) {
    free_blocks(s->system, s->n_system);
    free_tools(s->tools, s->n_tools);
    memset(s, 0, sizeof *s);
}

static int standin_apply(const standin *s, hx_request *q, const char *req_id) {
    if (s->n_system) {
        if (!(q->system = calloc((size_t)s->n_system, sizeof *q->system))) return ENG_ERR_NOMEM;
        for (int32_t i = 0; i < s->n_system; i++, q->n_system++)
            if (hx_block_copy(&q->system[i], &s->system[i])) return ENG_ERR_NOMEM;
        if (s->billing && req_id) {
            char text[128];
            uint64_t h = XXH3_64bits(req_id, strlen(req_id));
            snprintf(text, sizeof text, "x-anthropic-billing-header: cc_version=2.1.101.e51; cc_entrypoint=cli; cch=%05llx;",
                     (unsigned long long)(h >> 44));
            free(q->system[0].text);
            if (!(q->system[0].text = hx_strdup(text))) return ENG_ERR_NOMEM;
        }
    }
    if (s->n_tools) {
        if (!(q->tools = calloc((size_t)s->n_tools, sizeof *q->tools))) return ENG_ERR_NOMEM;
        for (int32_t i = 0; i < s->n_tools; i++, q->n_tools++)
            if (hx_tool_copy(&q->tools[i], &s->tools[i])) return ENG_ERR_NOMEM;
    }
    return ENG_OK;
}

/* Builds the request of group g (prompt from the chain, response from the group). */
static int cc_request(const cc_line *L, int32_t n_lines, const hx_strmap *by_uuid, const cc_group *g, const char *path,
                      hx_request *q, int32_t *chain, char *err, size_t errlen) {
    memset(q, 0, sizeof *q);
    q->response.role = HX_ROLE_ASSISTANT;
    const cc_line *f = &L[g->lines[0]];
    q->line = f->lineno;
    /* walk back from the first line's parent */
    int32_t n_chain = 0;
    const char *cur = f->parent;
    while (cur) {
        int64_t idx;
        if (!hx_strmap_get(by_uuid, cur, &idx)) break; /* a parent outside this file: the chain starts here */
        if (n_chain >= n_lines) {
            hx_errf_at(err, errlen, path, f->lineno, "parentUuid", "the parentUuid chain loops");
            return ENG_ERR_FORMAT;
        }
        chain[n_chain++] = (int32_t)idx;
        cur = L[idx].parent;
    }
    /* replay it forwards: merge assistant lines per request id, consecutive user lines */
    const char **keys = NULL;  /* (n_messages) request id of each assistant message, else NULL */
    int rc = ENG_OK;
    for (int32_t c = n_chain - 1; c >= 0 && !rc; c--) {
        const cc_line *l = &L[chain[c]];
        if (l->kind == CC_OTHER || l->dup) continue;
        int32_t target = -1;
        if (l->kind == CC_ASSISTANT) {
            for (int32_t m = q->n_messages - 1; m >= 0 && target < 0; m--)
                if (keys[m] && !strcmp(keys[m], l->req)) target = m;
        } else if (q->n_messages > 0 && q->messages[q->n_messages - 1].role == HX_ROLE_USER) {
            target = q->n_messages - 1;
        }
        if (target < 0) {
            const char **nk = realloc(keys, (size_t)(q->n_messages + 1) * sizeof *nk);
            if (!nk) { rc = ENG_ERR_NOMEM; break; }
            keys = nk;
            hx_message m = {l->msg.role, NULL, 0};
            if ((rc = push_msg(q, &m))) break;
            keys[q->n_messages - 1] = l->kind == CC_ASSISTANT ? l->req : NULL;
            target = q->n_messages - 1;
        }
        rc = append_blocks(&q->messages[target], &l->msg);
    }
    free(keys);
    for (int32_t i = 0; i < g->n && !rc; i++) rc = append_blocks(&q->response, &L[g->lines[i]].msg);
    if (rc) hx_request_free(q);
    return rc;
}

static int load_overrides(const hx_import_opts *o, standin *s, char *err, size_t errlen);

static int import_claude_code(const hx_import_opts *o, const char *path, const char *data, size_t n, hx_transcript *out,
                              int64_t *n_skipped, const standin *si, char *err, size_t errlen) {
    cc_line *L = NULL;
    int32_t n_lines = 0, cap = 0;
    hx_strmap by_uuid = {0}, by_req = {0}, side_roots = {0}, turns = {0};
    cc_group *groups = NULL;
    int32_t n_groups = 0;
    int32_t *chain = NULL;
    int rc = ENG_OK;
    size_t pos = 0;
    int64_t lineno = 0;
    const char *s;
    size_t len;
    /* 1. parse every line */
    while (next_line(data, n, &pos, &lineno, &s, &len)) {
        if (n_lines == INT32_MAX - 1) { rc = ENG_ERR_RANGE; goto out; }
        json_t *j = load_line(s, len, path, lineno, err, errlen);
        cc_line l;
        rc = ENG_ERR_FORMAT;
        if (j) {
            rc = cc_parse_line(j, path, lineno, &l, err, errlen);
            json_decref(j);
        }
        if (rc == ENG_ERR_FORMAT && o->skip_bad) {
            (*n_skipped)++;
            rc = ENG_OK;
            continue;
        }
        if (rc) goto out;
        if (n_lines == cap) {
            int32_t ncap = cap ? cap * 2 : 64;
            cc_line *nl = realloc(L, (size_t)ncap * sizeof *nl);
            if (!nl) { cc_line_free(&l); rc = ENG_ERR_NOMEM; goto out; }
            L = nl;
            cap = ncap;
        }
        L[n_lines] = l;
        if (l.uuid) {
            if (hx_strmap_get(&by_uuid, l.uuid, NULL)) L[n_lines].dup = true;
            else if ((rc = hx_strmap_put(&by_uuid, l.uuid, n_lines))) { n_lines++; goto out; }
        }
        n_lines++;
    }
    /* 2. group the assistant lines by request id, in order of first appearance */
    for (int32_t i = 0; i < n_lines; i++) {
        if (L[i].kind != CC_ASSISTANT || L[i].dup) continue;
        int64_t g;
        if (!hx_strmap_get(&by_req, L[i].req, &g)) {
            cc_group *ng = realloc(groups, (size_t)(n_groups + 1) * sizeof *ng);
            if (!ng) { rc = ENG_ERR_NOMEM; goto out; }
            groups = ng;
            groups[n_groups] = (cc_group){NULL, 0};
            g = n_groups++;
            if ((rc = hx_strmap_put(&by_req, L[i].req, g))) goto out;
        }
        int32_t *nl = realloc(groups[g].lines, (size_t)(groups[g].n + 1) * sizeof *nl);
        if (!nl) { rc = ENG_ERR_NOMEM; goto out; }
        groups[g].lines = nl;
        groups[g].lines[groups[g].n++] = i;
    }
    if (!(chain = malloc((size_t)(n_lines ? n_lines : 1) * sizeof *chain))) { rc = ENG_ERR_NOMEM; goto out; }
    /* 3. one request per group */
    for (int32_t g = 0; g < n_groups; g++) {
        hx_request q;
        rc = cc_request(L, n_lines, &by_uuid, &groups[g], path, &q, chain, err, errlen);
        if (rc == ENG_ERR_FORMAT && o->skip_bad) {
            (*n_skipped)++;
            rc = ENG_OK;
            continue;
        }
        if (rc) goto out;
        const cc_line *f = &L[groups[g].lines[0]];
        char name[600];
        const char *main_name = o->session ? o->session : f->session_id;
        if (f->sidechain) {
            /* the sidechain's root: climb while the parent is a sidechain line */
            const cc_line *root = f;
            for (int32_t steps = 0; root->parent && steps < n_lines; steps++) {
                int64_t idx;
                if (!hx_strmap_get(&by_uuid, root->parent, &idx) || !L[idx].sidechain) break;
                root = &L[idx];
            }
            int64_t k;
            if (!hx_strmap_get(&side_roots, root->uuid, &k)) {
                k = (int64_t)side_roots.n;
                if ((rc = hx_strmap_put(&side_roots, root->uuid, k))) { hx_request_free(&q); goto out; }
            }
            snprintf(name, sizeof name, "%.500s/sidechain-%lld", main_name, (long long)k);
        } else {
            snprintf(name, sizeof name, "%.500s", main_name);
        }
        int64_t t = 0;
        hx_strmap_get(&turns, name, &t);
        q.turn = (int32_t)t;
        if ((rc = hx_strmap_put(&turns, name, t + 1)) || !(q.session = hx_strdup(name)) ||
            (rc = standin_apply(si, &q, f->req)) || (rc = hx_transcript_push(out, &q))) {
            hx_request_free(&q);
            rc = rc ? rc : ENG_ERR_NOMEM;
            goto out;
        }
    }
    rc = ENG_OK;
out:
    for (int32_t i = 0; i < n_lines; i++) cc_line_free(&L[i]);
    free(L);
    for (int32_t g = 0; g < n_groups; g++) free(groups[g].lines);
    free(groups);
    free(chain);
    hx_strmap_free(&by_uuid);
    hx_strmap_free(&by_req);
    hx_strmap_free(&side_roots);
    hx_strmap_free(&turns);
    return rc;
}

// ----------------------------------------------------------------------------
// Overrides (--system-file, --tools-file) and entry points

static int load_overrides(const hx_import_opts *o, standin *s, char *err, size_t errlen) {
    char *data = NULL;
    size_t n = 0;
    int rc = ENG_OK;
    if (o->system_file) {
        if ((rc = eng_read_file(o->system_file, &data, &n, err, errlen))) return rc;
        size_t i = 0;
        while (i < n && (data[i] == ' ' || data[i] == '\n' || data[i] == '\r' || data[i] == '\t')) i++;
        json_error_t je;
        json_t *j = (i < n && (data[i] == '[' || data[i] == '"')) ? json_loadb(data, n, JSON_DECODE_ANY | JSON_REJECT_DUPLICATES, &je) : NULL;
        if (j) {
            rc = hx_system_from_json(j, o->system_file, 0, "system", &s->system, &s->n_system, err, errlen);
            json_decref(j);
        } else if (memchr(data, '\0', n)) {
            hx_errf_at(err, errlen, o->system_file, 0, NULL, "contains a NUL byte");
            rc = ENG_ERR_FORMAT;
        } else if (!(s->system = calloc(1, sizeof *s->system)) ||
                   hx_block_init(&s->system[0], HX_BLOCK_TEXT, data, NULL, NULL, NULL, false)) {
            rc = ENG_ERR_NOMEM;
        } else {
            s->n_system = 1;
        }
        free(data);
        if (rc) return rc;
    }
    if (o->tools_file) {
        if ((rc = eng_read_file(o->tools_file, &data, &n, err, errlen))) return rc;
        json_error_t je;
        json_t *j = json_loadb(data, n, JSON_REJECT_DUPLICATES, &je);
        free(data);
        if (!j) {
            hx_errf_at(err, errlen, o->tools_file, je.line, NULL, "invalid JSON at column %d: %s", je.column, je.text);
            return ENG_ERR_FORMAT;
        }
        rc = hx_tools_from_json(j, o->tools_file, 0, "tools", &s->tools, &s->n_tools, err, errlen);
        json_decref(j);
        if (rc) return rc;
        if (s->n_tools == 0) s->tools = (free(s->tools), NULL);
    }
    return ENG_OK;
}

int hx_import_buffer(const hx_import_opts *o, const char *path, const char *data, size_t n, hx_transcript *out,
                     int64_t *n_skipped, char *err, size_t errlen) {
    memset(out, 0, sizeof *out);
    int64_t skipped_local = 0;
    if (!n_skipped) n_skipped = &skipped_local;
    *n_skipped = 0;
    if (!path) path = "-";
    standin si = {0};
    int rc = load_overrides(o, &si, err, errlen);
    if (rc) {
        standin_free(&si);
        return rc;
    }
    if (!(out->path = hx_strdup(path))) {
        standin_free(&si);
        return ENG_ERR_NOMEM;
    }
    switch (o->format) {
    case HX_IMPORT_ANTHROPIC:
    case HX_IMPORT_OPENAI:
        rc = import_bodies(o, path, data, n, out, n_skipped, err, errlen);
        break;
    case HX_IMPORT_SWE_AGENT:
        rc = import_swe(o, path, data, n, out, n_skipped, err, errlen);
        break;
    case HX_IMPORT_CLAUDE_CODE: {
        bool have_sys = o->system_file != NULL, have_tools = o->tools_file != NULL;
        if (!have_sys || !have_tools) { /* the built-in stand-in */
            hx_block *sys = NULL;
            hx_tool *tools = NULL;
            int32_t ns = 0, nt = 0;
            rc = hx_synth_agent_prefix(0, 24000, NULL, &sys, &ns, &tools, &nt);
            if (rc) break;
            if (!have_sys) {
                si.system = sys, si.n_system = ns, si.billing = true;
            } else {
                free_blocks(sys, ns);
            }
            if (!have_tools) si.tools = tools, si.n_tools = nt;
            else free_tools(tools, nt);
        }
        rc = import_claude_code(o, path, data, n, out, n_skipped, &si, err, errlen);
        break;
    }
    default:
        eng_errf(err, errlen, "import: unknown format %d", (int)o->format);
        rc = ENG_ERR_ARG;
    }
    /* overrides replace the system prompt / tools of formats that carry their own */
    if (rc == ENG_OK && o->format != HX_IMPORT_CLAUDE_CODE && (o->system_file || o->tools_file)) {
        for (int32_t i = 0; i < out->n && rc == ENG_OK; i++) {
            hx_request *q = &out->reqs[i];
            standin part = si;
            if (o->system_file) {
                free_blocks(q->system, q->n_system);
                q->system = NULL, q->n_system = 0;
            } else {
                part.n_system = 0;
            }
            if (o->tools_file) {
                free_tools(q->tools, q->n_tools);
                q->tools = NULL, q->n_tools = 0;
            } else {
                part.n_tools = 0;
            }
            rc = standin_apply(&part, q, NULL);
        }
    }
    standin_free(&si);
    if (rc) hx_transcript_free(out);
    return rc;
}

int hx_import_file(const hx_import_opts *o, const char *path, hx_transcript *out, int64_t *n_skipped, char *err,
                   size_t errlen) {
    memset(out, 0, sizeof *out);
    if (n_skipped) *n_skipped = 0;
    char *data = NULL;
    size_t n = 0;
    int rc = eng_read_file(path, &data, &n, err, errlen);
    if (rc) return rc;
    rc = hx_import_buffer(o, path, data, n, out, n_skipped, err, errlen);
    free(data);
    return rc;
}
